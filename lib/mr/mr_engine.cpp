/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_engine.h"

#include <cerrno>
#include <new>

#include "nicmr_log.h"

namespace nicmr::mr {

int Engine::create(const EngineConfig &cfg, MkeyProgrammer &programmer,
		   std::unique_ptr<Engine> *out) noexcept
{
	if (cfg.device_id == 0)
		return -EINVAL;
	std::unique_ptr<Engine> e(new (std::nothrow) Engine(programmer));
	if (!e)
		return -ENOMEM;
	e->device_id_ = cfg.device_id;
	int rc = KeySpace::create({cfg.index_count, cfg.max_readers}, &e->keys_);
	if (rc == 0)
		rc = ShadowTable::create(cfg.index_count, &e->table_);
	if (rc == 0)
		rc = programmer.create_free_mkeys(1, cfg.index_count - 1);
	if (rc) {
		NICMR_LOG(error, "mr", "engine for device %#llx with %u keys: %d",
			  static_cast<unsigned long long>(cfg.device_id), cfg.index_count, rc);
		return rc;
	}
	*out = std::move(e);
	return 0;
}

int Engine::reg(const RegRequest &req, KeyCache *cache, uint32_t *mkey) noexcept
{
	if (req.flags & ~kRegKnownFlags)
		return -EOPNOTSUPP;
	const bool handle = req.flags & kRegPoolLookup;
	if (!range_valid(req.addr, req.len) || (!handle && !range_valid(req.iova, req.len)) ||
	    !access_valid(req.access) || req.pd > 0xffffff || req.log_page_size < 12 ||
	    req.log_page_size > 30)
		return -EINVAL;
	EntryFields f;
	f.access = req.access;
	f.flags = static_cast<uint16_t>(((req.flags & kRegZeroBased) ? kEntryZeroBased : 0) |
					(handle ? kEntryPoolLookup : 0) |
					((req.flags & kRegSingleUse) ? kEntrySingleUse : 0));
	f.pd = req.pd;
	f.start = (req.flags & kRegZeroBased) ? 0 : req.addr;
	f.len = req.len;
	f.iova = req.iova;
	return install(req, f, cache, mkey);
}

int Engine::reg_sub(uint32_t base_mkey, const RegRequest &req, KeyCache *cache,
		    uint32_t *mkey) noexcept
{
	if (req.flags & ~(kRegRequestedKey | kRegZeroBased | kRegSingleUse))
		return -EOPNOTSUPP;
	if (!range_valid(req.addr, req.len) || !access_valid(req.access))
		return -EINVAL;
	/* Hold first: from then on the base cannot leave, so the snapshot below stays true. */
	int rc = keys_->hold(base_mkey);
	if (rc)
		return rc;
	EntryFields b;
	rc = table_->snapshot(base_mkey, &b);
	if (rc == 0 && b.state != EntryState::live)
		rc = -ENOKEY;
	else if (rc == 0 && (b.flags & kEntryPoolLookup))
		rc = -EOPNOTSUPP;
	else if (rc == 0 && !access_covers(b.access, req.access))
		rc = -EACCES;
	else if (rc == 0 && !range_within(b.start, b.len, req.addr, req.len))
		rc = -ERANGE;
	if (rc == 0) {
		EntryFields f;
		f.access = req.access;
		f.flags = static_cast<uint16_t>(
			kEntrySub | ((req.flags & kRegZeroBased) ? kEntryZeroBased : 0) |
			((req.flags & kRegSingleUse) ? kEntrySingleUse : 0));
		f.pd = b.pd;
		f.start = (req.flags & kRegZeroBased) ? 0 : req.addr;
		f.len = req.len;
		f.iova = b.iova + (req.addr - b.start);
		f.base_index = mkey_index(base_mkey);
		RegRequest inherited = req;
		inherited.log_page_size = 12;
		rc = install(inherited, f, cache, mkey);
	}
	if (rc)
		keys_->unhold(mkey_index(base_mkey));
	return rc;
}

int Engine::install(const RegRequest &req, EntryFields f, KeyCache *cache, uint32_t *mkey) noexcept
{
	uint32_t k;
	int rc = (req.flags & kRegRequestedKey) ? keys_->claim(req.requested_key, &k)
						: keys_->alloc(cache, &k);
	if (rc)
		return rc;
	BindParams bp{f.start, f.len, f.access, f.pd, f.iova, req.log_page_size, nullptr, 0};
	rc = prog_.bind(k, bp);
	if (rc) {
		keys_->release(cache, k);
		NICMR_LOG(warn, "mr", "bind of mkey %#x (start %#llx len %llu) failed: %d", k,
			  static_cast<unsigned long long>(f.start),
			  static_cast<unsigned long long>(f.len), rc);
		return rc;
	}
	f.mkey = k;
	f.state = EntryState::live;
	table_->publish(mkey_index(k), f);
	keys_->activate(k);
	*mkey = k;
	return 0;
}

int Engine::dereg(uint32_t mkey, KeyCache *cache) noexcept
{
	int rc = keys_->begin_retire(mkey);
	if (rc)
		return rc;
	const uint32_t index = mkey_index(mkey);
	const EntryFields saved = table_->read_owned(index);
	/* Host first: from here on no lookup accepts the key, before the device stops too. */
	table_->invalidate(index);
	rc = prog_.revoke(mkey);
	if (rc) {
		table_->publish(index, saved);
		keys_->abort_retire(mkey);
		NICMR_LOG(warn, "mr", "revoke of mkey %#x failed: %d; it stays registered", mkey,
			  rc);
		return rc;
	}
	keys_->retire(cache, mkey);
	if (saved.flags & kEntrySub)
		keys_->unhold(saved.base_index);
	return 0;
}

int Engine::raw_attr(uint32_t mkey, uint8_t *buf, size_t *size) const noexcept
{
	EntryFields f;
	int rc = table_->snapshot(mkey, &f);
	if (rc)
		return rc;
	RawKey rk{device_id_, f.start, f.len, f.mkey, f.pd, f.access};
	return encode_raw_key(rk, buf, size);
}

int Engine::map_raw(const uint8_t *buf, size_t size, uint64_t expected_device,
		    uint64_t *key) noexcept
{
	RawKey rk;
	int rc = decode_raw_key(buf, size, expected_device, &rk);
	if (rc)
		return rc;
	*key = rk.mkey;
	return 0;
}

} // namespace nicmr::mr
