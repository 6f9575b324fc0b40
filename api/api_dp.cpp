/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The native data path: CQs, RC QPs, RDMA WRITE / READ / atomics, over drivers/mlx5.
 *
 *   nicmr_cq ── Uar (one per CQ: its QPs ring through it) ── mlx5::Cq
 *      └─ qps[] (the QPs reporting here, by slot; the poller routes CQEs by QPN)
 *   nicmr_qp ── mlx5::Qp (pd, port, the CQ) ── slots[] (wr_id and opcode by post counter)
 *
 * The driver's wr_id of a request is the QP's post counter; nicmr_cq_poll turns it back into
 * the application's wr_id and opcode through the slot ring (a slot is reused only after the
 * send queue has room again, so only after its request completed). Posting checks the local
 * SGE with the lockless key lookup (nicmr_key_lookup) so that a bad lkey fails in the call.
 */
#include <endian.h>
#include <sys/random.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "api_internal.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

constexpr unsigned kKnownFlags = NICMR_SEND_SIGNALED | NICMR_SEND_INLINE | NICMR_SEND_FENCE;
constexpr unsigned kKnownGiven = NICMR_QP_REMOTE_ACK_TIMEOUT | NICMR_QP_REMOTE_RETRY_COUNT |
				 NICMR_QP_REMOTE_RNR_RETRY | NICMR_QP_REMOTE_MIN_RNR_TIMER |
				 NICMR_QP_REMOTE_LOCAL_PSN;
constexpr uint32_t kPsnMask = 0xffffff; /* PSNs and QPNs are 24 bits (IBTA BTH) */
static_assert(sizeof(nicmr_qp_remote) == NICMR_QP_REMOTE_SIZE_V2,
	      "a new field of nicmr_qp_remote needs its NICMR_QP_REMOTE_SIZE_V3");
/* nicmr_post_send takes two more. */
constexpr unsigned kSendFlags = kKnownFlags | NICMR_SEND_IMM | NICMR_SEND_INVALIDATE;
/* A CQE batch taken from the driver per loop of nicmr_cq_poll: on the stack. */
constexpr int kPollBatch = 16;

uint32_t log2_up(uint32_t v)
{
	return static_cast<uint32_t>(std::bit_width(v - 1));
}

uint8_t wc_status(uint8_t syndrome)
{
	switch (syndrome) {
	case 0:
		return NICMR_WC_SUCCESS;
	case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
		return NICMR_WC_LOCAL_LEN;
	case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
		return NICMR_WC_LOCAL_QP_OP;
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
		return NICMR_WC_LOCAL_PROT;
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
		return NICMR_WC_WR_FLUSH;
	case MLX5_CQE_SYNDROME_MW_BIND_ERR:
		return NICMR_WC_MW_BIND;
	case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
		return NICMR_WC_BAD_RESP;
	case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
		return NICMR_WC_LOCAL_ACCESS;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
		return NICMR_WC_REMOTE_INVAL_REQ;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
		return NICMR_WC_REMOTE_ACCESS;
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
		return NICMR_WC_REMOTE_OP;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
		return NICMR_WC_RETRY_EXC;
	case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
		return NICMR_WC_RNR_RETRY_EXC;
	case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
		return NICMR_WC_REMOTE_ABORT;
	default:
		return NICMR_WC_GENERAL;
	}
}

/* The names of nicmr_wc_syndrome_str, by enum nicmr_wc_status (wc_status maps the syndrome). */
constexpr const char *kStatusNames[] = {
	"success",
	"local length error",
	"local QP operation error",
	"local protection error (local key, PD or bounds)",
	"flushed: an earlier request of the pair failed",
	"memory window bind error",
	"bad response",
	"local access error",
	"remote invalid request (responder not ready)",
	"remote access error (key refused: stale, out of bounds or right missing)",
	"remote operation error",
	"transport retry counter exceeded",
	"RNR retry counter exceeded",
	"remote aborted",
	"unknown syndrome",
};
static_assert(std::size(kStatusNames) == NICMR_WC_GENERAL + 1);

unsigned post_flags(unsigned flags)
{
	unsigned f = 0;
	if (flags & NICMR_SEND_SIGNALED)
		f |= mlx5::kSignaled;
	if (flags & NICMR_SEND_FENCE)
		f |= mlx5::kFence;
	return f;
}

/* The checks every posting call shares. Hot path. */
int post_begin(nicmr_qp *qp, unsigned flags, unsigned known = kKnownFlags)
{
	if (qp == nullptr || (flags & ~known))
		return -EINVAL;
	if (qp->ud)
		return -ENOTSUP; /* datagrams only: nicmr_post_send_ud (api_ud.cpp) */
	if (!qp->connected)
		return -ENOTCONN;
	/* Room for one WQEBB also means the slot at the post counter is free: every request
	 * takes at least one WQEBB, so fewer than mask + 1 are in flight. */
	if (qp->qp->sq_room() == 0)
		return -ENOSPC;
	return 0;
}

/* The local SGE through the lockless lookup (nothing translated: the device does that). */
int check_local(nicmr_qp *qp, uint32_t lkey, uint64_t addr, size_t len, uint64_t access)
{
	uint64_t iova = 0;
	return nicmr_key_lookup(qp->pd->dev, lkey, addr, len, access, &iova);
}

/* Records what the request at the post counter is; the driver's wr_id is the counter. */
uint64_t note(nicmr_qp *qp, uint64_t wr_id, uint8_t opcode, uint32_t rkey)
{
	nicmr_dp_slot &s = qp->slots[qp->posted & qp->mask];
	s.wr_id = wr_id;
	s.rkey = rkey;
	s.opcode = opcode;
	return qp->posted;
}

/* The remote right a request of this kind needs (the key violation's access). */
uint64_t remote_right(uint8_t opcode)
{
	switch (opcode) {
	case NICMR_WC_RDMA_WRITE:
	case NICMR_WC_RDMA_WRITE_IMM:
	case NICMR_WC_SEND:
		return NICMR_ACCESS_REMOTE_WRITE;
	case NICMR_WC_RDMA_READ:
		return NICMR_ACCESS_REMOTE_READ;
	default:
		return NICMR_ACCESS_REMOTE_ATOMIC;
	}
}

/* Where a key's probe starts: a multiplicative hash of the key (Knuth's golden ratio), top
 * bits, so that keys of neighbouring indices spread over the table. */
uint32_t violation_home(uint32_t key)
{
	static_assert((NICMR_MAX_KEY_VIOLATIONS & (NICMR_MAX_KEY_VIOLATIONS - 1)) == 0);
	return (key * 2654435761u) >> (32 - std::countr_zero(NICMR_MAX_KEY_VIOLATIONS));
}

/* The receive completion's opcode for the driver's CQE opcode. */
uint8_t recv_opcode(uint8_t cqe_opcode)
{
	switch (cqe_opcode) {
	case MLX5_CQE_RESP_SEND_IMM:
		return NICMR_WC_RECV_IMM;
	case MLX5_CQE_RESP_SEND_INV:
		return NICMR_WC_RECV_INV;
	case MLX5_CQE_RESP_WR_IMM:
		return NICMR_WC_RECV_RDMA_WITH_IMM;
	default:
		return NICMR_WC_RECV;
	}
}

/* A free slot of cq's QP table, or -1. */
int free_slot(nicmr_cq *cq)
{
	for (uint32_t i = 0; i < NICMR_MAX_QPS_PER_CQ; i++)
		if (cq->qps[i].load(std::memory_order_relaxed) == nullptr)
			return static_cast<int>(i);
	return -1;
}

/* Publishes qp in slot of cq's QP table. */
void publish(nicmr_cq *cq, int slot, nicmr_qp *qp)
{
	/* release: the QP's fields are written before the poller can find it. */
	cq->qps[slot].store(qp, std::memory_order_release);
	/* release: the slot's pointer is stored before a poller that sees the larger bound
	 * scans up to it (it then finds the QP, not a stale null). */
	if (static_cast<uint32_t>(slot) + 1 > cq->nqps.load(std::memory_order_relaxed))
		cq->nqps.store(static_cast<uint32_t>(slot) + 1, std::memory_order_release);
}

nicmr_qp *route(nicmr_cq *cq, uint32_t qpn)
{
	/* acquire: pairs with the release that published the QP; its fields are read next. */
	const uint32_t n = cq->nqps.load(std::memory_order_acquire);
	for (uint32_t i = 0; i < n; i++) {
		nicmr_qp *qp = cq->qps[i].load(std::memory_order_acquire);
		if (qp && qp->qpn == qpn)
			return qp;
	}
	return nullptr;
}

/* A PSN to start from, drawn at random as ibv_rc_pingpong draws its own (rdma-core
 * libibverbs/examples/rc_pingpong.c, main: lrand48() & 0xffffff), so that a stale packet of
 * an earlier connection between the same QPNs is unlikely to fall into the window. */
uint32_t random_psn()
{
	uint32_t v = 0;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
		v = 0;
	return v & kPsnMask;
}

/* Path MTU in bytes to prm::qp_mtu (1: 256 ... 5: 4096), 0 for anything else. */
uint32_t mtu_code(uint32_t bytes)
{
	for (uint32_t code = mlx5::prm::qp_mtu::mtu_256; code <= mlx5::prm::qp_mtu::mtu_4096;
	     code++)
		if (bytes == (128u << code))
			return code;
	return 0;
}

bool all_zero(const uint8_t *b, size_t n)
{
	return std::all_of(b, b + n, [](uint8_t x) { return x == 0; });
}

/* An IPv4-mapped IPv6 address (RFC 4291 2.5.5.2: ::ffff:a.b.c.d), the GID of an IPv4 port. */
bool ipv4_mapped(const uint8_t *g)
{
	static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return std::memcmp(g, kPrefix, sizeof(kPrefix)) == 0;
}

/* Entry index of port's GID table: 0; -EINVAL (port or index out of range); -EADDRNOTAVAIL
 * (empty); the device's errors. */
int port_gid(nicmr_device *dev, uint32_t port, uint32_t index, uint8_t *gid)
{
	/* A port above the device's own (a one-port emu) is the device's BAD_PARAM: -EINVAL. */
	if (port < 1 || port > 2 || index >= dev->drv->caps().roce_address_table_size)
		return -EINVAL;
	mlx5::RoceAddress a;
	int rc = dev->drv->query_roce_address(port, index, &a);
	if (rc != 0) {
		NICMR_LOG(warn, "api", "%s: GID %u of port %u: %d", dev->spec.c_str(), index, port,
			  rc);
		return rc;
	}
	if (all_zero(a.gid.data(), a.gid.size()))
		return -EADDRNOTAVAIL;
	std::memcpy(gid, a.gid.data(), a.gid.size());
	return 0;
}

/* nicmr_cq_poll's work: up to n completions of cq into wc, and their datagram side into ud
 * when not null (hot path: nicmr_cq_poll's rules). */
int poll_cq(nicmr_cq *cq, nicmr_wc *wc, nicmr_ud_info *ud, int n)
{
	int done = 0;
	mlx5::Completion c[kPollBatch];
	while (done < n) {
		const int want = n - done < kPollBatch ? n - done : kPollBatch;
		const int got = cq->cq->poll(c, want);
		for (int i = 0; i < got; i++) {
			nicmr_qp *qp = route(cq, c[i].qpn);
			if (qp == nullptr)
				continue;  /* a QP destroyed with requests in flight */
			if (ud != nullptr) /* the datagram side (api_ud.cpp) */
				ud[done] = nicmr::api::ud_info(c[i]);
			nicmr_wc &w = wc[done++];
			const bool ok = c[i].ok();
			if (c[i].recv()) {
				/* A receive: its wr_id by the receive counter, or by the SRQ WQE's
				 * index, which goes back on the SRQ's free list. */
				if (qp->srq != nullptr) {
					w.wr_id = qp->srq->srq->retire(c[i].wqe_index);
				} else {
					const uint64_t counter =
						qp->qp->retire_recv(c[i].wqe_index);
					w.wr_id = qp->rslots[counter & qp->rmask];
				}
				w.qp_num = qp->qpn;
				w.opcode = recv_opcode(c[i].opcode);
				w.syndrome = ok ? 0 : c[i].syndrome;
				w.vendor_syndrome = ok ? 0 : c[i].vendor_syndrome;
				w.status = ok		   ? uint8_t{NICMR_WC_SUCCESS}
					   : c[i].syndrome ? wc_status(c[i].syndrome)
							   : uint8_t{NICMR_WC_GENERAL};
				w.byte_len = ok ? c[i].byte_len : 0;
				w.imm = ok && w.opcode != NICMR_WC_RECV ? c[i].imm : 0;
				continue;
			}
			const uint64_t counter = qp->qp->retire(c[i].wqe_index);
			const nicmr_dp_slot &s = qp->slots[counter & qp->mask];
			w.wr_id = s.wr_id;
			w.qp_num = qp->qpn;
			w.opcode = s.opcode;
			w.imm = 0;
			w.syndrome = ok ? 0 : c[i].syndrome;
			w.vendor_syndrome = ok ? 0 : c[i].vendor_syndrome;
			/* An error CQE always carries a syndrome; one without is GENERAL. */
			w.status = ok		   ? uint8_t{NICMR_WC_SUCCESS}
				   : c[i].syndrome ? wc_status(c[i].syndrome)
						   : uint8_t{NICMR_WC_GENERAL};
			w.byte_len = ok ? c[i].byte_len : 0;
			/* The requester's view of a refused key (nicmr.h, "Key violations"). */
			if (!ok && c[i].syndrome == MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR)
				[[unlikely]]
				cq->dev->violations->record(s.rkey, remote_right(s.opcode), qp->qpn,
							    qp->remote_port, qp->remote_qpn);
		}
		if (got < want)
			break;
	}
	return done;
}

} // namespace

extern "C" {

int nicmr_cq_create(struct nicmr_device *dev, uint32_t depth, struct nicmr_cq **out)
{
	if (dev == nullptr || out == nullptr || depth < 2 || depth > NICMR_MAX_CQ_DEPTH)
		return -EINVAL;
	std::unique_ptr<nicmr_cq> cq(new (std::nothrow) nicmr_cq);
	if (!cq)
		return -ENOMEM;
	cq->dev = dev;
	int rc = mlx5::Uar::alloc(*dev->drv, &cq->uar);
	/* The device's EXCEED_LIM (-ENOMEM from the command layer) means no UAR is left: a
	 * resource limit of the device, not host memory. */
	if (rc == -ENOMEM && !cq->uar)
		rc = -ENOSPC;
	if (rc == 0) {
		mlx5::CqParams p;
		p.log_size = log2_up(depth);
		/* p.eqn unset: the device's completion EQ (EQ 0 does not exist on a ConnectX). */
		rc = mlx5::Cq::create(*dev->drv, *cq->uar, p, &cq->cq);
	}
	if (rc != 0) {
		NICMR_LOG(warn, "api", "%s: CQ of depth %u: %d", dev->spec.c_str(), depth, rc);
		cq->cq.reset();
		cq->uar.reset();
		return rc;
	}
	{
		std::lock_guard lk(dev->cq_ev_mu);
		dev->cqs_by_num[cq->cq->cqn()] = cq.get();
	}
	/* relaxed: a count for close's -EBUSY; the CQ reaches other threads through the caller. */
	dev->dp_objs.fetch_add(1, std::memory_order_relaxed);
	*out = cq.release();
	return 0;
}

int nicmr_cq_destroy(struct nicmr_cq *cq)
{
	if (cq == nullptr)
		return -EINVAL;
	/* acquire: a QP destroy that gave its slot back is done with the CQ. */
	if (cq->nqps.load(std::memory_order_acquire) != 0) {
		for (auto &q : cq->qps)
			if (q.load(std::memory_order_acquire) != nullptr)
				return -EBUSY;
	}
	nicmr_device *dev = cq->dev;
	{
		std::lock_guard lk(dev->cq_ev_mu);
		if (cq->unacked != 0)
			return -EBUSY;
		dev->cqs_by_num.erase(cq->cq->cqn());
	}
	cq->cq.reset();
	cq->uar.reset();
	delete cq;
	/* release: the CQ is gone before a device close may see the count drop. */
	dev->dp_objs.fetch_sub(1, std::memory_order_release);
	return 0;
}

uint32_t nicmr_cq_num(const struct nicmr_cq *cq)
{
	return cq ? cq->cq->cqn() : 0;
}

const char *nicmr_wc_syndrome_str(uint8_t syndrome)
{
	return kStatusNames[wc_status(syndrome)];
}

int nicmr_cq_poll(struct nicmr_cq *cq, struct nicmr_wc *wc, int n)
{
	return nicmr::api::cq_poll(cq, wc, nullptr, n);
}

int nicmr_cq_poll_ud(struct nicmr_cq *cq, struct nicmr_wc *wc, struct nicmr_ud_info *ud, int n)
{
	if (ud == nullptr && n > 0)
		return -EINVAL;
	return nicmr::api::cq_poll(cq, wc, ud, n);
}

} /* extern "C" */

int nicmr::api::cq_poll(nicmr_cq *cq, nicmr_wc *wc, nicmr_ud_info *ud, int n)
{
	/* HOT PATH: no lock, no allocation, no system call. The driver's CQEs land in a batch on
	 * the stack and are routed to their QP by a scan of at most NICMR_MAX_QPS_PER_CQ entries.
	 * Two exceptions, both when the CQ is drained: the device's progress work on this thread
	 * (bus::PciFunction::progress: nothing on hardware; on the emulated device's wire, its
	 * socket I/O, the wire itself), and, out of line, the fault service when a page fault
	 * waits (nicmr_odp_serve_from_poll), which locks and makes system calls.
	 */
	if (cq == nullptr || n < 0 || (wc == nullptr && n > 0))
		return -EINVAL;
	int done = poll_cq(cq, wc, ud, n);
	/* Drained: run to completion (doc/native-api.md, "Progress"): the emulated wire's
	 * packets are received and answered here, and the CQEs they made are taken at once. */
	if (done < n && cq->dev->fn->progress())
		done += poll_cq(cq, wc + done, ud != nullptr ? ud + done : nullptr, n - done);
	/* The CQ is drained: a WQE may wait for a page fault (doc/odp.md). One relaxed and one
	 * acquire load when none waits; serving it is the slow path, out of line. */
	if (done < n && cq->dev->drv->page_fault_pending()) [[unlikely]]
		nicmr_odp_serve_from_poll(cq->dev);
	return done;
}

extern "C" {

int nicmr_qp_create(struct nicmr_pd *pd, uint32_t port, struct nicmr_cq *send_cq, uint32_t depth,
		    struct nicmr_qp **out)
{
	nicmr_qp_attr a{};
	a.port = port;
	a.send_cq = send_cq;
	a.depth = depth;
	return nicmr_qp_create_attr(pd, &a, out);
}

int nicmr_qp_create_attr(struct nicmr_pd *pd, const struct nicmr_qp_attr *attr,
			 struct nicmr_qp **out)
{
	return nicmr::api::qp_create(pd, attr, nullptr, out);
}

} /* extern "C" */

int nicmr::api::qp_create(nicmr_pd *pd, const nicmr_qp_attr *attr, const UdQpParams *ud,
			  nicmr_qp **out)
{
	if (pd == nullptr || attr == nullptr || out == nullptr)
		return -EINVAL;
	nicmr_cq *send_cq = attr->send_cq;
	const uint32_t port = attr->port, depth = attr->depth, rdepth = attr->recv_depth;
	nicmr_cq *recv_cq = attr->recv_cq != nullptr ? attr->recv_cq : send_cq;
	if (send_cq == nullptr || send_cq->dev != pd->dev || recv_cq->dev != pd->dev || port < 1 ||
	    port > 2 || depth < 2 || depth > NICMR_MAX_QP_DEPTH ||
	    (uint32_t{1} << log2_up(depth)) > send_cq->cq->size())
		return -EINVAL;
	/* An SRQ of the same PD, instead of the QP's own receive queue; recv_cq holds its
	 * completions as it would an RQ's. */
	nicmr_srq *srq = attr->srq;
	if (srq != nullptr &&
	    (srq->pd != pd || rdepth != 0 || attr->max_recv_sge != 0 ||
	     srq->srq->capacity() + 1 + (recv_cq == send_cq ? uint32_t{1} << log2_up(depth) : 0) >
		     recv_cq->cq->size()))
		return -EINVAL;
	const bool receives = rdepth != 0 || srq != nullptr;
	if (rdepth != 0 &&
	    (rdepth < 2 || rdepth > NICMR_MAX_QP_DEPTH || attr->max_recv_sge < 1 ||
	     attr->max_recv_sge > NICMR_MAX_RECV_SGE ||
	     (uint32_t{1} << log2_up(rdepth)) +
			     (recv_cq == send_cq ? uint32_t{1} << log2_up(depth) : 0) >
		     recv_cq->cq->size()))
		return -EINVAL;
	nicmr_device *dev = pd->dev;
	const int slot = free_slot(send_cq);
	if (slot < 0)
		return -ENOSPC;
	int rslot = -1;
	if (receives && recv_cq != send_cq && (rslot = free_slot(recv_cq)) < 0)
		return -ENOSPC;
	std::unique_ptr<nicmr_qp> qp(new (std::nothrow) nicmr_qp);
	if (!qp)
		return -ENOMEM;
	const uint32_t log = log2_up(depth);
	const uint32_t rlog = rdepth != 0 ? log2_up(rdepth) : 0;
	try {
		qp->slots.assign(size_t{1} << log, nicmr_dp_slot{});
		if (rdepth != 0)
			qp->rslots.assign(size_t{1} << rlog, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	qp->mask = (uint32_t{1} << log) - 1;
	qp->rmask = rdepth != 0 ? (uint32_t{1} << rlog) - 1 : 0;
	qp->pd = pd;
	qp->cq = send_cq;
	qp->rcq = receives ? recv_cq : nullptr;
	qp->srq = srq;
	qp->port = port;
	mlx5::QpParams p;
	p.pd = pd->handle.pd();
	p.port = port;
	p.log_sq_size = log;
	/* The keys decide what a peer may do; the QP allows every kind of request. A UD QP
	 * takes datagrams only (api_ud.cpp). */
	p.rre = p.rwe = p.rae = ud == nullptr;
	if (ud != nullptr) {
		p.ud = true;
		p.gsi = ud->gsi;
		p.q_key = ud->q_key;
		p.mtu = ud->mtu;
		qp->ud = true;
		qp->gsi = ud->gsi;
	}
	if (rdepth != 0) {
		p.max_recv_sge = attr->max_recv_sge;
		p.log_rq_size = rlog;
		p.recv_cq = recv_cq->cq.get();
	}
	if (srq != nullptr) {
		p.srq = srq->srq.get();
		p.recv_cq = recv_cq->cq.get();
	}
	int rc = mlx5::Qp::create(*dev->drv, *send_cq->uar, *send_cq->cq, p, &qp->qp);
	if (rc != 0) {
		NICMR_LOG(warn, "api", "%s: QP on port %u: %d", dev->spec.c_str(), port, rc);
		return rc;
	}
	/* The driver may round the receive queue up (one WQEBB at least): the wr_id ring
	 * follows it. */
	if (rdepth != 0 && qp->qp->rq_size() > qp->rslots.size()) {
		try {
			qp->rslots.assign(qp->qp->rq_size(), 0);
		} catch (const std::bad_alloc &) {
			return -ENOMEM;
		}
		qp->rmask = qp->qp->rq_size() - 1;
	}
	qp->qpn = qp->qp->qpn();
	qp->local_psn = random_psn();
	try {
		std::lock_guard lk(dev->dp_mu);
		dev->dp_qps.emplace(qp->qpn, qp.get());
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	publish(send_cq, slot, qp.get());
	if (rslot >= 0)
		publish(recv_cq, rslot, qp.get());
	/* The PD's user count keeps nicmr_pd_free from freeing the PD under the QP (relaxed:
	 * a count, as for MRs). */
	pd->users.fetch_add(1, std::memory_order_relaxed);
	if (srq != nullptr)
		srq->users.fetch_add(1, std::memory_order_relaxed); /* a count, as the PD's */
	dev->dp_objs.fetch_add(1, std::memory_order_relaxed);
	*out = qp.release();
	return 0;
}

extern "C" {

int nicmr_qp_destroy(struct nicmr_qp *qp)
{
	if (qp == nullptr)
		return -EINVAL;
	nicmr_device *dev = qp->pd->dev;
	{
		std::lock_guard lk(dev->dp_mu);
		dev->dp_qps.erase(qp->qpn);
	}
	for (nicmr_cq *cq : {qp->cq, qp->rcq}) {
		if (cq == nullptr)
			continue;
		for (auto &q : cq->qps)
			if (q.load(std::memory_order_relaxed) == qp)
				/* release: ordered after the QP's last use by this thread; the
				 * CQ's destroy (acquire) sees the slot free only after. */
				q.store(nullptr, std::memory_order_release);
	}
	qp->qp.reset();
	if (qp->gsi) { /* after DESTROY_QP: the port's next GSI QP finds the device's free */
		std::lock_guard lk(dev->dp_mu);
		dev->gsi_taken[qp->port - 1] = false;
	}
	/* release: the QP is gone before pd_free or device close may see the counts drop. */
	qp->pd->users.fetch_sub(1, std::memory_order_release);
	if (qp->srq != nullptr) /* release: as the PD's, for nicmr_srq_destroy */
		qp->srq->users.fetch_sub(1, std::memory_order_release);
	delete qp;
	dev->dp_objs.fetch_sub(1, std::memory_order_release);
	return 0;
}

uint32_t nicmr_qp_num(const struct nicmr_qp *qp)
{
	return qp ? qp->qpn : 0;
}

uint32_t nicmr_qp_port(const struct nicmr_qp *qp)
{
	return qp ? qp->port : 0;
}

int nicmr_qp_connect(struct nicmr_qp *qp, uint32_t remote_port, uint32_t remote_qpn)
{
	if (qp == nullptr)
		return -EINVAL;
	nicmr_device *dev = qp->pd->dev;
	{
		std::lock_guard lk(dev->dp_mu);
		auto it = dev->dp_qps.find(remote_qpn);
		if (it == dev->dp_qps.end())
			return -ENOENT;
		if (it->second->port != remote_port)
			return -EINVAL;
	}
	int rc = qp->qp->connect(remote_qpn);
	if (rc != 0) {
		NICMR_LOG(warn, "api", "%s: QP 0x%x connect to 0x%x: %d", dev->spec.c_str(),
			  qp->qpn, remote_qpn, rc);
		return rc;
	}
	qp->remote_port = remote_port;
	qp->remote_qpn = remote_qpn;
	qp->connected = true;
	return 0;
}

int nicmr_port_gid(struct nicmr_device *dev, uint32_t port, uint32_t index, uint8_t gid[16])
{
	if (dev == nullptr || gid == nullptr)
		return -EINVAL;
	return port_gid(dev, port, index, gid);
}

int nicmr_port_mtu(struct nicmr_device *dev, uint32_t port, uint32_t *mtu)
{
	/* A port above the device's own (a one-port emu) is the device's BAD_PARAM: -EINVAL. */
	if (dev == nullptr || mtu == nullptr || port < 1 || port > 2)
		return -EINVAL;
	mlx5::PortMtu m;
	const int rc = dev->drv->query_pmtu(port, &m);
	if (rc != 0)
		return rc;
	/* Linux's iboe_get_mtu (include/rdma/ib_addr.h) on the netdev MTU: 96 bytes of headers
	 * (GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4) off first. */
	const uint32_t netdev = m.oper > mlx5::prm::reg_pmtu::l2_overhead
					? m.oper - mlx5::prm::reg_pmtu::l2_overhead
					: 0;
	const uint32_t room = netdev > 96 ? netdev - 96 : 0;
	uint32_t active = 256;
	for (uint32_t v : {4096u, 2048u, 1024u, 512u})
		if (room >= v) {
			active = v;
			break;
		}
	*mtu = active;
	return 0;
}

int nicmr_qp_local(struct nicmr_qp *qp, uint32_t gid_index, struct nicmr_qp_addr *out)
{
	if (qp == nullptr || out == nullptr)
		return -EINVAL;
	nicmr_qp_addr a{};
	int rc = port_gid(qp->pd->dev, qp->port, gid_index, a.gid);
	if (rc != 0)
		return rc;
	a.qpn = qp->gsi ? NICMR_GSI_QPN : qp->qpn; /* a GSI QP is QP 1 to its peers */
	a.psn = qp->local_psn;
	*out = a;
	return 0;
}

int nicmr_qp_connect_remote(struct nicmr_qp *qp, const struct nicmr_qp_remote *r)
{
	if (qp == nullptr || r == nullptr || r->size < NICMR_QP_REMOTE_SIZE_V1)
		return -EINVAL;
	/* A caller built against a newer header: its fields beyond ours must be unset (as
	 * Linux's copy_struct_from_user, include/linux/uaccess.h, refuses unknown non-zero
	 * bytes with -E2BIG). */
	if (r->size > sizeof(nicmr_qp_remote) &&
	    !all_zero(reinterpret_cast<const uint8_t *>(r) + sizeof(nicmr_qp_remote),
		      r->size - sizeof(nicmr_qp_remote)))
		return -E2BIG;
	const unsigned given = r->given;
	/* A field is taken when it is non-zero or its bit says 0 is meant; else the default
	 * of mlx5::QpParams (rdma-core's and DPDK's loopback values). */
	const mlx5::QpParams defaults;
	auto pick = [given](uint32_t v, unsigned bit, uint32_t def) {
		return v != 0 || (given & bit) ? v : def;
	};
	mlx5::QpParams p;
	p.mtu = r->mtu == 0 ? defaults.mtu : mtu_code(r->mtu);
	p.force_loopback = false;
	p.gid_index = r->gid_index;
	std::memcpy(p.remote_gid.data(), r->gid, sizeof(r->gid));
	p.rq_psn = r->psn;
	p.sq_psn = (given & NICMR_QP_REMOTE_LOCAL_PSN) ? r->local_psn : qp->local_psn;
	p.ack_timeout = pick(r->ack_timeout, NICMR_QP_REMOTE_ACK_TIMEOUT, defaults.ack_timeout);
	p.retry_count = pick(r->retry_count, NICMR_QP_REMOTE_RETRY_COUNT, defaults.retry_count);
	p.rnr_retry = pick(r->rnr_retry, NICMR_QP_REMOTE_RNR_RETRY, defaults.rnr_retry);
	p.min_rnr_timer =
		pick(r->min_rnr_timer, NICMR_QP_REMOTE_MIN_RNR_TIMER, defaults.min_rnr_timer);
	/* A first-layout caller's struct ends before it: not read. */
	p.log_ack_req_freq = r->size >= NICMR_QP_REMOTE_SIZE_V2 ? r->log_ack_req_freq
								: defaults.log_ack_req_freq;
	if (p.mtu == 0 || all_zero(r->gid, sizeof(r->gid)) || (r->qpn & ~kPsnMask) ||
	    (p.rq_psn & ~kPsnMask) || (p.sq_psn & ~kPsnMask) || p.ack_timeout > 31 ||
	    p.min_rnr_timer > 31 || p.retry_count > 7 || p.rnr_retry > 7 ||
	    p.log_ack_req_freq > 15 || (given & ~kKnownGiven))
		return -EINVAL;
	if (qp->connected)
		return -EISCONN;
	nicmr_device *dev = qp->pd->dev;
	uint8_t local[16];
	int rc = port_gid(dev, qp->port, r->gid_index, local);
	if (rc != 0)
		return rc;
	/* RoCEv2 carries IPv4 or IPv6 packets, never one to the other (the device model's
	 * WirePort::reaches, a ConnectX's route lookup). */
	if (ipv4_mapped(local) != ipv4_mapped(r->gid))
		return -EINVAL;
	rc = qp->qp->set_connection(p);
	if (rc == 0)
		rc = qp->qp->connect(r->qpn);
	if (rc != 0) {
		NICMR_LOG(warn, "api", "%s: QP 0x%x connect to remote QP 0x%x: %d",
			  dev->spec.c_str(), qp->qpn, r->qpn, rc);
		/* Back to RESET with the loopback path it was created with, so that the call
		 * can be made again (nicmr_qp_connect too). */
		(void)qp->qp->to_reset();
		(void)qp->qp->set_connection(mlx5::QpParams{});
		return rc;
	}
	qp->local_psn = p.sq_psn;
	/* The key violations' peer of a remote connection is its QPN; no port of this device. */
	qp->remote_port = 0;
	qp->remote_qpn = r->qpn;
	qp->connected = true;
	return 0;
}

int nicmr_qp_state(struct nicmr_qp *qp, uint32_t *state)
{
	if (qp == nullptr || state == nullptr)
		return -EINVAL;
	return qp->qp->query_state(state);
}

int nicmr_qp_recover(struct nicmr_qp *qp)
{
	if (qp == nullptr || !qp->connected)
		return -EINVAL;
	if (qp->qp->sq_room() != qp->qp->sq_size() ||
	    (qp->rcq != nullptr && qp->qp->rq_room() != qp->qp->rq_size()))
		return -EBUSY;
	return qp->qp->recover();
}

int nicmr_post_write(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey, uint64_t raddr,
		     uint32_t rkey, uint64_t wr_id, unsigned flags)
{
	/* HOT PATH: no lock, no allocation, no system call. */
	int rc = post_begin(qp, flags);
	if (rc != 0)
		return rc;
	if (len == 0 || len > (size_t{1} << 31))
		return -EINVAL;
	const uint64_t counter = qp->posted;
	if (flags & NICMR_SEND_INLINE) {
		if (len > NICMR_MAX_INLINE)
			return -EINVAL;
		note(qp, wr_id, NICMR_WC_RDMA_WRITE, rkey);
		rc = qp->qp->post_write_inline(reinterpret_cast<const void *>(laddr),
					       static_cast<uint32_t>(len), raddr, rkey, counter,
					       post_flags(flags));
	} else {
		rc = check_local(qp, lkey, laddr, len, NICMR_ACCESS_WRITE);
		if (rc != 0)
			return rc;
		note(qp, wr_id, NICMR_WC_RDMA_WRITE, rkey);
		const mlx5::Sge s{laddr, static_cast<uint32_t>(len), lkey};
		rc = qp->qp->post_write({&s, 1}, raddr, rkey, counter, post_flags(flags));
	}
	if (rc == 0)
		qp->posted++;
	return rc;
}

int nicmr_post_read(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey, uint64_t raddr,
		    uint32_t rkey, uint64_t wr_id, unsigned flags)
{
	/* HOT PATH: no lock, no allocation, no system call. */
	int rc = post_begin(qp, flags);
	if (rc != 0)
		return rc;
	if (len == 0 || len > (size_t{1} << 31) || (flags & NICMR_SEND_INLINE))
		return -EINVAL;
	rc = check_local(qp, lkey, laddr, len, NICMR_ACCESS_READ);
	if (rc != 0)
		return rc;
	const uint64_t counter = note(qp, wr_id, NICMR_WC_RDMA_READ, rkey);
	const mlx5::Sge s{laddr, static_cast<uint32_t>(len), lkey};
	rc = qp->qp->post_read({&s, 1}, raddr, rkey, counter, post_flags(flags));
	if (rc == 0)
		qp->posted++;
	return rc;
}

namespace {

int post_atomic(nicmr_qp *qp, bool cswap, uint64_t result, uint32_t lkey, uint64_t raddr,
		uint32_t rkey, uint64_t a, uint64_t b, uint64_t wr_id, unsigned flags)
{
	/* HOT PATH: no lock, no allocation, no system call. */
	int rc = post_begin(qp, flags);
	if (rc != 0)
		return rc;
	if ((flags & NICMR_SEND_INLINE) || (raddr & 7) || (result & 7))
		return -EINVAL;
	const mlx5::Caps &caps = qp->pd->dev->drv->caps();
	const uint32_t op =
		cswap ? mlx5::prm::atomic_ops::cmp_swap : mlx5::prm::atomic_ops::fetch_add;
	/* Host-order semantics or nothing: on big-endian words a fetch-and-add's carries run
	 * the other way, which no conversion of operands undoes (nicmr.h, nicmr_atomic_mode). */
	if (api::atomic_mode(caps) != NICMR_ATOMIC_HOST || !(caps.atomic_operations & op))
		return -EOPNOTSUPP;
	rc = check_local(qp, lkey, result, 8, NICMR_ACCESS_READ);
	if (rc != 0)
		return rc;
	const uint64_t counter =
		note(qp, wr_id, cswap ? NICMR_WC_COMP_SWAP : NICMR_WC_FETCH_ADD, rkey);
	const mlx5::Sge s{result, 8, lkey};
	rc = cswap ? qp->qp->post_atomic_cs(s, raddr, rkey, a, b, counter, post_flags(flags))
		   : qp->qp->post_atomic_fa(s, raddr, rkey, a, counter, post_flags(flags));
	if (rc == 0)
		qp->posted++;
	return rc;
}

} // namespace

int nicmr_post_atomic_fadd(struct nicmr_qp *qp, uint64_t result, uint32_t lkey, uint64_t raddr,
			   uint32_t rkey, uint64_t add, uint64_t wr_id, unsigned flags)
{
	return post_atomic(qp, false, result, lkey, raddr, rkey, add, 0, wr_id, flags);
}

int nicmr_post_atomic_cswap(struct nicmr_qp *qp, uint64_t result, uint32_t lkey, uint64_t raddr,
			    uint32_t rkey, uint64_t compare, uint64_t swap, uint64_t wr_id,
			    unsigned flags)
{
	return post_atomic(qp, true, result, lkey, raddr, rkey, compare, swap, wr_id, flags);
}

int nicmr_post_recv(struct nicmr_qp *qp, const struct nicmr_sge *sgl, uint32_t n, uint64_t wr_id)
{
	/* HOT PATH: no lock, no allocation, no system call. */
	if (qp == nullptr || (sgl == nullptr && n > 0))
		return -EINVAL;
	if (qp->rcq == nullptr || qp->srq != nullptr) /* none, or a shared one (its own call) */
		return -ENOTSUP;
	if (n > qp->qp->max_recv_sge())
		return -EINVAL;
	if (qp->qp->rq_room() == 0)
		return -ENOSPC;
	mlx5::Sge s[NICMR_MAX_RECV_SGE];
	for (uint32_t i = 0; i < n; i++) {
		if (sgl[i].length != 0) {
			const int rc = check_local(qp, sgl[i].lkey, sgl[i].addr, sgl[i].length,
						   NICMR_ACCESS_RECV);
			if (rc != 0)
				return rc;
		}
		s[i] = {sgl[i].addr, sgl[i].length, sgl[i].lkey};
	}
	qp->rslots[qp->rposted & qp->rmask] = wr_id;
	const int rc = qp->qp->post_recv({s, n}, qp->rposted);
	if (rc == 0)
		qp->rposted++;
	return rc;
}

int nicmr_post_send(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey,
		    uint32_t imm_or_rkey, uint64_t wr_id, unsigned flags)
{
	/* HOT PATH: no lock, no allocation, no system call. */
	int rc = post_begin(qp, flags, kSendFlags);
	if (rc != 0)
		return rc;
	const bool imm = (flags & NICMR_SEND_IMM) != 0, inv = (flags & NICMR_SEND_INVALIDATE) != 0;
	if (len > (size_t{1} << 31) || (imm && inv) ||
	    ((flags & NICMR_SEND_INLINE) && (imm || inv || len > NICMR_MAX_INLINE)))
		return -EINVAL;
	const uint64_t counter = qp->posted;
	const unsigned f = post_flags(flags);
	if (flags & NICMR_SEND_INLINE) {
		note(qp, wr_id, NICMR_WC_SEND, 0);
		rc = qp->qp->post_send_inline(reinterpret_cast<const void *>(laddr),
					      static_cast<uint32_t>(len), counter, f);
	} else {
		if (len != 0 && (rc = check_local(qp, lkey, laddr, len, NICMR_ACCESS_SEND)) != 0)
			return rc;
		note(qp, wr_id, NICMR_WC_SEND, 0);
		const mlx5::Sge s{laddr, static_cast<uint32_t>(len), lkey};
		const std::span<const mlx5::Sge> sgl{&s, len != 0 ? 1u : 0u};
		rc = imm   ? qp->qp->post_send_imm(sgl, imm_or_rkey, counter, f)
		     : inv ? qp->qp->post_send_inval(sgl, imm_or_rkey, counter, f)
			   : qp->qp->post_send(sgl, counter, f);
	}
	if (rc == 0)
		qp->posted++;
	return rc;
}

int nicmr_post_write_imm(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey,
			 uint64_t raddr, uint32_t rkey, uint32_t imm, uint64_t wr_id,
			 unsigned flags)
{
	/* HOT PATH: no lock, no allocation, no system call. */
	int rc = post_begin(qp, flags);
	if (rc != 0)
		return rc;
	if (len > (size_t{1} << 31) || (flags & NICMR_SEND_INLINE))
		return -EINVAL;
	if (len != 0 && (rc = check_local(qp, lkey, laddr, len, NICMR_ACCESS_WRITE)) != 0)
		return rc;
	const uint64_t counter = qp->posted;
	note(qp, wr_id, NICMR_WC_RDMA_WRITE_IMM, rkey);
	const mlx5::Sge s{laddr, static_cast<uint32_t>(len), lkey};
	rc = qp->qp->post_write_imm({&s, len != 0 ? 1u : 0u}, raddr, rkey, imm, counter,
				    post_flags(flags));
	if (rc == 0)
		qp->posted++;
	return rc;
}

int nicmr_key_violations(const struct nicmr_device *dev, struct nicmr_key_violation *out,
			 uint32_t n, uint64_t *dropped)
{
	if (dev == nullptr || (out == nullptr && n > 0))
		return -EINVAL;
	int found = 0;
	for (const api::KeyViolation &e : dev->violations->e) {
		/* acquire: pairs with the claim; count (acquire) pairs with the recorder's
		 * release increment, after which that refusal's rights and peer are visible. */
		const uint64_t tag = e.tag.load(std::memory_order_acquire);
		const uint64_t count = tag ? e.count.load(std::memory_order_acquire) : 0;
		if (count == 0)
			continue; /* free, or claimed by a refusal not yet counted */
		if (static_cast<uint32_t>(found) < n) {
			nicmr_key_violation &v = out[found];
			v.key = static_cast<uint32_t>(tag);
			v.count = count;
			v.access = e.access.load(std::memory_order_relaxed);
			const uint64_t peer = e.peer.load(std::memory_order_relaxed);
			v.peer_port = static_cast<uint32_t>(peer >> 32);
			v.peer_qpn = static_cast<uint32_t>(peer);
			v.local_qpn = e.local_qpn.load(std::memory_order_relaxed);
		}
		found++;
	}
	if (dropped != nullptr)
		*dropped = dev->violations->dropped.load(std::memory_order_relaxed);
	return found;
}

} /* extern "C" */

void nicmr::api::KeyViolations::record(uint32_t key, uint64_t access, uint32_t local_qpn,
				       uint32_t peer_port, uint32_t peer_qpn) noexcept
{
	/* Error path of the poll loop: no lock, no allocation, bounded probing. */
	const uint64_t want = KeyViolation::kTagUsed | key;
	uint32_t i = violation_home(key);
	for (uint32_t probes = 0; probes < NICMR_MAX_KEY_VIOLATIONS; probes++) {
		KeyViolation &v = e[i];
		uint64_t tag = v.tag.load(std::memory_order_acquire);
		/* acq_rel: the claim is one of every recorder's; the loser reads the winner's
		 * key in tag and joins it when it is its own. */
		if (tag == 0 && v.tag.compare_exchange_strong(tag, want, std::memory_order_acq_rel))
			tag = want;
		if (tag == want) {
			v.access.fetch_or(access, std::memory_order_relaxed);
			v.peer.store(uint64_t{peer_port} << 32 | peer_qpn,
				     std::memory_order_relaxed);
			v.local_qpn.store(local_qpn, std::memory_order_relaxed);
			/* release: the rights and the peer above are visible to a reader that
			 * sees this count (nicmr_key_violations' acquire). */
			v.count.fetch_add(1, std::memory_order_release);
			return;
		}
		i = (i + 1) & (NICMR_MAX_KEY_VIOLATIONS - 1);
	}
	dropped.fetch_add(1, std::memory_order_relaxed);
}
