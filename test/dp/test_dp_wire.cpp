/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device model's UDP wire between two processes (the rig: wire_rig.h): the child is the
 * responder (its memory, its keys), the parent the requester; the parent checks the child's
 * memory, QP state and wire counters byte for byte.
 *
 * Every operation of the wire (RDMA WRITE of one and many packets, inline, RDMA READ with
 * multi-packet responses, compare-swap, fetch-add) at path MTUs 256, 1024 and 4096, over IPv4
 * (127.0.0.1) and IPv6 (::1, skipped with the reason where the host has no IPv6 loopback);
 * every access error of the responder's key check (stale variant, another PD, out of bounds,
 * a right missing, for WRITE, READ and atomics) with the requester's syndrome, the QP states
 * of both sides and the target untouched; a datagram with a bad ICRC dropped and counted;
 * the GID table through QUERY_ROCE_ADDRESS. The IPv4 receive path (a raw socket, so that the
 * ICRC covers the IP ID the sender chose): a WRITE sent with a non-zero ID lands, one whose ICRC
 * was taken over another ID is dropped as bad ICRC; without CAP_NET_RAW or with raw_rx off a
 * port falls back to its UDP socket.
 */
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <infiniband/mlx5dv.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "emu_mlx5.h"
#include "mem_space.h"
#include "mlx5_commands.h"
#include "mlx5_cq.h"
#include "mlx5_device.h"
#include "mlx5_eq.h"
#include "mlx5_qp.h"
#include "mlx5_uar.h"
#include "mr_keys.h"
#include "netns.h"
#include "roce_packet.h"
#include "wire_rig.h"

namespace {
using namespace wire_rig;
using nicmr::test::enter_netns;
using nicmr::test::NetnsPair;
using nicmr::test::sh;

struct Param {
	const char *name;
	bool ipv6;
	uint32_t mtu;
	emu::DoorbellDelivery delivery;
	/* Two network namespaces joined by a veth pair, one side in each: two hosts. */
	bool netns = false;
	/* Both ports' GSO sends fail with this errno (the test hook of a refusing kernel). */
	int gso_errno = 0;
	/* Both ports' UDP sockets ask for GRO (off: one datagram a message, a lone one taken
	 * with recvfrom). */
	bool gro = true;
};

class Wire : public ::testing::TestWithParam<Param> {
protected:
	void SetUp() override
	{
		const Param &p = GetParam();
		std::string addr = p.ipv6 ? "::1" : "127.0.0.1";
		std::string peer_addr = addr;
		if (p.netns) {
			netns_ = std::make_unique<NetnsPair>(p.ipv6);
			if (!netns_->ok())
				GTEST_SKIP() << netns_->why;
			home_ = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
			ASSERT_GE(home_, 0);
			addr = netns_->addr_a;
			peer_addr = netns_->addr_b;
		} else if (p.ipv6) {
			const int t = ::socket(AF_INET6, SOCK_DGRAM, 0);
			sockaddr_in6 sa{};
			sa.sin6_family = AF_INET6;
			sa.sin6_addr = in6addr_loopback;
			const bool ok = t >= 0 && ::bind(t, reinterpret_cast<sockaddr *>(&sa),
							 sizeof(sa)) == 0;
			if (t >= 0)
				::close(t);
			if (!ok)
				GTEST_SKIP() << "no IPv6 loopback address (::1) on this host";
		}
		/* Ports of this process's own, so that parallel runs do not meet. */
		const auto base = static_cast<uint16_t>(20000 + (getpid() % 15000) * 2);
		/* Two hosts both listen on RoCEv2's port; one host needs two. */
		const uint16_t pa = p.netns ? roce::udp_port : base;
		const uint16_t pb = p.netns ? roce::udp_port : static_cast<uint16_t>(base + 1);
		WireOptions mine{addr, pa, pb, p.mtu, p.delivery};
		WireOptions theirs{peer_addr, pb, pa, p.mtu, emu::DoorbellDelivery::inline_call};
		mine.test_gso_errno = theirs.test_gso_errno = p.gso_errno;
		mine.gro = theirs.gro = p.gro;
		options(&mine, &theirs);
		int sv[2];
		ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		child_ = ::fork();
		ASSERT_GE(child_, 0);
		if (child_ == 0) {
			::close(sv[0]);
			if (p.netns && !enter_netns(netns_->b))
				::_exit(9);
			::_exit(responder(sv[1], theirs));
		}
		::close(sv[1]);
		fd_ = sv[0];
		/* This thread into namespace A: the device's sockets and its thread are made
		 * there. TearDown comes back. */
		if (p.netns) {
			ASSERT_TRUE(enter_netns(netns_->a));
		}
		ASSERT_EQ(me_->open(mine), 0);
		/* The GID table: entry 0 is the port's address as a RoCEv2 GID. */
		EXPECT_EQ(me_->gid.version, prm::roce_addr_layout::version_2);
		EXPECT_EQ(me_->gid.l3_type, p.ipv6 ? prm::roce_addr_layout::l3_type_ipv6
						   : prm::roce_addr_layout::l3_type_ipv4);
		uint8_t want[16] = {};
		if (p.ipv6) {
			ASSERT_EQ(inet_pton(AF_INET6, addr.c_str(), want), 1);
		} else {
			want[10] = want[11] = 0xff;
			ASSERT_EQ(inet_pton(AF_INET, addr.c_str(), want + 12), 1);
		}
		EXPECT_EQ(std::memcmp(me_->gid.gid.data(), want, 16), 0);
		ASSERT_TRUE(full_read(fd_, peer_gid_.data(), 16));
		ASSERT_TRUE(full_write(fd_, me_->gid.gid.data(), 16));
		ASSERT_EQ(me_->make_qp(peer_gid_.data()), 0);
		ASSERT_TRUE(full_read(fd_, &peer_, sizeof(peer_)));
		Info info{};
		info.qpn = me_->qp->qpn();
		ASSERT_TRUE(full_write(fd_, &info, sizeof(info)));
		ASSERT_EQ(me_->qp->connect(peer_.qpn), 0);
		/* The responder answers once its QP is in RTS: a request sent before would be
		 * dropped, and nothing retransmits it yet. */
		ASSERT_EQ(peer_state(), static_cast<uint32_t>(emu::QpState::rts));
		ASSERT_EQ(me_->mr(0, kRegion * 2, true, true, false, false, false, false, &lkey_),
			  0);
	}

	/* A fixture's changes to the options of this side and of the responder. */
	virtual void options(WireOptions *mine, WireOptions *theirs)
	{
		(void)mine;
		(void)theirs;
	}

	void TearDown() override
	{
		if (child_ > 0) {
			Req r{op_exit, 0, 0};
			full_write(fd_, &r, sizeof(r));
			int st = 0;
			::waitpid(child_, &st, 0);
			EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
				<< "responder exit status " << st;
		}
		if (fd_ >= 0)
			::close(fd_);
		if (home_ >= 0) {
			me_.reset(); /* its sockets and thread belong to namespace A */
			EXPECT_EQ(::setns(home_, CLONE_NEWNET), 0);
			::close(home_);
		}
		netns_.reset();
	}

	std::vector<uint8_t> dump(uint32_t off, uint32_t len)
	{
		std::vector<uint8_t> v(len);
		Req r{op_dump, off, len};
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, v.data(), len));
		return v;
	}
	uint32_t peer_state()
	{
		uint32_t st = 0xff;
		Req r{op_state, 0, 0};
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &st, sizeof(st)));
		return st;
	}
	emu::WireStats peer_stats()
	{
		emu::WireStats ws{};
		Req r{op_stats, 0, 0};
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &ws, sizeof(ws)));
		return ws;
	}
	/* Both QPs back to RTS after an error (2RST, then connected again: PSNs from 0). */
	void recover_both()
	{
		Req r{op_recover, 0, 0};
		int32_t rc = -1;
		ASSERT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &rc, sizeof(rc)));
		ASSERT_EQ(rc, 0);
		ASSERT_EQ(me_->qp->recover(), 0);
	}

	std::string stats_text()
	{
		const emu::WireStats a = me_->hw->device().data_path().wire_stats();
		const emu::WireStats b = peer_stats();
		std::string t;
		for (const emu::WireStats *w : {&a, &b})
			t += "tx " + std::to_string(w->tx_packets) + " txerr " +
			     std::to_string(w->tx_errors) + " rx " + std::to_string(w->rx_packets) +
			     " drop " + std::to_string(w->rx_dropped) + " acks " +
			     std::to_string(w->acks_sent) + " naks " +
			     std::to_string(w->naks_sent) + " nakrx " +
			     std::to_string(w->naks_received) + "; ";
		return t;
	}

	uint8_t *local() { return me_->region(); }
	uint64_t laddr(size_t off) { return reinterpret_cast<uintptr_t>(local()) + off; }
	uint64_t raddr(size_t off) const { return peer_.region + off; }
	mlx5::Sge sge(size_t off, uint32_t len) { return {laddr(off), len, lkey_}; }

	/* Posts one request and returns its completion. */
	mlx5::Completion run(int rc_post)
	{
		EXPECT_EQ(rc_post, 0);
		mlx5::Completion c;
		EXPECT_TRUE(me_->wait(&c)) << "no completion";
		return c;
	}

	/* A refused request: its syndrome, the requester in ERR, the responder in ERR, the
	 * target untouched; then both recovered. */
	void expect_refused(int rc_post, uint8_t syndrome)
	{
		const mlx5::Completion c = run(rc_post);
		EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
		EXPECT_EQ(c.syndrome, syndrome);
		uint32_t st = 0;
		ASSERT_EQ(me_->qp->query_state(&st), 0);
		EXPECT_EQ(st, static_cast<uint32_t>(emu::QpState::err));
		EXPECT_EQ(peer_state(), static_cast<uint32_t>(emu::QpState::err));
		const std::vector<uint8_t> now = dump(0, kRegion);
		for (size_t i = 0; i < kRegion; i++)
			if (now[i] != pattern(i)) {
				ADD_FAILURE() << "responder byte " << i << " changed";
				break;
			}
		recover_both();
	}

	std::unique_ptr<Side> me_ = std::make_unique<Side>();
	Info peer_{};
	emu::Gid peer_gid_{};
	uint32_t lkey_ = 0;
	pid_t child_ = -1;
	int fd_ = -1;
	std::unique_ptr<NetnsPair> netns_;
	int home_ = -1; /* this thread's network namespace before SetUp */
};

TEST_P(Wire, RdmaWriteOfOneAndManyPacketsLandsByteForByte)
{
	const uint32_t mtu = 128u << GetParam().mtu;
	const uint32_t sizes[] = {1, 8, mtu - 1, mtu, mtu + 1, 5 * mtu + 13, 20000};
	uint32_t off = 0;
	for (uint32_t len : sizes) {
		for (uint32_t i = 0; i < len; i++)
			local()[i] = static_cast<uint8_t>(0xa5 ^ (i * 13) ^ len);
		const mlx5::Sge s = sge(0, len);
		const mlx5::Completion c = run(me_->qp->post_write(
			{&s, 1}, raddr(off), peer_.keys[k_rw], 1, mlx5::kSignaled));
		ASSERT_TRUE(c.ok()) << "len " << len << " syndrome " << int(c.syndrome);
		EXPECT_EQ(c.byte_len, len);
		const std::vector<uint8_t> got = dump(off, len);
		EXPECT_EQ(std::memcmp(got.data(), local(), len), 0) << "len " << len;
		/* The bytes around it are as they were. */
		const std::vector<uint8_t> after = dump(off + len, 1);
		EXPECT_EQ(after[0], pattern(off + len));
		off += len + 1;
	}
	const emu::WireStats ws = peer_stats();
	EXPECT_GT(ws.acks_sent, 0u);
	EXPECT_EQ(ws.naks_sent, 0u);
	EXPECT_EQ(ws.rx_bad_icrc, 0u);
}

/*
 * A message of many packets leaves in few system calls: a 40000-byte WRITE and the responses of
 * a 40000-byte READ each go out in one sendmmsg (the port's send batch holds them whole), on
 * IPv6 with the equal MIDDLE packets as UDP GSO runs (the FIRST alone: its RETH or AETH makes
 * it longer); on IPv4 without GSO (the IP IDs of GSO segments). With GSO refused (the test
 * hook) the first run falls back once and the data is the same.
 */
TEST_P(Wire, LargeMessagesGoOutInFewSystemCalls)
{
	const Param &p = GetParam();
	const uint32_t mtu = 128u << p.mtu;
	constexpr uint32_t len = 40000;
	const uint32_t packets = (len + mtu - 1) / mtu;
	/* MIDDLEs of mtu + 16 bytes (BTH, ICRC) per run: the segment and byte limits. */
	const uint32_t per_run = std::min<uint32_t>(emu::WirePort::kGsoSegments,
						    emu::WirePort::kGsoBytes / (mtu + 16));
	const uint32_t runs = (packets - 1 + per_run - 1) / per_run;
	const bool gso = p.ipv6 && p.gso_errno == 0;
	const bool gro = gso && p.gro; /* GSO sends that arrive coalesced */
	const auto mine = [&] { return me_->hw->device().data_path().wire_stats(); };

	for (uint32_t i = 0; i < len; i++)
		local()[i] = static_cast<uint8_t>(i * 31 + 5);
	emu::WireStats before = mine();
	const emu::WireStats peer_before = peer_stats();
	const mlx5::Sge w = sge(0, len);
	mlx5::Completion c =
		run(me_->qp->post_write({&w, 1}, raddr(0), peer_.keys[k_rw], 1, mlx5::kSignaled));
	ASSERT_TRUE(c.ok()) << "syndrome " << int(c.syndrome) << " " << stats_text();
	std::vector<uint8_t> got = dump(0, len);
	EXPECT_EQ(std::memcmp(got.data(), local(), len), 0);
	emu::WireStats after = mine();
	EXPECT_EQ(after.tx_packets - before.tx_packets, packets);
	EXPECT_EQ(after.tx_errors, 0u);
	/* One sendmmsg; with GSO refused, the FIRST's call and the rest's after the refusal
	 * (the first refusal of this port) or one (refused before). */
	const uint64_t calls = after.tx_syscalls - before.tx_syscalls;
	if (p.gso_errno != 0 && before.tx_gso_refused == 0)
		EXPECT_EQ(calls, 2u);
	else
		EXPECT_EQ(calls, 1u);
	EXPECT_EQ(after.tx_gso_sends - before.tx_gso_sends, gso ? runs : 0u);
	EXPECT_EQ(after.tx_gso_refused, p.ipv6 && p.gso_errno != 0 ? 1u : 0u);
	/* The receiver's UDP GRO: each GSO send arrives whole (loopback and veth pass it on
	 * unsegmented to a GRO socket), split into its packets, each checked; the data above
	 * is exact. The IPv4 ports receive through their raw socket: no GRO. Without GRO the
	 * kernel cuts each GSO send into its datagrams before the socket (udp_rcv_segment). */
	const emu::WireStats peer_after = peer_stats();
	EXPECT_EQ(peer_after.rx_gro_batches - peer_before.rx_gro_batches, gro ? runs : 0u);
	EXPECT_EQ(peer_after.rx_gro_datagrams - peer_before.rx_gro_datagrams,
		  gro ? packets - 1 : 0u);
	EXPECT_EQ(peer_after.rx_packets - peer_before.rx_packets, packets);
	EXPECT_EQ(peer_after.rx_bad_icrc, 0u);

	/* The READ's responses, from the responder's port. */
	std::memset(local() + kRegion, 0, len + 1);
	const emu::WireStats pb = peer_stats();
	const mlx5::Sge r = sge(kRegion, len);
	c = run(me_->qp->post_read({&r, 1}, raddr(0), peer_.keys[k_ro], 2, mlx5::kSignaled));
	ASSERT_TRUE(c.ok()) << "syndrome " << int(c.syndrome) << " " << stats_text();
	EXPECT_EQ(std::memcmp(local() + kRegion, local(), len), 0);
	EXPECT_EQ(local()[kRegion + len], 0);
	const emu::WireStats pa = peer_stats();
	EXPECT_EQ(pa.tx_packets - pb.tx_packets, packets);
	EXPECT_EQ(pa.tx_errors, 0u);
	if (p.gso_errno != 0 && pb.tx_gso_refused == 0)
		EXPECT_EQ(pa.tx_syscalls - pb.tx_syscalls, 2u);
	else
		EXPECT_EQ(pa.tx_syscalls - pb.tx_syscalls, 1u);
	/* A READ's LAST carries an AETH: 4 bytes longer than a MIDDLE when it is a whole
	 * MTU; 40000 bytes end short at every MTU here. */
	EXPECT_EQ(pa.tx_gso_sends - pb.tx_gso_sends, gso ? runs : 0u);
	EXPECT_EQ(pa.tx_gso_refused, p.ipv6 && p.gso_errno != 0 ? 1u : 0u);
	const emu::WireStats ra = mine();
	EXPECT_EQ(ra.rx_gro_batches - after.rx_gro_batches, gro ? runs : 0u);
	EXPECT_EQ(ra.rx_bad_icrc, 0u);
}

TEST_P(Wire, InlineWriteAndUnsignalledWritesCompleteInOrder)
{
	const char msg[] = "inline over the wire";
	mlx5::Completion c = run(me_->qp->post_write_inline(msg, sizeof(msg), raddr(100),
							    peer_.keys[k_rw], 7, mlx5::kSignaled));
	ASSERT_TRUE(c.ok());
	EXPECT_EQ(c.wr_id, 7u);
	std::vector<uint8_t> got = dump(100, sizeof(msg));
	EXPECT_EQ(std::memcmp(got.data(), msg, sizeof(msg)), 0);
	/* Three unsignalled writes and a signalled one: one CQE, everything landed. */
	for (int k = 0; k < 4; k++) {
		for (int i = 0; i < 300; i++)
			local()[k * 300 + i] = static_cast<uint8_t>(k + i);
		const mlx5::Sge s = sge(k * 300, 300);
		ASSERT_EQ(me_->qp->post_write({&s, 1}, raddr(1000 + k * 300), peer_.keys[k_rw],
					      10 + k, k == 3 ? unsigned{mlx5::kSignaled} : 0u),
			  0);
	}
	c = mlx5::Completion{};
	ASSERT_TRUE(me_->wait(&c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.wr_id, 13u);
	got = dump(1000, 1200);
	EXPECT_EQ(std::memcmp(got.data(), local(), 1200), 0);
}

TEST_P(Wire, RdmaReadGathersMultiPacketResponses)
{
	const uint32_t mtu = 128u << GetParam().mtu;
	const uint32_t sizes[] = {1, mtu, mtu + 7, 3 * mtu, 9000, 40000};
	for (uint32_t len : sizes) {
		std::memset(local(), 0, len + 1);
		const uint32_t from = 333;
		const mlx5::Sge s = sge(0, len);
		const mlx5::Completion c = run(me_->qp->post_read(
			{&s, 1}, raddr(from), peer_.keys[k_rw], 2, mlx5::kSignaled));
		ASSERT_TRUE(c.ok()) << "len " << len << " syndrome " << int(c.syndrome);
		EXPECT_EQ(c.byte_len, len);
		for (uint32_t i = 0; i < len; i++)
			if (local()[i] != pattern(from + i)) {
				ADD_FAILURE() << "len " << len << ": byte " << i;
				break;
			}
		EXPECT_EQ(local()[len], 0) << "a byte past the READ's buffer was written";
	}
	/* A READ scattered over two local SGEs. */
	std::memset(local(), 0, 4096);
	const mlx5::Sge two[2] = {sge(0, 1500), sge(2048, 1000)};
	const mlx5::Completion c =
		run(me_->qp->post_read(two, raddr(0), peer_.keys[k_ro], 3, mlx5::kSignaled));
	ASSERT_TRUE(c.ok());
	EXPECT_EQ(c.byte_len, 2500u);
	for (uint32_t i = 0; i < 1500; i++)
		ASSERT_EQ(local()[i], pattern(i));
	for (uint32_t i = 0; i < 1000; i++)
		ASSERT_EQ(local()[2048 + i], pattern(1500 + i));
}

TEST_P(Wire, AtomicsReturnTheOldValueAndChangeTheWord)
{
	/* The device's atomic mode: big-endian words at power-on, host order once the driver
	 * asked for it (mlx5::Device does when offered). */
	const bool host = me_->hw->device().data_path().atomic_host_endianness();
	const auto word = [&](const uint8_t *p) {
		uint64_t v;
		std::memcpy(&v, p, 8);
		return host ? v : be64toh(v);
	};
	const uint32_t at = 512;
	std::vector<uint8_t> before = dump(at, 8);
	const uint64_t v0 = word(before.data());
	mlx5::Completion c = run(me_->qp->post_atomic_fa(sge(0, 8), raddr(at), peer_.keys[k_rw],
							 0x1000, 4, mlx5::kSignaled));
	ASSERT_TRUE(c.ok()) << int(c.syndrome);
	EXPECT_EQ(c.byte_len, 8u);
	EXPECT_EQ(word(local()), v0);
	EXPECT_EQ(word(dump(at, 8).data()), v0 + 0x1000);
	/* Compare-swap that matches, then one that does not. */
	c = run(me_->qp->post_atomic_cs(sge(8, 8), raddr(at), peer_.keys[k_rw], v0 + 0x1000,
					0x1122334455667788ull, 5, mlx5::kSignaled));
	ASSERT_TRUE(c.ok());
	EXPECT_EQ(word(local() + 8), v0 + 0x1000);
	EXPECT_EQ(word(dump(at, 8).data()), 0x1122334455667788ull);
	c = run(me_->qp->post_atomic_cs(sge(16, 8), raddr(at), peer_.keys[k_rw], 1, 2, 6,
					mlx5::kSignaled));
	ASSERT_TRUE(c.ok());
	EXPECT_EQ(word(local() + 16), 0x1122334455667788ull);
	EXPECT_EQ(word(dump(at, 8).data()), 0x1122334455667788ull);
	/* The bytes around the word are untouched. */
	const std::vector<uint8_t> around = dump(at - 8, 24);
	for (int i = 0; i < 8; i++) {
		EXPECT_EQ(around[i], pattern(at - 8 + i));
		EXPECT_EQ(around[16 + i], pattern(at + 8 + i));
	}
}

TEST_P(Wire, RemoteAccessErrorsAreNakedBeforeAByteMoves)
{
	const uint32_t mtu = 128u << GetParam().mtu;
	for (size_t i = 0; i < 3 * mtu; i++)
		local()[i] = 0xee;
	const uint32_t rw = peer_.keys[k_rw];
	const uint32_t stale = (rw & ~0xffu) | ((rw + 1) & 0xff); /* index right, variant not */
	const mlx5::Sge one = sge(0, 64);
	const mlx5::Sge many = sge(0, 3 * mtu);
	constexpr uint8_t kAccess = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
	/* WRITE: stale variant, another PD, out of bounds (one and many packets), no rw. */
	expect_refused(me_->qp->post_write({&one, 1}, raddr(0), stale, 1, 0), kAccess);
	expect_refused(me_->qp->post_write({&one, 1}, raddr(0), peer_.keys[k_other_pd], 1, 0),
		       kAccess);
	expect_refused(
		me_->qp->post_write({&one, 1}, raddr(kSmall - 32), peer_.keys[k_small], 1, 0),
		kAccess);
	expect_refused(me_->qp->post_write({&many, 1}, raddr(0), peer_.keys[k_small], 1, 0),
		       kAccess);
	expect_refused(me_->qp->post_write({&many, 1}, raddr(0), peer_.keys[k_ro], 1, 0), kAccess);
	/* READ: stale, out of bounds, no rr. */
	expect_refused(me_->qp->post_read({&one, 1}, raddr(0), stale, 1, 0), kAccess);
	expect_refused(me_->qp->post_read({&many, 1}, raddr(0), peer_.keys[k_small], 1, 0),
		       kAccess);
	expect_refused(me_->qp->post_read({&one, 1}, raddr(0), peer_.keys[k_wo], 1, 0), kAccess);
	/* Atomics: no a, another PD, out of bounds. */
	expect_refused(
		me_->qp->post_atomic_fa(sge(0, 8), raddr(64), peer_.keys[k_noatomic], 1, 1, 0),
		kAccess);
	expect_refused(
		me_->qp->post_atomic_cs(sge(0, 8), raddr(64), peer_.keys[k_other_pd], 0, 1, 1, 0),
		kAccess);
	expect_refused(
		me_->qp->post_atomic_fa(sge(0, 8), raddr(kSmall), peer_.keys[k_small], 1, 1, 0),
		kAccess);
	/* A misaligned atomic target is an invalid request (IBTA), not an access error. */
	expect_refused(me_->qp->post_atomic_fa(sge(0, 8), raddr(4), peer_.keys[k_rw], 1, 1, 0),
		       MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	/* One NAK reached the requester per refusal. The responder may have sent one more: a
	 * packet of a refused multi-packet WRITE, resent by the requester's timer before its NAK
	 * came back on a loaded machine, can reach the responder once the pair is recovered, which
	 * NAKs it as out of sequence (IBTA 9.7.5.1.2) and the requester drops as stale. */
	EXPECT_GE(peer_stats().naks_sent, 12u);
	EXPECT_EQ(me_->hw->device().data_path().wire_stats().naks_received, 12u);
	/* After recovery the pair works again. */
	const mlx5::Completion c =
		run(me_->qp->post_write({&one, 1}, raddr(0), rw, 9, mlx5::kSignaled));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(dump(0, 64), std::vector<uint8_t>(64, 0xee));
}

TEST_P(Wire, FailedRequestFlushesTheOnesBehindIt)
{
	const mlx5::Sge one = sge(0, 16);
	ASSERT_EQ(me_->qp->post_write({&one, 1}, raddr(0), peer_.keys[k_ro], 1, 0), 0);
	ASSERT_EQ(me_->qp->post_write({&one, 1}, raddr(0), peer_.keys[k_rw], 2, mlx5::kSignaled),
		  0);
	mlx5::Completion c[2];
	ASSERT_TRUE(me_->wait(&c[0])) << stats_text();
	ASSERT_TRUE(me_->wait(&c[1]));
	EXPECT_EQ(c[0].wr_id, 1u);
	EXPECT_EQ(c[0].syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_EQ(c[1].wr_id, 2u);
	EXPECT_EQ(c[1].syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	const std::vector<uint8_t> now = dump(0, 16);
	for (size_t i = 0; i < 16; i++)
		EXPECT_EQ(now[i], pattern(i));
}

TEST_P(Wire, BadIcrcIsDroppedAndCounted)
{
	/* A WRITE ONLY to the responder's QP built over the right path, one ICRC byte flipped,
	 * sent from a socket of this process at the requester's address and port. */
	const emu::WirePort *wp = me_->hw->device().data_path().wire_port(1);
	ASSERT_NE(wp, nullptr);
	const emu::WireStats before = peer_stats();
	roce::Headers h;
	h.opcode = roce::opcode::write_only;
	h.dest_qp = peer_.qpn;
	h.psn = 0;
	h.reth = {raddr(0), peer_.keys[k_rw], 4};
	const uint8_t payload[4] = {1, 2, 3, 4};
	uint8_t pkt[128];
	size_t len = 0;
	ASSERT_EQ(roce::build(wp->tx_path(peer_gid_), h, payload, pkt, &len), roce::Error::ok);
	pkt[len - 1] ^= 0xff;
	const int fd = wp->fd();
	sockaddr_storage ss{};
	socklen_t sl = 0;
	if (GetParam().ipv6) {
		auto &sa = reinterpret_cast<sockaddr_in6 &>(ss);
		sa.sin6_family = AF_INET6;
		std::memcpy(sa.sin6_addr.s6_addr, peer_gid_.data(), 16);
		sa.sin6_port = htons(wp->peer_udp_port());
		sl = sizeof(sa);
	} else {
		auto &sa = reinterpret_cast<sockaddr_in &>(ss);
		sa.sin_family = AF_INET;
		std::memcpy(&sa.sin_addr.s_addr, peer_gid_.data() + 12, 4);
		sa.sin_port = htons(wp->peer_udp_port());
		sl = sizeof(sa);
	}
	ASSERT_EQ(::sendto(fd, pkt, len, 0, reinterpret_cast<sockaddr *>(&ss), sl),
		  static_cast<ssize_t>(len));
	emu::WireStats after{};
	const auto deadline = std::chrono::steady_clock::now() + 3s;
	do {
		after = peer_stats();
	} while (after.rx_bad_icrc == before.rx_bad_icrc &&
		 std::chrono::steady_clock::now() < deadline);
	EXPECT_EQ(after.rx_bad_icrc, before.rx_bad_icrc + 1);
	EXPECT_EQ(dump(0, 4),
		  (std::vector<uint8_t>{pattern(0), pattern(1), pattern(2), pattern(3)}));
	EXPECT_EQ(peer_state(), static_cast<uint32_t>(emu::QpState::rts));
}

/*
 * Sends datagram from src (an IPv4 address and UDP port) to dst through an IP_HDRINCL raw
 * socket (raw(7), IPPROTO_RAW), with the IPv4 ID and DF given: what a UDP socket cannot choose
 * and Linux rxe does (rxe_net.c prepare_ipv4_hdr). The UDP checksum is 0 (none, as IPv4
 * allows); the kernel fills the IP header's checksum and total length.
 */
bool send_with_ip_id(const uint8_t *src, uint16_t sport, const uint8_t *dst, uint16_t dport,
		     uint16_t id, bool df, const uint8_t *datagram, size_t len)
{
	const int fd = ::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
	if (fd < 0)
		return false;
	std::vector<uint8_t> pkt(roce::ipv4::size + roce::udp::size + len, 0);
	uint8_t *ip = pkt.data();
	uint8_t *u = ip + roce::ipv4::size;
	prm::set(ip, roce::ipv4::version, 4);
	prm::set(ip, roce::ipv4::ihl, roce::ipv4::size / 4);
	prm::set(ip, roce::ipv4::total_length, pkt.size());
	prm::set(ip, roce::ipv4::id, id);
	prm::set(ip, roce::ipv4::flags_frag, df ? roce::ipv4::flag_df : 0);
	prm::set(ip, roce::ipv4::ttl, 64);
	prm::set(ip, roce::ipv4::protocol, roce::ipv4::protocol_udp);
	std::memcpy(ip + prm::byte_offset(roce::ipv4::src), src, 4);
	std::memcpy(ip + prm::byte_offset(roce::ipv4::dst), dst, 4);
	prm::set(u, roce::udp::src_port, sport);
	prm::set(u, roce::udp::dst_port, dport);
	prm::set(u, roce::udp::length, roce::udp::size + len);
	std::memcpy(u + roce::udp::size, datagram, len);
	sockaddr_in sa{};
	sa.sin_family = AF_INET;
	std::memcpy(&sa.sin_addr.s_addr, dst, 4);
	const ssize_t n = ::sendto(fd, pkt.data(), pkt.size(), 0,
				   reinterpret_cast<const sockaddr *>(&sa), sizeof(sa));
	::close(fd);
	return n == static_cast<ssize_t>(pkt.size());
}

TEST_P(Wire, Ipv4IdOtherThanZeroIsCoveredByTheIcrc)
{
	if (GetParam().ipv6)
		GTEST_SKIP() << "IPv6 has no ID";
	const emu::WirePort *wp = me_->hw->device().data_path().wire_port(1);
	ASSERT_NE(wp, nullptr);
	if (!wp->raw_rx())
		GTEST_SKIP() << "no raw receive socket (CAP_NET_RAW needed)";
	/* A WRITE ONLY of 4 bytes at offset 0 with the responder's first PSN (0: nothing was
	 * sent yet), from the requester's address and port, with ID 0x1234 and no DF. */
	roce::Headers h;
	h.opcode = roce::opcode::write_only;
	h.dest_qp = peer_.qpn;
	h.psn = 0;
	h.reth = {raddr(0), peer_.keys[k_rw], 4};
	const uint8_t payload[4] = {0xa1, 0xb2, 0xc3, 0xd4};
	roce::IpPath path = wp->tx_path(peer_gid_);
	path.ipv4_id = 0x1234;
	path.ipv4_df = false;
	uint8_t pkt[128];
	size_t len = 0;
	ASSERT_EQ(roce::build(path, h, payload, pkt, &len), roce::Error::ok);
	/* First the same packet with the ICRC taken over ID 0 (what a UDP socket would assume):
	 * dropped as bad ICRC, nothing written. */
	roce::IpPath id0 = path;
	id0.ipv4_id = 0;
	uint8_t wrong[128];
	size_t wlen = 0;
	ASSERT_EQ(roce::build(id0, h, payload, wrong, &wlen), roce::Error::ok);
	ASSERT_EQ(wlen, len);
	const emu::WireStats before = peer_stats();
	ASSERT_TRUE(send_with_ip_id(path.src.data(), path.src_port, path.dst.data(), path.dst_port,
				    0x1234, false, wrong, wlen));
	emu::WireStats after{};
	auto deadline = std::chrono::steady_clock::now() + 3s;
	do {
		after = peer_stats();
	} while (after.rx_bad_icrc == before.rx_bad_icrc &&
		 std::chrono::steady_clock::now() < deadline);
	EXPECT_EQ(after.rx_bad_icrc, before.rx_bad_icrc + 1);
	EXPECT_EQ(dump(0, 4),
		  (std::vector<uint8_t>{pattern(0), pattern(1), pattern(2), pattern(3)}));
	/* Then the packet whose ICRC covers the ID it travels with: executed. */
	ASSERT_TRUE(send_with_ip_id(path.src.data(), path.src_port, path.dst.data(), path.dst_port,
				    0x1234, false, pkt, len));
	std::vector<uint8_t> now;
	deadline = std::chrono::steady_clock::now() + 3s;
	do {
		now = dump(0, 4);
	} while (now[0] != payload[0] && std::chrono::steady_clock::now() < deadline);
	EXPECT_EQ(now, (std::vector<uint8_t>{0xa1, 0xb2, 0xc3, 0xd4}));
	EXPECT_EQ(peer_stats().rx_bad_icrc, after.rx_bad_icrc);
	EXPECT_EQ(peer_state(), static_cast<uint32_t>(emu::QpState::rts));
}

INSTANTIATE_TEST_SUITE_P(
	Paths, Wire,
	::testing::Values(Param{"ipv4_mtu1024", false, prm::qp_mtu::mtu_1024,
				emu::DoorbellDelivery::inline_call},
			  Param{"ipv4_mtu256", false, prm::qp_mtu::mtu_256,
				emu::DoorbellDelivery::inline_call},
			  Param{"ipv4_mtu4096_thread", false, prm::qp_mtu::mtu_4096,
				emu::DoorbellDelivery::poll_thread},
			  Param{"ipv6_mtu1024", true, prm::qp_mtu::mtu_1024,
				emu::DoorbellDelivery::inline_call},
			  Param{"netns_ipv4_mtu1024", false, prm::qp_mtu::mtu_1024,
				emu::DoorbellDelivery::inline_call, true},
			  Param{"netns_ipv6_mtu1024", true, prm::qp_mtu::mtu_1024,
				emu::DoorbellDelivery::inline_call, true},
			  Param{"ipv6_mtu256_gso_refused", true, prm::qp_mtu::mtu_256,
				emu::DoorbellDelivery::inline_call, false, EIO},
			  Param{"ipv6_mtu1024_no_gro", true, prm::qp_mtu::mtu_1024,
				emu::DoorbellDelivery::inline_call, false, 0, false}),
	[](const ::testing::TestParamInfo<Param> &i) { return std::string(i.param.name); });

/*
 * The responder's own limit on READ and atomic requests (its 2^log_rra_max resources, set at
 * INIT2RTR): this side's QP may have 8 in flight (log_sra_max 3), the responder offers 2
 * (log_rra_max 1). The responder process is stopped while the requests go out, so that they
 * wait for it together, as requests wait for a busy responder's resources: two are answered,
 * a third is NAKed as an invalid request, executes nothing, and fails with
 * REMOTE_INVAL_REQ_ERR here.
 */
class WireResponderResources : public Wire {
protected:
	void options(WireOptions *mine, WireOptions *theirs) override
	{
		mine->log_sra_max = 3;
		theirs->log_rra_max = 1;
		/* The responder counts its resources per receive batch: it takes what waits
		 * in its socket together, as a NIC sees what arrived together. */
		theirs->rx_batch = emu::WireRx::kMessages;
	}
	/* Posts the WQEs that post() posts with the responder stopped, waits until their
	 * count of datagrams left this side, then lets the responder run. */
	template <class Post> void while_stopped(uint64_t datagrams, Post post)
	{
		const auto sent = [&] {
			return me_->hw->device().data_path().wire_stats().tx_packets;
		};
		ASSERT_EQ(::kill(child_, SIGSTOP), 0);
		int st = 0;
		ASSERT_EQ(::waitpid(child_, &st, WUNTRACED), child_);
		ASSERT_TRUE(WIFSTOPPED(st));
		const uint64_t before = sent();
		post();
		const auto deadline = std::chrono::steady_clock::now() + 2s;
		while (sent() < before + datagrams && std::chrono::steady_clock::now() < deadline)
			std::this_thread::sleep_for(100us);
		EXPECT_EQ(sent(), before + datagrams);
		ASSERT_EQ(::kill(child_, SIGCONT), 0);
	}
	uint64_t word(uint32_t off)
	{
		const std::vector<uint8_t> b = dump(off, 8);
		uint64_t v = 0;
		std::memcpy(&v, b.data(), 8);
		return v;
	}
};

TEST_P(WireResponderResources, RequestsBeyondTheResponderLimitAreInvalid)
{
	const uint32_t fa_off = 64; /* the fetch-add's word */
	const uint64_t w0 = word(fa_off);
	/* As many as the responder offers (a READ and a fetch-add): both executed. */
	mlx5::Sge r1 = sge(0, 16), a1 = sge(32, 8);
	while_stopped(2, [&] {
		ASSERT_EQ(me_->qp->post_read({&r1, 1}, raddr(0), peer_.keys[k_rw], 1, 0), 0);
		ASSERT_EQ(me_->qp->post_atomic_fa(a1, raddr(fa_off), peer_.keys[k_rw], 5, 2,
						  mlx5::kSignaled),
			  0);
	});
	mlx5::Completion c;
	ASSERT_TRUE(me_->wait(&c));
	EXPECT_TRUE(c.ok()) << "syndrome " << int(c.syndrome) << " " << stats_text();
	EXPECT_EQ(c.wr_id, 2u);
	EXPECT_EQ(std::memcmp(local(), dump(0, 16).data(), 16), 0);
	const uint64_t w1 = word(fa_off);
	EXPECT_NE(w1, w0) << "the fetch-add executed";
	const emu::WireStats s0 = peer_stats();
	EXPECT_EQ(s0.rra_exceeded, 0u);

	/* One more than it offers (two READs and a fetch-add): the third is NAKed. */
	mlx5::Sge r2 = sge(100, 16), r3 = sge(200, 16), a2 = sge(300, 8);
	while_stopped(3, [&] {
		ASSERT_EQ(me_->qp->post_read({&r2, 1}, raddr(0), peer_.keys[k_rw], 3,
					     mlx5::kSignaled),
			  0);
		ASSERT_EQ(me_->qp->post_read({&r3, 1}, raddr(16), peer_.keys[k_rw], 4,
					     mlx5::kSignaled),
			  0);
		ASSERT_EQ(me_->qp->post_atomic_fa(a2, raddr(fa_off), peer_.keys[k_rw], 5, 6,
						  mlx5::kSignaled),
			  0);
	});
	for (const uint64_t id : {3u, 4u}) {
		ASSERT_TRUE(me_->wait(&c));
		EXPECT_EQ(c.wr_id, id);
		EXPECT_TRUE(c.ok()) << "wr " << id << " syndrome " << int(c.syndrome);
	}
	ASSERT_TRUE(me_->wait(&c));
	EXPECT_EQ(c.wr_id, 6u);
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	EXPECT_EQ(word(fa_off), w1) << "the refused fetch-add executed nothing";
	uint32_t st = 0;
	ASSERT_EQ(me_->qp->query_state(&st), 0);
	EXPECT_EQ(st, static_cast<uint32_t>(emu::QpState::err));
	EXPECT_EQ(peer_state(), static_cast<uint32_t>(emu::QpState::err));
	const emu::WireStats s1 = peer_stats();
	EXPECT_EQ(s1.rra_exceeded - s0.rra_exceeded, 1u);
	EXPECT_EQ(s1.naks_sent - s0.naks_sent, 1u);
	/* Recovered, one request at a time stays within the limit. */
	recover_both();
	const mlx5::Completion ok =
		run(me_->qp->post_read({&r1, 1}, raddr(0), peer_.keys[k_rw], 7, mlx5::kSignaled));
	EXPECT_TRUE(ok.ok());
}

INSTANTIATE_TEST_SUITE_P(Paths, WireResponderResources,
			 ::testing::Values(Param{"ipv4", false, prm::qp_mtu::mtu_1024,
						 emu::DoorbellDelivery::inline_call},
					   Param{"ipv6", true, prm::qp_mtu::mtu_1024,
						 emu::DoorbellDelivery::inline_call}),
			 [](const ::testing::TestParamInfo<Param> &i) {
				 return std::string(i.param.name);
			 });

/* A wire port the model cannot bind, and a wire for a port the device has not. */
TEST(WireConfig, RefusedAddresses)
{
	std::unique_ptr<emu::EmuMlx5> hw;
	emu::EmuConfig cfg;
	cfg.wire[0].addr = "not-an-address";
	EXPECT_EQ(emu::emu_mlx5_create(cfg, &hw), -EINVAL);
	cfg.wire[0].addr = "::ffff:127.0.0.1"; /* IPv4-mapped: give it as IPv4 */
	EXPECT_EQ(emu::emu_mlx5_create(cfg, &hw), -EINVAL);
	cfg.wire[0].addr = "192.0.2.1"; /* TEST-NET-1: not this host's */
	EXPECT_EQ(emu::emu_mlx5_create(cfg, &hw), -EADDRNOTAVAIL);
	cfg.wire[0].addr = "127.0.0.1";
	cfg.wire[0].rx_batch = emu::WireRx::kMessages + 1;
	EXPECT_EQ(emu::emu_mlx5_create(cfg, &hw), -EINVAL);
	cfg.wire[0].rx_batch = 0;
	cfg.wire[0].addr.clear();
	cfg.ports = 1;
	cfg.wire[1].addr = "127.0.0.1";
	EXPECT_EQ(emu::emu_mlx5_create(cfg, &hw), -EINVAL);
	/* Two devices on one address and port: the second is refused. */
	cfg.ports = 1;
	cfg.wire[1].addr.clear();
	cfg.wire[0].addr = "127.0.0.1";
	cfg.wire[0].udp_port = static_cast<uint16_t>(50000 + getpid() % 10000);
	std::unique_ptr<emu::EmuMlx5> first;
	ASSERT_EQ(emu::emu_mlx5_create(cfg, &first), 0);
	EXPECT_EQ(emu::emu_mlx5_create(cfg, &hw), -EADDRINUSE);
}

/* What a port's receive reports of a datagram sent with an IPv4 ID: its sender, its length,
 * its ID and DF (raw socket); ID 0 and DF with raw_rx off (the UDP socket cannot see them). */
TEST(WireRawReceive, ReportsTheIpv4IdAndSender)
{
	for (const bool raw : {true, false}) {
		SCOPED_TRACE(raw ? "raw socket" : "UDP socket");
		emu::WirePortConfig cfg{
			"127.0.0.1", wire_rig::free_udp_port(), roce::udp_port, {}, raw};
		emu::WirePort port;
		ASSERT_EQ(port.open(cfg), 0);
		if (raw && !port.raw_rx())
			GTEST_SKIP() << "no raw receive socket (CAP_NET_RAW needed)";
		EXPECT_EQ(port.raw_rx(), raw);
		EXPECT_EQ(port.rx_fd() == port.fd(), !raw);
		/* The socket that receives has the port's buffer (socket(7): the kernel doubles
		 * what it was asked, capped at net.core.rmem_max). */
		long rmem_max = 0;
		if (FILE *f = std::fopen("/proc/sys/net/core/rmem_max", "r")) {
			if (std::fscanf(f, "%ld", &rmem_max) != 1)
				rmem_max = 0;
			std::fclose(f);
		}
		int rcvbuf = 0;
		socklen_t rl = sizeof(rcvbuf);
		ASSERT_EQ(::getsockopt(port.rx_fd(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, &rl), 0);
		EXPECT_GE(rcvbuf, 2 * std::min<long>(emu::WirePort::kSocketBuffer, rmem_max));
		const uint8_t lo[4] = {127, 0, 0, 1};
		const uint8_t data[5] = {1, 2, 3, 4, 5};
		/* One to another UDP port first: the filter leaves it out. */
		ASSERT_TRUE(send_with_ip_id(lo, 5555, lo, static_cast<uint16_t>(cfg.udp_port + 1),
					    0x4321, true, data, sizeof(data)));
		ASSERT_TRUE(send_with_ip_id(lo, 5555, lo, cfg.udp_port, 0xbeef, false, data,
					    sizeof(data)));
		const emu::WireRx *rx = nullptr;
		const auto deadline = std::chrono::steady_clock::now() + 2s;
		do
			rx = &port.recv(4);
		while (rx->size() == 0 && std::chrono::steady_clock::now() < deadline);
		ASSERT_EQ(rx->size(), 1u);
		const emu::GroSplit d = rx->datagrams(0);
		ASSERT_EQ(d.count(), 1u);
		EXPECT_EQ(d[0].size(), sizeof(data));
		EXPECT_EQ(std::memcmp(d[0].data(), data, sizeof(data)), 0);
		const auto &sa = reinterpret_cast<const sockaddr_in &>(rx->peer(0));
		EXPECT_EQ(sa.sin_family, AF_INET);
		EXPECT_EQ(ntohs(sa.sin_port), 5555);
		EXPECT_EQ(ntohl(sa.sin_addr.s_addr), INADDR_LOOPBACK);
		EXPECT_EQ(rx->ip(0).ipv4_id, raw ? 0xbeef : 0);
		EXPECT_EQ(rx->ip(0).ipv4_df, !raw);
		const roce::IpPath p = port.rx_path(rx->peer(0), rx->ip(0));
		EXPECT_EQ(p.ipv4_id, rx->ip(0).ipv4_id);
		EXPECT_EQ(p.src_port, 5555);
		EXPECT_EQ(p.dst_port, cfg.udp_port);
		/* GRO only where the UDP socket receives. */
		EXPECT_EQ(port.gro_active(), !raw);
		EXPECT_EQ(port.recv(4).size(), 0u);
	}
}

/* Without CAP_NET_RAW (dropped in a child), an IPv4 port opens all the same and receives
 * through its UDP socket. */
TEST(WireRawReceive, WithoutCapNetRawFallsBackToTheUdpSocket)
{
	const pid_t child = ::fork();
	ASSERT_GE(child, 0);
	if (child == 0) {
		__user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
		__user_cap_data_struct data[2] = {};
		if (::syscall(SYS_capget, &hdr, data) != 0)
			::_exit(2);
		data[CAP_NET_RAW / 32].effective &= ~(1u << (CAP_NET_RAW % 32));
		data[CAP_NET_RAW / 32].permitted &= ~(1u << (CAP_NET_RAW % 32));
		if (::syscall(SYS_capset, &hdr, data) != 0)
			::_exit(3);
		emu::WirePort port;
		if (port.open({"127.0.0.1", wire_rig::free_udp_port(), roce::udp_port, {}, true}) !=
		    0)
			::_exit(4);
		::_exit(!port.raw_rx() && port.rx_fd() == port.fd() ? 0 : 5);
	}
	int st = 0;
	ASSERT_EQ(::waitpid(child, &st, 0), child);
	ASSERT_TRUE(WIFEXITED(st));
	EXPECT_EQ(WEXITSTATUS(st), 0);
}

/* INIT2RTR on a wire port without force loopback: the GID table's one entry, a remote GID of
 * the port's family; the driver's query refuses what it cannot send. */
TEST(WireConfig, Init2RtrNeedsEntryZeroAndTheSameFamily)
{
	Side s;
	ASSERT_EQ(s.open({"127.0.0.1", static_cast<uint16_t>(45000 + getpid() % 15000), 4791}), 0);
	mlx5::RoceAddress a;
	EXPECT_EQ(mlx5::query_roce_address(s.dev->cmdq(), 1, 0, nullptr), -EINVAL);
	EXPECT_EQ(mlx5::query_roce_address(s.dev->cmdq(), 1, 0x10000, &a), -EINVAL);
	EXPECT_EQ(mlx5::query_roce_address(s.dev->cmdq(), 16, 0, &a), -EINVAL);
	/* The PMTU register read: nothing sent for a null out or a port outside 1..255. */
	mlx5::PortMtu m;
	EXPECT_EQ(mlx5::query_pmtu(s.dev->cmdq(), 1, nullptr), -EINVAL);
	EXPECT_EQ(mlx5::query_pmtu(s.dev->cmdq(), 0, &m), -EINVAL);
	EXPECT_EQ(mlx5::query_pmtu(s.dev->cmdq(), 256, &m), -EINVAL);
	ASSERT_EQ(mlx5::query_pmtu(s.dev->cmdq(), 1, &m), 0);
	EXPECT_GT(m.oper, 0u);
	/* log_ack_req_freq is a 4-bit qpc field: 16 is refused before a command goes. */
	{
		mlx5::QpParams q;
		q.pd = s.pd.pd();
		q.log_ack_req_freq = 16;
		std::unique_ptr<mlx5::Qp> qp;
		EXPECT_EQ(mlx5::Qp::create(*s.dev, *s.uar, *s.cq, q, &qp), -EINVAL);
		q.log_ack_req_freq = 15;
		EXPECT_EQ(mlx5::Qp::create(*s.dev, *s.uar, *s.cq, q, &qp), 0);
		q.log_ack_req_freq = 16;
		EXPECT_EQ(qp->set_connection(q), -EINVAL);
	}
	const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
	const uint8_t v6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
	struct Case {
		const uint8_t *gid;
		uint32_t index;
		emu::Syndrome want;
	};
	for (const Case &c : {Case{v4, 1, emu::Syndrome::qp_gid_index},
			      Case{v6, 0, emu::Syndrome::qp_remote_gid}}) {
		mlx5::QpParams q;
		q.pd = s.pd.pd();
		q.port = 1;
		q.force_loopback = false;
		q.gid_index = c.index;
		std::memcpy(q.remote_gid.data(), c.gid, 16);
		std::unique_ptr<mlx5::Qp> qp;
		ASSERT_EQ(mlx5::Qp::create(*s.dev, *s.uar, *s.cq, q, &qp), 0);
		ASSERT_EQ(qp->to_init(), 0);
		EXPECT_EQ(qp->to_rtr(1), -EINVAL);
		EXPECT_EQ(s.dev->last_status(), prm::status::bad_param);
		EXPECT_EQ(s.dev->last_syndrome(), static_cast<uint32_t>(c.want));
	}
}

/* A device whose QP is connected to a peer that does not exist (127.0.0.2), reached through
 * EmuDataPath::wire_inject: packets "from" the peer without a socket. */
struct InjectRig {
	Side s;
	uint32_t key = 0;
	sockaddr_storage peer{};
	const emu::WirePort *wp = nullptr;

	void open()
	{
		WireOptions o;
		o.addr = "127.0.0.1";
		o.port = free_udp_port();
		o.peer_port = 9; /* what the device answers goes nowhere */
		ASSERT_EQ(s.open(o), 0);
		for (size_t i = 0; i < kRegion; i++)
			s.region()[i] = pattern(i);
		ASSERT_EQ(s.mr(0, kRegion, true, true, true, true, true, false, &key), 0);
		const uint8_t peer_gid[16] = {0, 0, 0,	  0,	0,   0, 0, 0,
					      0, 0, 0xff, 0xff, 127, 0, 0, 2};
		ASSERT_EQ(s.make_qp(peer_gid), 0);
		ASSERT_EQ(s.qp->connect(0x4242), 0);
		wp = dp().wire_port(1);
		ASSERT_NE(wp, nullptr);
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_port = htons(49152);
		ASSERT_EQ(inet_pton(AF_INET, "127.0.0.2", &a.sin_addr), 1);
		std::memcpy(&peer, &a, sizeof(a));
	}
	emu::EmuDataPath &dp() { return s.hw->device().data_path(); }
	emu::WireStats stats() { return dp().wire_stats(); }
	/* Builds h (to the QP) with payload and injects it; false when build refused it. */
	bool inject(roce::Headers h, std::span<const uint8_t> payload, bool break_icrc = false)
	{
		h.dest_qp = s.qp->qpn();
		uint8_t d[roce::max_datagram];
		size_t len = 0;
		if (roce::build(wp->rx_path(peer), h, payload, d, &len) != roce::Error::ok)
			return false;
		if (break_icrc)
			d[len - 1] ^= 1;
		return dp().wire_inject(1, d, len, peer) == 0;
	}
};

/* EmuDataPath::wire_inject (the fuzzer's way in, fuzz/fuzz_roce_datagram.cpp) runs what
 * poll_wire runs for a received datagram: a WRITE from the QP's peer lands and is ACKed, a bad
 * ICRC is counted and writes nothing; a port that is not on the wire is -ENODEV. */
TEST(WireInject, RunsTheReceivePathWithoutTheSocket)
{
	InjectRig r;
	ASSERT_NO_FATAL_FAILURE(r.open());
	const uint8_t payload[8] = {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4};
	uint8_t d[64];
	EXPECT_EQ(r.dp().wire_inject(0, d, sizeof(d), r.peer), -ENODEV);
	EXPECT_EQ(r.dp().wire_inject(2, d, sizeof(d), r.peer), -ENODEV); /* one port */
	roce::Headers h;
	h.opcode = roce::opcode::write_only;
	h.psn = 0; /* the QP's first expected PSN */
	h.ack_req = true;
	h.reth = {r.s.addr(16), r.key, sizeof(payload)};
	const emu::WireStats before = r.stats();
	ASSERT_TRUE(r.inject(h, payload));
	EXPECT_EQ(std::memcmp(r.s.region() + 16, payload, sizeof(payload)), 0);
	emu::WireStats ws = r.stats();
	EXPECT_EQ(ws.rx_packets, before.rx_packets + 1);
	EXPECT_EQ(ws.acks_sent, before.acks_sent + 1);

	/* The next PSN, its ICRC broken: dropped as bad_icrc, nothing written. */
	h.psn = 1;
	h.reth.va = r.s.addr(64);
	ASSERT_TRUE(r.inject(h, payload, true));
	ws = r.stats();
	EXPECT_EQ(ws.rx_packets, before.rx_packets + 2);
	EXPECT_EQ(ws.rx_bad_icrc, before.rx_bad_icrc + 1);
	for (size_t i = 64; i < 64 + sizeof(payload); i++)
		EXPECT_EQ(r.s.region()[i], pattern(i));
}

/* A zero-length RDMA WRITE or READ touches no memory, so the responder checks no key or
 * address (IBTA C9-88; Linux rxe_resp.c, check_rkey, does the same): a WRITE ONLY and a READ
 * REQUEST of DMA length 0 with rkey 0 and address 0 are executed (an ACK; one READ RESPONSE
 * ONLY), not NAKed with a remote access error, and the QP stays in RTS. Before, both were
 * refused, so a peer that sends them (rxe does for a WRITE of no SGE) lost its connection. */
TEST(WireInject, ZeroLengthWriteAndReadCheckNoKey)
{
	InjectRig r;
	ASSERT_NO_FATAL_FAILURE(r.open());
	roce::Headers h;
	h.opcode = roce::opcode::write_only;
	h.psn = 0;
	h.ack_req = true;
	h.reth = {0, 0, 0};
	emu::WireStats before = r.stats();
	ASSERT_TRUE(r.inject(h, {}));
	emu::WireStats ws = r.stats();
	EXPECT_EQ(ws.acks_sent, before.acks_sent + 1);
	EXPECT_EQ(ws.naks_sent, before.naks_sent);
	uint32_t st = 0;
	ASSERT_EQ(r.s.qp->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::rts);

	h.opcode = roce::opcode::read_request;
	h.psn = 1;
	before = r.stats();
	ASSERT_TRUE(r.inject(h, {}));
	ws = r.stats();
	EXPECT_EQ(ws.naks_sent, before.naks_sent);
	EXPECT_EQ(ws.tx_packets, before.tx_packets + 1) << "one READ RESPONSE ONLY";
	ASSERT_EQ(r.s.qp->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::rts);

	/* With a length, the same key and address are refused: a remote access error NAK. */
	h.opcode = roce::opcode::write_only;
	h.psn = 2;
	h.reth = {0, 0, 4};
	const uint8_t four[4] = {1, 2, 3, 4};
	before = r.stats();
	ASSERT_TRUE(r.inject(h, four));
	EXPECT_EQ(r.stats().naks_sent, before.naks_sent + 1);
	ASSERT_EQ(r.s.qp->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::err);
}

/* A WRITE or READ whose RETH DMA length is above the device's message size (2^log_max_msg,
 * 2^30 by default) is an invalid request NAK before its key is looked at (IBTA C9-94; rxe
 * refuses above 2^31): the QP goes to ERR and no key refusal is recorded. Before, the length
 * went to the key check, which refused it as a remote access error charged to the key. */
TEST(WireInject, DmaLengthAboveTheMessageSizeIsAnInvalidRequest)
{
	for (const uint8_t opcode : {roce::opcode::write_first, roce::opcode::read_request}) {
		SCOPED_TRACE(opcode == roce::opcode::read_request ? "READ" : "WRITE FIRST");
		InjectRig r;
		ASSERT_NO_FATAL_FAILURE(r.open());
		const uint32_t max_msg = 1u << r.dp().config().log_max_msg;
		roce::Headers h;
		h.opcode = opcode;
		h.psn = 0;
		h.reth = {r.s.addr(0), r.key, max_msg + 1};
		std::vector<uint8_t> mtu(1024, 0x5a); /* the QP's path MTU (WireOptions) */
		const emu::WireStats before = r.stats();
		ASSERT_TRUE(r.inject(h, opcode == roce::opcode::write_first
						? std::span<const uint8_t>(mtu)
						: std::span<const uint8_t>()));
		EXPECT_EQ(r.stats().naks_sent, before.naks_sent + 1);
		EXPECT_EQ(r.dp().key_refusals(nullptr, 0, nullptr), 0u)
			<< "an invalid request, not the key's refusal";
		uint32_t st = 0;
		ASSERT_EQ(r.s.qp->query_state(&st), 0);
		EXPECT_EQ(st, prm::qp_state::err);
		for (size_t i = 0; i < 1024; i++)
			ASSERT_EQ(r.s.region()[i], pattern(i));
	}
}

/* udp_port 0 asks the kernel for a port: the port then reports the bound one, and its ICRC
 * paths carry it (source port on send, destination on receive) on every receive path: the raw
 * socket, the UDP socket, IPv6. Before, only the raw socket's path read it back, and a UDP or
 * IPv6 port computed every ICRC over port 0, so that all it received was a bad ICRC. */
TEST(WireConfig, PortZeroTakesTheKernelsPortOnEveryReceivePath)
{
	struct Case {
		const char *addr;
		bool raw;
	};
	for (const Case c :
	     {Case{"127.0.0.1", true}, Case{"127.0.0.1", false}, Case{"::1", true}}) {
		SCOPED_TRACE(std::string(c.addr) + (c.raw ? " raw_rx" : " no raw_rx"));
		emu::WirePortConfig cfg{c.addr, 0, roce::udp_port, {}, c.raw};
		emu::WirePort port;
		const int rc = port.open(cfg);
		if (rc == -EADDRNOTAVAIL && port.ipv6())
			continue; /* no IPv6 loopback on this host */
		ASSERT_EQ(rc, 0);
		sockaddr_storage bound{};
		socklen_t bl = sizeof(bound);
		ASSERT_EQ(::getsockname(port.fd(), reinterpret_cast<sockaddr *>(&bound), &bl), 0);
		const uint16_t kernel =
			ntohs(port.ipv6() ? reinterpret_cast<const sockaddr_in6 &>(bound).sin6_port
					  : reinterpret_cast<const sockaddr_in &>(bound).sin_port);
		EXPECT_NE(kernel, 0);
		EXPECT_EQ(port.udp_port(), kernel);
		emu::Gid remote{};
		sockaddr_storage peer{};
		if (port.ipv6()) {
			remote[15] = 1;
			auto &p6 = reinterpret_cast<sockaddr_in6 &>(peer);
			p6.sin6_family = AF_INET6;
			p6.sin6_addr = in6addr_loopback;
			p6.sin6_port = htons(4791);
		} else {
			remote = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2};
			auto &p4 = reinterpret_cast<sockaddr_in &>(peer);
			p4.sin_family = AF_INET;
			p4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			p4.sin_port = htons(4791);
		}
		EXPECT_EQ(port.tx_path(remote).src_port, kernel);
		EXPECT_EQ(port.rx_path(peer).dst_port, kernel);
	}
}

/* Two sides in this process on 127.0.0.1, their QPs connected to each other, an MTT key over
 * each region (ka, kb); the test runs their progress work itself (turn: function().progress(),
 * as a run-to-completion caller does) and their device threads nap 200 ms and longer once it
 * does, so that the test's turns alone move the packets. A asks for ACKs every 2^a_freq
 * packets. */
struct LocalPair {
	Side a, b;
	uint32_t ka = 0, kb = 0;

	void open(uint32_t a_freq)
	{
		const auto base = static_cast<uint16_t>(20000 + (getpid() % 15000) * 2);
		WireOptions oa{"127.0.0.1", base, static_cast<uint16_t>(base + 1)};
		WireOptions ob{"127.0.0.1", static_cast<uint16_t>(base + 1), base};
		oa.idle_sleep = ob.idle_sleep = std::chrono::milliseconds(200);
		oa.log_ack_req_freq = a_freq;
		ASSERT_EQ(a.open(oa), 0);
		ASSERT_EQ(b.open(ob), 0);
		ASSERT_EQ(a.make_qp(b.gid.gid.data()), 0);
		ASSERT_EQ(b.make_qp(a.gid.gid.data()), 0);
		ASSERT_EQ(a.qp->connect(b.qp->qpn()), 0);
		ASSERT_EQ(b.qp->connect(a.qp->qpn()), 0);
		ASSERT_EQ(a.mr(0, kRegion, true, true, true, true, false, false, &ka), 0);
		ASSERT_EQ(b.mr(0, kRegion, true, true, true, true, false, false, &kb), 0);
	}
	static emu::WireStats stats(Side &s) { return s.hw->device().data_path().wire_stats(); }
	static void turn(Side &s) { (void)s.hw->function().progress(); }
	/* Until pred holds, each side running its turns; false after 5 s. */
	template <typename Pred> bool until(Pred &&pred)
	{
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		while (!pred()) {
			turn(a);
			turn(b);
			if (std::chrono::steady_clock::now() > end)
				return false;
		}
		return true;
	}
};

/* Two sides in this process, each running its own progress work (function().progress(), as a
 * run-to-completion caller does): a WRITE into B; B's turn that receives it owes the ACK until
 * its next turn. B's answering WRITE leaves alone, before that ACK (one datagram, one call),
 * so that A sees the answer without receiving the ACK first; B's next turn sends the ACK. */
TEST(WireAckOrder, TheAnswerLeavesBeforeTheOwedAck)
{
	LocalPair pair;
	ASSERT_NO_FATAL_FAILURE(pair.open(0));
	Side &a = pair.a, &b = pair.b;
	const uint32_t ka = pair.ka, kb = pair.kb;
	const auto stats = LocalPair::stats;
	const auto turn = LocalPair::turn;
	const auto until = [&](auto &&pred) { return pair.until(pred); };
	std::atomic_ref<uint64_t> word_a(*reinterpret_cast<uint64_t *>(a.region()));
	std::atomic_ref<uint64_t> word_b(*reinterpret_cast<uint64_t *>(b.region()));
	std::memset(a.region(), 0, 64);
	std::memset(b.region(), 0, 64);
	turn(a);
	turn(b);

	/* A -> B; B's turns receive it (and nothing else runs B's work). */
	std::memcpy(a.region() + 4096, "\x11\x22\x33\x44\x55\x66\x77\x01", 8);
	const emu::WireStats b0 = stats(b);
	const mlx5::Sge sa{a.addr(4096), 8, ka};
	ASSERT_EQ(a.qp->post_write({&sa, 1}, b.addr(0), kb, 1, mlx5::kSignaled), 0);
	ASSERT_TRUE(until([&] { return word_b.load(std::memory_order_acquire) != 0; }));
	const emu::WireStats b1 = stats(b);
	EXPECT_EQ(b1.rx_packets - b0.rx_packets, 1u);
	EXPECT_EQ(b1.acks_sent, b0.acks_sent) << "the ACK is owed until B's next turn";

	/* B -> A before B's next turn: the request alone; the ACK at that turn. */
	std::memcpy(b.region() + 4096, "\x99\x88\x77\x66\x55\x44\x33\x02", 8);
	const mlx5::Sge sb{b.addr(4096), 8, kb};
	ASSERT_EQ(b.qp->post_write({&sb, 1}, a.addr(0), ka, 2, mlx5::kSignaled), 0);
	const emu::WireStats b2 = stats(b);
	EXPECT_EQ(b2.tx_packets - b1.tx_packets, 1u);
	EXPECT_EQ(b2.tx_syscalls - b1.tx_syscalls, 1u);
	EXPECT_EQ(b2.acks_sent, b1.acks_sent);
	turn(b);
	const emu::WireStats b3 = stats(b);
	EXPECT_EQ(b3.acks_sent - b2.acks_sent, 1u);
	EXPECT_EQ(b3.tx_packets - b2.tx_packets, 1u);

	/* A: B's WRITE lands and the ACK completes A's WRITE; then B's completes too. */
	mlx5::Completion c;
	ASSERT_TRUE(until([&] { return a.qp->poll(&c, 1) == 1; }));
	EXPECT_TRUE(c.ok()) << "syndrome " << int(c.syndrome);
	EXPECT_EQ(c.wr_id, 1u);
	ASSERT_TRUE(until([&] { return word_a.load(std::memory_order_acquire) != 0; }));
	EXPECT_EQ(std::memcmp(a.region(), b.region() + 4096, 8), 0);
	EXPECT_EQ(std::memcmp(b.region(), a.region() + 4096, 8), 0);
	ASSERT_TRUE(until([&] { return b.qp->poll(&c, 1) == 1; }));
	EXPECT_TRUE(c.ok()) << "syndrome " << int(c.syndrome);
	EXPECT_EQ(c.wr_id, 2u);
	/* Nothing was sent again: the ACK arrived in time. */
	EXPECT_EQ(stats(a).retransmits, 0u);
	EXPECT_EQ(stats(b).retransmits, 0u);
}

/* log_ack_req_freq: A (2: every 4 packets) asks for an ACK on the 4th of six unsignalled
 * one-packet WRITEs and on a signalled one; B (0, the default) on each of its own. B
 * acknowledges what A did not ask for within 1 ms (rc_lazy_ack): A's ACK timer (67 ms) never
 * runs out, nothing is sent again. */
TEST(WireAckReqFreq, TheRequesterAsksEveryNPacketsAndTheRestIsAcknowledgedLazily)
{
	LocalPair pair;
	ASSERT_NO_FATAL_FAILURE(pair.open(2));
	Side &a = pair.a, &b = pair.b;
	const uint32_t ka = pair.ka, kb = pair.kb;
	const auto stats = LocalPair::stats;
	const auto until = [&](auto &&pred) { return pair.until(pred); };
	std::memset(a.region(), 0, 4096);
	std::memset(b.region(), 0, 4096);
	for (uint64_t i = 0; i < 16; i++) {
		const uint64_t v = 0x1000 + i;
		std::memcpy(a.region() + 4096 + i * 8, &v, 8);
		std::memcpy(b.region() + 4096 + i * 8, &v, 8);
	}
	const auto word = [](Side &s, size_t i) {
		return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t *>(s.region() + i * 8))
			.load(std::memory_order_acquire);
	};
	const auto write = [](Side &from, uint32_t lkey, Side &to, uint32_t rkey, size_t i,
			      unsigned flags) {
		const mlx5::Sge s{from.addr(4096 + i * 8), 8, lkey};
		return from.qp->post_write({&s, 1}, to.addr(i * 8), rkey, i + 1, flags);
	};
	const emu::WireStats a0 = stats(a);

	/* Six unsignalled WRITEs: the 4th asks. */
	for (size_t i = 0; i < 6; i++)
		ASSERT_EQ(write(a, ka, b, kb, i, 0), 0);
	EXPECT_EQ(stats(a).ack_requests - a0.ack_requests, 1u);
	ASSERT_TRUE(until([&] { return word(b, 5) == 0x1005; }));
	/* A signalled one asks; its completion comes with the ACK that covers all seven. */
	ASSERT_EQ(write(a, ka, b, kb, 6, mlx5::kSignaled), 0);
	EXPECT_EQ(stats(a).ack_requests - a0.ack_requests, 2u);
	mlx5::Completion c;
	ASSERT_TRUE(until([&] { return a.qp->poll(&c, 1) == 1; }));
	EXPECT_TRUE(c.ok()) << "syndrome " << int(c.syndrome);
	EXPECT_EQ(c.wr_id, 7u);
	for (size_t i = 0; i < 7; i++)
		EXPECT_EQ(word(b, i), 0x1000 + i) << "word " << i;

	/* Two more that do not ask: B acknowledges them lazily, within 1 ms. */
	const emu::WireStats b1 = stats(b);
	ASSERT_EQ(write(a, ka, b, kb, 7, 0), 0);
	ASSERT_EQ(write(a, ka, b, kb, 8, 0), 0);
	EXPECT_EQ(stats(a).ack_requests - a0.ack_requests, 2u);
	ASSERT_TRUE(until([&] { return stats(b).lazy_acks > b1.lazy_acks; }));
	EXPECT_EQ(stats(b).lazy_acks - b1.lazy_acks, 1u);
	EXPECT_EQ(word(b, 8), 0x1008u);

	/* B, at the default, asks on each message. */
	const emu::WireStats b2 = stats(b);
	for (size_t i = 0; i < 3; i++)
		ASSERT_EQ(write(b, kb, a, ka, i, 0), 0);
	EXPECT_EQ(stats(b).ack_requests - b2.ack_requests, 3u);
	ASSERT_TRUE(until([&] { return word(a, 2) == 0x1002; }));

	/* Nothing was sent again and no ACK timer ran out. */
	for (Side *s : {&a, &b}) {
		EXPECT_EQ(stats(*s).retransmits, 0u);
		EXPECT_EQ(stats(*s).timeouts, 0u);
	}
}

} // namespace
