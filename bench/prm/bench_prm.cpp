/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench-prm: the mlx5 control path on the device model.
 *   CmdRoundTrip/<mode>      one 16-byte-in, 16-byte-out command (QUERY_PAGES regular): the
 *                            driver's queue cost, doorbell delivery and the model's decoder
 *   CreateDestroyMkey/<n>    CREATE_MKEY with n MTT entries (272 + 8n input bytes: a mailbox
 *                            chain of 1, 9 or 65 blocks) then DESTROY_MKEY
 * Modes: inline (the device runs on the ringing thread) and thread (a device poll thread).
 * And the data path's field access alone (the layout table on the WQE/CQE hot path):
 *   PostWrite                Qp::post_write of one SGE with no doorbell: ctrl, remote-address
 *                            and data segments written, nothing executed (time per WQE)
 *   PostUmrBind              post_umr_bind of one inline MTT entry with no doorbell: ctrl, UMR
 *                            ctrl, mkey context and translation written (time per WQE)
 *   PollCompletion           Qp::poll of completions the device wrote while timing was paused:
 *                            owner check, CQE decode, doorbell record (time per completion)
 * Each benchmark reports the median of its repetitions (time per command, pair, WQE or CQE).
 */
#include <cstdio>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_cli.h"

#include "emu_mlx5.h"
#include "mem_space.h"
#include "mlx5_device.h"
#include "mlx5_qp.h"
#include "mlx5_umr.h"

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

/* A UAR, a CQ and a QP connected to itself: WQEs are built in its ring (RST or RTS). */
struct QpRig {
	std::unique_ptr<mlx5::Uar> uar;
	std::unique_ptr<mlx5::Cq> cq;
	std::unique_ptr<mlx5::Qp> qp;

	int open(Rig &r, uint32_t log_size)
	{
		int rc = mlx5::Uar::alloc(*r.dev, &uar);
		mlx5::CqParams cp;
		cp.log_size = log_size;
		if (rc == 0)
			rc = mlx5::Cq::create(*r.dev, *uar, cp, &cq);
		mlx5::QpParams qpp;
		qpp.pd = r.pd;
		qpp.log_sq_size = log_size;
		if (rc == 0)
			rc = mlx5::Qp::create(*r.dev, *uar, *cq, qpp, &qp);
		return rc;
	}
	~QpRig()
	{
		qp.reset();
		cq.reset();
		uar.reset();
	}
};

constexpr uint32_t kLogRing = 12; /* 4096 WQEBBs, 4096 CQEs */

/* Fills the SQ with post(i) (no doorbell), then resets the QP outside the timing. */
template <typename Post>
void fill_ring(benchmark::State &state, QpRig &q, uint32_t per_wqe, Post post)
{
	const uint32_t n = q.qp->sq_size() / per_wqe;
	uint64_t wqes = 0;
	for (auto _ : state) {
		for (uint32_t i = 0; i < n; i++) {
			if (post(i) != 0) {
				state.SkipWithError("post failed");
				return;
			}
		}
		wqes += n;
		state.PauseTiming();
		if (q.qp->to_reset() != 0) {
			state.SkipWithError("2RST failed");
			return;
		}
		state.ResumeTiming();
	}
	state.SetItemsProcessed(static_cast<int64_t>(wqes));
	state.counters["ns_per_wqe"] =
		benchmark::Counter(static_cast<double>(wqes),
				   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void PostWrite(benchmark::State &state)
{
	Rig r;
	QpRig q;
	if (r.open(emu::DoorbellDelivery::inline_call) != 0 || q.open(r, kLogRing) != 0) {
		state.SkipWithError("device model did not come up");
		return;
	}
	const mlx5::Sge sge{0x40001000, 4096, 0x1234};
	fill_ring(state, q, 1, [&](uint32_t i) {
		return q.qp->post_write({&sge, 1}, 0x80000000 + i * 64, 0x5678, i,
					mlx5::kNoDoorbell |
						(i % 32 == 31 ? unsigned{mlx5::kSignaled} : 0u));
	});
}

void PostUmrBind(benchmark::State &state)
{
	Rig r;
	QpRig q;
	if (r.open(emu::DoorbellDelivery::inline_call) != 0 || q.open(r, kLogRing) != 0) {
		state.SkipWithError("device model did not come up");
		return;
	}
	const mlx5::MttEntry mtt{0x40000000, true, true};
	mlx5::UmrBind b;
	b.lr = b.lw = b.rr = b.rw = true;
	b.pd = r.pd;
	b.start = 0x40000000;
	b.len = 4096;
	b.mtt = {&mtt, 1};
	/* ctrl + UMR ctrl + mkey context + one MTT entry padded to 64 bytes: 3 WQEBBs. */
	fill_ring(state, q, 3, [&](uint32_t i) {
		b.mkey = (i + 1) << 8 | (i & 0xff);
		return mlx5::post_umr_bind(*q.qp, b, i, mlx5::kNoDoorbell);
	});
}

void PollCompletion(benchmark::State &state)
{
	Rig r;
	QpRig q;
	if (r.open(emu::DoorbellDelivery::inline_call) != 0 || q.open(r, kLogRing) != 0 ||
	    q.qp->connect(q.qp->qpn()) != 0) {
		state.SkipWithError("device model did not come up");
		return;
	}
	const uint32_t n = q.qp->sq_size();
	uint64_t cqes = 0;
	mlx5::Completion c[16];
	for (auto _ : state) {
		state.PauseTiming();
		for (uint32_t i = 0; i < n; i++)
			if (q.qp->post_nop(i, mlx5::kSignaled | mlx5::kNoDoorbell) != 0) {
				state.SkipWithError("post failed");
				return;
			}
		q.qp->ring(); /* inline delivery: all n CQEs are written before this returns */
		state.ResumeTiming();
		uint32_t got = 0;
		while (got < n) {
			int k = q.qp->poll(c, 16);
			for (int i = 0; i < k; i++)
				if (!c[i].ok())
					state.SkipWithError("error completion");
			got += static_cast<uint32_t>(k);
		}
		cqes += got;
	}
	state.SetItemsProcessed(static_cast<int64_t>(cqes));
	state.counters["ns_per_cqe"] =
		benchmark::Counter(static_cast<double>(cqes),
				   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
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

BENCHMARK(PostWrite)->Repetitions(kReps)->ReportAggregatesOnly(true)->UseRealTime();
BENCHMARK(PostUmrBind)->Repetitions(kReps)->ReportAggregatesOnly(true)->UseRealTime();
BENCHMARK(PollCompletion)->Repetitions(kReps)->ReportAggregatesOnly(true)->UseRealTime();

int main(int argc, char **argv)
{
	static const char kAbout[] = "bench-prm: mlx5 command round trip and "
				     "CREATE_MKEY+DESTROY_MKEY on the device model, and the data "
				     "path's WQE building and CQE polling alone; read the _median "
				     "rows (wall time per command or per pair; ns_per_wqe, "
				     "ns_per_cqe)";
	nicmr::bench::init(&argc, argv, "bench-prm", kAbout);
	std::printf("%s\n", kAbout);
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
