/* SPDX-License-Identifier: BSD-3-Clause */
/* The native C API: memory regions, fast and slow paths, keys, sub-MRs, and what the device
 * holds after each call. */
#include <sys/mman.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "test_api_util.h"

using namespace nicmr::test;
using nicmr::mlx5::MkeyQuery;

class ApiMr : public ApiBoth {};
INSTANTIATE_TEST_SUITE_P(Programmer, ApiMr, NICMR_API_BOTH_SPECS("1024"));

TEST_P(ApiMr, FastPathProgramsTheDeviceAndDeregFreesIt)
{
	auto before = stats(dev);
	nicmr_mr *mr = nullptr;
	char *a = base + 4096 + 24;
	ASSERT_EQ(nicmr_mr_reg(pd, a, 10000,
			       NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_READ |
				       NICMR_ACCESS_REMOTE_WRITE,
			       0, 0, &mr),
		  0);
	EXPECT_EQ(nicmr_mr_in_pool(mr), 1);
	EXPECT_EQ(nicmr_mr_addr(mr), a);
	EXPECT_EQ(nicmr_mr_len(mr), 10000u);
	auto during = stats(dev);
	EXPECT_EQ(during.mrs, before.mrs + 1);
	EXPECT_EQ(during.slow_mappings, 0u);
	EXPECT_EQ(during.iommu_mappings, before.iommu_mappings) << "fast path maps nothing";
	/* UMR fills a pre-created free mkey; the command programmer creates one. */
	EXPECT_EQ(during.dev_mkeys, before.dev_mkeys + (umr() ? 0 : 1));

	const uint32_t k = nicmr_mr_key(mr);
	MkeyQuery q;
	ASSERT_EQ(query(k, &q), 0);
	EXPECT_FALSE(q.ctx.free);
	EXPECT_EQ(q.ctx.start_addr, reinterpret_cast<uint64_t>(a));
	EXPECT_EQ(q.ctx.len, 10000u);
	EXPECT_EQ(q.ctx.variant, k & 0xff);
	EXPECT_EQ(q.ctx.pd, nicmr_pd_num(pd));
	EXPECT_TRUE(q.ctx.lr);
	EXPECT_TRUE(q.ctx.lw);
	EXPECT_TRUE(q.ctx.rr);
	EXPECT_TRUE(q.ctx.rw);
	EXPECT_FALSE(q.ctx.a);
	EXPECT_GT(q.ctx.log_page_size, 12u) << "a 4 MiB pool is placed for large translations";

	ASSERT_EQ(nicmr_mr_dereg(mr), 0);
	ASSERT_EQ(query(k, &q), 0);
	EXPECT_TRUE(q.ctx.free) << "after dereg the device holds the index free";
	EXPECT_EQ(stats(dev).mrs, before.mrs);
	EXPECT_EQ(nicmr_mr_dereg(nullptr), -EINVAL);
}

TEST_P(ApiMr, SlowPathMapsPinsAndUnmapsMemoryOutsidePools)
{
	Anon m(5 * 4096);
	auto before = stats(dev);
	nicmr_mr *mr = nullptr;
	char *a = m.get() + 100;
	ASSERT_EQ(nicmr_mr_reg(pd, a, 3 * 4096, NICMR_ACCESS_RECV, 0, 0, &mr), 0);
	EXPECT_EQ(nicmr_mr_in_pool(mr), 0);
	auto during = stats(dev);
	EXPECT_EQ(during.slow_mappings, before.slow_mappings + 1);
	EXPECT_EQ(during.iommu_mappings, before.iommu_mappings + 1);
	EXPECT_EQ(during.pinned_pages, before.pinned_pages + 4) << "100 + 12288 spans 4 pages";
	uint64_t iova = 0;
	ASSERT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(mr), reinterpret_cast<uint64_t>(a), 8,
				   NICMR_ACCESS_RECV, &iova),
		  0);
	EXPECT_EQ(iova % 4096, reinterpret_cast<uint64_t>(a) % 4096);
	MkeyQuery q;
	ASSERT_EQ(query(nicmr_mr_key(mr), &q), 0);
	EXPECT_EQ(q.ctx.log_page_size, 14u) << "16 KiB mapped at a 16 KiB-congruent IOVA";
	EXPECT_TRUE(q.ctx.lw);
	EXPECT_FALSE(q.ctx.rr);
	ASSERT_EQ(nicmr_mr_dereg(mr), 0);
	auto after = stats(dev);
	EXPECT_EQ(after.slow_mappings, before.slow_mappings);
	EXPECT_EQ(after.iommu_mappings, before.iommu_mappings);
	EXPECT_EQ(after.pinned_pages, before.pinned_pages);
}

TEST_P(ApiMr, LargeSlowPathRegionUsesLargeTranslationPages)
{
	Anon m(size_t{8} << 20);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get() + 4096, (size_t{6} << 20) + 5, NICMR_ACCESS_SEND, 0, 0,
			       &mr),
		  0);
	MkeyQuery q;
	ASSERT_EQ(query(nicmr_mr_key(mr), &q), 0);
	EXPECT_EQ(q.ctx.log_page_size, 21u);
	EXPECT_EQ(q.ctx.len, (size_t{6} << 20) + 5);
	EXPECT_EQ(stats(dev).pinned_pages, ((size_t{6} << 20) + 4096) / 4096);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(stats(dev).pinned_pages, 0u);
}

TEST_P(ApiMr, SlowPathRefusesUnmappedMemoryWithEfault)
{
	Anon m(3 * 4096);
	ASSERT_EQ(munmap(m.get() + 4096, 4096), 0); /* a hole in the middle */
	auto before = stats(dev);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 3 * 4096, NICMR_ACCESS_SEND, 0, 0, &mr), -EFAULT);
	EXPECT_EQ(mr, nullptr);
	expect_same(stats(dev), before);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4096, NICMR_ACCESS_SEND, 0, 0, &mr), 0);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_P(ApiMr, SlowPathRefusesWritableAccessToReadOnlyMemory)
{
	Anon m(2 * 4096);
	ASSERT_EQ(mprotect(m.get(), 2 * 4096, PROT_READ), 0);
	auto before = stats(dev);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 8192, NICMR_ACCESS_RECV, 0, 0, &mr), -EFAULT);
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 8192,
			       NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_WRITE, 0, 0, &mr),
		  -EFAULT);
	expect_same(stats(dev), before);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 8192, NICMR_ACCESS_SEND | NICMR_ACCESS_REMOTE_READ, 0,
			       0, &mr),
		  0)
		<< "read-only memory may be read by the device";
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	ASSERT_EQ(mprotect(m.get(), 2 * 4096, PROT_NONE), 0);
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 8192, NICMR_ACCESS_SEND, 0, 0, &mr), -EFAULT);
	ASSERT_EQ(mprotect(m.get(), 2 * 4096, PROT_READ | PROT_WRITE), 0);
}

TEST_P(ApiMr, OverlappingSlowPathMrsShareLockedPagesAndMapSeparately)
{
	Anon m(4 * 4096);
	auto before = stats(dev);
	nicmr_mr *x = nullptr, *y = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 2 * 4096, NICMR_ACCESS_SEND, 0, 0, &x), 0);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get() + 4096 + 8, 2 * 4096, NICMR_ACCESS_SEND, 0, 0, &y), 0);
	auto both = stats(dev);
	EXPECT_EQ(both.slow_mappings, before.slow_mappings + 2);
	EXPECT_EQ(both.iommu_mappings, before.iommu_mappings + 2);
	EXPECT_EQ(both.pinned_pages, before.pinned_pages + 4) << "pages 0..3, page 1 shared";
	ASSERT_EQ(nicmr_mr_dereg(x), 0);
	EXPECT_EQ(stats(dev).pinned_pages, before.pinned_pages + 3) << "page 1 stays locked";
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(y),
				   reinterpret_cast<uint64_t>(m.get()) + 4096 + 8, 4096,
				   NICMR_ACCESS_SEND, &iova),
		  0);
	ASSERT_EQ(nicmr_mr_dereg(y), 0);
	expect_released(stats(dev), before);
}

TEST_P(ApiMr, ArgumentErrorsLeaveNothingBehind)
{
	Anon m(4096);
	auto before = stats(dev);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(nullptr, base, 64, NICMR_ACCESS_SEND, 0, 0, &mr), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 64, NICMR_ACCESS_SEND, 0, 0, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 0, NICMR_ACCESS_SEND, 0, 0, &mr), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, reinterpret_cast<void *>(UINTPTR_MAX - 10), 64,
			       NICMR_ACCESS_SEND, 0, 0, &mr),
		  -EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 64, 1ull << 20, 0, 0, &mr), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 64, NICMR_ACCESS_SEND, 1ull << 5, 0, &mr), -EOPNOTSUPP);
	/* ibv_reg_mr's rule: remote write or atomic need local write. */
	EXPECT_EQ(nicmr_mr_reg(pd, base, 64, NICMR_ACCESS_REMOTE_ATOMIC, 0, 0, &mr), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 64, NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_MW_BIND, 0, 0,
			       &mr),
		  -EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 64, NICMR_ACCESS_REMOTE_ATOMIC, 0, 0, &mr), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, base + 8, 64, NICMR_ACCESS_SEND, NICMR_MR_ZERO_BASED, 0, &mr),
		  -EINVAL);
	EXPECT_EQ(mr, nullptr);
	expect_same(stats(dev), before);
}

TEST_P(ApiMr, FiVocabularyAndIbvVocabularyGrantWhatTheirPagesSay)
{
	struct Case {
		uint64_t access;
		bool lr, lw, rr, rw, a;
	};
	const Case cases[] = {
		{NICMR_ACCESS_REMOTE_WRITE, false, true, false, true, true}, /* fi: rw + a + lw */
		{NICMR_ACCESS_SEND | NICMR_ACCESS_READ, true, true, false, false, false},
		{0, false, false, false, false, false},			     /* fi: nothing */
		{NICMR_ACCESS_LOCAL_WRITE, true, true, false, false, false}, /* ibv: lr always */
		{NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_ATOMIC, true, true, false, false,
		 true},
		{NICMR_ACCESS_MW_BIND | NICMR_ACCESS_REMOTE_READ, true, false, true, false, false},
	};
	for (const Case &c : cases) {
		nicmr_mr *mr = nullptr;
		ASSERT_EQ(nicmr_mr_reg(pd, base, 4096, c.access, 0, 0, &mr), 0) << c.access;
		MkeyQuery q;
		ASSERT_EQ(query(nicmr_mr_key(mr), &q), 0);
		EXPECT_EQ(q.ctx.lr, c.lr) << c.access;
		EXPECT_EQ(q.ctx.lw, c.lw) << c.access;
		EXPECT_EQ(q.ctx.rr, c.rr) << c.access;
		EXPECT_EQ(q.ctx.rw, c.rw) << c.access;
		EXPECT_EQ(q.ctx.a, c.a) << c.access;
		EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	}
}

TEST_P(ApiMr, RequestedKeysDuplicatesAndOutOfRange)
{
	const uint64_t want = (42u << 8) | 0x11;
	nicmr_mr *mr = nullptr, *dup = nullptr;
	nicmr_device_attr a{};
	ASSERT_EQ(nicmr_device_query(dev, &a), 0);
	EXPECT_EQ(a.requested_keys, by_name() ? 1u : 0u);
	if (!by_name()) {
		/* A stock device chooses every mkey index: no requested key, on either path, and
		 * nothing is taken. */
		auto before = stats(dev);
		Anon m(8192);
		EXPECT_EQ(nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY,
				       want, &mr),
			  -EOPNOTSUPP);
		EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 8192, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY,
				       want, &mr),
			  -EOPNOTSUPP);
		EXPECT_EQ(mr, nullptr);
		expect_same(stats(dev), before);
		return;
	}
	ASSERT_EQ(
		nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY, want, &mr),
		0);
	EXPECT_EQ(nicmr_mr_key(mr), want);
	MkeyQuery q;
	ASSERT_EQ(query(nicmr_mr_key(mr), &q), 0);
	EXPECT_EQ(q.ctx.variant, 0x11u);

	Anon m(8192);
	auto before = stats(dev);
	/* Same key again, on both paths: the slow path's mapping is undone too. */
	EXPECT_EQ(
		nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY, want, &dup),
		-EEXIST);
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 8192, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY, want,
			       &dup),
		  -EEXIST);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY,
			       1ull << 32, &dup),
		  -EKEYREJECTED);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY,
			       uint64_t{1024} << 8, &dup),
		  -EKEYREJECTED)
		<< "index 1024 is outside emu:mkeys=1024";
	EXPECT_EQ(
		nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY, 0x05, &dup),
		-EKEYREJECTED)
		<< "index 0 is never a key";
	EXPECT_EQ(dup, nullptr);
	expect_same(stats(dev), before);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_P(ApiMr, KeyExhaustionIsEnospcAndLeavesNothing)
{
	nicmr_device *small = nullptr;
	const std::string spec =
		std::string("emu:mkeys=16") + (umr() ? "" : ",programmer=cmd,mkey_by_name=1");
	ASSERT_EQ(nicmr_device_open(spec.c_str(), &small), 0);
	nicmr_pd *p = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(small, &p), 0);
	Anon m(4096);
	std::vector<nicmr_mr *> mrs;
	int rc = 0;
	while (rc == 0 && mrs.size() < 100) {
		nicmr_mr *mr = nullptr;
		rc = nicmr_mr_reg(p, m.get(), 64, NICMR_ACCESS_SEND, 0, 0, &mr);
		if (rc == 0)
			mrs.push_back(mr);
	}
	EXPECT_EQ(rc, -ENOSPC);
	/* Indices 1..15; with UMR the on-demand mkey cache keeps its reserve of them, at most
	 * half (doc/odp.md, "Indices"); the command programmer has no cache. */
	nicmr_device_attr at{};
	ASSERT_EQ(nicmr_device_query(small, &at), 0);
	EXPECT_EQ(at.mkey_pool_max, umr() ? 15u - 7 : 15u);
	EXPECT_EQ(mrs.size(), at.mkey_pool_max);
	auto full = stats(small);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(p, m.get(), 64, NICMR_ACCESS_SEND, 0, 0, &mr), -ENOSPC);
	expect_same(stats(small), full);
	for (nicmr_mr *x : mrs)
		EXPECT_EQ(nicmr_mr_dereg(x), 0);
	EXPECT_EQ(stats(small).pinned_pages, 0u);
	EXPECT_EQ(nicmr_pd_free(p), 0);
	EXPECT_EQ(nicmr_device_close(small), 0);
}

TEST_P(ApiMr, ZeroBasedRegionsAreAddressedFromZero)
{
	nicmr_mr *mr = nullptr;
	char *a = base + 3 * 4096;
	ASSERT_EQ(nicmr_mr_reg(pd, a, 8192, NICMR_ACCESS_REMOTE_READ, NICMR_MR_ZERO_BASED, 0, &mr),
		  0);
	uint64_t iova0 = 0, iova = 0;
	ASSERT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(mr), 0, 8, NICMR_ACCESS_REMOTE_READ, &iova0),
		  0);
	const nicmr::mem::PoolEntry *e = dev->space->lookup(a, 1);
	ASSERT_NE(e, nullptr);
	EXPECT_EQ(iova0, e->iova + (reinterpret_cast<uintptr_t>(a) - e->va));
	ASSERT_EQ(
		nicmr_key_lookup(dev, nicmr_mr_key(mr), 8000, 192, NICMR_ACCESS_REMOTE_READ, &iova),
		0);
	EXPECT_EQ(iova, iova0 + 8000);
	EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(mr), reinterpret_cast<uint64_t>(a), 8,
				   NICMR_ACCESS_REMOTE_READ, &iova),
		  -ERANGE);
	MkeyQuery q;
	ASSERT_EQ(query(nicmr_mr_key(mr), &q), 0);
	EXPECT_EQ(q.ctx.start_addr, 0u);
	EXPECT_EQ(q.ctx.len, 8192u);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_P(ApiMr, SubMrsLiveInsideTheirBase)
{
	nicmr_mr *b = nullptr, *s = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 16384, NICMR_ACCESS_SEND | NICMR_ACCESS_REMOTE_READ, 0, 0,
			       &b),
		  0);
	auto before = stats(dev);
	EXPECT_EQ(nicmr_mr_reg_sub(b, 4096, 4096, NICMR_ACCESS_REMOTE_WRITE, 0, 0, &s), -EACCES);
	EXPECT_EQ(nicmr_mr_reg_sub(b, 16000, 4096, NICMR_ACCESS_SEND, 0, 0, &s), -ERANGE);
	EXPECT_EQ(nicmr_mr_reg_sub(b, 0, 0, NICMR_ACCESS_SEND, 0, 0, &s), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_sub(b, 0, 64, 1ull << 30, 0, 0, &s), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_sub(b, 0, 64, NICMR_ACCESS_SEND, NICMR_MR_ZERO_BASED, 0, &s),
		  -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mr_reg_sub(nullptr, 0, 64, NICMR_ACCESS_SEND, 0, 0, &s), -EINVAL);
	expect_same(stats(dev), before);

	ASSERT_EQ(nicmr_mr_reg_sub(b, 4096, 4096, NICMR_ACCESS_REMOTE_READ, 0, 0, &s), 0);
	EXPECT_NE(nicmr_mr_key(s), nicmr_mr_key(b));
	EXPECT_EQ(nicmr_mr_addr(s), base + 4096);
	EXPECT_EQ(nicmr_mr_in_pool(s), 1);
	uint64_t iova_b = 0, iova_s = 0;
	const auto va = reinterpret_cast<uint64_t>(base) + 5000;
	ASSERT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(b), va, 8, NICMR_ACCESS_REMOTE_READ, &iova_b),
		  0);
	ASSERT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(s), va, 8, NICMR_ACCESS_REMOTE_READ, &iova_s),
		  0);
	EXPECT_EQ(iova_s, iova_b);
	EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(s), va, 8, NICMR_ACCESS_SEND, &iova_s),
		  -EACCES);
	EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(s), reinterpret_cast<uint64_t>(base), 8,
				   NICMR_ACCESS_REMOTE_READ, &iova_s),
		  -ERANGE);
	MkeyQuery q;
	ASSERT_EQ(query(nicmr_mr_key(s), &q), 0);
	EXPECT_EQ(q.ctx.start_addr, reinterpret_cast<uint64_t>(base) + 4096);
	EXPECT_EQ(q.ctx.len, 4096u);
	EXPECT_TRUE(q.ctx.rr);
	EXPECT_FALSE(q.ctx.lr);

	EXPECT_EQ(nicmr_mr_dereg(b), -EBUSY);
	EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(b), va, 8, NICMR_ACCESS_REMOTE_READ, &iova_b),
		  0)
		<< "a refused dereg leaves the base working";
	EXPECT_EQ(nicmr_mr_dereg(s), 0);
	EXPECT_EQ(nicmr_mr_dereg(b), 0);
}

TEST_P(ApiMr, SubMrOfSlowPathRegion)
{
	Anon m(3 * 4096);
	nicmr_mr *b = nullptr, *s = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 3 * 4096, NICMR_ACCESS_SEND, 0, 0, &b), 0);
	ASSERT_EQ(nicmr_mr_reg_sub(b, 100, 5000, NICMR_ACCESS_SEND, 0, 0, &s), 0);
	EXPECT_EQ(nicmr_mr_in_pool(s), 0);
	uint64_t i1 = 0, i2 = 0;
	const auto va = reinterpret_cast<uint64_t>(m.get()) + 200;
	ASSERT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(b), va, 8, NICMR_ACCESS_SEND, &i1), 0);
	ASSERT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(s), va, 8, NICMR_ACCESS_SEND, &i2), 0);
	EXPECT_EQ(i1, i2);
	EXPECT_EQ(nicmr_mr_dereg(s), 0);
	EXPECT_EQ(nicmr_mr_dereg(b), 0);
	EXPECT_EQ(stats(dev).slow_mappings, 0u);
}

TEST(ApiMrDevice, DeviceRefusalLeavesNothing)
{
	/* The default device: 65536 keys, so each UMR-programmed mkey holds 64 translations,
	 * and a sub-MR (4 KiB translations) of 1 MiB needs 256. */
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu", &dev), 0);
	ASSERT_EQ(dev->max_translations, 64u);
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	Anon m(size_t{4} << 20);
	nicmr_mr *b = nullptr, *s = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), size_t{4} << 20, NICMR_ACCESS_SEND, 0, 0, &b), 0);
	auto before = stats(dev);
	EXPECT_EQ(nicmr_mr_reg_sub(b, 0, size_t{1} << 20, NICMR_ACCESS_SEND, 0, 0, &s), -E2BIG);
	EXPECT_EQ(s, nullptr);
	expect_same(stats(dev), before);
	ASSERT_EQ(nicmr_mr_reg_sub(b, 0, size_t{64} << 12, NICMR_ACCESS_SEND, 0, 0, &s), 0);
	EXPECT_EQ(nicmr_mr_dereg(s), 0);
	EXPECT_EQ(nicmr_mr_dereg(b), 0);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

TEST(ApiMrConcurrent, LookupsStayCorrectWhileOtherThreadsRegister)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open(kSpec, &dev), 0);
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	Anon m(size_t{1} << 20);
	nicmr_pool *pool = nullptr;
	ASSERT_EQ(nicmr_pool_import(dev, m.get(), m.len(), NICMR_PAGE_4K, &pool), 0);
	nicmr_mr *stable = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4096, NICMR_ACCESS_SEND, 0, 0, &stable), 0);
	const uint32_t key = nicmr_mr_key(stable);
	const auto va = reinterpret_cast<uint64_t>(m.get());
	uint64_t want = 0;
	ASSERT_EQ(nicmr_key_lookup(dev, key, va, 64, NICMR_ACCESS_SEND, &want), 0);

	std::atomic<bool> stop{false};
	std::atomic<int> bad{0};
	std::thread reader([&] {
		if (nicmr_thread_register(dev, 0) != 0) {
			bad++;
			return;
		}
		while (!stop.load(std::memory_order_relaxed)) {
			uint64_t iova = 0;
			if (nicmr_key_lookup(dev, key, va, 64, NICMR_ACCESS_SEND, &iova) != 0 ||
			    iova != want)
				bad++;
			nicmr_thread_quiescent(dev, 0);
		}
		nicmr_thread_unregister(dev, 0);
	});
	std::vector<std::thread> writers;
	for (int t = 0; t < 2; t++)
		writers.emplace_back([&, t] {
			for (int i = 0; i < 200; i++) {
				nicmr_mr *mr = nullptr;
				char *a = m.get() + 8192 * (1 + t) + i;
				if (nicmr_mr_reg(pd, a, 100, NICMR_ACCESS_RECV, 0, 0, &mr) != 0) {
					bad++;
					continue;
				}
				if (nicmr_mr_key(mr) == key || nicmr_mr_dereg(mr) != 0)
					bad++;
			}
		});
	for (auto &w : writers)
		w.join();
	stop = true;
	reader.join();
	EXPECT_EQ(bad.load(), 0);
	EXPECT_EQ(stats(dev).mrs, 1u);
	EXPECT_EQ(nicmr_mr_dereg(stable), 0);
	EXPECT_EQ(nicmr_pool_destroy(pool), 0);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}
