/* SPDX-License-Identifier: BSD-3-Clause */
#include <algorithm>
#include <cerrno>
#include <new>
#include <utility>

#include "mlx5_mkey_access.h"
#include "mlx5_mkey_programmer.h"
#include "mr_plan.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

namespace {

/* The page size the free mkeys are created with. */
constexpr uint8_t kFreeMkeyLogPage = 12;

/*
 * The bind's page IOVAs at the free mkeys' own page size, for a device whose UMRs cannot change
 * it (umr_modify_entity_size_disabled; Linux mr.c, mlx5r_umr_can_load_pas, then registers by
 * command instead: nicmr's mkeys are pre-created, so it splits the pages). An explicit list of
 * 2^lp pages is split into 4 KiB pages, from the one holding start to the one holding the last
 * byte. Hot path: writes into the caller's storage only. 0; plan_bind_mtt's errors; -EINVAL (the
 * list is shorter than the region).
 */
int plan_fixed_page(const mr::BindParams &p, uint64_t *out, uint64_t cap, uint64_t *count)
{
	if (p.log_page_size == kFreeMkeyLogPage || p.mtt == nullptr) {
		mr::BindParams q = p;
		q.log_page_size = kFreeMkeyLogPage;
		return mr::plan_bind_mtt(q, out, cap, count);
	}
	if (p.len == 0 || p.log_page_size < mr::kMinLogPage || p.log_page_size > mr::kMaxLogPage)
		return -EINVAL;
	const uint64_t big = uint64_t{1} << p.log_page_size;
	const uint64_t small = uint64_t{1} << kFreeMkeyLogPage;
	const uint64_t n = mr::mtt_pages(p.start, p.len, kFreeMkeyLogPage);
	if (n > cap)
		return -E2BIG;
	/* Offset of start's small page in the first list page. */
	const uint64_t first = (p.start & (big - 1)) & ~(small - 1);
	for (uint64_t k = 0; k < n; k++) {
		const uint64_t off = first + k * small;
		const uint64_t i = off >> p.log_page_size;
		if (i >= p.mtt_count)
			return -EINVAL;
		out[k] = p.mtt[i] + (off & (big - 1));
	}
	*count = n;
	return 0;
}

} // namespace

Mlx5MkeyProgrammer::Mlx5MkeyProgrammer(Device &dev, uint32_t pd, const MkeyProgrammerOptions &o)
    : dev_(dev), pd_(pd), opts_(o)
{
	for (uint32_t &l : lane_by_slot_)
		l = kNoLane;
}

int Mlx5MkeyProgrammer::create(Device &dev, uint32_t pd, const MkeyProgrammerOptions &o,
			       std::unique_ptr<Mlx5MkeyProgrammer> *out)
{
	if (o.max_translations == 0 || o.lanes == 0 || o.lanes > kMaxLanes)
		return -EINVAL;
	std::unique_ptr<Mlx5MkeyProgrammer> p(new (std::nothrow) Mlx5MkeyProgrammer(dev, pd, o));
	if (!p)
		return -ENOMEM;
	try {
		p->held_ = std::vector<std::atomic<bool>>(o.lanes);
		p->lanes_.resize(o.lanes);
		for (Lane &l : p->lanes_) {
			l.pages.resize(o.max_translations);
			l.scratch.resize(o.max_translations);
		}
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	/* Lane 0 takes a UAR; the other lanes ring through it (one UAR whatever the lane count,
	 * so the lanes do not eat into the UARs the application's queues need). */
	int rc = UmrQueue::create(dev, pd, o.umr, &p->lanes_[0].umr);
	UmrOptions shared = o.umr;
	shared.uar = rc == 0 ? &p->lanes_[0].umr->uar() : nullptr;
	for (size_t i = 1; i < p->lanes_.size() && rc == 0; i++)
		rc = UmrQueue::create(dev, pd, shared, &p->lanes_[i].umr);
	if (rc != 0) {
		/* Queues ringing lane 0's UAR go before lane 0. */
		for (size_t i = p->lanes_.size(); i-- > 0;)
			p->lanes_[i].umr.reset();
		return rc;
	}
	*out = std::move(p);
	return 0;
}

Mlx5MkeyProgrammer::~Mlx5MkeyProgrammer()
{
	/* No thread hands a lane back from here on: they all stop using it (the contract). */
	unwatch_thread_exits(this);
	mkeys_.clear();
	/* Lanes ringing lane 0's UAR go before lane 0. */
	for (size_t i = lanes_.size(); i-- > 0;)
		lanes_[i].umr.reset();
}

size_t Mlx5MkeyProgrammer::mkey_count() const
{
	std::lock_guard<std::mutex> lk(mu_);
	return mkeys_.size();
}

uint32_t Mlx5MkeyProgrammer::lanes_claimed() const noexcept
{
	uint32_t n = 0;
	for (size_t i = 1; i < held_.size(); i++)
		n += held_[i].load(std::memory_order_relaxed) ? 1 : 0;
	return n;
}

uint32_t Mlx5MkeyProgrammer::lane_of_this_thread() noexcept
{
	/* Hot path: this thread's slot and the lane recorded there; no lock, no atomic. */
	const SlotClaim c = thread_claim();
	if (!c.own())
		return 0; /* threads on the shared slot: the shared lane */
	uint32_t &mine = lane_by_slot_[c.slot()];
	if (mine != kNoLane) [[likely]]
		return mine;

	/* Slow path, once per thread and programmer: the thread's exit must hand back what it
	 * records here (else the shared lane, and ask again next time), then a free exclusive
	 * lane or, when none is, the shared one. */
	if (watch_thread_exit(this) != 0)
		return 0;
	uint32_t lane = 0;
	for (uint32_t i = 1; i < held_.size(); i++) {
		bool expected = false;
		/* Acquire: pairs with the release of the lane's previous holder, whose UMRs on
		 * the lane's QP and CQ then happen before ours. */
		if (held_[i].compare_exchange_strong(expected, true, std::memory_order_acquire,
						     std::memory_order_relaxed)) {
			lane = i;
			break;
		}
	}
	mine = lane;
	return lane;
}

void Mlx5MkeyProgrammer::slot_exit(size_t slot) noexcept
{
	/* On the exiting thread, the one that recorded the lane. */
	uint32_t &lane = lane_by_slot_[slot];
	if (lane != kNoLane && lane != 0)
		/* Release: this thread's last UMR on the lane (its WQE stores and CQE reads)
		 * happens before the next holder's first, which claims the lane with an
		 * acquire. */
		held_[lane].store(false, std::memory_order_release);
	lane = kNoLane;
}

/*
 * The pool's free mkeys, as the Linux kernel's mkey cache makes them (drivers/infiniband/hw/
 * mlx5/mr.c, add_keys/set_cache_mkc: free = 1, umr_en = 1, MTT, a translation size fixed at
 * creation, the variant set by the driver at CREATE_MKEY): the device chooses the index, as
 * the kernel lets it (input_mkey_index 0), and the engine's key is that index with a variant
 * the engine's UMRs set (the kernel's umr.c enables an mkey with MLX5_MKEY_MASK_KEY | FREE,
 * get_umr_enable_mr_mask: the key's low byte is the UMR's to change). The PRM has no bulk
 * CREATE_MKEY: the kernel posts one command per mkey (asynchronously); this driver sends them
 * back to back on the engine's slow path.
 */
MkeyCreate Mlx5MkeyProgrammer::free_mkey() const
{
	MkeyCreate c;
	c.ctx.access_mode = prm::access_mode::mtt;
	c.ctx.free = true;
	c.ctx.umr_en = true;
	c.ctx.lr = true;
	c.ctx.pd = pd_;
	c.ctx.log_page_size = kFreeMkeyLogPage;
	c.ctx.translations_octword_size =
		static_cast<uint32_t>(prm::mtt_octwords(opts_.max_translations));
	return c;
}

int Mlx5MkeyProgrammer::create_free_mkeys(uint32_t count, uint32_t *indices)
{
	return create_many(free_mkey(), count, indices); /* index 0: the device chooses */
}

int Mlx5MkeyProgrammer::create_many(const MkeyCreate &c, uint32_t count, uint32_t *indices)
{
	if (count == 0 || indices == nullptr)
		return -EINVAL;
	std::lock_guard<std::mutex> lk(mu_);
	size_t before = mkeys_.size();
	try {
		mkeys_.reserve(before + count);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	int rc = 0;
	for (uint32_t i = 0; i < count; i++) {
		MkeyHandle h;
		rc = MkeyHandle::create(dev_, c, &h);
		if (rc != 0)
			break;
		indices[i] = h.index();
		mkeys_.push_back(std::move(h));
	}
	if (rc != 0) {
		NICMR_LOG(warn, "mlx5", "%s: CREATE_MKEY %zu of %u failed: %d",
			  dev_.function().name().c_str(), mkeys_.size() - before + 1, count, rc);
		mkeys_.resize(before); /* destroys this call's mkeys */
	}
	return rc;
}

uint64_t Mlx5MkeyProgrammer::odp_max_pages() const noexcept
{
	const Caps &c = dev_.caps();
	if (!c.odp)
		return 0;
	uint64_t most = uint64_t{1} << std::min<uint32_t>(c.log_max_klm_list_size, 40);
	/* The largest even count whose last octword a 16-bit offset still reaches. */
	if (!c.umr_extended_translation_offset)
		most = std::min<uint64_t>(most, uint64_t{0x10000} * 2);
	return most;
}

/*
 * The on-demand mkeys of the engine's cache: the pool's free mkey (above), plus pg_access at
 * CREATE_MKEY and a translation size of pages entries that no command writes, so every entry
 * lacks rd_en and wr_en (not present: Linux odp.c, MLX5_IB_MTT_PRESENT). Linux's cache makes
 * its ODP entries the same way, with their size fixed at creation (mr.c, set_cache_mkc).
 */
int Mlx5MkeyProgrammer::create_odp_mkeys(uint64_t pages, uint32_t count, uint32_t *indices)
{
	if (!dev_.caps().odp)
		return -EOPNOTSUPP;
	if (pages == 0 || pages % 2 != 0 || pages > odp_max_pages())
		return -EINVAL;
	MkeyCreate c = free_mkey();
	c.ctx.log_page_size = 12;
	c.ctx.translations_octword_size = static_cast<uint32_t>(pages / 2);
	c.pg_access = true;
	return create_many(c, count, indices);
}

bool Mlx5MkeyProgrammer::chosen_indices() const noexcept
{
	return dev_.caps().mkey_by_index;
}

int Mlx5MkeyProgrammer::create_free_mkey_at(uint32_t index)
{
	if (!dev_.caps().mkey_by_index)
		return -EOPNOTSUPP;
	if (index == 0 || index >= (uint32_t{1} << 24))
		return -EINVAL;
	std::lock_guard<std::mutex> lk(mu_);
	try {
		mkeys_.reserve(mkeys_.size() + 1);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	MkeyCreate c = free_mkey();
	c.index = index;
	MkeyHandle h;
	int rc = MkeyHandle::create(dev_, c, &h);
	if (rc == 0) {
		mkeys_.push_back(std::move(h));
		return 0;
	}
	/* BAD_RES_STATE (-EINVAL) when the index holds an mkey already (one the driver made
	 * for something else, a memory window say): the key is in use, as the engine says of
	 * its own live keys. */
	MkeyQuery q;
	if (rc == -EINVAL && dev_.query_mkey(index, 0, &q) == 0)
		return -EEXIST;
	return rc;
}

/* Hot path on an exclusive lane: no lock, no allocation (the scratch list has room for
 * max_translations), no system call. The shared lane adds its mutex. */
template <class F> int Mlx5MkeyProgrammer::on_my_lane(F &&f)
{
	const uint32_t lane = lane_of_this_thread();
	if (lane != 0)
		return f(lanes_[lane]);
	std::lock_guard<std::mutex> lk(shared_mu_);
	return f(lanes_[0]);
}

int Mlx5MkeyProgrammer::bind(uint32_t mkey, const mr::BindParams &p)
{
	return on_my_lane([&](Lane &l) { return bind_on(l, mkey, p, false); });
}

/* The refresh of slow-path memory: not a hot path, but the caller's lane as bind. */
int Mlx5MkeyProgrammer::modify(uint32_t mkey, const mr::BindParams &p)
{
	return on_my_lane([&](Lane &l) { return bind_on(l, mkey, p, true); });
}

int Mlx5MkeyProgrammer::bind_on(Lane &l, uint32_t mkey, const mr::BindParams &p, bool modify)
{
	/* lib/mr's planner gives the page IOVAs (into the lane's storage: no allocation); the
	 * driver makes them MTT entries. */
	uint64_t n = 0;
	const bool fixed_page = dev_.caps().umr_modify_entity_size_disabled;
	int rc = fixed_page ? plan_fixed_page(p, l.pages.data(), l.pages.size(), &n)
			    : mr::plan_bind_mtt(p, l.pages.data(), l.pages.size(), &n);
	if (rc != 0)
		return rc;
	UmrBind b;
	b.mkey = mkey;
	set_mkey_access(b, p.access);
	b.pd = p.pd;
	b.start = p.start;
	b.len = p.len;
	b.log_page_size = fixed_page ? kFreeMkeyLogPage : p.log_page_size;
	for (uint64_t i = 0; i < n; i++)
		l.scratch[i] = MttEntry{l.pages[i], true, true};
	b.mtt = std::span<const MttEntry>(l.scratch.data(), n);
	return modify ? l.umr->modify(b) : l.umr->bind(b);
}

/* An on-demand region's bind: the context only (no translations: the entries stay not
 * present), so the UMR is the same size whatever the region's. Hot path on an exclusive
 * lane, as bind. */
int Mlx5MkeyProgrammer::bind_odp(uint32_t mkey, const mr::OdpParams &p)
{
	UmrBind b;
	b.mkey = mkey;
	set_mkey_access(b, p.access);
	b.pd = p.pd;
	b.start = p.start;
	b.len = p.len;
	b.log_page_size = 12;
	return on_my_lane([&](Lane &l) { return l.umr->bind(b); });
}

/* Hot path on an exclusive lane, as bind. */
int Mlx5MkeyProgrammer::revoke(uint32_t mkey)
{
	return on_my_lane([&](Lane &l) { return l.umr->revoke(mkey); });
}

} // namespace nicmr::mlx5
