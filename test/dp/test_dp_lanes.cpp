/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The mkey programmer's UMR lanes: a registering thread claims a lane of its own on its first
 * bind, keeps it, and hands it back when it exits; threads beyond the lanes share lane 0; every
 * lane rings one UAR; binds and revokes from several threads at once all reach the device.
 */
#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "dp_rig.h"
#include "mlx5_mkey_programmer.h"
#include "mr_access.h"

using namespace nicmr::testdp;
namespace mr = nicmr::mr;

namespace {

struct Lanes : ::testing::Test {
	Rig r;
	mem::DmaBlock buf;

	void SetUp() override
	{
		ASSERT_EQ(r.make(), 0);
		ASSERT_EQ(r.data->alloc(size_t{64} << 10, 4096, &buf), 0);
	}

	std::unique_ptr<mlx5::Mlx5MkeyProgrammer> make(uint32_t lanes, uint32_t mkeys)
	{
		mlx5::MkeyProgrammerOptions o;
		o.lanes = lanes;
		std::unique_ptr<mlx5::Mlx5MkeyProgrammer> p;
		EXPECT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), o, &p), 0);
		if (p) {
			/* The device chooses the indices: the n-th made is idx[n - 1]. */
			idx.assign(mkeys, 0);
			EXPECT_EQ(p->create_free_mkeys(mkeys, idx.data()), 0);
		}
		return p;
	}
	std::vector<uint32_t> idx;

	/* The n-th (from 1) free mkey make() created, with variant 0x11. */
	uint32_t mkey_of(uint32_t n) const { return mr::make_mkey(idx.at(n - 1), 0x11); }

	mr::BindParams params() const
	{
		mr::BindParams p{};
		p.start = reinterpret_cast<uintptr_t>(buf.va);
		p.len = 4096;
		p.access = mr::kAccessLocalRead | mr::kAccessLocalWrite | mr::kAccessRemoteWrite;
		p.pd = r.pd.pd();
		p.iova_base = buf.iova;
		p.log_page_size = 12;
		return p;
	}

	/* The device's view of mkey index (one of idx[]): true when it is free. */
	bool device_free(uint32_t index)
	{
		mlx5::MkeyQuery q;
		EXPECT_EQ(r.dev->query_mkey(index, 0, &q), 0);
		return q.ctx.free;
	}
};

/* UARs still free on the device: allocates them all, then gives them back. */
size_t free_uars(mlx5::Device &dev)
{
	std::vector<std::unique_ptr<mlx5::Uar>> uars;
	std::unique_ptr<mlx5::Uar> u;
	while (mlx5::Uar::alloc(dev, &u) == 0)
		uars.push_back(std::move(u));
	return uars.size();
}

} // namespace

TEST_F(Lanes, FirstBindClaimsALaneThatTheThreadKeepsAndHandsBackAtExit)
{
	auto p = make(3, 8);
	ASSERT_TRUE(p);
	EXPECT_EQ(p->lane_count(), 3u);
	EXPECT_EQ(p->lanes_claimed(), 0u);

	std::thread([&] {
		ASSERT_EQ(p->bind(mkey_of(1), params()), 0);
		EXPECT_EQ(p->lanes_claimed(), 1u);
		const uint32_t lane = p->lane_of_this_thread();
		EXPECT_GE(lane, 1u);
		ASSERT_EQ(p->revoke(mkey_of(1)), 0);
		EXPECT_EQ(p->lane_of_this_thread(), lane) << "a thread keeps its lane";
		EXPECT_EQ(p->lanes_claimed(), 1u);
	}).join();
	EXPECT_EQ(p->lanes_claimed(), 0u) << "the exiting thread handed its lane back";
	EXPECT_TRUE(device_free(idx[0])) << "revoked";
}

TEST_F(Lanes, ThreadsBeyondTheExclusiveLanesShareLaneZero)
{
	auto p = make(3, 8); /* lanes 1 and 2 exclusive */
	ASSERT_TRUE(p);
	std::atomic<int> holding{0};
	std::atomic<bool> go_on{false};
	std::vector<uint32_t> got(2);
	std::vector<std::thread> holders;
	for (int i = 0; i < 2; i++) {
		holders.emplace_back([&, i] {
			got[size_t(i)] = p->lane_of_this_thread();
			holding.fetch_add(1);
			while (!go_on.load())
				std::this_thread::yield();
		});
	}
	while (holding.load() < 2)
		std::this_thread::yield();
	EXPECT_NE(got[0], 0u);
	EXPECT_NE(got[1], 0u);
	EXPECT_NE(got[0], got[1]) << "each thread its own lane";
	EXPECT_EQ(p->lanes_claimed(), 2u);

	std::thread([&] {
		EXPECT_EQ(p->lane_of_this_thread(), 0u) << "none left: the shared lane";
		ASSERT_EQ(p->bind(mkey_of(2), params()), 0);
		EXPECT_FALSE(device_free(idx[1]));
		ASSERT_EQ(p->revoke(mkey_of(2)), 0);
		EXPECT_TRUE(device_free(idx[1]));
	}).join();
	go_on.store(true);
	for (auto &t : holders)
		t.join();
	EXPECT_EQ(p->lanes_claimed(), 0u);
}

TEST_F(Lanes, RefusedBindAndRevokeOnAnExclusiveLaneGiveTheirCodesAndTheLaneRecovers)
{
	auto p = make(2, 8);
	ASSERT_TRUE(p);
	std::thread([&] {
		ASSERT_EQ(p->lane_of_this_thread(), 1u);
		EXPECT_EQ(p->revoke(mkey_of(3)), -EALREADY) << "free already";
		ASSERT_EQ(p->bind(mkey_of(3), params()), 0) << "the lane's QP was recovered";
		EXPECT_EQ(p->bind(mkey_of(3), params()), -EBUSY) << "not free";
		ASSERT_EQ(p->revoke(mkey_of(3)), 0);
		mr::BindParams bad = params();
		bad.log_page_size = 31;
		EXPECT_EQ(p->bind(mkey_of(3), bad), -EINVAL);
		bad = params();
		bad.len = 65 * 4096; /* 65 pages: over max_translations (64) */
		EXPECT_EQ(p->bind(mkey_of(3), bad), -E2BIG);
		EXPECT_TRUE(device_free(idx[2]));
	}).join();
}

TEST_F(Lanes, ModifyRewritesABoundMkeyAndIsRefusedOnAFreeOne)
{
	auto p = make(2, 8);
	ASSERT_TRUE(p);
	std::thread([&] {
		EXPECT_EQ(p->modify(mkey_of(4), params()), -ENOENT) << "free: nothing to modify";
		EXPECT_TRUE(device_free(idx[3]));
		ASSERT_EQ(p->bind(mkey_of(4), params()), 0) << "the lane's QP was recovered";
		mr::BindParams moved = params(); /* same start: only the translations move */
		moved.iova_base = buf.iova + 8192;
		ASSERT_EQ(p->modify(mkey_of(4), moved), 0);
		mlx5::MkeyQuery q;
		ASSERT_EQ(r.dev->query_mkey(idx[3], 1, &q), 0);
		EXPECT_FALSE(q.ctx.free) << "valid throughout";
		ASSERT_EQ(q.mtt.size(), 1u);
		EXPECT_EQ(q.mtt[0].iova, buf.iova + 8192);
		EXPECT_EQ(q.ctx.start_addr, reinterpret_cast<uintptr_t>(buf.va)) << "start kept";
		ASSERT_EQ(p->revoke(mkey_of(4)), 0);
	}).join();
}

TEST_F(Lanes, AThreadOutlivingItsProgrammerHandsBackNothingAndClaimsAfreshOnTheNext)
{
	auto p = make(2, 4);
	ASSERT_TRUE(p);
	std::atomic<int> step{0};
	std::thread t([&] {
		EXPECT_EQ(p->lane_of_this_thread(), 1u);
		step.store(1);
		while (step.load() != 2)
			std::this_thread::yield();
		/* A new programmer (another serial): this thread claims one of its lanes. */
		EXPECT_EQ(p->lane_of_this_thread(), 1u);
		EXPECT_EQ(p->lanes_claimed(), 1u);
		ASSERT_EQ(p->bind(mkey_of(1), params()), 0);
		ASSERT_EQ(p->revoke(mkey_of(1)), 0);
	});
	while (step.load() != 1)
		std::this_thread::yield();
	p.reset(); /* the thread still holds lane 1 of it */
	p = make(2, 4);
	ASSERT_TRUE(p);
	EXPECT_EQ(p->lanes_claimed(), 0u);
	step.store(2);
	t.join();
	EXPECT_EQ(p->lanes_claimed(), 0u);
}

TEST_F(Lanes, AllLanesRingOneUar)
{
	const size_t before = free_uars(*r.dev);
	{
		auto p = make(8, 4);
		ASSERT_TRUE(p);
		EXPECT_EQ(free_uars(*r.dev), before - 1);
	}
	EXPECT_EQ(free_uars(*r.dev), before) << "given back with the programmer";
}

TEST_F(Lanes, CreateRefusesBadLaneCountsAndLeavesNothingWhenTheDeviceIsOutOfUars)
{
	mlx5::MkeyProgrammerOptions o;
	std::unique_ptr<mlx5::Mlx5MkeyProgrammer> p;
	o.lanes = 0;
	EXPECT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), o, &p), -EINVAL);
	o.lanes = mlx5::Mlx5MkeyProgrammer::kMaxLanes + 1;
	EXPECT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), o, &p), -EINVAL);
	EXPECT_FALSE(p);

	std::vector<std::unique_ptr<mlx5::Uar>> uars;
	std::unique_ptr<mlx5::Uar> u;
	while (mlx5::Uar::alloc(*r.dev, &u) == 0)
		uars.push_back(std::move(u));
	const size_t qps = r.hw->device().data_path().qps(), cqs = r.hw->device().data_path().cqs();
	o.lanes = 4;
	EXPECT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), o, &p), -ENOMEM)
		<< "ALLOC_UAR's EXCEED_LIM";
	EXPECT_FALSE(p);
	EXPECT_EQ(r.hw->device().data_path().qps(), qps);
	EXPECT_EQ(r.hw->device().data_path().cqs(), cqs);
	uars.pop_back();
	EXPECT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), o, &p), 0);
	EXPECT_EQ(r.hw->device().data_path().qps(), qps + 4) << "one UMR QP per lane";
}

/* Also in the stress suite (TSan): registering threads on their own lanes and on the shared
 * one at once; every mkey ends bound or free exactly as its thread left it. */
TEST_F(Lanes, StressConcurrentBindRevokeOnOwnAndSharedLanes)
{
	constexpr uint32_t kThreads = 4, kPerThread = 8, kRounds = 300;
	auto p = make(3, kThreads * kPerThread); /* two threads share lane 0 */
	ASSERT_TRUE(p);
	std::atomic<int> failures{0};
	std::vector<std::thread> ts;
	for (uint32_t t = 0; t < kThreads; t++) {
		ts.emplace_back([&, t] {
			for (uint32_t round = 0; round < kRounds; round++) {
				const uint32_t n = 1 + t * kPerThread + round % kPerThread;
				if (p->bind(mkey_of(n), params()) != 0)
					failures.fetch_add(1);
				if (p->revoke(mkey_of(n)) != 0)
					failures.fetch_add(1);
			}
			/* Leave the first mkey of each thread bound. */
			if (p->bind(mkey_of(1 + t * kPerThread), params()) != 0)
				failures.fetch_add(1);
		});
	}
	for (auto &t : ts)
		t.join();
	EXPECT_EQ(failures.load(), 0);
	for (uint32_t i = 0; i < kThreads * kPerThread; i++)
		EXPECT_EQ(device_free(idx[i]), i % kPerThread != 0) << "mkey index " << idx[i];
	EXPECT_EQ(p->lanes_claimed(), 0u);
}
