/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration engine (lib/mr) on the device model through Mlx5MkeyProgrammer: a key the
 * engine hands out works for RDMA at once, and stops working when dereg returns.
 */
#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "dp_rig.h"
#include "mlx5_mkey_programmer.h"
#include "mr_engine.h"

using namespace nicmr::testdp;
namespace mr = nicmr::mr;

TEST(DpEngine, RegisteredKeyWorksForRdmaAndDeregTakesItAway)
{
	Rig r;
	ASSERT_EQ(r.make(), 0);
	std::unique_ptr<mlx5::Mlx5MkeyProgrammer> prog;
	ASSERT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), {}, &prog), 0);
	mr::EngineConfig cfg;
	/* The device's index space; a pool of 63 free mkeys at indices the device chose. */
	cfg.index_count = uint32_t{1} << r.dev->caps().log_max_mkey;
	cfg.pool_initial = 63;
	std::unique_ptr<mr::Engine> eng;
	ASSERT_EQ(mr::Engine::create(cfg, *prog, &eng), 0);
	EXPECT_EQ(prog->mkey_count(), 63u);
	EXPECT_FALSE(eng->requested_keys()) << "a stock device: no mkey_by_name";

	mem::DmaBlock dst, src;
	ASSERT_EQ(r.data->alloc(3 * 4096, 4096, &dst), 0);
	ASSERT_EQ(r.data->alloc(4096, 4096, &src), 0);
	TestMr src_mr; /* CREATE_MKEY: the device picks an index none of the engine's has */
	ASSERT_EQ(r.mtt_mr(src, 0, 4096, r.ctx(true, false, false, false, false), &src_mr), 0);
	EXPECT_EQ(eng->keys().state_of(src_mr.handle.index(), nullptr), mr::KeyState::free);

	mr::RegRequest req;
	req.addr = reinterpret_cast<uintptr_t>(dst.va) + 100;
	req.len = 2 * 4096;
	req.access = mr::kAccessLocalRead | mr::kAccessLocalWrite | mr::kAccessRemoteWrite;
	req.pd = r.pd.pd();
	req.iova = dst.iova + 100;
	req.log_page_size = 12;
	uint32_t key = 0;
	ASSERT_EQ(eng->reg(req, nullptr, &key), 0);
	/* The key's index is one the device chose, and its mkey is the device's. */
	mlx5::MkeyQuery q;
	ASSERT_EQ(r.dev->query_mkey(mr::mkey_index(key), 0, &q), 0);
	EXPECT_FALSE(q.ctx.free);
	EXPECT_EQ(q.ctx.variant, mr::mkey_variant(key));

	std::memset(src.va, 0x6d, 4096);
	mlx5::Sge s{reinterpret_cast<uintptr_t>(src.va), 4096, src_mr.key};
	mlx5::Completion c;
	ASSERT_EQ(r.qp[0]->post_write({&s, 1}, req.addr + 3000, key, 1, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok()) << "syndrome 0x" << std::hex << int(c.syndrome);
	EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(dst.va) + 3100, src.va, 4096), 0);

	ASSERT_EQ(eng->dereg(key, nullptr), 0);
	ASSERT_EQ(r.qp[0]->post_write({&s, 1}, req.addr, key, 2, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_EQ(eng->dereg(key, nullptr), -ENOKEY);

	src_mr.handle.reset();
	eng.reset();
	prog.reset();
	EXPECT_EQ(r.data->release(dst), 0);
	EXPECT_EQ(r.data->release(src), 0);
}

TEST(DpEngine, RefreshRepointsALiveKeyAndRefusesWhatItCannot)
{
	Rig r;
	ASSERT_EQ(r.make(), 0);
	std::unique_ptr<mlx5::Mlx5MkeyProgrammer> prog;
	ASSERT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), {}, &prog), 0);
	mr::EngineConfig cfg;
	cfg.index_count = uint32_t{1} << r.dev->caps().log_max_mkey;
	cfg.pool_initial = 63;
	std::unique_ptr<mr::Engine> eng;
	ASSERT_EQ(mr::Engine::create(cfg, *prog, &eng), 0);
	mem::DmaBlock buf;
	ASSERT_EQ(r.data->alloc(4 * 4096, 4096, &buf), 0);

	mr::RegRequest req;
	req.addr = reinterpret_cast<uintptr_t>(buf.va);
	req.len = 4096;
	req.access = mr::kAccessLocalRead | mr::kAccessLocalWrite | mr::kAccessRemoteWrite;
	req.pd = r.pd.pd();
	req.iova = buf.iova;
	req.log_page_size = 12;
	uint32_t key = 0, sub = 0;
	ASSERT_EQ(eng->reg(req, nullptr, &key), 0);
	auto iova_of = [&](uint32_t k) {
		mr::LookupResult res{};
		EXPECT_EQ(eng->lookup({k, req.addr, 1, mr::kAccessRemoteWrite, mr::kAnyPd}, &res),
			  0);
		return res.iova;
	};

	EXPECT_EQ(eng->refresh(key, buf.iova + 8192, 11), -EINVAL) << "page size below 4 KiB";
	EXPECT_EQ(eng->refresh(key, buf.iova + 8192, 31), -EINVAL) << "page size above 1 GiB";
	EXPECT_EQ(eng->refresh(key ^ 0x01, buf.iova + 8192, 12), -ENOKEY) << "stale variant";
	mr::RegRequest sreq = req;
	ASSERT_EQ(eng->reg_sub(key, sreq, nullptr, &sub), 0);
	EXPECT_EQ(eng->refresh(key, buf.iova + 8192, 12), -EBUSY) << "a sub-MR points at it";
	EXPECT_EQ(eng->refresh(sub, buf.iova + 8192, 12), -EOPNOTSUPP) << "a sub-MR itself";
	ASSERT_EQ(eng->dereg(sub, nullptr), 0);
	EXPECT_EQ(iova_of(key), buf.iova) << "refusals changed nothing";

	ASSERT_EQ(eng->refresh(key, buf.iova + 8192, 12), 0);
	EXPECT_EQ(iova_of(key), buf.iova + 8192);
	mlx5::MkeyQuery q;
	ASSERT_EQ(r.dev->query_mkey(mr::mkey_index(key), 1, &q), 0);
	EXPECT_FALSE(q.ctx.free);
	ASSERT_EQ(q.mtt.size(), 1u);
	EXPECT_EQ(q.mtt[0].iova, buf.iova + 8192) << "the device translates through the new pages";
	ASSERT_EQ(eng->dereg(key, nullptr), 0);
	EXPECT_EQ(eng->refresh(key, buf.iova, 12), -ENOKEY) << "deregistered";

	eng.reset();
	prog.reset();
	EXPECT_EQ(r.data->release(buf), 0);
}
