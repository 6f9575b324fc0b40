/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared helpers of the native API tests. */
#ifndef NICMR_TEST_API_UTIL_H
#define NICMR_TEST_API_UTIL_H

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

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
	int query(uint32_t key, mlx5::MkeyQuery *q) { return dev->drv->query_mkey(key >> 8, 0, q); }
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	char *base = nullptr;
};

/* The same tests on both MkeyProgrammers: UMR (the default) and firmware commands. */
class ApiBoth : public ApiFixture, public ::testing::WithParamInterface<const char *> {
protected:
	const char *spec() const override { return GetParam(); }
	bool umr() const { return std::strstr(GetParam(), "programmer=cmd") == nullptr; }
};

} // namespace nicmr::test

#endif
