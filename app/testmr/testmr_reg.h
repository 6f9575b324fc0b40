/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr's registration demo: memory registration as an application sees it, through nicmr's
 * native C API (nicmr.h) or, with --provider, through libfabric's fi_mr calls on the nicmr
 * provider that the system libfabric loads. Both walk the same steps (pool, fast- and slow-path
 * MRs, keys, raw keys, lookups or their libfabric equivalents, refusals with their codes) and end
 * with the same headline figures, measured in this run.
 */
#ifndef NICMR_TESTMR_REG_H
#define NICMR_TESTMR_REG_H

#include <cstddef>
#include <cstdio>

namespace nicmr::testmr {

struct RegDemoOptions {
	const char *spec = "emu";	    /* nicmr_device_open's spec (native) */
	size_t page_size = size_t{2} << 20; /* the demo pool's pages */
	bool fallback = true;		    /* 4 KiB pages when no hugepage is free */
	bool provider = false;		    /* through libfabric instead of the native API */
	unsigned reps = 2000;		    /* timed pairs per repetition; 5 repetitions */
};

/* Prints every step to out; 0 when each went as expected, else 1. */
int reg_demo(FILE *out, const RegDemoOptions &o);

} // namespace nicmr::testmr

#endif
