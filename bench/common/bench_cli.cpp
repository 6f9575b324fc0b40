/* SPDX-License-Identifier: BSD-3-Clause */
#include "bench_cli.h"

#include "nicmr_parse.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

namespace nicmr::bench {
namespace {

const char *g_prog = "bench";
const char *g_about = "";
std::string g_bm_flags; /* the --benchmark_* arguments given, for the message below */

void print_help()
{
	std::printf("usage: %s [Google Benchmark options]\n%s\n"
		    "Exit status: 0, or 2 for an unknown option, a bad value or a filter that "
		    "matches no benchmark.\n\nGoogle Benchmark options:\n",
		    g_prog, g_about);
	benchmark::PrintDefaultHelp();
}

/* Google Benchmark 1.7's ParseCommandLineFlags() calls its help printer, then exit(0), for
 * --help and for a value of --benchmark_format, --benchmark_out_format, --benchmark_time_unit
 * or --benchmark_color it does not know. init() answers --help itself first, so only a bad
 * value reaches this: it is a usage error. */
void bad_benchmark_value()
{
	usage_error(g_prog, "a bad value among%s", g_bm_flags.c_str());
}

/* Lets RunSpecifiedBenchmarks() count the benchmarks a filter selects without running any:
 * it runs them only when the display reporter's ReportContext() returns true. */
class CountOnlyReporter final : public benchmark::BenchmarkReporter {
public:
	bool ReportContext(const Context &) override { return false; }
	void ReportRuns(const std::vector<Run> &) override {}
};

} // namespace

bool parse_count(const char *text, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	if (text == nullptr || !parse_number(text, &v) || v == 0 || v > max)
		return false;
	*out = v;
	return true;
}

void usage_error(const char *prog, const char *fmt, ...)
{
	std::fprintf(stderr, "%s: ", prog);
	va_list ap;
	va_start(ap, fmt);
	std::vfprintf(stderr, fmt, ap);
	va_end(ap);
	std::fprintf(stderr, "\ntry '%s --help'\n", prog);
	std::exit(2);
}

void init(int *argc, char **argv, const char *prog, const char *about)
{
	g_prog = prog;
	g_about = about;
	for (int i = 1; i < *argc; i++) {
		if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
			print_help();
			std::exit(0);
		}
	}
	/* Values Google Benchmark 1.7 takes without a check: a repetition count of 0 or less
	 * runs nothing, and any --benchmark_color word it does not know means "auto". */
	static constexpr char kReps[] = "--benchmark_repetitions=";
	static constexpr char kColor[] = "--benchmark_color=";
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		if (std::strncmp(a, "--benchmark_", 12) == 0)
			g_bm_flags += std::string(" ") + a;
		uint64_t reps;
		if (std::strncmp(a, kReps, sizeof(kReps) - 1) == 0 &&
		    !parse_count(a + sizeof(kReps) - 1, 1000000, &reps))
			usage_error(prog,
				    "--benchmark_repetitions takes a count (1 or more), not '%s'",
				    a + sizeof(kReps) - 1);
		if (std::strncmp(a, kColor, sizeof(kColor) - 1) == 0) {
			std::string v = a + sizeof(kColor) - 1;
			if (v != "auto" && v != "true" && v != "false" && v != "yes" && v != "no" &&
			    v != "1" && v != "0")
				usage_error(prog,
					    "--benchmark_color takes auto, true or false, not '%s'",
					    v.c_str());
		}
	}
	benchmark::Initialize(argc, argv, bad_benchmark_value);
	/* What Initialize() did not take is not an option of this program, or has a value it
	 * could not parse (it said which on stderr). */
	if (*argc > 1)
		usage_error(prog, "unknown option or bad value '%s'", argv[1]);

	CountOnlyReporter count;
	std::ostringstream sink; /* the list --benchmark_list_tests would print twice */
	count.SetOutputStream(&sink);
	count.SetErrorStream(&sink);
	if (benchmark::RunSpecifiedBenchmarks(&count) == 0)
		usage_error(prog,
			    "--benchmark_filter='%s' matches no benchmark "
			    "(--benchmark_list_tests=true lists them)",
			    benchmark::GetBenchmarkFilter().c_str());
}

} // namespace nicmr::bench
