/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target: the provider's handshake decoder (fabric/fi_handshake.h, hs_decode) sees
 * every datagram that reaches an endpoint's UD QP with its Q_Key, from any peer. The input is
 * the datagram, whole. Nothing may crash the decoder or make it read outside the datagram
 * (AddressSanitizer: an exact-size copy); a refused datagram leaves the output untouched; what
 * it accepts holds together (QPNs and the PSN within 24 bits, non-zero QPNs, a GID that is not
 * all zero, a path MTU) and is the datagram hs_encode makes of it, byte for byte.
 */
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fi_handshake.h"

using namespace nicmr::fabric;

namespace {

void check(bool ok)
{
	if (!ok)
		std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const std::vector<uint8_t> d(data, data + size);
	HsFields f;
	f.rc_qpn = 0x5a5a5a;
	const HsRefusal why = hs_decode(d.data(), d.size(), &f);
	if (why != HsRefusal::none) {
		check(f.rc_qpn == 0x5a5a5a);
		return 0;
	}
	check(size == sizeof(HsMsg));
	check(f.type == kMsgReq || f.type == kMsgRep || f.type == kMsgRtu);
	check(f.src_ud_qpn != 0 && f.src_ud_qpn <= kHsQpnMask);
	check(f.rc_qpn != 0 && f.rc_qpn <= kHsQpnMask);
	check(f.dst_rc_qpn <= kHsQpnMask && f.psn <= kHsQpnMask);
	check(hs_path_mtu(f.mtu));
	static constexpr uint8_t kZero[16] = {};
	check(std::memcmp(f.src_gid, kZero, 16) != 0);
	const HsMsg m = hs_encode(f);
	check(std::memcmp(&m, d.data(), sizeof(m)) == 0);
	return 0;
}
