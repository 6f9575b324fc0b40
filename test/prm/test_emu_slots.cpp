/* SPDX-License-Identifier: BSD-3-Clause */
/* The process's thread slots (lib/common's nicmr_thread.h: claims, exit watchers) and the
 * device model's per-thread state over them: a counter and a reader-writer lock whose readers
 * meet on no shared cache line. */
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "emu_slots.h"
#include "nicmr_thread.h"

using namespace nicmr;
using namespace nicmr::emu;

TEST(EmuSlots, ThreadsKeepTheirSlot)
{
	const size_t mine = thread_slot();
	EXPECT_LT(mine, kThreadSlots);
	EXPECT_EQ(thread_slot(), mine);
	size_t other = kThreadSlots;
	std::thread([&] { other = thread_slot(); }).join();
	EXPECT_LT(other, kThreadSlots);
	EXPECT_NE(other, mine) << "two live threads own different slots";
}

TEST(EmuSlots, AnExitingThreadGivesItsSlotBack)
{
	const SlotClaim mine = thread_claim();
	ASSERT_TRUE(mine.own()) << "the test's thread is the first to claim a slot";
	EXPECT_EQ(mine.fence_free(), nicmr::membarrier_ready());
	SlotClaim first{SlotClaim::kUnset}, second{SlotClaim::kUnset};
	std::thread([&] { first = thread_claim(); }).join();
	std::thread([&] { second = thread_claim(); }).join();
	ASSERT_TRUE(first.own());
	EXPECT_EQ(second.slot(), first.slot()) << "the lowest free slot, given back at exit";
	EXPECT_TRUE(second.own());
}

/* The owned mask (what the emulated IOMMU's grace period scans): a live thread's own slot is in
 * it, and leaves it when the thread exits; the shared slot's bit is never set. */
TEST(EmuSlots, TheOwnedMaskHasEveryLiveThreadsSlot)
{
	const SlotClaim mine = thread_claim();
	ASSERT_TRUE(mine.own());
	EXPECT_NE(thread_slots_owned() & uint64_t{1} << mine.slot(), 0u);
	size_t other = kThreadSlots;
	uint64_t while_alive = 0;
	std::thread([&] {
		other = thread_slot();
		while_alive = thread_slots_owned();
	}).join();
	ASSERT_LT(other, kSharedSlot);
	EXPECT_NE(while_alive & uint64_t{1} << other, 0u);
	EXPECT_NE(while_alive & uint64_t{1} << mine.slot(), 0u);
	EXPECT_EQ(thread_slots_owned() & uint64_t{1} << other, 0u) << "given back at exit";
	EXPECT_EQ(thread_slots_owned() & uint64_t{1} << kSharedSlot, 0u);
}

/* More live threads than slots: the first kSharedSlot own one each, the rest share the last
 * and count with read-modify-writes, so no add is lost either way. */
TEST(EmuSlots, ManyThreadsBeyondTheSlotsShareTheLastOne)
{
	constexpr int kThreads = static_cast<int>(kThreadSlots) + 8;
	constexpr int kAdds = 2000;
	/* The test's thread holds a slot of its own; no other thread lives before the workers. */
	ASSERT_TRUE(thread_claim().own());
	SlotCounter c;
	std::vector<SlotClaim> claims(kThreads, SlotClaim{SlotClaim::kUnset});
	std::atomic<int> arrived{0};
	std::vector<std::thread> ts;
	for (int t = 0; t < kThreads; t++)
		ts.emplace_back([&, t] {
			claims[t] = thread_claim();
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

/* Records the slot_exit calls it gets. */
struct ExitLog final : SlotUser {
	std::mutex mu;
	std::vector<size_t> exits; /* mu */
	void slot_exit(size_t slot) noexcept override
	{
		std::lock_guard lk(mu);
		exits.push_back(slot);
	}
	size_t count()
	{
		std::lock_guard lk(mu);
		return exits.size();
	}
};

TEST(ThreadSlots, AWatchedThreadsExitRunsOnceOnItsSlotBeforeTheSlotIsFree)
{
	ExitLog log;
	size_t slot = kThreadSlots;
	std::thread([&] {
		ASSERT_TRUE(thread_claim().own());
		slot = thread_slot();
		EXPECT_EQ(watch_thread_exit(&log), 0);
		EXPECT_EQ(watch_thread_exit(&log), 0) << "watching twice is watching once";
		EXPECT_EQ(log.count(), 0u);
	}).join();
	ASSERT_EQ(log.count(), 1u);
	EXPECT_EQ(log.exits[0], slot);
	/* The next thread may get the slot: its exit is not watched unless it asks. */
	std::thread([&] { (void)thread_claim(); }).join();
	EXPECT_EQ(log.count(), 1u);
}

TEST(ThreadSlots, UnwatchedUsersHearOfNoExit)
{
	ExitLog kept, gone;
	std::atomic<int> step{0};
	std::thread t([&] {
		ASSERT_EQ(watch_thread_exit(&kept), 0);
		ASSERT_EQ(watch_thread_exit(&gone), 0);
		step.store(1);
		while (step.load() != 2)
			std::this_thread::yield();
	});
	while (step.load() != 1)
		std::this_thread::yield();
	unwatch_thread_exits(&gone);
	step.store(2);
	t.join();
	EXPECT_EQ(kept.count(), 1u);
	EXPECT_EQ(gone.count(), 0u);
}

TEST(ThreadSlots, WatchRefusesANullUserAndTheSharedSlot)
{
	EXPECT_EQ(watch_thread_exit(nullptr), -EINVAL);
	/* Fill every own slot, then a thread on the shared one cannot be watched. */
	constexpr int kThreads = static_cast<int>(kThreadSlots) + 2;
	ExitLog log;
	std::atomic<int> arrived{0};
	std::atomic<int> refused{0}, watched{0};
	std::vector<std::thread> ts;
	for (int t = 0; t < kThreads; t++)
		ts.emplace_back([&] {
			const SlotClaim c = thread_claim();
			arrived.fetch_add(1);
			while (arrived.load() < kThreads)
				std::this_thread::yield();
			const int rc = watch_thread_exit(&log);
			if (c.own())
				EXPECT_EQ(rc, 0);
			else
				EXPECT_EQ(rc, -EINVAL) << "the shared slot outlives its threads";
			(rc == 0 ? watched : refused).fetch_add(1);
		});
	for (auto &t : ts)
		t.join();
	EXPECT_GE(refused.load(), 2);
	EXPECT_EQ(log.count(), size_t(watched.load())) << "every watched exit ran, once";
}

/* Threads come and go in waves while users watch and unwatch: every watched exit that was not
 * unwatched runs, exits never run for an unwatched user, slots are never owned twice. */
TEST(ThreadSlots, ManyThreadsWatchAndUnwatchConcurrently)
{
	for (int round = 0; round < 20; round++) {
		ExitLog a, b;
		std::vector<std::thread> ts;
		std::atomic<int> watched_a{0};
		for (int t = 0; t < 8; t++)
			ts.emplace_back([&] {
				if (thread_claim().own() && watch_thread_exit(&a) == 0)
					watched_a.fetch_add(1);
				if (thread_claim().own())
					(void)watch_thread_exit(&b);
			});
		unwatch_thread_exits(&b);
		for (auto &t : ts)
			t.join();
		unwatch_thread_exits(&b);
		EXPECT_EQ(a.count(), size_t(watched_a.load()));
	}
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
 * the writer run side by side for NICMR_SLOTS_MS milliseconds (default 300), and longer if the
 * writer has not yet got in kMinWrites times or a reader has not yet read: with more busy
 * threads than cores, a writer waits until every reader holding the lock has been scheduled
 * again, which on two loaded cores under a sanitizer can take longer than the whole run (the
 * test then proved nothing, so it goes on, up to kDeadline). The writer yields between writes:
 * one that never lets go starves readers on two busy cores (the lock prefers writers).
 */
void readers_never_see_a_writer_half_way(int n_readers)
{
	const char *env = std::getenv("NICMR_SLOTS_MS");
	const std::chrono::milliseconds run(env ? std::atoi(env) : 300);
	constexpr uint64_t kMinWrites = 3;
	constexpr std::chrono::seconds kDeadline(120);
	SlotRwLock l;
	uint64_t a = 0, b = 0; /* plain: the lock alone orders them */
	std::atomic<uint64_t> writes{0};
	std::atomic<bool> done{false};
	std::atomic<int> bad{0};
	std::atomic<uint64_t> reads{0};
	std::atomic<int> readers_in{0}; /* readers that have read once */
	std::vector<std::thread> threads;
	for (int t = 0; t < n_readers; t++)
		threads.emplace_back([&] {
			uint64_t n = 0;
			for (; !done.load(std::memory_order_relaxed); n++) {
				std::shared_lock r(l);
				if (a != b)
					bad.fetch_add(1);
				if (n == 0)
					readers_in.fetch_add(1, std::memory_order_relaxed);
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
			writes.fetch_add(1, std::memory_order_relaxed);
			std::this_thread::yield();
		}
	});
	const auto start = std::chrono::steady_clock::now();
	std::this_thread::sleep_for(run);
	while ((writes.load(std::memory_order_relaxed) < kMinWrites ||
		readers_in.load(std::memory_order_relaxed) < n_readers) &&
	       std::chrono::steady_clock::now() - start < kDeadline)
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	done = true;
	for (auto &t : threads)
		t.join();
	EXPECT_EQ(bad.load(), 0);
	EXPECT_EQ(a, b);
	EXPECT_GE(a, kMinWrites);
	EXPECT_EQ(readers_in.load(), n_readers);
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
