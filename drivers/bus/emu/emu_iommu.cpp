/* SPDX-License-Identifier: BSD-3-Clause */
#include "emu_iommu.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <mutex>
#include <thread>

#include "nicmr_log.h"
#include "nicmr_thread.h"

namespace nicmr::emu {

namespace {

constexpr uint64_t kIova48Last = (uint64_t{1} << 48) - 1;
/* x86 routes writes to this window to the interrupt controller, so VT-d never maps it. */
constexpr uint64_t kMsiFirst = 0xfee00000;
constexpr uint64_t kMsiLast = 0xfeefffff;

bool is_pow2(size_t v)
{
	return v != 0 && (v & (v - 1)) == 0;
}

/* Sections this thread holds, on any IOMMU (map/unmap refuse to wait for themselves). Read on
 * every DMA section: initial-exec (nicmr_thread.h). */
NICMR_TLS_HOT thread_local int tl_sections = 0;

/* The reader slot of this thread (nicmr_thread.h): its own, or the shared one. The sections
 * count with read-modify-writes either way. */
size_t reader_slot() noexcept
{
	static_assert(EmuIommu::kReaderSlots == kThreadSlots);
	return thread_slot();
}

} // namespace

std::vector<mem::IovaRange> emu_iommu_default_ranges()
{
	return {{0, kMsiFirst - 1}, {kMsiLast + 1, kIova48Last}};
}

std::vector<mem::IovaRange> emu_iommu_ranges(unsigned bits)
{
	if (bits < kMinIovaBits || bits > kMaxIovaBits)
		return {};
	return {{0, kMsiFirst - 1}, {kMsiLast + 1, (uint64_t{1} << bits) - 1}};
}

int EmuIommu::create(const EmuIommuConfig &cfg, std::unique_ptr<EmuIommu> *out)
{
	if (out == nullptr || !is_pow2(cfg.page_size) || cfg.page_size < 4096 ||
	    cfg.max_mappings == 0)
		return -EINVAL;
	auto ranges = cfg.ranges.empty() ? emu_iommu_default_ranges() : cfg.ranges;
	const uint64_t mask = cfg.page_size - 1;
	for (size_t i = 0; i < ranges.size(); i++) {
		const auto &r = ranges[i];
		if (r.last < r.start || (r.start & mask) != 0 || ((r.last + 1) & mask) != 0)
			return -EINVAL;
		if (i > 0 && r.start <= ranges[i - 1].last)
			return -EINVAL;
	}
	std::unique_ptr<EmuIommu> m(new EmuIommu());
	m->ranges_ = std::move(ranges);
	m->page_size_ = cfg.page_size;
	m->max_mappings_ = cfg.max_mappings;
	m->name_ = cfg.name;
	m->current_ = std::make_unique<IommuSnapshot>();
	/* Relaxed: nobody else has the IOMMU yet; handing out the pointer publishes it. */
	m->cur_.store(m->current_.get(), std::memory_order_relaxed);
	*out = std::move(m);
	return 0;
}

EmuIommu::~EmuIommu()
{
	/* No section may outlive the IOMMU: the device model is gone before its bus. */
	cur_.store(nullptr, std::memory_order_relaxed);
}

int EmuIommu::dma_map(void *va, uint64_t iova, size_t len)
{
	const uint64_t mask = page_size_ - 1;
	const auto v = reinterpret_cast<uintptr_t>(va);
	if (va == nullptr || len == 0 || (v & mask) != 0 || (iova & mask) != 0 ||
	    (len & mask) != 0 || v + len < v)
		return -EINVAL;
	if (iova + (len - 1) < iova)
		return -ERANGE;
	const uint64_t last = iova + (len - 1);
	bool in_range = false;
	for (const auto &r : ranges_)
		if (iova >= r.start && last <= r.last)
			in_range = true;
	if (!in_range)
		return -ERANGE;
	if (tl_sections != 0)
		return -EDEADLK;

	std::lock_guard lk(write_mu_);
	const auto &segs = current_->segs;
	auto next = std::upper_bound(segs.begin(), segs.end(), iova,
				     [](uint64_t a, const IommuSegment &s) { return a < s.iova; });
	if (next != segs.end() && next->iova <= last)
		return -EEXIST;
	if (next != segs.begin()) {
		auto prev = std::prev(next);
		if (prev->iova + (prev->len - 1) >= iova)
			return -EEXIST;
	}
	if (segs.size() >= max_mappings_)
		return -ENOSPC;
	auto snap = std::make_unique<IommuSnapshot>();
	snap->segs.reserve(segs.size() + 1);
	snap->segs.assign(segs.begin(), next);
	snap->segs.push_back(IommuSegment{iova, len, static_cast<char *>(va)});
	snap->segs.insert(snap->segs.end(), next, segs.end());
	replace(std::move(snap));
	NICMR_LOG(debug, "emu-iommu", "%s: map iova 0x%" PRIx64 " len 0x%zx va %p", name_.c_str(),
		  iova, len, va);
	return 0;
}

int EmuIommu::dma_unmap(uint64_t iova, size_t len)
{
	if (len == 0)
		return -EINVAL;
	if (tl_sections != 0)
		return -EDEADLK;
	std::lock_guard lk(write_mu_);
	const auto &segs = current_->segs;
	auto it = std::lower_bound(segs.begin(), segs.end(), iova,
				   [](const IommuSegment &s, uint64_t a) { return s.iova < a; });
	if (it == segs.end() || it->iova != iova || it->len != len)
		return -ENOENT;
	auto snap = std::make_unique<IommuSnapshot>();
	snap->segs.reserve(segs.size() - 1);
	snap->segs.assign(segs.begin(), it);
	snap->segs.insert(snap->segs.end(), std::next(it), segs.end());
	/* Waits for every device access that may still use the mapping. */
	replace(std::move(snap));
	NICMR_LOG(debug, "emu-iommu", "%s: unmap iova 0x%" PRIx64 " len 0x%zx", name_.c_str(), iova,
		  len);
	return 0;
}

void EmuIommu::replace(std::unique_ptr<IommuSnapshot> next)
{
	/* seq_cst: ordered before the scans in wait_for_readers (see the file's comment); it
	 * also releases the snapshot's contents to the sections that load it. */
	cur_.store(next.get(), std::memory_order_seq_cst);
	wait_for_readers();
	current_ = std::move(next); /* frees the old snapshot: no section can hold it now */
}

void EmuIommu::wait_for_readers()
{
	/* Only the slots with an owner, and the shared one: a thread that claims its slot after
	 * this load loads the publication in its sections (nicmr_thread.h, thread_slots_owned).
	 * With a few threads that is a few lines to read instead of kReaderSlots twice, in every
	 * map and unmap: the pinning slow path's 4 KiB register + deregister went from 2,131 to
	 * about 1,870 ns (bench-mr's BM_RegDeregMmap4K). */
	const uint64_t scan = thread_slots_owned() | uint64_t{1} << kSharedSlot;
	/* Twice: flip the phase, then wait for the old phase's counters to drain. Sections that
	 * started before the publication counted in one phase or the other; sections that read
	 * the phase after a flip count in the new one and never hold the writer up. */
	for (int round = 0; round < 2; round++) {
		const unsigned old = phase_.load(std::memory_order_relaxed); /* only we write it */
		/* seq_cst: a section that loads the new phase is ordered after the publication. */
		phase_.store(old ^ 1u, std::memory_order_seq_cst);
		for (uint64_t left = scan; left != 0; left &= left - 1) {
			ReaderSlot &s = slots_[std::countr_zero(left)];
			/* seq_cst (acquire at least): pairs with a section's release decrement, so
			 * its accesses happen before the old snapshot is freed and the caller
			 * reuses the memory; seq_cst for the store-load argument above. */
			for (unsigned spins = 0; s.count[old].load(std::memory_order_seq_cst) != 0;
			     spins++)
				if (spins >= 64)
					std::this_thread::yield();
		}
	}
}

int EmuIommu::set_bus_master(bool on)
{
	if (!on && tl_sections != 0)
		return -EDEADLK;
	std::lock_guard lk(write_mu_);
	/* seq_cst: the same store-load argument as a snapshot's publication (see the file's
	 * comment): a section whose increment the scan below misses loads the new value. */
	bus_master_.store(on, std::memory_order_seq_cst);
	if (!on)
		wait_for_readers(); /* no access that saw it set is still running */
	NICMR_LOG(debug, "emu-iommu", "%s: bus mastering %s", name_.c_str(), on ? "on" : "off");
	return 0;
}

size_t EmuIommu::mapping_count() const
{
	DmaSection s(*this);
	return s.mappings();
}

void EmuIommu::fault(const char *what, uint64_t iova, size_t len) const
{
	faults_.fetch_add(1, std::memory_order_relaxed);
	last_fault_.store(iova, std::memory_order_relaxed);
	NICMR_LOG(warn, "emu-iommu",
		  "%s: DMA fault: device %s of %zu bytes at unmapped iova 0x%" PRIx64,
		  name_.c_str(), what, len, iova);
}

void EmuIommu::refuse(const char *what, uint64_t iova, size_t len) const
{
	refused_.fetch_add(1, std::memory_order_relaxed);
	NICMR_LOG(warn, "emu-iommu",
		  "%s: DMA refused: device %s of %zu bytes at iova 0x%" PRIx64
		  " while bus mastering is off (PCI_COMMAND bit 2 clear)",
		  name_.c_str(), what, len, iova);
}

/* Device hot path: one atomic increment, two loads; no lock, no allocation. */
DmaSection::DmaSection(const EmuIommu &m) noexcept : m_(&m)
{
	auto &slot = m.slots_[reader_slot()];
	/* seq_cst on the phase load, the increment and the snapshot load: a writer whose scan
	 * misses this increment published before our snapshot load, so we see its snapshot. The
	 * bus-master load is seq_cst for the same reason (set_bus_master(false) waits like an
	 * unmap). */
	const unsigned p = m.phase_.load(std::memory_order_seq_cst) & 1u;
	count_ = &slot.count[p];
	count_->fetch_add(1, std::memory_order_seq_cst);
	snap_ = m.cur_.load(std::memory_order_seq_cst);
	bme_off_ = !m.bus_master_.load(std::memory_order_seq_cst);
	tl_sections++;
}

DmaSection &DmaSection::operator=(DmaSection &&o) noexcept
{
	if (this != &o) {
		leave();
		m_ = o.m_;
		snap_ = o.snap_;
		count_ = o.count_;
		hint_ = o.hint_;
		bme_off_ = o.bme_off_;
		o.count_ = nullptr;
	}
	return *this;
}

void DmaSection::leave() noexcept
{
	if (count_ == nullptr)
		return;
	tl_sections--;
	/* Release: every access through this section happens before a writer's acquire scan
	 * sees the counter drop, and so before it frees the snapshot or returns from unmap. */
	count_->fetch_sub(1, std::memory_order_release);
	count_ = nullptr;
}

/* The segment holding iova: the last hit first, else a binary search. No allocation. */
const IommuSegment *DmaSection::find(uint64_t iova) const noexcept
{
	const auto &v = snap_->segs;
	if (hint_ < v.size() && iova - v[hint_].iova < v[hint_].len)
		return &v[hint_];
	auto it = std::upper_bound(v.begin(), v.end(), iova,
				   [](uint64_t a, const IommuSegment &s) { return a < s.iova; });
	if (it == v.begin())
		return nullptr;
	--it;
	if (iova - it->iova >= it->len)
		return nullptr;
	hint_ = static_cast<size_t>(it - v.begin());
	return &*it;
}

/* Calls f(host, n) for each host piece of [iova, iova + len), in order, and returns true; with
 * f == nullptr only checks. False when any byte is unmapped. No allocation. */
template <class F> bool DmaSection::walk(uint64_t iova, size_t len, F &&f) const
{
	while (len > 0) {
		const IommuSegment *s = find(iova);
		if (s == nullptr)
			return false;
		const uint64_t off = iova - s->iova;
		const size_t n = static_cast<size_t>(std::min<uint64_t>(s->len - off, len));
		if constexpr (!std::is_same_v<std::decay_t<F>, std::nullptr_t>)
			f(s->va + off, n);
		len -= n;
		iova += n;
		/* A wrap past 2^64 - 1 with bytes left can never be mapped. */
		if (len > 0 && iova == 0)
			return false;
	}
	return true;
}

int DmaSection::read(uint64_t iova, void *dst, size_t len) const
{
	if (len == 0)
		return 0;
	if (bme_off_) {
		m_->refuse("read", iova, len);
		return -EFAULT;
	}
	/* One segment (the common case): no second walk. */
	const IommuSegment *s = find(iova);
	if (s != nullptr && len <= s->len - (iova - s->iova)) {
		std::memcpy(dst, s->va + (iova - s->iova), len);
		return 0;
	}
	if (!walk(iova, len, nullptr)) {
		m_->fault("read", iova, len);
		return -EFAULT;
	}
	auto *d = static_cast<char *>(dst);
	walk(iova, len, [&d](char *host, size_t n) {
		std::memcpy(d, host, n);
		d += n;
	});
	return 0;
}

int DmaSection::write(uint64_t iova, const void *src, size_t len) const
{
	if (len == 0)
		return 0;
	if (bme_off_) {
		m_->refuse("write", iova, len);
		return -EFAULT;
	}
	const IommuSegment *s = find(iova);
	if (s != nullptr && len <= s->len - (iova - s->iova)) {
		std::memcpy(s->va + (iova - s->iova), src, len);
		return 0;
	}
	/* Check the whole range first: a faulting write must not leave a partial copy behind. */
	if (!walk(iova, len, nullptr)) {
		m_->fault("write", iova, len);
		return -EFAULT;
	}
	auto *p = static_cast<const char *>(src);
	walk(iova, len, [&p](char *host, size_t n) {
		std::memcpy(host, p, n);
		p += n;
	});
	return 0;
}

int DmaSection::store8_release(uint64_t iova, uint8_t value) const
{
	if (bme_off_) {
		m_->refuse("write", iova, 1);
		return -EFAULT;
	}
	const IommuSegment *s = find(iova);
	if (s == nullptr) {
		m_->fault("write", iova, 1);
		return -EFAULT;
	}
	auto *host = reinterpret_cast<uint8_t *>(s->va + (iova - s->iova));
	/* Release: the driver that sees this byte with acquire also sees every earlier dma_write
	 * (command output, mailbox data, CQE body) of this thread. */
	std::atomic_ref<uint8_t>(*host).store(value, std::memory_order_release);
	return 0;
}

int DmaSection::load32_acquire(uint64_t iova, uint32_t *raw) const
{
	if (iova % 4 != 0)
		return -EINVAL;
	if (bme_off_) {
		m_->refuse("read", iova, 4);
		return -EFAULT;
	}
	/* Mappings are page aligned: an aligned word never straddles two of them. */
	const IommuSegment *s = find(iova);
	if (s == nullptr) {
		m_->fault("read", iova, 4);
		return -EFAULT;
	}
	auto *host = reinterpret_cast<uint32_t *>(s->va + (iova - s->iova));
	/* Acquire pairs with the driver's release store of the counter (after its WQEs or
	 * CQE reads). Mappings are page aligned, so the host word is 4-byte aligned too. */
	*raw = std::atomic_ref<uint32_t>(*host).load(std::memory_order_acquire);
	return 0;
}

bool DmaSection::mapped(uint64_t iova, size_t len) const
{
	if (len == 0)
		return true;
	return walk(iova, len, nullptr);
}

int DmaSection::copy(uint64_t dst_iova, uint64_t src_iova, size_t len) const
{
	if (len == 0)
		return 0;
	if (bme_off_) {
		m_->refuse("read", src_iova, len);
		return -EFAULT;
	}
	/* Both whole ranges first: a faulting transfer must not leave a partial copy behind. */
	if (!walk(src_iova, len, nullptr)) {
		m_->fault("read", src_iova, len);
		return -EFAULT;
	}
	if (!walk(dst_iova, len, nullptr)) {
		m_->fault("write", dst_iova, len);
		return -EFAULT;
	}
	/* Piece by piece over the source; each source piece may span several destination
	 * mappings. */
	walk(src_iova, len, [&](char *src, size_t n) {
		walk(dst_iova, n, [&src](char *dst, size_t m) {
			std::memmove(dst, src, m);
			src += m;
		});
		dst_iova += n;
	});
	return 0;
}

void *DmaSection::host(uint64_t iova, size_t len) const
{
	if (len == 0)
		return nullptr;
	if (bme_off_) {
		m_->refuse("access", iova, len);
		return nullptr;
	}
	char *first = nullptr;
	char *expect = nullptr;
	bool contiguous = true;
	const bool ok = walk(iova, len, [&](char *h, size_t n) {
		if (first == nullptr)
			first = h;
		else if (h != expect)
			contiguous = false;
		expect = h + n;
	});
	if (!ok || !contiguous) {
		m_->fault("access", iova, len);
		return nullptr;
	}
	return first;
}

/* The one-shot accessors: a section each. */
int EmuIommu::dma_read(uint64_t iova, void *dst, size_t len) const
{
	if (len == 0)
		return 0;
	return DmaSection(*this).read(iova, dst, len);
}

int EmuIommu::dma_write(uint64_t iova, const void *src, size_t len)
{
	if (len == 0)
		return 0;
	return DmaSection(*this).write(iova, src, len);
}

int EmuIommu::dma_store8_release(uint64_t iova, uint8_t value)
{
	return DmaSection(*this).store8_release(iova, value);
}

int EmuIommu::dma_load32_acquire(uint64_t iova, uint32_t *raw) const
{
	if (iova % 4 != 0)
		return -EINVAL;
	return DmaSection(*this).load32_acquire(iova, raw);
}

bool EmuIommu::mapped(uint64_t iova, size_t len) const
{
	if (len == 0)
		return true;
	return DmaSection(*this).mapped(iova, len);
}

int EmuIommu::dma_copy(uint64_t dst_iova, uint64_t src_iova, size_t len)
{
	if (len == 0)
		return 0;
	return DmaSection(*this).copy(dst_iova, src_iova, len);
}

DmaPin EmuIommu::pin(uint64_t iova, size_t len) const
{
	DmaPin p;
	if (len == 0)
		return p;
	DmaSection s(*this);
	void *h = s.host(iova, len);
	if (h == nullptr)
		return p;
	p.section_ = std::move(s);
	p.ptr_ = h;
	return p;
}

} // namespace nicmr::emu
