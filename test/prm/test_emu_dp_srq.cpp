/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared receive queues in the device model, with raw commands and no driver code
 * (test_emu_dp_harness.h): CREATE_SRQ / QUERY_SRQ / DESTROY_SRQ / ARM_RQ and CREATE_QP with
 * rq_type SRQ, each refusal with its status and syndrome, and SENDs that take the SRQ's WQEs in
 * the order of their next_wqe_index links, with the WQE's index and the SRQ's number in the
 * responder CQE and the limit event once (doc/device-model.md, "Shared receive queues").
 */
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>

#include "test_emu_dp_harness.h"

using namespace nicmr::emu;
using namespace nicmr::emu::test;

namespace {

constexpr size_t kSrqOff = kDataOff + 0x200000; /* the SRQ's WQEs */
constexpr size_t kSrqDbr = kDbrOff + 0x4000;
constexpr size_t kSrc = kDataOff, kDst = kDataOff + 0x10000;

struct SrqFields {
	uint32_t pd = 0;
	uint32_t log_size = 2, log_stride = 2; /* 4 WQEs of 64 bytes */
	size_t pages = 1;
	uint64_t page = DpBed::iova(kSrqOff);
	uint64_t dbr = DpBed::iova(kSrqDbr);
	uint32_t lwm = 0;
	uint32_t page_offset = 0;
};

Reply create_srq(DpBed &b, const SrqFields &f)
{
	Cmd c(prm::opcode::create_srq, prm::create_srq_in::size + 8 * f.pages,
	      prm::create_srq_out::size);
	const size_t q = prm::create_srq_in::srqc_offset;
	c.set_at(q, prm::srqc::pd, f.pd != 0 ? f.pd : b.pd);
	c.set_at(q, prm::srqc::log_srq_size, f.log_size);
	c.set_at(q, prm::srqc::log_rq_stride, f.log_stride);
	c.set_at(q, prm::srqc::lwm, f.lwm);
	c.set_at(q, prm::srqc::page_offset, f.page_offset);
	c.set_at(q, prm::srqc::dbr_addr, f.dbr);
	for (size_t k = 0; k < f.pages; k++)
		c.set_at(prm::create_srq_in::pas_offset + 8 * k, prm::pas_entry, f.page + k * 4096);
	return b.h().run(c);
}

/* CREATE_QP of QP i with rq_type SRQ srqn, its CQ cq for both queues. */
Reply create_srq_qp(DpBed &b, TestQp *qp, uint32_t i, TestCq *cq, uint32_t srqn, uint32_t qp_pd = 0)
{
	qp->log_sq = 6;
	qp->sq_off = kSqOff + i * 0x40000;
	qp->dbr_off = kDbrOff + 0x8000 + i * 64;
	qp->uar = b.uar;
	qp->cq = cq;
	Cmd c(prm::opcode::create_qp, prm::create_qp_in::size + 8, prm::create_qp_out::size);
	const size_t q = prm::create_qp_in::qpc_offset;
	c.set_at(q, prm::qpc::st, prm::qp_st::rc);
	c.set_at(q, prm::qpc::pd, qp_pd != 0 ? qp_pd : b.pd);
	c.set_at(q, prm::qpc::cqn_snd, cq->cqn);
	c.set_at(q, prm::qpc::cqn_rcv, cq->cqn);
	c.set_at(q, prm::qpc::uar_page, b.uar);
	c.set_at(q, prm::qpc::log_sq_size, 6);
	c.set_at(q, prm::qpc::rq_type, prm::qp_rq_type::srq);
	c.set_at(q, prm::qpc::srqn_rmpn_xrqn, srqn);
	c.set_at(q, prm::qpc::dbr_addr, DpBed::iova(qp->dbr_off));
	c.set_at(prm::create_qp_in::pas_offset, prm::pas_entry, DpBed::iova(qp->sq_off));
	Reply r = b.h().run(c);
	qp->qpn = static_cast<uint32_t>(r.get(prm::create_qp_out::qpn));
	return r;
}

Reply run_srqn(DpBed &b, uint16_t op, uint32_t srqn)
{
	Cmd c(op, prm::destroy_srq_in::size,
	      op == prm::opcode::query_srq ? prm::query_srq_out::size : prm::destroy_srq_out::size);
	c.set(prm::destroy_srq_in::srqn, srqn);
	return b.h().run(c);
}

Reply arm(DpBed &b, uint32_t srqn, uint32_t lwm, uint32_t op_mod = prm::arm_rq_in::op_mod_srq)
{
	Cmd c(prm::opcode::arm_rq, prm::arm_rq_in::size, prm::arm_rq_out::size);
	c.set(prm::cmd_hdr_in::op_mod, op_mod);
	c.set(prm::arm_rq_in::srq_number, srqn);
	c.set(prm::arm_rq_in::lwm, lwm);
	return b.h().run(c);
}

void expect_cmd(const Reply &r, uint32_t status, Syndrome syn)
{
	EXPECT_EQ(r.status(), status);
	EXPECT_EQ(r.syndrome(), static_cast<uint32_t>(syn));
}

class EmuDpSrq : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_TRUE(b.ok());
		b.uar = b.alloc_uar();
		ASSERT_EQ(
			b.create_eq(6, prm::event_bit(prm::event_type::wq_access_error) |
					       prm::event_bit(prm::event_type::wq_inval_req_error) |
					       prm::event_bit(prm::event_type::srq_limit))
				.status(),
			prm::status::ok);
		ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
		ASSERT_EQ(b.create_cq(&b.cqb, 1, 6).status(), prm::status::ok);
		std::memset(b.at(kSrqDbr), 0, 8);
	}
	DpBed b;
};

} // namespace

TEST_F(EmuDpSrq, CreateQueryAttachAndDestroy)
{
	const Reply r = create_srq(b, SrqFields{});
	ASSERT_EQ(r.status(), prm::status::ok);
	const auto srqn = static_cast<uint32_t>(r.get(prm::create_srq_out::srqn));
	EXPECT_NE(srqn, 0u);
	const Reply q = run_srqn(b, prm::opcode::query_srq, srqn);
	ASSERT_EQ(q.status(), prm::status::ok);
	const size_t o = prm::query_srq_out::srqc_offset;
	EXPECT_EQ(q.get_at(o, prm::srqc::log_srq_size), 2u);
	EXPECT_EQ(q.get_at(o, prm::srqc::log_rq_stride), 2u);
	EXPECT_EQ(q.get_at(o, prm::srqc::pd), b.pd);
	EXPECT_EQ(q.get_at(o, prm::srqc::wqe_cnt), 0u);
	EXPECT_EQ(q.get_at(o, prm::srqc::dbr_addr), DpBed::iova(kSrqDbr));
	EXPECT_EQ(q.get_at(o, prm::srqc::state), 0u);

	TestQp qp;
	ASSERT_EQ(create_srq_qp(b, &qp, 1, &b.cqb, srqn).status(), prm::status::ok);
	Cmd qq(prm::opcode::query_qp, prm::query_qp_in::size, prm::query_qp_out::size);
	qq.set(prm::query_qp_in::qpn, qp.qpn);
	const Reply qr = b.h().run(qq);
	ASSERT_EQ(qr.status(), prm::status::ok);
	EXPECT_EQ(qr.get_at(prm::query_qp_out::qpc_offset, prm::qpc::rq_type),
		  prm::qp_rq_type::srq);
	EXPECT_EQ(qr.get_at(prm::query_qp_out::qpc_offset, prm::qpc::srqn_rmpn_xrqn), srqn);
	EXPECT_TRUE(b.dp().check_invariants());

	/* Busy while a QP takes from it, as a CQ a QP completes to. */
	expect_cmd(run_srqn(b, prm::opcode::destroy_srq, srqn), prm::status::resource_busy,
		   Syndrome::srq_in_use);
	/* Its PD too. */
	Cmd dpd(prm::opcode::dealloc_pd, prm::dealloc_pd_in::size, prm::dealloc_pd_out::size);
	dpd.set(prm::dealloc_pd_in::pd, b.pd);
	EXPECT_EQ(b.h().run(dpd).status(), prm::status::resource_busy);
	Cmd dqp(prm::opcode::destroy_qp, prm::destroy_qp_in::size, prm::destroy_qp_out::size);
	dqp.set(prm::destroy_qp_in::qpn, qp.qpn);
	ASSERT_EQ(b.h().run(dqp).status(), prm::status::ok);
	EXPECT_EQ(run_srqn(b, prm::opcode::destroy_srq, srqn).status(), prm::status::ok);
	expect_cmd(run_srqn(b, prm::opcode::destroy_srq, srqn), prm::status::bad_res_state,
		   Syndrome::srq_not_found);
	expect_cmd(run_srqn(b, prm::opcode::query_srq, srqn), prm::status::bad_res_state,
		   Syndrome::srq_not_found);
	EXPECT_TRUE(b.dp().check_invariants());
}

TEST_F(EmuDpSrq, RefusesWhatItCannotMake)
{
	SrqFields f;
	f.pd = 0x777; /* not allocated */
	expect_cmd(create_srq(b, f), prm::status::bad_res_state, Syndrome::pd_not_allocated);
	f = SrqFields{};
	f.log_stride = 0; /* 16 bytes: the next segment alone */
	expect_cmd(create_srq(b, f), prm::status::bad_param, Syndrome::queue_params);
	f.log_stride = 6; /* 1 KiB: above 512 bytes */
	expect_cmd(create_srq(b, f), prm::status::bad_param, Syndrome::queue_params);
	f = SrqFields{};
	f.log_size = 7; /* 8 KiB on one page */
	expect_cmd(create_srq(b, f), prm::status::bad_param, Syndrome::queue_params);
	f = SrqFields{};
	f.page = 0x100000000000ull; /* not mapped */
	expect_cmd(create_srq(b, f), prm::status::bad_param, Syndrome::queue_memory);
	f = SrqFields{};
	f.dbr = DpBed::iova(kSrqDbr) + 2; /* misaligned record */
	expect_cmd(create_srq(b, f), prm::status::bad_param, Syndrome::queue_params);
	f = SrqFields{};
	f.page_offset = 1;
	expect_cmd(create_srq(b, f), prm::status::bad_param, Syndrome::queue_params);
	f = SrqFields{};
	f.lwm = 5; /* above the 4 WQEs */
	expect_cmd(create_srq(b, f), prm::status::bad_param, Syndrome::queue_params);

	const Reply r = create_srq(b, SrqFields{});
	ASSERT_EQ(r.status(), prm::status::ok);
	const auto srqn = static_cast<uint32_t>(r.get(prm::create_srq_out::srqn));
	TestQp qp;
	expect_cmd(create_srq_qp(b, &qp, 1, &b.cqb, 0), prm::status::bad_resource,
		   Syndrome::qp_srq_not_found);
	expect_cmd(create_srq_qp(b, &qp, 1, &b.cqb, srqn + 1), prm::status::bad_resource,
		   Syndrome::qp_srq_not_found);
	Cmd apd(prm::opcode::alloc_pd, prm::alloc_pd_in::size, prm::alloc_pd_out::size);
	const Reply pr = b.h().run(apd);
	ASSERT_EQ(pr.status(), prm::status::ok);
	const auto pd2 = static_cast<uint32_t>(pr.get(prm::alloc_pd_out::pd));
	expect_cmd(create_srq_qp(b, &qp, 1, &b.cqb, srqn, pd2), prm::status::bad_resource,
		   Syndrome::qp_srq_not_found);
	EXPECT_EQ(b.dp().qps(), 0u);

	expect_cmd(arm(b, srqn, 1, 0), prm::status::bad_param, Syndrome::srq_params);
	expect_cmd(arm(b, srqn, 5), prm::status::bad_param, Syndrome::srq_params);
	expect_cmd(arm(b, srqn + 1, 1), prm::status::bad_res_state, Syndrome::srq_not_found);
	EXPECT_EQ(arm(b, srqn, 3).status(), prm::status::ok);
	const Reply q = run_srqn(b, prm::opcode::query_srq, srqn);
	EXPECT_EQ(q.get_at(prm::query_srq_out::srqc_offset, prm::srqc::lwm), 3u);
	EXPECT_TRUE(b.dp().check_invariants());
}

TEST_F(EmuDpSrq, SendsTakeWqesAlongTheListWithTheirIndexAndTheLimitEventOnce)
{
	const Reply r = create_srq(b, SrqFields{});
	ASSERT_EQ(r.status(), prm::status::ok);
	const auto srqn = static_cast<uint32_t>(r.get(prm::create_srq_out::srqn));
	ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
	ASSERT_EQ(create_srq_qp(b, &b.qb, 1, &b.cqb, srqn).status(), prm::status::ok);
	b.connect(b.qa, 1, b.qb.qpn);
	b.connect(b.qb, 2, b.qa.qpn);
	const uint32_t lkey = b.mr(kSrc, 0x20000, Perm{});
	ASSERT_NE(lkey, 0u);
	for (size_t i = 0; i < 4096; i++)
		b.at(kSrc)[i] = static_cast<uint8_t>(i * 3 + 1);
	std::memset(b.at(kDst), 0, 4096);
	/* The list 0 -> 2 -> 1 -> 3 -> 0; WQE i scatters to kDst + i * 256. */
	const uint16_t next[4] = {2, 3, 1, 0};
	for (uint32_t i = 0; i < 4; i++) {
		uint8_t *w = b.at(kSrqOff + i * 64);
		std::memset(w, 0, 64);
		prm::set(w, prm::wqe_srq_next::next_wqe_index, next[i]);
		prm::set(w + 16, prm::wqe_data::byte_count, 256);
		prm::set(w + 16, prm::wqe_data::lkey, lkey);
		prm::set(w + 16, prm::wqe_data::addr, DpBed::iova(kDst + i * 256));
		prm::set(w + 32, prm::wqe_data::lkey, MLX5_INVALID_LKEY);
	}
	b.store_dbr(kSrqDbr, prm::dbr::rq_counter, 3); /* WQEs 0, 2 and 1 posted */
	/* The limit: an event once fewer than 2 WQEs are left. */
	ASSERT_EQ(arm(b, srqn, 2).status(), prm::status::ok);
	const uint16_t order[3] = {0, 2, 1};
	for (uint32_t k = 0; k < 3; k++) {
		b.post(b.qa, Wqe(MLX5_OPCODE_SEND, b.qa.qpn)
				     .data(100 + k, lkey, DpBed::iova(kSrc + k * 8))
				     .done());
		auto c = b.wait(b.cqb);
		ASSERT_TRUE(c) << k;
		EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_RESP_SEND);
		EXPECT_EQ(cqe_counter(*c), order[k]) << "the WQE's index in the SRQ";
		EXPECT_EQ(cqe_qpn(*c), b.qb.qpn);
		EXPECT_EQ(cqe_bytes(*c), 100u + k);
		EXPECT_EQ(prm::get(c->data(), prm::cqe::srqn), srqn);
		EXPECT_EQ(std::memcmp(b.at(kDst + order[k] * 256), b.at(kSrc + k * 8), 100 + k), 0);
		ASSERT_TRUE(b.wait(b.cqa));
		if (k == 0) {
			EXPECT_FALSE(b.poll_eq()) << "2 WQEs left: not below the limit";
		} else if (k == 1) {
			const auto e = b.poll_eq();
			ASSERT_TRUE(e);
			EXPECT_EQ(e->first, prm::event_type::srq_limit);
			EXPECT_EQ(e->second, srqn);
		} else {
			EXPECT_FALSE(b.poll_eq()) << "once per arm";
		}
	}
	/* The SRQ is empty: RNR, as for an empty RQ; the harness's QPs have rnr_retry 0, so
	 * the SEND fails at once with RNR_RETRY_EXC_ERR and no WQE is taken. */
	b.post(b.qa, Wqe(MLX5_OPCODE_SEND, b.qa.qpn).data(10, lkey, DpBed::iova(kSrc)).done());
	auto c = b.wait(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ_ERR);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	EXPECT_FALSE(b.poll(b.cqb));
	const Reply q = run_srqn(b, prm::opcode::query_srq, srqn);
	EXPECT_EQ(q.get_at(prm::query_srq_out::srqc_offset, prm::srqc::wqe_cnt), 3u);
	EXPECT_TRUE(b.dp().check_invariants());
}

/* An SRQ WQE whose receive buffer is an on-demand mkey with no page present: qa sends to qb
 * (attached to the SRQ, WQE 0 posted). The fault's EQE is returned (its token in *token). */
std::vector<uint8_t> srq_fault(DpBed &b, uint32_t *srqn, uint32_t *token)
{
	namespace pf = prm::eqe_page_fault;
	b.uar = b.alloc_uar();
	EXPECT_EQ(b.create_eq(6, prm::event_bit(prm::event_type::page_fault)).status(),
		  prm::status::ok);
	EXPECT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
	EXPECT_EQ(b.create_cq(&b.cqb, 1, 6).status(), prm::status::ok);
	std::memset(b.at(kSrqDbr), 0, 8);
	const Reply r = create_srq(b, SrqFields{});
	EXPECT_EQ(r.status(), prm::status::ok);
	*srqn = static_cast<uint32_t>(r.get(prm::create_srq_out::srqn));
	EXPECT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
	EXPECT_EQ(create_srq_qp(b, &b.qb, 1, &b.cqb, *srqn).status(), prm::status::ok);
	b.connect(b.qa, 1, b.qb.qpn);
	b.connect(b.qb, 2, b.qa.qpn);
	const uint32_t lkey = b.mr(kSrc, 8192, Perm{});
	std::memset(b.at(kDst), 0xcc, 8192);
	MkeyOpts o;
	o.acc = Perm{true, true, true, true, true};
	o.start = DpBed::iova(kDst);
	o.len = 8192;
	o.mtt = {DpBed::iova(kDst), DpBed::iova(kDst) + 4096};
	o.pg_access = true; /* no entry with its enables: nothing present */
	const uint32_t odp = b.mkey(o);
	uint8_t *w = b.at(kSrqOff);
	std::memset(w, 0, 64);
	prm::set(w, prm::wqe_srq_next::next_wqe_index, 1);
	prm::set(w + 16, prm::wqe_data::byte_count, 8192);
	prm::set(w + 16, prm::wqe_data::lkey, odp);
	prm::set(w + 16, prm::wqe_data::addr, DpBed::iova(kDst));
	prm::set(w + 32, prm::wqe_data::lkey, MLX5_INVALID_LKEY);
	b.store_dbr(kSrqDbr, prm::dbr::rq_counter, 1);
	b.post(b.qa, Wqe(MLX5_OPCODE_SEND, b.qa.qpn).data(3000, lkey, DpBed::iova(kSrc)).done());
	EXPECT_FALSE(b.poll(b.cqa)) << "the sender waits for the fault";
	const uint32_t ci = b.eq_ci();
	if (!b.poll_eq()) {
		ADD_FAILURE() << "no page-fault EQE";
		return {};
	}
	const uint8_t *e = b.at(kEqOff + (ci & 63) * 64);
	*token = static_cast<uint32_t>(prm::get(e, pf::wqe_token));
	return std::vector<uint8_t>(e, e + 64);
}

TEST_F(EmuDpSrq, AReceiveIntoPagesNotPresentRaisesTheSrqWqesFaultAndAnErrorResumeFailsIt)
{
	namespace pf = prm::eqe_page_fault;
	uint32_t srqn = 0, token = 0;
	const std::vector<uint8_t> e = srq_fault(b, &srqn, &token);
	ASSERT_EQ(e.size(), 64u);
	/* Linux odp.c: type 0 is MLX5_WQE_PF_TYPE_RMP, the WQ number the SRQ's. */
	EXPECT_EQ(prm::get(e.data(), prm::eqe::event_type), prm::event_type::page_fault);
	EXPECT_EQ(prm::get(e.data(), prm::eqe::event_sub_type), pf::subtype_wqe);
	EXPECT_EQ(prm::get(e.data(), pf::pftype), 0u);
	EXPECT_EQ(prm::get(e.data(), pf::wq_number), srqn);
	EXPECT_EQ(prm::get(e.data(), pf::wqe_index), 0u);
	EXPECT_EQ(prm::get(e.data(), pf::packet_length), 3000u);
	/* A resume without error runs the SEND again into the WQE the QP kept (test_api_srq's
	 * SrqOdp, through the driver's fault service). */
	Cmd c(prm::opcode::page_fault_resume, prm::page_fault_resume_in::size,
	      prm::page_fault_resume_out::size);
	c.set(prm::page_fault_resume_in::token, token);
	c.set(prm::page_fault_resume_in::wq_number, srqn);
	/* Resumed with an error: the receive completes with the local access error on the QP
	 * that took it, nothing written, the sender a remote operational error. */
	c.set(prm::page_fault_resume_in::error, 1);
	ASSERT_EQ(b.h().run(c).status(), prm::status::ok);
	auto rc = b.wait(b.cqb);
	ASSERT_TRUE(rc);
	EXPECT_EQ(cqe_opcode(*rc), MLX5_CQE_RESP_ERR);
	EXPECT_EQ(cqe_syndrome(*rc), MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
	EXPECT_EQ(cqe_counter(*rc), 0u);
	EXPECT_EQ(prm::get(rc->data(), prm::cqe::srqn), srqn);
	auto sc = b.wait(b.cqa);
	ASSERT_TRUE(sc);
	EXPECT_EQ(cqe_syndrome(*sc), MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
	EXPECT_EQ(b.at(kDst)[0], 0xcc);
	const Reply q = run_srqn(b, prm::opcode::query_srq, srqn);
	EXPECT_EQ(q.get_at(prm::query_srq_out::srqc_offset, prm::srqc::wqe_cnt), 1u)
		<< "taken once, held across the fault";
}

TEST_F(EmuDpSrq, A2errFlushesTheSrqWqeHeldForAFaultAndOnlyIt)
{
	uint32_t srqn = 0, token = 0;
	ASSERT_EQ(srq_fault(b, &srqn, &token).size(), 64u);
	b.store_dbr(kSrqDbr, prm::dbr::rq_counter, 2); /* WQE 1 posted too */
	Cmd e(prm::opcode::qp_2err, prm::qp_2err_in::size, prm::qp_2err_out::size);
	e.set(prm::qp_2err_in::qpn, b.qb.qpn);
	ASSERT_EQ(b.h().run(e).status(), prm::status::ok);
	auto rc = b.wait(b.cqb);
	ASSERT_TRUE(rc);
	EXPECT_EQ(cqe_opcode(*rc), MLX5_CQE_RESP_ERR);
	EXPECT_EQ(cqe_syndrome(*rc), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	EXPECT_EQ(cqe_counter(*rc), 0u) << "the WQE it held";
	EXPECT_FALSE(b.poll(b.cqb)) << "WQE 1 stays in the SRQ for other QPs";
	const Reply q = run_srqn(b, prm::opcode::query_srq, srqn);
	EXPECT_EQ(q.get_at(prm::query_srq_out::srqc_offset, prm::srqc::wqe_cnt), 1u);
	/* The late resume finds nothing waiting. */
	Cmd c(prm::opcode::page_fault_resume, prm::page_fault_resume_in::size,
	      prm::page_fault_resume_out::size);
	c.set(prm::page_fault_resume_in::token, token);
	EXPECT_EQ(b.h().run(c).status(), prm::status::ok);
	EXPECT_FALSE(b.poll(b.cqb));
	EXPECT_TRUE(b.dp().check_invariants());
}

/* Senders on their own threads SEND to receivers that share one SRQ: the device takes every
 * WQE exactly once (the SRQ's lock), whichever thread executes the request. */
void concurrent_takes(DoorbellDelivery mode)
{
	EmuConfig cfg;
	cfg.delivery = mode;
	DpBed b(cfg);
	ASSERT_TRUE(b.ok());
	b.uar = b.alloc_uar();
	constexpr int kPairs = 2, kOps = 128;
	SrqFields f;
	f.log_size = 8; /* 256 WQEs of 32 bytes: two pages */
	f.log_stride = 1;
	f.pages = 2;
	std::memset(b.at(kSrqDbr), 0, 8);
	const Reply r = create_srq(b, f);
	ASSERT_EQ(r.status(), prm::status::ok);
	const auto srqn = static_cast<uint32_t>(r.get(prm::create_srq_out::srqn));
	TestCq scq[kPairs], rcq[kPairs];
	TestQp snd[kPairs], rcv[kPairs];
	for (uint32_t i = 0; i < kPairs; i++) {
		ASSERT_EQ(b.create_cq(&scq[i], 2 * i, 8).status(), prm::status::ok);
		ASSERT_EQ(b.create_cq(&rcq[i], 2 * i + 1, 8).status(), prm::status::ok);
		ASSERT_EQ(b.create_qp(&snd[i], 2 * i, &scq[i], b.uar).status(), prm::status::ok);
		ASSERT_EQ(create_srq_qp(b, &rcv[i], 2 * i + 1, &rcq[i], srqn).status(),
			  prm::status::ok);
		b.connect(snd[i], 1, rcv[i].qpn);
		b.connect(rcv[i], 2, snd[i].qpn);
	}
	const uint32_t lkey = b.mr(kSrc, 0x20000, Perm{});
	for (uint32_t i = 0; i < 256; i++) {
		uint8_t *w = b.at(kSrqOff + i * 32);
		std::memset(w, 0, 32);
		prm::set(w, prm::wqe_srq_next::next_wqe_index, (i + 1) & 255);
		prm::set(w + 16, prm::wqe_data::byte_count, 16);
		prm::set(w + 16, prm::wqe_data::lkey, lkey);
		prm::set(w + 16, prm::wqe_data::addr, DpBed::iova(kDst + i * 16));
	}
	b.store_dbr(kSrqDbr, prm::dbr::rq_counter, 256);
	/* Message (i, k): 8 bytes i << 32 | k from the sender's own source slot. */
	for (uint32_t i = 0; i < kPairs; i++)
		for (uint32_t k = 0; k < kOps; k++) {
			const uint64_t v = uint64_t{i} << 32 | k;
			std::memcpy(b.at(kSrc + (i * kOps + k) * 8), &v, 8);
		}
	auto worker = [&](uint32_t i) {
		for (uint32_t k = 0; k < kOps; k++) {
			b.post(snd[i],
			       Wqe(MLX5_OPCODE_SEND, snd[i].qpn)
				       .data(8, lkey, DpBed::iova(kSrc + (i * kOps + k) * 8))
				       .done());
			std::optional<std::vector<uint8_t>> c;
			while (!(c = b.poll(scq[i])))
				std::this_thread::yield();
			ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
		}
	};
	std::thread t0(worker, 0u), t1(worker, 1u);
	t0.join();
	t1.join();
	std::set<uint16_t> taken;
	for (uint32_t i = 0; i < kPairs; i++) {
		std::set<uint32_t> seqs;
		for (int n = 0; n < kOps; n++) {
			auto c = b.poll(rcq[i]);
			ASSERT_TRUE(c) << "receiver " << i << " CQE " << n;
			ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_RESP_SEND);
			const uint16_t idx = cqe_counter(*c);
			EXPECT_TRUE(taken.insert(idx).second) << "WQE " << idx << " taken twice";
			uint64_t v = 0;
			std::memcpy(&v, b.at(kDst + idx * 16), 8);
			EXPECT_EQ(v >> 32, i) << "WQE " << idx;
			seqs.insert(static_cast<uint32_t>(v));
		}
		EXPECT_EQ(seqs.size(), size_t{kOps});
		EXPECT_FALSE(b.poll(rcq[i]));
	}
	EXPECT_EQ(taken.size(), 256u);
	EXPECT_TRUE(b.dp().check_invariants());
}

TEST(EmuDpSrqConcurrent, SendersOnTwoThreadsTakeEveryWqeOnceInline)
{
	concurrent_takes(DoorbellDelivery::inline_call);
}

TEST(EmuDpSrqConcurrent, SendersOnTwoThreadsTakeEveryWqeOncePollThread)
{
	concurrent_takes(DoorbellDelivery::poll_thread);
}

TEST(EmuDpSrqCaps, RefusesAnSrqAboveLogMaxQpSz)
{
	EmuConfig cfg;
	cfg.log_max_qp_sz = 10;
	DpBed b(cfg);
	ASSERT_TRUE(b.ok());
	SrqFields f;
	f.log_size = 11;
	f.log_stride = 1; /* 2^11 WQEs of 32 bytes: 16 pages */
	f.pages = 16;
	expect_cmd(create_srq(b, f), prm::status::bad_param, Syndrome::queue_params);
	f.log_size = 10;
	f.pages = 8;
	EXPECT_EQ(create_srq(b, f).status(), prm::status::ok);
}

TEST(EmuDpSrqLayout, CommandAndWqeFieldsSitWhereLinuxAndRdmaCorePutThem)
{
	/* srqc (mlx5_ifc_srqc_bits): bit offsets of its fields. */
	EXPECT_EQ(prm::srqc::log_srq_size.bit_off, 0x004u);
	EXPECT_EQ(prm::srqc::log_rq_stride.bit_off, 0x025u);
	EXPECT_EQ(prm::srqc::page_offset.bit_off, 0x040u);
	EXPECT_EQ(prm::srqc::log_page_size.bit_off, 0x082u);
	EXPECT_EQ(prm::srqc::pd.bit_off, 0x0c8u);
	EXPECT_EQ(prm::srqc::lwm.bit_off, 0x0e0u);
	EXPECT_EQ(prm::srqc::wqe_cnt.bit_off, 0x0f0u);
	EXPECT_EQ(prm::srqc::dbr_addr.bit_off, 0x140u);
	/* create_srq_in: srq_context_entry at bit 0x80, pas at 0x880. */
	EXPECT_EQ(prm::create_srq_in::srqc_offset * 8, 0x80u);
	EXPECT_EQ(prm::create_srq_in::pas_offset * 8, 0x880u);
	EXPECT_EQ(prm::arm_rq_in::lwm.bit_off, 0x070u);
	/* The WQE's next segment and the CQE's srqn (<infiniband/mlx5dv.h>). */
	EXPECT_EQ(prm::wqe_srq_next::size, sizeof(mlx5_wqe_srq_next_seg));
	EXPECT_EQ(prm::wqe_srq_next::next_wqe_index.bit_off / 8,
		  offsetof(mlx5_wqe_srq_next_seg, next_wqe_index));
	EXPECT_EQ(prm::wqe_srq_next::signature.bit_off / 8,
		  offsetof(mlx5_wqe_srq_next_seg, signature));
	EXPECT_EQ(prm::cqe::srqn.bit_off / 8 - 1, offsetof(mlx5_cqe64, srqn_uidx));
	mlx5_wqe_srq_next_seg n{};
	prm::set(&n, prm::wqe_srq_next::next_wqe_index, 0x1234);
	EXPECT_EQ(be16toh(n.next_wqe_index), 0x1234);
	mlx5_cqe64 c{};
	prm::set(&c, prm::cqe::srqn, 0xabcdef);
	EXPECT_EQ(be32toh(c.srqn_uidx) & 0xffffff, 0xabcdefu);
}
