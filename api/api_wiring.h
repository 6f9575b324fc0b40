/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bus functions and the device model a device is wired from: the headers that only the
 * wiring (api_device.cpp: spec string -> bus function -> DmaSpace -> driver -> engine) and the
 * tests that look at the device model beneath include. The rest of api/ sees nicmr_device's
 * emu and vfio members as forward-declared types (api_internal.h) and reaches the device
 * through the bus contract (bus::PciFunction) and the driver alone.
 */
#ifndef NICMR_API_WIRING_H
#define NICMR_API_WIRING_H

#include "api_internal.h"
#include "emu_mlx5.h"
#include "vfio_bus.h"

#endif
