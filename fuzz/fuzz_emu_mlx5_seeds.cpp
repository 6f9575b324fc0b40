/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Writes the seed corpus of fuzz_emu_mlx5_cmd into a directory: a handful of well-formed
 * command sequences (bring-up, PD, mkeys, capabilities, pages; flat and queued) built with the
 * PRM layout table, so that the fuzzer starts from commands the device accepts.
 *
 *   fuzz_emu_mlx5_seeds <dir>
 */
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_emu_format.h"
#include "mlx5_prm.h"

namespace {

using namespace nicmr::emu::fuzz;
namespace prm = nicmr::mlx5::prm;

using Bytes = std::vector<uint8_t>;

Bytes cmd(uint16_t op, size_t len, uint16_t op_mod = 0)
{
	Bytes in(len);
	prm::set(in.data(), prm::cmd_hdr_in::opcode, op);
	prm::set(in.data(), prm::cmd_hdr_in::op_mod, op_mod);
	return in;
}

void u16(Bytes &b, size_t v)
{
	b.push_back(static_cast<uint8_t>(v >> 8));
	b.push_back(static_cast<uint8_t>(v));
}

void flat(Bytes &b, const Bytes &in, size_t out_len)
{
	b.push_back(0);
	u16(b, in.size());
	u16(b, out_len);
	b.insert(b.end(), in.begin(), in.end());
}

/* A queued command whose chains start at area blocks 0 (input) and 8 (output). */
void queued(Bytes &b, uint8_t slot, const Bytes &in, size_t out_len)
{
	namespace ce = prm::cmdq_entry;
	b.push_back(kRecordQueued);
	b.push_back(slot);
	uint8_t e[ce::size] = {};
	prm::set(e, ce::type, ce::type_pcie);
	prm::set(e, ce::input_length, in.size());
	prm::set(e, ce::output_length, out_len);
	prm::set(e, ce::token, 0x33);
	prm::set(e, ce::ownership, ce::owner_hw);
	std::memcpy(e + ce::inline_input, in.data(), std::min<size_t>(in.size(), 16));
	b.insert(b.end(), e, e + sizeof(e));
	b.push_back(3);	    /* input chain: area block 0 */
	b.push_back(3 + 8); /* output chain: area block 8 */
	b.push_back(1 | 2); /* well-formed chains */
	/* The mailbox data: input bytes past the first 16, 512 per block, 1 KiB apart. */
	Bytes area;
	for (size_t at = 16, i = 0; at < in.size(); at += 512, i++) {
		area.resize((i + 1) * kBlockStride);
		std::memcpy(area.data() + i * kBlockStride, in.data() + at,
			    std::min<size_t>(512, in.size() - at));
	}
	u16(b, area.size());
	b.insert(b.end(), area.begin(), area.end());
}

Bytes create_mkey(uint32_t pd, bool chosen)
{
	Bytes in = cmd(prm::opcode::create_mkey, prm::create_mkey_in::size + 32);
	uint8_t *mkc = in.data() + prm::create_mkey_in::mkc_offset;
	prm::set_access_mode(mkc, prm::access_mode::mtt);
	prm::set(mkc, prm::mkc::pd, pd);
	prm::set(mkc, prm::mkc::lr, 1);
	prm::set(mkc, prm::mkc::rw, 1);
	prm::set(mkc, prm::mkc::len, 16384);
	prm::set(mkc, prm::mkc::log_page_size, 12);
	prm::set(mkc, prm::mkc::translations_octword_size, 2);
	prm::set(in.data(), prm::create_mkey_in::translations_octword_actual_size, 2);
	if (chosen)
		prm::set(in.data(), prm::create_mkey_in::input_mkey_index, 9);
	for (int i = 0; i < 4; i++)
		prm::set(in.data() + prm::create_mkey_in::translations_offset + 8 * i,
			 prm::mtt::address, kPagesIova + 4096 * (i + 8));
	return in;
}

bool write(const std::string &dir, const char *name, const Bytes &b)
{
	const std::string path = dir + "/" + name;
	FILE *f = std::fopen(path.c_str(), "wb");
	if (f == nullptr) {
		std::fprintf(stderr, "%s: %s\n", path.c_str(), std::strerror(errno));
		return false;
	}
	const bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
	return std::fclose(f) == 0 && ok;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 2) {
		std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
		return 2;
	}
	const std::string dir = argv[1];
	bool ok = true;

	Bytes bringup{0};
	flat(bringup, cmd(prm::opcode::enable_hca, 16), 16);
	Bytes issi = cmd(prm::opcode::set_issi, 16);
	prm::set(issi.data(), prm::set_issi_in::current_issi, 1);
	flat(bringup, issi, 16);
	flat(bringup, cmd(prm::opcode::query_pages, 16, prm::query_pages_op_mod::init), 16);
	Bytes give = cmd(prm::opcode::manage_pages, 16 + 8 * 4, prm::manage_pages_op_mod::give);
	prm::set(give.data(), prm::manage_pages_in::input_num_entries, 4);
	for (int i = 0; i < 4; i++)
		prm::set(give.data() + 16 + 8 * i, prm::pas_entry, kPagesIova + 4096 * i);
	flat(bringup, give, 16);
	flat(bringup, cmd(prm::opcode::init_hca, 16), 16);
	ok &= write(dir, "bringup", bringup);

	Bytes mkeys{kSetupBringUp};
	flat(mkeys, cmd(prm::opcode::alloc_pd, 16), 16);
	flat(mkeys, create_mkey(1, false), 16);
	flat(mkeys, create_mkey(1, true), 16);
	Bytes q = cmd(prm::opcode::query_mkey, 16);
	prm::set(q.data(), prm::query_mkey_in::mkey_index, 9);
	flat(mkeys, q, prm::query_mkey_out::size + 32);
	Bytes d = cmd(prm::opcode::destroy_mkey, 16);
	prm::set(d.data(), prm::destroy_mkey_in::mkey_index, 9);
	flat(mkeys, d, 16);
	Bytes dp = cmd(prm::opcode::dealloc_pd, 16);
	prm::set(dp.data(), prm::dealloc_pd_in::pd, 1);
	flat(mkeys, dp, 16);
	flat(mkeys, cmd(prm::opcode::teardown_hca, 16), 16);
	ok &= write(dir, "mkeys", mkeys);

	/* nicmr extensions: state set on a live mkey (with a counter in the given pages),
	 * queried, refused flags; and the same commands on a model without extensions. */
	Bytes ext{kSetupBringUp};
	flat(ext, cmd(prm::opcode::alloc_pd, 16), 16);
	flat(ext, create_mkey(1, true), 16);
	Bytes se = cmd(prm::opcode::nicmr_set_mkey_ext, prm::set_mkey_ext_in::size);
	prm::set(se.data(), prm::set_mkey_ext_in::mkey_index, 9);
	prm::set(se.data(), prm::set_mkey_ext_in::flags,
		 prm::mkey_ext::single_use | prm::mkey_ext::counter);
	prm::set(se.data(), prm::set_mkey_ext_in::counter_iova, kPagesIova + 4096 * 8);
	flat(ext, se, prm::set_mkey_ext_out::size);
	Bytes qe = cmd(prm::opcode::nicmr_query_mkey_ext, prm::query_mkey_ext_in::size);
	prm::set(qe.data(), prm::query_mkey_ext_in::mkey_index, 9);
	flat(ext, qe, prm::query_mkey_ext_out::size);
	prm::set(se.data(), prm::set_mkey_ext_in::flags, prm::mkey_ext::spent);
	flat(ext, se, prm::set_mkey_ext_out::size);
	flat(ext, d, 16);
	ok &= write(dir, "ext", ext);
	Bytes noext{uint8_t(kSetupBringUp | kSetupNoExt)};
	flat(noext, qe, prm::query_mkey_ext_out::size);
	flat(noext,
	     cmd(prm::opcode::query_hca_cap, 16,
		 prm::cap_op_mod(prm::cap_type::nicmr_ext, prm::cap_mode::current)),
	     prm::query_hca_cap_out::size);
	ok &= write(dir, "noext", noext);

	Bytes caps{kSetupBringUp | kSetupMkey};
	queued(caps, 0,
	       cmd(prm::opcode::query_hca_cap, 16,
		   prm::cap_op_mod(prm::cap_type::general, prm::cap_mode::max)),
	       prm::query_hca_cap_out::size);
	queued(caps, 5, cmd(prm::opcode::query_issi, 16), prm::query_issi_out::size);
	queued(caps, 31, create_mkey(1, false), 16);
	ok &= write(dir, "queued", caps);

	Bytes setcap{0};
	flat(setcap, cmd(prm::opcode::enable_hca, 16), 16);
	queued(setcap, 1,
	       cmd(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size,
		   prm::cap_op_mod(prm::cap_type::general, 0)),
	       16);
	ok &= write(dir, "setcap", setcap);

	Bytes pages{kSetupBringUp};
	Bytes take = cmd(prm::opcode::manage_pages, 16, prm::manage_pages_op_mod::take);
	prm::set(take.data(), prm::manage_pages_in::input_num_entries, 8);
	flat(pages, cmd(prm::opcode::query_pages, 16, prm::query_pages_op_mod::regular), 16);
	flat(pages, take, 16 + 64);
	flat(pages, cmd(prm::opcode::disable_hca, 16), 16);
	ok &= write(dir, "pages", pages);
	return ok ? 0 : 1;
}
