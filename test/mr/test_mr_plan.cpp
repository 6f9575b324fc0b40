/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The MTT planner (lib/mr/mr_plan.h): the entries of a bind (contiguous or an explicit list),
 * the runs, page size and layout of a vectored region, the MTT list over runs, and every
 * refusal with its code. Its callers (the UMR and command programmers, the vectored
 * registrations) are tested through the device in suites dp and api.
 */
#include <cerrno>
#include <gtest/gtest.h>
#include <vector>

#include "mr_plan.h"

using namespace nicmr::mr;

namespace {

constexpr uint64_t k4K = 4096, k2M = 2u << 20, k1G = 1u << 30;

BindParams contiguous(uint64_t start, uint64_t len, uint64_t iova, uint8_t lp)
{
	BindParams p{};
	p.start = start;
	p.len = len;
	p.iova_base = iova;
	p.log_page_size = lp;
	return p;
}

std::vector<uint64_t> plan(const BindParams &p, uint64_t cap, int *rc)
{
	std::vector<uint64_t> out(cap + 1, 0xdead);
	uint64_t n = 0;
	*rc = plan_bind_mtt(p, out.data(), cap, &n);
	out.resize(*rc == 0 ? n : 0);
	return out;
}

} // namespace

TEST(MrPlan, PagesCountFromThePageHoldingStartToThePageHoldingTheLastByte)
{
	EXPECT_EQ(mtt_pages(0x1000, 1, 12), 1u);
	EXPECT_EQ(mtt_pages(0x1fff, 2, 12), 2u) << "two bytes across a boundary";
	EXPECT_EQ(mtt_pages(0x1000, k4K, 12), 1u);
	EXPECT_EQ(mtt_pages(0x1800, k4K, 12), 2u);
	EXPECT_EQ(mtt_pages(k2M - 1, k1G, 30), 2u);
}

TEST(MrPlan, ContiguousRegionInOneLargePageNeedsOneEntry)
{
	int rc = 0;
	/* A region inside a 2 MiB page of a pool mapped at a congruent IOVA. */
	auto m = plan(contiguous(0x7f0000201000, 0x3000, 0x40201000, 21), 64, &rc);
	ASSERT_EQ(rc, 0);
	EXPECT_EQ(m, std::vector<uint64_t>{0x40200000});
}

TEST(MrPlan, ContiguousEntriesArePageIovasFromTheOneHoldingStart)
{
	int rc = 0;
	auto m = plan(contiguous(0x10800, 0x2000, 0x90800, 12), 64, &rc);
	ASSERT_EQ(rc, 0);
	EXPECT_EQ(m, (std::vector<uint64_t>{0x90000, 0x91000, 0x92000}));
	uint64_t n = 0;
	EXPECT_EQ(bind_mtt_count(contiguous(0x10800, 0x2000, 0x90800, 12), &n), 0);
	EXPECT_EQ(n, 3u) << "the count alone agrees with the list";
}

TEST(MrPlan, ZeroBasedRegionNeedsAnAlignedIova)
{
	int rc = 0;
	auto m = plan(contiguous(0, 0x2000, 0x90000, 12), 64, &rc);
	ASSERT_EQ(rc, 0);
	EXPECT_EQ(m, (std::vector<uint64_t>{0x90000, 0x91000}));
	plan(contiguous(0, 0x2000, 0x90800, 12), 64, &rc);
	EXPECT_EQ(rc, -EINVAL) << "offset 0 cannot map to an IOVA in the middle of a page";
}

TEST(MrPlan, ExplicitListIsCopiedAsGiven)
{
	const uint64_t list[] = {0x50000, 0x10000, 0x77000};
	BindParams p = contiguous(0x1000, 0x2800, 0, 12);
	p.mtt = list;
	p.mtt_count = 3;
	int rc = 0;
	auto m = plan(p, 3, &rc);
	ASSERT_EQ(rc, 0);
	EXPECT_EQ(m, (std::vector<uint64_t>{0x50000, 0x10000, 0x77000}));
	plan(p, 2, &rc);
	EXPECT_EQ(rc, -E2BIG);
}

TEST(MrPlan, BindRefusalsSayEinvalOrE2big)
{
	int rc = 0;
	plan(contiguous(0x1000, 0, 0x1000, 12), 64, &rc);
	EXPECT_EQ(rc, -EINVAL) << "len 0";
	plan(contiguous(0x1000, k4K, 0x1000, 11), 64, &rc);
	EXPECT_EQ(rc, -EINVAL) << "page below 4 KiB";
	plan(contiguous(0x1000, k4K, 0x1000, 31), 64, &rc);
	EXPECT_EQ(rc, -EINVAL) << "page above 1 GiB";
	plan(contiguous(0x1000, k4K, 0x2800, 12), 64, &rc);
	EXPECT_EQ(rc, -EINVAL) << "IOVA not congruent with start";
	uint64_t n = 0;
	EXPECT_EQ(bind_mtt_count(contiguous(0x1000, k4K, 0x2800, 12), &n), -EINVAL);

	std::vector<uint64_t> out(4, 0xdead);
	EXPECT_EQ(plan_bind_mtt(contiguous(0x1000, 5 * k4K, 0x9000, 12), out.data(), 4, &n),
		  -E2BIG);
	EXPECT_EQ(out, std::vector<uint64_t>(4, 0xdead)) << "nothing written on -E2BIG";
	EXPECT_EQ(plan_bind_mtt(contiguous(0x1000, 4 * k4K, 0x9000, 12), out.data(), 4, &n), 0);
	EXPECT_EQ(n, 4u) << "exactly the capacity fits";
}

TEST(MrPlan, ConsecutivePiecesMergeIntoOneContiguousRun)
{
	const VecPiece pc[] = {{0x10000, 0x1000, 0x80000, 21}, {0x20000, 0x3000, 0x81000, 21}};
	nicmr::mr::Run runs[kMaxRuns];
	VecPlan v;
	ASSERT_EQ(plan_vector(0x10000, 0x4000, pc, 2, 64, runs, &v), 0);
	EXPECT_EQ(v.layout, VecLayout::contiguous);
	ASSERT_EQ(v.run_count, 1u);
	EXPECT_EQ(runs[0].end, 0x4000u);
	EXPECT_EQ(runs[0].iova, 0x80000u);
	EXPECT_EQ(v.log_page_size, 16) << "the largest page congruent with start's IOVA";
	EXPECT_EQ(v.mtt_count, 0u);
}

TEST(MrPlan, RunsOnPageBoundariesShareOneMttMkey)
{
	/* Two 8 KiB pieces from unrelated IOVAs, each on a 4 KiB boundary. */
	const VecPiece pc[] = {{0x10000, 0x2000, 0x80000, 12}, {0x12000, 0x2000, 0x30000, 12}};
	nicmr::mr::Run runs[kMaxRuns];
	VecPlan v;
	ASSERT_EQ(plan_vector(0x10000, 0x4000, pc, 2, 64, runs, &v), 0);
	EXPECT_EQ(v.layout, VecLayout::mtt_runs);
	EXPECT_EQ(v.run_count, 2u);
	EXPECT_EQ(v.log_page_size, 12);
	ASSERT_EQ(v.mtt_count, 4u);
	std::vector<uint64_t> m(v.mtt_count);
	plan_runs_mtt(0x10000, 0x4000, runs, v.run_count, v.log_page_size, m.data());
	EXPECT_EQ(m, (std::vector<uint64_t>{0x80000, 0x81000, 0x30000, 0x31000}));
}

TEST(MrPlan, MttOverRunsKeepsTheFirstRunsOffsetInItsPage)
{
	/* The region starts 0x800 into a page; the second run starts on a page boundary. */
	const nicmr::mr::Run runs[] = {{0x1800, 0x90800}, {0x2800, 0x40000}};
	ASSERT_EQ(plan_runs_page(0x10800, 0x2800, runs, 2, 12, 0), 12u);
	std::vector<uint64_t> m(mtt_pages(0x10800, 0x2800, 12));
	plan_runs_mtt(0x10800, 0x2800, runs, 2, 12, m.data());
	EXPECT_EQ(m, (std::vector<uint64_t>{0x90000, 0x91000, 0x40000}));
}

TEST(MrPlan, RunsThatNoPageSizeFitsGoKlm)
{
	/* The second piece starts 0x800 into a page: no MTT page size puts it on a boundary. */
	const VecPiece pc[] = {{0x10000, 0x800, 0x80000, 12}, {0x10800, 0x1000, 0x30000, 12}};
	nicmr::mr::Run runs[kMaxRuns];
	VecPlan v;
	ASSERT_EQ(plan_vector(0x10000, 0x1800, pc, 2, 64, runs, &v), 0);
	EXPECT_EQ(v.layout, VecLayout::klm);
	EXPECT_EQ(v.run_count, 2u) << "the runs are still the host's IOVA map";
	EXPECT_EQ(v.log_page_size, 0);
	EXPECT_EQ(plan_runs_page(0x10000, 0x1800, runs, 2, 12, 0), 0u);
}

TEST(MrPlan, MoreEntriesThanTheMkeyHoldsGoKlm)
{
	const VecPiece pc[] = {{0x10000, 0x2000, 0x80000, 12}, {0x12000, 0x2000, 0x30000, 12}};
	nicmr::mr::Run runs[kMaxRuns];
	VecPlan v;
	ASSERT_EQ(plan_vector(0x10000, 0x4000, pc, 2, 3, runs, &v), 0);
	EXPECT_EQ(v.layout, VecLayout::klm) << "4 entries, the mkey holds 3";
	ASSERT_EQ(plan_vector(0x10000, 0x4000, pc, 2, 4, runs, &v), 0);
	EXPECT_EQ(v.layout, VecLayout::mtt_runs);
	ASSERT_EQ(plan_vector(0x10000, 0x4000, pc, 2, 0, runs, &v), 0);
	EXPECT_EQ(v.layout, VecLayout::mtt_runs) << "0: no limit";
}

TEST(MrPlan, PageSizeIsCappedByTheSmallestPieceMapping)
{
	const VecPiece pc[] = {{0, k2M, 0x40000000, 30}, {k2M, k2M, 0x80000000, 21}};
	nicmr::mr::Run runs[kMaxRuns];
	VecPlan v;
	ASSERT_EQ(plan_vector(0, 2 * k2M, pc, 2, 64, runs, &v), 0);
	EXPECT_EQ(v.layout, VecLayout::mtt_runs);
	EXPECT_EQ(v.log_page_size, 21);
	EXPECT_EQ(v.mtt_count, 2u);
}

TEST(MrPlan, VectorRefusals)
{
	nicmr::mr::Run runs[kMaxRuns];
	VecPlan v;
	EXPECT_EQ(plan_vector(0, 1, nullptr, 0, 64, runs, &v), -EINVAL) << "no piece";

	/* kMaxRuns + 1 pieces whose IOVAs never follow each other. */
	std::vector<VecPiece> many;
	for (uint64_t i = 0; i <= kMaxRuns; i++)
		many.push_back({i * k4K, k4K, 0x100000 + i * 2 * k4K, 12});
	EXPECT_EQ(plan_vector(0, many.size() * k4K, many.data(), many.size(), 0, runs, &v), -E2BIG);
	many.pop_back();
	EXPECT_EQ(plan_vector(0, many.size() * k4K, many.data(), many.size(), 0, runs, &v), 0)
		<< "kMaxRuns runs fit";
	EXPECT_EQ(v.run_count, kMaxRuns);

	/* KLM with a piece of 4 GiB: a KLM entry's byte count is 32 bits. */
	const uint64_t big = uint64_t{1} << 32;
	const VecPiece klm[] = {{0x800, 0x800, 0x80800, 12}, {0x1000, big, 0x200000000, 12}};
	EXPECT_EQ(plan_vector(0x800, 0x800 + big, klm, 2, 64, runs, &v), -E2BIG);
	const VecPiece klm_ok[] = {{0x800, 0x800, 0x80800, 12}, {0x1000, big - 1, 0x200000000, 12}};
	ASSERT_EQ(plan_vector(0x800, 0x800 + big - 1, klm_ok, 2, 64, runs, &v), 0);
	EXPECT_EQ(v.layout, VecLayout::klm);
}
