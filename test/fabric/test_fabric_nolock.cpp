/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The provider's hot paths take no lock, driven through the installed libfabric:
 *  - fi_mr_reg and fi_close of pool memory;
 *  - under FI_THREAD_DOMAIN, fi_write, fi_read and fi_cq_read once the pair to the peer exists.
 * This thread's pthread lock calls are counted (test/support/lock_count.h): the provider and
 * libnicmr are shared libraries whose calls find this executable's definitions. Built only
 * without sanitizers. The device has enough keys for per-thread key caches
 * (FI_NICMR_DEVICE, set by meson).
 */
#include <rdma/fi_rma.h>

#include "lock_count.h"
#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kPoolLen = size_t{4} << 20;

class FabricNoLock : public FabricFixture {
protected:
	virtual enum fi_threading threading() const { return FI_THREAD_DOMAIN; }
	void SetUp() override
	{
		open(kAppMrMode, threading());
		if (HasFatalFailure())
			return;
		ASSERT_EQ(info_->domain_attr->threading, threading());
		ASSERT_EQ(
			make_pool(domain_.get(), kPoolLen, FI_NICMR_POOL_FALLBACK, &pool_, &base_),
			0);
	}
	void TearDown() override
	{
		if (pool_) {
			EXPECT_EQ(pool_ops(domain_.get())->pool_destroy(pool_), 0);
		}
		FabricFixture::TearDown();
	}
	/* 500 fi_write + fi_read pairs between two endpoints, their completions read: this
	 * thread's lock calls over them (the first request, which makes the pair, not counted).
	 * *done: the completions read. */
	uint64_t rma_locks(int *done);
	fi_nicmr_pool *pool_ = nullptr;
	char *base_ = nullptr;
};

/* FI_THREAD_SAFE: the endpoint's and CQ's mutexes are real. */
class FabricThreadSafe : public FabricNoLock {
protected:
	enum fi_threading threading() const override { return FI_THREAD_SAFE; }
};

} // namespace

TEST_F(FabricNoLock, CountingReachesTheProvider)
{
	/* Proof the count sees the provider's calls: a slow-path registration (plain memory,
	 * pinned and DMA-mapped) takes the device's locks. */
	Buf plain(4096);
	ASSERT_NE(plain.get(), nullptr);
	fid_mr *mr = nullptr;
	uint64_t n = 0;
	{
		LockCounting c;
		ASSERT_EQ(fi_mr_reg(domain_.get(), plain.get(), 4096, kRw, 0, 0, 0, &mr, nullptr),
			  0);
		n = c.locks();
	}
	EXPECT_GT(n, 0u);
	EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(FabricNoLock, PoolRegistrationAndCloseTakeNoLock)
{
	/* Warm-up: the thread's key cache, its UMR lane and the provider's first batch of MR
	 * objects come on first use. */
	for (int i = 0; i < 100; i++) {
		fid_mr *mr = nullptr;
		ASSERT_EQ(fi_mr_reg(domain_.get(), base_ + 4096 * i, 4096, kRw, 0, 0, 0, &mr,
				    nullptr),
			  0);
		ASSERT_EQ(fi_close(&mr->fid), 0);
	}
	uint64_t n = 0;
	{
		LockCounting c;
		for (int i = 0; i < 2000; i++) {
			fid_mr *mr = nullptr;
			ASSERT_EQ(fi_mr_reg(domain_.get(), base_ + 4096 * (i % 512), 4096, kRw, 0,
					    0, 0, &mr, nullptr),
				  0);
			ASSERT_EQ(fi_close(&mr->fid), 0);
		}
		n = c.locks();
	}
	EXPECT_EQ(n, 0u);
}

uint64_t FabricNoLock::rma_locks(int *done)
{
	Ep a, b;
	open_ep(domain_.get(), info_.p(), &a);
	open_ep(domain_.get(), info_.p(), &b);
	connect(&a, &b);
	connect(&b, &a);
	if (HasFatalFailure())
		return 0;
	char *src = base_, *dst = base_ + (size_t{1} << 20);
	Fid<fid_mr> lmr, rmr;
	EXPECT_EQ(fi_mr_reg(domain_.get(), src, 8192, FI_READ | FI_WRITE, 0, 0, 0, lmr.out(),
			    nullptr),
		  0);
	EXPECT_EQ(fi_mr_reg(domain_.get(), dst, 8192, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0,
			    rmr.out(), nullptr),
		  0);
	if (!lmr.get() || !rmr.get())
		return 0;
	void *desc = fi_mr_desc(lmr.get());
	const uint64_t key = fi_mr_key(rmr.get());
	const auto raddr = reinterpret_cast<uintptr_t>(dst);
	fi_context2 ctx[2];
	fi_cq_msg_entry e[2];
	/* The first request to the peer makes the pair of queues (a slow path, under locks). */
	EXPECT_EQ(fi_write(a.ep.get(), src, 64, desc, a.peer, raddr, key, &ctx[0]), 0);
	EXPECT_EQ(next(a.cq.get(), &e[0]), 1);
	uint64_t n = 0;
	*done = 0;
	{
		LockCounting c;
		for (int i = 0; i < 500; i++) {
			if (fi_write(a.ep.get(), src, 4096, desc, a.peer, raddr, key, &ctx[0]) !=
				    0 ||
			    fi_read(a.ep.get(), src + 4096, 4096, desc, a.peer, raddr, key,
				    &ctx[1]) != 0)
				break;
			for (int got = 0; got < 2;) {
				const ssize_t k = fi_cq_read(a.cq.get(), e, 2);
				if (k == -FI_EAGAIN)
					continue;
				if (k <= 0)
					break;
				got += static_cast<int>(k);
				*done += static_cast<int>(k);
			}
		}
		n = c.locks();
	}
	lmr.reset();
	rmr.reset();
	a.close();
	b.close();
	return n;
}

TEST_F(FabricNoLock, RmaAndCompletionsTakeNoLockUnderThreadDomain)
{
	int done = 0;
	const uint64_t n = rma_locks(&done);
	EXPECT_EQ(done, 1000);
	EXPECT_EQ(n, 0u);
}

TEST_F(FabricThreadSafe, RmaAndCompletionsTakeTheirLocks)
{
	/* The control: the same operations under FI_THREAD_SAFE lock the endpoint and the CQ,
	 * and the count sees it. */
	int done = 0;
	const uint64_t n = rma_locks(&done);
	EXPECT_EQ(done, 1000);
	EXPECT_GE(n, 1000u);
}

} // namespace nicmr::test
