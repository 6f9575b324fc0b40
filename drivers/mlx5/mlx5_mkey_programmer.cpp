/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <new>

#include "mlx5_mkey_programmer.h"
#include "mr_access.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

int Mlx5MkeyProgrammer::create(Device &dev, uint32_t pd, const MkeyProgrammerOptions &o,
			       std::unique_ptr<Mlx5MkeyProgrammer> *out)
{
	if (o.max_translations == 0)
		return -EINVAL;
	std::unique_ptr<Mlx5MkeyProgrammer> p(new (std::nothrow) Mlx5MkeyProgrammer(dev, pd, o));
	if (!p)
		return -ENOMEM;
	try {
		p->scratch_.reserve(o.max_translations);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	int rc = UmrQueue::create(dev, pd, o.umr, &p->umr_);
	if (rc != 0)
		return rc;
	*out = std::move(p);
	return 0;
}

Mlx5MkeyProgrammer::~Mlx5MkeyProgrammer()
{
	mkeys_.clear();
}

size_t Mlx5MkeyProgrammer::mkey_count() const
{
	std::lock_guard<std::mutex> lk(mu_);
	return mkeys_.size();
}

int Mlx5MkeyProgrammer::create_free_mkeys(uint32_t first, uint32_t count)
{
	if (first == 0 || uint64_t{first} + count > (uint64_t{1} << 24))
		return -EINVAL;
	std::lock_guard<std::mutex> lk(mu_);
	size_t before = mkeys_.size();
	try {
		mkeys_.reserve(before + count);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	MkeyCreate c;
	c.ctx.access_mode = prm::access_mode::mtt;
	c.ctx.free = true;
	c.ctx.umr_en = true;
	c.ctx.lr = true;
	c.ctx.pd = pd_;
	c.ctx.log_page_size = 12;
	c.ctx.translations_octword_size =
		static_cast<uint32_t>(prm::mtt_octwords(opts_.max_translations));
	bool by_index = dev_.caps().mkey_by_index;
	int rc = 0;
	for (uint32_t i = 0; i < count; i++) {
		c.index = by_index ? first + i : 0;
		MkeyHandle h;
		rc = MkeyHandle::create(dev_, c, &h);
		if (rc != 0)
			break;
		if (h.index() != first + i) {
			NICMR_LOG(error, "mlx5",
				  "%s: device chose mkey index 0x%x, the engine needs 0x%x",
				  dev_.function().name().c_str(), h.index(), first + i);
			rc = -EOPNOTSUPP;
			break;
		}
		mkeys_.push_back(std::move(h));
	}
	if (rc != 0)
		mkeys_.resize(before); /* destroys this call's mkeys */
	return rc;
}

int Mlx5MkeyProgrammer::bind(uint32_t mkey, const mr::BindParams &p)
{
	if (p.len == 0 || p.log_page_size < 12 || p.log_page_size > 30)
		return -EINVAL;
	const uint64_t page = uint64_t{1} << p.log_page_size;
	UmrBind b;
	b.mkey = mkey;
	b.lr = (p.access & mr::kAccessLocalRead) != 0;
	b.lw = (p.access & mr::kAccessLocalWrite) != 0;
	b.rr = (p.access & mr::kAccessRemoteRead) != 0;
	b.rw = (p.access & mr::kAccessRemoteWrite) != 0;
	b.a = (p.access & mr::kAccessRemoteAtomic) != 0;
	b.pd = p.pd;
	b.start = p.start;
	b.len = p.len;
	b.log_page_size = p.log_page_size;

	std::lock_guard<std::mutex> lk(mu_);
	scratch_.clear();
	if (p.mtt != nullptr) {
		if (p.mtt_count > opts_.max_translations)
			return -E2BIG;
		for (uint32_t i = 0; i < p.mtt_count; i++)
			scratch_.push_back(MttEntry{p.mtt[i], true, true});
	} else {
		/* The first entry is the page holding start; the IOVA keeps start's page offset. */
		if (((p.iova_base ^ p.start) & (page - 1)) != 0)
			return -EINVAL;
		uint64_t first = p.start & ~(page - 1);
		uint64_t last = (p.start + p.len - 1) & ~(page - 1);
		uint64_t pages = ((last - first) >> p.log_page_size) + 1;
		if (pages > opts_.max_translations)
			return -E2BIG;
		uint64_t iova = p.iova_base & ~(page - 1);
		for (uint64_t i = 0; i < pages; i++)
			scratch_.push_back(MttEntry{iova + i * page, true, true});
	}
	b.mtt = scratch_;
	return umr_->bind(b);
}

int Mlx5MkeyProgrammer::revoke(uint32_t mkey)
{
	return umr_->revoke(mkey);
}

} // namespace nicmr::mlx5
