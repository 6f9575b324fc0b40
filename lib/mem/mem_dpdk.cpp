/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DPDK memsegs as pools. DPDK calls memory event callbacks with its memory hotplug lock held
 * for writing, alloc events after the pages are mapped and free events before they are
 * unmapped; so a pool is always in the space while DPDK could hand its memory out. Inside a
 * callback only the *_thread_unsafe and lockless DPDK calls are allowed (rte_mem_virt2memseg_list
 * is one).
 */
#include "mem_dpdk.h"

#include <cerrno>
#include <cstdio>
#include <vector>

#include <rte_eal_memconfig.h>
#include <rte_errno.h>
#include <rte_memory.h>

#include "nicmr_log.h"

namespace nicmr::mem {
namespace {
constexpr const char *kLog = "mem-dpdk";
}

struct DpdkCallbacks {
	static void event(enum rte_mem_event type, const void *addr, size_t len, void *arg)
	{
		static_cast<DpdkMemSync *>(arg)->on_event(type == RTE_MEM_EVENT_ALLOC, addr, len);
	}

	static int walk(const struct rte_memseg_list *msl, const struct rte_memseg *ms, size_t len,
			void *arg)
	{
		auto *sync = static_cast<DpdkMemSync *>(arg);
		/* A negative return stops the walk; create() then undoes what was added. */
		return sync->import_range(reinterpret_cast<uintptr_t>(ms->addr), len,
					  msl->page_sz) == 0
			       ? 0
			       : -1;
	}
};

DpdkMemSync::DpdkMemSync(DmaSpace &space) : space_(space)
{
	char name[RTE_MEM_EVENT_CALLBACK_NAME_LEN];
	std::snprintf(name, sizeof(name), "nicmr-mem-%p", static_cast<void *>(this));
	cb_name_ = name;
}

int DpdkMemSync::create(DmaSpace &space, std::unique_ptr<DpdkMemSync> *out)
{
	if (out == nullptr)
		return -EINVAL;
	std::unique_ptr<DpdkMemSync> sync(new (std::nothrow) DpdkMemSync(space));
	if (!sync)
		return -ENOMEM;
	/*
	 * The read lock keeps DPDK from allocating or freeing between the walk and the callback
	 * registration: no event can fall in between and be missed.
	 */
	rte_mcfg_mem_read_lock();
	int rc = 0;
	if (rte_mem_event_callback_register(sync->cb_name_.c_str(), DpdkCallbacks::event,
					    sync.get()) == 0) {
		sync->registered_ = true;
	} else if (rte_errno == ENOTSUP) {
		NICMR_LOG(info, kLog, "legacy memory mode: no memory events, memsegs are fixed");
	} else {
		rc = -rte_errno;
		NICMR_LOG(error, kLog, "rte_mem_event_callback_register: %d", rc);
	}
	if (rc == 0 && rte_memseg_contig_walk_thread_unsafe(DpdkCallbacks::walk, sync.get()) != 0)
		rc = sync->walk_rc_ != 0 ? sync->walk_rc_ : -EIO;
	rte_mcfg_mem_read_unlock();
	if (rc != 0)
		return rc; /* the destructor unregisters and removes what was added */
	NICMR_LOG(info, kLog, "%zu pools from DPDK memsegs", sync->pool_count());
	*out = std::move(sync);
	return 0;
}

DpdkMemSync::~DpdkMemSync()
{
	/* Unregistering waits for a callback that is running: none runs after this line. */
	if (registered_)
		rte_mem_event_callback_unregister(cb_name_.c_str(), this);
	std::lock_guard<std::mutex> lock(mu_);
	for (auto &p : pools_)
		space_.remove_pool(p.second.pool);
	pools_.clear();
}

size_t DpdkMemSync::pool_count() const
{
	std::lock_guard<std::mutex> lock(mu_);
	return pools_.size();
}

int DpdkMemSync::import_range(uintptr_t va, size_t len, size_t page_size)
{
	std::unique_ptr<Pool> pool;
	int rc = Pool::import(reinterpret_cast<void *>(va), len, page_size, -1, "dpdk", &pool);
	if (rc != 0) {
		walk_rc_ = walk_rc_ != 0 ? walk_rc_ : rc;
		return rc;
	}
	const Pool *raw = pool.get();
	const PoolEntry *entry = nullptr;
	rc = space_.add_pool(std::move(pool), &entry);
	if (rc != 0) {
		NICMR_LOG(error, kLog, "memseg run %#zx + %zu: add_pool: %d",
			  static_cast<size_t>(va), len, rc);
		walk_rc_ = walk_rc_ != 0 ? walk_rc_ : rc;
		return rc;
	}
	std::lock_guard<std::mutex> lock(mu_);
	pools_.emplace(va, Held{len, page_size, raw});
	return 0;
}

void DpdkMemSync::release_range(uintptr_t va, size_t len)
{
	const uintptr_t end = va + len;
	std::vector<std::pair<uintptr_t, Held>> hit;
	{
		std::lock_guard<std::mutex> lock(mu_);
		auto it = pools_.upper_bound(va);
		if (it != pools_.begin())
			--it;
		while (it != pools_.end() && it->first < end) {
			if (it->first + it->second.len > va) {
				hit.emplace_back(*it);
				it = pools_.erase(it);
			} else {
				++it;
			}
		}
	}
	for (auto &[pva, held] : hit) {
		space_.remove_pool(held.pool);
		/* What DPDK keeps of a pool freed in part comes back as pools of its own. */
		if (pva < va)
			import_range(pva, va - pva, held.page_size);
		if (pva + held.len > end)
			import_range(end, pva + held.len - end, held.page_size);
	}
}

void DpdkMemSync::on_event(bool alloc, const void *addr, size_t len)
{
	const uintptr_t va = reinterpret_cast<uintptr_t>(addr);
	if (!alloc) {
		release_range(va, len);
		return;
	}
	const struct rte_memseg_list *msl = rte_mem_virt2memseg_list(addr);
	if (msl == nullptr) {
		NICMR_LOG(error, kLog, "alloc event at %p: no memseg list", addr);
		return;
	}
	int rc = import_range(va, len, msl->page_sz);
	if (rc != 0)
		NICMR_LOG(error, kLog,
			  "alloc event %p + %zu: not made a pool (%d); DMA to it fails", addr, len,
			  rc);
}

} // namespace nicmr::mem
