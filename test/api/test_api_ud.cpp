/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UD QPs through the native API on the device model's loopback (port 1 to port 2):
 * nicmr_qp_create_ud, nicmr_post_send_ud with and without immediate, nicmr_cq_poll_ud's source
 * QPN and GRH kind, nicmr_ud_grh_gids, a wrong Q_Key dropped, a receive too small, a datagram
 * above the MTU refused, and every refused argument with its code.
 */
#include <cstring>

#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;
constexpr uint32_t kQkeyA = 0x1000a, kQkeyB = 0x1000b;
constexpr uint32_t kGrh = NICMR_UD_GRH_BYTES;

nicmr_ud_qp_attr ud_attr(uint32_t port, nicmr_cq *cq, uint32_t q_key, uint32_t mtu = 0)
{
	nicmr_ud_qp_attr a{};
	a.size = sizeof(a);
	a.q_key = q_key;
	a.mtu = mtu;
	a.attr.port = port;
	a.attr.send_cq = cq;
	a.attr.depth = 16;
	a.attr.recv_depth = 16;
	a.attr.max_recv_sge = 2;
	return a;
}

/* One completion and its datagram side (up to 5 s). */
bool wait_ud(nicmr_cq *cq, nicmr_wc *wc, nicmr_ud_info *ud)
{
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (std::chrono::steady_clock::now() < end)
		if (nicmr_cq_poll_ud(cq, wc, ud, 1) == 1)
			return true;
	return false;
}

/* Nothing completes on cq for 50 ms. */
bool quiet(nicmr_cq *cq)
{
	nicmr_wc wc{};
	const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
	while (std::chrono::steady_clock::now() < end)
		if (nicmr_cq_poll(cq, &wc, 1) != 0)
			return false;
	return true;
}

/* UD QP a on port 1 (its CQ cqa), UD QP b on port 2 (cqb); one buffer each. */
class UdPath : public ApiFixture {
protected:
	void SetUp() override
	{
		ApiFixture::SetUp();
		ASSERT_EQ(nicmr_cq_create(dev, 64, &cqa), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &cqb), 0);
		nicmr_ud_qp_attr at = ud_attr(1, cqa, kQkeyA);
		ASSERT_EQ(nicmr_qp_create_ud(pd, &at, &qa), 0);
		at = ud_attr(2, cqb, kQkeyB);
		ASSERT_EQ(nicmr_qp_create_ud(pd, &at, &qb), 0);
		a = base;
		b = base + kLen;
		ASSERT_EQ(nicmr_mr_reg(pd, a, kLen, kAll, 0, 0, &mra), 0);
		ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, 0, 0, &mrb), 0);
		ka = nicmr_mr_key(mra);
		kb = nicmr_mr_key(mrb);
		for (size_t i = 0; i < kLen; i++)
			a[i] = static_cast<char>(i * 7 + 1);
		std::memset(b, 0, kLen);
		to_b.qpn = nicmr_qp_num(qb);
		to_b.q_key = kQkeyB;
		/* An IPv4-mapped GID: the loopback's GRH is then an IPv4 header to it. */
		const uint8_t g[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
		std::memcpy(to_b.gid, g, 16);
	}
	void TearDown() override
	{
		for (nicmr_mr *m : {mra, mrb})
			if (m) {
				EXPECT_EQ(nicmr_mr_dereg(m), 0);
			}
		destroy_queues({qa, qb}, {cqa, cqb});
		ApiFixture::TearDown();
	}
	nicmr_cq *cqa = nullptr, *cqb = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	nicmr_mr *mra = nullptr, *mrb = nullptr;
	char *a = nullptr, *b = nullptr;
	uint32_t ka = 0, kb = 0;
	nicmr_ud_dest to_b{};
};

TEST_F(UdPath, DatagramsArriveAfterTheGrhWithTheirSource)
{
	for (const bool imm : {false, true}) {
		SCOPED_TRACE(imm);
		std::memset(b, 0, 4096);
		const nicmr_sge sg[2] = {{u(b), 30, kb}, {u(b) + 100, 2000, kb}};
		ASSERT_EQ(nicmr_post_recv(qb, sg, 2, 0x77), 0);
		ASSERT_EQ(nicmr_post_send_ud(qa, u(a), 1500, ka, &to_b, 0xfeed, 0x55,
					     NICMR_SEND_SIGNALED | (imm ? NICMR_SEND_IMM : 0)),
			  0);
		nicmr_wc wc{};
		nicmr_ud_info ud{};
		ASSERT_TRUE(wait_ud(cqb, &wc, &ud));
		EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, imm ? NICMR_WC_RECV_IMM : NICMR_WC_RECV);
		EXPECT_EQ(wc.imm, imm ? 0xfeedu : 0u);
		EXPECT_EQ(wc.byte_len, 1500 + kGrh);
		EXPECT_EQ(wc.wr_id, 0x77u);
		EXPECT_EQ(ud.src_qp, nicmr_qp_num(qa));
		EXPECT_EQ(ud.flags, NICMR_UD_GRH);
		EXPECT_EQ(ud.net_type, NICMR_UD_NET_IPV4);
		/* 30 bytes in the first SGE: the GRH's first 30; the rest and the data after. */
		char grh[kGrh];
		std::memcpy(grh, b, 30);
		std::memcpy(grh + 30, b + 100, kGrh - 30);
		uint8_t src[16], dst[16];
		ASSERT_EQ(nicmr_ud_grh_gids(grh, ud.net_type, src, dst), 0);
		EXPECT_EQ(std::memcmp(dst, to_b.gid, 16), 0);
		const uint8_t lo_src[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};
		EXPECT_EQ(std::memcmp(src, lo_src, 16), 0) << "a loopback port has no address";
		EXPECT_EQ(std::memcmp(b + 100 + (kGrh - 30), a, 1500), 0);
		ASSERT_TRUE(wait_ud(cqa, &wc, &ud));
		EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, NICMR_WC_SEND);
		EXPECT_EQ(wc.wr_id, 0x55u);
		EXPECT_EQ(ud.src_qp, 0u) << "a send completion has no datagram side";
		EXPECT_EQ(ud.flags, 0u);
	}
}

TEST_F(UdPath, WrongQkeyIsDroppedAndOwnQkeyIsTheSenders)
{
	const nicmr_sge sg{u(b), 4096, kb};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 1), 0);
	nicmr_ud_dest d = to_b;
	d.q_key = kQkeyA; /* not b's */
	ASSERT_EQ(nicmr_post_send_ud(qa, u(a), 8, ka, &d, 0, 2, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_TRUE(quiet(cqb));
	/* NICMR_UD_QKEY_OWN: a's own Q_Key, still not b's. */
	d.q_key = NICMR_UD_QKEY_OWN;
	ASSERT_EQ(nicmr_post_send_ud(qa, u(a), 8, ka, &d, 0, 3, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_TRUE(quiet(cqb));
	/* b to itself with its own: taken by the receive still posted. */
	ASSERT_EQ(nicmr_post_send_ud(qb, u(b) + 8192, 8, kb, &d, 0, 4, 0), 0);
	nicmr_wc wc{};
	nicmr_ud_info ud{};
	ASSERT_TRUE(wait_ud(cqb, &wc, &ud));
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.wr_id, 1u);
	EXPECT_EQ(ud.src_qp, nicmr_qp_num(qb));
}

TEST_F(UdPath, ReceiveTooSmallIsALocalLengthErrorOnTheReceiverOnly)
{
	const nicmr_sge sg{u(b), kGrh + 99, kb};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 1), 0);
	ASSERT_EQ(nicmr_post_send_ud(qa, u(a), 100, ka, &to_b, 0, 2, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc = wait_wc(cqb);
	EXPECT_EQ(wc.status, NICMR_WC_LOCAL_LEN);
	EXPECT_EQ(wc.syndrome, 0x01);
	EXPECT_EQ(wc.wr_id, 1u);
	wc = wait_wc(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	uint32_t st = 0;
	ASSERT_EQ(nicmr_qp_state(qb, &st), 0);
	EXPECT_EQ(st, uint32_t{NICMR_QP_ERR});
	ASSERT_EQ(nicmr_qp_state(qa, &st), 0);
	EXPECT_EQ(st, uint32_t{NICMR_QP_RTS});
	/* nicmr_qp_recover brings it back to RTS, with its Q_Key: a datagram lands again. */
	ASSERT_EQ(nicmr_qp_recover(qb), 0);
	ASSERT_EQ(nicmr_qp_state(qb, &st), 0);
	EXPECT_EQ(st, uint32_t{NICMR_QP_RTS});
	const nicmr_sge big{u(b), 4096, kb};
	ASSERT_EQ(nicmr_post_recv(qb, &big, 1, 3), 0);
	ASSERT_EQ(nicmr_post_send_ud(qa, u(a), 100, ka, &to_b, 0, 4, 0), 0);
	wc = wait_wc(cqb);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.wr_id, 3u);
	EXPECT_EQ(wc.byte_len, 100 + kGrh);
}

TEST_F(UdPath, DatagramAboveTheMtuIsRefused)
{
	EXPECT_EQ(nicmr_post_send_ud(qa, u(a), 4097, ka, &to_b, 0, 1, 0), -EMSGSIZE);
	nicmr_qp *small = nullptr;
	nicmr_ud_qp_attr at = ud_attr(1, cqa, 1, 512);
	at.attr.recv_depth = 0;
	ASSERT_EQ(nicmr_qp_create_ud(pd, &at, &small), 0);
	EXPECT_EQ(nicmr_post_send_ud(small, u(a), 513, ka, &to_b, 0, 1, 0), -EMSGSIZE);
	const nicmr_sge sg{u(b), 4096, kb};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 1), 0);
	ASSERT_EQ(nicmr_post_send_ud(small, u(a), 512, ka, &to_b, 0, 2, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait_wc(cqb).byte_len, 512 + kGrh);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(nicmr_qp_destroy(small), 0);
}

TEST_F(UdPath, RefusedArgumentsHaveTheirCodes)
{
	nicmr_qp *q = nullptr;
	nicmr_ud_qp_attr at = ud_attr(1, cqa, 5);
	EXPECT_EQ(nicmr_qp_create_ud(nullptr, &at, &q), -EINVAL);
	EXPECT_EQ(nicmr_qp_create_ud(pd, nullptr, &q), -EINVAL);
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, nullptr), -EINVAL);
	at.size = sizeof(at) - 1;
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	at = ud_attr(1, cqa, NICMR_UD_QKEY_OWN | 5);
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	at = ud_attr(1, cqa, 5, 1500);
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	at = ud_attr(1, cqa, 5);
	at.reserved = 1;
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	at = ud_attr(3, cqa, 5);
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	EXPECT_EQ(q, nullptr);

	EXPECT_EQ(nicmr_post_send_ud(nullptr, u(a), 8, ka, &to_b, 0, 1, 0), -EINVAL);
	EXPECT_EQ(nicmr_post_send_ud(qa, u(a), 8, ka, nullptr, 0, 1, 0), -EINVAL);
	EXPECT_EQ(nicmr_post_send_ud(qa, u(a), 8, ka, &to_b, 0, 1, NICMR_SEND_INLINE), -EINVAL);
	EXPECT_EQ(nicmr_post_send_ud(qa, u(a), 8, ka, &to_b, 0, 1, NICMR_SEND_INVALIDATE), -EINVAL);
	nicmr_ud_dest d = to_b;
	d.qpn = 0x1000000;
	EXPECT_EQ(nicmr_post_send_ud(qa, u(a), 8, ka, &d, 0, 1, 0), -EINVAL);
	EXPECT_EQ(nicmr_post_send_ud(qa, u(a), 8, ka ^ 0x100, &to_b, 0, 1, 0), -ENOKEY);
	/* RC work on a UD QP, UD work on an RC QP. */
	EXPECT_EQ(nicmr_post_write(qa, u(a), 8, ka, u(b), kb, 1, 0), -ENOTSUP);
	EXPECT_EQ(nicmr_post_send(qa, u(a), 8, ka, 0, 1, 0), -ENOTSUP);
	EXPECT_EQ(nicmr_post_read(qa, u(a), 8, ka, u(b), kb, 1, 0), -ENOTSUP);
	nicmr_cq *c1 = nullptr, *c2 = nullptr;
	nicmr_qp *r1 = nullptr, *r2 = nullptr;
	connect_ports(dev, pd, &c1, &c2, &r1, &r2);
	EXPECT_EQ(nicmr_post_send_ud(r1, u(a), 8, ka, &to_b, 0, 1, 0), -ENOTSUP);
	/* A UD QP is in RTS already: no connection. */
	EXPECT_EQ(nicmr_qp_connect(qa, 2, nicmr_qp_num(r2)), -EINVAL);
	nicmr_qp_remote rem{};
	rem.size = sizeof(rem);
	rem.qpn = 5;
	rem.gid[15] = 1;
	EXPECT_EQ(nicmr_qp_connect_remote(qa, &rem), -EISCONN);
	destroy_queues({r1, r2}, {c1, c2});

	nicmr_wc wc{};
	EXPECT_EQ(nicmr_cq_poll_ud(cqa, &wc, nullptr, 1), -EINVAL);
	EXPECT_EQ(nicmr_cq_poll_ud(cqa, &wc, nullptr, 0), 0);
	uint8_t grh[kGrh] = {}, g[16];
	EXPECT_EQ(nicmr_ud_grh_gids(nullptr, NICMR_UD_NET_IPV4, g, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_ud_grh_gids(grh, NICMR_UD_NET_IPV4, nullptr, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_ud_grh_gids(grh, NICMR_UD_NET_IPV4, g, nullptr), -EINVAL) << "not IPv4";
	EXPECT_EQ(nicmr_ud_grh_gids(grh, NICMR_UD_NET_IPV6, g, nullptr), -EINVAL) << "not IPv6";
	EXPECT_EQ(nicmr_ud_grh_gids(grh, 3, g, nullptr), -EINVAL);
	grh[0] = 0x60;
	EXPECT_EQ(nicmr_ud_grh_gids(grh, NICMR_UD_NET_IPV6, g, nullptr), 0);
}

} // namespace
} // namespace nicmr::test
