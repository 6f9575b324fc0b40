/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers of the provider's conformance tests. They use libfabric's public API through the
 * installed libfabric, as an application would; the environment (test/fabric/meson.build)
 * points FI_PROVIDER_PATH at the built provider and restricts libfabric to it (FI_PROVIDER),
 * so that no other provider's signal handlers run in these processes.
 */
#ifndef NICMR_TEST_FABRIC_UTIL_H
#define NICMR_TEST_FABRIC_UTIL_H

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nicmr/fi_nicmr.h"

namespace nicmr::test {

inline constexpr uint32_t kApi = FI_VERSION(1, 17);
/* What a typical application allows: the provider keeps what it needs out of these. */
inline constexpr int kAppMrMode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
/* The mr_mode bits nicmr knows (the sweep goes over every subset). */
inline constexpr int kKnownBits[] = {FI_MR_LOCAL,     FI_MR_RAW,      FI_MR_VIRT_ADDR,
				     FI_MR_ALLOCATED, FI_MR_PROV_KEY, FI_MR_MMU_NOTIFY,
				     FI_MR_RMA_EVENT, FI_MR_ENDPOINT};

/* Every MR right, local and remote. */
inline constexpr uint64_t kRw = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

/* fi_info hints for nicmr with mr_mode (other fields unset). */
class Hints {
public:
	explicit Hints(int mr_mode)
	{
		h_ = fi_allocinfo();
		if (h_) {
			h_->fabric_attr->prov_name = strdup("nicmr");
			h_->domain_attr->mr_mode = mr_mode;
		}
	}
	~Hints() { fi_freeinfo(h_); }
	Hints(const Hints &) = delete;
	Hints &operator=(const Hints &) = delete;
	fi_info *get() const { return h_; }
	fi_info *operator->() const { return h_; }

private:
	fi_info *h_ = nullptr;
};

/* The fi_getinfo answer, freed when it goes. */
class Info {
public:
	Info() = default;
	~Info() { fi_freeinfo(p_); }
	Info(const Info &) = delete;
	Info &operator=(const Info &) = delete;
	int get(const Hints &h) { return fi_getinfo(kApi, nullptr, nullptr, 0, h.get(), &p_); }
	fi_info *p() const { return p_; }
	fi_info *operator->() const { return p_; }

private:
	fi_info *p_ = nullptr;
};

/* A fid closed when it goes (an MR, a domain, a fabric); release() keeps it open. */
template <typename T> class Fid {
public:
	Fid() = default;
	~Fid() { reset(); }
	Fid(const Fid &) = delete;
	Fid &operator=(const Fid &) = delete;
	T **out() { return &p_; }
	T *get() const { return p_; }
	T *operator->() const { return p_; }
	void reset()
	{
		if (p_) {
			EXPECT_EQ(fi_close(&p_->fid), 0);
		}
		p_ = nullptr;
	}

private:
	T *p_ = nullptr;
};

/* Page-aligned anonymous memory (outside every pool: slow-path registrations). */
class Buf {
public:
	explicit Buf(size_t len) : len_(len)
	{
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		p_ = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
		if (p_)
			std::memset(p_, 0x3c, len);
	}
	~Buf()
	{
		if (p_)
			munmap(p_, len_);
	}
	Buf(const Buf &) = delete;
	Buf &operator=(const Buf &) = delete;
	char *get() const { return p_; }
	size_t len() const { return len_; }

private:
	char *p_ = nullptr;
	size_t len_;
};

inline fi_nicmr_pool_ops *pool_ops(fid_domain *dom)
{
	void *ops = nullptr;
	EXPECT_EQ(fi_open_ops(&dom->fid, FI_NICMR_POOL_OPS, 0, &ops, nullptr), 0);
	return static_cast<fi_nicmr_pool_ops *>(ops);
}

/* A pool of len bytes of the domain with 2 MiB pages, the memory the fast path registers;
 * flags: FI_NICMR_POOL_FALLBACK (4 KiB pages where huge pages are short) or 0. pool_create's
 * code; on success *pool and *addr (its first byte). The test destroys it with pool_destroy
 * and checks that code. */
inline int make_pool(fid_domain *dom, size_t len, uint64_t flags, fi_nicmr_pool **pool, char **addr)
{
	fi_nicmr_pool_ops *ops = pool_ops(dom);
	const int ret = ops->pool_create(dom, len, NICMR_PAGE_2M, NICMR_NUMA_ANY, flags, pool);
	*addr = ret == 0 ? static_cast<char *>(ops->pool_addr(*pool)) : nullptr;
	return ret;
}

/* nicmr's MR ops extension (regattr of sub-MRs, mr_is_sub). */
inline fi_nicmr_mr_ops *mr_ops(fid_domain *dom)
{
	void *ops = nullptr;
	EXPECT_EQ(fi_open_ops(&dom->fid, FI_NICMR_MR_OPS, 0, &ops, nullptr), 0);
	return static_cast<fi_nicmr_mr_ops *>(ops);
}

inline nicmr_device_stats stats(fid_domain *dom)
{
	nicmr_device_stats s{};
	EXPECT_EQ(pool_ops(dom)->device_stats(dom, &s), 0);
	return s;
}

/* The raw key of mr (fi_mr_raw_attr: 64 bytes), mapped back in dom (fi_mr_map_raw, then
 * unmapped): the key it names and the base address it gives. */
inline void raw_round_trip(fid_domain *dom, fid_mr *mr, uint64_t *key, uint64_t *base)
{
	uint8_t raw[64];
	size_t size = sizeof(raw);
	ASSERT_EQ(fi_mr_raw_attr(mr, base, raw, &size, 0), 0);
	ASSERT_EQ(size, 64u);
	ASSERT_EQ(fi_mr_map_raw(dom, *base, raw, size, key, 0), 0);
	EXPECT_EQ(fi_mr_unmap_key(dom, *key), 0);
}

/* What a failed call must leave as it was. */
inline void expect_same(const nicmr_device_stats &a, const nicmr_device_stats &b)
{
	EXPECT_EQ(a.mrs, b.mrs);
	EXPECT_EQ(a.pools, b.pools);
	EXPECT_EQ(a.pds, b.pds);
	EXPECT_EQ(a.slow_mappings, b.slow_mappings);
	EXPECT_EQ(a.pinned_pages, b.pinned_pages);
	EXPECT_EQ(a.iommu_mappings, b.iommu_mappings);
}

/* The test environment's device with ConnectX's mkey_by_name: it takes requested keys, so a
 * domain without FI_MR_PROV_KEY can be had (test/fabric/meson.build's FI_NICMR_DEVICE is a
 * stock device, which requires FI_MR_PROV_KEY). */
inline constexpr const char *kByNameSpec = "emu:mkeys=1024,mkey_by_name=1";

/* The test environment's device spec (FI_NICMR_DEVICE) with mkey_by_name=1 added. */
inline std::string env_spec_with_mkey_by_name()
{
	const char *env = std::getenv("FI_NICMR_DEVICE");
	std::string s = env != nullptr && *env != '\0' ? env : "emu";
	return s + (s.find(':') == std::string::npos ? ":" : ",") + "mkey_by_name=1";
}

/* FI_NICMR_DEVICE names another emu device for the scope (the provider reads it in fi_getinfo
 * and fi_fabric), and the test environment's again after it. */
class DeviceSpecScope {
public:
	explicit DeviceSpecScope(const char *spec)
	{
		const char *old = std::getenv("FI_NICMR_DEVICE");
		had_ = old != nullptr;
		if (had_)
			old_ = old;
		setenv("FI_NICMR_DEVICE", spec, 1);
	}
	~DeviceSpecScope()
	{
		if (had_)
			setenv("FI_NICMR_DEVICE", old_.c_str(), 1);
		else
			unsetenv("FI_NICMR_DEVICE");
	}
	DeviceSpecScope(const DeviceSpecScope &) = delete;
	DeviceSpecScope &operator=(const DeviceSpecScope &) = delete;

private:
	bool had_ = false;
	std::string old_;
};

/* A fabric and one domain opened with mr_mode. */
class FabricFixture : public ::testing::Test {
protected:
	void open(int mr_mode, enum fi_threading threading = FI_THREAD_UNSPEC, uint64_t caps = 0)
	{
		Hints h(mr_mode);
		ASSERT_NE(h.get(), nullptr);
		h->domain_attr->threading = threading;
		h->caps = caps;
		ASSERT_EQ(info_.get(h), 0);
		ASSERT_NE(info_.p(), nullptr);
		ASSERT_EQ(fi_fabric(info_->fabric_attr, fabric_.out(), nullptr), 0);
		ASSERT_EQ(fi_domain(fabric_.get(), info_.p(), domain_.out(), nullptr), 0);
	}
	void SetUp() override { open(kAppMrMode); }
	void TearDown() override
	{
		domain_.reset();
		fabric_.reset();
	}
	Info info_;
	Fid<fid_fabric> fabric_;
	Fid<fid_domain> domain_;
};

/* The next CQ entry or error: fi_cq_read's return once it is not -FI_EAGAIN (5 s at most). */
inline ssize_t next(fid_cq *cq, fi_cq_msg_entry *e)
{
	auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	ssize_t ret;
	do
		ret = fi_cq_read(cq, e, 1);
	while (ret == -FI_EAGAIN && std::chrono::steady_clock::now() < end);
	return ret;
}

/* An endpoint with its AV and CQ (FI_CQ_FORMAT_MSG) and counters for writes and reads. */
struct Ep {
	Fid<fid_av> av;
	Fid<fid_cq> cq;
	Fid<fid_cntr> wc, rc;
	Fid<fid_ep> ep;
	fi_addr_t peer = FI_ADDR_NOTAVAIL, self = FI_ADDR_NOTAVAIL;
	void close()
	{
		ep.reset();
		wc.reset();
		rc.reset();
		cq.reset();
		av.reset();
	}
};

/* Opens e in dom with info: its AV, CQ (FI_TRANSMIT) and counters (FI_WRITE, FI_READ) bound,
 * enabled. */
inline void open_ep(fid_domain *dom, fi_info *info, Ep *e)
{
	fi_av_attr av{};
	av.type = FI_AV_TABLE;
	ASSERT_EQ(fi_av_open(dom, &av, e->av.out(), nullptr), 0);
	fi_cq_attr cq{};
	cq.format = FI_CQ_FORMAT_MSG;
	ASSERT_EQ(fi_cq_open(dom, &cq, e->cq.out(), nullptr), 0);
	fi_cntr_attr ca{};
	ca.events = FI_CNTR_EVENTS_COMP;
	ASSERT_EQ(fi_cntr_open(dom, &ca, e->wc.out(), nullptr), 0);
	ASSERT_EQ(fi_cntr_open(dom, &ca, e->rc.out(), nullptr), 0);
	ASSERT_EQ(fi_endpoint(dom, info, e->ep.out(), nullptr), 0);
	ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->av->fid, 0), 0);
	ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->cq->fid, FI_TRANSMIT), 0);
	ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->wc->fid, FI_WRITE), 0);
	ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->rc->fid, FI_READ), 0);
	ASSERT_EQ(fi_enable(e->ep.get()), 0);
}

/* from's AV learns to's address (from->peer) and its own (from->self). */
inline void connect(Ep *from, Ep *to)
{
	char addr[64];
	size_t len = sizeof(addr);
	ASSERT_EQ(fi_getname(&to->ep->fid, addr, &len), 0);
	ASSERT_EQ(len, sizeof(fi_nicmr_name));
	ASSERT_EQ(fi_av_insert(from->av.get(), addr, 1, &from->peer, 0, nullptr), 1);
	len = sizeof(addr);
	ASSERT_EQ(fi_getname(&from->ep->fid, addr, &len), 0);
	ASSERT_EQ(fi_av_insert(from->av.get(), addr, 1, &from->self, 0, nullptr), 1);
}

} // namespace nicmr::test

#endif
