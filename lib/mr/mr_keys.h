/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The key space: which mkey indices are free, live or waiting for a grace period, and which
 * variant each one carries.
 *
 *   mkey (32 bits) = index << 8 | variant          lkey = rkey = mkey
 *
 *   per index: slot word   [ holds:21 | ghost:1 | state:2 | variant:8 ]   (4 bytes; zero = never
 *                          in the free structures; holds = live sub-MRs that keep a live key
 *                          from leaving; in the free state, where no ghost can be, the ghost
 *                          bit is set instead: "pooled", so that a free index whose variant is
 *                          0 is not taken for one never used)
 *
 * The slot word also says who owns the index's table entry: the registering thread while it is
 * binding, the deregistering thread while it is retiring. One writer per entry follows.
 *
 *   free indices:   KeyCache (per thread, 64)  <-- batches of 32 -->  global ring (rte_ring, HTS)
 *   retired ones:   a cache's batch of 32 takes one QSBR token. When nothing older waits and
 *                   no reader holds the token back, the batch is freed at once (variant
 *                   rotated) into its own cache. Otherwise it goes to the retire ring of
 *                   (token, index), FIFO, and is reclaimed once every reader has seen the
 *                   token. Either way a batch is freed whole: into the freeing thread's cache
 *                   when it fits there, else into the global ring as one bulk.
 *
 * Which indices are in the free structures is the owner's choice: every index 1..N-1 at
 * creation (all_free), or only those it adds later (add_free: the engine adds the indices of
 * the mkeys the device created for it, in batches, doc/registration.md). The rings hold
 * `capacity` indices, the most that can ever be added; the slot words cover all N indices
 * (lazily populated memory: an index never used costs no page).
 *
 * Index 0 is reserved and never handed out. Variants follow a keyed cycle per index
 * (mr_variant.h): an index enters the free structures at a first variant drawn from the key
 * space's secret (getrandom(2) at create), and every time it becomes free again it takes the
 * next variant of its cycle, which runs through all 256 values before any repeats. So the
 * variant a key had recurs at its index exactly at the 256th use after it, never sooner (a
 * requested key, which sets the variant the application asked for, restarts the cycle from
 * there), and a peer cannot tell the next variant from the ones it has seen (1/256 per blind
 * guess). Indices go into the free ring in a keyed random order within each run of
 * kCacheBatch.
 *
 * Requested keys pick a specific index. An rte_ring cannot give up one element from its middle,
 * so a claimed index keeps its copy in the free structures, marked "ghost" in its slot word;
 * whoever takes the ghost copy later drops it, and if the index is freed before that happens
 * the copy simply becomes real again. Every index thus has at most one copy in the free
 * structures, and no lock is taken anywhere except by the single reclaimer of the retire ring
 * (a try-lock: a thread that finds it busy leaves reclaiming to the holder; only an alloc that
 * found no free index at all waits for it).
 */
#ifndef NICMR_MR_KEYS_H
#define NICMR_MR_KEYS_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "mr_variant.h"
#include "nicmr/nicmr.h"

struct rte_ring;
struct rte_rcu_qsbr;

namespace nicmr::mr {

inline constexpr uint32_t kVariantBits = 8;
/* Indices are 24 bits wide (mkey_index in PRM.md). */
inline constexpr uint32_t kMaxIndexCount = 1u << 24;
/* Per-thread cache: refilled and drained in batches of kCacheBatch, holds up to kCacheSize. */
inline constexpr uint32_t kCacheBatch = 32;
inline constexpr uint32_t kCacheSize = 2 * kCacheBatch;

constexpr uint32_t mkey_index(uint32_t mkey) noexcept
{
	return mkey >> kVariantBits;
}
constexpr uint8_t mkey_variant(uint32_t mkey) noexcept
{
	return static_cast<uint8_t>(mkey);
}
constexpr uint32_t make_mkey(uint32_t index, uint8_t variant) noexcept
{
	return index << kVariantBits | variant;
}
static_assert(NICMR_KEY_INDEX(make_mkey(0x123456, 0x78)) == 0x123456,
	      "the public key index (nicmr.h) is the engine's");

struct KeySpaceConfig {
	/* N: the device's mkey count. Indices 1..N-1 are handed out. 2 <= N <= 2^24. */
	uint32_t index_count = 0;
	/* QSBR reader slots: reader ids are 0..max_readers-1. 1 <= max_readers <= 1024. */
	uint32_t max_readers = 64;
	/* Room in the free and retire rings: the most indices ever added (0: N - 1). */
	uint32_t capacity = 0;
	/* Every index 1..N-1 free at creation (capacity must then be N - 1); else none until
	 * add_free. */
	bool all_free = true;
	/* Fills buf with len secret random bytes: 0, or a negative errno that create returns.
	 * nullptr: getrandom(2). (Tests give their own.) */
	int (*entropy)(void *buf, size_t len) = nullptr;
	/* Nonzero: the secret is derived from this seed instead of drawn (entropy unused), so
	 * that keys repeat from run to run: transcripts and golden tests. Anyone who knows the
	 * seed predicts every key: never on a device remote peers reach. */
	uint64_t seed = 0;
};

/* free -> binding (alloc/claim) -> live (activate) -> retiring (begin_retire) -> free (reclaim);
 * binding -> free (release); retiring -> live (abort_retire). */
enum class KeyState : uint8_t { free = 0, live = 1, retiring = 2, binding = 3 };

class KeySpace;

/*
 * A per-thread stash of free indices (like rte_mempool_cache). One thread at a time may use a
 * cache; a cache must be destroyed before its KeySpace. Its destructor returns what it holds.
 */
class KeyCache {
public:
	explicit KeyCache(KeySpace &ks) noexcept : ks_(ks) {}
	~KeyCache();
	KeyCache(const KeyCache &) = delete;
	KeyCache &operator=(const KeyCache &) = delete;

	uint32_t size() const noexcept { return n_; }
	/* Retired indices held back for one grace-period token per batch (KeySpace::retire). */
	uint32_t retiring() const noexcept { return nl_; }

private:
	friend class KeySpace;
	KeySpace &ks_;
	uint32_t n_ = 0;
	uint32_t nl_ = 0;
	uint32_t idx_[kCacheSize];
	uint32_t limbo_[kCacheBatch];
};

class KeySpace {
public:
	/*
	 * Creates a key space: every index 1..N-1 free at its first variant (all_free), or none.
	 * Slow path: draws the 16-byte secret (cfg.entropy, getrandom(2) by default).
	 * Returns 0, -EINVAL (index_count, max_readers or capacity out of range, all_free with
	 * capacity below N - 1), -ENOMEM, or the entropy source's negative errno.
	 */
	static int create(const KeySpaceConfig &cfg, std::unique_ptr<KeySpace> *out) noexcept;
	~KeySpace();
	KeySpace(const KeySpace &) = delete;
	KeySpace &operator=(const KeySpace &) = delete;

	uint32_t index_count() const noexcept { return n_; }
	/* The most indices the free structures hold. */
	uint32_t capacity() const noexcept { return cap_; }

	/*
	 * Makes indices free (each at its first variant, or with the variant a claim gave it
	 * before it was added) that were never in the key space's free structures:
	 * the engine's pool growth (slow path). Each must be 1..N-1, never added before and
	 * never claimed; all that were ever added must fit in capacity. Any thread; no lock
	 * (bulk enqueues, in a keyed random order within each run of kCacheBatch).
	 * Returns 0, -EINVAL (an index out of range, or past capacity).
	 */
	int add_free(const uint32_t *indices, uint32_t count) noexcept;

	/*
	 * Takes a free index (through cache when given, else straight from the global ring) and
	 * returns its mkey, now binding (owned by the caller until activate or release). Any
	 * thread. No lock unless the pool is empty, when it reclaims retired indices first (and
	 * waits for the reclaim lock if another thread holds it, rather than fail while that
	 * thread is about to free indices).
	 * Returns 0, or -ENOSPC when no free index is reachable (others may sit in other threads'
	 * caches or wait for a grace period).
	 */
	int alloc(KeyCache *cache, uint32_t *mkey) noexcept;

	/*
	 * Takes the index a requested key names, with the key's variant: the mkey is the key,
	 * now binding. Any thread; lock-free (the ghost scheme above). cache (may be null): the
	 * caller's, whose retire batch is queued first when the index waits there.
	 * Returns 0; -EKEYREJECTED when the key is outside the key space (above 32 bits, index 0,
	 * index >= N); -EEXIST when the index is live or binding; -EAGAIN when the index waits for
	 * its grace period (retry once readers have reported quiescent states) or in another
	 * thread's retire batch (retry after that thread's next kCacheBatch deregistrations).
	 */
	int claim(uint64_t requested_key, uint32_t *mkey, KeyCache *cache = nullptr) noexcept;

	/* Binding -> live: the caller has published the entry (release: the entry's writes
	 * happen before whoever later takes the key for deregistration). */
	void activate(uint32_t mkey) noexcept;

	/*
	 * Gives back a binding mkey that was never published (a failed registration): the index is
	 * free again at once, variant rotated. Only the thread that took it.
	 */
	void release(KeyCache *cache, uint32_t mkey) noexcept;

	/*
	 * Deregistration, step 1: marks the live mkey as leaving (claims and lookups of the key by
	 * the engine fail from here on). Returns 0; -ENOKEY when mkey is not live with that
	 * exact variant (stale, free, already leaving, out of range); -EBUSY when it has holds.
	 */
	int begin_retire(uint32_t mkey) noexcept;
	/*
	 * Holds a live key: it cannot begin_retire until unhold (a sub-MR holds its base). Any
	 * thread. Returns 0, -ENOKEY (not live with that variant), -EOVERFLOW (2^21 - 1 holds).
	 */
	int hold(uint32_t mkey) noexcept;
	/* Drops one hold on the (live) key at index. */
	void unhold(uint32_t index) noexcept;
	/* Undoes begin_retire (the device refused the revoke; the key stays registered). */
	void abort_retire(uint32_t mkey) noexcept;
	/*
	 * Deregistration, step 2 (after the entry was invalidated and the device revoked the key):
	 * queues the index behind a QSBR token; it is freed, variant rotated, once every reader
	 * has reported a quiescent state after this call, and reclaims opportunistically.
	 * Through a cache, retired indices are batched: the kCacheBatch-th retire takes one QSBR
	 * token for the batch and frees the batch at once when no reader holds the token back
	 * and no older batch waits, else queues it with one ring operation (so that registering
	 * threads meet on the token once per batch, and on the retire ring only while readers
	 * hold batches back). The batch also ends when its thread finds no free index (alloc),
	 * claims a key in it (claim with the cache), or its cache goes.
	 */
	void retire(KeyCache *cache, uint32_t mkey) noexcept;

	/*
	 * Indices the owner keeps out of the free structures (the engine's cache of on-demand
	 * mkeys, mr_engine.h): never in the free ring, a cache or the retire ring.
	 * adopt: a never-used index (its slot word still zero) becomes binding at its first
	 * variant, owned by the caller: 0, -EINVAL (0 or out of range), -EEXIST (used before).
	 * recycle: a retiring key (begin_retire, then the device revoked it) becomes binding again
	 * at the next variant of its cycle and is returned; the owner keeps it and may publish it
	 * again only once grace_done(t) holds for a token t = grace_start() taken after the old
	 * entry was invalidated (what retire does for the free structures). Any thread; no lock.
	 */
	int adopt(uint32_t index, uint32_t *mkey) noexcept;
	uint32_t recycle(uint32_t mkey) noexcept;
	uint64_t grace_start() noexcept;
	/* Non-blocking: whether every reader has reported a quiescent state since token. */
	bool grace_done(uint64_t token) const noexcept;

	/* Frees every retired index whose grace period is over, one retire batch at a time:
	 * into cache (may be null; the caller's) when the batch fits there whole, else into the
	 * global ring as one bulk. Returns how many. Any thread. With wait false, returns 0 at
	 * once when another thread is reclaiming. */
	unsigned reclaim(KeyCache *cache, bool wait = false) noexcept;

	/*
	 * QSBR readers (data-path threads). reader_register() registers id and puts it online;
	 * from then on the thread must call reader_quiescent(id) from its poll loop, outside any
	 * use of a lookup's result, or go offline before it blocks. Each reader thread has its own
	 * id. Returns 0, or -EINVAL when id >= max_readers (registering an id again is harmless).
	 */
	int reader_register(unsigned id) noexcept;
	void reader_unregister(unsigned id) noexcept;
	void reader_online(unsigned id) noexcept;
	void reader_offline(unsigned id) noexcept;
	/* Hot path: one store. */
	void reader_quiescent(unsigned id) noexcept;

	/* The state and current variant of an index (diagnostics and tests). */
	KeyState state_of(uint32_t index, uint8_t *variant) const noexcept;
	/* The variant index takes after a use with variant v (diagnostics and tests). */
	uint8_t next_variant_of(uint32_t index, uint8_t v) const noexcept
	{
		return next_variant(secret_, index, v);
	}
	/* Free indices in the global ring (not counting caches). */
	uint32_t ring_free_count() const noexcept;
	/* Indices waiting for a grace period. */
	uint32_t retiring_count() const noexcept;
	/* Fixed host memory per index: slot word, free-ring slot, retire-ring slot. */
	static constexpr size_t bytes_per_index() noexcept { return 4 + 4 + 16; }

private:
	friend class KeyCache;
	friend struct KeySpaceTestAccess; /* tests: hold the reclaim lock */
	struct Retired {
		uint64_t token;
		uint64_t index;
	};
	KeySpace() = default;
	bool take(KeyCache *cache, uint32_t *index) noexcept;
	void put(KeyCache *cache, uint32_t index) noexcept;
	bool try_own(uint32_t index, uint32_t *mkey) noexcept;
	/* Marks the index free at variant next (the one after its current variant, computed by
	 * the caller); true when the caller must put it in the free structures (false: only a
	 * ghost copy of it was there, which becomes real). */
	bool make_free(uint32_t index, uint8_t next) noexcept;
	void flush(KeyCache &cache) noexcept;
	/* Ends the cache's retire batch: frees it at once when nothing older waits and no reader
	 * holds its token back (true), else queues it behind one QSBR token (false). */
	bool flush_retired(KeyCache &cache) noexcept;
	/* make_free on each index, then the batch whole into cache (may be null) when it fits
	 * there, else into the free ring as one bulk. count <= kCacheBatch. */
	void free_batch(KeyCache *cache, const uint32_t *indices, uint32_t count) noexcept;
	/* First variants, a shuffle per run of kCacheBatch, one bulk into the free ring. Slow
	 * path. count <= 256; indices is shuffled in place. */
	void enqueue_free(uint32_t *indices, uint32_t count) noexcept;
	/* 64 keyed random bits (slow path: the shuffles). */
	uint64_t draw() noexcept;

	uint32_t n_ = 0;
	uint32_t cap_ = 0;
	uint32_t max_readers_ = 0;
	/* Keys the variant cycles and the shuffles; set once by create. */
	VariantSecret secret_;
	std::atomic<uint64_t> draws_{0};
	/* Indices ever added (add_free, or all at creation); written by add_free alone. */
	std::atomic<uint32_t> added_{0};
	std::atomic<uint32_t> *slots_ = nullptr;
	rte_ring *free_ = nullptr;
	rte_ring *retire_ = nullptr;
	rte_rcu_qsbr *qsbr_ = nullptr;
	size_t slots_len_ = 0, free_len_ = 0, retire_len_ = 0, qsbr_len_ = 0;

	/* The retire ring has one consumer at a time: whoever holds this. It guards pend_ too:
	 * the oldest entries, taken off the ring in a burst, pend_[pos_..npend_) not yet past
	 * their grace period. */
	std::mutex reclaim_lock_;
	Retired pend_[kCacheBatch];
	uint32_t pos_ = 0, npend_ = 0;
	/* Indices in the retire ring or pend_ (relaxed: a count ordered with nothing; the
	 * direct free in flush_retired reads it only to leave older batches their turn). */
	std::atomic<uint32_t> waiting_{0};
};

} // namespace nicmr::mr

#endif
