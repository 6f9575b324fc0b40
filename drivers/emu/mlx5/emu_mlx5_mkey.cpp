/* SPDX-License-Identifier: BSD-3-Clause */
#include "emu_mlx5_mkey.h"

namespace nicmr::emu {

int MkeyTable::create(uint32_t want, MkeyEntry &&e, uint32_t *index)
{
	if (want >= capacity_)
		return -ERANGE;
	std::unique_lock lk(lock_);
	if (want != 0) {
		if (map_.count(want) != 0)
			return -EBUSY;
	} else {
		if (map_.size() >= capacity_ - 1)
			return -ENOSPC;
		/* Round-robin from the last hand-out: a just-destroyed index is reused last, the
		 * way firmware spreads indices. At most live() probes. */
		want = next_;
		while (map_.count(want) != 0)
			want = want + 1 < capacity_ ? want + 1 : 1;
		next_ = want + 1 < capacity_ ? want + 1 : 1;
	}
	map_.emplace(want, std::move(e));
	*index = want;
	return 0;
}

int MkeyTable::destroy(uint32_t index, MkeyEntry *old)
{
	if (index == 0 || index >= capacity_)
		return -ERANGE;
	std::unique_lock lk(lock_);
	auto it = map_.find(index);
	if (it == map_.end())
		return -ENOENT;
	if (old != nullptr)
		*old = std::move(it->second);
	map_.erase(it);
	return 0;
}

void MkeyTable::clear()
{
	std::unique_lock lk(lock_);
	map_.clear();
	next_ = 1;
}

} // namespace nicmr::emu
