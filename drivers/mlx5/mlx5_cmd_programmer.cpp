/* SPDX-License-Identifier: BSD-3-Clause */
#include "mlx5_cmd_programmer.h"

#include <cerrno>

#include "mr_plan.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

CmdProgrammer::CmdProgrammer(Device &dev, uint32_t free_pd, uint32_t index_count)
    : dev_(dev), free_pd_(free_pd), exists_(index_count, false), given_(index_count, false)
{}

CmdProgrammer::~CmdProgrammer()
{
	std::lock_guard lk(mu_);
	for (uint32_t i = 1; i < exists_.size(); i++) {
		if (!exists_[i])
			continue;
		int rc = dev_.destroy_mkey(i);
		if (rc)
			NICMR_LOG(warn, "mlx5", "DESTROY_MKEY of index %u at close failed: %d", i,
				  rc);
	}
}

int CmdProgrammer::create_free_mkeys(uint32_t count, uint32_t *indices)
{
	/* Lazy (see the top of the header): hand out indices it will create at, which only a
	 * device with mkey_by_name allows. Lowest never given first. */
	if (!dev_.caps().mkey_by_index)
		return -EOPNOTSUPP;
	std::lock_guard lk(mu_);
	uint32_t got = 0;
	for (uint32_t i = next_; i < given_.size() && got < count; i++)
		if (!given_[i])
			indices[got++] = i;
	if (got < count)
		return -ENOSPC;
	for (uint32_t i = 0; i < count; i++)
		given_[indices[i]] = true;
	next_ = indices[count - 1] + 1;
	return 0;
}

bool CmdProgrammer::chosen_indices() const noexcept
{
	return dev_.caps().mkey_by_index;
}

int CmdProgrammer::create_free_mkey_at(uint32_t index)
{
	if (!dev_.caps().mkey_by_index)
		return -EOPNOTSUPP;
	std::lock_guard lk(mu_);
	if (index == 0 || index >= given_.size())
		return -EINVAL;
	if (given_[index])
		return -EEXIST;
	given_[index] = true;
	return 0;
}

size_t CmdProgrammer::created() const
{
	std::lock_guard lk(mu_);
	return created_;
}

int CmdProgrammer::create_free(uint32_t index, uint8_t variant)
{
	MkeyCreate c;
	c.ctx.free = true;
	c.ctx.umr_en = true;
	c.ctx.lr = false;
	c.ctx.pd = free_pd_;
	c.ctx.variant = variant;
	/* Room for one octword (two entries) although none is given: the device model's
	 * QUERY_MKEY copies the translations with memcpy, which an empty table would call with a
	 * null source (undefined behaviour that UBSan reports). */
	c.ctx.translations_octword_size = 1;
	c.index = index;
	uint32_t got = 0;
	int rc = dev_.create_mkey(c, &got);
	if (rc == 0) {
		exists_[index] = true;
		created_++;
	}
	return rc;
}

int CmdProgrammer::bind(uint32_t mkey, const mr::BindParams &p)
{
	const uint32_t index = mr::mkey_index(mkey);
	if (index == 0 || index >= exists_.size())
		return -EINVAL;
	/* lib/mr's planner (-EINVAL for len 0, a page size outside 12..30, an IOVA not
	 * congruent with start), as the UMR programmer uses it; the list lives on the heap here (a
	 * slow path with no translation limit but the device's). */
	uint64_t n = 0;
	int rc = mr::bind_mtt_count(p, &n);
	if (rc)
		return rc;
	std::vector<uint64_t> pages;
	std::vector<MttEntry> mtt;
	try {
		pages.resize(n);
		mtt.resize(n);
	} catch (...) {
		return -ENOMEM;
	}
	rc = mr::plan_bind_mtt(p, pages.data(), n, &n);
	if (rc)
		return rc;
	for (uint64_t i = 0; i < n; i++)
		mtt[i].iova = pages[i];
	MkeyCreate c;
	c.ctx = bound_context(mkey, p);
	c.ctx.umr_en = true;
	c.ctx.log_page_size = p.log_page_size;
	c.index = index;
	c.mtt = mtt;

	std::lock_guard lk(mu_);
	if (exists_[index]) {
		rc = dev_.destroy_mkey(index);
		if (rc) {
			NICMR_LOG(warn, "mlx5",
				  "bind %#x: DESTROY_MKEY of the free mkey failed: %d", mkey, rc);
			return rc;
		}
		exists_[index] = false;
		created_--;
	}
	uint32_t got = 0;
	rc = dev_.create_mkey(c, &got);
	if (rc) {
		NICMR_LOG(warn, "mlx5", "bind %#x: CREATE_MKEY (start %#llx len %llu) failed: %d",
			  mkey, static_cast<unsigned long long>(p.start),
			  static_cast<unsigned long long>(p.len), rc);
		/* Leave it free, as the seam promises; a missing index is refused all the same. */
		(void)create_free(index, mr::mkey_variant(mkey));
		return rc;
	}
	exists_[index] = true;
	created_++;
	return 0;
}

int CmdProgrammer::revoke(uint32_t mkey)
{
	const uint32_t index = mr::mkey_index(mkey);
	if (index == 0 || index >= exists_.size())
		return -EINVAL;
	std::lock_guard lk(mu_);
	if (exists_[index]) {
		int rc = dev_.destroy_mkey(index);
		if (rc) {
			NICMR_LOG(warn, "mlx5", "revoke %#x: DESTROY_MKEY failed: %d", mkey, rc);
			return rc;
		}
		exists_[index] = false;
		created_--;
	}
	/* The key is dead from the destroy on; a failed re-create only costs the free mkey. */
	int rc = create_free(index, mr::mkey_variant(mkey));
	if (rc)
		NICMR_LOG(warn, "mlx5", "revoke %#x: re-creating the free mkey failed: %d", mkey,
			  rc);
	return 0;
}

} // namespace nicmr::mlx5
