/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Command encoders and decoders: each function builds one PRM command through the layout table,
 * runs it on a CmdTransport, and decodes the output. They know nothing of how the bytes travel,
 * so the command queue and DEVX run the very same encodings.
 *
 * Every function returns 0 or a negative errno: the transport's errors (mlx5_cmd.h, including
 * the status mapping), or -EINVAL for arguments the encoder refuses before anything is sent, or
 * -ENOMEM when the encoding buffer cannot be allocated. Slow path.
 */
#ifndef NICMR_MLX5_COMMANDS_H
#define NICMR_MLX5_COMMANDS_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mlx5_cmd.h"
#include "mlx5_prm.h"

namespace nicmr::mlx5 {

/* The mkey context (mkc) fields nicmr sets and reads. */
struct MkeyContext {
	uint32_t access_mode = prm::access_mode::mtt;
	bool free = false;   /* 1: the mkey exists but matches no access until a UMR fills it */
	bool umr_en = false; /* may be changed by UMR */
	bool lr = true, lw = false, rr = false, rw = false, a = false;
	bool length64 = false;
	bool en_rinval = false;
	uint32_t pd = 0;
	uint32_t qpn = prm::mkc::qpn_any;
	uint8_t variant = 0; /* mkey_7_0 */
	uint64_t start_addr = 0;
	uint64_t len = 0;
	uint32_t log_page_size = 12;		/* 12..31 */
	uint32_t translations_octword_size = 0; /* 0 on create: from the entries given */
};

/* One MTT entry: a page IOVA (aligned to the mkey's page size) and, with pg_access, enables. */
struct MttEntry {
	uint64_t iova = 0;
	bool rd_en = true;
	bool wr_en = true;
};

struct KlmEntry {
	uint32_t byte_count = 0;
	uint32_t mkey = 0;
	uint64_t address = 0;
};

struct MkeyCreate {
	MkeyContext ctx;
	bool pg_access = false; /* the device checks each MTT entry's rd_en/wr_en */
	/* 0: the device picks. Else the index to create (needs Caps::mkey_by_index). */
	uint32_t index = 0;
	std::span<const MttEntry> mtt; /* access_mode mtt */
	std::span<const KlmEntry> klm; /* access_mode klm */
};

struct MkeyQuery {
	MkeyContext ctx;
	std::vector<MttEntry> mtt; /* up to the entries asked for, when access_mode is mtt */
	std::vector<KlmEntry> klm; /* likewise for klm */
};

void encode_mkc(const MkeyContext &ctx, void *mkc) noexcept;
MkeyContext decode_mkc(const void *mkc) noexcept;

/*
 * CREATE_MKEY input bytes for c (header, mkc, translations): what both transports send.
 * -EINVAL: both mtt and klm given, entries that do not match access_mode, log_page_size above
 * 31, index above 24 bits. -ENOMEM.
 */
int encode_create_mkey(const MkeyCreate &c, std::vector<uint8_t> *in);

int enable_hca(CmdTransport &t);
int disable_hca(CmdTransport &t);
int init_hca(CmdTransport &t);
/* profile: prm::teardown_hca_in::profile_graceful_close or _force_close. */
int teardown_hca(CmdTransport &t, uint16_t profile);
int query_issi(CmdTransport &t, uint16_t *current, uint32_t *supported_dw0);
int set_issi(CmdTransport &t, uint16_t issi);
/* op_mod: prm::query_pages_op_mod; num_pages > 0: the device wants pages, < 0: returns them.
 * function_id (optional): the function the pages are for, to echo into MANAGE_PAGES. */
int query_pages(CmdTransport &t, uint16_t op_mod, int32_t *num_pages,
		uint16_t *function_id = nullptr);
/* Gives the device 4 KiB pages at these IOVAs for function_id (what QUERY_PAGES or the
 * PAGE_REQUEST event named, as rdma-core's mlx5_vfio_give_pages echoes it). -EINVAL when
 * empty. */
int manage_pages_give(CmdTransport &t, std::span<const uint64_t> iovas, uint16_t function_id = 0);
/* Asks for up to count pages back; their IOVAs are appended to *returned. */
int manage_pages_take(CmdTransport &t, uint32_t count, std::vector<uint64_t> *returned,
		      uint16_t function_id = 0);
/* MANAGE_PAGES alloc_fail: the driver cannot give what a PAGE_REQUEST asked for (Linux
 * pagealloc.c, page_notify_fail). */
int manage_pages_cant_give(CmdTransport &t, uint16_t function_id);
/* ACCESS_REG write of HOST_ENDIANNESS with this host's value (rdma-core mlx5_vfio_set_hca_ctrl,
 * Linux main.c set_hca_ctrl). */
int set_host_endianness(CmdTransport &t);
/* cap receives query_hca_cap_out::capability_size bytes. quiet: a refusal is not logged. */
int query_hca_cap(CmdTransport &t, uint16_t type, uint16_t mode, void *cap, bool quiet = false);
/* cap holds set_hca_cap_in::capability_size bytes. */
int set_hca_cap(CmdTransport &t, uint16_t type, const void *cap);
/* QUERY_SPECIAL_CONTEXTS: the device's reserved lkey (resd_lkey). */
int query_special_contexts(CmdTransport &t, uint32_t *resd_lkey);
/* One entry of a port's GID table (QUERY_ROCE_ADDRESS). */
struct RoceAddress {
	std::array<uint8_t, 16> gid{}; /* network order; all zeroes: an empty entry */
	uint32_t l3_type = 0;	       /* prm::roce_addr_layout::l3_type_* */
	uint32_t version = 0;	       /* prm::roce_addr_layout::version_2 for RoCEv2 */
};
/* QUERY_ROCE_ADDRESS of entry index of port (1..2), as Linux's mlx5dr_cmd_query_gid
 * (drivers/net/ethernet/mellanox/mlx5/core/steering/dr_cmd.c) reads it. -EINVAL: null out,
 * index above 16 bits or port above 15 (nothing sent); the device's errors. */
int query_roce_address(CmdTransport &t, uint32_t port, uint32_t index, RoceAddress *out);
/* A port's PMTU register (hardware MTUs in bytes: the netdev MTU + reg_pmtu::l2_overhead). */
struct PortMtu {
	uint32_t max = 0;
	uint32_t admin = 0;
	uint32_t oper = 0;
};
/* ACCESS_REG read of PMTU for port (1..255), as Linux's mlx5_query_port_mtu
 * (drivers/net/ethernet/mellanox/mlx5/core/port.c) reads it. -EINVAL: null out or port out of
 * range (nothing sent); the device's errors. */
int query_pmtu(CmdTransport &t, uint32_t port, PortMtu *out);
int alloc_pd(CmdTransport &t, uint32_t *pd);
int dealloc_pd(CmdTransport &t, uint32_t pd);
int create_mkey(CmdTransport &t, const MkeyCreate &c, uint32_t *index);
/* Reads the mkc and up to max_entries translation entries. */
int query_mkey(CmdTransport &t, uint32_t index, size_t max_entries, MkeyQuery *out);
int destroy_mkey(CmdTransport &t, uint32_t index);

/*
 * nicmr device-model extensions (prm::opcode::nicmr_*; no ConnectX has them, it answers
 * BAD_OP, which the transport gives as -EOPNOTSUPP). Send them only when the ext_cap bits say
 * the device has them (Device::set_mkey_ext checks).
 */
struct MkeyExtState {
	uint32_t flags = 0;	   /* prm::mkey_ext bits (spent only in a query's answer) */
	uint64_t counter_iova = 0; /* with mkey_ext::counter: 8-aligned, mapped */
};
/* Replaces the extension state of live mkey index. -EINVAL: index above 24 bits, a flag
 * outside mkey_ext::settable, an unaligned counter IOVA (nothing sent). */
int set_mkey_ext(CmdTransport &t, uint32_t index, const MkeyExtState &st);
int query_mkey_ext(CmdTransport &t, uint32_t index, MkeyExtState *st);

} // namespace nicmr::mlx5

#endif
