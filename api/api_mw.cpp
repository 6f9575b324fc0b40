/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory windows (type 2). A bound window is, to the registration engine, a sub-region of its MR
 * with its own key and remote rights only (mr::kRegWindow): the engine holds the MR while the
 * window lives, checks that the MR allows windows and grants at least the window's rights, and
 * the key programmer binds the window's mkey with one UMR over the MR's translations (lr = lw =
 * 0: a window's key never serves local access, as on ConnectX). Invalidation revokes that mkey
 * and retires its key through the grace period of every key, so a rebind gets a new rkey and
 * the old one never matches again.
 *
 * Slow path throughout: binds are rare next to the RDMA they enable.
 */
#include <cerrno>
#include <new>

#include "api_internal.h"
#include "nicmr_log.h"

using namespace nicmr;

extern "C" {

int nicmr_mw_alloc(struct nicmr_pd *pd, struct nicmr_mw **out)
{
	if (pd == nullptr || out == nullptr)
		return -EINVAL;
	auto *mw = new (std::nothrow) nicmr_mw;
	if (mw == nullptr)
		return -ENOMEM;
	mw->pd = pd;
	/* The PD's count of what lives in it: nicmr_pd_free says -EBUSY while it is not 0. */
	pd->users.fetch_add(1, std::memory_order_relaxed);
	pd->dev->mws.fetch_add(1, std::memory_order_relaxed);
	*out = mw;
	return 0;
}

int nicmr_mw_free(struct nicmr_mw *mw)
{
	if (mw == nullptr)
		return -EINVAL;
	if (mw->key != 0)
		return -EBUSY;
	/* Release: the window's last use happens before a PD free that sees the count drop. */
	mw->pd->users.fetch_sub(1, std::memory_order_release);
	mw->pd->dev->mws.fetch_sub(1, std::memory_order_relaxed);
	delete mw;
	return 0;
}

int nicmr_mw_bind(struct nicmr_mw *mw, struct nicmr_mr *mr, uint64_t addr, size_t len,
		  uint64_t access, uint32_t *rkey)
{
	if (mw == nullptr || mr == nullptr || rkey == nullptr || len == 0 || addr + len < addr)
		return -EINVAL;
	uint8_t bits = 0;
	if (mr::access_window(access, &bits) != 0 || mr->pd != mw->pd)
		return -EINVAL;
	if (mw->key != 0)
		return -EBUSY;
	nicmr_device *dev = mw->pd->dev;
	mr::RegRequest req;
	req.addr = addr; /* in the MR's address space, which the window keeps */
	req.len = len;
	req.access = bits;
	req.flags = mr::kRegWindow;
	api::ThreadCache *tc = api::thread_cache(dev);
	uint32_t key = 0;
	int rc = dev->engine->reg_sub(mr->mkey(), req, api::key_cache(tc), &key);
	api::note_cache_size(tc);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: window bind to MR %#x [%#llx, +%zu) failed: %d",
			  dev->spec.c_str(), mr->mkey(), static_cast<unsigned long long>(addr), len,
			  rc);
		return rc;
	}
	mw->mr = mr;
	mw->key = key;
	mw->start = addr;
	mw->len = len;
	*rkey = key;
	return 0;
}

int nicmr_mw_invalidate(struct nicmr_mw *mw)
{
	if (mw == nullptr)
		return -EINVAL;
	if (mw->key == 0)
		return -ENOENT;
	nicmr_device *dev = mw->pd->dev;
	api::ThreadCache *tc = api::thread_cache(dev);
	int rc = dev->engine->dereg(mw->key, api::key_cache(tc));
	api::note_cache_size(tc);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: window %#x invalidate failed: %d", dev->spec.c_str(),
			  mw->key, rc);
		return rc;
	}
	mw->key = 0;
	mw->mr = nullptr;
	return 0;
}

uint32_t nicmr_mw_rkey(const struct nicmr_mw *mw)
{
	return mw ? mw->key : 0;
}

} /* extern "C" */
