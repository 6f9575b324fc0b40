/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * PDs and memory regions.
 *
 *   nicmr_mr_reg: check arguments -> access bits (mr::access_grant) -> fast path (a pool holds
 *   the range: its IOVA, the largest page its placement allows) or slow path (api_mem.cpp) ->
 *   Engine::reg (key, device programming, shadow table) -> the key's slot in mr_table.
 * Every step taken is undone when a later one fails: a failed registration leaves no key, no
 * mkey, no mapping, no locked page and no object.
 *
 * Hot path: nicmr_mr_reg of pool memory, nicmr_mr_reg_sub and their nicmr_mr_dereg take no
 * lock, allocate nothing and make no system call: the pool comes from the DmaSpace's lock-free
 * lookup, the key from the thread's cache, the device programming from the thread's own UMR
 * lane, and the handle is the key's slot in the device's MR table. (The slow path, vectored
 * registration and the device-model extensions do lock, allocate and call the kernel.)
 */
#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "api_internal.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

constexpr uint64_t kKnownFlags =
	NICMR_MR_REQUESTED_KEY | NICMR_MR_ZERO_BASED | NICMR_MR_SINGLE_USE | NICMR_MR_RMA_EVENT;

unsigned log2_floor(uint64_t x)
{
	return 63u - unsigned(std::countl_zero(x));
}

/* ThreadSanitizer does not see the hand-over of a key index through the engine's rings (DPDK's
 * inline ring code orders it with fences TSan does not model); these tell it that the thread
 * that empties a slot is done with it before the next owner fills it. No code otherwise. */
inline void slot_released(const nicmr_mr *slot) noexcept
{
#if defined(__SANITIZE_THREAD__)
	__tsan_release(const_cast<nicmr_mr *>(slot));
#else
	(void)slot;
#endif
}
inline void slot_acquired(const nicmr_mr *slot) noexcept
{
#if defined(__SANITIZE_THREAD__)
	__tsan_acquire(const_cast<nicmr_mr *>(slot));
#else
	(void)slot;
#endif
}

} // namespace

namespace {

/* The MR count of nicmr_device_get_stats, kept as MRs come and go so that stats need no scan of
 * the table. Registration path: with a thread cache, a plain load and store of the thread's
 * own counter (its line is the cache's, which the registration touched already); without one
 * (the shared slot, small devices), a relaxed read-modify-write of the device's count, which
 * those threads' pool lookup marks pay as well. Relaxed: a count for diagnostics, ordered
 * with nothing. */
inline void count_mr(nicmr_device *dev, api::ThreadCache *tc, int64_t d) noexcept
{
	if (tc != nullptr)
		tc->mrs.store(tc->mrs.load(std::memory_order_relaxed) + d,
			      std::memory_order_relaxed);
	else
		dev->mrs_uncached.fetch_add(d, std::memory_order_relaxed);
}

} // namespace

nicmr_mr *nicmr_mr_publish(nicmr_device *dev, api::ThreadCache *tc, uint32_t mkey,
			   const nicmr_mr &draft) noexcept
{
	nicmr_mr *slot = nicmr_mr_slot(dev, mkey);
	slot_acquired(slot);
	/* Field by field: scans read pd and pool at any time, so those two are atomic stores. */
	slot->held = draft.held;
	slot->addr = draft.addr;
	std::atomic_ref(slot->pool).store(draft.pool, std::memory_order_relaxed);
	std::atomic_ref(slot->pd).store(draft.pd, std::memory_order_release);
	count_mr(dev, tc, 1);
	return slot;
}

void nicmr_mr_unpublish(nicmr_device *dev, api::ThreadCache *tc, nicmr_mr *slot) noexcept
{
	count_mr(dev, tc, -1);
	std::atomic_ref(slot->pool).store(nullptr, std::memory_order_relaxed);
	std::atomic_ref(slot->pd).store(nullptr, std::memory_order_relaxed);
	slot_released(slot);
}

uint64_t nicmr_mr_count(const nicmr_device *dev, const nicmr_pd *pd,
			const nicmr_pool *pool) noexcept
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < dev->mr_slots; i++) {
		nicmr_mr &m = dev->mr_table[i];
		nicmr_pd *p = std::atomic_ref(m.pd).load(std::memory_order_acquire);
		if (p == nullptr || (pd != nullptr && p != pd))
			continue;
		if (pool != nullptr &&
		    std::atomic_ref(m.pool).load(std::memory_order_relaxed) != pool)
			continue;
		n++;
	}
	return n;
}

nicmr_pool *nicmr_pool_of(nicmr_device *dev, api::ThreadCache *tc, uintptr_t a, size_t len,
			  uint64_t *iova, unsigned *log_page) noexcept
{
	/* Hot path: the DmaSpace's lock-free lookup. A pool is not destroyed while
	 * registrations inside it run (nicmr.h); the snapshot the lookup reads is not freed
	 * while the mark lives (pool create/destroy wait for it: wait_for_pool_lookups). */
	api::PoolLookupMark mark(dev, tc);
	const mem::PoolEntry *e = dev->space->lookup(reinterpret_cast<void *>(a), len);
	if (e == nullptr || e->owner == nullptr)
		return nullptr;
	*iova = e->iova + (a - e->va);
	*log_page = std::clamp(log2_floor(e->iova_align), 12u, 30u);
	return static_cast<nicmr_pool *>(e->owner);
}

int nicmr_slow_piece(nicmr_device *dev, uintptr_t a, size_t len, bool write,
		     nicmr_mr_holdings *owner, nicmr_mr_piece *piece, uint64_t *iova,
		     unsigned *log_page)
{
	int rc = nicmr_slow_map_create(dev, a, len, write, &piece->slow);
	if (rc)
		return rc;
	*iova = piece->slow->iova + (a - piece->slow->va);
	*log_page = std::clamp(log2_floor(piece->slow->align), 12u, 30u);
	/* Recorded by IOVA: IOVA-list and page-vector MRs may use the mapping (api_mr_vec.cpp). */
	try {
		std::lock_guard lk(dev->vec_mu);
		dev->slow_by_iova.emplace(
			piece->slow->iova,
			nicmr_slow_ref{piece->slow->len, piece->slow->align, owner});
	} catch (...) {
		nicmr_slow_map_release(dev, std::move(piece->slow));
		return -ENOMEM;
	}
	return 0;
}

int nicmr_piece_map(nicmr_device *dev, uintptr_t a, size_t len, bool write,
		    nicmr_mr_holdings *owner, nicmr_mr_piece *piece, uint64_t *iova,
		    unsigned *log_page)
{
	piece->pool = nicmr_pool_of(dev, api::thread_cache(dev), a, len, iova, log_page);
	if (piece->pool == nullptr)
		return nicmr_slow_piece(dev, a, len, write, owner, piece, iova, log_page);
	piece->pool->pieces.fetch_add(1, std::memory_order_relaxed);
	return 0;
}

void nicmr_piece_release(nicmr_device *dev, nicmr_mr_piece *piece)
{
	if (piece->pool) {
		/* Release: this MR's uses of the pool happen before a destroy that reads 0. */
		piece->pool->pieces.fetch_sub(1, std::memory_order_release);
		piece->pool = nullptr;
	}
	if (piece->slow || piece->owner) {
		std::lock_guard lk(dev->vec_mu);
		if (piece->slow)
			dev->slow_by_iova.erase(piece->slow->iova);
		if (piece->owner)
			piece->owner->iova_users--;
		piece->owner = nullptr;
	}
	if (piece->slow)
		nicmr_slow_map_release(dev, std::move(piece->slow));
}

int nicmr_access_bits(uint64_t access, uint8_t *bits)
{
	return mr::access_grant(access, bits);
}

extern "C" {

int nicmr_pd_alloc(struct nicmr_device *dev, struct nicmr_pd **out)
{
	if (dev == nullptr || out == nullptr)
		return -EINVAL;
	auto *pd = new (std::nothrow) nicmr_pd;
	if (pd == nullptr)
		return -ENOMEM;
	pd->dev = dev;
	int rc = mlx5::PdHandle::alloc(*dev->drv, &pd->handle);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: ALLOC_PD failed: %d", dev->spec.c_str(), rc);
		delete pd;
		return rc;
	}
	dev->pds.fetch_add(1, std::memory_order_relaxed);
	*out = pd;
	return 0;
}

int nicmr_pd_free(struct nicmr_pd *pd)
{
	if (pd == nullptr)
		return -EINVAL;
	nicmr_device *dev = pd->dev;
	const uint64_t mrs =
		pd->users.load(std::memory_order_acquire) + nicmr_mr_count(dev, pd, nullptr);
	if (mrs) {
		NICMR_LOG(warn, "api", "%s: PD %u free refused: %llu MRs, windows and QPs live",
			  dev->spec.c_str(), pd->handle.pd(), static_cast<unsigned long long>(mrs));
		return -EBUSY;
	}
	int rc = pd->handle.reset();
	if (rc)
		NICMR_LOG(warn, "api", "%s: DEALLOC_PD %u failed: %d", dev->spec.c_str(),
			  pd->handle.pd(), rc);
	dev->pds.fetch_sub(1, std::memory_order_relaxed);
	delete pd;
	return 0;
}

uint32_t nicmr_pd_num(const struct nicmr_pd *pd)
{
	return pd ? pd->handle.pd() : 0;
}

int nicmr_mr_reg(struct nicmr_pd *pd, void *addr, size_t len, uint64_t access, uint64_t flags,
		 uint64_t requested_key, struct nicmr_mr **out)
{
	if (pd == nullptr || out == nullptr || len == 0)
		return -EINVAL;
	const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
	if (a + len < a)
		return -EINVAL;
	if (flags & ~kKnownFlags)
		return -EOPNOTSUPP;
	uint8_t bits = 0;
	if (mr::access_grant(access & ~NICMR_ACCESS_ON_DEMAND, &bits) != 0)
		return -EINVAL;
	if (access & NICMR_ACCESS_ON_DEMAND)
		return nicmr_odp_reg(pd, a, len, bits, flags, requested_key, out);
	const bool zero = flags & NICMR_MR_ZERO_BASED;
	/* The device places offset 0 at the start of a translation page. */
	if (zero && (a & 4095))
		return -EINVAL;
	nicmr_device *dev = pd->dev;
	if (flags & (NICMR_MR_SINGLE_USE | NICMR_MR_RMA_EVENT)) {
		if (int rc = nicmr_ext_check(dev, flags, access); rc)
			return rc;
	}
	/* One slot lookup for the pool's lookup mark and the engine's key cache. */
	api::ThreadCache *tc = api::thread_cache(dev);

	nicmr_mr m{};
	m.pd = pd;
	m.addr = a;
	uint64_t iova = 0;

	/* RMA-event (its counter binding) and slow-path MRs carry more than the handle (never on
	 * the pool fast path). */
	std::unique_ptr<nicmr_mr_holdings> rare;
	const uint64_t ext = flags & (NICMR_MR_SINGLE_USE | NICMR_MR_RMA_EVENT);
	auto make_rare = [&rare]() {
		if (!rare)
			rare.reset(new (std::nothrow) nicmr_mr_holdings);
		return rare != nullptr;
	};
	if ((ext & NICMR_MR_RMA_EVENT) && !make_rare())
		return -ENOMEM;

	unsigned log_page = 12;
	{
		const bool write = bits & (mr::kAccessLocalWrite | mr::kAccessRemoteWrite |
					   mr::kAccessRemoteAtomic);
		m.pool = nicmr_pool_of(dev, tc, a, len, &iova, &log_page);
		if (m.pool == nullptr) {
			if (!make_rare())
				return -ENOMEM;
			nicmr_mr_piece piece;
			int rc = nicmr_slow_piece(dev, a, len, write, rare.get(), &piece, &iova,
						  &log_page);
			if (rc)
				return rc;
			rare->slow = std::move(piece.slow);
		}
	}
	/* Zero-based: offset 0 is the start of a translation page, so the page may not be larger
	 * than the IOVA's alignment. */
	if (zero)
		log_page = std::min(log_page, unsigned(std::countr_zero(iova | (1ull << 30))));

	mr::RegRequest req;
	req.addr = a;
	req.len = len;
	req.access = bits;
	req.pd = pd->handle.pd();
	req.iova = iova;
	req.log_page_size = uint8_t(log_page);
	req.requested_key = requested_key;
	req.flags = ((flags & NICMR_MR_REQUESTED_KEY) ? uint32_t(mr::kRegRequestedKey) : 0u) |
		    (zero ? uint32_t(mr::kRegZeroBased) : 0u) |
		    ((flags & NICMR_MR_SINGLE_USE) ? uint32_t(mr::kRegSingleUse) : 0u) |
		    ((flags & NICMR_MR_RMA_EVENT) ? uint32_t(mr::kRegRmaEvent) : 0u);
	uint32_t mkey = 0;
	int rc = dev->engine->reg(req, api::key_cache(tc), &mkey);
	if (rc == 0 && ext) {
		/* The key is bound on the device: give it its extension state before anyone
		 * has it, or take it back. */
		rc = nicmr_ext_apply(dev, mkey, ext);
		if (rc && dev->engine->dereg(mkey, api::key_cache(tc)) != 0)
			NICMR_LOG(error, "api", "%s: dereg of %#x after its failed extension",
				  dev->spec.c_str(), mkey);
	}
	api::note_cache_size(tc);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: reg [%#lx, +%zu) access %#llx failed: %d",
			  dev->spec.c_str(), (unsigned long)a, len,
			  static_cast<unsigned long long>(access), rc);
		if (rare && rare->slow) {
			nicmr_mr_piece piece;
			piece.slow = std::move(rare->slow);
			nicmr_piece_release(dev, &piece);
		}
		return rc;
	}
	m.held = rare.release();
	*out = nicmr_mr_publish(dev, tc, mkey, m);
	return 0;
}

int nicmr_mr_reg_sub(struct nicmr_mr *base, size_t offset, size_t len, uint64_t access,
		     uint64_t flags, uint64_t requested_key, struct nicmr_mr **out)
{
	if (base == nullptr || out == nullptr || len == 0)
		return -EINVAL;
	if (flags & ~uint64_t(NICMR_MR_REQUESTED_KEY))
		return -EOPNOTSUPP;
	uint8_t bits = 0;
	if (mr::access_grant(access, &bits) != 0)
		return -EINVAL;
	if (base->pd == nullptr)
		return -EINVAL;
	const mr::EntryFields b = base->entry();
	if (offset > b.len || len > b.len - offset)
		return -ERANGE;
	nicmr_device *dev = base->dev();
	nicmr_mr m{};
	m.pd = base->pd;
	m.addr = base->addr + offset;

	mr::RegRequest req;
	req.addr = b.start + offset; /* in the base's address space */
	req.len = len;
	req.access = bits;
	req.requested_key = requested_key;
	req.flags = (flags & NICMR_MR_REQUESTED_KEY) ? uint32_t(mr::kRegRequestedKey) : 0u;
	api::ThreadCache *tc = api::thread_cache(dev);
	uint32_t mkey = 0;
	int rc = dev->engine->reg_sub(b.mkey, req, api::key_cache(tc), &mkey);
	api::note_cache_size(tc);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: sub-MR of %#x (+%zu, %zu bytes) failed: %d",
			  dev->spec.c_str(), b.mkey, offset, len, rc);
		return rc;
	}
	*out = nicmr_mr_publish(dev, tc, mkey, m);
	return 0;
}

int nicmr_mr_dereg(struct nicmr_mr *mr)
{
	if (mr == nullptr || mr->pd == nullptr)
		return -EINVAL;
	nicmr_device *dev = mr->dev();
	nicmr_mr_holdings *rare = mr->held;
	/* fi_mr(3): closing an MR with counters associated is busy (nicmr_mr_unbind_cntr); a
	 * registration cache's MR goes back through nicmr_mr_cache_dereg. */
	if (rare != nullptr && (rare->cntr != nullptr || rare->in_cache))
		return -EBUSY;
	const bool maps = rare != nullptr && (rare->slow || rare->vec);
	if (maps) {
		/* IOVA-list and page-vector MRs over its mappings keep it (-EBUSY); from here on
		 * no new one may start using them. */
		std::lock_guard lk(dev->vec_mu);
		if (rare->iova_users)
			return -EBUSY;
		rare->iova_leaving = true;
	}
	/* The slot is emptied while the key is still ours: once the engine has it back, another
	 * thread may get the index and fill the slot. */
	const nicmr_mr saved = *mr;
	const uint32_t mkey = mr->mkey();
	api::ThreadCache *tc = api::thread_cache(dev);
	nicmr_mr_unpublish(dev, tc, mr);
	int rc = rare != nullptr && rare->odp
			 ? nicmr_odp_dereg(dev, rare->odp.get(), mkey, api::key_cache(tc))
			 : dev->engine->dereg(mkey, api::key_cache(tc));
	api::note_cache_size(tc);
	if (rc) {
		if (rc != -EBUSY)
			NICMR_LOG(warn, "api", "%s: dereg of %#x failed: %d", dev->spec.c_str(),
				  mkey, rc);
		nicmr_mr_publish(dev, tc, mkey, saved);
		if (maps) {
			std::lock_guard lk(dev->vec_mu);
			rare->iova_leaving = false;
		}
		return rc;
	}
	/* The device refuses the key now: its memory may go. */
	if (rare != nullptr) {
		if (rare->odp)
			nicmr_odp_release(dev, rare->odp.get());
		if (rare->vec)
			nicmr_vec_release(dev, rare->vec.get());
		if (rare->slow) {
			nicmr_mr_piece piece;
			piece.slow = std::move(rare->slow);
			nicmr_piece_release(dev, &piece);
		}
		delete rare;
	}
	return 0;
}

uint32_t nicmr_mr_key(const struct nicmr_mr *mr)
{
	return mr && mr->pd ? mr->mkey() : 0;
}

void *nicmr_mr_addr(const struct nicmr_mr *mr)
{
	return mr ? reinterpret_cast<void *>(mr->addr) : nullptr;
}

size_t nicmr_mr_len(const struct nicmr_mr *mr)
{
	return mr && mr->pd ? mr->entry().len : 0;
}

int nicmr_mr_in_pool(const struct nicmr_mr *mr)
{
	if (mr == nullptr)
		return -EINVAL;
	if (mr->pd == nullptr)
		return -EINVAL;
	const nicmr_mr *m = mr;
	while (const nicmr_mr *b = m->base())
		m = b;
	if (m->pool != nullptr)
		return 1;
	/* A vectored MR has no one pool: each segment (piece) has its own, or a slow mapping
	 * (its own, or another MR's for an IOVA-list or page-vector MR). */
	const nicmr_mr_holdings *h = m->held;
	if (h == nullptr || !h->vec || h->vec->pieces.empty())
		return 0;
	return std::all_of(h->vec->pieces.begin(), h->vec->pieces.end(),
			   [](const nicmr_mr_piece &p) { return p.pool != nullptr; })
		       ? 1
		       : 0;
}

int nicmr_mr_raw_attr(const struct nicmr_mr *mr, void *buf, size_t *size)
{
	if (mr == nullptr || mr->pd == nullptr || size == nullptr || (buf == nullptr && *size > 0))
		return -EINVAL;
	return mr->dev()->engine->raw_attr(mr->mkey(), static_cast<uint8_t *>(buf), size);
}

} /* extern "C" */
