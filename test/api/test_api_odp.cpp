/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * On-demand-paging MRs (NICMR_ACCESS_ON_DEMAND) and nicmr_advise_mr: registration pins and
 * maps nothing and leaves every translation not present; each advice makes exactly the pages
 * it should present, with the rights it should; data moves through RDMA between the two ports
 * once they are; every error of ibv_advise_mr(3) with its code, entry by entry.
 */
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "api_wiring.h"
#include "emu_mlx5.h"
#include "mlx5_dp_commands.h"
#include "test_api_util.h"

namespace nicmr::test {
namespace {

/* AddressSanitizer maps memory of its own wherever the kernel offers room. (Its mlock, which
 * locks nothing, is not in the way: the slow maps lock with the system calls.) */
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizedAllocator = true;
#else
constexpr bool kSanitizedAllocator = false;
#endif

constexpr size_t kPage = 4096;
constexpr const char *kOdpSpec = "emu:mkeys=1024,mkey_by_name=1";

class Odp : public ApiFixture {
protected:
	const char *spec() const override { return kOdpSpec; }
	void SetUp() override
	{
		ApiFixture::SetUp();
		if (HasFatalFailure())
			return;
		connect_ports(dev, pd, &cqa, &cqb, &qa, &qb);
		if (HasFatalFailure())
			return;
		a = base;
		ASSERT_EQ(nicmr_mr_reg(pd, a, 64 << 10, kAll, 0, 0, &mra), 0);
		ka = nicmr_mr_key(mra);
	}
	void TearDown() override
	{
		for (nicmr_mr *m : {mra, odp})
			if (m) {
				EXPECT_EQ(nicmr_mr_dereg(m), 0);
			}
		destroy_queues({qa, qb}, {cqa, cqb});
		ApiFixture::TearDown();
	}
	nicmr_device_stats stats()
	{
		nicmr_device_stats s{};
		EXPECT_EQ(nicmr_device_get_stats(dev, &s), 0);
		return s;
	}
	/* The device model's data-path counters (page faults raised and resumed). */
	emu::DpStats dp() { return dev->emu->device().data_path().stats(); }
	/* The device's MTT entries 0 .. n - 1 of key. */
	std::vector<mlx5::MttEntry> entries(uint32_t key, size_t n)
	{
		mlx5::MkeyQuery q;
		EXPECT_EQ(dev->drv->query_mkey(mr::mkey_index(key), n, &q), 0);
		EXPECT_GE(q.mtt.size(), n);
		q.mtt.resize(n);
		return q.mtt;
	}
	int advise(uint32_t advice, uint64_t addr, uint32_t len, uint32_t lkey,
		   uint32_t flags = NICMR_ADVISE_MR_FLAG_FLUSH)
	{
		nicmr_sge g{addr, len, lkey};
		return nicmr_advise_mr(pd, advice, flags, &g, 1);
	}
	/* Port 1 writes len bytes of A into raddr of port 2's memory (key rkey); the status. */
	uint8_t write_to(uint64_t raddr, uint32_t rkey, size_t len)
	{
		EXPECT_EQ(nicmr_post_write(qa, u(a), len, ka, raddr, rkey, 7, NICMR_SEND_SIGNALED),
			  0);
		return wait_wc(cqa).status;
	}
	uint8_t read_from(uint64_t raddr, uint32_t rkey, size_t len)
	{
		EXPECT_EQ(nicmr_post_read(qa, u(a), len, ka, raddr, rkey, 8, NICMR_SEND_SIGNALED),
			  0);
		return wait_wc(cqa).status;
	}
	/* A QP in ERR after a refused request is replaced by a fresh pair. */
	void reconnect()
	{
		destroy_queues({qa, qb}, {cqa, cqb});
		qa = qb = nullptr;
		cqa = cqb = nullptr;
		connect_ports(dev, pd, &cqa, &cqb, &qa, &qb);
	}
	nicmr_cq *cqa = nullptr, *cqb = nullptr;
	nicmr_qp *qa = nullptr, *qb = nullptr;
	nicmr_mr *mra = nullptr, *odp = nullptr;
	char *a = nullptr;
	uint32_t ka = 0;
};

TEST_F(Odp, DeviceSaysItPagesOnDemand)
{
	nicmr_device_attr at{};
	ASSERT_EQ(nicmr_device_query(dev, &at), 0);
	EXPECT_EQ(at.odp, 1u);
}

TEST_F(Odp, RegistrationPinsAndMapsNothingAndNoPageIsPresent)
{
	Untouched m(1 << 20);
	ASSERT_NE(m.get(), nullptr);
	const auto before = stats();
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 1 << 20, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	const auto after = stats();
	EXPECT_EQ(after.mrs, before.mrs + 1);
	EXPECT_EQ(after.pinned_pages, before.pinned_pages);
	EXPECT_EQ(after.slow_mappings, before.slow_mappings);
	EXPECT_EQ(after.iommu_mappings, before.iommu_mappings);
	EXPECT_EQ(nicmr_mr_in_pool(odp), 0);
	EXPECT_EQ(nicmr_mr_len(odp), size_t{1} << 20);
	for (const auto &e : entries(nicmr_mr_key(odp), 256)) {
		EXPECT_FALSE(e.rd_en);
		EXPECT_FALSE(e.wr_en);
	}
	/* Nothing was faulted in either. */
	std::vector<unsigned char> v(256);
	ASSERT_EQ(mincore(m.get(), 1 << 20, v.data()), 0);
	for (unsigned char c : v)
		EXPECT_EQ(c & 1, 0);
	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
	odp = nullptr;
	expect_released(stats(), before);
}

TEST_F(Odp, MemoryNotMappedYetRegisters)
{
	if (kSanitizedAllocator)
		GTEST_SKIP()
			<< "AddressSanitizer's allocator maps its own memory into the freed range "
			   "before the advice, so the range cannot be kept unmapped";
	/* A range that stays unmapped: the kernel places new mappings top-down below the stack,
	 * so a range freed up there is where the next small mapping of any thread (the device's
	 * included) lands, and the advice then finds memory. 16 TiB is far below all of them;
	 * where it cannot be had, any free range. */
	void *p = mmap(reinterpret_cast<void *>(uintptr_t{1} << 44), 8 * kPage,
		       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
		       -1, 0);
	if (p == MAP_FAILED)
		p = mmap(nullptr, 8 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
	ASSERT_NE(p, MAP_FAILED);
	ASSERT_EQ(munmap(p, 8 * kPage), 0);
	ASSERT_EQ(nicmr_mr_reg(pd, p, 8 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	/* Until it is mapped, advice cannot make it present. */
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(p), kPage, nicmr_mr_key(odp)), -EFAULT);
}

TEST_F(Odp, OtherRegistrationFlagsAreRefused)
{
	Untouched m(4 * kPage);
	nicmr_mr *mr = nullptr;
	for (uint64_t f : {uint64_t(NICMR_MR_ZERO_BASED), uint64_t(NICMR_MR_SINGLE_USE),
			   uint64_t(NICMR_MR_RMA_EVENT)})
		EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, f, 0,
				       &mr),
			  -EOPNOTSUPP)
			<< f;
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 0, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &mr), -EINVAL);
	/* The access rules of ibv_reg_mr(3) still hold: remote write needs local write. */
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage,
			       NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_REMOTE_ATOMIC |
				       NICMR_ACCESS_ON_DEMAND,
			       0, 0, &mr),
		  -EINVAL);
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), NICMR_ODP_MAX_LEN + 1, kAll | NICMR_ACCESS_ON_DEMAND, 0,
			       0, &mr),
		  -EINVAL);
	EXPECT_EQ(mr, nullptr);
}

TEST_F(Odp, RdmaWriteIntoPagesNeverAdvisedIsServedByAPageFault)
{
	Untouched m(4 * kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	const auto before = stats();
	const auto f0 = dp();
	for (size_t i = 0; i < 2 * kPage; i++)
		a[i] = char(i * 13 + 5);
	/* Pages 1 and 2: the responder's RDMA fault names the rkey and the range; the poll that
	 * finds the CQ empty serves it, and the held WQE then completes. */
	EXPECT_EQ(write_to(u(m.get()) + kPage + 100, key, 2 * kPage - 200), NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(m.get() + kPage + 100, a, 2 * kPage - 200), 0);
	const auto f1 = dp();
	EXPECT_EQ(f1.page_faults, f0.page_faults + 1);
	EXPECT_EQ(f1.pf_resumes, f0.pf_resumes + 1);
	EXPECT_EQ(f1.pf_errors, f0.pf_errors);
	EXPECT_EQ(dev->emu->device().data_path().page_faults_outstanding(), 0u);
	/* Exactly the two pages became present, writable, pinned. */
	const auto e = entries(key, 4);
	for (size_t i = 0; i < 4; i++) {
		EXPECT_EQ(e[i].rd_en, i == 1 || i == 2) << i;
		EXPECT_EQ(e[i].wr_en, i == 1 || i == 2) << i;
	}
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 2);
	/* Present now: the same write raises no fault. */
	EXPECT_EQ(write_to(u(m.get()) + kPage, key, 64), NICMR_WC_SUCCESS);
	EXPECT_EQ(dp().page_faults, f1.page_faults);
}

TEST_F(Odp, RdmaReadOfPagesNeverAdvisedIsServedByAPageFault)
{
	Untouched m(4 * kPage);
	for (size_t i = 0; i < 4 * kPage; i++)
		m.get()[i] = char(i * 3 + 1);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	const auto f0 = dp();
	std::memset(a, 0, 4 * kPage);
	EXPECT_EQ(read_from(u(m.get()), key, 4 * kPage), NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(a, m.get(), 4 * kPage), 0);
	EXPECT_EQ(dp().page_faults, f0.page_faults + 1);
	/* A read fault asks for reads only. */
	for (const auto &x : entries(key, 4)) {
		EXPECT_TRUE(x.rd_en);
		EXPECT_FALSE(x.wr_en);
	}
}

TEST_F(Odp, AtomicsOnPagesNeverAdvisedAreServedByAPageFault)
{
	Untouched m(2 * kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 2 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	auto *word = reinterpret_cast<uint64_t *>(m.get() + kPage + 64);
	*word = 40;
	const auto f0 = dp();
	ASSERT_EQ(nicmr_post_atomic_fadd(qa, u(a), ka, u(word), key, 2, 1, NICMR_SEND_SIGNALED), 0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(*word, 42u);
	uint64_t old = 0;
	std::memcpy(&old, a, 8);
	EXPECT_EQ(old, 40u);
	ASSERT_EQ(
		nicmr_post_atomic_cswap(qa, u(a), ka, u(word), key, 42, 7, 2, NICMR_SEND_SIGNALED),
		0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(*word, 7u);
	/* One fault: an atomic needs the page readable and writable at once. */
	EXPECT_EQ(dp().page_faults, f0.page_faults + 1);
	const auto e = entries(key, 2);
	EXPECT_TRUE(e[1].rd_en && e[1].wr_en);
	EXPECT_FALSE(e[0].rd_en || e[0].wr_en);
}

TEST_F(Odp, LocalSgesNeverAdvisedAreServedByWqePageFaults)
{
	/* The requester's own buffers are on-demand: a WRITE gathers from them, a READ scatters
	 * into them. */
	Untouched m(4 * kPage);
	for (size_t i = 0; i < kPage; i++)
		m.get()[i] = char(i * 11 + 2);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	char *b = a + 8 * kPage;
	std::memset(b, 0, 2 * kPage);
	const auto f0 = dp();
	ASSERT_EQ(nicmr_post_write(qa, u(m.get()), kPage, key, u(b), ka, 1, NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(b, m.get(), kPage), 0);
	for (size_t i = 0; i < kPage; i++)
		b[kPage + i] = char(i * 5 + 9);
	ASSERT_EQ(nicmr_post_read(qa, u(m.get()) + 2 * kPage, kPage, key, u(b) + kPage, ka, 2,
				  NICMR_SEND_SIGNALED),
		  0);
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(m.get() + 2 * kPage, b + kPage, kPage), 0);
	EXPECT_EQ(dp().page_faults, f0.page_faults + 2);
	const auto e = entries(key, 4);
	EXPECT_TRUE(e[0].rd_en);
	EXPECT_FALSE(e[0].wr_en);	       /* gathered: read */
	EXPECT_TRUE(e[2].rd_en && e[2].wr_en); /* scattered: write */
	EXPECT_FALSE(e[1].rd_en || e[3].rd_en);
}

TEST_F(Odp, AFaultOnUnmappedMemoryCompletesInErrorAndWritesNothing)
{
	if (kSanitizedAllocator)
		GTEST_SKIP() << "AddressSanitizer's allocator maps its own memory into the freed "
				"range, so the range cannot be kept unmapped";
	void *p = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
	ASSERT_NE(p, MAP_FAILED);
	ASSERT_EQ(nicmr_mr_reg(pd, p, 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	ASSERT_EQ(munmap(p, 4 * kPage), 0);
	const uint32_t key = nicmr_mr_key(odp);
	const auto f0 = dp();
	/* The responder's side: the fault is resumed with an error, the requester gets the
	 * remote access error and the responder goes to ERR with its event. */
	std::memset(a, 0x55, 64);
	EXPECT_EQ(write_to(u(p), key, 64), NICMR_WC_REMOTE_ACCESS);
	uint32_t st = 0;
	ASSERT_EQ(nicmr_qp_state(qb, &st), 0);
	EXPECT_EQ(st, uint32_t{NICMR_QP_ERR});
	auto f1 = dp();
	EXPECT_EQ(f1.page_faults, f0.page_faults + 1);
	EXPECT_EQ(f1.pf_errors, f0.pf_errors + 1);
	/* The requester's side: an unmapped gather source completes with LOCAL_PROT_ERR and
	 * the target is not written. */
	reconnect();
	char *b = a + 8 * kPage;
	std::memset(b, 0x66, 64);
	ASSERT_EQ(nicmr_post_write(qa, u(p), 64, key, u(b), ka, 3, NICMR_SEND_SIGNALED), 0);
	const nicmr_wc wc = wait_wc(cqa);
	EXPECT_EQ(wc.status, NICMR_WC_LOCAL_PROT);
	EXPECT_EQ(wc.syndrome, 0x04);
	for (size_t i = 0; i < 64; i++)
		ASSERT_EQ(b[i], 0x66) << i;
	const auto f2 = dp();
	EXPECT_EQ(f2.page_faults, f1.page_faults + 1);
	EXPECT_EQ(f2.pf_errors, f1.pf_errors + 1);
	/* Nothing was made present. */
	for (const auto &x : entries(key, 4))
		EXPECT_FALSE(x.rd_en || x.wr_en);
}

TEST_F(Odp, FaultsAreServedByDeviceProgressWithoutAPoll)
{
	Untouched m(2 * kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 2 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	std::memset(a, 0x5a, 128);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 128, ka, u(m.get()), nicmr_mr_key(odp), 1,
				   NICMR_SEND_SIGNALED),
		  0);
	/* The fault waits until someone serves it (the device model may run on its own
	 * thread: give it the time to raise it). */
	int served = 0;
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (served == 0 && std::chrono::steady_clock::now() < end)
		served = nicmr_device_progress(dev);
	EXPECT_EQ(served, 1);
	EXPECT_EQ(nicmr_device_progress(dev), 0); /* nothing more waits */
	EXPECT_EQ(wait_wc(cqa).status, NICMR_WC_SUCCESS);
	EXPECT_EQ(m.get()[127], 0x5a);
	EXPECT_EQ(nicmr_device_progress(nullptr), -EINVAL);
}

TEST_F(Odp, PageFaultResumeOfAnUnknownTokenIsABadParameter)
{
	/* What a ConnectX's firmware answers for a token no outstanding fault has: BAD_PARAM,
	 * which the driver reports as -EINVAL. */
	for (uint32_t token : {0u, 1u, 0xffffffu}) {
		EXPECT_EQ(mlx5::page_fault_resume(dev->drv->cmdq(), token, false, 0, 0), -EINVAL)
			<< token;
		EXPECT_EQ(dev->drv->last_status(), mlx5::prm::status::bad_param);
		EXPECT_EQ(dev->drv->last_syndrome(),
			  static_cast<uint32_t>(emu::Syndrome::page_fault_token));
	}
	/* A token already resumed is unknown too. */
	Untouched m(kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	const auto f0 = dp();
	EXPECT_EQ(write_to(u(m.get()), nicmr_mr_key(odp), 8), NICMR_WC_SUCCESS);
	ASSERT_EQ(dp().page_faults, f0.page_faults + 1);
	EXPECT_EQ(mlx5::page_fault_resume(dev->drv->cmdq(), 1, true, 0, 0), -EINVAL);
	EXPECT_EQ(dev->drv->last_status(), mlx5::prm::status::bad_param);
}

/* A device whose firmware refuses every PAGE_FAULT_RESUME (the emu option fail_opcode). */
class OdpResumeRefused : public Odp {
protected:
	const char *spec() const override
	{
		return "emu:mkeys=1024,mkey_by_name=1,fail_opcode=0x204";
	}
};

TEST_F(OdpResumeRefused, ProgressReportsTheRefusedResumeAndTheWqeStaysHeld)
{
	Untouched m(kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	ASSERT_EQ(nicmr_post_write(qa, u(a), 64, ka, u(m.get()), nicmr_mr_key(odp), 1,
				   NICMR_SEND_SIGNALED),
		  0);
	int rc = 0;
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (rc == 0 && std::chrono::steady_clock::now() < end)
		rc = nicmr_device_progress(dev);
	/* The command's INTERNAL_ERR, as the driver reports it. */
	EXPECT_EQ(rc, -EIO);
	EXPECT_EQ(dev->drv->last_status(), mlx5::prm::status::internal_err);
	/* Nothing resumed it: the WQE still waits and nothing completed. */
	EXPECT_EQ(dev->emu->device().data_path().page_faults_outstanding(), 1u);
	nicmr_wc wc{};
	EXPECT_EQ(nicmr_cq_poll(cqa, &wc, 1), 0);
}

TEST_F(Odp, PrefetchWriteMakesPagesPresentAndRdmaMovesData)
{
	constexpr size_t kLen = 16 * kPage;
	Untouched m(kLen);
	const auto before = stats();
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), kLen, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	const uint32_t key = nicmr_mr_key(odp);
	/* Pages 2 .. 5 (a range that starts and ends inside pages). */
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, u(m.get()) + 2 * kPage + 100,
			 3 * kPage, key),
		  0);
	const auto e = entries(key, 16);
	for (size_t i = 0; i < 16; i++) {
		const bool in = i >= 2 && i <= 5;
		EXPECT_EQ(e[i].rd_en, in) << i;
		EXPECT_EQ(e[i].wr_en, in) << i;
	}
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 4);
	/* The same advice again changes nothing. */
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, u(m.get()) + 2 * kPage, 4 * kPage,
			 key),
		  0);
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 4);

	for (size_t i = 0; i < 4 * kPage; i++)
		a[i] = char(i * 7 + 3);
	EXPECT_EQ(write_to(u(m.get()) + 2 * kPage, key, 4 * kPage), NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(m.get() + 2 * kPage, a, 4 * kPage), 0);
	std::memset(m.get() + 3 * kPage, 0x3c, kPage);
	EXPECT_EQ(read_from(u(m.get()) + 3 * kPage, key, kPage), NICMR_WC_SUCCESS);
	for (size_t i = 0; i < kPage; i++)
		ASSERT_EQ(a[i], 0x3c) << i;
	/* A page outside the advice is still not present: a write there is served by a page
	 * fault, which makes that page (and no other) present. */
	EXPECT_FALSE(entries(key, 7)[6].wr_en);
	EXPECT_EQ(write_to(u(m.get()) + 6 * kPage, key, 64), NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(m.get() + 6 * kPage, a, 64), 0);
	EXPECT_TRUE(entries(key, 7)[6].wr_en);
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 5);

	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
	odp = nullptr;
	expect_released(stats(), before);
}

TEST_F(Odp, PrefetchGivesTheDeviceReadsOnly)
{
	Untouched m(4 * kPage);
	std::memset(m.get(), 0x42, 4 * kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()), 4 * kPage, key), 0);
	const auto e = entries(key, 4);
	for (const auto &x : e) {
		EXPECT_TRUE(x.rd_en);
		EXPECT_FALSE(x.wr_en);
	}
	EXPECT_EQ(read_from(u(m.get()), key, 4 * kPage), NICMR_WC_SUCCESS);
	for (size_t i = 0; i < 4 * kPage; i++)
		ASSERT_EQ(a[i], 0x42) << i;
	/* A write to a page present for reads only faults; the fault adds write presence to
	 * what is there, without a new pin. */
	const auto pinned = stats().pinned_pages;
	const auto f0 = dp();
	std::memset(a, 0x99, 64);
	EXPECT_EQ(write_to(u(m.get()), key, 64), NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(m.get(), a, 64), 0);
	EXPECT_EQ(dp().page_faults, f0.page_faults + 1);
	EXPECT_EQ(stats().pinned_pages, pinned);
	EXPECT_TRUE(entries(key, 1)[0].wr_en);
	/* PREFETCH_WRITE does the same for another page, ahead of the access. */
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, u(m.get()) + kPage, kPage, key), 0);
	EXPECT_EQ(stats().pinned_pages, pinned);
	EXPECT_EQ(write_to(u(m.get()) + kPage, key, 64), NICMR_WC_SUCCESS);
	EXPECT_EQ(dp().page_faults, f0.page_faults + 1);
}

TEST_F(Odp, NoFaultMakesOnlyResidentPagesPresent)
{
	Untouched m(8 * kPage);
	m.get()[0] = 1;		/* resident */
	m.get()[5 * kPage] = 2; /* resident */
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 8 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const uint32_t key = nicmr_mr_key(odp);
	const auto before = stats();
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, u(m.get()), 8 * kPage, key), 0);
	const auto e = entries(key, 8);
	for (size_t i = 0; i < 8; i++) {
		EXPECT_EQ(e[i].rd_en, i == 0 || i == 5) << i;
		EXPECT_FALSE(e[i].wr_en) << i;
	}
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 2);
	/* Nothing else was faulted in. */
	std::vector<unsigned char> v(8);
	ASSERT_EQ(mincore(m.get(), 8 * kPage, v.data()), 0);
	for (size_t i = 0; i < 8; i++)
		EXPECT_EQ(v[i] & 1, (i == 0 || i == 5) ? 1 : 0) << i;
	EXPECT_EQ(read_from(u(m.get()) + 5 * kPage, key, 8), NICMR_WC_SUCCESS);
	EXPECT_EQ(a[0], 2);
	/* A page that was not resident is faulted in by the read. */
	const auto f0 = dp();
	EXPECT_EQ(read_from(u(m.get()) + kPage, key, 8), NICMR_WC_SUCCESS);
	EXPECT_EQ(dp().page_faults, f0.page_faults + 1);
	EXPECT_TRUE(entries(key, 2)[1].rd_en);
}

TEST_F(Odp, ZeroLengthElementDoesNothing)
{
	Untouched m(4 * kPage);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	const auto before = stats();
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()), 0, nicmr_mr_key(odp)), 0);
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages);
	/* Without FLUSH the advice is done all the same (nicmr is always synchronous). */
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()), kPage, nicmr_mr_key(odp), 0),
		  0);
	EXPECT_TRUE(entries(nicmr_mr_key(odp), 1)[0].rd_en);
}

TEST_F(Odp, SeveralElementsOfSeveralRegionsInOneCall)
{
	Untouched m1(4 * kPage), m2(4 * kPage);
	nicmr_mr *other = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m1.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  0);
	ASSERT_EQ(
		nicmr_mr_reg(pd, m2.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &other),
		0);
	const nicmr_sge g[3] = {{u(m1.get()), 1, nicmr_mr_key(odp)},
				{u(m2.get()) + 3 * kPage, 10, nicmr_mr_key(other)},
				{u(m1.get()) + 2 * kPage, 1, nicmr_mr_key(odp)}};
	ASSERT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, g, 3), 0);
	const auto e1 = entries(nicmr_mr_key(odp), 4);
	const auto e2 = entries(nicmr_mr_key(other), 4);
	for (size_t i = 0; i < 4; i++) {
		EXPECT_EQ(e1[i].wr_en, i == 0 || i == 2) << i;
		EXPECT_EQ(e2[i].wr_en, i == 3) << i;
	}
	EXPECT_EQ(nicmr_mr_dereg(other), 0);
}

/* Invalidation: memory unmapped under a live ODP MR leaves the device (doc/odp.md). */
TEST_F(Odp, UnmappedPagesAreRevokedUnpinnedAndNewPagesServeAgain)
{
	constexpr size_t kLen = 8 * kPage;
	char *p = static_cast<char *>(
		mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	ASSERT_NE(p, MAP_FAILED);
	const auto before = stats();
	ASSERT_EQ(nicmr_mr_reg(pd, p, kLen, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	const uint32_t key = nicmr_mr_key(odp);
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, u(p), kLen, key), 0);
	nicmr_odp_watch *w = dev->odp_watch.get();
	ASSERT_NE(w, nullptr);
	if (!w->mon)
		GTEST_SKIP() << "no userfaultfd here: nothing is invalidated (doc/odp.md)";
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 8);
	std::memset(a, 0x5e, kLen);
	ASSERT_EQ(write_to(u(p), key, kLen), NICMR_WC_SUCCESS);

	/* Pages 2 .. 4 go: once the monitor has read the event, the device has them no more. */
	ASSERT_EQ(munmap(p + 2 * kPage, 3 * kPage), 0);
	w->mon->wait_idle();
	EXPECT_EQ(w->revoked_pages.load(), 3u);
	const auto e = entries(key, 8);
	for (size_t i = 0; i < 8; i++) {
		const bool gone = i >= 2 && i <= 4;
		EXPECT_EQ(e[i].rd_en, !gone) << i;
		EXPECT_EQ(e[i].wr_en, !gone) << i;
	}
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 5);
	EXPECT_EQ(write_to(u(p) + 2 * kPage, key, 64), NICMR_WC_REMOTE_ACCESS);
	reconnect();
	EXPECT_EQ(write_to(u(p) + 5 * kPage, key, 64), NICMR_WC_SUCCESS) << "the rest still works";

	/* New memory at the same address, new data: advice makes it present and RDMA reads the
	 * new pages, never the old ones. */
	char *q = static_cast<char *>(mmap(p + 2 * kPage, 3 * kPage, PROT_READ | PROT_WRITE,
					   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	ASSERT_EQ(q, p + 2 * kPage);
	std::memset(q, 0x6f, 3 * kPage);
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(q), 3 * kPage, key), 0);
	EXPECT_EQ(read_from(u(q), key, 3 * kPage), NICMR_WC_SUCCESS);
	for (size_t i = 0; i < 3 * kPage; i++)
		ASSERT_EQ(a[i], 0x6f) << i;
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 8);

	/* Present pages are locked: the kernel refuses to discard them (madvise(2): EINVAL for
	 * VM_LOCKED), so they stay present and their data stays. */
	errno = 0;
	EXPECT_EQ(madvise(p, kPage, MADV_DONTNEED), -1);
	EXPECT_EQ(errno, EINVAL);
	w->mon->wait_idle();
	EXPECT_TRUE(entries(key, 1)[0].rd_en);
	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
	odp = nullptr;
	munmap(p, kLen);
	expect_released(stats(), before);
}

/* ibv_advise_mr(3), RETURN VALUE, entry by entry. */
class OdpErrors : public Odp {
protected:
	void SetUp() override
	{
		Odp::SetUp();
		if (HasFatalFailure())
			return;
		ASSERT_NE(m.get(), nullptr);
		ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 8 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0,
				       &odp),
			  0);
		key = nicmr_mr_key(odp);
		pinned = stats().pinned_pages;
	}
	void TearDown() override
	{
		if (odp) {
			/* No refusal left anything pinned. */
			EXPECT_EQ(stats().pinned_pages, pinned);
		}
		Odp::TearDown();
	}
	Untouched m{8 * kPage};
	uint32_t key = 0;
	uint64_t pinned = 0;
};

TEST_F(OdpErrors, EOPNOTSUPPForAnAdviceNotKnown)
{
	EXPECT_EQ(advise(3, u(m.get()), kPage, key), -EOPNOTSUPP);
	EXPECT_EQ(advise(0xffffffffu, u(m.get()), kPage, key), -EOPNOTSUPP);
}

TEST(OdpDevice, EOPNOTSUPPWhereTheDeviceLacksOnDemandPaging)
{
	/* No on-demand paging; or neither the on-demand mkey cache nor mkeys at chosen indices. */
	for (const char *spec :
	     {"emu:mkeys=1024,mkey_by_name=1,odp=0", "emu:mkeys=1024,odp_cache=0"}) {
		nicmr_device *dev = nullptr;
		ASSERT_EQ(nicmr_device_open(spec, &dev), 0) << spec;
		nicmr_device_attr at{};
		ASSERT_EQ(nicmr_device_query(dev, &at), 0);
		EXPECT_EQ(at.odp, 0u) << spec;
		nicmr_pd *pd = nullptr;
		ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
		Untouched m(4 * kPage);
		nicmr_mr *mr = nullptr;
		EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0,
				       &mr),
			  -EOPNOTSUPP)
			<< spec;
		nicmr_sge g{u(m.get()), 4096, 0x100};
		EXPECT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH, 0, &g, 1),
			  -EOPNOTSUPP)
			<< spec;
		EXPECT_EQ(nicmr_pd_free(pd), 0);
		EXPECT_EQ(nicmr_device_close(dev), 0);
	}
	nicmr_device *dev = nullptr;
	EXPECT_EQ(nicmr_device_open("emu:odp=2", &dev), -EINVAL);
	EXPECT_EQ(nicmr_device_open("emu:odp_cache=2", &dev), -EINVAL);
	EXPECT_EQ(nicmr_device_open("emu:odp_prefill=257", &dev), -EINVAL);
	EXPECT_EQ(nicmr_device_open("emu:odp_prefill=x", &dev), -EINVAL);
}

TEST(OdpDevice, RequestedKeysNeedMkeysAtChosenIndices)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu:mkeys=1024", &dev), 0);
	nicmr_device_attr at{};
	ASSERT_EQ(nicmr_device_query(dev, &at), 0);
	EXPECT_EQ(at.odp, 1u) << "the on-demand mkey cache";
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	Untouched m(4 * kPage);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND,
			       NICMR_MR_REQUESTED_KEY, 0x12345, &mr),
		  -EOPNOTSUPP);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &mr),
		  0);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

/* The on-demand mkey cache (doc/odp.md): a registration binds a cached mkey with one UMR and
 * sends no command; a deregistration writes what was present not present, revokes, and the
 * index comes back at its next variant. */
TEST_F(Odp, RegistrationAndDeregistrationSendNoCommand)
{
	/* The device's first on-demand registration makes its page-fault EQ (commands, once:
	 * doc/odp.md, "Page faults"); the ones after it send none. */
	{
		Untouched first(kPage);
		ASSERT_EQ(nicmr_mr_reg(pd, first.get(), kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0,
				       &odp),
			  0);
		ASSERT_EQ(nicmr_mr_dereg(odp), 0);
		odp = nullptr;
	}
	for (size_t len : {kPage, size_t{2} << 20}) {
		Untouched m(len);
		const uint64_t cmds = dev->emu->device().stats().commands;
		const int64_t mkeys = stats().dev_mkeys;
		ASSERT_EQ(nicmr_mr_reg(pd, m.get(), len, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
			  0);
		EXPECT_EQ(stats().dev_mkeys, mkeys) << "no mkey made or destroyed";
		EXPECT_EQ(nicmr_mr_dereg(odp), 0);
		odp = nullptr;
		EXPECT_EQ(dev->emu->device().stats().commands, cmds) << len;
	}
}

TEST_F(Odp, AReusedMkeyHasNothingPresentAndTheOldKeyIsRefused)
{
	constexpr size_t kLen = 8 * kPage;
	Untouched m(kLen);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), kLen, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	const uint32_t old = nicmr_mr_key(odp);
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, u(m.get()), kLen, old), 0);
	for (const auto &e : entries(old, 8))
		ASSERT_TRUE(e.rd_en && e.wr_en);
	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
	odp = nullptr;
	/* In the cache: free, and every entry not present. */
	mlx5::MkeyQuery q;
	ASSERT_EQ(dev->drv->query_mkey(mr::mkey_index(old), 8, &q), 0);
	EXPECT_TRUE(q.ctx.free);
	for (size_t i = 0; i < 8; i++)
		EXPECT_FALSE(q.mtt[i].rd_en || q.mtt[i].wr_en) << i;
	EXPECT_EQ(write_to(u(m.get()), old, 64), NICMR_WC_REMOTE_ACCESS) << "the old key";
	reconnect();
	/* Registrations of the same size take the bucket's mkeys in turn until the index comes
	 * back: at another variant, with nothing present. */
	std::vector<nicmr_mr *> held;
	uint32_t again = 0;
	for (int i = 0; i < 64 && again == 0; i++) {
		nicmr_mr *mr = nullptr;
		ASSERT_EQ(nicmr_mr_reg(pd, m.get(), kLen, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &mr),
			  0);
		held.push_back(mr);
		if (mr::mkey_index(nicmr_mr_key(mr)) == mr::mkey_index(old))
			again = nicmr_mr_key(mr);
	}
	ASSERT_NE(again, 0u);
	EXPECT_NE(again, old);
	for (const auto &e : entries(again, 8))
		EXPECT_FALSE(e.rd_en || e.wr_en);
	/* Not present: the write page-faults, and the fault is served (nicmr_cq_poll). */
	EXPECT_EQ(write_to(u(m.get()), again, 64), NICMR_WC_SUCCESS) << "served by a fault";
	EXPECT_TRUE(entries(again, 1)[0].wr_en) << "present after the fault";
	for (nicmr_mr *mr : held)
		EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_F(Odp, OneGibRegistersAndServesPagesPastTheSixteenBitOffset)
{
	constexpr size_t kGib = size_t{1} << 30;
	Untouched m(kGib);
	ASSERT_NE(m.get(), nullptr);
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), kGib + 1, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp),
		  -EINVAL)
		<< "above NICMR_ODP_MAX_LEN";
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), kGib, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	const uint32_t key = nicmr_mr_key(odp);
	/* The last page: entry 2^18 - 1, octword 2^17 - 1, past a 16-bit translation offset. */
	const uint64_t last = u(m.get()) + kGib - kPage;
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, last, kPage, key), 0);
	for (size_t i = 0; i < 256; i++)
		a[i] = char(i ^ 0x5a);
	EXPECT_EQ(write_to(last, key, 256), NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(m.get() + kGib - kPage, a, 256), 0);
	/* A page not advised, far below: its write page-faults and is served too. */
	EXPECT_EQ(write_to(u(m.get()) + (600u << 20), key, 64), NICMR_WC_SUCCESS)
		<< "a page not advised, served by a fault";
	EXPECT_EQ(std::memcmp(m.get() + (600u << 20), a, 64), 0);
	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
	odp = nullptr;
}

TEST_F(OdpErrors, EFAULTForRangesOutsideTheRegion)
{
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()) + 8 * kPage - 1, 2, key),
		  -EFAULT);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()) - 1, 2, key), -EFAULT);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, u(m.get()) + 9 * kPage, 1, key),
		  -EFAULT);
}

TEST_F(OdpErrors, EFAULTForRangesOutsideTheAddressSpace)
{
	/* Page 3 of the region is unmapped after registration. */
	ASSERT_EQ(munmap(m.get() + 3 * kPage, kPage), 0);
	for (uint32_t adv : {uint32_t(NICMR_ADVISE_MR_ADVICE_PREFETCH),
			     uint32_t(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE),
			     uint32_t(NICMR_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)})
		EXPECT_EQ(advise(adv, u(m.get()) + 2 * kPage, 2 * kPage, key), -EFAULT) << adv;
	EXPECT_FALSE(entries(key, 4)[2].rd_en) << "nothing of the element was made present";
	/* Memory the process may not write cannot be prefetched for writing. */
	ASSERT_EQ(mprotect(m.get() + 5 * kPage, kPage, PROT_READ), 0);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, u(m.get()) + 5 * kPage, 8, key),
		  -EFAULT);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()) + 5 * kPage, 8, key), 0);
	EXPECT_EQ(stats().pinned_pages, pinned + 1);
	pinned += 1;
}

TEST_F(OdpErrors, EFAULTForAnInvalidLkey)
{
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()), 8, 0), -EFAULT);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()), 8, key ^ 0x1), -EFAULT);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()), 8, key + 0x100), -EFAULT);
	/* A key deregistered is invalid from then on. */
	Untouched m2(kPage);
	nicmr_mr *gone = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m2.get(), kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &gone), 0);
	const uint32_t stale = nicmr_mr_key(gone);
	ASSERT_EQ(nicmr_mr_dereg(gone), 0);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m2.get()), 8, stale), -EFAULT);
}

TEST_F(OdpErrors, EINVALForABadPdFlagsListOrAWindow)
{
	nicmr_sge g{u(m.get()), 8, key};
	EXPECT_EQ(nicmr_advise_mr(nullptr, NICMR_ADVISE_MR_ADVICE_PREFETCH, 0, &g, 1), -EINVAL);
	EXPECT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH, 2, &g, 1), -EINVAL);
	EXPECT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH, 0x80000000u, &g, 1),
		  -EINVAL);
	EXPECT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH, 0, nullptr, 1), -EINVAL);
	EXPECT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH, 0, &g, 0), -EINVAL);
	/* "The requested address doesn't belong to a MR, but a MW". */
	nicmr_mr *bindable = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base + (1 << 20), 4 * kPage, kAll | NICMR_ACCESS_MW_BIND, 0, 0,
			       &bindable),
		  0);
	nicmr_mw *mw = nullptr;
	ASSERT_EQ(nicmr_mw_alloc(pd, &mw), 0);
	uint32_t rkey = 0;
	ASSERT_EQ(nicmr_mw_bind(mw, bindable, u(base + (1 << 20)), kPage, NICMR_ACCESS_REMOTE_READ,
				&rkey),
		  0);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(base + (1 << 20)), 8, rkey), -EINVAL);
	EXPECT_EQ(nicmr_mw_invalidate(mw), 0);
	EXPECT_EQ(nicmr_mw_free(mw), 0);
	EXPECT_EQ(nicmr_mr_dereg(bindable), 0);
}

TEST_F(OdpErrors, EPERMForAKeyOfAnotherPd)
{
	nicmr_pd *pd2 = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd2), 0);
	nicmr_sge g{u(m.get()), 8, key};
	EXPECT_EQ(nicmr_advise_mr(pd2, NICMR_ADVISE_MR_ADVICE_PREFETCH, 0, &g, 1), -EPERM);
	EXPECT_EQ(nicmr_pd_free(pd2), 0);
}

TEST_F(OdpErrors, EPERMForPrefetchWriteOnARegionNotWritable)
{
	Untouched m2(2 * kPage);
	nicmr_mr *ro = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m2.get(), 2 * kPage,
			       NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_ON_DEMAND, 0, 0, &ro),
		  0);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, u(m2.get()), 8, nicmr_mr_key(ro)),
		  -EPERM);
	EXPECT_FALSE(entries(nicmr_mr_key(ro), 2)[0].rd_en);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m2.get()), 8, nicmr_mr_key(ro)), 0);
	EXPECT_EQ(nicmr_mr_dereg(ro), 0);
}

TEST_F(OdpErrors, ENOENTForAKeyThatIsNotOnDemand)
{
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(a), 8, ka), -ENOENT);
	/* A pinned MR outside pools, too. */
	Anon pinned_mem(kPage);
	nicmr_mr *slow = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, pinned_mem.get(), kPage, kAll, 0, 0, &slow), 0);
	EXPECT_EQ(
		advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(pinned_mem.get()), 8, nicmr_mr_key(slow)),
		-ENOENT);
	EXPECT_EQ(nicmr_mr_dereg(slow), 0);
}

TEST_F(OdpErrors, ElementsAreAllCheckedBeforeAnyPageIsTouched)
{
	const nicmr_sge g[2] = {{u(m.get()), 8, key}, {u(m.get()), 8, ka}};
	EXPECT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH, 0, g, 2), -ENOENT);
	EXPECT_FALSE(entries(key, 1)[0].rd_en);
	/* The key held by the refused call was let go: it deregisters. */
	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
	odp = nullptr;
}

/* ENOMEM: pages that cannot be pinned. In a child that gives up CAP_IPC_LOCK and may lock
 * 16 KiB (less than the device locked at open), prefetching 64 KiB cannot pin. */
int enomem_child()
{
	/* The device first: its own DMA memory is locked at open. */
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	if (nicmr_device_open(kOdpSpec, &dev) != 0 || nicmr_pd_alloc(dev, &pd) != 0)
		return 93;
	__user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct d[2] = {};
	if (syscall(SYS_capget, &h, d) != 0)
		return 90;
	d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	if (syscall(SYS_capset, &h, d) != 0)
		return 91;
	const rlimit lim{16 << 10, 16 << 10};
	if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0)
		return 92;
	Untouched m(64 << 10);
	nicmr_mr *mr = nullptr;
	if (nicmr_mr_reg(pd, m.get(), 64 << 10, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &mr) != 0)
		return 94;
	nicmr_sge g{u(m.get()), 64 << 10, nicmr_mr_key(mr)};
	const int rc = nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				       NICMR_ADVISE_MR_FLAG_FLUSH, &g, 1);
	nicmr_device_stats st{};
	nicmr_device_get_stats(dev, &st);
	if (st.pinned_pages != 0)
		return 95;
	if (nicmr_mr_dereg(mr) != 0 || nicmr_pd_free(pd) != 0 || nicmr_device_close(dev) != 0)
		return 96;
	return -rc;
}

TEST(OdpDevice, ENOMEMWhenPagesCannotBePinned)
{
	EXPECT_EXIT(std::exit(enomem_child()), ::testing::ExitedWithCode(ENOMEM), "");
}

/* A device of the default kind: its pool would have taken every index (mkey_pool 1024 on
 * 1024 keys); the default cap leaves the on-demand cache its prefill and headroom (doc/odp.md,
 * "Indices"), so on-demand registration, advice and RDMA work without any pool option. */
class OdpDefaultDevice : public Odp {
protected:
	const char *spec() const override { return "emu:mkeys=1024"; }
};

TEST_F(OdpDefaultDevice, RegistersAdvisesAndTakesAnRdmaWrite)
{
	nicmr_device_attr at{};
	ASSERT_EQ(nicmr_device_query(dev, &at), 0);
	EXPECT_EQ(at.odp, 1u);
	EXPECT_EQ(at.mkey_pool_max, 1023u - (16 * 7 + 64));
	EXPECT_EQ(dev->engine->odp_made(), 16u * 7) << "the prefill had its indices";
	constexpr size_t kLen = 4 * kPage;
	Untouched m(kLen);
	const auto before = stats();
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), kLen, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	const uint32_t key = nicmr_mr_key(odp);
	ASSERT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, u(m.get()), kLen, key), 0);
	EXPECT_TRUE(entries(key, 4)[3].wr_en);
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 4);
	for (size_t i = 0; i < 2 * kPage; i++)
		a[i] = char(i * 5 + 1);
	EXPECT_EQ(write_to(u(m.get()) + kPage + 100, key, 2 * kPage), NICMR_WC_SUCCESS);
	EXPECT_EQ(std::memcmp(m.get() + kPage + 100, a, 2 * kPage), 0);
	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
	odp = nullptr;
	expect_released(stats(), before);
}

TEST_F(OdpDefaultDevice, ThePoolFillsToItsCapAndTheCacheToItsReserve)
{
	nicmr_device_attr at{};
	ASSERT_EQ(nicmr_device_query(dev, &at), 0);
	/* The fixture's MR holds one key of the pool. */
	std::vector<nicmr_mr *> mrs;
	nicmr_mr *mr = nullptr;
	int rc = 0;
	while ((rc = nicmr_mr_reg(pd, a, kPage, kAll, 0, 0, &mr)) == 0)
		mrs.push_back(mr);
	EXPECT_EQ(rc, -ENOSPC) << "the cap, not the device's refusal";
	EXPECT_EQ(mrs.size() + 1, at.mkey_pool_max);
	EXPECT_EQ(stats().mkey_pool, at.mkey_pool_max);
	/* On-demand MRs still register, from the cache's own indices, up to all of them. */
	Untouched m(kPage);
	std::vector<nicmr_mr *> odps;
	while ((rc = nicmr_mr_reg(pd, m.get(), kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &mr)) ==
	       0)
		odps.push_back(mr);
	EXPECT_EQ(rc, -ENOSPC);
	EXPECT_EQ(odps.size(), 16u * 7 + 64);
	EXPECT_EQ(stats().dev_mkeys, 1023) << "every index of the device, and no refusal";
	for (nicmr_mr *x : odps)
		ASSERT_EQ(nicmr_mr_dereg(x), 0);
	for (nicmr_mr *x : mrs)
		ASSERT_EQ(nicmr_mr_dereg(x), 0);
}

/* -ENOSPC of a region's first advice: the slow-path IOVA window (the top quarter of the
 * IOMMU's highest range, mem::SlowMaps::window) is 4 MiB with 32-bit IOVAs (emu option
 * iova_bits=32), so an 8 MiB region finds no range of its size. */
class OdpSmallIovaWindow : public Odp {
protected:
	const char *spec() const override { return "emu:mkeys=1024,iova_bits=32"; }
};

TEST_F(OdpSmallIovaWindow, ENOSPCWhenTheFirstAdviceFindsNoIovaRangeOfTheRegionsSize)
{
	constexpr size_t kBig = size_t{8} << 20;
	Untouched m(kBig);
	const auto before = stats();
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), kBig, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &odp), 0);
	const uint32_t key = nicmr_mr_key(odp);
	for (uint32_t adv : {uint32_t(NICMR_ADVISE_MR_ADVICE_PREFETCH),
			     uint32_t(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE)})
		EXPECT_EQ(advise(adv, u(m.get()) + kPage, kPage, key), -ENOSPC) << adv;
	EXPECT_FALSE(entries(key, 2)[1].rd_en) << "nothing of the region was made present";
	auto now = stats();
	EXPECT_EQ(now.pinned_pages, before.pinned_pages);
	EXPECT_EQ(now.slow_mappings, before.slow_mappings);
	EXPECT_EQ(now.iommu_mappings, before.iommu_mappings);
	/* A region that fits the window is served: the refusal was about the size. */
	Untouched small(4 * kPage);
	nicmr_mr *fits = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, small.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0,
			       &fits),
		  0);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE, u(small.get()), 4 * kPage,
			 nicmr_mr_key(fits)),
		  0);
	EXPECT_EQ(stats().pinned_pages, before.pinned_pages + 4);
	EXPECT_EQ(nicmr_mr_dereg(fits), 0);
	EXPECT_EQ(advise(NICMR_ADVISE_MR_ADVICE_PREFETCH, u(m.get()), kPage, key), -ENOSPC)
		<< "still no room, and no range leaked";
	EXPECT_EQ(nicmr_mr_dereg(odp), 0);
	odp = nullptr;
	expect_released(stats(), before);
	nicmr_device *bad = nullptr;
	EXPECT_EQ(nicmr_device_open("emu:iova_bits=31", &bad), -EINVAL);
	EXPECT_EQ(nicmr_device_open("emu:iova_bits=49", &bad), -EINVAL);
	EXPECT_EQ(nicmr_device_open("emu:iova_bits=x", &bad), -EINVAL);
}

/* -EIO: the device refuses the translations' UMR (emu option fail_umr=N refuses the Nth UMR
 * work request since power-on; bring-up sends none, the registration's bind is the first). */
TEST(OdpDevice, EIOWhenTheDeviceRefusesTheTranslationsUmr)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu:mkeys=1024,fail_umr=2", &dev), 0);
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	nicmr_device_stats before{};
	ASSERT_EQ(nicmr_device_get_stats(dev, &before), 0);
	Untouched m(4 * kPage);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &mr), 0)
		<< "UMR 1, the bind";
	const uint32_t key = nicmr_mr_key(mr);
	nicmr_sge g{u(m.get()), uint32_t(4 * kPage), key};
	EXPECT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				  NICMR_ADVISE_MR_FLAG_FLUSH, &g, 1),
		  -EIO)
		<< "UMR 2, refused";
	nicmr_device_stats after{};
	ASSERT_EQ(nicmr_device_get_stats(dev, &after), 0);
	EXPECT_EQ(after.pinned_pages, before.pinned_pages) << "nothing left pinned";
	EXPECT_EQ(after.slow_mappings, before.slow_mappings);
	EXPECT_EQ(after.iommu_mappings, before.iommu_mappings) << "nothing left mapped";
	mlx5::MkeyQuery q;
	ASSERT_EQ(dev->drv->query_mkey(mr::mkey_index(key), 4, &q), 0);
	for (size_t i = 0; i < 4; i++)
		EXPECT_FALSE(q.mtt[i].rd_en || q.mtt[i].wr_en) << i;
	/* The page states were put back: the same advice, now accepted, makes the pages
	 * present (a host that still thought them present would send no UMR). */
	EXPECT_EQ(nicmr_advise_mr(pd, NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				  NICMR_ADVISE_MR_FLAG_FLUSH, &g, 1),
		  0);
	ASSERT_EQ(dev->drv->query_mkey(mr::mkey_index(key), 4, &q), 0);
	for (size_t i = 0; i < 4; i++)
		EXPECT_TRUE(q.mtt[i].rd_en && q.mtt[i].wr_en) << i;
	ASSERT_EQ(nicmr_device_get_stats(dev, &after), 0);
	EXPECT_EQ(after.pinned_pages, before.pinned_pages + 4);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
	EXPECT_EQ(nicmr_device_open("emu:fail_umr=x", &dev), -EINVAL);
}

/* The registration's bind is a UMR too: refused, the registration says -EIO and its cached
 * mkey goes back; the next registration takes it. */
TEST(OdpDevice, EIOWhenTheDeviceRefusesTheRegistrationsBind)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu:mkeys=1024,fail_umr=1", &dev), 0);
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	Untouched m(4 * kPage);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &mr),
		  -EIO);
	EXPECT_EQ(mr, nullptr);
	const uint32_t made = dev->engine->odp_made();
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * kPage, kAll | NICMR_ACCESS_ON_DEMAND, 0, 0, &mr),
		  0);
	EXPECT_EQ(dev->engine->odp_made(), made) << "the refused bind's mkey served again";
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

} // namespace
} // namespace nicmr::test
