/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nicmr's device-model extensions on the native API: single-use MRs, RMA-event MRs and the
 * counters the device increments. No ConnectX has them: the device model offers them behind
 * prm::ext_cap bits that the driver read at bring-up (mlx5::Caps::ext_flags), and every call
 * that needs one says -EOPNOTSUPP on a device without it (doc/device-model.md, "Extensions").
 *
 *   nicmr_mr_reg(SINGLE_USE)  engine reg -> UMR bind -> NICMR_SET_MKEY_EXT(single_use)
 *   nicmr_mr_reg(RMA_EVENT)   engine reg (entry disabled) -> UMR bind -> SET_MKEY_EXT(disabled)
 *   nicmr_mr_bind_cntr        host state only (the counter is the device's at enable)
 *   nicmr_mr_enable           SET_MKEY_EXT(counter at the counter's IOVA) -> entry live
 *   nicmr_mr_unbind_cntr      entry disabled -> SET_MKEY_EXT(disabled) -> binding dropped
 *
 * The key is bound on the device a moment before it gets its extension state: nobody has the
 * key then (nicmr_mr_reg has not returned it, and each bind rotates the key's variant).
 * A UMR revoke or bind of the key clears the device's state, so a reused index never inherits
 * it. The device state is the driver's (mlx5::set_mkey_ext, mlx5_mkey_ext.h); this file keeps
 * the handles. Slow path throughout (device commands under the command queue's lock).
 */
#include <cerrno>
#include <new>

#include "api_internal.h"
#include "mlx5_mkey_ext.h"
#include "nicmr_log.h"

using namespace nicmr;
namespace prm = nicmr::mlx5::prm;

static_assert(NICMR_EXT_SINGLE_USE == prm::ext_cap::single_use);
static_assert(NICMR_EXT_RMA_EVENT == prm::ext_cap::rma_event);

namespace {

/* The extensions the device reported (0 on ConnectX, or with emu ext=0): NICMR_EXT_* bits,
 * which are the device's (the static_asserts above). */
uint64_t ext_of(const nicmr_device *dev)
{
	return mlx5::mkey_ext_caps(*dev->drv);
}

} // namespace

int nicmr_ext_check(const nicmr_device *dev, uint64_t flags, uint64_t access)
{
	const uint64_t ext = ext_of(dev);
	if ((flags & NICMR_MR_SINGLE_USE) && !(ext & NICMR_EXT_SINGLE_USE))
		return -EOPNOTSUPP;
	if ((flags & NICMR_MR_RMA_EVENT) && !(ext & NICMR_EXT_RMA_EVENT))
		return -EOPNOTSUPP;
	/* A window's rkey is another mkey: it would bypass the MR's single use and counting. */
	if ((flags & (NICMR_MR_SINGLE_USE | NICMR_MR_RMA_EVENT)) && (access & NICMR_ACCESS_MW_BIND))
		return -EINVAL;
	return 0;
}

int nicmr_ext_apply(nicmr_device *dev, uint32_t mkey, uint64_t ext)
{
	mlx5::MkeyExt e;
	e.single_use = ext & NICMR_MR_SINGLE_USE;
	e.disabled = ext & NICMR_MR_RMA_EVENT;
	const int rc = mlx5::set_mkey_ext(*dev->drv, mkey, e);
	if (rc)
		NICMR_LOG(warn, "api", "%s: extension state %#llx of %#x failed: %d",
			  dev->spec.c_str(), static_cast<unsigned long long>(ext), mkey, rc);
	return rc;
}

extern "C" {

int nicmr_cntr_alloc(struct nicmr_device *dev, struct nicmr_cntr **out)
{
	if (dev == nullptr || out == nullptr)
		return -EINVAL;
	if (!(ext_of(dev) & NICMR_EXT_RMA_EVENT))
		return -EOPNOTSUPP;
	auto *c = new (std::nothrow) nicmr_cntr;
	if (c == nullptr)
		return -ENOMEM;
	c->dev = dev;
	/* 8 bytes, 8-aligned, of the memory the device reaches (as CQ buffers are). */
	int rc = dev->drv->arena().alloc(8, 8, &c->block);
	if (rc) {
		delete c;
		return rc == -EINVAL ? -ENOMEM : rc;
	}
	/* Relaxed: nobody else can see the counter until *out is handed over. */
	std::atomic_ref<uint64_t>(*static_cast<uint64_t *>(c->block.va))
		.store(0, std::memory_order_relaxed);
	dev->cntrs.fetch_add(1, std::memory_order_relaxed);
	*out = c;
	return 0;
}

int nicmr_cntr_free(struct nicmr_cntr *c)
{
	if (c == nullptr)
		return -EINVAL;
	if (c->binds.load(std::memory_order_relaxed) != 0)
		return -EBUSY;
	nicmr_device *dev = c->dev;
	if (dev->drv->arena().release(c->block) != 0)
		NICMR_LOG(error, "api", "%s: counter at %#llx was not the arena's",
			  dev->spec.c_str(), static_cast<unsigned long long>(c->block.iova));
	delete c;
	/* Release: the counter's memory is back in the arena before a close sees the count. */
	dev->cntrs.fetch_sub(1, std::memory_order_release);
	return 0;
}

uint64_t nicmr_cntr_read(const struct nicmr_cntr *c)
{
	/* Hot path: one load, no lock, no system call. Acquire pairs with the device's release
	 * increment: the data of every counted write is visible once its count is. */
	if (c == nullptr)
		return 0;
	return std::atomic_ref<uint64_t>(*static_cast<uint64_t *>(c->block.va))
		.load(std::memory_order_acquire);
}

int nicmr_mr_bind_cntr(struct nicmr_mr *mr, struct nicmr_cntr *c, uint64_t flags)
{
	if (mr == nullptr || c == nullptr || flags != NICMR_REMOTE_WRITE || c->dev != mr->dev() ||
	    !(mr->ext() & NICMR_MR_RMA_EVENT))
		return -EINVAL;
	nicmr_mr_holdings *r = mr->held;
	/* fi_mr(3): after fi_mr_enable no further bindings may be made. */
	if (mr->enabled() || r->cntr != nullptr)
		return -EBUSY;
	r->cntr = c;
	/* Relaxed: a count for nicmr_cntr_free, whose caller orders its calls with this one. */
	c->binds.fetch_add(1, std::memory_order_relaxed);
	return 0;
}

int nicmr_mr_enable(struct nicmr_mr *mr)
{
	if (mr == nullptr || !(mr->ext() & NICMR_MR_RMA_EVENT))
		return -EINVAL;
	nicmr_mr_holdings *r = mr->held;
	if (mr->enabled())
		return -EBUSY;
	mlx5::MkeyExt e;
	e.single_use = mr->ext() & NICMR_MR_SINGLE_USE;
	if (r->cntr != nullptr) {
		e.counted = true;
		e.counter_iova = r->cntr->block.iova;
	}
	nicmr_device *dev = mr->dev();
	/* Device first: lookups accept the key only once the device does too. */
	int rc = mlx5::set_mkey_ext(*dev->drv, mr->mkey(), e);
	if (rc == 0)
		rc = dev->engine->set_enabled(mr->mkey(), true);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: enable of %#x failed: %d", dev->spec.c_str(),
			  mr->mkey(), rc);
		return rc;
	}
	return 0;
}

int nicmr_mr_unbind_cntr(struct nicmr_mr *mr)
{
	if (mr == nullptr || !(mr->ext() & NICMR_MR_RMA_EVENT))
		return -EINVAL;
	nicmr_mr_holdings *r = mr->held;
	if (r->cntr == nullptr)
		return -ENOENT;
	nicmr_device *dev = mr->dev();
	const bool was_enabled = mr->enabled();
	/* Lookups first, then the device: neither accepts the key once this returns. */
	int rc = dev->engine->set_enabled(mr->mkey(), false);
	if (rc)
		return rc;
	mlx5::MkeyExt e;
	e.disabled = true;
	e.single_use = mr->ext() & NICMR_MR_SINGLE_USE;
	rc = mlx5::set_mkey_ext(*dev->drv, mr->mkey(), e);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: unbind of %#x failed: %d", dev->spec.c_str(),
			  mr->mkey(), rc);
		if (was_enabled)
			(void)dev->engine->set_enabled(mr->mkey(), true);
		return rc;
	}
	r->cntr->binds.fetch_sub(1, std::memory_order_relaxed);
	r->cntr = nullptr;
	return 0;
}

int nicmr_mr_query(const struct nicmr_mr *mr, struct nicmr_mr_info *info)
{
	/* No lock, no allocation, no system call: the shadow entry and the MR's holdings. */
	if (mr == nullptr || mr->pd == nullptr || info == nullptr)
		return -EINVAL;
	const mr::EntryFields f = mr->entry();
	const nicmr_mr_holdings *h = mr->held;
	info->base = (f.flags & mr::kEntrySub) ? mr->base() : nullptr;
	/* A sub-MR is zero-based when its base is (nicmr_mr_reg_sub). */
	const uint16_t zflags = info->base != nullptr ? info->base->entry().flags : f.flags;
	info->flags = ((zflags & mr::kEntryZeroBased) ? NICMR_MR_ZERO_BASED : 0) | mr->ext();
	info->cntr = h != nullptr ? h->cntr : nullptr;
	info->segments = (h != nullptr && h->vec) ? uint32_t(h->vec->pieces.size()) : 1u;
	info->enabled = mr->enabled() ? 1 : 0;
	info->access = mr::access_granted(f.access);
	info->pd = mr->pd;
	return 0;
}

} /* extern "C" */
