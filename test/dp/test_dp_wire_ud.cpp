/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UD QPs over the UDP wire between two processes (the rig of test_dp_wire.cpp: fork, each side
 * its own emulated ConnectX with port 1 on the wire at 127.0.0.1). The child runs a UD echo:
 * each datagram it receives goes back to the QPN and GID it came from, with the source QPN its
 * CQE reported as the immediate. The parent checks the datagrams, the GRH (the IPv4 header
 * between the two addresses), the source QPN, a Q_Key mismatch dropped and counted by the
 * child, and the UD packets on the wire counted as sent and received.
 */
#include <poll.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include "wire_rig.h"

using namespace wire_rig;

namespace {

constexpr uint32_t kQkey = 0x0badcafe;
constexpr uint32_t kGrh = 40;

/* Both sides' UD QP: RTS with a receive queue of 32 WQEs of one SGE. */
int make_ud(Side &s, uint32_t q_key)
{
	mlx5::QpParams q;
	q.pd = s.pd.pd();
	q.port = 1;
	q.log_sq_size = 6;
	q.mtu = prm::qp_mtu::mtu_4096;
	q.max_recv_sge = 1;
	q.log_rq_size = 5;
	q.recv_cq = s.rcq.get();
	q.ud = true;
	q.q_key = q_key;
	int rc = mlx5::Qp::create(*s.dev, *s.uar, *s.cq, q, &s.qp);
	return rc != 0 ? rc : s.qp->connect(0);
}

struct Hello {
	uint8_t gid[16];
	uint32_t qpn;
};

/* What the child says when told to stop: its counters. */
struct Report {
	uint64_t received, qkey_dropped, echoed;
	uint64_t rx_packets, tx_packets;
};

constexpr uint32_t kSlot = 8192; /* one receive buffer */

int echo(int fd, const WireOptions &o)
{
	Side s;
	if (s.open(o) != 0)
		return 10;
	if (make_ud(s, kQkey) != 0)
		return 11;
	uint32_t key = 0;
	if (s.mr(0, kRegion * 2, true, true, false, false, false, false, &key) != 0)
		return 12;
	/* The receives first: a datagram that finds none is lost (UD has no RNR), and the parent
	 * sends as soon as it has our QPN. */
	const uint32_t slots = 8; /* 8 buffers of 8 KiB: 64 KiB */
	for (uint32_t i = 0; i < slots; i++) {
		const mlx5::Sge r{s.addr(i * kSlot), kSlot, key};
		if (s.qp->post_recv({&r, 1}, i) != 0)
			return 14;
	}
	Hello me{}, peer{};
	std::memcpy(me.gid, s.gid.gid.data(), 16);
	me.qpn = s.qp->qpn();
	if (!full_write(fd, &me, sizeof(me)) || !full_read(fd, &peer, sizeof(peer)))
		return 13;
	Report rep{};
	/* Echo until the parent writes a byte. */
	for (;;) {
		pollfd p{fd, POLLIN, 0};
		if (::poll(&p, 1, 0) == 1)
			break;
		mlx5::Completion c;
		if (s.qp->poll_recv(&c, 1) == 1) {
			if (!c.ok())
				return 15;
			rep.received++;
			const uint32_t slot = static_cast<uint32_t>(c.wr_id);
			mlx5::UdDest to;
			std::memcpy(to.gid.data(), peer.gid, 16);
			to.qpn = c.src_qpn;
			to.q_key = kQkey;
			const mlx5::Sge d{s.addr(slot * kSlot + kGrh), c.byte_len - kGrh, key};
			if (s.qp->post_ud_send({&d, 1}, to, true, c.src_qpn, slot,
					       mlx5::kSignaled) != 0)
				return 16;
			mlx5::Completion sc;
			if (!s.wait(&sc) || !sc.ok())
				return 17;
			rep.echoed++;
			const mlx5::Sge r{s.addr(slot * kSlot), kSlot, key};
			if (s.qp->post_recv({&r, 1}, slot) != 0)
				return 18;
		}
	}
	const emu::DpStats ds = s.hw->device().data_path().stats();
	const emu::WireStats ws = s.hw->device().data_path().wire_stats();
	rep.qkey_dropped = ds.ud_qkey_dropped;
	rep.rx_packets = ws.rx_packets;
	rep.tx_packets = ws.tx_packets;
	return full_write(fd, &rep, sizeof(rep)) ? 0 : 19;
}

class WireUd : public ::testing::Test {
protected:
	void SetUp() override
	{
		const uint16_t a = free_udp_port(), b = free_udp_port();
		ASSERT_NE(a, 0);
		ASSERT_NE(b, 0);
		ASSERT_NE(a, b);
		WireOptions mine, theirs;
		mine.addr = theirs.addr = "127.0.0.1";
		mine.port = theirs.peer_port = a;
		mine.peer_port = theirs.port = b;
		mine.max_recv_sge = theirs.max_recv_sge = 1; /* Side::open makes the receive CQ */
		mine.log_rq_size = theirs.log_rq_size = 5;
		int sv[2];
		ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		child_ = ::fork();
		ASSERT_GE(child_, 0);
		if (child_ == 0) {
			::close(sv[0]);
			::_exit(echo(sv[1], theirs));
		}
		::close(sv[1]);
		fd_ = sv[0];
		ASSERT_EQ(me_.open(mine), 0);
		ASSERT_EQ(make_ud(me_, kQkey), 0);
		ASSERT_EQ(me_.mr(0, kRegion * 2, true, true, false, false, false, false, &key_), 0);
		Hello me{};
		std::memcpy(me.gid, me_.gid.gid.data(), 16);
		me.qpn = me_.qp->qpn();
		ASSERT_TRUE(full_read(fd_, &peer_, sizeof(peer_)));
		ASSERT_TRUE(full_write(fd_, &me, sizeof(me)));
	}

	void TearDown() override
	{
		if (child_ > 0) {
			if (!stopped_)
				stop();
			int st = 0;
			::waitpid(child_, &st, 0);
			EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
				<< "echo exit status " << st;
		}
		if (fd_ >= 0)
			::close(fd_);
	}

	Report stop()
	{
		stopped_ = true;
		Report r{};
		const uint8_t b = 1;
		EXPECT_TRUE(full_write(fd_, &b, 1) && full_read(fd_, &r, sizeof(r)));
		return r;
	}

	mlx5::UdDest peer(uint32_t q_key = kQkey) const
	{
		mlx5::UdDest d;
		std::memcpy(d.gid.data(), peer_.gid, 16);
		d.qpn = peer_.qpn;
		d.q_key = q_key;
		return d;
	}

	/* Sends len bytes of a pattern from offset 0 and waits for their echo into slot 0. */
	void round_trip(uint32_t len, uint32_t seed)
	{
		SCOPED_TRACE(len);
		uint8_t *src = me_.region();
		for (uint32_t i = 0; i < len; i++)
			src[i] = static_cast<uint8_t>(i * seed + 5);
		uint8_t *dst = me_.region() + kRegion;
		std::memset(dst, 0xee, len + kGrh + 1);
		const mlx5::Sge r{me_.addr(kRegion), static_cast<uint32_t>(len + kGrh), key_};
		ASSERT_EQ(me_.qp->post_recv({&r, 1}, seed), 0);
		const mlx5::Sge s{me_.addr(0), len, key_};
		ASSERT_EQ(me_.qp->post_ud_send({&s, 1}, peer(), false, 0, 1, mlx5::kSignaled), 0);
		mlx5::Completion c;
		ASSERT_TRUE(me_.wait(&c));
		EXPECT_TRUE(c.ok());
		ASSERT_TRUE(me_.wait(&c, true)) << "no echo";
		ASSERT_TRUE(c.ok()) << int(c.syndrome);
		EXPECT_EQ(c.wr_id, seed);
		EXPECT_EQ(c.opcode, MLX5_CQE_RESP_SEND_IMM);
		EXPECT_EQ(c.imm, me_.qp->qpn()) << "the echo saw this QP as the source";
		EXPECT_EQ(c.src_qpn, peer_.qpn);
		EXPECT_TRUE(c.grh);
		EXPECT_EQ(c.l3_hdr_type, MLX5_CQE_L3_HDR_TYPE_IPV4);
		EXPECT_EQ(c.byte_len, len + kGrh);
		EXPECT_EQ(std::memcmp(dst + kGrh, src, len), 0);
		EXPECT_EQ(dst[kGrh + len], 0xee);
		/* The GRH: 20 zero bytes, then IPv4 from the peer's address to ours, UDP. */
		for (size_t i = 0; i < 20; i++)
			EXPECT_EQ(dst[i], 0) << i;
		EXPECT_EQ(dst[20], 0x45);
		EXPECT_EQ(dst[29], 17);
		EXPECT_EQ(std::memcmp(dst + 32, peer_.gid + 12, 4), 0) << "source address";
		EXPECT_EQ(std::memcmp(dst + 36, me_.gid.gid.data() + 12, 4), 0) << "destination";
	}

	Side me_;
	Hello peer_{};
	uint32_t key_ = 0;
	pid_t child_ = -1;
	int fd_ = -1;
	bool stopped_ = false;
};

} // namespace

TEST_F(WireUd, DatagramsGoBothWaysWithTheirGrhAndSourceQpn)
{
	for (const uint32_t len : {0u, 1u, 63u, 1000u, 4096u})
		round_trip(len, len + 3);
	const Report r = stop();
	EXPECT_EQ(r.received, 5u);
	EXPECT_EQ(r.echoed, 5u);
	EXPECT_EQ(r.qkey_dropped, 0u);
	const emu::DpStats ds = me_.hw->device().data_path().stats();
	EXPECT_EQ(ds.ud_sent, 5u);
	EXPECT_EQ(ds.ud_received, 5u);
}

TEST_F(WireUd, WrongQkeyIsDroppedByTheReceiverAndCounted)
{
	const mlx5::Sge s{me_.addr(0), 32, key_};
	ASSERT_EQ(me_.qp->post_ud_send({&s, 1}, peer(kQkey ^ 1), false, 0, 1, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(me_.wait(&c));
	EXPECT_TRUE(c.ok()) << "UD has no acknowledgement: the sender completes";
	/* A good one after it comes back: the bad one was dropped, not held. */
	round_trip(32, 9);
	const Report r = stop();
	EXPECT_EQ(r.qkey_dropped, 1u);
	EXPECT_EQ(r.received, 1u);
	EXPECT_GE(r.rx_packets, 2u);
}

TEST_F(WireUd, DatagramAboveTheMtuIsRefusedAtPosting)
{
	const mlx5::Sge s{me_.addr(0), 4097, key_};
	EXPECT_EQ(me_.qp->post_ud_send({&s, 1}, peer(), false, 0, 1, mlx5::kSignaled), -EMSGSIZE);
	const Report r = stop();
	EXPECT_EQ(r.rx_packets, 0u);
}
