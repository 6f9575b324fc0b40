/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration engine: KeySpace + ShadowTable + an MkeyProgrammer.
 *
 *   reg:     validate -> take a key (cache / requested) -> programmer.bind -> publish -> activate
 *   reg_sub: hold the base key -> check against the base -> as reg (the hold stays till dereg)
 *   dereg:   begin_retire -> invalidate entry -> programmer.revoke -> retire (grace period)
 *
 * The mkey pool: the engine's keys are the device's mkeys, index << 8 | variant, where the
 * index is the one the device chose at CREATE_MKEY (a stock ConnectX picks it; the table and
 * slot words are direct-indexed by it over the device's whole index space, in lazily
 * populated memory) and the variant is the engine's (set by UMR, the next of the index's keyed
 * cycle on every reuse: mr_variant.h). The engine starts with pool_initial free mkeys and, when a
 * registration finds none free, creates pool_grow more (slow path, under grow_mu_, which the fast
 * path never touches), up to pool_max; past it, -ENOSPC. Requested keys need a device that creates
 * mkeys at chosen indices (MkeyProgrammer::chosen_indices); elsewhere they are -EOPNOTSUPP.
 *
 * Failure atomicity: a failed reg leaves the key space, the table and the device as they were
 * (the key goes back free, at its next variant); a failed dereg leaves the region registered and
 * its key working. Lookups are the table's, lockless.
 *
 * Threads: reg, reg_sub, dereg, raw_attr, map_raw and lookup may be called from any thread at once.
 * A KeyCache is used by one thread at a time. dereg(k) must come after reg returned k (the
 * caller's own hand-over of the key orders them); a second dereg of k returns -ENOKEY.
 */
#ifndef NICMR_MR_ENGINE_H
#define NICMR_MR_ENGINE_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "mr_access.h"
#include "mr_keys.h"
#include "mr_programmer.h"
#include "mr_rawkey.h"
#include "mr_table.h"

namespace nicmr::mr {

/* Pool defaults (doc/registration.md, "The mkey pool"). */
inline constexpr uint32_t kDefaultPoolInitial = 1024;
inline constexpr uint32_t kDefaultPoolGrow = 256;

/*
 * The cache of on-demand mkeys (doc/odp.md, "The on-demand mkey cache"), as Linux's mlx5 keeps
 * free mkeys for ODP MRs (drivers/infiniband/hw/mlx5/mr.c: cache entries by translation size,
 * filled by a work queue; alloc_cached_mr takes from the entry of the MR's order or a larger
 * one; mlx5_revoke_mr revokes with a UMR and stores the mkey back): free MTT mkeys of 4 KiB
 * pages with pg_access, made ahead by the programmer, in buckets of 2^k pages. A registration
 * takes one of the smallest bucket that holds its pages and binds it with one UMR; a
 * deregistration zaps what was present, revokes it with a UMR and puts it back at its next
 * variant behind a grace period.
 */
struct OdpCacheConfig {
	bool enabled = false;	     /* off: on-demand regions go through the indirect programmer */
	uint32_t min_log_pages = 3;  /* the smallest bucket: 8 pages (32 KiB); 1..max_log_pages */
	uint32_t max_log_pages = 18; /* the largest: 2^18 pages (1 GiB); clamped to the device's */
	uint32_t prefill = 16;	     /* made per bucket at creation (0..bucket_max) ... */
	uint32_t prefill_log_pages = 9; /* ... for the buckets up to 2^9 pages (2 MiB) */
	uint32_t refill = 4;	   /* made at once when a registration finds its bucket empty */
	uint32_t bucket_max = 256; /* mkeys one bucket makes at most (1..65536) */
	/* Indices the pool's default cap leaves for misses beyond the prefill (0..2^24): 64, a
	 * first miss (refill 4) in each of 16 buckets. */
	uint32_t headroom = 64;
};
inline constexpr uint32_t kOdpMaxRefill = 64;

/*
 * The indices a device of index_count mkeys keeps from the pool for the on-demand cache when
 * the pool's cap is the default (doc/odp.md, "Indices"): the prefill (prefill mkeys in each
 * bucket from 2^min_log_pages up to 2^prefill_log_pages pages) and the headroom, at most half
 * of the indices 1..index_count-1. The pool's default cap is index_count - 1 less this; the
 * provider's fi_getinfo says the same mr_cnt from the spec (fabric/fi_prov.cpp, device_spec),
 * and a test compares the two. 0 when c.enabled is false.
 */
constexpr uint32_t odp_default_reserve(uint32_t index_count, const OdpCacheConfig &c) noexcept
{
	if (!c.enabled || index_count < 2)
		return 0;
	const uint32_t top =
		c.prefill_log_pages < c.max_log_pages ? c.prefill_log_pages : c.max_log_pages;
	const uint64_t prefilled =
		top >= c.min_log_pages ? uint64_t{c.prefill} * (top - c.min_log_pages + 1) : 0;
	const uint64_t want = prefilled + c.headroom;
	const uint64_t half = (uint64_t{index_count} - 1) / 2;
	return static_cast<uint32_t>(want < half ? want : half);
}

/* One bucket's state (Engine::odp_stats). */
struct OdpBucketStats {
	uint64_t pages = 0;  /* translation entries of each of its mkeys */
	uint32_t made = 0;   /* mkeys made for it */
	uint32_t cached = 0; /* free in it now (some may wait for their grace period) */
	uint64_t hits = 0;   /* registrations that found one */
	uint64_t misses = 0; /* registrations that had to make some (the slow path) */
};

/* Called by dereg for a cached on-demand region after the host stopped accepting its key and
 * before the device revokes it: makes every translation not present again (0, or an error that
 * leaves the region registered). */
struct DeregHook {
	int (*fn)(void *ctx, uint32_t mkey) noexcept;
	void *ctx;
};

struct EngineConfig {
	/* The device's mkey index space: indices 1..index_count-1 (2..2^24). */
	uint32_t index_count = 1u << 16;
	uint32_t max_readers = 64; /* QSBR reader ids 0..max_readers-1 (1..1024) */
	uint64_t device_id = 1;	   /* carried in raw keys; nonzero */
	/* Segmented regions live at once (clamped to index_count; 0: none). */
	uint32_t segment_slots = kDefaultSegmentSlots;
	/* mkeys created at engine creation (clamped to pool_max), per growth (1..2^16), and at
	 * most (1..index_count-1; 0: index_count - 1, less odp_default_reserve when the device
	 * has an on-demand cache). The on-demand cache makes at most the indices the cap leaves:
	 * index_count - 1 - pool_max. */
	uint32_t pool_initial = kDefaultPoolInitial;
	uint32_t pool_grow = kDefaultPoolGrow;
	uint32_t pool_max = 0;
	/* Nonzero: reproducible keys (KeySpaceConfig::seed); 0: a secret from getrandom(2). */
	uint64_t key_seed = 0;
	OdpCacheConfig odp;
};

enum RegFlag : uint32_t {
	kRegRequestedKey = 1u << 0, /* use RegRequest::requested_key (FI_MR_PROV_KEY off) */
	kRegZeroBased = 1u << 1,    /* addresses are offsets from 0 (FI_MR_VIRT_ADDR off) */
	kRegPoolLookup = 1u << 2,   /* iova is a translation handle: use the pool's lookup */
	kRegSingleUse = 1u << 3,    /* FI_MR_SINGLE_USE: recorded in the entry */
	/* reg_sub only: a memory window (type 2) bound to the base. Remote rights only (no local
	 * read or write, so the lw-with-rw rule does not apply), and the base must carry
	 * kAccessMwBind. */
	kRegWindow = 1u << 4,
	/* FI_RMA_EVENT: the entry is published disabled (lookups say -EKEYREVOKED) with
	 * kEntryRmaEvent, until set_enabled(key, true). */
	kRegRmaEvent = 1u << 5,
};
inline constexpr uint32_t kRegKnownFlags =
	kRegRequestedKey | kRegZeroBased | kRegPoolLookup | kRegSingleUse | kRegRmaEvent;

struct RegRequest {
	uint64_t addr = 0;	    /* VA of the region */
	uint64_t len = 0;	    /* > 0 */
	uint8_t access = 0;	    /* MkeyAccess bits (access_grant, access_window) */
	uint32_t pd = 0;	    /* 24 bits */
	uint64_t iova = 0;	    /* IOVA of addr, or a handle with kRegPoolLookup */
	uint8_t log_page_size = 12; /* 12..30: the largest page the IOVA mapping allows */
	uint64_t requested_key = 0; /* with kRegRequestedKey */
	uint32_t flags = 0;	    /* RegFlag bits */
	/* Segmented regions (not contiguous in IOVA): the host's IOVA map, runs[count - 1].end ==
	 * len, ends strictly rising, 1..kMaxRuns runs; iova is then ignored. Without mtt the
	 * device gets iova_base = runs[0].iova (a contiguous IOVA must then be what it is). */
	const Run *runs = nullptr;
	uint32_t run_count = 0;
	/* An explicit MTT list for the device (page IOVAs of log_page_size pages, the first
	 * holding start), or nullptr for one contiguous range from iova. */
	const uint64_t *mtt = nullptr;
	uint32_t mtt_count = 0;
};

/* An indirect (KLM) region over keys registered before it (Engine::reg_indirect). */
struct IndirectRequest {
	uint64_t addr =
		0;	  /* the region's first address (its VA or IOVA; ignored when zero-based) */
	uint64_t len = 0; /* == the sum of the parts' byte counts */
	uint8_t access = 0;
	uint32_t pd = 0;
	uint64_t requested_key = 0;
	uint32_t flags = 0;		/* kRegRequestedKey, kRegZeroBased */
	const KlmPart *parts = nullptr; /* 1..kMaxRuns, each inside its live key */
	uint32_t part_count = 0;
	const Run *runs = nullptr; /* the IOVA map for lookups, as RegRequest::runs */
	uint32_t run_count = 0;
};

class Engine {
public:
	/*
	 * Creates the key space and table and asks the programmer for the initial pool.
	 * Returns 0, -EINVAL (config out of range), -ENOMEM, -EIO (the device gave an index that
	 * is 0, out of range or given before), getrandom(2)'s negative errno (the key space's
	 * secret, mr_keys.h), or the programmer's error; on failure nothing is
	 * left behind in the engine (the programmer owns the mkeys it made).
	 */
	static int create(const EngineConfig &cfg, MkeyProgrammer &programmer,
			  std::unique_ptr<Engine> *out) noexcept;
	~Engine();
	Engine(const Engine &) = delete;
	Engine &operator=(const Engine &) = delete;

	/*
	 * Registers a region and returns its mkey (lkey = rkey). cache may be nullptr.
	 * Returns 0;
	 *   -EINVAL        len 0, addr + len or iova + len wraps, access bits invalid (unknown, or
	 *                  rw/a without lw), pd above 24 bits, log_page_size outside 12..30
	 *   -EOPNOTSUPP    an unknown flag (the libfabric surface says -FI_EBADFLAGS), or
	 *                  kRegRequestedKey on a device without chosen indices
	 *   -ENOSPC        no free key reachable and the pool at pool_max (or a requested
	 *                  key's index not created yet and the pool at pool_max)
	 *   -EKEYREJECTED  requested key outside the key space
	 *   -EEXIST        requested key's index in use (the libfabric surface: -FI_ENOKEY)
	 *   -EAGAIN        requested key's index waits for its grace period
	 *   the programmer's bind error, or its create error when the pool had to grow
	 */
	int reg(const RegRequest &req, KeyCache *cache, uint32_t *mkey) noexcept;

	/*
	 * Registers a sub-MR (fi_mr_attr::base_mr): [req.addr, req.addr + req.len) inside the base
	 * region (addresses in the base's address space), its own key, access no more than the
	 * base's, the base's PD and translations (req.pd, req.iova and req.log_page_size are
	 * ignored). The base cannot be deregistered while the sub-MR lives. A sub-MR may be a base.
	 * Returns 0; -ENOKEY (base not registered, or disabled); -EOPNOTSUPP (a flag other than
	 * requested key, zero-based, single-use, or a base registered with kRegPoolLookup, or a
	 * single-use or RMA-event base: its own key would bypass the device's extension state of
	 * the base's key); -EINVAL (len 0,
	 * wrap, access bits invalid); -EACCES (access beyond the base's); -ERANGE (not inside the
	 * base); -EOVERFLOW (2^21 - 1 sub-MRs on one base); then reg's key and bind errors.
	 */
	int reg_sub(uint32_t base_mkey, const RegRequest &req, KeyCache *cache,
		    uint32_t *mkey) noexcept;

	/*
	 * Registers an indirect (KLM) region whose address space is req's parts end to end, each
	 * a range of a live key of the same PD with at least req's access. Each part's key is held
	 * (its dereg is -EBUSY) until this region is deregistered; ip programs the device and is
	 * called again for the deregistration, so it must outlive the region.
	 * Returns 0; -EOPNOTSUPP (a flag other than requested key and zero-based); -EINVAL (len 0
	 * or wrap, access invalid, pd above 24 bits, parts or runs count 0 or above kMaxRuns, a
	 * part of 0 bytes, byte counts not summing to len, runs malformed); -ENOKEY (a part's key
	 * not live); -EPERM (a part's key in another PD); -EACCES (a part's key grants less);
	 * -ERANGE (a part outside its key); -ENOSPC (no segment slot or key); the key errors of
	 * reg; ip's bind error. On failure every hold is dropped.
	 */
	int reg_indirect(const IndirectRequest &req, IndirectProgrammer &ip, KeyCache *cache,
			 uint32_t *mkey) noexcept;

	/*
	 * Registers an on-demand-paging region [req.addr, req.addr + req.len) (doc/odp.md).
	 * Lookups accept the key over the whole range and give the VA as its IOVA (the device
	 * translates). No sub-MR, window or refresh may use it (they say -EOPNOTSUPP). req.iova,
	 * log_page_size, runs and mtt are ignored.
	 * With the on-demand mkey cache (EngineConfig::odp) and no requested key, the key is a
	 * cached mkey bound with the programmer's bind_odp (one UMR), made first on a miss;
	 * otherwise ip makes the key's mkey with every translation not present (bind_odp, by
	 * commands) and takes it back at deregistration (revoke_indirect), so it must outlive
	 * the region. Returns 0; -EOPNOTSUPP (a flag other than requested key, or ip's);
	 * -EINVAL (len 0, wrap, access invalid, pd above 24 bits, more pages than the largest
	 * bucket with the cache); -ENOSPC (no segment slot or key; with the cache: the bucket and
	 * every larger one made bucket_max mkeys, or the cache made odp_limit() in all, and none
	 * of them is ready: in use or in their grace period); reg's key
	 * errors; -EIO (the device gave an index the engine cannot use); the programmer's bind or
	 * create error, or ip's bind error.
	 */
	int reg_odp(const RegRequest &req, IndirectProgrammer &ip, KeyCache *cache,
		    uint32_t *mkey) noexcept;

	/*
	 * Deregisters: when it returns 0, no lookup accepts mkey any more and the device refuses
	 * it. Returns 0, -ENOKEY (not a registered key: stale, unknown, or being (de)registered),
	 * -EBUSY (sub-MRs of it are registered; fi_close says -FI_EBUSY), or the programmer's
	 * revoke error or odp_zap's (the region stays registered). A cached on-demand region's
	 * mkey goes back to its bucket (odp_zap is called first, when given).
	 */
	int dereg(uint32_t mkey, KeyCache *cache, const DeregHook *odp_zap = nullptr) noexcept;

	/* The on-demand mkey cache: buckets (0 without it), the most pages a cached region may
	 * span, and one bucket's figures (-EINVAL beyond the buckets). */
	uint32_t odp_bucket_count() const noexcept { return odp_buckets_; }
	uint64_t odp_max_pages() const noexcept
	{
		return odp_buckets_ == 0 ? 0 : uint64_t{1} << (odp_min_log_ + odp_buckets_ - 1);
	}
	int odp_stats(uint32_t bucket, OdpBucketStats *out) const noexcept;
	/* The indices the pool's default cap left to the cache (odp_default_reserve; 0 when the
	 * cap was given or there is no cache), the most mkeys the cache makes in all buckets
	 * (index_count - 1 - pool_max with a cache, else 0), and how many it made. */
	uint32_t odp_reserved() const noexcept { return odp_reserved_; }
	uint32_t odp_limit() const noexcept { return odp_limit_; }
	uint32_t odp_made() const noexcept { return odp_made_.load(std::memory_order_relaxed); }
	/*
	 * Re-points a live region's key at new translations (iova of its start, log_page_size)
	 * with the programmer's modify: the key stays valid throughout, lookups see the old IOVA
	 * until the device has the new one and the new one after. The caller owns the key (no
	 * concurrent dereg of it). 0; -ENOKEY (not live); -EBUSY (sub-MRs or windows hold it:
	 * they point at its old translations); -EOPNOTSUPP (a sub-MR, window, segmented or
	 * pool-lookup region, or a programmer that cannot modify in place); -EINVAL (page size);
	 * the programmer's errors. While it runs, sub-MRs of the key cannot be registered
	 * (-ENOKEY).
	 */
	int refresh(uint32_t mkey, uint64_t iova, uint8_t log_page_size) noexcept;

	/*
	 * RMA-event regions (kRegRmaEvent): enabled true makes the disabled entry live for lookups,
	 * false disables it again. The caller owns the key and has programmed the device first
	 * (enable) or will after (disable). 0; -ENOKEY (not a registered key); -EINVAL (not
	 * registered with kRegRmaEvent).
	 */
	int set_enabled(uint32_t mkey, bool enabled) noexcept;

	/* Hot path: see ShadowTable::lookup. */
	int lookup(const LookupRequest &req, LookupResult *out) const noexcept
	{
		return table_->lookup(req, out);
	}

	/* fi_mr_raw_attr: the raw key of a registered mkey. 0, -ENOKEY, -EAGAIN, -ENOSPC (*size
	 * then says how much is needed). */
	int raw_attr(uint32_t mkey, uint8_t *buf, size_t *size) const noexcept;
	/* fi_mr_map_raw: 0 with *key = the mkey, or decode_raw_key's -EINVAL / -EXDEV. */
	static int map_raw(const uint8_t *buf, size_t size, uint64_t expected_device,
			   uint64_t *key) noexcept;
	/* fi_mr_unmap_key: mapping allocates nothing, so there is nothing to release. */
	static int unmap_raw(uint64_t) noexcept { return 0; }

	/* QSBR readers: see KeySpace. */
	int reader_register(unsigned id) noexcept { return keys_->reader_register(id); }
	void reader_unregister(unsigned id) noexcept { keys_->reader_unregister(id); }
	void reader_quiescent(unsigned id) noexcept { keys_->reader_quiescent(id); }

	/* mkeys created on the device for the engine so far, and the most there will be. */
	uint32_t pool_size() const noexcept { return pool_size_.load(std::memory_order_relaxed); }
	uint32_t pool_max() const noexcept { return pool_max_; }
	/* Whether requested keys are offered (the device creates mkeys at chosen indices). */
	bool requested_keys() const noexcept { return prog_.chosen_indices(); }
	/*
	 * Creates up to pool_grow more free mkeys now (what a registration that finds none free
	 * does). Slow path; any thread. 0; -ENOSPC (the pool is at pool_max); -EIO; the
	 * programmer's error.
	 */
	int grow() noexcept;

	KeySpace &keys() noexcept { return *keys_; }
	const ShadowTable &table() const noexcept { return *table_; }
	uint64_t device_id() const noexcept { return device_id_; }
	/* Host memory per index that exists whether or not it is live, and per live region. */
	static constexpr size_t fixed_bytes_per_index() noexcept
	{
		return KeySpace::bytes_per_index();
	}
	static constexpr size_t bytes_per_live_region() noexcept { return sizeof(Entry); }

private:
	explicit Engine(MkeyProgrammer &p) : prog_(p) {}
	int install(const RegRequest &req, EntryFields f, KeyCache *cache, uint32_t *mkey) noexcept;
	static bool runs_valid(const Run *runs, uint32_t count, uint64_t len) noexcept;
	int take_key(uint32_t flags, uint64_t requested, KeyCache *cache, uint32_t *k) noexcept;
	/* The slow paths of take_key: a pool with no free index, a requested key whose index the
	 * device has not created yet. */
	int alloc_growing(KeyCache *cache, uint32_t *k) noexcept;
	int claim_creating(uint64_t requested, KeyCache *cache, uint32_t *k) noexcept;
	int grow_locked(uint32_t count) noexcept;
	bool created(uint32_t index) const noexcept
	{
		/* Acquire: pairs with the release in claim_creating/grow_locked, so the mkey's
		 * slot word and ring copy are there before its bit is seen. */
		return created_[index / 64].load(std::memory_order_acquire) >> (index % 64) & 1;
	}
	int hold_parts(const IndirectRequest &req, uint32_t *held) noexcept;
	void unhold_keys(const uint32_t *keys, uint32_t n) noexcept;
	MkeyProgrammer &prog_;
	std::unique_ptr<KeySpace> keys_;
	std::unique_ptr<ShadowTable> table_;
	uint64_t device_id_ = 0;
	uint32_t pool_max_ = 0;
	uint32_t pool_grow_ = 0;

	/* The pool's slow path, on lines of their own: the fast path reads the members above. */
	/* Serialises pool growth and creation at a chosen index. */
	alignas(64) std::mutex grow_mu_;
	/* mkeys created (written under grow_mu_, relaxed reads are statistics). */
	std::atomic<uint32_t> pool_size_{0};
	/* One bit per index: the device has a free mkey there for the engine (requested keys
	 * ask; written under grow_mu_). index_count bits of lazily populated memory. */
	std::atomic<uint64_t> *created_ = nullptr;
	size_t created_len_ = 0;
	/* grow_locked's index list (pool_grow entries). */
	std::unique_ptr<uint32_t[]> grow_buf_;

	/* The on-demand mkey cache (slow path too: registrations of on-demand regions). */
	struct OdpCached {
		uint32_t mkey;
		uint64_t token; /* grace-period token of its last revoke; 0: never used */
	};
	struct alignas(64) OdpBucket {
		std::mutex mu;			   /* everything below */
		std::unique_ptr<OdpCached[]> ring; /* bucket_max entries, FIFO from head */
		uint32_t head = 0, count = 0, made = 0;
		uint64_t hits = 0, misses = 0;
	};
	static bool odp_config_valid(const OdpCacheConfig &c) noexcept;
	uint32_t odp_plan(const OdpCacheConfig &c) const noexcept;
	int odp_create(const OdpCacheConfig &c, uint32_t max_log) noexcept;
	int odp_fill_locked(uint32_t b, uint32_t count, uint32_t *taken) noexcept;
	int odp_take(uint32_t b, uint32_t *mkey) noexcept;
	void odp_put(uint32_t mkey, uint64_t token) noexcept;
	int reg_odp_cached(const RegRequest &req, uint32_t *mkey) noexcept;
	void publish_odp(const RegRequest &req, uint32_t slot, uint32_t k, IndirectProgrammer *ip,
			 uint32_t *mkey) noexcept;
	std::unique_ptr<OdpBucket[]> odp_;
	uint32_t odp_buckets_ = 0, odp_min_log_ = 0, odp_refill_ = 0, odp_bucket_max_ = 0;
	uint32_t odp_reserved_ = 0, odp_limit_ = 0;
	/* mkeys the cache made in all buckets (each bucket's fill claims its share before its
	 * commands, under its own mutex only: a compare-and-swap keeps the sum within
	 * odp_limit_). */
	std::atomic<uint32_t> odp_made_{0};
	/* Per index: its bucket + 1 for the cache's mkeys, else 0 (written before the mkey is
	 * first taken; lazily populated, like created_). */
	uint8_t *odp_bucket_of_ = nullptr;
	size_t odp_bucket_of_len_ = 0;
};

} // namespace nicmr::mr

#endif
