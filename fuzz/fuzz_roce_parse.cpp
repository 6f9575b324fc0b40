/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target: roce::parse sees every datagram that reaches UDP port 4791, from any host.
 * The input names the IP path (IPv4 or IPv6) and holds the datagram (fuzz_roce_format.h); with
 * the reseal flag the datagram's true ICRC is written first, so that mutations get past the
 * ICRC to the field checks. Nothing may crash the parser or make it read outside the datagram
 * (AddressSanitizer: the datagram is an exact-size copy), and what it accepts must hold
 * together: views inside the datagram where the opcode's headers are, the payload between the
 * headers and the pad, and build() from the parsed fields giving back the same packet (but for
 * the reserved bits, which build() sends as 0, and the pad bytes, which it zeroes).
 */
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_roce_format.h"
#include "roce_packet.h"

using namespace nicmr::roce;
namespace prm = nicmr::mlx5::prm;

namespace {

void check(bool ok)
{
	if (!ok)
		std::abort();
}

Headers fields(const Parsed &p)
{
	Headers h;
	h.opcode = p.opcode;
	h.se = prm::get(p.bth, bth::se) != 0;
	h.m = prm::get(p.bth, bth::m) != 0;
	h.p_key = static_cast<uint16_t>(prm::get(p.bth, bth::p_key));
	h.dest_qp = static_cast<uint32_t>(prm::get(p.bth, bth::dest_qp));
	h.ack_req = prm::get(p.bth, bth::ack_req) != 0;
	h.psn = static_cast<uint32_t>(prm::get(p.bth, bth::psn));
	if (p.deth != nullptr)
		h.deth = {static_cast<uint32_t>(prm::get(p.deth, deth::q_key)),
			  static_cast<uint32_t>(prm::get(p.deth, deth::src_qp))};
	if (p.reth != nullptr)
		h.reth = {prm::get(p.reth, reth::va),
			  static_cast<uint32_t>(prm::get(p.reth, reth::r_key)),
			  static_cast<uint32_t>(prm::get(p.reth, reth::dma_len))};
	if (p.aeth != nullptr)
		h.aeth = {static_cast<uint8_t>(prm::get(p.aeth, aeth::syndrome)),
			  static_cast<uint32_t>(prm::get(p.aeth, aeth::msn))};
	if (p.atomic_eth != nullptr)
		h.atomic = {prm::get(p.atomic_eth, atomic_eth::va),
			    static_cast<uint32_t>(prm::get(p.atomic_eth, atomic_eth::r_key)),
			    prm::get(p.atomic_eth, atomic_eth::swap_add),
			    prm::get(p.atomic_eth, atomic_eth::compare)};
	if (p.atomic_ack_eth != nullptr)
		h.atomic_orig = prm::get(p.atomic_ack_eth, atomic_ack_eth::orig_data);
	if (p.immdt != nullptr)
		h.imm = static_cast<uint32_t>(prm::get(p.immdt, immdt::imm));
	if (p.ieth != nullptr)
		h.ieth_r_key = static_cast<uint32_t>(prm::get(p.ieth, ieth::r_key));
	return h;
}

/* Each header view is where the opcode table puts it, or null when the opcode has none. */
void check_view(const Parsed &p, const uint8_t *d, const uint8_t *view, uint8_t bit)
{
	if (!p.info->has(bit)) {
		check(view == nullptr);
		return;
	}
	const size_t off = p.info->offset(bit);
	const size_t size = ext::sizes[static_cast<size_t>(__builtin_ctz(bit))];
	check(view == d + off && off >= bth::size && off + size <= p.info->hdr_len);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	using namespace nicmr::roce::fuzz;
	if (size < kPrefix)
		return 0;
	const uint8_t flags = data[0];
	IpPath path;
	path.ipv6 = (flags & kFlagIpv6) != 0;
	path.ipv4_df = (flags & kFlagDf) != 0;
	std::memcpy(path.src.data(), data + 1, 16);
	std::memcpy(path.dst.data(), data + 17, 16);
	path.src_port = static_cast<uint16_t>(data[33] << 8 | data[34]);
	path.ipv4_id = static_cast<uint16_t>(data[35] << 8 | data[36]);
	/* An exact-size copy: a read one byte past the datagram is an ASan report. */
	std::vector<uint8_t> d(data + kPrefix, data + size);
	const size_t n = d.size();
	if ((flags & kFlagReseal) != 0 && n >= bth::size + icrc_size && n <= max_datagram)
		store_icrc(d.data() + n - icrc_size, icrc(path, d.data(), n));

	Parsed p;
	if (parse(path, d, &p) != Error::ok)
		return 0;
	check(p.info != nullptr && p.info == opcode_info(p.opcode) && p.info->name != nullptr);
	check(p.bth == d.data() && p.opcode == d[0]);
	check_view(p, d.data(), p.deth, ext::deth);
	check_view(p, d.data(), p.reth, ext::reth);
	check_view(p, d.data(), p.aeth, ext::aeth);
	check_view(p, d.data(), p.atomic_eth, ext::atomic_eth);
	check_view(p, d.data(), p.atomic_ack_eth, ext::atomic_ack_eth);
	check_view(p, d.data(), p.immdt, ext::immdt);
	check_view(p, d.data(), p.ieth, ext::ieth);
	check(p.payload.data() == d.data() + p.info->hdr_len);
	check(p.info->hdr_len + p.payload.size() + p.pad + icrc_size == n);
	check(p.pad == prm::get(p.bth, bth::pad_cnt) && p.payload.size() <= max_payload);
	check(p.info->payload || (p.payload.empty() && p.pad == 0));

	/* What parse accepted, build must make again from its fields. */
	const Headers h = fields(p);
	std::vector<uint8_t> again(max_datagram);
	size_t len = 0;
	check(build(path, h, p.payload, again, &len) == Error::ok);
	check(len == n);
	/* Reserved bits differ where the sender set them (build sends 0s): FECN, BECN and resv6
	 * in byte 4 (resv8a), resv7 in byte 8 below AckReq. */
	std::vector<uint8_t> a(d.begin(), d.begin() + p.info->hdr_len);
	std::vector<uint8_t> b(again.begin(), again.begin() + p.info->hdr_len);
	a[bth::resv8a_byte] = b[bth::resv8a_byte] = 0;
	a[8] &= 0x80;
	b[8] &= 0x80;
	/* And the DETH's reserved byte, which a receiver ignores (IBTA 9.3.3). */
	if (p.deth != nullptr) {
		const size_t at = static_cast<size_t>(p.deth - d.data()) + deth::resv.bit_off / 8;
		a[at] = b[at] = 0;
	}
	check(a == b);
	check(std::equal(p.payload.begin(), p.payload.end(), again.begin() + p.info->hdr_len));
	Parsed q;
	check(parse(path, std::span<const uint8_t>(again.data(), len), &q) == Error::ok);
	check(q.opcode == p.opcode && q.pad == p.pad && q.payload.size() == p.payload.size());
	return 0;
}
