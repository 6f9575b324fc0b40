/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * `testmr hw-check`: a short smoke test of a device through the native API, for a real
 * ConnectX (vfio:<PCI address>; devx:<ib device> once the DEVX transport registers) or the
 * emulated one (emu[:options]). It stops at the first step that fails:
 *
 *   1 open      nicmr_device_open: bring-up to INIT_HCA, the UMR queues, the free mkeys
 *   2 pd        nicmr_pd_alloc (ALLOC_PD)
 *   3 mkeys     the device's key space holds the free mkeys registration needs
 *   4 pool      nicmr_pool_create: 64 KiB of 4 KiB pages, DMA-mapped once
 *   5 cq        nicmr_cq_create (CREATE_CQ on the driver's EQ)
 *   6 qp        nicmr_qp_create, connected to itself (RST2INIT, INIT2RTR, RTR2RTS), QUERY_QP
 *               says RTS
 *   7 register  two nicmr_mr_reg in the pool (UMR work requests on pre-created mkeys)
 *   8 write     one loopback RDMA WRITE of 4 KiB, its completion, the bytes compared one by one
 *   9 teardown  deregistrations, QP, CQ, pool, PD, device close
 *
 * Each step prints one line, "[n/9] name ... PASS (details)" or "... FAIL: what returned what",
 * followed, on a failure, by the last error the library logged (for a refused command:
 * "<opcode name> (0x...) op_mod 0x...: status <name> (0x..) syndrome 0x........").
 * doc/testmr.md; doc/vfio.md says how to run it on a card.
 */
#ifndef NICMR_TESTMR_HWCHECK_H
#define NICMR_TESTMR_HWCHECK_H

#include <cstdio>

namespace nicmr::testmr {

struct HwCheckOptions {
	const char *spec = "emu"; /* nicmr_device_open's spec */
};

/* The steps' count, as the lines print it ("[n/kHwCheckSteps]"). */
inline constexpr int kHwCheckSteps = 9;

/* Runs the check, printing to out. 0: every step passed; 1: a step failed (the ones after it
 * did not run; what it had created is released). */
int hw_check(FILE *out, const HwCheckOptions &o);

} // namespace nicmr::testmr

#endif
