/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Data-path command encoders: every byte goes through the layout table (mlx5_prm.h).
 */
#include <cerrno>
#include <cstring>
#include <new>

#include "mlx5_dp_commands.h"

namespace nicmr::mlx5 {
namespace {

void header(uint8_t *b, uint16_t opcode) noexcept
{
	prm::set(b, prm::cmd_hdr_in::opcode, opcode);
}

int run_small(CmdTransport &t, uint16_t opcode, prm::Field f, uint32_t v, uint8_t (&out)[16])
{
	uint8_t in[16] = {};
	header(in, opcode);
	prm::set(in, f, v);
	std::memset(out, 0, sizeof(out));
	return t.exec(in, sizeof(in), out, sizeof(out));
}

int run_vec(CmdTransport &t, const std::vector<uint8_t> &in, uint8_t (&out)[16])
{
	std::memset(out, 0, sizeof(out));
	return t.exec(in.data(), in.size(), out, sizeof(out));
}

/* qpc.st: the GSI QP's QP1 (a UD QP to the wire), UD or RC. */
uint32_t qp_type(bool gsi, bool ud) noexcept
{
	return gsi ? prm::qp_st::qp1 : ud ? prm::qp_st::ud : prm::qp_st::rc;
}

/* Sizes the buffer and writes the page list after the context. */
int with_pas(size_t fixed, const QueueMemory &m, std::vector<uint8_t> *in)
{
	if (m.pas.empty() || m.log_page_size > 31)
		return -EINVAL;
	try {
		in->assign(fixed + m.pas.size() * prm::pas_entry_size, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < m.pas.size(); i++)
		prm::set(in->data() + fixed + i * prm::pas_entry_size, prm::pas_entry, m.pas[i]);
	return 0;
}

} // namespace

int alloc_uar(CmdTransport &t, uint32_t *uar)
{
	uint8_t in[prm::alloc_uar_in::size] = {};
	uint8_t out[prm::alloc_uar_out::size] = {};
	header(in, prm::opcode::alloc_uar);
	int rc = t.exec(in, sizeof(in), out, sizeof(out));
	if (rc == 0)
		*uar = static_cast<uint32_t>(prm::get(out, prm::alloc_uar_out::uar));
	return rc;
}

int dealloc_uar(CmdTransport &t, uint32_t uar)
{
	uint8_t out[16];
	return run_small(t, prm::opcode::dealloc_uar, prm::dealloc_uar_in::uar, uar, out);
}

int encode_create_eq(const EqCreate &c, std::vector<uint8_t> *in)
{
	if (c.log_size > 24 || c.intr > 0xff)
		return -EINVAL;
	int rc = with_pas(prm::create_eq_in::pas_offset, c.mem, in);
	if (rc != 0)
		return rc;
	uint8_t *b = in->data();
	header(b, prm::opcode::create_eq);
	uint8_t *eqc = b + prm::create_eq_in::eqc_offset;
	prm::set(eqc, prm::eqc::log_eq_size, c.log_size);
	prm::set(eqc, prm::eqc::uar_page, c.uar);
	prm::set(eqc, prm::eqc::intr, c.intr);
	prm::set(eqc, prm::eqc::log_page_size, c.mem.log_page_size);
	prm::set(eqc, prm::eqc::page_offset, 0);
	prm::set(b, prm::create_eq_in::event_bitmask, c.event_bitmask);
	return 0;
}

int create_eq(CmdTransport &t, const EqCreate &c, uint32_t *eqn)
{
	std::vector<uint8_t> in;
	int rc = encode_create_eq(c, &in);
	if (rc != 0)
		return rc;
	uint8_t out[prm::create_eq_out::size];
	rc = run_vec(t, in, out);
	if (rc == 0)
		*eqn = static_cast<uint32_t>(prm::get(out, prm::create_eq_out::eq_number));
	return rc;
}

int destroy_eq(CmdTransport &t, uint32_t eqn)
{
	uint8_t out[16];
	return run_small(t, prm::opcode::destroy_eq, prm::destroy_eq_in::eq_number, eqn, out);
}

int page_fault_resume(CmdTransport &t, uint32_t token, bool error, uint8_t type, uint32_t wq_number)
{
	namespace m = prm::page_fault_resume_in;
	uint8_t in[m::size] = {};
	uint8_t out[prm::page_fault_resume_out::size] = {};
	header(in, prm::opcode::page_fault_resume);
	prm::set(in, m::error, error ? 1 : 0);
	prm::set(in, m::page_fault_type, type & prm::value_mask(m::page_fault_type));
	prm::set(in, m::wq_number, wq_number & prm::value_mask(m::wq_number));
	prm::set(in, m::token, token & prm::value_mask(m::token));
	return t.exec(in, sizeof(in), out, sizeof(out));
}

int encode_create_cq(const CqCreate &c, std::vector<uint8_t> *in)
{
	if (c.log_size > 24 || c.eqn > 0xff)
		return -EINVAL;
	int rc = with_pas(prm::create_cq_in::pas_offset, c.mem, in);
	if (rc != 0)
		return rc;
	uint8_t *b = in->data();
	header(b, prm::opcode::create_cq);
	uint8_t *cqc = b + prm::create_cq_in::cqc_offset;
	prm::set(cqc, prm::cqc::cqe_sz, prm::cqc::cqe_sz_64);
	prm::set(cqc, prm::cqc::log_cq_size, c.log_size);
	prm::set(cqc, prm::cqc::uar_page, c.uar);
	prm::set(cqc, prm::cqc::c_eqn, c.eqn);
	prm::set(cqc, prm::cqc::log_page_size, c.mem.log_page_size);
	prm::set(cqc, prm::cqc::page_offset, 0);
	prm::set(cqc, prm::cqc::dbr_addr, c.dbr_iova);
	return 0;
}

int create_cq(CmdTransport &t, const CqCreate &c, uint32_t *cqn)
{
	std::vector<uint8_t> in;
	int rc = encode_create_cq(c, &in);
	if (rc != 0)
		return rc;
	uint8_t out[prm::create_cq_out::size];
	rc = run_vec(t, in, out);
	if (rc == 0)
		*cqn = static_cast<uint32_t>(prm::get(out, prm::create_cq_out::cqn));
	return rc;
}

int destroy_cq(CmdTransport &t, uint32_t cqn)
{
	uint8_t out[16];
	return run_small(t, prm::opcode::destroy_cq, prm::destroy_cq_in::cqn, cqn, out);
}

int encode_create_qp(const QpCreate &c, std::vector<uint8_t> *in)
{
	if (c.log_sq_size < 1 || c.log_sq_size > 15 || !prm::fits(prm::qpc::pd, c.pd) ||
	    !prm::fits(prm::qpc::ts_format, c.ts_format) ||
	    (c.rq && (!prm::fits(prm::qpc::log_rq_size, c.log_rq_size) ||
		      !prm::fits(prm::qpc::log_rq_stride, c.log_rq_stride))) ||
	    (c.rq && c.srqn != 0) || !prm::fits(prm::qpc::srqn_rmpn_xrqn, c.srqn))
		return -EINVAL;
	int rc = with_pas(prm::create_qp_in::pas_offset, c.mem, in);
	if (rc != 0)
		return rc;
	uint8_t *b = in->data();
	header(b, prm::opcode::create_qp);
	uint8_t *q = b + prm::create_qp_in::qpc_offset;
	prm::set(q, prm::qpc::st, qp_type(c.gsi, c.ud));
	prm::set(q, prm::qpc::pm_state, prm::qp_pm_state::migrated);
	prm::set(q, prm::qpc::pd, c.pd);
	prm::set(q, prm::qpc::uar_page, c.uar);
	prm::set(q, prm::qpc::log_sq_size, c.log_sq_size);
	prm::set(q, prm::qpc::no_sq, 0);
	/* As Linux mlx5_ib's create_qp_common: a regular RQ with its size and stride
	 * (wqe_shift - 4), or a zero-length one (drivers/infiniband/hw/mlx5/qp.c). */
	prm::set(q, prm::qpc::rq_type,
		 c.rq	       ? prm::qp_rq_type::regular
		 : c.srqn != 0 ? prm::qp_rq_type::srq
			       : prm::qp_rq_type::zero_len);
	/* An SRQ's QP (Linux qp.c, create_qp_common: rq_type SRQ and the SRQ's number). */
	prm::set(q, prm::qpc::srqn_rmpn_xrqn, c.srqn);
	prm::set(q, prm::qpc::log_rq_size, c.rq ? c.log_rq_size : 0);
	prm::set(q, prm::qpc::log_rq_stride, c.rq ? c.log_rq_stride : 0);
	prm::set(q, prm::qpc::cqn_snd, c.cqn_snd);
	prm::set(q, prm::qpc::cqn_rcv, c.cqn_rcv);
	prm::set(q, prm::qpc::log_page_size, c.mem.log_page_size);
	prm::set(q, prm::qpc::page_offset, 0);
	prm::set(q, prm::qpc::dbr_addr, c.dbr_iova);
	prm::set(q, prm::qpc::fre, c.fre);
	prm::set(q, prm::qpc::rlky, c.rlky);
	prm::set(q, prm::qpc::ts_format, c.ts_format);
	return 0;
}

int create_qp(CmdTransport &t, const QpCreate &c, uint32_t *qpn)
{
	std::vector<uint8_t> in;
	int rc = encode_create_qp(c, &in);
	if (rc != 0)
		return rc;
	uint8_t out[prm::create_qp_out::size];
	rc = run_vec(t, in, out);
	if (rc == 0)
		*qpn = static_cast<uint32_t>(prm::get(out, prm::create_qp_out::qpn));
	return rc;
}

int destroy_qp(CmdTransport &t, uint32_t qpn)
{
	uint8_t out[16];
	return run_small(t, prm::opcode::destroy_qp, prm::destroy_qp_in::qpn, qpn, out);
}

int encode_modify_qp(uint16_t opcode, uint32_t qpn, const QpAttr &a, std::vector<uint8_t> *in)
{
	namespace q = prm::qpc;
	if (a.port < 1 || a.port > 2 || a.log_sra_max > 7 || a.log_rra_max > 7 ||
	    !prm::fits(q::remote_qpn, a.remote_qpn) || !prm::fits(q::pd, a.pd) ||
	    !prm::fits(q::mtu, a.mtu) || !prm::fits(q::log_msg_max, a.log_msg_max) ||
	    !prm::fits(q::primary_src_addr_index, a.gid_index) ||
	    !prm::fits(q::next_send_psn, a.next_send_psn) ||
	    !prm::fits(q::next_rcv_psn, a.next_rcv_psn) ||
	    !prm::fits(q::retry_count, a.retry_count) || !prm::fits(q::rnr_retry, a.rnr_retry) ||
	    !prm::fits(q::primary_ack_timeout, a.ack_timeout) ||
	    !prm::fits(q::min_rnr_nak, a.min_rnr_nak) ||
	    !prm::fits(q::atomic_mode, a.atomic_mode) ||
	    !prm::fits(q::log_ack_req_freq, a.log_ack_req_freq))
		return -EINVAL;
	try {
		in->assign(prm::modify_qp_in::size, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	uint8_t *b = in->data();
	header(b, opcode);
	prm::set(b, prm::modify_qp_in::qpn, qpn);
	prm::set(b, prm::modify_qp_in::opt_param_mask, a.opt_param_mask);
	uint8_t *c = b + prm::modify_qp_in::qpc_offset;
	prm::set(c, q::st, qp_type(a.gsi, a.ud));
	prm::set(c, q::pm_state, prm::qp_pm_state::migrated);
	prm::set(c, q::q_key, a.q_key);
	prm::set(c, q::pd, a.pd);
	prm::set(c, q::primary_vhca_port_num, a.port);
	prm::set(c, q::remote_qpn, a.remote_qpn);
	prm::set(c, q::rre, a.rre);
	prm::set(c, q::rwe, a.rwe);
	prm::set(c, q::rae, a.rae);
	prm::set(c, q::atomic_mode, a.atomic_mode);
	prm::set(c, q::log_sra_max, a.log_sra_max);
	prm::set(c, q::log_rra_max, a.log_rra_max);
	/* INIT2RTR's part, as Linux's __mlx5_ib_modify_qp and DPDK's
	 * mlx5_devx_cmd_modify_qp_state (drivers/common/mlx5/mlx5_devx_cmds.c) fill it: path MTU,
	 * largest message, receive PSN, RNR NAK timer and the address path: force loopback, or
	 * the GID index and the remote GID (rdma-core providers/mlx5/dr_devx.c,
	 * dr_devx_modify_qp_init2rtr). */
	prm::set(c, q::mtu, a.mtu);
	prm::set(c, q::log_msg_max, a.log_msg_max);
	prm::set(c, q::next_rcv_psn, a.next_rcv_psn);
	prm::set(c, q::min_rnr_nak, a.min_rnr_nak);
	if (a.fl) {
		prm::set(c, q::primary_fl, 1);
	} else {
		prm::set(c, q::primary_src_addr_index, a.gid_index);
		std::memcpy(c + q::primary_rgid_rip_offset, a.remote_gid.data(), q::rgid_size);
	}
	/* RTR2RTS's part: send PSN, retries, the ACK timeout and how often to ask for ACKs. */
	prm::set(c, q::next_send_psn, a.next_send_psn);
	prm::set(c, q::log_ack_req_freq, a.log_ack_req_freq);
	prm::set(c, q::retry_count, a.retry_count);
	prm::set(c, q::rnr_retry, a.rnr_retry);
	prm::set(c, q::primary_ack_timeout, a.ack_timeout);
	return 0;
}

namespace {
int modify(CmdTransport &t, uint16_t opcode, uint32_t qpn, const QpAttr &a)
{
	std::vector<uint8_t> in;
	int rc = encode_modify_qp(opcode, qpn, a, &in);
	if (rc != 0)
		return rc;
	uint8_t out[prm::modify_qp_out::size];
	return run_vec(t, in, out);
}
} // namespace

int rst2init_qp(CmdTransport &t, uint32_t qpn, const QpAttr &a)
{
	return modify(t, prm::opcode::rst2init_qp, qpn, a);
}
int init2rtr_qp(CmdTransport &t, uint32_t qpn, const QpAttr &a)
{
	return modify(t, prm::opcode::init2rtr_qp, qpn, a);
}
int rtr2rts_qp(CmdTransport &t, uint32_t qpn, const QpAttr &a)
{
	return modify(t, prm::opcode::rtr2rts_qp, qpn, a);
}

int qp_2err(CmdTransport &t, uint32_t qpn)
{
	uint8_t out[16];
	return run_small(t, prm::opcode::qp_2err, prm::qp_2err_in::qpn, qpn, out);
}

int qp_2rst(CmdTransport &t, uint32_t qpn)
{
	uint8_t out[16];
	return run_small(t, prm::opcode::qp_2rst, prm::qp_2rst_in::qpn, qpn, out);
}

int query_qp_state(CmdTransport &t, uint32_t qpn, uint32_t *state)
{
	uint8_t in[prm::query_qp_in::size] = {};
	header(in, prm::opcode::query_qp);
	prm::set(in, prm::query_qp_in::qpn, qpn);
	std::vector<uint8_t> out;
	try {
		out.assign(prm::query_qp_out::size, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	int rc = t.exec(in, sizeof(in), out.data(), out.size());
	if (rc == 0)
		*state = static_cast<uint32_t>(
			prm::get(out.data() + prm::query_qp_out::qpc_offset, prm::qpc::state));
	return rc;
}

} // namespace nicmr::mlx5
