/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A shared receive queue over the device model's UDP wire between two processes (as
 * test_api_wire.cpp: the child is the receiver, the parent the sender, each its own device with
 * port 1 on the wire at 127.0.0.1, addresses exchanged over a socketpair). The child's two QPs
 * take their receives from one SRQ; the parent's two QPs, one connected to each, send to them:
 * the receives complete in the SRQ's order on the QP that took each, byte for byte; a SEND that
 * finds the SRQ empty is answered RNR NAK and lands once the child posts; a receive buffer of an
 * on-demand region never advised raises the SRQ WQE's page fault in the child's device, which
 * the child serves (nicmr_device_progress) from its SRQ.
 */
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "api_wiring.h"
#include "emu_mlx5.h"
#include "fd_io.h"
#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kRegion = 64 << 10;
constexpr size_t kOdpLen = 8 * 4096;

uint16_t port_base()
{
	/* Apart from test_api_wire's ports (40000 + ...), per process. */
	return static_cast<uint16_t>(20000 + (getpid() % 9000) * 2);
}

std::string wire_spec(uint16_t mine, uint16_t peer)
{
	return "emu:mkeys=1024,mkey_by_name=1,addr=127.0.0.1,udp_port=" + std::to_string(mine) +
	       ",peer_udp_port=" + std::to_string(peer);
}

struct Hello {
	nicmr_qp_addr addr[2];
};

enum Op : uint32_t {
	op_post = 1, /* a receive of [off, off + len) of the region to the SRQ, wr_id off: rc */
	op_post_odp, /* the same in the on-demand region */
	op_wc,	     /* the next receive completion (5 s at most): a nicmr_wc */
	op_dump,     /* [off, off + len) of the region */
	op_dump_odp, /* [off, off + len) of the on-demand region */
	op_serve,    /* nicmr_device_progress until a fault is served (5 s at most): the count */
	op_exit
};
struct Req {
	uint32_t op;
	uint32_t off, len;
};

/* One process: port 1 on the wire, a PD, a pool, a CQ, and two QPs (with the SRQ when
 * srq_depth is not 0). */
struct Side {
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	nicmr_cq *cq = nullptr;
	nicmr_srq *srq = nullptr;
	nicmr_qp *qp[2] = {};
	std::vector<nicmr_mr *> mrs;
	uint8_t *base = nullptr;

	~Side()
	{
		for (nicmr_mr *m : mrs)
			nicmr_mr_dereg(m);
		for (nicmr_qp *q : qp)
			if (q)
				nicmr_qp_destroy(q);
		if (srq)
			nicmr_srq_destroy(srq);
		if (cq)
			nicmr_cq_destroy(cq);
		if (pool)
			nicmr_pool_destroy(pool);
		if (pd)
			nicmr_pd_free(pd);
		if (dev)
			nicmr_device_close(dev);
	}
	int open(const std::string &spec, bool with_srq)
	{
		int rc = nicmr_device_open(spec.c_str(), &dev);
		if (rc == 0)
			rc = nicmr_pd_alloc(dev, &pd);
		if (rc == 0) {
			nicmr_pool_params p;
			nicmr_pool_params_init(&p);
			p.size = size_t{2} << 20;
			p.allow_fallback = 1;
			p.name = "api-wire-srq";
			rc = nicmr_pool_create(dev, &p, &pool);
		}
		if (rc == 0) {
			base = static_cast<uint8_t *>(nicmr_pool_addr(pool));
			rc = nicmr_cq_create(dev, 64, &cq);
		}
		if (rc == 0 && with_srq) {
			nicmr_srq_attr sa{};
			sa.depth = 8;
			sa.max_sge = 1;
			rc = nicmr_srq_create(pd, &sa, &srq);
		}
		for (int i = 0; i < 2 && rc == 0; i++) {
			nicmr_qp_attr at{};
			at.port = 1;
			at.send_cq = cq;
			at.depth = 8;
			at.srq = srq;
			rc = nicmr_qp_create_attr(pd, &at, &qp[i]);
		}
		return rc;
	}
	int reg(void *addr, size_t len, uint64_t access, uint32_t *key)
	{
		nicmr_mr *m = nullptr;
		const int rc = nicmr_mr_reg(pd, addr, len, access, 0, 0, &m);
		if (rc != 0)
			return rc;
		mrs.push_back(m);
		*key = nicmr_mr_key(m);
		return 0;
	}
};

int connect(nicmr_qp *qp, const nicmr_qp_addr &to)
{
	nicmr_qp_remote r{};
	r.size = sizeof(r);
	std::memcpy(r.gid, to.gid, sizeof(r.gid));
	r.qpn = to.qpn;
	r.psn = to.psn;
	r.mtu = 1024;
	return nicmr_qp_connect_remote(qp, &r);
}

/* The child: the receiver. Its exit status says where it failed (0: all well). */
int receiver(int fd, uint16_t mine, uint16_t peer)
{
	Side s;
	if (s.open(wire_spec(mine, peer), true) != 0)
		return 10;
	std::memset(s.base, 0, kRegion);
	uint32_t key = 0, okey = 0;
	if (s.reg(s.base, kRegion, kAll, &key) != 0)
		return 11;
	void *om =
		mmap(nullptr, kOdpLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (om == MAP_FAILED)
		return 12;
	auto *odp = static_cast<uint8_t *>(om);
	std::memset(odp, 0, kOdpLen); /* resident to the CPU, not present to the device */
	if (s.reg(odp, kOdpLen, kAll | NICMR_ACCESS_ON_DEMAND, &okey) != 0)
		return 13;
	Hello h{}, theirs{};
	for (int i = 0; i < 2; i++)
		if (nicmr_qp_local(s.qp[i], 0, &h.addr[i]) != 0)
			return 14;
	if (!full_write(fd, &h, sizeof(h)) || !full_read(fd, &theirs, sizeof(theirs)))
		return 15;
	int rc = 0;
	for (int i = 0; i < 2 && rc == 0; i++)
		rc = connect(s.qp[i], theirs.addr[i]);
	if (!full_write(fd, &rc, sizeof(rc)))
		return 16;
	for (;;) {
		Req q{};
		if (!full_read(fd, &q, sizeof(q)))
			return 17;
		switch (q.op) {
		case op_post:
		case op_post_odp: {
			const bool o = q.op == op_post_odp;
			const size_t lim = o ? kOdpLen : kRegion;
			const nicmr_sge sg{u(o ? odp : s.base) + q.off, q.len, o ? okey : key};
			const int prc = q.off > lim || q.len > lim - q.off
						? -ERANGE
						: nicmr_srq_post_recv(s.srq, &sg, 1, q.off);
			if (!full_write(fd, &prc, sizeof(prc)))
				return 18;
			break;
		}
		case op_wc: {
			nicmr_wc wc{};
			wc.status = 99; /* none came */
			const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
			while (std::chrono::steady_clock::now() < end)
				if (nicmr_cq_poll(s.cq, &wc, 1) != 0)
					break;
			if (!full_write(fd, &wc, sizeof(wc)))
				return 19;
			break;
		}
		case op_dump:
		case op_dump_odp: {
			const bool o = q.op == op_dump_odp;
			const size_t lim = o ? kOdpLen : kRegion;
			if (q.off > lim || q.len > lim - q.off ||
			    !full_write(fd, (o ? odp : s.base) + q.off, q.len))
				return 20;
			break;
		}
		case op_serve: {
			int served = 0;
			const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
			while (served == 0 && std::chrono::steady_clock::now() < end)
				served = nicmr_device_progress(s.dev);
			if (!full_write(fd, &served, sizeof(served)))
				return 21;
			break;
		}
		case op_exit:
			return 0;
		default:
			return 22;
		}
	}
}

class ApiWireSrq : public ::testing::Test {
protected:
	void SetUp() override
	{
		const uint16_t mine = port_base(), peer = static_cast<uint16_t>(mine + 1);
		ASSERT_EQ(nicmr::test::fork_peer([&](int fd) { return receiver(fd, peer, mine); },
						 &child_, &fd_),
			  0);
		ASSERT_EQ(me_.open(wire_spec(mine, peer), false), 0);
		ASSERT_EQ(me_.reg(me_.base, kRegion, kAll, &lkey_), 0);
		for (size_t i = 0; i < kRegion; i++)
			me_.base[i] = static_cast<uint8_t>(i * 11 + (i >> 8) + 7);
		Hello theirs{}, h{};
		ASSERT_TRUE(full_read(fd_, &theirs, sizeof(theirs)));
		for (int i = 0; i < 2; i++)
			ASSERT_EQ(nicmr_qp_local(me_.qp[i], 0, &h.addr[i]), 0);
		ASSERT_TRUE(full_write(fd_, &h, sizeof(h)));
		for (int i = 0; i < 2; i++)
			ASSERT_EQ(connect(me_.qp[i], theirs.addr[i]), 0);
		peer_qpn_[0] = theirs.addr[0].qpn;
		peer_qpn_[1] = theirs.addr[1].qpn;
		int child_rc = -1;
		ASSERT_TRUE(full_read(fd_, &child_rc, sizeof(child_rc)));
		ASSERT_EQ(child_rc, 0);
		connected_ = true;
	}
	void TearDown() override
	{
		const Req q{op_exit, 0, 0};
		const int st = end_peer(child_, fd_, connected_, &q, sizeof(q));
		if (child_ > 0) {
			ASSERT_NE(st, -1) << "the peer could not be reaped";
		}
		if (connected_) {
			EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
				<< "receiver exit status " << st;
		}
	}
	int ask(Op op, uint32_t off, uint32_t len)
	{
		Req q{op, off, len};
		int rc = -1;
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &rc, sizeof(rc)));
		return rc;
	}
	nicmr_wc peer_wc()
	{
		Req q{op_wc, 0, 0};
		nicmr_wc wc{};
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &wc, sizeof(wc)));
		return wc;
	}
	std::vector<uint8_t> dump(Op op, uint32_t off, uint32_t len)
	{
		std::vector<uint8_t> v(len);
		Req q{op, off, len};
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, v.data(), len));
		return v;
	}
	/* A SEND of [src, src + len) of this side's region from QP i; its completion. */
	nicmr_wc send(int i, uint32_t src, uint32_t len)
	{
		EXPECT_EQ(nicmr_post_send(me_.qp[i], u(me_.base) + src, len, lkey_, 0, src,
					  NICMR_SEND_SIGNALED),
			  0);
		return wait_wc(me_.cq);
	}

	Side me_;
	uint32_t lkey_ = 0;
	uint32_t peer_qpn_[2] = {};
	pid_t child_ = -1;
	int fd_ = -1;
	bool connected_ = false;
};

TEST_F(ApiWireSrq, TwoQpsTakeFromOneSrqInItsOrderByteForByte)
{
	/* Receives at 0, 8K and 16K (wr_id = offset), 4 KiB each. */
	for (uint32_t k = 0; k < 3; k++)
		ASSERT_EQ(ask(op_post, k * 8192, 4096), 0);
	/* QP 1, QP 0, QP 1: messages of three, one and two packets. */
	const int from[3] = {1, 0, 1};
	const uint32_t len[3] = {3000, 700, 2048}, src[3] = {100, 5000, 20000};
	for (int k = 0; k < 3; k++) {
		const nicmr_wc s = send(from[k], src[k], len[k]);
		ASSERT_EQ(s.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(s.syndrome);
		const nicmr_wc r = peer_wc();
		ASSERT_EQ(r.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(r.syndrome);
		EXPECT_EQ(r.opcode, NICMR_WC_RECV);
		EXPECT_EQ(r.wr_id, uint64_t{8192u * k}) << "the SRQ's k-th receive";
		EXPECT_EQ(r.qp_num, peer_qpn_[from[k]]) << "the QP that took it";
		EXPECT_EQ(r.byte_len, len[k]);
		const std::vector<uint8_t> got = dump(op_dump, 8192 * k, 4096);
		EXPECT_EQ(std::memcmp(got.data(), me_.base + src[k], len[k]), 0) << k;
		for (size_t i = len[k]; i < 4096; i++)
			ASSERT_EQ(got[i], 0) << "past the message, receive " << k;
	}
}

TEST_F(ApiWireSrq, AnEmptySrqIsAnRnrNakUntilTheReceiverPosts)
{
	/* Nothing posted: the receiver's device answers RNR NAK; the sender retries (7 RNR
	 * retries: without end) while the child posts. */
	EXPECT_EQ(nicmr_post_send(me_.qp[0], u(me_.base), 1500, lkey_, 0, 1, NICMR_SEND_SIGNALED),
		  0);
	nicmr_wc wc{};
	const auto rnr = [&] {
		return me_.dev->emu->device().data_path().wire_stats().rnr_naks_received;
	};
	const uint64_t rnr0 = rnr();
	/* Poll (the wire's progress) until the first RNR NAK came back, 5 s at most. */
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (rnr() == rnr0 && std::chrono::steady_clock::now() < end)
		ASSERT_EQ(nicmr_cq_poll(me_.cq, &wc, 1), 0) << "no receive yet";
	EXPECT_GT(rnr(), rnr0) << "the empty SRQ answered RNR NAK";
	ASSERT_EQ(ask(op_post, 4096, 2048), 0);
	wc = wait_wc(me_.cq);
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	const nicmr_wc r = peer_wc();
	ASSERT_EQ(r.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(r.wr_id, 4096u);
	EXPECT_EQ(r.qp_num, peer_qpn_[0]);
	EXPECT_EQ(r.byte_len, 1500u);
	const std::vector<uint8_t> got = dump(op_dump, 4096, 1500);
	EXPECT_EQ(std::memcmp(got.data(), me_.base, 1500), 0);
}

TEST_F(ApiWireSrq, AReceiveIntoPagesNeverAdvisedIsServedFromTheReceiversSrq)
{
	/* Pages 2 and 3 of the child's on-demand region: its device raises the SRQ WQE's fault
	 * (type 0, the SRQ's number) and answers RNR NAK until the child served it. */
	const uint32_t off = 2 * 4096 + 64, len = 3000;
	ASSERT_EQ(ask(op_post_odp, off, 5000), 0);
	ASSERT_EQ(nicmr_post_send(me_.qp[1], u(me_.base) + 300, len, lkey_, 0, 2,
				  NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(ask(op_serve, 0, 0), 1);
	const nicmr_wc wc = wait_wc(me_.cq);
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	const nicmr_wc r = peer_wc();
	ASSERT_EQ(r.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(r.syndrome);
	EXPECT_EQ(r.wr_id, off);
	EXPECT_EQ(r.qp_num, peer_qpn_[1]);
	EXPECT_EQ(r.byte_len, len);
	const std::vector<uint8_t> got = dump(op_dump_odp, 0, 5 * 4096);
	for (size_t i = 0; i < got.size(); i++) {
		const uint8_t want = i >= off && i < off + len ? me_.base[300 + i - off] : 0;
		ASSERT_EQ(got[i], want) << "receiver byte " << i;
	}
}

} // namespace
} // namespace nicmr::test
