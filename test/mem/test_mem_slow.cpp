/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SlowMaps: slow-path mappings of memory outside every pool. Each error with its exact code,
 * and after each failure nothing left behind: no pin, no IOVA range, no DMA mapping, no locked
 * page.
 */
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <gtest/gtest.h>

#include "mem_slow.h"
#include "mem_space.h"
#include "mem_test_mapper.h"
#include "mem_test_util.h"

using namespace nicmr::mem;
using nicmr::mem::test::AnonMemory;
using nicmr::mem::test::RecordingMapper;

namespace {

constexpr size_t kP = 4096;

/* The process's locked memory in KiB (VmLck of /proc/self/status), or -1. */
long locked_kib()
{
	FILE *f = std::fopen("/proc/self/status", "re");
	if (f == nullptr)
		return -1;
	char line[256];
	long kib = -1;
	while (std::fgets(line, sizeof(line), f) != nullptr)
		if (std::sscanf(line, "VmLck: %ld kB", &kib) == 1)
			break;
	std::fclose(f);
	return kib;
}

/* Drops CAP_IPC_LOCK from the calling process (a forked child): mlock then obeys
 * RLIMIT_MEMLOCK, as for an unprivileged user (mlock(2), "EPERM", "ENOMEM"). */
bool drop_ipc_lock()
{
	__user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct d[2] = {};
	if (syscall(SYS_capget, &h, d) != 0)
		return false;
	d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	d[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
	return syscall(SYS_capset, &h, d) == 0;
}

uintptr_t addr(const AnonMemory &m, size_t off = 0)
{
	return reinterpret_cast<uintptr_t>(m.va()) + off;
}

/* A DmaSpace over a recording mapper, and its SlowMaps. */
struct Rig {
	explicit Rig(std::vector<IovaRange> ranges = {{0x100000, (uint64_t{1} << 48) - 1}})
	    : mapper(std::move(ranges)), space(mapper)
	{}
	int open() { return SlowMaps::create(space, "test", &slow); }
	/* Nothing of a mapping left: the state of a SlowMaps that holds none. */
	void expect_empty() const
	{
		EXPECT_EQ(slow->mappings(), 0u);
		EXPECT_EQ(slow->pinned_pages(), 0u);
		EXPECT_EQ(slow->iova_bytes(), 0u);
		EXPECT_EQ(mapper.live_mappings(), 0u);
	}
	RecordingMapper mapper;
	DmaSpace space;
	std::unique_ptr<SlowMaps> slow;
};

} // namespace

TEST(SlowMapsWindow, TopQuarterOfTheHighestRangeFrom2MiB)
{
	const IovaRange w =
		SlowMaps::window({{0x1000, 0xfffff}, {0x100000, (uint64_t{1} << 40) - 1}});
	const uint64_t span = (uint64_t{1} << 40) - 1 - 0x100000;
	const uint64_t start = (0x100000 + span / 4 * 3 + kPage2M - 1) & ~uint64_t(kPage2M - 1);
	EXPECT_EQ(w.start, start);
	EXPECT_EQ(w.start % kPage2M, 0u);
	EXPECT_EQ(w.last, (uint64_t{1} << 40) - 1);
}

TEST(SlowMapsWindow, SmallRangeIsTakenWhole)
{
	/* 64 KiB: the 2 MiB boundary above its last quarter lies outside it. */
	const IovaRange w = SlowMaps::window({{0x10000, 0x1ffff}});
	EXPECT_EQ(w.start, 0x10000u);
	EXPECT_EQ(w.last, 0x1ffffu);
}

TEST(SlowMapsWindow, NoRangesIsEmpty)
{
	const IovaRange w = SlowMaps::window({});
	EXPECT_GT(w.start, w.last);
}

TEST(SlowMaps, CreateWithoutIovaRangesIsENOSPC)
{
	Rig r(std::vector<IovaRange>{});
	EXPECT_EQ(r.open(), -ENOSPC);
	EXPECT_EQ(r.slow, nullptr);
}

TEST(SlowMaps, MapPinsPlacesAndMapsThenUnmapUndoesAll)
{
	Rig r;
	ASSERT_EQ(r.open(), 0);
	AnonMemory mem(8 * kP);
	ASSERT_NE(mem.va(), nullptr);
	const long lck0 = locked_kib();
	std::unique_ptr<SlowMap> m;
	ASSERT_EQ(r.slow->map(addr(mem, 100), 3 * kP, true, &m), 0);
	ASSERT_NE(m, nullptr);
	EXPECT_EQ(m->va, addr(mem));
	EXPECT_EQ(m->len, 4 * kP) << "100 + 12288 bytes span 4 pages";
	EXPECT_EQ(m->iova % m->align, m->va % m->align);
	EXPECT_GE(m->iova, r.slow->window().start);
	EXPECT_LE(m->iova + m->len - 1, r.slow->window().last);
	EXPECT_EQ(r.slow->mappings(), 1u);
	EXPECT_EQ(r.slow->pinned_pages(), 4u);
	EXPECT_EQ(r.slow->iova_bytes(), 4 * kP);
	EXPECT_EQ(r.mapper.live_mappings(), 1u);
	if (lck0 >= 0) {
		EXPECT_EQ(locked_kib(), lck0 + 16);
	}
	r.slow->unmap(std::move(m));
	r.expect_empty();
	EXPECT_EQ(r.mapper.count(false), 1u);
	if (lck0 >= 0) {
		EXPECT_EQ(locked_kib(), lck0);
	}
}

TEST(SlowMaps, EmptyOrWrappingRangeIsEINVAL)
{
	Rig r;
	ASSERT_EQ(r.open(), 0);
	AnonMemory mem(kP);
	std::unique_ptr<SlowMap> m;
	EXPECT_EQ(r.slow->map(addr(mem, 100), 0, false, &m), -EINVAL);
	EXPECT_EQ(r.slow->map(UINTPTR_MAX - kP + 1, 2 * kP, false, &m), -EINVAL);
	EXPECT_EQ(m, nullptr);
	r.expect_empty();
	EXPECT_TRUE(r.mapper.calls().empty());
}

TEST(SlowMaps, UnmappedMemoryIsEFAULTAndLeavesNothing)
{
	Rig r;
	ASSERT_EQ(r.open(), 0);
	AnonMemory mem(4 * kP);
	ASSERT_EQ(munmap(mem.va() + 2 * kP, kP), 0); /* a hole at page 2 */
	const long lck0 = locked_kib();
	std::unique_ptr<SlowMap> m;
	EXPECT_EQ(r.slow->map(addr(mem), 4 * kP, false, &m), -EFAULT);
	EXPECT_EQ(m, nullptr);
	r.expect_empty();
	EXPECT_TRUE(r.mapper.calls().empty());
	EXPECT_EQ(locked_kib(), lck0);
	/* Re-map the hole so the AnonMemory's munmap finds what it made. */
	ASSERT_NE(mmap(mem.va() + 2 * kP, kP, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		  MAP_FAILED);
}

TEST(SlowMaps, ReadOnlyMemoryIsEFAULTForDeviceWritesOnly)
{
	Rig r;
	ASSERT_EQ(r.open(), 0);
	AnonMemory mem(2 * kP);
	ASSERT_EQ(mprotect(mem.va(), 2 * kP, PROT_READ), 0);
	std::unique_ptr<SlowMap> m;
	EXPECT_EQ(r.slow->map(addr(mem), 2 * kP, true, &m), -EFAULT);
	EXPECT_EQ(m, nullptr);
	r.expect_empty();
	EXPECT_TRUE(r.mapper.calls().empty());
	ASSERT_EQ(r.slow->map(addr(mem), 2 * kP, false, &m), 0) << "the device only reads it";
	EXPECT_EQ(r.slow->pinned_pages(), 2u);
	r.slow->unmap(std::move(m));
	r.expect_empty();
}

TEST(SlowMaps, FullWindowIsENOSPCAndLeavesNothing)
{
	/* 16 MiB of IOVA: the window is its top 4 MiB. */
	Rig r({{0x1000000, 0x1ffffff}});
	ASSERT_EQ(r.open(), 0);
	const IovaRange w = r.slow->window();
	ASSERT_EQ(w.last - w.start + 1, size_t{4} << 20);
	AnonMemory mem(size_t{5} << 20);
	ASSERT_NE(mem.va(), nullptr);
	const long lck0 = locked_kib();
	std::unique_ptr<SlowMap> m;
	EXPECT_EQ(r.slow->map(addr(mem), mem.len(), false, &m), -ENOSPC);
	EXPECT_EQ(m, nullptr);
	r.expect_empty();
	EXPECT_EQ(r.slow->pins_of(addr(mem)), 0u);
	EXPECT_TRUE(r.mapper.calls().empty());
	EXPECT_EQ(locked_kib(), lck0);
}

TEST(SlowMaps, MapperErrorIsReturnedAndLeavesNothing)
{
	Rig r;
	ASSERT_EQ(r.open(), 0);
	AnonMemory mem(3 * kP);
	const long lck0 = locked_kib();
	r.mapper.fail_next_maps(1, -EEXIST);
	std::unique_ptr<SlowMap> m;
	EXPECT_EQ(r.slow->map(addr(mem), 3 * kP, true, &m), -EEXIST);
	EXPECT_EQ(m, nullptr);
	r.expect_empty();
	EXPECT_EQ(r.mapper.count(true, -EEXIST), 1u);
	EXPECT_EQ(locked_kib(), lck0);
	/* The IOVA range went back: the same mapping placed again gets the same IOVA. */
	const uint64_t failed_iova = r.mapper.calls().back().iova;
	ASSERT_EQ(r.slow->map(addr(mem), 3 * kP, true, &m), 0);
	EXPECT_EQ(m->iova, failed_iova);
	r.slow->unmap(std::move(m));
	r.expect_empty();
}

TEST(SlowMaps, OverlappingMapsShareThePinOfTheirCommonPage)
{
	Rig r;
	ASSERT_EQ(r.open(), 0);
	AnonMemory mem(4 * kP);
	const long lck0 = locked_kib();
	std::unique_ptr<SlowMap> a, b;
	ASSERT_EQ(r.slow->map(addr(mem), 2 * kP, false, &a), 0);     /* pages 0, 1 */
	ASSERT_EQ(r.slow->map(addr(mem, kP), 3 * kP, false, &b), 0); /* pages 1, 2, 3 */
	EXPECT_NE(a->iova, b->iova) << "each mapping has its own IOVA";
	EXPECT_EQ(r.slow->pins_of(addr(mem, kP)), 2u);
	EXPECT_EQ(r.slow->pinned_pages(), 4u);
	r.slow->unmap(std::move(a));
	EXPECT_EQ(r.slow->pins_of(addr(mem)), 0u);
	EXPECT_EQ(r.slow->pins_of(addr(mem, kP)), 1u) << "page 1 stays pinned for b";
	EXPECT_EQ(r.slow->pinned_pages(), 3u);
	if (lck0 >= 0) {
		EXPECT_EQ(locked_kib(), lck0 + 12) << "page 1 is still locked";
	}
	r.slow->unmap(std::move(b));
	r.expect_empty();
	EXPECT_EQ(locked_kib(), lck0);
}

TEST(SlowMaps, PagesOfAPoolAreNotPinned)
{
	Rig r;
	ASSERT_EQ(r.open(), 0);
	AnonMemory mem(4 * kP);
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::import(mem.va() + kP, 2 * kP, kPage4K, -1, "pool", &pool), 0);
	ASSERT_EQ(r.space.add_pool(std::move(pool), nullptr), 0);
	std::unique_ptr<SlowMap> m;
	ASSERT_EQ(r.slow->map(addr(mem), 4 * kP, false, &m), 0);
	EXPECT_EQ(r.slow->pinned_pages(), 2u) << "pages 1 and 2 are the pool's";
	EXPECT_EQ(r.slow->pins_of(addr(mem)), 1u);
	EXPECT_EQ(r.slow->pins_of(addr(mem, kP)), 0u);
	EXPECT_EQ(r.slow->pins_of(addr(mem, 3 * kP)), 1u);
	ASSERT_EQ(m->pinned.size(), 2u);
	EXPECT_EQ(m->len, 4 * kP) << "the mapping covers the pool's pages all the same";
	r.slow->unmap(std::move(m));
	EXPECT_EQ(r.slow->mappings(), 0u);
	EXPECT_EQ(r.slow->pinned_pages(), 0u);
	EXPECT_EQ(r.slow->iova_bytes(), 0u);
	EXPECT_EQ(r.mapper.live_mappings(), 1u) << "the pool's own mapping";
}

/*
 * mlock refused: RLIMIT_MEMLOCK without CAP_IPC_LOCK, in a forked child (the limit and the
 * capability are the process's). Over the limit is -ENOMEM, a limit of 0 is -EPERM (mlock(2));
 * either way nothing stays pinned, placed, mapped or locked. The child reports the first check
 * that failed as its exit status.
 */
TEST(SlowMaps, MlockRefusedIsItsErrnoAndLeavesNothing)
{
	Rig r;
	ASSERT_EQ(r.open(), 0);
	AnonMemory mem(3 * kP);
	ASSERT_NE(mem.va(), nullptr);
	const pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		if (!drop_ipc_lock())
			_exit(10);
		const long lck0 = locked_kib();
		/* Room for one more page: a mapping of three is over the limit. */
		const rlim_t room = rlim_t(lck0) * 1024 + kP;
		rlimit lim{room, room};
		if (lck0 < 0 || setrlimit(RLIMIT_MEMLOCK, &lim) != 0)
			_exit(11);
		std::unique_ptr<SlowMap> m;
		if (r.slow->map(addr(mem), 3 * kP, false, &m) != -ENOMEM)
			_exit(12);
		if (m != nullptr || r.slow->mappings() != 0 || r.slow->pinned_pages() != 0 ||
		    r.slow->iova_bytes() != 0 || r.mapper.live_mappings() != 0 ||
		    !r.mapper.calls().empty() || locked_kib() != lck0)
			_exit(13);
		/* One page fits, and is given back whole. */
		if (r.slow->map(addr(mem), kP, false, &m) != 0 || locked_kib() != lck0 + 4)
			_exit(14);
		r.slow->unmap(std::move(m));
		if (r.slow->pinned_pages() != 0 || locked_kib() != lck0)
			_exit(15);
		lim = {0, 0};
		if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0)
			_exit(16);
		if (r.slow->map(addr(mem), kP, false, &m) != -EPERM)
			_exit(17);
		if (r.slow->pinned_pages() != 0 || r.slow->iova_bytes() != 0 ||
		    r.mapper.live_mappings() != 0)
			_exit(18);
		_exit(0);
	}
	int status = 0;
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), 0)
		<< "10: capset, 11: setrlimit, 12: not -ENOMEM over the limit, 13: something left "
		   "after it, 14: one page within the limit, 15: its unmap, 16: setrlimit 0, 17: "
		   "not "
		   "-EPERM at limit 0, 18: something left after it";
}
