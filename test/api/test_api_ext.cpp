/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device model's extensions through the native data path: single-use keys (one remote
 * operation, then REMOTE_ACCESS_ERR; of racing ones exactly one), RMA-event MRs (disabled until
 * enabled, remote writes and atomics counted exactly in a counter the device increments, reads
 * and local use not), every refused call with its code, nothing leaked, and a device without
 * the extensions refusing them with -EOPNOTSUPP.
 */
#include <endian.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "nicmr/nicmr.hpp"
#include "test_api_util.h"

namespace nicmr::test {
namespace {

namespace prm = mlx5::prm;

constexpr size_t kLen = 64 << 10;

/* Two connected pairs: qa (port 1, cqa) <-> qb (port 2, cqb) and qc (port 1, cqc) <-> qd
 * (port 2, cqd); a source MR over a (kLen, every right); b is kLen of target memory. */
class ExtPath : public ApiFixture {
protected:
	void SetUp() override
	{
		ApiFixture::SetUp();
		connect_ports(dev, pd, &cqa, &cqb, &qa, &qb);
		connect_ports(dev, pd, &cqc, &cqd, &qc, &qd);
		if (HasFatalFailure())
			return;
		a = base;
		b = base + kLen;
		ASSERT_EQ(nicmr_mr_reg(pd, a, kLen, kAll, 0, 0, &mra), 0);
		ka = nicmr_mr_key(mra);
	}
	void TearDown() override
	{
		if (mra) {
			EXPECT_EQ(nicmr_mr_dereg(mra), 0);
		}
		destroy_queues({qa, qb, qc, qd}, {cqa, cqb, cqc, cqd});
		ApiFixture::TearDown();
	}
	static nicmr_wc wait(nicmr_cq *cq) { return wait_wc(cq); }
	/* A signalled write of n bytes from a + off to target + off through rkey, completed. */
	nicmr_wc write(nicmr_qp *q, nicmr_cq *cq, char *target, uint32_t rkey, size_t off, size_t n)
	{
		EXPECT_EQ(nicmr_post_write(q, u(a) + off, n, ka, u(target) + off, rkey, off,
					   NICMR_SEND_SIGNALED),
			  0);
		return wait(cq);
	}
	/* Both QPs of a pair back in RTS after a remote error. */
	void recover(nicmr_qp *req, nicmr_qp *resp)
	{
		ASSERT_EQ(nicmr_qp_recover(req), 0);
		ASSERT_EQ(nicmr_qp_recover(resp), 0);
	}
	static void expect_remote_access(const nicmr_wc &wc)
	{
		EXPECT_EQ(wc.status, NICMR_WC_REMOTE_ACCESS);
		EXPECT_EQ(wc.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
		EXPECT_EQ(wc.byte_len, 0u);
	}
	/* The device's extension state of a key (NICMR_QUERY_MKEY_EXT through the driver). */
	mlx5::MkeyExtState ext_state(uint32_t key)
	{
		mlx5::MkeyExtState st;
		EXPECT_EQ(dev->drv->query_mkey_ext(mr::mkey_index(key), &st), 0);
		return st;
	}
	int lookup(uint32_t key, const void *p, size_t n)
	{
		uint64_t iova = 0;
		return nicmr_key_lookup(dev, key, u(p), n, NICMR_ACCESS_REMOTE_WRITE, &iova);
	}
	nicmr_cq *cqa = nullptr, *cqb = nullptr, *cqc = nullptr, *cqd = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr, *qc = nullptr, *qd = nullptr;
	nicmr_mr *mra = nullptr;
	char *a = nullptr, *b = nullptr;
	uint32_t ka = 0;
};

TEST_F(ExtPath, TheModelOffersBothExtensions)
{
	nicmr_device_attr attr{};
	ASSERT_EQ(nicmr_device_query(dev, &attr), 0);
	EXPECT_EQ(attr.extensions, 1u);
	EXPECT_EQ(attr.ext_flags, NICMR_EXT_SINGLE_USE | NICMR_EXT_RMA_EVENT);
}

TEST_F(ExtPath, SingleUseKeyServesOneWriteThenRemoteAccessErr)
{
	const nicmr_device_stats before = stats(dev);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, NICMR_MR_SINGLE_USE, 0, &mr), 0);
	const uint32_t kb = nicmr_mr_key(mr);
	EXPECT_EQ(ext_state(kb).flags, prm::mkey_ext::single_use);
	for (size_t i = 0; i < 4096; i++)
		a[i] = static_cast<char>(i * 7 + 3);
	std::memset(b, 0, 8192);

	nicmr_wc wc = write(qa, cqa, b, kb, 0, 4096);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.byte_len, 4096u);
	EXPECT_EQ(std::memcmp(a, b, 4096), 0);
	EXPECT_EQ(ext_state(kb).flags, prm::mkey_ext::single_use | prm::mkey_ext::spent);

	/* The key is spent on the device: the next write is refused and moves nothing. */
	std::memset(a + 4096, 0x77, 4096);
	expect_remote_access(write(qa, cqa, b, kb, 4096, 4096));
	for (size_t i = 4096; i < 8192; i++)
		ASSERT_EQ(b[i], 0) << i;
	recover(qa, qb);
	/* A read is refused too. */
	ASSERT_EQ(nicmr_post_read(qa, u(a), 64, ka, u(b), kb, 9, NICMR_SEND_SIGNALED), 0);
	expect_remote_access(wait(cqa));
	recover(qa, qb);
	/* The host's lookup does not see the device's use (local checks keep working). */
	EXPECT_EQ(lookup(kb, b, 64), 0);

	ASSERT_EQ(nicmr_mr_dereg(mr), 0);
	/* The revoke cleared the index's extension state: a later key there starts plain. */
	EXPECT_EQ(ext_state(kb).flags, 0u);
	expect_released(before, stats(dev));
}

TEST_F(ExtPath, SingleUseIsSpentByAReadOrAnAtomicToo)
{
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, NICMR_MR_SINGLE_USE, 0, &mr), 0);
	uint32_t kb = nicmr_mr_key(mr);
	ASSERT_EQ(nicmr_post_read(qa, u(a), 64, ka, u(b), kb, 1, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	expect_remote_access(write(qa, cqa, b, kb, 0, 64));
	recover(qa, qb);
	ASSERT_EQ(nicmr_mr_dereg(mr), 0);

	ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, NICMR_MR_SINGLE_USE, 0, &mr), 0);
	kb = nicmr_mr_key(mr);
	ASSERT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(b), kb, 1, 2, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	ASSERT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(b), kb, 1, 3, NICMR_SEND_SIGNALED), 0);
	expect_remote_access(wait(cqa));
	recover(qa, qb);
	ASSERT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_F(ExtPath, RacingWritesOnASingleUseKeyGiveExactlyOneSuccess)
{
	/* NICMR_EXT_RACE_ROUNDS: the stress suite's longer run. */
	const char *env = std::getenv("NICMR_EXT_RACE_ROUNDS");
	const int rounds = env != nullptr ? std::atoi(env) : 20;
	for (int round = 0; round < rounds; round++) {
		nicmr_mr *mr = nullptr;
		ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, NICMR_MR_SINGLE_USE, 0, &mr), 0);
		const uint32_t kb = nicmr_mr_key(mr);
		std::atomic<int> ready{0};
		nicmr_wc wa{}, wcc{};
		auto racer = [&](nicmr_qp *q, nicmr_cq *cq, size_t off, nicmr_wc *out) {
			ready.fetch_add(1);
			while (ready.load() < 2) {
			}
			*out = write(q, cq, b, kb, off, 256);
		};
		std::thread t1(racer, qa, cqa, 0, &wa);
		std::thread t2(racer, qc, cqc, 256, &wcc);
		t1.join();
		t2.join();
		const int ok = (wa.status == NICMR_WC_SUCCESS) + (wcc.status == NICMR_WC_SUCCESS);
		ASSERT_EQ(ok, 1) << "round " << round;
		const nicmr_wc &lost = wa.status == NICMR_WC_SUCCESS ? wcc : wa;
		expect_remote_access(lost);
		if (wa.status == NICMR_WC_SUCCESS)
			recover(qc, qd);
		else
			recover(qa, qb);
		ASSERT_EQ(nicmr_mr_dereg(mr), 0);
	}
}

TEST_F(ExtPath, RmaEventMrCountsEveryRemoteWriteExactly)
{
	const nicmr_device_stats before = stats(dev);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, NICMR_MR_RMA_EVENT, 0, &mr), 0);
	const uint32_t kb = nicmr_mr_key(mr);
	/* Created disabled: lookups say revoked, the device refuses it. */
	EXPECT_EQ(lookup(kb, b, 64), -EKEYREVOKED);
	EXPECT_EQ(ext_state(kb).flags, prm::mkey_ext::disabled);
	std::memset(b, 0, kLen);
	expect_remote_access(write(qa, cqa, b, kb, 0, 64));
	EXPECT_EQ(b[0], 0);
	recover(qa, qb);

	nicmr_cntr *c = nullptr;
	ASSERT_EQ(nicmr_cntr_alloc(dev, &c), 0);
	EXPECT_EQ(nicmr_cntr_read(c), 0u);
	EXPECT_EQ(stats(dev).cntrs, before.cntrs + 1);
	ASSERT_EQ(nicmr_mr_bind_cntr(mr, c, NICMR_REMOTE_WRITE), 0);
	EXPECT_EQ(nicmr_mr_bind_cntr(mr, c, NICMR_REMOTE_WRITE), -EBUSY) << "one counter per MR";
	/* Still disabled until enabled. */
	expect_remote_access(write(qa, cqa, b, kb, 0, 64));
	recover(qa, qb);
	EXPECT_EQ(nicmr_cntr_read(c), 0u);
	ASSERT_EQ(nicmr_mr_enable(mr), 0);
	EXPECT_EQ(lookup(kb, b, 64), 0);
	const mlx5::MkeyExtState st = ext_state(kb);
	EXPECT_EQ(st.flags, prm::mkey_ext::counter);
	EXPECT_EQ(st.counter_iova, c->block.iova);

	/* Bindings after enable are refused; so is a second enable. */
	EXPECT_EQ(nicmr_mr_bind_cntr(mr, c, NICMR_REMOTE_WRITE), -EBUSY);
	EXPECT_EQ(nicmr_mr_enable(mr), -EBUSY);

	/* 37 writes of distinct bytes, from two QPs: each counted once, each byte landed. */
	for (size_t i = 0; i < kLen; i++)
		a[i] = static_cast<char>(i * 31 + 5);
	for (size_t i = 0; i < 37; i++) {
		nicmr_qp *q = i % 2 ? qc : qa;
		nicmr_cq *cq = i % 2 ? cqc : cqa;
		nicmr_wc wc = write(q, cq, b, kb, i * 1024, 1024);
		ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << i;
		EXPECT_EQ(nicmr_cntr_read(c), i + 1);
	}
	EXPECT_EQ(std::memcmp(a, b, 37 * 1024), 0);
	EXPECT_EQ(b[37 * 1024], 0) << "nothing beyond the writes";

	/* Reads of it and local use of its key are not counted. */
	ASSERT_EQ(nicmr_post_read(qa, u(a) + 60000, 512, ka, u(b), kb, 1, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	ASSERT_EQ(nicmr_post_write(qa, u(b), 256, kb, u(a) + 50000, ka, 2, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(nicmr_cntr_read(c), 37u);
	/* Atomics modify it: counted. */
	ASSERT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(b) + 40000, kb, 5, 3, NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	ASSERT_EQ(nicmr_post_atomic_cswap(qa, u(a), ka, u(b) + 40000, kb, 0, 9, 4,
					  NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(nicmr_cntr_read(c), 39u);
	/* A refused write is not counted. */
	EXPECT_EQ(nicmr_post_write(qa, u(a), 64, ka, u(b) + kLen - 32, kb, 5, NICMR_SEND_SIGNALED),
		  0);
	expect_remote_access(wait(cqa));
	recover(qa, qb);
	EXPECT_EQ(nicmr_cntr_read(c), 39u);

	/* Closing with a bound counter is busy, both ways (fi_mr(3)). */
	EXPECT_EQ(nicmr_mr_dereg(mr), -EBUSY);
	EXPECT_EQ(nicmr_cntr_free(c), -EBUSY);
	EXPECT_EQ(nicmr_device_close(dev), -EBUSY);
	EXPECT_EQ(write(qa, cqa, b, kb, 0, 8).status, NICMR_WC_SUCCESS) << "still registered";
	EXPECT_EQ(nicmr_cntr_read(c), 40u);

	/* Unbinding disables it again. */
	ASSERT_EQ(nicmr_mr_unbind_cntr(mr), 0);
	EXPECT_EQ(nicmr_mr_unbind_cntr(mr), -ENOENT);
	EXPECT_EQ(lookup(kb, b, 64), -EKEYREVOKED);
	expect_remote_access(write(qa, cqa, b, kb, 0, 8));
	recover(qa, qb);
	EXPECT_EQ(nicmr_cntr_read(c), 40u);
	ASSERT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(ext_state(kb).flags, 0u);
	ASSERT_EQ(nicmr_cntr_free(c), 0);
	expect_released(before, stats(dev));
	EXPECT_EQ(stats(dev).cntrs, before.cntrs);
}

TEST_F(ExtPath, RmaEventMrWithoutCounterIsEnabledAndNotCounted)
{
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, NICMR_MR_RMA_EVENT, 0, &mr), 0);
	ASSERT_EQ(nicmr_mr_enable(mr), 0);
	EXPECT_EQ(write(qa, cqa, b, nicmr_mr_key(mr), 0, 64).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(ext_state(nicmr_mr_key(mr)).flags, 0u);
	ASSERT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_F(ExtPath, EveryRefusalHasItsCodeAndLeavesNothing)
{
	const nicmr_device_stats before = stats(dev);
	nicmr_mr *mr = nullptr;
	/* A window's rkey would bypass single use and counting. */
	EXPECT_EQ(
		nicmr_mr_reg(pd, b, kLen, kAll | NICMR_ACCESS_MW_BIND, NICMR_MR_SINGLE_USE, 0, &mr),
		-EINVAL);
	EXPECT_EQ(
		nicmr_mr_reg(pd, b, kLen, kAll | NICMR_ACCESS_MW_BIND, NICMR_MR_RMA_EVENT, 0, &mr),
		-EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, uint64_t{1} << 9, 0, &mr), -EOPNOTSUPP);
	/* Vectored registration does not take the flags. */
	iovec iov{b, 4096};
	EXPECT_EQ(nicmr_mr_regv(pd, &iov, 1, kAll, NICMR_MR_SINGLE_USE, 0, &mr), -EOPNOTSUPP);
	expect_same(before, stats(dev));

	nicmr_cntr *c = nullptr;
	EXPECT_EQ(nicmr_cntr_alloc(nullptr, &c), -EINVAL);
	EXPECT_EQ(nicmr_cntr_alloc(dev, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_cntr_free(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_cntr_read(nullptr), 0u);
	ASSERT_EQ(nicmr_cntr_alloc(dev, &c), 0);

	/* Sub-MRs of a single-use or RMA-event MR would have keys of their own. */
	nicmr_mr *su = nullptr, *ev = nullptr, *sub = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, b, 4096, kAll, NICMR_MR_SINGLE_USE, 0, &su), 0);
	ASSERT_EQ(nicmr_mr_reg(pd, b + 4096, 4096, kAll, NICMR_MR_RMA_EVENT, 0, &ev), 0);
	EXPECT_EQ(nicmr_mr_reg_sub(su, 0, 64, kAll, 0, 0, &sub), -EOPNOTSUPP);
	ASSERT_EQ(nicmr_mr_enable(ev), 0);
	EXPECT_EQ(nicmr_mr_reg_sub(ev, 0, 64, kAll, 0, 0, &sub), -EOPNOTSUPP);

	EXPECT_EQ(nicmr_mr_bind_cntr(nullptr, c, NICMR_REMOTE_WRITE), -EINVAL);
	EXPECT_EQ(nicmr_mr_bind_cntr(ev, nullptr, NICMR_REMOTE_WRITE), -EINVAL);
	EXPECT_EQ(nicmr_mr_bind_cntr(ev, c, 0), -EINVAL);
	EXPECT_EQ(nicmr_mr_bind_cntr(ev, c, NICMR_REMOTE_WRITE | 2), -EINVAL);
	EXPECT_EQ(nicmr_mr_bind_cntr(su, c, NICMR_REMOTE_WRITE), -EINVAL) << "not RMA-event";
	EXPECT_EQ(nicmr_mr_bind_cntr(mra, c, NICMR_REMOTE_WRITE), -EINVAL);
	EXPECT_EQ(nicmr_mr_bind_cntr(ev, c, NICMR_REMOTE_WRITE), -EBUSY) << "enabled";
	EXPECT_EQ(nicmr_mr_enable(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_enable(su), -EINVAL);
	EXPECT_EQ(nicmr_mr_unbind_cntr(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_unbind_cntr(su), -EINVAL);
	EXPECT_EQ(nicmr_mr_unbind_cntr(ev), -ENOENT);

	/* A counter of another device. */
	nicmr_device *other = nullptr;
	ASSERT_EQ(nicmr_device_open(kSpec, &other), 0);
	nicmr_cntr *oc = nullptr;
	ASSERT_EQ(nicmr_cntr_alloc(other, &oc), 0);
	nicmr_mr *ev2 = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, b + 8192, 4096, kAll, NICMR_MR_RMA_EVENT, 0, &ev2), 0);
	EXPECT_EQ(nicmr_mr_bind_cntr(ev2, oc, NICMR_REMOTE_WRITE), -EINVAL);
	EXPECT_EQ(nicmr_device_close(other), -EBUSY) << "a counter lives";
	ASSERT_EQ(nicmr_cntr_free(oc), 0);
	EXPECT_EQ(nicmr_device_close(other), 0);

	for (nicmr_mr *m : {su, ev, ev2})
		EXPECT_EQ(nicmr_mr_dereg(m), 0);
	EXPECT_EQ(nicmr_cntr_free(c), 0);
	expect_released(before, stats(dev));
}

TEST_F(ExtPath, CppHandlesFreeCountersAndDeregisterMrs)
{
	const nicmr_device_stats before = stats(dev);
	{
		CntrPtr c;
		ASSERT_EQ(alloc_cntr(dev, &c), 0);
		MrPtr mr;
		ASSERT_EQ(reg_mr(pd, b, 4096, kAll, &mr, NICMR_MR_RMA_EVENT), 0);
		ASSERT_EQ(nicmr_mr_bind_cntr(mr.get(), c.get(), NICMR_REMOTE_WRITE), 0);
		ASSERT_EQ(nicmr_mr_enable(mr.get()), 0);
		EXPECT_EQ(write(qa, cqa, b, nicmr_mr_key(mr.get()), 0, 64).status,
			  NICMR_WC_SUCCESS);
		EXPECT_EQ(nicmr_cntr_read(c.get()), 1u);
		ASSERT_EQ(nicmr_mr_unbind_cntr(mr.get()), 0);
		EXPECT_EQ(stats(dev).cntrs, before.cntrs + 1);
	}
	expect_released(before, stats(dev));
	EXPECT_EQ(stats(dev).cntrs, before.cntrs);
}

TEST_F(ExtPath, SpecOptionExtIsParsed)
{
	nicmr_device *d = nullptr;
	EXPECT_EQ(nicmr_device_open("emu:mkeys=1024,ext=2", &d), -EINVAL);
	EXPECT_EQ(nicmr_device_open("emu:mkeys=1024,ext=", &d), -EINVAL);
}

/* A device without extensions (emu ext=0, as a ConnectX): the calls say -EOPNOTSUPP. */
class NoExt : public ApiFixture {
protected:
	const char *spec() const override { return "emu:mkeys=1024,ext=0"; }
};

TEST_F(NoExt, ExtensionCallsAreEopnotsuppAndLeaveNothing)
{
	nicmr_device_attr attr{};
	ASSERT_EQ(nicmr_device_query(dev, &attr), 0);
	EXPECT_EQ(attr.extensions, 0u);
	EXPECT_EQ(attr.ext_flags, 0u);
	EXPECT_FALSE(dev->drv->caps().ext_present);
	const nicmr_device_stats before = stats(dev);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, NICMR_MR_SINGLE_USE, 0, &mr), -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, NICMR_MR_RMA_EVENT, 0, &mr), -EOPNOTSUPP);
	nicmr_cntr *c = nullptr;
	EXPECT_EQ(nicmr_cntr_alloc(dev, &c), -EOPNOTSUPP);
	expect_same(before, stats(dev));
	EXPECT_EQ(stats(dev).cntrs, 0u);
	/* The driver sends nothing either. */
	mlx5::MkeyExtState st;
	st.flags = prm::mkey_ext::single_use;
	EXPECT_EQ(dev->drv->set_mkey_ext(1, st), -EOPNOTSUPP);
	EXPECT_EQ(dev->drv->query_mkey_ext(1, &st), -EOPNOTSUPP);
	/* A plain MR still works. */
	ASSERT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, 0, 0, &mr), 0);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

/* Only single-use keys (emu ext=single_use): RMA events are refused. */
class SingleUseOnly : public ApiFixture {
protected:
	const char *spec() const override { return "emu:mkeys=1024,ext=single_use"; }
};

TEST_F(SingleUseOnly, RmaEventIsEopnotsuppAndSingleUseWorks)
{
	nicmr_device_attr attr{};
	ASSERT_EQ(nicmr_device_query(dev, &attr), 0);
	EXPECT_EQ(attr.ext_flags, NICMR_EXT_SINGLE_USE);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, NICMR_MR_RMA_EVENT, 0, &mr), -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, NICMR_MR_SINGLE_USE | NICMR_MR_RMA_EVENT, 0,
			       &mr),
		  -EOPNOTSUPP);
	nicmr_cntr *c = nullptr;
	EXPECT_EQ(nicmr_cntr_alloc(dev, &c), -EOPNOTSUPP);
	ASSERT_EQ(nicmr_mr_reg(pd, base, 4096, kAll, NICMR_MR_SINGLE_USE, 0, &mr), 0);
	mlx5::MkeyExtState st;
	st.flags = prm::mkey_ext::disabled;
	EXPECT_EQ(dev->drv->set_mkey_ext(nicmr_mr_key(mr) >> 8, st), -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

} // namespace
} // namespace nicmr::test
