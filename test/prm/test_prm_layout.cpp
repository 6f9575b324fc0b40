/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The PRM layout table against independent truths: structure sizes the PRM fixes, the mkey
 * context, the WQE segments, the UMR control segment and the CQE as rdma-core's
 * <infiniband/mlx5dv.h> lays them out and its inline setters write them, and get()/set() round
 * trips at every width and odd offsets.
 */
#include <arpa/inet.h>
#include <endian.h>

#include <cstddef>
#include <cstring>
#include <random>

#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include "mlx5_prm.h"

namespace prm = nicmr::mlx5::prm;

namespace {

uint64_t width_mask(uint32_t bits)
{
	return bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
}

/* A slow, obviously right reference: one bit at a time. */
uint64_t ref_get(const uint8_t *p, prm::Field f)
{
	uint64_t v = 0;
	for (uint32_t i = 0; i < f.bits; i++) {
		uint32_t bit = f.bit_off + i;
		v = v << 1 | ((p[bit / 8] >> (7 - bit % 8)) & 1);
	}
	return v;
}

} // namespace

TEST(PrmLayout, StructureSizesMatchThePrm)
{
	EXPECT_EQ(prm::cmdq_entry::size, 64u);
	EXPECT_EQ(prm::mailbox::size, 576u);
	EXPECT_EQ(prm::mailbox::data_size, 512u);
	EXPECT_EQ(prm::mkc::size, 64u);
	EXPECT_EQ(prm::mkc::size, sizeof(struct mlx5_wqe_mkey_context_seg));
	EXPECT_EQ(prm::create_mkey_in::size, 272u);
	EXPECT_EQ(prm::create_mkey_in::translations_offset * 8, 0x880u);
	EXPECT_EQ(prm::query_mkey_out::translations_offset * 8, 0x880u);
	EXPECT_EQ(prm::query_hca_cap_out::size, 16u + 4096u);
	EXPECT_EQ(prm::query_issi_out::size, 112u);
	/* The mailbox trailer fields end exactly at the block's last byte. */
	EXPECT_EQ((prm::mailbox::sig.bit_off + prm::mailbox::sig.bits) / 8, prm::mailbox::size);
	EXPECT_EQ((prm::cmdq_entry::ownership.bit_off + 1) / 8, prm::cmdq_entry::size);
	EXPECT_GE(prm::mailbox::align, prm::mailbox::size);
}

TEST(PrmLayout, InitSegmentOffsetsAreThePrmByteOffsets)
{
	EXPECT_EQ(prm::dword_byte_offset(prm::init_seg::cmdif_rev), 0x004u);
	EXPECT_EQ(prm::dword_byte_offset(prm::init_seg::cmdq_addr_h), 0x010u);
	EXPECT_EQ(prm::dword_byte_offset(prm::init_seg::cmdq_addr_l), 0x014u);
	EXPECT_EQ(prm::dword_byte_offset(prm::init_seg::log_cmdq_size), 0x014u);
	EXPECT_EQ(prm::dword_byte_offset(prm::init_seg::cmd_dbell), 0x018u);
	EXPECT_EQ(prm::dword_byte_offset(prm::init_seg::initializing), 0x1fcu);
	EXPECT_EQ(prm::dword_byte_offset(prm::init_seg::health_counter), 0x1010u);
	EXPECT_LE(prm::dword_byte_offset(prm::init_seg::health_counter) + 4, prm::init_seg::size);

	/* cmdif rev is the top 16 bits of word 1; log_sz / log_stride the low byte of word 5. */
	uint32_t word = htonl(0x0005abcd);
	EXPECT_EQ(prm::get(&word, prm::in_dword(prm::init_seg::cmdif_rev)), 5u);
	word = htonl(0x12345056);
	EXPECT_EQ(prm::get(&word, prm::in_dword(prm::init_seg::log_cmdq_size)), 5u);
	EXPECT_EQ(prm::get(&word, prm::in_dword(prm::init_seg::log_cmdq_stride)), 6u);
	word = htonl(0x80000000);
	EXPECT_EQ(prm::get(&word, prm::in_dword(prm::init_seg::initializing)), 1u);
}

TEST(PrmLayout, CommandQueueEntryOffsetsAreThePrmByteOffsets)
{
	EXPECT_EQ(prm::byte_offset(prm::cmdq_entry::input_length), 0x04u);
	EXPECT_EQ(prm::byte_offset(prm::cmdq_entry::input_mailbox_ptr), 0x08u);
	EXPECT_EQ(prm::cmdq_entry::inline_input, 0x10u);
	EXPECT_EQ(prm::cmdq_entry::inline_output, 0x20u);
	EXPECT_EQ(prm::byte_offset(prm::cmdq_entry::output_mailbox_ptr), 0x30u);
	EXPECT_EQ(prm::byte_offset(prm::cmdq_entry::output_length), 0x38u);
	EXPECT_EQ(prm::byte_offset(prm::cmdq_entry::token), 0x3cu);
	EXPECT_EQ(prm::byte_offset(prm::cmdq_entry::signature), 0x3du);

	uint8_t e[64] = {};
	prm::set(e, prm::cmdq_entry::ownership, 1);
	EXPECT_EQ(e[0x3f], 0x01);
	prm::set(e, prm::cmdq_entry::status, 0x7f);
	EXPECT_EQ(e[0x3f], 0xff);
	prm::set(e, prm::cmdq_entry::ownership, 0);
	EXPECT_EQ(e[0x3f], 0xfe);
}

/* Each mkc access bit set through the table shows up in the dv struct's field, and back. */
TEST(PrmLayout, MkeyContextAccessBitsLineUpWithMlx5dv)
{
	struct Case {
		prm::Field f;
		uint8_t flag;
	};
	const Case cases[] = {
		{prm::mkc::a, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC},
		{prm::mkc::rw, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE},
		{prm::mkc::rr, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ},
		{prm::mkc::lw, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE},
		{prm::mkc::lr, MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ},
	};
	for (const auto &c : cases) {
		mlx5_wqe_mkey_context_seg seg{};
		prm::set(&seg, c.f, 1);
		EXPECT_EQ(seg.access_flags, c.flag) << "bit " << c.f.bit_off;
		seg = {};
		seg.access_flags = c.flag;
		EXPECT_EQ(prm::get(&seg, c.f), 1u) << "bit " << c.f.bit_off;
	}

	mlx5_wqe_mkey_context_seg seg{};
	prm::set(&seg, prm::mkc::free, 1);
	EXPECT_EQ(seg.free, MLX5_WQE_MKEY_CONTEXT_FREE);
	seg = {};
	seg.free = MLX5_WQE_MKEY_CONTEXT_FREE;
	EXPECT_EQ(prm::get(&seg, prm::mkc::free), 1u);
}

TEST(PrmLayout, MkeyContextWordsLineUpWithMlx5dv)
{
	mlx5_wqe_mkey_context_seg seg{};
	prm::set(&seg, prm::mkc::qpn, 0xffffff);
	prm::set(&seg, prm::mkc::mkey_7_0, 0x5a);
	EXPECT_EQ(be32toh(seg.qpn_mkey), 0xffffff5au);

	prm::set(&seg, prm::mkc::pd, 0x123456);
	prm::set(&seg, prm::mkc::length64, 1);
	EXPECT_EQ(be32toh(seg.flags_pd), 0x80123456u);

	prm::set(&seg, prm::mkc::start_addr, 0x0011223344556677ull);
	prm::set(&seg, prm::mkc::len, 0x8899aabbccddeeffull);
	EXPECT_EQ(be64toh(seg.start_addr), 0x0011223344556677ull);
	EXPECT_EQ(be64toh(seg.len), 0x8899aabbccddeeffull);

	prm::set(&seg, prm::mkc::translations_octword_size, 2048);
	EXPECT_EQ(be32toh(seg.translations_octword_size), 2048u);
	prm::set(&seg, prm::mkc::log_page_size, 21);
	EXPECT_EQ(seg.log_page_size, 21);

	/* And the other way round. */
	mlx5_wqe_mkey_context_seg dv{};
	dv.qpn_mkey = htobe32(0x000abc01);
	dv.flags_pd = htobe32(0x00000007);
	dv.start_addr = htobe64(0x1000);
	dv.len = htobe64(0x2000);
	dv.translations_octword_size = htobe32(3);
	dv.log_page_size = 12;
	EXPECT_EQ(prm::get(&dv, prm::mkc::qpn), 0xabcu);
	EXPECT_EQ(prm::get(&dv, prm::mkc::mkey_7_0), 1u);
	EXPECT_EQ(prm::get(&dv, prm::mkc::pd), 7u);
	EXPECT_EQ(prm::get(&dv, prm::mkc::length64), 0u);
	EXPECT_EQ(prm::get(&dv, prm::mkc::start_addr), 0x1000u);
	EXPECT_EQ(prm::get(&dv, prm::mkc::len), 0x2000u);
	EXPECT_EQ(prm::get(&dv, prm::mkc::translations_octword_size), 3u);
	EXPECT_EQ(prm::get(&dv, prm::mkc::log_page_size), 12u);
}

TEST(PrmLayout, AccessModeSpansBothFields)
{
	uint8_t m[64] = {};
	for (uint32_t mode = 0; mode < 32; mode++) {
		prm::set_access_mode(m, mode);
		EXPECT_EQ(prm::get_access_mode(m), mode);
	}
	prm::set_access_mode(m, prm::access_mode::klm);
	EXPECT_EQ(prm::get(m, prm::mkc::access_mode_1_0), 2u);
	EXPECT_EQ(prm::get(m, prm::mkc::access_mode_4_2), 0u);
}

TEST(PrmLayout, MttEntryCarriesAddressAndEnables)
{
	uint64_t e = 0;
	prm::set(&e, prm::mtt::address, 0x7f0000200000ull);
	prm::set(&e, prm::mtt::rd_en, 1);
	prm::set(&e, prm::mtt::wr_en, 1);
	EXPECT_EQ(be64toh(e), 0x7f0000200003ull);
}

TEST(PrmLayout, CommandHeaderAndOutputFields)
{
	uint8_t in[16] = {};
	prm::set(in, prm::cmd_hdr_in::opcode, prm::opcode::create_mkey);
	prm::set(in, prm::cmd_hdr_in::op_mod, 0x1234);
	EXPECT_EQ(in[0], 0x02);
	EXPECT_EQ(in[1], 0x00);
	EXPECT_EQ(in[6], 0x12);
	EXPECT_EQ(in[7], 0x34);

	uint8_t out[16] = {};
	out[0] = prm::status::bad_index;
	out[4] = 0xde;
	out[7] = 0xef;
	out[9] = 0x01;
	out[11] = 0x02;
	EXPECT_EQ(prm::get(out, prm::cmd_hdr_out::status), prm::status::bad_index);
	EXPECT_EQ(prm::get(out, prm::cmd_hdr_out::syndrome), 0xde0000efu);
	EXPECT_EQ(prm::get(out, prm::create_mkey_out::mkey_index), 0x010002u);
}

TEST(PrmLayout, FieldsRoundTripAtEveryWidthAndOffset)
{
	std::mt19937_64 rng(12345);
	for (uint32_t bits = 1; bits <= 64; bits++) {
		for (uint32_t off = 0; off < 24; off++) {
			prm::Field f{off * 7 + (off & 1), bits}; /* odd and even offsets */
			uint8_t buf[32];
			uint8_t before[32];
			for (auto &b : buf)
				b = static_cast<uint8_t>(rng());
			std::memcpy(before, buf, sizeof(buf));
			uint64_t v = rng();
			prm::set(buf, f, v);
			ASSERT_EQ(prm::get(buf, f), v & width_mask(bits))
				<< "bits " << bits << " off " << f.bit_off;
			ASSERT_EQ(ref_get(buf, f), v & width_mask(bits));
			/* The fast form writes and reads the same bytes. */
			uint8_t fast[32];
			std::memcpy(fast, before, sizeof(fast));
			prm::detail::set_fast(fast, f, v);
			ASSERT_EQ(std::memcmp(fast, buf, sizeof(buf)), 0)
				<< "bits " << bits << " off " << f.bit_off;
			ASSERT_EQ(prm::detail::get_fast(buf, f), v & width_mask(bits));
			/* Nothing outside the field changed. */
			for (uint32_t bit = 0; bit < sizeof(buf) * 8; bit++) {
				if (bit >= f.bit_off && bit < f.bit_off + bits)
					continue;
				ASSERT_EQ((buf[bit / 8] >> (7 - bit % 8)) & 1,
					  (before[bit / 8] >> (7 - bit % 8)) & 1)
					<< "bit " << bit << " clobbered, field " << f.bit_off << "/"
					<< bits;
			}
		}
	}
}

TEST(PrmLayout, SetMasksTheValueToTheWidth)
{
	uint8_t buf[4] = {};
	prm::set(buf, prm::Field{4, 8}, 0xfff);
	EXPECT_EQ(buf[0], 0x0f);
	EXPECT_EQ(buf[1], 0xf0);
	EXPECT_EQ(buf[2], 0x00);
}

TEST(PrmLayout, HcaCapFieldsSitInsideTheGeneralCapabilities)
{
	const prm::Field fields[] = {
		prm::hca_cap::log_max_mkey,
		prm::hca_cap::log_max_klm_list_size,
		prm::hca_cap::umr_ptr_rlkey,
		prm::hca_cap::mkey_by_name,
		prm::hca_cap::log_max_pd,
		prm::hca_cap::atomic,
		prm::hca_cap::log_max_atomic_size_qp,
	};
	for (auto f : fields)
		EXPECT_LE(f.bit_off + f.bits, prm::hca_cap::size * 8);
	EXPECT_EQ(prm::cap_op_mod(prm::cap_type::atomic, prm::cap_mode::current), 7);
}

/* struct mlx5_ifc_atomic_caps_bits (Linux include/linux/mlx5/mlx5_ifc.h): dword 2 opens with
 * atomic_req_8B_endianness_mode (bits 31:30) then four reserved bits and
 * supported_atomic_req_8B_endianness_mode_1 (bit 25); atomic_operations is dword 4 bits 15:0,
 * atomic_size_qp dword 5 bits 15:0. */
TEST(PrmLayout, AtomicCapFieldsAreTheIfcBits)
{
	namespace ac = prm::atomic_cap;
	uint8_t cap[ac::size] = {};
	prm::set(cap, ac::atomic_req_8B_endianness_mode, prm::atomic_req_mode::host_endianness);
	EXPECT_EQ(cap[8], 0x40);
	prm::set(cap, ac::atomic_req_8B_endianness_mode, 3);
	EXPECT_EQ(cap[8], 0xc0);
	prm::set(cap, ac::supported_atomic_req_8B_endianness_mode_1, 1);
	EXPECT_EQ(cap[8], 0xc2);
	EXPECT_EQ(cap[9] | cap[10] | cap[11], 0);
	prm::set(cap, ac::atomic_operations, 0x1234);
	EXPECT_EQ(cap[18], 0x12);
	EXPECT_EQ(cap[19], 0x34);
	prm::set(cap, ac::atomic_size_qp, 0x0008);
	EXPECT_EQ(cap[22], 0x00);
	EXPECT_EQ(cap[23], 0x08);
	EXPECT_EQ(prm::atomic_req_mode::big_endian, 0u);
	EXPECT_EQ(prm::atomic_req_mode::host_endianness, 1u);
	const prm::Field fields[] = {ac::atomic_req_8B_endianness_mode,
				     ac::supported_atomic_req_8B_endianness_mode_1,
				     ac::atomic_operations, ac::atomic_size_qp};
	for (auto f : fields)
		EXPECT_LE(f.bit_off + f.bits, ac::size * 8);
}

/*
 * ---------------------------------------------------------------------------------------------
 * Data path: the WQE segments, the UMR control segment and the CQE of the layout table against
 * rdma-core's <infiniband/mlx5dv.h>: sizes, every field's offset and width against the struct
 * member that holds it, flag values against mlx5dv's constants, and the bytes the table writes
 * against what mlx5dv's inline setters (or, where mlx5dv has none, its struct members assigned
 * as rdma-core's providers/mlx5/qp.c does) write.
 * ---------------------------------------------------------------------------------------------
 */
namespace {

/* A slow, obviously right writer: one bit at a time. */
void ref_set(uint8_t *p, prm::Field f, uint64_t v)
{
	for (uint32_t i = 0; i < f.bits; i++) {
		uint32_t bit = f.bit_off + i;
		uint8_t m = static_cast<uint8_t>(0x80u >> (bit % 8));
		bool one = (v >> (f.bits - 1 - i)) & 1;
		p[bit / 8] = static_cast<uint8_t>(one ? (p[bit / 8] | m) : (p[bit / 8] & ~m));
	}
}

/* A field that covers exactly one struct member: same byte offset, same size. */
#define EXPECT_MEMBER(field, type, member)                                                         \
	do {                                                                                       \
		EXPECT_EQ((field).bit_off % 8, 0u) << #field;                                      \
		EXPECT_EQ(prm::byte_offset(field), offsetof(type, member)) << #field;              \
		EXPECT_EQ((field).bits, 8 * sizeof(type::member)) << #field;                       \
	} while (0)

void pattern(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = static_cast<uint8_t>(seed + i * 37);
}

} // namespace

TEST(PrmLayout, DataPathSegmentSizesAreMlx5dvs)
{
	EXPECT_EQ(prm::wqe_ctrl::size, sizeof(mlx5_wqe_ctrl_seg));
	EXPECT_EQ(prm::wqe_raddr::size, sizeof(mlx5_wqe_raddr_seg));
	EXPECT_EQ(prm::wqe_data::size, sizeof(mlx5_wqe_data_seg));
	EXPECT_EQ(prm::wqe_inline::header_size, sizeof(mlx5_wqe_inl_data_seg));
	EXPECT_EQ(prm::wqe_atomic::size, sizeof(mlx5_wqe_atomic_seg));
	EXPECT_EQ(prm::umr_ctrl::size, sizeof(mlx5_wqe_umr_ctrl_seg));
	EXPECT_EQ(prm::cqe::size, sizeof(mlx5_cqe64));
	EXPECT_EQ(prm::cqe::size, sizeof(mlx5_err_cqe));
	EXPECT_EQ(prm::cqe::op_own_byte, offsetof(mlx5_cqe64, op_own));
	EXPECT_EQ(prm::cqe::op_own_byte, offsetof(mlx5_err_cqe, op_own));
	EXPECT_EQ(prm::wqe_ctrl::doorbell_bytes, offsetof(mlx5_wqe_ctrl_seg, signature));
	EXPECT_EQ(prm::wq::wqebb_size, size_t{MLX5_SEND_WQE_BB});
}

TEST(PrmLayout, DataPathFieldsSitOnMlx5dvMembers)
{
	EXPECT_MEMBER(prm::wqe_ctrl::signature, mlx5_wqe_ctrl_seg, signature);
	EXPECT_MEMBER(prm::wqe_ctrl::dci_stream_channel_id, mlx5_wqe_ctrl_seg,
		      dci_stream_channel_id);
	EXPECT_MEMBER(prm::wqe_ctrl::fm_ce_se, mlx5_wqe_ctrl_seg, fm_ce_se);
	EXPECT_MEMBER(prm::wqe_ctrl::imm, mlx5_wqe_ctrl_seg, imm);
	/* The fields packed into opmod_idx_opcode and qpn_ds lie inside those members. */
	for (prm::Field f : {prm::wqe_ctrl::opmod, prm::wqe_ctrl::wqe_index, prm::wqe_ctrl::opcode})
		EXPECT_EQ(prm::dword_byte_offset(f), offsetof(mlx5_wqe_ctrl_seg, opmod_idx_opcode));
	for (prm::Field f : {prm::wqe_ctrl::qpn, prm::wqe_ctrl::ds})
		EXPECT_EQ(prm::dword_byte_offset(f), offsetof(mlx5_wqe_ctrl_seg, qpn_ds));

	EXPECT_MEMBER(prm::wqe_raddr::raddr, mlx5_wqe_raddr_seg, raddr);
	EXPECT_MEMBER(prm::wqe_raddr::rkey, mlx5_wqe_raddr_seg, rkey);
	EXPECT_MEMBER(prm::wqe_raddr::reserved, mlx5_wqe_raddr_seg, reserved);
	EXPECT_MEMBER(prm::wqe_data::byte_count, mlx5_wqe_data_seg, byte_count);
	EXPECT_MEMBER(prm::wqe_data::lkey, mlx5_wqe_data_seg, lkey);
	EXPECT_MEMBER(prm::wqe_data::addr, mlx5_wqe_data_seg, addr);
	EXPECT_MEMBER(prm::wqe_atomic::swap_add, mlx5_wqe_atomic_seg, swap_add);
	EXPECT_MEMBER(prm::wqe_atomic::compare, mlx5_wqe_atomic_seg, compare);

	EXPECT_MEMBER(prm::umr_ctrl::klm_octowords, mlx5_wqe_umr_ctrl_seg, klm_octowords);
	EXPECT_MEMBER(prm::umr_ctrl::translation_offset, mlx5_wqe_umr_ctrl_seg, translation_offset);
	EXPECT_MEMBER(prm::umr_ctrl::mkey_mask, mlx5_wqe_umr_ctrl_seg, mkey_mask);
	for (prm::Field f : {prm::umr_ctrl::inline_xlt, prm::umr_ctrl::check,
			     prm::umr_ctrl::translation_offset_en, prm::umr_ctrl::check_qpn})
		EXPECT_EQ(prm::byte_offset(f), offsetof(mlx5_wqe_umr_ctrl_seg, flags));

	EXPECT_MEMBER(prm::cqe::byte_cnt, mlx5_cqe64, byte_cnt);
	EXPECT_MEMBER(prm::cqe::imm_inval_pkey, mlx5_cqe64, imm_inval_pkey);
	EXPECT_MEMBER(prm::cqe::wqe_counter, mlx5_cqe64, wqe_counter);
	EXPECT_MEMBER(prm::cqe::wqe_counter, mlx5_err_cqe, wqe_counter);
	EXPECT_MEMBER(prm::cqe::signature, mlx5_cqe64, signature);
	EXPECT_MEMBER(prm::err_cqe::syndrome, mlx5_err_cqe, syndrome);
	EXPECT_MEMBER(prm::err_cqe::vendor_err_synd, mlx5_err_cqe, vendor_err_synd);
	EXPECT_EQ(prm::dword_byte_offset(prm::cqe::qpn), offsetof(mlx5_cqe64, sop_drop_qpn));
	EXPECT_EQ(prm::dword_byte_offset(prm::cqe::qpn), offsetof(mlx5_err_cqe, s_wqe_opcode_qpn));
	EXPECT_EQ(prm::dword_byte_offset(prm::err_cqe::s_wqe_opcode),
		  offsetof(mlx5_err_cqe, s_wqe_opcode_qpn));
	for (prm::Field f : {prm::cqe::opcode, prm::cqe::format, prm::cqe::se, prm::cqe::owner})
		EXPECT_EQ(prm::byte_offset(f), offsetof(mlx5_cqe64, op_own));
}

TEST(PrmLayout, CtrlSegmentBytesAreMlx5dvSetCtrlSegs)
{
	namespace f = prm::wqe_ctrl;
	struct Case {
		uint16_t pi;
		uint8_t opcode, opmod;
		uint32_t qpn;
		uint8_t fm_ce_se, ds, signature;
		uint32_t imm;
	};
	const Case cases[] = {
		{0, MLX5_OPCODE_NOP, 0, 0, 0, 1, 0, 0},
		{0x1234, MLX5_OPCODE_RDMA_WRITE, 0, 0xabcdef,
		 MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_FENCE, 5, 0, 0x77},
		{0xffff, MLX5_OPCODE_UMR, 0x5a, 0xffffff,
		 MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE | MLX5_WQE_CTRL_SOLICITED, 63, 0xc3,
		 0x12345601},
		{0x8001, MLX5_OPCODE_ATOMIC_CS, 0, 0x000100, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0},
	};
	for (const Case &c : cases) {
		uint8_t ours[16], theirs[16];
		pattern(ours, sizeof(ours), 0x11); /* a reused ring slot: nothing may stay */
		std::memset(theirs, 0, sizeof(theirs));
		prm::set_word<f::opmod, f::wqe_index, f::opcode>(ours, c.opmod, c.pi, c.opcode);
		prm::set_word<f::qpn, f::ds>(ours, c.qpn, c.ds);
		prm::set_word<f::signature, f::dci_stream_channel_id, f::fm_ce_se>(
			ours, c.signature, 0u, c.fm_ce_se);
		prm::set(ours, f::imm, c.imm);
		/* mlx5dv takes imm as it goes into the WQE (big-endian). */
		mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg *>(theirs), c.pi, c.opcode,
				    c.opmod, c.qpn, c.fm_ce_se, c.ds, c.signature, htobe32(c.imm));
		EXPECT_EQ(std::memcmp(ours, theirs, sizeof(ours)), 0) << "pi " << c.pi;
		EXPECT_EQ(prm::get(theirs, f::wqe_index), c.pi);
		EXPECT_EQ(prm::get(theirs, f::opcode), c.opcode);
		EXPECT_EQ(prm::get(theirs, f::opmod), c.opmod);
		EXPECT_EQ(prm::get(theirs, f::qpn), c.qpn);
		EXPECT_EQ(prm::get(theirs, f::ds), c.ds);
		EXPECT_EQ(prm::get(theirs, f::fm_ce_se), c.fm_ce_se);
		EXPECT_EQ(prm::get(theirs, f::imm), c.imm);
	}
}

TEST(PrmLayout, DataSegmentBytesAreMlx5dvSetDataSegs)
{
	const struct {
		uint32_t len, lkey;
		uint64_t addr;
	} cases[] = {{0, 0, 0},
		     {8, 0x100, 0x1000},
		     {65536, 0x00abcd01, 0x00007f0012345678},
		     {0xffffffff, 0xffffffff, ~uint64_t{0}}};
	for (const auto &c : cases) {
		uint8_t ours[16], theirs[16];
		pattern(ours, sizeof(ours), 0x22);
		prm::set(ours, prm::wqe_data::byte_count, c.len);
		prm::set(ours, prm::wqe_data::lkey, c.lkey);
		prm::set(ours, prm::wqe_data::addr, c.addr);
		mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg *>(theirs), c.len, c.lkey,
				    static_cast<uintptr_t>(c.addr));
		EXPECT_EQ(std::memcmp(ours, theirs, sizeof(ours)), 0) << "len " << c.len;
		EXPECT_EQ(prm::get(theirs, prm::wqe_data::byte_count), c.len);
		EXPECT_EQ(prm::get(theirs, prm::wqe_data::lkey), c.lkey);
		EXPECT_EQ(prm::get(theirs, prm::wqe_data::addr), c.addr);
	}
}

/* mlx5dv.h has no setter for these: rdma-core's providers/mlx5/qp.c assigns the members
 * (set_raddr_seg, set_atomic_seg, the inline header of set_data_inl_seg). */
TEST(PrmLayout, RemoteAddressAtomicAndInlineBytesAreRdmaCores)
{
	uint8_t ours[16];
	mlx5_wqe_raddr_seg r{};
	pattern(ours, sizeof(ours), 0x33);
	prm::set(ours, prm::wqe_raddr::raddr, 0x0011223344556677ull);
	prm::set(ours, prm::wqe_raddr::rkey, 0x8899aabb);
	prm::set(ours, prm::wqe_raddr::reserved, 0);
	r.raddr = htobe64(0x0011223344556677ull);
	r.rkey = htobe32(0x8899aabb);
	r.reserved = 0;
	EXPECT_EQ(std::memcmp(ours, &r, sizeof(r)), 0);

	mlx5_wqe_atomic_seg a{};
	pattern(ours, sizeof(ours), 0x44);
	prm::set(ours, prm::wqe_atomic::swap_add, 0xfedcba9876543210ull);
	prm::set(ours, prm::wqe_atomic::compare, 0x0123456789abcdefull);
	a.swap_add = htobe64(0xfedcba9876543210ull);
	a.compare = htobe64(0x0123456789abcdefull);
	EXPECT_EQ(std::memcmp(ours, &a, sizeof(a)), 0);

	for (uint32_t len : {0u, 1u, 8u, 972u, 0x7fffffffu}) {
		uint32_t hdr = 0x5a5a5a5a;
		prm::set_word<prm::wqe_inline::inline_flag, prm::wqe_inline::byte_count>(&hdr, 1u,
											 len);
		EXPECT_EQ(hdr, htobe32(len | MLX5_INLINE_SEG)) << len;
		EXPECT_EQ(prm::get(&hdr, prm::wqe_inline::byte_count), len);
		EXPECT_EQ(prm::get(&hdr, prm::wqe_inline::inline_flag), 1u);
	}
	/* A data segment's byte_count has the flag clear. */
	mlx5_wqe_data_seg d{};
	mlx5dv_set_data_seg(&d, 4096, 1, 2);
	EXPECT_EQ(prm::get(&d, prm::wqe_inline::inline_flag), 0u);
}

TEST(PrmLayout, UmrControlSegmentIsMlx5dvs)
{
	/* Flag bits (mlx5dv names the check value 1 CHECK_FREE: the bind's "must be free"). */
	EXPECT_EQ(prm::umr_flags::inline_xlt, MLX5_WQE_UMR_CTRL_FLAG_INLINE);
	EXPECT_EQ(prm::umr_flags::check_bits(prm::umr_flags::check_fail_if_not_free),
		  MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE);
	EXPECT_EQ(prm::umr_flags::translation_offset_en, MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET);
	EXPECT_EQ(prm::umr_flags::check_qpn, MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN);
	const struct {
		uint64_t ours, theirs;
	} masks[] = {
		{prm::umr_mkey_mask::len, MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN},
		{prm::umr_mkey_mask::start_addr, MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR},
		{prm::umr_mkey_mask::key, MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY},
		{prm::umr_mkey_mask::qpn, MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN},
		{prm::umr_mkey_mask::lw, MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE},
		{prm::umr_mkey_mask::rr, MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ},
		{prm::umr_mkey_mask::rw, MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE},
		{prm::umr_mkey_mask::a, MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC},
		{prm::umr_mkey_mask::free, MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE},
	};
	for (const auto &m : masks)
		EXPECT_EQ(m.ours, m.theirs);

	/* A bind's segment through the table against the struct's members. */
	uint8_t ours[48] = {};
	prm::set(ours, prm::umr_ctrl::inline_xlt, 1);
	prm::set(ours, prm::umr_ctrl::check, prm::umr_flags::check_fail_if_not_free);
	prm::set(ours, prm::umr_ctrl::translation_offset_en, 1);
	prm::set(ours, prm::umr_ctrl::klm_octowords, 0x0102);
	prm::set(ours, prm::umr_ctrl::translation_offset, 0x0304);
	prm::set(ours, prm::umr_ctrl::mkey_mask, prm::umr_mkey_mask::free | prm::umr_mkey_mask::pd);
	mlx5_wqe_umr_ctrl_seg u{};
	u.flags = MLX5_WQE_UMR_CTRL_FLAG_INLINE | MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE |
		  MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET;
	u.klm_octowords = htobe16(0x0102);
	u.translation_offset = htobe16(0x0304);
	u.mkey_mask = htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | (1u << 7));
	EXPECT_EQ(std::memcmp(ours, &u, sizeof(u)), 0);
	EXPECT_EQ(prm::get(&u, prm::umr_ctrl::check), prm::umr_flags::check_fail_if_not_free);
	EXPECT_EQ(prm::get(&u, prm::umr_ctrl::check_qpn), 0u);
}

TEST(PrmLayout, CqeFieldsReadWhatMlx5dvReads)
{
	mlx5_cqe64 c{};
	c.byte_cnt = htobe32(65536);
	c.sop_drop_qpn = htobe32(0xff000000u | 0x00abcdef); /* sop/drop bits are not the qpn */
	c.wqe_counter = htobe16(0xbeef);
	c.op_own = static_cast<uint8_t>(MLX5_CQE_RESP_SEND << 4 | 0x0f);
	EXPECT_EQ(prm::get(&c, prm::cqe::byte_cnt), 65536u);
	EXPECT_EQ(prm::get(&c, prm::cqe::qpn), 0xabcdefu);
	EXPECT_EQ(prm::get(&c, prm::cqe::wqe_counter), 0xbeefu);
	EXPECT_EQ(prm::get(&c, prm::cqe::opcode), mlx5dv_get_cqe_opcode(&c));
	EXPECT_EQ(prm::get(&c, prm::cqe::owner), mlx5dv_get_cqe_owner(&c));
	EXPECT_EQ(prm::get(&c, prm::cqe::se), mlx5dv_get_cqe_se(&c));
	EXPECT_EQ(prm::get(&c, prm::cqe::format), mlx5dv_get_cqe_format(&c));
	/* The op_own byte alone, as the poller loads it. */
	EXPECT_EQ(prm::get(&c.op_own, prm::in_byte(prm::cqe::opcode)),
		  uint64_t{MLX5_CQE_RESP_SEND});
	EXPECT_EQ(prm::get(&c.op_own, prm::in_byte(prm::cqe::owner)), 1u);
	for (uint8_t owner : {0, 1}) {
		mlx5_cqe64 a{}, b{};
		a.op_own = b.op_own = 0xd6;
		mlx5dv_set_cqe_owner(&a, owner);
		prm::set(&b, prm::cqe::owner, owner);
		EXPECT_EQ(std::memcmp(&a, &b, sizeof(a)), 0);
	}

	mlx5_err_cqe e{};
	e.syndrome = 0x13;
	e.vendor_err_synd = 0x93;
	e.s_wqe_opcode_qpn = htobe32(uint32_t{MLX5_OPCODE_RDMA_READ} << 24 | 0x000456);
	e.wqe_counter = htobe16(7);
	e.op_own = static_cast<uint8_t>(MLX5_CQE_REQ_ERR << 4);
	EXPECT_EQ(prm::get(&e, prm::err_cqe::syndrome), 0x13u);
	EXPECT_EQ(prm::get(&e, prm::err_cqe::vendor_err_synd), 0x93u);
	EXPECT_EQ(prm::get(&e, prm::err_cqe::s_wqe_opcode), uint64_t{MLX5_OPCODE_RDMA_READ});
	EXPECT_EQ(prm::get(&e, prm::cqe::qpn), 0x456u);
	EXPECT_EQ(prm::get(&e, prm::cqe::wqe_counter), 7u);
	EXPECT_EQ(prm::get(&e, prm::cqe::opcode), uint64_t{MLX5_CQE_REQ_ERR});

	/* The CQ doorbell record: the consumer index in the low 24 bits of a big-endian word. */
	EXPECT_EQ(prm::word_be<prm::dbr::cq_ci>(0x01234567u), htobe32(0x00234567));
	EXPECT_EQ(prm::word_be<prm::dbr::sq_counter>(0xabcdu), htobe32(0xabcd));
}

TEST(PrmLayout, MkeyKeyAndMttPageAddress)
{
	EXPECT_EQ(prm::mkey::make(0x123456, 0x78), 0x12345678u);
	EXPECT_EQ(prm::mkey::index(0x12345678), 0x123456u);
	EXPECT_EQ(prm::mkey::variant(0x12345678), 0x78u);
	/* The variant is the mkey context's mkey_7_0: the UMR writes it there. */
	mlx5_wqe_mkey_context_seg seg{};
	prm::set(&seg, prm::mkc::mkey_7_0, prm::mkey::variant(0x12345678));
	EXPECT_EQ(be32toh(seg.qpn_mkey) & 0xff, 0x78u);
	uint64_t e = 0;
	prm::set(&e, prm::mtt::address, 0x7f0000200000ull);
	prm::set(&e, prm::mtt::rd_en, 1);
	prm::set(&e, prm::mtt::wr_en, 1);
	EXPECT_EQ(prm::mtt_page_address(&e), 0x7f0000200000ull);
}

/* Both forms of set() and get() (the fast one compile-time fields take: byte-aligned 16/32/64
 * bits, inside one byte, whole bytes; and the byte walk) write and read what the bit-at-a-time
 * reference does, for every data-path and mkey-context field, over a background that must
 * survive, with values wider than the field. */
TEST(PrmLayout, FastPathsAgreeWithTheBitReference)
{
	const prm::Field fields[] = {
		prm::wqe_ctrl::opmod,
		prm::wqe_ctrl::wqe_index,
		prm::wqe_ctrl::opcode,
		prm::wqe_ctrl::qpn,
		prm::wqe_ctrl::ds,
		prm::wqe_ctrl::signature,
		prm::wqe_ctrl::dci_stream_channel_id,
		prm::wqe_ctrl::fm_ce_se,
		prm::wqe_ctrl::imm,
		prm::wqe_raddr::raddr,
		prm::wqe_raddr::rkey,
		prm::wqe_data::byte_count,
		prm::wqe_data::lkey,
		prm::wqe_data::addr,
		prm::wqe_inline::inline_flag,
		prm::wqe_inline::byte_count,
		prm::wqe_atomic::swap_add,
		prm::wqe_atomic::compare,
		prm::umr_ctrl::inline_xlt,
		prm::umr_ctrl::check,
		prm::umr_ctrl::translation_offset_en,
		prm::umr_ctrl::check_qpn,
		prm::umr_ctrl::klm_octowords,
		prm::umr_ctrl::translation_offset,
		prm::umr_ctrl::mkey_mask,
		prm::cqe::byte_cnt,
		prm::cqe::imm_inval_pkey,
		prm::cqe::qpn,
		prm::cqe::wqe_counter,
		prm::cqe::opcode,
		prm::cqe::owner,
		prm::err_cqe::syndrome,
		prm::err_cqe::vendor_err_synd,
		prm::err_cqe::s_wqe_opcode,
		prm::mkc::free,
		prm::mkc::access_mode_4_2,
		prm::mkc::umr_en,
		prm::mkc::a,
		prm::mkc::rw,
		prm::mkc::rr,
		prm::mkc::lw,
		prm::mkc::lr,
		prm::mkc::access_mode_1_0,
		prm::mkc::qpn,
		prm::mkc::mkey_7_0,
		prm::mkc::length64,
		prm::mkc::en_rinval,
		prm::mkc::pd,
		prm::mkc::start_addr,
		prm::mkc::len,
		prm::mkc::translations_octword_size,
		prm::mkc::log_page_size,
		prm::mtt::address,
		prm::mtt::wr_en,
		prm::mtt::rd_en,
		prm::dbr::cq_ci,
		prm::dbr::sq_counter,
	};
	for (const prm::Field &f : fields)
		for (uint64_t v :
		     {uint64_t{0}, uint64_t{1}, uint64_t{0x5a5a5a5a5a5a5a5a}, ~uint64_t{0}}) {
			uint8_t ref[64], fast[64], walk[64], pub[64];
			for (uint8_t *b : {ref, fast, walk, pub})
				pattern(b, sizeof(ref), 0x3c);
			ref_set(ref, f, v);
			prm::detail::set_fast(fast, f, v);
			prm::detail::set_walk(walk, f, v);
			prm::set(pub, f, v);
			EXPECT_EQ(std::memcmp(fast, ref, sizeof(ref)), 0)
				<< "fast, bit " << f.bit_off;
			EXPECT_EQ(std::memcmp(walk, ref, sizeof(ref)), 0)
				<< "walk, bit " << f.bit_off;
			EXPECT_EQ(std::memcmp(pub, ref, sizeof(ref)), 0)
				<< "set, bit " << f.bit_off;
			const uint64_t want = v & width_mask(f.bits);
			EXPECT_EQ(ref_get(ref, f), want);
			EXPECT_EQ(prm::detail::get_fast(ref, f), want) << "fast, bit " << f.bit_off;
			EXPECT_EQ(prm::detail::get_walk(ref, f), want) << "walk, bit " << f.bit_off;
			EXPECT_EQ(prm::get(ref, f), want) << "get, bit " << f.bit_off;
		}
}

/*
 * Bring-up section. Byte offsets of rdma-core's providers/mlx5/mlx5_vfio.h: struct health_buffer
 * (5 assert_var, 3 reserved, assert_exit_ptr, assert_callra, 2 reserved, fw_ver, hw_id, rfr,
 * irisc_index, synd, ext_synd) at init segment 0x200; struct mlx5_eqe_page_req (ec_function,
 * func_id, num_pages) at EQE data 0x20; the 16-byte mlx5_reg_host_endianness. mlx5_ifc.h:
 * access_register_in (register_id at 0x50, argument 0x60, register_data 0x80) and
 * cmd_hca_cap.log_uar_page_sz[0x10] at 0x490. Values: MLX5_EVENT_TYPE_CMD 0x0a,
 * MLX5_EVENT_TYPE_PAGE_REQUEST 0x0b, MLX5_REG_HOST_ENDIANNESS 0x7004, MLX5_EQ_DOORBEL_OFFSET
 * 0x40, MLX5_NUM_SPARE_EQE 0x80, MLX5_HEALTH_SYNDR_ASYNC_EQ_OVERRUN_ERR 0xc.
 */
TEST(PrmLayout, BringUpFieldsAreRdmaCoresAndIfcs)
{
	namespace h = prm::health;
	EXPECT_EQ(prm::byte_offset(h::fw_ver), 0x200u + 12 * 4);
	EXPECT_EQ(prm::byte_offset(h::hw_id), 0x200u + 13 * 4);
	EXPECT_EQ(prm::byte_offset(h::rfr), 0x200u + 14 * 4);
	EXPECT_EQ(prm::byte_offset(h::irisc_index), 0x23cu);
	EXPECT_EQ(prm::byte_offset(h::synd), 0x23du);
	EXPECT_EQ(h::synd.bit_off, prm::init_seg::health_syndrome.bit_off);
	EXPECT_EQ(prm::byte_offset(h::ext_synd), 0x23eu);
	EXPECT_EQ(prm::dword_byte_offset(h::counter), 0x1010u);
	/* rfr is bit 31 of its big-endian word; the counter the low 24 bits of its word. */
	uint32_t word = htonl(0x80000000);
	EXPECT_EQ(prm::get(&word, prm::in_dword(h::rfr)), 1u);
	word = htonl(0xab123456);
	EXPECT_EQ(prm::get(&word, prm::in_dword(h::counter)), 0x123456u);
	EXPECT_EQ(prm::health_synd::async_eq_overrun_err, 0xc);
	EXPECT_EQ(prm::health_synd::fw_err, 0x1);

	EXPECT_EQ(prm::event_type::cmd, 0x0a);
	EXPECT_EQ(prm::event_type::page_request, 0x0b);
	EXPECT_EQ(prm::byte_offset(prm::eqe_page_req::ec_function), prm::eqe::data_offset);
	EXPECT_EQ(prm::byte_offset(prm::eqe_page_req::function_id), prm::eqe::data_offset + 2);
	EXPECT_EQ(prm::byte_offset(prm::eqe_page_req::num_pages), prm::eqe::data_offset + 4);

	EXPECT_EQ(prm::eq_doorbell::arm_offset, 0x40u);
	EXPECT_EQ(prm::eq_doorbell::update_offset, 0x40u + 2 * 4);
	EXPECT_EQ(prm::eq_doorbell::spare_eqes, 0x80u);
	uint32_t db = 0;
	prm::set(&db, prm::eq_doorbell::eqn, 7);
	prm::set(&db, prm::eq_doorbell::consumer_index, 0x123456);
	EXPECT_EQ(ntohl(db), (7u << 24) | 0x123456u); /* rdma-core: ci & 0xffffff | eqn << 24 */

	EXPECT_EQ(prm::access_register_in::register_id.bit_off, 0x50u);
	EXPECT_EQ(prm::access_register_in::argument.bit_off, 0x60u);
	EXPECT_EQ(prm::access_register_in::data_offset * 8, 0x80u);
	EXPECT_EQ(prm::access_register_out::data_offset * 8, 0x80u);
	EXPECT_EQ(prm::reg_id::host_endianness, 0x7004);
	EXPECT_EQ(prm::reg_host_endianness::size, 16u);
	EXPECT_EQ(prm::access_register_op_mod::write, 0); /* rdma-core: op_mod = !write */

	EXPECT_EQ(prm::hca_cap_setup::log_uar_page_sz.bit_off, 0x490u);
	EXPECT_EQ(prm::hca_cap_setup::log_uar_page_sz.bits, 16u);
	EXPECT_LE(prm::hca_cap_setup::log_uar_page_sz.bit_off + 16,
		  prm::query_hca_cap_out::capability_size * 8);
	/* cmdif_checksum[0x2] at 0x210 of cmd_hca_cap, which rdma-core and the kernel clear. */
	EXPECT_EQ(prm::hca_cap::cmdif_checksum.bit_off, 0x210u);
}

/*
 * ---------------------------------------------------------------------------------------------
 * UMR as the kernel posts it: QUERY_SPECIAL_CONTEXTS, qpc.fre / qpc.rlky and the 64-byte unit of
 * UMR translations, against the public mlx5_ifc.h (Linux include/linux/mlx5/mlx5_ifc.h,
 * rdma-core providers/mlx5/mlx5_ifc.h) and Linux drivers/infiniband/hw/mlx5/umr.c.
 * ---------------------------------------------------------------------------------------------
 */

/* struct mlx5_ifc_query_special_contexts_out_bits: status 0x00, syndrome 0x20, dump_fill_mkey
 * 0x40, resd_lkey 0x60, null_mkey 0x80, terminate_scatter_list_mkey 0xa0, repeated_mkey 0xc0,
 * reserved_at_e0[0x20]: 0x100 bits; the input is the 0x80-bit header; opcode 0x203. */
TEST(PrmLayout, QuerySpecialContextsIsTheIfcLayout)
{
	namespace o = prm::query_special_contexts_out;
	EXPECT_EQ(prm::opcode::query_special_contexts, 0x203);
	EXPECT_EQ(prm::query_special_contexts_in::size * 8, 0x80u);
	EXPECT_EQ(o::size * 8, 0x100u);
	EXPECT_EQ(o::dump_fill_mkey.bit_off, 0x40u);
	EXPECT_EQ(o::resd_lkey.bit_off, 0x60u);
	EXPECT_EQ(o::null_mkey.bit_off, 0x80u);
	EXPECT_EQ(o::terminate_scatter_list_mkey.bit_off, 0xa0u);
	EXPECT_EQ(o::repeated_mkey.bit_off, 0xc0u);
	for (prm::Field f : {o::dump_fill_mkey, o::resd_lkey, o::null_mkey,
			     o::terminate_scatter_list_mkey, o::repeated_mkey})
		EXPECT_EQ(f.bits, 32u);
	/* The word lands in bytes 12..15, big-endian. */
	uint8_t out[o::size] = {};
	prm::set(out, o::resd_lkey, 0x11223344);
	EXPECT_EQ(out[12], 0x11);
	EXPECT_EQ(out[15], 0x44);
	EXPECT_EQ(out[11] | out[16], 0);
}

/* struct mlx5_ifc_qpc_bits: rlky is bit 0x5b (after reserved_at_5a, before
 * ulp_stateless_offload_mode); fre is bit 0x394 (after rnr_retry 0x390 and reserved_at_393,
 * before cur_rnr_retry). */
TEST(PrmLayout, QpcFreAndRlkyAreTheIfcBits)
{
	EXPECT_EQ(prm::qpc::rlky.bit_off, 0x5bu);
	EXPECT_EQ(prm::qpc::fre.bit_off, 0x394u);
	EXPECT_EQ(prm::qpc::rlky.bits, 1u);
	EXPECT_EQ(prm::qpc::fre.bits, 1u);
	EXPECT_EQ(prm::qpc::fre.bit_off, prm::qpc::rnr_retry.bit_off + 4);
	uint8_t q[prm::qpc::size] = {};
	prm::set(q, prm::qpc::fre, 1);
	EXPECT_EQ(q[0x72], 0x08); /* dword 28 (byte 0x70), bit 11 */
	prm::set(q, prm::qpc::rlky, 1);
	EXPECT_EQ(q[0x0b], 0x10); /* dword 2, bit 4 */
}

/* cmd_hca_cap: compact_address_vector opens dword 0x10 (bit 0x200); then eth_striding_wq,
 * reserved, the two ipoib bits, ib_striding_wq, repeated_block_disabled 0x206,
 * umr_modify_entity_size_disabled 0x207, umr_modify_atomic_disabled 0x208,
 * umr_indirect_mkey_disabled 0x209, umr_fence 0x20a (2 bits). */
TEST(PrmLayout, UmrModifyDisabledCapsAreTheIfcBits)
{
	EXPECT_EQ(prm::hca_cap::umr_modify_entity_size_disabled.bit_off, 0x207u);
	EXPECT_EQ(prm::hca_cap::umr_modify_atomic_disabled.bit_off, 0x208u);
	EXPECT_EQ(prm::hca_cap::umr_indirect_mkey_disabled.bit_off, 0x209u);
	EXPECT_EQ(prm::hca_cap::umr_fence.bit_off, 0x20au);
	uint8_t cap[prm::hca_cap::size] = {};
	prm::set(cap, prm::hca_cap::umr_modify_entity_size_disabled, 1);
	prm::set(cap, prm::hca_cap::umr_modify_atomic_disabled, 1);
	EXPECT_EQ(cap[0x40], 0x01);
	EXPECT_EQ(cap[0x41], 0x80);
}

/* Linux umr.c: mlx5r_umr_get_xlt_octo(bytes) = ALIGN(bytes, 64) / 16. */
TEST(PrmLayout, UmrTranslationsTravelIn64ByteUnits)
{
	EXPECT_EQ(prm::umr_xlt_align, 64u);
	EXPECT_EQ(prm::umr_xlt_octowords(0), 0u);
	EXPECT_EQ(prm::umr_xlt_octowords(8), 4u);
	EXPECT_EQ(prm::umr_xlt_octowords(24), 4u);
	EXPECT_EQ(prm::umr_xlt_octowords(64), 4u);
	EXPECT_EQ(prm::umr_xlt_octowords(72), 8u);
	EXPECT_EQ(prm::umr_xlt_padded(16 * 5), 128u); /* five KLM entries */
}

/*
 * The RoCE caps and the RC connection's fields at the bits of Linux
 * include/linux/mlx5/mlx5_ifc.h (and rdma-core providers/mlx5/mlx5_ifc.h): roce_cap_bits opens
 * with roce_apm, three reserved bits, sw_r_roce_src_udp_port (bit 4),
 * fl_rc_qp_when_roce_disabled (5), fl_rc_qp_when_roce_enabled (6), then qp_ts_format at 0x1e;
 * roce_version at 0x98, r_roce_dest_udp_port at 0xb0, r_roce_max/min_src_udp_port at 0xc0/0xd0,
 * roce_address_table_size at 0xf0. cmd_hca_cap: roce at 0x21d (just before atomic),
 * sq_ts_format / rq_ts_format at 0x440 / 0x442. qpc: ts_format at 0x58 (before rlky at 0x5b);
 * ads at 0xc0: fl bit 0, ack_timeout 0x40, src_addr_index 0x48, hop_limit 0x58, rgid_rip
 * 0x80..0xff, udp_sport 0x110, vhca_port_num 0x128.
 */
TEST(PrmLayout, RoceCapAndConnectionFieldsAreTheIfcBits)
{
	namespace rc = prm::roce_cap;
	uint8_t cap[rc::size] = {};
	prm::set(cap, rc::sw_r_roce_src_udp_port, 1);
	EXPECT_EQ(cap[0], 0x08);
	prm::set(cap, rc::fl_rc_qp_when_roce_disabled, 1);
	EXPECT_EQ(cap[0], 0x0c);
	prm::set(cap, rc::fl_rc_qp_when_roce_enabled, 1);
	EXPECT_EQ(cap[0], 0x0e);
	prm::set(cap, rc::qp_ts_format, 2);
	EXPECT_EQ(cap[3], 0x02);
	prm::set(cap, rc::roce_version, 2);
	EXPECT_EQ(cap[0x13], 0x02);
	prm::set(cap, rc::r_roce_dest_udp_port, 4791);
	EXPECT_EQ(cap[0x16] << 8 | cap[0x17], 4791);
	prm::set(cap, rc::r_roce_max_src_udp_port, 0xfedc);
	EXPECT_EQ(cap[0x18] << 8 | cap[0x19], 0xfedc);
	prm::set(cap, rc::r_roce_min_src_udp_port, 0xc000);
	EXPECT_EQ(cap[0x1a] << 8 | cap[0x1b], 0xc000);
	prm::set(cap, rc::roce_address_table_size, 256);
	EXPECT_EQ(cap[0x1e] << 8 | cap[0x1f], 256);
	EXPECT_EQ(prm::cap_type::roce, 4);
	EXPECT_EQ(prm::cap_op_mod(prm::cap_type::roce, prm::cap_mode::current), 9);

	uint8_t g[prm::hca_cap::size] = {};
	prm::set(g, prm::hca_cap::roce, 1);
	EXPECT_EQ(g[0x43], 0x04);
	prm::set(g, prm::hca_cap::atomic, 1);
	EXPECT_EQ(g[0x43], 0x06);
	prm::set(g, prm::hca_cap::sq_ts_format, 1);
	prm::set(g, prm::hca_cap::rq_ts_format, 2);
	EXPECT_EQ(g[0x88], 0x60);

	uint8_t q[prm::qpc::size] = {};
	prm::set(q, prm::qpc::ts_format, prm::qp_ts_format::device_default);
	EXPECT_EQ(q[0x0b], 0x40);
	prm::set(q, prm::qpc::rlky, 1);
	EXPECT_EQ(q[0x0b], 0x50);
	prm::set(q, prm::qpc::primary_fl, 1);
	EXPECT_EQ(q[0x18], 0x80);
	prm::set(q, prm::qpc::primary_ack_timeout, 14);
	EXPECT_EQ(q[0x20], 14 << 3);
	prm::set(q, prm::qpc::primary_src_addr_index, 0xa5);
	EXPECT_EQ(q[0x21], 0xa5);
	prm::set(q, prm::qpc::primary_hop_limit, 64);
	EXPECT_EQ(q[0x23], 64);
	EXPECT_EQ(prm::qpc::primary_rgid_rip_offset, 0x28u);
	prm::set(q, prm::qpc::primary_udp_sport, 0xc123);
	EXPECT_EQ(q[0x3a] << 8 | q[0x3b], 0xc123);
	prm::set(q, prm::qpc::primary_vhca_port_num, 2);
	EXPECT_EQ(q[0x3d], 2);
	/* The connection fields the table had before, where the ifc puts them. */
	prm::set(q, prm::qpc::mtu, prm::qp_mtu::mtu_1024);
	prm::set(q, prm::qpc::log_msg_max, 30);
	EXPECT_EQ(q[0x08], 3 << 5 | 30);
	prm::set(q, prm::qpc::atomic_mode, prm::qp_atomic_mode::ib_comp);
	EXPECT_EQ(q[0x91], 0x01); /* bits 19:16 of the dword at 0x480 */

	/* enum mlx5_qp_optpar and the RC rows of Linux qp.c's opt_mask. */
	EXPECT_EQ(prm::qp_optpar::pkey_index, 0x10u);
	EXPECT_EQ(prm::qp_optpar::pm_state, 0x400u);
	EXPECT_EQ(prm::qp_optpar::pri_port, 0x10000u);
	EXPECT_EQ(prm::qp_optpar::rc_init2rtr, 0x1fu);
	EXPECT_EQ(prm::qp_optpar::rc_rtr2rts, 0x44fu);
}
