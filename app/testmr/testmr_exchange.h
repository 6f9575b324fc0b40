/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr's out-of-band exchange of QP addresses over TCP, the one rdma-core's ibv_rc_pingpong
 * speaks (libibverbs/examples/rc_pingpong.c, pp_client_exch_dest and pp_server_exch_dest), so
 * that testmr and ibv_rc_pingpong, or two testmrs, can learn each other's QP:
 *
 *   client                                          server (listening)
 *   connect ───────────────────────────────────────> accept (one peer)
 *   record "LLLL:QQQQQQ:PPPPPP:GGGG...G\0" (52) ───> read it, connect its QP (RTR, RTS)
 *   read the server's record (52)  <──────────────── record
 *   "done\0" (5) ──────────────────────────────────> read it; both close
 *   connect its QP (RTR, RTS)
 *
 * A record is exactly "%04x:%06x:%06x:%s" and a NUL: LID (0 on RoCE), QPN, PSN and the GID as
 * 32 lower-case hex digits in byte order (what rc_pingpong's gid_to_wire_gid writes on any
 * host), 52 bytes. Both sides may add, by agreement (testmr's `mr KEY` option), an MR record
 * right after their address record: "%016x:%08x:%016x" and a NUL, 43 bytes: the address, rkey
 * and length of a region the peer may RDMA into or from (the client sends its own first, the
 * server reads it, then answers with its record and its own MR record). ibv_rc_pingpong sends
 * none; a peer that sends none when one is expected ends in the timeout. Every blocking step
 * (accept, connect, each read and write) waits at most the timeout the caller gives, then fails
 * with -ETIMEDOUT and says which step it was.
 */
#ifndef NICMR_TESTMR_EXCHANGE_H
#define NICMR_TESTMR_EXCHANGE_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace nicmr::testmr {

/* One side's address as the record carries it. */
struct PeerRecord {
	uint32_t lid = 0; /* 16 bits; 0 on RoCE */
	uint32_t qpn = 0; /* 24 bits */
	uint32_t psn = 0; /* 24 bits */
	std::array<uint8_t, 16> gid{};
};

/* A region one side offers the other's RDMA (the MR record). */
struct MrRecord {
	uint64_t addr = 0;
	uint32_t rkey = 0;
	uint64_t len = 0;
};

/* The MR record's size: sizeof "0000000000000000:00000000:0000000000000000". */
inline constexpr size_t kMrRecordSize = 43;

/* The MR record of r. */
std::array<char, kMrRecordSize> format_mr_record(const MrRecord &r);
/* An MR record as the peer sent it: exactly kMrRecordSize bytes, the layout above (hex digits
 * of either case), NUL last. false for anything else. */
bool parse_mr_record(std::string_view bytes, MrRecord *out);

/* The record's size: sizeof "0000:000000:000000:00000000000000000000000000000000". */
inline constexpr size_t kRecordSize = 52;
/* What the client sends last, with its NUL. */
inline constexpr char kDone[] = "done";
/* The default of every blocking step, in seconds (`timeout` option of the commands). */
inline constexpr uint32_t kExchangeTimeoutS = 10;
/* The largest timeout the commands take, in seconds. */
inline constexpr uint32_t kExchangeMaxTimeoutS = 3600;

/* The record of r (lid, qpn and psn are masked to their widths). */
std::array<char, kRecordSize> format_record(const PeerRecord &r);
/* A record as the peer sent it: exactly kRecordSize bytes, the layout above (hex digits of
 * either case), NUL last. false for anything else. */
bool parse_record(std::string_view bytes, PeerRecord *out);

/* The GID as an IPv6 address ("::ffff:127.0.0.1") and as 32 hex digits. */
std::string gid_text(const std::array<uint8_t, 16> &gid);
std::string gid_hex(const std::array<uint8_t, 16> &gid);

/*
 * The server: listens on TCP port (all addresses, IPv6 and IPv4), takes one peer, reads its
 * record, calls connect(theirs), which must move the local QP to RTS, sends mine and waits for
 * "done". With mine_mr and theirs_mr (both or neither), the MR records follow the address
 * records (-EPROTO for one that is not one). When connect fails the peer gets no record (it sees
 * the connection closed), and its code is returned. 0 and *theirs; a negative errno and *error
 * otherwise: -ETIMEDOUT (a step waited longer than timeout_s), -EPROTO (a record or "done" that is
 * not one), -ECONNRESET (the peer closed early), the socket calls' errors (-EADDRINUSE, ...).
 */
int exchange_listen(uint16_t port, uint32_t timeout_s, const PeerRecord &mine,
		    const std::function<int(const PeerRecord &)> &connect, PeerRecord *theirs,
		    std::string *error, const MrRecord *mine_mr = nullptr,
		    MrRecord *theirs_mr = nullptr);

/*
 * The client: connects to host:port (a name or a numeric address; a refused connection is
 * tried again every 100 ms until the timeout, so the server may start a little later), sends
 * mine, reads the server's record and sends "done". The caller then connects its QP. 0 and
 * *theirs; a negative errno and *error otherwise, as exchange_listen, and -ENOENT (host has
 * no address).
 */
int exchange_connect(const std::string &host, uint16_t port, uint32_t timeout_s,
		     const PeerRecord &mine, PeerRecord *theirs, std::string *error,
		     const MrRecord *mine_mr = nullptr, MrRecord *theirs_mr = nullptr);

} // namespace nicmr::testmr

#endif
