/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr's `dp` demo, a walk-through of the driver's data path: on an opened device it creates a
 * PD, a UAR, an EQ, two RC QPs on ports 1 and 2 connected over the loopback wire, registers two
 * small regions of the device's DMA arena, and runs, printing each step: RDMA WRITE, RDMA READ,
 * a fetch-and-add, a UMR bind of a free mkey and an RDMA WRITE through it, the revoke, and a
 * WRITE through the revoked key (REMOTE_ACCESS_ERR on the requester, a WQ access error event
 * on the responder). Everything it creates is gone when it returns. Slow path.
 */
#ifndef NICMR_TESTMR_DP_DEMO_H
#define NICMR_TESTMR_DP_DEMO_H

#include <cstdio>

#include "mlx5_device.h"
#include "mlx5_eq.h"

namespace nicmr::testmr {

/*
 * 0 when every step gave what it should; -EIO when one did not (the output says which);
 * errors of the objects' creation (-ENOMEM when the arena has no 128 KiB left).
 * The device posts async events to the first EQ created on it: pass that EQ when the caller
 * has one; with events null the demo creates its own (the first, when the tool has none).
 */
int dp_loopback_demo(mlx5::Device &dev, FILE *out, mlx5::Eq *events = nullptr);

} // namespace nicmr::testmr

#endif
