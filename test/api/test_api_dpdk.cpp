/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * include/nicmr/nicmr_dpdk.h with a real EAL (--in-memory --no-pci, 2 MiB hugepages, so that
 * DPDK follows memory events): memsegs as pools and their events, mempool registration and its
 * key lookup, RDMA with mempool keys, every error with its code, and the rte_log routing.
 */
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_log.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_memory.h>
#include <rte_mempool.h>
#include <rte_memzone.h>

#include "eal_env.h"
#include "hugepage_need.h"
#ifdef NICMR_TEST_LOCK_COUNT
#include "lock_count.h"
#endif
#include "mem_describe.h"
#include "nicmr/nicmr.h"
#include "nicmr/nicmr_dpdk.h"

namespace {

using nicmr::mem::hugepages_free;
using nicmr::mem::kPage2M;

constexpr size_t kGrowBytes = size_t{96} << 20;
constexpr uint64_t kAll = NICMR_ACCESS_READ | NICMR_ACCESS_WRITE | NICMR_ACCESS_LOCAL_WRITE |
			  NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_REMOTE_WRITE;

[[maybe_unused]] testing::Environment *const eal_env =
	testing::AddGlobalTestEnvironment(new nicmr::test::EalEnv("va"));

#define NEED_GROWTH()                                                                              \
	do {                                                                                       \
		const size_t pages = kGrowBytes / kPage2M + 2;                                     \
		if (hugepages_free(kPage2M) < pages) {                                             \
			if (nicmr::test::hugepages_required(kPage2M))                              \
				FAIL() << "need " << pages << " more free 2 MiB hugepages";        \
			GTEST_SKIP() << "need " << pages << " more free 2 MiB hugepages";          \
		}                                                                                  \
	} while (0)

uint64_t u(const void *p)
{
	return reinterpret_cast<uintptr_t>(p);
}

/* A device with a PD; the DPDK memory attached when attach is true. */
class Dpdk : public testing::Test {
protected:
	void open(const char *spec, bool attach)
	{
		ASSERT_EQ(nicmr_device_open(spec, &dev), 0);
		ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
		if (attach) {
			ASSERT_EQ(nicmr_dpdk_mem_attach(dev, &mem), 0);
		}
	}
	void SetUp() override
	{
		NICMR_NEED_EAL();
		open("emu", true);
	}
	void TearDown() override
	{
		if (mem) {
			EXPECT_EQ(nicmr_dpdk_mem_detach(mem), 0);
		}
		if (pd) {
			EXPECT_EQ(nicmr_pd_free(pd), 0);
		}
		if (dev) {
			EXPECT_EQ(nicmr_device_close(dev), 0);
		}
	}
	nicmr_device_stats stats()
	{
		nicmr_device_stats s{};
		EXPECT_EQ(nicmr_device_get_stats(dev, &s), 0);
		return s;
	}
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_dpdk_mem *mem = nullptr;
};

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

TEST_F(Dpdk, AttachMakesEveryMemsegRunAPoolOfTheDevice)
{
	nicmr_dpdk_mem_info info{};
	ASSERT_EQ(nicmr_dpdk_mem_query(mem, &info), 0);
	EXPECT_EQ(info.pools, contig_runs());
	EXPECT_EQ(info.kept, 0u);
	EXPECT_EQ(info.events, 1);
	EXPECT_EQ(stats().pools, info.pools);
	/* Memory DPDK hands out is inside a pool: registration takes the fast path. */
	void *buf = rte_malloc("nicmr-test", 4096, 64);
	ASSERT_NE(buf, nullptr);
	nicmr_pool *pool = nicmr_pool_find(dev, buf, 4096);
	ASSERT_NE(pool, nullptr);
	/* It follows DPDK's memory: the application cannot destroy it. */
	EXPECT_EQ(nicmr_pool_destroy(pool), -EPERM);
	EXPECT_EQ(stats().pools, info.pools);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, buf, 4096, kAll, 0, 0, &mr), 0);
	EXPECT_EQ(nicmr_mr_in_pool(mr), 1);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	rte_free(buf);
}

TEST_F(Dpdk, AttachTwiceIsEEXISTAndNullIsEINVAL)
{
	nicmr_dpdk_mem *second = nullptr;
	const uint64_t pools = stats().pools;
	EXPECT_EQ(nicmr_dpdk_mem_attach(dev, &second), -EEXIST);
	EXPECT_EQ(second, nullptr);
	EXPECT_EQ(stats().pools, pools);
	EXPECT_EQ(nicmr_dpdk_mem_attach(nullptr, &second), -EINVAL);
	EXPECT_EQ(nicmr_dpdk_mem_attach(dev, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_dpdk_mem_detach(nullptr), -EINVAL);
	nicmr_dpdk_mem_info info{};
	EXPECT_EQ(nicmr_dpdk_mem_query(nullptr, &info), -EINVAL);
	EXPECT_EQ(nicmr_dpdk_mem_query(mem, nullptr), -EINVAL);
}

TEST_F(Dpdk, AttachOverAnImportedPoolIsEEXISTAndLeavesNoPoolOfItsOwn)
{
	ASSERT_EQ(nicmr_dpdk_mem_detach(mem), 0);
	mem = nullptr;
	EXPECT_EQ(stats().pools, 0u);
	/* The application imported DPDK memory itself: the attach's walk meets it. */
	void *buf = rte_malloc("nicmr-test", 64, 0);
	const struct rte_memseg *ms = rte_mem_virt2memseg(buf, nullptr);
	ASSERT_NE(ms, nullptr);
	nicmr_pool *imported = nullptr;
	ASSERT_EQ(nicmr_pool_import(dev, ms->addr, ms->len, kPage2M, &imported), 0);
	EXPECT_EQ(nicmr_dpdk_mem_attach(dev, &mem), -EEXIST);
	EXPECT_EQ(mem, nullptr);
	EXPECT_EQ(stats().pools, 1u);
	EXPECT_EQ(nicmr_pool_destroy(imported), 0);
	/* The failed attach left the device free for the next one. */
	ASSERT_EQ(nicmr_dpdk_mem_attach(dev, &mem), 0);
	rte_free(buf);
}

TEST_F(Dpdk, DetachWithMrsLiveIsEBUSYAndChangesNothing)
{
	void *buf = rte_malloc("nicmr-test", 4096, 64);
	ASSERT_NE(buf, nullptr);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, buf, 4096, kAll, 0, 0, &mr), 0);
	const uint64_t pools = stats().pools;
	EXPECT_EQ(nicmr_dpdk_mem_detach(mem), -EBUSY);
	EXPECT_EQ(stats().pools, pools);
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(mr), u(buf), 4096, NICMR_ACCESS_READ, &iova),
		  0);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_dpdk_mem_detach(mem), 0);
	mem = nullptr;
	EXPECT_EQ(stats().pools, 0u);
	rte_free(buf);
}

TEST_F(Dpdk, HeapGrowthBecomesAPoolAndItsFreeRemovesIt)
{
	NEED_GROWTH();
	nicmr_dpdk_mem_info before{};
	ASSERT_EQ(nicmr_dpdk_mem_query(mem, &before), 0);
	const struct rte_memzone *mz =
		rte_memzone_reserve("nicmr-grow", kGrowBytes, SOCKET_ID_ANY, RTE_MEMZONE_2MB);
	ASSERT_NE(mz, nullptr) << rte_strerror(rte_errno);
	nicmr_dpdk_mem_info grown{};
	ASSERT_EQ(nicmr_dpdk_mem_query(mem, &grown), 0);
	EXPECT_GT(grown.pools, before.pools);
	EXPECT_EQ(stats().pools, grown.pools);
	EXPECT_NE(nicmr_pool_find(dev, mz->addr, mz->len), nullptr);
	ASSERT_EQ(rte_memzone_free(mz), 0);
	nicmr_dpdk_mem_info after{};
	ASSERT_EQ(nicmr_dpdk_mem_query(mem, &after), 0);
	EXPECT_EQ(after.pools, before.pools);
	EXPECT_EQ(after.kept, 0u);
	EXPECT_EQ(stats().pools, before.pools);
}

TEST_F(Dpdk, FreeUnderALiveMrKeepsThePoolUntilTheMrIsDeregistered)
{
	NEED_GROWTH();
	nicmr_dpdk_mem_info before{};
	ASSERT_EQ(nicmr_dpdk_mem_query(mem, &before), 0);
	const struct rte_memzone *mz =
		rte_memzone_reserve("nicmr-kept", kGrowBytes, SOCKET_ID_ANY, RTE_MEMZONE_2MB);
	ASSERT_NE(mz, nullptr) << rte_strerror(rte_errno);
	char *last = static_cast<char *>(mz->addr) + mz->len - 4096;
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, last, 4096, kAll, 0, 0, &mr), 0);
	ASSERT_EQ(nicmr_mr_in_pool(mr), 1);
	ASSERT_EQ(rte_memzone_free(mz), 0);
	nicmr_dpdk_mem_info kept{};
	ASSERT_EQ(nicmr_dpdk_mem_query(mem, &kept), 0);
	EXPECT_EQ(kept.kept, 1u);
	/* The MR's key stays good: the pool was not torn down under it. */
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(mr), u(last), 4096, NICMR_ACCESS_READ, &iova),
		  0);
	EXPECT_EQ(nicmr_dpdk_mem_detach(mem), -EBUSY);
	ASSERT_EQ(nicmr_mr_dereg(mr), 0);
	nicmr_dpdk_mem_info after{};
	ASSERT_EQ(nicmr_dpdk_mem_query(mem, &after), 0);
	EXPECT_EQ(after.kept, 0u);
	EXPECT_EQ(after.pools, before.pools);
	EXPECT_EQ(stats().pools, before.pools);
}

/* ---- Mempools ---------------------------------------------------------------------------- */

TEST_F(Dpdk, MempoolRegGivesEveryObjectAKeyThatGrantsIt)
{
	struct rte_mempool *mp = rte_mempool_create("nicmr-objs", 511, 1024, 0, 0, nullptr, nullptr,
						    nullptr, nullptr, SOCKET_ID_ANY, 0);
	ASSERT_NE(mp, nullptr) << rte_strerror(rte_errno);
	nicmr_dpdk_mempool_mr *mmr = nullptr;
	ASSERT_EQ(nicmr_dpdk_mempool_reg(pd, mp, kAll, &mmr), 0);
	ASSERT_GE(nicmr_dpdk_mempool_mr_count(mmr), 1u);
	EXPECT_EQ(stats().mrs, nicmr_dpdk_mempool_mr_count(mmr));
	for (size_t i = 0; i < nicmr_dpdk_mempool_mr_count(mmr); ++i)
		EXPECT_EQ(nicmr_mr_in_pool(nicmr_dpdk_mempool_mr_at(mmr, i)), 1) << i;
	struct Walk {
		nicmr_device *dev;
		const nicmr_dpdk_mempool_mr *mmr;
		unsigned bad = 0;
		unsigned n = 0;
	} w{dev, mmr};
	rte_mempool_obj_iter(
		mp,
		[](struct rte_mempool *m, void *arg, void *obj, unsigned) {
			auto *w = static_cast<Walk *>(arg);
			const uint32_t key = nicmr_dpdk_mempool_key(w->mmr, obj, m->elt_size);
			uint64_t iova = 0;
			w->n++;
			if (key == 0 || nicmr_key_lookup(w->dev, key, u(obj), m->elt_size,
							 NICMR_ACCESS_REMOTE_WRITE, &iova) != 0)
				w->bad++;
		},
		&w);
	EXPECT_EQ(w.n, 511u);
	EXPECT_EQ(w.bad, 0u);
	/* Outside the mempool: no key, no MR. */
	int local = 0;
	EXPECT_EQ(nicmr_dpdk_mempool_key(mmr, &local, sizeof(local)), 0u);
	EXPECT_EQ(nicmr_dpdk_mempool_mr_of(mmr, &local, sizeof(local)), nullptr);
	EXPECT_EQ(nicmr_dpdk_mempool_mr_of(mmr, &local, 0), nullptr);
	EXPECT_EQ(nicmr_dpdk_mempool_mr_of(nullptr, &local, 1), nullptr);
	EXPECT_EQ(nicmr_dpdk_mempool_mr_at(mmr, nicmr_dpdk_mempool_mr_count(mmr)), nullptr);
	EXPECT_EQ(nicmr_dpdk_mempool_mr_count(nullptr), 0u);
	EXPECT_EQ(nicmr_dpdk_mempool_dereg(mmr), 0);
	EXPECT_EQ(stats().mrs, 0u);
	rte_mempool_free(mp);
}

#ifdef NICMR_TEST_LOCK_COUNT
/* The per-address lookups are a hot path: no lock. The query beside them takes one, which shows
 * that the count sees this library's locks. */
TEST_F(Dpdk, MempoolKeyLookupTakesNoLock)
{
	struct rte_mempool *mp = rte_mempool_create("nicmr-nolock", 63, 256, 0, 0, nullptr, nullptr,
						    nullptr, nullptr, SOCKET_ID_ANY, 0);
	ASSERT_NE(mp, nullptr);
	nicmr_dpdk_mempool_mr *mmr = nullptr;
	ASSERT_EQ(nicmr_dpdk_mempool_reg(pd, mp, kAll, &mmr), 0);
	void *obj = nullptr;
	ASSERT_EQ(rte_mempool_get(mp, &obj), 0);
	uint32_t key = 0;
	nicmr_mr *mr = nullptr;
	{
		nicmr::test::LockCounting counting;
		key = nicmr_dpdk_mempool_key(mmr, obj, 256);
		mr = nicmr_dpdk_mempool_mr_of(mmr, obj, 256);
		EXPECT_EQ(counting.locks(), 0u);
		nicmr_dpdk_mem_info info{};
		ASSERT_EQ(nicmr_dpdk_mem_query(mem, &info), 0);
		EXPECT_GT(counting.locks(), 0u);
	}
	EXPECT_NE(key, 0u);
	EXPECT_EQ(nicmr_mr_key(mr), key);
	rte_mempool_put(mp, obj);
	EXPECT_EQ(nicmr_dpdk_mempool_dereg(mmr), 0);
	rte_mempool_free(mp);
}
#endif

TEST_F(Dpdk, MempoolRegErrorsAreExactAndLeaveNothing)
{
	struct rte_mempool *empty =
		rte_mempool_create_empty("nicmr-unpop", 63, 64, 0, 0, SOCKET_ID_ANY, 0);
	ASSERT_NE(empty, nullptr);
	struct rte_mempool *mp = rte_mempool_create("nicmr-err", 63, 64, 0, 0, nullptr, nullptr,
						    nullptr, nullptr, SOCKET_ID_ANY, 0);
	ASSERT_NE(mp, nullptr);
	nicmr_dpdk_mempool_mr *mmr = nullptr;
	EXPECT_EQ(nicmr_dpdk_mempool_reg(nullptr, mp, kAll, &mmr), -EINVAL);
	EXPECT_EQ(nicmr_dpdk_mempool_reg(pd, nullptr, kAll, &mmr), -EINVAL);
	EXPECT_EQ(nicmr_dpdk_mempool_reg(pd, mp, kAll, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_dpdk_mempool_reg(pd, empty, kAll, &mmr), -ENOENT);
	/* An access bit nicmr_mr_reg does not know. */
	EXPECT_EQ(nicmr_dpdk_mempool_reg(pd, mp, kAll | (1ull << 40), &mmr), -EINVAL);
	EXPECT_EQ(mmr, nullptr);
	EXPECT_EQ(nicmr_dpdk_mempool_dereg(nullptr), -EINVAL);
	EXPECT_EQ(stats().mrs, 0u);
	rte_mempool_free(mp);
	rte_mempool_free(empty);
}

/* Two chunks far apart make two MRs; a device with room for one key fails the second with
 * -ENOSPC, and the first is deregistered again. */
TEST(DpdkMempool, SecondRangeWithoutAKeyIsENOSPCAndTheFirstIsUndone)
{
	NICMR_NEED_EAL();
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu:mkeys=4096,mkey_pool=1,mkey_max=1", &dev), 0);
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	constexpr size_t kChunk = 64 << 10;
	void *c1 = rte_malloc("nicmr-c1", kChunk, 4096);
	void *gap = rte_malloc("nicmr-gap", 4096, 4096); /* keeps the chunks apart */
	void *c2 = rte_malloc("nicmr-c2", kChunk, 4096);
	ASSERT_TRUE(c1 && gap && c2);
	struct rte_mempool *mp =
		rte_mempool_create_empty("nicmr-two", 64, 1024, 0, 0, SOCKET_ID_ANY, 0);
	ASSERT_NE(mp, nullptr);
	ASSERT_EQ(rte_mempool_set_ops_byname(mp, "ring_mp_mc", nullptr), 0);
	ASSERT_GT(rte_mempool_populate_virt(mp, static_cast<char *>(c1), kChunk, 4096, nullptr,
					    nullptr),
		  0);
	ASSERT_GT(rte_mempool_populate_virt(mp, static_cast<char *>(c2), kChunk, 4096, nullptr,
					    nullptr),
		  0);
	nicmr_dpdk_mempool_mr *mmr = nullptr;
	EXPECT_EQ(nicmr_dpdk_mempool_reg(pd, mp, kAll, &mmr), -ENOSPC);
	EXPECT_EQ(mmr, nullptr);
	nicmr_device_stats s{};
	ASSERT_EQ(nicmr_device_get_stats(dev, &s), 0);
	EXPECT_EQ(s.mrs, 0u);
	EXPECT_EQ(s.slow_mappings, 0u);
	EXPECT_EQ(s.pinned_pages, 0u);
	rte_mempool_free(mp);
	rte_free(c1);
	rte_free(gap);
	rte_free(c2);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

/* What the example does, checked: mbufs of a pktmbuf pool written and read between the
 * device's two ports with the keys the mempool registration gives per mbuf. */
TEST_F(Dpdk, RdmaBetweenMbufsWithMempoolKeysMovesEveryByte)
{
	struct rte_mempool *mp =
		rte_pktmbuf_pool_create("nicmr-mbufs", 63, 0, 0, 4096, SOCKET_ID_ANY);
	ASSERT_NE(mp, nullptr) << rte_strerror(rte_errno);
	nicmr_dpdk_mempool_mr *mmr = nullptr;
	ASSERT_EQ(nicmr_dpdk_mempool_reg(pd, mp, kAll, &mmr), 0);
	nicmr_cq *cqa = nullptr, *cqb = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	ASSERT_EQ(nicmr_cq_create(dev, 16, &cqa), 0);
	ASSERT_EQ(nicmr_cq_create(dev, 16, &cqb), 0);
	ASSERT_EQ(nicmr_qp_create(pd, 1, cqa, 16, &qa), 0);
	ASSERT_EQ(nicmr_qp_create(pd, 2, cqb, 16, &qb), 0);
	ASSERT_EQ(nicmr_qp_connect(qa, 2, nicmr_qp_num(qb)), 0);
	ASSERT_EQ(nicmr_qp_connect(qb, 1, nicmr_qp_num(qa)), 0);
	struct rte_mbuf *src = rte_pktmbuf_alloc(mp), *dst = rte_pktmbuf_alloc(mp),
			*back = rte_pktmbuf_alloc(mp);
	ASSERT_TRUE(src && dst && back);
	constexpr size_t kLen = 2048;
	char *s = rte_pktmbuf_mtod(src, char *), *d = rte_pktmbuf_mtod(dst, char *),
	     *b = rte_pktmbuf_mtod(back, char *);
	for (size_t i = 0; i < kLen; ++i)
		s[i] = static_cast<char>(i * 7 + 1);
	std::memset(d, 0, kLen);
	std::memset(b, 0, kLen);
	const uint32_t ks = nicmr_dpdk_mempool_key(mmr, s, kLen);
	const uint32_t kd = nicmr_dpdk_mempool_key(mmr, d, kLen);
	const uint32_t kb = nicmr_dpdk_mempool_key(mmr, b, kLen);
	ASSERT_TRUE(ks && kd && kb);
	auto wait = [](nicmr_cq *cq) {
		nicmr_wc wc{};
		for (int i = 0; i < 1000000 && nicmr_cq_poll(cq, &wc, 1) == 0; ++i) {
		}
		return wc;
	};
	ASSERT_EQ(nicmr_post_write(qa, u(s), kLen, ks, u(d), kd, 1, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc = wait(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.wr_id, 1u);
	EXPECT_EQ(std::memcmp(s, d, kLen), 0);
	ASSERT_EQ(nicmr_post_read(qa, u(b), kLen, kb, u(d), kd, 2, NICMR_SEND_SIGNALED), 0);
	wc = wait(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.wr_id, 2u);
	EXPECT_EQ(std::memcmp(s, b, kLen), 0);
	rte_pktmbuf_free(src);
	rte_pktmbuf_free(dst);
	rte_pktmbuf_free(back);
	EXPECT_EQ(nicmr_qp_destroy(qa), 0);
	EXPECT_EQ(nicmr_qp_destroy(qb), 0);
	EXPECT_EQ(nicmr_cq_destroy(cqa), 0);
	EXPECT_EQ(nicmr_cq_destroy(cqb), 0);
	EXPECT_EQ(nicmr_dpdk_mempool_dereg(mmr), 0);
	rte_mempool_free(mp);
}

/* ---- rte_log ----------------------------------------------------------------------------- */

namespace {
struct Captured {
	std::vector<std::string> lines;
};
void capture(void *ctx, enum nicmr_log_level, const char *component, const char *, int,
	     const char *msg)
{
	static_cast<Captured *>(ctx)->lines.push_back(std::string(component) + ": " + msg);
}
} // namespace

TEST_F(Dpdk, LogLinesGoToRteLogUnderTheirTypeAndAHandlerStillTakesPrecedence)
{
	const int type = nicmr_dpdk_log_register();
	ASSERT_GE(type, 0);
	EXPECT_EQ(nicmr_dpdk_log_register(), type);
	EXPECT_EQ(rte_log_register(NICMR_DPDK_LOG_TYPE), type);
	char *text = nullptr;
	size_t size = 0;
	FILE *stream = open_memstream(&text, &size);
	ASSERT_NE(stream, nullptr);
	FILE *saved = rte_log_get_stream();
	ASSERT_EQ(rte_openlog_stream(stream), 0);
	/* EAL ran with --log-level=3 (ERR) for every type: nicmr's warnings open it again. */
	rte_log_set_global_level(RTE_LOG_DEBUG);
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_WARN, nullptr, nullptr), 0);
	EXPECT_EQ(rte_log_get_level(static_cast<uint32_t>(type)),
		  static_cast<int>(RTE_LOG_WARNING));

	/* A refused detach logs a warning ("detach refused"). */
	void *buf = rte_malloc("nicmr-log", 4096, 64);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, buf, 4096, kAll, 0, 0, &mr), 0);
	EXPECT_EQ(nicmr_dpdk_mem_detach(mem), -EBUSY);
	std::fflush(stream);
	EXPECT_NE(std::string(text, size).find("nicmr dpdk: emu: detach refused: 1 MRs live"),
		  std::string::npos)
		<< std::string(text, size);

	/* The type's level filters: at ERR the warning is not written. */
	const size_t at = size;
	rte_log_set_level(static_cast<uint32_t>(type), RTE_LOG_ERR);
	EXPECT_EQ(nicmr_dpdk_mem_detach(mem), -EBUSY);
	std::fflush(stream);
	EXPECT_EQ(size, at) << std::string(text, size);

	/* A handler takes the lines while it is set, whatever rte_log's level. */
	Captured got;
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_WARN, capture, &got), 0);
	EXPECT_EQ(nicmr_dpdk_mem_detach(mem), -EBUSY);
	ASSERT_EQ(got.lines.size(), 1u);
	EXPECT_EQ(got.lines[0], "dpdk: emu: detach refused: 1 MRs live in DPDK memory");
	std::fflush(stream);
	EXPECT_EQ(size, at);

	/* Without the handler lines go back to rte_log, not to stderr. */
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_WARN, nullptr, nullptr), 0);
	EXPECT_EQ(nicmr_dpdk_mem_detach(mem), -EBUSY);
	std::fflush(stream);
	EXPECT_GT(size, at);
	EXPECT_EQ(got.lines.size(), 1u);

	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	rte_free(buf);
	rte_openlog_stream(saved);
	std::fclose(stream);
	std::free(text);
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_ERROR, nullptr, nullptr), 0);
	rte_log_set_global_level(RTE_LOG_ERR);
}
