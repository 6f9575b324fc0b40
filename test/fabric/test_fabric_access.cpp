/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The provider's one access mapping: fi_mr(3) access flags onto NICMR_ACCESS_* (fabric/
 * fi_access.h) on its own, then through the installed libfabric as an application sees it:
 * the mkey rights a registration's raw key carries (byte 40, doc/registration.md "Raw keys")
 * for each fi_mr access set, and -FI_EINVAL with nothing made for every other bit, on every
 * registration call.
 */
#include <sys/uio.h>

#include <iterator>

#include "fi_access.h"
#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

using fabric::kFiAccess;
using fabric::native_access;

/* fi_mr(3)'s six access flags and the NICMR_ACCESS_* bit each becomes. */
struct Flag {
	uint64_t fi;
	uint64_t native;
};
constexpr Flag kFlags[] = {
	{FI_SEND, NICMR_ACCESS_SEND},
	{FI_RECV, NICMR_ACCESS_RECV},
	{FI_READ, NICMR_ACCESS_READ},
	{FI_WRITE, NICMR_ACCESS_WRITE},
	{FI_REMOTE_READ, NICMR_ACCESS_REMOTE_READ},
	{FI_REMOTE_WRITE, NICMR_ACCESS_REMOTE_WRITE},
};

/* mkey bits as the raw key carries them (lib/mr MkeyAccess: lr, lw, rr, rw, a). */
constexpr uint8_t kBitLr = 1, kBitLw = 2, kBitRr = 4, kBitRw = 8, kBitA = 16;

TEST(FabricAccess, EachFiFlagIsItsNicmrBit)
{
	for (const Flag &f : kFlags) {
		uint64_t a = ~0ull;
		ASSERT_EQ(native_access(f.fi, &a), 0) << std::hex << f.fi;
		EXPECT_EQ(a, f.native) << std::hex << f.fi;
	}
	uint64_t a = ~0ull;
	ASSERT_EQ(native_access(0, &a), 0);
	EXPECT_EQ(a, 0u) << "no flag, no bit";
}

TEST(FabricAccess, EverySetOfTheSixMapsBitByBit)
{
	for (unsigned i = 0; i < (1u << std::size(kFlags)); ++i) {
		uint64_t fi = 0, want = 0;
		for (unsigned b = 0; b < std::size(kFlags); ++b) {
			if (i & (1u << b)) {
				fi |= kFlags[b].fi;
				want |= kFlags[b].native;
			}
		}
		uint64_t a = ~0ull;
		ASSERT_EQ(native_access(fi, &a), 0) << std::hex << fi;
		EXPECT_EQ(a, want) << std::hex << fi;
	}
}

TEST(FabricAccess, EveryOtherBitIsEinvalAndMapsNothing)
{
	unsigned refused = 0;
	for (unsigned b = 0; b < 64; ++b) {
		const uint64_t bit = 1ull << b;
		if (bit & kFiAccess)
			continue;
		for (uint64_t fi : {bit, uint64_t{bit | FI_SEND | FI_REMOTE_WRITE}}) {
			uint64_t a = 0x5a5a;
			EXPECT_EQ(native_access(fi, &a), -FI_EINVAL) << "bit " << b;
			EXPECT_EQ(a, 0x5a5au) << "bit " << b << ": untouched";
		}
		refused++;
	}
	EXPECT_EQ(refused, 64u - 6u);
	/* FI_COLLECTIVE is an fi_mr(3) flag, for the FI_COLLECTIVE capability nicmr never offers.
	 */
	uint64_t a = 0;
	EXPECT_EQ(native_access(FI_COLLECTIVE | FI_SEND, &a), -FI_EINVAL);
}

/* fi_mr access set -> the mkey rights its key gets (doc/registration.md, "Access mapping"). */
struct Grant {
	uint64_t fi;
	uint8_t bits;
};
constexpr Grant kGrants[] = {
	{0, 0},
	{FI_SEND, kBitLr},
	{FI_WRITE, kBitLr},
	{FI_RECV, kBitLw},
	{FI_READ, kBitLw},
	{FI_REMOTE_READ, kBitRr},
	{FI_REMOTE_WRITE, kBitRw | kBitA | kBitLw},
	{FI_SEND | FI_RECV, kBitLr | kBitLw},
	{FI_READ | FI_REMOTE_READ, kBitLw | kBitRr},
	{FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
	 kBitLr | kBitLw | kBitRr | kBitRw | kBitA},
};

uint8_t raw_access(fid_mr *mr)
{
	uint8_t raw[64] = {};
	size_t size = sizeof(raw);
	uint64_t base = 0;
	EXPECT_EQ(fi_mr_raw_attr(mr, &base, raw, &size, 0), 0);
	EXPECT_EQ(size, sizeof(raw));
	return raw[40];
}

using FabricAccessReg = FabricFixture;

TEST_F(FabricAccessReg, EachAccessSetGivesItsKeyTheTabledRights)
{
	Buf buf(4096);
	for (const Grant &g : kGrants) {
		Fid<fid_mr> mr;
		ASSERT_EQ(
			fi_mr_reg(domain_.get(), buf.get(), 4096, g.fi, 0, 0, 0, mr.out(), nullptr),
			0)
			<< std::hex << g.fi;
		EXPECT_EQ(raw_access(mr.get()), g.bits) << "fi_mr_reg " << std::hex << g.fi;

		iovec iov = {buf.get(), 4096};
		Fid<fid_mr> v;
		ASSERT_EQ(fi_mr_regv(domain_.get(), &iov, 1, g.fi, 0, 0, 0, v.out(), nullptr), 0);
		EXPECT_EQ(raw_access(v.get()), g.bits) << "fi_mr_regv " << std::hex << g.fi;

		fi_mr_attr attr{};
		attr.mr_iov = &iov;
		attr.iov_count = 1;
		attr.access = g.fi;
		Fid<fid_mr> at;
		ASSERT_EQ(fi_mr_regattr(domain_.get(), &attr, 0, at.out()), 0);
		EXPECT_EQ(raw_access(at.get()), g.bits) << "fi_mr_regattr " << std::hex << g.fi;
	}
}

TEST_F(FabricAccessReg, SubMrGetsTheTabledRightsOfItsOwnAccess)
{
	Buf buf(2 * 4096);
	Fid<fid_mr> base;
	const uint64_t all =
		FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), buf.len(), all, 0, 0, 0, base.out(), nullptr),
		  0);
	for (const Grant &g : kGrants) {
		iovec iov = {buf.get() + 4096, 4096};
		fi_mr_attr attr{};
		attr.mr_iov = &iov;
		attr.iov_count = 1;
		attr.access = g.fi;
		Fid<fid_mr> sub;
		ASSERT_EQ(mr_ops(domain_.get())
				  ->regattr(domain_.get(), &attr, base.get(), 0, 0, sub.out()),
			  0)
			<< std::hex << g.fi;
		EXPECT_EQ(raw_access(sub.get()), g.bits) << "sub-MR " << std::hex << g.fi;
	}
}

TEST_F(FabricAccessReg, EveryBitOutsideTheSixIsEinvalOnEveryCallAndMakesNothing)
{
	Buf buf(2 * 4096);
	Fid<fid_mr> base;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), buf.len(), kRw, 0, 0, 0, base.out(), nullptr),
		  0);
	const auto before = stats(domain_.get());
	fid_domain *d = domain_.get();
	iovec one = {buf.get(), 4096};
	iovec two[2] = {{buf.get(), 4096}, {buf.get() + 4096, 4096}};
	for (unsigned b = 0; b < 64; ++b) {
		const uint64_t bit = 1ull << b;
		if (bit & kFiAccess)
			continue;
		const uint64_t access = kRw | bit;
		fid_mr *mr = nullptr;
		EXPECT_EQ(fi_mr_reg(d, buf.get(), 4096, access, 0, 0, 0, &mr, nullptr), -FI_EINVAL)
			<< "fi_mr_reg bit " << b;
		EXPECT_EQ(fi_mr_regv(d, &one, 1, access, 0, 0, 0, &mr, nullptr), -FI_EINVAL)
			<< "fi_mr_regv(1) bit " << b;
		EXPECT_EQ(fi_mr_regv(d, two, 2, access, 0, 0, 0, &mr, nullptr), -FI_EINVAL)
			<< "fi_mr_regv(2) bit " << b;
		fi_mr_attr attr{};
		attr.mr_iov = &one;
		attr.iov_count = 1;
		attr.access = access;
		EXPECT_EQ(fi_mr_regattr(d, &attr, 0, &mr), -FI_EINVAL) << "regattr bit " << b;
		EXPECT_EQ(mr_ops(d)->regattr(d, &attr, base.get(), 0, 0, &mr), -FI_EINVAL)
			<< "sub-MR bit " << b;
		EXPECT_EQ(mr, nullptr);
	}
	expect_same(before, stats(domain_.get()));
}

} // namespace
} // namespace nicmr::test
