/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The provider's handshake datagram on its own (fabric/fi_handshake.h: no device, no
 * libfabric): what hs_encode writes hs_decode reads back field for field, and each malformed
 * datagram is refused with its own reason, *out untouched.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fi_handshake.h"

namespace nicmr::fabric {
namespace {

HsFields valid()
{
	HsFields f;
	f.type = kMsgRep;
	f.src_udp_port = 4791;
	for (int i = 0; i < 16; i++)
		f.src_gid[i] = static_cast<uint8_t>(0xf0 + i);
	f.src_ud_qpn = 0x12;
	f.rc_qpn = 0xabcdef;
	f.psn = 0x123456;
	f.dst_rc_qpn = 0x33;
	f.conn_id = 0x0102030405060708ull;
	f.mtu = 4096;
	f.service = 49152;
	return f;
}

std::vector<uint8_t> bytes(const HsMsg &m)
{
	std::vector<uint8_t> b(sizeof(m));
	std::memcpy(b.data(), &m, sizeof(m));
	return b;
}

/* The refusal of b, and that *out stayed as it was. */
HsRefusal decode(const std::vector<uint8_t> &b)
{
	HsFields out;
	out.rc_qpn = 0x5a5a;
	const HsRefusal r = hs_decode(b.data(), b.size(), &out);
	if (r != HsRefusal::none) {
		EXPECT_EQ(out.rc_qpn, 0x5a5au) << "a refused datagram wrote *out";
	}
	return r;
}

TEST(FabricHandshake, WhatIsEncodedDecodesFieldForField)
{
	for (const uint8_t type : {kMsgReq, kMsgRep, kMsgRtu}) {
		HsFields f = valid();
		f.type = type;
		const std::vector<uint8_t> b = bytes(hs_encode(f));
		/* Network order on the wire. */
		EXPECT_EQ(b[0], 0x4e);
		EXPECT_EQ(b[4], kHsVersion);
		EXPECT_EQ(b[5], type);
		HsFields g;
		ASSERT_EQ(hs_decode(b.data(), b.size(), &g), HsRefusal::none);
		EXPECT_EQ(g.type, f.type);
		EXPECT_EQ(g.src_udp_port, f.src_udp_port);
		EXPECT_EQ(std::memcmp(g.src_gid, f.src_gid, 16), 0);
		EXPECT_EQ(g.src_ud_qpn, f.src_ud_qpn);
		EXPECT_EQ(g.rc_qpn, f.rc_qpn);
		EXPECT_EQ(g.psn, f.psn);
		EXPECT_EQ(g.dst_rc_qpn, f.dst_rc_qpn);
		EXPECT_EQ(g.conn_id, f.conn_id);
		EXPECT_EQ(g.mtu, f.mtu);
		EXPECT_EQ(g.service, f.service);
	}
	for (const uint32_t mtu : {256u, 512u, 1024u, 2048u, 4096u}) {
		HsFields f = valid();
		f.mtu = mtu;
		const std::vector<uint8_t> b = bytes(hs_encode(f));
		EXPECT_EQ(decode(b), HsRefusal::none) << mtu;
	}
}

TEST(FabricHandshake, EachMalformedDatagramIsRefusedWithItsReason)
{
	const HsMsg good = hs_encode(valid());
	/* Lengths: one byte short, one byte long, none. */
	std::vector<uint8_t> b = bytes(good);
	b.pop_back();
	EXPECT_EQ(decode(b), HsRefusal::length);
	b.push_back(0);
	b.push_back(0);
	EXPECT_EQ(decode(b), HsRefusal::length);
	EXPECT_EQ(decode({}), HsRefusal::length);

	struct Case {
		const char *what;
		void (*spoil)(HsMsg &);
		HsRefusal want;
	};
	const Case cases[] = {
		{"magic", [](HsMsg &m) { m.magic ^= htonl(1); }, HsRefusal::magic},
		{"version 2", [](HsMsg &m) { m.version = 2; }, HsRefusal::version},
		{"version 4", [](HsMsg &m) { m.version = 4; }, HsRefusal::version},
		{"type 0", [](HsMsg &m) { m.type = 0; }, HsRefusal::type},
		{"type 4", [](HsMsg &m) { m.type = 4; }, HsRefusal::type},
		{"src_ud_qpn 0", [](HsMsg &m) { m.src_ud_qpn = 0; }, HsRefusal::qpn},
		{"src_ud_qpn 25 bits", [](HsMsg &m) { m.src_ud_qpn = htonl(1u << 24); },
		 HsRefusal::qpn},
		{"rc_qpn 0", [](HsMsg &m) { m.rc_qpn = 0; }, HsRefusal::qpn},
		{"rc_qpn 25 bits", [](HsMsg &m) { m.rc_qpn = htonl(1u << 24); }, HsRefusal::qpn},
		{"dst_rc_qpn 25 bits", [](HsMsg &m) { m.dst_rc_qpn = htonl(1u << 24); },
		 HsRefusal::qpn},
		{"psn 25 bits", [](HsMsg &m) { m.psn = htonl(1u << 24); }, HsRefusal::psn},
		{"gid zero", [](HsMsg &m) { std::memset(m.src_gid, 0, 16); }, HsRefusal::gid},
		{"mtu 0", [](HsMsg &m) { m.mtu = 0; }, HsRefusal::mtu},
		{"mtu 1500", [](HsMsg &m) { m.mtu = htonl(1500); }, HsRefusal::mtu},
		{"mtu 8192", [](HsMsg &m) { m.mtu = htonl(8192); }, HsRefusal::mtu},
		{"reserved", [](HsMsg &m) { m.reserved = htons(1); }, HsRefusal::reserved},
	};
	for (const Case &c : cases) {
		HsMsg m = good;
		c.spoil(m);
		EXPECT_EQ(decode(bytes(m)), c.want) << c.what;
	}
	/* The edges that are accepted: 24-bit values, a REQ's dst_rc_qpn 0, service 0. */
	HsMsg m = good;
	m.src_ud_qpn = m.rc_qpn = m.dst_rc_qpn = m.psn = htonl(0xffffff);
	EXPECT_EQ(decode(bytes(m)), HsRefusal::none);
	m = good;
	m.dst_rc_qpn = 0;
	m.service = 0;
	m.psn = 0;
	EXPECT_EQ(decode(bytes(m)), HsRefusal::none);
}

} // namespace
} // namespace nicmr::fabric
