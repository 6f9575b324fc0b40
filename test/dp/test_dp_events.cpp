/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The driver's completion events on the emulated device: Cq::arm, the completion EQ's
 * eventfd on its MSI-X vector (Device::comp_event_fd), Device::comp_events and the re-arm,
 * with RDMA WRITEs between the rig's two QPs and their data checked.
 */
#include <gtest/gtest.h>

#include <poll.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "dp_rig.h"

namespace nicmr::testdp {
namespace {

class DpEvents : public ::testing::TestWithParam<emu::DoorbellDelivery> {
protected:
	void SetUp() override
	{
		RigOptions o;
		o.delivery = GetParam();
		o.cqs_on_comp_eq = true;
		ASSERT_EQ(r.make(o), 0);
		ASSERT_EQ(r.data->alloc(8192, 4096, &blk), 0);
		std::memset(blk.va, 0, blk.len);
		ASSERT_EQ(r.mtt_mr(blk, 0, 8192, r.ctx(true, true, true, true, false), &mr), 0);
		fd = r.dev->comp_event_fd();
		ASSERT_GE(fd, 0);
	}
	void TearDown() override
	{
		mr.handle.reset();
		r.data->release(blk);
	}
	/* An inline RDMA WRITE of 8 bytes from qp[0] into the block at off. */
	void write(uint64_t value, size_t off)
	{
		ASSERT_EQ(r.qp[0]->post_write_inline(&value, 8, va(off), mr.key, value,
						     mlx5::kSignaled),
			  0);
	}
	uint64_t va(size_t off) const { return reinterpret_cast<uintptr_t>(blk.va) + off; }
	/* Whether the eventfd becomes readable within ms. */
	bool readable(int ms)
	{
		pollfd p{fd, POLLIN, 0};
		return ::poll(&p, 1, ms) == 1;
	}
	Rig r;
	mem::DmaBlock blk;
	TestMr mr;
	int fd = -1;
};

TEST_P(DpEvents, ArmedCqInterruptsOnceAndNamesItself)
{
	uint32_t cqns[4];
	EXPECT_EQ(r.dev->comp_events(cqns, 4), 0) << "nothing armed yet";
	r.cq[0]->arm(false);
	write(0x1122334455667788, 64);
	ASSERT_TRUE(readable(5000));
	ASSERT_EQ(r.dev->comp_events(cqns, 4), 1);
	EXPECT_EQ(cqns[0], r.cq[0]->cqn());
	r.cq[0]->event_taken();
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	uint64_t got;
	std::memcpy(&got, static_cast<uint8_t *>(blk.va) + 64, 8);
	EXPECT_EQ(got, 0x1122334455667788u);
	/* Not re-armed: the next completion raises nothing. */
	write(2, 128);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_FALSE(readable(50));
	EXPECT_EQ(r.dev->comp_events(cqns, 4), 0);
	/* Re-armed (sn moved on): it fires again. */
	r.cq[0]->arm(false);
	write(3, 192);
	ASSERT_TRUE(readable(5000));
	ASSERT_EQ(r.dev->comp_events(cqns, 4), 1);
	EXPECT_EQ(cqns[0], r.cq[0]->cqn());
}

TEST_P(DpEvents, ArmAfterAnUnpolledCompletionFiresAtOnce)
{
	write(1, 0);
	/* Wait for the CQE without taking it (peek at the device's counter). */
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (r.hw->device().data_path().stats().cqes < 1 &&
	       std::chrono::steady_clock::now() < end)
		std::this_thread::yield();
	r.cq[0]->arm(false);
	ASSERT_TRUE(readable(5000));
	uint32_t cqn = 0;
	ASSERT_EQ(r.dev->comp_events(&cqn, 1), 1);
	EXPECT_EQ(cqn, r.cq[0]->cqn());
}

TEST_P(DpEvents, SolicitedArmWaitsForAnErrorCompletion)
{
	r.cq[0]->arm(true);
	write(1, 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_FALSE(readable(50)) << "a successful requester CQE is not solicited";
	/* A remote access error (a key of no MR) completes in error and fires the arm. */
	uint64_t v = 7;
	ASSERT_EQ(r.qp[0]->post_write_inline(&v, 8, va(0), mr.key ^ 0x100, 9, mlx5::kSignaled), 0);
	ASSERT_TRUE(readable(5000));
	uint32_t cqn = 0;
	ASSERT_EQ(r.dev->comp_events(&cqn, 1), 1);
	EXPECT_EQ(cqn, r.cq[0]->cqn());
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
}

TEST_P(DpEvents, CompEventsRefusesBadArguments)
{
	EXPECT_EQ(r.dev->comp_events(nullptr, 1), -EINVAL);
	uint32_t cqn;
	EXPECT_EQ(r.dev->comp_events(&cqn, -1), -EINVAL);
	EXPECT_EQ(r.dev->comp_events(nullptr, 0), 0);
}

/* A thread blocked in poll(2) on the eventfd is woken by a completion of another thread's
 * WQE; both CQs armed, only the one that completed is named. */
TEST_P(DpEvents, PollThreadWakesAWaiterBlockedOnTheFd)
{
	r.cq[0]->arm(false);
	r.cq[1]->arm(false);
	std::atomic<int> woke{-1};
	std::thread waiter([&] {
		pollfd p{fd, POLLIN, 0};
		woke = ::poll(&p, 1, 5000);
	});
	write(0xabcdef, 1024);
	waiter.join();
	ASSERT_EQ(woke.load(), 1);
	uint32_t cqns[4];
	ASSERT_EQ(r.dev->comp_events(cqns, 4), 1);
	EXPECT_EQ(cqns[0], r.cq[0]->cqn());
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	uint64_t got;
	std::memcpy(&got, static_cast<uint8_t *>(blk.va) + 1024, 8);
	EXPECT_EQ(got, 0xabcdefu);
}

INSTANTIATE_TEST_SUITE_P(Delivery, DpEvents,
			 ::testing::Values(emu::DoorbellDelivery::inline_call,
					   emu::DoorbellDelivery::poll_thread));

/* A bus without MSI-X: the completion EQ is made in poll mode; there is no descriptor to
 * wait on, and events of an armed CQ are still read. */
TEST(DpEventsNoMsix, CompEventFdIsNotSupportedAndEventsAreStillRead)
{
	Rig r;
	RigOptions o;
	o.cqs_on_comp_eq = true;
	o.emu_cfg.msix_vectors = 0;
	ASSERT_EQ(r.make(o), 0);
	EXPECT_EQ(r.dev->comp_event_fd(), -ENOTSUP);
	r.cq[0]->arm(false);
	ASSERT_EQ(r.qp[0]->post_nop(5, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	uint32_t cqn = 0;
	EXPECT_EQ(r.dev->comp_events(&cqn, 1), 1);
	EXPECT_EQ(cqn, r.cq[0]->cqn());
}

} // namespace
} // namespace nicmr::testdp
