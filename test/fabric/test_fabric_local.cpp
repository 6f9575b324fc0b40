/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Endpoints of a domain whose application does not offer FI_MR_LOCAL (fi_mr(3)): RMA requests
 * come without descriptors and the provider registers their local buffers itself, through the
 * domain's registration cache. Data is checked byte for byte through the installed libfabric;
 * the cache must reuse a registration, never serve a buffer freed and mapped again at the same
 * address with its old pages, and leave nothing behind a failed request.
 */
#include <sys/mman.h>

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kLen = 64 << 10;
constexpr int kNoLocal = kAppMrMode & ~FI_MR_LOCAL;

/* Sets an environment variable for the life of the object (the cache reads it when the
 * domain's first endpoint opens). */
class EnvScope {
public:
	EnvScope(const char *name, const char *value) : name_(name)
	{
		if (const char *old = std::getenv(name)) {
			had_ = true;
			old_ = old;
		}
		if (value)
			setenv(name, value, 1);
	}
	~EnvScope()
	{
		if (had_)
			setenv(name_, old_.c_str(), 1);
		else
			unsetenv(name_);
	}
	EnvScope(const EnvScope &) = delete;
	EnvScope &operator=(const EnvScope &) = delete;

private:
	const char *name_;
	bool had_ = false;
	std::string old_;
};

class NoMrLocal : public FabricFixture {
protected:
	/* The cache's environment for this fixture (nullptr: as the process has it). */
	virtual const char *monitor() const { return nullptr; }
	void SetUp() override
	{
		if (monitor())
			env_.emplace("FI_MR_CACHE_MONITOR", monitor());
		open(kNoLocal);
		if (HasFatalFailure())
			return;
		ASSERT_EQ(info_->domain_attr->mr_mode & FI_MR_LOCAL, 0);
		ASSERT_EQ(info_->caps & FI_RMA, FI_RMA) << "endpoints without FI_MR_LOCAL";
		open_ep(domain_.get(), info_.p(), &a_);
		open_ep(domain_.get(), info_.p(), &b_);
		connect(&a_, &b_);
		ASSERT_NE(dst_.get(), nullptr);
		ASSERT_EQ(fi_mr_reg(domain_.get(), dst_.get(), kLen,
				    FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, rmr_.out(), nullptr),
			  0);
		rkey_ = fi_mr_key(rmr_.get());
		before_ = stats(domain_.get());
	}
	void TearDown() override
	{
		rmr_.reset();
		a_.close();
		b_.close();
		/* The domain closes with its cached registrations (the cache goes first). */
		if (domain_.get()) {
			EXPECT_EQ(fi_close(&domain_->fid), 0);
			*domain_.out() = nullptr;
		}
		FabricFixture::TearDown();
	}
	uint64_t raddr(size_t off) const { return uint64_t(uintptr_t(dst_.get() + off)); }
	/* Posts a write of [src, src + len) to dst_ + off and waits for its completion. */
	void write(const char *src, size_t len, size_t off)
	{
		ASSERT_EQ(
			fi_write(a_.ep.get(), src, len, nullptr, a_.peer, raddr(off), rkey_, &ctx_),
			0);
		done(FI_RMA | FI_WRITE);
	}
	void done(uint64_t flags)
	{
		fi_cq_msg_entry e{};
		ASSERT_EQ(next(a_.cq.get(), &e), 1);
		EXPECT_EQ(e.op_context, &ctx_);
		EXPECT_EQ(e.flags, flags);
	}
	static void fill(char *p, size_t len, unsigned seed)
	{
		for (size_t i = 0; i < len; i++)
			p[i] = static_cast<char>(i * 131 + seed);
	}

	nicmr_device_stats before_{};
	std::optional<EnvScope> env_;
	Ep a_, b_;
	Buf dst_{kLen};
	Fid<fid_mr> rmr_;
	uint64_t rkey_ = 0;
	int ctx_ = 0;
};

TEST_F(NoMrLocal, WritesAndReadsWithoutDescriptorsMoveEveryByte)
{
	Buf src(kLen);
	ASSERT_NE(src.get(), nullptr);
	fill(src.get(), kLen, 7);
	write(src.get(), kLen, 0);
	EXPECT_EQ(std::memcmp(src.get(), dst_.get(), kLen), 0);

	/* A small write goes inline, with no registration. */
	const char small[] = "inline, no descriptor";
	write(small, sizeof(small), 100);
	EXPECT_EQ(std::memcmp(dst_.get() + 100, small, sizeof(small)), 0);

	Buf back(kLen);
	ASSERT_NE(back.get(), nullptr);
	std::memset(back.get(), 0, kLen);
	ASSERT_EQ(fi_read(a_.ep.get(), back.get() + 1, 8192, nullptr, a_.peer, raddr(4096), rkey_,
			  &ctx_),
		  0);
	done(FI_RMA | FI_READ);
	EXPECT_EQ(std::memcmp(back.get() + 1, dst_.get() + 4096, 8192), 0);
	EXPECT_EQ(back.get()[0], 0);
	EXPECT_EQ(back.get()[8193], 0);
	EXPECT_EQ(fi_cntr_read(a_.wc.get()), 2u);
	EXPECT_EQ(fi_cntr_read(a_.rc.get()), 1u);
}

/* Atomics carry their operands in the request and land a fetched value in the endpoint's own
 * registered scratch: there is nothing of the caller's to register, so without FI_MR_LOCAL
 * they take no descriptors and register nothing (the endpoint once asked its cache for a null
 * buffer of 8 bytes: -FI_EFAULT, which Open MPI's OFI BTL met on its first compare-and-swap). */
TEST_F(NoMrLocal, AtomicsWithoutDescriptorsRegisterNothing)
{
	ASSERT_EQ(info_->caps & FI_ATOMIC, FI_ATOMIC);
	uint64_t word = 40;
	std::memcpy(dst_.get() + 256, &word, 8);
	const uint64_t add = 2;
	ASSERT_EQ(fi_atomic(a_.ep.get(), &add, 1, nullptr, a_.peer, raddr(256), rkey_, FI_UINT64,
			    FI_SUM, &ctx_),
		  0);
	done(FI_ATOMIC | FI_WRITE);
	std::memcpy(&word, dst_.get() + 256, 8);
	EXPECT_EQ(word, 42u);
	uint64_t result = 0;
	ASSERT_EQ(fi_fetch_atomic(a_.ep.get(), &add, 1, nullptr, &result, nullptr, a_.peer,
				  raddr(256), rkey_, FI_UINT64, FI_SUM, &ctx_),
		  0);
	done(FI_ATOMIC | FI_READ);
	EXPECT_EQ(result, 42u);
	const uint64_t compare = 44, swap = 7;
	ASSERT_EQ(fi_compare_atomic(a_.ep.get(), &swap, 1, nullptr, &compare, nullptr, &result,
				    nullptr, a_.peer, raddr(256), rkey_, FI_UINT64, FI_CSWAP,
				    &ctx_),
		  0);
	done(FI_ATOMIC | FI_READ);
	EXPECT_EQ(result, 44u);
	std::memcpy(&word, dst_.get() + 256, 8);
	EXPECT_EQ(word, 7u);
	const nicmr_device_stats after = stats(domain_.get());
	EXPECT_EQ(after.mrs, before_.mrs);
	EXPECT_EQ(after.slow_mappings, before_.slow_mappings);
}

TEST_F(NoMrLocal, ABufferUsedAgainReusesItsRegistration)
{
	Buf src(kLen);
	ASSERT_NE(src.get(), nullptr);
	fill(src.get(), kLen, 1);
	write(src.get(), kLen, 0);
	const nicmr_device_stats first = stats(domain_.get());
	for (unsigned i = 0; i < 10; i++) {
		fill(src.get(), kLen, i);
		write(src.get() + i, kLen - 16, 0);
		ASSERT_EQ(std::memcmp(src.get() + i, dst_.get(), kLen - 16), 0) << i;
	}
	const nicmr_device_stats after = stats(domain_.get());
	if (first.mrs == before_.mrs + 1) {
		/* Cached (a monitor runs): the one registration served all ten. */
		EXPECT_EQ(after.mrs, first.mrs);
		EXPECT_EQ(after.slow_mappings, first.slow_mappings);
	} else {
		/* No monitor on this kernel: every request registered and let go. */
		EXPECT_EQ(first.mrs, before_.mrs);
		EXPECT_EQ(after.mrs, before_.mrs);
	}
}

TEST_F(NoMrLocal, ABufferFreedAndMappedAgainIsNeverServedItsOldPages)
{
	void *p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(p, MAP_FAILED);
	char *buf = static_cast<char *>(p);
	fill(buf, kLen, 3);
	write(buf, kLen, 0);
	ASSERT_EQ(std::memcmp(buf, dst_.get(), kLen), 0);
	const bool cached = stats(domain_.get()).mrs == before_.mrs + 1;
	/* Freed, then the same addresses mapped again with new pages and new data. */
	ASSERT_EQ(munmap(buf, kLen), 0);
	if (cached) {
		/* The unmap monitor's worker deregisters the entry (its own thread: 5 s at most).
		 */
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		while (stats(domain_.get()).mrs != before_.mrs &&
		       std::chrono::steady_clock::now() < end)
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		EXPECT_EQ(stats(domain_.get()).mrs, before_.mrs)
			<< "the freed buffer's entry stayed";
	}
	void *q = mmap(buf, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		       -1, 0);
	ASSERT_EQ(q, p);
	fill(buf, kLen, 200);
	write(buf, kLen, 0);
	EXPECT_EQ(std::memcmp(buf, dst_.get(), kLen), 0) << "the old pages were written";
	EXPECT_EQ(munmap(buf, kLen), 0);
}

TEST_F(NoMrLocal, ABufferThatIsNotMappedFailsWithEfaultAndLeavesNothing)
{
	/* One page unmapped between two mapped ones: a hole too small for an allocator's own
	 * mappings (AddressSanitizer's maps into a larger freed range at once). */
	auto *g = static_cast<char *>(mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE,
					   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	ASSERT_NE(g, MAP_FAILED);
	void *p = g + 4096;
	ASSERT_EQ(munmap(p, 4096), 0);
	const nicmr_device_stats pre = stats(domain_.get());
	EXPECT_EQ(fi_write(a_.ep.get(), p, 4096, nullptr, a_.peer, raddr(0), rkey_, &ctx_),
		  -FI_EFAULT);
	EXPECT_EQ(fi_read(a_.ep.get(), p, 4096, nullptr, a_.peer, raddr(0), rkey_, &ctx_),
		  -FI_EFAULT);
	munmap(g, 3 * 4096);
	/* A read lands in its buffer: a read-only one is refused the same way. */
	Buf ro(4096);
	ASSERT_NE(ro.get(), nullptr);
	ASSERT_EQ(mprotect(ro.get(), 4096, PROT_READ), 0);
	EXPECT_EQ(fi_read(a_.ep.get(), ro.get(), 4096, nullptr, a_.peer, raddr(0), rkey_, &ctx_),
		  -FI_EFAULT);
	const nicmr_device_stats post = stats(domain_.get());
	EXPECT_EQ(post.mrs, pre.mrs);
	EXPECT_EQ(post.slow_mappings, pre.slow_mappings);
	EXPECT_EQ(post.pinned_pages, pre.pinned_pages);
	fi_cq_msg_entry e{};
	EXPECT_EQ(fi_cq_read(a_.cq.get(), &e, 1), -FI_EAGAIN) << "nothing was posted";
	/* The endpoint goes on. */
	Buf src(4096);
	ASSERT_NE(src.get(), nullptr);
	fill(src.get(), 4096, 9);
	write(src.get(), 4096, 0);
	EXPECT_EQ(std::memcmp(src.get(), dst_.get(), 4096), 0);
}

/* FI_MR_CACHE_MONITOR=disabled: nothing is cached, every request registers its buffer and lets
 * it go when it completes. */
class NoMrLocalUncached : public NoMrLocal {
protected:
	const char *monitor() const override { return "disabled"; }
};

TEST_F(NoMrLocalUncached, EveryRequestRegistersAndReleasesItsBuffer)
{
	Buf src(kLen);
	ASSERT_NE(src.get(), nullptr);
	for (unsigned i = 0; i < 3; i++) {
		fill(src.get(), kLen, i);
		write(src.get(), kLen, 0);
		ASSERT_EQ(std::memcmp(src.get(), dst_.get(), kLen), 0);
		const nicmr_device_stats s = stats(domain_.get());
		EXPECT_EQ(s.mrs, before_.mrs) << "the request's registration went with it";
		EXPECT_EQ(s.pinned_pages, before_.pinned_pages);
	}
}

} // namespace
} // namespace nicmr::test
