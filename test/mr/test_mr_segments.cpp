/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Segmented regions in the engine: lookups that translate through a region's runs, explicit
 * MTT lists handed to the device, indirect (KLM) regions that hold their parts' keys, segment
 * slots that run out and come back, and every refused request with its code.
 */
#include <cerrno>
#include <gtest/gtest.h>
#include <memory>
#include <vector>

#include "mr_engine.h"

using namespace nicmr::mr;

namespace {

class RecordingProgrammer final : public MkeyProgrammer {
public:
	/* Indices from 1 upwards: these tests are about translations, not the pool. */
	int create_free_mkeys(uint32_t count, uint32_t *indices) override
	{
		for (uint32_t i = 0; i < count; i++)
			indices[i] = next++;
		return 0;
	}
	uint32_t next = 1;
	int bind(uint32_t, const BindParams &p) override
	{
		last = p;
		mtt.assign(p.mtt, p.mtt + p.mtt_count);
		return 0;
	}
	int revoke(uint32_t) override
	{
		revokes++;
		return 0;
	}
	BindParams last{};
	std::vector<uint64_t> mtt;
	int revokes = 0;
};

class RecordingIndirect final : public IndirectProgrammer {
public:
	int bind_indirect(uint32_t mkey, const IndirectParams &p) override
	{
		if (fail_bind)
			return fail_bind;
		last_mkey = mkey;
		parts.assign(p.parts, p.parts + p.count);
		start = p.start;
		live++;
		return 0;
	}
	int revoke_indirect(uint32_t) override
	{
		if (fail_revoke)
			return fail_revoke;
		live--;
		return 0;
	}
	int bind_odp(uint32_t mkey, const OdpParams &p) override
	{
		if (fail_bind)
			return fail_bind;
		last_mkey = mkey;
		odp = p;
		live++;
		return 0;
	}
	int fail_bind = 0, fail_revoke = 0, live = 0;
	uint32_t last_mkey = 0;
	uint64_t start = 0;
	std::vector<KlmPart> parts;
	OdpParams odp{};
};

constexpr uint8_t kRw =
	kAccessLocalRead | kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite;
constexpr uint64_t kVa = 0x7f0000100000;

class MrSegments : public ::testing::Test {
protected:
	void SetUp() override { make(kDefaultSegmentSlots); }
	void make(uint32_t slots)
	{
		e.reset();
		prog.next = 1; /* a new engine on a new device: its indices start again */
		EngineConfig c;
		c.index_count = 256;
		c.segment_slots = slots;
		ASSERT_EQ(Engine::create(c, prog, &e), 0);
	}
	int look(uint32_t k, uint64_t addr, uint64_t *iova, uint64_t len = 1,
		 uint8_t access = kAccessRemoteWrite)
	{
		LookupRequest r{k, addr, len, access, kAnyPd};
		LookupResult res{};
		int rc = e->lookup(r, &res);
		*iova = res.iova;
		return rc;
	}
	/* A plain region [addr, + len) at iova, to be a part of an indirect one. */
	uint32_t plain(uint64_t addr, uint64_t len, uint64_t iova, uint32_t pd = 3,
		       uint8_t access = kRw)
	{
		RegRequest r;
		r.addr = addr;
		r.len = len;
		r.access = access;
		r.pd = pd;
		r.iova = iova;
		uint32_t k = 0;
		EXPECT_EQ(e->reg(r, nullptr, &k), 0);
		return k;
	}
	RecordingProgrammer prog;
	RecordingIndirect ind;
	std::unique_ptr<Engine> e;
};

/* Three runs: [0, 0x1000) at 0x10000, [0x1000, 0x3000) at 0x50000, [0x3000, 0x3800) at 0x9000. */
const std::vector<nicmr::mr::Run> kRuns = {{0x1000, 0x10000}, {0x3000, 0x50000}, {0x3800, 0x9000}};

RegRequest segmented(const std::vector<nicmr::mr::Run> &runs, const std::vector<uint64_t> &mtt)
{
	RegRequest r;
	r.addr = kVa;
	r.len = runs.back().end;
	r.access = kRw;
	r.pd = 3;
	r.runs = runs.data();
	r.run_count = uint32_t(runs.size());
	r.mtt = mtt.data();
	r.mtt_count = uint32_t(mtt.size());
	return r;
}

TEST_F(MrSegments, LookupTranslatesEachAddressThroughItsRun)
{
	const std::vector<uint64_t> mtt = {0x10000, 0x50000, 0x51000, 0x9000};
	uint32_t k = 0;
	ASSERT_EQ(e->reg(segmented(kRuns, mtt), nullptr, &k), 0);
	EXPECT_EQ(prog.mtt, mtt) << "the MTT list goes to the device as given";
	EXPECT_EQ(prog.last.start, kVa);
	uint64_t iova = 0;
	EXPECT_EQ(look(k, kVa, &iova), 0);
	EXPECT_EQ(iova, 0x10000u);
	EXPECT_EQ(look(k, kVa + 0xfff, &iova), 0);
	EXPECT_EQ(iova, 0x10fffu);
	EXPECT_EQ(look(k, kVa + 0x1000, &iova), 0);
	EXPECT_EQ(iova, 0x50000u);
	EXPECT_EQ(look(k, kVa + 0x2fff, &iova, 0x801), 0) << "a range across a joint is valid";
	EXPECT_EQ(iova, 0x51fffu);
	EXPECT_EQ(look(k, kVa + 0x37ff, &iova), 0);
	EXPECT_EQ(iova, 0x97ffu);
	EXPECT_EQ(look(k, kVa + 0x3800, &iova), -ERANGE);
	EXPECT_EQ(e->table().slots_used(), 1u);
	ASSERT_EQ(e->dereg(k, nullptr), 0);
	EXPECT_EQ(look(k, kVa, &iova), -ENOKEY);
	EXPECT_EQ(e->table().slots_used(), 0u);
}

TEST_F(MrSegments, ZeroBasedSegmentedRegionTranslatesOffsets)
{
	const std::vector<uint64_t> mtt = {0x10000, 0x50000, 0x51000, 0x9000};
	RegRequest r = segmented(kRuns, mtt);
	r.flags = kRegZeroBased;
	uint32_t k = 0;
	ASSERT_EQ(e->reg(r, nullptr, &k), 0);
	uint64_t iova = 0;
	EXPECT_EQ(look(k, 0x1800, &iova), 0);
	EXPECT_EQ(iova, 0x50800u);
	EXPECT_EQ(look(k, kVa, &iova), -ERANGE);
	EXPECT_EQ(e->dereg(k, nullptr), 0);
}

TEST_F(MrSegments, MalformedRunsAreEinvalAndTakeNothing)
{
	const std::vector<uint64_t> mtt = {0x10000};
	const auto free_before = e->keys().ring_free_count();
	uint32_t k = 0;
	std::vector<nicmr::mr::Run> short_end = {{0x1000, 0x10000}, {0x2000, 0x20000}};
	RegRequest r = segmented(short_end, mtt);
	r.len = 0x3000; /* the last run must end at len */
	EXPECT_EQ(e->reg(r, nullptr, &k), -EINVAL);
	std::vector<nicmr::mr::Run> not_rising = {{0x1000, 0x10000}, {0x1000, 0x20000}};
	EXPECT_EQ(e->reg(segmented(not_rising, mtt), nullptr, &k), -EINVAL);
	std::vector<nicmr::mr::Run> wraps = {{0x1000, ~uint64_t{0} - 0x10}};
	EXPECT_EQ(e->reg(segmented(wraps, mtt), nullptr, &k), -EINVAL);
	std::vector<nicmr::mr::Run> many(kMaxRuns + 1);
	for (uint32_t i = 0; i < many.size(); i++)
		many[i] = {uint64_t(i + 1) * 0x1000, uint64_t(i) * 0x10000 + 0x100000};
	EXPECT_EQ(e->reg(segmented(many, mtt), nullptr, &k), -EINVAL);
	RegRequest empty_mtt = segmented(kRuns, mtt);
	empty_mtt.mtt_count = 0;
	EXPECT_EQ(e->reg(empty_mtt, nullptr, &k), -EINVAL);
	RegRequest pool_and_runs = segmented(kRuns, mtt);
	pool_and_runs.flags = kRegPoolLookup;
	EXPECT_EQ(e->reg(pool_and_runs, nullptr, &k), -EINVAL);
	EXPECT_EQ(e->keys().ring_free_count(), free_before);
	EXPECT_EQ(e->table().slots_used(), 0u);
}

TEST_F(MrSegments, SlotsRunOutWithEnospcAndComeBack)
{
	make(2);
	const std::vector<uint64_t> mtt = {0x10000, 0x50000, 0x51000, 0x9000};
	uint32_t a = 0, b = 0, c = 0;
	ASSERT_EQ(e->reg(segmented(kRuns, mtt), nullptr, &a), 0);
	ASSERT_EQ(e->reg(segmented(kRuns, mtt), nullptr, &b), 0);
	const auto free_before = e->keys().ring_free_count();
	EXPECT_EQ(e->reg(segmented(kRuns, mtt), nullptr, &c), -ENOSPC);
	EXPECT_EQ(e->keys().ring_free_count(), free_before);
	ASSERT_EQ(e->dereg(a, nullptr), 0);
	ASSERT_EQ(e->reg(segmented(kRuns, mtt), nullptr, &c), 0);
	uint64_t iova = 0;
	EXPECT_EQ(look(a, kVa, &iova), -ENOKEY) << "the slot's new owner does not revive a";
	EXPECT_EQ(look(c, kVa + 0x1000, &iova), 0);
	EXPECT_EQ(iova, 0x50000u);
	EXPECT_EQ(e->dereg(b, nullptr), 0);
	EXPECT_EQ(e->dereg(c, nullptr), 0);
	EXPECT_EQ(e->table().slots_used(), 0u);
}

TEST_F(MrSegments, SubMrOfASegmentedRegionIsEopnotsupp)
{
	const std::vector<uint64_t> mtt = {0x10000, 0x50000, 0x51000, 0x9000};
	uint32_t k = 0, sub = 0;
	ASSERT_EQ(e->reg(segmented(kRuns, mtt), nullptr, &k), 0);
	RegRequest s;
	s.addr = kVa;
	s.len = 0x10;
	s.access = kAccessLocalRead;
	EXPECT_EQ(e->reg_sub(k, s, nullptr, &sub), -EOPNOTSUPP);
	EXPECT_EQ(e->dereg(k, nullptr), 0);
}

class MrIndirect : public MrSegments {
protected:
	/* Two parts: 0x100 bytes of p1 from 0x10080, 0x3000 bytes of p2 from its start. */
	void SetUp() override
	{
		MrSegments::SetUp();
		p1 = plain(0x10000, 0x1000, 0x90000);
		p2 = plain(0x40000, 0x3000, 0xa0000);
		parts = {{0x10080, p1, 0x100}, {0x40000, p2, 0x3000}};
		runs = {{0x100, 0x90080}, {0x3100, 0xa0000}};
	}
	IndirectRequest request()
	{
		IndirectRequest r;
		r.addr = 0x10080;
		r.len = 0x3100;
		r.access = kRw;
		r.pd = 3;
		r.parts = parts.data();
		r.part_count = uint32_t(parts.size());
		r.runs = runs.data();
		r.run_count = uint32_t(runs.size());
		return r;
	}
	uint32_t p1 = 0, p2 = 0;
	std::vector<KlmPart> parts;
	std::vector<nicmr::mr::Run> runs;
};

TEST_F(MrIndirect, HoldsItsPartsUntilDeregistered)
{
	uint32_t k = 0;
	ASSERT_EQ(e->reg_indirect(request(), ind, nullptr, &k), 0);
	EXPECT_EQ(ind.last_mkey, k);
	ASSERT_EQ(ind.parts.size(), 2u);
	EXPECT_EQ(ind.parts[1].mkey, p2);
	EXPECT_EQ(ind.start, 0x10080u);
	uint64_t iova = 0;
	EXPECT_EQ(look(k, 0x10080 + 0x100 + 5, &iova), 0);
	EXPECT_EQ(iova, 0xa0005u);
	EXPECT_EQ(e->dereg(p1, nullptr), -EBUSY);
	EXPECT_EQ(e->dereg(p2, nullptr), -EBUSY);
	const int revokes = prog.revokes;
	ASSERT_EQ(e->dereg(k, nullptr), 0);
	EXPECT_EQ(ind.live, 0) << "the indirect programmer revokes what it bound";
	EXPECT_EQ(prog.revokes, revokes) << "not the MTT programmer";
	EXPECT_EQ(look(k, 0x10080, &iova), -ENOKEY);
	EXPECT_EQ(e->dereg(p1, nullptr), 0);
	EXPECT_EQ(e->dereg(p2, nullptr), 0);
}

TEST_F(MrIndirect, ZeroBasedStartsAtZero)
{
	IndirectRequest r = request();
	r.flags = kRegZeroBased;
	uint32_t k = 0;
	ASSERT_EQ(e->reg_indirect(r, ind, nullptr, &k), 0);
	EXPECT_EQ(ind.start, 0u);
	uint64_t iova = 0;
	EXPECT_EQ(look(k, 0, &iova), 0);
	EXPECT_EQ(iova, 0x90080u);
	EXPECT_EQ(e->dereg(k, nullptr), 0);
}

TEST_F(MrIndirect, RefusalsWithTheirCodesDropEveryHold)
{
	const auto free_before = e->keys().ring_free_count();
	uint32_t k = 0;
	IndirectRequest r = request();
	r.flags = kRegSingleUse;
	EXPECT_EQ(e->reg_indirect(r, ind, nullptr, &k), -EOPNOTSUPP);
	r = request();
	r.part_count = 0;
	EXPECT_EQ(e->reg_indirect(r, ind, nullptr, &k), -EINVAL);
	r = request();
	r.len = 0x3000; /* parts sum to 0x3100 (and the runs end there) */
	runs.back().end = 0x3000;
	EXPECT_EQ(e->reg_indirect(r, ind, nullptr, &k), -EINVAL);
	runs.back().end = 0x3100;
	parts[0].byte_count = 0;
	EXPECT_EQ(e->reg_indirect(request(), ind, nullptr, &k), -EINVAL);
	parts[0].byte_count = 0x100;
	/* The second part is checked after the first was held: both holds go. */
	parts[1].mkey = p2 + 1; /* stale variant */
	EXPECT_EQ(e->reg_indirect(request(), ind, nullptr, &k), -ENOKEY);
	parts[1].mkey = p2;
	parts[1].address = 0x40001; /* 0x3000 bytes from there leave p2 */
	EXPECT_EQ(e->reg_indirect(request(), ind, nullptr, &k), -ERANGE);
	parts[1].address = 0x40000;
	r = request();
	r.pd = 4;
	EXPECT_EQ(e->reg_indirect(r, ind, nullptr, &k), -EPERM);
	r = request();
	r.access = kRw | kAccessRemoteAtomic;
	EXPECT_EQ(e->reg_indirect(r, ind, nullptr, &k), -EACCES);
	ind.fail_bind = -EIO;
	EXPECT_EQ(e->reg_indirect(request(), ind, nullptr, &k), -EIO);
	ind.fail_bind = 0;
	EXPECT_EQ(e->keys().ring_free_count(), free_before);
	EXPECT_EQ(e->table().slots_used(), 0u);
	/* No hold was left: the parts go. */
	EXPECT_EQ(e->dereg(p1, nullptr), 0);
	EXPECT_EQ(e->dereg(p2, nullptr), 0);
}

TEST_F(MrIndirect, FailedRevokeLeavesItRegistered)
{
	uint32_t k = 0;
	ASSERT_EQ(e->reg_indirect(request(), ind, nullptr, &k), 0);
	ind.fail_revoke = -EIO;
	EXPECT_EQ(e->dereg(k, nullptr), -EIO);
	uint64_t iova = 0;
	EXPECT_EQ(look(k, 0x10080, &iova), 0);
	EXPECT_EQ(iova, 0x90080u);
	EXPECT_EQ(e->dereg(p1, nullptr), -EBUSY);
	ind.fail_revoke = 0;
	EXPECT_EQ(e->dereg(k, nullptr), 0);
	EXPECT_EQ(e->dereg(p1, nullptr), 0);
	EXPECT_EQ(e->dereg(p2, nullptr), 0);
}

/* On-demand-paging regions (doc/odp.md): the indirect programmer makes and takes back their
 * mkey, lookups give the VA, nothing may be built on them. */
class MrOdp : public MrSegments {
protected:
	RegRequest request(uint64_t addr = kVa + 0x100, uint64_t len = 0x2000)
	{
		RegRequest r;
		r.addr = addr;
		r.len = len;
		r.access = kRw;
		r.pd = 3;
		return r;
	}
};

TEST_F(MrOdp, BindsEveryPageOfTheRangeAndLooksUpAsItsVirtualAddress)
{
	uint32_t k = 0;
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &k), 0);
	EXPECT_EQ(ind.last_mkey, k);
	EXPECT_EQ(ind.odp.start, kVa + 0x100);
	EXPECT_EQ(ind.odp.len, 0x2000u);
	EXPECT_EQ(ind.odp.pages, 3u) << "0x100 into a page, 0x2000 bytes: three pages";
	EXPECT_EQ(ind.odp.pd, 3u);
	EXPECT_EQ(ind.odp.access, kRw);
	EntryFields f;
	ASSERT_EQ(e->table().snapshot(k, &f), 0);
	EXPECT_NE(f.flags & kEntryOdp, 0);
	uint64_t iova = 0;
	EXPECT_EQ(look(k, kVa + 0x1234, &iova), 0);
	EXPECT_EQ(iova, kVa + 0x1234);
	EXPECT_EQ(look(k, kVa + 0x100 + 0x2000, &iova), -ERANGE);
	const int revokes = prog.revokes;
	ASSERT_EQ(e->dereg(k, nullptr), 0);
	EXPECT_EQ(ind.live, 0) << "the indirect programmer takes its mkey back";
	EXPECT_EQ(prog.revokes, revokes);
	EXPECT_EQ(look(k, kVa + 0x1234, &iova), -ENOKEY);
}

TEST_F(MrOdp, RefusalsWithTheirCodesTakeNoKeyAndNoSlot)
{
	const auto free_before = e->keys().ring_free_count();
	uint32_t k = 0;
	for (uint32_t f : {uint32_t(kRegZeroBased), uint32_t(kRegSingleUse), uint32_t(kRegRmaEvent),
			   uint32_t(kRegPoolLookup)}) {
		RegRequest r = request();
		r.flags = f;
		EXPECT_EQ(e->reg_odp(r, ind, nullptr, &k), -EOPNOTSUPP) << f;
	}
	EXPECT_EQ(e->reg_odp(request(kVa, 0), ind, nullptr, &k), -EINVAL);
	EXPECT_EQ(e->reg_odp(request(~uint64_t{0} - 10, 100), ind, nullptr, &k), -EINVAL);
	RegRequest r = request();
	r.access = kAccessRemoteWrite; /* without local write */
	EXPECT_EQ(e->reg_odp(r, ind, nullptr, &k), -EINVAL);
	r = request();
	r.pd = 1u << 24;
	EXPECT_EQ(e->reg_odp(r, ind, nullptr, &k), -EINVAL);
	ind.fail_bind = -EIO;
	EXPECT_EQ(e->reg_odp(request(), ind, nullptr, &k), -EIO);
	ind.fail_bind = 0;
	EXPECT_EQ(e->keys().ring_free_count(), free_before);
	EXPECT_EQ(ind.live, 0);
	/* Every slot is still there: as many regions as slots register. */
	make(2);
	uint32_t a = 0, b = 0;
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &a), 0);
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &b), 0);
	EXPECT_EQ(e->reg_odp(request(), ind, nullptr, &k), -ENOSPC);
	EXPECT_EQ(e->dereg(a, nullptr), 0);
	EXPECT_EQ(e->dereg(b, nullptr), 0);
}

TEST_F(MrOdp, NoSubMrWindowOrRefreshOnIt)
{
	uint32_t k = 0;
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &k), 0);
	RegRequest sub = request(kVa + 0x200, 0x10);
	uint32_t s = 0;
	EXPECT_EQ(e->reg_sub(k, sub, nullptr, &s), -EOPNOTSUPP);
	sub.flags = kRegWindow;
	sub.access = kAccessRemoteRead;
	EXPECT_EQ(e->reg_sub(k, sub, nullptr, &s), -EOPNOTSUPP);
	EXPECT_EQ(e->refresh(k, 0x1000, 12), -EOPNOTSUPP);
	ind.fail_revoke = -EIO;
	EXPECT_EQ(e->dereg(k, nullptr), -EIO);
	uint64_t iova = 0;
	EXPECT_EQ(look(k, kVa + 0x200, &iova), 0) << "a failed revoke leaves it registered";
	ind.fail_revoke = 0;
	EXPECT_EQ(e->dereg(k, nullptr), 0);
}

} // namespace

namespace {

/* A device with on-demand paging for the engine's cache: indices from 1 upwards, binds and
 * revokes counted, each step able to fail with a chosen code. */
class OdpProgrammer final : public MkeyProgrammer {
public:
	int create_free_mkeys(uint32_t count, uint32_t *indices) override
	{
		if (uint64_t{next} + count > limit)
			return -ENOMEM;
		for (uint32_t i = 0; i < count; i++)
			indices[i] = next++;
		return 0;
	}
	bool chosen_indices() const noexcept override { return true; }
	int create_free_mkey_at(uint32_t) override { return 0; }
	int bind(uint32_t, const BindParams &) override { return 0; }
	int revoke(uint32_t) override
	{
		if (fail_revoke)
			return fail_revoke;
		revokes++;
		return 0;
	}
	int create_odp_mkeys(uint64_t pages, uint32_t count, uint32_t *indices) override
	{
		if (fail_create)
			return fail_create;
		created += count;
		last_pages = pages;
		return create_free_mkeys(count, indices);
	}
	uint64_t odp_max_pages() const noexcept override { return max_pages; }
	int bind_odp(uint32_t mkey, const OdpParams &p) override
	{
		if (fail_bind)
			return fail_bind;
		binds++;
		last_mkey = mkey;
		last = p;
		return 0;
	}
	uint32_t next = 1;
	/* Indices below limit exist: beyond, the device refuses (as EXCEED_LIM, -ENOMEM). */
	uint32_t limit = ~0u;
	uint64_t max_pages = 64, last_pages = 0;
	int fail_create = 0, fail_bind = 0, fail_revoke = 0;
	uint32_t created = 0, binds = 0, revokes = 0, last_mkey = 0;
	OdpParams last{};
};

/* Buckets of 8, 16, 32 and 64 pages (the device's 64 clamps the configured 2^6.. 2^10); the
 * first two made ahead, two each; a miss makes two; three at most per bucket. */
class MrOdpCache : public ::testing::Test {
protected:
	void SetUp() override
	{
		EngineConfig c;
		c.index_count = 256;
		c.pool_initial = 16;
		c.odp.enabled = true;
		c.odp.min_log_pages = 3;
		c.odp.max_log_pages = 10;
		c.odp.prefill = 2;
		c.odp.prefill_log_pages = 4;
		c.odp.refill = 2;
		c.odp.bucket_max = 3;
		ASSERT_EQ(Engine::create(c, prog, &e), 0);
	}
	RegRequest request(uint64_t pages = 3)
	{
		RegRequest r;
		r.addr = kVa + 0x100;
		r.len = pages * 4096 - 0x100;
		r.access = kRw;
		r.pd = 3;
		return r;
	}
	OdpBucketStats stats(uint32_t b)
	{
		OdpBucketStats s;
		EXPECT_EQ(e->odp_stats(b, &s), 0);
		return s;
	}
	static int zap(void *ctx, uint32_t mkey) noexcept
	{
		auto *t = static_cast<MrOdpCache *>(ctx);
		t->zapped = mkey;
		t->revokes_at_zap = t->prog.revokes;
		return t->fail_zap;
	}
	int dereg(uint32_t k)
	{
		const DeregHook h{zap, this};
		return e->dereg(k, nullptr, &h);
	}
	OdpProgrammer prog;
	RecordingIndirect ind;
	std::unique_ptr<Engine> e;
	uint32_t zapped = 0, revokes_at_zap = ~0u;
	int fail_zap = 0;
};

} // namespace

TEST_F(MrOdpCache, MakesTheSmallBucketsAheadAndNoMore)
{
	EXPECT_EQ(e->odp_bucket_count(), 4u);
	EXPECT_EQ(e->odp_max_pages(), 64u) << "clamped to what the device holds";
	EXPECT_EQ(prog.created, 4u);
	EXPECT_EQ(stats(0).pages, 8u);
	EXPECT_EQ(stats(0).made, 2u);
	EXPECT_EQ(stats(0).cached, 2u);
	EXPECT_EQ(stats(1).made, 2u);
	EXPECT_EQ(stats(2).made, 0u);
	EXPECT_EQ(stats(3).pages, 64u);
	EXPECT_EQ(stats(3).made, 0u);
	OdpBucketStats s;
	EXPECT_EQ(e->odp_stats(4, &s), -EINVAL);
}

TEST_F(MrOdpCache, RegistrationBindsACachedMkeyAndMakesNone)
{
	uint32_t k = 0;
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &k), 0);
	EXPECT_EQ(prog.created, 4u) << "a hit: no mkey made";
	EXPECT_EQ(prog.binds, 1u);
	EXPECT_EQ(prog.last_mkey, k);
	EXPECT_EQ(prog.last.start, kVa + 0x100);
	EXPECT_EQ(prog.last.pages, 3u);
	EXPECT_EQ(prog.last.pd, 3u);
	EXPECT_EQ(ind.live, 0) << "the indirect programmer is not used";
	EXPECT_EQ(stats(0).cached, 1u);
	EXPECT_EQ(stats(0).hits, 1u);
	EntryFields f;
	ASSERT_EQ(e->table().snapshot(k, &f), 0);
	EXPECT_EQ(f.flags & (kEntryOdp | kEntryIndirect), kEntryOdp);
	LookupRequest r{k, kVa + 0x1234, 1, kAccessRemoteWrite, kAnyPd};
	LookupResult res{};
	ASSERT_EQ(e->lookup(r, &res), 0);
	EXPECT_EQ(res.iova, kVa + 0x1234);
	ASSERT_EQ(dereg(k), 0);
}

TEST_F(MrOdpCache, DeregZapsThenRevokesAndTheIndexComesBackAtItsNextVariant)
{
	uint32_t a = 0, b = 0, c = 0;
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &a), 0);
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &b), 0);
	ASSERT_EQ(dereg(a), 0);
	EXPECT_EQ(zapped, a);
	EXPECT_EQ(revokes_at_zap, 0u) << "the zap comes before the revoke";
	EXPECT_EQ(prog.revokes, 1u);
	EXPECT_EQ(stats(0).cached, 1u);
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &c), 0);
	EXPECT_EQ(mkey_index(c), mkey_index(a));
	EXPECT_EQ(mkey_variant(c), e->keys().next_variant_of(mkey_index(a), mkey_variant(a)));
	EXPECT_EQ(dereg(a), -ENOKEY) << "the stale key";
	LookupRequest r{a, kVa + 0x1234, 1, kAccessRemoteWrite, kAnyPd};
	LookupResult res{};
	EXPECT_EQ(e->lookup(r, &res), -ENOKEY);
	EXPECT_EQ(prog.created, 4u);
	ASSERT_EQ(dereg(b), 0);
	ASSERT_EQ(dereg(c), 0);
	EXPECT_EQ(stats(0).cached, 2u) << "nothing lost";
}

TEST_F(MrOdpCache, AMissMakesMoreAndAFullBucketBorrowsFromALargerOne)
{
	uint32_t k[4] = {};
	for (uint32_t &x : k)
		ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &x), 0);
	EXPECT_EQ(stats(0).made, 3u) << "one miss made one more: the bucket's most";
	EXPECT_EQ(stats(0).misses, 1u);
	EXPECT_EQ(prog.last_pages, 8u);
	EXPECT_EQ(stats(1).cached, 1u) << "the fourth came from the 16-page bucket";
	for (uint32_t x : k)
		ASSERT_EQ(dereg(x), 0);
	EXPECT_EQ(stats(0).cached, 3u);
	EXPECT_EQ(stats(1).cached, 2u) << "back to the bucket it came from";
}

TEST_F(MrOdpCache, ENOSPCWhenItsBucketMadeItsMostAndLargerOnesHoldNoneAndNothingLeaks)
{
	/* Three of the 8-page bucket (one made on a miss), then the two the 16-page bucket
	 * holds; larger buckets make nothing for a small region. */
	std::vector<uint32_t> keys;
	for (int i = 0; i < 5; i++) {
		uint32_t k = 0;
		ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &k), 0) << i;
		keys.push_back(k);
	}
	uint32_t k = 0;
	EXPECT_EQ(e->reg_odp(request(), ind, nullptr, &k), -ENOSPC);
	EXPECT_EQ(stats(2).made, 0u);
	for (uint32_t x : keys)
		ASSERT_EQ(dereg(x), 0);
	EXPECT_EQ(stats(0).cached, 3u);
	EXPECT_EQ(stats(1).cached, 2u);
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &k), 0) << "slots and keys came back";
	ASSERT_EQ(dereg(k), 0);
}

TEST_F(MrOdpCache, EINVALAboveTheLargestBucket)
{
	uint32_t k = 0;
	EXPECT_EQ(e->reg_odp(request(65), ind, nullptr, &k), -EINVAL);
	ASSERT_EQ(e->reg_odp(request(64), ind, nullptr, &k), 0);
	EXPECT_EQ(prog.last_pages, 64u) << "made on the miss";
	ASSERT_EQ(dereg(k), 0);
	EXPECT_EQ(stats(0).cached, 2u);
}

TEST_F(MrOdpCache, AFailedBindGivesTheKeyBackToItsBucket)
{
	prog.fail_bind = -EIO;
	uint32_t k = 0;
	EXPECT_EQ(e->reg_odp(request(), ind, nullptr, &k), -EIO);
	EXPECT_EQ(stats(0).cached, 2u);
	prog.fail_bind = 0;
	uint32_t a = 0, b = 0;
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &a), 0);
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &b), 0);
	EXPECT_EQ(prog.created, 4u) << "both cached keys still there";
	ASSERT_EQ(dereg(a), 0);
	ASSERT_EQ(dereg(b), 0);
}

TEST_F(MrOdpCache, AFailedMakeOnAMissGivesItsCodeAndLeavesNothing)
{
	prog.fail_create = -ENOMEM;
	uint32_t k = 0;
	EXPECT_EQ(e->reg_odp(request(20), ind, nullptr, &k), -ENOMEM);
	EXPECT_EQ(stats(2).made, 0u);
	EXPECT_EQ(stats(2).misses, 1u);
	prog.fail_create = 0;
	ASSERT_EQ(e->reg_odp(request(20), ind, nullptr, &k), 0);
	EXPECT_EQ(stats(2).made, 2u);
	ASSERT_EQ(dereg(k), 0);
}

TEST_F(MrOdpCache, AFailedZapOrRevokeLeavesTheRegionRegistered)
{
	uint32_t k = 0;
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &k), 0);
	LookupRequest r{k, kVa + 0x1234, 1, kAccessRemoteWrite, kAnyPd};
	LookupResult res{};
	fail_zap = -EIO;
	EXPECT_EQ(dereg(k), -EIO);
	EXPECT_EQ(prog.revokes, 0u) << "no revoke after a failed zap";
	EXPECT_EQ(e->lookup(r, &res), 0);
	fail_zap = 0;
	prog.fail_revoke = -EIO;
	EXPECT_EQ(dereg(k), -EIO);
	EXPECT_EQ(e->lookup(r, &res), 0);
	EXPECT_EQ(stats(0).cached, 1u);
	prog.fail_revoke = 0;
	ASSERT_EQ(dereg(k), 0);
	EXPECT_EQ(stats(0).cached, 2u);
}

TEST_F(MrOdpCache, AKeyIsReusedOnlyAfterItsGracePeriod)
{
	ASSERT_EQ(e->reader_register(0), 0); /* online, and reports nothing yet */
	uint32_t a = 0, b = 0, c = 0, d = 0;
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &a), 0);
	ASSERT_EQ(dereg(a), 0);
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &b), 0);
	EXPECT_NE(mkey_index(b), mkey_index(a)) << "the never-used one first";
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &c), 0);
	EXPECT_NE(mkey_index(c), mkey_index(a)) << "a's index waits: a new mkey is made";
	EXPECT_EQ(stats(0).made, 3u);
	e->reader_quiescent(0);
	ASSERT_EQ(e->reg_odp(request(), ind, nullptr, &d), 0);
	EXPECT_EQ(mkey_index(d), mkey_index(a)) << "past the grace period";
	for (uint32_t x : {b, c, d})
		ASSERT_EQ(dereg(x), 0);
	e->reader_unregister(0);
}

TEST_F(MrOdpCache, RequestedKeysTakeTheIndirectProgrammer)
{
	RegRequest r = request();
	r.flags = kRegRequestedKey;
	r.requested_key = make_mkey(200, 7);
	uint32_t k = 0;
	ASSERT_EQ(e->reg_odp(r, ind, nullptr, &k), 0);
	EXPECT_EQ(k, make_mkey(200, 7));
	EXPECT_EQ(ind.live, 1);
	EXPECT_EQ(prog.binds, 0u);
	ASSERT_EQ(dereg(k), 0);
	EXPECT_EQ(ind.live, 0);
	EXPECT_EQ(zapped, 0u) << "no zap: the indirect programmer's mkey is destroyed";
}

TEST_F(MrOdpCache, AdoptTakesOnlyIndicesNeverUsed)
{
	uint32_t k = 0;
	EXPECT_EQ(e->keys().adopt(0, &k), -EINVAL);
	EXPECT_EQ(e->keys().adopt(256, &k), -EINVAL);
	EXPECT_EQ(e->keys().adopt(1, &k), -EEXIST) << "a pool index";
	ASSERT_EQ(e->keys().adopt(250, &k), 0);
	EXPECT_EQ(mkey_index(k), 250u);
	uint8_t v = 0;
	EXPECT_EQ(e->keys().state_of(250, &v), KeyState::binding);
	EXPECT_EQ(v, mkey_variant(k));
	EXPECT_EQ(e->keys().adopt(250, &k), -EEXIST);
}

/* The pool's default cap leaves the on-demand cache the indices of its prefill and headroom
 * (doc/odp.md, "Indices"): 16 in each of the 7 buckets up to 2^9 pages, and 64, at most half
 * of the indices. */
TEST(MrOdpReserve, TheDefaultReserveIsThePrefillAndTheHeadroomAtMostHalf)
{
	OdpCacheConfig c;
	EXPECT_EQ(odp_default_reserve(1024, c), 0u) << "no cache, no reserve";
	c.enabled = true;
	EXPECT_EQ(odp_default_reserve(1024, c), 16u * 7 + 64);
	EXPECT_EQ(odp_default_reserve(1u << 16, c), 176u);
	EXPECT_EQ(odp_default_reserve(256, c), 127u) << "half of 1..255";
	EXPECT_EQ(odp_default_reserve(2, c), 0u);
	c.prefill = 0;
	EXPECT_EQ(odp_default_reserve(1024, c), 64u);
	c.prefill = 16;
	c.prefill_log_pages = 2; /* below the smallest bucket: no prefill */
	EXPECT_EQ(odp_default_reserve(1024, c), 64u);
	c.prefill_log_pages = 20; /* clamped to the largest bucket, 2^18 */
	EXPECT_EQ(odp_default_reserve(1024, c), 16u * 16 + 64);
}

namespace {

/* A device of 1024 indices whose pool, by default, would take all of them (pool_initial 1024
 * clamped to the cap): the bug the reserve fixes. */
struct SmallDevice {
	explicit SmallDevice(uint32_t pool_max = 0)
	{
		prog.limit = 1024;
		prog.max_pages = uint64_t{1} << 18;
		EngineConfig c;
		c.index_count = 1024;
		c.pool_max = pool_max;
		c.odp.enabled = true;
		rc = Engine::create(c, prog, &e);
	}
	RegRequest pool_request() const
	{
		RegRequest r;
		r.addr = kVa;
		r.iova = kVa;
		r.len = 4096;
		r.access = kRw;
		r.pd = 3;
		return r;
	}
	RegRequest odp_request() const
	{
		RegRequest r;
		r.addr = kVa;
		r.len = 3 * 4096;
		r.access = kRw;
		r.pd = 3;
		return r;
	}
	OdpProgrammer prog;
	RecordingIndirect ind;
	std::unique_ptr<Engine> e;
	int rc = 0;
};

} // namespace

TEST(MrOdpReserve, TheDefaultCapLeavesThePrefillItsIndicesAndBothFillExactly)
{
	SmallDevice d;
	ASSERT_EQ(d.rc, 0);
	Engine &e = *d.e;
	EXPECT_EQ(e.odp_reserved(), 176u);
	EXPECT_EQ(e.pool_max(), 1023u - 176);
	EXPECT_EQ(e.pool_size(), 1023u - 176) << "the initial pool, clamped to the cap";
	EXPECT_EQ(e.odp_limit(), 176u);
	EXPECT_EQ(e.odp_made(), 112u) << "the whole prefill, made at creation";
	for (uint32_t b = 0; b < 7; b++) {
		OdpBucketStats s;
		ASSERT_EQ(e.odp_stats(b, &s), 0);
		EXPECT_EQ(s.made, 16u) << b;
	}
	/* The pool registers up to its cap, then -ENOSPC (not the device's -ENOMEM). */
	std::vector<uint32_t> keys;
	uint32_t k = 0;
	while (e.reg(d.pool_request(), nullptr, &k) == 0)
		keys.push_back(k);
	EXPECT_EQ(keys.size(), 1023u - 176);
	EXPECT_EQ(e.reg(d.pool_request(), nullptr, &k), -ENOSPC);
	/* The cache serves from its 176: the 8-page bucket's 16 and its misses' 64 (the
	 * headroom), then the 96 ready in the larger buckets; then -ENOSPC. The device never
	 * refused a command. */
	std::vector<uint32_t> odp;
	int rc = 0;
	while ((rc = e.reg_odp(d.odp_request(), d.ind, nullptr, &k)) == 0)
		odp.push_back(k);
	EXPECT_EQ(rc, -ENOSPC);
	EXPECT_EQ(odp.size(), 176u);
	EXPECT_EQ(e.odp_made(), 176u);
	OdpBucketStats s;
	ASSERT_EQ(e.odp_stats(0, &s), 0);
	EXPECT_EQ(s.made, 16u + 64);
	EXPECT_EQ(d.prog.next, 1024u) << "every index of the device, none refused";
	for (uint32_t x : odp)
		ASSERT_EQ(e.dereg(x, nullptr), 0);
	for (uint32_t x : keys)
		ASSERT_EQ(e.dereg(x, nullptr), 0);
	ASSERT_EQ(e.reg_odp(d.odp_request(), d.ind, nullptr, &k), 0) << "they came back";
	ASSERT_EQ(e.dereg(k, nullptr), 0);
}

TEST(MrOdpReserve, AGivenCapLeavesTheCacheWhatItDoesNotTake)
{
	{
		SmallDevice d(1023);
		ASSERT_EQ(d.rc, 0);
		EXPECT_EQ(d.e->odp_reserved(), 0u) << "no reserve behind a given cap";
		EXPECT_EQ(d.e->odp_limit(), 0u);
		EXPECT_EQ(d.e->odp_made(), 0u) << "no prefill: the pool may take every index";
		uint32_t k = 0;
		EXPECT_EQ(d.e->reg_odp(d.odp_request(), d.ind, nullptr, &k), -ENOSPC);
		EXPECT_EQ(d.prog.created, 0u) << "nothing asked of the device";
	}
	SmallDevice d(1000);
	ASSERT_EQ(d.rc, 0);
	EXPECT_EQ(d.e->odp_limit(), 23u);
	EXPECT_EQ(d.e->odp_made(), 23u) << "the smallest buckets' prefill first";
	OdpBucketStats s;
	ASSERT_EQ(d.e->odp_stats(0, &s), 0);
	EXPECT_EQ(s.made, 16u);
	ASSERT_EQ(d.e->odp_stats(1, &s), 0);
	EXPECT_EQ(s.made, 7u);
	ASSERT_EQ(d.e->odp_stats(2, &s), 0);
	EXPECT_EQ(s.made, 0u);
}
