/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Completion events of the native API (nicmr.h, "Completion events"): the verbs model over the
 * driver's completion EQ. One channel per device: its descriptor is the completion EQ's
 * eventfd (mlx5::Device::comp_event_fd), an event names a CQ by number and cqs_by_num finds
 * it. Nothing here is on the hot path: nicmr_cq_poll does not change.
 */
#include <cerrno>
#include <mutex>

#include "api_internal.h"

using namespace nicmr;

int nicmr_device_event_fd(struct nicmr_device *dev)
{
	if (dev == nullptr)
		return -EINVAL;
	return dev->drv->comp_event_fd();
}

int nicmr_cq_arm(struct nicmr_cq *cq, int solicited_only)
{
	if (cq == nullptr)
		return -EINVAL;
	/* An arm no interrupt follows would let a waiter sleep for ever: refuse it. */
	const int fd = cq->dev->drv->comp_event_fd();
	if (fd < 0)
		return fd;
	cq->cq->arm(solicited_only != 0);
	return 0;
}

int nicmr_get_cq_event(struct nicmr_device *dev, struct nicmr_cq **cq)
{
	if (dev == nullptr || cq == nullptr)
		return -EINVAL;
	if (int fd = dev->drv->comp_event_fd(); fd < 0)
		return fd;
	std::lock_guard lk(dev->cq_ev_mu);
	for (;;) {
		/* One at a time: an event left in the EQ interrupts again at once (the re-arm in
		 * comp_events), so the descriptor stays readable while events remain. */
		uint32_t cqn = 0;
		const int n = dev->drv->comp_events(&cqn, 1);
		if (n <= 0)
			return n;
		auto it = dev->cqs_by_num.find(cqn);
		if (it == dev->cqs_by_num.end())
			continue; /* a CQ destroyed since it was armed */
		nicmr_cq *c = it->second;
		c->unacked++;
		/* The next arm carries the next sequence number (rdma-core mlx5_cq_event). */
		c->cq->event_taken();
		*cq = c;
		return 1;
	}
}

int nicmr_cq_ack_events(struct nicmr_cq *cq, unsigned int n)
{
	if (cq == nullptr || n == 0)
		return -EINVAL;
	std::lock_guard lk(cq->dev->cq_ev_mu);
	if (n > cq->unacked)
		return -EINVAL;
	cq->unacked -= n;
	return 0;
}
