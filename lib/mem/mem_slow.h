/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SlowMaps: DMA mappings of memory outside every pool, one per registration (the slow path),
 * beside the DmaSpace whose pools the fast path registers from.
 *
 *   map(addr, len, write)
 *     page-align [addr, addr + len)
 *     -> the FI_MR_ALLOCATED check: every page mapped with the access the device needs, and
 *        faulted in (madvise MADV_POPULATE_READ / _WRITE; a write fault breaks copy-on-write
 *        sharing first, as a pin for DMA must), else -EFAULT
 *     -> pin: a count per 4 KiB page; a page is mlock'ed when its count leaves 0 and unlocked
 *        when it returns to 0 (mlock does not nest); pages inside a pool of the space are the
 *        pool's and are not counted
 *     -> IOVA from the window (the top quarter of the highest valid range), congruent with the
 *        VA up to 2 MiB
 *     -> dma_map of [va, va + len) at that IOVA, for this mapping alone (two overlapping
 *        mappings each have their own: the IOMMU maps one page at several IOVAs; the DmaSpace,
 *        which must find one pool per address, is not involved)
 *   unmap(m): the same steps backwards.
 *
 *   pins:  std::map  4 KiB page VA -> count            }  one mutex (mu_), slow path only;
 *   iova:  IovaAllocator over the window               }  the pool lookups of map() run
 *   count: live mappings                               }  under it too (wait_for_lookups)
 *
 * A failed map() leaves nothing behind: no pin, no IOVA range, no DMA mapping. Nothing here is
 * on a hot path: every call takes the lock and may make system calls.
 */
#ifndef NICMR_MEM_SLOW_H
#define NICMR_MEM_SLOW_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mem_dma.h"
#include "mem_space.h"

namespace nicmr::mem {

/* One slow-path mapping: [va, va + len) page-aligned, mapped at iova; the pages it counted. */
struct SlowMap {
	uintptr_t va = 0;
	size_t len = 0;
	uint64_t iova = 0;
	size_t align = 4096; /* iova % align == va % align: the largest translation page */
	std::vector<std::pair<uintptr_t, size_t>> pinned; /* runs counted in the pins */
};

class SlowMaps {
public:
	/*
	 * The IOVA window of slow-path mappings among ranges: the top quarter of the highest
	 * range, from a 2 MiB boundary (the whole range when that boundary falls outside it).
	 * Pools are placed lowest first, so the two never meet in practice; if they did, the
	 * IOMMU's -EEXIST would fail the later mapping cleanly. Empty ({1, 0}) for no ranges.
	 */
	static IovaRange window(const std::vector<IovaRange> &ranges);

	/*
	 * Slow maps beside space, through its mapper, in the window of the mapper's ranges. name
	 * prefixes log lines (the device's spec). -ENOSPC: the mapper has no IOVA range; -ENOMEM.
	 * The SlowMaps must be destroyed before space, and only once every mapping is unmapped.
	 */
	static int create(DmaSpace &space, std::string name, std::unique_ptr<SlowMaps> *out);

	/*
	 * Pins and maps [addr, addr + len); write: the device may write into it. 0; -EINVAL (len
	 * 0, or the range wraps), -EFAULT (a page unmapped, or not readable, or not writable when
	 * write), -ENOMEM (no memory, or mlock over RLIMIT_MEMLOCK), -EPERM (mlock with a limit
	 * of 0 and no CAP_IPC_LOCK), -ENOSPC (the window has no room), the mapper's errors
	 * (-EEXIST, -ENOSPC, ...), or another mlock errno negated. On failure *out is
	 * untouched and nothing is left pinned, allocated or mapped.
	 */
	int map(uintptr_t addr, size_t len, bool write, std::unique_ptr<SlowMap> *out);
	/* Unmaps, frees the IOVA and unpins; null does nothing. A dma_unmap error is logged, the
	 * rest is undone all the same. */
	void unmap(std::unique_ptr<SlowMap> m);

	/*
	 * On-demand-paging regions (doc/odp.md): an IOVA range is reserved for the whole region
	 * at registration, with nothing pinned or mapped; pages are pinned and mapped into it as
	 * they become present to the device, and unmapped and unpinned when they stop being so.
	 *
	 * odp_reserve: n bytes (a multiple of 4 KiB) of the window, congruent with va up to
	 * 2 MiB. 0; -ENOSPC (no room); -ENOMEM.
	 * odp_map: pins [va, va + n) (page-aligned, pages inside pools excepted, as map()) and
	 * maps it at iova. 0; -ENOMEM, -EPERM (mlock, as map()); the mapper's errors; nothing
	 * left pinned or mapped on failure.
	 * odp_unmap: unmaps and unpins what odp_map(va, iova, n) did (errors logged).
	 */
	int odp_reserve(uintptr_t va, size_t n, uint64_t *iova);
	/* Faults [va, end) (page-aligned) in, for writing when write, as map() checks a range:
	 * MADV_POPULATE_READ / _WRITE where the kernel has them; elsewhere only the mapping is
	 * checked (mincore, /proc/self/maps) and odp_map's mlock faults the pages in. 0; -EFAULT
	 * (a page unmapped, not readable, or not writable when write); -ENOMEM. */
	static int populate(uintptr_t va, uintptr_t end, bool write);
	void odp_release(uint64_t iova, size_t n);
	int odp_map(uintptr_t va, uint64_t iova, size_t n);
	void odp_unmap(uintptr_t va, uint64_t iova, size_t n);
	/* The two halves, for a mapping that loses some of its pages (an IOMMU unmaps only whole
	 * mappings: VFIO type1 refuses to split one): odp_dma_unmap of the whole, odp_unpin of the
	 * pages that left, odp_remap of the pages that stay (pinned already). */
	void odp_dma_unmap(uint64_t iova, size_t n);
	void odp_unpin(uintptr_t va, size_t n);
	int odp_remap(uintptr_t va, uint64_t iova, size_t n);

	/* Live mappings, and 4 KiB pages pinned by them (stats). */
	uint64_t mappings() const;
	size_t pinned_pages() const;
	/* Pins of one 4 KiB page (0: not pinned): tests. */
	uint32_t pins_of(uintptr_t page) const;
	/* IOVA bytes held by live mappings: tests. */
	size_t iova_bytes() const;
	const IovaRange &window() const noexcept { return window_; }

	/*
	 * Returns once every pool lookup that map() started before the call has ended: part of
	 * the owner's grace period before it frees retired DmaSpace snapshots
	 * (DmaSpace::reclaim_retired). Slow path.
	 */
	void wait_for_lookups() const;

	SlowMaps(const SlowMaps &) = delete;
	SlowMaps &operator=(const SlowMaps &) = delete;

private:
	SlowMaps(DmaSpace &space, std::string name, IovaRange window);
	/* Counts [va, va + len) (pages outside pools) into m->pinned and locks them (resident:
	 * every page is present already, lock_pages in mem_slow.cpp); under mu_. */
	int pin(uintptr_t va, size_t len, SlowMap *m, bool resident);
	void unpin(const std::vector<std::pair<uintptr_t, size_t>> &runs); /* under mu_ */

	DmaSpace &space_;
	const std::string name_;
	const IovaRange window_;
	mutable std::mutex mu_;
	IovaAllocator iova_;		     /* mu_ */
	std::map<uintptr_t, uint32_t> pins_; /* 4 KiB page -> count; mu_ */
	uint64_t maps_ = 0;		     /* mu_ */
};

} // namespace nicmr::mem

#endif
