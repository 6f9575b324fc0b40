/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The objects behind the native C API's opaque handles.
 *
 *   nicmr_device ─ bus function (emu / vfio) ─ DmaSpace ─ mlx5::Device ─ mkey programmer ─ Engine
 *        │  pools (by mem::Pool*) ─ nicmr_pool ── pieces (count)
 *        │  slow_maps: mem::SlowMaps (pins, IOVA window and DMA maps of slow-path mappings)
 *        │  mr_table: one 32-byte nicmr_mr per mkey index ── pd, pool or held (slow-path
 *        │            mapping, vectored pieces, extension state), addr (the rest is in the
 *        │            key's shadow entry)
 *        └─ nicmr_pd ── users (count: windows and QPs)
 *
 * An MR's handle is its slot in mr_table, at its key's index: registration fills the slot of the
 * index the engine gave it and allocates nothing; a destroy that must say -EBUSY (pool, PD,
 * device) finds live MRs by scanning the table (slow path, O(mkey count)). Locks: objs_mu
 * guards pools (pool create/destroy, close; registrations find pools through the DmaSpace's
 * lock-free lookup, the nicmr_pool in the entry's owner); slow_maps has its own lock.
 * The bus function and the device model beneath are held through forward-declared types: only
 * api_device.cpp, which wires the objects together, includes their headers (api_wiring.h, which
 * tests that look at the device model include too).
 */
#ifndef NICMR_API_INTERNAL_H
#define NICMR_API_INTERNAL_H

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "mem_monitor.h"
#include "mem_slow.h"
#include "mem_space.h"
#include "mlx5_device.h"
#include "mlx5_klm_programmer.h"
#include "mlx5_qp.h"
#include "mlx5_srq.h"
#include "mlx5_uar.h"
#include "mr_engine.h"
#include "nicmr/nicmr.h"
#include "nicmr_align.h"
#include "nicmr_thread.h"

namespace nicmr::emu {
class EmuMlx5;
}
namespace nicmr::bus::vfio {
class Device;
}

namespace nicmr::api {

/* Defaults of the emu spec. */
inline constexpr uint32_t kEmuDefaultPorts = 2;
inline constexpr uint32_t kEmuDefaultMkeys = 65536;
inline constexpr uint32_t kMaxReaders = 64;

/* The device's enum nicmr_atomic_mode, from what bring-up read: NONE without 8-byte
 * fetch-and-add or compare-and-swap, HOST when atomic_req_8B_endianness_mode is host
 * endianness, BIG_ENDIAN otherwise. Hot path (read by every atomic post): no lock. */
inline uint32_t atomic_mode(const mlx5::Caps &c) noexcept
{
	namespace ops = mlx5::prm::atomic_ops;
	if (!c.atomic || !(c.atomic_size_qp & (1u << 3)) ||
	    !(c.atomic_operations & (ops::cmp_swap | ops::fetch_add)))
		return NICMR_ATOMIC_NONE;
	return c.atomic_host_endianness ? NICMR_ATOMIC_HOST : NICMR_ATOMIC_BIG_ENDIAN;
}
/* Devices whose mkey pool is capped below this (pool_max + 1 + the indices a default cap left
 * to the on-demand cache, so that a device of 4096 mkeys with the default cap counts) register
 * without per-thread key caches: a cache may keep up to
 * mr::kCacheSize free keys out of other threads' reach, which only a large key space can afford
 * (64 keys in 4,096 is 1.6 %), and small devices keep an exact -ENOSPC. */
inline constexpr uint32_t kMinKeysForCaches = 4096;

/*
 * A registering thread's key cache for one open device (api_cache.cpp), kept by the device at
 * the thread's slot (nicmr_thread.h: DeviceCaches). The owning thread alone uses cache and
 * writes size; a device close (when no thread uses the device) or the thread's exit, whichever
 * comes first, returns the cached keys; cache_mu() (one lock for the process: slow paths only)
 * guards the cache's creation and destruction.
 */
struct alignas(kThreadAlign) ThreadCache { /* its thread's alone: no line shared with another */
	std::optional<mr::KeyCache> cache;
	std::atomic<uint32_t> size{0};	   /* cache->size() as of the owner's last call: stats */
	std::atomic<uint32_t> retiring{0}; /* cache->retiring(), likewise */
	/* 1 while the owner is inside a DmaSpace lookup (PoolLookupMark): the pool snapshot it
	 * read may not be freed. Written by the owner only, read by wait_for_pool_lookups. */
	std::atomic<uint32_t> in_lookup{0};
	/* MRs this thread published minus those it unpublished (nicmr_mr_publish / _unpublish):
	 * negative when it deregisters MRs other threads made. Written by the owner only, with a
	 * plain load and store (no read-modify-write on the registration path); read by
	 * nicmr_device_get_stats under cache_mu(), and folded into DeviceCaches::mrs_gone when
	 * the cache is dropped. */
	std::atomic<int64_t> mrs{0};
	/* The owner marks with plain stores: writers fence it with membarrier (nicmr_thread.h). */
	bool fence_free = false;
};

/*
 * A device's key caches, one per thread slot that has registered on it; threads on the
 * shared slot register without one. The owning thread reads its slot's entry without a lock
 * (no other thread writes it while the thread lives: the entry is created by the thread, and
 * dropped by its exit or by the device's close, which no thread may race). A watcher of the
 * slots' exits (nicmr::SlotUser): an exiting thread's cache gives its keys back.
 */
struct DeviceCaches final : SlotUser {
	std::unique_ptr<ThreadCache> by_slot[kThreadSlots]; /* written under cache_mu() */
	/* The MR counts (ThreadCache::mrs) of caches dropped so far; under cache_mu(). */
	int64_t mrs_gone = 0;
	void slot_exit(size_t slot) noexcept override;
	/* Caches live now (stats and tests; takes cache_mu()). */
	size_t size() const noexcept;
	bool empty() const noexcept { return size() == 0; }
};

/* The calling thread's cache for dev, created on first use: nullptr when dev registers
 * without caches (kMinKeysForCaches) or the cache cannot be allocated (the engine then takes
 * keys straight from its global ring). Lock-free once created. */
ThreadCache *thread_cache_create(nicmr_device *dev) noexcept; /* the first use (slow path) */
inline ThreadCache *thread_cache(nicmr_device *dev) noexcept;
/* The KeyCache to hand the engine (nullptr for none). */
inline mr::KeyCache *key_cache(ThreadCache *tc) noexcept
{
	return tc ? &*tc->cache : nullptr;
}
/* After a reg or dereg through tc: refreshes the size that stats read (relaxed: a count for
 * diagnostics, ordered with nothing). */
inline void note_cache_size(ThreadCache *tc) noexcept
{
	if (tc) {
		tc->size.store(tc->cache->size(), std::memory_order_relaxed);
		tc->retiring.store(tc->cache->retiring(), std::memory_order_relaxed);
	}
}
/* Free keys held in the device's thread caches, and retired keys in their batches (stats). */
void cached_counts(nicmr_device *dev, uint64_t *free, uint64_t *retiring) noexcept;
/* Live MRs of the device: the threads' counts, those of dropped caches and the shared count
 * (nicmr_device_get_stats; O(thread slots), not O(keys)). Exact when no registration runs. */
uint64_t live_mrs(nicmr_device *dev) noexcept;
/* Device close: returns every thread's cached keys to the engine and detaches the caches. */
void close_caches(nicmr_device *dev) noexcept;

/*
 * Grace period of the device's pool lookups (api_mem.cpp reclaims retired DmaSpace snapshots
 * after it). Readers of the DmaSpace are registering threads, which are no QSBR readers, so
 * each marks its lookup in its own ThreadCache line (PoolLookupMark); the slow path's
 * lookups run under the SlowMaps' lock (SlowMaps::wait_for_lookups). Returns once every lookup that
 * may have loaded a snapshot unpublished before the call has ended. Slow path; not from inside a
 * lookup.
 */
void wait_for_pool_lookups(nicmr_device *dev) noexcept;

/*
 * Marks the calling thread as inside a DmaSpace lookup of dev for its lifetime. Registration
 * path: with a thread cache, a plain store to the thread's own line on each side (the writer's
 * membarrier orders them, nicmr_thread.h's argument), else a read-modify-write of a device
 * counter (devices without caches, or membarrier unavailable).
 */
class PoolLookupMark {
public:
	PoolLookupMark(nicmr_device *dev, ThreadCache *tc) noexcept;
	~PoolLookupMark();
	PoolLookupMark(const PoolLookupMark &) = delete;
	PoolLookupMark &operator=(const PoolLookupMark &) = delete;

private:
	nicmr_device *dev_;
	ThreadCache *tc_;
};

/*
 * The key violation record (nicmr_key_violations, api_dp.cpp): a fixed open-addressed table
 * of NICMR_MAX_KEY_VIOLATIONS entries inside the device, by rkey, with linear probing.
 * Writers are CQ pollers taking a remote-access-error completion (several threads: one per
 * CQ), readers any thread. An entry is claimed once, by a compare-and-swap of its tag from 0
 * to kTagUsed | key, and never freed; its other fields are updated with atomic operations,
 * its count last (release), so a reader that sees a count sees the fields of that refusal.
 */
struct KeyViolation {
	static constexpr uint64_t kTagUsed = uint64_t{1} << 32;
	std::atomic<uint64_t> tag{0};	    /* 0: free; else kTagUsed | key */
	std::atomic<uint64_t> access{0};    /* NICMR_ACCESS_REMOTE_* bits (fetch_or) */
	std::atomic<uint64_t> peer{0};	    /* port << 32 | qpn of the last refusal */
	std::atomic<uint32_t> local_qpn{0}; /* the QP that posted it */
	std::atomic<uint64_t> count{0};
};
struct KeyViolations {
	KeyViolation e[NICMR_MAX_KEY_VIOLATIONS];
	std::atomic<uint64_t> dropped{0};
	/* Records one refusal. Error path of nicmr_cq_poll: no lock, no allocation, at most
	 * NICMR_MAX_KEY_VIOLATIONS probes. */
	void record(uint32_t key, uint64_t access, uint32_t local_qpn, uint32_t peer_port,
		    uint32_t peer_qpn) noexcept;
};

} // namespace nicmr::api

struct nicmr_pool {
	nicmr_device *dev = nullptr;
	const nicmr::mem::PoolEntry *entry = nullptr;
	const nicmr::mem::Pool *pool = nullptr;
	/* Pieces of vectored and IOVA-list MRs in the pool; its contiguous MRs are found in the
	 * device's mr_table. */
	std::atomic<uint64_t> pieces{0};
	/* Made by nicmr_dpdk_mem_attach: nicmr_pool_destroy refuses it (-EPERM), only the
	 * attach's memory events and detach remove it (nicmr_pool_remove). Set before the pool
	 * is published, never changed. */
	bool attached = false;
};

struct nicmr_pd {
	nicmr_device *dev = nullptr;
	nicmr::mlx5::PdHandle handle;
	/* Windows and QPs on the PD; its MRs are found in the device's mr_table. */
	std::atomic<uint64_t> users{0};
};

/* One piece of a vectored, IOVA-list or page-vector MR (api_mr_vec.cpp) and what it holds. */
struct nicmr_mr_piece {
	nicmr_pool *pool = nullptr;		   /* a pool it counts as a user of */
	std::unique_ptr<nicmr::mem::SlowMap> slow; /* a slow-path mapping made for it */
	struct nicmr_mr_holdings *owner = nullptr; /* the MR whose mapping it uses (iova_users) */
	uint32_t child = 0;			   /* its MTT key in the KLM form, else 0 */
};
/* A virtual range of a vectored MR: consecutive segments that follow each other in memory,
 * at offset off of the region (nicmr_mr_addr_of). */
struct nicmr_va_run {
	uintptr_t va;
	uint64_t off;
	uint64_t len;
};
struct nicmr_mr_vec {
	std::vector<nicmr_mr_piece> pieces;
	int layout = 0; /* nicmr_mr_layout: 0 contiguous, 1 MTT over runs, 2 KLM */
	/* nicmr_mr_regv's: the region has virtual addresses (IOVA-list and page-vector MRs have
	 * none); va_runs: its virtual ranges, kept only when there is more than one. */
	bool virtual_addr = false;
	std::vector<nicmr_va_run> va_runs;
};

/*
 * An on-demand-paging MR's host state (api_odp.cpp, doc/odp.md): the IOVA range reserved for
 * its pages at registration, and one byte per 4 KiB page saying what the device has of it:
 * kOdpMapped (pinned and DMA-mapped at iova + i * 4096), kOdpRead / kOdpWrite (the MTT entry's
 * rd_en / wr_en as last written). The bytes are anonymous memory mapped at registration and
 * zero until touched, so registering costs the same for 4 KiB and for 256 MiB. mu serialises
 * advice and invalidation of the region.
 */
struct nicmr_odp {
	static constexpr uint8_t kOdpMapped = 1, kOdpRead = 2, kOdpWrite = 4;
	uintptr_t va = 0;   /* first page */
	uint64_t pages = 0; /* pages from va that cover the region */
	uint64_t iova = 0;  /* reserved for va .. va + pages * 4096 */
	uint32_t mkey = 0;
	std::mutex mu;
	/* pages bytes (nullptr until the first advice: odp_ready; iova is reserved then too); mu */
	uint8_t *state = nullptr;
	bool watched = false; /* in the device's nicmr_odp_watch::live; the watch's mu */
	uint64_t mapped = 0;  /* pages with kOdpMapped; mu */
	/* The IOMMU mappings of the mapped pages: first page -> page count (an IOMMU unmaps only
	 * whole mappings). mu */
	std::map<uint64_t, uint64_t> runs;
};

/*
 * The unmap monitor's view of a device's on-demand MRs (api_odp.cpp, doc/odp.md,
 * "Invalidation"): when memory under a live ODP MR leaves the process, the pages it had made
 * present are revoked in the device (UMR), unmapped and unpinned, on the monitor's thread.
 * Subscribed on the device's first ODP registration; mon stays null when userfaultfd is
 * refused (pages then stay present until deregistration). mu guards live and is held through
 * an invalidation, so a region leaves live only when no invalidation is inside it.
 */
struct nicmr_odp_watch final : nicmr::mem::UnmapMonitor::Subscriber {
	nicmr_device *dev = nullptr;
	std::shared_ptr<nicmr::mem::UnmapMonitor> mon;
	std::mutex mu;
	std::vector<nicmr_odp *> live;		/* mu */
	std::atomic<uint64_t> revoked_pages{0}; /* pages invalidated so far (tests) */
	void invalidate(uintptr_t start, uintptr_t end) noexcept override;
	~nicmr_odp_watch();
};

/* The mappings an MR owns outside the pools: its slow-path mapping, its vectored pieces, and
 * the IOVA-list and page-vector MRs that use them. */
struct nicmr_mr_mappings {
	std::unique_ptr<nicmr::mem::SlowMap> slow;
	std::unique_ptr<nicmr_mr_vec> vec; /* vectored, IOVA-list and page-vector MRs */
	std::unique_ptr<nicmr_odp> odp;	   /* on-demand-paging MRs */
	bool iova_leaving = false; /* being deregistered: its mappings take no new users; vec_mu */
	/* Held by a registration cache (api_mr_cache.cpp): nicmr_mr_dereg says -EBUSY; the
	 * cache clears it before it deregisters. Written under the cache's lock only. */
	bool in_cache = false;
	uint32_t iova_users = 0; /* IOVA-list / page-vector MRs using its mappings; vec_mu */
};

/* Device-model extension state (api_ext.cpp): an RMA-event MR's counter. Changed only by
 * calls on the MR, which its owner does not make concurrently. Its extension flags and whether
 * it is enabled are the key's shadow entry's (flags kEntrySingleUse / kEntryRmaEvent, state
 * live or disabled), not kept here. */
struct nicmr_mr_ext_state {
	struct nicmr_cntr *cntr = nullptr;
};

/* What an MR holds beyond its 32-byte handle and its key's shadow entry: its own mappings and
 * its extension state, in one allocation. Made only for MRs that have any of it (slow-path,
 * vectored and extension MRs), never on the pool fast path (nicmr_mr::held stays null). */
struct nicmr_mr_holdings : nicmr_mr_mappings, nicmr_mr_ext_state {};

/* A slow-path mapping as IOVA-list MRs find it. */
struct nicmr_slow_ref {
	uint64_t len = 0;
	size_t align = 4096;
	nicmr_mr_holdings *owner = nullptr;
};

/*
 * An MR: its slot in the device's mr_table, at its key's index (nicmr_mr_slot). A plain
 * 32-byte record (the table is zero-filled memory): pd is null while the slot is free. What
 * the shadow table's entry at the same index holds (key, length, access, start, base) is read
 * from there, not kept twice. The owner of the key writes the slot; table scans read pd and
 * pool only, through std::atomic_ref.
 */
struct nicmr_mr {
	nicmr_pd *pd;		 /* null: free slot */
	nicmr_pool *pool;	 /* the pool that holds it (fast path), else null */
	nicmr_mr_holdings *held; /* slow path, vectored, extensions; else null */
	uintptr_t addr;		 /* as given (sub-MR: base addr + offset; IOVA-list MRs: 0) */

	nicmr_device *dev() const noexcept { return pd->dev; }
	nicmr::mem::SlowMap *slow() const noexcept { return held ? held->slow.get() : nullptr; }
	nicmr_mr_vec *vec() const noexcept { return held ? held->vec.get() : nullptr; }
	/* NICMR_MR_SINGLE_USE / NICMR_MR_RMA_EVENT as registered (the entry's flags). */
	inline uint64_t ext() const noexcept;
	/* Not an RMA-event MR waiting for nicmr_mr_enable (the entry's state). */
	inline bool enabled() const noexcept;
	/* The key's entry (key, start in its address space, length, access, flags, base). */
	inline nicmr::mr::EntryFields entry() const noexcept;
	uint32_t mkey() const noexcept { return entry().mkey; }
	/* A sub-MR's base (or window's MR), else null. */
	inline nicmr_mr *base() const noexcept;
};
static_assert(sizeof(nicmr_mr) == 32, "two MR handles per cache line");

/* A counter the device increments (api_ext.cpp): 8 bytes of the driver's DMA arena. */
struct nicmr_cntr {
	nicmr_device *dev = nullptr;
	nicmr::mem::DmaBlock block;	/* va, iova of the 8-byte value */
	std::atomic<uint64_t> binds{0}; /* MRs bound to it: nicmr_cntr_free says -EBUSY */
};

/* A memory window (api_mw.cpp): bound while key != 0, to [start, start + len) of mr. */
struct nicmr_mw {
	nicmr_pd *pd = nullptr;
	nicmr_mr *mr = nullptr;
	uint32_t key = 0;
	uint64_t start = 0;
	size_t len = 0;
};

struct nicmr_device {
	std::string spec;
	uint64_t id = 0;
	/* Destroyed bottom-up: members in the order they were built (~nicmr_device, in
	 * api_device.cpp, where the bus and model types are complete). */
	std::unique_ptr<nicmr::emu::EmuMlx5> emu;
	std::unique_ptr<nicmr::bus::vfio::Device> vfio;
	nicmr::bus::PciFunction *fn = nullptr;
	std::unique_ptr<nicmr::mem::DmaSpace> space;
	std::unique_ptr<nicmr::mlx5::Device> drv;
	nicmr::mlx5::PdHandle free_pd;
	std::unique_ptr<nicmr::mr::MkeyProgrammer> prog;
	std::unique_ptr<nicmr::mr::Engine> engine;
	/* engine->table(), one dependent load closer to the entry for nicmr_key_lookup. */
	const nicmr::mr::ShadowTable *table = nullptr;
	/* MR handles by key index (mmap'd, zero-filled, pages populated on first use). */
	nicmr_mr *mr_table = nullptr;
	uint32_t mr_slots = 0;
	uint32_t max_translations = 0; /* per mkey with the UMR programmer; 0: no limit */

	std::shared_mutex objs_mu;
	std::unordered_map<const nicmr::mem::Pool *, nicmr_pool *> pools; /* objs_mu */
	/* DPDK memory attached (api_dpdk.cpp, nicmr_dpdk_mem_attach); set and cleared by compare
	 * and swap, one attach per device. */
	std::atomic<struct nicmr_dpdk_mem *> dpdk_mem{nullptr};

	/* Slow-path mappings: pins, IOVA window, DMA maps (lib/mem/mem_slow.h; its own lock). */
	std::unique_ptr<nicmr::mem::SlowMaps> slow_maps;

	std::atomic<uint64_t> pds{0};
	/* MRs published minus unpublished by threads without a key cache (the shared slot, or a
	 * device below kMinKeysForCaches): relaxed read-modify-writes, a count for stats. The
	 * threads with a cache count in their ThreadCache::mrs instead (api::live_mrs). */
	std::atomic<int64_t> mrs_uncached{0};
	std::atomic<uint64_t> mws{0};
	std::atomic<uint64_t> cntrs{0};

	/* Registering threads' key caches, by thread slot. */
	nicmr::api::DeviceCaches caches;
	/* Pool lookups in flight by threads without a fence-free cache (api::PoolLookupMark). */
	std::atomic<uint32_t> uncached_lookups{0};

	/* Data path (api_dp.cpp): live CQs and QPs, so that close can say -EBUSY; the QPs by
	 * number, for nicmr_qp_connect's check of the remote end. */
	std::atomic<uint64_t> dp_objs{0};
	/* Completion events (api_events.cpp): the CQs by number, so that an event's CQN finds its
	 * CQ; registered by nicmr_cq_create, removed by nicmr_cq_destroy. */
	std::mutex cq_ev_mu;
	std::unordered_map<uint32_t, nicmr_cq *> cqs_by_num; /* cq_ev_mu */
	/* Remote keys refused to this device's requests (nicmr_key_violations): 10 KiB of its
	 * own, made at open, so that the device's other fields keep their places. */
	std::unique_ptr<nicmr::api::KeyViolations> violations;
	std::mutex dp_mu;
	std::unordered_map<uint32_t, struct nicmr_qp *> dp_qps; /* dp_mu */
	/* Each port's GSI QP is taken (by port - 1): from before its creation until its destroy,
	 * so that a second one is -EBUSY before anything is made (api_ud.cpp). dp_mu. */
	bool gsi_taken[2] = {};
	/* Shared receive queues by number (api_srq.cpp), for the page-fault service. */
	std::unordered_map<uint32_t, struct nicmr_srq *> dp_srqs; /* dp_mu */

	/* Vectored registration (api_mr_vec.cpp): slow-path mappings by IOVA, so that IOVA-list
	 * and page-vector MRs can find the MR whose mapping they use; the KLM programmer. */
	std::mutex vec_mu;
	std::map<uint64_t, nicmr_slow_ref> slow_by_iova; /* mapping's IOVA -> it; vec_mu */
	std::once_flag klm_once;
	std::unique_ptr<nicmr::mlx5::KlmProgrammer> klm;
	/* On-demand MRs' unmap watch (api_odp.cpp), made on the first ODP registration. */
	std::once_flag odp_once;
	std::unique_ptr<nicmr_odp_watch> odp_watch;
	/* One thread serves page faults at a time (api_odp_fault.cpp); the others go on. */
	std::mutex pf_mu;

	~nicmr_device();
};

/* The MR table (api_mr.cpp). */
/* The slot of a key the engine gave out. */
inline nicmr_mr *nicmr_mr_slot(nicmr_device *dev, uint32_t mkey) noexcept
{
	return &dev->mr_table[nicmr::mr::mkey_index(mkey)];
}
nicmr::mr::EntryFields nicmr_mr::entry() const noexcept
{
	const nicmr_device *d = pd->dev;
	return d->table->read_owned(uint32_t(this - d->mr_table));
}
uint64_t nicmr_mr::ext() const noexcept
{
	const uint16_t f = entry().flags;
	return ((f & nicmr::mr::kEntrySingleUse) ? NICMR_MR_SINGLE_USE : 0) |
	       ((f & nicmr::mr::kEntryRmaEvent) ? NICMR_MR_RMA_EVENT : 0);
}
bool nicmr_mr::enabled() const noexcept
{
	return entry().state != nicmr::mr::EntryState::disabled;
}
nicmr_mr *nicmr_mr::base() const noexcept
{
	const nicmr::mr::EntryFields f = entry();
	return (f.flags & nicmr::mr::kEntrySub) ? &pd->dev->mr_table[f.base_index] : nullptr;
}
/* Fills the slot of mkey (registered by the calling thread) from draft and returns it: plain
 * stores, pd last; counts the MR in tc (the calling thread's cache, api::thread_cache) or, for
 * none, in the device's shared count. */
nicmr_mr *nicmr_mr_publish(nicmr_device *dev, nicmr::api::ThreadCache *tc, uint32_t mkey,
			   const nicmr_mr &draft) noexcept;
/* Empties the slot before its key goes back to the engine (after that, another thread may get
 * the index and fill the slot), and counts it out as nicmr_mr_publish counted it in. */
void nicmr_mr_unpublish(nicmr_device *dev, nicmr::api::ThreadCache *tc, nicmr_mr *slot) noexcept;
/* Live MRs of the device whose pd (when non-null) and pool (when non-null) match: a scan of
 * the table (slow path). */
uint64_t nicmr_mr_count(const nicmr_device *dev, const nicmr_pd *pd,
			const nicmr_pool *pool) noexcept;

/* Vectored registration helpers (api_mr.cpp, api_mr_vec.cpp). */
/* The pool that holds [a, a + len), with the IOVA of a and the largest translation page the
 * pool's placement allows, or null. Lock-free; counts nothing. */
nicmr_pool *nicmr_pool_of(nicmr_device *dev, nicmr::api::ThreadCache *tc, uintptr_t a, size_t len,
			  uint64_t *iova, unsigned *log_page) noexcept;
/* Makes a slow-path mapping of [a, a + len) for piece, recorded by IOVA for owner (IOVA-list
 * MRs may use it). 0; -EFAULT, -ENOMEM, -ENOSPC, IOMMU errors; nothing left on failure. */
int nicmr_slow_piece(nicmr_device *dev, uintptr_t a, size_t len, bool write,
		     nicmr_mr_holdings *owner, nicmr_mr_piece *piece, uint64_t *iova,
		     unsigned *log_page);
/* A vectored MR's piece: its pool (counted in pool->pieces) or a slow-path mapping. */
int nicmr_piece_map(nicmr_device *dev, uintptr_t a, size_t len, bool write,
		    nicmr_mr_holdings *owner, nicmr_mr_piece *piece, uint64_t *iova,
		    unsigned *log_page);
/* Gives back what nicmr_piece_map or an IOVA lookup took. */
void nicmr_piece_release(nicmr_device *dev, nicmr_mr_piece *piece);
/* NICMR_ACCESS_* to mkey bits (api_mr.cpp): 0 or -EINVAL. */
int nicmr_access_bits(uint64_t access, uint8_t *bits);
/* On-demand paging (api_odp.cpp). offered: the engine has its on-demand mkey cache, or the
 * device has on-demand paging and creates mkeys at chosen indices (nicmr_device_attr.odp). reg:
 * nicmr_mr_reg with NICMR_ACCESS_ON_DEMAND (bits: the other access bits, granted). release: after
 * the engine deregistered the key, unmaps and unpins its pages and frees its IOVA range. The
 * KLM/ODP programmer, made once. */
bool nicmr_odp_offered(const nicmr_device *dev) noexcept;
int nicmr_odp_reg(nicmr_pd *pd, uintptr_t a, size_t len, uint8_t bits, uint64_t flags,
		  uint64_t requested_key, nicmr_mr **out);
void nicmr_odp_release(nicmr_device *dev, nicmr_odp *odp);
/* The most bytes of pages an on-demand MR may cover on dev (0: none), with a requested key or
 * without. */
uint64_t nicmr_odp_max_len(const nicmr_device *dev, bool requested) noexcept;
/* The engine's dereg of an on-demand MR's key, with the hook that makes its present entries
 * not present first (a cached mkey goes back to the cache). */
int nicmr_odp_dereg(nicmr_device *dev, nicmr_odp *odp, uint32_t mkey, nicmr::mr::KeyCache *cache);
int nicmr_klm_programmer(nicmr_device *dev);
/* Page faults (api_odp_fault.cpp, doc/odp.md "Page faults"): serve resumes every fault the
 * device raised (nicmr_device_progress); serve_from_poll is nicmr_cq_poll's branch for an empty CQ
 * while a fault waits, kept out of line. */
int nicmr_odp_serve(nicmr_device *dev);
void nicmr_odp_serve_from_poll(nicmr_device *dev) noexcept;

/* Device-model extensions (api_ext.cpp). check: before registering with nicmr_mr_reg flags
 * and access: 0; -EOPNOTSUPP (the device lacks an extension a flag needs); -EINVAL (an extension
 * flag with NICMR_ACCESS_MW_BIND). apply: after the engine registered mkey with the extension
 * flags ext, gives the key its device state (single-use, disabled); the device's errors. */
int nicmr_ext_check(const nicmr_device *dev, uint64_t flags, uint64_t access);
int nicmr_ext_apply(nicmr_device *dev, uint32_t mkey, uint64_t ext);
/* Deregistration of an MR's vectored parts after its key was deregistered (api_mr_vec.cpp). */
void nicmr_vec_release(nicmr_device *dev, nicmr_mr_vec *vec);

/* Adds a pool made in lib/mem to dev (api_mem.cpp): maps it and makes its nicmr_pool, as
 * nicmr_pool_create does after making the pool. 0; DmaSpace::add_pool's errors, -ENOMEM;
 * the pool is destroyed on failure. */
int nicmr_pool_add(nicmr_device *dev, std::unique_ptr<nicmr::mem::Pool> p, nicmr_pool **out,
		   bool attached = false);
/* nicmr_pool_destroy without the attached check: 0, -EBUSY (MRs inside). */
int nicmr_pool_remove(nicmr_pool *pool);

/* Slow-path mapping of [addr, addr + len) (api_mem.cpp, through dev->slow_maps); write: the
 * device may write into it. 0; -EINVAL, -EFAULT (unmapped, or not readable / writable),
 * -ENOMEM, -ENOSPC, IOMMU errors (mem::SlowMaps::map); nothing left on failure. */
int nicmr_slow_map_create(nicmr_device *dev, uintptr_t addr, size_t len, bool write,
			  std::unique_ptr<nicmr::mem::SlowMap> *out);
void nicmr_slow_map_release(nicmr_device *dev, std::unique_ptr<nicmr::mem::SlowMap> map);

/*
 * Data path (api_dp.cpp). A CQ owns its UAR (its QPs ring through it) and routes its CQEs to
 * the QPs that report to it through a fixed table read lock-free by the poller. A QP keeps, by
 * its own post counter, what each request was: the driver carries that counter as its wr_id.
 */
struct nicmr_dp_slot {
	uint64_t wr_id = 0;
	uint32_t rkey = 0;  /* the request's rkey (key violations) */
	uint8_t opcode = 0; /* enum nicmr_wc_opcode */
};
static_assert(sizeof(nicmr_dp_slot) == 16, "the rkey fits in the slot's padding");

struct nicmr_cq {
	nicmr_device *dev = nullptr;
	std::unique_ptr<nicmr::mlx5::Uar> uar;
	std::unique_ptr<nicmr::mlx5::Cq> cq;
	/* QPs reporting here: written by QP create/destroy (slow path, never during a poll of
	 * this CQ), read by the poller. */
	std::atomic<nicmr_qp *> qps[NICMR_MAX_QPS_PER_CQ] = {};
	std::atomic<uint32_t> nqps{0};
	/* Events nicmr_get_cq_event returned and nicmr_cq_ack_events did not acknowledge yet;
	 * guarded by the device's cq_ev_mu. */
	uint32_t unacked = 0;
};

struct nicmr_qp {
	nicmr_pd *pd = nullptr;
	nicmr_cq *cq = nullptr;
	std::unique_ptr<nicmr::mlx5::Qp> qp;
	uint32_t qpn = 0;
	uint32_t port = 0;
	uint32_t remote_port = 0; /* the peer nicmr_qp_connect gave (key violations) */
	uint32_t remote_qpn = 0;
	/* The first PSN it sends when connected to a remote QP: drawn at create, reported by
	 * nicmr_qp_local, replaced by the one nicmr_qp_connect_remote is given, if any. */
	uint32_t local_psn = 0;
	bool connected = false;
	bool ud = false;		  /* nicmr_qp_create_ud (api_ud.cpp): datagrams only */
	bool gsi = false;		  /* ... its port's GSI QP (NICMR_UD_QP_GSI) */
	std::vector<nicmr_dp_slot> slots; /* by post counter & mask */
	uint32_t mask = 0;
	uint64_t posted = 0;
	/* The receive queue (nicmr_qp_create_attr): its CQ (null: none), its wr_ids by receive
	 * counter & rmask. */
	nicmr_cq *rcq = nullptr;
	std::vector<uint64_t> rslots;
	uint32_t rmask = 0;
	uint64_t rposted = 0;
	/* The shared receive queue its receives come from (api_srq.cpp), or null. */
	nicmr_srq *srq = nullptr;
};

/* A shared receive queue (api_srq.cpp): the driver's Srq keeps the wr_ids by WQE index. */
struct nicmr_srq {
	nicmr_pd *pd = nullptr;
	std::unique_ptr<nicmr::mlx5::Srq> srq;
	uint32_t depth = 0;   /* nicmr_srq_attr::depth: posted and not polled at most */
	uint32_t max_sge = 0; /* nicmr_srq_attr::max_sge (the driver's WQE may hold more) */
	/* QPs made with it (nicmr_srq_destroy's -EBUSY); changed by QP create and destroy. */
	std::atomic<uint32_t> users{0};
};

namespace nicmr::api {

/* UD QPs (api_ud.cpp): what nicmr_qp_create_ud adds to an RC QP's attributes. */
struct UdQpParams {
	uint32_t q_key = 0;
	uint32_t mtu = 0; /* mlx5::prm::qp_mtu */
	bool gsi = false; /* the port's GSI QP (the caller took the port's gsi_taken) */
};
/* nicmr_qp_create_attr's work; ud: a UD QP (null: RC). */
int qp_create(nicmr_pd *pd, const nicmr_qp_attr *attr, const UdQpParams *ud, nicmr_qp **out);
/* nicmr_cq_poll's work; ud (may be null): each completion's datagram side. Hot path. */
int cq_poll(nicmr_cq *cq, nicmr_wc *wc, nicmr_ud_info *ud, int n);
/* The datagram side of a driver completion (zeros unless a successful UD receive). Hot path. */
inline nicmr_ud_info ud_info(const nicmr::mlx5::Completion &c) noexcept
{
	nicmr_ud_info u{};
	if (c.grh && c.recv() && c.ok()) {
		u.src_qp = c.src_qpn;
		u.flags = NICMR_UD_GRH;
		u.net_type = c.l3_hdr_type; /* MLX5_CQE_L3_HDR_TYPE_*: the same values */
	}
	return u;
}

/* Registration path, per call: this thread's slot and the device's entry for it, inline (one
 * thread-local load, two dependent loads); the thread's first registration on the device
 * makes the cache (thread_cache_create). */
inline ThreadCache *thread_cache(nicmr_device *dev) noexcept
{
	const SlotClaim c = thread_claim();
	if (!c.own())
		return nullptr; /* threads on the shared slot take keys from the global ring */
	if (ThreadCache *tc = dev->caches.by_slot[c.slot()].get(); tc != nullptr) [[likely]]
		return tc;
	return thread_cache_create(dev);
}

/* Registration path: no lock, no allocation, no system call; see the class. */
inline PoolLookupMark::PoolLookupMark(nicmr_device *dev, ThreadCache *tc) noexcept
    : dev_(dev), tc_(tc != nullptr && tc->fence_free ? tc : nullptr)
{
	if (tc_ != nullptr) {
		tc_->in_lookup.store(1, std::memory_order_relaxed);
		/* The compiler keeps the store before the snapshot load that follows; the
		 * writer's membarrier does the CPU's part (nicmr_thread.h). */
		std::atomic_signal_fence(std::memory_order_seq_cst);
	} else {
		/* seq_cst: ordered against the writer's snapshot store and its scan. */
		dev_->uncached_lookups.fetch_add(1, std::memory_order_seq_cst);
		/* The snapshot load that follows is only acquire: keep it after the count. */
		std::atomic_thread_fence(std::memory_order_seq_cst);
	}
}

inline PoolLookupMark::~PoolLookupMark()
{
	/* Release: the lookup's reads of the snapshot happen before a writer that sees 0 and
	 * frees it. */
	if (tc_ != nullptr)
		tc_->in_lookup.store(0, std::memory_order_release);
	else
		dev_->uncached_lookups.fetch_sub(1, std::memory_order_release);
}

} // namespace nicmr::api

#endif
