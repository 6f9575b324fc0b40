/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The host shadow of the device's key table: what the data path consults to validate a key and
 * translate an address without asking the device.
 *
 *   table (mmap of N * 64 bytes, populated on first touch of each page)
 *   +---------+---------+---------+-----+---------+
 *   | index 0 | index 1 | index 2 | ... | index N-1|    one 64-byte cache line per mkey index
 *   +---------+---------+---------+-----+---------+
 *   entry: seq | mkey | meta(state, access, flags, pd) | start | len | iova | base | - | rw
 *
 * Concurrency: a seqlock per entry. Exactly one writer per entry at a time, because only the
 * owner of an index (the KeySpace says so) writes it; any number of lockless readers. seq is
 * even when the entry is stable. Readers never write, never retry-spin and never block: an
 * entry caught mid-rewrite answers -EAGAIN (its key is being registered or deregistered right
 * now, so it is neither stably live nor stably dead). Every field is an atomic, written with
 * release and read with acquire order: that, not fences, is what gives the seqlock its
 * meaning, and on x86 it costs nothing over plain moves.
 *
 * Invariant relied on by lookups: a deregistration invalidates the entry (state free) before it
 * returns, and the index is only reused after a QSBR grace period with the next variant of its
 * keyed cycle (mr_variant.h), which runs through all 256 values. Hence a lookup started after a
 * deregistration returned sees the invalidation, and the dead key's full 32 bits match again
 * exactly at the 256th later use of that index (each behind a grace period), never sooner,
 * unless a requested key names them.
 */
#ifndef NICMR_MR_TABLE_H
#define NICMR_MR_TABLE_H

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mr_keys.h"
#include "mr_range.h"

namespace nicmr::mr {

enum class EntryState : uint8_t { free = 0, live = 1, disabled = 2 };

/* Entry flags. */
enum EntryFlag : uint16_t {
	kEntrySingleUse = 1u << 0,  /* FI_MR_SINGLE_USE: invalidated after one operation */
	kEntryRmaEvent = 1u << 1,   /* counts remote writes in rw_count */
	kEntryPoolLookup = 1u << 2, /* iova holds a translation handle: use the pool's lookup */
	kEntrySub = 1u << 3,	    /* a sub-MR of base_index */
	kEntryZeroBased = 1u << 4,  /* start is 0: addresses are offsets (no FI_MR_VIRT_ADDR) */
	kEntrySegmented = 1u << 5,  /* iova holds a segment slot: the region's IOVA is in runs */
	kEntryIndirect = 1u << 6, /* a KLM (indirect) mkey over other keys (with kEntrySegmented) */
	kEntryWindow = 1u << 7,	  /* a memory window bound to base_index (with kEntrySub) */
	/* An on-demand-paging region (with kEntrySegmented | kEntryIndirect: its one run maps
	 * the region at its own VA; the device's translations come and go, doc/odp.md). */
	kEntryOdp = 1u << 8,
};

/*
 * Segmented translations: regions whose bytes are not at one contiguous IOVA range (vectored,
 * IOVA-list and page-vector registrations) keep their IOVA map in a segment slot, a table of
 * at most kMaxRuns runs beside the entries:
 *
 *   entry (kEntrySegmented, iova = slot number) --> slot: seq | mkey | count | runs
 *   run i: region offsets [end[i-1], end[i]) are at IOVA iova[i] onwards (end[-1] = 0)
 *
 * A slot has its own seqlock and names the key it was written for, so a lookup that reads an
 * entry, then its slot, notices a slot rewritten for another key in between. Slots are never
 * unmapped while the table lives, so a late reader reads stale bytes, never freed memory.
 */
inline constexpr uint32_t kMaxRuns = 64;
/* Slots by default (EngineConfig::segment_slots): live segmented regions at once. */
inline constexpr uint32_t kDefaultSegmentSlots = 4096;

/* One IOVA-contiguous run of a segmented region, as the writer gives it. */
struct Run {
	uint64_t end;  /* region offset one past the run's last byte */
	uint64_t iova; /* IOVA of the run's first byte */
};

class IndirectProgrammer;

struct alignas(64) SegSlot {
	std::atomic<uint32_t> seq;
	std::atomic<uint32_t> mkey;
	std::atomic<uint32_t> count;
	uint32_t reserved0;
	std::atomic<uint64_t> end[kMaxRuns];
	std::atomic<uint64_t> iova[kMaxRuns];
	/* The writer's own (lookups never read them): the keys an indirect region holds, and who
	 * programmed it. */
	uint32_t held[kMaxRuns];
	uint32_t nheld;
	IndirectProgrammer *indirect;
};

/* A plain copy of an entry's fields. */
struct EntryFields {
	uint32_t mkey = 0;
	EntryState state = EntryState::free;
	uint8_t access = 0; /* MkeyAccess bits */
	uint16_t flags = 0; /* EntryFlag bits */
	uint32_t pd = 0;    /* 24 bits */
	uint64_t start = 0; /* VA of the region, or 0 when zero-based */
	uint64_t len = 0;   /* > 0; start + len does not wrap */
	uint64_t iova = 0;  /* IOVA of start (pools sit at congruent IOVAs), or a handle */
	uint32_t base_index = 0;
};

struct alignas(64) Entry {
	std::atomic<uint32_t> seq;
	std::atomic<uint32_t> mkey;
	std::atomic<uint64_t> meta; /* state:8 | access:8 | flags:16 | pd:24 (bits 32..55) */
	std::atomic<uint64_t> start;
	std::atomic<uint64_t> len;
	std::atomic<uint64_t> iova;
	std::atomic<uint32_t> base_index;
	uint32_t reserved0;
	/* Not part of the seqlocked view (lookups never read it): */
	std::atomic<uint64_t> rw_count; /* remote writes seen (kEntryRmaEvent) */
	uint64_t reserved;
};
static_assert(sizeof(Entry) == 64, "one cache line per entry");
static_assert(std::atomic<uint64_t>::is_always_lock_free);

inline constexpr uint32_t kAnyPd = UINT32_MAX;

struct LookupRequest {
	uint32_t mkey;
	uint64_t addr;	/* in the region's address space: VA, or offset when zero-based */
	uint64_t len;	/* bytes to access, > 0 */
	uint8_t access; /* MkeyAccess bits the operation needs */
	uint32_t pd;	/* the PD of the queue pair, or kAnyPd to skip the check */
};

struct LookupResult {
	uint64_t iova;	 /* IOVA of addr; with kEntryPoolLookup: offset of addr into the region */
	uint64_t handle; /* with kEntryPoolLookup: the translation handle to give the pool */
	uint16_t flags;
};

class ShadowTable {
public:
	/* Maps N entries, all free, and segment_slots slots (at most N; 0: none). Returns 0,
	 * -EINVAL (N out of 2..2^24), -ENOMEM. */
	static int create(uint32_t index_count, std::unique_ptr<ShadowTable> *out,
			  uint32_t segment_slots = kDefaultSegmentSlots) noexcept;
	~ShadowTable();
	ShadowTable(const ShadowTable &) = delete;
	ShadowTable &operator=(const ShadowTable &) = delete;

	uint32_t index_count() const noexcept { return n_; }

	/* Writer side: only the owner of the index (live or retiring in the KeySpace). */
	void publish(uint32_t index, const EntryFields &f) noexcept;
	void invalidate(uint32_t index) noexcept;
	/* Writer only (the key's owner): a live entry's IOVA changes (a refresh), under the
	 * entry's seqlock like publish(). */
	void set_iova(uint32_t index, uint64_t iova) noexcept;
	EntryFields read_owned(uint32_t index) const noexcept;
	Entry &entry(uint32_t index) noexcept { return e_[index]; }

	/*
	 * Validates an access through a key and translates its address.
	 * HOT PATH: no lock, no atomic read-modify-write, no allocation, no syscall, no spin.
	 * Any thread. Checks in this order, each with its result:
	 *   -EINVAL       len == 0, or addr + len wraps around 2^64
	 *   -ENOKEY       index 0 or >= N, entry free, or the variant differs (stale key)
	 *   -EAGAIN       the entry is being rewritten (its key is being (de)registered now)
	 *   -EKEYREVOKED  the entry is disabled (not yet enabled, or a spent single-use key)
	 *   -EPERM        PD differs from req.pd (unless kAnyPd)
	 *   -EACCES       a needed access bit is missing
	 *   -ERANGE       [addr, addr+len) not within [start, start+len)
	 *   0             *out holds the translation
	 */
	int lookup(const LookupRequest &req, LookupResult *out) const noexcept;

	/* A consistent copy of the entry of a live or disabled key. -ENOKEY or -EAGAIN as above. */
	int snapshot(uint32_t mkey, EntryFields *out) const noexcept;

	/*
	 * Segment slots. alloc_slot: a free slot's number, or -ENOSPC (lock-free: a bit per slot,
	 * taken with compare-and-swap). publish_runs / clear_slot: by the owner of the key the
	 * slot is for, before publishing its entry and after invalidating it. free_slot: after
	 * clear_slot.
	 */
	int alloc_slot() noexcept;
	void free_slot(uint32_t slot) noexcept;
	void publish_runs(uint32_t slot, uint32_t mkey, const Run *runs, uint32_t count) noexcept;
	void clear_slot(uint32_t slot) noexcept;
	SegSlot &slot(uint32_t n) noexcept { return s_[n]; }
	uint32_t slot_count() const noexcept { return ns_; }
	/* Slots in use now (diagnostics and tests; not a snapshot under concurrent changes). */
	uint32_t slots_used() const noexcept;

private:
	ShadowTable() = default;
	/* The IOVA of region offset off of a segmented entry: hot path, as lookup. */
	int translate_runs(uint32_t slot, uint32_t mkey, uint64_t off,
			   uint64_t *iova) const noexcept;
	Entry *e_ = nullptr;
	uint32_t n_ = 0;
	size_t len_ = 0;
	SegSlot *s_ = nullptr;
	uint32_t ns_ = 0;
	size_t slen_ = 0;
	std::unique_ptr<std::atomic<uint64_t>[]> used_; /* a bit per slot */
};

namespace detail {
constexpr uint64_t pack_meta(EntryState st, uint8_t access, uint16_t flags, uint32_t pd) noexcept
{
	return uint64_t(uint8_t(st)) | uint64_t(access) << 8 | uint64_t(flags) << 16 |
	       uint64_t(pd & 0xffffff) << 32;
}
} // namespace detail

inline int ShadowTable::lookup(const LookupRequest &req, LookupResult *out) const noexcept
{
	/* Hot path: plain loads on x86 (acquire is free there), a few compares. */
	if (!range_valid(req.addr, req.len))
		return -EINVAL;
	const uint32_t index = mkey_index(req.mkey);
	if (index == 0 || index >= n_)
		return -ENOKEY;
	const Entry &e = e_[index];
	/* Acquire: the field loads below cannot move above this load, so they see at least the
	 * writes published with the version s1 (pairs with the release store ending publish). */
	const uint32_t s1 = e.seq.load(std::memory_order_acquire);
	if (s1 & 1)
		return -EAGAIN;
	/* Acquire on each field: the re-check of seq below cannot move above any of them; if one
	 * saw a newer writer's store (a release store, see publish), the re-check sees that
	 * writer's odd seq or later. (Same guarantee as relaxed loads plus an acquire fence, but
	 * ThreadSanitizer models it, and on x86 both are plain loads.) */
	const uint32_t mkey = e.mkey.load(std::memory_order_acquire);
	const uint64_t meta = e.meta.load(std::memory_order_acquire);
	const uint64_t start = e.start.load(std::memory_order_acquire);
	const uint64_t len = e.len.load(std::memory_order_acquire);
	const uint64_t iova = e.iova.load(std::memory_order_acquire);
	if (e.seq.load(std::memory_order_relaxed) != s1)
		return -EAGAIN;

	const auto state = static_cast<EntryState>(meta & 0xff);
	if (mkey != req.mkey || state == EntryState::free)
		return -ENOKEY;
	if (state != EntryState::live)
		return -EKEYREVOKED;
	if (req.pd != kAnyPd && req.pd != static_cast<uint32_t>(meta >> 32))
		return -EPERM;
	const auto access = static_cast<uint8_t>(meta >> 8);
	if (req.access & ~access)
		return -EACCES;
	if (!range_within(start, len, req.addr, req.len))
		return -ERANGE;
	const auto flags = static_cast<uint16_t>(meta >> 16);
	const uint64_t off = req.addr - start;
	if (flags & kEntryPoolLookup) {
		out->iova = off;
		out->handle = iova;
	} else if (flags & kEntrySegmented) {
		const int rc = translate_runs(static_cast<uint32_t>(iova), mkey, off, &out->iova);
		if (rc)
			return rc;
		out->handle = 0;
	} else {
		out->iova = iova + off;
		out->handle = 0;
	}
	out->flags = flags;
	return 0;
}

inline int ShadowTable::translate_runs(uint32_t slot, uint32_t mkey, uint64_t off,
				       uint64_t *iova) const noexcept
{
	/* Hot path, as lookup: a seqlock read of the slot and a binary search over its runs; no
	 * lock, no read-modify-write, no allocation, no spin. */
	if (slot >= ns_)
		return -ENOKEY;
	const SegSlot &s = s_[slot];
	/* Acquire: the loads below see at least what was published with t1 (pairs with the
	 * release store ending publish_runs). */
	const uint32_t t1 = s.seq.load(std::memory_order_acquire);
	if (t1 & 1)
		return -EAGAIN;
	const uint32_t owner = s.mkey.load(std::memory_order_acquire);
	uint32_t n = s.count.load(std::memory_order_acquire);
	if (n > kMaxRuns)
		n = kMaxRuns; /* torn by a rewrite: the seq re-check below discards the result */
	/* First run whose end is above off (the entry's range check put off below the last end). */
	uint32_t lo = 0, hi = n;
	while (lo < hi) {
		const uint32_t mid = (lo + hi) / 2;
		if (s.end[mid].load(std::memory_order_acquire) > off)
			hi = mid;
		else
			lo = mid + 1;
	}
	const uint64_t from = lo == 0 ? 0 : s.end[lo - 1].load(std::memory_order_acquire);
	const uint64_t base = lo < n ? s.iova[lo].load(std::memory_order_acquire) : 0;
	/* Acquire on every load above keeps them before this re-check, as in lookup. */
	if (s.seq.load(std::memory_order_relaxed) != t1)
		return -EAGAIN;
	/* Rewritten for another key since the entry was read: this key was deregistered. */
	if (owner != mkey || lo >= n)
		return -ENOKEY;
	*iova = base + (off - from);
	return 0;
}

} // namespace nicmr::mr

#endif
