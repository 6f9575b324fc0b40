/* SPDX-License-Identifier: BSD-3-Clause */
/* DmaSpace: placement, mapping once, translation, errors, and readers during add/remove. */
#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <fcntl.h>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mem_describe.h"
#include "mem_space.h"
#include "mem_test_mapper.h"
#include "mem_test_util.h"

using namespace nicmr::mem;
using nicmr::mem::test::AnonMemory;
using nicmr::mem::test::RecordingMapper;

namespace {

std::unique_ptr<Pool> import_pool(void *va, size_t len, const char *name = "imp")
{
	std::unique_ptr<Pool> pool;
	EXPECT_EQ(Pool::import(va, len, kPage4K, -1, name, &pool), 0);
	return pool;
}

} // namespace

TEST(MemSpace, AddPlacesPoolAlignedAndCongruentAndMapsItOnce)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	AnonMemory mem(3 << 20);
	const PoolEntry *e = nullptr;
	ASSERT_EQ(space.add_pool(import_pool(mem.va(), mem.len()), &e), 0);
	ASSERT_NE(e, nullptr);
	EXPECT_EQ(e->va, reinterpret_cast<uintptr_t>(mem.va()));
	EXPECT_EQ(e->len, mem.len());
	EXPECT_EQ(e->iova_align, std::bit_ceil(mem.len()));
	EXPECT_EQ(e->iova % e->iova_align, e->va % e->iova_align);
	auto calls = mapper.calls();
	ASSERT_EQ(calls.size(), 1u);
	EXPECT_TRUE(calls[0].map);
	EXPECT_EQ(calls[0].va, mem.va());
	EXPECT_EQ(calls[0].iova, e->iova);
	EXPECT_EQ(calls[0].len, mem.len());
	EXPECT_EQ(space.pool_count(), 1u);
}

TEST(MemSpace, RemoveUnmapsOnceAndTwiceIsENOENT)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	AnonMemory mem(1 << 20);
	const PoolEntry *e = nullptr;
	auto pool = import_pool(mem.va(), mem.len());
	const Pool *raw = pool.get();
	ASSERT_EQ(space.add_pool(std::move(pool), &e), 0);
	uint64_t iova = e->iova;
	EXPECT_EQ(space.remove_pool(raw), 0);
	EXPECT_EQ(space.remove_pool(raw), -ENOENT);
	EXPECT_EQ(space.remove_pool(nullptr), -ENOENT);
	EXPECT_EQ(mapper.count(true), 1u);
	EXPECT_EQ(mapper.count(false), 1u);
	EXPECT_EQ(mapper.live_mappings(), 0u);
	EXPECT_EQ(space.pool_count(), 0u);
	EXPECT_EQ(space.lookup(mem.va(), 1), nullptr);
	/* The IOVA came back: the same pool lands at the same place again. */
	ASSERT_EQ(space.add_pool(import_pool(mem.va(), mem.len()), &e), 0);
	EXPECT_EQ(e->iova, iova);
}

TEST(MemSpace, TranslateGivesIovaPlusOffsetInsideAndEFAULTOutside)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	AnonMemory mem(8 * kPage4K);
	const PoolEntry *e = nullptr;
	ASSERT_EQ(space.add_pool(import_pool(mem.va() + kPage4K, 6 * kPage4K), &e), 0);
	char *lo = mem.va() + kPage4K, *hi = lo + 6 * kPage4K;
	uint64_t iova = 0;
	EXPECT_EQ(space.translate(lo, 1, &iova), 0);
	EXPECT_EQ(iova, e->iova);
	EXPECT_EQ(space.translate(lo + 12345, 100, &iova), 0);
	EXPECT_EQ(iova, e->iova + 12345);
	EXPECT_EQ(space.translate(hi - 1, 1, &iova), 0);
	EXPECT_EQ(iova, e->iova + 6 * kPage4K - 1);
	EXPECT_EQ(space.translate(lo, 6 * kPage4K, &iova), 0);
	EXPECT_EQ(space.translate(hi, 1, &iova), -EFAULT);
	EXPECT_EQ(space.translate(hi, 0, &iova),
		  -EFAULT); /* even an empty range must start inside */
	EXPECT_EQ(space.translate(hi - 1, 0, &iova), 0);
	EXPECT_EQ(space.translate(lo - 1, 1, &iova), -EFAULT);
	EXPECT_EQ(space.translate(hi - 1, 2, &iova), -EFAULT); /* runs past the end */
	EXPECT_EQ(space.translate(lo, SIZE_MAX, &iova), -EFAULT);
	EXPECT_EQ(space.lookup(lo + 100, 10), e);
	EXPECT_EQ(space.lookup(hi, 1), nullptr);
}

TEST(MemSpace, AddressInNoPoolIsEFAULTInAnEmptySpace)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	int x;
	uint64_t iova = 77;
	EXPECT_EQ(space.translate(&x, sizeof(x), &iova), -EFAULT);
	EXPECT_EQ(iova, 77u);
	EXPECT_EQ(space.lookup(&x, 1), nullptr);
}

TEST(MemSpace, TranslationIsCorrectAcrossManyPools)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	constexpr size_t kPools = 64;
	AnonMemory mem(kPools * 2 * kPage4K);
	std::vector<const PoolEntry *> entries;
	/* Every other 4 KiB page is a pool: the gaps must translate to nothing. */
	for (size_t i = 0; i < kPools; i++) {
		const PoolEntry *e;
		ASSERT_EQ(space.add_pool(import_pool(mem.va() + 2 * i * kPage4K, kPage4K), &e), 0);
		entries.push_back(e);
	}
	std::mt19937 rng(7);
	for (int k = 0; k < 10000; k++) {
		size_t i = rng() % kPools, off = rng() % kPage4K;
		uint64_t iova;
		ASSERT_EQ(space.translate(mem.va() + 2 * i * kPage4K + off, 1, &iova), 0);
		ASSERT_EQ(iova, entries[i]->iova + off);
		ASSERT_EQ(space.lookup(mem.va() + 2 * i * kPage4K + off, 1), entries[i]);
		ASSERT_EQ(space.translate(mem.va() + (2 * i + 1) * kPage4K + off, 1, &iova),
			  -EFAULT);
	}
}

/* Lookup against a linear search, over random layouts: clustered, sparse, large and small. */
TEST(MemSpace, LookupAgreesWithALinearSearchOverRandomLayouts)
{
	constexpr size_t kPages = 2048;
	AnonMemory near(kPages * kPage4K), far(64 * kPage4K);
	std::mt19937_64 rng(99);
	for (int layout = 0; layout < 40; layout++) {
		RecordingMapper mapper;
		DmaSpace space(mapper);
		std::vector<std::pair<char *, size_t>> pools;
		size_t page = rng() % 8;
		while (page < kPages) {
			size_t n = 1 + (rng() % 4 == 0 ? rng() % 200 : rng() % 3);
			n = std::min(n, kPages - page);
			char *va = near.va() + page * kPage4K;
			ASSERT_EQ(space.add_pool(import_pool(va, n * kPage4K), nullptr), 0);
			pools.emplace_back(va, n * kPage4K);
			page += n + rng() % (layout % 2 ? 2 : 64);
		}
		if (layout % 3 == 0) { /* one pool far away stretches the span */
			ASSERT_EQ(space.add_pool(import_pool(far.va(), far.len()), nullptr), 0);
			pools.emplace_back(far.va(), far.len());
		}
		/* Remove a few so that the index is rebuilt from a list with holes. */
		for (int r = 0; r < 3 && pools.size() > 4; r++) {
			size_t k = rng() % pools.size();
			const PoolEntry *e = space.lookup(pools[k].first, 1);
			ASSERT_NE(e, nullptr);
			ASSERT_EQ(space.remove_pool(e->pool), 0);
			pools.erase(pools.begin() + static_cast<long>(k));
		}
		for (int q = 0; q < 3000; q++) {
			char *a = q % 10 == 0 ? far.va() + rng() % far.len()
					      : near.va() + rng() % near.len();
			size_t len = 1 + rng() % 8192;
			const std::pair<char *, size_t> *want = nullptr;
			for (const auto &p : pools)
				if (a >= p.first && a < p.first + p.second &&
				    len <= static_cast<size_t>(p.first + p.second - a))
					want = &p;
			const PoolEntry *got = space.lookup(a, len);
			if (want == nullptr) {
				ASSERT_EQ(got, nullptr) << "layout " << layout << " q " << q;
			} else {
				ASSERT_NE(got, nullptr) << "layout " << layout << " q " << q;
				ASSERT_EQ(got->va, reinterpret_cast<uintptr_t>(want->first));
				uint64_t iova;
				ASSERT_EQ(space.translate(a, len, &iova), 0);
				ASSERT_EQ(iova, got->iova + static_cast<uint64_t>(a - want->first));
			}
		}
	}
}

/* Many random pools: each at A = min(1 GiB, bit_ceil(len)) or less, congruent, mapped apart. */
TEST(MemSpace, RandomPoolsAreAlignedCongruentAndDisjointInIova)
{
	/* Two ranges with a hole, 4 GiB in all: tight enough that some pools get less than A. */
	RecordingMapper mapper({{1ull << 20, (3ull << 30) - 1}, {4ull << 30, (5ull << 30) - 1}});
	DmaSpace space(mapper);
	constexpr size_t kPages = 64 * 1024; /* 256 MiB of address space, never touched */
	AnonMemory mem(kPages * kPage4K);
	std::mt19937_64 rng(2024);
	size_t page = 0, placed = 0, reduced = 0;
	while (page < kPages) {
		size_t n = 1 + (rng() % 5 == 0 ? rng() % 8192 : rng() % 64);
		n = std::min(n, kPages - page);
		const PoolEntry *e;
		ASSERT_EQ(space.add_pool(import_pool(mem.va() + page * kPage4K, n * kPage4K), &e),
			  0);
		const size_t len = n * kPage4K;
		const size_t ideal = std::min(DmaSpace::kMaxIovaAlign, std::bit_ceil(len));
		ASSERT_TRUE(std::has_single_bit(e->iova_align));
		ASSERT_LE(e->iova_align, ideal);
		ASSERT_GE(e->iova_align, kPage4K);
		ASSERT_EQ(e->iova % e->iova_align, e->va % e->iova_align);
		reduced += e->iova_align < ideal;
		placed++;
		page += n + rng() % 16;
	}
	/* The mapper refuses overlapping IOVA (-EEXIST): every add succeeding proves disjointness.
	 */
	EXPECT_EQ(mapper.live_mappings(), placed);
	EXPECT_EQ(space.pool_count(), placed);
	RecordProperty("pools", static_cast<int>(placed));
	RecordProperty("below_ideal_alignment", static_cast<int>(reduced));
}

TEST(MemSpace, OverlappingPoolIsEEXIST)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	AnonMemory mem(4 * kPage4K);
	ASSERT_EQ(space.add_pool(import_pool(mem.va() + kPage4K, 2 * kPage4K), nullptr), 0);
	EXPECT_EQ(space.add_pool(import_pool(mem.va(), 2 * kPage4K), nullptr), -EEXIST);
	EXPECT_EQ(space.add_pool(import_pool(mem.va() + 2 * kPage4K, 2 * kPage4K), nullptr),
		  -EEXIST);
	EXPECT_EQ(space.add_pool(import_pool(mem.va(), kPage4K), nullptr),
		  0); /* touching is fine */
	EXPECT_EQ(mapper.count(true), 2u);
}

TEST(MemSpace, IovaExhaustionIsENOSPCAndLeaksNothing)
{
	/* 8 MiB of IOVA. */
	RecordingMapper mapper({{1ull << 30, (1ull << 30) + (8 << 20) - 1}});
	DmaSpace space(mapper);
	AnonMemory mem(16 << 20);
	std::vector<const Pool *> pools;
	int rc = 0;
	size_t i = 0;
	for (; i < 16; i++) {
		auto pool = import_pool(mem.va() + i * (1 << 20), 1 << 20);
		const Pool *raw = pool.get();
		rc = space.add_pool(std::move(pool), nullptr);
		if (rc != 0)
			break;
		pools.push_back(raw);
	}
	EXPECT_EQ(rc, -ENOSPC);
	EXPECT_EQ(pools.size(), 8u);
	EXPECT_EQ(mapper.count(true), 8u); /* the failed one never reached the mapper */
	for (const Pool *p : pools)
		ASSERT_EQ(space.remove_pool(p), 0);
	EXPECT_EQ(mapper.live_mappings(), 0u);
	/* Everything came back: the whole 8 MiB fits as one pool. */
	EXPECT_EQ(space.add_pool(import_pool(mem.va(), 8 << 20), nullptr), 0);
}

TEST(MemSpace, NoPoolIsEverPlacedOnTheFirstIovaPage)
{
	/* Ranges from IOVA 0: the first 4 KiB page is kept out, so a 4 KiB pool lands at 4 KiB
	 * and a range that lies wholly in the guard page gives no room at all. */
	RecordingMapper mapper({{0, (1ull << 20) - 1}});
	DmaSpace space(mapper);
	AnonMemory mem(kPage4K);
	const PoolEntry *e = nullptr;
	ASSERT_EQ(space.add_pool(import_pool(mem.va(), kPage4K), &e), 0);
	EXPECT_GE(e->iova, kNullIovaGuard);
	ASSERT_EQ(space.remove_pool(e->pool), 0);

	RecordingMapper guard_only({{0, kNullIovaGuard - 1}});
	DmaSpace tiny(guard_only);
	EXPECT_EQ(tiny.add_pool(import_pool(mem.va(), kPage4K), nullptr), -ENOSPC);
	EXPECT_EQ(guard_only.count(true), 0u);
}

TEST(MemSpace, AlignmentShrinksToWhatTheRangesAllow)
{
	AnonMemory mem(4 << 20);
	const uintptr_t va = reinterpret_cast<uintptr_t>(mem.va());
	/* A range of exactly 4 MiB whose start agrees with the VA modulo 64 KiB, not 128 KiB. */
	uint64_t start = (1ull << 32) + (va & 0xffff) + ((va & 0x10000) ^ 0x10000);
	RecordingMapper mapper({{start, start + (4 << 20) - 1}});
	DmaSpace space(mapper);
	const PoolEntry *e;
	ASSERT_EQ(space.add_pool(import_pool(mem.va(), 4 << 20), &e), 0);
	EXPECT_EQ(e->iova, start);
	EXPECT_EQ(e->iova_align, 0x10000u);
	EXPECT_EQ(e->iova % e->iova_align, e->va % e->iova_align);
}

TEST(MemSpace, DmaMapFailureReturnsTheIovaAndFreesThePool)
{
	/* Room for exactly one 16 KiB pool: a leaked IOVA would make the second add fail. */
	RecordingMapper mapper({{1ull << 32, (1ull << 32) + 4 * kPage4K - 1}});
	DmaSpace space(mapper);
	PoolParams p;
	p.size = 4 * kPage4K;
	p.page_size = kPage4K;
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(p, &pool), 0);
	void *va = pool->va();
	int fd = pool->fd();
	mapper.fail_next_maps(1, -ENOSPC);
	EXPECT_EQ(space.add_pool(std::move(pool), nullptr), -ENOSPC);
	EXPECT_EQ(space.pool_count(), 0u);
	EXPECT_EQ(mapper.live_mappings(), 0u);
	EXPECT_EQ(fcntl(fd, F_GETFD), -1); /* pool destroyed: fd closed */
	unsigned char v;
	EXPECT_EQ(mincore(va, kPage4K, &v), -1); /* and memory unmapped */
	AnonMemory mem(4 * kPage4K);
	const PoolEntry *e;
	ASSERT_EQ(space.add_pool(import_pool(mem.va(), mem.len()), &e), 0);
	EXPECT_EQ(e->iova, 1ull << 32);
}

TEST(MemSpace, DmaMapFailureOnHugepagesReturnsThePages)
{
	NICMR_NEED_HUGEPAGES(kPage2M, 2);
	RecordingMapper mapper;
	DmaSpace space(mapper);
	size_t before = 0, after = 0;
	for (int attempt = 0; attempt < 5; attempt++) {
		before = hugepages_free(kPage2M);
		PoolParams p;
		p.size = 2 * kPage2M;
		std::unique_ptr<Pool> pool;
		ASSERT_EQ(Pool::create(p, &pool), 0);
		mapper.fail_next_maps(1, -EIO);
		ASSERT_EQ(space.add_pool(std::move(pool), nullptr), -EIO);
		after = hugepages_free(kPage2M);
		if (before == after)
			break; /* other processes may move the count: a leak shows every time */
	}
	EXPECT_EQ(before, after);
	EXPECT_EQ(mapper.live_mappings(), 0u);
}

TEST(MemSpace, PoolWithPagesBelowTheIommuPageIsEINVAL)
{
	RecordingMapper mapper({{0, (1ull << 40) - 1}}, 1 << 16);
	DmaSpace space(mapper);
	AnonMemory mem(1 << 20);
	EXPECT_EQ(space.add_pool(import_pool(mem.va(), 1 << 16), nullptr), -EINVAL);
	EXPECT_EQ(space.add_pool(nullptr, nullptr), -EINVAL);
	EXPECT_EQ(mapper.count(true), 0u);
}

TEST(MemSpace, DestructorUnmapsAndFreesEveryPool)
{
	RecordingMapper mapper;
	PoolParams p;
	p.size = kPage4K;
	p.page_size = kPage4K;
	std::vector<int> fds;
	{
		DmaSpace space(mapper);
		for (int i = 0; i < 3; i++) {
			std::unique_ptr<Pool> pool;
			ASSERT_EQ(Pool::create(p, &pool), 0);
			fds.push_back(pool->fd());
			ASSERT_EQ(space.add_pool(std::move(pool), nullptr), 0);
		}
	}
	EXPECT_EQ(mapper.count(false), 3u);
	EXPECT_EQ(mapper.live_mappings(), 0u);
	for (int fd : fds)
		EXPECT_EQ(fcntl(fd, F_GETFD), -1);
}

TEST(MemSpace, HugepagePoolsLandOnTheirPageAlignment)
{
	NICMR_NEED_HUGEPAGES(kPage2M, 3);
	RecordingMapper mapper;
	DmaSpace space(mapper);
	PoolParams p;
	p.size = 3 * kPage2M;
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(p, &pool), 0);
	const PoolEntry *e;
	ASSERT_EQ(space.add_pool(std::move(pool), &e), 0);
	EXPECT_EQ(e->iova_align, 4 * kPage2M);
	EXPECT_EQ(e->iova % kPage2M, 0u);
	EXPECT_EQ(e->iova % e->iova_align, e->va % e->iova_align);
	std::string d = describe(*e);
	EXPECT_NE(d.find("3 x 2 MiB pages"), std::string::npos) << d;
	EXPECT_NE(d.find("aligned 8 MiB"), std::string::npos) << d;
	char iova_hex[32];
	std::snprintf(iova_hex, sizeof(iova_hex), "IOVA [0x%llx", (unsigned long long)e->iova);
	EXPECT_NE(d.find(iova_hex), std::string::npos) << d;
}

TEST(MemSpace, OneGigPoolIsPlacedOnAOneGigBoundary)
{
	NICMR_NEED_HUGEPAGES(kPage1G, 1);
	RecordingMapper mapper;
	DmaSpace space(mapper);
	PoolParams p;
	p.size = kPage1G;
	p.page_size = kPage1G;
	std::unique_ptr<Pool> pool;
	ASSERT_EQ(Pool::create(p, &pool), 0);
	const PoolEntry *e;
	ASSERT_EQ(space.add_pool(std::move(pool), &e), 0);
	EXPECT_EQ(e->iova_align, kPage1G);
	EXPECT_EQ(e->iova % kPage1G, 0u);
}

TEST(MemSpace, ReclaimRetiredWaitsForReadersThenFrees)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	AnonMemory mem(4 * kPage4K);
	auto pool = import_pool(mem.va(), kPage4K);
	const Pool *raw = pool.get();
	ASSERT_EQ(space.add_pool(std::move(pool), nullptr), 0);
	ASSERT_EQ(space.remove_pool(raw), 0);
	bool waited = false;
	/* Two snapshots retired (empty, then one pool) and one entry. */
	EXPECT_EQ(space.reclaim_retired([&] { waited = true; }), 3u);
	EXPECT_TRUE(waited);
	EXPECT_EQ(space.reclaim_retired([] {}), 0u);
}

/*
 * Readers translate without a lock while a writer adds and removes pools. A stable pool must
 * always translate right; a churned one translates either right or not at all.
 */
TEST(MemSpace, ConcurrentReadersSeeConsistentSnapshotsDuringAddRemove)
{
	RecordingMapper mapper;
	DmaSpace space(mapper);
	constexpr size_t kChurn = 8;
	AnonMemory mem((kChurn + 1) * 2 * kPage4K);
	const PoolEntry *stable;
	ASSERT_EQ(space.add_pool(import_pool(mem.va(), kPage4K), &stable), 0);
	const uint64_t stable_iova = stable->iova;
	std::atomic<bool> stop{false};
	std::atomic<size_t> errors{0}, hits{0}, started{0};
	auto reader = [&] {
		std::mt19937 rng(std::hash<std::thread::id>()(std::this_thread::get_id()));
		started++;
		while (!stop.load(std::memory_order_relaxed)) {
			uint64_t iova;
			size_t off = rng() % kPage4K;
			if (space.translate(mem.va() + off, 1, &iova) != 0 ||
			    iova != stable_iova + off)
				errors++;
			size_t i = 1 + rng() % kChurn;
			char *a = mem.va() + 2 * i * kPage4K + off;
			const PoolEntry *e = space.lookup(a, 1);
			if (e != nullptr) {
				hits++;
				if (space.translate(a, 1, &iova) == 0 &&
				    (e->va != reinterpret_cast<uintptr_t>(a - off) ||
				     e->len != kPage4K))
					errors++;
			}
		}
	};
	std::thread r1(reader), r2(reader);
	/* On a loaded machine the readers may start late: churn only once both run, and go on
	 * until one of them has seen a churned pool (10 s at most). */
	while (started.load() < 2)
		std::this_thread::yield();
	const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	std::vector<const Pool *> live(kChurn + 1, nullptr);
	for (int round = 0;
	     round < 3000 || (hits.load() == 0 && std::chrono::steady_clock::now() < give_up);
	     round++) {
		size_t i = 1 + round % kChurn;
		if (live[i] == nullptr) {
			auto pool = import_pool(mem.va() + 2 * i * kPage4K, kPage4K);
			live[i] = pool.get();
			ASSERT_EQ(space.add_pool(std::move(pool), nullptr), 0);
		} else {
			ASSERT_EQ(space.remove_pool(live[i]), 0);
			live[i] = nullptr;
		}
	}
	stop = true;
	r1.join();
	r2.join();
	EXPECT_EQ(errors.load(), 0u);
	EXPECT_GT(hits.load(), 0u) << "readers never saw a churned pool: the test proved nothing";
}
