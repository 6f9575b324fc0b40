/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Per-thread key caches of the registration path.
 *
 *   thread T:  thread_local list ──┐                 ┌── nicmr_device::caches
 *                                  └─> ThreadCache <─┘   (shared_ptr on both sides)
 *
 * A registering thread takes keys from its own mr::KeyCache (no shared cache line touched for
 * 31 of 32 registrations) instead of the engine's global ring. Whichever of the thread's exit
 * and the device's close comes first flushes the cache into the engine and detaches the entry;
 * the other then finds it detached. Both run under one process-wide mutex: they are rare, and a
 * per-device lock could not be taken safely by a thread whose device may be closing.
 */
#include <algorithm>
#include <thread>

#include "api_internal.h"
#include "emu_slots.h"
#include "nicmr_log.h"

namespace nicmr::api {

namespace {

std::mutex &cache_mu()
{
	static std::mutex mu;
	return mu;
}

/* Detaches tc from its device, returning its keys first. cache_mu() held. */
void detach(ThreadCache &tc)
{
	tc.cache.reset(); /* KeyCache's destructor flushes into the key space */
	tc.size.store(0, std::memory_order_relaxed);
	tc.retiring.store(0, std::memory_order_relaxed);
	tc.dev = nullptr;
}

struct ThreadCaches {
	std::vector<std::shared_ptr<ThreadCache>> list;
	~ThreadCaches()
	{
		std::lock_guard lk(cache_mu());
		for (auto &tc : list) {
			nicmr_device *dev = tc->dev;
			if (dev == nullptr)
				continue;
			std::erase(dev->caches, tc);
			detach(*tc);
		}
	}
};

thread_local ThreadCaches t_caches;

} // namespace

uint64_t next_device_serial() noexcept
{
	static std::atomic<uint64_t> n{1};
	return n.fetch_add(1, std::memory_order_relaxed);
}

ThreadCache *thread_cache(nicmr_device *dev) noexcept
{
	/* Registration path, per call: a scan of this thread's few entries. */
	for (auto &tc : t_caches.list)
		if (tc->serial == dev->serial)
			return tc.get();
	if (dev->engine->keys().index_count() < kMinKeysForCaches)
		return nullptr;
	/* First registration by this thread on this device (slow path). */
	try {
		auto tc = std::make_shared<ThreadCache>();
		tc->serial = dev->serial;
		tc->dev = dev;
		tc->cache.emplace(dev->engine->keys());
		tc->fence_free = emu::detail::membarrier_ready();
		std::lock_guard lk(cache_mu());
		/* Entries of closed devices are dropped here rather than on close, which cannot
		 * reach other threads' lists. */
		std::erase_if(t_caches.list, [](const auto &e) { return e->dev == nullptr; });
		dev->caches.push_back(tc);
		try {
			t_caches.list.push_back(tc);
		} catch (...) {
			dev->caches.pop_back();
			detach(*tc);
			throw;
		}
		return tc.get();
	} catch (...) {
		NICMR_LOG(warn, "api", "%s: no memory for a key cache: registering without one",
			  dev->spec.c_str());
		return nullptr;
	}
}

void cached_counts(nicmr_device *dev, uint64_t *free, uint64_t *retiring) noexcept
{
	std::lock_guard lk(cache_mu());
	*free = *retiring = 0;
	for (auto &tc : dev->caches) {
		*free += tc->size.load(std::memory_order_relaxed);
		*retiring += tc->retiring.load(std::memory_order_relaxed);
	}
}

void wait_for_pool_lookups(nicmr_device *dev) noexcept
{
	/*
	 * Lookups marked by a plain store: the membarrier runs a full barrier on every CPU that
	 * runs one of our threads, so a mark the scan below misses belongs to a lookup whose
	 * snapshot load comes after the caller's (already made) publication, or to a thread
	 * not running (a context switch is a full barrier): it reads the new snapshot.
	 */
	/* The caller's snapshot store before the scan's loads (store-load: a full fence). */
	std::atomic_thread_fence(std::memory_order_seq_cst);
	emu::detail::membarrier_all();
	{
		std::lock_guard lk(cache_mu());
		for (auto &tc : dev->caches)
			/* Acquire: pairs with the mark's release; the thread is past its reads. */
			while (tc->in_lookup.load(std::memory_order_acquire) != 0)
				std::this_thread::yield();
	}
	/* seq_cst: the counter's increments and the caller's publication are in one order. */
	while (dev->uncached_lookups.load(std::memory_order_seq_cst) != 0)
		std::this_thread::yield();
	/* The slow path looks pools up under slow_mu: whoever held it is done. */
	std::lock_guard slow(dev->slow_mu);
}

void close_caches(nicmr_device *dev) noexcept
{
	std::lock_guard lk(cache_mu());
	for (auto &tc : dev->caches)
		detach(*tc);
	dev->caches.clear();
}

} // namespace nicmr::api
