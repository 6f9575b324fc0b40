/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device's mkey table: what a ConnectX keeps per memory key, and the one door to it.
 *
 *   index (24 bits) --> MkeyEntry { mkc (64 raw PRM bytes), pg_access, translations (raw MTT or
 *                                   KLM entries, capacity = mkc translations_octword_size) }
 *
 * Index 0 is never handed out (so that a zeroed key is never valid). The entry keeps the mkc
 * bytes exactly as the device would hold them in its memory; fields are read through the PRM
 * layout table. Commands (CREATE/QUERY/DESTROY_MKEY) and, later, UMR work requests change
 * entries; the data path (RDMA access checks) reads them with with(). A reader/writer lock
 * guards the table: writers are slow-path commands, readers may be many device threads.
 */
#ifndef NICMR_EMU_MLX5_MKEY_H
#define NICMR_EMU_MLX5_MKEY_H

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

namespace nicmr::emu {

struct MkeyEntry {
	std::array<uint8_t, 64> mkc{}; /* mlx5_prm.h mkc layout, big-endian */
	bool pg_access = false;
	uint32_t access_mode = 0;	   /* prm::access_mode value */
	std::vector<uint8_t> translations; /* translations_octword_size * 16 bytes */
	/* The PD given at CREATE_MKEY: the one DEALLOC_PD accounting charges (a UMR may point
	 * the mkc's pd elsewhere later without the command path's lock). */
	uint32_t owner_pd = 0;
};

class MkeyTable {
public:
	/* Indices 1 .. 2^log_size - 1. */
	explicit MkeyTable(uint32_t log_size) : capacity_(uint32_t{1} << log_size) {}

	uint32_t capacity() const noexcept { return capacity_; }
	size_t live() const
	{
		std::shared_lock lk(lock_);
		return map_.size();
	}

	/*
	 * Stores e at index want (1 .. capacity - 1), or at a free index of the table's choosing
	 * when want is 0. Errors: -ERANGE (want out of range), -EBUSY (want is live), -ENOSPC
	 * (no free index).
	 */
	int create(uint32_t want, MkeyEntry &&e, uint32_t *index);
	/* Removes index and hands its entry back in *old (if not null). -ERANGE, -ENOENT. */
	int destroy(uint32_t index, MkeyEntry *old);
	/* Removes every entry (TEARDOWN_HCA). */
	void clear();

	/* Runs f(const MkeyEntry &) under the shared lock. -ERANGE, -ENOENT. Never call back
	 * into the table from f. */
	template <class F> int with(uint32_t index, F &&f) const
	{
		if (index == 0 || index >= capacity_)
			return -ERANGE;
		std::shared_lock lk(lock_);
		auto it = map_.find(index);
		if (it == map_.end())
			return -ENOENT;
		f(it->second);
		return 0;
	}
	/*
	 * Runs f() under one hold of the shared lock, during which find_locked() may be called
	 * any number of times (an indirect mkey's walk looks up several keys without letting a
	 * writer in between, and without taking the lock recursively). Returns what f returns.
	 */
	template <class F> auto read(F &&f) const
	{
		std::shared_lock lk(lock_);
		return f();
	}
	/* Only inside read() or update(): the entry at index, or nullptr. No allocation. */
	const MkeyEntry *find_locked(uint32_t index) const
	{
		if (index == 0 || index >= capacity_)
			return nullptr;
		auto it = map_.find(index);
		return it == map_.end() ? nullptr : &it->second;
	}
	/* Runs f(MkeyEntry *) under the exclusive lock (nullptr when index has no entry); UMR
	 * and LOCAL_INVAL change a key this way, atomically for every reader. */
	template <class F> auto update(uint32_t index, F &&f)
	{
		std::unique_lock lk(lock_);
		auto it = index == 0 || index >= capacity_ ? map_.end() : map_.find(index);
		return f(it == map_.end() ? nullptr : &it->second);
	}
	/* Runs f(index, const MkeyEntry &) for every live entry, under the shared lock. */
	template <class F> void for_each(F &&f) const
	{
		std::shared_lock lk(lock_);
		for (const auto &[idx, e] : map_)
			f(idx, e);
	}

private:
	const uint32_t capacity_;
	mutable std::shared_mutex lock_;
	std::unordered_map<uint32_t, MkeyEntry> map_; /* guarded by lock_ */
	uint32_t next_ = 1; /* where the search for a free index starts; guarded by lock_ */
};

} // namespace nicmr::emu

#endif
