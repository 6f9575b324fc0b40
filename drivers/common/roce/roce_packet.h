/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RoCEv2 packets: the ICRC (IBTA annex A17), a builder that lays a packet out in a caller's
 * buffer and a parser that validates a received datagram and returns views of its headers.
 * The layouts come from roce_hdr.h; doc/roce.md lists every rule and error.
 *
 * Hot path: build(), parse(), icrc() and icrc_prefix() take no lock, allocate nothing and make
 * no system call (the CRC is ISA-L's crc32_gzip_refl, carry-less multiplies over the caller's
 * bytes; roce_packet.cpp says why). Keep it so.
 *
 * The ICRC covers the IP and UDP headers that carry the datagram, with their variant fields
 * masked. Over a kernel UDP socket nicmr does not write those headers, so the caller describes
 * them (IpPath): addresses, ports and, for IPv4, the ID and DF the kernel will send. Linux
 * (include/net/ip.h ip_select_ident_segs) sends ID 0 for a DF datagram from an unconnected
 * socket, which is IpPath's default; a connected socket sends a per-socket counter instead, and
 * a datagram without DF a hashed ID, neither of which the sender can know in advance.
 */
#ifndef NICMR_ROCE_PACKET_H
#define NICMR_ROCE_PACKET_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include <netinet/in.h>

#include "roce_hdr.h"

namespace nicmr::roce {

/* Why build() or parse() refused; error_name() gives the name doc/roce.md uses. */
enum class Error : uint8_t {
	ok = 0,
	too_short,	    /* parse: fewer bytes than a BTH and an ICRC (16) */
	too_long,	    /* parse: more bytes than the largest packet (max_datagram) */
	bad_icrc,	    /* parse: the ICRC does not match the masked headers and payload */
	bad_tver,	    /* parse: BTH TVer is not 0 */
	unknown_opcode,	    /* parse, build: not an RC or UD opcode of IBTA table 35 */
	truncated,	    /* parse: shorter than the opcode's headers and the ICRC */
	bad_length,	    /* parse: the bytes after the headers are not a multiple of 4 */
	bad_pad,	    /* parse: PadCnt larger than the bytes after the headers */
	unexpected_payload, /* parse, build: a payload on an opcode that carries none */
	payload_too_long,   /* parse, build: a payload above max_payload (4096) */
	field_range,	    /* build: DestQP, PSN, MSN or DETH SrcQP does not fit 24 bits */
	no_room,	    /* build: the output buffer is smaller than the packet */
};

/* "ok", "too_short", ...: the enumerator's name. */
const char *error_name(Error e) noexcept;

/* The largest datagram a valid packet makes: the longest headers, a full payload, 3 bytes of pad
 * (only a payload that is not a multiple of 4 has pad, so this is 3 more than any packet
 * reaches; the bound is for refusing early) and the ICRC. */
inline constexpr size_t max_datagram = max_header_length + max_payload + 3 + icrc_size;

/*
 * The IP and UDP headers a datagram travels in, as far as the ICRC covers them: the sender's
 * view (src is the sender). IPv4 addresses are the first 4 bytes of src and dst, network order.
 */
struct IpPath {
	bool ipv6 = false;
	std::array<uint8_t, 16> src{};
	std::array<uint8_t, 16> dst{};
	uint16_t src_port = 0;
	uint16_t dst_port = udp_port;
	uint16_t ipv4_id = 0; /* the IPv4 ID the kernel sends (see the top of this file) */
	bool ipv4_df = true;  /* the IPv4 DF flag */
};

IpPath ipv4_path(const in_addr &src, const in_addr &dst, uint16_t src_port,
		 uint16_t dst_port = udp_port) noexcept;
IpPath ipv6_path(const in6_addr &src, const in6_addr &dst, uint16_t src_port,
		 uint16_t dst_port = udp_port) noexcept;

/* 8 bytes standing for the LRH, an IPv6 header (the larger) and a UDP header. */
inline constexpr size_t icrc_prefix_max = 8 + ipv6::size + udp::size;

/*
 * Writes the bytes the ICRC covers before the BTH (annex A17; Linux rxe_icrc.c rxe_icrc_hdr):
 * 8 bytes of 0xff for the LRH RoCEv2 does not have, then the IP header of path with its variant
 * fields set to 1s (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label, hop
 * limit), then the UDP header with its checksum set to 1s. The lengths are those of a datagram
 * (UDP payload) of datagram_len bytes, at most 65507; out has room for icrc_prefix_max bytes.
 * Returns the count written: 36 for IPv4, 56 for IPv6. Hot path.
 */
size_t icrc_prefix(const IpPath &path, size_t datagram_len, uint8_t *out) noexcept;

/*
 * The ICRC of a datagram of len bytes (BTH first, the 4 ICRC bytes last and not covered; len >=
 * 16): CRC-32 (the Ethernet polynomial, seed ~0, result inverted: zlib's crc32, and Linux
 * crc32_le as rxe_icrc.c uses it) over icrc_prefix(), the BTH with resv8a set to 1s, then every
 * byte after the BTH up to the ICRC. Hot path.
 */
uint32_t icrc(const IpPath &path, const uint8_t *datagram, size_t len) noexcept;

/* The ICRC on the wire is little-endian (rxe_icrc_generate stores the CPU-order value on x86;
 * hardware and scapy's roce.py agree). */
uint32_t load_icrc(const uint8_t *p) noexcept;
void store_icrc(uint8_t *p, uint32_t v) noexcept;

/* Extension header values for build(); only those of the opcode's headers are written. */
struct Reth {
	uint64_t va = 0;
	uint32_t r_key = 0;
	uint32_t dma_len = 0;
};
struct Aeth {
	uint8_t syndrome = 0; /* aeth::make_syndrome() */
	uint32_t msn = 0;     /* 24 bits */
};
struct Deth {
	uint32_t q_key = 0;
	uint32_t src_qp = 0; /* 24 bits */
};
struct AtomicEth {
	uint64_t va = 0;
	uint32_t r_key = 0;
	uint64_t swap_add = 0;
	uint64_t compare = 0;
};

/* One packet's header values. The reserved bits (resv8a, resv7) are sent as 0. */
struct Headers {
	uint8_t opcode = 0;
	bool se = false;
	bool m = false;
	uint16_t p_key = default_p_key;
	uint32_t dest_qp = 0; /* 24 bits */
	bool ack_req = false;
	uint32_t psn = 0; /* 24 bits */
	Deth deth;
	Reth reth;
	Aeth aeth;
	AtomicEth atomic;
	uint64_t atomic_orig = 0; /* AtomicAckETH */
	uint32_t imm = 0;	  /* ImmDt, big-endian on the wire like every header field */
	uint32_t ieth_r_key = 0;
};

/*
 * Lays out h's BTH and the opcode's extension headers, payload, zero pad up to 4 bytes (PadCnt)
 * and the ICRC over path at the start of out; *len = the datagram's length. The payload may
 * already lie at its place in out (out.data() + header_length(h.opcode)): it is then not
 * copied. On an error out and *len are left alone. Errors: unknown_opcode, unexpected_payload,
 * payload_too_long, field_range (DestQP, PSN, MSN or the DETH's source QP), no_room. Hot path.
 */
Error build(const IpPath &path, const Headers &h, std::span<const uint8_t> payload,
	    std::span<uint8_t> out, size_t *len) noexcept;

/* Views into a datagram parse() accepted: nullptr for a header the opcode does not have. Read
 * fields with mlx5::prm::get(view, bth::psn) and so on. */
struct Parsed {
	uint8_t opcode = 0;
	const OpcodeInfo *info = nullptr;
	const uint8_t *bth = nullptr;
	const uint8_t *deth = nullptr;
	const uint8_t *reth = nullptr;
	const uint8_t *aeth = nullptr;
	const uint8_t *atomic_eth = nullptr;
	const uint8_t *atomic_ack_eth = nullptr;
	const uint8_t *immdt = nullptr;
	const uint8_t *ieth = nullptr;
	std::span<const uint8_t> payload; /* without the pad */
	uint32_t pad = 0;
};

/*
 * Validates a received datagram (the UDP payload, ICRC included) sent over path, in this order:
 * too_long, too_short, bad_icrc, bad_tver, unknown_opcode, truncated, bad_length, bad_pad,
 * unexpected_payload, payload_too_long. The ICRC comes before every field check so that a packet
 * damaged in flight counts as bad_icrc whatever byte was hit. On ok *out holds views into
 * datagram; on an error *out is left alone. Reserved bits are not checked (IBTA: ignored on
 * receive); P_Key, DestQP, PSN and the path MTU are the transport's to check. Hot path.
 */
Error parse(const IpPath &path, std::span<const uint8_t> datagram, Parsed *out) noexcept;

} // namespace nicmr::roce

#endif
