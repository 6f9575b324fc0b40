/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DPDK memsegs as pools, with a real EAL (--in-memory --no-pci). Built twice: IOVA as VA and
 * IOVA as PA (NICMR_TEST_IOVA_MODE), because EAL initialises once per process.
 */
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <unistd.h>
#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_memory.h>
#include <rte_mempool.h>
#include <rte_memzone.h>

#include "eal_env.h"
#include "mem_dpdk.h"
#include "mem_test_mapper.h"
#include "mem_test_util.h"

#ifndef NICMR_TEST_IOVA_MODE
#define NICMR_TEST_IOVA_MODE "va"
#endif

using namespace nicmr::mem;
using nicmr::mem::test::RecordingMapper;

namespace {

/* The event test grows the heap by 96 MiB beyond the EAL's 64 (eal_env.h). */
constexpr size_t kGrowBytes = size_t{96} << 20;

[[maybe_unused]] testing::Environment *const eal_env =
	testing::AddGlobalTestEnvironment(new nicmr::test::EalEnv(NICMR_TEST_IOVA_MODE));

struct Seg {
	const void *addr;
	size_t len;
	uint64_t iova;
	size_t page_size;
};

std::vector<Seg> memsegs()
{
	std::vector<Seg> out;
	rte_memseg_walk(
		[](const struct rte_memseg_list *msl, const struct rte_memseg *ms, void *arg) {
			static_cast<std::vector<Seg> *>(arg)->push_back(
				{ms->addr, ms->len, ms->iova, msl->page_sz});
			return 0;
		},
		&out);
	return out;
}

size_t contig_runs()
{
	size_t n = 0;
	rte_memseg_contig_walk(
		[](const struct rte_memseg_list *, const struct rte_memseg *, size_t, void *arg) {
			++*static_cast<size_t *>(arg);
			return 0;
		},
		&n);
	return n;
}

} // namespace

TEST(MemDpdk, EalRunsInTheRequestedIovaMode)
{
	NICMR_NEED_EAL();
	EXPECT_EQ(rte_eal_iova_mode(),
		  std::string(NICMR_TEST_IOVA_MODE) == "pa" ? RTE_IOVA_PA : RTE_IOVA_VA);
}

TEST(MemDpdk, EveryMemsegRunBecomesAnExternalPool)
{
	NICMR_NEED_EAL();
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DpdkMemSync> sync;
	ASSERT_EQ(DpdkMemSync::create(space, &sync), 0);
	EXPECT_TRUE(sync->following_events());
	EXPECT_EQ(sync->pool_count(), contig_runs());
	EXPECT_EQ(space.pool_count(), sync->pool_count());
	EXPECT_EQ(mapper.live_mappings(), sync->pool_count());
	std::vector<Seg> segs = memsegs();
	ASSERT_FALSE(segs.empty());
	for (const Seg &s : segs) {
		const PoolEntry *e = space.lookup(s.addr, s.len);
		ASSERT_NE(e, nullptr) << s.addr;
		EXPECT_EQ(e->pool->backend(), PoolBackend::external);
		EXPECT_EQ(e->pool->page_size(), s.page_size);
		EXPECT_EQ(e->iova % e->iova_align, e->va % e->iova_align);
	}
}

/* IOVA as VA: the memseg IOVA is its address. IOVA as PA: it is what pagemap says. */
TEST(MemDpdk, MemsegIovaIsTheAddressOrThePagePhysicalAddress)
{
	NICMR_NEED_EAL();
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DpdkMemSync> sync;
	ASSERT_EQ(DpdkMemSync::create(space, &sync), 0);
	for (const Seg &s : memsegs()) {
		if (rte_eal_iova_mode() == RTE_IOVA_VA) {
			EXPECT_EQ(s.iova, reinterpret_cast<uintptr_t>(s.addr));
			continue;
		}
		const PoolEntry *e = space.lookup(s.addr, s.len);
		ASSERT_NE(e, nullptr);
		std::vector<uint64_t> pa(e->pool->page_count());
		ASSERT_EQ(e->pool->physical_addresses(pa.data(), pa.size()), 0);
		size_t page = (reinterpret_cast<uintptr_t>(s.addr) - e->va) / e->pool->page_size();
		EXPECT_EQ(pa[page], s.iova) << s.addr;
	}
}

TEST(MemDpdk, AllocEventsAddPoolsAndFreeEventsRemoveThem)
{
	NICMR_NEED_EAL();
	size_t pages = kGrowBytes / kPage2M + 2;
	if (hugepages_free(kPage2M) < pages) {
		if (nicmr::test::hugepages_required(kPage2M))
			FAIL() << "need " << pages << " more free 2 MiB hugepages (required here)";
		GTEST_SKIP() << "need " << pages << " more free 2 MiB hugepages to grow the heap";
	}
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DpdkMemSync> sync;
	ASSERT_EQ(DpdkMemSync::create(space, &sync), 0);
	const size_t before = sync->pool_count();
	std::set<const PoolEntry *> initial;
	for (const Seg &s : memsegs())
		initial.insert(space.lookup(s.addr, s.len));

	/* Larger than the -m 64 heap: DPDK must map new pages, which raises an alloc event. */
	const struct rte_memzone *mz =
		rte_memzone_reserve("nicmr-grow", kGrowBytes, SOCKET_ID_ANY, RTE_MEMZONE_2MB);
	ASSERT_NE(mz, nullptr) << rte_strerror(rte_errno);
	EXPECT_GT(sync->pool_count(), before);
	EXPECT_EQ(space.pool_count(), sync->pool_count());
	std::vector<const char *> grown;
	for (size_t off = 0; off < mz->len; off += kPage2M) {
		const char *a = static_cast<const char *>(mz->addr) + off;
		const PoolEntry *e = space.lookup(a, 1);
		ASSERT_NE(e, nullptr) << "memzone page " << off / kPage2M << " is in no pool";
		uint64_t iova;
		ASSERT_EQ(space.translate(a, 1, &iova), 0);
		EXPECT_EQ(iova, e->iova + (reinterpret_cast<uintptr_t>(a) - e->va));
		if (initial.count(e) == 0)
			grown.push_back(a);
	}
	EXPECT_FALSE(grown.empty());

	ASSERT_EQ(rte_memzone_free(mz), 0);
	EXPECT_EQ(sync->pool_count(), before);
	EXPECT_EQ(space.pool_count(), before);
	EXPECT_EQ(mapper.live_mappings(), before);
	for (const char *a : grown)
		EXPECT_EQ(space.lookup(a, 1), nullptr) << "freed page still in a pool";
}

TEST(MemDpdk, DestroyRemovesEveryPoolItAdded)
{
	NICMR_NEED_EAL();
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DpdkMemSync> sync;
	ASSERT_EQ(DpdkMemSync::create(space, &sync), 0);
	ASSERT_GT(space.pool_count(), 0u);
	sync.reset();
	EXPECT_EQ(space.pool_count(), 0u);
	EXPECT_EQ(mapper.live_mappings(), 0u);
}

TEST(MemDpdk, SecondSyncOnTheSameSpaceIsEEXISTAndLeavesNothing)
{
	NICMR_NEED_EAL();
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DpdkMemSync> first, second;
	ASSERT_EQ(DpdkMemSync::create(space, &first), 0);
	const size_t pools = space.pool_count();
	EXPECT_EQ(DpdkMemSync::create(space, &second), -EEXIST);
	EXPECT_EQ(second, nullptr);
	EXPECT_EQ(space.pool_count(), pools);
	EXPECT_EQ(mapper.live_mappings(), pools);
}

namespace {

/* A sink over a DmaSpace that refuses to remove the pools a test marks busy, as the native
 * API refuses pools with live MRs. */
class BusySink final : public PoolSink {
public:
	explicit BusySink(DmaSpace &space) : inner_(space) {}
	int add(std::unique_ptr<Pool> pool, void **token) override
	{
		return inner_.add(std::move(pool), token);
	}
	int remove(void *token) override
	{
		if (busy_.count(token) != 0)
			return -EBUSY;
		return inner_.remove(token);
	}
	std::unordered_set<void *> busy_;

private:
	SpaceSink inner_;
};

} // namespace

TEST(MemDpdk, FreedPoolThatIsBusyIsKeptMappedUntilItsUsersAreGone)
{
	NICMR_NEED_EAL();
	size_t pages = kGrowBytes / kPage2M + 2;
	if (hugepages_free(kPage2M) < pages) {
		if (nicmr::test::hugepages_required(kPage2M))
			FAIL() << "need " << pages << " more free 2 MiB hugepages (required here)";
		GTEST_SKIP() << "need " << pages << " more free 2 MiB hugepages to grow the heap";
	}
	RecordingMapper mapper;
	DmaSpace space(mapper);
	BusySink sink(space);
	std::unique_ptr<DpdkMemSync> sync;
	ASSERT_EQ(DpdkMemSync::create(sink, &sync), 0);
	const size_t before = sync->pool_count();
	const std::vector<void *> initial = sync->tokens();

	const struct rte_memzone *mz =
		rte_memzone_reserve("nicmr-kept", kGrowBytes, SOCKET_ID_ANY, RTE_MEMZONE_2MB);
	ASSERT_NE(mz, nullptr) << rte_strerror(rte_errno);
	ASSERT_GT(sync->pool_count(), before);
	/* Every pool the growth added is "in use". */
	for (void *t : sync->tokens())
		if (std::find(initial.begin(), initial.end(), t) == initial.end())
			sink.busy_.insert(t);
	ASSERT_FALSE(sink.busy_.empty());
	const char *last = static_cast<const char *>(mz->addr) + mz->len - 1;
	const PoolEntry *grown = space.lookup(last, 1);
	ASSERT_NE(grown, nullptr);
	ASSERT_NE(sink.busy_.count(grown->pool), 0u);

	ASSERT_EQ(rte_memzone_free(mz), 0);
	EXPECT_EQ(sync->kept_count(), sink.busy_.size());
	EXPECT_EQ(sync->pool_count(), before + sink.busy_.size());
	EXPECT_EQ(space.lookup(last, 1), grown) << "a busy pool was removed under its users";
	EXPECT_EQ(mapper.live_mappings(), before + sink.busy_.size());

	/* Still busy: retrying keeps it. */
	EXPECT_EQ(sync->retry_kept(), sink.busy_.size());
	sink.busy_.clear();
	EXPECT_EQ(sync->retry_kept(), 0u);
	EXPECT_EQ(sync->kept_count(), 0u);
	EXPECT_EQ(sync->pool_count(), before);
	EXPECT_EQ(space.lookup(last, 1), nullptr);
	EXPECT_EQ(mapper.live_mappings(), before);
}

TEST(MemDpdk, MempoolRangesCoverEveryObjectAndMergeTouchingChunks)
{
	NICMR_NEED_EAL();
	struct rte_mempool *mp = rte_mempool_create("nicmr-ranges", 1023, 2048, 0, 0, nullptr,
						    nullptr, nullptr, nullptr, SOCKET_ID_ANY, 0);
	ASSERT_NE(mp, nullptr) << rte_strerror(rte_errno);
	std::vector<MempoolRange> ranges;
	ASSERT_EQ(mempool_ranges(mp, nullptr, nullptr, &ranges), 0);
	ASSERT_FALSE(ranges.empty());
	EXPECT_LE(ranges.size(), size_t{mp->nb_mem_chunks});
	for (size_t i = 1; i < ranges.size(); ++i)
		EXPECT_LT(ranges[i - 1].end, ranges[i].start) << "touching ranges left apart";
	struct Check {
		const std::vector<MempoolRange> *ranges;
		unsigned outside = 0;
	} check{&ranges};
	rte_mempool_obj_iter(
		mp,
		[](struct rte_mempool *m, void *arg, void *obj, unsigned) {
			auto *c = static_cast<Check *>(arg);
			const auto a = reinterpret_cast<uintptr_t>(obj);
			bool in = false;
			for (const MempoolRange &r : *c->ranges)
				in = in || (a >= r.start && a + m->elt_size <= r.end);
			c->outside += in ? 0 : 1;
		},
		&check);
	EXPECT_EQ(check.outside, 0u);
	/* A same_pool that splits everywhere leaves one range per chunk. */
	ASSERT_EQ(mempool_ranges(
			  mp, [](void *, uintptr_t, uintptr_t) { return false; }, nullptr, &ranges),
		  0);
	EXPECT_EQ(ranges.size(), size_t{mp->nb_mem_chunks});
	rte_mempool_free(mp);
}

TEST(MemDpdk, MempoolRangesOfAnUnpopulatedMempoolIsENOENTAndNullIsEINVAL)
{
	NICMR_NEED_EAL();
	struct rte_mempool *mp =
		rte_mempool_create_empty("nicmr-empty", 63, 64, 0, 0, SOCKET_ID_ANY, 0);
	ASSERT_NE(mp, nullptr) << rte_strerror(rte_errno);
	std::vector<MempoolRange> ranges{{1, 2}};
	EXPECT_EQ(mempool_ranges(mp, nullptr, nullptr, &ranges), -ENOENT);
	EXPECT_TRUE(ranges.empty());
	EXPECT_EQ(mempool_ranges(nullptr, nullptr, nullptr, &ranges), -EINVAL);
	EXPECT_EQ(mempool_ranges(mp, nullptr, nullptr, nullptr), -EINVAL);
	rte_mempool_free(mp);
}
