/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rxe-pingpong-peer: either side of rdma-core's ibv_rc_pingpong, spoken at the packet level
 * with nicmr's RoCEv2 builder, parser and ICRC (drivers/common/roce), so that Linux soft-RoCE
 * (rdma_rxe, in the QEMU guest of run_rxe_test.py) checks nicmr's packets and nicmr checks rxe's.
 * Nothing of verbs runs here: one RC "QP" is the state below.
 *
 *   TCP (ibv_rc_pingpong's out-of-band exchange, port 18515; the server listens, or, with
 *   --connect, ibv_rc_pingpong in the guest does):
 *     client -> "LID:QPN:PSN:GID"   (rc_pingpong.c pp_client_exch_dest: "%04x:%06x:%06x:%s",
 *     server -> "LID:QPN:PSN:GID"    GID as 32 hex digits in byte order, 52 bytes with the NUL)
 *     client -> "done"
 *   UDP 4791, --iters rounds of: the client's SEND, then the server's SEND of the same size
 *     (FIRST/MIDDLE/LAST or ONLY by path MTU, ack requested on the last packet); the receiver
 *     checks PSNs, reassembles and ACKs.
 *
 * ibv_rc_pingpong posts one buffer for both its receives and its sends (rc_pingpong.c: ctx->buf
 * in pp_post_recv and pp_post_send), so rxe sends what it last received: as the client, from the
 * second round on, our message of the round before; as the server, our message of this round.
 * The data is checked byte for byte against it.
 *
 * Receiving: the ICRC covers the IPv4 ID, which a UDP socket does not report, so datagrams are
 * read from a raw IPPROTO_UDP socket (IP header included); a UDP socket bound to 4791 keeps the
 * port open (no ICMP unreachable) and sends, unconnected with DF, so that Linux gives the IPv4 ID
 * 0 the ICRC was computed with (include/net/ip.h ip_select_ident_segs).
 *
 * --bad-icrc: the first packet of the first round goes out once with a wrong ICRC; rxe must drop
 * it (rxe_icrc.c rxe_icrc_check), so no ACK may come until the good copy is sent.
 *
 * Output: "PEER key=value ..." lines; exit 0 when every round passed, 1 otherwise (the reason on
 * stderr), 2 for bad arguments.
 */
#include <arpa/inet.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "roce_packet.h"

using namespace nicmr::roce;
namespace prm = nicmr::mlx5::prm;

namespace {

constexpr size_t kRecordSize = 52; /* "0000:000000:000000:" + 32 hex digits + NUL */
constexpr uint32_t kPsnMask = 0xffffff;
constexpr uint32_t kOurQpn = 0x000c5d;

struct Options {
	in_addr addr{};
	uint16_t tcp_port = 18515;
	size_t size = 4096;
	int iters = 100;
	size_t mtu = 1024;
	int timeout_s = 120;
	bool bad_icrc = false;
	bool client = false; /* --connect: we are ibv_rc_pingpong's client */
	in_addr server{};
};

[[noreturn]] void fail(const char *fmt, const std::string &what)
{
	std::fprintf(stderr, "rxe-pingpong-peer: FAIL: ");
	std::fprintf(stderr, fmt, what.c_str());
	std::fprintf(stderr, "\n");
	std::exit(1);
}

[[noreturn]] void usage(const char *why)
{
	std::fprintf(stderr,
		     "rxe-pingpong-peer: %s\n"
		     "usage: rxe-pingpong-peer --addr IPV4 [--tcp-port N] [--size BYTES] "
		     "[--iters N] [--mtu 256|512|1024|2048|4096] [--timeout S] [--bad-icrc] "
		     "[--connect IPV4]\n",
		     why);
	std::exit(2);
}

Options parse_args(int argc, char **argv)
{
	Options o;
	bool have_addr = false;
	for (int i = 1; i < argc; i++) {
		const std::string a = argv[i];
		auto value = [&]() -> const char * {
			if (i + 1 >= argc)
				usage(("option " + a + " needs a value").c_str());
			return argv[++i];
		};
		auto number = [&](long lo, long hi) {
			const char *v = value();
			char *end = nullptr;
			const long n = std::strtol(v, &end, 10);
			if (*v == '\0' || *end != '\0' || n < lo || n > hi)
				usage(("bad value for " + a).c_str());
			return n;
		};
		if (a == "--addr") {
			if (inet_pton(AF_INET, value(), &o.addr) != 1)
				usage("--addr is not an IPv4 address");
			have_addr = true;
		} else if (a == "--tcp-port") {
			o.tcp_port = uint16_t(number(1, 65535));
		} else if (a == "--size") {
			o.size = size_t(number(1, 1 << 20));
		} else if (a == "--iters") {
			o.iters = int(number(1, 1000000));
		} else if (a == "--mtu") {
			o.mtu = size_t(number(256, 4096));
			if (o.mtu & (o.mtu - 1))
				usage("--mtu is not a power of two");
		} else if (a == "--timeout") {
			o.timeout_s = int(number(1, 3600));
		} else if (a == "--connect") {
			if (inet_pton(AF_INET, value(), &o.server) != 1)
				usage("--connect is not an IPv4 address");
			o.client = true;
		} else if (a == "--bad-icrc") {
			o.bad_icrc = true;
		} else {
			usage(("unknown option " + a).c_str());
		}
	}
	if (!have_addr)
		usage("--addr is required");
	return o;
}

using Clock = std::chrono::steady_clock;

struct Peer {
	Options o;
	Clock::time_point deadline;
	int udp = -1, raw = -1;
	in_addr remote{};
	uint32_t remote_qpn = 0;
	uint32_t rx_psn = 0; /* the next PSN we expect from rxe */
	uint32_t tx_psn = 0; /* the next PSN we send */
	uint32_t msn = 0;    /* messages we completed (AETH MSN of our ACKs) */

	std::vector<uint8_t> rx_msg; /* the message being reassembled */
	bool rx_in_message = false;
	int rx_done = 0;	       /* messages received whole */
	std::vector<uint8_t> last_msg; /* the last complete message */

	/* counters printed at the end */
	uint64_t pkts_in = 0, pkts_out = 0, bad_icrc_in = 0, parse_err_in = 0, dup_in = 0;
	uint64_t out_of_seq_in = 0, acks_in = 0, naks_in = 0, retransmits = 0, foreign_in = 0;

	/* the last ACK rxe sent: the PSN it covers */
	bool have_ack = false;
	uint32_t acked_psn = 0;

	int ms_left() const
	{
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
					  deadline - Clock::now())
					  .count();
		return left > 0 ? int(left) : 0;
	}

	IpPath out_path() const { return ipv4_path(o.addr, remote, udp_port, udp_port); }

	void send_packet(const Headers &h, std::span<const uint8_t> payload, bool corrupt = false)
	{
		uint8_t buf[max_datagram];
		size_t len = 0;
		const Error e = build(out_path(), h, payload, buf, &len);
		if (e != Error::ok)
			fail("build: %s", error_name(e));
		if (corrupt)
			buf[len - 1] ^= 0x5a;
		sockaddr_in to{};
		to.sin_family = AF_INET;
		to.sin_addr = remote;
		to.sin_port = htons(udp_port);
		if (sendto(udp, buf, len, 0, reinterpret_cast<sockaddr *>(&to), sizeof to) !=
		    ssize_t(len))
			fail("sendto: %s", std::strerror(errno));
		pkts_out++;
	}

	void send_ack(uint32_t psn)
	{
		Headers h;
		h.opcode = opcode::acknowledge;
		h.dest_qp = remote_qpn;
		h.psn = psn;
		h.aeth.syndrome = aeth::make_syndrome(aeth::type::ack, aeth::credit_invalid);
		h.aeth.msn = msn & kPsnMask;
		send_packet(h, {});
	}

	/* One datagram from the raw socket, or false on timeout (ms). */
	bool receive(int ms)
	{
		pollfd p{raw, POLLIN, 0};
		if (poll(&p, 1, ms) <= 0)
			return false;
		uint8_t buf[65536];
		const ssize_t n = recv(raw, buf, sizeof buf, 0);
		if (n < ssize_t(sizeof(iphdr) + sizeof(udphdr)))
			return true;
		const auto *ip = reinterpret_cast<const iphdr *>(buf);
		const size_t ihl = size_t(ip->ihl) * 4;
		if (ip->protocol != IPPROTO_UDP || size_t(n) < ihl + sizeof(udphdr))
			return true;
		const auto *u = reinterpret_cast<const udphdr *>(buf + ihl);
		if (ntohs(u->dest) != udp_port || ip->daddr != o.addr.s_addr)
			return true;
		if (ip->saddr != remote.s_addr) {
			foreign_in++;
			return true;
		}
		in_addr src{}, dst{};
		src.s_addr = ip->saddr;
		dst.s_addr = ip->daddr;
		IpPath path = ipv4_path(src, dst, ntohs(u->source), ntohs(u->dest));
		path.ipv4_id = ntohs(ip->id);
		path.ipv4_df = (ntohs(ip->frag_off) & IP_DF) != 0;
		const size_t dlen = std::min(size_t(n) - ihl - sizeof(udphdr),
					     size_t(ntohs(u->len)) - sizeof(udphdr));
		Parsed pk;
		const Error e = parse(path, {buf + ihl + sizeof(udphdr), dlen}, &pk);
		pkts_in++;
		if (e == Error::bad_icrc) {
			bad_icrc_in++;
			return true;
		}
		if (e != Error::ok) {
			parse_err_in++;
			std::fprintf(stderr, "rxe-pingpong-peer: a packet from rxe refused: %s\n",
				     error_name(e));
			return true;
		}
		if (uint32_t(prm::get(pk.bth, bth::dest_qp)) != kOurQpn) {
			foreign_in++;
			return true;
		}
		handle(pk);
		return true;
	}

	void handle(const Parsed &pk)
	{
		const uint32_t psn = uint32_t(prm::get(pk.bth, bth::psn));
		const uint8_t op = pk.opcode;
		if (op == opcode::acknowledge) {
			const uint8_t syn = uint8_t(prm::get(pk.aeth, aeth::syndrome));
			if (aeth::syndrome_type_of(syn) != aeth::type::ack) {
				naks_in++;
				fail("rxe answered with a NAK or RNR NAK (AETH syndrome %s)",
				     std::to_string(syn));
			}
			acks_in++;
			have_ack = true;
			acked_psn = psn;
			return;
		}
		const bool first = op == opcode::send_first || op == opcode::send_only;
		const bool last = op == opcode::send_last || op == opcode::send_only;
		if (!first && !last && op != opcode::send_middle)
			fail("rxe sent opcode %s, not a SEND", pk.info ? pk.info->name : "?");
		if (psn != rx_psn) {
			/* A retransmission of what we already took: ACK what we have (IBTA 9.9.2.2,
			 * duplicate requests). Anything ahead is a sequence error we do not expect
			 * on a link without loss. */
			if (((rx_psn - psn) & kPsnMask) < (kPsnMask / 2)) {
				dup_in++;
				send_ack((rx_psn - 1) & kPsnMask);
				return;
			}
			out_of_seq_in++;
			fail("rxe's PSN %s is ahead of the one expected", std::to_string(psn));
		}
		if (first != !rx_in_message)
			fail("a SEND %s arrived out of its message", pk.info->name);
		if (first)
			rx_msg.clear();
		if (!last && pk.payload.size() != o.mtu)
			fail("a SEND FIRST/MIDDLE of %s bytes is not one path MTU",
			     std::to_string(pk.payload.size()));
		rx_msg.insert(rx_msg.end(), pk.payload.begin(), pk.payload.end());
		rx_in_message = !last;
		rx_psn = (rx_psn + 1) & kPsnMask;
		if (last) {
			msn++;
			rx_done++;
			last_msg = rx_msg;
			send_ack(psn);
		}
	}

	/* Sends msg as one SEND message; returns the PSN of its last packet. */
	uint32_t send_message(const std::vector<uint8_t> &msg, uint32_t first_psn,
			      bool corrupt_first)
	{
		const size_t n = (msg.size() + o.mtu - 1) / o.mtu;
		uint32_t psn = first_psn;
		for (size_t i = 0; i < n; i++) {
			Headers h;
			h.opcode = n == 1	? opcode::send_only
				   : i == 0	? opcode::send_first
				   : i + 1 == n ? opcode::send_last
						: opcode::send_middle;
			h.dest_qp = remote_qpn;
			h.psn = psn;
			h.ack_req = i + 1 == n;
			const size_t off = i * o.mtu;
			const size_t len = std::min(o.mtu, msg.size() - off);
			if (i == 0 && corrupt_first) {
				send_packet(h, {msg.data() + off, len}, true);
				/* rxe must drop it: nothing may acknowledge this PSN. */
				const auto until = Clock::now() + std::chrono::milliseconds(500);
				while (Clock::now() < until)
					receive(50);
				if (have_ack && acked_psn == psn)
					fail("rxe acknowledged a packet whose ICRC was wrong%s",
					     "");
				std::printf("PEER bad_icrc_probe=dropped psn=%u\n", psn);
			}
			send_packet(h, {msg.data() + off, len});
			psn = (psn + 1) & kPsnMask;
		}
		return (psn - 1) & kPsnMask;
	}
};

/* Reads exactly n bytes before the deadline; false when the other side closed or time ran out. */
bool read_all(Peer &p, int fd, char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		pollfd pc{fd, POLLIN, 0};
		if (poll(&pc, 1, p.ms_left()) <= 0)
			return false;
		const ssize_t r = read(fd, buf + got, n - got);
		if (r <= 0)
			return false;
		got += size_t(r);
	}
	return true;
}

/* Takes the other side's record: its QPN, its first PSN and, from its IPv4-mapped GID, its
 * address. */
void take_record(Peer &p, const char *rec)
{
	unsigned lid = 0, qpn = 0, psn = 0;
	char gid[33] = {};
	if (std::sscanf(rec, "%x:%x:%x:%32s", &lid, &qpn, &psn, gid) != 4 || std::strlen(gid) != 32)
		fail("a record nicmr cannot read: '%s'", rec);
	if (std::strncmp(gid, "00000000000000000000ffff", 24) != 0)
		fail("the GID %s is not IPv4-mapped (ibv_rc_pingpong -g 1?)", gid);
	p.remote.s_addr = htonl(uint32_t(std::strtoul(gid + 24, nullptr, 16)));
	p.remote_qpn = qpn & kPsnMask;
	p.rx_psn = psn & kPsnMask;
}

void make_record(const Peer &p, char (&rec)[kRecordSize])
{
	std::memset(rec, 0, sizeof rec);
	std::snprintf(rec, sizeof rec, "%04x:%06x:%06x:00000000000000000000ffff%08x", 0u, kOurQpn,
		      p.tx_psn, ntohl(p.o.addr.s_addr));
}

/* ibv_rc_pingpong's exchange (rc_pingpong.c pp_server_exch_dest / pp_client_exch_dest): the
 * client's record, the server's, then the client's "done". */
void tcp_exchange(Peer &p, std::mt19937 &rng)
{
	p.tx_psn = rng() & kPsnMask;
	char ours[kRecordSize], theirs[kRecordSize + 1] = {};
	make_record(p, ours);
	sockaddr_in a{};
	a.sin_family = AF_INET;
	int c = -1;
	if (p.o.client) {
		/* The guest's server may not listen yet: try until the deadline. */
		a.sin_addr = p.o.server;
		a.sin_port = htons(p.o.tcp_port);
		for (;;) {
			c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (connect(c, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0)
				break;
			close(c);
			if (p.ms_left() == 0)
				fail("ibv_rc_pingpong's server never listened%s", "");
			usleep(200 * 1000);
		}
		if (write(c, ours, sizeof ours) != ssize_t(sizeof ours))
			fail("write of our record: %s", std::strerror(errno));
		if (!read_all(p, c, theirs, kRecordSize))
			fail("the server's record did not come%s", "");
		take_record(p, theirs);
		if (write(c, "done", 5) != 5)
			fail("write of \"done\": %s", std::strerror(errno));
	} else {
		const int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		const int one = 1;
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		a.sin_addr = p.o.addr;
		a.sin_port = htons(p.o.tcp_port);
		if (bind(ls, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || listen(ls, 1) != 0)
			fail("TCP listen: %s", std::strerror(errno));
		std::printf("PEER listening tcp_port=%u\n", p.o.tcp_port);
		std::fflush(stdout);
		pollfd pf{ls, POLLIN, 0};
		if (poll(&pf, 1, p.ms_left()) <= 0)
			fail("no ibv_rc_pingpong client connected%s", "");
		c = accept(ls, nullptr, nullptr);
		close(ls);
		if (c < 0)
			fail("accept: %s", std::strerror(errno));
		if (!read_all(p, c, theirs, kRecordSize))
			fail("the client's record did not come%s", "");
		take_record(p, theirs);
		if (write(c, ours, sizeof ours) != ssize_t(sizeof ours))
			fail("write of our record: %s", std::strerror(errno));
		char done[5] = {};
		if (!read_all(p, c, done, sizeof done) || std::memcmp(done, "done", 5) != 0)
			fail("the client did not end its exchange with \"done\"%s", "");
	}
	close(c);
	char rip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &p.remote, rip, sizeof rip);
	std::printf("PEER exchange role=%s remote=%s qpn=%#x psn=%#x ours_qpn=%#x ours_psn=%#x\n",
		    p.o.client ? "client" : "server", rip, p.remote_qpn, p.rx_psn, kOurQpn,
		    p.tx_psn);
	std::fflush(stdout);
}

/* rxe's next whole message, or a failure naming the round. */
void await_message(Peer &p, int round)
{
	while (p.rx_done <= round) {
		if (!p.receive(std::min(p.ms_left(), 1000)) && p.ms_left() == 0)
			fail("timed out waiting for rxe's SEND of round %s", std::to_string(round));
	}
	if (p.last_msg.size() != p.o.size)
		fail("rxe's message of %s bytes is not --size", std::to_string(p.last_msg.size()));
}

/* Sends msg and waits for rxe's ACK of its last packet, sending it again when none comes. */
void send_acked(Peer &p, const std::vector<uint8_t> &msg, int round, bool corrupt_first)
{
	const uint32_t first = p.tx_psn;
	p.have_ack = false;
	uint32_t last = p.send_message(msg, first, corrupt_first);
	int tries = 0;
	while (!(p.have_ack && p.acked_psn == last)) {
		if (!p.receive(std::min(p.ms_left(), 500))) {
			if (p.ms_left() == 0 || ++tries > 10)
				fail("rxe did not acknowledge round %s", std::to_string(round));
			p.retransmits++;
			last = p.send_message(msg, first, false);
		}
	}
	p.tx_psn = (last + 1) & kPsnMask;
}

} // namespace

int main(int argc, char **argv)
{
	Peer p;
	p.o = parse_args(argc, argv);
	p.deadline = Clock::now() + std::chrono::seconds(p.o.timeout_s);
	std::mt19937 rng(std::random_device{}());

	/* The sockets first, so that nothing rxe sends after the exchange is missed. */
	p.udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr = p.o.addr;
	a.sin_port = htons(udp_port);
	const int df = IP_PMTUDISC_DO;
	if (p.udp < 0 || bind(p.udp, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
	    setsockopt(p.udp, IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df) != 0)
		fail("UDP socket on port 4791: %s", std::strerror(errno));
	p.raw = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP);
	if (p.raw < 0)
		fail("raw UDP socket (root needed): %s", std::strerror(errno));

	tcp_exchange(p, rng);

	/* The server answers each message; the client speaks first. Either way rxe sends what it
	 * last received: the client's echo of our round r is in round r + 1, the server's in the
	 * same round. */
	std::vector<uint8_t> prev;
	for (int round = 0; round < p.o.iters; round++) {
		std::vector<uint8_t> msg(p.o.size);
		for (size_t i = 0; i < msg.size(); i++)
			msg[i] = uint8_t(i * 7 + round * 13 + 1);
		const bool corrupt = p.o.bad_icrc && round == 0;
		if (p.o.client) {
			send_acked(p, msg, round, corrupt);
			await_message(p, round);
			if (p.last_msg != msg)
				fail("rxe's answer in round %s is not the message we sent it",
				     std::to_string(round));
		} else {
			await_message(p, round);
			if (round > 0 && p.last_msg != prev)
				fail("rxe's message in round %s is not the one we sent it before",
				     std::to_string(round));
			send_acked(p, msg, round, corrupt);
		}
		prev = std::move(msg);
	}
	std::printf(
		"PEER result=pass role=%s rounds=%d size=%zu mtu=%zu pkts_in=%llu pkts_out=%llu "
		"acks_in=%llu naks_in=%llu bad_icrc_in=%llu parse_errors_in=%llu "
		"duplicates_in=%llu retransmits=%llu foreign_in=%llu\n",
		p.o.client ? "client" : "server", p.o.iters, p.o.size, p.o.mtu,
		(unsigned long long)p.pkts_in, (unsigned long long)p.pkts_out,
		(unsigned long long)p.acks_in, (unsigned long long)p.naks_in,
		(unsigned long long)p.bad_icrc_in, (unsigned long long)p.parse_err_in,
		(unsigned long long)p.dup_in, (unsigned long long)p.retransmits,
		(unsigned long long)p.foreign_in);
	if (p.bad_icrc_in || p.parse_err_in)
		fail("rxe sent packets nicmr's parser refused%s", "");
	return 0;
}
