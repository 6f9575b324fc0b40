/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench-roce: the RoCEv2 packet path of drivers/common/roce, on one core, no I/O.
 *   Build/<n>   roce::build() of an RDMA WRITE ONLY with n payload bytes over IPv4: BTH, RETH,
 *               payload copied into the packet, pad and the ICRC (time per packet)
 *   Parse/<n>   roce::parse() of that packet: the ICRC recomputed and compared, the length, pad
 *               and opcode checks, the header views (time per packet)
 * n is 64 and 4096 (the largest path MTU). Each benchmark reports the median of its
 * repetitions; bytes_per_second counts the payload.
 */
#include <arpa/inet.h>

#include <cstdio>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_cli.h"

#include "roce_packet.h"

namespace roce = nicmr::roce;

namespace {

roce::IpPath path()
{
	in_addr s{}, d{};
	inet_pton(AF_INET, "192.0.2.1", &s);
	inet_pton(AF_INET, "192.0.2.2", &d);
	return roce::ipv4_path(s, d, 49152);
}

roce::Headers write_only(size_t len)
{
	roce::Headers h;
	h.opcode = roce::opcode::write_only;
	h.dest_qp = 0x11;
	h.psn = 0x100;
	h.ack_req = true;
	h.reth = {0x7f0000001000, 0x1234, static_cast<uint32_t>(len)};
	return h;
}

void Build(benchmark::State &state)
{
	const auto len = static_cast<size_t>(state.range(0));
	const roce::IpPath p = path();
	const roce::Headers h = write_only(len);
	std::vector<uint8_t> payload(len, 0x5a);
	std::vector<uint8_t> out(roce::max_datagram);
	for (auto _ : state) {
		size_t n = 0;
		if (roce::build(p, h, payload, out, &n) != roce::Error::ok) {
			state.SkipWithError("build failed");
			break;
		}
		benchmark::DoNotOptimize(n);
		benchmark::ClobberMemory();
	}
	state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * len));
}

void Parse(benchmark::State &state)
{
	const auto len = static_cast<size_t>(state.range(0));
	const roce::IpPath p = path();
	std::vector<uint8_t> payload(len, 0x5a);
	std::vector<uint8_t> pkt(roce::max_datagram);
	size_t n = 0;
	if (roce::build(p, write_only(len), payload, pkt, &n) != roce::Error::ok) {
		state.SkipWithError("build failed");
		return;
	}
	pkt.resize(n);
	for (auto _ : state) {
		roce::Parsed r;
		if (roce::parse(p, pkt, &r) != roce::Error::ok) {
			state.SkipWithError("parse refused the packet");
			break;
		}
		benchmark::DoNotOptimize(r);
	}
	state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * len));
}

constexpr int kReps = 7;

} // namespace

BENCHMARK(Build)->Arg(64)->Arg(4096)->Repetitions(kReps)->ReportAggregatesOnly(true);
BENCHMARK(Parse)->Arg(64)->Arg(4096)->Repetitions(kReps)->ReportAggregatesOnly(true);

int main(int argc, char **argv)
{
	static const char kAbout[] = "bench-roce: RoCEv2 RDMA WRITE ONLY packets over IPv4, build "
				     "(headers, payload copy, pad, ICRC) and parse (ICRC check, "
				     "length and opcode checks) of 64 B and 4 KiB payloads; read "
				     "the _median rows (time per packet)";
	nicmr::bench::init(&argc, argv, "bench-roce", kAbout);
	std::printf("%s\n", kAbout);
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
