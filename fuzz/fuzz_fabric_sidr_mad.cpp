/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target: the provider's SIDR MAD decoder (fabric/fi_sidr_mad.h, sidr_decode) sees
 * every datagram that reaches the device's GSI QP (QP 1), from any host. The input is the UD
 * payload, whole. Nothing may crash the decoder or make it read outside the datagram
 * (AddressSanitizer: an exact-size copy); a refused datagram leaves the output untouched; what
 * it accepts holds together (a MAD's length at least, one of the two attributes, a 24-bit QPN),
 * and a MAD built again from the accepted fields decodes to the same fields.
 */
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fi_sidr_mad.h"

using namespace nicmr::fabric;

namespace {

void check(bool ok)
{
	if (!ok)
		std::abort();
}

bool same(const SidrFields &a, const SidrFields &b)
{
	return a.attr == b.attr && a.tid == b.tid && a.request_id == b.request_id &&
	       a.service_id == b.service_id && a.status == b.status && a.qpn == b.qpn &&
	       a.q_key == b.q_key;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const std::vector<uint8_t> d(data, data + size);
	SidrFields f;
	f.q_key = 0x5a5a5a5a;
	if (sidr_decode(d.data(), d.size(), &f) != SidrRefusal::none) {
		check(f.q_key == 0x5a5a5a5a);
		return 0;
	}
	check(size >= kMadSize);
	check(f.attr == kAttrSidrReq || f.attr == kAttrSidrRep);
	check(f.qpn <= 0xffffff);
	uint8_t again[kMadSize] = {};
	if (f.attr == kAttrSidrReq) {
		check(f.status == 0 && f.qpn == 0 && f.q_key == 0);
		SidrReq m{};
		mad_hdr(&m.hdr, kAttrSidrReq, f.tid);
		m.request_id = htonl(f.request_id);
		m.service_id = htobe64(f.service_id);
		std::memcpy(again, &m, sizeof(m));
	} else {
		SidrRep m{};
		mad_hdr(&m.hdr, kAttrSidrRep, f.tid);
		m.request_id = htonl(f.request_id);
		m.status = f.status;
		m.qpn_rsvd = htonl(f.qpn << 8);
		const uint64_t sid = htobe64(f.service_id);
		std::memcpy(m.service_id, &sid, 8);
		m.q_key = htonl(f.q_key);
		std::memcpy(again, &m, sizeof(m));
	}
	SidrFields g;
	check(sidr_decode(again, sizeof(again), &g) == SidrRefusal::none);
	check(same(f, g));
	return 0;
}
