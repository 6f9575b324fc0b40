/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr's EAL mode: `testmr [EAL options] -- [testmr options]`, as dpdk-testpmd. The words
 * before the first `--` go to rte_eal_init; testmr's telemetry endpoints (testmr_telemetry.h),
 * registered just before, are then served by DPDK's telemetry threads.
 */
#ifndef NICMR_TESTMR_EAL_H
#define NICMR_TESTMR_EAL_H

#include <cstdio>

namespace nicmr::testmr {

/*
 * Registers the telemetry endpoints, then starts EAL with argv[0 .. argc) (argv[0] the
 * program's name); prints the telemetry socket to out. Returns 0, 2 when EAL refused its arguments
 * (rte_errno EINVAL, or a word that is no EAL option; EAL printed why), 1 for any other failure
 * (rte_eal_init's rte_errno, rte_telemetry_register_cmd's code), said on stderr.
 */
int eal_start(int argc, char **argv, FILE *out);
/* rte_eal_cleanup, after eal_start returned 0. */
void eal_stop();

} // namespace nicmr::testmr

#endif
