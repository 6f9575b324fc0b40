/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The driver against the device model (drivers/emu/mlx5 on drivers/bus/emu): bring-up and
 * teardown cycles, every command's refusal with its exact errno, mkeys created, queried,
 * destroyed and created again, and a device whose thread stopped.
 */
#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "emu_mlx5.h"
#include "mem_space.h"
#include "mlx5_device.h"

using namespace std::chrono_literals;
namespace emu = nicmr::emu;
namespace mem = nicmr::mem;
namespace mlx5 = nicmr::mlx5;
namespace prm = nicmr::mlx5::prm;

namespace {

struct Rig {
	std::unique_ptr<emu::EmuMlx5> hw;
	std::unique_ptr<mem::DmaSpace> space;
	std::unique_ptr<mem::DmaArena> arena;

	int make(const emu::EmuConfig &cfg)
	{
		int rc = emu::emu_mlx5_create(cfg, &hw);
		if (rc != 0)
			return rc;
		space = std::make_unique<mem::DmaSpace>(hw->function().dma());
		mem::PoolParams p;
		p.size = size_t{4} << 20;
		p.page_size = mem::kPage4K;
		p.name = "test-mlx5-emu";
		return mem::DmaArena::create(*space, p, &arena);
	}
	mlx5::DeviceOptions opts() const
	{
		mlx5::DeviceOptions o;
		o.arena = arena.get();
		o.init_timeout = 2000ms;
		o.cmd_timeout = 2000ms;
		return o;
	}
	~Rig()
	{
		arena.reset();
		space.reset();
		hw.reset();
	}
};

emu::EmuConfig config(emu::DoorbellDelivery d)
{
	emu::EmuConfig c;
	c.delivery = d;
	return c;
}

uint32_t syn(emu::Syndrome s)
{
	return static_cast<uint32_t>(s);
}

class Mlx5EmuModes : public ::testing::TestWithParam<emu::DoorbellDelivery> {};

} // namespace

TEST_P(Mlx5EmuModes, HundredBringUpTeardownCyclesLeakNothing)
{
	Rig r;
	ASSERT_EQ(r.make(config(GetParam())), 0);
	const size_t mappings = r.hw->iommu().mapping_count();
	for (int i = 0; i < 100; i++) {
		std::unique_ptr<mlx5::Device> dev;
		ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0)
			<< "cycle " << i;
		ASSERT_EQ(r.hw->device().hca_state(), emu::HcaState::initialized);
		ASSERT_EQ(r.hw->device().pages_given(), dev->pages_given());
		ASSERT_GT(dev->pages_given(), 0u);
		uint32_t pd = 0;
		ASSERT_EQ(dev->alloc_pd(&pd), 0);
		ASSERT_EQ(dev->dealloc_pd(pd), 0);
		dev.reset();
		ASSERT_EQ(r.arena->bytes_in_use(), 0u) << "cycle " << i;
		ASSERT_EQ(r.hw->device().pages_given(), 0u) << "cycle " << i;
		ASSERT_EQ(r.hw->device().hca_state(), emu::HcaState::reset) << "cycle " << i;
	}
	EXPECT_EQ(r.hw->iommu().mapping_count(), mappings);
	EXPECT_EQ(r.hw->device().dma_faults(), 0u);
	EXPECT_EQ(r.hw->device().stats().delivery_errors, 0u);
	EXPECT_TRUE(r.hw->device().check_invariants());
}

TEST_P(Mlx5EmuModes, QueryMkeyReturnsWhatCreateMkeySet)
{
	Rig r;
	ASSERT_EQ(r.make(config(GetParam())), 0);
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0);
	uint32_t pd = 0;
	ASSERT_EQ(dev->alloc_pd(&pd), 0);

	std::vector<mlx5::MttEntry> mtt(700); /* input and output both need mailbox chains */
	for (size_t i = 0; i < mtt.size(); i++)
		mtt[i] = {0x10000000 + i * 4096, true, (i % 3) != 0};
	mlx5::MkeyCreate c;
	c.ctx.pd = pd;
	c.ctx.lr = c.ctx.rr = c.ctx.rw = c.ctx.a = true;
	c.ctx.qpn = 0x000abc;
	c.ctx.variant = 0x9e;
	c.ctx.start_addr = 0x7f0000000800;
	c.ctx.len = 699 * 4096;
	c.ctx.log_page_size = 12;
	c.ctx.en_rinval = true;
	c.pg_access = true;
	c.mtt = mtt;
	uint32_t idx = 0;
	ASSERT_EQ(dev->create_mkey(c, &idx), 0);
	EXPECT_NE(idx, 0u);

	mlx5::MkeyQuery q;
	ASSERT_EQ(dev->query_mkey(idx, mtt.size(), &q), 0);
	EXPECT_EQ(q.ctx.access_mode, prm::access_mode::mtt);
	EXPECT_EQ(q.ctx.pd, pd);
	EXPECT_EQ(q.ctx.qpn, 0xabcu);
	EXPECT_EQ(q.ctx.variant, 0x9e);
	EXPECT_TRUE(q.ctx.lr && q.ctx.rr && q.ctx.rw && q.ctx.a && q.ctx.en_rinval);
	EXPECT_FALSE(q.ctx.lw || q.ctx.free || q.ctx.umr_en || q.ctx.length64);
	EXPECT_EQ(q.ctx.start_addr, c.ctx.start_addr);
	EXPECT_EQ(q.ctx.len, c.ctx.len);
	EXPECT_EQ(q.ctx.log_page_size, 12u);
	EXPECT_EQ(q.ctx.translations_octword_size, 350u);
	ASSERT_EQ(q.mtt.size(), mtt.size());
	for (size_t i = 0; i < mtt.size(); i++) {
		ASSERT_EQ(q.mtt[i].iova, mtt[i].iova) << i;
		ASSERT_EQ(q.mtt[i].rd_en, mtt[i].rd_en) << i;
		ASSERT_EQ(q.mtt[i].wr_en, mtt[i].wr_en) << i;
	}

	/* KLM: an indirect mkey over the first one. */
	std::vector<mlx5::KlmEntry> klm = {{4096, idx << 8 | 0x9e, 0x7f0000000800},
					   {8192, idx << 8 | 0x9e, 0x7f0000002800}};
	mlx5::MkeyCreate k;
	k.ctx.access_mode = prm::access_mode::klm;
	k.ctx.pd = pd;
	k.ctx.len = 12288;
	k.klm = klm;
	uint32_t kidx = 0;
	ASSERT_EQ(dev->create_mkey(k, &kidx), 0);
	ASSERT_EQ(dev->query_mkey(kidx, 2, &q), 0);
	EXPECT_EQ(q.ctx.access_mode, prm::access_mode::klm);
	ASSERT_EQ(q.klm.size(), 2u);
	EXPECT_EQ(q.klm[1].byte_count, 8192u);
	EXPECT_EQ(q.klm[1].mkey, idx << 8 | 0x9e);
	EXPECT_EQ(q.klm[1].address, 0x7f0000002800u);

	EXPECT_EQ(dev->destroy_mkey(kidx), 0);
	EXPECT_EQ(dev->destroy_mkey(idx), 0);
	EXPECT_EQ(dev->dealloc_pd(pd), 0);
}

/* A stock device (the model's default) does not create at a chosen index: the driver sends
 * nothing and says -EOPNOTSUPP; the device's own choice works. */
TEST_P(Mlx5EmuModes, ChosenIndexWithoutMkeyByNameIsRefusedByTheDriver)
{
	Rig r;
	ASSERT_EQ(r.make(config(GetParam())), 0);
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0);
	EXPECT_FALSE(dev->caps().mkey_by_index);
	uint32_t pd = 0;
	ASSERT_EQ(dev->alloc_pd(&pd), 0);
	mlx5::MkeyCreate c;
	c.ctx.pd = pd;
	c.ctx.free = c.ctx.umr_en = true;
	c.ctx.translations_octword_size = 4;
	c.index = 77;
	const uint64_t commands = r.hw->device().stats().commands;
	uint32_t idx = 0;
	EXPECT_EQ(dev->create_mkey(c, &idx), -EOPNOTSUPP);
	EXPECT_EQ(r.hw->device().stats().commands, commands) << "nothing sent";
	c.index = 0;
	ASSERT_EQ(dev->create_mkey(c, &idx), 0);
	EXPECT_NE(idx, 0u);
	EXPECT_EQ(dev->destroy_mkey(idx), 0);
	EXPECT_EQ(dev->dealloc_pd(pd), 0);
}

TEST_P(Mlx5EmuModes, ADestroyedIndexCanBeCreatedAgain)
{
	Rig r;
	emu::EmuConfig cfg = config(GetParam());
	cfg.mkey_by_name = true; /* creation at a chosen index */
	ASSERT_EQ(r.make(cfg), 0);
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0);
	ASSERT_TRUE(dev->caps().mkey_by_index);
	uint32_t pd = 0;
	ASSERT_EQ(dev->alloc_pd(&pd), 0);
	mlx5::MkeyCreate c;
	c.ctx.pd = pd;
	c.ctx.free = c.ctx.umr_en = true;
	c.ctx.translations_octword_size = 4; /* room for 8 MTT entries, filled by UMR later */
	c.index = 77;
	for (uint8_t variant = 1; variant <= 3; variant++) {
		c.ctx.variant = variant;
		uint32_t idx = 0;
		ASSERT_EQ(dev->create_mkey(c, &idx), 0);
		ASSERT_EQ(idx, 77u);
		mlx5::MkeyQuery q;
		ASSERT_EQ(dev->query_mkey(77, 0, &q), 0);
		EXPECT_EQ(q.ctx.variant, variant);
		EXPECT_TRUE(q.ctx.free);
		ASSERT_EQ(dev->destroy_mkey(77), 0);
	}
	/* Indexes the device chose are reusable too. */
	c.index = 0;
	uint32_t a = 0, b = 0;
	ASSERT_EQ(dev->create_mkey(c, &a), 0);
	ASSERT_EQ(dev->destroy_mkey(a), 0);
	c.index = a;
	ASSERT_EQ(dev->create_mkey(c, &b), 0);
	EXPECT_EQ(b, a);
	EXPECT_EQ(dev->destroy_mkey(b), 0);
	EXPECT_EQ(dev->dealloc_pd(pd), 0);
}

INSTANTIATE_TEST_SUITE_P(Delivery, Mlx5EmuModes,
			 ::testing::Values(emu::DoorbellDelivery::inline_call,
					   emu::DoorbellDelivery::poll_thread),
			 [](const auto &info) {
				 return info.param == emu::DoorbellDelivery::inline_call
						? std::string("Inline")
						: std::string("Thread");
			 });

class Mlx5Emu : public ::testing::Test {
protected:
	void SetUp() override
	{
		emu::EmuConfig cfg = config(emu::DoorbellDelivery::inline_call);
		cfg.log_max_pd = 2;	 /* PDs 1..3 */
		cfg.log_max_mkey = 4;	 /* mkeys 1..15 */
		cfg.mkey_by_name = true; /* the chosen-index refusals below */
		ASSERT_EQ(r.make(cfg), 0);
		ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0);
		ASSERT_EQ(dev->alloc_pd(&pd), 0);
	}
	void TearDown() override { dev.reset(); }
	/* The refusal as the driver reports it, with the model's status and syndrome. */
	void expect(int rc, int err, uint8_t st, emu::Syndrome s)
	{
		EXPECT_EQ(rc, err);
		EXPECT_EQ(dev->last_status(), st);
		EXPECT_EQ(dev->last_syndrome(), syn(s));
	}
	int raw(uint16_t opcode, uint16_t op_mod, size_t in_len, size_t out_len,
		const std::function<void(uint8_t *)> &fill = {})
	{
		std::vector<uint8_t> in(in_len, 0), out(out_len, 0);
		prm::set(in.data(), prm::cmd_hdr_in::opcode, opcode);
		prm::set(in.data(), prm::cmd_hdr_in::op_mod, op_mod);
		if (fill)
			fill(in.data());
		return dev->exec(in.data(), in.size(), out.data(), out.size());
	}

	Rig r;
	std::unique_ptr<mlx5::Device> dev;
	uint32_t pd = 0;
};

TEST_F(Mlx5Emu, CapabilitiesComeFromTheModel)
{
	const auto &c = dev->caps();
	EXPECT_EQ(c.log_max_mkey, 4u);
	EXPECT_EQ(c.log_max_pd, 2u);
	EXPECT_TRUE(c.mkey_by_index) << "offered by this fixture's model, turned on at bring-up";
	EXPECT_EQ(c.fw_major, 22);
	EXPECT_EQ(c.issi, 1);
	/* The model's extensions, found by the driver's query of the nicmr_ext cap type. */
	EXPECT_TRUE(c.ext_present);
	EXPECT_EQ(c.ext_flags, prm::ext_cap::single_use | prm::ext_cap::rma_event);
	EXPECT_EQ(dev->pages_given(), r.hw->device().pages_given());
}

TEST_F(Mlx5Emu, UnknownOpcodeIsEopnotsupp)
{
	expect(raw(0x0777, 0, 16, 16), -EOPNOTSUPP, prm::status::bad_op, emu::Syndrome::bad_opcode);
}

TEST_F(Mlx5Emu, ShortInputIsEmsgsizeAndShortOutputEoverflow)
{
	expect(raw(prm::opcode::alloc_pd, 0, 8, 16), -EMSGSIZE, prm::status::bad_input_len,
	       emu::Syndrome::input_too_short);
	expect(raw(prm::opcode::query_hca_cap, 0, 16, 16), -EOVERFLOW, prm::status::bad_output_len,
	       emu::Syndrome::output_too_short);
}

TEST_F(Mlx5Emu, NonZeroUidIsEinval)
{
	expect(raw(prm::opcode::alloc_pd, 0, 16, 16,
		   [](uint8_t *in) { prm::set(in, prm::cmd_hdr_in::uid, 5); }),
	       -EINVAL, prm::status::bad_param, emu::Syndrome::bad_uid);
}

TEST_F(Mlx5Emu, BringUpCommandsOutOfOrderAreEio)
{
	expect(mlx5::enable_hca(dev->cmdq()), -EIO, prm::status::bad_sys_state,
	       emu::Syndrome::hca_already_enabled);
	expect(mlx5::init_hca(dev->cmdq()), -EIO, prm::status::bad_sys_state,
	       emu::Syndrome::hca_already_initialized);
}

TEST_F(Mlx5Emu, SetIssiAfterInitIsEioAndUnknownCapTypeEinval)
{
	expect(mlx5::set_issi(dev->cmdq(), 1), -EIO, prm::status::bad_sys_state,
	       emu::Syndrome::hca_already_initialized);
	std::vector<uint8_t> cap(prm::query_hca_cap_out::capability_size);
	expect(mlx5::query_hca_cap(dev->cmdq(), 0x7, prm::cap_mode::current, cap.data()), -EINVAL,
	       prm::status::bad_param, emu::Syndrome::cap_type_unsupported);
}

TEST_F(Mlx5Emu, BadPagesAreEinval)
{
	const uint64_t unaligned[] = {0x100800};
	expect(mlx5::manage_pages_give(dev->cmdq(), unaligned), -EINVAL, prm::status::bad_param,
	       emu::Syndrome::page_unaligned);
}

TEST_F(Mlx5Emu, PdErrorsMapToTheirErrnos)
{
	uint32_t a = 0, b = 0, c = 0;
	ASSERT_EQ(dev->alloc_pd(&a), 0);
	ASSERT_EQ(dev->alloc_pd(&b), 0);
	expect(dev->alloc_pd(&c), -ENOMEM, prm::status::exceed_lim, emu::Syndrome::pd_table_full);
	expect(dev->dealloc_pd(0), -ENXIO, prm::status::bad_index, emu::Syndrome::pd_out_of_range);
	expect(dev->dealloc_pd(4), -ENXIO, prm::status::bad_index, emu::Syndrome::pd_out_of_range);
	ASSERT_EQ(dev->dealloc_pd(b), 0);
	expect(dev->dealloc_pd(b), -EINVAL, prm::status::bad_res_state,
	       emu::Syndrome::pd_not_allocated);

	mlx5::MkeyCreate m;
	m.ctx.pd = a;
	m.ctx.free = true;
	uint32_t idx = 0;
	ASSERT_EQ(dev->create_mkey(m, &idx), 0);
	expect(dev->dealloc_pd(a), -EBUSY, prm::status::resource_busy, emu::Syndrome::pd_in_use);
	ASSERT_EQ(dev->destroy_mkey(idx), 0);
	EXPECT_EQ(dev->dealloc_pd(a), 0);
}

TEST_F(Mlx5Emu, MkeyErrorsMapToTheirErrnos)
{
	mlx5::MkeyCreate m;
	m.ctx.pd = pd;
	m.ctx.free = true;
	uint32_t idx = 0;

	m.index = 16; /* 2^4 */
	expect(dev->create_mkey(m, &idx), -ENXIO, prm::status::bad_index,
	       emu::Syndrome::mkey_index_out_of_range);
	m.index = 5;
	ASSERT_EQ(dev->create_mkey(m, &idx), 0);
	expect(dev->create_mkey(m, &idx), -EINVAL, prm::status::bad_res_state,
	       emu::Syndrome::mkey_index_in_use);
	m.index = 0;

	m.ctx.access_mode = prm::access_mode::ksm;
	expect(dev->create_mkey(m, &idx), -EINVAL, prm::status::bad_param,
	       emu::Syndrome::mkey_access_mode);
	m.ctx.access_mode = prm::access_mode::mtt;

	m.ctx.log_page_size = 11;
	expect(dev->create_mkey(m, &idx), -EINVAL, prm::status::bad_param,
	       emu::Syndrome::mkey_page_size);
	m.ctx.log_page_size = 12;

	m.ctx.pd = 3; /* in range, never allocated */
	expect(dev->create_mkey(m, &idx), -EINVAL, prm::status::bad_res_state,
	       emu::Syndrome::pd_not_allocated);
	m.ctx.pd = pd;

	/* A live MTT mkey whose translations do not cover [start, start + len): one entry pads
	 * to one octword, two pages. */
	std::vector<mlx5::MttEntry> one(1);
	one[0].iova = 0x200000;
	mlx5::MkeyCreate live = m;
	live.ctx.free = false;
	live.ctx.len = 3 * 4096;
	live.mtt = one;
	expect(dev->create_mkey(live, &idx), -EINVAL, prm::status::bad_param,
	       emu::Syndrome::mkey_range);

	/* More translations than the mkey has room for. */
	mlx5::MkeyCreate over = live;
	over.ctx.len = 4096;
	over.ctx.translations_octword_size = 0;
	std::vector<uint8_t> in;
	ASSERT_EQ(mlx5::encode_create_mkey(over, &in), 0);
	prm::set(in.data() + prm::create_mkey_in::mkc_offset, prm::mkc::translations_octword_size,
		 0);
	uint8_t out[16];
	expect(dev->exec(in.data(), in.size(), out, sizeof(out)), -EINVAL, prm::status::bad_param,
	       emu::Syndrome::mkey_translations);
	/* UMEM-backed mkeys are not in the subset. */
	ASSERT_EQ(mlx5::encode_create_mkey(over, &in), 0);
	prm::set(in.data(), prm::create_mkey_in::mkey_umem_valid, 1);
	expect(dev->exec(in.data(), in.size(), out, sizeof(out)), -EINVAL, prm::status::bad_param,
	       emu::Syndrome::mkey_umem);

	/* Query and destroy of an index with no mkey. */
	mlx5::MkeyQuery q;
	expect(dev->query_mkey(9, 0, &q), -EINVAL, prm::status::bad_res_state,
	       emu::Syndrome::mkey_not_found);
	expect(dev->destroy_mkey(9), -EINVAL, prm::status::bad_res_state,
	       emu::Syndrome::mkey_not_found);
	expect(dev->destroy_mkey(0), -ENXIO, prm::status::bad_index,
	       emu::Syndrome::mkey_index_out_of_range);

	/* Fill the table: 15 indexes, one (5) already live. */
	std::vector<uint32_t> made;
	for (;;) {
		uint32_t i = 0;
		int rc = dev->create_mkey(m, &i);
		if (rc != 0) {
			expect(rc, -ENOMEM, prm::status::exceed_lim,
			       emu::Syndrome::mkey_table_full);
			break;
		}
		made.push_back(i);
		ASSERT_LE(made.size(), 15u);
	}
	EXPECT_EQ(made.size(), 14u);
	for (uint32_t i : made)
		EXPECT_EQ(dev->destroy_mkey(i), 0);
	EXPECT_EQ(dev->destroy_mkey(5), 0);
}

/* Bring-up steps by hand on a fresh device: the refusals the driver's order never provokes. */
TEST(Mlx5EmuLife, CommandsBeforeTheirStageAreRefused)
{
	Rig r;
	ASSERT_EQ(r.make(config(emu::DoorbellDelivery::inline_call)), 0);
	/* The test drives the command queue itself: it is the driver that sets BME. */
	ASSERT_EQ(r.hw->function().set_bus_master(true), 0);
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(r.hw->function(), *r.arena, 1000ms, &q), 0);
	uint32_t pd = 0;
	EXPECT_EQ(mlx5::alloc_pd(*q, &pd), -EIO);
	EXPECT_EQ(q->last_status(), prm::status::bad_sys_state);
	EXPECT_EQ(q->last_syndrome(), syn(emu::Syndrome::hca_not_initialized));
	EXPECT_EQ(mlx5::disable_hca(*q), -EIO);
	EXPECT_EQ(q->last_syndrome(), syn(emu::Syndrome::hca_disabled));
	ASSERT_EQ(mlx5::enable_hca(*q), 0);
	EXPECT_EQ(mlx5::set_issi(*q, 7), -EINVAL);
	EXPECT_EQ(q->last_status(), prm::status::bad_param);
	EXPECT_EQ(q->last_syndrome(), syn(emu::Syndrome::issi_unsupported));
	ASSERT_EQ(mlx5::set_issi(*q, 1), 0);
	EXPECT_EQ(mlx5::init_hca(*q), -ENOSPC); /* no pages given yet */
	EXPECT_EQ(q->last_status(), prm::status::no_resources);
	EXPECT_EQ(q->last_syndrome(), syn(emu::Syndrome::pages_missing));
	EXPECT_EQ(mlx5::alloc_pd(*q, &pd), -EIO);
	EXPECT_EQ(q->last_syndrome(), syn(emu::Syndrome::hca_not_initialized));
	EXPECT_EQ(mlx5::teardown_hca(*q, prm::teardown_hca_in::profile_graceful_close), -EIO);
	EXPECT_EQ(q->last_syndrome(), syn(emu::Syndrome::hca_not_initialized));
	EXPECT_EQ(mlx5::disable_hca(*q), 0);
	EXPECT_EQ(mlx5::disable_hca(*q), -EIO);
	EXPECT_EQ(q->last_status(), prm::status::bad_sys_state);
}

TEST_F(Mlx5Emu, HandlesGiveTheirObjectsBack)
{
	{
		mlx5::PdHandle p;
		ASSERT_EQ(mlx5::PdHandle::alloc(*dev, &p), 0);
		mlx5::MkeyCreate c;
		c.ctx.pd = p.pd();
		c.ctx.free = true;
		mlx5::MkeyHandle a, b;
		ASSERT_EQ(mlx5::MkeyHandle::create(*dev, c, &a), 0);
		EXPECT_EQ(r.hw->device().mkeys().live(), 1u);
		b = std::move(a);
		EXPECT_FALSE(a);
		EXPECT_EQ(r.hw->device().mkeys().live(), 1u);
		EXPECT_EQ(r.hw->device().pds_allocated(), 2u);
		/* Members go in reverse order: the mkey before the PD it lives in. */
		mlx5::PdHandle keep = std::move(p);
		b.reset();
		EXPECT_EQ(r.hw->device().mkeys().live(), 0u);
	}
	EXPECT_EQ(r.hw->device().pds_allocated(), 1u); /* the fixture's */
	mlx5::MkeyHandle bad;
	mlx5::MkeyCreate c;
	c.ctx.pd = 3;
	EXPECT_EQ(mlx5::MkeyHandle::create(*dev, c, &bad), -EINVAL);
	EXPECT_FALSE(bad);
}

TEST(Mlx5EmuLife, StoppedDeviceThreadTimesOutCleanly)
{
	Rig r;
	ASSERT_EQ(r.make(config(emu::DoorbellDelivery::poll_thread)), 0);
	mlx5::DeviceOptions o = r.opts();
	o.cmd_timeout = 100ms;
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, o, &dev), 0);
	r.hw->emu_function().stop();
	uint32_t pd = 0;
	auto t0 = std::chrono::steady_clock::now();
	EXPECT_EQ(dev->alloc_pd(&pd), -ETIMEDOUT);
	auto took = std::chrono::steady_clock::now() - t0;
	EXPECT_GE(took, 100ms);
	EXPECT_LT(took, 2000ms);
	EXPECT_TRUE(dev->cmdq().broken());
	EXPECT_EQ(dev->alloc_pd(&pd), -EIO); /* the slot still belongs to the device */
	dev.reset();			     /* no command: nothing waits again */
	EXPECT_EQ(r.arena->bytes_in_use(), 0u);
}

TEST(Mlx5EmuLife, OpenSetsBusMasterAndTeardownClearsIt)
{
	Rig r;
	ASSERT_EQ(r.make(config(emu::DoorbellDelivery::inline_call)), 0);
	/* The function comes out of reset unable to master the bus: without the driver's
	 * Bus Master Enable the model cannot fetch a single command and open times out. */
	ASSERT_FALSE(r.hw->function().bus_master());
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0);
	EXPECT_TRUE(r.hw->function().bus_master());
	EXPECT_EQ(r.hw->iommu().dma_refused(), 0u);
	EXPECT_EQ(r.hw->device().hca_state(), emu::HcaState::initialized);
	dev.reset();
	EXPECT_FALSE(r.hw->function().bus_master()) << "teardown leaves the function unable to DMA";
	EXPECT_EQ(r.hw->device().hca_state(), emu::HcaState::reset);
	EXPECT_EQ(r.hw->iommu().dma_refused(), 0u) << "teardown's commands ran before the clear";
	EXPECT_EQ(r.arena->bytes_in_use(), 0u);
}

TEST(Mlx5EmuLife, AFailedOpenClearsBusMasterToo)
{
	Rig r;
	emu::EmuConfig cfg = config(emu::DoorbellDelivery::inline_call);
	cfg.boot_delay = std::chrono::microseconds(5000000); /* open gives up while it boots */
	ASSERT_EQ(r.make(cfg), 0);
	mlx5::DeviceOptions o = r.opts();
	o.init_timeout = 20ms;
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(r.hw->function(), *r.space, o, &dev), -ETIMEDOUT);
	EXPECT_FALSE(r.hw->function().bus_master());
}

TEST(Mlx5EmuLife, ACommandAfterBusMasterWasClearedNeverCompletes)
{
	Rig r;
	ASSERT_EQ(r.make(config(emu::DoorbellDelivery::inline_call)), 0);
	mlx5::DeviceOptions o = r.opts();
	o.cmd_timeout = 100ms;
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, o, &dev), 0);
	const uint64_t commands = r.hw->device().stats().commands;
	/* Something else cleared BME behind the driver's back: the model cannot read the
	 * command entry, so the command never runs and never completes, as on a ConnectX. */
	ASSERT_EQ(r.hw->function().set_bus_master(false), 0);
	uint32_t pd = 0;
	EXPECT_EQ(dev->alloc_pd(&pd), -ETIMEDOUT);
	EXPECT_EQ(r.hw->device().stats().commands, commands) << "no command reached the model";
	EXPECT_GE(r.hw->iommu().dma_refused(), 1u);
	EXPECT_EQ(r.hw->device().dma_faults(), 0u) << "a refused DMA is no IOMMU fault";
	dev.reset();
	EXPECT_EQ(r.arena->bytes_in_use(), 0u);
}

TEST(Mlx5EmuLife, DeviceStillBootingTimesOut)
{
	Rig r;
	emu::EmuConfig cfg = config(emu::DoorbellDelivery::inline_call);
	cfg.boot_delay = std::chrono::microseconds(5000000);
	ASSERT_EQ(r.make(cfg), 0);
	mlx5::DeviceOptions o = r.opts();
	o.init_timeout = 50ms;
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(r.hw->function(), *r.space, o, &dev), -ETIMEDOUT);
	EXPECT_EQ(r.arena->bytes_in_use(), 0u);
}

TEST(Mlx5EmuLife, OpenWaitsForABootingDevice)
{
	Rig r;
	emu::EmuConfig cfg = config(emu::DoorbellDelivery::poll_thread);
	cfg.boot_delay = std::chrono::microseconds(30000);
	ASSERT_EQ(r.make(cfg), 0);
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0);
}

TEST(Mlx5EmuLife, AFunctionThatIsNotAConnectxIsRefusedUntouched)
{
	Rig r;
	emu::EmuConfig cfg = config(emu::DoorbellDelivery::inline_call);
	cfg.id = {0x1234, 0x11e8}; /* QEMU's edu */
	ASSERT_EQ(r.make(cfg), 0);
	const size_t mappings = r.hw->iommu().mapping_count();
	std::unique_ptr<mlx5::Device> dev;
	::testing::internal::CaptureStderr();
	EXPECT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), -ENODEV);
	std::string log = ::testing::internal::GetCapturedStderr();
	EXPECT_NE(log.find("emu:0 is 1234:11e8, not a ConnectX (vendor 15b3)"), std::string::npos)
		<< log;
	EXPECT_EQ(dev, nullptr);
	EXPECT_EQ(r.hw->device().stats().commands, 0u) << "no command reached the function";
	EXPECT_EQ(r.hw->emu_function().doorbells_delivered(), 0u);
	EXPECT_FALSE(r.hw->function().bus_master()) << "not even Bus Master Enable";
	EXPECT_EQ(r.arena->bytes_in_use(), 0u);
	EXPECT_EQ(r.hw->iommu().mapping_count(), mappings);
}

TEST(Mlx5EmuLife, OnlyKnownConnectxIdsAreSupported)
{
	EXPECT_TRUE(mlx5::is_supported_device({0x15b3, 0x1017}));  /* ConnectX-5 */
	EXPECT_TRUE(mlx5::is_supported_device({0x15b3, 0x101d}));  /* ConnectX-6 Dx */
	EXPECT_TRUE(mlx5::is_supported_device({0x15b3, 0x1021}));  /* ConnectX-7 */
	EXPECT_FALSE(mlx5::is_supported_device({0x15b3, 0x6750})); /* a Mellanox, not mlx5 */
	EXPECT_FALSE(mlx5::is_supported_device({0x1234, 0x11e8})); /* QEMU edu */
	EXPECT_FALSE(mlx5::is_supported_device({0x8086, 0x1017})); /* right device, wrong vendor */
}

/* ---- Firmware pages, the async EQ and health ---------------------------------------------- */

/* Bring-up answers the regular pages the model asks for with PAGE_REQUEST once the async EQ
 * exists, for the function the request names. */
TEST(Mlx5EmuPages, BringUpAnswersPageRequestsForTheirFunction)
{
	Rig r;
	emu::EmuConfig cfg = config(emu::DoorbellDelivery::inline_call);
	cfg.page_function_id = 9;
	cfg.regular_pages = 40;
	ASSERT_EQ(r.make(cfg), 0);
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0);
	EXPECT_EQ(dev->page_function_id(), 9);
	EXPECT_NE(dev->async_eqn(), 0u);
	EXPECT_EQ(dev->pages_given(), size_t{cfg.boot_pages} + cfg.init_pages + 40);
	EXPECT_EQ(r.hw->device().pages_given(), dev->pages_given());
	EXPECT_GE(r.hw->device().stats().page_requests, 1u);
	EXPECT_EQ(r.hw->device().host_endianness(), prm::reg_host_endianness::host_value);
	/* No command had to wait: the request was answered right after CREATE_EQ. */
	EXPECT_EQ(r.hw->device().stats().stalled, 0u);
}

/* Later requests: a command firmware holds for pages completes because the driver answers on
 * the page slot while it waits on slot 0; negative requests are reclaimed. */
TEST(Mlx5EmuPages, HeldCommandCompletesAndNegativeRequestsAreReclaimed)
{
	for (auto mode : {emu::DoorbellDelivery::inline_call, emu::DoorbellDelivery::poll_thread}) {
		Rig r;
		ASSERT_EQ(r.make(config(mode)), 0);
		std::unique_ptr<mlx5::Device> dev;
		ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0);
		const size_t before = dev->pages_given();
		ASSERT_EQ(r.hw->device().request_pages(600), 0);
		uint32_t pd = 0;
		ASSERT_EQ(dev->alloc_pd(&pd), 0);
		EXPECT_EQ(dev->pages_given(), before + 600);
		EXPECT_EQ(r.hw->device().pages_given(), before + 600);
		/* Held, and held again after the first 512 pages until the rest came. */
		EXPECT_GE(r.hw->device().stats().stalled, 1u);
		/* 600 pages do not fit the first 2 MiB chunk: the page memory grew. */
		EXPECT_EQ(dev->page_memory(), 2 * r.opts().page_chunk);

		ASSERT_EQ(r.hw->device().request_pages(-100), 0);
		int handled = 0;
		const auto end = std::chrono::steady_clock::now() + 2s;
		while (handled == 0 && std::chrono::steady_clock::now() < end)
			handled = dev->poll_events();
		EXPECT_EQ(handled, 1);
		EXPECT_EQ(dev->pages_given(), before + 500);
		EXPECT_EQ(r.hw->device().pages_given(), before + 500);
		EXPECT_EQ(dev->dealloc_pd(pd), 0);
		dev.reset();
		EXPECT_EQ(r.hw->device().pages_given(), 0u);
		EXPECT_EQ(r.arena->bytes_in_use(), 0u);
	}
}

/* Beyond max_page_memory the driver answers "cannot give" (MANAGE_PAGES alloc_fail) and the
 * command firmware held fails instead of waiting forever. */
TEST(Mlx5EmuPages, PageMemoryCapFailsTheHeldCommand)
{
	Rig r;
	ASSERT_EQ(r.make(config(emu::DoorbellDelivery::inline_call)), 0);
	mlx5::DeviceOptions o = r.opts();
	o.max_page_memory = o.page_chunk; /* 512 pages */
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, o, &dev), 0);
	const size_t before = dev->pages_given();
	ASSERT_EQ(r.hw->device().request_pages(600), 0);
	uint32_t pd = 0;
	EXPECT_EQ(dev->alloc_pd(&pd), -ENOSPC);
	EXPECT_EQ(dev->last_status(), prm::status::no_resources);
	EXPECT_EQ(dev->last_syndrome(), syn(emu::Syndrome::pages_refused));
	EXPECT_EQ(dev->pages_given(), before);
	EXPECT_EQ(dev->page_memory(), o.page_chunk);
	EXPECT_FALSE(dev->broken());
}

TEST(Mlx5EmuPages, UnusablePageOptionsAreEinval)
{
	Rig r;
	ASSERT_EQ(r.make(config(emu::DoorbellDelivery::inline_call)), 0);
	std::unique_ptr<mlx5::Device> dev;
	mlx5::DeviceOptions o = r.opts();
	o.max_page_memory = o.page_chunk - 1;
	EXPECT_EQ(mlx5::Device::open(r.hw->function(), *r.space, o, &dev), -EINVAL);
	o = r.opts();
	o.page_chunk = 4096 + 1;
	EXPECT_EQ(mlx5::Device::open(r.hw->function(), *r.space, o, &dev), -EINVAL);
	o = r.opts();
	o.async_eq_log_size = 0;
	EXPECT_EQ(mlx5::Device::open(r.hw->function(), *r.space, o, &dev), -EINVAL);
	EXPECT_EQ(r.hw->device().stats().commands, 0u);
}

/* The driver writes the async EQ's consumer index back: far more events than the EQ holds
 * never overrun it (the model raises health syndrome 0xc when they do). */
TEST(Mlx5EmuPages, ConsumerIndexKeepsTheAsyncEqFromOverrunning)
{
	Rig r;
	ASSERT_EQ(r.make(config(emu::DoorbellDelivery::inline_call)), 0);
	mlx5::DeviceOptions o = r.opts();
	o.async_eq_log_size = 2; /* 4 entries */
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, o, &dev), 0);
	for (int i = 0; i < 40; i++) {
		ASSERT_EQ(r.hw->device().request_pages(1), 0) << i;
		ASSERT_EQ(dev->poll_events(), 1) << i;
	}
	EXPECT_EQ(r.hw->device().data_path().stats().eq_overruns, 0u);
	EXPECT_EQ(dev->health_syndrome(), 0);
	EXPECT_FALSE(dev->broken());
}

/* Firmware reports a health syndrome: the command waiting sees it (not a 60 s timeout), the
 * device is broken with -ENXIO, later commands -EIO, teardown sends nothing. */
TEST(Mlx5EmuHealth, SyndromeBreaksTheDeviceWithEnxio)
{
	for (auto mode : {emu::DoorbellDelivery::inline_call, emu::DoorbellDelivery::poll_thread}) {
		Rig r;
		ASSERT_EQ(r.make(config(mode)), 0);
		std::unique_ptr<mlx5::Device> dev;
		ASSERT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), 0);
		r.hw->device().raise_health_syndrome(prm::health_synd::fw_err, 0x42);
		uint32_t pd = 0;
		auto t0 = std::chrono::steady_clock::now();
		EXPECT_EQ(dev->alloc_pd(&pd), -ENXIO);
		EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms);
		EXPECT_TRUE(dev->broken());
		EXPECT_EQ(dev->health_syndrome(), prm::health_synd::fw_err);
		EXPECT_EQ(dev->alloc_pd(&pd), -EIO);
		EXPECT_EQ(dev->poll_events(), -ENXIO);
		const uint64_t commands = r.hw->device().stats().commands;
		dev.reset();
		EXPECT_EQ(r.hw->device().stats().commands, commands);
		EXPECT_EQ(r.arena->bytes_in_use(), 0u);
	}
}

TEST(Mlx5EmuHealth, SyndromeBeforeBringUpFailsOpen)
{
	Rig r;
	ASSERT_EQ(r.make(config(emu::DoorbellDelivery::inline_call)), 0);
	r.hw->device().raise_health_syndrome(prm::health_synd::hw_ftl_err, 0);
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(r.hw->function(), *r.space, r.opts(), &dev), -ENXIO);
	EXPECT_EQ(dev, nullptr);
	EXPECT_EQ(r.arena->bytes_in_use(), 0u);
}
