/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CREATE_QP's receive-queue fields as the device model takes them, with raw commands and no
 * driver code (test_emu_dp_harness.h): a regular RQ with its own receive CQ, a receive-only QP
 * (no_sq), QUERY_QP reporting them, the receive CQ held while the QP lives, and every refusal
 * with its exact status and syndrome (doc/device-model.md, "Receive queues").
 */
#include <gtest/gtest.h>

#include "test_emu_dp_harness.h"

using namespace nicmr::emu;
using namespace nicmr::emu::test;

namespace {

struct RqFields {
	uint32_t rq_type = prm::qp_rq_type::regular;
	uint32_t log_rq_size = 2, log_rq_stride = 2; /* 4 slots of 64 bytes */
	uint32_t rcqn = 0;
	bool no_sq = false;
	uint32_t log_sq = 6;
	size_t pages = 2; /* PAS entries given */
};

/* CREATE_QP on b's UAR and CQ a (send), with the RQ fields of f. */
Reply create(DpBed &b, const RqFields &f)
{
	Cmd c(prm::opcode::create_qp, prm::create_qp_in::size + 8 * f.pages,
	      prm::create_qp_out::size);
	const size_t q = prm::create_qp_in::qpc_offset;
	c.set_at(q, prm::qpc::st, prm::qp_st::rc);
	c.set_at(q, prm::qpc::pd, b.pd);
	c.set_at(q, prm::qpc::cqn_snd, b.cqa.cqn);
	c.set_at(q, prm::qpc::cqn_rcv, f.rcqn);
	c.set_at(q, prm::qpc::uar_page, b.uar);
	c.set_at(q, prm::qpc::log_sq_size, f.log_sq);
	c.set_at(q, prm::qpc::no_sq, f.no_sq);
	c.set_at(q, prm::qpc::rq_type, f.rq_type);
	c.set_at(q, prm::qpc::log_rq_size, f.log_rq_size);
	c.set_at(q, prm::qpc::log_rq_stride, f.log_rq_stride);
	c.set_at(q, prm::qpc::dbr_addr, DpBed::iova(kDbrOff + 0x8000));
	for (size_t k = 0; k < f.pages; k++)
		c.set_at(prm::create_qp_in::pas_offset + 8 * k, prm::pas_entry,
			 DpBed::iova(kSqOff + k * 4096));
	return b.h().run(c);
}

void expect_cmd(const Reply &r, uint32_t status, Syndrome syn)
{
	EXPECT_EQ(r.status(), status);
	EXPECT_EQ(r.syndrome(), static_cast<uint32_t>(syn));
}

class EmuDpRecv : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_TRUE(b.ok());
		b.uar = b.alloc_uar();
		ASSERT_EQ(b.create_cq(&b.cqa, 0, 8).status(), prm::status::ok);
		ASSERT_EQ(b.create_cq(&b.cqb, 1, 8).status(), prm::status::ok);
		f.rcqn = b.cqb.cqn;
	}
	DpBed b;
	RqFields f;
};

} // namespace

TEST_F(EmuDpRecv, ARegularRqWithItsOwnReceiveCqIsCreatedQueriedAndHoldsTheCq)
{
	const Reply r = create(b, f);
	ASSERT_EQ(r.status(), prm::status::ok);
	const auto qpn = static_cast<uint32_t>(r.get(prm::create_qp_out::qpn));
	Cmd query(prm::opcode::query_qp, prm::query_qp_in::size, prm::query_qp_out::size);
	query.set(prm::query_qp_in::qpn, qpn);
	const Reply qr = b.h().run(query);
	ASSERT_EQ(qr.status(), prm::status::ok);
	const size_t o = prm::query_qp_out::qpc_offset;
	EXPECT_EQ(qr.get_at(o, prm::qpc::rq_type), prm::qp_rq_type::regular);
	EXPECT_EQ(qr.get_at(o, prm::qpc::log_rq_size), 2u);
	EXPECT_EQ(qr.get_at(o, prm::qpc::log_rq_stride), 2u);
	EXPECT_EQ(qr.get_at(o, prm::qpc::cqn_rcv), b.cqb.cqn);
	EXPECT_EQ(qr.get_at(o, prm::qpc::no_sq), 0u);
	/* The receive CQ is in use while the QP lives. */
	Cmd dcq(prm::opcode::destroy_cq, prm::destroy_cq_in::size, prm::destroy_cq_out::size);
	dcq.set(prm::destroy_cq_in::cqn, b.cqb.cqn);
	expect_cmd(b.h().run(dcq), prm::status::resource_busy, Syndrome::cq_in_use);
	Cmd dqp(prm::opcode::destroy_qp, prm::destroy_qp_in::size, prm::destroy_qp_out::size);
	dqp.set(prm::destroy_qp_in::qpn, qpn);
	ASSERT_EQ(b.h().run(dqp).status(), prm::status::ok);
	EXPECT_EQ(b.h().run(dcq).status(), prm::status::ok);
	EXPECT_TRUE(b.dp().check_invariants());
}

TEST_F(EmuDpRecv, AReceiveOnlyQpTakesNoSqMemory)
{
	f.no_sq = true;
	f.log_sq = 15; /* ignored: no SQ */
	f.pages = 1;
	EXPECT_EQ(create(b, f).status(), prm::status::ok);
	EXPECT_TRUE(b.dp().check_invariants());
}

TEST_F(EmuDpRecv, RefusesWhatItDoesNotModel)
{
	RqFields g = f;
	g.rq_type = prm::qp_rq_type::srq; /* a shared RQ without its SRQ (test_emu_dp_srq.cpp) */
	expect_cmd(create(b, g), prm::status::bad_resource, Syndrome::qp_srq_not_found);
	g.rq_type = 2;
	expect_cmd(create(b, g), prm::status::bad_param, Syndrome::qp_type);
}

TEST_F(EmuDpRecv, RefusesAnRqItCannotPlace)
{
	RqFields g = f;
	g.rcqn = 200; /* no such CQ */
	expect_cmd(create(b, g), prm::status::bad_res_state, Syndrome::cq_not_found);
	g = f;
	g.log_rq_stride = 6; /* 1 KiB slots: above 512 bytes */
	expect_cmd(create(b, g), prm::status::bad_param, Syndrome::queue_params);
	g = f;
	g.log_rq_size = 1;
	g.log_rq_stride = 0; /* 32 bytes before the SQ: its WQEBBs would be unaligned */
	expect_cmd(create(b, g), prm::status::bad_param, Syndrome::queue_params);
	g = f;
	g.pages = 1; /* 256 bytes of RQ + 4 KiB of SQ need two pages */
	expect_cmd(create(b, g), prm::status::bad_param, Syndrome::queue_params);
	g = f;
	g.rq_type = prm::qp_rq_type::zero_len;
	g.no_sq = true; /* neither queue */
	expect_cmd(create(b, g), prm::status::bad_param, Syndrome::queue_params);
	EXPECT_EQ(b.dp().qps(), 0u);
	EXPECT_TRUE(b.dp().check_invariants());
}

TEST(EmuDpRecvCaps, RefusesAnRqAboveLogMaxQpSz)
{
	EmuConfig cfg;
	cfg.log_max_qp_sz = 10;
	DpBed b(cfg);
	ASSERT_TRUE(b.ok());
	b.uar = b.alloc_uar();
	ASSERT_EQ(b.create_cq(&b.cqa, 0, 8).status(), prm::status::ok);
	RqFields f;
	f.rcqn = b.cqa.cqn;
	f.log_rq_size = 11;
	f.log_rq_stride = 0;
	f.pages = 16;
	expect_cmd(create(b, f), prm::status::bad_param, Syndrome::queue_params);
	f.log_rq_size = 10; /* 16 KiB of RQ, then 4 KiB of SQ: five pages */
	f.pages = 5;
	EXPECT_EQ(create(b, f).status(), prm::status::ok);
}
