/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The RoCEv2 layout table, builder, parser and ICRC (drivers/common/roce). The expected bytes
 * and sizes here are IBTA's (9.2, 9.3, table 35, 9.7.5.2) and Linux rxe's, written out by hand,
 * not computed with the code under test; the ICRC against an outside implementation is
 * test_roce_scapy.py's job.
 */
#include <arpa/inet.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>
#include <zlib.h>

#include "roce_packet.h"

namespace roce = nicmr::roce;
namespace prm = nicmr::mlx5::prm;
using roce::Error;

namespace {

roce::IpPath v4_path()
{
	in_addr s{}, d{};
	inet_pton(AF_INET, "192.0.2.1", &s);
	inet_pton(AF_INET, "192.0.2.2", &d);
	roce::IpPath p = roce::ipv4_path(s, d, 49152);
	p.ipv4_id = 0x1c46;
	return p;
}

roce::IpPath v6_path()
{
	in6_addr s{}, d{};
	inet_pton(AF_INET6, "2001:db8::1", &s);
	inet_pton(AF_INET6, "2001:db8::2", &d);
	return roce::ipv6_path(s, d, 50000);
}

std::vector<uint8_t> pattern(size_t n)
{
	std::vector<uint8_t> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = static_cast<uint8_t>(i * 13 + 7);
	return v;
}

/* Headers with a distinct value in every field, for round trips. */
roce::Headers all_fields(uint8_t opcode)
{
	roce::Headers h;
	h.opcode = opcode;
	h.se = true;
	h.m = true;
	h.p_key = 0x8001;
	h.dest_qp = 0xabcdef;
	h.ack_req = true;
	h.psn = 0xfedcba;
	h.reth = {0x1122334455667788, 0x99aabbcc, 0x12345};
	h.aeth = {roce::aeth::make_syndrome(roce::aeth::type::nak,
					    roce::aeth::nak::remote_access_error),
		  0x654321};
	h.atomic = {0x0102030405060708, 0xdeadbeef, 0xa1a2a3a4a5a6a7a8, 0xb1b2b3b4b5b6b7b8};
	h.atomic_orig = 0xc1c2c3c4c5c6c7c8;
	h.imm = 0x0badf00d;
	h.ieth_r_key = 0x7e7e7e7e;
	return h;
}

/* IBTA table 35 (RC) with the sizes of 9.2/9.3: BTH 12, RETH 16, AETH 4, AtomicETH 28,
 * AtomicAckETH 8, ImmDt 4, IETH 4. -1: no such RC opcode. */
struct Row {
	int hdr_len;
	bool payload;
};
constexpr Row kTable35[roce::opcode::rc_count] = {
	{12, true},  /* SEND_FIRST */
	{12, true},  /* SEND_MIDDLE */
	{12, true},  /* SEND_LAST */
	{16, true},  /* SEND_LAST_WITH_IMMEDIATE */
	{12, true},  /* SEND_ONLY */
	{16, true},  /* SEND_ONLY_WITH_IMMEDIATE */
	{28, true},  /* RDMA_WRITE_FIRST */
	{12, true},  /* RDMA_WRITE_MIDDLE */
	{12, true},  /* RDMA_WRITE_LAST */
	{16, true},  /* RDMA_WRITE_LAST_WITH_IMMEDIATE */
	{28, true},  /* RDMA_WRITE_ONLY */
	{32, true},  /* RDMA_WRITE_ONLY_WITH_IMMEDIATE */
	{28, false}, /* RDMA_READ_REQUEST */
	{16, true},  /* RDMA_READ_RESPONSE_FIRST */
	{12, true},  /* RDMA_READ_RESPONSE_MIDDLE */
	{16, true},  /* RDMA_READ_RESPONSE_LAST */
	{16, true},  /* RDMA_READ_RESPONSE_ONLY */
	{16, false}, /* ACKNOWLEDGE */
	{24, false}, /* ATOMIC_ACKNOWLEDGE */
	{40, false}, /* COMPARE_SWAP */
	{40, false}, /* FETCH_ADD */
	{-1, false}, /* reserved */
	{16, true},  /* SEND_LAST_WITH_INVALIDATE */
	{16, true},  /* SEND_ONLY_WITH_INVALIDATE */
};

/* A datagram parse() must accept, built by build(). */
std::vector<uint8_t> built(const roce::IpPath &path, const roce::Headers &h,
			   std::span<const uint8_t> payload)
{
	std::vector<uint8_t> out(roce::max_datagram);
	size_t len = 0;
	EXPECT_EQ(roce::build(path, h, payload, out, &len), Error::ok);
	out.resize(len);
	return out;
}

/* Rewrites the ICRC after a test changed the packet, so that the check under test is reached. */
void reseal(const roce::IpPath &path, std::vector<uint8_t> &d)
{
	roce::store_icrc(d.data() + d.size() - 4, roce::icrc(path, d.data(), d.size()));
}

Error parse(const roce::IpPath &path, const std::vector<uint8_t> &d, roce::Parsed *out = nullptr)
{
	roce::Parsed p;
	return roce::parse(path, d, out != nullptr ? out : &p);
}

} // namespace

TEST(RoceLayout, HeaderSizesAreIbtas)
{
	EXPECT_EQ(roce::bth::size, 12u);
	EXPECT_EQ(roce::reth::size, 16u);
	EXPECT_EQ(roce::aeth::size, 4u);
	EXPECT_EQ(roce::atomic_eth::size, 28u);
	EXPECT_EQ(roce::atomic_ack_eth::size, 8u);
	EXPECT_EQ(roce::immdt::size, 4u);
	EXPECT_EQ(roce::ieth::size, 4u);
	EXPECT_EQ(roce::deth::size, 8u);
	EXPECT_EQ(roce::max_header_length, 40u);
}

TEST(RoceLayout, OpcodeTableIsTable35)
{
	for (unsigned op = 0; op < 256; op++) {
		SCOPED_TRACE(op);
		const auto o = static_cast<uint8_t>(op);
		if (op == roce::opcode::ud_send_only || op == roce::opcode::ud_send_only_imm) {
			/* UD SEND ONLY [with ImmDt]: BTH + DETH [+ ImmDt] (test_roce_ud.cpp). */
			ASSERT_NE(roce::opcode_info(o), nullptr);
			EXPECT_EQ(roce::header_length(o),
				  op == roce::opcode::ud_send_only ? 20u : 24u);
			EXPECT_TRUE(roce::opcode_info(o)->payload);
			continue;
		}
		if (op >= roce::opcode::rc_count || kTable35[op].hdr_len < 0) {
			EXPECT_EQ(roce::opcode_info(o), nullptr);
			EXPECT_EQ(roce::header_length(o), 0u);
			continue;
		}
		ASSERT_NE(roce::opcode_info(o), nullptr);
		EXPECT_EQ(roce::header_length(o), static_cast<size_t>(kTable35[op].hdr_len));
		EXPECT_EQ(roce::opcode_info(o)->payload, kTable35[op].payload);
	}
	/* Order after the BTH: RETH before ImmDt, AETH before AtomicAckETH (rxe_opcode.c). */
	const roce::OpcodeInfo *w = roce::opcode_info(roce::opcode::write_only_imm);
	EXPECT_EQ(w->offset(roce::ext::reth), 12u);
	EXPECT_EQ(w->offset(roce::ext::immdt), 28u);
	const roce::OpcodeInfo *a = roce::opcode_info(roce::opcode::atomic_acknowledge);
	EXPECT_EQ(a->offset(roce::ext::aeth), 12u);
	EXPECT_EQ(a->offset(roce::ext::atomic_ack_eth), 16u);
	EXPECT_STREQ(roce::opcode_info(roce::opcode::send_only_inv)->name,
		     "SEND_ONLY_WITH_INVALIDATE");
}

/* The BTH's bytes, written out from IBTA 9.2's picture: a field moved by one bit fails here. */
TEST(RoceLayout, BthBytesAreWhereIbtaPutsThem)
{
	roce::Headers h;
	h.opcode = roce::opcode::send_only;
	h.se = true;
	h.p_key = 0xffff;
	h.dest_qp = 0x123456;
	h.ack_req = true;
	h.psn = 0xabcdef;
	const uint8_t one = 0x5a;
	auto d = built(v4_path(), h, {&one, 1});
	const uint8_t want[] = {0x04, 0xb0, 0xff, 0xff, 0x00, 0x12, 0x34, 0x56,
				0x80, 0xab, 0xcd, 0xef, 0x5a, 0,    0,	  0};
	ASSERT_EQ(d.size(), sizeof(want) + 4);
	EXPECT_EQ(std::memcmp(d.data(), want, sizeof(want)), 0);
	h.se = false;
	h.m = true;
	h.ack_req = false;
	d = built(v4_path(), h, {});
	EXPECT_EQ(d[1], 0x40); /* M, no pad, TVer 0 */
	EXPECT_EQ(d[8], 0x00);
}

TEST(RoceLayout, ExtensionHeaderBytes)
{
	roce::Headers h = all_fields(roce::opcode::compare_swap);
	auto d = built(v4_path(), h, {});
	const uint8_t atomic[] = {1,	2,    3,    4,	  5,	6,    7,    8,	  0xde, 0xad,
				  0xbe, 0xef, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,
				  0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8};
	EXPECT_EQ(std::memcmp(d.data() + 12, atomic, sizeof(atomic)), 0);

	h = all_fields(roce::opcode::write_only_imm);
	d = built(v4_path(), h, {});
	const uint8_t reth_imm[] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
				    0xbb, 0xcc, 0x00, 0x01, 0x23, 0x45, 0x0b, 0xad, 0xf0, 0x0d};
	EXPECT_EQ(std::memcmp(d.data() + 12, reth_imm, sizeof(reth_imm)), 0);

	h = all_fields(roce::opcode::atomic_acknowledge);
	d = built(v4_path(), h, {});
	const uint8_t aeth_ack[] = {0x62, 0x65, 0x43, 0x21, 0xc1, 0xc2,
				    0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8};
	EXPECT_EQ(std::memcmp(d.data() + 12, aeth_ack, sizeof(aeth_ack)), 0);

	h = all_fields(roce::opcode::send_last_inv);
	d = built(v4_path(), h, {});
	const uint8_t ieth[] = {0x7e, 0x7e, 0x7e, 0x7e};
	EXPECT_EQ(std::memcmp(d.data() + 12, ieth, sizeof(ieth)), 0);
}

/* Every opcode, several payload lengths (each pad count), IPv4 and IPv6: what build() wrote,
 * parse() gives back, field by field. */
TEST(RoceLayout, EveryOpcodeRoundTrips)
{
	const auto data = pattern(roce::max_payload);
	for (const roce::IpPath &path : {v4_path(), v6_path()}) {
		for (unsigned op = 0; op < roce::opcode::rc_count; op++) {
			const roce::OpcodeInfo *info = roce::opcode_info(static_cast<uint8_t>(op));
			if (info == nullptr)
				continue;
			std::vector<size_t> lens{0};
			if (info->payload)
				lens = {0, 1, 2, 3, 4, 255, 256, 4095, 4096};
			for (size_t len : lens) {
				SCOPED_TRACE(std::string(info->name) + " payload " +
					     std::to_string(len) + (path.ipv6 ? " v6" : " v4"));
				roce::Headers h = all_fields(static_cast<uint8_t>(op));
				auto d = built(path, h, {data.data(), len});
				ASSERT_EQ(d.size(), info->hdr_len + len + (4 - len % 4) % 4 + 4);
				roce::Parsed p;
				ASSERT_EQ(parse(path, d, &p), Error::ok);
				EXPECT_EQ(p.opcode, op);
				EXPECT_EQ(p.info, info);
				EXPECT_EQ(p.bth, d.data());
				EXPECT_EQ(prm::get(p.bth, roce::bth::opcode), op);
				EXPECT_EQ(prm::get(p.bth, roce::bth::se), 1u);
				EXPECT_EQ(prm::get(p.bth, roce::bth::m), 1u);
				EXPECT_EQ(prm::get(p.bth, roce::bth::pad_cnt), (4 - len % 4) % 4);
				EXPECT_EQ(p.pad, (4 - len % 4) % 4);
				EXPECT_EQ(prm::get(p.bth, roce::bth::tver), 0u);
				EXPECT_EQ(prm::get(p.bth, roce::bth::p_key), 0x8001u);
				EXPECT_EQ(prm::get(p.bth, roce::bth::resv8a), 0u);
				EXPECT_EQ(prm::get(p.bth, roce::bth::dest_qp), 0xabcdefu);
				EXPECT_EQ(prm::get(p.bth, roce::bth::ack_req), 1u);
				EXPECT_EQ(prm::get(p.bth, roce::bth::resv7), 0u);
				EXPECT_EQ(prm::get(p.bth, roce::bth::psn), 0xfedcbau);
				ASSERT_EQ(p.reth != nullptr, info->has(roce::ext::reth));
				ASSERT_EQ(p.aeth != nullptr, info->has(roce::ext::aeth));
				ASSERT_EQ(p.atomic_eth != nullptr,
					  info->has(roce::ext::atomic_eth));
				ASSERT_EQ(p.atomic_ack_eth != nullptr,
					  info->has(roce::ext::atomic_ack_eth));
				ASSERT_EQ(p.immdt != nullptr, info->has(roce::ext::immdt));
				ASSERT_EQ(p.ieth != nullptr, info->has(roce::ext::ieth));
				if (p.reth != nullptr) {
					EXPECT_EQ(prm::get(p.reth, roce::reth::va), h.reth.va);
					EXPECT_EQ(prm::get(p.reth, roce::reth::r_key),
						  h.reth.r_key);
					EXPECT_EQ(prm::get(p.reth, roce::reth::dma_len),
						  h.reth.dma_len);
				}
				if (p.aeth != nullptr) {
					EXPECT_EQ(prm::get(p.aeth, roce::aeth::syndrome), 0x62u);
					EXPECT_EQ(prm::get(p.aeth, roce::aeth::msn), 0x654321u);
				}
				if (p.atomic_eth != nullptr) {
					EXPECT_EQ(prm::get(p.atomic_eth, roce::atomic_eth::va),
						  h.atomic.va);
					EXPECT_EQ(prm::get(p.atomic_eth, roce::atomic_eth::r_key),
						  h.atomic.r_key);
					EXPECT_EQ(
						prm::get(p.atomic_eth, roce::atomic_eth::swap_add),
						h.atomic.swap_add);
					EXPECT_EQ(prm::get(p.atomic_eth, roce::atomic_eth::compare),
						  h.atomic.compare);
				}
				if (p.atomic_ack_eth != nullptr) {
					EXPECT_EQ(prm::get(p.atomic_ack_eth,
							   roce::atomic_ack_eth::orig_data),
						  h.atomic_orig);
				}
				if (p.immdt != nullptr) {
					EXPECT_EQ(prm::get(p.immdt, roce::immdt::imm), h.imm);
				}
				if (p.ieth != nullptr) {
					EXPECT_EQ(prm::get(p.ieth, roce::ieth::r_key),
						  h.ieth_r_key);
				}
				ASSERT_EQ(p.payload.size(), len);
				EXPECT_EQ(p.payload.data(), d.data() + info->hdr_len);
				EXPECT_EQ(std::memcmp(p.payload.data(), data.data(), len), 0);
				for (size_t i = 0; i < p.pad; i++)
					EXPECT_EQ(d[info->hdr_len + len + i], 0)
						<< "pad byte " << i;
			}
		}
	}
}

TEST(RoceLayout, PayloadAlreadyInPlaceIsNotCopied)
{
	std::vector<uint8_t> out(roce::max_datagram);
	const size_t hdr = roce::header_length(roce::opcode::write_only);
	const auto data = pattern(100);
	std::memcpy(out.data() + hdr, data.data(), data.size());
	roce::Headers h;
	h.opcode = roce::opcode::write_only;
	size_t len = 0;
	ASSERT_EQ(roce::build(v4_path(), h, {out.data() + hdr, data.size()}, out, &len), Error::ok);
	out.resize(len);
	roce::Parsed p;
	ASSERT_EQ(parse(v4_path(), out, &p), Error::ok);
	EXPECT_EQ(std::memcmp(p.payload.data(), data.data(), data.size()), 0);
}

/* IBTA 9.7.5.2: the syndrome's split, and the credit and RNR timer tables (the same values as
 * Linux rdmavt's credit_table[] and ib_rvt_rnr_table[]), written out. */
TEST(RoceAeth, SyndromeSplitAndTables)
{
	namespace aeth = roce::aeth;
	EXPECT_EQ(aeth::make_syndrome(aeth::type::ack, aeth::credit_invalid), 0x1f);
	EXPECT_EQ(aeth::make_syndrome(aeth::type::rnr_nak, 14), 0x2e);
	EXPECT_EQ(aeth::make_syndrome(aeth::type::nak, aeth::nak::psn_seq_error), 0x60);
	EXPECT_EQ(aeth::make_syndrome(aeth::type::nak, aeth::nak::invalid_request), 0x61);
	EXPECT_EQ(aeth::make_syndrome(aeth::type::nak, aeth::nak::remote_access_error), 0x62);
	EXPECT_EQ(aeth::make_syndrome(aeth::type::nak, aeth::nak::remote_operational_error), 0x63);
	EXPECT_EQ(aeth::make_syndrome(aeth::type::nak, aeth::nak::invalid_rd_request), 0x64);
	EXPECT_EQ(aeth::syndrome_type_of(0x63), aeth::type::nak);
	EXPECT_EQ(aeth::syndrome_value_of(0x63), 3);
	EXPECT_EQ(aeth::syndrome_type_of(0x2e), aeth::type::rnr_nak);
	EXPECT_EQ(aeth::syndrome_value_of(0x2e), 14);
	EXPECT_EQ(aeth::syndrome_type_of(0x40), aeth::type::reserved);
	EXPECT_EQ(aeth::syndrome_type_of(0x1f), aeth::type::ack);

	const int32_t credits[31] = {0,	   1,	 2,    3,     4,     6,	    8,	  12,
				     16,   24,	 32,   48,    64,    96,    128,  192,
				     256,  384,	 512,  768,   1024,  1536,  2048, 3072,
				     4096, 6144, 8192, 12288, 16384, 24576, 32768};
	for (uint8_t c = 0; c < 31; c++)
		EXPECT_EQ(aeth::credits(c), credits[c]) << "credit code " << unsigned{c};
	EXPECT_EQ(aeth::credits(31), -1);
	EXPECT_EQ(aeth::credits(200), -1);

	const uint32_t rnr_us[32] = {655360, 10,    20,	   30,	   40,	   60,	   80,	   120,
				     160,    240,   320,   480,	   640,	   960,	   1280,   1920,
				     2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
				     40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
	for (uint8_t c = 0; c < 32; c++)
		EXPECT_EQ(aeth::rnr_timer_us(c), rnr_us[c]) << "RNR timer code " << unsigned{c};
	EXPECT_EQ(aeth::rnr_timer_us(32), 0u);
}

TEST(RoceBuild, RefusesEachBadRequestWithItsError)
{
	std::vector<uint8_t> out(roce::max_datagram);
	size_t len = 12345;
	roce::Headers h;
	const auto data = pattern(roce::max_payload + 1);

	h.opcode = 0x15; /* reserved */
	EXPECT_EQ(roce::build(v4_path(), h, {}, out, &len), Error::unknown_opcode);
	h.opcode = 0x24; /* UC SEND_ONLY: not RC */
	EXPECT_EQ(roce::build(v4_path(), h, {}, out, &len), Error::unknown_opcode);

	h.opcode = roce::opcode::read_request;
	EXPECT_EQ(roce::build(v4_path(), h, {data.data(), 1}, out, &len),
		  Error::unexpected_payload);
	h.opcode = roce::opcode::acknowledge;
	EXPECT_EQ(roce::build(v4_path(), h, {data.data(), 4}, out, &len),
		  Error::unexpected_payload);

	h.opcode = roce::opcode::write_only;
	EXPECT_EQ(roce::build(v4_path(), h, data, out, &len), Error::payload_too_long);

	h.dest_qp = 1u << 24;
	EXPECT_EQ(roce::build(v4_path(), h, {}, out, &len), Error::field_range);
	h.dest_qp = 0;
	h.psn = 1u << 24;
	EXPECT_EQ(roce::build(v4_path(), h, {}, out, &len), Error::field_range);
	h.psn = 0;
	h.opcode = roce::opcode::acknowledge;
	h.aeth.msn = 1u << 24;
	EXPECT_EQ(roce::build(v4_path(), h, {}, out, &len), Error::field_range);
	h.opcode = roce::opcode::send_only; /* no AETH: its MSN is not looked at */
	EXPECT_EQ(roce::build(v4_path(), h, {}, out, &len), Error::ok);
	EXPECT_EQ(len, 16u);

	/* One byte short of the packet: 12 + 5 + 3 pad + 4. */
	len = 12345;
	std::vector<uint8_t> small(23, 0xee);
	EXPECT_EQ(roce::build(v4_path(), h, {data.data(), 5}, small, &len), Error::no_room);
	EXPECT_EQ(len, 12345u);
	EXPECT_EQ(small, std::vector<uint8_t>(23, 0xee)); /* untouched */
	small.resize(24);
	EXPECT_EQ(roce::build(v4_path(), h, {data.data(), 5}, small, &len), Error::ok);
	EXPECT_EQ(len, 24u);
}

TEST(RoceParse, RefusesEachBadDatagramWithItsError)
{
	const roce::IpPath path = v4_path();
	const auto data = pattern(roce::max_payload + 4);
	roce::Headers h = all_fields(roce::opcode::send_only);

	/* too_long: one byte beyond the largest packet, before any CRC work. */
	EXPECT_EQ(parse(path, std::vector<uint8_t>(roce::max_datagram + 1)), Error::too_long);
	/* too_short: below BTH + ICRC. */
	EXPECT_EQ(parse(path, std::vector<uint8_t>(15)), Error::too_short);
	EXPECT_EQ(parse(path, {}), Error::too_short);

	/* bad_icrc: any covered bit. */
	auto d = built(path, h, {data.data(), 8});
	d[14] ^= 0x01;
	EXPECT_EQ(parse(path, d), Error::bad_icrc);
	d[14] ^= 0x01;
	EXPECT_EQ(parse(path, d), Error::ok);
	d[d.size() - 1] ^= 0x80; /* the ICRC itself */
	EXPECT_EQ(parse(path, d), Error::bad_icrc);

	/* bad_tver */
	d = built(path, h, {data.data(), 8});
	prm::set(d.data(), roce::bth::tver, 1);
	reseal(path, d);
	EXPECT_EQ(parse(path, d), Error::bad_tver);

	/* unknown_opcode: reserved 0x15, UC 0x24, CNP 0x81 */
	for (uint8_t op : {uint8_t{0x15}, uint8_t{0x24}, uint8_t{0x81}, uint8_t{0x18}}) {
		d = built(path, h, {data.data(), 8});
		prm::set(d.data(), roce::bth::opcode, op);
		reseal(path, d);
		EXPECT_EQ(parse(path, d), Error::unknown_opcode) << unsigned{op};
	}

	/* truncated: a FETCH_ADD (40 header bytes) in 12 + 16 + 4 bytes. */
	d = built(path, all_fields(roce::opcode::send_only), {data.data(), 16});
	prm::set(d.data(), roce::bth::opcode, roce::opcode::fetch_add);
	prm::set(d.data(), roce::bth::pad_cnt, 0);
	reseal(path, d);
	ASSERT_EQ(d.size(), 32u);
	EXPECT_EQ(parse(path, d), Error::truncated);

	/* bad_length: payload + pad not a multiple of 4. */
	d = built(path, h, {data.data(), 8});
	d.insert(d.end() - 4, uint8_t{0});
	reseal(path, d);
	EXPECT_EQ(parse(path, d), Error::bad_length);

	/* bad_pad: PadCnt 3 with nothing after the headers. */
	d = built(path, h, {});
	prm::set(d.data(), roce::bth::pad_cnt, 3);
	reseal(path, d);
	EXPECT_EQ(parse(path, d), Error::bad_pad);

	/* unexpected_payload: 4 bytes after an ACK's AETH, and after a READ request's RETH. */
	for (uint8_t op : {roce::opcode::acknowledge, roce::opcode::read_request}) {
		d = built(path, all_fields(op), {});
		d.insert(d.end() - 4, 4, uint8_t{0});
		reseal(path, d);
		EXPECT_EQ(parse(path, d), Error::unexpected_payload) << unsigned{op};
	}

	/* payload_too_long: 4100 bytes after a BTH (within max_datagram). */
	d = built(path, h, {data.data(), roce::max_payload});
	d.insert(d.end() - 4, 4, uint8_t{0});
	reseal(path, d);
	ASSERT_LE(d.size(), roce::max_datagram);
	EXPECT_EQ(parse(path, d), Error::payload_too_long);
	/* ... while 4096 bytes and 3 of pad is a payload of 4093: accepted. */
	d = built(path, h, {data.data(), roce::max_payload - 3});
	EXPECT_EQ(parse(path, d), Error::ok);
}

TEST(RoceParse, OutputIsLeftAloneOnError)
{
	roce::Parsed p;
	p.opcode = 0x77;
	EXPECT_EQ(roce::parse(v4_path(), std::vector<uint8_t>(20), &p), Error::bad_icrc);
	EXPECT_EQ(p.opcode, 0x77);
	EXPECT_EQ(p.bth, nullptr);
}

TEST(RoceParse, ErrorNamesAreDistinct)
{
	const Error all[] = {Error::ok,
			     Error::too_short,
			     Error::too_long,
			     Error::bad_icrc,
			     Error::bad_tver,
			     Error::unknown_opcode,
			     Error::truncated,
			     Error::bad_length,
			     Error::bad_pad,
			     Error::unexpected_payload,
			     Error::payload_too_long,
			     Error::field_range,
			     Error::no_room};
	for (Error a : all) {
		for (Error b : all) {
			if (a != b) {
				EXPECT_STRNE(roce::error_name(a), roce::error_name(b));
			}
		}
	}
	EXPECT_STREQ(roce::error_name(Error::bad_icrc), "bad_icrc");
	EXPECT_STREQ(roce::error_name(Error::unexpected_payload), "unexpected_payload");
}

/* rxe_icrc.c seeds its CRC with 0xdebb20e3, "the result of computing a CRC with a seed of
 * 0xffffffff and 8 bytes of 0xff representing a masked LRH": nicmr's prefix starts with those
 * bytes, and zlib's value after them is that seed inverted. */
TEST(RoceIcrc, PrefixStartsWithRxesMaskedLrh)
{
	uint8_t pre[roce::icrc_prefix_max];
	ASSERT_EQ(roce::icrc_prefix(v4_path(), 100, pre), 36u);
	EXPECT_EQ(static_cast<uint32_t>(crc32(0, pre, 8)), ~uint32_t{0xdebb20e3});
}

/* The masked IP and UDP headers, byte by byte: RFC 791 / 8200 / 768 layouts with the fields
 * rxe_icrc_hdr sets to 1s (IPv4 tos, ttl, check; IPv6 priority, flow_lbl, hop_limit; UDP
 * check). */
TEST(RoceIcrc, MaskedHeadersAreRxes)
{
	uint8_t pre[roce::icrc_prefix_max];
	ASSERT_EQ(roce::icrc_prefix(v4_path(), 100, pre), 36u);
	const uint8_t v4[] = {
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* LRH */
		0x45, 0xff, 0x00, 0x80, 0x1c, 0x46, 0x40, 0x00, /* ver, tos, len 128, id, DF */
		0xff, 0x11, 0xff, 0xff, 192,  0,    2,	  1,
		192,  0,    2,	  2,				 /* ttl, udp, csum, addrs */
		0xc0, 0x00, 0x12, 0xb7, 0x00, 0x6c, 0xff, 0xff}; /* 49152 -> 4791, len 108 */
	EXPECT_EQ(std::memcmp(pre, v4, sizeof(v4)), 0);

	ASSERT_EQ(roce::icrc_prefix(v6_path(), 100, pre), 56u);
	const uint8_t v6[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* LRH */
			      0x6f, 0xff, 0xff, 0xff, 0x00, 0x6c, 0x11, 0xff, /* ver, tc, fl; len
										 108 */
			      0x20, 0x01, 0x0d, 0xb8, 0,    0,	  0,	0,    0,    0, 0,
			      0,    0,	  0,	0,    1,    0x20, 0x01, 0x0d, 0xb8, 0, 0,
			      0,    0,	  0,	0,    0,    0,	  0,	0,    0,    2, 0xc3,
			      0x50, 0x12, 0xb7, 0x00, 0x6c, 0xff, 0xff}; /* 50000 -> 4791 */
	EXPECT_EQ(std::memcmp(pre, v6, sizeof(v6)), 0);
}

/* What the ICRC covers and what it does not. */
TEST(RoceIcrc, MaskedFieldsChangeNothingCoveredFieldsEverything)
{
	for (const roce::IpPath &path : {v4_path(), v6_path()}) {
		SCOPED_TRACE(path.ipv6 ? "v6" : "v4");
		const auto data = pattern(64);
		auto d = built(path, all_fields(roce::opcode::write_only), data);
		/* FECN, BECN, resv6: a switch may set them, the ICRC holds. */
		prm::set(d.data(), roce::bth::fecn, 1);
		prm::set(d.data(), roce::bth::becn, 1);
		EXPECT_EQ(parse(path, d), Error::ok);
		prm::set(d.data(), roce::bth::resv8a, 0x3f);
		EXPECT_EQ(parse(path, d), Error::ok);
		/* resv7 is covered. */
		prm::set(d.data(), roce::bth::resv7, 1);
		EXPECT_EQ(parse(path, d), Error::bad_icrc);
		prm::set(d.data(), roce::bth::resv7, 0);
		ASSERT_EQ(parse(path, d), Error::ok);

		roce::IpPath other = path;
		other.src[3] ^= 1;
		EXPECT_EQ(parse(other, d), Error::bad_icrc) << "source address";
		other = path;
		other.dst[0] ^= 0x80;
		EXPECT_EQ(parse(other, d), Error::bad_icrc) << "destination address";
		other = path;
		other.src_port++;
		EXPECT_EQ(parse(other, d), Error::bad_icrc) << "source port";
		other = path;
		other.dst_port = 4792;
		EXPECT_EQ(parse(other, d), Error::bad_icrc) << "destination port";
		other = path;
		other.ipv4_id++;
		other.ipv4_df = !other.ipv4_df;
		/* The IPv4 ID and DF are covered; an IPv6 header has neither. */
		EXPECT_EQ(parse(other, d), path.ipv6 ? Error::ok : Error::bad_icrc) << "ID, DF";
		other = path;
		other.ipv6 = !path.ipv6;
		EXPECT_EQ(parse(other, d), Error::bad_icrc) << "IP version";
	}
}

/* The ICRC over the wire bytes as annex A17 and rxe_icrc_hdr lay them out, computed here with
 * zlib directly: the masked headers (checked byte by byte above), the BTH with its byte 4
 * (resv8a) read as 0xff and the rest up to the ICRC, stored little-endian. */
TEST(RoceIcrc, CoversMaskedBthAndRestLittleEndian)
{
	/* Every payload length up to 600 and the longest: short and long runs of the CRC (ISA-L
	 * folds 16, 64 and 256 bytes at a time, with tails of each length below), and every pad. */
	std::vector<size_t> lens;
	for (size_t n = 0; n <= 600; n++)
		lens.push_back(n);
	lens.push_back(roce::max_payload);
	const auto data = pattern(roce::max_payload);
	for (const roce::IpPath &path : {v4_path(), v6_path()}) {
		for (size_t n : lens) {
			SCOPED_TRACE(std::to_string(n) + (path.ipv6 ? " v6" : " v4"));
			auto d = built(path, all_fields(roce::opcode::write_only_imm),
				       {data.data(), n});
			std::vector<uint8_t> covered(roce::icrc_prefix_max);
			covered.resize(roce::icrc_prefix(path, d.size(), covered.data()));
			const size_t bth_at = covered.size();
			covered.insert(covered.end(), d.begin(), d.end() - 4);
			covered[bth_at + 4] = 0xff; /* BTH byte 4 */
			const auto want = static_cast<uint32_t>(
				crc32(0, covered.data(), static_cast<uInt>(covered.size())));
			ASSERT_EQ(roce::load_icrc(d.data() + d.size() - 4), want);
			const uint8_t le[4] = {
				static_cast<uint8_t>(want), static_cast<uint8_t>(want >> 8),
				static_cast<uint8_t>(want >> 16), static_cast<uint8_t>(want >> 24)};
			ASSERT_EQ(std::memcmp(d.data() + d.size() - 4, le, 4), 0);
		}
	}
}

TEST(RoceIcrc, StoredLittleEndian)
{
	uint8_t b[4];
	roce::store_icrc(b, 0x11223344);
	EXPECT_EQ(b[0], 0x44);
	EXPECT_EQ(b[3], 0x11);
	EXPECT_EQ(roce::load_icrc(b), 0x11223344u);
}
