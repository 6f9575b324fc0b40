/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * On-demand paging in the device model, as a driver sees it through raw commands and queue
 * memory (doc/device-model.md, "On-demand paging: page faults"): a page of a pg_access mkey
 * without its enables raises the PAGE_FAULT EQE with the PRM's layout and holds the WQE;
 * PAGE_FAULT_RESUME with an error completes it with the access's syndrome and writes nothing,
 * without an error runs it again; a token no outstanding fault has is BAD_PARAM; without an EQ
 * that takes page faults the access fails at once.
 */
#include <gtest/gtest.h>

#include "test_emu_dp_harness.h"

namespace nicmr::emu::test {
namespace {

namespace pf = prm::eqe_page_fault;
constexpr Perm kAll{true, true, true, true, true};

class EmuDpOdp : public ::testing::Test {
protected:
	/* pair() with page faults in the EQ's mask (or not). */
	void bed(bool page_faults)
	{
		ASSERT_TRUE(b.ok());
		b.uar = b.alloc_uar();
		uint64_t mask = prm::event_bit(prm::event_type::wq_access_error) |
				prm::event_bit(prm::event_type::wq_inval_req_error);
		if (page_faults)
			mask |= prm::event_bit(prm::event_type::page_fault);
		ASSERT_EQ(b.create_eq(6, mask).status(), prm::status::ok);
		ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
		ASSERT_EQ(b.create_cq(&b.cqb, 1, 6).status(), prm::status::ok);
		ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
		ASSERT_EQ(b.create_qp(&b.qb, 1, &b.cqb, b.uar).status(), prm::status::ok);
		b.connect(b.qa, 1, b.qb.qpn);
		b.connect(b.qb, 2, b.qa.qpn);
		src = kDataOff;
		dst = kDataOff + 0x10000;
		for (size_t i = 0; i < 8192; i++)
			b.at(src)[i] = static_cast<uint8_t>(i * 7 + 1);
		std::memset(b.at(dst), 0xcc, 8192);
		lkey = b.mr(src, 8192, kAll);
		/* Two pages, pg_access, no entry with its enables: nothing present. */
		MkeyOpts o;
		o.acc = kAll;
		o.start = DpBed::iova(dst);
		o.len = 8192;
		o.mtt = {DpBed::iova(dst), DpBed::iova(dst) + 4096};
		o.pg_access = true;
		odp = b.mkey(o);
		ASSERT_NE(odp, 0u);
	}
	/* The next EQE's 64 bytes, if one came. */
	std::optional<std::vector<uint8_t>> eqe()
	{
		const uint32_t ci = b.eq_ci();
		if (!b.poll_eq())
			return std::nullopt;
		const uint8_t *e = b.at(kEqOff + (ci & 63) * 64);
		return std::vector<uint8_t>(e, e + 64);
	}
	Reply resume(uint32_t token, bool error, uint32_t type = 0, uint32_t wq = 0)
	{
		Cmd c(prm::opcode::page_fault_resume, prm::page_fault_resume_in::size,
		      prm::page_fault_resume_out::size);
		c.set(prm::page_fault_resume_in::error, error);
		c.set(prm::page_fault_resume_in::page_fault_type, type);
		c.set(prm::page_fault_resume_in::wq_number, wq);
		c.set(prm::page_fault_resume_in::token, token);
		return b.h().run(c);
	}
	DpBed b;
	size_t src = 0, dst = 0;
	uint32_t lkey = 0, odp = 0;
};

TEST_F(EmuDpOdp, RemotePageNotPresentRaisesAnRdmaFaultAndHoldsTheWqe)
{
	bed(true);
	ASSERT_FALSE(HasFatalFailure());
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(dst) + 100, odp)
			     .data(5000, lkey, DpBed::iova(src))
			     .done());
	EXPECT_FALSE(b.poll(b.cqa)); /* held */
	auto e = eqe();
	ASSERT_TRUE(e);
	const uint8_t *p = e->data();
	EXPECT_EQ(prm::get(p, prm::eqe::event_type), prm::event_type::page_fault);
	EXPECT_EQ(prm::get(p, prm::eqe::event_sub_type), pf::subtype_rdma);
	EXPECT_EQ(prm::get(p, pf::r_key), odp);
	EXPECT_EQ(prm::get(p, pf::rdma_va), DpBed::iova(dst) + 100);
	EXPECT_EQ(prm::get(p, pf::rdma_op_len), 5000u);
	EXPECT_EQ(prm::get(p, pf::pftype), uint64_t{pf::flag_rdma | pf::flag_write});
	const auto token = static_cast<uint32_t>(prm::get(p, pf::rdma_token));
	EXPECT_NE(token, 0u);
	EXPECT_EQ(b.dp().page_faults_outstanding(), 1u);
	/* A later doorbell runs nothing: the WQE waits for its resume. */
	b.post(b.qa, Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done());
	EXPECT_FALSE(b.poll(b.cqa));
	EXPECT_FALSE(eqe());

	/* Resumed without an error while the pages are still not present: it runs again and
	 * faults again, with a new token. */
	EXPECT_EQ(resume(token, false, pf::flag_rdma | pf::flag_write, token).status(),
		  prm::status::ok);
	auto e2 = eqe();
	ASSERT_TRUE(e2);
	const auto token2 = static_cast<uint32_t>(prm::get(e2->data(), pf::rdma_token));
	EXPECT_NE(token2, token);
	EXPECT_FALSE(b.poll(b.cqa));

	/* Resumed with an error: the remote access error, the responder in ERR with its event,
	 * nothing written; the NOP behind it is flushed. */
	EXPECT_EQ(resume(token2, true).status(), prm::status::ok);
	auto c = b.wait(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ_ERR);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_EQ(cqe_counter(*c), 0u);
	c = b.wait(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	for (size_t i = 0; i < 8192; i++)
		ASSERT_EQ(b.at(dst)[i], 0xcc) << i;
	QpState s;
	ASSERT_EQ(b.dp().qp_state(b.qb.qpn, &s), 0);
	EXPECT_EQ(s, QpState::err);
	auto ev = b.poll_eq();
	ASSERT_TRUE(ev);
	EXPECT_EQ(ev->first, prm::event_type::wq_access_error);
	EXPECT_EQ(ev->second, b.qb.qpn);
	EXPECT_EQ(b.dp().page_faults_outstanding(), 0u);
	const DpStats st = b.dp().stats();
	EXPECT_EQ(st.page_faults, 2u);
	EXPECT_EQ(st.pf_resumes, 2u);
	EXPECT_EQ(st.pf_errors, 1u);

	/* Both tokens are spent: BAD_PARAM, as firmware answers an unknown token. */
	for (uint32_t t : {token, token2, 0u, 0xffffffu}) {
		const Reply r = resume(t, false);
		EXPECT_EQ(r.status(), prm::status::bad_param) << t;
		EXPECT_EQ(r.syndrome(), static_cast<uint32_t>(Syndrome::page_fault_token)) << t;
	}
}

TEST_F(EmuDpOdp, LocalSgeNotPresentRaisesAWqeFault)
{
	bed(true);
	ASSERT_FALSE(HasFatalFailure());
	const uint32_t target = b.mr(kDataOff + 0x20000, 4096, kAll);
	/* The odp mkey as the gather list of a WRITE (WQE index 0). */
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(kDataOff + 0x20000), target)
			     .data(64, odp, DpBed::iova(dst))
			     .done());
	EXPECT_FALSE(b.poll(b.cqa));
	auto e = eqe();
	ASSERT_TRUE(e);
	const uint8_t *p = e->data();
	EXPECT_EQ(prm::get(p, prm::eqe::event_type), prm::event_type::page_fault);
	EXPECT_EQ(prm::get(p, prm::eqe::event_sub_type), pf::subtype_wqe);
	EXPECT_EQ(prm::get(p, pf::wq_number), b.qa.qpn);
	EXPECT_EQ(prm::get(p, pf::wqe_index), 0u);
	EXPECT_EQ(prm::get(p, pf::pftype), uint64_t{pf::flag_requestor});
	const auto token = static_cast<uint32_t>(prm::get(p, pf::wqe_token));
	EXPECT_NE(token, 0u);
	/* Resumed with an error: the gather's LOCAL_PROT_ERR; the responder is untouched. */
	EXPECT_EQ(resume(token, true, pf::flag_requestor, b.qa.qpn).status(), prm::status::ok);
	auto c = b.wait(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ_ERR);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	QpState s;
	ASSERT_EQ(b.dp().qp_state(b.qb.qpn, &s), 0);
	EXPECT_EQ(s, QpState::rts);
	EXPECT_FALSE(b.poll_eq());
}

TEST_F(EmuDpOdp, WithoutAPageFaultEqTheAccessFailsAtOnce)
{
	bed(false);
	ASSERT_FALSE(HasFatalFailure());
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(dst), odp)
			     .data(64, lkey, DpBed::iova(src))
			     .done());
	auto c = b.wait(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_EQ(b.dp().stats().page_faults, 0u);
	EXPECT_EQ(b.dp().page_faults_outstanding(), 0u);
}

/* A receive WQE's scatter entry on a page not present (Linux odp.c: a WQE fault without
 * MLX5_PFAULT_REQUESTOR, type MLX5_WQE_PF_TYPE_RESP, names the QP's RQ and the receive WQE's
 * index; mlx5_eqe_page_fault's packet_length the packet's size). */
/* A requester qr (QP 2, port 1) and a receiver qd with an RQ of 4 slots of 64 bytes (QP 3,
 * port 2, receives on cqb; RQ at the start of its buffer, the SQ after it), connected, and
 * receive WQE 0 posted: the two pages of the odp mkey, then the terminator. */
void rq_pair(DpBed &b, uint32_t odp, size_t dst, TestQp *qr_out, TestQp *qd_out)
{
	TestQp &qr = *qr_out, &qd = *qd_out;
	ASSERT_EQ(b.create_qp(&qr, 2, &b.cqa, b.uar).status(), prm::status::ok);
	qd.sq_off = kSqOff + 3 * 0x40000;
	qd.dbr_off = kDbrOff + 0x8000 + 3 * 64;
	std::memset(b.at(qd.dbr_off), 0, 8);
	Cmd c(prm::opcode::create_qp, prm::create_qp_in::size + 8 * 2, prm::create_qp_out::size);
	const size_t q = prm::create_qp_in::qpc_offset;
	c.set_at(q, prm::qpc::st, prm::qp_st::rc);
	c.set_at(q, prm::qpc::pd, b.pd);
	c.set_at(q, prm::qpc::cqn_snd, b.cqb.cqn);
	c.set_at(q, prm::qpc::cqn_rcv, b.cqb.cqn);
	c.set_at(q, prm::qpc::uar_page, b.uar);
	c.set_at(q, prm::qpc::log_sq_size, 6);
	c.set_at(q, prm::qpc::rq_type, prm::qp_rq_type::regular);
	c.set_at(q, prm::qpc::log_rq_size, 2);
	c.set_at(q, prm::qpc::log_rq_stride, 2);
	c.set_at(q, prm::qpc::dbr_addr, DpBed::iova(qd.dbr_off));
	for (size_t k = 0; k < 2; k++)
		c.set_at(prm::create_qp_in::pas_offset + 8 * k, prm::pas_entry,
			 DpBed::iova(qd.sq_off + k * 4096));
	Reply r = b.h().run(c);
	ASSERT_EQ(r.status(), prm::status::ok);
	qd.qpn = static_cast<uint32_t>(r.get(prm::create_qp_out::qpn));
	b.connect(qr, 1, qd.qpn);
	b.connect(qd, 2, qr.qpn);
	uint8_t *slot = b.at(qd.sq_off);
	prm::set(slot, prm::wqe_data::byte_count, 8192);
	prm::set(slot, prm::wqe_data::lkey, odp);
	prm::set(slot, prm::wqe_data::addr, DpBed::iova(dst));
	prm::set(slot + 16, prm::wqe_data::lkey, MLX5_INVALID_LKEY);
	prm::set(b.at(qd.dbr_off), prm::dbr::rq_counter, 1);
}

TEST_F(EmuDpOdp, ReceiveWqeNotPresentRaisesAResponderWqeFault)
{
	bed(true);
	ASSERT_FALSE(HasFatalFailure());
	TestQp qr, qd;
	rq_pair(b, odp, dst, &qr, &qd);
	ASSERT_FALSE(HasFatalFailure());
	b.post(qr, Wqe(MLX5_OPCODE_SEND, qr.qpn).data(3000, lkey, DpBed::iova(src)).done());
	EXPECT_FALSE(b.poll(b.cqa)); /* the requester waits, as for a responder's RDMA fault */
	auto e = eqe();
	ASSERT_TRUE(e);
	const uint8_t *p = e->data();
	EXPECT_EQ(prm::get(p, prm::eqe::event_type), prm::event_type::page_fault);
	EXPECT_EQ(prm::get(p, prm::eqe::event_sub_type), pf::subtype_wqe);
	EXPECT_EQ(prm::get(p, pf::pftype), uint64_t{pf::flag_write}); /* RESP: no REQUESTOR */
	EXPECT_EQ(prm::get(p, pf::wq_number), qd.qpn);
	EXPECT_EQ(prm::get(p, pf::wqe_index), 0u);
	EXPECT_EQ(prm::get(p, pf::packet_length), 3000u);
	EXPECT_EQ(prm::get(p, pf::bytes_committed), 0u);
	const auto token = static_cast<uint32_t>(prm::get(p, pf::wqe_token));
	EXPECT_NE(token, 0u);
	/* The EQE's raw bytes, at the offsets of Linux's struct mlx5_eqe_page_fault (data at
	 * byte 0x20 of the EQE): wqe_index be16 at 0x26, packet_length be16 at 0x2a, token be32
	 * at 0x2c, pftype_wq be32 at 0x38 (type in its top byte). */
	EXPECT_EQ(p[0x26] << 8 | p[0x27], 0);
	EXPECT_EQ(p[0x2a] << 8 | p[0x2b], 3000);
	EXPECT_EQ(uint32_t(p[0x2d]) << 16 | p[0x2e] << 8 | p[0x2f], token);
	EXPECT_EQ(p[0x38], pf::flag_write);
	EXPECT_EQ(uint32_t(p[0x39]) << 16 | p[0x3a] << 8 | p[0x3b], qd.qpn);
	/* The receive WQE was not consumed: resumed while its pages are still not present, the
	 * retry faults on the same WQE again, with a new token. */
	EXPECT_EQ(resume(token, false, pf::flag_write, qd.qpn).status(), prm::status::ok);
	auto e2 = eqe();
	ASSERT_TRUE(e2);
	EXPECT_EQ(prm::get(e2->data(), pf::wqe_index), 0u);
	EXPECT_EQ(prm::get(e2->data(), pf::wq_number), qd.qpn);
	const auto token2 = static_cast<uint32_t>(prm::get(e2->data(), pf::wqe_token));
	EXPECT_NE(token2, token);
	EXPECT_FALSE(b.poll(b.cqa));
	EXPECT_FALSE(b.poll(b.cqb));
	/* Resumed with an error: the receive completes with LOCAL_ACCESS_ERR (WQE 0), the
	 * receiver goes to ERR, the requester gets the remote operational error, and nothing is
	 * written. */
	EXPECT_EQ(resume(token2, true, pf::flag_write, qd.qpn).status(), prm::status::ok);
	auto rc = b.wait(b.cqb);
	ASSERT_TRUE(rc);
	EXPECT_EQ(cqe_opcode(*rc), MLX5_CQE_RESP_ERR);
	EXPECT_EQ(cqe_syndrome(*rc), MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
	EXPECT_EQ(cqe_counter(*rc), 0u);
	EXPECT_EQ(cqe_qpn(*rc), qd.qpn);
	auto sc = b.wait(b.cqa);
	ASSERT_TRUE(sc);
	EXPECT_EQ(cqe_opcode(*sc), MLX5_CQE_REQ_ERR);
	EXPECT_EQ(cqe_syndrome(*sc), MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
	for (size_t i = 0; i < 8192; i++)
		ASSERT_EQ(b.at(dst)[i], 0xcc) << i;
	QpState st;
	ASSERT_EQ(b.dp().qp_state(qd.qpn, &st), 0);
	EXPECT_EQ(st, QpState::err);
	const DpStats ds = b.dp().stats();
	EXPECT_EQ(ds.page_faults, 2u);
	EXPECT_EQ(ds.pf_resumes, 2u);
	EXPECT_EQ(ds.pf_errors, 1u);
	EXPECT_EQ(b.dp().page_faults_outstanding(), 0u);
}

TEST_F(EmuDpOdp, ReceiveWqeNotPresentWithoutAPageFaultEqFailsAtOnce)
{
	/* As a receive key refused without on-demand paging: the receive's local access error,
	 * the requester's remote operational error, nothing held, nothing written. */
	bed(false);
	ASSERT_FALSE(HasFatalFailure());
	TestQp qr, qd;
	rq_pair(b, odp, dst, &qr, &qd);
	ASSERT_FALSE(HasFatalFailure());
	b.post(qr, Wqe(MLX5_OPCODE_SEND, qr.qpn).data(3000, lkey, DpBed::iova(src)).done());
	auto sc = b.wait(b.cqa);
	ASSERT_TRUE(sc);
	EXPECT_EQ(cqe_opcode(*sc), MLX5_CQE_REQ_ERR);
	EXPECT_EQ(cqe_syndrome(*sc), MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
	auto rc = b.wait(b.cqb);
	ASSERT_TRUE(rc);
	EXPECT_EQ(cqe_opcode(*rc), MLX5_CQE_RESP_ERR);
	EXPECT_EQ(cqe_syndrome(*rc), MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
	EXPECT_EQ(cqe_counter(*rc), 0u);
	for (size_t i = 0; i < 8192; i++)
		ASSERT_EQ(b.at(dst)[i], 0xcc) << i;
	EXPECT_EQ(b.dp().stats().page_faults, 0u);
	EXPECT_EQ(b.dp().page_faults_outstanding(), 0u);
}

} // namespace
} // namespace nicmr::emu::test
