/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Completion events of the native API (the verbs model): nicmr_cq_arm, the device's event
 * descriptor, nicmr_get_cq_event, nicmr_cq_ack_events; a thread blocked in poll(2) woken by an
 * RDMA WRITE of another thread, the data checked; every refusal with its code.
 */
#include <poll.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;

class CqEvents : public ApiFixture {
protected:
	void SetUp() override
	{
		ApiFixture::SetUp();
		connect_ports(dev, pd, &cqa, &cqb, &qa, &qb);
		if (HasFatalFailure())
			return;
		a = base;
		b = base + kLen;
		ASSERT_EQ(nicmr_mr_reg(pd, a, kLen, kAll, 0, 0, &mra), 0);
		ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, 0, 0, &mrb), 0);
		fd = nicmr_device_event_fd(dev);
		ASSERT_GE(fd, 0);
	}
	void TearDown() override
	{
		for (nicmr_mr *m : {mra, mrb})
			if (m) {
				EXPECT_EQ(nicmr_mr_dereg(m), 0);
			}
		destroy_queues({qa, qb}, {cqa, cqb});
		ApiFixture::TearDown();
	}
	bool readable(int ms)
	{
		pollfd p{fd, POLLIN, 0};
		return ::poll(&p, 1, ms) == 1;
	}
	nicmr_cq *cqa = nullptr, *cqb = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	nicmr_mr *mra = nullptr, *mrb = nullptr;
	char *a = nullptr, *b = nullptr;
	int fd = -1;
};

TEST_F(CqEvents, RefusedArgumentsHaveTheirCodes)
{
	nicmr_cq *c = nullptr;
	EXPECT_EQ(nicmr_device_event_fd(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_cq_arm(nullptr, 0), -EINVAL);
	EXPECT_EQ(nicmr_get_cq_event(nullptr, &c), -EINVAL);
	EXPECT_EQ(nicmr_get_cq_event(dev, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_cq_ack_events(nullptr, 1), -EINVAL);
	EXPECT_EQ(nicmr_cq_ack_events(cqa, 0), -EINVAL);
	EXPECT_EQ(nicmr_cq_ack_events(cqa, 1), -EINVAL) << "nothing to acknowledge";
	EXPECT_EQ(nicmr_get_cq_event(dev, &c), 0) << "no event: nothing armed";
}

/* A thread waits in poll(2) on the device's descriptor; another posts an RDMA WRITE; the
 * waiter wakes, takes the event of the CQ that completed, and finds the data written. */
TEST_F(CqEvents, WaiterWokenByAnotherThreadsWrite)
{
	std::memset(b, 0, 256);
	ASSERT_EQ(nicmr_cq_arm(cqa, 0), 0);
	ASSERT_EQ(nicmr_cq_arm(cqb, 0), 0);
	std::atomic<int> woke{-1};
	nicmr_cq *fired = nullptr;
	std::thread waiter([&] {
		pollfd p{fd, POLLIN, 0};
		woke = ::poll(&p, 1, 5000);
		if (woke == 1) {
			EXPECT_EQ(nicmr_get_cq_event(dev, &fired), 1);
		}
	});
	for (int i = 0; i < 256; i++)
		a[i] = static_cast<char>(i * 3 + 1);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 256, nicmr_mr_key(mra), u(b), nicmr_mr_key(mrb), 9,
				   NICMR_SEND_SIGNALED),
		  0);
	waiter.join();
	ASSERT_EQ(woke.load(), 1);
	EXPECT_EQ(fired, cqa);
	nicmr_wc wc = wait_wc(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.wr_id, 9u);
	EXPECT_EQ(std::memcmp(a, b, 256), 0);
	nicmr_cq *c = nullptr;
	EXPECT_EQ(nicmr_get_cq_event(dev, &c), 0) << "one event per arm";
	EXPECT_EQ(nicmr_cq_ack_events(cqa, 2), -EINVAL) << "only one to acknowledge";
	/* An unacknowledged event keeps the CQ (its QP gone first). */
	ASSERT_EQ(nicmr_qp_destroy(qa), 0);
	qa = nullptr;
	EXPECT_EQ(nicmr_cq_destroy(cqa), -EBUSY);
	EXPECT_EQ(nicmr_cq_ack_events(cqa, 1), 0);
	EXPECT_EQ(nicmr_cq_destroy(cqa), 0);
	cqa = nullptr;
}

TEST_F(CqEvents, SolicitedArmIgnoresASuccessfulCompletion)
{
	ASSERT_EQ(nicmr_cq_arm(cqa, 1), 0);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 8, nicmr_mr_key(mra), u(b), nicmr_mr_key(mrb), 1,
				   NICMR_SEND_SIGNALED),
		  0);
	nicmr_wc wc = wait_wc(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_FALSE(readable(50));
	nicmr_cq *c = nullptr;
	EXPECT_EQ(nicmr_get_cq_event(dev, &c), 0);
}

} // namespace
} // namespace nicmr::test
