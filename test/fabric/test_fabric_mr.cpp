/* SPDX-License-Identifier: BSD-3-Clause */
/* Every fi_mr(3) call on a nicmr domain with its documented code, raw keys, the pool ops. */
#include <sys/uio.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

using FabricMr = FabricFixture;

TEST_F(FabricMr, RegGivesKeyAndDescAndCloseReleasesEverything)
{
	Buf buf(3 * 4096);
	ASSERT_NE(buf.get(), nullptr);
	auto before = stats(domain_.get());
	Fid<fid_mr> mr;
	int ctx = 0;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), buf.len(), kRw, 0, 0, 0, mr.out(), &ctx), 0);
	EXPECT_EQ(mr->fid.context, &ctx);
	EXPECT_NE(fi_mr_desc(mr.get()), nullptr);
	EXPECT_NE(fi_mr_key(mr.get()), FI_KEY_NOTAVAIL);
	EXPECT_LE(fi_mr_key(mr.get()), UINT32_MAX) << "mr_key_size is 4";
	EXPECT_EQ(pool_ops(domain_.get())->mr_in_pool(mr.get()), 0) << "application memory";
	auto during = stats(domain_.get());
	EXPECT_EQ(during.mrs, before.mrs + 1);
	EXPECT_EQ(during.slow_mappings, before.slow_mappings + 1);
	mr.reset();
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMr, RegvCountsFromOneToTheIovLimit)
{
	Buf buf(2 * 4096);
	iovec iov[NICMR_MAX_IOV + 1];
	for (auto &v : iov)
		v = {buf.get(), 64};
	auto before = stats(domain_.get());
	fid_mr *bad = nullptr;
	EXPECT_EQ(fi_mr_regv(domain_.get(), iov, 0, kRw, 0, 0, 0, &bad, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_mr_regv(domain_.get(), nullptr, 1, kRw, 0, 0, 0, &bad, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_mr_regv(domain_.get(), nullptr, 2, kRw, 0, 0, 0, &bad, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_mr_regv(domain_.get(), iov, NICMR_MAX_IOV + 1, kRw, 0, 0, 0, &bad, nullptr),
		  -FI_EINVAL)
		<< "above mr_iov_limit";
	EXPECT_EQ(bad, nullptr);
	expect_same(before, stats(domain_.get()));
	Fid<fid_mr> one, two;
	iovec pair[2] = {{buf.get(), 4096}, {buf.get() + 4096, 4096}};
	ASSERT_EQ(fi_mr_regv(domain_.get(), pair, 1, kRw, 0, 0, 0, one.out(), nullptr), 0);
	ASSERT_EQ(fi_mr_regv(domain_.get(), pair, 2, kRw, 0, 0, 0, two.out(), nullptr), 0);
	EXPECT_EQ(stats(domain_.get()).mrs, before.mrs + 2);
}

TEST_F(FabricMr, RegattrCarriesContextAndRefusesWhatItCannotDo)
{
	Buf buf(4096);
	iovec iov = {buf.get(), buf.len()};
	int ctx = 0;
	fi_mr_attr attr{};
	attr.mr_iov = &iov;
	attr.iov_count = 1;
	attr.access = kRw;
	attr.context = &ctx;
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_regattr(domain_.get(), &attr, 0, mr.out()), 0);
	EXPECT_EQ(mr->fid.context, &ctx);

	auto before = stats(domain_.get());
	fid_mr *bad = nullptr;
	EXPECT_EQ(fi_mr_regattr(domain_.get(), nullptr, 0, &bad), -FI_EINVAL);
	fi_mr_attr many = attr;
	many.iov_count = NICMR_MAX_IOV + 1;
	EXPECT_EQ(fi_mr_regattr(domain_.get(), &many, 0, &bad), -FI_EINVAL);
	many.iov_count = 0;
	EXPECT_EQ(fi_mr_regattr(domain_.get(), &many, 0, &bad), -FI_EINVAL);
	fi_mr_attr no_iov = attr;
	no_iov.mr_iov = nullptr;
	EXPECT_EQ(fi_mr_regattr(domain_.get(), &no_iov, 0, &bad), -FI_EINVAL);
	fi_mr_attr cuda = attr;
	cuda.iface = FI_HMEM_CUDA;
	EXPECT_EQ(fi_mr_regattr(domain_.get(), &cuda, 0, &bad), -FI_ENOSYS);
	fi_mr_attr auth = attr;
	uint8_t key[8] = {};
	auth.auth_key = key;
	auth.auth_key_size = sizeof(key);
	EXPECT_EQ(fi_mr_regattr(domain_.get(), &auth, 0, &bad), -FI_EINVAL);
	EXPECT_EQ(fi_mr_regattr(domain_.get(), &attr, FI_RMA_EVENT, &bad), -FI_EBADFLAGS);
	EXPECT_EQ(bad, nullptr);
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMr, BadInputGetsItsCodeAndLeavesNothing)
{
	Buf buf(4096);
	auto before = stats(domain_.get());
	fid_mr *mr = nullptr;
	fid_domain *d = domain_.get();
	EXPECT_EQ(fi_mr_reg(d, nullptr, 4096, kRw, 0, 0, 0, &mr, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_mr_reg(d, buf.get(), 0, kRw, 0, 0, 0, &mr, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_mr_reg(d, buf.get(), 4096, kRw, 0, 0, 0, nullptr, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_mr_reg(d, buf.get(), 4096, kRw, 64, 0, 0, &mr, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_mr_reg(d, buf.get(), 4096, kRw | FI_TAGGED, 0, 0, 0, &mr, nullptr),
		  -FI_EINVAL);
	EXPECT_EQ(fi_mr_reg(d, buf.get(), 4096, kRw, 0, 0, 1ull << 40, &mr, nullptr),
		  -FI_EBADFLAGS);
	EXPECT_EQ(fi_mr_reg(d, buf.get(), 4096, kRw, 0, 0, FI_RMA_EVENT, &mr, nullptr),
		  -FI_EBADFLAGS);
	/* Memory that is not mapped cannot be registered (FI_MR_ALLOCATED). */
	void *hole = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(hole, MAP_FAILED);
	munmap(hole, 4096);
	EXPECT_EQ(fi_mr_reg(d, hole, 4096, kRw, 0, 0, 0, &mr, nullptr), -FI_EFAULT);
	EXPECT_EQ(mr, nullptr);
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricMr, ProviderKeysIgnoreTheRequestedKey)
{
	Buf buf(2 * 4096);
	Fid<fid_mr> a, b;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRw, 0, 0x1200, 0, a.out(), nullptr),
		  0);
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get() + 4096, 4096, kRw, 0, 0x1200, 0, b.out(),
			    nullptr),
		  0);
	EXPECT_NE(fi_mr_key(a.get()), fi_mr_key(b.get()));
}

TEST_F(FabricMr, RawAttrSaysTheSizeItNeedsAndMapsBackToTheKey)
{
	Buf buf(4096);
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRw, 0, 0, 0, mr.out(), nullptr), 0);
	uint64_t base = 0;
	uint8_t raw[128];
	size_t size = 0;
	EXPECT_EQ(fi_mr_raw_attr(mr.get(), &base, raw, &size, 0), -FI_ETOOSMALL);
	EXPECT_EQ(size, 64u);
	size = 63;
	EXPECT_EQ(fi_mr_raw_attr(mr.get(), &base, raw, &size, 0), -FI_ETOOSMALL);
	EXPECT_EQ(size, 64u);
	EXPECT_EQ(fi_mr_raw_attr(mr.get(), &base, raw, nullptr, 0), -FI_EINVAL);
	size = sizeof(raw);
	EXPECT_EQ(fi_mr_raw_attr(mr.get(), &base, nullptr, &size, 0), -FI_EINVAL);
	EXPECT_EQ(fi_mr_raw_attr(mr.get(), &base, raw, &size, 1), -FI_EBADFLAGS);
	ASSERT_EQ(fi_mr_raw_attr(mr.get(), &base, raw, &size, 0), 0);
	EXPECT_EQ(size, 64u);
	EXPECT_EQ(base, uint64_t(uintptr_t(buf.get())));

	uint64_t key = 0;
	ASSERT_EQ(fi_mr_map_raw(domain_.get(), base, raw, size, &key, 0), 0);
	EXPECT_EQ(key, fi_mr_key(mr.get()));
	EXPECT_EQ(fi_mr_unmap_key(domain_.get(), key), 0);
}

TEST_F(FabricMr, MapRawRefusesGarbageAndBadArguments)
{
	Buf buf(4096);
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRw, 0, 0, 0, mr.out(), nullptr), 0);
	uint8_t raw[64];
	size_t size = sizeof(raw);
	uint64_t base = 0;
	ASSERT_EQ(fi_mr_raw_attr(mr.get(), &base, raw, &size, 0), 0);
	uint64_t key = 0;
	fid_domain *d = domain_.get();
	EXPECT_EQ(fi_mr_map_raw(d, base, nullptr, size, &key, 0), -FI_EINVAL);
	EXPECT_EQ(fi_mr_map_raw(d, base, raw, size, nullptr, 0), -FI_EINVAL);
	EXPECT_EQ(fi_mr_map_raw(d, base, raw, size, &key, 1), -FI_EBADFLAGS);
	EXPECT_EQ(fi_mr_map_raw(d, base, raw, size - 1, &key, 0), -FI_EINVAL);
	for (size_t i = 0; i < sizeof(raw); i++) {
		uint8_t bent[64];
		std::memcpy(bent, raw, sizeof(raw));
		bent[i] ^= 0x01;
		EXPECT_EQ(fi_mr_map_raw(d, base, bent, size, &key, 0), -FI_EINVAL) << "byte " << i;
	}
	EXPECT_EQ(fi_mr_unmap_key(d, 0), 0) << "unmap releases nothing: any key is accepted";
}

TEST_F(FabricMr, BindRefreshAndEnable)
{
	Buf buf(4096);
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRw, 0, 0, 0, mr.out(), nullptr), 0);
	EXPECT_EQ(fi_mr_bind(mr.get(), nullptr, 0), -FI_EINVAL);
	EXPECT_EQ(fi_mr_bind(mr.get(), &domain_->fid, 0), -FI_EINVAL) << "a domain never binds";
	/* Counters and endpoints exist, but this domain reports no remote access events (the
	 * application did not offer FI_MR_RMA_EVENT) and every endpoint of the domain may use
	 * the MR unbound (no FI_MR_ENDPOINT): both bindings are -FI_ENOSYS and change nothing.
	 * (test_fabric_event.cpp binds counters in a domain with FI_MR_RMA_EVENT.) */
	EXPECT_EQ(info_->domain_attr->mr_mode & FI_MR_RMA_EVENT, 0);
	Fid<fid_cntr> cntr;
	fi_cntr_attr ca{};
	ca.events = FI_CNTR_EVENTS_COMP;
	ASSERT_EQ(fi_cntr_open(domain_.get(), &ca, cntr.out(), nullptr), 0);
	EXPECT_EQ(fi_mr_bind(mr.get(), &cntr->fid, FI_REMOTE_WRITE), -FI_ENOSYS);
	EXPECT_EQ(fi_mr_bind(mr.get(), &cntr->fid, 0), -FI_ENOSYS);
	Fid<fid_ep> ep;
	ASSERT_EQ(fi_endpoint(domain_.get(), info_.p(), ep.out(), nullptr), 0);
	EXPECT_EQ(fi_mr_bind(mr.get(), &ep->fid, 0), -FI_ENOSYS);
	ep.reset();
	cntr.reset(); /* the MR holds neither: both close (Fid checks fi_close's 0) */
	iovec iov = {buf.get(), 4096};
	EXPECT_EQ(fi_mr_refresh(mr.get(), &iov, 1, 0), 0) << "mapped anew, same key";
	EXPECT_EQ(fi_mr_enable(mr.get()), 0) << "enabled at registration";
	uint8_t raw[64];
	size_t size = sizeof(raw);
	EXPECT_EQ(fi_mr_raw_attr(mr.get(), nullptr, raw, &size, 0), 0) << "still registered";
}

TEST_F(FabricMr, RefreshKeepsTheKeyAndRefusesWhatItCannotDo)
{
	Buf buf(4 * 4096);
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4 * 4096, kRw, 0, 0, 0, mr.out(), nullptr),
		  0);
	const uint64_t key = fi_mr_key(mr.get());
	const auto before = stats(domain_.get());
	ASSERT_EQ(fi_mr_refresh(mr.get(), nullptr, 0, 0), 0) << "the whole region";
	iovec part = {buf.get() + 4096, 100};
	ASSERT_EQ(fi_mr_refresh(mr.get(), &part, 1, 0), 0);
	EXPECT_EQ(fi_mr_key(mr.get()), key);
	expect_same(stats(domain_.get()), before); /* the old mappings went */

	iovec outside = {buf.get() + 4 * 4096 - 10, 20}, empty = {buf.get(), 0};
	EXPECT_EQ(fi_mr_refresh(mr.get(), &part, 1, 1), -FI_EBADFLAGS);
	EXPECT_EQ(fi_mr_refresh(mr.get(), nullptr, 1, 0), -FI_EINVAL);
	EXPECT_EQ(fi_mr_refresh(mr.get(), &empty, 1, 0), -FI_EINVAL);
	EXPECT_EQ(fi_mr_refresh(mr.get(), &outside, 1, 0), -FI_EINVAL) << "outside the region";
	Fid<fid_mr> vec;
	const iovec two[2] = {{buf.get(), 4096}, {buf.get() + 2 * 4096, 4096}};
	ASSERT_EQ(fi_mr_regv(domain_.get(), two, 2, kRw, 0, 0, 0, vec.out(), nullptr), 0);
	EXPECT_EQ(fi_mr_refresh(vec.get(), nullptr, 0, 0), -FI_ENOSYS) << "vectored";
	vec.reset();
	expect_same(stats(domain_.get()), before);
}

TEST_F(FabricMr, DomainWithLiveMrIsBusy)
{
	Buf buf(4096);
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRw, 0, 0, 0, mr.out(), nullptr), 0);
	EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
	mr.reset();
}

/* A closed MR's fid is no MR (its slot in the fabric's MR table is marked closed before the
 * key goes back): the extension's calls on the stale fid say -FI_EINVAL. */
TEST_F(FabricMr, ClosedMrFidIsNoMr)
{
	Buf buf(4096);
	fid_mr *mr = nullptr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRw, 0, 0, 0, &mr, nullptr), 0);
	EXPECT_EQ(pool_ops(domain_.get())->mr_in_pool(mr), 0) << "live: application memory";
	EXPECT_EQ(mr_ops(domain_.get())->mr_is_sub(mr), 0) << "live: not a sub-MR";
	ASSERT_EQ(fi_close(&mr->fid), 0);
	EXPECT_EQ(pool_ops(domain_.get())->mr_in_pool(mr), -FI_EINVAL) << "closed";
	EXPECT_EQ(mr_ops(domain_.get())->mr_is_sub(mr), -FI_EINVAL) << "closed";
}

/* The MR objects are the fabric's (one per key index of its device), the MRs each domain's:
 * two domains of one fabric register at once, and each domain is busy while its own MR lives,
 * not the other's. */
TEST_F(FabricMr, TwoDomainsOfOneFabricEachCountTheirOwnMrs)
{
	Fid<fid_domain> other;
	ASSERT_EQ(fi_domain(fabric_.get(), info_.p(), other.out(), nullptr), 0);
	Buf a(4096), b(4096);
	Fid<fid_mr> ma, mb;
	ASSERT_EQ(fi_mr_reg(domain_.get(), a.get(), 4096, kRw, 0, 0, 0, ma.out(), nullptr), 0);
	ASSERT_EQ(fi_mr_reg(other.get(), b.get(), 4096, kRw, 0, 0, 0, mb.out(), nullptr), 0);
	const uint64_t key_a = fi_mr_key(ma.get());
	EXPECT_NE(key_a, fi_mr_key(mb.get()));
	EXPECT_EQ(fi_close(&other->fid), -FI_EBUSY) << "its MR lives";
	mb.reset();
	EXPECT_EQ(pool_ops(domain_.get())->mr_in_pool(ma.get()), 0) << "still an MR";
	EXPECT_EQ(fi_mr_key(ma.get()), key_a);
	other.reset(); /* closes: its MR is gone, this domain's lives on */
	EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY) << "its MR lives";
	ma.reset();
}

/* fi_close on other threads than fi_mr_reg (a close marks its MR's slot closed from any
 * thread): two threads register in a pool and hand every MR to a third that closes it; every
 * call succeeds and nothing is left behind. */
TEST_F(FabricMr, ClosesOnAnotherThreadThanTheRegistration)
{
	fi_nicmr_pool_ops *ops = pool_ops(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	char *p = nullptr;
	ASSERT_EQ(make_pool(domain_.get(), NICMR_PAGE_2M, FI_NICMR_POOL_FALLBACK, &pool, &p), 0);
	auto before = stats(domain_.get());
	constexpr int kPerThread = 3000;
	std::mutex mu;
	std::deque<fid_mr *> handoff; /* mu */
	std::atomic<int> producers{2}, failures{0};
	auto produce = [&](int t) {
		for (int i = 0; i < kPerThread; i++) {
			/* At most 128 MRs wait to be closed: the device has 1023 keys. */
			for (;;) {
				{
					std::lock_guard<std::mutex> lk(mu);
					if (handoff.size() < 128)
						break;
				}
				std::this_thread::yield();
			}
			fid_mr *mr = nullptr;
			char *buf = p + size_t(t * 256 + i % 256) * 4096;
			if (fi_mr_reg(domain_.get(), buf, 4096, kRw, 0, 0, 0, &mr, nullptr) != 0) {
				failures++;
				continue;
			}
			std::lock_guard<std::mutex> lk(mu);
			handoff.push_back(mr);
		}
		producers--;
	};
	auto consume = [&]() {
		for (;;) {
			fid_mr *mr = nullptr;
			{
				std::lock_guard<std::mutex> lk(mu);
				if (!handoff.empty()) {
					mr = handoff.front();
					handoff.pop_front();
				}
			}
			if (!mr) {
				if (producers.load() == 0) {
					std::lock_guard<std::mutex> lk(mu);
					if (handoff.empty())
						return;
				}
				std::this_thread::yield();
				continue;
			}
			if (fi_close(&mr->fid) != 0)
				failures++;
		}
	};
	std::thread a(produce, 0), b(produce, 1), c(consume);
	a.join();
	b.join();
	c.join();
	EXPECT_EQ(failures.load(), 0);
	expect_same(before, stats(domain_.get()));
	EXPECT_EQ(ops->pool_destroy(pool), 0);
}

/* Application-chosen keys (no FI_MR_PROV_KEY), on a device with mkey_by_name. */
class FabricMrRequested : public FabricFixture {
protected:
	void SetUp() override { open(FI_MR_ALLOCATED | FI_MR_VIRT_ADDR); }
	DeviceSpecScope by_name_{kByNameSpec};
};

TEST_F(FabricMrRequested, RequestedKeyIsTheKeyAndDuplicatesAreRefused)
{
	ASSERT_FALSE(info_->domain_attr->mr_mode & FI_MR_PROV_KEY);
	Buf buf(2 * 4096);
	auto before = stats(domain_.get());
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRw, 0, 0x4200, 0, mr.out(), nullptr),
		  0);
	EXPECT_EQ(fi_mr_key(mr.get()), 0x4200u);
	auto during = stats(domain_.get());
	fid_mr *bad = nullptr;
	EXPECT_EQ(
		fi_mr_reg(domain_.get(), buf.get() + 4096, 4096, kRw, 0, 0x4200, 0, &bad, nullptr),
		-FI_ENOKEY);
	EXPECT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRw, 0, 1ull << 32, 0, &bad, nullptr),
		  -FI_EKEYREJECTED);
	/* The first key past the device's indices (mr_cnt is the pool's cap, below them). */
	nicmr_device_attr at{};
	ASSERT_EQ(pool_ops(domain_.get())->device_query(domain_.get(), &at), 0);
	const uint64_t beyond = uint64_t(at.mkey_count) << 8;
	EXPECT_EQ(fi_mr_reg(domain_.get(), buf.get(), 4096, kRw, 0, beyond, 0, &bad, nullptr),
		  -FI_EKEYREJECTED);
	EXPECT_EQ(bad, nullptr);
	expect_same(during, stats(domain_.get()));
	mr.reset();
	expect_same(before, stats(domain_.get()));
}

/* Raw keys between two domains of one fabric (two PDs of one device). */
TEST(FabricRawKeys, RoundTripBetweenTwoDomains)
{
	const int mode = FI_MR_ALLOCATED | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_RAW;
	Hints h(mode);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	ASSERT_EQ(info->domain_attr->mr_mode, mode);
	Fid<fid_fabric> fabric;
	ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
	Fid<fid_domain> a, b;
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), a.out(), nullptr), 0);
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), b.out(), nullptr), 0);

	Buf buf(2 * 4096);
	Fid<fid_mr> mr_a, mr_b;
	ASSERT_EQ(fi_mr_reg(a.get(), buf.get(), 4096, kRw, 0, 0, 0, mr_a.out(), nullptr), 0);
	ASSERT_EQ(fi_mr_reg(b.get(), buf.get() + 4096, 4096, kRw, 0, 0, 0, mr_b.out(), nullptr), 0);
	EXPECT_EQ(fi_mr_key(mr_a.get()), FI_KEY_NOTAVAIL);
	EXPECT_EQ(fi_mr_key(mr_b.get()), FI_KEY_NOTAVAIL);

	uint8_t raw_a[64], raw_b[64];
	size_t sa = sizeof(raw_a), sb = sizeof(raw_b);
	uint64_t base_a = 0, base_b = 0;
	ASSERT_EQ(fi_mr_raw_attr(mr_a.get(), &base_a, raw_a, &sa, 0), 0);
	ASSERT_EQ(fi_mr_raw_attr(mr_b.get(), &base_b, raw_b, &sb, 0), 0);
	EXPECT_EQ(base_b, base_a + 4096);

	/* Each side maps the other's key; both agree with the owner's own mapping. */
	uint64_t a_in_b = 0, a_in_a = 0, b_in_a = 0, b_in_b = 0;
	ASSERT_EQ(fi_mr_map_raw(b.get(), base_a, raw_a, sa, &a_in_b, 0), 0);
	ASSERT_EQ(fi_mr_map_raw(a.get(), base_a, raw_a, sa, &a_in_a, 0), 0);
	ASSERT_EQ(fi_mr_map_raw(a.get(), base_b, raw_b, sb, &b_in_a, 0), 0);
	ASSERT_EQ(fi_mr_map_raw(b.get(), base_b, raw_b, sb, &b_in_b, 0), 0);
	EXPECT_EQ(a_in_b, a_in_a);
	EXPECT_EQ(b_in_a, b_in_b);
	EXPECT_NE(a_in_a, b_in_b);
	EXPECT_EQ(fi_mr_unmap_key(b.get(), a_in_b), 0);
	EXPECT_EQ(fi_mr_unmap_key(a.get(), b_in_a), 0);

	/* Another fabric is another device: its keys are not keys here. */
	Fid<fid_fabric> other;
	ASSERT_EQ(fi_fabric(info->fabric_attr, other.out(), nullptr), 0);
	Fid<fid_domain> c;
	ASSERT_EQ(fi_domain(other.get(), info.p(), c.out(), nullptr), 0);
	uint64_t key = 0;
	EXPECT_EQ(fi_mr_map_raw(c.get(), base_a, raw_a, sa, &key, 0), -FI_EINVAL);
}

TEST(FabricRawKeys, ZeroBasedRegionsGiveBaseAddressZero)
{
	const int mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_RAW;
	Hints h(mode);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	Fid<fid_fabric> fabric;
	ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
	Fid<fid_domain> dom;
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
	Buf buf(4096);
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(dom.get(), buf.get(), 4096, kRw, 0, 0, 0, mr.out(), nullptr), 0);
	uint8_t raw[64];
	size_t size = sizeof(raw);
	uint64_t base = 1;
	ASSERT_EQ(fi_mr_raw_attr(mr.get(), &base, raw, &size, 0), 0);
	EXPECT_EQ(base, 0u);
	fid_mr *bad = nullptr;
	EXPECT_EQ(fi_mr_reg(dom.get(), buf.get() + 8, 64, kRw, 0, 0, 0, &bad, nullptr), -FI_EINVAL)
		<< "an offset-based region starts on a 4 KiB boundary";
}

/* The ops extension: pools give registrations the fast path. */
using FabricPoolOps = FabricFixture;

TEST_F(FabricPoolOps, CreatedPoolRegistersOnTheFastPath)
{
	fi_nicmr_pool_ops *ops = pool_ops(domain_.get());
	ASSERT_NE(ops, nullptr);
	EXPECT_EQ(ops->size, sizeof(fi_nicmr_pool_ops));
	auto before = stats(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	char *base = nullptr;
	ASSERT_EQ(make_pool(domain_.get(), NICMR_PAGE_2M, FI_NICMR_POOL_FALLBACK, &pool, &base), 0);
	ASSERT_NE(base, nullptr);
	EXPECT_GE(ops->pool_len(pool), NICMR_PAGE_2M);
	{
		Fid<fid_mr> mr;
		ASSERT_EQ(fi_mr_reg(domain_.get(), base + 4096, 8192, kRw, 0, 0, 0, mr.out(),
				    nullptr),
			  0);
		EXPECT_EQ(ops->mr_in_pool(mr.get()), 1);
		EXPECT_EQ(stats(domain_.get()).slow_mappings, before.slow_mappings);
		EXPECT_EQ(ops->pool_destroy(pool), -FI_EBUSY);
		EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
	}
	EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY) << "the pool still lives";
	EXPECT_EQ(ops->pool_destroy(pool), 0);
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricPoolOps, ImportedMemoryRegistersOnTheFastPath)
{
	fi_nicmr_pool_ops *ops = pool_ops(domain_.get());
	Buf mem(16 * 4096);
	ASSERT_NE(mem.get(), nullptr);
	auto before = stats(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	ASSERT_EQ(ops->pool_import(domain_.get(), mem.get(), mem.len(), NICMR_PAGE_4K, &pool), 0);
	EXPECT_EQ(ops->pool_addr(pool), mem.get());
	{
		Fid<fid_mr> mr;
		ASSERT_EQ(fi_mr_reg(domain_.get(), mem.get(), mem.len(), kRw, 0, 0, 0, mr.out(),
				    nullptr),
			  0);
		EXPECT_EQ(ops->mr_in_pool(mr.get()), 1);
	}
	EXPECT_EQ(ops->pool_destroy(pool), 0);
	expect_same(before, stats(domain_.get()));
}

TEST_F(FabricPoolOps, BadArgumentsGetTheirCodes)
{
	fi_nicmr_pool_ops *ops = pool_ops(domain_.get());
	auto before = stats(domain_.get());
	fi_nicmr_pool *pool = nullptr;
	EXPECT_EQ(ops->pool_create(nullptr, NICMR_PAGE_2M, NICMR_PAGE_2M, NICMR_NUMA_ANY, 0, &pool),
		  -FI_EINVAL);
	EXPECT_EQ(ops->pool_create(domain_.get(), NICMR_PAGE_2M, NICMR_PAGE_2M, NICMR_NUMA_ANY, 0,
				   nullptr),
		  -FI_EINVAL);
	EXPECT_EQ(ops->pool_create(domain_.get(), NICMR_PAGE_2M, NICMR_PAGE_2M, NICMR_NUMA_ANY,
				   1ull << 5, &pool),
		  -FI_EBADFLAGS);
	EXPECT_EQ(ops->pool_create(domain_.get(), 0, NICMR_PAGE_2M, NICMR_NUMA_ANY, 0, &pool),
		  -FI_EINVAL);
	EXPECT_EQ(ops->pool_create(domain_.get(), 4096, 12345, NICMR_NUMA_ANY, 0, &pool),
		  -FI_EINVAL);
	Buf mem(2 * 4096);
	EXPECT_EQ(ops->pool_import(domain_.get(), mem.get() + 8, 4096, NICMR_PAGE_4K, &pool),
		  -FI_EINVAL);
	EXPECT_EQ(ops->pool_import(domain_.get(), mem.get(), 0, NICMR_PAGE_4K, &pool), -FI_EINVAL);
	EXPECT_EQ(ops->pool_destroy(nullptr), -FI_EINVAL);
	EXPECT_EQ(ops->mr_in_pool(nullptr), -FI_EINVAL);
	EXPECT_EQ(ops->device_stats(domain_.get(), nullptr), -FI_EINVAL);
	EXPECT_EQ(ops->pool_addr(nullptr), nullptr);
	EXPECT_EQ(ops->pool_len(nullptr), 0u);
	EXPECT_EQ(pool, nullptr);
	void *none = nullptr;
	EXPECT_EQ(fi_open_ops(&domain_->fid, FI_NICMR_POOL_OPS, 1, &none, nullptr), -FI_EBADFLAGS);
	expect_same(before, stats(domain_.get()));
}

} // namespace
} // namespace nicmr::test
