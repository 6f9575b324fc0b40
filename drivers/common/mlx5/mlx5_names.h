/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The names of command opcodes and statuses, as the PRM (and rdma-core's mlx5_ifc.h) spell
 * them: one table for the driver's log lines (mlx5_cmd.cpp) and the device model's command
 * trace (emu_mlx5_trace.cpp). nullptr for a value the table does not know; each caller says
 * what it prints then.
 */
#ifndef NICMR_MLX5_NAMES_H
#define NICMR_MLX5_NAMES_H

#include <cstdint>

#include "mlx5_prm.h"

namespace nicmr::mlx5::prm {

constexpr const char *opcode_name(uint16_t op) noexcept
{
	switch (op) {
	case opcode::query_hca_cap:
		return "QUERY_HCA_CAP";
	case opcode::init_hca:
		return "INIT_HCA";
	case opcode::teardown_hca:
		return "TEARDOWN_HCA";
	case opcode::enable_hca:
		return "ENABLE_HCA";
	case opcode::disable_hca:
		return "DISABLE_HCA";
	case opcode::query_pages:
		return "QUERY_PAGES";
	case opcode::manage_pages:
		return "MANAGE_PAGES";
	case opcode::set_hca_cap:
		return "SET_HCA_CAP";
	case opcode::query_issi:
		return "QUERY_ISSI";
	case opcode::set_issi:
		return "SET_ISSI";
	case opcode::create_mkey:
		return "CREATE_MKEY";
	case opcode::query_mkey:
		return "QUERY_MKEY";
	case opcode::destroy_mkey:
		return "DESTROY_MKEY";
	case opcode::page_fault_resume:
		return "PAGE_FAULT_RESUME";
	case opcode::query_special_contexts:
		return "QUERY_SPECIAL_CONTEXTS";
	case opcode::create_eq:
		return "CREATE_EQ";
	case opcode::destroy_eq:
		return "DESTROY_EQ";
	case opcode::create_cq:
		return "CREATE_CQ";
	case opcode::destroy_cq:
		return "DESTROY_CQ";
	case opcode::create_qp:
		return "CREATE_QP";
	case opcode::destroy_qp:
		return "DESTROY_QP";
	case opcode::rst2init_qp:
		return "RST2INIT_QP";
	case opcode::init2rtr_qp:
		return "INIT2RTR_QP";
	case opcode::rtr2rts_qp:
		return "RTR2RTS_QP";
	case opcode::qp_2err:
		return "2ERR_QP";
	case opcode::qp_2rst:
		return "2RST_QP";
	case opcode::query_qp:
		return "QUERY_QP";
	case opcode::modify_nic_vport_context:
		return "MODIFY_NIC_VPORT_CONTEXT";
	case opcode::alloc_pd:
		return "ALLOC_PD";
	case opcode::dealloc_pd:
		return "DEALLOC_PD";
	case opcode::alloc_uar:
		return "ALLOC_UAR";
	case opcode::dealloc_uar:
		return "DEALLOC_UAR";
	case opcode::access_reg:
		return "ACCESS_REG";
	case opcode::create_umem:
		return "CREATE_UMEM";
	case opcode::destroy_umem:
		return "DESTROY_UMEM";
	case opcode::nicmr_set_mkey_ext:
		return "NICMR_SET_MKEY_EXT";
	case opcode::nicmr_query_mkey_ext:
		return "NICMR_QUERY_MKEY_EXT";
	default:
		return nullptr;
	}
}

constexpr const char *status_name(uint8_t st) noexcept
{
	switch (st) {
	case status::ok:
		return "OK";
	case status::internal_err:
		return "INTERNAL_ERR";
	case status::bad_op:
		return "BAD_OP";
	case status::bad_param:
		return "BAD_PARAM";
	case status::bad_sys_state:
		return "BAD_SYS_STATE";
	case status::bad_resource:
		return "BAD_RESOURCE";
	case status::resource_busy:
		return "RESOURCE_BUSY";
	case status::not_ready:
		return "NOT_READY";
	case status::exceed_lim:
		return "EXCEED_LIM";
	case status::bad_res_state:
		return "BAD_RES_STATE";
	case status::bad_index:
		return "BAD_INDEX";
	case status::no_resources:
		return "NO_RESOURCES";
	case status::bad_qp_state:
		return "BAD_QP_STATE";
	case status::bad_input_len:
		return "BAD_INPUT_LEN";
	case status::bad_output_len:
		return "BAD_OUTPUT_LEN";
	default:
		return nullptr;
	}
}

} // namespace nicmr::mlx5::prm

#endif
