/* SPDX-License-Identifier: BSD-3-Clause */
/* DmaArena: zeroed, IOVA-aligned blocks out of one mapped pool, from several threads. */
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mem_space.h"
#include "mem_test_mapper.h"

using namespace nicmr::mem;
using nicmr::mem::test::RecordingMapper;

namespace {

PoolParams small_pool(size_t size = 64 * kPage4K)
{
	PoolParams p;
	p.size = size;
	p.page_size = kPage4K; /* runs everywhere; hugepage pools behave the same here */
	p.name = "arena";
	return p;
}

} // namespace

TEST(MemArena, AllocReturnsZeroedIovaAlignedBlocksInsideThePool)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DmaArena> arena;
	ASSERT_EQ(DmaArena::create(space, small_pool(), &arena), 0);
	EXPECT_EQ(space.pool_count(), 1u);
	const PoolEntry &e = arena->entry();
	std::vector<DmaBlock> blocks;
	for (size_t align : {size_t{1}, size_t{64}, size_t{4096}, size_t{8192}, size_t{64}}) {
		DmaBlock b;
		ASSERT_EQ(arena->alloc(100, align, &b), 0);
		EXPECT_EQ(b.iova % align, 0u);
		EXPECT_EQ(b.len, 128u); /* rounded up to the granule */
		auto va = reinterpret_cast<uintptr_t>(b.va);
		EXPECT_GE(va, e.va);
		EXPECT_LE(va + b.len, e.va + e.len);
		EXPECT_EQ(b.iova, e.iova + (va - e.va));
		uint64_t iova;
		ASSERT_EQ(space.translate(b.va, b.len, &iova), 0);
		EXPECT_EQ(iova, b.iova);
		auto *bytes = static_cast<unsigned char *>(b.va);
		EXPECT_TRUE(
			std::all_of(bytes, bytes + b.len, [](unsigned char c) { return c == 0; }));
		std::memset(b.va, 0xab, b.len); /* dirty it: a reuse must come back zeroed */
		blocks.push_back(b);
	}
	EXPECT_EQ(arena->bytes_in_use(), 5 * 128u);
	for (const DmaBlock &b : blocks)
		ASSERT_EQ(arena->release(b), 0);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
	DmaBlock whole;
	ASSERT_EQ(arena->alloc(arena->capacity(), 4096, &whole), 0); /* coalesced again */
	auto *bytes = static_cast<unsigned char *>(whole.va);
	EXPECT_TRUE(std::all_of(bytes, bytes + whole.len, [](unsigned char c) { return c == 0; }));
}

TEST(MemArena, BadArgumentsAndFullArenaGiveExactCodes)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DmaArena> arena;
	ASSERT_EQ(DmaArena::create(space, small_pool(4 * kPage4K), &arena), 0);
	DmaBlock b;
	EXPECT_EQ(arena->alloc(0, 64, &b), -EINVAL);
	EXPECT_EQ(arena->alloc(64, 0, &b), -EINVAL);
	EXPECT_EQ(arena->alloc(64, 48, &b), -EINVAL);
	EXPECT_EQ(arena->alloc(64, 64, nullptr), -EINVAL);
	EXPECT_EQ(arena->alloc(4 * kPage4K + 1, 64, &b), -ENOMEM);
	ASSERT_EQ(arena->alloc(3 * kPage4K, 64, &b), 0);
	DmaBlock c;
	EXPECT_EQ(arena->alloc(2 * kPage4K, 64, &c), -ENOMEM);
	EXPECT_EQ(arena->bytes_in_use(), 3 * kPage4K);
	ASSERT_EQ(arena->release(b), 0);
	EXPECT_EQ(arena->release(b), -ENOENT); /* double free */
	int x;
	EXPECT_EQ(arena->release(DmaBlock{&x, 0, 64}), -ENOENT);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST(MemArena, DestroyRemovesItsPoolFromTheSpace)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DmaArena> arena;
	ASSERT_EQ(DmaArena::create(space, small_pool(), &arena), 0);
	DmaBlock b;
	ASSERT_EQ(arena->alloc(64, 64, &b), 0);
	arena.reset();
	EXPECT_EQ(space.pool_count(), 0u);
	EXPECT_EQ(mapper.live_mappings(), 0u);
	uint64_t iova;
	EXPECT_EQ(space.translate(b.va, 1, &iova), -EFAULT);
}

TEST(MemArena, CreateFailureLeavesNothing)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DmaArena> arena;
	mapper.fail_next_maps(1, -EIO);
	EXPECT_EQ(DmaArena::create(space, small_pool(), &arena), -EIO);
	EXPECT_EQ(arena, nullptr);
	EXPECT_EQ(space.pool_count(), 0u);
	EXPECT_EQ(mapper.live_mappings(), 0u);
	PoolParams bad = small_pool();
	bad.size = 0;
	EXPECT_EQ(DmaArena::create(space, bad, &arena), -EINVAL);
	EXPECT_EQ(mapper.count(true, -EIO), 1u);
}

TEST(MemArena, ThreadsGetDisjointBlocks)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	std::unique_ptr<DmaArena> arena;
	ASSERT_EQ(DmaArena::create(space, small_pool(256 * kPage4K), &arena), 0);
	std::atomic<int> errors{0};
	auto worker = [&](unsigned char tag) {
		std::vector<DmaBlock> mine;
		for (int i = 0; i < 2000; i++) {
			DmaBlock b;
			if (arena->alloc(64 + (i % 7) * 64, 64, &b) != 0) {
				errors++;
				continue;
			}
			auto *p = static_cast<unsigned char *>(b.va);
			for (size_t k = 0; k < b.len; k++)
				if (p[k] != 0)
					errors++;
			std::memset(b.va, tag, b.len);
			mine.push_back(b);
			if (mine.size() > 20) {
				const DmaBlock &old = mine.front();
				auto *q = static_cast<unsigned char *>(old.va);
				for (size_t k = 0; k < old.len; k++)
					if (q[k] != tag)
						errors++; /* someone else wrote into my block */
				if (arena->release(old) != 0)
					errors++;
				mine.erase(mine.begin());
			}
		}
		for (const DmaBlock &b : mine)
			if (arena->release(b) != 0)
				errors++;
	};
	std::thread t1(worker, 1), t2(worker, 2);
	t1.join();
	t2.join();
	EXPECT_EQ(errors.load(), 0);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}
