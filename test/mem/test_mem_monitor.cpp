/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UnmapMonitor: the ranges its subscribers hear of (munmap, mremap, MADV_DONTNEED), the order
 * promised by wait_idle(), and every error of subscribe() and watch().
 */
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mem_monitor.h"

using nicmr::mem::UnmapMonitor;

namespace {

constexpr size_t kPg = 4096;

struct Recorder final : UnmapMonitor::Subscriber {
	std::mutex mu;
	std::vector<std::pair<uintptr_t, uintptr_t>> got;
	void invalidate(uintptr_t start, uintptr_t end) noexcept override
	{
		std::lock_guard lk(mu);
		got.emplace_back(start, end);
	}
	bool has(uintptr_t start, uintptr_t end)
	{
		std::lock_guard lk(mu);
		for (const auto &r : got)
			if (r.first == start && r.second == end)
				return true;
		return false;
	}
};

char *anon(size_t len)
{
	void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return nullptr;
	std::memset(p, 1, len);
	return static_cast<char *>(p);
}

uintptr_t u(const void *p)
{
	return reinterpret_cast<uintptr_t>(p);
}

class Monitor : public ::testing::Test {
protected:
	void SetUp() override { ASSERT_EQ(UnmapMonitor::subscribe(&rec, &mon), 0); }
	void TearDown() override
	{
		if (mon)
			mon->unsubscribe(&rec);
	}
	Recorder rec;
	std::shared_ptr<UnmapMonitor> mon;
};

TEST(MonitorArgs, SubscribeNullIsEinval)
{
	Recorder r;
	std::shared_ptr<UnmapMonitor> m;
	EXPECT_EQ(UnmapMonitor::subscribe(nullptr, &m), -EINVAL);
	EXPECT_EQ(UnmapMonitor::subscribe(&r, nullptr), -EINVAL);
	EXPECT_EQ(m, nullptr);
}

/* After the unmapping call returns and wait_idle() returns, the subscriber has heard of it. */
TEST_F(Monitor, UnmapIsDeliveredBeforeWaitIdleReturns)
{
	char *p = anon(4 * kPg);
	ASSERT_NE(p, nullptr);
	ASSERT_EQ(mon->watch(u(p), 4 * kPg), 0);
	const uint64_t before = mon->events();
	ASSERT_EQ(munmap(p + kPg, 2 * kPg), 0);
	mon->wait_idle();
	EXPECT_TRUE(rec.has(u(p) + kPg, u(p) + 3 * kPg));
	EXPECT_EQ(mon->events(), before + 1);
	ASSERT_EQ(munmap(p, kPg), 0);
	ASSERT_EQ(munmap(p + 3 * kPg, kPg), 0);
	mon->wait_idle();
	EXPECT_TRUE(rec.has(u(p), u(p) + kPg));
	EXPECT_TRUE(rec.has(u(p) + 3 * kPg, u(p) + 4 * kPg));
}

TEST_F(Monitor, RemapAndDontneedAreDelivered)
{
	char *p = anon(2 * kPg);
	char *dst = anon(2 * kPg);
	ASSERT_NE(p, nullptr);
	ASSERT_NE(dst, nullptr);
	ASSERT_EQ(mon->watch(u(p), 2 * kPg), 0);
	ASSERT_EQ(madvise(p, kPg, MADV_DONTNEED), 0);
	mon->wait_idle();
	EXPECT_TRUE(rec.has(u(p), u(p) + kPg));
	ASSERT_EQ(mremap(p, 2 * kPg, 2 * kPg, MREMAP_MAYMOVE | MREMAP_FIXED, dst), dst);
	mon->wait_idle();
	EXPECT_TRUE(rec.has(u(p), u(p) + 2 * kPg));
	ASSERT_EQ(munmap(dst, 2 * kPg), 0);
}

/* An unwatched range tells nobody; an unsubscribed subscriber hears nothing more. */
TEST_F(Monitor, OnlyWatchedRangesAndSubscribersHear)
{
	char *p = anon(kPg);
	ASSERT_NE(p, nullptr);
	ASSERT_EQ(munmap(p, kPg), 0);
	mon->wait_idle();
	EXPECT_FALSE(rec.has(u(p), u(p) + kPg));
	char *q = anon(kPg);
	ASSERT_NE(q, nullptr);
	ASSERT_EQ(mon->watch(u(q), kPg), 0);
	mon->unsubscribe(&rec);
	ASSERT_EQ(munmap(q, kPg), 0);
	mon->wait_idle();
	EXPECT_FALSE(rec.has(u(q), u(q) + kPg));
}

TEST_F(Monitor, WatchErrors)
{
	char *p = anon(2 * kPg);
	ASSERT_NE(p, nullptr);
	EXPECT_EQ(mon->watch(u(p), 0), -EINVAL);
	/* A hole: nothing mapped there. */
	char *hole = anon(kPg);
	ASSERT_NE(hole, nullptr);
	ASSERT_EQ(munmap(hole, kPg), 0);
	EXPECT_EQ(mon->watch(u(hole), kPg), -EINVAL);
	/* A regular file's pages (not shmem, not hugetlbfs). */
	char path[] = "./nicmr-monitor-XXXXXX";
	const int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	unlink(path);
	ASSERT_EQ(ftruncate(fd, kPg), 0);
	void *f = mmap(nullptr, kPg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_NE(f, MAP_FAILED);
	EXPECT_EQ(mon->watch(u(f), kPg), -EINVAL);
	munmap(f, kPg);
	close(fd);
	/* Another userfaultfd watches the range already. */
	const int other = int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
	ASSERT_GE(other, 0);
	uffdio_api api{};
	api.api = UFFD_API;
	ASSERT_EQ(ioctl(other, UFFDIO_API, &api), 0);
	uffdio_register r{};
	r.range.start = u(p) + kPg;
	r.range.len = kPg;
	r.mode = UFFDIO_REGISTER_MODE_MISSING;
	ASSERT_EQ(ioctl(other, UFFDIO_REGISTER, &r), 0);
	EXPECT_EQ(mon->watch(u(p), 2 * kPg), -EBUSY);
	close(other);
	ASSERT_EQ(munmap(p, 2 * kPg), 0);
}

} // namespace
