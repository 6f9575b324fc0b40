/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Per-thread slots for the device model's hot paths: what several threads ringing doorbells at
 * once would otherwise meet on (one counter, one reader count) is spread over kThreadSlots slots
 * of kThreadAlign bytes (a cache-line pair).
 *
 *   emu_thread_claim()  this thread's claim, fixed at its first call: a slot of its own while
 *                       one of the first kSharedSlot slots is free (given back when the thread
 *                       exits), else the last slot, kSharedSlot, which such threads share
 *   emu_thread_slot()   the claim's slot number
 *   SlotCounter         a statistics counter: add() touches this thread's line only, sum()
 *                       reads them all (relaxed: a count ordered with nothing)
 *   SlotRwLock          a reader-writer lock whose readers touch this thread's line only: a
 *                       reader raises its slot's count and proceeds unless a writer is
 *                       announced; a writer announces itself, then waits until every slot's
 *                       count is zero. Readers are the device's doorbell path; writers are
 *                       object create/destroy (slow path). Readers must not nest (a nested
 *                       reader would wait for a writer that waits for the outer one). Meets
 *                       SharedMutex, so std::shared_lock and std::unique_lock take it.
 *
 * A thread with a slot of its own changes it with a plain load and store (no other thread
 * writes it); a thread on the shared slot uses read-modify-writes.
 *
 * Why a reader and a writer never both proceed. On the shared slot, each does a sequentially
 * consistent read-modify-write or store of its own word, then a sequentially consistent load
 * of the other's: in the single total order of those, one of them sees the other's and backs
 * off. On a slot of its own (when the process could register for membarrier(2)'s private
 * expedited command, SlotClaim::kFenceFree), the reader's store and load carry no fence; the
 * writer issues membarrier between its store and its scan, which runs a full barrier on every
 * CPU running one of the process's threads. A reader whose store the scan misses was either
 * not yet at its load (which the barrier orders after the writer's store, so it sees the
 * writer and backs off) or not running (a context switch is a full barrier).
 */
#ifndef NICMR_EMU_SLOTS_H
#define NICMR_EMU_SLOTS_H

#include "nicmr_align.h"
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

namespace nicmr::emu {

inline constexpr size_t kThreadSlots = 32;
/* The slot of threads that found none of their own. */
inline constexpr size_t kSharedSlot = kThreadSlots - 1;

/* A thread's claim, in one word: the slot number and what the thread may do there. */
struct SlotClaim {
	static constexpr uintptr_t kSlotMask = 0xff;
	static constexpr uintptr_t kOwn = 0x100;       /* the slot is this thread's alone */
	static constexpr uintptr_t kFenceFree = 0x200; /* and writers fence with membarrier */
	static constexpr uintptr_t kUnset = ~uintptr_t{0};
	uintptr_t word;
	size_t slot() const noexcept { return word & kSlotMask; }
	bool own() const noexcept { return (word & kOwn) != 0; }
	bool fence_free() const noexcept { return (word & kFenceFree) != 0; }
};

namespace detail {
/* SLOW PATH: claims a slot for this thread, stores the claim in *claim and arranges for the
 * thread's exit to give the slot back (and set *claim to the shared slot). */
void claim_thread_slot(uintptr_t *claim) noexcept;
/* Whether writers fence readers with membarrier: registered once per process. */
bool membarrier_ready() noexcept;
/* A full barrier on every CPU running one of the process's threads; nothing when
 * !membarrier_ready(), since then no reader is fence-free. */
void membarrier_all() noexcept;
} // namespace detail

/* This thread's claim. The thread-local is constant initialised (kUnset: none yet), so an
 * access is one TLS lookup with no guard. */
inline SlotClaim emu_thread_claim() noexcept
{
	thread_local uintptr_t claim = SlotClaim::kUnset;
	if (claim == SlotClaim::kUnset) [[unlikely]]
		detail::claim_thread_slot(&claim);
	return SlotClaim{claim};
}

inline size_t emu_thread_slot() noexcept
{
	return emu_thread_claim().slot();
}

class SlotCounter {
public:
	void add(uint64_t n = 1) noexcept
	{
		const SlotClaim c = emu_thread_claim();
		std::atomic<uint64_t> &v = slots_[c.slot()].v;
		if (c.own())
			v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
		else
			v.fetch_add(n, std::memory_order_relaxed);
	}
	uint64_t sum() const noexcept
	{
		uint64_t s = 0;
		for (const Slot &x : slots_)
			s += x.v.load(std::memory_order_relaxed);
		return s;
	}

private:
	struct alignas(kThreadAlign) Slot {
		std::atomic<uint64_t> v{0};
	};
	Slot slots_[kThreadSlots];
};

class SlotRwLock {
public:
	void lock_shared() noexcept
	{
		const SlotClaim c = emu_thread_claim();
		std::atomic<uint64_t> &mine = slots_[c.slot()].readers;
		for (;;) {
			if (c.fence_free()) {
				mine.store(mine.load(std::memory_order_relaxed) + 1,
					   std::memory_order_relaxed);
				/* The compiler keeps the store before the load; the writer's
				 * membarrier does the CPU's part. */
				std::atomic_signal_fence(std::memory_order_seq_cst);
				/* Acquire: the last writer's changes, released by its unlock. */
				if (!writer_.load(std::memory_order_acquire))
					return;
			} else {
				mine.fetch_add(1, std::memory_order_seq_cst);
				if (!writer_.load(std::memory_order_seq_cst))
					return;
			}
			/* A writer is in or on its way: step aside until it is done. */
			leave(c, mine);
			while (writer_.load(std::memory_order_acquire))
				std::this_thread::yield();
		}
	}
	void unlock_shared() noexcept
	{
		const SlotClaim c = emu_thread_claim();
		leave(c, slots_[c.slot()].readers);
	}
	void lock() noexcept
	{
		writers_.lock();
		writer_.store(true, std::memory_order_seq_cst);
		detail::membarrier_all(); /* for the fence-free readers */
		for (Slot &s : slots_)
			while (s.readers.load(std::memory_order_seq_cst) != 0)
				std::this_thread::yield();
	}
	void unlock() noexcept
	{
		/* Release: the writer's changes happen before a reader that sees the flag clear. */
		writer_.store(false, std::memory_order_release);
		writers_.unlock();
	}

private:
	struct alignas(kThreadAlign) Slot {
		std::atomic<uint64_t> readers{0};
	};
	/* Release: the reader's accesses happen before a writer that sees the count drop. */
	static void leave(SlotClaim c, std::atomic<uint64_t> &mine) noexcept
	{
		if (c.own())
			mine.store(mine.load(std::memory_order_relaxed) - 1,
				   std::memory_order_release);
		else
			mine.fetch_sub(1, std::memory_order_release);
	}

	Slot slots_[kThreadSlots];
	alignas(kThreadAlign) std::atomic<bool> writer_{false};
	std::mutex writers_; /* one writer at a time */
};

} // namespace nicmr::emu

#endif
