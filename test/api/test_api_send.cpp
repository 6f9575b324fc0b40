/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Receive queues and SEND through the native API: nicmr_qp_create_attr with a receive CQ of its
 * own or the send CQ, nicmr_post_recv, nicmr_post_send (plain, inline, with immediate, with
 * invalidate) and nicmr_post_write_imm between port 1 and port 2, the receive completions'
 * opcode, byte_len, imm and wr_id, and every refused argument and error status with its code.
 */
#include <cstring>

#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;

/* QP a (port 1) sends to QP b (port 2); both have a receive queue, b's completions on rcq. */
class SendPath : public ApiFixture {
protected:
	void SetUp() override
	{
		ApiFixture::SetUp();
		ASSERT_EQ(nicmr_cq_create(dev, 64, &cqa), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &cqb), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &rcq), 0);
		nicmr_qp_attr at{};
		at.port = 1;
		at.send_cq = cqa;
		at.depth = 16;
		at.recv_depth = 16; /* on cqa too: 16 + 16 of its 64 */
		at.max_recv_sge = 4;
		ASSERT_EQ(nicmr_qp_create_attr(pd, &at, &qa), 0);
		at.port = 2;
		at.send_cq = cqb;
		at.recv_cq = rcq;
		ASSERT_EQ(nicmr_qp_create_attr(pd, &at, &qb), 0);
		ASSERT_EQ(nicmr_qp_connect(qa, 2, nicmr_qp_num(qb)), 0);
		ASSERT_EQ(nicmr_qp_connect(qb, 1, nicmr_qp_num(qa)), 0);
		a = base;
		b = base + kLen;
		ASSERT_EQ(nicmr_mr_reg(pd, a, kLen, kAll, 0, 0, &mra), 0);
		ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, 0, 0, &mrb), 0);
		ka = nicmr_mr_key(mra);
		kb = nicmr_mr_key(mrb);
		for (size_t i = 0; i < kLen; i++)
			a[i] = static_cast<char>(i * 7 + 1);
		std::memset(b, 0, kLen);
	}
	void TearDown() override
	{
		for (nicmr_mr *m : {mra, mrb})
			if (m) {
				EXPECT_EQ(nicmr_mr_dereg(m), 0);
			}
		destroy_queues({qa, qb}, {cqa, cqb, rcq});
		ApiFixture::TearDown();
	}
	nicmr_cq *cqa = nullptr, *cqb = nullptr, *rcq = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	nicmr_mr *mra = nullptr, *mrb = nullptr;
	char *a = nullptr, *b = nullptr;
	uint32_t ka = 0, kb = 0;
};

TEST_F(SendPath, SendLandsInTheReceiveSgesWithItsByteCount)
{
	const nicmr_sge sg[3] = {{u(b), 10, kb}, {u(b) + 100, 0, kb}, {u(b) + 200, 5000, kb}};
	ASSERT_EQ(nicmr_post_recv(qb, sg, 3, 0xabc), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a), 3000, ka, 0, 0x123, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc = wait_wc(rcq);
	EXPECT_EQ(wc.opcode, NICMR_WC_RECV);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.byte_len, 3000u);
	EXPECT_EQ(wc.wr_id, 0xabcu);
	EXPECT_EQ(wc.qp_num, nicmr_qp_num(qb));
	EXPECT_EQ(wc.imm, 0u);
	wc = wait_wc(cqa);
	EXPECT_EQ(wc.opcode, NICMR_WC_SEND);
	EXPECT_EQ(wc.wr_id, 0x123u);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(b, a, 10), 0);
	EXPECT_EQ(std::memcmp(b + 200, a + 10, 2990), 0);
	EXPECT_EQ(b[10], 0);
	EXPECT_EQ(b[200 + 2990], 0);
}

TEST_F(SendPath, ImmediatesAndWriteWithImmediateReachTheReceiver)
{
	const nicmr_sge sg{u(b), 64, kb};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 1), 0);
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 2), 0);
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 3), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a), 16, ka, 0xcafe, 10, NICMR_SEND_IMM), 0);
	ASSERT_EQ(nicmr_post_send(qa, u("hi"), 2, 0, 0, 11, NICMR_SEND_INLINE), 0);
	ASSERT_EQ(nicmr_post_write_imm(qa, u(a), 4096, ka, u(b) + 8192, kb, 0xbeef, 12,
				       NICMR_SEND_SIGNALED),
		  0);
	nicmr_wc wc = wait_wc(rcq);
	EXPECT_EQ(wc.opcode, NICMR_WC_RECV_IMM);
	EXPECT_EQ(wc.imm, 0xcafeu);
	EXPECT_EQ(wc.byte_len, 16u);
	EXPECT_EQ(wc.wr_id, 1u);
	wc = wait_wc(rcq);
	EXPECT_EQ(wc.opcode, NICMR_WC_RECV);
	EXPECT_EQ(wc.byte_len, 2u);
	EXPECT_EQ(wc.wr_id, 2u);
	wc = wait_wc(rcq);
	EXPECT_EQ(wc.opcode, NICMR_WC_RECV_RDMA_WITH_IMM);
	EXPECT_EQ(wc.imm, 0xbeefu);
	EXPECT_EQ(wc.byte_len, 4096u);
	EXPECT_EQ(wc.wr_id, 3u);
	EXPECT_EQ(std::memcmp(b + 8192, a, 4096), 0);
	EXPECT_EQ(std::memcmp(b, "hi", 2), 0);
	wc = wait_wc(cqa);
	EXPECT_EQ(wc.opcode, NICMR_WC_RDMA_WRITE_IMM);
	EXPECT_EQ(wc.wr_id, 12u);
}

TEST_F(SendPath, ReceivesOnTheSendCqAreReportedThere)
{
	/* qa's receive queue completes on cqa, beside its sends. */
	const nicmr_sge sg{u(a) + 1000, 100, ka};
	ASSERT_EQ(nicmr_post_recv(qa, &sg, 1, 77), 0);
	ASSERT_EQ(nicmr_post_send(qb, u(b), 50, kb, 0, 78, NICMR_SEND_SIGNALED), 0);
	const nicmr_wc wc = wait_wc(cqa);
	EXPECT_EQ(wc.opcode, NICMR_WC_RECV);
	EXPECT_EQ(wc.wr_id, 77u);
	EXPECT_EQ(wc.qp_num, nicmr_qp_num(qa));
	EXPECT_EQ(wait_wc(cqb).wr_id, 78u);
}

TEST_F(SendPath, SendWithInvalidateOfANativeKeyIsRefusedByThePeer)
{
	const nicmr_sge sg{u(b), 64, kb};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 1), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a), 8, ka, kb, 2, NICMR_SEND_INVALIDATE), 0);
	nicmr_wc wc = wait_wc(cqa);
	EXPECT_EQ(wc.opcode, NICMR_WC_SEND);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_INVAL_REQ);
	wc = wait_wc(rcq);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_INVAL_REQ);
	EXPECT_EQ(wc.wr_id, 1u);
	/* The key still works locally: nothing invalidated it. */
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, kb, u(b), 8, NICMR_ACCESS_READ, &iova), 0);
}

TEST_F(SendPath, ErrorsOfTheReceiverCarryTheirStatus)
{
	const nicmr_sge sg{u(b), 10, kb};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 1), 0);
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 2), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a), 11, ka, 0, 3, 0), 0);
	nicmr_wc wc = wait_wc(rcq);
	EXPECT_EQ(wc.status, NICMR_WC_LOCAL_LEN);
	EXPECT_EQ(wc.syndrome, 0x01);
	EXPECT_EQ(wc.wr_id, 1u);
	wc = wait_wc(rcq);
	EXPECT_EQ(wc.status, NICMR_WC_WR_FLUSH);
	EXPECT_EQ(wc.wr_id, 2u);
	wc = wait_wc(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_INVAL_REQ);
	EXPECT_EQ(wc.wr_id, 3u);
	/* Both recover once their queues are empty. */
	EXPECT_EQ(nicmr_qp_recover(qa), 0);
	EXPECT_EQ(nicmr_qp_recover(qb), 0);
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 4), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a), 10, ka, 0, 5, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait_wc(rcq).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
}

TEST_F(SendPath, RecoverWaitsForPostedReceives)
{
	const nicmr_sge sg{u(b), 10, kb};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 1), 0);
	EXPECT_EQ(nicmr_qp_recover(qb), -EBUSY);
}

TEST_F(SendPath, RefusedArguments)
{
	const nicmr_sge sg[5] = {
		{u(b), 8, kb}, {u(b), 8, kb}, {u(b), 8, kb}, {u(b), 8, kb}, {u(b), 8, kb}};
	EXPECT_EQ(nicmr_post_recv(nullptr, sg, 1, 0), -EINVAL);
	EXPECT_EQ(nicmr_post_recv(qb, nullptr, 1, 0), -EINVAL);
	EXPECT_EQ(nicmr_post_recv(qb, sg, 5, 0), -EINVAL) << "above max_recv_sge";
	const nicmr_sge bad{u(b), 8, kb ^ 0x1};
	EXPECT_EQ(nicmr_post_recv(qb, &bad, 1, 0), -ENOKEY);
	for (int i = 0; i < 16; i++)
		ASSERT_EQ(nicmr_post_recv(qb, sg, 1, i), 0) << i;
	EXPECT_EQ(nicmr_post_recv(qb, sg, 1, 0), -ENOSPC);
	EXPECT_EQ(nicmr_post_send(qa, u(a), 8, ka, 1, 0, NICMR_SEND_IMM | NICMR_SEND_INVALIDATE),
		  -EINVAL);
	EXPECT_EQ(nicmr_post_send(qa, u(a), 8, 0, 1, 0, NICMR_SEND_INLINE | NICMR_SEND_IMM),
		  -EINVAL);
	EXPECT_EQ(nicmr_post_send(qa, u(a), NICMR_MAX_INLINE + 1, 0, 0, 0, NICMR_SEND_INLINE),
		  -EINVAL);
	EXPECT_EQ(nicmr_post_send(qa, u(a), 8, ka, 0, 0, 1u << 9), -EINVAL) << "unknown flag";
	EXPECT_EQ(nicmr_post_send(qa, u(a), 8, ka ^ 0x1, 0, 0, 0), -ENOKEY);
	EXPECT_EQ(nicmr_post_write_imm(qa, u(a), 8, ka, u(b), kb, 0, 0, NICMR_SEND_INLINE),
		  -EINVAL);
	EXPECT_EQ(nicmr_post_write_imm(qa, u(a), 8, ka, u(b), kb, 0, 0, NICMR_SEND_IMM), -EINVAL)
		<< "a send flag";
	/* A QP without a receive queue. */
	nicmr_qp *plain = nullptr;
	ASSERT_EQ(nicmr_qp_create(pd, 1, cqb, 8, &plain), 0);
	EXPECT_EQ(nicmr_post_recv(plain, sg, 1, 0), -ENOTSUP);
	EXPECT_EQ(nicmr_post_send(plain, u(a), 8, ka, 0, 0, 0), -ENOTCONN);
	EXPECT_EQ(nicmr_qp_destroy(plain), 0);
}

TEST_F(SendPath, CreateAttrRefusesWhatItCannotMake)
{
	nicmr_qp *q = nullptr;
	nicmr_qp_attr at{};
	at.port = 1;
	at.send_cq = cqb;
	at.depth = 8;
	EXPECT_EQ(nicmr_qp_create_attr(nullptr, &at, &q), -EINVAL);
	EXPECT_EQ(nicmr_qp_create_attr(pd, nullptr, &q), -EINVAL);
	at.recv_depth = 8;
	at.max_recv_sge = 0;
	EXPECT_EQ(nicmr_qp_create_attr(pd, &at, &q), -EINVAL) << "no SGE";
	at.max_recv_sge = NICMR_MAX_RECV_SGE + 1;
	EXPECT_EQ(nicmr_qp_create_attr(pd, &at, &q), -EINVAL);
	at.max_recv_sge = 1;
	at.recv_depth = 1;
	EXPECT_EQ(nicmr_qp_create_attr(pd, &at, &q), -EINVAL);
	at.recv_depth = 64; /* with the 8 sends, above cqb's 64 */
	EXPECT_EQ(nicmr_qp_create_attr(pd, &at, &q), -EINVAL);
	at.recv_cq = rcq; /* a CQ of its own holds 64 */
	ASSERT_EQ(nicmr_qp_create_attr(pd, &at, &q), 0);
	/* rcq has two QPs now: it cannot go before them. */
	EXPECT_EQ(nicmr_cq_destroy(rcq), -EBUSY);
	EXPECT_EQ(nicmr_qp_destroy(q), 0);
}

} // namespace
} // namespace nicmr::test
