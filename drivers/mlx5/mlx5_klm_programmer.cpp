/* SPDX-License-Identifier: BSD-3-Clause */
#include "mlx5_klm_programmer.h"
#include "mlx5_cmd_programmer.h"

#include <algorithm>
#include <cerrno>
#include <vector>

#include "mlx5_prm.h"
#include "mr_keys.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

KlmProgrammer::~KlmProgrammer() = default;

size_t KlmProgrammer::live() const
{
	std::lock_guard lk(mu_);
	return saved_.size();
}

int KlmProgrammer::take_index(uint32_t index, std::optional<MkeyContext> *saved)
{
	try {
		saved_.reserve(saved_.size() + 1);
	} catch (...) {
		return -ENOMEM;
	}
	/* What stands at the index now: a free mkey (saved to be put back), or nothing (the
	 * command programmer creates its free mkeys lazily; the device says BAD_RES_STATE). */
	MkeyQuery q;
	int rc = dev_.query_mkey(index, 0, &q);
	if (rc == 0) {
		if (!q.ctx.free)
			return -EBUSY;
		*saved = q.ctx;
		return dev_.destroy_mkey(index);
	}
	return rc == -EINVAL ? 0 : rc;
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
	std::optional<MkeyContext> saved;
	int rc = take_index(index, &saved);
	if (rc)
		return rc;
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

int KlmProgrammer::bind_odp(uint32_t mkey, const mr::OdpParams &p)
{
	if (!dev_.caps().mkey_by_index || !dev_.caps().odp)
		return -EOPNOTSUPP;
	const uint32_t index = mr::mkey_index(mkey);
	/* Two MTT entries per octword; the UMR's translation offset is 16 bits of octwords
	 * without the extended offset. */
	const uint64_t octwords = (p.pages + 1) / 2;
	if (index == 0 || p.pages == 0 ||
	    octwords > (dev_.caps().umr_extended_translation_offset ? 0xffffffffu : 0xffffu))
		return -EINVAL;
	std::lock_guard lk(mu_);
	std::optional<MkeyContext> saved;
	int rc = take_index(index, &saved);
	if (rc)
		return rc;
	MkeyCreate c;
	c.ctx = bound_context(mkey, p);
	c.ctx.access_mode = prm::access_mode::mtt;
	c.ctx.umr_en = true; /* write_odp's UMRs */
	c.ctx.log_page_size = 12;
	/* Room for every page, none written: all not present. */
	c.ctx.translations_octword_size = static_cast<uint32_t>(octwords);
	c.pg_access = true;
	c.index = index;
	uint32_t got = 0;
	rc = dev_.create_mkey(c, &got);
	if (rc) {
		NICMR_LOG(warn, "mlx5", "CREATE_MKEY (on-demand, %llu pages) at %#x failed: %d",
			  static_cast<unsigned long long>(p.pages), mkey, rc);
		(void)restore(index, saved);
		return rc;
	}
	saved_.emplace(index, saved);
	return 0;
}

int KlmProgrammer::write_odp(uint32_t mkey, uint64_t first, std::span<const MttEntry> entries)
{
	if (first % 8 != 0 || entries.empty())
		return -EINVAL;
	std::lock_guard lk(umr_mu_);
	if (!umr_) {
		const int rc = UmrQueue::create(dev_, umr_pd_, UmrOptions{}, &umr_);
		if (rc)
			return rc;
	}
	/* 4096 entries (32 KiB) a UMR: within the queue's pointer buffer. */
	constexpr size_t kChunk = 4096;
	for (size_t done = 0; done < entries.size(); done += kChunk) {
		UmrBind b;
		b.mkey = mkey;
		b.log_page_size = 12;
		b.mtt = entries.subspan(done, std::min(kChunk, entries.size() - done));
		/* Octwords: 48 bits with the extended offset, else post_umr_bind refuses what
		 * 16 bits do not reach (-EINVAL). */
		b.xlt_offset = (first + done) / 2;
		const int rc = umr_->modify(b);
		if (rc) {
			NICMR_LOG(warn, "mlx5", "on-demand translations of %#x at %llu: %d", mkey,
				  static_cast<unsigned long long>(first + done), rc);
			return rc;
		}
	}
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
