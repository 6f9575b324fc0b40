/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UMR against the device model: free mkeys bound and revoked with work requests, RDMA through
 * a bound key, a refused double bind and double revoke that leave the QP usable again, pointer
 * translations with the reserved lkey, LOCAL_INVAL, and the registration engine's
 * MkeyProgrammer over all of it.
 */
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dp_rig.h"
#include "mlx5_mkey_programmer.h"
#include "mlx5_umr.h"
#include "mr_access.h"
#include "testmr_dp_demo.h"

using namespace nicmr::testdp;
namespace mr = nicmr::mr;

namespace {

class Umr : public ::testing::TestWithParam<emu::DoorbellDelivery> {
protected:
	void SetUp() override
	{
		RigOptions o;
		o.delivery = GetParam();
		ASSERT_EQ(r.make(o), 0);
		ASSERT_EQ(mlx5::UmrQueue::create(*r.dev, r.pd.pd(), {}, &umr), 0);
		ASSERT_EQ(r.data->alloc(size_t{1} << 20, 4096, &buf), 0);
		ASSERT_EQ(r.data->alloc(4096, 4096, &src), 0);
		/* The local source of writes: a plain MTT mkey. */
		ASSERT_EQ(r.mtt_mr(src, 0, 4096, r.ctx(true, true, false, false, false), &src_mr),
			  0);
	}
	void TearDown() override
	{
		umr.reset();
		src_mr.handle.reset();
		if (buf.va != nullptr) {
			EXPECT_EQ(r.data->release(buf), 0);
		}
		if (src.va != nullptr) {
			EXPECT_EQ(r.data->release(src), 0);
		}
	}

	/* A free, UMR-enabled MTT mkey with room for n entries. */
	int free_mkey(uint32_t n, TestMr *out, uint8_t variant = 0)
	{
		mlx5::MkeyCreate c;
		c.ctx = r.ctx(true, false, false, false, false, variant);
		c.ctx.free = true;
		c.ctx.umr_en = true;
		c.ctx.translations_octword_size = static_cast<uint32_t>(prm::mtt_octwords(n));
		return r.create_raw(c, out);
	}

	mlx5::UmrBind bind_for(uint32_t key, size_t off, size_t len,
			       std::vector<mlx5::MttEntry> *mtt)
	{
		mlx5::UmrBind b;
		b.mkey = key;
		b.lr = true;
		b.rw = true;
		b.rr = true;
		b.pd = r.pd.pd();
		b.start = va(off);
		b.len = len;
		b.log_page_size = 12;
		for (uint64_t p = (buf.iova + off) & ~uint64_t{4095}; p < buf.iova + off + len;
		     p += 4096)
			mtt->push_back({p, true, true});
		b.mtt = *mtt;
		return b;
	}

	uint64_t va(size_t off) const { return reinterpret_cast<uintptr_t>(buf.va) + off; }

	/* RDMA WRITE of n bytes from src to (addr, key): the completion's syndrome. */
	uint8_t write(uint64_t addr, uint32_t key, uint32_t n)
	{
		mlx5::Sge s{reinterpret_cast<uintptr_t>(src.va), n, src_mr.key};
		EXPECT_EQ(r.qp[0]->post_write({&s, 1}, addr, key, 0, mlx5::kSignaled), 0);
		mlx5::Completion c;
		EXPECT_TRUE(r.wait(0, &c));
		if (!c.ok()) {
			r.qp[0]->recover();
			r.qp[1]->recover();
			mlx5::Event e;
			while (r.eq->poll(&e, 1) == 1) {
			}
		}
		return c.syndrome;
	}

	Rig r;
	std::unique_ptr<mlx5::UmrQueue> umr;
	mem::DmaBlock buf, src;
	TestMr src_mr;
};

} // namespace

TEST_P(Umr, BindMakesAFreeMkeyUsableAndRevokeTakesItAway)
{
	TestMr m;
	ASSERT_EQ(free_mkey(16, &m, 0x10), 0);
	/* The bind sets a new variant. */
	const uint32_t key = mr::make_mkey(m.handle.index(), 0x21);
	std::memset(src.va, 0xab, 4096);
	EXPECT_EQ(write(va(100), key, 64), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR) << "free mkey";

	std::vector<mlx5::MttEntry> mtt;
	ASSERT_EQ(umr->bind(bind_for(key, 100, 20000, &mtt)), 0);
	EXPECT_EQ(write(va(100) + 8000, key, 4096), 0);
	EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(buf.va) + 8100, src.va, 4096), 0);
	/* The old variant no longer matches. */
	EXPECT_EQ(write(va(100), mr::make_mkey(m.handle.index(), 0x10), 64),
		  MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);

	mlx5::MkeyQuery q;
	ASSERT_EQ(r.dev->query_mkey(m.handle.index(), 8, &q), 0);
	EXPECT_FALSE(q.ctx.free);
	EXPECT_EQ(q.ctx.variant, 0x21);
	EXPECT_EQ(q.ctx.start_addr, va(100));
	EXPECT_EQ(q.ctx.len, 20000u);
	EXPECT_TRUE(q.ctx.rw);
	EXPECT_FALSE(q.ctx.a);

	ASSERT_EQ(umr->revoke(key), 0);
	ASSERT_EQ(r.dev->query_mkey(m.handle.index(), 0, &q), 0);
	EXPECT_TRUE(q.ctx.free);
	EXPECT_EQ(write(va(100), key, 64), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_EQ(umr->recoveries(), 0u);
}

TEST_P(Umr, DoubleBindAndDoubleRevokeFailCleanlyAndTheQueueRecovers)
{
	TestMr m;
	ASSERT_EQ(free_mkey(16, &m), 0);
	const uint32_t key = mr::make_mkey(m.handle.index(), 0x01);
	std::vector<mlx5::MttEntry> mtt;
	mlx5::UmrBind b = bind_for(key, 0, 8192, &mtt);
	ASSERT_EQ(umr->bind(b), 0);
	EXPECT_EQ(umr->bind(b), -EBUSY);
	EXPECT_EQ(umr->last_syndrome(), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	EXPECT_EQ(umr->recoveries(), 1u);
	/* The first binding still holds. */
	EXPECT_EQ(write(va(0), key, 128), 0);
	ASSERT_EQ(umr->revoke(key), 0);
	EXPECT_EQ(umr->revoke(key), -EALREADY);
	EXPECT_EQ(umr->recoveries(), 2u);
	uint32_t st = 0;
	ASSERT_EQ(umr->qp().query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::rts);
	/* And the queue works: bind again. */
	ASSERT_EQ(umr->bind(b), 0);
	EXPECT_EQ(write(va(0), key, 128), 0);
}

TEST_P(Umr, ManyTranslationsGoByPointerWithTheReservedLkey)
{
	const uint32_t pages = 200; /* 1600 bytes of MTT: more than fits inline */
	ASSERT_GT(pages * 8u, mlx5::kMaxInlineXltBytes);
	TestMr m;
	ASSERT_EQ(free_mkey(pages, &m), 0);
	const uint32_t key = mr::make_mkey(m.handle.index(), 0x02);
	std::vector<mlx5::MttEntry> mtt;
	mlx5::UmrBind b = bind_for(key, 0, size_t{pages} * 4096, &mtt);
	ASSERT_EQ(mtt.size(), pages);
	ASSERT_EQ(umr->bind(b), 0);
	std::memset(src.va, 0x3c, 4096);
	EXPECT_EQ(write(va(size_t{pages - 1} * 4096), key, 4096), 0);
	EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(buf.va) + size_t{pages - 1} * 4096, src.va,
			      4096),
		  0);
}

TEST_P(Umr, LocalInvalidateSetsTheMkeyFree)
{
	TestMr m;
	ASSERT_EQ(free_mkey(4, &m), 0);
	const uint32_t key = mr::make_mkey(m.handle.index(), 0x03);
	std::vector<mlx5::MttEntry> mtt;
	ASSERT_EQ(umr->bind(bind_for(key, 0, 4096, &mtt)), 0);
	EXPECT_EQ(write(va(0), key, 16), 0);
	ASSERT_EQ(r.qp[0]->post_local_inval(key, 5, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok()) << "syndrome 0x" << std::hex << int(c.syndrome);
	EXPECT_EQ(write(va(0), key, 16), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
}

TEST_P(Umr, ProgrammerRunsTheRegistrationSeamOnTheDevice)
{
	std::unique_ptr<mlx5::Mlx5MkeyProgrammer> prog;
	mlx5::MkeyProgrammerOptions po;
	po.max_translations = 8;
	ASSERT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), po, &prog), 0);
	const uint32_t first = 0x400;
	ASSERT_EQ(prog->create_free_mkeys(first, 16), 0);
	EXPECT_EQ(prog->mkey_count(), 16u);
	EXPECT_EQ(prog->create_free_mkeys(0, 1), -EINVAL);

	const uint32_t key = (first + 3) << 8 | 0x77;
	mr::BindParams p{};
	p.start = va(5000);
	p.len = 9000;
	p.access = mr::kAccessLocalRead | mr::kAccessRemoteWrite;
	p.pd = r.pd.pd();
	p.iova_base = buf.iova + 5000;
	p.log_page_size = 12;
	ASSERT_EQ(prog->bind(key, p), 0);
	std::memset(src.va, 0x5e, 4096);
	EXPECT_EQ(write(va(5000) + 4000, key, 4096), 0);
	EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(buf.va) + 9000, src.va, 4096), 0);
	EXPECT_EQ(prog->bind(key, p), -EBUSY);
	ASSERT_EQ(prog->revoke(key), 0);
	EXPECT_EQ(prog->revoke(key), -EALREADY);
	EXPECT_EQ(write(va(5000), key, 16), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);

	/* More pages than the free mkeys hold; an IOVA not congruent with the address. */
	p.len = 9 * 4096;
	EXPECT_EQ(prog->bind(key, p), -E2BIG);
	p.len = 4096;
	p.iova_base += 8;
	EXPECT_EQ(prog->bind(key, p), -EINVAL);
}

INSTANTIATE_TEST_SUITE_P(Delivery, Umr,
			 ::testing::Values(emu::DoorbellDelivery::inline_call,
					   emu::DoorbellDelivery::poll_thread),
			 [](const auto &i) {
				 return i.param == emu::DoorbellDelivery::inline_call
						? std::string("inline")
						: std::string("thread");
			 });

TEST(DpDemo, LoopbackDemoRunsEveryStepAndLeavesNothingBehind)
{
	Rig r;
	ASSERT_EQ(r.make(), 0);
	const size_t in_use = r.ctrl->bytes_in_use();
	char *text = nullptr;
	size_t size = 0;
	FILE *out = open_memstream(&text, &size);
	ASSERT_NE(out, nullptr);
	int rc = nicmr::testmr::dp_loopback_demo(*r.dev, out, r.eq.get());
	std::fclose(out);
	std::string s(text, size);
	std::free(text);
	EXPECT_EQ(rc, 0) << s;
	EXPECT_NE(s.find("all steps as expected"), std::string::npos) << s;
	EXPECT_NE(s.find("syndrome 0x13"), std::string::npos) << s;
	EXPECT_EQ(r.ctrl->bytes_in_use(), in_use);
}

TEST(DpDemo, CreatesItsOwnEventQueueWhenTheToolHasNone)
{
	std::unique_ptr<emu::EmuMlx5> hw;
	ASSERT_EQ(emu::emu_mlx5_create({}, &hw), 0);
	mem::DmaSpace space(hw->function().dma());
	std::unique_ptr<mem::DmaArena> arena;
	mem::PoolParams p;
	p.size = size_t{4} << 20;
	p.page_size = mem::kPage4K;
	ASSERT_EQ(mem::DmaArena::create(space, p, &arena), 0);
	mlx5::DeviceOptions o;
	o.arena = arena.get();
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(hw->function(), space, o, &dev), 0);
	FILE *out = std::fopen("/dev/null", "w");
	ASSERT_NE(out, nullptr);
	EXPECT_EQ(nicmr::testmr::dp_loopback_demo(*dev, out), 0);
	std::fclose(out);
	dev.reset();
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}
