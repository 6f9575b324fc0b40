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

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

#include <endian.h>
#include <linux/pci_regs.h>

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

	/*
	 * Interrupts: MSI-X vector `vector` signals the eventfd `fd` (it is written, as the kernel
	 * does for a vector VFIO_DEVICE_SET_IRQS gave an eventfd with VFIO_IRQ_SET_DATA_EVENTFD |
	 * VFIO_IRQ_SET_ACTION_TRIGGER on VFIO_PCI_MSIX_IRQ_INDEX); fd -1 detaches the vector's
	 * eventfd (the vector then signals nothing). The caller keeps fd open until it detached it
	 * or the function is gone. 0; -EINVAL (vector beyond the function's MSI-X table, fd below
	 * -1); -ENOTSUP (the bus or the function has no MSI-X); what the bus reports. Not for hot
	 * paths (a system call on VFIO). Default: -ENOTSUP, a bus without interrupts.
	 */
	virtual int set_msix_eventfd(unsigned vector, int fd)
	{
		(void)vector;
		(void)fd;
		return -ENOTSUP;
	}

	/*
	 * Runs, on the calling thread, device work that no hardware runs by itself: on the
	 * emulated bus, the device model's progress work (a wire port's received packets, its
	 * timers), the way a DPDK poll-mode driver's receive burst runs in the polling thread.
	 * Returns whether there was any. A real function does its work itself: false at once
	 * (the default). The driver's poll loops call it when they find nothing; hot path: no
	 * lock and no allocation in any implementation, and no system call but the emulated
	 * device's own socket I/O.
	 */
	virtual bool progress() { return false; }

	/* The function's IOMMU: pools are mapped through it before the device may touch them. */
	virtual mem::DmaMapper &dma() = 0;

	/*
	 * Config space access, bytes as stored (PCI config space is little-endian). 0; -EINVAL
	 * when [offset, offset + len) is empty or outside config space; -EIO on a short
	 * transfer; what the bus reports. Not for hot paths (a system call on VFIO).
	 */
	virtual int config_read(uint32_t offset, void *buf, size_t len) const = 0;
	virtual int config_write(uint32_t offset, const void *buf, size_t len) = 0;

	/*
	 * Sets or clears Bus Master Enable: a read-modify-write of the command register that
	 * keeps its other bits (as DPDK's pci_vfio_set_bus_master does). Errors of config_read
	 * and config_write.
	 */
	int set_bus_master(bool on)
	{
		uint16_t le = 0; /* config space is little-endian */
		int rc = config_read(PCI_COMMAND, &le, sizeof(le));
		if (rc < 0)
			return rc;
		uint16_t cmd = le16toh(le);
		cmd = on ? uint16_t(cmd | PCI_COMMAND_MASTER) : uint16_t(cmd & ~PCI_COMMAND_MASTER);
		le = htole16(cmd);
		return config_write(PCI_COMMAND, &le, sizeof(le));
	}
	/* Whether Bus Master Enable is set; false when the command register cannot be read. */
	bool bus_master() const
	{
		uint16_t le = 0;
		return config_read(PCI_COMMAND, &le, sizeof(le)) == 0 &&
		       (le16toh(le) & PCI_COMMAND_MASTER) != 0;
	}
};

} // namespace nicmr::bus

#endif
