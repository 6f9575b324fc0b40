/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Messages and tagged messages of the RDM endpoints (fi_msg(3), fi_tagged(3)) over the
 * endpoint's RC QPs, with an eager and a rendezvous protocol (doc/libfabric.md, "Messages").
 *
 *   sender                                         receiver (its SRQ: kMsgSrqDepth buffers)
 *   EAGER  (len <= kMsgBounce): SEND hdr + payload  ──>  a buffer of the SRQ; matched, copied
 *   RTS    (longer): SEND hdr + {addr, rkey, id}    ──>  matched: RDMA READ addr/rkey into the
 *                                                        receive buffer (its key), then
 *          fi_send completes on the FIN          <──    SEND hdr FIN {id}; fi_recv completes
 *                                                        on the READ's completion
 *
 * This is the eager / rendezvous scheme of libfabric's prov/rxm (rxm_ep.c: messages up to
 * rxm_eager_limit copied into bounce buffers, longer ones as a rendezvous request whose
 * receiver reads the data with RMA and answers with an ack) and of UCX's "rndv get" protocol;
 * the header, the limits and the code are nicmr's own. The rendezvous makes the registration
 * engine do the work: the sender's buffer is exposed through its descriptor's key when that
 * key grants remote read, else through the domain's registration cache (local_cache_get),
 * and the receiver's READ lands through its descriptor's key or the cache's.
 *
 * Every call runs under the endpoint's lock (fi_ep.cpp); posting and the completion path take
 * no other lock than the CQ's and the registration cache's (a rendezvous without a suitable
 * descriptor), allocate nothing (every queue is made at msg_open) and make no system call,
 * except a rendezvous registration's cache miss (a slow-path registration).
 */
#include "fi_msg.h"

#include <endian.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include <rdma/providers/fi_log.h>

#include "fi_match.h"

namespace nicmr::fabric {

namespace {

/* ---- The protocol header: 32 bytes at the start of every SEND, fixed-width little-endian */
constexpr uint8_t kVersion = 1;
enum : uint8_t { kOpEager = 1, kOpRts = 2, kOpFin = 3, kOpNop = 4 };
enum : uint8_t { kHdrTagged = 1, kHdrData = 2 };

struct Hdr {
	uint8_t version; /* kVersion */
	uint8_t op;	 /* kOpEager, kOpRts, kOpFin */
	uint8_t flags;	 /* kHdrTagged, kHdrData */
	uint8_t rsvd;	 /* 0 */
	uint32_t id;	 /* RTS, FIN: the sender's request */
	uint64_t tag;	 /* tagged: the tag */
	uint64_t data;	 /* kHdrData: the remote CQ data */
	uint64_t len;	 /* EAGER: the payload's length; RTS: the message's */
};
/* What follows an RTS's header. */
struct Rts {
	uint64_t addr;	 /* the sender's buffer in its key's space */
	uint32_t rkey;	 /* its key (remote read) */
	uint32_t port;	 /* the sender's address (struct EpAddr): where the FIN goes */
	uint64_t device; /* and from where the READ reads */
	uint32_t qpn;
	uint32_t rsvd;
};
static_assert(sizeof(Hdr) == 32 && sizeof(Rts) == 32);
constexpr size_t kHdrLen = sizeof(Hdr);
constexpr size_t kRtsLen = kHdrLen + sizeof(Rts);
static_assert(kRtsLen <= kMsgHdrRoom && kRtsLen <= NICMR_MAX_INLINE);
constexpr size_t kSlot = kMsgHdrRoom + kMsgBounce; /* one buffer of the slabs */

void put_hdr(uint8_t *p, const Hdr &h)
{
	Hdr w = h;
	w.id = htole32(h.id);
	w.tag = htole64(h.tag);
	w.data = htole64(h.data);
	w.len = htole64(h.len);
	std::memcpy(p, &w, sizeof(w));
}
Hdr get_hdr(const uint8_t *p)
{
	Hdr h;
	std::memcpy(&h, p, sizeof(h));
	h.id = le32toh(h.id);
	h.tag = le64toh(h.tag);
	h.data = le64toh(h.data);
	h.len = le64toh(h.len);
	return h;
}
void put_rts(uint8_t *p, const Rts &r)
{
	Rts w = r;
	w.addr = htole64(r.addr);
	w.rkey = htole32(r.rkey);
	w.port = htole32(r.port);
	w.device = htole64(r.device);
	w.qpn = htole32(r.qpn);
	std::memcpy(p, &w, sizeof(w));
}
Rts get_rts(const uint8_t *p)
{
	Rts r;
	std::memcpy(&r, p, sizeof(r));
	r.addr = le64toh(r.addr);
	r.rkey = le32toh(r.rkey);
	r.port = le32toh(r.port);
	r.device = le64toh(r.device);
	r.qpn = le32toh(r.qpn);
	return r;
}

/* A send in flight. */
struct TxOp {
	bool busy = false;
	bool rts = false;   /* a rendezvous: completes on the FIN */
	bool sent = false;  /* rendezvous: the RTS's SEND completed */
	bool fin = false;   /* rendezvous: the FIN came */
	bool report = true; /* false: inject */
	void *context = nullptr;
	uint64_t flags = 0; /* the completion's */
	PeerRef peer{};
	nicmr_mr *local = nullptr; /* the cache's registration of the buffer */
};

/* A rendezvous receive: waiting for room to post (queued in Msg::rx), reading, or sending
 * its FIN. */
struct RxOp {
	enum State : uint8_t { read_wait, reading, fin_wait, fin } state = read_wait;
	void *context = nullptr;
	uint8_t *dst = nullptr;
	size_t len = 0;	   /* bytes read (the receive's room) */
	uint64_t mlen = 0; /* the message's length */
	uint64_t flags = 0;
	uint64_t tag = 0, data = 0;
	void *desc = nullptr;
	match::Posted *multi = nullptr; /* a multi-receive buffer it lands in */
	bool multi_tagged = false;
	nicmr_mr *local = nullptr;
	uint64_t raddr = 0;
	uint32_t rkey = 0;
	uint32_t id = 0;
	EpAddr src{};
	uint64_t from = FI_ADDR_NOTAVAIL; /* the sender's AV entry (FI_SOURCE) */
	PeerRef peer{};
	bool queued = false;  /* in Msg::rx, waiting for room */
	bool discard = false; /* FI_DISCARD: no READ, no receive completion, only the FIN */
	bool quiet = false;   /* the receive's Posted::quiet */
};

} // namespace

/* msg_idle's schedule: the first kick after 64 empty progress turns, then after twice as
 * many each time, at most 65536. */
constexpr uint32_t kKickFirst = 64;
constexpr uint32_t kKickMax = 65536;

struct Msg {
	Domain *dom = nullptr;
	nicmr_srq *srq = nullptr;
	nicmr_mr_cache *cache = nullptr;
	uint8_t *rx_slab = nullptr; /* kMsgSrqDepth buffers */
	nicmr_mr *rx_mr = nullptr;
	uint64_t rx_addr = 0;	    /* rx_slab in rx_mr's key space */
	uint8_t *tx_slab = nullptr; /* kMsgTxOps buffers */
	nicmr_mr *tx_mr = nullptr;
	uint64_t tx_addr = 0;
	uint8_t *pool = nullptr; /* kMsgUnexpPool payloads of unexpected messages */
	uint32_t pool_free[kMsgUnexpPool];
	uint32_t npool = 0;
	match::Matcher m;
	match::Queue<RxOp> rx;
	TxOp tx[kMsgTxOps];
	uint32_t tx_free[kMsgTxOps];
	uint32_t ntx = 0;
	size_t min_multi_recv = kMsgBounce;
	uint64_t dropped = 0; /* unexpected messages without room */
	/* Unexpected messages queued while their sender was not in the AV (src
	 * FI_ADDR_NOTAVAIL; at most this many are still queued): looked up again before a
	 * receive is matched (resolve_sources). */
	uint32_t unknown_src = 0;
	/* The RNR kick (msg_idle): progress turns that found nothing while a SEND waited, the
	 * turns the next kick waits for (doubling while nothing moves), NOPs in flight. */
	uint32_t idle = 0;
	uint32_t kick_after = kKickFirst;
	uint32_t nops = 0;
};

namespace {

/* A rendezvous receive's place in the queue of those waiting for room. */
void rx_wait(Msg *m, RxOp *x)
{
	m->rx.push_back(x);
	x->queued = true;
}
void rx_unwait(Msg *m, RxOp *x)
{
	if (x->queued)
		m->rx.unlink(x);
	x->queued = false;
}

constexpr size_t kRxSlab = size_t{kMsgSrqDepth} * kSlot;
constexpr size_t kTxSlab = size_t{kMsgTxOps} * kSlot;
constexpr size_t kPool = size_t{kMsgUnexpPool} * kMsgBounce;
constexpr size_t kMaxMsg = size_t{1} << 31;

constexpr uint64_t kSendFlags = FI_COMPLETION | FI_INJECT | FI_REMOTE_CQ_DATA |
				FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_INJECT_COMPLETE |
				FI_FENCE;
constexpr uint64_t kRecvFlags = FI_COMPLETION | FI_MULTI_RECV;
/* fi_tagged(3)'s flags of fi_trecvmsg that look at unexpected messages. */
constexpr uint64_t kPeekFlags = FI_PEEK | FI_CLAIM | FI_DISCARD;

int code_of(int rc)
{
	switch (rc) {
	case -ENOSPC:
		return -FI_EAGAIN;
	case -ENOKEY:
	case -EKEYREVOKED:
	case -EACCES:
	case -ERANGE:
		return -FI_EACCES;
	default:
		return fi_code(rc);
	}
}

int err_of(uint8_t status)
{
	switch (status) {
	case NICMR_WC_REMOTE_ACCESS:
	case NICMR_WC_LOCAL_PROT:
	case NICMR_WC_LOCAL_ACCESS:
		return FI_EACCES;
	case NICMR_WC_WR_FLUSH:
		return FI_ECANCELED;
	default:
		return FI_EIO;
	}
}

void push(Cq *cq, const CqEntry &e)
{
	if (!cq)
		return;
	std::lock_guard lk(cq->mu);
	/* The progress hook polls no more completions than both CQs have room for, and the
	 * posting calls check the room before they complete anything. */
	if (cq_room(cq) == 0) {
		FI_WARN(&provider, FI_LOG_CQ, "CQ overrun: a message completion is lost\n");
		return;
	}
	cq_push(cq, e);
}

void count(Cntr *c, bool ok)
{
	/* relaxed: a count; readers order nothing else by it. */
	if (c)
		(ok ? c->value : c->errs).fetch_add(1, std::memory_order_relaxed);
}

bool cq_has_room(Cq *cq)
{
	if (!cq)
		return true;
	std::lock_guard lk(cq->mu);
	return cq_room(cq) > 0;
}

uint64_t kind_flag(bool tagged)
{
	return tagged ? FI_TAGGED : FI_MSG;
}

void repost(Msg *m, uint32_t slot)
{
	nicmr_sge s{m->rx_addr + uint64_t{slot} * kSlot, static_cast<uint32_t>(kSlot),
		    nicmr_mr_key(m->rx_mr)};
	int rc = nicmr_srq_post_recv(m->srq, &s, 1, kMsgWr | kMsgRecvWr | slot);
	if (rc != 0)
		FI_WARN(&provider, FI_LOG_EP_DATA, "SRQ repost of buffer %u: %d\n", slot, rc);
}

/* A receive completion (olen > 0: truncated, FI_ETRUNC with olen) of a message from src (the
 * sender's AV entry: fi_cq_readfrom's with FI_SOURCE). */
void rx_done(const EpView &v, bool quiet, void *context, uint64_t flags, void *buf, size_t len,
	     uint64_t data, uint64_t tag, size_t olen, uint64_t src, int err = 0)
{
	CqEntry e{context, flags, err ? err : (olen ? FI_ETRUNC : 0), 0};
	e.src = v.source ? src : FI_ADDR_NOTAVAIL;
	e.buf = buf;
	e.len = len;
	e.data = data;
	e.tag = tag;
	e.olen = olen;
	/* fi_cq(3), FI_SELECTIVE_COMPLETION: a quiet receive makes an entry only for an error
	 * (truncation included) or the release of its multi-receive buffer. */
	if (!quiet || e.err || (flags & FI_MULTI_RECV))
		push(v.rx_cq, e);
	count(v.recv_cntr, e.err == 0);
}

/* n bytes of a posted receive were taken: a single receive is finished; a multi-receive
 * buffer moves on and is released once less than min_multi_recv is left and nothing still
 * lands in it. FI_MULTI_RECV when this released it (the completion then says so). */
uint64_t posted_take(Msg *m, match::Posted *r, size_t n, bool tagged)
{
	if (!(r->flags & FI_MULTI_RECV)) {
		if (r->queued)
			m->m.posted(tagged).unlink(r);
		m->m.posted(tagged).release(r);
		return 0;
	}
	r->off += n;
	if (r->len - r->off < m->min_multi_recv)
		r->released = true;
	if (r->released && r->busy == 0) {
		if (r->queued)
			m->m.posted(tagged).unlink(r);
		m->m.posted(tagged).release(r);
		return FI_MULTI_RECV;
	}
	return 0;
}

/* An eager message's payload into a receive. */
uint64_t deliver_eager(const EpView &v, match::Posted *r, bool tagged, const Hdr &h,
		       const uint8_t *payload, size_t plen, uint64_t src)
{
	Msg *m = v.msg;
	const size_t room = r->len - r->off;
	const size_t n = std::min(plen, room);
	uint8_t *at = r->buf + r->off;
	if (n)
		std::memcpy(at, payload, n);
	void *context = r->context;
	const bool quiet = r->quiet;
	uint64_t flags =
		FI_RECV | kind_flag(tagged) | ((h.flags & kHdrData) ? FI_REMOTE_CQ_DATA : 0);
	const uint64_t taken = posted_take(m, r, n, tagged);
	rx_done(v, quiet, context, flags | taken, at, n, h.data, h.tag, plen - n, src);
	return taken;
}

/* Posts what a rendezvous receive waits for (its READ, or its FIN): false when it must wait
 * (no room on the QP, the pair still recovering). ep mu held. */
bool rx_advance(Endpoint *ep, const EpView &v, RxOp *x);

/* A rendezvous receive that failed before its READ: its receive completes with err. */
void rx_fail(const EpView &v, RxOp *x, int err)
{
	Msg *m = v.msg;
	uint64_t flags = x->flags;
	if (x->multi) {
		x->multi->busy--;
		flags |= posted_take(m, x->multi, 0, x->multi_tagged);
	}
	if (x->local) {
		nicmr_mr_cache_dereg(m->cache, x->local);
		x->local = nullptr;
	}
	rx_done(v, x->quiet, x->context, flags, x->dst, 0, x->data, x->tag, 0, x->from, err);
	m->rx.release(x);
}

/* Starts a rendezvous for a matched RTS into receive r. ep mu held. */
void start_rndv(Endpoint *ep, const EpView &v, match::Posted *r, bool tagged, uint64_t tag,
		uint64_t data, bool has_data, const Rts &rts, uint32_t via_qpn, uint32_t id,
		uint64_t mlen, uint64_t from)
{
	Msg *m = v.msg;
	RxOp *x = m->rx.alloc();
	if (!x) {
		/* Room for kMsgRxOps rendezvous receives at once (doc/libfabric.md). */
		void *context = r->context;
		uint8_t *rbuf = r->buf;
		const uint64_t f = posted_take(m, r, 0, tagged);
		rx_done(v, false, context, FI_RECV | kind_flag(tagged) | f, rbuf, 0, data, tag, 0,
			from, FI_ENOSPC);
		return;
	}
	const size_t room = r->len - r->off;
	x->context = r->context;
	x->quiet = r->quiet;
	x->dst = r->buf + r->off;
	x->len = static_cast<size_t>(std::min<uint64_t>(mlen, room));
	x->mlen = mlen;
	x->flags = FI_RECV | kind_flag(tagged) | (has_data ? FI_REMOTE_CQ_DATA : 0);
	x->tag = tag;
	x->data = data;
	x->desc = r->desc;
	x->raddr = rts.addr;
	x->rkey = rts.rkey;
	x->id = id;
	x->src = ep_src(ep, via_qpn, rts.device, rts.port, rts.qpn);
	x->from = from;
	if (r->flags & FI_MULTI_RECV) {
		r->busy++;
		x->multi = r;
		x->multi_tagged = tagged;
		posted_take(m, r, x->len, tagged);
	} else {
		posted_take(m, r, x->len, tagged);
	}
	x->state = RxOp::read_wait;
	rx_wait(m, x);
	while (RxOp *w = m->rx.front()) {
		if (!rx_advance(ep, v, w))
			break;
	}
}

bool rx_advance(Endpoint *ep, const EpView &v, RxOp *x)
{
	Msg *m = v.msg;
	const uint64_t wr = kMsgWr | kMsgRxOpWr | m->rx.index(x);
	if (!x->peer.qp) {
		int ret = ep_peer_at(ep, x->src, &x->peer);
		if (ret == -FI_EAGAIN)
			return false;
		if (ret != 0) {
			rx_unwait(m, x);
			x->peer = {};
			rx_fail(v, x, -ret);
			return true;
		}
	}
	if (x->state == RxOp::read_wait && x->len == 0) {
		/* Nothing to read (a receive of 0 bytes, or a discarded message): the receive
		 * completes now, and the FIN tells the sender. */
		uint64_t flags = x->flags;
		if (x->multi) {
			x->multi->busy--;
			flags |= posted_take(m, x->multi, 0, x->multi_tagged);
			x->multi = nullptr;
		}
		if (!x->discard)
			rx_done(v, x->quiet, x->context, flags, x->dst, 0, x->data, x->tag, x->mlen,
				x->from);
		x->state = RxOp::fin_wait;
	}
	if (x->state == RxOp::read_wait) {
		uint32_t lkey = 0;
		uint64_t laddr = 0;
		if (x->desc) {
			const Mr *mr = static_cast<const Mr *>(x->desc);
			if (mr_local_addr(mr, x->dst, x->len, &laddr) != 0) {
				rx_unwait(m, x);
				ep_peer_done(x->peer.peer, true);
				rx_fail(v, x, FI_EACCES);
				return true;
			}
			lkey = nicmr_mr_key(mr->mr);
		} else if (!x->local) {
			/* No descriptor: the buffer is registered through the domain's cache (a hit
			 * makes no system call). */
			int rc = nicmr_mr_cache_reg(m->cache, x->dst, x->len, NICMR_ACCESS_READ,
						    &x->local);
			if (rc != 0) {
				x->local = nullptr;
				rx_unwait(m, x);
				ep_peer_done(x->peer.peer, true);
				rx_fail(v, x, -fi_code(rc));
				return true;
			}
		}
		if (x->local) {
			lkey = nicmr_mr_key(x->local);
			nicmr_mr_addr_of(x->local, x->dst, x->len, &laddr);
		}
		int rc = nicmr_post_read(x->peer.qp, laddr, x->len, lkey, x->raddr, x->rkey, wr,
					 NICMR_SEND_SIGNALED);
		if (rc == -ENOSPC)
			return false;
		if (rc != 0) {
			rx_unwait(m, x);
			ep_peer_done(x->peer.peer, true);
			rx_fail(v, x, -code_of(rc));
			return true;
		}
		x->state = RxOp::reading;
		rx_unwait(m, x);
		return true;
	}
	/* fin_wait: the FIN names the sender's request. */
	uint8_t h[kHdrLen];
	put_hdr(h, Hdr{kVersion, kOpFin, 0, 0, x->id, 0, 0, 0});
	int rc = nicmr_post_send(x->peer.qp, reinterpret_cast<uintptr_t>(h), kHdrLen, 0, 0, wr,
				 NICMR_SEND_SIGNALED | NICMR_SEND_INLINE);
	if (rc == -ENOSPC)
		return false;
	rx_unwait(m, x);
	if (rc != 0) {
		FI_WARN(&provider, FI_LOG_EP_DATA, "FIN of request %u: %d\n", x->id, rc);
		ep_peer_done(x->peer.peer, true);
		m->rx.release(x);
		return true;
	}
	x->state = RxOp::fin;
	return true;
}

/* The READ of a rendezvous receive completed. */
void rx_read_done(Endpoint *ep, const EpView &v, RxOp *x, const nicmr_wc &wc)
{
	Msg *m = v.msg;
	if (x->local) {
		nicmr_mr_cache_dereg(m->cache, x->local);
		x->local = nullptr;
	}
	uint64_t flags = x->flags;
	if (x->multi) {
		x->multi->busy--;
		flags |= posted_take(m, x->multi, 0, x->multi_tagged);
	}
	if (wc.status != NICMR_WC_SUCCESS) {
		/* The pair is broken: no FIN can go (the sender's request stays; doc). */
		ep_peer_done(x->peer.peer, false);
		rx_done(v, x->quiet, x->context, flags, x->dst, 0, x->data, x->tag, 0, x->from,
			err_of(wc.status));
		m->rx.release(x);
		return;
	}
	rx_done(v, x->quiet, x->context, flags, x->dst, x->len, x->data, x->tag, x->mlen - x->len,
		x->from);
	x->state = RxOp::fin_wait;
	x->multi = nullptr;
	/* The FIN goes in order behind rendezvous receives still waiting. */
	if (m->rx.size() != 0 || !rx_advance(ep, v, x)) {
		x->state = RxOp::fin_wait;
		rx_wait(m, x);
	}
}

/* Drops an unexpected message (FI_DISCARD): its payload's room goes back; an RTS is answered
 * with a FIN without a READ, so that its sender completes. u is unlinked. ep mu held. */
void discard_unexpected(Endpoint *ep, const EpView &v, match::Unexpected *u)
{
	Msg *m = v.msg;
	const match::Unexpected uc = *u;
	m->m.unexpected().release(u);
	if (!uc.rndv) {
		if (uc.pool >= 0)
			m->pool_free[m->npool++] = static_cast<uint32_t>(uc.pool);
		else
			repost(m, static_cast<uint32_t>(uc.bounce));
		return;
	}
	RxOp *x = m->rx.alloc();
	if (!x) {
		FI_WARN(&provider, FI_LOG_EP_DATA, "discard: no room to answer RTS %u\n", uc.id);
		return;
	}
	x->discard = true;
	x->mlen = uc.len;
	x->id = uc.id;
	x->src = ep_src(ep, uc.src_via, uc.src_device, uc.src_port, uc.src_qpn);
	x->state = RxOp::read_wait;
	rx_wait(m, x);
	while (RxOp *w = m->rx.front()) {
		if (!rx_advance(ep, v, w))
			break;
	}
}

/* A send's completion entry. */
void tx_done(const EpView &v, TxOp &o, int err, int prov_errno)
{
	if (o.report || err)
		push(v.tx_cq, CqEntry{o.context, o.flags, err, prov_errno});
	count(v.send_cntr, err == 0);
}

void tx_free(Msg *m, uint32_t idx)
{
	TxOp &o = m->tx[idx];
	if (o.local) {
		nicmr_mr_cache_dereg(m->cache, o.local);
		o.local = nullptr;
	}
	o.busy = false;
	m->tx_free[m->ntx++] = idx;
}

/* A SEND that reached the SRQ: buffer slot holds byte_len bytes. */
void on_recv(Endpoint *ep, const EpView &v, uint32_t slot, uint32_t byte_len, uint32_t via_qpn)
{
	Msg *m = v.msg;
	const uint8_t *p = m->rx_slab + size_t{slot} * kSlot;
	if (byte_len < kHdrLen) {
		FI_WARN(&provider, FI_LOG_EP_DATA, "message of %u bytes: no header\n", byte_len);
		repost(m, slot);
		return;
	}
	const Hdr h = get_hdr(p);
	const bool tagged = h.flags & kHdrTagged;
	const bool has_data = h.flags & kHdrData;
	if (h.version != kVersion) {
		FI_WARN(&provider, FI_LOG_EP_DATA, "header version %u: dropped\n", h.version);
		repost(m, slot);
		return;
	}
	/* The sender's AV entry, looked up only when a receive may select it or its completion
	 * carries it (ep_src_fi: no allocation, no system call). */
	const uint64_t src = (h.op == kOpEager || h.op == kOpRts) && (v.directed || v.source)
				     ? ep_src_fi(ep, via_qpn)
				     : FI_ADDR_NOTAVAIL;
	switch (h.op) {
	case kOpEager: {
		const size_t plen = byte_len - kHdrLen;
		if (match::Posted *r = m->m.match_message(tagged, h.tag, src)) {
			deliver_eager(v, r, tagged, h, p + kHdrLen, plen, src);
			repost(m, slot);
			return;
		}
		match::Unexpected *u = m->m.unexpected().alloc();
		if (!u) {
			m->dropped++;
			FI_WARN(&provider, FI_LOG_EP_DATA, "no room for an unexpected message\n");
			repost(m, slot);
			return;
		}
		u->tagged = tagged;
		u->has_data = has_data;
		u->tag = h.tag;
		u->data = h.data;
		u->len = plen;
		u->src = src;
		u->src_via = via_qpn;
		if (src == FI_ADDR_NOTAVAIL && (v.directed || v.source))
			m->unknown_src++;
		if (m->npool) {
			/* Copied out, so that the SRQ gets its buffer back at once. */
			u->pool = static_cast<int32_t>(m->pool_free[--m->npool]);
			std::memcpy(m->pool + size_t(u->pool) * kMsgBounce, p + kHdrLen, plen);
			repost(m, slot);
		} else {
			u->bounce = static_cast<int32_t>(slot); /* reposted once matched */
		}
		m->m.unexpected().push_back(u);
		return;
	}
	case kOpRts: {
		if (byte_len < kRtsLen) {
			repost(m, slot);
			return;
		}
		const Rts rts = get_rts(p + kHdrLen);
		repost(m, slot);
		if (match::Posted *r = m->m.match_message(tagged, h.tag, src)) {
			start_rndv(ep, v, r, tagged, h.tag, h.data, has_data, rts, via_qpn, h.id,
				   h.len, src);
			return;
		}
		match::Unexpected *u = m->m.unexpected().alloc();
		if (!u) {
			m->dropped++;
			FI_WARN(&provider, FI_LOG_EP_DATA, "no room for an unexpected RTS\n");
			return;
		}
		u->tagged = tagged;
		u->rndv = true;
		u->has_data = has_data;
		u->tag = h.tag;
		u->data = h.data;
		u->len = h.len;
		u->src = src;
		if (src == FI_ADDR_NOTAVAIL && (v.directed || v.source))
			m->unknown_src++;
		u->raddr = rts.addr;
		u->rkey = rts.rkey;
		u->id = h.id;
		u->src_device = rts.device;
		u->src_port = rts.port;
		u->src_qpn = rts.qpn;
		u->src_via = via_qpn;
		m->m.unexpected().push_back(u);
		return;
	}
	case kOpNop:
		repost(m, slot); /* a kick (msg_idle): nothing to do */
		return;
	case kOpFin: {
		repost(m, slot);
		if (h.id >= kMsgTxOps || !m->tx[h.id].busy || !m->tx[h.id].rts || m->tx[h.id].fin) {
			FI_WARN(&provider, FI_LOG_EP_DATA, "FIN of no request (%u)\n", h.id);
			return;
		}
		TxOp &o = m->tx[h.id];
		o.fin = true;
		tx_done(v, o, 0, 0);
		if (o.sent)
			tx_free(m, h.id);
		return;
	}
	default:
		FI_WARN(&provider, FI_LOG_EP_DATA, "header op %u: dropped\n", h.op);
		repost(m, slot);
	}
}

} // namespace

void msg_completions(Endpoint *ep, const nicmr_wc *wc, int n)
{
	/* Completion path (ep mu held): no allocation, no system call. */
	const EpView v = ep_view(ep);
	Msg *m = v.msg;
	m->idle = 0;
	m->kick_after = kKickFirst;
	for (int i = 0; i < n; i++) {
		const nicmr_wc &w = wc[i];
		if (w.wr_id & kMsgRecvWr) {
			const auto slot = static_cast<uint32_t>(w.wr_id & 0xffffffffu);
			if (w.status != NICMR_WC_SUCCESS) {
				/* A buffer flushed with its QP (it went to ERR): back on the SRQ.
				 */
				repost(m, slot);
				continue;
			}
			on_recv(ep, v, slot, w.byte_len, w.qp_num);
			continue;
		}
		if (w.wr_id & kMsgRxOpWr) {
			RxOp *x = m->rx.at(static_cast<uint32_t>(w.wr_id & 0xffffffffu));
			if (!x)
				continue;
			if (x->state == RxOp::reading) {
				rx_read_done(ep, v, x, w);
			} else {
				/* The FIN went (or failed: the pair recovers at the next post). */
				ep_peer_done(x->peer.peer, w.status == NICMR_WC_SUCCESS);
				m->rx.release(x);
			}
			continue;
		}
		const auto idx = static_cast<uint32_t>(w.wr_id & 0xffffffffu);
		if (idx == kMsgTxOps) {
			m->nops--; /* a kick went (or was flushed) */
			continue;
		}
		if (idx >= kMsgTxOps || !m->tx[idx].busy)
			continue;
		TxOp &o = m->tx[idx];
		const bool ok = w.status == NICMR_WC_SUCCESS;
		ep_peer_done(o.peer.peer, ok);
		if (!ok) {
			tx_done(v, o, err_of(w.status), w.syndrome);
			tx_free(m, idx);
			continue;
		}
		if (!o.rts) {
			tx_done(v, o, 0, 0);
			tx_free(m, idx);
			continue;
		}
		o.sent = true;
		if (o.fin)
			tx_free(m, idx);
	}
	/* Rendezvous receives that waited for room. */
	while (RxOp *x = m->rx.front()) {
		if (!rx_advance(ep, v, x))
			break;
	}
}

void msg_idle(Endpoint *ep)
{
	/* Completion path (ep mu held): no allocation, no system call. On the device model's
	 * loopback a SEND that met an empty receive queue (RNR NAK; rnr_retry 7 retries without
	 * end) is retried only when its QP's doorbell rings again (doc/device-model.md, "RNR"),
	 * which a sender whose sends all wait never does. So while a SEND waits and nothing
	 * completes, the endpoint rings it with a header-only NOP SEND behind it, after 64 empty
	 * progress turns, then 128, ... up to 65536, at most kMsgNops at once (the receiver drops
	 * the NOP and reposts its buffer). On a wire the RNR timer retries by itself; the NOP is
	 * then merely early. */
	Msg *m = ep_view(ep).msg;
	if (m->ntx == kMsgTxOps || m->nops == kMsgNops || ++m->idle < m->kick_after)
		return;
	m->idle = 0;
	m->kick_after = std::min(m->kick_after * 2, kKickMax);
	for (const TxOp &o : m->tx) {
		if (!o.busy || o.sent || o.fin || !o.peer.qp)
			continue;
		uint8_t h[kHdrLen];
		put_hdr(h, Hdr{kVersion, kOpNop, 0, 0, 0, 0, 0, 0});
		if (nicmr_post_send(o.peer.qp, reinterpret_cast<uintptr_t>(h), kHdrLen, 0, 0,
				    kMsgWr | kMsgTxOps,
				    NICMR_SEND_SIGNALED | NICMR_SEND_INLINE) == 0)
			m->nops++;
		return;
	}
}

namespace {

/* ---- Posting */

ssize_t do_send(struct fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t dest,
		bool tagged, uint64_t tag, bool has_data, uint64_t data, void *context,
		uint64_t flags)
{
	/* Posting path: the endpoint's lock; no allocation, no system call once the peer's pair
	 * exists, except a rendezvous's registration through the cache (its lock; a miss is a
	 * slow-path registration). */
	Endpoint *ep = ep_msg_of(fep);
	if (!ep)
		return -FI_EINVAL;
	if (flags & ~kSendFlags)
		return -FI_EBADFLAGS;
	if (len && !buf)
		return -FI_EINVAL;
	const bool inject = flags & FI_INJECT;
	if ((inject && len > kInjectSize) || len > kMaxMsg)
		return -FI_EMSGSIZE;
	std::lock_guard lk(ep_mu(ep));
	const EpView v = ep_view(ep);
	if (!v.enabled)
		return -FI_EOPBADSTATE;
	Msg *m = v.msg;
	if (m->ntx == 0) {
		ep_progress_locked(ep);
		if (m->ntx == 0)
			return -FI_EAGAIN;
	}
	PeerRef pr{};
	if (int ret = ep_peer(ep, dest, &pr); ret != 0)
		return ret;
	const uint32_t idx = m->tx_free[m->ntx - 1];
	TxOp &o = m->tx[idx];
	o = TxOp{};
	uint8_t *slot = m->tx_slab + size_t{idx} * kSlot;
	const uint64_t laddr = m->tx_addr + uint64_t{idx} * kSlot;
	Hdr h{kVersion,
	      kOpEager,
	      static_cast<uint8_t>((tagged ? kHdrTagged : 0) | (has_data ? kHdrData : 0)),
	      0,
	      idx,
	      tagged ? tag : 0,
	      has_data ? data : 0,
	      len};
	int rc;
	if (len <= kMsgBounce) {
		/* Eager: the payload is copied behind the header into a registered buffer, so
		 * that the application's buffer is free at once (and needs no key). */
		put_hdr(slot, h);
		if (len)
			std::memcpy(slot + kHdrLen, buf, len);
		const size_t total = kHdrLen + len;
		const bool inl = total <= NICMR_MAX_INLINE;
		rc = nicmr_post_send(pr.qp, inl ? reinterpret_cast<uintptr_t>(slot) : laddr, total,
				     nicmr_mr_key(m->tx_mr), 0, kMsgWr | idx,
				     NICMR_SEND_SIGNALED | (inl ? NICMR_SEND_INLINE : 0));
	} else {
		/* Rendezvous: the receiver reads the buffer through a key that grants remote
		 * read: the descriptor's when its MR does, else the domain cache's. */
		uint64_t raddr = 0;
		uint32_t rkey = 0;
		if (desc) {
			const Mr *mr = static_cast<const Mr *>(desc);
			nicmr_mr_info info{};
			if (nicmr_mr_query(mr->mr, &info) == 0 &&
			    (info.access & NICMR_ACCESS_REMOTE_READ) &&
			    mr_local_addr(mr, buf, len, &raddr) == 0)
				rkey = nicmr_mr_key(mr->mr);
		}
		if (!rkey) {
			rc = nicmr_mr_cache_reg(m->cache, const_cast<void *>(buf), len,
						NICMR_ACCESS_SEND | NICMR_ACCESS_REMOTE_READ,
						&o.local);
			if (rc != 0) {
				o.local = nullptr;
				ep_peer_done(pr.peer, true);
				return fi_code(rc);
			}
			rkey = nicmr_mr_key(o.local);
			nicmr_mr_addr_of(o.local, buf, len, &raddr);
		}
		h.op = kOpRts;
		put_hdr(slot, h);
		put_rts(slot + kHdrLen,
			Rts{raddr, rkey, v.addr.port, v.addr.device_id, v.addr.qpn, 0});
		o.rts = true;
		rc = nicmr_post_send(pr.qp, reinterpret_cast<uintptr_t>(slot), kRtsLen, 0, 0,
				     kMsgWr | idx, NICMR_SEND_SIGNALED | NICMR_SEND_INLINE);
	}
	if (rc != 0) {
		if (o.local) {
			nicmr_mr_cache_dereg(m->cache, o.local);
			o.local = nullptr;
		}
		ep_peer_done(pr.peer, true);
		return code_of(rc);
	}
	o.busy = true;
	/* fi_cq(3): with FI_SELECTIVE_COMPLETION only a send with FI_COMPLETION completes on
	 * success; errors always do (tx_done). */
	o.report = !inject && (!ep_selective(ep, true) || (flags & FI_COMPLETION));
	o.context = context;
	o.flags = FI_SEND | kind_flag(tagged);
	o.peer = pr;
	m->ntx--;
	return 0;
}

/*
 * fi_trecvmsg with FI_PEEK, FI_CLAIM or FI_DISCARD (fi_tagged(3)), on the unexpected messages:
 *   FI_PEEK: the oldest unclaimed match completes the call with its length, tag and data (no
 *     data moves); none: an FI_ENOMSG error entry. With FI_CLAIM it is claimed for context
 *     (only a later FI_CLAIM receive with that context takes it), with FI_DISCARD dropped.
 *   FI_CLAIM alone: 1 (the caller receives the claimed message into buf as any receive).
 *   FI_CLAIM | FI_DISCARD: the claimed message is dropped; a completion of length 0.
 * 0 when done, 1 to go on receiving, or a negative code. ep mu held.
 */
/*
 * Looks up again the sender of each unexpected message that came before its sender was in the
 * AV (an application may insert a peer's address after the peer's first message arrived, as
 * Open MPI's ranks do while others already send): a receive directed at that sender must take
 * it, and FI_SOURCE must name it. Posting path: a walk of the unexpected queue only while such
 * messages are queued (m->unknown_src), no allocation, no system call.
 */
void resolve_sources(Endpoint *ep, const EpView &v)
{
	Msg *m = v.msg;
	if (m->unknown_src == 0)
		return;
	uint32_t left = 0;
	m->m.unexpected().find([&](match::Unexpected &u) {
		if (u.src == FI_ADDR_NOTAVAIL) {
			u.src = ep_src_fi(ep, u.src_via);
			left += u.src == FI_ADDR_NOTAVAIL;
		}
		return false; /* every entry */
	});
	m->unknown_src = left;
}

ssize_t peek_claim(Endpoint *ep, const EpView &v, void *, size_t, void *, uint64_t tag,
		   uint64_t ignore, uint64_t src, void *context, uint64_t flags)
{
	Msg *m = v.msg;
	/* What has arrived by now is looked at (a peek is no receive that waits). */
	ep_progress_locked(ep);
	if (!cq_has_room(v.rx_cq))
		return -FI_EAGAIN;
	auto claimed = [context](const match::Unexpected &c) { return c.claim == context; };
	if (!(flags & FI_PEEK)) {
		if (!(flags & FI_DISCARD))
			return 1;
		match::Unexpected *u = m->m.unexpected().take(claimed);
		if (!u)
			return -FI_EINVAL; /* nothing claimed with this context */
		const uint64_t utag = u->tag;
		const uint64_t u_src = u->src;
		discard_unexpected(ep, v, u);
		rx_done(v, false, context, FI_RECV | FI_TAGGED, nullptr, 0, 0, utag, 0, u_src);
		return 0;
	}
	match::Unexpected *u = m->m.unexpected().find([=](const match::Unexpected &c) {
		return !c.claim && c.tagged && match::src_match(c.src, src) &&
		       match::tag_match(c.tag, tag, ignore);
	});
	if (!u) {
		rx_done(v, false, context, FI_RECV | FI_TAGGED, nullptr, 0, 0, tag, 0,
			FI_ADDR_NOTAVAIL, FI_ENOMSG);
		return 0;
	}
	const uint64_t f = FI_RECV | FI_TAGGED | (u->has_data ? FI_REMOTE_CQ_DATA : 0);
	CqEntry e{context, f, 0, 0};
	e.src = v.source ? u->src : FI_ADDR_NOTAVAIL;
	e.len = u->len;
	e.data = u->data;
	e.tag = u->tag;
	if (flags & FI_CLAIM)
		u->claim = context;
	else if (flags & FI_DISCARD) {
		m->m.unexpected().unlink(u);
		discard_unexpected(ep, v, u);
	}
	push(v.rx_cq, e);
	count(v.recv_cntr, true);
	return 0;
}

ssize_t do_recv(struct fid_ep *fep, void *buf, size_t len, void *desc, fi_addr_t src_addr,
		bool tagged, uint64_t tag, uint64_t ignore, void *context, uint64_t flags)
{
	/* Posting path as do_send; an unexpected message matched here completes at once. */
	Endpoint *ep = ep_msg_of(fep);
	if (!ep)
		return -FI_EINVAL;
	if (flags & ~(kRecvFlags | (tagged ? kPeekFlags : 0)))
		return -FI_EBADFLAGS;
	if ((flags & kPeekFlags) && ((flags & FI_MULTI_RECV) || !(flags & (FI_PEEK | FI_CLAIM))))
		return -FI_EBADFLAGS; /* FI_DISCARD goes with FI_PEEK or FI_CLAIM */
	if (len && !buf && !(flags & (FI_PEEK | FI_DISCARD)))
		return -FI_EINVAL;
	if ((flags & FI_MULTI_RECV) && tagged)
		return -FI_EBADFLAGS; /* multi-receive buffers are untagged (doc) */
	std::lock_guard lk(ep_mu(ep));
	const EpView v = ep_view(ep);
	if (!v.enabled)
		return -FI_EOPBADSTATE;
	Msg *m = v.msg;
	/* fi_msg(3): src_addr selects the sender only with FI_DIRECTED_RECV; else it is
	 * ignored. An fi_addr_t the AV does not hold matches nothing until such a message. */
	const uint64_t src = v.directed ? src_addr : match::kAnySrc;
	resolve_sources(ep, v);
	if (flags & kPeekFlags) {
		ssize_t ret = peek_claim(ep, v, buf, len, desc, tag, ignore, src, context, flags);
		if (ret != 1)
			return ret;
		/* FI_CLAIM: the claimed message goes into this receive as any other. */
	}
	auto &q = m->m.posted(tagged);
	match::Posted *r = q.alloc();
	if (!r)
		return -FI_EAGAIN;
	r->context = context;
	r->buf = static_cast<uint8_t *>(buf);
	r->len = len;
	r->desc = desc;
	r->tag = tag;
	r->ignore = ignore;
	r->src = src;
	r->flags = flags & FI_MULTI_RECV;
	r->tagged = tagged;
	r->quiet = ep_selective(ep, false) && !(flags & FI_COMPLETION);
	const bool multi = flags & FI_MULTI_RECV;
	if (multi && len < m->min_multi_recv) {
		q.release(r);
		return -FI_EINVAL; /* a multi-receive buffer below FI_OPT_MIN_MULTI_RECV */
	}
	/* Messages that came first, oldest first: one for a single receive, as many as fit a
	 * multi-receive buffer. */
	for (;;) {
		if (!cq_has_room(v.rx_cq)) {
			if (r->off == 0 && r->busy == 0) {
				q.release(r);
				return -FI_EAGAIN;
			}
			break;
		}
		RxOp *spare = m->rx.alloc();
		if (!spare) {
			if (r->off == 0 && r->busy == 0) {
				q.release(r);
				return -FI_EAGAIN;
			}
			break;
		}
		m->rx.release(spare);
		match::Unexpected *u =
			(flags & FI_CLAIM)
				? m->m.unexpected().take([context](const match::Unexpected &c) {
					  return c.claim == context;
				  })
				: m->m.match_receive(tagged, tag, ignore, src);
		if (!u) {
			if (flags & FI_CLAIM) {
				q.release(r);
				return -FI_EINVAL; /* no message claimed with this context */
			}
			break;
		}
		match::Unexpected uc = *u;
		m->m.unexpected().release(u);
		bool gone; /* r was taken: finished, or released with its last completion */
		if (uc.rndv) {
			Rts rts{uc.raddr, uc.rkey, uc.src_port, uc.src_device, uc.src_qpn, 0};
			start_rndv(ep, v, r, tagged, uc.tag, uc.data, uc.has_data, rts, uc.src_via,
				   uc.id, uc.len, uc.src);
			/* A multi-receive buffer released here goes when its READs are in. */
			gone = !multi || r->released;
		} else {
			const uint8_t *payload =
				uc.pool >= 0 ? m->pool + size_t(uc.pool) * kMsgBounce
					     : m->rx_slab + size_t(uc.bounce) * kSlot + kHdrLen;
			Hdr h{kVersion,
			      kOpEager,
			      static_cast<uint8_t>((uc.tagged ? kHdrTagged : 0) |
						   (uc.has_data ? kHdrData : 0)),
			      0,
			      0,
			      uc.tag,
			      uc.data,
			      uc.len};
			const uint64_t f = deliver_eager(v, r, tagged, h, payload, uc.len, uc.src);
			gone = !multi || (f & FI_MULTI_RECV) || r->released;
			if (uc.pool >= 0)
				m->pool_free[m->npool++] = static_cast<uint32_t>(uc.pool);
			else
				repost(m, static_cast<uint32_t>(uc.bounce));
		}
		if (gone)
			return 0;
	}
	r->queued = true;
	q.push_back(r);
	return 0;
}

/* ---- fi_ops_msg */

/* The one-segment vector forms: -FI_EINVAL for any other count (iov_limit 1). */
/* The flags of a call without a flags parameter: FI_COMPLETION when the endpoint's op_flags
 * have it (fi_endpoint(3), op_flags; what FI_SELECTIVE_COMPLETION looks at). */
uint64_t dflt(struct fid_ep *fep, bool tx)
{
	const Endpoint *ep = ep_msg_of(fep);
	return ep ? ep_op_flags(ep, tx) & FI_COMPLETION : 0;
}

bool iov_ok(const struct iovec *iov, size_t count)
{
	return count == 0 || (iov && count == 1);
}

ssize_t m_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, void *context)
{
	return do_recv(ep, buf, len, desc, src, false, 0, 0, context, dflt(ep, false));
}

ssize_t m_recvv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
		fi_addr_t src, void *context)
{
	if (!iov_ok(iov, count))
		return -FI_EINVAL;
	return do_recv(ep, count ? iov[0].iov_base : nullptr, count ? iov[0].iov_len : 0,
		       desc && count ? desc[0] : nullptr, src, false, 0, 0, context,
		       dflt(ep, false));
}

ssize_t m_recvmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg || !iov_ok(msg->msg_iov, msg->iov_count))
		return -FI_EINVAL;
	const bool one = msg->iov_count == 1;
	return do_recv(ep, one ? msg->msg_iov[0].iov_base : nullptr,
		       one ? msg->msg_iov[0].iov_len : 0, one && msg->desc ? msg->desc[0] : nullptr,
		       msg->addr, false, 0, 0, msg->context, flags);
}

ssize_t m_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
	       void *context)
{
	return do_send(ep, buf, len, desc, dest, false, 0, false, 0, context, dflt(ep, true));
}

ssize_t m_sendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
		fi_addr_t dest, void *context)
{
	if (!iov_ok(iov, count))
		return -FI_EINVAL;
	return do_send(ep, count ? iov[0].iov_base : nullptr, count ? iov[0].iov_len : 0,
		       desc && count ? desc[0] : nullptr, dest, false, 0, false, 0, context,
		       dflt(ep, true));
}

ssize_t m_sendmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	if (!msg || !iov_ok(msg->msg_iov, msg->iov_count))
		return -FI_EINVAL;
	const bool one = msg->iov_count == 1;
	return do_send(ep, one ? msg->msg_iov[0].iov_base : nullptr,
		       one ? msg->msg_iov[0].iov_len : 0, one && msg->desc ? msg->desc[0] : nullptr,
		       msg->addr, false, 0, flags & FI_REMOTE_CQ_DATA, msg->data, msg->context,
		       flags & ~FI_REMOTE_CQ_DATA);
}

ssize_t m_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest)
{
	return do_send(ep, buf, len, nullptr, dest, false, 0, false, 0, nullptr, FI_INJECT);
}

ssize_t m_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
		   fi_addr_t dest, void *context)
{
	return do_send(ep, buf, len, desc, dest, false, 0, true, data, context, dflt(ep, true));
}

ssize_t m_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest)
{
	return do_send(ep, buf, len, nullptr, dest, false, 0, true, data, nullptr, FI_INJECT);
}

/* ---- fi_ops_tagged */

ssize_t t_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t tag,
	       uint64_t ignore, void *context)
{
	return do_recv(ep, buf, len, desc, src, true, tag, ignore, context, dflt(ep, false));
}

ssize_t t_recvv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
		fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
	if (!iov_ok(iov, count))
		return -FI_EINVAL;
	return do_recv(ep, count ? iov[0].iov_base : nullptr, count ? iov[0].iov_len : 0,
		       desc && count ? desc[0] : nullptr, src, true, tag, ignore, context,
		       dflt(ep, false));
}

ssize_t t_recvmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (!msg || !iov_ok(msg->msg_iov, msg->iov_count))
		return -FI_EINVAL;
	/* FI_PEEK, FI_CLAIM and FI_DISCARD are not offered. */
	const bool one = msg->iov_count == 1;
	return do_recv(ep, one ? msg->msg_iov[0].iov_base : nullptr,
		       one ? msg->msg_iov[0].iov_len : 0, one && msg->desc ? msg->desc[0] : nullptr,
		       msg->addr, true, msg->tag, msg->ignore, msg->context, flags);
}

ssize_t t_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
	       uint64_t tag, void *context)
{
	return do_send(ep, buf, len, desc, dest, true, tag, false, 0, context, dflt(ep, true));
}

ssize_t t_sendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
		fi_addr_t dest, uint64_t tag, void *context)
{
	if (!iov_ok(iov, count))
		return -FI_EINVAL;
	return do_send(ep, count ? iov[0].iov_base : nullptr, count ? iov[0].iov_len : 0,
		       desc && count ? desc[0] : nullptr, dest, true, tag, false, 0, context,
		       dflt(ep, true));
}

ssize_t t_sendmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (!msg || !iov_ok(msg->msg_iov, msg->iov_count))
		return -FI_EINVAL;
	const bool one = msg->iov_count == 1;
	return do_send(ep, one ? msg->msg_iov[0].iov_base : nullptr,
		       one ? msg->msg_iov[0].iov_len : 0, one && msg->desc ? msg->desc[0] : nullptr,
		       msg->addr, true, msg->tag, flags & FI_REMOTE_CQ_DATA, msg->data,
		       msg->context, flags & ~FI_REMOTE_CQ_DATA);
}

ssize_t t_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest, uint64_t tag)
{
	return do_send(ep, buf, len, nullptr, dest, true, tag, false, 0, nullptr, FI_INJECT);
}

ssize_t t_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
		   fi_addr_t dest, uint64_t tag, void *context)
{
	return do_send(ep, buf, len, desc, dest, true, tag, true, data, context, dflt(ep, true));
}

ssize_t t_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
		     uint64_t tag)
{
	return do_send(ep, buf, len, nullptr, dest, true, tag, true, data, nullptr, FI_INJECT);
}

void unmap(void *p, size_t len)
{
	if (p)
		munmap(p, len);
}

uint8_t *map(size_t len)
{
	void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
}

} // namespace

struct fi_ops_msg msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = m_recv,
	.recvv = m_recvv,
	.recvmsg = m_recvmsg,
	.send = m_send,
	.sendv = m_sendv,
	.sendmsg = m_sendmsg,
	.inject = m_inject,
	.senddata = m_senddata,
	.injectdata = m_injectdata,
};

struct fi_ops_tagged tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = t_recv,
	.recvv = t_recvv,
	.recvmsg = t_recvmsg,
	.send = t_send,
	.sendv = t_sendv,
	.sendmsg = t_sendmsg,
	.inject = t_inject,
	.senddata = t_senddata,
	.injectdata = t_injectdata,
};

int msg_open(Domain *dom, Msg **out)
{
	std::unique_ptr<Msg> m(new (std::nothrow) Msg);
	if (!m)
		return -FI_ENOMEM;
	m->dom = dom;
	int ret = local_cache_get(dom, &m->cache);
	if (ret != 0)
		return ret;
	if (m->m.init(kMsgPosted, kMsgUnexpected) != 0 || m->rx.init(kMsgRxOps) != 0)
		return -FI_ENOMEM;
	m->rx_slab = map(kRxSlab);
	m->tx_slab = map(kTxSlab);
	m->pool = map(kPool);
	auto fail = [&](int r) {
		msg_close(m.release());
		return r;
	};
	if (!m->rx_slab || !m->tx_slab || !m->pool)
		return fail(-FI_ENOMEM);
	int rc = nicmr_mr_reg(dom->pd, m->rx_slab, kRxSlab, NICMR_ACCESS_LOCAL_WRITE, 0, 0,
			      &m->rx_mr);
	if (rc == 0)
		rc = nicmr_mr_reg(dom->pd, m->tx_slab, kTxSlab, NICMR_ACCESS_LOCAL_WRITE, 0, 0,
				  &m->tx_mr);
	if (rc == 0)
		rc = nicmr_mr_addr_of(m->rx_mr, m->rx_slab, kRxSlab, &m->rx_addr);
	if (rc == 0)
		rc = nicmr_mr_addr_of(m->tx_mr, m->tx_slab, kTxSlab, &m->tx_addr);
	nicmr_srq_attr sa{kMsgSrqDepth, 1};
	if (rc == 0)
		rc = nicmr_srq_create(dom->pd, &sa, &m->srq);
	if (rc != 0) {
		FI_WARN(&provider, FI_LOG_EP_CTRL, "messaging state: %d\n", rc);
		return fail(fi_code(rc));
	}
	for (uint32_t i = 0; i < kMsgSrqDepth; i++) {
		nicmr_sge s{m->rx_addr + uint64_t{i} * kSlot, static_cast<uint32_t>(kSlot),
			    nicmr_mr_key(m->rx_mr)};
		rc = nicmr_srq_post_recv(m->srq, &s, 1, kMsgWr | kMsgRecvWr | i);
		if (rc != 0)
			return fail(fi_code(rc));
	}
	for (uint32_t i = 0; i < kMsgTxOps; i++)
		m->tx_free[i] = kMsgTxOps - 1 - i;
	m->ntx = kMsgTxOps;
	for (uint32_t i = 0; i < kMsgUnexpPool; i++)
		m->pool_free[i] = kMsgUnexpPool - 1 - i;
	m->npool = kMsgUnexpPool;
	*out = m.release();
	return 0;
}

void msg_close(Msg *m)
{
	if (!m)
		return;
	for (TxOp &o : m->tx)
		if (o.local)
			nicmr_mr_cache_dereg(m->cache, o.local);
	for (uint32_t i = 0; i < m->rx.capacity(); i++) {
		RxOp *x = m->rx.at(i);
		if (x->local) {
			nicmr_mr_cache_dereg(m->cache, x->local);
			x->local = nullptr;
		}
	}
	if (m->srq && nicmr_srq_destroy(m->srq) != 0)
		FI_WARN(&provider, FI_LOG_EP_CTRL, "SRQ still in use at close\n");
	if (m->rx_mr)
		nicmr_mr_dereg(m->rx_mr);
	if (m->tx_mr)
		nicmr_mr_dereg(m->tx_mr);
	unmap(m->rx_slab, kRxSlab);
	unmap(m->tx_slab, kTxSlab);
	unmap(m->pool, kPool);
	delete m;
}

nicmr_srq *msg_srq(const Msg *m)
{
	return m ? m->srq : nullptr;
}

int msg_setopt(Endpoint *ep, int name, const void *val, size_t len)
{
	if (name != FI_OPT_MIN_MULTI_RECV)
		return -FI_ENOPROTOOPT;
	if (!val || len != sizeof(size_t))
		return -FI_EINVAL;
	size_t v;
	std::memcpy(&v, val, sizeof(v));
	if (v == 0)
		return -FI_EINVAL;
	std::lock_guard lk(ep_mu(ep));
	ep_view(ep).msg->min_multi_recv = v;
	return 0;
}

int msg_getopt(Endpoint *ep, int name, void *val, size_t *len)
{
	if (name != FI_OPT_MIN_MULTI_RECV)
		return -FI_ENOPROTOOPT;
	if (!val || !len)
		return -FI_EINVAL;
	if (*len < sizeof(size_t)) {
		*len = sizeof(size_t);
		return -FI_ETOOSMALL;
	}
	std::lock_guard lk(ep_mu(ep));
	const size_t v = ep_view(ep).msg->min_multi_recv;
	std::memcpy(val, &v, sizeof(v));
	*len = sizeof(size_t);
	return 0;
}

ssize_t msg_rx_size_left(Endpoint *ep)
{
	std::lock_guard lk(ep_mu(ep));
	Msg *m = ep_view(ep).msg;
	return static_cast<ssize_t>(std::min(kMsgPosted - m->m.posted(false).size(),
					     kMsgPosted - m->m.posted(true).size()));
}

} // namespace nicmr::fabric
