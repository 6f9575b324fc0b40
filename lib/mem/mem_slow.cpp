/* SPDX-License-Identifier: BSD-3-Clause */
/* Slow-path mappings: check, pin, place, map (mem_slow.h has the picture). */
#include "mem_slow.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nicmr_log.h"

namespace nicmr::mem {

namespace {

constexpr const char *kLog = "mem";
constexpr uintptr_t kPin = 4096; /* the unit pins are counted in */

/*
 * True when every byte of [va, end) lies in mappings that are readable, and writable too when
 * write is set (/proc/self/maps, sorted by address). The device would otherwise write into
 * memory the process itself may not write (ibv_reg_mr refuses that with EFAULT too:
 * rdma-core's ibv_reg_mr(3), the kernel's ib_umem_get through pin_user_pages with FOLL_WRITE).
 */
bool range_accessible(uintptr_t va, uintptr_t end, bool write)
{
	FILE *f = std::fopen("/proc/self/maps", "re");
	if (f == nullptr)
		return true; /* no procfs: mincore's check stands alone */
	char line[512];
	uintptr_t covered = va;
	while (covered < end && std::fgets(line, sizeof(line), f) != nullptr) {
		unsigned long lo = 0, hi = 0;
		char perms[8] = {};
		if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3)
			continue;
		if (hi <= covered || lo > covered)
			continue;
		if (perms[0] != 'r' || (write && perms[1] != 'w'))
			break;
		covered = hi;
	}
	std::fclose(f);
	return covered >= end;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14, include/uapi/asm-generic/mman-common.h */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Whether this kernel knows MADV_POPULATE_*: asked once, on a page of our own. The
 * environment variable NICMR_NO_MADV_POPULATE=1 takes the older kernels' path (tests run the
 * slow path both ways). */
bool populate_supported()
{
	static const bool supported = [] {
		const char *off = std::getenv("NICMR_NO_MADV_POPULATE");
		if (off != nullptr && std::strcmp(off, "1") == 0)
			return false;
		alignas(4096) static char page[4096];
		return madvise(page, sizeof(page), MADV_POPULATE_READ) == 0;
	}();
	return supported;
}

/*
 * The FI_MR_ALLOCATED contract for [va, end) (page-aligned): every page is mapped and allows
 * what the device will do; 0 or -EFAULT (-ENOMEM when the check itself cannot allocate). One
 * system call when the kernel can populate; the maps file is read only to explain a refusal,
 * or on an older kernel.
 */
int check_backed(uintptr_t va, uintptr_t end, bool write)
{
	void *p = reinterpret_cast<void *>(va);
	const size_t n = end - va;
	if (populate_supported()) {
		int rc;
		do {
			rc = madvise(p, n, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
		} while (rc != 0 && errno == EINTR);
		if (rc == 0)
			return 0;
		/* madvise(2): ENOMEM, a hole; EFAULT, a page that would raise SIGBUS; EINVAL, no
		 * such permission, or a mapping that cannot be populated (I/O memory), which the
		 * maps file tells apart. */
		if (errno != EINVAL)
			return -EFAULT;
		return range_accessible(va, end, write) ? 0 : -EFAULT;
	}
	try {
		/* mincore(2) fails with ENOMEM for a range with unmapped pages, and never faults
		 * anything in. */
		std::vector<unsigned char> vec(n / kPin);
		if (mincore(p, n, vec.data()) != 0)
			return errno == ENOMEM ? -EFAULT : -errno;
	} catch (...) {
		return -ENOMEM;
	}
	return range_accessible(va, end, write) ? 0 : -EFAULT;
}

/*
 * Locks and unlocks pages with the system calls, not the libc functions: sanitizer runtimes
 * replace mlock() and munlock() with no-ops (as mem_pool.cpp says), and the slow path's tests
 * check what the kernel counts. 0 or a negative errno.
 *
 * resident: every page was populated just before (check_backed with MADV_POPULATE_*), so
 * mlock2(2)'s MLOCK_ONFAULT locks them as they are, without the walk over the range that
 * plain mlock makes to fault pages in (__mm_populate: about 110 ns of the 4 KiB register +
 * deregister pair, perf record of bench-mr's BM_RegDeregMmap4K). A page the application
 * drops meanwhile is locked again when it is touched. A kernel without mlock2 (before 4.4)
 * takes mlock.
 */
int lock_pages(uintptr_t va, size_t len, bool resident)
{
	static std::atomic<bool> no_mlock2{false};
	if (resident && !no_mlock2.load(std::memory_order_relaxed)) {
		if (syscall(SYS_mlock2, va, len, MLOCK_ONFAULT) == 0)
			return 0;
		if (errno != ENOSYS)
			return -errno;
		no_mlock2.store(true, std::memory_order_relaxed);
	}
	return syscall(SYS_mlock, va, len) == 0 ? 0 : -errno;
}

void unlock_pages(uintptr_t va, size_t len)
{
	syscall(SYS_munlock, va, len);
}

} // namespace

IovaRange SlowMaps::window(const std::vector<IovaRange> &ranges)
{
	if (ranges.empty())
		return {1, 0}; /* empty */
	const IovaRange &r = ranges.back();
	const uint64_t span = r.last - r.start; /* bytes - 1 */
	uint64_t start = r.start + (span / 4) * 3;
	start = (start + kPage2M - 1) & ~uint64_t(kPage2M - 1);
	if (start < r.start || start > r.last)
		return r;
	return {start, r.last};
}

SlowMaps::SlowMaps(DmaSpace &space, std::string name, IovaRange window)
    : space_(space), name_(std::move(name)), window_(window), iova_({window})
{}

int SlowMaps::create(DmaSpace &space, std::string name, std::unique_ptr<SlowMaps> *out)
{
	if (out == nullptr)
		return -EINVAL;
	try {
		const IovaRange w = window(space.mapper().iova_ranges());
		if (w.start > w.last) {
			NICMR_LOG(error, kLog, "%s: the IOMMU offers no IOVA range for slow maps",
				  name.c_str());
			return -ENOSPC;
		}
		out->reset(new SlowMaps(space, std::move(name), w));
	} catch (...) {
		return -ENOMEM;
	}
	return 0;
}

int SlowMaps::pin(uintptr_t va, size_t len, SlowMap *m, bool resident)
{
	/* Count and lock the pages that no pool holds, run by run. The pool lookups run under
	 * mu_, which wait_for_lookups() passes through. */
	const char *const fn = __func__; /* the log line in the lambda */
	uintptr_t run = 0;
	size_t run_len = 0;
	auto flush = [&]() -> int {
		if (run_len == 0)
			return 0;
		/* The run is recorded as far as it is counted, so that unpin() after a throw
		 * (pins_ out of memory) uncounts exactly what was counted. */
		auto &rec = m->pinned.emplace_back(run, 0);
		for (uintptr_t p = run; p < run + run_len; p += kPin) {
			pins_[p]++;
			rec.second += kPin;
		}
		/* Lock the whole run; locking a page twice is harmless, only the unlock must wait
		 * for the last user (unpin). */
		if (const int rc = lock_pages(run, run_len, resident); rc != 0) {
			NICMR_LOG_IN(fn, warn, kLog, "%s: mlock [%#lx, +%zu) failed: %s",
				     name_.c_str(), (unsigned long)run, run_len,
				     std::strerror(-rc));
			return rc;
		}
		run_len = 0;
		return 0;
	};
	int rc = 0;
	for (uintptr_t p = va; p < va + len && rc == 0; p += kPin) {
		if (space_.lookup(reinterpret_cast<void *>(p), kPin) != nullptr) {
			rc = flush();
			continue;
		}
		if (run_len == 0)
			run = p;
		run_len += kPin;
	}
	if (rc == 0)
		rc = flush();
	return rc;
}

void SlowMaps::unpin(const std::vector<std::pair<uintptr_t, size_t>> &runs)
{
	for (const auto &[va, len] : runs) {
		uintptr_t from = 0;
		size_t ulen = 0;
		for (uintptr_t p = va; p < va + len; p += kPin) {
			auto it = pins_.find(p);
			if (it == pins_.end() || --it->second != 0)
				continue;
			pins_.erase(it);
			if (ulen && from + ulen == p) {
				ulen += kPin;
				continue;
			}
			if (ulen)
				unlock_pages(from, ulen);
			from = p;
			ulen = kPin;
		}
		if (ulen)
			unlock_pages(from, ulen);
	}
}

int SlowMaps::map(uintptr_t addr, size_t len, bool write, std::unique_ptr<SlowMap> *out)
{
	const uintptr_t va = addr & ~(kPin - 1);
	const uintptr_t end = (addr + len + kPin - 1) & ~(kPin - 1);
	if (len == 0 || addr + len < addr || end <= va)
		return -EINVAL;
	const size_t n = end - va;
	auto m = std::unique_ptr<SlowMap>(new (std::nothrow) SlowMap);
	if (!m)
		return -ENOMEM;
	m->va = va;
	m->len = n;
	/* FI_MR_ALLOCATED: the memory must exist now, with the access the device needs. */
	if (int rc = check_backed(va, end, write); rc != 0) {
		NICMR_LOG(warn, kLog, "%s: slow map [%#lx, +%zu): memory not mapped %s",
			  name_.c_str(), (unsigned long)addr, len,
			  write ? "readable and writable" : "readable");
		return rc;
	}

	std::lock_guard lk(mu_);
	try {
		/* Populated by check_backed when the kernel can (but for a mapping that cannot be
		 * populated, I/O memory, which mlock does not fault in either). */
		int rc = pin(va, n, m.get(), populate_supported());
		if (rc) {
			unpin(m->pinned);
			return rc;
		}
		/* Congruent with the VA up to 2 MiB, as pools are, so the low bits agree. */
		m->align = std::clamp<size_t>(std::bit_floor(n), kPin, kPage2M);
		rc = iova_.alloc(n, m->align, va, &m->iova);
		if (rc) {
			NICMR_LOG(warn, kLog, "%s: no IOVA in the slow-map window for %zu bytes",
				  name_.c_str(), n);
			unpin(m->pinned);
			return rc;
		}
		rc = space_.mapper().dma_map(reinterpret_cast<void *>(va), m->iova, n);
		if (rc) {
			NICMR_LOG(warn, kLog, "%s: dma_map of slow map [%#lx, +%zu) at %#llx: %d",
				  name_.c_str(), (unsigned long)va, n,
				  static_cast<unsigned long long>(m->iova), rc);
			iova_.release(m->iova, n);
			unpin(m->pinned);
			return rc;
		}
	} catch (...) {
		/* Only the pin counts allocate: whatever was counted is uncounted, no IOVA or
		 * mapping was taken yet. */
		unpin(m->pinned);
		return -ENOMEM;
	}
	maps_++;
	*out = std::move(m);
	return 0;
}

void SlowMaps::unmap(std::unique_ptr<SlowMap> m)
{
	if (!m)
		return;
	std::lock_guard lk(mu_);
	const int rc = space_.mapper().dma_unmap(m->iova, m->len);
	if (rc)
		NICMR_LOG(warn, kLog, "%s: dma_unmap of slow map [%#lx, +%zu) failed: %d",
			  name_.c_str(), (unsigned long)m->va, m->len, rc);
	iova_.release(m->iova, m->len);
	unpin(m->pinned);
	maps_--;
}

int SlowMaps::populate(uintptr_t va, uintptr_t end, bool write)
{
	return check_backed(va, end, write);
}

int SlowMaps::odp_reserve(uintptr_t va, size_t n, uint64_t *iova)
{
	std::lock_guard lk(mu_);
	try {
		const size_t align = std::clamp<size_t>(std::bit_floor(n), kPin, kPage2M);
		return iova_.alloc(n, align, va, iova);
	} catch (...) {
		return -ENOMEM;
	}
}

void SlowMaps::odp_release(uint64_t iova, size_t n)
{
	std::lock_guard lk(mu_);
	iova_.release(iova, n);
}

int SlowMaps::odp_map(uintptr_t va, uint64_t iova, size_t n)
{
	std::lock_guard lk(mu_);
	SlowMap m;
	try {
		int rc = pin(va, n, &m, false);
		if (rc == 0)
			rc = space_.mapper().dma_map(reinterpret_cast<void *>(va), iova, n);
		if (rc) {
			NICMR_LOG(warn, kLog, "%s: on-demand map [%#lx, +%zu) at %#llx: %d",
				  name_.c_str(), (unsigned long)va, n,
				  static_cast<unsigned long long>(iova), rc);
			unpin(m.pinned);
		}
		return rc;
	} catch (...) {
		unpin(m.pinned);
		return -ENOMEM;
	}
}

void SlowMaps::odp_unmap(uintptr_t va, uint64_t iova, size_t n)
{
	std::lock_guard lk(mu_);
	const int rc = space_.mapper().dma_unmap(iova, n);
	if (rc)
		NICMR_LOG(warn, kLog, "%s: on-demand unmap [%#lx, +%zu) failed: %d", name_.c_str(),
			  (unsigned long)va, n, rc);
	/* unpin() skips pages it finds no count for: the pool pages pin() left out. */
	try {
		unpin({{va, n}});
	} catch (...) {
		NICMR_LOG(error, kLog,
			  "%s: on-demand unpin [%#lx, +%zu): no memory, pages stay locked",
			  name_.c_str(), (unsigned long)va, n);
	}
}

void SlowMaps::odp_dma_unmap(uint64_t iova, size_t n)
{
	std::lock_guard lk(mu_);
	if (const int rc = space_.mapper().dma_unmap(iova, n); rc != 0)
		NICMR_LOG(warn, kLog, "%s: on-demand unmap at %#llx, +%zu failed: %d",
			  name_.c_str(), static_cast<unsigned long long>(iova), n, rc);
}

void SlowMaps::odp_unpin(uintptr_t va, size_t n)
{
	std::lock_guard lk(mu_);
	try {
		unpin({{va, n}});
	} catch (...) {
		NICMR_LOG(error, kLog,
			  "%s: on-demand unpin [%#lx, +%zu): no memory, pages stay locked",
			  name_.c_str(), (unsigned long)va, n);
	}
}

int SlowMaps::odp_remap(uintptr_t va, uint64_t iova, size_t n)
{
	std::lock_guard lk(mu_);
	return space_.mapper().dma_map(reinterpret_cast<void *>(va), iova, n);
}

uint64_t SlowMaps::mappings() const
{
	std::lock_guard lk(mu_);
	return maps_;
}

size_t SlowMaps::pinned_pages() const
{
	std::lock_guard lk(mu_);
	return pins_.size();
}

uint32_t SlowMaps::pins_of(uintptr_t page) const
{
	std::lock_guard lk(mu_);
	auto it = pins_.find(page);
	return it == pins_.end() ? 0 : it->second;
}

size_t SlowMaps::iova_bytes() const
{
	std::lock_guard lk(mu_);
	return iova_.allocated_bytes();
}

void SlowMaps::wait_for_lookups() const
{
	/* map() looks pools up only while holding mu_: once we hold it, those lookups ended. */
	std::lock_guard lk(mu_);
}

} // namespace nicmr::mem
