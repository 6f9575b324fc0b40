/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Pools (memory mapped once, registered from on the fast path) and slow-path mappings (memory
 * outside every pool, mapped for one MR). The slow path's checking, pinning, IOVA window and
 * DMA mapping live in lib/mem (mem::SlowMaps, mem_slow.h); the device's SlowMaps is made by
 * api_device.cpp, and this file only hands it the MR's range.
 */
#include <cerrno>

#include "api_internal.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

bool page_size_known(size_t ps)
{
	return ps == mem::kPage4K || ps == mem::kPage2M || ps == mem::kPage1G;
}

/*
 * Frees the DmaSpace snapshots (and entries) that pool create/destroy retired, once no pool
 * lookup can still be reading them. Slow path, without objs_mu (the wait yields to
 * registering threads, which never take it while looking up). Every create and destroy
 * ends here, so at most the snapshots of operations running at the same time stay retired.
 */
void reclaim_snapshots(nicmr_device *dev)
{
	dev->space->reclaim_retired([dev] { api::wait_for_pool_lookups(dev); });
}

} // namespace

int nicmr_pool_add(nicmr_device *dev, std::unique_ptr<mem::Pool> p, nicmr_pool **out, bool attached)
{
	auto *np = new (std::nothrow) nicmr_pool;
	if (np == nullptr)
		return -ENOMEM;
	np->dev = dev;
	np->attached = attached;
	np->pool = p.get();
	std::unique_lock lk(dev->objs_mu);
	try {
		dev->pools.reserve(dev->pools.size() + 1);
	} catch (...) {
		delete np;
		return -ENOMEM;
	}
	const std::string name = p->name();
	int rc = dev->space->add_pool(std::move(p), &np->entry, np);
	if (rc) {
		NICMR_LOG(error, "api", "%s: mapping pool '%s' failed: %d", dev->spec.c_str(),
			  name.c_str(), rc);
		delete np;
		return rc;
	}
	dev->pools.emplace(np->pool, np);
	*out = np;
	lk.unlock();
	reclaim_snapshots(dev);
	return 0;
}

int nicmr_slow_map_create(nicmr_device *dev, uintptr_t addr, size_t len, bool write,
			  std::unique_ptr<mem::SlowMap> *out)
{
	return dev->slow_maps->map(addr, len, write, out);
}

void nicmr_slow_map_release(nicmr_device *dev, std::unique_ptr<mem::SlowMap> m)
{
	dev->slow_maps->unmap(std::move(m));
}

extern "C" {

void nicmr_pool_params_init(struct nicmr_pool_params *p)
{
	if (p == nullptr)
		return;
	*p = {};
	p->page_size = NICMR_PAGE_2M;
	p->numa_node = NICMR_NUMA_ANY;
	p->allow_fallback = 0;
	p->name = nullptr;
}

int nicmr_pool_create(struct nicmr_device *dev, const struct nicmr_pool_params *params,
		      struct nicmr_pool **out)
{
	if (dev == nullptr || params == nullptr || out == nullptr || params->size == 0 ||
	    !page_size_known(params->page_size))
		return -EINVAL;
	std::unique_ptr<mem::Pool> p;
	try {
		mem::PoolParams pp;
		pp.size = params->size;
		pp.page_size = params->page_size;
		pp.numa_node = params->numa_node;
		pp.allow_fallback = params->allow_fallback != 0;
		pp.name = params->name ? params->name : "pool";
		int rc = mem::Pool::create(pp, &p);
		if (rc) {
			NICMR_LOG(error, "api", "%s: pool '%s' of %zu bytes (pages %zu) failed: %d",
				  dev->spec.c_str(), pp.name.c_str(), pp.size, pp.page_size, rc);
			return rc;
		}
	} catch (...) {
		return -ENOMEM;
	}
	return nicmr_pool_add(dev, std::move(p), out);
}

int nicmr_pool_import(struct nicmr_device *dev, void *addr, size_t len, size_t page_size,
		      struct nicmr_pool **out)
{
	if (dev == nullptr || addr == nullptr || out == nullptr || len == 0 ||
	    !page_size_known(page_size) || reinterpret_cast<uintptr_t>(addr) % page_size ||
	    len % page_size)
		return -EINVAL;
	std::unique_ptr<mem::Pool> p;
	try {
		int rc = mem::Pool::import(addr, len, page_size, -1, "import", &p);
		if (rc)
			return rc;
	} catch (...) {
		return -ENOMEM;
	}
	return nicmr_pool_add(dev, std::move(p), out);
}

int nicmr_pool_destroy(struct nicmr_pool *pool)
{
	if (pool == nullptr)
		return -EINVAL;
	/* nicmr_dpdk_mem_attach's pools follow DPDK's memory: only its sync removes them. */
	if (pool->attached) {
		NICMR_LOG(warn, "api", "%s: pool %p destroy refused: DPDK memory (attached)",
			  pool->dev->spec.c_str(), nicmr_pool_addr(pool));
		return -EPERM;
	}
	return nicmr_pool_remove(pool);
}

} /* extern "C" */

int nicmr_pool_remove(nicmr_pool *pool)
{
	nicmr_device *dev = pool->dev;
	std::unique_lock lk(dev->objs_mu);
	/* Registrations in the pool do not run concurrently with its destroy (nicmr.h), so what
	 * the count and the scan see stays true. */
	const uint64_t mrs =
		pool->pieces.load(std::memory_order_acquire) + nicmr_mr_count(dev, nullptr, pool);
	if (mrs) {
		NICMR_LOG(warn, "api", "%s: pool %p destroy refused: %llu MRs live",
			  dev->spec.c_str(), nicmr_pool_addr(pool),
			  static_cast<unsigned long long>(mrs));
		return -EBUSY;
	}
	dev->pools.erase(pool->pool);
	int rc = dev->space->remove_pool(pool->pool);
	if (rc)
		NICMR_LOG(warn, "api", "%s: removing pool: %d", dev->spec.c_str(), rc);
	delete pool;
	lk.unlock();
	reclaim_snapshots(dev);
	return 0;
}

extern "C" {

void *nicmr_pool_addr(const struct nicmr_pool *pool)
{
	return pool ? reinterpret_cast<void *>(pool->entry->va) : nullptr;
}

size_t nicmr_pool_len(const struct nicmr_pool *pool)
{
	return pool ? pool->entry->len : 0;
}

size_t nicmr_pool_page_size(const struct nicmr_pool *pool)
{
	/* mem::Pool records the pages it got, after a fallback too (mem_pool.h). */
	return pool ? pool->pool->page_size() : 0;
}

struct nicmr_pool *nicmr_pool_find(struct nicmr_device *dev, const void *addr, size_t len)
{
	/* Registration path: no lock, no allocation, no system call (nicmr_pool_of). No thread
	 * cache: a thread's first call would make one (an allocation); the lookup is counted
	 * on the device instead (PoolLookupMark). */
	const auto a = reinterpret_cast<uintptr_t>(addr);
	if (dev == nullptr || len == 0 || a + len < a)
		return nullptr;
	uint64_t iova = 0;
	unsigned log_page = 0;
	return nicmr_pool_of(dev, nullptr, a, len, &iova, &log_page);
}

} /* extern "C" */
