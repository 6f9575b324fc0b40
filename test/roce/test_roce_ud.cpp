/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UD rows of the RoCEv2 layout table (drivers/common/roce/roce_hdr.h): UD SEND ONLY (0x64)
 * and UD SEND ONLY with immediate (0x65) carry BTH + DETH [+ ImmDt] (IBTA 9.3.3, table 35), and
 * build() and parse() lay them out and read them back.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include <arpa/inet.h>

#include "roce_packet.h"

namespace roce = nicmr::roce;
namespace prm = nicmr::mlx5::prm;
using roce::Error;

namespace {

roce::IpPath path()
{
	in_addr a{}, b{};
	inet_pton(AF_INET, "192.0.2.1", &a);
	inet_pton(AF_INET, "192.0.2.2", &b);
	return roce::ipv4_path(a, b, 49152);
}

roce::Headers ud(uint8_t opcode)
{
	roce::Headers h;
	h.opcode = opcode;
	h.dest_qp = 0x000123;
	h.psn = 0x000777;
	h.deth = {0x11223344, 0xabcdef};
	h.imm = 0xcafef00d;
	return h;
}

} // namespace

/* IBTA 9.3.3: Q_Key (4 bytes), a reserved byte, the source QP (3 bytes), right after the BTH;
 * the ImmDt of 0x65 after the DETH. */
TEST(RoceUd, DethBytesFollowTheBth)
{
	const uint8_t payload[5] = {1, 2, 3, 4, 5};
	std::vector<uint8_t> out(roce::max_datagram);
	size_t len = 0;
	ASSERT_EQ(roce::build(path(), ud(roce::opcode::ud_send_only_imm), payload, out, &len),
		  Error::ok);
	EXPECT_EQ(len, 12u + 8 + 4 + 5 + 3 + 4);
	EXPECT_EQ(out[0], 0x65);
	const uint8_t deth_imm[] = {0x11, 0x22, 0x33, 0x44, 0x00, 0xab, 0xcd, 0xef,
				    0xca, 0xfe, 0xf0, 0x0d, 1,	  2,	3,    4};
	EXPECT_EQ(std::memcmp(out.data() + 12, deth_imm, sizeof(deth_imm)), 0);
	EXPECT_EQ(roce::opcode_info(roce::opcode::ud_send_only)->offset(roce::ext::deth), 12u);
	EXPECT_EQ(roce::opcode_info(roce::opcode::ud_send_only_imm)->offset(roce::ext::immdt), 20u);
	EXPECT_STREQ(roce::opcode_info(0x64)->name, "UD_SEND_ONLY");
	EXPECT_TRUE(roce::is_ud(0x64));
	EXPECT_TRUE(roce::is_ud(0x65));
	EXPECT_FALSE(roce::is_ud(roce::opcode::send_only));
	EXPECT_EQ(roce::opcode_info(0x66), nullptr); /* UD has no other opcode */
}

TEST(RoceUd, ParseGivesTheDethAndImmediate)
{
	const uint8_t payload[64] = {7};
	for (const uint8_t op : {roce::opcode::ud_send_only, roce::opcode::ud_send_only_imm}) {
		SCOPED_TRACE(op);
		std::vector<uint8_t> out(roce::max_datagram);
		size_t len = 0;
		ASSERT_EQ(roce::build(path(), ud(op), payload, out, &len), Error::ok);
		out.resize(len);
		roce::Parsed p;
		ASSERT_EQ(roce::parse(path(), out, &p), Error::ok);
		ASSERT_NE(p.deth, nullptr);
		EXPECT_EQ(prm::get(p.deth, roce::deth::q_key), 0x11223344u);
		EXPECT_EQ(prm::get(p.deth, roce::deth::src_qp), 0xabcdefu);
		EXPECT_EQ(p.reth, nullptr);
		EXPECT_EQ(p.aeth, nullptr);
		EXPECT_EQ(p.immdt != nullptr, op == roce::opcode::ud_send_only_imm);
		if (p.immdt != nullptr) {
			EXPECT_EQ(prm::get(p.immdt, roce::immdt::imm), 0xcafef00du);
		}
		EXPECT_EQ(p.payload.size(), sizeof(payload));
		/* An RC opcode never has a DETH view. */
		roce::Headers rc;
		rc.opcode = roce::opcode::send_only;
		std::vector<uint8_t> r(roce::max_datagram);
		ASSERT_EQ(roce::build(path(), rc, payload, r, &len), Error::ok);
		r.resize(len);
		ASSERT_EQ(roce::parse(path(), r, &p), Error::ok);
		EXPECT_EQ(p.deth, nullptr);
	}
}

TEST(RoceUd, BuildRefusesASourceQpAbove24Bits)
{
	roce::Headers h = ud(roce::opcode::ud_send_only);
	h.deth.src_qp = 0x1000000;
	std::vector<uint8_t> out(roce::max_datagram);
	size_t len = 7;
	EXPECT_EQ(roce::build(path(), h, {}, out, &len), Error::field_range);
	EXPECT_EQ(len, 7u);
}

TEST(RoceUd, OnePacketCarriesAtMostTheLargestMtu)
{
	std::vector<uint8_t> payload(roce::max_payload + 1);
	std::vector<uint8_t> out(roce::max_datagram + 8);
	size_t len = 0;
	EXPECT_EQ(roce::build(path(), ud(roce::opcode::ud_send_only), payload, out, &len),
		  Error::payload_too_long);
	payload.pop_back();
	EXPECT_EQ(roce::build(path(), ud(roce::opcode::ud_send_only), payload, out, &len),
		  Error::ok);
	/* A truncated UD packet (the DETH cut) is refused as truncated. */
	out.resize(12 + 4);
	prm::set(out.data(), roce::bth::pad_cnt, 0);
	roce::store_icrc(out.data() + 12, roce::icrc(path(), out.data(), out.size()));
	roce::Parsed p;
	EXPECT_EQ(roce::parse(path(), out, &p), Error::truncated);
}
