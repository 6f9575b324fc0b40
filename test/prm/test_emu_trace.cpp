/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device model's command trace (emu_mlx5_trace.h) and its fault injection
 * (EmuConfig::fail_opcode), driven by raw command-queue entries.
 */
#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include <string>
#include <vector>

#include "emu_mlx5_trace.h"
#include "test_emu_harness.h"

namespace nicmr::emu::test {
namespace {

EmuConfig traced(uint32_t capacity = 1024)
{
	EmuConfig c;
	c.trace_capacity = capacity;
	return c;
}

TEST(EmuTrace, OffByDefault)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	EXPECT_EQ(h.dev().trace(), nullptr);
	h.bring_up();
	EXPECT_EQ(h.dev().trace(), nullptr);
}

TEST(EmuTrace, CapacityAboveTheLimitIsRefused)
{
	std::unique_ptr<EmuMlx5> e;
	EXPECT_EQ(emu_mlx5_create(traced(EmuMlx5Device::kMaxTraceCapacity + 1), &e), -EINVAL);
	EXPECT_EQ(emu_mlx5_create(traced(EmuMlx5Device::kMaxTraceCapacity), &e), 0);
}

TEST(EmuTrace, RecordsEveryCommandOfABringUpWithItsFields)
{
	Harness h(traced());
	ASSERT_EQ(h.rc(), 0);
	h.bring_up();
	const std::vector<TraceEntry> t = h.dev().trace()->entries();
	std::vector<std::string> lines;
	for (const TraceEntry &e : t)
		lines.push_back(render(e));
	const EmuConfig def;
	const std::vector<std::string> want = {
		"ENABLE_HCA op_mod=0x0 status=OK syndrome=0x0 function_id=0",
		"SET_ISSI op_mod=0x0 status=OK syndrome=0x0 current_issi=1",
		"QUERY_PAGES op_mod=0x1 status=OK syndrome=0x0 function_id=0 num_pages=" +
			std::to_string(def.boot_pages),
		"MANAGE_PAGES op_mod=0x1 status=OK syndrome=0x0 function_id=0 npages=" +
			std::to_string(def.boot_pages),
		"SET_HCA_CAP op_mod=0x0 status=OK syndrome=0x0 cap=general cmdif_checksum=0 "
		"mkey_by_name=" +
			std::to_string(def.mkey_by_name ? 1 : 0),
		"QUERY_PAGES op_mod=0x2 status=OK syndrome=0x0 function_id=0 num_pages=" +
			std::to_string(def.init_pages),
		"MANAGE_PAGES op_mod=0x1 status=OK syndrome=0x0 function_id=0 npages=" +
			std::to_string(def.init_pages),
		"INIT_HCA op_mod=0x0 status=OK syndrome=0x0",
		"QUERY_PAGES op_mod=0x3 status=OK syndrome=0x0 function_id=0 num_pages=" +
			std::to_string(def.regular_pages),
		"MANAGE_PAGES op_mod=0x1 status=OK syndrome=0x0 function_id=0 npages=" +
			std::to_string(def.regular_pages),
	};
	EXPECT_EQ(lines, want);
	EXPECT_EQ(h.dev().trace()->dropped(), 0u);
}

TEST(EmuTrace, RecordsAFailedCommandWithItsStatusAndSyndrome)
{
	Harness h(traced());
	ASSERT_EQ(h.rc(), 0);
	/* INIT_HCA before ENABLE_HCA: BAD_SYS_STATE, hca_disabled. */
	ASSERT_EQ(h.init_hca(), prm::status::bad_sys_state);
	const auto t = h.dev().trace()->entries();
	ASSERT_EQ(t.size(), 1u);
	EXPECT_EQ(t[0].opcode, prm::opcode::init_hca);
	EXPECT_EQ(t[0].status, prm::status::bad_sys_state);
	EXPECT_EQ(t[0].syndrome, static_cast<uint32_t>(Syndrome::hca_disabled));
	EXPECT_EQ(render(t[0]), "INIT_HCA op_mod=0x0 status=BAD_SYS_STATE syndrome=0xe000010");
	EXPECT_EQ(transcript(t),
		  std::vector<std::string>{
			  "INIT_HCA op_mod=0x0 status=BAD_SYS_STATE syndrome=0xe000010"});
}

TEST(EmuTrace, KeepsTheFirstEntriesAndCountsTheRest)
{
	Harness h(traced(2));
	ASSERT_EQ(h.rc(), 0);
	h.bring_up(); /* 10 commands */
	const auto t = h.dev().trace()->entries();
	ASSERT_EQ(t.size(), 2u);
	EXPECT_EQ(t[0].opcode, prm::opcode::enable_hca);
	EXPECT_EQ(t[1].opcode, prm::opcode::set_issi);
	EXPECT_EQ(h.dev().trace()->dropped(), 8u);
	h.dev().trace()->clear();
	EXPECT_TRUE(h.dev().trace()->entries().empty());
	EXPECT_EQ(h.dev().trace()->dropped(), 0u);
}

TEST(EmuTrace, CapabilityCommandsNameTheirTypeModeAndSetBits)
{
	Harness h(traced());
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	Cmd q(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size, prm::query_hca_cap_out::size,
	      prm::cap_op_mod(prm::cap_type::general, prm::cap_mode::max));
	ASSERT_EQ(h.run(q).status(), prm::status::ok);
	ASSERT_EQ(h.run(Harness::set_atomic_mode(prm::atomic_req_mode::host_endianness)).status(),
		  prm::status::ok);
	const auto t = h.dev().trace()->entries();
	ASSERT_EQ(t.size(), 3u);
	EXPECT_EQ(render(t[1]),
		  "QUERY_HCA_CAP op_mod=0x0 status=OK syndrome=0x0 cap=general mode=max");
	EXPECT_EQ(render(t[2]), "SET_HCA_CAP op_mod=0x6 status=OK syndrome=0x0 cap=atomic "
				"atomic_req_8B_endianness_mode=1");
}

/* The transcript names objects in creation order, leaves addresses out, marks a reference to
 * an object nobody created, and folds runs. */
TEST(EmuTrace, TranscriptNamesObjectsAndFoldsRuns)
{
	std::vector<TraceEntry> t;
	TraceEntry pd;
	pd.opcode = prm::opcode::alloc_pd;
	pd.add("pd", 7, TraceKind::pd, false, true);
	t.push_back(pd);
	TraceEntry cq;
	cq.opcode = prm::opcode::create_cq;
	cq.add("c_eqn", 0, TraceKind::eq);
	cq.add("dbr_addr", 0x1234000, TraceKind::addr);
	cq.add("cqn", 9, TraceKind::cq, false, true);
	t.push_back(cq);
	for (uint32_t i = 0; i < 3; i++) {
		TraceEntry m;
		m.opcode = prm::opcode::create_mkey;
		m.add("free", 1);
		m.add("pd", 7, TraceKind::pd);
		m.add("mkey_index", 100 + i, TraceKind::mkey);
		t.push_back(m);
	}
	TraceEntry umr;
	umr.source = TraceEntry::Source::wqe;
	umr.opcode = 0x25;
	umr.status = 0x13;
	umr.add("mkey", 0x6502, TraceKind::mkey);
	t.push_back(umr);
	const std::vector<std::string> want = {
		"ALLOC_PD op_mod=0x0",
		"CREATE_CQ op_mod=0x0 c_eqn=?0",
		"CREATE_MKEY op_mod=0x0 free=1 pd=pd1 [x3]",
		"UMR cqe_syndrome=0x13",
	};
	EXPECT_EQ(transcript(t), want);
	EXPECT_EQ(render(t[1]), "CREATE_CQ op_mod=0x0 status=OK syndrome=0x0 c_eqn=0 "
				"dbr_addr=0x1234000 cqn=9");
}

TEST(EmuTrace, UmrWorkRequestsAreRecordedWithTheirControlFields)
{
	/* A UMR WQE as the decoder reads it: control segment, UMR control, mkey context. */
	std::vector<uint8_t> w(sizeof(mlx5_wqe_ctrl_seg) + prm::umr_ctrl::size + prm::mkc::size);
	uint8_t *u = w.data() + sizeof(mlx5_wqe_ctrl_seg);
	prm::set(u, prm::umr_ctrl::inline_xlt, 1);
	prm::set(u, prm::umr_ctrl::check, prm::umr_flags::check_fail_if_not_free);
	prm::set(u, prm::umr_ctrl::klm_octowords, 4);
	prm::set(u, prm::umr_ctrl::mkey_mask, prm::umr_mkey_mask::free | prm::umr_mkey_mask::pd);
	prm::set(u + prm::umr_ctrl::size, prm::mkc::pd, 3);
	prm::set(u + prm::umr_ctrl::size, prm::mkc::lr, 1);
	const TraceEntry e = decode_umr(w.data(), w.size(), 5, 0x1234, 0);
	EXPECT_EQ(render(e), "UMR qpn=5 mkey=0x1234 inline=1 check=1 translation_offset_en=0 "
			     "octowords=4 mkey_mask=0x20000080 free=0 lr=1 lw=0 rr=0 rw=0 a=0 "
			     "qpn=0x0 length64=0 pd=3 log_page_size=0 start_addr=0x0");
	/* Too short for its segments: the key and the queue only. */
	EXPECT_EQ(render(decode_umr(w.data(), 16, 5, 0x1234, 0x4)),
		  "UMR cqe_syndrome=0x4 qpn=5 mkey=0x1234");
}

TEST(EmuTrace, AShortCommandIsRecordedWithItsOpcodeOnly)
{
	uint8_t in[16] = {};
	prm::set(in, prm::cmd_hdr_in::opcode, prm::opcode::create_qp);
	const TraceEntry e =
		decode_command(in, sizeof(in), nullptr, 0, prm::status::bad_input_len, 0x0e000005);
	EXPECT_EQ(render(e), "CREATE_QP op_mod=0x0 status=BAD_INPUT_LEN syndrome=0xe000005");
	EXPECT_EQ(render(decode_command(in, 4, nullptr, 0, prm::status::bad_input_len, 1)),
		  "OP_0x0 op_mod=0x0 status=BAD_INPUT_LEN syndrome=0x1");
}

TEST(EmuFaultInjection, TheChosenOpcodeFailsWithInternalErrorBeforeItsHandler)
{
	EmuConfig c = traced();
	c.fail_opcode = prm::opcode::alloc_pd;
	Harness h(c);
	ASSERT_EQ(h.rc(), 0);
	h.bring_up();
	Reply r =
		h.run(Cmd(prm::opcode::alloc_pd, prm::alloc_pd_in::size, prm::alloc_pd_out::size));
	EXPECT_EQ(r.status(), prm::status::internal_err);
	EXPECT_EQ(r.syndrome(), static_cast<uint32_t>(Syndrome::injected));
	EXPECT_EQ(h.dev().pds_allocated(), 0u);
	/* Other opcodes run as ever. */
	EXPECT_EQ(h.run(Cmd(prm::opcode::query_issi, prm::query_issi_in::size,
			    prm::query_issi_out::size))
			  .status(),
		  prm::status::ok);
	const auto t = h.dev().trace()->entries();
	ASSERT_GE(t.size(), 2u);
	EXPECT_EQ(render(t[t.size() - 2]),
		  "ALLOC_PD op_mod=0x0 status=INTERNAL_ERR syndrome=0xe0000f0");
}

} // namespace
} // namespace nicmr::emu::test
