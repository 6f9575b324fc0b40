/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UD QPs of the native API (include/nicmr/nicmr.h, "UD (unreliable datagram) QPs";
 * doc/native-api.md): creation straight to RTS, a port's GSI QP (QP 1), datagram sends, and
 * the GRH's GIDs. Receives and polling are api_dp.cpp's (nicmr_post_recv, nicmr_cq_poll_ud).
 */
#include <cerrno>
#include <cstring>

#include "api_internal.h"
#include "nicmr_log.h"

namespace mlx5 = nicmr::mlx5;
namespace prm = nicmr::mlx5::prm;

/* nicmr_ud_info::net_type passes the CQE's L3 header type through (api_internal.h ud_info). */
static_assert(NICMR_UD_NET_IPV4 == mlx5::kL3HdrIpv4 && NICMR_UD_NET_IPV6 == mlx5::kL3HdrIpv6);
/* The GSI QP's number and Q_Key are the wire's (mlx5_prm.h, prm::gsi). */
static_assert(NICMR_GSI_QPN == prm::gsi::qpn && NICMR_GSI_QKEY == prm::gsi::q_key);

namespace {

constexpr unsigned kUdFlags = NICMR_SEND_SIGNALED | NICMR_SEND_FENCE | NICMR_SEND_IMM;

/* prm::qp_mtu of a size in bytes (0: 4096), or 0 for another size. */
uint32_t ud_mtu(uint32_t bytes)
{
	switch (bytes) {
	case 256:
		return prm::qp_mtu::mtu_256;
	case 512:
		return prm::qp_mtu::mtu_512;
	case 1024:
		return prm::qp_mtu::mtu_1024;
	case 2048:
		return prm::qp_mtu::mtu_2048;
	case 0:
	case 4096:
		return prm::qp_mtu::mtu_4096;
	default:
		return 0;
	}
}

} // namespace

extern "C" {

int nicmr_qp_create_ud(struct nicmr_pd *pd, const struct nicmr_ud_qp_attr *attr,
		       struct nicmr_qp **out)
{
	if (pd == nullptr || attr == nullptr || out == nullptr ||
	    attr->size < sizeof(nicmr_ud_qp_attr) || (attr->q_key & NICMR_UD_QKEY_OWN) != 0 ||
	    (attr->flags & ~NICMR_UD_QP_GSI) != 0)
		return -EINVAL;
	nicmr::api::UdQpParams ud;
	ud.gsi = (attr->flags & NICMR_UD_QP_GSI) != 0;
	ud.q_key = ud.gsi ? NICMR_GSI_QKEY : attr->q_key;
	ud.mtu = ud_mtu(attr->mtu);
	const uint32_t port = attr->attr.port;
	if (ud.mtu == 0 || (ud.gsi && (attr->q_key != 0 || port < 1 || port > 2)))
		return -EINVAL;
	nicmr_device *dev = pd->dev;
	/* One GSI QP per port, as the device has one QP1 per port: the port is taken before
	 * anything is made, so a second one leaves nothing behind; nicmr_qp_destroy gives it
	 * back (the device refuses a second GSI QP's RST2INIT too, on its own). */
	if (ud.gsi) {
		std::lock_guard lk(dev->dp_mu);
		if (dev->gsi_taken[port - 1])
			return -EBUSY;
		dev->gsi_taken[port - 1] = true;
	}
	nicmr_qp *qp = nullptr;
	int rc = nicmr::api::qp_create(pd, &attr->attr, &ud, &qp);
	if (rc != 0) {
		if (ud.gsi) {
			std::lock_guard lk(dev->dp_mu);
			dev->gsi_taken[port - 1] = false;
		}
		return rc;
	}
	/* No peer: RESET -> INIT (q_key) -> RTR -> RTS at once (Linux's ib_modify_qp sequence
	 * for a UD QP: RTR and RTS without an address path). */
	rc = qp->qp->connect(0);
	if (rc != 0) {
		NICMR_LOG(warn, "api", "%s: UD QP 0x%x to RTS: %d", pd->dev->spec.c_str(), qp->qpn,
			  rc);
		nicmr_qp_destroy(qp); /* gives the GSI port back */
		return rc;
	}
	qp->connected = true;
	*out = qp;
	return 0;
}

int nicmr_post_send_ud(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey,
		       const struct nicmr_ud_dest *dest, uint32_t imm, uint64_t wr_id,
		       unsigned flags)
{
	/* HOT PATH: no lock, no allocation, no system call. */
	if (qp == nullptr || dest == nullptr || (flags & ~kUdFlags) != 0 ||
	    !prm::fits(prm::wqe_datagram::dqpn, dest->qpn))
		return -EINVAL;
	if (!qp->ud)
		return -ENOTSUP;
	/* IBTA C10-93.1.1: a datagram above the path MTU is never sent. */
	if (len > qp->qp->mtu_bytes())
		return -EMSGSIZE;
	if (qp->qp->sq_room() == 0)
		return -ENOSPC;
	if (len != 0) {
		uint64_t iova = 0;
		if (const int rc = nicmr_key_lookup(qp->pd->dev, lkey, laddr, len,
						    NICMR_ACCESS_SEND, &iova);
		    rc != 0)
			return rc;
	}
	const uint64_t counter = qp->posted;
	nicmr_dp_slot &s = qp->slots[counter & qp->mask];
	s.wr_id = wr_id;
	s.rkey = 0;
	s.opcode = NICMR_WC_SEND;
	mlx5::UdDest to;
	std::memcpy(to.gid.data(), dest->gid, 16);
	to.qpn = dest->qpn;
	to.q_key = dest->q_key;
	unsigned f = 0;
	if (flags & NICMR_SEND_SIGNALED)
		f |= mlx5::kSignaled;
	if (flags & NICMR_SEND_FENCE)
		f |= mlx5::kFence;
	const mlx5::Sge sge{laddr, static_cast<uint32_t>(len), lkey};
	const int rc = qp->qp->post_ud_send({&sge, len != 0 ? 1u : 0u}, to,
					    (flags & NICMR_SEND_IMM) != 0, imm, counter, f);
	if (rc == 0)
		qp->posted++;
	return rc;
}

/* IBTA annex A17.4.5.1 and Linux include/rdma/ib_verbs.h (union rdma_network_hdr): over IPv4
 * the header is the GRH's last 20 bytes; rdma-core's ibv_init_ah_from_wc maps its addresses to
 * IPv4-mapped GIDs. */
int nicmr_ud_grh_gids(const void *grh, uint32_t net_type, uint8_t src_gid[16], uint8_t dst_gid[16])
{
	if (grh == nullptr || src_gid == nullptr)
		return -EINVAL;
	const auto *g = static_cast<const uint8_t *>(grh);
	uint8_t src[16] = {}, dst[16] = {};
	if (net_type == NICMR_UD_NET_IPV4) {
		const uint8_t *ip = g + NICMR_UD_GRH_BYTES - 20;
		if (ip[0] >> 4 != 4)
			return -EINVAL;
		src[10] = src[11] = dst[10] = dst[11] = 0xff;
		std::memcpy(src + 12, ip + 12, 4);
		std::memcpy(dst + 12, ip + 16, 4);
	} else if (net_type == NICMR_UD_NET_IPV6) {
		if (g[0] >> 4 != 6)
			return -EINVAL;
		std::memcpy(src, g + 8, 16);
		std::memcpy(dst, g + 24, 16);
	} else {
		return -EINVAL;
	}
	std::memcpy(src_gid, src, 16);
	if (dst_gid != nullptr)
		std::memcpy(dst_gid, dst, 16);
	return 0;
}

} /* extern "C" */
