/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What every command handler of the device model starts and ends with: the result of a refused
 * command and the length check. Private to drivers/emu/mlx5.
 */
#ifndef NICMR_EMU_MLX5_CMD_UTIL_H
#define NICMR_EMU_MLX5_CMD_UTIL_H

#include <cstddef>
#include <cstdint>

#include "emu_mlx5.h"
#include "emu_mlx5_dp.h"
#include "mlx5_prm.h"

namespace nicmr::emu::cmd {

constexpr CmdResult fail(uint8_t status, Syndrome s)
{
	return CmdResult{status, static_cast<uint32_t>(s)};
}

inline constexpr CmdResult kOk{};

/* True when the input and output are long enough for the command to go on; else *r says why. */
inline bool lengths(size_t in_len, size_t in_min, size_t out_len, size_t out_min, CmdResult *r)
{
	if (in_len < in_min) {
		*r = fail(mlx5::prm::status::bad_input_len, Syndrome::input_too_short);
		return false;
	}
	if (out_len < out_min) {
		*r = fail(mlx5::prm::status::bad_output_len, Syndrome::output_too_short);
		return false;
	}
	return true;
}

/* The pas list after a create command's context (bytes pas_offset on, as many entries as the
 * input holds), and the status of a data path error for a queue's memory (-ENOSPC: full; -EFAULT
 * not mapped; else BAD_PARAM queue_params). emu_mlx5_dp_cmd.cpp. */
QueueMem queue_mem(const uint8_t *in, size_t in_len, size_t pas_offset, uint32_t log_page_size);
CmdResult queue_error(int rc, Syndrome full);

} // namespace nicmr::emu::cmd

#endif
