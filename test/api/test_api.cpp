/* SPDX-License-Identifier: BSD-3-Clause */
/* The native C API: devices, pools, PDs, raw keys, lookups and readers. */
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api_wiring.h"
#include "hugepage_need.h"
#include "nicmr_config.h" /* NICMR_HAVE_RDMA_CORE */
#include "test_api_util.h"

using namespace nicmr::test;

TEST(ApiDevice, EmuDefaultsOffer65536KeysAndNoExtensions)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu", &dev), 0);
	nicmr_device_attr a;
	ASSERT_EQ(nicmr_device_query(dev, &a), 0);
	EXPECT_EQ(a.mkey_count, 65536u);
	EXPECT_EQ(a.max_readers, 64u);
	EXPECT_NE(a.device_id, 0u);
	EXPECT_EQ(a.device_id, nicmr_device_id(dev));
	EXPECT_EQ(a.extensions, dev->drv->caps().ext_present ? 1u : 0u);
	EXPECT_EQ(a.fw_major, 22);
	EXPECT_STREQ(a.name, "emu");
	/* Bring-up asked for host-endian atomics, which the model offers by default. */
	EXPECT_EQ(a.atomic_mode, uint32_t{NICMR_ATOMIC_HOST});
	/* A stock ConnectX's mkeys: the device chooses every index, the pool starts at its
	 * default and may grow to every index but 0 and the on-demand cache's reserve (its
	 * prefill, 16 in each of 7 buckets, and 64 more: doc/odp.md, "Indices"). */
	/* The on-demand mkey cache made 16 in each of its 7 buckets up to 2 MiB at open
	 * (doc/odp.md), from the indices the pool may grow into. */
	constexpr uint32_t kOdpPrefilled = 7 * 16;
	EXPECT_EQ(a.requested_keys, 0u);
	EXPECT_EQ(a.mkey_pool_max, 65535u - (kOdpPrefilled + 64));
	EXPECT_EQ(stats(dev).mkey_pool, nicmr::mr::kDefaultPoolInitial);
	EXPECT_EQ(stats(dev).dev_mkeys, int64_t(nicmr::mr::kDefaultPoolInitial + kOdpPrefilled))
		<< "the pool's free mkeys and the on-demand cache's are all the device holds";
	EXPECT_FALSE(dev->drv->caps().mkey_by_index);
	EXPECT_EQ(dev->emu->device().config().ports, 2u);
	EXPECT_EQ(dev->emu->device().config().delivery, nicmr::emu::DoorbellDelivery::inline_call);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

TEST(ApiDevice, EmuOptionsAreApplied)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu:ports=1,mkeys=256,delivery=thread", &dev), 0);
	nicmr_device_attr a;
	ASSERT_EQ(nicmr_device_query(dev, &a), 0);
	EXPECT_EQ(a.mkey_count, 256u);
	EXPECT_EQ(dev->emu->device().config().ports, 1u);
	EXPECT_EQ(dev->emu->device().config().delivery, nicmr::emu::DoorbellDelivery::poll_thread);
	/* Commands work through the device thread too. */
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	Anon m(8192);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 100, NICMR_ACCESS_SEND, 0, 0, &mr), 0);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

/* A port on the UDP wire binds its address at open: the socket's error when it cannot. */
TEST(ApiDevice, WireAddressIsBoundAtOpen)
{
	nicmr_device *dev = nullptr;
	EXPECT_EQ(nicmr_device_open("emu:addr=192.0.2.1", &dev), -EADDRNOTAVAIL); /* TEST-NET-1 */
	const std::string spec =
		"emu:ports=1,addr=127.0.0.1,udp_port=" + std::to_string(40000 + getpid() % 20000);
	ASSERT_EQ(nicmr_device_open(spec.c_str(), &dev), 0);
	nicmr_device *second = nullptr;
	EXPECT_EQ(nicmr_device_open(spec.c_str(), &second), -EADDRINUSE);
	EXPECT_EQ(nicmr_device_close(dev), 0);
	/* Closed, the address is free again; fault injection is a part of the spec. */
	ASSERT_EQ(
		nicmr_device_open(
			(spec + ",loss=5,dup=100,reorder=0,delay_us=1000000,fault_seed=0x17,gro=0,"
				"rx_batch=32")
				.c_str(),
			&dev),
		0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

TEST(ApiDevice, BadSpecsAreEinval)
{
	nicmr_device *dev = nullptr;
	for (const char *s : {"",
			      "bogus",
			      "emu:ports=3",
			      "emu:ports=0",
			      "emu:ports=x",
			      "emu:mkeys=1000",
			      "emu:mkeys=1",
			      "emu:mkeys=33554432",
			      "emu:delivery=fast",
			      "emu:progress=fast",
			      "emu:progress=",
			      "emu:color=red",
			      "emu:ports",
			      "emu:ports=1,",
			      "vfio:",
			      "devx:",
			      "EMU",
			      "emu:atomic_endian=little",
			      "emu:atomic_endian=",
			      "emu:mkey_by_name=2",
			      "emu:mkey_by_name=",
			      "emu:mkey_pool=0",
			      "emu:mkey_pool=x",
			      "emu:mkey_max=0",
			      "emu:mkey_max=16777216",
			      "emu:mkeys=256,mkey_max=256",
			      "emu:addr=",
			      "emu:addr=localhost",
			      "emu:addr=::ffff:127.0.0.1",
			      "emu:ports=1,addr2=127.0.0.1",
			      "emu:udp_port=0",
			      "emu:udp_port=65536",
			      "emu:peer_udp_port=x",
			      "emu:loss=101",
			      "emu:dup=x",
			      "emu:reorder=-1",
			      "emu:delay_us=1000001",
			      "emu:fault_seed=x",
			      "emu:gro=2",
			      "emu:gro=",
			      "emu:rx_batch=33",
			      "emu:rx_batch=x",
			      "emu:log_max_qp=1",
			      "emu:log_max_qp=25",
			      "emu:log_max_qp=x",
			      "emu:msix_vectors=257",
			      "emu:msix_vectors=x"})
		EXPECT_EQ(nicmr_device_open(s, &dev), -EINVAL) << s;
	EXPECT_EQ(nicmr_device_open(nullptr, &dev), -EINVAL);
	EXPECT_EQ(nicmr_device_open("emu", nullptr), -EINVAL);
	EXPECT_EQ(dev, nullptr);
}

/* log_max_qp sizes the QP table the UMR lanes share with the application's QPs: 2 (QP numbers
 * 2 and 3) has no room for the five lanes, and the open fails as CREATE_QP's EXCEED_LIM does;
 * 3 opens with one QP number to spare. */
TEST(ApiDevice, AQpTableWithoutRoomForTheUmrLanesIsEnomem)
{
	nicmr_device *dev = nullptr;
	EXPECT_EQ(nicmr_device_open("emu:log_max_qp=2", &dev), -ENOMEM);
	EXPECT_EQ(dev, nullptr);
	ASSERT_EQ(nicmr_device_open("emu:log_max_qp=3", &dev), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

/* The application's QP beyond the table (log_max_qp=3: one QP number left after the lanes) is
 * -ENOMEM (nicmr.h: CREATE_QP's EXCEED_LIM) and takes nothing: the number a destroyed QP gave
 * back serves the next. */
TEST(ApiDevice, AQpBeyondTheTableIsEnomem)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu:log_max_qp=3", &dev), 0);
	nicmr_pd *pd = nullptr;
	nicmr_cq *cq = nullptr;
	nicmr_qp *a = nullptr, *b = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	ASSERT_EQ(nicmr_cq_create(dev, 64, &cq), 0);
	ASSERT_EQ(nicmr_qp_create(pd, 1, cq, 16, &a), 0);
	EXPECT_EQ(nicmr_qp_create(pd, 1, cq, 16, &b), -ENOMEM);
	EXPECT_EQ(b, nullptr);
	EXPECT_EQ(nicmr_qp_create(pd, 1, cq, 16, &b), -ENOMEM) << "the refusal took nothing";
	EXPECT_EQ(nicmr_qp_destroy(a), 0);
	ASSERT_EQ(nicmr_qp_create(pd, 1, cq, 16, &b), 0);
	EXPECT_EQ(nicmr_qp_destroy(b), 0);
	EXPECT_EQ(nicmr_cq_destroy(cq), 0);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

/* progress=caller (the default) and progress=thread open (doc/native-api.md, "Progress");
 * the driver's progress call on a device without a wire port has no work to run. */
TEST(ApiDevice, ProgressOptionOpens)
{
	for (const char *s : {"emu:progress=caller", "emu:progress=thread",
			      "emu:delivery=thread,progress=caller"}) {
		nicmr_device *dev = nullptr;
		ASSERT_EQ(nicmr_device_open(s, &dev), 0) << s;
		EXPECT_FALSE(dev->fn->progress()) << s;
		EXPECT_EQ(nicmr_device_progress(dev), 0) << s;
		EXPECT_EQ(nicmr_device_close(dev), 0) << s;
	}
}

/* The spec option mkey_by_name=1 gives the device ConnectX's mkey_by_name: requested keys are
 * offered, and the command programmer can run. Without it, programmer=cmd cannot. */
TEST(ApiDevice, MkeyByNameOptionOffersRequestedKeysAndTheCommandProgrammer)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu:mkeys=1024,mkey_by_name=1", &dev), 0);
	nicmr_device_attr a;
	ASSERT_EQ(nicmr_device_query(dev, &a), 0);
	EXPECT_EQ(a.requested_keys, 1u);
	EXPECT_TRUE(dev->drv->caps().mkey_by_index) << "bring-up turned it on";
	EXPECT_EQ(nicmr_device_close(dev), 0);
	dev = nullptr;
	EXPECT_EQ(nicmr_device_open("emu:mkeys=1024,programmer=cmd", &dev), -EOPNOTSUPP);
	EXPECT_EQ(dev, nullptr) << "a failed open hands out nothing";
	ASSERT_EQ(nicmr_device_open("emu:mkeys=1024,programmer=cmd,mkey_by_name=1", &dev), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

/* mkey_pool= mkeys at open, mkey_max= the cap: the pool grows in batches of
 * mr::kDefaultPoolGrow as registrations need, and past the cap a registration is -ENOSPC. */
TEST(ApiDevice, MkeyPoolGrowsOnDemandUpToItsCap)
{
	nicmr_device *dev = nullptr;
	/* No on-demand mkey cache: the device's mkeys are the pool's alone. */
	ASSERT_EQ(nicmr_device_open("emu:mkeys=4096,mkey_pool=8,mkey_max=300,odp_cache=0", &dev),
		  0);
	nicmr_device_attr a;
	ASSERT_EQ(nicmr_device_query(dev, &a), 0);
	EXPECT_EQ(a.mkey_pool_max, 300u);
	EXPECT_EQ(stats(dev).mkey_pool, 8u);
	EXPECT_EQ(stats(dev).dev_mkeys, 8);
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	nicmr_pool_params p;
	nicmr_pool_params_init(&p);
	p.size = size_t{2} << 20;
	p.allow_fallback = 1;
	nicmr_pool *pool = nullptr;
	ASSERT_EQ(nicmr_pool_create(dev, &p, &pool), 0);
	char *base = static_cast<char *>(nicmr_pool_addr(pool));
	std::vector<nicmr_mr *> mrs;
	std::set<uint32_t> idx;
	for (int i = 0; i < 300; i++) {
		nicmr_mr *mr = nullptr;
		ASSERT_EQ(nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, 0, 0, &mr), 0) << i;
		mrs.push_back(mr);
		idx.insert(NICMR_KEY_INDEX(nicmr_mr_key(mr)));
		if (i == 8) {
			EXPECT_EQ(stats(dev).mkey_pool, 8u + nicmr::mr::kDefaultPoolGrow)
				<< "the ninth registration grew the pool by one batch";
		}
	}
	EXPECT_EQ(idx.size(), 300u);
	EXPECT_EQ(stats(dev).mkey_pool, 300u);
	EXPECT_EQ(stats(dev).dev_mkeys, 300) << "the last batch was cut at the cap";
	nicmr_mr *more = nullptr;
	auto before = stats(dev);
	EXPECT_EQ(nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, 0, 0, &more), -ENOSPC);
	EXPECT_EQ(more, nullptr);
	expect_same(stats(dev), before);
	for (nicmr_mr *mr : mrs)
		EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pool_destroy(pool), 0);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

TEST(ApiDevice, AtomicEndianOptionSaysWhichModeIsInForce)
{
	for (auto [spec, mode] : {std::pair{"emu:atomic_endian=host", NICMR_ATOMIC_HOST},
				  std::pair{"emu:atomic_endian=big", NICMR_ATOMIC_BIG_ENDIAN}}) {
		nicmr_device *dev = nullptr;
		ASSERT_EQ(nicmr_device_open(spec, &dev), 0) << spec;
		nicmr_device_attr a;
		ASSERT_EQ(nicmr_device_query(dev, &a), 0);
		EXPECT_EQ(a.atomic_mode, uint32_t(mode)) << spec;
		EXPECT_EQ(dev->emu->device().config().atomic_host_endianness,
			  mode == NICMR_ATOMIC_HOST);
		EXPECT_EQ(dev->drv->caps().atomic_host_endianness, mode == NICMR_ATOMIC_HOST);
		EXPECT_EQ(nicmr_device_close(dev), 0);
	}
}

TEST(ApiDevice, VfioFailsWithTheBusError)
{
	nicmr_device *dev = nullptr;
	int rc = nicmr_device_open("vfio:0000:03:00.0", &dev);
	if (access("/dev/vfio/vfio", F_OK) != 0)
		EXPECT_EQ(rc, -ENOENT) << "no /dev/vfio/vfio: the VFIO bus says -ENOENT";
	else
		EXPECT_LT(rc, 0) << "no ConnectX at 0000:03:00.0 on this machine";
	EXPECT_EQ(dev, nullptr);
}

TEST(ApiDevice, DevxWithoutSuchNicIsEnodev)
{
	nicmr_device *dev = nullptr;
	int rc = nicmr_device_open("devx:mlx5_nicmr_none", &dev);
#if NICMR_HAVE_RDMA_CORE
	EXPECT_EQ(rc, -ENODEV);
#else
	EXPECT_EQ(rc, -EOPNOTSUPP);
#endif
	EXPECT_EQ(dev, nullptr);
}

TEST(ApiDevice, CloseRefusedWhileObjectsLive)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open(kSpec, &dev), 0);
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), -EBUSY);
	EXPECT_EQ(nicmr_pd_free(pd), 0);

	Anon m(1 << 16);
	nicmr_pool *pool = nullptr;
	ASSERT_EQ(nicmr_pool_import(dev, m.get(), m.len(), NICMR_PAGE_4K, &pool), 0);
	EXPECT_EQ(nicmr_device_close(dev), -EBUSY);
	EXPECT_EQ(nicmr_pool_destroy(pool), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
	EXPECT_EQ(nicmr_device_close(nullptr), -EINVAL);
}

TEST(ApiDevice, TwoDevicesHaveDifferentIds)
{
	nicmr_device *a = nullptr, *b = nullptr;
	ASSERT_EQ(nicmr_device_open(kSpec, &a), 0);
	ASSERT_EQ(nicmr_device_open(kSpec, &b), 0);
	EXPECT_NE(nicmr_device_id(a), nicmr_device_id(b));
	EXPECT_EQ(nicmr_device_close(b), 0);
	EXPECT_EQ(nicmr_device_close(a), 0);
}

TEST(ApiDevice, QueriesRejectNull)
{
	nicmr_device_attr a;
	nicmr_device_stats s;
	EXPECT_EQ(nicmr_device_query(nullptr, &a), -EINVAL);
	EXPECT_EQ(nicmr_device_get_stats(nullptr, &s), -EINVAL);
	EXPECT_EQ(nicmr_device_id(nullptr), 0u);
}

using ApiPool = ApiFixture;

TEST_F(ApiPool, CreateMapsOnceAndDestroyUnmaps)
{
	auto before = stats(dev);
	nicmr_pool_params p;
	nicmr_pool_params_init(&p);
	EXPECT_EQ(p.page_size, NICMR_PAGE_2M);
	EXPECT_EQ(p.numa_node, NICMR_NUMA_ANY);
	p.size = 4096 * 3;
	p.page_size = NICMR_PAGE_4K;
	nicmr_pool *q = nullptr;
	ASSERT_EQ(nicmr_pool_create(dev, &p, &q), 0);
	EXPECT_EQ(nicmr_pool_len(q), 4096u * 3);
	EXPECT_NE(nicmr_pool_addr(q), nullptr);
	auto during = stats(dev);
	EXPECT_EQ(during.pools, before.pools + 1);
	EXPECT_EQ(during.iommu_mappings, before.iommu_mappings + 1);
	EXPECT_EQ(nicmr_pool_destroy(q), 0);
	expect_same(stats(dev), before);
}

TEST_F(ApiPool, CreateOnNumaNodeZeroWithFallback)
{
	nicmr_pool_params p;
	nicmr_pool_params_init(&p);
	p.size = NICMR_PAGE_2M;
	p.numa_node = 0; /* every machine has node 0 */
	p.allow_fallback = 1;
	nicmr_pool *q = nullptr;
	ASSERT_EQ(nicmr_pool_create(dev, &p, &q), 0);
	EXPECT_GE(nicmr_pool_len(q), size_t{NICMR_PAGE_2M});
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, nicmr_pool_addr(q), NICMR_PAGE_2M, NICMR_ACCESS_RECV, 0, 0, &mr),
		  0);
	EXPECT_EQ(nicmr_mr_in_pool(mr), 1);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pool_destroy(q), 0);
}

TEST_F(ApiPool, CreateRejectsBadParams)
{
	auto before = stats(dev);
	nicmr_pool_params p;
	nicmr_pool_params_init(&p);
	nicmr_pool *q = nullptr;
	EXPECT_EQ(nicmr_pool_create(dev, &p, &q), -EINVAL); /* size 0 */
	p.size = 4096;
	p.page_size = 12345;
	EXPECT_EQ(nicmr_pool_create(dev, &p, &q), -EINVAL);
	p.page_size = NICMR_PAGE_4K;
	p.numa_node = 4096;
	EXPECT_EQ(nicmr_pool_create(dev, &p, &q), -EINVAL);
	p.numa_node = NICMR_NUMA_ANY;
	EXPECT_EQ(nicmr_pool_create(nullptr, &p, &q), -EINVAL);
	EXPECT_EQ(nicmr_pool_create(dev, nullptr, &q), -EINVAL);
	EXPECT_EQ(nicmr_pool_create(dev, &p, nullptr), -EINVAL);
	EXPECT_EQ(q, nullptr);
	expect_same(stats(dev), before);
	EXPECT_EQ(nicmr_pool_destroy(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_pool_addr(nullptr), nullptr);
	EXPECT_EQ(nicmr_pool_len(nullptr), 0u);
}

TEST_F(ApiPool, ImportTakesApplicationMemoryAndRefusesOverlap)
{
	Anon m(1 << 16);
	auto before = stats(dev);
	nicmr_pool *q = nullptr;
	EXPECT_EQ(nicmr_pool_import(dev, m.get() + 1, 4096, NICMR_PAGE_4K, &q), -EINVAL);
	EXPECT_EQ(nicmr_pool_import(dev, m.get(), 100, NICMR_PAGE_4K, &q), -EINVAL);
	EXPECT_EQ(nicmr_pool_import(dev, m.get(), 0, NICMR_PAGE_4K, &q), -EINVAL);
	EXPECT_EQ(nicmr_pool_import(dev, m.get(), 4096, 8192, &q), -EINVAL);
	EXPECT_EQ(nicmr_pool_import(dev, nullptr, 4096, NICMR_PAGE_4K, &q), -EINVAL);
	expect_same(stats(dev), before);

	ASSERT_EQ(nicmr_pool_import(dev, m.get(), m.len(), NICMR_PAGE_4K, &q), 0);
	EXPECT_EQ(nicmr_pool_addr(q), m.get());
	EXPECT_EQ(nicmr_pool_len(q), m.len());
	auto mid = stats(dev);
	nicmr_pool *r = nullptr;
	EXPECT_EQ(nicmr_pool_import(dev, m.get() + 4096, 4096, NICMR_PAGE_4K, &r), -EEXIST);
	expect_same(stats(dev), mid);

	/* Registrations inside it take the fast path. */
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get() + 100, 5000, NICMR_ACCESS_SEND, 0, 0, &mr), 0);
	EXPECT_EQ(nicmr_mr_in_pool(mr), 1);
	EXPECT_EQ(stats(dev).slow_mappings, 0u);
	EXPECT_EQ(nicmr_pool_destroy(q), -EBUSY);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pool_destroy(q), 0);
	/* Imported memory is the application's: still there after destroy. */
	EXPECT_EQ(m.get()[0], 0x5a);
	expect_released(stats(dev), before);
}

TEST_F(ApiPool, ImportOfHugepageMemory)
{
	NICMR_NEED_HUGEPAGES(NICMR_PAGE_2M, 2);
	void *p = mmap(nullptr, NICMR_PAGE_2M * 2, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	ASSERT_NE(p, MAP_FAILED) << "2 MiB hugepages were free a moment ago: " << strerror(errno);
	std::memset(p, 1, NICMR_PAGE_2M * 2);
	nicmr_pool *q = nullptr;
	ASSERT_EQ(nicmr_pool_import(dev, p, NICMR_PAGE_2M * 2, NICMR_PAGE_2M, &q), 0);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, p, NICMR_PAGE_2M * 2, NICMR_ACCESS_RECV, 0, 0, &mr), 0);
	{
		nicmr::mlx5::MkeyQuery mq;
		ASSERT_EQ(query(nicmr_mr_key(mr), &mq), 0);
		EXPECT_GE(mq.ctx.log_page_size, 21u) << "a 2 MiB-congruent pool uses large pages";
	}
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pool_destroy(q), 0);
	munmap(p, NICMR_PAGE_2M * 2);
}

using ApiPd = ApiFixture;

TEST_F(ApiPd, AllocGivesDistinctPdsAndFreeRefusesWhileMrsLive)
{
	nicmr_pd *p2 = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &p2), 0);
	EXPECT_NE(nicmr_pd_num(p2), nicmr_pd_num(pd));
	EXPECT_NE(nicmr_pd_num(p2), 0u);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(p2, base, 4096, NICMR_ACCESS_SEND, 0, 0, &mr), 0);
	EXPECT_EQ(nicmr_pd_free(p2), -EBUSY);
	nicmr::mlx5::MkeyQuery mq;
	ASSERT_EQ(query(nicmr_mr_key(mr), &mq), 0);
	EXPECT_EQ(mq.ctx.pd, nicmr_pd_num(p2));
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pd_free(p2), 0);
	EXPECT_EQ(nicmr_pd_free(nullptr), -EINVAL);
	EXPECT_EQ(nicmr_pd_alloc(nullptr, &p2), -EINVAL);
	EXPECT_EQ(nicmr_pd_alloc(dev, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_pd_num(nullptr), 0u);
}

/* The device's PD table full (2^16 - 1 PDs on a default emu device, some the device's own): the
 * next ALLOC_PD is refused with EXCEED_LIM, -ENOMEM as Linux's mlx5 maps it (cmd.c,
 * cmd_status_to_err), and nothing is left of the refused call; a freed PD serves the next. */
TEST_F(ApiPd, APdTableFullIsEnomem)
{
	std::vector<nicmr_pd *> pds;
	int rc = 0;
	for (;;) {
		nicmr_pd *p = nullptr;
		if ((rc = nicmr_pd_alloc(dev, &p)) != 0) {
			EXPECT_EQ(p, nullptr);
			break;
		}
		pds.push_back(p);
		if (pds.size() > 65535)
			break; /* more than the table holds: the check below fails */
	}
	EXPECT_EQ(rc, -ENOMEM);
	EXPECT_GT(pds.size(), 65000u);
	EXPECT_LT(pds.size(), 65535u);
	nicmr_pd *again = nullptr;
	EXPECT_EQ(nicmr_pd_alloc(dev, &again), -ENOMEM) << "the refusal took nothing, gave nothing";
	ASSERT_FALSE(pds.empty());
	EXPECT_EQ(nicmr_pd_free(pds.back()), 0);
	pds.pop_back();
	ASSERT_EQ(nicmr_pd_alloc(dev, &again), 0);
	pds.push_back(again);
	for (nicmr_pd *p : pds)
		EXPECT_EQ(nicmr_pd_free(p), 0);
}

using ApiRaw = ApiFixture;

TEST_F(ApiRaw, RoundTripOnTheSameDeviceAndExdevOnAnother)
{
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, base + 64, 1000, NICMR_ACCESS_REMOTE_READ, 0, 0, &mr), 0);
	size_t size = 0;
	EXPECT_EQ(nicmr_mr_raw_attr(mr, nullptr, &size), -ENOSPC);
	EXPECT_EQ(size, size_t{NICMR_RAW_KEY_SIZE});
	uint8_t buf[NICMR_RAW_KEY_SIZE + 8];
	size = 10;
	EXPECT_EQ(nicmr_mr_raw_attr(mr, buf, &size), -ENOSPC);
	EXPECT_EQ(size, size_t{NICMR_RAW_KEY_SIZE});
	size = sizeof(buf);
	ASSERT_EQ(nicmr_mr_raw_attr(mr, buf, &size), 0);
	EXPECT_EQ(size, size_t{NICMR_RAW_KEY_SIZE});
	EXPECT_EQ(nicmr_mr_raw_attr(nullptr, buf, &size), -EINVAL);
	EXPECT_EQ(nicmr_mr_raw_attr(mr, buf, nullptr), -EINVAL);

	uint64_t key = 0;
	ASSERT_EQ(nicmr_mr_map_raw(dev, buf, NICMR_RAW_KEY_SIZE, &key), 0);
	EXPECT_EQ(key, nicmr_mr_key(mr));
	EXPECT_EQ(nicmr_mr_unmap_key(dev, key), 0);
	EXPECT_EQ(nicmr_mr_unmap_key(nullptr, key), -EINVAL);

	nicmr_device *other = nullptr;
	ASSERT_EQ(nicmr_device_open(kSpec, &other), 0);
	EXPECT_EQ(nicmr_mr_map_raw(other, buf, NICMR_RAW_KEY_SIZE, &key), -EXDEV);
	EXPECT_EQ(nicmr_device_close(other), 0);

	EXPECT_EQ(nicmr_mr_map_raw(dev, buf, NICMR_RAW_KEY_SIZE - 1, &key), -EINVAL);
	uint8_t bad[NICMR_RAW_KEY_SIZE];
	std::memcpy(bad, buf, sizeof(bad));
	bad[20] ^= 1;
	EXPECT_EQ(nicmr_mr_map_raw(dev, bad, sizeof(bad), &key), -EINVAL);
	EXPECT_EQ(nicmr_mr_map_raw(dev, nullptr, sizeof(bad), &key), -EINVAL);
	EXPECT_EQ(nicmr_mr_map_raw(dev, buf, sizeof(bad), nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_map_raw(nullptr, buf, sizeof(bad), &key), -EINVAL);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

/* On a device with mkey_by_name: ReaderHoldsBackKeyReuseUntilQuiescent takes a well-known
 * key. */
class ApiLookup : public ApiFixture {
protected:
	const char *spec() const override { return "emu:mkeys=1024,mkey_by_name=1"; }
};

TEST_F(ApiLookup, ChecksRightsBoundsAndStaleKeys)
{
	nicmr_mr *mr = nullptr;
	char *a = base + 8192;
	ASSERT_EQ(
		nicmr_mr_reg(pd, a, 4096, NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_SEND, 0, 0, &mr),
		0);
	const uint32_t k = nicmr_mr_key(mr);
	uint64_t iova = 0, iova0 = 0;
	const auto va = reinterpret_cast<uint64_t>(a);
	ASSERT_EQ(nicmr_key_lookup(dev, k, va, 16, NICMR_ACCESS_REMOTE_READ, &iova0), 0);
	ASSERT_EQ(nicmr_key_lookup(dev, k, va + 100, 16, NICMR_ACCESS_SEND, &iova), 0);
	EXPECT_EQ(iova, iova0 + 100);
	const nicmr::mem::PoolEntry *e = dev->space->lookup(a, 1);
	ASSERT_NE(e, nullptr);
	EXPECT_EQ(iova0, e->iova + (va - e->va));
	EXPECT_EQ(nicmr_key_lookup(dev, k, va, 16, NICMR_ACCESS_REMOTE_WRITE, &iova), -EACCES);
	EXPECT_EQ(nicmr_key_lookup(dev, k, va, 16, NICMR_ACCESS_RECV, &iova), -EACCES);
	EXPECT_EQ(nicmr_key_lookup(dev, k, va + 4090, 16, NICMR_ACCESS_SEND, &iova), -ERANGE);
	EXPECT_EQ(nicmr_key_lookup(dev, k, va, 0, NICMR_ACCESS_SEND, &iova), -EINVAL);
	EXPECT_EQ(nicmr_key_lookup(dev, k, va, 16, 1ull << 40, &iova), -EINVAL);
	EXPECT_EQ(nicmr_key_lookup(dev, k ^ 1, va, 16, NICMR_ACCESS_SEND, &iova), -ENOKEY);
	EXPECT_EQ(nicmr_key_lookup(nullptr, k, va, 16, NICMR_ACCESS_SEND, &iova), -EINVAL);
	EXPECT_EQ(nicmr_key_lookup(dev, k, va, 16, NICMR_ACCESS_SEND, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_key_lookup(dev, k, va, 16, NICMR_ACCESS_SEND, &iova), -ENOKEY);
}

TEST_F(ApiLookup, ReaderHoldsBackKeyReuseUntilQuiescent)
{
	EXPECT_EQ(nicmr_thread_register(dev, 64), -EINVAL);
	EXPECT_EQ(nicmr_thread_register(nullptr, 0), -EINVAL);
	ASSERT_EQ(nicmr_thread_register(dev, 0), 0);
	const uint64_t want = (7u << 8) | 3;
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(
		nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY, want, &mr),
		0);
	ASSERT_EQ(nicmr_mr_dereg(mr), 0);
	auto before = stats(dev);
	EXPECT_GE(before.keys_retiring, 1u);
	/* The reader has not reported since the dereg: index 7 may still be in its hands. */
	EXPECT_EQ(
		nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY, want, &mr),
		-EAGAIN);
	expect_same(stats(dev), before);
	nicmr_thread_quiescent(dev, 0);
	ASSERT_EQ(
		nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_SEND, NICMR_MR_REQUESTED_KEY, want, &mr),
		0);
	EXPECT_EQ(nicmr_mr_key(mr), want);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	nicmr_thread_unregister(dev, 0);
}

TEST(ApiCpp, HandlesReleaseInOrder)
{
	nicmr::DevicePtr dev;
	ASSERT_EQ(nicmr::open_device(kSpec, &dev), 0);
	nicmr::PdPtr pd;
	ASSERT_EQ(nicmr::alloc_pd(dev.get(), &pd), 0);
	nicmr_pool_params p;
	nicmr_pool_params_init(&p);
	p.size = 1 << 16;
	p.page_size = NICMR_PAGE_4K;
	nicmr::PoolPtr pool;
	ASSERT_EQ(nicmr::create_pool(dev.get(), p, &pool), 0);
	nicmr::MrPtr mr, sub;
	ASSERT_EQ(nicmr::reg_mr(pd.get(), nicmr_pool_addr(pool.get()), 8192,
				NICMR_ACCESS_SEND | NICMR_ACCESS_RECV, &mr),
		  0);
	ASSERT_EQ(nicmr::reg_sub_mr(mr.get(), 4096, 100, NICMR_ACCESS_SEND, &sub), 0);
	nicmr::ReaderScope r(dev.get(), 1);
	EXPECT_EQ(r.status(), 0);
	r.quiescent();
	EXPECT_EQ(stats(dev.get()).mrs, 2u);
	nicmr::DevicePtr bad;
	EXPECT_EQ(nicmr::open_device("nope", &bad), -EINVAL);
	EXPECT_FALSE(bad);
}

/*
 * Pool churn on a live device: the DmaSpace snapshots that create and destroy retire are
 * reclaimed by the same calls once no registration can be reading them, so they do not pile
 * up until the device closes. Both kinds of registering thread: without key caches (1024
 * keys: the device counter marks lookups) and with them (4096: the thread's own line).
 */
class ApiPoolChurn : public ApiFixture, public ::testing::WithParamInterface<const char *> {
protected:
	const char *spec() const override { return GetParam(); }
	/* A 4 KiB-page pool: no hugepage needed, created and destroyed in microseconds. */
	nicmr_pool *small_pool()
	{
		nicmr_pool_params p;
		nicmr_pool_params_init(&p);
		p.size = 4 * 4096;
		p.page_size = NICMR_PAGE_4K;
		p.name = "churn";
		nicmr_pool *q = nullptr;
		EXPECT_EQ(nicmr_pool_create(dev, &p, &q), 0);
		return q;
	}
};

TEST_P(ApiPoolChurn, CreateAndDestroyLeaveNoRetiredSnapshot)
{
	nicmr_mr *mr = nullptr; /* a registration in the fixture's pool stays live throughout */
	ASSERT_EQ(nicmr_mr_reg(pd, base, 4096, NICMR_ACCESS_RECV, 0, 0, &mr), 0);
	for (int i = 0; i < 200; i++) {
		nicmr_pool *q = small_pool();
		ASSERT_NE(q, nullptr);
		EXPECT_EQ(dev->space->retired_count(), 0u) << "after create " << i;
		nicmr_mr *inner = nullptr;
		ASSERT_EQ(
			nicmr_mr_reg(pd, nicmr_pool_addr(q), 4096, NICMR_ACCESS_RECV, 0, 0, &inner),
			0);
		ASSERT_EQ(nicmr_mr_dereg(inner), 0);
		ASSERT_EQ(nicmr_pool_destroy(q), 0);
		ASSERT_EQ(dev->space->retired_count(), 0u) << "after destroy " << i;
	}
	/* Imported pools go the same way. */
	Anon m(4 * 4096);
	nicmr_pool *q = nullptr;
	ASSERT_EQ(nicmr_pool_import(dev, m.get(), m.len(), NICMR_PAGE_4K, &q), 0);
	EXPECT_EQ(dev->space->retired_count(), 0u);
	ASSERT_EQ(nicmr_pool_destroy(q), 0);
	EXPECT_EQ(dev->space->retired_count(), 0u);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

/*
 * Registering threads find their pool through the snapshot while another thread creates and
 * destroys pools: every registration in the long-lived pool takes the fast path and succeeds,
 * and no snapshot is freed under a lookup (ASan: use after free; TSan: a race with the free).
 * NICMR_POOL_CHURN_ROUNDS sets the churn (the 'stress' suite runs it long under TSan).
 */
TEST_P(ApiPoolChurn, RegistrationsDuringChurnNeverReadAFreedSnapshot)
{
	int rounds = 300;
	if (const char *env = std::getenv("NICMR_POOL_CHURN_ROUNDS"))
		rounds = std::max(1, std::atoi(env));
	std::atomic<bool> stop{false};
	std::atomic<int> failures{0};
	std::atomic<uint64_t> regs{0};
	auto registrar = [&](int id) {
		char *at = base + 64 * 1024 * (id + 1);
		while (!stop.load(std::memory_order_relaxed)) {
			nicmr_mr *m = nullptr;
			if (nicmr_mr_reg(pd, at, 4096, NICMR_ACCESS_RECV, 0, 0, &m) != 0 ||
			    m->pool != pool || nicmr_mr_dereg(m) != 0)
				failures.fetch_add(1, std::memory_order_relaxed);
			regs.fetch_add(1, std::memory_order_relaxed);
		}
	};
	std::thread t1(registrar, 0), t2(registrar, 1);
	size_t most_retired = 0;
	for (int i = 0; i < rounds; i++) {
		nicmr_pool *q = small_pool();
		if (q == nullptr)
			break;
		most_retired = std::max(most_retired, dev->space->retired_count());
		EXPECT_EQ(nicmr_pool_destroy(q), 0);
		most_retired = std::max(most_retired, dev->space->retired_count());
	}
	stop.store(true);
	t1.join();
	t2.join();
	EXPECT_EQ(failures.load(), 0);
	EXPECT_GT(regs.load(), 0u);
	/* One thread churns: each call reclaims what it retired before it returns. */
	EXPECT_EQ(most_retired, 0u);
	EXPECT_EQ(dev->space->retired_count(), 0u);
}

INSTANTIATE_TEST_SUITE_P(, ApiPoolChurn,
			 ::testing::Values("emu:mkeys=1024", "emu:mkeys=4096,delivery=inline"),
			 [](const auto &info) {
				 return std::string(info.index == 0 ? "NoKeyCaches" : "KeyCaches");
			 });
