/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * roce-wire-tool: nicmr's RoCEv2 builder and parser on whole IP packets in hex, for
 * test_roce_scapy.py to hold against scapy's scapy.contrib.roce (an implementation nobody here
 * wrote).
 *
 *   roce-wire-tool emit    prints "LABEL HEX" lines: IPv4/UDP packets whose datagram
 *                          roce::build() laid out, for every RC opcode and several payload
 *                          lengths; the IP header carries TOS, TTL and checksum values other
 *                          than the ICRC's 1s, the UDP checksum a non-zero value, and the
 *                          "-marked" packets have FECN/BECN set after the ICRC was computed,
 *                          so the masks are exercised.
 *   roce-wire-tool check   reads "LABEL HEX" lines of IPv4 or IPv6 packets on stdin; for each
 *                          prints "LABEL ERROR OPCODE DEST_QP PSN PAYLOAD_LEN" with roce::parse()'s
 *                          verdict (ERROR is error_name(); the rest 0 unless ok).
 * Exit status: 0, or 2 for a usage error or a line that is not an IP/UDP packet in hex.
 */
#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "roce_packet.h"

namespace roce = nicmr::roce;
namespace prm = nicmr::mlx5::prm;

namespace {

/* The one's-complement sum of RFC 791's header checksum. */
uint16_t ipv4_checksum(const uint8_t *h)
{
	uint32_t sum = 0;
	for (size_t i = 0; i < roce::ipv4::size; i += 2)
		sum += static_cast<uint32_t>(h[i] << 8 | h[i + 1]);
	while (sum >> 16 != 0)
		sum = (sum & 0xffff) + (sum >> 16);
	return static_cast<uint16_t>(~sum);
}

std::string hex(const std::vector<uint8_t> &v)
{
	static const char digits[] = "0123456789abcdef";
	std::string s;
	for (uint8_t b : v) {
		s += digits[b >> 4];
		s += digits[b & 15];
	}
	return s;
}

bool unhex(const std::string &s, std::vector<uint8_t> *out)
{
	if (s.size() % 2 != 0)
		return false;
	out->clear();
	for (size_t i = 0; i < s.size(); i += 2) {
		unsigned v;
		if (std::sscanf(s.c_str() + i, "%2x", &v) != 1)
			return false;
		out->push_back(static_cast<uint8_t>(v));
	}
	return true;
}

int emit()
{
	in_addr src{}, dst{};
	inet_pton(AF_INET, "198.51.100.7", &src);
	inet_pton(AF_INET, "198.51.100.9", &dst);
	roce::IpPath path = roce::ipv4_path(src, dst, 49153);
	path.ipv4_id = 0x1c46;

	std::vector<uint8_t> payload(roce::max_payload);
	for (size_t i = 0; i < payload.size(); i++)
		payload[i] = static_cast<uint8_t>(i * 29 + 1);

	for (unsigned op = 0; op < roce::opcode::rc_count; op++) {
		const roce::OpcodeInfo *info = roce::opcode_info(static_cast<uint8_t>(op));
		if (info == nullptr)
			continue;
		std::vector<size_t> lens{0};
		if (info->payload)
			lens = {0, 1, 6, 64, 4096};
		for (size_t len : lens) {
			for (bool marked : {false, true}) {
				roce::Headers h;
				h.opcode = static_cast<uint8_t>(op);
				h.se = len % 2 == 1;
				h.p_key = 0xffff;
				h.dest_qp = 0x000011 + op;
				h.ack_req = true;
				h.psn = 0xfffff0 + op % 16;
				h.reth = {0x00007f0012345000 + len, 0x1234abcd,
					  static_cast<uint32_t>(len)};
				h.aeth = {roce::aeth::make_syndrome(roce::aeth::type::ack,
								    roce::aeth::credit_invalid),
					  0x000100 + op};
				h.atomic = {0x00007f0000001000, 0x4321, 0x1111, 0x2222};
				h.atomic_orig = 0x0123456789abcdef;
				h.imm = 0xcafe0000 + op;
				h.ieth_r_key = 0x00abcd01;

				std::vector<uint8_t> pkt(roce::ipv4::size + roce::udp::size +
							 roce::max_datagram);
				uint8_t *ip = pkt.data();
				uint8_t *u = ip + roce::ipv4::size;
				uint8_t *dgram = u + roce::udp::size;
				size_t dlen = 0;
				roce::Error e = roce::build(path, h, {payload.data(), len},
							    {dgram, roce::max_datagram}, &dlen);
				if (e != roce::Error::ok) {
					std::fprintf(stderr, "build %s: %s\n", info->name,
						     roce::error_name(e));
					return 1;
				}
				if (marked) /* a switch's marks, after the ICRC */
					prm::set(dgram, roce::bth::resv8a, 0xc0);
				pkt.resize(roce::ipv4::size + roce::udp::size + dlen);
				prm::set(ip, roce::ipv4::version, 4);
				prm::set(ip, roce::ipv4::ihl, 5);
				prm::set(ip, roce::ipv4::tos, 0x0a);
				prm::set(ip, roce::ipv4::total_length, pkt.size());
				prm::set(ip, roce::ipv4::id, path.ipv4_id);
				prm::set(ip, roce::ipv4::flags_frag, roce::ipv4::flag_df);
				prm::set(ip, roce::ipv4::ttl, 64);
				prm::set(ip, roce::ipv4::protocol, roce::ipv4::protocol_udp);
				std::memcpy(ip + prm::byte_offset(roce::ipv4::src), path.src.data(),
					    4);
				std::memcpy(ip + prm::byte_offset(roce::ipv4::dst), path.dst.data(),
					    4);
				prm::set(ip, roce::ipv4::checksum, ipv4_checksum(ip));
				prm::set(u, roce::udp::src_port, path.src_port);
				prm::set(u, roce::udp::dst_port, path.dst_port);
				prm::set(u, roce::udp::length, roce::udp::size + dlen);
				prm::set(u, roce::udp::checksum, 0x1234);
				std::printf("%s-%zu%s %s\n", info->name, len,
					    marked ? "-marked" : "", hex(pkt).c_str());
			}
		}
	}
	return 0;
}

int check()
{
	std::string label, text;
	std::vector<uint8_t> pkt;
	while (std::cin >> label >> text) {
		if (!unhex(text, &pkt) || pkt.empty()) {
			std::fprintf(stderr, "%s: not hex\n", label.c_str());
			return 2;
		}
		roce::IpPath path;
		size_t ip_len;
		const uint8_t *ip = pkt.data();
		const auto version = prm::get(ip, roce::ipv4::version);
		if (version == 4 && pkt.size() >= roce::ipv4::size) {
			ip_len = prm::get(ip, roce::ipv4::ihl) * 4;
			std::memcpy(path.src.data(), ip + prm::byte_offset(roce::ipv4::src), 4);
			std::memcpy(path.dst.data(), ip + prm::byte_offset(roce::ipv4::dst), 4);
			path.ipv4_id = static_cast<uint16_t>(prm::get(ip, roce::ipv4::id));
			path.ipv4_df =
				(prm::get(ip, roce::ipv4::flags_frag) & roce::ipv4::flag_df) != 0;
		} else if (version == 6 && pkt.size() >= roce::ipv6::size) {
			ip_len = roce::ipv6::size;
			path.ipv6 = true;
			std::memcpy(path.src.data(), ip + roce::ipv6::src_byte, 16);
			std::memcpy(path.dst.data(), ip + roce::ipv6::dst_byte, 16);
		} else {
			std::fprintf(stderr, "%s: not an IPv4 or IPv6 packet\n", label.c_str());
			return 2;
		}
		if (pkt.size() < ip_len + roce::udp::size) {
			std::fprintf(stderr, "%s: no UDP header\n", label.c_str());
			return 2;
		}
		const uint8_t *u = ip + ip_len;
		path.src_port = static_cast<uint16_t>(prm::get(u, roce::udp::src_port));
		path.dst_port = static_cast<uint16_t>(prm::get(u, roce::udp::dst_port));
		std::span<const uint8_t> dgram{u + roce::udp::size,
					       pkt.size() - ip_len - roce::udp::size};
		roce::Parsed p;
		roce::Error e = roce::parse(path, dgram, &p);
		if (e != roce::Error::ok) {
			std::printf("%s %s 0 0 0 0\n", label.c_str(), roce::error_name(e));
			continue;
		}
		std::printf("%s ok %u %u %u %zu\n", label.c_str(), unsigned{p.opcode},
			    static_cast<unsigned>(prm::get(p.bth, roce::bth::dest_qp)),
			    static_cast<unsigned>(prm::get(p.bth, roce::bth::psn)),
			    p.payload.size());
	}
	return 0;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc == 2 && std::strcmp(argv[1], "emit") == 0)
		return emit();
	if (argc == 2 && std::strcmp(argv[1], "check") == 0)
		return check();
	std::fprintf(stderr, "usage: roce-wire-tool emit|check\n");
	return 2;
}
