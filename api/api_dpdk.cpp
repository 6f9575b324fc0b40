/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * include/nicmr/nicmr_dpdk.h over lib/mem's DPDK support: handles to engines, nothing more.
 *
 *   nicmr_dpdk_mem ── ApiSink (pools become nicmr_pools of the device) ── mem::DpdkMemSync
 *   nicmr_dpdk_mempool_mr ── ranges (mem::mempool_ranges), sorted ── one nicmr_mr each
 *   nicmr_dpdk_log_register ── nicmr::LogBackend over rte_log's dynamic type "lib.nicmr"
 *
 * What happens on a memory event (memsegs, kept pools) is lib/mem's (mem_dpdk.h); the sink
 * only says -EBUSY for a pool with live MRs, which nicmr_pool_destroy refuses too; the
 * application cannot destroy these pools itself (-EPERM).
 */
#include <algorithm>
#include <cerrno>
#include <mutex>
#include <new>
#include <vector>

#include <rte_errno.h>
#include <rte_log.h>
#include <rte_mempool.h>

#include "api_internal.h"
#include "mem_dpdk.h"
#include "nicmr/nicmr_dpdk.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

constexpr const char *kLog = "dpdk";

/* The device's side of a DpdkMemSync: DPDK's memory runs become the device's pools. */
class ApiSink final : public mem::PoolSink {
public:
	explicit ApiSink(nicmr_device *dev) : dev_(dev) {}
	int add(std::unique_ptr<mem::Pool> pool, void **token) override
	{
		nicmr_pool *np = nullptr;
		int rc = nicmr_pool_add(dev_, std::move(pool), &np, true);
		if (rc == 0)
			*token = np;
		return rc;
	}
	/* -EBUSY (MRs inside, as nicmr_pool_destroy says) makes lib/mem keep the pool. */
	int remove(void *token) override
	{
		return nicmr_pool_remove(static_cast<nicmr_pool *>(token));
	}

private:
	nicmr_device *dev_;
};

/* Live MRs in a pool, vectored pieces included (what nicmr_pool_destroy checks). */
uint64_t pool_users(nicmr_device *dev, const nicmr_pool *pool)
{
	return pool->pieces.load(std::memory_order_acquire) + nicmr_mr_count(dev, nullptr, pool);
}

} // namespace

struct nicmr_dpdk_mem {
	nicmr_device *dev;
	ApiSink sink;
	std::unique_ptr<mem::DpdkMemSync> sync;
	explicit nicmr_dpdk_mem(nicmr_device *d) : dev(d), sink(d) {}
};

struct nicmr_dpdk_mempool_range {
	uintptr_t start;
	uintptr_t end;
	nicmr_mr *mr;
};

struct nicmr_dpdk_mempool_mr {
	nicmr_device *dev = nullptr;
	std::vector<nicmr_dpdk_mempool_range> ranges; /* sorted by start, disjoint */
};

/* ---- rte_log ---------------------------------------------------------------------------- */

namespace {

/* The type registered (-1: none yet); written once under the registration's lock. */
std::atomic<int> g_log_type{-1};

uint32_t rte_level(LogLevel level) noexcept
{
	switch (level) {
	case LogLevel::error:
		return RTE_LOG_ERR;
	case LogLevel::warn:
		return RTE_LOG_WARNING;
	case LogLevel::info:
		return RTE_LOG_INFO;
	case LogLevel::debug:
		return RTE_LOG_DEBUG;
	}
	return RTE_LOG_DEBUG;
}

/* rte_log's levels in between (NOTICE; EMERG .. CRIT) count as the next one of nicmr's. */
LogLevel from_rte_level(int level) noexcept
{
	if (level <= static_cast<int>(RTE_LOG_ERR))
		return LogLevel::error;
	if (level <= static_cast<int>(RTE_LOG_NOTICE))
		return LogLevel::warn;
	if (level <= static_cast<int>(RTE_LOG_INFO))
		return LogLevel::info;
	return LogLevel::debug;
}

bool rte_enabled(LogLevel level) noexcept
{
	const int type = g_log_type.load(std::memory_order_relaxed);
	return rte_log_can_log(static_cast<uint32_t>(type), rte_level(level));
}

void rte_write(LogLevel level, const char *component, const char *msg) noexcept
{
	rte_log(rte_level(level), static_cast<uint32_t>(g_log_type.load(std::memory_order_relaxed)),
		"nicmr %s: %s\n", component, msg);
}

void rte_set_level(LogLevel level) noexcept
{
	rte_log_set_level(static_cast<uint32_t>(g_log_type.load(std::memory_order_relaxed)),
			  rte_level(level));
}

constexpr LogBackend kRteLog = {rte_enabled, rte_write, rte_set_level};

} // namespace

extern "C" int nicmr_dpdk_log_register(void)
{
	static std::mutex mu;
	std::lock_guard<std::mutex> lk(mu);
	if (int t = g_log_type.load(std::memory_order_relaxed); t >= 0)
		return t;
	/* The level an EAL --log-level=lib.nicmr:LEVEL option gave wins over nicmr's own
	 * (DPDK's rte_log_register_type_and_pick_level, lib/eal/common/eal_common_log.c). */
	const int type =
		rte_log_register_type_and_pick_level(NICMR_DPDK_LOG_TYPE, rte_level(log_level()));
	if (type < 0)
		return type != -1 ? type : (rte_errno != 0 ? -rte_errno : -ENOMEM);
	g_log_type.store(type, std::memory_order_relaxed);
	/* nicmr_log_get says the level rte_log filters with. */
	set_log_level(from_rte_level(rte_log_get_level(static_cast<uint32_t>(type))));
	set_log_backend(&kRteLog); /* release: the type is stored before the backend is seen */
	return type;
}

/* ---- Memsegs as pools ------------------------------------------------------------------- */

extern "C" {

int nicmr_dpdk_mem_attach(struct nicmr_device *dev, struct nicmr_dpdk_mem **out)
{
	if (dev == nullptr || out == nullptr)
		return -EINVAL;
	if (int t = nicmr_dpdk_log_register(); t < 0)
		NICMR_LOG(warn, kLog, "rte_log type %s not registered (%d): logging to stderr",
			  NICMR_DPDK_LOG_TYPE, t);
	auto *m = new (std::nothrow) nicmr_dpdk_mem(dev);
	if (m == nullptr)
		return -ENOMEM;
	nicmr_dpdk_mem *none = nullptr;
	if (!dev->dpdk_mem.compare_exchange_strong(none, m, std::memory_order_acq_rel)) {
		delete m;
		return -EEXIST;
	}
	int rc = mem::DpdkMemSync::create(m->sink, &m->sync);
	if (rc != 0) {
		NICMR_LOG(error, kLog, "%s: DPDK memory not attached: %d", dev->spec.c_str(), rc);
		dev->dpdk_mem.store(nullptr, std::memory_order_release);
		delete m;
		return rc;
	}
	NICMR_LOG(info, kLog, "%s: %zu pools from DPDK memsegs%s", dev->spec.c_str(),
		  m->sync->pool_count(),
		  m->sync->following_events() ? ", following memory events" : " (legacy memory)");
	*out = m;
	return 0;
}

int nicmr_dpdk_mem_detach(struct nicmr_dpdk_mem *mem)
{
	if (mem == nullptr)
		return -EINVAL;
	nicmr_device *dev = mem->dev;
	/* Registrations in these pools do not run concurrently (nicmr_dpdk.h): a pool found idle
	 * here stays idle until the sync below destroys it. */
	uint64_t users = 0;
	for (void *t : mem->sync->tokens())
		users += pool_users(dev, static_cast<const nicmr_pool *>(t));
	if (users != 0) {
		NICMR_LOG(warn, kLog, "%s: detach refused: %llu MRs live in DPDK memory",
			  dev->spec.c_str(), static_cast<unsigned long long>(users));
		return -EBUSY;
	}
	mem->sync.reset(); /* stops the events, then destroys the pools */
	dev->dpdk_mem.store(nullptr, std::memory_order_release);
	delete mem;
	return 0;
}

int nicmr_dpdk_mem_query(struct nicmr_dpdk_mem *mem, struct nicmr_dpdk_mem_info *info)
{
	if (mem == nullptr || info == nullptr)
		return -EINVAL;
	const size_t kept = mem->sync->retry_kept();
	*info = {};
	info->pools = static_cast<uint32_t>(mem->sync->pool_count());
	info->kept = static_cast<uint32_t>(kept);
	info->events = mem->sync->following_events() ? 1 : 0;
	return 0;
}

/* ---- Mempools --------------------------------------------------------------------------- */

int nicmr_dpdk_mempool_reg(struct nicmr_pd *pd, struct rte_mempool *mp, uint64_t access,
			   struct nicmr_dpdk_mempool_mr **out)
{
	if (pd == nullptr || mp == nullptr || out == nullptr)
		return -EINVAL;
	nicmr_device *dev = pd->dev;
	std::unique_ptr<nicmr_dpdk_mempool_mr> mmr(new (std::nothrow) nicmr_dpdk_mempool_mr);
	if (!mmr)
		return -ENOMEM;
	mmr->dev = dev;
	/* Touching chunks merge when the merged range is in one pool (fast path), or when
	 * neither end is in a pool (one slow-path mapping instead of two). */
	auto same_pool = [](void *ctx, uintptr_t a, uintptr_t b) {
		auto *d = static_cast<nicmr_device *>(ctx);
		const auto *pa = reinterpret_cast<const void *>(a);
		if (nicmr_pool_find(d, pa, b - a) != nullptr)
			return true;
		return nicmr_pool_find(d, pa, 1) == nullptr &&
		       nicmr_pool_find(d, reinterpret_cast<const void *>(b - 1), 1) == nullptr;
	};
	std::vector<mem::MempoolRange> ranges;
	int rc;
	try {
		rc = mem::mempool_ranges(mp, same_pool, dev, &ranges);
		if (rc == 0)
			mmr->ranges.reserve(ranges.size());
	} catch (...) {
		rc = -ENOMEM;
	}
	if (rc != 0) {
		NICMR_LOG(error, kLog, "%s: mempool %s: its memory: %d", dev->spec.c_str(),
			  mp->name, rc);
		return rc;
	}
	for (const mem::MempoolRange &r : ranges) {
		nicmr_mr *mr = nullptr;
		rc = nicmr_mr_reg(pd, reinterpret_cast<void *>(r.start), r.end - r.start, access, 0,
				  0, &mr);
		if (rc != 0) {
			NICMR_LOG(error, kLog, "%s: mempool %s: range %#zx + %zu: %d",
				  dev->spec.c_str(), mp->name, static_cast<size_t>(r.start),
				  static_cast<size_t>(r.end - r.start), rc);
			/* Nothing stays: the MRs made so far go again (newest first). */
			while (!mmr->ranges.empty()) {
				(void)nicmr_mr_dereg(mmr->ranges.back().mr);
				mmr->ranges.pop_back();
			}
			return rc;
		}
		mmr->ranges.push_back({r.start, r.end, mr}); /* reserved: cannot throw */
	}
	NICMR_LOG(info, kLog, "%s: mempool %s: %zu MRs", dev->spec.c_str(), mp->name,
		  mmr->ranges.size());
	*out = mmr.release();
	return 0;
}

int nicmr_dpdk_mempool_dereg(struct nicmr_dpdk_mempool_mr *mmr)
{
	if (mmr == nullptr)
		return -EINVAL;
	while (!mmr->ranges.empty()) {
		const nicmr_dpdk_mempool_range &r = mmr->ranges.front();
		if (int rc = nicmr_mr_dereg(r.mr); rc != 0) {
			NICMR_LOG(warn, kLog, "%s: mempool MR %#zx + %zu: dereg %d",
				  mmr->dev->spec.c_str(), static_cast<size_t>(r.start),
				  static_cast<size_t>(r.end - r.start), rc);
			return rc;
		}
		mmr->ranges.erase(mmr->ranges.begin());
	}
	delete mmr;
	return 0;
}

struct nicmr_mr *nicmr_dpdk_mempool_mr_of(const struct nicmr_dpdk_mempool_mr *mmr, const void *addr,
					  size_t len)
{
	/* HOT PATH: no lock, no allocation, no system call; a binary search of a vector that
	 * only registration and deregistration change. */
	const auto a = reinterpret_cast<uintptr_t>(addr);
	if (mmr == nullptr || len == 0 || a + len < a)
		return nullptr;
	const auto &v = mmr->ranges;
	auto it = std::upper_bound(
		v.begin(), v.end(), a,
		[](uintptr_t x, const nicmr_dpdk_mempool_range &r) { return x < r.start; });
	if (it == v.begin())
		return nullptr;
	--it;
	return a + len <= it->end ? it->mr : nullptr;
}

uint32_t nicmr_dpdk_mempool_key(const struct nicmr_dpdk_mempool_mr *mmr, const void *addr,
				size_t len)
{
	return nicmr_mr_key(nicmr_dpdk_mempool_mr_of(mmr, addr, len));
}

size_t nicmr_dpdk_mempool_mr_count(const struct nicmr_dpdk_mempool_mr *mmr)
{
	return mmr ? mmr->ranges.size() : 0;
}

struct nicmr_mr *nicmr_dpdk_mempool_mr_at(const struct nicmr_dpdk_mempool_mr *mmr, size_t i)
{
	return mmr && i < mmr->ranges.size() ? mmr->ranges[i].mr : nullptr;
}

} /* extern "C" */
