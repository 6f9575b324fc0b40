/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr's command language: one command a line, words separated by blanks, as in testpmd.
 *
 * One table (command_table()) describes every command: its help section, its pattern and one
 * line of help. Everything else is made from it: parse_command() (used for -c, -f, standard
 * input, the interactive prompt, and the fuzz target), `help` and `help SECTION`, the "usage:"
 * messages, and the interactive prompt's completion and per-token help (testmr_cli.cpp builds
 * librte_cmdline instances from the table at start-up).
 *
 * A pattern is a list of items separated by blanks:
 *   word, w1|w2     keywords (leading items only): the words that name the command
 *   NAME            a parameter (its kind: param_help() below)
 *   [word VALUE]    an option: the word, then a value (a NAME or a list of choices a|b|c)
 *   [word]          an option without a value (a flag)
 *   [NAME]          an optional last parameter
 * Parameters come in the order of the pattern, options after them in any order.
 *
 * parse_command() turns untrusted text into a Command or an error message and never fails on
 * bad input in any other way (it is a fuzz target). Sizes take a K, M or G suffix (powers of
 * 1024); numbers may be decimal or 0x-hex.
 */
#ifndef NICMR_TESTMR_CMD_H
#define NICMR_TESTMR_CMD_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nicmr_parse.h"
#include "testmr_exchange.h"

namespace nicmr::testmr {

enum class Verb {
	none, /* an empty line or a comment (#) */
	help,
	pool_create,
	pool_destroy,
	show_pools,
	show_pool,
	show_device,
	translate,
	pd_alloc,
	pd_free,
	mkey_create,
	mkey_query,
	mkey_destroy,
	rdma,
	demo,
	quit,
	/* The registration engine, through the native API (include/nicmr/nicmr.h). */
	mr_pool,
	mr_reg,
	mr_regv,
	mr_sub,
	mr_dereg,
	show_mr,
	show_mrs,
	key_lookup,
	key_raw,
	key_map,
	window_bind,
	window_unbind,
	show_violations,
	cntr_alloc,
	cntr_free,
	mr_bind,
	mr_unbind,
	mr_enable,
	show_cntrs,
	mr_fill,
	mr_dump,
	mr_advise,
	/* nicmr inside DPDK (EAL mode): the attached memory, mempools. */
	show_dpdk,
	mempool_create,
	mempool_destroy,
	show_mempools,
	/* Queues of the registration engine's device (native API data path). */
	cq_create,
	cq_destroy,
	qp_create,
	qp_connect,
	qp_connect_remote,
	qp_exchange_listen,
	qp_exchange_connect,
	qp_pingpong,
	qp_recover,
	qp_destroy,
	post_write,
	post_read,
	post_fadd,
	post_cswap,
	poll,
	show_cq,
	show_cqs,
	show_qp,
	show_qps,
	/* Figures of the registration engine, as the benchmark programs measure them. */
	bench_reg,
	bench_lookup,
	bench_rdma,
};

/* One segment of `mr regv`: bytes [offset, offset + len) of the pool. */
struct Segment {
	uint64_t offset = 0;
	uint64_t len = 0;
};

/* The most segments `mr regv` takes on one line (the native API takes up to NICMR_MAX_IOV, 64). */
constexpr size_t kMaxSegments = 64;
/* The most completions one `poll` takes. */
constexpr uint32_t kMaxPoll = 256;
/* The most operations a `bench` repetition runs. */
constexpr uint64_t kMaxBenchCount = 10000000;
/* The longest raw key `key map` takes, in bytes (the native API's is NICMR_RAW_KEY_SIZE, 64). */
constexpr size_t kMaxRawKey = 64;
/* The most bytes one `mr dump` prints. */
constexpr uint64_t kMaxDump = 4096;
/* The most round trips one `qp pingpong` makes. */
constexpr uint64_t kMaxIters = 1000000;
/* The longest HOST `qp exchange connect` takes (a DNS name's limit). */
constexpr size_t kMaxHost = 253;

struct Command {
	Verb verb = Verb::none;
	uint64_t size = 0;	/* pool create, mr pool */
	uint64_t page_size = 0; /* pool create, mr pool: 0 = default (2 MiB) */
	int node = -1;		/* pool create */
	bool fallback = false;	/* pool create, mr pool */
	uint64_t id = 0;	/* pool destroy, show pool, translate, mr reg/regv (pool), window */
	uint64_t offset = 0; /* translate, mkey create, mr reg, mr sub, key lookup, window bind */
	uint64_t len = 0;    /* mkey create, mr reg, mr sub, key lookup, window bind */
	bool has_offset = false;    /* key lookup: offset given */
	bool has_len = false;	    /* key lookup: len given */
	uint32_t pd = 0;	    /* pd free, mkey create (0: the session's first PD) */
	uint32_t access = 0;	    /* mkey create: Access bits; 0 = the default (lr,lw,rr,rw) */
	uint32_t index = 0;	    /* mkey query, mkey destroy */
	uint32_t key = 0;	    /* mr sub, mr dereg, show mr, key lookup/raw, window bind */
	uint64_t mr_access = 0;	    /* mr reg/regv/sub, key lookup, window bind: MrAccess bits */
	int64_t filter_pool = -1;   /* show mrs: only MRs in this engine pool (-1: all) */
	uint64_t filter_access = 0; /* show mrs: only MRs that grant all these MrAccess bits */
	uint64_t filter_min = 0;    /* show mrs: only MRs of at least this many bytes */
	uint64_t filter_max = UINT64_MAX; /* show mrs: only MRs of at most this many bytes */
	uint64_t peer = 0;		  /* qp connect: the session's QP to connect to */
	uint32_t port = 1;		  /* qp create: 1 or 2 */
	uint32_t depth = 64;		  /* cq create, qp create */
	uint32_t recv_depth = 0;	  /* qp create: receive queue depth (0: none) */
	uint64_t iters = 0;		  /* qp pingpong: round trips */
	bool client = false;		  /* qp pingpong: send first */
	uint32_t rkey = 0;		  /* post: the remote key */
	uint64_t roffset = 0;		  /* post: offset in the remote key's region */
	uint64_t operand = 0;		  /* post fadd: ADD; post cswap: COMPARE */
	uint64_t operand2 = 0;		  /* post cswap: SWAP */
	bool has_wr_id = false;		  /* post: wrid given */
	uint64_t wr_id = 0;		  /* post: the work request's id */
	bool inline_data = false;	  /* post write: NICMR_SEND_INLINE */
	bool unsignaled = false;	  /* post: no NICMR_SEND_SIGNALED */
	bool rma_event = false;		  /* mr reg: NICMR_MR_RMA_EVENT */
	uint32_t max = 16;		  /* poll: at most this many completions */
	uint64_t count = 0;		  /* bench: operations per repetition (0: the default) */
	bool json = false;		  /* show ...: one JSON object instead of text */
	std::string word;		  /* help: the section (empty: the list of sections) */
	std::vector<Segment> segments;	  /* mr regv */
	std::vector<uint8_t> raw;	  /* key map: the raw key's bytes */

	/* A remote QP's address (qp connect remote) and the exchange (qp exchange). */
	std::array<uint8_t, 16> gid{};		/* the peer's GID */
	uint32_t remote_qpn = 0;		/* the peer's QPN */
	uint32_t remote_psn = 0;		/* the peer's first send PSN */
	uint32_t mtu = 0;			/* path MTU in bytes; 0: the default (1024) */
	uint32_t timeout_s = kExchangeTimeoutS; /* seconds per blocking step */
	std::string host;			/* qp exchange connect */
	uint32_t tcp_port = 0;			/* qp exchange: the TCP port */
	bool has_exchange_mr = false;		/* qp exchange: mr KEY given */
	uint32_t exchange_mr = 0;		/* qp exchange: the MR offered to the peer */
	uint8_t byte = 0;			/* mr fill */
	uint32_t advice = 0; /* mr advise: NICMR_ADVISE_MR_ADVICE_* (prefetch, _write, no_fault) */
	bool flush = false;  /* mr advise: NICMR_ADVISE_MR_FLAG_FLUSH */
};

/* mkey access bits as testmr spells them (mkey create: the device's own rights). */
enum Access : uint32_t {
	access_lr = 1u << 0,
	access_lw = 1u << 1,
	access_rr = 1u << 2,
	access_rw = 1u << 3,
	access_a = 1u << 4,
};

/*
 * Registration access as testmr spells it (mr, key, window commands): the native API's
 * NICMR_ACCESS_* bits, one name each, the same values (testmr_engine.cpp checks that they are).
 */
enum MrAccess : uint64_t {
	mr_send = 1ull << 0,
	mr_recv = 1ull << 1,
	mr_read = 1ull << 2,
	mr_write = 1ull << 3,
	mr_remote_read = 1ull << 4,
	mr_remote_write = 1ull << 5,
	mr_local_write = 1ull << 6,
	mr_remote_atomic = 1ull << 7,
	mr_mw_bind = 1ull << 8,
	mr_odp = 1ull << 9, /* NICMR_ACCESS_ON_DEMAND: an on-demand-paging MR (doc/odp.md) */
};
/* "read,remote_read" for MrAccess bits; "none" for 0. */
std::string format_mr_access(uint64_t bits);
/* The names, in bit order (completion and help). */
std::span<const char *const> mr_access_names();

/* One command of the table. */
struct CommandSpec {
	const char *section; /* its help section */
	const char *pattern; /* the words, parameters and options, as above */
	const char *help;    /* one line */
	Verb verb;
};

/* A help section: its name and one line about it. */
struct SectionSpec {
	const char *name;
	const char *help;
};

/* The table: every command testmr knows, in the order `help` lists them. */
std::span<const CommandSpec> command_table();
/* The sections, in the order `help` lists them. */
std::span<const SectionSpec> section_table();
/* What a parameter NAME of a pattern takes ("a size: 64, 0x40, 2M, 1g"); "" when unknown. */
const char *param_help(std::string_view name);

/* 0 and *out on success; -EINVAL and a message in *error otherwise. */
int parse_command(std::string_view line, Command *out, std::string *error);

/* Numbers and sizes as lib/common parses them: "64", "0x40", "2M", "1g" (nicmr_parse.h). */
using nicmr::parse_number;
using nicmr::parse_size;

/*
 * The items of a command pattern (the command table's pattern strings: keywords, PARAMS,
 * [option VALUE] and [PARAM]), split once for the parser and the prompt's completion. Views
 * into the pattern, which is static.
 */
struct PatternItem {
	enum Kind { keyword, param, option, optional_param } kind;
	std::string_view word;	/* the keyword(s), the parameter's name, the option's word */
	std::string_view value; /* an option's value: a NAME or choices; empty for a flag */
};
constexpr size_t kMaxPatternItems = 12;
struct PatternItems {
	std::array<PatternItem, kMaxPatternItems> it;
	size_t n = 0;
	size_t keywords = 0; /* how many leading keyword items */
};
PatternItems pattern_items(std::string_view pattern);
/* A parameter's name (upper case first letter), not a keyword. */
bool is_param_name(std::string_view w);

/* A page size: 4k, 2m or 1g (any spelling parse_size takes of those three). false otherwise. */
bool parse_page_size(std::string_view word, uint64_t *out);

/* A GID word: 32 hex digits (the exchange record's form), an IPv6 address ("fe80::1",
 * "::ffff:10.0.0.1") or an IPv4 address ("10.0.0.1", as its IPv4-mapped GID). false for
 * anything else. */
bool parse_gid(std::string_view word, std::array<uint8_t, 16> *out);

/* A NUMA node number, decimal or 0x-hex, 0..kMaxNode. false otherwise. */
constexpr int kMaxNode = 1023;
bool parse_node(std::string_view word, int *out);

/* "read,remote_write" (mr_access_names(), or "none") into MrAccess bits. false otherwise. */
bool parse_mr_access(std::string_view word, uint64_t *out);

/* The help text: the sections (section empty), or one section's commands. -EINVAL and an
 * empty text for a section that does not exist. */
int command_help(std::string_view section, std::string *text);
/* The help text of every command (testmr --help). */
std::string command_help_all();

} // namespace nicmr::testmr

#endif
