/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The provider's connection handshake datagram (fi_ep.cpp, "Connections across processes"):
 * its layout, its encoder and its decoder. The bytes come from the wire, from any peer that
 * can reach the endpoint's UD QP with its Q_Key, so the decoder trusts nothing: a datagram of
 * another length, magic or version, an unknown type, a QPN or PSN wider than 24 bits, a zero
 * QPN, an all-zero GID, an MTU that is not a path MTU or a non-zero reserved field is refused
 * with its reason, and nothing of it is used. Header-only, without libfabric, so that the unit
 * test (test/fabric/test_fabric_handshake.cpp) and the fuzz target
 * (fuzz/fuzz_fabric_handshake.cpp) take the very code the provider runs.
 */
#ifndef NICMR_FABRIC_FI_HANDSHAKE_H
#define NICMR_FABRIC_FI_HANDSHAKE_H

#include <arpa/inet.h>
#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace nicmr::fabric {

/* The messages follow the IBTA connection manager's three-way exchange (IBTA vol. 1 chapter
 * 12: REQ, REP, RTU, REQ and REP retried on a timeout) on the endpoints' own UD QPs instead of
 * QP1. */
enum : uint8_t { kMsgReq = 1, kMsgRep = 2, kMsgRtu = 3 };
inline constexpr uint32_t kHsMagic = 0x4e4d5248u; /* "NMRH" */
inline constexpr uint8_t kHsVersion = 3;

/* The datagram (one UD SEND, every multi-byte field in network order). */
struct HsMsg {
	uint32_t magic;
	uint8_t version; /* 3 (2 had no service, 1 no mtu) */
	uint8_t type;	 /* kMsgReq, kMsgRep, kMsgRtu */
	uint16_t src_udp_port;
	uint8_t src_gid[16];
	uint32_t src_ud_qpn; /* the sender's address QP: with src_gid, its name */
	uint32_t rc_qpn;     /* the sender's RC QP for the receiver */
	uint32_t psn;	     /* its first send PSN */
	uint32_t dst_rc_qpn; /* REP, RTU: the receiver's RC QP the message answers; REQ: 0 */
	uint64_t conn_id;    /* the REQ's id, echoed by REP and RTU (logs) */
	uint32_t mtu;	     /* the sender's port's active path MTU (nicmr_port_mtu), bytes */
	uint16_t service;    /* the sender's service (a sockaddr domain's endpoint), else 0 */
	uint16_t reserved;   /* 0 */
};
static_assert(sizeof(HsMsg) == 56);

/* A handshake message in host order: what hs_encode sends and hs_decode accepted. */
struct HsFields {
	uint8_t type = 0;
	uint16_t src_udp_port = 0;
	uint8_t src_gid[16] = {};
	uint32_t src_ud_qpn = 0;
	uint32_t rc_qpn = 0;
	uint32_t psn = 0;
	uint32_t dst_rc_qpn = 0;
	uint64_t conn_id = 0;
	uint32_t mtu = 0;
	uint16_t service = 0;
};

/* Why hs_decode refused a datagram (none: accepted). */
enum class HsRefusal : uint8_t {
	none,
	length,	  /* not sizeof(HsMsg) bytes */
	magic,	  /* not kHsMagic */
	version,  /* not kHsVersion */
	type,	  /* not REQ, REP or RTU */
	qpn,	  /* src_ud_qpn or rc_qpn 0 or wider than 24 bits, dst_rc_qpn wider */
	psn,	  /* wider than 24 bits */
	gid,	  /* all zero */
	mtu,	  /* not 256, 512, 1024, 2048 or 4096 */
	reserved, /* not zero */
};

inline constexpr uint32_t kHsQpnMask = 0xffffff; /* QPNs and PSNs are 24 bits (IBTA BTH) */

inline bool hs_path_mtu(uint32_t mtu) noexcept
{
	return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

/* The datagram of f. */
inline HsMsg hs_encode(const HsFields &f) noexcept
{
	HsMsg m{};
	m.magic = htonl(kHsMagic);
	m.version = kHsVersion;
	m.type = f.type;
	m.src_udp_port = htons(f.src_udp_port);
	std::memcpy(m.src_gid, f.src_gid, 16);
	m.src_ud_qpn = htonl(f.src_ud_qpn);
	m.rc_qpn = htonl(f.rc_qpn);
	m.psn = htonl(f.psn);
	m.dst_rc_qpn = htonl(f.dst_rc_qpn);
	m.conn_id = htobe64(f.conn_id);
	m.mtu = htonl(f.mtu);
	m.service = htons(f.service);
	return m;
}

/* The len bytes at p as a handshake message into *out (untouched unless accepted). */
inline HsRefusal hs_decode(const uint8_t *p, size_t len, HsFields *out) noexcept
{
	if (len != sizeof(HsMsg))
		return HsRefusal::length;
	HsMsg m;
	std::memcpy(&m, p, sizeof(m));
	if (ntohl(m.magic) != kHsMagic)
		return HsRefusal::magic;
	if (m.version != kHsVersion)
		return HsRefusal::version;
	if (m.type != kMsgReq && m.type != kMsgRep && m.type != kMsgRtu)
		return HsRefusal::type;
	HsFields f;
	f.src_ud_qpn = ntohl(m.src_ud_qpn);
	f.rc_qpn = ntohl(m.rc_qpn);
	f.dst_rc_qpn = ntohl(m.dst_rc_qpn);
	f.psn = ntohl(m.psn);
	f.mtu = ntohl(m.mtu);
	if (f.src_ud_qpn == 0 || f.src_ud_qpn > kHsQpnMask || f.rc_qpn == 0 ||
	    f.rc_qpn > kHsQpnMask || f.dst_rc_qpn > kHsQpnMask)
		return HsRefusal::qpn;
	if (f.psn > kHsQpnMask)
		return HsRefusal::psn;
	static constexpr uint8_t kZero[16] = {};
	if (std::memcmp(m.src_gid, kZero, 16) == 0)
		return HsRefusal::gid;
	if (!hs_path_mtu(f.mtu))
		return HsRefusal::mtu;
	if (m.reserved != 0)
		return HsRefusal::reserved;
	f.type = m.type;
	f.src_udp_port = ntohs(m.src_udp_port);
	std::memcpy(f.src_gid, m.src_gid, 16);
	f.conn_id = be64toh(m.conn_id);
	f.service = ntohs(m.service);
	*out = f;
	return HsRefusal::none;
}

} // namespace nicmr::fabric

#endif
