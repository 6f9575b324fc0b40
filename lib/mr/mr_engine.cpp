/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_engine.h"

#include <algorithm>
#include <cerrno>
#include <new>
#include <sys/mman.h>

#include "nicmr_log.h"

namespace nicmr::mr {

int Engine::create(const EngineConfig &cfg, MkeyProgrammer &programmer,
		   std::unique_ptr<Engine> *out) noexcept
{
	const uint32_t n = cfg.index_count;
	if (cfg.device_id == 0 || n < 2 || n > kMaxIndexCount || cfg.pool_max > n - 1 ||
	    cfg.pool_grow == 0 || cfg.pool_grow > (1u << 16))
		return -EINVAL;
	std::unique_ptr<Engine> e(new (std::nothrow) Engine(programmer));
	if (!e)
		return -ENOMEM;
	e->device_id_ = cfg.device_id;
	/* The on-demand cache's buckets are known before the pool fills, so that the default cap
	 * leaves the cache the indices of its prefill and of its first misses (a pool that took
	 * every index left it none: every on-demand registration was the device's -ENOMEM). */
	uint32_t odp_max_log = 0;
	if (cfg.odp.enabled) {
		if (!odp_config_valid(cfg.odp))
			return -EINVAL;
		odp_max_log = e->odp_plan(cfg.odp);
	}
	if (odp_max_log != 0 && cfg.pool_max == 0)
		e->odp_reserved_ = odp_default_reserve(n, cfg.odp);
	e->pool_max_ = cfg.pool_max != 0 ? cfg.pool_max : n - 1 - e->odp_reserved_;
	if (odp_max_log != 0)
		e->odp_limit_ = n - 1 - e->pool_max_;
	e->pool_grow_ = cfg.pool_grow;
	e->grow_buf_.reset(new (std::nothrow) uint32_t[cfg.pool_grow]);
	e->created_len_ = (size_t{n} + 63) / 64 * sizeof(uint64_t);
	/* Zero pages: no index created. Lazily populated, like the key space's slot words. */
	void *bits = mmap(nullptr, e->created_len_, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	e->created_ = bits == MAP_FAILED ? nullptr : static_cast<std::atomic<uint64_t> *>(bits);
	static_assert(sizeof(std::atomic<uint64_t>) == 8 &&
		      std::atomic<uint64_t>::is_always_lock_free);
	if (!e->grow_buf_ || !e->created_)
		return -ENOMEM;
	KeySpaceConfig kc;
	kc.index_count = n;
	kc.max_readers = cfg.max_readers;
	kc.capacity = e->pool_max_;
	kc.all_free = false;
	kc.seed = cfg.key_seed;
	int rc = KeySpace::create(kc, &e->keys_);
	if (rc == 0)
		rc = ShadowTable::create(n, &e->table_, cfg.segment_slots);
	/* The initial pool, pool_grow at a time (grow_buf_'s size). */
	const uint32_t initial = std::min(cfg.pool_initial, e->pool_max_);
	while (rc == 0 && e->pool_size() < initial) {
		std::lock_guard lk(e->grow_mu_);
		rc = e->grow_locked(std::min(initial - e->pool_size(), e->pool_grow_));
	}
	if (rc == 0 && odp_max_log != 0)
		rc = e->odp_create(cfg.odp, odp_max_log);
	if (rc) {
		NICMR_LOG(error, "mr", "engine for device %#llx with %u keys (pool of %u): %d",
			  static_cast<unsigned long long>(cfg.device_id), n, initial, rc);
		return rc;
	}
	*out = std::move(e);
	return 0;
}

Engine::~Engine()
{
	if (created_ != nullptr)
		munmap(created_, created_len_);
	if (odp_bucket_of_ != nullptr)
		munmap(odp_bucket_of_, odp_bucket_of_len_);
}

bool Engine::odp_config_valid(const OdpCacheConfig &c) noexcept
{
	return c.min_log_pages >= 1 && c.min_log_pages <= c.max_log_pages &&
	       c.max_log_pages <= 40 && c.refill != 0 && c.refill <= kOdpMaxRefill &&
	       c.bucket_max != 0 && c.bucket_max <= (1u << 16) && c.prefill <= c.bucket_max &&
	       c.headroom <= (1u << 24);
}

/* The largest bucket's 2^k pages that the programmer's mkeys hold, or 0 when they hold too
 * little for one bucket (no on-demand paging: the engine has no cache). */
uint32_t Engine::odp_plan(const OdpCacheConfig &c) const noexcept
{
	const uint64_t most = prog_.odp_max_pages();
	uint32_t max_log = c.max_log_pages;
	while (max_log >= c.min_log_pages && (uint64_t{1} << max_log) > most)
		max_log--;
	return max_log < c.min_log_pages ? 0 : max_log;
}

/* The buckets up to 2^max_log pages (odp_plan's), and the prefill of the small ones, within
 * odp_limit_; a prefill that fails is logged and leaves its bucket to be filled by the
 * registrations that miss. */
int Engine::odp_create(const OdpCacheConfig &c, uint32_t max_log) noexcept
{
	const uint32_t buckets = max_log - c.min_log_pages + 1;
	odp_.reset(new (std::nothrow) OdpBucket[buckets]);
	if (!odp_)
		return -ENOMEM;
	for (uint32_t b = 0; b < buckets; b++) {
		odp_[b].ring.reset(new (std::nothrow) OdpCached[c.bucket_max]);
		if (!odp_[b].ring)
			return -ENOMEM;
	}
	odp_bucket_of_len_ = keys_->index_count();
	void *m = mmap(nullptr, odp_bucket_of_len_, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	odp_bucket_of_ = static_cast<uint8_t *>(m);
	odp_min_log_ = c.min_log_pages;
	odp_refill_ = c.refill;
	odp_bucket_max_ = c.bucket_max;
	odp_buckets_ = buckets;
	/* Only into the indices the pool's cap leaves (odp_limit_: the default cap leaves the
	 * prefill's; a cap given as mkey_max= may leave fewer, and the small buckets first get
	 * what there is). */
	for (uint32_t b = 0; b < buckets && c.min_log_pages + b <= c.prefill_log_pages; b++) {
		std::lock_guard lk(odp_[b].mu);
		for (uint32_t done = 0; done < c.prefill && odp_made() < odp_limit_;) {
			const uint32_t n = std::min(
				{c.prefill - done, kOdpMaxRefill, odp_limit_ - odp_made()});
			if (const int rc = odp_fill_locked(b, n, nullptr); rc != 0) {
				NICMR_LOG(warn, "mr",
					  "on-demand mkey cache: %u of %u mkeys of 2^%u pages "
					  "made: %d",
					  done, c.prefill, c.min_log_pages + b, rc);
				break;
			}
			done += n;
		}
	}
	return 0;
}

/* Under bucket b's mutex: count more mkeys (at most kOdpMaxRefill) into it; with taken, the
 * last one is not queued but returned there. Slow path: count commands. */
int Engine::odp_fill_locked(uint32_t b, uint32_t count, uint32_t *taken) noexcept
{
	OdpBucket &k = odp_[b];
	uint32_t idx[kOdpMaxRefill];
	const uint64_t pages = uint64_t{1} << (odp_min_log_ + b);
	/* Claim count of the cache's indices (fewer when fewer are left; -ENOSPC when none):
	 * the pool's cap is reachable because the cache never makes more than the cap leaves.
	 * Relaxed: the counter orders nothing else; the buckets' mutexes guard their own. */
	uint32_t made = odp_made_.load(std::memory_order_relaxed);
	do {
		if (made >= odp_limit_)
			return -ENOSPC;
		count = std::min(count, odp_limit_ - made);
	} while (!odp_made_.compare_exchange_weak(made, made + count, std::memory_order_relaxed,
						  std::memory_order_relaxed));
	int rc = prog_.create_odp_mkeys(pages, count, idx);
	if (rc) {
		odp_made_.fetch_sub(count, std::memory_order_relaxed);
		return rc;
	}
	for (uint32_t i = 0; i < count; i++) {
		uint32_t mk = 0;
		if (keys_->adopt(idx[i], &mk) != 0) {
			NICMR_LOG(error, "mr",
				  "the device gave on-demand mkey index %#x, which the engine "
				  "cannot use (0, beyond %#x, or given before)",
				  idx[i], keys_->index_count());
			return -EIO;
		}
		odp_bucket_of_[idx[i]] = static_cast<uint8_t>(b + 1);
		k.made++;
		if (taken != nullptr && i + 1 == count) {
			*taken = mk;
			break;
		}
		k.ring[(k.head + k.count++) % odp_bucket_max_] = OdpCached{mk, 0};
	}
	return 0;
}

/* A free mkey of bucket b; when none is ready there, one made for b (a miss) or, once b has
 * made all it may, one ready in a larger bucket (Linux's alloc_cached_mr looks upwards the
 * same way; larger buckets make nothing for a smaller region, whose miss would otherwise
 * reserve translation for far more pages than it has). The head of a bucket is its oldest
 * entry: when its grace period is not over, neither is any other's. */
int Engine::odp_take(uint32_t b, uint32_t *mkey) noexcept
{
	for (uint32_t j = b; j < odp_buckets_; j++) {
		OdpBucket &k = odp_[j];
		std::lock_guard lk(k.mu);
		if (k.count != 0) {
			const OdpCached &c = k.ring[k.head];
			if (c.token == 0 || keys_->grace_done(c.token)) {
				*mkey = c.mkey;
				k.head = (k.head + 1) % odp_bucket_max_;
				k.count--;
				k.hits++;
				return 0;
			}
		}
		if (j == b && k.made < odp_bucket_max_) {
			k.misses++;
			const int rc = odp_fill_locked(
				b, std::min(odp_refill_, odp_bucket_max_ - k.made), mkey);
			/* -ENOSPC: the cache made all the indices it has; a larger bucket's
			 * ready mkey may still serve, as when this bucket made its most. */
			if (rc != -ENOSPC)
				return rc;
		}
	}
	return -ENOSPC;
}

void Engine::odp_put(uint32_t mkey, uint64_t token) noexcept
{
	OdpBucket &k = odp_[odp_bucket_of_[mkey_index(mkey)] - 1];
	std::lock_guard lk(k.mu);
	/* Never full: a bucket holds no more than it made. */
	k.ring[(k.head + k.count++) % odp_bucket_max_] = OdpCached{mkey, token};
}

int Engine::odp_stats(uint32_t bucket, OdpBucketStats *out) const noexcept
{
	if (bucket >= odp_buckets_ || out == nullptr)
		return -EINVAL;
	OdpBucket &k = odp_[bucket];
	std::lock_guard lk(k.mu);
	out->pages = uint64_t{1} << (odp_min_log_ + bucket);
	out->made = k.made;
	out->cached = k.count;
	out->hits = k.hits;
	out->misses = k.misses;
	return 0;
}

/* The last step of both on-demand registrations: the slot's one run (lookups give the VA), the
 * entry, the key live. ip: the indirect programmer the deregistration revokes through (null
 * for a cached mkey). Registration path: no lock, no allocation, no system call. */
void Engine::publish_odp(const RegRequest &req, uint32_t slot, uint32_t k, IndirectProgrammer *ip,
			 uint32_t *mkey) noexcept
{
	SegSlot &s = table_->slot(slot);
	s.nheld = 0;
	s.indirect = ip;
	const Run run{req.len, req.addr};
	table_->publish_runs(slot, k, &run, 1);
	EntryFields f;
	f.mkey = k;
	f.state = EntryState::live;
	f.access = req.access;
	f.flags = static_cast<uint16_t>(kEntrySegmented | kEntryOdp | (ip ? kEntryIndirect : 0));
	f.pd = req.pd;
	f.start = req.addr;
	f.len = req.len;
	f.iova = slot;
	table_->publish(mkey_index(k), f);
	keys_->activate(k);
	*mkey = k;
}

/* reg_odp with the cache: a bucket's mkey and one UMR. */
int Engine::reg_odp_cached(const RegRequest &req, uint32_t *mkey) noexcept
{
	const uint64_t first = req.addr & ~uint64_t{4095};
	const uint64_t pages = (req.addr + req.len - first + 4095) >> 12;
	if (pages > odp_max_pages())
		return -EINVAL;
	uint32_t b = 0;
	while ((uint64_t{1} << (odp_min_log_ + b)) < pages)
		b++;
	const int slot = table_->alloc_slot();
	if (slot < 0)
		return slot;
	uint32_t k = 0;
	int rc = odp_take(b, &k);
	if (rc == 0) {
		rc = prog_.bind_odp(k, OdpParams{req.addr, req.len, req.access, req.pd, pages});
		if (rc) {
			/* Never published, and left free by the device: the same key may go
			 * again at once. */
			odp_put(k, 0);
			NICMR_LOG(warn, "mr", "on-demand bind of mkey %#x (%llu bytes) failed: %d",
				  k, static_cast<unsigned long long>(req.len), rc);
		}
	}
	if (rc) {
		table_->free_slot(uint32_t(slot));
		return rc;
	}
	publish_odp(req, uint32_t(slot), k, nullptr, mkey);
	return 0;
}

int Engine::grow() noexcept
{
	std::lock_guard lk(grow_mu_);
	return grow_locked(pool_grow_);
}

/* Slow path, under grow_mu_: count more free mkeys from the device into the key space. */
int Engine::grow_locked(uint32_t count) noexcept
{
	const uint32_t size = pool_size_.load(std::memory_order_relaxed);
	count = std::min({count, pool_max_ - size, pool_grow_});
	if (count == 0)
		return -ENOSPC;
	uint32_t *idx = grow_buf_.get();
	int rc = prog_.create_free_mkeys(count, idx);
	if (rc) {
		NICMR_LOG(warn, "mr", "creating %u more mkeys (pool of %u, at most %u) failed: %d",
			  count, size, pool_max_, rc);
		return rc;
	}
	/* In index order: a cache's batch of kCacheBatch then tends to share the cache lines of
	 * its per-index records (slot words, MR handles) with no other thread's. */
	std::sort(idx, idx + count);
	for (uint32_t i = 0; i < count; i++) {
		if (idx[i] == 0 || idx[i] >= keys_->index_count() || created(idx[i]) ||
		    (i > 0 && idx[i] == idx[i - 1])) {
			NICMR_LOG(error, "mr",
				  "the device gave mkey index %#x, which the engine cannot "
				  "use (0, beyond %#x, or given before)",
				  idx[i], keys_->index_count());
			return -EIO;
		}
	}
	rc = keys_->add_free(idx, count);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < count; i++)
		/* Release: pairs with the acquire in created(). */
		created_[idx[i] / 64].fetch_or(uint64_t{1} << (idx[i] % 64),
					       std::memory_order_release);
	pool_size_.store(size + count, std::memory_order_relaxed);
	NICMR_LOG(debug, "mr", "mkey pool grew by %u to %u (at most %u)", count, size + count,
		  pool_max_);
	return 0;
}

int Engine::reg(const RegRequest &req, KeyCache *cache, uint32_t *mkey) noexcept
{
	if (req.flags & ~kRegKnownFlags)
		return -EOPNOTSUPP;
	const bool handle = req.flags & kRegPoolLookup;
	const bool segmented = req.runs != nullptr;
	if (!range_valid(req.addr, req.len) ||
	    (!handle && !segmented && !range_valid(req.iova, req.len)) ||
	    !access_valid(req.access) || req.pd > 0xffffff || req.log_page_size < 12 ||
	    req.log_page_size > 30 || (segmented && handle) ||
	    (segmented && !runs_valid(req.runs, req.run_count, req.len)) ||
	    (req.mtt != nullptr && req.mtt_count == 0))
		return -EINVAL;
	EntryFields f;
	f.access = req.access;
	f.flags = static_cast<uint16_t>(((req.flags & kRegZeroBased) ? kEntryZeroBased : 0) |
					(handle ? kEntryPoolLookup : 0) |
					((req.flags & kRegSingleUse) ? kEntrySingleUse : 0) |
					((req.flags & kRegRmaEvent) ? kEntryRmaEvent : 0) |
					(segmented ? kEntrySegmented : 0));
	f.pd = req.pd;
	f.start = (req.flags & kRegZeroBased) ? 0 : req.addr;
	f.len = req.len;
	f.iova = segmented ? req.runs[0].iova : req.iova;
	return install(req, f, cache, mkey);
}

bool Engine::runs_valid(const Run *runs, uint32_t count, uint64_t len) noexcept
{
	if (count == 0 || count > kMaxRuns || runs[count - 1].end != len)
		return false;
	uint64_t from = 0;
	for (uint32_t i = 0; i < count; i++) {
		if (runs[i].end <= from || !range_valid(runs[i].iova, runs[i].end - from))
			return false;
		from = runs[i].end;
	}
	return true;
}

/* Hot path for provider keys: a free index from the cache or the ring; the pool grows (slow
 * path) only when none is left. */
int Engine::take_key(uint32_t flags, uint64_t requested, KeyCache *cache, uint32_t *k) noexcept
{
	if (flags & kRegRequestedKey) [[unlikely]] {
		if (!prog_.chosen_indices())
			return -EOPNOTSUPP;
		const uint32_t index = mkey_index(static_cast<uint32_t>(requested));
		if (requested > UINT32_MAX || index == 0 || index >= keys_->index_count())
			return -EKEYREJECTED;
		if (!created(index))
			return claim_creating(requested, cache, k);
		return keys_->claim(requested, k, cache);
	}
	const int rc = keys_->alloc(cache, k);
	if (rc == -ENOSPC) [[unlikely]]
		return alloc_growing(cache, k);
	return rc;
}

int Engine::alloc_growing(KeyCache *cache, uint32_t *k) noexcept
{
	for (;;) {
		{
			std::lock_guard lk(grow_mu_);
			/* Another thread may have grown the pool while we waited. */
			if (keys_->ring_free_count() == 0) {
				const int rc = grow_locked(pool_grow_);
				if (rc)
					return rc;
			}
		}
		const int rc = keys_->alloc(cache, k);
		if (rc != -ENOSPC)
			return rc;
	}
}

/* A requested key whose index has no mkey yet: create one there (mkey_by_name), then claim
 * it before its one copy goes into the free structures, so that no allocation takes it
 * between the two. */
int Engine::claim_creating(uint64_t requested, KeyCache *cache, uint32_t *k) noexcept
{
	const uint32_t index = mkey_index(static_cast<uint32_t>(requested));
	std::lock_guard lk(grow_mu_);
	if (created(index))
		return keys_->claim(requested, k, cache);
	const uint32_t size = pool_size_.load(std::memory_order_relaxed);
	if (size >= pool_max_)
		return -ENOSPC;
	int rc = prog_.create_free_mkey_at(index);
	if (rc) {
		NICMR_LOG(warn, "mr", "creating the mkey at index %#x for key %#llx failed: %d",
			  index, static_cast<unsigned long long>(requested), rc);
		return rc;
	}
	/* Never used: its slot word is free, so the claim cannot fail. Its ghost copy follows. */
	rc = keys_->claim(requested, k, cache);
	/* Cannot fail: the index is in range and the pool below pool_max_, the rings' room. */
	(void)keys_->add_free(&index, 1);
	/* Release: pairs with the acquire in created(). */
	created_[index / 64].fetch_or(uint64_t{1} << (index % 64), std::memory_order_release);
	pool_size_.store(size + 1, std::memory_order_relaxed);
	return rc;
}

void Engine::unhold_keys(const uint32_t *keys, uint32_t n) noexcept
{
	for (uint32_t i = 0; i < n; i++)
		keys_->unhold(mkey_index(keys[i]));
}

int Engine::hold_parts(const IndirectRequest &req, uint32_t *held) noexcept
{
	/* Each part's key is held first, then checked: a held key cannot leave, so the check
	 * stays true for as long as the hold. */
	for (uint32_t i = 0; i < req.part_count; i++) {
		const KlmPart &p = req.parts[i];
		int rc = keys_->hold(p.mkey);
		if (rc) {
			unhold_keys(held, i);
			return rc;
		}
		held[i] = p.mkey;
		EntryFields c;
		rc = table_->snapshot(p.mkey, &c);
		if (rc == 0 && c.state != EntryState::live)
			rc = -ENOKEY;
		else if (rc == 0 && c.pd != req.pd)
			rc = -EPERM;
		else if (rc == 0 && !access_covers(c.access, req.access))
			rc = -EACCES;
		else if (rc == 0 && !range_within(c.start, c.len, p.address, p.byte_count))
			rc = -ERANGE;
		if (rc) {
			unhold_keys(held, i + 1);
			return rc;
		}
	}
	return 0;
}

int Engine::reg_indirect(const IndirectRequest &req, IndirectProgrammer &ip, KeyCache *cache,
			 uint32_t *mkey) noexcept
{
	if (req.flags & ~(kRegRequestedKey | kRegZeroBased))
		return -EOPNOTSUPP;
	if (!range_valid(req.addr, req.len) || !access_valid(req.access) || req.pd > 0xffffff ||
	    req.parts == nullptr || req.part_count == 0 || req.part_count > kMaxRuns ||
	    req.runs == nullptr || !runs_valid(req.runs, req.run_count, req.len))
		return -EINVAL;
	uint64_t sum = 0;
	for (uint32_t i = 0; i < req.part_count; i++) {
		const uint32_t bc = req.parts[i].byte_count;
		if (bc == 0 || !range_valid(req.parts[i].address, bc) || sum + bc < sum)
			return -EINVAL;
		sum += bc;
	}
	if (sum != req.len)
		return -EINVAL;
	uint32_t held[kMaxRuns];
	int rc = hold_parts(req, held);
	if (rc)
		return rc;
	const int slot = table_->alloc_slot();
	if (slot < 0) {
		unhold_keys(held, req.part_count);
		return slot;
	}
	uint32_t k = 0;
	rc = take_key(req.flags, req.requested_key, cache, &k);
	const uint64_t start = (req.flags & kRegZeroBased) ? 0 : req.addr;
	if (rc == 0) {
		rc = ip.bind_indirect(k, IndirectParams{start, req.len, req.access, req.pd,
							req.parts, req.part_count});
		if (rc) {
			keys_->release(cache, k);
			NICMR_LOG(warn, "mr", "indirect bind of mkey %#x (%u parts) failed: %d", k,
				  req.part_count, rc);
		}
	}
	if (rc) {
		table_->free_slot(uint32_t(slot));
		unhold_keys(held, req.part_count);
		return rc;
	}
	SegSlot &s = table_->slot(uint32_t(slot));
	for (uint32_t i = 0; i < req.part_count; i++)
		s.held[i] = held[i];
	s.nheld = req.part_count;
	s.indirect = &ip;
	table_->publish_runs(uint32_t(slot), k, req.runs, req.run_count);
	EntryFields f;
	f.mkey = k;
	/* An indirect region takes no RMA-event flag (refused above), so it is live at once. */
	f.state = EntryState::live;
	f.access = req.access;
	f.flags = static_cast<uint16_t>(kEntrySegmented | kEntryIndirect |
					((req.flags & kRegZeroBased) ? kEntryZeroBased : 0));
	f.pd = req.pd;
	f.start = start;
	f.len = req.len;
	f.iova = uint32_t(slot);
	table_->publish(mkey_index(k), f);
	keys_->activate(k);
	*mkey = k;
	return 0;
}

int Engine::reg_odp(const RegRequest &req, IndirectProgrammer &ip, KeyCache *cache,
		    uint32_t *mkey) noexcept
{
	if (req.flags & ~uint32_t(kRegRequestedKey))
		return -EOPNOTSUPP;
	if (!range_valid(req.addr, req.len) || !access_valid(req.access) || req.pd > 0xffffff)
		return -EINVAL;
	if (odp_buckets_ != 0 && !(req.flags & kRegRequestedKey))
		return reg_odp_cached(req, mkey);
	/* The slot keeps ip for the deregistration (dereg calls revoke_indirect, as for a KLM
	 * region) and the one run that makes lookups give the VA. */
	const int slot = table_->alloc_slot();
	if (slot < 0)
		return slot;
	uint32_t k = 0;
	int rc = take_key(req.flags, req.requested_key, cache, &k);
	if (rc == 0) {
		const uint64_t first = req.addr & ~uint64_t{4095};
		const uint64_t pages = (req.addr + req.len - first + 4095) >> 12;
		rc = ip.bind_odp(k, OdpParams{req.addr, req.len, req.access, req.pd, pages});
		if (rc) {
			keys_->release(cache, k);
			NICMR_LOG(warn, "mr", "on-demand bind of mkey %#x (%llu bytes) failed: %d",
				  k, static_cast<unsigned long long>(req.len), rc);
		}
	}
	if (rc) {
		table_->free_slot(uint32_t(slot));
		return rc;
	}
	publish_odp(req, uint32_t(slot), k, &ip, mkey);
	return 0;
}

int Engine::reg_sub(uint32_t base_mkey, const RegRequest &req, KeyCache *cache,
		    uint32_t *mkey) noexcept
{
	if (req.flags & ~(kRegRequestedKey | kRegZeroBased | kRegSingleUse | kRegWindow))
		return -EOPNOTSUPP;
	const bool window = req.flags & kRegWindow;
	if (!range_valid(req.addr, req.len))
		return -EINVAL;
	if (window ? (req.access == 0 || (req.access & ~kWindowAccess) != 0)
		   : !access_valid(req.access))
		return -EINVAL;
	/* Hold first: from then on the base cannot leave, so the snapshot below stays true. */
	int rc = keys_->hold(base_mkey);
	if (rc)
		return rc;
	EntryFields b;
	rc = table_->snapshot(base_mkey, &b);
	if (rc == 0 && b.state != EntryState::live)
		rc = -ENOKEY;
	else if (rc == 0 && (b.flags & (kEntryPoolLookup | kEntrySegmented | kEntrySingleUse |
					kEntryRmaEvent)))
		rc = -EOPNOTSUPP;
	else if (rc == 0 &&
		 (!access_covers(b.access, req.access) || (window && !(b.access & kAccessMwBind))))
		rc = -EACCES; /* beyond the base's rights, or a window on a base without MW_BIND */
	else if (rc == 0 && !range_within(b.start, b.len, req.addr, req.len))
		rc = -ERANGE;
	if (rc == 0) {
		EntryFields f;
		f.access = req.access;
		f.flags = static_cast<uint16_t>(
			kEntrySub | ((req.flags & kRegZeroBased) ? kEntryZeroBased : 0) |
			((req.flags & kRegSingleUse) ? kEntrySingleUse : 0) |
			(window ? kEntryWindow : 0));
		f.pd = b.pd;
		f.start = (req.flags & kRegZeroBased) ? 0 : req.addr;
		f.len = req.len;
		f.iova = b.iova + (req.addr - b.start);
		f.base_index = mkey_index(base_mkey);
		RegRequest inherited = req;
		inherited.log_page_size = 12;
		rc = install(inherited, f, cache, mkey);
	}
	if (rc)
		keys_->unhold(mkey_index(base_mkey));
	return rc;
}

int Engine::install(const RegRequest &req, EntryFields f, KeyCache *cache, uint32_t *mkey) noexcept
{
	int slot = -1;
	if (f.flags & kEntrySegmented) {
		slot = table_->alloc_slot();
		if (slot < 0)
			return slot;
	}
	uint32_t k;
	int rc = take_key(req.flags, req.requested_key, cache, &k);
	if (rc) {
		if (slot >= 0)
			table_->free_slot(uint32_t(slot));
		return rc;
	}
	BindParams bp{f.start,	f.len,
		      f.access, f.pd,
		      f.iova,	req.log_page_size,
		      req.mtt,	req.mtt != nullptr ? req.mtt_count : 0};
	rc = prog_.bind(k, bp);
	if (rc) {
		keys_->release(cache, k);
		if (slot >= 0)
			table_->free_slot(uint32_t(slot));
		NICMR_LOG(warn, "mr", "bind of mkey %#x (start %#llx len %llu) failed: %d", k,
			  static_cast<unsigned long long>(f.start),
			  static_cast<unsigned long long>(f.len), rc);
		return rc;
	}
	if (slot >= 0) {
		table_->publish_runs(uint32_t(slot), k, req.runs, req.run_count);
		f.iova = uint32_t(slot);
	}
	f.mkey = k;
	f.state = (f.flags & kEntryRmaEvent) ? EntryState::disabled : EntryState::live;
	table_->publish(mkey_index(k), f);
	keys_->activate(k);
	*mkey = k;
	return 0;
}

int Engine::dereg(uint32_t mkey, KeyCache *cache, const DeregHook *odp_zap) noexcept
{
	int rc = keys_->begin_retire(mkey);
	if (rc)
		return rc;
	const uint32_t index = mkey_index(mkey);
	const EntryFields saved = table_->read_owned(index);
	/* Host first: from here on no lookup accepts the key, before the device stops too. */
	table_->invalidate(index);
	const bool segmented = saved.flags & kEntrySegmented;
	const auto slot = static_cast<uint32_t>(saved.iova);
	IndirectProgrammer *ip =
		(saved.flags & kEntryIndirect) ? table_->slot(slot).indirect : nullptr;
	/* A cached on-demand mkey goes back to its bucket: nothing it made present may stay. */
	const bool odp_cached = (saved.flags & (kEntryOdp | kEntryIndirect)) == kEntryOdp;
	rc = odp_cached && odp_zap != nullptr ? odp_zap->fn(odp_zap->ctx, mkey) : 0;
	if (rc == 0)
		rc = ip != nullptr ? ip->revoke_indirect(mkey) : prog_.revoke(mkey);
	if (rc) {
		table_->publish(index, saved);
		keys_->abort_retire(mkey);
		NICMR_LOG(warn, "mr", "revoke of mkey %#x failed: %d; it stays registered", mkey,
			  rc);
		return rc;
	}
	if (segmented) {
		SegSlot &s = table_->slot(slot);
		uint32_t held[kMaxRuns];
		const uint32_t nheld = s.nheld;
		for (uint32_t i = 0; i < nheld; i++)
			held[i] = s.held[i];
		table_->clear_slot(slot);
		table_->free_slot(slot);
		unhold_keys(held, nheld);
	}
	if (odp_cached) {
		/* Its next variant, reusable once readers have stopped seeing the old entry. */
		const uint32_t next = keys_->recycle(mkey);
		odp_put(next, keys_->grace_start());
		return 0;
	}
	keys_->retire(cache, mkey);
	if (saved.flags & kEntrySub)
		keys_->unhold(saved.base_index);
	return 0;
}

int Engine::refresh(uint32_t mkey, uint64_t iova, uint8_t log_page_size) noexcept
{
	if (log_page_size < 12 || log_page_size > 30)
		return -EINVAL;
	/* Retiring state for the length of the call: no hold can be taken meanwhile, and a key
	 * with holds is refused here. abort_retire makes it live again as it was. */
	int rc = keys_->begin_retire(mkey);
	if (rc)
		return rc;
	const uint32_t index = mkey_index(mkey);
	const EntryFields f = table_->read_owned(index);
	if (f.flags & (kEntrySub | kEntrySegmented | kEntryPoolLookup | kEntryIndirect)) {
		keys_->abort_retire(mkey);
		return -EOPNOTSUPP;
	}
	const BindParams bp{f.start, f.len, f.access, f.pd, iova, log_page_size, nullptr, 0};
	rc = prog_.modify(mkey, bp);
	/* The device has the new translations (the modify's completion was polled): lookups may
	 * hand out the new IOVA from now on. */
	if (rc == 0)
		table_->set_iova(index, iova);
	keys_->abort_retire(mkey);
	return rc;
}

int Engine::set_enabled(uint32_t mkey, bool enabled) noexcept
{
	const uint32_t index = mkey_index(mkey);
	if (index == 0 || index >= table_->index_count())
		return -ENOKEY;
	EntryFields f = table_->read_owned(index);
	if (f.mkey != mkey || f.state == EntryState::free)
		return -ENOKEY;
	if (!(f.flags & kEntryRmaEvent))
		return -EINVAL;
	f.state = enabled ? EntryState::live : EntryState::disabled;
	table_->publish(index, f);
	return 0;
}

int Engine::raw_attr(uint32_t mkey, uint8_t *buf, size_t *size) const noexcept
{
	EntryFields f;
	int rc = table_->snapshot(mkey, &f);
	if (rc)
		return rc;
	RawKey rk{device_id_, f.start, f.len, f.mkey, f.pd, f.access};
	return encode_raw_key(rk, buf, size);
}

int Engine::map_raw(const uint8_t *buf, size_t size, uint64_t expected_device,
		    uint64_t *key) noexcept
{
	RawKey rk;
	int rc = decode_raw_key(buf, size, expected_device, &rk);
	if (rc)
		return rc;
	*key = rk.mkey;
	return 0;
}

} // namespace nicmr::mr
