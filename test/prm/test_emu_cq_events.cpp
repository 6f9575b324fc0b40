/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CQ arming and completion events of the device model (emu_mlx5_cq_events.cpp), driven as
 * rdma-core's mlx5_arm_cq drives a ConnectX: the arm word in the CQ's doorbell record, then the
 * 64-bit doorbell at the UAR page's +0x20; completion EQEs (type 0x00, the CQN) on the CQ's EQ,
 * and the EQ's MSI-X vector on an eventfd once the EQ is armed at +0x40.
 */
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <thread>

#include "test_emu_dp_harness.h"

namespace nicmr::emu::test {
namespace {

constexpr uint32_t kVector = 5;

class EmuCqEvents : public ::testing::Test {
protected:
	void SetUp() override { make(DoorbellDelivery::inline_call); }
	void TearDown() override
	{
		if (b_)
			fn().set_msix_eventfd(kVector, -1);
		b_.reset();
		if (efd_ >= 0)
			close(efd_);
	}
	void make(DoorbellDelivery d)
	{
		EmuConfig cfg;
		cfg.delivery = d;
		b_ = std::make_unique<DpBed>(cfg);
		ASSERT_TRUE(b_->ok());
		DpBed &b = *b_;
		b.uar = b.alloc_uar();
		/* A completion EQ: no asynchronous event, its own vector, the QPs' UAR page. */
		ASSERT_EQ(b.create_eq(6, 0, b.uar, kVector).status(), prm::status::ok);
		ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
		ASSERT_EQ(b.create_cq(&b.cqb, 1, 6).status(), prm::status::ok);
		ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
		ASSERT_EQ(b.create_qp(&b.qb, 1, &b.cqb, b.uar).status(), prm::status::ok);
		b.connect(b.qa, 1, b.qb.qpn);
		b.connect(b.qb, 2, b.qa.qpn);
		if (efd_ < 0)
			efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		ASSERT_GE(efd_, 0);
		ASSERT_EQ(fn().set_msix_eventfd(kVector, efd_), 0);
	}
	DpBed &b() { return *b_; }
	EmuFunction &fn() { return b_->h().emu().emu_function(); }

	/* rdma-core mlx5_arm_cq: the record's arm word, then the UAR doorbell (word 0 the same,
	 * word 1 the CQN), both big-endian. */
	void arm(TestCq &cq, bool solicited, uint32_t sn = 0)
	{
		const uint32_t word =
			htobe32(sn << 28 | (solicited ? 1u << 24 : 0u) | (cq.ci & 0xffffff));
		std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t *>(b().at(cq.dbr_off + 4)))
			.store(word, std::memory_order_release);
		const uint32_t w[2] = {word, htobe32(cq.cqn)};
		uint64_t v;
		std::memcpy(&v, w, sizeof(v));
		fn().bar0_write64(prm::uar::page_offset(b().uar) + 0x20, v);
	}
	/* The EQ's update-and-arm doorbell with the consumer index poll_eq reached. */
	void arm_eq()
	{
		fn().bar0_write32(prm::uar::page_offset(b().uar) + 0x40,
				  htobe32(b().eqn() << 24 | (b().eq_ci() & 0xffffff)));
	}
	void nop(TestQp &qp) { b().post(qp, Wqe(MLX5_OPCODE_NOP, qp.qpn).done()); }
	/* The eventfd's count (0: nothing signalled). */
	uint64_t interrupts()
	{
		uint64_t n = 0;
		return read(efd_, &n, sizeof(n)) == sizeof(n) ? n : 0;
	}

	std::unique_ptr<DpBed> b_;
	int efd_ = -1;
};

TEST_F(EmuCqEvents, UnarmedCqWritesNoEvent)
{
	arm_eq();
	nop(b().qa);
	ASSERT_TRUE(b().poll(b().cqa));
	EXPECT_FALSE(b().poll_eq());
	EXPECT_EQ(interrupts(), 0u);
	EXPECT_EQ(b().dp().stats().comp_events, 0u);
}

TEST_F(EmuCqEvents, ArmedCqGivesOneCompletionEqeAndOneInterrupt)
{
	arm_eq();
	arm(b().cqa, false);
	EXPECT_FALSE(b().poll_eq()) << "nothing before a CQE";
	nop(b().qa);
	auto e = b().poll_eq();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->first, 0x00) << "MLX5_EVENT_TYPE_COMP";
	EXPECT_EQ(e->second, b().cqa.cqn);
	EXPECT_EQ(interrupts(), 1u);
	/* Disarmed after one event: more CQEs, no more EQEs and no interrupt. */
	nop(b().qa);
	nop(b().qa);
	EXPECT_FALSE(b().poll_eq());
	EXPECT_EQ(interrupts(), 0u);
	for (int i = 0; i < 3; i++)
		ASSERT_TRUE(b().poll(b().cqa));
	const DpStats s = b().dp().stats();
	EXPECT_EQ(s.cq_arms, 1u);
	EXPECT_EQ(s.comp_events, 1u);
	EXPECT_EQ(s.interrupts, 1u);
}

TEST_F(EmuCqEvents, OtherCqsCompletionsDoNotFireIt)
{
	arm_eq();
	arm(b().cqa, false);
	nop(b().qb); /* cqb's CQE */
	EXPECT_FALSE(b().poll_eq());
	nop(b().qa);
	auto e = b().poll_eq();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->second, b().cqa.cqn);
}

TEST_F(EmuCqEvents, SolicitedArmIgnoresPlainCompletionsAndFiresOnAnError)
{
	arm_eq();
	arm(b().cqa, true);
	nop(b().qa); /* a requester's successful CQE is not solicited */
	ASSERT_TRUE(b().poll(b().cqa));
	EXPECT_FALSE(b().poll_eq());
	EXPECT_EQ(interrupts(), 0u);
	b().post(b().qa, Wqe(0x3f, b().qa.qpn).done()); /* LOCAL_QP_OP_ERR */
	auto c = b().poll(b().cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ_ERR);
	auto e = b().poll_eq();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->first, 0x00);
	EXPECT_EQ(e->second, b().cqa.cqn);
	EXPECT_EQ(interrupts(), 1u);
}

TEST_F(EmuCqEvents, ArmBehindUnconsumedCqesFiresAtOnce)
{
	arm_eq();
	nop(b().qa); /* written before the arm, not polled: ci 0 < 1 */
	arm(b().cqa, false);
	auto e = b().poll_eq();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->second, b().cqa.cqn);
	EXPECT_EQ(interrupts(), 1u);
	/* Consumed first, then armed: nothing there, nothing fires. */
	ASSERT_TRUE(b().poll(b().cqa));
	arm_eq();
	arm(b().cqa, false, 1);
	EXPECT_FALSE(b().poll_eq());
	/* A solicited arm behind a plain CQE waits; behind an error CQE it fires. */
	nop(b().qa); /* this fires the next-arm above */
	ASSERT_TRUE(b().poll_eq());
	arm_eq();
	interrupts();
	arm(b().cqa, true, 2); /* ci still 1: the plain CQE is unconsumed */
	EXPECT_FALSE(b().poll_eq());
}

TEST_F(EmuCqEvents, UnarmedEqWritesTheEqeButRaisesNothingUntilArmed)
{
	arm(b().cqa, false);
	nop(b().qa);
	EXPECT_EQ(b().dp().stats().comp_events, 1u);
	EXPECT_EQ(interrupts(), 0u) << "the EQ was never armed";
	EXPECT_EQ(fn().msix_raised(), 0u);
	/* Arming with the EQE unconsumed (ci 0) interrupts at once. */
	arm_eq();
	EXPECT_EQ(interrupts(), 1u);
	ASSERT_TRUE(b().poll_eq());
	/* Armed once, interrupts once: the second event needs a new arm. */
	arm_eq();
	arm(b().cqa, false, 1);
	nop(b().qa);
	arm(b().cqa, false, 2);
	nop(b().qa);
	EXPECT_EQ(interrupts(), 1u);
	ASSERT_TRUE(b().poll_eq());
	ASSERT_TRUE(b().poll_eq());
	arm_eq();
	EXPECT_EQ(interrupts(), 0u) << "everything consumed at the arm";
}

TEST_F(EmuCqEvents, ArmOfAnUnknownCqOrEqIsDroppedAndCounted)
{
	TestCq ghost = b().cqa;
	ghost.cqn = 0x3ff;
	arm(ghost, false);
	fn().bar0_write32(prm::uar::page_offset(b().uar) + 0x40, htobe32(0x0fu << 24));
	EXPECT_EQ(b().dp().stats().arms_dropped, 2u);
	EXPECT_EQ(b().dp().stats().cq_arms, 0u);
}

TEST_F(EmuCqEvents, DetachedVectorSignalsNothing)
{
	ASSERT_EQ(fn().set_msix_eventfd(kVector, -1), 0);
	arm_eq();
	arm(b().cqa, false);
	nop(b().qa);
	EXPECT_EQ(b().dp().stats().interrupts, 1u);
	EXPECT_EQ(interrupts(), 0u);
}

/* With a device poll thread: a thread waiting in poll(2) on the vector's eventfd wakes for a
 * completion another thread's WQE produced. */
TEST_F(EmuCqEvents, PollThreadDeliveryWakesAWaiterOnTheEventfd)
{
	fn().set_msix_eventfd(kVector, -1);
	b_.reset();
	make(DoorbellDelivery::poll_thread);
	arm_eq();
	arm(b().cqa, false);
	std::atomic<int> woke{-1};
	std::thread waiter([&] {
		pollfd p{efd_, POLLIN, 0};
		woke = ::poll(&p, 1, 5000);
	});
	nop(b().qa);
	waiter.join();
	EXPECT_EQ(woke.load(), 1);
	EXPECT_EQ(interrupts(), 1u);
	ASSERT_TRUE(b().wait(b().cqa));
	auto e = b().poll_eq();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->second, b().cqa.cqn);
}

/* A poll thread sees only the latest value of a UAR's CQ doorbell: two CQs armed back to back
 * are both armed through their records' arm words. */
TEST_F(EmuCqEvents, PollThreadArmsEveryCqWhoseRecordChanged)
{
	fn().set_msix_eventfd(kVector, -1);
	b_.reset();
	make(DoorbellDelivery::poll_thread);
	fn().stop(); /* both doorbells recorded before the thread looks */
	/* sn 1: the arm word must differ from the record's word at CREATE_CQ (zero here) for
	 * the scan to see it (doc/device-model.md, "CQ arming"). */
	arm(b().cqa, false, 1);
	arm(b().cqb, false, 1);
	ASSERT_EQ(fn().start(), 0);
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (b().dp().stats().cq_arms < 2 && std::chrono::steady_clock::now() < end)
		std::this_thread::yield();
	EXPECT_EQ(b().dp().stats().cq_arms, 2u);
	nop(b().qa);
	nop(b().qb);
	ASSERT_TRUE(b().wait(b().cqa));
	ASSERT_TRUE(b().wait(b().cqb));
	while (b().dp().stats().comp_events < 2 && std::chrono::steady_clock::now() < end)
		std::this_thread::yield();
	EXPECT_EQ(b().dp().stats().comp_events, 2u);
}

} // namespace
} // namespace nicmr::emu::test
