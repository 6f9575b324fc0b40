/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * On-demand-paging MRs and nicmr_advise_mr (doc/odp.md).
 *
 *   nicmr_mr_reg(NICMR_ACCESS_ON_DEMAND)
 *     -> Engine::reg_odp: a free on-demand mkey from the engine's cache (MTT, 4 KiB pages,
 *        pg_access, every entry without rd_en / wr_en: not present), bound with one UMR;
 *        with a requested key, the indirect programmer's mkey made by commands at its index
 *   nicmr_advise_mr(advice, sges)
 *     -> every element checked, its key held (a dereg meanwhile says -EBUSY)
 *     -> the region's first advice: the unmap watch, the page-state bytes (anonymous memory,
 *        zero until touched) and an IOVA range for its pages (odp_ready)
 *     -> per element: fault in (PREFETCH*) or ask mincore (NO_FAULT) -> under the region's
 *        lock, pin and map the pages not mapped yet, run by run -> one UMR per 4096 entries
 *        rewrites the 8-entry groups that changed -> translations in the device on return
 *   nicmr_mr_dereg -> nicmr_odp_dereg: the engine's dereg (odp_zap writes the present entries
 *        not present, then the UMR revoke: the device refuses the key; the mkey goes back to
 *        the cache) -> nicmr_odp_release: unmap and unpin the mapped runs, free the IOVA range
 *
 * Slow paths throughout: locks, allocations and system calls.
 */
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "api_internal.h"
#include "mr_access.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

constexpr uint64_t kPage = 4096;

/* The MTT entries of pages [lo, hi) (a multiple of 8 apart, or up to the table's end) from
 * the page states, or all not present (zero). */
int odp_write(nicmr_device *dev, nicmr_odp &o, uint64_t lo, uint64_t hi, bool zero = false)
{
	/* The device's table holds an even count of entries (two per octword). */
	const uint64_t table = (o.pages + 1) & ~uint64_t{1};
	lo &= ~uint64_t{7};
	hi = std::min((hi + 7) & ~uint64_t{7}, table);
	std::vector<mlx5::MttEntry> e;
	try {
		e.resize(hi - lo);
	} catch (...) {
		return -ENOMEM;
	}
	for (uint64_t i = lo; i < hi; i++) {
		const uint8_t st = i < o.pages && !zero ? o.state[i] : 0;
		mlx5::MttEntry &m = e[i - lo];
		if (st & nicmr_odp::kOdpMapped) {
			m.iova = o.iova + i * kPage;
			m.rd_en = (st & nicmr_odp::kOdpRead) != 0;
			m.wr_en = (st & nicmr_odp::kOdpWrite) != 0;
		} else {
			m = mlx5::MttEntry{0, false, false};
		}
	}
	const int rc = dev->klm->write_odp(o.mkey, lo, e);
	return rc == 0 ? 0 : -EIO;
}

/*
 * Makes the pages of [a, a + len) (inside the region) present to the device for reading, and
 * writing when write; resident: pages that may be made present (nullptr: all). Under o.mu.
 */
int odp_present(nicmr_device *dev, nicmr_odp &o, uintptr_t a, size_t len, bool write,
		const unsigned char *resident)
{
	const uint64_t first = ((a & ~(kPage - 1)) - o.va) / kPage;
	const uint64_t last = ((a + len - 1) & ~(kPage - 1)) - o.va; /* bytes */
	const uint64_t end = last / kPage + 1;
	const uint8_t want = nicmr_odp::kOdpRead | (write ? nicmr_odp::kOdpWrite : 0);
	uint64_t lo = end, hi = first; /* pages whose entries change */
	/* Pin and map the runs of pages not mapped yet; this call's runs are given back when
	 * the device refuses their entries. */
	std::vector<std::pair<uint64_t, uint64_t>> fresh; /* first page, pages */
	uint64_t run = first, n = 0;
	const char *const fn = __func__; /* the log line in the lambda */
	auto flush = [&]() -> int {
		if (n == 0)
			return 0;
		const int rc = dev->slow_maps->odp_map(o.va + run * kPage, o.iova + run * kPage,
						       n * kPage);
		if (rc) {
			NICMR_LOG_IN(fn, warn, "api",
				     "%s: on-demand pages [%#lx, +%llu) not mapped: %d",
				     dev->spec.c_str(), (unsigned long)(o.va + run * kPage),
				     static_cast<unsigned long long>(n * kPage), rc);
			return -ENOMEM;
		}
		try {
			fresh.emplace_back(run, n);
			try {
				o.runs.emplace(run, n);
			} catch (...) {
				fresh.pop_back();
				throw;
			}
		} catch (...) {
			dev->slow_maps->odp_unmap(o.va + run * kPage, o.iova + run * kPage,
						  n * kPage);
			return -ENOMEM;
		}
		for (uint64_t i = run; i < run + n; i++)
			o.state[i] |= nicmr_odp::kOdpMapped;
		o.mapped += n;
		n = 0;
		return 0;
	};
	int rc = 0;
	for (uint64_t i = first; i < end && rc == 0; i++) {
		const bool take = resident == nullptr || (resident[i - first] & 1) != 0;
		if (!take || (o.state[i] & nicmr_odp::kOdpMapped)) {
			rc = flush();
			continue;
		}
		if (n == 0)
			run = i;
		n++;
	}
	if (rc == 0)
		rc = flush();
	/* The new rights, then the device. Pages mapped before a failure keep their mapping
	 * and get their entries all the same. */
	std::vector<std::pair<uint64_t, uint8_t>> changed; /* page, state before */
	try {
		for (uint64_t i = first; i < end; i++) {
			const bool take = resident == nullptr || (resident[i - first] & 1) != 0;
			if (!take || !(o.state[i] & nicmr_odp::kOdpMapped) ||
			    (o.state[i] & want) == want)
				continue;
			changed.emplace_back(i, o.state[i]);
			o.state[i] |= want;
			lo = std::min(lo, i);
			hi = std::max(hi, i + 1);
		}
	} catch (...) {
		rc = -ENOMEM;
	}
	if (lo < hi) {
		const int w = odp_write(dev, o, lo, hi);
		if (w != 0) {
			/* The device kept its old entries: so do the states, and the pages this
			 * call mapped are unmapped and unpinned again (the device has no entry
			 * of them). write_odp sends one UMR per 4096 entries: when a later one
			 * is refused, an earlier one's entries stay present over IOVAs now
			 * unmapped, which the IOMMU refuses before a byte moves, and the next
			 * advice of those pages writes them again. */
			for (const auto &[i, before] : changed)
				o.state[i] = before;
			for (const auto &[r, cnt] : fresh) {
				dev->slow_maps->odp_unmap(o.va + r * kPage, o.iova + r * kPage,
							  cnt * kPage);
				o.runs.erase(r);
				for (uint64_t i = r; i < r + cnt; i++)
					o.state[i] = static_cast<uint8_t>(o.state[i] &
									  ~nicmr_odp::kOdpMapped);
				o.mapped -= cnt;
			}
			if (rc == 0)
				rc = w;
		}
	}
	return rc;
}

/* Takes pages [first, end) of the region away from the device: entries not present (UMR),
 * then each IOMMU mapping that holds some of them unmapped, those pages unpinned and the rest of
 * the mapping mapped again. Under o.mu. Returns how many pages were revoked. */
uint64_t odp_revoke(nicmr_device *dev, nicmr_odp &o, uint64_t first, uint64_t end)
{
	if (o.state == nullptr)
		return 0; /* never advised: nothing present */
	uint64_t lo = end, hi = first;
	for (uint64_t i = first; i < end; i++)
		if (o.state[i] & nicmr_odp::kOdpMapped) {
			lo = std::min(lo, i);
			hi = i + 1;
			o.state[i] = 0;
		}
	if (lo >= hi)
		return 0;
	/* The device first: once the UMR completed it translates none of these pages. */
	if (odp_write(dev, o, lo, hi) != 0)
		/* The IOMMU unmap below still stops the device: a translation to an IOVA that is
		 * not mapped is refused before any byte moves. */
		NICMR_LOG(error, "api", "%s: on-demand revoke of %#x pages %llu..%llu failed",
			  dev->spec.c_str(), o.mkey, static_cast<unsigned long long>(lo),
			  static_cast<unsigned long long>(hi));
	uint64_t n = 0;
	auto it = o.runs.upper_bound(lo);
	if (it != o.runs.begin())
		--it;
	while (it != o.runs.end() && it->first < hi) {
		const uint64_t r0 = it->first, r1 = it->first + it->second;
		if (r1 <= lo) {
			++it;
			continue;
		}
		it = o.runs.erase(it);
		dev->slow_maps->odp_dma_unmap(o.iova + r0 * kPage, (r1 - r0) * kPage);
		const uint64_t c0 = std::max(r0, lo), c1 = std::min(r1, hi);
		dev->slow_maps->odp_unpin(o.va + c0 * kPage, (c1 - c0) * kPage);
		n += c1 - c0;
		/* What stays of the mapping on either side is mapped again; a page that cannot be
		 * leaves too (its entry is written not present). */
		for (const auto &[k0, k1] : {std::pair{r0, c0}, std::pair{c1, r1}}) {
			if (k0 == k1)
				continue;
			bool ok = dev->slow_maps->odp_remap(o.va + k0 * kPage, o.iova + k0 * kPage,
							    (k1 - k0) * kPage) == 0;
			if (ok) {
				try {
					o.runs.emplace(k0, k1 - k0);
				} catch (...) {
					dev->slow_maps->odp_dma_unmap(o.iova + k0 * kPage,
								      (k1 - k0) * kPage);
					ok = false;
				}
			}
			if (!ok) {
				NICMR_LOG(error, "api",
					  "%s: on-demand pages %llu..%llu of %#x lost",
					  dev->spec.c_str(), static_cast<unsigned long long>(k0),
					  static_cast<unsigned long long>(k1), o.mkey);
				for (uint64_t i = k0; i < k1; i++)
					o.state[i] = 0;
				(void)odp_write(dev, o, k0, k1);
				dev->slow_maps->odp_unpin(o.va + k0 * kPage, (k1 - k0) * kPage);
				n += k1 - k0;
			}
		}
		it = o.runs.lower_bound(c1);
	}
	o.mapped -= n;
	return n;
}

/* What a region needs once pages become present (its first advice; under o.mu): the
 * page-state bytes (anonymous memory, zero pages until written) and the IOVA range of its
 * pages. Registration makes neither, so that it costs the same whatever the size and makes
 * no system call. 0, -ENOMEM, odp_reserve's -ENOSPC. */
int odp_ready(nicmr_device *dev, nicmr_odp &o)
{
	if (o.state != nullptr)
		return 0;
	void *st = mmap(nullptr, o.pages, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (st == MAP_FAILED)
		return -ENOMEM;
	if (const int rc = dev->slow_maps->odp_reserve(o.va, o.pages * kPage, &o.iova); rc) {
		munmap(st, o.pages);
		return rc;
	}
	o.state = static_cast<uint8_t *>(st);
	return 0;
}

/* The device's watch, made and subscribed once (a refused userfaultfd leaves mon null). */
nicmr_odp_watch *odp_watch(nicmr_device *dev)
{
	const char *const fn = __func__; /* the log line in the lambda */
	try {
		std::call_once(dev->odp_once, [dev, fn] {
			auto w = std::make_unique<nicmr_odp_watch>();
			w->dev = dev;
			const int rc = mem::UnmapMonitor::subscribe(w.get(), &w->mon);
			if (rc != 0)
				NICMR_LOG_IN(fn, warn, "api",
					     "%s: on-demand MRs without invalidation (userfaultfd: "
					     "%d): do not unmap memory under them (doc/odp.md)",
					     dev->spec.c_str(), rc);
			dev->odp_watch = std::move(w);
		});
	} catch (...) {
		return nullptr;
	}
	return dev->odp_watch.get();
}

/* ibv_advise_mr(3)'s checks of one element whose key is held: 0 or the code. */
int check_sge(const nicmr_device *dev, const nicmr_pd *pd, const nicmr_sge &g, bool write)
{
	mr::EntryFields f;
	if (dev->table->snapshot(g.lkey, &f) != 0 || f.state != mr::EntryState::live)
		return -EFAULT; /* "one of the lkeys ... is invalid" */
	if (f.flags & mr::kEntryWindow)
		return -EINVAL; /* "doesn't belong to a MR, but a MW" */
	if (f.pd != pd->handle.pd())
		return -EPERM; /* "outside the caller's security scope" */
	if (!(f.flags & mr::kEntryOdp))
		return -ENOENT; /* "lkeys aren't consistent with the MR's": not an ODP MR */
	if (write && !(f.access & mr::kAccessLocalWrite))
		return -EPERM; /* PREFETCH_WRITE on an MR that is not writable */
	if (g.length != 0 && !mr::range_within(f.start, f.len, g.addr, g.length))
		return -EFAULT; /* out of the MR's bounds */
	return 0;
}

/* Engine::dereg's hook for a cached mkey (mr::DeregHook): every entry the region made
 * present is written not present before the mkey goes back to the cache, where the next
 * region would otherwise find another process's pages. Pins and mappings go after the dereg
 * (nicmr_odp_release). The engine has begun retiring the key: no advice holds it. */
int odp_zap(void *ctx, uint32_t /*mkey*/) noexcept
{
	auto *z = static_cast<std::pair<nicmr_device *, nicmr_odp *> *>(ctx);
	nicmr_odp &o = *z->second;
	std::lock_guard lk(o.mu);
	if (o.runs.empty())
		return 0;
	const uint64_t lo = o.runs.begin()->first;
	const uint64_t hi = o.runs.rbegin()->first + o.runs.rbegin()->second;
	return odp_write(z->first, o, lo, hi, true);
}

} // namespace

int nicmr_odp_dereg(nicmr_device *dev, nicmr_odp *o, uint32_t mkey, nicmr::mr::KeyCache *cache)
{
	std::pair<nicmr_device *, nicmr_odp *> ctx{dev, o};
	const mr::DeregHook hook{odp_zap, &ctx};
	return dev->engine->dereg(mkey, cache, &hook);
}

void nicmr_odp_watch::invalidate(uintptr_t start, uintptr_t end) noexcept
{
	std::lock_guard lk(mu);
	for (nicmr_odp *o : live) {
		const uintptr_t top = o->va + o->pages * kPage;
		const uintptr_t lo = std::max(start, o->va), hi = std::min(end, top);
		if (lo >= hi)
			continue;
		std::lock_guard ol(o->mu);
		const uint64_t n =
			odp_revoke(dev, *o, (lo - o->va) / kPage, (hi - o->va + kPage - 1) / kPage);
		revoked_pages.fetch_add(n, std::memory_order_relaxed);
	}
}

nicmr_odp_watch::~nicmr_odp_watch()
{
	/* Not under mu: the monitor calls invalidate() under its own lock, then takes mu. */
	if (mon)
		mon->unsubscribe(this);
}

bool nicmr_odp_offered(const nicmr_device *dev) noexcept
{
	/* The engine's on-demand mkey cache (UMR-made mkeys), or mkeys made by command at the
	 * engine's index (the indirect programmer; requested keys take that way too). */
	const mlx5::Caps &c = dev->drv->caps();
	return dev->engine->odp_bucket_count() != 0 || (c.odp && c.mkey_by_index);
}

uint64_t nicmr_odp_max_len(const nicmr_device *dev, bool requested) noexcept
{
	const mlx5::Caps &c = dev->drv->caps();
	if (!requested && dev->engine->odp_bucket_count() != 0)
		return std::min<uint64_t>(dev->engine->odp_max_pages() * kPage, NICMR_ODP_MAX_LEN);
	if (!(c.odp && c.mkey_by_index))
		return 0;
	/* The indirect programmer's mkey: 2^log_max_klm_list_size entries, and what a 16-bit
	 * translation offset reaches without the extended one. */
	uint64_t pages = uint64_t{1} << std::min<uint32_t>(c.log_max_klm_list_size, 40);
	if (!c.umr_extended_translation_offset)
		pages = std::min<uint64_t>(pages, uint64_t{0xffff} * 2 - 1);
	return std::min<uint64_t>(pages * kPage, NICMR_ODP_MAX_LEN);
}

int nicmr_klm_programmer(nicmr_device *dev)
{
	try {
		std::call_once(dev->klm_once, [dev] {
			dev->klm =
				std::make_unique<mlx5::KlmProgrammer>(*dev->drv, dev->free_pd.pd());
		});
	} catch (...) {
		return -ENOMEM;
	}
	return 0;
}

int nicmr_odp_reg(nicmr_pd *pd, uintptr_t a, size_t len, uint8_t bits, uint64_t flags,
		  uint64_t requested_key, nicmr_mr **out)
{
	nicmr_device *dev = pd->dev;
	if (!nicmr_odp_offered(dev) || (flags & ~uint64_t(NICMR_MR_REQUESTED_KEY)))
		return -EOPNOTSUPP;
	const bool requested = flags & NICMR_MR_REQUESTED_KEY;
	/* Requested keys need an mkey at the engine's index: the indirect programmer's. */
	if (requested && !dev->drv->caps().mkey_by_index)
		return -EOPNOTSUPP;
	const uintptr_t va = a & ~(kPage - 1);
	const uint64_t bytes = ((a + len - 1) & ~(kPage - 1)) + kPage - va;
	if (bytes > nicmr_odp_max_len(dev, requested))
		return -EINVAL;
	if (int rc = nicmr_klm_programmer(dev); rc != 0)
		return rc;
	/* The page-fault EQ, made with the first on-demand MR as Linux's mlx5_ib does
	 * (api_odp_fault.cpp): without it the device fails accesses to pages not present. */
	if (int rc = dev->drv->enable_page_faults(); rc != 0)
		return rc;
	std::unique_ptr<nicmr_mr_holdings> rare(new (std::nothrow) nicmr_mr_holdings);
	if (!rare)
		return -ENOMEM;
	rare->odp.reset(new (std::nothrow) nicmr_odp);
	if (!rare->odp)
		return -ENOMEM;
	nicmr_odp &o = *rare->odp;
	o.va = va;
	o.pages = bytes / kPage;
	/* Page states, IOVA range and the unmap watch wait for the first advice (odp_ready). */
	mr::RegRequest req;
	req.addr = a;
	req.len = len;
	req.access = bits;
	req.pd = pd->handle.pd();
	req.requested_key = requested_key;
	req.flags = requested ? uint32_t(mr::kRegRequestedKey) : 0u;
	api::ThreadCache *tc = api::thread_cache(dev);
	uint32_t mkey = 0;
	const int rc = dev->engine->reg_odp(req, *dev->klm, api::key_cache(tc), &mkey);
	api::note_cache_size(tc);
	if (rc) {
		NICMR_LOG(warn, "api", "%s: on-demand reg [%#lx, +%zu) failed: %d",
			  dev->spec.c_str(), (unsigned long)a, len, rc);
		return rc;
	}
	o.mkey = mkey;
	nicmr_mr m{};
	m.pd = pd;
	m.addr = a;
	m.held = rare.release();
	*out = nicmr_mr_publish(dev, tc, mkey, m);
	return 0;
}

void nicmr_odp_release(nicmr_device *dev, nicmr_odp *o)
{
	if (nicmr_odp_watch *w = dev->odp_watch.get(); w != nullptr) {
		/* Waits for an invalidation inside the region: none starts after. */
		std::lock_guard wl(w->mu);
		if (o->watched)
			std::erase(w->live, o);
	}
	std::lock_guard lk(o->mu);
	if (o->state == nullptr)
		return; /* never advised */
	/* The mkey is gone or back in the cache with no entry present: nothing of the device
	 * uses the pages any more. */
	for (const auto &[first, n] : o->runs)
		dev->slow_maps->odp_unmap(o->va + first * kPage, o->iova + first * kPage,
					  n * kPage);
	o->runs.clear();
	o->mapped = 0;
	dev->slow_maps->odp_release(o->iova, o->pages * kPage);
	munmap(o->state, o->pages);
	o->state = nullptr;
}

extern "C" int nicmr_advise_mr(struct nicmr_pd *pd, uint32_t advice, uint32_t flags,
			       const struct nicmr_sge *sg_list, uint32_t num_sge)
{
	if (pd == nullptr)
		return -EINVAL;
	nicmr_device *dev = pd->dev;
	/* ibv_advise_mr(3): EOPNOTSUPP where the driver lacks the verb or the advice. */
	if (!nicmr_odp_offered(dev) || advice > NICMR_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return -EOPNOTSUPP;
	if ((flags & ~uint32_t(NICMR_ADVISE_MR_FLAG_FLUSH)) != 0 || sg_list == nullptr ||
	    num_sge == 0)
		return -EINVAL;
	const bool write = advice == NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE;
	std::vector<uint32_t> held;
	try {
		held.reserve(num_sge);
	} catch (...) {
		return -ENOMEM;
	}
	auto unhold = [&] {
		for (uint32_t k : held)
			dev->engine->keys().unhold(mr::mkey_index(k));
	};
	/* Every element first (ibv_advise_mr(3)'s errors, one by one), each key held. */
	int rc = 0;
	for (uint32_t i = 0; i < num_sge && rc == 0; i++) {
		const nicmr_sge &g = sg_list[i];
		if (dev->engine->keys().hold(g.lkey) != 0) {
			rc = -EFAULT; /* "one of the lkeys ... is invalid" */
			break;
		}
		held.push_back(g.lkey);
		rc = check_sge(dev, pd, g, write);
	}
	std::vector<unsigned char> resident;
	/* Unmaps whose calls returned are invalidated before pages are looked at
	 * (mem_monitor.h); never under a region's lock, which an invalidation takes. */
	nicmr_odp_watch *w = rc == 0 ? odp_watch(dev) : nullptr;
	if (rc == 0 && w != nullptr && w->mon)
		w->mon->wait_idle();
	for (uint32_t i = 0; i < num_sge && rc == 0; i++) {
		const nicmr_sge &g = sg_list[i];
		if (g.length == 0)
			continue;
		nicmr_odp &o = *nicmr_mr_slot(dev, g.lkey)->held->odp;
		const uintptr_t from = g.addr & ~(kPage - 1);
		const uintptr_t to = ((g.addr + g.length - 1) & ~(kPage - 1)) + kPage;
		if (advice == NICMR_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
			/* What the CPU has now, faulting nothing in (mincore(2): ENOMEM for a
			 * range with unmapped pages). */
			try {
				resident.assign((to - from) / kPage, 0);
			} catch (...) {
				rc = -ENOMEM;
				break;
			}
			if (mincore(reinterpret_cast<void *>(from), to - from, resident.data()) !=
			    0) {
				rc = errno == ENOMEM ? -EFAULT : -errno;
				break;
			}
		} else {
			rc = mem::SlowMaps::populate(from, to, write);
			if (rc)
				break;
		}
		/* In the watch's list before any page is present (and before o.mu: an
		 * invalidation takes the list's lock, then the region's). */
		if (w != nullptr && !o.watched) {
			std::lock_guard wl(w->mu);
			if (!o.watched) {
				try {
					w->live.push_back(&o);
					o.watched = true;
				} catch (...) {
					rc = -ENOMEM;
					break;
				}
			}
		}
		/* Ask for the range's unmap events before its pages become present. A range
		 * the kernel cannot watch (a file mapping other than shmem or hugetlbfs, a hole
		 * for NO_FAULT) is not invalidated (doc/odp.md). */
		if (w != nullptr && w->mon) {
			if (const int wr = w->mon->watch(from, to - from); wr != 0)
				NICMR_LOG(info, "api",
					  "%s: on-demand range [%#lx, %#lx) not watched: %d",
					  dev->spec.c_str(), (unsigned long)from, (unsigned long)to,
					  wr);
		}
		std::lock_guard lk(o.mu);
		rc = odp_ready(dev, o);
		if (rc)
			break;
		rc = odp_present(dev, o, g.addr, g.length, write,
				 advice == NICMR_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT
					 ? resident.data()
					 : nullptr);
	}
	unhold();
	if (rc)
		NICMR_LOG(warn, "api", "%s: advise %u on %u elements failed: %d", dev->spec.c_str(),
			  advice, num_sge, rc);
	return rc;
}
