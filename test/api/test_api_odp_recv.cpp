/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Page faults of a receive WQE (doc/odp.md, "Page faults", the receive case): a SEND or a SEND
 * with immediate into an on-demand receive buffer whose pages are not present raises the
 * responder's WQE page fault (type MLX5_WQE_PF_TYPE_RESP, the receive WQE's index), the
 * requester waits, the driver reads the receive WQE back from the RQ, makes its pages present
 * for writing and resumes, and the message lands byte for byte; a receive into memory the
 * process no longer maps completes in error (NICMR_WC_LOCAL_ACCESS, syndrome 0x11) with
 * nothing written and the requester hears NICMR_WC_REMOTE_OP (0x14). Between port 1 and port 2
 * of one emulated device (the loopback); the wire is in test_api_wire.cpp.
 */
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "api_wiring.h"
#include "emu_mlx5.h"
#include "test_api_util.h"

namespace nicmr::test {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizedMlock = true;
#else
constexpr bool kSanitizedMlock = false;
#endif

constexpr size_t kPage = 4096;
constexpr size_t kLen = 64 << 10;

/* QP a (port 1) sends to QP b (port 2), whose receives complete on rcq. */
class OdpRecv : public ApiFixture {
protected:
	const char *spec() const override { return "emu:mkeys=1024,mkey_by_name=1"; }
	void SetUp() override
	{
		ApiFixture::SetUp();
		if (HasFatalFailure())
			return;
		ASSERT_EQ(nicmr_cq_create(dev, 64, &cqa), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &cqb), 0);
		ASSERT_EQ(nicmr_cq_create(dev, 64, &rcq), 0);
		nicmr_qp_attr at{};
		at.port = 1;
		at.send_cq = cqa;
		at.depth = 16;
		at.recv_depth = 16;
		at.max_recv_sge = 4;
		ASSERT_EQ(nicmr_qp_create_attr(pd, &at, &qa), 0);
		at.port = 2;
		at.send_cq = cqb;
		at.recv_cq = rcq;
		ASSERT_EQ(nicmr_qp_create_attr(pd, &at, &qb), 0);
		ASSERT_EQ(nicmr_qp_connect(qa, 2, nicmr_qp_num(qb)), 0);
		ASSERT_EQ(nicmr_qp_connect(qb, 1, nicmr_qp_num(qa)), 0);
		a = base;
		ASSERT_EQ(nicmr_mr_reg(pd, a, kLen, kAll, 0, 0, &mra), 0);
		ka = nicmr_mr_key(mra);
		for (size_t i = 0; i < kLen; i++)
			a[i] = static_cast<char>(i * 7 + (i >> 9) + 1);
	}
	void TearDown() override
	{
		for (nicmr_mr *m : {mra, odp})
			if (m) {
				EXPECT_EQ(nicmr_mr_dereg(m), 0);
			}
		destroy_queues({qa, qb}, {cqa, cqb, rcq});
		ApiFixture::TearDown();
	}
	emu::DpStats dp() { return dev->emu->device().data_path().stats(); }
	std::vector<mlx5::MttEntry> entries(uint32_t key, size_t n)
	{
		mlx5::MkeyQuery q;
		EXPECT_EQ(dev->drv->query_mkey(mr::mkey_index(key), n, &q), 0);
		EXPECT_GE(q.mtt.size(), n);
		q.mtt.resize(n);
		return q.mtt;
	}
	nicmr_device_stats stats()
	{
		nicmr_device_stats s{};
		EXPECT_EQ(nicmr_device_get_stats(dev, &s), 0);
		return s;
	}
	nicmr_cq *cqa = nullptr, *cqb = nullptr, *rcq = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	nicmr_mr *mra = nullptr, *odp = nullptr;
	char *a = nullptr;
	uint32_t ka = 0;
};

TEST_F(OdpRecv, SendIntoAReceiveBufferNeverAdvisedIsServedByAReceiveWqeFault)
{
	Untouched m(4 * kPage);
	ASSERT_NE(m.get(), nullptr);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	const auto before = stats();
	const auto f0 = dp();
	/* Pages 1 and 2 of the region: the receive WQE's one scatter entry. */
	nicmr_sge sg{u(m.get()) + kPage, uint32_t(2 * kPage), key};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 0x51), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a), 2 * kPage - 300, ka, 0, 1, NICMR_SEND_SIGNALED), 0);
	/* The requester's poll finds its CQ empty while the fault waits and serves it. */
	const nicmr_wc s = wait_wc(cqa);
	EXPECT_EQ(s.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(s.opcode, NICMR_WC_SEND);
	const nicmr_wc r = wait_wc(rcq);
	EXPECT_EQ(r.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(r.opcode, NICMR_WC_RECV);
	EXPECT_EQ(r.wr_id, 0x51u);
	EXPECT_EQ(r.byte_len, 2 * kPage - 300);
	EXPECT_EQ(std::memcmp(m.get() + kPage, a, 2 * kPage - 300), 0);
	const auto f1 = dp();
	EXPECT_EQ(f1.page_faults, f0.page_faults + 1);
	EXPECT_EQ(f1.pf_resumes, f0.pf_resumes + 1);
	EXPECT_EQ(f1.pf_errors, f0.pf_errors);
	EXPECT_EQ(dev->emu->device().data_path().page_faults_outstanding(), 0u);
	/* The receive WQE's whole scatter entry became present for writing, nothing else. */
	const auto e = entries(key, 4);
	for (size_t i = 0; i < 4; i++) {
		EXPECT_EQ(e[i].rd_en, i == 1 || i == 2) << i;
		EXPECT_EQ(e[i].wr_en, i == 1 || i == 2) << i;
	}
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 2);
	/* Present now: the next receive there raises no fault. */
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 0x52), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a) + 5, 100, ka, 0, 2, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wait_wc(rcq).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(m.get() + kPage, a + 5, 100), 0);
	EXPECT_EQ(dp().page_faults, f1.page_faults);
}

TEST_F(OdpRecv, SendWithImmediateIntoPagesNeverAdvisedLandsWithItsImmediate)
{
	Untouched m(2 * kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 2 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	const auto f0 = dp();
	/* Two scatter entries: the second one's page is the one the message reaches. */
	nicmr_sge sg[2] = {{u(a) + 12 * kPage, 64, ka}, {u(m.get()) + 8, 1000, key}};
	std::memset(a + 12 * kPage, 0, 64);
	ASSERT_EQ(nicmr_post_recv(qb, sg, 2, 0x77), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a), 64 + 900, ka, 0xfeedbeef, 3,
				  NICMR_SEND_SIGNALED | NICMR_SEND_IMM),
		  0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	const nicmr_wc r = wait_wc(rcq);
	EXPECT_EQ(r.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(r.opcode, NICMR_WC_RECV_IMM);
	EXPECT_EQ(r.imm, 0xfeedbeefu);
	EXPECT_EQ(r.wr_id, 0x77u);
	EXPECT_EQ(r.byte_len, 964u);
	EXPECT_EQ(std::memcmp(a + 12 * kPage, a, 64), 0);
	EXPECT_EQ(std::memcmp(m.get() + 8, a + 64, 900), 0);
	EXPECT_EQ(dp().page_faults, f0.page_faults + 1);
	const auto e = entries(key, 2);
	EXPECT_TRUE(e[0].rd_en && e[0].wr_en);
	EXPECT_FALSE(e[1].rd_en || e[1].wr_en);
}

TEST_F(OdpRecv, AReceiveSpanningAPresentPageAndOneNotPresentFaultsOnce)
{
	Untouched m(4 * kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	/* Page 1 present for writing, page 2 not. */
	nicmr_sge adv{u(m.get()) + kPage, uint32_t(kPage), key};
	ASSERT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				  NICMR_ADVISE_MR_FLAG_FLUSH, &adv, 1),
		  0);
	const auto before = stats();
	const auto f0 = dp();
	auto e = entries(key, 4);
	ASSERT_TRUE(e[1].wr_en);
	ASSERT_FALSE(e[2].rd_en || e[2].wr_en);
	/* 2 KiB in page 1, 2 KiB in page 2. */
	nicmr_sge sg{u(m.get()) + 2 * kPage - 2048, 4096, key};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 9), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a) + 100, 4096, ka, 0, 4, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	const nicmr_wc r = wait_wc(rcq);
	EXPECT_EQ(r.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(r.byte_len, 4096u);
	EXPECT_EQ(std::memcmp(m.get() + 2 * kPage - 2048, a + 100, 4096), 0);
	const auto f1 = dp();
	EXPECT_EQ(f1.page_faults, f0.page_faults + 1);
	EXPECT_EQ(f1.pf_errors, f0.pf_errors);
	e = entries(key, 4);
	EXPECT_TRUE(e[1].wr_en && e[2].wr_en && e[2].rd_en);
	EXPECT_FALSE(e[0].rd_en || e[3].rd_en);
	/* Only the page that was not present was pinned for the fault. */
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 1);
}

TEST_F(OdpRecv, AReceiveIntoUnmappedMemoryCompletesInErrorAndWritesNothing)
{
	if (kSanitizedMlock)
		GTEST_SKIP() << "AddressSanitizer's allocator maps its own memory into the freed "
				"range, so the range cannot be kept unmapped";
	/* A one-page hole between mapped pages: pages 0 and 2 stay mapped, page 1 is gone. */
	void *p = mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
	ASSERT_NE(p, MAP_FAILED);
	char *c = static_cast<char *>(p);
	ASSERT_EQ(nicmr_mr_reg(pd, c, 3 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	ASSERT_EQ(munmap(c + kPage, kPage), 0);
	std::memset(c, 0x3c, kPage);
	const uint32_t key = nicmr_mr_key(odp);
	const auto f0 = dp();
	nicmr_sge sg{u(c) + kPage + 64, 512, key};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 0x99), 0);
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 0x9a), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a), 256, ka, 0, 5, NICMR_SEND_SIGNALED), 0);
	/* The requester: the responder's remote operational error (a receive key refused). */
	const nicmr_wc s = wait_wc(cqa);
	EXPECT_EQ(s.status, NICMR_WC_REMOTE_OP);
	EXPECT_EQ(s.syndrome, 0x14);
	/* The responder: its receive completes with the local access error, the next one is
	 * flushed, and its QP is in ERR. */
	nicmr_wc r = wait_wc(rcq);
	EXPECT_EQ(r.wr_id, 0x99u);
	EXPECT_EQ(r.status, NICMR_WC_LOCAL_ACCESS);
	EXPECT_EQ(r.syndrome, 0x11);
	r = wait_wc(rcq);
	EXPECT_EQ(r.wr_id, 0x9au);
	EXPECT_EQ(r.status, NICMR_WC_WR_FLUSH);
	uint32_t st = 0;
	ASSERT_EQ(nicmr_qp_state(qb, &st), 0);
	EXPECT_EQ(st, uint32_t{NICMR_QP_ERR});
	const auto f1 = dp();
	EXPECT_EQ(f1.page_faults, f0.page_faults + 1);
	EXPECT_EQ(f1.pf_resumes, f0.pf_resumes + 1);
	EXPECT_EQ(f1.pf_errors, f0.pf_errors + 1);
	/* Nothing was made present or written. */
	for (const auto &x : entries(key, 3))
		EXPECT_FALSE(x.rd_en || x.wr_en);
	for (size_t i = 0; i < kPage; i++)
		ASSERT_EQ(c[i], 0x3c) << i;
	munmap(c, kPage);
	munmap(c + 2 * kPage, kPage);
}

TEST_F(OdpRecv, SendWithInvalidateFaultsFirstAndIsThenRefusedAsWithoutOnDemandPaging)
{
	/* The receive WQE's fault comes before the invalidation's check (the receive WQE is
	 * read first, as on the loopback without on-demand paging); once served, the peer
	 * refuses the native key as it always does (test_api_send.cpp). */
	Untouched m(kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	const auto f0 = dp();
	nicmr_sge sg{u(m.get()), 256, nicmr_mr_key(odp)};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 1), 0);
	ASSERT_EQ(nicmr_post_send(qa, u(a), 64, ka, ka, 6,
				  NICMR_SEND_SIGNALED | NICMR_SEND_INVALIDATE),
		  0);
	const nicmr_wc s = wait_wc(cqa);
	EXPECT_EQ(s.status, NICMR_WC_REMOTE_INVAL_REQ);
	const nicmr_wc r = wait_wc(rcq);
	EXPECT_EQ(r.status, NICMR_WC_REMOTE_INVAL_REQ);
	const auto f1 = dp();
	EXPECT_EQ(f1.page_faults, f0.page_faults + 1);
	EXPECT_EQ(f1.pf_errors, f0.pf_errors);
	/* Nothing landed: the refusal comes before a byte moves. */
	for (size_t i = 0; i < 64; i++)
		ASSERT_EQ(m.get()[i], 0) << i;
}

TEST_F(OdpRecv, WriteWithImmediateIntoPagesNeverAdvisedIsServedByAnRdmaFault)
{
	/* The bytes go to the rkey's range (an RDMA fault, as for RDMA WRITE); the receive WQE
	 * only takes the immediate. */
	Untouched m(2 * kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 2 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	const auto f0 = dp();
	nicmr_sge sg{u(a) + 14 * kPage, 16, ka};
	ASSERT_EQ(nicmr_post_recv(qb, &sg, 1, 0x31), 0);
	ASSERT_EQ(nicmr_post_write_imm(qa, u(a), 3000, ka, u(m.get()) + kPage + 16, key, 0xabcd, 7,
				       NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	const nicmr_wc r = wait_wc(rcq);
	EXPECT_EQ(r.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(r.opcode, NICMR_WC_RECV_RDMA_WITH_IMM);
	EXPECT_EQ(r.imm, 0xabcdu);
	EXPECT_EQ(r.wr_id, 0x31u);
	EXPECT_EQ(r.byte_len, 3000u);
	EXPECT_EQ(std::memcmp(m.get() + kPage + 16, a, 3000), 0);
	EXPECT_EQ(dp().page_faults, f0.page_faults + 1);
	const auto e = entries(key, 2);
	EXPECT_FALSE(e[0].rd_en || e[0].wr_en);
	EXPECT_TRUE(e[1].rd_en && e[1].wr_en);
}

} // namespace
} // namespace nicmr::test
