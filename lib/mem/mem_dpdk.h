/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DPDK memsegs as pools. In an EAL application the memory belongs to DPDK: DpdkMemSync imports
 * every VA-contiguous run of memsegs (rte_memseg_contig_walk) as an external pool, then follows
 * DPDK's memory events (rte_mem_event_callback_register):
 *
 *   alloc [a, a + n)  ->  a pool of its own for the new run (pages of the memseg list's size)
 *   free  [a, a + n)  ->  every pool it touches is removed; what is left of a pool freed only
 *                         in part comes back as pools of its own
 *                         a pool its owner refuses to remove (-EBUSY: MRs live in it) is kept,
 *                         mapped, until a later retry_kept() (every event retries) removes it
 *
 * A free event cannot be refused (DPDK's callback returns nothing, and calls it before it
 * unmaps the pages), so a busy pool is kept rather than torn down under its MRs: its DMA
 * mapping and IOVA stay, and an alloc event that meets it imports nothing there (-EEXIST).
 *
 * Where pools go is a PoolSink's business: SpaceSink adds them straight to a DmaSpace; the
 * native API's sink makes nicmr_pool objects and says -EBUSY for pools with live MRs.
 * This header needs no DPDK header; it is built only with DPDK.
 */
#ifndef NICMR_MEM_DPDK_H
#define NICMR_MEM_DPDK_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mem_space.h"

struct rte_mempool;

namespace nicmr::mem {

/* What a DpdkMemSync does with the pools it makes. Called with the sync's lock held and, from
 * memory events, with DPDK's memory hotplug lock held: no DPDK memory allocation in them. */
class PoolSink {
public:
	virtual ~PoolSink() = default;
	/* Takes the pool (destroyed on failure); *token names it in remove(). 0 or an error of
	 * DmaSpace::add_pool. */
	virtual int add(std::unique_ptr<Pool> pool, void **token) = 0;
	/* 0: removed; -EBUSY: it must stay (it is kept and retried); another error: removed all
	 * the same (logged). */
	virtual int remove(void *token) = 0;
};

/* A sink that adds pools to a DmaSpace and always removes them. */
class SpaceSink final : public PoolSink {
public:
	explicit SpaceSink(DmaSpace &space) : space_(space) {}
	int add(std::unique_ptr<Pool> pool, void **token) override;
	int remove(void *token) override;

private:
	DmaSpace &space_;
};

class DpdkMemSync {
public:
	/*
	 * Call after rte_eal_init(), from any thread. space (sink) must outlive the returned
	 * object. Errors: -EINVAL (out null), the errors of the sink's add (DmaSpace::add_pool:
	 * -ENOSPC, -EEXIST, mapper errors), -rte_errno of rte_mem_event_callback_register other
	 * than ENOTSUP (legacy memory mode has no events, and needs none: its memory never
	 * changes). Nothing stays behind on failure.
	 */
	static int create(DmaSpace &space, std::unique_ptr<DpdkMemSync> *out);
	static int create(PoolSink &sink, std::unique_ptr<DpdkMemSync> *out);
	/* Stops following events, then removes every pool this object added (the sink's -EBUSY
	 * is not heard here: see busy()). */
	~DpdkMemSync();
	DpdkMemSync(const DpdkMemSync &) = delete;
	DpdkMemSync &operator=(const DpdkMemSync &) = delete;

	/* Pools this object holds now, kept ones included. */
	size_t pool_count() const;
	/* Pools kept after DPDK freed their memory, because the sink said -EBUSY. */
	size_t kept_count() const;
	/* Whether memory events are followed (false in legacy memory mode). */
	bool following_events() const noexcept { return registered_; }
	/* Asks the sink again to remove the kept pools; returns how many are still kept. */
	size_t retry_kept();
	/* Tokens of every pool held now (kept ones included), for a caller that must check its
	 * pools before destroying this object. */
	std::vector<void *> tokens() const;

private:
	friend struct DpdkCallbacks; /* DPDK's C callbacks, in mem_dpdk.cpp */
	DpdkMemSync(std::unique_ptr<PoolSink> own, PoolSink &sink);
	static int start(std::unique_ptr<DpdkMemSync> sync, std::unique_ptr<DpdkMemSync> *out);
	/* Alloc and free events; DPDK calls them with its memory hotplug lock held. */
	void on_event(bool alloc, const void *addr, size_t len);
	int import_range(uintptr_t va, size_t len, size_t page_size);
	void release_range(uintptr_t va, size_t len);
	size_t retry_kept_locked();

	struct Held {
		size_t len;
		size_t page_size;
		void *token;
	};
	std::unique_ptr<PoolSink> own_sink_; /* create(DmaSpace &)'s SpaceSink */
	PoolSink &sink_;
	mutable std::mutex mu_;
	std::map<uintptr_t, Held> pools_; /* va -> pool, under mu_ */
	std::map<uintptr_t, Held> kept_;  /* freed by DPDK, refused by the sink; under mu_ */
	std::string cb_name_;
	bool registered_ = false;
	int walk_rc_ = 0; /* first error of the memseg walk */
};

/* A range of a mempool's memory (rte_mempool_mem_iter's chunks, merged). */
struct MempoolRange {
	uintptr_t start;
	uintptr_t end;
};

/*
 * The memory of a populated mempool as registration ranges: its chunks (rte_mempool_mem_iter)
 * sorted, and chunks that touch or overlap merged into one range, as DPDK's mlx5 PMD
 * (drivers/common/mlx5/mlx5_common_mr.c, mlx5_get_mempool_ranges) turns a mempool into few MRs. A
 * merged range is made only when same_pool(ctx, start, end) says [start, end) lies in one
 * pool (null same_pool: merge every touching pair). 0; -EINVAL (null mp or out); -ENOENT (the
 * mempool has no memory: not populated); -ENOMEM. Slow path; the caller keeps mp alive.
 */
int mempool_ranges(const struct rte_mempool *mp,
		   bool (*same_pool)(void *ctx, uintptr_t a, uintptr_t b), void *ctx,
		   std::vector<MempoolRange> *out);

} // namespace nicmr::mem

#endif
