/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RoCEv2 packet builder, parser and ICRC. Hot path throughout: no lock, no allocation, no
 * system call (see roce_packet.h).
 *
 * The CRC is CRC-32 with the Ethernet polynomial, seed ~0 and result inverted: the bits of
 * zlib's crc32 and of Linux crc32_le as rxe uses it, and of ISA-L's crc32_gzip_refl (isa-l/crc.h:
 * the reflected IEEE CRC of RFC 1952, taking and returning a finished CRC as zlib does; its
 * crc32_ieee is the unreflected one and does not match). ISA-L picks a carry-less-multiply
 * version at run time. Measured on this machine (Intel Xeon, AVX-512 with VPCLMULQDQ, one core;
 * ns per call, median of three runs of 400,000 calls):
 *
 *   bytes                  48      68      124     4096
 *   ISA-L crc32_gzip_refl  3.0 ns  4.6 ns  6.3 ns    43 ns
 *   zlib crc32_z (1.2.13)   47 ns   84 ns   87 ns   800 ns
 *   slicing-by-8 tables     14 ns   23 ns   49 ns  1930 ns
 *
 * The masked headers are 48 or 68 bytes and a MIDDLE packet's payload 4096 at MTU 4096; the tree
 * before used the tables below 256 bytes and zlib above, and a 64 KiB RDMA WRITE spent 46 % of
 * both processes' CPU in zlib (perf record of bench-wire's BM_Write64K). test_roce checks every
 * length against zlib, as the outside implementation.
 *
 * DPDK's rte_net_crc_calc gives the same bits but takes no seed, so it cannot chain over the
 * stack copy of the masked headers and the packet in place; and without EAL (which sets the SIMD
 * width it checks) it runs its scalar code: 9.7 us per 4 KiB here.
 */
#include "roce_packet.h"

#include <cstring>

#include <endian.h>
#include <isa-l/crc.h>

namespace nicmr::roce {

namespace prm = mlx5::prm;

namespace {
/* The value the ICRC reads in place of each masked field: all 1s. */
constexpr uint64_t ones = ~uint64_t{0};

/* Whether the CPU has AVX, so that vzeroupper exists (read once, at load). */
#if defined(__x86_64__)
const bool cpu_has_avx = __builtin_cpu_supports("avx");
#endif

/* ISA-L's AVX-512 version folds runs of 256 bytes and more in ZMM registers and returns without
 * VZEROUPPER, which leaves the upper halves dirty: every SSE instruction after it (the compiler's
 * inlined copies) then pays a merge, and on this machine a 64 B parse after a 4 KiB one took
 * 142 ns instead of 35 (bench-roce's Parse/64 run after Build/4096, against alone). Clearing them
 * costs a cycle (Intel's optimization manual, "Mixing AVX code and SSE code"). */
inline void clear_upper_state() noexcept
{
#if defined(__x86_64__)
	if (cpu_has_avx)
		/* vzeroupper zeroes bits 128 and up of every vector register: the compiler must
		 * keep nothing there across it (x86-64 has no callee-saved vector registers, and
		 * this follows a call). */
		asm volatile("vzeroupper" ::
				     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
				       "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
				       "xmm14", "xmm15");
#endif
}

/* crc is a finished CRC (zlib's convention): 0 to start, the previous result to chain. */
uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n) noexcept
{
	const uint32_t c = crc32_gzip_refl(crc, p, n);
	if (n >= 256)
		clear_upper_state();
	return c;
}
} // namespace

const char *error_name(Error e) noexcept
{
	switch (e) {
	case Error::ok:
		return "ok";
	case Error::too_short:
		return "too_short";
	case Error::too_long:
		return "too_long";
	case Error::bad_icrc:
		return "bad_icrc";
	case Error::bad_tver:
		return "bad_tver";
	case Error::unknown_opcode:
		return "unknown_opcode";
	case Error::truncated:
		return "truncated";
	case Error::bad_length:
		return "bad_length";
	case Error::bad_pad:
		return "bad_pad";
	case Error::unexpected_payload:
		return "unexpected_payload";
	case Error::payload_too_long:
		return "payload_too_long";
	case Error::field_range:
		return "field_range";
	case Error::no_room:
		return "no_room";
	}
	return "unknown";
}

IpPath ipv4_path(const in_addr &src, const in_addr &dst, uint16_t src_port,
		 uint16_t dst_port) noexcept
{
	IpPath p;
	std::memcpy(p.src.data(), &src.s_addr, 4);
	std::memcpy(p.dst.data(), &dst.s_addr, 4);
	p.src_port = src_port;
	p.dst_port = dst_port;
	return p;
}

IpPath ipv6_path(const in6_addr &src, const in6_addr &dst, uint16_t src_port,
		 uint16_t dst_port) noexcept
{
	IpPath p;
	p.ipv6 = true;
	std::memcpy(p.src.data(), src.s6_addr, 16);
	std::memcpy(p.dst.data(), dst.s6_addr, 16);
	p.src_port = src_port;
	p.dst_port = dst_port;
	return p;
}

size_t icrc_prefix(const IpPath &path, size_t datagram_len, uint8_t *out) noexcept
{
	/* The LRH an InfiniBand packet would have, masked entirely (annex A17; rxe seeds its CRC
	 * with the value after these 8 bytes, 0xdebb20e3). */
	std::memset(out, 0xff, 8);
	uint8_t *ip = out + 8;
	uint8_t *u;
	if (!path.ipv6) {
		std::memset(ip, 0, ipv4::size);
		prm::set(ip, ipv4::version, 4);
		prm::set(ip, ipv4::ihl, ipv4::size / 4);
		prm::set(ip, ipv4::tos, ones);
		prm::set(ip, ipv4::total_length, ipv4::size + udp::size + datagram_len);
		prm::set(ip, ipv4::id, path.ipv4_id);
		prm::set(ip, ipv4::flags_frag, path.ipv4_df ? ipv4::flag_df : 0);
		prm::set(ip, ipv4::ttl, ones);
		prm::set(ip, ipv4::protocol, ipv4::protocol_udp);
		prm::set(ip, ipv4::checksum, ones);
		std::memcpy(ip + prm::byte_offset(ipv4::src), path.src.data(), 4);
		std::memcpy(ip + prm::byte_offset(ipv4::dst), path.dst.data(), 4);
		u = ip + ipv4::size;
	} else {
		std::memset(ip, 0, ipv6::size);
		prm::set(ip, ipv6::version, 6);
		prm::set(ip, ipv6::traffic_class, ones);
		prm::set(ip, ipv6::flow_label, ones);
		prm::set(ip, ipv6::payload_length, udp::size + datagram_len);
		prm::set(ip, ipv6::next_header, ipv4::protocol_udp);
		prm::set(ip, ipv6::hop_limit, ones);
		std::memcpy(ip + ipv6::src_byte, path.src.data(), 16);
		std::memcpy(ip + ipv6::dst_byte, path.dst.data(), 16);
		u = ip + ipv6::size;
	}
	prm::set(u, udp::src_port, path.src_port);
	prm::set(u, udp::dst_port, path.dst_port);
	prm::set(u, udp::length, udp::size + datagram_len);
	prm::set(u, udp::checksum, ones);
	return static_cast<size_t>(u + udp::size - out);
}

uint32_t icrc(const IpPath &path, const uint8_t *datagram, size_t len) noexcept
{
	/* The masked headers and the masked BTH in one buffer: one CRC call, then one over the
	 * rest of the packet where it lies. */
	uint8_t pre[icrc_prefix_max + bth::size];
	const size_t n = icrc_prefix(path, len, pre);
	std::memcpy(pre + n, datagram, bth::size);
	prm::set(pre + n, bth::resv8a, bth::resv8a_icrc_mask);
	uint32_t crc = crc_update(0, pre, n + bth::size);
	return crc_update(crc, datagram + bth::size, len - bth::size - icrc_size);
}

uint32_t load_icrc(const uint8_t *p) noexcept
{
	uint32_t le;
	std::memcpy(&le, p, sizeof(le));
	return le32toh(le);
}

void store_icrc(uint8_t *p, uint32_t v) noexcept
{
	const uint32_t le = htole32(v);
	std::memcpy(p, &le, sizeof(le));
}

Error build(const IpPath &path, const Headers &h, std::span<const uint8_t> payload,
	    std::span<uint8_t> out, size_t *len) noexcept
{
	const OpcodeInfo *info = opcode_info(h.opcode);
	if (info == nullptr)
		return Error::unknown_opcode;
	if (!info->payload && !payload.empty())
		return Error::unexpected_payload;
	if (payload.size() > max_payload)
		return Error::payload_too_long;
	if (!prm::fits(bth::dest_qp, h.dest_qp) || !prm::fits(bth::psn, h.psn) ||
	    (info->has(ext::aeth) && !prm::fits(aeth::msn, h.aeth.msn)) ||
	    (info->has(ext::deth) && !prm::fits(deth::src_qp, h.deth.src_qp)))
		return Error::field_range;
	const uint32_t pad = pad_count(payload.size());
	const size_t total = info->hdr_len + payload.size() + pad + icrc_size;
	if (out.size() < total)
		return Error::no_room;

	uint8_t *p = out.data();
	/* Zero first: the reserved bits are sent as 0 and set() keeps a field's neighbours. */
	std::memset(p, 0, info->hdr_len);
	prm::set(p, bth::opcode, h.opcode);
	prm::set(p, bth::se, h.se);
	prm::set(p, bth::m, h.m);
	prm::set(p, bth::pad_cnt, pad);
	prm::set(p, bth::tver, bth::tver_supported);
	prm::set(p, bth::p_key, h.p_key);
	prm::set(p, bth::dest_qp, h.dest_qp);
	prm::set(p, bth::ack_req, h.ack_req);
	prm::set(p, bth::psn, h.psn);
	if (info->has(ext::deth)) {
		uint8_t *d = p + info->offset(ext::deth);
		prm::set(d, deth::q_key, h.deth.q_key);
		prm::set(d, deth::src_qp, h.deth.src_qp);
	}
	if (info->has(ext::reth)) {
		uint8_t *r = p + info->offset(ext::reth);
		prm::set(r, reth::va, h.reth.va);
		prm::set(r, reth::r_key, h.reth.r_key);
		prm::set(r, reth::dma_len, h.reth.dma_len);
	}
	if (info->has(ext::aeth)) {
		uint8_t *a = p + info->offset(ext::aeth);
		prm::set(a, aeth::syndrome, h.aeth.syndrome);
		prm::set(a, aeth::msn, h.aeth.msn);
	}
	if (info->has(ext::atomic_eth)) {
		uint8_t *a = p + info->offset(ext::atomic_eth);
		prm::set(a, atomic_eth::va, h.atomic.va);
		prm::set(a, atomic_eth::r_key, h.atomic.r_key);
		prm::set(a, atomic_eth::swap_add, h.atomic.swap_add);
		prm::set(a, atomic_eth::compare, h.atomic.compare);
	}
	if (info->has(ext::atomic_ack_eth))
		prm::set(p + info->offset(ext::atomic_ack_eth), atomic_ack_eth::orig_data,
			 h.atomic_orig);
	if (info->has(ext::immdt))
		prm::set(p + info->offset(ext::immdt), immdt::imm, h.imm);
	if (info->has(ext::ieth))
		prm::set(p + info->offset(ext::ieth), ieth::r_key, h.ieth_r_key);

	uint8_t *body = p + info->hdr_len;
	if (!payload.empty() && payload.data() != body)
		std::memmove(body, payload.data(), payload.size());
	std::memset(body + payload.size(), 0, pad);
	store_icrc(p + total - icrc_size, icrc(path, p, total));
	*len = total;
	return Error::ok;
}

Error parse(const IpPath &path, std::span<const uint8_t> datagram, Parsed *out) noexcept
{
	const uint8_t *d = datagram.data();
	const size_t n = datagram.size();
	if (n > max_datagram)
		return Error::too_long;
	if (n < bth::size + icrc_size)
		return Error::too_short;
	if (load_icrc(d + n - icrc_size) != icrc(path, d, n))
		return Error::bad_icrc;
	if (prm::get(d, bth::tver) != bth::tver_supported)
		return Error::bad_tver;
	const auto op = static_cast<uint8_t>(prm::get(d, bth::opcode));
	const OpcodeInfo *info = opcode_info(op);
	if (info == nullptr)
		return Error::unknown_opcode;
	if (n < info->hdr_len + icrc_size)
		return Error::truncated;
	const size_t rest = n - info->hdr_len - icrc_size; /* payload and pad */
	if (rest % 4 != 0)
		return Error::bad_length;
	const auto pad = static_cast<uint32_t>(prm::get(d, bth::pad_cnt));
	if (pad > rest)
		return Error::bad_pad;
	if (!info->payload && rest != 0)
		return Error::unexpected_payload;
	if (rest - pad > max_payload)
		return Error::payload_too_long;

	Parsed r;
	r.opcode = op;
	r.info = info;
	r.bth = d;
	auto view = [&](uint8_t bit) -> const uint8_t * {
		return info->has(bit) ? d + info->offset(bit) : nullptr;
	};
	r.deth = view(ext::deth);
	r.reth = view(ext::reth);
	r.aeth = view(ext::aeth);
	r.atomic_eth = view(ext::atomic_eth);
	r.atomic_ack_eth = view(ext::atomic_ack_eth);
	r.immdt = view(ext::immdt);
	r.ieth = view(ext::ieth);
	r.payload = datagram.subspan(info->hdr_len, rest - pad);
	r.pad = pad;
	*out = r;
	return Error::ok;
}

} // namespace nicmr::roce
