/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Numbers and sizes as nicmr's tools and test settings take them (testmr's options and
 * commands, NICMR_REQUIRE_HUGEPAGES): strict, so that a mistyped value is an error rather than
 * something else. Slow path; any thread.
 */
#ifndef NICMR_PARSE_H
#define NICMR_PARSE_H

#include <cstdint>
#include <string_view>

namespace nicmr {

/* A whole number, decimal or 0x hex: false on anything else (signs, spaces, a trailing
 * character) or on overflow. */
bool parse_number(std::string_view word, uint64_t *out);

/*
 * A size for tools and test settings: a number as parse_number takes it, with an optional
 * K, M or G suffix (any case, binary units): "64", "0x40", "2M", "1g". false on anything
 * else, or when the suffix overflows 64 bits.
 * Hand-made on purpose, not DPDK's rte_str_to_size: checked against DPDK 22.11, it returns 0
 * for an error (indistinguishable from "0"), ignores trailing characters ("12x" is 12), reads
 * "010" as octal 8, and lets the suffix overflow ("99999999999g" wraps), where nicmr's tools
 * answer a bad value with an error (testmr: exit 2 for options, doc/testmr.md).
 */
bool parse_size(std::string_view word, uint64_t *out);

} // namespace nicmr

#endif
