/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RDMA between the device model's two ports through the driver's data path: bytes moved
 * exactly for 1 B .. 16 MiB across pages and translation entries (MTT and KLM), inline writes
 * across the end of the ring, atomics, and every access error with its exact syndrome on the
 * requester, its event on the responder, and the memory around the target untouched. Every
 * test runs with both doorbell delivery modes.
 */
#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "dp_rig.h"

using namespace nicmr::testdp;

namespace {

constexpr uint8_t kCanary = 0xc5;
constexpr size_t kGuard = 256;

class Dp : public ::testing::TestWithParam<emu::DoorbellDelivery> {
protected:
	RigOptions opts(size_t data = size_t{8} << 20)
	{
		RigOptions o;
		o.delivery = GetParam();
		o.data_bytes = data;
		return o;
	}
};

void fill(void *p, size_t len, uint32_t seed)
{
	auto *b = static_cast<uint8_t *>(p);
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		b[i] = static_cast<uint8_t>(x >> 16);
	}
}

bool all_of(const void *p, size_t len, uint8_t v)
{
	const auto *b = static_cast<const uint8_t *>(p);
	for (size_t i = 0; i < len; i++)
		if (b[i] != v)
			return false;
	return true;
}

uint8_t *at(const mem::DmaBlock &b, size_t off)
{
	return static_cast<uint8_t *>(b.va) + off;
}

uint64_t va(const mem::DmaBlock &b, size_t off)
{
	return reinterpret_cast<uintptr_t>(b.va) + off;
}

/* A destination region with guard bytes on both sides, registered for remote access. */
struct Target {
	mem::DmaArena *arena = nullptr;
	mem::DmaBlock block;
	size_t off = kGuard + 100; /* not page aligned: transfers cross page boundaries */
	size_t len = 0;
	TestMr mr;
	uint8_t *p() const { return at(block, off); }
	uint64_t addr() const { return va(block, off); }
	Target() = default;
	Target(const Target &) = delete;
	Target &operator=(const Target &) = delete;
	~Target() { release(); }
	void release()
	{
		mr.handle.reset();
		if (arena != nullptr)
			arena->release(block);
		arena = nullptr;
	}
	bool guards_intact() const
	{
		return all_of(at(block, off - kGuard), kGuard, kCanary) &&
		       all_of(at(block, off + len), kGuard, kCanary);
	}
};

int make_target(Rig &r, size_t len, const mlx5::MkeyContext &ctx, Target *t, bool pg_access = false)
{
	t->len = len;
	int rc = r.data->alloc(len + t->off + kGuard + 4096, 4096, &t->block);
	if (rc != 0)
		return rc;
	t->arena = r.data.get();
	std::memset(t->block.va, kCanary, t->block.len);
	return r.mtt_mr(t->block, t->off, len, ctx, &t->mr, pg_access);
}

} // namespace

TEST_P(Dp, WriteMovesEveryByteForSizesFromOneByteTo16MiB)
{
	Rig r;
	ASSERT_EQ(r.make(opts(size_t{48} << 20)), 0);
	for (size_t len : {size_t{1}, size_t{63}, size_t{4096}, size_t{4097}, size_t{65536 + 17},
			   (size_t{1} << 20) + 3, size_t{16} << 20}) {
		SCOPED_TRACE(len);
		Target src, dst;
		ASSERT_EQ(make_target(r, len, r.ctx(true, false, false, false, false), &src), 0);
		ASSERT_EQ(make_target(r, len, r.ctx(true, false, false, true, false, 0x11), &dst),
			  0);
		fill(src.p(), len, static_cast<uint32_t>(len));
		mlx5::Sge s{src.addr(), static_cast<uint32_t>(len), src.mr.key};
		ASSERT_EQ(r.qp[0]->post_write({&s, 1}, dst.addr(), dst.mr.key, 7, mlx5::kSignaled),
			  0);
		mlx5::Completion c;
		ASSERT_TRUE(r.wait(0, &c));
		ASSERT_TRUE(c.ok()) << "syndrome 0x" << std::hex << int(c.syndrome);
		EXPECT_EQ(c.wr_id, 7u);
		EXPECT_EQ(c.qpn, r.qp[0]->qpn());
		EXPECT_EQ(c.byte_len, len);
		EXPECT_EQ(std::memcmp(src.p(), dst.p(), len), 0);
		EXPECT_TRUE(dst.guards_intact());
	}
}

TEST_P(Dp, ReadMovesEveryByteAcrossPagesWithSeveralGatherEntries)
{
	Rig r;
	ASSERT_EQ(r.make(opts(size_t{24} << 20)), 0);
	for (size_t len : {size_t{1}, size_t{8191}, size_t{3} << 20}) {
		SCOPED_TRACE(len);
		Target remote, local;
		ASSERT_EQ(make_target(r, len, r.ctx(true, false, true, false, false), &remote), 0);
		ASSERT_EQ(make_target(r, len, r.ctx(true, true, false, false, false), &local), 0);
		fill(remote.p(), len, 99);
		/* Scatter into three pieces of the local region. */
		size_t a = len / 3, b = len / 3;
		mlx5::Sge s[3] = {
			{local.addr(), static_cast<uint32_t>(a), local.mr.key},
			{local.addr() + a, static_cast<uint32_t>(b), local.mr.key},
			{local.addr() + a + b, static_cast<uint32_t>(len - a - b), local.mr.key}};
		int n = len >= 3 ? 3 : 1;
		if (n == 1)
			s[0].length = static_cast<uint32_t>(len);
		ASSERT_EQ(r.qp[0]->post_read({s, static_cast<size_t>(n)}, remote.addr(),
					     remote.mr.key, 9, mlx5::kSignaled),
			  0);
		mlx5::Completion c;
		ASSERT_TRUE(r.wait(0, &c));
		ASSERT_TRUE(c.ok()) << "syndrome 0x" << std::hex << int(c.syndrome);
		EXPECT_EQ(c.wr_id, 9u);
		EXPECT_EQ(std::memcmp(remote.p(), local.p(), len), 0);
		EXPECT_TRUE(local.guards_intact());
	}
}

static void klm_case(Rig &r, size_t half)
{
	SCOPED_TRACE(half);
	Target p1, p2, src;
	ASSERT_EQ(make_target(r, half, r.ctx(true, true, true, true, false), &p1), 0);
	ASSERT_EQ(make_target(r, half, r.ctx(true, true, true, true, false), &p2), 0);
	ASSERT_EQ(make_target(r, 2 * half, r.ctx(true, true, false, false, false), &src), 0);
	mlx5::KlmEntry k[2] = {{static_cast<uint32_t>(half), p1.mr.key, p1.addr()},
			       {static_cast<uint32_t>(half), p2.mr.key, p2.addr()}};
	mlx5::MkeyCreate c;
	c.ctx = r.ctx(true, true, true, true, false, 0x33);
	c.ctx.access_mode = prm::access_mode::klm;
	c.ctx.start_addr = 0;
	c.ctx.len = 2 * half;
	c.klm = k;
	TestMr klm;
	ASSERT_EQ(r.create_raw(c, &klm), 0);

	fill(src.p(), 2 * half, 5);
	/* 6000 bytes across the seam between the two regions, 3000 on each side. */
	mlx5::Sge s{src.addr(), 6000, src.mr.key};
	ASSERT_EQ(r.qp[0]->post_write({&s, 1}, half - 3000, klm.key, 1, mlx5::kSignaled), 0);
	mlx5::Completion cq;
	ASSERT_TRUE(r.wait(0, &cq));
	ASSERT_TRUE(cq.ok()) << "syndrome 0x" << std::hex << int(cq.syndrome);
	EXPECT_EQ(std::memcmp(p1.p() + half - 3000, src.p(), 3000), 0);
	EXPECT_EQ(std::memcmp(p2.p(), src.p() + 3000, 3000), 0);
	EXPECT_TRUE(p1.guards_intact());
	EXPECT_TRUE(p2.guards_intact());

	/* And back: READ the whole KLM region (both regions in order) into src. */
	mlx5::Sge d{src.addr(), static_cast<uint32_t>(2 * half), src.mr.key};
	std::vector<uint8_t> expect(2 * half);
	std::memcpy(expect.data(), p1.p(), half);
	std::memcpy(expect.data() + half, p2.p(), half);
	ASSERT_EQ(r.qp[0]->post_read({&d, 1}, 0, klm.key, 2, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &cq));
	ASSERT_TRUE(cq.ok()) << "syndrome 0x" << std::hex << int(cq.syndrome);
	EXPECT_EQ(std::memcmp(expect.data(), src.p(), 2 * half), 0);
}

TEST_P(Dp, KlmMkeyStitchesTwoRegionsForWriteAndRead)
{
	Rig r;
	ASSERT_EQ(r.make(opts(size_t{40} << 20)), 0);
	for (size_t half : {size_t{10000}, (size_t{4} << 20) + 5})
		klm_case(r, half);
}

TEST_P(Dp, InlineWritesWrapAroundTheSendQueue)
{
	Rig r;
	RigOptions o = opts();
	o.log_sq_size = 4; /* 16 WQEBBs: a 300-byte inline WQE takes 6 */
	ASSERT_EQ(r.make(o), 0);
	Target dst;
	ASSERT_EQ(make_target(r, 300 * 20, r.ctx(true, false, false, true, false), &dst), 0);
	std::vector<uint8_t> payload(300 * 20);
	fill(payload.data(), payload.size(), 3);
	for (int i = 0; i < 20; i++) {
		ASSERT_EQ(r.qp[0]->post_write_inline(payload.data() + i * 300, 300,
						     dst.addr() + i * 300, dst.mr.key, i,
						     mlx5::kSignaled),
			  0)
			<< i;
		mlx5::Completion c;
		ASSERT_TRUE(r.wait(0, &c));
		ASSERT_TRUE(c.ok()) << i << " syndrome 0x" << std::hex << int(c.syndrome);
		EXPECT_EQ(c.wr_id, static_cast<uint64_t>(i));
	}
	EXPECT_EQ(std::memcmp(payload.data(), dst.p(), payload.size()), 0);
	EXPECT_TRUE(dst.guards_intact());
	EXPECT_EQ(r.qp[0]->sq_room(), r.qp[0]->sq_size());
}

TEST_P(Dp, UnsignalledWqesFillTheQueueUntilASignalledOneCompletes)
{
	Rig r;
	RigOptions o = opts();
	o.log_sq_size = 3;
	ASSERT_EQ(r.make(o), 0);
	for (int i = 0; i < 7; i++)
		ASSERT_EQ(r.qp[0]->post_nop(i, 0), 0);
	ASSERT_EQ(r.qp[0]->post_nop(7, mlx5::kSignaled), 0);
	EXPECT_EQ(r.qp[0]->post_nop(8, mlx5::kSignaled), -ENOSPC);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.wr_id, 7u);
	EXPECT_EQ(r.qp[0]->sq_room(), 8u);
	EXPECT_EQ(r.qp[0]->post_nop(8, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
}

TEST_P(Dp, DeferredDoorbellRingsForABatch)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	Target dst, src;
	ASSERT_EQ(make_target(r, 64, r.ctx(true, false, false, true, false), &dst), 0);
	ASSERT_EQ(make_target(r, 64, r.ctx(true, false, false, false, false), &src), 0);
	fill(src.p(), 64, 8);
	for (int i = 0; i < 4; i++) {
		mlx5::Sge s{src.addr() + i * 16, 16, src.mr.key};
		ASSERT_EQ(r.qp[0]->post_write({&s, 1}, dst.addr() + i * 16, dst.mr.key, i,
					      mlx5::kNoDoorbell |
						      (i == 3 ? unsigned{mlx5::kSignaled} : 0u)),
			  0);
	}
	r.qp[0]->ring();
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.wr_id, 3u);
	EXPECT_EQ(std::memcmp(src.p(), dst.p(), 64), 0);
}

/*
 * Fetch-and-add and compare-and-swap (hit and miss) on one word, its bytes in the order the
 * device's atomic mode gives (host: as they are; big-endian: byte-swapped), the old value
 * fetched in the same order.
 */
void atomics_in_mode(Rig &r, bool host)
{
	auto word = [host](uint64_t x) { return host ? x : htobe64(x); };
	Target t, res;
	t.off = res.off = kGuard + 96; /* atomics need 8-byte aligned addresses */
	ASSERT_EQ(make_target(r, 8, r.ctx(true, false, false, false, true), &t), 0);
	ASSERT_EQ(make_target(r, 16, r.ctx(true, true, false, false, false), &res), 0);
	uint64_t v = word(100);
	std::memcpy(t.p(), &v, 8);
	mlx5::Sge out{res.addr(), 8, res.mr.key};
	mlx5::Completion c;

	ASSERT_EQ(r.qp[0]->post_atomic_fa(out, t.addr(), t.mr.key, 23, 1, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
	ASSERT_TRUE(c.ok()) << "syndrome 0x" << std::hex << int(c.syndrome);
	std::memcpy(&v, res.p(), 8);
	EXPECT_EQ(v, word(100));
	std::memcpy(&v, t.p(), 8);
	EXPECT_EQ(v, word(123));

	/* A compare that misses leaves the word; one that hits swaps it. */
	ASSERT_EQ(r.qp[0]->post_atomic_cs(out, t.addr(), t.mr.key, 5, 777, 2, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
	ASSERT_TRUE(c.ok());
	std::memcpy(&v, t.p(), 8);
	EXPECT_EQ(v, word(123));
	std::memcpy(&v, res.p(), 8);
	EXPECT_EQ(v, word(123));
	ASSERT_EQ(r.qp[0]->post_atomic_cs(out, t.addr(), t.mr.key, 123, 777, 3, mlx5::kSignaled),
		  0);
	ASSERT_TRUE(r.wait(0, &c));
	ASSERT_TRUE(c.ok());
	std::memcpy(&v, t.p(), 8);
	EXPECT_EQ(v, word(777));
	std::memcpy(&v, res.p(), 8);
	EXPECT_EQ(v, word(123));
	/* A carry out of the low byte lands where the mode says the next byte is. */
	v = word(0xff);
	std::memcpy(t.p(), &v, 8);
	ASSERT_EQ(r.qp[0]->post_atomic_fa(out, t.addr(), t.mr.key, 1, 4, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
	ASSERT_TRUE(c.ok());
	std::memcpy(&v, t.p(), 8);
	EXPECT_EQ(v, word(0x100));
	EXPECT_TRUE(t.guards_intact());
	EXPECT_TRUE(all_of(res.p() + 8, 8, kCanary));
}

TEST_P(Dp, AtomicsWorkOnHostOrderWordsAfterBringUpAsksForHostEndianness)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	EXPECT_TRUE(r.dev->caps().atomic_host_endianness_supported);
	ASSERT_TRUE(r.dev->caps().atomic_host_endianness);
	EXPECT_TRUE(r.hw->device().data_path().atomic_host_endianness());
	atomics_in_mode(r, true);
}

TEST_P(Dp, AtomicsWorkOnBigEndianWordsOnADeviceWithoutHostEndianness)
{
	Rig r;
	RigOptions o = opts();
	o.atomic_host_endianness = false;
	ASSERT_EQ(r.make(o), 0);
	EXPECT_FALSE(r.dev->caps().atomic_host_endianness_supported);
	ASSERT_FALSE(r.dev->caps().atomic_host_endianness);
	EXPECT_FALSE(r.hw->device().data_path().atomic_host_endianness());
	atomics_in_mode(r, false);
}

TEST_P(Dp, AtomicsStayBigEndianWhenTheDriverDoesNotAsk)
{
	/* The power-on mode is big-endian, as on the wire. */
	Rig r;
	RigOptions o = opts();
	o.want_atomic_host_endianness = false;
	ASSERT_EQ(r.make(o), 0);
	EXPECT_TRUE(r.dev->caps().atomic_host_endianness_supported);
	ASSERT_FALSE(r.dev->caps().atomic_host_endianness);
	atomics_in_mode(r, false);
}

TEST_P(Dp, AtomicHammerFromBothQpsLosesNoIncrement)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	Target t, res0, res1;
	t.off = res0.off = res1.off = kGuard + 96; /* atomics need 8-byte aligned addresses */
	ASSERT_EQ(make_target(r, 8, r.ctx(true, false, false, false, true), &t), 0);
	ASSERT_EQ(make_target(r, 8, r.ctx(true, true, false, false, false), &res0), 0);
	ASSERT_EQ(make_target(r, 8, r.ctx(true, true, false, false, false), &res1), 0);
	std::memset(t.p(), 0, 8);
	constexpr int kOps = 2000;
	std::vector<uint64_t> seen[2];
	std::atomic<int> failures{0};
	auto worker = [&](int q, const Target &res) {
		mlx5::Sge out{res.addr(), 8, res.mr.key};
		for (int i = 0; i < kOps; i++) {
			if (r.qp[q]->post_atomic_fa(out, t.addr(), t.mr.key, 1, i,
						    mlx5::kSignaled) != 0) {
				failures++;
				return;
			}
			mlx5::Completion c;
			if (!r.wait(q, &c) || !c.ok()) {
				failures++;
				return;
			}
			uint64_t v;
			std::memcpy(&v, res.p(), 8);
			seen[q].push_back(v); /* host-endian atomics (bring-up) */
		}
	};
	std::thread a(worker, 0, std::cref(res0)), b(worker, 1, std::cref(res1));
	a.join();
	b.join();
	ASSERT_EQ(failures.load(), 0);
	uint64_t v;
	std::memcpy(&v, t.p(), 8);
	EXPECT_EQ(v, uint64_t{2 * kOps});
	/* Every fetched value is distinct: no two adds saw the same word. */
	std::set<uint64_t> all(seen[0].begin(), seen[0].end());
	all.insert(seen[1].begin(), seen[1].end());
	EXPECT_EQ(all.size(), size_t{2 * kOps});
	EXPECT_TRUE(t.guards_intact());
}

/* --- access errors --------------------------------------------------------------------- */

namespace {

enum class Bad {
	free_mkey,
	wrong_variant,
	wrong_pd,
	wrong_qp,
	no_remote_write,
	out_of_bounds,
	length_overflow,
	page_without_wr_en,
};

const char *name(Bad b)
{
	switch (b) {
	case Bad::free_mkey:
		return "free_mkey";
	case Bad::wrong_variant:
		return "wrong_variant";
	case Bad::wrong_pd:
		return "wrong_pd";
	case Bad::wrong_qp:
		return "wrong_qp";
	case Bad::no_remote_write:
		return "no_remote_write";
	case Bad::out_of_bounds:
		return "out_of_bounds";
	case Bad::length_overflow:
		return "length_overflow";
	case Bad::page_without_wr_en:
		return "page_without_wr_en";
	}
	return "?";
}

} // namespace

TEST_P(Dp, EveryRemoteAccessErrorGivesItsSyndromeAndEventAndTouchesNothing)
{
	for (Bad bad : {Bad::free_mkey, Bad::wrong_variant, Bad::wrong_pd, Bad::wrong_qp,
			Bad::no_remote_write, Bad::out_of_bounds, Bad::length_overflow,
			Bad::page_without_wr_en}) {
		SCOPED_TRACE(name(bad));
		Rig r;
		ASSERT_EQ(r.make(opts()), 0);
		mlx5::PdHandle other_pd;
		ASSERT_EQ(mlx5::PdHandle::alloc(*r.dev, &other_pd), 0);
		Target src, dst;
		const size_t len = 5000;
		ASSERT_EQ(make_target(r, len, r.ctx(true, false, false, false, false), &src), 0);
		mlx5::MkeyContext ctx = r.ctx(true, false, false, true, false, 0x42);
		uint64_t raddr_delta = 0;
		uint32_t key_xor = 0;
		switch (bad) {
		case Bad::free_mkey:
			ctx.free = true;
			break;
		case Bad::wrong_variant:
			key_xor = 1;
			break;
		case Bad::wrong_pd:
			ctx.pd = other_pd.pd();
			break;
		case Bad::wrong_qp:
			ctx.qpn = r.qp[0]->qpn(); /* the responder is qp[1] */
			break;
		case Bad::no_remote_write:
			ctx.rw = false;
			ctx.rr = true;
			break;
		case Bad::out_of_bounds:
			raddr_delta = 8; /* the last 8 bytes fall outside */
			break;
		case Bad::length_overflow:
			break;
		case Bad::page_without_wr_en:
			break;
		}
		dst.len = len;
		ASSERT_EQ(r.data->alloc(len + dst.off + kGuard + 4096, 4096, &dst.block), 0);
		dst.arena = r.data.get();
		std::memset(dst.block.va, kCanary, dst.block.len);
		std::vector<mlx5::MttEntry> mtt;
		ASSERT_EQ(r.mtt_mr(dst.block, dst.off, len, ctx, &dst.mr, false, &mtt), 0);
		if (bad == Bad::page_without_wr_en)
			mtt.back().wr_en = false;
		mlx5::MkeyCreate c;
		c.ctx = ctx;
		c.ctx.start_addr = dst.addr();
		c.ctx.len = len;
		c.pg_access = bad == Bad::page_without_wr_en;
		c.mtt = mtt;
		ASSERT_EQ(r.create_raw(c, &dst.mr), 0);
		/* The target region before the write, to prove nothing changed. */
		std::vector<uint8_t> before(dst.p(), dst.p() + len);
		fill(src.p(), len, 1);

		uint64_t raddr = dst.addr() + raddr_delta;
		uint32_t wlen = static_cast<uint32_t>(len);
		if (bad == Bad::length_overflow) {
			raddr = ~uint64_t{0} - 15; /* raddr + len wraps around 2^64 */
			wlen = 64;
		}
		mlx5::Sge s{src.addr(), wlen, src.mr.key};
		ASSERT_EQ(r.qp[0]->post_write({&s, 1}, raddr, dst.mr.key ^ key_xor, 11,
					      mlx5::kSignaled),
			  0);
		mlx5::Completion cqe;
		ASSERT_TRUE(r.wait(0, &cqe));
		EXPECT_EQ(cqe.opcode, MLX5_CQE_REQ_ERR);
		EXPECT_EQ(cqe.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
		EXPECT_EQ(cqe.wr_id, 11u);
		EXPECT_EQ(cqe.qpn, r.qp[0]->qpn());
		mlx5::Event ev;
		ASSERT_TRUE(r.wait_event(&ev));
		EXPECT_EQ(ev.type, prm::event_type::wq_access_error);
		EXPECT_EQ(ev.qpn, r.qp[1]->qpn());
		EXPECT_EQ(std::memcmp(before.data(), dst.p(), len), 0);
		EXPECT_TRUE(dst.guards_intact());
		uint32_t st = 0;
		ASSERT_EQ(r.qp[0]->query_state(&st), 0);
		EXPECT_EQ(st, prm::qp_state::err);
		ASSERT_EQ(r.qp[1]->query_state(&st), 0);
		EXPECT_EQ(st, prm::qp_state::err);
	}
}

TEST_P(Dp, ReadAndAtomicNeedTheirOwnRemoteAccessBits)
{
	struct Case {
		const char *what;
		bool atomic;
		bool rr, a;
		bool pg_rd_en; /* with pg_access: the page's rd_en */
		uint8_t syndrome;
	};
	const Case cases[] = {
		{"read without rr", false, false, true, true, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR},
		{"read of a page without rd_en", false, true, true, false,
		 MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR},
		{"atomic without a", true, true, false, true, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR},
		{"read with rr", false, true, false, true, 0},
		{"atomic with a", true, false, true, true, 0},
	};
	for (const Case &k : cases) {
		SCOPED_TRACE(k.what);
		Rig r;
		ASSERT_EQ(r.make(opts()), 0);
		Target remote, local;
		remote.off = local.off = kGuard + 96;
		mlx5::MkeyContext rc = r.ctx(true, false, k.rr, true, k.a);
		rc.qpn = r.qp[1]->qpn(); /* the responder itself: allowed */
		remote.len = 64;
		ASSERT_EQ(r.data->alloc(remote.off + 64 + kGuard + 4096, 4096, &remote.block), 0);
		remote.arena = r.data.get();
		std::memset(remote.block.va, kCanary, remote.block.len);
		std::vector<mlx5::MttEntry> mtt;
		ASSERT_EQ(r.mtt_mr(remote.block, remote.off, 64, rc, &remote.mr, false, &mtt), 0);
		mtt[0].rd_en = k.pg_rd_en;
		mlx5::MkeyCreate c;
		c.ctx = rc;
		c.ctx.start_addr = remote.addr();
		c.ctx.len = 64;
		c.pg_access = true;
		c.mtt = mtt;
		ASSERT_EQ(r.create_raw(c, &remote.mr), 0);
		ASSERT_EQ(make_target(r, 64, r.ctx(true, true, false, false, false), &local), 0);
		std::vector<uint8_t> before(remote.p(), remote.p() + 64);
		mlx5::Sge s{local.addr(), k.atomic ? 8u : 64u, local.mr.key};
		int rc2 = k.atomic ? r.qp[0]->post_atomic_fa(s, remote.addr(), remote.mr.key, 1, 1,
							     mlx5::kSignaled)
				   : r.qp[0]->post_read({&s, 1}, remote.addr(), remote.mr.key, 1,
							mlx5::kSignaled);
		ASSERT_EQ(rc2, 0);
		mlx5::Completion cqe;
		ASSERT_TRUE(r.wait(0, &cqe));
		EXPECT_EQ(cqe.syndrome, k.syndrome);
		if (k.syndrome != 0) {
			EXPECT_EQ(cqe.opcode, MLX5_CQE_REQ_ERR);
			EXPECT_EQ(std::memcmp(before.data(), remote.p(), 64), 0);
			mlx5::Event ev;
			ASSERT_TRUE(r.wait_event(&ev));
			EXPECT_EQ(ev.type, prm::event_type::wq_access_error);
			EXPECT_EQ(ev.qpn, r.qp[1]->qpn());
			EXPECT_TRUE(all_of(local.p(), 64, kCanary));
		} else if (!k.atomic) {
			EXPECT_EQ(std::memcmp(before.data(), local.p(), 64), 0);
		}
		EXPECT_TRUE(remote.guards_intact());
	}
}

TEST_P(Dp, AtomicOnAResponderWithoutAtomicEnableIsAnInvalidRequest)
{
	Rig r;
	RigOptions o = opts();
	o.rae = false;
	ASSERT_EQ(r.make(o), 0);
	Target t, res;
	t.off = res.off = kGuard + 96;
	ASSERT_EQ(make_target(r, 8, r.ctx(true, false, false, false, true), &t), 0);
	ASSERT_EQ(make_target(r, 8, r.ctx(true, true, false, false, false), &res), 0);
	mlx5::Sge out{res.addr(), 8, res.mr.key};
	ASSERT_EQ(r.qp[0]->post_atomic_cs(out, t.addr(), t.mr.key, 0, 1, 1, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	mlx5::Event ev;
	ASSERT_TRUE(r.wait_event(&ev));
	EXPECT_EQ(ev.type, prm::event_type::wq_inval_req_error);
	EXPECT_TRUE(all_of(t.p(), 8, kCanary));
}

TEST_P(Dp, LocalErrorsGiveLocalSyndromes)
{
	struct Case {
		const char *what;
		bool read;	   /* RDMA READ scatters locally (needs lw); WRITE gathers (lr) */
		bool bad_index;	   /* an lkey that names no mkey */
		bool other_pd;	   /* the local mkey is in another PD */
		bool no_lw;	   /* READ into an MR without local write */
		bool out_of_range; /* gather past the local MR's end */
		uint8_t syndrome;
	};
	const Case cases[] = {
		{"bad lkey", false, true, false, false, false, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR},
		{"other PD", false, false, true, false, false, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR},
		{"out of range", false, false, false, false, true,
		 MLX5_CQE_SYNDROME_LOCAL_PROT_ERR},
		{"read into read-only", true, false, false, true, false,
		 MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR},
	};
	for (const Case &k : cases) {
		SCOPED_TRACE(k.what);
		Rig r;
		ASSERT_EQ(r.make(opts()), 0);
		mlx5::PdHandle other;
		ASSERT_EQ(mlx5::PdHandle::alloc(*r.dev, &other), 0);
		Target remote, local;
		ASSERT_EQ(make_target(r, 4096, r.ctx(true, false, true, true, false), &remote), 0);
		mlx5::MkeyContext lc = r.ctx(true, !k.no_lw, false, false, false);
		if (k.other_pd)
			lc.pd = other.pd();
		ASSERT_EQ(make_target(r, 4096, lc, &local), 0);
		fill(remote.p(), 4096, 2);
		std::vector<uint8_t> local_before(local.p(), local.p() + 4096);
		std::vector<uint8_t> remote_before(remote.p(), remote.p() + 4096);
		uint32_t lkey = k.bad_index ? (0xfff0u << 8) : local.mr.key;
		mlx5::Sge s{local.addr() + (k.out_of_range ? 100 : 0), 4096, lkey};
		int rc = k.read ? r.qp[0]->post_read({&s, 1}, remote.addr(), remote.mr.key, 4,
						     mlx5::kSignaled)
				: r.qp[0]->post_write({&s, 1}, remote.addr(), remote.mr.key, 4,
						      mlx5::kSignaled);
		ASSERT_EQ(rc, 0);
		mlx5::Completion c;
		ASSERT_TRUE(r.wait(0, &c));
		EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
		EXPECT_EQ(c.syndrome, k.syndrome);
		EXPECT_EQ(std::memcmp(local_before.data(), local.p(), 4096), 0);
		EXPECT_EQ(std::memcmp(remote_before.data(), remote.p(), 4096), 0);
		EXPECT_TRUE(local.guards_intact());
		EXPECT_TRUE(remote.guards_intact());
	}
}

TEST_P(Dp, ResponderWithoutRemoteWriteEnableRefusesWithInvalidRequest)
{
	Rig r;
	RigOptions o = opts();
	o.rwe = false;
	ASSERT_EQ(r.make(o), 0);
	Target src, dst;
	ASSERT_EQ(make_target(r, 64, r.ctx(true, false, false, false, false), &src), 0);
	ASSERT_EQ(make_target(r, 64, r.ctx(true, false, false, true, false), &dst), 0);
	mlx5::Sge s{src.addr(), 64, src.mr.key};
	ASSERT_EQ(r.qp[0]->post_write({&s, 1}, dst.addr(), dst.mr.key, 1, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	mlx5::Event ev;
	ASSERT_TRUE(r.wait_event(&ev));
	EXPECT_EQ(ev.type, prm::event_type::wq_inval_req_error);
	EXPECT_EQ(ev.qpn, r.qp[1]->qpn());
	EXPECT_TRUE(all_of(dst.p(), 64, kCanary));
}

TEST_P(Dp, WorkAfterAnErrorIsFlushedUntilRecovery)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	Target src;
	ASSERT_EQ(make_target(r, 64, r.ctx(true, false, false, false, false), &src), 0);
	mlx5::Sge bad{src.addr(), 64, 0xfff0u << 8};
	ASSERT_EQ(r.qp[0]->post_write({&bad, 1}, 0, 0, 1, mlx5::kSignaled | mlx5::kNoDoorbell), 0);
	ASSERT_EQ(r.qp[0]->post_nop(2, mlx5::kSignaled), 0);
	mlx5::Completion c;
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.wr_id, 1u);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.wr_id, 2u);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	ASSERT_EQ(r.qp[0]->post_nop(3, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);

	ASSERT_EQ(r.qp[0]->recover(), 0);
	uint32_t st = 0;
	ASSERT_EQ(r.qp[0]->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::rts);
	ASSERT_EQ(r.qp[0]->post_nop(4, mlx5::kSignaled), 0);
	ASSERT_TRUE(r.wait(0, &c));
	EXPECT_TRUE(c.ok());
	EXPECT_EQ(c.wr_id, 4u);
}

TEST_P(Dp, IllegalTransitionsAreRefusedWithBadQpState)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	mlx5::QpParams p;
	p.pd = r.pd.pd();
	std::unique_ptr<mlx5::Cq> cq;
	ASSERT_EQ(mlx5::Cq::create(*r.dev, *r.uar, {}, &cq), 0);
	std::unique_ptr<mlx5::Qp> qp;
	ASSERT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *cq, p, &qp), 0);
	uint32_t st = 99;
	ASSERT_EQ(qp->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::rst);
	EXPECT_EQ(qp->to_rtr(r.qp[0]->qpn()), -EINVAL);
	EXPECT_EQ(r.dev->last_status(), prm::status::bad_qp_state);
	EXPECT_EQ(qp->to_rts(), -EINVAL);
	ASSERT_EQ(qp->to_init(), 0);
	EXPECT_EQ(qp->to_rts(), -EINVAL);
	EXPECT_EQ(qp->to_init(), -EINVAL);
	ASSERT_EQ(qp->to_err(), 0);
	ASSERT_EQ(qp->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::err);
	ASSERT_EQ(qp->to_reset(), 0);
	ASSERT_EQ(qp->query_state(&st), 0);
	EXPECT_EQ(st, prm::qp_state::rst);
}

TEST_P(Dp, QpCreateRefusesBadArguments)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	std::unique_ptr<mlx5::Qp> qp;
	mlx5::QpParams p;
	p.pd = r.pd.pd();
	p.port = 3;
	EXPECT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &qp), -EINVAL);
	p.port = 1;
	p.log_sq_size = 12; /* the CQ has 2^8 entries */
	EXPECT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &qp), -EINVAL);
	std::unique_ptr<mlx5::Cq> cq;
	mlx5::CqParams cp;
	cp.log_size = 0;
	EXPECT_EQ(mlx5::Cq::create(*r.dev, *r.uar, cp, &cq), -EINVAL);
	EXPECT_FALSE(qp);
	EXPECT_FALSE(cq);
}

/* ---- Issue 17: CQs on a real EQ, the RC connection --------------------------------------- */

emu::QpInfo device_qp(Rig &r, uint32_t qpn)
{
	emu::QpInfo info;
	EXPECT_EQ(r.hw->device().data_path().query_qp(qpn, &info), 0);
	return info;
}

TEST_P(Dp, CqWithoutAnEqIsOnTheDevicesCompletionEq)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	std::unique_ptr<mlx5::Cq> cq, cq2;
	ASSERT_EQ(mlx5::Cq::create(*r.dev, *r.uar, {}, &cq), 0);
	ASSERT_EQ(mlx5::Cq::create(*r.dev, *r.uar, {}, &cq2), 0);
	uint32_t eqn = 0, again = 0;
	ASSERT_EQ(r.dev->comp_eqn(&eqn), 0);
	ASSERT_EQ(r.dev->comp_eqn(&again), 0);
	EXPECT_EQ(again, eqn) << "one completion EQ for every CQ";
	EXPECT_NE(eqn, r.eq->eqn());
	/* The CQs name it: the device will not destroy it under them. */
	EXPECT_EQ(mlx5::destroy_eq(r.dev->cmdq(), eqn), -EBUSY);
	EXPECT_EQ(r.dev->last_status(), prm::status::resource_busy);
	/* EQ 0, what CQs used to name, does not exist: BAD_RESOURCE, nothing created. */
	std::unique_ptr<mlx5::Cq> bad;
	mlx5::CqParams cp;
	cp.eqn = 0;
	EXPECT_EQ(mlx5::Cq::create(*r.dev, *r.uar, cp, &bad), -EINVAL);
	EXPECT_EQ(r.dev->last_status(), prm::status::bad_resource);
	EXPECT_FALSE(bad);
}

TEST_P(Dp, ConnectedQpsCarryTheLoopbackConnection)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	for (int i = 0; i < 2; i++) {
		const emu::QpInfo q = device_qp(r, r.qp[i]->qpn());
		EXPECT_EQ(q.state, emu::QpState::rts);
		EXPECT_EQ(q.path.mtu, prm::qp_mtu::mtu_1024);
		EXPECT_EQ(q.path.log_msg_max, 30u);
		EXPECT_TRUE(q.path.fl);
		EXPECT_EQ(q.path.retry_count, 7u);
		EXPECT_EQ(q.path.rnr_retry, 7u);
		EXPECT_EQ(q.path.ack_timeout, 14u);
		EXPECT_EQ(q.path.min_rnr_nak, 12u);
		EXPECT_EQ(q.path.next_send_psn, 0u);
		EXPECT_EQ(q.path.next_rcv_psn, 0u);
		EXPECT_EQ(q.path.atomic_mode, prm::qp_atomic_mode::ib_comp) << "rae set";
		/* The model's RoCE caps stamp both kinds: the device's default. */
		EXPECT_EQ(q.attr.ts_format, prm::qp_ts_format::device_default);
	}
	const mlx5::Caps &c = r.dev->caps();
	EXPECT_TRUE(c.roce);
	EXPECT_TRUE(c.roce_force_loopback);
	EXPECT_TRUE(c.roce_sw_src_udp_port) << "set with SET_HCA_CAP(roce) at bring-up";
	EXPECT_EQ(c.roce_qp_ts_format, prm::ts_format_cap::free_running_and_real_time);
	EXPECT_EQ(c.roce_address_table_size, 256u);
	EXPECT_EQ(c.log_max_msg, 30u);
}

TEST_P(Dp, QpParametersReachTheDeviceAndTooLargeALimitIsClamped)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	std::unique_ptr<mlx5::Cq> cq;
	ASSERT_EQ(mlx5::Cq::create(*r.dev, *r.uar, {}, &cq), 0);
	mlx5::QpParams p;
	p.pd = r.pd.pd();
	p.mtu = prm::qp_mtu::mtu_4096;
	p.log_msg_max = 31; /* the device carries 2^30 */
	p.sq_psn = 0x10;
	p.rq_psn = 0x20;
	p.retry_count = 3;
	p.rnr_retry = 2;
	p.ack_timeout = 20;
	p.min_rnr_timer = 5;
	std::unique_ptr<mlx5::Qp> qp;
	ASSERT_EQ(mlx5::Qp::create(*r.dev, *r.uar, *cq, p, &qp), 0);
	ASSERT_EQ(qp->connect(qp->qpn()), 0);
	const emu::QpInfo q = device_qp(r, qp->qpn());
	EXPECT_EQ(q.path.mtu, prm::qp_mtu::mtu_4096);
	EXPECT_EQ(q.path.log_msg_max, 30u);
	EXPECT_EQ(q.path.next_send_psn, 0x10u);
	EXPECT_EQ(q.path.next_rcv_psn, 0x20u);
	EXPECT_EQ(q.path.retry_count, 3u);
	EXPECT_EQ(q.path.rnr_retry, 2u);
	EXPECT_EQ(q.path.ack_timeout, 20u);
	EXPECT_EQ(q.path.min_rnr_nak, 5u);
	EXPECT_EQ(q.path.atomic_mode, 0u) << "no rae, no atomic mode";
}

TEST_P(Dp, WithoutForceLoopbackTheQpNeedsTheRemoteGid)
{
	RigOptions o = opts();
	o.emu_cfg.roce_fl_when_enabled = false;
	{
		Rig r;
		EXPECT_EQ(r.make(o), -EINVAL) << "no fl and no GID: refused before sending";
		ASSERT_TRUE(r.qp[0]);
		EXPECT_EQ(device_qp(r, r.qp[0]->qpn()).state, emu::QpState::init);
	}
	o.gid_index = 1;
	for (size_t i = 0; i < o.remote_gid.size(); i++)
		o.remote_gid[i] = static_cast<uint8_t>(0x10 + i);
	Rig r;
	ASSERT_EQ(r.make(o), 0);
	const emu::QpInfo q = device_qp(r, r.qp[0]->qpn());
	EXPECT_EQ(q.state, emu::QpState::rts);
	EXPECT_FALSE(q.path.fl);
	EXPECT_EQ(q.path.gid_index, 1u);
	EXPECT_EQ(std::memcmp(q.path.remote_gid, o.remote_gid.data(), 16), 0);
}

TEST_P(Dp, QpTimestampFormatFollowsTheRoceCaps)
{
	RigOptions o = opts();
	o.emu_cfg.roce_qp_ts_format = prm::ts_format_cap::real_time; /* free running refused */
	{
		Rig r;
		ASSERT_EQ(r.make(o), 0);
		EXPECT_EQ(device_qp(r, r.qp[0]->qpn()).attr.ts_format,
			  prm::qp_ts_format::device_default);
	}
	o.emu_cfg.roce_qp_ts_format = prm::ts_format_cap::free_running; /* default refused */
	Rig r;
	ASSERT_EQ(r.make(o), 0);
	EXPECT_EQ(device_qp(r, r.qp[0]->qpn()).attr.ts_format, prm::qp_ts_format::free_running);
}

TEST_P(Dp, QpCreateRefusesConnectionValuesOutOfRange)
{
	Rig r;
	ASSERT_EQ(r.make(opts()), 0);
	auto refused = [&](auto set) {
		mlx5::QpParams p;
		p.pd = r.pd.pd();
		set(p);
		std::unique_ptr<mlx5::Qp> qp;
		return mlx5::Qp::create(*r.dev, *r.uar, *r.cq[0], p, &qp) == -EINVAL && !qp;
	};
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.mtu = 0; }));
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.mtu = 6; }));
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.log_msg_max = 32; }));
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.gid_index = 256; }));
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.sq_psn = 1u << 24; }));
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.rq_psn = 1u << 24; }));
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.retry_count = 8; }));
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.rnr_retry = 8; }));
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.ack_timeout = 32; }));
	EXPECT_TRUE(refused([](mlx5::QpParams &p) { p.min_rnr_timer = 32; }));
}

INSTANTIATE_TEST_SUITE_P(Delivery, Dp,
			 ::testing::Values(emu::DoorbellDelivery::inline_call,
					   emu::DoorbellDelivery::poll_thread),
			 [](const auto &i) {
				 return i.param == emu::DoorbellDelivery::inline_call
						? std::string("inline")
						: std::string("thread");
			 });
