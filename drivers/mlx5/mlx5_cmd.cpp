/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Command status mapping and the output handling every transport shares.
 */
#include <cerrno>

#include "mlx5_cmd.h"
#include "mlx5_names.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

int status_to_errno(uint8_t st) noexcept
{
	namespace s = prm::status;
	switch (st) {
	case s::ok:
		return 0;
	case s::internal_err:
		return -EIO;
	case s::bad_op:
		return -EOPNOTSUPP;
	case s::bad_param:
		return -EINVAL;
	case s::bad_sys_state:
		return -EIO;
	case s::bad_resource:
		return -EINVAL;
	case s::resource_busy:
		return -EBUSY;
	case s::not_ready:
		return -EAGAIN;
	case s::exceed_lim:
		return -ENOMEM;
	case s::bad_res_state:
		return -EINVAL;
	case s::bad_index:
		return -ENXIO;
	case s::no_resources:
		return -ENOSPC;
	case s::bad_qp_state:
		return -EINVAL;
	case s::bad_input_len:
		return -EMSGSIZE;
	case s::bad_output_len:
		return -EOVERFLOW;
	default:
		return -EPROTO;
	}
}

const char *status_name(uint8_t st) noexcept
{
	const char *n = prm::status_name(st);
	return n != nullptr ? n : "UNKNOWN";
}

const char *opcode_name(uint16_t op) noexcept
{
	const char *n = prm::opcode_name(op);
	return n != nullptr ? n : "UNKNOWN";
}

int CmdTransport::check_lengths(size_t in_len, size_t out_len) noexcept
{
	if (in_len < prm::cmd_hdr_in::size || out_len < prm::cmd_hdr_out::size ||
	    in_len > max_message || out_len > max_message)
		return -EINVAL;
	return 0;
}

int CmdTransport::finish(const char *who, const void *in, const void *out,
			 bool log_failure) noexcept
{
	auto st = static_cast<uint8_t>(prm::get(out, prm::cmd_hdr_out::status));
	auto syndrome = static_cast<uint32_t>(prm::get(out, prm::cmd_hdr_out::syndrome));
	last_status_.store(st, std::memory_order_relaxed);
	last_syndrome_.store(syndrome, std::memory_order_relaxed);
	int rc = status_to_errno(st);
	if (rc != 0 && log_failure) {
		auto op = static_cast<uint16_t>(prm::get(in, prm::cmd_hdr_in::opcode));
		NICMR_LOG(error, "mlx5",
			  "%s: %s (0x%x) op_mod 0x%x: status %s (0x%x) syndrome 0x%08x", who,
			  opcode_name(op), op,
			  static_cast<unsigned>(prm::get(in, prm::cmd_hdr_in::op_mod)),
			  status_name(st), st, syndrome);
	}
	return rc;
}

} // namespace nicmr::mlx5
