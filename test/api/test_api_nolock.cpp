/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The hot paths (registration of pool memory, key lookup, posting, polling) take no lock,
 * checked from outside: the pthread lock calls of the calling thread are counted
 * (test/support/lock_count.h says how). Built only without sanitizers.
 */
#include <cstdint>
#include <mutex>
#include <shared_mutex>

#include "lock_count.h"
#include "test_api_util.h"

using namespace nicmr::test;

namespace {

class NoLock : public HotPathFixture {};

using Counting = LockCounting;

} // namespace

TEST_F(NoLock, CountingSeesEveryKindOfLock)
{
	/* The counter itself works: a test that cannot fail proves nothing. */
	std::mutex m;
	std::shared_mutex s;
	uint64_t n = 0;
	{
		Counting c;
		m.lock();
		m.unlock();
		if (m.try_lock())
			m.unlock();
		s.lock_shared();
		s.unlock_shared();
		s.lock();
		s.unlock();
		n = c.locks();
	}
	EXPECT_EQ(n, 4u);
}

TEST_F(NoLock, SlowPathRegistrationTakesLocks)
{
	/* The other side of the line, and proof the count reaches into the library: plain memory
	 * is pinned and DMA-mapped under the device's locks. */
	Anon plain(4096);
	nicmr_mr *m = nullptr;
	uint64_t n = 0;
	{
		Counting c;
		ASSERT_EQ(nicmr_mr_reg(pd, plain.get(), 4096, kAll, 0, 0, &m), 0);
		n = c.locks();
	}
	EXPECT_GT(n, 0u);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_F(NoLock, PoolRegistrationSubMrsAndDeregistrationTakeNoLock)
{
	warm_up();
	ASSERT_FALSE(HasFatalFailure());
	uint64_t n = 0;
	{
		Counting c;
		pool_rounds(2000);
		n = c.locks();
	}
	EXPECT_EQ(n, 0u);
}

TEST_F(NoLock, KeyLookupTakesNoLock)
{
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 65536, kAll, 0, 0, &m), 0);
	const uint32_t key = nicmr_mr_key(m);
	uint64_t n = 0, iova = 0;
	{
		Counting c;
		for (int i = 0; i < 1000; i++) {
			ASSERT_EQ(nicmr_key_lookup(dev, key, u(base) + 64 * (i % 1000), 64,
						   NICMR_ACCESS_REMOTE_WRITE, &iova),
				  0);
			ASSERT_EQ(nicmr_key_lookup(dev, key, u(base) + 65536, 1,
						   NICMR_ACCESS_REMOTE_READ, &iova),
				  -ERANGE);
		}
		n = c.locks();
	}
	EXPECT_EQ(n, 0u);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_F(NoLock, PostingAndPollingTakeNoLock)
{
	/* The data path of the native API: RDMA WRITE and READ posted with keys checked by the
	 * lockless lookup, completions polled (the device model runs inline on this thread). */
	nicmr_cq *cqa = nullptr, *cqb = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	connect_ports(dev, pd, &cqa, &cqb, &qa, &qb);
	ASSERT_FALSE(HasFatalFailure());
	nicmr_mr *ma = nullptr, *mb = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base, 8192, kAll, 0, 0, &ma), 0);
	ASSERT_EQ(nicmr_mr_reg(pd, base + 8192, 8192, kAll, 0, 0, &mb), 0);
	const uint32_t ka = nicmr_mr_key(ma), kb = nicmr_mr_key(mb);
	uint64_t n = 0;
	int done = 0;
	{
		Counting c;
		for (int i = 0; i < 500; i++) {
			ASSERT_EQ(nicmr_post_write(qa, u(base), 4096, ka, u(base) + 8192, kb, 1,
						   NICMR_SEND_SIGNALED),
				  0);
			ASSERT_EQ(nicmr_post_read(qa, u(base) + 4096, 4096, ka, u(base) + 8192, kb,
						  2, NICMR_SEND_SIGNALED),
				  0);
			nicmr_wc wc[2];
			for (int got = 0; got < 2;) {
				const int k = nicmr_cq_poll(cqa, wc, 2);
				ASSERT_GE(k, 0);
				for (int j = 0; j < k; j++)
					done += wc[j].status == NICMR_WC_SUCCESS ? 1 : 0;
				got += k;
			}
		}
		n = c.locks();
	}
	EXPECT_EQ(done, 1000);
	EXPECT_EQ(n, 0u);
	EXPECT_EQ(nicmr_mr_dereg(ma), 0);
	EXPECT_EQ(nicmr_mr_dereg(mb), 0);
	destroy_queues({qa, qb}, {cqa, cqb});
}
