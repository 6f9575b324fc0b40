/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The provider's per-domain object store (fabric/fi_slab.h, an rte_ring of free objects), on
 * its own: batches that double, growth stopping at the bound with -ENOSPC, objects that come
 * back being taken again without growth, and threads that take on one side and give back on
 * the other (fi_close on another thread than fi_mr_reg) losing and doubling nothing. Suite
 * 'fabric' and 'stress' (TSan).
 */
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "fi_lock.h"
#include "fi_slab.h"

namespace nicmr::fabric {
namespace {

struct Obj {
	uint64_t owner = 0; /* written by whoever holds it */
};

/* An object: from the ring, else from a new batch (the provider's take_from). */
template <typename S> Obj *take_or_grow(S &s)
{
	Obj *o = s.take();
	if (!o && s.grow(&o) != 0)
		return nullptr;
	return o;
}

TEST(FabricSlab, EmptyUntilGrownAndBatchesDouble)
{
	Slab<Obj, 4> s;
	ASSERT_EQ(s.init("t_double", 1000), 0);
	EXPECT_EQ(s.take(), nullptr);
	EXPECT_EQ(s.capacity(), 0u);
	std::set<Obj *> seen;
	/* The first grow makes 4, the next 8, then 16: 28 distinct objects in all. */
	for (int i = 0; i < 28; i++) {
		Obj *o = take_or_grow(s);
		ASSERT_NE(o, nullptr);
		EXPECT_TRUE(seen.insert(o).second) << "object " << i << " handed out twice";
	}
	EXPECT_EQ(s.capacity(), 28u);
	EXPECT_EQ(s.out(), 28u);
	EXPECT_EQ(s.take(), nullptr) << "all 28 are out";
	for (Obj *o : seen)
		s.put(o);
	EXPECT_EQ(s.out(), 0u);
	/* They come back without growth, each once. */
	std::set<Obj *> again;
	for (int i = 0; i < 28; i++) {
		Obj *o = s.take();
		ASSERT_NE(o, nullptr);
		EXPECT_TRUE(again.insert(o).second);
	}
	EXPECT_EQ(s.take(), nullptr);
	EXPECT_EQ(again, seen);
	EXPECT_EQ(s.capacity(), 28u);
	/* Counted out as they go back, one by one. */
	uint64_t left = 28;
	for (Obj *o : again) {
		s.put(o);
		EXPECT_EQ(s.out(), --left);
	}
}

/* Growth stops at init's bound: the last batch is cut to fit (4 + 8 + 8 of 20), then an empty
 * store is -ENOSPC and hands out nothing; an object given back is taken again. */
TEST(FabricSlab, GrowthStopsAtTheBound)
{
	Slab<Obj, 4> s;
	ASSERT_EQ(s.init("t_bound", 20), 0);
	EXPECT_EQ(s.limit(), 20u);
	std::set<Obj *> out;
	for (int i = 0; i < 20; i++) {
		Obj *o = take_or_grow(s);
		ASSERT_NE(o, nullptr) << "object " << i;
		EXPECT_TRUE(out.insert(o).second);
	}
	EXPECT_EQ(s.capacity(), 20u);
	Obj *none = nullptr;
	EXPECT_EQ(s.take(), nullptr);
	EXPECT_EQ(s.grow(&none), -ENOSPC);
	EXPECT_EQ(none, nullptr);
	EXPECT_EQ(s.capacity(), 20u);
	Obj *back = *out.begin();
	s.put(back);
	Obj *again = nullptr;
	EXPECT_EQ(s.grow(&again), 0) << "grow takes what came back before it allocates";
	EXPECT_EQ(again, back);
	EXPECT_EQ(s.capacity(), 20u);
	for (Obj *o : out)
		s.put(o);
}

/* init's codes: a bound of 0 or above what a ring holds, and a second init. */
TEST(FabricSlab, InitRefusesBadBounds)
{
	Slab<Obj, 4> zero;
	EXPECT_EQ(zero.init("t_zero", 0), -EINVAL);
	Slab<Obj, 4> huge;
	EXPECT_EQ(huge.init("t_huge", 0x80000000u), -EINVAL);
	Slab<Obj, 4> twice;
	ASSERT_EQ(twice.init("t_twice", 8), 0);
	EXPECT_EQ(twice.init("t_twice", 8), -EINVAL);
	EXPECT_EQ(twice.limit(), 8u);
}

/* Takers and givers on different threads: every object is held by one thread at a time (its
 * owner word is never found changed under it), none is lost, and the store grows no further
 * than the most objects out at once. */
TEST(FabricSlab, ThreadsTakeAndGiveBackWithoutLossOrSharing)
{
	constexpr int kThreads = 4;
	constexpr int kRounds = 20000;
	constexpr size_t kHold = 8; /* objects a thread holds at once */
	Slab<Obj, 8> s;
	ASSERT_EQ(s.init("t_threads", 1024), 0);
	std::atomic<bool> bad{false};
	/* Each round a thread takes kHold objects, marks them, checks the marks, hands them over
	 * and gives back up to kHold objects some thread handed over: objects mostly go back on
	 * another thread than the one that took them, as with fi_close. */
	std::mutex mu;
	std::deque<Obj *> handoff; /* mu */
	auto worker = [&](int t) {
		std::vector<Obj *> mine;
		for (int r = 0; r < kRounds && !bad; r++) {
			mine.clear();
			const uint64_t mark = uint64_t(t + 1) << 32 | uint64_t(r);
			for (size_t k = 0; k < kHold; k++) {
				Obj *o = take_or_grow(s);
				if (!o) {
					bad = true;
					return;
				}
				o->owner = mark;
				mine.push_back(o);
			}
			for (Obj *o : mine) {
				if (o->owner != mark)
					bad = true;
			}
			std::vector<Obj *> back;
			{
				std::lock_guard<std::mutex> lk(mu);
				/* What an earlier round (mostly another thread's) handed over. */
				while (back.size() < kHold && !handoff.empty()) {
					back.push_back(handoff.front());
					handoff.pop_front();
				}
				handoff.insert(handoff.end(), mine.begin(), mine.end());
			}
			for (Obj *o : back)
				s.put(o);
		}
	};
	std::vector<std::thread> ts;
	ts.reserve(kThreads);
	for (int t = 0; t < kThreads; t++)
		ts.emplace_back(worker, t);
	for (auto &t : ts)
		t.join();
	for (Obj *o : handoff)
		s.put(o);
	EXPECT_FALSE(bad) << "an object was held by two threads, or growth failed";
	/* At most kThreads * kHold held, kHold handed over and kThreads * kHold being given
	 * back at once: 72, within the batches 8 + 16 + 32 + 64 = 120. */
	const uint64_t cap = s.capacity();
	EXPECT_LE(cap, 120u);
	/* Every object is back: exactly cap distinct ones can be taken. */
	std::set<Obj *> all;
	for (Obj *o = s.take(); o; o = s.take())
		EXPECT_TRUE(all.insert(o).second);
	EXPECT_EQ(all.size(), cap);
	EXPECT_EQ(s.out(), cap);
	for (Obj *o : all)
		s.put(o);
	EXPECT_EQ(s.out(), 0u) << "the count of a store that many threads took from and gave to";
}

} // namespace
} // namespace nicmr::fabric

TEST(FabricLock, ANoOpLockNeverBlocksAMutexDoes)
{
	nicmr::fabric::FiLock noop;
	noop.set_noop(true);
	EXPECT_TRUE(noop.noop());
	/* Held twice by one thread: only a no-op can be (a mutex would deadlock). */
	std::lock_guard a(noop);
	std::lock_guard b(noop);

	nicmr::fabric::FiLock real;
	EXPECT_FALSE(real.noop());
	std::atomic<bool> got{false};
	std::unique_lock held(real);
	std::thread t([&] {
		std::lock_guard g(real);
		got = true;
	});
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
	EXPECT_FALSE(got.load()) << "the default lock excludes";
	held.unlock();
	t.join();
	EXPECT_TRUE(got.load());
}
