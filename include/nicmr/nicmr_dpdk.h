/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * nicmr inside a DPDK application: DPDK's memory (memsegs) as nicmr pools kept in sync with
 * DPDK's memory events, registration of an rte_mempool's memory with per-address key lookup,
 * and nicmr's log lines through DPDK's rte_log. Installed only by a build with DPDK; the calls
 * are in libnicmr.so. doc/dpdk.md is the guide (defaults, limits, every error).
 *
 * Every call returns 0 or a negative errno and never exits; none needs a DPDK header here
 * (struct rte_mempool is only named).
 */
#ifndef NICMR_NICMR_DPDK_H
#define NICMR_NICMR_DPDK_H

#include <stddef.h>
#include <stdint.h>

#include "nicmr/nicmr.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rte_mempool;

/* ---- Memsegs as pools --------------------------------------------------------------------- */

/** DPDK's memory attached to a device as pools (nicmr_dpdk_mem_attach). */
struct nicmr_dpdk_mem;

/**
 * Makes every VA-contiguous run of the EAL's memsegs a pool of dev (rte_memseg_contig_walk),
 * and follows DPDK's memory events from then on (rte_mem_event_callback_register):
 *   - alloc: the new run becomes a pool (pages of its memseg list's size), before DPDK hands
 *     the memory out; regions inside it register on the fast path;
 *   - free: every pool the freed range touches is destroyed, before DPDK unmaps the pages;
 *     what is left of a pool freed in part comes back as pools of its own. A pool that still
 *     holds MRs cannot be destroyed (nicmr_pool_destroy's -EBUSY) and DPDK cannot be refused
 *     a free, so such a pool is KEPT: it stays mapped and in lookups, its MRs keep working on
 *     the pages the IOMMU mapping holds, and an error is logged. It is destroyed at the first
 *     memory event or nicmr_dpdk_mem_query after its last MR is deregistered. Until then DPDK
 *     memory allocated again at those addresses is not made a pool (logged). Deregister MRs
 *     (nicmr_dpdk_mempool_dereg) before freeing their memory (rte_mempool_free).
 * In legacy memory mode (--legacy-mem, --no-huge) DPDK has no memory events and its memory
 * never changes: the pools of the walk are all there is.
 * Also routes nicmr's log lines to rte_log (nicmr_dpdk_log_register). One attach per device.
 * Call after rte_eal_init(); slow path; any thread. The memory event callbacks run on the
 * thread that makes DPDK allocate or free, with DPDK's memory hotplug lock held.
 * @return 0;
 *   -EINVAL  null argument;
 *   -EEXIST  dev already has DPDK memory attached, or a memseg run overlaps a pool of dev
 *            (nicmr_pool_import of DPDK memory);
 *   -ENOSPC  IOVA space exhausted; -ENOMEM; the IOMMU's errors;
 *   -rte_errno of rte_mem_event_callback_register (e.g. -ENOSPC: DPDK's callback list full).
 *   On failure no pool of the attach is left.
 */
int nicmr_dpdk_mem_attach(struct nicmr_device *dev, struct nicmr_dpdk_mem **out);

/**
 * Stops following DPDK's memory events and destroys every pool the attach made. Slow path;
 * any thread, not concurrently with a registration inside those pools.
 * @return 0; -EINVAL (null); -EBUSY (MRs live in its pools, kept ones included: nothing
 *   changed, deregister them first).
 */
int nicmr_dpdk_mem_detach(struct nicmr_dpdk_mem *mem);

struct nicmr_dpdk_mem_info {
	uint32_t pools; /**< pools the attach holds now, kept ones included */
	uint32_t kept;	/**< pools kept after DPDK freed their memory (MRs live in them) */
	int events;	/**< 1: DPDK's memory events are followed; 0: legacy memory mode */
	uint32_t pad;
};

/**
 * Destroys the kept pools whose MRs are gone, then describes the attach. Slow path; any
 * thread. @return 0; -EINVAL (null argument).
 */
int nicmr_dpdk_mem_query(struct nicmr_dpdk_mem *mem, struct nicmr_dpdk_mem_info *info);

/* ---- Mempools ----------------------------------------------------------------------------- */

/** A mempool's memory registered (nicmr_dpdk_mempool_reg): one MR per range of its memory. */
struct nicmr_dpdk_mempool_mr;

/**
 * Registers the memory of a populated mempool, as DPDK's mlx5 PMD registers its mempools:
 * its chunks (rte_mempool_mem_iter), sorted, touching chunks inside one pool of the device
 * merged, each range one MR of pd with access (nicmr_mr_reg: ranges inside a pool, such as
 * memsegs attached with nicmr_dpdk_mem_attach, take the fast path; others the slow path).
 * Every object and mbuf of mp is then inside one of its MRs. The mempool must stay populated
 * and alive until nicmr_dpdk_mempool_dereg. Slow path; any thread.
 * @return 0;
 *   -EINVAL  null argument, or access that nicmr_mr_reg refuses;
 *   -ENOENT  mp has no memory (not populated);
 *   -ENOMEM;
 *   the first error of nicmr_mr_reg for a range (-ENOSPC no free key, -EFAULT, ...).
 *   On failure every MR the call registered is deregistered again and nothing is left.
 */
int nicmr_dpdk_mempool_reg(struct nicmr_pd *pd, struct rte_mempool *mp, uint64_t access,
			   struct nicmr_dpdk_mempool_mr **out);

/**
 * Deregisters every MR of the mempool registration and frees it. Slow path; any thread, not
 * concurrently with other uses of mmr (its key lookups included).
 * @return 0; -EINVAL (null); an MR's nicmr_mr_dereg error (-EBUSY: sub-MRs of it live): the
 *   MRs before it are deregistered, mmr stays valid with the rest, and the call may be
 *   repeated.
 */
int nicmr_dpdk_mempool_dereg(struct nicmr_dpdk_mempool_mr *mmr);

/**
 * The MR of mmr that holds all of [addr, addr + len), or NULL (null mmr, len 0, wrap, or no
 * MR of it holds the range). HOT PATH: a binary search over its ranges; no lock, no
 * allocation, no system call. Any thread.
 */
struct nicmr_mr *nicmr_dpdk_mempool_mr_of(const struct nicmr_dpdk_mempool_mr *mmr, const void *addr,
					  size_t len);

/**
 * The key (lkey = rkey) of the MR that holds [addr, addr + len): an object's or an mbuf's
 * data (rte_pktmbuf_mtod) address gives the lkey of its SGE, like mlx5's mr lookup per mbuf.
 * 0 when no MR of mmr holds it (0 is never a key). HOT PATH, as nicmr_dpdk_mempool_mr_of.
 */
uint32_t nicmr_dpdk_mempool_key(const struct nicmr_dpdk_mempool_mr *mmr, const void *addr,
				size_t len);

/** How many MRs mmr holds (0 for null). Any thread. */
size_t nicmr_dpdk_mempool_mr_count(const struct nicmr_dpdk_mempool_mr *mmr);

/** MR i of mmr, in address order, or NULL (null mmr, i out of range). Any thread. */
struct nicmr_mr *nicmr_dpdk_mempool_mr_at(const struct nicmr_dpdk_mempool_mr *mmr, size_t i);

/* ---- Logging ------------------------------------------------------------------------------ */

/** The name of nicmr's dynamic rte_log type (--log-level=lib.nicmr:debug). */
#define NICMR_DPDK_LOG_TYPE "lib.nicmr"

/**
 * Registers the rte_log type NICMR_DPDK_LOG_TYPE (rte_log_register_type_and_pick_level, at
 * the level an EAL --log-level option gave it, else nicmr's current level) and sends nicmr's
 * log lines to rte_log from then on, as "nicmr <component>: <message>" at the matching rte_log
 * level (ERR, WARNING, INFO, DEBUG). The type's rte_log level decides which lines are written
 * (rte_log_set_level, or nicmr_log_set, which sets both). A handler installed with
 * nicmr_log_set(level, fn, ctx) still takes every line while it is set; nicmr_log_set(level,
 * NULL, NULL) returns lines to rte_log (not to stderr) once this was called. Repeated calls
 * return the same type. Called by nicmr_dpdk_mem_attach. Slow path; any thread.
 * @return the rte_log type (>= 0); -ENOMEM or -rte_errno of DPDK's registration.
 */
int nicmr_dpdk_log_register(void);

#ifdef __cplusplus
}
#endif

#endif
