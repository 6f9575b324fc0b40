/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data-path commands of the mlx5 device model's decoder: UARs, EQs, CQs, QPs and the QP
 * transitions. They decode the PRM contexts through the layout table into the data path's
 * attributes (emu_mlx5_dp.h), which owns the objects. Order of checks as in emu_mlx5_cmd.cpp:
 * lengths, HCA state, then parameters; nothing changes before every check has passed.
 */
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "emu_mlx5.h"
#include "emu_mlx5_cmd_util.h"
#include "mlx5_prm.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;

namespace {

using cmd::fail;
using cmd::kOk;

} // namespace

/* The pas list after a create command's context: as many entries as the input holds. */
QueueMem cmd::queue_mem(const uint8_t *in, size_t in_len, size_t pas_offset, uint32_t log_page_size)
{
	QueueMem m;
	m.log_page_size = log_page_size;
	const size_t n = (in_len - pas_offset) / prm::pas_entry_size;
	m.pas.reserve(n);
	for (size_t i = 0; i < n; i++)
		m.pas.push_back(
			prm::get(in + pas_offset + i * prm::pas_entry_size, prm::pas_entry));
	return m;
}

/* A data path error for a queue's memory. */
CmdResult cmd::queue_error(int rc, Syndrome full)
{
	switch (rc) {
	case -ENOSPC:
		return fail(prm::status::exceed_lim, full);
	case -EFAULT:
		return fail(prm::status::bad_param, Syndrome::queue_memory);
	default:
		return fail(prm::status::bad_param, Syndrome::queue_params);
	}
}

using cmd::queue_error;
using cmd::queue_mem;

bool EmuMlx5Device::dp_ready(size_t in_len, size_t in_min, size_t out_len, size_t out_min,
			     CmdResult *r, bool needs_pages)
{
	if (!cmd::lengths(in_len, in_min, out_len, out_min, r))
		return false;
	if (state_ != HcaState::initialized) {
		*r = fail(prm::status::bad_sys_state, Syndrome::hca_not_initialized);
		return false;
	}
	/* ALLOC_UAR and CREATE_EQ come before the regular pages: the async EQ is how the
	 * driver hears that firmware wants them (rdma-core creates it right after INIT_HCA). */
	return !needs_pages || pages_ready(r);
}

CmdResult EmuMlx5Device::cmd_alloc_uar(const uint8_t *, size_t in_len, uint8_t *out, size_t out_len)
{
	CmdResult r;
	if (!dp_ready(in_len, prm::alloc_uar_in::size, out_len, prm::alloc_uar_out::size, &r,
		      false))
		return r;
	uint32_t idx = 0;
	if (dp_->alloc_uar(&idx) < 0)
		return fail(prm::status::exceed_lim, Syndrome::uar_table_full);
	prm::set(out, prm::alloc_uar_out::uar, idx);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_dealloc_uar(const uint8_t *in, size_t in_len, uint8_t *,
					 size_t out_len)
{
	CmdResult r;
	if (!dp_ready(in_len, prm::dealloc_uar_in::size, out_len, prm::dealloc_uar_out::size, &r,
		      false))
		return r;
	const int rc =
		dp_->dealloc_uar(static_cast<uint32_t>(prm::get(in, prm::dealloc_uar_in::uar)));
	if (rc == -EBUSY)
		return fail(prm::status::resource_busy, Syndrome::uar_in_use);
	if (rc < 0)
		return fail(prm::status::bad_res_state, Syndrome::uar_not_allocated);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_create_eq(const uint8_t *in, size_t in_len, uint8_t *out,
				       size_t out_len)
{
	namespace m = prm::create_eq_in;
	CmdResult r;
	if (!dp_ready(in_len, m::size, out_len, prm::create_eq_out::size, &r, false))
		return r;
	const uint8_t *eqc = in + m::eqc_offset;
	if (prm::get(eqc, prm::eqc::page_offset) != 0)
		return fail(prm::status::bad_param, Syndrome::queue_params);
	EqAttr a;
	a.log_size = static_cast<uint32_t>(prm::get(eqc, prm::eqc::log_eq_size));
	a.event_bitmask = prm::get(in, m::event_bitmask);
	a.uar = static_cast<uint32_t>(prm::get(eqc, prm::eqc::uar_page));
	a.intr = static_cast<uint32_t>(prm::get(eqc, prm::eqc::intr));
	a.mem = queue_mem(in, in_len, m::pas_offset,
			  static_cast<uint32_t>(prm::get(eqc, prm::eqc::log_page_size)));
	uint32_t eqn = 0;
	const int rc = dp_->create_eq(a, &eqn);
	if (rc < 0)
		return queue_error(rc, Syndrome::eq_table_full);
	prm::set(out, prm::create_eq_out::eq_number, eqn);
	/* The first EQ that takes page requests: firmware asks at once for the pages it wants
	 * after INIT_HCA (Linux pagealloc.c answers them in the page-request work). */
	if ((a.event_bitmask & prm::event_bit(prm::event_type::page_request)) != 0) {
		const uint64_t need = pages_required(prm::query_pages_op_mod::regular);
		const uint64_t have = pages_.size() + requested_;
		if (need > have)
			post_page_request(static_cast<int64_t>(need - have));
	}
	return kOk;
}

CmdResult EmuMlx5Device::cmd_destroy_eq(const uint8_t *in, size_t in_len, uint8_t *, size_t out_len)
{
	CmdResult r;
	if (!dp_ready(in_len, prm::destroy_eq_in::size, out_len, prm::destroy_eq_out::size, &r,
		      false))
		return r;
	const int rc =
		dp_->destroy_eq(static_cast<uint32_t>(prm::get(in, prm::destroy_eq_in::eq_number)));
	if (rc == -EBUSY)
		return fail(prm::status::resource_busy, Syndrome::eq_in_use);
	if (rc < 0)
		return fail(prm::status::bad_res_state, Syndrome::eq_not_found);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_create_cq(const uint8_t *in, size_t in_len, uint8_t *out,
				       size_t out_len)
{
	namespace m = prm::create_cq_in;
	CmdResult r;
	if (!dp_ready(in_len, m::size, out_len, prm::create_cq_out::size, &r))
		return r;
	const uint8_t *cqc = in + m::cqc_offset;
	/* 64-byte CQEs only; no UMEM; the queue starts at its first page. */
	if (prm::get(cqc, prm::cqc::cqe_sz) != prm::cqc::cqe_sz_64 ||
	    prm::get(cqc, prm::cqc::dbr_umem_valid) != 0 ||
	    prm::get(cqc, prm::cqc::page_offset) != 0)
		return fail(prm::status::bad_param, Syndrome::queue_params);
	CqAttr a;
	a.log_size = static_cast<uint32_t>(prm::get(cqc, prm::cqc::log_cq_size));
	a.dbr = prm::get(cqc, prm::cqc::dbr_addr);
	a.eqn = static_cast<uint32_t>(prm::get(cqc, prm::cqc::c_eqn));
	a.mem = queue_mem(in, in_len, m::pas_offset,
			  static_cast<uint32_t>(prm::get(cqc, prm::cqc::log_page_size)));
	uint32_t cqn = 0;
	const int rc = dp_->create_cq(a, &cqn);
	/* An unallocated resource named in the context: BAD_RESOURCE (the PRM's example of
	 * that status is a CQ that does not exist when a QP is created). */
	if (rc == kNoSuchEq)
		return fail(prm::status::bad_resource, Syndrome::cq_eq_not_found);
	if (rc < 0)
		return queue_error(rc, Syndrome::cq_table_full);
	prm::set(out, prm::create_cq_out::cqn, cqn);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_destroy_cq(const uint8_t *in, size_t in_len, uint8_t *, size_t out_len)
{
	CmdResult r;
	if (!dp_ready(in_len, prm::destroy_cq_in::size, out_len, prm::destroy_cq_out::size, &r))
		return r;
	const int rc =
		dp_->destroy_cq(static_cast<uint32_t>(prm::get(in, prm::destroy_cq_in::cqn)));
	if (rc == -EBUSY)
		return fail(prm::status::resource_busy, Syndrome::cq_in_use);
	if (rc < 0)
		return fail(prm::status::bad_res_state, Syndrome::cq_not_found);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_create_qp(const uint8_t *in, size_t in_len, uint8_t *out,
				       size_t out_len)
{
	namespace m = prm::create_qp_in;
	CmdResult r;
	if (!dp_ready(in_len, m::size, out_len, prm::create_qp_out::size, &r))
		return r;
	const uint8_t *qpc = in + m::qpc_offset;
	/* RC and UD (unreliable datagram, emu_mlx5_ud.cpp) transports, and QP1: a UD QP that
	 * is its port's GSI QP (prm::gsi). */
	const uint64_t st = prm::get(qpc, prm::qpc::st);
	if ((st != prm::qp_st::rc && st != prm::qp_st::ud && st != prm::qp_st::qp1) ||
	    prm::get(in, m::wq_umem_valid) != 0 || prm::get(qpc, prm::qpc::dbr_umem_valid) != 0)
		return fail(prm::status::bad_param, Syndrome::qp_type);
	/* The QP's own RQ (rq_type regular), none (zero_len) or a shared one (srq, named by
	 * srqn_rmpn_xrqn: emu_mlx5_srq.cpp); another kind is not modelled. */
	const uint64_t rq_type = prm::get(qpc, prm::qpc::rq_type);
	if (rq_type != prm::qp_rq_type::regular && rq_type != prm::qp_rq_type::zero_len &&
	    rq_type != prm::qp_rq_type::srq)
		return fail(prm::status::bad_param, Syndrome::qp_type);
	if (prm::get(qpc, prm::qpc::page_offset) != 0)
		return fail(prm::status::bad_param, Syndrome::queue_params);
	const uint64_t pd = prm::get(qpc, prm::qpc::pd);
	if (pds_.count(static_cast<uint32_t>(pd)) == 0)
		return fail(prm::status::bad_res_state, Syndrome::pd_not_allocated);
	/* ts_format: only what the RoCE caps' qp_ts_format stamps (without it the field is
	 * reserved and must be 0, free running); "default" needs any of them (Linux
	 * mlx5_get_qp_default_ts uses it only when qp_ts_format is not 0). */
	const auto ts = static_cast<uint32_t>(prm::get(qpc, prm::qpc::ts_format));
	const uint32_t ts_cap =
		cfg_.roce ? cfg_.roce_qp_ts_format : prm::ts_format_cap::free_running;
	const bool ts_ok =
		ts == prm::qp_ts_format::free_running ? ts_cap != prm::ts_format_cap::real_time
		: ts == prm::qp_ts_format::device_default
			? ts_cap != prm::ts_format_cap::free_running
		: ts == prm::qp_ts_format::real_time ? ts_cap != prm::ts_format_cap::free_running
						     : false;
	if (!ts_ok)
		return fail(prm::status::bad_param, Syndrome::qp_ts_format);
	QpAttr a;
	a.gsi = st == prm::qp_st::qp1;
	a.ud = st == prm::qp_st::ud || a.gsi;
	a.ts_format = ts;
	a.pd = static_cast<uint32_t>(pd);
	a.cqn = static_cast<uint32_t>(prm::get(qpc, prm::qpc::cqn_snd));
	a.uar = static_cast<uint32_t>(prm::get(qpc, prm::qpc::uar_page));
	a.log_sq_size = static_cast<uint32_t>(prm::get(qpc, prm::qpc::log_sq_size));
	a.no_sq = prm::get(qpc, prm::qpc::no_sq) != 0;
	a.rq = rq_type == prm::qp_rq_type::regular;
	if (a.rq) {
		a.log_rq_size = static_cast<uint32_t>(prm::get(qpc, prm::qpc::log_rq_size));
		a.log_rq_stride = static_cast<uint32_t>(prm::get(qpc, prm::qpc::log_rq_stride));
		a.rcqn = static_cast<uint32_t>(prm::get(qpc, prm::qpc::cqn_rcv));
	}
	if (rq_type == prm::qp_rq_type::srq) {
		a.srqn = static_cast<uint32_t>(prm::get(qpc, prm::qpc::srqn_rmpn_xrqn));
		a.rcqn = static_cast<uint32_t>(prm::get(qpc, prm::qpc::cqn_rcv));
		if (a.srqn == 0)
			return fail(prm::status::bad_resource, Syndrome::qp_srq_not_found);
	}
	a.dbr = prm::get(qpc, prm::qpc::dbr_addr);
	a.fre = prm::get(qpc, prm::qpc::fre) != 0;
	a.rlky = prm::get(qpc, prm::qpc::rlky) != 0;
	a.mem = queue_mem(in, in_len, m::pas_offset,
			  static_cast<uint32_t>(prm::get(qpc, prm::qpc::log_page_size)));
	uint32_t qpn = 0;
	const int rc = dp_->create_qp(a, &qpn);
	if (rc == -ENOENT)
		return fail(prm::status::bad_res_state, Syndrome::cq_not_found);
	if (rc == -ENXIO)
		return fail(prm::status::bad_res_state, Syndrome::uar_not_allocated);
	/* As a CQ that does not exist (the PRM's example of BAD_RESOURCE). */
	if (rc == kNoSuchSrq)
		return fail(prm::status::bad_resource, Syndrome::qp_srq_not_found);
	if (rc < 0)
		return queue_error(rc, Syndrome::qp_table_full);
	prm::set(out, prm::create_qp_out::qpn, qpn);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_destroy_qp(const uint8_t *in, size_t in_len, uint8_t *, size_t out_len)
{
	CmdResult r;
	if (!dp_ready(in_len, prm::destroy_qp_in::size, out_len, prm::destroy_qp_out::size, &r))
		return r;
	if (dp_->destroy_qp(static_cast<uint32_t>(prm::get(in, prm::destroy_qp_in::qpn))) < 0)
		return fail(prm::status::bad_res_state, Syndrome::qp_not_found);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_modify_qp(const uint8_t *in, size_t in_len, uint8_t *, size_t out_len)
{
	const auto op = static_cast<uint16_t>(prm::get(in, prm::cmd_hdr_in::opcode));
	const bool with_qpc = op == prm::opcode::rst2init_qp || op == prm::opcode::init2rtr_qp ||
			      op == prm::opcode::rtr2rts_qp;
	CmdResult r;
	if (!dp_ready(in_len, with_qpc ? prm::modify_qp_in::size : prm::qp_2err_in::size, out_len,
		      prm::modify_qp_out::size, &r))
		return r;
	const auto qpn = static_cast<uint32_t>(prm::get(in, prm::modify_qp_in::qpn));
	QpInfo cur;
	if (dp_->query_qp(qpn, &cur) < 0)
		return fail(prm::status::bad_res_state, Syndrome::qp_not_found);
	QpPath p = cur.path;
	QpTransition t = QpTransition::to_err;
	if (with_qpc) {
		namespace q = prm::qpc;
		const uint8_t *qpc = in + prm::modify_qp_in::qpc_offset;
		const uint64_t opt = prm::get(in, prm::modify_qp_in::opt_param_mask);
		const uint64_t port = prm::get(qpc, prm::qpc::primary_vhca_port_num);
		const bool rst2init = op == prm::opcode::rst2init_qp;
		const bool init2rtr = op == prm::opcode::init2rtr_qp;
		const bool ud = cur.attr.ud;
		/* Optional parameters: only those the QP type's transition has (Linux qp.c,
		 * opt_mask); RST2INIT has none. */
		const uint32_t allowed = rst2init   ? 0
					 : init2rtr ? (ud ? prm::qp_optpar::ud_init2rtr
							  : prm::qp_optpar::rc_init2rtr)
					 : ud	    ? prm::qp_optpar::ud_rtr2rts
						    : prm::qp_optpar::rc_rtr2rts;
		if ((opt & ~uint64_t{allowed}) != 0)
			return fail(prm::status::bad_param, Syndrome::qp_opt_param);
		/* Atomic mode, with the remote access enables: IB-compliant 8-byte atomics are
		 * the model's only mode. */
		const auto atomic_mode = static_cast<uint32_t>(prm::get(qpc, q::atomic_mode));
		if ((rst2init || (opt & prm::qp_optpar::rae) != 0) &&
		    atomic_mode > prm::qp_atomic_mode::ib_comp)
			return fail(prm::status::bad_param, Syndrome::qp_atomic_mode);
		if (rst2init || (opt & prm::qp_optpar::rae) != 0)
			p.atomic_mode = atomic_mode;
		if (init2rtr) {
			/* The connection's required fields: a path MTU (0 is none), a message
			 * limit the device carries, and an address path: force loopback where
			 * the RoCE caps allow it (RoCE counts as enabled on a RoCE port), else a
			 * GID table entry and the peer's GID. */
			const auto mtu = static_cast<uint32_t>(prm::get(qpc, q::mtu));
			if (mtu < prm::qp_mtu::mtu_256 || mtu > prm::qp_mtu::mtu_4096)
				return fail(prm::status::bad_param, Syndrome::qp_mtu);
			const auto msg = static_cast<uint32_t>(prm::get(qpc, q::log_msg_max));
			if (msg > dp_->config().log_max_msg)
				return fail(prm::status::bad_param, Syndrome::qp_msg_max);
			const bool fl = prm::get(qpc, q::primary_fl) != 0;
			const bool fl_ok =
				cfg_.roce ? cfg_.roce_fl_when_enabled : cfg_.roce_fl_when_disabled;
			if (fl && !fl_ok && !ud)
				return fail(prm::status::bad_param, Syndrome::qp_force_loopback);
			const auto gid =
				static_cast<uint32_t>(prm::get(qpc, q::primary_src_addr_index));
			const uint8_t *rgid = qpc + q::primary_rgid_rip_offset;
			/* A UD QP has no address path: each send WQE names its destination. */
			if (!fl && !ud) {
				if (gid >= (cfg_.roce ? cfg_.roce_address_table_size : 0))
					return fail(prm::status::bad_param, Syndrome::qp_gid_index);
				if (std::all_of(rgid, rgid + q::rgid_size,
						[](uint8_t b) { return b == 0; }))
					return fail(prm::status::bad_param,
						    Syndrome::qp_remote_gid);
			}
			p.mtu = mtu;
			p.log_msg_max = msg;
			p.fl = fl;
			p.gid_index = fl ? 0 : gid;
			std::memset(p.remote_gid, 0, sizeof(p.remote_gid));
			if (!fl)
				std::memcpy(p.remote_gid, rgid, q::rgid_size);
			p.next_rcv_psn = static_cast<uint32_t>(prm::get(qpc, q::next_rcv_psn));
			p.min_rnr_nak = static_cast<uint32_t>(prm::get(qpc, q::min_rnr_nak));
			p.log_rra_max = static_cast<uint32_t>(prm::get(qpc, q::log_rra_max));
		}
		if (op == prm::opcode::rtr2rts_qp) {
			p.next_send_psn = static_cast<uint32_t>(prm::get(qpc, q::next_send_psn));
			p.retry_count = static_cast<uint32_t>(prm::get(qpc, q::retry_count));
			p.log_sra_max = static_cast<uint32_t>(prm::get(qpc, q::log_sra_max));
			p.rnr_retry = static_cast<uint32_t>(prm::get(qpc, q::rnr_retry));
			p.ack_timeout =
				static_cast<uint32_t>(prm::get(qpc, q::primary_ack_timeout));
			p.log_ack_req_freq =
				static_cast<uint32_t>(prm::get(qpc, q::log_ack_req_freq));
		}
		/* RST2INIT sets the port and the remote access enables; the later transitions
		 * change the enables only where opt_param_mask says so. */
		if (rst2init || (op == prm::opcode::init2rtr_qp && port != 0)) {
			if (port < 1 || port > cfg_.ports)
				return fail(prm::status::bad_param, Syndrome::qp_port);
			p.port = static_cast<uint32_t>(port);
		}
		if (rst2init || (opt & prm::qp_optpar::rre) != 0)
			p.rre = prm::get(qpc, prm::qpc::rre) != 0;
		if (rst2init || (opt & prm::qp_optpar::rwe) != 0)
			p.rwe = prm::get(qpc, prm::qpc::rwe) != 0;
		if (rst2init || (opt & prm::qp_optpar::rae) != 0)
			p.rae = prm::get(qpc, prm::qpc::rae) != 0;
		if (op == prm::opcode::init2rtr_qp && !ud)
			p.remote_qpn = static_cast<uint32_t>(prm::get(qpc, prm::qpc::remote_qpn));
		/* UD: the Q_Key its receives must carry (IBTA 10.2.5). */
		if (ud && (rst2init || (opt & prm::qp_optpar::q_key) != 0))
			p.q_key = static_cast<uint32_t>(prm::get(qpc, prm::qpc::q_key));
		t = rst2init			     ? QpTransition::rst2init
		    : op == prm::opcode::init2rtr_qp ? QpTransition::init2rtr
						     : QpTransition::rtr2rts;
	} else {
		t = op == prm::opcode::qp_2err ? QpTransition::to_err : QpTransition::to_rst;
	}
	const int rc = dp_->modify_qp(qpn, t, p);
	if (rc == -EPERM)
		return fail(prm::status::bad_qp_state, Syndrome::qp_bad_state);
	if (rc == -EINVAL)
		return fail(prm::status::bad_param, Syndrome::qp_port);
	/* A second GSI QP on a port: the port's QP1 is taken, as an object in use. */
	if (rc == -EBUSY)
		return fail(prm::status::resource_busy, Syndrome::qp_gsi_busy);
	/* A wire port's GID table has entry 0 only, and a path to another address family than
	 * the port's cannot be sent. */
	if (rc == -ENXIO)
		return fail(prm::status::bad_param, Syndrome::qp_gid_index);
	if (rc == -EADDRNOTAVAIL)
		return fail(prm::status::bad_param, Syndrome::qp_remote_gid);
	if (rc < 0)
		return fail(prm::status::bad_res_state, Syndrome::qp_not_found);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_query_qp(const uint8_t *in, size_t in_len, uint8_t *out,
				      size_t out_len)
{
	CmdResult r;
	if (!dp_ready(in_len, prm::query_qp_in::size, out_len, prm::query_qp_out::size, &r))
		return r;
	QpInfo q;
	if (dp_->query_qp(static_cast<uint32_t>(prm::get(in, prm::query_qp_in::qpn)), &q) < 0)
		return fail(prm::status::bad_res_state, Syndrome::qp_not_found);
	uint8_t *qpc = out + prm::query_qp_out::qpc_offset;
	prm::set(qpc, prm::qpc::state, static_cast<uint32_t>(q.state));
	prm::set(qpc, prm::qpc::st,
		 q.attr.gsi  ? prm::qp_st::qp1
		 : q.attr.ud ? prm::qp_st::ud
			     : prm::qp_st::rc);
	prm::set(qpc, prm::qpc::q_key, q.path.q_key);
	prm::set(qpc, prm::qpc::pd, q.attr.pd);
	prm::set(qpc, prm::qpc::log_sq_size, q.attr.log_sq_size);
	prm::set(qpc, prm::qpc::uar_page, q.attr.uar);
	prm::set(qpc, prm::qpc::log_page_size, q.attr.mem.log_page_size);
	prm::set(qpc, prm::qpc::remote_qpn, q.path.remote_qpn);
	prm::set(qpc, prm::qpc::primary_vhca_port_num, q.path.port);
	prm::set(qpc, prm::qpc::cqn_snd, q.attr.cqn);
	prm::set(qpc, prm::qpc::no_sq, q.attr.no_sq ? 1 : 0);
	prm::set(qpc, prm::qpc::rq_type,
		 q.attr.rq	    ? prm::qp_rq_type::regular
		 : q.attr.srqn != 0 ? prm::qp_rq_type::srq
				    : prm::qp_rq_type::zero_len);
	prm::set(qpc, prm::qpc::srqn_rmpn_xrqn, q.attr.srqn);
	prm::set(qpc, prm::qpc::log_rq_size, q.attr.log_rq_size);
	prm::set(qpc, prm::qpc::log_rq_stride, q.attr.log_rq_stride);
	prm::set(qpc, prm::qpc::cqn_rcv, q.attr.rcqn);
	prm::set(qpc, prm::qpc::rre, q.path.rre);
	prm::set(qpc, prm::qpc::rwe, q.path.rwe);
	prm::set(qpc, prm::qpc::rae, q.path.rae);
	prm::set(qpc, prm::qpc::dbr_addr, q.attr.dbr);
	prm::set(qpc, prm::qpc::hw_sq_wqebb_counter, q.sq_ci);
	prm::set(qpc, prm::qpc::ts_format, q.attr.ts_format);
	prm::set(qpc, prm::qpc::atomic_mode, q.path.atomic_mode);
	prm::set(qpc, prm::qpc::mtu, q.path.mtu);
	prm::set(qpc, prm::qpc::log_msg_max, q.path.log_msg_max);
	prm::set(qpc, prm::qpc::primary_fl, q.path.fl ? 1 : 0);
	prm::set(qpc, prm::qpc::primary_src_addr_index, q.path.gid_index);
	std::memcpy(qpc + prm::qpc::primary_rgid_rip_offset, q.path.remote_gid,
		    prm::qpc::rgid_size);
	prm::set(qpc, prm::qpc::next_rcv_psn, q.path.next_rcv_psn);
	prm::set(qpc, prm::qpc::min_rnr_nak, q.path.min_rnr_nak);
	prm::set(qpc, prm::qpc::next_send_psn, q.path.next_send_psn);
	prm::set(qpc, prm::qpc::retry_count, q.path.retry_count);
	prm::set(qpc, prm::qpc::rnr_retry, q.path.rnr_retry);
	prm::set(qpc, prm::qpc::primary_ack_timeout, q.path.ack_timeout);
	return kOk;
}

/*
 * PAGE_FAULT_RESUME (Linux mlx5_ifc.h page_fault_resume_in; odp.c mlx5_ib_page_fault_resume):
 * the token of an outstanding page fault, and error when the driver could not make the pages
 * present. A token no outstanding fault has (never raised, resumed already) is a bad parameter
 * to firmware. The fault's type and WQ number are the driver's echo; the token alone names it.
 */
CmdResult EmuMlx5Device::cmd_page_fault_resume(const uint8_t *in, size_t in_len, uint8_t *,
					       size_t out_len)
{
	namespace m = prm::page_fault_resume_in;
	CmdResult r;
	if (!dp_ready(in_len, m::size, out_len, prm::page_fault_resume_out::size, &r, false))
		return r;
	const auto token = static_cast<uint32_t>(prm::get(in, m::token));
	if (dp_->page_fault_resume(token, prm::get(in, m::error) != 0) != 0)
		return fail(prm::status::bad_param, Syndrome::page_fault_token);
	return kOk;
}

} // namespace nicmr::emu
