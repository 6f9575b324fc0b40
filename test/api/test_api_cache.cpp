/* SPDX-License-Identifier: BSD-3-Clause */
/* The registration path's per-thread key caches: used on large key spaces only, their keys
 * counted as free, returned when the thread exits and when the device closes. */
#include <thread>
#include <vector>

#include "test_api_util.h"

using namespace nicmr::test;

namespace {

/* The smallest key space that registers through per-thread caches. */
const std::string kCachedSpec = "emu:mkeys=" + std::to_string(nicmr::api::kMinKeysForCaches) +
				",delivery=inline,odp_cache=0"; /* the pool owns every index */

struct Open {
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	explicit Open(const std::string &spec)
	{
		EXPECT_EQ(nicmr_device_open(spec.c_str(), &dev), 0);
		if (dev) {
			EXPECT_EQ(nicmr_pd_alloc(dev, &pd), 0);
		}
	}
	~Open()
	{
		if (pd) {
			EXPECT_EQ(nicmr_pd_free(pd), 0);
		}
		if (dev) {
			EXPECT_EQ(nicmr_device_close(dev), 0);
		}
	}
};

/* Registers and deregisters n regions on the calling thread. */
void churn(const Open &o, void *a, int n)
{
	for (int i = 0; i < n; ++i) {
		nicmr_mr *mr = nullptr;
		ASSERT_EQ(nicmr_mr_reg(o.pd, a, 64, NICMR_ACCESS_SEND, 0, 0, &mr), 0);
		ASSERT_EQ(nicmr_mr_dereg(mr), 0);
	}
}

/* Registers until -ENOSPC; returns how many and deregisters them. */
size_t fill(const Open &o, void *a)
{
	std::vector<nicmr_mr *> mrs;
	int rc = 0;
	while (rc == 0) {
		nicmr_mr *mr = nullptr;
		rc = nicmr_mr_reg(o.pd, a, 64, NICMR_ACCESS_SEND, 0, 0, &mr);
		if (rc == 0)
			mrs.push_back(mr);
	}
	EXPECT_EQ(rc, -ENOSPC);
	for (nicmr_mr *m : mrs)
		EXPECT_EQ(nicmr_mr_dereg(m), 0);
	return mrs.size();
}

} // namespace

TEST(ApiKeyCache, CachedKeysCountAsFree)
{
	Open o(kCachedSpec);
	Anon m(4096);
	/* Every mkey of the pool the device has created so far (the default initial pool). */
	const uint64_t all = stats(o.dev).mkey_pool;
	EXPECT_EQ(all, nicmr::mr::kDefaultPoolInitial);
	EXPECT_EQ(stats(o.dev).keys_free, all);
	churn(o, m.get(), 100);
	auto s = stats(o.dev);
	EXPECT_EQ(s.keys_free + s.keys_retiring, all);
	EXPECT_LT(o.dev->engine->keys().ring_free_count(), all)
		<< "the registering thread keeps a batch of keys in its cache";
}

TEST(ApiKeyCache, KeysCachedByAnExitedThreadComeBack)
{
	Open o(kCachedSpec);
	Anon m(4096);
	std::thread t([&] { churn(o, m.get(), 100); });
	t.join();
	EXPECT_EQ(o.dev->engine->keys().ring_free_count() + o.dev->engine->keys().retiring_count(),
		  o.dev->engine->pool_size())
		<< "the thread's exit returned its cache to the global pool";
	EXPECT_EQ(fill(o, m.get()), nicmr::api::kMinKeysForCaches - 1)
		<< "every key is reachable from another thread, the pool grown to its cap";
}

TEST(ApiKeyCache, DeviceCloseReturnsCachesOfLivingThreads)
{
	Anon m(4096);
	auto o = std::make_unique<Open>(kCachedSpec);
	std::atomic<int> step{0};
	std::thread t([&] {
		churn(*o, m.get(), 100);
		step.store(1, std::memory_order_release);
		/* Still alive while the device closes; exits after. */
		while (step.load(std::memory_order_acquire) != 2)
			std::this_thread::yield();
		/* A new device reuses nothing of the closed one's cache. */
		Open again(kCachedSpec);
		churn(again, m.get(), 100);
		auto s = stats(again.dev);
		EXPECT_EQ(s.keys_free + s.keys_retiring, s.mkey_pool);
	});
	while (step.load(std::memory_order_acquire) != 1)
		std::this_thread::yield();
	EXPECT_EQ(o->dev->caches.size(), 1u) << "one registering thread";
	o.reset(); /* closes with t's cache still holding keys */
	step.store(2, std::memory_order_release);
	t.join();
}

TEST(ApiKeyCache, SmallKeySpacesRegisterWithoutCaches)
{
	Open o(kSpec);
	Anon m(4096);
	churn(o, m.get(), 10);
	EXPECT_TRUE(o.dev->caches.empty());
	/* Every index but 0 and the on-demand mkey cache's 176 (doc/odp.md, "Indices"). */
	EXPECT_EQ(fill(o, m.get()), 1023u - 176) << "exact -ENOSPC: no key hides in a cache";
}

TEST(ApiKeyCache, TwoThreadsRegisterEveryKeyBetweenThem)
{
	Open o(kCachedSpec);
	Anon m(4096);
	std::vector<std::thread> ts;
	for (int i = 0; i < 2; ++i)
		ts.emplace_back([&] { churn(o, m.get(), 2000); });
	for (auto &t : ts)
		t.join();
	EXPECT_EQ(stats(o.dev).mrs, 0u);
	EXPECT_EQ(o.dev->caches.size(), 0u) << "both threads exited";
	EXPECT_EQ(fill(o, m.get()), nicmr::api::kMinKeysForCaches - 1);
}

/* The cacheless path on two threads at once: each registration takes its key straight from the
 * engine's HTS ring (under ThreadSanitizer this is the case test/tsan.supp is about). */
TEST(ApiKeyCache, TwoThreadsRegisterWithoutCaches)
{
	Open o(kSpec);
	Anon m(4096);
	std::vector<std::thread> ts;
	for (int i = 0; i < 2; ++i)
		ts.emplace_back([&] { churn(o, m.get(), 2000); });
	for (auto &t : ts)
		t.join();
	EXPECT_TRUE(o.dev->caches.empty());
	EXPECT_EQ(fill(o, m.get()), 1023u - 176);
}

/* nicmr_device_get_stats counts MRs as they come and go (no table scan): per registering
 * thread, kept when the thread exits, right when one thread deregisters another's MRs, on
 * devices with and without thread caches, and equal to a scan of the table throughout. */
TEST(ApiKeyCache, StatsCountMrsMadeAndFreedOnAnyThread)
{
	for (const std::string &spec : {kCachedSpec, std::string(kSpec)}) {
		SCOPED_TRACE(spec);
		Open o(spec);
		Anon m(4096);
		auto live = [&] {
			const uint64_t n = stats(o.dev).mrs;
			EXPECT_EQ(n, nicmr_mr_count(o.dev, nullptr, nullptr)) << "the table agrees";
			return n;
		};
		EXPECT_EQ(live(), 0u);
		std::vector<nicmr_mr *> mrs(10);
		std::thread t([&] {
			for (auto &mr : mrs)
				ASSERT_EQ(nicmr_mr_reg(o.pd, m.get(), 64, NICMR_ACCESS_SEND, 0, 0,
						       &mr),
					  0);
		});
		t.join();
		EXPECT_EQ(live(), 10u) << "counted by a thread that has exited";
		for (int i = 0; i < 4; i++)
			ASSERT_EQ(nicmr_mr_dereg(mrs[i]), 0);
		EXPECT_EQ(live(), 6u) << "deregistered by another thread than made them";
		nicmr_mr *sub = nullptr;
		ASSERT_EQ(nicmr_mr_reg_sub(mrs[4], 0, 8, NICMR_ACCESS_SEND, 0, 0, &sub), 0);
		EXPECT_EQ(live(), 7u) << "sub-MRs count";
		EXPECT_EQ(nicmr_mr_dereg(mrs[4]), -EBUSY);
		EXPECT_EQ(live(), 7u) << "a refused deregistration leaves the count";
		ASSERT_EQ(nicmr_mr_dereg(sub), 0);
		std::thread u([&] {
			for (int i = 4; i < 10; i++)
				ASSERT_EQ(nicmr_mr_dereg(mrs[i]), 0);
		});
		u.join();
		EXPECT_EQ(live(), 0u);
	}
}
