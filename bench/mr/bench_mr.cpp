/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench-mr: registration and lookup through the native C API (include/nicmr/nicmr.h) on the
 * emulated ConnectX, doorbell delivery inline (the writer's thread runs the device) and thread
 * (a device thread polls doorbells).
 *   BM_RegDeregPool/<bytes>/<mode>  nicmr_mr_reg + nicmr_mr_dereg of a region inside a pool
 *   BM_RegDeregMmap4K/<mode>        the same for 4 KiB of plain mmap'd memory (slow path: pin,
 *                                   DMA-map, UMR, unmap)
 *   BM_CacheHit4K                   nicmr_mr_cache_reg + _dereg of 4 KiB of mmap'd memory
 *                                   the cache holds (a hit: no system call), inline
 *   BM_CacheMiss4K                  the same alternating between two buffers in a cache of one
 *                                   entry: every registration misses and evicts the other
 *                                   buffer's entry (a slow-path pair and the cache's work)
 *   BM_CacheInvalidate4K/<cached>   munmap of 4 KiB of mmap'd memory until the cache dropped
 *                                   its entry (cached:1: the unmap monitor's event, the
 *                                   worker's deregistration), or a plain munmap (cached:0)
 *   BM_OdpRegDereg/<bytes>          nicmr_mr_reg(NICMR_ACCESS_ON_DEMAND) + dereg of untouched
 *                                   mmap'd memory (doc/odp.md): nothing pinned or mapped, a
 *                                   cached on-demand mkey bound and revoked by one UMR each
 *                                   (1 GiB: its bucket's mkey made on the first miss)
 *   BM_OdpFirstTouch/<pages>        nicmr_advise_mr(PREFETCH_WRITE, FLUSH) of <pages> fresh
 *                                   pages: fault in, pin, DMA-map, UMR; per page in the ratios
 *   BM_OdpFaultRoundTrip/<present>  an RDMA WRITE of 64 bytes through a loopback QP into a page
 *                                   of an on-demand MR, from the post until its completion is
 *                                   polled (inline): present:0 a fresh page, never advised
 *                                   (the page fault raised, served by the poll, resumed, the
 *                                   data written), present:1 the same page each time, advised
 *                                   once (no fault)
 *   BM_Lookup/<live>/<same|random>  nicmr_key_lookup with <live> MRs registered: one key (the
 *                                   lookup's own cost, its entry in cache: the flat <= 5 ns
 *                                   target), or a different key each call in random order
 *                                   (adds the memory latency of one entry among <live>)
 *   BM_RegDeregThreads/threads:N    reg + dereg on N threads at once (inline), items/s is the
 *                                   throughput of all threads
 *   BM_HostMemoryPerMr              RSS and heap growth over 100,000 live MRs, per MR
 *   BM_DeviceStats/<mkeys>          nicmr_device_get_stats: O(1) in keys (its MR count is kept
 *                                   as MRs come and go), so flat from 65,536 to 1,048,576 keys
 * Timings are medians of the repetitions; ratios against the baseline named in each line are
 * printed at the end, from medians of this run: CPU time of the calling thread for the
 * single-thread lines (steady on a shared machine; thread delivery's device thread is not in
 * it), items/s of wall-clock time for the thread-scaling line.
 * Last, once every device above is closed (no device thread left): the floor (a UMR bind +
 * revoke pair) and the native pair measured on one device (bench_native.h), the provider's pair
 * with 1 and 100,000 live MRs from `bench-fi-mr --ratios` run in a process of its own, all
 * timed alike (bench_ratios.h), and the four RATIOS lines that compare them.
 */
#include <algorithm>
#include <benchmark/benchmark.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "api_internal.h"
#include "bench_cli.h"
#include "bench_native.h"
#include "bench_ratios.h"
#include "nicmr/nicmr.h"

namespace {

constexpr uint64_t kAccess = NICMR_ACCESS_SEND | NICMR_ACCESS_RECV | NICMR_ACCESS_REMOTE_READ;
constexpr size_t kGiB = size_t{1} << 30;
constexpr int kReps = 5;

const char *mode_name(int thread)
{
	return thread ? "thread" : "inline";
}

/* A device with a PD and pools: the small pool (2 MiB pages) for regions up to 2 MiB, the big
 * one (1 GiB: one 1 GiB page, else 512 x 2 MiB) for the 1 GiB region. */
struct Dev {
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *small = nullptr, *big = nullptr;
	std::string big_error;
	std::string spec;

	explicit Dev(const std::string &s) : spec(s)
	{
		if (nicmr_device_open(s.c_str(), &dev) != 0 || nicmr_pd_alloc(dev, &pd) != 0) {
			std::fprintf(stderr, "bench-mr: cannot open %s\n", s.c_str());
			std::abort();
		}
	}
	~Dev()
	{
		if (small)
			nicmr_pool_destroy(small);
		if (big)
			nicmr_pool_destroy(big);
		nicmr_pd_free(pd);
		nicmr_device_close(dev);
	}
	nicmr_pool *pool(size_t size, size_t page)
	{
		nicmr_pool_params p;
		nicmr_pool_params_init(&p);
		p.size = size;
		p.page_size = page;
		p.name = "bench-mr";
		nicmr_pool *out = nullptr;
		return nicmr_pool_create(dev, &p, &out) == 0 ? out : nullptr;
	}
	/* A pool holding at least bytes, or nullptr with big_error set. */
	nicmr_pool *for_size(size_t bytes)
	{
		if (bytes <= (size_t{2} << 20)) {
			if (!small)
				small = pool(size_t{4} << 20, NICMR_PAGE_2M);
			if (!small)
				small = pool(size_t{4} << 20, NICMR_PAGE_4K);
			return small;
		}
		if (!big && big_error.empty()) {
			/* A kernel without 1 GiB pages is not asked for one (its error line
			 * would only be noise here). */
			if (nicmr::mem::hugepages_offered(kGiB))
				big = pool(kGiB, NICMR_PAGE_1G);
			if (!big)
				big = pool(kGiB, NICMR_PAGE_2M);
			if (!big) {
				nicmr::mem::HugepageShortage s;
				s.page_size = NICMR_PAGE_2M;
				s.wanted = kGiB / NICMR_PAGE_2M;
				s.free_pages = nicmr::mem::hugepages_free(NICMR_PAGE_2M);
				s.total = nicmr::mem::hugepages_total(NICMR_PAGE_2M);
				s.offered = nicmr::mem::hugepages_offered(NICMR_PAGE_2M);
				big_error = std::string(nicmr::mem::hugepages_offered(kGiB)
								? "no free 1 GiB hugepage, and "
								: "no 1 GiB hugepages on this "
								  "kernel, and ") +
					    nicmr::mem::describe_hugepage_shortage(s);
			}
		}
		return big;
	}
};

/* One device per spec, kept for the whole run (opening one pre-creates every mkey); main()
 * closes them. */
std::map<std::string, std::unique_ptr<Dev>> devs;

Dev &device(const std::string &spec)
{
	auto &d = devs[spec];
	if (!d)
		d = std::make_unique<Dev>(spec);
	return *d;
}

std::string spec_for(int thread)
{
	return std::string("emu:mkeys=65536,delivery=") + mode_name(thread);
}

void BM_RegDeregPool(benchmark::State &st)
{
	const size_t bytes = size_t(st.range(0));
	Dev &d = device(spec_for(int(st.range(1))));
	nicmr_pool *p = d.for_size(bytes);
	if (!p) {
		st.SkipWithError(("skipped: " + d.big_error).c_str());
		return;
	}
	void *a = nicmr_pool_addr(p);
	for (auto _ : st) {
		nicmr_mr *mr = nullptr;
		if (nicmr_mr_reg(d.pd, a, bytes, kAccess, 0, 0, &mr) != 0 ||
		    nicmr_mr_dereg(mr) != 0) {
			st.SkipWithError("registration failed");
			break;
		}
	}
	st.SetLabel(mode_name(int(st.range(1))));
}

void BM_RegDeregMmap4K(benchmark::State &st)
{
	Dev &d = device(spec_for(int(st.range(0))));
	void *a = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	std::memset(a, 1, 4096);
	for (auto _ : st) {
		nicmr_mr *mr = nullptr;
		if (nicmr_mr_reg(d.pd, a, 4096, kAccess, 0, 0, &mr) != 0 ||
		    nicmr_mr_dereg(mr) != 0) {
			st.SkipWithError("registration failed");
			break;
		}
	}
	munmap(a, 4096);
	st.SetLabel(mode_name(int(st.range(0))));
}

/* On-demand MRs take the engine's on-demand mkey cache (doc/odp.md): a stock device. */
std::string odp_spec()
{
	return "emu:mkeys=65536,delivery=inline";
}

void BM_OdpRegDereg(benchmark::State &st)
{
	const size_t bytes = size_t(st.range(0));
	Dev &d = device(odp_spec());
	/* Nothing touched: on-demand registration needs no page. */
	void *a = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (a == MAP_FAILED) {
		st.SkipWithError("skipped: no address space");
		return;
	}
	for (auto _ : st) {
		nicmr_mr *mr = nullptr;
		const int rc =
			nicmr_mr_reg(d.pd, a, bytes, kAccess | NICMR_ACCESS_ON_DEMAND, 0, 0, &mr);
		if (rc != 0) {
			const std::string why =
				bytes > NICMR_ODP_MAX_LEN
					? "above NICMR_ODP_MAX_LEN (the largest bucket)"
					: "the device's translations per mkey or its budget";
			st.SkipWithError(("skipped: on-demand registration refused (" +
					  std::string(std::strerror(-rc)) + "): " + why +
					  ", doc/odp.md")
						 .c_str());
			break;
		}
		if (nicmr_mr_dereg(mr) != 0) {
			st.SkipWithError("deregistration failed");
			break;
		}
	}
	munmap(a, bytes);
}

/* The first touch of <pages> fresh pages of an on-demand MR: nicmr_advise_mr(PREFETCH_WRITE,
 * FLUSH) over them (fault in, pin, DMA-map, one UMR), the work a page fault's service does.
 * Manual time of the advice alone; items are pages. */
void BM_OdpFirstTouch(benchmark::State &st)
{
	const size_t pages = size_t(st.range(0));
	const size_t bytes = pages * 4096;
	Dev &d = device(odp_spec());
	for (auto _ : st) {
		void *a = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		nicmr_mr *mr = nullptr;
		if (a == MAP_FAILED ||
		    nicmr_mr_reg(d.pd, a, bytes,
				 kAccess | NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_ON_DEMAND, 0, 0,
				 &mr) != 0) {
			st.SkipWithError("on-demand registration failed");
			break;
		}
		nicmr_sge g{reinterpret_cast<uintptr_t>(a), uint32_t(bytes), nicmr_mr_key(mr)};
		const auto t0 = std::chrono::steady_clock::now();
		const int rc = nicmr_advise_mr(d.pd, NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE,
					       NICMR_ADVISE_MR_FLAG_FLUSH, &g, 1);
		st.SetIterationTime(
			std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
				.count());
		nicmr_mr_dereg(mr);
		munmap(a, bytes);
		if (rc != 0) {
			st.SkipWithError("advice failed");
			break;
		}
	}
	st.SetItemsProcessed(int64_t(st.iterations() * pages));
}

/* A loopback QP pair on d (port 1 -> port 2) with the requester's CQ, and a 4 KiB source in
 * d's small pool; released with the benchmark. */
struct Loopback {
	nicmr_cq *cqa = nullptr, *cqb = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	nicmr_mr *src = nullptr;
	bool ok = false;

	explicit Loopback(Dev &d)
	{
		nicmr_pool *p = d.for_size(4096);
		ok = p != nullptr && nicmr_cq_create(d.dev, 64, &cqa) == 0 &&
		     nicmr_cq_create(d.dev, 64, &cqb) == 0 &&
		     nicmr_qp_create(d.pd, 1, cqa, 16, &qa) == 0 &&
		     nicmr_qp_create(d.pd, 2, cqb, 16, &qb) == 0 &&
		     nicmr_qp_connect(qa, 2, nicmr_qp_num(qb)) == 0 &&
		     nicmr_qp_connect(qb, 1, nicmr_qp_num(qa)) == 0 &&
		     nicmr_mr_reg(d.pd, nicmr_pool_addr(p), 4096, NICMR_ACCESS_LOCAL_WRITE, 0, 0,
				  &src) == 0;
	}
	~Loopback()
	{
		if (src)
			nicmr_mr_dereg(src);
		for (nicmr_qp *q : {qa, qb})
			if (q)
				nicmr_qp_destroy(q);
		for (nicmr_cq *c : {cqa, cqb})
			if (c)
				nicmr_cq_destroy(c);
	}
	/* 64 bytes of the source into raddr (rkey), polled to its completion: its status. The
	 * poll that finds the CQ empty serves a page fault (doc/odp.md, "Page faults"). */
	int write(uint64_t raddr, uint32_t rkey)
	{
		if (nicmr_post_write(qa, reinterpret_cast<uintptr_t>(nicmr_mr_addr(src)), 64,
				     nicmr_mr_key(src), raddr, rkey, 1, NICMR_SEND_SIGNALED) != 0)
			return -1;
		nicmr_wc wc{};
		for (;;) {
			const int n = nicmr_cq_poll(cqa, &wc, 1);
			if (n < 0)
				return n;
			if (n == 1)
				return int(wc.status);
		}
	}
};

/* The page fault's round trip against a WRITE into a present page, timed alike (manual time
 * of post + poll to the completion; the mapping and registration of a fresh page are not
 * timed). */
void BM_OdpFaultRoundTrip(benchmark::State &st)
{
	const bool present = st.range(0) != 0;
	Dev &d = device(odp_spec());
	Loopback lb(d);
	if (!lb.ok) {
		st.SkipWithError("loopback QPs or source MR failed");
		return;
	}
	constexpr uint64_t kOdpAccess =
		NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_ON_DEMAND;
	void *kept = nullptr;
	nicmr_mr *kept_mr = nullptr;
	if (present) {
		kept = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			    0);
		if (kept == MAP_FAILED ||
		    nicmr_mr_reg(d.pd, kept, 4096, kOdpAccess, 0, 0, &kept_mr) != 0) {
			st.SkipWithError("on-demand registration failed");
			if (kept != MAP_FAILED)
				munmap(kept, 4096);
			return;
		}
		nicmr_sge g{reinterpret_cast<uintptr_t>(kept), 4096, nicmr_mr_key(kept_mr)};
		if (nicmr_advise_mr(d.pd, NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				    NICMR_ADVISE_MR_FLAG_FLUSH, &g, 1) != 0) {
			st.SkipWithError("advice failed");
			nicmr_mr_dereg(kept_mr);
			munmap(kept, 4096);
			return;
		}
	}
	for (auto _ : st) {
		void *a = kept;
		nicmr_mr *mr = kept_mr;
		if (!present) {
			a = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);
			if (a == MAP_FAILED ||
			    nicmr_mr_reg(d.pd, a, 4096, kOdpAccess, 0, 0, &mr) != 0) {
				st.SkipWithError("on-demand registration failed");
				break;
			}
		}
		const auto t0 = std::chrono::steady_clock::now();
		const int rc = lb.write(reinterpret_cast<uintptr_t>(a), nicmr_mr_key(mr));
		st.SetIterationTime(
			std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
				.count());
		if (!present) {
			nicmr_mr_dereg(mr);
			munmap(a, 4096);
		}
		if (rc != NICMR_WC_SUCCESS) {
			st.SkipWithError("the WRITE did not complete successfully");
			break;
		}
	}
	if (kept_mr) {
		nicmr_mr_dereg(kept_mr);
		munmap(kept, 4096);
	}
}

/* A registration cache on d's PD (userfaultfd monitor) of max_count entries, or null. */
nicmr_mr_cache *cache_for(Dev &d, size_t max_count)
{
	nicmr_mr_cache_params p;
	nicmr_mr_cache_params_init(&p);
	p.max_count = max_count;
	p.monitor = NICMR_MR_CACHE_MONITOR_UFFD;
	nicmr_mr_cache *c = nullptr;
	return nicmr_mr_cache_create(d.pd, &p, &c) == 0 ? c : nullptr;
}

void *map4k()
{
	void *a = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == MAP_FAILED)
		return nullptr;
	std::memset(a, 1, 4096);
	return a;
}

void BM_CacheHit4K(benchmark::State &st)
{
	Dev &d = device(spec_for(0));
	nicmr_mr_cache *c = cache_for(d, 16);
	void *a = map4k();
	nicmr_mr *mr = nullptr;
	if (!c || !a || nicmr_mr_cache_reg(c, a, 4096, kAccess, &mr) != 0 ||
	    nicmr_mr_cache_dereg(c, mr) != 0) {
		st.SkipWithError("skipped: no registration cache (userfaultfd refused?)");
	} else {
		for (auto _ : st) {
			if (nicmr_mr_cache_reg(c, a, 4096, kAccess, &mr) != 0 ||
			    nicmr_mr_cache_dereg(c, mr) != 0) {
				st.SkipWithError("registration failed");
				break;
			}
		}
	}
	if (c)
		nicmr_mr_cache_destroy(c);
	if (a)
		munmap(a, 4096);
}

void BM_CacheMiss4K(benchmark::State &st)
{
	Dev &d = device(spec_for(0));
	nicmr_mr_cache *c = cache_for(d, 1);
	void *a[2] = {map4k(), map4k()};
	if (!c || !a[0] || !a[1]) {
		st.SkipWithError("skipped: no registration cache (userfaultfd refused?)");
	} else {
		unsigned i = 0;
		for (auto _ : st) {
			nicmr_mr *mr = nullptr;
			if (nicmr_mr_cache_reg(c, a[i], 4096, kAccess, &mr) != 0 ||
			    nicmr_mr_cache_dereg(c, mr) != 0) {
				st.SkipWithError("registration failed");
				break;
			}
			i ^= 1;
		}
		nicmr_mr_cache_stats s{};
		nicmr_mr_cache_get_stats(c, &s);
		if (s.hits != 0)
			st.SkipWithError("a registration hit: not a miss benchmark");
	}
	if (c)
		nicmr_mr_cache_destroy(c);
	for (void *p : a)
		if (p)
			munmap(p, 4096);
}

void BM_CacheInvalidate4K(benchmark::State &st)
{
	const bool cached = st.range(0) != 0;
	Dev &d = device(spec_for(0));
	nicmr_mr_cache *c = cached ? cache_for(d, 16) : nullptr;
	if (cached && !c) {
		st.SkipWithError("skipped: no registration cache (userfaultfd refused?)");
		return;
	}
	/* Manual time of the munmap and the wait alone: the setup of each iteration (a mapping,
	 * a registration) is not timed, and Google Benchmark's pause and resume cost system
	 * calls of their own. */
	for (auto _ : st) {
		void *a = map4k();
		nicmr_mr *mr = nullptr;
		if (!a || (c && (nicmr_mr_cache_reg(c, a, 4096, kAccess, &mr) != 0 ||
				 nicmr_mr_cache_dereg(c, mr) != 0))) {
			st.SkipWithError("registration failed");
			break;
		}
		const auto t0 = std::chrono::steady_clock::now();
		munmap(a, 4096);
		/* The entry is gone once the monitor's worker deregistered it. */
		nicmr_mr_cache_stats s{};
		while (c && nicmr_mr_cache_get_stats(c, &s) == 0 && s.entries != 0)
			std::this_thread::yield(); /* 2 cores: leave one to the monitor */
		st.SetIterationTime(
			std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
				.count());
	}
	st.SetLabel(cached ? "cached: munmap + invalidation" : "plain munmap");
	if (c)
		nicmr_mr_cache_destroy(c);
}

/* live MRs of 64 bytes each inside one pool, and the lookups to make. */
struct LookupWorld {
	size_t live = 0;
	std::vector<nicmr_mr *> mrs;
	std::vector<std::pair<uint32_t, uint64_t>> order; /* key, address: random order */
	Dev *d = nullptr;
	nicmr_pool *pool = nullptr;
	~LookupWorld()
	{
		for (auto *m : mrs)
			nicmr_mr_dereg(m);
		if (pool)
			nicmr_pool_destroy(pool);
	}
};

/* The largest key space the model allows is 2^24; 2^21 holds a million live keys. */
const char *kBigSpec = "emu:mkeys=2097152,delivery=inline";

std::unique_ptr<LookupWorld> w;

LookupWorld *lookup_world(size_t live)
{
	if (w && w->live == live)
		return w.get();
	w.reset();
	auto nw = std::make_unique<LookupWorld>();
	nw->live = live;
	nw->d = &device(kBigSpec);
	const size_t bytes = std::max<size_t>(live * 64, 4096);
	nw->pool = nw->d->pool((bytes + (2 << 20) - 1) & ~size_t((2 << 20) - 1), NICMR_PAGE_2M);
	if (!nw->pool)
		nw->pool = nw->d->pool(bytes, NICMR_PAGE_4K);
	if (!nw->pool)
		return nullptr;
	char *base = static_cast<char *>(nicmr_pool_addr(nw->pool));
	for (size_t i = 0; i < live; ++i) {
		nicmr_mr *mr = nullptr;
		if (nicmr_mr_reg(nw->d->pd, base + i * 64, 64, kAccess, 0, 0, &mr) != 0)
			return nullptr;
		nw->mrs.push_back(mr);
		nw->order.emplace_back(nicmr_mr_key(mr), uint64_t(uintptr_t(base + i * 64)));
	}
	std::shuffle(nw->order.begin(), nw->order.end(), std::mt19937(42));
	w = std::move(nw);
	return w.get();
}

void BM_Lookup(benchmark::State &st)
{
	LookupWorld *w = lookup_world(size_t(st.range(0)));
	if (!w) {
		st.SkipWithError("could not register the live MRs");
		return;
	}
	nicmr_device *dev = w->d->dev;
	uint64_t iova = 0;
	if (st.range(1) == 0) {
		const auto [k, a] = w->order[w->order.size() / 2];
		for (auto _ : st) {
			benchmark::DoNotOptimize(nicmr_key_lookup(dev, k, a + 8, 16,
								  NICMR_ACCESS_REMOTE_READ, &iova));
			benchmark::DoNotOptimize(iova);
		}
	} else {
		const size_t n = w->order.size();
		size_t i = 0;
		for (auto _ : st) {
			const auto &[k, a] = w->order[i];
			benchmark::DoNotOptimize(nicmr_key_lookup(dev, k, a + 8, 16,
								  NICMR_ACCESS_REMOTE_READ, &iova));
			benchmark::DoNotOptimize(iova);
			i = i + 1 == n ? 0 : i + 1;
		}
	}
	st.SetLabel(st.range(1) ? "random" : "same");
}

void BM_RegDeregThreads(benchmark::State &st)
{
	static Dev *d = nullptr;
	static nicmr_pool *p = nullptr;
	if (st.thread_index() == 0) {
		d = &device(spec_for(0));
		p = d->for_size(4096);
	}
	/* Google Benchmark starts every thread's timing loop together, after the setup above. */
	for (auto _ : st) {
		nicmr_mr *mr = nullptr;
		if (nicmr_mr_reg(d->pd, nicmr_pool_addr(p), 4096, kAccess, 0, 0, &mr) != 0 ||
		    nicmr_mr_dereg(mr) != 0) {
			st.SkipWithError("registration failed");
			break;
		}
	}
	st.SetItemsProcessed(st.iterations());
}

long rss_bytes()
{
	std::ifstream f("/proc/self/statm");
	long pages = 0, res = 0;
	f >> pages >> res;
	return res * sysconf(_SC_PAGESIZE);
}

void BM_HostMemoryPerMr(benchmark::State &st)
{
	constexpr size_t kLive = 100000;
	Dev &d = device("emu:mkeys=262144,delivery=inline");
	nicmr_pool *p = d.pool(size_t{8} << 20, NICMR_PAGE_2M);
	if (!p)
		p = d.pool(size_t{8} << 20, NICMR_PAGE_4K);
	char *base = static_cast<char *>(nicmr_pool_addr(p));
	for (auto _ : st) {
		std::vector<nicmr_mr *> mrs;
		mrs.reserve(kLive);
		const long rss0 = rss_bytes();
		const size_t heap0 = mallinfo2().uordblks;
		for (size_t i = 0; i < kLive; ++i) {
			nicmr_mr *mr = nullptr;
			if (nicmr_mr_reg(d.pd, base + i * 64, 64, kAccess, 0, 0, &mr) != 0)
				std::abort();
			mrs.push_back(mr);
		}
		const long rss1 = rss_bytes();
		const size_t heap1 = mallinfo2().uordblks;
		for (auto *m : mrs)
			nicmr_mr_dereg(m);
		st.counters["rss_per_mr"] = double(rss1 - rss0) / kLive;
		st.counters["heap_per_mr"] = double(heap1 - heap0) / kLive;
	}
	st.counters["sizeof_nicmr_mr"] = double(sizeof(nicmr_mr));
	st.counters["table_entry"] = double(nicmr::mr::Engine::bytes_per_live_region());
	nicmr_pool_destroy(p);
}

void BM_DeviceStats(benchmark::State &st)
{
	Dev &d = device("emu:mkeys=" + std::to_string(st.range(0)) + ",delivery=inline");
	nicmr_device_stats s{};
	for (auto _ : st) {
		if (nicmr_device_get_stats(d.dev, &s) != 0) {
			st.SkipWithError("stats failed");
			break;
		}
		benchmark::DoNotOptimize(s.mrs);
	}
}

/* The device of the last lines: the one bench-fi-mr's provider opens (FI_NICMR_DEVICE, by
 * default emu:mkeys=262144, room for 100,000 live MRs), and the repetitions of each figure. */
constexpr const char *kRatioSpec = "emu:mkeys=262144";
constexpr int kRatioReps = 3001;
constexpr size_t kRatioLive = 100000;

#ifndef NICMR_BENCH_FI_MR
#define NICMR_BENCH_FI_MR ""
#endif

/* Runs `bench-fi-mr --ratios` (its own process: the provider is never loaded beside this
 * program's devices) and takes the nicmr row's 4 KiB pair with 1 and with kRatioLive live MRs
 * into *f. Its RESULT lines are echoed; a failure is said on one line. */
void provider_figures(nicmr::bench::RatioFigures *f)
{
	if (*NICMR_BENCH_FI_MR == '\0') {
		std::printf("provider: not measured (this build has no libfabric provider)\n");
		return;
	}
	const std::string cmd = std::string("'") + NICMR_BENCH_FI_MR + "' --ratios --reps " +
				std::to_string(kRatioReps) + " --live " +
				std::to_string(kRatioLive);
	std::fflush(stdout);
	FILE *p = popen(cmd.c_str(), "r");
	if (!p) {
		std::printf("provider: cannot run %s: %s\n", NICMR_BENCH_FI_MR,
			    std::strerror(errno));
		return;
	}
	char line[512];
	while (std::fgets(line, sizeof(line), p)) {
		double reg, close, pair;
		if (std::sscanf(line, "RESULT nicmr 4KiB/alone reg=%lf close=%lf pair=%lf", &reg,
				&close, &pair) == 3) {
			f->provider = pair;
			f->reg1 = reg;
			f->close1 = close;
			std::fputs(line, stdout);
		} else if (std::sscanf(line, "RESULT nicmr 4KiB/live reg=%lf close=%lf pair=%lf",
				       &reg, &close, &pair) == 3) {
			f->reg_live = reg;
			f->close_live = close;
			std::fputs(line, stdout);
		} else if (std::strncmp(line, "UNSUPPORTED ", 12) == 0 ||
			   std::strncmp(line, "ERROR ", 6) == 0) {
			std::fputs(line, stdout);
		}
	}
	const int st = pclose(p);
	if (st != 0)
		std::printf("provider: bench-fi-mr --ratios ended with wait status %d\n", st);
}

/* The last lines: the floor and the native pair here, the provider's pair from bench-fi-mr.
 * false when the floor or the native pair could not be measured. */
bool ratio_lines()
{
	const char *env = std::getenv("FI_NICMR_DEVICE");
	const std::string spec = env && *env ? env : kRatioSpec;
	setenv("FI_NICMR_DEVICE", spec.c_str(), 0); /* bench-fi-mr's provider opens the same */
	nicmr::bench::RatioFigures f;
	f.live = kRatioLive;
	nicmr::bench::FloorNative fn;
	std::string err;
	std::printf("\nfloor, native and provider pairs of 4 KiB on %s, medians of %d (ns)\n",
		    spec.c_str(), kRatioReps);
	if (nicmr::bench::measure_floor_native(spec, kRatioReps, &fn, &err) == 0) {
		f.floor = fn.floor.pair;
		f.native = fn.native.pair;
		std::printf("RESULT floor umr/4KiB reg=%.0f close=%.0f pair=%.0f\n", fn.floor.first,
			    fn.floor.second, fn.floor.pair);
		std::printf("RESULT native 4KiB/alone reg=%.0f close=%.0f pair=%.0f\n",
			    fn.native.first, fn.native.second, fn.native.pair);
	} else {
		std::printf("ERROR floor and native pair: %s\n", err.c_str());
	}
	provider_figures(&f);
	nicmr::bench::print_ratio_lines(f);
	return f.floor > 0 && f.native > 0;
}

/* Prints the console table and remembers medians for the ratio lines. */
class Reporter : public benchmark::ConsoleReporter {
public:
	std::map<std::string, Run> med;
	void ReportRuns(const std::vector<Run> &runs) override
	{
		for (const Run &r : runs)
			if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")
				med[r.run_name.str()] = r;
		ConsoleReporter::ReportRuns(runs);
	}
	double ns(const std::string &n) const
	{
		auto it = med.find(n);
		return it == med.end() || it->second.error_occurred
			       ? 0
			       : it->second.GetAdjustedRealTime();
	}
	double items(const std::string &n) const
	{
		auto it = med.find(n);
		if (it == med.end())
			return 0;
		auto c = it->second.counters.find("items_per_second");
		return c == it->second.counters.end() ? 0 : double(c->second);
	}
	void ratio(const char *what, double num, double den, const char *target) const
	{
		if (num > 0 && den > 0)
			std::printf("ratio  %-58s %7.2f   %s\n", what, num / den, target);
		else
			std::printf("ratio  %-58s    n/a   (a side was skipped)\n", what);
	}
};

} // namespace

BENCHMARK(BM_RegDeregPool)
	->ArgNames({"bytes", "thread"})
	->ArgsProduct({{4096, 65536, 2 << 20, 1 << 30}, {0, 1}})
	->Repetitions(kReps)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_RegDeregMmap4K)
	->ArgName("thread")
	->DenseRange(0, 1)
	->Repetitions(kReps)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_OdpRegDereg)
	->ArgName("bytes")
	->Arg(4096)
	->Arg(2 << 20)
	->Arg(256 << 20)
	->Arg(1 << 30)
	->Repetitions(kReps)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_OdpFirstTouch)
	->ArgName("pages")
	->Arg(1)
	->Arg(512)
	->UseManualTime()
	->Repetitions(kReps)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_OdpFaultRoundTrip)
	->ArgName("present")
	->Arg(0)
	->Arg(1)
	->UseManualTime()
	->Repetitions(kReps)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_CacheHit4K)->Repetitions(kReps)->ReportAggregatesOnly(true);
BENCHMARK(BM_CacheMiss4K)->Repetitions(kReps)->ReportAggregatesOnly(true);
BENCHMARK(BM_CacheInvalidate4K)
	->ArgName("cached")
	->DenseRange(0, 1)
	->UseManualTime()
	->Repetitions(kReps)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_Lookup)
	->ArgNames({"live", "random"})
	->ArgsProduct({{1, 1000, 1000000}, {0, 1}})
	->Repetitions(kReps)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_RegDeregThreads)
	->Threads(1)
	->Threads(2)
	->UseRealTime()
	->Repetitions(kReps)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_HostMemoryPerMr)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DeviceStats)
	->ArgName("mkeys")
	->Arg(65536)
	->Arg(1 << 20)
	->Repetitions(kReps)
	->ReportAggregatesOnly(true)
	->Unit(benchmark::kMicrosecond);

int main(int argc, char **argv)
{
	nicmr::bench::init(&argc, argv, "bench-mr",
			   "Registration and lookup through the native C API on emu (inline and "
			   "thread doorbell\ndelivery): reg+dereg pairs, key lookups, 2-thread "
			   "registration throughput, host\nbytes per MR, device stats. Medians "
			   "of the repetitions, ratios at the end.");
	std::printf("bench-mr: native C API on emu (inline / thread doorbell delivery); reg+dereg "
		    "pairs, key lookups, 2-thread registration throughput, host bytes per MR. "
		    "Times are medians of %d repetitions; single-thread ratios use CPU time, the "
		    "thread-scaling ratio wall-clock items/s.\n",
		    kReps);
	Reporter rep;
	benchmark::RunSpecifiedBenchmarks(&rep);
	const std::string rd = "BM_RegDeregPool/bytes:";
	rep.ratio("reg+dereg 1 GiB / 4 KiB (pool, inline)",
		  rep.ns(rd + "1073741824/thread:0/repeats:5"),
		  rep.ns(rd + "4096/thread:0/repeats:5"), "");
	rep.ratio("reg+dereg 4 KiB thread delivery / inline",
		  rep.ns(rd + "4096/thread:1/repeats:5"), rep.ns(rd + "4096/thread:0/repeats:5"),
		  "");
	rep.ratio("reg+dereg 4 KiB mmap'd / pool (inline)",
		  rep.ns("BM_RegDeregMmap4K/thread:0/repeats:5"),
		  rep.ns(rd + "4096/thread:0/repeats:5"), "");
	const std::string od = "BM_OdpRegDereg/bytes:";
	rep.ratio("on-demand reg+dereg 4 KiB mmap'd / pool 4 KiB (inline)",
		  rep.ns(od + "4096/repeats:5"), rep.ns(rd + "4096/thread:0/repeats:5"),
		  "target: <= 2");
	rep.ratio("on-demand reg+dereg 1 GiB mmap'd / pool 4 KiB (inline)",
		  rep.ns(od + "1073741824/repeats:5"), rep.ns(rd + "4096/thread:0/repeats:5"),
		  "target: <= 2");
	rep.ratio("on-demand reg+dereg 4 KiB / pinning slow path 4 KiB (inline)",
		  rep.ns(od + "4096/repeats:5"), rep.ns("BM_RegDeregMmap4K/thread:0/repeats:5"),
		  "");
	rep.ratio("on-demand reg+dereg 2 MiB / 4 KiB", rep.ns(od + "2097152/repeats:5"),
		  rep.ns(od + "4096/repeats:5"), "target: flat (~1)");
	rep.ratio("on-demand reg+dereg 256 MiB / 4 KiB", rep.ns(od + "268435456/repeats:5"),
		  rep.ns(od + "4096/repeats:5"), "target: flat (~1)");
	rep.ratio("on-demand reg+dereg 1 GiB / 4 KiB", rep.ns(od + "1073741824/repeats:5"),
		  rep.ns(od + "4096/repeats:5"), "target: flat (~1)");
	for (int pages : {1, 512}) {
		const double t = rep.ns("BM_OdpFirstTouch/pages:" + std::to_string(pages) +
					"/repeats:5/manual_time");
		char what[96];
		std::snprintf(what, sizeof(what), "first touch per page, advise of %d page%s",
			      pages, pages == 1 ? "" : "s");
		if (t > 0)
			std::printf("cost   %-58s %7.0f ns\n", what, t / pages);
		else
			std::printf("cost   %-58s    n/a   (skipped)\n", what);
	}
	const std::string rt = "BM_OdpFaultRoundTrip/present:";
	const double fault_rt = rep.ns(rt + "0/repeats:5/manual_time");
	if (fault_rt > 0)
		std::printf("cost   %-58s %7.0f ns\n",
			    "page fault round trip: WRITE of 64 B into a page not present",
			    fault_rt);
	else
		std::printf("cost   %-58s    n/a   (skipped)\n",
			    "page fault round trip: WRITE of 64 B into a page not present");
	rep.ratio("WRITE into a page not present / into a present page", fault_rt,
		  rep.ns(rt + "1/repeats:5/manual_time"), "");
	rep.ratio("page fault round trip / advise of 1 page", fault_rt,
		  rep.ns("BM_OdpFirstTouch/pages:1/repeats:5/manual_time"), "");
	const std::string inv = "BM_CacheInvalidate4K/cached:";
	rep.ratio("registration cache: hit / miss, 4 KiB mmap'd (inline)",
		  rep.ns("BM_CacheHit4K/repeats:5"), rep.ns("BM_CacheMiss4K/repeats:5"),
		  "target: <= 0.2");
	rep.ratio("registration cache: miss / uncached reg+dereg (inline)",
		  rep.ns("BM_CacheMiss4K/repeats:5"),
		  rep.ns("BM_RegDeregMmap4K/thread:0/repeats:5"), "");
	rep.ratio("munmap of a cached 4 KiB range + invalidation / plain munmap",
		  rep.ns(inv + "1/repeats:5/manual_time"), rep.ns(inv + "0/repeats:5/manual_time"),
		  "");
	const double inval =
		rep.ns(inv + "1/repeats:5/manual_time") - rep.ns(inv + "0/repeats:5/manual_time");
	if (rep.ns(inv + "1/repeats:5/manual_time") > 0 &&
	    rep.ns(inv + "0/repeats:5/manual_time") > 0)
		std::printf("cost   %-58s %7.0f ns\n",
			    "invalidation per unmapped range (over munmap)", inval);
	rep.ratio("lookup, 1,000,000 live / 1 live (one key)",
		  rep.ns("BM_Lookup/live:1000000/random:0/repeats:5"),
		  rep.ns("BM_Lookup/live:1/random:0/repeats:5"), "target: flat (~1)");
	rep.ratio("lookup in random order, 1,000,000 live / 1 live",
		  rep.ns("BM_Lookup/live:1000000/random:1/repeats:5"),
		  rep.ns("BM_Lookup/live:1/random:1/repeats:5"),
		  "memory latency: 64 MiB of entries");
	rep.ratio("reg+dereg throughput 2 threads / 1 thread (inline)",
		  rep.items("BM_RegDeregThreads/repeats:5/real_time/threads:2"),
		  rep.items("BM_RegDeregThreads/repeats:5/real_time/threads:1"), "target: >= 1.7");
	/* MRs first, then pools, PDs and devices. */
	w.reset();
	devs.clear();
	return ratio_lines() ? 0 : 1;
}
