/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A per-domain store of provider objects (VecMap, the run tables of vectored MRs) that
 * registration takes and fi_close gives back without a lock, an allocation or a system call: a DPDK
 * rte_ring of free object pointers (HTS mode at both ends, as lib/mr's key rings) over objects
 * allocated in batches that are never returned to the heap until the store goes (the domain's
 * close).
 *
 *   ring: [ T* | T* | ... ]  free objects; capacity exactly `limit`, set once by init()
 *   batch b (b = 0, 1, ...): first << b objects (each batch doubles), the last one cut so that
 *     the objects allocated never exceed `limit`: growth stops there
 *
 * The bound. A ring cannot grow, so it is sized once to the most objects that can ever exist:
 * a VecMap per live vectored MR of more than one run, limit = NICMR_MAX_SEGMENTED_MRS. (The
 * provider's MR objects are no store's: they are the slots of a fabric-wide table by key index,
 * fi_internal.h's mr_slot.) A registration holds its object before it has a key, so concurrent
 * registrations that will fail may hold some for a moment; with the store at its bound and
 * empty, every segmented-MR slot is taken or about to be, and the caller reports -FI_ENOSPC as
 * the native call would.
 * Memory: the ring costs 8 bytes per object of the bound (the run store: 32 KiB), reserved at
 * init() as anonymous lazily populated pages (the pages appear as the ring's cursors first pass
 * over them); the objects themselves only as batches are allocated.
 *
 * take() is the fast path (one dequeue); when the ring is empty the caller calls grow() (a slow
 * path: one mutex and one batch allocation, twice the size of the previous one). put() (one
 * enqueue) may run on any thread (fi_close need not run on the thread of fi_mr_reg); it cannot
 * fail, since each object is at most once in a ring that holds all of them. rte_ring needs no
 * EAL (rte_eal_init) when its memory is the caller's (rte_ring_init).
 */
#ifndef NICMR_FI_SLAB_H
#define NICMR_FI_SLAB_H

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <new>

#include <rte_ring.h>

namespace nicmr::fabric {

/* kFirst: objects of the first batch (> 0). */
template <typename T, uint32_t kFirst> class Slab {
	static_assert(kFirst != 0, "the first batch holds objects");

public:
	/* Batches of a store whose bound is below 2^32: kFirst << b grows past it by b = 32. */
	static constexpr uint32_t kMaxBatches = 33;

	Slab() = default;
	Slab(const Slab &) = delete;
	Slab &operator=(const Slab &) = delete;
	~Slab()
	{
		/* every object is back; they go with their batches */
		for (uint32_t b = 0; b < nbatches_; b++)
			delete[] batches_[b];
		if (ring_)
			munmap(ring_, ring_len_);
	}

	/* SLOW PATH (once, before any take): a ring of exactly limit free objects. 0; -EINVAL
	 * (limit 0, or above what a ring holds); -ENOMEM (the ring's memory). name: the ring's
	 * (DPDK's names are not global without EAL; it helps reading a dump). */
	int init(const char *name, uint32_t limit)
	{
		if (ring_)
			return -EINVAL;
		if (limit == 0 || limit > RTE_RING_SZ_MASK)
			return -EINVAL;
		const ssize_t sz = rte_ring_get_memsize(rte_align32pow2(limit + 1));
		if (sz < 0)
			return -EINVAL;
		void *p = mmap(nullptr, static_cast<size_t>(sz), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			return -ENOMEM;
		auto *r = static_cast<rte_ring *>(p);
		/* HTS at both ends: its heads and tails are C11 atomics, which ThreadSanitizer
		 * follows (but for one edge, test/tsan.supp); the default MP/MC mode's inline
		 * assembly is opaque to it (doc/registration.md). */
		if (rte_ring_init(r, name, limit,
				  RING_F_MP_HTS_ENQ | RING_F_MC_HTS_DEQ | RING_F_EXACT_SZ) != 0) {
			munmap(p, static_cast<size_t>(sz));
			return -EINVAL;
		}
		ring_ = r;
		ring_len_ = static_cast<size_t>(sz);
		limit_ = limit;
		return 0;
	}

	/* FAST PATH: one dequeue; no lock, no allocation, no system call. nullptr when the ring
	 * is empty. The ring's HTS dequeue orders the object's fields as its giver left them
	 * before this return (the giver's enqueue releases the tail this dequeue acquires). */
	T *take()
	{
		void *obj = nullptr;
		if (rte_ring_dequeue(ring_, &obj) != 0)
			return nullptr;
		return static_cast<T *>(obj);
	}

	/* Gives obj back (any thread): one enqueue; no lock, no allocation, no system call. */
	void put(T *obj)
	{
		/* Never full: every object the store made fits the ring, and obj is not in it. */
		rte_ring_enqueue(ring_, obj);
	}

	/* SLOW PATH: takes an object after allocating a batch when the ring is still empty (one
	 * mutex serialises growers). 0 and *out; -ENOSPC when the store holds its bound (every
	 * object exists and is out); -ENOMEM when the batch cannot be allocated. */
	int grow(T **out)
	{
		std::lock_guard<std::mutex> lk(grow_mu_);
		if (T *obj = take()) {
			*out = obj; /* another thread grew, or objects came back meanwhile */
			return 0;
		}
		if (made_ == limit_ || nbatches_ == kMaxBatches)
			return -ENOSPC;
		const uint64_t want = uint64_t{kFirst} << nbatches_;
		const auto n = static_cast<uint32_t>(std::min<uint64_t>(want, limit_ - made_));
		T *batch = new (std::nothrow) T[n];
		if (!batch)
			return -ENOMEM;
		batches_[nbatches_++] = batch;
		made_ += n;
		/* The rest into the ring, in bursts from a table on the stack. */
		void *tab[64];
		for (uint32_t k = 1; k < n;) {
			const uint32_t cnt = std::min<uint32_t>(64, n - k);
			for (uint32_t j = 0; j < cnt; j++)
				tab[j] = &batch[k + j];
			rte_ring_enqueue_bulk(ring_, tab, cnt, nullptr); /* room: see put() */
			k += cnt;
		}
		*out = &batch[0];
		return 0;
	}

	/* Objects allocated so far (test and report use). */
	uint64_t capacity()
	{
		std::lock_guard<std::mutex> lk(grow_mu_);
		return made_;
	}

	/* SLOW PATH: objects taken and not given back (the domain's live MRs: fi_close(domain)
	 * is -FI_EBUSY while any is out). Exact when no take or put runs meanwhile. Acquire on
	 * both tails: a giver's accesses before its put happen before this return. */
	uint64_t out()
	{
		std::lock_guard<std::mutex> lk(grow_mu_);
		/* HTS keeps each end's head and tail in one 64-bit word that it stores
		 * atomically; rte_ring_count's plain reads of them would race with put(). */
		__rte_ring_hts_pos prod, cons;
		prod.raw = __atomic_load_n(&ring_->hts_prod.ht.raw, __ATOMIC_ACQUIRE);
		cons.raw = __atomic_load_n(&ring_->hts_cons.ht.raw, __ATOMIC_ACQUIRE);
		/* Free-running 32-bit cursors: their difference is the ring's count. */
		return made_ - (prod.pos.tail - cons.pos.tail);
	}

	/* The most objects there can be (init's limit). */
	uint32_t limit() const { return limit_; }

private:
	rte_ring *ring_ = nullptr;
	size_t ring_len_ = 0;
	uint32_t limit_ = 0;
	std::mutex grow_mu_;	       /* serialises grow() */
	uint32_t made_ = 0;	       /* grow_mu_: objects allocated */
	uint32_t nbatches_ = 0;	       /* grow_mu_ */
	T *batches_[kMaxBatches] = {}; /* grow_mu_ */
};

} // namespace nicmr::fabric

#endif
