/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device model's data path end to end, as a driver sees it: QPs and CQs made by raw
 * commands, WQEs in the SQ, UAR doorbells, CQEs and EQEs polled by owner bit. Data checked
 * byte for byte, canaries around every target, exact syndromes.
 */
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "test_emu_dp_harness.h"

namespace nicmr::emu::test {
namespace {

constexpr Perm kAll{true, true, true, true, true};

/* Fills [off, off + n) with a pattern seeded by seed. */
void fill(DpBed &b, size_t off, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		b.at(off)[i] = static_cast<uint8_t>(seed + i * 7);
}

bool all_are(DpBed &b, size_t off, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (b.at(off)[i] != v)
			return false;
	return true;
}

class EmuDp : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_TRUE(b.ok());
		b.pair();
		ASSERT_FALSE(HasFatalFailure());
		src = kDataOff;
		dst = kDataOff + 0x100000;
		/* Canaries everywhere the target lies. */
		std::memset(b.at(dst - 4096), 0xcc, 0x100000 + 8192);
	}
	DpBed b;
	size_t src = 0, dst = 0;
};

TEST_F(EmuDp, RdmaWriteMovesTheBytesAndCompletes)
{
	fill(b, src, 20000, 3);
	const uint32_t l = b.mr(src, 20000, {true, false, false, false, false});
	const uint32_t r = b.mr(dst, 20000, {false, false, false, true, false});
	ASSERT_NE(l, 0u);
	ASSERT_NE(r, 0u);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 100), r)
			     .data(5000, l, DpBed::iova(src))
			     .data(7000, l, DpBed::iova(src + 5000))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(cqe_counter(*c), 0u);
	EXPECT_EQ(cqe_qpn(*c), b.qa.qpn);
	EXPECT_EQ(cqe_bytes(*c), 12000u);
	EXPECT_EQ(std::memcmp(b.at(dst + 100), b.at(src), 12000), 0);
	EXPECT_TRUE(all_are(b, dst - 4096, 4096 + 100, 0xcc));
	EXPECT_TRUE(all_are(b, dst + 100 + 12000, 4096, 0xcc));
	EXPECT_FALSE(b.poll(b.cqa));
	EXPECT_FALSE(b.poll(b.cqb)) << "the responder's CQ gets nothing for an RDMA WRITE";
}

TEST_F(EmuDp, InlineWriteAndReadBack)
{
	const uint32_t r = b.mr(dst, 4096, {true, true, true, true, false});
	const uint32_t l = b.mr(src, 4096, kAll);
	const char msg[] = "inline bytes from the WQE itself, forty-odd";
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 8), r)
			     .inline_data(msg, sizeof(msg))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(cqe_bytes(*c), sizeof(msg));
	EXPECT_EQ(std::memcmp(b.at(dst + 8), msg, sizeof(msg)), 0);
	EXPECT_EQ(b.at(dst + 7)[0], 0xcc);
	EXPECT_EQ(b.at(dst + 8 + sizeof(msg))[0], 0xcc);

	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_READ, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 8), r)
			     .data(sizeof(msg), l, DpBed::iova(src + 64))
			     .done());
	c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(cqe_counter(*c), 2u) << "the inline WQE took two WQEBBs";
	EXPECT_EQ(std::memcmp(b.at(src + 64), msg, sizeof(msg)), 0);
}

TEST_F(EmuDp, WqesWrapAroundTheSqEnd)
{
	const uint32_t l = b.mr(src, 65536, kAll);
	const uint32_t r = b.mr(dst, 65536, kAll);
	fill(b, src, 65536, 9);
	/* 64 WQEBBs; two-WQEBB WQEs (4 data segs = ds 6) cross the end at slot 63. */
	for (int i = 0; i < 100; i++) {
		Wqe w(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn);
		w.raddr(DpBed::iova(dst + i * 64), r);
		for (int s = 0; s < 4; s++)
			w.data(16, l, DpBed::iova(src + i * 64 + s * 16));
		if (i == 0)
			b.post(b.qa, Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done()); /* odd offset */
		b.post(b.qa, w.done());
		while (b.poll(b.cqa))
			;
	}
	EXPECT_EQ(std::memcmp(b.at(dst), b.at(src), 6400), 0);
	EXPECT_EQ(b.dp().stats().cqe_errors, 0u);
}

TEST_F(EmuDp, UnsignaledWqesGiveNoCqe)
{
	const uint32_t l = b.mr(src, 4096, kAll);
	const uint32_t r = b.mr(dst, 4096, kAll);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn, 0, 0)
			     .raddr(DpBed::iova(dst), r)
			     .data(8, l, DpBed::iova(src))
			     .done());
	EXPECT_FALSE(b.poll(b.cqa));
	b.post(b.qa, Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_counter(*c), 1u);
}

TEST_F(EmuDp, RemoteAccessErrorLeavesTargetAndRaisesEvent)
{
	const uint32_t l = b.mr(src, 8192, kAll);
	const uint32_t ro = b.mr(dst, 4096, {true, false, true, false, false}); /* no rw */
	fill(b, src, 8192, 1);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(dst), ro)
			     .data(64, l, DpBed::iova(src))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ_ERR);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_EQ(cqe_counter(*c), 0u);
	EXPECT_TRUE(all_are(b, dst - 4096, 8192 + 4096, 0xcc));
	QpState s;
	ASSERT_EQ(b.dp().qp_state(b.qa.qpn, &s), 0);
	EXPECT_EQ(s, QpState::err);
	ASSERT_EQ(b.dp().qp_state(b.qb.qpn, &s), 0);
	EXPECT_EQ(s, QpState::err);
	auto e = b.poll_eq();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->first, prm::event_type::wq_access_error);
	EXPECT_EQ(e->second, b.qb.qpn);

	/* Everything later is flushed, signalled or not. */
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn, 0, 0)
			     .raddr(DpBed::iova(dst), ro)
			     .data(64, l, DpBed::iova(src))
			     .done());
	b.post(b.qa, Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done());
	for (uint16_t i = 1; i <= 2; i++) {
		c = b.poll(b.cqa);
		ASSERT_TRUE(c);
		EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ_ERR);
		EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
		EXPECT_EQ(cqe_counter(*c), i);
	}
	EXPECT_TRUE(all_are(b, dst - 4096, 8192 + 4096, 0xcc));
}

TEST_F(EmuDp, RemoteBoundsAreCheckedForTheWholeMessage)
{
	const uint32_t l = b.mr(src, 8192, kAll);
	const uint32_t r = b.mr(dst, 4096, kAll);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 4000), r)
			     .data(50, l, DpBed::iova(src))
			     .data(50, l, DpBed::iova(src + 50))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_TRUE(all_are(b, dst, 8192, 0xcc)) << "not even the part that fits";
}

TEST_F(EmuDp, LocalKeyErrorsHaveTheirSyndromes)
{
	const uint32_t r = b.mr(dst, 4096, kAll);
	const uint32_t ro = b.mr(src, 4096, {true, false, false, false, false});
	/* A bad lkey on a gather. */
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(dst), r)
			     .data(8, ro ^ 0x1, DpBed::iova(src))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	EXPECT_TRUE(all_are(b, dst, 4096, 0xcc));
	QpState s;
	ASSERT_EQ(b.dp().qp_state(b.qb.qpn, &s), 0);
	EXPECT_EQ(s, QpState::rts) << "a local error leaves the responder alone";
	EXPECT_FALSE(b.poll_eq());
}

TEST_F(EmuDp, ReadIntoReadOnlyMrIsLocalAccessError)
{
	DpBed c2;
	ASSERT_TRUE(c2.ok());
	c2.pair();
	const uint32_t r = c2.mr(dst, 4096, kAll);
	const uint32_t ro = c2.mr(src, 4096, {true, false, false, false, false});
	std::memset(c2.at(src), 0xab, 4096);
	c2.post(c2.qa, Wqe(MLX5_OPCODE_RDMA_READ, c2.qa.qpn)
			       .raddr(DpBed::iova(dst), r)
			       .data(8, ro, DpBed::iova(src))
			       .done());
	auto c = c2.poll(c2.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
	EXPECT_TRUE(all_are(c2, src, 4096, 0xab));
}

TEST(EmuDpConnect, ResponderWithoutRemoteWriteEnableIsInvalidRequest)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.pair(kAll, {true, true, true, false, true}); /* qb: no rwe */
	const uint32_t l = b.mr(kDataOff, 4096, kAll);
	const uint32_t r = b.mr(kDataOff + 8192, 4096, kAll);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(kDataOff + 8192), r)
			     .data(8, l, DpBed::iova(kDataOff))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	auto e = b.poll_eq();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->first, prm::event_type::wq_inval_req_error);
	EXPECT_EQ(e->second, b.qb.qpn);
}

TEST(EmuDpConnect, UnconnectedRequesterRetriesOut)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.uar = b.alloc_uar();
	ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&b.qb, 1, &b.cqa, b.uar).status(), prm::status::ok);
	/* qa names qb, qb names nobody: no connection. */
	b.connect(b.qa, 1, b.qb.qpn);
	b.connect(b.qb, 2, 0);
	const uint32_t l = b.mr(kDataOff, 4096, kAll);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_READ, b.qa.qpn)
			     .raddr(DpBed::iova(kDataOff), l)
			     .data(8, l, DpBed::iova(kDataOff))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
}

TEST(EmuDpConnect, QpLoopedBackToItselfIsItsOwnResponder)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.uar = b.alloc_uar();
	ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
	b.connect(b.qa, 1, b.qa.qpn);
	const uint32_t k = b.mr(kDataOff, 8192, kAll);
	std::memset(b.at(kDataOff), 0x5e, 64);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(kDataOff + 4096), k)
			     .data(64, k, DpBed::iova(kDataOff))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(std::memcmp(b.at(kDataOff + 4096), b.at(kDataOff), 64), 0);
}

TEST_F(EmuDp, MalformedWqesCompleteWithQpOpError)
{
	b.post(b.qa, Wqe(0x3f, b.qa.qpn).done()); /* not an opcode of the subset */
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);

	DpBed c2;
	ASSERT_TRUE(c2.ok());
	c2.pair();
	c2.post(c2.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, c2.qa.qpn).done(0)); /* ds 0 */
	c = c2.poll(c2.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);

	DpBed c3;
	ASSERT_TRUE(c3.ok());
	c3.pair();
	/* An inline length beyond the WQE. */
	const uint32_t bc = htobe32(1000 | MLX5_INLINE_SEG);
	c3.post(c3.qa,
		Wqe(MLX5_OPCODE_RDMA_WRITE, c3.qa.qpn).raddr(0, 0).raw(&bc, 4).pad64().done());
	c = c3.poll(c3.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
}

TEST_F(EmuDp, WqesWaitUntilRts)
{
	DpBed c2;
	ASSERT_TRUE(c2.ok());
	c2.uar = c2.alloc_uar();
	ASSERT_EQ(c2.create_cq(&c2.cqa, 0, 6).status(), prm::status::ok);
	ASSERT_EQ(c2.create_qp(&c2.qa, 0, &c2.cqa, c2.uar).status(), prm::status::ok);
	c2.post(c2.qa, Wqe(MLX5_OPCODE_NOP, c2.qa.qpn).done());
	EXPECT_FALSE(c2.poll(c2.cqa));
	c2.connect(c2.qa, 1, 0);
	c2.post(c2.qa, Wqe(MLX5_OPCODE_NOP, c2.qa.qpn).done());
	EXPECT_TRUE(c2.poll(c2.cqa));
	EXPECT_TRUE(c2.poll(c2.cqa));
}

TEST_F(EmuDp, FullCqDropsAndCounts)
{
	/* 64 CQEs fit; the 65th is dropped while the consumer index stays at 0. */
	for (int i = 0; i < 65; i++)
		b.post(b.qa, Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done());
	EXPECT_EQ(b.dp().stats().cq_overruns, 1u);
	int n = 0;
	while (b.poll(b.cqa))
		n++;
	EXPECT_EQ(n, 64);
}

TEST_F(EmuDp, OwnerBitFlipsOnEachPass)
{
	for (int i = 0; i < 200; i++) {
		b.post(b.qa, Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done());
		auto c = b.poll(b.cqa);
		ASSERT_TRUE(c) << i;
		EXPECT_EQ(cqe_counter(*c), static_cast<uint16_t>(i));
	}
}

/* ---- Atomics ---------------------------------------------------------------------------- */

uint64_t be64_at(DpBed &b, size_t off)
{
	uint64_t v;
	std::memcpy(&v, b.at(off), 8);
	return be64toh(v);
}
void set_be64(DpBed &b, size_t off, uint64_t v)
{
	v = htobe64(v);
	std::memcpy(b.at(off), &v, 8);
}

TEST_F(EmuDp, AtomicsUpdateBigEndianWordsAndReturnTheOldValue)
{
	/* The power-on mode (no SET_HCA_CAP of the atomic caps): big-endian, as on the wire. */
	ASSERT_FALSE(b.dp().atomic_host_endianness());
	const uint32_t l = b.mr(src, 4096, kAll);
	const uint32_t r = b.mr(dst, 4096, kAll);
	set_be64(b, dst + 64, 100);
	b.post(b.qa, Wqe(MLX5_OPCODE_ATOMIC_FA, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 64), r)
			     .atomic(5, 0)
			     .data(8, l, DpBed::iova(src))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(be64_at(b, dst + 64), 105u);
	EXPECT_EQ(be64_at(b, src), 100u);

	b.post(b.qa, Wqe(MLX5_OPCODE_ATOMIC_CS, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 64), r)
			     .atomic(7, 105)
			     .data(8, l, DpBed::iova(src + 8))
			     .done());
	ASSERT_TRUE(b.poll(b.cqa));
	EXPECT_EQ(be64_at(b, dst + 64), 7u);
	EXPECT_EQ(be64_at(b, src + 8), 105u);
	/* A failed compare changes nothing and still returns the value. */
	b.post(b.qa, Wqe(MLX5_OPCODE_ATOMIC_CS, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 64), r)
			     .atomic(9, 1)
			     .data(8, l, DpBed::iova(src + 16))
			     .done());
	ASSERT_TRUE(b.poll(b.cqa));
	EXPECT_EQ(be64_at(b, dst + 64), 7u);
	EXPECT_EQ(be64_at(b, src + 16), 7u);
}

TEST(EmuDpAtomicMode, HostEndiannessUpdatesHostOrderWordsAndReturnsTheOldValueSo)
{
	/* After SET_HCA_CAP atomic_req_8B_endianness_mode = 1 the word and the fetched value
	 * are in host byte order; the WQE's operands stay big-endian (Wqe::atomic). */
	DpBed b({}, int(prm::atomic_req_mode::host_endianness));
	ASSERT_TRUE(b.ok());
	b.pair();
	ASSERT_TRUE(b.dp().atomic_host_endianness());
	const size_t src = kDataOff, dst = kDataOff + 0x10000;
	const uint32_t l = b.mr(src, 4096, kAll);
	const uint32_t r = b.mr(dst, 4096, kAll);
	auto host_at = [&b](size_t off) {
		uint64_t v;
		std::memcpy(&v, b.at(off), 8);
		return v;
	};
	const uint64_t forty = 40;
	std::memcpy(b.at(dst + 64), &forty, 8);
	b.post(b.qa, Wqe(MLX5_OPCODE_ATOMIC_FA, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 64), r)
			     .atomic(2, 0)
			     .data(8, l, DpBed::iova(src))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(host_at(dst + 64), 42u);
	EXPECT_EQ(host_at(src), 40u);
	/* A miss leaves the word and returns it; a hit swaps. */
	b.post(b.qa, Wqe(MLX5_OPCODE_ATOMIC_CS, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 64), r)
			     .atomic(7, 40)
			     .data(8, l, DpBed::iova(src + 8))
			     .done());
	ASSERT_TRUE(b.poll(b.cqa));
	EXPECT_EQ(host_at(dst + 64), 42u);
	EXPECT_EQ(host_at(src + 8), 42u);
	b.post(b.qa, Wqe(MLX5_OPCODE_ATOMIC_CS, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 64), r)
			     .atomic(7, 42)
			     .data(8, l, DpBed::iova(src + 16))
			     .done());
	ASSERT_TRUE(b.poll(b.cqa));
	EXPECT_EQ(host_at(dst + 64), 7u);
	EXPECT_EQ(host_at(src + 16), 42u);
}

TEST_F(EmuDp, MisalignedAtomicIsInvalidRequest)
{
	const uint32_t l = b.mr(src, 4096, kAll);
	const uint32_t r = b.mr(dst, 4096, kAll);
	b.post(b.qa, Wqe(MLX5_OPCODE_ATOMIC_FA, b.qa.qpn)
			     .raddr(DpBed::iova(dst + 4), r)
			     .atomic(1, 0)
			     .data(8, l, DpBed::iova(src))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	EXPECT_TRUE(all_are(b, dst, 64, 0xcc));
}

TEST_F(EmuDp, AtomicWithoutRemoteAtomicRightIsRemoteAccessError)
{
	const uint32_t l = b.mr(src, 4096, kAll);
	const uint32_t r = b.mr(dst, 4096, {true, true, true, true, false});
	b.post(b.qa, Wqe(MLX5_OPCODE_ATOMIC_FA, b.qa.qpn)
			     .raddr(DpBed::iova(dst), r)
			     .atomic(1, 0)
			     .data(8, l, DpBed::iova(src))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
}

/* ---- UMR and LOCAL_INVAL --------------------------------------------------------------- */

/*
 * A UMR WQE as the kernel builds one (umr.c): mkey context fields through the layout table, the
 * list padded to 64 bytes (klm_octowords a multiple of 4), INLINE exactly when no pointer
 * segment follows (inline_xlt), the pointer with the device's reserved lkey by default.
 */
std::vector<uint8_t> umr_wqe(uint32_t qpn, uint32_t key, uint8_t flags, uint64_t mask,
			     const std::function<void(uint8_t *)> &ctx,
			     const std::vector<uint64_t> &mtt, bool inline_xlt,
			     uint64_t xlt_iova = 0, uint32_t xlt_lkey = kDefaultResdLkey)
{
	Wqe w(MLX5_OPCODE_UMR, qpn, key);
	mlx5_wqe_umr_ctrl_seg u{};
	u.flags = static_cast<uint8_t>(flags | (inline_xlt ? prm::umr_flags::inline_xlt : 0));
	const size_t padded = prm::umr_xlt_padded(mtt.size() * 8);
	u.klm_octowords = htobe16(static_cast<uint16_t>(padded / 16));
	u.mkey_mask = htobe64(mask);
	w.raw(&u, sizeof(u));
	uint8_t c[64] = {};
	ctx(c);
	w.raw(c, sizeof(c));
	if (inline_xlt) {
		if (!mtt.empty()) {
			std::vector<uint8_t> t(padded, 0);
			for (size_t i = 0; i < mtt.size(); i++)
				prm::set(t.data() + 8 * i, prm::mtt::address, mtt[i]);
			w.raw(t.data(), t.size());
		}
	} else if (!mtt.empty()) {
		w.data(static_cast<uint32_t>(padded), xlt_lkey, xlt_iova);
	}
	return w.done();
}

class EmuDpUmr : public EmuDp {
protected:
	/* A free, UMR-enabled MTT mkey with room for 16 pages, as a registration cache makes. */
	uint32_t free_key()
	{
		MkeyOpts o;
		o.free = true;
		o.umr_en = true;
		o.acc = {false, false, false, false, false};
		o.capacity_octwords = 8;
		o.variant = 0x40;
		return b.mkey(o);
	}
	/* qpn 0: qa's; pd 0: the bed's PD (qa's). */
	std::vector<uint8_t> bind(uint32_t key, uint8_t check, size_t off, size_t len,
				  uint32_t variant, bool inl = true, uint64_t xlt_iova = 0,
				  uint32_t qpn = 0, uint32_t pd = 0)
	{
		std::vector<uint64_t> mtt;
		for (size_t p = 0; p < (len + 4095) / 4096; p++)
			mtt.push_back(DpBed::iova(off) + p * 4096);
		namespace mm = prm::umr_mkey_mask;
		const uint64_t mask = mm::len | mm::page_size | mm::start_addr | mm::pd | mm::key |
				      mm::qpn | mm::lr | mm::lw | mm::rr | mm::rw | mm::a |
				      mm::free;
		if (!inl) {
			for (size_t i = 0; i < mtt.size(); i++)
				prm::set(b.at(0x300000 + 8 * i), prm::mtt::address, mtt[i]);
		}
		return umr_wqe(
			qpn != 0 ? qpn : b.qa.qpn, key, prm::umr_flags::check_bits(check), mask,
			[&](uint8_t *c) {
				prm::set(c, prm::mkc::free, 0);
				prm::set(c, prm::mkc::lr, 1);
				prm::set(c, prm::mkc::lw, 1);
				prm::set(c, prm::mkc::rr, 1);
				prm::set(c, prm::mkc::rw, 1);
				prm::set(c, prm::mkc::a, 1);
				prm::set(c, prm::mkc::qpn, prm::mkc::qpn_any);
				prm::set(c, prm::mkc::mkey_7_0, variant);
				prm::set(c, prm::mkc::pd, pd != 0 ? pd : b.pd);
				prm::set(c, prm::mkc::start_addr, DpBed::iova(off));
				prm::set(c, prm::mkc::len, len);
				prm::set(c, prm::mkc::log_page_size, 12);
			},
			mtt, inl, xlt_iova);
	}
	uint8_t write(uint32_t rkey, size_t to, size_t n)
	{
		b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
				     .raddr(DpBed::iova(to), rkey)
				     .data(static_cast<uint32_t>(n), lkey, DpBed::iova(src))
				     .done());
		auto c = b.poll(b.cqa);
		EXPECT_TRUE(c);
		return c && cqe_opcode(*c) == MLX5_CQE_REQ_ERR ? cqe_syndrome(*c) : 0;
	}
	void SetUp() override
	{
		EmuDp::SetUp();
		lkey = b.mr(src, 65536, kAll);
		fill(b, src, 65536, 5);
	}
	uint32_t lkey = 0;
};

TEST_F(EmuDpUmr, InlineBindMakesAWorkingKeyWithANewVariant)
{
	const uint32_t k = free_key();
	ASSERT_NE(k, 0u);
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 8192, 0x41));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	const uint32_t nk = (k & ~0xffu) | 0x41;
	EXPECT_EQ(write(nk, dst + 4000, 200), 0);
	EXPECT_EQ(std::memcmp(b.at(dst + 4000), b.at(src), 200), 0);
}

TEST_F(EmuDpUmr, PointerBindReadsTheListThroughTheReservedLkey)
{
	const uint32_t k = free_key();
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 3 * 4096, 0x42, false,
			  DpBed::iova(0x300000)));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(write((k & ~0xffu) | 0x42, dst + 4096, 8192), 0);
	EXPECT_EQ(std::memcmp(b.at(dst + 4096), b.at(src), 8192), 0);
}

TEST_F(EmuDpUmr, FailedCheckLeavesTheKeyUnchanged)
{
	const uint32_t k = free_key();
	/* "fail if free" on a free key. */
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_free, dst, 4096, 0x43));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	int rc = b.dev().mkeys().with(prm::mkey::index(k), [&](const MkeyEntry &e) {
		EXPECT_EQ(prm::get(e.mkc.data(), prm::mkc::free), 1u);
		EXPECT_EQ(prm::get(e.mkc.data(), prm::mkc::mkey_7_0), 0x40u);
		EXPECT_EQ(prm::get(e.mkc.data(), prm::mkc::len), 0u);
	});
	EXPECT_EQ(rc, 0);
}

TEST_F(EmuDpUmr, BindOfALiveKeyFailsWithCheckFree)
{
	const uint32_t k = free_key();
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 4096, 0x44));
	ASSERT_TRUE(b.poll(b.cqa));
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 4096, 0x45));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

TEST_F(EmuDpUmr, RevokeAndLocalInvalidateMakeTheKeyFree)
{
	const uint32_t k = free_key();
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 4096, 0x46));
	ASSERT_TRUE(b.poll(b.cqa));
	const uint32_t nk = (k & ~0xffu) | 0x46;
	/* Revoke: free = 1 through the mask, must be live. */
	b.post(b.qa,
	       umr_wqe(
		       b.qa.qpn, nk, prm::umr_flags::check_bits(prm::umr_flags::check_fail_if_free),
		       prm::umr_mkey_mask::free, [](uint8_t *c) { prm::set(c, prm::mkc::free, 1); },
		       {}, true));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(write(nk, dst, 8), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_TRUE(all_are(b, dst, 4096, 0xcc));

	DpBed c2;
	ASSERT_TRUE(c2.ok());
	c2.pair();
	const uint32_t r = c2.mr(dst, 4096, kAll);
	const uint32_t l = c2.mr(src, 4096, kAll);
	c2.post(c2.qa, Wqe(MLX5_OPCODE_LOCAL_INVAL, c2.qa.qpn, r).done());
	c = c2.poll(c2.cqa);
	ASSERT_TRUE(c);
	ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	c2.post(c2.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, c2.qa.qpn)
			       .raddr(DpBed::iova(dst), r)
			       .data(8, l, DpBed::iova(src))
			       .done());
	c = c2.poll(c2.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
}

TEST_F(EmuDpUmr, KeyWithoutUmrEnableIsRefused)
{
	MkeyOpts o;
	o.free = true;
	o.umr_en = false;
	o.capacity_octwords = 8;
	const uint32_t k = b.mkey(o);
	b.post(b.qa, bind(k, 0, dst, 4096, 0x47));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

TEST_F(EmuDpUmr, TranslationsBeyondTheKeysCapacityAreLengthError)
{
	const uint32_t k = free_key(); /* 16 pages */
	b.post(b.qa, bind(k, 0, dst, 17 * 4096, 0x48));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
}

TEST_F(EmuDpUmr, PointerWithAnOrdinaryLkeyIsRefused)
{
	const uint32_t k = free_key();
	auto w = umr_wqe(
		b.qa.qpn, k, 0, prm::umr_mkey_mask::len,
		[](uint8_t *c) { prm::set(c, prm::mkc::len, 8); }, {DpBed::iova(dst)}, false,
		DpBed::iova(0x300000), lkey);
	b.post(b.qa, w);
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

TEST_F(EmuDpUmr, TranslationOffsetRewritesOnlyTheEntriesAtIt)
{
	const uint32_t k = free_key();
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 4 * 4096, 0x49));
	ASSERT_TRUE(b.poll(b.cqa));
	const uint32_t nk = (k & ~0xffu) | 0x49;
	/* Entries 2 and 3 (octword 1) now point at the source pages 0 and 1. */
	Wqe w(MLX5_OPCODE_UMR, b.qa.qpn, nk);
	mlx5_wqe_umr_ctrl_seg u{};
	u.flags = prm::umr_flags::inline_xlt | prm::umr_flags::translation_offset_en;
	u.klm_octowords = htobe16(4); /* one 64-byte unit: entries 2..9, 4..9 zero */
	u.translation_offset = htobe16(1);
	w.raw(&u, sizeof(u));
	uint8_t ctx[64] = {};
	w.raw(ctx, sizeof(ctx));
	uint8_t t[64] = {};
	prm::set(t, prm::mtt::address, DpBed::iova(src));
	prm::set(t + 8, prm::mtt::address, DpBed::iova(src + 4096));
	w.raw(t, sizeof(t));
	b.post(b.qa, w.done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	/* Reading the key's third page now reads the source's first. */
	const uint32_t scratch = b.mr(dst + 0x80000, 4096, kAll);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_READ, b.qa.qpn)
			     .raddr(DpBed::iova(dst) + 2 * 4096, nk)
			     .data(64, scratch, DpBed::iova(dst + 0x80000))
			     .done());
	c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(std::memcmp(b.at(dst + 0x80000), b.at(src), 64), 0);
}

/* ---- UMR as the kernel posts it: each refusal with its syndrome --------------------------- */

/* After an error completion: 2RST and back to RTS, connected to remote. */
void recover(DpBed &b, TestQp &q, uint32_t remote)
{
	ASSERT_EQ(b.modify(prm::opcode::qp_2rst, q.qpn).status(), prm::status::ok);
	q.pi = 0;
	b.store_dbr(q.dbr_off + 4, prm::dbr::sq_counter, 0);
	b.connect(q, 1, remote);
}

/* The key's free bit and variant in the model's table. */
std::pair<uint64_t, uint64_t> free_and_variant(DpBed &b, uint32_t key)
{
	std::pair<uint64_t, uint64_t> r{~uint64_t{0}, ~uint64_t{0}};
	b.dev().mkeys().with(prm::mkey::index(key), [&](const MkeyEntry &e) {
		r = {prm::get(e.mkc.data(), prm::mkc::free),
		     prm::get(e.mkc.data(), prm::mkc::mkey_7_0)};
	});
	return r;
}

/* qpc.fre (Linux qp.c sets it on every QP of its own): without it a UMR is refused. */
TEST_F(EmuDpUmr, UmrOnAQpWithoutFreIsLocalQpOpError)
{
	const uint32_t k = free_key();
	b.qp_fre = false;
	TestCq cq;
	TestQp q;
	ASSERT_EQ(b.create_cq(&cq, 2, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&q, 2, &cq, b.uar).status(), prm::status::ok);
	b.connect(q, 1, q.qpn);
	b.post(q, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 4096, 0x50, true, 0, q.qpn));
	auto c = b.poll(cq);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ_ERR);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	EXPECT_EQ(free_and_variant(b, k), std::make_pair(uint64_t{1}, uint64_t{0x40}));
	/* The same WQE on a QP with fre (qa) binds. */
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 4096, 0x50));
	c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
}

/* qpc.rlky: the reserved lkey in a translation pointer needs it. */
TEST_F(EmuDpUmr, PointerOnAQpWithoutRlkyIsLocalProtError)
{
	const uint32_t k = free_key();
	b.qp_rlky = false;
	TestCq cq;
	TestQp q;
	ASSERT_EQ(b.create_cq(&cq, 2, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&q, 2, &cq, b.uar).status(), prm::status::ok);
	b.connect(q, 1, q.qpn);
	b.post(q, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 3 * 4096, 0x51, false,
		       DpBed::iova(0x300000), q.qpn));
	auto c = b.poll(cq);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	EXPECT_EQ(free_and_variant(b, k).first, 1u);
	/* Inline translations need no reserved lkey: the same QP binds them. */
	recover(b, q, q.qpn);
	b.post(q, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 3 * 4096, 0x51, true, 0,
		       q.qpn));
	c = b.poll(cq);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
}

/* The reserved lkey is the device's (QUERY_SPECIAL_CONTEXTS), not 0x100: rdma-core's
 * MLX5_INVALID_LKEY, which a driver with a constant would send. */
TEST_F(EmuDpUmr, PointerWithTheConstant0x100IsLocalProtError)
{
	ASSERT_NE(kDefaultResdLkey, 0x100u);
	const uint32_t k = free_key();
	std::vector<uint64_t> mtt{DpBed::iova(dst)};
	prm::set(b.at(0x300000), prm::mtt::address, mtt[0]);
	b.post(b.qa, umr_wqe(
			     b.qa.qpn, k, 0, prm::umr_mkey_mask::len,
			     [](uint8_t *c) { prm::set(c, prm::mkc::len, 8); }, mtt, false,
			     DpBed::iova(0x300000), 0x100));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

/* klm_octowords in 64-byte units (umr.c, mlx5r_umr_get_xlt_octo): 2 octwords (3 MTT entries
 * counted exactly, as nicmr once sent them) are refused, inline or by pointer. */
TEST_F(EmuDpUmr, OctowordCountNotAMultipleOfFourIsLocalQpOpError)
{
	for (bool inl : {true, false}) {
		SCOPED_TRACE(inl ? "inline" : "pointer");
		const uint32_t k = free_key();
		Wqe w(MLX5_OPCODE_UMR, b.qa.qpn, k);
		mlx5_wqe_umr_ctrl_seg u{};
		u.flags = static_cast<uint8_t>(
			(inl ? prm::umr_flags::inline_xlt : 0) |
			prm::umr_flags::check_bits(prm::umr_flags::check_fail_if_not_free));
		u.klm_octowords = htobe16(2);
		u.mkey_mask = htobe64(prm::umr_mkey_mask::len | prm::umr_mkey_mask::free);
		w.raw(&u, sizeof(u));
		uint8_t ctx[64] = {};
		prm::set(ctx, prm::mkc::len, 3 * 4096);
		w.raw(ctx, sizeof(ctx));
		uint8_t t[64] = {};
		for (int i = 0; i < 3; i++)
			prm::set(t + 8 * i, prm::mtt::address, DpBed::iova(dst) + i * 4096u);
		if (inl) {
			w.raw(t, sizeof(t));
		} else {
			std::memcpy(b.at(0x300000), t, sizeof(t));
			w.data(32, kDefaultResdLkey, DpBed::iova(0x300000));
		}
		b.post(b.qa, w.done());
		auto c = b.poll(b.cqa);
		ASSERT_TRUE(c);
		EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
		EXPECT_EQ(free_and_variant(b, k).first, 1u);
		recover(b, b.qa, b.qb.qpn);
	}
}

/* A revoke without INLINE promises a pointer segment it does not carry (umr.c sets INLINE
 * whenever no pointer follows, mlx5r_umr_revoke_mr included): refused, the key stays live. */
TEST_F(EmuDpUmr, RevokeWithoutInlineIsLocalQpOpError)
{
	const uint32_t k = free_key();
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 4096, 0x52));
	ASSERT_TRUE(b.poll(b.cqa));
	const uint32_t nk = (k & ~0xffu) | 0x52;
	b.post(b.qa,
	       umr_wqe(
		       b.qa.qpn, nk, prm::umr_flags::check_bits(prm::umr_flags::check_fail_if_free),
		       prm::umr_mkey_mask::free, [](uint8_t *c) { prm::set(c, prm::mkc::free, 1); },
		       {}, false));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	EXPECT_EQ(free_and_variant(b, nk), std::make_pair(uint64_t{0}, uint64_t{0x52}));
}

/* A free key is enabled only from its own PD: the kernel's revoke (mlx5r_umr_revoke_mr) puts
 * it back in the UMR QP's PD; a revoke that leaves the user's PD makes the next bind fail. */
TEST_F(EmuDpUmr, AFreeKeyIsEnabledOnlyFromItsOwnPd)
{
	const uint32_t user_pd = b.h().alloc_pd();
	ASSERT_NE(user_pd, 0u);
	const auto revoke = [&](uint32_t key, uint64_t mask) {
		return umr_wqe(
			b.qa.qpn, key,
			prm::umr_flags::check_bits(prm::umr_flags::check_fail_if_free), mask,
			[&](uint8_t *c) {
				prm::set(c, prm::mkc::free, 1);
				prm::set(c, prm::mkc::pd, b.pd);
				prm::set(c, prm::mkc::qpn, prm::mkc::qpn_any);
			},
			{}, true);
	};
	for (bool kernel_revoke : {true, false}) {
		SCOPED_TRACE(kernel_revoke ? "revoke PD | FREE" : "revoke FREE only");
		const uint32_t k = free_key();
		b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 4096, 0x53, true,
				  0, 0, user_pd));
		auto c = b.poll(b.cqa);
		ASSERT_TRUE(c);
		ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
		const uint32_t nk = (k & ~0xffu) | 0x53;
		b.post(b.qa,
		       revoke(nk, kernel_revoke ? prm::umr_mkey_mask::pd | prm::umr_mkey_mask::free
						: prm::umr_mkey_mask::free));
		c = b.poll(b.cqa);
		ASSERT_TRUE(c);
		ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
		b.post(b.qa, bind(nk, prm::umr_flags::check_fail_if_not_free, dst, 4096, 0x54, true,
				  0, 0, user_pd));
		c = b.poll(b.cqa);
		ASSERT_TRUE(c);
		if (kernel_revoke) {
			EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
		} else {
			EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
			EXPECT_EQ(free_and_variant(b, k).first, 1u);
		}
	}
}

/* The last 64-byte unit may run past a key sized in octwords, as the kernel's cache keys are
 * (4 MTT entries, 2 octwords, written 4 octwords at a time); beyond that unit it is a length
 * error. */
TEST_F(EmuDpUmr, TheLast64ByteUnitMayRunPastTheKeysOctwords)
{
	MkeyOpts o;
	o.free = true;
	o.umr_en = true;
	o.acc = {false, false, false, false, false};
	o.capacity_octwords = 2;
	o.variant = 0x40;
	const uint32_t k = b.mkey(o);
	ASSERT_NE(k, 0u);
	b.post(b.qa, bind(k, prm::umr_flags::check_fail_if_not_free, dst, 4 * 4096, 0x55));
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	const uint32_t nk = (k & ~0xffu) | 0x55;
	EXPECT_EQ(write(nk, dst + 3 * 4096, 100), 0);
	const uint32_t k2 = b.mkey(o);
	b.post(b.qa, bind(k2, prm::umr_flags::check_fail_if_not_free, dst, 9 * 4096, 0x56));
	c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
}

/* umr_modify_entity_size_disabled / umr_modify_atomic_disabled: a mask with PAGE_SIZE or A is
 * refused (the bits Linux umr.c's umr_check_mkey_mask keeps out); without them it binds. */
TEST(EmuDpUmrCaps, ForbiddenMaskBitsAreLocalQpOpError)
{
	for (int which = 0; which < 2; which++) {
		SCOPED_TRACE(which == 0 ? "entity size" : "atomic");
		EmuConfig cfg;
		cfg.umr_modify_entity_size_disabled = which == 0;
		cfg.umr_modify_atomic_disabled = which == 1;
		DpBed b(cfg);
		ASSERT_TRUE(b.ok());
		b.pair();
		namespace mm = prm::umr_mkey_mask;
		const uint64_t forbidden = which == 0 ? mm::page_size : mm::a;
		MkeyOpts o;
		o.free = true;
		o.umr_en = true;
		o.acc = {};
		o.capacity_octwords = 8;
		for (uint64_t extra : {forbidden, uint64_t{0}}) {
			const uint32_t k = b.mkey(o);
			ASSERT_NE(k, 0u);
			b.post(b.qa, umr_wqe(
					     b.qa.qpn, k,
					     prm::umr_flags::check_bits(
						     prm::umr_flags::check_fail_if_not_free),
					     mm::len | mm::start_addr | mm::pd | mm::lr | mm::free |
						     extra,
					     [&](uint8_t *c) {
						     prm::set(c, prm::mkc::lr, 1);
						     prm::set(c, prm::mkc::a, 1);
						     prm::set(c, prm::mkc::pd, b.pd);
						     prm::set(c, prm::mkc::len, 4096);
						     prm::set(c, prm::mkc::log_page_size, 12);
					     },
					     {DpBed::iova(kDataOff)}, true));
			auto c = b.poll(b.cqa);
			ASSERT_TRUE(c);
			if (extra != 0) {
				EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
				recover(b, b.qa, b.qb.qpn);
			} else {
				EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
			}
		}
	}
}

TEST_F(EmuDp, WriteThroughAnIndirectKey)
{
	const uint32_t l = b.mr(src, 8192, kAll);
	const uint32_t p1 = b.mr(dst, 4096, kAll);
	const uint32_t p2 = b.mr(dst + 0x10000, 4096, kAll);
	fill(b, src, 8192, 77);
	std::vector<uint8_t> klm(32);
	prm::set(klm.data(), prm::klm::byte_count, 100);
	prm::set(klm.data(), prm::klm::mkey, p1);
	prm::set(klm.data(), prm::klm::address, DpBed::iova(dst + 50));
	prm::set(klm.data() + 16, prm::klm::byte_count, 200);
	prm::set(klm.data() + 16, prm::klm::mkey, p2);
	prm::set(klm.data() + 16, prm::klm::address, DpBed::iova(dst + 0x10000));
	MkeyOpts o;
	o.acc = kAll;
	o.start = 0x1000;
	o.len = 300;
	o.klm = klm;
	o.variant = 0x77;
	const uint32_t ind = b.mkey(o);
	ASSERT_NE(ind, 0u);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(0x1000, ind)
			     .data(300, l, DpBed::iova(src))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(std::memcmp(b.at(dst + 50), b.at(src), 100), 0);
	EXPECT_EQ(std::memcmp(b.at(dst + 0x10000), b.at(src + 100), 200), 0);
	EXPECT_TRUE(all_are(b, dst, 50, 0xcc));
	EXPECT_TRUE(all_are(b, dst + 150, 100, 0xcc));
	EXPECT_TRUE(all_are(b, dst + 0x10000 + 200, 100, 0xcc));
}

TEST_F(EmuDp, ErrQpRecoversThroughReset)
{
	b.post(b.qa, Wqe(0x3f, b.qa.qpn).done());
	ASSERT_TRUE(b.poll(b.cqa));
	ASSERT_EQ(b.modify(prm::opcode::qp_2rst, b.qa.qpn).status(), prm::status::ok);
	b.qa.pi = 0;
	b.store_dbr(b.qa.dbr_off + 4, prm::dbr::sq_counter, 0);
	b.connect(b.qa, 1, b.qb.qpn);
	b.post(b.qa, Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	EXPECT_EQ(cqe_counter(*c), 0u);
}

TEST_F(EmuDp, EventsOutsideTheBitmaskAreDroppedAndCounted)
{
	DpBed c2;
	ASSERT_TRUE(c2.ok());
	c2.uar = c2.alloc_uar();
	ASSERT_EQ(c2.create_eq(6, 0).status(), prm::status::ok); /* subscribes to nothing */
	ASSERT_EQ(c2.create_cq(&c2.cqa, 0, 6).status(), prm::status::ok);
	ASSERT_EQ(c2.create_cq(&c2.cqb, 1, 6).status(), prm::status::ok);
	ASSERT_EQ(c2.create_qp(&c2.qa, 0, &c2.cqa, c2.uar).status(), prm::status::ok);
	ASSERT_EQ(c2.create_qp(&c2.qb, 1, &c2.cqb, c2.uar).status(), prm::status::ok);
	c2.connect(c2.qa, 1, c2.qb.qpn);
	c2.connect(c2.qb, 2, c2.qa.qpn);
	const uint32_t l = c2.mr(kDataOff, 4096, kAll);
	const uint32_t ro = c2.mr(kDataOff + 8192, 4096, {true, false, true, false, false});
	c2.post(c2.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, c2.qa.qpn)
			       .raddr(DpBed::iova(kDataOff + 8192), ro)
			       .data(8, l, DpBed::iova(kDataOff))
			       .done());
	auto c = c2.poll(c2.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_FALSE(c2.poll_eq());
	EXPECT_EQ(c2.dp().stats().events_dropped, 1u);
	EXPECT_EQ(c2.dp().stats().eqes, 0u);
}

TEST_F(EmuDp, InlineDoorbellWithAnotherQpsValueStillFindsTheWork)
{
	b.post(b.qa, Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done(), false);
	/* A ring whose value names no QP on this UAR. */
	const uint8_t junk[8] = {0, 0, 0, 0, 0xee, 0xee, 0xee, 0x01};
	b.doorbell(b.qa, junk);
	EXPECT_TRUE(b.poll(b.cqa));
}

/* ---- Doorbells and concurrency --------------------------------------------------------- */

TEST(EmuDpDoorbell, PollThreadSeesEveryQpOnASharedUar)
{
	EmuConfig cfg;
	cfg.delivery = DoorbellDelivery::poll_thread;
	DpBed b(cfg);
	ASSERT_TRUE(b.ok());
	b.pair();
	/* Post on both QPs, then ring once with only qa's value: qb's work is found anyway. */
	auto wa = Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done();
	b.post(b.qa, wa, false);
	b.post(b.qb, Wqe(MLX5_OPCODE_NOP, b.qb.qpn).done(), false);
	b.doorbell(b.qa, b.at(b.qa.sq_off));
	EXPECT_TRUE(b.wait(b.cqa));
	EXPECT_TRUE(b.wait(b.cqb));
}

TEST(EmuDpDoorbell, UarsArePreRegisteredAndAllocatedFromOne)
{
	EmuConfig cfg;
	cfg.uars = 3;
	DpBed b(cfg);
	ASSERT_TRUE(b.ok());
	EXPECT_EQ(b.alloc_uar(), 1u);
	EXPECT_EQ(b.alloc_uar(), 2u);
	EXPECT_EQ(b.alloc_uar(), 3u);
	Reply r = b.h().run(
		Cmd(prm::opcode::alloc_uar, prm::alloc_uar_in::size, prm::alloc_uar_out::size));
	EXPECT_EQ(r.status(), prm::status::exceed_lim);
	EXPECT_EQ(r.syndrome(), static_cast<uint32_t>(Syndrome::uar_table_full));
	/* cmd_dbell, cmdq_addr_l (initializing clears once it is written) and per UAR page the
	 * SQ, CQ arm and EQ arm doorbells. */
	EXPECT_EQ(b.h().emu().emu_function().doorbell_count(), 11u);
}

TEST(EmuDpDoorbell, TooManyUarsForTheDoorbellTableAreRefused)
{
	EmuConfig cfg;
	cfg.uars = 64;
	std::unique_ptr<EmuMlx5> e;
	EXPECT_EQ(emu_mlx5_create(cfg, &e), -EINVAL);
	/* 191 of the 192 doorbells: cmd_dbell, cmdq_addr_l and per UAR page the SQ doorbell,
	 * the CQ arm doorbell and the EQ arm doorbell. */
	cfg.uars = 63;
	EXPECT_EQ(emu_mlx5_create(cfg, &e), 0);
}

void concurrent_fetch_add(DoorbellDelivery mode)
{
	EmuConfig cfg;
	cfg.delivery = mode;
	DpBed b(cfg);
	ASSERT_TRUE(b.ok());
	b.pair();
	const size_t src = kDataOff, dst = kDataOff + 0x10000;
	const uint32_t l = b.mr(src, 0x10000, kAll);
	const uint32_t r = b.mr(dst, 4096, kAll);
	set_be64(b, dst, 0);
	constexpr int kOps = 2000;
	/* qa targets qb's memory and qb targets its own through qa: both hit one word. */
	auto worker = [&](TestQp &qp, size_t out) {
		for (int i = 0; i < kOps; i++) {
			b.post(qp, Wqe(MLX5_OPCODE_ATOMIC_FA, qp.qpn)
					   .raddr(DpBed::iova(dst), r)
					   .atomic(1, 0)
					   .data(8, l, DpBed::iova(out + (i % 64) * 8))
					   .done());
			std::optional<std::vector<uint8_t>> c;
			while (!(c = b.poll(*qp.cq)))
				std::this_thread::yield();
			ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
		}
	};
	std::thread t1(worker, std::ref(b.qa), src);
	std::thread t2(worker, std::ref(b.qb), src + 0x8000);
	t1.join();
	t2.join();
	EXPECT_EQ(be64_at(b, dst), 2u * kOps);
	EXPECT_TRUE(b.dev().check_invariants());
}

TEST(EmuDpConcurrent, AtomicsFromTwoQpsOnTwoThreadsNeverLoseAnUpdateInline)
{
	concurrent_fetch_add(DoorbellDelivery::inline_call);
}

TEST(EmuDpConcurrent, AtomicsFromTwoQpsOnTwoThreadsNeverLoseAnUpdatePollThread)
{
	concurrent_fetch_add(DoorbellDelivery::poll_thread);
}

TEST(EmuDpConcurrent, UmrWhileAnotherQpWritesNeverCorruptsTheTable)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.pair();
	const uint32_t l = b.mr(kDataOff, 0x10000, kAll);
	const uint32_t r = b.mr(kDataOff + 0x20000, 0x10000, kAll);
	MkeyOpts o;
	o.free = true;
	o.umr_en = true;
	o.acc = {};
	o.capacity_octwords = 8;
	o.variant = 1;
	const uint32_t k = b.mkey(o);
	std::thread writer([&] {
		for (int i = 0; i < 500; i++) {
			b.post(b.qb, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qb.qpn)
					     .raddr(DpBed::iova(kDataOff + 0x20000), r)
					     .data(4096, l, DpBed::iova(kDataOff))
					     .done());
			std::optional<std::vector<uint8_t>> c;
			while (!(c = b.poll(b.cqb)))
				std::this_thread::yield();
			ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
		}
	});
	for (int i = 0; i < 500; i++) {
		const uint32_t v = static_cast<uint32_t>(2 + i % 200);
		b.post(b.qa, umr_wqe(
				     b.qa.qpn, k, 0,
				     prm::umr_mkey_mask::key | prm::umr_mkey_mask::len |
					     prm::umr_mkey_mask::start_addr,
				     [&](uint8_t *c) {
					     prm::set(c, prm::mkc::mkey_7_0, v);
					     prm::set(c, prm::mkc::len, 4096u * (1 + i % 8));
					     prm::set(c, prm::mkc::start_addr, 0x1000u * i);
				     },
				     {DpBed::iova(kDataOff)}, true));
		std::optional<std::vector<uint8_t>> c;
		while (!(c = b.poll(b.cqa)))
			std::this_thread::yield();
		ASSERT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	}
	writer.join();
	EXPECT_TRUE(b.dev().check_invariants());
}

TEST(EmuDpConcurrent, QpsSharingACqOnTwoThreadsLoseNoCqeInline)
{
	/* Inline doorbells from two threads complete into one CQ at once: the CQ's lock (taken
	 * when more than one QP completes there) keeps every CQE. */
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.pair();
	TestQp qc;
	ASSERT_EQ(b.create_qp(&qc, 2, &b.cqa, b.uar).status(), prm::status::ok);
	b.connect(qc, 1, qc.qpn);
	constexpr int kOps = 2000;
	std::atomic<int> seen_a{0}, seen_c{0};
	std::atomic<bool> stop{false};
	std::atomic<int> bad{0};
	std::thread poller([&] {
		while (!stop.load()) {
			auto c = b.poll(b.cqa);
			if (!c) {
				std::this_thread::yield();
				continue;
			}
			if (cqe_opcode(*c) != MLX5_CQE_REQ)
				bad++;
			uint32_t qpn_be;
			std::memcpy(&qpn_be, c->data() + offsetof(mlx5_cqe64, sop_drop_qpn), 4);
			const uint32_t qpn = be32toh(qpn_be) & 0xffffff;
			(qpn == b.qa.qpn ? seen_a : qpn == qc.qpn ? seen_c : bad)++;
		}
	});
	/* One WQE in flight per QP: the 64-entry CQ never overruns. */
	auto worker = [&](TestQp &qp, std::atomic<int> &seen) {
		for (int i = 0; i < kOps; i++) {
			b.post(qp, Wqe(MLX5_OPCODE_NOP, qp.qpn).done());
			while (seen.load() <= i)
				std::this_thread::yield();
		}
	};
	std::thread t1(worker, std::ref(b.qa), std::ref(seen_a));
	std::thread t2(worker, std::ref(qc), std::ref(seen_c));
	t1.join();
	t2.join();
	stop = true;
	poller.join();
	EXPECT_EQ(seen_a.load(), kOps);
	EXPECT_EQ(seen_c.load(), kOps);
	EXPECT_EQ(bad.load(), 0);
	const DpStats st = b.dp().stats();
	EXPECT_EQ(st.cq_overruns, 0u);
	EXPECT_EQ(st.cqes, 2u * kOps);
	EXPECT_TRUE(b.dev().check_invariants());
}

TEST(EmuDpStats, CountsOutliveTheQpsAndCqsThatMadeThem)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.pair();
	for (int i = 0; i < 3; i++) {
		b.post(b.qa, Wqe(MLX5_OPCODE_NOP, b.qa.qpn).done());
		ASSERT_TRUE(b.poll(b.cqa));
	}
	DpStats st = b.dp().stats();
	EXPECT_EQ(st.wqes, 3u);
	EXPECT_EQ(st.cqes, 3u);
	EXPECT_EQ(st.doorbells, 3u);
	Cmd dqp(prm::opcode::destroy_qp, prm::destroy_qp_in::size, prm::destroy_qp_out::size);
	dqp.set(prm::destroy_qp_in::qpn, b.qa.qpn);
	ASSERT_EQ(b.h().run(dqp).status(), prm::status::ok);
	Cmd dcq(prm::opcode::destroy_cq, prm::destroy_cq_in::size, prm::destroy_cq_out::size);
	dcq.set(prm::destroy_cq_in::cqn, b.cqa.cqn);
	ASSERT_EQ(b.h().run(dcq).status(), prm::status::ok);
	st = b.dp().stats();
	EXPECT_EQ(st.wqes, 3u);
	EXPECT_EQ(st.cqes, 3u);
	EXPECT_EQ(st.doorbells, 3u);
}

/* ---- Commands --------------------------------------------------------------------------- */

#define EXPECT_CMD(reply, st, syn)                                                                 \
	do {                                                                                       \
		Reply r_ = (reply);                                                                \
		EXPECT_EQ(r_.status(), (st));                                                      \
		EXPECT_EQ(r_.syndrome(), static_cast<uint32_t>(syn));                              \
	} while (0)

TEST(EmuDpCmd, IllegalQpTransitionsAreBadQpState)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.uar = b.alloc_uar();
	ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
	EXPECT_CMD(b.modify(prm::opcode::init2rtr_qp, b.qa.qpn), prm::status::bad_qp_state,
		   Syndrome::qp_bad_state);
	EXPECT_CMD(b.modify(prm::opcode::rtr2rts_qp, b.qa.qpn), prm::status::bad_qp_state,
		   Syndrome::qp_bad_state);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, b.qa.qpn, 3), prm::status::bad_param,
		   Syndrome::qp_port);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, b.qa.qpn, 2), prm::status::ok,
		   Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, b.qa.qpn, 2), prm::status::bad_qp_state,
		   Syndrome::qp_bad_state);
	EXPECT_CMD(b.modify(prm::opcode::qp_2err, b.qa.qpn), prm::status::ok, Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::rtr2rts_qp, b.qa.qpn), prm::status::bad_qp_state,
		   Syndrome::qp_bad_state);
	EXPECT_CMD(b.modify(prm::opcode::qp_2rst, b.qa.qpn), prm::status::ok, Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, b.qa.qpn, 1), prm::status::ok,
		   Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::qp_2err, 999), prm::status::bad_res_state,
		   Syndrome::qp_not_found);
}

TEST(EmuDpCmd, QueryQpReportsStateAndPath)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.pair();
	Cmd q(prm::opcode::query_qp, prm::query_qp_in::size, prm::query_qp_out::size);
	q.set(prm::query_qp_in::qpn, b.qb.qpn);
	Reply r = b.h().run(q);
	ASSERT_EQ(r.status(), prm::status::ok);
	const size_t o = prm::query_qp_out::qpc_offset;
	EXPECT_EQ(r.get_at(o, prm::qpc::state), prm::qp_state::rts);
	EXPECT_EQ(r.get_at(o, prm::qpc::remote_qpn), b.qa.qpn);
	EXPECT_EQ(r.get_at(o, prm::qpc::primary_vhca_port_num), 2u);
	EXPECT_EQ(r.get_at(o, prm::qpc::pd), b.pd);
}

TEST(EmuDpCmd, BusyObjectsCannotBeDestroyed)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.pair();
	Cmd dcq(prm::opcode::destroy_cq, prm::destroy_cq_in::size, prm::destroy_cq_out::size);
	dcq.set(prm::destroy_cq_in::cqn, b.cqa.cqn);
	EXPECT_CMD(b.h().run(dcq), prm::status::resource_busy, Syndrome::cq_in_use);
	Cmd duar(prm::opcode::dealloc_uar, prm::dealloc_uar_in::size, prm::dealloc_uar_out::size);
	duar.set(prm::dealloc_uar_in::uar, b.uar);
	EXPECT_CMD(b.h().run(duar), prm::status::resource_busy, Syndrome::uar_in_use);
	Cmd dpd(prm::opcode::dealloc_pd, prm::dealloc_pd_in::size, prm::dealloc_pd_out::size);
	dpd.set(prm::dealloc_pd_in::pd, b.pd);
	EXPECT_CMD(b.h().run(dpd), prm::status::resource_busy, Syndrome::pd_in_use);

	Cmd dqp(prm::opcode::destroy_qp, prm::destroy_qp_in::size, prm::destroy_qp_out::size);
	dqp.set(prm::destroy_qp_in::qpn, b.qa.qpn);
	EXPECT_CMD(b.h().run(dqp), prm::status::ok, Syndrome::none);
	EXPECT_CMD(b.h().run(dqp), prm::status::bad_res_state, Syndrome::qp_not_found);
	EXPECT_CMD(b.h().run(dcq), prm::status::ok, Syndrome::none);
	EXPECT_CMD(b.h().run(dcq), prm::status::bad_res_state, Syndrome::cq_not_found);
	EXPECT_TRUE(b.dev().check_invariants());
}

TEST(EmuDpCmd, QueueMemoryMustBeMappedAndLargeEnough)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	Cmd c(prm::opcode::create_cq, prm::create_cq_in::size + 8, prm::create_cq_out::size);
	c.set_at(prm::create_cq_in::cqc_offset, prm::cqc::log_cq_size, 6);
	c.set_at(prm::create_cq_in::cqc_offset, prm::cqc::dbr_addr, DpBed::iova(kDbrOff));
	c.set_at(prm::create_cq_in::pas_offset, prm::pas_entry, 0x7000000000ull);
	EXPECT_CMD(b.h().run(c), prm::status::bad_param, Syndrome::queue_memory);
	Cmd big(prm::opcode::create_cq, prm::create_cq_in::size + 8, prm::create_cq_out::size);
	big.set_at(prm::create_cq_in::cqc_offset, prm::cqc::log_cq_size, 8); /* 16 KiB, 1 page */
	big.set_at(prm::create_cq_in::cqc_offset, prm::cqc::dbr_addr, DpBed::iova(kDbrOff));
	big.set_at(prm::create_cq_in::pas_offset, prm::pas_entry, DpBed::iova(kCqOff));
	EXPECT_CMD(b.h().run(big), prm::status::bad_param, Syndrome::queue_params);
	/* UC (and XRC) are not modelled; UD is (emu_mlx5_ud.cpp). */
	Cmd qp(prm::opcode::create_qp, prm::create_qp_in::size + 8, prm::create_qp_out::size);
	qp.set_at(prm::create_qp_in::qpc_offset, prm::qpc::st, prm::qp_st::uc);
	EXPECT_CMD(b.h().run(qp), prm::status::bad_param, Syndrome::qp_type);
}

TEST(EmuDpCmd, TablesAndReferencesHaveTheirStatuses)
{
	EmuConfig cfg;
	cfg.log_max_qp = 2; /* QPs 2 and 3: 0 and 1 are the special QPs' numbers */
	cfg.log_max_cq = 2; /* CQs 1..3 */
	cfg.log_max_eq = 1; /* EQ 1 only */
	DpBed b(cfg);
	ASSERT_TRUE(b.ok());
	TestCq c0, c1, c2, c3;
	TestQp q0, q1, q2;
	ASSERT_EQ(b.create_eq(6, 0).status(), prm::status::ok); /* the CQs' EQ */
	EXPECT_CMD(b.create_eq(6, 0), prm::status::exceed_lim, Syndrome::eq_table_full);
	/* A QP needs an existing CQ and an allocated UAR. */
	c0.cqn = 3;
	EXPECT_CMD(b.create_qp(&q0, 0, &c0, 1), prm::status::bad_res_state, Syndrome::cq_not_found);
	ASSERT_EQ(b.create_cq(&c0, 0, 6).status(), prm::status::ok);
	EXPECT_CMD(b.create_qp(&q0, 0, &c0, 1), prm::status::bad_res_state,
		   Syndrome::uar_not_allocated);
	EXPECT_CMD(b.create_qp(&q0, 0, &c0, 1, 6, b.pd + 1), prm::status::bad_res_state,
		   Syndrome::pd_not_allocated);
	const uint32_t uar = b.alloc_uar();
	ASSERT_EQ(b.create_qp(&q0, 0, &c0, uar).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&q1, 1, &c0, uar).status(), prm::status::ok);
	EXPECT_EQ(q0.qpn, EmuDataPath::kFirstQpn);
	EXPECT_EQ(q1.qpn, EmuDataPath::kFirstQpn + 1);
	EXPECT_CMD(b.create_qp(&q2, 2, &c0, uar), prm::status::exceed_lim, Syndrome::qp_table_full);
	ASSERT_EQ(b.create_cq(&c1, 1, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_cq(&c2, 2, 6).status(), prm::status::ok);
	EXPECT_CMD(b.create_cq(&c3, 3, 6), prm::status::exceed_lim, Syndrome::cq_table_full);

	Cmd deq(prm::opcode::destroy_eq, prm::destroy_eq_in::size, prm::destroy_eq_out::size);
	deq.set(prm::destroy_eq_in::eq_number, 2);
	EXPECT_CMD(b.h().run(deq), prm::status::bad_res_state, Syndrome::eq_not_found);
	Cmd duar(prm::opcode::dealloc_uar, prm::dealloc_uar_in::size, prm::dealloc_uar_out::size);
	duar.set(prm::dealloc_uar_in::uar, uar + 1);
	EXPECT_CMD(b.h().run(duar), prm::status::bad_res_state, Syndrome::uar_not_allocated);
	EXPECT_TRUE(b.dev().check_invariants());
}

/* A device with no QP number left over the special QPs' is no device. */
TEST(EmuDpCmd, QpNumbersStartAfterTheSpecialQps)
{
	EmuConfig cfg;
	cfg.log_max_qp = 1;
	Harness h(cfg);
	EXPECT_EQ(h.rc(), -EINVAL);
}

/* CREATE_QP st QP1: a UD QP that is its port's GSI QP from RST2INIT (Linux qp.h
 * MLX5_QP_ST_QP1). One per port: a second's RST2INIT on that port is RESOURCE_BUSY until the
 * first goes to RST or is destroyed; INIT2RTR cannot move it to the other port. */
TEST(EmuDpCmd, GsiQpIsOnePerPortFromRst2InitToReset)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.uar = b.alloc_uar();
	ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
	b.qp_st = prm::qp_st::qp1;
	TestQp g[3];
	for (uint32_t i = 0; i < 3; i++)
		ASSERT_EQ(b.create_qp(&g[i], i, &b.cqa, b.uar).status(), prm::status::ok);
	for (const TestQp &q : g)
		EXPECT_NE(q.qpn, prm::gsi::qpn) << "QP 1 is the wire's name, never a QP's";
	Cmd query(prm::opcode::query_qp, prm::query_qp_in::size, prm::query_qp_out::size);
	query.set(prm::query_qp_in::qpn, g[0].qpn);
	Reply r = b.h().run(query);
	ASSERT_EQ(r.status(), prm::status::ok);
	EXPECT_EQ(r.get_at(prm::query_qp_out::qpc_offset, prm::qpc::st), prm::qp_st::qp1);

	const Perm none{false, false, false, false, false};
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, g[0].qpn, 1, 0, none), prm::status::ok,
		   Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, g[1].qpn, 1, 0, none),
		   prm::status::resource_busy, Syndrome::qp_gsi_busy);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, g[1].qpn, 2, 0, none), prm::status::ok,
		   Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, g[2].qpn, 2, 0, none),
		   prm::status::resource_busy, Syndrome::qp_gsi_busy);
	/* INIT2RTR naming port 2 for port 1's GSI QP. */
	Cmd rtr = b.modify_cmd(prm::opcode::init2rtr_qp, g[0].qpn, 2, 0, none);
	EXPECT_CMD(b.h().run(rtr), prm::status::bad_param, Syndrome::qp_port);
	EXPECT_TRUE(b.dev().check_invariants());
	/* 2RST frees port 1; ERR keeps port 2's. */
	EXPECT_CMD(b.modify(prm::opcode::qp_2rst, g[0].qpn), prm::status::ok, Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::qp_2err, g[1].qpn), prm::status::ok, Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, g[2].qpn, 2, 0, none),
		   prm::status::resource_busy, Syndrome::qp_gsi_busy);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, g[2].qpn, 1, 0, none), prm::status::ok,
		   Syndrome::none);
	/* Destroyed, port 2's GSI QP frees its port. */
	Cmd dqp(prm::opcode::destroy_qp, prm::destroy_qp_in::size, prm::destroy_qp_out::size);
	dqp.set(prm::destroy_qp_in::qpn, g[1].qpn);
	EXPECT_CMD(b.h().run(dqp), prm::status::ok, Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, g[0].qpn, 2, 0, none), prm::status::ok,
		   Syndrome::none);
	EXPECT_TRUE(b.dev().check_invariants());
}

TEST(EmuDpCmd, EqNamedByACqIsBusy)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	ASSERT_EQ(b.create_eq(6, 0).status(), prm::status::ok);
	TestCq c;
	c.ring_off = kCqOff;
	Cmd cq(prm::opcode::create_cq, prm::create_cq_in::size + 8, prm::create_cq_out::size);
	cq.set_at(prm::create_cq_in::cqc_offset, prm::cqc::log_cq_size, 4);
	cq.set_at(prm::create_cq_in::cqc_offset, prm::cqc::c_eqn, 1);
	cq.set_at(prm::create_cq_in::cqc_offset, prm::cqc::dbr_addr, DpBed::iova(kDbrOff));
	cq.set_at(prm::create_cq_in::pas_offset, prm::pas_entry, DpBed::iova(kCqOff));
	ASSERT_EQ(b.h().run(cq).status(), prm::status::ok);
	Cmd deq(prm::opcode::destroy_eq, prm::destroy_eq_in::size, prm::destroy_eq_out::size);
	deq.set(prm::destroy_eq_in::eq_number, 1);
	EXPECT_CMD(b.h().run(deq), prm::status::resource_busy, Syndrome::eq_in_use);
}

TEST(EmuDpCmd, DataPathCommandsNeedAnInitializedHca)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	EXPECT_CMD(h.run(Cmd(prm::opcode::alloc_uar, prm::alloc_uar_in::size,
			     prm::alloc_uar_out::size)),
		   prm::status::bad_sys_state, Syndrome::hca_not_initialized);
}

TEST(EmuDpCmd, TeardownDropsEveryDataPathObject)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.pair();
	Cmd t(prm::opcode::teardown_hca, prm::teardown_hca_in::size, prm::teardown_hca_out::size);
	EXPECT_CMD(b.h().run(t), prm::status::ok, Syndrome::none);
	EXPECT_EQ(b.dp().qps(), 0u);
	EXPECT_EQ(b.dp().cqs(), 0u);
	EXPECT_TRUE(b.dev().check_invariants());
}

/* ---- Issue 17: CQs on a real EQ, the RC connection's parameters, the RoCE caps ---------- */

/* A CREATE_CQ of 16 CQEs at kCqOff naming eqn. */
Cmd cq_on(uint32_t eqn)
{
	Cmd c(prm::opcode::create_cq, prm::create_cq_in::size + 8, prm::create_cq_out::size);
	c.set_at(prm::create_cq_in::cqc_offset, prm::cqc::log_cq_size, 4);
	c.set_at(prm::create_cq_in::cqc_offset, prm::cqc::c_eqn, eqn);
	c.set_at(prm::create_cq_in::cqc_offset, prm::cqc::dbr_addr, DpBed::iova(kDbrOff));
	c.set_at(prm::create_cq_in::pas_offset, prm::pas_entry, DpBed::iova(kCqOff));
	return c;
}

TEST(EmuDpCmd, CqOnAnEqThatDoesNotExistIsBadResource)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	/* EQ 0 does not exist on a ConnectX (what the driver used to name), nor does an EQ
	 * number never created. */
	EXPECT_CMD(b.h().run(cq_on(0)), prm::status::bad_resource, Syndrome::cq_eq_not_found);
	ASSERT_EQ(b.create_eq(6, 0).status(), prm::status::ok);
	EXPECT_CMD(b.h().run(cq_on(2)), prm::status::bad_resource, Syndrome::cq_eq_not_found);
	EXPECT_EQ(b.dp().cqs(), 0u);
	EXPECT_CMD(b.h().run(cq_on(1)), prm::status::ok, Syndrome::none);
	EXPECT_EQ(b.dp().cqs(), 1u);
}

TEST(EmuDpCmd, AsyncEventsGoToTheEqSubscribedToThemNotToAnEarlierCompletionEq)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	ASSERT_NE(b.cq_eqn(), 0u); /* a completion EQ first, subscribed to nothing */
	b.pair();
	ASSERT_FALSE(::testing::Test::HasFatalFailure());
	const uint32_t l = b.mr(kDataOff, 4096, kAll);
	const uint32_t ro = b.mr(kDataOff + 0x10000, 4096, {true, false, true, false, false});
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(kDataOff + 0x10000), ro)
			     .data(64, l, DpBed::iova(kDataOff))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	auto e = b.poll_eq();
	ASSERT_TRUE(e);
	EXPECT_EQ(e->first, prm::event_type::wq_access_error);
	EXPECT_EQ(b.dp().stats().events_dropped, 0u);
}

/* A QP of the bed in INIT (created on its own CQ 0, RST2INIT on port 1). */
void qp_in_init(DpBed &b)
{
	b.uar = b.alloc_uar();
	ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
	ASSERT_EQ(b.modify(prm::opcode::rst2init_qp, b.qa.qpn).status(), prm::status::ok);
}

QpState state_of(DpBed &b, uint32_t qpn)
{
	QpState s = QpState::err;
	EXPECT_EQ(b.dp().qp_state(qpn, &s), 0);
	return s;
}

TEST(EmuDpCmd, Init2RtrRefusesAMissingMtuOrMessageLimit)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	qp_in_init(b);
	ASSERT_FALSE(::testing::Test::HasFatalFailure());
	const size_t q = prm::modify_qp_in::qpc_offset;
	const uint16_t op = prm::opcode::init2rtr_qp;
	Cmd c = b.modify_cmd(op, b.qa.qpn, 0, b.qa.qpn);
	c.set_at(q, prm::qpc::mtu, 0); /* what the driver used to send */
	EXPECT_CMD(b.h().run(c), prm::status::bad_param, Syndrome::qp_mtu);
	c.set_at(q, prm::qpc::mtu, 6); /* above 4096 */
	EXPECT_CMD(b.h().run(c), prm::status::bad_param, Syndrome::qp_mtu);
	c = b.modify_cmd(op, b.qa.qpn, 0, b.qa.qpn);
	c.set_at(q, prm::qpc::log_msg_max, 31); /* the device carries 2^30 */
	EXPECT_CMD(b.h().run(c), prm::status::bad_param, Syndrome::qp_msg_max);
	EXPECT_EQ(state_of(b, b.qa.qpn), QpState::init);
	EXPECT_CMD(b.modify(op, b.qa.qpn, 0, b.qa.qpn), prm::status::ok, Syndrome::none);
}

TEST(EmuDpCmd, OptionalParametersOutsideTheTransitionsMaskAreBadParam)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.uar = b.alloc_uar();
	ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
	/* RST2INIT has no optional parameter; INIT2RTR no primary port, RTR2RTS no retry
	 * count (Linux qp.c, opt_mask). */
	EXPECT_CMD(b.modify(prm::opcode::rst2init_qp, b.qa.qpn, 1, 0, kAll, prm::qp_optpar::rre),
		   prm::status::bad_param, Syndrome::qp_opt_param);
	ASSERT_EQ(b.modify(prm::opcode::rst2init_qp, b.qa.qpn).status(), prm::status::ok);
	EXPECT_CMD(b.modify(prm::opcode::init2rtr_qp, b.qa.qpn, 0, b.qa.qpn, kAll,
			    prm::qp_optpar::pri_port),
		   prm::status::bad_param, Syndrome::qp_opt_param);
	EXPECT_CMD(b.modify(prm::opcode::init2rtr_qp, b.qa.qpn, 0, b.qa.qpn, kAll,
			    prm::qp_optpar::rc_init2rtr),
		   prm::status::ok, Syndrome::none);
	EXPECT_CMD(b.modify(prm::opcode::rtr2rts_qp, b.qa.qpn, 1, 0, kAll,
			    prm::qp_optpar::retry_count),
		   prm::status::bad_param, Syndrome::qp_opt_param);
	EXPECT_CMD(
		b.modify(prm::opcode::rtr2rts_qp, b.qa.qpn, 1, 0, kAll, prm::qp_optpar::rc_rtr2rts),
		prm::status::ok, Syndrome::none);
}

TEST(EmuDpCmd, ForceLoopbackOnlyWhereTheRoceCapsAllowIt)
{
	EmuConfig cfg;
	cfg.roce_fl_when_enabled = false; /* RoCE is enabled: fl_rc_qp_when_roce_enabled rules */
	DpBed b(cfg);
	ASSERT_TRUE(b.ok());
	qp_in_init(b);
	ASSERT_FALSE(::testing::Test::HasFatalFailure());
	const size_t q = prm::modify_qp_in::qpc_offset;
	const uint16_t op = prm::opcode::init2rtr_qp;
	EXPECT_CMD(b.modify(op, b.qa.qpn, 0, b.qa.qpn), prm::status::bad_param,
		   Syndrome::qp_force_loopback);
	/* Without fl: a GID table entry and the peer's GID. */
	Cmd c = b.modify_cmd(op, b.qa.qpn, 0, b.qa.qpn);
	c.set_at(q, prm::qpc::primary_fl, 0);
	EXPECT_CMD(b.h().run(c), prm::status::bad_param, Syndrome::qp_remote_gid);
	const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
	std::memcpy(c.in.data() + q + prm::qpc::primary_rgid_rip_offset, gid, sizeof(gid));
	c.set_at(q, prm::qpc::primary_src_addr_index, 255);
	{
		EmuConfig small;
		small.roce_fl_when_enabled = false;
		small.roce_address_table_size = 4;
		DpBed s(small);
		ASSERT_TRUE(s.ok());
		qp_in_init(s);
		ASSERT_FALSE(::testing::Test::HasFatalFailure());
		Cmd c4 = c;
		c4.set(prm::modify_qp_in::qpn, s.qa.qpn);
		c4.set_at(q, prm::qpc::primary_src_addr_index, 4);
		EXPECT_CMD(s.h().run(c4), prm::status::bad_param, Syndrome::qp_gid_index);
		c4.set_at(q, prm::qpc::primary_src_addr_index, 3);
		EXPECT_CMD(s.h().run(c4), prm::status::ok, Syndrome::none);
	}
	EXPECT_EQ(state_of(b, b.qa.qpn), QpState::init);
	EXPECT_CMD(b.h().run(c), prm::status::ok, Syndrome::none);
	EXPECT_EQ(state_of(b, b.qa.qpn), QpState::rtr);
	QpInfo info;
	ASSERT_EQ(b.dp().query_qp(b.qa.qpn, &info), 0);
	EXPECT_FALSE(info.path.fl);
	EXPECT_EQ(info.path.gid_index, 255u);
	EXPECT_EQ(std::memcmp(info.path.remote_gid, gid, sizeof(gid)), 0);
}

TEST(EmuDpCmd, ForceLoopbackWhileRoceIsOffFollowsTheDisabledCap)
{
	EmuConfig cfg;
	cfg.roce = false; /* no RoCE caps: the disabled bit rules */
	cfg.roce_fl_when_disabled = false;
	DpBed b(cfg);
	ASSERT_TRUE(b.ok());
	qp_in_init(b);
	ASSERT_FALSE(::testing::Test::HasFatalFailure());
	EXPECT_CMD(b.modify(prm::opcode::init2rtr_qp, b.qa.qpn, 0, b.qa.qpn),
		   prm::status::bad_param, Syndrome::qp_force_loopback);
}

TEST(EmuDpCmd, AtomicModeOtherThanIbCompliantIsBadParam)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.uar = b.alloc_uar();
	ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
	Cmd c = b.modify_cmd(prm::opcode::rst2init_qp, b.qa.qpn);
	c.set_at(prm::modify_qp_in::qpc_offset, prm::qpc::atomic_mode, 3); /* 8-byte extended */
	EXPECT_CMD(b.h().run(c), prm::status::bad_param, Syndrome::qp_atomic_mode);
	EXPECT_EQ(state_of(b, b.qa.qpn), QpState::rst);
	c.set_at(prm::modify_qp_in::qpc_offset, prm::qpc::atomic_mode,
		 prm::qp_atomic_mode::ib_comp);
	EXPECT_CMD(b.h().run(c), prm::status::ok, Syndrome::none);
	QpInfo info;
	ASSERT_EQ(b.dp().query_qp(b.qa.qpn, &info), 0);
	EXPECT_EQ(info.path.atomic_mode, prm::qp_atomic_mode::ib_comp);
}

TEST(EmuDpCmd, QpTimestampFormatMustBeOneTheRoceCapsOffer)
{
	struct Case {
		uint32_t cap, ts;
		bool ok;
	};
	namespace tc = prm::ts_format_cap;
	namespace tf = prm::qp_ts_format;
	const Case cases[] = {
		{tc::real_time, tf::free_running, false}, /* the field left at 0 */
		{tc::real_time, tf::device_default, true},
		{tc::real_time, tf::real_time, true},
		{tc::free_running, tf::free_running, true},
		{tc::free_running, tf::device_default, false},
		{tc::free_running, tf::real_time, false},
		{tc::free_running_and_real_time, tf::free_running, true},
		{tc::free_running_and_real_time, tf::device_default, true},
		{tc::free_running_and_real_time, 3, false},
	};
	for (const Case &k : cases) {
		EmuConfig cfg;
		cfg.roce_qp_ts_format = k.cap;
		DpBed b(cfg);
		ASSERT_TRUE(b.ok());
		b.uar = b.alloc_uar();
		ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
		/* create_qp with the ts_format set in its command */
		TestQp qp;
		qp.log_sq = 6;
		Cmd c(prm::opcode::create_qp, prm::create_qp_in::size + 8,
		      prm::create_qp_out::size);
		const size_t q = prm::create_qp_in::qpc_offset;
		c.set_at(q, prm::qpc::st, prm::qp_st::rc);
		c.set_at(q, prm::qpc::pd, b.pd);
		c.set_at(q, prm::qpc::cqn_snd, b.cqa.cqn);
		c.set_at(q, prm::qpc::uar_page, b.uar);
		c.set_at(q, prm::qpc::log_sq_size, 6);
		c.set_at(q, prm::qpc::rq_type, prm::qp_rq_type::zero_len);
		c.set_at(q, prm::qpc::dbr_addr, DpBed::iova(kDbrOff + 0x8000));
		c.set_at(q, prm::qpc::ts_format, k.ts);
		c.set_at(prm::create_qp_in::pas_offset, prm::pas_entry, DpBed::iova(kSqOff));
		SCOPED_TRACE("cap " + std::to_string(k.cap) + " ts " + std::to_string(k.ts));
		if (k.ok)
			EXPECT_CMD(b.h().run(c), prm::status::ok, Syndrome::none);
		else
			EXPECT_CMD(b.h().run(c), prm::status::bad_param, Syndrome::qp_ts_format);
	}
}

TEST(EmuDpCmd, QueryQpReportsTheConnectionAsSet)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	qp_in_init(b);
	ASSERT_FALSE(::testing::Test::HasFatalFailure());
	const size_t q = prm::modify_qp_in::qpc_offset;
	Cmd rtr = b.modify_cmd(prm::opcode::init2rtr_qp, b.qa.qpn, 0, b.qa.qpn);
	rtr.set_at(q, prm::qpc::mtu, prm::qp_mtu::mtu_4096);
	rtr.set_at(q, prm::qpc::log_msg_max, 20);
	rtr.set_at(q, prm::qpc::next_rcv_psn, 0xabcdef);
	rtr.set_at(q, prm::qpc::min_rnr_nak, 12);
	ASSERT_EQ(b.h().run(rtr).status(), prm::status::ok);
	Cmd rts = b.modify_cmd(prm::opcode::rtr2rts_qp, b.qa.qpn);
	rts.set_at(q, prm::qpc::next_send_psn, 0x123456);
	rts.set_at(q, prm::qpc::retry_count, 5);
	rts.set_at(q, prm::qpc::rnr_retry, 6);
	rts.set_at(q, prm::qpc::primary_ack_timeout, 14);
	ASSERT_EQ(b.h().run(rts).status(), prm::status::ok);
	Cmd query(prm::opcode::query_qp, prm::query_qp_in::size, prm::query_qp_out::size);
	query.set(prm::query_qp_in::qpn, b.qa.qpn);
	Reply r = b.h().run(query);
	ASSERT_EQ(r.status(), prm::status::ok);
	const size_t o = prm::query_qp_out::qpc_offset;
	EXPECT_EQ(r.get_at(o, prm::qpc::mtu), prm::qp_mtu::mtu_4096);
	EXPECT_EQ(r.get_at(o, prm::qpc::log_msg_max), 20u);
	EXPECT_EQ(r.get_at(o, prm::qpc::primary_fl), 1u);
	EXPECT_EQ(r.get_at(o, prm::qpc::next_rcv_psn), 0xabcdefu);
	EXPECT_EQ(r.get_at(o, prm::qpc::min_rnr_nak), 12u);
	EXPECT_EQ(r.get_at(o, prm::qpc::next_send_psn), 0x123456u);
	EXPECT_EQ(r.get_at(o, prm::qpc::retry_count), 5u);
	EXPECT_EQ(r.get_at(o, prm::qpc::rnr_retry), 6u);
	EXPECT_EQ(r.get_at(o, prm::qpc::primary_ack_timeout), 14u);
	EXPECT_EQ(r.get_at(o, prm::qpc::atomic_mode), prm::qp_atomic_mode::ib_comp);
}

TEST(EmuDpCmd, MessagesAboveTheQpsLogMsgMaxAreLocalLengthErrors)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	b.uar = b.alloc_uar();
	ASSERT_EQ(b.create_cq(&b.cqa, 0, 6).status(), prm::status::ok);
	ASSERT_EQ(b.create_qp(&b.qa, 0, &b.cqa, b.uar).status(), prm::status::ok);
	ASSERT_EQ(b.modify(prm::opcode::rst2init_qp, b.qa.qpn).status(), prm::status::ok);
	Cmd rtr = b.modify_cmd(prm::opcode::init2rtr_qp, b.qa.qpn, 0, b.qa.qpn);
	rtr.set_at(prm::modify_qp_in::qpc_offset, prm::qpc::log_msg_max, 6); /* 64 bytes */
	ASSERT_EQ(b.h().run(rtr).status(), prm::status::ok);
	ASSERT_EQ(b.modify(prm::opcode::rtr2rts_qp, b.qa.qpn).status(), prm::status::ok);
	const uint32_t l = b.mr(kDataOff, 4096, kAll);
	const uint32_t r = b.mr(kDataOff + 0x10000, 4096, kAll);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(kDataOff + 0x10000), r)
			     .data(64, l, DpBed::iova(kDataOff))
			     .done());
	auto c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ);
	b.post(b.qa, Wqe(MLX5_OPCODE_RDMA_WRITE, b.qa.qpn)
			     .raddr(DpBed::iova(kDataOff + 0x10000), r)
			     .data(65, l, DpBed::iova(kDataOff))
			     .done());
	c = b.poll(b.cqa);
	ASSERT_TRUE(c);
	EXPECT_EQ(cqe_opcode(*c), MLX5_CQE_REQ_ERR);
	EXPECT_EQ(cqe_syndrome(*c), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
}

TEST(EmuDpCmd, RoceCapsAreQueriedAndTheSourcePortBitIsSettable)
{
	DpBed b;
	ASSERT_TRUE(b.ok());
	auto query = [&](uint16_t mode) {
		Cmd c(prm::opcode::query_hca_cap, prm::query_hca_cap_in::size,
		      prm::query_hca_cap_out::size);
		c.set(prm::cmd_hdr_in::op_mod, prm::cap_op_mod(prm::cap_type::roce, mode));
		return b.h().run(c);
	};
	namespace rc = prm::roce_cap;
	const size_t o = prm::query_hca_cap_out::capability_offset;
	Reply max = query(prm::cap_mode::max);
	ASSERT_EQ(max.status(), prm::status::ok);
	EXPECT_EQ(max.get_at(o, rc::sw_r_roce_src_udp_port), 1u);
	EXPECT_EQ(max.get_at(o, rc::fl_rc_qp_when_roce_enabled), 1u);
	EXPECT_EQ(max.get_at(o, rc::fl_rc_qp_when_roce_disabled), 1u);
	EXPECT_EQ(max.get_at(o, rc::qp_ts_format), prm::ts_format_cap::free_running_and_real_time);
	EXPECT_EQ(max.get_at(o, rc::r_roce_dest_udp_port), 4791u);
	EXPECT_EQ(max.get_at(o, rc::roce_address_table_size), 256u);
	/* The harness brought the device up without setting it: still off. */
	EXPECT_EQ(query(prm::cap_mode::current).get_at(o, rc::sw_r_roce_src_udp_port), 0u);
}

} // namespace
} // namespace nicmr::emu::test
