/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The nicmr libfabric provider's ops extension (doc/libfabric.md).
 *
 * Registrations inside a nicmr pool take the fast path (no mapping, no pinning); memory the
 * application allocated any other way takes the slow path. This extension lets a libfabric
 * application make pools on the domain's device, or import memory it already owns (its
 * hugepages) as a pool:
 *
 *   struct fi_nicmr_pool_ops *ops;
 *   fi_open_ops(&domain->fid, FI_NICMR_POOL_OPS, 0, (void **)&ops, NULL);
 *   ops->pool_create(domain, 64 << 20, NICMR_PAGE_2M, NICMR_NUMA_ANY,
 *                    FI_NICMR_POOL_FALLBACK, &pool);
 *   fi_mr_reg(domain, ops->pool_addr(pool), 4096, ...);   // fast path
 *
 * Every call returns 0 or a negative libfabric error code; none aborts or exits.
 */
#ifndef NICMR_FI_NICMR_H
#define NICMR_FI_NICMR_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "nicmr/nicmr.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The name to give fi_open_ops on a nicmr domain. */
#define FI_NICMR_POOL_OPS "nicmr_pool_ops"

/** pool_create flag: use 4 KiB pages when no hugepage of page_size is free. */
#define FI_NICMR_POOL_FALLBACK (1ull << 0)

/** A pool of a domain's device (opaque). */
struct fi_nicmr_pool;

struct fi_nicmr_pool_ops {
	size_t size; /**< sizeof(struct fi_nicmr_pool_ops) of the provider */

	/**
	 * Allocates a pool of size bytes (rounded up to page_size) and maps it for the device.
	 * @param page_size NICMR_PAGE_4K, NICMR_PAGE_2M or NICMR_PAGE_1G
	 * @param numa_node NICMR_NUMA_ANY or a node
	 * @param flags FI_NICMR_POOL_FALLBACK or 0
	 * @return 0; -FI_EINVAL (null argument, size 0, unknown page size or node);
	 *   -FI_EBADFLAGS (unknown flag); -FI_ENOMEM (no free hugepages and no fallback);
	 *   -FI_ENOSPC (IOVA space exhausted).
	 */
	int (*pool_create)(struct fid_domain *domain, size_t size, size_t page_size, int numa_node,
			   uint64_t flags, struct fi_nicmr_pool **pool);
	/**
	 * Imports [addr, addr + len), memory the application mapped (and keeps mapped until
	 * pool_destroy), backed by pages of page_size. nicmr never frees it.
	 * @return 0; -FI_EINVAL (null argument, len 0, unknown page size, addr or len not a
	 *   multiple of page_size); -FI_EEXIST (overlaps a pool of the device); -FI_ENOSPC.
	 */
	int (*pool_import)(struct fid_domain *domain, void *addr, size_t len, size_t page_size,
			   struct fi_nicmr_pool **pool);
	/**
	 * Unmaps the pool from the device (and frees it when pool_create made it).
	 * @return 0; -FI_EINVAL (null); -FI_EBUSY (MRs inside it are open).
	 */
	int (*pool_destroy)(struct fi_nicmr_pool *pool);
	/** The pool's start address; NULL for a null pool. */
	void *(*pool_addr)(const struct fi_nicmr_pool *pool);
	/** The pool's length in bytes; 0 for a null pool. */
	size_t (*pool_len)(const struct fi_nicmr_pool *pool);
	/** 1: mr took the fast path (inside a pool); 0: slow path; -FI_EINVAL: null or not a
	 * nicmr MR. */
	int (*mr_in_pool)(struct fid_mr *mr);
	/** The domain's device counters (live MRs, pools, slow-path mappings, pinned pages...).
	 * @return 0; -FI_EINVAL (null argument). */
	int (*device_stats)(struct fid_domain *domain, struct nicmr_device_stats *stats);
	/**
	 * The domain's device attributes (nicmr_device_query): among them atomic_mode, the
	 * byte order of the device's atomics. FI_ATOMIC is offered only in NICMR_ATOMIC_HOST
	 * mode, where the FI_UINT64 target and fetched values are in host byte order as
	 * fi_atomic(3) defines them; in any other mode fi_getinfo leaves FI_ATOMIC out and every
	 * atomic call, fi_query_atomic and fi_atomicvalid are -FI_EOPNOTSUPP. Present when
	 * size covers it (providers before it lack the member).
	 * @return 0; -FI_EINVAL (null argument).
	 */
	int (*device_query)(struct fid_domain *domain, struct nicmr_device_attr *attr);
};

/**
 * The name to give fi_open_ops on a nicmr domain for libfabric 2.x's MR attributes that the
 * 1.17 headers lack: sub-MRs (fi_mr_attr.base_mr) and the translation page size
 * (fi_mr_attr.page_size). Built against 2.x headers, fi_mr_regattr takes the standard fields
 * as well; this extension stays for applications built against 1.x.
 */
#define FI_NICMR_MR_OPS "nicmr_mr_ops"

/**
 * fi_nicmr_mr_ops.regattr flag: a single-use key (libfabric 2.x's FI_MR_SINGLE_USE, which the
 * 1.x headers lack): the device invalidates the key after the first remote RMA or atomic
 * operation through it that passes the access checks (of racing ones exactly one gets
 * through); every later remote access completes at the initiator with an FI_EACCES error
 * entry. fi_close deregisters it as any MR. A device-model extension: no ConnectX has it, and
 * on a device without it (emu ext=0 or ext=rma_event) the flag is -FI_EOPNOTSUPP. One range
 * only: with base_mr or iov_count above 1 it is -FI_EBADFLAGS; a single-use MR is no base_mr.
 * A bit of libfabric's provider-specific range (60 .. 63); fi_mr_reg, fi_mr_regv and
 * fi_mr_regattr refuse it (-FI_EBADFLAGS). Built against 2.x headers, FI_MR_SINGLE_USE given
 * to any of them means the same.
 */
#define FI_NICMR_MR_SINGLE_USE (1ull << 60)

/**
 * fi_mr_reg / fi_mr_regattr / fi_nicmr_mr_ops.regattr flag: an on-demand-paging MR (ibv_reg_mr(3)'s
 * IBV_ACCESS_ON_DEMAND, which libfabric 1.17 has no flag for; the native
 * NICMR_ACCESS_ON_DEMAND, doc/odp.md): nothing is pinned or mapped at registration and every
 * page starts not present to the device; fi_nicmr_mr_ops.advise makes pages present. One range
 * in a domain with FI_MR_VIRT_ADDR: with base_mr, iov_count above 1, FI_RMA_EVENT or
 * FI_NICMR_MR_SINGLE_USE it is -FI_EBADFLAGS; without FI_MR_VIRT_ADDR -FI_EBADFLAGS; on a
 * device without on-demand paging -FI_EOPNOTSUPP; more than 1 GiB of pages -FI_EINVAL. A bit of
 * libfabric's provider-specific range (60 .. 63).
 */
#define FI_NICMR_MR_ON_DEMAND (1ull << 61)

struct fi_nicmr_mr_ops {
	size_t size; /**< sizeof(struct fi_nicmr_mr_ops) of the provider */

	/**
	 * fi_mr_regattr with 2.x's base_mr and page_size.
	 *
	 * base_mr non-NULL: a sub-MR of base_mr, a registered MR of the same domain: attr->mr_iov
	 * names [addr, addr + len) inside base_mr's range; the sub-MR has its own key and
	 * attr->access, which may grant nothing base_mr does not; it shares base_mr's
	 * translations (page_size must be 0). fi_close(base_mr) is -FI_EBUSY while sub-MRs of it
	 * are open.
	 *
	 * page_size (without base_mr): 0 for the provider's choice, else the page size the MR's
	 * translations may use: a power of two from 4 KiB to 1 GiB, no larger than the pages
	 * backing the memory (a nicmr pool's page size; 4 KiB outside pools), and for an
	 * offset-based MR (no FI_MR_VIRT_ADDR) the start must be a multiple of it.
	 *
	 * attr's other fields as fi_mr_regattr: with attr->iov_count 2 .. 64 a vectored MR
	 * (doc/libfabric.md, "Vectored MRs"), which takes neither base_mr nor page_size, and
	 * cannot itself be a base_mr. Slow path; any thread.
	 * @param flags 0, FI_NICMR_MR_SINGLE_USE, and FI_RMA_EVENT in a domain with
	 *   FI_MR_RMA_EVENT (as fi_mr_regattr; both may be given, for one range without base_mr)
	 * @return 0; -FI_EINVAL (null domain, attr or mr; not a nicmr domain; attr as
	 *   fi_mr_regattr refuses it; base_mr not an open MR of this domain, or vectored, or
	 *   single-use, or registered with FI_RMA_EVENT, or with iov_count other than 1; the
	 *   range not inside base_mr; page_size with base_mr or with iov_count above 1; a page
	 *   size above); -FI_EACCES (access beyond base_mr's); -FI_EBADFLAGS (an unknown flag; a
	 *   flag with base_mr or iov_count above 1; FI_RMA_EVENT without FI_MR_RMA_EVENT);
	 *   -FI_EOPNOTSUPP (FI_NICMR_MR_SINGLE_USE on a device without single-use keys);
	 *   -FI_ENOSYS (attr->iface not system); the key and resource codes of fi_mr_reg
	 *   (-FI_ENOKEY, -FI_EKEYREJECTED, -FI_ENOSPC, -FI_ENOMEM); -FI_EOVERFLOW (base_mr has as
	 *   many sub-MRs as it can hold).
	 */
	int (*regattr)(struct fid_domain *domain, const struct fi_mr_attr *attr,
		       struct fid_mr *base_mr, size_t page_size, uint64_t flags,
		       struct fid_mr **mr);
	/** 1: mr is a sub-MR; 0: not; -FI_EINVAL: null or not a nicmr MR. */
	int (*mr_is_sub)(struct fid_mr *mr);

	/**
	 * ibv_advise_mr(3) on an FI_NICMR_MR_ON_DEMAND MR (the native nicmr_advise_mr, doc/odp.md):
	 * makes the pages of [addr, addr + len) present to the device. Slow path; any thread.
	 * Present when size covers it (providers before it lack it).
	 * @param advice 0 prefetch, 1 prefetch for writing, 2 no fault (NICMR_ADVISE_MR_ADVICE_*)
	 * @param flags 0 or 1 (NICMR_ADVISE_MR_FLAG_FLUSH)
	 * @param addr, len the range, in the MR's address space; len below 4 GiB, 0 does nothing
	 * @return 0; -FI_EINVAL (null or not a nicmr MR; len of 4 GiB or more; an unknown flag);
	 *   -FI_EOPNOTSUPP (the device lacks on-demand paging; an unknown advice); -FI_ENOENT
	 *   (mr is not on-demand); -FI_EFAULT (the range outside the MR or not mapped in the
	 *   process); -FI_EPERM (prefetch for writing without FI_WRITE/FI_RECV/FI_REMOTE_WRITE
	 *   access); -FI_ENOMEM (pages could not be pinned or mapped); -FI_EBUSY (the MR is being
	 *   closed meanwhile).
	 */
	int (*advise)(struct fid_mr *mr, uint32_t advice, uint32_t flags, uint64_t addr,
		      size_t len);
};

/*
 * An endpoint's name (fi_getname, fi_av_insert; addr_format FI_FORMAT_UNSPEC): 40 bytes, every
 * multi-byte field in network order, valid in another process and on another host
 * (doc/libfabric.md, "Addresses"). fi_av_insert refuses a name whose magic, version, kind,
 * port or qpn is not one of these with -FI_EINVAL.
 */
#define FI_NICMR_NAME_MAGIC   0x4e4d5241u /* "NMRA" */
#define FI_NICMR_NAME_VERSION 1
/** kind: the device's port is on the UDP wire (gid, udp_port name it to any peer). */
#define FI_NICMR_NAME_WIRE 1
/** kind: a device without a wire; reachable only by endpoints of the same device. */
#define FI_NICMR_NAME_LOCAL 2
struct fi_nicmr_name {
	uint32_t magic;	   /**< FI_NICMR_NAME_MAGIC */
	uint8_t version;   /**< FI_NICMR_NAME_VERSION */
	uint8_t kind;	   /**< FI_NICMR_NAME_WIRE or FI_NICMR_NAME_LOCAL */
	uint16_t udp_port; /**< the wire port's UDP port (0 for LOCAL) */
	uint8_t gid[16];   /**< the wire port's GID (IPv4-mapped for IPv4; 0 for LOCAL) */
	uint32_t qpn;	   /**< the endpoint's address QP: its handshake UD QP (WIRE), its own
				RC QP (LOCAL); 1 .. 2^24 - 1 */
	uint32_t port;	   /**< the device port of the endpoint's in-device pairs, 1 or 2 */
	uint64_t
		device_id; /**< the device (nicmr_device_id): names of one device meet in-process */
};

#ifdef __cplusplus
}
#endif

#endif
