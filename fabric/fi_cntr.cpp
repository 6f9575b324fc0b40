/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Counters (FI_CNTR_EVENTS_COMP): an endpoint bound with FI_WRITE counts its completed writes
 * and non-fetching atomics, with FI_READ its reads and fetching atomics; failures count in the
 * error count. fi_cntr_read, readerr and wait progress the bound endpoints first. fi_cntr_wait
 * returns at the threshold, at a new error, or at its timeout (ms; -1 forever); between looks it
 * sleeps on the counter's wait object (FI_WAIT_FD, FI_WAIT_UNSPEC on a device with completion
 * events: fi_wait.cpp) or yields (FI_WAIT_NONE, FI_WAIT_YIELD). fi_trywait on a counter says
 * -FI_EAGAIN when its count or error count moved since the application last read it.
 *
 * A counter bound to RMA-event MRs (fi_mr_bind, FI_REMOTE_WRITE; fi_mr.cpp) also counts the
 * remote writes and atomics into them. The device counts those itself, in a native counter of
 * its DMA memory (nicmr_cntr, a device-model extension) made at the first such bind:
 *
 *   fi_cntr_read = value (bound endpoints' completions, fi_cntr_add/set) + native (the device)
 *
 * fi_cntr_set stores the difference into value, so that the sum reads as set.
 */
#include <chrono>
#include <memory>
#include <new>
#include <thread>

#include "fi_internal.h"

namespace nicmr::fabric {

namespace {

/* How often fi_cntr_wait looks at a counter bound to RMA-event MRs while it sleeps. */
constexpr int kRmaEventPollMs = 1;

void progress_all(Cntr *c)
{
	std::lock_guard lk(c->bind_mu);
	for (Endpoint *ep : c->eps)
		ep_progress(ep);
}

/* The device's part of the count: 0 until a bind made the native counter. No lock, no
 * allocation, no system call. acquire: pairs with cntr_native's release, so the native
 * counter is seen made; nicmr_cntr_read itself is an acquire load of the device's count (the
 * data of every counted remote write is visible once its count is). */
uint64_t device_count(const Cntr *c)
{
	return nicmr_cntr_read(c->native.load(std::memory_order_acquire));
}

/* Counts are plain numbers the application reads: relaxed loads and stores of value (the data
 * of a completed request is ordered by the device's CQE, not by the count). */
uint64_t total(const Cntr *c)
{
	return c->value.load(std::memory_order_relaxed) + device_count(c);
}

/* Before a sleep on the wait object: takes the device's events, empties the counter's own
 * descriptor, arms the bound endpoints and progresses them once more, so that a completion that
 * came before the arm is counted now (fi_wait.cpp's order). 0 or a FI_E* code. */
int arm_and_progress(Cntr *c)
{
	events_dispatch(c->domain->fabric);
	waiter_drain(&c->wait);
	{
		std::lock_guard lk(c->bind_mu);
		if (int ret = eps_arm(c->eps); ret != 0)
			return ret;
	}
	progress_all(c);
	return 0;
}

/* Whether the count or error count moved since the application last read them. */
bool moved(const Cntr *c)
{
	return total(c) != c->seen.load(std::memory_order_relaxed) ||
	       c->errs.load(std::memory_order_relaxed) !=
		       c->seen_errs.load(std::memory_order_relaxed);
}

uint64_t cntr_read(struct fid_cntr *f)
{
	Cntr *c = cntr_of(&f->fid);
	if (!c)
		return 0;
	progress_all(c);
	const uint64_t n = total(c);
	c->seen.store(n, std::memory_order_relaxed);
	return n;
}

uint64_t cntr_readerr(struct fid_cntr *f)
{
	Cntr *c = cntr_of(&f->fid);
	if (!c)
		return 0;
	progress_all(c);
	const uint64_t n = c->errs.load(std::memory_order_relaxed);
	c->seen_errs.store(n, std::memory_order_relaxed);
	return n;
}

int cntr_add(struct fid_cntr *f, uint64_t v)
{
	Cntr *c = cntr_of(&f->fid);
	if (!c)
		return -FI_EINVAL;
	c->value.fetch_add(v, std::memory_order_relaxed);
	return 0;
}

int cntr_set(struct fid_cntr *f, uint64_t v)
{
	Cntr *c = cntr_of(&f->fid);
	if (!c)
		return -FI_EINVAL;
	/* The device's count keeps running: value holds what makes the sum v now (modulo
	 * 2^64, as the sum is). */
	c->value.store(v - device_count(c), std::memory_order_relaxed);
	return 0;
}

int cntr_adderr(struct fid_cntr *f, uint64_t v)
{
	Cntr *c = cntr_of(&f->fid);
	if (!c)
		return -FI_EINVAL;
	c->errs.fetch_add(v, std::memory_order_relaxed);
	return 0;
}

int cntr_seterr(struct fid_cntr *f, uint64_t v)
{
	Cntr *c = cntr_of(&f->fid);
	if (!c)
		return -FI_EINVAL;
	c->errs.store(v, std::memory_order_relaxed);
	return 0;
}

int cntr_wait(struct fid_cntr *f, uint64_t threshold, int timeout)
{
	Cntr *c = cntr_of(&f->fid);
	if (!c)
		return -FI_EINVAL;
	const uint64_t errs = c->errs.load(std::memory_order_relaxed);
	auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
	for (;;) {
		progress_all(c);
		if (total(c) >= threshold)
			return 0;
		if (c->errs.load(std::memory_order_relaxed) != errs)
			return -FI_EAVAIL;
		const auto now = std::chrono::steady_clock::now();
		if (timeout >= 0 && now >= end)
			return -FI_ETIMEDOUT;
		if (c->wait.fd < 0) {
			std::this_thread::yield();
			continue;
		}
		if (int ret = arm_and_progress(c); ret != 0)
			return ret;
		if (total(c) >= threshold || c->errs.load(std::memory_order_relaxed) != errs)
			continue;
		int ms = timeout < 0
				 ? -1
				 : static_cast<int>(
					   std::chrono::duration_cast<std::chrono::milliseconds>(
						   end - now)
						   .count());
		/* Remote writes into RMA-event MRs make no completion event: look again soon. */
		if (c->native.load(std::memory_order_acquire) && (ms < 0 || ms > kRmaEventPollMs))
			ms = kRmaEventPollMs;
		if (int b = waiter_block(&c->wait, ms); b != 0 && b != -FI_ETIMEDOUT)
			return b;
	}
}

int cntr_control(struct fid *fid, int command, void *arg)
{
	Cntr *c = cntr_of(fid);
	if (!c)
		return -FI_EINVAL;
	return waiter_control(c->wait_obj, c->wait, command, arg);
}

int cntr_close(struct fid *fid)
{
	Cntr *c = reinterpret_cast<Cntr *>(fid);
	{
		std::lock_guard lk(c->bind_mu);
		if (!c->eps.empty())
			return -FI_EBUSY;
	}
	/* Bound to an MR: the native counter is -EBUSY and stays (fi_cntr(3): no memory regions
	 * may be associated; closing the MR drops its binding, fi_mr.cpp). */
	nicmr_cntr *n = c->native.load(std::memory_order_acquire);
	if (n) {
		const int ret = nicmr_cntr_free(n);
		if (ret != 0)
			return fi_code(ret);
	}
	Domain *dom = c->domain;
	waiter_close(&c->wait);
	delete c;
	/* release: the counter is gone before domain_close (acquire) may see the count drop. */
	dom->children.fetch_sub(1, std::memory_order_release);
	return 0;
}

struct fi_ops cntr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = cntr_close,
	.bind = no_bind,
	.control = cntr_control,
	.ops_open = no_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

struct fi_ops_cntr cntr_ops = {
	.size = sizeof(struct fi_ops_cntr),
	.read = cntr_read,
	.readerr = cntr_readerr,
	.add = cntr_add,
	.set = cntr_set,
	.wait = cntr_wait,
	.adderr = cntr_adderr,
	.seterr = cntr_seterr,
};

} // namespace

int cntr_trywait(Cntr *c)
{
	if (c->wait.fd < 0)
		return -FI_EINVAL; /* no descriptor to block on */
	progress_all(c);
	if (moved(c))
		return -FI_EAGAIN;
	if (int ret = arm_and_progress(c); ret != 0)
		return ret;
	return moved(c) ? -FI_EAGAIN : 0;
}

Cntr *cntr_of(struct fid *fid)
{
	if (!fid || fid->fclass != FI_CLASS_CNTR || fid->ops != &cntr_fi_ops)
		return nullptr;
	return reinterpret_cast<Cntr *>(fid);
}

int cntr_bind_ep(Cntr *c, Endpoint *ep)
{
	std::lock_guard lk(c->bind_mu);
	try {
		c->eps.push_back(ep);
	} catch (const std::bad_alloc &) {
		return -FI_ENOMEM;
	}
	return 0;
}

int cntr_native(Cntr *c, nicmr_cntr **out)
{
	/* acquire: as device_count's (made once, then only read). */
	nicmr_cntr *n = c->native.load(std::memory_order_acquire);
	if (!n) {
		std::lock_guard lk(c->bind_mu);
		n = c->native.load(std::memory_order_relaxed); /* bind_mu orders it */
		if (!n) {
			/* Only a domain with FI_MR_RMA_EVENT binds, so the device has the
			 * extension: what can fail here is its DMA memory (-ENOMEM). */
			const int ret = nicmr_cntr_alloc(c->domain->fabric->dev, &n);
			if (ret != 0)
				return fi_code(ret);
			/* release: the native counter (zeroed by nicmr_cntr_alloc) is made
			 * before a reader that loads the pointer uses it. */
			c->native.store(n, std::memory_order_release);
		}
	}
	*out = n;
	return 0;
}

void cntr_unbind(Cntr *c, Endpoint *ep)
{
	std::lock_guard lk(c->bind_mu);
	std::erase(c->eps, ep);
}

int cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **out,
	      void *context)
{
	if (!domain || !out)
		return -FI_EINVAL;
	if (attr) {
		if (attr->events != FI_CNTR_EVENTS_COMP)
			return -FI_ENOSYS;
		if (attr->flags)
			return -FI_EBADFLAGS;
	}
	Domain *dom = reinterpret_cast<Domain *>(domain);
	std::unique_ptr<Cntr> c(new (std::nothrow) Cntr);
	if (!c)
		return -FI_ENOMEM;
	c->domain = dom;
	/* fi_cntr_open(3): a null attr is the defaults (FI_WAIT_NONE). */
	c->wait_obj = attr ? attr->wait_obj : FI_WAIT_NONE;
	if (int ret = waiter_setup(dom, c->wait_obj, &c->wait); ret != 0)
		return ret;
	c->bind_mu.set_noop(dom->serialized);
	c->fid.fid.fclass = FI_CLASS_CNTR;
	c->fid.fid.context = context;
	c->fid.fid.ops = &cntr_fi_ops;
	c->fid.ops = &cntr_ops;
	dom->children.fetch_add(1, std::memory_order_relaxed);
	*out = &c.release()->fid;
	return 0;
}

} // namespace nicmr::fabric
