/* SPDX-License-Identifier: BSD-3-Clause */
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <gtest/gtest.h>
#include <set>
#include <thread>
#include <vector>

#include "mr_keys.h"

using namespace nicmr::mr;

namespace nicmr::mr {
struct KeySpaceTestAccess {
	static std::mutex &reclaim_lock(KeySpace &ks) { return ks.reclaim_lock_; }
};
} // namespace nicmr::mr

namespace {

std::unique_ptr<KeySpace> make(uint32_t n, uint32_t readers = 4)
{
	std::unique_ptr<KeySpace> ks;
	EXPECT_EQ(KeySpace::create({n, readers}, &ks), 0);
	return ks;
}

/* alloc + activate: what a successful registration does to the key space. */
uint32_t take_live(KeySpace &ks, KeyCache *c)
{
	uint32_t k = 0;
	EXPECT_EQ(ks.alloc(c, &k), 0);
	ks.activate(k);
	return k;
}

} // namespace

TEST(MrKeys, FormatPutsIndexAboveEightBitVariant)
{
	EXPECT_EQ(make_mkey(0x123456, 0xab), 0x123456abu);
	EXPECT_EQ(mkey_index(0x123456abu), 0x123456u);
	EXPECT_EQ(mkey_variant(0x123456abu), 0xab);
	EXPECT_EQ(make_mkey(kMaxIndexCount - 1, 0xff), 0xffffffffu);
}

TEST(MrKeys, CreateRejectsConfigOutOfRange)
{
	std::unique_ptr<KeySpace> ks;
	EXPECT_EQ(KeySpace::create({0, 4}, &ks), -EINVAL);
	EXPECT_EQ(KeySpace::create({1, 4}, &ks), -EINVAL);
	EXPECT_EQ(KeySpace::create({kMaxIndexCount + 1, 4}, &ks), -EINVAL);
	EXPECT_EQ(KeySpace::create({16, 0}, &ks), -EINVAL);
	EXPECT_EQ(KeySpace::create({16, 1025}, &ks), -EINVAL);
	EXPECT_EQ(ks, nullptr);
	EXPECT_EQ(KeySpace::create({2, 1}, &ks), 0);
	EXPECT_EQ(ks->ring_free_count(), 1u);
}

TEST(MrKeys, HandsOutEveryIndexButZeroExactlyOnce)
{
	auto ks = make(100);
	KeyCache c(*ks);
	uint8_t first[100];
	for (uint32_t i = 1; i < 100; ++i)
		ASSERT_EQ(ks->state_of(i, &first[i]), KeyState::free);
	std::set<uint32_t> seen;
	for (int i = 0; i < 99; ++i) {
		uint32_t k = take_live(*ks, &c);
		EXPECT_NE(mkey_index(k), 0u);
		ASSERT_LT(mkey_index(k), 100u);
		EXPECT_EQ(mkey_variant(k), first[mkey_index(k)])
			<< "first use of an index has the variant it waited with";
		EXPECT_TRUE(seen.insert(mkey_index(k)).second);
	}
	uint32_t k;
	EXPECT_EQ(ks->alloc(&c, &k), -ENOSPC);
	EXPECT_EQ(ks->alloc(nullptr, &k), -ENOSPC);
}

TEST(MrKeys, VariantRunsThroughAll256ValuesBeforeAnyRepeats)
{
	/* Reuses by release (a failed registration) and by retire alike: the variants of any 256
	 * consecutive uses of an index are 256 distinct values, and the 257th is the first's. */
	auto ks = make(2);
	std::vector<uint8_t> seen;
	for (unsigned i = 0; i < 600; ++i) {
		uint32_t k;
		ASSERT_EQ(ks->alloc(nullptr, &k), 0);
		ASSERT_EQ(mkey_index(k), 1u);
		seen.push_back(mkey_variant(k));
		if (i > 0) {
			EXPECT_EQ(mkey_variant(k), ks->next_variant_of(1, seen[i - 1])) << i;
		}
		if (i >= 256) {
			EXPECT_EQ(seen[i], seen[i - 256]) << i;
		}
		if (i % 2) {
			ks->release(nullptr, k);
		} else {
			ks->activate(k);
			ASSERT_EQ(ks->begin_retire(k), 0);
			ks->retire(nullptr, k); /* no readers: the grace period is already over */
		}
	}
	for (unsigned from = 0; from + 256 <= seen.size(); from += 37) {
		const std::set<uint8_t> window(seen.begin() + from, seen.begin() + from + 256);
		EXPECT_EQ(window.size(), 256u) << "uses " << from << ".." << from + 255;
	}
}

/* adopt takes only indices never in the free structures: a free index is refused at every
 * variant, 0 included (a free word at variant 0 once read as zero, as a never-used one). */
TEST(MrKeys, AdoptRefusesAFreeIndexAtEveryVariantZeroIncluded)
{
	/* Fresh: about 16 of 4095 indices start at variant 0. */
	auto ks = make(4096);
	uint32_t at_zero = 0;
	for (uint32_t i = 1; i < 4096 && at_zero == 0; i++) {
		uint8_t v = 1;
		if (ks->state_of(i, &v) == KeyState::free && v == 0)
			at_zero = i;
	}
	ASSERT_NE(at_zero, 0u) << "no index starts at variant 0 (odds about 1e-7)";
	uint32_t k = 0;
	EXPECT_EQ(ks->adopt(at_zero, &k), -EEXIST);
	uint8_t v = 1;
	EXPECT_EQ(ks->state_of(at_zero, &v), KeyState::free);
	EXPECT_EQ(v, 0);

	/* Freed again: index 1 of a two-index space, released until its next variant is 0. */
	auto one = make(2);
	for (int use = 0; use < 256; use++) {
		ASSERT_EQ(one->alloc(nullptr, &k), 0);
		one->release(nullptr, k);
		EXPECT_EQ(one->adopt(1, &k), -EEXIST) << "use " << use;
		ASSERT_EQ(one->state_of(1, &v), KeyState::free);
	}
	/* The 256 uses went through every variant (VariantRunsThroughAll256ValuesBeforeAnyRepeats),
	 * 0 among them. That a never-used index is adopted: test_mr_segments,
	 * MrOdpCache.AdoptTakesOnlyIndicesNeverUsed. */
}

TEST(MrVariant, PermutationIsABijectionWithItsInverse)
{
	/* For any tables u: P_u maps the 256 turns onto the 256 variants, P_u^-1 undoes it, and
	 * different tables give different permutations. */
	std::set<std::vector<uint8_t>> perms;
	for (uint32_t index = 1; index <= 16; index++) {
		const uint64_t u = variant_tables(VariantSecret{0x0123456789abcdefull, 42}, index);
		std::vector<uint8_t> p(256);
		std::set<uint8_t> image;
		for (unsigned t = 0; t < 256; t++) {
			p[t] = variant_at(u, static_cast<uint8_t>(t));
			image.insert(p[t]);
			EXPECT_EQ(variant_turn(u, p[t]), t);
		}
		EXPECT_EQ(image.size(), 256u) << "index " << index;
		perms.insert(p);
	}
	EXPECT_EQ(perms.size(), 16u);
}

TEST(MrVariant, SecretChangesEveryIndexsTables)
{
	/* The per-index tables are a keyed function: another secret, other tables, for every
	 * index (a chance of 2^-64 each to fail). */
	const VariantSecret a{1, 2}, b{1, 3};
	for (uint32_t index = 0; index < 1000; index++)
		EXPECT_NE(variant_tables(a, index), variant_tables(b, index)) << index;
}

TEST(MrKeys, CycleFromARequestedVariantAlsoCoversAll256)
{
	/* A requested key may set any variant: the cycle goes on from there, through all 256. */
	auto ks = make(4);
	uint32_t k;
	ASSERT_EQ(ks->claim(make_mkey(3, 0x5a), &k), 0);
	std::set<uint8_t> seen{0x5a};
	uint8_t v = 0x5a;
	for (int i = 1; i < 256; ++i) {
		v = ks->next_variant_of(3, v);
		EXPECT_TRUE(seen.insert(v).second) << "use " << i << " repeats " << int(v);
	}
	EXPECT_EQ(ks->next_variant_of(3, v), 0x5a);
}

TEST(MrKeys, FirstVariantsDifferBetweenKeySpaces)
{
	/* Each key space has its own secret: the first key of an index is not the same in every
	 * process. Eight key spaces giving index 1 one first variant: chance 2^-56. */
	std::set<uint8_t> firsts;
	std::set<std::vector<uint8_t>> all;
	for (int i = 0; i < 8; ++i) {
		auto ks = make(64);
		std::vector<uint8_t> v(64);
		for (uint32_t x = 1; x < 64; ++x)
			ks->state_of(x, &v[x]);
		firsts.insert(v[1]);
		all.insert(v);
	}
	EXPECT_GT(firsts.size(), 1u);
	EXPECT_EQ(all.size(), 8u) << "63 first variants alike in two key spaces: chance 2^-504";
}

TEST(MrKeys, EntropySourceFailureFailsCreate)
{
	KeySpaceConfig cfg{16, 4};
	cfg.entropy = [](void *, size_t) { return -EIO; };
	std::unique_ptr<KeySpace> ks;
	EXPECT_EQ(KeySpace::create(cfg, &ks), -EIO);
	EXPECT_EQ(ks, nullptr);
	cfg.entropy = [](void *, size_t) { return -ENOSYS; };
	EXPECT_EQ(KeySpace::create(cfg, &ks), -ENOSYS);
}

TEST(MrKeys, KeySpacesWithOneSecretGiveOneSequence)
{
	/* The secret is all there is to it: the same bytes give the same variants and order. */
	KeySpaceConfig cfg{300, 4};
	cfg.entropy = [](void *buf, size_t len) {
		std::memset(buf, 0x42, len);
		return 0;
	};
	std::vector<uint32_t> got[2];
	for (auto &g : got) {
		std::unique_ptr<KeySpace> ks;
		ASSERT_EQ(KeySpace::create(cfg, &ks), 0);
		uint32_t k;
		while (ks->alloc(nullptr, &k) == 0)
			g.push_back(k);
	}
	EXPECT_EQ(got[0], got[1]);
	EXPECT_EQ(got[0].size(), 299u);
}

TEST(MrKeys, RequestedKeyTakesItsIndexAndVariant)
{
	auto ks = make(10);
	uint32_t k = 0;
	ASSERT_EQ(ks->claim(make_mkey(5, 0x77), &k), 0);
	EXPECT_EQ(k, make_mkey(5, 0x77));
	uint8_t v;
	EXPECT_EQ(ks->state_of(5, &v), KeyState::binding);
	EXPECT_EQ(v, 0x77);
	/* Index 5's copy in the ring is now a ghost: alloc never hands it out. */
	KeyCache c(*ks);
	std::set<uint32_t> seen;
	uint32_t o;
	while (ks->alloc(&c, &o) == 0)
		seen.insert(mkey_index(o));
	EXPECT_EQ(seen.size(), 8u);
	EXPECT_EQ(seen.count(5), 0u);
}

TEST(MrKeys, RequestedKeyOnIndexInUseIsEexist)
{
	auto ks = make(10);
	uint32_t k, o;
	ASSERT_EQ(ks->claim(make_mkey(3, 1), &k), 0);
	EXPECT_EQ(ks->claim(make_mkey(3, 1), &o), -EEXIST) << "binding";
	EXPECT_EQ(ks->claim(make_mkey(3, 2), &o), -EEXIST) << "any variant of the index";
	ks->activate(k);
	EXPECT_EQ(ks->claim(make_mkey(3, 1), &o), -EEXIST) << "live";
	uint32_t a = take_live(*ks, nullptr);
	EXPECT_EQ(ks->claim(a, &o), -EEXIST);
}

TEST(MrKeys, RequestedKeyOutsideKeySpaceIsRejected)
{
	auto ks = make(10);
	uint32_t k;
	EXPECT_EQ(ks->claim(1ull << 32 | make_mkey(1, 0), &k), -EKEYREJECTED);
	EXPECT_EQ(ks->claim(UINT64_MAX, &k), -EKEYREJECTED);
	EXPECT_EQ(ks->claim(make_mkey(0, 0x42), &k), -EKEYREJECTED);
	EXPECT_EQ(ks->claim(make_mkey(10, 0), &k), -EKEYREJECTED);
	EXPECT_EQ(ks->claim(make_mkey(9, 0xff), &k), 0);
}

TEST(MrKeys, RequestedKeyOnRetiringIndexIsEagainUntilReadersAreQuiescent)
{
	auto ks = make(10);
	ASSERT_EQ(ks->reader_register(0), 0);
	uint32_t k = take_live(*ks, nullptr), o;
	ASSERT_EQ(ks->begin_retire(k), 0);
	ks->retire(nullptr, k);
	EXPECT_EQ(ks->state_of(mkey_index(k), nullptr), KeyState::retiring);
	EXPECT_EQ(ks->claim(k, &o), -EAGAIN);
	ks->reader_quiescent(0);
	ASSERT_EQ(ks->claim(k, &o), 0) << "claim reclaims first";
	EXPECT_EQ(o, k);
	ks->reader_unregister(0);
}

TEST(MrKeys, GhostCopyBecomesRealWhenIndexIsFreedFirst)
{
	auto ks = make(3);
	uint32_t k;
	uint8_t v2;
	ks->state_of(2, &v2);
	ASSERT_EQ(ks->claim(make_mkey(1, 9), &k), 0);
	ks->release(nullptr, k);
	uint8_t v;
	EXPECT_EQ(ks->state_of(1, &v), KeyState::free);
	EXPECT_EQ(v, ks->next_variant_of(1, 9)) << "the cycle goes on from the requested variant";
	EXPECT_NE(v, 9);
	EXPECT_EQ(ks->ring_free_count(), 2u) << "no second copy";
	std::multiset<uint32_t> got;
	uint32_t o;
	while (ks->alloc(nullptr, &o) == 0)
		got.insert(o);
	EXPECT_EQ(got, (std::multiset<uint32_t>{make_mkey(1, v), make_mkey(2, v2)}));
}

TEST(MrKeys, GhostIsDroppedAndIndexReturnsOnceWhenFreedLater)
{
	auto ks = make(3);
	uint32_t k, o;
	uint8_t v1;
	ks->state_of(1, &v1);
	ASSERT_EQ(ks->claim(make_mkey(2, 0), &k), 0);
	std::vector<uint32_t> got;
	while (ks->alloc(nullptr, &o) == 0)
		got.push_back(o);
	EXPECT_EQ(got, std::vector<uint32_t>{make_mkey(1, v1)}) << "ghost of 2 dropped";
	ks->release(nullptr, k);
	ASSERT_EQ(ks->alloc(nullptr, &o), 0);
	EXPECT_EQ(o, make_mkey(2, ks->next_variant_of(2, 0)));
	EXPECT_EQ(ks->alloc(nullptr, &o), -ENOSPC);
}

/* activate and make_free store the word when it has no ghost bit and compare-and-swap when it
 * has one (mr_keys.cpp, sole_writer): either way the claimed index is handed out once after its
 * key is retired, whether its ghost copy was dropped before or becomes the real one. */
TEST(MrKeys, AClaimedKeyIsLiveThenFreeOnceWithOrWithoutItsGhost)
{
	for (const bool drop_first : {true, false}) {
		SCOPED_TRACE(drop_first ? "ghost dropped before activate"
					: "ghost kept to the end");
		/* Two indices in rings with room to spare: a second copy of an index would show
		 * in the count. */
		KeySpaceConfig cfg;
		cfg.index_count = 9;
		cfg.capacity = 8;
		cfg.all_free = false;
		std::unique_ptr<KeySpace> ks;
		ASSERT_EQ(KeySpace::create(cfg, &ks), 0);
		const uint32_t both[] = {1, 2};
		ASSERT_EQ(ks->add_free(both, 2), 0);
		uint32_t k, o;
		uint8_t v1, v;
		ks->state_of(1, &v1);
		ASSERT_EQ(ks->claim(make_mkey(2, 0x31), &k), 0);
		std::multiset<uint32_t> got;
		if (drop_first) {
			while (ks->alloc(nullptr, &o) == 0)
				got.insert(o);
			EXPECT_EQ(got, std::multiset<uint32_t>{make_mkey(1, v1)})
				<< "ghost dropped";
		}
		ks->activate(k);
		EXPECT_EQ(ks->state_of(2, &v), KeyState::live);
		EXPECT_EQ(v, 0x31);
		ASSERT_EQ(ks->begin_retire(k), 0);
		ks->retire(nullptr, k);
		EXPECT_EQ(ks->state_of(2, &v), KeyState::free) << "no reader: freed at once";
		EXPECT_EQ(v, ks->next_variant_of(2, 0x31));
		EXPECT_EQ(ks->ring_free_count(), drop_first ? 1u : 2u)
			<< "put back when its ghost was dropped; else the ghost is the copy";
		while (ks->alloc(nullptr, &o) == 0)
			got.insert(o);
		EXPECT_EQ(got, (std::multiset<uint32_t>{make_mkey(1, v1), make_mkey(2, v)}))
			<< "each index once";
	}
}

TEST(MrKeys, RetiredIndexWaitsForEveryOnlineReader)
{
	auto ks = make(4);
	ASSERT_EQ(ks->reader_register(0), 0);
	ASSERT_EQ(ks->reader_register(1), 0);
	ASSERT_EQ(ks->reader_register(2), 0);
	ks->reader_offline(2);
	uint32_t k = take_live(*ks, nullptr);
	ASSERT_EQ(ks->begin_retire(k), 0);
	ks->retire(nullptr, k);
	EXPECT_EQ(ks->retiring_count(), 1u);
	EXPECT_EQ(ks->reclaim(nullptr), 0u);
	ks->reader_quiescent(0);
	EXPECT_EQ(ks->reclaim(nullptr), 0u);
	ks->reader_quiescent(1);
	EXPECT_EQ(ks->reclaim(nullptr), 1u) << "offline reader 2 does not hold it back";
	uint8_t v;
	EXPECT_EQ(ks->state_of(mkey_index(k), &v), KeyState::free);
	EXPECT_EQ(v, ks->next_variant_of(mkey_index(k), mkey_variant(k)));
	EXPECT_NE(v, mkey_variant(k));
	EXPECT_EQ(ks->retiring_count(), 0u);
	for (unsigned id = 0; id < 3; ++id)
		ks->reader_unregister(id);
}

TEST(MrKeys, AllocWaitsForABusyReclaimerInsteadOfFailing)
{
	/* Every free index retired while another thread holds the reclaim lock (as a reclaimer
	 * descheduled mid-way would): an alloc must wait and then get one, not say -ENOSPC. */
	auto ks = make(4);
	std::mutex &lock = KeySpaceTestAccess::reclaim_lock(*ks);
	std::atomic<int> step{0};
	std::thread holder([&] {
		lock.lock();
		step.store(1);
		while (step.load() != 2)
			std::this_thread::yield();
		lock.unlock();
	});
	while (step.load() != 1)
		std::this_thread::yield();
	for (int i = 0; i < 3; i++) {
		uint32_t k = take_live(*ks, nullptr);
		ASSERT_EQ(ks->begin_retire(k), 0);
		ks->retire(nullptr, k); /* its reclaim finds the lock busy */
	}
	EXPECT_EQ(ks->ring_free_count(), 0u);
	EXPECT_EQ(ks->retiring_count(), 3u);
	std::atomic<bool> returned{false};
	int rc = 1;
	uint32_t got = 0;
	std::thread taker([&] {
		rc = ks->alloc(nullptr, &got);
		returned.store(true);
	});
	std::this_thread::sleep_for(std::chrono::milliseconds(50));
	EXPECT_FALSE(returned.load()) << "alloc gave up while the reclaimer held the lock";
	step.store(2);
	holder.join();
	taker.join();
	EXPECT_EQ(rc, 0);
	EXPECT_NE(mkey_index(got), 0u);
	EXPECT_EQ(ks->retiring_count(), 0u);
}

TEST(MrKeys, AllocReclaimsWhenPoolIsEmpty)
{
	auto ks = make(2);
	ASSERT_EQ(ks->reader_register(0), 0);
	uint32_t k = take_live(*ks, nullptr), o;
	ASSERT_EQ(ks->begin_retire(k), 0);
	ks->retire(nullptr, k);
	EXPECT_EQ(ks->alloc(nullptr, &o), -ENOSPC) << "still in its grace period";
	ks->reader_quiescent(0);
	ASSERT_EQ(ks->alloc(nullptr, &o), 0);
	EXPECT_EQ(o, make_mkey(1, ks->next_variant_of(1, mkey_variant(k))));
	EXPECT_NE(o, k);
	ks->reader_unregister(0);
}

TEST(MrKeys, ReaderIdOutOfRangeIsEinval)
{
	auto ks = make(4, 2);
	EXPECT_EQ(ks->reader_register(2), -EINVAL);
	EXPECT_EQ(ks->reader_register(1), 0);
	ks->reader_unregister(1);
}

TEST(MrKeys, BeginRetireTakesOnlyALiveKeyWithItsVariant)
{
	auto ks = make(8);
	uint32_t k = take_live(*ks, nullptr), b;
	EXPECT_EQ(ks->begin_retire(k ^ 1), -ENOKEY) << "stale variant";
	EXPECT_EQ(ks->begin_retire(make_mkey(0, 0)), -ENOKEY);
	EXPECT_EQ(ks->begin_retire(make_mkey(8, 0)), -ENOKEY);
	ASSERT_EQ(ks->alloc(nullptr, &b), 0);
	EXPECT_EQ(ks->begin_retire(b), -ENOKEY) << "binding is not live yet";
	ASSERT_EQ(ks->begin_retire(k), 0);
	EXPECT_EQ(ks->begin_retire(k), -ENOKEY) << "already leaving";
	ks->abort_retire(k);
	EXPECT_EQ(ks->state_of(mkey_index(k), nullptr), KeyState::live);
	EXPECT_EQ(ks->begin_retire(k), 0);
}

TEST(MrKeys, CacheRefillsAndDrainsInBatches)
{
	auto ks = make(1000);
	const uint32_t total = 999;
	{
		KeyCache c(*ks);
		uint32_t k;
		ASSERT_EQ(ks->alloc(&c, &k), 0);
		EXPECT_EQ(c.size(), kCacheBatch - 1);
		EXPECT_EQ(ks->ring_free_count(), total - kCacheBatch);
		std::vector<uint32_t> keys{k};
		for (uint32_t i = 1; i < kCacheSize + 1; ++i) {
			ASSERT_EQ(ks->alloc(&c, &k), 0);
			keys.push_back(k);
		}
		/* 65 taken: three refills of 32, 31 left in the cache. */
		EXPECT_EQ(c.size(), 3 * kCacheBatch - (kCacheSize + 1));
		for (uint32_t key : keys)
			ks->release(&c, key);
		/* 31 + 65 = 96 > 64: one drain of 32 when the cache was full. */
		EXPECT_EQ(c.size(), 3 * kCacheBatch - kCacheBatch);
		EXPECT_EQ(ks->ring_free_count(), total - 3 * kCacheBatch + kCacheBatch);
	}
	EXPECT_EQ(ks->ring_free_count(), total) << "the cache gave everything back";
}

TEST(MrKeys, HeldKeyCannotBeginToRetire)
{
	auto ks = make(8);
	uint32_t k = take_live(*ks, nullptr), b;
	EXPECT_EQ(ks->hold(k ^ 1), -ENOKEY) << "stale variant";
	EXPECT_EQ(ks->hold(make_mkey(0, 0)), -ENOKEY);
	ASSERT_EQ(ks->alloc(nullptr, &b), 0);
	EXPECT_EQ(ks->hold(b), -ENOKEY) << "binding";
	ASSERT_EQ(ks->hold(k), 0);
	ASSERT_EQ(ks->hold(k), 0);
	EXPECT_EQ(ks->begin_retire(k), -EBUSY);
	ks->unhold(mkey_index(k));
	EXPECT_EQ(ks->begin_retire(k), -EBUSY);
	ks->unhold(mkey_index(k));
	ASSERT_EQ(ks->begin_retire(k), 0);
	EXPECT_EQ(ks->hold(k), -ENOKEY) << "leaving";
}

TEST(MrKeys, CachesTakeAlignedBlocksOfIndices)
{
	/* From kCacheBatch upwards, then 1..kCacheBatch-1: each batch a cache takes is an aligned
	 * block (in a shuffled order), so two threads' per-index words never share a cache
	 * line. */
	auto ks = make(1u << 12);
	KeyCache c(*ks);
	std::set<uint32_t> first;
	for (uint32_t i = 0; i < kCacheBatch; ++i)
		first.insert(mkey_index(take_live(*ks, &c)));
	EXPECT_EQ(*first.begin(), kCacheBatch);
	EXPECT_EQ(*first.rbegin(), 2 * kCacheBatch - 1);
	EXPECT_EQ(first.size(), size_t{kCacheBatch});
	uint32_t k = 0;
	ASSERT_EQ(ks->alloc(nullptr, &k), 0);
	EXPECT_GE(mkey_index(k), 2 * kCacheBatch) << "the next block, straight from the ring";
	EXPECT_LT(mkey_index(k), 3 * kCacheBatch) << "the next block, straight from the ring";
	/* The last indices out are among 1..kCacheBatch-1 (the runs are shuffled: 32..39 and
	 * 1..24 make the first, 25..31 the last). */
	auto small = make(kCacheBatch + 8);
	std::vector<uint32_t> order;
	for (uint32_t i = 0; i < kCacheBatch + 7; ++i)
		order.push_back(mkey_index(take_live(*small, nullptr)));
	EXPECT_EQ(std::set<uint32_t>(order.begin(), order.end()).size(), kCacheBatch + 7u);
	for (uint32_t i = kCacheBatch; i < kCacheBatch + 7; ++i)
		EXPECT_LT(order[i], kCacheBatch) << i;
}

TEST(MrKeys, OrderWithinABlockIsShuffledPerKeySpace)
{
	/* Which index of a block comes first is not the same in every process: over eight key
	 * spaces the first 32 indices out come in at least two orders (all alike: 32!^-7). */
	std::set<std::vector<uint32_t>> orders;
	for (int i = 0; i < 8; ++i) {
		auto ks = make(1u << 8);
		std::vector<uint32_t> o;
		for (uint32_t j = 0; j < kCacheBatch; ++j)
			o.push_back(mkey_index(take_live(*ks, nullptr)));
		EXPECT_EQ(std::set<uint32_t>(o.begin(), o.end()).size(), size_t{kCacheBatch});
		EXPECT_EQ(*std::min_element(o.begin(), o.end()), kCacheBatch) << "still one block";
		orders.insert(o);
	}
	EXPECT_GT(orders.size(), 1u);
}

TEST(MrKeys, RetiresThroughACacheGoOutInBatches)
{
	auto ks = make(256);
	uint32_t keys[kCacheBatch + 1];
	{
		KeyCache c(*ks);
		for (uint32_t &k : keys)
			k = take_live(*ks, &c);
		for (uint32_t i = 0; i < kCacheBatch - 1; i++) {
			ASSERT_EQ(ks->begin_retire(keys[i]), 0);
			ks->retire(&c, keys[i]);
		}
		/* Held back in the cache: no token, nothing queued yet. */
		EXPECT_EQ(c.retiring(), kCacheBatch - 1);
		EXPECT_EQ(ks->retiring_count(), 0u);
		uint8_t v;
		EXPECT_EQ(ks->state_of(mkey_index(keys[0]), &v), KeyState::retiring);
		/* The batch's last one frees it (no reader holds it back). */
		ASSERT_EQ(ks->begin_retire(keys[kCacheBatch - 1]), 0);
		ks->retire(&c, keys[kCacheBatch - 1]);
		EXPECT_EQ(c.retiring(), 0u);
		EXPECT_EQ(ks->retiring_count(), 0u);
		EXPECT_EQ(ks->state_of(mkey_index(keys[0]), &v), KeyState::free);
		EXPECT_EQ(v, ks->next_variant_of(mkey_index(keys[0]), mkey_variant(keys[0])));
		/* One more, then the cache goes: its batch is freed too, not lost. */
		ASSERT_EQ(ks->begin_retire(keys[kCacheBatch]), 0);
		ks->retire(&c, keys[kCacheBatch]);
		EXPECT_EQ(c.retiring(), 1u);
	}
	EXPECT_EQ(ks->retiring_count(), 0u);
	EXPECT_EQ(ks->ring_free_count(), 255u);
}

TEST(MrKeys, BatchWaitsInTheRetireRingOnlyWhileAReaderHoldsIt)
{
	auto ks = make(256);
	ASSERT_EQ(ks->reader_register(0), 0); /* online, not yet past any token */
	KeyCache c(*ks);
	std::vector<uint32_t> keys;
	for (uint32_t i = 0; i < 2 * kCacheBatch; ++i)
		keys.push_back(take_live(*ks, &c));
	for (uint32_t i = 0; i < kCacheBatch; ++i) {
		ASSERT_EQ(ks->begin_retire(keys[i]), 0);
		ks->retire(&c, keys[i]);
	}
	EXPECT_EQ(c.retiring(), 0u);
	EXPECT_EQ(ks->retiring_count(), kCacheBatch) << "queued behind the reader";
	ks->reader_quiescent(0);
	/* The next batch's token has passed too, but an older batch waits: it goes through the
	 * retire ring behind it, and the reclaim that follows frees both, oldest first. */
	ks->reader_offline(0);
	for (uint32_t i = kCacheBatch; i < 2 * kCacheBatch; ++i) {
		ASSERT_EQ(ks->begin_retire(keys[i]), 0);
		ks->retire(&c, keys[i]);
	}
	EXPECT_EQ(ks->retiring_count(), 0u);
	uint8_t v;
	for (uint32_t k : keys)
		EXPECT_EQ(ks->state_of(mkey_index(k), &v), KeyState::free);
	/* Nothing waits and no reader is online: the next batch is freed at once, into the
	 * cache, without the retire ring. */
	const uint32_t ring = ks->ring_free_count();
	for (uint32_t i = 0; i < kCacheBatch; ++i) {
		uint32_t k = 0;
		ASSERT_EQ(ks->alloc(&c, &k), 0);
		ks->activate(k);
		ASSERT_EQ(ks->begin_retire(k), 0);
		ks->retire(&c, k);
		EXPECT_EQ(ks->retiring_count(), 0u);
	}
	EXPECT_EQ(c.retiring(), 0u);
	EXPECT_EQ(ks->ring_free_count(), ring);
}

TEST(MrKeys, AllocAndClaimQueueTheirOwnBatchFirst)
{
	/* A key space whose every free index sits in the caller's retire batch. */
	auto ks = make(4);
	KeyCache c(*ks);
	uint32_t k[3];
	for (uint32_t &x : k)
		x = take_live(*ks, &c);
	for (uint32_t &x : k) {
		ASSERT_EQ(ks->begin_retire(x), 0);
		ks->retire(&c, x);
	}
	ASSERT_EQ(c.retiring(), 3u);
	uint32_t o = 0;
	EXPECT_EQ(ks->alloc(nullptr, &o), -ENOSPC) << "another thread cannot reach the batch";
	/* A requested key in the batch: -EAGAIN for others, the owner's claim queues it. */
	const uint32_t want = make_mkey(mkey_index(k[0]), mkey_variant(k[0]) ^ 1);
	EXPECT_EQ(ks->claim(want, &o), -EAGAIN);
	ASSERT_EQ(ks->claim(want, &o, &c), 0);
	EXPECT_EQ(o, want);
	EXPECT_EQ(c.retiring(), 0u);
	ks->release(&c, o);
	/* The owner's alloc finds the rest. */
	uint32_t a = 0, b = 0, d = 0;
	EXPECT_EQ(ks->alloc(&c, &a), 0);
	EXPECT_EQ(ks->alloc(&c, &b), 0);
	EXPECT_EQ(ks->alloc(&c, &d), 0);
	EXPECT_EQ(ks->alloc(&c, &o), -ENOSPC);
}

TEST(MrKeys, ReclaimedBatchGoesWholeToTheReclaimersCacheOrTheRing)
{
	/* Thread A's batch of kCacheBatch, reclaimed through B's cache: whole into B's cache
	 * while it fits there, else whole into the ring. A batch never splits between the two,
	 * so two threads never hold indices of one aligned block. */
	auto ks = make(1u << 10);
	KeyCache a(*ks), b(*ks);
	std::set<uint32_t> batch;
	std::vector<uint32_t> keys;
	for (uint32_t i = 0; i < kCacheBatch; ++i) {
		keys.push_back(take_live(*ks, &a));
		batch.insert(mkey_index(keys.back()));
	}
	const uint32_t ring0 = ks->ring_free_count();
	ASSERT_EQ(ks->reader_register(0), 0); /* holds A's batch in the retire ring */
	for (uint32_t k : keys) {
		ASSERT_EQ(ks->begin_retire(k), 0);
		ks->retire(&a, k); /* the last queues the batch */
	}
	EXPECT_EQ(ks->retiring_count(), kCacheBatch);
	ks->reader_quiescent(0);
	uint32_t k = 0;
	ASSERT_EQ(ks->alloc(&b, &k), 0); /* fills B from the ring: kCacheBatch - 1 left */
	ks->release(&b, k);		 /* back on top: kCacheBatch */
	ASSERT_EQ(b.size(), kCacheBatch);
	EXPECT_EQ(ks->reclaim(&b), kCacheBatch);
	EXPECT_EQ(b.size(), 2 * kCacheBatch) << "the batch fits: all of it into B's cache";
	EXPECT_EQ(ks->ring_free_count(), ring0 - kCacheBatch);
	std::set<uint32_t> got;
	for (uint32_t i = 0; i < kCacheBatch; ++i) {
		ASSERT_EQ(ks->alloc(&b, &k), 0);
		got.insert(mkey_index(k));
		ks->activate(k);
	}
	EXPECT_EQ(got, batch) << "B hands out A's batch first, all of it";

	/* B's cache full: a batch goes to the ring as one bulk. */
	std::vector<uint32_t> more;
	for (uint32_t i = 0; i < kCacheBatch; ++i)
		more.push_back(take_live(*ks, &a));
	while (b.size() < kCacheSize) {
		ASSERT_EQ(ks->alloc(nullptr, &k), 0);
		ks->release(&b, k);
	}
	for (uint32_t x : more) {
		ASSERT_EQ(ks->begin_retire(x), 0);
		ks->retire(&a, x); /* queued: reader 0 has not passed the new token */
	}
	EXPECT_EQ(ks->retiring_count(), kCacheBatch);
	ks->reader_quiescent(0);
	const uint32_t ring1 = ks->ring_free_count();
	EXPECT_EQ(ks->reclaim(&b), kCacheBatch);
	EXPECT_EQ(b.size(), kCacheSize);
	EXPECT_EQ(ks->ring_free_count(), ring1 + kCacheBatch);
	std::set<uint32_t> in_b;
	while (b.size() > 0) {
		ASSERT_EQ(ks->alloc(&b, &k), 0);
		in_b.insert(mkey_index(k));
	}
	for (uint32_t x : more)
		EXPECT_EQ(in_b.count(mkey_index(x)), 0u)
			<< "index " << mkey_index(x) << " should have gone to the ring";
	for (uint32_t x : got) {
		uint8_t v;
		EXPECT_EQ(ks->state_of(x, &v), KeyState::live);
	}
}

TEST(MrKeys, ReclaimStopsAtTheFirstBatchReadersStillHold)
{
	auto ks = make(256);
	ASSERT_EQ(ks->reader_register(0), 0);
	KeyCache c(*ks);
	uint32_t first = take_live(*ks, &c), second = take_live(*ks, &c);
	ASSERT_EQ(ks->begin_retire(first), 0);
	ks->retire(nullptr, first); /* a batch of one, token t */
	ks->reader_quiescent(0);    /* reader 0 has passed t */
	ASSERT_EQ(ks->begin_retire(second), 0);
	ks->retire(nullptr, second); /* token t + 1: reader 0 has not passed it */
	EXPECT_EQ(ks->reclaim(nullptr), 0u) << "each retire reclaimed what it could already";
	uint8_t v;
	EXPECT_EQ(ks->state_of(mkey_index(first), &v), KeyState::free);
	EXPECT_EQ(ks->state_of(mkey_index(second), &v), KeyState::retiring);
	EXPECT_EQ(ks->retiring_count(), 1u) << "the held batch stays counted while pending";
	ks->reader_quiescent(0);
	EXPECT_EQ(ks->reclaim(nullptr), 1u);
	EXPECT_EQ(ks->retiring_count(), 0u);
}
