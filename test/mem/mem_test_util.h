/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers shared by the lib/mem tests. */
#ifndef NICMR_MEM_TEST_UTIL_H
#define NICMR_MEM_TEST_UTIL_H

#include <cstdlib>
#include <cstring>
#include <sys/mman.h>

#include <gtest/gtest.h>

#include "mem_pool.h"

namespace nicmr::mem::test {

/* CI reserves hugepages and sets NICMR_REQUIRE_HUGEPAGES=1: then missing pages are a failure. */
inline bool hugepages_required()
{
	const char *e = std::getenv("NICMR_REQUIRE_HUGEPAGES");
	return e != nullptr && std::strcmp(e, "1") == 0;
}

/* Anonymous 4 KiB memory for imported pools: no hugepage needed. */
class AnonMemory {
public:
	explicit AnonMemory(size_t len) : len_(len)
	{
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		va_ = p == MAP_FAILED ? nullptr : p;
	}
	~AnonMemory()
	{
		if (va_ != nullptr)
			munmap(va_, len_);
	}
	AnonMemory(const AnonMemory &) = delete;
	AnonMemory &operator=(const AnonMemory &) = delete;
	char *va() const { return static_cast<char *>(va_); }
	size_t len() const { return len_; }

private:
	void *va_;
	size_t len_;
};

} // namespace nicmr::mem::test

/* Skips (or, under NICMR_REQUIRE_HUGEPAGES=1, fails) unless n pages of page_size are free. */
#define NICMR_NEED_HUGEPAGES(page_size, n)                                                         \
	do {                                                                                       \
		size_t free_ = ::nicmr::mem::hugepages_free(page_size);                            \
		if (free_ < (n)) {                                                                 \
			if (::nicmr::mem::test::hugepages_required())                              \
				FAIL() << "need " << (n) << " free hugepages of " << (page_size)   \
				       << " bytes, " << free_                                      \
				       << " free (NICMR_REQUIRE_HUGEPAGES=1)";                     \
			GTEST_SKIP()                                                               \
				<< "need " << (n) << " free hugepages of " << (page_size)          \
				<< " bytes, " << free_                                             \
				<< " free; reserve them with echo N > "                            \
				   "/proc/sys/vm/nr_hugepages (2 MiB) or "                         \
				   "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages";    \
		}                                                                                  \
	} while (0)

#endif
