/* SPDX-License-Identifier: BSD-3-Clause */
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <gtest/gtest.h>

#include "mr_access.h"
#include "mr_keys.h"
#include "mr_rawkey.h"

using namespace nicmr::mr;

namespace {

constexpr RawKey kKey{
	0x1122334455667788,
	0x7f0000001000,
	0x200000,
	make_mkey(0x1234, 0x56),
	0xabcdef,
	kAccessLocalRead | kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite};

std::vector<uint8_t> blob(const RawKey &k = kKey)
{
	std::vector<uint8_t> b(kRawKeySize);
	size_t size = b.size();
	EXPECT_EQ(encode_raw_key(k, b.data(), &size), 0);
	return b;
}

/* Rewrites the checksum so that only the field checks can refuse the blob. */
void reseal(std::vector<uint8_t> &b)
{
	uint32_t c = crc32c(b.data(), 60);
	for (int i = 0; i < 4; ++i)
		b[60 + i] = static_cast<uint8_t>(c >> (8 * i));
}

bool same(const RawKey &a, const RawKey &b)
{
	return a.device_id == b.device_id && a.base_addr == b.base_addr && a.length == b.length &&
	       a.mkey == b.mkey && a.pd == b.pd && a.access == b.access;
}

} // namespace

TEST(MrRawKey, Crc32cMatchesTheCastagnoliCheckValue)
{
	const char *s = "123456789";
	EXPECT_EQ(crc32c(reinterpret_cast<const uint8_t *>(s), 9), 0xe3069283u);
}

/* Bit by bit from the definition (reflected polynomial 0x82f63b78, init ~0, final ~): the
 * oracle the library-backed crc32c must match, so stored raw keys keep their checksum. */
uint32_t crc32c_reference(const uint8_t *p, size_t len)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < len; ++i) {
		c ^= p[i];
		for (int b = 0; b < 8; ++b)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
	}
	return ~c;
}

TEST(MrRawKey, Crc32cMatchesTheIscsiTestVectors)
{
	/* RFC 3720 appendix B.4: 32 bytes of zeros, of ones, ascending and descending. */
	std::vector<uint8_t> b(32, 0x00);
	EXPECT_EQ(crc32c(b.data(), b.size()), 0x8a9136aau);
	std::fill(b.begin(), b.end(), 0xff);
	EXPECT_EQ(crc32c(b.data(), b.size()), 0x62a8ab43u);
	for (size_t i = 0; i < 32; ++i)
		b[i] = static_cast<uint8_t>(i);
	EXPECT_EQ(crc32c(b.data(), b.size()), 0x46dd794eu);
	for (size_t i = 0; i < 32; ++i)
		b[i] = static_cast<uint8_t>(31 - i);
	EXPECT_EQ(crc32c(b.data(), b.size()), 0x113fdb5cu);
}

TEST(MrRawKey, Crc32cMatchesTheDefinitionAtEveryLengthAndAlignment)
{
	/* Lengths across the 8/4/2/1-byte tails and the 64-byte blocks, at odd addresses. */
	std::vector<uint8_t> b(200 + 8);
	for (size_t i = 0; i < b.size(); ++i)
		b[i] = static_cast<uint8_t>(i * 131 + 7);
	for (size_t off = 0; off < 8; ++off)
		for (size_t len = 0; len <= 200; ++len)
			ASSERT_EQ(crc32c(b.data() + off, len),
				  crc32c_reference(b.data() + off, len))
				<< "offset " << off << " length " << len;
}

TEST(MrRawKey, StoredChecksumIsTheStandardCrc32cOfTheFirst60Bytes)
{
	/* A blob made by any build decodes in any other: the stored value is the definition's. */
	auto b = blob();
	const uint32_t want = crc32c_reference(b.data(), 60);
	uint32_t got = 0;
	for (int i = 0; i < 4; ++i)
		got |= uint32_t{b[60 + i]} << (8 * i);
	EXPECT_EQ(got, want);
	/* And a blob at an odd address decodes: the checksum does not depend on alignment. */
	std::vector<uint8_t> shifted(kRawKeySize + 1);
	std::memcpy(shifted.data() + 1, b.data(), kRawKeySize);
	RawKey out{};
	EXPECT_EQ(decode_raw_key(shifted.data() + 1, kRawKeySize, kAnyDevice, &out), 0);
	EXPECT_TRUE(same(out, kKey));
}

TEST(MrRawKey, RoundTripsEveryField)
{
	auto b = blob();
	RawKey out{};
	ASSERT_EQ(decode_raw_key(b.data(), b.size(), kKey.device_id, &out), 0);
	EXPECT_TRUE(same(out, kKey));
	ASSERT_EQ(decode_raw_key(b.data(), b.size(), kAnyDevice, &out), 0);
	EXPECT_TRUE(same(out, kKey));
}

TEST(MrRawKey, LayoutIsLittleEndianAtDocumentedOffsets)
{
	auto b = blob();
	EXPECT_EQ(std::memcmp(b.data(), "NMRK", 4), 0);
	EXPECT_EQ(b[4], 1);
	EXPECT_EQ(b[6], 64);
	EXPECT_EQ(b[8], 0x88);
	EXPECT_EQ(b[15], 0x11);
	EXPECT_EQ(b[32], 0x56);
	EXPECT_EQ(b[40], kKey.access);
}

TEST(MrRawKey, TooSmallBufferIsEnospcAndReportsTheSizeNeeded)
{
	uint8_t buf[kRawKeySize];
	std::memset(buf, 0xee, sizeof buf);
	for (size_t have : {size_t{0}, size_t{1}, kRawKeySize - 1}) {
		size_t size = have;
		EXPECT_EQ(encode_raw_key(kKey, buf, &size), -ENOSPC);
		EXPECT_EQ(size, kRawKeySize);
	}
	for (uint8_t byte : buf)
		ASSERT_EQ(byte, 0xee) << "nothing written";
	uint8_t big[kRawKeySize + 16];
	size_t size = sizeof big;
	EXPECT_EQ(encode_raw_key(kKey, big, &size), 0);
	EXPECT_EQ(size, kRawKeySize);
}

TEST(MrRawKey, EncodeRefusesAKeyThatCouldNotDecode)
{
	uint8_t buf[kRawKeySize];
	size_t size = sizeof buf;
	RawKey k = kKey;
	k.length = 0;
	EXPECT_EQ(encode_raw_key(k, buf, &size), -EINVAL);
	k = kKey;
	k.device_id = 0;
	EXPECT_EQ(encode_raw_key(k, buf, &size), -EINVAL);
	k = kKey;
	k.access = kAccessRemoteWrite;
	EXPECT_EQ(encode_raw_key(k, buf, &size), -EINVAL);
}

TEST(MrRawKey, WrongSizeIsEinval)
{
	auto b = blob();
	b.push_back(0);
	RawKey out;
	EXPECT_EQ(decode_raw_key(b.data(), kRawKeySize - 1, kAnyDevice, &out), -EINVAL);
	EXPECT_EQ(decode_raw_key(b.data(), kRawKeySize + 1, kAnyDevice, &out), -EINVAL);
	EXPECT_EQ(decode_raw_key(b.data(), 0, kAnyDevice, &out), -EINVAL);
	EXPECT_EQ(decode_raw_key(nullptr, kRawKeySize, kAnyDevice, &out), -EINVAL);
}

TEST(MrRawKey, EveryFlippedBitIsRefused)
{
	const auto good = blob();
	for (size_t bit = 0; bit < kRawKeySize * 8; ++bit) {
		auto b = good;
		b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
		RawKey out{};
		ASSERT_EQ(decode_raw_key(b.data(), b.size(), kAnyDevice, &out), -EINVAL)
			<< "bit " << bit;
	}
}

TEST(MrRawKey, EveryReplacedByteIsRefused)
{
	const auto good = blob();
	for (size_t i = 0; i < kRawKeySize; ++i) {
		for (unsigned v = 0; v < 256; ++v) {
			if (v == good[i])
				continue;
			auto b = good;
			b[i] = static_cast<uint8_t>(v);
			RawKey out;
			ASSERT_EQ(decode_raw_key(b.data(), b.size(), kAnyDevice, &out), -EINVAL)
				<< "byte " << i << " = " << v;
		}
	}
}

TEST(MrRawKey, SealedButMalformedFieldsAreRefused)
{
	struct Case {
		const char *what;
		size_t off;
		uint8_t value;
	};
	const Case cases[] = {
		{"magic", 0, 'X'},
		{"version 0", 4, 0},
		{"version 2", 4, 2},
		{"size field", 6, 63},
		{"reserved", 41, 1},
		{"reserved end", 59, 0x80},
		{"unknown access", 40, 0x40},
		{"rw without lw", 40, kAccessRemoteWrite | kAccessLocalRead},
		{"pd above 24 bits", 39, 1},
	};
	for (const auto &c : cases) {
		auto b = blob();
		b[c.off] = c.value;
		reseal(b);
		RawKey out;
		EXPECT_EQ(decode_raw_key(b.data(), b.size(), kAnyDevice, &out), -EINVAL) << c.what;
	}
	RawKey k = kKey;
	auto put = [](std::vector<uint8_t> &b, size_t off, uint64_t v, size_t n) {
		for (size_t i = 0; i < n; ++i)
			b[off + i] = static_cast<uint8_t>(v >> (8 * i));
		reseal(b);
	};
	RawKey out;
	auto b = blob(k);
	put(b, 24, 0, 8);
	EXPECT_EQ(decode_raw_key(b.data(), b.size(), kAnyDevice, &out), -EINVAL) << "zero length";
	b = blob(k);
	put(b, 16, UINT64_MAX - 0x10, 8);
	EXPECT_EQ(decode_raw_key(b.data(), b.size(), kAnyDevice, &out), -EINVAL) << "wraps";
	b = blob(k);
	put(b, 8, 0, 8);
	EXPECT_EQ(decode_raw_key(b.data(), b.size(), kAnyDevice, &out), -EINVAL) << "device 0";
	b = blob(k);
	put(b, 32, 0x000000ff, 4);
	EXPECT_EQ(decode_raw_key(b.data(), b.size(), kAnyDevice, &out), -EINVAL) << "index 0";
}

TEST(MrRawKey, ForeignDeviceIsExdev)
{
	auto b = blob();
	RawKey out{};
	EXPECT_EQ(decode_raw_key(b.data(), b.size(), kKey.device_id + 1, &out), -EXDEV);
	EXPECT_EQ(out.mkey, 0u) << "nothing returned";
}
