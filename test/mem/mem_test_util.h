/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers shared by the lib/mem tests. */
#ifndef NICMR_MEM_TEST_UTIL_H
#define NICMR_MEM_TEST_UTIL_H

#include <sys/mman.h>

#include <gtest/gtest.h>

#include "hugepage_need.h" /* NICMR_NEED_HUGEPAGES */
#include "mem_pool.h"

namespace nicmr::mem::test {

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

#endif
