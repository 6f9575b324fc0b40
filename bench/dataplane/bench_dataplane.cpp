/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The driver's data path on the device model (inline doorbell delivery: the device runs on the
 * posting thread, so a WRITE's cost is the driver's posting and polling plus the model's copy):
 *   - RDMA WRITE and RDMA READ of 64 KiB, one signalled WQE and its completion per iteration,
 *     against memcpy of 64 KiB between the same two buffers, measured in the same run; the
 *     ratio of medians (memcpy time / RDMA time) is printed at the end;
 *   - 8-byte inline RDMA WRITE message rate on one QP (a CQE every 32 WQEs);
 *   - UMR bind + revoke round trip on a UmrQueue (two WQEs, two completions): bench_umr_floor.h,
 *     the floor that bench-mr and bench-fi-mr measure the same way beside their registrations.
 * Medians of 10 repetitions.
 */
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include <benchmark/benchmark.h>

#include "bench_cli.h"
#include "bench_umr_floor.h"

#include "dp_rig.h"
#include "mlx5_umr.h"

using namespace nicmr::testdp;

namespace {

constexpr size_t k64K = 64 << 10;

struct Bench {
	Rig r;
	mem::DmaBlock a, b;
	TestMr ma, mb;
	nicmr::bench::UmrFloor umr;
	int rc = -1;

	Bench()
	{
		RigOptions o;
		o.data_bytes = size_t{8} << 20;
		if ((rc = r.make(o)) != 0)
			return;
		if ((rc = r.data->alloc(k64K, 4096, &a)) != 0 ||
		    (rc = r.data->alloc(k64K, 4096, &b)) != 0)
			return;
		auto all = r.ctx(true, true, true, true, true);
		if ((rc = r.mtt_mr(a, 0, k64K, all, &ma)) != 0 ||
		    (rc = r.mtt_mr(b, 0, k64K, all, &mb)) != 0)
			return;
		rc = umr.create(*r.dev, r.pd.pd(), va(b), b.iova);
	}
	~Bench()
	{
		umr.reset();
		ma.handle.reset();
		mb.handle.reset();
		if (a.va != nullptr)
			r.data->release(a);
		if (b.va != nullptr)
			r.data->release(b);
	}
	uint64_t va(const mem::DmaBlock &x) const { return reinterpret_cast<uintptr_t>(x.va); }
};

Bench &bench()
{
	static Bench b;
	return b;
}

bool ready(benchmark::State &st)
{
	if (bench().rc != 0) {
		st.SkipWithError(("rig setup failed: " + std::to_string(bench().rc)).c_str());
		return false;
	}
	return true;
}

void BM_Memcpy64K(benchmark::State &st)
{
	if (!ready(st))
		return;
	Bench &b = bench();
	for (auto _ : st) {
		std::memcpy(b.b.va, b.a.va, k64K);
		benchmark::ClobberMemory();
	}
	st.SetBytesProcessed(int64_t(st.iterations()) * k64K);
}

void rdma(benchmark::State &st, bool write)
{
	if (!ready(st))
		return;
	Bench &b = bench();
	mlx5::Sge s{b.va(b.a), static_cast<uint32_t>(k64K), b.ma.key};
	mlx5::Completion c;
	for (auto _ : st) {
		int rc = write ? b.r.qp[0]->post_write({&s, 1}, b.va(b.b), b.mb.key, 0,
						       mlx5::kSignaled)
			       : b.r.qp[0]->post_read({&s, 1}, b.va(b.b), b.mb.key, 0,
						      mlx5::kSignaled);
		if (rc != 0) {
			st.SkipWithError("post failed");
			return;
		}
		while (b.r.qp[0]->poll(&c, 1) == 0) {
		}
		if (!c.ok()) {
			st.SkipWithError("error completion");
			return;
		}
	}
	st.SetBytesProcessed(int64_t(st.iterations()) * k64K);
}

void BM_RdmaWrite64K(benchmark::State &st)
{
	rdma(st, true);
}
void BM_RdmaRead64K(benchmark::State &st)
{
	rdma(st, false);
}

void BM_Write8BMessageRate(benchmark::State &st)
{
	if (!ready(st))
		return;
	Bench &b = bench();
	uint64_t word = 0x0123456789abcdef;
	mlx5::Completion c[8];
	uint64_t n = 0;
	for (auto _ : st) {
		unsigned flags = (++n & 31) == 0 ? unsigned{mlx5::kSignaled} : 0u;
		int rc;
		while ((rc = b.r.qp[0]->post_write_inline(&word, 8, b.va(b.b), b.mb.key, n,
							  flags)) == -ENOSPC)
			b.r.qp[0]->poll(c, 8);
		if (rc != 0) {
			st.SkipWithError("post failed");
			return;
		}
		if (flags)
			b.r.qp[0]->poll(c, 8);
	}
	/* Drain: one last signalled NOP collects the tail. */
	b.r.qp[0]->post_nop(0, mlx5::kSignaled);
	while (b.r.qp[0]->sq_room() != b.r.qp[0]->sq_size())
		b.r.qp[0]->poll(c, 8);
	st.SetItemsProcessed(int64_t(st.iterations()));
}

void BM_UmrBindRevoke(benchmark::State &st)
{
	if (!ready(st))
		return;
	Bench &b = bench();
	for (auto _ : st) {
		if (b.umr.bind() != 0 || b.umr.revoke() != 0) {
			st.SkipWithError("UMR failed");
			return;
		}
	}
	st.SetItemsProcessed(int64_t(st.iterations()));
}

/* Prints what the console reporter prints and keeps the medians for the ratios. */
class RatioReporter : public benchmark::ConsoleReporter {
public:
	std::map<std::string, double> median_ns;
	void ReportRuns(const std::vector<Run> &runs) override
	{
		for (const Run &r : runs)
			if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")
				median_ns[r.run_name.function_name] = r.GetAdjustedRealTime();
		ConsoleReporter::ReportRuns(runs);
	}
};

} // namespace

BENCHMARK(BM_Memcpy64K)->Repetitions(10)->ReportAggregatesOnly(true)->UseRealTime();
BENCHMARK(BM_RdmaWrite64K)->Repetitions(10)->ReportAggregatesOnly(true)->UseRealTime();
BENCHMARK(BM_RdmaRead64K)->Repetitions(10)->ReportAggregatesOnly(true)->UseRealTime();
BENCHMARK(BM_Write8BMessageRate)->Repetitions(10)->ReportAggregatesOnly(true)->UseRealTime();
BENCHMARK(BM_UmrBindRevoke)->Repetitions(10)->ReportAggregatesOnly(true)->UseRealTime();

int main(int argc, char **argv)
{
	nicmr::bench::init(
		&argc, argv, "bench-dataplane",
		"The driver's data path on the device model (inline doorbells): RDMA "
		"WRITE and READ\nof 64 KiB against memcpy of 64 KiB, 8-byte RDMA WRITE "
		"message rate, UMR bind +\nrevoke round trip. Medians of 10 repetitions, "
		"ratios at the end.");
	RatioReporter rep;
	benchmark::RunSpecifiedBenchmarks(&rep);
	auto get = [&](const char *n) {
		auto it = rep.median_ns.find(n);
		return it == rep.median_ns.end() ? 0.0 : it->second;
	};
	double mc = get("BM_Memcpy64K");
	for (const char *n : {"BM_RdmaWrite64K", "BM_RdmaRead64K"}) {
		double t = get(n);
		if (mc > 0 && t > 0)
			std::printf("%s: median %.0f ns, memcpy 64 KiB median %.0f ns: %.0f%% of "
				    "memcpy throughput (target >= 70%%)\n",
				    n, t, mc, 100.0 * mc / t);
	}
	double umr = get("BM_UmrBindRevoke");
	if (umr > 0)
		std::printf("UMR bind+revoke round trip: median %.0f ns (target <= 200 ns)\n", umr);
	double rate = get("BM_Write8BMessageRate");
	if (rate > 0)
		std::printf("8-byte RDMA WRITE: median %.1f ns per message, %.2f M messages/s\n",
			    rate, 1e3 / rate);
	benchmark::Shutdown();
	return 0;
}
