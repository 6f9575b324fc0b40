/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Conformance of fi_mr(3)'s RMA events and of single-use keys through the installed libfabric:
 * FI_MR_RMA_EVENT and the FI_RMA_EVENT capability as the device offers them, MRs registered with
 * FI_RMA_EVENT (disabled until fi_mr_enable), counters bound to them with fi_mr_bind that count
 * remote writes, the order of closes, and single-use keys through the "nicmr_mr_ops" extension.
 * These are device-model extensions: the emu device has them unless its spec says ext=0 (or
 * names the other one), and then nicmr offers neither.
 */
#include <endian.h>

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;
constexpr uint64_t kRemote = FI_REMOTE_READ | FI_REMOTE_WRITE;
/* MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: the device refused the key. */
constexpr int kRemoteAccessErr = 0x13;

/* fi_mr_attr over one range. */
fi_mr_attr one_range(const iovec *iov, uint64_t access)
{
	fi_mr_attr a{};
	a.mr_iov = iov;
	a.iov_count = 1;
	a.access = access;
	return a;
}

TEST(FabricEventInfo, RmaEventModeIsKeptOnlyWhenTheApplicationAllowsIt)
{
	{
		Hints h(kAppMrMode);
		Info info;
		ASSERT_EQ(info.get(h), 0);
		EXPECT_EQ(info->domain_attr->mr_mode & FI_MR_RMA_EVENT, 0);
		EXPECT_EQ(info->caps & FI_RMA_EVENT, 0u) << "no events without the mode bit";
	}
	Hints h(kAppMrMode | FI_MR_RMA_EVENT);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	EXPECT_EQ(info->domain_attr->mr_mode, kAppMrMode | FI_MR_RMA_EVENT);
	EXPECT_EQ(info->caps, FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ |
				      FI_REMOTE_WRITE | FI_RMA_EVENT | FI_MSG | FI_TAGGED |
				      FI_SEND | FI_RECV | FI_MULTI_RECV);
	EXPECT_EQ(info->rx_attr->caps & FI_RMA_EVENT, FI_RMA_EVENT) << "a target's capability";
	EXPECT_EQ(info->tx_attr->caps & FI_RMA_EVENT, 0u);
}

TEST(FabricEventInfo, RmaEventCapabilityNeedsTheModeBit)
{
	{
		Hints h(kAppMrMode);
		h->caps = FI_RMA | FI_RMA_EVENT;
		Info info;
		EXPECT_EQ(info.get(h), -FI_ENODATA) << "the application does not allow the mode";
	}
	{
		Hints h(kAppMrMode | FI_MR_RMA_EVENT);
		h->rx_attr->caps = FI_RMA | FI_REMOTE_WRITE | FI_RMA_EVENT;
		Info info;
		ASSERT_EQ(info.get(h), 0);
		EXPECT_EQ(info->caps & FI_RMA_EVENT, FI_RMA_EVENT);
	}
	/* Without FI_MR_LOCAL too: the endpoints register local buffers themselves. */
	Hints h((kAppMrMode | FI_MR_RMA_EVENT) & ~FI_MR_LOCAL);
	h->caps = FI_RMA_EVENT;
	Info info;
	ASSERT_EQ(info.get(h), 0);
	EXPECT_EQ(info->domain_attr->mr_mode & FI_MR_RMA_EVENT, FI_MR_RMA_EVENT);
	EXPECT_EQ(info->caps & FI_RMA_EVENT, FI_RMA_EVENT);
}

TEST(FabricEventInfo, EndpointWithRmaEventNeedsTheDomainsModeBit)
{
	Hints h(kAppMrMode);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	Fid<fid_fabric> fabric;
	ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
	Fid<fid_domain> dom;
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
	info->caps |= FI_RMA_EVENT;
	Fid<fid_ep> ep;
	EXPECT_EQ(fi_endpoint(dom.get(), info.p(), ep.out(), nullptr), -FI_EINVAL);
	EXPECT_EQ(ep.get(), nullptr);
}

/*
 * A device without the extensions (ConnectX, or emu ext=0): FI_MR_RMA_EVENT is never returned,
 * whatever else the application offers, FI_RMA_EVENT is not a capability, and every use of the
 * extensions gets the code of a provider without them.
 */
TEST(FabricEventNoExt, ModeBitIsNeverOfferedOnAnyCombination)
{
	DeviceSpecScope dev("emu:mkeys=1024,ext=0");
	constexpr unsigned kBits = sizeof(kKnownBits) / sizeof(kKnownBits[0]);
	constexpr int kActs =
		FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_LOCAL;
	for (unsigned combo = 0; combo < (1u << kBits); combo++) {
		int offered = 0;
		for (unsigned b = 0; b < kBits; b++)
			if (combo & (1u << b))
				offered |= kKnownBits[b];
		/* -FI_ENODATA, as with the extensions (test_fabric_info.cpp); FI_MR_PROV_KEY is
		 * required too on this device, which chooses every mkey index. */
		if (!(offered & FI_MR_ALLOCATED) || !(offered & FI_MR_PROV_KEY))
			continue;
		SCOPED_TRACE(testing::Message() << "mr_mode 0x" << std::hex << offered);
		Hints h(offered);
		Info info;
		ASSERT_EQ(info.get(h), 0);
		EXPECT_EQ(info->domain_attr->mr_mode, offered & kActs);
		EXPECT_EQ(info->caps & FI_RMA_EVENT, 0u);
	}
	Hints h(kAppMrMode | FI_MR_RMA_EVENT);
	h->caps = FI_RMA | FI_RMA_EVENT;
	Info info;
	EXPECT_EQ(info.get(h), -FI_ENODATA);
}

TEST(FabricEventNoExt, RmaEventFlagBindAndSingleUseAreRefused)
{
	DeviceSpecScope dev("emu:mkeys=1024,ext=0");
	Hints h(kAppMrMode | FI_MR_RMA_EVENT);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	/* An application that forces the bit into its copy of the info gets a domain without
	 * it: the domain asks the device. */
	info->domain_attr->mr_mode |= FI_MR_RMA_EVENT;
	Fid<fid_fabric> fabric;
	ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
	Fid<fid_domain> dom;
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
	Buf buf(4096);
	const auto before = stats(dom.get());
	fid_mr *bad = nullptr;
	EXPECT_EQ(fi_mr_reg(dom.get(), buf.get(), 4096, kRemote, 0, 0, FI_RMA_EVENT, &bad, nullptr),
		  -FI_EBADFLAGS);
	iovec iov{buf.get(), 4096};
	fi_mr_attr attr = one_range(&iov, kRemote);
	EXPECT_EQ(fi_mr_regattr(dom.get(), &attr, FI_RMA_EVENT, &bad), -FI_EBADFLAGS);
	EXPECT_EQ(mr_ops(dom.get())->regattr(dom.get(), &attr, nullptr, 0, FI_NICMR_MR_SINGLE_USE,
					     &bad),
		  -FI_EOPNOTSUPP)
		<< "no single-use keys on this device";
	EXPECT_EQ(bad, nullptr);
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(dom.get(), buf.get(), 4096, kRemote, 0, 0, 0, mr.out(), nullptr), 0);
	Fid<fid_cntr> cntr;
	fi_cntr_attr ca{};
	ca.events = FI_CNTR_EVENTS_COMP;
	ASSERT_EQ(fi_cntr_open(dom.get(), &ca, cntr.out(), nullptr), 0);
	EXPECT_EQ(fi_mr_bind(mr.get(), &cntr->fid, FI_REMOTE_WRITE), -FI_ENOSYS);
	EXPECT_EQ(fi_mr_enable(mr.get()), 0) << "enabled at registration";
	EXPECT_EQ(stats(dom.get()).cntrs, before.cntrs) << "no device counter was made";
	mr.reset();
	expect_same(before, stats(dom.get()));
}

TEST(FabricEventNoExt, EachExtensionIsOfferedOnItsOwn)
{
	{
		DeviceSpecScope dev("emu:mkeys=1024,ext=single_use");
		Hints h(kAppMrMode | FI_MR_RMA_EVENT);
		Info info;
		ASSERT_EQ(info.get(h), 0);
		EXPECT_EQ(info->domain_attr->mr_mode, kAppMrMode) << "no RMA events";
		Fid<fid_fabric> fabric;
		ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
		Fid<fid_domain> dom;
		ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
		Buf buf(4096);
		iovec iov{buf.get(), 4096};
		fi_mr_attr attr = one_range(&iov, kRemote);
		Fid<fid_mr> mr;
		EXPECT_EQ(mr_ops(dom.get())->regattr(dom.get(), &attr, nullptr, 0,
						     FI_NICMR_MR_SINGLE_USE, mr.out()),
			  0);
	}
	{
		DeviceSpecScope dev("emu:mkeys=1024,ext=rma_event");
		Hints h(kAppMrMode | FI_MR_RMA_EVENT);
		Info info;
		ASSERT_EQ(info.get(h), 0);
		EXPECT_EQ(info->domain_attr->mr_mode, kAppMrMode | FI_MR_RMA_EVENT);
		Fid<fid_fabric> fabric;
		ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
		Fid<fid_domain> dom;
		ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
		Buf buf(4096);
		iovec iov{buf.get(), 4096};
		fi_mr_attr attr = one_range(&iov, kRemote);
		fid_mr *bad = nullptr;
		EXPECT_EQ(mr_ops(dom.get())->regattr(dom.get(), &attr, nullptr, 0,
						     FI_NICMR_MR_SINGLE_USE, &bad),
			  -FI_EOPNOTSUPP);
		Fid<fid_mr> mr;
		EXPECT_EQ(fi_mr_regattr(dom.get(), &attr, FI_RMA_EVENT, mr.out()), 0);
	}
	{
		DeviceSpecScope dev("emu:mkeys=1024,ext=sometimes");
		Hints h(kAppMrMode);
		Info info;
		EXPECT_EQ(info.get(h), -FI_ENODATA) << "a spec the device would refuse";
	}
}

/* Two endpoints of a domain whose application allows FI_MR_RMA_EVENT; a_ writes into dst_,
 * memory of the same domain, registered per test. */
class Event : public FabricFixture {
protected:
	virtual int mode() const { return kAppMrMode | FI_MR_RMA_EVENT; }
	void SetUp() override
	{
		open(mode());
		if (HasFatalFailure())
			return;
		before_ = stats(domain_.get());
		open_ep(domain_.get(), info_.p(), &a_);
		open_ep(domain_.get(), info_.p(), &b_);
		connect(&a_, &b_);
		connect(&b_, &a_);
		ASSERT_NE(src_.get(), nullptr);
		ASSERT_NE(dst_.get(), nullptr);
		ASSERT_EQ(fi_mr_reg(domain_.get(), src_.get(), kLen, FI_READ | FI_WRITE, 0, 0, 0,
				    lmr_.out(), nullptr),
			  0);
		fi_cntr_attr ca{};
		ca.events = FI_CNTR_EVENTS_COMP;
		ASSERT_EQ(fi_cntr_open(domain_.get(), &ca, cntr_.out(), nullptr), 0);
	}
	void TearDown() override
	{
		lmr_.reset();
		cntr_.reset();
		a_.close();
		b_.close();
		if (domain_.get()) {
			const nicmr_device_stats after = stats(domain_.get());
			EXPECT_EQ(after.mrs, before_.mrs) << "nothing left behind";
			EXPECT_EQ(after.cntrs, before_.cntrs);
			EXPECT_EQ(after.slow_mappings, before_.slow_mappings);
			EXPECT_EQ(after.pinned_pages, before_.pinned_pages);
		}
		FabricFixture::TearDown();
	}
	/* dst_'s kLen bytes registered with flags (FI_RMA_EVENT: disabled until enabled). */
	int reg_dst(uint64_t flags, fid_mr **mr, uint64_t access = kRemote)
	{
		return fi_mr_reg(domain_.get(), dst_.get(), kLen, access, 0, 0, flags, mr, nullptr);
	}
	uint64_t at(size_t off) const { return uint64_t(uintptr_t(dst_.get() + off)); }
	void *desc() { return fi_mr_desc(lmr_.get()); }
	/* a_ writes len bytes of src_ + off to dst_ + off through key: fi_write's code. */
	ssize_t write(size_t off, size_t len, uint64_t key, void *ctx)
	{
		return fi_write(a_.ep.get(), src_.get() + off, len, desc(), a_.peer, at(off), key,
				ctx);
	}
	void expect_done(void *ctx)
	{
		fi_cq_msg_entry e{};
		ASSERT_EQ(next(a_.cq.get(), &e), 1);
		EXPECT_EQ(e.op_context, ctx);
	}
	/* One error entry of a_'s CQ for ctx: the device refused the key (FI_EACCES, syndrome
	 * REMOTE_ACCESS_ERR, no provider data). */
	void expect_refused(void *ctx)
	{
		fi_cq_msg_entry e{};
		ASSERT_EQ(next(a_.cq.get(), &e), -FI_EAVAIL);
		fi_cq_err_entry err{};
		ASSERT_EQ(fi_cq_readerr(a_.cq.get(), &err, 0), 1);
		EXPECT_EQ(err.op_context, ctx);
		EXPECT_EQ(err.err, FI_EACCES);
		EXPECT_EQ(err.prov_errno, kRemoteAccessErr);
		EXPECT_EQ(err.err_data_size, 0u);
		char buf[128];
		const char *s =
			fi_cq_strerror(a_.cq.get(), err.prov_errno, err.err_data, buf, sizeof(buf));
		ASSERT_NE(s, nullptr);
		EXPECT_NE(std::string(s).find("remote access"), std::string::npos) << s;
	}
	void fill(size_t off, size_t len, char v) { std::memset(src_.get() + off, v, len); }
	bool dst_is(size_t off, size_t len, char v) const
	{
		for (size_t i = 0; i < len; i++)
			if (dst_.get()[off + i] != v)
				return false;
		return true;
	}

	nicmr_device_stats before_{};
	Ep a_, b_;
	Buf src_{kLen}, dst_{kLen};
	Fid<fid_mr> lmr_;
	Fid<fid_cntr> cntr_;
	int ctx_[16] = {};
};

TEST_F(Event, RmaEventMrRefusesRemoteAccessUntilEnabled)
{
	std::memset(dst_.get(), 0, kLen);
	Fid<fid_mr> mr;
	ASSERT_EQ(reg_dst(FI_RMA_EVENT, mr.out()), 0);
	const uint64_t key = fi_mr_key(mr.get());
	fill(0, 256, 0x5a);
	ASSERT_EQ(write(0, 256, key, &ctx_[0]), 0);
	expect_refused(&ctx_[0]);
	ASSERT_EQ(fi_read(a_.ep.get(), src_.get(), 64, desc(), a_.peer, at(0), key, &ctx_[1]), 0);
	expect_refused(&ctx_[1]);
	EXPECT_TRUE(dst_is(0, 256, 0)) << "a disabled MR takes nothing";

	ASSERT_EQ(fi_mr_enable(mr.get()), 0);
	EXPECT_EQ(fi_mr_key(mr.get()), key) << "enabling keeps the key";
	ASSERT_EQ(write(0, 256, key, &ctx_[2]), 0);
	expect_done(&ctx_[2]);
	EXPECT_TRUE(dst_is(0, 256, 0x5a));
	EXPECT_EQ(fi_mr_enable(mr.get()), 0) << "enabling again changes nothing";
	ASSERT_EQ(write(256, 64, key, &ctx_[3]), 0);
	expect_done(&ctx_[3]);
}

TEST_F(Event, BoundCounterCountsRemoteWritesAndAtomicsNotReads)
{
	std::memset(dst_.get(), 0, kLen);
	Fid<fid_mr> mr;
	ASSERT_EQ(reg_dst(FI_RMA_EVENT, mr.out()), 0);
	const uint64_t key = fi_mr_key(mr.get());
	const uint64_t cntrs = stats(domain_.get()).cntrs;
	ASSERT_EQ(fi_mr_bind(mr.get(), &cntr_->fid, FI_REMOTE_WRITE), 0);
	EXPECT_EQ(stats(domain_.get()).cntrs, cntrs + 1)
		<< "the device's counter, made by the bind";
	ASSERT_EQ(fi_mr_enable(mr.get()), 0);
	EXPECT_EQ(fi_cntr_read(cntr_.get()), 0u);

	constexpr int kWrites = 10;
	for (int i = 0; i < kWrites; i++) {
		fill(size_t(i) * 512, 512, char(i + 1));
		ASSERT_EQ(write(size_t(i) * 512, 512, key, &ctx_[i]), 0);
	}
	for (int i = 0; i < kWrites; i++)
		expect_done(&ctx_[i]);
	EXPECT_EQ(fi_cntr_read(cntr_.get()), uint64_t(kWrites));
	EXPECT_EQ(fi_cntr_wait(cntr_.get(), kWrites, 5000), 0);
	for (int i = 0; i < kWrites; i++)
		EXPECT_TRUE(dst_is(size_t(i) * 512, 512, char(i + 1))) << i;

	/* Reads of the region are not events of FI_REMOTE_WRITE. */
	for (int i = 0; i < 3; i++) {
		ASSERT_EQ(fi_read(a_.ep.get(), src_.get() + 32768, 512, desc(), a_.peer, at(0), key,
				  &ctx_[i]),
			  0);
		expect_done(&ctx_[i]);
	}
	EXPECT_EQ(std::memcmp(src_.get() + 32768, dst_.get(), 512), 0);
	EXPECT_EQ(fi_cntr_read(cntr_.get()), uint64_t(kWrites));

	/* Atomics modify the region: counted; so is an inject write. */
	uint64_t v = 40;
	std::memcpy(dst_.get() + 8192, &v, 8);
	uint64_t two = 2;
	ASSERT_EQ(fi_atomic(a_.ep.get(), &two, 1, nullptr, a_.peer, at(8192), key, FI_UINT64,
			    FI_SUM, &ctx_[0]),
		  0);
	expect_done(&ctx_[0]);
	std::memcpy(&v, dst_.get() + 8192, 8);
	EXPECT_EQ(v, 42u);
	char small[16];
	std::memset(small, 0x6b, sizeof(small));
	ASSERT_EQ(fi_inject_write(a_.ep.get(), small, sizeof(small), a_.peer, at(16384), key), 0);
	EXPECT_EQ(fi_cntr_wait(cntr_.get(), kWrites + 2, 5000), 0);
	EXPECT_EQ(fi_cntr_read(cntr_.get()), uint64_t(kWrites + 2));
	EXPECT_TRUE(dst_is(16384, sizeof(small), 0x6b));
	EXPECT_EQ(fi_cntr_readerr(cntr_.get()), 0u);
	EXPECT_EQ(fi_cntr_wait(cntr_.get(), kWrites + 3, 20), -FI_ETIMEDOUT);
}

/* fi_cntr_read on another thread while the first bind makes the device's counter and writes
 * arrive: the reader sees the count rise, never fall, up to every write (also under TSan).
 * A jthread: a failed assertion returns with the reader joined. */
TEST_F(Event, ReaderOnAnotherThreadSeesTheCountRise)
{
	constexpr uint64_t kWrites = 32;
	Fid<fid_mr> mr;
	ASSERT_EQ(reg_dst(FI_RMA_EVENT, mr.out()), 0);
	const uint64_t key = fi_mr_key(mr.get());
	std::atomic<bool> fell{false};
	std::atomic<uint64_t> seen{0};
	std::jthread reader([&] {
		auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		uint64_t last = 0;
		while (last < kWrites && std::chrono::steady_clock::now() < end) {
			const uint64_t v = fi_cntr_read(cntr_.get());
			if (v < last)
				fell = true;
			last = v;
		}
		seen = last;
	});
	ASSERT_EQ(fi_mr_bind(mr.get(), &cntr_->fid, FI_REMOTE_WRITE), 0);
	ASSERT_EQ(fi_mr_enable(mr.get()), 0);
	for (uint64_t i = 0; i < kWrites; i++) {
		ASSERT_EQ(write(i * 64, 64, key, &ctx_[0]), 0);
		expect_done(&ctx_[0]);
	}
	reader.join();
	EXPECT_EQ(seen.load(), kWrites);
	EXPECT_FALSE(fell.load());
}

TEST_F(Event, CounterAddsTheDevicesCountToItsOwn)
{
	Fid<fid_mr> mr;
	ASSERT_EQ(reg_dst(FI_RMA_EVENT, mr.out()), 0);
	const uint64_t key = fi_mr_key(mr.get());
	/* a_'s write counter also counts a_'s completed writes (fi_ep_bind, FI_WRITE): each
	 * write into the MR is one completion at a_ and one event of the MR. */
	ASSERT_EQ(fi_mr_bind(mr.get(), &a_.wc->fid, FI_REMOTE_WRITE), 0);
	ASSERT_EQ(fi_mr_enable(mr.get()), 0);
	for (int i = 0; i < 4; i++) {
		ASSERT_EQ(write(size_t(i) * 64, 64, key, &ctx_[i]), 0);
		expect_done(&ctx_[i]);
	}
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 8u);
	EXPECT_EQ(fi_cntr_add(a_.wc.get(), 5), 0);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 13u);
	EXPECT_EQ(fi_cntr_set(a_.wc.get(), 3), 0);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 3u) << "set sets the sum";
	ASSERT_EQ(write(0, 64, key, &ctx_[0]), 0);
	expect_done(&ctx_[0]);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 5u);
	EXPECT_EQ(fi_cntr_set(a_.wc.get(), 0), 0);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 0u);
	mr.reset(); /* before the endpoint's counter closes (TearDown) */
}

TEST_F(Event, OneCounterServesSeveralMrs)
{
	Buf other(4096);
	Fid<fid_mr> mr, mr2;
	ASSERT_EQ(reg_dst(FI_RMA_EVENT, mr.out()), 0);
	ASSERT_EQ(fi_mr_reg(domain_.get(), other.get(), 4096, kRemote, 0, 0, FI_RMA_EVENT,
			    mr2.out(), nullptr),
		  0);
	ASSERT_EQ(fi_mr_bind(mr.get(), &cntr_->fid, FI_REMOTE_WRITE), 0);
	ASSERT_EQ(fi_mr_bind(mr2.get(), &cntr_->fid, FI_REMOTE_WRITE), 0);
	ASSERT_EQ(fi_mr_enable(mr.get()), 0);
	ASSERT_EQ(fi_mr_enable(mr2.get()), 0);
	ASSERT_EQ(write(0, 64, fi_mr_key(mr.get()), &ctx_[0]), 0);
	expect_done(&ctx_[0]);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 64, desc(), a_.peer,
			   uint64_t(uintptr_t(other.get())), fi_mr_key(mr2.get()), &ctx_[1]),
		  0);
	expect_done(&ctx_[1]);
	EXPECT_EQ(fi_cntr_read(cntr_.get()), 2u);
	/* The counter stays busy until the last MR bound to it is closed. */
	mr.reset();
	EXPECT_EQ(fi_close(&cntr_->fid), -FI_EBUSY);
	mr2.reset();
	EXPECT_EQ(fi_cntr_read(cntr_.get()), 2u) << "the count outlives the bindings";
}

TEST_F(Event, BindingsAfterEnableAndASecondCounterAreBusy)
{
	Fid<fid_mr> mr;
	ASSERT_EQ(reg_dst(FI_RMA_EVENT, mr.out()), 0);
	Fid<fid_cntr> other;
	fi_cntr_attr ca{};
	ca.events = FI_CNTR_EVENTS_COMP;
	ASSERT_EQ(fi_cntr_open(domain_.get(), &ca, other.out(), nullptr), 0);
	ASSERT_EQ(fi_mr_bind(mr.get(), &cntr_->fid, FI_REMOTE_WRITE), 0);
	EXPECT_EQ(fi_mr_bind(mr.get(), &other->fid, FI_REMOTE_WRITE), -FI_EBUSY)
		<< "the device holds one counter per MR";
	EXPECT_EQ(fi_mr_bind(mr.get(), &cntr_->fid, FI_REMOTE_WRITE), -FI_EBUSY);
	ASSERT_EQ(fi_mr_enable(mr.get()), 0);
	EXPECT_EQ(fi_mr_bind(mr.get(), &other->fid, FI_REMOTE_WRITE), -FI_EBUSY)
		<< "fi_mr(3): no bindings after fi_mr_enable";

	/* Enabled without a counter: no binding after that either. */
	Buf buf(4096);
	Fid<fid_mr> bare;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRemote, 0, 0, FI_RMA_EVENT, bare.out(),
			    nullptr),
		  0);
	ASSERT_EQ(fi_mr_enable(bare.get()), 0);
	EXPECT_EQ(fi_mr_bind(bare.get(), &other->fid, FI_REMOTE_WRITE), -FI_EBUSY);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 64, desc(), a_.peer,
			   uint64_t(uintptr_t(buf.get())), fi_mr_key(bare.get()), &ctx_[0]),
		  0);
	expect_done(&ctx_[0]);
	EXPECT_EQ(fi_cntr_read(other.get()), 0u) << "the refused binds counted nothing";
	mr.reset();
}

TEST_F(Event, BadBindsGetTheirCodeAndMakeNothing)
{
	Fid<fid_mr> mr, plain;
	ASSERT_EQ(reg_dst(FI_RMA_EVENT, mr.out()), 0);
	Buf buf(4096);
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRemote, 0, 0, 0, plain.out(), nullptr),
		  0);
	/* A counter of another domain. */
	Fid<fid_domain> d2;
	ASSERT_EQ(fi_domain(fabric_.get(), info_.p(), d2.out(), nullptr), 0);
	Fid<fid_cntr> foreign;
	fi_cntr_attr ca{};
	ca.events = FI_CNTR_EVENTS_COMP;
	ASSERT_EQ(fi_cntr_open(d2.get(), &ca, foreign.out(), nullptr), 0);
	const auto before = stats(domain_.get());
	fid_mr *m = mr.get();
	EXPECT_EQ(fi_mr_bind(m, nullptr, FI_REMOTE_WRITE), -FI_EINVAL);
	EXPECT_EQ(fi_mr_bind(m, &domain_->fid, FI_REMOTE_WRITE), -FI_EINVAL) << "not bindable";
	EXPECT_EQ(fi_mr_bind(m, &a_.cq->fid, FI_REMOTE_WRITE), -FI_EINVAL) << "not bindable";
	EXPECT_EQ(fi_mr_bind(m, &a_.ep->fid, 0), -FI_ENOSYS) << "no FI_MR_ENDPOINT";
	/* fi_mr(3)'s events are FI_REMOTE_WRITE: nothing else is counted. */
	EXPECT_EQ(fi_mr_bind(m, &cntr_->fid, 0), -FI_EBADFLAGS);
	EXPECT_EQ(fi_mr_bind(m, &cntr_->fid, FI_REMOTE_READ), -FI_EBADFLAGS);
	EXPECT_EQ(fi_mr_bind(m, &cntr_->fid, FI_REMOTE_WRITE | FI_REMOTE_READ), -FI_EBADFLAGS);
	EXPECT_EQ(fi_mr_bind(m, &cntr_->fid, FI_WRITE), -FI_EBADFLAGS);
	/* An MR registered without FI_RMA_EVENT has no events to count. */
	EXPECT_EQ(fi_mr_bind(plain.get(), &cntr_->fid, FI_REMOTE_WRITE), -FI_EINVAL);
	/* A counter of another domain, and a fid that only claims to be a counter. */
	EXPECT_EQ(fi_mr_bind(m, &foreign->fid, FI_REMOTE_WRITE), -FI_EINVAL);
	fid_cntr fake{};
	fake.fid.fclass = FI_CLASS_CNTR;
	EXPECT_EQ(fi_mr_bind(m, &fake.fid, FI_REMOTE_WRITE), -FI_EINVAL);
	EXPECT_EQ(stats(domain_.get()).cntrs, before.cntrs) << "no device counter made";
	expect_same(before, stats(domain_.get()));
	/* The MR is still unbound and disabled: a good bind works after all that. */
	EXPECT_EQ(fi_mr_bind(m, &cntr_->fid, FI_REMOTE_WRITE), 0);
	EXPECT_EQ(fi_mr_enable(plain.get()), 0) << "an MR without FI_RMA_EVENT: enabled already";
	foreign.reset();
	d2.reset();
	mr.reset();
}

/*
 * fi_mr(3) says an MR with counters associated is busy to close, fi_cntr(3) that a counter
 * with MRs associated is: together no order would be left. nicmr follows the endpoints' model
 * (the bound object holds the binding, and its close drops it): close the MR, then the counter.
 */
TEST_F(Event, CloseTheMrFirstThenItsCounter)
{
	std::memset(dst_.get(), 0, 4096);
	const auto before = stats(domain_.get());
	fid_mr *mr = nullptr;
	ASSERT_EQ(reg_dst(FI_RMA_EVENT, &mr), 0);
	const uint64_t key = fi_mr_key(mr);
	ASSERT_EQ(fi_mr_bind(mr, &cntr_->fid, FI_REMOTE_WRITE), 0);
	ASSERT_EQ(fi_mr_enable(mr), 0);
	ASSERT_EQ(write(0, 64, key, &ctx_[0]), 0);
	expect_done(&ctx_[0]);
	EXPECT_EQ(fi_close(&cntr_->fid), -FI_EBUSY) << "an MR is bound to it";
	EXPECT_EQ(fi_cntr_read(cntr_.get()), 1u) << "the refused close changed nothing";
	ASSERT_EQ(write(64, 64, key, &ctx_[1]), 0);
	expect_done(&ctx_[1]);
	EXPECT_EQ(fi_cntr_read(cntr_.get()), 2u);

	ASSERT_EQ(fi_close(&mr->fid), 0) << "the MR's close drops its binding";
	fill(128, 64, 0x21);
	ASSERT_EQ(write(128, 64, key, &ctx_[2]), 0);
	expect_refused(&ctx_[2]);
	EXPECT_TRUE(dst_is(128, 64, 0)) << "the key went with the MR";
	EXPECT_EQ(fi_cntr_read(cntr_.get()), 2u);
	cntr_.reset(); /* Fid checks that the close is 0 now */
	const auto after = stats(domain_.get());
	EXPECT_EQ(after.mrs, before.mrs);
	EXPECT_EQ(after.cntrs, before.cntrs) << "the device's counter went with it";
}

TEST_F(Event, BoundButNeverEnabledMrCloses)
{
	Fid<fid_mr> mr;
	ASSERT_EQ(reg_dst(FI_RMA_EVENT, mr.out()), 0);
	ASSERT_EQ(fi_mr_bind(mr.get(), &cntr_->fid, FI_REMOTE_WRITE), 0);
	EXPECT_EQ(fi_close(&cntr_->fid), -FI_EBUSY);
	mr.reset();
	cntr_.reset();
}

TEST_F(Event, RmaEventFlagOnFormsThatCannotTakeItIsRefused)
{
	Fid<fid_mr> base;
	ASSERT_EQ(reg_dst(0, base.out()), 0);
	Fid<fid_mr> ev;
	Buf buf(4 * 4096);
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRemote, 0, 0, FI_RMA_EVENT, ev.out(),
			    nullptr),
		  0);
	const auto before = stats(domain_.get());
	fid_mr *bad = nullptr;
	fid_domain *d = domain_.get();
	/* Vectored keys and sub-MRs have no RMA events on this device. */
	const iovec two[2] = {{buf.get() + 4096, 4096}, {buf.get() + 3 * 4096, 4096}};
	EXPECT_EQ(fi_mr_regv(d, two, 2, kRemote, 0, 0, FI_RMA_EVENT, &bad, nullptr), -FI_EBADFLAGS);
	fi_mr_attr vattr{};
	vattr.mr_iov = two;
	vattr.iov_count = 2;
	vattr.access = kRemote;
	EXPECT_EQ(fi_mr_regattr(d, &vattr, FI_RMA_EVENT, &bad), -FI_EBADFLAGS);
	iovec in_base{dst_.get(), 4096};
	fi_mr_attr sub = one_range(&in_base, kRemote);
	EXPECT_EQ(mr_ops(d)->regattr(d, &sub, base.get(), 0, FI_RMA_EVENT, &bad), -FI_EBADFLAGS);
	/* An RMA-event MR is no base: a sub-MR's key would bypass its counting. */
	iovec in_ev{buf.get(), 4096};
	fi_mr_attr sub_ev = one_range(&in_ev, kRemote);
	EXPECT_EQ(mr_ops(d)->regattr(d, &sub_ev, ev.get(), 0, 0, &bad), -FI_EINVAL);
	/* Unknown flags beside it are still unknown. */
	EXPECT_EQ(fi_mr_reg(d, buf.get() + 4096, 4096, kRemote, 0, 0, FI_RMA_EVENT | (1ull << 40),
			    &bad, nullptr),
		  -FI_EBADFLAGS);
	EXPECT_EQ(bad, nullptr);
	expect_same(before, stats(d));
	/* A one-range regattr and fi_mr_regv of one segment take it. */
	iovec one{buf.get() + 4096, 4096};
	fi_mr_attr attr = one_range(&one, kRemote);
	Fid<fid_mr> r1, r2;
	EXPECT_EQ(fi_mr_regattr(d, &attr, FI_RMA_EVENT, r1.out()), 0);
	iovec one2{buf.get() + 2 * 4096, 4096};
	EXPECT_EQ(fi_mr_regv(d, &one2, 1, kRemote, 0, 0, FI_RMA_EVENT, r2.out(), nullptr), 0);
	EXPECT_EQ(fi_mr_bind(r2.get(), &cntr_->fid, FI_REMOTE_WRITE), 0);
	r2.reset();
}

/* Single-use keys: nicmr's flag through the ops extension (FI_MR_SINGLE_USE of libfabric 2.x). */
class SingleUse : public Event {
protected:
	int mode() const override { return kAppMrMode; }
	int reg_once(fid_mr **mr, uint64_t flags = FI_NICMR_MR_SINGLE_USE)
	{
		iov_ = {dst_.get(), kLen};
		fi_mr_attr a = one_range(&iov_, kRemote);
		return mr_ops(domain_.get())->regattr(domain_.get(), &a, nullptr, 0, flags, mr);
	}
	iovec iov_{};
};

TEST_F(SingleUse, FirstRemoteWriteSucceedsAndTheNextIsRefused)
{
	std::memset(dst_.get(), 0, kLen);
	Fid<fid_mr> mr;
	ASSERT_EQ(reg_once(mr.out()), 0);
	const uint64_t key = fi_mr_key(mr.get());
	fill(0, 4096, 0x31);
	ASSERT_EQ(write(0, 4096, key, &ctx_[0]), 0);
	expect_done(&ctx_[0]);
	EXPECT_TRUE(dst_is(0, 4096, 0x31));
	fill(4096, 4096, 0x32);
	ASSERT_EQ(write(4096, 4096, key, &ctx_[1]), 0);
	expect_refused(&ctx_[1]);
	EXPECT_TRUE(dst_is(4096, 4096, 0)) << "the second write changed nothing";
	ASSERT_EQ(fi_read(a_.ep.get(), src_.get(), 64, desc(), a_.peer, at(0), key, &ctx_[2]), 0);
	expect_refused(&ctx_[2]);
	EXPECT_EQ(fi_mr_enable(mr.get()), 0) << "enabled at registration";
	mr.reset(); /* deregisters as any MR */

	/* A read is a use too. */
	Fid<fid_mr> again;
	ASSERT_EQ(reg_once(again.out()), 0);
	const uint64_t k2 = fi_mr_key(again.get());
	ASSERT_EQ(fi_read(a_.ep.get(), src_.get(), 64, desc(), a_.peer, at(0), k2, &ctx_[3]), 0);
	expect_done(&ctx_[3]);
	ASSERT_EQ(write(0, 64, k2, &ctx_[4]), 0);
	expect_refused(&ctx_[4]);
}

TEST_F(SingleUse, FlagBelongsToTheExtensionAndToOneRange)
{
	Buf buf(4 * 4096);
	Fid<fid_mr> base, once;
	ASSERT_EQ(reg_dst(0, base.out()), 0);
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRemote, 0, 0, 0, once.out(), nullptr),
		  0);
	once.reset();
	iovec first{buf.get(), 4096};
	fi_mr_attr fa = one_range(&first, kRemote);
	fi_nicmr_mr_ops *ops = mr_ops(domain_.get());
	fid_domain *d = domain_.get();
	ASSERT_EQ(ops->regattr(d, &fa, nullptr, 0, FI_NICMR_MR_SINGLE_USE, once.out()), 0);
	const auto before = stats(d);
	fid_mr *bad = nullptr;
	void *p = buf.get() + 4096;
	EXPECT_EQ(fi_mr_reg(d, p, 4096, kRemote, 0, 0, FI_NICMR_MR_SINGLE_USE, &bad, nullptr),
		  -FI_EBADFLAGS);
	iovec one{p, 4096};
	EXPECT_EQ(fi_mr_regv(d, &one, 1, kRemote, 0, 0, FI_NICMR_MR_SINGLE_USE, &bad, nullptr),
		  -FI_EBADFLAGS);
	fi_mr_attr attr = one_range(&one, kRemote);
	EXPECT_EQ(fi_mr_regattr(d, &attr, FI_NICMR_MR_SINGLE_USE, &bad), -FI_EBADFLAGS);
	/* One range of its own: not vectored, not a sub-MR, and no base of one. */
	const iovec two[2] = {{p, 4096}, {buf.get() + 3 * 4096, 4096}};
	fi_mr_attr vattr{};
	vattr.mr_iov = two;
	vattr.iov_count = 2;
	vattr.access = kRemote;
	EXPECT_EQ(ops->regattr(d, &vattr, nullptr, 0, FI_NICMR_MR_SINGLE_USE, &bad), -FI_EBADFLAGS);
	iovec in_base{dst_.get(), 4096};
	fi_mr_attr sub = one_range(&in_base, kRemote);
	EXPECT_EQ(ops->regattr(d, &sub, base.get(), 0, FI_NICMR_MR_SINGLE_USE, &bad),
		  -FI_EBADFLAGS);
	fi_mr_attr sub_once = one_range(&first, kRemote);
	EXPECT_EQ(ops->regattr(d, &sub_once, once.get(), 0, 0, &bad), -FI_EINVAL);
	/* FI_RMA_EVENT needs the domain's FI_MR_RMA_EVENT, which this one lacks. */
	EXPECT_EQ(ops->regattr(d, &attr, nullptr, 0, FI_NICMR_MR_SINGLE_USE | FI_RMA_EVENT, &bad),
		  -FI_EBADFLAGS);
	EXPECT_EQ(ops->regattr(d, &attr, nullptr, 0, FI_NICMR_MR_SINGLE_USE << 2, &bad),
		  -FI_EBADFLAGS);
	EXPECT_EQ(bad, nullptr);
	expect_same(before, stats(d));
}

/* Single use and RMA events together: the one write is counted, the refused one is not. */
class SingleUseEvent : public SingleUse {
protected:
	int mode() const override { return kAppMrMode | FI_MR_RMA_EVENT; }
};

TEST_F(SingleUseEvent, TheOneWriteIsCounted)
{
	std::memset(dst_.get(), 0, kLen);
	Fid<fid_mr> mr;
	ASSERT_EQ(reg_once(mr.out(), FI_NICMR_MR_SINGLE_USE | FI_RMA_EVENT), 0);
	const uint64_t key = fi_mr_key(mr.get());
	ASSERT_EQ(fi_mr_bind(mr.get(), &cntr_->fid, FI_REMOTE_WRITE), 0);
	ASSERT_EQ(write(0, 64, key, &ctx_[0]), 0);
	expect_refused(&ctx_[0]); /* disabled: not the use */
	ASSERT_EQ(fi_mr_enable(mr.get()), 0);
	fill(0, 64, 0x44);
	ASSERT_EQ(write(0, 64, key, &ctx_[1]), 0);
	expect_done(&ctx_[1]);
	ASSERT_EQ(write(64, 64, key, &ctx_[2]), 0);
	expect_refused(&ctx_[2]);
	EXPECT_TRUE(dst_is(0, 64, 0x44));
	EXPECT_EQ(fi_cntr_read(cntr_.get()), 1u);
	mr.reset();
}

} // namespace
} // namespace nicmr::test
