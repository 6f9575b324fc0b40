/* SPDX-License-Identifier: BSD-3-Clause */
#include "emu_iommu.h"

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <mutex>

#include "nicmr_log.h"

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

} // namespace

std::vector<mem::IovaRange> emu_iommu_default_ranges()
{
	return {{0, kMsiFirst - 1}, {kMsiLast + 1, kIova48Last}};
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
	*out = std::move(m);
	return 0;
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

	std::unique_lock lk(lock_);
	auto next = maps_.lower_bound(iova);
	if (next != maps_.end() && next->first <= last)
		return -EEXIST;
	if (next != maps_.begin()) {
		auto prev = std::prev(next);
		if (prev->first + (prev->second.len - 1) >= iova)
			return -EEXIST;
	}
	if (maps_.size() >= max_mappings_)
		return -ENOSPC;
	maps_.emplace(iova, Mapping{static_cast<char *>(va), len});
	NICMR_LOG(debug, "emu-iommu", "%s: map iova 0x%" PRIx64 " len 0x%zx va %p", name_.c_str(),
		  iova, len, va);
	return 0;
}

int EmuIommu::dma_unmap(uint64_t iova, size_t len)
{
	if (len == 0)
		return -EINVAL;
	/* Exclusive: waits for every device access that may still use the mapping. */
	std::unique_lock lk(lock_);
	auto it = maps_.find(iova);
	if (it == maps_.end() || it->second.len != len)
		return -ENOENT;
	maps_.erase(it);
	NICMR_LOG(debug, "emu-iommu", "%s: unmap iova 0x%" PRIx64 " len 0x%zx", name_.c_str(), iova,
		  len);
	return 0;
}

size_t EmuIommu::mapping_count() const
{
	std::shared_lock lk(lock_);
	return maps_.size();
}

template <class F> bool EmuIommu::walk(uint64_t iova, size_t len, F &&f) const
{
	while (len > 0) {
		auto it = maps_.upper_bound(iova);
		if (it == maps_.begin())
			return false;
		--it;
		const uint64_t off = iova - it->first;
		if (off >= it->second.len)
			return false;
		const size_t n = static_cast<size_t>(std::min<uint64_t>(it->second.len - off, len));
		if constexpr (!std::is_same_v<std::decay_t<F>, std::nullptr_t>)
			f(it->second.va + off, n);
		len -= n;
		iova += n;
		/* A wrap past 2^64 - 1 with bytes left can never be mapped. */
		if (len > 0 && iova == 0)
			return false;
	}
	return true;
}

void EmuIommu::fault(const char *what, uint64_t iova, size_t len) const
{
	faults_.fetch_add(1, std::memory_order_relaxed);
	last_fault_.store(iova, std::memory_order_relaxed);
	NICMR_LOG(warn, "emu-iommu",
		  "%s: DMA fault: device %s of %zu bytes at unmapped iova 0x%" PRIx64,
		  name_.c_str(), what, len, iova);
}

int EmuIommu::dma_read(uint64_t iova, void *dst, size_t len) const
{
	if (len == 0)
		return 0;
	std::shared_lock lk(lock_);
	if (!walk(iova, len, nullptr)) {
		fault("read", iova, len);
		return -EFAULT;
	}
	auto *d = static_cast<char *>(dst);
	walk(iova, len, [&d](char *host, size_t n) {
		std::memcpy(d, host, n);
		d += n;
	});
	return 0;
}

int EmuIommu::dma_write(uint64_t iova, const void *src, size_t len)
{
	if (len == 0)
		return 0;
	std::shared_lock lk(lock_);
	/* Check the whole range first: a faulting write must not leave a partial copy behind. */
	if (!walk(iova, len, nullptr)) {
		fault("write", iova, len);
		return -EFAULT;
	}
	auto *s = static_cast<const char *>(src);
	walk(iova, len, [&s](char *host, size_t n) {
		std::memcpy(host, s, n);
		s += n;
	});
	return 0;
}

int EmuIommu::dma_store8_release(uint64_t iova, uint8_t value)
{
	std::shared_lock lk(lock_);
	uint8_t *host = nullptr;
	if (!walk(iova, 1, [&host](char *h, size_t) { host = reinterpret_cast<uint8_t *>(h); })) {
		fault("write", iova, 1);
		return -EFAULT;
	}
	/* Release: the driver that sees this byte with acquire also sees every earlier dma_write
	 * (command output, mailbox data) of this thread. */
	std::atomic_ref<uint8_t>(*host).store(value, std::memory_order_release);
	return 0;
}

int EmuIommu::dma_load32_acquire(uint64_t iova, uint32_t *raw) const
{
	if (iova % 4 != 0)
		return -EINVAL;
	std::shared_lock lk(lock_);
	uint32_t *host = nullptr;
	if (!walk(iova, 4, [&host](char *h, size_t) { host = reinterpret_cast<uint32_t *>(h); })) {
		fault("read", iova, 4);
		return -EFAULT;
	}
	/* Acquire pairs with the driver's release store of the counter (after its WQEs or
	 * CQE reads). Mappings are page aligned, so the host word is 4-byte aligned too. */
	*raw = std::atomic_ref<uint32_t>(*host).load(std::memory_order_acquire);
	return 0;
}

bool EmuIommu::mapped(uint64_t iova, size_t len) const
{
	if (len == 0)
		return true;
	std::shared_lock lk(lock_);
	return walk(iova, len, nullptr);
}

int EmuIommu::dma_copy(uint64_t dst_iova, uint64_t src_iova, size_t len)
{
	if (len == 0)
		return 0;
	std::shared_lock lk(lock_);
	/* Both whole ranges first: a faulting transfer must not leave a partial copy behind. */
	if (!walk(src_iova, len, nullptr)) {
		fault("read", src_iova, len);
		return -EFAULT;
	}
	if (!walk(dst_iova, len, nullptr)) {
		fault("write", dst_iova, len);
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

DmaPin EmuIommu::pin(uint64_t iova, size_t len) const
{
	DmaPin p;
	if (len == 0)
		return p;
	std::shared_lock lk(lock_);
	char *first = nullptr;
	char *expect = nullptr;
	bool contiguous = true;
	const bool ok = walk(iova, len, [&](char *host, size_t n) {
		if (first == nullptr)
			first = host;
		else if (host != expect)
			contiguous = false;
		expect = host + n;
	});
	if (!ok || !contiguous) {
		fault("access", iova, len);
		return p;
	}
	p.lock_ = std::move(lk);
	p.ptr_ = first;
	return p;
}

} // namespace nicmr::emu
