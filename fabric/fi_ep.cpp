/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RDM endpoints over native RC queue pairs (nicmr.h, "Data path").
 *
 *   Endpoint E (domain D, port p) ── native CQ (kEpDepth) ── address QP (connected to itself:
 *      │                                                     E's name; E writing to itself)
 *      └─ peers, by the peer's address QP number, made on first use:
 *           requester QP (D's PD, port p)  <── loopback wire ──>  responder QP (peer's PD, its
 * port)
 *
 * RC QPs are connected, RDM endpoints are not: on the first request to a peer, E makes a
 * connected pair, both ends its own (on its CQ), the responder in the peer domain's PD because
 * the device checks the target's keys against the responder QP's PD. Both endpoints live on the
 * same device (the device model's ports 1 and 2, joined by its wire): endpoints take port 1 and
 * port 2 in turn as they open, and a pair always runs from the initiator's port to the other
 * one, whichever port the peer took (the model's wire carries nothing between two QPs of one
 * port, other than a QP connected to itself). The peer's domain cannot close while E's responder QP
 * in its PD lives (the PD is busy).
 *
 * A peer of another device (another process or host; the device's port 1 on the UDP wire) is
 * different: each side makes its own end, connected by a handshake on the wire between the
 * endpoints' UD QPs ("Connections across processes" below; doc/libfabric.md). E's name is then
 * its UD QP's number with the wire port's GID and UDP port (struct fi_nicmr_name).
 *
 * Every request is signalled: its completion (or error) reaches the bound CQ and counters when
 * someone progresses the endpoint (fi_cq_read, fi_cntr_read / wait, or a post that needs room).
 * A failed request puts its pair in ERR (both ends, for a remote access error); the pair is
 * recovered (2RST, INIT, RTR, RTS) at the next post to that peer once its flushed requests
 * have completed. Atomics fetch into a per-endpoint scratch MR (a slot per request) and the
 * result is copied, in host order, to the application's buffer at completion.
 *
 * Locks: Endpoint::mu (posting and progress: uncontended unless the application shares the
 * endpoint between threads, which FI_THREAD_SAFE allows) before Cq::mu, and before the device's
 * DeviceShare::mu (slow: the endpoint registry, and every QP made on an endpoint's CQ, since
 * two creations on one CQ must not meet) and the GSI QP's mu (fi_sidr.cpp). The native calls
 * under them take no lock. In a domain
 * opened with FI_THREAD_DOMAIN or FI_THREAD_COMPLETION the application serialises those calls
 * itself and the endpoint's, CQs' and counters' locks are no-ops (FiLock), the AV's too under
 * FI_THREAD_DOMAIN: posting and progress then take no lock once a peer's pair exists.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>

#include "fi_handshake.h"
#include "fi_internal.h"
#include "fi_msg.h"

namespace nicmr::fabric {

namespace {

enum class Kind : uint8_t { write, read, atomic, fetch };

/* Send queue depth of a QP that posts (requester and self QPs): the RMA requests (kEpDepth),
 * the sends (kMsgTxOps) and the rendezvous READs and FINs share it, and an inline request
 * (an RTS, a short eager send, an inline write) takes two of its 64-byte slots. */
constexpr uint32_t kReqDepth = 4 * kEpDepth;

/* A peer's connection state (the handshake, "Connections across processes" above). */
enum class Conn : uint8_t {
	up,	  /* requests may be posted */
	req_sent, /* our REQ is out, no REP yet: resent on the timer */
	rep_sent, /* the peer's REQ answered with REP, no RTU yet: REP resent on the timer */
	failed	  /* the handshake gave up: the next post says -FI_ETIMEDOUT and forgets it */
};

struct Peer {
	nicmr_qp *req = nullptr;
	nicmr_qp *resp = nullptr; /* == req for the endpoint itself; null for a remote peer */
	uint32_t qpn = 0;	  /* the peer's address QP (its key in Endpoint::peers) */
	uint32_t inflight = 0;
	bool broken = false;
	/* A remote peer (another device, over the wire): its address, its RC QP and PSN. */
	bool remote = false;
	Conn conn = Conn::up;
	uint8_t gid[16] = {};
	uint16_t udp_port = 0;
	uint32_t ud_qpn = 0;
	uint32_t rqpn = 0; /* its RC QP, 0 until known */
	/* Its endpoint's service when its domain names endpoints by sockaddrs (its REQ or REP
	 * says so; 0 otherwise): what a receive's source is matched by (name_same). */
	uint16_t service = 0;
	uint32_t tries = 0;
	uint64_t deadline_ns = 0;
	uint64_t conn_id = 0;
	/* Its entry in the endpoint's AV as a receive's source (ep_src_fi): FI_ADDR_NOTAVAIL
	 * until found; checked against the AV at each use. */
	fi_addr_t src = FI_ADDR_NOTAVAIL;
};

/* A peer by its name: same-device peers and remote ones alike (GID 0 and UDP port 0 for a
 * device without a wire). */
struct PeerKey {
	uint8_t gid[16];
	uint32_t qpn;
	uint16_t udp_port;
	bool operator==(const PeerKey &o) const
	{
		return qpn == o.qpn && udp_port == o.udp_port && std::memcmp(gid, o.gid, 16) == 0;
	}
};
/* A remote peer's wire name as rpeers keys it (remote_peer_of finds it so), with the service
 * its handshake named: the source a receive from the QP made for it names. */
EpAddr name_of(const PeerKey &k, const Peer &p)
{
	EpAddr a{};
	a.kind = FI_NICMR_NAME_WIRE;
	a.udp_port = k.udp_port;
	std::memcpy(a.gid, k.gid, 16);
	a.qpn = k.qpn;
	a.service = p.service;
	return a;
}

struct PeerKeyHash {
	size_t operator()(const PeerKey &k) const noexcept
	{
		uint64_t a, b;
		std::memcpy(&a, k.gid, 8);
		std::memcpy(&b, k.gid + 8, 8);
		return std::hash<uint64_t>{}(a ^ (b * 0x9e3779b97f4a7c15ull) ^
					     (uint64_t{k.qpn} << 16 | k.udp_port));
	}
};
PeerKey key_of(const uint8_t gid[16], uint16_t udp_port, uint32_t qpn)
{
	PeerKey k{};
	std::memcpy(k.gid, gid, 16);
	k.qpn = qpn;
	k.udp_port = udp_port;
	return k;
}

struct Op {
	void *context = nullptr;
	uint64_t flags = 0; /* the completion's flags */
	Peer *peer = nullptr;
	void *result = nullptr; /* fetching atomics */
	Kind kind = Kind::write;
	bool report = true; /* false: inject (errors are still reported) */
	/* The local buffer's registration from the domain's cache (a request without a
	 * descriptor in a domain without FI_MR_LOCAL), released when the request completes. */
	nicmr_mr *local = nullptr;
};

/* A stub of any fi_ops_* member: -FI_ENOSYS. */
template <typename F> struct Stub;
template <typename R, typename... A> struct Stub<R (*)(A...)> {
	static R fn(A...) { return static_cast<R>(-FI_ENOSYS); }
};

/* A responder QP another endpoint of this device made to this one (the initiator's SENDs
 * arrive on it), with that initiator's name and its entry in this endpoint's AV once found
 * (ep_src_fi). */
struct Inbound {
	nicmr_qp *qp;
	EpAddr from;
	fi_addr_t src;
};

} // namespace

struct Endpoint {
	struct fid_ep fid; /* first */
	Domain *domain = nullptr;
	Fabric *fabric = nullptr;
	nicmr_cq *ncq = nullptr;
	nicmr_qp *self = nullptr;
	uint32_t port = 1;
	uint64_t device_id = 0;
	Av *av = nullptr;
	Cq *cq = nullptr;
	/* fi_endpoint(3) op_flags of the calls without flags (the info's tx_attr / rx_attr),
	 * and FI_SELECTIVE_COMPLETION of the CQ bound for each direction (ep_bind). */
	uint64_t tx_op_flags = 0, rx_op_flags = 0;
	bool selective_tx = false, selective_rx = false;
	Cntr *wcntr = nullptr; /* FI_WRITE: writes and non-fetching atomics */
	Cntr *rcntr = nullptr; /* FI_READ: reads and fetching atomics */
	Eq *eq = nullptr;
	bool enabled = false;
	FiLock mu; /* a no-op in a serialized domain (fi_internal.h) */
	std::unordered_map<uint32_t, Peer> peers; /* mu; by the peer's address QP number */
	Op ops[kEpDepth];
	uint32_t free_ops[kEpDepth];
	uint32_t nfree = 0;
	uint64_t *scratch = nullptr; /* kEpDepth 8-byte atomic results */
	nicmr_mr *scratch_mr = nullptr;
	nicmr_mr_cache *local_cache = nullptr; /* the domain's, without FI_MR_LOCAL */
	/* Messages hook: the messaging state (fi_msg.cpp: the SRQ every QP receiving for this
	 * endpoint takes its buffers from, the matching engine), the CQ and counters receives
	 * and sends complete to, and the responder QPs other endpoints made to this one (they
	 * receive into its SRQ and report to its CQ, so they go when it goes; one whose
	 * initiator closed first waits in dead until this endpoint's progress destroys it:
	 * only the thread that polls a QP's CQ may destroy the QP). */
	Msg *msg = nullptr;
	Cq *rcq = nullptr;	      /* FI_RECV */
	Cntr *scntr = nullptr;	      /* FI_SEND */
	Cntr *rvcntr = nullptr;	      /* FI_RECV */
	std::vector<Inbound> inbound; /* fabric->sh->mu */
	std::vector<nicmr_qp *> dead; /* fabric->sh->mu */
	std::atomic<bool> has_dead{false};
	/* The wire (a device whose port kWirePort has an address): the handshake's UD QP, the
	 * endpoint's address; the port's GID and UDP port; handshakes in progress (timers run
	 * only while there are some). */
	bool wire = false;
	nicmr_qp *ud = nullptr;
	uint8_t gid[16] = {};
	uint16_t udp_port = 0;
	uint16_t peer_udp_port = 0; /* where the device sends: peers must listen there */
	/* The wire port's active path MTU (nicmr_port_mtu; 1024 where the device cannot say):
	 * sent in REQ and REP, and each pair connects at the smaller of its two ends'. */
	uint32_t mtu = 1024;
	uint32_t name_qpn = 0; /* the name's qpn: the UD QP's, or self's without a wire */
	/* In a sockaddr domain, the endpoint's service (the port of its name; fi_sidr.cpp
	 * svc_bind), else 0. */
	uint16_t service = 0;
	uint32_t hs_pending = 0;
	uint32_t ud_send_next = 0;
	uint64_t conn_ids = 0;
	std::unordered_map<PeerKey, Peer, PeerKeyHash> rpeers; /* mu; remote peers */
	/* FI_DIRECTED_RECV and FI_SOURCE in the endpoint's caps (fi_msg.cpp looks up each
	 * receive's source only with one of them); the AV entry of its own name (mu). */
	bool directed = false;
	bool source = false;
	fi_addr_t self_src = FI_ADDR_NOTAVAIL;
};

namespace {

constexpr uint64_t kMsgFlags = FI_COMPLETION | FI_INJECT | FI_FENCE | FI_TRANSMIT_COMPLETE |
			       FI_DELIVERY_COMPLETE | FI_INJECT_COMPLETE;

/* The wire: the device port whose address names endpoints, the handshake's UD QP (receive and
 * send slots in the endpoint's scratch MR after the atomics' page; a receive slot holds the
 * GRH and the largest datagram, so no datagram puts the QP in ERR), its Q_Key, and the
 * retransmission of REQ and REP: every kHsFirstNs doubled up to kHsMaxNs, kHsTries times
 * (about 13 s) before the handshake gives up (doc/libfabric.md, "Connections"). */
constexpr uint32_t kWirePort = 1;
constexpr uint32_t kUdRecv = 16;
constexpr uint32_t kUdSend = 16;
constexpr size_t kUdSlot = NICMR_UD_GRH_BYTES + 4096 + 24; /* 4160: 64-byte aligned */
constexpr size_t kUdSendSlot = 64;
constexpr size_t kAtomicBytes = 4096;
constexpr size_t kScratchBytes =
	(kAtomicBytes + kUdRecv * kUdSlot + kUdSend * kUdSendSlot + 4095) & ~size_t{4095};
constexpr uint64_t kHsFirstNs = 20'000'000;
constexpr uint64_t kHsMaxNs = 640'000'000;
constexpr uint32_t kHsTries = 24;
/* The native CQ of an endpoint on the wire: its requests (kEpDepth) and the UD QP's. */
constexpr uint32_t kWireCqDepth = 2 * kEpDepth;

uint64_t now_ns()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

Endpoint *ep_of(struct fid_ep *fep);

/* CQE syndrome to the fi_cq error code. */
int err_of(uint8_t status)
{
	switch (status) {
	case NICMR_WC_REMOTE_ACCESS:
	case NICMR_WC_LOCAL_PROT:
	case NICMR_WC_LOCAL_ACCESS:
		return FI_EACCES;
	case NICMR_WC_WR_FLUSH:
		return FI_ECANCELED;
	case NICMR_WC_REMOTE_INVAL_REQ:
		return FI_EINVAL;
	default:
		return FI_EIO;
	}
}

void reap_dead(Endpoint *ep);

/* ---- Connections across processes ------------------------------------------------------
 *
 * A peer on another device is reached over the wire: the endpoint's first request to it makes
 * one RC QP for it (peer_qp_create: the endpoint's PD and CQ) and sends a REQ datagram from its
 * UD QP to the peer's (its name's qpn) with that QP's number and first PSN; the request itself
 * returns -FI_EAGAIN. The peer, when the application next progresses it (a CQ or counter read,
 * any post), makes its own QP for the endpoint, connects it (nicmr_qp_connect_remote) and
 * answers REP with its QP and PSN; the requester connects, answers RTU and the peer is up on
 * both sides: its requests and the peer's go on the same pair, each side's QP the responder of
 * the other's requests (in its own domain's PD: its keys are checked there). REQ and REP are
 * resent on a timer until REP or RTU arrive (UD loses datagrams); a duplicate REQ is answered
 * with the REP again and a duplicate REP with the RTU. This is the three-way exchange of the
 * IBTA connection manager (IBTA vol. 1, chapter 12: REQ, REP, RTU, REQ and REP retried on a
 * timeout), and the connection per peer made on the first transfer is what libfabric's rxm
 * keeps in its connection map over verbs (prov/rxm/src/rxm_conn.c), carried here on UD
 * datagrams instead of rdma_cm.
 *
 * Both sides connecting at once need no winner, unlike rxm (rxm_cmap_process_connreq, in
 * state CONNREQ_SENT, compares the two names and rejects one of the two requests): each side
 * holds one QP per peer, made by its own REQ, and a REQ that meets it answers with it, so the
 * two REQs describe the same pair and each side connects its QP to the other's.
 *
 * A REQ naming another RC QP than the one a peer is connected to (the peer replaced its QP
 * after an error, or is a new endpoint at the same address) replaces ours once none of our
 * requests is in flight on it. ep->mu held throughout; slow paths. */

uint8_t *ud_recv_slot(Endpoint *ep, uint32_t i)
{
	return reinterpret_cast<uint8_t *>(ep->scratch) + kAtomicBytes + i * kUdSlot;
}

int ud_post_recv(Endpoint *ep, uint32_t i)
{
	return ud_post_slot(ep->ud, ep->scratch_mr, ud_recv_slot(ep, i), kUdSlot, i);
}

/* Makes an RC QP of endpoint owner for a peer: in pd, on port, reporting its sends and
 * receives to the owner's CQ and taking its receives from the owner's SRQ (messages,
 * fi_msg.cpp). The one place peer QPs are made. */
int peer_qp_create(Endpoint *owner, nicmr_pd *pd, uint32_t port, uint32_t depth, nicmr_qp **out)
{
	const nicmr_qp_attr a{port, owner->ncq, depth, owner->ncq, 0, 0, msg_srq(owner->msg)};
	return nicmr_qp_create_attr(pd, &a, out);
}

/* Sends one handshake message to a remote peer. A full send queue drops it: the timer sends
 * it again. */
void hs_send(Endpoint *ep, Peer &p, uint8_t type)
{
	nicmr_qp_addr la{};
	if (nicmr_qp_local(p.req, 0, &la) != 0)
		return;
	HsFields f;
	f.type = type;
	f.src_udp_port = ep->udp_port;
	std::memcpy(f.src_gid, ep->gid, 16);
	f.src_ud_qpn = nicmr_qp_num(ep->ud);
	f.rc_qpn = nicmr_qp_num(p.req);
	f.psn = la.psn;
	f.dst_rc_qpn = type == kMsgReq ? 0 : p.rqpn;
	f.conn_id = p.conn_id;
	f.mtu = ep->mtu;
	f.service = ep->service;
	const HsMsg m = hs_encode(f);
	const uint32_t slot = ep->ud_send_next++ % kUdSend;
	uint8_t *buf = reinterpret_cast<uint8_t *>(ep->scratch) + kAtomicBytes + kUdRecv * kUdSlot +
		       slot * kUdSendSlot;
	std::memcpy(buf, &m, sizeof(m));
	nicmr_ud_dest d{};
	std::memcpy(d.gid, p.gid, 16);
	d.qpn = p.ud_qpn;
	d.q_key = kHsQkey;
	int rc = nicmr_post_send_ud(ep->ud, reinterpret_cast<uintptr_t>(buf), sizeof(m),
				    nicmr_mr_key(ep->scratch_mr), &d, 0, kUdRecv + slot,
				    NICMR_SEND_SIGNALED);
	if (rc != 0)
		FI_INFO(&provider, FI_LOG_EP_CTRL, "handshake %u to QP 0x%x not sent: %d\n", type,
			p.ud_qpn, rc);
	else
		FI_INFO(&provider, FI_LOG_EP_CTRL, "sent %u to QP 0x%x: RC QP 0x%x for 0x%x\n",
			type, p.ud_qpn, nicmr_qp_num(p.req), p.rqpn);
}

void hs_arm(Peer &p, bool first)
{
	if (first)
		p.tries = 0;
	uint64_t wait = kHsFirstNs << (p.tries < 5 ? p.tries : 5);
	if (wait > kHsMaxNs)
		wait = kHsMaxNs;
	p.deadline_ns = now_ns() + wait;
}

/* Connects p's QP to the peer's RC QP rqpn at the smaller of the two ports' path MTUs, as the
 * IBTA CM's REQ and REP agree on one (chapter 12): each end checks the other's packets
 * against its own (IBTA 9.7.6.1.3: FIRST and MIDDLE carry exactly one PMTU), so the two must
 * be the same, and neither may exceed what its link carries. */
int hs_connect(Endpoint *ep, Peer &p, uint32_t rqpn, uint32_t rpsn, uint32_t peer_mtu)
{
	nicmr_qp_remote r{};
	r.size = sizeof(r);
	r.qpn = rqpn;
	std::memcpy(r.gid, p.gid, 16);
	r.psn = rpsn;
	r.mtu = peer_mtu < ep->mtu ? peer_mtu : ep->mtu;
	int rc = nicmr_qp_connect_remote(p.req, &r);
	if (rc == 0)
		p.rqpn = rqpn;
	return rc;
}

/* A remote peer's QP in RESET, made anew (its old one, if any, destroyed). */
int hs_new_qp(Endpoint *ep, Peer &p)
{
	if (p.req) {
		nicmr_qp_destroy(p.req);
		p.req = nullptr;
	}
	p.rqpn = 0;
	p.broken = false;
	int rc;
	{
		/* Every QP made on an endpoint's CQ is made under the device's mu: an endpoint of
		 * this device may be making a responder on this CQ now (peer_at), and two
		 * creations on one CQ would take the same slot of its QP table
		 * (nicmr_qp_create_attr is not safe against another on the same CQ). */
		std::lock_guard lk(ep->fabric->sh->mu);
		rc = peer_qp_create(ep, ep->domain->pd, kWirePort, kReqDepth, &p.req);
	}
	if (rc != 0)
		p.req = nullptr;
	return rc;
}

void hs_set(Endpoint *ep, Peer &p, Conn c)
{
	const bool was = p.conn == Conn::req_sent || p.conn == Conn::rep_sent;
	const bool is = c == Conn::req_sent || c == Conn::rep_sent;
	if (was && !is)
		ep->hs_pending--;
	if (!was && is)
		ep->hs_pending++;
	p.conn = c;
}

/* A handshake message hs_decode accepted. */
void hs_receive(Endpoint *ep, const HsFields &m)
{
	const uint32_t src_ud = m.src_ud_qpn, rc = m.rc_qpn, psn = m.psn;
	const uint32_t dst = m.dst_rc_qpn, mtu = m.mtu;
	const PeerKey key = key_of(m.src_gid, m.src_udp_port, src_ud);
	auto it = ep->rpeers.find(key);
	FI_INFO(&provider, FI_LOG_EP_CTRL, "got %u from QP 0x%x: RC QP 0x%x for 0x%x (state %d)\n",
		m.type, src_ud, rc, dst,
		it == ep->rpeers.end() ? -1 : static_cast<int>(it->second.conn));
	if (m.type == kMsgReq) {
		Peer *p = nullptr;
		if (it == ep->rpeers.end()) {
			try {
				p = &ep->rpeers.emplace(key, Peer{}).first->second;
			} catch (const std::bad_alloc &) {
				return; /* the REQ comes again */
			}
			p->remote = true;
			std::memcpy(p->gid, m.src_gid, 16);
			p->udp_port = m.src_udp_port;
			p->ud_qpn = src_ud;
			p->service = m.service;
			p->conn = Conn::up; /* not pending until hs_set below */
			if (hs_new_qp(ep, *p) != 0) {
				FI_WARN(&provider, FI_LOG_EP_CTRL, "no QP for peer QP 0x%x\n",
					src_ud);
				ep->rpeers.erase(key);
				return;
			}
		} else {
			p = &it->second;
			if (p->conn != Conn::req_sent && p->rqpn == rc) {
				hs_send(ep, *p, kMsgRep); /* a duplicate REQ: our REP was lost */
				return;
			}
			if (p->conn != Conn::req_sent) {
				/* A new connection from the peer: replace ours once idle. */
				if (p->inflight != 0)
					return; /* the REQ comes again */
				if (hs_new_qp(ep, *p) != 0)
					return;
			}
		}
		p->conn_id = m.conn_id;
		int ret = hs_connect(ep, *p, rc, psn, mtu);
		if (ret != 0) {
			FI_WARN(&provider, FI_LOG_EP_CTRL, "connect to QP 0x%x: %d\n", rc, ret);
			hs_set(ep, *p, Conn::failed);
			return;
		}
		hs_set(ep, *p, Conn::rep_sent);
		hs_arm(*p, true);
		hs_send(ep, *p, kMsgRep);
		return;
	}
	if (it == ep->rpeers.end() || !it->second.req || nicmr_qp_num(it->second.req) != dst)
		return; /* an answer to a QP we no longer have */
	Peer &p = it->second;
	if (m.type == kMsgRep) {
		p.service = m.service;
		if (p.conn == Conn::req_sent) {
			int ret = hs_connect(ep, p, rc, psn, mtu);
			if (ret != 0) {
				FI_WARN(&provider, FI_LOG_EP_CTRL, "connect to QP 0x%x: %d\n", rc,
					ret);
				hs_set(ep, p, Conn::failed);
				return;
			}
		} else if (p.rqpn != rc) {
			return;
		}
		hs_set(ep, p, Conn::up);
		hs_send(ep, p, kMsgRtu);
	} else if (m.type == kMsgRtu) {
		if (p.conn == Conn::rep_sent && p.rqpn == rc)
			hs_set(ep, p, Conn::up);
	}
}

void hs_completion(Endpoint *ep, const nicmr_wc &wc)
{
	const uint32_t slot = static_cast<uint32_t>(wc.wr_id);
	if (wc.wr_id >= kUdRecv)
		return; /* a send left (or failed: the timer sends again) */
	if (wc.status == NICMR_WC_SUCCESS && wc.byte_len >= NICMR_UD_GRH_BYTES) {
		HsFields m;
		const HsRefusal why = hs_decode(ud_recv_slot(ep, slot) + NICMR_UD_GRH_BYTES,
						wc.byte_len - NICMR_UD_GRH_BYTES, &m);
		if (why == HsRefusal::none)
			hs_receive(ep, m);
		else
			FI_INFO(&provider, FI_LOG_EP_CTRL, "handshake datagram refused (%u)\n",
				static_cast<unsigned>(why));
	}
	if (wc.status == NICMR_WC_SUCCESS || wc.status == NICMR_WC_WR_FLUSH) {
		if (ud_post_recv(ep, slot) != 0)
			FI_WARN(&provider, FI_LOG_EP_CTRL, "handshake receive not reposted\n");
	}
}

void hs_timers(Endpoint *ep)
{
	const uint64_t now = now_ns();
	for (auto &kv : ep->rpeers) {
		Peer &p = kv.second;
		if ((p.conn != Conn::req_sent && p.conn != Conn::rep_sent) || now < p.deadline_ns)
			continue;
		if (++p.tries >= kHsTries) {
			FI_WARN(&provider, FI_LOG_EP_CTRL, "no answer from QP 0x%x\n", p.ud_qpn);
			hs_set(ep, p, Conn::failed);
			continue;
		}
		hs_send(ep, p, p.conn == Conn::req_sent ? kMsgReq : kMsgRep);
		hs_arm(p, false);
	}
}

void progress_locked(Endpoint *ep)
{
	/* Completion path, ep->mu held: no allocation, no system call; the native poll takes no
	 * lock, the CQ ring's mutex is taken once per batch. A sockaddr endpoint's empty turn
	 * also tries the GSI QP's lock (never waits) to answer SIDR datagrams: a slow path. */
	nicmr_wc wc[16];
	/* Messages hook: the protocol's completions (receives of the SRQ, its SENDs, READs and
	 * FINs: msg_wr) are handed to fi_msg.cpp after the CQ's lock is dropped; each makes at
	 * most one entry in the transmit or the receive CQ, so no more are polled than both
	 * have room for. */
	nicmr_wc mwc[16];
	/* Messages hook: responders whose initiator closed are destroyed here, on the thread
	 * that polls their CQ (an atomic load when there are none). */
	if (ep->has_dead.load(std::memory_order_acquire))
		reap_dead(ep);
	for (;;) {
		int want = 16;
		for (Cq *c : {ep->cq, ep->rcq}) {
			if (!c)
				continue;
			std::lock_guard lk(c->mu);
			size_t room = cq_room(c);
			if (room < static_cast<size_t>(want))
				want = static_cast<int>(room);
		}
		if (want == 0)
			break;
		const int n = nicmr_cq_poll(ep->ncq, wc, want);
		if (n <= 0) {
			/* Messages hook: an empty turn (the RNR kick, fi_msg.cpp msg_idle); a
			 * sockaddr endpoint's also answers the device's SIDR datagrams (a try-lock
			 * and a poll: fi_sidr.cpp). */
			if (n == 0) {
				msg_idle(ep);
				if (ep->service)
					gsi_poll(ep->fabric->sh);
			}
			break;
		}
		int nm = 0;
		std::unique_lock<FiLock> lk;
		if (ep->cq)
			lk = std::unique_lock(ep->cq->mu);
		for (int i = 0; i < n; i++) {
			if (ep->ud && wc[i].qp_num == nicmr_qp_num(ep->ud)) {
				/* A handshake datagram (slow path: it may make a QP). */
				hs_completion(ep, wc[i]);
				continue;
			}
			if (msg_wr(wc[i].wr_id)) {
				mwc[nm++] = wc[i];
				continue;
			}
			const uint32_t idx = static_cast<uint32_t>(wc[i].wr_id);
			Op &o = ep->ops[idx];
			o.peer->inflight--;
			/* A cache hit's release: the cache's lock, no system call (the
			 * registration stays for the next request on the buffer). */
			if (o.local) {
				nicmr_mr_cache_dereg(ep->local_cache, o.local);
				o.local = nullptr;
			}
			const bool ok = wc[i].status == NICMR_WC_SUCCESS;
			Cntr *c = (o.kind == Kind::write || o.kind == Kind::atomic) ? ep->wcntr
										    : ep->rcntr;
			if (ok) {
				/* The device fetched in host byte order (Domain::atomics). */
				if (o.kind == Kind::fetch)
					std::memcpy(o.result, &ep->scratch[idx], 8);
				if (o.report && ep->cq)
					cq_push(ep->cq, {o.context, o.flags, 0, 0});
				/* relaxed: a count; readers order nothing else by it. */
				if (c)
					c->value.fetch_add(1, std::memory_order_relaxed);
			} else {
				o.peer->broken = true;
				if (ep->cq)
					cq_push(ep->cq, {o.context, o.flags, err_of(wc[i].status),
							 wc[i].syndrome});
				if (c)
					c->errs.fetch_add(1, std::memory_order_relaxed);
			}
			ep->free_ops[ep->nfree++] = idx;
		}
		if (lk.owns_lock())
			lk.unlock();
		if (nm)
			msg_completions(ep, mwc, nm);
		if (n < want)
			break;
	}
	if (ep->hs_pending)
		hs_timers(ep);
}

/* The target whose inbound list still holds p's responder QP (not destroyed by the target's
 * close), or null (fab->sh->mu held); erased from the list with erase. */
Endpoint *resp_live(Endpoint *ep, const Peer &p, bool erase)
{
	auto t = ep->fabric->sh->eps.find(p.qpn);
	if (t == ep->fabric->sh->eps.end())
		return nullptr;
	auto &in = t->second->inbound;
	auto it = std::find_if(in.begin(), in.end(),
			       [&p](const Inbound &i) { return i.qp == p.resp; });
	if (it == in.end())
		return nullptr;
	if (erase)
		in.erase(it);
	return t->second;
}

/* Hands a responder QP to its target to destroy (fab->sh->mu held): it reports to the target's
 * CQ, and a QP is destroyed by the thread that polls its CQ (nicmr_qp_destroy). */
void resp_retire(Endpoint *target, nicmr_qp *q)
{
	try {
		target->dead.push_back(q);
	} catch (const std::bad_alloc &) {
		nicmr_qp_destroy(q); /* no memory to defer it: at once */
		return;
	}
	/* release: the list's new entry is seen by the progress that acquires the flag (it
	 * then takes fab->sh->mu anyway). */
	target->has_dead.store(true, std::memory_order_release);
}

/* Destroys the responders handed over by initiators that closed (the endpoint's polling
 * thread, ep->mu held). Slow path: only after an initiator's close. */
void reap_dead(Endpoint *ep)
{
	std::lock_guard lk(ep->fabric->sh->mu);
	for (nicmr_qp *q : ep->dead)
		nicmr_qp_destroy(q);
	ep->dead.clear();
	ep->has_dead.store(false, std::memory_order_relaxed);
}

/* Destroys a peer's QPs (the responder first: it never posts). A responder reports to the
 * target's CQ: the target destroys it (resp_retire), or did at its close already. */
void peer_destroy(Endpoint *ep, Peer &p)
{
	if (p.resp && p.resp != p.req && p.resp != ep->self) {
		std::lock_guard lk(ep->fabric->sh->mu);
		if (Endpoint *t = resp_live(ep, p, true))
			resp_retire(t, p.resp);
	}
	if (p.req && p.req != ep->self)
		nicmr_qp_destroy(p.req);
	p.req = p.resp = nullptr;
}

/* A peer on another device (over the wire), its handshake started on first use: 0 once it
 * is up; -FI_EAGAIN while the handshake runs (it is progressed here); -FI_ETIMEDOUT once
 * when it gave up (the next request starts again); -FI_EADDRNOTAVAIL when this endpoint has
 * no wire or the name's UDP port is not the one the device sends to. ep->mu held. */
int remote_peer_of(Endpoint *ep, const EpAddr &a, Peer **out)
{
	const PeerKey key = key_of(a.gid, a.udp_port, a.qpn);
	auto it = ep->rpeers.find(key);
	if (it != ep->rpeers.end()) {
		Peer &p = it->second;
		if (p.conn == Conn::up) {
			*out = &p;
			return 0;
		}
		if (p.conn == Conn::failed) {
			if (p.req)
				nicmr_qp_destroy(p.req);
			ep->rpeers.erase(it);
			return -FI_ETIMEDOUT;
		}
		progress_locked(ep);
		if (p.conn == Conn::up) {
			*out = &p;
			return 0;
		}
		return -FI_EAGAIN;
	}
	if (!ep->wire || a.udp_port != ep->peer_udp_port)
		return -FI_EADDRNOTAVAIL;
	Peer *p = nullptr;
	try {
		p = &ep->rpeers.emplace(key, Peer{}).first->second;
	} catch (const std::bad_alloc &) {
		return -FI_ENOMEM;
	}
	p->remote = true;
	std::memcpy(p->gid, a.gid, 16);
	p->udp_port = a.udp_port;
	p->ud_qpn = a.qpn;
	p->conn = Conn::up; /* not pending until hs_set below */
	int ret = hs_new_qp(ep, *p);
	if (ret != 0) {
		ep->rpeers.erase(key);
		FI_WARN(&provider, FI_LOG_EP_DATA, "QP for peer QP 0x%x: %d\n", a.qpn, ret);
		return fi_code(ret); /* -FI_ENOSPC: no QP left on the CQ or the device */
	}
	p->conn_id = ++ep->conn_ids;
	hs_set(ep, *p, Conn::req_sent);
	hs_arm(*p, true);
	hs_send(ep, *p, kMsgReq);
	progress_locked(ep);
	if (p->conn == Conn::up) {
		*out = p;
		return 0;
	}
	return -FI_EAGAIN;
}

EpAddr addr_of(const Endpoint *ep);

/* The handshake QP behind a sockaddr name's service (slow path, ep->mu held): this device's
 * registry for an address of this device, else the peer device's SIDR_REP (fi_sidr.cpp). */
int svc_qpn(Endpoint *ep, const EpAddr &a, uint32_t *qpn)
{
	if (ep->wire && std::memcmp(a.gid, ep->gid, 16) == 0)
		return svc_local(ep->fabric, a.service, qpn) ? 0 : -FI_EADDRNOTAVAIL;
	return svc_resolve(ep->fabric, a.gid, a.service, ep->service, qpn);
}

/* The peer at address a, made on first use (slow path): over the wire for another device's
 * endpoint, else a pair on this device's loopback. A sockaddr name is found by its service
 * (svc_qpn) unless its QP is known already. ep->mu held. */
int peer_at(Endpoint *ep, const EpAddr &named, Peer **out)
{
	EpAddr a = named;
	int ret = 0;
	if (a.service && a.qpn == 0) {
		ret = svc_qpn(ep, a, &a.qpn);
		if (ret != 0)
			return ret;
	}
	/* A sockaddr name says nothing of the device but its address. */
	const bool same_device =
		a.service ? ep->wire && std::memcmp(a.gid, ep->gid, 16) == 0
			  : a.device_id == ep->device_id &&
				    (a.kind == FI_NICMR_NAME_LOCAL
					     ? !ep->wire
					     : ep->wire && a.udp_port == ep->udp_port &&
						       std::memcmp(a.gid, ep->gid, 16) == 0);
	if (!same_device)
		return remote_peer_of(ep, a, out);
	auto it = ep->peers.find(a.qpn);
	if (it != ep->peers.end()) {
		*out = &it->second;
		return 0;
	}
	Fabric *fab = ep->fabric;
	/* Held while the responder QP is made in the peer's PD: the peer endpoint cannot
	 * finish closing (it leaves the registry first), so its domain stays open. */
	std::lock_guard lk(fab->sh->mu);
	auto t = fab->sh->eps.find(a.qpn);
	if (t == fab->sh->eps.end() || (!a.service && t->second->port != a.port))
		return -FI_EADDRNOTAVAIL;
	Endpoint *target = t->second;
	Peer p;
	p.qpn = a.qpn;
	/* The loopback wire joins port 1 and port 2: the responder sits on the other port.
	 * Messages hook: the requester takes its receives from this endpoint's SRQ, the
	 * responder (the QP a SEND to the target arrives on) from the target's, and reports to
	 * the target's CQ (it posts nothing: its sends report nowhere else either), so that it
	 * is the target's QP: the target destroys it. It is published on that CQ while the
	 * target may poll it (the native QP table's release store; every creation on a CQ is
	 * under fab->sh->mu). nicmr_qp_connect's RNR retry count is 7 (without end): a SEND that
	 * finds the SRQ empty waits for a buffer, it does not fail. */
	const uint32_t rport = 3 - ep->port;
	ret = peer_qp_create(ep, ep->domain->pd, ep->port, kReqDepth, &p.req);
	if (ret == 0)
		ret = peer_qp_create(target, target->domain->pd, rport, 2, &p.resp);
	if (ret == 0)
		ret = nicmr_qp_connect(p.req, rport, nicmr_qp_num(p.resp));
	if (ret == 0)
		ret = nicmr_qp_connect(p.resp, ep->port, nicmr_qp_num(p.req));
	auto drop = [&] {
		if (p.resp)
			resp_retire(target, p.resp);
		if (p.req)
			nicmr_qp_destroy(p.req);
	};
	if (ret != 0) {
		FI_WARN(&provider, FI_LOG_EP_DATA, "pair to QP 0x%x: %d\n", a.qpn, ret);
		drop();
		return fi_code(ret); /* -FI_ENOSPC: no QP left on the CQ or the device */
	}
	try {
		/* The initiator's name beside its responder: a receive's source (ep_src_fi). */
		target->inbound.push_back(Inbound{p.resp, addr_of(ep), FI_ADDR_NOTAVAIL});
		try {
			*out = &ep->peers.emplace(a.qpn, p).first->second;
		} catch (const std::bad_alloc &) {
			target->inbound.pop_back();
			throw;
		}
	} catch (const std::bad_alloc &) {
		drop();
		return -FI_ENOMEM;
	}
	return 0;
}

/* The peer for fi_addr, made on first use (slow path). A sockaddr entry keeps the QP its
 * service resolved to, and forgets it when the handshake to it fails (the endpoint there may
 * have been replaced). ep->mu held. */
int peer_of(Endpoint *ep, fi_addr_t fi_addr, Peer **out)
{
	EpAddr a;
	int ret = av_lookup_addr(ep->av, fi_addr, &a);
	if (ret != 0)
		return ret;
	if (a.service && a.qpn == 0) {
		ret = svc_qpn(ep, a, &a.qpn);
		if (ret != 0)
			return ret;
		av_resolved(ep->av, fi_addr, a.qpn);
	}
	ret = peer_at(ep, a, out);
	if (ret == -FI_ETIMEDOUT && a.service) {
		svc_forget(ep->fabric, a.gid, a.service);
		av_resolved(ep->av, fi_addr, 0);
	}
	return ret;
}

/* Brings a broken pair back once its flushed requests are in. ep->mu held. */
int peer_ready(Endpoint *ep, Peer *p)
{
	if (!p->broken)
		return 0;
	progress_locked(ep);
	if (p->inflight)
		return -FI_EAGAIN;
	if (p->remote) {
		/* The peer's QP went to ERR too (a remote access error) and only its owner can
		 * bring it back: a new pair, by a new handshake (its REQ replaces the peer's QP).
		 */
		if (hs_new_qp(ep, *p) != 0)
			return -FI_EAGAIN;
		p->conn_id = ++ep->conn_ids;
		hs_set(ep, *p, Conn::req_sent);
		hs_arm(*p, true);
		hs_send(ep, *p, kMsgReq);
		return -FI_EAGAIN;
	}
	int ret = nicmr_qp_recover(p->req);
	if (ret == 0 && p->resp != p->req) {
		/* A target that closed took its responder with it: nothing to recover. */
		std::lock_guard lk(ep->fabric->sh->mu);
		if (!resp_live(ep, *p, false))
			return -FI_EADDRNOTAVAIL;
		ret = nicmr_qp_recover(p->resp);
	}
	if (ret != 0)
		return fi_code(ret);
	p->broken = false;
	return 0;
}

/* A request as the posting calls describe it. */
struct Req {
	Kind kind;
	const void *buf; /* write source, read destination */
	size_t len;
	void *desc;
	fi_addr_t dest;
	uint64_t addr;
	uint64_t key;
	void *context;
	uint64_t flags; /* FI_* of the call */
	/* atomics */
	enum fi_op op;
	uint64_t operand;
	uint64_t compare;
	void *result;
};

/* Native posting error to the caller's code. */
ssize_t post_code(int rc)
{
	switch (rc) {
	case -ENOSPC:
		return -FI_EAGAIN;
	case -ENOKEY:
	case -EKEYREVOKED:
	case -EACCES:
	case -ERANGE:
		return -FI_EACCES; /* the local descriptor does not cover the buffer */
	case -EOPNOTSUPP:
		return -FI_EOPNOTSUPP;
	default:
		return fi_code(rc);
	}
}

ssize_t post(Endpoint *ep, const Req &r)
{
	/* Posting path: the endpoint's mutex and the AV's under FI_THREAD_SAFE (uncontended with
	 * one thread per endpoint), no lock under FI_THREAD_DOMAIN (the AV's remains under
	 * FI_THREAD_COMPLETION); no allocation and no system call once the peer's pair exists
	 * (its first request makes it, a recovery re-connects it: slow paths). Without
	 * FI_MR_LOCAL a buffer without a descriptor takes the registration cache's lock too, and
	 * its first use (a miss) is a slow-path registration. */
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (r.flags & ~kMsgFlags)
		return -FI_EBADFLAGS;
	if ((r.kind == Kind::write || r.kind == Kind::read) && (r.len == 0 || !r.buf))
		return -FI_EINVAL;
	std::lock_guard lk(ep->mu);
	Peer *p = nullptr;
	ssize_t ret = peer_of(ep, r.dest, &p);
	if (ret == 0 && p == nullptr)
		ret = -FI_EADDRNOTAVAIL; /* every path that returns 0 names its peer */
	if (ret == 0)
		ret = peer_ready(ep, p);
	if (ret == 0 && p->conn != Conn::up)
		ret = -FI_EAGAIN; /* a remote pair being made anew */
	if (ret != 0)
		return ret;
	if (ep->nfree == 0) {
		progress_locked(ep);
		if (ep->nfree == 0)
			return -FI_EAGAIN;
	}
	const uint32_t idx = ep->free_ops[ep->nfree - 1];
	Op &o = ep->ops[idx];
	o.context = r.context;
	o.peer = p;
	o.kind = r.kind;
	o.result = r.result;
	/* fi_cq(3), FI_SELECTIVE_COMPLETION: only a request with FI_COMPLETION (its own, or
	 * the endpoint's op_flags for a call without flags) completes on success; errors always
	 * do. */
	o.report = !(r.flags & FI_INJECT) && (!ep->selective_tx || (r.flags & FI_COMPLETION));
	/* A key that does not fit an mkey is no key: index 0 is never one, so the device
	 * refuses it with an error completion rather than a silent truncation. */
	const uint32_t rkey = r.key > UINT32_MAX ? 0 : static_cast<uint32_t>(r.key);
	unsigned nflags = NICMR_SEND_SIGNALED | ((r.flags & FI_FENCE) ? NICMR_SEND_FENCE : 0);
	uint32_t lkey = 0;
	uint64_t laddr = reinterpret_cast<uintptr_t>(r.buf);
	const bool inject = r.kind == Kind::write &&
			    ((r.flags & FI_INJECT) || (!r.desc && r.len <= kInjectSize));
	if (r.desc && (r.kind == Kind::read || (r.kind == Kind::write && !inject))) {
		const Mr *m = static_cast<const Mr *>(r.desc);
		lkey = nicmr_mr_key(m->mr);
		/* The buffer's address in the key's space (a vectored MR's runs translate it). */
		if (mr_local_addr(m, r.buf, r.len, &laddr) != 0)
			return -FI_EACCES; /* the local descriptor does not cover the buffer */
	} else if (!r.desc && ep->local_cache &&
		   (r.kind == Kind::read || (r.kind == Kind::write && !inject))) {
		/* No FI_MR_LOCAL: the provider registers the buffer (fi_mr(3)). A hit takes the
		 * cache's lock and makes no system call; a miss is the slow-path registration.
		 * Atomics have no buffer of the caller's here: their operands travel in the WQE
		 * and a fetched value lands in the endpoint's registered scratch. */
		const uint64_t access =
			r.kind == Kind::read ? NICMR_ACCESS_READ : NICMR_ACCESS_WRITE;
		int rc = nicmr_mr_cache_reg(ep->local_cache, const_cast<void *>(r.buf), r.len,
					    access, &o.local);
		if (rc != 0) {
			o.local = nullptr;
			return fi_code(rc);
		}
		lkey = nicmr_mr_key(o.local);
	}
	int rc = 0;
	switch (r.kind) {
	case Kind::write:
		o.flags = FI_RMA | FI_WRITE;
		if (inject || (!r.desc && !o.local)) {
			if (r.len > kInjectSize)
				return -FI_EINVAL;
			nflags |= NICMR_SEND_INLINE;
			laddr = reinterpret_cast<uintptr_t>(r.buf);
		}
		rc = nicmr_post_write(p->req, laddr, r.len, lkey, r.addr, rkey, idx, nflags);
		break;
	case Kind::read:
		o.flags = FI_RMA | FI_READ;
		if (!r.desc && !o.local)
			return -FI_EINVAL;
		rc = nicmr_post_read(p->req, laddr, r.len, lkey, r.addr, rkey, idx, nflags);
		break;
	case Kind::atomic:
	case Kind::fetch: {
		o.flags = FI_ATOMIC | (r.kind == Kind::atomic ? FI_WRITE : FI_READ);
		const uint64_t res = reinterpret_cast<uintptr_t>(&ep->scratch[idx]);
		const uint32_t sk = nicmr_mr_key(ep->scratch_mr);
		rc = r.op == FI_CSWAP ? nicmr_post_atomic_cswap(p->req, res, sk, r.addr, rkey,
								r.compare, r.operand, idx, nflags)
				      : nicmr_post_atomic_fadd(p->req, res, sk, r.addr, rkey,
							       r.operand, idx, nflags);
		break;
	}
	}
	if (rc != 0) {
		if (o.local) {
			nicmr_mr_cache_dereg(ep->local_cache, o.local);
			o.local = nullptr;
		}
		return post_code(rc);
	}
	ep->nfree--;
	p->inflight++;
	return 0;
}

/* ---- fi_ops_rma ---------------------------------------------------------------------------- */

/* The flags of an RMA or atomic call without a flags parameter: FI_COMPLETION when the
 * endpoint's op_flags have it (fi_endpoint(3), op_flags). */
uint64_t dflt_tx(struct fid_ep *fep)
{
	const Endpoint *ep = ep_of(fep);
	return ep ? ep->tx_op_flags & FI_COMPLETION : 0;
}

Req rma_req(Kind kind, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t addr,
	    uint64_t key, void *context, uint64_t flags)
{
	Req r{};
	r.kind = kind;
	r.buf = buf;
	r.len = len;
	r.desc = desc;
	r.dest = dest;
	r.addr = addr;
	r.key = key;
	r.context = context;
	r.flags = flags;
	return r;
}

ssize_t rma_read(struct fid_ep *fep, void *buf, size_t len, void *desc, fi_addr_t src,
		 uint64_t addr, uint64_t key, void *context)
{
	Endpoint *ep = ep_of(fep);
	if (!ep)
		return -FI_EINVAL;
	return post(ep, rma_req(Kind::read, buf, len, desc, src, addr, key, context,
				ep->tx_op_flags & FI_COMPLETION));
}

ssize_t rma_readv(struct fid_ep *fep, const struct iovec *iov, void **desc, size_t count,
		  fi_addr_t src, uint64_t addr, uint64_t key, void *context)
{
	if (!iov || count != 1)
		return -FI_EINVAL;
	return rma_read(fep, iov[0].iov_base, iov[0].iov_len, desc ? desc[0] : nullptr, src, addr,
			key, context);
}

/* The one-segment message forms: -FI_EINVAL for anything else. */
bool msg_ok(const struct fi_msg_rma *msg)
{
	return msg && msg->msg_iov && msg->iov_count == 1 && msg->rma_iov &&
	       msg->rma_iov_count == 1 && msg->rma_iov[0].len == msg->msg_iov[0].iov_len;
}

ssize_t rma_readmsg(struct fid_ep *fep, const struct fi_msg_rma *msg, uint64_t flags)
{
	Endpoint *ep = ep_of(fep);
	if (!ep || !msg_ok(msg))
		return -FI_EINVAL;
	return post(ep, rma_req(Kind::read, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len,
				msg->desc ? msg->desc[0] : nullptr, msg->addr, msg->rma_iov[0].addr,
				msg->rma_iov[0].key, msg->context, flags & ~FI_INJECT));
}

ssize_t rma_write(struct fid_ep *fep, const void *buf, size_t len, void *desc, fi_addr_t dest,
		  uint64_t addr, uint64_t key, void *context)
{
	Endpoint *ep = ep_of(fep);
	if (!ep)
		return -FI_EINVAL;
	return post(ep, rma_req(Kind::write, buf, len, desc, dest, addr, key, context,
				ep->tx_op_flags & FI_COMPLETION));
}

ssize_t rma_writev(struct fid_ep *fep, const struct iovec *iov, void **desc, size_t count,
		   fi_addr_t dest, uint64_t addr, uint64_t key, void *context)
{
	if (!iov || count != 1)
		return -FI_EINVAL;
	return rma_write(fep, iov[0].iov_base, iov[0].iov_len, desc ? desc[0] : nullptr, dest, addr,
			 key, context);
}

ssize_t rma_writemsg(struct fid_ep *fep, const struct fi_msg_rma *msg, uint64_t flags)
{
	Endpoint *ep = ep_of(fep);
	if (!ep || !msg_ok(msg))
		return -FI_EINVAL;
	return post(ep, rma_req(Kind::write, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len,
				msg->desc ? msg->desc[0] : nullptr, msg->addr, msg->rma_iov[0].addr,
				msg->rma_iov[0].key, msg->context, flags));
}

ssize_t rma_inject(struct fid_ep *fep, const void *buf, size_t len, fi_addr_t dest, uint64_t addr,
		   uint64_t key)
{
	Endpoint *ep = ep_of(fep);
	if (!ep)
		return -FI_EINVAL;
	return post(ep,
		    rma_req(Kind::write, buf, len, nullptr, dest, addr, key, nullptr, FI_INJECT));
}

struct fi_ops_rma rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = rma_read,
	.readv = rma_readv,
	.readmsg = rma_readmsg,
	.write = rma_write,
	.writev = rma_writev,
	.writemsg = rma_writemsg,
	.inject = rma_inject,
	.writedata = Stub<decltype(fi_ops_rma::writedata)>::fn,
	.injectdata = Stub<decltype(fi_ops_rma::injectdata)>::fn,
};

/* ---- fi_ops_atomic ------------------------------------------------------------------------- */

/* One FI_UINT64 element at buf (and compare): the only shape the device does. */
ssize_t atomic_post(Endpoint *ep, uint64_t kind_flag, const void *buf, size_t count,
		    const void *compare, void *result, fi_addr_t dest, uint64_t addr, uint64_t key,
		    enum fi_datatype datatype, enum fi_op op, void *context, uint64_t flags)
{
	if (!ep || !buf || count != 1)
		return -FI_EINVAL;
	int ret = atomic_valid(ep->domain, datatype, op, kind_flag);
	if (ret != 0)
		return ret;
	const Kind kind = kind_flag ? Kind::fetch : Kind::atomic;
	if (kind == Kind::fetch && !result)
		return -FI_EINVAL;
	if (kind_flag == FI_COMPARE_ATOMIC && !compare)
		return -FI_EINVAL;
	if (addr & 7)
		return -FI_EINVAL;
	Req r = rma_req(kind, nullptr, 8, nullptr, dest, addr, key, context, flags);
	r.op = op;
	std::memcpy(&r.operand, buf, 8);
	if (compare)
		std::memcpy(&r.compare, compare, 8);
	r.result = result;
	return post(ep, r);
}

ssize_t at_write(struct fid_ep *fep, const void *buf, size_t count, void *, fi_addr_t dest,
		 uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *context)
{
	return atomic_post(ep_of(fep), 0, buf, count, nullptr, nullptr, dest, addr, key, dt, op,
			   context, dflt_tx(fep));
}

ssize_t at_writev(struct fid_ep *fep, const struct fi_ioc *iov, void **, size_t count,
		  fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op,
		  void *context)
{
	if (!iov || count != 1)
		return -FI_EINVAL;
	return atomic_post(ep_of(fep), 0, iov[0].addr, iov[0].count, nullptr, nullptr, dest, addr,
			   key, dt, op, context, dflt_tx(fep));
}

bool amsg_ok(const struct fi_msg_atomic *msg)
{
	return msg && msg->msg_iov && msg->iov_count == 1 && msg->rma_iov &&
	       msg->rma_iov_count == 1 && msg->rma_iov[0].count == msg->msg_iov[0].count;
}

ssize_t at_writemsg(struct fid_ep *fep, const struct fi_msg_atomic *msg, uint64_t flags)
{
	if (!amsg_ok(msg))
		return -FI_EINVAL;
	return atomic_post(ep_of(fep), 0, msg->msg_iov[0].addr, msg->msg_iov[0].count, nullptr,
			   nullptr, msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key,
			   msg->datatype, msg->op, msg->context, flags);
}

ssize_t at_inject(struct fid_ep *fep, const void *buf, size_t count, fi_addr_t dest, uint64_t addr,
		  uint64_t key, enum fi_datatype dt, enum fi_op op)
{
	return atomic_post(ep_of(fep), 0, buf, count, nullptr, nullptr, dest, addr, key, dt, op,
			   nullptr, FI_INJECT);
}

ssize_t at_readwrite(struct fid_ep *fep, const void *buf, size_t count, void *, void *result,
		     void *, fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
		     enum fi_op op, void *context)
{
	return atomic_post(ep_of(fep), FI_FETCH_ATOMIC, buf, count, nullptr, result, dest, addr,
			   key, dt, op, context, dflt_tx(fep));
}

ssize_t at_readwritev(struct fid_ep *fep, const struct fi_ioc *iov, void **, size_t count,
		      struct fi_ioc *resultv, void **, size_t result_count, fi_addr_t dest,
		      uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op,
		      void *context)
{
	if (!iov || count != 1 || !resultv || result_count != 1 || resultv[0].count != 1)
		return -FI_EINVAL;
	return atomic_post(ep_of(fep), FI_FETCH_ATOMIC, iov[0].addr, iov[0].count, nullptr,
			   resultv[0].addr, dest, addr, key, dt, op, context, dflt_tx(fep));
}

ssize_t at_readwritemsg(struct fid_ep *fep, const struct fi_msg_atomic *msg, struct fi_ioc *resultv,
			void **, size_t result_count, uint64_t flags)
{
	if (!amsg_ok(msg) || !resultv || result_count != 1 || resultv[0].count != 1)
		return -FI_EINVAL;
	return atomic_post(ep_of(fep), FI_FETCH_ATOMIC, msg->msg_iov[0].addr, msg->msg_iov[0].count,
			   nullptr, resultv[0].addr, msg->addr, msg->rma_iov[0].addr,
			   msg->rma_iov[0].key, msg->datatype, msg->op, msg->context, flags);
}

ssize_t at_compwrite(struct fid_ep *fep, const void *buf, size_t count, void *, const void *compare,
		     void *, void *result, void *, fi_addr_t dest, uint64_t addr, uint64_t key,
		     enum fi_datatype dt, enum fi_op op, void *context)
{
	return atomic_post(ep_of(fep), FI_COMPARE_ATOMIC, buf, count, compare, result, dest, addr,
			   key, dt, op, context, dflt_tx(fep));
}

ssize_t at_compwritev(struct fid_ep *fep, const struct fi_ioc *iov, void **, size_t count,
		      const struct fi_ioc *comparev, void **, size_t compare_count,
		      struct fi_ioc *resultv, void **, size_t result_count, fi_addr_t dest,
		      uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op,
		      void *context)
{
	if (!iov || count != 1 || !comparev || compare_count != 1 || comparev[0].count != 1 ||
	    !resultv || result_count != 1 || resultv[0].count != 1)
		return -FI_EINVAL;
	return at_compwrite(fep, iov[0].addr, iov[0].count, nullptr, comparev[0].addr, nullptr,
			    resultv[0].addr, nullptr, dest, addr, key, dt, op, context);
}

ssize_t at_compwritemsg(struct fid_ep *fep, const struct fi_msg_atomic *msg,
			const struct fi_ioc *comparev, void **, size_t compare_count,
			struct fi_ioc *resultv, void **, size_t result_count, uint64_t flags)
{
	if (!amsg_ok(msg) || !comparev || compare_count != 1 || comparev[0].count != 1 ||
	    !resultv || result_count != 1 || resultv[0].count != 1)
		return -FI_EINVAL;
	return atomic_post(ep_of(fep), FI_COMPARE_ATOMIC, msg->msg_iov[0].addr,
			   msg->msg_iov[0].count, comparev[0].addr, resultv[0].addr, msg->addr,
			   msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->datatype, msg->op,
			   msg->context, flags);
}

int valid_count(struct fid_ep *fep, enum fi_datatype dt, enum fi_op op, uint64_t kind,
		size_t *count)
{
	Endpoint *ep = ep_of(fep);
	if (!ep || !count)
		return -FI_EINVAL;
	int ret = atomic_valid(ep->domain, dt, op, kind);
	*count = ret == 0 ? 1 : 0;
	return ret;
}

int at_writevalid(struct fid_ep *fep, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	return valid_count(fep, dt, op, 0, count);
}

int at_readwritevalid(struct fid_ep *fep, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	return valid_count(fep, dt, op, FI_FETCH_ATOMIC, count);
}

int at_compwritevalid(struct fid_ep *fep, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	return valid_count(fep, dt, op, FI_COMPARE_ATOMIC, count);
}

struct fi_ops_atomic atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = at_write,
	.writev = at_writev,
	.writemsg = at_writemsg,
	.inject = at_inject,
	.readwrite = at_readwrite,
	.readwritev = at_readwritev,
	.readwritemsg = at_readwritemsg,
	.compwrite = at_compwrite,
	.compwritev = at_compwritev,
	.compwritemsg = at_compwritemsg,
	.writevalid = at_writevalid,
	.readwritevalid = at_readwritevalid,
	.compwritevalid = at_compwritevalid,
};

/* ---- fi_ops_cm, fi_ops_ep, fi_ops (messages and tagged messages: fi_msg.cpp) -------------- */

/* The endpoint's own address (its name). */
EpAddr addr_of(const Endpoint *ep)
{
	EpAddr a{};
	a.kind = ep->wire ? FI_NICMR_NAME_WIRE : FI_NICMR_NAME_LOCAL;
	a.udp_port = ep->udp_port;
	std::memcpy(a.gid, ep->gid, 16);
	a.qpn = ep->name_qpn;
	a.port = ep->port;
	a.device_id = ep->device_id;
	a.service = ep->service;
	return a;
}

int ep_getname(fid_t fid, void *addr, size_t *addrlen)
{
	Endpoint *ep = ep_of(reinterpret_cast<struct fid_ep *>(fid));
	if (!ep || !addrlen)
		return -FI_EINVAL;
	const size_t have = *addrlen;
	const EpAddr a = addr_of(ep);
	if (ep->domain->sock) {
		/* FI_SOCKADDR_IN / _IN6: the port's address and the endpoint's service. */
		sockaddr_in6 sa;
		*addrlen = sock_encode(ep->domain->sock, a, &sa);
		if (have < *addrlen || !addr)
			return -FI_ETOOSMALL;
		std::memcpy(addr, &sa, *addrlen);
		return 0;
	}
	if (ep->domain->addr_str) {
		/* FI_ADDR_STR: the string with its NUL; fi_cm(3): a short buffer gets
		 * -FI_ETOOSMALL and the length needed. */
		char str[kStrMax];
		*addrlen = name_to_str(a, str, sizeof(str)) + 1;
		if (have < *addrlen || !addr)
			return -FI_ETOOSMALL;
		std::memcpy(addr, str, *addrlen);
		return 0;
	}
	*addrlen = kNameSize;
	if (have < kNameSize || !addr)
		return -FI_ETOOSMALL;
	name_encode(a, addr);
	return 0;
}

struct fi_ops_cm cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = Stub<decltype(fi_ops_cm::setname)>::fn,
	.getname = ep_getname,
	.getpeer = Stub<decltype(fi_ops_cm::getpeer)>::fn,
	.connect = Stub<decltype(fi_ops_cm::connect)>::fn,
	.listen = Stub<decltype(fi_ops_cm::listen)>::fn,
	.accept = Stub<decltype(fi_ops_cm::accept)>::fn,
	.reject = Stub<decltype(fi_ops_cm::reject)>::fn,
	.shutdown = Stub<decltype(fi_ops_cm::shutdown)>::fn,
	.join = Stub<decltype(fi_ops_cm::join)>::fn,
};

ssize_t ep_cancel(fid_t, void *)
{
	return -FI_ENOENT; /* requests complete on their own; nothing waits to be cancelled */
}

/* Messages hook: FI_OPT_MIN_MULTI_RECV is the messaging code's. */
int ep_getopt(fid_t fid, int level, int name, void *val, size_t *len)
{
	Endpoint *ep = ep_of(reinterpret_cast<struct fid_ep *>(fid));
	if (!ep)
		return -FI_EINVAL;
	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	return msg_getopt(ep, name, val, len);
}

int ep_setopt(fid_t fid, int level, int name, const void *val, size_t len)
{
	Endpoint *ep = ep_of(reinterpret_cast<struct fid_ep *>(fid));
	if (!ep)
		return -FI_EINVAL;
	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	return msg_setopt(ep, name, val, len);
}

/* Messages hook: the receives that can still be posted. */
ssize_t ep_rx_size_left(struct fid_ep *fep)
{
	Endpoint *ep = ep_of(fep);
	if (!ep)
		return -FI_EINVAL;
	return msg_rx_size_left(ep);
}

ssize_t ep_tx_size_left(struct fid_ep *fep)
{
	Endpoint *ep = ep_of(fep);
	if (!ep)
		return -FI_EINVAL;
	std::lock_guard lk(ep->mu);
	return ep->nfree;
}

struct fi_ops_ep ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = Stub<decltype(fi_ops_ep::tx_ctx)>::fn,
	.rx_ctx = Stub<decltype(fi_ops_ep::rx_ctx)>::fn,
	.rx_size_left = ep_rx_size_left,
	.tx_size_left = ep_tx_size_left,
};

/* Frees what an endpoint made, in reverse (also for a half-made one). */
void ep_free(Endpoint *ep)
{
	if (ep->service)
		svc_unbind(ep->fabric, ep->service);
	/* Requests still in flight are forgotten with their QPs: their registrations go back. */
	for (Op &o : ep->ops)
		if (o.local) {
			nicmr_mr_cache_dereg(ep->local_cache, o.local);
			o.local = nullptr;
		}
	for (auto &kv : ep->peers)
		peer_destroy(ep, kv.second);
	ep->peers.clear();
	for (auto &kv : ep->rpeers)
		if (kv.second.req)
			nicmr_qp_destroy(kv.second.req);
	ep->rpeers.clear();
	if (ep->ud)
		nicmr_qp_destroy(ep->ud);
	if (ep->self)
		nicmr_qp_destroy(ep->self);
	/* Messages hook: the responders other endpoints made to this one (they use its SRQ and
	 * CQ), then the messaging state, whose SRQ no QP uses any more. */
	{
		std::lock_guard lk(ep->fabric->sh->mu);
		for (const Inbound &in : ep->inbound)
			nicmr_qp_destroy(in.qp);
		ep->inbound.clear();
		for (nicmr_qp *q : ep->dead)
			nicmr_qp_destroy(q);
		ep->dead.clear();
	}
	msg_close(ep->msg);
	ep->msg = nullptr;
	if (ep->ncq) {
		/* Under ev_mu: no event of the CQ is taken and left unacknowledged between its
		 * removal and its destruction (events_dispatch). */
		std::lock_guard lk(ep->fabric->sh->ev_mu);
		ep->fabric->sh->ev_eps.erase(ep->ncq);
		nicmr_cq_destroy(ep->ncq);
	}
	if (ep->scratch_mr)
		nicmr_mr_dereg(ep->scratch_mr);
	if (ep->scratch)
		munmap(ep->scratch, kScratchBytes);
	delete ep;
}

int ep_close(struct fid *fid)
{
	Endpoint *ep = reinterpret_cast<Endpoint *>(fid);
	Fabric *fab = ep->fabric;
	{
		/* Out of the registry first: no endpoint makes a pair to this one from now on. */
		std::lock_guard lk(fab->sh->mu);
		fab->sh->eps.erase(ep->name_qpn);
	}
	/* Its service too: no SIDR_REQ finds it, no GSI event wakes it. */
	if (ep->service) {
		svc_unbind(fab, ep->service);
		ep->service = 0;
	}
	/* Unbound, nobody progresses it any more: its QPs and CQ can go. */
	if (ep->cq)
		cq_unbind(ep->cq, ep);
	/* Messages hook: the receive CQ, and the send / receive counters beside the RMA ones
	 * (each counter once). */
	if (ep->rcq && ep->rcq != ep->cq)
		cq_unbind(ep->rcq, ep);
	Cntr *cs[] = {ep->wcntr, ep->rcntr, ep->scntr, ep->rvcntr};
	for (size_t i = 0; i < 4; i++) {
		bool seen = !cs[i];
		for (size_t j = 0; j < i && !seen; j++)
			seen = cs[j] == cs[i];
		if (!seen)
			cntr_unbind(cs[i], ep);
	}
	/* release: the endpoint's last reads of the AV / EQ happen before their close may see
	 * the count drop (the close's acquire load pairs with these). */
	if (ep->av)
		ep->av->eps.fetch_sub(1, std::memory_order_release);
	if (ep->eq)
		ep->eq->eps.fetch_sub(1, std::memory_order_release);
	Domain *dom = ep->domain;
	ep_free(ep);
	/* release: the endpoint's QPs are gone before domain_close may see the count drop. */
	dom->children.fetch_sub(1, std::memory_order_release);
	return 0;
}

int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	Endpoint *ep = reinterpret_cast<Endpoint *>(fid);
	if (!bfid)
		return -FI_EINVAL;
	if (ep->enabled)
		return -FI_EOPBADSTATE;
	switch (bfid->fclass) {
	case FI_CLASS_AV: {
		Av *av = av_of(bfid);
		if (!av || av->domain != ep->domain)
			return -FI_EINVAL;
		if (flags)
			return -FI_EBADFLAGS;
		if (ep->av)
			return -FI_EINVAL;
		ep->av = av;
		av->eps.fetch_add(1, std::memory_order_relaxed);
		return 0;
	}
	case FI_CLASS_CQ: {
		Cq *cq = cq_of(bfid);
		if (!cq || cq->domain != ep->domain)
			return -FI_EINVAL;
		/* fi_endpoint(3): FI_TRANSMIT and/or FI_RECV, with FI_SELECTIVE_COMPLETION for
		 * the directions whose operations complete only with FI_COMPLETION. */
		if (!(flags & (FI_TRANSMIT | FI_RECV)) ||
		    (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)))
			return -FI_EBADFLAGS;
		if (((flags & FI_TRANSMIT) && ep->cq) || ((flags & FI_RECV) && ep->rcq))
			return -FI_EINVAL;
		/* Messages hook: received messages complete to the FI_RECV CQ. */
		if (ep->cq != cq && ep->rcq != cq) {
			int ret = cq_bind_ep(cq, ep);
			if (ret != 0)
				return ret;
		}
		const bool selective = flags & FI_SELECTIVE_COMPLETION;
		if (flags & FI_TRANSMIT) {
			ep->cq = cq;
			ep->selective_tx = selective;
		}
		if (flags & FI_RECV) {
			ep->rcq = cq;
			ep->selective_rx = selective;
		}
		return 0;
	}
	case FI_CLASS_CNTR: {
		Cntr *c = cntr_of(bfid);
		if (!c || c->domain != ep->domain)
			return -FI_EINVAL;
		if (!flags || (flags & ~(FI_WRITE | FI_READ | FI_SEND | FI_RECV)))
			return -FI_EBADFLAGS;
		if (((flags & FI_WRITE) && ep->wcntr) || ((flags & FI_READ) && ep->rcntr) ||
		    ((flags & FI_SEND) && ep->scntr) || ((flags & FI_RECV) && ep->rvcntr))
			return -FI_EINVAL;
		if (ep->wcntr != c && ep->rcntr != c && ep->scntr != c && ep->rvcntr != c) {
			int ret = cntr_bind_ep(c, ep);
			if (ret != 0)
				return ret;
		}
		if (flags & FI_WRITE)
			ep->wcntr = c;
		if (flags & FI_READ)
			ep->rcntr = c;
		/* Messages hook: sends and receives count in FI_SEND / FI_RECV counters. */
		if (flags & FI_SEND)
			ep->scntr = c;
		if (flags & FI_RECV)
			ep->rvcntr = c;
		return 0;
	}
	case FI_CLASS_EQ: {
		Eq *eq = eq_of(bfid);
		if (!eq || eq->fabric != ep->fabric)
			return -FI_EINVAL;
		if (flags)
			return -FI_EBADFLAGS;
		if (ep->eq)
			return -FI_EINVAL;
		ep->eq = eq;
		eq->eps.fetch_add(1, std::memory_order_relaxed);
		return 0;
	}
	default:
		return -FI_EINVAL;
	}
}

int ep_control(struct fid *fid, int command, void *)
{
	Endpoint *ep = reinterpret_cast<Endpoint *>(fid);
	if (command != FI_ENABLE)
		return -FI_ENOSYS;
	if (!ep->av)
		return -FI_ENOAV;
	if (!ep->cq)
		return -FI_ENOCQ;
	ep->enabled = true;
	return 0;
}

struct fi_ops ep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ep_close,
	.bind = ep_bind,
	.control = ep_control,
	.ops_open = no_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

Endpoint *ep_of(struct fid_ep *fep)
{
	if (!fep || fep->fid.fclass != FI_CLASS_EP || fep->fid.ops != &ep_fi_ops)
		return nullptr;
	return reinterpret_cast<Endpoint *>(fep);
}

} // namespace

void ep_progress(Endpoint *ep)
{
	std::lock_guard lk(ep->mu);
	progress_locked(ep);
}

int ep_arm(Endpoint *ep)
{
	/* Under mu: the arm reads the consumer index nicmr_cq_poll moves (the same thread
	 * rules as the poll, nicmr.h). */
	std::lock_guard lk(ep->mu);
	const int ret = nicmr_cq_arm(ep->ncq, 0);
	if (ret != 0 || !ep->service)
		return ret == -ENOTSUP ? -FI_ENOSYS : fi_code(ret);
	/* A sockaddr endpoint also waits for the device's SIDR datagrams: a peer resolving its
	 * service must be answered while the application sleeps. Armed, then polled: what came
	 * before the arm is answered now (verbs' rule, ibv_req_notify_cq(3)). */
	const int aret = gsi_arm(ep->fabric->sh);
	gsi_poll(ep->fabric->sh);
	return aret;
}

void ep_wake(Endpoint *ep)
{
	if (ep->cq)
		waiter_wake(&ep->cq->wait);
	if (ep->rcq && ep->rcq != ep->cq)
		waiter_wake(&ep->rcq->wait);
	if (ep->wcntr)
		waiter_wake(&ep->wcntr->wait);
	if (ep->rcntr && ep->rcntr != ep->wcntr)
		waiter_wake(&ep->rcntr->wait);
	for (Cntr *c : {ep->scntr, ep->rvcntr})
		if (c)
			waiter_wake(&c->wait);
}

/* ---- Messages hooks: what fi_msg.cpp sees of an endpoint (fi_msg.h) */

Endpoint *ep_msg_of(struct fid_ep *fep)
{
	return ep_of(fep);
}

FiLock &ep_mu(Endpoint *ep)
{
	return ep->mu;
}

EpView ep_view(Endpoint *ep)
{
	return EpView{ep->domain, ep->msg,     ep->cq,	    ep->rcq,	  ep->scntr,
		      ep->rvcntr, ep->enabled, addr_of(ep), ep->directed, ep->source};
}

fi_addr_t ep_src_fi(Endpoint *ep, uint32_t via_qpn)
{
	/* Receive path (ep mu held): no allocation, no system call. It walks the endpoint's
	 * remote peers, then (a sender of this device) its inbound list under fabric->sh->mu, and
	 * asks the AV (its lock) only when the entry cached beside the QP no longer holds the
	 * name: a miss is asked again at the next receive, so that an entry inserted later is
	 * found. */
	auto cached = [ep](fi_addr_t &c, const EpAddr &a) {
		if (c != FI_ADDR_NOTAVAIL && av_holds(ep->av, c, a))
			return c;
		c = av_reverse(ep->av, a);
		return c;
	};
	if (ep->self && nicmr_qp_num(ep->self) == via_qpn)
		return cached(ep->self_src, addr_of(ep));
	for (auto &kv : ep->rpeers) {
		Peer &p = kv.second;
		if (p.req && nicmr_qp_num(p.req) == via_qpn)
			return cached(p.src, name_of(kv.first, p));
	}
	std::lock_guard lk(ep->fabric->sh->mu);
	for (Inbound &in : ep->inbound)
		if (nicmr_qp_num(in.qp) == via_qpn)
			return cached(in.src, in.from);
	return FI_ADDR_NOTAVAIL;
}

uint64_t ep_op_flags(const Endpoint *ep, bool tx)
{
	return tx ? ep->tx_op_flags : ep->rx_op_flags;
}

bool ep_selective(const Endpoint *ep, bool tx)
{
	return tx ? ep->selective_tx : ep->selective_rx;
}

EpAddr ep_src(Endpoint *ep, uint32_t via_qpn, uint64_t device, uint32_t port, uint32_t qpn)
{
	/* A remote sender's RC QP is this endpoint's QP for it (one per peer, both ways). */
	for (const auto &kv : ep->rpeers) {
		const Peer &p = kv.second;
		if (p.req && nicmr_qp_num(p.req) == via_qpn) {
			EpAddr a = name_of(kv.first, p);
			a.port = port;
			a.device_id = device;
			return a;
		}
	}
	EpAddr a = addr_of(ep);
	a.qpn = qpn;
	a.port = port;
	a.device_id = device;
	a.service = 0; /* an endpoint of this device, named by its QP */
	return a;
}

namespace {
int peer_ref(Endpoint *ep, Peer *p, int ret, PeerRef *out)
{
	if (ret == 0 && p == nullptr)
		ret = -FI_EADDRNOTAVAIL; /* every path that returns 0 names its peer */
	if (ret == 0)
		ret = peer_ready(ep, p);
	if (ret != 0)
		return ret;
	p->inflight++;
	*out = PeerRef{p, p->req};
	return 0;
}
} // namespace

int ep_peer(Endpoint *ep, fi_addr_t dest, PeerRef *out)
{
	Peer *p = nullptr;
	const int ret = peer_of(ep, dest, &p);
	return peer_ref(ep, p, ret, out);
}

int ep_peer_at(Endpoint *ep, const EpAddr &a, PeerRef *out)
{
	Peer *p = nullptr;
	int ret = peer_at(ep, a, &p);
	return peer_ref(ep, p, ret, out);
}

void ep_peer_done(void *peer, bool ok)
{
	Peer *p = static_cast<Peer *>(peer);
	p->inflight--;
	if (!ok)
		p->broken = true;
}

void ep_progress_locked(Endpoint *ep)
{
	progress_locked(ep);
}

int endpoint_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **out,
		  void *context)
{
	if (!domain || !info || !out)
		return -FI_EINVAL;
	Domain *dom = reinterpret_cast<Domain *>(domain);
	if (info->ep_attr && info->ep_attr->type != FI_EP_RDM &&
	    info->ep_attr->type != FI_EP_UNSPEC)
		return -FI_EINVAL;
	/* FI_RMA_EVENT goes with the domain's FI_MR_RMA_EVENT (the device counts into counters
	 * bound to MRs; the endpoint itself has nothing to do for it). */
	const uint64_t rma_event = (dom->mr_mode & FI_MR_RMA_EVENT) ? FI_RMA_EVENT : 0;
	/* FI_LOCAL_COMM / FI_REMOTE_COMM: secondary capabilities fi_getinfo answers (the latter
	 * only for a device with a wire); the endpoint does nothing else for them. */
	const uint64_t caps = info->caps | (info->rx_attr ? info->rx_attr->caps : 0);
	if (caps & ~(kEpCaps | kMsgCaps | kSrcCaps | rma_event | FI_LOCAL_COMM | FI_REMOTE_COMM))
		return -FI_EINVAL;
	/* FI_ATOMIC on a device without host-order atomics (fi_getinfo does not offer it). */
	if ((info->caps & FI_ATOMIC) && !dom->atomics)
		return -FI_EOPNOTSUPP;
	/* Without FI_MR_LOCAL the provider registers local buffers itself, through the
	 * domain's cache (made here by the first endpoint: a slow path). */
	nicmr_mr_cache *local_cache = nullptr;
	if (!(dom->mr_mode & FI_MR_LOCAL)) {
		int ret = local_cache_get(dom, &local_cache);
		if (ret != 0)
			return ret;
	}
	Fabric *fab = dom->fabric;
	std::unique_ptr<Endpoint> ep(new (std::nothrow) Endpoint);
	if (!ep)
		return -FI_ENOMEM;
	ep->domain = dom;
	ep->local_cache = local_cache;
	ep->directed = caps & FI_DIRECTED_RECV;
	ep->source = caps & FI_SOURCE;
	ep->mu.set_noop(dom->serialized);
	ep->fabric = fab;
	ep->device_id = nicmr_device_id(fab->dev);
	for (uint32_t i = 0; i < kEpDepth; i++)
		ep->free_ops[i] = kEpDepth - 1 - i;
	ep->nfree = kEpDepth;
	{
		std::lock_guard lk(fab->sh->mu);
		ep->port = 1 + static_cast<uint32_t>(fab->sh->ep_count++ % 2);
	}
	int ret = 0;
	/* A device whose port kWirePort has an address: names are wire names. */
	ep->wire = nicmr_port_gid(fab->dev, kWirePort, 0, ep->gid) == 0;
	if (ep->wire) {
		spec_udp_ports(fab->spec, &ep->udp_port, &ep->peer_udp_port);
		uint32_t mtu = 0;
		if (nicmr_port_mtu(fab->dev, kWirePort, &mtu) == 0)
			ep->mtu = mtu;
	} else
		std::memset(ep->gid, 0, 16);
	void *s = mmap(nullptr, kScratchBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (s == MAP_FAILED)
		return -FI_ENOMEM;
	ep->scratch = static_cast<uint64_t *>(s);
	auto fail = [&](int r) {
		ep_free(ep.release());
		return r == -ENOSPC ? -FI_ENOSPC : fi_code(r);
	};
	ret = nicmr_mr_reg(dom->pd, ep->scratch, kScratchBytes, NICMR_ACCESS_LOCAL_WRITE, 0, 0,
			   &ep->scratch_mr);
	/* The native CQ takes the RMA requests, the protocol's requests (sends, rendezvous
	 * READs and FINs, kicks) and the receives of every QP that receives for the endpoint
	 * (its SRQ's depth): room for every completion that can be outstanding. */
	if (ret == 0)
		ret = nicmr_cq_create(fab->dev,
				      (ep->wire ? kWireCqDepth : kEpDepth) + kMsgTxOps +
					      kMsgSrqDepth + kMsgRxOps + kMsgNops,
				      &ep->ncq);
	if (ret == 0 && events_add(fab, ep->ncq, ep.get()) != 0)
		ret = -ENOMEM;
	/* Messages hook: the messaging state (its SRQ) before the first QP that receives. */
	if (ret == 0) {
		int mret = msg_open(dom, &ep->msg);
		if (mret != 0) {
			FI_WARN(&provider, FI_LOG_EP_CTRL, "messages: %d\n", mret);
			ep_free(ep.release());
			return mret;
		}
	}
	if (ret == 0)
		ret = peer_qp_create(ep.get(), dom->pd, ep->port, kReqDepth, &ep->self);
	if (ret == 0)
		ret = nicmr_qp_connect(ep->self, ep->port, nicmr_qp_num(ep->self));
	if (ret == 0 && ep->wire) {
		nicmr_ud_qp_attr ua = ud_qp_attr(kWirePort, ep->ncq, kUdSend, kUdRecv);
		ua.q_key = kHsQkey;
		ret = nicmr_qp_create_ud(dom->pd, &ua, &ep->ud);
		for (uint32_t i = 0; ret == 0 && i < kUdRecv; i++)
			ret = ud_post_recv(ep.get(), i);
	}
	if (ret != 0) {
		FI_WARN(&provider, FI_LOG_EP_CTRL, "endpoint on port %u: %d\n", ep->port, ret);
		return fail(ret);
	}
	ep->name_qpn = ep->wire ? nicmr_qp_num(ep->ud) : nicmr_qp_num(ep->self);
	if (dom->sock) {
		/* The service src_addr names, else one of the device's ephemeral ones. */
		uint16_t service = 0;
		if (info->src_addr) {
			const auto *sa = static_cast<const sockaddr *>(info->src_addr);
			const bool v4 = dom->sock == AF_INET;
			if (info->src_addrlen < (v4 ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)) ||
			    sa->sa_family != dom->sock)
				return fail(-EINVAL);
			service = ntohs(v4 ? reinterpret_cast<const sockaddr_in *>(sa)->sin_port
					   : reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_port);
		}
		ret = svc_bind(fab, ep.get(), kWirePort, ep->name_qpn, &service);
		if (ret != 0) {
			FI_WARN(&provider, FI_LOG_EP_CTRL, "service %u: %d\n", service, ret);
			ep_free(ep.release());
			return ret;
		}
		ep->service = service;
	}
	try {
		Peer self;
		self.req = self.resp = ep->self;
		self.qpn = ep->name_qpn;
		ep->peers.emplace(ep->name_qpn, self);
		std::lock_guard lk(fab->sh->mu);
		fab->sh->eps.emplace(ep->name_qpn, ep.get());
	} catch (const std::bad_alloc &) {
		return fail(-ENOMEM);
	}
	ep->tx_op_flags = info && info->tx_attr ? info->tx_attr->op_flags : 0;
	ep->rx_op_flags = info && info->rx_attr ? info->rx_attr->op_flags : 0;
	ep->fid.fid.fclass = FI_CLASS_EP;
	ep->fid.fid.context = context;
	ep->fid.fid.ops = &ep_fi_ops;
	ep->fid.ops = &ep_ops;
	ep->fid.cm = &cm_ops;
	ep->fid.msg = &msg_ops;
	ep->fid.rma = &rma_ops;
	ep->fid.tagged = &tagged_ops;
	ep->fid.atomic = &atomic_ops;
	ep->fid.collective = nullptr;
	/* relaxed: the endpoint reaches other threads through the application. */
	dom->children.fetch_add(1, std::memory_order_relaxed);
	*out = &ep.release()->fid;
	return 0;
}

int atomic_valid(const Domain *dom, enum fi_datatype datatype, enum fi_op op, uint64_t kind)
{
	/* The device does 64-bit fetch-and-add and compare-and-swap on one element, on words in
	 * host byte order (fi_atomic(3)'s FI_UINT64) only when the domain says so. */
	if (!dom->atomics)
		return -FI_EOPNOTSUPP;
	if (datatype != FI_UINT64)
		return -FI_EOPNOTSUPP;
	if (kind == FI_COMPARE_ATOMIC)
		return op == FI_CSWAP ? 0 : -FI_EOPNOTSUPP;
	if (kind == 0 || kind == FI_FETCH_ATOMIC)
		return op == FI_SUM ? 0 : -FI_EOPNOTSUPP;
	return -FI_EBADFLAGS;
}

int query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op,
		 struct fi_atomic_attr *attr, uint64_t flags)
{
	if (!domain || !attr)
		return -FI_EINVAL;
	if (flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC) ||
	    (flags & FI_FETCH_ATOMIC && flags & FI_COMPARE_ATOMIC))
		return -FI_EBADFLAGS;
	int ret = atomic_valid(reinterpret_cast<Domain *>(domain), datatype, op, flags);
	if (ret != 0)
		return ret;
	attr->size = 8;
	attr->count = 1;
	return 0;
}

} // namespace nicmr::fabric
