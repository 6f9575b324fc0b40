/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What bench-fi-mr's two parts share: anonymous buffers that are mapped before any
 * registration, and libfabric error codes in words.
 */
#ifndef NICMR_BENCH_FI_BENCH_UTIL_H
#define NICMR_BENCH_FI_BENCH_UTIL_H

#include <rdma/fi_errno.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace nicmr::bench {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;

/* Anonymous memory, 2 MiB-aligned and touched (mapped before any registration). p is null when
 * the mapping failed. */
struct MmapBuf {
	char *raw = nullptr;
	char *p = nullptr;
	size_t raw_len = 0;
	explicit MmapBuf(size_t len)
	{
		raw_len = len + 2 * kMiB;
		void *m = mmap(nullptr, raw_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return;
		raw = static_cast<char *>(m);
		uintptr_t a = (reinterpret_cast<uintptr_t>(raw) + 2 * kMiB - 1) & ~(2 * kMiB - 1);
		p = reinterpret_cast<char *>(a);
		std::memset(p, 0x5a, len);
	}
	~MmapBuf()
	{
		if (raw)
			munmap(raw, raw_len);
	}
	MmapBuf(const MmapBuf &) = delete;
	MmapBuf &operator=(const MmapBuf &) = delete;
};

/* "Resource temporarily unavailable (-11)". */
inline std::string fi_err(int ret)
{
	return std::string(fi_strerror(-ret)) + " (" + std::to_string(ret) + ")";
}

} // namespace nicmr::bench

#endif
