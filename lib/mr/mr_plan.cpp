/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_plan.h"

#include <algorithm>

namespace nicmr::mr {

unsigned plan_runs_page(uint64_t start, uint64_t len, const Run *runs, uint32_t count,
			unsigned maxlp, uint32_t max_translations) noexcept
{
	for (unsigned lp = maxlp; lp >= kMinLogPage; lp--) {
		const uint64_t mask = (uint64_t{1} << lp) - 1;
		bool ok = true;
		uint64_t from = 0;
		for (uint32_t j = 0; j < count && ok; j++) {
			const uint64_t a = start + from;
			ok = ((a - runs[j].iova) & mask) == 0 && (j == 0 || (a & mask) == 0);
			from = runs[j].end;
		}
		if (!ok)
			continue;
		/* A smaller page only needs more entries. */
		return (max_translations == 0 || mtt_pages(start, len, lp) <= max_translations) ? lp
												: 0;
	}
	return 0;
}

void plan_runs_mtt(uint64_t start, uint64_t len, const Run *runs, uint32_t count, unsigned lp,
		   uint64_t *out) noexcept
{
	const uint64_t page = uint64_t{1} << lp;
	const uint64_t n = mtt_pages(start, len, lp);
	const uint64_t base = start & ~(page - 1);
	uint32_t j = 0;
	for (uint64_t k = 0; k < n; k++) {
		/* The region's first byte in page k, and the run that holds it. */
		const uint64_t a = std::max(base + k * page, start);
		const uint64_t off = a - start;
		while (j + 1 < count && runs[j].end <= off)
			j++;
		const uint64_t from = j == 0 ? 0 : runs[j - 1].end;
		out[k] = (runs[j].iova + (off - from)) & ~(page - 1);
	}
}

int plan_vector(uint64_t start, uint64_t len, const VecPiece *pieces, size_t n,
		uint32_t max_translations, Run *runs, VecPlan *out) noexcept
{
	if (n == 0)
		return -EINVAL;
	uint32_t nr = 0;
	uint64_t off = 0, run_from = 0;
	unsigned maxlp = kMaxLogPage;
	for (size_t i = 0; i < n; i++) {
		const VecPiece &p = pieces[i];
		if (nr != 0 && runs[nr - 1].iova + (off - run_from) == p.iova) {
			runs[nr - 1].end = off + p.len;
		} else {
			if (nr == kMaxRuns)
				return -E2BIG;
			runs[nr++] = Run{off + p.len, p.iova};
			run_from = off;
		}
		off += p.len;
		maxlp = std::min(maxlp, p.log_page);
	}
	VecPlan plan;
	plan.run_count = nr;
	const unsigned lp = plan_runs_page(start, len, runs, nr, maxlp, max_translations);
	if (lp != 0) {
		plan.log_page_size = uint8_t(lp);
		if (nr > 1) {
			plan.layout = VecLayout::mtt_runs;
			plan.mtt_count = mtt_pages(start, len, lp);
		}
		*out = plan;
		return 0;
	}
	/* KLM: an entry's byte count is 32 bits (PRM.md, "Translation entries"). */
	for (size_t i = 0; i < n; i++)
		if (pieces[i].len > UINT32_MAX)
			return -E2BIG;
	plan.layout = VecLayout::klm;
	*out = plan;
	return 0;
}

} // namespace nicmr::mr
