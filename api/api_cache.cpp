/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Per-thread key caches of the registration path, kept by the device at each registering
 * thread's slot (lib/common's nicmr_thread.h):
 *
 *   nicmr_device::caches.by_slot[thread_slot()] ──> ThreadCache (the device owns it)
 *
 * A registering thread takes keys from its own mr::KeyCache (no shared cache line touched for
 * 31 of 32 registrations) instead of the engine's global ring. Whichever of the thread's exit
 * (DeviceCaches::slot_exit, run on the exiting thread) and the device's close comes first
 * flushes the cache into the engine and drops it. Both run under one process-wide mutex: they
 * are rare, and a per-device lock could not be taken safely by a thread whose device may be
 * closing. Lock order: the slot registry's mutex (held around slot_exit), then cache_mu().
 */
#include <cerrno>
#include <new>
#include <thread>

#include "api_internal.h"
#include "nicmr_log.h"

namespace nicmr::api {

namespace {

std::mutex &cache_mu()
{
	static std::mutex mu;
	return mu;
}

/* Returns the cache's keys to the key space, keeps its MR count and drops it. cache_mu()
 * held. */
void drop(DeviceCaches &caches, std::unique_ptr<ThreadCache> &tc) noexcept
{
	if (tc != nullptr)
		caches.mrs_gone += tc->mrs.load(std::memory_order_relaxed);
	tc.reset(); /* KeyCache's destructor flushes into the key space */
}

} // namespace

void DeviceCaches::slot_exit(size_t slot) noexcept
{
	std::lock_guard lk(cache_mu());
	drop(*this, by_slot[slot]);
}

size_t DeviceCaches::size() const noexcept
{
	std::lock_guard lk(cache_mu());
	size_t n = 0;
	for (const auto &tc : by_slot)
		n += tc != nullptr ? 1 : 0;
	return n;
}

ThreadCache *thread_cache_create(nicmr_device *dev) noexcept
{
	/* Slow path: the calling thread's first registration on dev (thread_cache's miss). */
	const SlotClaim c = thread_claim();
	/* The cap the device would have without the on-demand cache's reserve: the reserve of a
	 * default cap does not make a large device small (doc/odp.md, "Indices"). */
	if (dev->engine->pool_max() + dev->engine->odp_reserved() + 1 < kMinKeysForCaches)
		return nullptr;
	/* First registration by this thread on this device (slow path). */
	std::unique_ptr<ThreadCache> tc(new (std::nothrow) ThreadCache);
	int rc = tc ? 0 : -ENOMEM;
	if (rc == 0) {
		try {
			tc->cache.emplace(dev->engine->keys());
		} catch (const std::bad_alloc &) {
			rc = -ENOMEM;
		}
	}
	/* Before the cache is the slot's: the thread's exit must give its keys back. */
	if (rc == 0)
		rc = watch_thread_exit(&dev->caches);
	if (rc != 0) {
		NICMR_LOG(warn, "api",
			  "%s: no key cache for this thread (%d): registering without one",
			  dev->spec.c_str(), rc);
		return nullptr;
	}
	tc->fence_free = c.fence_free();
	std::lock_guard lk(cache_mu());
	dev->caches.by_slot[c.slot()] = std::move(tc);
	return dev->caches.by_slot[c.slot()].get();
}

void cached_counts(nicmr_device *dev, uint64_t *free, uint64_t *retiring) noexcept
{
	std::lock_guard lk(cache_mu());
	*free = *retiring = 0;
	for (const auto &tc : dev->caches.by_slot) {
		if (tc == nullptr)
			continue;
		*free += tc->size.load(std::memory_order_relaxed);
		*retiring += tc->retiring.load(std::memory_order_relaxed);
	}
}

uint64_t live_mrs(nicmr_device *dev) noexcept
{
	/* Slow path (stats): one pass over the thread slots. A thread's count may be negative
	 * (it deregistered MRs others made); the sum is the number of live MRs once the
	 * registrations in flight have returned. */
	int64_t n = dev->mrs_uncached.load(std::memory_order_relaxed);
	{
		std::lock_guard lk(cache_mu());
		n += dev->caches.mrs_gone;
		for (const auto &tc : dev->caches.by_slot)
			if (tc != nullptr)
				n += tc->mrs.load(std::memory_order_relaxed);
	}
	/* A registration in flight on another thread may have counted in before (or out after)
	 * the threads read before it: never report a negative count. */
	return n > 0 ? uint64_t(n) : 0;
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
	membarrier_all();
	{
		std::lock_guard lk(cache_mu());
		for (const auto &tc : dev->caches.by_slot)
			/* Acquire: pairs with the mark's release; the thread is past its reads. */
			while (tc != nullptr && tc->in_lookup.load(std::memory_order_acquire) != 0)
				std::this_thread::yield();
	}
	/* seq_cst: the counter's increments and the caller's publication are in one order. */
	while (dev->uncached_lookups.load(std::memory_order_seq_cst) != 0)
		std::this_thread::yield();
	/* The slow path looks pools up under its SlowMaps' lock: whoever held it is done. */
	if (dev->slow_maps)
		dev->slow_maps->wait_for_lookups();
}

void close_caches(nicmr_device *dev) noexcept
{
	/* First: no exiting thread drops a cache while the loop below does (unwatch waits). */
	unwatch_thread_exits(&dev->caches);
	std::lock_guard lk(cache_mu());
	for (auto &tc : dev->caches.by_slot)
		drop(dev->caches, tc);
}

} // namespace nicmr::api
