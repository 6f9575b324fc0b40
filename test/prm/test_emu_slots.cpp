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
	EXPECT_NE(other, mine) << "slots are handed out round-robin";
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

/*
 * Readers check an invariant the writer breaks only inside its critical section (two plain
 * words kept equal): a reader that ever sees them differ ran alongside a writer. Rounds from
 * NICMR_SLOTS_ROUNDS (default 20,000 per reader).
 */
TEST(EmuSlots, ConcurrentReadersNeverSeeAWriterHalfWay)
{
	const char *env = std::getenv("NICMR_SLOTS_ROUNDS");
	const int rounds = env ? std::atoi(env) : 20000;
	SlotRwLock l;
	uint64_t a = 0, b = 0; /* plain: the lock alone orders them */
	std::atomic<bool> done{false}, wrote_once{false};
	std::atomic<int> bad{0};
	std::vector<std::thread> readers;
	for (int t = 0; t < 3; t++)
		readers.emplace_back([&] {
			while (!wrote_once.load())
				std::this_thread::yield();
			for (int i = 0; i < rounds; i++) {
				std::shared_lock r(l);
				if (a != b)
					bad.fetch_add(1);
			}
		});
	std::thread writer([&] {
		while (!done.load()) {
			{
				std::unique_lock w(l);
				a++;
				std::this_thread::yield();
				b++;
			}
			wrote_once = true;
		}
	});
	for (auto &t : readers)
		t.join();
	done = true;
	writer.join();
	EXPECT_EQ(bad.load(), 0);
	EXPECT_EQ(a, b);
	EXPECT_GT(a, 0u);
}
