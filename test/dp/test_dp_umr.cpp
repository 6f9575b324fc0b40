/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UMR against the device model: free mkeys bound and revoked with work requests, RDMA through
 * a bound key, a refused double bind and double revoke that leave the QP usable again, pointer
 * translations with the reserved lkey, LOCAL_INVAL, and the registration engine's
 * MkeyProgrammer over all of it; the driver's command and KLM programmers beside it, with the
 * same MTT planner and the same access mapping.
 */
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dp_rig.h"
#include "mlx5_cmd_programmer.h"
#include "mlx5_klm_programmer.h"
#include "mlx5_mkey_programmer.h"
#include "mlx5_umr.h"
#include "mr_access.h"
#include "mr_plan.h"
#include "testmr_dp_demo.h"

using namespace nicmr::testdp;
namespace mr = nicmr::mr;

namespace {

/* The rig, a UMR queue on its PD and two data blocks; the rig's options from options(). */
class UmrBase {
protected:
	virtual ~UmrBase() = default;
	virtual RigOptions options() = 0;
	void set_up()
	{
		ASSERT_EQ(r.make(options()), 0);
		ASSERT_EQ(mlx5::UmrQueue::create(*r.dev, r.pd.pd(), {}, &umr), 0);
		ASSERT_EQ(r.data->alloc(size_t{1} << 20, 4096, &buf), 0);
		ASSERT_EQ(r.data->alloc(4096, 4096, &src), 0);
		/* The local source of writes: a plain MTT mkey. */
		ASSERT_EQ(r.mtt_mr(src, 0, 4096, r.ctx(true, true, false, false, false), &src_mr),
			  0);
	}
	void tear_down()
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

class Umr : public UmrBase, public ::testing::TestWithParam<emu::DoorbellDelivery> {
protected:
	RigOptions options() override
	{
		RigOptions o;
		o.delivery = GetParam();
		o.mkey_by_name = by_name();
		return o;
	}
	/* Whether the device creates mkeys at chosen indices (UmrByName: yes). */
	virtual bool by_name() const { return false; }
	void SetUp() override { set_up(); }
	void TearDown() override { tear_down(); }
};

/* A device model configured by the test (reserved lkey, umr_modify_*_disabled). */
class UmrCaps : public UmrBase, public ::testing::Test {
protected:
	RigOptions options() override { return opts; }
	void SetUp() override {}
	void TearDown() override { tear_down(); }
	RigOptions opts;
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
	/* A stock device: it chooses the indices, and creates none at a chosen one. */
	uint32_t idx[16] = {};
	ASSERT_EQ(prog->create_free_mkeys(16, idx), 0);
	EXPECT_EQ(prog->mkey_count(), 16u);
	for (uint32_t i : idx) {
		mlx5::MkeyQuery q;
		ASSERT_EQ(r.dev->query_mkey(i, 0, &q), 0) << i;
		EXPECT_TRUE(q.ctx.free);
		EXPECT_TRUE(q.ctx.umr_en);
	}
	EXPECT_EQ(prog->create_free_mkeys(0, idx), -EINVAL);
	EXPECT_FALSE(prog->chosen_indices());
	EXPECT_EQ(prog->create_free_mkey_at(0x400), -EOPNOTSUPP);
	EXPECT_EQ(prog->mkey_count(), 16u);

	const uint32_t key = idx[3] << 8 | 0x77;
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

/* Indices the command programmer's tests use (the device has more; UMR tests use 0x400..). */
constexpr uint32_t kCmdIndices = 0x430;

/* The command and KLM programmers make mkeys at the engine's indices: a device with
 * mkey_by_name. */
class UmrByName : public Umr {
protected:
	bool by_name() const override { return true; }
};

/* On a stock device (no mkey_by_name) they refuse, and make nothing. */
TEST_P(Umr, CommandAndKlmProgrammersNeedChosenIndices)
{
	mlx5::CmdProgrammer cmd(*r.dev, r.pd.pd(), kCmdIndices);
	uint32_t idx[2] = {};
	EXPECT_FALSE(cmd.chosen_indices());
	EXPECT_EQ(cmd.create_free_mkeys(2, idx), -EOPNOTSUPP);
	EXPECT_EQ(cmd.create_free_mkey_at(0x421), -EOPNOTSUPP);
	mlx5::KlmProgrammer klm(*r.dev);
	const mr::KlmPart part{va(0), 0x421u << 8, 4096};
	mr::IndirectParams ip{};
	ip.start = va(0);
	ip.len = 4096;
	ip.access = mr::kAccessLocalRead;
	ip.pd = r.pd.pd();
	ip.parts = &part;
	ip.count = 1;
	const size_t before = r.hw->device().mkeys().live();
	EXPECT_EQ(klm.bind_indirect(0x422u << 8, ip), -EOPNOTSUPP);
	EXPECT_EQ(r.hw->device().mkeys().live(), before);
	EXPECT_EQ(cmd.created(), 0u);
}

TEST_P(UmrByName, CommandProgrammerBindsWithThePlannersListAndRevokes)
{
	mlx5::CmdProgrammer cmd(*r.dev, r.pd.pd(), kCmdIndices);
	EXPECT_TRUE(cmd.chosen_indices());
	std::vector<uint32_t> idx(kCmdIndices - 1);
	EXPECT_EQ(cmd.create_free_mkeys(kCmdIndices, idx.data()), -ENOSPC);
	ASSERT_EQ(cmd.create_free_mkeys(kCmdIndices - 2, idx.data()), 0);
	EXPECT_EQ(idx.front(), 1u);
	EXPECT_EQ(cmd.create_free_mkeys(2, idx.data()), -ENOSPC) << "one index left";
	ASSERT_EQ(cmd.create_free_mkeys(1, idx.data()), 0);
	EXPECT_EQ(idx.front(), kCmdIndices - 1);
	EXPECT_EQ(cmd.create_free_mkey_at(0x421), -EEXIST) << "given already";
	EXPECT_EQ(cmd.create_free_mkey_at(0), -EINVAL);
	EXPECT_EQ(cmd.create_free_mkey_at(kCmdIndices), -EINVAL);
	EXPECT_EQ(cmd.created(), 0u) << "free mkeys are created lazily";

	const uint32_t index = 0x421;
	const uint32_t key = index << 8 | 0x66;
	mr::BindParams p{};
	p.start = va(5000);
	p.len = 9000;
	p.access = mr::kAccessLocalRead | mr::kAccessLocalWrite | mr::kAccessRemoteWrite;
	p.pd = r.pd.pd();
	p.iova_base = buf.iova + 5000;
	p.log_page_size = 12;
	ASSERT_EQ(cmd.bind(key, p), 0);
	std::memset(src.va, 0x3c, 4096);
	EXPECT_EQ(write(va(5000) + 4000, key, 4096), 0);
	EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(buf.va) + 9000, src.va, 4096), 0);

	/* The device holds the planner's list. */
	uint64_t planned[8];
	uint64_t n = 0;
	ASSERT_EQ(mr::plan_bind_mtt(p, planned, 8, &n), 0);
	EXPECT_EQ(n, 3u);
	mlx5::MkeyQuery q;
	ASSERT_EQ(r.dev->query_mkey(index, 8, &q), 0);
	EXPECT_FALSE(q.ctx.free);
	EXPECT_EQ(q.ctx.variant, 0x66);
	ASSERT_GE(q.mtt.size(), n);
	for (uint64_t i = 0; i < n; i++)
		EXPECT_EQ(q.mtt[i].iova, planned[i]) << "entry " << i;

	/* Refusals before any command: the key stays as it was. */
	EXPECT_EQ(cmd.bind(0x66, p), -EINVAL) << "index 0";
	EXPECT_EQ(cmd.bind(kCmdIndices << 8 | 0x66, p), -EINVAL) << "index beyond the range";
	mr::BindParams bad = p;
	bad.iova_base += 8;
	EXPECT_EQ(cmd.bind(key, bad), -EINVAL) << "IOVA not congruent with start";
	bad = p;
	bad.len = 0;
	EXPECT_EQ(cmd.bind(key, bad), -EINVAL) << "len 0";
	bad = p;
	bad.log_page_size = 31;
	EXPECT_EQ(cmd.bind(key, bad), -EINVAL) << "page above 1 GiB";
	EXPECT_EQ(write(va(5000), key, 16), 0) << "still bound";

	ASSERT_EQ(cmd.revoke(key), 0);
	EXPECT_EQ(write(va(5000), key, 16), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	ASSERT_EQ(r.dev->query_mkey(index, 0, &q), 0);
	EXPECT_TRUE(q.ctx.free);
	EXPECT_EQ(cmd.revoke(0x66), -EINVAL);
	EXPECT_EQ(cmd.revoke(kCmdIndices << 8), -EINVAL);
}

TEST_P(UmrByName, UmrAndCommandProgrammersGrantTheSameFieldsForEachAccessBit)
{
	std::unique_ptr<mlx5::Mlx5MkeyProgrammer> prog;
	mlx5::MkeyProgrammerOptions po;
	po.max_translations = 8;
	ASSERT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), po, &prog), 0);
	ASSERT_TRUE(prog->chosen_indices());
	ASSERT_EQ(prog->create_free_mkey_at(0x400), 0);
	EXPECT_EQ(prog->create_free_mkey_at(0x400), -EEXIST) << "BAD_RES_STATE: it exists";
	TestMr other; /* an mkey the programmer did not make, at an index the device chose */
	ASSERT_EQ(free_mkey(2, &other), 0);
	EXPECT_EQ(prog->create_free_mkey_at(mr::mkey_index(other.key)), -EEXIST);
	EXPECT_EQ(prog->create_free_mkey_at(1u << 16), -ENXIO) << "BAD_INDEX: beyond the device's";
	mlx5::CmdProgrammer cmd(*r.dev, r.pd.pd(), kCmdIndices);

	const uint8_t cases[] = {mr::kAccessLocalRead,	  mr::kAccessLocalWrite,
				 mr::kAccessRemoteRead,	  mr::kAccessRemoteWrite,
				 mr::kAccessRemoteAtomic, mr::kAccessMwBind,
				 mr::kAccessAll};
	for (uint8_t bits : cases) {
		mr::BindParams p{};
		p.start = va(0);
		p.len = 4096;
		p.access = bits;
		p.pd = r.pd.pd();
		p.iova_base = buf.iova;
		p.log_page_size = 12;
		const uint32_t umr_key = 0x400u << 8 | 1, cmd_key = 0x422u << 8 | 1;
		ASSERT_EQ(prog->bind(umr_key, p), 0);
		ASSERT_EQ(cmd.bind(cmd_key, p), 0);
		for (uint32_t index : {0x400u, 0x422u}) {
			mlx5::MkeyQuery q;
			ASSERT_EQ(r.dev->query_mkey(index, 0, &q), 0);
			const char *who = index == 0x400 ? "UMR" : "command";
			EXPECT_EQ(q.ctx.lr, (bits & mr::kAccessLocalRead) != 0) << who << int(bits);
			EXPECT_EQ(q.ctx.lw, (bits & mr::kAccessLocalWrite) != 0)
				<< who << int(bits);
			EXPECT_EQ(q.ctx.rr, (bits & mr::kAccessRemoteRead) != 0)
				<< who << int(bits);
			EXPECT_EQ(q.ctx.rw, (bits & mr::kAccessRemoteWrite) != 0)
				<< who << int(bits);
			EXPECT_EQ(q.ctx.a, (bits & mr::kAccessRemoteAtomic) != 0)
				<< who << int(bits);
		}
		ASSERT_EQ(prog->revoke(umr_key), 0);
		ASSERT_EQ(cmd.revoke(cmd_key), 0);
	}
}

TEST_P(UmrByName, KlmProgrammerPutsAnIndirectMkeyInPlaceOfTheFreeOneAndBack)
{
	std::unique_ptr<mlx5::Mlx5MkeyProgrammer> prog;
	mlx5::MkeyProgrammerOptions po;
	po.max_translations = 8;
	ASSERT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), po, &prog), 0);
	ASSERT_EQ(prog->create_free_mkey_at(0x400), 0);
	ASSERT_EQ(prog->create_free_mkey_at(0x401), 0);
	const uint8_t rights = mr::kAccessLocalRead | mr::kAccessLocalWrite |
			       mr::kAccessRemoteRead | mr::kAccessRemoteWrite;
	/* The part: an MTT key over the first 8 KiB of buf. */
	const uint32_t part_key = 0x400u << 8 | 7;
	mr::BindParams p{};
	p.start = va(0);
	p.len = 8192;
	p.access = rights;
	p.pd = r.pd.pd();
	p.iova_base = buf.iova;
	p.log_page_size = 12;
	ASSERT_EQ(prog->bind(part_key, p), 0);

	mlx5::KlmProgrammer klm(*r.dev);
	const mr::KlmPart part{va(0), part_key, 8192};
	mr::IndirectParams ip{};
	ip.start = va(0);
	ip.len = 8192;
	ip.access = rights;
	ip.pd = r.pd.pd();
	ip.parts = &part;
	ip.count = 1;
	const uint32_t key = 0x401u << 8 | 9;
	ASSERT_EQ(klm.bind_indirect(key, ip), 0);
	EXPECT_EQ(klm.live(), 1u);
	mlx5::MkeyQuery q;
	ASSERT_EQ(r.dev->query_mkey(0x401, 0, &q), 0);
	EXPECT_EQ(q.ctx.access_mode, prm::access_mode::klm);
	EXPECT_TRUE(q.ctx.rw) << "the rights of the one mapping";
	EXPECT_FALSE(q.ctx.a);
	std::memset(src.va, 0x4b, 4096);
	EXPECT_EQ(write(va(100), key, 4096), 0);
	EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(buf.va) + 100, src.va, 4096), 0);

	/* Refusals: index 0, no parts, an index that holds a bound (not free) mkey, a key that
	 * is not one of its indirect mkeys. */
	EXPECT_EQ(klm.bind_indirect(9, ip), -EINVAL);
	mr::IndirectParams none = ip;
	none.count = 0;
	EXPECT_EQ(klm.bind_indirect(0x401u << 8 | 10, none), -EINVAL);
	EXPECT_EQ(klm.bind_indirect(part_key, ip), -EBUSY);
	EXPECT_EQ(klm.revoke_indirect(part_key), -ENOENT);

	ASSERT_EQ(klm.revoke_indirect(key), 0);
	EXPECT_EQ(klm.live(), 0u);
	EXPECT_EQ(write(va(100), key, 16), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	ASSERT_EQ(r.dev->query_mkey(0x401, 0, &q), 0);
	EXPECT_TRUE(q.ctx.free) << "the saved free mkey is back";
	EXPECT_TRUE(q.ctx.umr_en);
	EXPECT_EQ(klm.revoke_indirect(key), -ENOENT);
	ASSERT_EQ(prog->revoke(part_key), 0);
}

std::string delivery_name(const ::testing::TestParamInfo<emu::DoorbellDelivery> &i)
{
	return i.param == emu::DoorbellDelivery::inline_call ? std::string("inline")
							     : std::string("thread");
}

INSTANTIATE_TEST_SUITE_P(Delivery, Umr,
			 ::testing::Values(emu::DoorbellDelivery::inline_call,
					   emu::DoorbellDelivery::poll_thread),
			 delivery_name);
INSTANTIATE_TEST_SUITE_P(Delivery, UmrByName,
			 ::testing::Values(emu::DoorbellDelivery::inline_call,
					   emu::DoorbellDelivery::poll_thread),
			 delivery_name);

/* ---- UMR as the kernel posts it: the device model refuses each old habit ------------------ */

/* qpc.fre and qpc.rlky on the queue's QP (Linux qp.c, create_kernel_qp); the same UMR on the
 * rig's plain QP (neither bit) completes with LOCAL_QP_OP_ERR. */
TEST_P(Umr, TheQueuesQpHasFreAndRlkyAndAPlainQpIsRefused)
{
	emu::QpInfo info;
	ASSERT_EQ(r.hw->device().data_path().query_qp(umr->qp().qpn(), &info), 0);
	EXPECT_TRUE(info.attr.fre);
	EXPECT_TRUE(info.attr.rlky);
	ASSERT_EQ(r.hw->device().data_path().query_qp(r.qp[0]->qpn(), &info), 0);
	EXPECT_FALSE(info.attr.fre);
	EXPECT_FALSE(info.attr.rlky);

	TestMr m;
	ASSERT_EQ(free_mkey(16, &m), 0);
	const uint32_t key = mr::make_mkey(m.handle.index(), 0x31);
	std::vector<mlx5::MttEntry> mtt;
	const mlx5::UmrBind b = bind_for(key, 0, 8192, &mtt);
	ASSERT_EQ(mlx5::post_umr_bind(*r.qp[0], b, 9, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	ASSERT_EQ(r.qp[0]->recover(), 0);
	mlx5::MkeyQuery q;
	ASSERT_EQ(r.dev->query_mkey(m.handle.index(), 0, &q), 0);
	EXPECT_TRUE(q.ctx.free);

	ASSERT_EQ(umr->bind(b), 0);
	EXPECT_EQ(write(va(0), key, 128), 0);
}

/* klm_octowords is 16 bits: a list whose 64-byte units need more is refused before posting. */
TEST_P(Umr, AListAbove65535OctwordsIsRefusedBeforePosting)
{
	/* 131064 MTT entries pad to 1048512 bytes = 65532 octwords: fits; 131072 do not. */
	std::vector<mlx5::MttEntry> mtt(131072, mlx5::MttEntry{0x10000, true, true});
	mlx5::UmrBind b;
	b.mkey = mr::make_mkey(0x400, 1);
	b.pd = r.pd.pd();
	b.len = 4096;
	b.xlt_iova = buf.iova; /* by pointer: no inline limit */
	b.mtt = mtt;
	const uint32_t room = umr->qp().sq_room();
	EXPECT_EQ(mlx5::post_umr_bind(umr->qp(), b, 1, mlx5::kNoDoorbell), -EINVAL);
	EXPECT_EQ(umr->qp().sq_room(), room) << "nothing posted";
}

/* The reserved lkey is the device's (QUERY_SPECIAL_CONTEXTS at bring-up), never 0x100. */
TEST_P(Umr, TheReservedLkeyComesFromQuerySpecialContexts)
{
	EXPECT_EQ(r.dev->caps().resd_lkey, r.hw->device().config().resd_lkey);
	EXPECT_EQ(r.dev->caps().resd_lkey, emu::kDefaultResdLkey);
	EXPECT_NE(r.dev->caps().resd_lkey, 0x100u);
}

TEST_F(UmrCaps, PointerTranslationsCarryWhateverReservedLkeyTheDeviceReports)
{
	opts.resd_lkey = 0x00c0ffee;
	set_up();
	ASSERT_FALSE(HasFatalFailure());
	EXPECT_EQ(r.dev->caps().resd_lkey, 0x00c0ffeeu);
	const uint32_t pages = 200; /* by pointer */
	TestMr m;
	ASSERT_EQ(free_mkey(pages, &m), 0);
	const uint32_t key = mr::make_mkey(m.handle.index(), 0x32);
	std::vector<mlx5::MttEntry> mtt;
	ASSERT_EQ(umr->bind(bind_for(key, 0, size_t{pages} * 4096, &mtt)), 0);
	std::memset(src.va, 0x6d, 4096);
	EXPECT_EQ(write(va(size_t{pages - 1} * 4096), key, 4096), 0);
	EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(buf.va) + size_t{pages - 1} * 4096, src.va,
			      4096),
		  0);
}

/* Every list length goes in whole 64-byte units (the model refuses any other octword count),
 * into mkeys sized in octwords as the kernel sizes its own (the last unit's padding may run
 * past them), inline and by pointer; the device keeps exactly the entries sent. */
TEST_P(Umr, TranslationListsOfEveryLengthGoIn64ByteUnits)
{
	for (uint32_t pages : {1u, 2u, 3u, 5u, 7u, 8u, 9u, 201u}) {
		SCOPED_TRACE(pages);
		TestMr m;
		ASSERT_EQ(free_mkey(pages, &m), 0);
		const uint32_t key = mr::make_mkey(m.handle.index(), 0x33);
		std::vector<mlx5::MttEntry> mtt;
		ASSERT_EQ(umr->bind(bind_for(key, 0, size_t{pages} * 4096, &mtt)), 0);
		mlx5::MkeyQuery q;
		ASSERT_EQ(r.dev->query_mkey(m.handle.index(), pages, &q), 0);
		ASSERT_EQ(q.mtt.size(), pages);
		for (uint32_t i = 0; i < pages; i++)
			EXPECT_EQ(q.mtt[i].iova, mtt[i].iova) << i;
		EXPECT_EQ(write(va(size_t{pages - 1} * 4096), key, 64), 0);
	}
	EXPECT_EQ(umr->recoveries(), 0u);
}

/* Revoke gives the mkey back to the queue's PD (mlx5r_umr_revoke_mr), so that it binds again
 * into any PD; a revoke that left the user's PD would make the next bind fail (-EBUSY). */
TEST_P(Umr, RevokeReturnsTheMkeyToTheQueuesPd)
{
	mlx5::PdHandle user;
	ASSERT_EQ(mlx5::PdHandle::alloc(*r.dev, &user), 0);
	ASSERT_NE(user.pd(), r.pd.pd());
	TestMr m;
	ASSERT_EQ(free_mkey(16, &m), 0);
	for (uint8_t variant : {uint8_t{0x34}, uint8_t{0x35}}) {
		const uint32_t key = mr::make_mkey(m.handle.index(), variant);
		std::vector<mlx5::MttEntry> mtt;
		mlx5::UmrBind b = bind_for(key, 0, 8192, &mtt);
		b.pd = user.pd();
		ASSERT_EQ(umr->bind(b), 0) << "variant " << int(variant);
		mlx5::MkeyQuery q;
		ASSERT_EQ(r.dev->query_mkey(m.handle.index(), 0, &q), 0);
		EXPECT_EQ(q.ctx.pd, user.pd());
		ASSERT_EQ(umr->revoke(key), 0);
		ASSERT_EQ(r.dev->query_mkey(m.handle.index(), 0, &q), 0);
		EXPECT_TRUE(q.ctx.free);
		EXPECT_EQ(q.ctx.pd, r.pd.pd());
		EXPECT_EQ(q.ctx.qpn, prm::mkc::qpn_any);
	}
	EXPECT_EQ(umr->recoveries(), 0u);
}

/* umr_modify_atomic_disabled: the mask leaves A out (umr_check_mkey_mask would refuse it), and a
 * bind that needs the A bit is refused before anything is posted. */
TEST_F(UmrCaps, WithUmrModifyAtomicDisabledTheMaskLeavesAOut)
{
	opts.umr_modify_atomic_disabled = true;
	set_up();
	ASSERT_FALSE(HasFatalFailure());
	ASSERT_TRUE(r.dev->caps().umr_modify_atomic_disabled);
	const uint64_t mask = mlx5::umr_bind_mask(r.dev->caps());
	EXPECT_EQ(mask & prm::umr_mkey_mask::a, 0u);
	EXPECT_NE(mask & prm::umr_mkey_mask::page_size, 0u);
	TestMr m;
	ASSERT_EQ(free_mkey(16, &m), 0);
	const uint32_t key = mr::make_mkey(m.handle.index(), 0x36);
	std::vector<mlx5::MttEntry> mtt;
	mlx5::UmrBind b = bind_for(key, 0, 8192, &mtt);
	b.a = true;
	EXPECT_EQ(umr->bind(b), -EOPNOTSUPP);
	mlx5::MkeyQuery q;
	ASSERT_EQ(r.dev->query_mkey(m.handle.index(), 0, &q), 0);
	EXPECT_TRUE(q.ctx.free);
	b.a = false;
	ASSERT_EQ(umr->bind(b), 0);
	EXPECT_EQ(write(va(0), key, 128), 0);
	EXPECT_EQ(umr->recoveries(), 0u);
}

/* umr_modify_entity_size_disabled: the mask leaves PAGE_SIZE out, and the programmer plans its
 * binds (and modifies) at the free mkeys' 4 KiB pages, splitting larger ones. */
TEST_F(UmrCaps, WithUmrModifyEntitySizeDisabledBindsUseTheMkeysPageSize)
{
	opts.umr_modify_entity_size_disabled = true;
	set_up();
	ASSERT_FALSE(HasFatalFailure());
	EXPECT_EQ(mlx5::umr_bind_mask(r.dev->caps()) & prm::umr_mkey_mask::page_size, 0u);
	EXPECT_EQ(mlx5::umr_modify_mask(r.dev->caps()), 0u);
	std::unique_ptr<mlx5::Mlx5MkeyProgrammer> prog;
	mlx5::MkeyProgrammerOptions po;
	po.max_translations = 8;
	ASSERT_EQ(mlx5::Mlx5MkeyProgrammer::create(*r.dev, r.pd.pd(), po, &prog), 0);
	uint32_t idx[4] = {};
	ASSERT_EQ(prog->create_free_mkeys(4, idx), 0); /* at indices the device chooses */
	const uint32_t index = idx[1];
	const uint32_t key = index << 8 | 0x37;
	/* 16 KiB in two 8 KiB pages given as a list, from an 8 KiB-aligned address. */
	const size_t off = (8192 - va(0) % 8192) % 8192;
	const uint64_t list[2] = {buf.iova + off, buf.iova + off + 8192};
	mr::BindParams p{};
	p.start = va(off);
	p.len = 16384;
	p.access = mr::kAccessLocalRead | mr::kAccessRemoteWrite;
	p.pd = r.pd.pd();
	p.log_page_size = 13;
	p.mtt = list;
	p.mtt_count = 2;
	ASSERT_EQ(prog->bind(key, p), 0);
	mlx5::MkeyQuery q;
	ASSERT_EQ(r.dev->query_mkey(index, 8, &q), 0);
	EXPECT_EQ(q.ctx.log_page_size, 12u);
	ASSERT_GE(q.mtt.size(), 4u);
	for (uint64_t i = 0; i < 4; i++)
		EXPECT_EQ(q.mtt[i].iova, buf.iova + off + i * 4096) << i;
	std::memset(src.va, 0x71, 4096);
	EXPECT_EQ(write(va(off) + 12288, key, 4096), 0);
	EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(buf.va) + off + 12288, src.va, 4096), 0);
	/* A modify re-points the pages, planned the same way. */
	ASSERT_EQ(prog->modify(key, p), 0);
	/* The contiguous form too; more 4 KiB pages than the mkeys hold is -E2BIG. */
	ASSERT_EQ(prog->revoke(key), 0);
	mr::BindParams c{};
	c.start = va(off);
	c.len = 8 * 4096;
	c.access = mr::kAccessLocalRead;
	c.pd = r.pd.pd();
	c.iova_base = buf.iova + off;
	c.log_page_size = 12;
	ASSERT_EQ(prog->bind(key, c), 0);
	ASSERT_EQ(prog->revoke(key), 0);
	c.len = 9 * 4096;
	EXPECT_EQ(prog->bind(key, c), -E2BIG);
	p.mtt_count = 1; /* a list shorter than the region */
	EXPECT_EQ(prog->bind(key, p), -EINVAL);
}

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
