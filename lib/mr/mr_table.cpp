/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_table.h"

#include <new>
#include <sys/mman.h>

namespace nicmr::mr {

int ShadowTable::create(uint32_t index_count, std::unique_ptr<ShadowTable> *out) noexcept
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
	*out = std::move(t);
	return 0;
}

ShadowTable::~ShadowTable()
{
	if (e_)
		munmap(e_, len_);
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
