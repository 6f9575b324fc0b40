/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The RoCEv2 header layout table: the IBTA transport headers RC and UD packets carry, field by
 * field, and the opcode table that says which of them follow the BTH. Shared by every sender
 * and receiver of the wire (the device model's ports); doc/roce.md is its page.
 *
 * A RoCEv2 packet is a UDP datagram to port 4791 (IBTA annex A17) whose payload is
 *
 *   +-----+------+------+------+-----------+--------------+-------+------+---------+-----+-------+
 *   | BTH | DETH | RETH | AETH | AtomicETH | AtomicAckETH | ImmDt | IETH | payload | pad | ICRC  |
 *   | 12  |  8   |  16  |  4   |    28     |      8       |   4   |  4   | 0..4096 | 0-3 | 4, LE |
 *   +-----+------+------+------+-----------+--------------+-------+------+---------+-----+-------+
 *           \_________ only those the opcode names (opcode_info), in this order _________/
 *
 * RC opcodes never carry a DETH; the two UD opcodes carry it and nothing of RETH .. AtomicAckETH
 * or IETH (IBTA 9.2, table 35: DETH is the Datagram ETH, right after the BTH).
 *
 * Fields use the PRM table's mechanism (drivers/common/mlx5/mlx5_prm.h): a Field is a bit
 * offset from the most significant bit of the header and a width, every header is big-endian
 * on the wire, and prm::get()/prm::set() are the only code that shifts, masks or swaps a field.
 * The ICRC alone is little-endian (Linux rxe_icrc.c stores the CRC in CPU order on x86, as
 * hardware sends it): roce_packet.h's load_icrc()/store_icrc() convert it.
 *
 * Sources: IBTA vol. 1, 9.2 (BTH), 9.3 (extended transport headers; 9.3.3 DETH), 9.7.5.2 (AETH
 * syndrome), table 35 (opcodes); Linux drivers/infiniband/sw/rxe/rxe_hdr.h (the same fields and
 * masks) and rxe_opcode.c (rxe_opcode[]: which headers each opcode carries).
 */
#ifndef NICMR_ROCE_HDR_H
#define NICMR_ROCE_HDR_H

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "mlx5_prm.h"

namespace nicmr::roce {

using Field = mlx5::prm::Field;

/* IANA's RoCEv2 destination port (annex A17). */
inline constexpr uint16_t udp_port = 4791;
/* The default partition key, full membership (rxe's default P_Key). */
inline constexpr uint16_t default_p_key = 0xffff;
/* The largest payload of one packet: the largest path MTU, 4096 (IBTA: 256..4096; enum ibv_mtu). */
inline constexpr size_t max_payload = 4096;
/* The ICRC ends every packet: 4 bytes. */
inline constexpr size_t icrc_size = 4;

/* Base Transport Header (IBTA 9.2; rxe_hdr.h struct rxe_bth). */
namespace bth {
inline constexpr size_t size = 12;
inline constexpr Field opcode{0, 8};
inline constexpr Field se{8, 1};       /* solicited event */
inline constexpr Field m{9, 1};	       /* MigReq */
inline constexpr Field pad_cnt{10, 2}; /* bytes after the payload that pad it to 4 */
inline constexpr Field tver{12, 4};    /* transport header version */
inline constexpr Field p_key{16, 16};
inline constexpr Field fecn{32, 1};
inline constexpr Field becn{33, 1};
inline constexpr Field resv6{34, 6};
/* The whole byte 4 (FECN, BECN, resv6): RoCEv2 names it resv8a, and the ICRC masks it to 1s
 * because a switch may mark it in flight (rxe_icrc.c "exclude bth.resv8a"). */
inline constexpr Field resv8a{32, 8};
inline constexpr Field dest_qp{40, 24};
inline constexpr Field ack_req{64, 1};
inline constexpr Field resv7{65, 7};
inline constexpr Field psn{72, 24};

/* The only version IBTA defines; a packet of another is refused (rxe: BTH_TVER). */
inline constexpr uint32_t tver_supported = 0;
/* The byte of resv8a and the value the ICRC reads in its place. */
inline constexpr size_t resv8a_byte = 4;
inline constexpr uint8_t resv8a_icrc_mask = 0xff;
} // namespace bth

/*
 * Datagram Extended Transport Header (IBTA 9.3.3; rxe_hdr.h struct rxe_deth): the Q_Key the
 * receiving UD QP checks and the sending QP's number.
 */
namespace deth {
inline constexpr size_t size = 8;
inline constexpr Field q_key{0, 32};
inline constexpr Field resv{32, 8};
inline constexpr Field src_qp{40, 24};
/* A Q_Key with this bit set in a UD send work request means "the sending QP's own Q_Key"
 * (IBTA 10.2.5, C10-15; rxe_req.c init_req_packet, ibv_post_send(3) "remote_qkey"). */
inline constexpr uint32_t q_key_use_qp = 0x80000000u;
} // namespace deth

/* RDMA Extended Transport Header (IBTA 9.3): RDMA WRITE first/only and READ request. */
namespace reth {
inline constexpr size_t size = 16;
inline constexpr Field va{0, 64};
inline constexpr Field r_key{64, 32};
inline constexpr Field dma_len{96, 32};
} // namespace reth

/*
 * ACK Extended Transport Header (IBTA 9.3): ACKs and READ responses. The syndrome byte splits
 * (IBTA 9.7.5.2; rxe_hdr.h enum aeth_syndrome):
 *
 *   bit 7     reserved (0)
 *   bits 6:5  type: 0 ACK, 1 RNR NAK, 2 reserved, 3 NAK
 *   bits 4:0  ACK: credit count code; RNR NAK: RNR timer code; NAK: NAK code
 */
namespace aeth {
inline constexpr size_t size = 4;
inline constexpr Field syndrome{0, 8};
inline constexpr Field msn{8, 24};
/* The syndrome's parts, relative to the AETH like the fields above. */
inline constexpr Field syndrome_resv{0, 1};
inline constexpr Field syndrome_type{1, 2};
inline constexpr Field syndrome_value{3, 5};

namespace type {
inline constexpr uint8_t ack = 0;
inline constexpr uint8_t rnr_nak = 1;
inline constexpr uint8_t reserved = 2;
inline constexpr uint8_t nak = 3;
} // namespace type

/* NAK codes (the value of a type-3 syndrome). */
namespace nak {
inline constexpr uint8_t psn_seq_error = 0;
inline constexpr uint8_t invalid_request = 1;
inline constexpr uint8_t remote_access_error = 2;
inline constexpr uint8_t remote_operational_error = 3;
inline constexpr uint8_t invalid_rd_request = 4; /* RD only; an RC peer never sends it */
} // namespace nak

/* The credit code 31 of an ACK: "no credit count" (end-to-end flow control not in use; rxe
 * sends it always, AETH_ACK_UNLIMITED). */
inline constexpr uint8_t credit_invalid = 31;

/* The syndrome byte of a type and a 5-bit value, and its parts (through the fields above,
 * on the syndrome byte alone: it is the AETH's byte 0). */
inline uint8_t make_syndrome(uint8_t t, uint8_t value) noexcept
{
	uint8_t b = 0;
	mlx5::prm::set(&b, syndrome_type, t);
	mlx5::prm::set(&b, syndrome_value, value);
	return b;
}
inline uint8_t syndrome_type_of(uint8_t syndrome_byte) noexcept
{
	return static_cast<uint8_t>(mlx5::prm::get(&syndrome_byte, syndrome_type));
}
inline uint8_t syndrome_value_of(uint8_t syndrome_byte) noexcept
{
	return static_cast<uint8_t>(mlx5::prm::get(&syndrome_byte, syndrome_value));
}

/*
 * The credits an ACK's credit code 0..30 grants: 0, 1, 2, 3, 4, 6, 8, 12, 16, ... 24576, 32768
 * (IBTA 9.7.5.2 credit table; Linux rdmavt rc.c credit_table[] holds the same 31 values): from
 * code 2 on, even codes are 2^(code/2) and odd codes 3 * 2^((code-3)/2). Code 31 (invalid) and
 * anything larger give -1.
 */
constexpr int32_t credits(uint8_t code) noexcept
{
	if (code >= credit_invalid)
		return -1;
	if (code < 2)
		return code;
	return code % 2 == 0 ? int32_t{1} << (code / 2) : int32_t{3} << ((code - 3) / 2);
}

/*
 * The wait an RNR NAK's timer code 0..31 asks for, in microseconds: code 0 is 655.36 ms, codes
 * 1..31 are 0.01 ms times the credit sequence above (1, 2, 3, 4, 6, ...), up to 491.52 ms for
 * 31 (IBTA 9.7.5.2 RNR timer table; Linux rdmavt qp.c ib_rvt_rnr_table[] holds the same 32
 * values). Larger codes give 0.
 */
constexpr uint32_t rnr_timer_us(uint8_t code) noexcept
{
	if (code > 31)
		return 0;
	if (code == 0)
		return 655360;
	if (code < 2)
		return 10;
	return 10u * (code % 2 == 0 ? uint32_t{1} << (code / 2) : uint32_t{3} << ((code - 3) / 2));
}
} // namespace aeth

/* Atomic Extended Transport Header (IBTA 9.3): CmpSwap and FetchAdd requests. */
namespace atomic_eth {
inline constexpr size_t size = 28;
inline constexpr Field va{0, 64};
inline constexpr Field r_key{64, 32};
inline constexpr Field swap_add{96, 64}; /* swap value (CmpSwap) or addend (FetchAdd) */
inline constexpr Field compare{160, 64};
} // namespace atomic_eth

/* Atomic Acknowledge Extended Transport Header (IBTA 9.3): the value before the atomic. */
namespace atomic_ack_eth {
inline constexpr size_t size = 8;
inline constexpr Field orig_data{0, 64};
} // namespace atomic_ack_eth

/* Immediate Data (IBTA 9.3). */
namespace immdt {
inline constexpr size_t size = 4;
inline constexpr Field imm{0, 32};
} // namespace immdt

/* Invalidate Extended Transport Header (IBTA 9.3): the R_Key a SEND with invalidate
 * invalidates at the responder. */
namespace ieth {
inline constexpr size_t size = 4;
inline constexpr Field r_key{0, 32};
} // namespace ieth

/*
 * The IP and UDP headers, for the ICRC's masked copy of them (annex A17; roce_packet.h builds
 * it): the fields of RFC 791, RFC 8200 and RFC 768, with the ones the ICRC masks named.
 */
namespace ipv4 {
inline constexpr size_t size = 20; /* no options: IHL 5 */
inline constexpr Field version{0, 4};
inline constexpr Field ihl{4, 4};
inline constexpr Field tos{8, 8}; /* DSCP and ECN: masked */
inline constexpr Field total_length{16, 16};
inline constexpr Field id{32, 16};
inline constexpr Field flags_frag{48, 16}; /* DF is 0x4000 */
inline constexpr Field ttl{64, 8};	   /* masked */
inline constexpr Field protocol{72, 8};
inline constexpr Field checksum{80, 16}; /* masked */
inline constexpr Field src{96, 32};
inline constexpr Field dst{128, 32};
inline constexpr uint32_t flag_df = 0x4000;
inline constexpr uint32_t protocol_udp = 17;
} // namespace ipv4

namespace ipv6 {
inline constexpr size_t size = 40;
inline constexpr Field version{0, 4};
inline constexpr Field traffic_class{4, 8}; /* masked */
inline constexpr Field flow_label{12, 20};  /* masked */
inline constexpr Field payload_length{32, 16};
inline constexpr Field next_header{48, 8};
inline constexpr Field hop_limit{56, 8}; /* masked */
inline constexpr size_t src_byte = 8;	 /* 16 bytes each, network order */
inline constexpr size_t dst_byte = 24;
} // namespace ipv6

namespace udp {
inline constexpr size_t size = 8;
inline constexpr Field src_port{0, 16};
inline constexpr Field dst_port{16, 16};
inline constexpr Field length{32, 16};	 /* UDP header + datagram */
inline constexpr Field checksum{48, 16}; /* masked */
} // namespace udp

/* RC opcodes (IBTA table 35, transport bits 7:5 = 000; rxe IB_OPCODE_RC_*). */
namespace opcode {
inline constexpr uint8_t send_first = 0x00;
inline constexpr uint8_t send_middle = 0x01;
inline constexpr uint8_t send_last = 0x02;
inline constexpr uint8_t send_last_imm = 0x03;
inline constexpr uint8_t send_only = 0x04;
inline constexpr uint8_t send_only_imm = 0x05;
inline constexpr uint8_t write_first = 0x06;
inline constexpr uint8_t write_middle = 0x07;
inline constexpr uint8_t write_last = 0x08;
inline constexpr uint8_t write_last_imm = 0x09;
inline constexpr uint8_t write_only = 0x0a;
inline constexpr uint8_t write_only_imm = 0x0b;
inline constexpr uint8_t read_request = 0x0c;
inline constexpr uint8_t read_response_first = 0x0d;
inline constexpr uint8_t read_response_middle = 0x0e;
inline constexpr uint8_t read_response_last = 0x0f;
inline constexpr uint8_t read_response_only = 0x10;
inline constexpr uint8_t acknowledge = 0x11;
inline constexpr uint8_t atomic_acknowledge = 0x12;
inline constexpr uint8_t compare_swap = 0x13;
inline constexpr uint8_t fetch_add = 0x14;
/* 0x15 is reserved */
inline constexpr uint8_t send_last_inv = 0x16;
inline constexpr uint8_t send_only_inv = 0x17;
/* One past the last RC opcode: the opcode table's size. */
inline constexpr size_t rc_count = 0x18;
/* UD opcodes (IBTA table 35, transport bits 7:5 = 011; rxe IB_OPCODE_UD_*): the only two a UD
 * QP sends, one packet per message. */
inline constexpr uint8_t ud_send_only = 0x64;
inline constexpr uint8_t ud_send_only_imm = 0x65;
} // namespace opcode

/* The extension headers, as bits of OpcodeInfo::ext; they follow the BTH in this order. */
namespace ext {
inline constexpr uint8_t deth = 1u << 0;
inline constexpr uint8_t reth = 1u << 1;
inline constexpr uint8_t aeth = 1u << 2;
inline constexpr uint8_t atomic_eth = 1u << 3;
inline constexpr uint8_t atomic_ack_eth = 1u << 4;
inline constexpr uint8_t immdt = 1u << 5;
inline constexpr uint8_t ieth = 1u << 6;
inline constexpr size_t count = 7;
/* Sizes in the order of the bits. */
inline constexpr std::array<uint8_t, count> sizes{
	deth::size,	      reth::size,  aeth::size, atomic_eth::size,
	atomic_ack_eth::size, immdt::size, ieth::size};
} // namespace ext

/* What an opcode's packet holds after its BTH. */
struct OpcodeInfo {
	const char *name; /* IBTA's name; nullptr for an opcode nicmr does not speak */
	uint8_t ext;	  /* ext:: bits of the headers that follow the BTH */
	bool payload;	  /* whether the packet may carry a payload */
	uint8_t hdr_len;  /* BTH + the extension headers */
	/* Byte offset of each extension header from the BTH's start, by ext:: bit index; 0 when
	 * the opcode has no such header. */
	std::array<uint8_t, ext::count> off;

	constexpr bool has(uint8_t ext_bit) const noexcept { return (ext & ext_bit) != 0; }
	/* Offset of the header of ext_bit (one ext:: bit); 0 when the opcode has none. */
	constexpr size_t offset(uint8_t ext_bit) const noexcept
	{
		return off[static_cast<size_t>(std::countr_zero(ext_bit))];
	}
};

namespace detail {
constexpr OpcodeInfo op(const char *name, uint8_t ext_bits, bool payload) noexcept
{
	OpcodeInfo i{name, ext_bits, payload, static_cast<uint8_t>(bth::size), {}};
	for (size_t b = 0; b < ext::count; b++) {
		if ((ext_bits >> b & 1u) == 0)
			continue;
		i.off[b] = i.hdr_len;
		i.hdr_len = static_cast<uint8_t>(i.hdr_len + ext::sizes[b]);
	}
	return i;
}

/* IBTA table 35's RC rows; the same headers as rxe_opcode.c's rxe_opcode[] RC entries. */
inline constexpr std::array<OpcodeInfo, opcode::rc_count> rc_opcodes{
	op("SEND_FIRST", 0, true),
	op("SEND_MIDDLE", 0, true),
	op("SEND_LAST", 0, true),
	op("SEND_LAST_WITH_IMMEDIATE", ext::immdt, true),
	op("SEND_ONLY", 0, true),
	op("SEND_ONLY_WITH_IMMEDIATE", ext::immdt, true),
	op("RDMA_WRITE_FIRST", ext::reth, true),
	op("RDMA_WRITE_MIDDLE", 0, true),
	op("RDMA_WRITE_LAST", 0, true),
	op("RDMA_WRITE_LAST_WITH_IMMEDIATE", ext::immdt, true),
	op("RDMA_WRITE_ONLY", ext::reth, true),
	op("RDMA_WRITE_ONLY_WITH_IMMEDIATE", ext::reth | ext::immdt, true),
	op("RDMA_READ_REQUEST", ext::reth, false),
	op("RDMA_READ_RESPONSE_FIRST", ext::aeth, true),
	op("RDMA_READ_RESPONSE_MIDDLE", 0, true),
	op("RDMA_READ_RESPONSE_LAST", ext::aeth, true),
	op("RDMA_READ_RESPONSE_ONLY", ext::aeth, true),
	op("ACKNOWLEDGE", ext::aeth, false),
	op("ATOMIC_ACKNOWLEDGE", ext::aeth | ext::atomic_ack_eth, false),
	op("COMPARE_SWAP", ext::atomic_eth, false),
	op("FETCH_ADD", ext::atomic_eth, false),
	OpcodeInfo{nullptr, 0, false, 0, {}}, /* 0x15 reserved */
	op("SEND_LAST_WITH_INVALIDATE", ext::ieth, true),
	op("SEND_ONLY_WITH_INVALIDATE", ext::ieth, true),
};

/* IBTA table 35's UD rows (0x64, 0x65); rxe_opcode.c's IB_OPCODE_UD_SEND_ONLY entries. */
inline constexpr std::array<OpcodeInfo, 2> ud_opcodes{
	op("UD_SEND_ONLY", ext::deth, true),
	op("UD_SEND_ONLY_WITH_IMMEDIATE", ext::deth | ext::immdt, true),
};
} // namespace detail

/* The opcode's row, or nullptr for an opcode that is not an RC or UD opcode of table 35 (UC,
 * RD, CNP, reserved, vendor). */
constexpr const OpcodeInfo *opcode_info(uint8_t op) noexcept
{
	if (op == opcode::ud_send_only || op == opcode::ud_send_only_imm)
		return &detail::ud_opcodes[op - opcode::ud_send_only];
	if (op >= opcode::rc_count || detail::rc_opcodes[op].name == nullptr)
		return nullptr;
	return &detail::rc_opcodes[op];
}

/* Whether op is one of the UD opcodes (a datagram: DETH, no transport acknowledgement). */
constexpr bool is_ud(uint8_t op) noexcept
{
	return op == opcode::ud_send_only || op == opcode::ud_send_only_imm;
}

/* BTH plus the opcode's extension headers, in bytes; 0 for an opcode opcode_info() refuses. */
constexpr size_t header_length(uint8_t op) noexcept
{
	const OpcodeInfo *i = opcode_info(op);
	return i != nullptr ? i->hdr_len : 0;
}

/* The largest header_length() of any opcode (CmpSwap and FetchAdd: 12 + 28). */
inline constexpr size_t max_header_length = bth::size + atomic_eth::size;

/* Pad bytes after a payload of len bytes (BTH PadCnt): up to the next multiple of 4. */
constexpr uint32_t pad_count(size_t len) noexcept
{
	return static_cast<uint32_t>((4 - len % 4) % 4);
}

} // namespace nicmr::roce

#endif
