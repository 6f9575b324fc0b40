/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A per-domain store of provider objects (Mr, VecMap) that registration takes and fi_close gives
 * back without a lock, an allocation or a system call: a lock-free LIFO free list over objects
 * allocated in batches that are never returned to the heap until the store goes (the domain's
 * close).
 *
 *   head: [ tag (32) | index + 1 (32) ]          0 in the low half: the list is empty
 *   chunk c (c = 0 .. kMaxChunks-1) holds kFirst << c objects, indices from kFirst * (2^c - 1)
 *     chunk 0: [0 .. kFirst)  chunk 1: [kFirst .. 3 kFirst)  chunk 2: ...   (each batch doubles)
 *   object: ... slab_index (its index + 1, fixed) | slab_next (the index + 1 below it, or 0)
 *
 * Objects are named by index, not pointer, so that the head fits one 64-bit compare-and-swap
 * with a tag: a pop that read head = (t, i) and i's next = j can only succeed while the head is
 * still (t, i), and every push or pop bumps t, so an object taken and given back meanwhile (the
 * ABA case) makes the swap fail. A popper may read the next link of an object another thread has
 * just taken: the link is an atomic, the memory stays allocated, and the swap then fails.
 *
 * take() is the fast path; when the list is empty the caller calls grow() (a slow path: one
 * mutex and one batch allocation, twice the size of the previous one). put() may run on any
 * thread (fi_close need not run on the thread of fi_mr_reg).
 */
#ifndef NICMR_FI_SLAB_H
#define NICMR_FI_SLAB_H

#include <atomic>
#include <bit>
#include <cstdint>
#include <mutex>
#include <new>

namespace nicmr::fabric {

/* T has `uint32_t slab_index` and `std::atomic<uint32_t> slab_next`; kFirst is a power of 2. */
template <typename T, uint32_t kFirst> class Slab {
	static_assert(kFirst != 0 && (kFirst & (kFirst - 1)) == 0, "kFirst is a power of 2");

public:
	/* Enough chunks for 2^32 - 1 indices of the smallest batch; growth stops before. */
	static constexpr uint32_t kMaxChunks = 32 - std::countr_zero(kFirst);

	Slab() = default;
	Slab(const Slab &) = delete;
	Slab &operator=(const Slab &) = delete;
	~Slab()
	{
		for (auto &c : chunks_)
			delete[] c.load(std::memory_order_relaxed); /* every object is back */
	}

	/* FAST PATH: no lock, no allocation, no system call. nullptr when the list is empty. */
	T *take()
	{
		/* acquire: pairs with the release of the put() or grow() that pushed the head, so
		 * the object's next link and its fields as the giver left them are visible. */
		uint64_t h = head_.load(std::memory_order_acquire);
		for (;;) {
			const auto idx = static_cast<uint32_t>(h);
			if (idx == 0)
				return nullptr;
			T *obj = at(idx);
			if (!obj)
				return nullptr;
			/* relaxed: ordered by the acquire of the head that named obj; a stale
			 * value only exists when the head moved on, and then the swap fails. */
			const uint32_t next = obj->slab_next.load(std::memory_order_relaxed);
			const uint64_t nh = ((h >> 32) + 1) << 32 | next;
			/* acquire on success: as the load above, for the head we now own;
			 * acquire on failure: h is reloaded and its object is read next. */
			if (head_.compare_exchange_weak(h, nh, std::memory_order_acquire,
							std::memory_order_acquire))
				return obj;
		}
	}

	/* Gives obj back (any thread). No lock, no allocation, no system call. */
	void put(T *obj) { push_chain(obj, obj); }

	/* SLOW PATH: takes an object after allocating a batch when the list is still empty (one
	 * mutex serialises growers). nullptr when the allocation fails or every index is used. */
	T *grow()
	{
		std::lock_guard<std::mutex> lk(grow_mu_);
		if (T *obj = take())
			return obj; /* another thread grew, or objects came back meanwhile */
		if (nchunks_ == kMaxChunks)
			return nullptr;
		const uint32_t c = nchunks_;
		const uint64_t n = uint64_t{kFirst} << c;
		const uint64_t first = uint64_t{kFirst} * ((uint64_t{1} << c) - 1);
		if (first + n > UINT32_MAX)
			return nullptr; /* index + 1 must fit 32 bits */
		T *batch = new (std::nothrow) T[n];
		if (!batch)
			return nullptr;
		for (uint64_t k = 0; k < n; k++) {
			batch[k].slab_index = static_cast<uint32_t>(first + k + 1);
			/* relaxed: published by push_chain's release below. */
			batch[k].slab_next.store(k + 1 < n ? static_cast<uint32_t>(first + k + 2)
							   : 0,
						 std::memory_order_relaxed);
		}
		/* relaxed: a taker reaches this chunk only through the head, whose release in
		 * push_chain orders this store before it. */
		chunks_[c].store(batch, std::memory_order_relaxed);
		nchunks_ = c + 1;
		if (n > 1)
			push_chain(&batch[1], &batch[n - 1]);
		return &batch[0];
	}

	/* Objects allocated so far (test and report use). */
	uint64_t capacity()
	{
		std::lock_guard<std::mutex> lk(grow_mu_);
		return uint64_t{kFirst} * ((uint64_t{1} << nchunks_) - 1);
	}

private:
	/* The object of index + 1 idx (idx > 0). */
	T *at(uint32_t idx) const
	{
		const uint64_t i = idx - 1;
		const uint64_t q = i / kFirst + 1;
		const unsigned c = std::bit_width(q) - 1;
		if (c >= kMaxChunks)
			return nullptr; /* never: indices come from grow(), q >= 1 */
		const uint64_t off = i - uint64_t{kFirst} * ((uint64_t{1} << c) - 1);
		/* relaxed: see grow(); the head's acquire made the chunk pointer visible. */
		return chunks_[c].load(std::memory_order_relaxed) + off;
	}

	/* Pushes the chain first .. last (linked by slab_next, last's link rewritten). */
	void push_chain(T *first, T *last)
	{
		uint64_t h = head_.load(std::memory_order_relaxed);
		for (;;) {
			/* relaxed: published by the release of the swap below. */
			last->slab_next.store(static_cast<uint32_t>(h), std::memory_order_relaxed);
			const uint64_t nh = ((h >> 32) + 1) << 32 | first->slab_index;
			/* release: the chain's links and the objects' fields as the giver left
			 * them happen before a taker's acquire of this head. relaxed on failure:
			 * only the head's value is used, to relink. */
			if (head_.compare_exchange_weak(h, nh, std::memory_order_release,
							std::memory_order_relaxed))
				return;
		}
	}

	std::atomic<uint64_t> head_{0};
	std::atomic<T *> chunks_[kMaxChunks]{};
	std::mutex grow_mu_;   /* serialises grow() */
	uint32_t nchunks_ = 0; /* grow_mu_ */
};

} // namespace nicmr::fabric

#endif
