/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench-fi-mr's cross-process part: per provider, two processes (a server and a client) that
 * find each other through libfabric's own addresses and measure, over FI_EP_RDM:
 *   xp-lat8        8-byte tagged ping-pong, half the median round trip (ns);
 *   xp-write64k    fi_write of 64 KiB to the server's memory, 16 in flight, median GB/s;
 *   xp-write4k     fi_write of 4 KiB from a registered buffer, to its completion (median ns);
 *   xp-regwrite4k  fi_mr_reg of a fresh 4 KiB buffer, then fi_write of it, to the write's
 *                  completion (registration on the critical path), and the MR's fi_close.
 * The parent (fi_mr_bench.cpp) starts the server, passes the address it prints to the client,
 * and reads both processes' lines.
 */
#ifndef NICMR_BENCH_FI_XP_BENCH_H
#define NICMR_BENCH_FI_XP_BENCH_H

#include <string>

namespace nicmr::bench::xp {

/* The repetitions of each measurement. */
struct Counts {
	int lat_warmup = 1000;
	int lat_iters = 10000;
	int bw_reps = 9;     /* timed rounds after one untimed */
	int bw_writes = 256; /* writes per round */
	int small_warmup = 100;
	int small_iters = 2001;
	static Counts smoke() { return {20, 200, 2, 8, 5, 50}; }
};

/* The server's process: opens `provider` (row names the row, "nicmr" buffers from a nicmr
 * pool), prints "XPADDR <row> <its name in hex>", serves one client, checks the bytes it was
 * written and prints "XPCHECK <row> ok", or "UNSUPPORTED <row> xp server: <why>" where it
 * cannot go on. Returns the exit status (0 either way). */
int run_server(const std::string &row, const std::string &provider);

/* The client's process: connects to the server named by peer_hex and prints the RESULT lines,
 * or "UNSUPPORTED <row> xp client: <why>" where it cannot go on. Returns the exit status. */
int run_client(const std::string &row, const std::string &provider, const std::string &peer_hex,
	       const Counts &n);

/* The cases a cross-process row has, in the order the client measures them. */
inline const char *const kCases[] = {"xp-lat8", "xp-write64k", "xp-write4k", "xp-regwrite4k"};

} // namespace nicmr::bench::xp

#endif
