/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Vectored (nicmr_mr_regv), IOVA-list (nicmr_mr_reg_iova) and page-vector (nicmr_mr_reg_pages)
 * registration: RDMA through keys of each kind with the data checked byte for byte across the
 * joints, lookups that translate each address to its segment's IOVA, every refused argument
 * with its code, and failed calls that leave the device, the engine and the pools as they were.
 * On both key programmers (UMR and firmware commands).
 */
#include <sys/uio.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kBuf = 64 << 10;

/* Two connected QPs (port 1 -> port 2), a source and a sink MR of kBuf at the end of the
 * pool; the vectored regions under test are the responder's. */
class MrVec : public ApiBoth {
protected:
	void SetUp() override
	{
		ApiBoth::SetUp();
		connect_ports(dev, pd, &cqa, &cqb, &qa, &qb);
		if (HasFatalFailure())
			return;
		src = base + (3 << 20);
		sink = src + kBuf;
		ASSERT_EQ(nicmr_mr_reg(pd, src, kBuf, kAll, 0, 0, &msrc), 0);
		ASSERT_EQ(nicmr_mr_reg(pd, sink, kBuf, kAll, 0, 0, &msink), 0);
	}
	void TearDown() override
	{
		for (nicmr_mr *m : {msrc, msink})
			if (m) {
				EXPECT_EQ(nicmr_mr_dereg(m), 0);
			}
		destroy_queues({qa, qb}, {cqa, cqb});
		ApiBoth::TearDown();
	}
	uint8_t wait() { return wait_wc(cqa).status; }
	/* RDMA WRITE of a pattern into [raddr, + len) of rkey, then RDMA READ of it back into
	 * the sink; returns the pattern's seed. The caller checks where the bytes landed. */
	void write_then_read(uint32_t rkey, uint64_t raddr, size_t len, uint8_t seed)
	{
		ASSERT_LE(len, kBuf);
		for (size_t i = 0; i < len; i++)
			src[i] = static_cast<char>(i * 31 + seed);
		std::memset(sink, 0, len);
		ASSERT_EQ(nicmr_post_write(qa, u(src), len, nicmr_mr_key(msrc), raddr, rkey, 1,
					   NICMR_SEND_SIGNALED),
			  0);
		ASSERT_EQ(wait(), NICMR_WC_SUCCESS);
		ASSERT_EQ(nicmr_post_read(qa, u(sink), len, nicmr_mr_key(msink), raddr, rkey, 2,
					  NICMR_SEND_SIGNALED),
			  0);
		ASSERT_EQ(wait(), NICMR_WC_SUCCESS);
		EXPECT_EQ(std::memcmp(src, sink, len), 0) << "read back differs";
	}
	/* The bytes of the segments, end to end, equal src. */
	void expect_landed(const std::vector<iovec> &iov)
	{
		size_t off = 0;
		for (size_t s = 0; s < iov.size(); s++) {
			EXPECT_EQ(std::memcmp(iov[s].iov_base, src + off, iov[s].iov_len), 0)
				<< "segment " << s;
			off += iov[s].iov_len;
		}
	}
	uint64_t pool_iova(const void *p, size_t len)
	{
		uint64_t iova = 0;
		EXPECT_EQ(dev->space->translate(p, len, &iova), 0);
		return iova;
	}
	uint64_t lookup(uint32_t key, uint64_t addr, size_t len = 1)
	{
		uint64_t iova = 0;
		EXPECT_EQ(nicmr_key_lookup(dev, key, addr, len, NICMR_ACCESS_REMOTE_WRITE, &iova),
			  0);
		return iova;
	}
	uint64_t free_and_retiring()
	{
		auto s = stats(dev);
		return s.keys_free + s.keys_retiring;
	}
	size_t klm_live() { return dev->klm ? dev->klm->live() : 0; }
	nicmr_cq *cqa = nullptr, *cqb = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	nicmr_mr *msrc = nullptr, *msink = nullptr;
	char *src = nullptr, *sink = nullptr;
};

/* Indirect (KLM) regions take the index of a free mkey (mlx5_klm_programmer.h): devices with
 * mkey_by_name. A stock device's regv is below (MrVecStock). */
INSTANTIATE_TEST_SUITE_P(Programmer, MrVec,
			 ::testing::Values("emu:mkeys=1024,mkey_by_name=1",
					   "emu:mkeys=1024,programmer=cmd,mkey_by_name=1"));

/* On a stock device (it chooses every mkey index) a vectored region whose joints are page
 * aligned is one MTT key as anywhere; one that needs an indirect key is -EOPNOTSUPP and
 * leaves nothing behind (no inner key, no mapping, no mkey). */
using MrVecStock = ApiFixture;

TEST_F(MrVecStock, KlmLayoutIsEopnotsuppAndLeavesNothing)
{
	std::vector<iovec> mtt = {{base + (64 << 10), 8192}, {base + (256 << 10), 4096}};
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_regv(pd, mtt.data(), mtt.size(), kAll, 0, 0, &m), 0);
	EXPECT_EQ(nicmr_mr_layout(m), 1);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
	m = nullptr;

	Anon plain(3 * 4096);
	std::vector<iovec> klm = {{base + 100, 1000}, {plain.get() + 13, 5000}};
	auto before = stats(dev);
	EXPECT_EQ(nicmr_mr_regv(pd, klm.data(), klm.size(), kAll, 0, 0, &m), -EOPNOTSUPP);
	EXPECT_EQ(m, nullptr);
	auto after = stats(dev);
	expect_released(before, after);
	EXPECT_EQ(after.dev_mkeys, before.dev_mkeys);
	EXPECT_EQ(after.keys_free + after.keys_retiring, before.keys_free + before.keys_retiring);
}

TEST_P(MrVec, PageAlignedJointsGiveOneMttKeyAndRdmaCrossesThem)
{
	std::vector<iovec> iov = {
		{base + (64 << 10), 8192}, {base + (256 << 10), 12288}, {base + (128 << 10), 4096}};
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_regv(pd, iov.data(), iov.size(), kAll, 0, 0, &m), 0);
	EXPECT_EQ(nicmr_mr_layout(m), 1);
	EXPECT_EQ(nicmr_mr_addr(m), iov[0].iov_base);
	EXPECT_EQ(nicmr_mr_len(m), 24576u);
	const uint32_t k = nicmr_mr_key(m);
	/* One MTT mkey on the device. */
	mlx5::MkeyQuery q;
	ASSERT_EQ(query(k, &q), 0);
	EXPECT_EQ(q.ctx.access_mode, mlx5::prm::access_mode::mtt);
	/* Each address translates to its own segment's IOVA. */
	const uint64_t s = u(iov[0].iov_base);
	EXPECT_EQ(lookup(k, s + 5), pool_iova(base + (64 << 10) + 5, 1));
	EXPECT_EQ(lookup(k, s + 8192), pool_iova(base + (256 << 10), 1));
	EXPECT_EQ(lookup(k, s + 8192 + 12288 + 4095), pool_iova(base + (128 << 10) + 4095, 1));
	write_then_read(k, s, 24576, 3);
	expect_landed(iov);
	/* A range across a joint, starting in the middle of a segment. */
	write_then_read(k, s + 5000, 10000, 9);
	EXPECT_EQ(std::memcmp(base + (64 << 10) + 5000, src, 3192), 0);
	EXPECT_EQ(std::memcmp(base + (256 << 10), src + 3192, 10000 - 3192), 0);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, k, s, 1, NICMR_ACCESS_REMOTE_WRITE, &iova), -ENOKEY);
}

TEST_P(MrVec, UnalignedJointsGiveKlmOverPoolAndPlainMemory)
{
	Anon plain(3 * 4096);
	std::vector<iovec> iov = {{base + 100, 1000},
				  {base + (64 << 10) + 7, 3000},
				  {plain.get() + 13, 5000},
				  {base + (512 << 10) + 4095, 2}};
	auto before = stats(dev);
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_regv(pd, iov.data(), iov.size(), kAll, 0, 0, &m), 0);
	EXPECT_EQ(nicmr_mr_layout(m), 2);
	EXPECT_EQ(nicmr_mr_len(m), 9002u);
	EXPECT_EQ(stats(dev).slow_mappings, before.slow_mappings + 1);
	EXPECT_EQ(klm_live(), 1u);
	const uint32_t k = nicmr_mr_key(m);
	mlx5::MkeyQuery q;
	ASSERT_EQ(query(k, &q), 0);
	EXPECT_EQ(q.ctx.access_mode, mlx5::prm::access_mode::klm);
	const uint64_t s = u(base + 100);
	EXPECT_EQ(lookup(k, s), pool_iova(base + 100, 1));
	EXPECT_EQ(lookup(k, s + 1000), pool_iova(base + (64 << 10) + 7, 1));
	const nicmr::mem::SlowMap &sm = *m->vec()->pieces[2].slow;
	EXPECT_EQ(lookup(k, s + 4000 + 17), sm.iova + (u(plain.get()) + 13 + 17 - sm.va));
	EXPECT_EQ(lookup(k, s + 9001), pool_iova(base + (512 << 10) + 4096, 1));
	write_then_read(k, s, 9002, 5);
	expect_landed(iov);
	/* The inner keys are held by the region. */
	EXPECT_NE(m->vec()->pieces[0].child, 0u);
	EXPECT_EQ(dev->engine->dereg(m->vec()->pieces[0].child, nullptr), -EBUSY);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
	EXPECT_EQ(klm_live(), 0u);
	expect_released(before, stats(dev));
	EXPECT_EQ(free_and_retiring(), before.keys_free + before.keys_retiring);
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, k, s, 1, NICMR_ACCESS_REMOTE_WRITE, &iova), -ENOKEY);
}

TEST_P(MrVec, ZeroBasedRegionStartsAtZero)
{
	std::vector<iovec> iov = {{base + 300, 700}, {base + (96 << 10), 5000}};
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_regv(pd, iov.data(), iov.size(), kAll, NICMR_MR_ZERO_BASED, 0, &m), 0);
	EXPECT_EQ(nicmr_mr_layout(m), 2);
	const uint32_t k = nicmr_mr_key(m);
	EXPECT_EQ(lookup(k, 0), pool_iova(base + 300, 1));
	EXPECT_EQ(lookup(k, 700), pool_iova(base + (96 << 10), 1));
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, k, 5700, 1, NICMR_ACCESS_REMOTE_WRITE, &iova), -ERANGE);
	write_then_read(k, 0, 5700, 7);
	expect_landed(iov);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_P(MrVec, KeyRefusesWhatItDoesNotGrant)
{
	std::vector<iovec> iov = {{base + 100, 1000}, {base + (64 << 10) + 7, 3000}};
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_regv(pd, iov.data(), 2, NICMR_ACCESS_REMOTE_READ, 0, 0, &m), 0);
	const uint32_t k = nicmr_mr_key(m);
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, k, u(base + 100), 8, NICMR_ACCESS_REMOTE_WRITE, &iova),
		  -EACCES);
	EXPECT_EQ(nicmr_key_lookup(dev, k, u(base + 99), 8, NICMR_ACCESS_REMOTE_READ, &iova),
		  -ERANGE);
	EXPECT_EQ(
		nicmr_key_lookup(dev, k, u(base + 100) + 3999, 2, NICMR_ACCESS_REMOTE_READ, &iova),
		-ERANGE);
	/* The device refuses a remote write through it. */
	ASSERT_EQ(nicmr_post_write(qa, u(src), 64, nicmr_mr_key(msrc), u(base + 100), k, 1,
				   NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait(), NICMR_WC_REMOTE_ACCESS);
	EXPECT_EQ(nicmr_qp_recover(qa), 0);
	EXPECT_EQ(nicmr_qp_recover(qb), 0);
	/* Sub-MRs of segmented regions are not offered. */
	nicmr_mr *sub = nullptr;
	EXPECT_EQ(nicmr_mr_reg_sub(m, 0, 8, NICMR_ACCESS_REMOTE_READ, 0, 0, &sub), -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_P(MrVec, VectoredKeyServesAsLocalKey)
{
	std::vector<iovec> iov = {{base + 100, 1000}, {base + (64 << 10) + 7, 3000}};
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_regv(pd, iov.data(), 2, kAll, 0, 0, &m), 0);
	for (size_t i = 0; i < 1000; i++)
		base[100 + i] = static_cast<char>(i);
	for (size_t i = 0; i < 3000; i++)
		base[(64 << 10) + 7 + i] = static_cast<char>(i * 3 + 1);
	std::memset(sink, 0, 4000);
	ASSERT_EQ(nicmr_post_write(qa, u(base + 100), 4000, nicmr_mr_key(m), u(sink),
				   nicmr_mr_key(msink), 1, NICMR_SEND_SIGNALED),
		  0);
	ASSERT_EQ(wait(), NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(sink, base + 100, 1000), 0);
	EXPECT_EQ(std::memcmp(sink + 1000, base + (64 << 10) + 7, 3000), 0);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_P(MrVec, RegvRefusesBadArgumentsWithTheirCodes)
{
	Anon plain(4096);
	std::vector<iovec> ok = {{base, 4096}, {base + 8192, 4096}};
	std::vector<iovec> many(NICMR_MAX_IOV + 1, iovec{base, 64});
	std::vector<iovec> empty_seg = {{base, 4096}, {base + 8192, 0}};
	std::vector<iovec> wraps = {{base, 4096},
				    {reinterpret_cast<void *>(~uintptr_t{0} - 10), 64}};
	std::vector<iovec> total = {
		{reinterpret_cast<void *>(uintptr_t{1} << 12), size_t{1} << 63},
		{reinterpret_cast<void *>(uintptr_t{1} << 12), size_t{1} << 63}};
	std::vector<iovec> unmapped = {{base, 4096}, {reinterpret_cast<void *>(0x1000), 4096}};
	auto before = stats(dev);
	const uint64_t pool_users = pool->pieces.load();
	nicmr_mr *m = nullptr;
	EXPECT_EQ(nicmr_mr_regv(nullptr, ok.data(), 2, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_regv(pd, nullptr, 2, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_regv(pd, ok.data(), 2, kAll, 0, 0, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_regv(pd, ok.data(), 0, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_regv(pd, many.data(), many.size(), kAll, 0, 0, &m), -E2BIG);
	EXPECT_EQ(nicmr_mr_regv(pd, empty_seg.data(), 2, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_regv(pd, wraps.data(), 2, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_regv(pd, total.data(), 2, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_regv(pd, ok.data(), 2, kAll, 1ull << 7, 0, &m), -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mr_regv(pd, ok.data(), 2, 1ull << 40, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_regv(pd, ok.data(), 2, NICMR_ACCESS_REMOTE_ATOMIC, 0, 0, &m), -EINVAL)
		<< "ibv rule: REMOTE_ATOMIC needs LOCAL_WRITE";
	/* The first segment was mapped (a pool user) before the second failed. */
	EXPECT_EQ(nicmr_mr_regv(pd, unmapped.data(), 2, kAll, 0, 0, &m), -EFAULT);
	/* A plain segment mapped, then an unmapped one: its mapping is undone. */
	std::vector<iovec> half = {{plain.get(), 4096}, {reinterpret_cast<void *>(0x1000), 4096}};
	EXPECT_EQ(nicmr_mr_regv(pd, half.data(), 2, kAll, 0, 0, &m), -EFAULT);
	EXPECT_EQ(m, nullptr);
	expect_same(before, stats(dev));
	EXPECT_EQ(pool->pieces.load(), pool_users);
}

TEST_P(MrVec, FailureAfterInnerKeysLeavesNothingBehind)
{
	Anon plain(4096);
	std::vector<iovec> iov = {{base + 100, 1000}, {plain.get() + 5, 3000}};
	const uint64_t want = (uint64_t{700} << 8) | 0x42;
	nicmr_mr *holder = nullptr, *m = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base + (1 << 20), 4096, kAll, NICMR_MR_REQUESTED_KEY, want,
			       &holder),
		  0);
	auto before = stats(dev);
	const uint64_t pool_users = pool->pieces.load();
	const uint64_t keys = free_and_retiring();
	/* The requested key is live: refused at the last step, after the inner keys. */
	EXPECT_EQ(nicmr_mr_regv(pd, iov.data(), 2, kAll, NICMR_MR_REQUESTED_KEY, want, &m),
		  -EEXIST);
	EXPECT_EQ(nicmr_mr_regv(pd, iov.data(), 2, kAll, NICMR_MR_REQUESTED_KEY, 1ull << 40, &m),
		  -EKEYREJECTED);
	auto after = stats(dev);
	EXPECT_EQ(after.mrs, before.mrs);
	EXPECT_EQ(after.slow_mappings, before.slow_mappings);
	EXPECT_EQ(after.pinned_pages, before.pinned_pages);
	EXPECT_EQ(after.iommu_mappings, before.iommu_mappings);
	if (umr()) {
		/* The command programmer keeps a free mkey at every index it once bound. */
		EXPECT_EQ(after.dev_mkeys, before.dev_mkeys);
	}
	EXPECT_EQ(free_and_retiring(), keys) << "inner keys wait for their grace period";
	EXPECT_EQ(pool->pieces.load(), pool_users);
	EXPECT_EQ(klm_live(), 0u);
	EXPECT_EQ(dev->table->slots_used(), 0u);
	/* A free requested key works. */
	ASSERT_EQ(nicmr_mr_dereg(holder), 0);
	const uint64_t other = (uint64_t{701} << 8) | 0x42;
	ASSERT_EQ(nicmr_mr_regv(pd, iov.data(), 2, kAll, NICMR_MR_REQUESTED_KEY, other, &m), 0);
	EXPECT_EQ(nicmr_mr_key(m), other);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_P(MrVec, IovaListOverPoolAndSlowMappings)
{
	Anon plain(2 * 4096);
	nicmr_mr *owner = nullptr, *m = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, plain.get(), plain.len(), kAll, 0, 0, &owner), 0);
	const nicmr::mem::SlowMap &sm = *owner->slow();
	std::vector<nicmr_iova_seg> segs = {{pool_iova(base + 40, 2000), 2000},
					    {sm.iova + (u(plain.get()) - sm.va) + 17, 5000},
					    {pool_iova(base + (200 << 10), 4096), 4096}};
	const uint64_t pool_users = pool->pieces.load();
	ASSERT_EQ(nicmr_mr_reg_iova(pd, segs.data(), segs.size(), kAll, 0, 0, &m), 0);
	EXPECT_EQ(nicmr_mr_addr(m), nullptr);
	EXPECT_EQ(nicmr_mr_len(m), 11096u);
	EXPECT_EQ(pool->pieces.load(), pool_users + 2);
	const uint32_t k = nicmr_mr_key(m);
	const uint64_t s = segs[0].iova;
	EXPECT_EQ(lookup(k, s), segs[0].iova);
	EXPECT_EQ(lookup(k, s + 2000), segs[1].iova);
	EXPECT_EQ(lookup(k, s + 7000 + 10), segs[2].iova + 10);
	write_then_read(k, s, 11096, 11);
	std::vector<iovec> at = {
		{base + 40, 2000}, {plain.get() + 17, 5000}, {base + (200 << 10), 4096}};
	expect_landed(at);
	/* The MR whose mapping it uses stays. */
	EXPECT_EQ(nicmr_mr_dereg(owner), -EBUSY);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
	EXPECT_EQ(pool->pieces.load(), pool_users);
	EXPECT_EQ(nicmr_mr_dereg(owner), 0);
}

TEST_P(MrVec, IovaListRefusesWhatTheDeviceWouldFaultOn)
{
	const uint64_t pi = pool_iova(base, 4096);
	const uint64_t pool_end = pi + nicmr_pool_len(pool);
	nicmr_mr *m = nullptr;
	/* A slow-path mapping that has gone is unknown again. */
	{
		Anon plain(4096);
		nicmr_mr *owner = nullptr;
		ASSERT_EQ(nicmr_mr_reg(pd, plain.get(), 4096, kAll, 0, 0, &owner), 0);
		const uint64_t gone = owner->slow()->iova;
		ASSERT_EQ(nicmr_mr_dereg(owner), 0);
		std::vector<nicmr_iova_seg> stale = {{gone, 4096}};
		EXPECT_EQ(nicmr_mr_reg_iova(pd, stale.data(), 1, kAll, 0, 0, &m), -EFAULT);
	}
	auto before = stats(dev);
	const uint64_t pool_users = pool->pieces.load();
	std::vector<nicmr_iova_seg> outside = {{pi, 4096}, {0x10, 4096}};
	std::vector<nicmr_iova_seg> past = {{pool_end - 4096, 8192}};
	std::vector<nicmr_iova_seg> empty = {{pi, 4096}, {pi + 8192, 0}};
	std::vector<nicmr_iova_seg> wraps = {{~uint64_t{0} - 100, 200}};
	std::vector<nicmr_iova_seg> many(NICMR_MAX_IOV + 1, nicmr_iova_seg{pi, 64});
	EXPECT_EQ(nicmr_mr_reg_iova(pd, outside.data(), 2, kAll, 0, 0, &m), -EFAULT);
	EXPECT_EQ(nicmr_mr_reg_iova(pd, past.data(), 1, kAll, 0, 0, &m), -EFAULT);
	EXPECT_EQ(nicmr_mr_reg_iova(pd, empty.data(), 2, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_iova(pd, wraps.data(), 1, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_iova(pd, many.data(), many.size(), kAll, 0, 0, &m), -E2BIG);
	EXPECT_EQ(nicmr_mr_reg_iova(pd, nullptr, 1, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_iova(pd, outside.data(), 0, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_iova(pd, outside.data(), 1, kAll, 1ull << 9, 0, &m), -EOPNOTSUPP);
	expect_same(before, stats(dev));
	EXPECT_EQ(pool->pieces.load(), pool_users);
}

TEST_P(MrVec, PageVectorOfScatteredPages)
{
	/* Pages 5, 6 (consecutive), 40, 9 of the pool: three runs. */
	std::vector<uint64_t> pages = {
		pool_iova(base + 5 * 4096, 4096), pool_iova(base + 6 * 4096, 4096),
		pool_iova(base + 40 * 4096, 4096), pool_iova(base + 9 * 4096, 4096)};
	nicmr_mr *m = nullptr;
	const size_t off = 100, len = 3 * 4096 + 50;
	ASSERT_EQ(
		nicmr_mr_reg_pages(pd, pages.data(), pages.size(), 4096, off, len, kAll, 0, 0, &m),
		0);
	EXPECT_EQ(nicmr_mr_layout(m), 1) << "page-aligned joints: one MTT mkey";
	const uint32_t k = nicmr_mr_key(m);
	const uint64_t s = pages[0] + off;
	EXPECT_EQ(lookup(k, s), pages[0] + off);
	EXPECT_EQ(lookup(k, s + 4096), pages[1] + off);
	EXPECT_EQ(lookup(k, s + 2 * 4096 - off), pages[2]);
	EXPECT_EQ(lookup(k, s + len - 1), pages[3] + 149);
	write_then_read(k, s, len, 13);
	std::vector<iovec> at = {{base + 5 * 4096 + off, 2 * 4096 - off},
				 {base + 40 * 4096, 4096},
				 {base + 9 * 4096, 150}};
	expect_landed(at);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);

	/* Zero-based with an offset: offset 0 is not on a page boundary, hence KLM. */
	ASSERT_EQ(nicmr_mr_reg_pages(pd, pages.data(), pages.size(), 4096, off, len, kAll,
				     NICMR_MR_ZERO_BASED, 0, &m),
		  0);
	EXPECT_EQ(nicmr_mr_layout(m), 2);
	write_then_read(nicmr_mr_key(m), 0, len, 17);
	expect_landed(at);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_P(MrVec, PageVectorRefusesBadArgumentsWithTheirCodes)
{
	const uint64_t p0 = pool_iova(base, 4096);
	std::vector<uint64_t> pages = {p0, p0 + 8192};
	std::vector<uint64_t> misaligned = {p0, p0 + 8192 + 512};
	std::vector<uint64_t> outside = {p0, 0x1000};
	std::vector<uint64_t> scattered;
	for (int i = 0; i <= int(NICMR_MAX_IOV); i++)
		scattered.push_back(p0 + uint64_t(2 * i) * 4096);
	auto before = stats(dev);
	const uint64_t pool_users = pool->pieces.load();
	nicmr_mr *m = nullptr;
	EXPECT_EQ(nicmr_mr_reg_pages(pd, nullptr, 2, 4096, 0, 8192, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 0, 4096, 0, 8192, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 2, 3000, 0, 5000, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 2, 2048, 0, 3000, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 2, size_t{1} << 31, 0, 8192, kAll, 0, 0, &m),
		  -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 2, 4096, 4096, 100, kAll, 0, 0, &m),
		  -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 2, 4096, 0, 0, kAll, 0, 0, &m), -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 2, 4096, 0, 4096, kAll, 0, 0, &m), -EINVAL)
		<< "the second page is not used";
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 2, 4096, 1, 8192, kAll, 0, 0, &m), -EINVAL)
		<< "past the last page";
	EXPECT_EQ(nicmr_mr_reg_pages(pd, misaligned.data(), 2, 4096, 0, 8192, kAll, 0, 0, &m),
		  -EINVAL);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, outside.data(), 2, 4096, 0, 8192, kAll, 0, 0, &m),
		  -EFAULT);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, scattered.data(), scattered.size(), 4096, 0,
				     scattered.size() * 4096, kAll, 0, 0, &m),
		  -E2BIG);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 2, 4096, 0, 8192, kAll, 1ull << 9, 0, &m),
		  -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mr_reg_pages(pd, pages.data(), 2, 4096, 0, 8192, 1ull << 40, 0, 0, &m),
		  -EINVAL);
	expect_same(before, stats(dev));
	EXPECT_EQ(pool->pieces.load(), pool_users);
}

TEST_P(MrVec, RawKeyOfAVectoredRegionNamesIt)
{
	std::vector<iovec> iov = {{base + 100, 1000}, {base + (64 << 10) + 7, 3000}};
	nicmr_mr *m = nullptr;
	ASSERT_EQ(nicmr_mr_regv(pd, iov.data(), 2, kAll, 0, 0, &m), 0);
	uint8_t raw[NICMR_RAW_KEY_SIZE];
	size_t size = sizeof(raw);
	ASSERT_EQ(nicmr_mr_raw_attr(m, raw, &size), 0);
	uint64_t key = 0;
	ASSERT_EQ(nicmr_mr_map_raw(dev, raw, size, &key), 0);
	EXPECT_EQ(key, nicmr_mr_key(m));
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
}

TEST_P(MrVec, CppHandlesDeregisterWhenTheyGo)
{
	std::vector<iovec> iov = {{base + 100, 1000}, {base + (64 << 10) + 7, 3000}};
	const uint64_t mrs = stats(dev).mrs;
	{
		MrPtr v, l, p;
		ASSERT_EQ(reg_mr_vec(pd, iov.data(), iov.size(), kAll, &v), 0);
		const nicmr_iova_seg seg{pool_iova(base, 4096), 4096};
		ASSERT_EQ(reg_mr_iova(pd, &seg, 1, kAll, &l), 0);
		const uint64_t page = seg.iova;
		ASSERT_EQ(reg_mr_pages(pd, &page, 1, 4096, 0, 4096, kAll, &p), 0);
		EXPECT_EQ(stats(dev).mrs, mrs + 3);
		MrPtr bad;
		EXPECT_EQ(reg_mr_vec(pd, iov.data(), 0, kAll, &bad), -EINVAL);
		EXPECT_EQ(bad, nullptr);
	}
	EXPECT_EQ(stats(dev).mrs, mrs);
}

} // namespace
} // namespace nicmr::test
