/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Writes the seed corpus of fuzz_roce_datagram into a directory, in the input format of
 * fuzz_roce_datagram_format.h: for every request opcode a packet the responder executes (a
 * right PSN, a live key, an address inside its region), the messages of several packets
 * (WRITE and SEND FIRST/LAST), requests the responder must refuse (the read-only key written,
 * a key of another PD, past a region's end, a QP without remote read, a SEND longer than its
 * receive WQE, a WRITE longer than a message may be), responses nothing
 * waits for, a READ of QP 0 answered (whole, by one packet too long, by a NAK), and raw
 * datagrams (resealed, and one left as built). The fuzzer starts from
 * packets that reach the deepest checks.
 *
 *   fuzz_roce_datagram_seeds <dir>
 */
#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_roce_datagram_format.h"
#include "roce_packet.h"

namespace {

using namespace nicmr::roce;
using namespace nicmr::roce::fuzz_dgram;

void put16(std::vector<uint8_t> &v, uint16_t x)
{
	v.push_back(static_cast<uint8_t>(x >> 8));
	v.push_back(static_cast<uint8_t>(x));
}
void put32(std::vector<uint8_t> &v, uint32_t x)
{
	put16(v, static_cast<uint16_t>(x >> 16));
	put16(v, static_cast<uint16_t>(x));
}
void put64(std::vector<uint8_t> &v, uint64_t x)
{
	put32(v, static_cast<uint32_t>(x >> 32));
	put32(v, static_cast<uint32_t>(x));
}

/* One template packet of the input format. */
struct Tpl {
	uint8_t kind = 0;
	uint8_t opcode = 0;
	int8_t psn = 0; /* from kFirstPsn */
	uint8_t flags = kHdrAckReq;
	uint8_t key = key_rw;
	int32_t va = 0;
	uint32_t len = 0;
	uint32_t word = 0;
	uint64_t swap_add = 0, compare = 0;
	uint16_t payload = 0;
};

void put(std::vector<uint8_t> &in, const Tpl &t)
{
	in.push_back(t.kind);
	in.push_back(t.opcode);
	in.push_back(static_cast<uint8_t>(t.psn));
	in.push_back(t.flags);
	in.push_back(t.key);
	put32(in, static_cast<uint32_t>(t.va));
	put32(in, t.len);
	put32(in, t.word);
	put64(in, t.swap_add);
	put64(in, t.compare);
	put16(in, t.payload);
	for (uint16_t i = 0; i < t.payload; i++)
		in.push_back(static_cast<uint8_t>(i * 5 + 3));
	in.push_back(0); /* no patches */
}

/* A raw datagram: built for QP number 1 (the device's first) over any path; reseal makes its
 * ICRC the port's. */
void put_raw(std::vector<uint8_t> &in, uint8_t opcode, bool reseal)
{
	in_addr a{}, b{};
	inet_pton(AF_INET, "127.0.0.2", &a);
	inet_pton(AF_INET, "127.0.0.1", &b);
	Headers h;
	h.opcode = opcode;
	h.dest_qp = 1;
	h.psn = kFirstPsn;
	h.ack_req = true;
	h.reth = {0x40011010, 0, 16};
	std::vector<uint8_t> payload(16, 0x77);
	std::vector<uint8_t> d(max_datagram);
	size_t len = 0;
	if (build(ipv4_path(a, b, 49152), h, payload, d, &len) != Error::ok)
		return;
	in.push_back(static_cast<uint8_t>(kKindRaw | (reseal ? kKindReseal : 0)));
	put16(in, static_cast<uint16_t>(len));
	in.insert(in.end(), d.begin(), d.begin() + static_cast<ptrdiff_t>(len));
}

bool write_seed(const std::string &dir, const char *name, const std::vector<uint8_t> &body,
		uint32_t packets, uint8_t first = 0)
{
	std::vector<uint8_t> in;
	in.push_back(static_cast<uint8_t>((packets - 1) | first));
	in.insert(in.end(), body.begin(), body.end());
	const std::string file = dir + "/" + name;
	FILE *f = std::fopen(file.c_str(), "wb");
	if (f == nullptr) {
		std::perror(file.c_str());
		return false;
	}
	const bool ok = std::fwrite(in.data(), 1, in.size(), f) == in.size();
	return std::fclose(f) == 0 && ok;
}

bool one(const std::string &dir, const char *name, const Tpl &t)
{
	std::vector<uint8_t> in;
	put(in, t);
	return write_seed(dir, name, in, 1);
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 2) {
		std::fprintf(stderr, "usage: fuzz_roce_datagram_seeds <dir>\n");
		return 2;
	}
	const std::string dir = argv[1];
	namespace o = opcode;
	bool ok = true;
	Tpl t;

	/* Executed: one packet of each request opcode. */
	t.opcode = o::write_only;
	t.va = 16;
	t.len = 40;
	t.payload = 40;
	ok &= one(dir, "write_only", t);
	t.opcode = o::write_only_imm;
	t.word = 0x01020304;
	ok &= one(dir, "write_only_imm", t);
	t.opcode = o::send_only;
	t.payload = 100;
	ok &= one(dir, "send_only", t);
	t.opcode = o::send_only_imm;
	ok &= one(dir, "send_only_imm", t);
	t.opcode = o::send_only_inv;
	t.key = key_inv;
	ok &= one(dir, "send_only_inv", t);
	t = Tpl{};
	t.opcode = o::read_request;
	t.va = 100;
	t.len = 3000; /* three responses at MTU 1024 */
	ok &= one(dir, "read_request", t);
	t.opcode = o::compare_swap;
	t.va = 64;
	t.len = 0;
	t.swap_add = 0x1122334455667788;
	t.compare = 0;
	ok &= one(dir, "compare_swap", t);
	t.opcode = o::fetch_add;
	t.swap_add = 5;
	ok &= one(dir, "fetch_add", t);

	/* Messages of several packets: FIRST carries one MTU. */
	{
		std::vector<uint8_t> in;
		Tpl f;
		f.opcode = o::write_first;
		f.va = 8;
		f.len = 1024 + 200;
		f.payload = 1024;
		f.flags = 0;
		put(in, f);
		Tpl l;
		l.opcode = o::write_last_imm;
		l.psn = 1;
		l.payload = 200;
		put(in, l);
		ok &= write_seed(dir, "write_first_last_imm", in, 2);
	}
	{
		std::vector<uint8_t> in;
		Tpl f;
		f.opcode = o::send_first;
		f.payload = 1024;
		f.flags = 0;
		put(in, f);
		Tpl m;
		m.opcode = o::send_middle;
		m.psn = 1;
		m.payload = 1024;
		m.flags = 0;
		put(in, m);
		Tpl l;
		l.opcode = o::send_last_inv;
		l.psn = 2;
		l.payload = 10;
		l.key = key_inv;
		put(in, l);
		/* 2048 bytes: more than a receive WQE holds (a length error). */
		ok &= write_seed(dir, "send_longer_than_wqe", in, 3);
	}
	{
		/* QP 1's path MTU is 256. */
		std::vector<uint8_t> in;
		Tpl f;
		f.kind = kKindQp1;
		f.opcode = o::send_first;
		f.payload = 256;
		f.flags = 0;
		put(in, f);
		Tpl l = f;
		l.opcode = o::send_last_inv;
		l.psn = 1;
		l.payload = 100;
		l.key = key_inv;
		l.flags = kHdrAckReq;
		put(in, l);
		ok &= write_seed(dir, "send_first_last_inv_qp1", in, 2);
	}
	{
		/* A WRITE, then a duplicate of it, then a READ behind them. */
		std::vector<uint8_t> in;
		Tpl w;
		w.opcode = o::write_only;
		w.len = 8;
		w.payload = 8;
		put(in, w);
		put(in, w);
		Tpl r;
		r.opcode = o::read_request;
		r.psn = 1;
		r.len = 64;
		put(in, r);
		ok &= write_seed(dir, "write_dup_read", in, 3);
	}

	/* Refused: nothing may be written. */
	t = Tpl{};
	t.opcode = o::write_only;
	t.key = key_ro;
	t.len = 32;
	t.payload = 32;
	ok &= one(dir, "write_read_only_key", t);
	t.key = key_other_pd;
	ok &= one(dir, "write_other_pd", t);
	t.key = key_local;
	ok &= one(dir, "write_local_key", t);
	t.key = key_rw;
	t.va = 0x3fe0 - 16; /* the region's end */
	ok &= one(dir, "write_past_end", t);
	t.va = -4;
	ok &= one(dir, "write_before_start", t);
	t.va = 0;
	t.key = key_rw | 0x08; /* another variant */
	ok &= one(dir, "write_stale_variant", t);
	t.key = key_rw;
	t.opcode = o::write_first;
	t.len = (1u << 30) + 1; /* above the device's message size: an invalid request */
	t.payload = 1024;
	ok &= one(dir, "write_longer_than_a_message", t);
	t = Tpl{};
	t.opcode = o::compare_swap;
	t.key = key_ro;
	ok &= one(dir, "atomic_read_only_key", t);
	t.key = key_rw;
	t.va = 4; /* not 8-byte aligned */
	ok &= one(dir, "atomic_unaligned", t);
	t = Tpl{};
	t.kind = kKindQp1; /* no remote read on QP 1 */
	t.opcode = o::read_request;
	t.len = 16;
	ok &= one(dir, "read_qp_without_rre", t);
	t.kind = kKindStranger;
	t.opcode = o::write_only;
	t.payload = 16;
	ok &= one(dir, "write_from_stranger", t);
	t.kind = 0;
	t.psn = 5; /* ahead: a PSN sequence error NAK */
	ok &= one(dir, "write_psn_ahead", t);

	/* QP 0's READ of kReadLen bytes answered: FIRST, MIDDLE, LAST; and one answered by a
	 * response longer than what it asked for (a LAST of a full MTU). */
	{
		std::vector<uint8_t> in;
		Tpl r;
		r.opcode = o::read_response_first;
		r.payload = 1024;
		r.flags = 0;
		put(in, r);
		r.opcode = o::read_response_middle;
		r.psn = 1;
		put(in, r);
		r.opcode = o::read_response_last;
		r.psn = 2;
		r.payload = kReadLen - 2048;
		r.word = 0x1f000000; /* AETH: an ACK, MSN 0 */
		put(in, r);
		ok &= write_seed(dir, "read_answered", in, 3, kInRead);
		in.clear();
		r.opcode = o::read_response_only;
		r.psn = 0;
		r.payload = 1024;
		put(in, r);
		ok &= write_seed(dir, "read_answered_by_one_packet", in, 1, kInRead);
		in.clear();
		r.opcode = o::acknowledge;
		r.payload = 0;
		r.word = 0x61000000; /* NAK: invalid request */
		put(in, r);
		ok &= write_seed(dir, "read_naked", in, 1, kInRead);
	}

	/* Zero-length WRITE and READ: no key checked (C9-88), nothing may be written. */
	t = Tpl{};
	t.opcode = o::write_only;
	t.flags = kHdrAckReq | kHdrRawKey;
	t.word = 0xdeadbe00;
	t.va = -0x1010; /* the data area's start: a guard */
	ok &= one(dir, "write_zero_length_any_key", t);
	t.opcode = o::read_request;
	ok &= one(dir, "read_zero_length_any_key", t);

	/* Responses no request waits for. */
	t = Tpl{};
	t.opcode = o::read_response_only;
	t.payload = 64;
	ok &= one(dir, "read_response_unasked", t);
	t.opcode = o::acknowledge;
	t.payload = 0;
	t.word = 0x60000001; /* NAK: PSN sequence error */
	ok &= one(dir, "nak_unasked", t);

	/* UD datagrams to the UD QP: one that lands, one with immediate and another Q_Key
	 * (dropped), one longer than a receive WQE holds with its GRH (LOCAL_LENGTH_ERR). */
	t = Tpl{};
	t.kind = kKindUd;
	t.opcode = 0;
	t.payload = 100;
	t.word = 0x4242;
	ok &= one(dir, "ud_send", t);
	t.opcode = 1;
	t.flags = kHdrRawKey;
	t.word = kUdQkey + 1;
	ok &= one(dir, "ud_send_imm_wrong_qkey", t);
	t.opcode = 0;
	t.flags = 0;
	t.payload = 500; /* 540 with the GRH: above the two SGEs' 512 */
	ok &= one(dir, "ud_send_longer_than_wqe", t);

	/* Raw. */
	{
		std::vector<uint8_t> in;
		put_raw(in, o::write_only, true);
		ok &= write_seed(dir, "raw_write_resealed", in, 1);
		in.clear();
		put_raw(in, o::send_only, false);
		ok &= write_seed(dir, "raw_send_as_built", in, 1);
	}
	return ok ? 0 : 1;
}
