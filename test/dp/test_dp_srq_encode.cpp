/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The SRQ command encoders of the driver (mlx5_srq.h) and CREATE_QP with an SRQ, read back
 * through the layout table, and the values they refuse to send.
 */
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "mlx5_dp_commands.h"
#include "mlx5_srq.h"

namespace mlx5 = nicmr::mlx5;
namespace prm = nicmr::mlx5::prm;

namespace {

/* Records what would be sent and answers OK with dw2 = out_word2. */
class FakeTransport : public mlx5::CmdTransport {
public:
	std::vector<uint8_t> last_in;
	int calls = 0;
	uint32_t out_word2 = 0;

protected:
	int run(const void *in, size_t in_len, void *out, size_t out_len, bool) noexcept override
	{
		calls++;
		last_in.assign(static_cast<const uint8_t *>(in),
			       static_cast<const uint8_t *>(in) + in_len);
		std::memset(out, 0, out_len);
		prm::set(out, prm::Field{0x40, 32}, out_word2);
		return finish("fake", in, out, false);
	}
};

} // namespace

TEST(DpSrqEncode, CreateSrqCarriesSizeStridePdLimitRecordAndPages)
{
	FakeTransport t;
	t.out_word2 = 0x000123;
	uint64_t pas[2] = {0x40000, 0x41000};
	mlx5::SrqCreate c;
	c.pd = 0x55;
	c.log_size = 7;
	c.log_stride = 2;
	c.lwm = 9;
	c.dbr_iova = 0x9008;
	c.mem.pas = pas;
	uint32_t srqn = 0;
	ASSERT_EQ(mlx5::create_srq(t, c, &srqn), 0);
	EXPECT_EQ(srqn, 0x123u);
	const uint8_t *b = t.last_in.data();
	ASSERT_EQ(t.last_in.size(), prm::create_srq_in::pas_offset + 16);
	EXPECT_EQ(prm::get(b, prm::cmd_hdr_in::opcode), prm::opcode::create_srq);
	const uint8_t *q = b + prm::create_srq_in::srqc_offset;
	EXPECT_EQ(prm::get(q, prm::srqc::log_srq_size), 7u);
	EXPECT_EQ(prm::get(q, prm::srqc::log_rq_stride), 2u);
	EXPECT_EQ(prm::get(q, prm::srqc::pd), 0x55u);
	EXPECT_EQ(prm::get(q, prm::srqc::lwm), 9u);
	EXPECT_EQ(prm::get(q, prm::srqc::dbr_addr), 0x9008u);
	EXPECT_EQ(prm::get(q, prm::srqc::page_offset), 0u);
	EXPECT_EQ(prm::get(b + prm::create_srq_in::pas_offset, prm::pas_entry), 0x40000u);
	EXPECT_EQ(prm::get(b + prm::create_srq_in::pas_offset + 8, prm::pas_entry), 0x41000u);
}

TEST(DpSrqEncode, DestroyQueryAndArmNameTheSrq)
{
	FakeTransport t;
	ASSERT_EQ(mlx5::destroy_srq(t, 0x42), 0);
	EXPECT_EQ(prm::get(t.last_in.data(), prm::cmd_hdr_in::opcode), prm::opcode::destroy_srq);
	EXPECT_EQ(prm::get(t.last_in.data(), prm::destroy_srq_in::srqn), 0x42u);
	ASSERT_EQ(mlx5::arm_srq(t, 0x42, 17), 0);
	EXPECT_EQ(prm::get(t.last_in.data(), prm::cmd_hdr_in::opcode), prm::opcode::arm_rq);
	EXPECT_EQ(prm::get(t.last_in.data(), prm::cmd_hdr_in::op_mod), prm::arm_rq_in::op_mod_srq);
	EXPECT_EQ(prm::get(t.last_in.data(), prm::arm_rq_in::srq_number), 0x42u);
	EXPECT_EQ(prm::get(t.last_in.data(), prm::arm_rq_in::lwm), 17u);
	uint32_t cnt = 1, lwm = 1;
	ASSERT_EQ(mlx5::query_srq(t, 0x42, &cnt, &lwm), 0);
	EXPECT_EQ(prm::get(t.last_in.data(), prm::cmd_hdr_in::opcode), prm::opcode::query_srq);
	EXPECT_EQ(prm::get(t.last_in.data(), prm::query_srq_in::srqn), 0x42u);
	EXPECT_EQ(cnt, 0u);
	EXPECT_EQ(lwm, 0u);
}

TEST(DpSrqEncode, CreateQpWithAnSrqNamesItAndHasNoRqOfItsOwn)
{
	FakeTransport t;
	uint64_t pas[1] = {0x40000};
	mlx5::QpCreate c;
	c.pd = 0x77;
	c.uar = 2;
	c.log_sq_size = 6;
	c.cqn_snd = 5;
	c.cqn_rcv = 6;
	c.srqn = 0x31;
	c.mem.pas = pas;
	uint32_t qpn = 0;
	ASSERT_EQ(mlx5::create_qp(t, c, &qpn), 0);
	const uint8_t *q = t.last_in.data() + prm::create_qp_in::qpc_offset;
	EXPECT_EQ(prm::get(q, prm::qpc::rq_type), prm::qp_rq_type::srq);
	EXPECT_EQ(prm::get(q, prm::qpc::srqn_rmpn_xrqn), 0x31u);
	EXPECT_EQ(prm::get(q, prm::qpc::cqn_rcv), 6u);
	EXPECT_EQ(prm::get(q, prm::qpc::log_rq_size), 0u);
}

TEST(DpSrqEncode, ValuesWiderThanTheirFieldsSendNothing)
{
	FakeTransport t;
	uint64_t pas[1] = {0x40000};
	mlx5::SrqCreate c;
	c.mem.pas = pas;
	uint32_t n = 0;
	c.log_size = 16; /* 4 bits */
	EXPECT_EQ(mlx5::create_srq(t, c, &n), -EINVAL);
	c.log_size = 2;
	c.log_stride = 8; /* 3 bits */
	EXPECT_EQ(mlx5::create_srq(t, c, &n), -EINVAL);
	c.log_stride = 2;
	c.lwm = 0x10000; /* 16 bits */
	EXPECT_EQ(mlx5::create_srq(t, c, &n), -EINVAL);
	c.lwm = 0;
	c.mem.pas = {};
	EXPECT_EQ(mlx5::create_srq(t, c, &n), -EINVAL);
	EXPECT_EQ(mlx5::arm_srq(t, 1, 0x10000), -EINVAL);
	mlx5::QpCreate q;
	q.log_sq_size = 6;
	q.mem.pas = pas;
	q.rq = true;
	q.srqn = 1; /* an RQ of its own and an SRQ */
	EXPECT_EQ(mlx5::create_qp(t, q, &n), -EINVAL);
	q.rq = false;
	q.srqn = 1u << 24;
	EXPECT_EQ(mlx5::create_qp(t, q, &n), -EINVAL);
	EXPECT_EQ(t.calls, 0);
}
