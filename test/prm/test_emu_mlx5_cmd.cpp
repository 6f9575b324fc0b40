/* SPDX-License-Identifier: BSD-3-Clause */
/* The device model's commands: each one's success and error paths with the exact status. */
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "test_emu_harness.h"

namespace nicmr::emu::test {
namespace {

uint32_t syn(Syndrome s)
{
	return static_cast<uint32_t>(s);
}

#define EXPECT_STATUS(reply, st, sy)                                                               \
	do {                                                                                       \
		Reply r_ = (reply);                                                                \
		EXPECT_EQ(r_.status(), st);                                                        \
		EXPECT_EQ(r_.syndrome(), syn(sy));                                                 \
	} while (0)

Cmd simple(uint16_t op, uint16_t op_mod = 0)
{
	return Cmd(op, 16, 16, op_mod);
}

/* ---- Decoder-level errors -------------------------------------------------------------- */

TEST(EmuMlx5Cmd, UnknownOpcodeIsBadOp)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	EXPECT_STATUS(h.run(simple(0x999)), prm::status::bad_op, Syndrome::bad_opcode);
	/* In the PRM but not in the model yet. */
	EXPECT_STATUS(h.run(simple(prm::opcode::create_umem)), prm::status::bad_op,
		      Syndrome::bad_opcode);
}

TEST(EmuMlx5Cmd, ShortInputAndOutputAreRefused)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::enable_hca, 4, 16)), prm::status::bad_input_len,
		      Syndrome::input_too_short);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::enable_hca, 12, 16)), prm::status::bad_input_len,
		      Syndrome::input_too_short);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::enable_hca, 16, 8)), prm::status::bad_output_len,
		      Syndrome::output_too_short);
	EXPECT_EQ(h.dev().hca_state(), HcaState::reset);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::query_issi, 16, 16)), prm::status::bad_output_len,
		      Syndrome::output_too_short);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::query_hca_cap, 16, 16 + 256,
				prm::cap_op_mod(prm::cap_type::general, 0))),
		      prm::status::bad_output_len, Syndrome::output_too_short);
}

TEST(EmuMlx5Cmd, NonZeroUidIsBadParam)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	Cmd c = simple(prm::opcode::enable_hca);
	c.set(prm::cmd_hdr_in::uid, 5);
	EXPECT_STATUS(h.run(c), prm::status::bad_param, Syndrome::bad_uid);
}

TEST(EmuMlx5Cmd, FailedCommandReturnsOnlyItsStatus)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	/* A pattern in the output mailbox must not survive as "output" of a failed command. */
	Cmd c(prm::opcode::query_issi, 16, prm::query_issi_out::size);
	Reply r = h.run(c);
	EXPECT_EQ(r.status(), prm::status::bad_sys_state);
	for (size_t i = prm::cmd_hdr_out::size; i < r.out.size(); i++)
		ASSERT_EQ(r.out[i], 0) << i;
}

TEST(EmuMlx5Cmd, DecoderCanBeCalledOnFlatBuffers)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	Cmd c = simple(prm::opcode::enable_hca);
	uint8_t out[16];
	CmdResult r = h.dev().execute(c.in.data(), c.in.size(), out, sizeof(out));
	EXPECT_EQ(r.status, prm::status::ok);
	EXPECT_EQ(prm::get(out, prm::cmd_hdr_out::status), prm::status::ok);
	r = h.dev().execute(c.in.data(), 3, out, sizeof(out));
	EXPECT_EQ(r.status, prm::status::bad_input_len);
	EXPECT_EQ(prm::get(out, prm::cmd_hdr_out::syndrome), syn(Syndrome::input_too_short));
}

/* ---- HCA life cycle -------------------------------------------------------------------- */

TEST(EmuMlx5Hca, CommandsBeforeEnableHcaAreBadSysState)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	const uint16_t ops[] = {prm::opcode::query_issi,    prm::opcode::set_issi,
				prm::opcode::query_pages,   prm::opcode::manage_pages,
				prm::opcode::init_hca,	    prm::opcode::disable_hca,
				prm::opcode::query_hca_cap, prm::opcode::query_special_contexts};
	for (uint16_t op : ops) {
		SCOPED_TRACE(op);
		Cmd c(op, 16, 4096 + 16, 1);
		EXPECT_STATUS(h.run(c), prm::status::bad_sys_state, Syndrome::hca_disabled);
	}
	for (uint16_t op : {prm::opcode::alloc_pd, prm::opcode::teardown_hca}) {
		EXPECT_STATUS(h.run(simple(op)), prm::status::bad_sys_state,
			      Syndrome::hca_not_initialized);
	}
	Cmd mk(prm::opcode::create_mkey, prm::create_mkey_in::size, 16);
	EXPECT_STATUS(h.run(mk), prm::status::bad_sys_state, Syndrome::hca_not_initialized);
	EXPECT_TRUE(h.dev().check_invariants());
}

TEST(EmuMlx5Hca, EnableHcaOnlyForFunctionZero)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	Cmd c = simple(prm::opcode::enable_hca);
	c.set(prm::enable_hca_in::function_id, 1);
	EXPECT_STATUS(h.run(c), prm::status::bad_param, Syndrome::bad_function_id);
	Cmd e = simple(prm::opcode::enable_hca);
	e.set(prm::enable_hca_in::embedded_cpu_function, 1);
	EXPECT_STATUS(h.run(e), prm::status::bad_param, Syndrome::bad_function_id);
	EXPECT_EQ(h.dev().hca_state(), HcaState::reset);
}

TEST(EmuMlx5Hca, InitHcaNeedsBootAndInitPages)
{
	EmuConfig cfg;
	cfg.boot_pages = 3;
	cfg.init_pages = 5;
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	EXPECT_EQ(h.query_pages(prm::query_pages_op_mod::boot), 3);
	EXPECT_EQ(h.query_pages(prm::query_pages_op_mod::init), 8);
	EXPECT_STATUS(h.run(simple(prm::opcode::init_hca)), prm::status::no_resources,
		      Syndrome::pages_missing);
	ASSERT_EQ(h.give_pages(3).status(), prm::status::ok);
	EXPECT_EQ(h.query_pages(prm::query_pages_op_mod::boot), 0);
	EXPECT_EQ(h.query_pages(prm::query_pages_op_mod::init), 5);
	EXPECT_STATUS(h.run(simple(prm::opcode::init_hca)), prm::status::no_resources,
		      Syndrome::pages_missing);
	ASSERT_EQ(h.give_pages(5, 3).status(), prm::status::ok);
	EXPECT_EQ(h.init_hca(), prm::status::ok);
	EXPECT_EQ(h.dev().hca_state(), HcaState::initialized);
	EXPECT_STATUS(h.run(simple(prm::opcode::init_hca)), prm::status::bad_sys_state,
		      Syndrome::hca_already_initialized);
}

TEST(EmuMlx5Hca, TeardownDropsResourcesAndAllowsDisable)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	h.bring_up();
	EXPECT_STATUS(h.run(simple(prm::opcode::disable_hca)), prm::status::bad_sys_state,
		      Syndrome::hca_already_initialized);
	h.alloc_pd();
	Cmd bad = simple(prm::opcode::teardown_hca);
	bad.set(prm::teardown_hca_in::profile, 2);
	EXPECT_STATUS(h.run(bad), prm::status::bad_param, Syndrome::teardown_profile);
	EXPECT_EQ(h.dev().pds_allocated(), 1u);

	Cmd td = simple(prm::opcode::teardown_hca);
	td.set(prm::teardown_hca_in::profile, prm::teardown_hca_in::profile_force_close);
	Reply r = h.run(td);
	EXPECT_EQ(r.status(), prm::status::ok);
	EXPECT_EQ(r.get(prm::teardown_hca_out::state), 0u);
	EXPECT_EQ(h.dev().hca_state(), HcaState::enabled);
	EXPECT_EQ(h.dev().pds_allocated(), 0u);
	EXPECT_STATUS(h.run(simple(prm::opcode::teardown_hca)), prm::status::bad_sys_state,
		      Syndrome::hca_not_initialized);
	EXPECT_STATUS(h.run(simple(prm::opcode::alloc_pd)), prm::status::bad_sys_state,
		      Syndrome::hca_not_initialized);

	EXPECT_EQ(h.run(simple(prm::opcode::disable_hca)).status(), prm::status::ok);
	EXPECT_EQ(h.dev().hca_state(), HcaState::reset);
	EXPECT_EQ(h.dev().pages_given(), 0u);
	EXPECT_STATUS(h.run(simple(prm::opcode::disable_hca)), prm::status::bad_sys_state,
		      Syndrome::hca_disabled);
	/* And up again from the start. */
	h.bring_up();
	EXPECT_TRUE(h.dev().check_invariants());
}

/* ---- ISSI ------------------------------------------------------------------------------ */

TEST(EmuMlx5Issi, QueryShowsSupportedAndCurrent)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	Cmd q(prm::opcode::query_issi, prm::query_issi_in::size, prm::query_issi_out::size);
	Reply r = h.run(q);
	ASSERT_EQ(r.status(), prm::status::ok);
	EXPECT_EQ(r.get(prm::query_issi_out::current_issi), 0u);
	EXPECT_EQ(r.get(prm::query_issi_out::supported_issi_dw0), 0x3u);
	Cmd s = simple(prm::opcode::set_issi);
	s.set(prm::set_issi_in::current_issi, 1);
	EXPECT_EQ(h.run(s).status(), prm::status::ok);
	EXPECT_EQ(h.run(q).get(prm::query_issi_out::current_issi), 1u);
	EXPECT_EQ(h.dev().issi(), 1u);
}

TEST(EmuMlx5Issi, UnsupportedOrLateSetIsRefused)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	Cmd s = simple(prm::opcode::set_issi);
	s.set(prm::set_issi_in::current_issi, 2);
	EXPECT_STATUS(h.run(s), prm::status::bad_param, Syndrome::issi_unsupported);
	EXPECT_EQ(h.dev().issi(), 0u);
	ASSERT_EQ(h.give_pages(24).status(), prm::status::ok);
	ASSERT_EQ(h.init_hca(), prm::status::ok);
	s.set(prm::set_issi_in::current_issi, 0);
	EXPECT_STATUS(h.run(s), prm::status::bad_sys_state, Syndrome::hca_already_initialized);
}

/* ---- Pages ----------------------------------------------------------------------------- */

class EmuMlx5Pages : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(h.rc(), 0);
		ASSERT_EQ(h.enable_hca(), prm::status::ok);
	}
	Cmd give(std::initializer_list<uint64_t> pas, size_t extra_count = 0)
	{
		Cmd c(prm::opcode::manage_pages, 16 + 8 * pas.size(), 16,
		      prm::manage_pages_op_mod::give);
		c.set(prm::manage_pages_in::input_num_entries, pas.size() + extra_count);
		size_t i = 0;
		for (uint64_t pa : pas)
			c.set_at(16 + 8 * i++, prm::pas_entry, pa);
		return c;
	}
	Harness h;
};

TEST_F(EmuMlx5Pages, QueryPagesCountsPerStage)
{
	EXPECT_EQ(h.query_pages(prm::query_pages_op_mod::boot), 8);
	EXPECT_EQ(h.query_pages(prm::query_pages_op_mod::init), 24);
	EXPECT_EQ(h.query_pages(prm::query_pages_op_mod::regular), 24);
	ASSERT_EQ(h.give_pages(10).status(), prm::status::ok);
	/* More than the boot stage needs: the device offers the surplus back (negative). */
	EXPECT_EQ(h.query_pages(prm::query_pages_op_mod::boot), -2);
	EXPECT_STATUS(h.run(simple(prm::opcode::query_pages, 4)), prm::status::bad_param,
		      Syndrome::bad_op_mod);
	EXPECT_STATUS(h.run(simple(prm::opcode::query_pages, 0)), prm::status::bad_param,
		      Syndrome::bad_op_mod);
	Cmd f = simple(prm::opcode::query_pages, prm::query_pages_op_mod::boot);
	f.set(prm::query_pages_in::function_id, 2);
	EXPECT_STATUS(h.run(f), prm::status::bad_param, Syndrome::bad_function_id);
}

TEST_F(EmuMlx5Pages, GiveValidatesEveryPageAndKeepsNoneOnError)
{
	const uint64_t p0 = kIova + kPagesOff, p1 = p0 + 4096, p2 = p0 + 8192;
	EXPECT_STATUS(h.run(give({p0, p1 + 8})), prm::status::bad_param, Syndrome::page_unaligned);
	EXPECT_STATUS(h.run(give({p0, p0})), prm::status::bad_param, Syndrome::page_duplicate);
	const uint64_t faults = h.dev().dma_faults();
	EXPECT_STATUS(h.run(give({p0, 0x7000000000ull})), prm::status::internal_err,
		      Syndrome::dma_fault);
	EXPECT_EQ(h.dev().dma_faults(), faults + 1);
	/* num_entries says 3, the input holds 2. */
	EXPECT_STATUS(h.run(give({p0, p1}, 1)), prm::status::bad_input_len,
		      Syndrome::input_too_short);
	EXPECT_EQ(h.dev().pages_given(), 0u);
	EXPECT_EQ(h.run(give({p0, p1})).status(), prm::status::ok);
	EXPECT_STATUS(h.run(give({p2, p1})), prm::status::bad_param, Syndrome::page_duplicate);
	EXPECT_EQ(h.dev().pages_given(), 2u);
	/* alloc_fail is accepted and accounts nothing. */
	EXPECT_EQ(h.run(simple(prm::opcode::manage_pages, 0)).status(), prm::status::ok);
	EXPECT_STATUS(h.run(simple(prm::opcode::manage_pages, 3)), prm::status::bad_param,
		      Syndrome::bad_op_mod);
	EXPECT_EQ(h.dev().pages_given(), 2u);
}

TEST(EmuMlx5PagesLimit, MorePagesThanTheDeviceTakesIsExceedLim)
{
	EmuConfig cfg;
	cfg.boot_pages = 1;
	cfg.init_pages = 1;
	cfg.regular_pages = 0;
	cfg.max_pages = 4;
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	ASSERT_EQ(h.give_pages(3).status(), prm::status::ok);
	EXPECT_STATUS(h.give_pages(2, 3), prm::status::exceed_lim, Syndrome::page_limit);
	EXPECT_EQ(h.give_pages(1, 3).status(), prm::status::ok);
	EXPECT_EQ(h.dev().pages_given(), 4u);
}

TEST_F(EmuMlx5Pages, TakeReturnsOnlyWhatTheDeviceCanSpare)
{
	ASSERT_EQ(h.give_pages(46).status(), prm::status::ok);
	ASSERT_EQ(h.init_hca(), prm::status::ok);
	/* Initialised, 40 pages needed (boot 8, init 16, regular 16): 6 spare; ask for 10 with
	 * room for 10. */
	Cmd take(prm::opcode::manage_pages, 16, 16 + 10 * 8, prm::manage_pages_op_mod::take);
	take.set(prm::manage_pages_in::input_num_entries, 10);
	Reply r = h.run(take);
	ASSERT_EQ(r.status(), prm::status::ok);
	ASSERT_EQ(r.get(prm::manage_pages_out::output_num_entries), 6u);
	for (size_t i = 0; i < 6; i++) {
		const uint64_t pa = r.get_at(16 + 8 * i, prm::pas_entry);
		EXPECT_GE(pa, kIova + kPagesOff);
		EXPECT_LT(pa, kIova + kPagesOff + 46 * 4096);
		EXPECT_EQ(pa % 4096, 0u);
	}
	EXPECT_EQ(h.dev().pages_given(), 40u);
	EXPECT_EQ(h.run(take).get(prm::manage_pages_out::output_num_entries), 0u);
	/* After teardown everything can go back, limited by the output room. */
	ASSERT_EQ(h.run(simple(prm::opcode::teardown_hca)).status(), prm::status::ok);
	Cmd small(prm::opcode::manage_pages, 16, 16 + 2 * 8, prm::manage_pages_op_mod::take);
	small.set(prm::manage_pages_in::input_num_entries, 40);
	EXPECT_EQ(h.run(small).get(prm::manage_pages_out::output_num_entries), 2u);
	EXPECT_EQ(h.dev().pages_given(), 38u);
}

/* ---- Capabilities ---------------------------------------------------------------------- */

class EmuMlx5Caps : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(h.rc(), 0);
		ASSERT_EQ(h.enable_hca(), prm::status::ok);
	}
	Reply query(uint16_t type, uint16_t mode)
	{
		return h.run(Cmd(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size,
				 prm::query_hca_cap_out::size, prm::cap_op_mod(type, mode)));
	}
	uint64_t cap(const Reply &r, prm::Field f)
	{
		return r.get_at(prm::query_hca_cap_out::capability_offset, f);
	}
	Cmd set_general(const Reply &cur)
	{
		Cmd c(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size, 16,
		      prm::cap_op_mod(prm::cap_type::general, 0));
		std::memcpy(c.in.data() + prm::set_hca_cap_in::capability_offset,
			    cur.out.data() + prm::query_hca_cap_out::capability_offset,
			    prm::set_hca_cap_in::capability_size);
		return c;
	}
	Harness h;
};

TEST_F(EmuMlx5Caps, GeneralCapsReportTheConfiguredLimits)
{
	Reply r = query(prm::cap_type::general, prm::cap_mode::max);
	ASSERT_EQ(r.status(), prm::status::ok);
	EXPECT_EQ(cap(r, prm::hca_cap::log_max_mkey), 16u);
	EXPECT_EQ(cap(r, prm::hca_cap::log_max_pd), 16u);
	EXPECT_EQ(cap(r, prm::hca_cap::num_ports), 2u);
	EXPECT_EQ(cap(r, prm::hca_cap::mkey_by_name), 0u) << "off, as on a stock ConnectX";
	EXPECT_EQ(cap(r, prm::hca_cap::atomic), 1u);
	EXPECT_EQ(cap(r, prm::hca_cap::umr_extended_translation_offset), 1u);
	EXPECT_EQ(cap(r, prm::hca_cap::log_max_klm_list_size), 18u);
	/* Checksums on at power-on (EmuConfig::cmdif_checksum); 4 KiB UAR pages only. */
	EXPECT_EQ(cap(r, prm::hca_cap::cmdif_checksum), 1u);
	EXPECT_EQ(cap(r, prm::hca_cap_setup::log_uar_page_sz), 0u);
	Reply cur = query(prm::cap_type::general, prm::cap_mode::current);
	EXPECT_EQ(cur.out, r.out) << "current starts equal to max";

	Reply a = query(prm::cap_type::atomic, prm::cap_mode::max);
	ASSERT_EQ(a.status(), prm::status::ok);
	EXPECT_EQ(cap(a, prm::atomic_cap::atomic_operations),
		  prm::atomic_ops::cmp_swap | prm::atomic_ops::fetch_add);
	EXPECT_EQ(cap(a, prm::atomic_cap::atomic_size_qp), 8u);
}

TEST(EmuMlx5CapsConfig, LimitsFollowTheConfig)
{
	EmuConfig cfg;
	cfg.log_max_mkey = 20;
	cfg.ports = 1;
	cfg.mkey_by_name = true;
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	Reply r = h.run(Cmd(prm::opcode::query_hca_cap, 16, prm::query_hca_cap_out::size,
			    prm::cap_op_mod(prm::cap_type::general, prm::cap_mode::max)));
	const size_t at = prm::query_hca_cap_out::capability_offset;
	EXPECT_EQ(r.get_at(at, prm::hca_cap::log_max_mkey), 20u);
	EXPECT_EQ(r.get_at(at, prm::hca_cap::num_ports), 1u);
	EXPECT_EQ(r.get_at(at, prm::hca_cap::mkey_by_name), 1u) << "the spec option's";
}

/* The UMR mkey_mask restrictions: off by default (a ConnectX PF), on by config. */
TEST(EmuMlx5CapsConfig, UmrModifyDisabledBitsFollowTheConfig)
{
	for (bool on : {false, true}) {
		EmuConfig cfg;
		cfg.umr_modify_entity_size_disabled = on;
		cfg.umr_modify_atomic_disabled = on;
		Harness h(cfg);
		ASSERT_EQ(h.rc(), 0);
		ASSERT_EQ(h.enable_hca(), prm::status::ok);
		for (uint16_t mode : {prm::cap_mode::max, prm::cap_mode::current}) {
			Reply r = h.run(Cmd(prm::opcode::query_hca_cap, 16,
					    prm::query_hca_cap_out::size,
					    prm::cap_op_mod(prm::cap_type::general, mode)));
			const size_t at = prm::query_hca_cap_out::capability_offset;
			EXPECT_EQ(r.get_at(at, prm::hca_cap::umr_modify_entity_size_disabled),
				  on ? 1u : 0u);
			EXPECT_EQ(r.get_at(at, prm::hca_cap::umr_modify_atomic_disabled),
				  on ? 1u : 0u);
		}
	}
}

/* QUERY_SPECIAL_CONTEXTS: the configured reserved lkey (by default not 0x100, rdma-core's
 * MLX5_INVALID_LKEY), the special mkeys the model does not offer 0; after ENABLE_HCA only. */
TEST(EmuMlx5SpecialContexts, ReportTheReservedLkey)
{
	for (uint32_t lkey : {kDefaultResdLkey, 0x1234u}) {
		EmuConfig cfg;
		cfg.resd_lkey = lkey;
		Harness h(cfg);
		ASSERT_EQ(h.rc(), 0);
		Cmd q(prm::opcode::query_special_contexts, prm::query_special_contexts_in::size,
		      prm::query_special_contexts_out::size);
		EXPECT_STATUS(h.run(q), prm::status::bad_sys_state, Syndrome::hca_disabled);
		ASSERT_EQ(h.enable_hca(), prm::status::ok);
		Reply r = h.run(q);
		ASSERT_EQ(r.status(), prm::status::ok);
		namespace o = prm::query_special_contexts_out;
		EXPECT_EQ(r.get(o::resd_lkey), lkey);
		EXPECT_EQ(r.get(o::dump_fill_mkey), 0u);
		EXPECT_EQ(r.get(o::null_mkey), 0u);
		EXPECT_EQ(r.get(o::terminate_scatter_list_mkey), 0u);
		EXPECT_EQ(r.get(o::repeated_mkey), 0u);
		EXPECT_STATUS(h.run(Cmd(prm::opcode::query_special_contexts,
					prm::query_special_contexts_in::size, 8)),
			      prm::status::bad_output_len, Syndrome::output_too_short);
	}
	EXPECT_NE(kDefaultResdLkey, 0x100u);
	EXPECT_EQ(prm::mkey::index(kDefaultResdLkey), 0u) << "no mkey the model hands out";
}

/* QUERY_ROCE_ADDRESS: entry 0 of a port on the UDP wire is its address as a RoCEv2 GID, every
 * other entry and every loopback port's reads as zeroes; a port or index the device has not is
 * BAD_PARAM; before INIT_HCA BAD_SYS_STATE. */
TEST(EmuMlx5RoceAddress, GidTableOfAWirePort)
{
	EmuConfig cfg;
	cfg.wire[0] = {"127.0.0.1", static_cast<uint16_t>(30000 + getpid() % 20000), 4791};
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	const auto query = [&](uint32_t port, uint32_t index) {
		Cmd q(prm::opcode::query_roce_address, prm::query_roce_address_in::size,
		      prm::query_roce_address_out::size);
		q.set(prm::query_roce_address_in::vhca_port_num, port);
		q.set(prm::query_roce_address_in::roce_address_index, index);
		return h.run(q);
	};
	EXPECT_STATUS(query(1, 0), prm::status::bad_sys_state, Syndrome::hca_not_initialized);
	h.bring_up();
	namespace l = prm::roce_addr_layout;
	const size_t at = prm::query_roce_address_out::roce_address_offset;
	Reply r = query(1, 0);
	ASSERT_EQ(r.status(), prm::status::ok);
	const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
	EXPECT_EQ(std::memcmp(r.out.data() + at + l::source_l3_address_offset, want, 16), 0);
	EXPECT_EQ(r.get_at(at, l::roce_l3_type), l::l3_type_ipv4);
	EXPECT_EQ(r.get_at(at, l::roce_version), l::version_2);
	for (auto [port, index] : {std::pair{1u, 1u}, std::pair{2u, 0u}}) {
		r = query(port, index);
		ASSERT_EQ(r.status(), prm::status::ok);
		EXPECT_TRUE(std::all_of(r.out.begin() + at, r.out.begin() + at + l::size,
					[](uint8_t b) { return b == 0; }))
			<< "port " << port << " index " << index;
	}
	EXPECT_STATUS(query(0, 0), prm::status::bad_param, Syndrome::roce_address_port);
	EXPECT_STATUS(query(3, 0), prm::status::bad_param, Syndrome::roce_address_port);
	EXPECT_STATUS(query(1, cfg.roce_address_table_size), prm::status::bad_param,
		      Syndrome::roce_address_index);
	EXPECT_STATUS(
		h.run(Cmd(prm::opcode::query_roce_address, prm::query_roce_address_in::size, 16)),
		prm::status::bad_output_len, Syndrome::output_too_short);
}

TEST_F(EmuMlx5Caps, UnknownTypesAndTheExtensionTypeAreBadParam)
{
	EXPECT_STATUS(query(0x7, prm::cap_mode::max), prm::status::bad_param,
		      Syndrome::cap_type_unsupported);
	/* The extension type answers one flags word (EmuConfig::ext_flags; see below for a
	 * model without extensions). */
	Reply ext = query(prm::cap_type::nicmr_ext, prm::cap_mode::current);
	ASSERT_EQ(ext.status(), prm::status::ok);
	EXPECT_EQ(cap(ext, prm::ext_cap::flags),
		  prm::ext_cap::single_use | prm::ext_cap::rma_event);
	Cmd other(prm::opcode::query_hca_cap, 16, prm::query_hca_cap_out::size, 0);
	other.set(prm::query_hca_cap_in::other_function, 1);
	EXPECT_STATUS(h.run(other), prm::status::bad_param, Syndrome::bad_function_id);
}

TEST_F(EmuMlx5Caps, SetTakesSettableFieldsWithinTheMaximum)
{
	Reply cur = query(prm::cap_type::general, prm::cap_mode::current);
	/* A stock device: mkey_by_name is not in the maximum, so it cannot be turned on. */
	Cmd on = set_general(cur);
	on.set_at(prm::set_hca_cap_in::capability_offset, prm::hca_cap::mkey_by_name, 1);
	EXPECT_STATUS(h.run(on), prm::status::bad_param, Syndrome::cap_exceeds_max);
	Cmd same = set_general(cur);
	/* Not settable: ignored, like firmware. */
	same.set_at(prm::set_hca_cap_in::capability_offset, prm::hca_cap::log_max_mkey, 3);
	EXPECT_EQ(h.run(same).status(), prm::status::ok);
	Reply now = query(prm::cap_type::general, prm::cap_mode::current);
	EXPECT_EQ(cap(now, prm::hca_cap::mkey_by_name), 0u);
	EXPECT_EQ(cap(now, prm::hca_cap::log_max_mkey), 16u);

	/* Offered (EmuConfig::mkey_by_name), it may be turned off and the maximum stays. */
	EmuConfig cfg;
	cfg.mkey_by_name = true;
	Harness h2(cfg);
	ASSERT_EQ(h2.rc(), 0);
	ASSERT_EQ(h2.enable_hca(), prm::status::ok);
	auto query2 = [&](uint16_t mode) {
		return h2.run(Cmd(prm::opcode::query_hca_cap, 16, prm::query_hca_cap_out::size,
				  prm::cap_op_mod(prm::cap_type::general, mode)));
	};
	Reply cur2 = query2(prm::cap_mode::current);
	EXPECT_EQ(cap(cur2, prm::hca_cap::mkey_by_name), 1u);
	Cmd off(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size, 16,
		prm::cap_op_mod(prm::cap_type::general, 0));
	std::memcpy(off.in.data() + prm::set_hca_cap_in::capability_offset,
		    cur2.out.data() + prm::query_hca_cap_out::capability_offset,
		    prm::set_hca_cap_in::capability_size);
	off.set_at(prm::set_hca_cap_in::capability_offset, prm::hca_cap::mkey_by_name, 0);
	EXPECT_EQ(h2.run(off).status(), prm::status::ok);
	EXPECT_EQ(cap(query2(prm::cap_mode::current), prm::hca_cap::mkey_by_name), 0u);
	EXPECT_EQ(cap(query2(prm::cap_mode::max), prm::hca_cap::mkey_by_name), 1u);

	Cmd cks = set_general(cur);
	cks.set_at(prm::set_hca_cap_in::capability_offset, prm::hca_cap::cmdif_checksum, 2);
	EXPECT_STATUS(h.run(cks), prm::status::bad_param, Syndrome::cap_exceeds_max);
	Cmd uar = set_general(cur);
	uar.set_at(prm::set_hca_cap_in::capability_offset, prm::hca_cap_setup::log_uar_page_sz, 1);
	EXPECT_STATUS(h.run(uar), prm::status::bad_param, Syndrome::cap_exceeds_max);

	Cmd atomic(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size, 16,
		   prm::cap_op_mod(prm::cap_type::atomic, 0));
	atomic.set_at(16, prm::atomic_cap::atomic_req_8B_endianness_mode, 1);
	EXPECT_EQ(h.run(atomic).status(), prm::status::ok);
	EXPECT_EQ(cap(query(prm::cap_type::atomic, prm::cap_mode::current),
		      prm::atomic_cap::atomic_req_8B_endianness_mode),
		  1u);
	atomic.set_at(16, prm::atomic_cap::atomic_req_8B_endianness_mode, 2);
	EXPECT_STATUS(h.run(atomic), prm::status::bad_param, Syndrome::cap_exceeds_max);

	Cmd ext(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size, 16,
		prm::cap_op_mod(prm::cap_type::nicmr_ext, 0));
	EXPECT_STATUS(h.run(ext), prm::status::bad_param, Syndrome::cap_type_unsupported);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::set_hca_cap, 16 + 256, 16)),
		      prm::status::bad_input_len, Syndrome::input_too_short);

	ASSERT_EQ(h.give_pages(24).status(), prm::status::ok);
	ASSERT_EQ(h.init_hca(), prm::status::ok);
	EXPECT_STATUS(h.run(set_general(cur)), prm::status::bad_sys_state,
		      Syndrome::hca_already_initialized);
}

Cmd set_atomic_mode(uint64_t mode)
{
	return Harness::set_atomic_mode(mode);
}

TEST_F(EmuMlx5Caps, AtomicCapsOfferHostEndiannessAndStartBigEndian)
{
	namespace ac = prm::atomic_cap;
	for (uint16_t mode : {prm::cap_mode::max, prm::cap_mode::current}) {
		Reply a = query(prm::cap_type::atomic, mode);
		ASSERT_EQ(a.status(), prm::status::ok);
		EXPECT_EQ(cap(a, ac::supported_atomic_req_8B_endianness_mode_1), 1u);
		EXPECT_EQ(cap(a, ac::atomic_req_8B_endianness_mode),
			  prm::atomic_req_mode::big_endian);
	}
	EXPECT_FALSE(h.dev().data_path().atomic_host_endianness());

	EXPECT_EQ(h.run(set_atomic_mode(prm::atomic_req_mode::host_endianness)).status(),
		  prm::status::ok);
	EXPECT_EQ(cap(query(prm::cap_type::atomic, prm::cap_mode::current),
		      ac::atomic_req_8B_endianness_mode),
		  prm::atomic_req_mode::host_endianness);
	EXPECT_TRUE(h.dev().data_path().atomic_host_endianness());
	/* The maximum stays what the device can do. */
	Reply max = query(prm::cap_type::atomic, prm::cap_mode::max);
	EXPECT_EQ(cap(max, ac::atomic_req_8B_endianness_mode), prm::atomic_req_mode::big_endian);
	EXPECT_EQ(cap(max, ac::supported_atomic_req_8B_endianness_mode_1), 1u);

	/* Modes 2 and 3 do not exist: refused, the mode in force stays. */
	for (uint64_t bad : {2u, 3u})
		EXPECT_STATUS(h.run(set_atomic_mode(bad)), prm::status::bad_param,
			      Syndrome::cap_exceeds_max);
	EXPECT_TRUE(h.dev().data_path().atomic_host_endianness());

	/* Back to big-endian is allowed before INIT_HCA, and nothing after it. */
	EXPECT_EQ(h.run(set_atomic_mode(prm::atomic_req_mode::big_endian)).status(),
		  prm::status::ok);
	EXPECT_FALSE(h.dev().data_path().atomic_host_endianness());
	ASSERT_EQ(h.give_pages(24).status(), prm::status::ok);
	ASSERT_EQ(h.init_hca(), prm::status::ok);
	EXPECT_STATUS(h.run(set_atomic_mode(prm::atomic_req_mode::host_endianness)),
		      prm::status::bad_sys_state, Syndrome::hca_already_initialized);
	EXPECT_FALSE(h.dev().data_path().atomic_host_endianness());
}

TEST(EmuMlx5CapsConfig, ADeviceWithoutHostEndiannessRefusesIt)
{
	namespace ac = prm::atomic_cap;
	EmuConfig cfg;
	cfg.atomic_host_endianness = false;
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	for (uint16_t mode : {prm::cap_mode::max, prm::cap_mode::current}) {
		Reply a = h.run(Cmd(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size,
				    prm::query_hca_cap_out::size,
				    prm::cap_op_mod(prm::cap_type::atomic, mode)));
		ASSERT_EQ(a.status(), prm::status::ok);
		const size_t at = prm::query_hca_cap_out::capability_offset;
		EXPECT_EQ(a.get_at(at, ac::supported_atomic_req_8B_endianness_mode_1), 0u);
		EXPECT_EQ(a.get_at(at, ac::atomic_req_8B_endianness_mode),
			  prm::atomic_req_mode::big_endian);
		EXPECT_EQ(a.get_at(at, ac::atomic_operations),
			  prm::atomic_ops::cmp_swap | prm::atomic_ops::fetch_add);
	}
	EXPECT_STATUS(h.run(set_atomic_mode(prm::atomic_req_mode::host_endianness)),
		      prm::status::bad_param, Syndrome::cap_exceeds_max);
	EXPECT_FALSE(h.dev().data_path().atomic_host_endianness());
	/* Big-endian, the mode it has, is accepted. */
	EXPECT_EQ(h.run(set_atomic_mode(prm::atomic_req_mode::big_endian)).status(),
		  prm::status::ok);
}

/* ---- Protection domains ---------------------------------------------------------------- */

TEST(EmuMlx5Pd, AllocHandsOutDistinctNumbersUntilTheTableIsFull)
{
	EmuConfig cfg;
	cfg.log_max_pd = 2; /* PDs 1..3 */
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	h.bring_up();
	std::set<uint32_t> pds;
	for (int i = 0; i < 3; i++)
		pds.insert(h.alloc_pd());
	EXPECT_EQ(pds, (std::set<uint32_t>{1, 2, 3}));
	EXPECT_STATUS(h.run(simple(prm::opcode::alloc_pd)), prm::status::exceed_lim,
		      Syndrome::pd_table_full);
	Cmd d = simple(prm::opcode::dealloc_pd);
	d.set(prm::dealloc_pd_in::pd, 2);
	EXPECT_EQ(h.run(d).status(), prm::status::ok);
	EXPECT_EQ(h.alloc_pd(), 2u);
}

TEST(EmuMlx5Pd, DeallocChecksNumberStateAndUse)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	h.bring_up();
	const uint32_t pd = h.alloc_pd();
	Cmd d = simple(prm::opcode::dealloc_pd);
	d.set(prm::dealloc_pd_in::pd, 0);
	EXPECT_STATUS(h.run(d), prm::status::bad_index, Syndrome::pd_out_of_range);
	d.set(prm::dealloc_pd_in::pd, 1u << 16);
	EXPECT_STATUS(h.run(d), prm::status::bad_index, Syndrome::pd_out_of_range);
	d.set(prm::dealloc_pd_in::pd, pd + 1);
	EXPECT_STATUS(h.run(d), prm::status::bad_res_state, Syndrome::pd_not_allocated);
	d.set(prm::dealloc_pd_in::pd, pd);
	EXPECT_EQ(h.run(d).status(), prm::status::ok);
	EXPECT_STATUS(h.run(d), prm::status::bad_res_state, Syndrome::pd_not_allocated);
}

TEST(EmuMlx5Pd, ResourceCommandsWaitForRegularPages)
{
	EmuConfig cfg;
	cfg.regular_pages = 2;
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	h.bring_up(-1, false);
	EXPECT_EQ(h.query_pages(prm::query_pages_op_mod::regular), 2);
	EXPECT_STATUS(h.run(simple(prm::opcode::alloc_pd)), prm::status::no_resources,
		      Syndrome::pages_missing);
	ASSERT_EQ(h.give_pages(2, 100).status(), prm::status::ok);
	EXPECT_EQ(h.alloc_pd(), 1u);
}

/* ---- Memory keys ----------------------------------------------------------------------- */

class EmuMlx5Mkey : public ::testing::Test {
protected:
	explicit EmuMlx5Mkey(EmuConfig cfg = {}) : h(std::move(cfg)) {}
	void SetUp() override
	{
		ASSERT_EQ(h.rc(), 0);
		h.bring_up();
		pd = h.alloc_pd();
	}
	/* An MTT mkey over n 4 KiB pages at 0x200000 with all access rights. */
	Cmd mtt(uint32_t n_mtt, uint32_t actual_oct, uint64_t len, uint8_t variant = 0x42)
	{
		const size_t oct = prm::mtt_octwords(n_mtt);
		Cmd c(prm::opcode::create_mkey, prm::create_mkey_in::size + 16 * actual_oct, 16);
		const size_t m = prm::create_mkey_in::mkc_offset;
		prm::set_access_mode(c.in.data() + m, prm::access_mode::mtt);
		c.set_at(m, prm::mkc::lr, 1).set_at(m, prm::mkc::lw, 1).set_at(m, prm::mkc::rr, 1);
		c.set_at(m, prm::mkc::rw, 1).set_at(m, prm::mkc::a, 1);
		c.set_at(m, prm::mkc::qpn, prm::mkc::qpn_any);
		c.set_at(m, prm::mkc::mkey_7_0, variant);
		c.set_at(m, prm::mkc::pd, pd);
		c.set_at(m, prm::mkc::start_addr, 0x200000);
		c.set_at(m, prm::mkc::len, len);
		c.set_at(m, prm::mkc::log_page_size, 12);
		c.set_at(m, prm::mkc::translations_octword_size, oct);
		c.set(prm::create_mkey_in::translations_octword_actual_size, actual_oct);
		for (uint32_t i = 0; i < 2 * actual_oct; i++) {
			uint8_t *e = c.in.data() + prm::create_mkey_in::translations_offset + 8 * i;
			prm::set(e, prm::mtt::address, kIova + kPagesOff + 4096 * uint64_t{i});
			prm::set(e, prm::mtt::rd_en, 1);
			prm::set(e, prm::mtt::wr_en, 1);
		}
		return c;
	}
	uint32_t create(const Cmd &c)
	{
		Reply r = h.run(c);
		EXPECT_EQ(r.status(), prm::status::ok) << std::hex << r.syndrome();
		return static_cast<uint32_t>(r.get(prm::create_mkey_out::mkey_index));
	}
	Reply query(uint32_t index, size_t out_len = prm::query_mkey_out::size + 64)
	{
		Cmd q(prm::opcode::query_mkey, prm::query_mkey_in::size, out_len);
		q.set(prm::query_mkey_in::mkey_index, index);
		return h.run(q);
	}
	Reply destroy(uint32_t index)
	{
		Cmd d(prm::opcode::destroy_mkey, prm::destroy_mkey_in::size, 16);
		d.set(prm::destroy_mkey_in::mkey_index, index);
		return h.run(d);
	}
	Harness h;
	uint32_t pd = 0;
};

TEST_F(EmuMlx5Mkey, CreateMttMkeyAndQueryItBack)
{
	Cmd c = mtt(4, 2, 4 * 4096);
	const uint32_t idx = create(c);
	EXPECT_NE(idx, 0u);
	EXPECT_EQ(h.dev().mkeys().live(), 1u);
	Reply q = query(idx);
	ASSERT_EQ(q.status(), prm::status::ok);
	/* The mkc comes back as created, variant included. */
	EXPECT_EQ(std::memcmp(q.out.data() + prm::query_mkey_out::mkc_offset,
			      c.in.data() + prm::create_mkey_in::mkc_offset, prm::mkc::size),
		  0);
	EXPECT_EQ(q.get_at(prm::query_mkey_out::mkc_offset, prm::mkc::mkey_7_0), 0x42u);
	/* Room for 64 bytes of translations: all four MTT entries. */
	EXPECT_EQ(std::memcmp(q.out.data() + prm::query_mkey_out::translations_offset,
			      c.in.data() + prm::create_mkey_in::translations_offset, 32),
		  0);
	EXPECT_EQ(q.get_at(prm::query_mkey_out::translations_offset + 8, prm::mtt::address) &
			  ~uint64_t{3},
		  kIova + kPagesOff + 4096);
	EXPECT_TRUE(h.dev().check_invariants());
}

TEST_F(EmuMlx5Mkey, FreeUmrMkeysNeedNoTranslations)
{
	Cmd c = mtt(512, 0, 0);
	c.set_at(prm::create_mkey_in::mkc_offset, prm::mkc::free, 1);
	c.set_at(prm::create_mkey_in::mkc_offset, prm::mkc::umr_en, 1);
	const uint32_t a = create(c);
	const uint32_t b = create(c);
	EXPECT_NE(a, b);
	Reply q = query(a, prm::query_mkey_out::size);
	EXPECT_EQ(q.get_at(prm::query_mkey_out::mkc_offset, prm::mkc::free), 1u);
	EXPECT_EQ(q.get_at(prm::query_mkey_out::mkc_offset, prm::mkc::umr_en), 1u);
}

TEST_F(EmuMlx5Mkey, CreateKlmMkey)
{
	const uint32_t target = create(mtt(2, 1, 8192));
	Cmd c(prm::opcode::create_mkey, prm::create_mkey_in::size + 2 * prm::klm::size, 16);
	const size_t m = prm::create_mkey_in::mkc_offset;
	prm::set_access_mode(c.in.data() + m, prm::access_mode::klm);
	c.set_at(m, prm::mkc::pd, pd).set_at(m, prm::mkc::len, 8192).set_at(m, prm::mkc::lr, 1);
	c.set_at(m, prm::mkc::translations_octword_size, prm::klm_octwords(2));
	c.set(prm::create_mkey_in::translations_octword_actual_size, 2);
	for (size_t i = 0; i < 2; i++) {
		const size_t at = prm::create_mkey_in::translations_offset + i * prm::klm::size;
		c.set_at(at, prm::klm::byte_count, 4096);
		c.set_at(at, prm::klm::mkey, target << 8 | 0x42);
		c.set_at(at, prm::klm::address, 0x200000 + 4096 * i);
	}
	const uint32_t idx = create(c);
	Reply q = query(idx);
	ASSERT_EQ(q.status(), prm::status::ok);
	EXPECT_EQ(prm::get_access_mode(q.out.data() + prm::query_mkey_out::mkc_offset),
		  prm::access_mode::klm);
	EXPECT_EQ(q.get_at(prm::query_mkey_out::translations_offset + 16, prm::klm::address),
		  0x201000u);
	EXPECT_TRUE(h.dev().check_invariants());
}

TEST_F(EmuMlx5Mkey, CreateRejectsBadParameters)
{
	const size_t m = prm::create_mkey_in::mkc_offset;
	Cmd pa = mtt(2, 1, 8192);
	prm::set_access_mode(pa.in.data() + m, prm::access_mode::pa);
	EXPECT_STATUS(h.run(pa), prm::status::bad_param, Syndrome::mkey_access_mode);
	Cmd ksm = mtt(2, 1, 8192);
	prm::set_access_mode(ksm.in.data() + m, prm::access_mode::ksm);
	EXPECT_STATUS(h.run(ksm), prm::status::bad_param, Syndrome::mkey_access_mode);
	Cmd lps = mtt(2, 1, 8192);
	lps.set_at(m, prm::mkc::log_page_size, 11);
	EXPECT_STATUS(h.run(lps), prm::status::bad_param, Syndrome::mkey_page_size);
	lps.set_at(m, prm::mkc::log_page_size, 31);
	EXPECT_STATUS(h.run(lps), prm::status::bad_param, Syndrome::mkey_page_size);
	Cmd over = mtt(2, 1, 8192);
	over.set_at(m, prm::mkc::translations_octword_size, 0);
	EXPECT_STATUS(h.run(over), prm::status::bad_param, Syndrome::mkey_translations);
	Cmd big = mtt(2, 1, 8192);
	big.set_at(m, prm::mkc::translations_octword_size, 0xffffffff);
	EXPECT_STATUS(h.run(big), prm::status::exceed_lim, Syndrome::mkey_translations_limit);
	Cmd range = mtt(2, 1, 8192 + 1);
	EXPECT_STATUS(h.run(range), prm::status::bad_param, Syndrome::mkey_range);
	Cmd umem = mtt(2, 1, 8192);
	umem.set(prm::create_mkey_in::mkey_umem_valid, 1);
	EXPECT_STATUS(h.run(umem), prm::status::bad_param, Syndrome::mkey_umem);
	Cmd nopd = mtt(2, 1, 8192);
	nopd.set_at(m, prm::mkc::pd, pd + 7);
	EXPECT_STATUS(h.run(nopd), prm::status::bad_res_state, Syndrome::pd_not_allocated);
	/* actual says 2 octwords, the input holds 1. */
	Cmd shortin = mtt(4, 1, 4096);
	shortin.set(prm::create_mkey_in::translations_octword_actual_size, 2);
	EXPECT_STATUS(h.run(shortin), prm::status::bad_input_len, Syndrome::input_too_short);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::create_mkey, 200, 16)), prm::status::bad_input_len,
		      Syndrome::input_too_short);
	EXPECT_EQ(h.dev().mkeys().live(), 0u);
	EXPECT_TRUE(h.dev().check_invariants());
}

/* A stock device (the default) refuses a chosen index: BAD_PARAM. */
TEST_F(EmuMlx5Mkey, ChosenIndexWithoutMkeyByNameIsBadParam)
{
	Cmd c = mtt(2, 1, 8192);
	c.set(prm::create_mkey_in::input_mkey_index, 5);
	EXPECT_STATUS(h.run(c), prm::status::bad_param, Syndrome::mkey_by_name_disabled);
	EXPECT_EQ(h.dev().mkeys().live(), 0u);
	c.set(prm::create_mkey_in::input_mkey_index, 0);
	EXPECT_NE(create(c), 0u) << "the device's choice is fine";
}

class EmuMlx5MkeyByName : public EmuMlx5Mkey {
protected:
	static EmuConfig by_name()
	{
		EmuConfig c;
		c.mkey_by_name = true;
		return c;
	}
	EmuMlx5MkeyByName() : EmuMlx5Mkey(by_name()) {}
};

TEST_F(EmuMlx5MkeyByName, CreateAtAChosenIndex)
{
	Cmd c = mtt(2, 1, 8192);
	c.set(prm::create_mkey_in::input_mkey_index, 0x1234);
	EXPECT_EQ(create(c), 0x1234u);
	EXPECT_STATUS(h.run(c), prm::status::bad_res_state, Syndrome::mkey_index_in_use);
	c.set(prm::create_mkey_in::input_mkey_index, 1u << 16);
	EXPECT_STATUS(h.run(c), prm::status::bad_index, Syndrome::mkey_index_out_of_range);
}

class EmuMlx5SmallMkeyTable : public EmuMlx5Mkey {
protected:
	static EmuConfig small()
	{
		EmuConfig c;
		c.log_max_mkey = 2; /* indices 1..3 */
		c.translation_budget = 4096;
		return c;
	}
	EmuMlx5SmallMkeyTable() : EmuMlx5Mkey(small()) {}
};

TEST_F(EmuMlx5SmallMkeyTable, FullTableIsExceedLimAndDestroyFreesAnIndex)
{
	std::set<uint32_t> got;
	for (int i = 0; i < 3; i++)
		got.insert(create(mtt(2, 1, 8192)));
	EXPECT_EQ(got, (std::set<uint32_t>{1, 2, 3}));
	EXPECT_STATUS(h.run(mtt(2, 1, 8192)), prm::status::exceed_lim, Syndrome::mkey_table_full);
	ASSERT_EQ(destroy(2).status(), prm::status::ok);
	EXPECT_EQ(create(mtt(2, 1, 8192)), 2u);
}

TEST_F(EmuMlx5SmallMkeyTable, TranslationBudgetIsExceedLim)
{
	/* 4096 bytes of budget: 256 octwords. */
	Cmd c = mtt(512, 0, 0);
	c.set_at(prm::create_mkey_in::mkc_offset, prm::mkc::free, 1);
	const uint32_t a = create(c);
	EXPECT_STATUS(h.run(mtt(2, 1, 8192)), prm::status::exceed_lim, Syndrome::mkey_budget);
	ASSERT_EQ(destroy(a).status(), prm::status::ok);
	EXPECT_NE(create(mtt(2, 1, 8192)), 0u);
	EXPECT_TRUE(h.dev().check_invariants());
}

TEST_F(EmuMlx5Mkey, DestroyAndQueryCheckTheIndex)
{
	const uint32_t idx = create(mtt(2, 1, 8192));
	EXPECT_STATUS(destroy(0), prm::status::bad_index, Syndrome::mkey_index_out_of_range);
	EXPECT_STATUS(destroy(1u << 16), prm::status::bad_index, Syndrome::mkey_index_out_of_range);
	EXPECT_STATUS(destroy(idx + 1), prm::status::bad_res_state, Syndrome::mkey_not_found);
	EXPECT_STATUS(query(0), prm::status::bad_index, Syndrome::mkey_index_out_of_range);
	EXPECT_STATUS(query(idx, prm::query_mkey_out::size - 1), prm::status::bad_output_len,
		      Syndrome::output_too_short);
	EXPECT_EQ(destroy(idx).status(), prm::status::ok);
	EXPECT_STATUS(destroy(idx), prm::status::bad_res_state, Syndrome::mkey_not_found);
	EXPECT_STATUS(query(idx), prm::status::bad_res_state, Syndrome::mkey_not_found);
	EXPECT_EQ(h.dev().mkeys().live(), 0u);
}

TEST_F(EmuMlx5Mkey, PdWithMkeysIsBusyUntilTheyAreDestroyed)
{
	const uint32_t idx = create(mtt(2, 1, 8192));
	Cmd d = simple(prm::opcode::dealloc_pd);
	d.set(prm::dealloc_pd_in::pd, pd);
	EXPECT_STATUS(h.run(d), prm::status::resource_busy, Syndrome::pd_in_use);
	ASSERT_EQ(destroy(idx).status(), prm::status::ok);
	EXPECT_EQ(h.run(d).status(), prm::status::ok);
	EXPECT_TRUE(h.dev().check_invariants());
}

TEST_F(EmuMlx5Mkey, TableIsReadableThroughItsInternalApi)
{
	const uint32_t idx = create(mtt(2, 1, 8192, 0x07));
	uint64_t variant = 0;
	EXPECT_EQ(h.dev().mkeys().with(idx,
				       [&](const MkeyEntry &e) {
					       variant = prm::get(e.mkc.data(), prm::mkc::mkey_7_0);
					       EXPECT_EQ(e.access_mode, prm::access_mode::mtt);
					       EXPECT_EQ(e.translations.size(), 16u);
				       }),
		  0);
	EXPECT_EQ(variant, 0x07u);
	EXPECT_EQ(h.dev().mkeys().with(idx + 1, [](const MkeyEntry &) {}), -ENOENT);
	EXPECT_EQ(h.dev().mkeys().with(0, [](const MkeyEntry &) {}), -ERANGE);
}

/* ---- nicmr extensions (never on a ConnectX) -------------------------------------------- */

Cmd set_ext(uint32_t index, uint32_t flags, uint64_t counter)
{
	Cmd c(prm::opcode::nicmr_set_mkey_ext, prm::set_mkey_ext_in::size,
	      prm::set_mkey_ext_out::size);
	c.set(prm::set_mkey_ext_in::mkey_index, index);
	c.set(prm::set_mkey_ext_in::flags, flags);
	c.set(prm::set_mkey_ext_in::counter_iova, counter);
	return c;
}

Cmd query_ext(uint32_t index)
{
	Cmd c(prm::opcode::nicmr_query_mkey_ext, prm::query_mkey_ext_in::size,
	      prm::query_mkey_ext_out::size);
	c.set(prm::query_mkey_ext_in::mkey_index, index);
	return c;
}

TEST_F(EmuMlx5Mkey, ExtensionStateIsSetQueriedAndCheckedWithItsSyndromes)
{
	const uint32_t idx = create(mtt(4, 2, 4 * 4096));
	const uint64_t counter = kIova + kPagesOff + 4096;
	const uint32_t both = prm::mkey_ext::single_use | prm::mkey_ext::counter;
	ASSERT_EQ(h.run(set_ext(idx, both, counter)).status(), prm::status::ok);
	Reply q = h.run(query_ext(idx));
	ASSERT_EQ(q.status(), prm::status::ok);
	EXPECT_EQ(q.get(prm::query_mkey_ext_out::flags), both);
	EXPECT_EQ(q.get(prm::query_mkey_ext_out::counter_iova), counter);
	/* Without the counter flag the IOVA is not kept. */
	ASSERT_EQ(h.run(set_ext(idx, prm::mkey_ext::disabled, counter)).status(), prm::status::ok);
	q = h.run(query_ext(idx));
	EXPECT_EQ(q.get(prm::query_mkey_ext_out::flags), prm::mkey_ext::disabled);
	EXPECT_EQ(q.get(prm::query_mkey_ext_out::counter_iova), 0u);

	EXPECT_STATUS(h.run(set_ext(idx, prm::mkey_ext::spent, 0)), prm::status::bad_param,
		      Syndrome::ext_flags);
	EXPECT_STATUS(h.run(set_ext(idx, prm::mkey_ext::counter, counter + 4)),
		      prm::status::bad_param, Syndrome::ext_counter);
	EXPECT_STATUS(h.run(set_ext(idx, prm::mkey_ext::counter, 0x7000000000ull)),
		      prm::status::bad_param, Syndrome::ext_counter);
	EXPECT_STATUS(h.run(set_ext(0, 0, 0)), prm::status::bad_index,
		      Syndrome::mkey_index_out_of_range);
	EXPECT_STATUS(h.run(set_ext(idx + 7, 0, 0)), prm::status::bad_res_state,
		      Syndrome::mkey_not_found);
	EXPECT_STATUS(h.run(query_ext(idx + 7)), prm::status::bad_res_state,
		      Syndrome::mkey_not_found);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::nicmr_set_mkey_ext, 16, 16)),
		      prm::status::bad_input_len, Syndrome::input_too_short);
	/* A failed command changed nothing. */
	q = h.run(query_ext(idx));
	EXPECT_EQ(q.get(prm::query_mkey_ext_out::flags), prm::mkey_ext::disabled);

	Cmd f = mtt(512, 0, 0);
	f.set_at(prm::create_mkey_in::mkc_offset, prm::mkc::free, 1);
	f.set_at(prm::create_mkey_in::mkc_offset, prm::mkc::umr_en, 1);
	const uint32_t free_idx = create(f);
	EXPECT_STATUS(h.run(set_ext(free_idx, prm::mkey_ext::single_use, 0)),
		      prm::status::bad_res_state, Syndrome::ext_mkey_free);

	/* A new mkey starts without extensions. */
	ASSERT_EQ(destroy(idx).status(), prm::status::ok);
	const uint32_t again = create(mtt(4, 2, 4 * 4096));
	EXPECT_EQ(h.run(query_ext(again)).get(prm::query_mkey_ext_out::flags), 0u);
	EXPECT_TRUE(h.dev().check_invariants());
}

class EmuMlx5NoExt : public EmuMlx5Mkey {
protected:
	static EmuConfig plain()
	{
		EmuConfig c;
		c.ext_flags = 0;
		return c;
	}
	EmuMlx5NoExt() : EmuMlx5Mkey(plain()) {}
};

TEST_F(EmuMlx5NoExt, WithoutExtensionsTheModelAnswersAsAConnectX)
{
	const uint32_t idx = create(mtt(4, 2, 4 * 4096));
	EXPECT_STATUS(h.run(set_ext(idx, 0, 0)), prm::status::bad_op, Syndrome::bad_opcode);
	EXPECT_STATUS(h.run(query_ext(idx)), prm::status::bad_op, Syndrome::bad_opcode);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size,
				prm::query_hca_cap_out::size,
				prm::cap_op_mod(prm::cap_type::nicmr_ext, prm::cap_mode::current))),
		      prm::status::bad_param, Syndrome::cap_type_unsupported);
}

TEST(EmuMlx5ExtConfig, UnknownExtensionBitsAreRefused)
{
	EmuConfig cfg;
	cfg.ext_flags = uint64_t{1} << 9;
	Harness h(cfg);
	EXPECT_EQ(h.rc(), -EINVAL);
}

/* RoCE caps (cap_type::roce): what rdma-core's VFIO provider and Linux mlx5_core do before
 * INIT_HCA (handle_hca_cap_roce): read current and maximum, set sw_r_roce_src_udp_port. */
TEST(EmuMlx5Cmd, SetHcaCapRoceTakesTheSourcePortBitBeforeInitHca)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	namespace rc = prm::roce_cap;
	const size_t o = prm::query_hca_cap_out::capability_offset;
	auto query = [&](uint16_t mode) {
		return h.run(Cmd(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size,
				 prm::query_hca_cap_out::size,
				 prm::cap_op_mod(prm::cap_type::roce, mode)));
	};
	Reply cur = query(prm::cap_mode::current);
	ASSERT_EQ(cur.status(), prm::status::ok);
	EXPECT_EQ(cur.get_at(o, rc::sw_r_roce_src_udp_port), 0u);
	Cmd set(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size, 16,
		prm::cap_op_mod(prm::cap_type::roce, 0));
	set.set_at(prm::set_hca_cap_in::capability_offset, rc::sw_r_roce_src_udp_port, 1);
	EXPECT_STATUS(h.run(set), prm::status::ok, Syndrome::none);
	EXPECT_EQ(query(prm::cap_mode::current).get_at(o, rc::sw_r_roce_src_udp_port), 1u);
}

TEST(EmuMlx5Cmd, RoceCapsOfADeviceWithoutRoceAreRefused)
{
	EmuConfig cfg;
	cfg.roce = false;
	Harness h(cfg);
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	Reply g = h.run(Cmd(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size,
			    prm::query_hca_cap_out::size,
			    prm::cap_op_mod(prm::cap_type::general, prm::cap_mode::current)));
	ASSERT_EQ(g.status(), prm::status::ok);
	EXPECT_EQ(g.get_at(prm::query_hca_cap_out::capability_offset, prm::hca_cap::roce), 0u);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size,
				prm::query_hca_cap_out::size,
				prm::cap_op_mod(prm::cap_type::roce, prm::cap_mode::current))),
		      prm::status::bad_param, Syndrome::cap_type_unsupported);
	EXPECT_STATUS(h.run(Cmd(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size, 16,
				prm::cap_op_mod(prm::cap_type::roce, 0))),
		      prm::status::bad_param, Syndrome::cap_type_unsupported);
}

} // namespace
} // namespace nicmr::emu::test
