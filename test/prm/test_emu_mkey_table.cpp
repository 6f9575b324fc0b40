/* SPDX-License-Identifier: BSD-3-Clause */
/* The device model's mkey table: indices, per-slot locking, the Hold a WQE takes its keys with. */
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "emu_mlx5_mkey.h"

namespace nicmr::emu {
namespace {

using namespace std::chrono_literals;

MkeyEntry entry(uint8_t tag, size_t translation_bytes = 16)
{
	MkeyEntry e;
	e.mkc.fill(tag);
	e.translations.assign(translation_bytes, tag);
	return e;
}

/* The model's choice of index (emu_mlx5_mkey.cpp, create): round-robin over positions, each
 * position's low 3 bits reversed. Not 1, 2, 3: a driver must take whatever index firmware
 * gives. */
TEST(MkeyTable, CreateHandsOutNonAdjacentIndicesRoundRobinAndChecksRanges)
{
	MkeyTable t(4); /* indices 1..15 */
	std::vector<uint32_t> got;
	for (int n = 0; n < 15; n++) {
		uint32_t i = 0;
		ASSERT_EQ(t.create(0, entry(1), &i), 0);
		got.push_back(i);
	}
	EXPECT_EQ(got, (std::vector<uint32_t>{4, 2, 6, 1, 5, 3, 7, 8, 12, 10, 14, 9, 13, 11, 15}));
	uint32_t c = 0;
	EXPECT_EQ(t.create(0, entry(1), &c), -ENOSPC);
	for (uint32_t i : got)
		ASSERT_EQ(t.destroy(i, nullptr), 0);

	uint32_t a = 0, b = 0;
	ASSERT_EQ(t.create(0, entry(1), &a), 0);
	ASSERT_EQ(t.create(0, entry(2), &b), 0);
	EXPECT_EQ(a, 4u) << "the walk wrapped to its start";
	EXPECT_EQ(b, 2u);
	ASSERT_EQ(t.destroy(a, nullptr), 0);
	/* A just-destroyed index is reused last. */
	ASSERT_EQ(t.create(0, entry(3), &c), 0);
	EXPECT_EQ(c, 6u);
	EXPECT_EQ(t.create(16, entry(4), &c), -ERANGE);
	EXPECT_EQ(t.create(2, entry(4), &c), -EBUSY);
	ASSERT_EQ(t.create(9, entry(5), &c), 0);
	EXPECT_EQ(c, 9u);
	EXPECT_EQ(t.live(), 3u);
	EXPECT_EQ(t.destroy(0, nullptr), -ERANGE);
	EXPECT_EQ(t.destroy(16, nullptr), -ERANGE);
	EXPECT_EQ(t.destroy(4, nullptr), -ENOENT);
	MkeyEntry old;
	ASSERT_EQ(t.destroy(9, &old), 0);
	EXPECT_EQ(old.mkc[0], 5);
	EXPECT_EQ(t.with(9, [](const MkeyEntry &) {}), -ENOENT);
	EXPECT_EQ(t.with(0, [](const MkeyEntry &) {}), -ERANGE);
}

TEST(MkeyTable, FullTableIsEnospcAndClearEmptiesIt)
{
	MkeyTable t(2); /* indices 1..3 */
	uint32_t i = 0;
	for (int n = 0; n < 3; n++)
		ASSERT_EQ(t.create(0, entry(1), &i), 0);
	EXPECT_EQ(t.create(0, entry(1), &i), -ENOSPC);
	size_t seen = 0;
	t.for_each([&](uint32_t, const MkeyEntry &) { seen++; });
	EXPECT_EQ(seen, 3u);
	t.clear();
	EXPECT_EQ(t.live(), 0u);
	seen = 0;
	t.for_each([&](uint32_t, const MkeyEntry &) { seen++; });
	EXPECT_EQ(seen, 0u);
	ASSERT_EQ(t.create(0, entry(1), &i), 0);
	EXPECT_EQ(i, 2u) << "clear starts the walk again: 0 and 4 are out of range";
}

TEST(MkeyTable, IndicesAcrossChunksAndTheLargestTable)
{
	MkeyTable t(24);
	uint32_t i = 0;
	ASSERT_EQ(t.create((1u << 24) - 1, entry(7), &i), 0);
	ASSERT_EQ(t.create(1025, entry(8), &i), 0);
	std::vector<const void *> spill;
	MkeyTable::Hold h(t, spill);
	ASSERT_NE(h.find((1u << 24) - 1), nullptr);
	EXPECT_EQ(h.find((1u << 24) - 1)->mkc[0], 7);
	EXPECT_EQ(h.find(1025)->mkc[0], 8);
	EXPECT_EQ(h.find(1024), nullptr); /* same chunk, no entry */
	EXPECT_EQ(h.find(5), nullptr);	  /* no chunk at all */
	EXPECT_EQ(h.find(0), nullptr);
	EXPECT_EQ(h.find(1u << 24), nullptr);
}

TEST(MkeyTable, HoldKeepsManyKeysAndReleasesThemAll)
{
	MkeyTable t(8);
	std::vector<uint32_t> idx(20);
	for (auto &i : idx)
		ASSERT_EQ(t.create(0, entry(static_cast<uint8_t>(&i - idx.data())), &i), 0);
	std::vector<const void *> spill;
	{
		MkeyTable::Hold h(t, spill);
		for (int round = 0; round < 2; round++) /* the second round finds them held */
			for (size_t k = 0; k < idx.size(); k++) {
				const MkeyEntry *e = h.find(idx[k]);
				ASSERT_NE(e, nullptr);
				EXPECT_EQ(e->mkc[0], k);
			}
		EXPECT_EQ(spill.size(), idx.size() - MkeyTable::Hold::kInline);
	}
	EXPECT_TRUE(spill.empty());
	/* Every slot is free again: an update of each goes through at once. */
	for (uint32_t i : idx)
		EXPECT_EQ(t.update(i, [](MkeyEntry *e) { return e != nullptr ? 0 : -1; }), 0);
	EXPECT_EQ(t.update(0, [](MkeyEntry *e) { return e == nullptr ? -2 : 0; }), -2);
}

TEST(MkeyTable, UpdateWaitsForAHolderOfItsKeyOnlyConcurrent)
{
	MkeyTable t(8);
	uint32_t a = 0, b = 0;
	ASSERT_EQ(t.create(0, entry(1), &a), 0);
	ASSERT_EQ(t.create(0, entry(2), &b), 0);
	std::vector<const void *> spill;
	std::atomic<bool> a_done{false}, b_done{false};
	std::thread ta, tb;
	{
		MkeyTable::Hold h(t, spill);
		ASSERT_NE(h.find(a), nullptr);
		ta = std::thread([&] {
			t.update(a, [](MkeyEntry *e) {
				if (e != nullptr)
					e->mkc[0] = 11;
			});
			a_done = true;
		});
		tb = std::thread([&] {
			t.update(b, [](MkeyEntry *e) {
				if (e != nullptr)
					e->mkc[0] = 22;
			});
			b_done = true;
		});
		tb.join(); /* another key: never waits for the holder of a */
		EXPECT_TRUE(b_done.load());
		std::this_thread::sleep_for(20ms);
		EXPECT_FALSE(a_done.load());
		/* The held entry is unchanged while held. */
		EXPECT_EQ(h.find(a)->mkc[0], 1);
	}
	ta.join();
	EXPECT_TRUE(a_done.load());
	EXPECT_EQ(t.with(a, [](const MkeyEntry &e) { EXPECT_EQ(e.mkc[0], 11); }), 0);
}

TEST(MkeyTable, ReadersNeverSeeHalfAnUpdateConcurrent)
{
	MkeyTable t(8);
	std::vector<uint32_t> keys(4);
	for (auto &k : keys)
		ASSERT_EQ(t.create(0, entry(0, 256), &k), 0);
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> torn{0}, reads{0};
	std::vector<std::thread> th;
	th.reserve(4);
	for (int w = 0; w < 2; w++)
		th.emplace_back([&, w] {
			for (uint32_t n = 1; !stop.load(std::memory_order_relaxed); n++)
				t.update(keys[(n + w) % keys.size()], [n](MkeyEntry *e) {
					if (e == nullptr)
						return;
					e->mkc.fill(static_cast<uint8_t>(n));
					std::fill(e->translations.begin(), e->translations.end(),
						  static_cast<uint8_t>(n));
				});
		});
	for (int r = 0; r < 2; r++)
		th.emplace_back([&] {
			std::vector<const void *> spill;
			while (!stop.load(std::memory_order_relaxed)) {
				MkeyTable::Hold h(t, spill);
				for (uint32_t k : keys) {
					const MkeyEntry *e = h.find(k);
					const uint8_t v = e->mkc[0];
					for (uint8_t x : e->mkc)
						torn += x != v;
					for (uint8_t x : e->translations)
						torn += x != v;
					reads++;
				}
			}
		});
	std::this_thread::sleep_for(300ms);
	stop = true;
	for (auto &x : th)
		x.join();
	EXPECT_GT(reads.load(), 0u);
	EXPECT_EQ(torn.load(), 0u);
}

} // namespace
} // namespace nicmr::emu
