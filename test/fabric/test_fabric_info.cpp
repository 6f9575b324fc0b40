/* SPDX-License-Identifier: BSD-3-Clause */
/* fi_getinfo, fi_fabric, fi_domain on nicmr, and the mr_mode sweep. */
#include <sys/uio.h>

#include <bit>
#include <cstdlib>
#include <string>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

TEST(FabricInfo, GetinfoFindsNicmrFabricAndDomain)
{
	Hints h(kAppMrMode);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	ASSERT_NE(info.p(), nullptr);
	EXPECT_EQ(info->next, nullptr) << "one domain per device";
	EXPECT_STREQ(info->fabric_attr->prov_name, "nicmr");
	EXPECT_STREQ(info->fabric_attr->name, "nicmr");
	EXPECT_STREQ(info->domain_attr->name, "emu0");
	EXPECT_EQ(info->caps, FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ |
				      FI_REMOTE_WRITE | FI_MSG | FI_TAGGED | FI_SEND | FI_RECV |
				      FI_MULTI_RECV)
		<< "RDM endpoints: the application offers FI_MR_LOCAL";
	EXPECT_EQ(info->mode, 0u);
	EXPECT_EQ(info->ep_attr->type, FI_EP_RDM);
	EXPECT_EQ(info->domain_attr->threading, FI_THREAD_SAFE);
	EXPECT_EQ(info->domain_attr->mr_mode,
		  FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
	EXPECT_EQ(info->domain_attr->mr_key_size, 4u);
	EXPECT_EQ(info->domain_attr->mr_iov_limit, NICMR_MAX_IOV) << "fi_mr_regv's segments";
	const char *spec = std::getenv("FI_NICMR_DEVICE");
	ASSERT_NE(spec, nullptr) << "the test environment names the device";
	std::string s(spec);
	size_t at = s.find("mkeys=");
	ASSERT_NE(at, std::string::npos);
	/* Every index but 0, less the on-demand mkey cache's reserve (doc/odp.md, "Indices"):
	 * 16 in each of its 7 smallest buckets and 64 more. */
	EXPECT_EQ(info->domain_attr->mr_cnt, std::stoul(s.substr(at + 6)) - 1 - 176);
}

TEST(FabricInfo, NullHintsListNicmrWithItsDefaults)
{
	fi_info *all = nullptr;
	ASSERT_EQ(fi_getinfo(kApi, nullptr, nullptr, 0, nullptr, &all), 0);
	int found = 0;
	for (fi_info *i = all; i; i = i->next) {
		if (std::strcmp(i->fabric_attr->prov_name, "nicmr") != 0)
			continue;
		++found;
		EXPECT_EQ(i->domain_attr->mr_mode,
			  FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
	}
	fi_freeinfo(all);
	EXPECT_EQ(found, 1);
}

TEST(FabricInfo, MessagesAreOfferedWithTheirAttributes)
{
	for (uint64_t caps :
	     {FI_MSG, FI_TAGGED, FI_MSG | FI_TAGGED, FI_RMA | FI_SEND, FI_MSG | FI_MULTI_RECV}) {
		for (int mode : {kAppMrMode, kAppMrMode & ~FI_MR_LOCAL}) {
			Hints h(mode);
			h->caps = caps;
			Info info;
			ASSERT_EQ(info.get(h), 0) << std::hex << caps;
			EXPECT_EQ(info->caps & caps, caps);
			EXPECT_EQ(info->tx_attr->caps & (FI_MSG | FI_TAGGED | FI_SEND),
				  FI_MSG | FI_TAGGED | FI_SEND);
			EXPECT_EQ(info->rx_attr->caps &
					  (FI_MSG | FI_TAGGED | FI_RECV | FI_MULTI_RECV),
				  FI_MSG | FI_TAGGED | FI_RECV | FI_MULTI_RECV);
			EXPECT_EQ(info->tx_attr->inject_size, 972u) << "the inline WRITE's payload";
			EXPECT_EQ(info->tx_attr->size, 64u);
			EXPECT_EQ(info->rx_attr->size, 256u);
			EXPECT_EQ(info->rx_attr->total_buffered_recv, size_t{512} * 8192);
			EXPECT_EQ(info->ep_attr->mem_tag_format, ~uint64_t{0});
			EXPECT_NE(info->tx_attr->msg_order & FI_ORDER_SAS, 0u);
		}
	}
	/* Receives by source and the source of receives: given when asked for (in caps or
	 * rx_attr->caps), and only then. */
	for (uint64_t caps : {FI_DIRECTED_RECV, FI_SOURCE, FI_MSG | FI_DIRECTED_RECV,
			      FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE}) {
		for (bool rx : {false, true}) {
			Hints h(kAppMrMode);
			(rx ? h->rx_attr->caps : h->caps) = caps;
			Info info;
			ASSERT_EQ(info.get(h), 0) << std::hex << caps;
			const uint64_t src = caps & (FI_DIRECTED_RECV | FI_SOURCE);
			EXPECT_EQ(info->caps & (FI_DIRECTED_RECV | FI_SOURCE), src)
				<< std::hex << caps;
			EXPECT_EQ(info->rx_attr->caps & (FI_DIRECTED_RECV | FI_SOURCE), src);
			EXPECT_EQ(info->tx_attr->caps & (FI_DIRECTED_RECV | FI_SOURCE), 0u);
		}
	}
	Hints plain(kAppMrMode);
	plain->caps = FI_MSG | FI_TAGGED;
	Info info;
	ASSERT_EQ(info.get(plain), 0);
	EXPECT_EQ(info->caps & (FI_DIRECTED_RECV | FI_SOURCE), 0u) << "not asked for";
}

TEST(FabricInfo, RmaIsWithOrWithoutMrLocal)
{
	for (uint64_t caps : {FI_RMA, FI_ATOMIC}) {
		/* Without FI_MR_LOCAL the provider registers local buffers itself. */
		Hints h(kAppMrMode & ~FI_MR_LOCAL);
		h->caps = caps;
		Info info;
		ASSERT_EQ(info.get(h), 0) << std::hex << caps;
		EXPECT_EQ(info->domain_attr->mr_mode & FI_MR_LOCAL, 0);
		Hints with(kAppMrMode);
		with->caps = caps;
		Info yes;
		ASSERT_EQ(yes.get(with), 0) << std::hex << caps;
		EXPECT_EQ(yes->domain_attr->mr_mode & FI_MR_LOCAL, FI_MR_LOCAL);
		EXPECT_EQ(info->caps, yes->caps);
	}
}

TEST(FabricInfo, OtherEndpointTypesAndDomainNamesGiveNoData)
{
	{
		Hints h(kAppMrMode);
		h->ep_attr->type = FI_EP_MSG;
		Info info;
		EXPECT_EQ(info.get(h), -FI_ENODATA);
	}
	{
		Hints h(kAppMrMode);
		h->domain_attr->name = strdup("emu7");
		Info info;
		EXPECT_EQ(info.get(h), -FI_ENODATA);
	}
	{
		Hints h(kAppMrMode);
		h->domain_attr->mr_iov_limit = NICMR_MAX_IOV + 1;
		Info info;
		EXPECT_EQ(info.get(h), -FI_ENODATA);
	}
	{
		Hints h(kAppMrMode);
		h->domain_attr->mr_iov_limit = NICMR_MAX_IOV;
		Info info;
		ASSERT_EQ(info.get(h), 0) << "the limit itself is offered";
		EXPECT_EQ(info->domain_attr->mr_iov_limit, NICMR_MAX_IOV);
	}
}

TEST(FabricInfo, RawKeysMakeTheKeySize64)
{
	Hints h(kAppMrMode | FI_MR_RAW);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	EXPECT_TRUE(info->domain_attr->mr_mode & FI_MR_RAW);
	EXPECT_EQ(info->domain_attr->mr_key_size, 64u);

	Hints small(kAppMrMode | FI_MR_RAW);
	small->domain_attr->mr_key_size = 8;
	Info none;
	EXPECT_EQ(none.get(small), -FI_ENODATA) << "a 64-byte key does not fit in 8";
}

TEST(FabricInfo, SerialisingThreadingModelsAreKeptOthersGetThreadSafe)
{
	const struct {
		enum fi_threading asked, got;
	} cases[] = {
		{FI_THREAD_UNSPEC, FI_THREAD_SAFE},   {FI_THREAD_SAFE, FI_THREAD_SAFE},
		{FI_THREAD_FID, FI_THREAD_SAFE},      {FI_THREAD_ENDPOINT, FI_THREAD_SAFE},
		{FI_THREAD_DOMAIN, FI_THREAD_DOMAIN}, {FI_THREAD_COMPLETION, FI_THREAD_COMPLETION},
	};
	for (const auto &c : cases) {
		Hints h(kAppMrMode);
		h->domain_attr->threading = c.asked;
		Info info;
		ASSERT_EQ(info.get(h), 0) << c.asked;
		EXPECT_EQ(info->domain_attr->threading, c.got) << c.asked;
	}
}

TEST(FabricInfo, LegacyBasicModeIsHonouredScalableIsNot)
{
	Hints basic(FI_MR_BASIC);
	Info info;
	ASSERT_EQ(info.get(basic), 0);
	EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
	Hints scalable(FI_MR_SCALABLE);
	Info none;
	EXPECT_EQ(none.get(scalable), -FI_ENODATA);
}

TEST(FabricInfo, DomainRefusesInfoItCannotHonour)
{
	Hints h(kAppMrMode);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	Fid<fid_fabric> fabric;
	ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
	info->domain_attr->mr_mode &= ~FI_MR_ALLOCATED;
	Fid<fid_domain> dom;
	EXPECT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), -FI_EINVAL);
	info->domain_attr->mr_mode |= FI_MR_ALLOCATED | FI_MR_SCALABLE;
	EXPECT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), -FI_EINVAL);
	info->domain_attr->mr_mode &= ~FI_MR_SCALABLE;
	free(info->domain_attr->name);
	info->domain_attr->name = strdup("emu1");
	EXPECT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), -FI_EINVAL);
	EXPECT_EQ(dom.get(), nullptr);
	EXPECT_EQ(fi_domain(fabric.get(), nullptr, dom.out(), nullptr), -FI_EINVAL);
}

TEST(FabricInfo, ProgressIsAutoUnlessTheHintsAskForManual)
{
	for (fi_progress asked : {FI_PROGRESS_UNSPEC, FI_PROGRESS_AUTO, FI_PROGRESS_MANUAL}) {
		Hints h(kAppMrMode);
		h->domain_attr->control_progress = asked;
		h->domain_attr->data_progress = asked;
		Info info;
		ASSERT_EQ(info.get(h), 0) << asked;
		const fi_progress want =
			asked == FI_PROGRESS_MANUAL ? FI_PROGRESS_MANUAL : FI_PROGRESS_AUTO;
		EXPECT_EQ(info->domain_attr->control_progress, want) << asked;
		EXPECT_EQ(info->domain_attr->data_progress, want) << asked;
	}
}

TEST(FabricInfo, OrderIsOneQpsAndHintsAskingMoreGiveNoData)
{
	constexpr uint64_t kKept = FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_WAW | FI_ORDER_RMA_RAR |
				   FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAW | FI_ORDER_ATOMIC_RAR |
				   FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW | FI_ORDER_SAS;
	{
		Hints h(kAppMrMode);
		h->tx_attr->msg_order = FI_ORDER_RAW | FI_ORDER_WAW;
		h->rx_attr->msg_order = FI_ORDER_RMA_RAW;
		Info info;
		ASSERT_EQ(info.get(h), 0);
		EXPECT_EQ(info->tx_attr->msg_order, kKept);
		EXPECT_EQ(info->rx_attr->msg_order, kKept);
		EXPECT_EQ(info->tx_attr->comp_order, FI_ORDER_NONE);
		EXPECT_EQ(info->rx_attr->comp_order, FI_ORDER_NONE);
	}
	/* A write after a read, sends after RMA, completions in order across peers. */
	for (uint64_t order :
	     std::initializer_list<uint64_t>{FI_ORDER_WAR, FI_ORDER_SAW, FI_ORDER_RMA_WAR,
					     FI_ORDER_ATOMIC_WAR, FI_ORDER_STRICT}) {
		Hints h(kAppMrMode);
		h->tx_attr->msg_order = order;
		Info info;
		EXPECT_EQ(info.get(h), -FI_ENODATA) << std::hex << order;
		Hints r(kAppMrMode);
		r->rx_attr->msg_order = order;
		Info rinfo;
		EXPECT_EQ(rinfo.get(r), -FI_ENODATA) << std::hex << order;
	}
	Hints h(kAppMrMode);
	h->tx_attr->comp_order = FI_ORDER_STRICT;
	Info info;
	EXPECT_EQ(info.get(h), -FI_ENODATA);
	Hints r(kAppMrMode);
	r->rx_attr->comp_order = FI_ORDER_STRICT;
	Info rinfo;
	EXPECT_EQ(rinfo.get(r), -FI_ENODATA);
}

TEST(FabricInfo, PollSetsAreNotOffered)
{
	Hints h(kAppMrMode);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	Fid<fid_fabric> fabric;
	ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
	Fid<fid_domain> dom;
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
	fi_poll_attr poll_attr{};
	fid_poll *poll = nullptr;
	EXPECT_EQ(fi_poll_open(dom.get(), &poll_attr, &poll), -FI_ENOSYS);
	void *ops = nullptr;
	EXPECT_EQ(fi_open_ops(&dom->fid, "no_such_ops", 0, &ops, nullptr), -FI_ENOSYS);
}

TEST(FabricInfo, FabricWithLiveDomainIsBusy)
{
	Hints h(kAppMrMode);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	Fid<fid_fabric> fabric;
	ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
	Fid<fid_domain> dom;
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
	EXPECT_EQ(fi_close(&fabric->fid), -FI_EBUSY);
	dom.reset();
}

/*
 * Every subset of the mr_mode bits nicmr knows: either fi_getinfo says -FI_ENODATA (the
 * application does not allow FI_MR_ALLOCATED, which nicmr needs), or the answer is a subset
 * of what was offered, exactly the offered bits nicmr acts on, and registration (one range and
 * vectored) works under it with the key rules it implies. The test's device (emu, ext= not
 * given) has the device-model extensions, so FI_MR_RMA_EVENT is one of the bits nicmr acts on:
 * kept when offered, with the FI_RMA_EVENT capability and registration flag
 * (test_fabric_event.cpp sweeps a device without it).
 */
/* by_name: the device has mkey_by_name and takes requested keys; else (a stock device) every
 * combination without FI_MR_PROV_KEY is refused as one without FI_MR_ALLOCATED is. */
void sweep_mr_modes(bool by_name)
{
	constexpr unsigned kBits = sizeof(kKnownBits) / sizeof(kKnownBits[0]);
	constexpr int kActs = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_RAW | FI_MR_VIRT_ADDR |
			      FI_MR_LOCAL | FI_MR_RMA_EVENT;
	Fid<fid_fabric> fabric;
	Buf buf(2 * 4096);
	ASSERT_NE(buf.get(), nullptr);
	nicmr_device_stats before{};
	bool have_before = false;
	for (unsigned combo = 0; combo < (1u << kBits); combo++) {
		int offered = 0;
		for (unsigned b = 0; b < kBits; b++)
			if (combo & (1u << b))
				offered |= kKnownBits[b];
		SCOPED_TRACE(testing::Message() << "mr_mode 0x" << std::hex << offered);
		Hints h(offered);
		Info info;
		int ret = info.get(h);
		if (!(offered & FI_MR_ALLOCATED) || (!by_name && !(offered & FI_MR_PROV_KEY))) {
			EXPECT_EQ(ret, -FI_ENODATA);
			continue;
		}
		ASSERT_EQ(ret, 0);
		const int got = info->domain_attr->mr_mode;
		EXPECT_EQ(got & ~offered, 0) << "only bits the application allows";
		EXPECT_EQ(got, offered & kActs);
		EXPECT_EQ(info->domain_attr->mr_key_size, (got & FI_MR_RAW) ? 64u : 4u);
		/* RMA events are a capability of endpoints in a domain with FI_MR_RMA_EVENT. */
		const bool events = (got & FI_MR_RMA_EVENT) != 0;
		EXPECT_EQ((info->caps & FI_RMA_EVENT) != 0, events);
		EXPECT_EQ((info->rx_attr->caps & FI_RMA_EVENT) != 0, events);

		if (!fabric.get()) {
			ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
		}
		Fid<fid_domain> dom;
		ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
		if (!have_before) {
			before = stats(dom.get());
			have_before = true;
		}
		/* Requested keys: index combo + 1 (variant 0), distinct for every combination. */
		const uint64_t want = uint64_t(combo + 1) << 8;
		Fid<fid_mr> mr;
		ASSERT_EQ(fi_mr_reg(dom.get(), buf.get(), buf.len(), FI_REMOTE_READ | FI_READ, 0,
				    want, 0, mr.out(), nullptr),
			  0);
		uint64_t key = fi_mr_key(mr.get());
		if (got & FI_MR_RAW) {
			EXPECT_EQ(key, FI_KEY_NOTAVAIL);
			uint64_t base = 1;
			raw_round_trip(dom.get(), mr.get(), &key, &base);
			EXPECT_EQ(base,
				  (got & FI_MR_VIRT_ADDR) ? uint64_t(uintptr_t(buf.get())) : 0u);
		}
		EXPECT_NE(key, 0u);
		if (!(got & FI_MR_PROV_KEY)) {
			EXPECT_EQ(key, want) << "the requested key is the key";
		}
		/* A vectored MR under the same mode: two page-aligned segments out of order (one
		 * MTT key, no inner keys), its address space from the first one's address or 0. */
		EXPECT_EQ(info->domain_attr->mr_iov_limit, NICMR_MAX_IOV);
		const uint64_t want_v = uint64_t(combo + 1 + (1u << kBits)) << 8;
		iovec iov[2] = {{buf.get() + 4096, 4096}, {buf.get(), 4096}};
		Fid<fid_mr> vmr;
		ASSERT_EQ(fi_mr_regv(dom.get(), iov, 2, FI_REMOTE_READ | FI_READ, 0, want_v, 0,
				     vmr.out(), nullptr),
			  0);
		uint64_t vkey = fi_mr_key(vmr.get());
		if (got & FI_MR_RAW) {
			EXPECT_EQ(vkey, FI_KEY_NOTAVAIL);
			uint64_t base = 1;
			raw_round_trip(dom.get(), vmr.get(), &vkey, &base);
			EXPECT_EQ(base, (got & FI_MR_VIRT_ADDR)
						? uint64_t(uintptr_t(buf.get() + 4096))
						: 0u);
		}
		EXPECT_NE(vkey, key);
		if (!(got & FI_MR_PROV_KEY)) {
			EXPECT_EQ(vkey, want_v) << "the requested key is the vectored MR's key";
		}
		/* FI_RMA_EVENT registers (disabled until fi_mr_enable) exactly when the domain
		 * has FI_MR_RMA_EVENT; else it is a flag the domain does not take. */
		const uint64_t want_e = uint64_t(combo + 1 + (2u << kBits)) << 8;
		Fid<fid_mr> emr;
		ASSERT_EQ(fi_mr_reg(dom.get(), buf.get(), 4096, FI_REMOTE_WRITE, 0, want_e,
				    FI_RMA_EVENT, emr.out(), nullptr),
			  (got & FI_MR_RMA_EVENT) ? 0 : -FI_EBADFLAGS);
		if (emr.get()) {
			EXPECT_EQ(fi_mr_enable(emr.get()), 0);
		}
		emr.reset();
		vmr.reset();
		mr.reset();
		dom.reset();
	}
	if (have_before) {
		/* The last domain is gone; a fresh one sees what the sweep left behind. */
		Hints h(kAppMrMode);
		Info info;
		ASSERT_EQ(info.get(h), 0);
		Fid<fid_domain> dom;
		ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
		nicmr_device_stats after = stats(dom.get());
		EXPECT_EQ(after.mrs, before.mrs);
		EXPECT_EQ(after.pds, before.pds);
		EXPECT_EQ(after.slow_mappings, before.slow_mappings);
		EXPECT_EQ(after.pinned_pages, before.pinned_pages);
	}
}

TEST(FabricMrMode, EveryCombinationIsHonouredOrRefused)
{
	sweep_mr_modes(false);
}

TEST(FabricMrMode, EveryCombinationIsHonouredOrRefusedWithMkeyByName)
{
	DeviceSpecScope scope(kByNameSpec);
	sweep_mr_modes(true);
}

/* fi_mr(3): FI_MR_PROV_KEY "indicates that the provider does not support application
 * requested MR keys". On a device that chooses every mkey index (a stock ConnectX, the
 * environment's emu) it is required: hints without it find no nicmr, and an info edited to
 * leave it out opens no domain. On a device with mkey_by_name it is optional. */
TEST(FabricMrMode, ProvKeyIsRequiredUnlessTheDeviceTakesChosenIndices)
{
	{
		Hints h(FI_MR_ALLOCATED | FI_MR_VIRT_ADDR);
		Info info;
		EXPECT_EQ(info.get(h), -FI_ENODATA);
		Hints ok(FI_MR_ALLOCATED | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY);
		ASSERT_EQ(info.get(ok), 0);
		EXPECT_EQ(info->domain_attr->mr_mode,
			  FI_MR_ALLOCATED | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY);
		Fid<fid_fabric> fabric;
		ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
		info->domain_attr->mr_mode &= ~FI_MR_PROV_KEY;
		Fid<fid_domain> dom;
		EXPECT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), -FI_EINVAL);
		info->domain_attr->mr_mode |= FI_MR_PROV_KEY;
		ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
		/* With FI_MR_PROV_KEY a requested key is ignored (fi_mr(3)): the device's key. */
		Buf buf(4096);
		Fid<fid_mr> mr;
		ASSERT_EQ(fi_mr_reg(dom.get(), buf.get(), 4096, FI_REMOTE_READ, 0, 0x4200, 0,
				    mr.out(), nullptr),
			  0);
		EXPECT_NE(fi_mr_key(mr.get()), 0u);
	}
	DeviceSpecScope scope(kByNameSpec);
	Hints h(FI_MR_ALLOCATED | FI_MR_VIRT_ADDR);
	Info info;
	ASSERT_EQ(info.get(h), 0);
	EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_ALLOCATED | FI_MR_VIRT_ADDR);
	Fid<fid_fabric> fabric;
	ASSERT_EQ(fi_fabric(info->fabric_attr, fabric.out(), nullptr), 0);
	Fid<fid_domain> dom;
	ASSERT_EQ(fi_domain(fabric.get(), info.p(), dom.out(), nullptr), 0);
	Buf buf(4096);
	Fid<fid_mr> mr;
	ASSERT_EQ(fi_mr_reg(dom.get(), buf.get(), 4096, FI_REMOTE_READ, 0, 0x4200, 0, mr.out(),
			    nullptr),
		  0);
	EXPECT_EQ(fi_mr_key(mr.get()), 0x4200u) << "the requested key is the key";
}

} // namespace
} // namespace nicmr::test
