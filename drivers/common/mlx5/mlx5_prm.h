/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The mlx5 PRM layout table: every command-interface structure nicmr uses, described once, field
 * by field, and shared by the driver (drivers/mlx5) and the device model (drivers/emu/mlx5).
 *
 * A Field is a bit offset counted from the most significant bit of the structure (bit 0 is the
 * top bit of byte 0), as in mlx5_ifc.h, and a width of 1..64 bits. Everything the device sees is
 * big-endian; get() and set() are the only places that convert, so no PRM shift or mask appears
 * anywhere else in the tree.
 *
 *   byte:     0        1        2        3        4 ...
 *   bit_off:  0....7   8...15   16..23   24..31   32 ...
 *             MSB of byte 0 is bit_off 0; a field may start and end anywhere.
 *
 * Offsets come from the public PRM facts in the team's PRM.md and from mlx5_ifc.h (rdma-core,
 * Linux). Where nicmr had to choose (mkey at a chosen index, extension capabilities) the comment
 * at the field says so; doc/prm-layout.md lists those choices.
 */
#ifndef NICMR_MLX5_PRM_H
#define NICMR_MLX5_PRM_H

#include <cstddef>
#include <cstdint>

namespace nicmr::mlx5::prm {

struct Field {
	uint32_t bit_off; /* from the MSB of the structure */
	uint32_t bits;	  /* 1..64 */
};

/* Byte offset of the 32-bit big-endian word that holds the start of f. */
constexpr size_t dword_byte_offset(Field f) noexcept
{
	return size_t{f.bit_off / 32} * 4;
}
/* The same field, relative to the 32-bit word that holds it (for BAR registers). */
constexpr Field in_dword(Field f) noexcept
{
	return Field{f.bit_off % 32, f.bits};
}
constexpr size_t byte_offset(Field f) noexcept
{
	return f.bit_off / 8;
}

/* Whether v fits in the field's width (arguments are checked before they are masked). */
constexpr bool fits(Field f, uint64_t v) noexcept
{
	return f.bits >= 64 || v < (uint64_t{1} << f.bits);
}

/*
 * Reads a field: any width 1..64, any alignment; the result is right-aligned in host order.
 * Walks at most 9 bytes, MSB first, so the structure's big-endian order never leaks out.
 * Hot path (WQE building, CQE parsing): no lock, no allocation, no system call.
 */
inline uint64_t get(const void *base, Field f) noexcept
{
	const auto *p = static_cast<const uint8_t *>(base);
	uint64_t v = 0;
	uint32_t pos = f.bit_off;
	uint32_t left = f.bits;
	while (left != 0) {
		uint32_t in_byte = pos % 8;
		uint32_t take = 8 - in_byte < left ? 8 - in_byte : left;
		uint32_t chunk = (p[pos / 8] >> (8 - in_byte - take)) & ((1u << take) - 1);
		v = v << take | chunk;
		pos += take;
		left -= take;
	}
	return v;
}

/*
 * Writes a field; v is masked to the width; the bits around the field are left as they were.
 * Hot path like get(). Not atomic: a byte shared with a device thread needs its own ordering
 * (the command queue's ownership byte is stored and loaded through std::atomic_ref).
 */
inline void set(void *base, Field f, uint64_t v) noexcept
{
	auto *p = static_cast<uint8_t *>(base);
	if (f.bits < 64)
		v &= (uint64_t{1} << f.bits) - 1;
	uint32_t pos = f.bit_off;
	uint32_t left = f.bits;
	while (left != 0) {
		uint32_t in_byte = pos % 8;
		uint32_t take = 8 - in_byte < left ? 8 - in_byte : left;
		uint32_t shift = 8 - in_byte - take;
		uint32_t mask = ((1u << take) - 1) << shift;
		auto chunk = static_cast<uint32_t>(v >> (left - take)) & ((1u << take) - 1);
		p[pos / 8] = static_cast<uint8_t>((p[pos / 8] & ~mask) | (chunk << shift));
		pos += take;
		left -= take;
	}
}

/* Initialisation segment at the start of BAR 0. */
namespace init_seg {
/* Bytes up to and including health_counter: BAR 0 must be at least this large. */
inline constexpr size_t size = 0x1014;
inline constexpr Field fw_rev_minor{0x000, 16};
inline constexpr Field fw_rev_major{0x010, 16};
inline constexpr Field cmdif_rev{0x020, 16}; /* must be cmdif_rev_supported */
inline constexpr Field fw_rev_subminor{0x030, 16};
inline constexpr Field cmdq_addr_h{0x080, 32};
/* Low 32 bits of the queue's IOVA; the queue is 4 KiB aligned, so the bits below 12 are not
 * address bits: they carry nic_interface and the device's log_sz / log_stride. */
inline constexpr Field cmdq_addr_l{0x0a0, 32};
inline constexpr Field nic_interface{0x0b6, 2};
inline constexpr Field log_cmdq_size{0x0b8, 4};	  /* entries = 1 << log_cmdq_size (device sets) */
inline constexpr Field log_cmdq_stride{0x0bc, 4}; /* bytes between entries (device sets) */
inline constexpr Field cmd_dbell{0x0c0, 32};	  /* write 1 << slot */
inline constexpr Field initializing{0xfe0, 1};	  /* 1 while the device boots */
inline constexpr Field nic_interface_supported{0xfe5, 3};
inline constexpr Field health_syndrome{0x23d * 8, 8}; /* health buffer at 0x200, synd byte 0x3d */
inline constexpr Field health_ext_syndrome{0x23e * 8, 16};
inline constexpr Field health_counter{0x1010 * 8, 32};

inline constexpr uint32_t cmdif_rev_supported = 5;
inline constexpr uint32_t cmdq_align = 4096; /* queue memory: one 4 KiB aligned page */

/* cmd_dbell value that rings one slot. */
constexpr uint32_t cmd_dbell_slot(uint32_t slot) noexcept
{
	return uint32_t{1} << slot;
}
/* The queue's IOVA as the values of cmdq_addr_h and cmdq_addr_l. */
constexpr uint32_t cmdq_addr_high(uint64_t iova) noexcept
{
	return static_cast<uint32_t>(iova >> 32);
}
constexpr uint32_t cmdq_addr_low(uint64_t iova) noexcept
{
	return static_cast<uint32_t>(iova);
}
/* The queue's IOVA from the two registers' values (cmdq_addr_l's low 12 bits are not address). */
constexpr uint64_t cmdq_addr(uint64_t high, uint64_t low) noexcept
{
	return high << 32 | (low & ~uint64_t{cmdq_align - 1});
}
} // namespace init_seg

/* Command queue entry: 64 bytes, slot n at cmdq + (n << log_cmdq_stride). */
namespace cmdq_entry {
inline constexpr size_t size = 64;
inline constexpr Field type{0x000, 8};
inline constexpr Field input_length{0x020, 32};
inline constexpr Field input_mailbox_ptr{0x040, 64};
inline constexpr size_t inline_input = 0x10; /* byte offset of the first 16 input bytes */
inline constexpr size_t inline_output = 0x20;
inline constexpr size_t inline_size = 16;
inline constexpr Field output_mailbox_ptr{0x180, 64};
inline constexpr Field output_length{0x1c0, 32};
inline constexpr Field token{0x1e0, 8};
inline constexpr Field signature{0x1e8, 8};
inline constexpr Field status{0x1f8, 7}; /* delivery status, see delivery_status */
inline constexpr Field ownership{0x1ff, 1};

inline constexpr uint32_t type_pcie = 7;
inline constexpr uint32_t owner_sw = 0;
inline constexpr uint32_t owner_hw = 1;

/* Byte offset of a slot in the queue. */
constexpr size_t slot_offset(uint32_t slot, uint32_t log_stride) noexcept
{
	return size_t{slot} << log_stride;
}
} // namespace cmdq_entry

/* Status in the command queue entry: whether the command was delivered at all. */
namespace delivery_status {
inline constexpr uint32_t ok = 0x0;
inline constexpr uint32_t signature_err = 0x1;
inline constexpr uint32_t token_err = 0x2;
inline constexpr uint32_t bad_block_number = 0x3;
inline constexpr uint32_t output_ptr_align_err = 0x4;
inline constexpr uint32_t input_ptr_align_err = 0x5;
inline constexpr uint32_t firmware_err = 0x6;
inline constexpr uint32_t input_length_err = 0x7;
inline constexpr uint32_t output_length_err = 0x8;
inline constexpr uint32_t reserved_not_zero = 0x9;
inline constexpr uint32_t bad_command_type = 0x10;
} // namespace delivery_status

/* Mailbox block: input beyond the 16 inline bytes, and output beyond 16, chain through these. */
namespace mailbox {
inline constexpr size_t size = 576;
inline constexpr size_t data_size = 512; /* data at byte 0 */
inline constexpr size_t align = 1024;	 /* size rounded up to a power of two */
inline constexpr Field next_ptr{0x230 * 8, 64};
inline constexpr Field block_num{0x238 * 8, 32};
inline constexpr Field token{0x23d * 8, 8};
inline constexpr Field ctrl_sig{0x23e * 8, 8};
inline constexpr Field sig{0x23f * 8, 8};
} // namespace mailbox

/* The first 8 bytes of every command input. */
namespace cmd_hdr_in {
inline constexpr size_t size = 8;
inline constexpr Field opcode{0x00, 16};
inline constexpr Field uid{0x10, 16};
inline constexpr Field op_mod{0x30, 16};
} // namespace cmd_hdr_in

/* The first 8 bytes of every command output. */
namespace cmd_hdr_out {
inline constexpr size_t size = 8;
inline constexpr Field status{0x00, 8};
inline constexpr Field syndrome{0x20, 32};
} // namespace cmd_hdr_out

namespace opcode {
inline constexpr uint16_t query_hca_cap = 0x100;
inline constexpr uint16_t init_hca = 0x102;
inline constexpr uint16_t teardown_hca = 0x103;
inline constexpr uint16_t enable_hca = 0x104;
inline constexpr uint16_t disable_hca = 0x105;
inline constexpr uint16_t query_pages = 0x107;
inline constexpr uint16_t manage_pages = 0x108;
inline constexpr uint16_t set_hca_cap = 0x109;
inline constexpr uint16_t query_issi = 0x10a;
inline constexpr uint16_t set_issi = 0x10b;
inline constexpr uint16_t create_mkey = 0x200;
inline constexpr uint16_t query_mkey = 0x201;
inline constexpr uint16_t destroy_mkey = 0x202;
inline constexpr uint16_t create_eq = 0x301;
inline constexpr uint16_t create_cq = 0x400;
inline constexpr uint16_t destroy_cq = 0x401;
inline constexpr uint16_t create_qp = 0x500;
inline constexpr uint16_t destroy_qp = 0x501;
inline constexpr uint16_t rst2init_qp = 0x502;
inline constexpr uint16_t init2rtr_qp = 0x503;
inline constexpr uint16_t rtr2rts_qp = 0x504;
inline constexpr uint16_t qp_2err = 0x507;
inline constexpr uint16_t qp_2rst = 0x50a;
inline constexpr uint16_t alloc_pd = 0x800;
inline constexpr uint16_t dealloc_pd = 0x801;
inline constexpr uint16_t alloc_uar = 0x802;
inline constexpr uint16_t access_reg = 0x805;
inline constexpr uint16_t create_umem = 0xa08;
inline constexpr uint16_t destroy_umem = 0xa0a;
} // namespace opcode

/* Command status (cmd_hdr_out::status). */
namespace status {
inline constexpr uint8_t ok = 0x00;
inline constexpr uint8_t internal_err = 0x01;
inline constexpr uint8_t bad_op = 0x02;
inline constexpr uint8_t bad_param = 0x03;
inline constexpr uint8_t bad_sys_state = 0x04;
inline constexpr uint8_t bad_resource = 0x05;
inline constexpr uint8_t resource_busy = 0x06;
inline constexpr uint8_t not_ready = 0x07;
inline constexpr uint8_t exceed_lim = 0x08;
inline constexpr uint8_t bad_res_state = 0x09;
inline constexpr uint8_t bad_index = 0x0a;
inline constexpr uint8_t no_resources = 0x0f;
inline constexpr uint8_t bad_qp_state = 0x10;
inline constexpr uint8_t bad_input_len = 0x50;
inline constexpr uint8_t bad_output_len = 0x51;
} // namespace status

/* Pages the driver gives the device (MANAGE_PAGES) are this size and aligned to it. */
inline constexpr size_t device_page_size = 4096;

/* Mkey context (mkc): 64 bytes; the same layout as struct mlx5_wqe_mkey_context_seg. */
namespace mkc {
inline constexpr size_t size = 64;
inline constexpr Field free{0x001, 1};
inline constexpr Field access_mode_4_2{0x003, 3};
inline constexpr Field umr_en{0x010, 1};
inline constexpr Field a{0x011, 1};
inline constexpr Field rw{0x012, 1};
inline constexpr Field rr{0x013, 1};
inline constexpr Field lw{0x014, 1};
inline constexpr Field lr{0x015, 1};
inline constexpr Field access_mode_1_0{0x016, 2};
inline constexpr Field qpn{0x020, 24};
inline constexpr Field mkey_7_0{0x038, 8};
inline constexpr Field length64{0x060, 1};
inline constexpr Field en_rinval{0x067, 1};
inline constexpr Field pd{0x068, 24};
inline constexpr Field start_addr{0x080, 64};
inline constexpr Field len{0x0c0, 64};
inline constexpr Field translations_octword_size{0x1a0, 32};
/* 5 bits here; the kernel header widens it to 6 at 0x1da: encode values below 32 only. */
inline constexpr Field log_page_size{0x1db, 5};

inline constexpr uint32_t qpn_any = 0xffffff;
} // namespace mkc

namespace access_mode {
inline constexpr uint32_t pa = 0;
inline constexpr uint32_t mtt = 1;
inline constexpr uint32_t klm = 2;
inline constexpr uint32_t ksm = 3;
inline constexpr uint32_t max = 0x1f; /* five bits over access_mode_4_2 and _1_0 */
} // namespace access_mode

/* The access mode is split over two fields in the mkc; these put it together. */
inline void set_access_mode(void *mkc_base, uint32_t mode) noexcept
{
	set(mkc_base, mkc::access_mode_1_0, mode & 0x3);
	set(mkc_base, mkc::access_mode_4_2, mode >> 2);
}
inline uint32_t get_access_mode(const void *mkc_base) noexcept
{
	return static_cast<uint32_t>(get(mkc_base, mkc::access_mode_4_2) << 2 |
				     get(mkc_base, mkc::access_mode_1_0));
}

/* MTT entry: one big-endian 64-bit page address whose low bits carry the page's enables. */
namespace mtt {
inline constexpr size_t size = 8;
inline constexpr Field address{0x00, 64}; /* page aligned: write the address, then the enables */
inline constexpr Field wr_en{0x3e, 1};
inline constexpr Field rd_en{0x3f, 1};
} // namespace mtt

/* KLM entry: 16 bytes, for indirect mkeys. */
namespace klm {
inline constexpr size_t size = 16;
inline constexpr Field byte_count{0x00, 32};
inline constexpr Field mkey{0x20, 32};
inline constexpr Field address{0x40, 64};
} // namespace klm

/* translations_octword_size / _actual_size: 16-byte units. */
constexpr uint64_t mtt_octwords(uint64_t entries) noexcept
{
	return (entries + 1) / 2;
}
constexpr uint64_t klm_octwords(uint64_t entries) noexcept
{
	return entries;
}

namespace create_mkey_in {
inline constexpr size_t size = 272;
/*
 * nicmr's choice, no public source names it: with the mkey_by_name capability enabled, a
 * non-zero value here asks for that mkey index (dw2[23:0], where the output carries the index).
 * 0 lets the device choose; the device model never hands out index 0.
 */
inline constexpr Field input_mkey_index{0x048, 24};
inline constexpr Field pg_access{0x060, 1};
inline constexpr Field mkey_umem_valid{0x061, 1};
inline constexpr size_t mkc_offset = 0x10; /* bytes */
inline constexpr Field translations_octword_actual_size{0x300, 32};
inline constexpr size_t translations_offset = 272; /* bytes; bit 0x880 */
} // namespace create_mkey_in

namespace create_mkey_out {
inline constexpr size_t size = 16;
inline constexpr Field mkey_index{0x048, 24};
} // namespace create_mkey_out

namespace query_mkey_in {
inline constexpr size_t size = 16;
inline constexpr Field mkey_index{0x048, 24};
inline constexpr Field pg_access{0x060, 1};
} // namespace query_mkey_in

namespace query_mkey_out {
inline constexpr size_t size = 272; /* followed by the translation entries the caller asks for */
inline constexpr size_t mkc_offset = 0x10;
inline constexpr size_t translations_offset = 272;
} // namespace query_mkey_out

namespace destroy_mkey_in {
inline constexpr size_t size = 16;
inline constexpr Field mkey_index{0x048, 24};
} // namespace destroy_mkey_in

namespace destroy_mkey_out {
inline constexpr size_t size = 16;
}

namespace alloc_pd_in {
inline constexpr size_t size = 16;
}
namespace alloc_pd_out {
inline constexpr size_t size = 16;
inline constexpr Field pd{0x048, 24};
} // namespace alloc_pd_out

namespace dealloc_pd_in {
inline constexpr size_t size = 16;
inline constexpr Field pd{0x048, 24};
} // namespace dealloc_pd_in
namespace dealloc_pd_out {
inline constexpr size_t size = 16;
}

/* QUERY_PAGES: op_mod says which stage's pages; num_pages is signed (negative: take back). */
namespace query_pages_in {
inline constexpr size_t size = 16;
inline constexpr Field embedded_cpu_function{0x040, 1};
inline constexpr Field function_id{0x050, 16};
} // namespace query_pages_in
namespace query_pages_out {
inline constexpr size_t size = 16;
inline constexpr Field embedded_cpu_function{0x040, 1};
inline constexpr Field function_id{0x050, 16};
inline constexpr Field num_pages{0x060, 32};
} // namespace query_pages_out
namespace query_pages_op_mod {
inline constexpr uint16_t boot = 1;
inline constexpr uint16_t init = 2;
inline constexpr uint16_t regular = 3;
} // namespace query_pages_op_mod

/* MANAGE_PAGES: page addresses (64-bit each, 4 KiB aligned) from byte 16 of input or output. */
namespace manage_pages_in {
inline constexpr size_t size = 16;
inline constexpr Field embedded_cpu_function{0x040, 1};
inline constexpr Field function_id{0x050, 16};
inline constexpr Field input_num_entries{0x060, 32};
inline constexpr size_t pas_offset = 16;
inline constexpr size_t pas_entry_size = 8;
} // namespace manage_pages_in
namespace manage_pages_out {
inline constexpr size_t size = 16;
inline constexpr Field output_num_entries{0x040, 32};
inline constexpr size_t pas_offset = 16;
inline constexpr size_t pas_entry_size = 8;
} // namespace manage_pages_out
namespace manage_pages_op_mod {
inline constexpr uint16_t alloc_fail = 0;
inline constexpr uint16_t give = 1;
inline constexpr uint16_t take = 2;
} // namespace manage_pages_op_mod
/* A page address inside the pas array of MANAGE_PAGES. */
inline constexpr Field pas_entry{0x00, 64};

/* ENABLE_HCA / DISABLE_HCA share their layout. */
namespace enable_hca_in {
inline constexpr size_t size = 16;
inline constexpr Field embedded_cpu_function{0x040, 1};
inline constexpr Field function_id{0x050, 16};
} // namespace enable_hca_in
namespace enable_hca_out {
inline constexpr size_t size = 16;
}
namespace disable_hca_in {
inline constexpr size_t size = 16;
inline constexpr Field embedded_cpu_function{0x040, 1};
inline constexpr Field function_id{0x050, 16};
} // namespace disable_hca_in
namespace disable_hca_out {
inline constexpr size_t size = 16;
}

namespace init_hca_in {
inline constexpr size_t size = 16;
}
namespace init_hca_out {
inline constexpr size_t size = 16;
}

namespace teardown_hca_in {
inline constexpr size_t size = 16;
inline constexpr Field profile{0x050, 16};
inline constexpr uint16_t profile_graceful_close = 0;
inline constexpr uint16_t profile_force_close = 1;
} // namespace teardown_hca_in
namespace teardown_hca_out {
inline constexpr size_t size = 16;
inline constexpr Field state{0x07f, 1}; /* force close: 1 = failed */
} // namespace teardown_hca_out

namespace query_issi_in {
inline constexpr size_t size = 16;
}
namespace query_issi_out {
inline constexpr size_t size = 112;
inline constexpr Field current_issi{0x050, 16};
/* Bit n set: ISSI n supported (the low word of the 80-byte supported_issi array). */
inline constexpr Field supported_issi_dw0{0x360, 32};
constexpr bool issi_supported(uint32_t supported_dw0, uint32_t issi) noexcept
{
	return issi < 32 && (supported_dw0 >> issi & 1) != 0;
}
} // namespace query_issi_out

namespace set_issi_in {
inline constexpr size_t size = 16;
inline constexpr Field current_issi{0x050, 16};
} // namespace set_issi_in
namespace set_issi_out {
inline constexpr size_t size = 16;
}

/* Capability types for QUERY_HCA_CAP / SET_HCA_CAP: op_mod = type << 1 | mode. */
namespace cap_type {
inline constexpr uint16_t general = 0x0;
inline constexpr uint16_t atomic = 0x3;
/*
 * nicmr device-model extensions (per-MR counters, single-use keys, ...). Absent on ConnectX:
 * there the query fails (BAD_PARAM / BAD_OP) and the driver takes it as "no extensions".
 * The number is far above the types ConnectX defines so that it can never mean one of them.
 */
inline constexpr uint16_t nicmr_ext = 0x7ff0;
} // namespace cap_type
namespace cap_mode {
inline constexpr uint16_t max = 0;
inline constexpr uint16_t current = 1;
} // namespace cap_mode
constexpr uint16_t cap_op_mod(uint16_t type, uint16_t mode) noexcept
{
	return static_cast<uint16_t>(type << 1 | mode);
}
/* The two halves of a capability op_mod (the device model decodes what cap_op_mod encodes). */
constexpr uint16_t cap_op_mod_type(uint16_t op_mod) noexcept
{
	return static_cast<uint16_t>(op_mod >> 1);
}
constexpr uint16_t cap_op_mod_mode(uint16_t op_mod) noexcept
{
	return static_cast<uint16_t>(op_mod & 1);
}

namespace query_hca_cap_in {
inline constexpr size_t size = 16;
inline constexpr Field other_function{0x040, 1};
inline constexpr Field function_id{0x050, 16};
} // namespace query_hca_cap_in
namespace query_hca_cap_out {
inline constexpr size_t capability_offset = 16;
inline constexpr size_t capability_size = 4096;
inline constexpr size_t size = capability_offset + capability_size;
} // namespace query_hca_cap_out

namespace set_hca_cap_in {
inline constexpr Field other_function{0x040, 1};
inline constexpr Field function_id{0x050, 16};
inline constexpr size_t capability_offset = 16;
inline constexpr size_t capability_size = 4096;
inline constexpr size_t size = capability_offset + capability_size;
} // namespace set_hca_cap_in
namespace set_hca_cap_out {
inline constexpr size_t size = 16;
}

/* General device capabilities (cmd_hca_cap), relative to the capability area. */
namespace hca_cap {
inline constexpr size_t size = 256;
inline constexpr Field log_max_qp_sz{0x088, 8};
inline constexpr Field log_max_qp{0x09b, 5};
inline constexpr Field log_max_cq_sz{0x0c8, 8};
inline constexpr Field log_max_cq{0x0db, 5};
inline constexpr Field log_max_eq_sz{0x0e0, 8};
inline constexpr Field log_max_mkey{0x0ea, 6};
inline constexpr Field log_max_eq{0x0fc, 4};
inline constexpr Field max_indirection{0x100, 8};
inline constexpr Field log_max_mrw_sz{0x109, 7};
inline constexpr Field umr_extended_translation_offset{0x118, 1};
inline constexpr Field null_mkey{0x119, 1};
inline constexpr Field log_max_klm_list_size{0x11a, 6};
inline constexpr Field num_ports{0x1b8, 8};
inline constexpr Field log_max_msg{0x1c3, 5};
inline constexpr Field umr_modify_entity_size_disabled{0x207, 1};
inline constexpr Field umr_modify_atomic_disabled{0x208, 1};
inline constexpr Field umr_indirect_mkey_disabled{0x209, 1};
inline constexpr Field umr_fence{0x20a, 2};
inline constexpr Field cmdif_checksum{0x210, 2};
inline constexpr Field atomic{0x21e, 1};
inline constexpr Field pg{0x227, 1}; /* on-demand paging */
inline constexpr Field umr_ptr_rlkey{0x230, 1};
inline constexpr Field rc{0x23f, 1};
inline constexpr Field log_pg_sz{0x258, 8};
inline constexpr Field mkey_by_name{0x266, 1}; /* mkey at a chosen index (create_mkey_in) */
inline constexpr Field log_max_pd{0x32b, 5};
inline constexpr Field log_max_atomic_size_qp{0x580, 8};
} // namespace hca_cap

/* Atomic capabilities (cap_type::atomic), relative to the capability area. */
namespace atomic_cap {
inline constexpr size_t size = 256;
inline constexpr Field atomic_req_8B_endianness_mode{0x040, 2};
inline constexpr Field atomic_operations{0x090, 16}; /* atomic_ops bits */
inline constexpr Field atomic_size_qp{0x0b0, 16};    /* bit n: 2^n-byte operands */
} // namespace atomic_cap
namespace atomic_ops {
inline constexpr uint32_t cmp_swap = 1u << 0;
inline constexpr uint32_t fetch_add = 1u << 1;
inline constexpr uint32_t masked_cmp_swap = 1u << 2;
inline constexpr uint32_t masked_fetch_add = 1u << 3;
} // namespace atomic_ops

/* nicmr extension capabilities (cap_type::nicmr_ext): one 64-bit word of flags for now. */
namespace ext_cap {
inline constexpr size_t size = 64;
inline constexpr Field flags{0x000, 64};
} // namespace ext_cap

} // namespace nicmr::mlx5::prm

#endif
