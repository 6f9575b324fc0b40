/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <functional>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "mr_engine.h"

using namespace nicmr::mr;

namespace {

/*
 * A device that records what it was told and fails where a test asks it to. It chooses mkey
 * indices as firmware may: not from 1 and not adjacent (a stride of 23 through 1..limit-1,
 * coprime with the power-of-two and prime limits the tests use), and creates at a chosen index
 * only when `chosen` (mkey_by_name).
 */
class FakeProgrammer final : public MkeyProgrammer {
public:
	int create_free_mkeys(uint32_t count, uint32_t *indices) override
	{
		create_calls.push_back(count);
		if (fail_create)
			return fail_create;
		for (uint32_t i = 0; i < count; i++) {
			do
				pos_ = (pos_ + 23) % limit;
			while (pos_ == 0 || created.count(pos_));
			indices[i] = pos_;
			created.insert(pos_);
		}
		return 0;
	}
	bool chosen_indices() const noexcept override { return chosen; }
	int create_free_mkey_at(uint32_t index) override
	{
		if (!chosen)
			return -EOPNOTSUPP;
		at_calls.push_back(index);
		if (fail_create)
			return fail_create;
		created.insert(index);
		return 0;
	}
	int bind(uint32_t mkey, const BindParams &p) override
	{
		last_bind = mkey;
		last_params = p;
		if (on_bind)
			on_bind(mkey);
		if (fail_bind)
			return fail_bind;
		bound.insert(mkey);
		return 0;
	}
	int revoke(uint32_t mkey) override
	{
		if (fail_revoke)
			return fail_revoke;
		bound.erase(mkey);
		return 0;
	}
	int fail_create = 0, fail_bind = 0, fail_revoke = 0;
	uint32_t limit = 64; /* the index space the device chooses in */
	bool chosen = true;
	std::vector<uint32_t> create_calls, at_calls;
	std::set<uint32_t> created;
	uint32_t last_bind = 0;
	BindParams last_params{};
	std::set<uint32_t> bound;
	std::function<void(uint32_t)> on_bind;

private:
	uint32_t pos_ = 0;
};

constexpr uint64_t kAddr = 0x7f0000100000;
constexpr uint64_t kIova = 0x100000;
constexpr uint8_t kRw =
	kAccessLocalRead | kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite;

RegRequest region(uint64_t addr = kAddr, uint64_t len = 0x10000, uint8_t access = kRw)
{
	RegRequest r;
	r.addr = addr;
	r.len = len;
	r.access = access;
	r.pd = 3;
	r.iova = kIova + (addr - kAddr);
	return r;
}

class MrEngine : public ::testing::Test {
protected:
	void SetUp() override { ASSERT_EQ(Engine::create({64, 4, 0xd1}, prog_, &e_), 0); }
	int look(uint32_t k, uint64_t addr, uint64_t len = 8, uint8_t access = kAccessRemoteRead)
	{
		return e_->lookup({k, addr, len, access, 3}, &r_);
	}
	/* Free indices wherever they sit (no cache is in use in these tests). */
	uint32_t free_keys() { return e_->keys().ring_free_count(); }
	FakeProgrammer prog_;
	std::unique_ptr<Engine> e_;
	LookupResult r_{};
};

} // namespace

TEST(MrEngineCreate, CreatesTheInitialPoolInBatchesAtIndicesTheDeviceChooses)
{
	FakeProgrammer p;
	p.limit = 128;
	std::unique_ptr<Engine> e;
	EngineConfig c{128, 4, 1};
	c.pool_initial = 40;
	c.pool_grow = 16;
	ASSERT_EQ(Engine::create(c, p, &e), 0);
	EXPECT_EQ(p.create_calls, (std::vector<uint32_t>{16, 16, 8}));
	EXPECT_EQ(e->pool_size(), 40u);
	EXPECT_EQ(e->pool_max(), 127u) << "default cap: every index of the device but 0";
	EXPECT_EQ(e->keys().ring_free_count(), 40u);
	/* Keys are the device's indices (each at the first variant the key space gave it),
	 * whatever they are. */
	std::map<uint32_t, uint8_t> first;
	for (uint32_t i : p.created)
		ASSERT_EQ(e->keys().state_of(i, &first[i]), KeyState::free);
	std::set<uint32_t> got;
	for (int i = 0; i < 40; i++) {
		uint32_t k;
		ASSERT_EQ(e->reg(region(), nullptr, &k), 0);
		EXPECT_EQ(mkey_variant(k), first[mkey_index(k)]);
		got.insert(mkey_index(k));
	}
	EXPECT_EQ(got, p.created);
	EXPECT_GT(*got.rbegin() - *got.begin() + 1, 40u) << "not a contiguous range";
}

/* Two opens of one device (the same indices, in the same order) give different first keys:
 * each engine's key space has its own secret. Eight engines all alike: chance 2^-56 or less. */
TEST(MrEngineCreate, EachEngineHandsOutItsOwnFirstKeys)
{
	std::set<uint32_t> first;
	std::set<std::vector<uint32_t>> runs;
	for (int i = 0; i < 8; i++) {
		FakeProgrammer p;
		p.limit = 128;
		std::unique_ptr<Engine> e;
		EngineConfig c{128, 4, 1};
		c.pool_initial = 32;
		c.pool_grow = 32;
		ASSERT_EQ(Engine::create(c, p, &e), 0);
		std::vector<uint32_t> keys;
		for (int j = 0; j < 8; j++) {
			uint32_t k;
			ASSERT_EQ(e->reg(region(), nullptr, &k), 0);
			keys.push_back(k);
		}
		first.insert(keys[0]);
		runs.insert(keys);
	}
	EXPECT_GT(first.size(), 1u);
	EXPECT_EQ(runs.size(), 8u);
}

TEST(MrEngineCreate, DefaultPoolIsClampedToTheCap)
{
	FakeProgrammer p;
	std::unique_ptr<Engine> e;
	EngineConfig c{64, 4, 1};
	c.pool_max = 10;
	ASSERT_EQ(Engine::create(c, p, &e), 0);
	EXPECT_EQ(e->pool_size(), 10u);
	EXPECT_EQ(p.create_calls, (std::vector<uint32_t>{10}));
}

TEST(MrEngineCreate, FailedPreCreationLeavesNoEngine)
{
	FakeProgrammer p;
	p.fail_create = -EIO;
	std::unique_ptr<Engine> e;
	EXPECT_EQ(Engine::create({128, 4, 1}, p, &e), -EIO);
	EXPECT_EQ(e, nullptr);
}

/* A device that answers with an index the engine cannot use (0, out of its range, or one it
 * gave before) is a broken device: -EIO, not a corrupt key space. */
class BadIndexProgrammer final : public MkeyProgrammer {
public:
	int create_free_mkeys(uint32_t count, uint32_t *indices) override
	{
		for (uint32_t i = 0; i < count; i++)
			indices[i] = answer[i % answer.size()];
		return 0;
	}
	int bind(uint32_t, const BindParams &) override { return 0; }
	int revoke(uint32_t) override { return 0; }
	std::vector<uint32_t> answer;
};

TEST(MrEngineCreate, IndexTheEngineCannotUseIsEio)
{
	for (const std::vector<uint32_t> &bad :
	     {std::vector<uint32_t>{0}, std::vector<uint32_t>{64}, std::vector<uint32_t>{7, 7}}) {
		BadIndexProgrammer p;
		p.answer = bad;
		std::unique_ptr<Engine> e;
		EngineConfig c{64, 4, 1};
		c.pool_initial = 2;
		EXPECT_EQ(Engine::create(c, p, &e), -EIO) << bad.front();
		EXPECT_EQ(e, nullptr);
	}
}

TEST(MrEngineCreate, BadConfigIsEinval)
{
	FakeProgrammer p;
	std::unique_ptr<Engine> e;
	EXPECT_EQ(Engine::create({128, 4, 0}, p, &e), -EINVAL) << "device id 0";
	EXPECT_EQ(Engine::create({1, 4, 1}, p, &e), -EINVAL);
	EXPECT_EQ(Engine::create({128, 0, 1}, p, &e), -EINVAL);
	EngineConfig c{128, 4, 1};
	c.pool_max = 128;
	EXPECT_EQ(Engine::create(c, p, &e), -EINVAL) << "cap beyond the index space";
	c.pool_max = 0;
	c.pool_grow = 0;
	EXPECT_EQ(Engine::create(c, p, &e), -EINVAL) << "growth of 0";
	c.pool_grow = (1u << 16) + 1;
	EXPECT_EQ(Engine::create(c, p, &e), -EINVAL) << "growth above 2^16";
	EXPECT_TRUE(p.create_calls.empty()) << "the device was not asked for anything";
}

/* The pool grows in batches when a registration finds no free mkey, up to its cap; past it a
 * registration is -ENOSPC and takes nothing. */
TEST(MrEnginePool, GrowsOnDemandInBatchesUpToTheCapThenEnospc)
{
	FakeProgrammer p;
	std::unique_ptr<Engine> e;
	EngineConfig c{64, 4, 1};
	c.pool_initial = 4;
	c.pool_grow = 8;
	c.pool_max = 30;
	ASSERT_EQ(Engine::create(c, p, &e), 0);
	std::vector<uint32_t> keys;
	for (int i = 0; i < 30; i++) {
		uint32_t k;
		ASSERT_EQ(e->reg(region(), nullptr, &k), 0) << i;
		keys.push_back(k);
	}
	EXPECT_EQ(p.create_calls, (std::vector<uint32_t>{4, 8, 8, 8, 2}))
		<< "grown by pool_grow each time it ran dry, the last growth cut at the cap";
	EXPECT_EQ(e->pool_size(), 30u);
	uint32_t k = 0;
	EXPECT_EQ(e->reg(region(), nullptr, &k), -ENOSPC);
	EXPECT_EQ(e->grow(), -ENOSPC);
	EXPECT_EQ(p.create_calls.size(), 5u) << "nothing asked of the device past the cap";
	EXPECT_EQ(p.bound.size(), 30u);
	/* Every key is a device index, none twice. */
	std::set<uint32_t> idx;
	for (uint32_t key : keys)
		idx.insert(mkey_index(key));
	EXPECT_EQ(idx, p.created);
	/* A freed key is reused before the pool would grow (it is at the cap anyway). */
	ASSERT_EQ(e->dereg(keys.back(), nullptr), 0);
	ASSERT_EQ(e->reg(region(), nullptr, &k), 0);
	EXPECT_EQ(mkey_index(k), mkey_index(keys.back()));
	EXPECT_NE(k, keys.back()) << "variant rotated";
}

TEST(MrEnginePool, FailedGrowthIsTheDevicesErrorAndLeavesThePool)
{
	FakeProgrammer p;
	std::unique_ptr<Engine> e;
	EngineConfig c{64, 4, 1};
	c.pool_initial = 2;
	c.pool_grow = 4;
	ASSERT_EQ(Engine::create(c, p, &e), 0);
	uint32_t k1, k2, k3;
	ASSERT_EQ(e->reg(region(), nullptr, &k1), 0);
	ASSERT_EQ(e->reg(region(), nullptr, &k2), 0);
	p.fail_create = -ENOMEM;
	EXPECT_EQ(e->reg(region(), nullptr, &k3), -ENOMEM);
	EXPECT_EQ(e->pool_size(), 2u);
	p.fail_create = 0;
	ASSERT_EQ(e->reg(region(), nullptr, &k3), 0);
	EXPECT_EQ(e->pool_size(), 6u);
}

/* A stale key fails on the device's index as on any: the variant the engine gives rotates on
 * reuse, and the index stays the device's. */
TEST(MrEnginePool, StaleKeyOfADeviceChosenIndexIsRefused)
{
	FakeProgrammer p;
	std::unique_ptr<Engine> e;
	EngineConfig c{64, 4, 1};
	c.pool_initial = 1;
	c.pool_max = 1;
	ASSERT_EQ(Engine::create(c, p, &e), 0);
	LookupResult r{};
	uint32_t k1, k2;
	ASSERT_EQ(e->reg(region(), nullptr, &k1), 0);
	ASSERT_EQ(e->dereg(k1, nullptr), 0);
	ASSERT_EQ(e->reg(region(), nullptr, &k2), 0);
	EXPECT_EQ(mkey_index(k2), mkey_index(k1));
	EXPECT_EQ(mkey_variant(k2), e->keys().next_variant_of(mkey_index(k1), mkey_variant(k1)));
	EXPECT_NE(k2, k1);
	EXPECT_EQ(e->lookup({k1, kAddr, 8, kAccessRemoteRead, 3}, &r), -ENOKEY);
	EXPECT_EQ(e->lookup({k2, kAddr, 8, kAccessRemoteRead, 3}, &r), 0);
	EXPECT_EQ(e->dereg(k1, nullptr), -ENOKEY);
	EXPECT_EQ(p.last_bind, k2) << "the device was given the new variant";
}

/* Without mkey_by_name (a stock ConnectX) a requested key cannot be had: -EOPNOTSUPP, and
 * nothing is taken or created. */
TEST(MrEnginePool, RequestedKeyWithoutChosenIndicesIsEopnotsupp)
{
	FakeProgrammer p;
	p.chosen = false;
	std::unique_ptr<Engine> e;
	EngineConfig c{64, 4, 1};
	c.pool_initial = 8;
	ASSERT_EQ(Engine::create(c, p, &e), 0);
	EXPECT_FALSE(e->requested_keys());
	RegRequest r = region();
	r.flags = kRegRequestedKey;
	/* Even the index of an mkey the pool holds: the application cannot know them. */
	r.requested_key = make_mkey(*p.created.begin(), 0);
	uint32_t k = 0;
	EXPECT_EQ(e->reg(r, nullptr, &k), -EOPNOTSUPP);
	r.requested_key = make_mkey(5, 1);
	EXPECT_EQ(e->reg(r, nullptr, &k), -EOPNOTSUPP);
	EXPECT_TRUE(p.at_calls.empty());
	EXPECT_TRUE(p.bound.empty());
	EXPECT_EQ(e->keys().ring_free_count(), 8u);
}

/* With mkey_by_name a requested key's index is created on first use (one command), counts
 * against the cap, and is the engine's from then on like any pool index. */
TEST(MrEnginePool, RequestedKeyCreatesItsIndexWithChosenIndices)
{
	FakeProgrammer p;
	std::unique_ptr<Engine> e;
	EngineConfig c{64, 4, 1};
	c.pool_initial = 2;
	c.pool_max = 3;
	ASSERT_EQ(Engine::create(c, p, &e), 0);
	ASSERT_TRUE(e->requested_keys());
	ASSERT_FALSE(p.created.count(5)) << "the test needs an index the device did not give";
	RegRequest r = region();
	r.flags = kRegRequestedKey;
	r.requested_key = make_mkey(5, 0x42);
	uint32_t k = 0;
	ASSERT_EQ(e->reg(r, nullptr, &k), 0);
	EXPECT_EQ(k, make_mkey(5, 0x42));
	EXPECT_EQ(p.at_calls, (std::vector<uint32_t>{5}));
	EXPECT_EQ(e->pool_size(), 3u);
	EXPECT_EQ(p.last_bind, k);
	/* Its index is no allocation's while it is live, and a second claim is -EEXIST. */
	EXPECT_EQ(e->reg(r, nullptr, &k), -EEXIST);
	/* The pool is at its cap: another new index is -ENOSPC, and nothing is created. */
	r.requested_key = make_mkey(6, 0);
	EXPECT_EQ(e->reg(r, nullptr, &k), -ENOSPC);
	EXPECT_EQ(p.at_calls.size(), 1u);
	/* The two device-chosen ones are still there for provider keys. */
	uint32_t a, b;
	ASSERT_EQ(e->reg(region(), nullptr, &a), 0);
	ASSERT_EQ(e->reg(region(), nullptr, &b), 0);
	EXPECT_NE(mkey_index(a), 5u);
	EXPECT_NE(mkey_index(b), 5u);
	EXPECT_EQ(e->reg(region(), nullptr, &k), -ENOSPC);
	/* Deregistered, index 5 is back in the pool: claimed again with no new command. */
	ASSERT_EQ(e->dereg(make_mkey(5, 0x42), nullptr), 0);
	r.requested_key = make_mkey(5, 0x43);
	ASSERT_EQ(e->reg(r, nullptr, &k), 0);
	EXPECT_EQ(p.at_calls.size(), 1u);
}

TEST(MrEnginePool, FailedCreationAtAChosenIndexLeavesNothing)
{
	FakeProgrammer p;
	std::unique_ptr<Engine> e;
	EngineConfig c{64, 4, 1};
	c.pool_initial = 2;
	ASSERT_EQ(Engine::create(c, p, &e), 0);
	p.fail_create = -EIO;
	RegRequest r = region();
	r.flags = kRegRequestedKey;
	r.requested_key = make_mkey(5, 0);
	uint32_t k = 0;
	EXPECT_EQ(e->reg(r, nullptr, &k), -EIO);
	EXPECT_EQ(e->pool_size(), 2u);
	EXPECT_EQ(e->keys().state_of(5, nullptr), KeyState::free);
	p.fail_create = 0;
	ASSERT_EQ(e->reg(r, nullptr, &k), 0);
	EXPECT_EQ(p.at_calls, (std::vector<uint32_t>{5, 5}));
}

TEST_F(MrEngine, RegisteredKeyTranslatesAndDeregisteredKeyDoesNot)
{
	uint32_t k;
	ASSERT_EQ(e_->reg(region(), nullptr, &k), 0);
	EXPECT_EQ(prog_.last_bind, k);
	EXPECT_EQ(prog_.last_params.start, kAddr);
	EXPECT_EQ(prog_.last_params.len, 0x10000u);
	EXPECT_EQ(prog_.last_params.access, kRw);
	EXPECT_EQ(prog_.last_params.pd, 3u);
	EXPECT_EQ(prog_.last_params.iova_base, kIova);
	ASSERT_EQ(look(k, kAddr + 0x100), 0);
	EXPECT_EQ(r_.iova, kIova + 0x100);
	ASSERT_EQ(e_->dereg(k, nullptr), 0);
	EXPECT_EQ(prog_.bound.count(k), 0u) << "revoked on the device";
	EXPECT_EQ(look(k, kAddr + 0x100), -ENOKEY);
	EXPECT_EQ(e_->dereg(k, nullptr), -ENOKEY) << "twice";
}

TEST_F(MrEngine, ZeroBasedRegionIsAddressedByOffset)
{
	RegRequest r = region();
	r.flags = kRegZeroBased;
	uint32_t k;
	ASSERT_EQ(e_->reg(r, nullptr, &k), 0);
	EXPECT_EQ(prog_.last_params.start, 0u);
	ASSERT_EQ(look(k, 0x20), 0);
	EXPECT_EQ(r_.iova, kIova + 0x20);
	EXPECT_EQ(r_.flags, kEntryZeroBased);
	EXPECT_EQ(look(k, kAddr), -ERANGE);
}

TEST_F(MrEngine, InvalidArgumentsAreEinvalAndTakeNoKey)
{
	const uint32_t before = free_keys();
	uint32_t k;
	RegRequest r = region(kAddr, 0);
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EINVAL) << "len 0";
	r = region(UINT64_MAX - 0xff, 0x1000);
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EINVAL) << "addr wraps";
	r = region();
	r.iova = UINT64_MAX - 0xff;
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EINVAL) << "iova wraps";
	r = region(kAddr, 0x1000, kAccessRemoteWrite);
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EINVAL) << "rw without lw";
	r = region(kAddr, 0x1000, 0x40);
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EINVAL) << "unknown access bit";
	r = region();
	r.pd = 1u << 24;
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EINVAL) << "pd";
	r = region();
	r.log_page_size = 11;
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EINVAL) << "page size";
	r.log_page_size = 31;
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EINVAL) << "page size";
	r = region();
	r.flags = 1u << 20;
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EOPNOTSUPP) << "unknown flag";
	EXPECT_EQ(free_keys(), before);
	EXPECT_TRUE(prog_.bound.empty());
}

TEST_F(MrEngine, PoolLookupRegionMayUseAnyHandle)
{
	RegRequest r = region();
	r.flags = kRegPoolLookup;
	r.iova = UINT64_MAX; /* a handle, not an address: no wrap check */
	uint32_t k;
	ASSERT_EQ(e_->reg(r, nullptr, &k), 0);
	ASSERT_EQ(look(k, kAddr + 4), 0);
	EXPECT_EQ(r_.iova, 4u);
	EXPECT_EQ(r_.handle, UINT64_MAX);
}

TEST_F(MrEngine, FailedBindLeavesNothingBehind)
{
	const uint32_t before = free_keys();
	prog_.fail_bind = -ETIMEDOUT;
	uint32_t k = 0xdead;
	EXPECT_EQ(e_->reg(region(), nullptr, &k), -ETIMEDOUT);
	EXPECT_EQ(k, 0xdeadu) << "no key returned";
	const uint32_t tried = prog_.last_bind;
	uint8_t v;
	EXPECT_EQ(e_->keys().state_of(mkey_index(tried), &v), KeyState::free);
	EXPECT_EQ(v, e_->keys().next_variant_of(mkey_index(tried), mkey_variant(tried)));
	EXPECT_NE(v, mkey_variant(tried)) << "the key it tried is never reused as is";
	EXPECT_EQ(free_keys(), before);
	EXPECT_EQ(look(tried, kAddr), -ENOKEY);
	EXPECT_TRUE(prog_.bound.empty());
}

TEST_F(MrEngine, FailedBindOfRequestedKeyFreesTheIndex)
{
	prog_.fail_bind = -EIO;
	uint32_t k;
	RegRequest r = region();
	r.flags = kRegRequestedKey;
	r.requested_key = make_mkey(9, 1);
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EIO);
	prog_.fail_bind = 0;
	ASSERT_EQ(e_->reg(r, nullptr, &k), 0) << "the index is free again";
	EXPECT_EQ(k, make_mkey(9, 1));
}

TEST_F(MrEngine, FailedRevokeKeepsTheRegionWorking)
{
	uint32_t k;
	ASSERT_EQ(e_->reg(region(), nullptr, &k), 0);
	prog_.fail_revoke = -EIO;
	EXPECT_EQ(e_->dereg(k, nullptr), -EIO);
	ASSERT_EQ(look(k, kAddr), 0);
	EXPECT_EQ(r_.iova, kIova);
	EXPECT_EQ(e_->keys().state_of(mkey_index(k), nullptr), KeyState::live);
	EXPECT_EQ(e_->keys().retiring_count(), 0u);
	prog_.fail_revoke = 0;
	EXPECT_EQ(e_->dereg(k, nullptr), 0);
	EXPECT_EQ(look(k, kAddr), -ENOKEY);
}

TEST_F(MrEngine, ExhaustedKeySpaceIsEnospcAndLeavesNothing)
{
	std::vector<uint32_t> keys;
	uint32_t k;
	for (int i = 0; i < 63; ++i) {
		ASSERT_EQ(e_->reg(region(), nullptr, &k), 0);
		keys.push_back(k);
	}
	EXPECT_EQ(e_->reg(region(), nullptr, &k), -ENOSPC);
	EXPECT_EQ(prog_.bound.size(), 63u);
	for (uint32_t key : keys)
		ASSERT_EQ(e_->dereg(key, nullptr), 0);
	EXPECT_EQ(free_keys(), 63u);
}

TEST_F(MrEngine, RequestedKeysFollowTheKeySpaceRules)
{
	RegRequest r = region();
	r.flags = kRegRequestedKey;
	uint32_t k;
	r.requested_key = make_mkey(5, 0xaa);
	ASSERT_EQ(e_->reg(r, nullptr, &k), 0);
	EXPECT_EQ(k, make_mkey(5, 0xaa));
	EXPECT_EQ(look(k, kAddr), 0);
	r.requested_key = make_mkey(5, 0xbb);
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EEXIST);
	r.requested_key = make_mkey(64, 0);
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EKEYREJECTED);
	r.requested_key = 1ull << 32;
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EKEYREJECTED);
	r.requested_key = 0;
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EKEYREJECTED);
}

TEST_F(MrEngine, ClosedWellKnownKeyIsReusableAfterTheGracePeriod)
{
	ASSERT_EQ(e_->reader_register(0), 0);
	RegRequest r = region();
	r.flags = kRegRequestedKey;
	r.requested_key = make_mkey(5, 1);
	uint32_t k;
	ASSERT_EQ(e_->reg(r, nullptr, &k), 0);
	ASSERT_EQ(e_->dereg(k, nullptr), 0);
	EXPECT_EQ(e_->reg(r, nullptr, &k), -EAGAIN);
	e_->reader_quiescent(0);
	EXPECT_EQ(e_->reg(r, nullptr, &k), 0);
	e_->reader_unregister(0);
}

TEST_F(MrEngine, KeyCannotBeDeregisteredWhileItIsBeingRegistered)
{
	int inner = 1;
	prog_.on_bind = [&](uint32_t mkey) { inner = e_->dereg(mkey, nullptr); };
	uint32_t k;
	ASSERT_EQ(e_->reg(region(), nullptr, &k), 0);
	EXPECT_EQ(inner, -ENOKEY);
	EXPECT_EQ(look(k, kAddr), 0);
}

TEST_F(MrEngine, RawKeyOfARegionMapsBackToItsKey)
{
	uint32_t k;
	ASSERT_EQ(e_->reg(region(), nullptr, &k), 0);
	uint8_t buf[kRawKeySize];
	size_t size = 1;
	EXPECT_EQ(e_->raw_attr(k, buf, &size), -ENOSPC);
	EXPECT_EQ(size, kRawKeySize);
	ASSERT_EQ(e_->raw_attr(k, buf, &size), 0);
	RawKey rk;
	ASSERT_EQ(decode_raw_key(buf, size, 0xd1, &rk), 0);
	EXPECT_EQ(rk.base_addr, kAddr);
	EXPECT_EQ(rk.length, 0x10000u);
	EXPECT_EQ(rk.access, kRw);
	EXPECT_EQ(rk.pd, 3u);
	uint64_t key = 0;
	ASSERT_EQ(Engine::map_raw(buf, size, 0xd1, &key), 0);
	EXPECT_EQ(key, k);
	EXPECT_EQ(Engine::unmap_raw(key), 0);
	EXPECT_EQ(Engine::map_raw(buf, size, 0xd2, &key), -EXDEV);
	buf[20] ^= 1;
	EXPECT_EQ(Engine::map_raw(buf, size, kAnyDevice, &key), -EINVAL);
	ASSERT_EQ(e_->dereg(k, nullptr), 0);
	EXPECT_EQ(e_->raw_attr(k, buf, &size), -ENOKEY);
}

/*
 * Random reg/reg_sub/dereg/lookup/raw sequences against a plain model: which mkeys are live with
 * which region (and sub-MRs on them), and which variant each index will hand out next. No readers
 * are registered, so every grace period is over at once and indices come back (and variants wrap)
 * quickly.
 */
TEST(MrEngineProperty, RandomSequencesAgreeWithAModel)
{
	constexpr uint32_t kIdx = 17;
	FakeProgrammer prog;
	prog.limit = kIdx;
	std::unique_ptr<Engine> e;
	ASSERT_EQ(Engine::create({kIdx, 4, 7}, prog, &e), 0);
	KeyCache cache(e->keys());
	struct Region {
		uint64_t addr, len, iova;
		uint8_t access;
		uint32_t base = 0;  /* for a sub-MR: its base's mkey */
		unsigned holds = 0; /* live sub-MRs on this region */
	};
	std::map<uint32_t, Region> live; /* mkey -> region */
	/* index -> variant it carries while free (an index never used yet is absent: its first
	 * variant is the key space's draw) */
	std::map<uint32_t, uint8_t> next_var;
	auto expect_next = [&](uint32_t k) {
		const auto it = next_var.find(mkey_index(k));
		return it == next_var.end() || it->second == mkey_variant(k);
	};
	std::vector<uint32_t> dead;
	std::mt19937_64 rng(12345);
	auto live_at = [&](uint32_t index) {
		for (auto &[k, r] : live)
			if (mkey_index(k) == index)
				return true;
		return false;
	};
	const uint8_t accesses[] = {kAccessLocalRead, kRw, kAccessRemoteRead | kAccessLocalRead,
				    kAccessLocalWrite | kAccessRemoteAtomic};
	std::map<int, unsigned> outcomes; /* every result of reg, reg_sub and dereg */
	auto close = [&](uint32_t k) {
		Region &g = live.at(k);
		const int want = g.holds ? -EBUSY : 0;
		outcomes[want]++;
		EXPECT_EQ(e->dereg(k, &cache), want);
		if (want == 0) {
			if (g.base)
				live.at(g.base).holds--;
			live.erase(k);
			dead.push_back(k);
		}
	};
	for (int step = 0; step < 30000; ++step) {
		const unsigned op = rng() % 10;
		if (op >= 8 && !live.empty()) {
			const uint32_t base = std::next(live.begin(), rng() % live.size())->first;
			const Region &b = live.at(base);
			/* Mostly inside, sometimes sticking out by a byte on either side. */
			uint64_t off = rng() % b.len;
			uint64_t len = 1 + rng() % (b.len - off);
			uint64_t addr = b.addr + off;
			/* A byte before the base's start, or a byte past its end: drawn as "off 0"
			 * or "the longest len" these were 1 in (len - off) of their shape, so rare
			 * that a run could meet no -ERANGE (the key space's random draws shape
			 * which regions live). */
			const unsigned shape = rng() % 8;
			if (shape == 0) {
				addr = b.addr - 1;
				len = 1 + rng() % b.len;
			} else if (shape == 1) {
				len = b.len - off + 1;
			}
			const bool inside = addr >= b.addr && addr + len <= b.addr + b.len;
			const uint8_t access = accesses[rng() % 4];
			prog.fail_bind = rng() % 10 == 0 ? -EIO : 0;
			uint32_t k = 0;
			const int rc = e->reg_sub(base, region(addr, len, access), &cache, &k);
			outcomes[rc]++;
			const int want = !access_covers(b.access, access) ? -EACCES
					 : !inside			  ? -ERANGE
					 : live.size() == kIdx - 1	  ? -ENOSPC
					 : prog.fail_bind		  ? -EIO
									  : 0;
			ASSERT_EQ(rc, want) << "step " << step;
			if (want == 0) {
				ASSERT_TRUE(expect_next(k)) << step;
				live[k] = {addr, len, b.iova + (addr - b.addr), access, base, 0};
				live.at(base).holds++;
				next_var[mkey_index(k)] =
					e->keys().next_variant_of(mkey_index(k), mkey_variant(k));
			} else if (want == -EIO) {
				const uint32_t t = prog.last_bind;
				ASSERT_TRUE(expect_next(t)) << step;
				next_var[mkey_index(t)] =
					e->keys().next_variant_of(mkey_index(t), mkey_variant(t));
			}
			continue;
		}
		if (op < 3) {
			RegRequest r = region(kAddr + (rng() % 1000) * 0x1000, 1 + rng() % 0x8000,
					      accesses[rng() % 4]);
			const bool requested = rng() % 3 == 0;
			if (requested) {
				r.flags = kRegRequestedKey;
				r.requested_key = rng() % 8 == 0
							  ? rng()
							  : make_mkey(rng() % (kIdx + 2),
								      static_cast<uint8_t>(rng()));
			}
			prog.fail_bind = rng() % 10 == 0 ? -EIO : 0;
			uint32_t k = 0;
			int rc = e->reg(r, &cache, &k);
			outcomes[rc]++;
			int want;
			if (requested) {
				uint64_t q = r.requested_key;
				uint32_t idx = mkey_index(static_cast<uint32_t>(q));
				want = (q > UINT32_MAX || idx == 0 || idx >= kIdx) ? -EKEYREJECTED
				       : live_at(idx)				   ? -EEXIST
				       : prog.fail_bind				   ? -EIO
										   : 0;
			} else {
				want = live.size() == kIdx - 1 ? -ENOSPC
				       : prog.fail_bind	       ? -EIO
							       : 0;
			}
			ASSERT_EQ(rc, want) << "step " << step;
			if (want == 0) {
				if (!requested) {
					ASSERT_TRUE(expect_next(k)) << step;
				}
				live[k] = {r.addr, r.len, r.iova, r.access, 0, 0};
				next_var[mkey_index(k)] =
					e->keys().next_variant_of(mkey_index(k), mkey_variant(k));
			} else if (want == -EIO) {
				uint32_t t = prog.last_bind;
				if (!requested) {
					ASSERT_TRUE(expect_next(t)) << step;
				}
				next_var[mkey_index(t)] =
					e->keys().next_variant_of(mkey_index(t), mkey_variant(t));
			}
		} else if (op < 5 && !live.empty()) {
			close(std::next(live.begin(), rng() % live.size())->first);
			ASSERT_FALSE(HasFailure()) << step;
		} else if (op < 6 && !dead.empty()) {
			const uint32_t k = dead[rng() % dead.size()];
			if (live.count(k))
				close(k);
			else
				ASSERT_EQ(e->dereg(k, &cache), -ENOKEY) << step;
			ASSERT_FALSE(HasFailure()) << step;
		} else if (!live.empty() || !dead.empty()) {
			const bool pick_live = !live.empty() && (dead.empty() || rng() % 2);
			const uint32_t k =
				pick_live ? std::next(live.begin(), rng() % live.size())->first
					  : dead[rng() % dead.size()];
			auto it = live.find(k);
			LookupResult res;
			if (it == live.end()) {
				ASSERT_EQ(e->lookup({k, kAddr, 1, 0, kAnyPd}, &res), -ENOKEY)
					<< step;
				uint8_t raw[kRawKeySize];
				size_t size = sizeof raw;
				ASSERT_EQ(e->raw_attr(k, raw, &size), -ENOKEY) << step;
				continue;
			}
			const Region &g = it->second;
			const uint64_t off = rng() % g.len;
			const uint64_t len = 1 + rng() % (g.len - off + 1);
			const bool fits = off + len <= g.len;
			const uint8_t need = accesses[rng() % 4];
			int want = !access_covers(g.access, need) ? -EACCES : fits ? 0 : -ERANGE;
			ASSERT_EQ(e->lookup({k, g.addr + off, len, need, 3}, &res), want) << step;
			if (want == 0) {
				ASSERT_EQ(res.iova, g.iova + off) << step;
			}
		}
	}
	/* Subs before their bases: the newest registrations first would not do (indices are
	 * reused), so close whatever holds nothing until nothing is left. */
	while (!live.empty()) {
		for (auto it = live.begin(); it != live.end();) {
			const uint32_t k = (it++)->first;
			if (live.at(k).holds == 0)
				close(k);
		}
		ASSERT_FALSE(HasFailure());
	}
	EXPECT_EQ(e->keys().retiring_count(), 0u);
	/* The run reached every outcome, or it proved less than it claims. */
	for (int rc : {0, -EIO, -ENOSPC, -EEXIST, -EKEYREJECTED, -EACCES, -ERANGE, -EBUSY})
		EXPECT_GT(outcomes[rc], 0u) << "never saw " << rc;
}

TEST_F(MrEngine, SubMrTranslatesInsideItsBaseWithTheBasePd)
{
	uint32_t base, sub;
	ASSERT_EQ(e_->reg(region(), nullptr, &base), 0);
	RegRequest r = region(kAddr + 0x1000, 0x2000, kAccessLocalRead | kAccessRemoteRead);
	r.pd = 99;	/* ignored: the base's PD */
	r.iova = 12345; /* ignored: the base's translations */
	ASSERT_EQ(e_->reg_sub(base, r, nullptr, &sub), 0);
	EXPECT_NE(mkey_index(sub), mkey_index(base));
	EXPECT_EQ(prog_.last_params.iova_base, kIova + 0x1000);
	EXPECT_EQ(prog_.last_params.pd, 3u);
	ASSERT_EQ(look(sub, kAddr + 0x1010), 0);
	EXPECT_EQ(r_.iova, kIova + 0x1010);
	EXPECT_EQ(r_.flags, kEntrySub);
	EXPECT_EQ(look(sub, kAddr + 0x1010, 8, kAccessRemoteWrite), -EACCES) << "own access";
	EXPECT_EQ(look(sub, kAddr + 0x3000), -ERANGE) << "own range";
	ASSERT_EQ(look(base, kAddr + 0x3000, 8, kAccessRemoteWrite), 0) << "base unchanged";
}

TEST_F(MrEngine, SubMrMayNotExceedItsBase)
{
	uint32_t base, sub = 0;
	RegRequest b = region();
	b.access = kAccessLocalRead | kAccessRemoteRead;
	ASSERT_EQ(e_->reg(b, nullptr, &base), 0);
	const uint32_t before = free_keys();
	EXPECT_EQ(e_->reg_sub(base, region(kAddr, 0x100, kRw), nullptr, &sub), -EACCES);
	EXPECT_EQ(e_->reg_sub(base, region(kAddr - 1, 0x100, kAccessLocalRead), nullptr, &sub),
		  -ERANGE);
	EXPECT_EQ(e_->reg_sub(base, region(kAddr + 0xff00, 0x101, kAccessLocalRead), nullptr, &sub),
		  -ERANGE);
	EXPECT_EQ(e_->reg_sub(base, region(kAddr, 0, kAccessLocalRead), nullptr, &sub), -EINVAL);
	EXPECT_EQ(e_->reg_sub(base, region(kAddr, 0x100, kAccessRemoteWrite), nullptr, &sub),
		  -EINVAL);
	EXPECT_EQ(e_->reg_sub(base ^ 1, region(kAddr, 0x100, kAccessLocalRead), nullptr, &sub),
		  -ENOKEY);
	RegRequest f = region(kAddr, 0x100, kAccessLocalRead);
	f.flags = kRegPoolLookup;
	EXPECT_EQ(e_->reg_sub(base, f, nullptr, &sub), -EOPNOTSUPP);
	EXPECT_EQ(sub, 0u);
	EXPECT_EQ(free_keys(), before);
	EXPECT_EQ(e_->dereg(base, nullptr), 0) << "no hold left behind";
}

TEST_F(MrEngine, SubMrOfAPoolLookupBaseIsEopnotsupp)
{
	RegRequest b = region();
	b.flags = kRegPoolLookup;
	uint32_t base, sub;
	ASSERT_EQ(e_->reg(b, nullptr, &base), 0);
	EXPECT_EQ(e_->reg_sub(base, region(kAddr, 0x100, kAccessLocalRead), nullptr, &sub),
		  -EOPNOTSUPP);
	EXPECT_EQ(e_->dereg(base, nullptr), 0);
}

TEST_F(MrEngine, BaseWithLiveSubMrsIsEbusy)
{
	uint32_t base, sub, subsub;
	ASSERT_EQ(e_->reg(region(), nullptr, &base), 0);
	ASSERT_EQ(e_->reg_sub(base, region(kAddr + 0x100, 0x1000, kAccessLocalRead), nullptr, &sub),
		  0);
	ASSERT_EQ(e_->reg_sub(sub, region(kAddr + 0x200, 0x10, kAccessLocalRead), nullptr, &subsub),
		  0);
	EXPECT_EQ(e_->dereg(base, nullptr), -EBUSY);
	EXPECT_EQ(e_->dereg(sub, nullptr), -EBUSY);
	EXPECT_EQ(look(base, kAddr), 0) << "a refused close changes nothing";
	ASSERT_EQ(e_->dereg(subsub, nullptr), 0);
	EXPECT_EQ(e_->dereg(base, nullptr), -EBUSY);
	ASSERT_EQ(e_->dereg(sub, nullptr), 0);
	EXPECT_EQ(e_->dereg(base, nullptr), 0);
}

TEST_F(MrEngine, FailedSubMrBindReleasesItsHoldOnTheBase)
{
	uint32_t base, sub;
	ASSERT_EQ(e_->reg(region(), nullptr, &base), 0);
	prog_.fail_bind = -EIO;
	EXPECT_EQ(e_->reg_sub(base, region(kAddr, 0x100, kAccessLocalRead), nullptr, &sub), -EIO);
	EXPECT_EQ(e_->dereg(base, nullptr), 0);
}
