/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_cmd.h"

#include <array>
#include <cerrno>
#include <limits>

namespace nicmr::testmr {
namespace {

/* Splits a line into at most kMaxWords words without allocating. */
constexpr size_t kMaxWords = 12;

struct Words {
	std::array<std::string_view, kMaxWords> w;
	size_t n = 0;
	bool too_many = false;
};

Words split(std::string_view line)
{
	Words out;
	size_t i = 0;
	while (i < line.size()) {
		while (i < line.size() &&
		       (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n'))
			i++;
		if (i == line.size() || line[i] == '#')
			break;
		size_t start = i;
		while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r' &&
		       line[i] != '\n')
			i++;
		if (out.n == kMaxWords) {
			out.too_many = true;
			break;
		}
		out.w[out.n++] = line.substr(start, i - start);
	}
	return out;
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

int fail(std::string *error, std::string msg)
{
	if (error != nullptr)
		*error = std::move(msg);
	return -EINVAL;
}

} // namespace

bool parse_page_size(std::string_view word, uint64_t *out)
{
	uint64_t v;
	if (!parse_size(word, &v) ||
	    (v != uint64_t{4} << 10 && v != uint64_t{2} << 20 && v != uint64_t{1} << 30))
		return false;
	*out = v;
	return true;
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
	const auto &w = words.w;
	const size_t n = words.n;
	if (n == 0) {
		*out = cmd;
		return 0;
	}
	auto is = [&](size_t i, std::string_view s) { return i < n && w[i] == s; };

	if (is(0, "help") && n == 1) {
		cmd.verb = Verb::help;
	} else if ((is(0, "quit") || is(0, "exit")) && n == 1) {
		cmd.verb = Verb::quit;
	} else if (is(0, "demo") && n == 1) {
		cmd.verb = Verb::demo;
	} else if (is(0, "rdma") && n == 1) {
		cmd.verb = Verb::rdma;
	} else if (is(0, "pool") && is(1, "create")) {
		if (n < 3 || !parse_size(w[2], &cmd.size) || cmd.size == 0)
			return fail(error,
				    "usage: pool create SIZE [page 4k|2m|1g] [node N] [fallback]");
		for (size_t i = 3; i < n; i++) {
			if (w[i] == "page" && i + 1 < n) {
				if (!parse_page_size(w[++i], &cmd.page_size))
					return fail(error, "page: expected 4k, 2m or 1g");
			} else if (w[i] == "node" && i + 1 < n) {
				if (!parse_node(w[++i], &cmd.node))
					return fail(error, "node: expected a NUMA node number");
			} else if (w[i] == "fallback") {
				cmd.fallback = true;
			} else {
				return fail(error, "pool create: unknown word '" +
							   std::string(w[i]) + "'");
			}
		}
		cmd.verb = Verb::pool_create;
	} else if (is(0, "pool") && is(1, "destroy") && n == 3) {
		if (!parse_number(w[2], &cmd.id))
			return fail(error, "usage: pool destroy ID");
		cmd.verb = Verb::pool_destroy;
	} else if (is(0, "show") && is(1, "pools") && n == 2) {
		cmd.verb = Verb::show_pools;
	} else if (is(0, "show") && is(1, "pool") && n == 3) {
		if (!parse_number(w[2], &cmd.id))
			return fail(error, "usage: show pool ID");
		cmd.verb = Verb::show_pool;
	} else if (is(0, "show") && is(1, "device") && n == 2) {
		cmd.verb = Verb::show_device;
	} else if (is(0, "translate") && n == 3) {
		if (!parse_number(w[1], &cmd.id) || !parse_size(w[2], &cmd.offset))
			return fail(error, "usage: translate ID OFFSET");
		cmd.verb = Verb::translate;
	} else if (is(0, "pd") && is(1, "alloc") && n == 2) {
		cmd.verb = Verb::pd_alloc;
	} else if (is(0, "pd") && is(1, "free") && n == 3) {
		if (!parse_u32(w[2], &cmd.pd))
			return fail(error, "usage: pd free PD");
		cmd.verb = Verb::pd_free;
	} else if (is(0, "mkey") && is(1, "create")) {
		if (n < 5 || !parse_number(w[2], &cmd.id) || !parse_size(w[3], &cmd.offset) ||
		    !parse_size(w[4], &cmd.len) || cmd.len == 0)
			return fail(error,
				    "usage: mkey create ID OFFSET LEN [access lr,lw,rr,rw,a] "
				    "[pd PD]");
		for (size_t i = 5; i < n; i++) {
			if (w[i] == "access" && i + 1 < n) {
				if (!parse_access(w[++i], &cmd.access))
					return fail(error, "access: a list of lr, lw, rr, rw, a");
			} else if (w[i] == "pd" && i + 1 < n) {
				if (!parse_u32(w[++i], &cmd.pd))
					return fail(error, "pd: expected a PD number");
			} else {
				return fail(error, "mkey create: unknown word '" +
							   std::string(w[i]) + "'");
			}
		}
		cmd.verb = Verb::mkey_create;
	} else if (is(0, "mkey") && (is(1, "query") || is(1, "destroy")) && n == 3) {
		if (!parse_u32(w[2], &cmd.index))
			return fail(error, "usage: mkey query|destroy INDEX");
		cmd.verb = is(1, "query") ? Verb::mkey_query : Verb::mkey_destroy;
	} else {
		return fail(error, "unknown command '" + std::string(line.substr(0, 64)) +
					   "' (try 'help')");
	}
	*out = cmd;
	return 0;
}

const char *command_help()
{
	return "commands:\n"
	       "  help                                     this text\n"
	       "  pool create SIZE [page 4k|2m|1g] [node N] [fallback]\n"
	       "                                           a pool, DMA-mapped on the device\n"
	       "  pool destroy ID                          unmap and free a pool\n"
	       "  show pools | show pool ID                pool layout: pages, IOVA, NUMA node\n"
	       "  show device                              the device: capabilities, pages, PDs, "
	       "mkeys\n"
	       "  translate ID OFFSET                      IOVA of a byte of a pool\n"
	       "  pd alloc | pd free PD                    protection domains\n"
	       "  mkey create ID OFFSET LEN [access lr,lw,rr,rw,a] [pd PD]\n"
	       "                                           an MTT mkey over pool bytes "
	       "(CREATE_MKEY)\n"
	       "  mkey query INDEX | mkey destroy INDEX    QUERY_MKEY, DESTROY_MKEY\n"
	       "  rdma                                     connect the two ports: RDMA WRITE, "
	       "READ, atomics,\n"
	       "                                           UMR, and an access the device refuses\n"
	       "  demo                                     what the main job shows\n"
	       "  quit                                     leave\n";
}

} // namespace nicmr::testmr
