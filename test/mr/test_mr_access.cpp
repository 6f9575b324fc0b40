/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * lib/mr's one access mapping (mr_access.h): NICMR_ACCESS_* onto mkey bits, as needs (lookups,
 * the data path), grants (registrations, sub-MRs; fi_mr(3)'s or ibv_reg_mr(3)'s rules) and
 * window grants. The tables are doc/registration.md's "Access mapping".
 */
#include <cerrno>
#include <gtest/gtest.h>
#include <iterator>

#include "mr_access.h"

using namespace nicmr::mr;

namespace {

constexpr uint8_t kLr = kAccessLocalRead, kLw = kAccessLocalWrite, kRr = kAccessRemoteRead,
		  kRw = kAccessRemoteWrite, kA = kAccessRemoteAtomic, kBind = kAccessMwBind;

constexpr uint64_t kSend = NICMR_ACCESS_SEND, kRecv = NICMR_ACCESS_RECV, kRead = NICMR_ACCESS_READ,
		   kWrite = NICMR_ACCESS_WRITE, kRemoteRead = NICMR_ACCESS_REMOTE_READ,
		   kRemoteWrite = NICMR_ACCESS_REMOTE_WRITE, kLocalWrite = NICMR_ACCESS_LOCAL_WRITE,
		   kRemoteAtomic = NICMR_ACCESS_REMOTE_ATOMIC, kMwBind = NICMR_ACCESS_MW_BIND;

/* Every NICMR_ACCESS_* bit, for the exhaustive checks (nicmr.h numbers them 0..8). */
constexpr uint64_t kEveryBit[] = {kSend,	kRecv,	     kRead,	    kWrite, kRemoteRead,
				  kRemoteWrite, kLocalWrite, kRemoteAtomic, kMwBind};
constexpr unsigned kSets = 1u << (sizeof(kEveryBit) / sizeof(kEveryBit[0]));

uint64_t set_of(unsigned i)
{
	uint64_t s = 0;
	for (unsigned b = 0; b < std::size(kEveryBit); ++b)
		if (i & (1u << b))
			s |= kEveryBit[b];
	return s;
}

struct Case {
	uint64_t access;
	int rc;
	uint8_t bits; /* when rc == 0 */
};

/* Needs: each bit is exactly the right it names, nothing added. */
const Case kNeed[] = {
	{0, 0, 0},
	{kSend, 0, kLr},
	{kWrite, 0, kLr},
	{kRecv, 0, kLw},
	{kRead, 0, kLw},
	{kLocalWrite, 0, kLw},
	{kRemoteRead, 0, kRr},
	{kRemoteWrite, 0, kRw}, /* a need: no atomics, no local write added */
	{kRemoteAtomic, 0, kA},
	{kMwBind, 0, kBind},
	{kSend | kRecv, 0, kLr | kLw},
	{kRemoteRead | kRemoteWrite | kRemoteAtomic, 0, kRr | kRw | kA},
	{kRemoteWrite | kLocalWrite, 0, kRw | kLw},
};

/* Grants under fi_mr(3)'s rules: none of LOCAL_WRITE, REMOTE_ATOMIC, MW_BIND in the set. */
const Case kFiGrant[] = {
	{0, 0, 0}, /* the OR of no flag grants nothing */
	{kSend, 0, kLr},
	{kWrite, 0, kLr},
	{kRecv, 0, kLw},
	{kRead, 0, kLw},
	{kRemoteRead, 0, kRr},
	{kRemoteWrite, 0, kRw | kA | kLw}, /* RMA write and atomic target; lw with rw/a */
	{kSend | kRecv, 0, kLr | kLw},
	{kRead | kWrite | kRemoteRead | kRemoteWrite, 0, kLr | kLw | kRr | kRw | kA},
	{kSend | kRecv | kRead | kWrite | kRemoteRead | kRemoteWrite, 0,
	 kLr | kLw | kRr | kRw | kA},
};

/* Grants under ibv_reg_mr(3)'s rules: LOCAL_WRITE, REMOTE_ATOMIC or MW_BIND in the set. */
const Case kIbvGrant[] = {
	{kLocalWrite, 0, kLr | kLw}, /* local read always */
	{kMwBind, 0, kLr | kBind},
	{kLocalWrite | kRemoteRead, 0, kLr | kLw | kRr},
	{kLocalWrite | kRemoteWrite, 0, kLr | kLw | kRw}, /* no atomics added */
	{kLocalWrite | kRemoteAtomic, 0, kLr | kLw | kA},
	{kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic | kMwBind, 0, kAccessAll},
	{kMwBind | kRemoteRead, 0, kLr | kRr | kBind},
	/* fi-only bits add their rights to an ibv set */
	{kMwBind | kRecv, 0, kLr | kLw | kBind},
	{kLocalWrite | kSend | kRead, 0, kLr | kLw},
	/* REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE */
	{kRemoteAtomic, -EINVAL, 0},
	{kRemoteAtomic | kRemoteRead, -EINVAL, 0},
	{kMwBind | kRemoteWrite, -EINVAL, 0},
	{kMwBind | kRemoteAtomic | kRemoteWrite | kRemoteRead, -EINVAL, 0},
	{kRemoteAtomic | kRecv, -EINVAL, 0}, /* RECV's lw does not stand in for LOCAL_WRITE */
	{kMwBind | kRemoteWrite | kRead, -EINVAL, 0},
};

/* Window grants: a non-empty set of remote rights, each exactly its right. */
const Case kWindow[] = {
	{kRemoteRead, 0, kRr},
	{kRemoteWrite, 0, kRw},
	{kRemoteAtomic, 0, kA},
	{kRemoteRead | kRemoteWrite | kRemoteAtomic, 0, kWindowAccess},
	{0, -EINVAL, 0},
	{kSend, -EINVAL, 0},
	{kRecv | kRemoteRead, -EINVAL, 0},
	{kRead | kRemoteWrite, -EINVAL, 0},
	{kWrite | kRemoteWrite, -EINVAL, 0},
	{kLocalWrite | kRemoteWrite, -EINVAL, 0},
	{kMwBind | kRemoteRead, -EINVAL, 0},
};

template <typename F> void expect_table(const char *what, const Case *c, size_t n, F map)
{
	for (size_t i = 0; i < n; ++i) {
		uint8_t bits = 0xc5; /* not a result any case has */
		EXPECT_EQ(map(c[i].access, &bits), c[i].rc)
			<< what << " " << std::hex << c[i].access;
		EXPECT_EQ(bits, c[i].rc ? 0xc5 : c[i].bits)
			<< what << " " << std::hex << c[i].access << (c[i].rc ? ": untouched" : "");
	}
}

/* Every bit outside NICMR_ACCESS_*, alone and added to a set the mapping takes: -EINVAL, the
 * output untouched. */
template <typename F> void expect_unknown_refused(const char *what, uint64_t good, F map)
{
	for (unsigned b = 0; b < 64; ++b) {
		const uint64_t flag = 1ull << b;
		if (flag & kNicmrAccessKnown)
			continue;
		for (uint64_t access : {flag, flag | good}) {
			uint8_t bits = 0xc5;
			EXPECT_EQ(map(access, &bits), -EINVAL) << what << " bit " << b;
			EXPECT_EQ(bits, 0xc5) << what << " bit " << b << ": untouched";
		}
	}
}

} // namespace

TEST(MrAccess, KnownBitsAreNicmrAccessBitsZeroToEight)
{
	EXPECT_EQ(kNicmrAccessKnown, (1ull << 9) - 1);
	uint64_t all = 0;
	for (uint64_t b : kEveryBit)
		all |= b;
	EXPECT_EQ(all, kNicmrAccessKnown);
}

TEST(MrAccess, EachNeedIsExactlyTheRightItNames)
{
	expect_table("need", kNeed, std::size(kNeed), access_need);
	/* The lookup's mapping is usable at compile time: nothing in it but bit tests. */
	static_assert([] {
		uint8_t b = 0;
		return access_need(NICMR_ACCESS_REMOTE_WRITE, &b) == 0 && b == kAccessRemoteWrite;
	}());
}

TEST(MrAccess, NeedRefusesEveryUnknownBit)
{
	expect_unknown_refused("need", kSend | kRemoteRead, access_need);
}

TEST(MrAccess, FiRulesGrantAsTabled)
{
	expect_table("fi grant", kFiGrant, std::size(kFiGrant), access_grant);
}

TEST(MrAccess, IbvRulesGrantAsTabled)
{
	expect_table("ibv grant", kIbvGrant, std::size(kIbvGrant), access_grant);
}

TEST(MrAccess, GrantRefusesEveryUnknownBit)
{
	expect_unknown_refused("grant (fi)", kRemoteWrite, access_grant);
	expect_unknown_refused("grant (ibv)", kLocalWrite | kRemoteWrite, access_grant);
}

TEST(MrAccess, WindowGrantsRemoteRightsAloneAsTabled)
{
	expect_table("window", kWindow, std::size(kWindow), access_window);
	expect_unknown_refused("window", kRemoteRead, access_window);
}

/* Every one of the 512 sets of NICMR_ACCESS_* bits: refused exactly when ibv_reg_mr(3)'s rule
 * is broken; otherwise the grant is a valid mkey, it grants what the same set asks as a need
 * (a key looked up with the access it was registered with passes), and it adds at most lr
 * (ibv: always) and, for fi_mr(3)'s REMOTE_WRITE, a and lw. */
TEST(MrAccess, EverySetGrantsAValidMkeyThatCoversItsOwnNeeds)
{
	unsigned refused = 0;
	for (unsigned i = 0; i < kSets; ++i) {
		const uint64_t s = set_of(i);
		const bool ibv = s & (kLocalWrite | kRemoteAtomic | kMwBind);
		const bool broken =
			ibv && (s & (kRemoteWrite | kRemoteAtomic)) && !(s & kLocalWrite);
		uint8_t grant = 0xc5, need = 0xc5;
		ASSERT_EQ(access_need(s, &need), 0) << std::hex << s;
		const int rc = access_grant(s, &grant);
		if (broken) {
			EXPECT_EQ(rc, -EINVAL) << std::hex << s;
			refused++;
			continue;
		}
		ASSERT_EQ(rc, 0) << std::hex << s;
		EXPECT_TRUE(access_valid(grant)) << std::hex << s;
		EXPECT_TRUE(access_covers(grant, need)) << std::hex << s;
		uint8_t extra = ibv ? kLr : 0;
		if (!ibv && (s & kRemoteWrite))
			extra |= kA | kLw;
		EXPECT_EQ(grant & ~(need | extra), 0) << std::hex << s;
	}
	/* The sets with REMOTE_WRITE or REMOTE_ATOMIC, an ibv bit and no LOCAL_WRITE: counted
	 * apart from the rule above, over the 2^9 sets. */
	unsigned want = 0;
	for (unsigned i = 0; i < kSets; ++i) {
		const uint64_t s = set_of(i);
		if (!(s & kLocalWrite) && (s & kRemoteAtomic))
			want++; /* REMOTE_ATOMIC is itself an ibv bit */
		else if (!(s & kLocalWrite) && !(s & kRemoteAtomic) && (s & kMwBind) &&
			 (s & kRemoteWrite))
			want++;
	}
	EXPECT_EQ(refused, want);
	EXPECT_EQ(want, 128u + 32u); /* 2^7 with RA and no LW; 2^5 with MW_BIND, RW, no LW or RA */
}

/* Under fi_mr(3)'s rules a set grants the OR of what its bits grant alone (no bit changes
 * another's meaning). */
TEST(MrAccess, FiRulesGrantEachBitOnItsOwn)
{
	const uint64_t fi[] = {kSend, kRecv, kRead, kWrite, kRemoteRead, kRemoteWrite};
	for (unsigned i = 0; i < (1u << std::size(fi)); ++i) {
		uint64_t s = 0;
		uint8_t parts = 0;
		for (unsigned b = 0; b < std::size(fi); ++b) {
			if (!(i & (1u << b)))
				continue;
			s |= fi[b];
			uint8_t one = 0;
			ASSERT_EQ(access_grant(fi[b], &one), 0);
			parts |= one;
		}
		uint8_t all = 0xc5;
		ASSERT_EQ(access_grant(s, &all), 0) << std::hex << s;
		EXPECT_EQ(all, parts) << std::hex << s;
	}
}

TEST(MrAccess, ValidityRequiresLocalWriteWithRemoteWriteOrAtomic)
{
	EXPECT_FALSE(access_valid(kAccessRemoteWrite));
	EXPECT_FALSE(access_valid(kAccessRemoteAtomic | kAccessLocalRead));
	EXPECT_TRUE(access_valid(kAccessRemoteWrite | kAccessLocalWrite));
	EXPECT_TRUE(access_valid(0));
	EXPECT_FALSE(access_valid(0x40));
	EXPECT_FALSE(access_valid(0x80));
}

TEST(MrAccess, CoversMeansEveryNeededBitGranted)
{
	EXPECT_TRUE(access_covers(kAccessAll, kAccessRemoteRead));
	EXPECT_TRUE(access_covers(kAccessLocalRead, 0));
	EXPECT_FALSE(access_covers(kAccessLocalRead, kAccessLocalRead | kAccessLocalWrite));
}
