/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The driver's shared receive queue (mlx5_srq.h) against the device model's loopback: a QP
 * made with QpParams::srq takes its receives from it, Qp::poll_recv gives each WQE back to the
 * SRQ's list with its wr_id, a full SRQ refuses a post, QUERY_SRQ and ARM_RQ, and the values
 * Srq::create refuses. Both doorbell delivery modes.
 */
#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "dp_rig.h"
#include "mlx5_srq.h"

using namespace nicmr::testdp;

namespace {

/* The rig's QP 1 made again with an SRQ (receive completions on a CQ of its own). */
struct SrqRig : Rig {
	std::unique_ptr<mlx5::Srq> srq;
	std::unique_ptr<mlx5::Cq> rcq;
	mem::DmaBlock block;
	uint32_t key = 0;
	TestMr mr;

	~SrqRig()
	{
		for (auto &q : qp)
			q.reset();
		rcq.reset();
		srq.reset();
		mr.handle.reset();
		if (block.va != nullptr)
			data->release(block);
	}
	int make_srq(emu::DoorbellDelivery d, uint32_t max_wr)
	{
		RigOptions o;
		o.delivery = d;
		int rc = make(o);
		if (rc != 0)
			return rc;
		qp[1].reset();
		mlx5::SrqParams sp;
		sp.pd = pd.pd();
		sp.max_wr = max_wr;
		sp.max_sge = 2;
		if ((rc = mlx5::Srq::create(*dev, sp, &srq)) != 0)
			return rc;
		mlx5::CqParams cp;
		cp.log_size = 8;
		cp.eqn = eq->eqn();
		if ((rc = mlx5::Cq::create(*dev, *uar, cp, &rcq)) != 0)
			return rc;
		mlx5::QpParams p;
		p.pd = pd.pd();
		p.port = 2;
		p.log_sq_size = 6;
		p.rre = p.rwe = p.rae = true;
		p.recv_cq = rcq.get();
		p.srq = srq.get();
		if ((rc = mlx5::Qp::create(*dev, *uar, *cq[1], p, &qp[1])) != 0)
			return rc;
		/* make() connected QP 0 to the QP 1 it made: back to RST for the new one. */
		if ((rc = qp[0]->to_reset()) != 0 || (rc = qp[0]->connect(qp[1]->qpn())) != 0 ||
		    (rc = qp[1]->connect(qp[0]->qpn())) != 0)
			return rc;
		if ((rc = data->alloc(65536, 4096, &block)) != 0)
			return rc;
		rc = mtt_mr(block, 0, 65536, ctx(true, true, false, false, false), &mr);
		key = mr.key;
		return rc;
	}
	uint8_t *at(size_t off) const { return static_cast<uint8_t *>(block.va) + off; }
	mlx5::Sge sge(size_t off, uint32_t len) const
	{
		return {reinterpret_cast<uintptr_t>(block.va) + off, len, key};
	}
	bool wait_recv(mlx5::Completion *c)
	{
		auto deadline = std::chrono::steady_clock::now() + 5s;
		while (std::chrono::steady_clock::now() < deadline)
			if (qp[1]->poll_recv(c, 1) == 1)
				return true;
		return false;
	}
};

class DpSrq : public ::testing::TestWithParam<emu::DoorbellDelivery> {};

} // namespace

TEST_P(DpSrq, ReceivesComeFromTheSrqAndGoBackToItsList)
{
	SrqRig r;
	ASSERT_EQ(r.make_srq(GetParam(), 3), 0);
	EXPECT_EQ(r.srq->capacity(), 3u);
	EXPECT_EQ(r.qp[1]->srq(), r.srq.get());
	for (int i = 0; i < 256; i++)
		r.at(i)[0] = static_cast<uint8_t>(i);
	for (uint64_t k = 0; k < 3; k++) {
		const mlx5::Sge s = r.sge(8192 + k * 1024, 1024);
		ASSERT_EQ(r.srq->post_recv({&s, 1}, 100 + k), 0);
	}
	const mlx5::Sge s = r.sge(0, 8);
	EXPECT_EQ(r.srq->post_recv({&s, 1}, 99), -ENOSPC) << "three posted";
	/* Twenty messages through three WQEs: each one reposted as it completes. */
	uint64_t next = 103;
	for (uint32_t m = 0; m < 20; m++) {
		const mlx5::Sge src = r.sge(m, 10 + m);
		ASSERT_EQ(r.qp[0]->post_send({&src, 1}, m, mlx5::kSignaled), 0);
		mlx5::Completion c, sc;
		ASSERT_TRUE(r.wait_recv(&c)) << m;
		EXPECT_TRUE(c.ok());
		EXPECT_EQ(c.opcode, MLX5_CQE_RESP_SEND);
		EXPECT_EQ(c.wr_id, 100u + m) << "the SRQ's posting order";
		EXPECT_EQ(c.srqn, r.srq->srqn());
		EXPECT_LT(c.wqe_index, 4u);
		EXPECT_EQ(c.byte_len, 10u + m);
		ASSERT_TRUE(r.wait(0, &sc));
		EXPECT_TRUE(sc.ok());
		const uint32_t slot = m % 3; /* receive 100 + k lands at slot k % 3 */
		EXPECT_EQ(std::memcmp(r.at(8192 + slot * 1024), r.at(m), 10 + m), 0) << m;
		const mlx5::Sge d = r.sge(8192 + ((next - 100) % 3) * 1024, 1024);
		ASSERT_EQ(r.srq->post_recv({&d, 1}, next++), 0) << m;
		EXPECT_EQ(r.srq->post_recv({&s, 1}, 99), -ENOSPC) << m;
	}
	uint32_t cnt = 0, lwm = 7;
	ASSERT_EQ(r.srq->query(&cnt, &lwm), 0);
	EXPECT_EQ(cnt, 20u) << "WQEs the device took";
	EXPECT_EQ(lwm, 0u) << "not armed";
	ASSERT_EQ(r.srq->arm(2), 0);
	ASSERT_EQ(r.srq->query(&cnt, &lwm), 0);
	EXPECT_EQ(lwm, 2u);
	EXPECT_EQ(r.srq->arm(9), -EINVAL) << "above the SRQ's 4 WQEs: the device's BAD_PARAM";
	/* max_sge 2 makes 64-byte WQEs: room for three data segments, not four. */
	EXPECT_EQ(r.srq->max_sge(), 3u);
	const mlx5::Sge four[4] = {s, s, s, s};
	EXPECT_EQ(r.srq->post_recv({four, 4}, 1), -EINVAL) << "above max_sge";
}

TEST_P(DpSrq, CreateRefusesWhatTheDeviceCannotHold)
{
	SrqRig r;
	ASSERT_EQ(r.make(RigOptions{GetParam()}), 0);
	std::unique_ptr<mlx5::Srq> s;
	mlx5::SrqParams p;
	p.pd = r.pd.pd();
	p.max_wr = 0;
	EXPECT_EQ(mlx5::Srq::create(*r.dev, p, &s), -EINVAL);
	p.max_wr = 1u << 15; /* 2^16 WQEs with the spare: above log_max_srq_sz 15 */
	EXPECT_EQ(mlx5::Srq::create(*r.dev, p, &s), -EINVAL);
	p.max_wr = 4;
	p.max_sge = 0;
	EXPECT_EQ(mlx5::Srq::create(*r.dev, p, &s), -EINVAL);
	p.max_sge = mlx5::Srq::kMaxSge + 1;
	EXPECT_EQ(mlx5::Srq::create(*r.dev, p, &s), -EINVAL);
	p.max_sge = mlx5::Srq::kMaxSge;
	p.pd = 0x3ff; /* no such PD: the device's BAD_RES_STATE */
	EXPECT_EQ(mlx5::Srq::create(*r.dev, p, &s), -EINVAL);
	EXPECT_EQ(s, nullptr);
	p.pd = r.pd.pd();
	ASSERT_EQ(mlx5::Srq::create(*r.dev, p, &s), 0);
	EXPECT_EQ(s->max_sge(), mlx5::Srq::kMaxSge);
	EXPECT_EQ(s->capacity(), 7u);
}

INSTANTIATE_TEST_SUITE_P(Delivery, DpSrq,
			 ::testing::Values(emu::DoorbellDelivery::inline_call,
					   emu::DoorbellDelivery::poll_thread));
