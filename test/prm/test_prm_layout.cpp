/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The PRM layout table against independent truths: structure sizes the PRM fixes, the mkey
 * context as rdma-core's <infiniband/mlx5dv.h> lays it out for UMR, and get()/set() round trips
 * at every width and odd offsets.
 */
#include <arpa/inet.h>
#include <endian.h>

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
