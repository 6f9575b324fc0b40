/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device model's access checks and translations (emu_mlx5_translate.h), driven directly
 * with mkey entries built through the layout table: every check with its exact syndrome, MTT
 * at any page size, PA, KLM with its depth limit.
 */
#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>
#include <sys/mman.h>

#include <memory>
#include <vector>

#include "emu_iommu.h"
#include "emu_mlx5_mkey.h"
#include "emu_mlx5_translate.h"
#include "mlx5_prm.h"

namespace nicmr::emu {
namespace {

namespace prm = nicmr::mlx5::prm;

constexpr uint32_t kPd = 7;
constexpr uint32_t kQpn = 0x42;

struct Key {
	uint32_t access_mode = prm::access_mode::mtt;
	bool lr = true, lw = true, rr = true, rw = true, a = true;
	bool free = false;
	uint32_t variant = 0x5a;
	uint32_t pd = kPd;
	uint32_t qpn = prm::mkc::qpn_any;
	uint64_t start = 0;
	uint64_t len = 0;
	bool length64 = false;
	uint32_t log_page = 12;
	bool pg_access = false;
	std::vector<uint64_t> mtt;
	std::vector<std::array<uint64_t, 3>> klm; /* byte_count, mkey, address */
};

class TranslateTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(EmuIommu::create({}, &mmu_), 0);
		mem_ = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			    0);
		ASSERT_NE(mem_, MAP_FAILED);
		ASSERT_EQ(mmu_->dma_map(mem_, kIova, kLen), 0);
	}
	void TearDown() override
	{
		if (mem_ != MAP_FAILED)
			munmap(mem_, kLen);
	}
	/* Stores k at index and returns its mkey. */
	uint32_t add(uint32_t index, const Key &k)
	{
		MkeyEntry e;
		uint8_t *m = e.mkc.data();
		prm::set_access_mode(m, k.access_mode);
		prm::set(m, prm::mkc::free, k.free);
		prm::set(m, prm::mkc::lr, k.lr);
		prm::set(m, prm::mkc::lw, k.lw);
		prm::set(m, prm::mkc::rr, k.rr);
		prm::set(m, prm::mkc::rw, k.rw);
		prm::set(m, prm::mkc::a, k.a);
		prm::set(m, prm::mkc::mkey_7_0, k.variant);
		prm::set(m, prm::mkc::pd, k.pd);
		prm::set(m, prm::mkc::qpn, k.qpn);
		prm::set(m, prm::mkc::start_addr, k.start);
		prm::set(m, prm::mkc::len, k.len);
		prm::set(m, prm::mkc::length64, k.length64);
		prm::set(m, prm::mkc::log_page_size, k.log_page);
		e.access_mode = k.access_mode;
		e.pg_access = k.pg_access;
		for (uint64_t p : k.mtt) {
			e.translations.resize(e.translations.size() + 8);
			prm::set(e.translations.data() + e.translations.size() - 8,
				 prm::mtt::address, p);
		}
		for (const auto &kl : k.klm) {
			e.translations.resize(e.translations.size() + 16);
			uint8_t *t = e.translations.data() + e.translations.size() - 16;
			prm::set(t, prm::klm::byte_count, kl[0]);
			prm::set(t, prm::klm::mkey, kl[1]);
			prm::set(t, prm::klm::address, kl[2]);
		}
		uint32_t idx = 0;
		EXPECT_EQ(table_.create(index, std::move(e), &idx), 0);
		return idx << 8 | k.variant;
	}
	uint8_t validate(uint32_t key, uint64_t addr, uint64_t len, Access a, uint32_t pd = kPd,
			 uint32_t qpn = kQpn)
	{
		MkeyTable::Hold keys(table_, spill_);
		const DmaSection dma(*mmu_);
		return Translator(keys, dma, pd, qpn).validate(key, addr, len, a);
	}
	uint8_t resolve(uint32_t key, uint64_t addr, uint64_t max, Access a, IovaRun *r)
	{
		MkeyTable::Hold keys(table_, spill_);
		const DmaSection dma(*mmu_);
		return Translator(keys, dma, kPd, kQpn).resolve(key, addr, max, a, r);
	}
	/* A 4 KiB-page MTT key over [va, va + len) mapping page i to kIova + pages[i] * 4K. */
	Key mtt_key(uint64_t va, uint64_t len, const std::vector<uint64_t> &pages)
	{
		Key k;
		k.start = va;
		k.len = len;
		for (uint64_t p : pages)
			k.mtt.push_back(kIova + p * 4096);
		return k;
	}

	static constexpr uint64_t kIova = 0x40000000;
	static constexpr size_t kLen = size_t{1} << 20;
	std::unique_ptr<EmuIommu> mmu_;
	MkeyTable table_{10};
	std::vector<const void *> spill_;
	void *mem_ = MAP_FAILED;
};

TEST_F(TranslateTest, MttPageIndexCountsFromThePageHoldingStartAddr)
{
	/* VA 0x10000800 .. : page 0 is the page containing start_addr. */
	const uint32_t key = add(1, mtt_key(0x10000800, 0x2000, {3, 9, 4}));
	IovaRun r;
	ASSERT_EQ(resolve(key, 0x10000900, 0x10, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, kIova + 3 * 4096 + 0x900);
	ASSERT_EQ(resolve(key, 0x10001010, 0x10, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, kIova + 9 * 4096 + 0x10);
	ASSERT_EQ(resolve(key, 0x10002000, 0x10, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, kIova + 4 * 4096);
}

TEST_F(TranslateTest, ContiguousPagesMergeIntoOneRunAndOthersSplit)
{
	const uint32_t key = add(1, mtt_key(0x20000000, 4 * 4096, {0, 1, 2, 7}));
	IovaRun r;
	ASSERT_EQ(resolve(key, 0x20000000, 4 * 4096, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, kIova);
	EXPECT_EQ(r.len, 3u * 4096);
	ASSERT_EQ(resolve(key, 0x20003000, 4096, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, kIova + 7 * 4096);
	EXPECT_EQ(r.len, 4096u);
}

TEST_F(TranslateTest, OneGigabytePagesTranslateByTheirOffset)
{
	Key k;
	k.start = 0x7f0040000000 + 0x1234;
	k.len = uint64_t{3} << 30;
	k.log_page = 30;
	k.mtt = {uint64_t{5} << 30, uint64_t{9} << 30, uint64_t{2} << 30};
	const uint32_t key = add(1, k);
	IovaRun r;
	ASSERT_EQ(resolve(key, 0x7f0040000000 + 0x1234 + 0x10, 8, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, (uint64_t{5} << 30) + 0x1244);
	ASSERT_EQ(resolve(key, 0x7f0080000000 + 0x99, 8, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, (uint64_t{9} << 30) + 0x99);
}

TEST_F(TranslateTest, ChecksFailWithTheirSyndromesInOrder)
{
	Key k = mtt_key(0x30000000, 4096, {0});
	k.variant = 0x21;
	const uint32_t key = add(1, k);
	const uint8_t prot = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
	const uint8_t remote = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
	EXPECT_EQ(validate(key, 0x30000000, 64, Access::local_read), 0);
	/* 1: no such index. */
	EXPECT_EQ(validate(5 << 8 | 0x21, 0x30000000, 64, Access::local_read), prot);
	EXPECT_EQ(validate(5 << 8 | 0x21, 0x30000000, 64, Access::remote_read), remote);
	/* 2: the variant. */
	EXPECT_EQ(validate((key & ~0xffu) | 0x22, 0x30000000, 64, Access::local_read), prot);
	/* 3: the PD. */
	EXPECT_EQ(validate(key, 0x30000000, 64, Access::local_read, kPd + 1), prot);
	EXPECT_EQ(validate(key, 0x30000000, 64, Access::remote_write, kPd + 1), remote);
	/* 6: bounds, both ends. */
	EXPECT_EQ(validate(key, 0x30000000 - 1, 2, Access::local_read), prot);
	EXPECT_EQ(validate(key, 0x30000000 + 4095, 2, Access::local_read), prot);
	EXPECT_EQ(validate(key, 0x30000000 + 4095, 1, Access::local_read), 0);
	/* Overflow-safe: a length that wraps the address space never passes. */
	EXPECT_EQ(validate(key, 0x30000000 + 8, ~uint64_t{0} - 4, Access::local_read), prot);
}

TEST_F(TranslateTest, FreeKeyAndBoundQpAreRefused)
{
	Key f = mtt_key(0x30000000, 4096, {0});
	f.free = true;
	const uint32_t freekey = add(1, f);
	EXPECT_EQ(validate(freekey, 0x30000000, 8, Access::local_read),
		  MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	Key q = mtt_key(0x30000000, 4096, {0});
	q.qpn = kQpn + 1;
	const uint32_t qkey = add(2, q);
	EXPECT_EQ(validate(qkey, 0x30000000, 8, Access::remote_read),
		  MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_EQ(validate(qkey, 0x30000000, 8, Access::remote_read, kPd, kQpn + 1), 0);
}

TEST_F(TranslateTest, MissingAccessBitsGiveTheOperationsSyndrome)
{
	Key k = mtt_key(0x30000000, 4096, {0});
	k.lr = k.lw = k.rr = k.rw = k.a = false;
	const uint32_t key = add(1, k);
	EXPECT_EQ(validate(key, 0x30000000, 8, Access::local_read),
		  MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	EXPECT_EQ(validate(key, 0x30000000, 8, Access::local_write),
		  MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
	for (Access a : {Access::remote_read, Access::remote_write, Access::remote_atomic})
		EXPECT_EQ(validate(key, 0x30000000, 8, a), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
}

TEST_F(TranslateTest, PageEnablesAreCheckedWithPgAccess)
{
	Key k = mtt_key(0x30000000, 2 * 4096, {0, 1});
	k.pg_access = true;
	k.mtt = {kIova | 1 /* rd only */, (kIova + 4096) | 3};
	const uint32_t key = add(1, k);
	EXPECT_EQ(validate(key, 0x30000000, 8, Access::remote_read), 0);
	EXPECT_EQ(validate(key, 0x30000000, 8, Access::remote_write),
		  MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_EQ(validate(key, 0x30001000, 8, Access::remote_write), 0);
	/* A range across both pages needs wr_en on both. */
	EXPECT_EQ(validate(key, 0x30000ff8, 16, Access::local_write),
		  MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
}

TEST_F(TranslateTest, Length64CoversEverything)
{
	Key k;
	k.access_mode = prm::access_mode::pa;
	k.length64 = true;
	const uint32_t key = add(1, k);
	IovaRun r;
	ASSERT_EQ(resolve(key, kIova + 100, 50, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, kIova + 100);
	EXPECT_EQ(r.len, 50u);
	EXPECT_EQ(validate(key, kIova + 100, 50, Access::local_read), 0);
}

TEST_F(TranslateTest, UnmappedTranslationIsRefusedBeforeAnyByteMoves)
{
	const uint32_t key = add(1, mtt_key(0x30000000, 2 * 4096, {0, 1000}));
	EXPECT_EQ(validate(key, 0x30000000, 4096, Access::local_read), 0);
	EXPECT_EQ(validate(key, 0x30000000, 2 * 4096, Access::local_read),
		  MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

TEST_F(TranslateTest, KlmPartsResolveThroughTheirOwnKeys)
{
	const uint32_t a = add(1, mtt_key(0x1000000, 4096, {2}));
	const uint32_t b = add(2, mtt_key(0x2000000, 4096, {5}));
	Key ind;
	ind.access_mode = prm::access_mode::klm;
	ind.start = 0x9000;
	ind.len = 0x300;
	ind.klm = {{0x100, a, 0x1000000 + 0x80}, {0x200, b, 0x2000000}};
	const uint32_t key = add(3, ind);
	IovaRun r;
	ASSERT_EQ(resolve(key, 0x9010, 0x200, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, kIova + 2 * 4096 + 0x90);
	EXPECT_EQ(r.len, 0xf0u);
	ASSERT_EQ(resolve(key, 0x9100 + 0x20, 0x10, Access::local_read, &r), 0);
	EXPECT_EQ(r.iova, kIova + 5 * 4096 + 0x20);
	EXPECT_EQ(validate(key, 0x9000, 0x300, Access::local_read), 0);
	EXPECT_EQ(validate(key, 0x9000, 0x301, Access::local_read),
		  MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

TEST_F(TranslateTest, KlmDepthIsLimitedToTwoIndirectKeys)
{
	const uint32_t leaf = add(1, mtt_key(0x1000000, 4096, {0}));
	Key l1;
	l1.access_mode = prm::access_mode::klm;
	l1.start = 0;
	l1.len = 0x100;
	l1.klm = {{0x100, leaf, 0x1000000}};
	const uint32_t k1 = add(2, l1);
	Key l2 = l1;
	l2.klm = {{0x100, k1, 0}};
	const uint32_t k2 = add(3, l2);
	Key l3 = l1;
	l3.klm = {{0x100, k2, 0}};
	const uint32_t k3 = add(4, l3);
	EXPECT_EQ(validate(k1, 0, 0x100, Access::local_read), 0);
	EXPECT_EQ(validate(k2, 0, 0x100, Access::local_read), 0);
	EXPECT_EQ(validate(k3, 0, 0x100, Access::local_read), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	EXPECT_EQ(validate(k3, 0, 0x100, Access::remote_read), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
}

TEST_F(TranslateTest, KlmChildKeysAreCheckedToo)
{
	Key bad = mtt_key(0x1000000, 4096, {0});
	bad.pd = kPd + 1;
	const uint32_t child = add(1, bad);
	Key ind;
	ind.access_mode = prm::access_mode::klm;
	ind.len = 0x100;
	ind.klm = {{0x100, child, 0x1000000}};
	const uint32_t key = add(2, ind);
	EXPECT_EQ(validate(key, 0, 0x10, Access::remote_write),
		  MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
}

} // namespace
} // namespace nicmr::emu
