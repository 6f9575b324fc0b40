/* SPDX-License-Identifier: BSD-3-Clause */
/* The device model's per-thread slots: a counter and a reader-writer lock whose readers meet
 * on no shared cache line. */
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "emu_slots.h"

using namespace nicmr::emu;

TEST(EmuSlots, ThreadsKeepTheirSlot)
{
	const size_t mine = emu_thread_slot();
	EXPECT_LT(mine, kThreadSlots);
	EXPECT_EQ(emu_thread_slot(), mine);
	size_t other = kThreadSlots;
	std::thread([&] { other = emu_thread_slot(); }).join();
	EXPECT_LT(other, kThreadSlots);
	EXPECT_NE(other, mine) << "two live threads own different slots";
}

TEST(EmuSlots, AnExitingThreadGivesItsSlotBack)
{
	const SlotClaim mine = emu_thread_claim();
	ASSERT_TRUE(mine.own()) << "the test's thread is the first to claim a slot";
	EXPECT_EQ(mine.fence_free(), nicmr::emu::detail::membarrier_ready());
	SlotClaim first{SlotClaim::kUnset}, second{SlotClaim::kUnset};
	std::thread([&] { first = emu_thread_claim(); }).join();
	std::thread([&] { second = emu_thread_claim(); }).join();
	ASSERT_TRUE(first.own());
	EXPECT_EQ(second.slot(), first.slot()) << "the lowest free slot, given back at exit";
	EXPECT_TRUE(second.own());
}

/* More live threads than slots: the first kSharedSlot own one each, the rest share the last
 * and count with read-modify-writes, so no add is lost either way. */
TEST(EmuSlots, ManyThreadsBeyondTheSlotsShareTheLastOne)
{
	constexpr int kThreads = static_cast<int>(kThreadSlots) + 8;
	constexpr int kAdds = 2000;
	/* The test's thread holds a slot of its own; no other thread lives before the workers. */
	ASSERT_TRUE(emu_thread_claim().own());
	SlotCounter c;
	std::vector<SlotClaim> claims(kThreads, SlotClaim{SlotClaim::kUnset});
	std::atomic<int> arrived{0};
	std::vector<std::thread> ts;
	for (int t = 0; t < kThreads; t++)
		ts.emplace_back([&, t] {
			claims[t] = emu_thread_claim();
			/* Every thread stays alive until all have claimed. */
			arrived.fetch_add(1);
			while (arrived.load() < kThreads)
				std::this_thread::yield();
			for (int i = 0; i < kAdds; i++)
				c.add();
		});
	for (auto &t : ts)
		t.join();
	std::vector<int> owners(kThreadSlots, 0);
	int shared = 0;
	for (const SlotClaim &cl : claims) {
		ASSERT_LT(cl.slot(), kThreadSlots);
		if (cl.own()) {
			EXPECT_NE(cl.slot(), kSharedSlot);
			owners[cl.slot()]++;
		} else {
			EXPECT_EQ(cl.slot(), kSharedSlot);
			EXPECT_FALSE(cl.fence_free());
			shared++;
		}
	}
	for (size_t i = 0; i < kThreadSlots; i++)
		EXPECT_LE(owners[i], 1) << "slot " << i << " owned twice";
	/* The test's thread owns one slot; the others that could, own the rest. */
	EXPECT_EQ(shared, kThreads - static_cast<int>(kSharedSlot - 1));
	EXPECT_EQ(c.sum(), uint64_t{kThreads} * kAdds);
}

TEST(EmuSlots, CounterSumsEveryThreadsAdds)
{
	SlotCounter c;
	c.add();
	c.add(4);
	std::vector<std::thread> ts;
	for (int t = 0; t < 3; t++)
		ts.emplace_back([&] {
			for (int i = 0; i < 1000; i++)
				c.add();
		});
	for (auto &t : ts)
		t.join();
	EXPECT_EQ(c.sum(), 3005u);
}

TEST(EmuSlots, WriterExcludesReadersAndReadersShare)
{
	SlotRwLock l;
	std::shared_lock r(l);
	/* A second reader on another thread gets in while this one holds it. */
	bool in = false;
	std::thread([&] {
		std::shared_lock r2(l);
		in = true;
	}).join();
	EXPECT_TRUE(in);
	/* A writer waits for this reader. */
	std::atomic<bool> wrote{false};
	std::thread w([&] {
		std::unique_lock x(l);
		wrote = true;
	});
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
	EXPECT_FALSE(wrote.load());
	r.unlock();
	w.join();
	EXPECT_TRUE(wrote.load());
}

namespace {

/*
 * Readers check an invariant the writer breaks only inside its critical section (two plain
 * words kept equal): a reader that ever sees them differ ran alongside a writer. Readers and
 * the writer run side by side for NICMR_SLOTS_MS milliseconds (default 300), so that the test
 * takes as long on a loaded machine as on an idle one. The writer yields between writes: one
 * that never lets go starves readers on two busy cores (the lock prefers writers).
 */
void readers_never_see_a_writer_half_way(int n_readers)
{
	const char *env = std::getenv("NICMR_SLOTS_MS");
	const std::chrono::milliseconds run(env ? std::atoi(env) : 300);
	SlotRwLock l;
	uint64_t a = 0, b = 0; /* plain: the lock alone orders them */
	std::atomic<bool> done{false};
	std::atomic<int> bad{0};
	std::atomic<uint64_t> reads{0};
	std::vector<std::thread> threads;
	for (int t = 0; t < n_readers; t++)
		threads.emplace_back([&] {
			uint64_t n = 0;
			for (; !done.load(std::memory_order_relaxed); n++) {
				std::shared_lock r(l);
				if (a != b)
					bad.fetch_add(1);
			}
			reads.fetch_add(n);
		});
	threads.emplace_back([&] {
		while (!done.load(std::memory_order_relaxed)) {
			{
				std::unique_lock w(l);
				a++;
				std::this_thread::yield();
				b++;
			}
			std::this_thread::yield();
		}
	});
	std::this_thread::sleep_for(run);
	done = true;
	for (auto &t : threads)
		t.join();
	EXPECT_EQ(bad.load(), 0);
	EXPECT_EQ(a, b);
	EXPECT_GT(a, 0u);
	EXPECT_GT(reads.load(), 0u);
}

} // namespace

/* Readers on slots of their own: fence-free where membarrier is available. */
TEST(EmuSlots, ConcurrentReadersNeverSeeAWriterHalfWay)
{
	readers_never_see_a_writer_half_way(3);
}

/* More readers than slots: some own theirs, the rest share the last one. */
TEST(EmuSlots, ConcurrentReadersOnOwnAndSharedSlotsNeverSeeAWriterHalfWay)
{
	readers_never_see_a_writer_half_way(static_cast<int>(kThreadSlots) + 4);
}
