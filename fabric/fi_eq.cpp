/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Event queues (fi_eq(3)). nicmr makes no events of its own: an RDM endpoint has no connection
 * events, AVs insert synchronously and registration completes in the call, and errors of
 * requests go to the CQ. An EQ opened with FI_WRITE carries the events the application writes
 * (fi_eq_write), in order, up to its size; fi_eq_read returns them whole (FI_PEEK leaves them),
 * fi_eq_sread waits for one on the EQ's wait object (FI_WAIT_UNSPEC: a condition variable;
 * FI_WAIT_FD: an eventfd that fi_control(FI_GETWAIT) hands out and fi_trywait checks;
 * FI_WAIT_YIELD: a spin that yields). Slow path throughout: one mutex per EQ.
 */
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <thread>

#include "fi_internal.h"

namespace nicmr::fabric {

namespace {

/* fi_eq_attr.size 0 takes kDefaultEqSize; the most are kMaxEqSize events of kMaxEvent bytes. */
constexpr size_t kDefaultEqSize = 256;
constexpr size_t kMaxEqSize = 65536;
constexpr size_t kMaxEvent = 4096;

/* The front event into the caller's buffer. eq->mu held. */
ssize_t take_locked(Eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
	if (eq->events.empty())
		return -FI_EAGAIN;
	Eq::Event &e = eq->events.front();
	if (len < e.data.size())
		return -FI_ETOOSMALL; /* the event stays for a larger buffer */
	*event = e.event;
	if (!e.data.empty())
		std::memcpy(buf, e.data.data(), e.data.size());
	const ssize_t n = static_cast<ssize_t>(e.data.size());
	if (flags & FI_PEEK)
		return n;
	eq->events.pop_front();
	if (eq->events.empty() && eq->fd >= 0) {
		/* Not readable any more: drain the eventfd's count. */
		uint64_t v;
		while (::read(eq->fd, &v, sizeof(v)) < 0 && errno == EINTR) {
		}
	}
	return n;
}

ssize_t eq_read(struct fid_eq *feq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
	Eq *eq = eq_of(&feq->fid);
	if (!eq || !event || (len && !buf))
		return -FI_EINVAL;
	if (flags & ~FI_PEEK)
		return -FI_EBADFLAGS;
	std::lock_guard lk(eq->mu);
	return take_locked(eq, event, buf, len, flags);
}

ssize_t eq_readerr(struct fid_eq *feq, struct fi_eq_err_entry *buf, uint64_t flags)
{
	if (!eq_of(&feq->fid) || !buf)
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS;
	return -FI_EAGAIN; /* no error events: fi_eq_write writes events */
}

ssize_t eq_write(struct fid_eq *feq, uint32_t event, const void *buf, size_t len, uint64_t flags)
{
	Eq *eq = eq_of(&feq->fid);
	if (!eq || (len && !buf) || len > kMaxEvent)
		return -FI_EINVAL;
	/* fi_eq(3): without FI_WRITE the application may not write. */
	if (!(eq->flags & FI_WRITE))
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS;
	std::lock_guard lk(eq->mu);
	/* Full: nothing is lost (no overrun state), the writer tries again after a read. */
	if (eq->events.size() >= eq->size)
		return -FI_EAGAIN;
	try {
		const auto *p = static_cast<const uint8_t *>(buf);
		eq->events.push_back({event, std::vector<uint8_t>(p, p + len)});
	} catch (const std::bad_alloc &) {
		return -FI_ENOMEM;
	}
	if (eq->events.size() == 1 && eq->fd >= 0) {
		const uint64_t one = 1;
		while (::write(eq->fd, &one, sizeof(one)) < 0 && errno == EINTR) {
		}
	}
	eq->cv.notify_all();
	return static_cast<ssize_t>(len);
}

ssize_t eq_sread(struct fid_eq *feq, uint32_t *event, void *buf, size_t len, int timeout,
		 uint64_t flags)
{
	Eq *eq = eq_of(&feq->fid);
	if (!eq || !event || (len && !buf))
		return -FI_EINVAL;
	if (flags & ~FI_PEEK)
		return -FI_EBADFLAGS;
	/* fi_eq(3): not with FI_WAIT_NONE; and forever on an EQ nobody can write would hang. */
	if (eq->wait_obj == FI_WAIT_NONE || (timeout < 0 && !(eq->flags & FI_WRITE)))
		return -FI_EINVAL;
	using clock = std::chrono::steady_clock;
	const auto end = clock::now() + std::chrono::milliseconds(timeout < 0 ? 0 : timeout);
	std::unique_lock lk(eq->mu);
	for (;;) {
		ssize_t ret = take_locked(eq, event, buf, len, flags);
		if (ret != -FI_EAGAIN || timeout == 0)
			return ret;
		const auto now = clock::now();
		if (timeout > 0 && now >= end)
			return -FI_EAGAIN;
		const int left =
			timeout < 0 ? -1
				    : static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(
							       end - now)
							       .count());
		switch (eq->wait_obj) {
		case FI_WAIT_UNSPEC:
			if (timeout < 0)
				eq->cv.wait(lk);
			else
				eq->cv.wait_until(lk, end);
			break;
		case FI_WAIT_FD: {
			lk.unlock();
			pollfd pfd{eq->fd, POLLIN, 0};
			const int r = ::poll(&pfd, 1, left);
			lk.lock();
			if (r < 0 && errno == EINTR)
				return -FI_EAGAIN; /* fi_eq(3): a signal ends the wait */
			break;
		}
		default: /* FI_WAIT_YIELD */
			lk.unlock();
			sched_yield();
			lk.lock();
			break;
		}
	}
}

const char *eq_strerror(struct fid_eq *, int, const void *, char *buf, size_t len)
{
	const char *s = "nicmr EQs carry the application's events only";
	if (buf && len) {
		std::snprintf(buf, len, "%s", s);
		return buf;
	}
	return s;
}

int eq_control(struct fid *fid, int command, void *arg)
{
	Eq *eq = eq_of(fid);
	if (!eq)
		return -FI_EINVAL;
	if (command != FI_GETWAIT)
		return -FI_ENOSYS;
	if (!arg)
		return -FI_EINVAL;
	/* Only an FD is handed out; FI_WAIT_UNSPEC's condition variable is the EQ's own. */
	if (eq->wait_obj != FI_WAIT_FD)
		return -FI_ENODATA;
	*static_cast<int *>(arg) = eq->fd;
	return 0;
}

int eq_close(struct fid *fid)
{
	Eq *eq = reinterpret_cast<Eq *>(fid);
	/* acquire: pairs with an endpoint close's release; it no longer uses the EQ. */
	if (eq->eps.load(std::memory_order_acquire) != 0)
		return -FI_EBUSY;
	Fabric *fab = eq->fabric;
	if (eq->fd >= 0)
		::close(eq->fd);
	delete eq;
	/* release: the EQ is gone before fabric_close (acquire) may see the count drop. */
	fab->eqs.fetch_sub(1, std::memory_order_release);
	return 0;
}

struct fi_ops eq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = eq_close,
	.bind = no_bind,
	.control = eq_control,
	.ops_open = no_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

struct fi_ops_eq eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = eq_write,
	.sread = eq_sread,
	.strerror = eq_strerror,
};

} // namespace

Eq *eq_of(struct fid *fid)
{
	if (!fid || fid->fclass != FI_CLASS_EQ || fid->ops != &eq_fi_ops)
		return nullptr;
	return reinterpret_cast<Eq *>(fid);
}

int eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **out, void *context)
{
	if (!fabric || !attr || !out || attr->size > kMaxEqSize)
		return -FI_EINVAL;
	/* FI_AFFINITY's signaling_vector is a hint: there is no interrupt to steer. */
	if (attr->flags & ~(FI_WRITE | FI_AFFINITY))
		return -FI_EBADFLAGS;
	if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
	    attr->wait_obj != FI_WAIT_FD && attr->wait_obj != FI_WAIT_YIELD)
		return -FI_ENOSYS; /* wait sets and mutex/cond pairs are not offered */
	Fabric *fab = reinterpret_cast<Fabric *>(fabric);
	std::unique_ptr<Eq> eq(new (std::nothrow) Eq);
	if (!eq)
		return -FI_ENOMEM;
	eq->fabric = fab;
	eq->flags = attr->flags;
	eq->wait_obj = attr->wait_obj;
	eq->size = attr->size ? attr->size : kDefaultEqSize;
	if (eq->wait_obj == FI_WAIT_FD) {
		eq->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (eq->fd < 0)
			return -errno;
	}
	eq->fid.fid.fclass = FI_CLASS_EQ;
	eq->fid.fid.context = context;
	eq->fid.fid.ops = &eq_fi_ops;
	eq->fid.ops = &eq_ops;
	fab->eqs.fetch_add(1, std::memory_order_relaxed);
	*out = &eq.release()->fid;
	return 0;
}

int eq_trywait(Eq *eq)
{
	if (eq->wait_obj != FI_WAIT_FD)
		return -FI_EINVAL;
	std::lock_guard lk(eq->mu);
	return eq->events.empty() ? 0 : -FI_EAGAIN;
}

} // namespace nicmr::fabric
