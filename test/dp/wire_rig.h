/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rig of the UDP wire tests between two processes (test_dp_wire.cpp, test_dp_wire_loss.cpp):
 * each side is an emulated ConnectX of its own with port 1 on the wire, the driver opened on it
 * and one RC QP whose address path names the other side's GID (INIT2RTR without force
 * loopback). The test forks: the child runs responder() (its memory, its keys), the parent is
 * the requester. They learn each other's GID, QPN and keys over a socketpair, as applications
 * would over TCP; the parent then asks the child for its memory, QP state and wire counters
 * over the same pair (Req).
 */
#ifndef NICMR_TEST_DP_WIRE_RIG_H
#define NICMR_TEST_DP_WIRE_RIG_H

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "emu_mlx5.h"
#include "fd_io.h"
#include "mem_space.h"
#include "mlx5_commands.h"
#include "mlx5_cq.h"
#include "mlx5_device.h"
#include "mlx5_eq.h"
#include "mlx5_qp.h"
#include "mlx5_uar.h"
#include "mr_keys.h"
#include "roce_packet.h"

namespace wire_rig {

namespace emu = nicmr::emu;
namespace mem = nicmr::mem;
namespace mlx5 = nicmr::mlx5;
namespace prm = nicmr::mlx5::prm;
namespace roce = nicmr::roce;
using namespace std::chrono_literals;

constexpr size_t kRegion = 64 * 1024; /* the responder's exposed region */
constexpr size_t kSmall = 256;	      /* a key over its first 256 bytes (bounds) */

/* Keys the responder offers. */
enum KeyId : uint32_t {
	k_rw,	    /* rr | rw | a over the region */
	k_ro,	    /* rr only, same region */
	k_wo,	    /* rw only */
	k_noatomic, /* rr | rw, no a */
	k_other_pd, /* everything, in another PD than the QP's */
	k_small,    /* everything over kSmall bytes */
	k_count
};

struct Info {
	uint8_t gid[16];
	uint32_t qpn;
	uint64_t region; /* the responder's region address (its VA: the keys' address space) */
	uint32_t keys[k_count];
};

/* The parent's requests to the child. */
enum Op : uint32_t { op_dump = 1, op_state, op_stats, op_recover, op_exit };
struct Req {
	uint32_t op;
	uint32_t off, len;
};

using nicmr::test::full_read;
using nicmr::test::full_write;

/* The byte the responder's region holds at offset i before anything is written. */
/* A UDP port of 127.0.0.1 free a moment ago (the kernel's choice): tests running in parallel
 * do not meet on a port. 0 when none could be had. */
inline uint16_t free_udp_port()
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

inline uint8_t pattern(size_t i)
{
	return static_cast<uint8_t>(i * 7 + (i >> 8) + 3);
}

struct WireOptions {
	std::string addr;
	uint16_t port = 0, peer_port = 0;
	uint32_t mtu = prm::qp_mtu::mtu_1024;
	emu::DoorbellDelivery delivery = emu::DoorbellDelivery::inline_call;
	/* Faults this side's port injects on send, and its QP's reliability parameters. */
	emu::WireFaults faults{};
	uint32_t retry_count = 7, rnr_retry = 7, ack_timeout = 14, min_rnr_timer = 12;
	/* A receive queue (max_recv_sge > 0): 2^log_rq_size WQEs of max_recv_sge SGEs, their
	 * completions on a CQ of their own (Side::rcq). */
	uint32_t max_recv_sge = 0, log_rq_size = 0;
	std::chrono::milliseconds wait = std::chrono::milliseconds(5000); /* Side::wait */
	/* The port's UDP GSO (WirePortConfig::gso) and the test hook that makes its GSO sends
	 * fail as a refusing kernel's do (WirePortConfig::test_gso_errno). */
	bool gso = true;
	int test_gso_errno = 0;
	/* Messages the port's receive call takes (WirePortConfig::rx_batch; 0 adapts), and
	 * whether its UDP socket asks for GRO (WirePortConfig::gro). */
	uint32_t rx_batch = 0;
	bool gro = true;
	/* The QP's READ/atomic limits: as requester (2^log_sra_max in flight) and as
	 * responder (2^log_rra_max resources). */
	uint32_t log_sra_max = 3, log_rra_max = 3;
	/* How often the QP asks for ACKs (QpParams::log_ack_req_freq). */
	uint32_t log_ack_req_freq = 0;
	/* The device thread's first idle nap (EmuConfig::poll_idle_sleep): a test that runs
	 * the progress work itself (function().progress()) makes it long, so that the thread
	 * does not take the work back between two of the test's calls. */
	std::chrono::microseconds idle_sleep{50};
};

/* One side: a device with port 1 on the wire, a PD, one RC QP (with a receive queue when the
 * options ask for one), a data arena. */
struct Side {
	std::unique_ptr<emu::EmuMlx5> hw;
	std::unique_ptr<mem::DmaSpace> space;
	std::unique_ptr<mem::DmaArena> ctrl, data;
	std::unique_ptr<mlx5::Device> dev;
	mlx5::PdHandle pd, pd2;
	std::unique_ptr<mlx5::Uar> uar;
	std::unique_ptr<mlx5::Eq> eq;
	std::unique_ptr<mlx5::Cq> cq, rcq;
	std::unique_ptr<mlx5::Qp> qp;
	mem::DmaBlock block{};
	std::vector<mlx5::MkeyHandle> mrs;
	mlx5::RoceAddress gid;
	WireOptions o;

	~Side()
	{
		qp.reset();
		rcq.reset();
		cq.reset();
		eq.reset();
		uar.reset();
		mrs.clear();
		if (data && block.va != nullptr)
			data->release(block);
		pd2.reset();
		pd.reset();
		dev.reset();
		data.reset();
		ctrl.reset();
		space.reset();
		hw.reset();
	}

	int open(const WireOptions &opt)
	{
		o = opt;
		emu::EmuConfig cfg;
		cfg.ports = 1;
		cfg.delivery = o.delivery;
		cfg.poll_idle_sleep = o.idle_sleep;
		cfg.wire[0] = {o.addr, o.port, o.peer_port, o.faults};
		cfg.wire[0].gso = o.gso;
		cfg.wire[0].test_gso_errno = o.test_gso_errno;
		cfg.wire[0].rx_batch = o.rx_batch;
		cfg.wire[0].gro = o.gro;
		int rc = emu::emu_mlx5_create(cfg, &hw);
		if (rc != 0)
			return rc;
		space = std::make_unique<mem::DmaSpace>(hw->function().dma());
		mem::PoolParams p;
		p.size = size_t{4} << 20;
		p.page_size = mem::kPage4K;
		p.name = "wire-ctrl";
		if ((rc = mem::DmaArena::create(*space, p, &ctrl)) != 0)
			return rc;
		p.size = size_t{1} << 20;
		p.name = "wire-data";
		if ((rc = mem::DmaArena::create(*space, p, &data)) != 0)
			return rc;
		mlx5::DeviceOptions d;
		d.arena = ctrl.get();
		d.init_timeout = 2000ms;
		d.cmd_timeout = 5000ms;
		if ((rc = mlx5::Device::open(hw->function(), *space, d, &dev)) != 0)
			return rc;
		if ((rc = mlx5::PdHandle::alloc(*dev, &pd)) != 0 ||
		    (rc = mlx5::PdHandle::alloc(*dev, &pd2)) != 0)
			return rc;
		if ((rc = mlx5::Uar::alloc(*dev, &uar)) != 0)
			return rc;
		if ((rc = mlx5::Eq::create(*dev, *uar, {}, &eq)) != 0)
			return rc;
		mlx5::CqParams cp;
		cp.log_size = 8;
		cp.eqn = eq->eqn();
		if ((rc = mlx5::Cq::create(*dev, *uar, cp, &cq)) != 0)
			return rc;
		if (o.max_recv_sge != 0 && (rc = mlx5::Cq::create(*dev, *uar, cp, &rcq)) != 0)
			return rc;
		if ((rc = data->alloc(kRegion * 2, 4096, &block)) != 0)
			return rc;
		return dev->query_roce_address(1, 0, &gid);
	}

	/* The QP, its address path naming remote, then connected to remote_qpn. */
	int make_qp(const uint8_t *remote_gid)
	{
		mlx5::QpParams q;
		q.pd = pd.pd();
		q.port = 1;
		q.log_sq_size = 8;
		q.rre = q.rwe = q.rae = true;
		q.mtu = o.mtu;
		q.retry_count = o.retry_count;
		q.rnr_retry = o.rnr_retry;
		q.ack_timeout = o.ack_timeout;
		q.min_rnr_timer = o.min_rnr_timer;
		q.log_sra_max = o.log_sra_max;
		q.log_rra_max = o.log_rra_max;
		q.log_ack_req_freq = o.log_ack_req_freq;
		q.max_recv_sge = o.max_recv_sge;
		q.log_rq_size = o.log_rq_size;
		q.recv_cq = rcq.get();
		q.force_loopback = false;
		q.gid_index = 0;
		std::memcpy(q.remote_gid.data(), remote_gid, 16);
		return mlx5::Qp::create(*dev, *uar, *cq, q, &qp);
	}

	uint8_t *region() { return static_cast<uint8_t *>(block.va); }
	uint64_t addr(size_t off) { return reinterpret_cast<uintptr_t>(region()) + off; }

	/* An MTT key over [off, off + len) of the block, in pd (or pd2); rinval: a SEND with
	 * invalidate may invalidate it. */
	int mr(size_t off, size_t len, bool lr, bool lw, bool rr, bool rw, bool a, bool other_pd,
	       uint32_t *key, bool rinval = false)
	{
		mlx5::MkeyCreate c;
		c.ctx.pd = other_pd ? pd2.pd() : pd.pd();
		c.ctx.lr = lr;
		c.ctx.lw = lw;
		c.ctx.rr = rr;
		c.ctx.rw = rw;
		c.ctx.a = a;
		c.ctx.en_rinval = rinval;
		c.ctx.variant = 0x3c;
		c.ctx.access_mode = prm::access_mode::mtt;
		c.ctx.log_page_size = 12;
		c.ctx.start_addr = reinterpret_cast<uintptr_t>(region()) + off;
		c.ctx.len = len;
		std::vector<mlx5::MttEntry> mtt;
		for (uint64_t pg = (block.iova + off) & ~uint64_t{4095};
		     pg < block.iova + off + len; pg += 4096)
			mtt.push_back({pg, true, true});
		c.mtt = mtt;
		mlx5::MkeyHandle h;
		int rc = mlx5::MkeyHandle::create(*dev, c, &h);
		if (rc != 0)
			return rc;
		*key = nicmr::mr::make_mkey(h.index(), c.ctx.variant);
		mrs.push_back(std::move(h));
		return 0;
	}

	/* The next completion of the send CQ (or, recv, of the receive CQ) within o.wait. */
	bool wait(mlx5::Completion *c, bool recv = false)
	{
		const auto deadline = std::chrono::steady_clock::now() + o.wait;
		while (std::chrono::steady_clock::now() < deadline)
			if ((recv ? qp->poll_recv(c, 1) : qp->poll(c, 1)) == 1)
				return true;
		return false;
	}
};

/* The child: the responder. Returns the exit status (0 ok). */
inline int responder(int fd, const WireOptions &o)
{
	Side s;
	if (s.open(o) != 0)
		return 10;
	for (size_t i = 0; i < kRegion; i++)
		s.region()[i] = pattern(i);
	Info me{};
	std::memcpy(me.gid, s.gid.gid.data(), 16);
	me.region = reinterpret_cast<uintptr_t>(s.region());
	if (s.mr(0, kRegion, true, true, true, true, true, false, &me.keys[k_rw]) != 0 ||
	    s.mr(0, kRegion, true, false, true, false, false, false, &me.keys[k_ro]) != 0 ||
	    s.mr(0, kRegion, true, true, false, true, false, false, &me.keys[k_wo]) != 0 ||
	    s.mr(0, kRegion, true, true, true, true, false, false, &me.keys[k_noatomic]) != 0 ||
	    s.mr(0, kRegion, true, true, true, true, true, true, &me.keys[k_other_pd]) != 0 ||
	    s.mr(0, kSmall, true, true, true, true, true, false, &me.keys[k_small]) != 0)
		return 11;
	Info peer{};
	if (!full_write(fd, s.gid.gid.data(), 16))
		return 12;
	if (!full_read(fd, peer.gid, 16))
		return 13;
	if (s.make_qp(peer.gid) != 0)
		return 14;
	me.qpn = s.qp->qpn();
	if (!full_write(fd, &me, sizeof(me)) || !full_read(fd, &peer, sizeof(peer)))
		return 15;
	if (s.qp->connect(peer.qpn) != 0)
		return 16;
	for (;;) {
		Req r{};
		if (!full_read(fd, &r, sizeof(r)))
			return 17;
		switch (r.op) {
		case op_dump:
			if (r.off + uint64_t{r.len} > kRegion ||
			    !full_write(fd, s.region() + r.off, r.len))
				return 18;
			break;
		case op_state: {
			uint32_t st = 0;
			if (s.qp->query_state(&st) != 0 || !full_write(fd, &st, sizeof(st)))
				return 19;
			break;
		}
		case op_stats: {
			const emu::WireStats ws = s.hw->device().data_path().wire_stats();
			if (!full_write(fd, &ws, sizeof(ws)))
				return 20;
			break;
		}
		case op_recover: {
			const int32_t rc = s.qp->recover();
			if (!full_write(fd, &rc, sizeof(rc)))
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

} // namespace wire_rig

#endif
