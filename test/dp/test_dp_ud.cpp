/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UD QPs between the device model's two ports through the driver (the in-process loopback):
 * datagrams with and without immediate land after a 40-byte GRH with the sender's QPN in the
 * CQE, a Q_Key other than the receiver's is dropped and counted, a bit-31 Q_Key means the
 * sender's own, a receive too small fails on the receiver only (LOCAL_LENGTH_ERR), no receive
 * posted drops the datagram, a datagram above the MTU is refused at posting (-EMSGSIZE) and,
 * posted anyway, completes with LOCAL_LENGTH_ERR, and RDMA opcodes on a UD QP fail. GSI QPs
 * (QpParams::gsi): QP 1 to each other with the well-known Q_Key, and the device's refusal of a
 * second one on a port.
 */
#include <cerrno>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "dp_rig.h"
#include "mlx5_wqe.h"

using namespace nicmr::testdp;

namespace {

constexpr uint8_t kCanary = 0xc5;
constexpr size_t kGrh = 40;
constexpr uint32_t kQkey = 0x11110000;

using Buf = RigBuf;

/* The rig with two UD QPs (one per port) in RTS, each with an RQ and its own receive CQ. */
struct UdRig : Rig {
	std::unique_ptr<mlx5::Cq> rcq[2];

	~UdRig()
	{
		for (auto &q : qp)
			q.reset();
		for (auto &c : rcq)
			c.reset();
	}

	int make_ud(const RigOptions &o, uint32_t mtu = prm::qp_mtu::mtu_1024)
	{
		int rc = make(o);
		if (rc != 0)
			return rc;
		for (auto &q : qp)
			q.reset();
		for (int i = 0; i < 2; i++) {
			mlx5::CqParams cp;
			cp.log_size = 8;
			cp.eqn = eq->eqn();
			if ((rc = mlx5::Cq::create(*dev, *uar, cp, &rcq[i])) != 0)
				return rc;
			mlx5::QpParams p;
			p.pd = pd.pd();
			p.port = static_cast<uint32_t>(i + 1);
			p.log_sq_size = 6;
			p.max_recv_sge = 2;
			p.log_rq_size = 5;
			p.recv_cq = rcq[i].get();
			p.ud = true;
			p.q_key = kQkey + static_cast<uint32_t>(i);
			p.mtu = mtu;
			if ((rc = mlx5::Qp::create(*dev, *uar, *cq[i], p, &qp[i])) != 0)
				return rc;
			if ((rc = qp[i]->connect(0)) != 0)
				return rc;
		}
		return 0;
	}

	int buf(size_t len, Buf *b)
	{
		return Rig::buf(len, ctx(true, true, false, false, false), kCanary, b);
	}

	bool no_recv(int i)
	{
		mlx5::Completion c;
		auto deadline = std::chrono::steady_clock::now() + 50ms;
		while (std::chrono::steady_clock::now() < deadline)
			if (qp[i]->poll_recv(&c, 1) != 0)
				return false;
		return true;
	}
	emu::DpStats stats() { return hw->device().data_path().stats(); }
	mlx5::UdDest to(int i, uint32_t q_key) const
	{
		mlx5::UdDest d;
		d.qpn = qp[i]->qpn();
		d.q_key = q_key;
		return d;
	}
};

class DpUd : public ::testing::TestWithParam<emu::DoorbellDelivery> {
protected:
	RigOptions opts()
	{
		RigOptions o;
		o.delivery = GetParam();
		return o;
	}
};

} // namespace

TEST_P(DpUd, DatagramLandsAfterTheGrhWithTheSendersQpn)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	Buf src, dst;
	ASSERT_EQ(r.buf(1024, &src), 0);
	ASSERT_EQ(r.buf(2048, &dst), 0);
	for (size_t i = 0; i < 1024; i++)
		src.p()[i] = static_cast<uint8_t>(i * 7 + 1);
	for (const bool imm : {false, true}) {
		SCOPED_TRACE(imm);
		std::memset(dst.p(), kCanary, 2048);
		/* Two SGEs: the GRH's 40 bytes and the payload across both. */
		const mlx5::Sge rs[2] = {dst.sge(0, 100), dst.sge(100, 1000)};
		ASSERT_EQ(r.qp[1]->post_recv(rs, 7), 0);
		const mlx5::Sge s = src.sge(0, 1024);
		ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, r.to(1, kQkey + 1), imm, 0xabcd0123, 8,
						mlx5::kSignaled),
			  0);
		mlx5::Completion c;
		ASSERT_TRUE(r.wait_recv(1, &c));
		EXPECT_TRUE(c.ok());
		EXPECT_EQ(c.opcode, imm ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND);
		EXPECT_EQ(c.byte_len, 1024 + kGrh);
		EXPECT_EQ(c.src_qpn, r.qp[0]->qpn());
		EXPECT_TRUE(c.grh);
		EXPECT_EQ(c.wr_id, 7u);
		if (imm) {
			EXPECT_EQ(c.imm, 0xabcd0123u);
		}
		EXPECT_EQ(std::memcmp(dst.p() + kGrh, src.p(), 1024), 0);
		EXPECT_EQ(dst.p()[kGrh + 1024], kCanary) << "past the datagram";
		ASSERT_TRUE(r.wait(0, &c));
		EXPECT_TRUE(c.ok());
		EXPECT_EQ(c.opcode, MLX5_CQE_REQ);
		EXPECT_EQ(c.wr_id, 8u);
		EXPECT_EQ(c.byte_len, 1024u);
	}
	EXPECT_EQ(r.stats().ud_sent, 2u);
	EXPECT_EQ(r.stats().ud_received, 2u);
}

/* A loopback port has no GID (its table is empty): the GRH is an IPv6 header (the GID given
 * is not IPv4-mapped) from :: to the destination GID the WQE named; an IPv4-mapped GID gives
 * 20 zero bytes and an IPv4 header with a valid checksum (Linux rdma_network_hdr). */
TEST_P(DpUd, GrhIsTheNetworkHeaderTheDatagramTravelledIn)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	Buf src, dst;
	ASSERT_EQ(r.buf(64, &src), 0);
	ASSERT_EQ(r.buf(256, &dst), 0);
	const mlx5::Sge rs = dst.sge(0, 256), s = src.sge(0, 10);
	mlx5::UdDest d = r.to(1, kQkey + 1);
	d.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 1), 0);
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, d, false, 0, 2, 0), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.l3_hdr_type, MLX5_CQE_L3_HDR_TYPE_IPV6);
	EXPECT_EQ(dst.p()[0] >> 4, 6);
	EXPECT_EQ(dst.p()[6], 17); /* next header UDP */
	/* payload length: UDP 8 + BTH 12 + DETH 8 + 10 + pad 2 + ICRC 4 */
	EXPECT_EQ(dst.p()[4] << 8 | dst.p()[5], 8 + 12 + 8 + 10 + 2 + 4);
	EXPECT_EQ(std::memcmp(dst.p() + 24, d.gid.data(), 16), 0);

	d.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7};
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 3), 0);
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, d, false, 0, 4, 0), 0);
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.l3_hdr_type, MLX5_CQE_L3_HDR_TYPE_IPV4);
	for (int i = 0; i < 20; i++)
		EXPECT_EQ(dst.p()[i], 0) << i;
	const uint8_t *ip = dst.p() + 20;
	EXPECT_EQ(ip[0], 0x45);
	EXPECT_EQ(ip[9], 17);
	EXPECT_EQ(std::memcmp(ip + 16, d.gid.data() + 12, 4), 0);
	uint32_t sum = 0;
	for (int i = 0; i < 20; i += 2)
		sum += static_cast<uint32_t>(ip[i] << 8 | ip[i + 1]);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	EXPECT_EQ(sum, 0xffffu) << "the IPv4 header checksum verifies";
}

TEST_P(DpUd, WrongQkeyIsDroppedSilentlyAndCounted)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	Buf src, dst;
	ASSERT_EQ(r.buf(64, &src), 0);
	ASSERT_EQ(r.buf(256, &dst), 0);
	const mlx5::Sge rs = dst.sge(0, 256), s = src.sge(0, 64);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 1), 0);
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, r.to(1, kQkey + 5), false, 0, 2, mlx5::kSignaled),
		  0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok()) << "the sender never hears of a drop";
	EXPECT_TRUE(r.no_recv(1));
	EXPECT_EQ(r.stats().ud_qkey_dropped, 1u);
	EXPECT_EQ(dst.p()[0], kCanary);
	/* The receive WQE is still posted: the next datagram with the right key takes it. */
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, r.to(1, kQkey + 1), false, 0, 3, 0), 0);
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.wr_id, 1u);
}

/* IBTA 10.2.5: a Q_Key with bit 31 set in the WQE sends the sending QP's own Q_Key. */
TEST_P(DpUd, HighBitQkeyMeansTheSendersOwn)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	Buf src, dst;
	ASSERT_EQ(r.buf(64, &src), 0);
	ASSERT_EQ(r.buf(256, &dst), 0);
	const mlx5::Sge rs = dst.sge(0, 256), s = src.sge(0, 8);
	/* QP 1 sends to itself with its own Q_Key by the bit-31 form. */
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 1), 0);
	ASSERT_EQ(r.qp[1]->post_ud_send({&s, 1}, r.to(1, 0x80000000), false, 0, 2, 0), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.src_qpn, r.qp[1]->qpn());
	/* QP 0's own Q_Key is not QP 1's: dropped. */
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 3), 0);
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, r.to(1, 0x80000000), false, 0, 4, 0), 0);
	EXPECT_TRUE(r.no_recv(1));
	EXPECT_EQ(r.stats().ud_qkey_dropped, 1u);
}

TEST_P(DpUd, ReceiveTooSmallFailsOnTheReceiverOnly)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	Buf src, dst;
	ASSERT_EQ(r.buf(256, &src), 0);
	ASSERT_EQ(r.buf(256, &dst), 0);
	/* 100 bytes of payload need 140: 139 is one short. */
	const mlx5::Sge rs = dst.sge(0, 139), s = src.sge(0, 100);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 1), 0);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 2), 0);
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, r.to(1, kQkey + 1), false, 0, 3, mlx5::kSignaled),
		  0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_RESP_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	EXPECT_EQ(c.wr_id, 1u);
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << "the receiver's QP is in ERR";
	EXPECT_EQ(c.wr_id, 2u);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok()) << "the sender completes without error";
	uint32_t st = 0;
	ASSERT_EQ(r.qp[1]->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::err);
	ASSERT_EQ(r.qp[0]->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::rts);
}

TEST_P(DpUd, NoReceivePostedDropsTheDatagram)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	Buf src;
	ASSERT_EQ(r.buf(64, &src), 0);
	const mlx5::Sge s = src.sge(0, 64);
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, r.to(1, kQkey + 1), false, 0, 1, mlx5::kSignaled),
		  0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(r.stats().ud_no_recv, 1u);
	EXPECT_EQ(r.stats().rnr, 0u) << "UD has no RNR";
	/* A QPN that is no UD QP: dropped too. */
	mlx5::UdDest d = r.to(1, kQkey + 1);
	d.qpn = 0xfffff0;
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, d, false, 0, 2, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(r.stats().ud_dropped, 1u);
}

TEST_P(DpUd, DatagramAboveTheMtuIsRefusedAtPosting)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts(), prm::qp_mtu::mtu_256), 0);
	EXPECT_EQ(r.qp[0]->mtu_bytes(), 256u);
	Buf src, dst;
	ASSERT_EQ(r.buf(512, &src), 0);
	ASSERT_EQ(r.buf(512, &dst), 0);
	const mlx5::Sge rs = dst.sge(0, 512);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 1), 0);
	const mlx5::Sge two[2] = {src.sge(0, 200), src.sge(200, 57)};
	EXPECT_EQ(r.qp[0]->post_ud_send(two, r.to(1, kQkey + 1), false, 0, 2, mlx5::kSignaled),
		  -EMSGSIZE);
	EXPECT_EQ(r.qp[0]->sq_room(), r.qp[0]->sq_size()) << "nothing posted";
	/* Exactly the MTU goes. */
	const mlx5::Sge mtu = src.sge(0, 256);
	ASSERT_EQ(
		r.qp[0]->post_ud_send({&mtu, 1}, r.to(1, kQkey + 1), false, 0, 3, mlx5::kSignaled),
		0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait_recv(1, &c));
	EXPECT_EQ(c.byte_len, 256 + kGrh);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
}

/* A WQE built by hand past the driver's check: the device completes it with
 * LOCAL_LENGTH_ERR and sends nothing. */
TEST_P(DpUd, DeviceRefusesADatagramAboveTheMtuWithLocalLengthError)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts(), prm::qp_mtu::mtu_256), 0);
	Buf src, dst;
	ASSERT_EQ(r.buf(512, &src), 0);
	ASSERT_EQ(r.buf(512, &dst), 0);
	const mlx5::Sge rs = dst.sge(0, 512);
	ASSERT_EQ(r.qp[1]->post_recv({&rs, 1}, 1), 0);
	mlx5::WqeSlot w;
	ASSERT_EQ(r.qp[0]->begin(5, &w), 0);
	const std::array<uint8_t, 16> gid{};
	mlx5::set_datagram(w.cur.take(prm::wqe_datagram::size), gid.data(), r.qp[1]->qpn(),
			   kQkey + 1, 0);
	mlx5::set_data(static_cast<mlx5_wqe_data_seg *>(w.cur.take(prm::wqe_data::size)),
		       src.addr(), 257, src.mr.key);
	r.qp[0]->finish(w, MLX5_OPCODE_SEND, 5, 0, 9, mlx5::kSignaled);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	EXPECT_TRUE(r.no_recv(1));
	EXPECT_EQ(r.stats().ud_sent, 0u);
}

TEST_P(DpUd, RdmaOnAUdQpFailsWithLocalQpOperationError)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	Buf src;
	ASSERT_EQ(r.buf(64, &src), 0);
	const mlx5::Sge s = src.sge(0, 8);
	ASSERT_EQ(r.qp[0]->post_write({&s, 1}, src.addr(), src.mr.key, 1, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
}

TEST_P(DpUd, DriverRefusals)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	Buf src;
	ASSERT_EQ(r.buf(64, &src), 0);
	const mlx5::Sge s = src.sge(0, 8);
	mlx5::UdDest d = r.to(1, kQkey + 1);
	d.qpn = 0x1000000;
	EXPECT_EQ(r.qp[0]->post_ud_send({&s, 1}, d, false, 0, 1, 0), -EINVAL);
	std::vector<mlx5::Sge> many(mlx5::Qp::max_ud_sge() + 1, s);
	EXPECT_EQ(r.qp[0]->post_ud_send(many, r.to(1, kQkey + 1), false, 0, 1, 0), -EINVAL);
	/* An RC QP takes no UD send; a UD QP takes no responder enables or UMR. */
	Rig rc;
	ASSERT_EQ(rc.make(opts()), 0);
	EXPECT_EQ(rc.qp[0]->post_ud_send({&s, 1}, r.to(1, 1), false, 0, 1, 0), -ENOTSUP);
	mlx5::QpParams p;
	p.pd = r.pd.pd();
	p.ud = true;
	p.rwe = true;
	std::unique_ptr<mlx5::Qp> q;
	EXPECT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &q), -EINVAL);
	p.rwe = false;
	p.umr = true;
	EXPECT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &q), -EINVAL);
}

/* INIT2RTR of a UD QP takes opt_param_mask Q_KEY (a new Q_Key from then on) and refuses an RC
 * optional parameter (BAD_PARAM qp_opt_param: -EINVAL), as Linux's opt_mask for UD allows. */
TEST_P(DpUd, Init2RtrChangesTheQkeyWithItsOptionalParameter)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	mlx5::QpParams p;
	p.pd = r.pd.pd();
	p.port = 2;
	p.log_sq_size = 6;
	p.max_recv_sge = 1;
	p.log_rq_size = 5;
	p.recv_cq = r.rcq[1].get();
	p.ud = true;
	p.q_key = 0x1234;
	std::unique_ptr<mlx5::Qp> q;
	ASSERT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[1], p, &q), 0);
	ASSERT_EQ(q->to_init(), 0);
	mlx5::QpAttr a;
	a.port = 2;
	a.pd = p.pd;
	a.mtu = prm::qp_mtu::mtu_1024;
	a.ud = true;
	a.q_key = 0x5678;
	a.opt_param_mask = prm::qp_optpar::rre;
	EXPECT_EQ(mlx5::init2rtr_qp(r.dev->cmdq(), q->qpn(), a), -EINVAL);
	a.opt_param_mask = prm::qp_optpar::q_key;
	ASSERT_EQ(mlx5::init2rtr_qp(r.dev->cmdq(), q->qpn(), a), 0);
	ASSERT_EQ(q->to_rts(), 0); /* RTR2RTS without Q_KEY: 0x5678 stays */
	Buf src, dst;
	ASSERT_EQ(r.buf(64, &src), 0);
	ASSERT_EQ(r.buf(256, &dst), 0);
	const mlx5::Sge rs = dst.sge(0, 256), s = src.sge(0, 16);
	ASSERT_EQ(q->post_recv({&rs, 1}, 1), 0);
	mlx5::UdDest d;
	d.qpn = q->qpn();
	d.q_key = 0x1234; /* the creation's: replaced */
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, d, false, 0, 2, 0), 0);
	mlx5::Completion c;
	auto deadline = std::chrono::steady_clock::now() + 50ms;
	while (std::chrono::steady_clock::now() < deadline)
		ASSERT_EQ(q->poll_recv(&c, 1), 0);
	EXPECT_EQ(r.stats().ud_qkey_dropped, 1u);
	d.q_key = 0x5678;
	ASSERT_EQ(r.qp[0]->post_ud_send({&s, 1}, d, false, 0, 3, 0), 0);
	deadline = std::chrono::steady_clock::now() + 5s;
	int n = 0;
	while (n == 0 && std::chrono::steady_clock::now() < deadline)
		n = q->poll_recv(&c, 1);
	ASSERT_EQ(n, 1);
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.src_qpn, r.qp[0]->qpn());
	q.reset();
}

/* A GSI QP of each port: datagrams to QP 1 arrive from source QP 1. A second GSI QP of a port
 * is the device's to refuse (RESOURCE_BUSY at RST2INIT: -EBUSY); its destroy leaves nothing. */
TEST_P(DpUd, GsiQpsAreQp1AndOnePerPort)
{
	UdRig r;
	ASSERT_EQ(r.make_ud(opts()), 0);
	std::unique_ptr<mlx5::Qp> g[2];
	for (int i = 0; i < 2; i++) {
		r.qp[i].reset(); /* the CQs now serve the GSI QPs */
		mlx5::QpParams p;
		p.pd = r.pd.pd();
		p.port = static_cast<uint32_t>(i + 1);
		p.log_sq_size = 6;
		p.max_recv_sge = 1;
		p.log_rq_size = 5;
		p.recv_cq = r.rcq[i].get();
		p.gsi = true;
		p.q_key = 0x1234; /* not looked at: a GSI QP has the well-known one */
		ASSERT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[i], p, &g[i]), 0);
		ASSERT_EQ(g[i]->connect(0), 0);
		EXPECT_TRUE(g[i]->ud());
		EXPECT_TRUE(g[i]->gsi());
		EXPECT_NE(g[i]->qpn(), prm::gsi::qpn);
	}
	Buf src, dst;
	ASSERT_EQ(r.buf(256, &src), 0);
	ASSERT_EQ(r.buf(512, &dst), 0);
	const mlx5::Sge rs = dst.sge(0, 512), s = src.sge(0, 256);
	ASSERT_EQ(g[1]->post_recv({&rs, 1}, 1), 0);
	mlx5::UdDest d;
	d.qpn = prm::gsi::qpn;
	d.q_key = prm::gsi::q_key; /* bit 31: the sender's own, the same */
	ASSERT_EQ(g[0]->post_ud_send({&s, 1}, d, false, 0, 2, mlx5::kSignaled), 0);
	mlx5::Completion c;
	const auto deadline = std::chrono::steady_clock::now() + 5s;
	int got = 0;
	while (got == 0 && std::chrono::steady_clock::now() < deadline)
		got = g[1]->poll_recv(&c, 1);
	ASSERT_EQ(got, 1);
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.src_qpn, prm::gsi::qpn);
	EXPECT_EQ(c.byte_len, 256 + kGrh);
	EXPECT_EQ(std::memcmp(dst.p() + kGrh, src.p(), 256), 0);

	emu::EmuDataPath &m = r.hw->device().data_path();
	const size_t qps = m.qps();
	mlx5::QpParams p;
	p.pd = r.pd.pd();
	p.port = 1;
	p.log_sq_size = 6;
	p.gsi = true;
	std::unique_ptr<mlx5::Qp> second;
	ASSERT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &second), 0);
	EXPECT_EQ(second->connect(0), -EBUSY);
	uint32_t st = 0;
	ASSERT_EQ(second->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::rst);
	second.reset();
	EXPECT_EQ(m.qps(), qps);
	EXPECT_TRUE(m.check_invariants());
	for (auto &q : g)
		q.reset();
}

INSTANTIATE_TEST_SUITE_P(Delivery, DpUd,
			 ::testing::Values(emu::DoorbellDelivery::inline_call,
					   emu::DoorbellDelivery::poll_thread));
