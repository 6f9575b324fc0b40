/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A user access region: one 4 KiB page of BAR 0 (index i at [i * 4096, i * 4096 + 4096)) that
 * holds the send-queue doorbell at offset 0x800. Allocated with ALLOC_UAR, given back with
 * DEALLOC_UAR when the Uar goes. Several QPs may share one UAR: a doorbell is one 64-bit store,
 * so rings from different threads do not interleave.
 */
#ifndef NICMR_MLX5_UAR_H
#define NICMR_MLX5_UAR_H

#include <cstdint>
#include <memory>

#include "mlx5_device.h"

namespace nicmr::mlx5 {

class Uar {
public:
	/*
	 * ALLOC_UAR on dev (which must outlive the Uar). Errors: the command's (mlx5_cmd.h),
	 * -ERANGE when the index the device returned lies outside BAR 0 (the UAR is given back).
	 */
	static int alloc(Device &dev, std::unique_ptr<Uar> *out);
	~Uar();
	Uar(const Uar &) = delete;
	Uar &operator=(const Uar &) = delete;

	uint32_t index() const noexcept { return index_; }
	Device &device() noexcept { return dev_; }

	/*
	 * Hot path (WQE posting): one 64-bit MMIO store of the first 8 bytes of the last posted
	 * WQE's ctrl segment, exactly as they lie in memory. No lock, no allocation, no system
	 * call. The caller has ordered its WQE and doorbell-record stores before this one.
	 */
	void ring_sq(uint64_t ctrl_first8) noexcept { fn_.bar0_write64(sq_db_, ctrl_first8); }

private:
	Uar(Device &dev, uint32_t index);
	Device &dev_;
	bus::PciFunction &fn_;
	uint32_t index_;
	size_t sq_db_;
};

} // namespace nicmr::mlx5

#endif
