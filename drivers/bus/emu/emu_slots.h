/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device model's per-thread state over the process's thread slots (lib/common's
 * nicmr_thread.h): what several threads ringing doorbells at once would otherwise meet on (one
 * counter, one reader count) is spread over kThreadSlots slots of kThreadAlign bytes (a
 * cache-line pair).
 *
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
 * Why a reader and a writer never both proceed. On the shared slot, each does a sequentially
 * consistent read-modify-write or store of its own word, then a sequentially consistent load
 * of the other's: in the single total order of those, one of them sees the other's and backs
 * off. On a slot of its own (SlotClaim::kFenceFree), the reader's store and load carry no
 * fence; the writer issues membarrier_all() between its store and its scan (nicmr_thread.h
 * says why that is enough).
 */
#ifndef NICMR_EMU_SLOTS_H
#define NICMR_EMU_SLOTS_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

#include "nicmr_align.h"
#include "nicmr_thread.h"

namespace nicmr::emu {

class SlotCounter {
public:
	void add(uint64_t n = 1) noexcept
	{
		const SlotClaim c = thread_claim();
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
		const SlotClaim c = thread_claim();
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
		const SlotClaim c = thread_claim();
		leave(c, slots_[c.slot()].readers);
	}
	void lock() noexcept
	{
		writers_.lock();
		writer_.store(true, std::memory_order_seq_cst);
		membarrier_all(); /* for the fence-free readers */
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
