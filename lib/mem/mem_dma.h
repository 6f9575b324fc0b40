/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The DMA-mapper interface: what a bus offers lib/mem so that pools can be made reachable by a
 * device. A bus (the emulated IOMMU, VFIO's type-1 IOMMU) implements it; lib/mem maps each pool
 * once, when the pool is created, and unmaps it when the pool is destroyed.
 *
 * All calls return 0 or a negative errno. They are slow-path calls (they may take locks and make
 * system calls); nothing on a data path calls them.
 */
#ifndef NICMR_MEM_DMA_H
#define NICMR_MEM_DMA_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nicmr::mem {

/* An inclusive IOVA range [start, last], as VFIO_IOMMU_GET_INFO reports them. */
struct IovaRange {
	uint64_t start;
	uint64_t last;
};

class DmaMapper {
public:
	virtual ~DmaMapper() = default;

	/*
	 * Makes [va, va + len) reachable by the device at [iova, iova + len).
	 * Errors: -EINVAL (misaligned or zero length), -ERANGE (outside the valid IOVA ranges),
	 * -EEXIST (overlaps a mapping), -ENOSPC (the IOMMU's mapping limit is reached), or what the
	 * bus reports.
	 */
	virtual int dma_map(void *va, uint64_t iova, size_t len) = 0;

	/* Revokes a mapping made by dma_map with the same iova and len. -ENOENT if there is none.
	 */
	virtual int dma_unmap(uint64_t iova, size_t len) = 0;

	/* The IOVA ranges the IOMMU accepts, sorted, non-overlapping. */
	virtual std::vector<IovaRange> iova_ranges() const = 0;

	/* The smallest page size the IOMMU maps (a power of two, usually 4096). */
	virtual size_t min_page_size() const { return 4096; }
};

} // namespace nicmr::mem

#endif
