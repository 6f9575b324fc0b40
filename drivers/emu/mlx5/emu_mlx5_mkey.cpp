/* SPDX-License-Identifier: BSD-3-Clause */
#include "emu_mlx5_mkey.h"

#include <algorithm>
#include <new>
#include <thread>

namespace nicmr::emu {

namespace {

/* Busy-wait step: spin a little, then give the core away (only under contention). */
void backoff(unsigned &spins) noexcept
{
	if (++spins >= 64)
		std::this_thread::yield();
}

} // namespace

MkeyTable::MkeyTable(uint32_t log_size)
    : capacity_(uint32_t{1} << log_size), chunks_((capacity_ + kChunk - 1) >> kChunkShift),
      dir_(new std::atomic<Slot *>[chunks_])
{
	for (uint32_t c = 0; c < chunks_; c++)
		dir_[c].store(nullptr, std::memory_order_relaxed);
}

MkeyTable::~MkeyTable()
{
	for (uint32_t c = 0; c < chunks_; c++)
		delete[] dir_[c].load(std::memory_order_relaxed);
}

/* Reader: in while no writer holds the slot (waiting writers do not stop readers). */
void MkeyTable::lock_shared(Slot &s) noexcept
{
	uint32_t v = s.lock.load(std::memory_order_relaxed);
	for (unsigned spins = 0;;) {
		/* Acquire: the entry as the last writer released it. */
		if ((v & kWriter) == 0 &&
		    s.lock.compare_exchange_weak(v, v + 1, std::memory_order_acquire,
						 std::memory_order_relaxed))
			return;
		if ((v & kWriter) != 0) {
			backoff(spins);
			v = s.lock.load(std::memory_order_relaxed);
		}
	}
}

void MkeyTable::unlock_shared(Slot &s) noexcept
{
	/* Release: our reads of the entry happen before a writer that takes the slot next. */
	s.lock.fetch_sub(1, std::memory_order_release);
}

void MkeyTable::lock_exclusive(Slot &s) noexcept
{
	for (unsigned spins = 0;;) {
		uint32_t v = 0;
		/* Acquire: pairs with the readers' release and the last writer's release. */
		if (s.lock.compare_exchange_weak(v, kWriter, std::memory_order_acquire,
						 std::memory_order_relaxed))
			return;
		backoff(spins);
	}
}

void MkeyTable::unlock_exclusive(Slot &s) noexcept
{
	/* Release: the updated entry is whole for the next reader's acquire. No reader can have
	 * counted itself in while bit 31 was set, so the word is exactly kWriter here. */
	s.lock.store(0, std::memory_order_release);
}

MkeyTable::Slot *MkeyTable::slot_or_make(uint32_t index)
{
	std::atomic<Slot *> &d = dir_[index >> kChunkShift];
	Slot *chunk = d.load(std::memory_order_relaxed); /* only mu_ holders store it */
	if (chunk == nullptr) {
		chunk = new (std::nothrow) Slot[kChunk];
		if (chunk == nullptr)
			return nullptr;
		/* Release: a reader that loads the chunk sees its slots constructed. */
		d.store(chunk, std::memory_order_release);
	}
	return &chunk[index & (kChunk - 1)];
}

int MkeyTable::create(uint32_t want, MkeyEntry &&e, uint32_t *index)
{
	if (want >= capacity_)
		return -ERANGE;
	std::lock_guard lk(mu_);
	/* Liveness only changes under mu_: reading it here without the slot lock is safe. */
	auto is_live = [this](uint32_t i) {
		Slot *s = slot(i);
		return s != nullptr && s->live;
	};
	if (want != 0) {
		if (is_live(want))
			return -EBUSY;
	} else {
		if (live_.load(std::memory_order_relaxed) >= capacity_ - 1)
			return -ENOSPC;
		/* The model's choice of index (doc/device-model.md, "mkey indices"): positions
		 * round-robin from the last hand-out, so a just-destroyed index comes back last;
		 * each position's index has its low 3 bits reversed, so consecutive creates get
		 * non-adjacent indices (4, 2, 6, 1, 5, 3, 7, 8, 12, 10, ...), as a driver must
		 * expect of firmware, which picks as it likes. A free index exists (checked
		 * above): at most span probes. */
		const uint32_t span = std::max<uint32_t>(capacity_, 8);
		for (;;) {
			const uint32_t p = next_;
			next_ = p + 1 < span ? p + 1 : 0;
			want = index_at(p);
			if (want != 0 && want < capacity_ && !is_live(want))
				break;
		}
	}
	Slot *s = slot_or_make(want);
	if (s == nullptr)
		return -ENOMEM;
	lock_exclusive(*s);
	s->e = std::move(e);
	s->live = true;
	unlock_exclusive(*s);
	live_.store(live_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
	*index = want;
	return 0;
}

int MkeyTable::destroy(uint32_t index, MkeyEntry *old)
{
	if (index == 0 || index >= capacity_)
		return -ERANGE;
	std::lock_guard lk(mu_);
	Slot *s = slot(index);
	if (s == nullptr || !s->live)
		return -ENOENT;
	MkeyEntry gone;
	lock_exclusive(*s);
	gone = std::move(s->e);
	s->e = MkeyEntry{};
	s->live = false;
	unlock_exclusive(*s);
	if (old != nullptr)
		*old = std::move(gone);
	live_.store(live_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
	return 0;
}

void MkeyTable::clear()
{
	std::lock_guard lk(mu_);
	for (uint32_t c = 0; c < chunks_; c++) {
		Slot *chunk = dir_[c].load(std::memory_order_relaxed);
		for (uint32_t i = 0; chunk != nullptr && i < kChunk; i++) {
			Slot &s = chunk[i];
			if (!s.live)
				continue;
			lock_exclusive(s);
			s.e = MkeyEntry{};
			s.live = false;
			unlock_exclusive(s);
		}
	}
	live_.store(0, std::memory_order_relaxed);
	next_ = 0;
}

/* Device hot path: one CAS per new key, no allocation within the spill vector's capacity. */
const MkeyEntry *MkeyTable::Hold::find(uint32_t index)
{
	if (index == 0 || index >= t_.capacity_)
		return nullptr;
	Slot *s = t_.slot(index);
	if (s == nullptr)
		return nullptr;
	/* Held already: the slot cannot have changed since. */
	bool held = false;
	for (size_t i = 0; i < n_ && !held; i++)
		held = held_[i] == s;
	for (size_t i = 0; i < spill_.size() && !held; i++)
		held = spill_[i] == s;
	if (!held) {
		lock_shared(*s);
		if (n_ < kInline)
			held_[n_++] = s;
		else
			spill_.push_back(s);
	}
	return s->live ? &s->e : nullptr;
}

MkeyTable::Hold::~Hold()
{
	for (size_t i = 0; i < n_; i++)
		unlock_shared(*held_[i]);
	for (const void *p : spill_)
		unlock_shared(*static_cast<Slot *>(const_cast<void *>(p)));
	spill_.clear();
}

} // namespace nicmr::emu
