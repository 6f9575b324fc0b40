/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * PDs and memory regions.
 *
 *   nicmr_mr_reg: check arguments -> access bits (fi_mr or ibv rules) -> fast path (a pool holds
 *   the range: its IOVA, the largest page its placement allows) or slow path (api_mem.cpp) ->
 *   Engine::reg (key, device programming, shadow table) -> counts.
 * Every step taken is undone when a later one fails: a failed registration leaves no key, no
 * mkey, no mapping, no locked page and no object.
 *
 * Not yet the lock-free fast path DESIGN.md asks for: registration allocates its nicmr_mr and
 * counts pool users under the device's shared lock (the UMR programmer below takes no lock on a
 * thread's own lane). Key lookups (nicmr_key_lookup) do keep the rule: no lock, no allocation,
 * no system call.
 */
#include <algorithm>
#include <bit>
#include <cerrno>

#include "api_internal.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

constexpr uint64_t kFiFamily = NICMR_ACCESS_SEND | NICMR_ACCESS_RECV | NICMR_ACCESS_READ |
			       NICMR_ACCESS_WRITE | NICMR_ACCESS_REMOTE_READ |
			       NICMR_ACCESS_REMOTE_WRITE;
constexpr uint64_t kIbvOnly =
	NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_ATOMIC | NICMR_ACCESS_MW_BIND;
constexpr uint64_t kKnownFlags =
	NICMR_MR_REQUESTED_KEY | NICMR_MR_ZERO_BASED | NICMR_MR_SINGLE_USE | NICMR_MR_RMA_EVENT;

/* NICMR_ACCESS_* to mkey bits through lib/mr's two mappings (see nicmr.h for the rule). */
int access_bits(uint64_t access, uint8_t *bits)
{
	if (access & ~(kFiFamily | kIbvOnly))
		return -EINVAL;
	uint64_t fi = 0;
	if (access & NICMR_ACCESS_SEND)
		fi |= mr::kFiSend;
	if (access & NICMR_ACCESS_RECV)
		fi |= mr::kFiRecv;
	if (access & NICMR_ACCESS_READ)
		fi |= mr::kFiRead;
	if (access & NICMR_ACCESS_WRITE)
		fi |= mr::kFiWrite;
	if (!(access & kIbvOnly)) {
		if (access & NICMR_ACCESS_REMOTE_READ)
			fi |= mr::kFiRemoteRead;
		if (access & NICMR_ACCESS_REMOTE_WRITE)
			fi |= mr::kFiRemoteWrite;
		return mr::access_from_fi(fi, bits);
	}
	unsigned ibv = 0;
	if (access & NICMR_ACCESS_LOCAL_WRITE)
		ibv |= mr::kIbvLocalWrite;
	if (access & NICMR_ACCESS_REMOTE_READ)
		ibv |= mr::kIbvRemoteRead;
	if (access & NICMR_ACCESS_REMOTE_WRITE)
		ibv |= mr::kIbvRemoteWrite;
	if (access & NICMR_ACCESS_REMOTE_ATOMIC)
		ibv |= mr::kIbvRemoteAtomic;
	if (access & NICMR_ACCESS_MW_BIND)
		ibv |= mr::kIbvMwBind;
	uint8_t a = 0, b = 0;
	int rc = mr::access_from_ibv(ibv, &a);
	if (rc == 0)
		rc = mr::access_from_fi(fi, &b);
	*bits = uint8_t(a | b);
	return rc;
}

unsigned log2_floor(uint64_t x)
{
	return 63u - unsigned(std::countl_zero(x));
}

} // namespace

int nicmr_piece_map(nicmr_device *dev, uintptr_t a, size_t len, bool write, nicmr_mr *owner,
		    nicmr_mr_piece *piece, uint64_t *iova, unsigned *log_page)
{
	{
		/* Fast path: a pool holds the whole range. Counted in under the shared lock so
		 * that the pool cannot be destroyed between the lookup and the count. */
		std::shared_lock lk(dev->objs_mu);
		const mem::PoolEntry *e = dev->space->lookup(reinterpret_cast<void *>(a), len);
		if (e != nullptr) {
			auto it = dev->pools.find(e->pool);
			if (it != dev->pools.end()) {
				piece->pool = it->second;
				piece->pool->mrs.fetch_add(1, std::memory_order_relaxed);
				*iova = e->iova + (a - e->va);
				*log_page = std::clamp(log2_floor(e->iova_align), 12u, 30u);
				return 0;
			}
		}
	}
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

void nicmr_piece_release(nicmr_device *dev, nicmr_mr_piece *piece)
{
	if (piece->pool) {
		/* Release: this MR's uses of the pool happen before a destroy that reads 0. */
		piece->pool->mrs.fetch_sub(1, std::memory_order_release);
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
	return access_bits(access, bits);
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
	const uint64_t mrs = pd->mrs.load(std::memory_order_acquire);
	if (mrs) {
		NICMR_LOG(warn, "api", "%s: PD %u free refused: %llu MRs and windows live",
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
	if (access_bits(access, &bits) != 0)
		return -EINVAL;
	const bool zero = flags & NICMR_MR_ZERO_BASED;
	/* The device places offset 0 at the start of a translation page. */
	if (zero && (a & 4095))
		return -EINVAL;
	nicmr_device *dev = pd->dev;
	if (int rc = nicmr_ext_check(dev, flags, access); rc)
		return rc;

	auto m = std::unique_ptr<nicmr_mr>(new (std::nothrow) nicmr_mr);
	if (!m)
		return -ENOMEM;
	m->dev = dev;
	m->pd = pd;
	m->addr = a;
	m->len = len;
	m->start = zero ? 0 : a;
	m->access = bits;
	m->zero_based = zero;

	unsigned log_page = 12;
	{
		const bool write = bits & (mr::kAccessLocalWrite | mr::kAccessRemoteWrite |
					   mr::kAccessRemoteAtomic);
		nicmr_mr_piece piece;
		int rc = nicmr_piece_map(dev, a, len, write, m.get(), &piece, &m->iova, &log_page);
		if (rc)
			return rc;
		m->pool = piece.pool;
		m->slow = std::move(piece.slow);
	}
	/* Zero-based: offset 0 is the start of a translation page, so the page may not be larger
	 * than the IOVA's alignment. */
	if (zero)
		log_page = std::min(log_page, unsigned(std::countr_zero(m->iova | (1ull << 30))));

	mr::RegRequest req;
	req.addr = a;
	req.len = len;
	req.access = bits;
	req.pd = pd->handle.pd();
	req.iova = m->iova;
	req.log_page_size = uint8_t(log_page);
	req.requested_key = requested_key;
	req.flags = ((flags & NICMR_MR_REQUESTED_KEY) ? uint32_t(mr::kRegRequestedKey) : 0u) |
		    (zero ? uint32_t(mr::kRegZeroBased) : 0u) |
		    ((flags & NICMR_MR_SINGLE_USE) ? uint32_t(mr::kRegSingleUse) : 0u) |
		    ((flags & NICMR_MR_RMA_EVENT) ? uint32_t(mr::kRegRmaEvent) : 0u);
	api::ThreadCache *tc = api::thread_cache(dev);
	int rc = dev->engine->reg(req, api::key_cache(tc), &m->mkey);
	m->ext = flags & (NICMR_MR_SINGLE_USE | NICMR_MR_RMA_EVENT);
	if (rc == 0 && m->ext) {
		/* The key is bound on the device: give it its extension state before anyone
		 * has it, or take it back. */
		rc = nicmr_ext_apply(m.get());
		if (rc && dev->engine->dereg(m->mkey, api::key_cache(tc)) != 0)
			NICMR_LOG(error, "api", "%s: dereg of %#x after its failed extension",
				  dev->spec.c_str(), m->mkey);
	}
	api::note_cache_size(tc);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: reg [%#lx, +%zu) access %#llx failed: %d",
			  dev->spec.c_str(), (unsigned long)a, len,
			  static_cast<unsigned long long>(access), rc);
		nicmr_mr_piece piece;
		piece.pool = m->pool;
		piece.slow = std::move(m->slow);
		nicmr_piece_release(dev, &piece);
		return rc;
	}
	pd->mrs.fetch_add(1, std::memory_order_relaxed);
	dev->mrs.fetch_add(1, std::memory_order_relaxed);
	*out = m.release();
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
	if (access_bits(access, &bits) != 0)
		return -EINVAL;
	if (offset > base->len || len > base->len - offset)
		return -ERANGE;
	nicmr_device *dev = base->dev;
	auto m = std::unique_ptr<nicmr_mr>(new (std::nothrow) nicmr_mr);
	if (!m)
		return -ENOMEM;
	m->dev = dev;
	m->pd = base->pd;
	m->base = base;
	m->addr = base->addr + offset;
	m->len = len;
	m->start = base->start + offset;
	m->iova = base->iova + offset;
	m->access = bits;
	m->zero_based = base->zero_based;

	mr::RegRequest req;
	req.addr = m->start; /* in the base's address space */
	req.len = len;
	req.access = bits;
	req.requested_key = requested_key;
	req.flags = (flags & NICMR_MR_REQUESTED_KEY) ? uint32_t(mr::kRegRequestedKey) : 0u;
	api::ThreadCache *tc = api::thread_cache(dev);
	int rc = dev->engine->reg_sub(base->mkey, req, api::key_cache(tc), &m->mkey);
	api::note_cache_size(tc);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: sub-MR of %#x (+%zu, %zu bytes) failed: %d",
			  dev->spec.c_str(), base->mkey, offset, len, rc);
		return rc;
	}
	m->pd->mrs.fetch_add(1, std::memory_order_relaxed);
	dev->mrs.fetch_add(1, std::memory_order_relaxed);
	*out = m.release();
	return 0;
}

int nicmr_mr_dereg(struct nicmr_mr *mr)
{
	if (mr == nullptr)
		return -EINVAL;
	nicmr_device *dev = mr->dev;
	/* fi_mr(3): closing an MR with counters associated is busy (nicmr_mr_unbind_cntr). */
	if (mr->cntr != nullptr)
		return -EBUSY;
	const bool maps = mr->slow || mr->vec;
	if (maps) {
		/* IOVA-list and page-vector MRs over its mappings keep it (-EBUSY); from here on
		 * no new one may start using them. */
		std::lock_guard lk(dev->vec_mu);
		if (mr->iova_users)
			return -EBUSY;
		mr->iova_leaving = true;
	}
	api::ThreadCache *tc = api::thread_cache(dev);
	int rc = dev->engine->dereg(mr->mkey, api::key_cache(tc));
	api::note_cache_size(tc);
	if (rc) {
		if (rc != -EBUSY)
			NICMR_LOG(warn, "api", "%s: dereg of %#x failed: %d", dev->spec.c_str(),
				  mr->mkey, rc);
		if (maps) {
			std::lock_guard lk(dev->vec_mu);
			mr->iova_leaving = false;
		}
		return rc;
	}
	/* The device refuses the key now: its memory may go. */
	if (mr->vec)
		nicmr_vec_release(mr);
	{
		nicmr_mr_piece piece;
		piece.pool = mr->pool;
		piece.slow = std::move(mr->slow);
		nicmr_piece_release(dev, &piece);
	}
	mr->pd->mrs.fetch_sub(1, std::memory_order_release);
	dev->mrs.fetch_sub(1, std::memory_order_release);
	delete mr;
	return 0;
}

uint32_t nicmr_mr_key(const struct nicmr_mr *mr)
{
	return mr ? mr->mkey : 0;
}

void *nicmr_mr_addr(const struct nicmr_mr *mr)
{
	return mr ? reinterpret_cast<void *>(mr->addr) : nullptr;
}

size_t nicmr_mr_len(const struct nicmr_mr *mr)
{
	return mr ? mr->len : 0;
}

int nicmr_mr_in_pool(const struct nicmr_mr *mr)
{
	if (mr == nullptr)
		return -EINVAL;
	const nicmr_mr *m = mr;
	while (m->base != nullptr)
		m = m->base;
	return m->pool != nullptr ? 1 : 0;
}

int nicmr_mr_raw_attr(const struct nicmr_mr *mr, void *buf, size_t *size)
{
	if (mr == nullptr || size == nullptr || (buf == nullptr && *size > 0))
		return -EINVAL;
	return mr->dev->engine->raw_attr(mr->mkey, static_cast<uint8_t *>(buf), size);
}

} /* extern "C" */
