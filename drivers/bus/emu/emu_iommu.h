/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The emulated IOMMU: the only way an emulated device reaches host memory.
 *
 *   driver side (lib/mem)            device side (device model)
 *   dma_map(va, iova, len) ----+     dma_read(iova, dst, len)
 *   dma_unmap(iova, len) ------+---> dma_write(iova, src, len)      all under the shared lock
 *   iova_ranges()              |     pin(iova, len) -> DmaPin (host pointer + shared lock)
 *                              v
 *              std::map<iova, {va, len}>   (sorted, non-overlapping; exclusive lock to change)
 *
 * Like a real IOMMU it translates page by page, so one device access may span adjacent mappings;
 * an access that touches any unmapped byte fails as a whole before a single byte moves (no stray
 * write), is logged, and counts as a device DMA fault (dma_faults()). It never crashes.
 *
 * Defaults follow an Intel VT-d with 48-bit IOVAs: valid IOVAs are [0, 2^48 - 1] minus the
 * interrupt (MSI) window [0xfee00000, 0xfeefffff]; pages are 4 KiB; at most 65535 mappings (the
 * default dma_entry_limit of VFIO's type-1 IOMMU).
 *
 * Locking: a reader/writer lock. Device accesses take it shared, so concurrent DMA from several
 * device threads never serialises; map and unmap take it exclusive, so an unmap returns only
 * after every access that could still see the old mapping has finished: after dma_unmap returns
 * the device can no longer touch that memory. The lock is on the device side of the bus only: a
 * driver's hot path never calls into this class.
 */
#ifndef NICMR_EMU_IOMMU_H
#define NICMR_EMU_IOMMU_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "mem_dma.h"

namespace nicmr::emu {

struct EmuIommuConfig {
	/* Valid IOVA ranges (inclusive); empty means the VT-d default described above. */
	std::vector<mem::IovaRange> ranges;
	size_t page_size = 4096;	/* a power of two; map arguments must be multiples */
	size_t max_mappings = 65535;	/* dma_map beyond this is -ENOSPC */
	std::string name = "emu-iommu"; /* for log lines */
};

/* The VT-d-like default ranges: [0, 0xfedfffff] and [0xfef00000, 2^48 - 1]. */
std::vector<mem::IovaRange> emu_iommu_default_ranges();

class EmuIommu;

/*
 * A host view of [iova, iova + len) for zero-copy device access. While a DmaPin lives the
 * mapping cannot be removed (it holds the IOMMU's shared lock): keep it short, never across a
 * wait for the driver. ptr() is nullptr when the range is not wholly mapped to one contiguous
 * host range (then a DMA fault was counted).
 */
class DmaPin {
public:
	DmaPin() = default;
	DmaPin(DmaPin &&) = default;
	DmaPin &operator=(DmaPin &&) = default;
	void *ptr() const noexcept { return ptr_; }
	explicit operator bool() const noexcept { return ptr_ != nullptr; }

private:
	friend class EmuIommu;
	std::shared_lock<std::shared_mutex> lock_;
	void *ptr_ = nullptr;
};

class EmuIommu final : public mem::DmaMapper {
public:
	/*
	 * Creates an IOMMU. Errors: -EINVAL (page size not a power of two or below 4096, ranges
	 * unsorted, overlapping, empty, or not page-aligned, max_mappings 0).
	 */
	static int create(const EmuIommuConfig &cfg, std::unique_ptr<EmuIommu> *out);
	~EmuIommu() override = default;
	EmuIommu(const EmuIommu &) = delete;
	EmuIommu &operator=(const EmuIommu &) = delete;

	/* mem::DmaMapper. Errors as documented there: -EINVAL, -ERANGE, -EEXIST, -ENOSPC. */
	int dma_map(void *va, uint64_t iova, size_t len) override;
	/* Exact (iova, len) of an earlier dma_map, else -ENOENT; len 0 is -EINVAL. */
	int dma_unmap(uint64_t iova, size_t len) override;
	std::vector<mem::IovaRange> iova_ranges() const override { return ranges_; }
	size_t min_page_size() const override { return page_size_; }

	/*
	 * Device-side accesses. 0 on success; -EFAULT when any byte of [iova, iova + len) is not
	 * mapped (nothing was copied, the fault is logged and counted). len 0 is a no-op success.
	 */
	int dma_read(uint64_t iova, void *dst, size_t len) const;
	int dma_write(uint64_t iova, const void *src, size_t len);
	/*
	 * Stores one byte with release order: the device's "this entry is done" store (mlx5
	 * command ownership, CQE owner bits), so that every earlier dma_write is visible to a
	 * driver that reads the byte with acquire. -EFAULT as above.
	 */
	int dma_store8_release(uint64_t iova, uint8_t value);
	/*
	 * Device-to-device copy (an RDMA transfer between two mapped ranges): checks both whole
	 * ranges, then copies piece by piece with memmove (the ranges may overlap), all under one
	 * hold of the shared lock. 0; -EFAULT when any byte of either range is unmapped (nothing
	 * copied, fault counted). len 0 is a no-op success.
	 */
	int dma_copy(uint64_t dst_iova, uint64_t src_iova, size_t len);
	/* Whether every byte of [iova, iova + len) is mapped (no fault is counted). */
	bool mapped(uint64_t iova, size_t len) const;
	/*
	 * Loads a 4-byte aligned 32-bit word (raw, as stored) with acquire order: a doorbell
	 * record the driver updates while the device runs (producer and consumer counters), so
	 * that the load is one access and everything the driver wrote before the counter is
	 * visible. -EINVAL (misaligned), -EFAULT as above.
	 */
	int dma_load32_acquire(uint64_t iova, uint32_t *raw) const;
	/* Host view for zero-copy; see DmaPin. */
	DmaPin pin(uint64_t iova, size_t len) const;

	/* DMA faults (accesses to unmapped IOVAs) since creation. */
	uint64_t dma_faults() const noexcept { return faults_.load(std::memory_order_relaxed); }
	/* IOVA of the most recent fault (0 before any). */
	uint64_t last_fault_iova() const noexcept
	{
		return last_fault_.load(std::memory_order_relaxed);
	}
	size_t mapping_count() const;

private:
	struct Mapping {
		char *va;
		uint64_t len;
	};
	EmuIommu() = default;
	/* Calls f(host, n) for each host piece of [iova, iova + len), in order, and returns true;
	 * with f == nullptr only checks. False when any byte is unmapped. The caller holds the
	 * shared lock. No allocation: the data path will use it. */
	template <class F> bool walk(uint64_t iova, size_t len, F &&f) const;
	void fault(const char *what, uint64_t iova, size_t len) const;

	std::vector<mem::IovaRange> ranges_;
	size_t page_size_ = 4096;
	size_t max_mappings_ = 0;
	std::string name_;
	mutable std::shared_mutex lock_;   /* shared: device accesses; exclusive: map/unmap */
	std::map<uint64_t, Mapping> maps_; /* by first IOVA; guarded by lock_ */
	mutable std::atomic<uint64_t> faults_{0};
	mutable std::atomic<uint64_t> last_fault_{0};
};

} // namespace nicmr::emu

#endif
