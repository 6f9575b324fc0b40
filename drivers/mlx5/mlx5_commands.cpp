/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Command encoders: every byte goes through the layout table (mlx5_prm.h).
 */
#include <cerrno>
#include <cstring>
#include <new>

#include "mlx5_commands.h"

namespace nicmr::mlx5 {
namespace {

/* A zeroed command buffer with its header filled in. */
template <size_t N> struct Cmd {
	uint8_t b[N] = {};
	Cmd(uint16_t opcode, uint16_t op_mod = 0) noexcept
	{
		prm::set(b, prm::cmd_hdr_in::opcode, opcode);
		prm::set(b, prm::cmd_hdr_in::op_mod, op_mod);
	}
};

template <size_t IN, size_t OUT>
int simple(CmdTransport &t, Cmd<IN> &in, uint8_t (&out)[OUT]) noexcept
{
	std::memset(out, 0, OUT);
	return t.exec(in.b, IN, out, OUT);
}

} // namespace

void encode_mkc(const MkeyContext &c, void *m) noexcept
{
	std::memset(m, 0, prm::mkc::size);
	prm::set(m, prm::mkc::free, c.free);
	prm::set(m, prm::mkc::umr_en, c.umr_en);
	prm::set(m, prm::mkc::lr, c.lr);
	prm::set(m, prm::mkc::lw, c.lw);
	prm::set(m, prm::mkc::rr, c.rr);
	prm::set(m, prm::mkc::rw, c.rw);
	prm::set(m, prm::mkc::a, c.a);
	prm::set_access_mode(m, c.access_mode);
	prm::set(m, prm::mkc::qpn, c.qpn);
	prm::set(m, prm::mkc::mkey_7_0, c.variant);
	prm::set(m, prm::mkc::length64, c.length64);
	prm::set(m, prm::mkc::en_rinval, c.en_rinval);
	prm::set(m, prm::mkc::pd, c.pd);
	prm::set(m, prm::mkc::start_addr, c.start_addr);
	prm::set(m, prm::mkc::len, c.len);
	prm::set(m, prm::mkc::translations_octword_size, c.translations_octword_size);
	prm::set(m, prm::mkc::log_page_size, c.log_page_size);
}

MkeyContext decode_mkc(const void *m) noexcept
{
	MkeyContext c;
	c.free = prm::get(m, prm::mkc::free) != 0;
	c.umr_en = prm::get(m, prm::mkc::umr_en) != 0;
	c.lr = prm::get(m, prm::mkc::lr) != 0;
	c.lw = prm::get(m, prm::mkc::lw) != 0;
	c.rr = prm::get(m, prm::mkc::rr) != 0;
	c.rw = prm::get(m, prm::mkc::rw) != 0;
	c.a = prm::get(m, prm::mkc::a) != 0;
	c.access_mode = prm::get_access_mode(m);
	c.qpn = static_cast<uint32_t>(prm::get(m, prm::mkc::qpn));
	c.variant = static_cast<uint8_t>(prm::get(m, prm::mkc::mkey_7_0));
	c.length64 = prm::get(m, prm::mkc::length64) != 0;
	c.en_rinval = prm::get(m, prm::mkc::en_rinval) != 0;
	c.pd = static_cast<uint32_t>(prm::get(m, prm::mkc::pd));
	c.start_addr = prm::get(m, prm::mkc::start_addr);
	c.len = prm::get(m, prm::mkc::len);
	c.translations_octword_size =
		static_cast<uint32_t>(prm::get(m, prm::mkc::translations_octword_size));
	c.log_page_size = static_cast<uint32_t>(prm::get(m, prm::mkc::log_page_size));
	return c;
}

int encode_create_mkey(const MkeyCreate &c, std::vector<uint8_t> *in)
{
	if (in == nullptr || (!c.mtt.empty() && !c.klm.empty()) ||
	    (!c.mtt.empty() && c.ctx.access_mode != prm::access_mode::mtt) ||
	    (!c.klm.empty() && c.ctx.access_mode != prm::access_mode::klm) ||
	    !prm::fits(prm::mkc::log_page_size, c.ctx.log_page_size) ||
	    !prm::fits(prm::create_mkey_in::input_mkey_index, c.index) ||
	    !prm::fits(prm::mkc::pd, c.ctx.pd) || !prm::fits(prm::mkc::qpn, c.ctx.qpn) ||
	    c.ctx.access_mode > prm::access_mode::max)
		return -EINVAL;
	const uint64_t octwords =
		!c.klm.empty() ? prm::klm_octwords(c.klm.size()) : prm::mtt_octwords(c.mtt.size());
	/* Translations fill whole octwords: an odd MTT count leaves 8 zero bytes. */
	const size_t total = prm::create_mkey_in::translations_offset + octwords * 16;
	if (octwords > UINT32_MAX || total > CmdTransport::max_message)
		return -EINVAL;
	try {
		in->assign(total, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	uint8_t *b = in->data();
	prm::set(b, prm::cmd_hdr_in::opcode, prm::opcode::create_mkey);
	prm::set(b, prm::create_mkey_in::pg_access, c.pg_access);
	prm::set(b, prm::create_mkey_in::input_mkey_index, c.index);
	MkeyContext ctx = c.ctx;
	if (ctx.translations_octword_size == 0)
		ctx.translations_octword_size = static_cast<uint32_t>(octwords);
	encode_mkc(ctx, b + prm::create_mkey_in::mkc_offset);
	prm::set(b, prm::create_mkey_in::translations_octword_actual_size, octwords);
	uint8_t *e = b + prm::create_mkey_in::translations_offset;
	for (const auto &m : c.mtt) {
		prm::set(e, prm::mtt::address, m.iova);
		prm::set(e, prm::mtt::rd_en, m.rd_en);
		prm::set(e, prm::mtt::wr_en, m.wr_en);
		e += prm::mtt::size;
	}
	for (const auto &k : c.klm) {
		prm::set(e, prm::klm::byte_count, k.byte_count);
		prm::set(e, prm::klm::mkey, k.mkey);
		prm::set(e, prm::klm::address, k.address);
		e += prm::klm::size;
	}
	return 0;
}

int enable_hca(CmdTransport &t)
{
	Cmd<prm::enable_hca_in::size> in(prm::opcode::enable_hca);
	uint8_t out[prm::enable_hca_out::size];
	return simple(t, in, out);
}

int disable_hca(CmdTransport &t)
{
	Cmd<prm::disable_hca_in::size> in(prm::opcode::disable_hca);
	uint8_t out[prm::disable_hca_out::size];
	return simple(t, in, out);
}

int init_hca(CmdTransport &t)
{
	Cmd<prm::init_hca_in::size> in(prm::opcode::init_hca);
	uint8_t out[prm::init_hca_out::size];
	return simple(t, in, out);
}

int teardown_hca(CmdTransport &t, uint16_t profile)
{
	Cmd<prm::teardown_hca_in::size> in(prm::opcode::teardown_hca);
	prm::set(in.b, prm::teardown_hca_in::profile, profile);
	uint8_t out[prm::teardown_hca_out::size];
	return simple(t, in, out);
}

int query_issi(CmdTransport &t, uint16_t *current, uint32_t *supported_dw0)
{
	Cmd<prm::query_issi_in::size> in(prm::opcode::query_issi);
	uint8_t out[prm::query_issi_out::size];
	int rc = simple(t, in, out);
	if (rc != 0)
		return rc;
	if (current != nullptr)
		*current = static_cast<uint16_t>(prm::get(out, prm::query_issi_out::current_issi));
	if (supported_dw0 != nullptr)
		*supported_dw0 = static_cast<uint32_t>(
			prm::get(out, prm::query_issi_out::supported_issi_dw0));
	return 0;
}

int set_issi(CmdTransport &t, uint16_t issi)
{
	Cmd<prm::set_issi_in::size> in(prm::opcode::set_issi);
	prm::set(in.b, prm::set_issi_in::current_issi, issi);
	uint8_t out[prm::set_issi_out::size];
	return simple(t, in, out);
}

int query_pages(CmdTransport &t, uint16_t op_mod, int32_t *num_pages, uint16_t *function_id)
{
	Cmd<prm::query_pages_in::size> in(prm::opcode::query_pages, op_mod);
	uint8_t out[prm::query_pages_out::size];
	int rc = simple(t, in, out);
	if (rc == 0 && num_pages != nullptr)
		*num_pages = static_cast<int32_t>(
			static_cast<uint32_t>(prm::get(out, prm::query_pages_out::num_pages)));
	if (rc == 0 && function_id != nullptr)
		*function_id =
			static_cast<uint16_t>(prm::get(out, prm::query_pages_out::function_id));
	return rc;
}

int manage_pages_cant_give(CmdTransport &t, uint16_t function_id)
{
	Cmd<prm::manage_pages_in::size> in(prm::opcode::manage_pages,
					   prm::manage_pages_op_mod::alloc_fail);
	prm::set(in.b, prm::manage_pages_in::function_id, function_id);
	uint8_t out[prm::manage_pages_out::size];
	return simple(t, in, out);
}

int set_host_endianness(CmdTransport &t)
{
	namespace m = prm::access_register_in;
	namespace he = prm::reg_host_endianness;
	uint8_t in[m::size + he::size] = {};
	prm::set(in, prm::cmd_hdr_in::opcode, prm::opcode::access_reg);
	prm::set(in, prm::cmd_hdr_in::op_mod, prm::access_register_op_mod::write);
	prm::set(in, m::register_id, prm::reg_id::host_endianness);
	prm::set(in + m::data_offset, he::he, he::host_value);
	uint8_t out[prm::access_register_out::size + he::size] = {};
	return t.exec(in, sizeof(in), out, sizeof(out));
}

int manage_pages_give(CmdTransport &t, std::span<const uint64_t> iovas, uint16_t function_id)
{
	if (iovas.empty() || iovas.size() > UINT32_MAX)
		return -EINVAL;
	std::vector<uint8_t> in;
	try {
		in.assign(prm::manage_pages_in::pas_offset +
				  iovas.size() * prm::manage_pages_in::pas_entry_size,
			  0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	prm::set(in.data(), prm::cmd_hdr_in::opcode, prm::opcode::manage_pages);
	prm::set(in.data(), prm::cmd_hdr_in::op_mod, prm::manage_pages_op_mod::give);
	prm::set(in.data(), prm::manage_pages_in::input_num_entries, iovas.size());
	prm::set(in.data(), prm::manage_pages_in::function_id, function_id);
	uint8_t *pas = in.data() + prm::manage_pages_in::pas_offset;
	for (size_t i = 0; i < iovas.size(); i++)
		prm::set(pas + i * prm::manage_pages_in::pas_entry_size, prm::pas_entry, iovas[i]);
	uint8_t out[prm::manage_pages_out::size] = {};
	return t.exec(in.data(), in.size(), out, sizeof(out));
}

int manage_pages_take(CmdTransport &t, uint32_t count, std::vector<uint64_t> *returned,
		      uint16_t function_id)
{
	if (count == 0 || returned == nullptr)
		return -EINVAL;
	Cmd<prm::manage_pages_in::size> in(prm::opcode::manage_pages,
					   prm::manage_pages_op_mod::take);
	prm::set(in.b, prm::manage_pages_in::input_num_entries, count);
	prm::set(in.b, prm::manage_pages_in::function_id, function_id);
	std::vector<uint8_t> out;
	try {
		out.assign(prm::manage_pages_out::pas_offset +
				   size_t{count} * prm::manage_pages_out::pas_entry_size,
			   0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	int rc = t.exec(in.b, sizeof(in.b), out.data(), out.size());
	if (rc != 0)
		return rc;
	auto n = static_cast<uint32_t>(
		prm::get(out.data(), prm::manage_pages_out::output_num_entries));
	if (n > count)
		return -EPROTO;
	const uint8_t *pas = out.data() + prm::manage_pages_out::pas_offset;
	try {
		for (uint32_t i = 0; i < n; i++)
			returned->push_back(
				prm::get(pas + size_t{i} * prm::manage_pages_out::pas_entry_size,
					 prm::pas_entry));
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	return 0;
}

int query_hca_cap(CmdTransport &t, uint16_t type, uint16_t mode, void *cap, bool quiet)
{
	if (cap == nullptr)
		return -EINVAL;
	Cmd<prm::query_hca_cap_in::size> in(prm::opcode::query_hca_cap,
					    prm::cap_op_mod(type, mode));
	std::vector<uint8_t> out;
	try {
		out.assign(prm::query_hca_cap_out::size, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	int rc = quiet ? t.exec_quiet(in.b, sizeof(in.b), out.data(), out.size())
		       : t.exec(in.b, sizeof(in.b), out.data(), out.size());
	if (rc != 0)
		return rc;
	std::memcpy(cap, out.data() + prm::query_hca_cap_out::capability_offset,
		    prm::query_hca_cap_out::capability_size);
	return 0;
}

/* As Linux mlx5_core's mlx5_core_query_special_contexts (drivers/net/ethernet/mellanox/mlx5/
 * core/fw.c): one command, resd_lkey from its output. */
int query_special_contexts(CmdTransport &t, uint32_t *resd_lkey)
{
	if (resd_lkey == nullptr)
		return -EINVAL;
	Cmd<prm::query_special_contexts_in::size> in(prm::opcode::query_special_contexts);
	uint8_t out[prm::query_special_contexts_out::size];
	int rc = simple(t, in, out);
	if (rc == 0)
		*resd_lkey = static_cast<uint32_t>(
			prm::get(out, prm::query_special_contexts_out::resd_lkey));
	return rc;
}

int query_roce_address(CmdTransport &t, uint32_t port, uint32_t index, RoceAddress *out)
{
	namespace l = prm::roce_addr_layout;
	if (out == nullptr || index > 0xffff || port > 0xf)
		return -EINVAL;
	Cmd<prm::query_roce_address_in::size> in(prm::opcode::query_roce_address);
	prm::set(in.b, prm::query_roce_address_in::roce_address_index, index);
	prm::set(in.b, prm::query_roce_address_in::vhca_port_num, port);
	uint8_t out_b[prm::query_roce_address_out::size];
	int rc = simple(t, in, out_b);
	if (rc != 0)
		return rc;
	const uint8_t *a = out_b + prm::query_roce_address_out::roce_address_offset;
	std::memcpy(out->gid.data(), a + l::source_l3_address_offset, out->gid.size());
	out->l3_type = static_cast<uint32_t>(prm::get(a, l::roce_l3_type));
	out->version = static_cast<uint32_t>(prm::get(a, l::roce_version));
	return 0;
}

int query_pmtu(CmdTransport &t, uint32_t port, PortMtu *out)
{
	namespace m = prm::access_register_in;
	namespace pm = prm::reg_pmtu;
	if (out == nullptr || port < 1 || port > 0xff)
		return -EINVAL;
	uint8_t in[m::size + pm::size] = {};
	prm::set(in, prm::cmd_hdr_in::opcode, prm::opcode::access_reg);
	prm::set(in, prm::cmd_hdr_in::op_mod, prm::access_register_op_mod::read);
	prm::set(in, m::register_id, prm::reg_id::pmtu);
	prm::set(in + m::data_offset, pm::local_port, port);
	uint8_t o[prm::access_register_out::size + pm::size] = {};
	const int rc = t.exec(in, sizeof(in), o, sizeof(o));
	if (rc != 0)
		return rc;
	const uint8_t *d = o + prm::access_register_out::data_offset;
	out->max = static_cast<uint32_t>(prm::get(d, pm::max_mtu));
	out->admin = static_cast<uint32_t>(prm::get(d, pm::admin_mtu));
	out->oper = static_cast<uint32_t>(prm::get(d, pm::oper_mtu));
	return 0;
}

int set_hca_cap(CmdTransport &t, uint16_t type, const void *cap)
{
	if (cap == nullptr)
		return -EINVAL;
	std::vector<uint8_t> in;
	try {
		in.assign(prm::set_hca_cap_in::size, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	prm::set(in.data(), prm::cmd_hdr_in::opcode, prm::opcode::set_hca_cap);
	prm::set(in.data(), prm::cmd_hdr_in::op_mod, prm::cap_op_mod(type, 0));
	std::memcpy(in.data() + prm::set_hca_cap_in::capability_offset, cap,
		    prm::set_hca_cap_in::capability_size);
	uint8_t out[prm::set_hca_cap_out::size] = {};
	return t.exec(in.data(), in.size(), out, sizeof(out));
}

int alloc_pd(CmdTransport &t, uint32_t *pd)
{
	if (pd == nullptr)
		return -EINVAL;
	Cmd<prm::alloc_pd_in::size> in(prm::opcode::alloc_pd);
	uint8_t out[prm::alloc_pd_out::size];
	int rc = simple(t, in, out);
	if (rc == 0)
		*pd = static_cast<uint32_t>(prm::get(out, prm::alloc_pd_out::pd));
	return rc;
}

int dealloc_pd(CmdTransport &t, uint32_t pd)
{
	if (!prm::fits(prm::dealloc_pd_in::pd, pd))
		return -EINVAL;
	Cmd<prm::dealloc_pd_in::size> in(prm::opcode::dealloc_pd);
	prm::set(in.b, prm::dealloc_pd_in::pd, pd);
	uint8_t out[prm::dealloc_pd_out::size];
	return simple(t, in, out);
}

int create_mkey(CmdTransport &t, const MkeyCreate &c, uint32_t *index)
{
	if (index == nullptr)
		return -EINVAL;
	std::vector<uint8_t> in;
	int rc = encode_create_mkey(c, &in);
	if (rc != 0)
		return rc;
	uint8_t out[prm::create_mkey_out::size] = {};
	rc = t.exec(in.data(), in.size(), out, sizeof(out));
	if (rc == 0)
		*index = static_cast<uint32_t>(prm::get(out, prm::create_mkey_out::mkey_index));
	return rc;
}

int query_mkey(CmdTransport &t, uint32_t index, size_t max_entries, MkeyQuery *q)
{
	if (q == nullptr || !prm::fits(prm::query_mkey_in::mkey_index, index) ||
	    max_entries > (CmdTransport::max_message - prm::query_mkey_out::size) / prm::klm::size)
		return -EINVAL;
	Cmd<prm::query_mkey_in::size> in(prm::opcode::query_mkey);
	prm::set(in.b, prm::query_mkey_in::mkey_index, index);
	std::vector<uint8_t> out;
	try {
		/* Room for max_entries of the larger entry kind: the mode is known only after. */
		out.assign(prm::query_mkey_out::size + max_entries * prm::klm::size, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	int rc = t.exec(in.b, sizeof(in.b), out.data(), out.size());
	if (rc != 0)
		return rc;
	q->ctx = decode_mkc(out.data() + prm::query_mkey_out::mkc_offset);
	q->mtt.clear();
	q->klm.clear();
	const uint8_t *e = out.data() + prm::query_mkey_out::translations_offset;
	const uint64_t octwords = q->ctx.translations_octword_size;
	try {
		if (q->ctx.access_mode == prm::access_mode::mtt) {
			size_t n = std::min<uint64_t>(max_entries, octwords * 2);
			for (size_t i = 0; i < n; i++, e += prm::mtt::size) {
				MttEntry m;
				m.rd_en = prm::get(e, prm::mtt::rd_en) != 0;
				m.wr_en = prm::get(e, prm::mtt::wr_en) != 0;
				/* The enables share the address word: clear them to get the page.
				 */
				uint8_t word[prm::mtt::size];
				std::memcpy(word, e, sizeof(word));
				prm::set(word, prm::mtt::rd_en, 0);
				prm::set(word, prm::mtt::wr_en, 0);
				m.iova = prm::get(word, prm::mtt::address);
				q->mtt.push_back(m);
			}
		} else if (q->ctx.access_mode == prm::access_mode::klm) {
			size_t n = std::min<uint64_t>(max_entries, octwords);
			for (size_t i = 0; i < n; i++, e += prm::klm::size)
				q->klm.push_back(KlmEntry{
					static_cast<uint32_t>(prm::get(e, prm::klm::byte_count)),
					static_cast<uint32_t>(prm::get(e, prm::klm::mkey)),
					prm::get(e, prm::klm::address)});
		}
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	return 0;
}

int destroy_mkey(CmdTransport &t, uint32_t index)
{
	if (!prm::fits(prm::destroy_mkey_in::mkey_index, index))
		return -EINVAL;
	Cmd<prm::destroy_mkey_in::size> in(prm::opcode::destroy_mkey);
	prm::set(in.b, prm::destroy_mkey_in::mkey_index, index);
	uint8_t out[prm::destroy_mkey_out::size];
	return simple(t, in, out);
}

int set_mkey_ext(CmdTransport &t, uint32_t index, const MkeyExtState &st)
{
	if (!prm::fits(prm::set_mkey_ext_in::mkey_index, index) ||
	    (st.flags & ~prm::mkey_ext::settable) != 0 ||
	    ((st.flags & prm::mkey_ext::counter) != 0 && st.counter_iova % 8 != 0))
		return -EINVAL;
	Cmd<prm::set_mkey_ext_in::size> in(prm::opcode::nicmr_set_mkey_ext);
	prm::set(in.b, prm::set_mkey_ext_in::mkey_index, index);
	prm::set(in.b, prm::set_mkey_ext_in::flags, st.flags);
	prm::set(in.b, prm::set_mkey_ext_in::counter_iova,
		 (st.flags & prm::mkey_ext::counter) != 0 ? st.counter_iova : 0);
	uint8_t out[prm::set_mkey_ext_out::size];
	return simple(t, in, out);
}

int query_mkey_ext(CmdTransport &t, uint32_t index, MkeyExtState *st)
{
	if (st == nullptr || !prm::fits(prm::query_mkey_ext_in::mkey_index, index))
		return -EINVAL;
	Cmd<prm::query_mkey_ext_in::size> in(prm::opcode::nicmr_query_mkey_ext);
	prm::set(in.b, prm::query_mkey_ext_in::mkey_index, index);
	uint8_t out[prm::query_mkey_ext_out::size] = {};
	int rc = t.exec(in.b, sizeof(in.b), out, sizeof(out));
	if (rc != 0)
		return rc;
	st->flags = static_cast<uint32_t>(prm::get(out, prm::query_mkey_ext_out::flags));
	st->counter_iova = prm::get(out, prm::query_mkey_ext_out::counter_iova);
	return 0;
}

} // namespace nicmr::mlx5
