/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Writes the seed corpus of fuzz_roce_parse into a directory: packets of several opcodes (every
 * extension header at least once, payloads with and without pad) built by roce::build over an
 * IPv4 and an IPv6 path, in the input format of fuzz_roce_format.h, so that the fuzzer starts
 * from datagrams the parser accepts.
 *
 *   fuzz_roce_seeds <dir>
 */
#include <arpa/inet.h>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_roce_format.h"
#include "roce_packet.h"

namespace {

using namespace nicmr::roce;

bool write_seed(const std::string &dir, const char *name, const IpPath &path, uint8_t flags,
		const Headers &h, size_t payload_len)
{
	std::vector<uint8_t> payload(payload_len);
	for (size_t i = 0; i < payload_len; i++)
		payload[i] = static_cast<uint8_t>(i * 7 + 1);
	std::vector<uint8_t> d(max_datagram);
	size_t len = 0;
	if (build(path, h, payload, d, &len) != Error::ok) {
		std::fprintf(stderr, "fuzz_roce_seeds: build of %s refused\n", name);
		return false;
	}
	std::vector<uint8_t> in(fuzz::kPrefix);
	in[0] = static_cast<uint8_t>(flags | (path.ipv6 ? fuzz::kFlagIpv6 : 0) |
				     (path.ipv4_df ? fuzz::kFlagDf : 0));
	std::memcpy(in.data() + 1, path.src.data(), 16);
	std::memcpy(in.data() + 17, path.dst.data(), 16);
	in[33] = static_cast<uint8_t>(path.src_port >> 8);
	in[34] = static_cast<uint8_t>(path.src_port);
	in[35] = static_cast<uint8_t>(path.ipv4_id >> 8);
	in[36] = static_cast<uint8_t>(path.ipv4_id);
	in.insert(in.end(), d.begin(), d.begin() + static_cast<ptrdiff_t>(len));
	const std::string file = dir + "/" + name;
	FILE *f = std::fopen(file.c_str(), "wb");
	if (f == nullptr) {
		std::perror(file.c_str());
		return false;
	}
	const bool ok = std::fwrite(in.data(), 1, in.size(), f) == in.size();
	return std::fclose(f) == 0 && ok;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 2) {
		std::fprintf(stderr, "usage: fuzz_roce_seeds <dir>\n");
		return 2;
	}
	const std::string dir = argv[1];
	in_addr a4{}, b4{};
	in6_addr a6{}, b6{};
	inet_pton(AF_INET, "192.0.2.1", &a4);
	inet_pton(AF_INET, "192.0.2.2", &b4);
	inet_pton(AF_INET6, "2001:db8::1", &a6);
	inet_pton(AF_INET6, "2001:db8::2", &b6);
	IpPath v4 = ipv4_path(a4, b4, 49152);
	v4.ipv4_id = 0x1234;
	const IpPath v6 = ipv6_path(a6, b6, 49153);

	Headers h;
	h.dest_qp = 0x000123;
	h.psn = 0x00abcd;
	h.ack_req = true;
	bool ok = true;
	h.opcode = opcode::send_only;
	ok &= write_seed(dir, "v4_send_only_pad", v4, fuzz::kFlagReseal, h, 13);
	h.opcode = opcode::send_only_imm;
	h.imm = 0xdeadbeef;
	ok &= write_seed(dir, "v6_send_only_imm", v6, fuzz::kFlagReseal, h, 64);
	h.opcode = opcode::send_last_inv;
	h.ieth_r_key = 0x00123456;
	ok &= write_seed(dir, "v4_send_last_inv", v4, fuzz::kFlagReseal, h, 8);
	h.opcode = opcode::write_first;
	h.reth = {0x7f0000001000, 0x00abcd42, 8192};
	ok &= write_seed(dir, "v6_write_first", v6, fuzz::kFlagReseal, h, 256);
	h.opcode = opcode::write_only_imm;
	ok &= write_seed(dir, "v4_write_only_imm", v4, fuzz::kFlagReseal, h, 3);
	h.opcode = opcode::read_request;
	ok &= write_seed(dir, "v4_read_request", v4, fuzz::kFlagReseal, h, 0);
	h.opcode = opcode::read_response_first;
	h.aeth = {0x1f, 0x000042};
	ok &= write_seed(dir, "v6_read_response_first", v6, fuzz::kFlagReseal, h, 1024);
	h.opcode = opcode::acknowledge;
	h.aeth = {0x60, 0x000043}; /* a NAK: PSN sequence error */
	ok &= write_seed(dir, "v4_nak", v4, fuzz::kFlagReseal, h, 0);
	h.opcode = opcode::compare_swap;
	h.atomic = {0x7f0000002000, 0x00abcd42, 5, 4};
	ok &= write_seed(dir, "v6_compare_swap", v6, fuzz::kFlagReseal, h, 0);
	h.opcode = opcode::atomic_acknowledge;
	h.atomic_orig = 4;
	ok &= write_seed(dir, "v4_atomic_ack", v4, fuzz::kFlagReseal, h, 0);
	/* As sent, ICRC untouched: the fuzzer also mutates packets it does not reseal. */
	h.opcode = opcode::send_middle;
	ok &= write_seed(dir, "v6_send_middle_raw", v6, 0, h, 32);
	return ok ? 0 : 1;
}
