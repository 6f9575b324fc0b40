/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * nicmr's native C API.
 *
 * Conventions of every call: it returns 0 (or a non-negative count) on success and a negative
 * errno on failure; it never aborts or exits the process. Which threads may call a function is
 * said in its documentation. A failed call leaves nothing behind: no object, no mkey, no DMA
 * mapping, no pinned page.
 *
 * Objects and their lifetimes (doc/native-api.md has the pictures):
 *
 *   nicmr_device ── nicmr_pool (memory mapped for the device's DMA)
 *                └─ nicmr_pd ── nicmr_mr (a registered region; its key) ── sub-MRs
 *
 * An object cannot be destroyed while objects below it live (-EBUSY).
 */
#ifndef NICMR_NICMR_H
#define NICMR_NICMR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The library's version, "major.minor.patch". Any thread. */
const char *nicmr_version(void);

/* ---- Logging ------------------------------------------------------------------------------ */

/** The levels of nicmr's log lines, most severe first (NICMR_LOG_LEVEL's names). */
enum nicmr_log_level {
	NICMR_LOG_ERROR = 0,
	NICMR_LOG_WARN = 1,
	NICMR_LOG_INFO = 2,
	NICMR_LOG_DEBUG = 3,
};

/**
 * Receives one log line: its level, nicmr's component that wrote it ("api", "mem", "mlx5",
 * "vfio", ...), the function and source line, and the message (no newline). It is called on
 * the thread that logs, with nicmr's log lock held shared: it must not call nicmr_log_set().
 */
typedef void (*nicmr_log_fn)(void *ctx, enum nicmr_log_level level, const char *component,
			     const char *func, int line, const char *msg);

/**
 * Sends nicmr's log lines of `level` and more severe to `fn` (with `ctx`), or, with fn NULL,
 * to stderr as "nicmr <level> <component>: <message>". Until it is called the level comes
 * from NICMR_LOG_LEVEL (default NICMR_LOG_WARN) and lines go to stderr. Any thread: lines on
 * their way to the old handler are delivered before it returns, and none after.
 * Returns 0, or -EINVAL for a level outside enum nicmr_log_level (nothing changed).
 */
int nicmr_log_set(enum nicmr_log_level level, nicmr_log_fn fn, void *ctx);

/** The current level, handler (NULL: stderr) and its ctx; each pointer may be NULL. Returns 0. */
int nicmr_log_get(enum nicmr_log_level *level, nicmr_log_fn *fn, void **ctx);

/* ---- Devices ------------------------------------------------------------------------------ */

/** An opened device: a NIC (or the emulated one), its IOMMU space and its key space. */
struct nicmr_device;

/**
 * nicmr_device_attr.atomic_mode: the byte order the device's 8-byte atomics work in, which
 * says whether nicmr_post_atomic_fadd / _cswap are offered.
 */
enum nicmr_atomic_mode {
	/** The device does no 64-bit fetch-and-add and compare-and-swap: atomics -EOPNOTSUPP. */
	NICMR_ATOMIC_NONE = 0,
	/** Host byte order (ConnectX's atomic_req_8B_endianness_mode 1, which nicmr sets at
	 * bring-up whenever the device offers it): the target word and the fetched value are
	 * uint64_t in the host's byte order, as fi_atomic(3) and ibv_post_send(3) define them. */
	NICMR_ATOMIC_HOST = 1,
	/** The device works on big-endian words only (a ConnectX that does not offer host
	 * endianness; emu option atomic_endian=big): a fetch-and-add cannot be given host-order
	 * semantics by converting operands, so atomics are refused with -EOPNOTSUPP, as Linux's
	 * mlx5_ib reports IB_ATOMIC_NONE for such a device. */
	NICMR_ATOMIC_BIG_ENDIAN = 2,
};

/** What a device offers (nicmr_device_query). */
struct nicmr_device_attr {
	uint64_t device_id;   /**< this open's id, carried in raw keys; never 0 */
	uint32_t mkey_count;  /**< mkey indices 1 .. mkey_count - 1 may be registered */
	uint32_t max_readers; /**< data-path thread ids 0 .. max_readers - 1 */
	uint32_t max_pd;      /**< PD numbers below this */
	uint32_t extensions;  /**< 1: the device offers nicmr's device-model extensions */
	uint64_t ext_flags;   /**< which extensions: NICMR_EXT_* bits (0 on ConnectX) */
	uint16_t fw_major, fw_minor, fw_subminor;
	char name[64];	      /**< the spec it was opened with, truncated */
	uint32_t atomic_mode; /**< enum nicmr_atomic_mode */
	/** The most mkeys the device creates for registrations (the pool's cap: the emu spec's
	 *  mkey_max, else mkey_count - 1 less the indices the on-demand mkey cache keeps, 176
	 *  by default, at most half: doc/odp.md, "Indices"); more live MRs than this give
	 *  -ENOSPC. */
	uint32_t mkey_pool_max;
	/** 1: NICMR_MR_REQUESTED_KEY is offered (the device creates mkeys at chosen indices:
	 *  ConnectX's mkey_by_name, off on a stock card; emu spec option mkey_by_name=1);
	 *  0: only keys the device chose, requested keys are -EOPNOTSUPP. */
	uint32_t requested_keys;
	/** 1: on-demand-paging MRs (NICMR_ACCESS_ON_DEMAND) and nicmr_advise_mr are offered: the
	 *  device pages on demand (cmd_hca_cap.pg; emu spec option odp=0 turns it off) and the
	 *  engine keeps its on-demand mkey cache (emu odp_cache=0 turns it off) or the device
	 *  creates mkeys at chosen indices (requested_keys); 0: both say -EOPNOTSUPP. */
	uint32_t odp;
};

/** Live objects and resources of a device (nicmr_device_get_stats): diagnostics and tests. */
struct nicmr_device_stats {
	uint64_t mrs;		/**< registered MRs (sub-MRs included) */
	uint64_t pools;		/**< pools created or imported */
	uint64_t pds;		/**< PDs allocated by the application */
	uint64_t slow_mappings; /**< DMA mappings made for MRs outside every pool */
	uint64_t pinned_pages;	/**< 4 KiB pages locked for slow-path MRs */
	uint64_t keys_free;	/**< mkey indices free to take now */
	uint64_t keys_retiring; /**< mkey indices waiting for a grace period */
	int64_t dev_mkeys;	/**< mkeys that exist on the device (emu only; else -1) */
	int64_t iommu_mappings; /**< mappings in the IOMMU (emu only; else -1) */
	uint64_t mws;		/**< memory windows allocated (bound or not) */
	uint64_t cntrs;		/**< counters allocated (nicmr_cntr_alloc) */
	uint64_t mkey_pool;	/**< mkeys created on the device for registrations so far */
};

/**
 * Opens a device by spec string:
 *   - "emu" or "emu:ports=2,mkeys=65536,delivery=inline" — an emulated ConnectX.
 *     ports: 1 or 2 (default 2); mkeys: a power of two, 2 .. 2^24 (default 65536);
 *     delivery: "inline" (doorbells run on the writer's thread; default) or "thread" (a
 *     device thread polls doorbells); programmer: "umr" (UMR work requests; default) or
 *     "cmd" (firmware commands, slower; doc/native-api.md); atomic_endian: "host" (the
 *     device offers host-endian atomics and bring-up turns them on; default) or "big" (it works
 *     on big-endian words only: nicmr_device_attr.atomic_mode NICMR_ATOMIC_BIG_ENDIAN);
 *     mkey_by_name: 0 (default: the device chooses every mkey index, as a stock ConnectX) or
 *     1 (it creates mkeys at chosen indices: requested keys, programmer=cmd, which needs it);
 *     mkey_pool: mkeys created at open (default 1024); mkey_max: the pool's cap, 1 ..
 *     mkeys - 1 (default mkeys - 1 less the on-demand mkey cache's reserve, doc/odp.md);
 *     iova_bits: the emulated IOMMU's IOVA width, 32 .. 48 (default 48); fail_umr=N: the
 *     Nth UMR fails (fault injection for tests; doc/native-api.md).
 *   - "vfio:<PCI address>" — a ConnectX bound to vfio-pci, e.g. "vfio:0000:03:00.0".
 *   - "devx:<ib device>" — a ConnectX owned by the kernel, e.g. "devx:mlx5_0".
 * Slow path; any thread.
 *
 * @param spec device spec (above)
 * @param[out] out the device
 * @return 0;
 *   -EINVAL  null argument, unknown kind, unknown option or bad option value (logged);
 *   -ENOENT, -EACCES, -ENODEV, -EBUSY, -EPERM, -ENXIO, -ENOTSUP  (vfio) the VFIO bus's error,
 *            logged with what to do about it;
 *   -ENODEV  (devx) no such RDMA device; -EOPNOTSUPP (devx) registration over DEVX is not
 *            available in this version, or the build has no rdma-core;
 *   -ENOMEM, and the driver's bring-up errors (-ETIMEDOUT, -EPROTONOSUPPORT, -EIO ...).
 */
int nicmr_device_open(const char *spec, struct nicmr_device **out);

/**
 * Closes a device: tears the NIC down and frees everything. Slow path; any thread, once no
 * other thread uses the device.
 * @return 0; -EINVAL (null); -EBUSY (MRs, PDs, pools, CQs or QPs still live: the device stays
 *   open).
 */
int nicmr_device_close(struct nicmr_device *dev);

/**
 * Reads the device's attributes. Any thread.
 * @return 0; -EINVAL (null argument).
 */
int nicmr_device_query(const struct nicmr_device *dev, struct nicmr_device_attr *attr);

/** The device id carried in raw keys (0 for a null device). Any thread. */
uint64_t nicmr_device_id(const struct nicmr_device *dev);

/**
 * Reads the device's counters (a consistent snapshot only when no other thread changes it).
 * Costs O(1) in the number of keys and MRs: the MR count is kept as MRs are registered and
 * deregistered (per registering thread, summed over the process's thread slots), nothing walks
 * the key table. It takes the library's slow-path locks briefly (pools, slow-path mappings,
 * thread caches): call it from a management thread, not from a poll loop. Any thread.
 * @return 0; -EINVAL (null argument).
 */
int nicmr_device_get_stats(struct nicmr_device *dev, struct nicmr_device_stats *stats);

/* ---- Pools -------------------------------------------------------------------------------- */

/** Memory mapped once for the device's DMA; regions inside it register on the fast path. */
struct nicmr_pool;

#define NICMR_PAGE_4K ((size_t)1 << 12)
#define NICMR_PAGE_2M ((size_t)1 << 21)
#define NICMR_PAGE_1G ((size_t)1 << 30)
/** numa_node value: no preference. */
#define NICMR_NUMA_ANY (-1)

struct nicmr_pool_params {
	size_t size;	    /**< bytes, > 0; rounded up to page_size */
	size_t page_size;   /**< NICMR_PAGE_4K, _2M (default) or _1G */
	int numa_node;	    /**< NICMR_NUMA_ANY (default) or a node */
	int allow_fallback; /**< nonzero: 4 KiB pages when no hugepage is free (default 0) */
	const char *name;   /**< for log lines and /proc/self/maps; NULL: "pool" */
};

/** Fills params with the defaults above (size 0: the caller sets it). Any thread. */
void nicmr_pool_params_init(struct nicmr_pool_params *params);

/**
 * Creates a pool of hugepages (or 4 KiB pages) and maps it for the device's DMA at an IOVA
 * congruent with its address. Slow path; any thread.
 * @return 0; -EINVAL (null argument, size 0, unknown page size, NUMA node out of range);
 *   -ENOMEM (not enough free hugepages and no fallback: the log line says how many to reserve
 *   and in which file, or, for a size the kernel does not offer, which page size to use);
 *   -EPERM (the pages could not be locked: RLIMIT_MEMLOCK; the log line gives the limit and
 *   how to raise it; no fallback); -ENOSPC (IOVA space exhausted); the IOMMU's errors
 *   (-ENOSPC mapping limit).
 */
int nicmr_pool_create(struct nicmr_device *dev, const struct nicmr_pool_params *params,
		      struct nicmr_pool **out);

/**
 * Imports memory the application owns (e.g. hugepages it mapped itself) as a pool: mapped for
 * DMA, never freed by nicmr. The memory must stay mapped until nicmr_pool_destroy. Slow path;
 * any thread.
 * @param addr start, a multiple of page_size
 * @param len length, a nonzero multiple of page_size
 * @param page_size NICMR_PAGE_4K, _2M or _1G: the pages backing the memory
 * @return 0; -EINVAL (null argument, len 0, unknown page size, misaligned addr or len);
 *   -EEXIST (overlaps another pool of the device); -ENOSPC; the IOMMU's errors.
 */
int nicmr_pool_import(struct nicmr_device *dev, void *addr, size_t len, size_t page_size,
		      struct nicmr_pool **out);

/**
 * Unmaps and frees a pool (imported memory is unmapped from the device, not freed).
 * Slow path (it scans the device's MR table: O(mkey count), about 0.4 ms per million keys); any
 * thread, not concurrently with a registration inside the pool (registrations take no lock and
 * do not count themselves in). @return 0; -EINVAL (null); -EBUSY (MRs inside it live);
 * -EPERM (a pool of DPDK memory made by nicmr_dpdk_mem_attach: it follows DPDK's memory
 * events, and nicmr_dpdk_mem_detach removes it).
 */
int nicmr_pool_destroy(struct nicmr_pool *pool);

/** The pool's start address (NULL for a null pool). Any thread. */
void *nicmr_pool_addr(const struct nicmr_pool *pool);
/** The pool's length in bytes (0 for a null pool). Any thread. */
size_t nicmr_pool_len(const struct nicmr_pool *pool);
/**
 * The size of the pages backing the pool: the size it was created or imported with, or 4 KiB
 * when its creation fell back to small pages (nicmr_pool_params.allow_fallback). 0 for a null
 * pool. Any thread.
 */
size_t nicmr_pool_page_size(const struct nicmr_pool *pool);
/**
 * The pool of dev that holds all of [addr, addr + len), or NULL (null dev, len 0, a range that
 * wraps, or no pool holds it: slow-path memory). The registration path's lock-free lookup: no
 * lock, no allocation, no system call. Any thread, not concurrently with the destruction of
 * the pool it finds.
 */
struct nicmr_pool *nicmr_pool_find(struct nicmr_device *dev, const void *addr, size_t len);

/* ---- Protection domains ------------------------------------------------------------------- */

/** A protection domain: MRs and queue pairs of one PD only reach each other. */
struct nicmr_pd;

/**
 * Allocates a PD (ALLOC_PD). Slow path; any thread.
 * @return 0; -EINVAL (null argument); -ENOMEM (no memory, or the device's PD table is full: its
 *   EXCEED_LIM status, as Linux's mlx5 maps it); the device's errors.
 */
int nicmr_pd_alloc(struct nicmr_device *dev, struct nicmr_pd **out);
/**
 * Frees a PD (DEALLOC_PD). Slow path (it scans the device's MR table, as nicmr_pool_destroy);
 * any thread, not concurrently with a registration on the PD.
 * @return 0; -EINVAL (null); -EBUSY (MRs, memory windows or QPs of it live).
 */
int nicmr_pd_free(struct nicmr_pd *pd);
/** The PD number (24 bits; 0 for a null PD). Any thread. */
uint32_t nicmr_pd_num(const struct nicmr_pd *pd);

/* ---- Memory regions ----------------------------------------------------------------------- */

/** A registered region and its key. */
struct nicmr_mr;

/*
 * Access bits, nicmr's own numbers. Two vocabularies:
 *  fi_mr(3):      SEND, RECV, READ, WRITE, REMOTE_READ, REMOTE_WRITE
 *  ibv_reg_mr(3): LOCAL_WRITE, REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC, MW_BIND
 * A set that holds LOCAL_WRITE, REMOTE_ATOMIC or MW_BIND follows ibv_reg_mr's rules (local
 * read always; REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE, else -EINVAL); any other set
 * follows fi_mr's (REMOTE_WRITE grants remote write and atomics; 0 grants nothing).
 */
#define NICMR_ACCESS_SEND	   (1ull << 0)
#define NICMR_ACCESS_RECV	   (1ull << 1)
#define NICMR_ACCESS_READ	   (1ull << 2)
#define NICMR_ACCESS_WRITE	   (1ull << 3)
#define NICMR_ACCESS_REMOTE_READ   (1ull << 4)
#define NICMR_ACCESS_REMOTE_WRITE  (1ull << 5)
#define NICMR_ACCESS_LOCAL_WRITE   (1ull << 6)
#define NICMR_ACCESS_REMOTE_ATOMIC (1ull << 7)
#define NICMR_ACCESS_MW_BIND	   (1ull << 8)
/** ibv_reg_mr(3)'s IBV_ACCESS_ON_DEMAND: an on-demand-paging MR (doc/odp.md): nothing is
 *  pinned or mapped at registration, pages become present to the device by nicmr_advise_mr. */
#define NICMR_ACCESS_ON_DEMAND (1ull << 9)

/** nicmr_mr_reg flag: take requested_key as the key (else the device picks one). */
#define NICMR_MR_REQUESTED_KEY (1ull << 0)
/** nicmr_mr_reg flag: remote accesses give offsets from 0, not virtual addresses. */
#define NICMR_MR_ZERO_BASED (1ull << 1)

/**
 * Registers [addr, addr + len) in pd. Memory inside a pool takes the fast path (no mapping,
 * the largest page size the pool's placement allows). Memory outside every pool takes the slow
 * path: the pages must be mapped (else -EFAULT); they are locked, and DMA-mapped for this MR
 * alone at an IOVA congruent with addr; dereg unmaps and unlocks them. Slow path; any thread.
 *
 * @param access NICMR_ACCESS_* bits
 * @param flags NICMR_MR_* bits
 * @param requested_key the key wanted, with NICMR_MR_REQUESTED_KEY (else ignored)
 * @param[out] out the MR
 * @return 0;
 *   -EINVAL        null argument, len 0, addr + len wraps, unknown access bit or ibv rule
 *                  broken, NICMR_MR_ZERO_BASED with addr not 4 KiB-aligned;
 *   -EOPNOTSUPP    unknown flag, or NICMR_MR_REQUESTED_KEY on a device without requested
 *                  keys (nicmr_device_attr.requested_keys 0: the device chooses every index);
 *   -EFAULT        (slow path) part of the range is not mapped, or not readable, or not
 *                  writable while access lets the device write;
 *   -EEXIST        requested key live;      -EKEYREJECTED  requested key outside the key space;
 *   -EAGAIN        requested key waits for its grace period (readers must report quiescence);
 *   -ENOSPC        no free key and the mkey pool at its cap (mkey_pool_max), or no IOVA
 *                  space for a slow-path mapping;
 *   -E2BIG         more translations than a pre-created mkey holds (UMR programmer);
 *   -ENOMEM, and the device's or IOMMU's errors.
 * With NICMR_ACCESS_ON_DEMAND (doc/odp.md) the range need not be mapped yet and nothing is
 * pinned, mapped or faulted in: a cached on-demand mkey bound with one UMR; flags may hold
 * NICMR_MR_REQUESTED_KEY only. Also:
 *   -EOPNOTSUPP    the device lacks on-demand paging (nicmr_device_attr.odp 0), another flag,
 *                  or a requested key on a device without mkeys at chosen indices;
 *   -EINVAL        more than NICMR_ODP_MAX_LEN bytes of pages (or than the device holds);
 *   -ENOSPC        no segment slot (NICMR_MAX_SEGMENTED_MRS), or the on-demand mkey cache's
 *                  bucket made its most and none is free (doc/odp.md);
 *   -ENOMEM        the device refused more on-demand mkeys (its translation memory).
 */
int nicmr_mr_reg(struct nicmr_pd *pd, void *addr, size_t len, uint64_t access, uint64_t flags,
		 uint64_t requested_key, struct nicmr_mr **out);

/**
 * Registers a sub-MR: [base's start + offset, + len) of base, its own key, access no more than
 * base's, base's PD and translations. base cannot be deregistered while it lives. Slow path;
 * any thread.
 * @param flags NICMR_MR_REQUESTED_KEY only (a sub-MR is zero-based when base is)
 * @return 0; -EINVAL (null, len 0, wrap, access); -EOPNOTSUPP (flag); -EACCES (access beyond
 *   base's); -ERANGE (not inside base); -EOVERFLOW (too many sub-MRs on base); and the key
 *   errors of nicmr_mr_reg.
 */
int nicmr_mr_reg_sub(struct nicmr_mr *base, size_t offset, size_t len, uint64_t access,
		     uint64_t flags, uint64_t requested_key, struct nicmr_mr **out);

/**
 * Deregisters: when it returns 0 no lookup accepts the key and the device refuses it; mr is
 * freed. Slow path; any thread (not concurrently with other uses of mr).
 * @return 0; -EINVAL (null); -EBUSY (sub-MRs of it live; mr stays registered); the device's
 *   revoke error (mr stays registered).
 */
int nicmr_mr_dereg(struct nicmr_mr *mr);

/** The key (mkey = lkey = rkey, 32 bits); 0 for a null MR. Any thread. */
uint32_t nicmr_mr_key(const struct nicmr_mr *mr);
/**
 * A key's index: keys are mkeys, index << 8 | variant (the variant changes at every reuse of
 * the index), so no two live keys of a device share an index, which is below the device's
 * mkey count. Tables of per-MR state may be indexed by it.
 */
#define NICMR_KEY_INDEX(key) ((uint32_t)(key) >> 8)
/** The registered address (for a sub-MR: base's address + offset); NULL for a null MR. Any
 * thread. */
void *nicmr_mr_addr(const struct nicmr_mr *mr);
/** The registered length in bytes; 0 for a null MR. Any thread. */
size_t nicmr_mr_len(const struct nicmr_mr *mr);
/**
 * 1: the MR's memory lies in pools (nothing was pinned for it); 0: some of it took the slow path
 * (pinned and mapped for the MR, or, for an IOVA-list or page-vector MR, in another MR's slow
 * mapping). A sub-MR answers as its base; a vectored MR is 1 when every segment is in a pool.
 * -EINVAL: null. Any thread.
 */
int nicmr_mr_in_pool(const struct nicmr_mr *mr);

/* ---- On-demand paging: advice ------------------------------------------------------------ */

/** Bytes of pages an on-demand MR may cover at most: 1 GiB, the largest bucket of the
 *  on-demand mkey cache (2^18 MTT entries of 4 KiB; UMRs reach them with the extended
 *  translation offset). A device may allow less: 2^log_max_klm_list_size pages (2^18 on the
 *  emulated one), and 2^17 - 2 pages without umr_extended_translation_offset (doc/odp.md). */
#define NICMR_ODP_MAX_LEN ((size_t)1 << 30)

/** A scatter/gather element, as ibv_sge: [addr, addr + length) in the address space of the MR
 * whose lkey it names (nicmr_advise_mr, nicmr_post_recv). */
struct nicmr_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/** nicmr_advise_mr advice, with ibv_advise_mr(3)'s values. */
enum nicmr_advise_mr_advice {
	/** Make the pages present to the device for reading (faulting them in). */
	NICMR_ADVISE_MR_ADVICE_PREFETCH = 0,
	/** For reading and writing (the MR must be writable: NICMR_ACCESS_LOCAL_WRITE). */
	NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE = 1,
	/** Only pages already present in the CPU become present to the device (for reading);
	 *  nothing is faulted in. */
	NICMR_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT = 2,
};
/** nicmr_advise_mr flag: synchronous (nicmr always is; doc/odp.md). */
#define NICMR_ADVISE_MR_FLAG_FLUSH (1u << 0)

/**
 * ibv_advise_mr(3) for on-demand MRs: makes the pages of every element present to the device:
 * faults them in (MADV_POPULATE_READ / _WRITE, doc/odp.md for older kernels), pins them,
 * maps them for DMA and writes their translations with a UMR before it returns. Elements are
 * all checked before any page is touched. Slow path; any thread; an MR it names cannot be
 * deregistered meanwhile (-EBUSY).
 * @param pd the PD every lkey must belong to
 * @param advice enum nicmr_advise_mr_advice
 * @param flags 0 or NICMR_ADVISE_MR_FLAG_FLUSH
 * @param sg_list, num_sge the elements (num_sge > 0); an element of length 0 does nothing
 * @return 0;
 *   -EOPNOTSUPP  the device lacks on-demand paging (nicmr_device_attr.odp 0), or unknown advice;
 *   -EINVAL      null pd or sg_list, num_sge 0, unknown flag, an lkey that is a memory window;
 *   -EFAULT      an lkey that is no live key; a range outside its MR; (PREFETCH, _WRITE) part
 *                of the range not mapped in the process, or not readable, or not writable
 *                for PREFETCH_WRITE; (NO_FAULT) part of the range not mapped;
 *   -EPERM       an lkey of another PD; PREFETCH_WRITE on an MR without local write;
 *   -ENOENT      an lkey of an MR that is not on-demand;
 *   -ENOMEM      pages could not be pinned (RLIMIT_MEMLOCK) or mapped for DMA, or no memory;
 *   -ENOSPC      (a region's first advice) no IOVA space for the region's pages;
 *   -EIO         the device refused the translations.
 */
int nicmr_advise_mr(struct nicmr_pd *pd, uint32_t advice, uint32_t flags,
		    const struct nicmr_sge *sg_list, uint32_t num_sge);

/**
 * Serves the device's outstanding page faults (doc/odp.md, "Page faults"): an RDMA access or a
 * local SGE that touched a page of an on-demand MR that is not present waits in the device
 * until the driver makes the page present (as nicmr_advise_mr does) and resumes it; a fault on
 * memory the process does not map (or cannot be made present) is resumed with an error and
 * the access completes in error. nicmr_cq_poll does the same when it finds its CQ empty and a
 * fault waits; call this from the poll loop of a process that polls no CQ (a passive target
 * of RDMA WRITE and READ). Slow path when a fault waits (locks, system calls, a UMR and a
 * command per fault); one thread serves at a time, others return 0 meanwhile.
 * On the emulated device's UDP wire it first runs the device's receive work on the calling
 * thread (received packets executed and answered, the transport's timers), as nicmr_cq_poll
 * does when it finds its CQ drained (doc/native-api.md, "Progress"): a passive target's
 * loop that polls memory calls it so that the RDMA WRITEs it waits for land without a
 * hand-off to the device's thread. Nothing on hardware.
 * @return the number of faults resumed (0: none waited);
 *   -EINVAL      null dev;
 *   the error of a PAGE_FAULT_RESUME the device refused (logged; the others still run).
 */
int nicmr_device_progress(struct nicmr_device *dev);

/* ---- Raw keys ----------------------------------------------------------------------------- */

/** Size of a raw key blob (format: doc/registration.md). */
#define NICMR_RAW_KEY_SIZE 64

/**
 * Writes mr's raw key into buf. Any thread.
 * @param[in,out] size in: buf's size; out: the size needed (NICMR_RAW_KEY_SIZE)
 * @return 0; -EINVAL (null mr or size, null buf with *size > 0); -ENOSPC (buf too small,
 *   *size says what is needed, nothing written).
 */
int nicmr_mr_raw_attr(const struct nicmr_mr *mr, void *buf, size_t *size);

/**
 * Checks a raw key and gives the key it names. Allocates nothing. Any thread.
 * @return 0; -EINVAL (null argument or malformed blob); -EXDEV (a key of another device).
 */
int nicmr_mr_map_raw(struct nicmr_device *dev, const void *buf, size_t size, uint64_t *key);

/** Releases what nicmr_mr_map_raw gave (nothing to free). @return 0; -EINVAL (null dev). */
int nicmr_mr_unmap_key(struct nicmr_device *dev, uint64_t key);

/* ---- Data path ---------------------------------------------------------------------------- */

/**
 * Checks that key grants access to [addr, addr + len) and translates addr to its IOVA.
 * HOT PATH: lockless, no allocation, no system call. Any thread; a thread that keeps using
 * the result across calls must be a registered reader (nicmr_thread_register) and report
 * quiescent states between uses.
 * @param addr in the key's address space: VA, or offset when zero-based
 * @param access NICMR_ACCESS_* bits the operation needs (SEND, WRITE: local read; RECV, READ,
 *   LOCAL_WRITE: local write; REMOTE_*: the remote right)
 * @return 0; -EINVAL (len 0, wrap, unknown access bit, null); -ENOKEY (not a live key, stale
 *   variant); -EAGAIN (being (de)registered now); -EKEYREVOKED; -EACCES (right missing);
 *   -ERANGE (outside the region).
 */
int nicmr_key_lookup(const struct nicmr_device *dev, uint32_t key, uint64_t addr, size_t len,
		     uint64_t access, uint64_t *iova);

/**
 * Registers the calling thread as data-path reader id (0 .. max_readers - 1) and puts it
 * online. From then on it must call nicmr_thread_quiescent(id) from its poll loop, outside any
 * use of a lookup's result, and unregister before it blocks or exits: deregistrations wait for
 * every online reader's next quiescent state before a key index is reused.
 * @return 0; -EINVAL (null dev, id out of range).
 */
int nicmr_thread_register(struct nicmr_device *dev, unsigned id);
/**
 * Reports a quiescent state: the thread holds no lookup result now. HOT PATH: one store.
 * Only the thread registered as id; ignored for a null dev or an id out of range.
 */
void nicmr_thread_quiescent(struct nicmr_device *dev, unsigned id);
/**
 * Takes reader id offline and unregisters it: deregistrations stop waiting for it. Only the
 * thread registered as id; ignored for a null dev or an id out of range.
 */
void nicmr_thread_unregister(struct nicmr_device *dev, unsigned id);

/* ---- Data path: completion queues, queue pairs, RDMA ------------------------------------- */

/*
 * RC queue pairs with a send queue only, between the device's ports over its loopback wire
 * (the device model joins port 1 and port 2; a QP may also connect to another QP of the same
 * port, or to itself), or to a QP of another device over a port's RoCEv2 wire
 * (nicmr_qp_connect_remote). The requester's work runs against the responder QP's PD and keys, so
 * the responder QP must be in the PD of the memory it exposes. Threads: a CQ and every QP that
 * reports to it are used by one thread at a time (posting, polling, recovery); create and
 * destroy are slow paths that must not run concurrently with polls of the same CQ.
 * doc/native-api.md ("Data path") has the picture and the recovery rules.
 */

/** A completion queue (poll mode: no interrupts, no events). */
struct nicmr_cq;
/** A queue pair: RC (nicmr_qp_create, nicmr_qp_create_attr) or UD (nicmr_qp_create_ud). */
struct nicmr_qp;

/** Completion status (struct nicmr_wc::status), one per CQE syndrome nicmr knows. */
enum nicmr_wc_status {
	NICMR_WC_SUCCESS = 0,
	NICMR_WC_LOCAL_LEN = 1,	       /**< syndrome 0x01 */
	NICMR_WC_LOCAL_QP_OP = 2,      /**< 0x02 */
	NICMR_WC_LOCAL_PROT = 3,       /**< 0x04: bad lkey, PD or bounds of a local SGE */
	NICMR_WC_WR_FLUSH = 4,	       /**< 0x05: posted after the QP went to ERR */
	NICMR_WC_MW_BIND = 5,	       /**< 0x06 */
	NICMR_WC_BAD_RESP = 6,	       /**< 0x10 */
	NICMR_WC_LOCAL_ACCESS = 7,     /**< 0x11: scatter into an MR without local write */
	NICMR_WC_REMOTE_INVAL_REQ = 8, /**< 0x12: responder not ready or without the enable */
	NICMR_WC_REMOTE_ACCESS = 9,    /**< 0x13: rkey missing, stale, out of bounds or denied */
	NICMR_WC_REMOTE_OP = 10,       /**< 0x14 */
	NICMR_WC_RETRY_EXC = 11,       /**< 0x15 */
	NICMR_WC_RNR_RETRY_EXC = 12,   /**< 0x16 */
	NICMR_WC_REMOTE_ABORT = 13,    /**< 0x22 */
	NICMR_WC_GENERAL = 14	       /**< any other syndrome (raw value in syndrome) */
};

/** What a completed work request was (struct nicmr_wc::opcode). */
enum nicmr_wc_opcode {
	NICMR_WC_RDMA_WRITE = 0,
	NICMR_WC_RDMA_READ = 1,
	NICMR_WC_FETCH_ADD = 2,
	NICMR_WC_COMP_SWAP = 3,
	NICMR_WC_SEND = 4,	     /**< nicmr_post_send (with or without imm / invalidate) */
	NICMR_WC_RDMA_WRITE_IMM = 5, /**< nicmr_post_write_imm */
	/* Receive completions (nicmr_post_recv's work requests); imm as noted. */
	NICMR_WC_RECV = 6,     /**< a SEND arrived */
	NICMR_WC_RECV_IMM = 7, /**< a SEND with immediate: imm */
	NICMR_WC_RECV_INV = 8, /**< a SEND with invalidate: imm = the rkey invalidated */
	NICMR_WC_RECV_RDMA_WITH_IMM =
		9 /**< an RDMA WRITE with immediate: imm; byte_len its length */
};

/** One completion (nicmr_cq_poll). */
struct nicmr_wc {
	uint64_t wr_id;		 /**< as posted */
	uint32_t qp_num;	 /**< the QP that posted it */
	uint32_t byte_len;	 /**< bytes moved (success only; 8 for atomics) */
	uint8_t opcode;		 /**< enum nicmr_wc_opcode */
	uint8_t status;		 /**< enum nicmr_wc_status */
	uint8_t syndrome;	 /**< the CQE syndrome (MLX5_CQE_SYNDROME_*), 0 on success */
	uint8_t vendor_syndrome; /**< the CQE's vendor syndrome, 0 on success */
	uint32_t imm;		 /**< NICMR_WC_RECV_IMM / _RDMA_WITH_IMM: the immediate as posted;
				      NICMR_WC_RECV_INV: the rkey invalidated; else 0 */
};

/** Posting flags. */
#define NICMR_SEND_SIGNALED (1u << 0) /**< a completion on success too (errors always give one) */
#define NICMR_SEND_INLINE   (1u << 1) /**< write: payload copied into the WQE; lkey ignored */
#define NICMR_SEND_FENCE    (1u << 2) /**< wait for earlier READ/atomics of the QP */

/** Largest payload of an inline write (NICMR_SEND_INLINE). */
#define NICMR_MAX_INLINE 972u
/** Largest CQ and QP depths (nicmr_cq_create, nicmr_qp_create). */
#define NICMR_MAX_CQ_DEPTH 65536u
#define NICMR_MAX_QP_DEPTH 32768u
/** QPs that may report to one CQ. */
#define NICMR_MAX_QPS_PER_CQ 64u

/** QP states (nicmr_qp_state). */
enum nicmr_qp_state {
	NICMR_QP_RESET = 0,
	NICMR_QP_INIT = 1,
	NICMR_QP_RTR = 2,
	NICMR_QP_RTS = 3,
	NICMR_QP_ERR = 6
};

/**
 * Creates a completion queue of at least depth entries (rounded up to a power of two). It
 * takes one of the device's UARs (the device model has 32; the key programmer holds one).
 * Slow path; any thread.
 * @param depth 2 .. NICMR_MAX_CQ_DEPTH
 * @return 0; -EINVAL (null argument, depth out of range); -ENOSPC (the device has no UAR
 *   left, or no CQ); -ENOMEM; the device's errors.
 */
int nicmr_cq_create(struct nicmr_device *dev, uint32_t depth, struct nicmr_cq **out);

/**
 * Destroys a CQ. Slow path; the CQ's polling thread, or any thread once no one polls it.
 * @return 0; -EINVAL (null); -EBUSY (QPs report to it, or events of it are not acknowledged
 *   (nicmr_cq_ack_events): it stays).
 */
int nicmr_cq_destroy(struct nicmr_cq *cq);

/** The CQ's number on the device (0 for a null CQ). Any thread. */
uint32_t nicmr_cq_num(const struct nicmr_cq *cq);

/**
 * Takes up to n completions, in the order the device wrote them, of every QP that reports to
 * cq. Completions of unsignalled successful work requests are not reported.
 * HOT PATH: no lock, no allocation, no system call. One thread at a time per CQ. On the
 * emulated device's UDP wire, a call that finds the CQ drained runs the device's receive
 * work on this thread (its socket I/O, the wire itself, and no lock waited for; another
 * thread running it meanwhile is not waited for) and takes the completions it made
 * (doc/native-api.md, "Progress").
 * @return the number taken (0: none yet); -EINVAL (null cq, null wc with n > 0, n < 0).
 */
int nicmr_cq_poll(struct nicmr_cq *cq, struct nicmr_wc *wc, int n);

/*
 * Completion events, the verbs model (ibv_req_notify_cq(3), ibv_get_cq_event(3),
 * ibv_ack_cq_events(3)) with one channel per device: arm a CQ, wait until the device's event
 * descriptor is readable (poll(2), epoll), take the event, acknowledge it, poll the CQ, arm
 * again. Polling never changes: nicmr_cq_poll stays lock-, allocation- and syscall-free.
 * Order that loses nothing: poll until empty, arm, poll once more, then wait (an arm behind a
 * completion not yet polled fires at once).
 */

/**
 * The device's completion event descriptor: readable when an armed CQ of the device got its
 * event (nonblocking; do not read it: nicmr_get_cq_event consumes it). Owned by the device.
 * Any thread.
 * @return the descriptor; -EINVAL (null); -ENOTSUP (a device whose bus has no MSI-X
 *   interrupts: CQs cannot be waited for).
 */
int nicmr_device_event_fd(struct nicmr_device *dev);

/**
 * Arms cq for one completion event: the next completion (solicited_only 0), or the next
 * solicited or error completion (non-zero; nicmr's requests complete unsolicited, so only an
 * error fires it). One event per arm. The same thread rules as nicmr_cq_poll.
 * @return 0; -EINVAL (null); -ENOTSUP (as nicmr_device_event_fd).
 */
int nicmr_cq_arm(struct nicmr_cq *cq, int solicited_only);

/**
 * Takes one completion event of the device without blocking: *cq is the CQ that fired (it is
 * disarmed; each event must be acknowledged with nicmr_cq_ack_events). Thread-safe.
 * @return 1 with *cq set; 0 when there is none (wait on nicmr_device_event_fd); -EINVAL (null
 *   argument); -ENOTSUP (as nicmr_device_event_fd).
 */
int nicmr_get_cq_event(struct nicmr_device *dev, struct nicmr_cq **cq);

/**
 * Acknowledges n events nicmr_get_cq_event returned for cq; nicmr_cq_destroy answers -EBUSY
 * while any is unacknowledged (ibv_ack_cq_events(3)). Any thread.
 * @return 0; -EINVAL (null cq, n 0, or n above the events not yet acknowledged).
 */
int nicmr_cq_ack_events(struct nicmr_cq *cq, unsigned int n);

/**
 * Names a CQE syndrome as struct nicmr_wc::syndrome carries it (0: success), for error
 * messages: a static string, e.g. "remote access error (key refused: stale, out of bounds or
 * right missing)" for 0x13 (NICMR_WC_REMOTE_ACCESS); "unknown syndrome" for one nicmr does not
 * know (NICMR_WC_GENERAL). Any thread; no lock.
 */
const char *nicmr_wc_syndrome_str(uint8_t syndrome);

/**
 * Creates an RC QP in pd on port (1 or 2) of pd's device, reporting to send_cq, with room for
 * at least depth work requests (rounded up to a power of two; a request takes one or more
 * 64-byte slots: an inline write or a long SGE list more). State RESET. As a responder it
 * allows remote read, write and atomics: the keys decide what a peer may do. Counts as a user
 * of pd (nicmr_pd_free is -EBUSY while it lives). Slow path; any thread, not concurrently with
 * polls of send_cq.
 * @param depth 2 .. NICMR_MAX_QP_DEPTH, at most send_cq's depth
 * @return 0; -EINVAL (null argument, port not 1 or 2, depth out of range or above the CQ's,
 *   CQ of another device); -ENOSPC (NICMR_MAX_QPS_PER_CQ QPs report to send_cq already);
 *   -ENOMEM (no memory, or the device has no QP left: CREATE_QP's EXCEED_LIM status, as Linux's
 *   mlx5 maps it); the device's errors.
 */
int nicmr_qp_create(struct nicmr_pd *pd, uint32_t port, struct nicmr_cq *send_cq, uint32_t depth,
		    struct nicmr_qp **out);

/**
 * Destroys a QP; work requests still in flight are forgotten (poll them first when their
 * completions matter). Slow path; the thread that polls its CQ.
 * @return 0; -EINVAL (null).
 */
int nicmr_qp_destroy(struct nicmr_qp *qp);

/** The QP number (24 bits; 0 for a null QP). Any thread. */
uint32_t nicmr_qp_num(const struct nicmr_qp *qp);
/** The QP's port (0 for a null QP). Any thread. */
uint32_t nicmr_qp_port(const struct nicmr_qp *qp);

/**
 * Connects qp to remote_qpn on remote_port: RESET -> INIT -> RTR -> RTS. The remote QP must be
 * a QP of the same device (the loopback wire) on remote_port; connect it back to qp for a
 * working pair. Slow path; the thread that posts on qp.
 * @return 0; -EINVAL (null, remote_port not that QP's port, qp's port above the device's
 *   ports or qp not in RESET: the device's BAD_PARAM / BAD_QP_STATE); -ENOENT (no QP
 *   remote_qpn on this device); the device's errors.
 */
int nicmr_qp_connect(struct nicmr_qp *qp, uint32_t remote_port, uint32_t remote_qpn);

/**
 * One entry of a port's GID table (ibv_query_gid): the address RoCEv2 packets of the port
 * carry, as 16 bytes in network order (an IPv4 address as the IPv4-mapped IPv6 address
 * ::ffff:a.b.c.d). On the device model, entry 0 of a port on the UDP wire (spec option addr=
 * or addr2=) is its address; every other entry, and every entry of a port on the in-process
 * loopback, is empty. Slow path (a device command); any thread.
 * @param port 1 .. the device's ports
 * @param index below the device's GID table size (256 on the device model)
 * @param[out] gid 16 bytes
 * @return 0; -EINVAL (null dev or gid, port or index out of range); -EADDRNOTAVAIL (the entry
 *   is empty: the port is not on a wire); the device's errors.
 */
int nicmr_port_gid(struct nicmr_device *dev, uint32_t port, uint32_t index, uint8_t gid[16]);

/**
 * A port's active path MTU for RoCE (ibv_query_port's active_mtu): the largest of 256, 512,
 * 1024, 2048 and 4096 bytes that fits the port's operational Ethernet MTU (its PMTU register,
 * less the 22 bytes of Ethernet header, VLAN tag and FCS the register counts) after the 96
 * bytes RoCE headers may take (GRH, UDP, BTH, XRC and AtomicETH, ICRC: Linux's iboe_get_mtu,
 * include/rdma/ib_addr.h); 256 when not even that fits. On the device model a port on the UDP
 * wire has its interface's MTU (a veth of 1500: 1024; the loopback: 4096) and a port on the
 * in-process loopback 4096. Peers connect at the smaller of their two ports' figures
 * (nicmr_qp_remote::mtu). Slow path (a device command); any thread.
 * @param port 1 .. the device's ports
 * @param[out] mtu bytes
 * @return 0; -EINVAL (null dev or mtu, port out of range); the device's errors.
 */
int nicmr_port_mtu(struct nicmr_device *dev, uint32_t port, uint32_t *mtu);

/** A QP's own address, what a peer needs to connect to it (nicmr_qp_local). */
struct nicmr_qp_addr {
	uint8_t gid[16]; /**< its port's GID table entry (nicmr_port_gid), network order */
	uint32_t qpn;	 /**< its QP number, 24 bits (NICMR_GSI_QPN for a GSI QP) */
	uint32_t psn;	 /**< the first PSN it sends once connected to a remote QP, 24 bits */
};

/**
 * The address a remote peer connects qp to (the verbs triple: ibv_query_gid, qp_num and the
 * send PSN the application picks). The PSN is drawn at random when the QP is created (as
 * ibv_rc_pingpong draws its own), and nicmr_qp_connect_remote sends from it unless the
 * application gives another (NICMR_QP_REMOTE_LOCAL_PSN). Slow path; any thread.
 * @param gid_index the entry of the QP's port's GID table to report (0 on the device model)
 * @return 0; -EINVAL (null qp or out, gid_index out of range); -EADDRNOTAVAIL (the entry is
 *   empty: the QP's port is not on a wire); the device's errors.
 */
int nicmr_qp_local(struct nicmr_qp *qp, uint32_t gid_index, struct nicmr_qp_addr *out);

/** Bits of struct nicmr_qp_remote::given: take the field even when it is 0. */
#define NICMR_QP_REMOTE_ACK_TIMEOUT   (1u << 0)
#define NICMR_QP_REMOTE_RETRY_COUNT   (1u << 1)
#define NICMR_QP_REMOTE_RNR_RETRY     (1u << 2)
#define NICMR_QP_REMOTE_MIN_RNR_TIMER (1u << 3)
#define NICMR_QP_REMOTE_LOCAL_PSN     (1u << 4)

/**
 * The remote end of an RC connection and its parameters (nicmr_qp_connect_remote). Zero the
 * whole struct, set size to sizeof(struct nicmr_qp_remote), then the peer's gid, qpn and psn:
 * every other field that is 0 takes its default, unless its bit in given says "0 is meant".
 * The layout only grows at its end: a caller built against an older header passes its smaller
 * size and the fields it does not know take their defaults; a caller built against a newer one
 * may pass a larger size when the bytes this library does not know are zero.
 */
struct nicmr_qp_remote {
	uint32_t size;	    /**< sizeof(struct nicmr_qp_remote) the caller knows; at least
				 NICMR_QP_REMOTE_SIZE_V1 */
	uint32_t qpn;	    /**< the peer's QP number, 24 bits */
	uint8_t gid[16];    /**< the peer's GID, network order; not all zero */
	uint32_t psn;	    /**< the peer's first send PSN (what this QP expects first), 24 bits */
	uint32_t gid_index; /**< this QP's GID table entry, its source address; default 0 */
	uint32_t mtu;	    /**< path MTU in bytes: 256, 512, 1024, 2048 or 4096; 0: 1024 */
	uint32_t ack_timeout;	/**< local ACK timeout 4.096 us * 2^n, 0..31 (0 with its bit: none);
				     default 14 (67 ms) */
	uint32_t retry_count;	/**< transport retries, 0..7; default 7 */
	uint32_t rnr_retry;	/**< RNR NAK retries, 0..7 (7: without end); default 7 */
	uint32_t min_rnr_timer; /**< the RNR NAK delay this QP asks for, IB encoding 0..31 (0 with
				     its bit: 655.36 ms); default 12 (0.64 ms) */
	uint32_t local_psn;	/**< with NICMR_QP_REMOTE_LOCAL_PSN: the first PSN this QP sends,
				     24 bits, instead of the one nicmr_qp_local reported */
	uint32_t given;		/**< NICMR_QP_REMOTE_* bits */
	/** (from NICMR_QP_REMOTE_SIZE_V2) How often this QP asks for an ACK (qpc.log_ack_req_freq),
	 * 0..15: the last packet of a message asks when 2^n packets went out since the last that
	 * asked, and whenever the WQE is signalled; a device-model responder acknowledges the
	 * others within 1 ms (doc/native-api.md, "Connecting to another process or host"); default
	 * 0: every message */
	uint32_t log_ack_req_freq;
};
/** The size of the first layout of struct nicmr_qp_remote (up to given). */
#define NICMR_QP_REMOTE_SIZE_V1 60u
/** The size of the second layout (up to log_ack_req_freq). */
#define NICMR_QP_REMOTE_SIZE_V2 64u

/**
 * Connects qp to a QP of another device (another process, another host) over its port's wire:
 * RESET -> INIT -> RTR (address path: local GID entry gid_index, the peer's GID and QPN, path
 * MTU, the peer's PSN, min RNR timer) -> RTS (own send PSN, ACK timeout, retry count, RNR
 * retry). Like verbs, nicmr does not carry the addresses between the peers: each side reads
 * its own with nicmr_qp_local and hands it to the other by any means (testmr has a TCP
 * exchange). The QP keeps the remote for nicmr_qp_recover. A failed call leaves qp in RESET.
 * Slow path; the thread that posts on qp.
 * @return 0;
 *   -EINVAL (null qp or r, r->size below NICMR_QP_REMOTE_SIZE_V1, mtu not one of the five,
 *   gid all zero, qpn, psn or local_psn above 24 bits, ack_timeout or min_rnr_timer above 31,
 *   retry_count or rnr_retry above 7, log_ack_req_freq above 15 (read only when size is at
 *   least NICMR_QP_REMOTE_SIZE_V2), an unknown bit in given, gid_index at or above the
 *   device's GID table size, gid of another address family (IPv4-mapped or not) than the
 *   local entry's);
 *   -E2BIG (r->size above this library's struct with a byte it does not know set);
 *   -EISCONN (qp is connected already, by this call or nicmr_qp_connect: not in RESET);
 *   -EADDRNOTAVAIL (the GID entry gid_index of qp's port is empty: the port is not on a wire);
 *   the device's errors.
 */
int nicmr_qp_connect_remote(struct nicmr_qp *qp, const struct nicmr_qp_remote *r);

/**
 * Reads the QP's state from the device (QUERY_QP). Slow path. @return 0; -EINVAL (null);
 * the device's errors. @param[out] state enum nicmr_qp_state
 */
int nicmr_qp_state(struct nicmr_qp *qp, uint32_t *state);

/**
 * Brings a QP in ERR back to RTS, connected to the same remote QP: 2RST, then RESET -> INIT ->
 * RTR -> RTS (a QP connected with nicmr_qp_connect_remote: the same address path, PSNs and
 * timers, so that both ends start again from their first PSNs). Poll its CQ first until
 * every posted request has completed (a failed request flushes the rest with
 * NICMR_WC_WR_FLUSH). A remote access error also puts the responder QP in ERR: recover it
 * too, or the next request fails with NICMR_WC_REMOTE_INVAL_REQ. Slow path; the thread that
 * posts on qp.
 * @return 0; -EINVAL (null, never connected); -EBUSY (requests still in flight); the device's
 *   errors.
 */
int nicmr_qp_recover(struct nicmr_qp *qp);

/*
 * Posting. Every call: HOT PATH, no lock, no allocation, no system call; one thread at a time
 * per QP (and its CQ's poller). Local addresses are in lkey's address space (the VA, or the
 * offset for a zero-based MR) and are checked with the lockless key lookup before anything is
 * posted; remote ones in rkey's, checked by the device (a refusal completes with an error
 * status, never silently). Errors of every posting call, nothing posted:
 *   -EINVAL   null qp, len 0 or above 2^31, inline above NICMR_MAX_INLINE, unknown flag,
 *             atomic address not 8-byte aligned;
 *   -ENOTCONN qp never connected;
 *   -ENOKEY, -EACCES, -ERANGE, -EKEYREVOKED, -EAGAIN  the local SGE failed the key lookup
 *             (nicmr_key_lookup: not a live key; local right missing; outside the region);
 *   -ENOSPC   no room in the send queue: poll the CQ first;
 *   -EOPNOTSUPP  (atomics) the device does not offer the operation, or does atomics on
 *             big-endian words only (nicmr_device_attr.atomic_mode other than
 *             NICMR_ATOMIC_HOST).
 */

/** RDMA WRITE of [laddr, laddr + len) (lkey; NICMR_SEND_INLINE: laddr is a pointer and
 * lkey is ignored) to raddr (rkey). */
int nicmr_post_write(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey, uint64_t raddr,
		     uint32_t rkey, uint64_t wr_id, unsigned flags);
/** RDMA READ of [raddr, raddr + len) (rkey) into laddr (lkey, which needs local write). */
int nicmr_post_read(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey, uint64_t raddr,
		    uint32_t rkey, uint64_t wr_id, unsigned flags);
/**
 * Atomic fetch-and-add of add on the 64-bit word at raddr; the old value lands in the 8 bytes
 * at result (lkey, local write). The target word, add and the result are uint64_t in host
 * byte order (the device is in NICMR_ATOMIC_HOST mode; in any other mode -EOPNOTSUPP).
 */
int nicmr_post_atomic_fadd(struct nicmr_qp *qp, uint64_t result, uint32_t lkey, uint64_t raddr,
			   uint32_t rkey, uint64_t add, uint64_t wr_id, unsigned flags);
/** Atomic compare-and-swap: the word at raddr becomes swap when it equals compare; the old
 * value lands at result (as nicmr_post_atomic_fadd). */
int nicmr_post_atomic_cswap(struct nicmr_qp *qp, uint64_t result, uint32_t lkey, uint64_t raddr,
			    uint32_t rkey, uint64_t compare, uint64_t swap, uint64_t wr_id,
			    unsigned flags);

/*
 * Receive queues and SEND. A QP made by nicmr_qp_create_attr with recv_depth > 0 has a receive
 * queue: a SEND (or RDMA WRITE with immediate) from its peer takes the oldest receive work
 * request and completes it on recv_cq (NICMR_WC_RECV*; in posting order, byte_len exact). With
 * none posted the sender's request waits for its RNR retries (7 on the loopback: without end,
 * retried when the sender next posts) or fails with NICMR_WC_RNR_RETRY_EXC; a message longer
 * than the receive completes it with NICMR_WC_LOCAL_LEN and the sender's with
 * NICMR_WC_REMOTE_INVAL_REQ (both QPs in ERR; doc/native-api.md, "Receive queues").
 */

/** Largest scatter list of one receive work request. */
#define NICMR_MAX_RECV_SGE 32u
/** nicmr_post_send: the immediate rides along (NICMR_WC_RECV_IMM at the peer). */
#define NICMR_SEND_IMM (1u << 3)
/** nicmr_post_send: the peer invalidates the rkey given (NICMR_WC_RECV_INV there). The device
 * invalidates only a key of the peer QP's PD that allows remote invalidation; nicmr registers
 * none such yet (its key table would not learn of the invalidation), so the peer refuses it:
 * NICMR_WC_REMOTE_INVAL_REQ here, both QPs in ERR (doc/native-api.md). */
#define NICMR_SEND_INVALIDATE (1u << 4)

/* nicmr_post_recv's scatter entries are struct nicmr_sge (above); their lkeys need local
 * write. */

/** What nicmr_qp_create_attr makes. */
struct nicmr_qp_attr {
	uint32_t port;		  /**< 1 or 2 */
	struct nicmr_cq *send_cq; /**< as nicmr_qp_create's */
	uint32_t depth;		  /**< send work requests, as nicmr_qp_create's */
	struct nicmr_cq *recv_cq; /**< receive completions; null: send_cq */
	uint32_t recv_depth;	  /**< receive work requests: 0 (no receive queue), 2 ..
				       NICMR_MAX_QP_DEPTH, at most recv_cq's depth (with the send
				       depth when recv_cq is send_cq) */
	uint32_t max_recv_sge;	  /**< with recv_depth: 1 .. NICMR_MAX_RECV_SGE */
	struct nicmr_srq *srq;	  /**< receive work requests from this shared receive queue
				       (nicmr_srq_create, same PD) instead of a queue of the QP's
				       own: recv_depth and max_recv_sge 0; null: none */
};

/**
 * Creates an RC QP as nicmr_qp_create does, with the receive queue attr asks for. Slow path;
 * any thread, not concurrently with polls of its CQs.
 * @return 0; -EINVAL (null argument, a field out of range, a CQ of another device, recv_depth
 *   above what recv_cq holds); -ENOSPC (NICMR_MAX_QPS_PER_CQ QPs report to a CQ already);
 *   -ENOMEM (no memory, or the device has no QP left, as nicmr_qp_create); the device's
 *   errors.
 */
int nicmr_qp_create_attr(struct nicmr_pd *pd, const struct nicmr_qp_attr *attr,
			 struct nicmr_qp **out);

/*
 * Shared receive queues. A QP made with nicmr_qp_attr::srq takes the receive work request of
 * every SEND (or RDMA WRITE with immediate) it gets from the SRQ, whichever QP that is: the
 * completion goes to that QP's recv_cq (qp_num is that QP) with the wr_id given to
 * nicmr_srq_post_recv. An empty SRQ gives the sender RNR as an empty receive queue does
 * (doc/native-api.md, "Shared receive queues"). A work request's room comes back when its
 * completion is polled. Posting on an SRQ and polling the receive CQs of its QPs happen on one
 * thread at a time.
 */
/** A shared receive queue. */
struct nicmr_srq;
/** Largest depth and scatter list of an SRQ (nicmr_srq_create; the device may allow fewer). */
#define NICMR_MAX_SRQ_DEPTH 32767u
#define NICMR_MAX_SRQ_SGE   31u

/** What nicmr_srq_create makes. */
struct nicmr_srq_attr {
	uint32_t depth;	  /**< receive work requests posted at once: 1 .. NICMR_MAX_SRQ_DEPTH and
			       below the device's SRQ size (depth + 1 rounded up to a power of two
			       at most 2^log_max_srq_sz) */
	uint32_t max_sge; /**< scatter entries per work request: 1 .. NICMR_MAX_SRQ_SGE */
};

/**
 * Creates a shared receive queue of pd. Slow path; any thread.
 * @return 0; -EINVAL (null argument, depth or max_sge out of range); -ENOMEM; the device's
 *   errors (nothing is left behind on failure).
 */
int nicmr_srq_create(struct nicmr_pd *pd, const struct nicmr_srq_attr *attr,
		     struct nicmr_srq **out);

/**
 * Destroys srq. Slow path.
 * @return 0; -EINVAL (null); -EBUSY (a QP made with it still exists: destroy it first).
 */
int nicmr_srq_destroy(struct nicmr_srq *srq);

/** The SRQ's number (the device's srqn), 0 for null. */
uint32_t nicmr_srq_num(const struct nicmr_srq *srq);

/**
 * Posts a receive work request of n scatter entries on srq (each checked with the lockless key
 * lookup for local write; zero-length ones skipped). HOT PATH as the posting calls; one thread
 * at a time with the polls of its QPs' receive CQs.
 * @return 0; -EINVAL (null srq, null sgl with n > 0, n above the SRQ's max_sge); -ENOSPC
 *   (depth work requests are posted and not polled: poll first); the key lookup's codes as
 *   the posting calls.
 */
int nicmr_srq_post_recv(struct nicmr_srq *srq, const struct nicmr_sge *sgl, uint32_t n,
			uint64_t wr_id);

/**
 * Posts a receive work request of n scatter entries (each checked with the lockless key
 * lookup for local write; zero-length ones skipped). HOT PATH as the posting calls; one thread
 * at a time per QP.
 * @return 0; -EINVAL (null qp, null sgl with n > 0, n above the QP's max_recv_sge); -ENOTSUP
 *   (the QP has no receive queue); -ENOSPC (its receive queue is full: poll recv_cq first);
 *   the key lookup's codes as the posting calls.
 */
int nicmr_post_recv(struct nicmr_qp *qp, const struct nicmr_sge *sgl, uint32_t n, uint64_t wr_id);

/**
 * SEND of [laddr, laddr + len) (lkey; len 0 sends an empty message; NICMR_SEND_INLINE as for
 * writes, up to NICMR_MAX_INLINE bytes) to the connected peer's receive queue. imm_or_rkey:
 * with NICMR_SEND_IMM the immediate (a host-order number, the peer's wc.imm), with
 * NICMR_SEND_INVALIDATE the peer's rkey to invalidate; else ignored.
 * @return the posting calls' codes; -EINVAL also for NICMR_SEND_IMM with
 *   NICMR_SEND_INVALIDATE, or an inline SEND with either.
 */
int nicmr_post_send(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey,
		    uint32_t imm_or_rkey, uint64_t wr_id, unsigned flags);

/** RDMA WRITE as nicmr_post_write (not inline) that also takes a receive work request at the
 * peer and hands it imm (NICMR_WC_RECV_RDMA_WITH_IMM). len 0 writes nothing (no rkey check). */
int nicmr_post_write_imm(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey,
			 uint64_t raddr, uint32_t rkey, uint32_t imm, uint64_t wr_id,
			 unsigned flags);

/* ---- UD (unreliable datagram) QPs ------------------------------------------------------- */

/*
 * A UD QP sends datagrams of one packet to any UD QP whose number, port GID and Q_Key it names
 * per send, and receives them from any such QP: no connection, no acknowledgement, no
 * retransmission (IBTA 9.8). A datagram that meets no receive work request, or a Q_Key other
 * than the receiving QP's, is dropped silently (the device counts it); the sender's completion
 * says only that the datagram left. Every receive buffer starts with the 40-byte GRH (for
 * RoCEv2 over IPv4: 20 undefined bytes, then the IPv4 header; over IPv6: the IPv6 header), so a
 * receive needs 40 bytes more than the largest datagram: one too small completes with
 * NICMR_WC_LOCAL_LEN (the QP goes to ERR; the sender never hears of it). doc/native-api.md,
 * "UD QPs", has the details.
 *
 * A port's GSI QP (NICMR_UD_QP_GSI) is the UD QP its peers know as QP 1 (NICMR_GSI_QPN): the
 * general services interface of IBTA vol.1 ch.13, where management datagrams such as the
 * communication manager's SIDR_REQ / SIDR_REP (ch.12.11) arrive. One per port; its Q_Key is
 * NICMR_GSI_QKEY. Because that Q_Key has bit 31 set, only a GSI QP can send it (naming it as
 * NICMR_UD_QKEY_OWN does), so only a GSI QP reaches another (IBTA 10.2.5).
 */

/** Bytes before the data of every UD receive. */
#define NICMR_UD_GRH_BYTES 40u
/** A Q_Key with this bit set (nicmr_ud_dest::q_key) sends the sending QP's own (IBTA 10.2.5). */
#define NICMR_UD_QKEY_OWN 0x80000000u

/** nicmr_ud_qp_attr::flags: the QP is its port's GSI QP, QP 1 to its peers. */
#define NICMR_UD_QP_GSI (1u << 0)
/** The QP number datagrams to a port's GSI QP are sent to (nicmr_ud_dest::qpn), and the source
 * QP (nicmr_ud_info::src_qp) of datagrams a GSI QP sent. */
#define NICMR_GSI_QPN 1u
/** The GSI QP's Q_Key (IBTA; Linux include/rdma/ib_mad.h IB_QP1_QKEY): what a GSI QP sends to
 * another with (nicmr_ud_dest::q_key; bit 31 is set, so it is the sending GSI QP's own). */
#define NICMR_GSI_QKEY 0x80010000u

/** What nicmr_qp_create_ud makes. Zero it, set size to sizeof(struct nicmr_ud_qp_attr). */
struct nicmr_ud_qp_attr {
	uint32_t size;		   /**< sizeof(struct nicmr_ud_qp_attr) the caller knows */
	uint32_t q_key;		   /**< the Q_Key datagrams to this QP must carry; bit 31 clear;
					0 with NICMR_UD_QP_GSI (the QP gets NICMR_GSI_QKEY) */
	uint32_t mtu;		   /**< the largest datagram: 256, 512, 1024, 2048 or 4096 bytes;
					0: 4096 (Linux mlx5's UD path MTU) */
	uint32_t flags;		   /**< 0 or NICMR_UD_QP_GSI */
	struct nicmr_qp_attr attr; /**< port, CQs, depths as for nicmr_qp_create_attr;
					recv_depth 0 makes a send-only UD QP */
};

/**
 * Creates a UD QP in pd and brings it to RTS (RESET -> INIT with q_key -> RTR -> RTS): it can
 * send and receive at once. nicmr_qp_connect, nicmr_qp_connect_remote and the RDMA posting calls
 * refuse it; nicmr_qp_local gives its port GID and number, what a peer sends to; nicmr_post_recv
 * posts its receives. Slow path; any thread, not concurrently with polls of its CQs.
 *
 * With NICMR_UD_QP_GSI the QP is attr->attr.port's GSI QP: its Q_Key is NICMR_GSI_QKEY, its
 * datagrams carry source QP NICMR_GSI_QPN, the datagrams a peer sends to QP NICMR_GSI_QPN of
 * the port arrive there, and nicmr_qp_local reports NICMR_GSI_QPN. nicmr_qp_num keeps the QP's
 * number on the device (what nicmr_wc::qp_num reports: the GSI QPs of the two ports differ
 * there). A port has one GSI QP at a time; nicmr_qp_destroy frees the port for another.
 * @return 0; -EINVAL (null argument, size below sizeof(struct nicmr_ud_qp_attr), q_key with
 *   bit 31 set, mtu not one of the five, a flag other than NICMR_UD_QP_GSI, NICMR_UD_QP_GSI with
 *   q_key not 0, an attr field as nicmr_qp_create_attr refuses it); -EBUSY (NICMR_UD_QP_GSI and
 *   the port has a GSI QP already: nothing is made); -ENOSPC, -ENOMEM and the device's errors as
 *   nicmr_qp_create_attr. A failed call leaves nothing behind (no QP, no CQ slot, and the port
 *   free for a GSI QP as before).
 */
int nicmr_qp_create_ud(struct nicmr_pd *pd, const struct nicmr_ud_qp_attr *attr,
		       struct nicmr_qp **out);

/** Where a UD datagram goes (nicmr_post_send_ud). */
struct nicmr_ud_dest {
	uint8_t gid[16]; /**< the peer QP's port GID (nicmr_qp_local; IPv4-mapped for IPv4) */
	uint32_t qpn;	 /**< the peer UD QP, 24 bits; NICMR_GSI_QPN: the peer port's GSI QP */
	uint32_t q_key;	 /**< the peer QP's Q_Key, or NICMR_UD_QKEY_OWN for this QP's own
			      (NICMR_GSI_QKEY from a GSI QP to another) */
};

/**
 * Sends [laddr, laddr + len) (lkey; len 0 sends an empty datagram) as one datagram to dest.
 * With NICMR_SEND_IMM, imm (host order) rides along (the peer's NICMR_WC_RECV_IMM); else it is
 * ignored. Completes with NICMR_WC_SEND once the datagram left. HOT PATH as the posting calls.
 * @return 0; -EINVAL (null qp or dest, a flag other than NICMR_SEND_SIGNALED, NICMR_SEND_FENCE
 *   and NICMR_SEND_IMM, dest->qpn above 24 bits); -ENOTSUP (not a UD QP); -EMSGSIZE (len above
 *   the QP's mtu: IBTA C10-93.1.1, nothing is sent); -ENOSPC (the send queue is full); the key
 *   lookup's codes as the posting calls.
 */
int nicmr_post_send_ud(struct nicmr_qp *qp, uint64_t laddr, size_t len, uint32_t lkey,
		       const struct nicmr_ud_dest *dest, uint32_t imm, uint64_t wr_id,
		       unsigned flags);

/** nicmr_ud_info::flags: the receive buffer starts with the GRH (always, on RoCEv2). */
#define NICMR_UD_GRH (1u << 0)
/** nicmr_ud_info::net_type: the network header the GRH holds. */
#define NICMR_UD_NET_IPV6 1u
#define NICMR_UD_NET_IPV4 2u

/** The datagram side of a completion (nicmr_cq_poll_ud); all 0 for other completions. */
struct nicmr_ud_info {
	uint32_t src_qp;   /**< the QP that sent the datagram (NICMR_GSI_QPN: a GSI QP) */
	uint32_t flags;	   /**< NICMR_UD_GRH */
	uint32_t net_type; /**< NICMR_UD_NET_IPV4 or NICMR_UD_NET_IPV6 */
	uint32_t reserved;
};

/**
 * nicmr_cq_poll, with ud[i] the datagram side of wc[i] (a successful receive of a UD QP: the
 * sender's QP number and the GRH's kind; zeros for every other completion). HOT PATH as
 * nicmr_cq_poll. @return as nicmr_cq_poll; -EINVAL also for a null ud with n > 0.
 */
int nicmr_cq_poll_ud(struct nicmr_cq *cq, struct nicmr_wc *wc, struct nicmr_ud_info *ud, int n);

/**
 * The sender's and receiver's GIDs from a UD receive's first NICMR_UD_GRH_BYTES bytes (net_type
 * as nicmr_cq_poll_ud gave it): for IPv4 the IPv4-mapped GIDs of the header's addresses, for
 * IPv6 the header's addresses (what rdma-core's ibv_init_ah_from_wc reads). Any thread.
 * @return 0; -EINVAL (null argument, net_type not one of the two, a header whose version is not
 *   net_type's).
 * @param[out] dst_gid may be null
 */
int nicmr_ud_grh_gids(const void *grh, uint32_t net_type, uint8_t src_gid[16], uint8_t dst_gid[16]);

/* ---- Key violations ------------------------------------------------------------------------ */

/*
 * Remote keys a peer's device refused: every completion with NICMR_WC_REMOTE_ACCESS (CQE
 * syndrome 0x13) that nicmr_cq_poll takes is recorded under the rkey its request carried, with
 * the remote right the request needed and the peer it went to. That completion is what a
 * ConnectX gives the requester; the responder's device reports no key (its QP goes to ERR with
 * an event, PRM "Local Access Violation WQ Error"), so refusals of this device's keys to
 * requests of other processes or hosts are not seen here. The record is a fixed table of
 * NICMR_MAX_KEY_VIOLATIONS keys inside the device, written lock-free by the pollers (no
 * allocation, no lock: atomic updates on the error completion only); a refusal of a further
 * key once the table is full is counted as dropped. The records last as long as the device.
 */

/** The most keys the violation record holds. */
#define NICMR_MAX_KEY_VIOLATIONS 256u

/** One refused key (nicmr_key_violations). */
struct nicmr_key_violation {
	uint32_t key;	    /**< the rkey the refused requests carried */
	uint32_t local_qpn; /**< the QP that posted the last refused request */
	uint32_t peer_port; /**< the peer of the last refusal: the port of the remote QP (0 for
			       one connected with nicmr_qp_connect_remote) ... */
	uint32_t peer_qpn;  /**< ... and its number */
	uint64_t access;    /**< NICMR_ACCESS_REMOTE_READ / _WRITE / _ATOMIC: every right a
			     *   refused request needed (one bit per kind of request refused) */
	uint64_t count;	    /**< refusals of this key */
};

/**
 * Reads the key violation record: up to n of the keys recorded, in no particular order.
 * Any thread, while pollers record (each entry is read field by field: its count and rights
 * may be one refusal apart). Slow path: O(NICMR_MAX_KEY_VIOLATIONS).
 * @param out room for n entries (may be null when n is 0)
 * @param[out] dropped when not null: refusals not recorded because the table was full
 * @return the number of keys recorded (may exceed n: only n were written);
 *   -EINVAL (null dev, null out with n > 0).
 */
int nicmr_key_violations(const struct nicmr_device *dev, struct nicmr_key_violation *out,
			 uint32_t n, uint64_t *dropped);

/*
 * The other side: requests from other processes or hosts that this device refused (a remote
 * access error NAK on the UDP wire), counted per key of this device and per peer (the
 * requesting QP's GID and number). A ConnectX reports such a refusal only as the responder QP's
 * error event; the emulated device keeps this record (a device-model extension: other devices
 * answer -EOPNOTSUPP). A fixed table of NICMR_MAX_KEY_REFUSALS (key, peer) pairs; further
 * pairs are counted as dropped. Requests of this device's own QPs over the in-process loopback
 * are not in it (their requester's nicmr_key_violations has them).
 */

/** The most (key, peer) pairs the refusal record holds. */
#define NICMR_MAX_KEY_REFUSALS 256u

/** One (key, peer) pair of the refusal record (nicmr_key_refusals). */
struct nicmr_key_refusal {
	uint32_t key;	      /**< the key of this device the refused requests carried */
	uint32_t local_qpn;   /**< the responder QP that refused the last one */
	uint8_t peer_gid[16]; /**< the requester's GID ... */
	uint32_t peer_qpn;    /**< ... and QP number */
	uint32_t reserved;
	uint64_t access; /**< NICMR_ACCESS_REMOTE_READ / _WRITE / _ATOMIC: every right refused */
	uint64_t count;	 /**< refusals of key to this peer */
};

/**
 * Reads the refusal record: up to n pairs, in the order they were first refused. Any thread.
 * Slow path: a lock of the device model, O(NICMR_MAX_KEY_REFUSALS).
 * @param[out] dropped when not null: refusals not recorded because the record was full
 * @return the number of pairs recorded (may exceed n: only n were written); -EINVAL (null dev,
 *   null out with n > 0); -EOPNOTSUPP (not an emulated device).
 */
int nicmr_key_refusals(const struct nicmr_device *dev, struct nicmr_key_refusal *out, uint32_t n,
		       uint64_t *dropped);

/* ---- Vectored, IOVA-list and page-vector registration -------------------------------------- */

struct iovec; /* <sys/uio.h> */

/**
 * Most segments of nicmr_mr_regv and entries of nicmr_mr_reg_iova, and most IOVA-discontiguous
 * runs of a page vector (nicmr_mr_reg_pages). Above it: -E2BIG.
 */
#define NICMR_MAX_IOV 64u

/**
 * Registers the segments iov[0 .. count-1] as one region (fi_mr_regv). The region's address
 * space is the segments end to end: it starts at iov[0].iov_base (or at 0 with
 * NICMR_MR_ZERO_BASED), and byte k of segment i is at the start + the lengths of the segments
 * before i + k. Each segment is registered as nicmr_mr_reg would (inside a pool: the pool's
 * mapping; elsewhere: a slow-path mapping of its own, -EFAULT when not mapped). The device gets
 * one MTT mkey when one page size fits every segment (each segment's IOVA congruent with its
 * place in the region, and every joint between IOVA-discontiguous segments on a page boundary)
 * and the pages fit one mkey; otherwise an indirect (KLM) mkey whose entries point at one MTT
 * mkey per segment. Those inner keys are nicmr's own: they grant the same access in the same PD
 * over the same bytes, are never returned, and go with the region. The key, lookups
 * (nicmr_key_lookup translates each address to its segment's IOVA), raw keys and
 * nicmr_mr_dereg work as for any MR; sub-MRs of it are -EOPNOTSUPP. Slow path (several device
 * commands for the KLM form); any thread.
 *
 * @param iov segments; every iov_len > 0
 * @param count 1 .. NICMR_MAX_IOV
 * @param access, flags, requested_key as nicmr_mr_reg (flags: NICMR_MR_REQUESTED_KEY,
 *   NICMR_MR_ZERO_BASED; zero-based needs no alignment here)
 * @return 0;
 *   -EINVAL   null pd, out or iov, count 0, a segment of length 0, a segment or the total
 *             length wrapping around 2^64 (or the region's start + total length), unknown
 *             access bit or ibv rule broken;
 *   -E2BIG    count above NICMR_MAX_IOV, a segment of 4 GiB or more in the KLM form, or more
 *             translations than a pre-created mkey holds;
 *   -EOPNOTSUPP  unknown flag;
 *   -EFAULT   (a segment outside every pool) not mapped, not readable, or not writable while
 *             access lets the device write;
 *   -ENOSPC   no free key, no IOVA space, or NICMR_MAX_SEGMENTED_MRS segmented MRs live;
 *   the key errors of nicmr_mr_reg (-EEXIST, -EKEYREJECTED, -EAGAIN), -ENOMEM, the device's.
 * A failed call leaves nothing registered or mapped; inner keys it had registered wait for
 * their grace period like any deregistered key.
 */
int nicmr_mr_regv(struct nicmr_pd *pd, const struct iovec *iov, size_t count, uint64_t access,
		  uint64_t flags, uint64_t requested_key, struct nicmr_mr **out);

/** Live MRs with segmented translations (vectored, IOVA-list, page-vector) per device. */
#define NICMR_MAX_SEGMENTED_MRS 4096u

/** One entry of an IOVA list: bytes the caller has already mapped for the device. */
struct nicmr_iova_seg {
	uint64_t iova; /**< device address (IOVA) of the first byte */
	uint64_t len;  /**< bytes, > 0 */
};

/**
 * Registers memory given by device addresses (kfi_mr_regsgl: a DMA-mapped scatterlist). Each
 * entry must lie inside one mapping nicmr made for this device: a pool (which then counts the
 * MR as a user: nicmr_pool_destroy is -EBUSY while it lives) or the slow-path mapping of a
 * live MR (which then cannot be deregistered, -EBUSY, while this MR lives). Anything else is
 * refused with -EFAULT, since the device would fault on it. The address space is the entries
 * end to end from segs[0].iova (or 0 with NICMR_MR_ZERO_BASED); mkeys as nicmr_mr_regv. The
 * region has no virtual address: nicmr_mr_addr gives NULL. Slow path; any thread.
 * @param count 1 .. NICMR_MAX_IOV
 * @return 0; -EINVAL (null argument, count 0, len 0, an entry or the total wrapping, access);
 *   -E2BIG (count above NICMR_MAX_IOV; translations as nicmr_mr_regv); -EOPNOTSUPP (flag);
 *   -EFAULT (an entry not inside one known mapping); and nicmr_mr_regv's key and device errors.
 */
int nicmr_mr_reg_iova(struct nicmr_pd *pd, const struct nicmr_iova_seg *segs, size_t count,
		      uint64_t access, uint64_t flags, uint64_t requested_key,
		      struct nicmr_mr **out);

/**
 * Registers a page vector (kfi_mr_regbv's bio_vec with the pages already DMA-mapped, or a
 * fast-registration page list): count pages of page_size bytes at the IOVAs pages[], and in
 * them the bytes [offset, offset + len) of the pages end to end. Every page must be aligned to
 * page_size and lie inside one known mapping, as for nicmr_mr_reg_iova. The address space starts
 * at pages[0] + offset (or 0 with NICMR_MR_ZERO_BASED). Pages whose IOVAs follow each other form
 * one run; at most NICMR_MAX_IOV runs. One MTT mkey of page_size pages when offset 0 lands on
 * a page boundary of the address space (always without NICMR_MR_ZERO_BASED), else KLM. Slow
 * path; any thread.
 * @param page_size a power of two from 4 KiB to 1 GiB
 * @param offset below page_size
 * @param len > 0; the last byte falls in the last page: (count - 1) * page_size < offset + len
 *   <= count * page_size
 * @return 0; -EINVAL (null argument, count 0, page_size not a power of two in range, offset not
 *   below page_size, len not ending in the last page, a page IOVA not aligned to page_size,
 *   access); -E2BIG (more than NICMR_MAX_IOV runs; translations as nicmr_mr_regv);
 *   -EOPNOTSUPP (flag); -EFAULT (a page not inside one known mapping); and nicmr_mr_regv's key
 *   and device errors.
 */
int nicmr_mr_reg_pages(struct nicmr_pd *pd, const uint64_t *pages, size_t count, size_t page_size,
		       size_t offset, size_t len, uint64_t access, uint64_t flags,
		       uint64_t requested_key, struct nicmr_mr **out);

/**
 * How an MR's translations are made: 0 one contiguous IOVA range (nicmr_mr_reg, sub-MRs),
 * 1 one MTT mkey over several IOVA runs, 2 an indirect (KLM) mkey; -EINVAL for a null MR.
 * Any thread.
 */
int nicmr_mr_layout(const struct nicmr_mr *mr);

/**
 * The address in mr's address space of the local buffer [buf, buf + len): what a work request's
 * local address (or a peer's remote address) names for those bytes. A region of one virtual
 * range (nicmr_mr_reg, sub-MRs, and vectored MRs whose segments follow each other in memory)
 * translates any buffer: buf itself, or its offset from the registered address for a zero-based
 * region; the device checks the bounds when the request runs. A vectored region of several
 * virtual ranges translates a buffer that lies inside one of them (segments that follow each
 * other in memory count as one). Posting path: no lock, no allocation, no system call (at most
 * NICMR_MAX_IOV ranges are searched). Any thread. len may be 0 (a zero-length request).
 * @return 0; -EINVAL (null mr or addr, or an IOVA-list or page-vector MR, which has no virtual
 *   address); -EFAULT (a vectored region's buffer not inside one of its ranges).
 */
int nicmr_mr_addr_of(const struct nicmr_mr *mr, const void *buf, size_t len, uint64_t *addr);

/* ---------------------------------------------------------------------------------------------
 * Memory windows (type 2, the ibv_bind_mw case): a window is bound to a subrange of an MR that
 * was registered with NICMR_ACCESS_MW_BIND, and grants remote access to that subrange alone
 * under its own rkey. The bind is a UMR work request, as on ConnectX. While a window is bound,
 * its MR cannot be deregistered (-EBUSY). Each bind gives a new rkey; after
 * nicmr_mw_invalidate returns, the device and nicmr_key_lookup refuse the old one for good.
 */

/** A memory window. */
struct nicmr_mw;

/**
 * Allocates an unbound memory window in pd. The PD cannot be freed while the window lives.
 * Slow path; any thread.
 * @return 0; -EINVAL (null argument); -ENOMEM.
 */
int nicmr_mw_alloc(struct nicmr_pd *pd, struct nicmr_mw **out);

/**
 * Frees an unbound window. Slow path; any thread, not concurrently with other calls on mw.
 * @return 0; -EINVAL (null); -EBUSY (bound: invalidate it first).
 */
int nicmr_mw_free(struct nicmr_mw *mw);

/**
 * Binds mw to [addr, addr + len) of mr with remote access rights. Slow path (one UMR); any
 * thread, not concurrently with other calls on mw.
 * @param addr in mr's address space: a virtual address inside mr, or an offset when mr is
 *   zero-based. The window's rkey addresses the same way.
 * @param access a non-empty set of NICMR_ACCESS_REMOTE_READ, _REMOTE_WRITE, _REMOTE_ATOMIC, each
 *   of them granted by mr as well
 * @param rkey receives the window's new rkey (also nicmr_mw_rkey)
 * @return 0; -EINVAL (null argument, len 0, wrap, access empty or not remote-only, mr in
 *   another PD); -EBUSY (mw is bound already); -EACCES (mr was registered without
 *   NICMR_ACCESS_MW_BIND, or access beyond mr's); -ERANGE (not inside mr); -EOPNOTSUPP (mr is
 *   a vectored, IOVA-list or page-vector MR); -ENOSPC (no free key); -E2BIG (the window needs
 *   more 4 KiB translations than a pre-created mkey holds); -ENOMEM; the device's errors. On
 *   failure mw stays unbound and nothing is left behind.
 */
int nicmr_mw_bind(struct nicmr_mw *mw, struct nicmr_mr *mr, uint64_t addr, size_t len,
		  uint64_t access, uint32_t *rkey);

/**
 * Invalidates a bound window: when it returns the device refuses its rkey, and mw may be bound
 * again. Slow path; any thread, not concurrently with other calls on mw.
 * @return 0; -EINVAL (null); -ENOENT (not bound); the device's errors (mw then stays bound).
 */
int nicmr_mw_invalidate(struct nicmr_mw *mw);

/** The rkey of a bound window; 0 when unbound or null. */
uint32_t nicmr_mw_rkey(const struct nicmr_mw *mw);

/**
 * Tells nicmr that the pages behind mr may have changed (fi_mr_refresh without FI_MR_MMU_NOTIFY:
 * the memory was unmapped and mapped again at the same addresses, say). For memory outside the
 * pools nicmr pins and maps the pages anew at a fresh IOVA, re-points mr's mkey there with one
 * UMR modify, and then releases the old mapping: the key stays valid throughout, and RDMA
 * through it sees the old pages or the new ones, never a fault. Pool memory is mapped for the
 * pool's life and cannot change under nicmr: the call checks the ranges and returns 0. The
 * whole region is refreshed, whatever ranges are named. Slow path; any thread, not
 * concurrently with other calls on mr.
 * @param iov ranges of mr to refresh (virtual addresses inside mr), or NULL with count 0 for all
 * @return 0; -EINVAL (null mr, iov NULL with count > 0, a zero-length or wrapping range);
 *   -ERANGE (a range outside mr); -EOPNOTSUPP (a sub-MR or window; a vectored, IOVA-list or
 *   page-vector MR; the command programmer, which cannot modify an mkey in place);
 *   -EBUSY (sub-MRs or windows of mr live, or IOVA-list MRs use its mapping); -EFAULT (the
 *   memory is no longer mapped with the access mr needs); the slow path's errors (-ENOMEM,
 *   -ENOSPC) and the device's. On failure mr is unchanged and usable.
 */
int nicmr_mr_refresh(struct nicmr_mr *mr, const struct iovec *iov, size_t count);

/* ---- Device-model extensions: single-use MRs, RMA-event MRs, counters ---------------------- */

/*
 * Two features no ConnectX has, offered only by nicmr's device model behind capability bits
 * (doc/device-model.md, "Extensions"): nicmr_device_attr.ext_flags says which the device has,
 * and on a device without one the calls that need it fail with -EOPNOTSUPP (nothing pretends).
 * A libfabric provider offers FI_MR_SINGLE_USE-like keys, FI_RMA_EVENT / FI_MR_RMA_EVENT and
 * fi_mr_bind(counter) only when the bit is there. Contract for it:
 *   fi_mr_reg(FI_RMA_EVENT)         -> nicmr_mr_reg(NICMR_MR_RMA_EVENT): created disabled
 *   fi_mr_bind(mr, cntr, FI_REMOTE_WRITE) -> nicmr_mr_bind_cntr(mr, c, NICMR_REMOTE_WRITE)
 *   fi_mr_enable(mr)                -> nicmr_mr_enable(mr)
 *   fi_close(mr) with a counter bound -> nicmr_mr_unbind_cntr, then nicmr_mr_dereg (libfabric
 *                                      has no unbind call, so the MR's close drops it; the
 *                                      native nicmr_mr_dereg alone stays -EBUSY)
 *   fi_close(cntr) while bound      -> -EBUSY from nicmr_cntr_free
 */
/** nicmr_device_attr.ext_flags: single-use keys (NICMR_MR_SINGLE_USE). */
#define NICMR_EXT_SINGLE_USE (1ull << 0)
/** nicmr_device_attr.ext_flags: RMA-event MRs and counters (NICMR_MR_RMA_EVENT, nicmr_cntr_*). */
#define NICMR_EXT_RMA_EVENT (1ull << 1)

/**
 * nicmr_mr_reg flag (extension NICMR_EXT_SINGLE_USE): the device frees the key after its first
 * remote operation (RDMA read, write or atomic through it) that passes the access checks; of
 * operations that race for it exactly one gets through. Every later remote access fails with
 * REMOTE_ACCESS_ERR (NICMR_WC_REMOTE_ACCESS, syndrome 0x13). The host's nicmr_key_lookup does not
 * see the device's use (it keeps answering 0 for local checks until deregistration). Not with
 * NICMR_ACCESS_MW_BIND (-EINVAL: a window's rkey would bypass it); sub-MRs of it are refused
 * (-EOPNOTSUPP); nicmr_mr_regv and the other vectored calls refuse the flag (-EOPNOTSUPP).
 */
#define NICMR_MR_SINGLE_USE (1ull << 2)
/**
 * nicmr_mr_reg flag (extension NICMR_EXT_RMA_EVENT): the MR is created disabled: the device
 * refuses remote access (REMOTE_ACCESS_ERR) and nicmr_key_lookup says -EKEYREVOKED, until
 * nicmr_mr_enable. Bind counters (nicmr_mr_bind_cntr) before enabling. Not with
 * NICMR_ACCESS_MW_BIND (-EINVAL); sub-MRs of it are refused (-EOPNOTSUPP).
 */
#define NICMR_MR_RMA_EVENT (1ull << 3)
/** nicmr_mr_bind_cntr flag: count remote RDMA writes and atomics into the MR. */
#define NICMR_REMOTE_WRITE (1ull << 0)

/** An 8-byte event counter in the device's DMA memory, incremented by the device. */
struct nicmr_cntr;

/**
 * Allocates a counter at 0. Its 8 bytes are DMA memory of the device (the driver's arena): the
 * device adds one, atomically, for each completed remote write or atomic into an MR it is bound
 * to. The device cannot be closed while it lives. Slow path; any thread.
 * @return 0; -EINVAL (null); -EOPNOTSUPP (no NICMR_EXT_RMA_EVENT); -ENOMEM (no memory, or the
 *   DMA arena is full).
 */
int nicmr_cntr_alloc(struct nicmr_device *dev, struct nicmr_cntr **out);
/**
 * Frees a counter. Slow path; any thread, not concurrently with other calls on c.
 * @return 0; -EINVAL (null); -EBUSY (bound to an MR: deregister or unbind that first).
 */
int nicmr_cntr_free(struct nicmr_cntr *c);
/**
 * The counter's value: a plain acquire load (no lock, no system call); the data of every
 * counted write is visible to the caller once it sees the count. 0 for null. Any thread.
 */
uint64_t nicmr_cntr_read(const struct nicmr_cntr *c);

/**
 * Binds counter c to an RMA-event MR that is not enabled yet: once enabled, the device counts
 * each completed remote write and atomic into mr in c (reads and local operations are not
 * counted). One counter per MR; a counter may serve several MRs. Slow path; any thread, not
 * concurrently with other calls on mr.
 * @param flags NICMR_REMOTE_WRITE
 * @return 0; -EINVAL (null, flags not NICMR_REMOTE_WRITE, c of another device, mr not
 *   registered with NICMR_MR_RMA_EVENT); -EBUSY (mr is enabled: "bindings after enable are
 *   refused", or a counter is bound already).
 */
int nicmr_mr_bind_cntr(struct nicmr_mr *mr, struct nicmr_cntr *c, uint64_t flags);
/**
 * Enables an RMA-event MR: from its return the device accepts remote access through its key
 * and counts into the bound counter (if any), and nicmr_key_lookup accepts the key. Slow path
 * (one device command); any thread, not concurrently with other calls on mr.
 * @return 0; -EINVAL (null, or not an RMA-event MR); -EBUSY (already enabled); the device's
 *   errors (mr then stays disabled).
 */
int nicmr_mr_enable(struct nicmr_mr *mr);
/**
 * Unbinds mr's counter and disables mr again (the device refuses its key, lookups say
 * -EKEYREVOKED), so that mr can be deregistered, or bound and enabled anew. Slow path; any
 * thread, not concurrently with other calls on mr.
 * @return 0; -EINVAL (null, or not an RMA-event MR); -ENOENT (no counter bound); the device's
 *   errors (mr then stays as it was).
 */
int nicmr_mr_unbind_cntr(struct nicmr_mr *mr);

/** What an MR is: how it was registered and, for an RMA-event MR, where its binding stands. */
struct nicmr_mr_info {
	uint64_t flags;		 /**< NICMR_MR_ZERO_BASED, _SINGLE_USE, _RMA_EVENT as registered */
	struct nicmr_mr *base;	 /**< a sub-MR's base; NULL otherwise */
	struct nicmr_cntr *cntr; /**< the counter bound (nicmr_mr_bind_cntr); NULL otherwise */
	uint32_t segments;	 /**< segments of a vectored, IOVA-list or page-vector MR; else 1 */
	int enabled;		 /**< 0: an RMA-event MR not enabled yet; 1 otherwise */
	/** The rights the key grants, as the NICMR_ACCESS_* bits a nicmr_key_lookup of it
	 * passes: the registration's access after fi_mr(3)'s or ibv_reg_mr(3)'s rules (e.g.
	 * REMOTE_WRITE alone also grants REMOTE_ATOMIC and the local writes). */
	uint64_t access;
	struct nicmr_pd *pd; /**< the PD it was registered in (a sub-MR: its base's) */
};

/**
 * Fills info for mr. Reads what the MR's own calls wrote: not concurrently with them
 * (registration, nicmr_mr_bind_cntr, nicmr_mr_enable, nicmr_mr_unbind_cntr, deregistration).
 * No lock, no allocation, no system call. Any thread.
 * @return 0; -EINVAL (null mr or info).
 */
int nicmr_mr_query(const struct nicmr_mr *mr, struct nicmr_mr_info *info);

/* ---- Registration cache -------------------------------------------------------------------- */

/**
 * A cache of registrations of memory outside pools (the slow path), for applications that
 * register the same buffers again and again: libfabric's MR cache (FI_MR_CACHE_*), offered
 * natively. A registration whose range and access match a cached one (the cached range holds
 * the requested one, the access is the same) is served from the cache with no system call;
 * otherwise it is registered (nicmr_mr_reg) and kept. Deregistered MRs stay registered in the
 * cache, least recently used first out, within max_count entries and max_size bytes. The unmap
 * monitor drops (deregisters) every entry over memory that leaves the process, so memory freed
 * and mapped again at the same address is registered anew (doc/native-api.md, "Registration
 * cache", says which cases the monitor covers).
 */
struct nicmr_mr_cache;

/** nicmr_mr_cache_params.monitor. */
enum nicmr_mr_cache_monitor {
	NICMR_MR_CACHE_MONITOR_DEFAULT = 0, /**< userfaultfd when the kernel allows it, else none */
	NICMR_MR_CACHE_MONITOR_UFFD = 1,    /**< userfaultfd, or the cache is not created */
	NICMR_MR_CACHE_MONITOR_NONE = 2,    /**< no monitor: nothing is cached */
};

struct nicmr_mr_cache_params {
	size_t max_size;  /**< bytes of registrations the cache holds (in use or not) */
	size_t max_count; /**< registrations the cache holds; 0: nothing is cached */
	int monitor;	  /**< enum nicmr_mr_cache_monitor */
};

/** Cache counters (nicmr_mr_cache_get_stats). */
struct nicmr_mr_cache_stats {
	uint64_t entries;	/**< registrations held (in use or not) */
	uint64_t bytes;		/**< their bytes */
	uint64_t in_use;	/**< MRs of the cache applications hold (uncached ones too) */
	uint64_t hits;		/**< registrations served from the cache */
	uint64_t misses;	/**< registrations made and kept */
	uint64_t uncached;	/**< registrations made and not kept (limits, memory the monitor
				     cannot watch, pools, no monitor) */
	uint64_t evictions;	/**< entries dropped for the limits or by nicmr_mr_cache_flush */
	uint64_t invalidations; /**< entries dropped because their memory left the process */
	int monitor;		/**< the monitor in use: NICMR_MR_CACHE_MONITOR_UFFD or _NONE */
};

/**
 * Fills p with the defaults, then with the environment: NICMR_MR_CACHE_MAX_SIZE (bytes,
 * default 1 GiB), NICMR_MR_CACHE_MAX_COUNT (default 1024), NICMR_MR_CACHE_MONITOR ("uffd",
 * "disabled" or "none"; default: userfaultfd when the kernel allows it). A value that does not
 * parse leaves the default (and is logged). Any thread.
 */
void nicmr_mr_cache_params_init(struct nicmr_mr_cache_params *p);

/**
 * Creates a cache of registrations on pd. Slow path; any thread.
 * @return 0; -EINVAL (null pd, params or out; a monitor outside the enum); -EPERM or
 *   -EOPNOTSUPP (NICMR_MR_CACHE_MONITOR_UFFD and the kernel refuses userfaultfd or its unmap
 *   events); -ENOMEM.
 */
int nicmr_mr_cache_create(struct nicmr_pd *pd, const struct nicmr_mr_cache_params *params,
			  struct nicmr_mr_cache **out);

/**
 * Deregisters every entry and destroys the cache. Slow path; not concurrently with other calls
 * on the cache.
 * @return 0; -EINVAL (null); -EBUSY (an entry is in use: nothing changed).
 */
int nicmr_mr_cache_destroy(struct nicmr_mr_cache *cache);

/**
 * Registers [addr, addr + len) with access (NICMR_ACCESS_*, as nicmr_mr_reg, flags 0) through
 * the cache: an entry that holds the range with the same access is returned (a hit: no system
 * call, no allocation), else one is registered and kept. The MR returned may cover more than
 * the range (nicmr_mr_addr, nicmr_mr_len say what). Release it with nicmr_mr_cache_dereg, never
 * nicmr_mr_dereg (-EBUSY). Any thread, concurrently (one lock per cache).
 * @return 0; the errors of nicmr_mr_reg (-EINVAL, -EFAULT, -ENOMEM, -ENOSPC, ...).
 */
int nicmr_mr_cache_reg(struct nicmr_mr_cache *cache, void *addr, size_t len, uint64_t access,
		       struct nicmr_mr **out);

/**
 * Releases an MR of nicmr_mr_cache_reg: a cached one stays registered for the next user (or
 * goes at once if its memory left the process), an uncached one is deregistered. Any thread.
 * @return 0; -EINVAL (null, or an MR this cache did not give); nicmr_mr_dereg's errors.
 */
int nicmr_mr_cache_dereg(struct nicmr_mr_cache *cache, struct nicmr_mr *mr);

/**
 * Deregisters every entry not in use. Slow path; any thread.
 * @return the number deregistered; -EINVAL (null).
 */
int nicmr_mr_cache_flush(struct nicmr_mr_cache *cache);

/** Fills stats. Any thread. @return 0; -EINVAL (null). */
int nicmr_mr_cache_get_stats(struct nicmr_mr_cache *cache, struct nicmr_mr_cache_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
