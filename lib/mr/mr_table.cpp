/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_table.h"

#include <algorithm>
#include <bit>
#include <new>
#include <sys/mman.h>

namespace nicmr::mr {

int ShadowTable::create(uint32_t index_count, std::unique_ptr<ShadowTable> *out,
			uint32_t segment_slots) noexcept
{
	if (index_count < 2 || index_count > kMaxIndexCount)
		return -EINVAL;
	std::unique_ptr<ShadowTable> t(new (std::nothrow) ShadowTable());
	if (!t)
		return -ENOMEM;
	t->len_ = size_t{index_count} * sizeof(Entry);
	/* Zero pages are free entries (seq 0, state free); a page is populated when one of its
	 * 64 entries is first written, so host memory follows the live keys, not N. */
	void *p = mmap(nullptr, t->len_, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	t->e_ = static_cast<Entry *>(p);
	t->n_ = index_count;
	/* Segment slots: as lazily populated as the entries (a slot is 21 cache lines). */
	const uint32_t ns = std::min(segment_slots, index_count);
	if (ns > 0) {
		t->slen_ = size_t{ns} * sizeof(SegSlot);
		p = mmap(nullptr, t->slen_, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			return -ENOMEM;
		t->s_ = static_cast<SegSlot *>(p);
		const size_t words = (size_t{ns} + 63) / 64;
		t->used_.reset(new (std::nothrow) std::atomic<uint64_t>[words]);
		if (!t->used_)
			return -ENOMEM;
		for (size_t w = 0; w < words; w++)
			t->used_[w].store(0, std::memory_order_relaxed);
		/* The bits past ns in the last word are never free. */
		if (ns % 64)
			t->used_[words - 1].store(~uint64_t{0} << (ns % 64),
						  std::memory_order_relaxed);
		t->ns_ = ns;
	}
	*out = std::move(t);
	return 0;
}

ShadowTable::~ShadowTable()
{
	if (e_)
		munmap(e_, len_);
	if (s_)
		munmap(s_, slen_);
}

int ShadowTable::alloc_slot() noexcept
{
	/* Registration path: lock-free, no allocation. */
	const size_t words = (size_t{ns_} + 63) / 64;
	for (size_t w = 0; w < words; w++) {
		/* Relaxed: only a hint of which bit to try; the CAS decides. */
		uint64_t v = used_[w].load(std::memory_order_relaxed);
		while (v != ~uint64_t{0}) {
			const uint64_t bit = uint64_t{1} << std::countr_one(v);
			/* Acquire: our writes to the slot come after the previous owner's last ones
			 * (its clear_slot, released by free_slot's fetch_and). */
			if (used_[w].compare_exchange_weak(v, v | bit, std::memory_order_acquire,
							   std::memory_order_relaxed))
				return static_cast<int>(w * 64 + unsigned(std::countr_zero(bit)));
		}
	}
	return -ENOSPC;
}

void ShadowTable::free_slot(uint32_t slot) noexcept
{
	/* Release: our clear_slot happens before the next owner's writes (its acquire CAS). */
	used_[slot / 64].fetch_and(~(uint64_t{1} << (slot % 64)), std::memory_order_release);
}

uint32_t ShadowTable::slots_used() const noexcept
{
	uint32_t n = 0;
	const size_t words = (size_t{ns_} + 63) / 64;
	for (size_t w = 0; w < words; w++)
		/* Relaxed: a count for diagnostics, ordered with nothing. */
		n += uint32_t(std::popcount(used_[w].load(std::memory_order_relaxed)));
	if (ns_ % 64)
		n -= 64 - ns_ % 64;
	return n;
}

void ShadowTable::publish_runs(uint32_t slot, uint32_t mkey, const Run *runs,
			       uint32_t count) noexcept
{
	SegSlot &s = s_[slot];
	const uint32_t v = s.seq.load(std::memory_order_relaxed); /* the only writer */
	/* Release stores throughout, for the reasons given in publish(). */
	s.seq.store(v + 1, std::memory_order_release);
	s.mkey.store(mkey, std::memory_order_release);
	s.count.store(count, std::memory_order_release);
	for (uint32_t i = 0; i < count; i++) {
		s.end[i].store(runs[i].end, std::memory_order_release);
		s.iova[i].store(runs[i].iova, std::memory_order_release);
	}
	s.seq.store(v + 2, std::memory_order_release);
}

void ShadowTable::clear_slot(uint32_t slot) noexcept
{
	SegSlot &s = s_[slot];
	const uint32_t v = s.seq.load(std::memory_order_relaxed);
	/* Release, as in publish_runs. */
	s.seq.store(v + 1, std::memory_order_release);
	s.mkey.store(0, std::memory_order_release);
	s.count.store(0, std::memory_order_release);
	s.seq.store(v + 2, std::memory_order_release);
	s.nheld = 0;
	s.indirect = nullptr;
}

void ShadowTable::publish(uint32_t index, const EntryFields &f) noexcept
{
	Entry &e = e_[index];
	const uint32_t s = e.seq.load(std::memory_order_relaxed); /* we are the only writer */
	/* Release: a reader that sees this odd seq also sees what the writer did before starting
	 * (e.g. that a deregistration had begun). */
	e.seq.store(s + 1, std::memory_order_release);
	/* Release on each field: the odd seq store above cannot move below any of them, so a
	 * reader that acquires one of these values re-reads seq >= s + 1 and discards its copy. */
	e.mkey.store(f.mkey, std::memory_order_release);
	e.meta.store(detail::pack_meta(f.state, f.access, f.flags, f.pd),
		     std::memory_order_release);
	e.start.store(f.start, std::memory_order_release);
	e.len.store(f.len, std::memory_order_release);
	e.iova.store(f.iova, std::memory_order_release);
	e.base_index.store(f.base_index, std::memory_order_release);
	/* Release: the field stores cannot move below the even seq; a reader that acquires
	 * s + 2 sees all of them. */
	e.seq.store(s + 2, std::memory_order_release);
}

void ShadowTable::set_iova(uint32_t index, uint64_t iova) noexcept
{
	Entry &e = e_[index];
	const uint32_t s = e.seq.load(std::memory_order_relaxed); /* we are the only writer */
	/* Release on all three stores, for the reasons given in publish(): a reader that sees
	 * the new IOVA re-reads an odd or newer seq and retries. */
	e.seq.store(s + 1, std::memory_order_release);
	e.iova.store(iova, std::memory_order_release);
	e.seq.store(s + 2, std::memory_order_release);
}

void ShadowTable::invalidate(uint32_t index) noexcept
{
	EntryFields f{};
	publish(index, f);
}

EntryFields ShadowTable::read_owned(uint32_t index) const noexcept
{
	/* Acquire loads, as in lookup: the owner sees its own stores anyway, and snapshot()
	 * relies on the ordering when it wraps this in the seqlock for everyone else. */
	const Entry &e = e_[index];
	EntryFields f;
	const uint64_t meta = e.meta.load(std::memory_order_acquire);
	f.mkey = e.mkey.load(std::memory_order_acquire);
	f.state = static_cast<EntryState>(meta & 0xff);
	f.access = static_cast<uint8_t>(meta >> 8);
	f.flags = static_cast<uint16_t>(meta >> 16);
	f.pd = static_cast<uint32_t>(meta >> 32);
	f.start = e.start.load(std::memory_order_acquire);
	f.len = e.len.load(std::memory_order_acquire);
	f.iova = e.iova.load(std::memory_order_acquire);
	f.base_index = e.base_index.load(std::memory_order_acquire);
	return f;
}

int ShadowTable::snapshot(uint32_t mkey, EntryFields *out) const noexcept
{
	const uint32_t index = mkey_index(mkey);
	if (index == 0 || index >= n_)
		return -ENOKEY;
	const Entry &e = e_[index];
	/* Same seqlock reading as lookup, with the same two orderings. */
	const uint32_t s1 = e.seq.load(std::memory_order_acquire);
	if (s1 & 1)
		return -EAGAIN;
	EntryFields f = read_owned(index);
	if (e.seq.load(std::memory_order_relaxed) != s1)
		return -EAGAIN;
	if (f.mkey != mkey || f.state == EntryState::free)
		return -ENOKEY;
	*out = f;
	return 0;
}

} // namespace nicmr::mr
