/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Receive queues and the SEND family between the device model's two ports through the driver:
 * SEND of 0 B .. 1 MiB into multi-SGE receive WQEs (gather lists and inline), SEND and RDMA
 * WRITE with immediate, SEND with invalidate (the key refused afterwards), receive completions
 * in order with exact byte counts, RNR (no receive WQE) with and without retries, length and
 * key errors with the exact syndrome on both sides, flushes, and the driver's refusals. Every
 * test runs with both doorbell delivery modes.
 */
#include <cerrno>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "dp_rig.h"

using namespace nicmr::testdp;

namespace {

constexpr uint8_t kCanary = 0xc5;

void fill(void *p, size_t len, uint32_t seed)
{
	auto *b = static_cast<uint8_t *>(p);
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		b[i] = static_cast<uint8_t>(x >> 16);
	}
}

bool all_of(const void *p, size_t len, uint8_t v)
{
	const auto *b = static_cast<const uint8_t *>(p);
	for (size_t i = 0; i < len; i++)
		if (b[i] != v)
			return false;
	return true;
}

/* Buffers 100 bytes into their block: a scatter crosses page boundaries. */
struct Buf : RigBuf {
	Buf() : RigBuf(100) {}
};

/* The rig's two QPs made again with a receive queue each, receive completions on CQs of their
 * own (or on the send CQs). */
struct RqRig : Rig {
	std::unique_ptr<mlx5::Cq> rcq[2];

	~RqRig()
	{
		for (auto &q : qp)
			q.reset();
		for (auto &c : rcq)
			c.reset();
	}

	int make_rq(const RigOptions &o, uint32_t rnr_retry = 7, bool own_recv_cq = true,
		    uint32_t max_recv_sge = 4, uint32_t log_rq_size = 6)
	{
		int rc = make(o);
		if (rc != 0)
			return rc;
		for (auto &q : qp)
			q.reset();
		for (int i = 0; i < 2; i++) {
			if (own_recv_cq) {
				mlx5::CqParams cp;
				cp.log_size = 8;
				cp.eqn = eq->eqn();
				if ((rc = mlx5::Cq::create(*dev, *uar, cp, &rcq[i])) != 0)
					return rc;
			}
			mlx5::QpParams p;
			p.pd = pd.pd();
			p.port = static_cast<uint32_t>(i + 1);
			p.log_sq_size = 6;
			p.rre = p.rwe = p.rae = true;
			p.max_recv_sge = max_recv_sge;
			p.log_rq_size = log_rq_size;
			p.recv_cq = own_recv_cq ? rcq[i].get() : nullptr;
			p.rnr_retry = rnr_retry;
			if ((rc = mlx5::Qp::create(*dev, *uar, *cq[i], p, &qp[i])) != 0)
				return rc;
		}
		if ((rc = qp[0]->connect(qp[1]->qpn())) != 0)
			return rc;
		return qp[1]->connect(qp[0]->qpn());
	}

	int buf(size_t len, const mlx5::MkeyContext &ctx, Buf *b)
	{
		return Rig::buf(len, ctx, kCanary, b);
	}

	/* Nothing arrives on QP i's send or receive CQ for a while. */
	bool quiet(int i)
	{
		mlx5::Completion c;
		auto deadline = std::chrono::steady_clock::now() + 100ms;
		while (std::chrono::steady_clock::now() < deadline)
			if (qp[i]->poll(&c, 1) != 0 || qp[i]->poll_recv(&c, 1) != 0)
				return false;
		return true;
	}
};

class DpSend : public ::testing::TestWithParam<emu::DoorbellDelivery> {
protected:
	RigOptions opts(size_t data = size_t{16} << 20)
	{
		RigOptions o;
		o.delivery = GetParam();
		o.data_bytes = data;
		return o;
	}
};

} // namespace

TEST_P(DpSend, SendScattersIntoAThreeSgeReceiveForSizesFromZeroTo1MiB)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts(size_t{24} << 20)), 0);
	uint64_t id = 100;
	for (size_t len : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, size_t{4097},
			   size_t{65536 + 17}, size_t{1} << 20}) {
		SCOPED_TRACE(len);
		Buf src, dst;
		ASSERT_EQ(r.buf(len, r.ctx(true, false, false, false, false), &src), 0);
		/* Room for len + 9 bytes in three pieces: 1/4, 1/2 and the rest + 9. */
		const size_t a = len / 4, b = len / 2, c = len - a - b + 9;
		ASSERT_EQ(r.buf(len + 9, r.ctx(true, true, false, false, false, 0x21), &dst), 0);
		fill(src.p(), len, static_cast<uint32_t>(len));
		const mlx5::Sge rs[3] = {dst.sge(0, a), dst.sge(a, b), dst.sge(a + b, c)};
		ASSERT_EQ(r.qp[1]->post_recv(rs, ++id), 0);
		const mlx5::Sge s = src.sge(0, len);
		ASSERT_EQ(r.qp[0]->post_send({&s, len ? 1u : 0u}, id + 1000, mlx5::kSignaled), 0);
		mlx5::Completion rc, sc;
		ASSERT_TRUE(r.wait_recv(1, &rc));
		EXPECT_EQ(rc.opcode, MLX5_CQE_RESP_SEND);
		EXPECT_TRUE(rc.ok());
		EXPECT_EQ(rc.byte_len, len);
		EXPECT_EQ(rc.wr_id, id);
		EXPECT_EQ(rc.qpn, r.qp[1]->qpn());
		ASSERT_TRUE(r.wait(0, &sc));
		EXPECT_EQ(sc.opcode, MLX5_CQE_REQ);
		EXPECT_EQ(sc.wr_id, id + 1000);
		EXPECT_EQ(std::memcmp(dst.p(), src.p(), len), 0);
		EXPECT_TRUE(all_of(dst.p() + len, 9, kCanary)) << "past the message";
	}
}

TEST_P(DpSend, InlineSendLandsAcrossReceiveSges)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	Buf dst;
	ASSERT_EQ(r.buf(4096, r.ctx(true, true, false, false, false), &dst), 0);
	uint8_t msg[200];
	fill(msg, sizeof(msg), 3);
	const mlx5::Sge rs[2] = {dst.sge(0, 7), dst.sge(1000, 500)};
	ASSERT_EQ(r.qp[1]->post_recv(rs, 1), 0);
	ASSERT_EQ(r.qp[0]->post_send_inline(msg, sizeof(msg), 2, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_RESP_SEND);
	EXPECT_EQ(c.byte_len, sizeof(msg));
	EXPECT_EQ(std::memcmp(dst.p(), msg, 7), 0);
	EXPECT_EQ(std::memcmp(dst.p() + 1000, msg + 7, sizeof(msg) - 7), 0);
	EXPECT_TRUE(all_of(dst.p() + 7, 1000 - 7, kCanary));
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
}

TEST_P(DpSend, SendWithImmediateHandsTheImmediateToTheReceiver)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	Buf src, dst;
	ASSERT_EQ(r.buf(100, r.ctx(true, false, false, false, false), &src), 0);
	ASSERT_EQ(r.buf(100, r.ctx(true, true, false, false, false), &dst), 0);
	fill(src.p(), 100, 9);
	const mlx5::Sge rs = dst.sge(0, 100), s = src.sge(0, 60);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 5), 0);
	ASSERT_EQ(r.qp[0]->post_send_imm({&s, 1}, 0xdeadbeef, 6, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_RESP_SEND_IMM);
	EXPECT_EQ(c.imm, 0xdeadbeefu);
	EXPECT_EQ(c.byte_len, 60u);
	EXPECT_EQ(c.wr_id, 5u);
	EXPECT_EQ(std::memcmp(dst.p(), src.p(), 60), 0);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.wr_id, 6u);
	EXPECT_TRUE(c.ok());
}

TEST_P(DpSend, WriteWithImmediateWritesTheTargetAndConsumesAReceive)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	Buf src, tgt, rbuf;
	ASSERT_EQ(r.buf(5000, r.ctx(true, false, false, false, false), &src), 0);
	ASSERT_EQ(r.buf(5000, r.ctx(true, false, false, true, false, 0x33), &tgt), 0);
	ASSERT_EQ(r.buf(64, r.ctx(true, true, false, false, false), &rbuf), 0);
	fill(src.p(), 5000, 11);
	const mlx5::Sge rs = rbuf.sge(0, 64), s = src.sge(0, 5000);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 40), 0);
	ASSERT_EQ(r.qp[0]->post_write_imm({&s, 1}, tgt.addr(), tgt.mr.key, 0x01020304, 41,
					  mlx5::kSignaled),
		  0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_RESP_WR_IMM);
	EXPECT_EQ(c.imm, 0x01020304u);
	EXPECT_EQ(c.byte_len, 5000u);
	EXPECT_EQ(c.wr_id, 40u);
	EXPECT_EQ(std::memcmp(tgt.p(), src.p(), 5000), 0);
	EXPECT_TRUE(all_of(rbuf.p(), 64, kCanary)) << "the receive buffer takes no bytes";
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.wr_id, 41u);
}

TEST_P(DpSend, WriteWithImmediateToAKeyWithoutRemoteWriteConsumesNoReceive)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	Buf src, tgt;
	ASSERT_EQ(r.buf(64, r.ctx(true, false, false, false, false), &src), 0);
	ASSERT_EQ(r.buf(64, r.ctx(true, false, true, false, false), &tgt), 0);
	const mlx5::Sge s = src.sge(0, 64);
	ASSERT_EQ(r.qp[1]->post_recv({}, 1), 0);
	ASSERT_EQ(r.qp[0]->post_write_imm({&s, 1}, tgt.addr(), tgt.mr.key, 7, 2, mlx5::kSignaled),
		  0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_TRUE(all_of(tgt.p(), 64, kCanary));
	/* The responder went to ERR: its one receive WQE completes flushed, not consumed. */
	ASSERT_EQ(r.qp[1]->to_err(), 0);
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_RESP_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	EXPECT_EQ(c.wr_id, 1u);
}

TEST_P(DpSend, ReceiveCompletionsComeInOrderWithExactByteCounts)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	Buf src, dst;
	ASSERT_EQ(r.buf(8192, r.ctx(true, false, false, false, false), &src), 0);
	ASSERT_EQ(r.buf(16 * 512, r.ctx(true, true, false, false, false), &dst), 0);
	fill(src.p(), 8192, 5);
	constexpr int kN = 16;
	for (int i = 0; i < kN; i++) {
		const mlx5::Sge rs = dst.sge(size_t(i) * 512, 512);
		ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 500 + i), 0);
	}
	for (int i = 0; i < kN; i++) {
		const mlx5::Sge s = src.sge(size_t(i) * 31, size_t(i) * 31 + 1);
		ASSERT_EQ(r.qp[0]->post_send({&s, 1}, 900 + i,
					     i + 1 == kN ? unsigned{mlx5::kSignaled} : 0u),
			  0);
	}
	for (int i = 0; i < kN; i++) {
		mlx5::Completion c;
		ASSERT_TRUE(r.wait_recv(1, &c));
		EXPECT_EQ(c.wr_id, uint64_t(500 + i));
		EXPECT_EQ(c.byte_len, uint32_t(i) * 31 + 1);
		EXPECT_EQ(c.opcode, MLX5_CQE_RESP_SEND);
		EXPECT_EQ(std::memcmp(dst.p() + size_t(i) * 512, src.p() + size_t(i) * 31,
				      size_t(i) * 31 + 1),
			  0);
	}
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.wr_id, uint64_t(900 + kN - 1));
	EXPECT_EQ(r.qp[1]->rq_room(), r.qp[1]->rq_size());
	EXPECT_GE(r.hw->device().data_path().stats().recvs, uint64_t{kN});
}

TEST_P(DpSend, ReceivesOnTheSendCqAreRoutedToTheReceiveQueue)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts(), 7, /*own_recv_cq=*/false), 0);
	Buf dst;
	ASSERT_EQ(r.buf(64, r.ctx(true, true, false, false, false), &dst), 0);
	const mlx5::Sge rs = dst.sge(0, 64);
	ASSERT_EQ(r.qp[0]->post_recv({&rs, 1}, 77), 0);
	ASSERT_EQ(r.qp[1]->post_send_inline("hello", 5, 78, mlx5::kSignaled), 0);
	ASSERT_EQ(r.qp[0]->post_nop(79, mlx5::kSignaled), 0);
	/* QP 0's one CQ holds the receive and the NOP: poll() routes each. */
	mlx5::Completion c[2];
	int got = 0;
	auto deadline = std::chrono::steady_clock::now() + 5s;
	while (got < 2 && std::chrono::steady_clock::now() < deadline)
		got += r.qp[0]->poll(c + got, 2 - got);
	ASSERT_EQ(got, 2);
	for (const auto &x : c) {
		if (x.recv()) {
			EXPECT_EQ(x.wr_id, 77u);
			EXPECT_EQ(x.byte_len, 5u);
		} else {
			EXPECT_EQ(x.wr_id, 79u);
		}
	}
	EXPECT_NE(c[0].recv(), c[1].recv());
	EXPECT_EQ(std::memcmp(dst.p(), "hello", 5), 0);
	EXPECT_EQ(r.qp[0]->rq_room(), r.qp[0]->rq_size());
}

TEST_P(DpSend, SendWithInvalidateInvalidatesTheKeyAndLaterAccessIsRefused)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	Buf dst, tgt, src;
	ASSERT_EQ(r.buf(64, r.ctx(true, true, false, false, false), &dst), 0);
	ASSERT_EQ(r.buf(64, r.ctx(true, false, false, false, false), &src), 0);
	mlx5::MkeyContext k = r.ctx(true, false, false, true, false, 0x44);
	k.en_rinval = true;
	ASSERT_EQ(r.buf(64, k, &tgt), 0);
	const mlx5::Sge rs = dst.sge(0, 64), s = src.sge(0, 8);
	/* The key works before. */
	ASSERT_EQ(r.qp[0]->post_write({&s, 1}, tgt.addr(), tgt.mr.key, 1, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	ASSERT_TRUE(c.ok());
	std::memset(tgt.p(), kCanary, 64);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 2), 0);
	ASSERT_EQ(r.qp[0]->post_send_inval({&s, 1}, tgt.mr.key, 3, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_RESP_SEND_INV);
	EXPECT_EQ(c.imm, tgt.mr.key);
	EXPECT_EQ(c.byte_len, 8u);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	/* Then refused: a remote access error, nothing written. */
	ASSERT_EQ(r.qp[0]->post_write({&s, 1}, tgt.addr(), tgt.mr.key, 4, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_TRUE(all_of(tgt.p(), 64, kCanary));
}

TEST_P(DpSend, SendWithInvalidateOfAKeyWithoutRemoteInvalidateIsAnInvalidRequest)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	Buf dst, tgt, src;
	ASSERT_EQ(r.buf(64, r.ctx(true, true, false, false, false), &dst), 0);
	ASSERT_EQ(r.buf(64, r.ctx(true, false, false, false, false), &src), 0);
	ASSERT_EQ(r.buf(64, r.ctx(true, false, false, true, false), &tgt), 0); /* no en_rinval */
	const mlx5::Sge rs = dst.sge(0, 64), s = src.sge(0, 8);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 2), 0);
	ASSERT_EQ(r.qp[0]->post_send_inval({&s, 1}, tgt.mr.key, 3, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_RESP_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	EXPECT_EQ(c.wr_id, 2u);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	uint32_t st = 0;
	ASSERT_EQ(r.qp[1]->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::err);
}

TEST_P(DpSend, NoReceiveWithRnrRetryZeroIsRnrRetryExceeded)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts(), /*rnr_retry=*/0), 0);
	ASSERT_EQ(r.qp[0]->post_send_inline("x", 1, 9, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	EXPECT_EQ(c.wr_id, 9u);
	EXPECT_EQ(r.hw->device().data_path().stats().rnr, 1u);
	/* The responder is not harmed by an RNR: a receive posted now takes the next SEND
	 * of a fresh requester. */
	uint32_t st = 0;
	ASSERT_EQ(r.qp[1]->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::rts);
}

TEST_P(DpSend, NoReceiveWithRnrRetriesLeftWaitsAndRetriesAtTheNextRun)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts(), /*rnr_retry=*/2), 0);
	Buf dst;
	ASSERT_EQ(r.buf(64, r.ctx(true, true, false, false, false), &dst), 0);
	ASSERT_EQ(r.qp[0]->post_send_inline("abc", 3, 1, mlx5::kSignaled), 0);
	EXPECT_TRUE(r.quiet(0)) << "the SEND waits for a receive";
	const mlx5::Sge rs = dst.sge(0, 64);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 2), 0);
	/* Another WQE rings the doorbell: the SEND runs again first, then the NOP. */
	ASSERT_EQ(r.qp[0]->post_nop(3, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.wr_id, 1u);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.wr_id, 3u);
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.byte_len, 3u);
	EXPECT_EQ(std::memcmp(dst.p(), "abc", 3), 0);
	EXPECT_EQ(r.hw->device().data_path().stats().rnr, 1u);
}

TEST_P(DpSend, RnrRetriesRunOutAfterRnrRetryRuns)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts(), /*rnr_retry=*/1), 0);
	ASSERT_EQ(r.qp[0]->post_send_inline("abc", 3, 1, mlx5::kSignaled), 0);
	EXPECT_TRUE(r.quiet(0));
	/* One retry left: the next run tries again and gives up. */
	ASSERT_EQ(r.qp[0]->post_nop(2, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	EXPECT_EQ(c.wr_id, 1u);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	EXPECT_EQ(c.wr_id, 2u);
	EXPECT_EQ(r.hw->device().data_path().stats().rnr, 2u);
}

TEST_P(DpSend, SendLongerThanTheReceiveIsALocalLengthErrorAtTheResponder)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	Buf src, dst;
	ASSERT_EQ(r.buf(100, r.ctx(true, false, false, false, false), &src), 0);
	ASSERT_EQ(r.buf(100, r.ctx(true, true, false, false, false), &dst), 0);
	const mlx5::Sge rs[2] = {dst.sge(0, 40), dst.sge(50, 40)}, s = src.sge(0, 81);
	ASSERT_EQ(r.qp[1]->post_recv(rs, 1), 0);
	ASSERT_EQ(r.qp[1]->post_recv(rs, 2), 0);
	ASSERT_EQ(r.qp[0]->post_send({&s, 1}, 3, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_RESP_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	EXPECT_EQ(c.wr_id, 1u);
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << "the rest of the RQ flushed";
	EXPECT_EQ(c.wr_id, 2u);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	EXPECT_TRUE(all_of(dst.p(), 100, kCanary)) << "nothing moved";
}

TEST_P(DpSend, AReceiveSgeTheResponderMayNotWriteIsARemoteOperationalError)
{
	/* A read-only MR: LOCAL_ACCESS_ERR at the responder (PRM.md, "What the device checks");
	 * a stale variant: LOCAL_PROT_ERR. The requester hears a remote operational error. */
	for (const bool stale : {false, true}) {
		SCOPED_TRACE(stale ? "stale key" : "read-only MR");
		RqRig r;
		ASSERT_EQ(r.make_rq(opts()), 0);
		Buf src, dst;
		ASSERT_EQ(r.buf(100, r.ctx(true, false, false, false, false), &src), 0);
		ASSERT_EQ(r.buf(100, r.ctx(true, stale, false, false, false), &dst), 0);
		mlx5::Sge rs = dst.sge(0, 100);
		if (stale)
			rs.lkey ^= 1;
		const mlx5::Sge s = src.sge(0, 10);
		ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 1), 0);
		ASSERT_EQ(r.qp[0]->post_send({&s, 1}, 2, mlx5::kSignaled), 0);
		mlx5::Completion c;
		ASSERT_TRUE(r.wait_recv(1, &c));
		EXPECT_EQ(c.opcode, MLX5_CQE_RESP_ERR);
		EXPECT_EQ(c.syndrome, stale ? MLX5_CQE_SYNDROME_LOCAL_PROT_ERR
					    : MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
		ASSERT_TRUE(r.wait(0, &c));
		EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
		EXPECT_TRUE(all_of(dst.p(), 100, kCanary));
	}
}

TEST_P(DpSend, ASendToAQpWithoutAReceiveQueueIsAnInvalidRequest)
{
	Rig r; /* the plain rig: its QPs have no RQ */
	ASSERT_EQ(r.make(opts()), 0);
	EXPECT_FALSE(r.qp[1]->has_rq());
	ASSERT_EQ(r.qp[0]->post_send_inline("x", 1, 1, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
}

TEST_P(DpSend, ToErrFlushesPostedReceivesInOrder)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	Buf dst;
	ASSERT_EQ(r.buf(64, r.ctx(true, true, false, false, false), &dst), 0);
	const mlx5::Sge rs = dst.sge(0, 64);
	for (uint64_t i = 0; i < 3; i++)
		ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 10 + i), 0);
	ASSERT_EQ(r.qp[1]->to_err(), 0);
	for (uint64_t i = 0; i < 3; i++) {
		mlx5::Completion c;
		ASSERT_TRUE(r.wait_recv(1, &c));
		EXPECT_EQ(c.opcode, MLX5_CQE_RESP_ERR);
		EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
		EXPECT_EQ(c.wr_id, 10 + i);
	}
	/* After 2RST and a new connection the RQ starts again at index 0. */
	ASSERT_EQ(r.qp[1]->recover(), 0);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 20), 0);
	ASSERT_EQ(r.qp[0]->post_send_inline("zz", 2, 21, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.wr_id, 20u);
	EXPECT_EQ(c.wqe_index, 0u);
	EXPECT_EQ(c.byte_len, 2u);
}

TEST_P(DpSend, PostRecvRefusesWhatDoesNotFit)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts(), 7, true, /*max_recv_sge=*/2, /*log_rq_size=*/2), 0);
	EXPECT_EQ(r.qp[1]->max_recv_sge(), 2u);
	EXPECT_EQ(r.qp[1]->rq_size(), 4u);
	Buf dst;
	ASSERT_EQ(r.buf(64, r.ctx(true, true, false, false, false), &dst), 0);
	const mlx5::Sge rs[3] = {dst.sge(0, 8), dst.sge(8, 8), dst.sge(16, 8)};
	EXPECT_EQ(r.qp[1]->post_recv(rs, 1), -EINVAL);
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(r.qp[1]->post_recv({rs, 2}, 1), 0);
	EXPECT_EQ(r.qp[1]->post_recv({rs, 2}, 1), -ENOSPC);
	Rig plain;
	ASSERT_EQ(plain.make(opts()), 0);
	EXPECT_EQ(plain.qp[0]->post_recv({rs, 1}, 1), -ENOTSUP);
}

TEST_P(DpSend, QpCreateRefusesAReceiveQueueItCannotMake)
{
	RqRig r;
	ASSERT_EQ(r.make_rq(opts()), 0);
	mlx5::QpParams p;
	p.pd = r.pd.pd();
	p.log_sq_size = 6;
	std::unique_ptr<mlx5::Qp> q;
	p.max_recv_sge = 33;
	EXPECT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &q), -EINVAL);
	p.max_recv_sge = 1;
	p.log_rq_size = 16;
	EXPECT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &q), -EINVAL);
	/* A receive CQ of 256 CQEs for 512 receive WQEs. */
	p.log_rq_size = 9;
	p.recv_cq = r.rcq[0].get();
	EXPECT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &q), -EINVAL);
	/* Sharing the send CQ (256 CQEs): the SQ's 64 and the RQ's 256 do not fit. */
	p.recv_cq = nullptr;
	p.log_rq_size = 8;
	EXPECT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &q), -EINVAL);
	p.log_rq_size = 7;
	EXPECT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &q), 0);
	EXPECT_EQ(q->rq_size(), 128u);
}

INSTANTIATE_TEST_SUITE_P(Delivery, DpSend,
			 ::testing::Values(emu::DoorbellDelivery::inline_call,
					   emu::DoorbellDelivery::poll_thread),
			 [](const auto &info) {
				 return info.param == emu::DoorbellDelivery::inline_call
						? std::string("inline")
						: std::string("thread");
			 });
