/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DmaSpace: the pools one IOMMU (one device, one VFIO container) can reach, each mapped once at
 * an IOVA chosen by IovaAllocator, and the lockless translation from an address to its pool and
 * IOVA.
 *
 *   address ──lookup()──> PoolEntry { va, len, iova, pool }  ──> iova = entry.iova + (a - va)
 *
 * Placement: a pool of size S is put at an IOVA aligned to A = min(1 GiB, bit_ceil(S)), at
 * least its page size; when the valid ranges have no room at A, A halves down to the page size.
 * Always iova % A == va % A, so that the translation tables of a region inside the pool can
 * use pages of size A. The first IOVA page (kNullIovaGuard bytes) is never given out, so a DMA
 * to IOVA 0 faults.
 *
 * Readers (lookup, translate) take no lock, make no system call, allocate nothing: they read an
 * immutable sorted snapshot (with a bucket index over the VA span) published with a release
 * store. Writers (add/remove) serialise on a mutex. Old snapshots are retired, never freed
 * under a reader: they stay until the space is destroyed, or until the owner calls
 * reclaim_retired() with its grace-period wait (the owner knows its readers: api's are
 * registering threads, which mark their lookups, api::wait_for_pool_lookups; an owner whose
 * readers are QSBR readers passes rte_rcu_qsbr_synchronize). An owner that adds and removes
 * pools while readers run must call it, or retired snapshots pile up with the churn.
 */
#ifndef NICMR_MEM_SPACE_H
#define NICMR_MEM_SPACE_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "mem_dma.h"
#include "mem_pool.h"

namespace nicmr::mem {

/* Allocates aligned IOVA ranges out of a set of valid ranges. Not thread-safe (DmaSpace locks). */
/* Bytes at IOVA 0 that a DmaSpace never places a pool in. */
inline constexpr uint64_t kNullIovaGuard = 4096;

class IovaAllocator {
public:
	explicit IovaAllocator(std::vector<IovaRange> valid);
	/* -EINVAL (len 0, align not a power of two), -ENOSPC (no room). */
	int alloc(size_t len, size_t align, uint64_t va_hint, uint64_t *iova);
	/* -ENOENT when [iova, iova + len) was not allocated as one piece. */
	int release(uint64_t iova, size_t len);
	size_t allocated_bytes() const noexcept;

private:
	std::map<uint64_t, uint64_t> free_; /* start -> last (inclusive) of each free piece */
	std::map<uint64_t, size_t> used_;   /* start -> len of each allocation */
	size_t allocated_ = 0;
};

struct PoolEntry {
	uintptr_t va;
	size_t len;
	uint64_t iova;
	size_t iova_align; /* largest page size a translation inside this pool may use */
	Pool *pool;
	void *owner; /* the caller's object for the pool (add_pool), fixed while published */
};

class DmaSpace {
public:
	explicit DmaSpace(DmaMapper &mapper);
	~DmaSpace(); /* unmaps and frees every pool still in the space */

	/*
	 * Places and maps a pool; the space owns it, and destroys it on failure. *entry (may be
	 * null) points at its entry until remove_pool. Errors: -EINVAL (null pool, pages smaller
	 * than the IOMMU's), -EEXIST (overlaps a pool of the space), -ENOSPC (IOVA exhausted),
	 * -ENOMEM, mapper errors (the IOVA is returned first). owner is stored in the entry
	 * before it is published, so that a lookup finds the caller's object with the entry.
	 */
	int add_pool(std::unique_ptr<Pool> pool, const PoolEntry **entry, void *owner = nullptr);
	/*
	 * Unpublishes, unmaps and destroys a pool. -ENOENT if it is not in this space (double
	 * destroy); a dma_unmap error is returned, but the pool is gone all the same.
	 */
	int remove_pool(const Pool *pool);

	/*
	 * Hot path: the pool holding [addr, addr + len), or nullptr. Lockless; O(1) for spread-out
	 * pools, O(log pools in one bucket) at worst. The entry stays readable until the space is
	 * destroyed or reclaim_retired() ran, even if the pool is removed meanwhile.
	 */
	const PoolEntry *lookup(const void *addr, size_t len) const noexcept;
	/* Hot path: IOVA of addr; -EFAULT when [addr, addr + len) is in no pool. */
	int translate(const void *addr, size_t len, uint64_t *iova) const noexcept;

	DmaMapper &mapper() noexcept;
	size_t pool_count() const noexcept;

	/*
	 * Frees the snapshots and entries retired by add_pool/remove_pool. Until then they are kept
	 * (a reader may still be inside one). wait_for_readers must return only after every reader
	 * that could have loaded one of them has finished its lookup: the owner's grace period
	 * (rte_rcu_qsbr_synchronize, liburcu-qsbr synchronize_rcu). Without a call, retired memory
	 * is freed when the space is destroyed. Returns the number of objects freed.
	 */
	size_t reclaim_retired(const std::function<void()> &wait_for_readers);
	/* Snapshots and entries retired and not yet reclaimed (tests, diagnostics). */
	size_t retired_count() const;

	DmaSpace(const DmaSpace &) = delete;
	DmaSpace &operator=(const DmaSpace &) = delete;

	/* Largest IOVA alignment a pool is placed at. */
	static constexpr size_t kMaxIovaAlign = kPage1G;

private:
	/* One pool as the readers see it: the translation needs nothing outside this slot. */
	struct Slot {
		uintptr_t va;
		uintptr_t end; /* va + len */
		uint64_t iova;
		const PoolEntry *entry;
	};
	/* The slots overlapping one bucket of the VA span: slots[first, first + count). */
	struct Bucket {
		uint32_t first;
		uint32_t count;
	};
	/*
	 * Immutable once published. Buckets of 2^shift bytes from lo cut the search to the few
	 * slots that overlap one bucket, so that a lookup costs about the same with 1 or 256
	 * pools; clustered pools fall back to a binary search inside their bucket.
	 */
	struct Snapshot {
		std::vector<Slot> slots; /* sorted by va, non-overlapping */
		std::vector<Bucket> buckets;
		uintptr_t lo = 0;
		unsigned shift = 0;
		const Slot *find(uintptr_t a) const noexcept;
	};
	static int build_index(Snapshot &snap);
	struct Live {
		std::unique_ptr<PoolEntry> entry;
		std::unique_ptr<Pool> pool;
	};

	int publish(std::vector<Slot> slots);
	int unmap_and_free(Live &live);

	DmaMapper &mapper_;
	std::atomic<const Snapshot *> current_{nullptr};
	mutable std::mutex mu_; /* serialises writers; readers never take it */
	IovaAllocator iova_;	/* under mu_ */
	std::vector<Live> live_;
	std::unique_ptr<Snapshot> current_owner_;
	std::vector<std::unique_ptr<Snapshot>> retired_snapshots_;
	std::vector<std::unique_ptr<PoolEntry>> retired_entries_;
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
	/*
	 * Creates its own pool (params) in space; the arena must be destroyed before the space.
	 * Errors: those of Pool::create and DmaSpace::add_pool.
	 */
	static int create(DmaSpace &space, const PoolParams &params,
			  std::unique_ptr<DmaArena> *out);
	~DmaArena(); /* removes its pool from the space */
	DmaArena(const DmaArena &) = delete;
	DmaArena &operator=(const DmaArena &) = delete;

	/*
	 * -EINVAL (len 0, align 0 or not a power of two), -ENOMEM (no free piece large enough).
	 * Memory is zeroed; the block's IOVA is a multiple of align; lengths are rounded up to
	 * kGranule so that two blocks never share a cache line.
	 */
	int alloc(size_t len, size_t align, DmaBlock *out);
	/* -ENOENT when block was not handed out by this arena (or was freed already). */
	int release(const DmaBlock &block);
	size_t bytes_in_use() const noexcept;
	size_t capacity() const noexcept;
	const PoolEntry &entry() const noexcept { return *entry_; }

	static constexpr size_t kGranule = 64;

private:
	DmaArena(DmaSpace &space, const PoolEntry *entry);

	DmaSpace &space_;
	const PoolEntry *entry_;
	mutable std::mutex mu_;
	std::map<size_t, size_t> free_; /* offset -> len, coalesced */
	std::map<size_t, size_t> used_; /* offset -> len */
	std::atomic<size_t> in_use_{0};
};

} // namespace nicmr::mem

#endif
