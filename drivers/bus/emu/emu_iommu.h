/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The emulated IOMMU: the only way an emulated device reaches host memory.
 *
 *   driver side (lib/mem)            device side (device model)
 *   dma_map(va, iova, len) ----+     DmaSection s(mmu): s.read / s.write / s.copy / s.host ...
 *   dma_unmap(iova, len) ------+     (or the one-shot dma_read, dma_write, ... which open one)
 *   iova_ranges()              |            |
 *                              v            v  one acquire load per section
 *        writers (mutex): build a new sorted, immutable Snapshot {iova, len, va}[], publish it
 *        (seq_cst store), wait for every reader section that may hold the old one, free it
 *
 * Like a real IOMMU it translates page by page, so one device access may span adjacent mappings;
 * an access that touches any unmapped byte fails as a whole before a single byte moves (no stray
 * write), is logged, and counts as a device DMA fault (dma_faults()). It never crashes.
 *
 * Bus mastering. The IOMMU also carries the Bus Master Enable bit of the function in front of
 * it (EmuFunction drives it from its command register): while it is clear, every device access
 * (read, write, store8_release, load32_acquire, copy, host/pin) fails with -EFAULT before a
 * byte moves, the same error path as an unmapped IOVA, is logged and counts in dma_refused()
 * (not in dma_faults(): a real function with BME clear issues no request at all, so its IOMMU
 * records no fault). mapped() still answers about translations only. Clearing the bit returns
 * once no access that saw it set is in flight (the grace period of dma_unmap). An IOMMU created
 * on its own starts with the bit set; EmuFunction::create clears it, as a reset does.
 *
 * Defaults follow an Intel VT-d with 48-bit IOVAs: valid IOVAs are [0, 2^48 - 1] minus the
 * interrupt (MSI) window [0xfee00000, 0xfeefffff]; pages are 4 KiB; at most 65535 mappings (the
 * default dma_entry_limit of VFIO's type-1 IOMMU).
 *
 * Concurrency: read-copy-update. Device accesses take no lock: a DmaSection announces itself in
 * one of kReaderSlots per-thread-ish counters (one atomic increment on lines of its own,
 * two counters per slot for the two grace-period phases), loads the current snapshot and uses
 * it until it ends. Writers (map, unmap: rare, slow path) serialise on a mutex, publish the new
 * snapshot, then wait for a grace period: every section counted before the publication has
 * ended (the phase flips twice, so that readers arriving meanwhile never starve the writer).
 * Only then is the old snapshot freed and the call returns. So, as with a lock: after dma_unmap
 * returns the device can no longer touch that memory, and no retired snapshot is ever read.
 * Why the wait sees every old reader: a reader's increment, and its snapshot load after it,
 * are seq_cst, as are the writer's snapshot store and its scan loads after it; a reader whose
 * increment the scan missed is ordered after the store and loads the new snapshot (the store-
 * load pattern seq_cst makes safe).
 * A thread inside a section must not map or unmap (it would wait for itself): dma_map and
 * dma_unmap return -EDEADLK then. Sections are short: never hold one across a wait for the
 * driver. The one-shot accessors cost one increment and one decrement; the device model opens
 * one section per doorbell and runs every access of it through that.
 */
#ifndef NICMR_EMU_IOMMU_H
#define NICMR_EMU_IOMMU_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mem_dma.h"
#include "nicmr_align.h"
#include "nicmr_thread.h"

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
/* The same for an IOMMU of bits-bit IOVAs (kMinIovaBits..48): [0, 0xfedfffff] and
 * [0xfef00000, 2^bits - 1] (a VT-d reports its width as the capability's MGAW); {} for a width
 * out of range. */
inline constexpr unsigned kMinIovaBits = 32;
inline constexpr unsigned kMaxIovaBits = 48;
std::vector<mem::IovaRange> emu_iommu_ranges(unsigned bits);

class EmuIommu;

/* One mapping as the device sees it. */
struct IommuSegment {
	uint64_t iova;
	uint64_t len;
	char *va;
};
/* The mappings at one moment, sorted by IOVA, never changed once published. */
struct IommuSnapshot {
	std::vector<IommuSegment> segs;
};

/*
 * A device-side read section: while it lives, the mappings it saw stay valid (an unmap waits
 * for it to end). Every access through it checks and translates against that one snapshot.
 * Device hot path: no lock, no allocation, no system call; one thread uses a section (it is
 * not shared), and a thread may hold several (they nest). Accessors as EmuIommu's below: 0, or
 * -EFAULT when any byte is unmapped (nothing moved, the fault counted and logged) or bus
 * mastering was off when the section began (nothing moved, counted in dma_refused()).
 */
class DmaSection {
public:
	explicit DmaSection(const EmuIommu &m) noexcept;
	~DmaSection() { leave(); }
	DmaSection(DmaSection &&o) noexcept
	    : m_(o.m_), snap_(o.snap_), count_(o.count_), hint_(o.hint_), bme_off_(o.bme_off_)
	{
		o.count_ = nullptr;
	}
	DmaSection &operator=(DmaSection &&o) noexcept;
	DmaSection(const DmaSection &) = delete;
	DmaSection &operator=(const DmaSection &) = delete;

	int read(uint64_t iova, void *dst, size_t len) const;
	int write(uint64_t iova, const void *src, size_t len) const;
	int store8_release(uint64_t iova, uint8_t value) const;
	int load32_acquire(uint64_t iova, uint32_t *raw) const;
	int copy(uint64_t dst_iova, uint64_t src_iova, size_t len) const;
	bool mapped(uint64_t iova, size_t len) const;
	/* The host address of [iova, iova + len) when it is mapped to one contiguous host range,
	 * valid until the section ends; else nullptr (a fault is counted). */
	void *host(uint64_t iova, size_t len) const;
	size_t mappings() const noexcept { return snap_->segs.size(); }

private:
	friend class DmaPin;
	DmaSection() noexcept = default;
	void leave() noexcept;
	const IommuSegment *find(uint64_t iova) const noexcept;
	template <class F> bool walk(uint64_t iova, size_t len, F &&f) const;

	const EmuIommu *m_ = nullptr;
	const IommuSnapshot *snap_ = nullptr;
	std::atomic<int64_t> *count_ = nullptr; /* the reader counter this section raised */
	mutable size_t hint_ = 0;		/* the segment of the last hit */
	bool bme_off_ = false;			/* bus mastering was off when the section began */
};

/*
 * A host view of [iova, iova + len) for zero-copy device access. While a DmaPin lives the
 * mapping cannot be removed (it holds a DmaSection): keep it short, never across a wait for the
 * driver. ptr() is nullptr when the range is not wholly mapped to one contiguous host range
 * (then a DMA fault was counted).
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
	DmaSection section_;
	void *ptr_ = nullptr;
};

class EmuIommu final : public mem::DmaMapper {
public:
	/*
	 * Creates an IOMMU. Errors: -EINVAL (page size not a power of two or below 4096, ranges
	 * unsorted, overlapping, empty, or not page-aligned, max_mappings 0).
	 */
	static int create(const EmuIommuConfig &cfg, std::unique_ptr<EmuIommu> *out);
	~EmuIommu() override;
	EmuIommu(const EmuIommu &) = delete;
	EmuIommu &operator=(const EmuIommu &) = delete;

	/* mem::DmaMapper. Errors as documented there: -EINVAL, -ERANGE, -EEXIST, -ENOSPC; and
	 * -EDEADLK when the calling thread holds a DmaSection (it would wait for itself). */
	int dma_map(void *va, uint64_t iova, size_t len) override;
	/* Exact (iova, len) of an earlier dma_map, else -ENOENT; len 0 is -EINVAL; -EDEADLK as
	 * above. Returns once no device access can still reach the mapping. */
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
	 * ranges, then copies piece by piece with memmove (the ranges may overlap), all in one
	 * section (one snapshot). 0; -EFAULT when any byte of either range is unmapped (nothing
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

	/*
	 * Bus Master Enable of the function in front of the IOMMU (see the top of this file).
	 * Clearing it waits for every access that began while it was set; -EDEADLK when the
	 * calling thread holds a DmaSection (it would wait for itself). Setting it never waits.
	 */
	int set_bus_master(bool on);
	bool bus_master() const noexcept { return bus_master_.load(std::memory_order_acquire); }
	/* Device accesses refused because bus mastering was off, since creation. */
	uint64_t dma_refused() const noexcept { return refused_.load(std::memory_order_relaxed); }

	/* DMA faults (accesses to unmapped IOVAs) since creation. */
	uint64_t dma_faults() const noexcept { return faults_.load(std::memory_order_relaxed); }
	/* IOVA of the most recent fault (0 before any). */
	uint64_t last_fault_iova() const noexcept
	{
		return last_fault_.load(std::memory_order_relaxed);
	}
	size_t mapping_count() const;

	/* Reader counters: a section raises one of these, chosen by its thread. */
	static constexpr size_t kReaderSlots = kThreadSlots;

private:
	friend class DmaSection;
	struct alignas(kThreadAlign) ReaderSlot {
		std::atomic<int64_t> count[2] = {0, 0}; /* sections open, by grace-period phase */
	};
	EmuIommu() = default;
	/* With write_mu_ held: publishes next, waits for the readers of the old snapshot, frees
	 * it. */
	void replace(std::unique_ptr<IommuSnapshot> next);
	void wait_for_readers();
	void fault(const char *what, uint64_t iova, size_t len) const;
	void refuse(const char *what, uint64_t iova, size_t len) const;

	std::vector<mem::IovaRange> ranges_;
	size_t page_size_ = 4096;
	size_t max_mappings_ = 0;
	std::string name_;
	std::mutex write_mu_;			   /* serialises map and unmap */
	std::unique_ptr<IommuSnapshot> current_;   /* owner of cur_; guarded by write_mu_ */
	std::atomic<const IommuSnapshot *> cur_{}; /* what new sections see */
	std::atomic<unsigned> phase_{0};	   /* which counter new sections raise */
	mutable ReaderSlot slots_[kReaderSlots];
	std::atomic<bool> bus_master_{true}; /* written under write_mu_ */
	mutable std::atomic<uint64_t> refused_{0};
	mutable std::atomic<uint64_t> faults_{0};
	mutable std::atomic<uint64_t> last_fault_{0};
};

} // namespace nicmr::emu

#endif
