/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A PCI function as a driver sees it, whatever bus carries it: BAR 0 register access, a
 * DMA mapper for its IOMMU, and its identity. The mlx5 driver is written against this interface
 * only, so the same code runs on the emulated bus (drivers/bus/emu) and on VFIO (drivers/bus/vfio).
 *
 * Register accessors move the 32- or 64-bit word at a byte offset into BAR 0 exactly as the CPU
 * loads or stores it, with no byte swapping: device byte order (mlx5 registers are big-endian) is
 * the driver's business, done in its layout accessors. read32/write32 are allowed on hot paths
 * (doorbells): no lock, no allocation, no system call in any implementation.
 */
#ifndef NICMR_BUS_PCI_H
#define NICMR_BUS_PCI_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "mem_dma.h"

namespace nicmr::bus {

struct PciId {
	uint16_t vendor;
	uint16_t device;
};

class PciFunction {
public:
	virtual ~PciFunction() = default;

	/* "emu:0", "vfio:0000:03:00.0": what log lines call this function. */
	virtual const std::string &name() const = 0;
	virtual PciId id() const = 0;

	/* BAR 0 size in bytes. */
	virtual size_t bar0_size() const = 0;
	/* 32-bit register access at a byte offset into BAR 0 (4-byte aligned, in range). */
	virtual uint32_t bar0_read32(size_t offset) const = 0;
	virtual void bar0_write32(size_t offset, uint32_t value) = 0;
	/* 64-bit doorbell write (mlx5 send-queue doorbells write the first 8 bytes of a WQE). */
	virtual void bar0_write64(size_t offset, uint64_t value) = 0;

	/* The function's IOMMU: pools are mapped through it before the device may touch them. */
	virtual mem::DmaMapper &dma() = 0;
};

} // namespace nicmr::bus

#endif
