/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Conformance of the "nicmr_mr_ops" extension: libfabric 2.x's sub-MRs (base_mr) and
 * translation page size (page_size) through fi_open_ops on a 1.17 domain. Every call and every
 * code, and every refusal leaves the device's counters (live MRs, mappings, locked pages) as
 * they were.
 */
#include <cstdio>
#include <fstream>
#include <string>

#include <rdma/fi_rma.h>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

/* fi_mr_attr over one iovec (the iovec lives in the object). */
struct Attr {
	iovec iov{};
	fi_mr_attr a{};
	Attr(void *buf, size_t len, uint64_t access, uint64_t key = 0)
	{
		iov.iov_base = buf;
		iov.iov_len = len;
		a.mr_iov = &iov;
		a.iov_count = 1;
		a.access = access;
		a.requested_key = key;
		a.iface = FI_HMEM_SYSTEM;
	}
	const fi_mr_attr *get() const { return &a; }
};

class FabricMrOps : public FabricFixture {
protected:
	void SetUp() override
	{
		FabricFixture::SetUp();
		ops_ = mr_ops(domain_.get());
		ASSERT_NE(ops_, nullptr);
	}
	int reg(const Attr &at, fid_mr *base, size_t page_size, fid_mr **mr, uint64_t flags = 0)
	{
		return ops_->regattr(domain_.get(), at.get(), base, page_size, flags, mr);
	}
	fi_nicmr_mr_ops *ops_ = nullptr;
	Buf mem_{1 << 20};
};

TEST_F(FabricMrOps, OpensByNameAndSaysItsSize)
{
	EXPECT_EQ(ops_->size, sizeof(fi_nicmr_mr_ops));
	void *ops = nullptr;
	EXPECT_EQ(fi_open_ops(&domain_->fid, FI_NICMR_MR_OPS, 1, &ops, nullptr), -FI_EBADFLAGS);
	EXPECT_EQ(fi_open_ops(&domain_->fid, "nicmr_mr_ops2", 0, &ops, nullptr), -FI_ENOSYS);
	EXPECT_EQ(fi_open_ops(&domain_->fid, FI_NICMR_MR_OPS, 0, nullptr, nullptr), -FI_EINVAL);
}

TEST_F(FabricMrOps, WithoutBaseOrPageSizeItIsRegattr)
{
	auto before = stats(domain_.get());
	Fid<fid_mr> mr;
	int ctx = 0;
	Attr at(mem_.get(), 8192, kRw);
	at.a.context = &ctx;
	ASSERT_EQ(reg(at, nullptr, 0, mr.out()), 0);
	EXPECT_EQ(mr->fid.context, &ctx);
	EXPECT_NE(fi_mr_key(mr.get()), FI_KEY_NOTAVAIL);
	EXPECT_EQ(ops_->mr_is_sub(mr.get()), 0);
	EXPECT_EQ(stats(domain_.get()).mrs, before.mrs + 1);
	mr.reset();
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMrOps, SubMrHasItsOwnKeyAndHoldsItsBase)
{
	auto before = stats(domain_.get());
	Fid<fid_mr> base, sub;
	ASSERT_EQ(reg(Attr(mem_.get(), 65536, kRw), nullptr, 0, base.out()), 0);
	ASSERT_EQ(reg(Attr(mem_.get() + 4096, 4096, FI_REMOTE_READ), base.get(), 0, sub.out()), 0);
	EXPECT_NE(fi_mr_key(sub.get()), fi_mr_key(base.get()));
	EXPECT_NE(fi_mr_desc(sub.get()), nullptr);
	EXPECT_EQ(ops_->mr_is_sub(sub.get()), 1);
	EXPECT_EQ(ops_->mr_is_sub(base.get()), 0);
	auto live = stats(domain_.get());
	EXPECT_EQ(live.mrs, before.mrs + 2);
	/* A sub-MR shares its base's translations: no mapping or locked page of its own. */
	EXPECT_EQ(fi_close(&base->fid), -FI_EBUSY) << "a sub-MR lives";
	expect_same(live, stats(domain_.get()));
	/* Its raw key maps back to its key. */
	uint8_t raw[NICMR_RAW_KEY_SIZE];
	size_t size = sizeof(raw);
	uint64_t addr = 0, key = 0;
	ASSERT_EQ(fi_mr_raw_attr(sub.get(), &addr, raw, &size, 0), 0);
	EXPECT_EQ(addr, reinterpret_cast<uintptr_t>(mem_.get() + 4096));
	ASSERT_EQ(fi_mr_map_raw(domain_.get(), addr, raw, size, &key, 0), 0);
	EXPECT_EQ(key, fi_mr_key(sub.get()));
	sub.reset();
	base.reset();
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMrOps, SubMrOfAPoolMrAndASubMrSpanningTheWholeBase)
{
	fi_nicmr_pool_ops *pops = pool_ops(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	char *p = nullptr;
	ASSERT_EQ(make_pool(domain_.get(), NICMR_PAGE_2M, FI_NICMR_POOL_FALLBACK, &pool, &p), 0);
	{
		Fid<fid_mr> base, whole;
		ASSERT_EQ(reg(Attr(p, 16384, kRw), nullptr, 0, base.out()), 0);
		ASSERT_EQ(reg(Attr(p, 16384, kRw), base.get(), 0, whole.out()), 0);
		EXPECT_EQ(pops->mr_in_pool(whole.get()), 1);
	}
	EXPECT_EQ(pops->pool_destroy(pool), 0);
}

TEST_F(FabricMrOps, SubMrAccessNeverExceedsTheBase)
{
	Fid<fid_mr> base;
	ASSERT_EQ(reg(Attr(mem_.get(), 65536, FI_READ | FI_REMOTE_READ), nullptr, 0, base.out()),
		  0);
	auto before = stats(domain_.get());
	fid_mr *sub = nullptr;
	EXPECT_EQ(reg(Attr(mem_.get(), 4096, FI_REMOTE_WRITE), base.get(), 0, &sub), -FI_EACCES);
	EXPECT_EQ(reg(Attr(mem_.get(), 4096, FI_REMOTE_READ | FI_WRITE), base.get(), 0, &sub),
		  -FI_EACCES);
	EXPECT_EQ(sub, nullptr);
	expect_same(before, stats(domain_.get()));
	Fid<fid_mr> ok, none;
	EXPECT_EQ(reg(Attr(mem_.get(), 4096, FI_REMOTE_READ), base.get(), 0, ok.out()), 0);
	EXPECT_EQ(reg(Attr(mem_.get(), 4096, 0), base.get(), 0, none.out()), 0) << "nothing";
}

TEST_F(FabricMrOps, SubMrOutsideItsBaseIsRefused)
{
	Fid<fid_mr> base;
	char *b = mem_.get() + 65536;
	ASSERT_EQ(reg(Attr(b, 65536, kRw), nullptr, 0, base.out()), 0);
	auto before = stats(domain_.get());
	fid_mr *sub = nullptr;
	EXPECT_EQ(reg(Attr(b - 4096, 4096, kRw), base.get(), 0, &sub), -FI_EINVAL) << "before";
	EXPECT_EQ(reg(Attr(b - 1, 2, kRw), base.get(), 0, &sub), -FI_EINVAL) << "straddles start";
	EXPECT_EQ(reg(Attr(b + 65536 - 4096, 4097, kRw), base.get(), 0, &sub), -FI_EINVAL)
		<< "straddles end";
	EXPECT_EQ(reg(Attr(b + 65536, 1, kRw), base.get(), 0, &sub), -FI_EINVAL) << "after";
	EXPECT_EQ(sub, nullptr);
	expect_same(before, stats(domain_.get()));
	Fid<fid_mr> last;
	EXPECT_EQ(reg(Attr(b + 65535, 1, kRw), base.get(), 0, last.out()), 0) << "last byte";
}

TEST_F(FabricMrOps, BadInputGetsItsCodeAndLeavesNothing)
{
	Fid<fid_mr> base;
	ASSERT_EQ(reg(Attr(mem_.get(), 65536, kRw), nullptr, 0, base.out()), 0);
	auto before = stats(domain_.get());
	fid_mr *mr = nullptr;
	Attr at(mem_.get(), 4096, kRw);
	for (fid_mr *b : {static_cast<fid_mr *>(nullptr), base.get()}) {
		EXPECT_EQ(ops_->regattr(nullptr, at.get(), b, 0, 0, &mr), -FI_EINVAL);
		EXPECT_EQ(ops_->regattr(domain_.get(), nullptr, b, 0, 0, &mr), -FI_EINVAL);
		EXPECT_EQ(ops_->regattr(domain_.get(), at.get(), b, 0, 0, nullptr), -FI_EINVAL);
		EXPECT_EQ(reg(at, b, 0, &mr, FI_RMA_EVENT), -FI_EBADFLAGS);
		EXPECT_EQ(reg(Attr(mem_.get(), 0, kRw), b, 0, &mr), -FI_EINVAL) << "len 0";
		EXPECT_EQ(reg(Attr(nullptr, 4096, kRw), b, 0, &mr), -FI_EINVAL) << "null buf";
		EXPECT_EQ(reg(Attr(mem_.get(), 4096, FI_SEND << 40), b, 0, &mr), -FI_EINVAL);
		Attr off(mem_.get(), 4096, kRw);
		off.a.offset = 4096;
		EXPECT_EQ(reg(off, b, 0, &mr), -FI_EINVAL) << "offset";
		Attr many(mem_.get(), 4096, kRw);
		many.a.iov_count = NICMR_MAX_IOV + 1;
		EXPECT_EQ(reg(many, b, 0, &mr), -FI_EINVAL) << "iov_count above mr_iov_limit";
		many.a.iov_count = 0;
		EXPECT_EQ(reg(many, b, 0, &mr), -FI_EINVAL) << "iov_count 0";
		Attr auth(mem_.get(), 4096, kRw);
		auth.a.auth_key_size = 8;
		EXPECT_EQ(reg(auth, b, 0, &mr), -FI_EINVAL) << "auth key";
		Attr hmem(mem_.get(), 4096, kRw);
		hmem.a.iface = FI_HMEM_CUDA;
		EXPECT_EQ(reg(hmem, b, 0, &mr), -FI_ENOSYS);
	}
	/* A sub-MR has its base's translations: no page size of its own. */
	EXPECT_EQ(reg(at, base.get(), NICMR_PAGE_4K, &mr), -FI_EINVAL);
	/* base_mr not a nicmr MR. */
	fid_mr foreign{};
	foreign.fid.fclass = FI_CLASS_MR;
	EXPECT_EQ(reg(at, &foreign, 0, &mr), -FI_EINVAL);
	fid_mr not_mr{};
	not_mr.fid.fclass = FI_CLASS_CQ;
	EXPECT_EQ(reg(at, &not_mr, 0, &mr), -FI_EINVAL);
	EXPECT_EQ(ops_->mr_is_sub(nullptr), -FI_EINVAL);
	EXPECT_EQ(ops_->mr_is_sub(&foreign), -FI_EINVAL);
	EXPECT_EQ(mr, nullptr);
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMrOps, SubMrOfAnotherDomainIsRefused)
{
	Fid<fid_domain> other;
	ASSERT_EQ(fi_domain(fabric_.get(), info_.p(), other.out(), nullptr), 0);
	{
		Fid<fid_mr> base;
		ASSERT_EQ(fi_mr_reg(other.get(), mem_.get(), 65536, kRw, 0, 0, 0, base.out(),
				    nullptr),
			  0);
		auto before = stats(domain_.get());
		fid_mr *sub = nullptr;
		EXPECT_EQ(reg(Attr(mem_.get(), 4096, kRw), base.get(), 0, &sub), -FI_EINVAL);
		EXPECT_EQ(sub, nullptr);
		expect_same(before, stats(domain_.get()));
	}
}

TEST_F(FabricMrOps, SubMrUnderProviderKeysIgnoresTheRequestedKey)
{
	Fid<fid_mr> base, a, b;
	ASSERT_EQ(reg(Attr(mem_.get(), 65536, kRw), nullptr, 0, base.out()), 0);
	ASSERT_EQ(reg(Attr(mem_.get(), 4096, kRw, 77), base.get(), 0, a.out()), 0);
	ASSERT_EQ(reg(Attr(mem_.get(), 4096, kRw, 77), base.get(), 0, b.out()), 0);
	EXPECT_NE(fi_mr_key(a.get()), fi_mr_key(b.get()));
}

/* A domain without FI_MR_PROV_KEY (the application's keys) and without FI_MR_VIRT_ADDR
 * (offset-based MRs). */
class FabricMrOpsAppKeys : public FabricMrOps {
protected:
	void SetUp() override
	{
		open(FI_MR_LOCAL | FI_MR_ALLOCATED);
		ops_ = mr_ops(domain_.get());
		ASSERT_NE(ops_, nullptr);
	}
	/* Application keys: a device with mkey_by_name. */
	DeviceSpecScope by_name_{kByNameSpec};
};

TEST_F(FabricMrOpsAppKeys, SubMrTakesTheRequestedKeyAndRefusesBadOnes)
{
	Fid<fid_mr> base, sub;
	ASSERT_EQ(reg(Attr(mem_.get(), 65536, kRw, 0x1200), nullptr, 0, base.out()), 0);
	ASSERT_EQ(reg(Attr(mem_.get() + 8192, 4096, kRw, 0x1300), base.get(), 0, sub.out()), 0);
	EXPECT_EQ(fi_mr_key(sub.get()), 0x1300u);
	/* Offset-based: the raw key's base address is 0 for the sub-MR too. */
	uint8_t raw[NICMR_RAW_KEY_SIZE];
	size_t size = sizeof(raw);
	uint64_t addr = 1;
	ASSERT_EQ(fi_mr_raw_attr(sub.get(), &addr, raw, &size, 0), 0);
	EXPECT_EQ(addr, 0u);
	auto before = stats(domain_.get());
	fid_mr *mr = nullptr;
	EXPECT_EQ(reg(Attr(mem_.get(), 4096, kRw, 0x1300), base.get(), 0, &mr), -FI_ENOKEY);
	EXPECT_EQ(reg(Attr(mem_.get(), 4096, kRw, 0x1200), base.get(), 0, &mr), -FI_ENOKEY);
	EXPECT_EQ(reg(Attr(mem_.get(), 4096, kRw, uint64_t{1} << 32), base.get(), 0, &mr),
		  -FI_EKEYREJECTED);
	EXPECT_EQ(mr, nullptr);
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMrOps, PageSizeMustBeOneTheDeviceTakes)
{
	auto before = stats(domain_.get());
	fid_mr *mr = nullptr;
	for (size_t ps : {size_t{1}, size_t{2048}, size_t{3000}, size_t{12288}, size_t{1} << 31,
			  size_t{1} << 40}) {
		EXPECT_EQ(reg(Attr(mem_.get(), 4096, kRw), nullptr, ps, &mr), -FI_EINVAL) << ps;
	}
	EXPECT_EQ(mr, nullptr);
	expect_same(before, stats(domain_.get()));
	Fid<fid_mr> ok;
	EXPECT_EQ(reg(Attr(mem_.get(), 4096, kRw), nullptr, NICMR_PAGE_4K, ok.out()), 0);
}

TEST_F(FabricMrOps, PageSizeAbovePlainMemorysPagesIsRefused)
{
	auto before = stats(domain_.get());
	fid_mr *mr = nullptr;
	for (size_t ps : {size_t{8192}, NICMR_PAGE_2M, NICMR_PAGE_1G})
		EXPECT_EQ(reg(Attr(mem_.get(), 65536, kRw), nullptr, ps, &mr), -FI_EINVAL) << ps;
	EXPECT_EQ(mr, nullptr);
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMrOps, PageSizeUpToThePoolsPagesIsHonoured)
{
	/* 2 MiB pages with no fallback: the test environment reserves hugepages (test.sh). */
	fi_nicmr_pool_ops *pops = pool_ops(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	char *p = nullptr;
	ASSERT_EQ(make_pool(domain_.get(), 2 * NICMR_PAGE_2M, 0, &pool, &p), 0)
		<< "needs two free 2 MiB hugepages";
	auto before = stats(domain_.get());
	{
		Fid<fid_mr> a, b, c;
		EXPECT_EQ(reg(Attr(p, NICMR_PAGE_2M, kRw), nullptr, NICMR_PAGE_2M, a.out()), 0);
		EXPECT_EQ(reg(Attr(p + 4096, 8192, kRw), nullptr, NICMR_PAGE_2M, b.out()), 0)
			<< "VA-based: any start in the pool";
		EXPECT_EQ(reg(Attr(p + 4096, 8192, kRw), nullptr, 65536, c.out()), 0);
		EXPECT_EQ(pops->mr_in_pool(a.get()), 1);
		fid_mr *mr = nullptr;
		EXPECT_EQ(reg(Attr(p, 4096, kRw), nullptr, NICMR_PAGE_1G, &mr), -FI_EINVAL);
		EXPECT_EQ(reg(Attr(p + 2 * NICMR_PAGE_2M - 4096, 8192, kRw), nullptr, NICMR_PAGE_2M,
			      &mr),
			  -FI_EINVAL)
			<< "runs past the pool";
		EXPECT_EQ(mr, nullptr);
		EXPECT_EQ(stats(domain_.get()).mrs, before.mrs + 3);
	}
	expect_same(before, stats(domain_.get()));
	EXPECT_EQ(pops->pool_destroy(pool), 0);
	/* The pool is gone: its memory no longer promises 2 MiB pages. */
	Buf plain(NICMR_PAGE_2M);
	fid_mr *mr = nullptr;
	EXPECT_EQ(reg(Attr(plain.get(), 4096, kRw), nullptr, NICMR_PAGE_2M, &mr), -FI_EINVAL);
}

/* KernelPageSize of the smaps entry that holds va, in bytes; -1 when there is none. The
 * kernel's word on the pages a fallback pool got, independent of nicmr. */
long kernel_page_size(const void *va)
{
	std::ifstream smaps("/proc/self/smaps");
	const auto a = reinterpret_cast<unsigned long>(va);
	std::string line;
	bool in = false;
	while (std::getline(smaps, line)) {
		unsigned long lo = 0, hi = 0;
		if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2)
			in = a >= lo && a < hi;
		else if (in && line.rfind("KernelPageSize:", 0) == 0)
			return std::stol(line.substr(15)) * 1024;
	}
	return -1;
}

TEST_F(FabricMrOps, AFallbackPoolPromisesThePagesItGot)
{
	fi_nicmr_pool_ops *pops = pool_ops(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	char *p = nullptr;
	ASSERT_EQ(make_pool(domain_.get(), NICMR_PAGE_2M, FI_NICMR_POOL_FALLBACK, &pool, &p), 0);
	const long page = kernel_page_size(p);
	ASSERT_TRUE(page == long(NICMR_PAGE_2M) || page == long(NICMR_PAGE_4K)) << page;
	{
		/* 2 MiB translation pages only on 2 MiB pages; 4 KiB always. */
		Fid<fid_mr> big;
		EXPECT_EQ(reg(Attr(p, 4096, kRw), nullptr, NICMR_PAGE_2M, big.out()),
			  page == long(NICMR_PAGE_2M) ? 0 : -FI_EINVAL)
			<< "pool on pages of " << page;
		Fid<fid_mr> ok;
		EXPECT_EQ(reg(Attr(p, 4096, kRw), nullptr, NICMR_PAGE_4K, ok.out()), 0);
	}
	EXPECT_EQ(pops->pool_destroy(pool), 0);
}

TEST_F(FabricMrOps, ImportedMemoryPromisesItsPageSize)
{
	fi_nicmr_pool_ops *pops = pool_ops(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	ASSERT_EQ(pops->pool_import(domain_.get(), mem_.get(), mem_.len(), NICMR_PAGE_4K, &pool),
		  0);
	{
		fid_mr *mr = nullptr;
		EXPECT_EQ(reg(Attr(mem_.get(), 8192, kRw), nullptr, 8192, &mr), -FI_EINVAL);
		Fid<fid_mr> ok;
		EXPECT_EQ(reg(Attr(mem_.get(), 8192, kRw), nullptr, NICMR_PAGE_4K, ok.out()), 0);
		EXPECT_EQ(pops->mr_in_pool(ok.get()), 1);
	}
	EXPECT_EQ(pops->pool_destroy(pool), 0);
}

TEST_F(FabricMrOpsAppKeys, OffsetBasedPageSizeNeedsAnAlignedStart)
{
	fi_nicmr_pool_ops *pops = pool_ops(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	char *p = nullptr;
	ASSERT_EQ(make_pool(domain_.get(), 2 * NICMR_PAGE_2M, 0, &pool, &p), 0)
		<< "needs two free 2 MiB hugepages";
	auto before = stats(domain_.get());
	{
		fid_mr *mr = nullptr;
		/* Offset 0 begins a translation page: a start inside a 2 MiB page cannot. */
		EXPECT_EQ(reg(Attr(p + 4096, 4096, kRw, 0x2100), nullptr, NICMR_PAGE_2M, &mr),
			  -FI_EINVAL);
		EXPECT_EQ(mr, nullptr);
		expect_same(before, stats(domain_.get()));
		Fid<fid_mr> a, b;
		EXPECT_EQ(reg(Attr(p + NICMR_PAGE_2M, 4096, kRw, 0x2200), nullptr, NICMR_PAGE_2M,
			      a.out()),
			  0);
		EXPECT_EQ(reg(Attr(p + 4096, 4096, kRw, 0x2300), nullptr, NICMR_PAGE_4K, b.out()),
			  0);
	}
	EXPECT_EQ(pops->pool_destroy(pool), 0);
}

} // namespace
} // namespace nicmr::test
