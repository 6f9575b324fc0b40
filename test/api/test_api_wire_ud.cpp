/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UD QPs of two processes through the native API over the device model's UDP wire on
 * 127.0.0.1 (fork, each side its own device with port 1 on the wire, as test_api_wire.cpp).
 * The child runs a UD echo: every datagram it receives goes back to the GID it reads out of the
 * GRH (nicmr_ud_grh_gids) and the QP nicmr_cq_poll_ud names, with that QP's number as the
 * immediate. The parent learns only the child's GID and QPN (nicmr_qp_local), and checks the
 * echoed bytes, the source QP, the GRH's GIDs both ways, and that a wrong Q_Key is not echoed.
 *
 * The GSI QPs (NICMR_UD_QP_GSI) of two devices of one process, each with port 1 on the wire:
 * nicmr_qp_local names QP 1, a datagram to QP 1 with NICMR_GSI_QKEY arrives from source QP 1
 * and is answered to the GID its GRH names (what a SIDR_REQ and its SIDR_REP do), and a
 * datagram to QP 1 of a port without a GSI QP is dropped by the receiving device.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "api_wiring.h"
#include "fd_io.h"
#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr uint32_t kQkey = 0x00c0ffee;
constexpr uint32_t kGrh = NICMR_UD_GRH_BYTES;
constexpr uint32_t kSlot = 8192;
constexpr uint32_t kSlots = 8;

/* A UDP port of 127.0.0.1 free a moment ago (the kernel's choice), 0 when none. */
uint16_t free_port()
{
	const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(a);
	uint16_t port = 0;
	if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
	    ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &sl) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		::close(fd);
	return port;
}

std::string wire_spec(uint16_t mine, uint16_t peer)
{
	return "emu:addr=127.0.0.1,udp_port=" + std::to_string(mine) +
	       ",peer_udp_port=" + std::to_string(peer);
}

/* One side: its device, a pool registered whole, a CQ and a UD QP in RTS. */
struct Side {
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	nicmr_cq *cq = nullptr;
	nicmr_qp *qp = nullptr;
	nicmr_mr *mr = nullptr;
	uint8_t *base = nullptr;
	uint32_t key = 0;

	~Side()
	{
		if (mr)
			nicmr_mr_dereg(mr);
		if (qp)
			nicmr_qp_destroy(qp);
		if (cq)
			nicmr_cq_destroy(cq);
		if (pool)
			nicmr_pool_destroy(pool);
		if (pd)
			nicmr_pd_free(pd);
		if (dev)
			nicmr_device_close(dev);
	}

	/* flags: nicmr_ud_qp_attr::flags (NICMR_UD_QP_GSI: the port's GSI QP, its own Q_Key). */
	int open(const std::string &spec, uint32_t flags = 0)
	{
		int rc = nicmr_device_open(spec.c_str(), &dev);
		if (rc == 0)
			rc = nicmr_pd_alloc(dev, &pd);
		if (rc == 0) {
			nicmr_pool_params p;
			nicmr_pool_params_init(&p);
			p.size = size_t{2} << 20;
			p.allow_fallback = 1;
			p.name = "api-wire-ud";
			rc = nicmr_pool_create(dev, &p, &pool);
		}
		if (rc == 0) {
			base = static_cast<uint8_t *>(nicmr_pool_addr(pool));
			rc = nicmr_mr_reg(pd, base, size_t{1} << 20, kAll, 0, 0, &mr);
		}
		if (rc == 0) {
			key = nicmr_mr_key(mr);
			rc = nicmr_cq_create(dev, 64, &cq);
		}
		if (rc == 0) {
			nicmr_ud_qp_attr at{};
			at.size = sizeof(at);
			at.q_key = (flags & NICMR_UD_QP_GSI) != 0 ? 0 : kQkey;
			at.flags = flags;
			at.attr.port = 1;
			at.attr.send_cq = cq;
			at.attr.depth = 16;
			at.attr.recv_depth = 16;
			at.attr.max_recv_sge = 1;
			rc = nicmr_qp_create_ud(pd, &at, &qp);
		}
		return rc;
	}
	uint64_t addr(size_t off) const { return reinterpret_cast<uintptr_t>(base) + off; }
	int post_slot(uint32_t slot)
	{
		const nicmr_sge s{addr(size_t{slot} * kSlot), kSlot, key};
		return nicmr_post_recv(qp, &s, 1, slot);
	}
};

/* The child's count when the parent stops it. */
struct Report {
	uint64_t echoed;
};

int echo(int fd, uint16_t mine, uint16_t peer)
{
	Side s;
	if (s.open(wire_spec(mine, peer)) != 0)
		return 10;
	for (uint32_t i = 0; i < kSlots; i++)
		if (s.post_slot(i) != 0)
			return 11;
	nicmr_qp_addr me{};
	if (nicmr_qp_local(s.qp, 0, &me) != 0 || !full_write(fd, &me, sizeof(me)))
		return 12;
	Report rep{};
	for (;;) {
		pollfd p{fd, POLLIN, 0};
		if (::poll(&p, 1, 0) == 1)
			break;
		nicmr_wc wc{};
		nicmr_ud_info ud{};
		if (nicmr_cq_poll_ud(s.cq, &wc, &ud, 1) != 1)
			continue;
		if (wc.status != NICMR_WC_SUCCESS)
			return 13;
		if (wc.opcode == NICMR_WC_SEND)
			continue;
		const auto slot = static_cast<uint32_t>(wc.wr_id);
		nicmr_ud_dest to{};
		if (nicmr_ud_grh_gids(s.base + size_t{slot} * kSlot, ud.net_type, to.gid,
				      nullptr) != 0)
			return 14;
		to.qpn = ud.src_qp;
		to.q_key = kQkey;
		if (nicmr_post_send_ud(s.qp, s.addr(size_t{slot} * kSlot + kGrh),
				       wc.byte_len - kGrh, s.key, &to, ud.src_qp, slot,
				       NICMR_SEND_SIGNALED | NICMR_SEND_IMM) != 0)
			return 15;
		/* The send completes before the slot is posted again (its bytes are the echo). */
		for (;;) {
			const int n = nicmr_cq_poll_ud(s.cq, &wc, &ud, 1);
			if (n < 0)
				return 16;
			if (n == 1 && wc.opcode == NICMR_WC_SEND)
				break;
			if (n == 1)
				return 17; /* one datagram at a time in these tests */
		}
		if (wc.status != NICMR_WC_SUCCESS || s.post_slot(slot) != 0)
			return 18;
		rep.echoed++;
	}
	return full_write(fd, &rep, sizeof(rep)) ? 0 : 19;
}

class ApiWireUd : public ::testing::Test {
protected:
	void SetUp() override
	{
		const uint16_t mine = free_port(), peer = free_port();
		ASSERT_NE(mine, 0);
		ASSERT_NE(peer, 0);
		ASSERT_NE(mine, peer);
		ASSERT_EQ(nicmr::test::fork_peer([&](int fd) { return echo(fd, peer, mine); },
						 &child_, &fd_),
			  0);
		ASSERT_EQ(me_.open(wire_spec(mine, peer)), 0);
		ASSERT_EQ(nicmr_qp_local(me_.qp, 0, &mine_), 0);
		ASSERT_TRUE(full_read(fd_, &peer_, sizeof(peer_)));
	}
	void TearDown() override
	{
		if (child_ > 0) {
			if (!stopped_)
				stop();
			int st = 0;
			::waitpid(child_, &st, 0);
			EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "echo exit " << st;
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
	nicmr_ud_dest peer(uint32_t q_key = kQkey) const
	{
		nicmr_ud_dest d{};
		std::memcpy(d.gid, peer_.gid, 16);
		d.qpn = peer_.qpn;
		d.q_key = q_key;
		return d;
	}
	/* One completion and its datagram side within 5 s. */
	bool wait(nicmr_wc *wc, nicmr_ud_info *ud)
	{
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		while (std::chrono::steady_clock::now() < end)
			if (nicmr_cq_poll_ud(me_.cq, wc, ud, 1) == 1)
				return true;
		return false;
	}
	void round_trip(uint32_t len)
	{
		SCOPED_TRACE(len);
		for (uint32_t i = 0; i < len; i++)
			me_.base[i] = static_cast<uint8_t>(i * 11 + len);
		uint8_t *in = me_.base + 65536;
		std::memset(in, 0xee, len + kGrh + 1);
		const nicmr_sge r{me_.addr(65536), len + kGrh, me_.key};
		ASSERT_EQ(nicmr_post_recv(me_.qp, &r, 1, 100 + len), 0);
		const nicmr_ud_dest d = peer();
		ASSERT_EQ(nicmr_post_send_ud(me_.qp, me_.addr(0), len, me_.key, &d, 0, len,
					     NICMR_SEND_SIGNALED),
			  0);
		nicmr_wc wc{};
		nicmr_ud_info ud{};
		ASSERT_TRUE(wait(&wc, &ud));
		EXPECT_EQ(wc.opcode, NICMR_WC_SEND);
		EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
		ASSERT_TRUE(wait(&wc, &ud)) << "no echo";
		ASSERT_EQ(wc.status, NICMR_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, NICMR_WC_RECV_IMM);
		EXPECT_EQ(wc.wr_id, 100u + len);
		EXPECT_EQ(wc.byte_len, len + kGrh);
		EXPECT_EQ(wc.imm, mine_.qpn) << "the echo saw this QP as the source";
		EXPECT_EQ(ud.src_qp, peer_.qpn);
		EXPECT_EQ(ud.flags, NICMR_UD_GRH);
		EXPECT_EQ(ud.net_type, NICMR_UD_NET_IPV4);
		uint8_t src[16], dst[16];
		ASSERT_EQ(nicmr_ud_grh_gids(in, ud.net_type, src, dst), 0);
		EXPECT_EQ(std::memcmp(src, peer_.gid, 16), 0);
		EXPECT_EQ(std::memcmp(dst, mine_.gid, 16), 0);
		EXPECT_EQ(std::memcmp(in + kGrh, me_.base, len), 0);
		EXPECT_EQ(in[kGrh + len], 0xee);
	}

	Side me_;
	nicmr_qp_addr mine_{}, peer_{};
	pid_t child_ = -1;
	int fd_ = -1;
	bool stopped_ = false;
};

} // namespace

TEST_F(ApiWireUd, DatagramsComeBackFromTheAddressTheGrhNames)
{
	for (const uint32_t len : {0u, 5u, 1024u, 4096u})
		round_trip(len);
	EXPECT_EQ(stop().echoed, 4u);
}

TEST_F(ApiWireUd, WrongQkeyIsNotEchoed)
{
	const nicmr_ud_dest d = peer(kQkey + 1);
	ASSERT_EQ(
		nicmr_post_send_ud(me_.qp, me_.addr(0), 16, me_.key, &d, 0, 1, NICMR_SEND_SIGNALED),
		0);
	nicmr_wc wc{};
	nicmr_ud_info ud{};
	ASSERT_TRUE(wait(&wc, &ud));
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	round_trip(16);
	EXPECT_EQ(stop().echoed, 1u) << "only the datagram with the right Q_Key came back";
}

/* Two devices of this process, port 1 of each on the wire at 127.0.0.1, each the other's peer:
 * a is a GSI QP's side, b's QP is a GSI QP or an ordinary UD QP (b_flags). */
class ApiWireGsi : public ::testing::Test {
protected:
	void open(uint32_t b_flags)
	{
		const uint16_t pa = free_port(), pb = free_port();
		ASSERT_NE(pa, 0);
		ASSERT_NE(pb, 0);
		ASSERT_NE(pa, pb);
		ASSERT_EQ(a_.open(wire_spec(pa, pb), NICMR_UD_QP_GSI), 0);
		ASSERT_EQ(b_.open(wire_spec(pb, pa), b_flags), 0);
		ASSERT_EQ(nicmr_qp_local(a_.qp, 0, &la_), 0);
		ASSERT_EQ(nicmr_qp_local(b_.qp, 0, &lb_), 0);
	}
	/* One completion of s's CQ within 5 s; polling it also runs s's wire. */
	static bool wait(Side &s, nicmr_wc *wc, nicmr_ud_info *ud)
	{
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		while (std::chrono::steady_clock::now() < end)
			if (nicmr_cq_poll_ud(s.cq, wc, ud, 1) == 1)
				return true;
		return false;
	}
	static emu::WireStats wire(Side &s)
	{
		return s.dev->emu->device().data_path().wire_stats();
	}
	/* A MAD's worth of bytes from `from` to QP 1 at gid; true once it left. */
	static bool send_mad(Side &from, const uint8_t gid[16], uint8_t seed, uint64_t wr_id)
	{
		for (uint32_t i = 0; i < kMad; i++)
			from.base[kOut + i] = static_cast<uint8_t>(i * 3 + seed);
		nicmr_ud_dest d{};
		std::memcpy(d.gid, gid, 16);
		d.qpn = NICMR_GSI_QPN;
		d.q_key = NICMR_GSI_QKEY;
		if (nicmr_post_send_ud(from.qp, from.addr(kOut), kMad, from.key, &d, 0, wr_id,
				       NICMR_SEND_SIGNALED) != 0)
			return false;
		nicmr_wc wc{};
		nicmr_ud_info ud{};
		return wait(from, &wc, &ud) && wc.status == NICMR_WC_SUCCESS &&
		       wc.opcode == NICMR_WC_SEND && wc.wr_id == wr_id;
	}
	static constexpr uint32_t kMad = 256; /* IBTA 13.4: a MAD is 256 bytes */
	static constexpr size_t kOut = kSlot * kSlots;
	Side a_, b_;
	nicmr_qp_addr la_{}, lb_{};
};

TEST_F(ApiWireGsi, GsiQpsOfTwoDevicesAnswerEachOtherAsQp1)
{
	open(NICMR_UD_QP_GSI);
	ASSERT_FALSE(HasFatalFailure());
	EXPECT_EQ(la_.qpn, NICMR_GSI_QPN);
	EXPECT_EQ(lb_.qpn, NICMR_GSI_QPN);
	EXPECT_NE(nicmr_qp_num(a_.qp), NICMR_GSI_QPN) << "the device's own number";
	ASSERT_EQ(b_.post_slot(0), 0);
	ASSERT_EQ(a_.post_slot(0), 0);
	/* a -> b (the request): b learns a's GID from the GRH and a's QP from the CQE. */
	ASSERT_TRUE(send_mad(a_, lb_.gid, 1, 0x51));
	nicmr_wc wc{};
	nicmr_ud_info ud{};
	ASSERT_TRUE(wait(b_, &wc, &ud)) << "nothing reached b's QP 1";
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.opcode, NICMR_WC_RECV);
	EXPECT_EQ(wc.byte_len, kMad + kGrh);
	EXPECT_EQ(ud.src_qp, NICMR_GSI_QPN);
	EXPECT_EQ(ud.net_type, NICMR_UD_NET_IPV4);
	uint8_t src[16], dst[16];
	ASSERT_EQ(nicmr_ud_grh_gids(b_.base, ud.net_type, src, dst), 0);
	EXPECT_EQ(std::memcmp(src, la_.gid, 16), 0);
	EXPECT_EQ(std::memcmp(dst, lb_.gid, 16), 0);
	EXPECT_EQ(std::memcmp(b_.base + kGrh, a_.base + kOut, kMad), 0);
	/* b -> a (the reply), to what the request's GRH and source QP named. */
	EXPECT_EQ(ud.src_qp, NICMR_GSI_QPN);
	ASSERT_TRUE(send_mad(b_, src, 2, 0x52));
	ASSERT_TRUE(wait(a_, &wc, &ud)) << "nothing reached a's QP 1";
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.byte_len, kMad + kGrh);
	EXPECT_EQ(ud.src_qp, NICMR_GSI_QPN);
	EXPECT_EQ(std::memcmp(a_.base + kGrh, b_.base + kOut, kMad), 0);
}

TEST_F(ApiWireGsi, DatagramToQp1OfAPortWithoutAGsiQpIsDropped)
{
	open(0);
	ASSERT_FALSE(HasFatalFailure());
	EXPECT_NE(lb_.qpn, NICMR_GSI_QPN);
	ASSERT_EQ(b_.post_slot(0), 0);
	const uint64_t dropped = wire(b_).rx_dropped;
	ASSERT_TRUE(send_mad(a_, lb_.gid, 3, 0x53));
	/* b's wire runs while its CQ is polled: the datagram comes and goes nowhere. */
	nicmr_wc wc{};
	nicmr_ud_info ud{};
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (wire(b_).rx_dropped == dropped && std::chrono::steady_clock::now() < end)
		EXPECT_EQ(nicmr_cq_poll_ud(b_.cq, &wc, &ud, 1), 0);
	EXPECT_EQ(wire(b_).rx_dropped, dropped + 1);
	EXPECT_EQ(nicmr_cq_poll_ud(b_.cq, &wc, &ud, 1), 0) << "b's UD QP is not QP 1";
}

} // namespace nicmr::test
