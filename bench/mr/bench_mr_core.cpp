/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench-mr-core: the device-independent costs of registration.
 *   BM_LookupSameKey/N     lookup of one key while N keys are live (entry in cache)
 *   BM_LookupSpread/N      lookups cycling over all N live keys in random order
 *                          (at 1,000,000 the 64 MiB table no longer fits in any cache)
 *   BM_KeyAllocRelease     alloc + release through a per-thread KeyCache
 *   BM_KeyAllocRetire      alloc + activate + retire through the grace period (no readers)
 *   BM_VariantNext         next_variant of one index (SipHash-1-3 and 16 Feistel rounds), the
 *                          step every index takes when it becomes free again (mr_variant.h)
 *   BM_RegDereg            Engine::reg + Engine::dereg with a no-op programmer
 *   BM_HostMemoryPerLiveMr registers 1,000,000 regions and reports bytes per live region
 *   BM_RawKeyEncode        encode_raw_key of one key (layout and CRC32C)
 *   BM_RawKeyDecode        decode_raw_key of one blob (CRC32C and field checks)
 * Every timing is reported as the median of 5 repetitions.
 */
#include <algorithm>
#include <benchmark/benchmark.h>
#include <cstdio>
#include <numeric>
#include <random>
#include <unistd.h>
#include <vector>

#include "bench_cli.h"
#include "mr_engine.h"
#include "mr_rawkey.h"

using namespace nicmr::mr;

namespace {

constexpr uint32_t kIndexCount = 1u << 21;
constexpr uint64_t kBase = 0x100000000000;
constexpr uint64_t kRegion = 4096;

struct World {
	size_t live = 0;
	NullProgrammer prog;
	std::unique_ptr<Engine> e;
	std::vector<uint32_t> keys;
	/* One request per live key, in random order: the loop streams through this array, so
	 * the table entry is the only access the hardware cannot predict. */
	std::vector<LookupRequest> spread;
};

/* One world at a time: a million live regions is 64 MiB of table. */
World &world(size_t live)
{
	static std::unique_ptr<World> w;
	if (w && w->live == live)
		return *w;
	w.reset();
	w = std::make_unique<World>();
	w->live = live;
	if (Engine::create({kIndexCount, 8, 1}, w->prog, &w->e) != 0)
		std::abort();
	KeyCache cache(w->e->keys());
	for (size_t i = 0; i < live; ++i) {
		RegRequest r;
		r.addr = kBase + i * kRegion;
		r.len = kRegion;
		r.access = kAccessLocalRead | kAccessLocalWrite | kAccessRemoteRead;
		r.pd = 1;
		r.iova = r.addr;
		uint32_t k;
		if (w->e->reg(r, &cache, &k) != 0)
			std::abort();
		w->keys.push_back(k);
	}
	std::vector<uint32_t> order(live);
	std::iota(order.begin(), order.end(), 0);
	std::shuffle(order.begin(), order.end(), std::mt19937(42));
	for (uint32_t i : order)
		w->spread.push_back(
			{w->keys[i], kBase + i * kRegion + 64, 64, kAccessRemoteRead, 1});
	return *w;
}

void BM_LookupSameKey(benchmark::State &st)
{
	World &w = world(st.range(0));
	const size_t i = w.live / 2;
	const LookupRequest req{w.keys[i], kBase + i * kRegion + 64, 64, kAccessRemoteRead, 1};
	LookupResult res;
	for (auto _ : st) {
		int rc = w.e->lookup(req, &res);
		benchmark::DoNotOptimize(rc);
		benchmark::DoNotOptimize(res);
	}
}

void BM_LookupSpread(benchmark::State &st)
{
	World &w = world(st.range(0));
	size_t n = 0;
	LookupResult res;
	for (auto _ : st) {
		int rc = w.e->lookup(w.spread[n], &res);
		n = n + 1 == w.live ? 0 : n + 1;
		benchmark::DoNotOptimize(rc);
		benchmark::DoNotOptimize(res);
	}
}

void BM_KeyAllocRelease(benchmark::State &st)
{
	std::unique_ptr<KeySpace> ks;
	if (KeySpace::create({1u << 16, 8}, &ks) != 0)
		std::abort();
	KeyCache cache(*ks);
	for (auto _ : st) {
		uint32_t k;
		ks->alloc(&cache, &k);
		ks->release(&cache, k);
		benchmark::DoNotOptimize(k);
	}
}

void BM_KeyAllocRetire(benchmark::State &st)
{
	std::unique_ptr<KeySpace> ks;
	if (KeySpace::create({1u << 16, 8}, &ks) != 0)
		std::abort();
	KeyCache cache(*ks);
	for (auto _ : st) {
		uint32_t k;
		ks->alloc(&cache, &k);
		ks->activate(k);
		ks->begin_retire(k);
		ks->retire(&cache, k);
		benchmark::DoNotOptimize(k);
	}
}

void BM_VariantNext(benchmark::State &st)
{
	const VariantSecret secret{0x0123456789abcdefull, 0xfedcba9876543210ull};
	uint32_t index = 1;
	for (auto _ : st) {
		/* Indices in turn, each from a variant of its own: the calls overlap, as the ones
		 * of a retire batch do (KeySpace::free_batch). */
		const uint8_t v = next_variant(secret, index, static_cast<uint8_t>(index * 7));
		index = index == 0xffffff ? 1 : index + 1;
		benchmark::DoNotOptimize(v);
	}
}

void BM_RegDereg(benchmark::State &st)
{
	NullProgrammer prog;
	std::unique_ptr<Engine> e;
	if (Engine::create({1u << 16, 8, 1}, prog, &e) != 0)
		std::abort();
	KeyCache cache(e->keys());
	RegRequest r;
	r.addr = kBase;
	r.len = 1 << 20;
	r.access = kAccessLocalRead | kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite;
	r.pd = 1;
	r.iova = kBase;
	for (auto _ : st) {
		uint32_t k;
		if (e->reg(r, &cache, &k) != 0 || e->dereg(k, &cache) != 0)
			st.SkipWithError("reg/dereg failed");
	}
}

const RawKey kRawKey = {0x1122334455667788,
			kBase,
			1 << 20,
			0x1234501,
			7,
			kAccessLocalRead | kAccessLocalWrite | kAccessRemoteRead |
				kAccessRemoteWrite};

void BM_RawKeyEncode(benchmark::State &st)
{
	uint8_t b[kRawKeySize];
	for (auto _ : st) {
		size_t size = sizeof(b);
		if (encode_raw_key(kRawKey, b, &size) != 0)
			st.SkipWithError("encode failed");
		benchmark::DoNotOptimize(b);
	}
}

void BM_RawKeyDecode(benchmark::State &st)
{
	uint8_t b[kRawKeySize];
	size_t size = sizeof(b);
	if (encode_raw_key(kRawKey, b, &size) != 0)
		std::abort();
	for (auto _ : st) {
		benchmark::DoNotOptimize(b);
		RawKey k;
		if (decode_raw_key(b, sizeof(b), kAnyDevice, &k) != 0)
			st.SkipWithError("decode failed");
		benchmark::DoNotOptimize(k);
	}
}

size_t rss_bytes()
{
	long pages = 0, resident = 0;
	FILE *f = std::fopen("/proc/self/statm", "r");
	if (!f)
		return 0;
	if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = 0;
	std::fclose(f);
	return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

void BM_HostMemoryPerLiveMr(benchmark::State &st)
{
	const size_t live = 1000000;
	for (auto _ : st) {
		NullProgrammer prog;
		std::unique_ptr<Engine> e;
		if (Engine::create({kIndexCount, 8, 1}, prog, &e) != 0)
			std::abort();
		KeyCache cache(e->keys());
		const size_t before = rss_bytes();
		for (size_t i = 0; i < live; ++i) {
			RegRequest r;
			r.addr = kBase + i * kRegion;
			r.len = kRegion;
			r.access = kAccessLocalRead;
			r.iova = r.addr;
			uint32_t k;
			if (e->reg(r, &cache, &k) != 0)
				std::abort();
		}
		const size_t after = rss_bytes();
		st.counters["rss_bytes_per_live_mr"] = double(after - before) / double(live);
		st.counters["table_bytes_per_live_mr"] = double(Engine::bytes_per_live_region());
		st.counters["fixed_bytes_per_index"] = double(Engine::fixed_bytes_per_index());
	}
}

} // namespace

BENCHMARK(BM_LookupSameKey)
	->Arg(1)
	->Arg(1000)
	->Arg(1000000)
	->Repetitions(5)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_LookupSpread)
	->Arg(1)
	->Arg(1000)
	->Arg(1000000)
	->Repetitions(5)
	->ReportAggregatesOnly(true);
BENCHMARK(BM_KeyAllocRelease)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_KeyAllocRetire)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_VariantNext)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_RegDereg)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_RawKeyEncode)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_RawKeyDecode)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_HostMemoryPerLiveMr)
	->Iterations(1)
	->Repetitions(3)
	->ReportAggregatesOnly(true)
	->Unit(benchmark::kMillisecond);

int main(int argc, char **argv)
{
	nicmr::bench::init(
		&argc, argv, "bench-mr-core",
		"The device-independent costs of registration: key lookups with N live "
		"keys\n(same key, and spread in random order), key alloc + release and "
		"alloc + retire,\nthe variant step of a freed index, Engine::reg + dereg with a "
		"no-op programmer,\nhost bytes per live region, raw key encode and decode. Read "
		"the medians of 5\nrepetitions.");
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
