/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a hugepage test does on each kind of machine (test/support/hugepage_need.h), and the
 * words Pool::create says when pages are missing or cannot be locked (mem_hugepages.cpp).
 */
#include <cerrno>
#include <cstring>
#include <linux/capability.h>
#include <regex>
#include <string>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "hugepage_need.h"
#include "mem_pool.h"
#include "nicmr_log.h"

using namespace nicmr::mem;
using nicmr::test::decide_hugepage_need;
using nicmr::test::hugepage_size_required;
using nicmr::test::HugepageFacts;
using nicmr::test::HugepageVerdict;

namespace {

HugepageFacts facts(size_t page_size, bool offered, size_t free_pages, size_t need = 1)
{
	HugepageFacts f;
	f.page_size = page_size;
	f.need = need;
	f.free_pages = free_pages;
	f.total = offered ? free_pages + 4 : 0;
	f.offered = offered;
	return f;
}

bool has(const std::string &s, const std::string &what)
{
	return s.find(what) != std::string::npos;
}

} // namespace

TEST(HugepageNeed, RequirementParsesSizesPerPageSize)
{
	EXPECT_EQ(hugepage_size_required(nullptr, kPage2M, true), 0);
	EXPECT_EQ(hugepage_size_required("", kPage2M, true), 0);
	EXPECT_EQ(hugepage_size_required("0", kPage2M, true), 0);
	/* "1": every size the kernel offers, and only those. */
	EXPECT_EQ(hugepage_size_required("1", kPage2M, true), 1);
	EXPECT_EQ(hugepage_size_required("1", kPage1G, true), 1);
	EXPECT_EQ(hugepage_size_required("1", kPage1G, false), 0);
	/* A list names sizes; whether the kernel offers them does not matter to the parse. */
	EXPECT_EQ(hugepage_size_required("2M", kPage2M, true), 1);
	EXPECT_EQ(hugepage_size_required("2M", kPage1G, true), 0);
	EXPECT_EQ(hugepage_size_required("2M,1G", kPage1G, false), 1);
	EXPECT_EQ(hugepage_size_required("1g,2m", kPage2M, true), 1);
	EXPECT_EQ(hugepage_size_required("2048K", kPage2M, true), 1);
	EXPECT_EQ(hugepage_size_required("1048576k", kPage1G, true), 1);
	for (const char *bad : {"yes", "2", "2MB", "M", "2M,", ",2M", "2M;1G", "-2M", "2T"})
		EXPECT_EQ(hugepage_size_required(bad, kPage2M, true), -1) << bad;
}

/* Every combination of offered / required / free, for both sizes and every form of the
 * variable: the verdict, and that a reason names the size. */
TEST(HugepageNeed, EveryCombinationRunsSkipsOrFails)
{
	struct Case {
		const char *spec;
		size_t page_size;
		bool offered;
		bool enough;
		HugepageVerdict want;
	};
	const HugepageVerdict run = HugepageVerdict::run, skip = HugepageVerdict::skip,
			      fail = HugepageVerdict::fail;
	const Case cases[] = {
		/* Nothing required: never a failure. */
		{nullptr, kPage2M, true, true, run},
		{nullptr, kPage2M, true, false, skip},
		{nullptr, kPage1G, false, false, skip},
		{"0", kPage1G, true, false, skip},
		/* "1": offered sizes are required, others skip (this machine: no 1 GiB pages). */
		{"1", kPage2M, true, true, run},
		{"1", kPage2M, true, false, fail},
		{"1", kPage1G, true, false, fail},
		{"1", kPage1G, false, false, skip},
		/* A list: what test.sh reserved is required; the rest skips. */
		{"2M", kPage2M, true, true, run},
		{"2M", kPage2M, true, false, fail},
		{"2M", kPage1G, false, false, skip},
		{"2M", kPage1G, true, false, skip},
		{"2M", kPage1G, true, true, run},
		{"2M,1G", kPage1G, true, true, run},
		{"2M,1G", kPage1G, true, false, fail},
		/* Named but not offered: the environment promised what the kernel cannot give. */
		{"2M,1G", kPage1G, false, false, fail},
		/* Malformed: a failure whatever the machine. */
		{"yes", kPage2M, true, true, fail},
	};
	for (const Case &c : cases) {
		const auto need = decide_hugepage_need(
			facts(c.page_size, c.offered, c.enough ? 3 : 1, 2), c.spec);
		const std::string label = std::string(c.spec ? c.spec : "(unset)") + " " +
					  format_size(c.page_size) +
					  (c.offered ? " offered" : " not offered") +
					  (c.enough ? ", enough free" : ", too few free");
		EXPECT_EQ(need.verdict, c.want) << label << ": " << need.reason;
		if (c.want == run)
			EXPECT_EQ(need.reason, "") << label;
		else
			EXPECT_TRUE(has(need.reason, format_size(c.page_size)))
				<< label << ": " << need.reason;
	}
}

TEST(HugepageNeed, ReasonsSayWhatIsMissingAndTheRemedy)
{
	/* The failure test.sh met on a kernel without 1 GiB pages is now a skip that says so. */
	auto n = decide_hugepage_need(facts(kPage1G, false, 0), "2M");
	EXPECT_EQ(n.verdict, HugepageVerdict::skip);
	EXPECT_EQ(n.reason, "this kernel offers no 1 GiB hugepages");

	n = decide_hugepage_need(facts(kPage1G, false, 0), "2M,1G");
	EXPECT_EQ(n.verdict, HugepageVerdict::fail);
	EXPECT_EQ(n.reason, "this kernel offers no 1 GiB hugepages "
			    "(NICMR_REQUIRE_HUGEPAGES=2M,1G requires them)");

	HugepageFacts f = facts(kPage2M, true, 10, 32);
	f.total = 1100;
	n = decide_hugepage_need(f, "2M");
	EXPECT_EQ(n.verdict, HugepageVerdict::fail);
	EXPECT_EQ(n.reason, "need 32 free 2 MiB hugepages, 10 free "
			    "(NICMR_REQUIRE_HUGEPAGES=2M requires them)");

	n = decide_hugepage_need(f, nullptr);
	EXPECT_EQ(n.verdict, HugepageVerdict::skip);
	EXPECT_TRUE(has(n.reason, "echo 1122 > /sys/kernel/mm/hugepages/hugepages-2048kB/"
				  "nr_hugepages"))
		<< n.reason;

	n = decide_hugepage_need(f, "2M,x");
	EXPECT_EQ(n.verdict, HugepageVerdict::fail);
	EXPECT_TRUE(has(n.reason, "NICMR_REQUIRE_HUGEPAGES=2M,x is not understood")) << n.reason;
}

TEST(HugepageAdvice, ReservationTargetAddsTheMissingPagesToWhatIsReserved)
{
	/* The demo's case: 1100 reserved, 1098 free, 32 wanted: nothing to add. */
	EXPECT_EQ(hugepages_reservation_target(1100, 1098, 32), 1100u);
	/* 1100 reserved, all taken by others: 32 more, not 32 in all. */
	EXPECT_EQ(hugepages_reservation_target(1100, 0, 32), 1132u);
	EXPECT_EQ(hugepages_reservation_target(1100, 10, 32), 1122u);
	EXPECT_EQ(hugepages_reservation_target(0, 0, 1), 1u);
	EXPECT_EQ(hugepages_reservation_target(5, 5, 5), 5u);
}

TEST(HugepageAdvice, ShortageNamesTheFileTheCountAndForOneGigTheAlternative)
{
	HugepageShortage s;
	s.page_size = kPage2M;
	s.wanted = 32;
	s.free_pages = 10;
	s.total = 1100;
	EXPECT_EQ(describe_hugepage_shortage(s),
		  "wanted 32 free 2 MiB hugepages, 10 free of 1100 reserved. Reserve 22 more, as "
		  "root: echo 1122 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
	s.numa_node = 1;
	EXPECT_EQ(describe_hugepage_shortage(s),
		  "wanted 32 free 2 MiB hugepages on node 1, 10 free of 1100 reserved. Reserve 22 "
		  "more, as root: echo 1122 > "
		  "/sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages");
	s = {};
	s.page_size = kPage1G;
	s.wanted = 2;
	s.free_pages = 0;
	s.total = 1;
	EXPECT_EQ(describe_hugepage_shortage(s),
		  "wanted 2 free 1 GiB hugepages, 0 free of 1 reserved. Reserve 2 more, as root: "
		  "echo 3 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages (or use "
		  "2 MiB pages)");
	s.offered = false;
	EXPECT_EQ(describe_hugepage_shortage(s),
		  "wanted 2 free 1 GiB hugepages, but this kernel offers no 1 GiB hugepages (no "
		  "/sys/kernel/mm/hugepages/hugepages-1048576kB). Use 2 MiB pages");
}

TEST(HugepageAdvice, MlockFailureNamesTheLimitAndHowToRaiseIt)
{
	const std::string m =
		describe_mlock_failure(size_t{64} << 20, ENOMEM, 8u << 20, RLIM_INFINITY, 4096);
	EXPECT_EQ(m, "mlock of 64 MiB failed (Cannot allocate memory): RLIMIT_MEMLOCK is 8 MiB "
		     "(hard limit unlimited), 4 KiB locked already by this process. Raise it with "
		     "`ulimit -l` (KiB, or unlimited) in the shell that starts the process, or a "
		     "memlock line in /etc/security/limits.conf, or give the process CAP_IPC_LOCK");
	EXPECT_FALSE(has(describe_mlock_failure(4096, EPERM, 0, 0, -1), "locked already"));
	EXPECT_TRUE(has(describe_mlock_failure(4096, EPERM, 0, 0, -1), "RLIMIT_MEMLOCK is 0 B"));
}

/* The 1 GiB "no fallback" error gives the remedy nicmr.h promises, whatever the kernel offers. */
TEST(HugepageAdvice, OneGigWithoutFallbackSaysHowToGetThePages)
{
	nicmr::set_log_level(nicmr::LogLevel::warn);
	const size_t wanted = hugepages_total(kPage1G) + 1; /* never all free */
	PoolParams p;
	p.size = wanted * kPage1G; /* refused on the counts, before anything is mapped */
	p.page_size = kPage1G;
	p.name = "onegig";
	std::unique_ptr<Pool> pool;
	testing::internal::CaptureStderr();
	int rc = Pool::create(p, &pool);
	const std::string log = testing::internal::GetCapturedStderr();
	EXPECT_EQ(rc, -ENOMEM);
	EXPECT_TRUE(has(log, "pool onegig (no fallback allowed): wanted " + std::to_string(wanted) +
				     " free 1 GiB hugepages"))
		<< log;
	EXPECT_TRUE(has(log, "or allow the fallback to 4 KiB pages")) << log;
	if (!hugepages_offered(kPage1G)) {
		EXPECT_TRUE(has(log, "this kernel offers no 1 GiB hugepages")) << log;
		EXPECT_TRUE(has(log, "Use 2 MiB pages")) << log;
		return;
	}
	/* "F free of T reserved. Reserve M more, as root: echo X > ...": X = T + wanted - F. */
	std::smatch m;
	ASSERT_TRUE(std::regex_search(log, m,
				      std::regex("([0-9]+) free of ([0-9]+) reserved\\. Reserve "
						 "([0-9]+) more, as root: echo ([0-9]+) > "
						 "/sys/kernel/mm/hugepages/hugepages-1048576kB/"
						 "nr_hugepages \\(or use 2 MiB pages\\)")))
		<< log;
	const size_t f = std::stoul(m[1]), t = std::stoul(m[2]), more = std::stoul(m[3]),
		     x = std::stoul(m[4]);
	EXPECT_EQ(x, t + wanted - f);
	EXPECT_EQ(more, x - t);
}

namespace {

/* Takes CAP_IPC_LOCK out of this process's effective set: root locks past any limit. */
bool drop_ipc_lock()
{
	__user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[2] = {};
	if (syscall(SYS_capget, &hdr, data) != 0)
		return false;
	data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	return syscall(SYS_capset, &hdr, data) == 0;
}

/*
 * Runs Pool::create(p) in a child whose RLIMIT_MEMLOCK is limit bytes and that cannot ignore
 * it; returns the child's log and sets *rc to what create returned (1 when the child could not
 * set itself up).
 */
std::string create_under_memlock_limit(const PoolParams &p, rlim_t limit, int *rc)
{
	int fds[2];
	if (pipe(fds) != 0)
		return "pipe failed";
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(fds[1], 2);
		close(fds[0]);
		struct rlimit lim = {limit, limit};
		if (!drop_ipc_lock() || setrlimit(RLIMIT_MEMLOCK, &lim) != 0)
			_exit(1);
		std::unique_ptr<Pool> pool;
		int r = Pool::create(p, &pool);
		fflush(stderr);
		_exit(r == 0 ? 0 : (-r & 0x7f) + 2);
	}
	close(fds[1]);
	std::string log;
	char buf[4096];
	ssize_t n;
	while ((n = read(fds[0], buf, sizeof(buf))) > 0)
		log.append(buf, static_cast<size_t>(n));
	close(fds[0]);
	int status = 0;
	waitpid(pid, &status, 0);
	const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	*rc = code < 2 ? code : -(code - 2);
	return log;
}

} // namespace

/* The demo's case: pages were free, mlock failed. The log says so, with the limit and how to
 * raise it, and suggests no hugepage reservation; the code is -EPERM, with no fallback. */
TEST(HugepageAdvice, MlockOverTheLimitIsEpermAndSaysWhy)
{
	nicmr::set_log_level(nicmr::LogLevel::warn);
	PoolParams p;
	p.size = size_t{1} << 20;
	p.page_size = kPage4K; /* no hugepage needed: the limit alone fails it */
	p.name = "locked";
	int rc = 0;
	std::string log = create_under_memlock_limit(p, 64 << 10, &rc);
	ASSERT_NE(rc, 1) << "the child could not drop CAP_IPC_LOCK or lower RLIMIT_MEMLOCK";
	EXPECT_EQ(rc, -EPERM) << log;
	EXPECT_TRUE(has(log, "pool locked: mlock of 1 MiB failed")) << log;
	EXPECT_TRUE(has(log, "RLIMIT_MEMLOCK is 64 KiB (hard limit 64 KiB)")) << log;
	EXPECT_TRUE(has(log, "ulimit -l")) << log;
	EXPECT_TRUE(has(log, "limits.conf")) << log;

	/* On hugepages with the fallback allowed: still the limit, never "reserve hugepages". */
	NICMR_NEED_HUGEPAGES(kPage2M, 1);
	p.size = kPage2M;
	p.page_size = kPage2M;
	p.allow_fallback = true;
	log = create_under_memlock_limit(p, 64 << 10, &rc);
	EXPECT_EQ(rc, -EPERM) << log;
	EXPECT_TRUE(has(log, "mlock of 2 MiB failed")) << log;
	EXPECT_FALSE(has(log, "nr_hugepages")) << log;
	EXPECT_FALSE(has(log, "using 4 KiB pages")) << log;
}
