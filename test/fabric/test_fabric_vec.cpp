/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Vectored registration through the installed libfabric: fi_mr_regv and fi_mr_regattr with more
 * than one iov, over plain mmap'd memory (the slow path) and over a nicmr pool (the ops
 * extension), their raw keys, and every refusal with its code, leaving the device's counters as
 * they were. Data through vectored MRs is in test_fabric_rma.cpp (Rma*.Vectored*).
 */
#include <sys/uio.h>

#include <vector>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

/* Vectored MRs whose joints need an indirect (KLM) key: the environment's device with
 * mkey_by_name (FabricMrVecStock below is the stock device's refusal). */
class FabricMrVec : public FabricFixture {
protected:
	std::string by_name_spec_ = env_spec_with_mkey_by_name();
	DeviceSpecScope by_name_{by_name_spec_.c_str()};
};
using FabricMrVecStock = FabricFixture;

TEST_F(FabricMrVec, PlainMemorySegmentsGiveOneKeyAndCloseReleasesEverything)
{
	Buf a(4 * 4096), b(4096);
	/* Out of address order, not page-aligned, in two mappings. */
	iovec iov[3] = {{a.get() + 3 * 4096 + 100, 2000}, {b.get() + 8, 3000}, {a.get() + 5, 7000}};
	auto before = stats(domain_.get());
	Fid<fid_mr> mr;
	int ctx = 0;
	ASSERT_EQ(fi_mr_regv(domain_.get(), iov, 3, kRw, 0, 0, 0, mr.out(), &ctx), 0);
	EXPECT_EQ(mr->fid.context, &ctx);
	EXPECT_NE(fi_mr_desc(mr.get()), nullptr);
	const uint64_t key = fi_mr_key(mr.get());
	EXPECT_NE(key, FI_KEY_NOTAVAIL);
	EXPECT_LE(key, UINT32_MAX);
	EXPECT_EQ(pool_ops(domain_.get())->mr_in_pool(mr.get()), 0) << "application memory";
	auto during = stats(domain_.get());
	EXPECT_EQ(during.mrs, before.mrs + 1) << "one MR, whatever its inner keys";
	EXPECT_GT(during.slow_mappings, before.slow_mappings);
	EXPECT_GT(during.pinned_pages, before.pinned_pages);
	/* The raw key names the same key; its address space starts at iov[0] (FI_MR_VIRT_ADDR). */
	uint64_t mapped = 0, base = 0;
	raw_round_trip(domain_.get(), mr.get(), &mapped, &base);
	EXPECT_EQ(mapped, key);
	EXPECT_EQ(base, uint64_t(uintptr_t(iov[0].iov_base)));
	/* No sub-MRs of a vectored MR: it has no one range to share. */
	iovec sub = {iov[0].iov_base, 64};
	fi_mr_attr attr{};
	attr.mr_iov = &sub;
	attr.iov_count = 1;
	attr.access = kRw;
	fid_mr *bad = nullptr;
	EXPECT_EQ(mr_ops(domain_.get())->regattr(domain_.get(), &attr, mr.get(), 0, 0, &bad),
		  -FI_EINVAL);
	EXPECT_EQ(bad, nullptr);
	expect_same(during, stats(domain_.get()));
	mr.reset();
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMrVec, PoolSegmentsTakeNoMappingOfTheirOwn)
{
	fi_nicmr_pool_ops *ops = pool_ops(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	char *p = nullptr;
	ASSERT_EQ(make_pool(domain_.get(), NICMR_PAGE_2M, FI_NICMR_POOL_FALLBACK, &pool, &p), 0);
	auto before = stats(domain_.get());
	{
		/* Page-aligned joints (one MTT key) and unaligned ones (KLM), both from the pool.
		 */
		iovec aligned[3] = {{p + (64 << 10), 8192}, {p + (256 << 10), 12288}, {p, 4096}};
		iovec ragged[3] = {{p + 100, 1000}, {p + (128 << 10) + 7, 3000}, {p + 70000, 1}};
		Fid<fid_mr> m1, m2;
		ASSERT_EQ(fi_mr_regv(domain_.get(), aligned, 3, kRw, 0, 0, 0, m1.out(), nullptr),
			  0);
		ASSERT_EQ(fi_mr_regv(domain_.get(), ragged, 3, kRw, 0, 0, 0, m2.out(), nullptr), 0);
		auto during = stats(domain_.get());
		EXPECT_EQ(during.mrs, before.mrs + 2);
		EXPECT_EQ(during.slow_mappings, before.slow_mappings) << "the pool's mapping";
		EXPECT_EQ(during.pinned_pages, before.pinned_pages);
		EXPECT_EQ(ops->pool_destroy(pool), -FI_EBUSY) << "vectored MRs use the pool";
		uint64_t k = 0, base = 0;
		raw_round_trip(domain_.get(), m2.get(), &k, &base);
		EXPECT_EQ(k, fi_mr_key(m2.get()));
		EXPECT_EQ(base, uint64_t(uintptr_t(p + 100)));
	}
	expect_same(before, stats(domain_.get()));
	EXPECT_EQ(ops->pool_destroy(pool), 0);
}

TEST_F(FabricMrVec, RegattrTakesTheSegmentsAndTheContext)
{
	Buf a(2 * 4096);
	iovec iov[2] = {{a.get() + 4096, 4096}, {a.get(), 4096}};
	int ctx = 0;
	fi_mr_attr attr{};
	attr.mr_iov = iov;
	attr.iov_count = 2;
	attr.access = kRw;
	attr.context = &ctx;
	auto before = stats(domain_.get());
	{
		Fid<fid_mr> mr;
		ASSERT_EQ(fi_mr_regattr(domain_.get(), &attr, 0, mr.out()), 0);
		EXPECT_EQ(mr->fid.context, &ctx);
		EXPECT_EQ(stats(domain_.get()).mrs, before.mrs + 1);
		/* The 2.x fields through the extension: no page size for several segments, and a
		 * sub-MR is one range. */
		fi_nicmr_mr_ops *ops = mr_ops(domain_.get());
		fid_mr *bad = nullptr;
		auto during = stats(domain_.get());
		EXPECT_EQ(ops->regattr(domain_.get(), &attr, nullptr, NICMR_PAGE_4K, 0, &bad),
			  -FI_EINVAL);
		Fid<fid_mr> whole;
		ASSERT_EQ(fi_mr_reg(domain_.get(), a.get(), a.len(), kRw, 0, 0, 0, whole.out(),
				    nullptr),
			  0);
		EXPECT_EQ(ops->regattr(domain_.get(), &attr, whole.get(), 0, 0, &bad), -FI_EINVAL);
		EXPECT_EQ(bad, nullptr);
		whole.reset();
		expect_same(during, stats(domain_.get()));
		Fid<fid_mr> ext;
		ASSERT_EQ(ops->regattr(domain_.get(), &attr, nullptr, 0, 0, ext.out()), 0);
		EXPECT_EQ(ops->mr_is_sub(ext.get()), 0);
	}
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMrVec, TheIovLimitItselfRegisters)
{
	Buf a(NICMR_MAX_IOV * 4096);
	std::vector<iovec> iov(NICMR_MAX_IOV);
	/* Every other page, backwards: no two segments merge. */
	for (size_t i = 0; i < iov.size(); i++)
		iov[i] = {a.get() + (NICMR_MAX_IOV - 1 - i) * 4096 + 16, 2048};
	auto before = stats(domain_.get());
	{
		Fid<fid_mr> mr;
		ASSERT_EQ(fi_mr_regv(domain_.get(), iov.data(), iov.size(), kRw, 0, 0, 0, mr.out(),
				     nullptr),
			  0);
		EXPECT_EQ(stats(domain_.get()).mrs, before.mrs + 1);
	}
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMrVec, BadSegmentsGetTheirCodeAndLeaveNothing)
{
	Buf a(4 * 4096);
	fid_domain *d = domain_.get();
	auto before = stats(d);
	fid_mr *mr = nullptr;
	iovec iov[NICMR_MAX_IOV + 1];
	for (auto &v : iov)
		v = {a.get(), 64};
	EXPECT_EQ(fi_mr_regv(d, iov, 0, kRw, 0, 0, 0, &mr, nullptr), -FI_EINVAL) << "count 0";
	EXPECT_EQ(fi_mr_regv(d, nullptr, 3, kRw, 0, 0, 0, &mr, nullptr), -FI_EINVAL) << "null iov";
	EXPECT_EQ(fi_mr_regv(d, iov, NICMR_MAX_IOV + 1, kRw, 0, 0, 0, &mr, nullptr), -FI_EINVAL)
		<< "over mr_iov_limit";
	iovec empty[3] = {{a.get(), 4096}, {a.get() + 8192, 0}, {a.get() + 4096, 64}};
	EXPECT_EQ(fi_mr_regv(d, empty, 3, kRw, 0, 0, 0, &mr, nullptr), -FI_EINVAL)
		<< "a zero-length segment";
	iovec null_base[2] = {{a.get(), 4096}, {nullptr, 64}};
	EXPECT_EQ(fi_mr_regv(d, null_base, 2, kRw, 0, 0, 0, &mr, nullptr), -FI_EINVAL);
	iovec good[2] = {{a.get() + 4096, 4096}, {a.get(), 100}};
	EXPECT_EQ(fi_mr_regv(d, good, 2, kRw, 0, 0, 0, nullptr, nullptr), -FI_EINVAL) << "null mr";
	EXPECT_EQ(fi_mr_regv(d, good, 2, kRw, 4096, 0, 0, &mr, nullptr), -FI_EINVAL) << "offset";
	EXPECT_EQ(fi_mr_regv(d, good, 2, kRw | FI_TAGGED, 0, 0, 0, &mr, nullptr), -FI_EINVAL)
		<< "access bit";
	EXPECT_EQ(fi_mr_regv(d, good, 2, kRw, 0, 0, FI_RMA_EVENT, &mr, nullptr), -FI_EBADFLAGS);
	EXPECT_EQ(fi_mr_regv(d, good, 2, kRw, 0, 0, 1ull << 40, &mr, nullptr), -FI_EBADFLAGS);
	fi_mr_attr attr{};
	attr.mr_iov = empty;
	attr.iov_count = 3;
	attr.access = kRw;
	EXPECT_EQ(fi_mr_regattr(d, &attr, 0, &mr), -FI_EINVAL) << "a zero-length segment";
	attr.mr_iov = good;
	attr.iov_count = 2;
	attr.iface = FI_HMEM_ZE;
	EXPECT_EQ(fi_mr_regattr(d, &attr, 0, &mr), -FI_ENOSYS);
	/* A segment not mapped, after mapped ones: the native call undoes the first ones. */
	void *hole = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(hole, MAP_FAILED);
	munmap(hole, 4096);
	iovec holed[3] = {{a.get(), 4096}, {a.get() + 8192, 100}, {hole, 4096}};
	EXPECT_EQ(fi_mr_regv(d, holed, 3, kRw, 0, 0, 0, &mr, nullptr), -FI_EFAULT);
	/* Read-only memory the device may write to. */
	void *ro = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(ro, MAP_FAILED);
	iovec ro_iov[2] = {{a.get(), 4096}, {ro, 4096}};
	EXPECT_EQ(fi_mr_regv(d, ro_iov, 2, kRw, 0, 0, 0, &mr, nullptr), -FI_EFAULT);
	munmap(ro, 4096);
	EXPECT_EQ(mr, nullptr);
	expect_same(before, stats(d));
}

/* On the environment's stock device (it chooses every mkey index) a region whose joints need
 * an indirect (KLM) key cannot be had: -FI_EOPNOTSUPP, and nothing is left behind. One whose
 * joints are page-aligned is one MTT key as anywhere. */
TEST_F(FabricMrVecStock, KlmFormIsEopnotsuppAndLeavesNothing)
{
	Buf a(4 * 4096);
	iovec aligned[2] = {{a.get() + 4096, 4096}, {a.get(), 4096}};
	Fid<fid_mr> ok;
	ASSERT_EQ(fi_mr_regv(domain_.get(), aligned, 2, kRw, 0, 0, 0, ok.out(), nullptr), 0);
	ok.reset();
	auto before = stats(domain_.get());
	iovec ragged[2] = {{a.get() + 100, 1000}, {a.get() + 8192 + 7, 3000}};
	fid_mr *bad = nullptr;
	EXPECT_EQ(fi_mr_regv(domain_.get(), ragged, 2, kRw, 0, 0, 0, &bad, nullptr),
		  -FI_EOPNOTSUPP);
	EXPECT_EQ(bad, nullptr);
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMrVec, NoFreeKeyIsEnospcAndLeavesNothing)
{
	fi_nicmr_pool_ops *ops = pool_ops(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	char *p = nullptr;
	ASSERT_EQ(make_pool(domain_.get(), NICMR_PAGE_2M, FI_NICMR_POOL_FALLBACK, &pool, &p), 0);
	auto before = stats(domain_.get());
	/* Page-aligned joints: one key per MR, until the device has none left. */
	iovec iov[2] = {{p + 4096, 4096}, {p, 4096}};
	std::vector<fid_mr *> mrs;
	int ret = 0;
	for (size_t i = 0; i <= info_->domain_attr->mr_cnt && ret == 0; i++) {
		fid_mr *mr = nullptr;
		ret = fi_mr_regv(domain_.get(), iov, 2, kRw, 0, 0, 0, &mr, nullptr);
		if (ret == 0)
			mrs.push_back(mr);
	}
	EXPECT_EQ(ret, -FI_ENOSPC);
	EXPECT_GT(mrs.size(), info_->domain_attr->mr_cnt / 2);
	auto full = stats(domain_.get());
	EXPECT_EQ(full.keys_free, 0u);
	/* Refused again, in the KLM form too (its inner keys find none either): nothing moves. */
	fid_mr *bad = nullptr;
	EXPECT_EQ(fi_mr_regv(domain_.get(), iov, 2, kRw, 0, 0, 0, &bad, nullptr), -FI_ENOSPC);
	iovec ragged[2] = {{p + 100, 1000}, {p + 8192 + 7, 3000}};
	EXPECT_EQ(fi_mr_regv(domain_.get(), ragged, 2, kRw, 0, 0, 0, &bad, nullptr), -FI_ENOSPC);
	EXPECT_EQ(bad, nullptr);
	auto after = stats(domain_.get());
	expect_same(full, after);
	EXPECT_EQ(after.keys_free, full.keys_free);
	EXPECT_EQ(after.keys_retiring, full.keys_retiring);
	for (fid_mr *mr : mrs)
		EXPECT_EQ(fi_close(&mr->fid), 0);
	expect_same(before, stats(domain_.get()));
	EXPECT_EQ(ops->pool_destroy(pool), 0);
}

/* Offset-based keys (no FI_MR_VIRT_ADDR) with application keys (no FI_MR_PROV_KEY) and raw
 * keys: the address space starts at 0 whatever the alignment. */
class FabricMrVecOffsets : public FabricFixture {
protected:
	void SetUp() override { open(FI_MR_ALLOCATED | FI_MR_RAW | FI_MR_LOCAL); }
	/* Application keys and the KLM form: a device with mkey_by_name. */
	DeviceSpecScope by_name_{kByNameSpec};
};

TEST_F(FabricMrVecOffsets, SegmentsNeedNoAlignmentAndTheBaseIsZero)
{
	ASSERT_EQ(info_->domain_attr->mr_mode, FI_MR_ALLOCATED | FI_MR_RAW | FI_MR_LOCAL);
	Buf a(2 * 4096);
	iovec iov[2] = {{a.get() + 4096 + 24, 1000}, {a.get() + 8, 1000}};
	auto before = stats(domain_.get());
	Fid<fid_mr> mr;
	const uint64_t want = uint64_t{77} << 8;
	ASSERT_EQ(fi_mr_regv(domain_.get(), iov, 2, kRw, 0, want, 0, mr.out(), nullptr), 0);
	EXPECT_EQ(fi_mr_key(mr.get()), FI_KEY_NOTAVAIL) << "FI_MR_RAW";
	uint64_t key = 0, base = 1;
	raw_round_trip(domain_.get(), mr.get(), &key, &base);
	EXPECT_EQ(key, want) << "the requested key is the key";
	EXPECT_EQ(base, 0u) << "offset-based";
	/* The key is live: the same request is refused, and a key above 32 bits is no key. */
	auto during = stats(domain_.get());
	fid_mr *bad = nullptr;
	EXPECT_EQ(fi_mr_regv(domain_.get(), iov, 2, kRw, 0, want, 0, &bad, nullptr), -FI_ENOKEY);
	EXPECT_EQ(fi_mr_regv(domain_.get(), iov, 2, kRw, 0, 1ull << 32, 0, &bad, nullptr),
		  -FI_EKEYREJECTED);
	/* The first key past the device's indices (mr_cnt is the pool's cap, below them). */
	nicmr_device_attr at{};
	ASSERT_EQ(pool_ops(domain_.get())->device_query(domain_.get(), &at), 0);
	const uint64_t beyond = uint64_t(at.mkey_count) << 8;
	EXPECT_EQ(fi_mr_regv(domain_.get(), iov, 2, kRw, 0, beyond, 0, &bad, nullptr),
		  -FI_EKEYREJECTED);
	EXPECT_EQ(bad, nullptr);
	expect_same(during, stats(domain_.get()));
	mr.reset();
	expect_same(before, stats(domain_.get()));
}

/* Raw keys of a vectored MR between two domains of one fabric. */
TEST(FabricMrVecRaw, RawKeyMapsInAnotherDomain)
{
	const std::string spec = env_spec_with_mkey_by_name(); /* the KLM form */
	DeviceSpecScope by_name(spec.c_str());
	const int mode = FI_MR_ALLOCATED | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_RAW;
	Hints h(mode);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	Fid<fid_fabric> fabric;
	ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
	Fid<fid_domain> a, b;
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), a.out(), nullptr), 0);
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), b.out(), nullptr), 0);
	Buf buf(3 * 4096);
	iovec iov[2] = {{buf.get() + 2 * 4096, 4096}, {buf.get() + 300, 500}};
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_regv(a.get(), iov, 2, kRw, 0, 0, 0, mr.out(), nullptr), 0);
	uint64_t in_a = 0, in_b = 0, base_a = 0, base_b = 0;
	raw_round_trip(a.get(), mr.get(), &in_a, &base_a);
	raw_round_trip(b.get(), mr.get(), &in_b, &base_b);
	EXPECT_EQ(in_a, in_b);
	EXPECT_EQ(base_a, uint64_t(uintptr_t(iov[0].iov_base)));
	EXPECT_NE(in_a, 0u);
}

} // namespace
} // namespace nicmr::test
