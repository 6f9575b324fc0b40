/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DmaSpace: the pools of one IOMMU and the lockless address -> IOVA translation.
 *
 *   writers (add_pool, remove_pool; serialised by mu_)
 *       build a new sorted Snapshot + bucket index ──release store──> current_
 *       keep the old one in retired_snapshots_ until reclaim_retired() or ~DmaSpace
 *
 *   readers (lookup, translate; any thread, no lock)
 *       acquire load of current_ ──> bucket (a - lo) >> shift ──> its few Slots
 *                                    Slot { va, end, iova, entry }: all a translation needs
 *
 * Retirement: a reader may hold a snapshot for as long as one lookup takes, and this file cannot
 * know when that is over without a reader protocol. So it does not guess: old snapshots stay
 * until the space dies, or until its owner proves a grace period (reclaim_retired, which takes
 * the owner's QSBR wait). No reference counts, no home-made RCU.
 *
 * Placement: a pool of len bytes gets the alignment A = min(kMaxIovaAlign, bit_ceil(len)),
 * at least its page size and the IOMMU's smallest page; when the ranges have no room at A,
 * A halves down to that floor. IOVA % A == VA % A.
 */
#include "mem_space.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <new>

#include "nicmr_log.h"

namespace nicmr::mem {
namespace {
constexpr const char *kLog = "mem";

/* The mapper's valid ranges without the first IOVA page: a device that DMAs to IOVA 0 (a null
 * pointer that reached a descriptor) then faults in the IOMMU instead of landing in a pool. */
std::vector<IovaRange> without_null_page(const std::vector<IovaRange> &ranges)
{
	std::vector<IovaRange> out;
	out.reserve(ranges.size());
	for (IovaRange r : ranges) {
		if (r.start < kNullIovaGuard) {
			if (r.last < kNullIovaGuard)
				continue;
			r.start = kNullIovaGuard;
		}
		out.push_back(r);
	}
	return out;
}
} // namespace

DmaSpace::DmaSpace(DmaMapper &mapper)
    : mapper_(mapper), iova_(without_null_page(mapper.iova_ranges()))
{
	current_owner_ = std::make_unique<Snapshot>();
	/* Release: a reader that sees the pointer sees the (empty) vector constructed. */
	current_.store(current_owner_.get(), std::memory_order_release);
}

DmaSpace::~DmaSpace()
{
	std::lock_guard<std::mutex> lock(mu_);
	for (Live &live : live_)
		unmap_and_free(live);
	live_.clear();
	current_.store(nullptr, std::memory_order_relaxed); /* no reader may outlive the space */
}

DmaMapper &DmaSpace::mapper() noexcept
{
	return mapper_;
}

size_t DmaSpace::pool_count() const noexcept
{
	/* Acquire: pairs with publish(); the vector's size is read after the pointer. */
	return current_.load(std::memory_order_acquire)->slots.size();
}

/* Called with mu_ held. Swaps in the new snapshot and retires the old one. */
int DmaSpace::publish(std::vector<Slot> slots)
{
	std::unique_ptr<Snapshot> next(new (std::nothrow) Snapshot());
	if (!next)
		return -ENOMEM;
	next->slots = std::move(slots);
	try {
		build_index(*next);
		retired_snapshots_.reserve(retired_snapshots_.size() + 1);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	/*
	 * Release: the slots (and the PoolEntry each points at) are written before the pointer;
	 * a reader's acquire load of the pointer therefore never sees a half-built snapshot.
	 */
	current_.store(next.get(), std::memory_order_release);
	retired_snapshots_.push_back(std::move(current_owner_));
	current_owner_ = std::move(next);
	return 0;
}

int DmaSpace::unmap_and_free(Live &live)
{
	const PoolEntry &e = *live.entry;
	int rc = mapper_.dma_unmap(e.iova, e.len);
	if (rc != 0)
		NICMR_LOG(error, kLog, "pool %s: dma_unmap(iova 0x%" PRIx64 ", %zu): %d",
			  live.pool->name().c_str(), e.iova, e.len, rc);
	int frc = iova_.release(e.iova, e.len);
	if (frc != 0)
		NICMR_LOG(error, kLog, "pool %s: IOVA 0x%" PRIx64 " was not allocated: %d",
			  live.pool->name().c_str(), e.iova, frc);
	live.pool.reset();
	return rc;
}

int DmaSpace::add_pool(std::unique_ptr<Pool> pool, const PoolEntry **entry, void *owner)
{
	if (!pool)
		return -EINVAL;
	const uintptr_t va = reinterpret_cast<uintptr_t>(pool->va());
	const size_t len = pool->size();
	const size_t floor = std::max(pool->page_size(), mapper_.min_page_size());
	if (pool->page_size() < mapper_.min_page_size()) {
		NICMR_LOG(error, kLog, "pool %s: pages of %zu bytes, IOMMU maps %zu at least",
			  pool->name().c_str(), pool->page_size(), mapper_.min_page_size());
		return -EINVAL;
	}

	std::lock_guard<std::mutex> lock(mu_);
	const std::vector<Slot> &cur = current_owner_->slots;
	auto pos = std::upper_bound(cur.begin(), cur.end(), va,
				    [](uintptr_t v, const Slot &s) { return v < s.va; });
	if ((pos != cur.end() && pos->va < va + len) ||
	    (pos != cur.begin() && std::prev(pos)->end > va)) {
		NICMR_LOG(error, kLog, "pool %s: [%p, +%zu) overlaps a pool of this space",
			  pool->name().c_str(), pool->va(), len);
		return -EEXIST;
	}

	size_t align = std::min(kMaxIovaAlign, std::bit_ceil(len));
	align = std::max(align, floor);
	uint64_t iova = 0;
	int rc;
	for (;;) {
		rc = iova_.alloc(len, align, va, &iova);
		if (rc != -ENOSPC || align <= floor)
			break;
		align >>= 1;
	}
	if (rc != 0) {
		NICMR_LOG(error, kLog,
			  "pool %s: no IOVA room for %zu bytes (aligned %zu; %zu bytes in use)",
			  pool->name().c_str(), len, align, iova_.allocated_bytes());
		return rc;
	}
	rc = mapper_.dma_map(pool->va(), iova, len);
	if (rc != 0) {
		NICMR_LOG(error, kLog, "pool %s: dma_map(%p, iova 0x%" PRIx64 ", %zu): %d",
			  pool->name().c_str(), pool->va(), iova, len, rc);
		iova_.release(iova, len);
		return rc;
	}

	Live live;
	std::vector<Slot> slots;
	try {
		live.entry = std::make_unique<PoolEntry>(
			PoolEntry{va, len, iova, align, pool.get(), owner});
		slots.reserve(cur.size() + 1);
		slots.assign(cur.begin(), pos);
		slots.push_back(Slot{va, va + len, iova, live.entry.get()});
		slots.insert(slots.end(), pos, cur.end());
		live_.reserve(live_.size() + 1);
	} catch (const std::bad_alloc &) {
		rc = -ENOMEM;
	}
	if (rc == 0)
		rc = publish(std::move(slots));
	if (rc != 0) {
		mapper_.dma_unmap(iova, len);
		iova_.release(iova, len);
		return rc;
	}
	live.pool = std::move(pool);
	if (entry != nullptr)
		*entry = live.entry.get();
	NICMR_LOG(info, kLog, "pool %s: %zu bytes at iova 0x%" PRIx64 " (aligned %zu)",
		  live.pool->name().c_str(), len, iova, align);
	live_.push_back(std::move(live));
	return 0;
}

int DmaSpace::remove_pool(const Pool *pool)
{
	if (pool == nullptr)
		return -ENOENT;
	std::lock_guard<std::mutex> lock(mu_);
	auto it = std::find_if(live_.begin(), live_.end(),
			       [pool](const Live &l) { return l.pool.get() == pool; });
	if (it == live_.end())
		return -ENOENT;
	std::vector<Slot> slots;
	try {
		slots.reserve(current_owner_->slots.size());
		retired_entries_.reserve(retired_entries_.size() + 1);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	for (const Slot &s : current_owner_->slots)
		if (s.entry != it->entry.get())
			slots.push_back(s);
	int rc = publish(std::move(slots));
	if (rc != 0)
		return rc;
	/*
	 * New readers no longer find the pool. Readers already inside the old snapshot may still
	 * return its entry: that is why the entry is retired, not freed.
	 */
	rc = unmap_and_free(*it);
	retired_entries_.push_back(std::move(it->entry));
	live_.erase(it);
	return rc;
}

size_t DmaSpace::reclaim_retired(const std::function<void()> &wait_for_readers)
{
	std::vector<std::unique_ptr<Snapshot>> snaps;
	std::vector<std::unique_ptr<PoolEntry>> entries;
	{
		std::lock_guard<std::mutex> lock(mu_);
		snaps.swap(retired_snapshots_);
		entries.swap(retired_entries_);
	}
	/* Everything taken above was unpublished before this point: one grace period covers it. */
	if (wait_for_readers)
		wait_for_readers();
	return snaps.size() + entries.size();
}

size_t DmaSpace::retired_count() const
{
	std::lock_guard<std::mutex> lock(mu_);
	return retired_snapshots_.size() + retired_entries_.size();
}

/*
 * Builds the bucket index of a sorted slot list: about two buckets per pool over the span from
 * the first pool's start to the last pool's end, each at least 4 KiB wide.
 */
int DmaSpace::build_index(Snapshot &snap)
{
	const std::vector<Slot> &sl = snap.slots;
	snap.buckets.clear();
	if (sl.empty())
		return 0;
	snap.lo = sl.front().va;
	const uintptr_t span = sl.back().end - snap.lo;
	const size_t want = std::min<size_t>(std::bit_ceil(2 * sl.size()), size_t{1} << 16);
	unsigned shift = 12;
	while ((span - 1) >> shift >= want)
		shift++;
	snap.shift = shift;
	const size_t nb = ((span - 1) >> shift) + 1;
	snap.buckets.resize(nb);
	size_t first = 0;
	for (size_t k = 0; k < nb; k++) {
		const uintptr_t b_lo = snap.lo + (uintptr_t{k} << shift);
		const uintptr_t b_hi = b_lo + (uintptr_t{1} << shift); /* exclusive */
		while (first < sl.size() && sl[first].end <= b_lo)
			first++;
		size_t last = first;
		while (last < sl.size() && sl[last].va < b_hi)
			last++;
		snap.buckets[k] =
			Bucket{static_cast<uint32_t>(first), static_cast<uint32_t>(last - first)};
	}
	return 0;
}

/* Hot path: no lock, no allocation, no system call. The slot with va <= a < end, or nullptr. */
inline const DmaSpace::Slot *DmaSpace::Snapshot::find(uintptr_t a) const noexcept
{
	const size_t k = (a - lo) >> shift; /* a < lo wraps to a huge k: rejected below */
	if (k >= buckets.size())
		return nullptr;
	const Bucket b = buckets[k];
	if (b.count == 0)
		return nullptr;
	/* Branch-light search for the last slot of the bucket with va <= a. */
	const Slot *base = slots.data() + b.first;
	size_t n = b.count;
	while (n > 1) {
		size_t half = n / 2;
		base = base[half].va <= a ? base + half : base;
		n -= half;
	}
	return base->va <= a && a < base->end ? base : nullptr;
}

/* Hot path: no lock, no allocation, no system call, no atomic read-modify-write. */
const PoolEntry *DmaSpace::lookup(const void *addr, size_t len) const noexcept
{
	/* Acquire: pairs with publish()'s release, so the slots read below are complete. */
	const Snapshot *snap = current_.load(std::memory_order_acquire);
	const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
	const Slot *s = snap->find(a);
	if (s == nullptr || len > s->end - a)
		return nullptr;
	return s->entry;
}

/* Hot path: no lock, no allocation, no system call, no atomic read-modify-write. */
int DmaSpace::translate(const void *addr, size_t len, uint64_t *iova) const noexcept
{
	/* Acquire: pairs with publish()'s release, so the slots read below are complete. */
	const Snapshot *snap = current_.load(std::memory_order_acquire);
	const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
	const Slot *s = snap->find(a);
	if (s == nullptr || len > s->end - a)
		return -EFAULT;
	*iova = s->iova + (a - s->va);
	return 0;
}

} // namespace nicmr::mem
