/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Connecting QPs of two processes through the native API (nicmr_port_gid, nicmr_qp_local,
 * nicmr_qp_connect_remote) over the device model's UDP wire on 127.0.0.1, and every refused
 * argument of those calls with its exact code.
 *
 * The two-process tests fork: the child is the responder (its device, its memory, its keys),
 * the parent the requester; each opens its own device with port 1 on the wire
 * (`emu:addr=127.0.0.1,udp_port=X,peer_udp_port=Y`, each the other's peer), and they exchange
 * addresses and keys over a socketpair as applications would over TCP. Then RDMA WRITE, READ and
 * both atomics move data through nicmr_post_* and nicmr_cq_poll only; the parent asks the child
 * for its memory over the pair and checks it byte for byte. A wrong rkey completes with
 * NICMR_WC_REMOTE_ACCESS, writes nothing, leaves both QPs in ERR, and nicmr_qp_recover on both
 * sides brings the remote connection back. The child also exposes an on-demand region whose
 * pages it never advises: the parent's requests to it page-fault in the child's device, which
 * answers RNR NAK until the child serves the fault with nicmr_device_progress (it polls no CQ),
 * and a fault on memory the child unmapped ends in a remote access error. SENDs into receive
 * buffers of that region (the child's QP has a receive queue) raise the receive WQE's fault
 * and land once the child served it; into memory it unmapped, the receive completes in error.
 */
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fd_io.h"
#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kRegion = 64 << 10; /* the responder's exposed region */
constexpr size_t kAtomicOff = 8192;  /* a 64-bit word in it for the atomics (past the WRITE) */

/* The byte the responder's region holds at offset i before anything is written. */
uint8_t pattern(size_t i)
{
	return static_cast<uint8_t>(i * 7 + (i >> 8) + 3);
}

/* UDP ports of this process's own, so that parallel runs do not meet (as test_dp_wire). */
uint16_t port_base()
{
	return static_cast<uint16_t>(40000 + (getpid() % 10000) * 2);
}

std::string wire_spec(uint16_t mine, uint16_t peer)
{
	return "emu:mkeys=1024,mkey_by_name=1,addr=127.0.0.1,udp_port=" + std::to_string(mine) +
	       ",peer_udp_port=" + std::to_string(peer);
}

using nicmr::test::full_read;
using nicmr::test::full_write;

/* What each side tells the other. */
struct Hello {
	nicmr_qp_addr addr;
	uint64_t region;     /* the responder's region (its VA: the keys' address space) */
	uint32_t rkey;	     /* every remote right over the region */
	uint32_t ro_key;     /* remote read only, same region */
	uint64_t odp_region; /* an on-demand region of kOdpLen, never advised */
	uint32_t odp_key;
};

/* The parent's requests to the child. */
enum Op : uint32_t {
	op_dump = 1,
	op_state,
	op_recover,
	op_refusals, /* the responder's nicmr_key_refusals: the count, then 4 entries */
	op_exit,
	op_serve,     /* nicmr_device_progress until a fault is served (5 s at most): the count */
	op_dump_odp,  /* as op_dump, of the on-demand region */
	op_unmap_odp, /* munmap the on-demand region's memory: 0 */
	op_post_recv, /* a receive of [off, off + len) of the on-demand region, wr_id off: rc */
	op_recv_wc,   /* the next completion of the child's CQ (5 s at most): a nicmr_wc */
	op_advise_odp /* PREFETCH_WRITE of [off, off + len) of the on-demand region: rc */
};
constexpr size_t kOdpLen = 16 * 4096;
struct Req {
	uint32_t op;
	uint32_t off, len;
};

/* One process's device: port 1 on the wire, a PD, a pool, a CQ and a QP on port 1. */
struct Side {
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	nicmr_cq *cq = nullptr;
	nicmr_qp *qp = nullptr;
	std::vector<nicmr_mr *> mrs;
	uint8_t *base = nullptr;

	~Side()
	{
		for (nicmr_mr *m : mrs)
			nicmr_mr_dereg(m);
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

	int open(const std::string &spec)
	{
		int rc = nicmr_device_open(spec.c_str(), &dev);
		if (rc == 0)
			rc = nicmr_pd_alloc(dev, &pd);
		if (rc == 0) {
			nicmr_pool_params p;
			nicmr_pool_params_init(&p);
			p.size = size_t{2} << 20;
			p.allow_fallback = 1;
			p.name = "api-wire";
			rc = nicmr_pool_create(dev, &p, &pool);
		}
		if (rc == 0) {
			base = static_cast<uint8_t *>(nicmr_pool_addr(pool));
			rc = nicmr_cq_create(dev, 64, &cq);
		}
		if (rc == 0) {
			/* A receive queue too, on the same CQ: SENDs land in the child's
			 * on-demand region. */
			nicmr_qp_attr at{};
			at.port = 1;
			at.send_cq = cq;
			at.depth = 16;
			at.recv_depth = 16;
			at.max_recv_sge = 2;
			rc = nicmr_qp_create_attr(pd, &at, &qp);
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

/* The child: exposes its region, connects to the parent, then answers requests. Its exit
 * status says where it failed (0: all well). */
int responder(int fd, uint16_t mine, uint16_t peer)
{
	Side s;
	if (s.open(wire_spec(mine, peer)) != 0)
		return 10;
	for (size_t i = 0; i < kRegion; i++)
		s.base[i] = pattern(i);
	Hello h{};
	if (s.reg(s.base, kRegion, kAll, &h.rkey) != 0 ||
	    s.reg(s.base, kRegion, NICMR_ACCESS_REMOTE_READ, &h.ro_key) != 0)
		return 11;
	if (nicmr_qp_local(s.qp, 0, &h.addr) != 0)
		return 12;
	h.region = u(s.base);
	/* The on-demand region: resident in the CPU (the pattern), not present to the device. */
	void *om =
		mmap(nullptr, kOdpLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (om == MAP_FAILED)
		return 20;
	auto *odp = static_cast<uint8_t *>(om);
	for (size_t i = 0; i < kOdpLen; i++)
		odp[i] = pattern(i);
	if (s.reg(odp, kOdpLen, kAll | NICMR_ACCESS_ON_DEMAND, &h.odp_key) != 0)
		return 21;
	h.odp_region = u(odp);
	Hello theirs{};
	if (!full_write(fd, &h, sizeof(h)) || !full_read(fd, &theirs, sizeof(theirs)))
		return 13;
	nicmr_qp_remote r{};
	r.size = sizeof(r);
	std::memcpy(r.gid, theirs.addr.gid, sizeof(r.gid));
	r.qpn = theirs.addr.qpn;
	r.psn = theirs.addr.psn;
	const int rc = nicmr_qp_connect_remote(s.qp, &r);
	if (!full_write(fd, &rc, sizeof(rc)))
		return 14;
	for (;;) {
		Req q{};
		if (!full_read(fd, &q, sizeof(q)))
			return 15;
		switch (q.op) {
		case op_dump:
			if (q.off > kRegion || q.len > kRegion - q.off ||
			    !full_write(fd, s.base + q.off, q.len))
				return 16;
			break;
		case op_state: {
			uint32_t st = 99;
			const int src = nicmr_qp_state(s.qp, &st);
			if (src != 0)
				st = 100;
			if (!full_write(fd, &st, sizeof(st)))
				return 17;
			break;
		}
		case op_recover: {
			const int rrc = nicmr_qp_recover(s.qp);
			if (!full_write(fd, &rrc, sizeof(rrc)))
				return 18;
			break;
		}
		case op_refusals: {
			/* The count, then up to 4 of the responder's refusal record. */
			nicmr_key_refusal rr[4]{};
			const int cnt = nicmr_key_refusals(s.dev, rr, 4, nullptr);
			if (!full_write(fd, &cnt, sizeof(cnt)) || !full_write(fd, rr, sizeof(rr)))
				return 20;
			break;
		}
		case op_serve: {
			int served = 0;
			const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
			while (served == 0 && std::chrono::steady_clock::now() < end)
				served = nicmr_device_progress(s.dev);
			if (!full_write(fd, &served, sizeof(served)))
				return 22;
			break;
		}
		case op_dump_odp:
			if (q.off > kOdpLen || q.len > kOdpLen - q.off ||
			    !full_write(fd, odp + q.off, q.len))
				return 23;
			break;
		case op_unmap_odp: {
			/* len 0: the whole region; else [off, off + len). */
			int urc = -ERANGE;
			if (q.len == 0)
				urc = munmap(odp, kOdpLen) == 0 ? 0 : -errno;
			else if (q.off <= kOdpLen && q.len <= kOdpLen - q.off)
				urc = munmap(odp + q.off, q.len) == 0 ? 0 : -errno;
			if (!full_write(fd, &urc, sizeof(urc)))
				return 24;
			break;
		}
		case op_post_recv: {
			nicmr_sge sg{h.odp_region + q.off, q.len, h.odp_key};
			const int prc = q.off > kOdpLen || q.len > kOdpLen - q.off
						? -ERANGE
						: nicmr_post_recv(s.qp, &sg, 1, q.off);
			if (!full_write(fd, &prc, sizeof(prc)))
				return 25;
			break;
		}
		case op_advise_odp: {
			nicmr_sge sg{h.odp_region + q.off, q.len, h.odp_key};
			const int arc = nicmr_advise_mr(s.pd, NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE,
							NICMR_ADVISE_MR_FLAG_FLUSH, &sg, 1);
			if (!full_write(fd, &arc, sizeof(arc)))
				return 27;
			break;
		}
		case op_recv_wc: {
			nicmr_wc wc{};
			wc.status = 99; /* none came */
			const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
			while (std::chrono::steady_clock::now() < end)
				if (nicmr_cq_poll(s.cq, &wc, 1) != 0)
					break;
			if (!full_write(fd, &wc, sizeof(wc)))
				return 26;
			break;
		}
		case op_exit:
			return 0;
		default:
			return 19;
		}
	}
}

/* The parent side: its device and the child's. */
class ApiWire : public ::testing::Test {
protected:
	void SetUp() override
	{
		const uint16_t mine = port_base(), peer = static_cast<uint16_t>(mine + 1);
		ASSERT_EQ(nicmr::test::fork_peer([&](int fd) { return responder(fd, peer, mine); },
						 &child_, &fd_),
			  0);
		ASSERT_EQ(me_.open(wire_spec(mine, peer)), 0);
		ASSERT_EQ(me_.reg(me_.base, kRegion, kAll, &lkey_), 0);
		ASSERT_TRUE(full_read(fd_, &peer_, sizeof(peer_)));
		Hello h{};
		ASSERT_EQ(nicmr_qp_local(me_.qp, 0, &h.addr), 0);
		/* A send PSN of the application's choosing, three before the 24-bit wrap: the
		 * first requests cross it on both sides. */
		h.addr.psn = 0xfffffd;
		std::memcpy(me_gid_, h.addr.gid, sizeof(me_gid_));
		ASSERT_TRUE(full_write(fd_, &h, sizeof(h)));
		nicmr_qp_remote r{};
		r.size = sizeof(r);
		std::memcpy(r.gid, peer_.addr.gid, sizeof(r.gid));
		r.qpn = peer_.addr.qpn;
		r.psn = peer_.addr.psn;
		r.mtu = 1024;
		r.local_psn = h.addr.psn;
		r.given = NICMR_QP_REMOTE_LOCAL_PSN;
		ASSERT_EQ(nicmr_qp_connect_remote(me_.qp, &r), 0);
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
				<< "responder exit status " << st;
		}
	}

	std::vector<uint8_t> dump(uint32_t off, uint32_t len)
	{
		std::vector<uint8_t> v(len);
		Req q{op_dump, off, len};
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, v.data(), len));
		return v;
	}
	std::vector<uint8_t> dump_odp(uint32_t off, uint32_t len)
	{
		std::vector<uint8_t> v(len);
		Req q{op_dump_odp, off, len};
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, v.data(), len));
		return v;
	}
	/* The child serves the page fault its device raised; how many it resumed. */
	int peer_serve()
	{
		Req q{op_serve, 0, 0};
		int n = -1;
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &n, sizeof(n)));
		return n;
	}
	int peer_advise_odp(uint32_t off, uint32_t len)
	{
		Req q{op_advise_odp, off, len};
		int rc = -1;
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &rc, sizeof(rc)));
		return rc;
	}
	/* The child unmaps [off, off + len) of its on-demand region (len 0: all of it). */
	int peer_unmap_odp(uint32_t off = 0, uint32_t len = 0)
	{
		Req q{op_unmap_odp, off, len};
		int rc = -1;
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &rc, sizeof(rc)));
		return rc;
	}
	/* The child posts a receive of [off, off + len) of its on-demand region (wr_id off). */
	int peer_post_recv(uint32_t off, uint32_t len)
	{
		Req q{op_post_recv, off, len};
		int rc = -1;
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &rc, sizeof(rc)));
		return rc;
	}
	/* The child's next completion (status 99 when none came in 5 s). */
	nicmr_wc peer_wc()
	{
		Req q{op_recv_wc, 0, 0};
		nicmr_wc wc{};
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &wc, sizeof(wc)));
		return wc;
	}
	uint32_t peer_state()
	{
		Req q{op_state, 0, 0};
		uint32_t st = 99;
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &st, sizeof(st)));
		return st;
	}
	/* The child's refusal record: its count, up to 4 entries in out. */
	int peer_refusals(nicmr_key_refusal (&out)[4])
	{
		Req q{op_refusals, 0, 0};
		int cnt = -1;
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &cnt, sizeof(cnt)) &&
			    full_read(fd_, out, sizeof(out)));
		return cnt;
	}
	int peer_recover()
	{
		Req q{op_recover, 0, 0};
		int rc = -1;
		EXPECT_TRUE(full_write(fd_, &q, sizeof(q)) && full_read(fd_, &rc, sizeof(rc)));
		return rc;
	}
	uint32_t state()
	{
		uint32_t st = 99;
		EXPECT_EQ(nicmr_qp_state(me_.qp, &st), 0);
		return st;
	}
	nicmr_wc wait() { return wait_wc(me_.cq); }

	/* Writes len bytes of a fresh pattern (seed) at off of the peer's region with rkey; the
	 * completion. */
	nicmr_wc write(uint32_t off, uint32_t len, uint8_t seed, uint32_t rkey)
	{
		for (uint32_t i = 0; i < len; i++)
			me_.base[i] = static_cast<uint8_t>(seed + i * 13);
		EXPECT_EQ(nicmr_post_write(me_.qp, u(me_.base), len, lkey_, peer_.region + off,
					   rkey, off, NICMR_SEND_SIGNALED),
			  0);
		return wait();
	}

	Side me_;
	uint8_t me_gid_[16] = {}; /* this side's GID, as the peer sees it */
	Hello peer_{};
	uint32_t lkey_ = 0;
	pid_t child_ = -1;
	int fd_ = -1;
	bool connected_ = false;
};

TEST_F(ApiWire, LocalAddressIsThePortsGidAndTheQpNumber)
{
	nicmr_qp_addr a{};
	ASSERT_EQ(nicmr_qp_local(me_.qp, 0, &a), 0);
	uint8_t gid[16];
	ASSERT_EQ(nicmr_port_gid(me_.dev, 1, 0, gid), 0);
	EXPECT_EQ(std::memcmp(a.gid, gid, 16), 0);
	/* ::ffff:127.0.0.1, the IPv4-mapped GID of the port's address. */
	const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
	EXPECT_EQ(std::memcmp(gid, want, 16), 0);
	EXPECT_EQ(a.qpn, nicmr_qp_num(me_.qp));
	/* The PSN the connection was given in place of the drawn one. */
	EXPECT_EQ(a.psn, 0xfffffdu);
	EXPECT_EQ(std::memcmp(peer_.addr.gid, want, 16), 0);
	EXPECT_LE(peer_.addr.psn, 0xffffffu);
	EXPECT_EQ(state(), uint32_t{NICMR_QP_RTS});
	EXPECT_EQ(peer_state(), uint32_t{NICMR_QP_RTS});
}

TEST_F(ApiWire, WriteReadAndAtomicsMoveExactBytes)
{
	/* WRITE: several packets at MTU 1024, across the PSN wrap. */
	const uint32_t off = 1000, len = 5000;
	nicmr_wc wc = write(off, len, 0x21, peer_.rkey);
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	EXPECT_EQ(wc.opcode, NICMR_WC_RDMA_WRITE);
	EXPECT_EQ(wc.wr_id, off);
	EXPECT_EQ(wc.byte_len, len);
	std::vector<uint8_t> got = dump(0, kRegion);
	for (size_t i = 0; i < kRegion; i++) {
		const uint8_t want = i >= off && i < off + len
					     ? static_cast<uint8_t>(0x21 + (i - off) * 13)
					     : pattern(i);
		ASSERT_EQ(got[i], want) << "responder byte " << i;
	}

	/* READ: the peer's untouched pattern, multi-packet response. */
	const uint32_t roff = 20000, rlen = 9000;
	uint8_t *dst = me_.base + 32768;
	std::memset(dst, 0xee, rlen + 16);
	ASSERT_EQ(nicmr_post_read(me_.qp, u(dst), rlen, lkey_, peer_.region + roff, peer_.rkey, 7,
				  NICMR_SEND_SIGNALED),
		  0);
	wc = wait();
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	EXPECT_EQ(wc.opcode, NICMR_WC_RDMA_READ);
	EXPECT_EQ(wc.byte_len, rlen);
	for (size_t i = 0; i < rlen; i++)
		ASSERT_EQ(dst[i], pattern(roff + i)) << "read byte " << i;
	for (size_t i = rlen; i < rlen + 16; i++)
		ASSERT_EQ(dst[i], 0xee) << "byte past the read " << i;

	/* Atomics on a word of the peer's: host-order semantics (nicmr.h). */
	uint64_t before = 0;
	std::memcpy(&before, dump(kAtomicOff, 8).data(), 8);
	auto *res = reinterpret_cast<uint64_t *>(me_.base + 60000);
	*res = 0;
	ASSERT_EQ(nicmr_post_atomic_fadd(me_.qp, u(res), lkey_, peer_.region + kAtomicOff,
					 peer_.rkey, 42, 8, NICMR_SEND_SIGNALED),
		  0);
	wc = wait();
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	EXPECT_EQ(wc.opcode, NICMR_WC_FETCH_ADD);
	EXPECT_EQ(*res, before);
	uint64_t after = 0;
	std::memcpy(&after, dump(kAtomicOff, 8).data(), 8);
	EXPECT_EQ(after, before + 42);

	ASSERT_EQ(nicmr_post_atomic_cswap(me_.qp, u(res), lkey_, peer_.region + kAtomicOff,
					  peer_.rkey, before + 42, 0x0123456789abcdefull, 9,
					  NICMR_SEND_SIGNALED),
		  0);
	wc = wait();
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	EXPECT_EQ(wc.opcode, NICMR_WC_COMP_SWAP);
	EXPECT_EQ(*res, before + 42);
	std::memcpy(&after, dump(kAtomicOff, 8).data(), 8);
	EXPECT_EQ(after, 0x0123456789abcdefull);
	/* The bytes around the word are the pattern still. */
	got = dump(kAtomicOff - 8, 24);
	for (size_t i = 0; i < 8; i++) {
		EXPECT_EQ(got[i], pattern(kAtomicOff - 8 + i));
		EXPECT_EQ(got[16 + i], pattern(kAtomicOff + 8 + i));
	}
}

TEST_F(ApiWire, RequestsToPagesNeverAdvisedWaitForTheRespondersPageFault)
{
	/* WRITE of three packets into pages 1 and 2 of the child's on-demand region: its device
	 * faults and answers RNR NAK until the child serves the fault, then takes the retry. */
	const uint32_t off = 4096 + 100, len = 3000;
	for (uint32_t i = 0; i < len; i++)
		me_.base[i] = static_cast<uint8_t>(0x31 + i * 7);
	ASSERT_EQ(nicmr_post_write(me_.qp, u(me_.base), len, lkey_, peer_.odp_region + off,
				   peer_.odp_key, 1, NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(peer_serve(), 1);
	nicmr_wc wc = wait();
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	std::vector<uint8_t> got = dump_odp(0, 3 * 4096);
	for (size_t i = 0; i < got.size(); i++) {
		const uint8_t want = i >= off && i < off + len
					     ? static_cast<uint8_t>(0x31 + (i - off) * 7)
					     : pattern(i);
		ASSERT_EQ(got[i], want) << "responder byte " << i;
	}
	/* READ of pages 5 and 6, never touched by the device. */
	uint8_t *dst = me_.base + 16384;
	ASSERT_EQ(nicmr_post_read(me_.qp, u(dst), 8192, lkey_, peer_.odp_region + 5 * 4096,
				  peer_.odp_key, 2, NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(peer_serve(), 1);
	wc = wait();
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	for (size_t i = 0; i < 8192; i++)
		ASSERT_EQ(dst[i], pattern(5 * 4096 + i)) << "read byte " << i;
	/* Fetch-and-add on page 9. */
	uint64_t before = 0;
	std::memcpy(&before, dump_odp(9 * 4096, 8).data(), 8);
	auto *res = reinterpret_cast<uint64_t *>(me_.base + 60000);
	*res = 0;
	ASSERT_EQ(nicmr_post_atomic_fadd(me_.qp, u(res), lkey_, peer_.odp_region + 9 * 4096,
					 peer_.odp_key, 3, 3, NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(peer_serve(), 1);
	wc = wait();
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	EXPECT_EQ(*res, before);
	uint64_t after = 0;
	std::memcpy(&after, dump_odp(9 * 4096, 8).data(), 8);
	EXPECT_EQ(after, before + 3);
	EXPECT_EQ(peer_state(), uint32_t{NICMR_QP_RTS});
}

TEST_F(ApiWire, AFaultOnMemoryTheResponderUnmappedIsARemoteAccessError)
{
#if defined(__SANITIZE_ADDRESS__)
	/* As api_odp's unmapped-range case: the sanitizer's allocator maps its own memory into
	 * the range the child freed before the fault is served, so the service finds it mapped.
	 * The normal build runs it. */
	GTEST_SKIP() << "AddressSanitizer's allocator maps its own memory into the freed range";
#endif
	ASSERT_EQ(peer_unmap_odp(), 0);
	std::memset(me_.base, 0x44, 256);
	ASSERT_EQ(nicmr_post_write(me_.qp, u(me_.base), 256, lkey_, peer_.odp_region, peer_.odp_key,
				   1, NICMR_SEND_SIGNALED),
		  0);
	/* The child's fault service finds the memory gone and resumes with an error: the retry
	 * is refused with a remote access error NAK. */
	EXPECT_EQ(peer_serve(), 1);
	const nicmr_wc wc = wait();
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_ACCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	EXPECT_EQ(wc.syndrome, 0x13);
	EXPECT_EQ(peer_state(), uint32_t{NICMR_QP_ERR});
	EXPECT_EQ(state(), uint32_t{NICMR_QP_ERR});
}

TEST_F(ApiWire, SendsIntoReceiveBuffersNeverAdvisedWaitForTheReceiversPageFault)
{
	/* A SEND of three packets (MTU 1024) into a receive buffer over pages 2 and 3 of the
	 * child's on-demand region: its device raises the receive WQE's fault at the first
	 * packet and answers RNR NAK until the child serves it (the receive WQE read back from
	 * its RQ, both pages made present), then takes the retries. */
	const uint32_t off = 2 * 4096 + 100, len = 3000;
	ASSERT_EQ(peer_post_recv(off, 5000), 0);
	for (uint32_t i = 0; i < len; i++)
		me_.base[i] = static_cast<uint8_t>(0x52 + i * 11);
	ASSERT_EQ(nicmr_post_send(me_.qp, u(me_.base), len, lkey_, 0, 1, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(peer_serve(), 1);
	nicmr_wc wc = wait();
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	EXPECT_EQ(wc.opcode, NICMR_WC_SEND);
	nicmr_wc r = peer_wc();
	ASSERT_EQ(r.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(r.syndrome);
	EXPECT_EQ(r.opcode, NICMR_WC_RECV);
	EXPECT_EQ(r.wr_id, off);
	EXPECT_EQ(r.byte_len, len);
	std::vector<uint8_t> got = dump_odp(0, 5 * 4096);
	for (size_t i = 0; i < got.size(); i++) {
		const uint8_t want = i >= off && i < off + len
					     ? static_cast<uint8_t>(0x52 + (i - off) * 11)
					     : pattern(i);
		ASSERT_EQ(got[i], want) << "receiver byte " << i;
	}
	/* A SEND with immediate of two packets into page 12. */
	const uint32_t off2 = 12 * 4096 + 8, len2 = 1500;
	ASSERT_EQ(peer_post_recv(off2, 2048), 0);
	for (uint32_t i = 0; i < len2; i++)
		me_.base[i] = static_cast<uint8_t>(0x17 + i * 5);
	ASSERT_EQ(nicmr_post_send(me_.qp, u(me_.base), len2, lkey_, 0x1234abcd, 2,
				  NICMR_SEND_SIGNALED | NICMR_SEND_IMM),
		  0);
	EXPECT_EQ(peer_serve(), 1);
	wc = wait();
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	r = peer_wc();
	ASSERT_EQ(r.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(r.syndrome);
	EXPECT_EQ(r.opcode, NICMR_WC_RECV_IMM);
	EXPECT_EQ(r.imm, 0x1234abcdu);
	EXPECT_EQ(r.byte_len, len2);
	got = dump_odp(off2, len2);
	for (uint32_t i = 0; i < len2; i++)
		ASSERT_EQ(got[i], static_cast<uint8_t>(0x17 + i * 5)) << "receiver byte " << i;
	EXPECT_EQ(peer_state(), uint32_t{NICMR_QP_RTS});
}

TEST_F(ApiWire, ASendMeetingAPageNotPresentAtALaterPacketResumesFromThatPacket)
{
	/* A SEND of three packets into [6 * 4096 + 2000, + 3000): page 6 advised, page 7 not.
	 * The first two packets land; the third meets page 7 (its fault and RNR NAK), and once
	 * the child served it the requester's retry from that packet completes the message. */
	const uint32_t off = 6 * 4096 + 2000, len = 3000;
	ASSERT_EQ(peer_advise_odp(6 * 4096, 4096), 0);
	ASSERT_EQ(peer_post_recv(off, len), 0);
	for (uint32_t i = 0; i < len; i++)
		me_.base[i] = static_cast<uint8_t>(0x61 + i * 3);
	ASSERT_EQ(nicmr_post_send(me_.qp, u(me_.base), len, lkey_, 0, 1, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(peer_serve(), 1);
	const nicmr_wc wc = wait();
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	const nicmr_wc r = peer_wc();
	ASSERT_EQ(r.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(r.syndrome);
	EXPECT_EQ(r.byte_len, len);
	const std::vector<uint8_t> got = dump_odp(6 * 4096, 2 * 4096);
	for (size_t i = 0; i < got.size(); i++) {
		const size_t at = 6 * 4096 + i;
		const uint8_t want = at >= off && at < off + len
					     ? static_cast<uint8_t>(0x61 + (at - off) * 3)
					     : pattern(at);
		ASSERT_EQ(got[i], want) << "receiver byte " << at;
	}
	EXPECT_EQ(peer_state(), uint32_t{NICMR_QP_RTS});
}

TEST_F(ApiWire, ASendMeetingUnmappedMemoryAtALaterPacketCompletesInError)
{
#if defined(__SANITIZE_ADDRESS__)
	GTEST_SKIP() << "AddressSanitizer's allocator maps its own memory into the freed range";
#endif
	/* As above, with page 9 unmapped: the receive in progress completes in error. */
	ASSERT_EQ(peer_advise_odp(8 * 4096, 4096), 0);
	ASSERT_EQ(peer_unmap_odp(9 * 4096, 4096), 0);
	ASSERT_EQ(peer_post_recv(8 * 4096 + 2000, 3000), 0);
	ASSERT_EQ(nicmr_post_send(me_.qp, u(me_.base), 3000, lkey_, 0, 1, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(peer_serve(), 1);
	const nicmr_wc wc = wait();
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_OP) << nicmr_wc_syndrome_str(wc.syndrome);
	const nicmr_wc r = peer_wc();
	EXPECT_EQ(r.status, NICMR_WC_LOCAL_ACCESS) << nicmr_wc_syndrome_str(r.syndrome);
	EXPECT_EQ(r.syndrome, 0x11);
	EXPECT_EQ(r.wr_id, 8 * 4096 + 2000u);
	EXPECT_EQ(peer_state(), uint32_t{NICMR_QP_ERR});
}

TEST_F(ApiWire, AReceiveIntoMemoryTheReceiverUnmappedCompletesInError)
{
#if defined(__SANITIZE_ADDRESS__)
	GTEST_SKIP() << "AddressSanitizer's allocator maps its own memory into the freed range";
#endif
	ASSERT_EQ(peer_unmap_odp(), 0);
	ASSERT_EQ(peer_post_recv(4096, 512), 0);
	std::memset(me_.base, 0x44, 256);
	ASSERT_EQ(nicmr_post_send(me_.qp, u(me_.base), 256, lkey_, 0, 1, NICMR_SEND_SIGNALED), 0);
	/* The child's service finds the memory gone and resumes with an error: the retry is
	 * NAKed as a receive key refused (remote operational error), the receive completes with
	 * the local access error. */
	EXPECT_EQ(peer_serve(), 1);
	const nicmr_wc wc = wait();
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_OP) << nicmr_wc_syndrome_str(wc.syndrome);
	EXPECT_EQ(wc.syndrome, 0x14);
	const nicmr_wc r = peer_wc();
	EXPECT_EQ(r.status, NICMR_WC_LOCAL_ACCESS) << nicmr_wc_syndrome_str(r.syndrome);
	EXPECT_EQ(r.syndrome, 0x11);
	EXPECT_EQ(r.wr_id, 4096u);
	EXPECT_EQ(peer_state(), uint32_t{NICMR_QP_ERR});
	EXPECT_EQ(state(), uint32_t{NICMR_QP_ERR});
}

TEST_F(ApiWire, WrongRkeyIsARemoteAccessErrorAndRecoveryReconnects)
{
	/* Another variant of the live key: a key the peer never handed out. */
	const uint32_t wrong = peer_.rkey ^ 0x1;
	const std::vector<uint8_t> before = dump(0, 4096);
	nicmr_wc wc = write(0, 512, 0x77, wrong);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_ACCESS);
	EXPECT_EQ(wc.syndrome, 0x13);
	EXPECT_EQ(wc.opcode, NICMR_WC_RDMA_WRITE);
	EXPECT_EQ(dump(0, 4096), before) << "a refused write moved bytes";
	EXPECT_EQ(state(), uint32_t{NICMR_QP_ERR});
	EXPECT_EQ(peer_state(), uint32_t{NICMR_QP_ERR});
	/* The requester recorded the refusal under the key, with the remote QPN as its peer. */
	nicmr_key_violation v[4]{};
	ASSERT_EQ(nicmr_key_violations(me_.dev, v, 4, nullptr), 1);
	EXPECT_EQ(v[0].key, wrong);
	EXPECT_EQ(v[0].peer_port, 0u);
	EXPECT_EQ(v[0].peer_qpn, peer_.addr.qpn);
	EXPECT_EQ(v[0].access, uint64_t{NICMR_ACCESS_REMOTE_WRITE});
	/* The responder counted it under its key and this QP as the peer. */
	nicmr_key_refusal r[4]{};
	ASSERT_EQ(peer_refusals(r), 1);
	EXPECT_EQ(r[0].key, wrong);
	EXPECT_EQ(r[0].peer_qpn, nicmr_qp_num(me_.qp));
	EXPECT_EQ(std::memcmp(r[0].peer_gid, me_gid_, 16), 0);
	EXPECT_EQ(r[0].local_qpn, peer_.addr.qpn);
	EXPECT_EQ(r[0].access, uint64_t{NICMR_ACCESS_REMOTE_WRITE});
	EXPECT_EQ(r[0].count, 1u);

	/* Both ends back to their first PSNs, responder first. */
	ASSERT_EQ(peer_recover(), 0);
	ASSERT_EQ(nicmr_qp_recover(me_.qp), 0);
	EXPECT_EQ(state(), uint32_t{NICMR_QP_RTS});
	EXPECT_EQ(peer_state(), uint32_t{NICMR_QP_RTS});

	/* A right the key lacks: a WRITE through the read-only key. */
	wc = write(0, 64, 0x55, peer_.ro_key);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_ACCESS);
	EXPECT_EQ(dump(0, 4096), before);
	ASSERT_EQ(peer_recover(), 0);
	ASSERT_EQ(nicmr_qp_recover(me_.qp), 0);
	/* The wrong key again: its pair counts twice; the read-only key is a pair of its own. */
	wc = write(0, 16, 0x66, wrong);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_ACCESS);
	ASSERT_EQ(peer_recover(), 0);
	ASSERT_EQ(nicmr_qp_recover(me_.qp), 0);
	ASSERT_EQ(peer_refusals(r), 2);
	EXPECT_EQ(r[0].key, wrong);
	EXPECT_EQ(r[0].count, 2u);
	EXPECT_EQ(r[1].key, peer_.ro_key);
	EXPECT_EQ(r[1].count, 1u);
	EXPECT_EQ(r[1].access, uint64_t{NICMR_ACCESS_REMOTE_WRITE});

	/* And the recovered connection works. */
	wc = write(100, 300, 0x99, peer_.rkey);
	ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << nicmr_wc_syndrome_str(wc.syndrome);
	const std::vector<uint8_t> got = dump(100, 300);
	for (size_t i = 0; i < 300; i++)
		ASSERT_EQ(got[i], static_cast<uint8_t>(0x99 + i * 13)) << "byte " << i;
}

/* ---- The calls' refusals, in one process (no peer needed: nothing is sent) ---------------- */

/* Port 1 on the wire, port 2 on the loopback. */
class ApiConnectArgs : public ::testing::Test {
protected:
	void SetUp() override
	{
		const uint16_t mine = static_cast<uint16_t>(port_base() + 1000);
		spec_ = wire_spec(mine, static_cast<uint16_t>(mine + 1));
		ASSERT_EQ(nicmr_device_open(spec_.c_str(), &dev), 0);
		ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &cq), 0);
		ASSERT_EQ(nicmr_qp_create(pd, 1, cq, 16, &qp), 0);
		ASSERT_EQ(nicmr_qp_create(pd, 2, cq, 16, &qp2), 0);
		r = valid();
	}
	void TearDown() override
	{
		destroy_queues({qp, qp2}, {cq});
		if (pd) {
			EXPECT_EQ(nicmr_pd_free(pd), 0);
		}
		if (dev) {
			EXPECT_EQ(nicmr_device_close(dev), 0);
		}
	}
	/* A peer at 127.0.0.2 (nothing listens there: connecting sends nothing). */
	static nicmr_qp_remote valid()
	{
		nicmr_qp_remote v{};
		v.size = sizeof(v);
		const uint8_t g[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2};
		std::memcpy(v.gid, g, 16);
		v.qpn = 0x123;
		v.psn = 0x456;
		return v;
	}
	uint32_t state(nicmr_qp *q)
	{
		uint32_t s = 99;
		EXPECT_EQ(nicmr_qp_state(q, &s), 0);
		return s;
	}
	/* r refused with code, the QP left in RESET, then the valid remote still connects. */
	void refused(const nicmr_qp_remote &bad, int code)
	{
		EXPECT_EQ(nicmr_qp_connect_remote(qp, &bad), code);
		EXPECT_EQ(state(qp), uint32_t{NICMR_QP_RESET});
	}
	std::string spec_;
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_cq *cq = nullptr;
	nicmr_qp *qp = nullptr, *qp2 = nullptr;
	nicmr_qp_remote r{};
};

TEST_F(ApiConnectArgs, PortGidRefusals)
{
	uint8_t gid[16];
	EXPECT_EQ(nicmr_port_gid(nullptr, 1, 0, gid), -EINVAL);
	EXPECT_EQ(nicmr_port_gid(dev, 1, 0, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_port_gid(dev, 0, 0, gid), -EINVAL);
	EXPECT_EQ(nicmr_port_gid(dev, 3, 0, gid), -EINVAL);
	EXPECT_EQ(nicmr_port_gid(dev, 1, 256, gid), -EINVAL); /* the model's table: 256 */
	EXPECT_EQ(nicmr_port_gid(dev, 1, 1, gid), -EADDRNOTAVAIL);
	EXPECT_EQ(nicmr_port_gid(dev, 2, 0, gid), -EADDRNOTAVAIL); /* loopback port */
	ASSERT_EQ(nicmr_port_gid(dev, 1, 0, gid), 0);
	const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
	EXPECT_EQ(std::memcmp(gid, want, 16), 0);
}

/* The loopback (MTU 65536) and the in-process port both give 4096; refusals say -EINVAL. */
TEST_F(ApiConnectArgs, PortMtuOfTheLoopbackAndTheInProcessPortIs4096)
{
	uint32_t mtu = 0;
	EXPECT_EQ(nicmr_port_mtu(nullptr, 1, &mtu), -EINVAL);
	EXPECT_EQ(nicmr_port_mtu(dev, 1, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_port_mtu(dev, 0, &mtu), -EINVAL);
	EXPECT_EQ(nicmr_port_mtu(dev, 3, &mtu), -EINVAL);
	EXPECT_EQ(mtu, 0u) << "nothing written on a refusal";
	ASSERT_EQ(nicmr_port_mtu(dev, 1, &mtu), 0); /* 127.0.0.1: lo */
	EXPECT_EQ(mtu, 4096u);
	mtu = 0;
	ASSERT_EQ(nicmr_port_mtu(dev, 2, &mtu), 0); /* the in-process loopback */
	EXPECT_EQ(mtu, 4096u);
}

/* A port's path MTU follows its interface's MTU (Linux's iboe_get_mtu: 96 bytes of RoCE
 * headers off, then the largest IB MTU that fits). In a network namespace of its own (a child
 * process, so nothing is left behind), one end of a veth pair at each MTU holds the port's
 * address. */
TEST(ApiPortMtu, FollowsTheInterfaceMtuAsIboeGetMtuDoes)
{
	if (geteuid() != 0)
		GTEST_SKIP() << "needs root (a network namespace and a veth pair)";
	const pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNET) != 0)
			_exit(77);
		if (std::system(
			    "ip link add nicmrmtu0 type veth peer name nicmrmtu1 && ip addr add "
			    "10.79.0.1/24 dev nicmrmtu0 && ip link set nicmrmtu0 up && ip link "
			    "set nicmrmtu1 up") != 0)
			_exit(78);
		const struct {
			int link;
			uint32_t want;
		} cases[] = {{1500, 1024}, {1120, 1024}, {1119, 512}, {4191, 2048},
			     {4192, 4096}, {9000, 4096}, {600, 256},  {65535, 4096}};
		int bad = 0;
		for (const auto &c : cases) {
			const std::string cmd =
				"ip link set nicmrmtu0 mtu " + std::to_string(c.link);
			if (std::system(cmd.c_str()) != 0)
				_exit(79);
			nicmr_device *dev = nullptr;
			if (nicmr_device_open("emu:ports=1,mkeys=1024,addr=10.79.0.1", &dev) != 0)
				_exit(80);
			uint32_t mtu = 0;
			const int rc = nicmr_port_mtu(dev, 1, &mtu);
			if (rc != 0 || mtu != c.want) {
				std::fprintf(stderr, "link MTU %d: rc %d, path MTU %u, want %u\n",
					     c.link, rc, mtu, c.want);
				bad++;
			}
			nicmr_device_close(dev);
		}
		_exit(bad == 0 ? 0 : 1);
	}
	int status = 0;
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		GTEST_SKIP() << "unshare(CLONE_NEWNET) refused";
	ASSERT_NE(WEXITSTATUS(status), 78) << "ip could not make the veth pair";
	ASSERT_NE(WEXITSTATUS(status), 79) << "ip could not set the MTU";
	ASSERT_NE(WEXITSTATUS(status), 80) << "the device at 10.79.0.1 did not open";
	EXPECT_EQ(WEXITSTATUS(status), 0) << "a path MTU differs (above)";
}

TEST(ApiConnectOnePort, PortTwoOfAOnePortDeviceIsTheDevicesBadParam)
{
	const uint16_t mine = static_cast<uint16_t>(port_base() + 2000);
	const std::string spec =
		"emu:ports=1,mkeys=1024,addr=127.0.0.1,udp_port=" + std::to_string(mine) +
		",peer_udp_port=" + std::to_string(mine + 1);
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open(spec.c_str(), &dev), 0);
	uint8_t gid[16];
	EXPECT_EQ(nicmr_port_gid(dev, 2, 0, gid), -EINVAL);
	EXPECT_EQ(nicmr_port_gid(dev, 1, 0, gid), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

/* addr=auto: each device of the process gets a loopback address of its own outside
 * 127.0.0.0/24 at the one UDP port, the second the next candidate (the first is taken). */
TEST(ApiConnectAutoAddr, TwoDevicesGetTwoLoopbackAddressesOfTheirOwn)
{
	const std::string spec =
		"emu:ports=1,mkeys=1024,addr=auto,udp_port=" + std::to_string(port_base() + 2010) +
		",peer_udp_port=" + std::to_string(port_base() + 2010);
	nicmr_device *a = nullptr, *b = nullptr;
	ASSERT_EQ(nicmr_device_open(spec.c_str(), &a), 0);
	ASSERT_EQ(nicmr_device_open(spec.c_str(), &b), 0);
	uint8_t ga[16], gb[16];
	ASSERT_EQ(nicmr_port_gid(a, 1, 0, ga), 0);
	ASSERT_EQ(nicmr_port_gid(b, 1, 0, gb), 0);
	const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	for (const uint8_t *g : {ga, gb}) {
		EXPECT_EQ(std::memcmp(g, mapped, 12), 0);
		EXPECT_EQ(g[12], 127);
		EXPECT_FALSE(g[13] == 0 && g[14] == 0) << "127.0.0.0/24 is left to hand-made specs";
		EXPECT_NE(g[15], 0);
		EXPECT_NE(g[15], 255);
	}
	EXPECT_NE(std::memcmp(ga, gb, 16), 0);
	EXPECT_EQ(nicmr_device_close(b), 0);
	EXPECT_EQ(nicmr_device_close(a), 0);
}

TEST_F(ApiConnectArgs, QpLocalRefusals)
{
	nicmr_qp_addr a{};
	EXPECT_EQ(nicmr_qp_local(nullptr, 0, &a), -EINVAL);
	EXPECT_EQ(nicmr_qp_local(qp, 0, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_qp_local(qp, 256, &a), -EINVAL);
	EXPECT_EQ(nicmr_qp_local(qp, 1, &a), -EADDRNOTAVAIL);
	EXPECT_EQ(nicmr_qp_local(qp2, 0, &a), -EADDRNOTAVAIL);
	ASSERT_EQ(nicmr_qp_local(qp, 0, &a), 0);
	EXPECT_EQ(a.qpn, nicmr_qp_num(qp));
	EXPECT_LE(a.psn, 0xffffffu);
	/* Asked again, the same PSN: it is the QP's until a connection replaces it. */
	nicmr_qp_addr b{};
	ASSERT_EQ(nicmr_qp_local(qp, 0, &b), 0);
	EXPECT_EQ(b.psn, a.psn);
}

TEST_F(ApiConnectArgs, EveryBadFieldIsRefusedWithItsCode)
{
	EXPECT_EQ(nicmr_qp_connect_remote(nullptr, &r), -EINVAL);
	EXPECT_EQ(nicmr_qp_connect_remote(qp, nullptr), -EINVAL);
	nicmr_qp_remote b = r;
	b.size = NICMR_QP_REMOTE_SIZE_V1 - 4;
	refused(b, -EINVAL);
	b = r;
	b.size = 0;
	refused(b, -EINVAL);
	for (uint32_t mtu : {1u, 128u, 255u, 257u, 1000u, 1500u, 8192u}) {
		b = r;
		b.mtu = mtu;
		refused(b, -EINVAL);
	}
	b = r;
	std::memset(b.gid, 0, 16);
	refused(b, -EINVAL);
	b = r;
	b.qpn = 1u << 24;
	refused(b, -EINVAL);
	b = r;
	b.psn = 1u << 24;
	refused(b, -EINVAL);
	b = r;
	b.given = NICMR_QP_REMOTE_LOCAL_PSN;
	b.local_psn = 1u << 24;
	refused(b, -EINVAL);
	b = r;
	b.ack_timeout = 32;
	refused(b, -EINVAL);
	b = r;
	b.min_rnr_timer = 32;
	refused(b, -EINVAL);
	b = r;
	b.retry_count = 8;
	refused(b, -EINVAL);
	b = r;
	b.rnr_retry = 8;
	refused(b, -EINVAL);
	b = r;
	b.log_ack_req_freq = 16;
	refused(b, -EINVAL);
	b = r;
	b.given = 1u << 5;
	refused(b, -EINVAL);
	b = r;
	b.gid_index = 256;
	refused(b, -EINVAL);
	/* An IPv6 peer from an IPv4 port. */
	b = r;
	const uint8_t v6[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
	std::memcpy(b.gid, v6, 16);
	refused(b, -EINVAL);
	/* An empty local entry: the port is not on a wire, or the index names nothing. */
	b = r;
	b.gid_index = 1;
	refused(b, -EADDRNOTAVAIL);
	EXPECT_EQ(nicmr_qp_connect_remote(qp2, &r), -EADDRNOTAVAIL);
	EXPECT_EQ(state(qp2), uint32_t{NICMR_QP_RESET});
	/* After every refusal the valid remote connects. */
	ASSERT_EQ(nicmr_qp_connect_remote(qp, &r), 0);
	EXPECT_EQ(state(qp), uint32_t{NICMR_QP_RTS});
}

TEST_F(ApiConnectArgs, LayoutSizesOlderAndNewer)
{
	/* A newer caller's struct: bytes beyond ours must be zero. */
	struct Newer {
		nicmr_qp_remote r;
		uint32_t extra[4];
	} n{};
	n.r = r;
	n.r.size = sizeof(n);
	n.extra[2] = 1;
	EXPECT_EQ(nicmr_qp_connect_remote(qp, &n.r), -E2BIG);
	EXPECT_EQ(state(qp), uint32_t{NICMR_QP_RESET});
	n.extra[2] = 0;
	ASSERT_EQ(nicmr_qp_connect_remote(qp, &n.r), 0);
	EXPECT_EQ(state(qp), uint32_t{NICMR_QP_RTS});
	/* The second layout's size is this header's size. */
	EXPECT_EQ(sizeof(nicmr_qp_remote), size_t{NICMR_QP_REMOTE_SIZE_V2});
	EXPECT_EQ(offsetof(nicmr_qp_remote, log_ack_req_freq), size_t{NICMR_QP_REMOTE_SIZE_V1});
}

TEST_F(ApiConnectArgs, AFirstLayoutCallersStructEndsBeforeLogAckReqFreq)
{
	/* Whatever lies past a first-layout struct is not read: it connects with the default. */
	nicmr_qp_remote b = r;
	b.size = NICMR_QP_REMOTE_SIZE_V1;
	b.log_ack_req_freq = 99;
	ASSERT_EQ(nicmr_qp_connect_remote(qp, &b), 0);
	EXPECT_EQ(state(qp), uint32_t{NICMR_QP_RTS});
}

TEST_F(ApiConnectArgs, ZeroFieldsTakeTheDefaultsAndGivenBitsTakeZero)
{
	/* Explicit zeros of every field that has a bit: accepted (0 is in range for each). */
	nicmr_qp_remote b = r;
	b.given = NICMR_QP_REMOTE_ACK_TIMEOUT | NICMR_QP_REMOTE_RETRY_COUNT |
		  NICMR_QP_REMOTE_RNR_RETRY | NICMR_QP_REMOTE_MIN_RNR_TIMER |
		  NICMR_QP_REMOTE_LOCAL_PSN;
	b.mtu = 4096;
	ASSERT_EQ(nicmr_qp_connect_remote(qp, &b), 0);
	nicmr_qp_addr a{};
	ASSERT_EQ(nicmr_qp_local(qp, 0, &a), 0);
	EXPECT_EQ(a.psn, 0u); /* the local PSN given, zero */
	EXPECT_EQ(state(qp), uint32_t{NICMR_QP_RTS});
}

TEST_F(ApiConnectArgs, ConnectedQpsAreRefusedWithEisconn)
{
	ASSERT_EQ(nicmr_qp_connect_remote(qp, &r), 0);
	EXPECT_EQ(nicmr_qp_connect_remote(qp, &r), -EISCONN);
	EXPECT_EQ(state(qp), uint32_t{NICMR_QP_RTS});
	/* A QP on the loopback connected by nicmr_qp_connect (to itself). */
	ASSERT_EQ(nicmr_qp_connect(qp2, 2, nicmr_qp_num(qp2)), 0);
	EXPECT_EQ(nicmr_qp_connect_remote(qp2, &r), -EISCONN);
	EXPECT_EQ(state(qp2), uint32_t{NICMR_QP_RTS});
}

} // namespace
} // namespace nicmr::test
