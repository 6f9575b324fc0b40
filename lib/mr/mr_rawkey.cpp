/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_rawkey.h"

#include <cerrno>
#include <cstring>

#include <rte_hash_crc.h>

#include "mr_access.h"
#include "mr_keys.h"
#include "mr_range.h"

namespace nicmr::mr {

namespace {

/* Byte offsets of the layout table in mr_rawkey.h. */
enum : size_t {
	kOffMagic = 0,
	kOffVersion = 4,
	kOffSize = 6,
	kOffDevice = 8,
	kOffBase = 16,
	kOffLength = 24,
	kOffMkey = 32,
	kOffPd = 36,
	kOffAccess = 40,
	kOffReserved = 41,
	kOffCrc = 60,
};

template <typename T> void put_le(uint8_t *p, T v) noexcept
{
	for (size_t i = 0; i < sizeof(T); ++i)
		p[i] = static_cast<uint8_t>(v >> (8 * i));
}

template <typename T> T get_le(const uint8_t *p) noexcept
{
	T v = 0;
	for (size_t i = 0; i < sizeof(T); ++i)
		v |= static_cast<T>(p[i]) << (8 * i);
	return v;
}

bool key_valid(const RawKey &k) noexcept
{
	return k.device_id != 0 && range_valid(k.base_addr, k.length) && access_valid(k.access) &&
	       mkey_index(k.mkey) != 0 && k.pd <= 0xffffff;
}

} // namespace

/*
 * CRC32C (Castagnoli) with DPDK's rte_hash_crc_8byte/_4byte/_1byte (rte_hash_crc.h): the CPU's
 * CRC instructions when it has them (SSE4.2, ARMv8 CRC), a table otherwise. They do no
 * inversion of their own: init ~0 and a final ~ make the standard CRC32C that the format
 * stores, so raw keys from earlier builds and other processes keep their value. Not
 * rte_hash_crc itself: it loads 8 bytes through a pointer cast, undefined (UBSan flags it) on a
 * blob at an odd address, which a blob from another process may be; and copying the blob to an
 * aligned block first made decode_raw_key 45 ns instead of 31 (bench-mr-core BM_RawKeyDecode,
 * medians of 9 alternating runs). Each word is read with memcpy instead, as before. Hot path: no
 * allocation, no call out of line.
 */
uint32_t crc32c(const uint8_t *p, size_t len) noexcept
{
	uint32_t c = 0xffffffffu;
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t w;
		std::memcpy(&w, p, sizeof(w));
		c = rte_hash_crc_8byte(w, c);
	}
	if (len >= 4) {
		uint32_t w;
		std::memcpy(&w, p, sizeof(w));
		c = rte_hash_crc_4byte(w, c);
		p += 4;
		len -= 4;
	}
	for (; len != 0; ++p, --len)
		c = rte_hash_crc_1byte(*p, c);
	return ~c;
}

int encode_raw_key(const RawKey &k, uint8_t *buf, size_t *size) noexcept
{
	if (!key_valid(k))
		return -EINVAL;
	if (*size < kRawKeySize) {
		*size = kRawKeySize;
		return -ENOSPC;
	}
	uint8_t b[kRawKeySize] = {};
	put_le<uint32_t>(b + kOffMagic, kRawKeyMagic);
	put_le<uint16_t>(b + kOffVersion, kRawKeyVersion);
	put_le<uint16_t>(b + kOffSize, kRawKeySize);
	put_le<uint64_t>(b + kOffDevice, k.device_id);
	put_le<uint64_t>(b + kOffBase, k.base_addr);
	put_le<uint64_t>(b + kOffLength, k.length);
	put_le<uint32_t>(b + kOffMkey, k.mkey);
	put_le<uint32_t>(b + kOffPd, k.pd);
	b[kOffAccess] = k.access;
	put_le<uint32_t>(b + kOffCrc, crc32c(b, kOffCrc));
	std::memcpy(buf, b, kRawKeySize);
	*size = kRawKeySize;
	return 0;
}

int decode_raw_key(const uint8_t *buf, size_t size, uint64_t expected_device, RawKey *out) noexcept
{
	if (!buf || size != kRawKeySize)
		return -EINVAL;
	if (get_le<uint32_t>(buf + kOffMagic) != kRawKeyMagic ||
	    get_le<uint16_t>(buf + kOffVersion) != kRawKeyVersion ||
	    get_le<uint16_t>(buf + kOffSize) != kRawKeySize)
		return -EINVAL;
	if (get_le<uint32_t>(buf + kOffCrc) != crc32c(buf, kOffCrc))
		return -EINVAL;
	for (size_t i = kOffReserved; i < kOffCrc; ++i)
		if (buf[i])
			return -EINVAL;
	RawKey k;
	k.device_id = get_le<uint64_t>(buf + kOffDevice);
	k.base_addr = get_le<uint64_t>(buf + kOffBase);
	k.length = get_le<uint64_t>(buf + kOffLength);
	k.mkey = get_le<uint32_t>(buf + kOffMkey);
	k.pd = get_le<uint32_t>(buf + kOffPd);
	k.access = buf[kOffAccess];
	/* A checksum only proves the bytes are what the sender wrote: the sender may be wrong
	 * or hostile, so the fields are checked on their own too. */
	if (!key_valid(k))
		return -EINVAL;
	if (expected_device != kAnyDevice && k.device_id != expected_device)
		return -EXDEV;
	*out = k;
	return 0;
}

} // namespace nicmr::mr
