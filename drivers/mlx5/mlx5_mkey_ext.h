/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nicmr's mkey extensions (single use, disabled until enabled, counted remote writes) in a
 * registration's words, turned into the device-model commands NICMR_SET_MKEY_EXT and
 * NICMR_QUERY_MKEY_EXT (prm::mkey_ext bits). No ConnectX has them: the device model offers them
 * behind prm::ext_cap bits that bring-up read (Caps::ext_flags; doc/device-model.md,
 * "Extensions"). The native API keeps the handles (MRs, counters, their bindings) and asks the
 * driver for the device state through these functions alone. Slow path: commands under the
 * command queue's lock.
 */
#ifndef NICMR_MLX5_MKEY_EXT_H
#define NICMR_MLX5_MKEY_EXT_H

#include <cstdint>

#include "mlx5_device.h"

namespace nicmr::mlx5 {

/* The extension state of one live mkey. */
struct MkeyExt {
	bool single_use = false;   /* the device frees the key after its first remote operation */
	bool disabled = false;	   /* the device refuses every remote access to the key */
	bool counted = false;	   /* the device counts remote writes at counter_iova */
	uint64_t counter_iova = 0; /* with counted: 8 bytes, 8-aligned, DMA-mapped */
};

/* The extensions the device reported at bring-up: prm::ext_cap bits (single_use, rma_event),
 * 0 on a ConnectX or a device model without them. */
uint64_t mkey_ext_caps(const Device &dev) noexcept;

/* Gives mkey (index << 8 | variant) the state e, replacing what it had. 0; -EOPNOTSUPP (the
 * device lacks an extension e needs: single_use needs ext_cap::single_use, disabled and
 * counted ext_cap::rma_event); -EINVAL (counted with an unaligned counter IOVA); the
 * command's errors. */
int set_mkey_ext(Device &dev, uint32_t mkey, const MkeyExt &e);

} // namespace nicmr::mlx5

#endif
