/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr's command language: one command a line, words separated by blanks, as in testpmd.
 * parse_command() turns untrusted text into a Command or an error message and never fails on bad
 * input in any other way (it is a fuzz target).
 *
 *   help                                  list the commands
 *   pool create SIZE [page 4k|2m|1g] [node N] [fallback]
 *   pool destroy ID
 *   show pools | show pool ID | show device
 *   translate ID OFFSET                   IOVA of a pool byte
 *   pd alloc | pd free PD
 *   mkey create ID OFFSET LEN [access lr,lw,rr,rw,a] [pd PD]
 *   mkey query INDEX | mkey destroy INDEX
 *   rdma                                  RDMA between the two ports, then a refused access
 *   demo                                  what the main job shows
 *   quit
 *
 * Sizes take a K, M or G suffix (powers of 1024); numbers may be decimal or 0x-hex.
 */
#ifndef NICMR_TESTMR_CMD_H
#define NICMR_TESTMR_CMD_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "nicmr_parse.h"

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
};

struct Command {
	Verb verb = Verb::none;
	uint64_t size = 0;	/* pool create */
	uint64_t page_size = 0; /* pool create: 0 = default (2 MiB) */
	int node = -1;		/* pool create */
	bool fallback = false;	/* pool create */
	uint64_t id = 0;	/* pool destroy, show pool, translate */
	uint64_t offset = 0;	/* translate, mkey create */
	uint64_t len = 0;	/* mkey create */
	uint32_t pd = 0;	/* pd free, mkey create (0: the session's first PD) */
	uint32_t access = 0;	/* mkey create: Access bits; 0 = the default (lr,lw,rr,rw) */
	uint32_t index = 0;	/* mkey query, mkey destroy */
};

/* mkey access bits as testmr spells them. */
enum Access : uint32_t {
	access_lr = 1u << 0,
	access_lw = 1u << 1,
	access_rr = 1u << 2,
	access_rw = 1u << 3,
	access_a = 1u << 4,
};

/* 0 and *out on success; -EINVAL and a message in *error otherwise. */
int parse_command(std::string_view line, Command *out, std::string *error);

/* Numbers and sizes as lib/common parses them: "64", "0x40", "2M", "1g" (nicmr_parse.h). */
using nicmr::parse_number;
using nicmr::parse_size;

/* A page size: 4k, 2m or 1g (any spelling parse_size takes of those three). false otherwise. */
bool parse_page_size(std::string_view word, uint64_t *out);

/* A NUMA node number, decimal or 0x-hex, 0..kMaxNode. false otherwise. */
constexpr int kMaxNode = 1023;
bool parse_node(std::string_view word, int *out);

/* The help text. */
const char *command_help();

} // namespace nicmr::testmr

#endif
