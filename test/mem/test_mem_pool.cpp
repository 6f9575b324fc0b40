/* SPDX-License-Identifier: BSD-3-Clause */
/* Pools: hugepages, fallback, NUMA, the fd, physical addresses, and that nothing leaks. */
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <regex>
#include <sched.h>
#include <set>
#include <sstream>
#include <string>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "mem_describe.h"
#include "mem_pool.h"
#include "mem_test_util.h"
#include "nicmr_config.h"
#include "nicmr_log.h"

#if NICMR_HAVE_NUMA
#include <numaif.h>
#endif

using namespace nicmr::mem;

namespace {

PoolParams params_of(size_t size, size_t page_size)
{
	PoolParams p;
	p.size = size;
	p.page_size = page_size;
	p.name = "test";
	return p;
}

bool all_resident(const void *va, size_t len)
{
	std::vector<unsigned char> vec(len / 4096);
	if (mincore(const_cast<void *>(va), len, vec.data()) != 0)
		return false;
	for (unsigned char c : vec)
		if (!(c & 1))
			return false;
	return true;
}

/* "Locked:" of the smaps entry that starts at va, in bytes; -1 when there is none. */
long locked_bytes(const void *va)
{
	std::ifstream smaps("/proc/self/smaps");
	char start[32];
	std::snprintf(start, sizeof(start), "%lx-", reinterpret_cast<unsigned long>(va));
	std::string line;
	bool in = false;
	while (std::getline(smaps, line)) {
		if (line.rfind(start, 0) == 0)
			in = true;
		else if (in && line.rfind("Locked:", 0) == 0)
			return std::stol(line.substr(7)) * 1024;
	}
	return -1;
}

/* HugePages_Free of /proc/meminfo: the default hugepage size's free count. */
long meminfo_hugepages_free()
{
	std::ifstream meminfo("/proc/meminfo");
	std::string line;
	while (std::getline(meminfo, line))
		if (line.rfind("HugePages_Free:", 0) == 0)
			return std::stol(line.substr(15));
	return -1;
}

/* Pages of 2 MiB the kernel has at all: asking for one more can never be met, whatever
 * other processes take or return meanwhile. */
size_t hugepages_total_2m()
{
	std::ifstream nr("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
	size_t n = 0;
	nr >> n;
	return n;
}

/*
 * HugePages free count around f. Other processes on the machine may take or return pages at
 * the same time, so a mismatch is retried a few times: a real leak mismatches every time.
 */
template <class F> void expect_no_hugepage_leak(size_t page_size, F f)
{
	size_t before = 0, after = 0;
	long meminfo_before = 0, meminfo_after = 0;
	for (int attempt = 0; attempt < 5; attempt++) {
		before = hugepages_free(page_size);
		meminfo_before = meminfo_hugepages_free();
		f();
		after = hugepages_free(page_size);
		meminfo_after = meminfo_hugepages_free();
		if (before == after && meminfo_before == meminfo_after)
			return;
	}
	ADD_FAILURE() << "free hugepages before " << before << ", after " << after
		      << "; HugePages_Free before " << meminfo_before << ", after "
		      << meminfo_after;
}

} // namespace

TEST(MemPool, RejectsSizeZero)
{
	std::unique_ptr<Pool> pool;
	EXPECT_EQ(Pool::create(params_of(0, kPage4K), &pool), -EINVAL);
	EXPECT_EQ(pool, nullptr);
}

TEST(MemPool, RejectsUnknownPageSize)
{
	std::unique_ptr<Pool> pool;
	for (size_t ps : {size_t{0}, size_t{8192}, size_t{1} << 16, kPage2M * 2, kPage1G * 2})
		EXPECT_EQ(Pool::create(params_of(kPage2M, ps), &pool), -EINVAL) << ps;
	EXPECT_EQ(pool, nullptr);
}

TEST(MemPool, RejectsNumaNodeOutOfRange)
{
	std::unique_ptr<Pool> pool;
	PoolParams p = params_of(kPage4K, kPage4K);
	p.numa_node = numa_max_node_id() + 1;
	EXPECT_EQ(Pool::create(p, &pool), -EINVAL);
	p.numa_node = -2;
	EXPECT_EQ(Pool::create(p, &pool), -EINVAL);
	p.numa_node = 1 << 20;
	EXPECT_EQ(Pool::create(p, &pool), -EINVAL);
	EXPECT_EQ(pool, nullptr);
}

TEST(MemPool, RejectsExternalBackendInCreate)
{
	std::unique_ptr<Pool> pool;
	PoolParams p = params_of(kPage4K, kPage4K);
	p.backend = PoolBackend::external;
	EXPECT_EQ(Pool::create(p, &pool), -EINVAL);
}

TEST(MemPool, FourKPoolIsPopulatedLockedAndRoundedUp)
{
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(params_of(10000, kPage4K), &pool), 0);
	EXPECT_EQ(pool->size(), 3 * kPage4K);
	EXPECT_EQ(pool->page_count(), 3u);
	EXPECT_EQ(pool->page_size(), kPage4K);
	EXPECT_EQ(pool->backend(), PoolBackend::memfd);
	EXPECT_TRUE(all_resident(pool->va(), pool->size()));
	EXPECT_EQ(locked_bytes(pool->va()), static_cast<long>(pool->size()));
	EXPECT_TRUE(pool->contains(pool->va(), pool->size()));
	EXPECT_FALSE(pool->contains(static_cast<char *>(pool->va()) + 1, pool->size()));
}

TEST(MemPool, TwoMegPoolTakesHugepagesAndReturnsThemOnDestroy)
{
	NICMR_NEED_HUGEPAGES(kPage2M, 4);
	expect_no_hugepage_leak(kPage2M, [] {
		size_t before = hugepages_free(kPage2M);
		std::unique_ptr<Pool> pool;
		ASSERT_EQ(Pool::create(params_of(3 * kPage2M + 1, kPage2M), &pool), 0);
		EXPECT_EQ(pool->page_size(), kPage2M);
		EXPECT_EQ(pool->page_count(), 4u);
		EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->va()) % kPage2M, 0u);
		/* Populated at creation: the pages are taken now, not at first touch. */
		EXPECT_LE(hugepages_free(kPage2M), before - 4);
		std::memset(pool->va(), 0x5a, pool->size());
	});
}

TEST(MemPool, OneGigPoolWhenAOneGigPageIsFree)
{
	NICMR_NEED_HUGEPAGES(kPage1G, 1);
	expect_no_hugepage_leak(kPage1G, [] {
		std::unique_ptr<Pool> pool;
		ASSERT_EQ(Pool::create(params_of(kPage1G, kPage1G), &pool), 0);
		EXPECT_EQ(pool->page_size(), kPage1G);
		EXPECT_EQ(pool->page_count(), 1u);
		EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->va()) % kPage1G, 0u);
		static_cast<char *>(pool->va())[kPage1G - 1] = 1;
	});
}

TEST(MemPool, FailsWithWantedAndFreeWhenFallbackIsNotAllowed)
{
	size_t wanted = hugepages_total_2m() + 1; /* more than are free: "no free pages" */
	nicmr::set_log_level(nicmr::LogLevel::warn);
	expect_no_hugepage_leak(kPage2M, [&] {
		std::unique_ptr<Pool> pool;
		testing::internal::CaptureStderr();
		int rc = Pool::create(params_of(wanted * kPage2M, kPage2M), &pool);
		std::string log = testing::internal::GetCapturedStderr();
		EXPECT_EQ(rc, -ENOMEM);
		EXPECT_EQ(pool, nullptr);
		EXPECT_NE(log.find("wanted " + std::to_string(wanted)), std::string::npos) << log;
		EXPECT_NE(log.find("free"), std::string::npos) << log;
	});
}

TEST(MemPool, FallsBackTo4KOnlyWhenAllowed)
{
	size_t wanted = hugepages_total_2m() + 1; /* more than are free: "no free pages" */
	PoolParams p = params_of(wanted * kPage2M, kPage2M);
	nicmr::set_log_level(nicmr::LogLevel::warn);
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(p, &pool), -ENOMEM);

	p.allow_fallback = true;
	expect_no_hugepage_leak(kPage2M, [&] {
		testing::internal::CaptureStderr();
		int rc = Pool::create(p, &pool);
		std::string log = testing::internal::GetCapturedStderr();
		ASSERT_EQ(rc, 0) << log;
		EXPECT_EQ(pool->page_size(), kPage4K);
		EXPECT_EQ(pool->size(), wanted * kPage2M);
		EXPECT_GE(pool->fd(), 0); /* a 4 KiB pool still has an fd to hand out */
		/* The reservation to make is what the system holds plus what is missing
		 * (counts read when the line was written: other processes move them). */
		std::smatch m;
		ASSERT_TRUE(std::regex_search(
			log, m,
			std::regex("using 4 KiB pages: wanted " + std::to_string(wanted) +
				   " free 2 MiB hugepages, ([0-9]+) free of ([0-9]+) reserved\\. "
				   "Reserve [0-9]+ more, as root: echo ([0-9]+) > "
				   "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")))
			<< log;
		EXPECT_EQ(std::stoul(m[3]), std::stoul(m[2]) + wanted - std::stoul(m[1])) << log;
		pool.reset();
	});
}

TEST(MemPool, NumaNodeZeroPlacesEveryPageOnNodeZero)
{
	PoolParams p = params_of(8 * kPage4K, kPage4K);
	p.numa_node = 0;
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(p, &pool), 0);
	EXPECT_EQ(pool->numa_node(), 0);
#if NICMR_HAVE_NUMA
	for (size_t i = 0; i < pool->page_count(); i++) {
		int node = -1;
		void *addr = static_cast<char *>(pool->va()) + i * kPage4K;
		ASSERT_EQ(get_mempolicy(&node, nullptr, 0, addr, MPOL_F_NODE | MPOL_F_ADDR), 0);
		EXPECT_EQ(node, 0);
	}
#endif
}

TEST(MemPool, NumaNodeZeroOnHugepages)
{
	NICMR_NEED_HUGEPAGES(kPage2M, 2);
	if (hugepages_free_on_node(kPage2M, 0) < 2)
		GTEST_SKIP() << "fewer than 2 free 2 MiB pages on node 0";
	PoolParams p = params_of(2 * kPage2M, kPage2M);
	p.numa_node = 0;
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(p, &pool), 0);
	EXPECT_EQ(pool->page_size(), kPage2M);
#if NICMR_HAVE_NUMA
	int node = -1;
	ASSERT_EQ(get_mempolicy(&node, nullptr, 0, pool->va(), MPOL_F_NODE | MPOL_F_ADDR), 0);
	EXPECT_EQ(node, 0);
#endif
}

TEST(MemPool, FdMapsTheSameBytesInAnotherMapping)
{
	size_t page = hugepages_free(kPage2M) >= 1 ? kPage2M : kPage4K;
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(params_of(page, page), &pool), 0);
	ASSERT_GE(pool->fd(), 0);
	struct stat st;
	ASSERT_EQ(fstat(pool->fd(), &st), 0);
	EXPECT_EQ(static_cast<size_t>(st.st_size), pool->size());
	/* What a device model in another process does with the fd it was handed. */
	void *other =
		mmap(nullptr, pool->size(), PROT_READ | PROT_WRITE, MAP_SHARED, pool->fd(), 0);
	ASSERT_NE(other, MAP_FAILED);
	auto *a = static_cast<unsigned char *>(pool->va());
	auto *b = static_cast<unsigned char *>(other);
	for (size_t i = 0; i < pool->size(); i += 4096)
		a[i] = static_cast<unsigned char>(i / 4096 + 1);
	for (size_t i = 0; i < pool->size(); i += 4096)
		ASSERT_EQ(b[i], static_cast<unsigned char>(i / 4096 + 1)) << i;
	b[17] = 0xee;
	EXPECT_EQ(a[17], 0xee);
	munmap(other, pool->size());
}

TEST(MemPool, FdIsClosedAndMemoryUnmappedOnDestroy)
{
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(params_of(kPage4K, kPage4K), &pool), 0);
	int fd = pool->fd();
	void *va = pool->va();
	pool.reset();
	EXPECT_EQ(fcntl(fd, F_GETFD), -1);
	unsigned char v;
	EXPECT_EQ(mincore(va, kPage4K, &v), -1);
	EXPECT_EQ(errno, ENOMEM);
}

TEST(MemPool, PhysicalAddressesAreNonZeroAsRoot)
{
	if (geteuid() != 0)
		GTEST_SKIP() << "physical addresses need root";
	size_t page = hugepages_free(kPage2M) >= 4 ? kPage2M : kPage4K;
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(params_of(4 * page, page), &pool), 0);
	std::vector<uint64_t> pa(pool->page_count());
	ASSERT_EQ(pool->physical_addresses(pa.data(), pa.size()), 0);
	std::set<uint64_t> seen;
	for (uint64_t a : pa) {
		EXPECT_NE(a, 0u);
		EXPECT_EQ(a % page, 0u);
		seen.insert(a);
	}
	EXPECT_EQ(seen.size(), pa.size()); /* every page its own frame */
	EXPECT_EQ(pool->physical_addresses(pa.data(), pa.size() - 1), -EINVAL);
}

TEST(MemPool, PhysicalAddressesWithoutRootAreEPERM)
{
	if (geteuid() != 0)
		GTEST_SKIP() << "needs root to drop to another user";
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(params_of(2 * kPage4K, kPage4K), &pool), 0);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		/* The child: touch the pages (fork does not copy shared page tables), drop root. */
		volatile char *p = static_cast<char *>(pool->va());
		p[0] = p[0];
		p[kPage4K] = p[kPage4K];
		if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
			_exit(100);
		prctl(PR_SET_DUMPABLE, 1); /* keep /proc/self/pagemap readable by its owner */
		uint64_t pa[2];
		int rc = pool->physical_addresses(pa, 2);
		_exit(rc == -EPERM ? 0 : 101);
	}
	int status = 0;
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(MemPool, ImportWrapsWithoutOwning)
{
	nicmr::mem::test::AnonMemory mem(4 * kPage4K);
	ASSERT_NE(mem.va(), nullptr);
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::import(mem.va(), mem.len(), kPage4K, -1, "ext", &pool), 0);
	EXPECT_EQ(pool->backend(), PoolBackend::external);
	EXPECT_EQ(pool->fd(), -1);
	EXPECT_EQ(pool->page_count(), 4u);
	pool.reset();
	mem.va()[0] = 1; /* still mapped: the pool did not free it */
	EXPECT_EQ(mem.va()[0], 1);
}

TEST(MemPool, ImportRejectsBadMemory)
{
	nicmr::mem::test::AnonMemory mem(4 * kPage4K);
	std::unique_ptr<Pool> pool;
	EXPECT_EQ(Pool::import(nullptr, kPage4K, kPage4K, -1, "x", &pool), -EINVAL);
	EXPECT_EQ(Pool::import(mem.va(), 0, kPage4K, -1, "x", &pool), -EINVAL);
	EXPECT_EQ(Pool::import(mem.va() + 1, kPage4K, kPage4K, -1, "x", &pool), -EINVAL);
	EXPECT_EQ(Pool::import(mem.va(), kPage4K + 1, kPage4K, -1, "x", &pool), -EINVAL);
	EXPECT_EQ(Pool::import(mem.va(), kPage4K, 12345, -1, "x", &pool), -EINVAL);
	EXPECT_EQ(pool, nullptr);
}

TEST(MemPool, HugetlbfsBackendNeedsAMount)
{
#if NICMR_HAVE_HUGETLBFS
	NICMR_NEED_HUGEPAGES(kPage2M, 1);
	std::ifstream mounts("/proc/mounts");
	std::stringstream all;
	all << mounts.rdbuf();
	PoolParams p = params_of(kPage2M, kPage2M);
	p.backend = PoolBackend::hugetlbfs;
	std::unique_ptr<Pool> pool;
	int rc = Pool::create(p, &pool);
	if (all.str().find(" hugetlbfs ") == std::string::npos) {
		EXPECT_EQ(rc, -ENODEV);
		EXPECT_EQ(pool, nullptr);
	} else {
		ASSERT_EQ(rc, 0);
		EXPECT_EQ(pool->backend(), PoolBackend::hugetlbfs);
		EXPECT_GE(pool->fd(), 0);
	}
#else
	GTEST_SKIP() << "built without libhugetlbfs";
#endif
}

/*
 * The libhugetlbfs backend on a real mount. libhugetlbfs reads the mount table when it is
 * loaded, so the check runs in a fresh copy of this binary, inside a private mount namespace
 * where a hugetlbfs is mounted (gone with the namespace: nothing changes for the machine).
 */
TEST(MemPool, DISABLED_HugetlbfsChild)
{
	PoolParams p = params_of(2 * kPage2M, kPage2M);
	p.backend = PoolBackend::hugetlbfs;
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(p, &pool), 0);
	EXPECT_EQ(pool->backend(), PoolBackend::hugetlbfs);
	EXPECT_EQ(pool->page_size(), kPage2M);
	EXPECT_GE(pool->fd(), 0);
	std::memset(pool->va(), 1, pool->size());
}

TEST(MemPool, HugetlbfsBackendMapsFromAMountedFilesystem)
{
#if NICMR_HAVE_HUGETLBFS
	if (geteuid() != 0)
		GTEST_SKIP() << "mounting a hugetlbfs in a private namespace needs root";
	NICMR_NEED_HUGEPAGES(kPage2M, 2);
	char dir[] = "/tmp/nicmr-hugetlbfs-XXXXXX";
	ASSERT_NE(mkdtemp(dir), nullptr);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) != 0 ||
		    mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
		    mount("nodev", dir, "hugetlbfs", 0, "pagesize=2M") != 0)
			_exit(100);
		char self[4096];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n <= 0)
			_exit(101);
		self[n] = 0;
		execl(self, self, "--gtest_filter=MemPool.DISABLED_HugetlbfsChild",
		      "--gtest_also_run_disabled_tests", static_cast<char *>(nullptr));
		_exit(102);
	}
	int status = 0;
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	rmdir(dir);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), 0) << "100: no namespace or mount, 1: the pool test failed";
#else
	GTEST_SKIP() << "built without libhugetlbfs";
#endif
}

TEST(MemPool, DescribeNamesPageSizeCountAndNode)
{
	PoolParams p = params_of(3 * kPage4K, kPage4K);
	p.name = "cmdq";
	p.numa_node = 0;
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(p, &pool), 0);
	std::string d = describe(*pool);
	EXPECT_NE(d.find("\"cmdq\""), std::string::npos) << d;
	EXPECT_NE(d.find("12 KiB = 3 x 4 KiB pages"), std::string::npos) << d;
	EXPECT_NE(d.find("NUMA node 0"), std::string::npos) << d;
	EXPECT_NE(d.find("memfd"), std::string::npos) << d;
}

TEST(MemPool, HugepagesFreeIsZeroForUnknownSizes)
{
	EXPECT_EQ(hugepages_free(kPage4K), 0u);
	EXPECT_EQ(hugepages_free(12345), 0u);
	EXPECT_EQ(hugepages_free_on_node(kPage2M, -1), 0u);
	EXPECT_EQ(hugepages_free_on_node(kPage2M, 1 << 20), 0u);
}
