/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_keys.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <sys/mman.h>
#include <sys/random.h>

#include <rte_rcu_qsbr.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>

namespace nicmr::mr {

namespace {

/* Slot word layout (see mr_keys.h). */
constexpr uint32_t kStateShift = 8;
constexpr uint32_t kStateMask = 3u << kStateShift;
constexpr uint32_t kGhost = 1u << 10;
/* The same bit in the free state (no ghost there: a claim turns a free word into a binding
 * one): the index is in the free structures. Without it a free index at variant 0 would read
 * as zero, as one never used, and adopt would take it (a key index with two owners: the
 * variants are a permutation of 0..255, so 1 index in 256 starts at 0). */
constexpr uint32_t kPooled = kGhost;
constexpr uint32_t kHoldShift = 11;
constexpr uint32_t kHoldOne = 1u << kHoldShift;
constexpr uint32_t kHoldMax = UINT32_MAX >> kHoldShift;

constexpr uint32_t slot_word(KeyState st, uint8_t variant) noexcept
{
	return static_cast<uint32_t>(st) << kStateShift | variant;
}
constexpr KeyState slot_state(uint32_t w) noexcept
{
	return static_cast<KeyState>((w & kStateMask) >> kStateShift);
}

/*
 * Whether the owner of a binding or retiring index is the only thread that may write its slot
 * word: true when the word has no ghost bit. The other writers are each ruled out there:
 *   - a ghost copy's taker (try_own) clears the ghost bit: with none set there is no copy in
 *     the free structures to take, and a claim sets one only on a free word;
 *   - claim writes only a free word, hold only a live one (unhold only after a hold), adopt
 *     only a zero one;
 *   - begin_retire, abort_retire, recycle and make_free are the owner's.
 * So activate and make_free may store instead of compare-and-swap there: the word cannot
 * change between their load and their store. On a claimed index (ghost set) they keep the CAS.
 */
constexpr bool sole_writer(uint32_t w) noexcept
{
	return (w & kGhost) == 0;
}

void *map_zeroed(size_t len) noexcept
{
	/* Anonymous and lazily populated: pages appear as indices are first used. */
	void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? nullptr : p;
}

void unmap(void *p, size_t len) noexcept
{
	if (p)
		munmap(p, len);
}

/* rte_ring_init on our own memory, no EAL: capacity exactly count elements of esize bytes. */
rte_ring *make_ring(const char *name, unsigned count, unsigned esize, unsigned flags,
		    size_t *len) noexcept
{
	ssize_t sz = rte_ring_get_memsize_elem(esize, rte_align32pow2(count + 1));
	if (sz < 0)
		return nullptr;
	*len = static_cast<size_t>(sz);
	auto *r = static_cast<rte_ring *>(map_zeroed(*len));
	if (!r)
		return nullptr;
	if (rte_ring_init(r, name, count, flags | RING_F_EXACT_SZ) != 0) {
		unmap(r, *len);
		return nullptr;
	}
	return r;
}

/* The key space's secret, from the kernel's CSPRNG (slow path: once per key space).
 * getrandom(2): requests of up to 256 bytes are not interrupted by signals once the pool is
 * initialised, and block until it is; EINTR is retried all the same. */
int system_entropy(void *buf, size_t len) noexcept
{
	auto *p = static_cast<uint8_t *>(buf);
	while (len != 0) {
		const ssize_t n = getrandom(p, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= static_cast<size_t>(n);
	}
	return 0;
}

} // namespace

KeyCache::~KeyCache()
{
	ks_.flush(*this);
}

int KeySpace::create(const KeySpaceConfig &cfg, std::unique_ptr<KeySpace> *out) noexcept
{
	const uint32_t cap = cfg.capacity != 0 ? cfg.capacity : cfg.index_count - 1;
	if (cfg.index_count < 2 || cfg.index_count > kMaxIndexCount || cfg.max_readers < 1 ||
	    cfg.max_readers > 1024 || cap > cfg.index_count - 1 ||
	    (cfg.all_free && cap != cfg.index_count - 1))
		return -EINVAL;
	std::unique_ptr<KeySpace> ks(new (std::nothrow) KeySpace());
	if (!ks)
		return -ENOMEM;
	const uint32_t n = cfg.index_count;
	ks->n_ = n;
	ks->cap_ = cap;
	ks->max_readers_ = cfg.max_readers;
	ks->slots_len_ = size_t{n} * sizeof(std::atomic<uint32_t>);
	static_assert(sizeof(std::atomic<uint32_t>) == 4 &&
		      std::atomic<uint32_t>::is_always_lock_free);
	/* Zero pages read as slot_word(free, 0); an index gets its first variant when it goes
	 * into the free structures (enqueue_free). */
	ks->slots_ = static_cast<std::atomic<uint32_t> *>(map_zeroed(ks->slots_len_));
	/*
	 * HTS (head/tail sync) on both ends of both rings: its heads and tails are C11 atomics.
	 * One edge of it, a 32-bit tail store read by a 64-bit head/tail load, is invisible to
	 * ThreadSanitizer (test/tsan.supp, doc/registration.md). The default MP/MC mode
	 * (inline-assembly compare-and-set, plain tail stores) and RTS (32-bit halves of a 64-bit
	 * head/tail word) both trip it with false reports. HTS serialises each end of a ring;
	 * the per-thread caches move indices 32 at a time, so the rings see little traffic.
	 */
	ks->free_ = make_ring("nicmr_mr_free", cap, sizeof(uint32_t),
			      RING_F_MP_HTS_ENQ | RING_F_MC_HTS_DEQ, &ks->free_len_);
	/* Many threads retire; one at a time reclaims (under reclaim_lock_). */
	ks->retire_ = make_ring("nicmr_mr_retire", cap, sizeof(Retired),
				RING_F_MP_HTS_ENQ | RING_F_MC_HTS_DEQ, &ks->retire_len_);
	ks->qsbr_len_ = rte_rcu_qsbr_get_memsize(cfg.max_readers);
	ks->qsbr_ = static_cast<rte_rcu_qsbr *>(map_zeroed(ks->qsbr_len_));
	if (!ks->slots_ || !ks->free_ || !ks->retire_ || !ks->qsbr_)
		return -ENOMEM; /* the destructor unmaps what was mapped */
	if (rte_rcu_qsbr_init(ks->qsbr_, cfg.max_readers) != 0)
		return -EINVAL;
	int (*entropy)(void *, size_t) = cfg.entropy != nullptr ? cfg.entropy : system_entropy;
	uint64_t secret[2];
	if (cfg.seed != 0) {
		/* Reproducible keys: the seed spread over both halves (SipHash of 0 and 1 under
		 * the seed), not a secret. */
		const VariantSecret k{cfg.seed, ~cfg.seed};
		secret[0] = siphash13(k, 0);
		secret[1] = siphash13(k, 1);
	} else if (const int rc = entropy(secret, sizeof(secret)); rc != 0) {
		return rc < 0 ? rc : -EIO;
	}
	ks->secret_ = VariantSecret{secret[0], secret[1]};

	if (!cfg.all_free) {
		*out = std::move(ks);
		return 0;
	}
	ks->added_.store(n - 1, std::memory_order_relaxed);
	/* Free indices in blocks from kCacheBatch, then 1..kCacheBatch-1 (index 0 is never
	 * handed out): the batches of kCacheBatch that caches take are then aligned blocks, whose
	 * per-index records smaller than a cache line (the 4-byte slot words here, the API's
	 * 32-byte MR handles) fill whole lines, so two threads' batches never share one. Within
	 * a block the order is shuffled (enqueue_free). */
	const uint32_t first = n > kCacheBatch ? kCacheBatch : 1;
	uint32_t batch[256];
	uint32_t cnt = 0;
	for (uint32_t k = 0; k + 1 < n; ++k) {
		const uint32_t i = first + k < n ? first + k : first + k - n + 1;
		batch[cnt++] = i;
		if (cnt == 256) {
			ks->enqueue_free(batch, cnt);
			cnt = 0;
		}
	}
	if (cnt)
		ks->enqueue_free(batch, cnt);
	*out = std::move(ks);
	return 0;
}

uint64_t KeySpace::draw() noexcept
{
	/* Bit 63 keeps these messages apart from the per-index ones (indices are below 2^24).
	 * Relaxed: a counter ordered with nothing; two draws never share a value. */
	const uint64_t c = draws_.fetch_add(1, std::memory_order_relaxed);
	return siphash13(secret_, uint64_t{1} << 63 | c);
}

/* Slow path: new indices take their first variant (a slot word never written reads as zero;
 * one a requested key claimed before it was added, claim_creating in the engine, keeps what
 * the claim wrote), then go into the free ring in a keyed random order within each run of
 * kCacheBatch, so that which index comes first is not known from the order the device (or
 * create) gave them in, while a cache's batch keeps the same indices and cache lines. */
void KeySpace::enqueue_free(uint32_t *indices, uint32_t count) noexcept
{
	for (uint32_t i = 0; i < count; i++) {
		uint32_t zero = 0;
		/* Relaxed: the enqueue below (release, inside the ring) publishes the word to
		 * whoever dequeues the index. */
		slots_[indices[i]].compare_exchange_strong(
			zero,
			slot_word(KeyState::free, first_variant(secret_, indices[i])) | kPooled,
			std::memory_order_relaxed, std::memory_order_relaxed);
	}
	/* Fisher-Yates within each run, from draws of 64 bits: the modulo's bias is below
	 * 2^-58 for runs of 32. */
	for (uint32_t b = 0; b < count; b += kCacheBatch) {
		const uint32_t len = std::min(count - b, kCacheBatch);
		for (uint32_t i = len - 1; i > 0; i--) {
			const uint32_t j = static_cast<uint32_t>(draw() % (i + 1));
			std::swap(indices[b + i], indices[b + j]);
		}
	}
	/* Room is checked by the callers: the rings hold cap_ elements and every index has at
	 * most one copy. */
	rte_ring_enqueue_bulk_elem(free_, indices, sizeof(uint32_t), count, nullptr);
}

int KeySpace::add_free(const uint32_t *indices, uint32_t count) noexcept
{
	for (uint32_t i = 0; i < count; i++)
		if (indices[i] == 0 || indices[i] >= n_)
			return -EINVAL;
	/* Relaxed: a count ordered with nothing; one adder at a time (the engine's grow lock). */
	const uint32_t added = added_.load(std::memory_order_relaxed);
	if (count > cap_ - added)
		return -EINVAL;
	added_.store(added + count, std::memory_order_relaxed);
	/* Room is checked above. A copy, shuffled: the caller's array is const. */
	uint32_t buf[256];
	uint32_t done = 0;
	while (done < count) {
		const uint32_t n = std::min<uint32_t>(count - done, 256);
		std::memcpy(buf, indices + done, n * sizeof(uint32_t));
		enqueue_free(buf, n);
		done += n;
	}
	return 0;
}

KeySpace::~KeySpace()
{
	unmap(qsbr_, qsbr_len_);
	unmap(retire_, retire_len_);
	unmap(free_, free_len_);
	unmap(slots_, slots_len_);
}

bool KeySpace::take(KeyCache *c, uint32_t *index) noexcept
{
	if (!c)
		return rte_ring_dequeue_elem(free_, index, sizeof(uint32_t)) == 0;
	if (c->n_ == 0) {
		c->n_ = rte_ring_dequeue_burst_elem(free_, c->idx_, sizeof(uint32_t), kCacheBatch,
						    nullptr);
		if (c->n_ == 0)
			return false;
	}
	*index = c->idx_[--c->n_];
	return true;
}

void KeySpace::put(KeyCache *c, uint32_t index) noexcept
{
	/* The ring holds every index ever added and each has at most one copy in the free
	 * structures, so these enqueues cannot fail. */
	if (!c) {
		rte_ring_enqueue_elem(free_, &index, sizeof(uint32_t));
		return;
	}
	if (c->n_ == kCacheSize) {
		c->n_ -= kCacheBatch;
		rte_ring_enqueue_bulk_elem(free_, c->idx_ + c->n_, sizeof(uint32_t), kCacheBatch,
					   nullptr);
	}
	c->idx_[c->n_++] = index;
}

bool KeySpace::flush_retired(KeyCache &c) noexcept
{
	if (c.nl_ == 0)
		return true;
	/* One token for the batch, taken after the last of its entries was invalidated: a reader
	 * that reports it has stopped seeing every one of them. */
	const uint64_t token = rte_rcu_qsbr_start(qsbr_);
	/* Nothing older waits and no reader holds the batch back (none online, or all past the
	 * token already): free it whole now, without the retire ring and the reclaim lock, which
	 * are what registering threads would otherwise meet on once a batch. */
	if (waiting_.load(std::memory_order_relaxed) == 0 &&
	    rte_rcu_qsbr_check(qsbr_, token, false) == 1) {
		free_batch(&c, c.limbo_, c.nl_);
		c.nl_ = 0;
		return true;
	}
	Retired r[kCacheBatch];
	for (uint32_t i = 0; i < c.nl_; i++)
		r[i] = Retired{token, c.limbo_[i]};
	waiting_.fetch_add(c.nl_, std::memory_order_relaxed);
	/* The ring holds every index ever added, each in at most one place: it cannot fail. */
	rte_ring_enqueue_bulk_elem(retire_, r, sizeof(Retired), c.nl_, nullptr);
	c.nl_ = 0;
	return false;
}

void KeySpace::free_batch(KeyCache *c, const uint32_t *indices, uint32_t count) noexcept
{
	/* The next variants first, all of them: their arithmetic overlaps across indices here,
	 * where behind each locked compare-and-swap the next index's load would wait. The
	 * variant of a retiring index cannot change under us (only its ghost bit can). */
	uint8_t next[kCacheBatch];
	for (uint32_t i = 0; i < count; i++)
		next[i] = next_variant(
			secret_, indices[i],
			static_cast<uint8_t>(slots_[indices[i]].load(std::memory_order_relaxed)));
	uint32_t out[kCacheBatch];
	uint32_t n = 0;
	for (uint32_t i = 0; i < count; i++)
		if (make_free(indices[i], next[i]))
			out[n++] = indices[i];
	if (c != nullptr && c->n_ + n <= kCacheSize) {
		std::memcpy(c->idx_ + c->n_, out, n * sizeof(uint32_t));
		c->n_ += n;
	} else if (n != 0) {
		/* The ring holds every index ever added, each with at most one copy in the free
		 * structures: the bulk cannot fail. */
		rte_ring_enqueue_bulk_elem(free_, out, sizeof(uint32_t), n, nullptr);
	}
}

void KeySpace::flush(KeyCache &c) noexcept
{
	flush_retired(c);
	if (c.n_)
		rte_ring_enqueue_bulk_elem(free_, c.idx_, sizeof(uint32_t), c.n_, nullptr);
	c.n_ = 0;
}

/* A copy of index came out of the free structures: own it, or drop it if it was a ghost. */
bool KeySpace::try_own(uint32_t index, uint32_t *mkey) noexcept
{
	std::atomic<uint32_t> &slot = slots_[index];
	uint32_t w = slot.load(std::memory_order_relaxed);
	for (;;) {
		if (slot_state(w) == KeyState::free) {
			uint8_t v = static_cast<uint8_t>(w);
			/* Acquire: the previous owner's writes to this index's table entry
			 * happen before ours (pairs with the release in make_free). */
			if (slot.compare_exchange_weak(w, slot_word(KeyState::binding, v),
						       std::memory_order_acquire,
						       std::memory_order_relaxed)) {
				*mkey = make_mkey(index, v);
				return true;
			}
			continue;
		}
		/* Claimed by a requested key meanwhile: this copy is the ghost; drop it. */
		if (slot.compare_exchange_weak(w, w & ~kGhost, std::memory_order_relaxed))
			return false;
	}
}

int KeySpace::alloc(KeyCache *c, uint32_t *mkey) noexcept
{
	for (;;) {
		uint32_t index;
		if (!take(c, &index)) {
			/* Empty: indices past their grace period are the last resort. A thread
			 * that holds the reclaim lock is freeing them (and may have been
			 * descheduled doing so): wait for it rather than report -ENOSPC while a
			 * ring of retired indices waits; then look once more, as it may have
			 * freed them into the ring just before we got the lock. */
			if (c != nullptr)
				flush_retired(*c);
			const unsigned freed = reclaim(c, true);
			if (freed != 0)
				continue;
			if (!take(c, &index))
				return -ENOSPC;
		}
		if (try_own(index, mkey))
			return 0;
	}
}

int KeySpace::claim(uint64_t key, uint32_t *mkey, KeyCache *c) noexcept
{
	if (key > UINT32_MAX)
		return -EKEYREJECTED;
	const uint32_t index = mkey_index(static_cast<uint32_t>(key));
	if (index == 0 || index >= n_)
		return -EKEYREJECTED;
	const uint8_t v = mkey_variant(static_cast<uint32_t>(key));
	std::atomic<uint32_t> &slot = slots_[index];
	bool reclaimed = false;
	uint32_t w = slot.load(std::memory_order_relaxed);
	for (;;) {
		switch (slot_state(w)) {
		case KeyState::live:
		case KeyState::binding:
			return -EEXIST;
		case KeyState::retiring:
			if (reclaimed)
				return -EAGAIN;
			if (c != nullptr)
				flush_retired(*c);
			reclaim(nullptr);
			reclaimed = true;
			w = slot.load(std::memory_order_relaxed);
			continue;
		case KeyState::free:
			/* Its one copy stays in the free structures as a ghost. Acquire: as in
			 * try_own. */
			if (slot.compare_exchange_weak(w, slot_word(KeyState::binding, v) | kGhost,
						       std::memory_order_acquire,
						       std::memory_order_relaxed)) {
				*mkey = static_cast<uint32_t>(key);
				return 0;
			}
			continue;
		}
		return -EAGAIN; /* unreachable: every state is handled above */
	}
}

bool KeySpace::make_free(uint32_t index, uint8_t next) noexcept
{
	std::atomic<uint32_t> &slot = slots_[index];
	uint32_t w = slot.load(std::memory_order_relaxed);
	/* The ghost bit is dropped: a ghost copy, if any, becomes the real one (the free word's
	 * same bit says pooled). */
	const uint32_t nw = slot_word(KeyState::free, next) | kPooled;
	/* Release: our writes to the entry happen before the next owner's (pairs with the
	 * acquire in try_own and claim). Without a ghost bit no other thread writes this word
	 * until it is free (sole_writer): a store. */
	if (sole_writer(w)) {
		slot.store(nw, std::memory_order_release);
		return true;
	}
	while (!slot.compare_exchange_weak(w, nw, std::memory_order_release,
					   std::memory_order_relaxed))
		;
	return !(w & kGhost);
}

void KeySpace::activate(uint32_t mkey) noexcept
{
	std::atomic<uint32_t> &slot = slots_[mkey_index(mkey)];
	uint32_t w = slot.load(std::memory_order_relaxed);
	/* Release: pairs with the acquire in begin_retire (see mr_keys.h). A store when no
	 * other thread can write the word (sole_writer); else a CAS, as the ghost bit may
	 * change under us. */
	if (sole_writer(w)) {
		slot.store((w & ~kStateMask) | slot_word(KeyState::live, 0),
			   std::memory_order_release);
		return;
	}
	while (!slot.compare_exchange_weak(w, (w & ~kStateMask) | slot_word(KeyState::live, 0),
					   std::memory_order_release, std::memory_order_relaxed))
		;
}

void KeySpace::release(KeyCache *c, uint32_t mkey) noexcept
{
	const uint32_t index = mkey_index(mkey);
	/* The binding key's variant is the slot word's: only the ghost bit changes under us. */
	if (make_free(index, next_variant(secret_, index, mkey_variant(mkey))))
		put(c, index);
}

int KeySpace::begin_retire(uint32_t mkey) noexcept
{
	const uint32_t index = mkey_index(mkey);
	if (index == 0 || index >= n_)
		return -ENOKEY;
	std::atomic<uint32_t> &slot = slots_[index];
	uint32_t w = slot.load(std::memory_order_relaxed);
	for (;;) {
		if (slot_state(w) != KeyState::live ||
		    static_cast<uint8_t>(w) != mkey_variant(mkey))
			return -ENOKEY;
		if (w >> kHoldShift)
			return -EBUSY;
		/* Acquire: the entry was written by the last owner (activate, abort_retire release
		 * it) before we read and rewrite it. */
		if (slot.compare_exchange_weak(
			    w, (w & ~kStateMask) | slot_word(KeyState::retiring, 0),
			    std::memory_order_acquire, std::memory_order_relaxed))
			return 0;
	}
}

int KeySpace::hold(uint32_t mkey) noexcept
{
	const uint32_t index = mkey_index(mkey);
	if (index == 0 || index >= n_)
		return -ENOKEY;
	std::atomic<uint32_t> &slot = slots_[index];
	uint32_t w = slot.load(std::memory_order_relaxed);
	for (;;) {
		if (slot_state(w) != KeyState::live ||
		    static_cast<uint8_t>(w) != mkey_variant(mkey))
			return -ENOKEY;
		if ((w >> kHoldShift) == kHoldMax)
			return -EOVERFLOW;
		/* Acquire: as in begin_retire, the holder reads the entry the owner published. */
		if (slot.compare_exchange_weak(w, w + kHoldOne, std::memory_order_acquire,
					       std::memory_order_relaxed))
			return 0;
	}
}

void KeySpace::unhold(uint32_t index) noexcept
{
	/* Relaxed: the holder wrote nothing that the key's next owner needs to see. */
	slots_[index].fetch_sub(kHoldOne, std::memory_order_relaxed);
}

void KeySpace::abort_retire(uint32_t mkey) noexcept
{
	std::atomic<uint32_t> &slot = slots_[mkey_index(mkey)];
	uint32_t w = slot.load(std::memory_order_relaxed);
	/* Release: the restored entry is written before the key is live again. */
	while (!slot.compare_exchange_weak(w, (w & ~kStateMask) | slot_word(KeyState::live, 0),
					   std::memory_order_release, std::memory_order_relaxed))
		;
}

void KeySpace::retire(KeyCache *c, uint32_t mkey) noexcept
{
	/* rte_rcu_qsbr_start orders the caller's invalidation of the entry before the new token
	 * (release), so a reader that reports the token has stopped seeing the old entry. */
	if (c != nullptr) {
		c->limbo_[c->nl_++] = mkey_index(mkey);
		if (c->nl_ < kCacheBatch)
			return;
		if (!flush_retired(*c))
			reclaim(c);
		return;
	}
	Retired r{rte_rcu_qsbr_start(qsbr_), mkey_index(mkey)};
	waiting_.fetch_add(1, std::memory_order_relaxed);
	rte_ring_enqueue_elem(retire_, &r, sizeof(r));
	reclaim(nullptr);
}

int KeySpace::adopt(uint32_t index, uint32_t *mkey) noexcept
{
	if (index == 0 || index >= n_)
		return -EINVAL;
	const uint8_t v = first_variant(secret_, index);
	uint32_t zero = 0;
	/* Relaxed: the index was never handed out, so no earlier owner's writes need ordering;
	 * the adopter hands it on under its own lock. */
	if (!slots_[index].compare_exchange_strong(zero, slot_word(KeyState::binding, v),
						   std::memory_order_relaxed,
						   std::memory_order_relaxed))
		return -EEXIST;
	*mkey = make_mkey(index, v);
	return 0;
}

uint32_t KeySpace::recycle(uint32_t mkey) noexcept
{
	const uint32_t index = mkey_index(mkey);
	const uint8_t next = next_variant(secret_, index, mkey_variant(mkey));
	std::atomic<uint32_t> &slot = slots_[index];
	uint32_t w = slot.load(std::memory_order_relaxed);
	/* Retiring with no holds (begin_retire refused those), and never in the free structures:
	 * no ghost bit either. Release: the invalidated entry is written before whoever takes the
	 * key next (through the owner's lock, which orders it anyway) sees binding. */
	while (!slot.compare_exchange_weak(w, slot_word(KeyState::binding, next),
					   std::memory_order_release, std::memory_order_relaxed))
		;
	return make_mkey(index, next);
}

uint64_t KeySpace::grace_start() noexcept
{
	/* rte_rcu_qsbr_start orders the caller's invalidation before the token (release). */
	return rte_rcu_qsbr_start(qsbr_);
}

bool KeySpace::grace_done(uint64_t token) const noexcept
{
	return rte_rcu_qsbr_check(qsbr_, token, false) == 1;
}

unsigned KeySpace::reclaim(KeyCache *c, bool wait) noexcept
{
	std::unique_lock<std::mutex> lk(reclaim_lock_, std::defer_lock);
	if (wait)
		lk.lock();
	else if (!lk.try_lock())
		return 0;
	unsigned freed = 0;
	for (;;) {
		if (pos_ == npend_) {
			pos_ = 0;
			npend_ = rte_ring_dequeue_burst_elem(retire_, pend_, sizeof(Retired),
							     kCacheBatch, nullptr);
			if (npend_ == 0)
				break;
		}
		/* One group per retire batch (one token each) goes back whole: into the caller's
		 * cache when it fits there (its indices are the ones most recently in a cache),
		 * else into the free ring as one bulk. Batches thus keep their indices together,
		 * and two threads do not work on indices whose per-index records (the slot words
		 * here, the API's MR handles) share a cache line. */
		const uint64_t token = pend_[pos_].token;
		/* Non-blocking: the caller may itself be an online reader. */
		if (rte_rcu_qsbr_check(qsbr_, token, false) != 1)
			break;
		const uint32_t first = pos_;
		while (pos_ < npend_ && pend_[pos_].token == token)
			pos_++;
		waiting_.fetch_sub(pos_ - first, std::memory_order_relaxed);
		uint32_t indices[kCacheBatch];
		for (uint32_t i = first; i < pos_; i++)
			indices[i - first] = static_cast<uint32_t>(pend_[i].index);
		free_batch(c, indices, pos_ - first);
		freed += pos_ - first;
	}
	return freed;
}

int KeySpace::reader_register(unsigned id) noexcept
{
	/* Checked here too so that DPDK does not log about it. */
	if (id >= max_readers_ || rte_rcu_qsbr_thread_register(qsbr_, id) != 0)
		return -EINVAL;
	rte_rcu_qsbr_thread_online(qsbr_, id);
	return 0;
}

void KeySpace::reader_unregister(unsigned id) noexcept
{
	rte_rcu_qsbr_thread_offline(qsbr_, id);
	rte_rcu_qsbr_thread_unregister(qsbr_, id);
}

void KeySpace::reader_online(unsigned id) noexcept
{
	rte_rcu_qsbr_thread_online(qsbr_, id);
}

void KeySpace::reader_offline(unsigned id) noexcept
{
	rte_rcu_qsbr_thread_offline(qsbr_, id);
}

void KeySpace::reader_quiescent(unsigned id) noexcept
{
	rte_rcu_qsbr_quiescent(qsbr_, id);
}

KeyState KeySpace::state_of(uint32_t index, uint8_t *variant) const noexcept
{
	uint32_t w = slots_[index].load(std::memory_order_relaxed);
	if (variant)
		*variant = static_cast<uint8_t>(w);
	return slot_state(w);
}

uint32_t KeySpace::ring_free_count() const noexcept
{
	return rte_ring_count(free_);
}

uint32_t KeySpace::retiring_count() const noexcept
{
	return waiting_.load(std::memory_order_relaxed);
}

} // namespace nicmr::mr
