/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private to the data path (emu_mlx5_qp.cpp, emu_mlx5_wqe.cpp): the device's per-object state.
 * Fields set by commands change only under EmuDataPath::table_lock_ held exclusive; the data
 * path reads them under the shared lock. What the data path changes has its own lock or is
 * atomic, as marked.
 */
#ifndef NICMR_EMU_MLX5_DP_IMPL_H
#define NICMR_EMU_MLX5_DP_IMPL_H

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "emu_mlx5_dp.h"

namespace nicmr::emu {

struct EmuDataPath::Cq {
	uint32_t cqn = 0;
	CqAttr attr;
	uint32_t users = 0; /* QPs that complete here */
	std::mutex lock;    /* guards produced: CQEs from several QPs */
	uint64_t produced = 0;
};

struct EmuDataPath::Eq {
	uint32_t eqn = 0;
	EqAttr attr;
	uint64_t order = 0; /* creation order: events go to the first EQ created */
	std::mutex lock;
	uint64_t produced = 0;
};

struct EmuDataPath::Qp {
	uint32_t qpn = 0;
	QpAttr attr;
	QpPath path;
	/* Atomic: a connected requester moves this QP to ERR without its lock. */
	std::atomic<uint8_t> state{static_cast<uint8_t>(QpState::rst)};
	std::mutex lock;	      /* one thread runs the SQ at a time */
	uint16_t ci = 0;	      /* SQ consumer counter in WQEBBs; guarded by lock */
	std::vector<uint8_t> scratch; /* UMR translation lists by pointer; guarded by lock */
	/* Keys a WQE holds beyond MkeyTable::Hold::kInline; grows once to the largest set;
	 * guarded by lock. */
	std::vector<const void *> held;
	/* mkc byte masks of the last two UMR mkey_masks seen; guarded by lock. */
	struct UmrMask {
		uint64_t of = 0;
		bool valid = false;
		uint64_t bytes[8] = {};
	};
	UmrMask umr_masks[2];
	unsigned umr_mask_next = 0;
	/* The byte mask of mkey_mask's fields (eight words over the 64 mkc bytes). */
	const uint64_t *umr_byte_mask(uint64_t mkey_mask) noexcept;

	QpState get_state() const noexcept
	{
		/* Acquire pairs with the release store of ERR by a requester: the event it
		 * posted is ordered before. Only the state itself matters here. */
		return static_cast<QpState>(state.load(std::memory_order_acquire));
	}
	void set_state(QpState s) noexcept
	{
		state.store(static_cast<uint8_t>(s), std::memory_order_release);
	}
};

} // namespace nicmr::emu

#endif
