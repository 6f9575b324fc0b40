/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_cmd.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

namespace nicmr::testmr {
namespace {

/* The table: the single description of every command (testmr_cmd.h says how patterns read). */
constexpr SectionSpec kSections[] = {
	{"general", "help, the demo, leaving"},
	{"device", "the emulated ConnectX the driver brought up"},
	{"pool", "pools of the driver-level device: create, destroy, show, translate"},
	{"pd", "protection domains of the driver-level device"},
	{"mkey", "mkeys made with firmware commands (CREATE_MKEY, QUERY_MKEY, DESTROY_MKEY)"},
	{"dp", "the data path between the device's two ports"},
	{"mr", "the registration engine (native API): engine pools, MRs"},
	{"key", "keys of the registration engine: lookups, raw keys"},
	{"window", "memory windows of the registration engine"},
	{"qp", "CQs, RC QPs and RDMA of the registration engine (native API)"},
	{"dpdk", "DPDK's memory and mempools on the engine's device (EAL mode, nicmr_dpdk.h)"},
	{"bench", "registration, lookup and RDMA figures, as bench-mr measures them"},
};

constexpr CommandSpec kCommands[] = {
	{"general", "help [SECTION]", "the sections, or the commands of one ('help all': all)",
	 Verb::help},
	{"general", "quit|exit", "leave", Verb::quit},
	{"general", "demo", "what the main job shows", Verb::demo},
	{"device", "show device [--json]", "the device: capabilities, pages, PDs, mkeys, IOMMU",
	 Verb::show_device},
	{"pool", "pool create SIZE [page 4k|2m|1g] [node N] [fallback]",
	 "a pool, DMA-mapped on the device", Verb::pool_create},
	{"pool", "pool destroy ID", "unmap and free a pool", Verb::pool_destroy},
	{"pool", "show pools [--json]", "every pool's layout", Verb::show_pools},
	{"pool", "show pool ID [--json]", "pool layout: pages, IOVA, NUMA node", Verb::show_pool},
	{"pool", "translate ID OFFSET", "IOVA of a byte of a pool", Verb::translate},
	{"pd", "pd alloc", "ALLOC_PD", Verb::pd_alloc},
	{"pd", "pd free PD", "DEALLOC_PD", Verb::pd_free},
	{"mkey", "mkey create ID OFFSET LEN [access lr,lw,rr,rw,a] [pd PD]",
	 "an MTT mkey over pool bytes (CREATE_MKEY)", Verb::mkey_create},
	{"mkey", "mkey query INDEX", "QUERY_MKEY", Verb::mkey_query},
	{"mkey", "mkey destroy INDEX", "DESTROY_MKEY", Verb::mkey_destroy},
	{"dp", "rdma",
	 "connect the two ports: RDMA WRITE, READ, atomics, UMR, and an access refused",
	 Verb::rdma},
	{"mr", "mr pool SIZE [page 4k|2m|1g] [fallback]",
	 "a pool of the registration engine (nicmr_pool_create)", Verb::mr_pool},
	{"mr", "mr reg POOL OFFSET LEN ACCESS [rma_event]",
	 "register pool bytes (nicmr_mr_reg; rma_event: disabled until 'mr enable')", Verb::mr_reg},
	{"mr", "mr regv POOL SEGMENTS ACCESS",
	 "register segments of a pool as one region (nicmr_mr_regv)", Verb::mr_regv},
	{"mr", "mr sub KEY OFFSET LEN ACCESS", "a sub-MR of an MR (nicmr_mr_reg_sub)",
	 Verb::mr_sub},
	{"mr", "mr dereg KEY", "deregister (nicmr_mr_dereg)", Verb::mr_dereg},
	{"mr", "show mr KEY [--json]", "one MR: address, length, access, path, layout",
	 Verb::show_mr},
	{"mr", "show mrs [pool N] [access ACCESS] [min SIZE] [max SIZE] [--json]",
	 "the MRs: all, or of one pool, granting ACCESS, of a size", Verb::show_mrs},
	{"mr", "cntr alloc", "a counter of remote writes (nicmr_cntr_alloc)", Verb::cntr_alloc},
	{"mr", "cntr free CNTR", "free a counter (nicmr_cntr_free)", Verb::cntr_free},
	{"mr", "mr bind KEY CNTR",
	 "count the remote writes into an rma_event MR (nicmr_mr_bind_cntr)", Verb::mr_bind},
	{"mr", "mr unbind KEY", "take an MR's counter off (nicmr_mr_unbind_cntr)", Verb::mr_unbind},
	{"mr", "mr enable KEY", "let peers use an rma_event MR (nicmr_mr_enable)", Verb::mr_enable},
	{"mr", "show cntrs [--json]", "every counter and its value (nicmr_cntr_read)",
	 Verb::show_cntrs},
	{"mr", "mr fill KEY OFFSET LEN BYTE", "set MR bytes to BYTE (what a WRITE then moves)",
	 Verb::mr_fill},
	{"mr", "mr dump KEY OFFSET LEN", "MR bytes in hex, at most 4096 (what a peer wrote)",
	 Verb::mr_dump},
	{"mr", "mr advise KEY OFFSET LEN ADVICE [flush]",
	 "make pages of an odp MR present to the device (nicmr_advise_mr)", Verb::mr_advise},
	{"key", "key lookup KEY ACCESS [offset OFFSET] [len LEN]",
	 "the lockless lookup: granted (and the IOVA) or refused (and why)", Verb::key_lookup},
	{"key", "key raw KEY", "the MR's raw key, in hex (nicmr_mr_raw_attr)", Verb::key_raw},
	{"key", "key map RAW", "the key a raw key names (nicmr_mr_map_raw)", Verb::key_map},
	{"key", "show violations [--json]",
	 "remote keys refused to this device's requests (nicmr_key_violations)",
	 Verb::show_violations},
	{"window", "window bind KEY OFFSET LEN ACCESS",
	 "a memory window over MR bytes (nicmr_mw_alloc, nicmr_mw_bind)", Verb::window_bind},
	{"window", "window unbind WINDOW",
	 "invalidate and free a window (nicmr_mw_invalidate, nicmr_mw_free)", Verb::window_unbind},
	{"dpdk", "show dpdk [--json]", "DPDK memory as the device's pools (nicmr_dpdk_mem_query)",
	 Verb::show_dpdk},
	{"dpdk", "mempool create MBUFS ACCESS",
	 "an mbuf mempool of N mbufs, registered (nicmr_dpdk_mempool_reg)", Verb::mempool_create},
	{"dpdk", "mempool destroy MEMPOOL", "deregister and free it (nicmr_dpdk_mempool_dereg)",
	 Verb::mempool_destroy},
	{"dpdk", "show mempools [--json]", "every mempool: mbufs, MRs and their keys",
	 Verb::show_mempools},
	{"qp", "cq create [depth N]", "a completion queue (nicmr_cq_create; depth 64)",
	 Verb::cq_create},
	{"qp", "cq destroy CQ", "destroy a CQ (nicmr_cq_destroy)", Verb::cq_destroy},
	{"qp", "qp create CQ [port 1|2] [depth N] [recv N]",
	 "an RC QP on a port, reporting to CQ (nicmr_qp_create; recv: a receive queue)",
	 Verb::qp_create},
	{"qp", "qp connect QP PEER", "connect QP to the session's QP PEER (nicmr_qp_connect)",
	 Verb::qp_connect},
	{"qp", "qp connect remote QP GID QPN PSN [mtu N]",
	 "connect QP to a QP of another device by address (nicmr_qp_connect_remote)",
	 Verb::qp_connect_remote},
	{"qp", "qp exchange listen QP PORT [mtu N] [timeout SECONDS] [mr KEY]",
	 "wait on TCP PORT for a peer's address (ibv_rc_pingpong's exchange), connect QP",
	 Verb::qp_exchange_listen},
	{"qp", "qp exchange connect QP HOST PORT [mtu N] [timeout SECONDS] [mr KEY]",
	 "send QP's address to HOST:PORT, take the peer's, connect QP", Verb::qp_exchange_connect},
	{"qp", "qp pingpong QP KEY SIZE ITERS [client] [timeout SECONDS]",
	 "SEND SIZE bytes back and forth ITERS times, as ibv_rc_pingpong, checking each echo",
	 Verb::qp_pingpong},
	{"qp", "qp recover QP", "bring a QP in ERR back to RTS (nicmr_qp_recover)",
	 Verb::qp_recover},
	{"qp", "qp destroy QP", "destroy a QP (nicmr_qp_destroy)", Verb::qp_destroy},
	{"qp", "post write QP KEY OFFSET RKEY ROFFSET LEN [wrid N] [inline] [unsignaled]",
	 "RDMA WRITE from MR bytes to a remote key (nicmr_post_write)", Verb::post_write},
	{"qp", "post read QP KEY OFFSET RKEY ROFFSET LEN [wrid N] [unsignaled]",
	 "RDMA READ into MR bytes (nicmr_post_read)", Verb::post_read},
	{"qp", "post fadd QP KEY OFFSET RKEY ROFFSET ADD [wrid N] [unsignaled]",
	 "atomic fetch-and-add (nicmr_post_atomic_fadd)", Verb::post_fadd},
	{"qp", "post cswap QP KEY OFFSET RKEY ROFFSET COMPARE SWAP [wrid N] [unsignaled]",
	 "atomic compare-and-swap (nicmr_post_atomic_cswap)", Verb::post_cswap},
	{"qp", "poll CQ [max N]", "take the CQ's completions (nicmr_cq_poll)", Verb::poll},
	{"qp", "show cq CQ [--json]", "one CQ: number, depth, its QPs", Verb::show_cq},
	{"qp", "show cqs [--json]", "every CQ", Verb::show_cqs},
	{"qp", "show qp QP [--json]",
	 "one QP: number, port, CQ, address (GID, PSN), peer, state (nicmr_qp_state)",
	 Verb::show_qp},
	{"qp", "show qps [--json]", "every QP", Verb::show_qps},
	{"bench", "bench reg [count N]", "reg + dereg of 4 KiB in a pool: reg, dereg, pair ns",
	 Verb::bench_reg},
	{"bench", "bench lookup [count N]", "nicmr_key_lookup of one live key: ns per lookup",
	 Verb::bench_lookup},
	{"bench", "bench rdma [count N]", "4 KiB RDMA WRITEs port 1 to port 2: ns, Gbit/s",
	 Verb::bench_rdma},
};

struct ParamSpec {
	const char *name;
	const char *help;
};
constexpr ParamSpec kParams[] = {
	{"SECTION", "a help section (Tab lists them), or all"},
	{"SIZE", "a size above 0: 64, 0x40, 4k, 2M, 1g"},
	{"ID", "a pool number, as 'pool create' printed it"},
	{"POOL", "an engine pool number, as 'mr pool' printed it"},
	{"N", "a number"},
	{"OFFSET", "a byte offset: 0, 0x1000, 4k"},
	{"LEN", "a length above 0: 4096, 0x1000, 4k"},
	{"PD", "a PD number, as 'pd alloc' printed it"},
	{"INDEX", "an mkey index, as 'mkey create' printed it"},
	{"KEY", "a key, as 'mr reg' printed it (0x-hex or decimal)"},
	{"WINDOW", "a window number, as 'window bind' printed it"},
	{"ACCESS", "none, or rights a,b,c (Tab lists them)"},
	{"ADVICE", "prefetch, prefetch_write or no_fault (ibv_advise_mr(3)'s advices)"},
	{"SEGMENTS", "OFFSET:LEN[,OFFSET:LEN...], at most 64"},
	{"RAW", "a raw key in hex, as 'key raw' printed it"},
	{"CQ", "a CQ number, as 'cq create' printed it"},
	{"QP", "a QP number, as 'qp create' printed it"},
	{"CNTR", "a counter number, as 'cntr alloc' printed it"},
	{"MEMPOOL", "a mempool number, as 'mempool create' printed it"},
	{"MBUFS", "how many mbufs, 1 to 1048576"},
	{"PEER", "the session's QP to connect to, as 'qp create' printed it"},
	{"RKEY", "a remote key (an MR's or a window's, or any 32 bits)"},
	{"ROFFSET", "a byte offset in the remote key's region"},
	{"ADD", "the number to add (64 bits)"},
	{"COMPARE", "the value to compare with (64 bits)"},
	{"SWAP", "the value to swap in (64 bits)"},
	{"GID", "a peer's GID: 32 hex digits, an IPv6 or an IPv4 address"},
	{"QPN", "a peer's QP number (24 bits)"},
	{"PSN", "a peer's first packet sequence number (24 bits)"},
	{"HOST", "a host name or address"},
	{"PORT", "a TCP port, 1 to 65535"},
	{"BYTE", "a byte value, 0 to 255"},
	{"SECONDS", "seconds, 1 to 3600"},
	{"ITERS", "round trips, 1 to 1000000"},
};

constexpr const char *kMrAccessNames[] = {
	"send",		"recv",	       "read",		"write",   "remote_read",
	"remote_write", "local_write", "remote_atomic", "mw_bind", "odp",
};

/* Splits a line into at most kMaxWords words without allocating. */
constexpr size_t kMaxWords = 12;

struct Words {
	std::array<std::string_view, kMaxWords> w;
	size_t n = 0;
	bool too_many = false;
};

bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

Words split(std::string_view line)
{
	Words out;
	size_t i = 0;
	while (i < line.size()) {
		while (i < line.size() && blank(line[i]))
			i++;
		if (i == line.size() || line[i] == '#')
			break;
		size_t start = i;
		while (i < line.size() && !blank(line[i]))
			i++;
		if (out.n == kMaxWords) {
			out.too_many = true;
			break;
		}
		out.w[out.n++] = line.substr(start, i - start);
	}
	return out;
}

/* One item of a pattern. */
using Item = PatternItem;
using Items = PatternItems;
static_assert(kMaxPatternItems == kMaxWords, "a pattern has no more items than a line words");

/* A keyword item ("quit|exit") matches a word. */
bool keyword_matches(std::string_view item, std::string_view word)
{
	while (true) {
		size_t bar = item.find('|');
		if (item.substr(0, bar) == word)
			return true;
		if (bar == std::string_view::npos)
			return false;
		item.remove_prefix(bar + 1);
	}
}

/* "lr,lw,rr,rw,a" in any order and number. */
bool parse_access(std::string_view word, uint32_t *out)
{
	uint32_t bits = 0;
	while (!word.empty()) {
		size_t comma = word.find(',');
		std::string_view tok = word.substr(0, comma);
		if (tok == "lr")
			bits |= access_lr;
		else if (tok == "lw")
			bits |= access_lw;
		else if (tok == "rr")
			bits |= access_rr;
		else if (tok == "rw")
			bits |= access_rw;
		else if (tok == "a")
			bits |= access_a;
		else
			return false;
		if (comma == std::string_view::npos)
			break;
		word.remove_prefix(comma + 1);
		if (word.empty())
			return false;
	}
	if (bits == 0)
		return false;
	*out = bits;
	return true;
}

bool parse_u32(std::string_view word, uint32_t *out)
{
	uint64_t v;
	if (!parse_number(word, &v) || v > std::numeric_limits<uint32_t>::max())
		return false;
	*out = static_cast<uint32_t>(v);
	return true;
}

/* "0:4k,8k:4k": pool segments. */
bool parse_segments(std::string_view word, std::vector<Segment> *out)
{
	std::vector<Segment> segs;
	while (true) {
		size_t comma = word.find(',');
		std::string_view tok = word.substr(0, comma);
		size_t colon = tok.find(':');
		Segment s;
		if (colon == std::string_view::npos || segs.size() == kMaxSegments ||
		    !parse_size(tok.substr(0, colon), &s.offset) ||
		    !parse_size(tok.substr(colon + 1), &s.len) || s.len == 0)
			return false;
		segs.push_back(s);
		if (comma == std::string_view::npos)
			break;
		word.remove_prefix(comma + 1);
	}
	*out = std::move(segs);
	return true;
}

int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool parse_hex_bytes(std::string_view word, std::vector<uint8_t> *out)
{
	if (word.empty() || word.size() % 2 != 0 || word.size() / 2 > kMaxRawKey)
		return false;
	std::vector<uint8_t> bytes;
	for (size_t i = 0; i < word.size(); i += 2) {
		int hi = hex_digit(word[i]), lo = hex_digit(word[i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		bytes.push_back(static_cast<uint8_t>(hi << 4 | lo));
	}
	*out = std::move(bytes);
	return true;
}

bool is_section(std::string_view w)
{
	for (const auto &s : kSections)
		if (w == s.name)
			return true;
	return false;
}

int fail(std::string *error, std::string msg)
{
	if (error != nullptr)
		*error = std::move(msg);
	return -EINVAL;
}

std::string usage(const CommandSpec &spec)
{
	return std::string("usage: ") + spec.pattern;
}

/* A parameter's value into cmd; false with *msg set when it does not parse. */
bool parse_param(const CommandSpec &spec, std::string_view name, std::string_view w, Command *cmd,
		 std::string *msg)
{
	bool ok = false;
	if (name == "SIZE") {
		ok = parse_size(w, &cmd->size) && cmd->size != 0;
	} else if (name == "ID" || name == "POOL" || name == "WINDOW" || name == "CQ" ||
		   name == "QP" || name == "CNTR" || name == "MEMPOOL") {
		ok = parse_number(w, &cmd->id);
	} else if (name == "MBUFS") {
		ok = parse_number(w, &cmd->count) && cmd->count != 0 && cmd->count <= (1u << 20);
	} else if (name == "PEER") {
		ok = parse_number(w, &cmd->peer);
	} else if (name == "GID") {
		if (!parse_gid(w, &cmd->gid)) {
			*msg = "GID: expected 32 hex digits, an IPv6 or an IPv4 address, not '" +
			       std::string(w.substr(0, 64)) + "'";
			return false;
		}
		return true;
	} else if (name == "QPN" || name == "PSN") {
		uint32_t *v = name == "QPN" ? &cmd->remote_qpn : &cmd->remote_psn;
		if (!parse_u32(w, v) || *v > 0xffffff) {
			*msg = std::string(name) + ": expected a 24-bit number, not '" +
			       std::string(w.substr(0, 64)) + "'";
			return false;
		}
		return true;
	} else if (name == "HOST") {
		ok = !w.empty() && w.size() <= kMaxHost;
		if (ok)
			cmd->host = std::string(w);
	} else if (name == "PORT") {
		ok = parse_u32(w, &cmd->tcp_port) && cmd->tcp_port >= 1 && cmd->tcp_port <= 65535;
		if (!ok) {
			*msg = "PORT: expected a TCP port, 1 to 65535";
			return false;
		}
	} else if (name == "BYTE") {
		uint32_t v = 0;
		ok = parse_u32(w, &v) && v <= 255;
		cmd->byte = static_cast<uint8_t>(v);
		if (!ok) {
			*msg = "BYTE: expected 0 to 255";
			return false;
		}
	} else if (name == "ITERS") {
		ok = parse_number(w, &cmd->iters) && cmd->iters >= 1 && cmd->iters <= kMaxIters;
		if (!ok) {
			*msg = "ITERS: expected 1 to 1000000 round trips";
			return false;
		}
	} else if (name == "ROFFSET") {
		ok = parse_size(w, &cmd->roffset);
	} else if (name == "ADD" || name == "COMPARE") {
		ok = parse_number(w, &cmd->operand);
	} else if (name == "SWAP") {
		ok = parse_number(w, &cmd->operand2);
	} else if (name == "RKEY") {
		if (!parse_u32(w, &cmd->rkey)) {
			*msg = "RKEY: expected a 32-bit key, not '" + std::string(w.substr(0, 64)) +
			       "'";
			return false;
		}
		return true;
	} else if (name == "OFFSET") {
		ok = parse_size(w, &cmd->offset);
	} else if (name == "LEN") {
		ok = parse_size(w, &cmd->len) && cmd->len != 0;
	} else if (name == "PD") {
		ok = parse_u32(w, &cmd->pd);
	} else if (name == "INDEX") {
		ok = parse_u32(w, &cmd->index);
	} else if (name == "KEY") {
		ok = parse_u32(w, &cmd->key);
		if (!ok) {
			*msg = "KEY: expected a 32-bit key, not '" + std::string(w.substr(0, 64)) +
			       "'";
			return false;
		}
	} else if (name == "ACCESS") {
		if (!parse_mr_access(w, &cmd->mr_access)) {
			*msg = "ACCESS: expected none or a comma list of send, recv, read, write, "
			       "remote_read, remote_write, local_write, remote_atomic, mw_bind, "
			       "odp";
			return false;
		}
		return true;
	} else if (name == "ADVICE") {
		constexpr std::string_view kAdvice[] = {"prefetch", "prefetch_write", "no_fault"};
		for (uint32_t i = 0; i < std::size(kAdvice); i++)
			if (w == kAdvice[i]) {
				cmd->advice = i; /* NICMR_ADVISE_MR_ADVICE_* values */
				return true;
			}
		*msg = "ADVICE: expected prefetch, prefetch_write or no_fault";
		return false;
	} else if (name == "SEGMENTS") {
		if (!parse_segments(w, &cmd->segments)) {
			*msg = "SEGMENTS: expected OFFSET:LEN[,OFFSET:LEN...], lengths above 0, at "
			       "most 64";
			return false;
		}
		return true;
	} else if (name == "RAW") {
		if (!parse_hex_bytes(w, &cmd->raw)) {
			*msg = "RAW: expected an even number of hex digits, at most 128";
			return false;
		}
		return true;
	} else if (name == "SECTION") {
		if (!is_section(w) && w != "all") {
			std::string names;
			for (const auto &s : kSections)
				names += std::string(names.empty() ? "" : ", ") + s.name;
			*msg = "help: no section '" + std::string(w.substr(0, 64)) +
			       "' (sections: " + names + ", all)";
			return false;
		}
		cmd->word = std::string(w);
		return true;
	}
	if (!ok)
		*msg = usage(spec);
	return ok;
}

/* An option and its value (w, empty for a flag) into cmd; false with *msg set otherwise. */
bool parse_option(const Item &opt, std::string_view w, Command *cmd, std::string *msg)
{
	const std::string_view o = opt.word;
	auto bad = [&](const char *m) {
		*msg = m;
		return false;
	};
	if (o == "page")
		return parse_page_size(w, &cmd->page_size) || bad("page: expected 4k, 2m or 1g");
	if (o == "node")
		return parse_node(w, &cmd->node) || bad("node: expected a NUMA node number");
	if (o == "fallback")
		return cmd->fallback = true;
	if (o == "--json")
		return cmd->json = true;
	if (o == "pd")
		return parse_u32(w, &cmd->pd) || bad("pd: expected a PD number");
	if (o == "access" && opt.value == "ACCESS")
		return parse_mr_access(w, &cmd->filter_access) ||
		       bad("access: expected none or a comma list of send, recv, read, write, "
			   "remote_read, remote_write, local_write, remote_atomic, mw_bind, odp");
	if (o == "access")
		return parse_access(w, &cmd->access) || bad("access: a list of lr, lw, rr, rw, a");
	if (o == "pool") {
		uint64_t v;
		if (!parse_number(w, &v) || v > static_cast<uint64_t>(INT64_MAX))
			return bad("pool: expected an engine pool number");
		cmd->filter_pool = static_cast<int64_t>(v);
		return true;
	}
	if (o == "min")
		return parse_size(w, &cmd->filter_min) || bad("min: expected a size (4k, 2M)");
	if (o == "max" && opt.value == "SIZE")
		return parse_size(w, &cmd->filter_max) || bad("max: expected a size (4k, 2M)");
	if (o == "max")
		return (parse_u32(w, &cmd->max) && cmd->max != 0 && cmd->max <= kMaxPoll) ||
		       bad("max: expected 1 to 256 completions");
	if (o == "port")
		return ((w == "1" || w == "2") && parse_u32(w, &cmd->port)) ||
		       bad("port: expected 1 or 2");
	if (o == "mtu")
		return (parse_u32(w, &cmd->mtu) &&
			(cmd->mtu == 256 || cmd->mtu == 512 || cmd->mtu == 1024 ||
			 cmd->mtu == 2048 || cmd->mtu == 4096)) ||
		       bad("mtu: expected 256, 512, 1024, 2048 or 4096");
	if (o == "timeout")
		return (parse_u32(w, &cmd->timeout_s) && cmd->timeout_s >= 1 &&
			cmd->timeout_s <= kExchangeMaxTimeoutS) ||
		       bad("timeout: expected 1 to 3600 seconds");
	if (o == "depth")
		return (parse_u32(w, &cmd->depth) && cmd->depth != 0) ||
		       bad("depth: expected a number above 0");
	if (o == "mr" && opt.value == "KEY")
		return (cmd->has_exchange_mr = parse_u32(w, &cmd->exchange_mr)) ||
		       bad("mr: expected a key, as 'mr reg' printed it");
	if (o == "recv")
		return (parse_u32(w, &cmd->recv_depth) && cmd->recv_depth >= 2) ||
		       bad("recv: expected a receive queue depth of at least 2");
	if (o == "client")
		return cmd->client = true;
	if (o == "wrid")
		return (cmd->has_wr_id = parse_number(w, &cmd->wr_id)) ||
		       bad("wrid: expected a 64-bit number");
	if (o == "inline")
		return cmd->inline_data = true;
	if (o == "unsignaled")
		return cmd->unsignaled = true;
	if (o == "rma_event")
		return cmd->rma_event = true;
	if (o == "flush")
		return cmd->flush = true;
	if (o == "count")
		return (parse_number(w, &cmd->count) && cmd->count != 0 &&
			cmd->count <= kMaxBenchCount) ||
		       bad("count: expected 1 to 10000000 operations");
	if (o == "offset")
		return (cmd->has_offset = parse_size(w, &cmd->offset)) ||
		       bad("offset: expected a byte offset (0, 0x1000, 4k)");
	if (o == "len")
		return (cmd->has_len = parse_size(w, &cmd->len) && cmd->len != 0) ||
		       bad("len: expected a length above 0");
	return bad("an option the parser does not know");
}

/* The rest of the line after the keywords of spec. */
int parse_args(const CommandSpec &spec, const Items &items, const Words &words, Command *cmd,
	       std::string *error)
{
	size_t wi = items.keywords;
	std::string msg;
	bool has_options = false;
	for (size_t i = items.keywords; i < items.n; i++) {
		const Item &item = items.it[i];
		if (item.kind == Item::param) {
			if (wi == words.n)
				return fail(error, usage(spec));
			if (!parse_param(spec, item.word, words.w[wi++], cmd, &msg))
				return fail(error, msg);
		} else if (item.kind == Item::optional_param) {
			if (wi < words.n && !parse_param(spec, item.word, words.w[wi++], cmd, &msg))
				return fail(error, msg);
		} else if (item.kind == Item::option) {
			has_options = true;
		}
	}
	/* Options, in any order, after the parameters. */
	while (wi < words.n) {
		const std::string_view w = words.w[wi];
		const Item *opt = nullptr;
		for (size_t i = items.keywords; i < items.n; i++)
			if (items.it[i].kind == Item::option && items.it[i].word == w)
				opt = &items.it[i];
		if (opt == nullptr) {
			if (!has_options)
				return fail(error, usage(spec));
			std::string name;
			for (size_t i = 0; i < items.keywords; i++)
				name += std::string(i ? " " : "") + std::string(items.it[i].word);
			return fail(error,
				    name + ": unknown word '" + std::string(w.substr(0, 64)) + "'");
		}
		wi++;
		std::string_view value;
		if (!opt->value.empty()) {
			if (wi == words.n) {
				parse_option(*opt, {}, cmd, &msg);
				return fail(error, msg);
			}
			value = words.w[wi++];
		}
		if (!parse_option(*opt, value, cmd, &msg))
			return fail(error, msg);
	}
	cmd->verb = spec.verb;
	return 0;
}

void append_spec(std::string *out, const CommandSpec &c)
{
	constexpr size_t kColumn = 42;
	std::string line = std::string("  ") + c.pattern;
	if (line.size() + 1 > kColumn)
		line += "\n" + std::string(kColumn, ' ');
	else
		line += std::string(kColumn - line.size(), ' ');
	*out += line + c.help + "\n";
}

} // namespace

bool is_param_name(std::string_view w)
{
	return !w.empty() && w[0] >= 'A' && w[0] <= 'Z';
}

PatternItems pattern_items(std::string_view p)
{
	PatternItems out;
	size_t i = 0;
	while (i < p.size() && out.n < kMaxPatternItems) {
		while (i < p.size() && p[i] == ' ')
			i++;
		if (i == p.size())
			break;
		if (p[i] == '[') {
			size_t end = p.find(']', i);
			std::string_view inner = p.substr(i + 1, end - i - 1);
			size_t sp = inner.find(' ');
			PatternItem item{PatternItem::option, inner.substr(0, sp), {}};
			if (sp != std::string_view::npos)
				item.value = inner.substr(sp + 1);
			if (is_param_name(item.word))
				item.kind = PatternItem::optional_param;
			out.it[out.n++] = item;
			i = end + 1;
			continue;
		}
		size_t end = p.find(' ', i);
		if (end == std::string_view::npos)
			end = p.size();
		std::string_view w = p.substr(i, end - i);
		PatternItem item{
			is_param_name(w) ? PatternItem::param : PatternItem::keyword, w, {}};
		if (item.kind == PatternItem::keyword && out.keywords == out.n)
			out.keywords++;
		out.it[out.n++] = item;
		i = end;
	}
	return out;
}

std::span<const CommandSpec> command_table()
{
	return kCommands;
}

std::span<const SectionSpec> section_table()
{
	return kSections;
}

const char *param_help(std::string_view name)
{
	for (const auto &p : kParams)
		if (name == p.name)
			return p.help;
	return "";
}

std::span<const char *const> mr_access_names()
{
	return kMrAccessNames;
}

std::string format_mr_access(uint64_t bits)
{
	std::string s;
	for (size_t i = 0; i < std::size(kMrAccessNames); i++)
		if (bits & (uint64_t{1} << i))
			s += std::string(s.empty() ? "" : ",") + kMrAccessNames[i];
	return s.empty() ? "none" : s;
}

bool parse_mr_access(std::string_view word, uint64_t *out)
{
	if (word == "none") {
		*out = 0;
		return true;
	}
	uint64_t bits = 0;
	while (true) {
		size_t comma = word.find(',');
		std::string_view tok = word.substr(0, comma);
		size_t i = 0;
		while (i < std::size(kMrAccessNames) && tok != kMrAccessNames[i])
			i++;
		if (i == std::size(kMrAccessNames))
			return false;
		bits |= uint64_t{1} << i;
		if (comma == std::string_view::npos)
			break;
		word.remove_prefix(comma + 1);
	}
	*out = bits;
	return true;
}

bool parse_page_size(std::string_view word, uint64_t *out)
{
	uint64_t v;
	if (!parse_size(word, &v) ||
	    (v != uint64_t{4} << 10 && v != uint64_t{2} << 20 && v != uint64_t{1} << 30))
		return false;
	*out = v;
	return true;
}

bool parse_gid(std::string_view word, std::array<uint8_t, 16> *out)
{
	if (word.size() == 32 && word.find(':') == std::string_view::npos &&
	    word.find('.') == std::string_view::npos) {
		std::array<uint8_t, 16> g{};
		for (size_t i = 0; i < 16; i++) {
			const int hi = hex_digit(word[2 * i]), lo = hex_digit(word[2 * i + 1]);
			if (hi < 0 || lo < 0)
				return false;
			g[i] = static_cast<uint8_t>(hi << 4 | lo);
		}
		*out = g;
		return true;
	}
	if (word.size() > INET6_ADDRSTRLEN)
		return false;
	const std::string s(word);
	in6_addr a6{};
	if (::inet_pton(AF_INET6, s.c_str(), &a6) == 1) {
		std::memcpy(out->data(), &a6, 16);
		return true;
	}
	in_addr a4{};
	if (::inet_pton(AF_INET, s.c_str(), &a4) == 1) {
		/* The IPv4-mapped IPv6 address (RFC 4291 2.5.5.2): RoCEv2's GID of an IPv4 port. */
		*out = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		std::memcpy(out->data() + 12, &a4, 4);
		return true;
	}
	return false;
}

bool parse_node(std::string_view word, int *out)
{
	uint64_t v;
	if (!parse_number(word, &v) || v > kMaxNode)
		return false;
	*out = static_cast<int>(v);
	return true;
}

int parse_command(std::string_view line, Command *out, std::string *error)
{
	Words words = split(line);
	if (words.too_many)
		return fail(error, "too many words (at most 12)");
	Command cmd;
	if (words.n == 0) {
		*out = cmd;
		return 0;
	}
	/* The command whose keywords are the line's first words; the one with the most. */
	const CommandSpec *best = nullptr;
	Items best_items;
	for (const auto &spec : kCommands) {
		Items items = pattern_items(spec.pattern);
		if (items.keywords > words.n ||
		    (best != nullptr && items.keywords <= best_items.keywords))
			continue;
		size_t i = 0;
		while (i < items.keywords && keyword_matches(items.it[i].word, words.w[i]))
			i++;
		if (i == items.keywords) {
			best = &spec;
			best_items = items;
		}
	}
	if (best == nullptr)
		return fail(error, "unknown command '" + std::string(line.substr(0, 64)) +
					   "' (try 'help')");
	if (int rc = parse_args(*best, best_items, words, &cmd, error); rc != 0)
		return rc;
	*out = std::move(cmd);
	return 0;
}

int command_help(std::string_view section, std::string *text)
{
	text->clear();
	if (section.empty()) {
		*text = "sections ('help SECTION' lists its commands, 'help all' every command):\n";
		for (const auto &s : kSections) {
			std::string name(s.name);
			*text += "  " + name + std::string(10 - name.size(), ' ') + s.help + "\n";
		}
		return 0;
	}
	if (section == "all") {
		*text = command_help_all();
		return 0;
	}
	for (const auto &s : kSections) {
		if (section != s.name)
			continue;
		*text = std::string(s.name) + ": " + s.help + "\n";
		for (const auto &c : kCommands)
			if (section == c.section)
				append_spec(text, c);
		return 0;
	}
	return -EINVAL;
}

std::string command_help_all()
{
	std::string text = "commands:\n";
	for (const auto &c : kCommands)
		append_spec(&text, c);
	return text;
}

} // namespace nicmr::testmr
