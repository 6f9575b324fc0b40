/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A DmaMapper for unit tests: it checks every call the way an IOMMU would (valid ranges,
 * alignment, overlaps, unmap of what was mapped), records the calls, and fails on demand.
 */
#ifndef NICMR_MEM_TEST_MAPPER_H
#define NICMR_MEM_TEST_MAPPER_H

#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "mem_dma.h"

namespace nicmr::mem::test {

class RecordingMapper final : public DmaMapper {
public:
	struct Call {
		bool map;
		void *va;
		uint64_t iova;
		size_t len;
		int rc;
	};

	explicit RecordingMapper(std::vector<IovaRange> ranges = {{0x100000,
								   (uint64_t{1} << 48) - 1}},
				 size_t min_page = 4096)
	    : ranges_(std::move(ranges)), min_page_(min_page)
	{}

	/* The next n dma_map calls fail with rc (after the ones before them succeeded). */
	void fail_next_maps(int n, int rc)
	{
		std::lock_guard<std::mutex> lock(mu_);
		fail_maps_ = n;
		fail_rc_ = rc;
	}

	int dma_map(void *va, uint64_t iova, size_t len) override
	{
		std::lock_guard<std::mutex> lock(mu_);
		int rc = check_map(va, iova, len);
		if (rc == 0 && fail_maps_ > 0) {
			fail_maps_--;
			rc = fail_rc_;
		}
		if (rc == 0)
			live_.emplace(iova, len);
		calls_.push_back({true, va, iova, len, rc});
		return rc;
	}

	int dma_unmap(uint64_t iova, size_t len) override
	{
		std::lock_guard<std::mutex> lock(mu_);
		int rc = -ENOENT;
		auto it = live_.find(iova);
		if (it != live_.end() && it->second == len) {
			live_.erase(it);
			rc = 0;
		}
		calls_.push_back({false, nullptr, iova, len, rc});
		return rc;
	}

	std::vector<IovaRange> iova_ranges() const override { return ranges_; }
	size_t min_page_size() const override { return min_page_; }

	std::vector<Call> calls() const
	{
		std::lock_guard<std::mutex> lock(mu_);
		return calls_;
	}
	size_t live_mappings() const
	{
		std::lock_guard<std::mutex> lock(mu_);
		return live_.size();
	}
	size_t count(bool map, int rc = 0) const
	{
		std::lock_guard<std::mutex> lock(mu_);
		size_t n = 0;
		for (const Call &c : calls_)
			n += c.map == map && c.rc == rc;
		return n;
	}

private:
	int check_map(void *va, uint64_t iova, size_t len) const
	{
		if (len == 0 || len % min_page_ != 0 || iova % min_page_ != 0 ||
		    reinterpret_cast<uintptr_t>(va) % min_page_ != 0)
			return -EINVAL;
		bool inside = false;
		for (const IovaRange &r : ranges_)
			inside |= iova >= r.start && len - 1 <= r.last - iova;
		if (!inside)
			return -ERANGE;
		for (const auto &[s, l] : live_)
			if (iova < s + l && s < iova + len)
				return -EEXIST;
		return 0;
	}

	mutable std::mutex mu_;
	std::vector<IovaRange> ranges_;
	size_t min_page_;
	std::map<uint64_t, size_t> live_;
	std::vector<Call> calls_;
	int fail_maps_ = 0;
	int fail_rc_ = 0;
};

} // namespace nicmr::mem::test

#endif
