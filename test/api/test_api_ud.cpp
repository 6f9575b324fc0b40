/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UD QPs through the native API on the device model's loopback (port 1 to port 2):
 * nicmr_qp_create_ud, nicmr_post_send_ud with and without immediate, nicmr_cq_poll_ud's source
 * QPN and GRH kind, nicmr_ud_grh_gids, a wrong Q_Key dropped, a receive too small, a datagram
 * above the MTU refused, and every refused argument with its code. The ports' GSI QPs
 * (NICMR_UD_QP_GSI): QP 1 to each other, one per port, a refused one leaving nothing behind,
 * QP 1 of a port without one dropped, and a UD QP's datagram to one dropped for its Q_Key.
 */
#include <cstddef>
#include <cstring>

#include "api_wiring.h"
#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;
constexpr uint32_t kQkeyA = 0x1000a, kQkeyB = 0x1000b;
constexpr uint32_t kGrh = NICMR_UD_GRH_BYTES;

/* flags took the place of a reserved word: the layout is the one callers were built with. */
static_assert(offsetof(nicmr_ud_qp_attr, flags) == 12 && offsetof(nicmr_ud_qp_attr, attr) == 16);

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
	at.flags = 2;
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

/* The GSI QPs of both ports (port 1: g1 on cq1, port 2: g2 on cq2) next to UdPath's QPs. */
class GsiPath : public UdPath {
protected:
	void SetUp() override
	{
		UdPath::SetUp();
		if (HasFatalFailure())
			return;
		ASSERT_EQ(nicmr_cq_create(dev, 64, &cq1), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &cq2), 0);
		nicmr_ud_qp_attr at = gsi_attr(1, cq1);
		ASSERT_EQ(nicmr_qp_create_ud(pd, &at, &g1), 0);
		at = gsi_attr(2, cq2);
		ASSERT_EQ(nicmr_qp_create_ud(pd, &at, &g2), 0);
		to_gsi.qpn = NICMR_GSI_QPN;
		to_gsi.q_key = NICMR_GSI_QKEY;
	}
	void TearDown() override
	{
		destroy_queues({g1, g2}, {cq1, cq2});
		UdPath::TearDown();
	}
	static nicmr_ud_qp_attr gsi_attr(uint32_t port, nicmr_cq *cq)
	{
		nicmr_ud_qp_attr a = ud_attr(port, cq, 0);
		a.flags = NICMR_UD_QP_GSI;
		return a;
	}
	emu::EmuDataPath &model() { return dev->emu->device().data_path(); }
	/* g1 sends len bytes to `to` through d (unsignaled); `to` receives them on its CQ from
	 * source QP 1. */
	void expect_from_gsi(nicmr_qp *to, nicmr_cq *to_cq, const nicmr_ud_dest &d, size_t len)
	{
		const nicmr_sge sg{u(b), 4096, kb};
		ASSERT_EQ(nicmr_post_recv(to, &sg, 1, 0x33), 0);
		ASSERT_EQ(nicmr_post_send_ud(g1, u(a), len, ka, &d, 0, 0x34, 0), 0);
		nicmr_wc wc{};
		nicmr_ud_info ud{};
		ASSERT_TRUE(wait_ud(to_cq, &wc, &ud));
		EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
		EXPECT_EQ(ud.src_qp, NICMR_GSI_QPN);
	}
	nicmr_cq *cq1 = nullptr, *cq2 = nullptr;
	nicmr_qp *g1 = nullptr, *g2 = nullptr;
	nicmr_ud_dest to_gsi{};
};

TEST_F(GsiPath, GsiQpsReachEachOtherAsQp1WithTheirQkey)
{
	EXPECT_NE(nicmr_qp_num(g1), NICMR_GSI_QPN) << "the device's own number";
	EXPECT_NE(nicmr_qp_num(g1), nicmr_qp_num(g2));
	struct Way {
		nicmr_qp *from, *to;
		nicmr_cq *from_cq, *to_cq;
		uint32_t q_key;
	};
	/* NICMR_GSI_QKEY and NICMR_UD_QKEY_OWN are the same to a GSI QP: its own. */
	for (const Way &w :
	     {Way{g1, g2, cq1, cq2, NICMR_GSI_QKEY}, Way{g2, g1, cq2, cq1, NICMR_UD_QKEY_OWN}}) {
		SCOPED_TRACE(nicmr_qp_port(w.from));
		std::memset(b, 0, 4096);
		const nicmr_sge sg{u(b), 256 + kGrh, kb};
		ASSERT_EQ(nicmr_post_recv(w.to, &sg, 1, 0x31), 0);
		nicmr_ud_dest d = to_gsi;
		d.q_key = w.q_key;
		ASSERT_EQ(
			nicmr_post_send_ud(w.from, u(a), 256, ka, &d, 0, 0x32, NICMR_SEND_SIGNALED),
			0);
		nicmr_wc wc{};
		nicmr_ud_info ud{};
		ASSERT_TRUE(wait_ud(w.to_cq, &wc, &ud));
		EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, NICMR_WC_RECV);
		EXPECT_EQ(wc.wr_id, 0x31u);
		EXPECT_EQ(wc.qp_num, nicmr_qp_num(w.to));
		EXPECT_EQ(wc.byte_len, 256 + kGrh);
		EXPECT_EQ(ud.src_qp, NICMR_GSI_QPN) << "a GSI QP sends as QP 1";
		EXPECT_EQ(std::memcmp(b + kGrh, a, 256), 0);
		ASSERT_TRUE(wait_ud(w.from_cq, &wc, &ud));
		EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, NICMR_WC_SEND);
		EXPECT_EQ(wc.wr_id, 0x32u);
	}
	/* A GSI QP sends to an ordinary UD QP too, with that QP's Q_Key: source QP 1. */
	expect_from_gsi(qb, cqb, to_b, 16);
	EXPECT_EQ(model().stats().ud_received, 3u);
}

TEST_F(GsiPath, OneGsiQpPerPortAndARefusedOneLeavesNothing)
{
	emu::EmuDataPath &m = model();
	const size_t qps = m.qps();
	const uint64_t objs = dev->dp_objs.load();
	nicmr_cq *cq = nullptr;
	ASSERT_EQ(nicmr_cq_create(dev, 64, &cq), 0);
	nicmr_qp *q = nullptr;
	for (const uint32_t port : {1u, 2u}) {
		nicmr_ud_qp_attr at = gsi_attr(port, cq);
		EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EBUSY) << port;
	}
	/* Refused arguments of a GSI QP: a Q_Key of its own, an unknown flag, a bad port, and
	 * what nicmr_qp_create_attr refuses (after the port was taken: given back). */
	nicmr_ud_qp_attr at = gsi_attr(1, cq);
	at.q_key = 5;
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	at = gsi_attr(1, cq);
	at.flags |= 2;
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	at = gsi_attr(3, cq);
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	at = gsi_attr(0, cq);
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	EXPECT_EQ(q, nullptr);
	EXPECT_EQ(m.qps(), qps) << "no QP on the device";
	EXPECT_EQ(dev->dp_objs.load(), objs + 1) << "the CQ alone";
	EXPECT_TRUE(m.check_invariants());

	/* Destroyed, a GSI QP gives its port back; a refused create takes nothing from it. */
	ASSERT_EQ(nicmr_qp_destroy(g1), 0);
	g1 = nullptr;
	at = gsi_attr(1, cq);
	at.attr.depth = 1;
	EXPECT_EQ(nicmr_qp_create_ud(pd, &at, &q), -EINVAL);
	at = gsi_attr(1, cq);
	ASSERT_EQ(nicmr_qp_create_ud(pd, &at, &g1), 0);
	EXPECT_EQ(m.qps(), qps);
	/* The new one is the port's QP 1. */
	const nicmr_sge sg{u(b), 4096, kb};
	ASSERT_EQ(nicmr_post_recv(g1, &sg, 1, 7), 0);
	ASSERT_EQ(nicmr_post_send_ud(g2, u(a), 8, ka, &to_gsi, 0, 8, 0), 0);
	nicmr_wc wc{};
	nicmr_ud_info ud{};
	ASSERT_TRUE(wait_ud(cq, &wc, &ud));
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.wr_id, 7u);
	EXPECT_EQ(ud.src_qp, NICMR_GSI_QPN);
	/* The CQ the refused creates named holds only g1: it goes once g1 does. */
	ASSERT_EQ(nicmr_qp_destroy(g1), 0);
	g1 = nullptr;
	EXPECT_EQ(nicmr_cq_destroy(cq), 0);
	EXPECT_EQ(dev->dp_objs.load(), objs - 1);
	EXPECT_TRUE(m.check_invariants());
}

/* nicmr_qp_recover takes the GSI QP through RESET: it is still its port's QP 1 after. */
TEST_F(GsiPath, RecoveredGsiQpIsStillQp1)
{
	ASSERT_EQ(nicmr_qp_recover(g2), 0);
	expect_from_gsi(g2, cq2, to_gsi, 8);
}

TEST_F(UdPath, DatagramToQp1OfAPortWithoutAGsiQpIsDropped)
{
	emu::EmuDataPath &m = dev->emu->device().data_path();
	const emu::DpStats before = m.stats();
	const nicmr_sge sg{u(b), 4096, kb};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 1), 0);
	nicmr_ud_dest d = to_b;
	d.qpn = NICMR_GSI_QPN;
	d.q_key = kQkeyB;
	ASSERT_EQ(nicmr_post_send_ud(qa, u(a), 8, ka, &d, 0, 2, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS) << "a datagram's send completes anyway";
	EXPECT_TRUE(quiet(cqb)) << "QP 1 is no other QP";
	const emu::DpStats after = m.stats();
	EXPECT_EQ(after.ud_dropped, before.ud_dropped + 1);
	EXPECT_EQ(after.ud_received, before.ud_received);
}

/* NICMR_GSI_QKEY has bit 31 set: a UD QP that names it sends its own Q_Key, which the GSI QP
 * drops (IBTA 10.2.5: a controlled Q_Key is the privileged QP's only). */
TEST_F(GsiPath, UdQpsDatagramToAGsiQpIsDroppedForItsQkey)
{
	emu::EmuDataPath &m = model();
	const nicmr_sge sg{u(b), 4096, kb};
	ASSERT_EQ(nicmr_post_recv(g2, &sg, 1, 1), 0);
	const emu::DpStats before = m.stats();
	for (const uint32_t q_key : {NICMR_GSI_QKEY, NICMR_UD_QKEY_OWN, kQkeyA}) {
		SCOPED_TRACE(q_key);
		nicmr_ud_dest d = to_gsi;
		d.q_key = q_key;
		ASSERT_EQ(nicmr_post_send_ud(qa, u(a), 8, ka, &d, 0, 2, NICMR_SEND_SIGNALED), 0);
		EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	}
	EXPECT_TRUE(quiet(cq2));
	const emu::DpStats after = m.stats();
	EXPECT_EQ(after.ud_qkey_dropped, before.ud_qkey_dropped + 3);
	EXPECT_EQ(after.ud_received, before.ud_received);
	/* The receive is still there for a GSI QP's datagram. */
	ASSERT_EQ(nicmr_post_send_ud(g1, u(a), 8, ka, &to_gsi, 0, 3, 0), 0);
	nicmr_wc wc{};
	nicmr_ud_info ud{};
	ASSERT_TRUE(wait_ud(cq2, &wc, &ud));
	EXPECT_EQ(wc.wr_id, 1u);
	EXPECT_EQ(ud.src_qp, NICMR_GSI_QPN);
}

} // namespace
} // namespace nicmr::test
