/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Service IDs: how an FI_SOCKADDR_IN / FI_SOCKADDR_IN6 name (an IP address and a port, what
 * fi_getinfo's node and service give) reaches an endpoint, whose wire name is its handshake
 * UD QP (fi_ep.cpp, "Connections across processes"). An IP address and a port say nothing of
 * a QP number, so the device that owns the address is asked, as the IBTA connection manager
 * asks for a UD service: a SIDR_REQ MAD (IBTA vol. 1 §12.11, Service ID Resolution) from this
 * device's GSI QP to the peer device's (QP 1, the port's well-known QP), naming the service ID
 * of the port in rdma_cm's UDP port space; the peer's provider answers with a SIDR_REP that
 * carries the endpoint's handshake QP and Q_Key, or a status that says nobody listens there.
 *
 *   endpoint open (sockaddr domain) --> svc_bind: service -> handshake QP, in the device's
 *                                       registry (the port given in src_addr, else the first
 *                                       free one from 49152)
 *   first request to an AV entry    --> svc_resolve: cached?  yes --> the QP number
 *      (gid, service), qpn unknown                            no  --> SIDR_REQ to (gid, QP 1),
 *                                                                     -FI_EAGAIN; resent on a
 *                                                                     timer
 *   any idle progress turn           --> gsi_poll: SIDR_REQ --> SIDR_REP (status 0 and the QP,
 *                                        or 1: no such service); SIDR_REP --> the cache
 *
 * One GSI QP per device (its wire port's), made by the first endpoint of a sockaddr domain and
 * destroyed with the device; its own PD, CQ and one registered page of MAD slots. Its CQ is
 * polled on the idle turns of the sockaddr endpoints' progress and by every resolution, under
 * a lock that progress only tries (a busy GSI is someone else's to poll). Slow paths
 * throughout: nothing here runs per request once a peer is known.
 *
 * The MAD layouts and their decoder are in fi_sidr_mad.h (IBTA vol. 1 §13.4.2, §12.6.13 and
 * §12.6.14; rdma_cm's UDP service IDs), and SIDR_REQ's private data
 * starts with rdma_cm's address header (cma.c struct cma_hdr: version 0, the IP version in the
 * high nibble, the source port, then the source and destination addresses), so that an
 * rdma_cm UDP listener could answer it as well.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <sys/mman.h>
#include <time.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <random>

#include <rdma/providers/fi_log.h>

#include "fi_internal.h"
#include "fi_sidr_mad.h"

namespace nicmr::fabric {

namespace {

constexpr uint16_t kDefaultPKey = 0xffff;

/* The GSI QP's slots: receives hold the GRH and a MAD; sends one MAD. */
constexpr uint32_t kGsiRecv = 32;
constexpr uint32_t kGsiSend = 16;
constexpr size_t kRecvSlot = 320; /* 40 + 256, 64-byte aligned */
constexpr size_t kBufBytes = 16384;
static_assert(kGsiRecv * kRecvSlot + kGsiSend * kMadSize <= kBufBytes);
/* The default range of ephemeral services: IANA's dynamic ports (Linux's default local port
 * range starts lower but ends at 65535 too). */
constexpr int kEphemeralFirst = 49152;
constexpr int kEphemeralLast = 65535;
/* SIDR_REQ resent every kFirstNs doubled up to kMaxNs, kTries times (about 13 s, the
 * handshake's schedule) before the resolution gives up. */
constexpr uint64_t kFirstNs = 20'000'000;
constexpr uint64_t kMaxNs = 640'000'000;
constexpr uint32_t kTries = 24;

uint64_t now_ns()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

using SvcKey = std::array<uint8_t, 18>; /* the GID, then the port in network order */

SvcKey svc_key(const uint8_t gid[16], uint16_t service)
{
	SvcKey k;
	std::memcpy(k.data(), gid, 16);
	k[16] = static_cast<uint8_t>(service >> 8);
	k[17] = static_cast<uint8_t>(service);
	return k;
}

} // namespace

/* A service's resolution: asked (SIDR_REQ out), known, or given up. */
struct Resolution {
	enum State : uint8_t { asked, known, refused, timed_out } state = asked;
	uint32_t qpn = 0;
	uint32_t request_id = 0;
	uint64_t tid = 0;
	uint32_t tries = 0;
	uint64_t deadline_ns = 0;
	uint16_t src_port = 0; /* the asking endpoint's service (rdma_cm's header) */
};

struct Gsi {
	std::mutex mu; /* everything below */
	nicmr_pd *pd = nullptr;
	nicmr_cq *cq = nullptr;
	nicmr_qp *qp = nullptr;
	uint8_t *buf = nullptr;
	nicmr_mr *mr = nullptr;
	uint8_t gid[16] = {};
	/* The device's endpoints by service: their handshake QP, to answer SIDR_REQ, and the
	 * endpoint, to wake its waiters when the GSI's CQ fires. */
	struct Bound {
		uint32_t qpn;
		Endpoint *ep;
	};
	std::map<uint16_t, Bound> services;
	std::map<SvcKey, Resolution> resolutions;
	uint64_t tid_base = 0;
	uint32_t next_id = 0;
	uint32_t send_next = 0;
};

namespace {

uint8_t *recv_slot(Gsi *g, uint32_t i)
{
	return g->buf + i * kRecvSlot;
}

uint8_t *send_slot(Gsi *g, uint32_t i)
{
	return g->buf + kGsiRecv * kRecvSlot + i * kMadSize;
}

int post_recv(Gsi *g, uint32_t i)
{
	return ud_post_slot(g->qp, g->mr, recv_slot(g, i), kRecvSlot, i);
}

void gsi_free(DeviceShare *sh, Gsi *g)
{
	if (g->qp)
		nicmr_qp_destroy(g->qp);
	if (g->cq) {
		/* Under ev_mu: no event of the CQ is taken and left unacknowledged between its
		 * removal and its destruction (events_dispatch). */
		std::lock_guard lk(sh->ev_mu);
		sh->ev_eps.erase(g->cq);
		nicmr_cq_destroy(g->cq);
	}
	if (g->mr)
		nicmr_mr_dereg(g->mr);
	if (g->buf)
		munmap(g->buf, kBufBytes);
	if (g->pd)
		nicmr_pd_free(g->pd);
	delete g;
}

/* The device's GSI QP, made on first use (sh->mu held). */
int gsi_get(DeviceShare *sh, uint32_t port, Gsi **out)
{
	if (Gsi *g = sh->gsi.load(std::memory_order_relaxed)) {
		*out = g;
		return 0;
	}
	Gsi *g = new (std::nothrow) Gsi;
	if (!g)
		return -FI_ENOMEM;
	std::random_device rd;
	g->tid_base = uint64_t{rd()} << 32;
	g->next_id = rd();
	int ret = nicmr_port_gid(sh->dev, port, 0, g->gid);
	if (ret == 0)
		ret = nicmr_pd_alloc(sh->dev, &g->pd);
	if (ret == 0) {
		void *b = mmap(nullptr, kBufBytes, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (b == MAP_FAILED)
			ret = -ENOMEM;
		else
			g->buf = static_cast<uint8_t *>(b);
	}
	if (ret == 0)
		ret = nicmr_mr_reg(g->pd, g->buf, kBufBytes, NICMR_ACCESS_LOCAL_WRITE, 0, 0,
				   &g->mr);
	if (ret == 0)
		ret = nicmr_cq_create(sh->dev, kGsiRecv + kGsiSend, &g->cq);
	if (ret == 0) {
		std::lock_guard lk(sh->ev_mu);
		try {
			/* No endpoint of its own: an event wakes every bound one (gsi_wake). */
			sh->ev_eps.emplace(g->cq, nullptr);
		} catch (const std::bad_alloc &) {
			ret = -ENOMEM;
		}
	}
	if (ret == 0) {
		nicmr_ud_qp_attr ua = ud_qp_attr(port, g->cq, kGsiSend, kGsiRecv);
		ua.flags = NICMR_UD_QP_GSI;
		ret = nicmr_qp_create_ud(g->pd, &ua, &g->qp);
	}
	for (uint32_t i = 0; ret == 0 && i < kGsiRecv; i++)
		ret = post_recv(g, i);
	if (ret != 0) {
		FI_WARN(&provider, FI_LOG_EP_CTRL, "GSI QP on port %u: %d\n", port, ret);
		gsi_free(sh, g);
		return ret == -ENOSPC ? -FI_ENOSPC : fi_code(ret);
	}
	sh->gsi.store(g, std::memory_order_release);
	*out = g;
	return 0;
}

/* Sends one MAD to the GSI QP at gid. A full send queue drops it (a SIDR_REQ is resent on its
 * timer; a lost SIDR_REP is answered again when the REQ comes back). g->mu held. */
void mad_send(Gsi *g, const uint8_t gid[16], const void *mad)
{
	const uint32_t slot = g->send_next++ % kGsiSend;
	std::memcpy(send_slot(g, slot), mad, kMadSize);
	nicmr_ud_dest d{};
	std::memcpy(d.gid, gid, 16);
	d.qpn = NICMR_GSI_QPN;
	d.q_key = NICMR_GSI_QKEY;
	const int rc = nicmr_post_send_ud(g->qp, reinterpret_cast<uintptr_t>(send_slot(g, slot)),
					  kMadSize, nicmr_mr_key(g->mr), &d, 0, kGsiRecv + slot,
					  NICMR_SEND_SIGNALED);
	if (rc != 0)
		FI_INFO(&provider, FI_LOG_EP_CTRL, "MAD not sent: %d\n", rc);
}

void sidr_req_send(Gsi *g, const SvcKey &k, const Resolution &r)
{
	SidrReq m{};
	mad_hdr(&m.hdr, kAttrSidrReq, r.tid);
	m.request_id = htonl(r.request_id);
	m.p_key = htons(kDefaultPKey);
	const uint16_t service = static_cast<uint16_t>(k[16] << 8 | k[17]);
	m.service_id = htobe64(kPsUdp | service);
	m.cma_version = 0;
	/* rdma_cm's cma_ip_addr holds an IPv4 address in its last four bytes, as the GID does. */
	m.ip_version = gid_is_v4(k.data()) ? 4 << 4 : 6 << 4;
	m.src_port = htons(r.src_port);
	std::memcpy(m.src_addr, g->gid, 16);
	std::memcpy(m.dst_addr, k.data(), 16);
	mad_send(g, k.data(), &m);
	FI_INFO(&provider, FI_LOG_EP_CTRL, "SIDR_REQ for service %u (try %u)\n", service, r.tries);
}

void arm_timer(Resolution &r)
{
	uint64_t wait = kFirstNs << (r.tries < 5 ? r.tries : 5);
	if (wait > kMaxNs)
		wait = kMaxNs;
	r.deadline_ns = now_ns() + wait;
}

/* A SIDR_REQ: the answer for the service it names (g->mu held). */
void on_sidr_req(Gsi *g, const uint8_t *src_gid, const SidrFields &m)
{
	SidrRep rep{};
	mad_hdr(&rep.hdr, kAttrSidrRep, m.tid);
	rep.request_id = htonl(m.request_id);
	const uint64_t sid = m.service_id;
	const uint64_t sid_be = htobe64(sid);
	std::memcpy(rep.service_id, &sid_be, 8);
	uint16_t service = 0;
	auto it = udp_service(sid, &service) ? g->services.find(service) : g->services.end();
	if (it == g->services.end()) {
		rep.status = kSidrUnsupported;
	} else {
		rep.status = kSidrOk;
		rep.qpn_rsvd = htonl(it->second.qpn << 8);
		rep.q_key = htonl(kHsQkey);
	}
	FI_INFO(&provider, FI_LOG_EP_CTRL, "SIDR_REQ for service ID 0x%llx: status %u\n",
		static_cast<unsigned long long>(sid), rep.status);
	mad_send(g, src_gid, &rep);
}

/* A SIDR_REP: the resolution it answers, by transaction and request ID (g->mu held). */
void on_sidr_rep(Gsi *g, const uint8_t *src_gid, const SidrFields &m)
{
	const uint64_t sid = m.service_id;
	uint16_t service = 0;
	if (!udp_service(sid, &service))
		return;
	auto it = g->resolutions.find(svc_key(src_gid, service));
	if (it == g->resolutions.end())
		return;
	Resolution &r = it->second;
	if (r.state != Resolution::asked || r.tid != m.tid || r.request_id != m.request_id)
		return; /* a late answer to an earlier request */
	const uint32_t qpn = m.qpn;
	if (m.status == kSidrOk && qpn != 0 && m.q_key == kHsQkey) {
		r.state = Resolution::known;
		r.qpn = qpn;
	} else {
		/* Another status, or a QP this provider's handshake cannot speak to. */
		r.state = Resolution::refused;
	}
	FI_INFO(&provider, FI_LOG_EP_CTRL, "SIDR_REP for service %u: status %u, QP 0x%x\n",
		static_cast<unsigned>(sid & 0xffff), m.status, qpn);
}

void on_mad(Gsi *g, const uint8_t *slot, uint32_t len, const nicmr_ud_info &ud)
{
	if (len < NICMR_UD_GRH_BYTES)
		return;
	uint8_t src[16];
	if (nicmr_ud_grh_gids(slot, ud.net_type, src, nullptr) != 0)
		return;
	SidrFields m;
	if (sidr_decode(slot + NICMR_UD_GRH_BYTES, len - NICMR_UD_GRH_BYTES, &m) !=
	    SidrRefusal::none)
		return; /* not a SIDR MAD of this version: not for this provider */
	if (m.attr == kAttrSidrReq)
		on_sidr_req(g, src, m);
	else
		on_sidr_rep(g, src, m);
}

/* Takes the GSI's completions and runs the resolutions' timers (g->mu held). */
void poll_locked(Gsi *g)
{
	nicmr_wc wc[16];
	nicmr_ud_info ud[16];
	for (;;) {
		const int n = nicmr_cq_poll_ud(g->cq, wc, ud, 16);
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id >= kGsiRecv)
				continue; /* a send's completion */
			const auto slot = static_cast<uint32_t>(wc[i].wr_id);
			if (wc[i].status == NICMR_WC_SUCCESS)
				on_mad(g, recv_slot(g, slot), wc[i].byte_len, ud[i]);
			if (wc[i].status != NICMR_WC_WR_FLUSH && post_recv(g, slot) != 0)
				FI_WARN(&provider, FI_LOG_EP_CTRL, "GSI receive not reposted\n");
		}
		if (n < 16)
			break;
	}
	const uint64_t now = now_ns();
	for (auto &kv : g->resolutions) {
		Resolution &r = kv.second;
		if (r.state != Resolution::asked || now < r.deadline_ns)
			continue;
		if (++r.tries >= kTries) {
			r.state = Resolution::timed_out;
			continue;
		}
		arm_timer(r);
		sidr_req_send(g, kv.first, r);
	}
}

/* The services an endpoint without one is given: FI_NICMR_PORT_LOW_RANGE to
 * FI_NICMR_PORT_HIGH_RANGE, read at each call (slow path); 0 or -FI_EINVAL for a range outside
 * 1..65535 or upside down (a value that is no number is not set: libfabric's fi_param_get). */
int ephemeral_range(uint16_t *first, uint16_t *last)
{
	int lo = kEphemeralFirst, hi = kEphemeralLast;
	fi_param_get_int(&provider, "port_low_range", &lo);
	fi_param_get_int(&provider, "port_high_range", &hi);
	if (lo < 1 || hi > 65535 || lo > hi) {
		FI_WARN(&provider, FI_LOG_EP_CTRL,
			"FI_NICMR_PORT_LOW_RANGE %d to FI_NICMR_PORT_HIGH_RANGE %d: not a range of "
			"1..65535\n",
			lo, hi);
		return -FI_EINVAL;
	}
	*first = static_cast<uint16_t>(lo);
	*last = static_cast<uint16_t>(hi);
	return 0;
}

} // namespace

int svc_bind(Fabric *fab, Endpoint *ep, uint32_t port, uint32_t qpn, uint16_t *service)
{
	DeviceShare *sh = fab->sh;
	Gsi *g = nullptr;
	{
		std::lock_guard lk(sh->mu);
		int ret = gsi_get(sh, port, &g);
		if (ret != 0)
			return ret;
	}
	std::lock_guard lk(g->mu);
	uint16_t s = *service;
	if (s == 0) {
		/* The first free ephemeral port. */
		uint16_t first = 0, last = 0;
		if (int ret = ephemeral_range(&first, &last); ret != 0)
			return ret;
		for (uint32_t p = first; p <= last && s == 0; p++)
			if (!g->services.count(static_cast<uint16_t>(p)))
				s = static_cast<uint16_t>(p);
		if (s == 0)
			return -FI_EADDRINUSE; /* every service of the range is held */
	} else if (g->services.count(s)) {
		return -FI_EADDRINUSE;
	}
	try {
		g->services.emplace(s, Gsi::Bound{qpn, ep});
	} catch (const std::bad_alloc &) {
		return -FI_ENOMEM;
	}
	*service = s;
	return 0;
}

void svc_unbind(Fabric *fab, uint16_t service)
{
	Gsi *g = fab->sh->gsi.load(std::memory_order_acquire);
	if (!g)
		return;
	std::lock_guard lk(g->mu);
	g->services.erase(service);
}

bool svc_local(Fabric *fab, uint16_t service, uint32_t *qpn)
{
	Gsi *g = fab->sh->gsi.load(std::memory_order_acquire);
	if (!g)
		return false;
	std::lock_guard lk(g->mu);
	auto it = g->services.find(service);
	if (it == g->services.end())
		return false;
	*qpn = it->second.qpn;
	return true;
}

int svc_resolve(Fabric *fab, const uint8_t gid[16], uint16_t service, uint16_t src_port,
		uint32_t *qpn)
{
	Gsi *g = fab->sh->gsi.load(std::memory_order_acquire);
	if (!g)
		return -FI_EADDRNOTAVAIL; /* no sockaddr endpoint on this device */
	std::lock_guard lk(g->mu);
	const SvcKey k = svc_key(gid, service);
	auto it = g->resolutions.find(k);
	if (it == g->resolutions.end()) {
		try {
			it = g->resolutions.emplace(k, Resolution{}).first;
		} catch (const std::bad_alloc &) {
			return -FI_ENOMEM;
		}
		Resolution &r = it->second;
		r.request_id = g->next_id++;
		r.tid = g->tid_base | r.request_id;
		r.src_port = src_port;
		arm_timer(r);
		sidr_req_send(g, k, r);
	}
	poll_locked(g);
	Resolution &r = it->second;
	switch (r.state) {
	case Resolution::known:
		*qpn = r.qpn;
		return 0;
	case Resolution::refused:
		g->resolutions.erase(it);
		return -FI_ECONNREFUSED;
	case Resolution::timed_out:
		g->resolutions.erase(it);
		return -FI_ETIMEDOUT;
	case Resolution::asked:
		break;
	}
	return -FI_EAGAIN;
}

void svc_forget(Fabric *fab, const uint8_t gid[16], uint16_t service)
{
	Gsi *g = fab->sh->gsi.load(std::memory_order_acquire);
	if (!g)
		return;
	std::lock_guard lk(g->mu);
	g->resolutions.erase(svc_key(gid, service));
}

void gsi_poll(DeviceShare *sh)
{
	Gsi *g = sh->gsi.load(std::memory_order_acquire);
	if (!g)
		return;
	std::unique_lock lk(g->mu, std::try_to_lock);
	if (lk.owns_lock())
		poll_locked(g);
}

int gsi_arm(DeviceShare *sh)
{
	Gsi *g = sh->gsi.load(std::memory_order_acquire);
	if (!g)
		return 0;
	std::lock_guard lk(g->mu);
	const int ret = nicmr_cq_arm(g->cq, 0);
	return ret == -ENOTSUP ? -FI_ENOSYS : fi_code(ret);
}

void gsi_wake(DeviceShare *sh)
{
	Gsi *g = sh->gsi.load(std::memory_order_acquire);
	if (!g)
		return;
	std::lock_guard lk(g->mu);
	for (auto &kv : g->services)
		ep_wake(kv.second.ep);
}

void gsi_destroy(DeviceShare *sh)
{
	if (Gsi *g = sh->gsi.exchange(nullptr, std::memory_order_acquire))
		gsi_free(sh, g);
}

} // namespace nicmr::fabric
