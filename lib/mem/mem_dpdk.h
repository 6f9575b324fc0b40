/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DPDK memsegs as pools. In an EAL application the memory belongs to DPDK: DpdkMemSync imports
 * every VA-contiguous run of memsegs (rte_memseg_contig_walk) into a DmaSpace as an external
 * pool, then follows DPDK's memory events (rte_mem_event_callback_register): an allocation
 * adds a pool, a free removes the pools it covers (re-importing what is left of a pool that is
 * freed only in part). This header needs no DPDK header; it is built only with DPDK.
 */
#ifndef NICMR_MEM_DPDK_H
#define NICMR_MEM_DPDK_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "mem_space.h"

namespace nicmr::mem {

class DpdkMemSync {
public:
	/*
	 * Call after rte_eal_init(), from any thread. space must outlive the returned object.
	 * Errors: -EINVAL (out null), the errors of DmaSpace::add_pool (-ENOSPC, -EEXIST, mapper
	 * errors), -rte_errno of rte_mem_event_callback_register other than ENOTSUP (legacy memory
	 * mode has no events, and needs none: its memory never changes). Nothing stays behind on
	 * failure.
	 */
	static int create(DmaSpace &space, std::unique_ptr<DpdkMemSync> *out);
	/* Stops following events, then removes every pool this object added. */
	~DpdkMemSync();
	DpdkMemSync(const DpdkMemSync &) = delete;
	DpdkMemSync &operator=(const DpdkMemSync &) = delete;

	/* Pools this object holds in the space now. */
	size_t pool_count() const;
	/* Whether memory events are followed (false in legacy memory mode). */
	bool following_events() const noexcept { return registered_; }

private:
	friend struct DpdkCallbacks; /* DPDK's C callbacks, in mem_dpdk.cpp */
	explicit DpdkMemSync(DmaSpace &space);
	/* Alloc and free events; DPDK calls them with its memory hotplug lock held. */
	void on_event(bool alloc, const void *addr, size_t len);
	int import_range(uintptr_t va, size_t len, size_t page_size);
	void release_range(uintptr_t va, size_t len);

	struct Held {
		size_t len;
		size_t page_size;
		const Pool *pool;
	};
	DmaSpace &space_;
	mutable std::mutex mu_;
	std::map<uintptr_t, Held> pools_; /* va -> pool, under mu_ */
	std::string cb_name_;
	bool registered_ = false;
	int walk_rc_ = 0; /* first error of the memseg walk */
};

} // namespace nicmr::mem

#endif
