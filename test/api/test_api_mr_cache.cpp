/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration cache (nicmr_mr_cache_*): hits, misses, the LRU's limits by count and by
 * bytes, invalidation by the unmap monitor (checked through RDMA on the emulated device: the
 * old key is refused, the memory mapped again at the same address is registered anew and
 * carries its own data), every error code, and threads sharing one cache while memory is
 * unmapped under it (at length in the 'stress' suite, under ThreadSanitizer in CI).
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "test_api_util.h"

using namespace nicmr::test;

namespace {

constexpr size_t kPg = 4096;

nicmr_mr_cache_stats cstats(nicmr_mr_cache *c)
{
	nicmr_mr_cache_stats s{};
	EXPECT_EQ(nicmr_mr_cache_get_stats(c, &s), 0);
	return s;
}

/* Maps len bytes of fresh anonymous memory at exactly p (nullptr: anywhere), filled with v. */
char *map_at(void *p, size_t len, int v)
{
	const int fixed = p ? MAP_FIXED_NOREPLACE : 0;
	void *m = mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | fixed, -1, 0);
	if (m == MAP_FAILED || (p != nullptr && m != p))
		return nullptr;
	std::memset(m, v, len);
	return static_cast<char *>(m);
}

class MrCache : public ApiFixture {
protected:
	void SetUp() override
	{
		ApiFixture::SetUp();
		nicmr_mr_cache_params_init(&params);
		params.monitor = NICMR_MR_CACHE_MONITOR_UFFD;
	}
	void TearDown() override
	{
		if (cache) {
			EXPECT_EQ(nicmr_mr_cache_destroy(cache), 0);
		}
		ApiFixture::TearDown();
	}
	void create()
	{
		ASSERT_EQ(nicmr_mr_cache_create(pd, &params, &cache), 0);
		ASSERT_EQ(cstats(cache).monitor, NICMR_MR_CACHE_MONITOR_UFFD);
	}
	/* Waits (5 s at most) until the cache holds n entries and the device's slow mappings are
	 * back to slow: the monitor's invalidation runs on its own thread. */
	bool settle(uint64_t n, uint64_t slow)
	{
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		while (std::chrono::steady_clock::now() < end) {
			if (cstats(cache).entries == n && stats(dev).slow_mappings == slow)
				return true;
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		}
		return false;
	}
	nicmr_mr_cache_params params{};
	nicmr_mr_cache *cache = nullptr;
};

TEST(MrCacheParams, DefaultsAndEnvironment)
{
	unsetenv("NICMR_MR_CACHE_MAX_SIZE");
	unsetenv("NICMR_MR_CACHE_MAX_COUNT");
	unsetenv("NICMR_MR_CACHE_MONITOR");
	nicmr_mr_cache_params p;
	nicmr_mr_cache_params_init(&p);
	EXPECT_EQ(p.max_size, size_t{1} << 30);
	EXPECT_EQ(p.max_count, 1024u);
	EXPECT_EQ(p.monitor, NICMR_MR_CACHE_MONITOR_DEFAULT);

	setenv("NICMR_MR_CACHE_MAX_SIZE", "8192", 1);
	setenv("NICMR_MR_CACHE_MAX_COUNT", "7", 1);
	setenv("NICMR_MR_CACHE_MONITOR", "disabled", 1);
	nicmr_mr_cache_params_init(&p);
	EXPECT_EQ(p.max_size, 8192u);
	EXPECT_EQ(p.max_count, 7u);
	EXPECT_EQ(p.monitor, NICMR_MR_CACHE_MONITOR_NONE);
	setenv("NICMR_MR_CACHE_MONITOR", "userfaultfd", 1);
	nicmr_mr_cache_params_init(&p);
	EXPECT_EQ(p.monitor, NICMR_MR_CACHE_MONITOR_UFFD);

	/* Values that do not parse leave the defaults. */
	setenv("NICMR_MR_CACHE_MAX_SIZE", "12k", 1);
	setenv("NICMR_MR_CACHE_MAX_COUNT", "-3", 1);
	setenv("NICMR_MR_CACHE_MONITOR", "memhooks", 1);
	nicmr_mr_cache_params_init(&p);
	EXPECT_EQ(p.max_size, size_t{1} << 30);
	EXPECT_EQ(p.max_count, 1024u);
	EXPECT_EQ(p.monitor, NICMR_MR_CACHE_MONITOR_DEFAULT);
	unsetenv("NICMR_MR_CACHE_MAX_SIZE");
	unsetenv("NICMR_MR_CACHE_MAX_COUNT");
	unsetenv("NICMR_MR_CACHE_MONITOR");
	nicmr_mr_cache_params_init(nullptr); /* does nothing */
}

TEST_F(MrCache, ErrorCodes)
{
	nicmr_mr_cache *c = nullptr;
	EXPECT_EQ(nicmr_mr_cache_create(nullptr, &params, &c), -EINVAL);
	EXPECT_EQ(nicmr_mr_cache_create(pd, nullptr, &c), -EINVAL);
	EXPECT_EQ(nicmr_mr_cache_create(pd, &params, nullptr), -EINVAL);
	params.monitor = -1;
	EXPECT_EQ(nicmr_mr_cache_create(pd, &params, &c), -EINVAL);
	params.monitor = NICMR_MR_CACHE_MONITOR_NONE + 1;
	EXPECT_EQ(nicmr_mr_cache_create(pd, &params, &c), -EINVAL);
	EXPECT_EQ(c, nullptr);
	params.monitor = NICMR_MR_CACHE_MONITOR_UFFD;
	create();

	Anon a(2 * kPg);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_cache_reg(nullptr, a.get(), kPg, kAll, &mr), -EINVAL);
	EXPECT_EQ(nicmr_mr_cache_reg(cache, a.get(), kPg, kAll, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_cache_reg(cache, a.get(), 0, kAll, &mr), -EINVAL);
	EXPECT_EQ(nicmr_mr_cache_reg(cache, reinterpret_cast<void *>(~uintptr_t(0) - 10), 100, kAll,
				     &mr),
		  -EINVAL);
	/* nicmr_mr_reg's own errors come through: an unknown access bit, unmapped memory. */
	EXPECT_EQ(nicmr_mr_cache_reg(cache, a.get(), kPg, uint64_t(1) << 62, &mr), -EINVAL);
	char *hole = map_at(nullptr, kPg, 0);
	ASSERT_NE(hole, nullptr);
	ASSERT_EQ(munmap(hole, kPg), 0);
	EXPECT_EQ(nicmr_mr_cache_reg(cache, hole, kPg, kAll, &mr), -EFAULT);
	EXPECT_EQ(cstats(cache).entries, 0u);
	EXPECT_EQ(stats(dev).mrs, 0u);

	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), kPg, kAll, &mr), 0);
	/* A cached MR goes back through its cache only. */
	EXPECT_EQ(nicmr_mr_dereg(mr), -EBUSY);
	EXPECT_EQ(nicmr_mr_cache_destroy(cache), -EBUSY);
	EXPECT_EQ(nicmr_mr_cache_destroy(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_cache_dereg(nullptr, mr), -EINVAL);
	EXPECT_EQ(nicmr_mr_cache_dereg(cache, nullptr), -EINVAL);
	nicmr_mr *plain = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 64, kAll, 0, 0, &plain), 0);
	EXPECT_EQ(nicmr_mr_cache_dereg(cache, plain), -EINVAL) << "not the cache's";
	EXPECT_EQ(nicmr_mr_dereg(plain), 0);
	EXPECT_EQ(nicmr_mr_cache_dereg(cache, mr), 0);
	EXPECT_EQ(nicmr_mr_cache_dereg(cache, mr), -EINVAL) << "released twice";
	EXPECT_EQ(nicmr_mr_cache_flush(nullptr), -EINVAL);
	nicmr_mr_cache_stats s{};
	EXPECT_EQ(nicmr_mr_cache_get_stats(nullptr, &s), -EINVAL);
	EXPECT_EQ(nicmr_mr_cache_get_stats(cache, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_cache_flush(cache), 1);
	EXPECT_EQ(stats(dev).mrs, 0u);
}

/*
 * userfaultfd refused by the kernel (a seccomp filter in a child makes the call fail as a
 * kernel would): NICMR_MR_CACHE_MONITOR_UFFD fails with the kernel's code (-EPERM; ENOSYS, a
 * kernel without userfaultfd, is -EOPNOTSUPP), the default monitor makes a cache that keeps
 * nothing.
 */
int child_with_uffd_error(nicmr_pd *pd, int err)
{
	sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (uint32_t(err) & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	sock_fprog prog{static_cast<unsigned short>(sizeof(f) / sizeof(f[0])), f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
		return 10;
	nicmr_mr_cache_params p;
	nicmr_mr_cache_params_init(&p);
	p.monitor = NICMR_MR_CACHE_MONITOR_UFFD;
	nicmr_mr_cache *c = nullptr;
	const int want = err == ENOSYS ? -EOPNOTSUPP : -err;
	if (nicmr_mr_cache_create(pd, &p, &c) != want || c != nullptr)
		return 11;
	p.monitor = NICMR_MR_CACHE_MONITOR_DEFAULT;
	if (nicmr_mr_cache_create(pd, &p, &c) != 0)
		return 12;
	nicmr_mr_cache_stats s{};
	if (nicmr_mr_cache_get_stats(c, &s) != 0 || s.monitor != NICMR_MR_CACHE_MONITOR_NONE)
		return 13;
	if (nicmr_mr_cache_destroy(c) != 0)
		return 14;
	return 0;
}

TEST_F(MrCache, MonitorRefusedByTheKernel)
{
	for (int err : {EPERM, ENOSYS}) {
		const pid_t child = fork();
		ASSERT_GE(child, 0);
		if (child == 0)
			_exit(child_with_uffd_error(pd, err));
		int st = 0;
		ASSERT_EQ(waitpid(child, &st, 0), child);
		ASSERT_TRUE(WIFEXITED(st));
		EXPECT_EQ(WEXITSTATUS(st), 0) << "errno " << err;
	}
}

TEST_F(MrCache, HitReturnsTheCachedRegistrationWithoutMappingAgain)
{
	create();
	Anon a(4 * kPg);
	nicmr_mr *m1 = nullptr, *m2 = nullptr, *m3 = nullptr, *m4 = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), 2 * kPg, kAll, &m1), 0);
	const uint64_t slow = stats(dev).slow_mappings;
	/* The same range, and a range inside it: the same MR, no new mapping. */
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), 2 * kPg, kAll, &m2), 0);
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get() + kPg + 8, 100, kAll, &m3), 0);
	EXPECT_EQ(m2, m1);
	EXPECT_EQ(m3, m1);
	EXPECT_EQ(stats(dev).slow_mappings, slow);
	/* Other access, or beyond the cached range: registered anew. */
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), 2 * kPg, NICMR_ACCESS_REMOTE_READ, &m4), 0);
	EXPECT_NE(m4, m1);
	nicmr_mr *m5 = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get() + kPg, 2 * kPg, kAll, &m5), 0);
	EXPECT_NE(m5, m1);
	nicmr_mr_cache_stats s = cstats(cache);
	EXPECT_EQ(s.hits, 2u);
	EXPECT_EQ(s.misses, 3u);
	EXPECT_EQ(s.entries, 3u);
	EXPECT_EQ(s.bytes, 6 * kPg);
	EXPECT_EQ(s.in_use, 3u);
	for (nicmr_mr *m : {m1, m2, m3, m4, m5})
		ASSERT_EQ(nicmr_mr_cache_dereg(cache, m), 0);
	/* Released, still registered: the next registration is a hit. */
	s = cstats(cache);
	EXPECT_EQ(s.in_use, 0u);
	EXPECT_EQ(stats(dev).mrs, 3u);
	nicmr_mr *again = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), kPg, kAll, &again), 0);
	EXPECT_EQ(again, m1);
	EXPECT_EQ(cstats(cache).hits, 3u);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, again), 0);
}

TEST_F(MrCache, PoolMemoryIsRegisteredUncached)
{
	create();
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, base, kPg, kAll, &m), 0);
	EXPECT_EQ(nicmr_mr_in_pool(m), 1);
	nicmr_mr_cache_stats s = cstats(cache);
	EXPECT_EQ(s.uncached, 1u);
	EXPECT_EQ(s.entries, 0u);
	EXPECT_EQ(s.in_use, 1u);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, m), 0);
	EXPECT_EQ(stats(dev).mrs, 0u) << "deregistered at once";
}

/* A regular file's pages cannot be watched (userfaultfd takes anonymous memory, shmem and
 * hugetlbfs): registered, not kept. */
TEST_F(MrCache, MemoryTheMonitorCannotWatchIsRegisteredUncached)
{
	create();
	char path[] = "./nicmr-cache-XXXXXX";
	const int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	unlink(path);
	ASSERT_EQ(ftruncate(fd, kPg), 0);
	void *f = mmap(nullptr, kPg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_NE(f, MAP_FAILED);
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, f, kPg, kAll, &m), 0);
	nicmr_mr_cache_stats s = cstats(cache);
	EXPECT_EQ(s.uncached, 1u);
	EXPECT_EQ(s.entries, 0u);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, m), 0);
	EXPECT_EQ(stats(dev).mrs, 0u);
	munmap(f, kPg);
	close(fd);
}

TEST_F(MrCache, LruEvictsTheOldestIdleEntryByCount)
{
	params.max_count = 2;
	create();
	Anon a(kPg), b(kPg), c(kPg);
	nicmr_mr *ma = nullptr, *mb = nullptr, *mc = nullptr, *m = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), kPg, kAll, &ma), 0);
	ASSERT_EQ(nicmr_mr_cache_reg(cache, b.get(), kPg, kAll, &mb), 0);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, ma), 0);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, mb), 0);
	/* a was released first: c takes its place. */
	ASSERT_EQ(nicmr_mr_cache_reg(cache, c.get(), kPg, kAll, &mc), 0);
	nicmr_mr_cache_stats s = cstats(cache);
	EXPECT_EQ(s.evictions, 1u);
	EXPECT_EQ(s.entries, 2u);
	EXPECT_EQ(stats(dev).mrs, 2u);
	ASSERT_EQ(nicmr_mr_cache_reg(cache, b.get(), kPg, kAll, &m), 0);
	EXPECT_EQ(m, mb) << "b stayed";
	EXPECT_EQ(cstats(cache).hits, 1u);
	/* Both entries in use: a third registration is made uncached, nothing evicted. */
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), kPg, kAll, &ma), 0);
	s = cstats(cache);
	EXPECT_EQ(s.uncached, 1u);
	EXPECT_EQ(s.evictions, 1u);
	EXPECT_EQ(s.entries, 2u);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, ma), 0);
	EXPECT_EQ(stats(dev).mrs, 2u);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, m), 0);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, mc), 0);
}

TEST_F(MrCache, LruEvictsByBytes)
{
	params.max_size = 3 * kPg;
	create();
	Anon a(2 * kPg), b(kPg), c(2 * kPg), big(4 * kPg);
	nicmr_mr *ma = nullptr, *mb = nullptr, *mc = nullptr, *mbig = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), 2 * kPg, kAll, &ma), 0);
	ASSERT_EQ(nicmr_mr_cache_reg(cache, b.get(), 100, kAll, &mb), 0); /* one page counted */
	EXPECT_EQ(cstats(cache).bytes, 3 * kPg);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, ma), 0);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, mb), 0);
	/* Two pages more: a (two pages, oldest) goes, b stays. */
	ASSERT_EQ(nicmr_mr_cache_reg(cache, c.get(), 2 * kPg, kAll, &mc), 0);
	nicmr_mr_cache_stats s = cstats(cache);
	EXPECT_EQ(s.evictions, 1u);
	EXPECT_EQ(s.bytes, 3 * kPg);
	EXPECT_EQ(s.entries, 2u);
	/* Larger than max_size on its own: never kept, nothing evicted for it. */
	ASSERT_EQ(nicmr_mr_cache_reg(cache, big.get(), 4 * kPg, kAll, &mbig), 0);
	s = cstats(cache);
	EXPECT_EQ(s.uncached, 1u);
	EXPECT_EQ(s.evictions, 1u);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, mbig), 0);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, mc), 0);
	EXPECT_EQ(nicmr_mr_cache_flush(cache), 2);
	EXPECT_EQ(cstats(cache).entries, 0u);
	EXPECT_EQ(stats(dev).mrs, 0u);
	EXPECT_EQ(stats(dev).pinned_pages, 0u);
}

TEST_F(MrCache, MaxCountZeroOrNoMonitorCachesNothing)
{
	params.max_count = 0;
	ASSERT_EQ(nicmr_mr_cache_create(pd, &params, &cache), 0);
	EXPECT_EQ(cstats(cache).monitor, NICMR_MR_CACHE_MONITOR_NONE) << "nothing to watch";
	Anon a(kPg);
	nicmr_mr *m1 = nullptr, *m2 = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), kPg, kAll, &m1), 0);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, m1), 0);
	EXPECT_EQ(stats(dev).mrs, 0u);
	ASSERT_EQ(nicmr_mr_cache_destroy(cache), 0);
	cache = nullptr;

	params.max_count = 16;
	params.monitor = NICMR_MR_CACHE_MONITOR_NONE;
	ASSERT_EQ(nicmr_mr_cache_create(pd, &params, &cache), 0);
	EXPECT_EQ(cstats(cache).monitor, NICMR_MR_CACHE_MONITOR_NONE);
	ASSERT_EQ(nicmr_mr_cache_reg(cache, a.get(), kPg, kAll, &m2), 0);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, m2), 0);
	EXPECT_EQ(cstats(cache).uncached, 1u);
	EXPECT_EQ(stats(dev).mrs, 0u);
}

/*
 * The free-and-reallocate case, through RDMA: a buffer registered through the cache, read by
 * the device, released (still cached), unmapped; the old key is then refused by the device;
 * new pages mapped at the same address with new data register anew (a miss, another key), and
 * the device reads the new data and writes into the new pages.
 */
TEST_F(MrCache, FreedAndReallocatedBufferIsNeverServedTheOldRegistration)
{
	create();
	nicmr_cq *cq1 = nullptr, *cq2 = nullptr;
	nicmr_qp *qp1 = nullptr, *qp2 = nullptr;
	connect_ports(dev, pd, &cq1, &cq2, &qp1, &qp2);
	char *local = base;
	nicmr_mr *lmr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, local, 2 * kPg, kAll, 0, 0, &lmr), 0);
	const uint32_t lkey = nicmr_mr_key(lmr);
	const uint64_t slow0 = stats(dev).slow_mappings;

	char *p = map_at(nullptr, 2 * kPg, 'A');
	ASSERT_NE(p, nullptr);
	nicmr_mr *m1 = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, p, 2 * kPg, kAll, &m1), 0);
	const uint32_t k1 = nicmr_mr_key(m1);
	ASSERT_EQ(nicmr_post_read(qp1, u(local), 2 * kPg, lkey, u(p), k1, 1, NICMR_SEND_SIGNALED),
		  0);
	ASSERT_EQ(wait_wc(cq1).status, NICMR_WC_SUCCESS);
	for (size_t i = 0; i < 2 * kPg; i++)
		ASSERT_EQ(local[i], 'A') << i;
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, m1), 0);
	ASSERT_EQ(cstats(cache).entries, 1u);

	/* Freed: the monitor drops the entry, and its registration with it. */
	ASSERT_EQ(munmap(p, 2 * kPg), 0);
	ASSERT_TRUE(settle(0, slow0));
	nicmr_mr_cache_stats s = cstats(cache);
	EXPECT_EQ(s.invalidations, 1u);
	std::memset(local, 0, 2 * kPg);
	ASSERT_EQ(nicmr_post_read(qp1, u(local), 64, lkey, u(p), k1, 2, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc = wait_wc(cq1);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_ACCESS) << "the old key must be dead";
	EXPECT_EQ(wc.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	ASSERT_EQ(nicmr_qp_recover(qp1), 0);
	ASSERT_EQ(nicmr_qp_recover(qp2), 0);

	/* Reallocated at the same address: new pages, new data. */
	char *q = map_at(p, 2 * kPg, 'B');
	ASSERT_EQ(q, p) << "the address was taken meanwhile";
	nicmr_mr *m2 = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, q, 2 * kPg, kAll, &m2), 0);
	s = cstats(cache);
	EXPECT_EQ(s.hits, 0u);
	EXPECT_EQ(s.misses, 2u);
	const uint32_t k2 = nicmr_mr_key(m2);
	EXPECT_NE(k2, k1);
	ASSERT_EQ(nicmr_post_read(qp1, u(local), 2 * kPg, lkey, u(q), k2, 3, NICMR_SEND_SIGNALED),
		  0);
	ASSERT_EQ(wait_wc(cq1).status, NICMR_WC_SUCCESS);
	for (size_t i = 0; i < 2 * kPg; i++)
		ASSERT_EQ(local[i], 'B') << i;
	std::memset(local, 'C', kPg);
	ASSERT_EQ(
		nicmr_post_write(qp1, u(local), kPg, lkey, u(q) + kPg, k2, 4, NICMR_SEND_SIGNALED),
		0);
	ASSERT_EQ(wait_wc(cq1).status, NICMR_WC_SUCCESS);
	for (size_t i = 0; i < kPg; i++) {
		ASSERT_EQ(q[i], 'B') << i;
		ASSERT_EQ(q[kPg + i], 'C') << i;
	}
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, m2), 0);
	ASSERT_EQ(nicmr_mr_cache_destroy(cache), 0);
	cache = nullptr;
	ASSERT_EQ(munmap(q, 2 * kPg), 0);
	EXPECT_EQ(nicmr_mr_dereg(lmr), 0);
	destroy_queues({qp1, qp2}, {cq1, cq2});
}

/* An entry in use whose memory goes is no longer found, and is deregistered when released. */
TEST_F(MrCache, UnmappedWhileInUseGoesWhenReleased)
{
	create();
	const uint64_t slow0 = stats(dev).slow_mappings;
	char *p = map_at(nullptr, 2 * kPg, 1);
	ASSERT_NE(p, nullptr);
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, p, 2 * kPg, kAll, &m), 0);
	/* Part of it: the second page. */
	ASSERT_EQ(munmap(p + kPg, kPg), 0);
	ASSERT_TRUE(settle(0, slow0 + 1));
	EXPECT_EQ(cstats(cache).in_use, 1u);
	EXPECT_EQ(stats(dev).mrs, 1u) << "its user still holds it";
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, m), 0);
	EXPECT_EQ(stats(dev).mrs, 0u);
	EXPECT_EQ(stats(dev).slow_mappings, slow0);
	ASSERT_EQ(munmap(p, kPg), 0);
}

/* mremap moves the pages away: the entry of the old range goes. */
TEST_F(MrCache, MovedByMremapIsInvalidated)
{
	create();
	const uint64_t slow0 = stats(dev).slow_mappings;
	char *p = map_at(nullptr, 2 * kPg, 1);
	char *dst = map_at(nullptr, 2 * kPg, 0);
	ASSERT_NE(p, nullptr);
	ASSERT_NE(dst, nullptr);
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_cache_reg(cache, p, 2 * kPg, kAll, &m), 0);
	ASSERT_EQ(nicmr_mr_cache_dereg(cache, m), 0);
	void *moved = mremap(p, 2 * kPg, 2 * kPg, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	ASSERT_EQ(moved, dst);
	ASSERT_TRUE(settle(0, slow0));
	EXPECT_EQ(cstats(cache).invalidations, 1u);
	ASSERT_EQ(munmap(dst, 2 * kPg), 0);
}

/*
 * Threads sharing one cache: each registers and releases buffers of a common set through it
 * while one thread unmaps and maps again buffers of its own that it registered through the same
 * cache. Every registration must get a key the device accepts for its own current memory
 * (checked with nicmr_key_lookup), and at the end the cache gives everything back.
 * NICMR_MR_CACHE_STRESS_ROUNDS sets the rounds (the 'stress' suite runs it long, under TSan).
 */
TEST_F(MrCache, ThreadsShareOneCacheWhileMemoryIsUnmapped)
{
	params.max_count = 8;
	create();
	const char *env = std::getenv("NICMR_MR_CACHE_STRESS_ROUNDS");
	const int rounds = env ? std::atoi(env) : 200;
	std::vector<Anon *> shared;
	shared.reserve(6);
	for (int i = 0; i < 6; i++)
		shared.push_back(new Anon(2 * kPg));
	std::atomic<int> failures{0};
	auto user = [&](int seed) {
		for (int r = 0; r < rounds; r++) {
			Anon *a = shared[size_t(r + seed) % shared.size()];
			nicmr_mr *m = nullptr;
			if (nicmr_mr_cache_reg(cache, a->get(), kPg + size_t(seed), kAll, &m) !=
			    0) {
				failures++;
				continue;
			}
			uint64_t iova = 0;
			if (nicmr_key_lookup(dev, nicmr_mr_key(m), u(a->get()), kPg,
					     NICMR_ACCESS_REMOTE_READ, &iova) != 0)
				failures++;
			if (nicmr_mr_cache_dereg(cache, m) != 0)
				failures++;
		}
	};
	auto churn = [&] {
		for (int r = 0; r < rounds; r++) {
			char *p = map_at(nullptr, kPg, r);
			if (p == nullptr) {
				failures++;
				continue;
			}
			nicmr_mr *m = nullptr;
			if (nicmr_mr_cache_reg(cache, p, kPg, kAll, &m) != 0 ||
			    nicmr_mr_cache_dereg(cache, m) != 0)
				failures++;
			munmap(p, kPg);
		}
	};
	std::thread t1(user, 0), t2(user, 1), t3(churn);
	t1.join();
	t2.join();
	t3.join();
	EXPECT_EQ(failures.load(), 0);
	nicmr_mr_cache_stats s = cstats(cache);
	EXPECT_EQ(s.in_use, 0u);
	EXPECT_LE(s.entries, 8u);
	EXPECT_GT(s.hits, 0u);
	ASSERT_EQ(nicmr_mr_cache_destroy(cache), 0);
	cache = nullptr;
	for (Anon *a : shared)
		delete a;
	EXPECT_EQ(stats(dev).mrs, 0u);
	EXPECT_EQ(stats(dev).pinned_pages, 0u);
}

} // namespace
