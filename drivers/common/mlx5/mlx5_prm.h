/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The mlx5 PRM layout table: every structure nicmr uses, commands and data path (WQE segments,
 * UMR control segment, CQE, doorbell records), described once, field by field, and shared by the
 * driver (drivers/mlx5) and the device model (drivers/emu/mlx5).
 *
 * A Field is a bit offset counted from the most significant bit of the structure (bit 0 is the
 * top bit of byte 0), as in mlx5_ifc.h, and a width of 1..64 bits. Everything the device sees is
 * big-endian; get(), set() and set_word() are the only places that convert, so no PRM shift,
 * mask or byte swap appears anywhere else in the tree.
 *
 *   byte:     0        1        2        3        4 ...
 *   bit_off:  0....7   8...15   16..23   24..31   32 ...
 *             MSB of byte 0 is bit_off 0; a field may start and end anywhere.
 *
 * Offsets come from the public PRM facts in the team's PRM.md and from mlx5_ifc.h (rdma-core,
 * Linux); the data-path ones from rdma-core's <infiniband/mlx5dv.h> structs. Where nicmr had
 * to choose (mkey at a chosen index, extension capabilities) the comment at the field says so;
 * doc/prm-layout.md lists those choices.
 */
#ifndef NICMR_MLX5_PRM_H
#define NICMR_MLX5_PRM_H

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <endian.h>

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
/* The same field, relative to the byte that holds it (a byte read or written on its own, e.g.
 * a CQE's op_own with one atomic access). */
constexpr Field in_byte(Field f) noexcept
{
	return Field{f.bit_off % 8, f.bits};
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
/* The largest value of the field: counters the PRM keeps in a field wrap modulo this + 1. */
constexpr uint64_t value_mask(Field f) noexcept
{
	return f.bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << f.bits) - 1;
}

/*
 * get() and set() touch the bytes of the field and no others (a neighbouring byte may belong
 * to another thread, like the command queue entry's ownership byte).
 *
 * Speed: where the field is a compile-time constant (every WQE, CQE and mkey-context field is),
 * they take the fast forms, whose branches fold away: a byte-aligned 16, 32 or 64-bit field is
 * one load or store and one byte swap, a field inside one byte one byte access, other whole
 * bytes one access per byte, so the hot path pays what hand-written code paid. A field known only
 * at run time (a BAR register helper's argument) takes the byte walk: no wide access is even
 * compiled against a 4-byte register word. Which one runs is decided by __builtin_constant_p once
 * get()/set() are inlined (GCC and Clang); test_prm_layout checks both forms against a bit-by-bit
 * reference.
 */
namespace detail {
/* Walks at most 9 bytes, MSB first, so the structure's big-endian order never leaks out. */
inline uint64_t get_walk(const void *base, Field f) noexcept
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

inline void set_walk(void *base, Field f, uint64_t v) noexcept
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

inline uint64_t get_fast(const void *base, Field f) noexcept
{
	const auto *p = static_cast<const uint8_t *>(base) + f.bit_off / 8;
	const uint32_t lead = f.bit_off % 8;
	if (lead == 0 && f.bits == 64) {
		uint64_t be;
		std::memcpy(&be, p, sizeof(be));
		return be64toh(be);
	}
	if (lead == 0 && f.bits == 32) {
		uint32_t be;
		std::memcpy(&be, p, sizeof(be));
		return be32toh(be);
	}
	if (lead == 0 && f.bits == 16) {
		uint16_t be;
		std::memcpy(&be, p, sizeof(be));
		return be16toh(be);
	}
	if (lead + f.bits <= 8)
		return (p[0] >> (8 - lead - f.bits)) & ((1u << f.bits) - 1);
	if (lead == 0 && f.bits % 8 == 0) { /* 24, 40, 48, 56 bits: whole bytes, unrolled */
		uint64_t v = 0;
		for (uint32_t i = 0; i < f.bits / 8; i++)
			v = v << 8 | p[i];
		return v;
	}
	return get_walk(base, f);
}

inline void set_fast(void *base, Field f, uint64_t v) noexcept
{
	auto *p = static_cast<uint8_t *>(base) + f.bit_off / 8;
	const uint32_t lead = f.bit_off % 8;
	if (lead == 0 && f.bits == 64) {
		const uint64_t be = htobe64(v);
		std::memcpy(p, &be, sizeof(be));
	} else if (lead == 0 && f.bits == 32) {
		const uint32_t be = htobe32(static_cast<uint32_t>(v));
		std::memcpy(p, &be, sizeof(be));
	} else if (lead == 0 && f.bits == 16) {
		const uint16_t be = htobe16(static_cast<uint16_t>(v));
		std::memcpy(p, &be, sizeof(be));
	} else if (lead + f.bits <= 8) {
		const uint32_t shift = 8 - lead - f.bits;
		const auto m = static_cast<uint8_t>(((1u << f.bits) - 1) << shift);
		p[0] = static_cast<uint8_t>((p[0] & ~m) | ((v << shift) & m));
	} else if (lead == 0 && f.bits % 8 == 0) { /* whole bytes, unrolled */
		for (uint32_t i = 0; i < f.bits / 8; i++)
			p[i] = static_cast<uint8_t>(v >> (f.bits - 8 - 8 * i));
	} else {
		set_walk(base, f, v);
	}
}
} // namespace detail

/*
 * Reads a field: any width 1..64, any alignment; the result is right-aligned in host order.
 * Hot path (WQE building, CQE parsing): no lock, no allocation, no system call.
 */
inline uint64_t get(const void *base, Field f) noexcept
{
	if (__builtin_constant_p(f.bit_off) && __builtin_constant_p(f.bits))
		return detail::get_fast(base, f);
	return detail::get_walk(base, f);
}

/*
 * Writes a field; v is masked to the width; the bits around the field are left as they were.
 * Hot path like get(). Not atomic: a byte shared with a device thread needs its own ordering
 * (the command queue's ownership byte is stored and loaded through std::atomic_ref).
 */
inline void set(void *base, Field f, uint64_t v) noexcept
{
	if (__builtin_constant_p(f.bit_off) && __builtin_constant_p(f.bits))
		detail::set_fast(base, f, v);
	else
		detail::set_walk(base, f, v);
}

/* Whether f lies inside one 32-bit word (set_word and word_be take such fields only). */
constexpr bool in_one_word(Field f) noexcept
{
	return f.bits >= 1 && f.bits <= 32 && f.bit_off / 32 == (f.bit_off + f.bits - 1) / 32;
}
/* v masked to f and moved to f's place in its 32-bit word (host order). */
constexpr uint32_t word_bits(Field f, uint64_t v) noexcept
{
	return static_cast<uint32_t>((v & value_mask(f)) << (32 - f.bit_off % 32 - f.bits));
}

/*
 * The big-endian image of the 32-bit word that fields F... make up, for a word stored at once
 * (a doorbell record with one atomic store). Bits no field names are zero: they are reserved.
 */
template <Field... F, typename... V> constexpr uint32_t word_be(V... v) noexcept
{
	static_assert(sizeof...(F) > 0 && sizeof...(F) == sizeof...(V));
	static_assert((in_one_word(F) && ...), "a field crosses a 32-bit word");
	constexpr Field first[] = {F...};
	static_assert(((F.bit_off / 32 == first[0].bit_off / 32) && ...),
		      "fields of different words");
	static_assert((word_bits(F, ~uint64_t{0}) + ...) == (word_bits(F, ~uint64_t{0}) | ...),
		      "fields overlap");
	return htobe32((word_bits(F, static_cast<uint64_t>(v)) | ...));
}

/*
 * Writes the whole 32-bit word that fields F... make up in one store: each value masked to
 * its field, the bits no field names (reserved) zero. For the WQE words several fields share
 * (the control segment's opcode word and qpn/ds word), so a reused ring slot keeps nothing of
 * the WQE before and each word costs one store, as mlx5dv_set_ctrl_seg writes it. Hot path.
 */
template <Field... F, typename... V> inline void set_word(void *base, V... v) noexcept
{
	constexpr Field first[] = {F...};
	const uint32_t be = word_be<F...>(v...);
	std::memcpy(static_cast<uint8_t *>(base) + dword_byte_offset(first[0]), &be, sizeof(be));
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
inline constexpr uint16_t page_fault_resume = 0x204;
inline constexpr uint16_t create_eq = 0x301;
inline constexpr uint16_t destroy_eq = 0x302;
inline constexpr uint16_t create_cq = 0x400;
inline constexpr uint16_t destroy_cq = 0x401;
inline constexpr uint16_t create_qp = 0x500;
inline constexpr uint16_t destroy_qp = 0x501;
inline constexpr uint16_t rst2init_qp = 0x502;
inline constexpr uint16_t init2rtr_qp = 0x503;
inline constexpr uint16_t rtr2rts_qp = 0x504;
inline constexpr uint16_t qp_2err = 0x507;
inline constexpr uint16_t qp_2rst = 0x50a;
inline constexpr uint16_t query_qp = 0x50b;
/* Shared receive queues (Linux mlx5_ifc.h MLX5_CMD_OP_CREATE_SRQ ... _ARM_RQ). */
inline constexpr uint16_t create_srq = 0x700;
inline constexpr uint16_t destroy_srq = 0x701;
inline constexpr uint16_t query_srq = 0x702;
inline constexpr uint16_t arm_rq = 0x703;
inline constexpr uint16_t alloc_pd = 0x800;
inline constexpr uint16_t dealloc_pd = 0x801;
inline constexpr uint16_t alloc_uar = 0x802;
inline constexpr uint16_t dealloc_uar = 0x803;
inline constexpr uint16_t access_reg = 0x805;
/* Sent by rdma-core's VFIO provider to enable RoCE on an Ethernet port (mlx5_ifc.h value);
 * nicmr does not send it (test/api/bringup-reference.txt). */
inline constexpr uint16_t modify_nic_vport_context = 0x755;
inline constexpr uint16_t create_umem = 0xa08;
inline constexpr uint16_t destroy_umem = 0xa0a;
/*
 * nicmr device-model extension commands (doc/device-model.md, "Extensions"): nicmr-only, in a
 * range ConnectX firmware does not use, so a ConnectX answers them BAD_OP. The driver sends
 * them only when cap_type::nicmr_ext reports the matching ext_cap bit.
 */
inline constexpr uint16_t nicmr_set_mkey_ext = 0x7f00;
inline constexpr uint16_t nicmr_query_mkey_ext = 0x7f01;
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
inline constexpr Field log_max_srq_sz{0x080, 8}; /* receive WQEs per SRQ */
inline constexpr Field log_max_qp_sz{0x088, 8};
inline constexpr Field log_max_qp{0x09b, 5};
inline constexpr Field log_max_srq{0x0bb, 5}; /* SRQ numbers */
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

/*
 * Atomic capabilities (cap_type::atomic), relative to the capability area (Linux
 * include/linux/mlx5/mlx5_ifc.h, struct mlx5_ifc_atomic_caps_bits). The device answers 8-byte
 * atomics in the mode atomic_req_8B_endianness_mode names (atomic_req_mode); a driver may set
 * host endianness with SET_HCA_CAP (op_mod atomic) before INIT_HCA when the device reports
 * supported_atomic_req_8B_endianness_mode_1, as Linux's mlx5_core does
 * (drivers/net/ethernet/mellanox/mlx5/core/main.c, handle_hca_cap_atomic).
 */
namespace atomic_cap {
inline constexpr size_t size = 256;
inline constexpr Field atomic_req_8B_endianness_mode{0x040, 2}; /* atomic_req_mode; settable */
inline constexpr Field supported_atomic_req_8B_endianness_mode_1{0x046, 1};
inline constexpr Field atomic_operations{0x090, 16}; /* atomic_ops bits */
inline constexpr Field atomic_size_qp{0x0b0, 16};    /* bit n: 2^n-byte operands */
} // namespace atomic_cap
/* Values of atomic_req_8B_endianness_mode (Linux main.c: MLX5_ATOMIC_REQ_MODE_BE 0,
 * MLX5_ATOMIC_REQ_MODE_HOST_ENDIANNESS 1). Big-endian: the target word and the returned old
 * value are big-endian, as on the wire; host endianness: both in the host's byte order. */
namespace atomic_req_mode {
inline constexpr uint32_t big_endian = 0;
inline constexpr uint32_t host_endianness = 1;
} // namespace atomic_req_mode
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
/* Bits of flags. Neither exists on a ConnectX (which refuses the capability type). */
inline constexpr uint64_t single_use = uint64_t{1} << 0; /* mkey_ext::single_use */
inline constexpr uint64_t rma_event = uint64_t{1} << 1;	 /* mkey_ext::disabled, ::counter */
} // namespace ext_cap

/*
 * NICMR_SET_MKEY_EXT / NICMR_QUERY_MKEY_EXT (nicmr-only, see opcode): the extension state of
 * one live mkey. flags (mkey_ext bits) replace the mkey's; counter_iova is the IOVA of an
 * 8-byte, 8-aligned counter in host memory (host byte order) that the device increments by
 * one, atomically, for each completed remote RDMA WRITE or atomic into the mkey (with
 * mkey_ext::counter). A UMR that binds (free -> not free) or revokes the mkey, or changes its
 * variant, clears the state; so do CREATE_MKEY and DESTROY_MKEY.
 */
namespace mkey_ext {
inline constexpr uint32_t single_use = 1u << 0; /* freed by its first completed remote op */
inline constexpr uint32_t disabled = 1u << 1;	/* every remote access refused */
inline constexpr uint32_t counter = 1u << 2;	/* remote writes counted at counter_iova */
inline constexpr uint32_t spent = 1u << 3;	/* query only: a single-use mkey that was used */
inline constexpr uint32_t settable = single_use | disabled | counter;
} // namespace mkey_ext
namespace set_mkey_ext_in {
inline constexpr size_t size = 32;
inline constexpr Field mkey_index{0x048, 24};
inline constexpr Field flags{0x060, 32};
inline constexpr Field counter_iova{0x080, 64};
} // namespace set_mkey_ext_in
namespace set_mkey_ext_out {
inline constexpr size_t size = 16;
}
namespace query_mkey_ext_in {
inline constexpr size_t size = 16;
inline constexpr Field mkey_index{0x048, 24};
} // namespace query_mkey_ext_in
namespace query_mkey_ext_out {
inline constexpr size_t size = 32;
inline constexpr Field flags{0x040, 32};
inline constexpr Field counter_iova{0x080, 64};
} // namespace query_mkey_ext_out

/*
 * ---------------------------------------------------------------------------------------------
 * Data path: UAR, EQ, CQ, QP commands and their contexts, then (further down) the send WQE
 * segments, the UMR control segment and the CQE, field by field like the commands: the driver
 * writes and the device model reads them through these fields only. Their byte offsets are
 * those of rdma-core's <infiniband/mlx5dv.h> (struct mlx5_wqe_*_seg, mlx5_cqe64, mlx5_err_cqe),
 * which test_prm_layout checks member by member and against mlx5dv_set_ctrl_seg() /
 * mlx5dv_set_data_seg(); values (MLX5_OPCODE_*, MLX5_CQE_*, MLX5_WQE_CTRL_*) stay mlx5dv.h's.
 * doc/data-path.md states the contract between nicmr's driver and its device model.
 * ---------------------------------------------------------------------------------------------
 */

/* A queue buffer's pages as 64-bit big-endian IOVAs after a create command's context. */
inline constexpr size_t pas_entry_size = 8;
/* Queue buffer pages: 4 KiB << log_page_size (the field stores the shift above 4 KiB). */
inline constexpr uint32_t queue_page_shift_base = 12;

/* User access region: one 4 KiB page of BAR 0 per index; the SQ doorbell sits inside it. */
namespace uar {
inline constexpr size_t page_size = 4096;
inline constexpr size_t sq_doorbell_offset = 0x800; /* 64-bit write: first 8 ctrl-seg bytes */
inline constexpr size_t bf_offset = 0x900;	    /* BlueFlame buffer: nicmr does not use it */
/* Byte offset of UAR page index in BAR 0. */
constexpr uint64_t page_offset(uint32_t index) noexcept
{
	return uint64_t{index} * page_size;
}
} // namespace uar

namespace alloc_uar_in {
inline constexpr size_t size = 16;
}
namespace alloc_uar_out {
inline constexpr size_t size = 16;
inline constexpr Field uar{0x048, 24};
} // namespace alloc_uar_out
namespace dealloc_uar_in {
inline constexpr size_t size = 16;
inline constexpr Field uar{0x048, 24};
} // namespace dealloc_uar_in
namespace dealloc_uar_out {
inline constexpr size_t size = 16;
}

/* Event queue context (eqc): 64 bytes. */
namespace eqc {
inline constexpr size_t size = 64;
inline constexpr Field status{0x000, 4};
inline constexpr Field ec{0x00d, 1};
inline constexpr Field oi{0x00e, 1}; /* overrun ignore */
inline constexpr Field st{0x014, 4}; /* armed / fired */
inline constexpr Field page_offset{0x054, 6};
inline constexpr Field log_eq_size{0x063, 5};
inline constexpr Field uar_page{0x068, 24};
/* 8 bits at 0xb8 in older headers, 12 bits at 0xb4 in newer ones: encode values below 256. */
inline constexpr Field intr{0x0b4, 12};
inline constexpr Field log_page_size{0x0c3, 5};
inline constexpr Field consumer_counter{0x148, 24};
inline constexpr Field producer_counter{0x168, 24};
} // namespace eqc

namespace create_eq_in {
inline constexpr size_t eqc_offset = 0x10; /* bytes */
/* Bit n of this 64-bit word enables event type n (the first word of the bitmask array). */
inline constexpr Field event_bitmask{0x2c0, 64};
inline constexpr size_t pas_offset = 0x110; /* bytes; bit 0x880 */
inline constexpr size_t size = pas_offset;  /* followed by the pas entries */
} // namespace create_eq_in
namespace create_eq_out {
inline constexpr size_t size = 16;
inline constexpr Field eq_number{0x058, 8};
} // namespace create_eq_out
namespace destroy_eq_in {
inline constexpr size_t size = 16;
inline constexpr Field eq_number{0x058, 8};
} // namespace destroy_eq_in
namespace destroy_eq_out {
inline constexpr size_t size = 16;
}

/* Asynchronous event types (event_bitmask bit numbers and eqe::event_type). */
namespace event_type {
inline constexpr uint8_t path_mig = 0x01;
inline constexpr uint8_t comm_est = 0x02;
inline constexpr uint8_t sq_drained = 0x03;
inline constexpr uint8_t cq_error = 0x04;
inline constexpr uint8_t wq_catas_error = 0x05;
inline constexpr uint8_t wq_inval_req_error = 0x10;
inline constexpr uint8_t wq_access_error = 0x11;
/* On-demand paging: a translation not present (Linux device.h MLX5_EVENT_TYPE_PAGE_FAULT). */
inline constexpr uint8_t page_fault = 0x0c;
/* An armed SRQ's WQEs fell below its limit (MLX5_EVENT_TYPE_SRQ_RQ_LIMIT; mlx5_eqe_qp_srq with
 * type 1 and the SRQ's number). */
inline constexpr uint8_t srq_limit = 0x14;
} // namespace event_type
constexpr uint64_t event_bit(uint8_t type) noexcept
{
	return uint64_t{1} << type;
}

/* Event queue entry: 64 bytes; the owner bit flips on each pass over the ring, like a CQE's. */
namespace eqe {
inline constexpr size_t size = 64;
inline constexpr Field event_type{0x008, 8};
inline constexpr Field event_sub_type{0x018, 8};
inline constexpr size_t data_offset = 0x20; /* 28 bytes of event data */
/*
 * Queue events (struct mlx5_eqe_qp_srq): data bytes 20 (type: 0 QP, 1 SRQ) and 24..27 (the QP
 * or SRQ number, low 24 bits), i.e. EQE bytes 0x34 and 0x38.
 */
inline constexpr Field qp_srq_type{0x1a0, 8};
inline constexpr Field qpn{0x1c8, 24};
inline constexpr Field signature{0x1f0, 8};
inline constexpr Field owner{0x1ff, 1}; /* byte 63 bit 0 */
inline constexpr size_t owner_byte = 63;
} // namespace eqe

/*
 * Page-fault event data (Linux include/linux/mlx5/device.h, struct mlx5_eqe_page_fault, as
 * before the MEMORY subtype; drivers/infiniband/hw/mlx5/odp.c, mlx5_ib_eq_pf_process): at EQE
 * byte 0x20 bytes_committed, then by eqe::event_sub_type either
 *   WQE (0): wqe_index (be16 at 0x26), packet_length (0x2a), token (be32 at 0x2c), and at 0x38
 *            the fault type (8 bits) and the WQ number (24 bits)
 *   RDMA (1): r_key (0x24), packet_length (0x2a), rdma_op_len (0x2c), rdma_va (be64 at 0x30),
 *            and at 0x38 the fault type (8 bits) and the token (24 bits).
 * Fault type flags (mlx5_pagefault_type_flags): REQUESTOR 1 << 0, WRITE 1 << 1, RDMA 1 << 2.
 * The driver answers with PAGE_FAULT_RESUME (page_fault_resume_in), naming the token.
 */
namespace eqe_page_fault {
inline constexpr uint8_t subtype_wqe = 0;
inline constexpr uint8_t subtype_rdma = 1;
inline constexpr uint8_t flag_requestor = 1u << 0;
inline constexpr uint8_t flag_write = 1u << 1;
inline constexpr uint8_t flag_rdma = 1u << 2;
inline constexpr Field bytes_committed{0x100, 32};
inline constexpr Field wqe_index{0x130, 16};
inline constexpr Field packet_length{0x150, 16};
inline constexpr Field wqe_token{0x168, 24}; /* be32 at 0x2c; tokens are 24 bits */
inline constexpr Field r_key{0x120, 32};
inline constexpr Field rdma_op_len{0x160, 32};
inline constexpr Field rdma_va{0x180, 64};
inline constexpr Field pftype{0x1c0, 8};
inline constexpr Field wq_number{0x1c8, 24};  /* WQE subtype */
inline constexpr Field rdma_token{0x1c8, 24}; /* RDMA subtype */
} // namespace eqe_page_fault

/* PAGE_FAULT_RESUME (Linux mlx5_ifc.h page_fault_resume_in, as before the MEMORY subtype;
 * odp.c mlx5_ib_page_fault_resume): error, the fault's type, the WQ number (a WQE fault's QP;
 * Linux puts the token there for an RDMA fault) and the token. */
namespace page_fault_resume_in {
inline constexpr size_t size = 16;
inline constexpr Field error{0x040, 1};
inline constexpr Field page_fault_type{0x045, 3};
inline constexpr Field wq_number{0x048, 24};
inline constexpr Field token{0x068, 24};
} // namespace page_fault_resume_in
namespace page_fault_resume_out {
inline constexpr size_t size = 16;
}

/* Completion queue context (cqc): 64 bytes. */
namespace cqc {
inline constexpr size_t size = 64;
inline constexpr Field status{0x000, 4};
inline constexpr Field dbr_umem_valid{0x006, 1};
inline constexpr Field cqe_sz{0x008, 3}; /* 0: 64-byte CQEs, 1: 128 */
inline constexpr Field cc{0x00b, 1};
inline constexpr Field oi{0x00e, 1};
inline constexpr Field st{0x014, 4};
inline constexpr Field page_offset{0x054, 6};
inline constexpr Field log_cq_size{0x063, 5};
inline constexpr Field uar_page{0x068, 24};
inline constexpr Field cq_period{0x084, 12};
inline constexpr Field cq_max_count{0x090, 16};
/* 8 bits at 0xb8 in older headers, 32 at 0xa0 in newer ones: encode values below 256. */
inline constexpr Field c_eqn{0x0a0, 32};
inline constexpr Field log_page_size{0x0c3, 5};
inline constexpr Field last_notified_index{0x108, 24};
inline constexpr Field last_solicit_index{0x128, 24};
inline constexpr Field consumer_counter{0x148, 24};
inline constexpr Field producer_counter{0x168, 24};
inline constexpr Field dbr_addr{0x1c0, 64};

inline constexpr uint32_t cqe_sz_64 = 0;
inline constexpr uint32_t cqe_sz_128 = 1;
} // namespace cqc

namespace create_cq_in {
inline constexpr size_t cqc_offset = 0x10;  /* bytes */
inline constexpr size_t pas_offset = 0x110; /* bytes; bit 0x880 */
inline constexpr size_t size = pas_offset;  /* followed by the pas entries */
} // namespace create_cq_in
namespace create_cq_out {
inline constexpr size_t size = 16;
inline constexpr Field cqn{0x048, 24};
} // namespace create_cq_out
namespace destroy_cq_in {
inline constexpr size_t size = 16;
inline constexpr Field cqn{0x048, 24};
} // namespace destroy_cq_in
namespace destroy_cq_out {
inline constexpr size_t size = 16;
}

/* Doorbell record: two big-endian 32-bit counters in host memory per queue. */
namespace dbr {
inline constexpr size_t size = 8;
inline constexpr Field cq_ci{0x008, 24}; /* CQ: dword 0, consumer index (mod 2^24) */
/* QP: dword 0, RQ producer in receive WQEs; the device takes its low 16 bits, as rdma-core
 * writes it (providers/mlx5/qp.c, mlx5_post_recv: rq.head & 0xffff). */
inline constexpr Field rq_counter{0x000, 32};
inline constexpr size_t qp_rq_dword = 0;
/* QP: dword 1, SQ producer in WQEBBs; the device takes its low 16 bits (the WQE counter), as
 * rdma-core writes it (providers/mlx5/qp.c, post_send_db: cur_post & 0xffff). */
inline constexpr Field sq_counter{0x020, 32};
inline constexpr size_t cq_ci_dword = 0;
inline constexpr size_t qp_sq_dword = 1;
/* CQ: dword 1, the arm word (rdma-core providers/mlx5/cq.c mlx5_arm_cq: dbrec[MLX5_CQ_ARM_DB],
 * MLX5_CQ_ARM_DB = 1), the same sn << 28 | cmd | ci as the arm doorbell's first word. */
inline constexpr size_t cq_arm_dword = 1;
inline constexpr Field cq_arm_sn{0x022, 2};
inline constexpr Field cq_arm_cmd{0x024, 4};
inline constexpr Field cq_arm_ci{0x028, 24};
} // namespace dbr

/*
 * CQ arm doorbell in a UAR page: a 64-bit write at +0x20 (MLX5_CQ_DOORBELL), first word
 * sn << 28 | cmd | ci, second word the CQN, both big-endian (rdma-core mlx5_arm_cq; Linux
 * include/linux/mlx5/cq.h mlx5_cq_arm). cmd: MLX5_CQ_DB_REQ_NOT (0 << 24) arms for the next
 * completion, MLX5_CQ_DB_REQ_NOT_SOL (1 << 24) for the next solicited or error completion.
 * The sn (2 bits) counts events: the driver adds one for each event it took (rdma-core
 * mlx5_cq_event: arm_sn++).
 */
namespace cq_doorbell {
inline constexpr size_t offset = 0x20;
inline constexpr Field arm_sn{0x02, 2};
inline constexpr Field cmd{0x04, 4};
inline constexpr Field consumer_index{0x08, 24};
inline constexpr Field cqn{0x28, 24}; /* second word */
inline constexpr uint32_t cmd_next = 0;
inline constexpr uint32_t cmd_solicited = 1;
} // namespace cq_doorbell

/* Completion event (struct mlx5_eqe_comp): EQE type 0x00 (MLX5_EVENT_TYPE_COMP), the CQN in
 * data bytes 24..27 (low 24 bits), i.e. EQE bytes 0x38..0x3b. Completion events go to the EQ
 * the CQ names (cqc.c_eqn), whatever that EQ's event_bitmask. */
namespace eqe_comp {
inline constexpr uint8_t event_type = 0x00;
inline constexpr Field cqn{0x1c8, 24};
} // namespace eqe_comp

/* Queue pair context (qpc): 232 bytes (0x740 bits). */
namespace qpc {
inline constexpr size_t size = 0xe8;
inline constexpr Field state{0x000, 4};
inline constexpr Field st{0x008, 8};
inline constexpr Field pm_state{0x013, 2};
inline constexpr Field pd{0x028, 24};
inline constexpr Field mtu{0x040, 3};
inline constexpr Field log_msg_max{0x043, 5};
inline constexpr Field log_rq_size{0x049, 4};
inline constexpr Field log_rq_stride{0x04d, 3};
inline constexpr Field no_sq{0x050, 1};
inline constexpr Field log_sq_size{0x051, 4};
inline constexpr Field rlky{0x05b, 1}; /* reserved lkey enable */
inline constexpr Field uar_page{0x068, 24};
inline constexpr Field user_index{0x088, 24};
inline constexpr Field log_page_size{0x0a3, 5};
inline constexpr Field remote_qpn{0x0a8, 24};
/* primary_address_path (ads, 0x160 bits) starts at 0x0c0; nicmr uses its port only. */
inline constexpr uint32_t primary_address_path = 0x0c0;
inline constexpr Field primary_ack_timeout{0x0c0 + 0x040, 5};
inline constexpr Field primary_vhca_port_num{0x0c0 + 0x128, 8};
inline constexpr Field log_ack_req_freq{0x380, 4};
inline constexpr Field log_sra_max{0x388, 3};
inline constexpr Field retry_count{0x38d, 3};
inline constexpr Field rnr_retry{0x390, 3};
inline constexpr Field next_send_psn{0x3c8, 24};
inline constexpr Field cqn_snd{0x3e8, 24};
inline constexpr Field last_acked_psn{0x448, 24};
inline constexpr Field log_rra_max{0x488, 3};
inline constexpr Field atomic_mode{0x48c, 4};
inline constexpr Field rre{0x490, 1};
inline constexpr Field rwe{0x491, 1};
inline constexpr Field rae{0x492, 1};
inline constexpr Field page_offset{0x494, 6};
inline constexpr Field min_rnr_nak{0x4a3, 5};
inline constexpr Field next_rcv_psn{0x4a8, 24};
inline constexpr Field cqn_rcv{0x4e8, 24};
inline constexpr Field dbr_addr{0x500, 64};
inline constexpr Field q_key{0x540, 32};
inline constexpr Field rq_type{0x565, 3};
inline constexpr Field srqn_rmpn_xrqn{0x568, 24};
inline constexpr Field hw_sq_wqebb_counter{0x5a0, 16};
inline constexpr Field sw_sq_wqebb_counter{0x5b0, 16};
inline constexpr Field dbr_umem_valid{0x683, 1};
} // namespace qpc

namespace qp_state {
inline constexpr uint32_t rst = 0x0;
inline constexpr uint32_t init = 0x1;
inline constexpr uint32_t rtr = 0x2;
inline constexpr uint32_t rts = 0x3;
inline constexpr uint32_t sqer = 0x4;
inline constexpr uint32_t sqd = 0x5;
inline constexpr uint32_t err = 0x6;
} // namespace qp_state

namespace qp_st {
inline constexpr uint32_t rc = 0x0;
inline constexpr uint32_t uc = 0x1;
inline constexpr uint32_t ud = 0x2;
inline constexpr uint32_t xrc = 0x3;
/* The port's GSI QP (Linux include/linux/mlx5/qp.h MLX5_QP_ST_QP1; drivers/infiniband/hw/mlx5/
 * qp.c to_mlx5_st maps IB_QPT_GSI to it): a UD QP that the wire knows as QP 1 (prm::gsi). */
inline constexpr uint32_t qp1 = 0x8;
} // namespace qp_st

/*
 * What a QP of st qp1 is on the wire: its port's general services interface QP. IBTA vol.1
 * ch.13 (management model) gives QP0 to the SMI and QP1 to the GSI of every port; a datagram
 * whose BTH destination QP is 1 goes to the receiving port's GSI QP, and one the GSI QP sends
 * carries source QP 1 in its DETH. The QP has another number on the device (CREATE_QP's, the
 * one its doorbells and CQEs name). Its Q_Key is the well-known one (Linux include/rdma/ib_mad.h
 * IB_QP1_QKEY), whose bit 31 makes it a controlled Q_Key (IBTA 10.2.5): a UD QP that names it
 * in a send sends its own Q_Key instead, so only a GSI QP reaches another.
 */
namespace gsi {
inline constexpr uint32_t qpn = 1;
inline constexpr uint32_t q_key = 0x80010000u;
} // namespace gsi

namespace qp_pm_state {
inline constexpr uint32_t migrated = 0x3;
}

namespace qp_rq_type {
inline constexpr uint32_t regular = 0x0;
inline constexpr uint32_t srq = 0x1;
inline constexpr uint32_t zero_len = 0x3; /* no receive queue */
} // namespace qp_rq_type

/* CREATE_QP: qpc at byte 0x18, pas from byte 0x110. */
namespace create_qp_in {
inline constexpr Field input_qpn{0x048, 24};
inline constexpr Field opt_param_mask{0x080, 32};
inline constexpr size_t qpc_offset = 0x18; /* bytes; bit 0x0c0 */
inline constexpr Field wq_umem_valid{0x860, 1};
inline constexpr size_t pas_offset = 0x110; /* bytes; bit 0x880 */
inline constexpr size_t size = pas_offset;  /* followed by the pas entries */
} // namespace create_qp_in
namespace create_qp_out {
inline constexpr size_t size = 16;
inline constexpr Field qpn{0x048, 24};
} // namespace create_qp_out
namespace destroy_qp_in {
inline constexpr size_t size = 16;
inline constexpr Field qpn{0x048, 24};
} // namespace destroy_qp_in
namespace destroy_qp_out {
inline constexpr size_t size = 16;
}

/* opt_param_mask bits of INIT2RTR / RTR2RTS: which optional qpc fields the command sets. */
namespace qp_optpar {
inline constexpr uint32_t rre = 1u << 1;
inline constexpr uint32_t rae = 1u << 2;
inline constexpr uint32_t rwe = 1u << 3;
} // namespace qp_optpar

/* RST2INIT, INIT2RTR and RTR2RTS share one layout: qpn, opt_param_mask, qpc. */
namespace modify_qp_in {
inline constexpr size_t size = 0x110;
inline constexpr Field qpn{0x048, 24};
inline constexpr Field opt_param_mask{0x080, 32};
inline constexpr size_t qpc_offset = 0x18; /* bytes */
} // namespace modify_qp_in
namespace modify_qp_out {
inline constexpr size_t size = 16;
}
/* 2ERR and 2RST: the qpn only. */
namespace qp_2err_in {
inline constexpr size_t size = 16;
inline constexpr Field qpn{0x048, 24};
} // namespace qp_2err_in
namespace qp_2rst_in {
inline constexpr size_t size = 16;
inline constexpr Field qpn{0x048, 24};
} // namespace qp_2rst_in
namespace qp_2err_out {
inline constexpr size_t size = 16;
}
namespace qp_2rst_out {
inline constexpr size_t size = 16;
}

namespace query_qp_in {
inline constexpr size_t size = 16;
inline constexpr Field qpn{0x048, 24};
} // namespace query_qp_in
namespace query_qp_out {
inline constexpr Field opt_param_mask{0x080, 32};
inline constexpr size_t qpc_offset = 0x18;  /* bytes */
inline constexpr size_t pas_offset = 0x110; /* bytes */
inline constexpr size_t size = pas_offset;  /* the pas entries are not asked for */
} // namespace query_qp_out

/*
 * Shared receive queues. SRQ context (Linux mlx5_ifc.h struct mlx5_ifc_srqc_bits, 64 bytes):
 * 2^log_srq_size WQEs of 16 << log_rq_stride bytes in pages of 4 KiB << log_page_size, the
 * doorbell record (dword 0: the driver's WQE counter, low 16 bits), the limit (lwm) and the
 * PD. Linux drivers/infiniband/hw/mlx5/srq_cmd.c (set_srqc, create_srq_cmd) fills it.
 */
namespace srqc {
inline constexpr size_t size = 64;
inline constexpr Field state{0x000, 4}; /* 0 good, 1 error */
inline constexpr Field log_srq_size{0x004, 4};
inline constexpr Field wq_signature{0x020, 1};
inline constexpr Field cont_srq{0x021, 1};
inline constexpr Field rlky{0x023, 1};
inline constexpr Field log_rq_stride{0x025, 3};
inline constexpr Field xrcd{0x028, 24};
inline constexpr Field page_offset{0x040, 6};
inline constexpr Field cqn{0x048, 24};
inline constexpr Field log_page_size{0x082, 6};
inline constexpr Field pd{0x0c8, 24};
inline constexpr Field lwm{0x0e0, 16};
inline constexpr Field wqe_cnt{0x0f0, 16};
inline constexpr Field dbr_addr{0x140, 64};
} // namespace srqc

/* CREATE_SRQ (mlx5_ifc_create_srq_in_bits): srqc at byte 0x10, pas from byte 0x110. */
namespace create_srq_in {
inline constexpr size_t srqc_offset = 0x10; /* bytes; bit 0x080 */
inline constexpr size_t pas_offset = 0x110; /* bytes; bit 0x880 */
inline constexpr size_t size = pas_offset;  /* followed by the pas entries */
} // namespace create_srq_in
namespace create_srq_out {
inline constexpr size_t size = 16;
inline constexpr Field srqn{0x048, 24};
} // namespace create_srq_out
/* DESTROY_SRQ and QUERY_SRQ (mlx5_ifc_destroy_srq_in_bits, _query_srq_in_bits). */
namespace destroy_srq_in {
inline constexpr size_t size = 16;
inline constexpr Field srqn{0x048, 24};
} // namespace destroy_srq_in
namespace destroy_srq_out {
inline constexpr size_t size = 16;
}
namespace query_srq_in {
inline constexpr size_t size = 16;
inline constexpr Field srqn{0x048, 24};
} // namespace query_srq_in
/* mlx5_ifc_query_srq_out_bits: srqc at byte 0x10, pas from 0x110 (not asked for). */
namespace query_srq_out {
inline constexpr size_t srqc_offset = 0x10;
inline constexpr size_t size = 0x110;
} // namespace query_srq_out
/* ARM_RQ (mlx5_ifc_arm_rq_in_bits) with op_mod 1 (MLX5_ARM_RQ_IN_OP_MOD_SRQ): the SRQ's limit
 * event fires once its WQEs fall below lwm (Linux srq_cmd.c, arm_srq_cmd). */
namespace arm_rq_in {
inline constexpr size_t size = 16;
inline constexpr Field srq_number{0x048, 24};
inline constexpr Field lwm{0x070, 16};
inline constexpr uint16_t op_mod_srq = 1;
} // namespace arm_rq_in
namespace arm_rq_out {
inline constexpr size_t size = 16;
}

/* The next segment that begins every SRQ WQE (<infiniband/mlx5dv.h> struct
 * mlx5_wqe_srq_next_seg): the index of the WQE after it in the SRQ's free list, then the WQE's
 * data segments up to MLX5_INVALID_LKEY or the stride's end (rdma-core providers/mlx5/srq.c,
 * mlx5_post_srq_recv; Linux mlx5_ib srq.c, mlx5_ib_post_srq_recv). */
namespace wqe_srq_next {
inline constexpr size_t size = 16;
inline constexpr Field next_wqe_index{0x010, 16};
inline constexpr Field signature{0x020, 8};
} // namespace wqe_srq_next

/* Work queue geometry. */
namespace wq {
inline constexpr size_t wqebb_size = 64; /* send WQE basic block */
inline constexpr size_t ds_size = 16;	 /* ctrl seg's ds counts 16-byte units */
inline constexpr size_t cqe_size = 64;
inline constexpr size_t eqe_size = 64;
/* WQEBBs a WQE of ds 16-byte units takes. */
constexpr uint32_t wqebbs(uint32_t ds) noexcept
{
	return (ds * ds_size + wqebb_size - 1) / wqebb_size;
}
} // namespace wq

/*
 * Send WQE segments (<infiniband/mlx5dv.h> struct mlx5_wqe_ctrl_seg, mlx5_wqe_raddr_seg,
 * mlx5_wqe_data_seg, mlx5_wqe_inl_data_seg, mlx5_wqe_atomic_seg). A WQE is the control segment
 * and then, by opcode: RDMA WRITE/READ raddr + data segments (or one inline segment); atomics
 * raddr + atomic + one 8-byte data segment; UMR umr_ctrl + mkc + translations.
 */
namespace wqe_ctrl {
inline constexpr size_t size = 16;
inline constexpr Field opmod{0x00, 8};
inline constexpr Field wqe_index{0x08, 16}; /* the WQE's first WQEBB, mod 2^16 */
inline constexpr Field opcode{0x18, 8};	    /* MLX5_OPCODE_* */
inline constexpr Field qpn{0x20, 24};
/* 16-byte units of the whole WQE. 6 bits (bits 7:6 of the byte are reserved; mlx5dv's setter
 * takes a byte, the device model reads 6 bits as ConnectX does). */
inline constexpr Field ds{0x3a, 6};
inline constexpr Field signature{0x40, 8};
inline constexpr Field dci_stream_channel_id{0x48, 16};
inline constexpr Field fm_ce_se{0x58, 8}; /* MLX5_WQE_CTRL_* bits: fence, CQ update, SE */
inline constexpr Field imm{0x60, 32};	  /* immediate; the mkey of LOCAL_INVAL and UMR */
/* The doorbell write carries the segment's first 8 bytes (opcode word, qpn/ds word). */
inline constexpr size_t doorbell_bytes = 8;
} // namespace wqe_ctrl

/* Remote address segment (RDMA and atomics). */
namespace wqe_raddr {
inline constexpr size_t size = 16;
inline constexpr Field raddr{0x00, 64};
inline constexpr Field rkey{0x40, 32};
inline constexpr Field reserved{0x60, 32};
} // namespace wqe_raddr

/* Data (gather/scatter) segment; the UMR's translation pointer has the same layout. */
namespace wqe_data {
inline constexpr size_t size = 16;
/* A receive WQE is an array of data segments in a slot of 16 << qpc.log_rq_stride bytes; a
 * list shorter than the slot ends with a segment whose lkey is MLX5_INVALID_LKEY (0x100,
 * mlx5dv.h), byte_count 0 and addr 0 (rdma-core providers/mlx5/qp.c, mlx5_post_recv). */
inline constexpr Field byte_count{0x00, 32};
inline constexpr Field lkey{0x20, 32};
inline constexpr Field addr{0x40, 64};
} // namespace wqe_data

/*
 * Datagram segment of a UD send WQE (mlx5dv.h struct mlx5_wqe_datagram_seg / mlx5_wqe_av, 48
 * bytes, right after the ctrl segment): where the datagram goes. On RoCE, rdma-core's
 * mlx5_create_ah (providers/mlx5/verbs.c) puts the RoCEv2 UDP source port in rlid (between
 * RROCE_UDP_SPORT_MIN and _MAX) and the peer's GID in rgid with grh set; mlx5dv_set_dgram_seg
 * writes the Q_Key and dqp_dct with MLX5_EXTENDED_UD_AV in the top bit when the extended AV is
 * used.
 */
namespace wqe_datagram {
inline constexpr size_t size = 48;
inline constexpr Field q_key{0x00, 32};
inline constexpr Field ext{0x40, 1}; /* MLX5_EXTENDED_UD_AV */
inline constexpr Field dqpn{0x48, 24};
inline constexpr Field stat_rate_sl{0x60, 8};
inline constexpr Field fl{0x68, 1}; /* force loopback */
inline constexpr Field mlid{0x69, 7};
inline constexpr Field rlid_udp_sport{0x70, 16};
inline constexpr size_t rmac_byte = 20; /* 6 bytes */
inline constexpr Field tclass{0xd0, 8};
inline constexpr Field hop_limit{0xd8, 8};
inline constexpr Field grh{0xe1, 1}; /* bit 30 of grh_gid_fl (Linux ah.c create_ib_ah) */
inline constexpr Field sgid_index{0xe4, 8};
inline constexpr Field flow_label{0xec, 20};
inline constexpr size_t rgid_byte = 32; /* 16 bytes, network order */
inline constexpr size_t rgid_size = 16;
} // namespace wqe_datagram

/* Inline data segment: a 4-byte header, then the payload (padded to 16 bytes). Its header
 * overlays a data segment's byte_count: the top bit (MLX5_INLINE_SEG) tells them apart. */
namespace wqe_inline {
inline constexpr size_t header_size = 4;
inline constexpr Field inline_flag{0x00, 1};
inline constexpr Field byte_count{0x01, 31};
} // namespace wqe_inline

/* Atomic segment (compare-and-swap: swap and compare; fetch-and-add: the addend). */
namespace wqe_atomic {
inline constexpr size_t size = 16;
inline constexpr Field swap_add{0x00, 64};
inline constexpr Field compare{0x40, 64};
} // namespace wqe_atomic

/*
 * UMR control segment (struct mlx5_wqe_umr_ctrl_seg, 48 bytes): then the mkey context segment
 * (the mkc layout above) and the translations. The flags byte's bits are the fields below;
 * umr_flags gives the same bits as byte values.
 */
namespace umr_ctrl {
inline constexpr size_t size = 48;
inline constexpr Field inline_xlt{0x00, 1};	       /* translations follow inline */
inline constexpr Field check{0x01, 2};		       /* umr_flags::check_* values */
inline constexpr Field translation_offset_en{0x03, 1}; /* translation_offset is valid */
inline constexpr Field check_qpn{0x04, 1};
inline constexpr Field klm_octowords{0x20, 16};	     /* translation octwords */
inline constexpr Field translation_offset{0x30, 16}; /* octwords into the mkey's table */
inline constexpr Field mkey_mask{0x40, 64};	     /* umr_mkey_mask bits */
/* Bits 47:16 of the translation offset, read with the cap umr_extended_translation_offset
 * (Linux include/linux/mlx5/qp.h, struct mlx5_wqe_umr_ctrl_seg: xlt_offset_47_16 after
 * mkey_mask; umr.c, mlx5r_umr_set_update_xlt_ctrl_seg splits the offset there). */
inline constexpr Field xlt_offset_47_16{0x80, 32};
} // namespace umr_ctrl

/*
 * The 32-bit mkey value (lkey, rkey, the mkey of a UMR, an SGE or a LOCAL_INVAL's immediate):
 * mkey_index << 8 | mkey_7_0
 * (PRM.md, "Keys"; the kernel's mlx5_idx_to_mkey and mlx5_base_mkey in
 * include/linux/mlx5/driver.h). The device model splits keys here; the driver may use lib/mr's
 * mkey_index / mkey_variant / make_mkey (mr_keys.h), which say the same (mlx5_umr.cpp checks).
 */
namespace mkey {
constexpr uint32_t index(uint32_t key) noexcept
{
	return key >> 8;
}
constexpr uint32_t variant(uint32_t key) noexcept
{
	return key & 0xff;
}
constexpr uint32_t make(uint32_t index, uint32_t variant) noexcept
{
	return index << 8 | (variant & 0xff);
}
} // namespace mkey

/*
 * Completion queue entry, 64 bytes (struct mlx5_cqe64; an error completion is struct
 * mlx5_err_cqe over the same bytes). op_own, the last byte, is written last by the device and
 * read first (with acquire) by the driver: opcode and owner are decoded from that one byte
 * with in_byte().
 */
namespace cqe {
inline constexpr size_t size = 64;
/* Responder CQEs: the immediate of SEND/WRITE with immediate as it came (big-endian on the
 * wire and here), or the rkey a SEND with invalidate invalidated (rdma-core providers/mlx5/
 * cq.c, handle_responder: imm_data, invalidated_rkey). */
inline constexpr Field imm_inval_pkey{0x120, 32};
/* flags_rqpn (byte 24) of a UD responder CQE: the sender's QP (rdma-core providers/mlx5/cq.c
 * handle_responder: src_qp = flags_rqpn & 0xffffff), whether the receive buffer starts with a
 * GRH (g, bits 29:28: IBV_WC_GRH when not 0) and, on RoCE, the network header type
 * (bits 25:24, MLX5_CQE_L3_HDR_TYPE_IPV6 / _IPV4; Linux mlx5 cq.c handle_responder:
 * roce_packet_type). */
inline constexpr Field grh{0xc2, 2};
inline constexpr Field l3_hdr_type{0xc6, 2};
inline constexpr Field src_qpn{0xc8, 24};
inline constexpr uint32_t grh_present = 1;
inline constexpr Field byte_cnt{0x160, 32}; /* bytes moved (success) */
inline constexpr Field srqn{0x108, 24};	    /* responder CQEs of an SRQ: its number
						       (mlx5_cqe64 srqn_uidx, low 24 bits) */
inline constexpr Field qpn{0x1c8, 24};	    /* the QP, in success and error CQEs */
inline constexpr Field wqe_counter{0x1e0, 16};
inline constexpr Field signature{0x1f0, 8};
inline constexpr Field opcode{0x1f8, 4}; /* MLX5_CQE_* */
inline constexpr Field format{0x1fc, 2};
inline constexpr Field se{0x1fe, 1};
inline constexpr Field owner{0x1ff, 1}; /* flips on each pass over the ring */
inline constexpr size_t op_own_byte = 63;
} // namespace cqe

/* The error CQE's own fields; qpn, wqe_counter, opcode and owner are cqe's. */
namespace err_cqe {
inline constexpr Field vendor_err_synd{0x1b0, 8};
inline constexpr Field syndrome{0x1b8, 8};     /* MLX5_CQE_SYNDROME_* */
inline constexpr Field s_wqe_opcode{0x1c0, 8}; /* the failed WQE's MLX5_OPCODE_* */
} // namespace err_cqe

/* The page address of an MTT entry, its enables (the entry's low bits) cleared. */
inline uint64_t mtt_page_address(const void *entry) noexcept
{
	constexpr uint64_t enables =
		uint64_t{1} << (63 - mtt::wr_en.bit_off) | uint64_t{1} << (63 - mtt::rd_en.bit_off);
	static_assert(mtt::address.bit_off == 0 && mtt::address.bits == 64);
	return get(entry, mtt::address) & ~enables;
}

/* UMR control segment flags as byte values (umr_ctrl's flag fields, for a byte built at once). */
namespace umr_flags {
/* The flag byte's value of a one-bit field of umr_ctrl's flags byte. */
constexpr uint8_t flag_bit(Field f) noexcept
{
	return static_cast<uint8_t>(word_bits(f, 1) >> 24);
}
inline constexpr uint8_t inline_xlt = flag_bit(umr_ctrl::inline_xlt);
inline constexpr uint8_t translation_offset_en = flag_bit(umr_ctrl::translation_offset_en);
inline constexpr uint8_t check_qpn = flag_bit(umr_ctrl::check_qpn);
/* Check field, bits 6:5: headers disagree on the names, these are the values. */
inline constexpr Field check = umr_ctrl::check; /* within the flags byte */
inline constexpr uint8_t check_none = 0;
inline constexpr uint8_t check_fail_if_not_free = 1; /* bind: the mkey must be free */
inline constexpr uint8_t check_fail_if_free = 2;     /* revoke: the mkey must be live */
/* The flag byte's value of a check value. */
constexpr uint8_t check_bits(uint8_t value) noexcept
{
	return static_cast<uint8_t>(word_bits(check, value) >> 24);
}
} // namespace umr_flags

/* UMR mkey_mask bits: which mkc fields the UMR writes (the others stay as they are). */
namespace umr_mkey_mask {
inline constexpr uint64_t len = 1ull << 0;
inline constexpr uint64_t page_size = 1ull << 1;
inline constexpr uint64_t start_addr = 1ull << 6;
inline constexpr uint64_t pd = 1ull << 7;
inline constexpr uint64_t en_rinval = 1ull << 8;
inline constexpr uint64_t key = 1ull << 13; /* mkey_7_0, the variant */
inline constexpr uint64_t qpn = 1ull << 14;
inline constexpr uint64_t lr = 1ull << 17;
inline constexpr uint64_t lw = 1ull << 18;
inline constexpr uint64_t rr = 1ull << 19;
inline constexpr uint64_t rw = 1ull << 20;
inline constexpr uint64_t a = 1ull << 21;
inline constexpr uint64_t small_fence = 1ull << 23;
inline constexpr uint64_t free = 1ull << 29;
} // namespace umr_mkey_mask

/*
 * ---------------------------------------------------------------------------------------------
 * Bring-up: firmware page requests, the EQ doorbell, the health buffer, ACCESS_REG host
 * endianness. Offsets from rdma-core providers/mlx5/mlx5_vfio.h (struct health_buffer,
 * mlx5_eqe_page_req, mlx5_reg_host_endianness) and mlx5_ifc.h (access_register_in/out,
 * cmd_hca_cap.log_uar_page_sz); values from mlx5_vfio.c and Linux mlx5 core (eq.c, health.c).
 * test_prm_layout checks each offset.
 * ---------------------------------------------------------------------------------------------
 */

/* Health buffer inside the init segment (struct health_buffer at 0x200). */
namespace health {
inline constexpr Field fw_ver{0x230 * 8, 32};
inline constexpr Field hw_id{0x234 * 8, 32};
inline constexpr Field rfr{0x238 * 8, 1}; /* recovery flow required: bit 31 of the word */
inline constexpr Field irisc_index{0x23c * 8, 8};
inline constexpr Field synd{0x23d * 8, 8}; /* 0: healthy */
inline constexpr Field ext_synd{0x23e * 8, 16};
/* health_counter: firmware bumps the low 24 bits while it runs (MAX_MISSES polls without a
 * change mean a hung firmware, mlx5_vfio.c mlx5_vfio_poll_health). */
inline constexpr Field counter{0x1010 * 8 + 8, 24};
} // namespace health

/* Health syndromes (the synd byte), as mlx5_vfio.c's hsynd_str and Linux health.c name them. */
namespace health_synd {
inline constexpr uint8_t fw_err = 0x1;
inline constexpr uint8_t irisc_err = 0x7;
inline constexpr uint8_t hw_unrecoverable_err = 0x8;
inline constexpr uint8_t crc_err = 0x9;
inline constexpr uint8_t fetch_pci_err = 0xa;
inline constexpr uint8_t hw_ftl_err = 0xb;
inline constexpr uint8_t async_eq_overrun_err = 0xc;
inline constexpr uint8_t eq_err = 0xd;
inline constexpr uint8_t eq_inv = 0xe;
inline constexpr uint8_t ffser_err = 0xf;
inline constexpr uint8_t high_temp = 0x10;
} // namespace health_synd

/* Event types of the async EQ (event_bitmask bits and eqe::event_type). */
namespace event_type {
inline constexpr uint8_t cmd = 0x0a;	      /* command completion: data = slot vector */
inline constexpr uint8_t page_request = 0x0b; /* firmware wants (or returns) pages */
} // namespace event_type

/* PAGE_REQUEST event data (struct mlx5_eqe_page_req at EQE byte 0x20). */
namespace eqe_page_req {
inline constexpr Field ec_function{0x100, 16};
inline constexpr Field function_id{0x110, 16};
inline constexpr Field num_pages{0x120, 32}; /* signed: negative asks the driver to take */
} // namespace eqe_page_req

/*
 * EQ doorbell in the EQ's UAR page: a 32-bit big-endian write of eqn << 24 | consumer index.
 * At +0 it also arms the EQ (interrupt on the next event), at +8 it only updates the consumer
 * index (rdma-core mlx5_vfio.c eq_update_ci; Linux eq.c, MLX5_EQ_DOORBEL_OFFSET).
 */
namespace eq_doorbell {
inline constexpr size_t offset = 0x40;	      /* within the UAR page */
inline constexpr size_t arm_offset = 0x40;    /* update and arm */
inline constexpr size_t update_offset = 0x48; /* update only */
inline constexpr Field eqn{0x00, 8};
inline constexpr Field consumer_index{0x08, 24};
/* Events an EQ gets beyond what its driver sized it for, so that the consumer index need only
 * be written back every spare_eqes events (rdma-core MLX5_NUM_SPARE_EQE). */
inline constexpr uint32_t spare_eqes = 0x80;
} // namespace eq_doorbell

/* ACCESS_REG: a device register read (op_mod 1) or written (op_mod 0). */
namespace access_register_in {
inline constexpr Field register_id{0x050, 16};
inline constexpr Field argument{0x060, 32};
inline constexpr size_t data_offset = 16; /* register_data, bytes */
inline constexpr size_t size = data_offset;
} // namespace access_register_in
namespace access_register_out {
inline constexpr size_t data_offset = 16;
inline constexpr size_t size = data_offset;
} // namespace access_register_out
namespace access_register_op_mod {
inline constexpr uint16_t write = 0;
inline constexpr uint16_t read = 1;
} // namespace access_register_op_mod
namespace reg_id {
inline constexpr uint16_t pmtu = 0x5003; /* Linux MLX5_REG_PMTU */
inline constexpr uint16_t host_endianness = 0x7004;
} // namespace reg_id
/* PMTU register (mlx5_ifc.h pmtu_reg_bits): a port's Ethernet MTU in bytes as the hardware
 * counts it (the netdev's MTU + 22: Ethernet header, VLAN tag and FCS, Linux en.h
 * MLX5E_SW2HW_MTU): the most it takes, what the driver set, what is in effect. */
namespace reg_pmtu {
inline constexpr size_t size = 16;
inline constexpr Field local_port{0x08, 8};
inline constexpr Field max_mtu{0x20, 16};
inline constexpr Field admin_mtu{0x40, 16};
inline constexpr Field oper_mtu{0x60, 16};
/* What the hardware MTU adds to the netdev's (Ethernet 14 + VLAN 4 + FCS 4). */
inline constexpr uint32_t l2_overhead = 22;
} // namespace reg_pmtu
/* HOST_ENDIANNESS register (struct mlx5_reg_host_endianness): 16 bytes, he in byte 0. */
namespace reg_host_endianness {
inline constexpr size_t size = 16;
inline constexpr Field he{0x00, 8};
/* The value a driver writes: 0 on a little-endian host, 0x80 on a big-endian one. */
inline constexpr uint8_t host_value = __BYTE_ORDER == __LITTLE_ENDIAN ? 0 : 0x80;
} // namespace reg_host_endianness

/* cmd_hca_cap fields a driver sets at bring-up (rdma-core handle_hca_cap, Linux main.c). */
namespace hca_cap_setup {
/* log2 of the UAR page size in 4 KiB units (0: 4 KiB, the system page on x86). */
inline constexpr Field log_uar_page_sz{0x490, 16};
} // namespace hca_cap_setup

/*
 * ---------------------------------------------------------------------------------------------
 * UMR as the Linux kernel posts it (drivers/infiniband/hw/mlx5/umr.c, qp.c): the special
 * contexts that name the reserved lkey, the QP bits a UMR-posting QP needs, and the 64-byte
 * granule of UMR translations.
 * ---------------------------------------------------------------------------------------------
 */

/*
 * QUERY_SPECIAL_CONTEXTS (Linux include/linux/mlx5/mlx5_ifc.h, struct
 * mlx5_ifc_query_special_contexts_{in,out}_bits; MLX5_CMD_OP_QUERY_SPECIAL_CONTEXTS 0x203).
 * resd_lkey is the device's reserved lkey: DMA by IOVA without an mkey, usable by a QP created
 * with qpc.rlky (a UMR's translation pointer names its list with it). Linux mlx5_core reads it
 * at bring-up (mlx5_core_query_special_contexts in drivers/net/ethernet/mellanox/mlx5/core/fw.c
 * of the kernels that kept special_contexts.resd_lkey). Its value is the device's: never a
 * constant.
 */
namespace opcode {
inline constexpr uint16_t query_special_contexts = 0x203;
} // namespace opcode
namespace query_special_contexts_in {
inline constexpr size_t size = 16;
} // namespace query_special_contexts_in
namespace query_special_contexts_out {
inline constexpr size_t size = 32;
inline constexpr Field dump_fill_mkey{0x040, 32};
inline constexpr Field resd_lkey{0x060, 32};
inline constexpr Field null_mkey{0x080, 32};
inline constexpr Field terminate_scatter_list_mkey{0x0a0, 32};
inline constexpr Field repeated_mkey{0x0c0, 32};
} // namespace query_special_contexts_out

/* qpc.fre (fast registration enabled: the QP may post UMR WQEs), beside qpc.rlky above; the
 * kernel sets both on every QP it creates for itself (qp.c, create_kernel_qp). */
namespace qpc {
inline constexpr Field fre{0x394, 1};
} // namespace qpc

/*
 * UMR translations travel in 64-byte units: klm_octowords (and the pointer segment's byte
 * count) is the list rounded up to 64 bytes, a multiple of 4 octwords, the rest zero (Linux
 * umr.c: mlx5r_umr_get_xlt_octo aligns to MLX5_IB_UMR_XLT_ALIGNMENT, 64, and the final chunk of
 * mlx5r_umr_update_xlt is padded with zeros to MLX5_UMR_FLEX_ALIGNMENT).
 */
inline constexpr size_t umr_xlt_align = 64;
constexpr uint64_t umr_xlt_padded(uint64_t bytes) noexcept
{
	return (bytes + umr_xlt_align - 1) / umr_xlt_align * umr_xlt_align;
}
constexpr uint64_t umr_xlt_octowords(uint64_t bytes) noexcept
{
	return umr_xlt_padded(bytes) / 16;
}

/* ==== RoCE capabilities and the RC QP's connection ====
 * Offsets are those of Linux include/linux/mlx5/mlx5_ifc.h and rdma-core
 * providers/mlx5/mlx5_ifc.h (struct mlx5_ifc_roce_cap_bits, cmd_hca_cap_bits, qpc_bits,
 * ads_bits); test_prm_layout.cpp checks them against those values. */

/* QUERY_HCA_CAP / SET_HCA_CAP type of the RoCE capabilities (MLX5_CAP_ROCE,
 * MLX5_SET_HCA_CAP_OP_MOD_ROCE). */
namespace cap_type {
inline constexpr uint16_t roce = 0x4;
}

/* General capabilities the QP's timestamp format and RoCE depend on. */
namespace hca_cap {
inline constexpr Field roce{0x21d, 1};	       /* the RoCE capabilities exist */
inline constexpr Field sq_ts_format{0x440, 2}; /* ts_format_cap */
inline constexpr Field rq_ts_format{0x442, 2}; /* ts_format_cap */
} // namespace hca_cap

/* RoCE capabilities (cap_type::roce), relative to the capability area. */
namespace roce_cap {
inline constexpr size_t size = 256;
inline constexpr Field sw_r_roce_src_udp_port{0x004, 1}; /* settable */
/* Force loopback (the address path's fl) is allowed on an RC QP while RoCE is disabled /
 * enabled on the port (rdma-core providers/mlx5/dr_send.c, dr_send_allow_fl). */
inline constexpr Field fl_rc_qp_when_roce_disabled{0x005, 1};
inline constexpr Field fl_rc_qp_when_roce_enabled{0x006, 1};
inline constexpr Field qp_ts_format{0x01e, 2}; /* ts_format_cap */
inline constexpr Field roce_version{0x098, 8};
inline constexpr Field r_roce_dest_udp_port{0x0b0, 16};
inline constexpr Field r_roce_max_src_udp_port{0x0c0, 16};
inline constexpr Field r_roce_min_src_udp_port{0x0d0, 16};
inline constexpr Field roce_address_table_size{0x0f0, 16}; /* GID table entries */
} // namespace roce_cap

/* What a *_ts_format capability says the device can stamp (MLX5_TIMESTAMP_FORMAT_CAP_*). */
namespace ts_format_cap {
inline constexpr uint32_t free_running = 0x0;
inline constexpr uint32_t real_time = 0x1;
inline constexpr uint32_t free_running_and_real_time = 0x2;
} // namespace ts_format_cap

/* qpc.ts_format values (MLX5_TIMESTAMP_FORMAT_*): default is the device's own choice. */
namespace qp_ts_format {
inline constexpr uint32_t free_running = 0x0;
inline constexpr uint32_t device_default = 0x1;
inline constexpr uint32_t real_time = 0x2;
} // namespace qp_ts_format

/* The RC connection's fields of the qpc and of its primary address path (ads at 0x0c0). */
namespace qpc {
inline constexpr Field ts_format{0x058, 2};
inline constexpr Field primary_fl{0x0c0 + 0x000, 1};		 /* force loopback */
inline constexpr Field primary_src_addr_index{0x0c0 + 0x048, 8}; /* GID index */
inline constexpr Field primary_hop_limit{0x0c0 + 0x058, 8};
/* rgid_rip: the remote GID, 16 bytes in wire order. */
inline constexpr size_t primary_rgid_rip_offset = (0x0c0 + 0x080) / 8; /* bytes */
inline constexpr size_t rgid_size = 16;
inline constexpr Field primary_udp_sport{0x0c0 + 0x110, 16};
} // namespace qpc

/* qpc.mtu (IB path MTU encoding; 0 is not an MTU). */
namespace qp_mtu {
inline constexpr uint32_t mtu_256 = 1;
inline constexpr uint32_t mtu_512 = 2;
inline constexpr uint32_t mtu_1024 = 3;
inline constexpr uint32_t mtu_2048 = 4;
inline constexpr uint32_t mtu_4096 = 5;
} // namespace qp_mtu

/* qpc.atomic_mode: IB-compliant 8-byte atomics (Linux drivers/infiniband/hw/mlx5/qp.c,
 * MLX5_ATOMIC_MODE_IB_COMP, what get_atomic_mode chooses for CmpSwap and FetchAdd). */
namespace qp_atomic_mode {
inline constexpr uint32_t ib_comp = 0x1;
}

/* The rest of opt_param_mask (Linux include/linux/mlx5/qp.h, enum mlx5_qp_optpar), and the
 * bits an RC QP's INIT2RTR / RTR2RTS may carry (drivers/infiniband/hw/mlx5/qp.c, opt_mask). */
namespace qp_optpar {
inline constexpr uint32_t alt_addr_path = 1u << 0;
inline constexpr uint32_t pkey_index = 1u << 4;
inline constexpr uint32_t q_key = 1u << 5;
inline constexpr uint32_t rnr_timeout = 1u << 6;
inline constexpr uint32_t primary_addr_path = 1u << 7;
inline constexpr uint32_t sra_max = 1u << 8;
inline constexpr uint32_t rra_max = 1u << 9;
inline constexpr uint32_t pm_state = 1u << 10;
inline constexpr uint32_t retry_count = 1u << 12;
inline constexpr uint32_t rnr_retry = 1u << 13;
inline constexpr uint32_t ack_timeout = 1u << 14;
inline constexpr uint32_t pri_port = 1u << 16;
inline constexpr uint32_t rc_init2rtr = alt_addr_path | rre | rae | rwe | pkey_index;
inline constexpr uint32_t rc_rtr2rts = alt_addr_path | rre | rae | rwe | pm_state | rnr_timeout;
/* A UD QP's (Linux qp.c opt_mask[..][..][MLX5_QP_ST_UD]). */
inline constexpr uint32_t ud_init2rtr = pkey_index | q_key;
inline constexpr uint32_t ud_rtr2rts = q_key;
} // namespace qp_optpar

/*
 * QUERY_ROCE_ADDRESS: one entry of a port's GID table (Linux include/linux/mlx5/mlx5_ifc.h and
 * rdma-core providers/mlx5/mlx5_ifc.h, struct mlx5_ifc_query_roce_address_{in,out}_bits and
 * mlx5_ifc_roce_addr_layout_bits; MLX5_CMD_OP_QUERY_ROCE_ADDRESS 0x760, and the l3 types and
 * versions of mlx5dv.h's MLX5_ROCE_L3_TYPE_* / MLX5_ROCE_VERSION_*). On a ConnectX the driver
 * writes the table (SET_ROCE_ADDRESS, 0x761, from the kernel's GID cache); the device model's
 * table comes from its device spec and the model does not take SET_ROCE_ADDRESS.
 */
namespace opcode {
inline constexpr uint16_t query_roce_address = 0x760;
} // namespace opcode
namespace query_roce_address_in {
inline constexpr size_t size = 16;
inline constexpr Field roce_address_index{0x040, 16};
inline constexpr Field vhca_port_num{0x05c, 4};
} // namespace query_roce_address_in
namespace query_roce_address_out {
inline constexpr size_t size = 48;
inline constexpr size_t roce_address_offset = 16; /* bytes: a roce_addr_layout */
} // namespace query_roce_address_out
namespace roce_addr_layout {
inline constexpr size_t size = 32;
inline constexpr size_t source_l3_address_offset = 0; /* 16 bytes: the GID, network order */
inline constexpr Field vlan_valid{0x083, 1};
inline constexpr Field vlan_id{0x084, 12};
inline constexpr Field source_mac_47_32{0x090, 16};
inline constexpr Field source_mac_31_0{0x0a0, 32};
inline constexpr Field roce_l3_type{0x0d4, 4};
inline constexpr Field roce_version{0x0d8, 8};
inline constexpr uint32_t l3_type_ipv4 = 0;
inline constexpr uint32_t l3_type_ipv6 = 1;
inline constexpr uint32_t version_2 = 2;
} // namespace roce_addr_layout

} // namespace nicmr::mlx5::prm

#endif
