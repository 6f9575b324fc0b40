/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the native MR and pool say of themselves, so that a layer above (the libfabric
 * provider) keeps no copy: nicmr_mr_query, nicmr_mr_addr_of, nicmr_pool_page_size and
 * nicmr_pool_find. Each answer is checked against what the registration was given and, for
 * addresses, against a lookup of the key and an RDMA WRITE through it.
 */
#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "test_api_util.h"

namespace nicmr::test {
namespace {

using ApiQuery = ApiFixture;

nicmr_mr_info info_of(const nicmr_mr *mr)
{
	nicmr_mr_info info;
	std::memset(&info, 0xa5, sizeof(info));
	EXPECT_EQ(nicmr_mr_query(mr, &info), 0);
	return info;
}

TEST_F(ApiQuery, APlainMrIsOneSegmentEnabledAndUnbound)
{
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 8192, kAll, 0, 0, &mr), 0);
	const nicmr_mr_info i = info_of(mr);
	EXPECT_EQ(i.flags, 0u);
	EXPECT_EQ(i.base, nullptr);
	EXPECT_EQ(i.cntr, nullptr);
	EXPECT_EQ(i.segments, 1u);
	EXPECT_EQ(i.enabled, 1);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_F(ApiQuery, ZeroBasedAndSubMrsSayWhatTheyAre)
{
	nicmr_mr *zb = nullptr, *sub = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 65536, kAll, NICMR_MR_ZERO_BASED, 0, &zb), 0);
	ASSERT_EQ(nicmr_mr_reg_sub(zb, 8192, 4096, NICMR_ACCESS_REMOTE_READ, 0, 0, &sub), 0);
	EXPECT_EQ(info_of(zb).flags, uint64_t(NICMR_MR_ZERO_BASED));
	EXPECT_EQ(info_of(zb).base, nullptr);
	const nicmr_mr_info s = info_of(sub);
	EXPECT_EQ(s.base, zb);
	EXPECT_EQ(s.flags, uint64_t(NICMR_MR_ZERO_BASED)) << "zero-based as its base";
	EXPECT_EQ(s.segments, 1u);
	EXPECT_EQ(nicmr_mr_dereg(sub), 0);
	EXPECT_EQ(nicmr_mr_dereg(zb), 0);
}

TEST_F(ApiQuery, RmaEventMrReportsItsBindingAsItChanges)
{
	nicmr_mr *mr = nullptr;
	nicmr_cntr *c = nullptr;
	ASSERT_EQ(nicmr_cntr_alloc(dev, &c), 0);
	ASSERT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, NICMR_MR_RMA_EVENT, 0, &mr), 0);
	nicmr_mr_info i = info_of(mr);
	EXPECT_EQ(i.flags, uint64_t(NICMR_MR_RMA_EVENT));
	EXPECT_EQ(i.enabled, 0) << "created disabled";
	EXPECT_EQ(i.cntr, nullptr);
	ASSERT_EQ(nicmr_mr_bind_cntr(mr, c, NICMR_REMOTE_WRITE), 0);
	EXPECT_EQ(info_of(mr).cntr, c);
	EXPECT_EQ(info_of(mr).enabled, 0);
	ASSERT_EQ(nicmr_mr_enable(mr), 0);
	EXPECT_EQ(info_of(mr).enabled, 1);
	ASSERT_EQ(nicmr_mr_unbind_cntr(mr), 0);
	i = info_of(mr);
	EXPECT_EQ(i.cntr, nullptr);
	EXPECT_EQ(i.enabled, 0) << "unbinding disables";
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	ASSERT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, NICMR_MR_SINGLE_USE, 0, &mr), 0);
	EXPECT_EQ(info_of(mr).flags, uint64_t(NICMR_MR_SINGLE_USE));
	EXPECT_EQ(info_of(mr).enabled, 1);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_cntr_free(c), 0);
}

/* info.access against the lookup itself: a bit is reported exactly when a lookup asking for it
 * passes, over grants under both rule sets (fi_mr(3) and ibv_reg_mr(3)) and a sub-MR. */
TEST_F(ApiQuery, AccessIsWhatALookupOfTheKeyGrants)
{
	nicmr_pd *pd2 = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd2), 0);
	const uint64_t grants[] = {0,
				   NICMR_ACCESS_REMOTE_WRITE,
				   NICMR_ACCESS_SEND | NICMR_ACCESS_REMOTE_READ,
				   NICMR_ACCESS_LOCAL_WRITE,
				   NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_ATOMIC,
				   kAll};
	for (const uint64_t g : grants) {
		SCOPED_TRACE(g);
		nicmr_mr *mr = nullptr;
		ASSERT_EQ(nicmr_mr_reg(pd2, base, 4096, g, 0, 0, &mr), 0);
		const nicmr_mr_info i = info_of(mr);
		EXPECT_EQ(i.pd, pd2);
		for (uint64_t bit = NICMR_ACCESS_SEND; bit <= NICMR_ACCESS_MW_BIND; bit <<= 1) {
			if (bit == NICMR_ACCESS_MW_BIND)
				continue; /* a bind right, not something a lookup asks */
			uint64_t iova = 0;
			const int rc =
				nicmr_key_lookup(dev, nicmr_mr_key(mr), u(base), 8, bit, &iova);
			EXPECT_EQ(rc, (i.access & bit) ? 0 : -EACCES) << "bit " << bit;
		}
		EXPECT_EQ((i.access & NICMR_ACCESS_MW_BIND) != 0, (g & NICMR_ACCESS_MW_BIND) != 0);
		EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	}
	/* REMOTE_WRITE alone (fi_mr(3)) grants the atomics and the NIC's local writes too. */
	nicmr_mr *rw = nullptr, *sub = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 8192, NICMR_ACCESS_REMOTE_WRITE, 0, 0, &rw), 0);
	EXPECT_EQ(info_of(rw).access,
		  uint64_t(NICMR_ACCESS_RECV | NICMR_ACCESS_READ | NICMR_ACCESS_LOCAL_WRITE |
			   NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_REMOTE_ATOMIC));
	ASSERT_EQ(nicmr_mr_reg_sub(rw, 4096, 4096, NICMR_ACCESS_READ, 0, 0, &sub), 0);
	EXPECT_EQ(info_of(sub).access,
		  uint64_t(NICMR_ACCESS_RECV | NICMR_ACCESS_READ | NICMR_ACCESS_LOCAL_WRITE));
	EXPECT_EQ(info_of(sub).pd, pd) << "a sub-MR is in its base's PD";
	EXPECT_EQ(nicmr_mr_dereg(sub), 0);
	EXPECT_EQ(nicmr_mr_dereg(rw), 0);
	EXPECT_EQ(nicmr_pd_free(pd2), 0);
}

TEST_F(ApiQuery, AVectoredRegionIsInPoolsWhenEverySegmentIs)
{
	Anon outside(4096);
	iovec in[2] = {{base, 4096}, {base + 65536, 4096}};
	iovec mixed[2] = {{base, 4096}, {outside.get(), 4096}};
	nicmr_mr *a = nullptr, *b = nullptr;
	ASSERT_EQ(nicmr_mr_regv(pd, in, 2, kAll, 0, 0, &a), 0);
	ASSERT_EQ(nicmr_mr_regv(pd, mixed, 2, kAll, 0, 0, &b), 0);
	EXPECT_EQ(nicmr_mr_in_pool(a), 1);
	EXPECT_EQ(nicmr_mr_in_pool(b), 0) << "one segment was pinned for it";
	EXPECT_EQ(nicmr_mr_dereg(b), 0);
	EXPECT_EQ(nicmr_mr_dereg(a), 0);
}

TEST_F(ApiQuery, NullArgumentsAreEinval)
{
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, 0, 0, &mr), 0);
	nicmr_mr_info info;
	uint64_t a = 0;
	EXPECT_EQ(nicmr_mr_query(nullptr, &info), -EINVAL);
	EXPECT_EQ(nicmr_mr_query(mr, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_addr_of(nullptr, base, 1, &a), -EINVAL);
	EXPECT_EQ(nicmr_mr_addr_of(mr, base, 1, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_pool_page_size(nullptr), 0u);
	EXPECT_EQ(nicmr_pool_find(nullptr, base, 1), nullptr);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_F(ApiQuery, OneRangeTranslatesEveryBufferAsTheKeySpaceSays)
{
	nicmr_mr *va = nullptr, *zb = nullptr, *sub = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 65536, kAll, 0, 0, &va), 0);
	ASSERT_EQ(nicmr_mr_reg(pd, base + 65536, 65536, kAll, NICMR_MR_ZERO_BASED, 0, &zb), 0);
	ASSERT_EQ(nicmr_mr_reg_sub(zb, 8192, 4096, kAll, 0, 0, &sub), 0);
	uint64_t a = 0;
	EXPECT_EQ(nicmr_mr_addr_of(va, base + 100, 10, &a), 0);
	EXPECT_EQ(a, u(base + 100)) << "VA-based: the address itself";
	EXPECT_EQ(nicmr_mr_addr_of(zb, base + 65536 + 100, 10, &a), 0);
	EXPECT_EQ(a, 100u) << "zero-based: the offset";
	EXPECT_EQ(nicmr_mr_addr_of(sub, base + 65536 + 8192 + 5, 0, &a), 0) << "length 0";
	EXPECT_EQ(a, 8192u + 5) << "a sub-MR lies in its base's space";
	/* The key takes what addr_of gives: the lookup translates it to the buffer's IOVA. */
	uint64_t iova = 0, want = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(sub), a, 16, NICMR_ACCESS_REMOTE_WRITE, &iova),
		  0);
	EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(zb), 8192 + 5, 16, NICMR_ACCESS_REMOTE_WRITE,
				   &want),
		  0);
	EXPECT_EQ(iova, want);
	/* A buffer outside the region translates too: the device checks bounds at run time. */
	EXPECT_EQ(nicmr_mr_addr_of(va, base + 65536, 4096, &a), 0);
	EXPECT_EQ(a, u(base + 65536));
	for (nicmr_mr *m : {sub, zb, va})
		EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_F(ApiQuery, VectoredRegionsTranslateInsideOneVirtualRange)
{
	/* Segments: A = base[0, 8K) and B = base[8K, 12K) follow each other (one range), C =
	 * base[64K, 68K) does not. */
	iovec iov[3] = {{base, 8192}, {base + 8192, 4096}, {base + 65536, 4096}};
	for (uint64_t flags : {uint64_t{0}, uint64_t{NICMR_MR_ZERO_BASED}}) {
		SCOPED_TRACE(flags);
		nicmr_mr *mr = nullptr;
		ASSERT_EQ(nicmr_mr_regv(pd, iov, 3, kAll, flags, 0, &mr), 0);
		EXPECT_EQ(info_of(mr).segments, 3u);
		const uint64_t start = flags ? 0 : u(base);
		uint64_t a = 0;
		EXPECT_EQ(nicmr_mr_addr_of(mr, base + 8000, 400, &a), 0) << "across A and B";
		EXPECT_EQ(a, start + 8000);
		EXPECT_EQ(nicmr_mr_addr_of(mr, base + 65536 + 10, 100, &a), 0);
		EXPECT_EQ(a, start + 12288 + 10) << "C follows B in the region";
		uint64_t iova = 0, want = 0;
		ASSERT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(mr), a, 100, NICMR_ACCESS_REMOTE_WRITE,
					   &iova),
			  0);
		ASSERT_EQ(dev->space->translate(base + 65536 + 10, 100, &want), 0);
		EXPECT_EQ(iova, want);
		EXPECT_EQ(nicmr_mr_addr_of(mr, base + 12288 - 10, 20, &a), -EFAULT)
			<< "past the end of the first range";
		EXPECT_EQ(nicmr_mr_addr_of(mr, base + 32768, 1, &a), -EFAULT) << "in no range";
		EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	}
	/* Segments that are one range altogether translate as a one-range region. */
	nicmr_mr *one = nullptr;
	ASSERT_EQ(nicmr_mr_regv(pd, iov, 2, kAll, 0, 0, &one), 0);
	uint64_t a = 0;
	EXPECT_EQ(nicmr_mr_addr_of(one, base + 20000, 8, &a), 0);
	EXPECT_EQ(a, u(base + 20000));
	EXPECT_EQ(nicmr_mr_dereg(one), 0);
}

TEST_F(ApiQuery, IovaListMrsHaveNoVirtualAddresses)
{
	uint64_t iova = 0;
	ASSERT_EQ(dev->space->translate(base, 8192, &iova), 0);
	nicmr_iova_seg seg{iova, 8192};
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg_iova(pd, &seg, 1, kAll, 0, 0, &mr), 0);
	uint64_t a = 0;
	EXPECT_EQ(nicmr_mr_addr_of(mr, base, 8, &a), -EINVAL);
	EXPECT_EQ(info_of(mr).segments, 1u);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_F(ApiQuery, PoolsAreFoundByAddressWithTheirPages)
{
	EXPECT_EQ(nicmr_pool_find(dev, base, 4096), pool);
	EXPECT_EQ(nicmr_pool_find(dev, base + nicmr_pool_len(pool) - 1, 1), pool);
	EXPECT_EQ(nicmr_pool_find(dev, base + nicmr_pool_len(pool) - 1, 2), nullptr)
		<< "straddles the end";
	EXPECT_EQ(nicmr_pool_find(dev, base, 0), nullptr) << "length 0";
	EXPECT_EQ(nicmr_pool_find(dev, reinterpret_cast<void *>(~uintptr_t{0} - 10), 100), nullptr)
		<< "wraps";
	std::vector<char> heap(4096);
	EXPECT_EQ(nicmr_pool_find(dev, heap.data(), heap.size()), nullptr) << "slow-path memory";
	/* The fixture's pool may have fallen back to 4 KiB pages; either way the size is one of
	 * the two, and an imported pool says the size it was imported with. */
	const size_t page = nicmr_pool_page_size(pool);
	EXPECT_TRUE(page == NICMR_PAGE_2M || page == NICMR_PAGE_4K) << page;
	const size_t len = 16 * 4096;
	void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(m, MAP_FAILED);
	nicmr_pool *imp = nullptr;
	ASSERT_EQ(nicmr_pool_import(dev, m, len, NICMR_PAGE_4K, &imp), 0);
	EXPECT_EQ(nicmr_pool_page_size(imp), NICMR_PAGE_4K);
	EXPECT_EQ(nicmr_pool_find(dev, static_cast<char *>(m) + 4096, 4096), imp);
	EXPECT_EQ(nicmr_pool_destroy(imp), 0);
	EXPECT_EQ(nicmr_pool_find(dev, m, 4096), nullptr) << "gone with its pool";
	munmap(m, len);
}

/* The first key of a device open: the registration's key on a fresh pool. */
uint32_t first_key(const char *spec)
{
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	nicmr_mr *mr = nullptr;
	uint32_t key = 0;
	EXPECT_EQ(nicmr_device_open(spec, &dev), 0);
	nicmr_pool_params p;
	nicmr_pool_params_init(&p);
	p.size = size_t{2} << 20;
	p.page_size = NICMR_PAGE_4K;
	if (dev != nullptr && nicmr_pd_alloc(dev, &pd) == 0 &&
	    nicmr_pool_create(dev, &p, &pool) == 0 &&
	    nicmr_mr_reg(pd, nicmr_pool_addr(pool), 4096, kAll, 0, 0, &mr) == 0) {
		key = nicmr_mr_key(mr);
		EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	}
	if (pool != nullptr) {
		EXPECT_EQ(nicmr_pool_destroy(pool), 0);
	}
	if (pd != nullptr) {
		EXPECT_EQ(nicmr_pd_free(pd), 0);
	}
	if (dev != nullptr) {
		EXPECT_EQ(nicmr_device_close(dev), 0);
	}
	return key;
}

TEST(ApiKeySeed, ASeededDeviceGivesTheSameKeysOnEveryOpen)
{
	const uint32_t a = first_key("emu:mkeys=1024,key_seed=7");
	ASSERT_NE(a, 0u);
	EXPECT_EQ(first_key("emu:mkeys=1024,key_seed=7"), a);
	EXPECT_EQ(first_key("emu:mkeys=1024,key_seed=0x7"), a) << "hex spells the same seed";
	/* Unseeded opens draw their secret: eight of them do not all give one key. */
	uint32_t k[8];
	for (uint32_t &x : k)
		x = first_key("emu:mkeys=1024");
	EXPECT_FALSE(std::all_of(k, k + 8, [&](uint32_t x) { return x == k[0]; }));
	nicmr_device *dev = nullptr;
	EXPECT_EQ(nicmr_device_open("emu:key_seed=x1", &dev), -EINVAL);
	EXPECT_EQ(dev, nullptr);
}

} // namespace
} // namespace nicmr::test
