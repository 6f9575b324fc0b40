/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench-mem: what lib/mem costs on the registration path and when pools are made.
 *   translate/hot          address -> IOVA in one pool, addresses in cache (target <= 3 ns)
 *   lookup/pools:N         address -> pool with 1, 16 and 256 pools (target: flat)
 *   pool_create_1GiB_2MiB  Pool::create + destroy of 1 GiB on 2 MiB pages (512 free pages)
 * Each runs several repetitions; the median is the figure to read.
 */
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <sys/mman.h>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_cli.h"
#include "mem_space.h"

using namespace nicmr::mem;

namespace {

/* A mapper that maps nothing and records nothing: only lib/mem's own cost is measured. */
class NullMapper final : public DmaMapper {
public:
	int dma_map(void *, uint64_t, size_t) override { return 0; }
	int dma_unmap(uint64_t, size_t) override { return 0; }
	std::vector<IovaRange> iova_ranges() const override
	{
		return {{1ull << 20, (1ull << 48) - 1}};
	}
};

/* pools pools of 64 KiB each with a 64 KiB hole after each, imported from one anonymous map. */
struct Pools {
	explicit Pools(size_t pools) : space(mapper), len(pools * 2 * kChunk)
	{
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		base = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
		for (size_t i = 0; base != nullptr && i < pools; i++) {
			std::unique_ptr<Pool> pool;
			if (Pool::import(base + 2 * i * kChunk, kChunk, kPage4K, -1, "bench",
					 &pool) != 0 ||
			    space.add_pool(std::move(pool), nullptr) != 0)
				ok = false;
		}
		ok = ok && base != nullptr;
	}
	~Pools()
	{
		if (base != nullptr)
			munmap(base, len);
	}
	static constexpr size_t kChunk = 64 << 10;
	NullMapper mapper;
	DmaSpace space;
	size_t len;
	char *base = nullptr;
	bool ok = true;
};

void BM_TranslateHot(benchmark::State &state)
{
	Pools p(1);
	if (!p.ok) {
		state.SkipWithError("could not build the pool");
		return;
	}
	size_t off = 0;
	uint64_t iova = 0;
	for (auto _ : state) {
		int rc = p.space.translate(p.base + off, 64, &iova);
		benchmark::DoNotOptimize(rc);
		benchmark::DoNotOptimize(iova);
		off = (off + 4160) & (Pools::kChunk - 1) & ~size_t{63};
	}
	state.SetLabel("address -> IOVA, one pool, hot");
}

void BM_Lookup(benchmark::State &state)
{
	const size_t pools = static_cast<size_t>(state.range(0));
	Pools p(pools);
	if (!p.ok) {
		state.SkipWithError("could not build the pools");
		return;
	}
	/* Addresses spread over every pool, precomputed so the loop measures the lookup only. */
	std::vector<const char *> addrs(4096);
	std::mt19937_64 rng(1);
	for (auto &a : addrs)
		a = p.base + 2 * (rng() % pools) * Pools::kChunk + rng() % Pools::kChunk;
	size_t i = 0;
	for (auto _ : state) {
		const PoolEntry *e = p.space.lookup(addrs[i], 1);
		benchmark::DoNotOptimize(e);
		i = (i + 1) & (addrs.size() - 1);
	}
	state.SetLabel("address -> pool");
}

void BM_PoolCreate1GiB(benchmark::State &state)
{
	size_t free_pages = hugepages_free(kPage2M);
	if (free_pages < 512) {
		HugepageShortage s;
		s.wanted = 512;
		s.free_pages = free_pages;
		s.total = hugepages_total(kPage2M);
		s.offered = hugepages_offered(kPage2M);
		state.SkipWithError(("needs " + describe_hugepage_shortage(s)).c_str());
		return;
	}
	PoolParams params;
	params.size = kPage1G;
	params.page_size = kPage2M;
	params.name = "bench";
	for (auto _ : state) {
		std::unique_ptr<Pool> pool;
		if (Pool::create(params, &pool) != 0) {
			state.SkipWithError("Pool::create failed (pages taken meanwhile?)");
			return;
		}
		benchmark::DoNotOptimize(pool->va());
	}
	state.SetLabel("create + populate + lock + destroy, per GiB");
}

} // namespace

BENCHMARK(BM_TranslateHot)->Name("translate/hot")->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_Lookup)
	->Name("lookup/pools")
	->Arg(1)
	->Arg(16)
	->Arg(256)
	->Repetitions(5)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_PoolCreate1GiB)
	->Name("pool_create_1GiB_2MiB")
	->Unit(benchmark::kMillisecond)
	->Iterations(3)
	->Repetitions(5)
	->ReportAggregatesOnly(true);

int main(int argc, char **argv)
{
	nicmr::bench::init(
		&argc, argv, "bench-mem",
		"What lib/mem costs on the registration path and when pools are made:\n"
		"  translate/hot          address -> IOVA in one pool, in cache\n"
		"  lookup/pools/N         address -> pool with 1, 16 and 256 pools\n"
		"  pool_create_1GiB_2MiB  Pool::create + destroy of 1 GiB on 2 MiB pages\n"
		"Read the medians of the repetitions.");
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
