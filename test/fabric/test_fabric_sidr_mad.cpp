/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The provider's SIDR MAD decoder on its own (fabric/fi_sidr_mad.h: no device, no libfabric):
 * SIDR_REQ and SIDR_REP fields come back in host order (the REP's QPN from its upper 24 bits),
 * bytes past the MAD are ignored, and each datagram that is not a SIDR MAD of this version is
 * refused with its reason, *out untouched.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fi_sidr_mad.h"

namespace nicmr::fabric {
namespace {

template <typename M> std::vector<uint8_t> bytes(const M &m, size_t extra = 0)
{
	std::vector<uint8_t> b(sizeof(m) + extra, 0xee);
	std::memcpy(b.data(), &m, sizeof(m));
	return b;
}

SidrReq req()
{
	SidrReq m{};
	mad_hdr(&m.hdr, kAttrSidrReq, 0x1122334455667788ull);
	m.request_id = htonl(0xabcdef01);
	m.service_id = htobe64(kPsUdp | 49152);
	return m;
}

SidrRep rep()
{
	SidrRep m{};
	mad_hdr(&m.hdr, kAttrSidrRep, 0x8877665544332211ull);
	m.request_id = htonl(0x01020304);
	m.status = kSidrOk;
	m.qpn_rsvd = htonl(0xabcdefu << 8 | 0x5a); /* the low byte is reserved */
	const uint64_t sid = htobe64(kPsUdp | 4791);
	std::memcpy(m.service_id, &sid, 8);
	m.q_key = htonl(0x4e4d52);
	return m;
}

SidrRefusal decode(const std::vector<uint8_t> &b, SidrFields *f)
{
	f->q_key = 0x77;
	const SidrRefusal r = sidr_decode(b.data(), b.size(), f);
	if (r != SidrRefusal::none) {
		EXPECT_EQ(f->q_key, 0x77u) << "a refused datagram wrote *out";
	}
	return r;
}

TEST(FabricSidrMad, RequestAndReplyDecodeInHostOrder)
{
	SidrFields f;
	ASSERT_EQ(decode(bytes(req()), &f), SidrRefusal::none);
	EXPECT_EQ(f.attr, kAttrSidrReq);
	EXPECT_EQ(f.tid, 0x1122334455667788ull);
	EXPECT_EQ(f.request_id, 0xabcdef01u);
	EXPECT_EQ(f.service_id, kPsUdp | 49152);
	uint16_t port = 0;
	ASSERT_TRUE(udp_service(f.service_id, &port));
	EXPECT_EQ(port, 49152);

	/* Bytes past the MAD (a longer UD payload) are not read into it. */
	ASSERT_EQ(decode(bytes(rep(), 40), &f), SidrRefusal::none);
	EXPECT_EQ(f.attr, kAttrSidrRep);
	EXPECT_EQ(f.tid, 0x8877665544332211ull);
	EXPECT_EQ(f.request_id, 0x01020304u);
	EXPECT_EQ(f.status, kSidrOk);
	EXPECT_EQ(f.qpn, 0xabcdefu);
	EXPECT_EQ(f.q_key, 0x4e4d52u);
	EXPECT_EQ(f.service_id, kPsUdp | 4791);

	/* Another port space than rdma_cm's UDP one is no UDP service. */
	EXPECT_FALSE(udp_service(0x0000000001060000ull | 4791, &port)); /* RDMA_PS_TCP */
	EXPECT_FALSE(udp_service(kPsUdp | (uint64_t{1} << 32), &port));
}

TEST(FabricSidrMad, EachDatagramThatIsNoSidrMadIsRefusedWithItsReason)
{
	SidrFields f;
	std::vector<uint8_t> b = bytes(req());
	b.pop_back();
	EXPECT_EQ(decode(b, &f), SidrRefusal::length);
	EXPECT_EQ(decode({}, &f), SidrRefusal::length);
	struct Case {
		const char *what;
		void (*spoil)(SidrReq &);
		SidrRefusal want;
	};
	const Case cases[] = {
		{"base version", [](SidrReq &m) { m.hdr.base_version = 2; }, SidrRefusal::not_cm},
		{"class", [](SidrReq &m) { m.hdr.mgmt_class = 0x03; }, SidrRefusal::not_cm},
		{"class version", [](SidrReq &m) { m.hdr.class_version = 1; }, SidrRefusal::not_cm},
		{"method", [](SidrReq &m) { m.hdr.method = 0x81; }, SidrRefusal::not_cm},
		{"REQ (0x10)", [](SidrReq &m) { m.hdr.attr_id = htons(0x0010); },
		 SidrRefusal::attribute},
		{"attribute 0", [](SidrReq &m) { m.hdr.attr_id = 0; }, SidrRefusal::attribute},
		{"attribute byte-swapped", [](SidrReq &m) { m.hdr.attr_id = kAttrSidrReq; },
		 SidrRefusal::attribute},
	};
	for (const Case &c : cases) {
		SidrReq m = req();
		c.spoil(m);
		EXPECT_EQ(decode(bytes(m), &f), c.want) << c.what;
	}
}

} // namespace
} // namespace nicmr::fabric
