/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The input of fuzz_roce_parse, shared with the seed writer (fuzz_roce_seeds):
 *
 *   byte 0        flags: bit 0 IPv6, bit 1 reseal (write the datagram's true ICRC before
 *                 parsing, so that mutations reach the checks behind the ICRC), bit 2 DF
 *   bytes 1..16   source address (IPv4: the first 4 bytes)
 *   bytes 17..32  destination address
 *   bytes 33..34  UDP source port, big-endian
 *   bytes 35..36  IPv4 ID, big-endian
 *   bytes 37..    the datagram (UDP payload: BTH first, ICRC last)
 */
#ifndef NICMR_FUZZ_ROCE_FORMAT_H
#define NICMR_FUZZ_ROCE_FORMAT_H

#include <cstddef>
#include <cstdint>

namespace nicmr::roce::fuzz {

inline constexpr uint8_t kFlagIpv6 = 1u << 0;
inline constexpr uint8_t kFlagReseal = 1u << 1;
inline constexpr uint8_t kFlagDf = 1u << 2;
inline constexpr size_t kPrefix = 37;

} // namespace nicmr::roce::fuzz

#endif
