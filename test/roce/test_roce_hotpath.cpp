/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * roce::build() and roce::parse() are hot paths: no lock, no allocation. Checked from outside:
 * the calling thread's pthread lock calls are counted (test/support/lock_count.h), and this
 * program defines malloc, calloc and realloc itself, counting the calling thread's calls before
 * forwarding to glibc's __libc_* entry points, so C code (zlib) is counted as well as C++'s
 * operator new (which ends in malloc). Built only without sanitizers, whose runtimes intercept
 * the same functions.
 */
#include <arpa/inet.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

#include "lock_count.h"
#include "roce_packet.h"

extern "C" {
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
}

namespace {
thread_local bool t_counting = false;
thread_local uint64_t t_allocs = 0;

void count()
{
	if (t_counting)
		t_allocs++;
}

/* Counts this thread's allocations while it lives. */
class AllocCounting {
public:
	AllocCounting()
	{
		t_allocs = 0;
		t_counting = true;
	}
	~AllocCounting() { t_counting = false; }
	uint64_t allocs() const { return t_allocs; }
};
} // namespace

extern "C" void *malloc(size_t n)
{
	count();
	return __libc_malloc(n);
}
extern "C" void *calloc(size_t n, size_t size)
{
	count();
	return __libc_calloc(n, size);
}
extern "C" void *realloc(void *p, size_t n)
{
	count();
	return __libc_realloc(p, n);
}

namespace roce = nicmr::roce;

TEST(RoceHotPath, CountersSeeLocksAndAllocations)
{
	/* A test that cannot fail proves nothing: the counters count. */
	std::mutex m;
	nicmr::test::LockCounting locks;
	AllocCounting allocs;
	m.lock();
	m.unlock();
	auto *v = new std::vector<uint8_t>(100);
	void *c = std::malloc(10);
	EXPECT_GE(locks.locks(), 1u);
	EXPECT_GE(allocs.allocs(), 3u);
	std::free(c);
	delete v;
}

TEST(RoceHotPath, BuildAndParseTakeNoLockAndAllocateNothing)
{
	in_addr s{}, d{};
	inet_pton(AF_INET, "192.0.2.1", &s);
	inet_pton(AF_INET, "192.0.2.2", &d);
	const roce::IpPath path = roce::ipv4_path(s, d, 49152);
	std::vector<uint8_t> payload(roce::max_payload, 0x5a);
	std::vector<uint8_t> out(roce::max_datagram);

	nicmr::test::LockCounting locks;
	AllocCounting allocs;
	for (size_t len : {size_t{0}, size_t{64}, size_t{300}, roce::max_payload}) {
		roce::Headers h;
		h.opcode = roce::opcode::write_only;
		size_t n = 0;
		ASSERT_EQ(roce::build(path, h, {payload.data(), len}, out, &n), roce::Error::ok);
		roce::Parsed p;
		ASSERT_EQ(roce::parse(path, {out.data(), n}, &p), roce::Error::ok);
		out[n - 1] ^= 1;
		ASSERT_EQ(roce::parse(path, {out.data(), n}, &p), roce::Error::bad_icrc);
	}
	EXPECT_EQ(locks.locks(), 0u);
	EXPECT_EQ(allocs.allocs(), 0u);
}
