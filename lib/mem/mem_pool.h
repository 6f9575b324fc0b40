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
	 * fallback allowed: the log line gives wanted, free and reserved, and the nr_hugepages to
	 * write; or the pages could not be populated), -EPERM (mlock refused by RLIMIT_MEMLOCK:
	 * the log line gives the limit and how to raise it; never a fallback, 4 KiB pages count
	 * against the same limit), -ENODEV (libhugetlbfs backend without a hugetlbfs mount),
	 * -EOPNOTSUPP (libhugetlbfs backend in a build without it), or what
	 * memfd_create/mmap/mbind/mlock report. Slow path; any thread.
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
	/* Where map() failed: reserving the pages (mmap), populating them, locking them. */
	enum class MapStep { other, reserve, populate, lock };
	int map(const PoolParams &params, size_t page_size, MapStep *step);

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
 * The system's hugepages (mem_hugepages.cpp). Slow path; any thread.
 *
 * Free hugepages of a size (sysfs free_hugepages). 0 for 4 KiB and for sizes the kernel does
 * not offer.
 */
size_t hugepages_free(size_t page_size);
/* The same, on one NUMA node (sysfs node<N>/hugepages). 0 for an unknown node. */
size_t hugepages_free_on_node(size_t page_size, int node);
/* Whether the kernel offers hugepages of page_size: its sysfs directory
 * /sys/kernel/mm/hugepages/hugepages-<kB>kB exists (x86 kernels without pdpe1gb, or built
 * without gigantic pages, have no 1 GiB one). False for 4 KiB and unknown sizes. */
bool hugepages_offered(size_t page_size);
/* Pages of page_size the system has reserved (nr_hugepages; with node >= 0, the node's). */
size_t hugepages_total(size_t page_size, int node = -1);
/* The file that reserves pages of page_size: the sysfs nr_hugepages, or the node's. */
std::string hugepages_nr_path(size_t page_size, int node = -1);
/*
 * The nr_hugepages a system needs so that wanted pages are free: the pages it has reserved
 * (total) plus the missing ones (wanted - free_pages). Writing only `wanted` would shrink the
 * reservation of a system that holds more pages than wanted, all taken by others.
 */
size_t hugepages_reservation_target(size_t total, size_t free_pages, size_t wanted);

/* What Pool::create found missing, for its log line. */
struct HugepageShortage {
	size_t page_size = kPage2M;
	int numa_node = -1;
	size_t wanted = 0;     /* pages the pool needs */
	size_t free_pages = 0; /* free pages of that size (on the node) */
	size_t total = 0;      /* nr_hugepages (of the node) */
	bool offered = true;   /* hugepages_offered(page_size) */
};
/*
 * The shortage and its remedy, in words, e.g.
 *   "wanted 32 free 2 MiB hugepages, 10 free of 1100 reserved. Reserve 22 more, as root:
 *    echo 1122 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
 * 1 GiB adds "(or use 2 MiB pages)"; a size the kernel does not offer says so and names the
 * page size to use instead.
 */
std::string describe_hugepage_shortage(const HugepageShortage &s);
/*
 * Why mlock of bytes failed with err (ENOMEM, EPERM: RLIMIT_MEMLOCK) and how to raise the
 * limit: the soft and hard limits in force (limit_cur, limit_max: RLIM_INFINITY for none),
 * the bytes the process had locked already (-1: unknown), `ulimit -l`, limits.conf's memlock,
 * CAP_IPC_LOCK.
 */
std::string describe_mlock_failure(size_t bytes, int err, uint64_t limit_cur, uint64_t limit_max,
				   long long locked_already);
/* Highest NUMA node that exists (0 without libnuma or on a machine without NUMA). */
int numa_max_node_id();

} // namespace nicmr::mem

#endif
