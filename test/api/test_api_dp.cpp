/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The native data path: CQs, QPs between port 1 and port 2 over the device model's loopback
 * wire, RDMA WRITE / READ / atomics with data checked byte for byte, every error status and
 * every refused argument with its code.
 */
#include <endian.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_api_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;

/* Two connected QPs, port 1 (qa, on cqa) and port 2 (qb, on cqb), and two MRs A and B of
 * kLen in the fixture's pool with every right. */
class DataPath : public ApiFixture {
protected:
	void SetUp() override
	{
		ApiFixture::SetUp();
		connect_ports(dev, pd, &cqa, &cqb, &qa, &qb);
		if (HasFatalFailure())
			return;
		a = base;
		b = base + kLen;
		ASSERT_EQ(nicmr_mr_reg(pd, a, kLen, kAll, 0, 0, &mra), 0);
		ASSERT_EQ(nicmr_mr_reg(pd, b, kLen, kAll, 0, 0, &mrb), 0);
		ka = nicmr_mr_key(mra);
		kb = nicmr_mr_key(mrb);
	}
	void TearDown() override
	{
		for (nicmr_mr *m : {mra, mrb, extra})
			if (m) {
				EXPECT_EQ(nicmr_mr_dereg(m), 0);
			}
		destroy_queues({qa, qb}, {cqa, cqb});
		ApiFixture::TearDown();
	}
	static nicmr_wc wait(nicmr_cq *cq) { return wait_wc(cq); }
	uint32_t state(nicmr_qp *q)
	{
		uint32_t s = 99;
		EXPECT_EQ(nicmr_qp_state(q, &s), 0);
		return s;
	}
	nicmr_cq *cqa = nullptr, *cqb = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	nicmr_mr *mra = nullptr, *mrb = nullptr, *extra = nullptr;
	char *a = nullptr, *b = nullptr;
	uint32_t ka = 0, kb = 0;
};

TEST_F(DataPath, WriteMovesEveryByteFromPort1ToPort2)
{
	for (size_t i = 0; i < kLen; i++)
		a[i] = static_cast<char>(i * 13 + 7);
	std::memset(b, 0, kLen);
	ASSERT_EQ(nicmr_post_write(qa, u(a), kLen, ka, u(b), kb, 0x1234, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc = wait(cqa);
	EXPECT_EQ(wc.wr_id, 0x1234u);
	EXPECT_EQ(wc.qp_num, nicmr_qp_num(qa));
	EXPECT_EQ(wc.opcode, NICMR_WC_RDMA_WRITE);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.syndrome, 0);
	EXPECT_EQ(wc.byte_len, kLen);
	EXPECT_EQ(std::memcmp(a, b, kLen), 0);
	EXPECT_EQ(state(qa), NICMR_QP_RTS);
	EXPECT_EQ(state(qb), NICMR_QP_RTS);
}

TEST_F(DataPath, ReadFetchesEveryByteFromPort2)
{
	for (size_t i = 0; i < 4096; i++)
		b[100 + i] = static_cast<char>(i * 5 + 1);
	std::memset(a, 0, 8192);
	ASSERT_EQ(nicmr_post_read(qa, u(a) + 3, 4096, ka, u(b) + 100, kb, 77, NICMR_SEND_SIGNALED),
		  0);
	nicmr_wc wc = wait(cqa);
	EXPECT_EQ(wc.wr_id, 77u);
	EXPECT_EQ(wc.opcode, NICMR_WC_RDMA_READ);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.byte_len, 4096u);
	EXPECT_EQ(std::memcmp(a + 3, b + 100, 4096), 0);
	EXPECT_EQ(a[2], 0);
	EXPECT_EQ(a[3 + 4096], 0) << "nothing beyond the SGE";
}

TEST_F(DataPath, InlineWriteNeedsNoLocalKey)
{
	char src[NICMR_MAX_INLINE];
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = static_cast<char>(i ^ 0x5a);
	std::memset(b, 0, 2048);
	ASSERT_EQ(nicmr_post_write(qa, u(src), sizeof(src), 0, u(b) + 8, kb, 5,
				   NICMR_SEND_SIGNALED | NICMR_SEND_INLINE),
		  0);
	nicmr_wc wc = wait(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(b + 8, src, sizeof(src)), 0);
	EXPECT_EQ(b[8 + sizeof(src)], 0);
}

/* fi_atomic(3) / ibv_post_send(3) semantics: the target word, the operands and the fetched
 * value are uint64_t in host byte order. */
TEST_F(DataPath, AtomicsWorkOnHostOrderWords)
{
	uint64_t v = 40;
	std::memcpy(b + 64, &v, 8);
	std::memset(a, 0xff, 16);
	ASSERT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(b) + 64, kb, 2, 9, NICMR_SEND_SIGNALED),
		  0);
	nicmr_wc wc = wait(cqa);
	EXPECT_EQ(wc.opcode, NICMR_WC_FETCH_ADD);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(wc.byte_len, 8u);
	std::memcpy(&v, a, 8);
	EXPECT_EQ(v, 40u) << "the fetched value is the old one";
	std::memcpy(&v, b + 64, 8);
	EXPECT_EQ(v, 42u) << "40 + 2";

	/* A compare that does not match leaves the target and returns it. */
	ASSERT_EQ(nicmr_post_atomic_cswap(qa, u(a) + 8, ka, u(b) + 64, kb, 40, 7, 10,
					  NICMR_SEND_SIGNALED),
		  0);
	wc = wait(cqa);
	EXPECT_EQ(wc.opcode, NICMR_WC_COMP_SWAP);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	std::memcpy(&v, b + 64, 8);
	EXPECT_EQ(v, 42u) << "compare 40 did not match 42: no swap";
	std::memcpy(&v, a + 8, 8);
	EXPECT_EQ(v, 42u);
	/* One that matches swaps. */
	ASSERT_EQ(nicmr_post_atomic_cswap(qa, u(a) + 8, ka, u(b) + 64, kb, 42, 40, 11,
					  NICMR_SEND_SIGNALED),
		  0);
	wc = wait(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	std::memcpy(&v, a + 8, 8);
	EXPECT_EQ(v, 42u);
	std::memcpy(&v, b + 64, 8);
	EXPECT_EQ(v, 40u);
	ASSERT_EQ(nicmr_post_atomic_cswap(qa, u(a) + 8, ka, u(b) + 64, kb, 40, 7, 12,
					  NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	std::memcpy(&v, b + 64, 8);
	EXPECT_EQ(v, 7u) << "compare 40 matches 40: swapped";
	std::memcpy(&v, a + 8, 8);
	EXPECT_EQ(v, 40u);
	/* Carries run through the host-order word: 0xff + 1 and a wrap at 2^64. */
	v = 0xff;
	std::memcpy(b + 64, &v, 8);
	ASSERT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(b) + 64, kb, 1, 13, NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	std::memcpy(&v, b + 64, 8);
	EXPECT_EQ(v, 0x100u);
	ASSERT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(b) + 64, kb, ~uint64_t{0} - 0xff, 14,
					 NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	std::memcpy(&v, b + 64, 8);
	EXPECT_EQ(v, 0u);
	std::memcpy(&v, a, 8);
	EXPECT_EQ(v, 0x100u);
}

TEST_F(DataPath, UnsignalledRequestsReportNothingAndFreeTheirRoomWithTheNext)
{
	std::memset(a, 1, 64);
	for (int i = 0; i < 20; i++) {
		ASSERT_EQ(nicmr_post_write(qa, u(a), 64, ka, u(b), kb, 100 + i, 0), 0) << i;
		if (i % 8 == 7) {
			ASSERT_EQ(nicmr_post_write(qa, u(a), 64, ka, u(b), kb, 1000 + i,
						   NICMR_SEND_SIGNALED),
				  0);
			nicmr_wc wc = wait(cqa);
			EXPECT_EQ(wc.wr_id, uint64_t(1000 + i));
		}
	}
}

TEST_F(DataPath, FullSendQueueSaysNoSpaceUntilPolled)
{
	int posted = 0;
	int rc = 0;
	while ((rc = nicmr_post_write(qa, u(a), 8, ka, u(b), kb, posted, NICMR_SEND_SIGNALED)) == 0)
		posted++;
	EXPECT_EQ(rc, -ENOSPC);
	EXPECT_EQ(posted, 16);
	nicmr_wc wc[32];
	EXPECT_EQ(nicmr_cq_poll(cqa, wc, 32), 16);
	for (int i = 0; i < 16; i++)
		EXPECT_EQ(wc[i].wr_id, uint64_t(i));
	EXPECT_EQ(nicmr_post_write(qa, u(a), 8, ka, u(b), kb, 99, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).wr_id, 99u);
}

TEST_F(DataPath, StaleRemoteKeyGivesRemoteAccessAndLeavesTargetIntact)
{
	std::memset(a, 0x11, 256);
	std::memset(b, 0xcc, 256);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 256, ka, u(b), kb ^ 0xff, 1, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc = wait(cqa);
	EXPECT_EQ(wc.wr_id, 1u);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_ACCESS);
	EXPECT_EQ(wc.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	EXPECT_EQ(wc.byte_len, 0u);
	for (int i = 0; i < 256; i++)
		ASSERT_EQ(static_cast<uint8_t>(b[i]), 0xcc) << i;
	EXPECT_EQ(state(qa), NICMR_QP_ERR);
	EXPECT_EQ(state(qb), NICMR_QP_ERR) << "the responder goes to ERR too";

	/* In ERR every request flushes. */
	ASSERT_EQ(nicmr_post_write(qa, u(a), 256, ka, u(b), kb, 2, 0), 0);
	wc = wait(cqa);
	EXPECT_EQ(wc.wr_id, 2u);
	EXPECT_EQ(wc.status, NICMR_WC_WR_FLUSH);
	EXPECT_EQ(wc.syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);

	/* The requester alone back in RTS meets a responder still in ERR. */
	ASSERT_EQ(nicmr_qp_recover(qa), 0);
	EXPECT_EQ(state(qa), NICMR_QP_RTS);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 256, ka, u(b), kb, 3, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_REMOTE_INVAL_REQ);
	for (int i = 0; i < 256; i++)
		ASSERT_EQ(static_cast<uint8_t>(b[i]), 0xcc) << i;

	ASSERT_EQ(nicmr_qp_recover(qa), 0);
	ASSERT_EQ(nicmr_qp_recover(qb), 0);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 256, ka, u(b), kb, 4, NICMR_SEND_SIGNALED), 0);
	wc = wait(cqa);
	EXPECT_EQ(wc.wr_id, 4u);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(a, b, 256), 0);
}

/* nicmr_wc_syndrome_str names the syndromes of the CQEs above by their status: one distinct name
 * for each status, "success" for 0 and "unknown syndrome" for one nicmr does not know. */
TEST(WcSyndromeStr, NamesEveryKnownSyndromeByItsStatus)
{
	EXPECT_STREQ(nicmr_wc_syndrome_str(0), "success");
	EXPECT_STREQ(nicmr_wc_syndrome_str(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR),
		     "remote access error (key refused: stale, out of bounds or right missing)");
	EXPECT_STREQ(nicmr_wc_syndrome_str(MLX5_CQE_SYNDROME_WR_FLUSH_ERR),
		     "flushed: an earlier request of the pair failed");
	EXPECT_STREQ(nicmr_wc_syndrome_str(0x99), "unknown syndrome");
	EXPECT_STREQ(nicmr_wc_syndrome_str(0xff), "unknown syndrome");
	const uint8_t known[] = {MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
				 MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
				 MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
				 MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
				 MLX5_CQE_SYNDROME_MW_BIND_ERR,
				 MLX5_CQE_SYNDROME_BAD_RESP_ERR,
				 MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR,
				 MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
				 MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
				 MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
				 MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
				 MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
				 MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR};
	std::set<std::string> names{nicmr_wc_syndrome_str(0), nicmr_wc_syndrome_str(0x99)};
	for (uint8_t s : known) {
		const char *n = nicmr_wc_syndrome_str(s);
		ASSERT_NE(n, nullptr);
		EXPECT_TRUE(names.insert(n).second)
			<< "syndrome 0x" << std::hex << int(s) << ": " << n;
	}
}

TEST_F(DataPath, RightsTheRemoteKeyLacksCompleteWithRemoteAccess)
{
	/* fi_mr family: REMOTE_READ alone grants no remote write and no atomics. */
	ASSERT_EQ(nicmr_mr_reg(pd, b + kLen, 4096, NICMR_ACCESS_REMOTE_READ, 0, 0, &extra), 0);
	const uint32_t kr = nicmr_mr_key(extra);
	char *t = b + kLen;
	std::memset(t, 0xcc, 4096);
	for (int op = 0; op < 3; op++) {
		int rc = op == 0   ? nicmr_post_write(qa, u(a), 64, ka, u(t), kr, op,
						      NICMR_SEND_SIGNALED)
			 : op == 1 ? nicmr_post_atomic_fadd(qa, u(a), ka, u(t), kr, 1, op,
							    NICMR_SEND_SIGNALED)
				   : nicmr_post_atomic_cswap(qa, u(a), ka, u(t), kr, 0, 1, op,
							     NICMR_SEND_SIGNALED);
		ASSERT_EQ(rc, 0) << op;
		nicmr_wc wc = wait(cqa);
		EXPECT_EQ(wc.status, NICMR_WC_REMOTE_ACCESS) << op;
		EXPECT_EQ(wc.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR) << op;
		for (int i = 0; i < 4096; i++)
			ASSERT_EQ(static_cast<uint8_t>(t[i]), 0xcc) << op << " " << i;
		ASSERT_EQ(nicmr_qp_recover(qa), 0);
		ASSERT_EQ(nicmr_qp_recover(qb), 0);
	}
	/* Reading is what the key allows. */
	std::memset(a, 0, 64);
	ASSERT_EQ(nicmr_post_read(qa, u(a), 64, ka, u(t), kr, 9, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(static_cast<uint8_t>(a[63]), 0xcc);
}

/* The requester's refused completions are recorded under the rkey they carried: the right
 * each kind of request needed, how many, the peer (remote QP and port) and the posting QP. */
TEST_F(DataPath, RefusedRemoteKeysAreRecordedWithRightCountAndPeer)
{
	nicmr_key_violation v[4] = {};
	uint64_t dropped = 99;
	ASSERT_EQ(nicmr_key_violations(dev, v, 4, &dropped), 0) << "nothing refused yet";
	EXPECT_EQ(dropped, 0u);

	ASSERT_EQ(nicmr_mr_reg(pd, b + kLen, 4096, NICMR_ACCESS_REMOTE_READ, 0, 0, &extra), 0);
	const uint32_t kr = nicmr_mr_key(extra);
	const uint64_t t = u(b + kLen);
	/* Two writes and one fetch-and-add through a read-only key; a read it allows. */
	for (int i = 0; i < 3; i++) {
		const int rc =
			i < 2 ? nicmr_post_write(qa, u(a), 64, ka, t, kr, i, NICMR_SEND_SIGNALED)
			      : nicmr_post_atomic_fadd(qa, u(a), ka, t, kr, 1, i,
						       NICMR_SEND_SIGNALED);
		ASSERT_EQ(rc, 0) << i;
		EXPECT_EQ(wait(cqa).status, NICMR_WC_REMOTE_ACCESS) << i;
		ASSERT_EQ(nicmr_qp_recover(qa), 0);
		ASSERT_EQ(nicmr_qp_recover(qb), 0);
	}
	ASSERT_EQ(nicmr_post_read(qa, u(a), 64, ka, t, kr, 9, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	/* From port 2 to port 1 through a stale key: a second key, the other peer. */
	ASSERT_EQ(nicmr_post_write(qb, u(b), 8, kb, u(a), ka ^ 0xff, 5, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqb).status, NICMR_WC_REMOTE_ACCESS);

	ASSERT_EQ(nicmr_key_violations(dev, v, 4, &dropped), 2);
	EXPECT_EQ(dropped, 0u);
	std::sort(v, v + 2,
		  [&](const auto &x, const auto &y) { return x.key == kr && y.key != kr; });
	EXPECT_EQ(v[0].key, kr);
	EXPECT_EQ(v[0].count, 3u);
	EXPECT_EQ(v[0].access, uint64_t{NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_REMOTE_ATOMIC});
	EXPECT_EQ(v[0].peer_port, 2u);
	EXPECT_EQ(v[0].peer_qpn, nicmr_qp_num(qb));
	EXPECT_EQ(v[0].local_qpn, nicmr_qp_num(qa));
	EXPECT_EQ(v[1].key, ka ^ 0xff);
	EXPECT_EQ(v[1].count, 1u);
	EXPECT_EQ(v[1].access, uint64_t{NICMR_ACCESS_REMOTE_WRITE});
	EXPECT_EQ(v[1].peer_port, 1u);
	EXPECT_EQ(v[1].peer_qpn, nicmr_qp_num(qa));
	EXPECT_EQ(v[1].local_qpn, nicmr_qp_num(qb));

	/* Room for one: the count of every key, one entry written; no room asked, none. */
	nicmr_key_violation one[2] = {};
	ASSERT_EQ(nicmr_key_violations(dev, one, 1, nullptr), 2);
	EXPECT_NE(one[0].key, 0u);
	EXPECT_EQ(one[1].key, 0u) << "written past n";
	EXPECT_EQ(nicmr_key_violations(dev, nullptr, 0, nullptr), 2);
	EXPECT_EQ(nicmr_key_violations(nullptr, v, 4, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_key_violations(dev, nullptr, 1, nullptr), -EINVAL);
	/* The responder's record (nicmr_key_refusals) holds wire refusals only: the loopback's
	 * are not in it; and its argument errors. (-EOPNOTSUPP needs a device that is not
	 * emulated, which no machine without a NIC opens.) */
	nicmr_key_refusal r[2]{};
	uint64_t refused_dropped = 1;
	EXPECT_EQ(nicmr_key_refusals(dev, r, 2, &refused_dropped), 0);
	EXPECT_EQ(refused_dropped, 0u);
	EXPECT_EQ(nicmr_key_refusals(nullptr, r, 2, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_key_refusals(dev, nullptr, 1, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_key_refusals(dev, nullptr, 0, nullptr), 0);
}

/* The record holds NICMR_MAX_KEY_VIOLATIONS keys; refusals of further keys are counted as
 * dropped, and recorded keys still count theirs. */
TEST_F(DataPath, KeyViolationsBeyondTheTableAreCountedAsDropped)
{
	const uint32_t n = NICMR_MAX_KEY_VIOLATIONS + 3;
	for (uint32_t i = 0; i < n; i++) {
		/* Stale variants of B's index and of indices nobody registered: all refused. */
		const uint32_t bad = ((i + 0x100) << 8) | 0x5a;
		ASSERT_EQ(nicmr_post_write(qa, u(a), 8, ka, u(b), bad, i, NICMR_SEND_SIGNALED), 0);
		ASSERT_EQ(wait(cqa).status, NICMR_WC_REMOTE_ACCESS) << i;
		ASSERT_EQ(nicmr_qp_recover(qa), 0);
		ASSERT_EQ(nicmr_qp_recover(qb), 0);
	}
	std::vector<nicmr_key_violation> v(NICMR_MAX_KEY_VIOLATIONS);
	uint64_t dropped = 0;
	ASSERT_EQ(nicmr_key_violations(dev, v.data(), NICMR_MAX_KEY_VIOLATIONS, &dropped),
		  int(NICMR_MAX_KEY_VIOLATIONS));
	EXPECT_EQ(dropped, 3u);
	uint64_t total = 0;
	for (const auto &e : v)
		total += e.count;
	EXPECT_EQ(total, NICMR_MAX_KEY_VIOLATIONS);
}

TEST_F(DataPath, RemoteAccessOutsideTheRegionIsRefused)
{
	std::memset(b + kLen - 8, 0x77, 8);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 16, ka, u(b) + kLen - 8, kb, 1, NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_REMOTE_ACCESS);
	for (int i = 0; i < 8; i++)
		EXPECT_EQ(b[kLen - 8 + i], 0x77);
}

TEST_F(DataPath, LocalKeyIsCheckedBeforeAnythingIsPosted)
{
	EXPECT_EQ(nicmr_post_write(qa, u(a), 64, ka ^ 0xff, u(b), kb, 1, NICMR_SEND_SIGNALED),
		  -ENOKEY);
	EXPECT_EQ(nicmr_post_write(qa, u(a) + kLen - 8, 16, ka, u(b), kb, 1, NICMR_SEND_SIGNALED),
		  -ERANGE);
	/* fi_mr family WRITE: local read only, so no READ may scatter into it. */
	ASSERT_EQ(nicmr_mr_reg(pd, b + kLen, 4096, NICMR_ACCESS_WRITE, 0, 0, &extra), 0);
	EXPECT_EQ(nicmr_post_read(qa, u(b + kLen), 64, nicmr_mr_key(extra), u(b), kb, 1,
				  NICMR_SEND_SIGNALED),
		  -EACCES);
	EXPECT_EQ(nicmr_post_atomic_fadd(qa, u(b + kLen), nicmr_mr_key(extra), u(b), kb, 1, 1,
					 NICMR_SEND_SIGNALED),
		  -EACCES);
	nicmr_wc wc;
	EXPECT_EQ(nicmr_cq_poll(cqa, &wc, 1), 0) << "nothing was posted";
	EXPECT_EQ(state(qa), NICMR_QP_RTS);
}

TEST_F(DataPath, BadPostingArgumentsGetTheirCodes)
{
	const unsigned s = NICMR_SEND_SIGNALED;
	EXPECT_EQ(nicmr_post_write(nullptr, u(a), 8, ka, u(b), kb, 0, s), -EINVAL);
	EXPECT_EQ(nicmr_post_write(qa, u(a), 0, ka, u(b), kb, 0, s), -EINVAL);
	EXPECT_EQ(nicmr_post_write(qa, u(a), 8, ka, u(b), kb, 0, 1u << 9), -EINVAL);
	EXPECT_EQ(nicmr_post_write(qa, u(a), NICMR_MAX_INLINE + 1, ka, u(b), kb, 0,
				   s | NICMR_SEND_INLINE),
		  -EINVAL);
	EXPECT_EQ(nicmr_post_read(qa, u(a), 8, ka, u(b), kb, 0, s | NICMR_SEND_INLINE), -EINVAL);
	EXPECT_EQ(nicmr_post_read(qa, u(a), 0, ka, u(b), kb, 0, s), -EINVAL);
	EXPECT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(b) + 4, kb, 1, 0, s), -EINVAL);
	EXPECT_EQ(nicmr_post_atomic_fadd(qa, u(a) + 4, ka, u(b), kb, 1, 0, s), -EINVAL);
	EXPECT_EQ(nicmr_post_atomic_cswap(nullptr, u(a), ka, u(b), kb, 0, 1, 0, s), -EINVAL);
	nicmr_wc wc;
	EXPECT_EQ(nicmr_cq_poll(cqa, &wc, 1), 0);
	EXPECT_EQ(nicmr_cq_poll(nullptr, &wc, 1), -EINVAL);
	EXPECT_EQ(nicmr_cq_poll(cqa, nullptr, 1), -EINVAL);
	EXPECT_EQ(nicmr_cq_poll(cqa, &wc, -1), -EINVAL);
	EXPECT_EQ(nicmr_cq_poll(cqa, nullptr, 0), 0);

	nicmr_qp *lone = nullptr;
	ASSERT_EQ(nicmr_qp_create(pd, 1, cqa, 4, &lone), 0);
	EXPECT_EQ(nicmr_post_write(lone, u(a), 8, ka, u(b), kb, 0, s), -ENOTCONN);
	EXPECT_EQ(nicmr_qp_recover(lone), -EINVAL) << "never connected";
	EXPECT_EQ(nicmr_qp_destroy(lone), 0);
}

TEST_F(DataPath, BadQueueArgumentsGetTheirCodes)
{
	nicmr_cq *cq = nullptr;
	EXPECT_EQ(nicmr_cq_create(nullptr, 8, &cq), -EINVAL);
	EXPECT_EQ(nicmr_cq_create(dev, 8, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_cq_create(dev, 1, &cq), -EINVAL);
	EXPECT_EQ(nicmr_cq_create(dev, NICMR_MAX_CQ_DEPTH + 1, &cq), -EINVAL);
	EXPECT_EQ(cq, nullptr);
	EXPECT_EQ(nicmr_cq_destroy(nullptr), -EINVAL);

	nicmr_qp *qp = nullptr;
	EXPECT_EQ(nicmr_qp_create(nullptr, 1, cqa, 8, &qp), -EINVAL);
	EXPECT_EQ(nicmr_qp_create(pd, 0, cqa, 8, &qp), -EINVAL);
	EXPECT_EQ(nicmr_qp_create(pd, 3, cqa, 8, &qp), -EINVAL);
	EXPECT_EQ(nicmr_qp_create(pd, 1, nullptr, 8, &qp), -EINVAL);
	EXPECT_EQ(nicmr_qp_create(pd, 1, cqa, 1, &qp), -EINVAL);
	EXPECT_EQ(nicmr_qp_create(pd, 1, cqa, 128, &qp), -EINVAL) << "deeper than the CQ (64)";
	EXPECT_EQ(nicmr_qp_create(pd, 1, cqa, 8, nullptr), -EINVAL);
	EXPECT_EQ(qp, nullptr);
	EXPECT_EQ(nicmr_qp_destroy(nullptr), -EINVAL);

	ASSERT_EQ(nicmr_qp_create(pd, 1, cqa, 8, &qp), 0);
	EXPECT_EQ(nicmr_qp_connect(nullptr, 2, nicmr_qp_num(qb)), -EINVAL);
	EXPECT_EQ(nicmr_qp_connect(qp, 2, 0xabcdef), -ENOENT);
	EXPECT_EQ(nicmr_qp_connect(qp, 1, nicmr_qp_num(qb)), -EINVAL) << "qb is on port 2";
	EXPECT_EQ(nicmr_qp_connect(qa, 2, nicmr_qp_num(qb)), -EINVAL) << "qa is not in RESET";
	uint32_t st = 0;
	EXPECT_EQ(nicmr_qp_state(qp, &st), 0);
	EXPECT_EQ(st, uint32_t{NICMR_QP_RESET});
	EXPECT_EQ(nicmr_qp_state(qp, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_qp_state(nullptr, &st), -EINVAL);
	EXPECT_EQ(nicmr_qp_destroy(qp), 0);
	EXPECT_EQ(nicmr_qp_num(nullptr), 0u);
	EXPECT_EQ(nicmr_qp_port(qb), 2u);
	EXPECT_EQ(nicmr_cq_num(nullptr), 0u);
	EXPECT_NE(nicmr_cq_num(cqa), 0u);
}

TEST_F(DataPath, ObjectsBelowKeepTheirParentsAlive)
{
	EXPECT_EQ(nicmr_cq_destroy(cqa), -EBUSY) << "qa reports to it";
	nicmr_pd *other = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &other), 0);
	nicmr_qp *qp = nullptr;
	ASSERT_EQ(nicmr_qp_create(other, 2, cqb, 8, &qp), 0);
	EXPECT_EQ(nicmr_pd_free(other), -EBUSY) << "a QP of it lives";
	EXPECT_EQ(nicmr_qp_destroy(qp), 0);
	EXPECT_EQ(nicmr_pd_free(other), 0);

	/* Device close refuses while a CQ lives (and everything else is gone). */
	nicmr_device *d2 = nullptr;
	ASSERT_EQ(nicmr_device_open(kSpec, &d2), 0);
	nicmr_cq *cq = nullptr;
	ASSERT_EQ(nicmr_cq_create(d2, 8, &cq), 0);
	EXPECT_EQ(nicmr_device_close(d2), -EBUSY);
	EXPECT_EQ(nicmr_cq_destroy(cq), 0);
	EXPECT_EQ(nicmr_device_close(d2), 0);
}

TEST_F(DataPath, CqsBeyondTheDevicesUarsAreRefusedWithNoSpace)
{
	std::vector<nicmr_cq *> cqs;
	nicmr_cq *cq = nullptr;
	int rc = 0;
	while (cqs.size() < 64 && (rc = nicmr_cq_create(dev, 8, &cq)) == 0)
		cqs.push_back(cq);
	EXPECT_EQ(rc, -ENOSPC);
	/* 32 UARs in the model: the device's async EQ (page requests, its own UAR as rdma-core's
	 * create_async_eqs) holds one, its completion EQ one, the key programmer one, cqa and
	 * cqb two. */
	EXPECT_EQ(cqs.size(), 27u);
	for (nicmr_cq *c : cqs)
		EXPECT_EQ(nicmr_cq_destroy(c), 0);
	ASSERT_EQ(nicmr_cq_create(dev, 8, &cq), 0) << "their UARs are back";
	EXPECT_EQ(nicmr_cq_destroy(cq), 0);
}

TEST_F(DataPath, QueuesComeAndGoWithoutLeaking)
{
	const nicmr_device_stats before = stats(dev);
	for (int i = 0; i < 40; i++) {
		nicmr_cq *cq = nullptr;
		nicmr_qp *qp = nullptr;
		ASSERT_EQ(nicmr_cq_create(dev, 16, &cq), 0) << i;
		ASSERT_EQ(nicmr_qp_create(pd, 1 + i % 2, cq, 16, &qp), 0) << i;
		ASSERT_EQ(nicmr_qp_connect(qp, 1 + i % 2, nicmr_qp_num(qp)), 0) << "self loop";
		ASSERT_EQ(nicmr_post_write(qp, u(a), 64, ka, u(b), kb, i, NICMR_SEND_SIGNALED), 0);
		EXPECT_EQ(wait(cq).status, NICMR_WC_SUCCESS);
		ASSERT_EQ(nicmr_qp_destroy(qp), 0);
		ASSERT_EQ(nicmr_cq_destroy(cq), 0);
	}
	expect_same(before, stats(dev));
}

TEST_F(DataPath, OneCqServesSeveralQps)
{
	nicmr_qp *q2 = nullptr, *r2 = nullptr;
	ASSERT_EQ(nicmr_qp_create(pd, 1, cqa, 16, &q2), 0);
	ASSERT_EQ(nicmr_qp_create(pd, 2, cqb, 16, &r2), 0);
	ASSERT_EQ(nicmr_qp_connect(q2, 2, nicmr_qp_num(r2)), 0);
	ASSERT_EQ(nicmr_qp_connect(r2, 1, nicmr_qp_num(q2)), 0);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 8, ka, u(b), kb, 1, NICMR_SEND_SIGNALED), 0);
	ASSERT_EQ(nicmr_post_write(q2, u(a), 8, ka, u(b), kb, 2, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc[4];
	ASSERT_EQ(nicmr_cq_poll(cqa, wc, 4), 2);
	EXPECT_EQ(wc[0].wr_id, 1u);
	EXPECT_EQ(wc[0].qp_num, nicmr_qp_num(qa));
	EXPECT_EQ(wc[1].wr_id, 2u);
	EXPECT_EQ(wc[1].qp_num, nicmr_qp_num(q2));
	EXPECT_EQ(nicmr_qp_destroy(q2), 0);
	EXPECT_EQ(nicmr_qp_destroy(r2), 0);
}

/* The same data path with the device model on its own thread (doorbells delivered later). */
class DataPathThreaded : public DataPath {
protected:
	const char *spec() const override { return "emu:mkeys=1024,delivery=thread"; }
};

/* A device whose atomics work on big-endian words only (no host-endianness capability). */
class DataPathBigEndianAtomics : public DataPath {
protected:
	const char *spec() const override { return "emu:mkeys=1024,atomic_endian=big"; }
};

TEST_F(DataPathBigEndianAtomics, AtomicsAreRefusedAndNothingIsPosted)
{
	nicmr_device_attr attr{};
	ASSERT_EQ(nicmr_device_query(dev, &attr), 0);
	EXPECT_EQ(attr.atomic_mode, uint32_t{NICMR_ATOMIC_BIG_ENDIAN});
	uint64_t v = 40;
	std::memcpy(b + 64, &v, 8);
	std::memset(a, 0x5a, 16);
	EXPECT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(b) + 64, kb, 2, 1, NICMR_SEND_SIGNALED),
		  -EOPNOTSUPP);
	EXPECT_EQ(
		nicmr_post_atomic_cswap(qa, u(a), ka, u(b) + 64, kb, 40, 7, 2, NICMR_SEND_SIGNALED),
		-EOPNOTSUPP);
	nicmr_wc wc[2];
	EXPECT_EQ(nicmr_cq_poll(cqa, wc, 2), 0) << "nothing was posted";
	std::memcpy(&v, b + 64, 8);
	EXPECT_EQ(v, 40u);
	EXPECT_EQ(static_cast<unsigned char>(a[0]), 0x5a);
	/* The rest of the data path is unaffected. */
	ASSERT_EQ(nicmr_post_write(qa, u(a), 16, ka, u(b), kb, 3, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(a, b, 16), 0);
}

TEST_F(DataPathThreaded, WriteReadAndAtomicsComplete)
{
	for (size_t i = 0; i < kLen; i++)
		a[i] = static_cast<char>(i * 11);
	ASSERT_EQ(nicmr_post_write(qa, u(a), kLen, ka, u(b), kb, 1, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(a, b, kLen), 0);
	std::memset(a, 0, 4096);
	ASSERT_EQ(nicmr_post_read(qa, u(a), 4096, ka, u(b), kb, 2, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).wr_id, 2u);
	EXPECT_EQ(std::memcmp(a, b, 4096), 0);
	uint64_t v = 9;
	std::memcpy(b + 8, &v, 8);
	ASSERT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(b) + 8, kb, 1, 3, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	std::memcpy(&v, b + 8, 8);
	EXPECT_EQ(v, 10u);
	std::memcpy(&v, a, 8);
	EXPECT_EQ(v, 9u);
}

TEST_F(DataPathThreaded, StaleKeyFailsAndBothQpsRecover)
{
	std::memset(b, 0xcc, 64);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 64, ka, u(b), kb + 1, 1, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc = wait(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_REMOTE_ACCESS);
	EXPECT_EQ(static_cast<uint8_t>(b[0]), 0xcc);
	ASSERT_EQ(nicmr_qp_recover(qa), 0);
	ASSERT_EQ(nicmr_qp_recover(qb), 0);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 64, ka, u(b), kb, 2, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(a, b, 64), 0);
}

/* ---- Memory windows ---------------------------------------------------------------------- */

/* An MR over c = base + 2 * kLen that allows windows, and a window in the fixture's PD. */
class Windows : public DataPath {
protected:
	void SetUp() override
	{
		DataPath::SetUp();
		c = base + 2 * kLen;
		ASSERT_EQ(nicmr_mr_reg(pd, c, kLen, kAll | NICMR_ACCESS_MW_BIND, 0, 0, &extra), 0);
		ASSERT_EQ(nicmr_mw_alloc(pd, &mw), 0);
	}
	void TearDown() override
	{
		if (mw) {
			if (nicmr_mw_rkey(mw) != 0) {
				EXPECT_EQ(nicmr_mw_invalidate(mw), 0);
			}
			EXPECT_EQ(nicmr_mw_free(mw), 0);
		}
		DataPath::TearDown();
	}
	/* RDMA WRITE of len bytes of a to raddr under rkey; the completion's status. */
	uint8_t write(uint64_t raddr, size_t len, uint32_t rkey)
	{
		EXPECT_EQ(nicmr_post_write(qa, u(a), len, ka, raddr, rkey, 1, NICMR_SEND_SIGNALED),
			  0);
		nicmr_wc wc = wait(cqa);
		if (wc.status != NICMR_WC_SUCCESS) {
			EXPECT_EQ(nicmr_qp_recover(qa), 0);
			EXPECT_EQ(nicmr_qp_recover(qb), 0);
		}
		return wc.status;
	}
	char *c = nullptr;
	nicmr_mw *mw = nullptr;
};

TEST_F(Windows, AWindowGrantsRemoteWriteToItsRangeAndNothingAround)
{
	for (size_t i = 0; i < 256; i++)
		a[i] = static_cast<char>(i ^ 0x5a);
	std::memset(c, 0x11, kLen);
	uint32_t rkey = 0;
	ASSERT_EQ(nicmr_mw_bind(mw, extra, u(c) + 4096, 8192, NICMR_ACCESS_REMOTE_WRITE, &rkey), 0);
	EXPECT_NE(rkey, 0u);
	EXPECT_EQ(nicmr_mw_rkey(mw), rkey);
	EXPECT_NE(rkey, nicmr_mr_key(extra)) << "its own key";

	EXPECT_EQ(write(u(c) + 4096 + 10, 200, rkey), NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(c + 4096 + 10, a, 200), 0);
	EXPECT_EQ(write(u(c) + 4096 + 8192 - 100, 200, rkey), NICMR_WC_REMOTE_ACCESS)
		<< "across the window's end";
	EXPECT_EQ(write(u(c), 16, rkey), NICMR_WC_REMOTE_ACCESS)
		<< "inside the MR, before the window";
	for (size_t i = 0; i < 4096; i++)
		ASSERT_EQ(c[i], 0x11) << "byte " << i << " before the window";
	for (size_t i = 4096 + 8192 - 100; i < kLen; i++)
		ASSERT_EQ(c[i], 0x11) << "byte " << i << " from the refused write on";

	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, rkey, u(c) + 4096, 8192, NICMR_ACCESS_REMOTE_WRITE, &iova),
		  0);
	EXPECT_EQ(nicmr_key_lookup(dev, rkey, u(c) + 4096, 8193, NICMR_ACCESS_REMOTE_WRITE, &iova),
		  -ERANGE);
}

TEST_F(Windows, AWindowGrantsOnlyTheRightsItWasBoundWith)
{
	std::memset(c, 0x22, 4096);
	uint32_t rkey = 0;
	ASSERT_EQ(nicmr_mw_bind(mw, extra, u(c), 4096, NICMR_ACCESS_REMOTE_READ, &rkey), 0);
	EXPECT_EQ(write(u(c), 64, rkey), NICMR_WC_REMOTE_ACCESS);
	for (size_t i = 0; i < 4096; i++)
		ASSERT_EQ(c[i], 0x22);
	std::memset(a, 0, 64);
	ASSERT_EQ(nicmr_post_read(qa, u(a), 64, ka, u(c), rkey, 2, NICMR_SEND_SIGNALED), 0);
	nicmr_wc wc = wait(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(a, c, 64), 0);
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, rkey, u(c), 64, NICMR_ACCESS_REMOTE_WRITE, &iova), -EACCES);
	EXPECT_EQ(nicmr_key_lookup(dev, rkey, u(c), 64, NICMR_ACCESS_SEND, &iova), -EACCES)
		<< "a window's key serves no local access";
}

TEST_F(Windows, AWindowsKeyServesNoLocalSge)
{
	uint32_t rkey = 0;
	ASSERT_EQ(nicmr_mw_bind(mw, extra, u(c), 4096,
				NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_REMOTE_WRITE, &rkey),
		  0);
	/* The window's key gathers the payload: lr is 0 in its mkey. */
	ASSERT_EQ(nicmr_post_write(qa, u(c), 64, rkey, u(b), kb, 3, NICMR_SEND_SIGNALED), -EACCES)
		<< "the host's check of the local SGE refuses it before the device sees it";
}

TEST_F(Windows, InvalidateRevokesTheKeyForGoodAndARebindGetsANewOne)
{
	uint32_t first = 0, second = 0;
	ASSERT_EQ(nicmr_mw_bind(mw, extra, u(c), 4096, NICMR_ACCESS_REMOTE_WRITE, &first), 0);
	EXPECT_EQ(write(u(c), 8, first), NICMR_WC_SUCCESS);
	ASSERT_EQ(nicmr_mw_invalidate(mw), 0);
	EXPECT_EQ(nicmr_mw_rkey(mw), 0u);
	EXPECT_EQ(write(u(c), 8, first), NICMR_WC_REMOTE_ACCESS) << "the device refuses it";
	uint64_t iova = 0;
	EXPECT_EQ(nicmr_key_lookup(dev, first, u(c), 8, NICMR_ACCESS_REMOTE_WRITE, &iova), -ENOKEY);
	EXPECT_EQ(nicmr_mw_invalidate(mw), -ENOENT);

	ASSERT_EQ(nicmr_mw_bind(mw, extra, u(c) + 8192, 4096, NICMR_ACCESS_REMOTE_WRITE, &second),
		  0);
	EXPECT_NE(second, first);
	EXPECT_EQ(write(u(c) + 8192, 8, second), NICMR_WC_SUCCESS);
	EXPECT_EQ(write(u(c) + 8192, 8, first), NICMR_WC_REMOTE_ACCESS);
}

TEST_F(Windows, ABoundWindowKeepsItsMrItselfAndItsPdAlive)
{
	const uint64_t windows = stats(dev).mws;
	EXPECT_EQ(windows, 1u);
	uint32_t rkey = 0;
	ASSERT_EQ(nicmr_mw_bind(mw, extra, u(c), 4096, NICMR_ACCESS_REMOTE_READ, &rkey), 0);
	EXPECT_EQ(nicmr_mr_dereg(extra), -EBUSY);
	EXPECT_EQ(nicmr_mw_free(mw), -EBUSY);
	EXPECT_EQ(nicmr_mw_bind(mw, extra, u(c), 4096, NICMR_ACCESS_REMOTE_READ, &rkey), -EBUSY);
	ASSERT_EQ(nicmr_mw_invalidate(mw), 0);
	EXPECT_EQ(nicmr_mr_dereg(extra), 0);
	extra = nullptr;

	nicmr_pd *pd2 = nullptr;
	nicmr_mw *mw2 = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd2), 0);
	ASSERT_EQ(nicmr_mw_alloc(pd2, &mw2), 0);
	EXPECT_EQ(stats(dev).mws, windows + 1);
	EXPECT_EQ(nicmr_pd_free(pd2), -EBUSY) << "a window lives in it";
	EXPECT_EQ(nicmr_mw_free(mw2), 0);
	EXPECT_EQ(nicmr_pd_free(pd2), 0);
	EXPECT_EQ(stats(dev).mws, windows);
}

TEST_F(Windows, RefusedBindsGiveTheirCodesAndLeaveNothing)
{
	nicmr_mr *plain = nullptr; /* no MW_BIND */
	ASSERT_EQ(nicmr_mr_reg(pd, c + kLen, 8192, kAll, 0, 0, &plain), 0);
	nicmr_mr *ro = nullptr; /* MW_BIND, remote read only */
	ASSERT_EQ(nicmr_mr_reg(pd, c + kLen + 8192, 8192,
			       NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_MW_BIND, 0, 0, &ro),
		  0);
	nicmr_pd *pd2 = nullptr;
	nicmr_mw *other = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd2), 0);
	ASSERT_EQ(nicmr_mw_alloc(pd2, &other), 0);

	const auto before = stats(dev);
	const uint64_t w = NICMR_ACCESS_REMOTE_WRITE;
	uint32_t rkey = 0;
	EXPECT_EQ(nicmr_mw_bind(nullptr, extra, u(c), 64, w, &rkey), -EINVAL);
	EXPECT_EQ(nicmr_mw_bind(mw, nullptr, u(c), 64, w, &rkey), -EINVAL);
	EXPECT_EQ(nicmr_mw_bind(mw, extra, u(c), 64, w, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mw_bind(mw, extra, u(c), 0, w, &rkey), -EINVAL) << "len 0";
	EXPECT_EQ(nicmr_mw_bind(mw, extra, ~uint64_t{0} - 10, 64, w, &rkey), -EINVAL) << "wraps";
	EXPECT_EQ(nicmr_mw_bind(mw, extra, u(c), 64, 0, &rkey), -EINVAL) << "no right";
	EXPECT_EQ(nicmr_mw_bind(mw, extra, u(c), 64, NICMR_ACCESS_LOCAL_WRITE, &rkey), -EINVAL)
		<< "local rights are not a window's";
	EXPECT_EQ(nicmr_mw_bind(mw, extra, u(c), 64, w | NICMR_ACCESS_SEND, &rkey), -EINVAL);
	EXPECT_EQ(nicmr_mw_bind(other, extra, u(c), 64, w, &rkey), -EINVAL) << "MR of another PD";
	EXPECT_EQ(nicmr_mw_bind(mw, plain, u(c) + kLen, 64, w, &rkey), -EACCES)
		<< "MR without MW_BIND";
	EXPECT_EQ(nicmr_mw_bind(mw, ro, u(c) + kLen + 8192, 64, w, &rkey), -EACCES)
		<< "a right the MR does not grant";
	EXPECT_EQ(nicmr_mw_bind(mw, extra, u(c) + kLen - 32, 64, w, &rkey), -ERANGE);
	EXPECT_EQ(nicmr_mw_bind(mw, extra, u(c) - 4096, 64, w, &rkey), -ERANGE);
	EXPECT_EQ(nicmr_mw_rkey(mw), 0u) << "still unbound";
	EXPECT_EQ(nicmr_mw_invalidate(mw), -ENOENT);
	EXPECT_EQ(nicmr_mw_invalidate(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mw_free(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mw_alloc(nullptr, &other), -EINVAL);
	EXPECT_EQ(nicmr_mw_alloc(pd, nullptr), -EINVAL);
	const auto after = stats(dev);
	expect_same(after, before);
	EXPECT_EQ(after.keys_retiring, before.keys_retiring) << "no key was taken";
	EXPECT_EQ(after.mws, before.mws);

	EXPECT_EQ(nicmr_mw_free(other), 0);
	EXPECT_EQ(nicmr_pd_free(pd2), 0);
	EXPECT_EQ(nicmr_mr_dereg(plain), 0);
	EXPECT_EQ(nicmr_mr_dereg(ro), 0);
}

TEST_F(Windows, VectoredMrsTakeNoWindows)
{
	nicmr_mr *vec = nullptr;
	const struct iovec iov[2] = {{c + kLen, 4096}, {c + kLen + 3 * 4096, 4096}};
	ASSERT_EQ(nicmr_mr_regv(pd, iov, 2, kAll | NICMR_ACCESS_MW_BIND, 0, 0, &vec), 0);
	ASSERT_NE(nicmr_mr_layout(vec), 0);
	uint32_t rkey = 0;
	EXPECT_EQ(nicmr_mw_bind(mw, vec, u(c) + kLen, 64, NICMR_ACCESS_REMOTE_WRITE, &rkey),
		  -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mw_rkey(mw), 0u);
	EXPECT_EQ(nicmr_mr_dereg(vec), 0);
}

/* ---- Refresh ----------------------------------------------------------------------------- */

/* An MR over plain mmap'd memory (the slow path) and a thread-free way to see its IOVA. */
class Refresh : public DataPath {
protected:
	void SetUp() override
	{
		DataPath::SetUp();
		ASSERT_NE(plain.get(), nullptr);
		ASSERT_EQ(nicmr_mr_reg(pd, plain.get(), kPlain, kAll, 0, 0, &extra), 0);
	}
	uint64_t iova_of(nicmr_mr *m, uint64_t addr)
	{
		uint64_t iova = 0;
		EXPECT_EQ(nicmr_key_lookup(dev, nicmr_mr_key(m), addr, 1, NICMR_ACCESS_REMOTE_WRITE,
					   &iova),
			  0);
		return iova;
	}
	static constexpr size_t kPlain = 8 * 4096;
	Anon plain{kPlain};
};

TEST_F(Refresh, PlainMemoryIsMappedAnewUnderTheSameKey)
{
	char *p = plain.get();
	const uint32_t key = nicmr_mr_key(extra);
	const uint64_t before = iova_of(extra, u(p));
	const auto st = stats(dev);
	ASSERT_EQ(nicmr_mr_refresh(extra, nullptr, 0), 0);
	EXPECT_EQ(nicmr_mr_key(extra), key) << "the key is kept";
	const uint64_t after = iova_of(extra, u(p));
	EXPECT_NE(after, before) << "a fresh mapping";
	mlx5::MkeyQuery q;
	ASSERT_EQ(dev->drv->query_mkey(mr::mkey_index(key), 1, &q), 0);
	EXPECT_FALSE(q.ctx.free);
	ASSERT_EQ(q.mtt.size(), 1u);
	const uint64_t page = uint64_t{1} << q.ctx.log_page_size;
	EXPECT_EQ(q.mtt[0].iova, after & ~(page - 1)) << "the device translates through it";
	expect_same(stats(dev), st); /* the old mapping and its pins went */

	for (size_t i = 0; i < 512; i++)
		a[i] = static_cast<char>(i * 3);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 512, ka, u(p) + 4000, key, 5, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(p + 4000, a, 512), 0);

	const struct iovec part = {p + 4096, 100};
	ASSERT_EQ(nicmr_mr_refresh(extra, &part, 1), 0) << "a part refreshes the whole";
	EXPECT_NE(iova_of(extra, u(p)), after);
}

TEST_F(Refresh, TheKeyKeepsWorkingWhileRefreshesRun)
{
	/* A second thread writes through the key without pause while this one refreshes: a
	 * refresh that revoked and rebound would make some of its writes fail. */
	char *p = plain.get();
	const uint32_t key = nicmr_mr_key(extra);
	std::atomic<bool> stop{false};
	std::atomic<int> ok{0}, failed{0};
	std::thread writer([&] {
		uint64_t n = 0;
		while (!stop.load()) {
			if (nicmr_post_write(qa, u(a), 64, ka, u(p) + (n % 100) * 64, key, n,
					     NICMR_SEND_SIGNALED) != 0) {
				failed++;
				break;
			}
			n++;
			nicmr_wc wc = wait(cqa);
			(wc.status == NICMR_WC_SUCCESS ? ok : failed)++;
			if (wc.status != NICMR_WC_SUCCESS)
				break;
		}
	});
	/* Refresh once the writer runs, and until it has written 200 times meanwhile (10 s at
	 * most: a loaded machine may schedule it late). */
	const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	while (ok.load() == 0 && failed.load() == 0 && std::chrono::steady_clock::now() < give_up)
		std::this_thread::yield();
	const int first = ok.load();
	int refreshes = 0;
	while ((refreshes < 200 || ok.load() - first < 200) && failed.load() == 0 &&
	       std::chrono::steady_clock::now() < give_up) {
		ASSERT_EQ(nicmr_mr_refresh(extra, nullptr, 0), 0);
		refreshes++;
	}
	stop = true;
	writer.join();
	EXPECT_EQ(failed.load(), 0);
	EXPECT_GE(refreshes, 200);
	EXPECT_GE(ok.load() - first, 200) << "writes while the refreshes ran";
}

TEST_F(Refresh, PoolMemoryHasNothingToRefresh)
{
	const uint64_t before = iova_of(mra, u(a));
	ASSERT_EQ(nicmr_mr_refresh(mra, nullptr, 0), 0);
	EXPECT_EQ(iova_of(mra, u(a)), before);
}

TEST_F(Refresh, RefusalsGiveTheirCodesAndLeaveTheMrWorking)
{
	char *p = plain.get();
	const uint32_t key = nicmr_mr_key(extra);
	const uint64_t iova = iova_of(extra, u(p));
	const auto st = stats(dev);
	const struct iovec zero = {p, 0}, outside = {p + kPlain - 10, 20}, wraps = {p, ~size_t{0}};
	EXPECT_EQ(nicmr_mr_refresh(nullptr, nullptr, 0), -EINVAL);
	EXPECT_EQ(nicmr_mr_refresh(extra, nullptr, 1), -EINVAL);
	EXPECT_EQ(nicmr_mr_refresh(extra, &zero, 1), -EINVAL);
	EXPECT_EQ(nicmr_mr_refresh(extra, &wraps, 1), -EINVAL);
	EXPECT_EQ(nicmr_mr_refresh(extra, &outside, 1), -ERANGE);

	nicmr_mr *sub = nullptr;
	ASSERT_EQ(nicmr_mr_reg_sub(extra, 0, 4096, kAll, 0, 0, &sub), 0);
	EXPECT_EQ(nicmr_mr_refresh(sub, nullptr, 0), -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mr_refresh(extra, nullptr, 0), -EBUSY) << "the sub-MR uses its mapping";
	EXPECT_EQ(nicmr_mr_dereg(sub), 0);

	uint64_t seg_iova = iova_of(extra, u(p));
	const nicmr_iova_seg seg = {seg_iova, 4096};
	nicmr_mr *over = nullptr;
	ASSERT_EQ(nicmr_mr_reg_iova(pd, &seg, 1, kAll, 0, 0, &over), 0);
	EXPECT_EQ(nicmr_mr_refresh(extra, nullptr, 0), -EBUSY) << "an IOVA-list MR uses it";
	EXPECT_EQ(nicmr_mr_dereg(over), 0);

	nicmr_mr *vec = nullptr;
	const struct iovec iov[2] = {{p, 4096}, {p + 2 * 4096, 4096}};
	ASSERT_EQ(nicmr_mr_regv(pd, iov, 2, kAll, 0, 0, &vec), 0);
	EXPECT_EQ(nicmr_mr_refresh(vec, nullptr, 0), -EOPNOTSUPP);
	EXPECT_EQ(nicmr_mr_dereg(vec), 0);

	/* The memory went away: -EFAULT, and the MR is as it was. */
	ASSERT_EQ(mprotect(p + 4096, 4096, PROT_NONE), 0);
	EXPECT_EQ(nicmr_mr_refresh(extra, nullptr, 0), -EFAULT);
	ASSERT_EQ(mprotect(p + 4096, 4096, PROT_READ | PROT_WRITE), 0);

	expect_same(stats(dev), st);
	EXPECT_EQ(nicmr_mr_key(extra), key);
	EXPECT_EQ(iova_of(extra, u(p)), iova);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 64, ka, u(p), key, 6, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait(cqa).status, NICMR_WC_SUCCESS);
}

TEST(RefreshCmd, TheCommandProgrammerCannotModifyInPlace)
{
	nicmr_device *d = nullptr;
	nicmr_pd *p = nullptr;
	nicmr_mr *m = nullptr;
	Anon mem(4096);
	ASSERT_EQ(nicmr_device_open("emu:mkeys=1024,programmer=cmd,mkey_by_name=1", &d), 0);
	ASSERT_EQ(nicmr_pd_alloc(d, &p), 0);
	ASSERT_EQ(nicmr_mr_reg(p, mem.get(), 4096, kAll, 0, 0, &m), 0);
	const auto st = stats(d);
	EXPECT_EQ(nicmr_mr_refresh(m, nullptr, 0), -EOPNOTSUPP);
	expect_same(stats(d), st);
	EXPECT_EQ(nicmr_mr_dereg(m), 0);
	EXPECT_EQ(nicmr_pd_free(p), 0);
	EXPECT_EQ(nicmr_device_close(d), 0);
}

} // namespace
} // namespace nicmr::test
