/* SPDX-License-Identifier: BSD-3-Clause */
/* The device model's init segment and command queue protocol, driven by raw entries. */
#include <gtest/gtest.h>

#include <thread>

#include "test_emu_harness.h"

namespace nicmr::emu::test {
namespace {

using namespace std::chrono_literals;

Cmd enable_cmd()
{
	return Cmd(prm::opcode::enable_hca, prm::enable_hca_in::size, 16);
}

TEST(EmuMlx5Boot, InitSegmentLooksLikeConnectXFirmware)
{
	EmuConfig cfg;
	cfg.fw_rev_major = 22;
	cfg.fw_rev_minor = 35;
	cfg.fw_rev_subminor = 2000;
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	EXPECT_EQ(h.bar_get(prm::init_seg::cmdif_rev), prm::init_seg::cmdif_rev_supported);
	EXPECT_EQ(h.bar_get(prm::init_seg::fw_rev_major), 22u);
	EXPECT_EQ(h.bar_get(prm::init_seg::fw_rev_minor), 35u);
	EXPECT_EQ(h.bar_get(prm::init_seg::fw_rev_subminor), 2000u);
	EXPECT_EQ(h.bar_get(prm::init_seg::log_cmdq_size), 5u);
	EXPECT_EQ(h.bar_get(prm::init_seg::log_cmdq_stride), 6u);
	EXPECT_EQ(h.bar_get(prm::init_seg::initializing), 0u);
	EXPECT_TRUE(h.dev().booted());
	EXPECT_EQ(h.dev().hca_state(), HcaState::reset);
}

TEST(EmuMlx5Boot, DriverCannotOverwriteFirmwareFields)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	h.bar_set(prm::init_seg::log_cmdq_size, 1);
	h.bar_set(prm::init_seg::log_cmdq_stride, 9);
	h.bar_set(prm::init_seg::cmdif_rev, 3);
	h.bar_set(prm::init_seg::initializing, 1);
	EXPECT_EQ(h.bar_get(prm::init_seg::log_cmdq_size), 5u);
	EXPECT_EQ(h.bar_get(prm::init_seg::log_cmdq_stride), 6u);
	EXPECT_EQ(h.bar_get(prm::init_seg::cmdif_rev), 5u);
	EXPECT_EQ(h.bar_get(prm::init_seg::initializing), 0u);
	/* The address bits are the driver's. */
	EXPECT_EQ(h.bar_get(prm::init_seg::cmdq_addr_h), prm::init_seg::cmdq_addr_high(kIova));
}

TEST(EmuMlx5Boot, InitializingStaysSetForTheBootDelayAndDoorbellsAreIgnored)
{
	EmuConfig cfg;
	cfg.boot_delay = 300ms;
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.bar_get(prm::init_seg::initializing), 1u);
	PostOpts o;
	o.timeout = 1ms;
	Reply r = h.post(enable_cmd(), o);
	EXPECT_FALSE(r.completed) << "a booting device must not run commands";
	EXPECT_EQ(h.dev().stats().dropped, 1u);
	const auto end = std::chrono::steady_clock::now() + 5s;
	while (h.bar_get(prm::init_seg::initializing) != 0 &&
	       std::chrono::steady_clock::now() < end)
		std::this_thread::sleep_for(1ms);
	ASSERT_EQ(h.bar_get(prm::init_seg::initializing), 0u);
	EXPECT_EQ(h.run(enable_cmd()).status(), prm::status::ok);
}

TEST(EmuMlx5Cmdq, CompletedEntryIsHandedBackWithStatusAndOutput)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	Reply r = h.post(enable_cmd());
	ASSERT_TRUE(r.completed);
	EXPECT_FALSE(h.owned_by_device(0));
	EXPECT_EQ(r.delivery, prm::delivery_status::ok);
	EXPECT_EQ(r.status(), prm::status::ok);
	EXPECT_EQ(r.syndrome(), 0u);
	EXPECT_EQ(h.dev().hca_state(), HcaState::enabled);
	/* The same command again: delivered, refused by the device's state machine. */
	PostOpts o;
	o.slot = 7;
	r = h.run(enable_cmd(), o);
	EXPECT_EQ(r.status(), prm::status::bad_sys_state);
	EXPECT_EQ(r.syndrome(), static_cast<uint32_t>(Syndrome::hca_already_enabled));
	EXPECT_EQ(h.dev().stats().commands, 2u);
	EXPECT_EQ(h.dev().stats().commands_failed, 1u);
}

TEST(EmuMlx5Cmdq, EntryNotOwnedByTheDeviceIsIgnored)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	PostOpts o;
	o.ring = false;
	o.wait = false;
	h.post(enable_cmd(), o);
	/* Hand it back to software before ringing. */
	h.entry(0)[prm::byte_offset(prm::cmdq_entry::ownership)] = 0;
	h.ring(0);
	EXPECT_EQ(h.dev().hca_state(), HcaState::reset);
	EXPECT_EQ(h.dev().stats().dropped, 1u);
	EXPECT_EQ(h.dev().stats().commands, 0u);
}

TEST(EmuMlx5Cmdq, WrongCommandTypeIsADeliveryError)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	PostOpts o;
	o.type = 3;
	Reply r = h.post(enable_cmd(), o);
	ASSERT_TRUE(r.completed);
	EXPECT_EQ(r.delivery, prm::delivery_status::bad_command_type);
	EXPECT_EQ(h.dev().hca_state(), HcaState::reset);
	EXPECT_EQ(h.dev().stats().delivery_errors, 1u);
}

/* A command whose input needs mailboxes: SET_HCA_CAP (4112 bytes, 8 blocks). */
Cmd set_cap_cmd()
{
	Cmd c(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size, 16,
	      prm::cap_op_mod(prm::cap_type::general, 0));
	return c;
}

class EmuMlx5Mailbox : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(h.rc(), 0);
		ASSERT_EQ(h.enable_hca(), prm::status::ok);
	}
	Harness h;
};

TEST_F(EmuMlx5Mailbox, InputTokenMismatchIsATokenError)
{
	PostOpts o;
	o.mailbox_token = 0x11;
	Reply r = h.post(set_cap_cmd(), o);
	ASSERT_TRUE(r.completed);
	EXPECT_EQ(r.delivery, prm::delivery_status::token_err);
}

TEST_F(EmuMlx5Mailbox, BlockNumbersOutOfOrderAreRefused)
{
	PostOpts o;
	o.wrong_block_num = true;
	Reply r = h.post(set_cap_cmd(), o);
	ASSERT_TRUE(r.completed);
	EXPECT_EQ(r.delivery, prm::delivery_status::bad_block_number);
}

TEST_F(EmuMlx5Mailbox, MisalignedMailboxPointersAreRefused)
{
	PostOpts o;
	o.in_mb_iova = kIova + kInMbOff + 64;
	Reply r = h.post(set_cap_cmd(), o);
	ASSERT_TRUE(r.completed);
	EXPECT_EQ(r.delivery, prm::delivery_status::input_ptr_align_err);

	Cmd q(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size, prm::query_hca_cap_out::size,
	      prm::cap_op_mod(prm::cap_type::general, prm::cap_mode::max));
	o = {};
	o.out_mb_iova = kIova + kOutMbOff + 16;
	r = h.post(q, o);
	ASSERT_TRUE(r.completed);
	EXPECT_EQ(r.delivery, prm::delivery_status::output_ptr_align_err);
}

TEST_F(EmuMlx5Mailbox, LengthBeyondTheChainLimitIsRefused)
{
	PostOpts o;
	o.in_len_override = EmuMlx5Device::kMaxCmdLen + 1;
	Reply r = h.post(enable_cmd(), o);
	ASSERT_TRUE(r.completed);
	EXPECT_EQ(r.delivery, prm::delivery_status::input_length_err);
	Cmd c = enable_cmd();
	c.out_len = EmuMlx5Device::kMaxCmdLen + 1;
	r = h.post(c);
	ASSERT_TRUE(r.completed);
	EXPECT_EQ(r.delivery, prm::delivery_status::output_length_err);
}

TEST_F(EmuMlx5Mailbox, UnmappedInputMailboxIsADeviceErrorAndRunsNothing)
{
	const uint64_t faults = h.dev().dma_faults();
	PostOpts o;
	o.in_mb_iova = 0x7000000000ull; /* aligned, never mapped */
	Cmd c = set_cap_cmd();
	c.set_at(prm::set_hca_cap_in::capability_offset, prm::hca_cap::mkey_by_name, 0);
	Reply r = h.run(c, o);
	EXPECT_EQ(r.status(), prm::status::internal_err);
	EXPECT_EQ(r.syndrome(), static_cast<uint32_t>(Syndrome::dma_fault));
	EXPECT_EQ(h.dev().dma_faults(), faults + 1);
	EXPECT_EQ(h.emu().iommu().last_fault_iova(), 0x7000000000ull);
}

TEST_F(EmuMlx5Mailbox, UnmappedOutputMailboxLeavesStateAlone)
{
	/* CREATE-like state change would be wrong here; use MANAGE_PAGES take with a chain that
	 * points nowhere: the device must keep its pages. */
	ASSERT_EQ(h.give_pages(4).status(), prm::status::ok);
	Cmd take(prm::opcode::manage_pages, prm::manage_pages_in::size, 16 + 4 * 8 + 512,
		 prm::manage_pages_op_mod::take);
	take.set(prm::manage_pages_in::input_num_entries, 4);
	PostOpts o;
	o.out_mb_iova = 0x7000000000ull;
	Reply r = h.run(take, o);
	EXPECT_EQ(r.status(), prm::status::internal_err);
	EXPECT_EQ(r.syndrome(), static_cast<uint32_t>(Syndrome::dma_fault));
	EXPECT_EQ(h.dev().pages_given(), 4u);
	EXPECT_EQ(h.dev().dma_faults(), 1u);
}

TEST_F(EmuMlx5Mailbox, LargeOutputComesBackThroughTheChain)
{
	Cmd q(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size, prm::query_hca_cap_out::size,
	      prm::cap_op_mod(prm::cap_type::general, prm::cap_mode::max));
	Reply r = h.run(q);
	ASSERT_EQ(r.status(), prm::status::ok);
	const size_t cap = prm::query_hca_cap_out::capability_offset;
	EXPECT_EQ(r.get_at(cap, prm::hca_cap::log_max_mkey), 16u);
	EXPECT_EQ(r.get_at(cap, prm::hca_cap::num_ports), 2u);
	EXPECT_EQ(r.get_at(cap, prm::hca_cap::log_max_pd), 16u);
}

TEST(EmuMlx5Cmdq, UnmappedQueueIsCountedAndNothingRuns)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	h.set_cmdq(0x6000000000ull);
	h.ring(0);
	EXPECT_EQ(h.dev().dma_faults(), 1u);
	EXPECT_EQ(h.dev().stats().dropped, 1u);
	EXPECT_EQ(h.dev().hca_state(), HcaState::reset);
}

TEST(EmuMlx5Cmdq, NoStrayWriteOutsideTheOutputAreas)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	/* Fill everything but slot 0's entry with a pattern; run a command with a 2-block
	 * output; only the entry's output, status byte and the two output blocks' data change. */
	std::memset(h.host(0), 0xa5, kMemLen);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	std::vector<uint8_t> before(h.host(0), h.host(0) + kMemLen);
	Cmd q(prm::opcode::query_issi, prm::query_issi_in::size, prm::query_issi_out::size);
	Reply r = h.run(q);
	ASSERT_EQ(r.status(), prm::status::ok);
	EXPECT_EQ(r.get(prm::query_issi_out::supported_issi_dw0), 0x3u);
	/* The harness wrote the entry and the output chain headers itself: compare the rest. */
	for (size_t i = prm::cmdq_entry::size; i < kMemLen; i++) {
		if (i >= kOutMbOff && i < kOutMbOff + prm::mailbox::align)
			continue;
		if (i >= kInMbOff && i < kInMbOff + prm::mailbox::align)
			continue;
		ASSERT_EQ(h.host(0)[i], before[i]) << "stray write at offset " << i;
	}
}

TEST(EmuMlx5Cmdq, PollThreadCompletesCommandsAsynchronously)
{
	EmuConfig cfg;
	cfg.delivery = DoorbellDelivery::poll_thread;
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	ASSERT_TRUE(h.emu().emu_function().running());
	Reply r = h.run(enable_cmd());
	EXPECT_EQ(r.status(), prm::status::ok);
	EXPECT_EQ(h.dev().hca_state(), HcaState::enabled);
}

TEST(EmuMlx5Cmdq, StoppedDeviceNeverCompletesUntilRestarted)
{
	for (auto mode : {DoorbellDelivery::inline_call, DoorbellDelivery::poll_thread}) {
		EmuConfig cfg;
		cfg.delivery = mode;
		Harness h(cfg);
		ASSERT_EQ(h.rc(), 0);
		h.emu().emu_function().stop();
		PostOpts o;
		o.timeout = 20ms;
		Reply r = h.post(enable_cmd(), o);
		EXPECT_FALSE(r.completed) << "a driver waiting here must time out";
		EXPECT_TRUE(h.owned_by_device(0));
		ASSERT_EQ(h.emu().emu_function().start(), 0);
		r = h.collect(0, 16, 5000ms);
		ASSERT_TRUE(r.completed);
		EXPECT_EQ(r.status(), prm::status::ok);
	}
}

TEST(EmuMlx5Cmdq, CommandsFromManyThreadsInDifferentSlotsAllComplete)
{
	for (auto mode : {DoorbellDelivery::inline_call, DoorbellDelivery::poll_thread}) {
		EmuConfig cfg;
		cfg.delivery = mode;
		Harness h(cfg);
		ASSERT_EQ(h.rc(), 0);
		h.bring_up();
		const uint64_t before = h.dev().stats().commands;
		/* Each thread owns one slot; inputs fit inline so the shared mailbox area is not
		 * used. */
		std::vector<std::thread> ts;
		std::atomic<int> ok{0};
		for (uint32_t t = 1; t <= 4; t++) {
			ts.emplace_back([&, t] {
				for (int i = 0; i < 50; i++) {
					Cmd c(prm::opcode::alloc_pd, prm::alloc_pd_in::size,
					      prm::alloc_pd_out::size);
					uint8_t e[prm::cmdq_entry::size] = {};
					namespace ce = prm::cmdq_entry;
					prm::set(e, ce::type, ce::type_pcie);
					prm::set(e, ce::input_length, c.in.size());
					prm::set(e, ce::output_length, c.out_len);
					std::memcpy(e + ce::inline_input, c.in.data(), c.in.size());
					prm::set(e, ce::ownership, ce::owner_hw);
					std::memcpy(h.entry(t), e, sizeof(e));
					h.ring(t);
					Reply r = h.collect(t, 16, 5000ms);
					if (r.completed && r.status() == prm::status::ok)
						ok++;
				}
			});
		}
		for (auto &t : ts)
			t.join();
		EXPECT_EQ(ok.load(), 200);
		EXPECT_EQ(h.dev().pds_allocated(), 200u);
		EXPECT_EQ(h.dev().stats().commands, before + 200);
		EXPECT_TRUE(h.dev().check_invariants());
	}
}

TEST(EmuMlx5, CreateRejectsOutOfRangeConfig)
{
	std::unique_ptr<EmuMlx5> e;
	EmuConfig c;
	c.log_max_mkey = 25;
	EXPECT_EQ(emu_mlx5_create(c, &e), -EINVAL);
	c = {};
	c.ports = 3;
	EXPECT_EQ(emu_mlx5_create(c, &e), -EINVAL);
	c = {};
	c.bar0_size = 4096; /* smaller than the init segment */
	EXPECT_EQ(emu_mlx5_create(c, &e), -EINVAL);
	c = {};
	c.max_pages = 4;
	EXPECT_EQ(emu_mlx5_create(c, &e), -EINVAL);
	EXPECT_EQ(e, nullptr);
	EXPECT_EQ(emu_mlx5_create({}, nullptr), -EINVAL);
}

TEST(EmuMlx5, OneModelPerStoppedFunction)
{
	std::unique_ptr<EmuFunction> fn;
	ASSERT_EQ(EmuFunction::create({}, &fn), 0);
	std::unique_ptr<EmuMlx5Device> a, b;
	ASSERT_EQ(EmuMlx5Device::create(*fn, {}, &a), 0);
	EXPECT_EQ(EmuMlx5Device::create(*fn, {}, &b), -EEXIST);
	EXPECT_EQ(b, nullptr);
	ASSERT_EQ(fn->start(), 0);
	std::unique_ptr<EmuFunction> fn2;
	ASSERT_EQ(EmuFunction::create({}, &fn2), 0);
	ASSERT_EQ(fn2->start(), 0);
	EXPECT_EQ(EmuMlx5Device::create(*fn2, {}, &b), -EBUSY);
	fn->stop();
}

TEST(EmuMlx5, SeveralDevicesLiveInOneProcess)
{
	EmuConfig a, b;
	a.name = "emu:0";
	b.name = "emu:1";
	b.log_max_mkey = 10;
	Harness ha(a), hb(b);
	ASSERT_EQ(ha.rc(), 0);
	ASSERT_EQ(hb.rc(), 0);
	ASSERT_EQ(ha.enable_hca(), prm::status::ok);
	EXPECT_EQ(ha.dev().hca_state(), HcaState::enabled);
	EXPECT_EQ(hb.dev().hca_state(), HcaState::reset);
	EXPECT_EQ(hb.fn().name(), "emu:1");
}

} // namespace
} // namespace nicmr::emu::test
