/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration hot path's promises, checked from outside:
 *  - nicmr_mr_reg of pool memory, nicmr_mr_reg_sub and nicmr_mr_dereg allocate nothing (this
 *    program replaces operator new and counts the calling thread's allocations);
 *  - an MR's handle is the slot of its key's index, filled by whichever thread gets the index:
 *    threads registering and deregistering at once, while another scans the table (stats, PD
 *    and pool busy checks) and looks keys up, always find their own MR's fields in their
 *    handle (suite 'stress' runs it longer, under ThreadSanitizer in CI);
 *  - the destroys that must say -EBUSY find the MRs the table holds.
 */
#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "test_api_util.h"

/* Allocations made by this thread while counting is on. */
namespace {
thread_local bool g_counting = false;
thread_local uint64_t g_allocs = 0;

void *counted_alloc(size_t n)
{
	if (g_counting)
		g_allocs++;
	void *p = std::malloc(n == 0 ? 1 : n);
	if (p == nullptr)
		throw std::bad_alloc();
	return p;
}
void *counted_alloc_nothrow(size_t n) noexcept
{
	if (g_counting)
		g_allocs++;
	return std::malloc(n == 0 ? 1 : n);
}
} // namespace

void *operator new(size_t n)
{
	return counted_alloc(n);
}
void *operator new[](size_t n)
{
	return counted_alloc(n);
}
void *operator new(size_t n, const std::nothrow_t &) noexcept
{
	return counted_alloc_nothrow(n);
}
void *operator new[](size_t n, const std::nothrow_t &) noexcept
{
	return counted_alloc_nothrow(n);
}
void operator delete(void *p) noexcept
{
	std::free(p);
}
void operator delete[](void *p) noexcept
{
	std::free(p);
}
void operator delete(void *p, size_t) noexcept
{
	std::free(p);
}
void operator delete[](void *p, size_t) noexcept
{
	std::free(p);
}

using namespace nicmr::test;

namespace {

class HotPath : public HotPathFixture {};

/* Keeps a scan's result from being optimised away. */
void keep(uint64_t v)
{
	static std::atomic<uint64_t> sink{0};
	sink.store(v, std::memory_order_relaxed);
}

struct Counting {
	Counting()
	{
		g_allocs = 0;
		g_counting = true;
	}
	~Counting() { g_counting = false; }
	uint64_t allocs() const { return g_allocs; }
};

} // namespace

TEST_F(HotPath, CountingSeesAnAllocation)
{
	/* The counter itself works: a test that cannot fail proves nothing. */
	Counting c;
	auto *p = new (std::nothrow) int(1);
	EXPECT_EQ(c.allocs(), 1u);
	delete p;
}

TEST_F(HotPath, PoolRegistrationAndDeregistrationAllocateNothing)
{
	warm_up(); /* and the MR table's pages */
	ASSERT_FALSE(HasFatalFailure());
	uint64_t allocs = 0;
	{
		Counting c;
		pool_rounds(2000);
		allocs = c.allocs();
	}
	EXPECT_EQ(allocs, 0u);
}

TEST_F(HotPath, SlowPathRegistrationDoesAllocate)
{
	/* The other side of the line the hot path draws (and proof the count reaches the API):
	 * plain memory gets a mapping record. */
	Anon plain(4096);
	nicmr_mr *m = nullptr;
	uint64_t allocs = 0;
	{
		Counting c;
		ASSERT_EQ(nicmr_mr_reg(pd, plain.get(), 4096, kAll, 0, 0, &m), 0);
		allocs = c.allocs();
	}
	EXPECT_GT(allocs, 0u);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_F(HotPath, TheHandleIsTheSlotOfTheKeysIndex)
{
	nicmr_mr *a = nullptr, *b = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, 0, 0, &a), 0);
	ASSERT_EQ(nicmr_mr_reg(pd, base + 8192, 4096, kAll, 0, 0, &b), 0);
	EXPECT_EQ(a, nicmr_mr_slot(dev, nicmr_mr_key(a)));
	EXPECT_EQ(b, nicmr_mr_slot(dev, nicmr_mr_key(b)));
	EXPECT_EQ(nicmr_mr_count(dev, pd, nullptr), 2u);
	EXPECT_EQ(nicmr_mr_count(dev, nullptr, pool), 2u);
	EXPECT_EQ(stats(dev).mrs, 2u);
	ASSERT_EQ(nicmr_mr_dereg(a), 0);
	EXPECT_EQ(nicmr_mr_count(dev, pd, nullptr), 1u);
	/* A freed slot (not reused yet) answers -EINVAL, not a second deregistration of whatever
	 * it held, and every call that needs a live handle says the same. */
	EXPECT_EQ(nicmr_mr_dereg(a), -EINVAL);
	nicmr_mr *sub = nullptr;
	EXPECT_EQ(nicmr_mr_reg_sub(a, 0, 64, kAll, 0, 0, &sub), -EINVAL);
	EXPECT_EQ(sub, nullptr);
	EXPECT_EQ(nicmr_mr_in_pool(a), -EINVAL);
	size_t size = 0;
	EXPECT_EQ(nicmr_mr_raw_attr(a, nullptr, &size), -EINVAL);
	EXPECT_EQ(nicmr_mr_refresh(a, nullptr, 0), -EINVAL);
	EXPECT_EQ(nicmr_mr_key(a), 0u);
	EXPECT_EQ(nicmr_mr_len(a), 0u);
	ASSERT_EQ(nicmr_mr_dereg(b), 0);
	EXPECT_EQ(stats(dev).mrs, 0u);
}

TEST_F(HotPath, BusyChecksFindMrsInTheTable)
{
	nicmr_pd *pd2 = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd2), 0);
	nicmr_mr *m = nullptr, *sub = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd2, base, 8192, kAll, 0, 0, &m), 0);
	ASSERT_EQ(nicmr_mr_reg_sub(m, 0, 4096, kAll, 0, 0, &sub), 0);
	EXPECT_EQ(nicmr_pd_free(pd2), -EBUSY);
	EXPECT_EQ(nicmr_pool_destroy(pool), -EBUSY);
	EXPECT_EQ(nicmr_device_close(dev), -EBUSY);
	ASSERT_EQ(nicmr_mr_dereg(m), -EBUSY) << "its sub-MR holds it";
	/* The refused deregistration put the handle back as it was. */
	EXPECT_EQ(nicmr_mr_key(m), nicmr_mr_key(nicmr_mr_slot(dev, nicmr_mr_key(m))));
	EXPECT_EQ(nicmr_mr_len(m), 8192u);
	EXPECT_EQ(nicmr_mr_in_pool(m), 1);
	EXPECT_EQ(nicmr_mr_count(dev, pd2, nullptr), 2u);
	EXPECT_EQ(nicmr_mr_count(dev, nullptr, pool), 1u) << "the sub-MR is its base's user";
	EXPECT_EQ(nicmr_pd_free(pd2), -EBUSY);
	ASSERT_EQ(nicmr_mr_dereg(sub), 0);
	EXPECT_EQ(nicmr_pd_free(pd2), -EBUSY);
	ASSERT_EQ(nicmr_mr_dereg(m), 0);
	EXPECT_EQ(nicmr_pd_free(pd2), 0);
}

/*
 * Threads register and deregister from the pool, each checking after every registration that
 * its handle holds exactly its region and that a lookup of the key translates it; a scanner
 * reads the table all the while. Rounds from NICMR_HOTPATH_ROUNDS (default 2,000 per thread).
 */
TEST_F(HotPath, ThreadsHandingIndicesOverAlwaysFindTheirOwnHandle)
{
	const char *env = std::getenv("NICMR_HOTPATH_ROUNDS");
	const int rounds = env ? std::atoi(env) : 2000;
	constexpr int kThreads = 3;
	std::atomic<int> started{0};
	std::atomic<bool> done{false};
	std::atomic<uint64_t> wrong{0};
	std::vector<std::thread> ts;
	for (int t = 0; t < kThreads; t++) {
		ts.emplace_back([&, t] {
			started.fetch_add(1);
			while (started.load() < kThreads + 1)
				std::this_thread::yield();
			std::mt19937 rng{unsigned(t)};
			std::vector<nicmr_mr *> mine;
			for (int i = 0; i < rounds; i++) {
				if (mine.size() < 8 && (mine.empty() || rng() % 2)) {
					const size_t off = (size_t(t) << 20) + 4096 * (rng() % 200);
					const size_t len = 64 + rng() % 4000;
					nicmr_mr *m = nullptr;
					if (nicmr_mr_reg(pd, base + off, len, kAll, 0, 0, &m) !=
					    0) {
						wrong.fetch_add(1);
						continue;
					}
					uint64_t iova = 0;
					if (nicmr_mr_addr(m) != base + off ||
					    nicmr_mr_len(m) != len ||
					    m != nicmr_mr_slot(dev, nicmr_mr_key(m)) ||
					    nicmr_key_lookup(dev, nicmr_mr_key(m), u(base + off),
							     len, NICMR_ACCESS_REMOTE_WRITE,
							     &iova) != 0)
						wrong.fetch_add(1);
					mine.push_back(m);
				} else {
					const size_t k = rng() % mine.size();
					const uint32_t key = nicmr_mr_key(mine[k]);
					const void *a = nicmr_mr_addr(mine[k]);
					if (nicmr_mr_dereg(mine[k]) != 0)
						wrong.fetch_add(1);
					uint64_t iova = 0;
					/* Deregistered: never accepted again. */
					if (nicmr_key_lookup(dev, key, u(a), 1, 0, &iova) == 0)
						wrong.fetch_add(1);
					mine.erase(mine.begin() + long(k));
				}
			}
			for (nicmr_mr *m : mine)
				if (nicmr_mr_dereg(m) != 0)
					wrong.fetch_add(1);
		});
	}
	/* The scans race with the threads on purpose (ThreadSanitizer watches them). They are no
	 * snapshot: an MR deregistered behind the scan and registered ahead of it counts twice,
	 * so their counts are not checked here, only that they run. */
	std::atomic<uint64_t> scans{0};
	std::thread scanner([&] {
		started.fetch_add(1);
		do {
			nicmr_device_stats s{};
			if (nicmr_device_get_stats(dev, &s) != 0)
				wrong.fetch_add(1);
			keep(nicmr_mr_count(dev, pd, pool));
			scans.fetch_add(1);
		} while (!done.load());
	});
	for (auto &t : ts)
		t.join();
	done.store(true);
	scanner.join();
	EXPECT_EQ(wrong.load(), 0u);
	EXPECT_GT(scans.load(), 0u);
	EXPECT_EQ(stats(dev).mrs, 0u);
}
