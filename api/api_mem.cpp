/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Pools (memory mapped once, registered from on the fast path) and slow-path mappings (memory
 * outside every pool, mapped for one MR).
 *
 * Slow path, per MR:
 *   page-align [addr, addr + len) -> one madvise(MADV_POPULATE_READ, or _WRITE when the device
 *      may write): every page mapped with the access the device needs, and faulted in (a write
 *      fault breaks copy-on-write sharing first, as a pin for DMA must), else -EFAULT; kernels
 *      before 5.14 (no such advice) and refusals go through /proc/self/maps to say which
 *   -> lock the pages (a count per 4 KiB page: mlock does not nest, so two MRs that share a
 *      page lock it once and unlock it when the last one goes; pages inside a pool are the
 *      pool's and are not counted)
 *   -> IOVA from the device's slow-path window, congruent with the VA up to 2 MiB
 *   -> dma_map for this MR alone (overlapping MRs each have their own mapping: the IOMMU maps
 *      one page at several IOVAs; the DmaSpace, which must find one pool per address, is not
 *      involved)
 * Release runs the same steps backwards.
 */
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "api_internal.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

constexpr uintptr_t kPage = 4096;

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

int add_pool(nicmr_device *dev, std::unique_ptr<mem::Pool> p, nicmr_pool **out)
{
	auto *np = new (std::nothrow) nicmr_pool;
	if (np == nullptr)
		return -ENOMEM;
	np->dev = dev;
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

/* Undoes the counts of runs (caller holds slow_mu). */
void unpin_runs(nicmr_device *dev, const std::vector<std::pair<uintptr_t, size_t>> &runs)
{
	for (const auto &[va, len] : runs) {
		uintptr_t from = 0;
		size_t ulen = 0;
		for (uintptr_t p = va; p < va + len; p += kPage) {
			auto it = dev->pins.find(p);
			if (it == dev->pins.end() || --it->second != 0)
				continue;
			dev->pins.erase(it);
			if (ulen && from + ulen == p) {
				ulen += kPage;
				continue;
			}
			if (ulen)
				munlock(reinterpret_cast<void *>(from), ulen);
			from = p;
			ulen = kPage;
		}
		if (ulen)
			munlock(reinterpret_cast<void *>(from), ulen);
	}
}

/*
 * True when every byte of [va, end) lies in mappings that are readable, and writable too when
 * write is set (/proc/self/maps, sorted by address). The device would otherwise write into
 * memory the process itself may not write (ibv_reg_mr refuses that with EFAULT too).
 */
bool range_accessible(uintptr_t va, uintptr_t end, bool write)
{
	FILE *f = std::fopen("/proc/self/maps", "re");
	if (f == nullptr)
		return true; /* no procfs: mincore's check stands alone */
	char line[512];
	uintptr_t covered = va;
	while (covered < end && std::fgets(line, sizeof(line), f) != nullptr) {
		unsigned long lo = 0, hi = 0;
		char perms[8] = {};
		if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3)
			continue;
		if (hi <= covered || lo > covered)
			continue;
		if (perms[0] != 'r' || (write && perms[1] != 'w'))
			break;
		covered = hi;
	}
	std::fclose(f);
	return covered >= end;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Whether this kernel knows MADV_POPULATE_*: asked once, on a page of our own. The
 * environment variable NICMR_NO_MADV_POPULATE=1 takes the older kernels' path (tests run the
 * slow path both ways). */
bool populate_supported()
{
	static const bool supported = [] {
		const char *off = std::getenv("NICMR_NO_MADV_POPULATE");
		if (off != nullptr && std::strcmp(off, "1") == 0)
			return false;
		alignas(4096) static char page[4096];
		return madvise(page, sizeof(page), MADV_POPULATE_READ) == 0;
	}();
	return supported;
}

/*
 * The FI_MR_ALLOCATED contract for [va, end) (page-aligned): every page is mapped and allows
 * what the device will do; 0 or -EFAULT. One system call when the kernel can populate; the
 * maps file is read only to explain a refusal, or on an older kernel.
 */
int check_backed(uintptr_t va, uintptr_t end, bool write)
{
	void *p = reinterpret_cast<void *>(va);
	const size_t n = end - va;
	if (populate_supported()) {
		int rc;
		do {
			rc = madvise(p, n, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
		} while (rc != 0 && errno == EINTR);
		if (rc == 0)
			return 0;
		/* ENOMEM: a hole; EFAULT: a page that would raise SIGBUS; EINVAL: no such
		 * permission, or a mapping that cannot be populated (I/O memory), which the maps
		 * file tells apart. */
		if (errno != EINVAL)
			return -EFAULT;
		return range_accessible(va, end, write) ? 0 : -EFAULT;
	}
	try {
		/* mincore fails with ENOMEM for a range with unmapped pages, and never faults
		 * anything in. */
		std::vector<unsigned char> vec(n / kPage);
		if (mincore(p, n, vec.data()) != 0)
			return errno == ENOMEM ? -EFAULT : -errno;
	} catch (...) {
		return -ENOMEM;
	}
	return range_accessible(va, end, write) ? 0 : -EFAULT;
}

} // namespace

int nicmr_slow_map_create(nicmr_device *dev, uintptr_t addr, size_t len, bool write,
			  std::unique_ptr<nicmr_slow_map> *out)
{
	const uintptr_t va = addr & ~(kPage - 1);
	const uintptr_t end = (addr + len + kPage - 1) & ~(kPage - 1);
	if (end <= va)
		return -EINVAL;
	const size_t n = end - va;
	auto m = std::unique_ptr<nicmr_slow_map>(new (std::nothrow) nicmr_slow_map);
	if (!m)
		return -ENOMEM;
	m->va = va;
	m->len = n;
	/* FI_MR_ALLOCATED: the memory must exist now, with the access the device needs. */
	if (int rc = check_backed(va, end, write); rc != 0) {
		NICMR_LOG(warn, "api", "%s: slow-path MR [%#lx, +%zu): memory not mapped %s",
			  dev->spec.c_str(), (unsigned long)addr, len,
			  write ? "readable and writable" : "readable");
		return rc;
	}

	std::lock_guard lk(dev->slow_mu);
	try {
		/* Count and lock the pages that no pool holds, run by run. */
		uintptr_t run = 0;
		size_t run_len = 0;
		const char *const fn = __func__; /* the log line in the lambda */
		auto flush = [&]() -> int {
			if (run_len == 0)
				return 0;
			m->pinned.emplace_back(run, run_len);
			for (uintptr_t p = run; p < run + run_len; p += kPage)
				dev->pins[p]++;
			/* Lock the whole run; locking a page twice is harmless, only the unlock
			 * must wait for the last user (unpin_runs). */
			if (mlock(reinterpret_cast<void *>(run), run_len) != 0) {
				int e = errno;
				NICMR_LOG_IN(fn, warn, "api", "%s: mlock [%#lx, +%zu) failed: %s",
					     dev->spec.c_str(), (unsigned long)run, run_len,
					     std::strerror(e));
				return e == ENOMEM ? -ENOMEM : -e;
			}
			run_len = 0;
			return 0;
		};
		int rc = 0;
		for (uintptr_t p = va; p < end && rc == 0; p += kPage) {
			bool in_pool =
				dev->space->lookup(reinterpret_cast<void *>(p), kPage) != nullptr;
			if (in_pool) {
				rc = flush();
				continue;
			}
			if (run_len == 0)
				run = p;
			run_len += kPage;
		}
		if (rc == 0)
			rc = flush();
		if (rc) {
			unpin_runs(dev, m->pinned);
			return rc;
		}
		/* Congruent with the VA up to 2 MiB, as pools are, so the low bits agree. */
		size_t align = std::bit_floor(n);
		align = std::clamp<size_t>(align, kPage, mem::kPage2M);
		m->align = align;
		rc = dev->slow_iova->alloc(n, align, va, &m->iova);
		if (rc) {
			NICMR_LOG(warn, "api", "%s: no IOVA in the slow-path window for %zu bytes",
				  dev->spec.c_str(), n);
			unpin_runs(dev, m->pinned);
			return rc;
		}
		rc = dev->fn->dma().dma_map(reinterpret_cast<void *>(va), m->iova, n);
		if (rc) {
			NICMR_LOG(warn, "api", "%s: dma_map of slow-path [%#lx, +%zu) at %#llx: %d",
				  dev->spec.c_str(), (unsigned long)va, n,
				  static_cast<unsigned long long>(m->iova), rc);
			dev->slow_iova->release(m->iova, n);
			unpin_runs(dev, m->pinned);
			return rc;
		}
	} catch (...) {
		unpin_runs(dev, m->pinned);
		return -ENOMEM;
	}
	dev->slow_maps++;
	*out = std::move(m);
	return 0;
}

void nicmr_slow_map_release(nicmr_device *dev, std::unique_ptr<nicmr_slow_map> m)
{
	if (!m)
		return;
	std::lock_guard lk(dev->slow_mu);
	int rc = dev->fn->dma().dma_unmap(m->iova, m->len);
	if (rc)
		NICMR_LOG(warn, "api", "%s: dma_unmap of slow-path [%#lx, +%zu) failed: %d",
			  dev->spec.c_str(), (unsigned long)m->va, m->len, rc);
	dev->slow_iova->release(m->iova, m->len);
	unpin_runs(dev, m->pinned);
	dev->slow_maps--;
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
	return add_pool(dev, std::move(p), out);
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
	return add_pool(dev, std::move(p), out);
}

int nicmr_pool_destroy(struct nicmr_pool *pool)
{
	if (pool == nullptr)
		return -EINVAL;
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

void *nicmr_pool_addr(const struct nicmr_pool *pool)
{
	return pool ? reinterpret_cast<void *>(pool->entry->va) : nullptr;
}

size_t nicmr_pool_len(const struct nicmr_pool *pool)
{
	return pool ? pool->entry->len : 0;
}

} /* extern "C" */
