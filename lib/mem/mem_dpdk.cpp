/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DPDK memsegs as pools. DPDK calls memory event callbacks with its memory hotplug lock held
 * for writing, alloc events after the pages are mapped and free events before they are
 * unmapped; so a pool is always in the space while DPDK could hand its memory out. Inside a
 * callback only the *_thread_unsafe and lockless DPDK calls are allowed (rte_mem_virt2memseg_list
 * is one).
 */
#include "mem_dpdk.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include <rte_eal_memconfig.h>
#include <rte_errno.h>
#include <rte_memory.h>
#include <rte_mempool.h>

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

int SpaceSink::add(std::unique_ptr<Pool> pool, void **token)
{
	const Pool *raw = pool.get();
	int rc = space_.add_pool(std::move(pool), nullptr);
	if (rc == 0)
		*token = const_cast<Pool *>(raw);
	return rc;
}

int SpaceSink::remove(void *token)
{
	return space_.remove_pool(static_cast<const Pool *>(token));
}

DpdkMemSync::DpdkMemSync(std::unique_ptr<PoolSink> own, PoolSink &sink)
    : own_sink_(std::move(own)), sink_(sink)
{
	char name[RTE_MEM_EVENT_CALLBACK_NAME_LEN];
	std::snprintf(name, sizeof(name), "nicmr-mem-%p", static_cast<void *>(this));
	cb_name_ = name;
}

int DpdkMemSync::create(DmaSpace &space, std::unique_ptr<DpdkMemSync> *out)
{
	if (out == nullptr)
		return -EINVAL;
	std::unique_ptr<PoolSink> own(new (std::nothrow) SpaceSink(space));
	if (!own)
		return -ENOMEM;
	PoolSink &sink = *own;
	std::unique_ptr<DpdkMemSync> sync(new (std::nothrow) DpdkMemSync(std::move(own), sink));
	if (!sync)
		return -ENOMEM;
	return start(std::move(sync), out);
}

int DpdkMemSync::create(PoolSink &sink, std::unique_ptr<DpdkMemSync> *out)
{
	if (out == nullptr)
		return -EINVAL;
	std::unique_ptr<DpdkMemSync> sync(new (std::nothrow) DpdkMemSync(nullptr, sink));
	if (!sync)
		return -ENOMEM;
	return start(std::move(sync), out);
}

int DpdkMemSync::start(std::unique_ptr<DpdkMemSync> sync, std::unique_ptr<DpdkMemSync> *out)
{
	/*
	 * The read lock keeps DPDK from allocating or freeing between the walk and the callback
	 * registration: no event can fall in between and be missed.
	 */
	rte_mcfg_mem_read_lock();
	std::unique_lock<std::mutex> lock(sync->mu_);
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
	lock.unlock();
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
	for (auto *held : {&pools_, &kept_}) {
		for (auto &p : *held) {
			int rc = sink_.remove(p.second.token);
			if (rc == -EBUSY)
				NICMR_LOG(error, kLog,
					  "pool %#zx + %zu removed with its user still there",
					  static_cast<size_t>(p.first), p.second.len);
		}
		held->clear();
	}
}

size_t DpdkMemSync::pool_count() const
{
	std::lock_guard<std::mutex> lock(mu_);
	return pools_.size() + kept_.size();
}

size_t DpdkMemSync::kept_count() const
{
	std::lock_guard<std::mutex> lock(mu_);
	return kept_.size();
}

std::vector<void *> DpdkMemSync::tokens() const
{
	std::lock_guard<std::mutex> lock(mu_);
	std::vector<void *> out;
	out.reserve(pools_.size() + kept_.size());
	for (const auto *held : {&pools_, &kept_})
		for (const auto &p : *held)
			out.push_back(p.second.token);
	return out;
}

size_t DpdkMemSync::retry_kept()
{
	std::lock_guard<std::mutex> lock(mu_);
	return retry_kept_locked();
}

size_t DpdkMemSync::retry_kept_locked()
{
	for (auto it = kept_.begin(); it != kept_.end();) {
		if (sink_.remove(it->second.token) == -EBUSY) {
			++it;
			continue;
		}
		NICMR_LOG(info, kLog, "kept pool %#zx + %zu removed: its users are gone",
			  static_cast<size_t>(it->first), it->second.len);
		it = kept_.erase(it);
	}
	return kept_.size();
}

/* Under mu_. */
int DpdkMemSync::import_range(uintptr_t va, size_t len, size_t page_size)
{
	std::unique_ptr<Pool> pool;
	int rc = Pool::import(reinterpret_cast<void *>(va), len, page_size, -1, "dpdk", &pool);
	if (rc != 0) {
		walk_rc_ = walk_rc_ != 0 ? walk_rc_ : rc;
		return rc;
	}
	void *token = nullptr;
	rc = sink_.add(std::move(pool), &token);
	if (rc != 0) {
		NICMR_LOG(error, kLog, "memseg run %#zx + %zu: add_pool: %d",
			  static_cast<size_t>(va), len, rc);
		walk_rc_ = walk_rc_ != 0 ? walk_rc_ : rc;
		return rc;
	}
	pools_.emplace(va, Held{len, page_size, token});
	return 0;
}

/* Under mu_. */
void DpdkMemSync::release_range(uintptr_t va, size_t len)
{
	const uintptr_t end = va + len;
	std::vector<std::pair<uintptr_t, Held>> hit;
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
	for (auto &[pva, held] : hit) {
		if (sink_.remove(held.token) == -EBUSY) {
			/* The pool's owner has users in it (MRs): DPDK frees the memory anyway, so
			 * the pool stays whole and mapped until they are gone (retry_kept). */
			NICMR_LOG(error, kLog,
				  "DPDK freed %#zx + %zu inside pool %#zx + %zu, which is in use: "
				  "pool kept until its MRs are deregistered",
				  static_cast<size_t>(va), len, static_cast<size_t>(pva), held.len);
			kept_.emplace(pva, held);
			continue;
		}
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
	std::lock_guard<std::mutex> lock(mu_);
	/* Every event is a chance to drop the kept pools whose users have gone. */
	retry_kept_locked();
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

namespace {
struct ChunkWalk {
	std::vector<MempoolRange> *out;
	bool failed = false;
};
} // namespace

int mempool_ranges(const struct rte_mempool *mp,
		   bool (*same_pool)(void *ctx, uintptr_t a, uintptr_t b), void *ctx,
		   std::vector<MempoolRange> *out)
{
	if (mp == nullptr || out == nullptr)
		return -EINVAL;
	out->clear();
	ChunkWalk walk{out};
	/* rte_mempool_mem_iter takes a non-const mempool but only reads its chunk list. */
	rte_mempool_mem_iter(
		const_cast<struct rte_mempool *>(mp),
		[](struct rte_mempool *, void *arg, struct rte_mempool_memhdr *hdr, unsigned) {
			auto *w = static_cast<ChunkWalk *>(arg);
			const auto a = reinterpret_cast<uintptr_t>(hdr->addr);
			if (w->failed || hdr->len == 0)
				return;
			try {
				w->out->push_back({a, a + hdr->len});
			} catch (...) {
				w->failed = true;
			}
		},
		&walk);
	if (walk.failed) {
		out->clear();
		return -ENOMEM;
	}
	if (out->empty())
		return -ENOENT;
	std::sort(out->begin(), out->end(),
		  [](const MempoolRange &x, const MempoolRange &y) { return x.start < y.start; });
	/* Chunks that touch become one range (fewer keys to look up), unless a pool boundary
	 * lies between them: a range across two pools could not take the fast path. */
	size_t n = 0;
	for (size_t i = 1; i < out->size(); ++i) {
		MempoolRange &last = (*out)[n];
		const MempoolRange &r = (*out)[i];
		if (r.start <= last.end &&
		    (same_pool == nullptr || same_pool(ctx, last.start, r.end))) {
			last.end = std::max(last.end, r.end);
			continue;
		}
		(*out)[++n] = r;
	}
	out->resize(n + 1);
	return 0;
}

} // namespace nicmr::mem
