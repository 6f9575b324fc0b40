/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Receive queues and the SEND family over the device model's UDP wire between two processes,
 * as test_dp_wire.cpp sets them up (fork; each side its own emulated ConnectX with port 1 on the
 * wire; GIDs, QPNs and keys over a socketpair), with a receive queue on both QPs. The child is
 * the responder: the parent asks it to post receive WQEs, to poll its receive CQ, for its
 * memory, QP state and wire counters.
 *
 * SEND of one and many packets (path MTU 256, 1024, 4096) into multi-SGE receives, in order with
 * exact byte counts; SEND and RDMA WRITE with immediate; SEND with invalidate and the key
 * refused after it; RNR NAKs when no receive is posted (retried after the NAK's timer, then
 * the requester's RNR_RETRY_EXC_ERR once rnr_retry is spent, or the SEND delivered once a
 * receive is posted); a SEND longer than the receive (the responder's
 * LOCAL_LENGTH_ERR, the requester's invalid-request NAK); a receive SGE the responder may not
 * write (a remote operational error).
 */
#include <gtest/gtest.h>

#include <infiniband/mlx5dv.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "wire_rig.h"

namespace {

namespace emu = nicmr::emu;
namespace mem = nicmr::mem;
namespace mlx5 = nicmr::mlx5;
namespace prm = nicmr::mlx5::prm;
namespace roce = nicmr::roce;
using namespace std::chrono_literals;

using wire_rig::full_read;
using wire_rig::full_write;
using wire_rig::kRegion;
using wire_rig::Side;
using wire_rig::WireOptions;

constexpr uint32_t kRnrRetry = 2; /* RNR retries of both QPs (options) */

/* The responder's keys over its region. */
enum KeyId : uint32_t {
	k_local,    /* lr | lw: receive buffers */
	k_readonly, /* lr only: a receive buffer the device may not write */
	k_remote,   /* lw | rw: WRITE with immediate */
	k_inval,    /* lw | rw | en_rinval: SEND with invalidate */
	k_count
};

struct Info {
	uint8_t gid[16];
	uint32_t qpn;
	uint64_t region;
	uint32_t keys[k_count];
};

enum Op : uint32_t { op_recv = 1, op_poll, op_dump, op_state, op_stats, op_fill, op_exit };
struct Req {
	uint32_t op;
	uint32_t off, len, nseg, key;
	uint64_t wr_id;
};
struct Polled {
	int32_t found;
	mlx5::Completion c;
};

/* The options of both sides: port 1 on 127.0.0.1 with a receive queue of 64 WQEs of 4 SGEs;
 * RNR: kRnrRetry retries after the first NAK, each after the responder's 40.96 ms (IBTA's RNR
 * timer 24): time enough to post a receive in between. */
WireOptions options(uint16_t port, uint16_t peer_port, uint32_t mtu, emu::DoorbellDelivery d)
{
	WireOptions o;
	o.addr = "127.0.0.1";
	o.port = port;
	o.peer_port = peer_port;
	o.mtu = mtu;
	o.delivery = d;
	o.max_recv_sge = 4;
	o.log_rq_size = 6;
	o.rnr_retry = kRnrRetry;
	o.min_rnr_timer = 24;
	return o;
}

/* The child: the responder. Returns its exit status (0 ok). */
int send_responder(int fd, const WireOptions &o)
{
	Side s;
	if (s.open(o) != 0)
		return 10;
	Info me{};
	std::memcpy(me.gid, s.gid.gid.data(), 16);
	me.region = s.addr(0);
	/* Over the region, local read always: lw, rw and remote invalidation as the key needs. */
	const auto key = [&s](bool lw, bool rw, bool rinval, uint32_t *k) {
		return s.mr(0, kRegion, true, lw, false, rw, false, false, k, rinval);
	};
	if (key(true, false, false, &me.keys[k_local]) != 0 ||
	    key(false, false, false, &me.keys[k_readonly]) != 0 ||
	    key(true, true, false, &me.keys[k_remote]) != 0 ||
	    key(true, true, true, &me.keys[k_inval]) != 0)
		return 11;
	Info peer{};
	if (!full_write(fd, s.gid.gid.data(), 16) || !full_read(fd, peer.gid, 16))
		return 12;
	if (s.make_qp(peer.gid) != 0)
		return 13;
	me.qpn = s.qp->qpn();
	if (!full_write(fd, &me, sizeof(me)) || !full_read(fd, &peer, sizeof(peer)))
		return 14;
	if (s.qp->connect(peer.qpn) != 0)
		return 15;
	for (;;) {
		Req r{};
		if (!full_read(fd, &r, sizeof(r)))
			return 16;
		switch (r.op) {
		case op_recv: {
			/* len bytes at off in nseg pieces (the last takes the rest). */
			mlx5::Sge sg[4];
			const uint32_t piece = r.nseg ? r.len / r.nseg : 0;
			for (uint32_t i = 0; i < r.nseg && i < 4; i++)
				sg[i] = {s.addr(r.off + i * piece),
					 i + 1 == r.nseg ? r.len - i * piece : piece,
					 me.keys[r.key]};
			const int32_t rc = s.qp->post_recv({sg, r.nseg}, r.wr_id);
			if (!full_write(fd, &rc, sizeof(rc)))
				return 17;
			break;
		}
		case op_poll: {
			Polled p{};
			p.found = s.wait(&p.c, true) ? 1 : 0;
			if (!full_write(fd, &p, sizeof(p)))
				return 18;
			break;
		}
		case op_dump:
			if (r.off + uint64_t{r.len} > kRegion ||
			    !full_write(fd, s.region() + r.off, r.len))
				return 19;
			break;
		case op_fill:
			std::memset(s.region(), static_cast<int>(r.len), kRegion);
			if (!full_write(fd, &r.len, sizeof(r.len)))
				return 20;
			break;
		case op_state: {
			uint32_t st = 0;
			if (s.qp->query_state(&st) != 0 || !full_write(fd, &st, sizeof(st)))
				return 21;
			break;
		}
		case op_stats: {
			const emu::WireStats ws = s.hw->device().data_path().wire_stats();
			if (!full_write(fd, &ws, sizeof(ws)))
				return 22;
			break;
		}
		case op_exit:
			return 0;
		default:
			return 23;
		}
	}
}

struct Param {
	const char *name;
	uint32_t mtu;
	emu::DoorbellDelivery delivery;
};

constexpr uint8_t kFill = 0x5e;

class WireSend : public ::testing::TestWithParam<Param> {
protected:
	void SetUp() override
	{
		const Param &p = GetParam();
		/* Ports of this process's own (test_dp_wire takes 20000 + 2k .. + 1). */
		const auto base = static_cast<uint16_t>(50000 + (getpid() % 7000) * 2);
		const WireOptions mine =
			options(base, static_cast<uint16_t>(base + 1), p.mtu, p.delivery);
		const WireOptions theirs = options(static_cast<uint16_t>(base + 1), base, p.mtu,
						   emu::DoorbellDelivery::inline_call);
		int sv[2];
		ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		child_ = ::fork();
		ASSERT_GE(child_, 0);
		if (child_ == 0) {
			::close(sv[0]);
			::_exit(send_responder(sv[1], theirs));
		}
		::close(sv[1]);
		fd_ = sv[0];
		ASSERT_EQ(me_->open(mine), 0);
		uint8_t peer_gid[16];
		ASSERT_TRUE(full_read(fd_, peer_gid, 16));
		ASSERT_TRUE(full_write(fd_, me_->gid.gid.data(), 16));
		ASSERT_EQ(me_->make_qp(peer_gid), 0);
		ASSERT_TRUE(full_read(fd_, &peer_, sizeof(peer_)));
		Info info{};
		info.qpn = me_->qp->qpn();
		ASSERT_TRUE(full_write(fd_, &info, sizeof(info)));
		ASSERT_EQ(me_->qp->connect(peer_.qpn), 0);
		ASSERT_EQ(peer_state(), prm::qp_state::rts);
		ASSERT_EQ(me_->mr(0, kRegion, true, false, false, false, false, false, &lkey_), 0);
		for (size_t i = 0; i < kRegion; i++)
			me_->region()[i] = static_cast<uint8_t>(i * 13 + (i >> 9) + 1);
		ASSERT_EQ(fill_peer(kFill), kFill);
	}

	void TearDown() override
	{
		if (child_ > 0) {
			Req r{op_exit, 0, 0, 0, 0, 0};
			full_write(fd_, &r, sizeof(r));
			int st = 0;
			::waitpid(child_, &st, 0);
			EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
				<< "responder exit status " << st;
		}
		if (fd_ >= 0)
			::close(fd_);
	}

	uint32_t mtu() const { return 128u << GetParam().mtu; }
	mlx5::Sge sge(size_t off, uint32_t len) const { return {me_->addr(off), len, lkey_}; }
	int32_t post_recv(uint32_t off, uint32_t len, uint32_t nseg, KeyId key, uint64_t wr_id)
	{
		Req r{op_recv, off, len, nseg, key, wr_id};
		int32_t rc = -1;
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &rc, sizeof(rc)));
		return rc;
	}
	Polled peer_poll()
	{
		Req r{op_poll, 0, 0, 0, 0, 0};
		Polled p{};
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &p, sizeof(p)));
		return p;
	}
	std::vector<uint8_t> dump(uint32_t off, uint32_t len)
	{
		std::vector<uint8_t> v(len);
		Req r{op_dump, off, len, 0, 0, 0};
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, v.data(), len));
		return v;
	}
	uint32_t fill_peer(uint8_t v)
	{
		Req r{op_fill, 0, v, 0, 0, 0};
		uint32_t got = 0;
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &got, sizeof(got)));
		return got;
	}
	uint32_t peer_state()
	{
		Req r{op_state, 0, 0, 0, 0, 0};
		uint32_t st = 0xff;
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &st, sizeof(st)));
		return st;
	}
	emu::WireStats peer_stats()
	{
		Req r{op_stats, 0, 0, 0, 0, 0};
		emu::WireStats ws{};
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &ws, sizeof(ws)));
		return ws;
	}
	mlx5::Completion run(int rc_post)
	{
		EXPECT_EQ(rc_post, 0);
		mlx5::Completion c;
		EXPECT_TRUE(me_->wait(&c)) << "no completion";
		return c;
	}
	bool peer_untouched(uint32_t off, uint32_t len)
	{
		const std::vector<uint8_t> v = dump(off, len);
		for (uint8_t b : v)
			if (b != kFill)
				return false;
		return true;
	}

	std::unique_ptr<Side> me_ = std::make_unique<Side>();
	Info peer_{};
	uint32_t lkey_ = 0;
	pid_t child_ = -1;
	int fd_ = -1;
};

TEST_P(WireSend, SendsOfOneAndManyPacketsLandInOrderWithExactByteCounts)
{
	const uint32_t m = mtu();
	const uint32_t sizes[] = {0, 1, m - 1, m, m + 1, 3 * m + 7, 20000};
	uint32_t off = 0;
	uint64_t id = 1;
	/* Every receive first (room + 5 bytes each, in three SGEs), then every SEND. */
	for (uint32_t len : sizes) {
		ASSERT_EQ(post_recv(off, len + 5, 3, k_local, id++), 0);
		off += len + 5 + 11;
	}
	uint32_t src = 0;
	for (uint32_t len : sizes) {
		const mlx5::Sge s = sge(src, len);
		const mlx5::Completion c =
			run(me_->qp->post_send({&s, len ? 1u : 0u}, len, mlx5::kSignaled));
		EXPECT_TRUE(c.ok()) << len << " syndrome " << int(c.syndrome);
		EXPECT_EQ(c.wr_id, len);
		src += 97;
	}
	off = 0;
	src = 0;
	id = 1;
	for (uint32_t len : sizes) {
		SCOPED_TRACE(len);
		const Polled p = peer_poll();
		ASSERT_EQ(p.found, 1);
		EXPECT_EQ(p.c.opcode, MLX5_CQE_RESP_SEND);
		EXPECT_EQ(p.c.byte_len, len);
		EXPECT_EQ(p.c.wr_id, id++);
		EXPECT_EQ(p.c.qpn, peer_.qpn);
		const std::vector<uint8_t> got = dump(off, len + 5);
		EXPECT_EQ(std::memcmp(got.data(), me_->region() + src, len), 0);
		for (uint32_t i = len; i < len + 5; i++)
			EXPECT_EQ(got[i], kFill) << "past the message at " << i;
		off += len + 5 + 11;
		src += 97;
	}
	EXPECT_EQ(peer_state(), prm::qp_state::rts);
}

TEST_P(WireSend, ImmediatesArriveWithSendAndWriteWithImmediate)
{
	const uint32_t len = 2 * mtu() + 3;
	ASSERT_EQ(post_recv(0, len, 1, k_local, 7), 0);
	ASSERT_EQ(post_recv(0, 16, 1, k_local, 8), 0);
	const mlx5::Sge s = sge(100, len);
	mlx5::Completion c = run(me_->qp->post_send_imm({&s, 1}, 0xfeedf00d, 1, mlx5::kSignaled));
	EXPECT_TRUE(c.ok());
	Polled p = peer_poll();
	ASSERT_EQ(p.found, 1);
	EXPECT_EQ(p.c.opcode, MLX5_CQE_RESP_SEND_IMM);
	EXPECT_EQ(p.c.imm, 0xfeedf00du);
	EXPECT_EQ(p.c.byte_len, len);
	EXPECT_EQ(p.c.wr_id, 7u);
	std::vector<uint8_t> got = dump(0, len);
	EXPECT_EQ(std::memcmp(got.data(), me_->region() + 100, len), 0);
	/* WRITE with immediate: the bytes at the target, the immediate in the second receive,
	 * whose buffer takes nothing. */
	const uint32_t at = 32768;
	c = run(me_->qp->post_write_imm({&s, 1}, peer_.region + at, peer_.keys[k_remote],
					0x00c0ffee, 2, mlx5::kSignaled));
	EXPECT_TRUE(c.ok());
	p = peer_poll();
	ASSERT_EQ(p.found, 1);
	EXPECT_EQ(p.c.opcode, MLX5_CQE_RESP_WR_IMM);
	EXPECT_EQ(p.c.imm, 0x00c0ffeeu);
	EXPECT_EQ(p.c.byte_len, len);
	EXPECT_EQ(p.c.wr_id, 8u);
	got = dump(at, len);
	EXPECT_EQ(std::memcmp(got.data(), me_->region() + 100, len), 0);
	got = dump(0, 16);
	EXPECT_EQ(std::memcmp(got.data(), me_->region() + 100, 16), 0) << "first SEND's bytes";
}

TEST_P(WireSend, SendWithInvalidateInvalidatesTheKeyAndAWriteWithItIsRefused)
{
	ASSERT_EQ(post_recv(0, 64, 1, k_local, 1), 0);
	const mlx5::Sge s = sge(0, 8);
	mlx5::Completion c =
		run(me_->qp->post_send_inval({&s, 1}, peer_.keys[k_inval], 2, mlx5::kSignaled));
	EXPECT_TRUE(c.ok());
	const Polled p = peer_poll();
	ASSERT_EQ(p.found, 1);
	EXPECT_EQ(p.c.opcode, MLX5_CQE_RESP_SEND_INV);
	EXPECT_EQ(p.c.imm, peer_.keys[k_inval]);
	EXPECT_EQ(p.c.byte_len, 8u);
	c = run(me_->qp->post_write({&s, 1}, peer_.region + 4096, peer_.keys[k_inval], 3,
				    mlx5::kSignaled));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_TRUE(peer_untouched(4096, 64));
	EXPECT_EQ(peer_state(), prm::qp_state::err);
}

TEST_P(WireSend, SendWithInvalidateOfAKeyWithoutRemoteInvalidateIsAnInvalidRequest)
{
	ASSERT_EQ(post_recv(0, 64, 1, k_local, 1), 0);
	const mlx5::Sge s = sge(0, 8);
	const mlx5::Completion c =
		run(me_->qp->post_send_inval({&s, 1}, peer_.keys[k_remote], 2, mlx5::kSignaled));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	const Polled p = peer_poll();
	ASSERT_EQ(p.found, 1);
	EXPECT_EQ(p.c.opcode, MLX5_CQE_RESP_ERR);
	EXPECT_EQ(p.c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	EXPECT_EQ(peer_state(), prm::qp_state::err);
}

TEST_P(WireSend, NoReceivePostedIsAnRnrNakUntilRnrRetryIsSpent)
{
	const mlx5::Sge s = sge(0, 8);
	const mlx5::Completion c = run(me_->qp->post_send({&s, 1}, 1, mlx5::kSignaled));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	/* The SEND and its kRnrRetry resends, each refused with an RNR NAK. */
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	const emu::WireStats ws = peer_stats();
	EXPECT_EQ(ws.naks_sent, kRnrRetry + 1);
	const emu::WireStats mine = me_->hw->device().data_path().wire_stats();
	EXPECT_EQ(mine.rnr_naks_received, kRnrRetry + 1);
	EXPECT_EQ(mine.retry_exceeded, 1u);
	/* An RNR NAK leaves the responder as it was. */
	EXPECT_EQ(peer_state(), prm::qp_state::rts);
	EXPECT_TRUE(peer_untouched(0, 64));
}

TEST_P(WireSend, ASendRefusedWithAnRnrNakIsDeliveredOnceAReceiveIsPosted)
{
	/* One packet at every MTU: the NAK counter counts the RNR NAKs alone. */
	const mlx5::Sge s = sge(0, 200);
	ASSERT_EQ(me_->qp->post_send({&s, 1}, 7, mlx5::kSignaled), 0);
	/* The first RNR NAK, then a receive before the resend (40.96 ms later). */
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (peer_stats().naks_sent == 0 && std::chrono::steady_clock::now() < end) {
	}
	ASSERT_EQ(peer_stats().naks_sent, 1u);
	ASSERT_EQ(post_recv(0, 512, 2, k_local, 9), 0);
	mlx5::Completion c;
	ASSERT_TRUE(me_->wait(&c)) << "no completion";
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ);
	EXPECT_EQ(c.wr_id, 7u);
	const Polled p = peer_poll();
	ASSERT_EQ(p.found, 1);
	EXPECT_EQ(p.c.opcode, MLX5_CQE_RESP_SEND);
	EXPECT_EQ(p.c.byte_len, 200u);
	EXPECT_EQ(p.c.wr_id, 9u);
	EXPECT_GE(me_->hw->device().data_path().wire_stats().rnr_naks_received, 1u);
	EXPECT_GE(me_->hw->device().data_path().wire_stats().retransmits, 1u);
}

TEST_P(WireSend, WriteWithImmediateWithoutAReceiveIsAnRnrNakAndWritesNothing)
{
	const mlx5::Sge s = sge(0, 100);
	const mlx5::Completion c = run(me_->qp->post_write_imm(
		{&s, 1}, peer_.region + 1000, peer_.keys[k_remote], 5, 1, mlx5::kSignaled));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	EXPECT_TRUE(peer_untouched(1000, 100));
	EXPECT_EQ(peer_state(), prm::qp_state::rts);
}

TEST_P(WireSend, SendLongerThanTheReceiveIsAnInvalidRequest)
{
	ASSERT_EQ(post_recv(0, 100, 2, k_local, 1), 0);
	ASSERT_EQ(post_recv(0, 100, 1, k_local, 2), 0);
	const uint32_t len = 3 * mtu();
	const mlx5::Sge s = sge(0, len);
	const mlx5::Completion c = run(me_->qp->post_send({&s, 1}, 3, mlx5::kSignaled));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	Polled p = peer_poll();
	ASSERT_EQ(p.found, 1);
	EXPECT_EQ(p.c.opcode, MLX5_CQE_RESP_ERR);
	EXPECT_EQ(p.c.syndrome, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	EXPECT_EQ(p.c.wr_id, 1u);
	p = peer_poll();
	ASSERT_EQ(p.found, 1);
	EXPECT_EQ(p.c.syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	EXPECT_EQ(p.c.wr_id, 2u);
	EXPECT_EQ(peer_state(), prm::qp_state::err);
	EXPECT_TRUE(peer_untouched(100, 64)) << "nothing past the receive";
}

TEST_P(WireSend, AReceiveTheResponderMayNotWriteIsARemoteOperationalError)
{
	ASSERT_EQ(post_recv(0, 100, 1, k_readonly, 1), 0);
	const mlx5::Sge s = sge(0, 10);
	const mlx5::Completion c = run(me_->qp->post_send({&s, 1}, 2, mlx5::kSignaled));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
	const Polled p = peer_poll();
	ASSERT_EQ(p.found, 1);
	EXPECT_EQ(p.c.opcode, MLX5_CQE_RESP_ERR);
	EXPECT_EQ(p.c.syndrome, MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
	EXPECT_TRUE(peer_untouched(0, 100));
	EXPECT_EQ(peer_state(), prm::qp_state::err);
}

INSTANTIATE_TEST_SUITE_P(
	Paths, WireSend,
	::testing::Values(
		Param{"mtu1024", prm::qp_mtu::mtu_1024, emu::DoorbellDelivery::inline_call},
		Param{"mtu256", prm::qp_mtu::mtu_256, emu::DoorbellDelivery::inline_call},
		Param{"mtu4096_thread", prm::qp_mtu::mtu_4096, emu::DoorbellDelivery::poll_thread}),
	[](const ::testing::TestParamInfo<Param> &i) { return std::string(i.param.name); });

} // namespace
