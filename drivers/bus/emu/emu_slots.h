/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Per-thread slots for the device model's hot paths: what several threads ringing doorbells at
 * once would otherwise meet on (one counter, one reader count) is spread over kThreadSlots slots
 * of kThreadAlign bytes (a cache-line pair), one per thread (round-robin; threads beyond
 * kThreadSlots share).
 *
 *   emu_thread_slot()   this thread's slot number, fixed at its first call
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
 * Why a reader and a writer never both proceed: each does a sequentially consistent store or
 * read-modify-write of its own word, then a sequentially consistent load of the other's; in the
 * single total order of those operations one of them sees the other's and backs off.
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

/* This thread's slot: handed out round-robin at its first call. The thread-local is constant
 * initialised (kThreadSlots: none yet), so an access is one TLS lookup with no guard. */
inline size_t emu_thread_slot() noexcept
{
	thread_local size_t slot = kThreadSlots;
	if (slot == kThreadSlots) [[unlikely]] {
		static std::atomic<size_t> next{0};
		/* Relaxed: only spreads threads over slots; any value is correct. */
		slot = next.fetch_add(1, std::memory_order_relaxed) % kThreadSlots;
	}
	return slot;
}

class SlotCounter {
public:
	void add(uint64_t n = 1) noexcept
	{
		slots_[emu_thread_slot()].v.fetch_add(n, std::memory_order_relaxed);
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
		std::atomic<uint64_t> &mine = slots_[emu_thread_slot()].readers;
		for (;;) {
			mine.fetch_add(1, std::memory_order_seq_cst);
			if (!writer_.load(std::memory_order_seq_cst))
				return;
			/* A writer is in or on its way: step aside until it is done. */
			mine.fetch_sub(1, std::memory_order_release);
			while (writer_.load(std::memory_order_acquire))
				std::this_thread::yield();
		}
	}
	void unlock_shared() noexcept
	{
		/* Release: the reader's accesses happen before a writer that sees the count drop.
		 */
		slots_[emu_thread_slot()].readers.fetch_sub(1, std::memory_order_release);
	}
	void lock() noexcept
	{
		writers_.lock();
		writer_.store(true, std::memory_order_seq_cst);
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
	Slot slots_[kThreadSlots];
	alignas(kThreadAlign) std::atomic<bool> writer_{false};
	std::mutex writers_; /* one writer at a time */
};

} // namespace nicmr::emu

#endif
