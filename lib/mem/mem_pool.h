/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Hugepage pools: memory an application (or nicmr itself) registers out of at memory speed.
 *
 * A Pool is a contiguous virtual range backed by pages of one size (4 KiB, 2 MiB or 1 GiB),
 * populated and locked when created, optionally bound to a NUMA node, and backed by a file
 * descriptor (memfd MFD_HUGETLB or a libhugetlbfs file) that can be handed to another process.
 * A Pool knows nothing of IOVAs: DmaSpace (mem_space.h) places pools in a device's IOVA space.
 *
 * Errors are negative errno values; every failure releases everything the call took.
 */
#ifndef NICMR_MEM_POOL_H
#define NICMR_MEM_POOL_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace nicmr::mem {

inline constexpr size_t kPage4K = size_t{1} << 12;
inline constexpr size_t kPage2M = size_t{1} << 21;
inline constexpr size_t kPage1G = size_t{1} << 30;

enum class PoolBackend {
	memfd,	   /* memfd_create(MFD_HUGETLB | MFD_HUGE_<size>); the default */
	hugetlbfs, /* a file from libhugetlbfs on a mounted hugetlbfs */
	external,  /* memory the caller owns (imported, DPDK memsegs): never freed by the pool */
};

struct PoolParams {
	size_t size = 0;	    /* bytes; rounded up to page_size; 0 is -EINVAL */
	size_t page_size = kPage2M; /* kPage4K, kPage2M or kPage1G; anything else is -EINVAL */
	int numa_node = -1; /* -1: wherever the kernel puts it; else 0..max node (-EINVAL) */
	bool allow_fallback =
		false; /* no free hugepage: fall back to 4 KiB pages (with a warning) */
	PoolBackend backend = PoolBackend::memfd;
	std::string name = "pool"; /* for log lines and /proc/self/maps */
};

class Pool {
public:
	/*
	 * Creates a pool. Errors: -EINVAL (size 0 or too large, unknown page size, NUMA node
	 * out of range, backend external), -ENOMEM (not enough free hugepages of that size and no
	 * fallback allowed: the log line gives wanted and free; or the pages could not be
	 * populated), -ENODEV (libhugetlbfs backend without a hugetlbfs mount), -EOPNOTSUPP
	 * (libhugetlbfs backend in a build without it), or what memfd_create/mmap/mbind/mlock
	 * report. Slow path; any thread.
	 */
	static int create(const PoolParams &params, std::unique_ptr<Pool> *out);

	/*
	 * Wraps memory the caller owns: [va, va + len) on pages of page_size. Not freed (nor fd
	 * closed) on destroy. -EINVAL for a null va, len 0, an unknown page size, or va/len not
	 * multiples of page_size.
	 */
	static int import(void *va, size_t len, size_t page_size, int fd, std::string name,
			  std::unique_ptr<Pool> *out);

	~Pool();
	Pool(const Pool &) = delete;
	Pool &operator=(const Pool &) = delete;

	void *va() const noexcept { return va_; }
	size_t size() const noexcept { return size_; }
	size_t page_size() const noexcept { return page_size_; }
	size_t page_count() const noexcept { return size_ / page_size_; }
	int fd() const noexcept { return fd_; } /* -1 when there is none */
	int numa_node() const noexcept { return numa_node_; }
	PoolBackend backend() const noexcept { return backend_; }
	const std::string &name() const noexcept { return name_; }
	bool contains(const void *addr, size_t len) const noexcept
	{
		auto a = reinterpret_cast<uintptr_t>(addr);
		auto b = reinterpret_cast<uintptr_t>(va_);
		return a >= b && len <= size_ && a - b <= size_ - len;
	}

	/*
	 * Physical address of every page (physical-address mode: root, /proc/self/pagemap).
	 * -EPERM when frames read as zero (not root / no CAP_SYS_ADMIN), -EINVAL when count <
	 * page_count(), -EFAULT for a page not present, or the errno of reading the pagemap.
	 * Never on a data path.
	 */
	int physical_addresses(uint64_t *pa, size_t count) const;

private:
	Pool() = default;
	int map(const PoolParams &params, size_t page_size);

	void *va_ = nullptr;
	size_t size_ = 0;
	size_t page_size_ = 0;
	int fd_ = -1;
	int numa_node_ = -1;
	PoolBackend backend_ = PoolBackend::memfd;
	std::string name_;
	bool owned_ = true;
};

/*
 * Free hugepages of a size (sysfs free_hugepages; HugePages_Free for the default size). 0 for
 * 4 KiB and for sizes the kernel does not offer.
 */
size_t hugepages_free(size_t page_size);
/* The same, on one NUMA node (sysfs node<N>/hugepages). 0 for an unknown node. */
size_t hugepages_free_on_node(size_t page_size, int node);
/* Highest NUMA node that exists (0 without libnuma or on a machine without NUMA). */
int numa_max_node_id();

} // namespace nicmr::mem

#endif
