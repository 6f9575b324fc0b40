/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * MTT planning: which translation entries the device needs for a region. One planner for every
 * caller: the driver's UMR programmer (Mlx5MkeyProgrammer) and command programmer
 * (CmdProgrammer) plan a bind with it, and the vectored registrations (nicmr_mr_regv,
 * nicmr_mr_reg_iova, nicmr_mr_reg_pages) plan their regions with it. It speaks IOVAs and page
 * sizes only: the driver turns page IOVAs into PRM MTT entries and KLM parts into KLM entries.
 *
 *   contiguous  [start, start + len) at iova (the IOVA of start), pages of P = 2^lp bytes:
 *               entries = the pages from the one holding start to the one holding the last byte
 *               entry k = (iova & ~(P - 1)) + k * P, with iova = start (mod P)
 *   vectored    pieces (address, length, IOVA) end to end
 *               -> runs: pieces merged where their IOVAs follow each other
 *               -> the largest P for which one MTT mkey describes every run:
 *                    one run        contiguous (no list: the mkey's iova is the run's)
 *                    several runs   entry k = the IOVA of the region's k-th page, rounded down
 *                  or, when no P fits, KLM: one part per piece over a key of its own
 *
 * Why congruence: the device finds the entry of address a as (start % P + a - start) / P and
 * adds (start % P + a - start) % P to it (PRM.md, "Translation entries"; the mkey context's
 * start_addr and log_page_size), so the IOVA of start must keep start's offset in its page.
 *
 * The planner writes into storage its caller provides and allocates nothing: plan_bind_mtt is
 * on the registration hot path (no lock, no allocation, no system call).
 */
#ifndef NICMR_MR_PLAN_H
#define NICMR_MR_PLAN_H

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "mr_programmer.h"
#include "mr_table.h"

namespace nicmr::mr {

/* The page sizes a plan may use: 4 KiB .. 1 GiB (log2). */
inline constexpr unsigned kMinLogPage = 12;
inline constexpr unsigned kMaxLogPage = 30;

/* Pages of 2^lp bytes that [start, start + len) touches (len > 0, start + len no wrap). */
constexpr uint64_t mtt_pages(uint64_t start, uint64_t len, unsigned lp) noexcept
{
	return ((start + len - 1) >> lp) - (start >> lp) + 1;
}

/*
 * The number of MTT entries of a bind: p.mtt_count for an explicit list, else the pages of
 * [p.start, p.start + p.len) at p.iova_base. 0 with *count; -EINVAL (len 0, log_page_size
 * outside 12..30, iova_base not congruent with start modulo the page). Hot path.
 */
inline int bind_mtt_count(const BindParams &p, uint64_t *count) noexcept
{
	if (p.len == 0 || p.log_page_size < kMinLogPage || p.log_page_size > kMaxLogPage)
		return -EINVAL;
	if (p.mtt != nullptr) {
		*count = p.mtt_count;
		return 0;
	}
	const uint64_t mask = (uint64_t{1} << p.log_page_size) - 1;
	if (((p.iova_base ^ p.start) & mask) != 0)
		return -EINVAL;
	*count = mtt_pages(p.start, p.len, p.log_page_size);
	return 0;
}

/*
 * The MTT list of a bind: the page IOVAs (of 2^p.log_page_size bytes, the first holding
 * p.start) written to out[0..*count). 0; bind_mtt_count's -EINVAL; -E2BIG (more than cap
 * entries; nothing written). Hot path: no lock, no allocation, no system call.
 */
inline int plan_bind_mtt(const BindParams &p, uint64_t *out, uint64_t cap, uint64_t *count) noexcept
{
	uint64_t n = 0;
	int rc = bind_mtt_count(p, &n);
	if (rc != 0)
		return rc;
	if (n > cap)
		return -E2BIG;
	if (p.mtt != nullptr) {
		for (uint64_t i = 0; i < n; i++)
			out[i] = p.mtt[i];
	} else {
		const uint64_t page = uint64_t{1} << p.log_page_size;
		const uint64_t first = p.iova_base & ~(page - 1);
		for (uint64_t i = 0; i < n; i++)
			out[i] = first + i * page;
	}
	*count = n;
	return 0;
}

/* One piece of a vectored region, in the region's order. */
struct VecPiece {
	uint64_t addr;	   /* in its inner key's address space (a VA, or the IOVA itself) */
	uint64_t len;	   /* > 0 */
	uint64_t iova;	   /* IOVA of addr */
	unsigned log_page; /* the largest page its mapping allows (12..30) */
};

/* How a vectored region goes to the device (the values of nicmr_mr_layout). */
enum class VecLayout : int {
	contiguous = 0, /* one run: one MTT mkey at the run's IOVA, no list */
	mtt_runs = 1,	/* one MTT mkey with the list plan_runs_mtt writes */
	klm = 2,	/* one MTT key per piece, and an indirect (KLM) mkey over them */
};

struct VecPlan {
	VecLayout layout = VecLayout::contiguous;
	uint32_t run_count = 0;	   /* runs written (every layout: the host's IOVA map) */
	uint8_t log_page_size = 0; /* the MTT mkey's page size; 0 with klm */
	uint64_t mtt_count = 0;	   /* entries of the mtt_runs list, else 0 */
};

/*
 * Plans the vectored region [start, start + len) (start: its first address, or 0 when
 * zero-based; len: the sum of the pieces' lengths) over pieces[0..n): writes its runs to
 * runs[0..kMaxRuns) and picks the largest page size, from the smallest of the pieces' log_page
 * down to 12, with which one MTT mkey of at most max_translations entries (0: no limit) holds
 * them: each run's IOVA congruent with its place in the region, each run but the first starting
 * on a page boundary. When no page size does, the KLM layout, whose parts' byte counts are 32
 * bits. 0; -EINVAL (no piece); -E2BIG (more than kMaxRuns runs; a piece of 4 GiB or more in
 * the KLM layout).
 * Slow path, but allocates nothing.
 */
int plan_vector(uint64_t start, uint64_t len, const VecPiece *pieces, size_t n,
		uint32_t max_translations, Run *runs, VecPlan *out) noexcept;

/* The page size (log2, from maxlp down to 12) with which one MTT mkey describes runs[0..count)
 * of [start, start + len) in at most max_translations entries (0: no limit), or 0. */
unsigned plan_runs_page(uint64_t start, uint64_t len, const Run *runs, uint32_t count,
			unsigned maxlp, uint32_t max_translations) noexcept;

/* The MTT list of [start, start + len) over runs[0..count) with pages of 2^lp bytes (a page
 * size plan_runs_page chose): mtt_pages(start, len, lp) page IOVAs written to out. */
void plan_runs_mtt(uint64_t start, uint64_t len, const Run *runs, uint32_t count, unsigned lp,
		   uint64_t *out) noexcept;

} // namespace nicmr::mr

#endif
