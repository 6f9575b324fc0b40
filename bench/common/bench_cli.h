/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The command line of nicmr's benchmark programs, one set of rules for all of them:
 *   -h, --help        what the program measures and its options on stdout, exit status 0;
 *   a bad argument    an unknown option, a bad value, a --benchmark_filter that matches no
 *                     benchmark: "PROG: what is wrong" on stderr, exit status 2;
 * both before the program does any work (opens a device, makes a pool, measures).
 * Google Benchmark's Initialize() only removes the flags it knows and, for a bad value of some
 * of them, prints its help and exits 0; init() closes both gaps.
 */
#ifndef NICMR_BENCH_CLI_H
#define NICMR_BENCH_CLI_H

#include <cstdint>

namespace nicmr::bench {

/* A count: a number as nicmr::parse_number takes it (decimal or 0x hex), from 1 to max. "abc",
 * "0", "-1", "1x", "+1", " 1" and "" are not counts. On success *out is set; on failure it is left
 * alone. */
bool parse_count(const char *text, uint64_t max, uint64_t *out);

/* "PROG: MESSAGE" and "try 'PROG --help'" on stderr, then exit status 2. */
[[noreturn]] void usage_error(const char *prog, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* For the Google Benchmark programs: call once every benchmark is registered and before any
 * work. Handles -h/--help (usage: ABOUT, then Google Benchmark's flags), Google Benchmark's
 * flags with their values checked (--benchmark_repetitions is a count like the programs' own
 * ones), any argument left over, and a --benchmark_filter that matches no benchmark; exits 0
 * for help and 2 for the rest, as above. Returns only when the program should run. */
void init(int *argc, char **argv, const char *prog, const char *about);

} // namespace nicmr::bench

#endif
