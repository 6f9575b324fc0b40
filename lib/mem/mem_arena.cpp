/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DmaArena: first fit over one mapped pool, for the driver's own DMA memory. Blocks are counted
 * in offsets from the pool's start; alignment is taken on the IOVA, because the device is what
 * needs it (the VA agrees with the IOVA below the pool's iova_align anyway).
 *
 * Slow path: every call takes mu_. Free pieces are coalesced on free, so a drained arena is one
 * piece again.
 */
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <new>

#include "mem_space.h"
#include "nicmr_log.h"

namespace nicmr::mem {
namespace {
constexpr const char *kLog = "mem";
}

DmaArena::DmaArena(DmaSpace &space, const PoolEntry *entry) : space_(space), entry_(entry)
{
	free_.emplace(0, entry->len);
}

int DmaArena::create(DmaSpace &space, const PoolParams &params, std::unique_ptr<DmaArena> *out)
{
	if (out == nullptr)
		return -EINVAL;
	std::unique_ptr<Pool> pool;
	int rc = Pool::create(params, &pool);
	if (rc != 0)
		return rc;
	const PoolEntry *entry = nullptr;
	rc = space.add_pool(std::move(pool), &entry);
	if (rc != 0)
		return rc; /* add_pool destroyed the pool */
	std::unique_ptr<DmaArena> arena;
	try {
		arena.reset(new DmaArena(space, entry));
	} catch (const std::bad_alloc &) {
		space.remove_pool(entry->pool);
		return -ENOMEM;
	}
	*out = std::move(arena);
	return 0;
}

DmaArena::~DmaArena()
{
	if (!used_.empty())
		NICMR_LOG(warn, kLog, "arena %s: destroyed with %zu blocks (%zu bytes) in use",
			  entry_->pool->name().c_str(), used_.size(), in_use_.load());
	space_.remove_pool(entry_->pool);
}

int DmaArena::alloc(size_t len, size_t align, DmaBlock *out)
{
	if (out == nullptr || len == 0 || align == 0 || (align & (align - 1)) != 0 ||
	    len > entry_->len)
		return len > entry_->len ? -ENOMEM : -EINVAL;
	len = (len + kGranule - 1) & ~(kGranule - 1);
	std::lock_guard<std::mutex> lock(mu_);
	for (auto it = free_.begin(); it != free_.end(); ++it) {
		const size_t off = it->first, flen = it->second;
		const uint64_t iova = entry_->iova + off;
		const size_t pad =
			static_cast<size_t>((align - (iova & (align - 1))) & (align - 1));
		if (pad >= flen || len > flen - pad)
			continue;
		try {
			used_.emplace(off + pad, len);
			free_.erase(it);
			if (pad != 0)
				free_.emplace(off, pad);
			if (flen - pad > len)
				free_.emplace(off + pad + len, flen - pad - len);
		} catch (const std::bad_alloc &) {
			return -ENOMEM;
		}
		out->va = reinterpret_cast<void *>(entry_->va + off + pad);
		out->iova = iova + pad;
		out->len = len;
		/* Slow path: the device must never see old contents of a reused block. */
		std::memset(out->va, 0, len);
		in_use_.fetch_add(len, std::memory_order_relaxed); /* a statistic, orders nothing */
		return 0;
	}
	return -ENOMEM;
}

int DmaArena::release(const DmaBlock &block)
{
	const uintptr_t va = reinterpret_cast<uintptr_t>(block.va);
	if (va < entry_->va || va >= entry_->va + entry_->len)
		return -ENOENT;
	size_t off = va - entry_->va;
	std::lock_guard<std::mutex> lock(mu_);
	auto u = used_.find(off);
	if (u == used_.end() || u->second != block.len) {
		NICMR_LOG(error, kLog, "arena %s: free of %p (+%zu) that is not a live block",
			  entry_->pool->name().c_str(), block.va, block.len);
		return -ENOENT;
	}
	size_t len = u->second;
	used_.erase(u);
	in_use_.fetch_sub(len, std::memory_order_relaxed); /* a statistic, orders nothing */
	auto next = free_.lower_bound(off);
	if (next != free_.end() && next->first == off + len) {
		len += next->second;
		next = free_.erase(next);
	}
	if (next != free_.begin()) {
		auto prev = std::prev(next);
		if (prev->first + prev->second == off) {
			off = prev->first;
			len += prev->second;
			free_.erase(prev);
		}
	}
	free_.emplace(off, len);
	return 0;
}

size_t DmaArena::bytes_in_use() const noexcept
{
	return in_use_.load(std::memory_order_relaxed); /* a statistic, orders nothing */
}

size_t DmaArena::capacity() const noexcept
{
	return entry_->len;
}

} // namespace nicmr::mem
