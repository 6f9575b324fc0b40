/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Conformance of nicmr's RDM endpoints through the installed libfabric: RMA and atomics between
 * two endpoints with valid keys (data checked) and invalid ones (an FI_EACCES error entry, the
 * target untouched), fi_cq_readerr's contents, counters, the AV, the EQ and bad input codes.
 */
#include <arpa/inet.h>
#include <endian.h>

#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;
constexpr uint64_t kLocal = FI_READ | FI_WRITE;
constexpr uint64_t kRemote = FI_REMOTE_READ | FI_REMOTE_WRITE;

class Rma : public FabricFixture {
protected:
	/* The environment's device with mkey_by_name: the vectored MRs below take the KLM form,
	 * which needs it (a stock device's refusal is test_fabric_vec.cpp's). */
	std::string by_name_spec_ = env_spec_with_mkey_by_name();
	DeviceSpecScope by_name_{by_name_spec_.c_str()};
	/* The mr_mode and threading model the application offers. */
	virtual int mode() const { return kAppMrMode; }
	virtual enum fi_threading threading() const { return FI_THREAD_UNSPEC; }
	void SetUp() override
	{
		open(mode(), threading());
		if (HasFatalFailure())
			return;
		ASSERT_EQ(info_->domain_attr->threading,
			  threading() == FI_THREAD_DOMAIN || threading() == FI_THREAD_COMPLETION
				  ? threading()
				  : FI_THREAD_SAFE);
		if (HasFatalFailure())
			return;
		ASSERT_EQ(info_->caps & (FI_RMA | FI_ATOMIC), FI_RMA | FI_ATOMIC);
		before_ = stats(domain_.get());
		open_ep(domain_.get(), &a_);
		open_ep(domain_.get(), &b_);
		connect(&a_, &b_);
		connect(&b_, &a_);
		ASSERT_NE(src_.get(), nullptr);
		ASSERT_NE(dst_.get(), nullptr);
		ASSERT_EQ(fi_mr_reg(domain_.get(), src_.get(), kLen, kLocal, 0, 0, 0, lmr_.out(),
				    nullptr),
			  0);
		ASSERT_EQ(fi_mr_reg(domain_.get(), dst_.get(), kLen, kRemote, 0, 0, 0, rmr_.out(),
				    nullptr),
			  0);
		rkey_ = fi_mr_key(rmr_.get());
		if (info_->domain_attr->mr_mode & FI_MR_RAW) {
			/* The initiator learns the key from the raw key, as a peer process would.
			 */
			uint8_t raw[64];
			size_t size = sizeof(raw);
			uint64_t base = 0;
			ASSERT_EQ(fi_mr_raw_attr(rmr_.get(), &base, raw, &size, 0), 0);
			ASSERT_EQ(fi_mr_map_raw(domain_.get(), base, raw, size, &rkey_, 0), 0);
			mapped_ = true;
		}
	}
	void TearDown() override
	{
		if (mapped_) {
			EXPECT_EQ(fi_mr_unmap_key(domain_.get(), rkey_), 0);
		}
		lmr_.reset();
		rmr_.reset();
		a_.close();
		b_.close();
		if (domain_.get()) {
			nicmr_device_stats after = stats(domain_.get());
			EXPECT_EQ(after.mrs, before_.mrs) << "endpoints leave no MR behind";
			EXPECT_EQ(after.pds, before_.pds);
			EXPECT_EQ(after.slow_mappings, before_.slow_mappings);
			EXPECT_EQ(after.pinned_pages, before_.pinned_pages);
		}
		FabricFixture::TearDown();
	}
	void open_ep(fid_domain *dom, Ep *e) { test::open_ep(dom, info_.p(), e); }
	/* A write and a read from a to b, every byte checked, with their completions and counts. */
	void write_and_read()
	{
		for (size_t i = 0; i < kLen; i++)
			src_.get()[i] = static_cast<char>(i * 31 + 5);
		std::memset(dst_.get(), 0, kLen);
		ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), kLen, desc(), a_.peer, raddr(0), rkey_,
				   &ctx_[0]),
			  0);
		expect_done(&ctx_[0], FI_RMA | FI_WRITE);
		EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), kLen), 0);

		std::memset(src_.get(), 0, kLen);
		for (size_t i = 0; i < 4096; i++)
			dst_.get()[8192 + i] = static_cast<char>(i ^ 0xa5);
		ASSERT_EQ(fi_read(a_.ep.get(), src_.get() + 1, 4096, desc(), a_.peer, raddr(8192),
				  rkey_, &ctx_[1]),
			  0);
		expect_done(&ctx_[1], FI_RMA | FI_READ);
		EXPECT_EQ(std::memcmp(src_.get() + 1, dst_.get() + 8192, 4096), 0);
		EXPECT_EQ(src_.get()[0], 0);
		EXPECT_EQ(src_.get()[4097], 0);
		EXPECT_EQ(fi_cntr_read(a_.wc.get()), 1u);
		EXPECT_EQ(fi_cntr_read(a_.rc.get()), 1u);
		EXPECT_EQ(fi_cntr_readerr(a_.wc.get()), 0u);
	}
	/* A target address: the VA, or the offset when the domain's keys are zero-based. */
	uint64_t raddr(size_t off) const
	{
		if (!(info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR))
			return off;
		return uint64_t(uintptr_t(dst_.get() + off));
	}
	void *desc() { return fi_mr_desc(lmr_.get()); }
	/* One completion of a's CQ that must be a success with context ctx. */
	void expect_done(void *ctx, uint64_t flags)
	{
		fi_cq_msg_entry e{};
		ASSERT_EQ(next(a_.cq.get(), &e), 1);
		EXPECT_EQ(e.op_context, ctx);
		EXPECT_EQ(e.flags, flags);
	}
	/* One error entry of a's CQ: its err and syndrome. */
	fi_cq_err_entry expect_error(void *ctx)
	{
		fi_cq_msg_entry e{};
		EXPECT_EQ(next(a_.cq.get(), &e), -FI_EAVAIL);
		fi_cq_err_entry err{};
		EXPECT_EQ(fi_cq_readerr(a_.cq.get(), &err, 0), 1);
		EXPECT_EQ(err.op_context, ctx);
		return err;
	}

	/* The key a peer uses for mr, whose address space starts at start (the first segment's
	 * address, or 0 offset-based): fi_mr_key, or under FI_MR_RAW the raw key mapped (its base
	 * address checked). */
	uint64_t peer_key(fid_mr *mr, uint64_t start)
	{
		if (!(info_->domain_attr->mr_mode & FI_MR_RAW))
			return fi_mr_key(mr);
		uint8_t raw[64];
		size_t size = sizeof(raw);
		uint64_t base = 1, key = 0;
		EXPECT_EQ(fi_mr_raw_attr(mr, &base, raw, &size, 0), 0);
		EXPECT_EQ(base, start);
		EXPECT_EQ(fi_mr_map_raw(domain_.get(), base, raw, size, &key, 0), 0);
		EXPECT_EQ(fi_mr_unmap_key(domain_.get(), key), 0);
		return key;
	}
	void vectored_rma(char *t, char *l);
	/* vectored_rma in a 2 MiB pool of the domain, t and l at these offsets into it. */
	void vectored_rma_in_pool(size_t t_off, size_t l_off)
	{
		fi_nicmr_pool *pool = nullptr;
		char *p = nullptr;
		ASSERT_EQ(
			make_pool(domain_.get(), NICMR_PAGE_2M, FI_NICMR_POOL_FALLBACK, &pool, &p),
			0);
		vectored_rma(p + t_off, p + l_off);
		EXPECT_EQ(pool_ops(domain_.get())->pool_destroy(pool), 0);
	}

	nicmr_device_stats before_{};
	Ep a_, b_;
	Buf src_{kLen}, dst_{kLen};
	Fid<fid_mr> lmr_, rmr_;
	uint64_t rkey_ = 0;
	bool mapped_ = false;
	int ctx_[8] = {};
};

/* Keys from fi_mr_map_raw (FI_MR_RAW). */
class RmaRawKeys : public Rma {
protected:
	int mode() const override { return kAppMrMode | FI_MR_RAW; }
};

/* Zero-based keys: target addresses are offsets, local buffers still VAs. */
class RmaOffsets : public Rma {
protected:
	int mode() const override { return kAppMrMode & ~FI_MR_VIRT_ADDR; }
};

/* The application serialises its calls per domain, or per completion object: the provider's
 * endpoint, CQ and counter locks are no-ops and everything still works. */
class RmaThreadDomain : public Rma {
protected:
	enum fi_threading threading() const override { return FI_THREAD_DOMAIN; }
};
class RmaThreadCompletion : public Rma {
protected:
	enum fi_threading threading() const override { return FI_THREAD_COMPLETION; }
};

TEST_F(Rma, WriteAndReadMoveEveryByteBetweenEndpoints)
{
	write_and_read();
}

TEST_F(RmaThreadDomain, WriteAndReadWorkWithTheLocksMadeNoOps)
{
	write_and_read();
}

TEST_F(RmaThreadCompletion, WriteAndReadWorkWithTheLocksMadeNoOps)
{
	write_and_read();
}

TEST_F(Rma, VectorAndMessageFormsMoveData)
{
	std::memset(src_.get(), 0x42, 512);
	std::memset(dst_.get(), 0, 1024);
	iovec iov{src_.get(), 256};
	void *d = desc();
	ASSERT_EQ(fi_writev(a_.ep.get(), &iov, &d, 1, a_.peer, raddr(0), rkey_, &ctx_[0]), 0);
	expect_done(&ctx_[0], FI_RMA | FI_WRITE);
	fi_rma_iov riov{raddr(256), 256, rkey_};
	fi_msg_rma msg{};
	msg.msg_iov = &iov;
	msg.desc = &d;
	msg.iov_count = 1;
	msg.addr = a_.peer;
	msg.rma_iov = &riov;
	msg.rma_iov_count = 1;
	msg.context = &ctx_[1];
	ASSERT_EQ(fi_writemsg(a_.ep.get(), &msg, FI_COMPLETION), 0);
	expect_done(&ctx_[1], FI_RMA | FI_WRITE);
	for (int i = 0; i < 512; i++)
		ASSERT_EQ(dst_.get()[i], 0x42) << i;
	EXPECT_EQ(dst_.get()[512], 0);

	std::memset(src_.get(), 0, 512);
	ASSERT_EQ(fi_readv(a_.ep.get(), &iov, &d, 1, a_.peer, raddr(0), rkey_, &ctx_[2]), 0);
	expect_done(&ctx_[2], FI_RMA | FI_READ);
	msg.context = &ctx_[3];
	iovec iov2{src_.get() + 256, 256};
	msg.msg_iov = &iov2;
	ASSERT_EQ(fi_readmsg(a_.ep.get(), &msg, 0), 0);
	expect_done(&ctx_[3], FI_RMA | FI_READ);
	for (int i = 0; i < 512; i++)
		ASSERT_EQ(src_.get()[i], 0x42) << i;

	/* One segment each side, lengths equal, known flags. */
	msg.iov_count = 2;
	EXPECT_EQ(fi_writemsg(a_.ep.get(), &msg, 0), -FI_EINVAL);
	msg.iov_count = 1;
	riov.len = 100;
	EXPECT_EQ(fi_writemsg(a_.ep.get(), &msg, 0), -FI_EINVAL);
	riov.len = 256;
	EXPECT_EQ(fi_writemsg(a_.ep.get(), &msg, FI_MORE << 1), -FI_EBADFLAGS);
	iovec two[2] = {iov, iov};
	void *dd[2] = {d, d};
	EXPECT_EQ(fi_writev(a_.ep.get(), two, dd, 2, a_.peer, raddr(0), rkey_, nullptr),
		  -FI_EINVAL);
	EXPECT_EQ(fi_readv(a_.ep.get(), two, dd, 2, a_.peer, raddr(0), rkey_, nullptr), -FI_EINVAL);
}

/* The msg_order fi_getinfo promises (RAW, WAW, RAR to one peer): requests posted back to back
 * without waiting, each seeing the one before it. */
TEST_F(Rma, RequestsToOnePeerKeepThePromisedOrder)
{
	ASSERT_EQ(info_->tx_attr->msg_order & (FI_ORDER_RAW | FI_ORDER_WAW | FI_ORDER_RAR),
		  FI_ORDER_RAW | FI_ORDER_WAW | FI_ORDER_RAR);
	std::memset(dst_.get(), 0, 4096);
	for (int round = 0; round < 20; round++) {
		SCOPED_TRACE(round);
		/* WAW: two writes of the same 256 bytes, the second's bytes stay. */
		std::memset(src_.get(), 0x10 + round, 256);
		std::memset(src_.get() + 256, 0x80 + round, 256);
		ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 256, desc(), a_.peer, raddr(0), rkey_,
				   &ctx_[0]),
			  0);
		ASSERT_EQ(fi_write(a_.ep.get(), src_.get() + 256, 256, desc(), a_.peer, raddr(0),
				   rkey_, &ctx_[1]),
			  0);
		/* RAW and RAR: two reads of them, posted before anything completed. */
		ASSERT_EQ(fi_read(a_.ep.get(), src_.get() + 1024, 256, desc(), a_.peer, raddr(0),
				  rkey_, &ctx_[2]),
			  0);
		ASSERT_EQ(fi_read(a_.ep.get(), src_.get() + 2048, 256, desc(), a_.peer, raddr(0),
				  rkey_, &ctx_[3]),
			  0);
		for (int i = 0; i < 4; i++)
			expect_done(&ctx_[i], i < 2 ? FI_RMA | FI_WRITE : FI_RMA | FI_READ);
		for (size_t i = 0; i < 256; i++) {
			ASSERT_EQ(dst_.get()[i], char(0x80 + round)) << i;
			ASSERT_EQ(src_.get()[1024 + i], char(0x80 + round)) << i;
			ASSERT_EQ(src_.get()[2048 + i], char(0x80 + round)) << i;
		}
	}
}

TEST_F(Rma, InjectWriteNeedsNoDescriptorAndReportsNoCompletion)
{
	char small[200];
	for (size_t i = 0; i < sizeof(small); i++)
		small[i] = static_cast<char>(i + 1);
	std::memset(dst_.get(), 0, 512);
	ASSERT_EQ(fi_inject_write(a_.ep.get(), small, sizeof(small), a_.peer, raddr(16), rkey_), 0);
	std::memset(small, 0, sizeof(small)); /* the buffer is the caller's again at once */
	EXPECT_EQ(fi_cntr_wait(a_.wc.get(), 1, 5000), 0);
	fi_cq_msg_entry e{};
	EXPECT_EQ(fi_cq_read(a_.cq.get(), &e, 1), -FI_EAGAIN) << "inject reports no completion";
	for (int i = 0; i < 200; i++)
		ASSERT_EQ(dst_.get()[16 + i], static_cast<char>(i + 1)) << i;
	EXPECT_EQ(dst_.get()[15], 0);
	EXPECT_EQ(dst_.get()[216], 0);

	/* A write without descriptor is inline too, up to inject_size. */
	const size_t inject = info_->tx_attr->inject_size;
	EXPECT_EQ(inject, 972u);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), inject, nullptr, a_.peer, raddr(0), rkey_,
			   &ctx_[0]),
		  0);
	expect_done(&ctx_[0], FI_RMA | FI_WRITE);
	EXPECT_EQ(fi_write(a_.ep.get(), src_.get(), inject + 1, nullptr, a_.peer, raddr(0), rkey_,
			   &ctx_[0]),
		  -FI_EINVAL);
	EXPECT_EQ(fi_inject_write(a_.ep.get(), src_.get(), inject + 1, a_.peer, raddr(0), rkey_),
		  -FI_EINVAL);
	EXPECT_EQ(fi_read(a_.ep.get(), src_.get(), 64, nullptr, a_.peer, raddr(0), rkey_, nullptr),
		  -FI_EINVAL)
		<< "a read needs the descriptor of its destination (FI_MR_LOCAL)";
}

/* The target word as the application sees it: a uint64_t in host byte order (fi_atomic(3)). */
uint64_t word_at(const char *p)
{
	uint64_t v;
	std::memcpy(&v, p, 8);
	return v;
}

TEST_F(Rma, AtomicsSumAndCompareSwapOnUint64InHostOrder)
{
	/* The device is in host-endian mode: the provider says so. */
	fi_nicmr_pool_ops *ops = nullptr;
	ASSERT_EQ(fi_open_ops(&domain_->fid, FI_NICMR_POOL_OPS, 0, reinterpret_cast<void **>(&ops),
			      nullptr),
		  0);
	ASSERT_GE(ops->size, offsetof(fi_nicmr_pool_ops, device_query) + sizeof(void *));
	nicmr_device_attr attr{};
	ASSERT_EQ(ops->device_query(domain_.get(), &attr), 0);
	EXPECT_EQ(attr.atomic_mode, uint32_t{NICMR_ATOMIC_HOST});
	EXPECT_EQ(ops->device_query(domain_.get(), nullptr), -FI_EINVAL);
	EXPECT_EQ(ops->device_query(nullptr, &attr), -FI_EINVAL);

	uint64_t v = 40;
	std::memcpy(dst_.get() + 64, &v, 8);
	uint64_t add = 2, result = 0, compare = 0, swap = 0;
	ASSERT_EQ(fi_atomic(a_.ep.get(), &add, 1, nullptr, a_.peer, raddr(64), rkey_, FI_UINT64,
			    FI_SUM, &ctx_[0]),
		  0);
	expect_done(&ctx_[0], FI_ATOMIC | FI_WRITE);
	EXPECT_EQ(word_at(dst_.get() + 64), 42u) << "40 + 2";

	v = 40;
	std::memcpy(dst_.get() + 64, &v, 8);
	ASSERT_EQ(fi_fetch_atomic(a_.ep.get(), &add, 1, nullptr, &result, nullptr, a_.peer,
				  raddr(64), rkey_, FI_UINT64, FI_SUM, &ctx_[1]),
		  0);
	expect_done(&ctx_[1], FI_ATOMIC | FI_READ);
	EXPECT_EQ(result, 40u) << "the fetched value is the old one";
	EXPECT_EQ(word_at(dst_.get() + 64), 42u);

	/* A compare that does not match leaves the target; the old value comes back. */
	compare = 40;
	swap = 7;
	ASSERT_EQ(fi_compare_atomic(a_.ep.get(), &swap, 1, nullptr, &compare, nullptr, &result,
				    nullptr, a_.peer, raddr(64), rkey_, FI_UINT64, FI_CSWAP,
				    &ctx_[2]),
		  0);
	expect_done(&ctx_[2], FI_ATOMIC | FI_READ);
	EXPECT_EQ(result, 42u);
	EXPECT_EQ(word_at(dst_.get() + 64), 42u) << "compare 40 did not match 42: unchanged";
	/* One that matches swaps. */
	v = 40;
	std::memcpy(dst_.get() + 64, &v, 8);
	ASSERT_EQ(fi_compare_atomic(a_.ep.get(), &swap, 1, nullptr, &compare, nullptr, &result,
				    nullptr, a_.peer, raddr(64), rkey_, FI_UINT64, FI_CSWAP,
				    &ctx_[3]),
		  0);
	expect_done(&ctx_[3], FI_ATOMIC | FI_READ);
	EXPECT_EQ(result, 40u);
	EXPECT_EQ(word_at(dst_.get() + 64), 7u) << "compare 40 matched: swapped";

	/* The msg forms, and a carry across the low byte. */
	v = 0xff;
	std::memcpy(dst_.get() + 64, &v, 8);
	add = 1;
	fi_ioc ioc{&add, 1};
	fi_rma_ioc rioc{raddr(64), 1, rkey_};
	fi_msg_atomic msg{};
	msg.msg_iov = &ioc;
	msg.iov_count = 1;
	msg.addr = a_.peer;
	msg.rma_iov = &rioc;
	msg.rma_iov_count = 1;
	msg.datatype = FI_UINT64;
	msg.op = FI_SUM;
	msg.context = &ctx_[4];
	ASSERT_EQ(fi_atomicmsg(a_.ep.get(), &msg, 0), 0);
	expect_done(&ctx_[4], FI_ATOMIC | FI_WRITE);
	EXPECT_EQ(word_at(dst_.get() + 64), 0x100u);
	fi_ioc res{&result, 1};
	msg.context = &ctx_[5];
	ASSERT_EQ(fi_fetch_atomicmsg(a_.ep.get(), &msg, &res, nullptr, 1, 0), 0);
	expect_done(&ctx_[5], FI_ATOMIC | FI_READ);
	EXPECT_EQ(result, 0x100u);
	EXPECT_EQ(word_at(dst_.get() + 64), 0x101u);
	uint64_t cmpv = 0x101;
	fi_ioc cmp{&cmpv, 1};
	msg.op = FI_CSWAP;
	ioc.addr = &swap;
	swap = 99;
	msg.context = &ctx_[6];
	ASSERT_EQ(fi_compare_atomicmsg(a_.ep.get(), &msg, &cmp, nullptr, 1, &res, nullptr, 1, 0),
		  0);
	expect_done(&ctx_[6], FI_ATOMIC | FI_READ);
	EXPECT_EQ(result, 0x101u);
	EXPECT_EQ(word_at(dst_.get() + 64), 99u);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 2u);
	EXPECT_EQ(fi_cntr_read(a_.rc.get()), 5u);
}

TEST_F(Rma, QueryAtomicSaysExactlyWhatTheDeviceDoes)
{
	fi_atomic_attr attr{};
	EXPECT_EQ(fi_query_atomic(domain_.get(), FI_UINT64, FI_SUM, &attr, 0), 0);
	EXPECT_EQ(attr.size, 8u);
	EXPECT_EQ(attr.count, 1u);
	EXPECT_EQ(fi_query_atomic(domain_.get(), FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC), 0);
	EXPECT_EQ(fi_query_atomic(domain_.get(), FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC), 0);
	EXPECT_EQ(fi_query_atomic(domain_.get(), FI_UINT64, FI_CSWAP, &attr, 0), -FI_EOPNOTSUPP);
	EXPECT_EQ(fi_query_atomic(domain_.get(), FI_UINT64, FI_SUM, &attr, FI_COMPARE_ATOMIC),
		  -FI_EOPNOTSUPP);
	for (fi_op op : {FI_MIN, FI_MAX, FI_PROD, FI_BOR, FI_BAND, FI_BXOR, FI_ATOMIC_READ,
			 FI_ATOMIC_WRITE, FI_LOR})
		EXPECT_EQ(fi_query_atomic(domain_.get(), FI_UINT64, op, &attr, 0), -FI_EOPNOTSUPP)
			<< op;
	for (fi_datatype dt : {FI_INT8, FI_UINT32, FI_INT64, FI_DOUBLE, FI_FLOAT})
		EXPECT_EQ(fi_query_atomic(domain_.get(), dt, FI_SUM, &attr, 0), -FI_EOPNOTSUPP)
			<< dt;
	size_t count = 9;
	EXPECT_EQ(fi_atomicvalid(a_.ep.get(), FI_UINT64, FI_SUM, &count), 0);
	EXPECT_EQ(count, 1u);
	EXPECT_EQ(fi_fetch_atomicvalid(a_.ep.get(), FI_UINT64, FI_SUM, &count), 0);
	EXPECT_EQ(fi_compare_atomicvalid(a_.ep.get(), FI_UINT64, FI_CSWAP, &count), 0);
	EXPECT_EQ(fi_atomicvalid(a_.ep.get(), FI_UINT32, FI_SUM, &count), -FI_EOPNOTSUPP);
	EXPECT_EQ(count, 0u);
	EXPECT_EQ(fi_compare_atomicvalid(a_.ep.get(), FI_UINT64, FI_CSWAP_NE, &count),
		  -FI_EOPNOTSUPP);

	/* What is not valid is refused in the call. */
	uint64_t one = 1, r = 0;
	EXPECT_EQ(fi_atomic(a_.ep.get(), &one, 1, nullptr, a_.peer, raddr(0), rkey_, FI_UINT32,
			    FI_SUM, nullptr),
		  -FI_EOPNOTSUPP);
	EXPECT_EQ(fi_atomic(a_.ep.get(), &one, 1, nullptr, a_.peer, raddr(0), rkey_, FI_UINT64,
			    FI_MIN, nullptr),
		  -FI_EOPNOTSUPP);
	EXPECT_EQ(fi_compare_atomic(a_.ep.get(), &one, 1, nullptr, &one, nullptr, &r, nullptr,
				    a_.peer, raddr(0), rkey_, FI_UINT64, FI_SUM, nullptr),
		  -FI_EOPNOTSUPP);
	EXPECT_EQ(fi_atomic(a_.ep.get(), &one, 2, nullptr, a_.peer, raddr(0), rkey_, FI_UINT64,
			    FI_SUM, nullptr),
		  -FI_EINVAL);
	EXPECT_EQ(fi_atomic(a_.ep.get(), &one, 1, nullptr, a_.peer, raddr(4), rkey_, FI_UINT64,
			    FI_SUM, nullptr),
		  -FI_EINVAL)
		<< "the target word is 8-byte aligned";
	EXPECT_EQ(fi_fetch_atomic(a_.ep.get(), &one, 1, nullptr, nullptr, nullptr, a_.peer,
				  raddr(0), rkey_, FI_UINT64, FI_SUM, nullptr),
		  -FI_EINVAL);
}

TEST_F(Rma, StaleKeyCompletesWithEaccesAndTheTargetStaysIntact)
{
	std::memset(dst_.get(), 0xcc, 4096);
	std::memset(src_.get(), 0x11, 4096);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 4096, desc(), a_.peer, raddr(0), rkey_ ^ 0xff,
			   &ctx_[0]),
		  0);
	fi_cq_err_entry err = expect_error(&ctx_[0]);
	EXPECT_EQ(err.err, FI_EACCES);
	EXPECT_EQ(err.prov_errno, 0x13) << "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR";
	EXPECT_EQ(err.flags, FI_RMA | FI_WRITE);
	char buf[128];
	const char *s = fi_cq_strerror(a_.cq.get(), err.prov_errno, err.err_data, buf, sizeof(buf));
	ASSERT_NE(s, nullptr);
	EXPECT_NE(std::string(s).find("remote access"), std::string::npos) << s;
	for (int i = 0; i < 4096; i++)
		ASSERT_EQ(static_cast<uint8_t>(dst_.get()[i]), 0xcc) << i;
	EXPECT_EQ(fi_cntr_readerr(a_.wc.get()), 1u);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 0u);
	EXPECT_EQ(fi_cq_readerr(a_.cq.get(), &err, 0), -FI_EAGAIN) << "one error, taken";

	/* A key that is not 32 bits is no key either; then the pair recovers for a good one. */
	ASSERT_EQ(fi_read(a_.ep.get(), src_.get(), 64, desc(), a_.peer, raddr(0),
			  rkey_ | (uint64_t{1} << 40), &ctx_[1]),
		  0);
	EXPECT_EQ(expect_error(&ctx_[1]).err, FI_EACCES);
	uint64_t one = 1;
	ASSERT_EQ(fi_atomic(a_.ep.get(), &one, 1, nullptr, a_.peer, raddr(0), rkey_ + 1, FI_UINT64,
			    FI_SUM, &ctx_[2]),
		  0);
	EXPECT_EQ(expect_error(&ctx_[2]).err, FI_EACCES);
	for (int i = 0; i < 4096; i++)
		ASSERT_EQ(static_cast<uint8_t>(dst_.get()[i]), 0xcc) << i;

	ASSERT_EQ(
		fi_write(a_.ep.get(), src_.get(), 4096, desc(), a_.peer, raddr(0), rkey_, &ctx_[3]),
		0);
	expect_done(&ctx_[3], FI_RMA | FI_WRITE);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), 4096), 0);
}

TEST_F(Rma, RightsTheKeyDoesNotGrantCompleteWithEacces)
{
	Buf ro(4096);
	std::memset(ro.get(), 0x77, 4096);
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), ro.get(), 4096, FI_REMOTE_READ, 0, 0, 0, mr.out(),
			    nullptr),
		  0);
	const uint64_t key = fi_mr_key(mr.get());
	const uint64_t at = uint64_t(uintptr_t(ro.get()));
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 64, desc(), a_.peer, at, key, &ctx_[0]), 0);
	EXPECT_EQ(expect_error(&ctx_[0]).err, FI_EACCES);
	uint64_t one = 1, r = 0;
	ASSERT_EQ(fi_fetch_atomic(a_.ep.get(), &one, 1, nullptr, &r, nullptr, a_.peer, at, key,
				  FI_UINT64, FI_SUM, &ctx_[1]),
		  0);
	EXPECT_EQ(expect_error(&ctx_[1]).err, FI_EACCES);
	for (int i = 0; i < 4096; i++)
		ASSERT_EQ(static_cast<uint8_t>(ro.get()[i]), 0x77) << i;
	/* What the key grants works. */
	ASSERT_EQ(fi_read(a_.ep.get(), src_.get(), 64, desc(), a_.peer, at, key, &ctx_[2]), 0);
	expect_done(&ctx_[2], FI_RMA | FI_READ);
	EXPECT_EQ(static_cast<uint8_t>(src_.get()[63]), 0x77);
	/* Outside the region. */
	ASSERT_EQ(fi_read(a_.ep.get(), src_.get(), 64, desc(), a_.peer, at + 4096 - 32, key,
			  &ctx_[3]),
		  0);
	EXPECT_EQ(expect_error(&ctx_[3]).err, FI_EACCES);
	/* A local descriptor that does not cover the buffer is refused in the call. */
	EXPECT_EQ(fi_write(a_.ep.get(), src_.get() + kLen - 8, 16, desc(), a_.peer, raddr(0), rkey_,
			   nullptr),
		  -FI_EACCES);
	mr.reset();
}

TEST_F(Rma, EndpointWritesToItselfAndToAnotherDomain)
{
	/* Its own address: the address QP connected to itself. */
	std::memset(src_.get(), 0x5e, 128);
	std::memset(dst_.get(), 0, 256);
	ASSERT_EQ(
		fi_write(a_.ep.get(), src_.get(), 128, desc(), a_.self, raddr(0), rkey_, &ctx_[0]),
		0);
	expect_done(&ctx_[0], FI_RMA | FI_WRITE);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), 128), 0);

	/* An endpoint of a second domain (another PD): its keys, its memory. */
	Fid<fid_domain> d2;
	ASSERT_EQ(fi_domain(fabric_.get(), info_.p(), d2.out(), nullptr), 0);
	Ep c;
	open_ep(d2.get(), &c);
	connect(&a_, &c);
	Buf other(4096);
	std::memset(other.get(), 0, 4096);
	Fid<fid_mr> omr;
	ASSERT_EQ(fi_mr_reg(d2.get(), other.get(), 4096, kRemote, 0, 0, 0, omr.out(), nullptr), 0);
	const uint64_t okey = fi_mr_key(omr.get());
	fi_addr_t to_c = a_.peer;
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 128, desc(), to_c,
			   uint64_t(uintptr_t(other.get())), okey, &ctx_[1]),
		  0);
	expect_done(&ctx_[1], FI_RMA | FI_WRITE);
	EXPECT_EQ(std::memcmp(src_.get(), other.get(), 128), 0);
	/* The first domain's key is not a key of the second domain's PD. */
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 128, desc(), to_c, raddr(0), rkey_, &ctx_[2]),
		  0);
	EXPECT_EQ(expect_error(&ctx_[2]).err, FI_EACCES);
	/* A's pair holds a QP in the second domain's PD while c lives: the domain is busy. */
	omr.reset();
	EXPECT_EQ(fi_close(&d2->fid), -FI_EBUSY);
	/* c's close takes that responder QP with it (it received into c's SRQ and reported to
	 * c's CQ): the domain closes, and a's close leaves the QP alone. */
	c.close();
	EXPECT_EQ(fi_close(&d2->fid), 0);
	*d2.out() = nullptr;
	a_.close();
}

TEST_F(Rma, CountersCountAndWait)
{
	for (int i = 0; i < 10; i++)
		ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 64, desc(), a_.peer, raddr(64 * i),
				   rkey_, nullptr),
			  0);
	EXPECT_EQ(fi_cntr_wait(a_.wc.get(), 10, 5000), 0);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 10u);
	EXPECT_EQ(fi_cntr_read(a_.rc.get()), 0u);
	EXPECT_EQ(fi_cntr_wait(a_.wc.get(), 11, 20), -FI_ETIMEDOUT);
	EXPECT_EQ(fi_cntr_add(a_.wc.get(), 5), 0);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 15u);
	EXPECT_EQ(fi_cntr_set(a_.wc.get(), 2), 0);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 2u);
	EXPECT_EQ(fi_cntr_adderr(a_.wc.get(), 3), 0);
	EXPECT_EQ(fi_cntr_readerr(a_.wc.get()), 3u);
	EXPECT_EQ(fi_cntr_seterr(a_.wc.get(), 0), 0);
	/* An error ends a wait early. */
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 64, desc(), a_.peer, raddr(0), rkey_ ^ 1,
			   nullptr),
		  0);
	EXPECT_EQ(fi_cntr_wait(a_.wc.get(), 100, 5000), -FI_EAVAIL);
	EXPECT_EQ(fi_cntr_readerr(a_.wc.get()), 1u);
	fi_cq_err_entry err{};
	fi_cq_msg_entry e{};
	for (int i = 0; i < 10; i++)
		ASSERT_EQ(next(a_.cq.get(), &e), 1);
	ASSERT_EQ(next(a_.cq.get(), &e), -FI_EAVAIL);
	EXPECT_EQ(fi_cq_readerr(a_.cq.get(), &err, 0), 1);
	EXPECT_EQ(err.err, FI_EACCES);
}

TEST_F(Rma, AddressVectorsNameEndpointsAndRefuseForeignAddresses)
{
	constexpr size_t kName = sizeof(fi_nicmr_name);
	static_assert(kName == 40);
	char addr[kName];
	size_t len = 8;
	EXPECT_EQ(fi_getname(&b_.ep->fid, addr, &len), -FI_ETOOSMALL);
	EXPECT_EQ(len, kName);
	len = sizeof(addr);
	ASSERT_EQ(fi_getname(&b_.ep->fid, addr, &len), 0);
	fi_nicmr_name name;
	std::memcpy(&name, addr, kName);
	EXPECT_EQ(ntohl(name.magic), FI_NICMR_NAME_MAGIC);
	EXPECT_EQ(name.version, FI_NICMR_NAME_VERSION);
	EXPECT_EQ(name.kind, FI_NICMR_NAME_LOCAL) << "this suite's device has no wire";

	char back[kName];
	size_t blen = sizeof(back);
	ASSERT_EQ(fi_av_lookup(a_.av.get(), a_.peer, back, &blen), 0);
	EXPECT_EQ(blen, kName);
	EXPECT_EQ(std::memcmp(back, addr, kName), 0);
	blen = 4;
	ASSERT_EQ(fi_av_lookup(a_.av.get(), a_.peer, back, &blen), 0);
	EXPECT_EQ(blen, kName) << "the size needed";
	EXPECT_EQ(fi_av_lookup(a_.av.get(), 12345, back, &blen), -FI_EINVAL);

	char str[128];
	size_t slen = sizeof(str);
	ASSERT_NE(fi_av_straddr(a_.av.get(), addr, str, &slen), nullptr);
	EXPECT_EQ(std::string(str).rfind("fi_nicmr://local:0/0x", 0), 0u) << str;
	EXPECT_EQ(slen, std::strlen(str) + 1);

	/* Another device's local name is not inserted; a name that is none is refused. */
	char foreign[kName];
	std::memcpy(foreign, addr, kName);
	foreign[kName - 1] ^= 1; /* device id */
	fi_addr_t out[2] = {0, 0};
	EXPECT_EQ(fi_av_insert(a_.av.get(), foreign, 1, out, 0, nullptr), 0);
	EXPECT_EQ(out[0], FI_ADDR_NOTAVAIL);
	const size_t at_port = offsetof(fi_nicmr_name, port), at_qpn = offsetof(fi_nicmr_name, qpn);
	for (auto [at, v] :
	     {std::pair{size_t{0}, 0x55}, std::pair{size_t{4}, 2}, std::pair{size_t{5}, 7},
	      std::pair{at_port + 3, 9}, std::pair{at_qpn, 1}}) {
		char bad[2][kName];
		std::memcpy(bad[0], addr, kName);
		std::memcpy(bad[1], addr, kName);
		bad[1][at] =
			static_cast<char>(v); /* magic, version, kind, port, qpn above 24 bits */
		out[0] = out[1] = 0;
		EXPECT_EQ(fi_av_insert(a_.av.get(), bad, 2, out, 0, nullptr), -FI_EINVAL) << at;
		EXPECT_EQ(out[0], 0u) << "nothing inserted";
	}
	fi_nicmr_name wire{};
	wire.magic = htonl(FI_NICMR_NAME_MAGIC);
	wire.version = FI_NICMR_NAME_VERSION;
	wire.kind = FI_NICMR_NAME_WIRE;
	wire.udp_port = htons(4791);
	wire.qpn = htonl(0x123);
	wire.port = htonl(1);
	EXPECT_EQ(fi_av_insert(a_.av.get(), &wire, 1, out, 0, nullptr), -FI_EINVAL) << "no GID";
	wire.gid[15] = 1;
	ASSERT_EQ(fi_av_insert(a_.av.get(), &wire, 1, out, 0, nullptr), 1) << "any device's";
	EXPECT_EQ(fi_write(a_.ep.get(), src_.get(), 64, desc(), out[0], raddr(0), rkey_, nullptr),
		  -FI_EADDRNOTAVAIL)
		<< "this endpoint has no wire";
	EXPECT_EQ(fi_av_insert(a_.av.get(), addr, 1, out, FI_MORE, nullptr), -FI_EBADFLAGS);

	/* Removed addresses are gone for lookups and requests. */
	fi_addr_t again = FI_ADDR_NOTAVAIL;
	ASSERT_EQ(fi_av_insert(a_.av.get(), addr, 1, &again, 0, nullptr), 1);
	ASSERT_EQ(fi_av_remove(a_.av.get(), &again, 1, 0), 0);
	EXPECT_EQ(fi_av_lookup(a_.av.get(), again, back, &blen), -FI_EINVAL);
	EXPECT_EQ(fi_av_remove(a_.av.get(), &again, 1, 0), -FI_EINVAL);
	EXPECT_EQ(fi_write(a_.ep.get(), src_.get(), 64, desc(), again, raddr(0), rkey_, nullptr),
		  -FI_EINVAL);

	/* An address nobody answers at: refused at the first request. */
	char gone[kName];
	std::memcpy(gone, addr, kName);
	const uint32_t qpn = htonl(0xfffff0);
	std::memcpy(gone + at_qpn, &qpn, 4);
	fi_addr_t nobody = FI_ADDR_NOTAVAIL;
	ASSERT_EQ(fi_av_insert(a_.av.get(), gone, 1, &nobody, 0, nullptr), 1);
	EXPECT_EQ(fi_write(a_.ep.get(), src_.get(), 64, desc(), nobody, raddr(0), rkey_, nullptr),
		  -FI_EADDRNOTAVAIL);

	/* FI_AV_MAP works the same way. */
	fi_av_attr attr{};
	attr.type = FI_AV_MAP;
	Fid<fid_av> map;
	ASSERT_EQ(fi_av_open(domain_.get(), &attr, map.out(), nullptr), 0);
	fi_addr_t m = FI_ADDR_NOTAVAIL;
	ASSERT_EQ(fi_av_insert(map.get(), addr, 1, &m, 0, nullptr), 1);
	EXPECT_NE(m, FI_ADDR_NOTAVAIL);
	attr.type = FI_AV_UNSPEC;
	attr.flags = FI_EVENT;
	Fid<fid_av> bad_av;
	EXPECT_EQ(fi_av_open(domain_.get(), &attr, bad_av.out(), nullptr), -FI_EBADFLAGS);
	EXPECT_EQ(fi_close(&a_.av->fid), -FI_EBUSY) << "an endpoint is bound to it";
}

TEST_F(Rma, BadInputGetsItsCode)
{
	/* An endpoint must have its AV and CQ before it is enabled, and be enabled to post. */
	Fid<fid_ep> ep;
	ASSERT_EQ(fi_endpoint(domain_.get(), info_.p(), ep.out(), nullptr), 0);
	EXPECT_EQ(fi_write(ep.get(), src_.get(), 64, desc(), 0, raddr(0), rkey_, nullptr),
		  -FI_EOPBADSTATE);
	EXPECT_EQ(fi_enable(ep.get()), -FI_ENOAV);
	ASSERT_EQ(fi_ep_bind(ep.get(), &a_.av->fid, 0), 0);
	EXPECT_EQ(fi_ep_bind(ep.get(), &a_.av->fid, 0), -FI_EINVAL) << "one AV";
	EXPECT_EQ(fi_enable(ep.get()), -FI_ENOCQ);
	EXPECT_EQ(fi_ep_bind(ep.get(), &a_.cq->fid, FI_SELECTIVE_COMPLETION), -FI_EBADFLAGS);
	EXPECT_EQ(fi_ep_bind(ep.get(), &a_.wc->fid, FI_REMOTE_WRITE), -FI_EBADFLAGS);
	EXPECT_EQ(fi_ep_bind(ep.get(), &domain_->fid, 0), -FI_EINVAL);
	ep.reset();

	EXPECT_EQ(fi_write(a_.ep.get(), src_.get(), 0, desc(), a_.peer, raddr(0), rkey_, nullptr),
		  -FI_EINVAL);
	EXPECT_EQ(fi_write(a_.ep.get(), nullptr, 64, desc(), a_.peer, raddr(0), rkey_, nullptr),
		  -FI_EINVAL);
	EXPECT_EQ(fi_writedata(a_.ep.get(), src_.get(), 64, desc(), 1, a_.peer, raddr(0), rkey_,
			       nullptr),
		  -FI_ENOSYS);
	EXPECT_EQ(fi_cancel(&a_.ep->fid, nullptr), -FI_ENOENT);

	fi_cq_attr cq{};
	Fid<fid_cq> tagged;
	cq.format = FI_CQ_FORMAT_CONTEXT;
	cq.wait_obj = FI_WAIT_SET;
	EXPECT_EQ(fi_cq_open(domain_.get(), &cq, tagged.out(), nullptr), -FI_ENOSYS);
	fi_cntr_attr ca{};
	ca.events = FI_CNTR_EVENTS_COMP;
	ca.flags = 1;
	Fid<fid_cntr> cn;
	EXPECT_EQ(fi_cntr_open(domain_.get(), &ca, cn.out(), nullptr), -FI_EBADFLAGS);
	fi_cq_err_entry err{};
	EXPECT_EQ(fi_cq_readerr(a_.cq.get(), &err, 1), -FI_EBADFLAGS);
	EXPECT_EQ(fi_cq_readerr(a_.cq.get(), &err, 0), -FI_EAGAIN);

	/* Objects with something bound or open below them are busy. */
	EXPECT_EQ(fi_close(&a_.cq->fid), -FI_EBUSY);
	EXPECT_EQ(fi_close(&a_.wc->fid), -FI_EBUSY);
	EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
}

TEST_F(Rma, EndpointsBeyondTheDevicesUarsAreRefusedAndLeaveNothing)
{
	const nicmr_device_stats base = stats(domain_.get());
	constexpr int kMax = 40;
	Fid<fid_ep> eps[kMax];
	int opened = 0, ret = 0;
	while (opened < kMax &&
	       (ret = fi_endpoint(domain_.get(), info_.p(), eps[opened].out(), nullptr)) == 0)
		opened++;
	EXPECT_EQ(ret, -FI_ENOSPC);
	EXPECT_EQ(eps[opened].get(), nullptr);
	EXPECT_EQ(opened + 2, static_cast<int>(info_->domain_attr->ep_cnt))
		<< "a_ and b_ are open: ep_cnt says the limit";
	nicmr_device_stats s = stats(domain_.get());
	EXPECT_EQ(s.mrs, base.mrs + 3 * static_cast<uint64_t>(opened))
		<< "a scratch MR each, and the receive and send buffers of its messages";
	for (auto &e : eps)
		e.reset();
	expect_same(base, stats(domain_.get()));
}

TEST_F(Rma, ThreadsShareAnEndpointAndItsCq)
{
	/* FI_THREAD_SAFE: two threads post on one endpoint and both reap its CQ. */
	constexpr int kPerThread = 300;
	std::atomic<int> reaped{0}, failed{0};
	auto work = [&](int t) {
		int posted = 0;
		fi_cq_msg_entry e[8];
		while (posted < kPerThread) {
			ssize_t r =
				fi_write(a_.ep.get(), src_.get() + t * 4096, 64, desc(), a_.peer,
					 raddr(t * 4096 + (posted % 32) * 64), rkey_, nullptr);
			if (r == 0)
				posted++;
			else if (r != -FI_EAGAIN)
				failed++;
			ssize_t n = fi_cq_read(a_.cq.get(), e, 8);
			if (n > 0)
				reaped += static_cast<int>(n);
			else if (n != -FI_EAGAIN)
				failed++;
		}
	};
	std::memset(src_.get(), 0x61, 4096);
	std::memset(src_.get() + 4096, 0x62, 4096);
	std::thread t0(work, 0), t1(work, 1);
	t0.join();
	t1.join();
	auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	fi_cq_msg_entry e[8];
	while (reaped < 2 * kPerThread && std::chrono::steady_clock::now() < end) {
		ssize_t n = fi_cq_read(a_.cq.get(), e, 8);
		if (n > 0)
			reaped += static_cast<int>(n);
	}
	EXPECT_EQ(failed.load(), 0);
	EXPECT_EQ(reaped.load(), 2 * kPerThread);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), uint64_t{2 * kPerThread});
	EXPECT_EQ(dst_.get()[0], 0x61);
	EXPECT_EQ(dst_.get()[4096 + 2047], 0x62);
}

TEST_F(Rma, CqFormatsContextAndDataCarryTheRequest)
{
	for (fi_cq_format f : {FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_DATA}) {
		SCOPED_TRACE(f);
		fi_cq_attr attr{};
		attr.format = f;
		attr.size = 4;
		Fid<fid_cq> cq;
		ASSERT_EQ(fi_cq_open(domain_.get(), &attr, cq.out(), nullptr), 0);
		Fid<fid_ep> ep;
		ASSERT_EQ(fi_endpoint(domain_.get(), info_.p(), ep.out(), nullptr), 0);
		ASSERT_EQ(fi_ep_bind(ep.get(), &a_.av->fid, 0), 0);
		ASSERT_EQ(fi_ep_bind(ep.get(), &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		ASSERT_EQ(fi_enable(ep.get()), 0);
		fi_cq_data_entry d{};
		fi_addr_t from = 0;
		EXPECT_EQ(fi_cq_sread(cq.get(), &d, 1, nullptr, 10), -FI_EAGAIN);
		ASSERT_EQ(fi_write(ep.get(), src_.get(), 32, desc(), a_.peer, raddr(0), rkey_,
				   &ctx_[5]),
			  0);
		fi_cq_data_entry out[2];
		std::memset(out, 0xee, sizeof(out));
		ASSERT_EQ(fi_cq_sreadfrom(cq.get(), out, 2, &from, nullptr, 5000), 1);
		EXPECT_EQ(from, FI_ADDR_NOTAVAIL);
		EXPECT_EQ(out[0].op_context, &ctx_[5]);
		if (f == FI_CQ_FORMAT_DATA) {
			EXPECT_EQ(out[0].flags, FI_RMA | FI_WRITE);
			EXPECT_EQ(out[0].len, 0u);
			EXPECT_EQ(out[0].buf, nullptr);
			EXPECT_EQ(out[0].data, 0u);
		} else {
			/* fi_cq_entry is one pointer: the rest is untouched. */
			EXPECT_EQ(reinterpret_cast<uint8_t *>(out)[sizeof(fi_cq_entry)], 0xee);
		}
		/* A CQ of 4 entries holds 4; more wait in the device's CQ until read. */
		for (int i = 0; i < 6; i++)
			ASSERT_EQ(fi_write(ep.get(), src_.get(), 32, desc(), a_.peer, raddr(0),
					   rkey_, &ctx_[i]),
				  0);
		int got = 0;
		auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		while (got < 6 && std::chrono::steady_clock::now() < end) {
			ssize_t n = fi_cq_read(cq.get(), out, 2);
			if (n > 0)
				got += static_cast<int>(n);
		}
		EXPECT_EQ(got, 6);
		ep.reset();
	}
}

TEST_F(Rma, EventQueueCarriesNoEventsOfTheProvider)
{
	fi_eq_attr attr{};
	attr.wait_obj = FI_WAIT_UNSPEC;
	Fid<fid_eq> eq;
	ASSERT_EQ(fi_eq_open(fabric_.get(), &attr, eq.out(), nullptr), 0);
	Fid<fid_ep> ep;
	ASSERT_EQ(fi_endpoint(domain_.get(), info_.p(), ep.out(), nullptr), 0);
	ASSERT_EQ(fi_ep_bind(ep.get(), &eq->fid, 0), 0);
	uint32_t event = 0;
	fi_eq_entry entry{};
	EXPECT_EQ(fi_eq_read(eq.get(), &event, &entry, sizeof(entry), 0), -FI_EAGAIN);
	fi_eq_err_entry err{};
	EXPECT_EQ(fi_eq_readerr(eq.get(), &err, 0), -FI_EAGAIN);
	EXPECT_EQ(fi_eq_sread(eq.get(), &event, &entry, sizeof(entry), 10, 0), -FI_EAGAIN);
	EXPECT_EQ(fi_close(&eq->fid), -FI_EBUSY) << "an endpoint is bound to it";
	ep.reset();
}

TEST_F(RmaRawKeys, WriteReadAndAtomicsWorkWithMappedRawKeys)
{
	ASSERT_TRUE(mapped_);
	ASSERT_EQ(info_->domain_attr->mr_key_size, 64u);
	for (size_t i = 0; i < 8192; i++)
		src_.get()[i] = static_cast<char>(i * 3);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 8192, desc(), a_.peer, raddr(100), rkey_,
			   &ctx_[0]),
		  0);
	expect_done(&ctx_[0], FI_RMA | FI_WRITE);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get() + 100, 8192), 0);
	std::memset(src_.get(), 0, 8192);
	ASSERT_EQ(fi_read(a_.ep.get(), src_.get(), 8192, desc(), a_.peer, raddr(100), rkey_,
			  &ctx_[1]),
		  0);
	expect_done(&ctx_[1], FI_RMA | FI_READ);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get() + 100, 8192), 0);
	uint64_t v = 1, add = 2, r = 0;
	std::memcpy(dst_.get() + 16384, &v, 8);
	ASSERT_EQ(fi_fetch_atomic(a_.ep.get(), &add, 1, nullptr, &r, nullptr, a_.peer, raddr(16384),
				  rkey_, FI_UINT64, FI_SUM, &ctx_[2]),
		  0);
	expect_done(&ctx_[2], FI_ATOMIC | FI_READ);
	EXPECT_EQ(r, 1u);
	std::memcpy(&v, dst_.get() + 16384, 8);
	EXPECT_EQ(v, 3u);
}

TEST_F(RmaOffsets, TargetAddressesAreOffsetsIntoTheRegion)
{
	ASSERT_EQ(info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR, 0);
	std::memset(src_.get(), 0x3d, 4096);
	std::memset(dst_.get(), 0, 8192);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get() + 4096, 4096, desc(), a_.peer, raddr(4096),
			   rkey_, &ctx_[0]),
		  0);
	expect_done(&ctx_[0], FI_RMA | FI_WRITE);
	EXPECT_EQ(dst_.get()[4095], 0);
	EXPECT_EQ(std::memcmp(src_.get() + 4096, dst_.get() + 4096, 4096), 0);
	ASSERT_EQ(
		fi_write(a_.ep.get(), src_.get(), 64, desc(), a_.peer, kLen - 32, rkey_, &ctx_[1]),
		0);
	EXPECT_EQ(expect_error(&ctx_[1]).err, FI_EACCES) << "past the region's end";
}

/*
 * RMA into and out of vectored MRs: a target MR of four segments out of address order (joints
 * inside pages and on page boundaries) in the 64 KiB at t, and a local one of two segments in
 * the 64 KiB at l. Writes and reads cross the joints; every byte of t is checked (the segments
 * hold the region's bytes in order, the rest keeps its canary).
 */
void Rma::vectored_rma(char *t, char *l)
{
	constexpr size_t kArea = 64 << 10;
	iovec seg[4] = {{t + 20000, 5000}, {t + 1000, 7000}, {t + 40960, 12288}, {t + 30000, 3}};
	size_t total = 0;
	for (const iovec &v : seg)
		total += v.iov_len;
	/* The region's byte k, where it lives in t. */
	auto at = [&](size_t k) {
		for (const iovec &v : seg) {
			if (k < v.iov_len)
				return static_cast<char *>(v.iov_base) + k;
			k -= v.iov_len;
		}
		return static_cast<char *>(nullptr);
	};
	auto in_seg = [&](const char *p) {
		for (const iovec &v : seg) {
			const char *b = static_cast<const char *>(v.iov_base);
			if (p >= b && p < b + v.iov_len)
				return true;
		}
		return false;
	};
	std::memset(t, 0x3c, kArea);
	Fid<fid_mr> tmr;
	ASSERT_EQ(fi_mr_regv(domain_.get(), seg, 4, kRemote, 0, 0, 0, tmr.out(), nullptr), 0);
	const bool va = info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
	const uint64_t start = va ? uint64_t(uintptr_t(seg[0].iov_base)) : 0;
	const uint64_t key = peer_key(tmr.get(), start);

	/* The whole region in one write. */
	for (size_t i = 0; i < kLen; i++)
		src_.get()[i] = static_cast<char>(i * 7 + 1);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), total, desc(), a_.peer, start, key, &ctx_[0]),
		  0);
	expect_done(&ctx_[0], FI_RMA | FI_WRITE);
	for (size_t k = 0; k < total; k++)
		ASSERT_EQ(*at(k), src_.get()[k]) << "region byte " << k;
	for (size_t i = 0; i < kArea; i++) {
		if (!in_seg(t + i)) {
			ASSERT_EQ(t[i], 0x3c) << "outside the segments, byte " << i;
		}
	}
	/* Part of it, across the joints at 5000 and 12000, from the middle of a segment. */
	for (size_t i = 0; i < 10000; i++)
		src_.get()[100 + i] = static_cast<char>(i * 13 + 3);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get() + 100, 10000, desc(), a_.peer, start + 3000, key,
			   &ctx_[1]),
		  0);
	expect_done(&ctx_[1], FI_RMA | FI_WRITE);
	for (size_t k = 0; k < 10000; k++)
		ASSERT_EQ(*at(3000 + k), src_.get()[100 + k]) << "region byte " << 3000 + k;
	EXPECT_EQ(*at(2999), static_cast<char>(2999 * 7 + 1));
	EXPECT_EQ(*at(13000), static_cast<char>(13000 * 7 + 1));
	/* A read across every joint. */
	for (size_t k = 0; k < total; k++)
		*at(k) = static_cast<char>(k * 5 + 11);
	std::memset(src_.get(), 0, kLen);
	ASSERT_EQ(fi_read(a_.ep.get(), src_.get() + 1, total - 4000, desc(), a_.peer, start + 4000,
			  key, &ctx_[2]),
		  0);
	expect_done(&ctx_[2], FI_RMA | FI_READ);
	for (size_t k = 0; k < total - 4000; k++)
		ASSERT_EQ(src_.get()[1 + k], static_cast<char>((4000 + k) * 5 + 11)) << k;
	EXPECT_EQ(src_.get()[0], 0);
	EXPECT_EQ(src_.get()[1 + total - 4000], 0);

	/* A local vectored MR: its descriptor covers each segment by virtual address. */
	iovec lseg[2] = {{l + 8192, 3000}, {l + 100, 5000}};
	Fid<fid_mr> lmr;
	ASSERT_EQ(fi_mr_regv(domain_.get(), lseg, 2, kLocal, 0, 0, 0, lmr.out(), nullptr), 0);
	void *ld = fi_mr_desc(lmr.get());
	ASSERT_NE(ld, nullptr);
	for (size_t i = 0; i < 5000; i++)
		l[100 + i] = static_cast<char>(i * 11 + 7);
	std::memset(dst_.get(), 0, 8192);
	ASSERT_EQ(fi_write(a_.ep.get(), l + 1100, 4000, ld, a_.peer, raddr(64), rkey_, &ctx_[3]),
		  0);
	expect_done(&ctx_[3], FI_RMA | FI_WRITE);
	EXPECT_EQ(std::memcmp(dst_.get() + 64, l + 1100, 4000), 0);
	EXPECT_EQ(dst_.get()[63], 0);
	EXPECT_EQ(dst_.get()[4064], 0);
	for (size_t i = 0; i < 2500; i++)
		dst_.get()[i] = static_cast<char>(i * 17 + 9);
	std::memset(l + 8192, 0x11, 3000);
	ASSERT_EQ(
		fi_read(a_.ep.get(), l + 8192 + 500, 2500, ld, a_.peer, raddr(0), rkey_, &ctx_[4]),
		0);
	expect_done(&ctx_[4], FI_RMA | FI_READ);
	EXPECT_EQ(std::memcmp(l + 8192 + 500, dst_.get(), 2500), 0);
	EXPECT_EQ(l[8192 + 499], 0x11);
	/* Buffers the descriptor does not cover: refused in the call, nothing posted. */
	EXPECT_EQ(fi_write(a_.ep.get(), l + 4000, 2000, ld, a_.peer, raddr(0), rkey_, &ctx_[5]),
		  -FI_EACCES)
		<< "past the end of a segment";
	EXPECT_EQ(fi_read(a_.ep.get(), l + 50, 10, ld, a_.peer, raddr(0), rkey_, &ctx_[5]),
		  -FI_EACCES)
		<< "before every segment";
	EXPECT_EQ(fi_read(a_.ep.get(), l + 8192 + 2999, 2, ld, a_.peer, raddr(0), rkey_, &ctx_[5]),
		  -FI_EACCES)
		<< "across the end of the last segment";
	fi_cq_msg_entry none{};
	EXPECT_EQ(fi_cq_read(a_.cq.get(), &none, 1), -FI_EAGAIN);

	/* Past the region's end: an error entry, the target untouched, then the pair recovers. */
	std::vector<char> snap(t, t + kArea);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 16, desc(), a_.peer, start + total - 8, key,
			   &ctx_[6]),
		  0);
	fi_cq_err_entry err = expect_error(&ctx_[6]);
	EXPECT_EQ(err.err, FI_EACCES);
	EXPECT_EQ(err.prov_errno, 0x13);
	EXPECT_EQ(std::memcmp(snap.data(), t, kArea), 0) << "the target is untouched";
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 8, desc(), a_.peer, start + total - 8, key,
			   &ctx_[7]),
		  0);
	expect_done(&ctx_[7], FI_RMA | FI_WRITE);
	for (size_t k = 0; k < 8; k++)
		EXPECT_EQ(*at(total - 8 + k), src_.get()[k]);
}

TEST_F(Rma, VectoredMrsOfPlainMemoryCarryDataAcrossJoints)
{
	Buf t(64 << 10), l(64 << 10);
	vectored_rma(t.get(), l.get());
}

TEST_F(Rma, VectoredMrsOfAPoolCarryDataAcrossJoints)
{
	vectored_rma_in_pool(0, 1 << 20);
}

TEST_F(RmaRawKeys, VectoredMrsCarryDataWithMappedRawKeys)
{
	Buf t(64 << 10), l(64 << 10);
	vectored_rma(t.get(), l.get());
}

TEST_F(RmaOffsets, VectoredMrsAreAddressedByOffsetFromZero)
{
	Buf t(64 << 10), l(64 << 10);
	vectored_rma(t.get(), l.get());
}

TEST_F(RmaOffsets, VectoredPoolMrsAreAddressedByOffsetFromZero)
{
	vectored_rma_in_pool(4096 + 8, (1 << 20) + 3);
}

/*
 * A device whose atomics work on big-endian words only (emu atomic_endian=big, a ConnectX
 * without supported_atomic_req_8B_endianness_mode_1): fi_atomic(3)'s host-order semantics
 * cannot be given, so the provider offers no atomics at all, and says why.
 */
class AtomicsOnBigEndianDevice : public FabricFixture {
protected:
	void SetUp() override
	{
		open(kAppMrMode);
		if (HasFatalFailure())
			return;
		ASSERT_EQ(info_->caps & FI_RMA, FI_RMA);
		open_ep(domain_.get(), info_.p(), &a_);
		open_ep(domain_.get(), info_.p(), &b_);
		connect(&a_, &b_);
		connect(&b_, &a_);
		ASSERT_EQ(fi_mr_reg(domain_.get(), dst_.get(), kLen, kRemote, 0, 0, 0, rmr_.out(),
				    nullptr),
			  0);
		ASSERT_EQ(fi_mr_reg(domain_.get(), src_.get(), kLen, kLocal, 0, 0, 0, lmr_.out(),
				    nullptr),
			  0);
		rkey_ = fi_mr_key(rmr_.get());
	}
	void TearDown() override
	{
		lmr_.reset();
		rmr_.reset();
		a_.close();
		b_.close();
		FabricFixture::TearDown();
	}
	DeviceSpecScope scope_{"emu:mkeys=1024,atomic_endian=big"};
	Ep a_, b_;
	Buf src_{kLen}, dst_{kLen};
	Fid<fid_mr> lmr_, rmr_;
	uint64_t rkey_ = 0;
};

TEST_F(AtomicsOnBigEndianDevice, GetinfoLeavesAtomicsOut)
{
	EXPECT_EQ(info_->caps & FI_ATOMIC, 0u);
	EXPECT_EQ(info_->tx_attr->caps & FI_ATOMIC, 0u);
	EXPECT_EQ(info_->rx_attr->caps & FI_ATOMIC, 0u);
	EXPECT_EQ(info_->caps, FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
				       FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_MULTI_RECV);
	Hints h(kAppMrMode);
	h->caps = FI_RMA | FI_ATOMIC;
	Info info;
	EXPECT_EQ(info.get(h), -FI_ENODATA) << "an application that needs atomics finds none";
	nicmr_device_attr attr{};
	ASSERT_EQ(pool_ops(domain_.get())->device_query(domain_.get(), &attr), 0);
	EXPECT_EQ(attr.atomic_mode, uint32_t{NICMR_ATOMIC_BIG_ENDIAN});
}

TEST_F(AtomicsOnBigEndianDevice, EveryAtomicCallIsRefusedAndTheTargetStays)
{
	fi_atomic_attr attr{};
	EXPECT_EQ(fi_query_atomic(domain_.get(), FI_UINT64, FI_SUM, &attr, 0), -FI_EOPNOTSUPP);
	EXPECT_EQ(fi_query_atomic(domain_.get(), FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC),
		  -FI_EOPNOTSUPP);
	EXPECT_EQ(fi_query_atomic(domain_.get(), FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC),
		  -FI_EOPNOTSUPP);
	size_t count = 9;
	EXPECT_EQ(fi_atomicvalid(a_.ep.get(), FI_UINT64, FI_SUM, &count), -FI_EOPNOTSUPP);
	EXPECT_EQ(count, 0u);
	count = 9;
	EXPECT_EQ(fi_fetch_atomicvalid(a_.ep.get(), FI_UINT64, FI_SUM, &count), -FI_EOPNOTSUPP);
	EXPECT_EQ(count, 0u);
	count = 9;
	EXPECT_EQ(fi_compare_atomicvalid(a_.ep.get(), FI_UINT64, FI_CSWAP, &count), -FI_EOPNOTSUPP);
	EXPECT_EQ(count, 0u);

	uint64_t v = 40;
	std::memcpy(dst_.get() + 64, &v, 8);
	uint64_t two = 2, compare = 40, result = 5;
	const uint64_t at = reinterpret_cast<uintptr_t>(dst_.get()) + 64;
	EXPECT_EQ(fi_atomic(a_.ep.get(), &two, 1, nullptr, a_.peer, at, rkey_, FI_UINT64, FI_SUM,
			    nullptr),
		  -FI_EOPNOTSUPP);
	EXPECT_EQ(fi_inject_atomic(a_.ep.get(), &two, 1, a_.peer, at, rkey_, FI_UINT64, FI_SUM),
		  -FI_EOPNOTSUPP);
	EXPECT_EQ(fi_fetch_atomic(a_.ep.get(), &two, 1, nullptr, &result, nullptr, a_.peer, at,
				  rkey_, FI_UINT64, FI_SUM, nullptr),
		  -FI_EOPNOTSUPP);
	EXPECT_EQ(fi_compare_atomic(a_.ep.get(), &two, 1, nullptr, &compare, nullptr, &result,
				    nullptr, a_.peer, at, rkey_, FI_UINT64, FI_CSWAP, nullptr),
		  -FI_EOPNOTSUPP);
	fi_cq_msg_entry e{};
	EXPECT_EQ(fi_cq_read(a_.cq.get(), &e, 1), -FI_EAGAIN) << "nothing was posted";
	std::memcpy(&v, dst_.get() + 64, 8);
	EXPECT_EQ(v, 40u);
	EXPECT_EQ(result, 5u);

	/* RMA works as ever. */
	std::memset(src_.get(), 0x3c, 64);
	ASSERT_EQ(fi_write(a_.ep.get(), src_.get(), 64, fi_mr_desc(lmr_.get()), a_.peer,
			   reinterpret_cast<uintptr_t>(dst_.get()) + 128, rkey_, nullptr),
		  0);
	ASSERT_EQ(next(a_.cq.get(), &e), 1);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get() + 128, 64), 0);
}

TEST_F(AtomicsOnBigEndianDevice, EndpointAskingForAtomicsIsRefused)
{
	info_->caps |= FI_ATOMIC;
	Fid<fid_ep> ep;
	EXPECT_EQ(fi_endpoint(domain_.get(), info_.p(), ep.out(), nullptr), -FI_EOPNOTSUPP);
	EXPECT_EQ(ep.get(), nullptr);
}

TEST(AtomicsDeviceSpec, UnknownAtomicEndianValueOffersNothing)
{
	DeviceSpecScope dev("emu:mkeys=1024,atomic_endian=little");
	Hints h(kAppMrMode);
	Info info;
	EXPECT_EQ(info.get(h), -FI_ENODATA);
}

} // namespace
} // namespace nicmr::test
