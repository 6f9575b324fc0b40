/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The command trace's decoders and renderings (emu_mlx5_trace.h). The fields chosen per
 * command are those a bring-up is judged by: the stage of QUERY_PAGES and what MANAGE_PAGES
 * gives and for which function, which capability QUERY/SET_HCA_CAP touch and the bits SET
 * writes, the keys of CREATE_MKEY/EQ/CQ/QP contexts and what each QP transition sets. A
 * command shorter than its layout is recorded with its opcode and op_mod only.
 */
#include "emu_mlx5_trace.h"

#include <infiniband/mlx5dv.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>

#include "mlx5_names.h"
#include "mlx5_prm.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;

namespace {

const char *status_name(uint8_t st)
{
	const char *n = prm::status_name(st);
	return n != nullptr ? n : "STATUS";
}

std::string hex(uint64_t v)
{
	char b[24];
	std::snprintf(b, sizeof(b), "0x%" PRIx64, v);
	return b;
}

const char *object_prefix(TraceKind k)
{
	switch (k) {
	case TraceKind::eq:
		return "eq";
	case TraceKind::cq:
		return "cq";
	case TraceKind::qp:
		return "qp";
	case TraceKind::pd:
		return "pd";
	case TraceKind::uar:
		return "uar";
	default:
		return nullptr;
	}
}

/* The value as render() writes it (objects as raw numbers). */
std::string value_text(const TraceField &f)
{
	switch (f.kind) {
	case TraceKind::hex:
	case TraceKind::addr:
	case TraceKind::mkey:
		return hex(f.value);
	case TraceKind::cap_type:
		switch (f.value) {
		case prm::cap_type::general:
			return "general";
		case prm::cap_type::atomic:
			return "atomic";
		case prm::cap_type::roce:
			return "roce";
		case prm::cap_type::nicmr_ext:
			return "nicmr_ext";
		default:
			return hex(f.value);
		}
	case TraceKind::cap_mode:
		return f.value == prm::cap_mode::current ? "cur" : "max";
	default:
		return std::to_string(f.value);
	}
}

std::string head(const TraceEntry &e)
{
	std::string s = trace_op_name(e);
	if (e.source == TraceEntry::Source::command)
		s += " op_mod=" + hex(e.op_mod);
	return s;
}

std::string status_text(const TraceEntry &e)
{
	if (e.source == TraceEntry::Source::wqe)
		return "cqe_syndrome=" + hex(e.status);
	return std::string("status=") + status_name(e.status) + " syndrome=" + hex(e.syndrome);
}

uint64_t get(const uint8_t *p, prm::Field f)
{
	return prm::get(p, f);
}

void decode_qpc_transition(TraceEntry &e, uint16_t op, const uint8_t *in)
{
	namespace q = prm::qpc;
	const uint8_t *qpc = in + prm::modify_qp_in::qpc_offset;
	e.add("qpn", get(in, prm::modify_qp_in::qpn), TraceKind::qp);
	e.add("opt_param_mask", get(in, prm::modify_qp_in::opt_param_mask), TraceKind::hex);
	if (op == prm::opcode::rst2init_qp) {
		e.add("port", get(qpc, q::primary_vhca_port_num));
		e.add("pm_state", get(qpc, q::pm_state));
		e.add("rre", get(qpc, q::rre));
		e.add("rwe", get(qpc, q::rwe));
		e.add("rae", get(qpc, q::rae));
	} else if (op == prm::opcode::init2rtr_qp) {
		e.add("port", get(qpc, q::primary_vhca_port_num));
		e.add("fl", get(qpc, q::primary_fl));
		e.add("mtu", get(qpc, q::mtu));
		e.add("log_msg_max", get(qpc, q::log_msg_max));
		e.add("remote_qpn", get(qpc, q::remote_qpn), TraceKind::qp);
		e.add("next_rcv_psn", get(qpc, q::next_rcv_psn));
		e.add("min_rnr_nak", get(qpc, q::min_rnr_nak));
		e.add("log_rra_max", get(qpc, q::log_rra_max));
		e.add("atomic_mode", get(qpc, q::atomic_mode));
		e.add("rre", get(qpc, q::rre));
		e.add("rwe", get(qpc, q::rwe));
		e.add("rae", get(qpc, q::rae));
	} else {
		e.add("ack_timeout", get(qpc, q::primary_ack_timeout));
		e.add("retry_count", get(qpc, q::retry_count));
		e.add("rnr_retry", get(qpc, q::rnr_retry));
		e.add("next_send_psn", get(qpc, q::next_send_psn));
		e.add("log_sra_max", get(qpc, q::log_sra_max));
		/* Only when set: the bring-up reference transcript predates it. */
		if (get(qpc, q::log_ack_req_freq) != 0)
			e.add("log_ack_req_freq", get(qpc, q::log_ack_req_freq));
	}
}

void decode_mkc(TraceEntry &e, const uint8_t *mkc, bool ctx_of_umr)
{
	namespace k = prm::mkc;
	e.add("free", get(mkc, k::free));
	if (!ctx_of_umr) {
		e.add("umr_en", get(mkc, k::umr_en));
		e.add("access_mode", prm::get_access_mode(mkc));
	}
	e.add("lr", get(mkc, k::lr));
	e.add("lw", get(mkc, k::lw));
	e.add("rr", get(mkc, k::rr));
	e.add("rw", get(mkc, k::rw));
	e.add("a", get(mkc, k::a));
	e.add("qpn", get(mkc, k::qpn), TraceKind::hex);
	e.add("length64", get(mkc, k::length64));
	e.add("pd", get(mkc, k::pd), TraceKind::pd);
	e.add("log_page_size", get(mkc, k::log_page_size));
	if (!ctx_of_umr)
		e.add("translations_octword_size", get(mkc, k::translations_octword_size));
	e.add("start_addr", get(mkc, k::start_addr), TraceKind::addr, false);
}

} // namespace

void TraceEntry::add(const char *name, uint64_t value, TraceKind kind, bool in_transcript,
		     bool defines) noexcept
{
	if (nfields >= kMaxFields)
		return;
	/* Addresses and mkeys vary from run to run: never part of a transcript. */
	if (kind == TraceKind::addr || kind == TraceKind::mkey)
		in_transcript = false;
	fields[nfields++] = TraceField{name, value, kind, in_transcript, defines};
}

const TraceField *TraceEntry::find(const char *name) const noexcept
{
	for (size_t i = 0; i < nfields; i++)
		if (std::strcmp(fields[i].name, name) == 0)
			return &fields[i];
	return nullptr;
}

std::string trace_op_name(const TraceEntry &e)
{
	if (e.source == TraceEntry::Source::wqe)
		return e.opcode == MLX5_OPCODE_UMR ? "UMR" : "WQE_" + hex(e.opcode);
	const char *n = prm::opcode_name(e.opcode);
	return n != nullptr ? n : "OP_" + hex(e.opcode);
}

std::string render(const TraceEntry &e)
{
	std::string s = head(e);
	if (e.source == TraceEntry::Source::command || e.status != 0)
		s += " " + status_text(e);
	for (size_t i = 0; i < e.nfields; i++)
		s += std::string(" ") + e.fields[i].name + "=" + value_text(e.fields[i]);
	return s;
}

std::vector<std::string> transcript(const std::vector<TraceEntry> &entries)
{
	/* Objects by kind and number -> the ordinal of their creation in this sequence. */
	std::map<std::pair<TraceKind, uint64_t>, unsigned> names;
	std::map<TraceKind, unsigned> created;
	std::vector<std::string> lines;
	std::vector<uint64_t> repeats;
	for (const TraceEntry &e : entries) {
		std::string s = head(e);
		for (size_t i = 0; i < e.nfields; i++) {
			const TraceField &f = e.fields[i];
			const char *obj = object_prefix(f.kind);
			if (obj != nullptr && f.defines && e.status == 0)
				names[{f.kind, f.value}] = ++created[f.kind];
			if (!f.transcript)
				continue;
			std::string v;
			if (obj == nullptr) {
				v = value_text(f);
			} else if (auto it = names.find({f.kind, f.value}); it != names.end()) {
				v = obj + std::to_string(it->second);
			} else {
				v = "?" + std::to_string(f.value);
			}
			s += std::string(" ") + f.name + "=" + v;
		}
		if (e.status != 0)
			s += " " + status_text(e);
		if (!lines.empty() && lines.back() == s) {
			repeats.back()++;
		} else {
			lines.push_back(std::move(s));
			repeats.push_back(1);
		}
	}
	for (size_t i = 0; i < lines.size(); i++)
		if (repeats[i] > 1)
			lines[i] += " [x" + std::to_string(repeats[i]) + "]";
	return lines;
}

TraceEntry decode_command(const uint8_t *in, size_t in_len, const uint8_t *out, size_t out_len,
			  uint8_t status, uint32_t syndrome)
{
	TraceEntry e;
	e.status = status;
	e.syndrome = syndrome;
	if (in_len < prm::cmd_hdr_in::size)
		return e; /* opcode 0, nothing else known */
	const auto op = static_cast<uint16_t>(get(in, prm::cmd_hdr_in::opcode));
	e.opcode = op;
	e.op_mod = static_cast<uint16_t>(get(in, prm::cmd_hdr_in::op_mod));
	/* The output counts only when the command succeeded (a failed one returns nothing). */
	const bool ok = status == prm::status::ok;
	auto out_has = [&](size_t n) { return ok && out_len >= n; };
	namespace o = prm::opcode;
	switch (op) {
	case o::enable_hca:
	case o::disable_hca:
		if (in_len >= prm::enable_hca_in::size)
			e.add("function_id", get(in, prm::enable_hca_in::function_id));
		break;
	case o::query_issi:
		if (out_has(prm::query_issi_out::size))
			e.add("current_issi", get(out, prm::query_issi_out::current_issi));
		break;
	case o::set_issi:
		if (in_len >= prm::set_issi_in::size)
			e.add("current_issi", get(in, prm::set_issi_in::current_issi));
		break;
	case o::query_pages:
		if (in_len >= prm::query_pages_in::size)
			e.add("function_id", get(in, prm::query_pages_in::function_id));
		if (out_has(prm::query_pages_out::size)) {
			/* Signed: a negative count asks for pages back. */
			const auto n =
				static_cast<int32_t>(get(out, prm::query_pages_out::num_pages));
			e.add("num_pages", static_cast<uint64_t>(static_cast<int64_t>(n)));
		}
		break;
	case o::manage_pages:
		if (in_len >= prm::manage_pages_in::size) {
			e.add("function_id", get(in, prm::manage_pages_in::function_id));
			e.add("npages", get(in, prm::manage_pages_in::input_num_entries));
		}
		if (out_has(prm::manage_pages_out::size) &&
		    e.op_mod == prm::manage_pages_op_mod::take)
			e.add("returned", get(out, prm::manage_pages_out::output_num_entries));
		break;
	case o::query_hca_cap:
	case o::set_hca_cap: {
		e.add("cap", prm::cap_op_mod_type(e.op_mod), TraceKind::cap_type);
		if (op == o::query_hca_cap) {
			e.add("mode", prm::cap_op_mod_mode(e.op_mod), TraceKind::cap_mode);
			break;
		}
		if (in_len < prm::set_hca_cap_in::size)
			break;
		const uint8_t *cap = in + prm::set_hca_cap_in::capability_offset;
		const uint16_t type = prm::cap_op_mod_type(e.op_mod);
		if (type == prm::cap_type::general) {
			e.add("cmdif_checksum", get(cap, prm::hca_cap::cmdif_checksum));
			e.add("mkey_by_name", get(cap, prm::hca_cap::mkey_by_name));
		} else if (type == prm::cap_type::atomic) {
			e.add("atomic_req_8B_endianness_mode",
			      get(cap, prm::atomic_cap::atomic_req_8B_endianness_mode));
		}
		break;
	}
	case o::teardown_hca:
		if (in_len >= prm::teardown_hca_in::size)
			e.add("profile", get(in, prm::teardown_hca_in::profile));
		break;
	case o::alloc_pd:
		if (out_has(prm::alloc_pd_out::size))
			e.add("pd", get(out, prm::alloc_pd_out::pd), TraceKind::pd, false, true);
		break;
	case o::dealloc_pd:
		if (in_len >= prm::dealloc_pd_in::size)
			e.add("pd", get(in, prm::dealloc_pd_in::pd), TraceKind::pd);
		break;
	case o::alloc_uar:
		if (out_has(prm::alloc_uar_out::size))
			e.add("uar", get(out, prm::alloc_uar_out::uar), TraceKind::uar, false,
			      true);
		break;
	case o::dealloc_uar:
		if (in_len >= prm::dealloc_uar_in::size)
			e.add("uar", get(in, prm::dealloc_uar_in::uar), TraceKind::uar);
		break;
	case o::create_mkey: {
		namespace m = prm::create_mkey_in;
		if (in_len < m::size)
			break;
		const uint64_t want = get(in, m::input_mkey_index);
		e.add("by_index", want != 0 ? 1 : 0);
		e.add("pg_access", get(in, m::pg_access));
		e.add("umem", get(in, m::mkey_umem_valid));
		decode_mkc(e, in + m::mkc_offset, false);
		e.add("actual_size", get(in, m::translations_octword_actual_size));
		e.add("input_mkey_index", want, TraceKind::mkey);
		if (out_has(prm::create_mkey_out::size))
			e.add("mkey_index", get(out, prm::create_mkey_out::mkey_index),
			      TraceKind::mkey);
		break;
	}
	case o::query_mkey:
		if (in_len >= prm::query_mkey_in::size)
			e.add("mkey_index", get(in, prm::query_mkey_in::mkey_index),
			      TraceKind::mkey);
		break;
	case o::destroy_mkey:
		if (in_len >= prm::destroy_mkey_in::size)
			e.add("mkey_index", get(in, prm::destroy_mkey_in::mkey_index),
			      TraceKind::mkey);
		break;
	case o::create_eq: {
		namespace m = prm::create_eq_in;
		if (in_len < m::size)
			break;
		const uint8_t *eqc = in + m::eqc_offset;
		e.add("log_eq_size", get(eqc, prm::eqc::log_eq_size));
		e.add("event_bitmask", get(in, m::event_bitmask), TraceKind::hex);
		e.add("uar_page", get(eqc, prm::eqc::uar_page), TraceKind::uar);
		e.add("intr", get(eqc, prm::eqc::intr));
		if (out_has(prm::create_eq_out::size))
			e.add("eqn", get(out, prm::create_eq_out::eq_number), TraceKind::eq, false,
			      true);
		break;
	}
	case o::destroy_eq:
		if (in_len >= prm::destroy_eq_in::size)
			e.add("eqn", get(in, prm::destroy_eq_in::eq_number), TraceKind::eq);
		break;
	case o::create_cq: {
		namespace m = prm::create_cq_in;
		if (in_len < m::size)
			break;
		const uint8_t *cqc = in + m::cqc_offset;
		e.add("log_cq_size", get(cqc, prm::cqc::log_cq_size));
		e.add("cqe_sz", get(cqc, prm::cqc::cqe_sz));
		e.add("c_eqn", get(cqc, prm::cqc::c_eqn), TraceKind::eq);
		e.add("uar_page", get(cqc, prm::cqc::uar_page), TraceKind::uar);
		e.add("dbr_addr", get(cqc, prm::cqc::dbr_addr), TraceKind::addr);
		if (out_has(prm::create_cq_out::size))
			e.add("cqn", get(out, prm::create_cq_out::cqn), TraceKind::cq, false, true);
		break;
	}
	case o::destroy_cq:
		if (in_len >= prm::destroy_cq_in::size)
			e.add("cqn", get(in, prm::destroy_cq_in::cqn), TraceKind::cq);
		break;
	case o::create_qp: {
		namespace m = prm::create_qp_in;
		namespace q = prm::qpc;
		if (in_len < m::size)
			break;
		const uint8_t *qpc = in + m::qpc_offset;
		e.add("st", get(qpc, q::st));
		e.add("pm_state", get(qpc, q::pm_state));
		e.add("pd", get(qpc, q::pd), TraceKind::pd);
		e.add("fre", get(qpc, q::fre));
		e.add("rlky", get(qpc, q::rlky));
		e.add("ts_format", get(qpc, q::ts_format));
		e.add("log_sq_size", get(qpc, q::log_sq_size));
		e.add("no_sq", get(qpc, q::no_sq));
		e.add("rq_type", get(qpc, q::rq_type));
		e.add("log_rq_size", get(qpc, q::log_rq_size));
		e.add("cqn_snd", get(qpc, q::cqn_snd), TraceKind::cq);
		e.add("cqn_rcv", get(qpc, q::cqn_rcv), TraceKind::cq);
		e.add("uar_page", get(qpc, q::uar_page), TraceKind::uar);
		e.add("dbr_addr", get(qpc, q::dbr_addr), TraceKind::addr);
		if (out_has(prm::create_qp_out::size))
			e.add("qpn", get(out, prm::create_qp_out::qpn), TraceKind::qp, false, true);
		break;
	}
	case o::destroy_qp:
		if (in_len >= prm::destroy_qp_in::size)
			e.add("qpn", get(in, prm::destroy_qp_in::qpn), TraceKind::qp);
		break;
	case o::rst2init_qp:
	case o::init2rtr_qp:
	case o::rtr2rts_qp:
		if (in_len >= prm::modify_qp_in::size)
			decode_qpc_transition(e, op, in);
		break;
	case o::qp_2err:
	case o::qp_2rst:
	case o::query_qp:
		if (in_len >= prm::qp_2err_in::size)
			e.add("qpn", get(in, prm::modify_qp_in::qpn), TraceKind::qp);
		break;
	default:
		break;
	}
	return e;
}

TraceEntry decode_umr(const uint8_t *wqe, size_t len, uint32_t qpn, uint32_t key,
		      uint8_t cqe_syndrome)
{
	TraceEntry e;
	e.source = TraceEntry::Source::wqe;
	e.opcode = MLX5_OPCODE_UMR;
	e.status = cqe_syndrome;
	e.add("qpn", qpn, TraceKind::qp);
	e.add("mkey", key, TraceKind::mkey);
	constexpr size_t kCtrl = sizeof(mlx5_wqe_ctrl_seg);
	if (len < kCtrl + prm::umr_ctrl::size + prm::mkc::size)
		return e;
	const uint8_t *u = wqe + kCtrl;
	e.add("inline", get(u, prm::umr_ctrl::inline_xlt));
	e.add("check", get(u, prm::umr_ctrl::check));
	e.add("translation_offset_en", get(u, prm::umr_ctrl::translation_offset_en));
	e.add("octowords", get(u, prm::umr_ctrl::klm_octowords));
	e.add("mkey_mask", get(u, prm::umr_ctrl::mkey_mask), TraceKind::hex);
	decode_mkc(e, u + prm::umr_ctrl::size, true);
	return e;
}

CmdTrace::CmdTrace(size_t capacity) : capacity_(capacity)
{
	entries_.reserve(capacity);
}

void CmdTrace::record(const TraceEntry &e)
{
	std::lock_guard lk(mu_);
	if (entries_.size() < capacity_)
		entries_.push_back(e);
	else
		dropped_++;
}

std::vector<TraceEntry> CmdTrace::entries() const
{
	std::lock_guard lk(mu_);
	return entries_;
}

uint64_t CmdTrace::dropped() const
{
	std::lock_guard lk(mu_);
	return dropped_;
}

void CmdTrace::clear()
{
	std::lock_guard lk(mu_);
	entries_.clear();
	dropped_ = 0;
}

} // namespace nicmr::emu
