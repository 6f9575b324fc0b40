/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Event queues. An RDM endpoint of nicmr has no connection events, AVs insert synchronously
 * and MR registration completes in the call, so an EQ carries no events: fi_eq_read and
 * fi_eq_readerr say -FI_EAGAIN, fi_eq_sread waits its timeout and says the same. Errors of
 * requests are reported on the CQ (fi_cq_readerr), never here. fi_eq_write is not offered.
 */
#include <chrono>
#include <cstdio>
#include <memory>
#include <new>
#include <thread>

#include "fi_internal.h"

namespace nicmr::fabric {

namespace {

ssize_t eq_read(struct fid_eq *feq, uint32_t *, void *, size_t, uint64_t flags)
{
	if (!eq_of(&feq->fid))
		return -FI_EINVAL;
	if (flags & ~FI_PEEK)
		return -FI_EBADFLAGS;
	return -FI_EAGAIN;
}

ssize_t eq_readerr(struct fid_eq *feq, struct fi_eq_err_entry *buf, uint64_t flags)
{
	if (!eq_of(&feq->fid) || !buf)
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS;
	return -FI_EAGAIN;
}

ssize_t eq_sread(struct fid_eq *feq, uint32_t *event, void *buf, size_t len, int timeout,
		 uint64_t flags)
{
	ssize_t ret = eq_read(feq, event, buf, len, flags);
	if (ret != -FI_EAGAIN || timeout == 0)
		return ret;
	/* Nothing can arrive: wait what was asked (forever is refused: it would hang). */
	if (timeout < 0)
		return -FI_EINVAL;
	std::this_thread::sleep_for(std::chrono::milliseconds(timeout));
	return -FI_EAGAIN;
}

const char *eq_strerror(struct fid_eq *, int, const void *, char *buf, size_t len)
{
	const char *s = "nicmr EQs carry no events";
	if (buf && len) {
		std::snprintf(buf, len, "%s", s);
		return buf;
	}
	return s;
}

int eq_close(struct fid *fid)
{
	Eq *eq = reinterpret_cast<Eq *>(fid);
	/* acquire: pairs with an endpoint close's release; it no longer uses the EQ. */
	if (eq->eps.load(std::memory_order_acquire) != 0)
		return -FI_EBUSY;
	Fabric *fab = eq->fabric;
	delete eq;
	/* release: the EQ is gone before fabric_close (acquire) may see the count drop. */
	fab->eqs.fetch_sub(1, std::memory_order_release);
	return 0;
}

struct fi_ops eq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = eq_close,
	.bind = no_bind,
	.control = no_control,
	.ops_open = no_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

struct fi_ops_eq eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = [](struct fid_eq *, uint32_t, const void *, size_t, uint64_t) -> ssize_t {
		return -FI_ENOSYS;
	},
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
	if (!fabric || !attr || !out)
		return -FI_EINVAL;
	if (attr->flags)
		return -FI_EBADFLAGS;
	if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
		return -FI_ENOSYS;
	Fabric *fab = reinterpret_cast<Fabric *>(fabric);
	std::unique_ptr<Eq> eq(new (std::nothrow) Eq);
	if (!eq)
		return -FI_ENOMEM;
	eq->fabric = fab;
	eq->fid.fid.fclass = FI_CLASS_EQ;
	eq->fid.fid.context = context;
	eq->fid.fid.ops = &eq_fi_ops;
	eq->fid.ops = &eq_ops;
	fab->eqs.fetch_add(1, std::memory_order_relaxed);
	*out = &eq.release()->fid;
	return 0;
}

} // namespace nicmr::fabric
