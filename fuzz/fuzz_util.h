/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the structured fuzz targets share.
 *   FUZZ_CHECK  a broken invariant stops the run as a crash, which libFuzzer reports with
 *               its input.
 *   Reader      big-endian integers and byte runs taken in order from the front of the
 *               input, zeros once it is spent (so every input decodes to something). The
 *               targets' seed writers lay their inputs out in this order; libFuzzer's
 *               FuzzedDataProvider takes integers from the end of the input instead.
 */
#ifndef NICMR_FUZZ_UTIL_H
#define NICMR_FUZZ_UTIL_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#define FUZZ_CHECK(cond)                                                                           \
	do {                                                                                       \
		if (!(cond))                                                                       \
			__builtin_trap();                                                          \
	} while (0)

namespace nicmr::fuzz {

class Reader {
public:
	Reader(const uint8_t *d, size_t n) : d_(d), n_(n) {}
	bool done() const { return at_ >= n_; }
	size_t left() const { return at_ < n_ ? n_ - at_ : 0; }
	uint8_t u8() { return at_ < n_ ? d_[at_++] : 0; }
	/* Each half is read before the next: the operands of | are unsequenced. */
	uint16_t u16()
	{
		const uint16_t hi = u8();
		return static_cast<uint16_t>(hi << 8 | u8());
	}
	uint32_t u32()
	{
		const uint32_t hi = u16();
		return hi << 16 | u16();
	}
	uint64_t u64()
	{
		const uint64_t hi = u32();
		return hi << 32 | u32();
	}
	/* len bytes into dst, zero-filled past the input's end. */
	void bytes(uint8_t *dst, size_t len)
	{
		const size_t take = at_ < n_ ? std::min(len, n_ - at_) : 0;
		std::memcpy(dst, d_ + at_, take);
		std::memset(dst + take, 0, len - take);
		at_ += take;
	}

private:
	const uint8_t *d_;
	size_t n_;
	size_t at_ = 0;
};

} // namespace nicmr::fuzz

#endif
