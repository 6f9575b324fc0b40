/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The SIDR MADs of fi_sidr.cpp (Service ID Resolution, IBTA vol. 1 §12.11): their layouts and
 * the decoder of what arrives on the device's GSI QP. Any host that reaches the port may send
 * to QP 1, so the decoder trusts nothing: a datagram shorter than a MAD, a MAD that is not a
 * CM SEND of class version 2, or of another attribute than SIDR_REQ and SIDR_REP, is refused
 * with its reason, and the fields of what it accepts are in host order with the QPN cut to its
 * 24 bits. Header-only, without libfabric, so that the unit test
 * (test/fabric/test_fabric_sidr_mad.cpp) and the fuzz target (fuzz/fuzz_fabric_sidr_mad.cpp)
 * take the very code the provider runs.
 *
 * The layouts are IBTA vol. 1 §13.4.2 (the common MAD header) and §12.6.13 / §12.6.14
 * (Tables 117 and 118: SIDR_REQ and SIDR_REP); Linux drivers/infiniband/core/cm_msgs.h has the
 * same. The service ID of a UDP port is rdma_cm's (Linux drivers/infiniband/core/cma.c,
 * cma_get_service_id: RDMA_PS_UDP 0x0111 << 16 plus the port).
 */
#ifndef NICMR_FABRIC_FI_SIDR_MAD_H
#define NICMR_FABRIC_FI_SIDR_MAD_H

#include <arpa/inet.h>
#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace nicmr::fabric {

/* The MAD (256 bytes, every multi-byte field big-endian). */
inline constexpr size_t kMadSize = 256;
inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;	 /* IBTA Table 110: Communication Management */
inline constexpr uint8_t kCmClassVersion = 2;	 /* IBTA 1.2 and later */
inline constexpr uint8_t kMethodSend = 0x03;	 /* CM MADs are SENDs (IBTA §12.6) */
inline constexpr uint16_t kAttrSidrReq = 0x0017; /* IBTA Table 111 */
inline constexpr uint16_t kAttrSidrRep = 0x0018;
/* SIDR_REP status (IBTA Table 119). */
inline constexpr uint8_t kSidrOk = 0;	       /* the QPN and Q_Key are valid */
inline constexpr uint8_t kSidrUnsupported = 1; /* service ID not supported */
/* rdma_cm's service ID of a UDP port (cma.c, RDMA_PS_UDP). */
inline constexpr uint64_t kPsUdp = 0x0000000001110000ull;

struct MadHdr {
	uint8_t base_version;
	uint8_t mgmt_class;
	uint8_t class_version;
	uint8_t method;
	uint16_t status;
	uint16_t class_specific;
	uint64_t tid;
	uint16_t attr_id;
	uint16_t reserved;
	uint32_t attr_mod;
};
static_assert(sizeof(MadHdr) == 24);

struct SidrReq {
	MadHdr hdr;
	uint32_t request_id;
	uint16_t p_key;
	uint16_t reserved;
	uint64_t service_id;
	/* private data (216 bytes): rdma_cm's address header first */
	uint8_t cma_version;
	uint8_t ip_version; /* 4 or 6 in the high nibble */
	uint16_t src_port;
	uint8_t src_addr[16];
	uint8_t dst_addr[16];
	uint8_t private_rest[216 - 36];
};
static_assert(sizeof(SidrReq) == kMadSize);

struct SidrRep {
	MadHdr hdr;
	uint32_t request_id;
	uint8_t status;
	uint8_t info_length;
	uint16_t reserved;
	uint32_t qpn_rsvd;	/* QPN in the upper 24 bits */
	uint32_t service_id[2]; /* 64 bits at byte 36: two words */
	uint32_t q_key;
	uint8_t info[72];
	uint8_t private_data[136];
};
static_assert(sizeof(SidrRep) == kMadSize);

/* The common header of a CM SEND of attribute attr. */
inline void mad_hdr(MadHdr *h, uint16_t attr, uint64_t tid) noexcept
{
	h->base_version = kMadBaseVersion;
	h->mgmt_class = kMgmtClassCm;
	h->class_version = kCmClassVersion;
	h->method = kMethodSend;
	h->tid = htobe64(tid);
	h->attr_id = htons(attr);
}

/* A received SIDR MAD in host order. */
struct SidrFields {
	uint16_t attr = 0; /* kAttrSidrReq or kAttrSidrRep */
	uint64_t tid = 0;
	uint32_t request_id = 0;
	uint64_t service_id = 0;
	/* SIDR_REP only. */
	uint8_t status = 0;
	uint32_t qpn = 0; /* 24 bits */
	uint32_t q_key = 0;
};

/* Why sidr_decode refused a datagram (none: accepted). */
enum class SidrRefusal : uint8_t {
	none,
	length,	   /* shorter than a MAD */
	not_cm,	   /* base version, class, class version or method not a CM SEND */
	attribute, /* neither SIDR_REQ nor SIDR_REP */
};

/* The len bytes at p (a UD payload: the MAD; bytes past it are ignored) into *out, untouched
 * unless accepted. */
inline SidrRefusal sidr_decode(const uint8_t *p, size_t len, SidrFields *out) noexcept
{
	if (len < kMadSize)
		return SidrRefusal::length;
	MadHdr h;
	std::memcpy(&h, p, sizeof(h));
	if (h.base_version != kMadBaseVersion || h.mgmt_class != kMgmtClassCm ||
	    h.class_version != kCmClassVersion || h.method != kMethodSend)
		return SidrRefusal::not_cm;
	SidrFields f;
	f.attr = ntohs(h.attr_id);
	f.tid = be64toh(h.tid);
	if (f.attr == kAttrSidrReq) {
		SidrReq m;
		std::memcpy(&m, p, sizeof(m));
		f.request_id = ntohl(m.request_id);
		f.service_id = be64toh(m.service_id);
	} else if (f.attr == kAttrSidrRep) {
		SidrRep m;
		std::memcpy(&m, p, sizeof(m));
		f.request_id = ntohl(m.request_id);
		uint64_t sid;
		std::memcpy(&sid, m.service_id, 8);
		f.service_id = be64toh(sid);
		f.status = m.status;
		f.qpn = ntohl(m.qpn_rsvd) >> 8;
		f.q_key = ntohl(m.q_key);
	} else {
		return SidrRefusal::attribute;
	}
	*out = f;
	return SidrRefusal::none;
}

/* The UDP port of an rdma_cm UDP service ID, or false for another port space. */
inline bool udp_service(uint64_t service_id, uint16_t *port) noexcept
{
	if ((service_id & ~uint64_t{0xffff}) != kPsUdp)
		return false;
	*port = static_cast<uint16_t>(service_id & 0xffff);
	return true;
}

} // namespace nicmr::fabric

#endif
