/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Wait objects of CQs and counters through the installed libfabric (fi_cq(3), fi_cntr(3),
 * fi_trywait(3)): FI_WAIT_FD's descriptor stays quiet while nothing is pending once fi_trywait
 * said 0, and becomes readable with a completion; fi_cq_sread and fi_cntr_wait sleep until a
 * write another thread posts completes; fi_cq_signal wakes a sleeping sread; an event another
 * CQ's trywait took still wakes the CQ it was for; a device without interrupts refuses
 * FI_WAIT_FD; every refusal with its code.
 */
#include <poll.h>

#include <rdma/fi_rma.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

using Clock = std::chrono::steady_clock;

/* Whether fd becomes readable within ms. */
bool readable(int fd, int ms)
{
	struct pollfd p = {fd, POLLIN, 0};
	return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* An endpoint whose CQ and write counter have the wait object under test. */
struct WaitEp {
	Fid<fid_av> av;
	Fid<fid_cq> cq;
	Fid<fid_cntr> cntr;
	Fid<fid_ep> ep;
	fi_addr_t self = FI_ADDR_NOTAVAIL;
	void close()
	{
		ep.reset();
		cntr.reset();
		cq.reset();
		av.reset();
	}
};

class Wait : public FabricFixture {
protected:
	static constexpr size_t kLen = 4096;
	void open_ep(WaitEp *e, enum fi_wait_obj wait)
	{
		fi_av_attr av{};
		av.type = FI_AV_TABLE;
		ASSERT_EQ(fi_av_open(domain_.get(), &av, e->av.out(), nullptr), 0);
		fi_cq_attr cq{};
		cq.format = FI_CQ_FORMAT_CONTEXT;
		cq.wait_obj = wait;
		ASSERT_EQ(fi_cq_open(domain_.get(), &cq, e->cq.out(), nullptr), 0);
		fi_cntr_attr ca{};
		ca.events = FI_CNTR_EVENTS_COMP;
		ca.wait_obj = wait;
		ASSERT_EQ(fi_cntr_open(domain_.get(), &ca, e->cntr.out(), nullptr), 0);
		ASSERT_EQ(fi_endpoint(domain_.get(), info_.p(), e->ep.out(), nullptr), 0);
		ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->av->fid, 0), 0);
		ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->cq->fid, FI_TRANSMIT), 0);
		ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->cntr->fid, FI_WRITE), 0);
		ASSERT_EQ(fi_enable(e->ep.get()), 0);
		char addr[64];
		size_t len = sizeof(addr);
		ASSERT_EQ(fi_getname(&e->ep->fid, addr, &len), 0);
		ASSERT_EQ(fi_av_insert(e->av.get(), addr, 1, &e->self, 0, nullptr), 1);
	}
	void SetUp() override
	{
		FabricFixture::SetUp();
		if (HasFatalFailure())
			return;
		ASSERT_NE(src_.get(), nullptr);
		ASSERT_NE(dst_.get(), nullptr);
		ASSERT_EQ(fi_mr_reg(domain_.get(), src_.get(), kLen, FI_WRITE, 0, 0, 0, lmr_.out(),
				    nullptr),
			  0);
		ASSERT_EQ(fi_mr_reg(domain_.get(), dst_.get(), kLen, FI_REMOTE_WRITE, 0, 0, 0,
				    rmr_.out(), nullptr),
			  0);
		virt_ = (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
	}
	void TearDown() override
	{
		if (poster_.joinable())
			poster_.join();
		a_.close();
		b_.close();
		lmr_.reset();
		rmr_.reset();
		FabricFixture::TearDown();
	}
	/* A 64-byte write from e into dst_ at off (e's own address: a loop to itself). */
	int write(WaitEp *e, size_t off, void *ctx)
	{
		std::memset(src_.get() + off, static_cast<int>(off + 1), 64);
		const uint64_t to = virt_ ? reinterpret_cast<uint64_t>(dst_.get() + off) : off;
		return static_cast<int>(fi_write(e->ep.get(), src_.get() + off, 64,
						 fi_mr_desc(lmr_.get()), e->self, to,
						 fi_mr_key(rmr_.get()), ctx));
	}
	/* The same write from another thread after ms milliseconds. */
	void write_later(WaitEp *e, int ms, size_t off, void *ctx)
	{
		poster_ = std::thread([this, e, ms, off, ctx] {
			std::this_thread::sleep_for(std::chrono::milliseconds(ms));
			EXPECT_EQ(write(e, off, ctx), 0);
		});
	}
	bool landed(size_t off) const
	{
		for (size_t i = 0; i < 64; i++)
			if (dst_.get()[off + i] != static_cast<char>(off + 1))
				return false;
		return true;
	}
	int trywait(fid *f) { return fi_trywait(fabric_.get(), &f, 1); }
	Buf src_{kLen}, dst_{kLen};
	Fid<fid_mr> lmr_, rmr_;
	bool virt_ = true;
	WaitEp a_, b_;
	std::thread poster_;
	int ctx_[4] = {};
};

TEST_F(Wait, CqDescriptorIsQuietAfterTrywaitAndReadableWithACompletion)
{
	open_ep(&a_, FI_WAIT_FD);
	int fd = -1;
	ASSERT_EQ(fi_control(&a_.cq->fid, FI_GETWAIT, &fd), 0);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(trywait(&a_.cq->fid), 0) << "nothing pending: safe to block";
	EXPECT_FALSE(readable(fd, 50)) << "no completion, no wake-up";

	ASSERT_EQ(write(&a_, 0, &ctx_[0]), 0);
	ASSERT_TRUE(readable(fd, 5000)) << "the completion's event makes the descriptor readable";
	EXPECT_EQ(trywait(&a_.cq->fid), -FI_EAGAIN) << "a completion is pending";
	fi_cq_entry e{};
	ASSERT_EQ(fi_cq_read(a_.cq.get(), &e, 1), 1);
	EXPECT_EQ(e.op_context, &ctx_[0]);
	EXPECT_TRUE(landed(0));
	EXPECT_EQ(trywait(&a_.cq->fid), 0);
	EXPECT_FALSE(readable(fd, 20)) << "the event was taken";

	/* A completion that arrived before the trywait is found by it, never slept through. */
	ASSERT_EQ(write(&a_, 64, &ctx_[1]), 0);
	EXPECT_EQ(trywait(&a_.cq->fid), -FI_EAGAIN);
	ASSERT_EQ(fi_cq_read(a_.cq.get(), &e, 1), 1);
	EXPECT_EQ(e.op_context, &ctx_[1]);
}

TEST_F(Wait, CqSreadSleepsUntilAWriteOfAnotherThreadCompletes)
{
	open_ep(&a_, FI_WAIT_UNSPEC);
	int fd = -1;
	EXPECT_EQ(fi_control(&a_.cq->fid, FI_GETWAIT, &fd), -FI_ENODATA)
		<< "FI_WAIT_UNSPEC's descriptor is the provider's own";
	fi_cq_entry e{};
	auto t0 = Clock::now();
	EXPECT_EQ(fi_cq_sread(a_.cq.get(), &e, 1, nullptr, 30), -FI_EAGAIN);
	EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(30)) << "it waited its timeout";

	write_later(&a_, 50, 128, &ctx_[2]);
	t0 = Clock::now();
	ASSERT_EQ(fi_cq_sread(a_.cq.get(), &e, 1, nullptr, 10000), 1);
	EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
	EXPECT_EQ(e.op_context, &ctx_[2]);
	EXPECT_TRUE(landed(128));
}

TEST_F(Wait, CqSignalWakesASleepingSread)
{
	open_ep(&a_, FI_WAIT_FD);
	std::thread s([this] {
		std::this_thread::sleep_for(std::chrono::milliseconds(50));
		EXPECT_EQ(fi_cq_signal(a_.cq.get()), 0);
	});
	fi_cq_entry e{};
	const auto t0 = Clock::now();
	EXPECT_EQ(fi_cq_sread(a_.cq.get(), &e, 1, nullptr, 10000), -FI_EAGAIN);
	EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << "woken by the signal";
	s.join();
}

TEST_F(Wait, AnEventAnotherCqTookStillWakesItsOwnCq)
{
	open_ep(&a_, FI_WAIT_FD);
	open_ep(&b_, FI_WAIT_FD);
	int fa = -1, fb = -1;
	ASSERT_EQ(fi_control(&a_.cq->fid, FI_GETWAIT, &fa), 0);
	ASSERT_EQ(fi_control(&b_.cq->fid, FI_GETWAIT, &fb), 0);
	ASSERT_NE(fa, fb);
	fid *both[2] = {&a_.cq->fid, &b_.cq->fid};
	ASSERT_EQ(fi_trywait(fabric_.get(), both, 2), 0);

	ASSERT_EQ(write(&b_, 256, &ctx_[3]), 0);
	ASSERT_TRUE(readable(fb, 5000));
	/* a's trywait takes the device's event (it was b's) ... */
	EXPECT_EQ(trywait(&a_.cq->fid), 0);
	/* ... and b's descriptor stays readable until b looks. */
	EXPECT_TRUE(readable(fb, 0)) << "the wake-up for b is not lost";
	EXPECT_EQ(trywait(&b_.cq->fid), -FI_EAGAIN);
	fi_cq_entry e{};
	ASSERT_EQ(fi_cq_read(b_.cq.get(), &e, 1), 1);
	EXPECT_EQ(e.op_context, &ctx_[3]);
}

TEST_F(Wait, CounterWaitSleepsAndItsDescriptorFollowsTheCount)
{
	open_ep(&a_, FI_WAIT_FD);
	int fd = -1;
	ASSERT_EQ(fi_control(&a_.cntr->fid, FI_GETWAIT, &fd), 0);
	ASSERT_GE(fd, 0);
	EXPECT_EQ(fi_cntr_read(a_.cntr.get()), 0u);
	ASSERT_EQ(trywait(&a_.cntr->fid), 0);
	EXPECT_FALSE(readable(fd, 30));

	ASSERT_EQ(write(&a_, 512, &ctx_[0]), 0);
	ASSERT_TRUE(readable(fd, 5000));
	EXPECT_EQ(trywait(&a_.cntr->fid), -FI_EAGAIN) << "the count moved since it was read";
	EXPECT_EQ(fi_cntr_read(a_.cntr.get()), 1u);
	EXPECT_EQ(trywait(&a_.cntr->fid), 0);

	write_later(&a_, 50, 1024, &ctx_[1]);
	const auto t0 = Clock::now();
	EXPECT_EQ(fi_cntr_wait(a_.cntr.get(), 2, 10000), 0);
	EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
	EXPECT_TRUE(landed(1024));
	EXPECT_EQ(fi_cntr_wait(a_.cntr.get(), 3, 30), -FI_ETIMEDOUT);
	fi_cq_entry e[2];
	EXPECT_EQ(fi_cq_read(a_.cq.get(), e, 2), 2);
}

TEST_F(Wait, RefusalsHaveTheirCodes)
{
	open_ep(&a_, FI_WAIT_NONE);
	int fd = -1;
	EXPECT_EQ(fi_control(&a_.cq->fid, FI_GETWAIT, &fd), -FI_ENODATA);
	EXPECT_EQ(fi_control(&a_.cntr->fid, FI_GETWAIT, &fd), -FI_ENODATA);
	EXPECT_EQ(trywait(&a_.cq->fid), -FI_EINVAL) << "FI_WAIT_NONE: no descriptor";
	EXPECT_EQ(trywait(&a_.cntr->fid), -FI_EINVAL);
	EXPECT_EQ(trywait(&a_.ep->fid), -FI_EINVAL) << "an endpoint has no wait object";
	EXPECT_EQ(fi_trywait(fabric_.get(), nullptr, 1), -FI_EINVAL);

	Fid<fid_cq> cq;
	fi_cq_attr ca{};
	ca.wait_obj = FI_WAIT_FD;
	ASSERT_EQ(fi_cq_open(domain_.get(), &ca, cq.out(), nullptr), 0);
	EXPECT_EQ(fi_control(&cq->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_control(&cq->fid, FI_GETOPSFLAG, &fd), -FI_ENOSYS);
	cq.reset();
	for (fi_wait_obj w : {FI_WAIT_SET, FI_WAIT_MUTEX_COND}) {
		ca.wait_obj = w;
		EXPECT_EQ(fi_cq_open(domain_.get(), &ca, cq.out(), nullptr), -FI_ENOSYS) << w;
		fi_cntr_attr na{};
		na.events = FI_CNTR_EVENTS_COMP;
		na.wait_obj = w;
		Fid<fid_cntr> c;
		EXPECT_EQ(fi_cntr_open(domain_.get(), &na, c.out(), nullptr), -FI_ENOSYS) << w;
	}
}

/* A device whose bus has no interrupts (msix_vectors=0) has no descriptor to hand out:
 * FI_WAIT_FD is refused, FI_WAIT_UNSPEC polls. */
class WaitNoInterrupts : public FabricFixture {
protected:
	DeviceSpecScope spec_{"emu:mkeys=1024,msix_vectors=0"};
};

TEST_F(WaitNoInterrupts, FdIsRefusedAndUnspecPolls)
{
	fi_cq_attr ca{};
	ca.wait_obj = FI_WAIT_FD;
	Fid<fid_cq> cq;
	EXPECT_EQ(fi_cq_open(domain_.get(), &ca, cq.out(), nullptr), -FI_ENOSYS);
	fi_cntr_attr na{};
	na.events = FI_CNTR_EVENTS_COMP;
	na.wait_obj = FI_WAIT_FD;
	Fid<fid_cntr> c;
	EXPECT_EQ(fi_cntr_open(domain_.get(), &na, c.out(), nullptr), -FI_ENOSYS);
	ca.wait_obj = FI_WAIT_UNSPEC;
	ASSERT_EQ(fi_cq_open(domain_.get(), &ca, cq.out(), nullptr), 0);
	fi_cq_entry e{};
	EXPECT_EQ(fi_cq_sread(cq.get(), &e, 1, nullptr, 20), -FI_EAGAIN);
	fid *f = &cq->fid;
	EXPECT_EQ(fi_trywait(fabric_.get(), &f, 1), -FI_EINVAL);
}

} // namespace
} // namespace nicmr::test
