/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The one definition of a valid byte range, used by registration, lookups and raw keys alike:
 * nonempty, and addr + len fits in 64 bits (so the last usable byte is 2^64 - 2). Written
 * without any sum that can overflow.
 */
#ifndef NICMR_MR_RANGE_H
#define NICMR_MR_RANGE_H

#include <cstdint>

namespace nicmr::mr {

constexpr bool range_valid(uint64_t addr, uint64_t len) noexcept
{
	return len != 0 && addr + len > addr;
}

/* [addr, addr+len) inside [start, start+slen); both ranges valid. */
constexpr bool range_within(uint64_t start, uint64_t slen, uint64_t addr, uint64_t len) noexcept
{
	return addr >= start && addr - start <= slen && len <= slen - (addr - start);
}

} // namespace nicmr::mr

#endif
