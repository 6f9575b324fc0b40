/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <gtest/gtest.h>

#include "mr_access.h"

using namespace nicmr::mr;

namespace {

struct FiCase {
	uint64_t fi;
	uint8_t bits;
};

const FiCase kFiTable[] = {
	{0, 0},
	{kFiSend, kAccessLocalRead},
	{kFiWrite, kAccessLocalRead},
	{kFiRecv, kAccessLocalWrite},
	{kFiRead, kAccessLocalWrite},
	{kFiRemoteRead, kAccessRemoteRead},
	{kFiRemoteWrite, kAccessRemoteWrite | kAccessRemoteAtomic | kAccessLocalWrite},
	{kFiCollective | kFiSend, kAccessLocalRead},
	{kFiSend | kFiRecv, kAccessLocalRead | kAccessLocalWrite},
	{kFiSend | kFiRecv | kFiRead | kFiWrite | kFiRemoteRead | kFiRemoteWrite,
	 kAccessLocalRead | kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite |
		 kAccessRemoteAtomic},
};

struct IbvCase {
	unsigned ibv;
	int rc;
	uint8_t bits;
};

const IbvCase kIbvTable[] = {
	{0, 0, kAccessLocalRead},
	{kIbvLocalWrite, 0, kAccessLocalRead | kAccessLocalWrite},
	{kIbvRemoteRead, 0, kAccessLocalRead | kAccessRemoteRead},
	{kIbvRemoteWrite, -EINVAL, 0},
	{kIbvRemoteAtomic, -EINVAL, 0},
	{kIbvRemoteWrite | kIbvRemoteAtomic | kIbvRemoteRead, -EINVAL, 0},
	{kIbvLocalWrite | kIbvRemoteWrite, 0,
	 kAccessLocalRead | kAccessLocalWrite | kAccessRemoteWrite},
	{kIbvLocalWrite | kIbvRemoteAtomic, 0,
	 kAccessLocalRead | kAccessLocalWrite | kAccessRemoteAtomic},
	{kIbvMwBind, 0, kAccessLocalRead | kAccessMwBind},
	{kIbvLocalWrite | kIbvRemoteWrite | kIbvRemoteRead | kIbvRemoteAtomic | kIbvMwBind, 0,
	 kAccessAll},
};

} // namespace

TEST(MrAccess, FiFlagsMapToMkeyBitsAsTabled)
{
	for (const auto &c : kFiTable) {
		uint8_t bits = 0xff;
		ASSERT_EQ(access_from_fi(c.fi, &bits), 0) << std::hex << c.fi;
		EXPECT_EQ(bits, c.bits) << std::hex << c.fi;
		EXPECT_TRUE(access_valid(bits));
	}
}

TEST(MrAccess, FiZeroAccessGrantsNothing)
{
	uint8_t bits = 0xff;
	ASSERT_EQ(access_from_fi(0, &bits), 0);
	EXPECT_EQ(bits, 0);
}

TEST(MrAccess, FiUnknownBitIsEinval)
{
	for (unsigned b = 0; b < 64; ++b) {
		uint64_t flag = 1ull << b;
		bool known = flag == kFiCollective || flag == kFiRead || flag == kFiWrite ||
			     flag == kFiRecv || flag == kFiSend || flag == kFiRemoteRead ||
			     flag == kFiRemoteWrite;
		uint8_t bits = 0x5a;
		int rc = access_from_fi(flag | kFiSend, &bits);
		EXPECT_EQ(rc, known ? 0 : -EINVAL) << "bit " << b;
		if (!known) {
			EXPECT_EQ(bits, 0x5a) << "output untouched on error";
		}
	}
}

TEST(MrAccess, IbvFlagsMapToMkeyBitsAsTabled)
{
	for (const auto &c : kIbvTable) {
		uint8_t bits = 0x5a;
		EXPECT_EQ(access_from_ibv(c.ibv, &bits), c.rc) << std::hex << c.ibv;
		EXPECT_EQ(bits, c.rc ? 0x5a : c.bits) << std::hex << c.ibv;
	}
}

TEST(MrAccess, IbvUnknownBitIsEinval)
{
	for (unsigned b = 5; b < 32; ++b) {
		uint8_t bits;
		EXPECT_EQ(access_from_ibv(kIbvLocalWrite | 1u << b, &bits), -EINVAL) << "bit " << b;
	}
}

TEST(MrAccess, ValidityRequiresLocalWriteWithRemoteWriteOrAtomic)
{
	EXPECT_FALSE(access_valid(kAccessRemoteWrite));
	EXPECT_FALSE(access_valid(kAccessRemoteAtomic | kAccessLocalRead));
	EXPECT_TRUE(access_valid(kAccessRemoteWrite | kAccessLocalWrite));
	EXPECT_TRUE(access_valid(0));
	EXPECT_FALSE(access_valid(0x40));
	EXPECT_FALSE(access_valid(0x80));
}

TEST(MrAccess, CoversMeansEveryNeededBitGranted)
{
	EXPECT_TRUE(access_covers(kAccessAll, kAccessRemoteRead));
	EXPECT_TRUE(access_covers(kAccessLocalRead, 0));
	EXPECT_FALSE(access_covers(kAccessLocalRead, kAccessLocalRead | kAccessLocalWrite));
}
