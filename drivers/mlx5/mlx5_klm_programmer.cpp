/* SPDX-License-Identifier: BSD-3-Clause */
#include "mlx5_klm_programmer.h"
#include "mlx5_cmd_programmer.h"

#include <cerrno>
#include <vector>

#include "mlx5_prm.h"
#include "mr_keys.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

size_t KlmProgrammer::live() const
{
	std::lock_guard lk(mu_);
	return saved_.size();
}

int KlmProgrammer::restore(uint32_t index, const std::optional<MkeyContext> &saved)
{
	if (!saved)
		return 0;
	MkeyCreate c;
	c.ctx = *saved;
	c.index = index;
	uint32_t got = 0;
	int rc = dev_.create_mkey(c, &got);
	if (rc)
		NICMR_LOG(error, "mlx5", "re-creating the free mkey at index %#x failed: %d", index,
			  rc);
	return rc;
}

int KlmProgrammer::bind_indirect(uint32_t mkey, const mr::IndirectParams &p)
{
	if (!dev_.caps().mkey_by_index)
		return -EOPNOTSUPP; /* the KLM mkey must take the engine's index (header) */
	const uint32_t index = mr::mkey_index(mkey);
	if (index == 0 || p.count == 0 || p.parts == nullptr)
		return -EINVAL;
	std::vector<KlmEntry> klm;
	try {
		klm.reserve(p.count);
		for (uint32_t i = 0; i < p.count; i++)
			klm.push_back({p.parts[i].byte_count, p.parts[i].mkey, p.parts[i].address});
	} catch (...) {
		return -ENOMEM;
	}
	std::lock_guard lk(mu_);
	try {
		saved_.reserve(saved_.size() + 1);
	} catch (...) {
		return -ENOMEM;
	}
	/* What stands at the index now: a free mkey (saved to be put back), or nothing (the
	 * command programmer creates its free mkeys lazily; the device says BAD_RES_STATE). */
	std::optional<MkeyContext> saved;
	MkeyQuery q;
	int rc = dev_.query_mkey(index, 0, &q);
	if (rc == 0) {
		if (!q.ctx.free)
			return -EBUSY;
		saved = q.ctx;
		rc = dev_.destroy_mkey(index);
		if (rc)
			return rc;
	} else if (rc != -EINVAL) {
		return rc;
	}
	MkeyCreate c;
	c.ctx = bound_context(mkey, p);
	c.ctx.access_mode = prm::access_mode::klm;
	c.ctx.umr_en = false;
	c.index = index;
	c.klm = klm;
	uint32_t got = 0;
	rc = dev_.create_mkey(c, &got);
	if (rc) {
		NICMR_LOG(warn, "mlx5", "CREATE_MKEY (KLM, %u entries) at %#x failed: %d", p.count,
			  mkey, rc);
		(void)restore(index, saved);
		return rc;
	}
	saved_.emplace(index, saved);
	return 0;
}

int KlmProgrammer::revoke_indirect(uint32_t mkey)
{
	const uint32_t index = mr::mkey_index(mkey);
	std::lock_guard lk(mu_);
	auto it = saved_.find(index);
	if (it == saved_.end())
		return -ENOENT;
	int rc = dev_.destroy_mkey(index);
	if (rc) {
		NICMR_LOG(warn, "mlx5", "revoke %#x: DESTROY_MKEY of the KLM mkey failed: %d", mkey,
			  rc);
		return rc;
	}
	/* The key is dead from the destroy on; a failed re-create only costs the free mkey
	 * (logged), as in the command programmer. */
	(void)restore(index, it->second);
	saved_.erase(it);
	return 0;
}

} // namespace nicmr::mlx5
