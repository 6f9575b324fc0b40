/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The floor and the native pair of the last lines (bench_ratios.h), measured on one device of
 * the native API: bench-mr measures them in its own process, bench-fi-mr in a process of their
 * own (never beside a libfabric provider).
 */
#ifndef NICMR_BENCH_NATIVE_H
#define NICMR_BENCH_NATIVE_H

#include <string>

#include "bench_ratios.h"

namespace nicmr::bench {

struct FloorNative {
	PairTimes floor;  /* first: UMR bind, second: its revoke */
	PairTimes native; /* first: nicmr_mr_reg, second: nicmr_mr_dereg */
};

/*
 * Opens the device `spec` (nicmr_device_open), a PD and a 4 MiB pool (2 MiB pages, else 4 KiB
 * ones), and times `reps` pairs of each after warmup_pairs(reps) untimed ones: the floor
 * (bench_umr_floor.h, a UMR queue of this device bound and revoked over the pool's first
 * 4 KiB) and the native pair (nicmr_mr_reg + nicmr_mr_dereg of the pool's first 4 KiB with
 * read, write, remote read and remote write access, as bench-fi-mr's MRs). The two alternate in ten
 * rounds, so that a slower spell of the machine falls on both. 0, or the failing call's code with
 * *err saying which.
 */
int measure_floor_native(const std::string &spec, int reps, FloorNative *out, std::string *err);

} // namespace nicmr::bench

#endif
