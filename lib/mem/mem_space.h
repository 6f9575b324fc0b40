/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DmaSpace: the pools one IOMMU (one device, one VFIO container) can reach, each mapped once at
 * an IOVA chosen by IovaAllocator, and the lockless translation from an address to its pool and
 * IOVA.
 *
 *   address ──lookup()──> PoolEntry { va, len, iova, pool }  ──> iova = entry.iova + (a - va)
 *
 * Placement: a pool of size S is put at an IOVA aligned to the largest power of two A (up to
 * 1 GiB) that its page size and the valid ranges allow, with iova % A == va % A, so that the
 * translation tables of a region inside it can use pages of size A.
 *
 * Readers (lookup, translate) take no lock, make no system call, allocate nothing: they read an
 * immutable sorted snapshot published with a release store. Writers (add/remove) serialise on a
 * mutex and retire old snapshots only after every registered reader passed a quiescent state.
 */
#ifndef NICMR_MEM_SPACE_H
#define NICMR_MEM_SPACE_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mem_dma.h"
#include "mem_pool.h"

namespace nicmr::mem {

/* Allocates aligned IOVA ranges out of a set of valid ranges. Not thread-safe (DmaSpace locks). */
class IovaAllocator {
public:
	explicit IovaAllocator(std::vector<IovaRange> valid);
	/* -EINVAL (len 0, align not a power of two), -ENOSPC (no room). */
	int alloc(size_t len, size_t align, uint64_t va_hint, uint64_t *iova);
	/* -ENOENT when [iova, iova + len) was not allocated as one piece. */
	int free(uint64_t iova, size_t len);
	size_t allocated_bytes() const noexcept;
};

struct PoolEntry {
	uintptr_t va;
	size_t len;
	uint64_t iova;
	size_t iova_align; /* largest page size a translation inside this pool may use */
	Pool *pool;
};

class DmaSpace {
public:
	explicit DmaSpace(DmaMapper &mapper);
	~DmaSpace(); /* unmaps and frees every pool still in the space */

	/* Places and maps a pool; the space owns it. -ENOSPC (IOVA exhausted), mapper errors. */
	int add_pool(std::unique_ptr<Pool> pool, const PoolEntry **entry);
	/* Unmaps and destroys a pool. -ENOENT if it is not in this space (double destroy). */
	int remove_pool(const Pool *pool);

	/* Hot path: the pool holding [addr, addr + len), or nullptr. O(log pools), lockless. */
	const PoolEntry *lookup(const void *addr, size_t len) const noexcept;
	/* Hot path: IOVA of addr; -EFAULT when [addr, addr + len) is in no pool. */
	int translate(const void *addr, size_t len, uint64_t *iova) const noexcept;

	DmaMapper &mapper() noexcept;
	size_t pool_count() const noexcept;
};

/*
 * A small allocator over one mapped pool, for the driver's own DMA memory (command queue,
 * mailboxes, pages given to the device, CQ and QP buffers). Slow path; thread-safe.
 */
struct DmaBlock {
	void *va = nullptr;
	uint64_t iova = 0;
	size_t len = 0;
};

class DmaArena {
public:
	/* Creates its own pool (params) in space. */
	static int create(DmaSpace &space, const PoolParams &params,
			  std::unique_ptr<DmaArena> *out);
	~DmaArena();
	/* -EINVAL (len 0, bad align), -ENOMEM (full). Memory is zeroed. */
	int alloc(size_t len, size_t align, DmaBlock *out);
	void free(const DmaBlock &block);
	size_t bytes_in_use() const noexcept;
};

} // namespace nicmr::mem

#endif
