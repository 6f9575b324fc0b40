/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Completion queues: a ring of entries the bound endpoints' completions land in when they are
 * progressed (fi_cq_read and fi_cq_sread progress every bound endpoint first). Formats
 * CONTEXT, MSG, DATA and TAGGED (len, buf, data and tag are a received message's; 0 for RMA,
 * atomics and sends, as fi_cq(3) allows).
 * An error at the head makes fi_cq_read say -FI_EAVAIL until fi_cq_readerr takes it: err is
 * FI_EACCES for a key or access refusal (CQE syndromes REMOTE_ACCESS, LOCAL_PROT,
 * LOCAL_ACCESS), FI_ECANCELED for a request flushed after an earlier error, FI_EINVAL for a
 * responder that was not ready, FI_EIO otherwise; prov_errno is the CQE syndrome
 * (struct nicmr_wc::syndrome), which fi_cq_strerror names through nicmr_wc_syndrome_str.
 * Wait objects (fi_wait.cpp): FI_WAIT_FD (fi_control(FI_GETWAIT) hands out an epoll descriptor,
 * fi_trywait arms) and FI_WAIT_UNSPEC (the same inside fi_cq_sread) on a device with completion
 * events; FI_WAIT_UNSPEC without them, FI_WAIT_YIELD and FI_WAIT_NONE make sread poll and yield.
 * fi_cq_signal makes a waiting or the next fi_cq_sread return -FI_EAGAIN.
 */
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <thread>

#include "fi_internal.h"

namespace nicmr::fabric {

namespace {

void progress_all(Cq *cq)
{
	std::lock_guard lk(cq->bind_mu);
	for (Endpoint *ep : cq->eps)
		ep_progress(ep);
}

size_t entry_size(enum fi_cq_format f)
{
	switch (f) {
	case FI_CQ_FORMAT_MSG:
		return sizeof(struct fi_cq_msg_entry);
	case FI_CQ_FORMAT_DATA:
		return sizeof(struct fi_cq_data_entry);
	case FI_CQ_FORMAT_TAGGED:
		return sizeof(struct fi_cq_tagged_entry);
	default:
		return sizeof(struct fi_cq_entry);
	}
}

void write_entry(Cq *cq, const CqEntry &e, void *out)
{
	switch (cq->format) {
	case FI_CQ_FORMAT_MSG: {
		struct fi_cq_msg_entry m = {e.context, e.flags, e.len};
		std::memcpy(out, &m, sizeof(m));
		break;
	}
	case FI_CQ_FORMAT_DATA: {
		struct fi_cq_data_entry d = {e.context, e.flags, e.len, e.buf, e.data};
		std::memcpy(out, &d, sizeof(d));
		break;
	}
	case FI_CQ_FORMAT_TAGGED: {
		struct fi_cq_tagged_entry t = {e.context, e.flags, e.len, e.buf, e.data, e.tag};
		std::memcpy(out, &t, sizeof(t));
		break;
	}
	default: {
		struct fi_cq_entry c = {e.context};
		std::memcpy(out, &c, sizeof(c));
		break;
	}
	}
}

/* Reads up to count entries, and with src each one's source (fi_cq(3) fi_cq_readfrom: a
 * receive's source with FI_SOURCE, else and for every initiator completion
 * FI_ADDR_NOTAVAIL; fi_msg.cpp fills CqEntry::src so). */
ssize_t cq_read_src(struct fid_cq *fcq, void *buf, size_t count, fi_addr_t *src)
{
	Cq *cq = cq_of(&fcq->fid);
	if (!cq || (!buf && count))
		return -FI_EINVAL;
	progress_all(cq);
	std::lock_guard lk(cq->mu);
	size_t n = 0;
	const size_t sz = entry_size(cq->format);
	while (n < count && cq->head != cq->tail) {
		const CqEntry &e = cq->ring[cq->head % cq->ring.size()];
		if (e.err)
			break;
		write_entry(cq, e, static_cast<uint8_t *>(buf) + n * sz);
		if (src)
			src[n] = e.src;
		cq->head++;
		n++;
	}
	if (n)
		return static_cast<ssize_t>(n);
	if (cq->head != cq->tail)
		return -FI_EAVAIL;
	return -FI_EAGAIN;
}

ssize_t cq_read(struct fid_cq *fcq, void *buf, size_t count)
{
	return cq_read_src(fcq, buf, count, nullptr);
}

ssize_t cq_readfrom(struct fid_cq *fcq, void *buf, size_t count, fi_addr_t *src)
{
	return cq_read_src(fcq, buf, count, src);
}

ssize_t cq_readerr(struct fid_cq *fcq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	Cq *cq = cq_of(&fcq->fid);
	if (!cq || !buf)
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS;
	progress_all(cq);
	std::lock_guard lk(cq->mu);
	if (cq->head == cq->tail || !cq->ring[cq->head % cq->ring.size()].err)
		return -FI_EAGAIN;
	const CqEntry &e = cq->ring[cq->head % cq->ring.size()];
	buf->op_context = e.context;
	buf->flags = e.flags;
	buf->len = e.len;
	buf->buf = e.buf;
	buf->data = e.data;
	buf->tag = e.tag;
	buf->olen = e.olen;
	buf->err = e.err;
	buf->prov_errno = e.prov_errno;
	/* No provider error data: the syndrome in prov_errno says it all. */
	buf->err_data_size = 0;
	cq->head++;
	return 1;
}

/* Milliseconds left until end (timeout -1: no end). */
int left_ms(int timeout, std::chrono::steady_clock::time_point end)
{
	if (timeout < 0)
		return -1;
	const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
		end - std::chrono::steady_clock::now());
	return ms.count() > 0 ? static_cast<int>(ms.count()) : 0;
}

ssize_t cq_sread_src(struct fid_cq *fcq, void *buf, size_t count, fi_addr_t *src, int timeout)
{
	Cq *cq = cq_of(&fcq->fid);
	if (!cq)
		return -FI_EINVAL;
	auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
	for (;;) {
		ssize_t n = cq_read_src(fcq, buf, count, src);
		if (n != -FI_EAGAIN)
			return n;
		if (cq->signaled.exchange(false, std::memory_order_relaxed))
			return -FI_EAGAIN;
		if (timeout >= 0 && std::chrono::steady_clock::now() >= end)
			return -FI_EAGAIN;
		if (cq->wait.fd < 0) {
			std::this_thread::yield();
			continue;
		}
		const int r = cq_trywait(cq);
		if (r == -FI_EAGAIN)
			continue;
		if (r != 0)
			return r;
		/* A timeout here is the loop's: the next turn reads once more and returns. */
		if (int b = waiter_block(&cq->wait, left_ms(timeout, end));
		    b != 0 && b != -FI_ETIMEDOUT)
			return b;
	}
}

ssize_t cq_sread(struct fid_cq *fcq, void *buf, size_t count, const void *, int timeout)
{
	return cq_sread_src(fcq, buf, count, nullptr, timeout);
}

ssize_t cq_sreadfrom(struct fid_cq *fcq, void *buf, size_t count, fi_addr_t *src, const void *,
		     int timeout)
{
	return cq_sread_src(fcq, buf, count, src, timeout);
}

int cq_signal(struct fid_cq *fcq)
{
	Cq *cq = cq_of(&fcq->fid);
	if (!cq)
		return -FI_EINVAL;
	cq->signaled.store(true, std::memory_order_relaxed);
	waiter_wake(&cq->wait);
	return 0;
}

int cq_control(struct fid *fid, int command, void *arg)
{
	Cq *cq = cq_of(fid);
	if (!cq)
		return -FI_EINVAL;
	return waiter_control(cq->wait_obj, cq->wait, command, arg);
}

const char *cq_strerror(struct fid_cq *, int prov_errno, const void *, char *buf, size_t len)
{
	const char *s = nicmr_wc_syndrome_str(static_cast<uint8_t>(prov_errno));
	if (buf && len) {
		std::snprintf(buf, len, "CQE syndrome 0x%02x: %s", prov_errno, s);
		return buf;
	}
	return s;
}

int cq_close(struct fid *fid)
{
	Cq *cq = reinterpret_cast<Cq *>(fid);
	{
		std::lock_guard lk(cq->bind_mu);
		if (!cq->eps.empty())
			return -FI_EBUSY;
	}
	Domain *dom = cq->domain;
	waiter_close(&cq->wait);
	delete cq;
	/* release: the CQ is gone before domain_close (acquire) may see the count drop. */
	dom->children.fetch_sub(1, std::memory_order_release);
	return 0;
}

struct fi_ops cq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = cq_close,
	.bind = no_bind,
	.control = cq_control,
	.ops_open = no_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

struct fi_ops_cq cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom,
	.readerr = cq_readerr,
	.sread = cq_sread,
	.sreadfrom = cq_sreadfrom,
	.signal = cq_signal,
	.strerror = cq_strerror,
};

} // namespace

int cq_trywait(Cq *cq)
{
	if (cq->wait.fd < 0)
		return -FI_EINVAL; /* no descriptor to block on */
	events_dispatch(cq->domain->fabric);
	waiter_drain(&cq->wait);
	auto pending = [cq] {
		progress_all(cq);
		std::lock_guard lk(cq->mu);
		return cq->head != cq->tail;
	};
	if (pending())
		return -FI_EAGAIN;
	{
		std::lock_guard lk(cq->bind_mu);
		if (int ret = eps_arm(cq->eps); ret != 0)
			return ret;
	}
	/* A completion that came before the arm is in the ring now. */
	return pending() ? -FI_EAGAIN : 0;
}

Cq *cq_of(struct fid *fid)
{
	if (!fid || fid->fclass != FI_CLASS_CQ || fid->ops != &cq_fi_ops)
		return nullptr;
	return reinterpret_cast<Cq *>(fid);
}

void cq_push(Cq *cq, const CqEntry &e)
{
	cq->ring[cq->tail % cq->ring.size()] = e;
	cq->tail++;
}

int cq_bind_ep(Cq *cq, Endpoint *ep)
{
	std::lock_guard lk(cq->bind_mu);
	try {
		cq->eps.push_back(ep);
	} catch (const std::bad_alloc &) {
		return -FI_ENOMEM;
	}
	return 0;
}

void cq_unbind(Cq *cq, Endpoint *ep)
{
	std::lock_guard lk(cq->bind_mu);
	std::erase(cq->eps, ep);
}

int cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **out, void *context)
{
	if (!domain || !attr || !out)
		return -FI_EINVAL;
	if (attr->flags)
		return -FI_EBADFLAGS;
	switch (attr->format) {
	case FI_CQ_FORMAT_UNSPEC:
	case FI_CQ_FORMAT_CONTEXT:
	case FI_CQ_FORMAT_MSG:
	case FI_CQ_FORMAT_DATA:
	case FI_CQ_FORMAT_TAGGED:
		break;
	default:
		return -FI_ENOSYS;
	}
	if (attr->wait_cond != FI_CQ_COND_NONE)
		return -FI_ENOSYS;
	Domain *dom = reinterpret_cast<Domain *>(domain);
	std::unique_ptr<Cq> cq(new (std::nothrow) Cq);
	if (!cq)
		return -FI_ENOMEM;
	try {
		cq->ring.resize(attr->size ? attr->size : kCqDefaultSize);
	} catch (const std::exception &) {
		return -FI_ENOMEM;
	}
	cq->domain = dom;
	cq->wait_obj = attr->wait_obj;
	if (int ret = waiter_setup(dom, cq->wait_obj, &cq->wait); ret != 0)
		return ret;
	cq->bind_mu.set_noop(dom->serialized);
	cq->mu.set_noop(dom->serialized);
	cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
	cq->fid.fid.fclass = FI_CLASS_CQ;
	cq->fid.fid.context = context;
	cq->fid.fid.ops = &cq_fi_ops;
	cq->fid.ops = &cq_ops;
	dom->children.fetch_add(1, std::memory_order_relaxed);
	*out = &cq.release()->fid;
	return 0;
}

} // namespace nicmr::fabric
