/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * On-demand-paging MRs through the installed libfabric (doc/libfabric.md, doc/odp.md):
 * fi_mr_regattr with FI_NICMR_MR_ON_DEMAND pins nothing, fi_nicmr_mr_ops.advise makes pages
 * present, and an RDMA WRITE through fi_write then lands byte for byte; every refusal with
 * its code, and nothing left behind.
 */
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include <rdma/fi_rma.h>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;

/* Anonymous memory nothing has touched. */
struct Untouched {
	explicit Untouched(size_t n) : len(n)
	{
		void *m = mmap(nullptr, n, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		p = m == MAP_FAILED ? nullptr : static_cast<char *>(m);
	}
	~Untouched()
	{
		if (p)
			munmap(p, len);
	}
	char *p = nullptr;
	size_t len;
};

fi_mr_attr attr_of(iovec *iov, void *buf, size_t len, uint64_t access)
{
	iov->iov_base = buf;
	iov->iov_len = len;
	fi_mr_attr a{};
	a.mr_iov = iov;
	a.iov_count = 1;
	a.access = access;
	a.iface = FI_HMEM_SYSTEM;
	return a;
}

class FabricOdp : public FabricFixture {
protected:
	/* A device of 1024 keys with the default pool: its cap leaves the on-demand mkey cache
	 * its indices (doc/odp.md, "Indices"). */
	DeviceSpecScope spec_{"emu:mkeys=1024"};
	void SetUp() override
	{
		FabricFixture::SetUp();
		if (HasFatalFailure())
			return;
		ops_ = mr_ops(domain_.get());
		ASSERT_NE(ops_, nullptr);
		ASSERT_NE(mem_.p, nullptr);
		before_ = stats(domain_.get());
	}
	void TearDown() override
	{
		if (domain_.get()) {
			const nicmr_device_stats after = stats(domain_.get());
			EXPECT_EQ(after.mrs, before_.mrs);
			EXPECT_EQ(after.pinned_pages, before_.pinned_pages);
			EXPECT_EQ(after.slow_mappings, before_.slow_mappings);
		}
		FabricFixture::TearDown();
	}
	int reg(void *buf, size_t len, uint64_t access, uint64_t flags, fid_mr **mr)
	{
		iovec iov;
		const fi_mr_attr a = attr_of(&iov, buf, len, access);
		return fi_mr_regattr(domain_.get(), &a, flags, mr);
	}
	fi_nicmr_mr_ops *ops_ = nullptr;
	Untouched mem_{kLen};
	nicmr_device_stats before_{};
};

TEST_F(FabricOdp, RegattrPinsNothingAndAdviceLetsAWriteLand)
{
	Fid<fid_mr> odp;
	ASSERT_EQ(reg(mem_.p, kLen, FI_REMOTE_WRITE | FI_REMOTE_READ | FI_WRITE,
		      FI_NICMR_MR_ON_DEMAND, odp.out()),
		  0);
	EXPECT_NE(fi_mr_key(odp.get()), FI_KEY_NOTAVAIL);
	EXPECT_EQ(stats(domain_.get()).pinned_pages, before_.pinned_pages) << "nothing pinned";
	EXPECT_EQ(ops_->advise(odp.get(), 1, 1, uintptr_t(mem_.p) + 4096, 8192), 0);

	/* Two endpoints of the domain; a WRITE from one into the advised pages. */
	Ep a, b;
	open_ep(domain_.get(), info_.p(), &a);
	open_ep(domain_.get(), info_.p(), &b);
	connect(&a, &b);
	connect(&b, &a);
	Buf src(8192);
	Fid<fid_mr> lmr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), src.get(), 8192, FI_WRITE, 0, 0, 0, lmr.out(), nullptr),
		  0);
	for (size_t i = 0; i < 8192; i++)
		src.get()[i] = static_cast<char>(i * 13 + 1);
	int ctx = 0;
	ASSERT_EQ(fi_write(a.ep.get(), src.get(), 8192, fi_mr_desc(lmr.get()), a.peer,
			   uintptr_t(mem_.p) + 4096, fi_mr_key(odp.get()), &ctx),
		  0);
	fi_cq_msg_entry e{};
	ASSERT_EQ(next(a.cq.get(), &e), 1);
	EXPECT_EQ(e.op_context, &ctx);
	EXPECT_EQ(std::memcmp(mem_.p + 4096, src.get(), 8192), 0);
	a.close();
	b.close();
	lmr.reset();
	odp.reset();
}

TEST_F(FabricOdp, AdviceRefusalsWithTheirCodes)
{
	Fid<fid_mr> odp, ro, plain;
	ASSERT_EQ(reg(mem_.p, kLen, FI_REMOTE_WRITE | FI_WRITE, FI_NICMR_MR_ON_DEMAND, odp.out()),
		  0);
	ASSERT_EQ(reg(mem_.p, kLen, FI_REMOTE_READ, FI_NICMR_MR_ON_DEMAND, ro.out()), 0);
	Buf b(4096);
	ASSERT_EQ(fi_mr_reg(domain_.get(), b.get(), 4096, FI_READ, 0, 0, 0, plain.out(), nullptr),
		  0);
	const uintptr_t at = uintptr_t(mem_.p);
	EXPECT_EQ(ops_->advise(odp.get(), 0, 0, at + kLen - 1, 2), -FI_EFAULT) << "outside";
	EXPECT_EQ(ops_->advise(odp.get(), 3, 0, at, 4096), -FI_EOPNOTSUPP) << "advice";
	EXPECT_EQ(ops_->advise(odp.get(), 0, 2, at, 4096), -FI_EINVAL) << "flag";
	EXPECT_EQ(ops_->advise(odp.get(), 0, 0, at, size_t{1} << 32), -FI_EINVAL) << "length";
	EXPECT_EQ(ops_->advise(nullptr, 0, 0, at, 4096), -FI_EINVAL);
	EXPECT_EQ(ops_->advise(ro.get(), 1, 0, at, 4096), -FI_EPERM) << "write without a right";
	EXPECT_EQ(ops_->advise(plain.get(), 0, 0, uintptr_t(b.get()), 4096), -FI_ENOENT);
	const uint64_t pinned = stats(domain_.get()).pinned_pages; /* plain's page */
	EXPECT_EQ(ops_->advise(odp.get(), 2, 0, at, 0), 0) << "an empty range does nothing";
	EXPECT_EQ(stats(domain_.get()).pinned_pages, pinned) << "no refusal pinned a page";
}

TEST_F(FabricOdp, RegistrationRefusalsWithTheirCodes)
{
	fid_mr *mr = nullptr;
	const uint64_t rw = FI_REMOTE_WRITE | FI_WRITE;
	EXPECT_EQ(reg(mem_.p, kLen, rw, FI_NICMR_MR_ON_DEMAND | FI_NICMR_MR_SINGLE_USE, &mr),
		  -FI_EBADFLAGS);
	EXPECT_EQ(reg(mem_.p, kLen, rw, FI_NICMR_MR_ON_DEMAND | FI_RMA_EVENT, &mr), -FI_EBADFLAGS);
	iovec two[2] = {{mem_.p, 4096}, {mem_.p + 8192, 4096}};
	EXPECT_EQ(fi_mr_regv(domain_.get(), two, 2, rw, 0, 0, FI_NICMR_MR_ON_DEMAND, &mr, nullptr),
		  -FI_EBADFLAGS)
		<< "vectored";
	Untouched big((size_t{1} << 30) + 4096);
	ASSERT_NE(big.p, nullptr);
	EXPECT_EQ(reg(big.p, (size_t{1} << 30) + 4096, rw, FI_NICMR_MR_ON_DEMAND, &mr), -FI_EINVAL)
		<< "above 1 GiB";
	/* fi_mr_reg takes the flag too. */
	Fid<fid_mr> odp;
	ASSERT_EQ(fi_mr_reg(domain_.get(), mem_.p, kLen, rw, 0, 0, FI_NICMR_MR_ON_DEMAND, odp.out(),
			    nullptr),
		  0);
	EXPECT_EQ(ops_->advise(odp.get(), 0, 0, uintptr_t(mem_.p), 4096), 0);
	odp.reset();
	EXPECT_EQ(stats(domain_.get()).mrs, before_.mrs);
}

TEST(FabricOdpDomain, WithoutVirtualAddressesOrOnDemandPagingItIsRefused)
{
	Untouched m(8192);
	iovec iov;
	const fi_mr_attr a = attr_of(&iov, m.p, 8192, FI_REMOTE_WRITE);
	{
		/* Offsets as addresses: on-demand MRs are at their virtual addresses. */
		DeviceSpecScope s("emu:mkeys=1024");
		Info info;
		Hints h(kAppMrMode & ~FI_MR_VIRT_ADDR);
		ASSERT_EQ(info.get(h), 0);
		Fid<fid_fabric> fab;
		Fid<fid_domain> dom;
		ASSERT_EQ(fi_fabric(info->fabric_attr, fab.out(), nullptr), 0);
		ASSERT_EQ(fi_domain(fab.get(), info.p(), dom.out(), nullptr), 0);
		fid_mr *mr = nullptr;
		EXPECT_EQ(fi_mr_regattr(dom.get(), &a, FI_NICMR_MR_ON_DEMAND, &mr), -FI_EBADFLAGS);
	}
	{
		DeviceSpecScope s("emu:mkeys=1024,odp=0");
		Info info;
		Hints h(kAppMrMode);
		ASSERT_EQ(info.get(h), 0);
		Fid<fid_fabric> fab;
		Fid<fid_domain> dom;
		ASSERT_EQ(fi_fabric(info->fabric_attr, fab.out(), nullptr), 0);
		ASSERT_EQ(fi_domain(fab.get(), info.p(), dom.out(), nullptr), 0);
		fid_mr *mr = nullptr;
		EXPECT_EQ(fi_mr_regattr(dom.get(), &a, FI_NICMR_MR_ON_DEMAND, &mr), -FI_EOPNOTSUPP);
		Fid<fid_mr> plain;
		ASSERT_EQ(fi_mr_regattr(dom.get(), &a, 0, plain.out()), 0);
		EXPECT_EQ(mr_ops(dom.get())->advise(plain.get(), 0, 0, uintptr_t(m.p), 4096),
			  -FI_EOPNOTSUPP);
	}
}

/* fi_getinfo's mr_cnt is read from the spec (fi_prov.cpp, device_spec) without opening the
 * device: it must be the opened device's pool cap, which leaves the on-demand mkey cache its
 * reserve by default (doc/libfabric.md, doc/odp.md "Indices"). */
TEST(FabricOdpDomain, MrCntIsThePoolCapOfTheOpenedDevice)
{
	const struct {
		const char *spec;
		size_t mr_cnt;
	} cases[] = {
		{"emu:mkeys=1024", 1023 - (16 * 7 + 64)},
		{"emu:mkeys=4096", 4095 - 176},
		{"emu:mkeys=256", 255 - 127}, /* the reserve is at most half */
		{"emu:mkeys=1024,odp_prefill=0", 1023 - 64},
		{"emu:mkeys=1024,odp_prefill=32", 1023 - (32 * 7 + 64)},
		{"emu:mkeys=1024,odp=0", 1023},
		{"emu:mkeys=1024,odp_cache=0", 1023},
		{"emu:mkeys=1024,programmer=cmd,mkey_by_name=1", 1023},
		{"emu:mkeys=1024,mkey_max=1023", 1023},
		{"emu:mkeys=1024,mkey_max=300", 300},
	};
	for (const auto &c : cases) {
		DeviceSpecScope s(c.spec);
		Info info;
		Hints h(kAppMrMode);
		ASSERT_EQ(info.get(h), 0) << c.spec;
		EXPECT_EQ(info->domain_attr->mr_cnt, c.mr_cnt) << c.spec;
		Fid<fid_fabric> fab;
		Fid<fid_domain> dom;
		ASSERT_EQ(fi_fabric(info->fabric_attr, fab.out(), nullptr), 0) << c.spec;
		ASSERT_EQ(fi_domain(fab.get(), info.p(), dom.out(), nullptr), 0) << c.spec;
		nicmr_device_attr at{};
		ASSERT_EQ(pool_ops(dom.get())->device_query(dom.get(), &at), 0);
		EXPECT_EQ(at.mkey_pool_max, c.mr_cnt) << c.spec;
	}
	/* A spec the device refuses is refused by fi_getinfo too. */
	DeviceSpecScope bad("emu:mkeys=1024,odp_prefill=257");
	Info info;
	Hints h(kAppMrMode);
	EXPECT_EQ(info.get(h), -FI_ENODATA);
}

/* mr_cnt is reachable: as many MRs register on the default 1024-key device, the next is
 * -FI_ENOSPC, and on-demand MRs still register beside them (the cache's own indices). */
TEST_F(FabricOdp, MrCntMrsRegisterAndOnDemandOnesStillDo)
{
	const size_t n = info_->domain_attr->mr_cnt;
	ASSERT_EQ(n, 1023u - 176);
	Buf b(4096);
	std::vector<fid_mr *> mrs;
	fid_mr *mr = nullptr;
	int ret = 0;
	while ((ret = fi_mr_reg(domain_.get(), b.get(), 4096, FI_REMOTE_READ, 0, 0, 0, &mr,
				nullptr)) == 0)
		mrs.push_back(mr);
	EXPECT_EQ(ret, -FI_ENOSPC);
	EXPECT_EQ(mrs.size(), n);
	Fid<fid_mr> odp;
	ASSERT_EQ(reg(mem_.p, kLen, FI_REMOTE_WRITE | FI_WRITE, FI_NICMR_MR_ON_DEMAND, odp.out()),
		  0);
	EXPECT_EQ(ops_->advise(odp.get(), 1, 1, uintptr_t(mem_.p), 4096), 0);
	odp.reset();
	for (fid_mr *m : mrs)
		ASSERT_EQ(fi_close(&m->fid), 0);
}

} // namespace
} // namespace nicmr::test
