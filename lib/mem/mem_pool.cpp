/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Pool creation: a file descriptor (memfd or a libhugetlbfs file) sized to the pool, one shared
 * mapping of it, an optional NUMA binding, then population and locking. The order matters:
 *
 *   fd ──ftruncate──> mmap(MAP_SHARED) ──mbind(node)──> MADV_POPULATE_WRITE ──> mlock
 *
 * The binding must come before the first fault, or the pages land wherever the faulting thread
 * runs. MADV_POPULATE_WRITE reports a missing hugepage as an error; touching the pages instead
 * would turn the same condition into SIGBUS inside the caller's process.
 */
#include "mem_pool.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nicmr_config.h"
#include "nicmr_log.h"

#if NICMR_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif
#if NICMR_HAVE_HUGETLBFS
#include <stddef.h> /* hugetlbfs.h uses size_t without including it */
extern "C" {	    /* and has no C++ guard */
#include <hugetlbfs.h>
}
#endif

#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26
#endif

namespace nicmr::mem {
namespace {

constexpr const char *kLog = "mem";

bool valid_page_size(size_t page_size)
{
	return page_size == kPage4K || page_size == kPage2M || page_size == kPage1G;
}

const char *size_name(size_t page_size)
{
	switch (page_size) {
	case kPage4K:
		return "4 KiB";
	case kPage2M:
		return "2 MiB";
	case kPage1G:
		return "1 GiB";
	}
	return "?";
}

int log2_of(size_t v)
{
	return __builtin_ctzll(v);
}

int open_backing(const PoolParams &params, size_t page_size, int *fd_out)
{
	if (params.backend == PoolBackend::hugetlbfs && page_size != kPage4K) {
#if NICMR_HAVE_HUGETLBFS
		if (hugetlbfs_find_path_for_size(static_cast<long>(page_size)) == nullptr) {
			NICMR_LOG(error, kLog,
				  "pool %s: no hugetlbfs mount for %s pages (mount -t hugetlbfs -o "
				  "pagesize=%zuK none /mnt/huge)",
				  params.name.c_str(), size_name(page_size), page_size >> 10);
			return -ENODEV;
		}
		int fd = hugetlbfs_unlinked_fd_for_size(static_cast<long>(page_size));
		if (fd < 0) {
			int rc = errno ? -errno : -EIO;
			NICMR_LOG(error, kLog, "pool %s: libhugetlbfs gave no file: %s",
				  params.name.c_str(), std::strerror(-rc));
			return rc;
		}
		*fd_out = fd;
		return 0;
#else
		NICMR_LOG(error, kLog, "pool %s: built without libhugetlbfs", params.name.c_str());
		return -EOPNOTSUPP;
#endif
	}
	unsigned flags = MFD_CLOEXEC;
	if (page_size != kPage4K)
		flags |=
			MFD_HUGETLB | (static_cast<unsigned>(log2_of(page_size)) << MFD_HUGE_SHIFT);
	int fd = memfd_create(params.name.c_str(), flags);
	if (fd < 0) {
		int rc = -errno;
		NICMR_LOG(error, kLog, "pool %s: memfd_create(%s pages): %s", params.name.c_str(),
			  size_name(page_size), std::strerror(errno));
		return rc;
	}
	*fd_out = fd;
	return 0;
}

/* The shortage of page_size pages for params, counted now, with its remedy (log lines). */
std::string shortage(const PoolParams &params, size_t page_size)
{
	HugepageShortage s;
	s.page_size = page_size;
	s.numa_node = params.numa_node;
	s.wanted = (params.size + page_size - 1) / page_size;
	s.free_pages = params.numa_node >= 0 ? hugepages_free_on_node(page_size, params.numa_node)
					     : hugepages_free(page_size);
	s.total = hugepages_total(page_size, params.numa_node);
	s.offered = hugepages_offered(page_size);
	return describe_hugepage_shortage(s);
}

/* Bytes this process has locked (VmLck of /proc/self/status); -1 when unknown. */
long long locked_bytes_now()
{
	FILE *f = std::fopen("/proc/self/status", "re");
	if (f == nullptr)
		return -1;
	char line[256];
	long long kb = -1;
	while (std::fgets(line, sizeof(line), f) != nullptr)
		if (std::sscanf(line, "VmLck: %lld kB", &kb) == 1)
			break;
	std::fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

} // namespace

int numa_max_node_id()
{
#if NICMR_HAVE_NUMA
	if (numa_available() < 0)
		return 0;
	return numa_max_node();
#else
	return 0;
#endif
}

int Pool::map(const PoolParams &params, size_t page_size, MapStep *step)
{
	*step = MapStep::other;
	size_t size = (params.size + page_size - 1) & ~(page_size - 1);
	int fd = -1;
	int rc = open_backing(params, page_size, &fd);
	if (rc != 0)
		return rc;
	if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
		rc = -errno;
		NICMR_LOG(error, kLog, "pool %s: ftruncate(%zu): %s", params.name.c_str(), size,
			  std::strerror(errno));
		close(fd);
		return rc;
	}
	/* For hugetlb files the kernel reserves the pages here: too few gives ENOMEM now. */
	void *va = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (va == MAP_FAILED) {
		rc = -errno;
		/* Hugepage shortage is reported by the caller, with the numbers. */
		NICMR_LOG(info, kLog, "pool %s: mmap of %zu bytes on %s pages: %s",
			  params.name.c_str(), size, size_name(page_size), std::strerror(-rc));
		close(fd);
		*step = MapStep::reserve;
		return rc;
	}
	*step = MapStep::populate;
	const char *const fn = __func__; /* the log line in the lambda */
	auto fail = [&](int err, const char *what) {
		NICMR_LOG_IN(fn, error, kLog, "pool %s: %s: %s", params.name.c_str(), what,
			     std::strerror(-err));
		munmap(va, size);
		close(fd);
		return err;
	};
#if NICMR_HAVE_NUMA
	if (params.numa_node >= 0 && numa_available() >= 0) {
		unsigned long mask[16] = {};
		const unsigned long bits = sizeof(unsigned long) * 8;
		mask[params.numa_node / bits] |= 1UL << (params.numa_node % bits);
		if (mbind(va, size, MPOL_BIND, mask, sizeof(mask) * 8, MPOL_MF_STRICT) != 0)
			return fail(-errno, "mbind");
	}
#endif
	if (madvise(va, size, MADV_POPULATE_WRITE) != 0) {
		/* EFAULT/EHWPOISON: the pages could not be had (on that node). */
		int err = errno == EINVAL ? -EINVAL : -ENOMEM;
		return fail(err, "populating the pages");
	}
	/* The system call, not mlock(): sanitizer runtimes replace mlock() with a no-op. */
	if (syscall(SYS_mlock, va, size) != 0) {
		/*
		 * mlock(2): ENOMEM when a nonzero RLIMIT_MEMLOCK would be exceeded, EPERM when it
		 * is 0, both without CAP_IPC_LOCK. The pages were there: this is no hugepage
		 * shortage, and 4 KiB pages would meet the same limit, so it is -EPERM and no
		 * fallback (nicmr.h).
		 */
		const int err = errno;
		struct rlimit lim = {RLIM_INFINITY, RLIM_INFINITY};
		getrlimit(RLIMIT_MEMLOCK, &lim);
		const long long locked = locked_bytes_now();
		NICMR_LOG(error, kLog, "pool %s: %s", params.name.c_str(),
			  describe_mlock_failure(size, err, lim.rlim_cur, lim.rlim_max, locked)
				  .c_str());
		munmap(va, size);
		close(fd);
		*step = MapStep::lock;
		return err == ENOMEM || err == EPERM ? -EPERM : -err;
	}
	va_ = va;
	size_ = size;
	page_size_ = page_size;
	fd_ = fd;
	numa_node_ = params.numa_node;
	backend_ = page_size == kPage4K ? PoolBackend::memfd : params.backend;
	name_ = params.name;
	owned_ = true;
	return 0;
}

int Pool::create(const PoolParams &params, std::unique_ptr<Pool> *out)
{
	if (out == nullptr)
		return -EINVAL;
	if (params.size == 0) {
		NICMR_LOG(error, kLog, "pool %s: size 0", params.name.c_str());
		return -EINVAL;
	}
	if (!valid_page_size(params.page_size)) {
		NICMR_LOG(error, kLog, "pool %s: page size %zu is not 4 KiB, 2 MiB or 1 GiB",
			  params.name.c_str(), params.page_size);
		return -EINVAL;
	}
	if (params.numa_node < -1 || params.numa_node > numa_max_node_id()) {
		NICMR_LOG(error, kLog, "pool %s: NUMA node %d out of range (-1..%d)",
			  params.name.c_str(), params.numa_node, numa_max_node_id());
		return -EINVAL;
	}
	if (params.backend == PoolBackend::external) {
		NICMR_LOG(error, kLog, "pool %s: external memory comes in through Pool::import",
			  params.name.c_str());
		return -EINVAL;
	}
	if (params.size > SIZE_MAX - params.page_size) {
		NICMR_LOG(error, kLog, "pool %s: size %zu too large", params.name.c_str(),
			  params.size);
		return -EINVAL;
	}

	std::unique_ptr<Pool> pool(new (std::nothrow) Pool());
	if (!pool)
		return -ENOMEM;
	size_t page = params.page_size;
	if (page != kPage4K) {
		size_t wanted = (params.size + page - 1) / page;
		size_t free_pages = params.numa_node >= 0
					    ? hugepages_free_on_node(page, params.numa_node)
					    : hugepages_free(page);
		if (free_pages < wanted) {
			if (!params.allow_fallback) {
				NICMR_LOG(
					error, kLog,
					"pool %s (no fallback allowed): %s; or allow the fallback "
					"to 4 KiB pages",
					params.name.c_str(), shortage(params, page).c_str());
				return -ENOMEM;
			}
			NICMR_LOG(warn, kLog, "pool %s: using 4 KiB pages: %s", params.name.c_str(),
				  shortage(params, page).c_str());
			page = kPage4K;
		}
	}
	MapStep step = MapStep::other;
	int rc = pool->map(params, page, &step);
	/* Only a failed reservation or population means missing hugepages: another process
	 * took them between the count and the mmap. */
	const bool short_of_pages = rc == -ENOMEM && page != kPage4K &&
				    (step == MapStep::reserve || step == MapStep::populate);
	if (short_of_pages && params.allow_fallback) {
		NICMR_LOG(warn, kLog, "pool %s: using 4 KiB pages: %s", params.name.c_str(),
			  shortage(params, page).c_str());
		rc = pool->map(params, kPage4K, &step);
	} else if (short_of_pages) {
		NICMR_LOG(error, kLog, "pool %s: %s; or allow the fallback to 4 KiB pages",
			  params.name.c_str(), shortage(params, page).c_str());
	}
	if (rc != 0)
		return rc;
	NICMR_LOG(info, kLog, "pool %s: %zu bytes on %zu %s pages at %p, fd %d",
		  pool->name_.c_str(), pool->size_, pool->page_count(), size_name(pool->page_size_),
		  pool->va_, pool->fd_);
	*out = std::move(pool);
	return 0;
}

int Pool::import(void *va, size_t len, size_t page_size, int fd, std::string name,
		 std::unique_ptr<Pool> *out)
{
	if (out == nullptr || va == nullptr || len == 0 || !valid_page_size(page_size) ||
	    reinterpret_cast<uintptr_t>(va) % page_size != 0 || len % page_size != 0) {
		NICMR_LOG(error, kLog, "import %s: bad memory %p + %zu on %zu-byte pages",
			  name.c_str(), va, len, page_size);
		return -EINVAL;
	}
	std::unique_ptr<Pool> pool(new (std::nothrow) Pool());
	if (!pool)
		return -ENOMEM;
	pool->va_ = va;
	pool->size_ = len;
	pool->page_size_ = page_size;
	pool->fd_ = fd;
	pool->numa_node_ = -1;
	pool->backend_ = PoolBackend::external;
	pool->name_ = std::move(name);
	pool->owned_ = false;
	*out = std::move(pool);
	return 0;
}

Pool::~Pool()
{
	if (!owned_)
		return;
	if (va_ != nullptr)
		munmap(va_, size_);
	if (fd_ >= 0)
		close(fd_);
}

int Pool::physical_addresses(uint64_t *pa, size_t count) const
{
	if (pa == nullptr || count < page_count())
		return -EINVAL;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int rc = -errno;
		NICMR_LOG(error, kLog, "pool %s: /proc/self/pagemap: %s", name_.c_str(),
			  std::strerror(errno));
		return rc;
	}
	int rc = 0;
	const uintptr_t base = reinterpret_cast<uintptr_t>(va_);
	for (size_t i = 0; i < page_count(); i++) {
		uint64_t entry = 0;
		off_t off = static_cast<off_t>((base + i * page_size_) / kPage4K * sizeof(entry));
		if (pread(fd, &entry, sizeof(entry), off) != sizeof(entry)) {
			rc = errno ? -errno : -EIO;
			break;
		}
		/* Bit 63: present; bits 0..54: the frame number (zero without CAP_SYS_ADMIN). */
		if (!(entry >> 63)) {
			NICMR_LOG(error, kLog, "pool %s: page %zu not present", name_.c_str(), i);
			rc = -EFAULT;
			break;
		}
		uint64_t pfn = entry & ((uint64_t{1} << 55) - 1);
		if (pfn == 0) {
			NICMR_LOG(error, kLog,
				  "pool %s: /proc/self/pagemap shows frame 0: physical addresses "
				  "need root (CAP_SYS_ADMIN)",
				  name_.c_str());
			rc = -EPERM;
			break;
		}
		pa[i] = pfn * kPage4K;
	}
	close(fd);
	return rc;
}

} // namespace nicmr::mem
