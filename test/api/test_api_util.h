/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared helpers of the native API tests. */
#ifndef NICMR_TEST_API_UTIL_H
#define NICMR_TEST_API_UTIL_H

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <string>

#include "api_internal.h"
#include "nicmr/nicmr.h"
#include "nicmr/nicmr.hpp"

namespace nicmr::test {

/* A small emulated device: 1024 keys keep each open cheap. */
inline constexpr const char *kSpec = "emu:mkeys=1024";

inline nicmr_device_stats stats(nicmr_device *dev)
{
	nicmr_device_stats s{};
	EXPECT_EQ(nicmr_device_get_stats(dev, &s), 0);
	return s;
}

/* What a failed call must leave exactly as it was. */
inline void expect_same(const nicmr_device_stats &a, const nicmr_device_stats &b)
{
	EXPECT_EQ(a.mrs, b.mrs);
	EXPECT_EQ(a.pools, b.pools);
	EXPECT_EQ(a.pds, b.pds);
	EXPECT_EQ(a.slow_mappings, b.slow_mappings);
	EXPECT_EQ(a.pinned_pages, b.pinned_pages);
	EXPECT_EQ(a.keys_free, b.keys_free);
	EXPECT_EQ(a.dev_mkeys, b.dev_mkeys);
	EXPECT_EQ(a.iommu_mappings, b.iommu_mappings);
}

/* What a successful register + deregister must give back. The device may keep the index as a
 * free mkey, and the key waits for its grace period: those two are not compared. */
inline void expect_released(const nicmr_device_stats &a, const nicmr_device_stats &b)
{
	EXPECT_EQ(a.mrs, b.mrs);
	EXPECT_EQ(a.pools, b.pools);
	EXPECT_EQ(a.pds, b.pds);
	EXPECT_EQ(a.slow_mappings, b.slow_mappings);
	EXPECT_EQ(a.pinned_pages, b.pinned_pages);
	EXPECT_EQ(a.iommu_mappings, b.iommu_mappings);
}

/* Every data-path right of the ibv family. */
inline constexpr uint64_t kAll = NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_READ |
				 NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_REMOTE_ATOMIC;

inline uint64_t u(const void *p)
{
	return reinterpret_cast<uintptr_t>(p);
}

/* One completion of cq within 5 s (the device model may run on its own thread). */
inline nicmr_wc wait_wc(nicmr_cq *cq)
{
	nicmr_wc wc{};
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (std::chrono::steady_clock::now() < end) {
		const int n = nicmr_cq_poll(cq, &wc, 1);
		if (n == 1)
			return wc;
		EXPECT_EQ(n, 0);
	}
	ADD_FAILURE() << "no completion";
	return wc;
}

/* A CQ and an RC QP on each port, port 1's QP connected to port 2's. */
inline void connect_ports(nicmr_device *dev, nicmr_pd *pd, nicmr_cq **cq1, nicmr_cq **cq2,
			  nicmr_qp **qp1, nicmr_qp **qp2)
{
	ASSERT_EQ(nicmr_cq_create(dev, 64, cq1), 0);
	ASSERT_EQ(nicmr_cq_create(dev, 64, cq2), 0);
	ASSERT_EQ(nicmr_qp_create(pd, 1, *cq1, 16, qp1), 0);
	ASSERT_EQ(nicmr_qp_create(pd, 2, *cq2, 16, qp2), 0);
	ASSERT_EQ(nicmr_qp_connect(*qp1, 2, nicmr_qp_num(*qp2)), 0);
	ASSERT_EQ(nicmr_qp_connect(*qp2, 1, nicmr_qp_num(*qp1)), 0);
}

/* Destroys the QPs, then the CQs they report to; null ones are skipped. */
inline void destroy_queues(std::initializer_list<nicmr_qp *> qps,
			   std::initializer_list<nicmr_cq *> cqs)
{
	for (nicmr_qp *q : qps)
		if (q) {
			EXPECT_EQ(nicmr_qp_destroy(q), 0);
		}
	for (nicmr_cq *c : cqs)
		if (c) {
			EXPECT_EQ(nicmr_cq_destroy(c), 0);
		}
}

/* Anonymous memory outside every pool, unmapped when it goes. */
class Anon {
public:
	explicit Anon(size_t len) : len_(len)
	{
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		p_ = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
		if (p_)
			std::memset(p_, 0x5a, len);
	}
	~Anon()
	{
		if (p_)
			munmap(p_, len_);
	}
	char *get() const { return p_; }
	size_t len() const { return len_; }

private:
	char *p_ = nullptr;
	size_t len_;
};

/* Anonymous memory that nothing has touched yet (no page resident), unmapped when it goes. */
class Untouched {
public:
	explicit Untouched(size_t len, int prot = PROT_READ | PROT_WRITE) : len_(len)
	{
		void *p = mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		p_ = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
	}
	~Untouched()
	{
		if (p_)
			munmap(p_, len_);
	}
	Untouched(const Untouched &) = delete;
	Untouched &operator=(const Untouched &) = delete;
	char *get() const { return p_; }

private:
	char *p_ = nullptr;
	size_t len_;
};

/* A device with one PD and one pool (2 MiB pages, 4 KiB when none is free). */
class ApiFixture : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(nicmr_device_open(spec(), &dev), 0);
		ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
		nicmr_pool_params p;
		nicmr_pool_params_init(&p);
		p.size = size_t{4} << 20;
		p.allow_fallback = 1;
		p.name = "api-test";
		ASSERT_EQ(nicmr_pool_create(dev, &p, &pool), 0);
		base = static_cast<char *>(nicmr_pool_addr(pool));
	}
	void TearDown() override
	{
		if (pool) {
			EXPECT_EQ(nicmr_pool_destroy(pool), 0);
		}
		if (pd) {
			EXPECT_EQ(nicmr_pd_free(pd), 0);
		}
		if (dev) {
			EXPECT_EQ(nicmr_device_close(dev), 0);
		}
	}
	virtual const char *spec() const { return kSpec; }
	/* The device's view of a key (QUERY_MKEY through the driver). */
	int query(uint32_t key, mlx5::MkeyQuery *q)
	{
		return dev->drv->query_mkey(mr::mkey_index(key), 0, q);
	}
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	char *base = nullptr;
};

/* A device with keys enough for per-thread key caches and inline delivery: the registration
 * fast path as benchmarked. */
class HotPathFixture : public ApiFixture {
protected:
	const char *spec() const override { return spec_.c_str(); }
	/* The thread's key cache and UMR lane come on its first registrations (slow path). */
	void warm_up()
	{
		for (int i = 0; i < 100; i++) {
			nicmr_mr *m = nullptr;
			ASSERT_EQ(nicmr_mr_reg(pd, base + 64 * i, 64, kAll, 0, 0, &m), 0);
			ASSERT_EQ(nicmr_mr_dereg(m), 0);
		}
	}
	/* rounds x (a 4 KiB MR in the pool, a sub-MR of it, both deregistered): many times the key
	 * cache's batch of 32, so refills, retire batches and their frees happen in it. */
	void pool_rounds(int rounds)
	{
		for (int i = 0; i < rounds; i++) {
			nicmr_mr *m = nullptr, *sub = nullptr;
			ASSERT_EQ(nicmr_mr_reg(pd, base + 4096 * (i % 512), 4096, kAll, 0, 0, &m),
				  0);
			ASSERT_EQ(
				nicmr_mr_reg_sub(m, 64, 128, NICMR_ACCESS_REMOTE_READ, 0, 0, &sub),
				0);
			ASSERT_EQ(nicmr_mr_dereg(sub), 0);
			ASSERT_EQ(nicmr_mr_dereg(m), 0);
		}
	}

private:
	const std::string spec_ =
		"emu:mkeys=" + std::to_string(api::kMinKeysForCaches) + ",delivery=inline";
};

/* The same tests on both MkeyProgrammers: UMR (the default) and firmware commands. */
class ApiBoth : public ApiFixture, public ::testing::WithParamInterface<const char *> {
protected:
	const char *spec() const override { return GetParam(); }
	bool umr() const { return std::strstr(GetParam(), "programmer=cmd") == nullptr; }
	/* The device creates mkeys at chosen indices (requested keys, the command programmer,
	 * indirect regions); a stock ConnectX, the emu default, does not. */
	bool by_name() const { return std::strstr(GetParam(), "mkey_by_name=1") != nullptr; }
};

/* ApiBoth's devices: UMR on a stock device (it chooses every mkey index), UMR on a device with
 * mkey_by_name, and the command programmer, which needs mkey_by_name. */
#define NICMR_API_BOTH_SPECS(mkeys)                                                                \
	::testing::Values("emu:mkeys=" mkeys, "emu:mkeys=" mkeys ",mkey_by_name=1",                \
			  "emu:mkeys=" mkeys ",programmer=cmd,mkey_by_name=1")

} // namespace nicmr::test

#endif
