/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * IOVA allocation: first fit over the free pieces of the valid ranges, lowest address first.
 * A request (len, align, va_hint) is placed at the lowest x with x % align == va_hint % align,
 * so that a pool's IOVA and VA agree in every bit below align (see mem_space.h).
 *
 * Ranges are inclusive ([start, last]) because a valid range may end at 2^64 - 1; every sum
 * below is checked against that edge.
 */
#include <algorithm>
#include <cerrno>

#include "mem_space.h"

namespace nicmr::mem {

IovaAllocator::IovaAllocator(std::vector<IovaRange> valid)
{
	std::sort(valid.begin(), valid.end(),
		  [](const IovaRange &a, const IovaRange &b) { return a.start < b.start; });
	for (const IovaRange &r : valid) {
		if (r.start > r.last)
			continue;
		/* Merge overlapping or touching ranges so that free pieces never abut. */
		if (!free_.empty()) {
			auto last = std::prev(free_.end());
			if (last->second == UINT64_MAX || r.start <= last->second + 1) {
				last->second = std::max(last->second, r.last);
				continue;
			}
		}
		free_.emplace(r.start, r.last);
	}
}

int IovaAllocator::alloc(size_t len, size_t align, uint64_t va_hint, uint64_t *iova)
{
	if (len == 0 || align == 0 || (align & (align - 1)) != 0 || iova == nullptr)
		return -EINVAL;
	const uint64_t want = va_hint & (align - 1);
	for (auto it = free_.begin(); it != free_.end(); ++it) {
		const uint64_t s = it->first, l = it->second;
		const uint64_t x = s + ((want - s) & (align - 1));
		if (x < s || x > l || len - 1 > l - x)
			continue; /* wrapped past 2^64, or no room after aligning */
		free_.erase(it);
		if (x > s)
			free_.emplace(s, x - 1);
		if (len - 1 < l - x)
			free_.emplace(x + len, l);
		used_.emplace(x, len);
		allocated_ += len;
		*iova = x;
		return 0;
	}
	return -ENOSPC;
}

int IovaAllocator::release(uint64_t iova, size_t len)
{
	auto u = used_.find(iova);
	if (u == used_.end() || u->second != len || len == 0)
		return -ENOENT;
	used_.erase(u);
	allocated_ -= len;
	uint64_t s = iova, l = iova + (len - 1);
	auto next = free_.upper_bound(s);
	if (next != free_.end() && l != UINT64_MAX && next->first == l + 1) {
		l = next->second;
		next = free_.erase(next);
	}
	if (next != free_.begin()) {
		auto prev = std::prev(next);
		if (prev->second + 1 == s) {
			s = prev->first;
			free_.erase(prev);
		}
	}
	free_.emplace(s, l);
	return 0;
}

size_t IovaAllocator::allocated_bytes() const noexcept
{
	return allocated_;
}

} // namespace nicmr::mem
