/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Vectored (nicmr_mr_regv), IOVA-list (nicmr_mr_reg_iova) and page-vector (nicmr_mr_reg_pages)
 * registration.
 *
 *   pieces: (address in the inner keys' space, length, IOVA, largest page its mapping allows)
 *     regv:  each segment mapped as nicmr_mr_reg maps it (pool, or a slow-path mapping)
 *     iova:  each entry found in a pool or a live slow-path mapping (else -EFAULT)
 *     pages: runs of IOVA-consecutive pages, each found likewise
 *   -> lib/mr's planner (mr::plan_vector, mr_plan.h): the runs (the host's IOVA map, for
 *      lookups) and one page size P for all (largest first) with which one MTT mkey holds them
 *      yes: one MTT mkey (Engine::reg with the runs and the planner's MTT list; a single run
 *           needs neither)
 *      no:  one MTT key per piece (Engine::reg), then an indirect KLM key over them
 *           (Engine::reg_indirect with the driver's KlmProgrammer, mlx5_klm_programmer.h)
 * This file keeps the handles' part: finding and holding the pieces' mappings, the inner keys,
 * undoing every step when a later one fails. Slow path: it allocates and takes locks.
 */
#include <sys/uio.h>

#include <algorithm>
#include <bit>
#include <cerrno>

#include "api_internal.h"
#include "mr_plan.h"
#include "mr_range.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

constexpr uint64_t kKnownFlags = NICMR_MR_REQUESTED_KEY | NICMR_MR_ZERO_BASED;

using Piece = mr::VecPiece;

unsigned log2_floor(uint64_t x)
{
	return 63u - unsigned(std::countl_zero(x));
}

bool device_writes(uint8_t bits)
{
	return bits & (mr::kAccessLocalWrite | mr::kAccessRemoteWrite | mr::kAccessRemoteAtomic);
}

/* [iova, iova + len) inside one mapping nicmr made: a pool (counted) or a live slow-path
 * mapping (its MR counted). -EFAULT otherwise. */
int find_iova(nicmr_device *dev, uint64_t iova, uint64_t len, nicmr_mr_piece *piece,
	      unsigned *log_page)
{
	{
		std::shared_lock lk(dev->objs_mu);
		for (const auto &[key, np] : dev->pools) {
			const mem::PoolEntry *e = np->entry;
			if (e == nullptr || !mr::range_within(e->iova, e->len, iova, len))
				continue;
			piece->pool = np;
			np->pieces.fetch_add(1, std::memory_order_relaxed);
			*log_page = std::clamp(log2_floor(e->iova_align), 12u, 30u);
			return 0;
		}
	}
	std::lock_guard lk(dev->vec_mu);
	auto it = dev->slow_by_iova.upper_bound(iova);
	if (it == dev->slow_by_iova.begin())
		return -EFAULT;
	--it;
	const nicmr_slow_ref &r = it->second;
	if (!mr::range_within(it->first, r.len, iova, len) || r.owner == nullptr ||
	    r.owner->iova_leaving)
		return -EFAULT;
	r.owner->iova_users++;
	piece->owner = r.owner;
	*log_page = std::clamp(log2_floor(r.align), 12u, 30u);
	return 0;
}

void release_pieces(nicmr_device *dev, nicmr_mr_vec *v)
{
	api::ThreadCache *tc = api::thread_cache(dev);
	for (nicmr_mr_piece &p : v->pieces) {
		if (p.child) {
			int rc = dev->engine->dereg(p.child, api::key_cache(tc));
			if (rc)
				NICMR_LOG(error, "api", "%s: dereg of inner key %#x failed: %d",
					  dev->spec.c_str(), p.child, rc);
			p.child = 0;
		}
		nicmr_piece_release(dev, &p);
	}
	api::note_cache_size(tc);
}

/* An MR being built: its handle's fields, what it holds (rare->vec) and what its entry will. */
struct Draft {
	nicmr_mr m{};
	std::unique_ptr<nicmr_mr_holdings> rare;
	uint64_t len = 0;
	uint64_t start = 0; /* in the key's address space: the first VA or IOVA, or 0 */
	uint8_t access = 0;
	bool zero_based = false;
	uint32_t mkey = 0;
	nicmr_mr_vec &vec() { return *rare->vec; }
};

/*
 * Registers d (len, start, access, zero_based, vec with pieces mapped) over pieces: one MTT
 * mkey when it fits, else KLM over one key per piece.
 */
int register_pieces(nicmr_pd *pd, Draft *d, const std::vector<Piece> &pc, uint64_t first,
		    uint64_t flags, uint64_t requested_key)
{
	nicmr_device *dev = pd->dev;
	/* lib/mr's planner: the runs, and one MTT mkey or KLM (mr_plan.h). */
	mr::Run runs[mr::kMaxRuns];
	mr::VecPlan plan;
	int rc = mr::plan_vector(d->start, d->len, pc.data(), pc.size(), dev->max_translations,
				 runs, &plan);
	if (rc)
		return rc;
	const uint32_t reg_flags =
		((flags & NICMR_MR_REQUESTED_KEY) ? uint32_t(mr::kRegRequestedKey) : 0u) |
		(d->zero_based ? uint32_t(mr::kRegZeroBased) : 0u);
	api::ThreadCache *tc = api::thread_cache(dev);
	if (plan.layout != mr::VecLayout::klm) {
		std::vector<uint64_t> mtt;
		mr::RegRequest req;
		req.addr = first;
		req.len = d->len;
		req.access = d->access;
		req.pd = pd->handle.pd();
		req.iova = runs[0].iova;
		req.log_page_size = plan.log_page_size;
		req.requested_key = requested_key;
		req.flags = reg_flags;
		if (plan.layout == mr::VecLayout::mtt_runs) {
			try {
				mtt.resize(plan.mtt_count);
			} catch (...) {
				return -ENOMEM;
			}
			mr::plan_runs_mtt(d->start, d->len, runs, plan.run_count,
					  plan.log_page_size, mtt.data());
			req.runs = runs;
			req.run_count = plan.run_count;
			req.mtt = mtt.data();
			req.mtt_count = uint32_t(mtt.size());
		}
		rc = dev->engine->reg(req, api::key_cache(tc), &d->mkey);
		api::note_cache_size(tc);
		if (rc == 0)
			d->vec().layout = int(plan.layout);
		return rc;
	}

	/* KLM: one MTT key per piece, then the indirect key over them. */
	if (int e = nicmr_klm_programmer(dev); e != 0)
		return e;
	std::vector<mr::KlmPart> parts;
	try {
		parts.reserve(pc.size());
	} catch (...) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < pc.size() && rc == 0; i++) {
		mr::RegRequest c;
		c.addr = pc[i].addr;
		c.len = pc[i].len;
		c.access = d->access;
		c.pd = pd->handle.pd();
		c.iova = pc[i].iova;
		c.log_page_size = uint8_t(pc[i].log_page);
		rc = dev->engine->reg(c, api::key_cache(tc), &d->vec().pieces[i].child);
		if (rc == 0)
			parts.push_back(
				{pc[i].addr, d->vec().pieces[i].child, uint32_t(pc[i].len)});
	}
	if (rc == 0) {
		mr::IndirectRequest r;
		r.addr = first;
		r.len = d->len;
		r.access = d->access;
		r.pd = pd->handle.pd();
		r.requested_key = requested_key;
		r.flags = reg_flags;
		r.parts = parts.data();
		r.part_count = uint32_t(parts.size());
		r.runs = runs;
		r.run_count = plan.run_count;
		rc = dev->engine->reg_indirect(r, *dev->klm, api::key_cache(tc), &d->mkey);
	}
	api::note_cache_size(tc);
	if (rc)
		return rc; /* the caller releases the pieces and their inner keys */
	d->vec().layout = int(mr::VecLayout::klm);
	return 0;
}

/* The virtual ranges of iov (consecutive segments that follow each other in memory merge),
 * kept in runs only when there is more than one: a region of one range translates as a
 * contiguous one (nicmr_mr_addr_of). May throw std::bad_alloc. */
void va_runs(const struct iovec *iov, size_t count, std::vector<nicmr_va_run> *runs)
{
	uint64_t off = 0;
	for (size_t i = 0; i < count; i++) {
		const auto a = reinterpret_cast<uintptr_t>(iov[i].iov_base);
		if (!runs->empty() && runs->back().va + runs->back().len == a)
			runs->back().len += iov[i].iov_len;
		else
			runs->push_back({a, off, iov[i].iov_len});
		off += iov[i].iov_len;
	}
	if (runs->size() == 1)
		runs->clear();
}

/* Common head of the three calls: the MR's draft with its pieces' slots. */
int new_mr(nicmr_pd *pd, size_t count, uint8_t bits, bool zero, Draft *d)
{
	d->rare.reset(new (std::nothrow) nicmr_mr_holdings);
	if (!d->rare)
		return -ENOMEM;
	d->rare->vec.reset(new (std::nothrow) nicmr_mr_vec);
	if (!d->rare->vec)
		return -ENOMEM;
	try {
		d->vec().pieces.resize(count);
	} catch (...) {
		return -ENOMEM;
	}
	d->m.pd = pd;
	d->m.held = d->rare.get();
	d->access = bits;
	d->zero_based = zero;
	return 0;
}

/* Common tail: register, or undo everything. */
int finish(nicmr_pd *pd, Draft &d, const std::vector<Piece> &pc, uint64_t first, uint64_t flags,
	   uint64_t requested_key, const char *what, nicmr_mr **out)
{
	nicmr_device *dev = pd->dev;
	d.start = d.zero_based ? 0 : first;
	int rc = register_pieces(pd, &d, pc, first, flags, requested_key);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: %s of %zu pieces (%zu bytes) failed: %d",
			  dev->spec.c_str(), what, pc.size(), d.len, rc);
		release_pieces(dev, &d.vec());
		return rc;
	}
	d.m.held = d.rare.release(); /* the slot owns it now */
	*out = nicmr_mr_publish(dev, api::thread_cache(dev), d.mkey, d.m);
	return 0;
}

int check_common(nicmr_pd *pd, nicmr_mr **out, const void *list, size_t count, uint64_t access,
		 uint64_t flags, uint8_t *bits)
{
	if (pd == nullptr || out == nullptr || list == nullptr || count == 0)
		return -EINVAL;
	if (count > NICMR_MAX_IOV)
		return -E2BIG;
	if (flags & ~kKnownFlags)
		return -EOPNOTSUPP;
	if (nicmr_access_bits(access, bits) != 0)
		return -EINVAL;
	return 0;
}

} // namespace

void nicmr_vec_release(nicmr_device *dev, nicmr_mr_vec *vec)
{
	release_pieces(dev, vec);
}

extern "C" {

int nicmr_mr_regv(struct nicmr_pd *pd, const struct iovec *iov, size_t count, uint64_t access,
		  uint64_t flags, uint64_t requested_key, struct nicmr_mr **out)
{
	uint8_t bits = 0;
	int rc = check_common(pd, out, iov, count, access, flags, &bits);
	if (rc)
		return rc;
	uint64_t total = 0;
	for (size_t i = 0; i < count; i++) {
		const auto a = reinterpret_cast<uintptr_t>(iov[i].iov_base);
		const uint64_t l = iov[i].iov_len;
		if (!mr::range_valid(a, l) || total + l < total)
			return -EINVAL;
		total += l;
	}
	const bool zero = flags & NICMR_MR_ZERO_BASED;
	const auto first = reinterpret_cast<uintptr_t>(iov[0].iov_base);
	if (!mr::range_valid(zero ? 0 : first, total))
		return -EINVAL;
	Draft d;
	rc = new_mr(pd, count, bits, zero, &d);
	if (rc)
		return rc;
	d.m.addr = first;
	d.len = total;
	d.vec().virtual_addr = true;
	std::vector<Piece> pc;
	try {
		pc.resize(count);
		va_runs(iov, count, &d.vec().va_runs);
	} catch (...) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < count && rc == 0; i++) {
		const auto a = reinterpret_cast<uintptr_t>(iov[i].iov_base);
		pc[i].addr = a;
		pc[i].len = iov[i].iov_len;
		rc = nicmr_piece_map(pd->dev, a, iov[i].iov_len, device_writes(bits), d.rare.get(),
				     &d.vec().pieces[i], &pc[i].iova, &pc[i].log_page);
	}
	if (rc) {
		release_pieces(pd->dev, &d.vec());
		return rc;
	}
	return finish(pd, d, pc, first, flags, requested_key, "regv", out);
}

int nicmr_mr_reg_iova(struct nicmr_pd *pd, const struct nicmr_iova_seg *segs, size_t count,
		      uint64_t access, uint64_t flags, uint64_t requested_key,
		      struct nicmr_mr **out)
{
	uint8_t bits = 0;
	int rc = check_common(pd, out, segs, count, access, flags, &bits);
	if (rc)
		return rc;
	uint64_t total = 0;
	for (size_t i = 0; i < count; i++) {
		if (!mr::range_valid(segs[i].iova, segs[i].len) || total + segs[i].len < total)
			return -EINVAL;
		total += segs[i].len;
	}
	const bool zero = flags & NICMR_MR_ZERO_BASED;
	if (!mr::range_valid(zero ? 0 : segs[0].iova, total))
		return -EINVAL;
	Draft d;
	rc = new_mr(pd, count, bits, zero, &d);
	if (rc)
		return rc;
	d.len = total;
	std::vector<Piece> pc;
	try {
		pc.resize(count);
	} catch (...) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < count && rc == 0; i++) {
		pc[i] = Piece{segs[i].iova, segs[i].len, segs[i].iova, 12};
		rc = find_iova(pd->dev, segs[i].iova, segs[i].len, &d.vec().pieces[i],
			       &pc[i].log_page);
	}
	if (rc) {
		release_pieces(pd->dev, &d.vec());
		return rc;
	}
	return finish(pd, d, pc, segs[0].iova, flags, requested_key, "IOVA list", out);
}

int nicmr_mr_reg_pages(struct nicmr_pd *pd, const uint64_t *pages, size_t count, size_t page_size,
		       size_t offset, size_t len, uint64_t access, uint64_t flags,
		       uint64_t requested_key, struct nicmr_mr **out)
{
	uint8_t bits = 0;
	/* The page count has no limit of its own: the runs do (below). */
	int rc = check_common(pd, out, pages, count > NICMR_MAX_IOV ? 1 : count, access, flags,
			      &bits);
	if (rc)
		return rc;
	if (page_size < NICMR_PAGE_4K || page_size > NICMR_PAGE_1G ||
	    !std::has_single_bit(page_size) || offset >= page_size || len == 0 ||
	    count > UINT64_MAX / page_size)
		return -EINVAL;
	const uint64_t span = uint64_t{count} * page_size;
	if (len > span - offset || offset + len <= span - page_size)
		return -EINVAL;
	for (size_t i = 0; i < count; i++)
		if (pages[i] & (page_size - 1) || !mr::range_valid(pages[i], page_size))
			return -EINVAL;
	const bool zero = flags & NICMR_MR_ZERO_BASED;
	const uint64_t first = pages[0] + offset;
	if (!mr::range_valid(zero ? 0 : first, len))
		return -EINVAL;
	/* Runs of IOVA-consecutive pages, clipped to [offset, offset + len). */
	std::vector<Piece> pc;
	try {
		uint64_t from = offset; /* byte of the page span where the next piece starts */
		const uint64_t end = offset + len;
		for (size_t i = 0; i < count; i++) {
			const uint64_t pstart = uint64_t{i} * page_size;
			const uint64_t lo = std::max(pstart, from);
			const uint64_t hi = std::min(pstart + page_size, end);
			const uint64_t iova = pages[i] + (lo - pstart);
			if (!pc.empty() && pc.back().iova + pc.back().len == iova)
				pc.back().len += hi - lo;
			else
				pc.push_back(Piece{iova, hi - lo, iova, 12});
			from = hi;
		}
	} catch (...) {
		return -ENOMEM;
	}
	if (pc.size() > NICMR_MAX_IOV)
		return -E2BIG;
	Draft d;
	rc = new_mr(pd, pc.size(), bits, zero, &d);
	if (rc)
		return rc;
	d.len = len;
	for (size_t i = 0; i < pc.size() && rc == 0; i++)
		rc = find_iova(pd->dev, pc[i].iova, pc[i].len, &d.vec().pieces[i], &pc[i].log_page);
	if (rc) {
		release_pieces(pd->dev, &d.vec());
		return rc;
	}
	return finish(pd, d, pc, first, flags, requested_key, "page vector", out);
}

int nicmr_mr_layout(const struct nicmr_mr *mr)
{
	if (mr == nullptr)
		return -EINVAL;
	return mr->vec() ? mr->vec()->layout : 0;
}

int nicmr_mr_addr_of(const struct nicmr_mr *mr, const void *buf, size_t len, uint64_t *addr)
{
	/* POSTING PATH: no lock, no allocation, no system call (at most NICMR_MAX_IOV runs). */
	if (mr == nullptr || mr->pd == nullptr || addr == nullptr)
		return -EINVAL;
	const nicmr_mr_vec *v = mr->vec();
	if (v != nullptr && !v->virtual_addr)
		return -EINVAL; /* an IOVA-list or page-vector MR */
	const auto a = reinterpret_cast<uintptr_t>(buf);
	/* The key's address space starts at start (the first VA, or 0 when zero-based; a
	 * sub-MR's lies in its base's) where the region's bytes start at mr->addr. */
	const uint64_t start = mr->entry().start;
	if (v == nullptr || v->va_runs.empty()) {
		*addr = start + (a - mr->addr);
		return 0;
	}
	for (const nicmr_va_run &r : v->va_runs) {
		if (a >= r.va && len <= r.len && a - r.va <= r.len - len) {
			*addr = start + r.off + (a - r.va);
			return 0;
		}
	}
	return -EFAULT;
}

} /* extern "C" */
