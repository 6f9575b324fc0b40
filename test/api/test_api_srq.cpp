/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared receive queues through the native API: three receiver QPs on port 2 share one SRQ and
 * take the SENDs of three senders on port 1 in the SRQ's order, WQEs come back for new posts
 * once their completions are polled, an empty SRQ holds the sender (RNR) until a receive is
 * posted, and every refused argument has its code.
 */
#include <sys/mman.h>

#include <cstring>

#include "api_wiring.h"
#include "emu_mlx5.h"
#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;
constexpr int kQps = 3;

class Srq : public ApiFixture {
protected:
	void SetUp() override
	{
		ApiFixture::SetUp();
		nicmr_srq_attr sa{};
		sa.depth = 4;
		sa.max_sge = 2;
		ASSERT_EQ(nicmr_srq_create(pd, &sa, &srq), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &scq), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &rcq), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &bcq), 0);
		for (int i = 0; i < kQps; i++) {
			nicmr_qp_attr at{};
			at.port = 1;
			at.send_cq = scq;
			at.depth = 8;
			ASSERT_EQ(nicmr_qp_create_attr(pd, &at, &snd[i]), 0);
			at.port = 2;
			at.send_cq = bcq;
			at.recv_cq = rcq;
			at.srq = srq;
			ASSERT_EQ(nicmr_qp_create_attr(pd, &at, &rcv[i]), 0);
			ASSERT_EQ(nicmr_qp_connect(snd[i], 2, nicmr_qp_num(rcv[i])), 0);
			ASSERT_EQ(nicmr_qp_connect(rcv[i], 1, nicmr_qp_num(snd[i])), 0);
		}
		a = base;
		b = base + kLen;
		ASSERT_EQ(nicmr_mr_reg(pd, a, kLen, kAll, 0, 0, &mra), 0);
		ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, 0, 0, &mrb), 0);
		ka = nicmr_mr_key(mra);
		kb = nicmr_mr_key(mrb);
		for (size_t i = 0; i < kLen; i++)
			a[i] = static_cast<char>(i * 13 + 5);
		std::memset(b, 0, kLen);
	}
	void TearDown() override
	{
		for (nicmr_mr *m : {mra, mrb})
			if (m) {
				EXPECT_EQ(nicmr_mr_dereg(m), 0);
			}
		destroy_queues({snd[0], snd[1], snd[2], rcv[0], rcv[1], rcv[2]}, {});
		if (srq) {
			EXPECT_EQ(nicmr_srq_destroy(srq), 0);
		}
		destroy_queues({}, {scq, rcq, bcq});
		ApiFixture::TearDown();
	}
	/* A receive of 1 KiB at b + slot KiB. */
	int post(uint32_t slot, uint64_t wr_id)
	{
		const nicmr_sge sg{u(b) + slot * 1024u, 1024, kb};
		return nicmr_srq_post_recv(srq, &sg, 1, wr_id);
	}
	nicmr_srq *srq = nullptr;
	nicmr_cq *scq = nullptr, *rcq = nullptr, *bcq = nullptr;
	nicmr_qp *snd[kQps] = {}, *rcv[kQps] = {};
	nicmr_mr *mra = nullptr, *mrb = nullptr;
	char *a = nullptr, *b = nullptr;
	uint32_t ka = 0, kb = 0;
};

TEST_F(Srq, SeveralQpsTakeTheSendsOfSeveralSendersInTheSrqsOrder)
{
	for (uint32_t i = 0; i < kQps; i++)
		ASSERT_EQ(post(i, 100 + i), 0);
	/* Senders 2, 0, 1 in that order: the receives go in the SRQ's order all the same. */
	const int order[kQps] = {2, 0, 1};
	for (int k = 0; k < kQps; k++) {
		const int s = order[k];
		ASSERT_EQ(nicmr_post_send(snd[s], u(a) + s * 100u, 50u + s, ka, 0, s,
					  NICMR_SEND_SIGNALED),
			  0);
		nicmr_wc wc = wait_wc(rcq);
		EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, NICMR_WC_RECV);
		EXPECT_EQ(wc.wr_id, 100u + k) << "the SRQ's k-th receive";
		EXPECT_EQ(wc.qp_num, nicmr_qp_num(rcv[s])) << "the QP that took it";
		EXPECT_EQ(wc.byte_len, 50u + s);
		EXPECT_EQ(std::memcmp(b + k * 1024, a + s * 100, 50 + s), 0);
		EXPECT_EQ(b[k * 1024 + 50 + s], 0);
		wc = wait_wc(scq);
		EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
		EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(s));
	}
}

TEST_F(Srq, WqesComeBackForNewPostsOnceTheirCompletionsArePolled)
{
	for (uint32_t i = 0; i < 4; i++)
		ASSERT_EQ(post(i, i), 0);
	EXPECT_EQ(post(9, 9), -ENOSPC) << "depth 4 posted";
	/* Forty messages through a queue of four, each receive reposted as it completes. */
	uint64_t next = 4;
	for (int m = 0; m < 40; m++) {
		const int s = m % kQps;
		const uint32_t len = 10u + static_cast<uint32_t>(m);
		ASSERT_EQ(nicmr_post_send(snd[s], u(a) + m, len, ka, 0, m, NICMR_SEND_SIGNALED), 0);
		EXPECT_EQ(wait_wc(scq).status, NICMR_WC_SUCCESS);
		const nicmr_wc wc = wait_wc(rcq);
		ASSERT_EQ(wc.status, NICMR_WC_SUCCESS) << m;
		EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(m)) << "in posting order";
		EXPECT_EQ(wc.byte_len, len);
		const uint32_t slot = static_cast<uint32_t>(wc.wr_id % 10);
		EXPECT_EQ(std::memcmp(b + slot * 1024, a + m, len), 0) << m;
		EXPECT_EQ(post(static_cast<uint32_t>(next % 10), next), 0) << m;
		EXPECT_EQ(post(99, 99), -ENOSPC) << "full again";
		next++;
	}
}

TEST_F(Srq, WriteWithImmediateTakesAnSrqReceiveForItsImmediate)
{
	ASSERT_EQ(post(0, 41), 0);
	ASSERT_EQ(nicmr_post_write_imm(snd[2], u(a), 3000, ka, u(b) + 20000, kb, 0xfeed, 5,
				       NICMR_SEND_SIGNALED),
		  0);
	const nicmr_wc wc = wait_wc(rcq);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.opcode, NICMR_WC_RECV_RDMA_WITH_IMM);
	EXPECT_EQ(wc.wr_id, 41u);
	EXPECT_EQ(wc.imm, 0xfeedu);
	EXPECT_EQ(wc.byte_len, 3000u);
	EXPECT_EQ(wc.qp_num, nicmr_qp_num(rcv[2]));
	EXPECT_EQ(std::memcmp(b + 20000, a, 3000), 0);
	EXPECT_EQ(b[0], 0) << "the receive's buffer takes nothing";
	EXPECT_EQ(wait_wc(scq).status, NICMR_WC_SUCCESS);
}

TEST_F(Srq, AnEmptySrqHoldsTheSenderUntilAReceiveIsPosted)
{
	ASSERT_EQ(nicmr_post_send(snd[0], u(a), 64, ka, 0, 1, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc{};
	for (int i = 0; i < 100; i++) {
		EXPECT_EQ(nicmr_cq_poll(rcq, &wc, 1), 0) << "no receive to take";
		EXPECT_EQ(nicmr_cq_poll(scq, &wc, 1), 0) << "the SEND waits (RNR)";
	}
	ASSERT_EQ(post(0, 7), 0);
	ASSERT_EQ(post(1, 8), 0);
	/* The loopback retries a held WQE when its QP next runs: the next post. */
	ASSERT_EQ(nicmr_post_send(snd[0], u(a) + 64, 32, ka, 0, 2, NICMR_SEND_SIGNALED), 0);
	wc = wait_wc(rcq);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.wr_id, 7u);
	EXPECT_EQ(wc.byte_len, 64u);
	wc = wait_wc(rcq);
	EXPECT_EQ(wc.wr_id, 8u);
	EXPECT_EQ(wc.byte_len, 32u);
	EXPECT_EQ(std::memcmp(b, a, 64), 0);
	EXPECT_EQ(std::memcmp(b + 1024, a + 64, 32), 0);
	EXPECT_EQ(wait_wc(scq).wr_id, 1u);
	EXPECT_EQ(wait_wc(scq).wr_id, 2u);
}

TEST_F(Srq, AMessageLongerThanTheReceiveFailsBothEnds)
{
	ASSERT_EQ(post(0, 5), 0);
	ASSERT_EQ(nicmr_post_send(snd[1], u(a), 2000, ka, 0, 1, 0), 0);
	nicmr_wc wc = wait_wc(rcq);
	EXPECT_EQ(wc.status, NICMR_WC_LOCAL_LEN);
	EXPECT_EQ(wc.wr_id, 5u);
	EXPECT_EQ(wc.qp_num, nicmr_qp_num(rcv[1]));
	wc = wait_wc(scq);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_INVAL_REQ);
	/* The other QPs go on taking from the SRQ. */
	ASSERT_EQ(post(1, 6), 0);
	ASSERT_EQ(nicmr_post_send(snd[2], u(a), 100, ka, 0, 2, 0), 0);
	wc = wait_wc(rcq);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.wr_id, 6u);
	EXPECT_EQ(wc.qp_num, nicmr_qp_num(rcv[2]));
}

TEST_F(Srq, DestroyWhileAQpUsesItIsBusy)
{
	EXPECT_EQ(nicmr_srq_destroy(srq), -EBUSY);
	for (nicmr_qp *&q : rcv) {
		EXPECT_EQ(nicmr_srq_destroy(srq), -EBUSY);
		ASSERT_EQ(nicmr_qp_destroy(q), 0);
		q = nullptr;
	}
	EXPECT_EQ(nicmr_srq_destroy(srq), 0);
	srq = nullptr;
}

TEST_F(Srq, RefusedArguments)
{
	nicmr_srq_attr sa{};
	nicmr_srq *s = nullptr;
	sa.depth = 4;
	sa.max_sge = 1;
	EXPECT_EQ(nicmr_srq_create(nullptr, &sa, &s), -EINVAL);
	EXPECT_EQ(nicmr_srq_create(pd, nullptr, &s), -EINVAL);
	EXPECT_EQ(nicmr_srq_create(pd, &sa, nullptr), -EINVAL);
	sa.depth = 0;
	EXPECT_EQ(nicmr_srq_create(pd, &sa, &s), -EINVAL);
	sa.depth = NICMR_MAX_SRQ_DEPTH + 1;
	EXPECT_EQ(nicmr_srq_create(pd, &sa, &s), -EINVAL);
	sa.depth = 4;
	sa.max_sge = 0;
	EXPECT_EQ(nicmr_srq_create(pd, &sa, &s), -EINVAL);
	sa.max_sge = NICMR_MAX_SRQ_SGE + 1;
	EXPECT_EQ(nicmr_srq_create(pd, &sa, &s), -EINVAL);
	EXPECT_EQ(s, nullptr);
	/* The deepest SRQ the default device allows (2^15 WQEs, one the list's spare). */
	sa.depth = NICMR_MAX_SRQ_DEPTH;
	sa.max_sge = 1;
	ASSERT_EQ(nicmr_srq_create(pd, &sa, &s), 0);
	EXPECT_NE(nicmr_srq_num(s), 0u);
	EXPECT_NE(nicmr_srq_num(s), nicmr_srq_num(srq));
	EXPECT_EQ(nicmr_srq_destroy(s), 0);
	EXPECT_EQ(nicmr_srq_destroy(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_srq_num(nullptr), 0u);

	const nicmr_sge sg[3] = {{u(b), 8, kb}, {u(b), 8, kb}, {u(b), 8, kb}};
	EXPECT_EQ(nicmr_srq_post_recv(nullptr, sg, 1, 0), -EINVAL);
	EXPECT_EQ(nicmr_srq_post_recv(srq, nullptr, 1, 0), -EINVAL);
	EXPECT_EQ(nicmr_srq_post_recv(srq, sg, 3, 0), -EINVAL) << "above max_sge";
	const nicmr_sge bad{u(b), 8, kb ^ 0x1};
	EXPECT_EQ(nicmr_srq_post_recv(srq, &bad, 1, 0), -ENOKEY);
	EXPECT_EQ(nicmr_post_recv(rcv[0], sg, 1, 0), -ENOTSUP) << "its receives are the SRQ's";

	/* A QP with an SRQ takes no receive queue of its own, nor another PD's SRQ. */
	nicmr_qp_attr at{};
	at.port = 2;
	at.send_cq = bcq;
	at.recv_cq = rcq;
	at.depth = 8;
	at.srq = srq;
	at.recv_depth = 4;
	at.max_recv_sge = 1;
	nicmr_qp *q = nullptr;
	EXPECT_EQ(nicmr_qp_create_attr(pd, &at, &q), -EINVAL);
	at.recv_depth = 0;
	EXPECT_EQ(nicmr_qp_create_attr(pd, &at, &q), -EINVAL) << "max_recv_sge with an SRQ";
	at.max_recv_sge = 0;
	nicmr_pd *pd2 = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd2), 0);
	EXPECT_EQ(nicmr_qp_create_attr(pd2, &at, &q), -EINVAL) << "the SRQ is another PD's";
	EXPECT_EQ(q, nullptr);
	EXPECT_EQ(nicmr_pd_free(pd2), 0);
	/* A receive CQ smaller than the SRQ and the send queue it shares with. */
	nicmr_cq *small = nullptr;
	ASSERT_EQ(nicmr_cq_create(dev, 8, &small), 0);
	at.send_cq = small;
	at.recv_cq = small;
	EXPECT_EQ(nicmr_qp_create_attr(pd, &at, &q), -EINVAL);
	EXPECT_EQ(nicmr_cq_destroy(small), 0);
}

/* On-demand receive buffers: the device raises an SRQ WQE's page fault (type 0, the SRQ's
 * number, Linux odp.c MLX5_WQE_PF_TYPE_RMP) and the fault service reads the WQE back from the
 * SRQ (doc/odp.md). */
class SrqOdp : public Srq {
protected:
	const char *spec() const override { return "emu:mkeys=1024,mkey_by_name=1"; }
	emu::DpStats dp() { return dev->emu->device().data_path().stats(); }
};

TEST_F(SrqOdp, ASendIntoPagesNeverAdvisedIsServedFromTheSrqsWqe)
{
	constexpr size_t kPage = 4096;
	Untouched m(4 * kPage);
	ASSERT_NE(m.get(), nullptr);
	nicmr_mr *odp = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	const auto f0 = dp();
	/* The SRQ's second WQE is the one that faults: the first is in present memory. */
	ASSERT_EQ(post(0, 1), 0);
	const nicmr_sge sg{u(m.get()) + kPage, uint32_t(2 * kPage), key};
	ASSERT_EQ(nicmr_srq_post_recv(srq, &sg, 1, 2), 0);
	ASSERT_EQ(nicmr_post_send(snd[0], u(a), 10, ka, 0, 10, 0), 0);
	EXPECT_EQ(wait_wc(rcq).wr_id, 1u);
	ASSERT_EQ(nicmr_post_send(snd[1], u(a), 2 * kPage - 100, ka, 0, 11, NICMR_SEND_SIGNALED),
		  0);
	/* The sender's poll finds its CQ empty while the fault waits and serves it. */
	const nicmr_wc s = wait_wc(scq);
	EXPECT_EQ(s.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(s.wr_id, 11u);
	const nicmr_wc r = wait_wc(rcq);
	EXPECT_EQ(r.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(r.wr_id, 2u);
	EXPECT_EQ(r.qp_num, nicmr_qp_num(rcv[1]));
	EXPECT_EQ(r.byte_len, 2 * kPage - 100);
	EXPECT_EQ(std::memcmp(m.get() + kPage, a, 2 * kPage - 100), 0);
	const auto f1 = dp();
	EXPECT_EQ(f1.page_faults, f0.page_faults + 1);
	EXPECT_EQ(f1.pf_resumes, f0.pf_resumes + 1);
	EXPECT_EQ(f1.pf_errors, f0.pf_errors) << "served, not resumed with an error";
	EXPECT_EQ(dev->emu->device().data_path().page_faults_outstanding(), 0u);
	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
}

TEST_F(SrqOdp, AnSrqReceiveIntoUnmappedMemoryFailsItsQpAloneAndWritesNothing)
{
#if defined(__SANITIZE_ADDRESS__)
	GTEST_SKIP() << "AddressSanitizer's allocator maps its own memory into the freed range, "
			"so the range cannot be kept unmapped";
#endif
	constexpr size_t kPage = 4096;
	/* A one-page hole between mapped pages: pages 0 and 2 stay mapped, page 1 is gone. */
	void *p = mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
	ASSERT_NE(p, MAP_FAILED);
	char *c = static_cast<char *>(p);
	nicmr_mr *odp = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, c, 3 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	ASSERT_EQ(munmap(c + kPage, kPage), 0);
	std::memset(c, 0x3c, kPage);
	const auto f0 = dp();
	const nicmr_sge sg{u(c) + kPage + 64, 512, nicmr_mr_key(odp)};
	ASSERT_EQ(nicmr_srq_post_recv(srq, &sg, 1, 0x99), 0);
	ASSERT_EQ(post(1, 0x9a), 0);
	ASSERT_EQ(nicmr_post_send(snd[0], u(a), 256, ka, 0, 5, NICMR_SEND_SIGNALED), 0);
	/* The sender: the receiver's remote operational error (a receive key refused). */
	const nicmr_wc s = wait_wc(scq);
	EXPECT_EQ(s.status, NICMR_WC_REMOTE_OP);
	EXPECT_EQ(s.syndrome, 0x14);
	/* The receiver that took the WQE: the local access error, its QP in ERR. */
	nicmr_wc r = wait_wc(rcq);
	EXPECT_EQ(r.wr_id, 0x99u);
	EXPECT_EQ(r.qp_num, nicmr_qp_num(rcv[0]));
	EXPECT_EQ(r.status, NICMR_WC_LOCAL_ACCESS);
	EXPECT_EQ(r.syndrome, 0x11);
	uint32_t st = 0;
	ASSERT_EQ(nicmr_qp_state(rcv[0], &st), 0);
	EXPECT_EQ(st, uint32_t{NICMR_QP_ERR});
	const auto f1 = dp();
	EXPECT_EQ(f1.page_faults, f0.page_faults + 1);
	EXPECT_EQ(f1.pf_errors, f0.pf_errors + 1);
	for (size_t i = 0; i < kPage; i++)
		ASSERT_EQ(c[i], 0x3c) << i;
	/* The SRQ's next WQE is not flushed with that QP: another QP takes it. */
	ASSERT_EQ(nicmr_post_send(snd[1], u(a), 100, ka, 0, 6, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait_wc(scq).status, NICMR_WC_SUCCESS);
	r = wait_wc(rcq);
	EXPECT_EQ(r.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(r.wr_id, 0x9au);
	EXPECT_EQ(r.qp_num, nicmr_qp_num(rcv[1]));
	EXPECT_EQ(std::memcmp(b + 1024, a, 100), 0);
	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
	munmap(c, kPage);
	munmap(c + 2 * kPage, kPage);
}

} // namespace
} // namespace nicmr::test
