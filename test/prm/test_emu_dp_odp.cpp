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

} // namespace
} // namespace nicmr::emu::test
