/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Wait objects of CQs and counters (fi_cq(3), fi_cntr(3), fi_trywait(3)) over the native API's
 * completion events (nicmr.h, "Completion events"): the device has one event descriptor, and a
 * CQ or counter has its own (Waiter, fi_internal.h).
 *
 *   fi_trywait(cq)  progress; anything in the ring: -FI_EAGAIN
 *                   arm the native CQ of every bound endpoint, progress again (a completion
 *                   that came before the arm is in the ring now): -FI_EAGAIN, else 0
 *   poll(fd)        fd (epoll) is readable when the device's descriptor is (an armed CQ
 *                   completed) or when the CQ's own sig is
 *   events_dispatch whoever takes the device's events (any trywait, sread or cntr_wait) writes
 *                   sig of every CQ and counter of the endpoint each event names, then
 *                   acknowledges the event; a waiter whose event another thread took still
 *                   wakes on its sig
 *
 * The order that loses nothing is the native API's (poll, arm, poll again, wait) and rdma-core's
 * ibv_req_notify_cq(3) recipe. Spurious wake-ups happen (an event of another endpoint makes the
 * device descriptor readable until someone takes it); fi_trywait(3) allows them. Remote writes
 * into an RMA-event MR count in the device's counter without a completion, so no event tells
 * of them: fi_cntr_wait on a counter bound to such an MR re-reads at least every kRmaEventPollMs.
 * Slow path throughout: nothing here runs on a posting or completion path.
 */
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "fi_internal.h"

namespace nicmr::fabric {

int waiter_open(Domain *dom, Waiter *w, bool fd_required)
{
	const int dev_fd = nicmr_device_event_fd(dom->fabric->dev);
	if (dev_fd < 0)
		return fd_required ? -FI_ENOSYS : 0;
	w->sig = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->sig < 0)
		return -errno;
	w->fd = epoll_create1(EPOLL_CLOEXEC);
	if (w->fd < 0) {
		const int err = -errno;
		waiter_close(w);
		return err;
	}
	for (int fd : {dev_fd, w->sig}) {
		struct epoll_event ev = {};
		ev.events = EPOLLIN;
		ev.data.fd = fd;
		if (epoll_ctl(w->fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
			const int err = -errno;
			waiter_close(w);
			return err;
		}
	}
	return 0;
}

int waiter_setup(Domain *dom, int wait_obj, Waiter *w)
{
	switch (wait_obj) {
	case FI_WAIT_NONE:
	case FI_WAIT_YIELD:
		return 0;
	case FI_WAIT_UNSPEC:
	case FI_WAIT_FD:
		return waiter_open(dom, w, wait_obj == FI_WAIT_FD);
	default:
		return -FI_ENOSYS; /* wait sets and mutex/cond pairs are not offered */
	}
}

int waiter_control(int wait_obj, const Waiter &w, int command, void *arg)
{
	if (command != FI_GETWAIT)
		return -FI_ENOSYS;
	if (!arg)
		return -FI_EINVAL;
	/* Only FI_WAIT_FD hands out its descriptor (FI_WAIT_UNSPEC's is the object's own). */
	if (wait_obj != FI_WAIT_FD)
		return -FI_ENODATA;
	*static_cast<int *>(arg) = w.fd;
	return 0;
}

void waiter_close(Waiter *w)
{
	if (w->fd >= 0)
		::close(w->fd);
	if (w->sig >= 0)
		::close(w->sig);
	w->fd = w->sig = -1;
}

void waiter_wake(Waiter *w)
{
	const uint64_t one = 1;
	if (w->sig >= 0)
		while (::write(w->sig, &one, sizeof(one)) < 0 && errno == EINTR) {
		}
}

void waiter_drain(Waiter *w)
{
	uint64_t v;
	if (w->sig >= 0)
		while (::read(w->sig, &v, sizeof(v)) < 0 && errno == EINTR) {
		}
}

int waiter_block(Waiter *w, int timeout_ms)
{
	if (w->fd < 0) {
		std::this_thread::yield();
		return 0;
	}
	struct pollfd p = {w->fd, POLLIN, 0};
	for (;;) {
		const int n = ::poll(&p, 1, timeout_ms);
		if (n > 0)
			return 0;
		if (n == 0)
			return -FI_ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

int events_add(Fabric *fab, const nicmr_cq *ncq, Endpoint *ep)
{
	std::lock_guard lk(fab->sh->ev_mu);
	try {
		fab->sh->ev_eps.emplace(ncq, ep);
	} catch (const std::bad_alloc &) {
		return -FI_ENOMEM;
	}
	return 0;
}

void events_dispatch(Fabric *fab)
{
	/* ev_mu across take and acknowledge: an endpoint's close removes its CQ under ev_mu
	 * before destroying it, so no event of it is taken and left unacknowledged (which would
	 * make nicmr_cq_destroy -EBUSY). */
	std::lock_guard lk(fab->sh->ev_mu);
	nicmr_cq *ncq = nullptr;
	while (nicmr_get_cq_event(fab->dev, &ncq) == 1) {
		auto it = fab->sh->ev_eps.find(ncq);
		if (it != fab->sh->ev_eps.end()) {
			if (it->second)
				ep_wake(it->second);
			else
				gsi_wake(fab->sh); /* the GSI QP's: a SIDR datagram came */
		}
		nicmr_cq_ack_events(ncq, 1);
	}
}

int eps_arm(const std::vector<Endpoint *> &eps)
{
	for (Endpoint *ep : eps)
		if (int ret = ep_arm(ep); ret != 0)
			return ret;
	return 0;
}

} // namespace nicmr::fabric
