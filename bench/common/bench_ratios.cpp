/* SPDX-License-Identifier: BSD-3-Clause */
#include "bench_ratios.h"

#include <cstdio>
#include <string>

namespace nicmr::bench {

double median(std::vector<double> v)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	const size_t n = v.size();
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

namespace {

std::string num(double v, const char *fmt)
{
	if (!(v > 0))
		return "n/a";
	char b[32];
	std::snprintf(b, sizeof(b), fmt, v);
	return b;
}

/* A difference of two measured figures (may be negative), else n/a. */
std::string diff(double a, double b)
{
	if (!(a > 0 && b > 0))
		return "n/a";
	char s[32];
	std::snprintf(s, sizeof(s), "%.0f", a - b);
	return s;
}

std::string ratio(double a, double b)
{
	return a > 0 && b > 0 ? num(a / b, "%.3f") : "n/a";
}

const char *verdict(bool known, bool met)
{
	return !known ? "n/a" : met ? "met" : "MISSED";
}

} // namespace

void print_ratio_lines(const RatioFigures &f)
{
	const bool have_nf = f.native > 0 && f.floor > 0;
	const bool have_pn = f.provider > 0 && f.native > 0;
	const bool have_live = f.reg1 > 0 && f.reg_live > 0 && f.close1 > 0 && f.close_live > 0;
	std::printf("RATIOS medians floor_ns=%s native_ns=%s provider_ns=%s\n",
		    num(f.floor, "%.0f").c_str(), num(f.native, "%.0f").c_str(),
		    num(f.provider, "%.0f").c_str());
	std::printf("RATIOS native_over_floor_ns=%s target<=%.0f %s\n",
		    diff(f.native, f.floor).c_str(), kNativeOverFloorTargetNs,
		    verdict(have_nf, f.native - f.floor <= kNativeOverFloorTargetNs));
	std::printf("RATIOS provider_over_native_ns=%s provider_over_native=%s target<=%.0f %s\n",
		    diff(f.provider, f.native).c_str(), ratio(f.provider, f.native).c_str(),
		    kProviderOverNativeTargetNs,
		    verdict(have_pn, f.provider - f.native <= kProviderOverNativeTargetNs));
	std::printf("RATIOS live=%llu reg_1_ns=%s reg_live_ns=%s close_1_ns=%s close_live_ns=%s "
		    "reg_live_over_1=%s close_live_over_1=%s target<=%.2f %s\n",
		    static_cast<unsigned long long>(f.live), num(f.reg1, "%.0f").c_str(),
		    num(f.reg_live, "%.0f").c_str(), num(f.close1, "%.0f").c_str(),
		    num(f.close_live, "%.0f").c_str(), ratio(f.reg_live, f.reg1).c_str(),
		    ratio(f.close_live, f.close1).c_str(), kLiveOverOneTarget,
		    verdict(have_live, f.reg_live <= kLiveOverOneTarget * f.reg1 &&
					       f.close_live <= kLiveOverOneTarget * f.close1));
	std::fflush(stdout);
}

} // namespace nicmr::bench
