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

} // namespace nicmr::emu::cmd

#endif
