/* SPDX-License-Identifier: BSD-3-Clause */
/* IovaAllocator: placement inside the valid ranges, congruence with the VA, exhaustion. */
#include <algorithm>
#include <cerrno>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "mem_space.h"

using namespace nicmr::mem;

namespace {

struct Piece {
	uint64_t iova;
	size_t len;
};

bool inside(const std::vector<IovaRange> &ranges, uint64_t iova, size_t len)
{
	for (const IovaRange &r : ranges)
		if (iova >= r.start && len - 1 <= r.last - iova)
			return true;
	return false;
}

} // namespace

TEST(MemIova, RejectsZeroLengthAndBadAlignment)
{
	IovaAllocator a({{0, (1ull << 40) - 1}});
	uint64_t iova;
	EXPECT_EQ(a.alloc(0, 4096, 0, &iova), -EINVAL);
	EXPECT_EQ(a.alloc(4096, 0, 0, &iova), -EINVAL);
	EXPECT_EQ(a.alloc(4096, 3 * 4096, 0, &iova), -EINVAL);
	EXPECT_EQ(a.allocated_bytes(), 0u);
}

TEST(MemIova, PlacesCongruentToTheVaHint)
{
	IovaAllocator a({{0x1000, (1ull << 40) - 1}});
	uint64_t iova;
	const uint64_t va = 0x7f12345e3000;
	ASSERT_EQ(a.alloc(3 << 20, 1 << 22, va, &iova), 0);
	EXPECT_EQ(iova % (1 << 22), va % (1 << 22));
	EXPECT_GE(iova, 0x1000u);
	EXPECT_EQ(a.allocated_bytes(), 3u << 20);
}

TEST(MemIova, ExhaustionIsENOSPCAndFreeingMakesRoomAgain)
{
	IovaAllocator a({{0x10000, 0x10000 + 16 * 4096 - 1}});
	std::vector<uint64_t> got;
	uint64_t iova;
	for (int i = 0; i < 16; i++) {
		ASSERT_EQ(a.alloc(4096, 4096, 0, &iova), 0) << i;
		got.push_back(iova);
	}
	EXPECT_EQ(a.alloc(4096, 4096, 0, &iova), -ENOSPC);
	for (uint64_t g : got)
		ASSERT_EQ(a.release(g, 4096), 0);
	EXPECT_EQ(a.allocated_bytes(), 0u);
	/* Coalesced again: the whole range fits in one piece. */
	ASSERT_EQ(a.alloc(16 * 4096, 4096, 0, &iova), 0);
	EXPECT_EQ(iova, 0x10000u);
}

TEST(MemIova, FreeOfWhatWasNotAllocatedIsENOENT)
{
	IovaAllocator a({{0, (1ull << 32) - 1}});
	uint64_t iova;
	ASSERT_EQ(a.alloc(8192, 4096, 0, &iova), 0);
	EXPECT_EQ(a.release(iova + 4096, 4096), -ENOENT);
	EXPECT_EQ(a.release(iova, 4096), -ENOENT); /* not as one piece */
	EXPECT_EQ(a.release(iova, 8192), 0);
	EXPECT_EQ(a.release(iova, 8192), -ENOENT); /* twice */
}

TEST(MemIova, HandlesARangeEndingAtTheTopOfTheSpace)
{
	IovaAllocator a({{UINT64_MAX - (1ull << 20) + 1, UINT64_MAX}});
	uint64_t iova;
	ASSERT_EQ(a.alloc(1 << 20, 1 << 20, 0, &iova), 0);
	EXPECT_EQ(iova, UINT64_MAX - (1ull << 20) + 1);
	EXPECT_EQ(a.alloc(4096, 4096, 0, &iova), -ENOSPC);
	ASSERT_EQ(a.release(UINT64_MAX - (1ull << 20) + 1, 1 << 20), 0);
	ASSERT_EQ(a.alloc(4096, 1ull << 40, 0x1000, &iova), -ENOSPC); /* no congruent slot */
}

TEST(MemIova, SkipsGapsBetweenValidRanges)
{
	/* Like VFIO's reserved MSI window on x86: [0xfee00000, 0xfeefffff] is not valid. */
	std::vector<IovaRange> ranges = {{0, 0xfedfffff}, {0xfef00000, (1ull << 39) - 1}};
	IovaAllocator a(ranges);
	uint64_t iova;
	ASSERT_EQ(a.alloc(0xfee00000 - 0x1000, 4096, 0, &iova), 0); /* fills most of the first */
	ASSERT_EQ(a.alloc(4 << 20, 4096, 0, &iova), 0);
	EXPECT_TRUE(inside(ranges, iova, 4 << 20));
	EXPECT_GE(iova, 0xfef00000u);
}

/* The property DmaSpace relies on, over many random requests: in range, congruent, disjoint. */
TEST(MemIova, RandomPlacementsAreCongruentAlignedAndDisjoint)
{
	std::mt19937_64 rng(12345);
	std::vector<IovaRange> ranges = {{0x100000, 0xfedfffff},
					 {0xfef00000, (1ull << 36) - 1},
					 {1ull << 40, (1ull << 40) + (1ull << 34) - 1}};
	IovaAllocator a(ranges);
	std::vector<Piece> live;
	size_t bytes = 0;
	for (int i = 0; i < 4000; i++) {
		if (!live.empty() && rng() % 3 == 0) {
			size_t k = rng() % live.size();
			ASSERT_EQ(a.release(live[k].iova, live[k].len), 0);
			bytes -= live[k].len;
			live.erase(live.begin() + static_cast<long>(k));
			continue;
		}
		size_t len = (1 + rng() % 4096) * 4096;
		size_t align = size_t{4096} << (rng() % 19); /* 4 KiB .. 1 GiB */
		uint64_t va = (rng() & ((1ull << 47) - 1)) & ~uint64_t{4095};
		uint64_t iova;
		int rc = a.alloc(len, align, va, &iova);
		if (rc == -ENOSPC)
			continue;
		ASSERT_EQ(rc, 0);
		ASSERT_EQ(iova % align, va % align) << "len " << len << " align " << align;
		ASSERT_TRUE(inside(ranges, iova, len)) << std::hex << iova;
		live.push_back({iova, len});
		bytes += len;
		ASSERT_EQ(a.allocated_bytes(), bytes);
	}
	std::sort(live.begin(), live.end(),
		  [](const Piece &x, const Piece &y) { return x.iova < y.iova; });
	for (size_t i = 1; i < live.size(); i++)
		ASSERT_LE(live[i - 1].iova + live[i - 1].len, live[i].iova);
	for (const Piece &p : live)
		ASSERT_EQ(a.release(p.iova, p.len), 0);
	EXPECT_EQ(a.allocated_bytes(), 0u);
	uint64_t iova;
	EXPECT_EQ(a.alloc(1ull << 34, 4096, 0, &iova), 0); /* the last range is whole again */
}
