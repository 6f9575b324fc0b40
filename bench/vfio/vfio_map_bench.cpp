/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * vfio-map-bench: what mapping a pool for DMA costs through VFIO (VFIO_IOMMU_MAP_DMA and
 * UNMAP_DMA: page pinning plus IOMMU page tables) against the emulated bus's IOMMU model
 * (drivers/bus/emu EmuIommu, a table in the process), for a 2 MiB and a 1 GiB pool on 2 MiB
 * pages, measured in the same run.
 *
 * It needs a device bound to vfio-pci (the container has no IOMMU before a group joins): the
 * PCI address comes from NICMR_VFIO_DEVICE. The VFIO guest (devtools/vfio-guest) runs it with
 * edu. Under TCG absolute times mean little; the BENCH lines give the median of each and the
 * ratio VFIO / emulated. Without a device it says so and exits 1.
 */
#include <benchmark/benchmark.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "bench_cli.h"
#include "emu_iommu.h"
#include "mem_pool.h"
#include "vfio_bus.h"

using namespace nicmr;

namespace {

std::unique_ptr<bus::vfio::Device> g_dev;
std::unique_ptr<emu::EmuIommu> g_emu;
std::map<size_t, std::unique_ptr<mem::Pool>> g_pools;
/* The two mappers measured, set once the device is open: VFIO's, then the model's. */
mem::DmaMapper *g_mappers[2];

mem::Pool *pool_of(size_t size)
{
	auto &p = g_pools[size];
	if (!p) {
		mem::PoolParams pp;
		pp.size = size;
		pp.page_size = mem::kPage2M;
		pp.name = "bench";
		if (mem::Pool::create(pp, &p) < 0)
			return nullptr;
	}
	return p.get();
}

/* Times dma_map (or dma_unmap) alone; the other half runs untimed. */
void map_unmap(benchmark::State &state, int which, bool time_map)
{
	mem::DmaMapper *m = g_mappers[which];
	size_t size = size_t(state.range(0));
	mem::Pool *p = pool_of(size);
	if (m == nullptr || p == nullptr) {
		state.SkipWithError("no mapper or no pool (hugepages reserved?)");
		return;
	}
	const uint64_t iova = 1ull << 32; /* aligned to 1 GiB, valid on VT-d and the model */
	for (auto _ : state) {
		auto t0 = std::chrono::steady_clock::now();
		int rc = m->dma_map(p->va(), iova, size);
		auto t1 = std::chrono::steady_clock::now();
		int rc2 = m->dma_unmap(iova, size);
		auto t2 = std::chrono::steady_clock::now();
		if (rc < 0 || rc2 < 0) {
			state.SkipWithError("dma_map/dma_unmap failed");
			return;
		}
		state.SetIterationTime(
			std::chrono::duration<double>(time_map ? t1 - t0 : t2 - t1).count());
	}
}

/* Collects the medians so that the ratios can be printed after the run. */
class MedianReporter : public benchmark::ConsoleReporter {
public:
	void ReportRuns(const std::vector<Run> &runs) override
	{
		for (auto &r : runs)
			if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")
				medians[r.run_name.function_name + "/" + r.run_name.args] =
					r.GetAdjustedRealTime();
		ConsoleReporter::ReportRuns(runs);
	}
	std::map<std::string, double> medians; /* in the benchmark's time unit (us) */
};

} // namespace

int main(int argc, char **argv)
{
	/* Registered before the arguments are checked (a filter must match one), run once the
	 * device is open. */
	struct Size {
		size_t bytes;
		int iterations;
		const char *label;
	} sizes[] = {{mem::kPage2M, 20, "2M"}, {mem::kPage1G, 2, "1G"}};
	for (auto &s : sizes) {
		for (auto [bus, which] : {std::pair{"vfio", 0}, std::pair{"emu", 1}}) {
			for (bool map : {true, false}) {
				std::string name = std::string(map ? "map/" : "unmap/") + bus;
				benchmark::RegisterBenchmark(name.c_str(), map_unmap, which, map)
					->Arg(int64_t(s.bytes))
					->Iterations(s.iterations)
					->Repetitions(5)
					->ReportAggregatesOnly(true)
					->UseManualTime()
					->Unit(benchmark::kMicrosecond);
			}
		}
	}
	nicmr::bench::init(
		&argc, argv, "vfio-map-bench",
		"VFIO_IOMMU_MAP_DMA / UNMAP_DMA of a 2 MiB and a 1 GiB pool on 2 MiB "
		"pages against the\nemulated IOMMU, medians of 5 repetitions and their "
		"ratio (BENCH lines). The device:\nNICMR_VFIO_DEVICE, a PCI address bound "
		"to vfio-pci (exit status 1 without one).");
	const char *addr = std::getenv("NICMR_VFIO_DEVICE");
	if (addr == nullptr) {
		std::fprintf(stderr, "vfio-map-bench: set NICMR_VFIO_DEVICE to a PCI address bound "
				     "to vfio-pci\n");
		return 1;
	}
	int rc = bus::vfio::Device::open(addr, &g_dev);
	if (rc < 0) {
		std::fprintf(stderr, "vfio-map-bench: cannot open %s: %d\n", addr, rc);
		return 1;
	}
	emu::EmuIommuConfig cfg;
	if (emu::EmuIommu::create(cfg, &g_emu) < 0)
		return 1;
	g_mappers[0] = &g_dev->dma();
	g_mappers[1] = g_emu.get();
	MedianReporter rep;
	benchmark::RunSpecifiedBenchmarks(&rep);
	for (auto &s : sizes) {
		for (const char *op : {"map", "unmap"}) {
			std::string arg = std::to_string(s.bytes);
			auto v = rep.medians.find(std::string(op) + "/vfio/" + arg);
			auto e = rep.medians.find(std::string(op) + "/emu/" + arg);
			if (v == rep.medians.end() || e == rep.medians.end())
				continue;
			std::printf("BENCH vfio-dma-%s-%s median_us=%.1f emu_median_us=%.1f "
				    "ratio_vfio_over_emu=%.1f\n",
				    op, s.label, v->second, e->second,
				    e->second > 0 ? v->second / e->second : 0.0);
		}
	}
	g_pools.clear();
	g_dev.reset();
	benchmark::Shutdown();
	return 0;
}
