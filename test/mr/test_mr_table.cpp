/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <gtest/gtest.h>

#include "mr_access.h"
#include "mr_table.h"

using namespace nicmr::mr;

namespace {

constexpr uint32_t kN = 64;
constexpr uint32_t kKey = make_mkey(7, 0x3c);
constexpr uint64_t kStart = 0x7f0000001000;
constexpr uint64_t kLen = 0x10000;
constexpr uint64_t kIova = 0x200000001000;
constexpr uint32_t kPd = 0x42;

class MrTable : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(ShadowTable::create(kN, &t_), 0);
		EntryFields f;
		f.mkey = kKey;
		f.state = EntryState::live;
		f.access = kAccessLocalRead | kAccessRemoteRead;
		f.pd = kPd;
		f.start = kStart;
		f.len = kLen;
		f.iova = kIova;
		t_->publish(mkey_index(kKey), f);
	}
	int look(uint32_t mkey, uint64_t addr, uint64_t len, uint8_t access = kAccessRemoteRead,
		 uint32_t pd = kPd)
	{
		return t_->lookup({mkey, addr, len, access, pd}, &r_);
	}
	std::unique_ptr<ShadowTable> t_;
	LookupResult r_{};
};

} // namespace

TEST(MrTableLayout, EntryIsOneCacheLine)
{
	EXPECT_EQ(sizeof(Entry), 64u);
	EXPECT_EQ(alignof(Entry), 64u);
}

TEST(MrTableLayout, CreateRejectsSizeOutOfRange)
{
	std::unique_ptr<ShadowTable> t;
	EXPECT_EQ(ShadowTable::create(1, &t), -EINVAL);
	EXPECT_EQ(ShadowTable::create(kMaxIndexCount + 1, &t), -EINVAL);
	EXPECT_EQ(t, nullptr);
}

TEST_F(MrTable, LiveKeyTranslatesItsWholeRange)
{
	ASSERT_EQ(look(kKey, kStart, kLen), 0);
	EXPECT_EQ(r_.iova, kIova);
	ASSERT_EQ(look(kKey, kStart + 0x123, 8), 0);
	EXPECT_EQ(r_.iova, kIova + 0x123);
	ASSERT_EQ(look(kKey, kStart + kLen - 1, 1), 0);
	EXPECT_EQ(r_.iova, kIova + kLen - 1);
	EXPECT_EQ(r_.flags, 0);
}

TEST_F(MrTable, ZeroLengthIsEinval)
{
	EXPECT_EQ(look(kKey, kStart, 0), -EINVAL);
}

TEST_F(MrTable, WrappingRangeIsEinval)
{
	EXPECT_EQ(look(kKey, UINT64_MAX, 2), -EINVAL);
	EXPECT_EQ(look(kKey, kStart, UINT64_MAX), -EINVAL);
}

TEST_F(MrTable, IndexZeroOrBeyondTableIsEnokey)
{
	EXPECT_EQ(look(make_mkey(0, 0x3c), kStart, 1), -ENOKEY);
	EXPECT_EQ(look(make_mkey(kN, 0x3c), kStart, 1), -ENOKEY);
	EXPECT_EQ(look(UINT32_MAX, kStart, 1), -ENOKEY);
}

TEST_F(MrTable, StaleVariantIsEnokey)
{
	EXPECT_EQ(look(make_mkey(7, 0x3b), kStart, 1), -ENOKEY);
	EXPECT_EQ(look(make_mkey(7, 0x3d), kStart, 1), -ENOKEY);
}

TEST_F(MrTable, FreeEntryIsEnokeyEvenForKeyZeroVariant)
{
	EXPECT_EQ(look(make_mkey(8, 0), kStart, 1), -ENOKEY) << "never written";
	t_->invalidate(mkey_index(kKey));
	EXPECT_EQ(look(kKey, kStart, 1), -ENOKEY);
	EXPECT_EQ(look(make_mkey(7, 0), kStart, 1), -ENOKEY);
}

TEST_F(MrTable, EntryBeingRewrittenIsEagain)
{
	Entry &e = t_->entry(mkey_index(kKey));
	e.seq.fetch_add(1);
	EXPECT_EQ(look(kKey, kStart, 1), -EAGAIN);
	e.seq.fetch_add(1);
	EXPECT_EQ(look(kKey, kStart, 1), 0);
}

TEST_F(MrTable, DisabledEntryIsEkeyrevoked)
{
	EntryFields f = t_->read_owned(mkey_index(kKey));
	f.state = EntryState::disabled;
	t_->publish(mkey_index(kKey), f);
	EXPECT_EQ(look(kKey, kStart, 1), -EKEYREVOKED);
}

TEST_F(MrTable, OtherPdIsEpermUnlessAnyPd)
{
	EXPECT_EQ(look(kKey, kStart, 1, kAccessRemoteRead, kPd + 1), -EPERM);
	EXPECT_EQ(look(kKey, kStart, 1, kAccessRemoteRead, kAnyPd), 0);
}

TEST_F(MrTable, MissingAccessBitIsEacces)
{
	EXPECT_EQ(look(kKey, kStart, 1, kAccessRemoteWrite), -EACCES);
	EXPECT_EQ(look(kKey, kStart, 1, kAccessLocalWrite), -EACCES);
	EXPECT_EQ(look(kKey, kStart, 1, kAccessRemoteRead | kAccessRemoteAtomic), -EACCES);
	EXPECT_EQ(look(kKey, kStart, 1, kAccessLocalRead | kAccessRemoteRead), 0);
	EXPECT_EQ(look(kKey, kStart, 1, 0), 0);
}

TEST_F(MrTable, OutsideRegionIsErange)
{
	EXPECT_EQ(look(kKey, kStart - 1, 1), -ERANGE);
	EXPECT_EQ(look(kKey, kStart - 1, 2), -ERANGE);
	EXPECT_EQ(look(kKey, kStart + kLen, 1), -ERANGE);
	EXPECT_EQ(look(kKey, kStart + kLen - 1, 2), -ERANGE);
	EXPECT_EQ(look(kKey, kStart, kLen + 1), -ERANGE);
	EXPECT_EQ(look(kKey, 0, 1), -ERANGE);
}

TEST_F(MrTable, ChecksRunInDeviceOrder)
{
	/* Stale key with every other check failing too: the key check wins. */
	EXPECT_EQ(look(kKey ^ 1, 0, 1, kAccessRemoteWrite, kPd + 1), -ENOKEY);
	/* PD before access before range. */
	EXPECT_EQ(look(kKey, 0, 1, kAccessRemoteWrite, kPd + 1), -EPERM);
	EXPECT_EQ(look(kKey, 0, 1, kAccessRemoteWrite), -EACCES);
}

TEST_F(MrTable, RegionEndingJustBelowTwoToThe64IsUsableToItsLastByte)
{
	/* "No wrap" means start + len fits in 64 bits: the last usable byte is 2^64 - 2. */
	EntryFields f = t_->read_owned(mkey_index(kKey));
	f.start = UINT64_MAX - 0x1000;
	f.len = 0x1000;
	t_->publish(mkey_index(kKey), f);
	EXPECT_EQ(look(kKey, UINT64_MAX - 1, 1), 0);
	EXPECT_EQ(r_.iova, kIova + 0xfff);
	EXPECT_EQ(look(kKey, UINT64_MAX - 0x1000, 0x1000), 0);
	EXPECT_EQ(look(kKey, UINT64_MAX, 1), -EINVAL) << "addr + len wraps to 0";
}

TEST_F(MrTable, PoolLookupEntryReturnsOffsetAndHandle)
{
	EntryFields f = t_->read_owned(mkey_index(kKey));
	f.flags = kEntryPoolLookup;
	f.iova = 0xabc; /* handle */
	t_->publish(mkey_index(kKey), f);
	ASSERT_EQ(look(kKey, kStart + 0x40, 8), 0);
	EXPECT_EQ(r_.iova, 0x40u);
	EXPECT_EQ(r_.handle, 0xabcu);
	EXPECT_EQ(r_.flags, kEntryPoolLookup);
}

TEST_F(MrTable, PublishLeavesSequenceEvenAndAdvanced)
{
	Entry &e = t_->entry(mkey_index(kKey));
	uint32_t s = e.seq.load();
	EXPECT_EQ(s % 2, 0u);
	t_->invalidate(mkey_index(kKey));
	EXPECT_EQ(e.seq.load(), s + 2);
}

TEST_F(MrTable, SnapshotCopiesALiveEntry)
{
	EntryFields f;
	ASSERT_EQ(t_->snapshot(kKey, &f), 0);
	EXPECT_EQ(f.start, kStart);
	EXPECT_EQ(f.len, kLen);
	EXPECT_EQ(f.pd, kPd);
	EXPECT_EQ(t_->snapshot(kKey ^ 1, &f), -ENOKEY);
	EXPECT_EQ(t_->snapshot(make_mkey(kN, 0), &f), -ENOKEY);
	t_->entry(mkey_index(kKey)).seq.fetch_add(1);
	EXPECT_EQ(t_->snapshot(kKey, &f), -EAGAIN);
}
