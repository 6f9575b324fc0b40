/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Messages and tagged messages of the RDM endpoints (fi_msg.cpp) and the hooks that join them
 * to the endpoint's queue pairs (fi_ep.cpp). The endpoint owns its QPs, its native CQ and its
 * lock; the messaging state (Msg) owns the endpoint's shared receive queue, its bounce buffers,
 * the matching engine (fi_match.h) and the protocol's requests. doc/libfabric.md, "Messages",
 * has the protocol.
 */
#ifndef NICMR_FI_MSG_H
#define NICMR_FI_MSG_H

#include <rdma/fi_tagged.h>

#include "fi_internal.h"

namespace nicmr::fabric {

struct Msg;

/* wr_ids of the protocol's work requests: bit 63 marks them (the endpoint's RMA and atomics
 * use their op index, below kEpDepth), bit 62 a receive of the SRQ (the rest: its buffer),
 * bit 61 a rendezvous receive's READ or FIN (the rest: its entry), else a send's op. */
inline constexpr uint64_t kMsgWr = 1ull << 63;
inline constexpr uint64_t kMsgRecvWr = 1ull << 62;
inline constexpr uint64_t kMsgRxOpWr = 1ull << 61;
inline bool msg_wr(uint64_t wr_id)
{
	return (wr_id & kMsgWr) != 0;
}

/* The defaults of the messaging state (doc/libfabric.md, "Messages"). */
inline constexpr size_t kMsgBounce = 8192;     /* payload bytes of a receive buffer: eager limit */
inline constexpr size_t kMsgHdrRoom = 64;      /* room for the header before the payload */
inline constexpr uint32_t kMsgSrqDepth = 256;  /* receive buffers posted on the SRQ */
inline constexpr uint32_t kMsgTxOps = 64;      /* sends in flight (tx_attr->size) */
inline constexpr uint32_t kMsgPosted = 256;    /* posted receives of each kind (rx_attr->size) */
inline constexpr uint32_t kMsgUnexpPool = 256; /* unexpected eager payloads copied out */
inline constexpr uint32_t kMsgUnexpected = 4096; /* unexpected messages held */
inline constexpr uint32_t kMsgRxOps = 256;	 /* rendezvous receives in progress */
inline constexpr uint32_t kMsgNops = 8;		 /* RNR kicks in flight (msg_idle) */

/* The view of an endpoint the messaging code works with (fi_ep.cpp fills it; mu held). */
struct EpView {
	Domain *domain;
	Msg *msg;
	Cq *tx_cq; /* bound with FI_TRANSMIT */
	Cq *rx_cq; /* bound with FI_RECV */
	Cntr *send_cntr, *recv_cntr;
	bool enabled;
	EpAddr addr;
	bool directed; /* FI_DIRECTED_RECV: a receive's src_addr selects its sender */
	bool source;   /* FI_SOURCE: receive completions carry their source */
};
/* A peer's QP as the protocol posts on it: peer is the endpoint's handle of it (its requests
 * in flight are counted for its recovery). */
struct PeerRef {
	void *peer;
	nicmr_qp *qp;
};

/* ---- fi_ep.cpp's hooks for the messaging code */
Endpoint *ep_msg_of(struct fid_ep *fep);
FiLock &ep_mu(Endpoint *ep);
EpView ep_view(Endpoint *ep);
/* The QP to the peer fi_addr names, or to the endpoint at address a (a rendezvous's sender):
 * made on first use, recovered when broken; one request more in flight on it. ep mu held.
 * post.cpp's codes: -FI_EINVAL / -FI_EADDRNOTAVAIL (no such peer), -FI_EAGAIN (a broken pair
 * still draining), -FI_ENOSPC. */
int ep_peer(Endpoint *ep, fi_addr_t dest, PeerRef *out);
int ep_peer_at(Endpoint *ep, const EpAddr &a, PeerRef *out);
/* The address of a rendezvous's sender, for ep_peer_at: the remote peer whose RC QP via_qpn
 * the RTS arrived on, else the endpoint of this device its RTS names (device, port, qpn).
 * ep mu held. */
EpAddr ep_src(Endpoint *ep, uint32_t via_qpn, uint64_t device, uint32_t port, uint32_t qpn);
/* The source of a message that arrived on the local QP via_qpn as an fi_addr_t of the
 * endpoint's AV: the remote peer whose RC QP it is, the endpoint itself, or the endpoint of
 * this device that made that responder QP; FI_ADDR_NOTAVAIL when the AV holds no entry of that
 * name (or none is bound). Receive path, ep mu held: no allocation, no system call (locks:
 * fabric->mu for a sender of this device, the AV's). */
fi_addr_t ep_src_fi(Endpoint *ep, uint32_t via_qpn);
/* The endpoint's op_flags for calls without a flags parameter (fi_endpoint(3): tx_attr's or
 * rx_attr's, as the endpoint was opened), and whether its CQ was bound for that direction with
 * FI_SELECTIVE_COMPLETION (then only operations with FI_COMPLETION make a CQ entry on
 * success). Fixed once the endpoint is enabled: no lock. */
uint64_t ep_op_flags(const Endpoint *ep, bool tx);
bool ep_selective(const Endpoint *ep, bool tx);
/* A request ep_peer counted completed (ok false: its pair is broken) or was not posted. */
void ep_peer_done(void *peer, bool ok);
/* Polls the endpoint's CQ (mu held). */
void ep_progress_locked(Endpoint *ep);

/* ---- fi_msg.cpp's side */
/* Makes the messaging state of an endpoint of dom: the SRQ in dom's PD with kMsgSrqDepth
 * registered buffers posted, the send buffers, the matching engine. 0, -FI_ENOMEM, or the
 * device's codes. Slow path. */
int msg_open(Domain *dom, Msg **out);
/* Frees it, once no QP uses its SRQ any more. */
void msg_close(Msg *m);
nicmr_srq *msg_srq(const Msg *m);
/* The protocol's completions (receives of the SRQ, the protocol's sends, READs and FINs),
 * from the endpoint's CQ: ep mu held, no CQ lock held. */
void msg_completions(Endpoint *ep, const nicmr_wc *wc, int n);
/* A progress turn that found the endpoint's CQ empty (ep mu held): rings the QP of a SEND
 * that waits on RNR now and then (fi_msg.cpp). */
void msg_idle(Endpoint *ep);
/* fi_setopt / fi_getopt of FI_OPT_ENDPOINT options the messaging code owns:
 * FI_OPT_MIN_MULTI_RECV. -FI_ENOPROTOOPT for others. */
int msg_setopt(Endpoint *ep, int name, const void *val, size_t len);
int msg_getopt(Endpoint *ep, int name, void *val, size_t *len);
/* Receives that can still be posted (fi_rx_size_left). */
ssize_t msg_rx_size_left(Endpoint *ep);

extern struct fi_ops_msg msg_ops;
extern struct fi_ops_tagged tagged_ops;

} // namespace nicmr::fabric

#endif
