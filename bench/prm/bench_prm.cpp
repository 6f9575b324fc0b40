/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench-prm: the mlx5 control path on the device model.
 *   CmdRoundTrip/<mode>      one 16-byte-in, 16-byte-out command (QUERY_PAGES regular): the
 *                            driver's queue cost, doorbell delivery and the model's decoder
 *   CreateDestroyMkey/<n>    CREATE_MKEY with n MTT entries (272 + 8n input bytes: a mailbox
 *                            chain of 1, 9 or 65 blocks) then DESTROY_MKEY
 * Modes: inline (the device runs on the ringing thread) and thread (a device poll thread).
 * Each benchmark reports the median of its repetitions (time per command or per pair).
 */
#include <cstdio>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_cli.h"

#include "emu_mlx5.h"
#include "mem_space.h"
#include "mlx5_device.h"

namespace emu = nicmr::emu;
namespace mem = nicmr::mem;
namespace mlx5 = nicmr::mlx5;
namespace prm = nicmr::mlx5::prm;

namespace {

struct Rig {
	std::unique_ptr<emu::EmuMlx5> hw;
	std::unique_ptr<mem::DmaSpace> space;
	std::unique_ptr<mem::DmaArena> arena;
	std::unique_ptr<mlx5::Device> dev;
	uint32_t pd = 0;

	int open(emu::DoorbellDelivery d)
	{
		emu::EmuConfig cfg;
		cfg.delivery = d;
		int rc = emu::emu_mlx5_create(cfg, &hw);
		if (rc != 0)
			return rc;
		space = std::make_unique<mem::DmaSpace>(hw->function().dma());
		mem::PoolParams p;
		p.size = size_t{8} << 20;
		p.page_size = mem::kPage4K;
		p.name = "bench-prm";
		rc = mem::DmaArena::create(*space, p, &arena);
		if (rc != 0)
			return rc;
		mlx5::DeviceOptions o;
		o.arena = arena.get();
		rc = mlx5::Device::open(hw->function(), *space, o, &dev);
		if (rc != 0)
			return rc;
		return dev->alloc_pd(&pd);
	}
	~Rig()
	{
		dev.reset();
		arena.reset();
		space.reset();
		hw.reset();
	}
};

void CmdRoundTrip(benchmark::State &state, emu::DoorbellDelivery d)
{
	Rig r;
	if (int rc = r.open(d); rc != 0) {
		state.SkipWithError("device model did not come up");
		return;
	}
	for (auto _ : state) {
		int32_t n = 0;
		if (mlx5::query_pages(r.dev->cmdq(), prm::query_pages_op_mod::regular, &n) != 0) {
			state.SkipWithError("QUERY_PAGES failed");
			break;
		}
		benchmark::DoNotOptimize(n);
	}
	state.SetItemsProcessed(state.iterations());
}

void CreateDestroyMkey(benchmark::State &state, emu::DoorbellDelivery d)
{
	Rig r;
	if (int rc = r.open(d); rc != 0) {
		state.SkipWithError("device model did not come up");
		return;
	}
	const auto n = static_cast<size_t>(state.range(0));
	std::vector<mlx5::MttEntry> mtt(n);
	for (size_t i = 0; i < n; i++)
		mtt[i].iova = 0x40000000 + i * 4096;
	mlx5::MkeyCreate c;
	c.ctx.pd = r.pd;
	c.ctx.lr = c.ctx.lw = c.ctx.rr = c.ctx.rw = true;
	c.ctx.start_addr = 0x40000000;
	c.ctx.len = n * 4096;
	c.mtt = mtt;
	for (auto _ : state) {
		uint32_t idx = 0;
		if (r.dev->create_mkey(c, &idx) != 0 || r.dev->destroy_mkey(idx) != 0) {
			state.SkipWithError("CREATE/DESTROY_MKEY failed");
			break;
		}
	}
	state.SetItemsProcessed(state.iterations());
	state.counters["mtt_entries"] = static_cast<double>(n);
}

constexpr int kReps = 7;

} // namespace

BENCHMARK_CAPTURE(CmdRoundTrip, inline, emu::DoorbellDelivery::inline_call)
	->Repetitions(kReps)
	->ReportAggregatesOnly(true)
	->UseRealTime();
BENCHMARK_CAPTURE(CmdRoundTrip, thread, emu::DoorbellDelivery::poll_thread)
	->Repetitions(kReps)
	->ReportAggregatesOnly(true)
	->UseRealTime();
BENCHMARK_CAPTURE(CreateDestroyMkey, inline, emu::DoorbellDelivery::inline_call)
	->Arg(1)
	->Arg(512)
	->Arg(4096)
	->Repetitions(kReps)
	->ReportAggregatesOnly(true)
	->UseRealTime();
BENCHMARK_CAPTURE(CreateDestroyMkey, thread, emu::DoorbellDelivery::poll_thread)
	->Arg(1)
	->Arg(512)
	->Arg(4096)
	->Repetitions(kReps)
	->ReportAggregatesOnly(true)
	->UseRealTime();

int main(int argc, char **argv)
{
	static const char kAbout[] = "bench-prm: mlx5 command round trip and "
				     "CREATE_MKEY+DESTROY_MKEY on the device model; read the "
				     "_median rows (wall time per command or per pair)";
	nicmr::bench::init(&argc, argv, "bench-prm", kAbout);
	std::printf("%s\n", kAbout);
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
