/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Writers register and deregister while readers look keys up and report quiescent states;
 * every lookup is checked against a ground-truth word per index that the writers keep:
 *   - a key whose deregistration had returned before the lookup began must be refused;
 *   - a key that was live for the whole lookup must be accepted, with the right IOVA.
 * The run lasts NICMR_MR_STRESS_SECONDS (default 2) seconds. Built with -Db_sanitize=thread
 * it is the data-race check of the lockless paths.
 */
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <gtest/gtest.h>
#include <random>
#include <thread>
#include <vector>

#include "mr_engine.h"

using namespace nicmr::mr;

namespace {

constexpr uint32_t kIdx = 512; /* small: a quarter live, variants wrap often */
constexpr unsigned kWriters = 2;
constexpr unsigned kReaders = 2;

/* Ground truth per index: seq:30 | state:2 | mkey:32. */
enum Truth : uint64_t { kDead = 0, kLive = 1, kDying = 2 };
constexpr uint64_t truth_word(uint64_t seq, Truth st, uint32_t mkey)
{
	return seq << 34 | uint64_t(st) << 32 | mkey;
}

/* The region at an index is always the same, so readers know what to expect of any key. */
uint64_t region_addr(uint32_t k)
{
	return uint64_t(mkey_index(k)) << 24;
}
uint64_t region_len(uint32_t k)
{
	return 0x1000u * (1 + mkey_index(k) % 7);
}
uint64_t region_iova(uint32_t k)
{
	return region_addr(k) + 0x100000000000;
}

double seconds()
{
	const char *s = std::getenv("NICMR_MR_STRESS_SECONDS");
	double v = s ? std::atof(s) : 2.0;
	return v > 0 ? v : 2.0;
}

} // namespace

TEST(MrStress, LookupsAgreeWithGroundTruthWhileKeysChurn)
{
	NullProgrammer prog;
	std::unique_ptr<Engine> e;
	ASSERT_EQ(Engine::create({kIdx, kWriters + kReaders, 9}, prog, &e), 0);
	std::vector<std::atomic<uint64_t>> truth(kIdx);
	for (auto &t : truth)
		t.store(0);
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> bad_dead{0}, bad_live{0}, bad_rc{0}, writer_errors{0};
	std::atomic<uint64_t> checked_dead{0}, checked_live{0}, regs{0};

	auto writer = [&](unsigned id) {
		/* Writers are QSBR readers too and report only between a deregistration's
		 * "dead" truth store and their next step: an index is not reused before its
		 * truth says dead, which keeps each index's truth a single history. */
		ASSERT_EQ(e->reader_register(id), 0);
		KeyCache cache(e->keys());
		std::mt19937 rng(id * 7919 + 1);
		std::vector<uint32_t> mine;
		while (!stop.load(std::memory_order_relaxed)) {
			e->reader_quiescent(id);
			if (mine.size() < 64 && (mine.size() < 8 || rng() % 2)) {
				/* The region depends on the index only, and the index on the
				 * key: ask for a key, then register the region it implies. */
				uint32_t k;
				if (e->keys().alloc(&cache, &k) != 0)
					continue;
				e->keys().release(&cache, k);
				RegRequest r;
				r.addr = region_addr(k);
				r.len = region_len(k);
				r.access = kAccessLocalRead | kAccessRemoteRead;
				r.pd = 1;
				r.iova = region_iova(k);
				/* The released index is on top of our cache: reg takes it. */
				if (e->reg(r, &cache, &k) != 0 || r.addr != region_addr(k)) {
					writer_errors++;
					continue;
				}
				const uint64_t seq = truth[mkey_index(k)].load() >> 34;
				truth[mkey_index(k)].store(truth_word(seq + 1, kLive, k),
							   std::memory_order_release);
				mine.push_back(k);
				regs++;
			} else if (!mine.empty()) {
				const size_t i = rng() % mine.size();
				const uint32_t k = mine[i];
				mine[i] = mine.back();
				mine.pop_back();
				auto &t = truth[mkey_index(k)];
				const uint64_t seq = t.load() >> 34;
				t.store(truth_word(seq + 1, kDying, k), std::memory_order_release);
				if (e->dereg(k, &cache) != 0)
					writer_errors++;
				t.store(truth_word(seq + 2, kDead, k), std::memory_order_release);
			}
		}
		for (uint32_t k : mine) {
			auto &t = truth[mkey_index(k)];
			const uint64_t seq = t.load() >> 34;
			t.store(truth_word(seq + 1, kDying, k), std::memory_order_release);
			if (e->dereg(k, &cache) != 0)
				writer_errors++;
			t.store(truth_word(seq + 2, kDead, k), std::memory_order_release);
		}
		e->reader_unregister(id);
	};

	auto reader = [&](unsigned id) {
		ASSERT_EQ(e->reader_register(id), 0);
		std::mt19937 rng(id * 104729 + 3);
		unsigned n = 0;
		while (!stop.load(std::memory_order_relaxed)) {
			const uint32_t index = 1 + rng() % (kIdx - 1);
			/* Acquire: what the writer did before its truth store (reg returned, or
			 * dereg returned) happens before our lookup. */
			const uint64_t s1 = truth[index].load(std::memory_order_acquire);
			const uint32_t k = static_cast<uint32_t>(s1);
			const auto st = static_cast<Truth>((s1 >> 32) & 3);
			const uint64_t off = rng() % region_len(k);
			LookupResult res{};
			const int rc =
				e->lookup({k, region_addr(k) + off, 1, kAccessRemoteRead, 1}, &res);
			/* Acquire: if the lookup saw any write of a dereg that began after s1,
			 * this load sees that dereg's "dying" store or later. */
			const uint64_t s2 = truth[index].load(std::memory_order_acquire);
			if (rc != 0 && rc != -ENOKEY && rc != -EAGAIN)
				bad_rc++;
			if (st == kDead && k != 0) {
				checked_dead++;
				if (rc == 0)
					bad_dead++;
			} else if (st == kLive && s2 == s1) {
				checked_live++;
				if (rc != 0 || res.iova != region_iova(k) + off)
					bad_live++;
			}
			if (++n % 8 == 0)
				e->reader_quiescent(id);
		}
		e->reader_unregister(id);
	};

	std::vector<std::thread> threads;
	for (unsigned w = 0; w < kWriters; ++w)
		threads.emplace_back(writer, w);
	for (unsigned r = 0; r < kReaders; ++r)
		threads.emplace_back(reader, kWriters + r);
	std::this_thread::sleep_for(std::chrono::duration<double>(seconds()));
	stop = true;
	for (auto &t : threads)
		t.join();

	EXPECT_EQ(writer_errors.load(), 0u);
	EXPECT_EQ(bad_rc.load(), 0u);
	EXPECT_EQ(bad_dead.load(), 0u) << "a lookup accepted a key whose dereg had returned";
	EXPECT_EQ(bad_live.load(), 0u) << "a lookup refused or mistranslated a live key";
	EXPECT_GT(regs.load(), 100u);
	EXPECT_GT(checked_dead.load(), 100u) << "the run checked too few dead keys to mean much";
	EXPECT_GT(checked_live.load(), 100u) << "the run checked too few live keys to mean much";
	std::printf("registrations %llu, dead keys checked %llu, live keys checked %llu\n",
		    static_cast<unsigned long long>(regs.load()),
		    static_cast<unsigned long long>(checked_dead.load()),
		    static_cast<unsigned long long>(checked_live.load()));

	/* Everything deregistered and every reader gone: all indices come back. */
	e->keys().reclaim(nullptr);
	EXPECT_EQ(e->keys().retiring_count(), 0u);
	EXPECT_EQ(e->keys().ring_free_count(), kIdx - 1);
	for (uint32_t i = 1; i < kIdx; ++i)
		ASSERT_EQ(e->keys().state_of(i, nullptr), KeyState::free) << i;
}
