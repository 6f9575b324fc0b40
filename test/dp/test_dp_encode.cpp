/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data-path encoders and WQE builders on their own: command bytes read back through the
 * layout table, WQE segments read back through <infiniband/mlx5dv.h>, wrap-around of the ring.
 */
#include <cerrno>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "mlx5_dp_commands.h"
#include "mlx5_umr.h"
#include "mlx5_wqe.h"

namespace mlx5 = nicmr::mlx5;
namespace prm = nicmr::mlx5::prm;

namespace {

/* Records what would be sent and answers with a chosen status. */
class FakeTransport : public mlx5::CmdTransport {
public:
	std::vector<uint8_t> last_in;
	int calls = 0;
	uint8_t status = 0;
	uint32_t out_word2 = 0; /* dw2 of the output (object numbers) */

protected:
	int run(const void *in, size_t in_len, void *out, size_t out_len, bool) noexcept override
	{
		calls++;
		last_in.assign(static_cast<const uint8_t *>(in),
			       static_cast<const uint8_t *>(in) + in_len);
		std::memset(out, 0, out_len);
		prm::set(out, prm::cmd_hdr_out::status, status);
		prm::set(out, prm::Field{0x40, 32}, out_word2);
		return finish("fake", in, out, false);
	}
};

} // namespace

TEST(DpEncode, PrmOffsetsMatchThePublishedLayout)
{
	/* A few anchors of mlx5_ifc.h, in bytes, that the device model and the driver share. */
	EXPECT_EQ(prm::create_cq_in::cqc_offset, 16u);
	EXPECT_EQ(prm::create_cq_in::pas_offset, 0x110u);
	EXPECT_EQ(prm::create_qp_in::qpc_offset, 0x18u);
	EXPECT_EQ(prm::qpc::dbr_addr.bit_off, 0x500u);
	EXPECT_EQ(prm::qpc::primary_vhca_port_num.bit_off, 0x1e8u);
	EXPECT_EQ(prm::cqc::dbr_addr.bit_off, 0x1c0u);
	EXPECT_EQ(prm::create_eq_in::event_bitmask.bit_off, 0x2c0u);
	EXPECT_EQ(prm::byte_offset(prm::eqe::qpn), 0x39u);
	EXPECT_EQ(sizeof(mlx5_wqe_umr_ctrl_seg), 48u);
	EXPECT_EQ(sizeof(mlx5_wqe_mkey_context_seg), prm::mkc::size);
}

TEST(DpEncode, CreateCqCarriesSizeUarEqDoorbellAndPages)
{
	FakeTransport t;
	t.out_word2 = 0x000123;
	uint64_t pas[3] = {0x10000, 0x11000, 0x12000};
	mlx5::CqCreate c;
	c.log_size = 7;
	c.uar = 3;
	c.eqn = 9;
	c.dbr_iova = 0xabcdef40;
	c.mem.pas = pas;
	uint32_t cqn = 0;
	ASSERT_EQ(mlx5::create_cq(t, c, &cqn), 0);
	EXPECT_EQ(cqn, 0x123u);
	ASSERT_EQ(t.last_in.size(), prm::create_cq_in::pas_offset + 3 * 8);
	const uint8_t *in = t.last_in.data();
	const uint8_t *cqc = in + prm::create_cq_in::cqc_offset;
	EXPECT_EQ(prm::get(in, prm::cmd_hdr_in::opcode), prm::opcode::create_cq);
	EXPECT_EQ(prm::get(cqc, prm::cqc::log_cq_size), 7u);
	EXPECT_EQ(prm::get(cqc, prm::cqc::cqe_sz), prm::cqc::cqe_sz_64);
	EXPECT_EQ(prm::get(cqc, prm::cqc::uar_page), 3u);
	EXPECT_EQ(prm::get(cqc, prm::cqc::c_eqn), 9u);
	EXPECT_EQ(prm::get(cqc, prm::cqc::log_page_size), 0u);
	EXPECT_EQ(prm::get(cqc, prm::cqc::dbr_addr), 0xabcdef40u);
	for (int i = 0; i < 3; i++)
		EXPECT_EQ(prm::get(in + prm::create_cq_in::pas_offset + i * 8, prm::pas_entry),
			  pas[i]);
}

TEST(DpEncode, CreateQpIsRcWithoutReceiveQueue)
{
	FakeTransport t;
	uint64_t pas[1] = {0x40000};
	mlx5::QpCreate c;
	c.pd = 0x77;
	c.uar = 2;
	c.log_sq_size = 6;
	c.cqn_snd = 5;
	c.dbr_iova = 0x9000;
	c.mem.pas = pas;
	uint32_t qpn = 0;
	ASSERT_EQ(mlx5::create_qp(t, c, &qpn), 0);
	const uint8_t *q = t.last_in.data() + prm::create_qp_in::qpc_offset;
	EXPECT_EQ(prm::get(q, prm::qpc::st), prm::qp_st::rc);
	EXPECT_EQ(prm::get(q, prm::qpc::pm_state), prm::qp_pm_state::migrated);
	EXPECT_EQ(prm::get(q, prm::qpc::pd), 0x77u);
	EXPECT_EQ(prm::get(q, prm::qpc::uar_page), 2u);
	EXPECT_EQ(prm::get(q, prm::qpc::log_sq_size), 6u);
	EXPECT_EQ(prm::get(q, prm::qpc::rq_type), prm::qp_rq_type::zero_len);
	EXPECT_EQ(prm::get(q, prm::qpc::cqn_snd), 5u);
	EXPECT_EQ(prm::get(q, prm::qpc::dbr_addr), 0x9000u);
}

TEST(DpEncode, ModifyQpCarriesPortRemoteAndEnables)
{
	std::vector<uint8_t> in;
	mlx5::QpAttr a;
	a.port = 2;
	a.remote_qpn = 0x1234;
	a.rwe = true;
	a.rae = true;
	a.pd = 4;
	ASSERT_EQ(mlx5::encode_modify_qp(prm::opcode::init2rtr_qp, 0x56, a, &in), 0);
	ASSERT_EQ(in.size(), prm::modify_qp_in::size);
	EXPECT_EQ(prm::get(in.data(), prm::modify_qp_in::qpn), 0x56u);
	const uint8_t *q = in.data() + prm::modify_qp_in::qpc_offset;
	EXPECT_EQ(prm::get(q, prm::qpc::primary_vhca_port_num), 2u);
	EXPECT_EQ(prm::get(q, prm::qpc::remote_qpn), 0x1234u);
	EXPECT_EQ(prm::get(q, prm::qpc::rre), 0u);
	EXPECT_EQ(prm::get(q, prm::qpc::rwe), 1u);
	EXPECT_EQ(prm::get(q, prm::qpc::rae), 1u);
}

TEST(DpEncode, ModifyQpCarriesTheConnection)
{
	std::vector<uint8_t> in;
	mlx5::QpAttr a;
	a.mtu = prm::qp_mtu::mtu_1024;
	a.log_msg_max = 30;
	a.fl = true;
	a.next_send_psn = 0x111111;
	a.next_rcv_psn = 0x222222;
	a.retry_count = 7;
	a.rnr_retry = 6;
	a.ack_timeout = 14;
	a.min_rnr_nak = 12;
	a.log_ack_req_freq = 5;
	a.atomic_mode = prm::qp_atomic_mode::ib_comp;
	a.opt_param_mask = prm::qp_optpar::rre;
	ASSERT_EQ(mlx5::encode_modify_qp(prm::opcode::init2rtr_qp, 0x56, a, &in), 0);
	EXPECT_EQ(prm::get(in.data(), prm::modify_qp_in::opt_param_mask), prm::qp_optpar::rre);
	const uint8_t *q = in.data() + prm::modify_qp_in::qpc_offset;
	EXPECT_EQ(prm::get(q, prm::qpc::mtu), prm::qp_mtu::mtu_1024);
	EXPECT_EQ(prm::get(q, prm::qpc::log_msg_max), 30u);
	EXPECT_EQ(prm::get(q, prm::qpc::primary_fl), 1u);
	EXPECT_EQ(prm::get(q, prm::qpc::next_send_psn), 0x111111u);
	EXPECT_EQ(prm::get(q, prm::qpc::next_rcv_psn), 0x222222u);
	EXPECT_EQ(prm::get(q, prm::qpc::retry_count), 7u);
	EXPECT_EQ(prm::get(q, prm::qpc::rnr_retry), 6u);
	EXPECT_EQ(prm::get(q, prm::qpc::primary_ack_timeout), 14u);
	EXPECT_EQ(prm::get(q, prm::qpc::min_rnr_nak), 12u);
	EXPECT_EQ(prm::get(q, prm::qpc::log_ack_req_freq), 5u);
	EXPECT_EQ(prm::get(q, prm::qpc::atomic_mode), prm::qp_atomic_mode::ib_comp);
	/* fl: no GID in the path. */
	for (size_t i = 0; i < prm::qpc::rgid_size; i++)
		EXPECT_EQ(q[prm::qpc::primary_rgid_rip_offset + i], 0) << i;

	/* Without fl: the GID index and the remote GID, byte for byte. */
	a.fl = false;
	a.gid_index = 3;
	for (size_t i = 0; i < a.remote_gid.size(); i++)
		a.remote_gid[i] = static_cast<uint8_t>(0xa0 + i);
	ASSERT_EQ(mlx5::encode_modify_qp(prm::opcode::init2rtr_qp, 0x56, a, &in), 0);
	q = in.data() + prm::modify_qp_in::qpc_offset;
	EXPECT_EQ(prm::get(q, prm::qpc::primary_fl), 0u);
	EXPECT_EQ(prm::get(q, prm::qpc::primary_src_addr_index), 3u);
	EXPECT_EQ(std::memcmp(q + prm::qpc::primary_rgid_rip_offset, a.remote_gid.data(), 16), 0);
}

TEST(DpEncode, ConnectionValuesWiderThanTheirFieldsSendNothing)
{
	FakeTransport t;
	auto refused = [&](auto set) {
		mlx5::QpAttr a;
		set(a);
		return mlx5::init2rtr_qp(t, 1, a) == -EINVAL;
	};
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.mtu = 8; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.log_msg_max = 32; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.gid_index = 256; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.next_send_psn = 1u << 24; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.next_rcv_psn = 1u << 24; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.retry_count = 8; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.rnr_retry = 8; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.ack_timeout = 32; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.min_rnr_nak = 32; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.atomic_mode = 16; }));
	EXPECT_TRUE(refused([](mlx5::QpAttr &a) { a.log_ack_req_freq = 16; }));
	EXPECT_EQ(t.calls, 0);
}

TEST(DpEncode, CreateQpCarriesTheTimestampFormat)
{
	FakeTransport t;
	uint64_t pas[1] = {0x40000};
	mlx5::QpCreate c;
	c.mem.pas = pas;
	c.ts_format = prm::qp_ts_format::device_default;
	uint32_t qpn = 0;
	ASSERT_EQ(mlx5::create_qp(t, c, &qpn), 0);
	EXPECT_EQ(prm::get(t.last_in.data() + prm::create_qp_in::qpc_offset, prm::qpc::ts_format),
		  prm::qp_ts_format::device_default);
	c.ts_format = 4;
	EXPECT_EQ(mlx5::create_qp(t, c, &qpn), -EINVAL);
	EXPECT_EQ(t.calls, 1);
}

/* The GSI QP's context is st QP1 at create and at every transition (Linux qp.c to_mlx5_st). */
TEST(DpEncode, GsiQpIsStQp1)
{
	FakeTransport t;
	uint64_t pas[1] = {0x40000};
	mlx5::QpCreate c;
	c.mem.pas = pas;
	c.gsi = true;
	uint32_t qpn = 0;
	ASSERT_EQ(mlx5::create_qp(t, c, &qpn), 0);
	EXPECT_EQ(prm::get(t.last_in.data() + prm::create_qp_in::qpc_offset, prm::qpc::st),
		  prm::qp_st::qp1);
	std::vector<uint8_t> in;
	mlx5::QpAttr a;
	a.ud = a.gsi = true;
	a.q_key = prm::gsi::q_key;
	ASSERT_EQ(mlx5::encode_modify_qp(prm::opcode::rst2init_qp, qpn, a, &in), 0);
	const uint8_t *q = in.data() + prm::modify_qp_in::qpc_offset;
	EXPECT_EQ(prm::get(q, prm::qpc::st), prm::qp_st::qp1);
	EXPECT_EQ(prm::get(q, prm::qpc::q_key), 0x80010000u);
}

TEST(DpEncode, RefusedArgumentsSendNothing)
{
	FakeTransport t;
	mlx5::QpAttr a;
	a.port = 3;
	EXPECT_EQ(mlx5::rst2init_qp(t, 1, a), -EINVAL);
	mlx5::CqCreate c; /* no pages */
	uint32_t n;
	EXPECT_EQ(mlx5::create_cq(t, c, &n), -EINVAL);
	mlx5::QpCreate q;
	uint64_t pas[1] = {0x1000};
	q.mem.pas = pas;
	q.log_sq_size = 16;
	EXPECT_EQ(mlx5::create_qp(t, q, &n), -EINVAL);
	EXPECT_EQ(t.calls, 0);
}

TEST(DpEncode, BadQpStateStatusIsEinval)
{
	FakeTransport t;
	t.status = prm::status::bad_qp_state;
	mlx5::QpAttr a;
	EXPECT_EQ(mlx5::init2rtr_qp(t, 1, a), -EINVAL);
	EXPECT_EQ(t.last_status(), prm::status::bad_qp_state);
}

TEST(DpWqe, CursorWrapsInlineDataToTheRingStartAndPads)
{
	std::vector<uint8_t> ring(256, 0xee);
	/* Start 16 bytes before the end: 20 bytes of payload run over the end. */
	mlx5::SqCursor c(ring.data(), ring.size(), 240);
	uint8_t payload[20];
	for (int i = 0; i < 20; i++)
		payload[i] = static_cast<uint8_t>(i + 1);
	c.copy(payload, 20);
	for (int i = 0; i < 16; i++)
		EXPECT_EQ(ring[240 + i], i + 1);
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(ring[i], 17 + i);
	for (int i = 4; i < 16; i++)
		EXPECT_EQ(ring[i], 0) << "padding at " << i;
	EXPECT_EQ(ring[16], 0xee);
	EXPECT_EQ(c.offset(), 16u);
}

/* The builders take imm in host order (the table converts); mlx5dv takes it big-endian. Ours
 * write over a slot that held another WQE: nothing of it may stay. */
TEST(DpWqe, CtrlSegmentMatchesRdmaCoreEncoding)
{
	mlx5_wqe_ctrl_seg ours, theirs{};
	std::memset(&ours, 0xa5, sizeof(ours));
	mlx5::set_ctrl(&ours, 0x1234, MLX5_OPCODE_RDMA_WRITE, 0xabcdef, 5,
		       mlx5::fm_ce_se(mlx5::kSignaled | mlx5::kFence), 0x77);
	mlx5dv_set_ctrl_seg(&theirs, 0x1234, MLX5_OPCODE_RDMA_WRITE, 0, 0xabcdef,
			    MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_FENCE, 5, 0, htobe32(0x77));
	EXPECT_EQ(std::memcmp(&ours, &theirs, sizeof(ours)), 0);
}

TEST(DpWqe, DataSegmentMatchesMlx5dvSetDataSeg)
{
	mlx5_wqe_data_seg ours, theirs{};
	std::memset(&ours, 0xa5, sizeof(ours));
	mlx5::set_data(&ours, 0x00007f0012345678, 65536, 0x00abcd01);
	mlx5dv_set_data_seg(&theirs, 65536, 0x00abcd01, 0x00007f0012345678);
	EXPECT_EQ(std::memcmp(&ours, &theirs, sizeof(ours)), 0);
}

/* No mlx5dv setter: the members as rdma-core's providers/mlx5/qp.c assigns them. */
TEST(DpWqe, RemoteAtomicAndInlineSegmentsMatchRdmaCore)
{
	mlx5_wqe_raddr_seg r, rr{};
	std::memset(&r, 0xa5, sizeof(r));
	mlx5::set_raddr(&r, 0x0011223344556677ull, 0x8899aabb);
	rr.raddr = htobe64(0x0011223344556677ull);
	rr.rkey = htobe32(0x8899aabb);
	EXPECT_EQ(std::memcmp(&r, &rr, sizeof(r)), 0);

	mlx5_wqe_atomic_seg a, ra{};
	std::memset(&a, 0xa5, sizeof(a));
	mlx5::set_atomic(&a, 5, 0x0123456789abcdefull);
	ra.swap_add = htobe64(5);
	ra.compare = htobe64(0x0123456789abcdefull);
	EXPECT_EQ(std::memcmp(&a, &ra, sizeof(a)), 0);

	uint32_t h = 0xa5a5a5a5;
	mlx5::set_inline_header(&h, 972);
	EXPECT_EQ(h, htobe32(972 | MLX5_INLINE_SEG));
}

TEST(DpWqe, UmrTranslationsEncodeBigEndianWithEnables)
{
	mlx5::MttEntry m[2] = {{0x200000, true, false}, {0x400000, false, true}};
	mlx5::UmrBind b;
	b.mtt = m;
	ASSERT_EQ(mlx5::umr_xlt_bytes(b), 16u);
	/* Padded with zeros to the 64-byte unit UMR translations travel in; nothing beyond. */
	uint8_t out[72];
	std::memset(out, 0xee, sizeof(out));
	mlx5::umr_encode_xlt(b, out);
	EXPECT_EQ(prm::get(out, prm::mtt::address), 0x200000u | 1u);
	EXPECT_EQ(prm::get(out + 8, prm::mtt::address), 0x400000u | 2u);
	for (size_t i = 16; i < 64; i++)
		EXPECT_EQ(out[i], 0) << i;
	for (size_t i = 64; i < sizeof(out); i++)
		EXPECT_EQ(out[i], 0xee) << i;
}
