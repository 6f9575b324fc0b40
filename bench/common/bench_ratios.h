/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The figures of a registration's cost that bench-mr and bench-fi-mr print on their last lines,
 * and the one way both time them.
 *
 *   floor     a UMR bind of a free mkey and its revoke on the device (bench_umr_floor.h): two
 *             work requests and their completions, what a registration and deregistration
 *             cannot go below
 *   native    nicmr_mr_reg + nicmr_mr_dereg of 4 KiB inside a pool (the native API's fast path)
 *   provider  fi_mr_reg + fi_close of 4 KiB inside a pool on the nicmr provider, with 1 MR live
 *             (the timed one) and with `live` other MRs registered first
 *
 * Each is timed the same way (PairSampler): per pair three clock reads, one before the first
 * call, one between the calls, one after the second; the pair is the time from the first read
 * to the third, and the median of the pairs is the figure. Every figure carries the same clock
 * cost, so differences between them are the code's.
 */
#ifndef NICMR_BENCH_RATIOS_H
#define NICMR_BENCH_RATIOS_H

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace nicmr::bench {

inline double now_ns()
{
	return std::chrono::duration<double, std::nano>(
		       std::chrono::steady_clock::now().time_since_epoch())
		.count();
}

/* The median of v (0 when empty). */
double median(std::vector<double> v);

/* Medians of the first call, the second call and the pair. */
struct PairTimes {
	double first = 0, second = 0, pair = 0;
};

/* Samples of (first call, second call, pair), appended by run(). */
class PairSampler {
public:
	/* Runs n pairs first(); second(), each returning 0 or an error code, and keeps their
	 * times unless `keep` is false (warm-up). Returns 0, or the first non-zero code, with
	 * *failed set to 1 (first) or 2 (second); the pair that failed is not kept. */
	template <class F, class S>
	int run(int n, F &&first, S &&second, int *failed, bool keep = true)
	{
		if (keep) {
			/* No reallocation (and its page faults) between the timed pairs. */
			first_.reserve(first_.size() + size_t(n));
			second_.reserve(second_.size() + size_t(n));
			pair_.reserve(pair_.size() + size_t(n));
		}
		for (int i = 0; i < n; i++) {
			const double t0 = now_ns();
			int ret = first();
			const double t1 = now_ns();
			if (ret != 0) {
				*failed = 1;
				return ret;
			}
			ret = second();
			const double t2 = now_ns();
			if (ret != 0) {
				*failed = 2;
				return ret;
			}
			if (keep) {
				first_.push_back(t1 - t0);
				second_.push_back(t2 - t1);
				pair_.push_back(t2 - t0);
			}
		}
		return 0;
	}
	PairTimes medians() const { return {median(first_), median(second_), median(pair_)}; }

private:
	std::vector<double> first_, second_, pair_;
};

/* Warm-up pairs before `reps` timed ones: a tenth as many, at least 2. */
inline int warmup_pairs(int reps)
{
	return std::max(2, reps / 10);
}

/* What the last lines are made of (0: not measured). */
struct RatioFigures {
	double floor = 0;		     /* pair median, ns */
	double native = 0;		     /* pair median, ns */
	double provider = 0;		     /* pair median with 1 MR live, ns */
	double reg1 = 0, close1 = 0;	     /* provider's calls with 1 MR live, ns */
	double reg_live = 0, close_live = 0; /* with `live` other MRs, ns */
	uint64_t live = 0;
};

/* Targets of the last lines (issue #16): the native pair at most floor + 40 ns, the provider's
 * pair at most native + 20 ns, the provider's reg and close with `live` MRs within 5 % of
 * their 1-live figures. */
inline constexpr double kNativeOverFloorTargetNs = 40;
inline constexpr double kProviderOverNativeTargetNs = 20;
inline constexpr double kLiveOverOneTarget = 1.05;

/* Prints the four last lines (the format is in doc/development.md, "Ratio lines"):
 *   RATIOS medians floor_ns=N native_ns=N provider_ns=N
 *   RATIOS native_over_floor_ns=N target<=40 met|MISSED
 *   RATIOS provider_over_native_ns=N provider_over_native=X target<=20 met|MISSED
 *   RATIOS live=L reg_1_ns=N reg_live_ns=N close_1_ns=N close_live_ns=N reg_live_over_1=X
 *          close_live_over_1=X target<=1.05 met|MISSED
 * A figure that was not measured is "n/a", and so is whatever is computed from it. */
void print_ratio_lines(const RatioFigures &f);

} // namespace nicmr::bench

#endif
