/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private to the data path (emu_mlx5_qp.cpp, emu_mlx5_wqe.cpp): the device's per-object state.
 * Fields set by commands change only under EmuDataPath::table_lock_ held exclusive; the data
 * path reads them under the shared lock. What the data path changes has its own lock (a
 * SpinLock: the QP's for everything the engine keeps per QP, the CQ's for a shared CQ) or is
 * atomic, as marked.
 */
#ifndef NICMR_EMU_MLX5_DP_IMPL_H
#define NICMR_EMU_MLX5_DP_IMPL_H

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "emu_mlx5_dp.h"
#include "nicmr_align.h"

namespace nicmr::emu {

/*
 * The QP's and the CQ's lock: test-and-test-and-set, one exchange to take it, a release store
 * to give it back (a std::mutex costs an atomic read-modify-write both ways). Held for one
 * doorbell's WQEs or one CQE; a waiter spins, then yields (contention only: two threads ringing
 * one QP, or QPs sharing a CQ).
 * Not DPDK's rte_spinlock, on purpose: on x86 (DPDK 22.11 as Debian builds it, without
 * RTE_FORCE_INTRINSICS) its lock and unlock are inline assembly (xchg), which ThreadSanitizer
 * cannot see, so the TSan stress suite would report every access under the lock as a race;
 * its waiters never yield, which starves the holder on a machine with fewer cores than
 * spinning threads; and the device model builds without DPDK (the fuzz targets).
 */
class SpinLock {
public:
	void lock() noexcept
	{
		for (unsigned spins = 0;;) {
			/* Acquire: what the last holder wrote under the lock. */
			if (!held_.exchange(true, std::memory_order_acquire))
				return;
			while (held_.load(std::memory_order_relaxed))
				if (++spins >= 64)
					std::this_thread::yield();
		}
	}
	bool try_lock() noexcept
	{
		return !held_.load(std::memory_order_relaxed) &&
		       !held_.exchange(true, std::memory_order_acquire);
	}
	/* Release: our writes under the lock before the next holder's acquire. */
	void unlock() noexcept { held_.store(false, std::memory_order_release); }

private:
	std::atomic<bool> held_{false};
};

/* A statistics counter written only under its object's lock: a relaxed load and store, no
 * read-modify-write; readers (stats()) may see it a little late. */
inline void bump(std::atomic<uint64_t> &c, uint64_t n = 1) noexcept
{
	c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

struct alignas(kThreadAlign) EmuDataPath::Cq { /* no line shared with another object */
	uint32_t cqn = 0;
	CqAttr attr;
	uint32_t users = 0; /* QPs that complete here */
	SpinLock lock;	    /* guards produced: CQEs from several QPs */
	uint64_t produced = 0;
	/* Statistics, bumped under lock. */
	std::atomic<uint64_t> n_cqes{0}, n_errors{0}, n_overruns{0};
};

struct EmuDataPath::Eq {
	uint32_t eqn = 0;
	EqAttr attr;
	uint64_t order = 0; /* creation order: events go to the first EQ created that takes them */
	std::mutex lock;
	uint64_t produced = 0;
	uint64_t consumed = 0; /* the driver's consumer index as last read from its doorbell */
	bool overrun = false;  /* stays set: the EQ takes no more events */
};

struct alignas(kThreadAlign) EmuDataPath::Qp { /* no line shared with another object */
	uint32_t qpn = 0;
	QpAttr attr;
	QpPath path;
	/* Atomic: a connected requester moves this QP to ERR without its lock. */
	std::atomic<uint8_t> state{static_cast<uint8_t>(QpState::rst)};
	SpinLock lock;	  /* one thread runs the SQ at a time */
	Cq *cq = nullptr; /* attr.cqn's CQ: it cannot go while this QP uses it (users) */
	/* Statistics, bumped under lock. */
	std::atomic<uint64_t> n_wqes{0}, n_bytes{0}, n_doorbells{0};
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
