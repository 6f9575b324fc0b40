/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a test that needs hugepages does when they are missing: run, skip or fail. One decision
 * for every test and benchmark, per page size, from inputs a unit test can feed:
 *
 *   enough free pages of the size                           -> run
 *   not enough, size required by NICMR_REQUIRE_HUGEPAGES     -> fail (the reservation was made
 *                                                               and then went missing)
 *   not enough, size not required (the kernel does not offer
 *   it, or nobody reserved it)                               -> skip, with a reason naming the
 *                                                               size and the remedy
 *
 * NICMR_REQUIRE_HUGEPAGES (set by devtools/test.sh, see devtools/lib.sh hugepage_requirement):
 *   unset, "" or "0"   nothing is required
 *   "2M", "2M,1G"      those sizes (K, M, G suffixes, any case) are required
 *   "1"                every size the kernel offers is required (the older form)
 * A size the kernel does not offer fails when named explicitly (the environment promised it),
 * and is simply not required under "1". Anything else fails with the value in the reason.
 */
#ifndef NICMR_TEST_HUGEPAGE_NEED_H
#define NICMR_TEST_HUGEPAGE_NEED_H

#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>

#include "mem_describe.h"
#include "mem_pool.h"
#include "nicmr_parse.h"

namespace nicmr::test {

enum class HugepageVerdict { run, skip, fail };

struct HugepageNeed {
	HugepageVerdict verdict = HugepageVerdict::run;
	std::string reason; /* empty for run */
};

/* The machine as the decision sees it. */
struct HugepageFacts {
	size_t page_size = mem::kPage2M;
	size_t need = 1;       /* pages the test needs free */
	size_t free_pages = 0; /* free now */
	size_t total = 0;      /* nr_hugepages */
	bool offered = false;  /* the kernel has the size at all */
};

/*
 * Whether spec (NICMR_REQUIRE_HUGEPAGES, nullptr when unset) requires page_size: 1 yes, 0 no,
 * -1 when spec is malformed.
 */
inline int hugepage_size_required(const char *spec, size_t page_size, bool offered)
{
	if (spec == nullptr)
		return 0;
	const std::string s(spec);
	if (s.empty() || s == "0")
		return 0;
	if (s == "1")
		return offered ? 1 : 0;
	int found = 0;
	size_t pos = 0;
	while (pos <= s.size()) {
		size_t end = s.find(',', pos);
		if (end == std::string::npos)
			end = s.size();
		/* A size with its unit: "2M", "1G" (a bare number is no page size here). */
		const std::string_view tok = std::string_view(s).substr(pos, end - pos);
		uint64_t size = 0;
		if (tok.empty() ||
		    std::string_view("kKmMgG").find(tok.back()) == std::string_view::npos ||
		    !parse_size(tok, &size))
			return -1;
		if (size == page_size)
			found = 1;
		pos = end + 1;
	}
	return found;
}

/* The decision itself: pure, every input a parameter. */
inline HugepageNeed decide_hugepage_need(const HugepageFacts &f, const char *spec)
{
	const std::string size = mem::format_size(f.page_size);
	const std::string var =
		std::string("NICMR_REQUIRE_HUGEPAGES=") + (spec != nullptr ? spec : "");
	const int required = hugepage_size_required(spec, f.page_size, f.offered);
	if (required < 0)
		return {HugepageVerdict::fail,
			var + " is not understood: 1, or sizes such as 2M,1G (test of " + size +
				" hugepages)"};
	if (f.offered && f.free_pages >= f.need)
		return {};
	if (!f.offered)
		return {required ? HugepageVerdict::fail : HugepageVerdict::skip,
			"this kernel offers no " + size + " hugepages" +
				(required ? " (" + var + " requires them)" : std::string())};
	const std::string counts = "need " + std::to_string(f.need) + " free " + size +
				   " hugepages, " + std::to_string(f.free_pages) + " free";
	if (required)
		return {HugepageVerdict::fail, counts + " (" + var + " requires them)"};
	mem::HugepageShortage s;
	s.page_size = f.page_size;
	s.wanted = f.need;
	s.free_pages = f.free_pages;
	s.total = f.total;
	s.offered = true;
	return {HugepageVerdict::skip,
		counts + " (not required here): " + mem::describe_hugepage_shortage(s)};
}

/* The decision for this machine and this process's environment. */
inline HugepageNeed hugepage_need(size_t page_size, size_t need)
{
	HugepageFacts f;
	f.page_size = page_size;
	f.need = need;
	f.free_pages = mem::hugepages_free(page_size);
	f.total = mem::hugepages_total(page_size);
	f.offered = mem::hugepages_offered(page_size);
	return decide_hugepage_need(f, std::getenv("NICMR_REQUIRE_HUGEPAGES"));
}

/* Whether this environment requires pages of page_size (tests that count pages themselves,
 * such as DPDK's EAL start). A malformed value counts as required, so that it fails loudly. */
inline bool hugepages_required(size_t page_size)
{
	return hugepage_size_required(std::getenv("NICMR_REQUIRE_HUGEPAGES"), page_size,
				      mem::hugepages_offered(page_size)) != 0;
}

} // namespace nicmr::test

/* In a GoogleTest test: skips or fails, with the reason, unless n pages of page_size are free. */
#define NICMR_NEED_HUGEPAGES(page_size, n)                                                         \
	do {                                                                                       \
		const ::nicmr::test::HugepageNeed need_ =                                          \
			::nicmr::test::hugepage_need((page_size), (n));                            \
		if (need_.verdict == ::nicmr::test::HugepageVerdict::fail)                         \
			FAIL() << need_.reason;                                                    \
		if (need_.verdict == ::nicmr::test::HugepageVerdict::skip)                         \
			GTEST_SKIP() << need_.reason;                                              \
	} while (0)

#endif
