/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration cache (nicmr_mr_cache_*): registrations of memory outside pools kept after
 * their users release them, found again by range and access, dropped when their memory leaves
 * the process (mem::UnmapMonitor).
 *
 *   by_start: multimap  first byte -> Entry       entries a lookup may return (not stale)
 *   by_mr:    map       nicmr_mr*  -> Entry       every MR the cache gave out and not got back
 *   idle:     list      Entry (LRU, oldest first) kept entries no user holds
 *   count, bytes                                  kept entries and their 4 KiB pages' bytes
 *
 * One mutex (mu) guards all of it. Registrations that miss run under it too, so the monitor's
 * invalidation (which takes it) of memory unmapped while a registration runs waits for the
 * entry and drops it. Nothing here holds mu while it waits for the monitor: the monitor reads
 * its events without mu (an unmapping call of ours, e.g. a heap trim in free(), returns), and
 * only its subscriber call takes mu.
 *
 * A hit (reg) takes mu, looks up by_start and counts: no system call, no allocation. The caller
 * first waits for a batch of unmap events in flight (UnmapMonitor::wait_idle), so that memory
 * whose unmapping call returned before the lookup is never found.
 */
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>

#include "api_internal.h"
#include "mem_monitor.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

constexpr const char *kLog = "api";
constexpr uintptr_t kPage = 4096;
/* Defaults (doc/native-api.md, "Registration cache"). */
constexpr size_t kDefaultMaxSize = size_t{1} << 30;
constexpr size_t kDefaultMaxCount = 1024;

struct Entry {
	uintptr_t start = 0, end = 0; /* the range registered */
	uint64_t access = 0;
	nicmr_mr *mr = nullptr;
	uint32_t users = 0;
	bool kept = false;  /* in the cache (else an uncached MR handed out) */
	bool stale = false; /* kept, but its memory left: deregistered when the last user goes */
	std::list<Entry *>::iterator lru; /* in idle while kept, not stale and users == 0 */
};

size_t span(uintptr_t start, uintptr_t end)
{
	return ((end + kPage - 1) & ~(kPage - 1)) - (start & ~(kPage - 1));
}

bool parse_size(const char *name, size_t *out)
{
	const char *v = std::getenv(name);
	if (v == nullptr || *v == '\0')
		return false;
	char *e = nullptr;
	errno = 0;
	const unsigned long long n = std::strtoull(v, &e, 10);
	if (errno != 0 || *e != '\0' || v[0] == '-') {
		NICMR_LOG(warn, kLog, "%s=%s is not a number of bytes: the default stays", name, v);
		return false;
	}
	*out = size_t(n);
	return true;
}

} // namespace

struct nicmr_mr_cache final : mem::UnmapMonitor::Subscriber {
	nicmr_pd *pd = nullptr;
	size_t max_size = 0, max_count = 0;
	std::shared_ptr<mem::UnmapMonitor> mon; /* null: nothing is cached */

	std::mutex mu;
	std::multimap<uintptr_t, Entry *> by_start;    /* mu */
	std::unordered_map<nicmr_mr *, Entry *> by_mr; /* mu */
	std::list<Entry *> idle;		       /* mu; front: least recently used */
	size_t bytes = 0;			       /* mu */
	uint64_t count = 0;			       /* mu */
	size_t max_len = 0;	   /* mu: the longest entry ever kept (bounds the lookup's scan) */
	nicmr_mr_cache_stats st{}; /* mu: hits, misses, ... */

	void invalidate(uintptr_t start, uintptr_t end) noexcept override;

	/* The kept entry holding [a, a + len) with access, or null. mu held. */
	Entry *find(uintptr_t a, size_t len, uint64_t access) noexcept;
	/* Takes e out of by_start (it stays in by_mr while users hold it). mu held. */
	void unindex(Entry *e) noexcept;
	/* Deregisters e's MR and forgets e; false (e kept as it was) when the deregistration
	 * fails. mu held. */
	bool drop(Entry *e) noexcept;
	/* Drops idle entries, oldest first, until one more entry of need bytes fits; false when
	 * it cannot. mu held. */
	bool make_room(size_t need) noexcept;
};

Entry *nicmr_mr_cache::find(uintptr_t a, size_t len, uint64_t access) noexcept
{
	/* Entries starting at or before a, nearest first, back to a - max_len. */
	auto it = by_start.upper_bound(a);
	while (it != by_start.begin()) {
		--it;
		Entry *e = it->second;
		if (a - e->start > max_len)
			break;
		if (e->end >= a + len && e->access == access)
			return e;
	}
	return nullptr;
}

void nicmr_mr_cache::unindex(Entry *e) noexcept
{
	auto [lo, hi] = by_start.equal_range(e->start);
	for (auto it = lo; it != hi; ++it)
		if (it->second == e) {
			by_start.erase(it);
			break;
		}
	count--;
	bytes -= span(e->start, e->end);
}

bool nicmr_mr_cache::drop(Entry *e) noexcept
{
	e->mr->held->in_cache = false;
	const int rc = nicmr_mr_dereg(e->mr);
	if (rc != 0) {
		e->mr->held->in_cache = true;
		NICMR_LOG(warn, kLog, "%s: cached MR %#x [%#lx, +%zu): dereg failed: %d",
			  pd->dev->spec.c_str(), nicmr_mr_key(e->mr), (unsigned long)e->start,
			  size_t(e->end - e->start), rc);
		return false;
	}
	by_mr.erase(e->mr);
	delete e;
	return true;
}

bool nicmr_mr_cache::make_room(size_t need) noexcept
{
	if (max_count == 0 || need > max_size)
		return false;
	auto it = idle.begin();
	while ((count + 1 > max_count || bytes + need > max_size) && it != idle.end()) {
		Entry *e = *it;
		unindex(e);
		auto next = idle.erase(it);
		if (drop(e)) {
			st.evictions++;
		} else {
			/* Kept registered but no longer found: a later flush retries. */
			e->stale = true;
		}
		it = next;
	}
	return count + 1 <= max_count && bytes + need <= max_size;
}

void nicmr_mr_cache::invalidate(uintptr_t start, uintptr_t end) noexcept
{
	std::lock_guard lk(mu);
	if (by_start.empty())
		return;
	const uintptr_t from = start > max_len ? start - max_len : 0;
	for (auto it = by_start.lower_bound(from); it != by_start.end() && it->first < end;) {
		Entry *e = it->second;
		/* e's pages against the pages [start, end): it starts before end (the loop's
		 * bound), so they meet unless its last page ends at or before start. */
		if (((e->end + kPage - 1) & ~(kPage - 1)) <= start) {
			++it;
			continue;
		}
		it = by_start.erase(it);
		count--;
		bytes -= span(e->start, e->end);
		st.invalidations++;
		e->stale = true;
		if (e->users == 0) {
			idle.erase(e->lru);
			drop(e);
		}
	}
}

extern "C" {

void nicmr_mr_cache_params_init(struct nicmr_mr_cache_params *p)
{
	if (p == nullptr)
		return;
	*p = {};
	p->max_size = kDefaultMaxSize;
	p->max_count = kDefaultMaxCount;
	p->monitor = NICMR_MR_CACHE_MONITOR_DEFAULT;
	parse_size("NICMR_MR_CACHE_MAX_SIZE", &p->max_size);
	parse_size("NICMR_MR_CACHE_MAX_COUNT", &p->max_count);
	if (const char *m = std::getenv("NICMR_MR_CACHE_MONITOR"); m != nullptr && *m != '\0') {
		if (std::strcmp(m, "uffd") == 0 || std::strcmp(m, "userfaultfd") == 0)
			p->monitor = NICMR_MR_CACHE_MONITOR_UFFD;
		else if (std::strcmp(m, "disabled") == 0 || std::strcmp(m, "none") == 0)
			p->monitor = NICMR_MR_CACHE_MONITOR_NONE;
		else
			NICMR_LOG(warn, kLog,
				  "NICMR_MR_CACHE_MONITOR=%s is not uffd, userfaultfd, disabled or "
				  "none: the default stays",
				  m);
	}
}

int nicmr_mr_cache_create(struct nicmr_pd *pd, const struct nicmr_mr_cache_params *params,
			  struct nicmr_mr_cache **out)
{
	if (pd == nullptr || params == nullptr || out == nullptr ||
	    params->monitor < NICMR_MR_CACHE_MONITOR_DEFAULT ||
	    params->monitor > NICMR_MR_CACHE_MONITOR_NONE)
		return -EINVAL;
	std::unique_ptr<nicmr_mr_cache> c(new (std::nothrow) nicmr_mr_cache);
	if (!c)
		return -ENOMEM;
	c->pd = pd;
	c->max_size = params->max_size;
	c->max_count = params->max_count;
	if (params->monitor != NICMR_MR_CACHE_MONITOR_NONE && params->max_count > 0) {
		const int rc = mem::UnmapMonitor::subscribe(c.get(), &c->mon);
		if (rc != 0) {
			if (params->monitor == NICMR_MR_CACHE_MONITOR_UFFD) {
				NICMR_LOG(warn, kLog, "%s: registration cache: no userfaultfd: %d",
					  pd->dev->spec.c_str(), rc);
				return rc;
			}
			NICMR_LOG(info, kLog,
				  "%s: registration cache without a monitor (userfaultfd: %d): "
				  "nothing is cached",
				  pd->dev->spec.c_str(), rc);
		}
	}
	c->st.monitor = c->mon ? NICMR_MR_CACHE_MONITOR_UFFD : NICMR_MR_CACHE_MONITOR_NONE;
	*out = c.release();
	return 0;
}

int nicmr_mr_cache_destroy(struct nicmr_mr_cache *cache)
{
	if (cache == nullptr)
		return -EINVAL;
	{
		std::lock_guard lk(cache->mu);
		for (const auto &[mr, e] : cache->by_mr)
			if (e->users != 0)
				return -EBUSY;
	}
	/* Without mu: the monitor calls invalidate() under its own lock, then takes mu. */
	if (cache->mon)
		cache->mon->unsubscribe(cache);
	{
		std::lock_guard lk(cache->mu);
		cache->idle.clear();
		while (!cache->by_mr.empty()) {
			Entry *e = cache->by_mr.begin()->second;
			if (!cache->drop(e)) {
				/* Left registered (logged): the MR goes with the device. */
				cache->by_mr.erase(cache->by_mr.begin());
				delete e;
			}
		}
		cache->by_start.clear();
	}
	delete cache;
	return 0;
}

int nicmr_mr_cache_reg(struct nicmr_mr_cache *cache, void *addr, size_t len, uint64_t access,
		       struct nicmr_mr **out)
{
	const auto a = reinterpret_cast<uintptr_t>(addr);
	if (cache == nullptr || out == nullptr || len == 0 || a + len < a)
		return -EINVAL;
	/* Unmap events whose calls returned are handled before we look (mem_monitor.h). */
	if (cache->mon)
		cache->mon->wait_idle();
	std::lock_guard lk(cache->mu);
	if (Entry *e = cache->find(a, len, access); e != nullptr) {
		if (e->users++ == 0)
			cache->idle.erase(e->lru);
		cache->st.hits++;
		*out = e->mr;
		return 0;
	}
	/* A miss. Pool memory needs no cache (its registration is the fast path). */
	const bool pool = nicmr_pool_find(cache->pd->dev, addr, len) != nullptr;
	const size_t need = span(a, a + len);
	bool keep = cache->mon && !pool && cache->make_room(need);
	if (keep) {
		if (int rc = cache->mon->watch(a, len); rc != 0) {
			NICMR_LOG(debug, kLog,
				  "%s: [%#lx, +%zu) cannot be watched (%d): not cached",
				  cache->pd->dev->spec.c_str(), (unsigned long)a, len, rc);
			keep = false;
		}
	}
	std::unique_ptr<Entry> e(new (std::nothrow) Entry);
	if (!e)
		return -ENOMEM;
	nicmr_mr *mr = nullptr;
	int rc = nicmr_mr_reg(cache->pd, addr, len, access, 0, 0, &mr);
	if (rc != 0)
		return rc;
	e->start = a;
	e->end = a + len;
	e->access = access;
	e->mr = mr;
	e->users = 1;
	e->kept = keep;
	try {
		cache->by_mr.emplace(mr, e.get());
		if (keep)
			cache->by_start.emplace(a, e.get());
	} catch (...) {
		cache->by_mr.erase(mr);
		nicmr_mr_dereg(mr);
		return -ENOMEM;
	}
	if (keep) {
		mr->held->in_cache = true;
		cache->count++;
		cache->bytes += need;
		cache->max_len = std::max(cache->max_len, size_t(len));
		cache->st.misses++;
	} else {
		cache->st.uncached++;
	}
	(void)e.release(); /* by_mr owns it now */
	*out = mr;
	return 0;
}

int nicmr_mr_cache_dereg(struct nicmr_mr_cache *cache, struct nicmr_mr *mr)
{
	if (cache == nullptr || mr == nullptr)
		return -EINVAL;
	std::lock_guard lk(cache->mu);
	auto it = cache->by_mr.find(mr);
	if (it == cache->by_mr.end() || it->second->users == 0)
		return -EINVAL;
	Entry *e = it->second;
	if (--e->users != 0)
		return 0;
	if (!e->kept) {
		const int rc = nicmr_mr_dereg(mr);
		if (rc != 0) {
			e->users = 1;
			return rc;
		}
		cache->by_mr.erase(it);
		delete e;
		return 0;
	}
	if (e->stale) {
		cache->drop(e); /* on failure: kept stale, flush and destroy retry */
		return 0;
	}
	try {
		e->lru = cache->idle.insert(cache->idle.end(), e);
	} catch (...) {
		/* No room to keep it idle: it goes now. */
		cache->unindex(e);
		e->stale = true;
		cache->drop(e);
	}
	return 0;
}

int nicmr_mr_cache_flush(struct nicmr_mr_cache *cache)
{
	if (cache == nullptr)
		return -EINVAL;
	std::lock_guard lk(cache->mu);
	int n = 0;
	while (!cache->idle.empty()) {
		Entry *e = cache->idle.front();
		cache->idle.pop_front();
		cache->unindex(e);
		if (cache->drop(e)) {
			cache->st.evictions++;
			n++;
		} else {
			e->stale = true;
		}
	}
	/* Stale entries a failed deregistration left behind, no user holding them. */
	for (auto it = cache->by_mr.begin(); it != cache->by_mr.end();) {
		Entry *e = it->second;
		++it;
		if (e->kept && e->stale && e->users == 0 && cache->drop(e))
			n++;
	}
	return n;
}

int nicmr_mr_cache_get_stats(struct nicmr_mr_cache *cache, struct nicmr_mr_cache_stats *stats)
{
	if (cache == nullptr || stats == nullptr)
		return -EINVAL;
	std::lock_guard lk(cache->mu);
	*stats = cache->st;
	stats->entries = cache->count;
	stats->bytes = cache->bytes;
	uint64_t in_use = 0;
	for (const auto &[mr, e] : cache->by_mr)
		in_use += e->users != 0 ? 1 : 0;
	stats->in_use = in_use;
	return 0;
}

} /* extern "C" */
