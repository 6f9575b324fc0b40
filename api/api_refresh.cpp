/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nicmr_mr_refresh: the pages behind an MR may have changed (the application unmapped and mapped
 * its memory again). A DMA mapping holds the pages it was made with, so the MR must be mapped
 * anew, and the key must keep working meanwhile (fi_mr_refresh without FI_MR_MMU_NOTIFY: "the MR
 * will remain enabled"):
 *
 *   map the region again (pin, fresh IOVA, dma_map) -> UMR modify of the live mkey (check
 *   "fail if free": the device sees the old translations or the new ones, never none) ->
 *   the shadow entry's IOVA -> release the old mapping
 *
 * Every step before the modify is undone on failure, and the MR stays as it was. Slow path.
 */
#include <sys/uio.h>

#include <algorithm>
#include <bit>
#include <cerrno>

#include "api_internal.h"
#include "nicmr_log.h"

using namespace nicmr;

extern "C" {

int nicmr_mr_refresh(struct nicmr_mr *mr, const struct iovec *iov, size_t count)
{
	if (mr == nullptr || mr->pd == nullptr || (iov == nullptr && count != 0))
		return -EINVAL;
	const mr::EntryFields f = mr->entry();
	for (size_t i = 0; i < count; i++) {
		const auto a = reinterpret_cast<uintptr_t>(iov[i].iov_base);
		const size_t n = iov[i].iov_len;
		if (n == 0 || a + n < a)
			return -EINVAL;
		if (a < mr->addr || a + n > mr->addr + f.len)
			return -ERANGE;
	}
	if ((f.flags & mr::kEntrySub) || mr->vec())
		return -EOPNOTSUPP;
	if (mr->pool != nullptr)
		return 0; /* mapped for the pool's life: nothing behind it can change */

	nicmr_device *dev = mr->dev();
	nicmr_mr_holdings *r = mr->held; /* the slow path's mapping is there */
	{
		/* IOVA-list MRs over its mapping would be left on the old one: -EBUSY; and none
		 * may start using it while it is being replaced. */
		std::lock_guard lk(dev->vec_mu);
		if (r->iova_users)
			return -EBUSY;
		r->iova_leaving = true;
	}
	auto done = [&](int rc) {
		std::lock_guard lk(dev->vec_mu);
		r->iova_leaving = false;
		return rc;
	};

	const bool write = f.access & (mr::kAccessLocalWrite | mr::kAccessRemoteWrite |
				       mr::kAccessRemoteAtomic);
	/* The range may lie in a pool imported since: the MR then lives on the fast path's terms
	 * (a pool MR is found by the table scan, not counted). */
	nicmr_mr_piece fresh;
	uint64_t iova = 0;
	unsigned log_page = 12;
	nicmr_pool *pool =
		nicmr_pool_of(dev, api::thread_cache(dev), mr->addr, f.len, &iova, &log_page);
	int rc = pool != nullptr ? 0
				 : nicmr_slow_piece(dev, mr->addr, f.len, write, r, &fresh, &iova,
						    &log_page);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: refresh of %#x: mapping [%#lx, +%zu) again failed: %d",
			  dev->spec.c_str(), f.mkey, (unsigned long)mr->addr, f.len, rc);
		return done(rc);
	}
	if (f.flags & mr::kEntryZeroBased)
		log_page = std::min(log_page, unsigned(std::countr_zero(iova | (1ull << 30))));
	rc = dev->engine->refresh(f.mkey, iova, uint8_t(log_page));
	if (rc) {
		NICMR_LOG(warn, "api", "%s: refresh of %#x failed: %d", dev->spec.c_str(), f.mkey,
			  rc);
		nicmr_piece_release(dev, &fresh);
		return done(rc);
	}
	/* The device and the lookups use the new mapping now: the old one may go. */
	nicmr_mr_piece old;
	old.slow = std::move(r->slow);
	std::atomic_ref(mr->pool).store(pool, std::memory_order_relaxed);
	r->slow = std::move(fresh.slow);
	nicmr_piece_release(dev, &old);
	return done(0);
}

} /* extern "C" */
