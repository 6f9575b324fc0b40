/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The command decoder of the mlx5 device model: one handler per opcode of the subset.
 *
 * Every handler checks, in this order: the input and output lengths its layout needs
 * (BAD_INPUT_LEN / BAD_OUTPUT_LEN), the HCA state (BAD_SYS_STATE), then its parameters
 * (BAD_PARAM, BAD_INDEX, BAD_RES_STATE, EXCEED_LIM, ...), and changes nothing before every check
 * has passed. Values from the input are bounded before they size or index anything.
 */
#include <algorithm>
#include <cstring>

#include "emu_mlx5.h"
#include "emu_mlx5_cmd_util.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;

namespace {

using cmd::fail;
using cmd::kOk;
using cmd::lengths;

uint16_t op_mod(const uint8_t *in)
{
	return static_cast<uint16_t>(prm::get(in, prm::cmd_hdr_in::op_mod));
}

} // namespace

CmdResult EmuMlx5Device::execute_locked(const uint8_t *in, size_t in_len, uint8_t *out,
					size_t out_len)
{
	const size_t out_room = std::max<size_t>(out_len, prm::cmdq_entry::inline_size);
	std::memset(out, 0, out_room);
	CmdResult r;
	if (in_len < prm::cmd_hdr_in::size) {
		r = fail(prm::status::bad_input_len, Syndrome::input_too_short);
	} else if (prm::get(in, prm::cmd_hdr_in::uid) != 0) {
		r = fail(prm::status::bad_param, Syndrome::bad_uid);
	} else {
		using Handler =
			CmdResult (EmuMlx5Device::*)(const uint8_t *, size_t, uint8_t *, size_t);
		Handler h = nullptr;
		switch (prm::get(in, prm::cmd_hdr_in::opcode)) {
		case prm::opcode::enable_hca:
			h = &EmuMlx5Device::cmd_enable_hca;
			break;
		case prm::opcode::disable_hca:
			h = &EmuMlx5Device::cmd_disable_hca;
			break;
		case prm::opcode::query_issi:
			h = &EmuMlx5Device::cmd_query_issi;
			break;
		case prm::opcode::set_issi:
			h = &EmuMlx5Device::cmd_set_issi;
			break;
		case prm::opcode::query_pages:
			h = &EmuMlx5Device::cmd_query_pages;
			break;
		case prm::opcode::manage_pages:
			h = &EmuMlx5Device::cmd_manage_pages;
			break;
		case prm::opcode::query_hca_cap:
			h = &EmuMlx5Device::cmd_query_hca_cap;
			break;
		case prm::opcode::set_hca_cap:
			h = &EmuMlx5Device::cmd_set_hca_cap;
			break;
		case prm::opcode::init_hca:
			h = &EmuMlx5Device::cmd_init_hca;
			break;
		case prm::opcode::teardown_hca:
			h = &EmuMlx5Device::cmd_teardown_hca;
			break;
		case prm::opcode::alloc_pd:
			h = &EmuMlx5Device::cmd_alloc_pd;
			break;
		case prm::opcode::dealloc_pd:
			h = &EmuMlx5Device::cmd_dealloc_pd;
			break;
		case prm::opcode::create_mkey:
			h = &EmuMlx5Device::cmd_create_mkey;
			break;
		case prm::opcode::query_mkey:
			h = &EmuMlx5Device::cmd_query_mkey;
			break;
		case prm::opcode::destroy_mkey:
			h = &EmuMlx5Device::cmd_destroy_mkey;
			break;
		case prm::opcode::query_special_contexts:
			h = &EmuMlx5Device::cmd_query_special_contexts;
			break;
		case prm::opcode::query_roce_address:
			h = &EmuMlx5Device::cmd_query_roce_address;
			break;
		case prm::opcode::alloc_uar:
			h = &EmuMlx5Device::cmd_alloc_uar;
			break;
		case prm::opcode::dealloc_uar:
			h = &EmuMlx5Device::cmd_dealloc_uar;
			break;
		case prm::opcode::create_eq:
			h = &EmuMlx5Device::cmd_create_eq;
			break;
		case prm::opcode::destroy_eq:
			h = &EmuMlx5Device::cmd_destroy_eq;
			break;
		case prm::opcode::create_cq:
			h = &EmuMlx5Device::cmd_create_cq;
			break;
		case prm::opcode::destroy_cq:
			h = &EmuMlx5Device::cmd_destroy_cq;
			break;
		case prm::opcode::create_qp:
			h = &EmuMlx5Device::cmd_create_qp;
			break;
		case prm::opcode::destroy_qp:
			h = &EmuMlx5Device::cmd_destroy_qp;
			break;
		case prm::opcode::rst2init_qp:
		case prm::opcode::init2rtr_qp:
		case prm::opcode::rtr2rts_qp:
		case prm::opcode::qp_2err:
		case prm::opcode::qp_2rst:
			h = &EmuMlx5Device::cmd_modify_qp;
			break;
		case prm::opcode::query_qp:
			h = &EmuMlx5Device::cmd_query_qp;
			break;
		case prm::opcode::create_srq:
			h = &EmuMlx5Device::cmd_create_srq;
			break;
		case prm::opcode::destroy_srq:
			h = &EmuMlx5Device::cmd_destroy_srq;
			break;
		case prm::opcode::query_srq:
			h = &EmuMlx5Device::cmd_query_srq;
			break;
		case prm::opcode::arm_rq:
			h = &EmuMlx5Device::cmd_arm_rq;
			break;
		case prm::opcode::page_fault_resume:
			h = &EmuMlx5Device::cmd_page_fault_resume;
			break;
		case prm::opcode::access_reg:
			h = &EmuMlx5Device::cmd_access_reg;
			break;
		/* nicmr-only: a model without extensions answers BAD_OP, as a ConnectX does. */
		case prm::opcode::nicmr_set_mkey_ext:
			if (cfg_.ext_flags != 0)
				h = &EmuMlx5Device::cmd_set_mkey_ext;
			break;
		case prm::opcode::nicmr_query_mkey_ext:
			if (cfg_.ext_flags != 0)
				h = &EmuMlx5Device::cmd_query_mkey_ext;
			break;
		default:
			break;
		}
		if (cfg_.fail_opcode != 0 &&
		    prm::get(in, prm::cmd_hdr_in::opcode) == cfg_.fail_opcode)
			r = fail(prm::status::internal_err, Syndrome::injected);
		else if (h == nullptr)
			r = fail(prm::status::bad_op, Syndrome::bad_opcode);
		else
			r = (this->*h)(in, in_len, out, out_len);
	}
	if (r.status != prm::status::ok) {
		/* A failed command returns nothing but its status: no half-written output. */
		std::memset(out, 0, out_room);
		NICMR_LOG(debug, "emu-mlx5", "%s: opcode 0x%x: status 0x%x syndrome 0x%x",
			  cfg_.name.c_str(),
			  in_len >= prm::cmd_hdr_in::size
				  ? static_cast<unsigned>(prm::get(in, prm::cmd_hdr_in::opcode))
				  : 0u,
			  r.status, r.syndrome);
	}
	prm::set(out, prm::cmd_hdr_out::status, r.status);
	prm::set(out, prm::cmd_hdr_out::syndrome, r.syndrome);
	if (trace_ != nullptr)
		trace_->record(decode_command(in, in_len, out, out_len, r.status, r.syndrome));
	return r;
}

uint64_t EmuMlx5Device::pages_required(uint16_t stage) const
{
	uint64_t n = cfg_.boot_pages;
	if (stage >= prm::query_pages_op_mod::init)
		n += cfg_.init_pages;
	if (stage >= prm::query_pages_op_mod::regular && state_ == HcaState::initialized)
		n += static_cast<uint64_t>(int64_t{cfg_.regular_pages} + extra_pages_);
	return n;
}

bool EmuMlx5Device::pages_ready(CmdResult *r)
{
	const uint64_t need = pages_required(prm::query_pages_op_mod::regular);
	if (pages_.size() >= need)
		return true;
	if (pages_refused_) {
		*r = fail(prm::status::no_resources, Syndrome::pages_refused);
		return false;
	}
	*r = fail(prm::status::no_resources, Syndrome::pages_missing);
	/* Firmware asks for what it lacks and holds the command until it comes (or the driver
	 * says it cannot give: MANAGE_PAGES alloc_fail). Without an EQ for page requests, or for
	 * a command not run from the queue, the refusal stands. */
	if (!in_slot_ || !dp_->has_event_eq(prm::event_type::page_request))
		return false;
	stall_ = true;
	const uint64_t have = pages_.size() + requested_;
	if (need > have)
		post_page_request(static_cast<int64_t>(need - have));
	return false;
}

int EmuMlx5Device::post_page_request(int64_t n)
{
	uint8_t eqe[prm::eqe::size] = {};
	prm::set(eqe, prm::eqe_page_req::function_id, cfg_.page_function_id);
	prm::set(eqe, prm::eqe_page_req::num_pages, static_cast<uint32_t>(static_cast<int32_t>(n)));
	const int rc = dp_->post_async(prm::event_type::page_request, eqe + prm::eqe::data_offset);
	if (rc == 0) {
		stats_.page_requests++;
		if (n > 0)
			requested_ += static_cast<uint64_t>(n);
	}
	return rc;
}

int EmuMlx5Device::request_pages(int32_t delta)
{
	std::lock_guard lk(lock_);
	if (delta == 0)
		return -EINVAL;
	/* Returning pages: only pages it holds, and no more than it wanted after INIT_HCA. */
	if (delta < 0 && (pages_.size() < pages_required(prm::query_pages_op_mod::regular) ||
			  int64_t{cfg_.regular_pages} + extra_pages_ + delta < 0))
		return -EINVAL;
	extra_pages_ += delta;
	return post_page_request(delta);
}

void EmuMlx5Device::release_resources()
{
	dp_->clear();
	mkeys_.clear();
	pds_.clear();
	pd_next_ = 1;
	translation_bytes_ = 0;
	/* Nothing waits for pages of an HCA that is gone; its later needs start over. */
	stalled_.clear();
	requested_ = 0;
	extra_pages_ = 0;
	pages_refused_ = false;
}

/* ---- HCA life cycle ---------------------------------------------------------------------- */

CmdResult EmuMlx5Device::cmd_enable_hca(const uint8_t *in, size_t in_len, uint8_t *, size_t out_len)
{
	namespace m = prm::enable_hca_in;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, prm::enable_hca_out::size, &r))
		return r;
	if (prm::get(in, m::function_id) != 0 || prm::get(in, m::embedded_cpu_function) != 0)
		return fail(prm::status::bad_param, Syndrome::bad_function_id);
	if (state_ != HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_already_enabled);
	state_ = HcaState::enabled;
	return kOk;
}

CmdResult EmuMlx5Device::cmd_disable_hca(const uint8_t *in, size_t in_len, uint8_t *,
					 size_t out_len)
{
	namespace m = prm::disable_hca_in;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, prm::disable_hca_out::size, &r))
		return r;
	if (prm::get(in, m::function_id) != 0 || prm::get(in, m::embedded_cpu_function) != 0)
		return fail(prm::status::bad_param, Syndrome::bad_function_id);
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	if (state_ == HcaState::initialized)
		return fail(prm::status::bad_sys_state, Syndrome::hca_already_initialized);
	/* A function reset: the device forgets the pages and the ISSI it was given. */
	state_ = HcaState::reset;
	pages_.clear();
	issi_ = 0;
	return kOk;
}

CmdResult EmuMlx5Device::cmd_init_hca(const uint8_t *, size_t in_len, uint8_t *, size_t out_len)
{
	CmdResult r;
	if (!lengths(in_len, prm::init_hca_in::size, out_len, prm::init_hca_out::size, &r))
		return r;
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	if (state_ == HcaState::initialized)
		return fail(prm::status::bad_sys_state, Syndrome::hca_already_initialized);
	if (pages_.size() < pages_required(prm::query_pages_op_mod::init))
		return fail(prm::status::no_resources, Syndrome::pages_missing);
	state_ = HcaState::initialized;
	return kOk;
}

CmdResult EmuMlx5Device::cmd_teardown_hca(const uint8_t *in, size_t in_len, uint8_t *out,
					  size_t out_len)
{
	namespace m = prm::teardown_hca_in;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, prm::teardown_hca_out::size, &r))
		return r;
	if (state_ != HcaState::initialized)
		return fail(prm::status::bad_sys_state, Syndrome::hca_not_initialized);
	const uint64_t profile = prm::get(in, m::profile);
	if (profile != m::profile_graceful_close && profile != m::profile_force_close)
		return fail(prm::status::bad_param, Syndrome::teardown_profile);
	release_resources();
	state_ = HcaState::enabled;
	prm::set(out, prm::teardown_hca_out::state, 0);
	return kOk;
}

/* ---- ISSI -------------------------------------------------------------------------------- */

CmdResult EmuMlx5Device::cmd_query_issi(const uint8_t *, size_t in_len, uint8_t *out,
					size_t out_len)
{
	CmdResult r;
	if (!lengths(in_len, prm::query_issi_in::size, out_len, prm::query_issi_out::size, &r))
		return r;
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	prm::set(out, prm::query_issi_out::current_issi, issi_);
	prm::set(out, prm::query_issi_out::supported_issi_dw0, 0x3); /* ISSI 0 and 1 */
	return kOk;
}

CmdResult EmuMlx5Device::cmd_set_issi(const uint8_t *in, size_t in_len, uint8_t *, size_t out_len)
{
	CmdResult r;
	if (!lengths(in_len, prm::set_issi_in::size, out_len, prm::set_issi_out::size, &r))
		return r;
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	if (state_ == HcaState::initialized)
		return fail(prm::status::bad_sys_state, Syndrome::hca_already_initialized);
	const uint64_t issi = prm::get(in, prm::set_issi_in::current_issi);
	if (issi > 1)
		return fail(prm::status::bad_param, Syndrome::issi_unsupported);
	issi_ = static_cast<uint16_t>(issi);
	return kOk;
}

/* ---- Pages ------------------------------------------------------------------------------- */

CmdResult EmuMlx5Device::cmd_query_pages(const uint8_t *in, size_t in_len, uint8_t *out,
					 size_t out_len)
{
	namespace m = prm::query_pages_in;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, prm::query_pages_out::size, &r))
		return r;
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	const uint16_t stage = op_mod(in);
	if (stage < prm::query_pages_op_mod::boot || stage > prm::query_pages_op_mod::regular)
		return fail(prm::status::bad_param, Syndrome::bad_op_mod);
	if (prm::get(in, m::function_id) != 0 || prm::get(in, m::embedded_cpu_function) != 0)
		return fail(prm::status::bad_param, Syndrome::bad_function_id);
	/* Signed: negative asks the driver to take pages back. Both terms are below 2^31. */
	const int64_t want =
		static_cast<int64_t>(pages_required(stage)) - static_cast<int64_t>(pages_.size());
	prm::set(out, prm::query_pages_out::function_id, cfg_.page_function_id);
	prm::set(out, prm::query_pages_out::num_pages,
		 static_cast<uint32_t>(static_cast<int32_t>(want)));
	return kOk;
}

CmdResult EmuMlx5Device::cmd_manage_pages(const uint8_t *in, size_t in_len, uint8_t *out,
					  size_t out_len)
{
	namespace m = prm::manage_pages_in;
	namespace o = prm::manage_pages_out;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, o::size, &r))
		return r;
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	/* The function the pages are for: the one QUERY_PAGES and PAGE_REQUEST named. */
	if (prm::get(in, m::function_id) != cfg_.page_function_id ||
	    prm::get(in, m::embedded_cpu_function) != 0)
		return fail(prm::status::bad_param, Syndrome::bad_function_id);
	const uint64_t n = prm::get(in, m::input_num_entries);
	switch (op_mod(in)) {
	case prm::manage_pages_op_mod::alloc_fail:
		/* The driver could not find the pages: commands waiting for them fail. */
		requested_ = 0;
		if (!stalled_.empty()) {
			pages_refused_ = true;
			pages_changed_ = true;
		}
		return kOk;
	case prm::manage_pages_op_mod::give: {
		if (n > (in_len - m::pas_offset) / m::pas_entry_size)
			return fail(prm::status::bad_input_len, Syndrome::input_too_short);
		if (pages_.size() + n > cfg_.max_pages)
			return fail(prm::status::exceed_lim, Syndrome::page_limit);
		std::unordered_set<uint64_t> batch;
		batch.reserve(n);
		for (uint64_t i = 0; i < n; i++) {
			const uint64_t pa = prm::get(in + m::pas_offset + i * m::pas_entry_size,
						     prm::pas_entry);
			if (pa % prm::device_page_size != 0)
				return fail(prm::status::bad_param, Syndrome::page_unaligned);
			if (pages_.count(pa) != 0 || !batch.insert(pa).second)
				return fail(prm::status::bad_param, Syndrome::page_duplicate);
			/* The device will keep its own data there: the page must be reachable. */
			if (!fn_.iommu().pin(pa, prm::device_page_size))
				return fail(prm::status::internal_err, Syndrome::dma_fault);
		}
		pages_.merge(batch);
		requested_ -= std::min<uint64_t>(requested_, n);
		pages_changed_ = !stalled_.empty();
		return kOk;
	}
	case prm::manage_pages_op_mod::take: {
		/* Pages the device can spare: all but what its current stage needs. */
		const uint64_t keep = state_ == HcaState::initialized
					      ? pages_required(prm::query_pages_op_mod::regular)
					      : 0;
		const uint64_t spare = pages_.size() > keep ? pages_.size() - keep : 0;
		const uint64_t room = (out_len - o::pas_offset) / o::pas_entry_size;
		const uint64_t give_back = std::min({n, spare, room});
		uint64_t i = 0;
		for (auto it = pages_.begin(); i < give_back;) {
			prm::set(out + o::pas_offset + i * o::pas_entry_size, prm::pas_entry, *it);
			it = pages_.erase(it);
			i++;
		}
		prm::set(out, o::output_num_entries, give_back);
		return kOk;
	}
	default:
		return fail(prm::status::bad_param, Syndrome::bad_op_mod);
	}
}

/* ---- Capabilities ------------------------------------------------------------------------ */

CmdResult EmuMlx5Device::cmd_query_hca_cap(const uint8_t *in, size_t in_len, uint8_t *out,
					   size_t out_len)
{
	namespace m = prm::query_hca_cap_in;
	namespace o = prm::query_hca_cap_out;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, o::size, &r))
		return r;
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	if (prm::get(in, m::other_function) != 0 || prm::get(in, m::function_id) != 0)
		return fail(prm::status::bad_param, Syndrome::bad_function_id);
	const uint16_t type = prm::cap_op_mod_type(op_mod(in));
	const bool current = prm::cap_op_mod_mode(op_mod(in)) == prm::cap_mode::current;
	const std::array<uint8_t, 4096> *caps = nullptr;
	if (type == prm::cap_type::general)
		caps = current ? &caps_general_cur_ : &caps_general_max_;
	else if (type == prm::cap_type::atomic)
		caps = current ? &caps_atomic_cur_ : &caps_atomic_max_;
	else if (type == prm::cap_type::roce && cfg_.roce)
		caps = current ? &caps_roce_cur_ : &caps_roce_max_;
	else if (type == prm::cap_type::nicmr_ext && cfg_.ext_flags != 0) {
		/* nicmr's extensions: one flags word, the same maximum and current. */
		static_assert(o::capability_size >= prm::ext_cap::size);
		prm::set(out + o::capability_offset, prm::ext_cap::flags, cfg_.ext_flags);
		return kOk;
	} else /* a ConnectX refuses cap_type::nicmr_ext: so does a model without extensions */
		return fail(prm::status::bad_param, Syndrome::cap_type_unsupported);
	static_assert(o::capability_size == 4096);
	std::memcpy(out + o::capability_offset, caps->data(), o::capability_size);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_set_hca_cap(const uint8_t *in, size_t in_len, uint8_t *,
					 size_t out_len)
{
	namespace m = prm::set_hca_cap_in;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, prm::set_hca_cap_out::size, &r))
		return r;
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	if (state_ == HcaState::initialized)
		return fail(prm::status::bad_sys_state, Syndrome::hca_already_initialized);
	if (prm::get(in, m::other_function) != 0 || prm::get(in, m::function_id) != 0)
		return fail(prm::status::bad_param, Syndrome::bad_function_id);
	const uint8_t *cap = in + m::capability_offset;
	const uint16_t type = prm::cap_op_mod_type(op_mod(in));
	/* Like firmware, only the settable fields are taken; the rest of the area is ignored
	 * (drivers echo the whole current area back). A value above the maximum is refused. */
	if (type == prm::cap_type::general) {
		namespace hc = prm::hca_cap;
		static constexpr prm::Field settable[] = {hc::mkey_by_name, hc::cmdif_checksum,
							  hc::log_max_qp,
							  prm::hca_cap_setup::log_uar_page_sz};
		for (const auto &f : settable)
			if (prm::get(cap, f) > prm::get(caps_general_max_.data(), f))
				return fail(prm::status::bad_param, Syndrome::cap_exceeds_max);
		for (const auto &f : settable)
			prm::set(caps_general_cur_.data(), f, prm::get(cap, f));
		return kOk;
	}
	if (type == prm::cap_type::atomic) {
		/* atomic_req_8B_endianness_mode is the one settable field: 0 big-endian, 1 host
		 * endianness, which only a device reporting supported_..._mode_1 accepts (Linux
		 * main.c, handle_hca_cap_atomic, asks for 1 only then). Any other value is above
		 * what the device can do. The data path reads the mode at every atomic. */
		namespace ac = prm::atomic_cap;
		const uint64_t mode = prm::get(cap, ac::atomic_req_8B_endianness_mode);
		const bool host_ok = prm::get(caps_atomic_max_.data(),
					      ac::supported_atomic_req_8B_endianness_mode_1);
		if (mode > prm::atomic_req_mode::host_endianness ||
		    (mode == prm::atomic_req_mode::host_endianness && !host_ok))
			return fail(prm::status::bad_param, Syndrome::cap_exceeds_max);
		prm::set(caps_atomic_cur_.data(), ac::atomic_req_8B_endianness_mode, mode);
		dp_->set_atomic_host_endianness(mode == prm::atomic_req_mode::host_endianness);
		return kOk;
	}
	if (type == prm::cap_type::roce && cfg_.roce) {
		/* sw_r_roce_src_udp_port is the one settable RoCE field. */
		namespace rc = prm::roce_cap;
		const uint64_t v = prm::get(cap, rc::sw_r_roce_src_udp_port);
		if (v > prm::get(caps_roce_max_.data(), rc::sw_r_roce_src_udp_port))
			return fail(prm::status::bad_param, Syndrome::cap_exceeds_max);
		prm::set(caps_roce_cur_.data(), rc::sw_r_roce_src_udp_port, v);
		return kOk;
	}
	return fail(prm::status::bad_param, Syndrome::cap_type_unsupported);
}

/* ---- Protection domains ------------------------------------------------------------------ */

CmdResult EmuMlx5Device::cmd_alloc_pd(const uint8_t *, size_t in_len, uint8_t *out, size_t out_len)
{
	CmdResult r;
	if (!lengths(in_len, prm::alloc_pd_in::size, out_len, prm::alloc_pd_out::size, &r))
		return r;
	if (state_ != HcaState::initialized)
		return fail(prm::status::bad_sys_state, Syndrome::hca_not_initialized);
	if (!pages_ready(&r))
		return r;
	const uint32_t cap = uint32_t{1} << cfg_.log_max_pd;
	if (pds_.size() >= cap - 1)
		return fail(prm::status::exceed_lim, Syndrome::pd_table_full);
	uint32_t pd = pd_next_;
	while (pds_.count(pd) != 0)
		pd = pd + 1 < cap ? pd + 1 : 1;
	pd_next_ = pd + 1 < cap ? pd + 1 : 1;
	pds_.emplace(pd, Pd{});
	prm::set(out, prm::alloc_pd_out::pd, pd);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_dealloc_pd(const uint8_t *in, size_t in_len, uint8_t *, size_t out_len)
{
	CmdResult r;
	if (!lengths(in_len, prm::dealloc_pd_in::size, out_len, prm::dealloc_pd_out::size, &r))
		return r;
	if (state_ != HcaState::initialized)
		return fail(prm::status::bad_sys_state, Syndrome::hca_not_initialized);
	const uint64_t pd = prm::get(in, prm::dealloc_pd_in::pd);
	if (pd == 0 || pd >= (uint64_t{1} << cfg_.log_max_pd))
		return fail(prm::status::bad_index, Syndrome::pd_out_of_range);
	auto it = pds_.find(static_cast<uint32_t>(pd));
	if (it == pds_.end())
		return fail(prm::status::bad_res_state, Syndrome::pd_not_allocated);
	if (it->second.mkeys != 0 || dp_->pd_in_use(static_cast<uint32_t>(pd)))
		return fail(prm::status::resource_busy, Syndrome::pd_in_use);
	pds_.erase(it);
	return kOk;
}

/* ---- Memory keys ------------------------------------------------------------------------- */

CmdResult EmuMlx5Device::cmd_create_mkey(const uint8_t *in, size_t in_len, uint8_t *out,
					 size_t out_len)
{
	namespace m = prm::create_mkey_in;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, prm::create_mkey_out::size, &r))
		return r;
	if (state_ != HcaState::initialized)
		return fail(prm::status::bad_sys_state, Syndrome::hca_not_initialized);
	if (!pages_ready(&r))
		return r;
	const uint8_t *mkc = in + m::mkc_offset;
	if (prm::get(in, m::mkey_umem_valid) != 0)
		return fail(prm::status::bad_param, Syndrome::mkey_umem);
	const uint32_t mode = prm::get_access_mode(mkc);
	if (mode != prm::access_mode::mtt && mode != prm::access_mode::klm)
		return fail(prm::status::bad_param, Syndrome::mkey_access_mode);
	const uint64_t lps = prm::get(mkc, prm::mkc::log_page_size);
	if (mode == prm::access_mode::mtt && (lps < 12 || lps > 30))
		return fail(prm::status::bad_param, Syndrome::mkey_page_size);

	/* Translations: size is the mkey's capacity (UMR may fill it later), actual what this
	 * command carries. Both are 32-bit; the limit keeps every product below 2^40. */
	const uint64_t size = prm::get(mkc, prm::mkc::translations_octword_size);
	const uint64_t actual = prm::get(in, m::translations_octword_actual_size);
	const uint64_t per_oct = mode == prm::access_mode::mtt ? 2 : 1;
	if (size * per_oct > (uint64_t{1} << cfg_.log_max_klm_list_size))
		return fail(prm::status::exceed_lim, Syndrome::mkey_translations_limit);
	if (actual > size)
		return fail(prm::status::bad_param, Syndrome::mkey_translations);
	if (in_len - m::translations_offset < actual * 16)
		return fail(prm::status::bad_input_len, Syndrome::input_too_short);

	const uint64_t pd = prm::get(mkc, prm::mkc::pd);
	auto pd_it = pds_.find(static_cast<uint32_t>(pd));
	if (pd >= (uint64_t{1} << cfg_.log_max_pd) || pd_it == pds_.end())
		return fail(prm::status::bad_res_state, Syndrome::pd_not_allocated);

	/* A live mkey with MTTs must cover its range (free ones get theirs by UMR later). */
	if (mode == prm::access_mode::mtt && actual != 0 && prm::get(mkc, prm::mkc::free) == 0 &&
	    prm::get(mkc, prm::mkc::length64) == 0) {
		const uint64_t page = uint64_t{1} << lps;
		const uint64_t first = prm::get(mkc, prm::mkc::start_addr) & (page - 1);
		const uint64_t len = prm::get(mkc, prm::mkc::len);
		const uint64_t covered = actual * 2 * page; /* below 2^61 */
		if (len > covered || first > covered - len)
			return fail(prm::status::bad_param, Syndrome::mkey_range);
	}

	const uint64_t want = prm::get(in, m::input_mkey_index);
	if (want != 0) {
		if (prm::get(caps_general_cur_.data(), prm::hca_cap::mkey_by_name) == 0)
			return fail(prm::status::bad_param, Syndrome::mkey_by_name_disabled);
		if (want >= mkeys_.capacity())
			return fail(prm::status::bad_index, Syndrome::mkey_index_out_of_range);
	}
	const uint64_t bytes = size * 16;
	if (translation_bytes_ + bytes > cfg_.translation_budget)
		return fail(prm::status::exceed_lim, Syndrome::mkey_budget);

	MkeyEntry e;
	std::memcpy(e.mkc.data(), mkc, prm::mkc::size);
	e.pg_access = prm::get(in, m::pg_access) != 0;
	e.access_mode = mode;
	e.owner_pd = static_cast<uint32_t>(pd);
	/* Zero, and untouched (LazyZeroAlloc). */
	e.translations.resize(bytes);
	if (actual != 0) /* an empty vector has no data() to copy into */
		std::memcpy(e.translations.data(), in + m::translations_offset, actual * 16);
	uint32_t index = 0;
	int rc = mkeys_.create(static_cast<uint32_t>(want), std::move(e), &index);
	if (rc == -EBUSY)
		return fail(prm::status::bad_res_state, Syndrome::mkey_index_in_use);
	if (rc == -ENOSPC)
		return fail(prm::status::exceed_lim, Syndrome::mkey_table_full);
	if (rc < 0)
		return fail(prm::status::bad_index, Syndrome::mkey_index_out_of_range);
	pd_it->second.mkeys++;
	translation_bytes_ += bytes;
	prm::set(out, prm::create_mkey_out::mkey_index, index);
	return kOk;
}

bool EmuMlx5Device::mkey_arg(size_t in_len, size_t in_min, size_t out_len, size_t out_min,
			     const uint8_t *in, prm::Field index_field, uint32_t *index,
			     CmdResult *r)
{
	if (!lengths(in_len, in_min, out_len, out_min, r))
		return false;
	if (state_ != HcaState::initialized) {
		*r = fail(prm::status::bad_sys_state, Syndrome::hca_not_initialized);
		return false;
	}
	const uint64_t i = prm::get(in, index_field);
	if (i == 0 || i >= mkeys_.capacity()) {
		*r = fail(prm::status::bad_index, Syndrome::mkey_index_out_of_range);
		return false;
	}
	*index = static_cast<uint32_t>(i);
	return true;
}

CmdResult EmuMlx5Device::cmd_query_mkey(const uint8_t *in, size_t in_len, uint8_t *out,
					size_t out_len)
{
	namespace o = prm::query_mkey_out;
	CmdResult r;
	uint32_t index = 0;
	if (!mkey_arg(in_len, prm::query_mkey_in::size, out_len, o::size, in,
		      prm::query_mkey_in::mkey_index, &index, &r))
		return r;
	/* As many translation entries as the output has room for, whole octwords only. */
	const size_t room = (out_len - o::translations_offset) / 16 * 16;
	int rc = mkeys_.with(index, [&](const MkeyEntry &e) {
		std::memcpy(out + o::mkc_offset, e.mkc.data(), prm::mkc::size);
		if (const size_t n = std::min(room, e.translations.size()); n != 0)
			std::memcpy(out + o::translations_offset, e.translations.data(), n);
	});
	if (rc < 0)
		return fail(prm::status::bad_res_state, Syndrome::mkey_not_found);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_destroy_mkey(const uint8_t *in, size_t in_len, uint8_t *,
					  size_t out_len)
{
	CmdResult r;
	uint32_t index = 0;
	if (!mkey_arg(in_len, prm::destroy_mkey_in::size, out_len, prm::destroy_mkey_out::size, in,
		      prm::destroy_mkey_in::mkey_index, &index, &r))
		return r;
	MkeyEntry old;
	if (mkeys_.destroy(index, &old) < 0)
		return fail(prm::status::bad_res_state, Syndrome::mkey_not_found);
	auto it = pds_.find(old.owner_pd);
	if (it != pds_.end() && it->second.mkeys > 0)
		it->second.mkeys--;
	translation_bytes_ -= std::min<uint64_t>(translation_bytes_, old.translations.size());
	return kOk;
}

/* The special mkeys (Linux mlx5_ifc.h, query_special_contexts_out): the reserved lkey only;
 * dump_fill, null, terminate_scatter_list and repeated mkeys are not offered (their caps are 0)
 * and read 0. Any time after ENABLE_HCA, as mlx5_core asks with the other caps. */
CmdResult EmuMlx5Device::cmd_query_special_contexts(const uint8_t *in, size_t in_len, uint8_t *out,
						    size_t out_len)
{
	(void)in;
	CmdResult r;
	if (!lengths(in_len, prm::query_special_contexts_in::size, out_len,
		     prm::query_special_contexts_out::size, &r))
		return r;
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	prm::set(out, prm::query_special_contexts_out::resd_lkey, cfg_.resd_lkey);
	return kOk;
}

/*
 * One entry of a port's GID table (Linux mlx5_ifc.h query_roce_address; what mlx5_core's
 * mlx5dr_cmd_query_gid reads). The model's table comes from the device spec: entry 0 of a port
 * on the UDP wire is its address as a RoCEv2 GID (IPv4-mapped for IPv4, l3 type and version
 * from mlx5dv.h); every other entry, and every entry of a loopback port, is empty (zeros).
 */
CmdResult EmuMlx5Device::cmd_query_roce_address(const uint8_t *in, size_t in_len, uint8_t *out,
						size_t out_len)
{
	namespace m = prm::query_roce_address_in;
	namespace l = prm::roce_addr_layout;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, prm::query_roce_address_out::size, &r))
		return r;
	if (state_ != HcaState::initialized)
		return fail(prm::status::bad_sys_state, Syndrome::hca_not_initialized);
	const auto port = static_cast<uint32_t>(prm::get(in, m::vhca_port_num));
	const auto index = static_cast<uint32_t>(prm::get(in, m::roce_address_index));
	if (port < 1 || port > cfg_.ports)
		return fail(prm::status::bad_param, Syndrome::roce_address_port);
	if (index >= (cfg_.roce ? cfg_.roce_address_table_size : 0))
		return fail(prm::status::bad_param, Syndrome::roce_address_index);
	const WirePort *w = dp_->wire_port(port);
	if (w != nullptr && index == 0) {
		uint8_t *a = out + prm::query_roce_address_out::roce_address_offset;
		std::memcpy(a + l::source_l3_address_offset, w->gid().data(), w->gid().size());
		prm::set(a, l::roce_l3_type, w->ipv6() ? l::l3_type_ipv6 : l::l3_type_ipv4);
		prm::set(a, l::roce_version, l::version_2);
	}
	return kOk;
}

/* ---- nicmr extensions (doc/device-model.md, "Extensions"; never on a ConnectX) ---------- */

CmdResult EmuMlx5Device::cmd_set_mkey_ext(const uint8_t *in, size_t in_len, uint8_t *,
					  size_t out_len)
{
	namespace m = prm::set_mkey_ext_in;
	CmdResult r;
	uint32_t index = 0;
	if (!mkey_arg(in_len, m::size, out_len, prm::set_mkey_ext_out::size, in, m::mkey_index,
		      &index, &r))
		return r;
	const auto flags = static_cast<uint32_t>(prm::get(in, m::flags));
	const uint64_t counter = prm::get(in, m::counter_iova);
	/* Only the features the capability offers. */
	uint32_t allowed = 0;
	if (cfg_.ext_flags & prm::ext_cap::single_use)
		allowed |= prm::mkey_ext::single_use;
	if (cfg_.ext_flags & prm::ext_cap::rma_event)
		allowed |= prm::mkey_ext::disabled | prm::mkey_ext::counter;
	if ((flags & ~allowed) != 0)
		return fail(prm::status::bad_param, Syndrome::ext_flags);
	if ((flags & prm::mkey_ext::counter) != 0) {
		/* The counter must be device-reachable now (it may still be unmapped later: an
		 * increment that faults then is a counted DMA fault, the write completes). */
		DmaSection dma(fn_.iommu());
		if (counter % 8 != 0 || !dma.mapped(counter, 8))
			return fail(prm::status::bad_param, Syndrome::ext_counter);
	}
	const int rc = mkeys_.update(index, [&](MkeyEntry *e) {
		if (e == nullptr)
			return -ENOENT;
		if (prm::get(e->mkc.data(), prm::mkc::free) != 0)
			return -EBUSY;
		/* The slot is held exclusive: no WQE uses the key while its state changes. */
		e->ext.flags = flags;
		e->ext.counter_iova = (flags & prm::mkey_ext::counter) != 0 ? counter : 0;
		return 0;
	});
	if (rc == -ENOENT)
		return fail(prm::status::bad_res_state, Syndrome::mkey_not_found);
	if (rc == -EBUSY)
		return fail(prm::status::bad_res_state, Syndrome::ext_mkey_free);
	return kOk;
}

CmdResult EmuMlx5Device::cmd_query_mkey_ext(const uint8_t *in, size_t in_len, uint8_t *out,
					    size_t out_len)
{
	namespace o = prm::query_mkey_ext_out;
	CmdResult r;
	uint32_t index = 0;
	if (!mkey_arg(in_len, prm::query_mkey_ext_in::size, out_len, o::size, in,
		      prm::query_mkey_ext_in::mkey_index, &index, &r))
		return r;
	const int rc = mkeys_.with(index, [&](const MkeyEntry &e) {
		uint32_t f = e.ext.flags;
		/* Relaxed: a snapshot for the driver; the claim itself is ordered by the slot. */
		if (e.ext.spent.v.load(std::memory_order_relaxed) != 0)
			f |= prm::mkey_ext::spent;
		prm::set(out, o::flags, f);
		prm::set(out, o::counter_iova, e.ext.counter_iova);
	});
	if (rc < 0)
		return fail(prm::status::bad_res_state, Syndrome::mkey_not_found);
	return kOk;
}

/* ---- Registers ---------------------------------------------------------------------------- */

/*
 * ACCESS_REG of two registers. HOST_ENDIANNESS (0x7004), which rdma-core's
 * mlx5_vfio_set_hca_ctrl and Linux's set_hca_ctrl write after the boot pages: the model keeps
 * the he byte (a little-endian host writes 0, the power-on value, so a driver that skips it
 * is not refused: there is nothing a ConnectX would refuse). PMTU (0x5003), read only (Linux's
 * mlx5_query_port_oper_mtu reads it; setting a port's MTU is not modelled: a write is
 * BAD_PARAM): a wire port's MTU is its interface's (the netdev MTU of the address it is bound
 * to, doc/device-model.md "Port MTU") plus reg_pmtu::l2_overhead, at most kPortMaxMtu; a port on
 * the in-process loopback has kPortMaxMtu. Other registers: BAD_PARAM.
 */
CmdResult EmuMlx5Device::cmd_access_reg(const uint8_t *in, size_t in_len, uint8_t *out,
					size_t out_len)
{
	namespace m = prm::access_register_in;
	namespace o = prm::access_register_out;
	CmdResult r;
	if (!lengths(in_len, m::size, out_len, o::size, &r))
		return r;
	if (state_ == HcaState::reset)
		return fail(prm::status::bad_sys_state, Syndrome::hca_disabled);
	const uint16_t mod = op_mod(in);
	if (mod != prm::access_register_op_mod::write && mod != prm::access_register_op_mod::read)
		return fail(prm::status::bad_param, Syndrome::bad_op_mod);
	if (prm::get(in, m::register_id) == prm::reg_id::pmtu)
		return access_pmtu(mod, in, in_len, out, out_len);
	if (prm::get(in, m::register_id) != prm::reg_id::host_endianness)
		return fail(prm::status::bad_param, Syndrome::reg_unsupported);
	namespace he = prm::reg_host_endianness;
	if (mod == prm::access_register_op_mod::write) {
		if (in_len < m::data_offset + he::size)
			return fail(prm::status::bad_input_len, Syndrome::reg_data_short);
		host_endianness_ = static_cast<int>(prm::get(in + m::data_offset, he::he));
		return kOk;
	}
	if (out_len < o::data_offset + he::size)
		return fail(prm::status::bad_output_len, Syndrome::reg_data_short);
	prm::set(out + o::data_offset, he::he, host_endianness_ < 0 ? 0 : host_endianness_);
	return kOk;
}

CmdResult EmuMlx5Device::access_pmtu(uint16_t mod, const uint8_t *in, size_t in_len, uint8_t *out,
				     size_t out_len)
{
	namespace m = prm::access_register_in;
	namespace o = prm::access_register_out;
	namespace pm = prm::reg_pmtu;
	if (mod != prm::access_register_op_mod::read)
		return fail(prm::status::bad_param, Syndrome::reg_unsupported);
	if (in_len < m::data_offset + pm::size)
		return fail(prm::status::bad_input_len, Syndrome::reg_data_short);
	if (out_len < o::data_offset + pm::size)
		return fail(prm::status::bad_output_len, Syndrome::reg_data_short);
	const auto port = static_cast<uint32_t>(prm::get(in + m::data_offset, pm::local_port));
	if (port < 1 || port > cfg_.ports)
		return fail(prm::status::bad_param, Syndrome::pmtu_port);
	uint32_t mtu = kPortMaxMtu;
	if (const WirePort *w = dp_->wire_port(port); w != nullptr && w->link_mtu() != 0)
		mtu = std::min<uint32_t>(kPortMaxMtu, w->link_mtu() + pm::l2_overhead);
	uint8_t *d = out + o::data_offset;
	prm::set(d, pm::local_port, port);
	prm::set(d, pm::max_mtu, kPortMaxMtu);
	prm::set(d, pm::admin_mtu, mtu);
	prm::set(d, pm::oper_mtu, mtu);
	return kOk;
}

/* ---- Invariants -------------------------------------------------------------------------- */

bool EmuMlx5Device::check_invariants() const
{
	std::lock_guard lk(lock_);
	if (pages_.size() > cfg_.max_pages)
		return false;
	if (state_ != HcaState::initialized &&
	    (!pds_.empty() || mkeys_.live() != 0 || dp_->qps() != 0 || dp_->cqs() != 0))
		return false;
	if (!dp_->check_invariants())
		return false;
	if (pds_.size() >= (size_t{1} << cfg_.log_max_pd))
		return false;
	std::unordered_map<uint32_t, uint32_t> refs;
	uint64_t bytes = 0;
	bool ok = true;
	mkeys_.for_each([&](uint32_t idx, const MkeyEntry &e) {
		if (idx == 0 || idx >= mkeys_.capacity())
			ok = false;
		refs[e.owner_pd]++;
		bytes += e.translations.size();
	});
	if (!ok || bytes != translation_bytes_ || bytes > cfg_.translation_budget)
		return false;
	for (const auto &[pd, n] : refs) {
		auto it = pds_.find(pd);
		if (it == pds_.end() || it->second.mkeys != n)
			return false;
	}
	for (const auto &[pd, p] : pds_)
		if (p.mkeys != 0 && refs.count(pd) == 0)
			return false;
	return true;
}

} // namespace nicmr::emu
