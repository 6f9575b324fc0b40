/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench-wire: the device model's RoCEv2 wire between two processes on the loopback, against the
 * UDP transport under it, in one run. The program forks a peer; each process opens its own
 * emulated device with port 1 on the wire (`emu:addr=::1` or 127.0.0.1 with --ipv4, inline
 * doorbells), one RC QP connected to the other's through the native API (nicmr_qp_local,
 * nicmr_qp_connect_remote), path MTU 4096, asking for an ACK every 32 packets and on every
 * signalled WQE (log_ack_req_freq 5, as the loops below signal every 32nd WQE; with
 * --ack-every-message, 0: every message asks), and a UDP socket of its own for the floor. Each
 * process is pinned to a core of its own when the machine has two (its device thread shares it;
 * --no-pin leaves them to the scheduler).
 *
 *   WritePingPong   8-byte inline RDMA WRITE into the peer's memory; the peer polls that word
 *                   and writes it back into ours; we poll for it (time per round trip)
 *   SendPingPong    8-byte inline SEND to the peer's receive queue, answered the same way
 *                   (time per round trip)
 *   UdpPingPong     the floor of both: an 8-byte datagram and its echo between plain UDP
 *                   sockets, busy-polled (time per round trip)
 *   Write64K        64 KiB RDMA WRITEs, 4 in flight (time per WRITE; bytes per second)
 *   UdpGsoStream    the floor of Write64K: 64 KiB as 16 datagrams of 4112 bytes (a MIDDLE
 *                   packet's size at MTU 4096) in UDP GSO sends, acknowledged by the peer per
 *                   64 KiB, 4 in flight (time per 64 KiB; bytes per second)
 *   Write8Rate      8-byte inline RDMA WRITEs back to back, a completion every 32 (time per
 *                   message)
 *
 * Each benchmark reports the median of its repetitions; the last lines (RATIOS) are the targets
 * of issue 18: each ping-pong over the UDP ping-pong (<= 1.3) and the UDP GSO stream's time
 * over Write64K's (its bandwidth over the stream's, >= 0.7), from those medians.
 * --smoke: few iterations and repetitions (the CI smoke test; its figures say nothing).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_cli.h"
#include "nicmr/nicmr.h"

namespace {

constexpr uint32_t kMtu = 4096;
constexpr size_t k64K = 64 << 10;
constexpr uint32_t kWindow = 4;	       /* 64 KiB WRITEs or GSO messages in flight */
constexpr uint32_t kSignalEvery = 32;  /* a completion every 32 small WRITEs */
constexpr uint32_t kLogAckReqFreq = 5; /* and an ACK asked for every 32 packets */
static_assert(uint32_t{1} << kLogAckReqFreq == kSignalEvery);
constexpr uint64_t kStop = ~uint64_t{0};
/* Offsets in each process's registered pool. */
constexpr size_t kPingOff = 0;	     /* the word the other side writes into */
constexpr size_t kScratchOff = 2048; /* quiesce()'s target */
constexpr size_t kSendOff = 4096;    /* what a SEND carries */
constexpr size_t kRecvOff = 8192;    /* receive buffers, 64 bytes each */
constexpr size_t kBulkOff = 1 << 20; /* 64 KiB WRITE sources and targets */
constexpr size_t kPoolBytes = size_t{4} << 20;
constexpr uint32_t kRecvs = 32;		      /* receive work requests posted */
constexpr uint32_t kGsoSeg = kMtu + 16;	      /* a MIDDLE packet at MTU 4096 */
constexpr uint32_t kSegsPer64K = k64K / kMtu; /* 16 datagrams of 4096 bytes of data */
constexpr auto kTimeout = std::chrono::seconds(5);

struct Options {
	bool smoke = false;
	bool ipv4 = false;
	bool no_pin = false;
	bool no_gro = false;		/* the wire ports receive without UDP GRO (gro=0) */
	bool ack_every_message = false; /* log_ack_req_freq 0 instead of kLogAckReqFreq */
	/* progress=thread: the device threads receive, the polling loops only poll */
	bool thread_progress = false;
};
Options g_opt;

/* What each process tells the other. */
struct Hello {
	nicmr_qp_addr addr;
	uint64_t base;
	uint32_t rkey;
};

/* The parent's commands to the peer: the role it plays until the benchmark stops it. */
enum Cmd : uint32_t { c_write_pp = 1, c_send_pp, c_udp_pp, c_udp_stream, c_exit };

bool full_write(int fd, const void *p, size_t n)
{
	auto *b = static_cast<const uint8_t *>(p);
	while (n > 0) {
		const ssize_t k = ::write(fd, b, n);
		if (k <= 0 && errno != EINTR)
			return false;
		if (k > 0)
			b += k, n -= size_t(k);
	}
	return true;
}

bool full_read(int fd, void *p, size_t n)
{
	auto *b = static_cast<uint8_t *>(p);
	while (n > 0) {
		const ssize_t k = ::read(fd, b, n);
		if (k == 0 || (k < 0 && errno != EINTR))
			return false;
		if (k > 0)
			b += k, n -= size_t(k);
	}
	return true;
}

/* One process's side: its device, QP, registered pool and UDP socket. */
struct Side {
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	nicmr_cq *cq = nullptr, *rcq = nullptr;
	nicmr_qp *qp = nullptr;
	nicmr_mr *mr = nullptr;
	uint8_t *base = nullptr;
	uint32_t key = 0;
	Hello peer{};
	int udp = -1;
	sockaddr_storage udp_peer{};
	socklen_t udp_peer_len = 0;
	uint64_t posted = 0; /* small WRITEs / SENDs posted (every kSignalEvery-th signalled) */

	~Side()
	{
		if (udp >= 0)
			::close(udp);
		if (mr)
			nicmr_mr_dereg(mr);
		if (qp)
			nicmr_qp_destroy(qp);
		if (rcq)
			nicmr_cq_destroy(rcq);
		if (cq)
			nicmr_cq_destroy(cq);
		if (pool)
			nicmr_pool_destroy(pool);
		if (pd)
			nicmr_pd_free(pd);
		if (dev)
			nicmr_device_close(dev);
	}

	uint64_t addr(size_t off) const { return reinterpret_cast<uintptr_t>(base + off); }
	uint64_t peer_addr(size_t off) const { return peer.base + off; }

	/* The device, its QP and pool, and the UDP socket at udp_mine. 0 or a negative code. */
	int open(uint16_t wire_mine, uint16_t wire_peer, uint16_t udp_mine, uint16_t udp_theirs)
	{
		const char *a = g_opt.ipv4 ? "127.0.0.1" : "::1";
		const std::string spec = std::string("emu:mkeys=1024,addr=") + a +
					 ",udp_port=" + std::to_string(wire_mine) +
					 ",peer_udp_port=" + std::to_string(wire_peer) +
					 (g_opt.no_gro ? ",gro=0" : "") +
					 (g_opt.thread_progress ? ",progress=thread" : "");
		int rc = nicmr_device_open(spec.c_str(), &dev);
		if (rc == 0)
			rc = nicmr_pd_alloc(dev, &pd);
		if (rc == 0) {
			nicmr_pool_params p;
			nicmr_pool_params_init(&p);
			p.size = kPoolBytes;
			p.allow_fallback = 1;
			p.name = "bench-wire";
			rc = nicmr_pool_create(dev, &p, &pool);
		}
		if (rc == 0)
			rc = nicmr_cq_create(dev, 1024, &cq);
		if (rc == 0)
			rc = nicmr_cq_create(dev, 64, &rcq);
		if (rc == 0) {
			nicmr_qp_attr qa{};
			qa.port = 1;
			qa.send_cq = cq;
			qa.depth = 256;
			qa.recv_cq = rcq;
			qa.recv_depth = 64;
			qa.max_recv_sge = 1;
			rc = nicmr_qp_create_attr(pd, &qa, &qp);
		}
		if (rc == 0) {
			base = static_cast<uint8_t *>(nicmr_pool_addr(pool));
			std::memset(base, 0, 2 * kBulkOff);
			rc = nicmr_mr_reg(pd, base, kPoolBytes,
					  NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_WRITE |
						  NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_SEND |
						  NICMR_ACCESS_RECV | NICMR_ACCESS_READ |
						  NICMR_ACCESS_WRITE,
					  0, 0, &mr);
		}
		if (rc != 0)
			return rc;
		key = nicmr_mr_key(mr);
		udp = ::socket(g_opt.ipv4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK, 0);
		if (udp < 0)
			return -errno;
		/* Room for the stream's window (4 x 64 KiB) in the receive buffer (root may
		 * go past rmem_max). */
		const int buf = 4 << 20;
		if (::setsockopt(udp, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf)) != 0)
			::setsockopt(udp, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
		sockaddr_storage me{};
		socklen_t len = 0;
		for (auto [ss, port] :
		     {std::pair{&me, udp_mine}, std::pair{&udp_peer, udp_theirs}}) {
			if (g_opt.ipv4) {
				auto *s = reinterpret_cast<sockaddr_in *>(ss);
				s->sin_family = AF_INET;
				s->sin_port = htons(port);
				s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
				len = sizeof(sockaddr_in);
			} else {
				auto *s = reinterpret_cast<sockaddr_in6 *>(ss);
				s->sin6_family = AF_INET6;
				s->sin6_port = htons(port);
				s->sin6_addr = in6addr_loopback;
				len = sizeof(sockaddr_in6);
			}
		}
		udp_peer_len = len;
		if (::bind(udp, reinterpret_cast<sockaddr *>(&me), len) != 0)
			return -errno;
		return 0;
	}

	/* Exchanges addresses over the control socket and connects the QP. */
	int connect(int ctl)
	{
		Hello me{};
		int rc = nicmr_qp_local(qp, 0, &me.addr);
		if (rc != 0)
			return rc;
		me.base = addr(0);
		me.rkey = key;
		if (!full_write(ctl, &me, sizeof(me)) || !full_read(ctl, &peer, sizeof(peer)))
			return -EPIPE;
		nicmr_qp_remote r{};
		r.size = sizeof(r);
		r.qpn = peer.addr.qpn;
		std::memcpy(r.gid, peer.addr.gid, sizeof(r.gid));
		r.psn = peer.addr.psn;
		r.mtu = kMtu;
		r.log_ack_req_freq = g_opt.ack_every_message ? 0 : kLogAckReqFreq;
		return nicmr_qp_connect_remote(qp, &r);
	}

	/* Collects send completions; false on an error completion. */
	bool drain(int want = 0)
	{
		nicmr_wc wc[16];
		int got = 0;
		const auto end = std::chrono::steady_clock::now() + kTimeout;
		do {
			const int n = nicmr_cq_poll(cq, wc, 16);
			for (int i = 0; i < n; i++)
				if (wc[i].status != NICMR_WC_SUCCESS)
					return false;
			got += n > 0 ? n : 0;
			if (got < want)
				std::this_thread::yield();
		} while (got < want && std::chrono::steady_clock::now() < end);
		return got >= want;
	}

	/* Every send completion collected: a signalled marker WRITE (to the peer's scratch
	 * word) and everything before it. False on an error or timeout. */
	bool quiesce()
	{
		constexpr uint64_t kMarker = ~uint64_t{0} - 1;
		const uint64_t v = 0;
		if (nicmr_post_write(qp, reinterpret_cast<uintptr_t>(&v), 8, 0,
				     peer_addr(kScratchOff), peer.rkey, kMarker,
				     NICMR_SEND_INLINE | NICMR_SEND_SIGNALED) != 0)
			return false;
		nicmr_wc wc[16];
		const auto end = std::chrono::steady_clock::now() + kTimeout;
		while (std::chrono::steady_clock::now() < end) {
			const int n = nicmr_cq_poll(cq, wc, 16);
			if (n <= 0)
				std::this_thread::yield();
			for (int i = 0; i < n; i++) {
				if (wc[i].status != NICMR_WC_SUCCESS)
					return false;
				if (wc[i].wr_id == kMarker) {
					posted = 0;
					return true;
				}
			}
		}
		return false;
	}

	/* An 8-byte inline WRITE of v into the peer's word at off, a completion every
	 * kSignalEvery. */
	int write_word(uint64_t v, size_t off)
	{
		const unsigned sig = ++posted % kSignalEvery == 0 ? NICMR_SEND_SIGNALED : 0;
		int rc;
		while ((rc = nicmr_post_write(qp, reinterpret_cast<uintptr_t>(&v), 8, 0,
					      peer_addr(off), peer.rkey, posted,
					      NICMR_SEND_INLINE | sig)) == -ENOSPC)
			if (!drain())
				return -EIO;
		drain();
		return rc;
	}

	int send_word(uint64_t v)
	{
		std::memcpy(base + kSendOff, &v, 8);
		const unsigned sig = ++posted % kSignalEvery == 0 ? NICMR_SEND_SIGNALED : 0;
		int rc;
		while ((rc = nicmr_post_send(qp, reinterpret_cast<uintptr_t>(base + kSendOff), 8, 0,
					     0, posted, NICMR_SEND_INLINE | sig)) == -ENOSPC)
			if (!drain())
				return -EIO;
		drain();
		return rc;
	}

	int post_recv(uint32_t slot)
	{
		nicmr_sge s{addr(kRecvOff + slot * 64), 64, key};
		return nicmr_post_recv(qp, &s, 1, slot);
	}

	/* The word the peer wrote at off once it equals want (or kStop); false on timeout. A
	 * passive target's loop: it polls no CQ, so it runs the device's progress itself
	 * (nicmr_device_progress: the WRITE is received and lands on this thread). */
	bool wait_word(size_t off, uint64_t want, uint64_t *got)
	{
		std::atomic_ref<uint64_t> w(*reinterpret_cast<uint64_t *>(base + off));
		const auto end = std::chrono::steady_clock::now() + kTimeout;
		for (uint32_t spins = 0;; spins++) {
			/* Acquire: the device's write of the word before our reading it. */
			const uint64_t v = w.load(std::memory_order_acquire);
			if (v == want || v == kStop) {
				*got = v;
				return true;
			}
			if (!g_opt.thread_progress && nicmr_device_progress(dev) < 0)
				return false;
			/* Give the core to this process's device thread now and then (it shares
			 * the core when the processes are pinned; with progress=thread it is the
			 * one that receives). */
			if (spins % 64 == 63) {
				std::this_thread::yield();
				if (std::chrono::steady_clock::now() > end)
					return false;
			}
		}
	}

	/* The next receive completion's word (its buffer re-posted); false on timeout/error. */
	bool wait_recv(uint64_t *got)
	{
		nicmr_wc wc;
		const auto end = std::chrono::steady_clock::now() + kTimeout;
		for (uint32_t spins = 0;; spins++) {
			const int n = nicmr_cq_poll(rcq, &wc, 1);
			if (n == 1) {
				if (wc.status != NICMR_WC_SUCCESS)
					return false;
				const auto slot = static_cast<uint32_t>(wc.wr_id);
				std::memcpy(got, base + kRecvOff + slot * 64, 8);
				return post_recv(slot) == 0;
			}
			if (n < 0)
				return false;
			if (spins % 64 == 63) {
				std::this_thread::yield();
				if (std::chrono::steady_clock::now() > end)
					return false;
			}
		}
	}

	int udp_send(const void *p, size_t n)
	{
		const ssize_t k = ::sendto(udp, p, n, 0, reinterpret_cast<sockaddr *>(&udp_peer),
					   udp_peer_len);
		return k == ssize_t(n) ? 0 : -errno;
	}
	/* Busy-polls for one datagram into p (at most n bytes): its length, or -1 on timeout. */
	ssize_t udp_recv(void *p, size_t n)
	{
		const auto end = std::chrono::steady_clock::now() + kTimeout;
		for (uint32_t spins = 0;; spins++) {
			const ssize_t k = ::recv(udp, p, n, MSG_DONTWAIT);
			if (k >= 0)
				return k;
			if (spins % 1024 == 1023 && std::chrono::steady_clock::now() > end)
				return -1;
		}
	}
};

Side *g_side = nullptr; /* the parent's */
int g_ctl = -1;		/* the parent's end of the control socket */

/* The peer's roles. Each returns false when something failed (the peer then exits). */
bool peer_write_pp(Side &s)
{
	for (uint64_t want = 1;; want++) {
		uint64_t v = 0;
		if (!s.wait_word(kPingOff, want, &v))
			return false;
		if (v == kStop)
			break;
		if (s.write_word(v, kPingOff) != 0)
			return false;
	}
	/* Ready for the next round: the word back to 0 (the parent's comes from its writes). */
	std::memset(s.base + kPingOff, 0, 8);
	return s.drain(0);
}

bool peer_send_pp(Side &s)
{
	for (;;) {
		uint64_t v = 0;
		if (!s.wait_recv(&v))
			return false;
		if (v == kStop)
			return true;
		if (s.send_word(v) != 0)
			return false;
	}
}

bool peer_udp_pp(Side &s)
{
	for (;;) {
		uint64_t v = 0;
		if (s.udp_recv(&v, sizeof(v)) != sizeof(v))
			return false;
		if (v == kStop)
			return true;
		if (s.udp_send(&v, sizeof(v)) != 0)
			return false;
	}
}

/* Receives the stream; acknowledges every 64 KiB (16 datagrams); ends at an 8-byte kStop. With
 * the wire's UDP GRO on (no --no-gro) the floor's socket takes GRO too, as the wire's ports do,
 * and counts the datagrams of a coalesced message by its segment size (udp(7), UDP_GRO). */
bool peer_udp_stream(Side &s)
{
	constexpr size_t kSlot = 64 * 1024;
	static uint8_t bufs[32][kSlot];
	alignas(cmsghdr) static uint8_t ctl[32][CMSG_SPACE(sizeof(int))];
	const int on = 1;
	const bool gro =
		!g_opt.no_gro && ::setsockopt(s.udp, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0;
	mmsghdr m[32];
	iovec iov[32];
	uint64_t got = 0;
	auto last = std::chrono::steady_clock::now();
	for (;;) {
		for (int i = 0; i < 32; i++) {
			iov[i] = {bufs[i], gro ? kSlot : kGsoSeg};
			m[i] = {};
			m[i].msg_hdr.msg_iov = &iov[i];
			m[i].msg_hdr.msg_iovlen = 1;
			if (gro) {
				m[i].msg_hdr.msg_control = ctl[i];
				m[i].msg_hdr.msg_controllen = sizeof(ctl[i]);
			}
		}
		const int n = ::recvmmsg(s.udp, m, 32, MSG_DONTWAIT, nullptr);
		if (n <= 0) {
			if (std::chrono::steady_clock::now() - last > kTimeout)
				return false;
			continue;
		}
		last = std::chrono::steady_clock::now();
		for (int i = 0; i < n; i++) {
			if (m[i].msg_len == 8) {
				uint64_t v;
				std::memcpy(&v, bufs[i], 8);
				if (v == kStop)
					return true;
			}
			size_t seg = 0;
			if (gro)
				for (cmsghdr *c = CMSG_FIRSTHDR(&m[i].msg_hdr); c != nullptr;
				     c = CMSG_NXTHDR(&m[i].msg_hdr, c))
					if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
						int v = 0;
						std::memcpy(&v, CMSG_DATA(c), sizeof(v));
						seg = v > 0 ? size_t(v) : 0;
					}
			const size_t len = m[i].msg_len;
			const size_t k = seg == 0 || len <= seg ? 1 : (len + seg - 1) / seg;
			for (size_t j = 0; j < k; j++)
				if (++got % kSegsPer64K == 0) {
					const uint64_t ack = got / kSegsPer64K;
					if (s.udp_send(&ack, sizeof(ack)) != 0)
						return false;
				}
		}
	}
}

int peer_main(int ctl, uint16_t ports[4])
{
	Side s;
	if (s.open(ports[1], ports[0], ports[3], ports[2]) != 0)
		return 10;
	if (s.connect(ctl) != 0)
		return 11;
	for (uint32_t i = 0; i < kRecvs; i++)
		if (s.post_recv(i) != 0)
			return 12;
	const int ready = 0;
	if (!full_write(ctl, &ready, sizeof(ready)))
		return 13;
	for (;;) {
		uint32_t c = 0;
		if (!full_read(ctl, &c, sizeof(c)))
			return 14;
		bool ok = false;
		switch (c) {
		case c_write_pp:
			ok = peer_write_pp(s);
			break;
		case c_send_pp:
			ok = peer_send_pp(s);
			break;
		case c_udp_pp:
			ok = peer_udp_pp(s);
			break;
		case c_udp_stream:
			ok = peer_udp_stream(s);
			break;
		case c_exit:
			return 0;
		default:
			return 15;
		}
		/* Tell the parent the role ended (and how). */
		const int st = ok ? 0 : 1;
		if (!full_write(ctl, &st, sizeof(st)) || !ok)
			return 16;
	}
}

/* Starts the peer's role c; at the end, stop() and the peer's answer. */
bool start_role(benchmark::State &st, Cmd c)
{
	if (g_side == nullptr) {
		st.SkipWithError("no peer");
		return false;
	}
	const uint32_t v = c;
	if (!full_write(g_ctl, &v, sizeof(v))) {
		st.SkipWithError("the peer is gone");
		return false;
	}
	return true;
}

void end_role(benchmark::State &st)
{
	int peer_st = 1;
	if (!full_read(g_ctl, &peer_st, sizeof(peer_st)) || peer_st != 0) {
		st.SkipWithError("the peer failed");
		g_side = nullptr;
	}
}

void BM_WritePingPong(benchmark::State &st)
{
	if (!start_role(st, c_write_pp))
		return;
	Side &s = *g_side;
	uint64_t seq = 0;
	bool ok = true;
	for (auto _ : st) {
		seq++;
		uint64_t got = 0;
		if (s.write_word(seq, kPingOff) != 0 || !s.wait_word(kPingOff, seq, &got) ||
		    got != seq) {
			ok = false;
			break;
		}
	}
	s.write_word(kStop, kPingOff);
	std::memset(s.base + kPingOff, 0, 8);
	ok = s.quiesce() && ok;
	if (!ok)
		st.SkipWithError("a round trip failed or timed out");
	end_role(st);
}

void BM_SendPingPong(benchmark::State &st)
{
	if (!start_role(st, c_send_pp))
		return;
	Side &s = *g_side;
	uint64_t seq = 0;
	bool ok = true;
	for (auto _ : st) {
		seq++;
		uint64_t got = 0;
		if (s.send_word(seq) != 0 || !s.wait_recv(&got) || got != seq) {
			ok = false;
			break;
		}
	}
	s.send_word(kStop);
	ok = s.quiesce() && ok;
	if (!ok)
		st.SkipWithError("a round trip failed or timed out");
	end_role(st);
}

void BM_UdpPingPong(benchmark::State &st)
{
	if (!start_role(st, c_udp_pp))
		return;
	Side &s = *g_side;
	uint64_t seq = 0;
	bool ok = true;
	for (auto _ : st) {
		seq++;
		uint64_t got = 0;
		if (s.udp_send(&seq, 8) != 0 || s.udp_recv(&got, 8) != 8 || got != seq) {
			ok = false;
			break;
		}
	}
	s.udp_send(&kStop, 8);
	if (!ok)
		st.SkipWithError("a round trip failed or timed out");
	end_role(st);
}

void BM_Write64K(benchmark::State &st)
{
	Side *sp = g_side;
	if (sp == nullptr) {
		st.SkipWithError("no peer");
		return;
	}
	Side &s = *sp;
	for (size_t i = 0; i < k64K * kWindow; i++)
		s.base[kBulkOff + i] = static_cast<uint8_t>(i * 7);
	uint32_t inflight = 0;
	uint64_t n = 0;
	bool ok = true;
	nicmr_wc wc[kWindow];
	const auto post = [&] {
		const size_t off = kBulkOff + (n % kWindow) * k64K;
		n++;
		return nicmr_post_write(s.qp, s.addr(off), k64K, s.key, s.peer_addr(off),
					s.peer.rkey, n, NICMR_SEND_SIGNALED) == 0;
	};
	for (auto _ : st) {
		while (ok && inflight < kWindow) {
			ok = post();
			inflight++;
		}
		/* One completion per iteration. */
		const auto end = std::chrono::steady_clock::now() + kTimeout;
		int got = 0;
		while (ok && got == 0) {
			got = nicmr_cq_poll(s.cq, wc, 1);
			if (got == 1 && wc[0].status != NICMR_WC_SUCCESS)
				ok = false;
			if (got == 0) {
				/* The core to this process's device thread (pinned with us). */
				std::this_thread::yield();
				if (std::chrono::steady_clock::now() > end)
					ok = false;
			}
		}
		inflight -= got > 0 ? 1 : 0;
		if (!ok)
			break;
	}
	while (ok && inflight > 0) {
		int got = 0;
		const auto end = std::chrono::steady_clock::now() + kTimeout;
		while (got == 0 && std::chrono::steady_clock::now() < end)
			if ((got = nicmr_cq_poll(s.cq, wc, 1)) == 0)
				std::this_thread::yield();
		ok = got == 1 && wc[0].status == NICMR_WC_SUCCESS;
		inflight--;
	}
	if (!ok)
		st.SkipWithError("a WRITE failed or timed out");
	st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(k64K));
}

void BM_UdpGsoStream(benchmark::State &st)
{
	if (!start_role(st, c_udp_stream))
		return;
	Side &s = *g_side;
	static uint8_t buf[kSegsPer64K * kGsoSeg];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = static_cast<uint8_t>(i * 7);
	/* 64 KiB: 15 datagrams in one GSO send (65507 bytes at most), 1 in another, both in one
	 * sendmmsg, as the wire sends a WRITE's MIDDLE packets. */
	constexpr uint32_t kFirst = 65507 / kGsoSeg;
	mmsghdr m[2];
	iovec iov[2];
	alignas(cmsghdr) uint8_t cm[2][CMSG_SPACE(sizeof(uint16_t))];
	for (int i = 0; i < 2; i++) {
		const uint32_t segs = i == 0 ? kFirst : kSegsPer64K - kFirst;
		iov[i] = {buf + (i == 0 ? 0 : kFirst * kGsoSeg), size_t{segs} * kGsoSeg};
		m[i] = {};
		m[i].msg_hdr.msg_name = &s.udp_peer;
		m[i].msg_hdr.msg_namelen = s.udp_peer_len;
		m[i].msg_hdr.msg_iov = &iov[i];
		m[i].msg_hdr.msg_iovlen = 1;
		if (segs > 1) {
			m[i].msg_hdr.msg_control = cm[i];
			m[i].msg_hdr.msg_controllen = sizeof(cm[i]);
			cmsghdr *c = CMSG_FIRSTHDR(&m[i].msg_hdr);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
			const uint16_t seg = kGsoSeg;
			std::memcpy(CMSG_DATA(c), &seg, sizeof(seg));
		}
	}
	uint64_t sent = 0, acked = 0;
	bool ok = true;
	for (auto _ : st) {
		while (ok && sent - acked < kWindow) {
			ok = ::sendmmsg(s.udp, m, 2, 0) == 2;
			sent++;
		}
		/* One acknowledgement (of the peer's count of 64 KiB received) per iteration. */
		uint64_t a = 0;
		if (!ok || s.udp_recv(&a, sizeof(a)) != sizeof(a)) {
			ok = false;
			break;
		}
		acked = std::max(acked, a);
	}
	/* What is in flight still lands; then the end marker. */
	while (ok && acked < sent) {
		uint64_t a = 0;
		if (s.udp_recv(&a, sizeof(a)) != sizeof(a))
			ok = false;
		acked = std::max(acked, a);
	}
	s.udp_send(&kStop, 8);
	if (!ok)
		st.SkipWithError("GSO send refused, or 64 KiB lost (no acknowledgement)");
	end_role(st);
	st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(k64K));
}

void BM_Write8Rate(benchmark::State &st)
{
	Side *sp = g_side;
	if (sp == nullptr) {
		st.SkipWithError("no peer");
		return;
	}
	Side &s = *sp;
	bool ok = true;
	for (auto _ : st)
		if (s.write_word(s.posted, kBulkOff) != 0) {
			ok = false;
			break;
		}
	/* The tail: every completion (after the timed loop: each post sent its datagram). */
	ok = s.quiesce() && ok;
	if (!ok)
		st.SkipWithError("a WRITE failed");
	st.SetItemsProcessed(int64_t(st.iterations()));
}

/* Prints what the console reporter prints and keeps the medians for the ratios. */
class RatioReporter : public benchmark::ConsoleReporter {
public:
	/* Colours only on a terminal: the smoke test reads the lines. */
	RatioReporter() : ConsoleReporter(isatty(1) ? OO_ColorTabular : OO_Tabular) {}
	std::map<std::string, double> median_ns;
	void ReportRuns(const std::vector<Run> &runs) override
	{
		for (const Run &r : runs)
			if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median" &&
			    !r.error_occurred)
				median_ns[r.run_name.function_name] = r.GetAdjustedRealTime();
		ConsoleReporter::ReportRuns(runs);
	}
};

/* A free UDP port of the loopback (the kernel's choice a moment ago), other than those in
 * taken. */
uint16_t free_port(const std::vector<uint16_t> &taken)
{
	for (;;) {
		const int fd = ::socket(g_opt.ipv4 ? AF_INET : AF_INET6, SOCK_DGRAM, 0);
		sockaddr_in6 a6{};
		sockaddr_in a4{};
		sockaddr *a = g_opt.ipv4 ? reinterpret_cast<sockaddr *>(&a4)
					 : reinterpret_cast<sockaddr *>(&a6);
		socklen_t sl = g_opt.ipv4 ? sizeof(a4) : sizeof(a6);
		a4.sin_family = AF_INET;
		a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a6.sin6_family = AF_INET6;
		a6.sin6_addr = in6addr_loopback;
		uint16_t port = 0;
		if (fd >= 0 && ::bind(fd, a, sl) == 0 && ::getsockname(fd, a, &sl) == 0)
			port = ntohs(g_opt.ipv4 ? a4.sin_port : a6.sin6_port);
		if (fd >= 0)
			::close(fd);
		if (port == 0)
			return 0;
		bool used = false;
		for (uint16_t t : taken)
			used = used || t == port;
		if (!used)
			return port;
	}
}

/* Each process on a core of its own when there are two or more (0: the parent, 1: the peer). */
void pin(int which)
{
	if (g_opt.no_pin)
		return;
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 2)
		return;
	int seen = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set) && seen++ == which) {
			cpu_set_t one;
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			sched_setaffinity(0, sizeof(one), &one);
			return;
		}
}

void print_ratio(const char *name, double num, double den, const char *target, bool le, double goal)
{
	if (num <= 0 || den <= 0) {
		std::printf("RATIOS %s=n/a target%s n/a\n", name, target);
		return;
	}
	const double r = num / den;
	std::printf("RATIOS %s=%.3f target%s %s\n", name, r, target,
		    (le ? r <= goal : r >= goal) ? "met" : "MISSED");
}

} // namespace

int main(int argc, char **argv)
{
	/* This program's own options, taken out before Google Benchmark's. */
	int kept = 1;
	for (int i = 1; i < argc; i++) {
		if (std::strcmp(argv[i], "--smoke") == 0)
			g_opt.smoke = true;
		else if (std::strcmp(argv[i], "--ipv4") == 0)
			g_opt.ipv4 = true;
		else if (std::strcmp(argv[i], "--no-pin") == 0)
			g_opt.no_pin = true;
		else if (std::strcmp(argv[i], "--no-gro") == 0)
			g_opt.no_gro = true;
		else if (std::strcmp(argv[i], "--ack-every-message") == 0)
			g_opt.ack_every_message = true;
		else if (std::strcmp(argv[i], "--thread-progress") == 0)
			g_opt.thread_progress = true;
		else
			argv[kept++] = argv[i];
	}
	argc = kept;
	const int reps = g_opt.smoke ? 2 : 10;
	const auto reg = [&](const char *name, void (*fn)(benchmark::State &),
			     int64_t smoke_iters) {
		auto *b = benchmark::RegisterBenchmark(name, fn)
				  ->Repetitions(reps)
				  ->ReportAggregatesOnly(true)
				  ->UseRealTime();
		if (g_opt.smoke)
			b->Iterations(smoke_iters);
		else
			b->MinTime(0.2);
	};
	reg("BM_UdpPingPong", BM_UdpPingPong, 20);
	reg("BM_WritePingPong", BM_WritePingPong, 20);
	reg("BM_SendPingPong", BM_SendPingPong, 20);
	reg("BM_UdpGsoStream", BM_UdpGsoStream, 8);
	reg("BM_Write64K", BM_Write64K, 8);
	reg("BM_Write8Rate", BM_Write8Rate, 200);
	nicmr::bench::init(
		&argc, argv, "bench-wire",
		"The device model's RoCEv2 wire between two processes on the loopback (::1, or\n"
		"127.0.0.1 with --ipv4), against plain UDP between the same processes: 8-byte "
		"RDMA\n"
		"WRITE and SEND ping-pong against a UDP ping-pong, 64 KiB RDMA WRITE bandwidth\n"
		"against a UDP GSO stream, 8-byte WRITE rate. Medians of 10 repetitions, ratio\n"
		"lines at the end. Options: --ipv4; --no-pin (leave both processes to the\n"
		"scheduler); --no-gro (the wire ports receive without UDP GRO);\n"
		"--ack-every-message (the QPs ask for an ACK on every message, log_ack_req_freq\n"
		"0, instead of every 32 packets and every signalled WQE);\n"
		"--thread-progress (progress=thread: the device threads receive, not the\n"
		"polling loops); --smoke (few iterations, for CI).");

	std::vector<uint16_t> taken;
	uint16_t ports[4]; /* wire: parent, peer; UDP: parent, peer */
	for (uint16_t &p : ports) {
		p = free_port(taken);
		if (p == 0) {
			std::fprintf(stderr, "bench-wire: no %s loopback address\n",
				     g_opt.ipv4 ? "IPv4" : "IPv6 (::1); try --ipv4");
			return 1;
		}
		taken.push_back(p);
	}
	int sv[2];
	if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
		std::perror("bench-wire: socketpair");
		return 1;
	}
	std::fflush(stdout);
	const pid_t child = ::fork();
	if (child < 0) {
		std::perror("bench-wire: fork");
		return 1;
	}
	if (child == 0) {
		::close(sv[0]);
		pin(1);
		::_exit(peer_main(sv[1], ports));
	}
	::close(sv[1]);
	g_ctl = sv[0];
	pin(0);
	int status = 0;
	{
		Side s;
		int rc = s.open(ports[0], ports[1], ports[2], ports[3]);
		if (rc == 0)
			rc = s.connect(g_ctl);
		for (uint32_t i = 0; rc == 0 && i < kRecvs; i++)
			rc = s.post_recv(i);
		int ready = -1;
		if (rc == 0 && (!full_read(g_ctl, &ready, sizeof(ready)) || ready != 0))
			rc = -EPIPE;
		if (rc != 0)
			std::fprintf(stderr, "bench-wire: setting up the two sides failed: %s\n",
				     std::strerror(-rc));
		else
			g_side = &s;
		std::printf("bench-wire: %s loopback, path MTU %u, parent pid %d, peer pid %d\n",
			    g_opt.ipv4 ? "IPv4" : "IPv6", kMtu, int(getpid()), int(child));
		RatioReporter rep;
		if (g_side != nullptr)
			benchmark::RunSpecifiedBenchmarks(&rep);
		const uint32_t bye = c_exit;
		full_write(g_ctl, &bye, sizeof(bye));
		int st = 0;
		::waitpid(child, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			std::fprintf(stderr, "bench-wire: the peer ended with status %d\n", st);
			status = 1;
		}
		if (g_side == nullptr)
			status = 1;
		const auto get = [&](const char *n) {
			auto it = rep.median_ns.find(n);
			return it == rep.median_ns.end() ? 0.0 : it->second;
		};
		const double udp = get("BM_UdpPingPong"), wpp = get("BM_WritePingPong"),
			     spp = get("BM_SendPingPong"), gso = get("BM_UdpGsoStream"),
			     w64 = get("BM_Write64K"), w8 = get("BM_Write8Rate");
		const auto gbps = [](double ns) { return ns > 0 ? k64K * 8 / ns : 0.0; };
		std::printf("RATIOS medians udp_pingpong_ns=%.0f write_pingpong_ns=%.0f "
			    "send_pingpong_ns=%.0f udp_gso_gbps=%.2f write64k_gbps=%.2f "
			    "write8_mps=%.3f log_ack_req_freq=%u\n",
			    udp, wpp, spp, gbps(gso), gbps(w64), w8 > 0 ? 1e3 / w8 : 0.0,
			    g_opt.ack_every_message ? 0 : kLogAckReqFreq);
		print_ratio("write_pingpong_over_udp", wpp, udp, "<=1.3", true, 1.3);
		print_ratio("send_pingpong_over_udp", spp, udp, "<=1.3", true, 1.3);
		print_ratio("write64k_over_udp_gso", gso, w64, ">=0.7", false, 0.7);
		g_side = nullptr;
	}
	::close(g_ctl);
	benchmark::Shutdown();
	return status;
}
