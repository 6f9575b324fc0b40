/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The DEVX transport hands rdma-core exactly the bytes the command encoders produce. There is
 * no ConnectX here, so this binary interposes mlx5dv_devx_obj_create / _obj_query /
 * _obj_destroy / _general_cmd at link time (its own definitions win over libmlx5's) and
 * records what the transport passes; the same encoders run over a recording transport, and
 * the two byte streams must be identical.
 */
#include <cerrno>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include "mlx5_commands.h"
#include "mlx5_devx.h"
#include "mlx5_prm.h"

namespace mlx5 = nicmr::mlx5;
namespace prm = nicmr::mlx5::prm;

namespace {

struct Call {
	const char *fn;
	std::vector<uint8_t> in;
};

std::vector<Call> g_calls;
int g_errno = 0;      /* what the next interposed call fails with (0: succeeds) */
uint8_t g_status = 0; /* status written into the output on failure */
uint32_t g_next_id = 0x40;
int g_live = 0;
struct FakeObj {
	int unused;
};
FakeObj g_objs[64];
std::vector<void *> g_destroyed;

/* The canned answer both transports return: status ok, an id where PD and mkey index live. */
void answer(const void *in, void *out, size_t out_len)
{
	std::memset(out, 0, out_len);
	auto op = prm::get(in, prm::cmd_hdr_in::opcode);
	if (op == prm::opcode::alloc_pd)
		prm::set(out, prm::alloc_pd_out::pd, g_next_id++);
	if (op == prm::opcode::create_mkey)
		prm::set(out, prm::create_mkey_out::mkey_index, g_next_id++);
}

int fail(void *out, size_t out_len)
{
	if (out_len >= 8 && g_status != 0) {
		prm::set(out, prm::cmd_hdr_out::status, g_status);
		prm::set(out, prm::cmd_hdr_out::syndrome, 0x5eed);
	}
	return g_errno;
}

/* A transport that only records and answers like the interposed rdma-core does. */
class Recording final : public mlx5::CmdTransport {
public:
	std::vector<std::vector<uint8_t>> ins;

protected:
	int run(const void *in, size_t in_len, void *out, size_t out_len,
		bool log) noexcept override
	{
		ins.emplace_back(static_cast<const uint8_t *>(in),
				 static_cast<const uint8_t *>(in) + in_len);
		answer(in, out, out_len);
		return finish("rec", in, out, log);
	}
};

} // namespace

extern "C" {
struct mlx5dv_devx_obj *mlx5dv_devx_obj_create(struct ibv_context *, const void *in, size_t inlen,
					       void *out, size_t outlen)
{
	g_calls.push_back(
		{"obj_create",
		 {static_cast<const uint8_t *>(in), static_cast<const uint8_t *>(in) + inlen}});
	if (g_errno != 0) {
		errno = fail(out, outlen);
		return nullptr;
	}
	answer(in, out, outlen);
	return reinterpret_cast<mlx5dv_devx_obj *>(&g_objs[g_live++ % 64]);
}

int mlx5dv_devx_obj_query(struct mlx5dv_devx_obj *, const void *in, size_t inlen, void *out,
			  size_t outlen)
{
	g_calls.push_back(
		{"obj_query",
		 {static_cast<const uint8_t *>(in), static_cast<const uint8_t *>(in) + inlen}});
	if (g_errno != 0)
		return fail(out, outlen);
	answer(in, out, outlen);
	return 0;
}

int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj *obj)
{
	g_calls.push_back({"obj_destroy", {}});
	g_destroyed.push_back(obj);
	g_live--;
	return 0;
}

int mlx5dv_devx_general_cmd(struct ibv_context *, const void *in, size_t inlen, void *out,
			    size_t outlen)
{
	g_calls.push_back(
		{"general_cmd",
		 {static_cast<const uint8_t *>(in), static_cast<const uint8_t *>(in) + inlen}});
	if (g_errno != 0)
		return fail(out, outlen);
	answer(in, out, outlen);
	return 0;
}
}

class Devx : public ::testing::Test {
protected:
	void SetUp() override
	{
		g_calls.clear();
		g_errno = 0;
		g_status = 0;
		g_live = 0;
		g_destroyed.clear();
	}
	/* Any non-null context: the interposed calls never look at it. */
	ibv_context *ctx() { return reinterpret_cast<ibv_context *>(&ctx_storage_); }

private:
	long ctx_storage_ = 0;
};

TEST_F(Devx, HandsRdmaCoreTheEncodersBytes)
{
	std::vector<mlx5::MttEntry> mtt(512);
	for (size_t i = 0; i < mtt.size(); i++)
		mtt[i] = {0x40000000 + i * 4096, true, (i & 1) != 0};
	mlx5::MkeyCreate c;
	c.ctx.rr = c.ctx.rw = true;
	c.ctx.variant = 0x3c;
	c.ctx.len = mtt.size() * 4096;
	c.pg_access = true;
	c.mtt = mtt;

	auto script = [&](mlx5::CmdTransport &t) {
		uint32_t pd = 0, idx = 0;
		std::vector<uint8_t> cap(prm::query_hca_cap_out::capability_size);
		mlx5::MkeyQuery q;
		EXPECT_EQ(mlx5::query_hca_cap(t, prm::cap_type::general, prm::cap_mode::current,
					      cap.data()),
			  0);
		EXPECT_EQ(mlx5::alloc_pd(t, &pd), 0);
		c.ctx.pd = pd;
		EXPECT_EQ(mlx5::create_mkey(t, c, &idx), 0);
		EXPECT_EQ(mlx5::query_mkey(t, idx, 4, &q), 0);
		EXPECT_EQ(mlx5::destroy_mkey(t, idx), 0);
		EXPECT_EQ(mlx5::dealloc_pd(t, pd), 0);
	};

	g_next_id = 0x40;
	Recording rec;
	script(rec);
	g_next_id = 0x40;
	{
		mlx5::DevxTransport devx(ctx());
		script(devx);
		EXPECT_EQ(devx.objects(), 0u);
	}

	const char *route[] = {"general_cmd", "obj_create",  "obj_create",
			       "obj_query",   "obj_destroy", "obj_destroy"};
	ASSERT_EQ(g_calls.size(), 6u);
	ASSERT_EQ(rec.ins.size(), 6u);
	for (size_t i = 0; i < 6; i++) {
		EXPECT_STREQ(g_calls[i].fn, route[i]) << i;
		/* The kernel builds destroys itself from the create: nothing to compare there. */
		if (std::strcmp(route[i], "obj_destroy") != 0) {
			EXPECT_EQ(g_calls[i].in, rec.ins[i]) << "command " << i;
		}
	}
	EXPECT_EQ(g_calls[2].in.size(), 272u + 512u * 8u);
}

TEST_F(Devx, FirmwareRefusalMapsLikeTheCommandQueue)
{
	mlx5::DevxTransport devx(ctx());
	g_errno = EREMOTEIO;
	g_status = prm::status::bad_param;
	std::vector<uint8_t> cap(prm::query_hca_cap_out::capability_size);
	EXPECT_EQ(mlx5::query_hca_cap(devx, prm::cap_type::general, prm::cap_mode::max, cap.data()),
		  -EINVAL);
	EXPECT_EQ(devx.last_status(), prm::status::bad_param);
	EXPECT_EQ(devx.last_syndrome(), 0x5eedu);

	g_status = prm::status::no_resources;
	uint32_t pd = 0;
	EXPECT_EQ(mlx5::alloc_pd(devx, &pd), -ENOSPC);
	EXPECT_EQ(devx.objects(), 0u);
}

TEST_F(Devx, KernelErrorWithoutStatusIsItsErrno)
{
	mlx5::DevxTransport devx(ctx());
	g_errno = EPERM;
	uint32_t pd = 0;
	EXPECT_EQ(mlx5::alloc_pd(devx, &pd), -EPERM);
	std::vector<uint8_t> cap(prm::query_hca_cap_out::capability_size);
	EXPECT_EQ(mlx5::query_hca_cap(devx, prm::cap_type::general, prm::cap_mode::max, cap.data()),
		  -EPERM);
}

TEST_F(Devx, ObjectsStillAliveAreDestroyedWithTheTransport)
{
	{
		mlx5::DevxTransport devx(ctx());
		uint32_t pd = 0, idx = 0;
		ASSERT_EQ(mlx5::alloc_pd(devx, &pd), 0);
		mlx5::MkeyCreate c;
		c.ctx.pd = pd;
		ASSERT_EQ(mlx5::create_mkey(devx, c, &idx), 0);
		EXPECT_EQ(devx.objects(), 2u);
		EXPECT_EQ(g_live, 2);
	}
	EXPECT_EQ(g_live, 0);
	/* The mkey (second object made) goes before the PD it lives in (the first). */
	ASSERT_EQ(g_destroyed.size(), 2u);
	EXPECT_EQ(g_destroyed[0], static_cast<void *>(&g_objs[1]));
	EXPECT_EQ(g_destroyed[1], static_cast<void *>(&g_objs[0]));
}

TEST_F(Devx, OpeningADeviceThatIsNotThereIsEnodev)
{
	/* Runs the real rdma-core device list: no ConnectX on this machine, or not this name. */
	std::unique_ptr<mlx5::DevxTransport> t;
	EXPECT_EQ(mlx5::DevxTransport::open("nicmr-no-such-device", &t), -ENODEV);
	EXPECT_EQ(t, nullptr);
	EXPECT_EQ(mlx5::DevxTransport::open(nullptr, &t), -EINVAL);
}
