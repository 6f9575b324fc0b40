/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Raw keys (fi_mr_raw_attr / fi_mr_map_raw): a fixed, versioned 64-byte blob that carries
 * everything a peer needs to target a region, and that the peer checks before it trusts it.
 * Every multi-byte field is little-endian.
 *
 *   off size field
 *    0   4   magic        0x4b524d4e ("NMRK" read as bytes)
 *    4   2   version      1
 *    6   2   size         64
 *    8   8   device_id    the registering device (never 0)
 *   16   8   base_addr    the region's start: its VA, or 0 when zero-based
 *   24   8   length       > 0, base_addr + length does not wrap
 *   32   4   mkey         index != 0
 *   36   4   pd           24 bits
 *   40   1   access       MkeyAccess bits, rw/a only with lw
 *   41  19   reserved     zero
 *   60   4   crc32c       Castagnoli CRC of bytes 0..59 (init ~0, final ~)
 */
#ifndef NICMR_MR_RAWKEY_H
#define NICMR_MR_RAWKEY_H

#include <cstddef>
#include <cstdint>

namespace nicmr::mr {

inline constexpr uint32_t kRawKeyMagic = 0x4b524d4e;
inline constexpr uint16_t kRawKeyVersion = 1;
inline constexpr size_t kRawKeySize = 64;
/* expected_device for decode_raw_key that accepts any device. */
inline constexpr uint64_t kAnyDevice = 0;

struct RawKey {
	uint64_t device_id;
	uint64_t base_addr;
	uint64_t length;
	uint32_t mkey;
	uint32_t pd;
	uint8_t access;
};

/*
 * Writes key into buf. *size: in, the buffer's size; out, kRawKeySize.
 * Returns 0; -ENOSPC when *size < kRawKeySize (nothing written, *size tells what is needed);
 * -EINVAL when key itself would not decode (zero length or device, wrap, bad access or mkey).
 */
int encode_raw_key(const RawKey &key, uint8_t *buf, size_t *size) noexcept;

/*
 * Checks and decodes a blob. No allocation; safe on any bytes. Returns 0;
 * -EINVAL for anything malformed: size != kRawKeySize, wrong magic, version or size field,
 * checksum mismatch, nonzero reserved bytes, zero device id, zero length, base_addr + length
 * wrapping, unknown access bits or rw/a without lw, mkey index 0, pd above 24 bits;
 * -EXDEV when the blob is well formed but names another device than expected_device
 * (kAnyDevice skips that check).
 */
int decode_raw_key(const uint8_t *buf, size_t size, uint64_t expected_device, RawKey *out) noexcept;

/* CRC32C (Castagnoli) of len bytes, as stored in the blob. */
uint32_t crc32c(const uint8_t *p, size_t len) noexcept;

} // namespace nicmr::mr

#endif
