/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Command status mapping and the output handling every transport shares.
 */
#include <cerrno>

#include "mlx5_cmd.h"
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
	namespace s = prm::status;
	switch (st) {
	case s::ok:
		return "OK";
	case s::internal_err:
		return "INTERNAL_ERR";
	case s::bad_op:
		return "BAD_OP";
	case s::bad_param:
		return "BAD_PARAM";
	case s::bad_sys_state:
		return "BAD_SYS_STATE";
	case s::bad_resource:
		return "BAD_RESOURCE";
	case s::resource_busy:
		return "RESOURCE_BUSY";
	case s::not_ready:
		return "NOT_READY";
	case s::exceed_lim:
		return "EXCEED_LIM";
	case s::bad_res_state:
		return "BAD_RES_STATE";
	case s::bad_index:
		return "BAD_INDEX";
	case s::no_resources:
		return "NO_RESOURCES";
	case s::bad_qp_state:
		return "BAD_QP_STATE";
	case s::bad_input_len:
		return "BAD_INPUT_LEN";
	case s::bad_output_len:
		return "BAD_OUTPUT_LEN";
	default:
		return "UNKNOWN";
	}
}

const char *opcode_name(uint16_t op) noexcept
{
	namespace o = prm::opcode;
	switch (op) {
	case o::query_hca_cap:
		return "QUERY_HCA_CAP";
	case o::init_hca:
		return "INIT_HCA";
	case o::teardown_hca:
		return "TEARDOWN_HCA";
	case o::enable_hca:
		return "ENABLE_HCA";
	case o::disable_hca:
		return "DISABLE_HCA";
	case o::query_pages:
		return "QUERY_PAGES";
	case o::manage_pages:
		return "MANAGE_PAGES";
	case o::set_hca_cap:
		return "SET_HCA_CAP";
	case o::query_issi:
		return "QUERY_ISSI";
	case o::set_issi:
		return "SET_ISSI";
	case o::create_mkey:
		return "CREATE_MKEY";
	case o::query_mkey:
		return "QUERY_MKEY";
	case o::destroy_mkey:
		return "DESTROY_MKEY";
	case o::create_eq:
		return "CREATE_EQ";
	case o::destroy_eq:
		return "DESTROY_EQ";
	case o::create_cq:
		return "CREATE_CQ";
	case o::destroy_cq:
		return "DESTROY_CQ";
	case o::create_qp:
		return "CREATE_QP";
	case o::destroy_qp:
		return "DESTROY_QP";
	case o::rst2init_qp:
		return "RST2INIT_QP";
	case o::init2rtr_qp:
		return "INIT2RTR_QP";
	case o::rtr2rts_qp:
		return "RTR2RTS_QP";
	case o::qp_2err:
		return "2ERR_QP";
	case o::qp_2rst:
		return "2RST_QP";
	case o::query_qp:
		return "QUERY_QP";
	case o::alloc_pd:
		return "ALLOC_PD";
	case o::dealloc_pd:
		return "DEALLOC_PD";
	case o::alloc_uar:
		return "ALLOC_UAR";
	case o::dealloc_uar:
		return "DEALLOC_UAR";
	case o::access_reg:
		return "ACCESS_REG";
	case o::create_umem:
		return "CREATE_UMEM";
	case o::destroy_umem:
		return "DESTROY_UMEM";
	default:
		return "UNKNOWN";
	}
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
