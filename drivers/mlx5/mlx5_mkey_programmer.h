/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration engine's device seam (lib/mr/mr_programmer.h) over UMR: free mkeys created
 * with CREATE_MKEY (free = 1, umr_en = 1, MTT, room for max_translations entries), bound and
 * revoked with synchronous UMRs.
 *
 * Lanes: the UMRs go out on lanes, each a UmrQueue (UAR, CQ, QP) with its own MTT scratch list.
 *
 *   lane 0            shared: any thread, under shared_mu_ (threads that found no free lane)
 *   lanes 1..lanes-1  exclusive: a registering thread claims one on its first bind or revoke
 *                     (one compare-and-swap, the slow path) and keeps it until it exits; from
 *                     then on its binds and revokes take no lock and touch no other thread's
 *                     cache lines, so registering threads scale instead of queueing on one QP.
 *
 * A thread finds its lane in the programmer's table by thread slot (lib/common's
 * nicmr_thread.h; threads on the shared slot use lane 0). The programmer watches the exits of
 * the threads it recorded, so an exiting thread hands its lane back (on itself, before its
 * slot is another thread's); a programmer being destroyed stops watching first, so a thread
 * that exits after it is gone hands back nothing.
 *
 * Engine indices are device mkey indices, chosen by the device (CREATE_MKEY with
 * input_mkey_index 0): create_free_mkeys reports the ones it got. Only with Caps::mkey_by_index
 * (hca_cap mkey_by_name, off on a stock ConnectX) does create_free_mkey_at make one at a chosen
 * index, for requested keys.
 */
#ifndef NICMR_MLX5_MKEY_PROGRAMMER_H
#define NICMR_MLX5_MKEY_PROGRAMMER_H

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "mlx5_device.h"
#include "mlx5_umr.h"
#include "mr_programmer.h"
#include "nicmr_align.h"
#include "nicmr_thread.h"

namespace nicmr::mlx5 {

struct MkeyProgrammerOptions {
	uint32_t max_translations = 64; /* MTT entries each free mkey can hold (its size) */
	/* UMR queues: lane 0 shared, the rest one per registering thread. 1..kMaxLanes. Each
	 * lane costs a UAR, a CQ and a QP of the device. */
	uint32_t lanes = 5;
	UmrOptions umr;
};

class Mlx5MkeyProgrammer final : public mr::MkeyProgrammer, private SlotUser {
public:
	static constexpr uint32_t kMaxLanes = 64;

	/* dev and its PD must outlive the programmer. Errors: those of UmrQueue::create (-ENOMEM
	 * when the device has no UAR left: ALLOC_UAR's EXCEED_LIM), -EINVAL (max_translations 0,
	 * lanes 0 or above kMaxLanes). Nothing stays created on failure. */
	static int create(Device &dev, uint32_t pd, const MkeyProgrammerOptions &o,
			  std::unique_ptr<Mlx5MkeyProgrammer> *out);
	/* Destroys every mkey it created. No thread may bind or revoke through it any more. */
	~Mlx5MkeyProgrammer() override;
	Mlx5MkeyProgrammer(const Mlx5MkeyProgrammer &) = delete;
	Mlx5MkeyProgrammer &operator=(const Mlx5MkeyProgrammer &) = delete;

	/* count CREATE_MKEYs at device-chosen indices (mlx5_mkey_programmer.cpp says why one by
	 * one). 0; -EINVAL (count 0); -ENOMEM; the command's. On failure the mkeys of this call
	 * are destroyed again. Any thread (the engine's slow path). */
	int create_free_mkeys(uint32_t count, uint32_t *indices) override;
	/* Caps::mkey_by_index. */
	bool chosen_indices() const noexcept override;
	/* 0; -EOPNOTSUPP (no mkey_by_index); -EINVAL (index 0 or above 24 bits); -EEXIST (the
	 * index holds an mkey already: CREATE_MKEY's BAD_RES_STATE); the command's. */
	int create_free_mkey_at(uint32_t index) override;
	/* 0; -EINVAL (len 0, log_page_size outside 12..30, iova_base not congruent with start
	 * modulo the page); -E2BIG (more than max_translations pages); UmrQueue::bind's errors
	 * (-EOPNOTSUPP: atomic access on a device with umr_modify_atomic_disabled). On a device
	 * with umr_modify_entity_size_disabled the pages are planned at 4 KiB, the free mkeys'
	 * page size, so max_translations bounds a region at max_translations * 4 KiB.
	 * Any thread. */
	int bind(uint32_t mkey, const mr::BindParams &p) override;
	/* 0 or UmrQueue::revoke's errors (-EALREADY: free already). Any thread. */
	int revoke(uint32_t mkey) override;
	/* A UMR modify (UmrBind::modify): bind's argument errors, or UmrQueue::modify's (-ENOENT:
	 * the mkey is free). Any thread. */
	int modify(uint32_t mkey, const mr::BindParams &p) override;
	/* On-demand mkeys made ahead (mr_programmer.h; doc/odp.md): count CREATE_MKEYs of free
	 * MTT mkeys with pg_access, 4 KiB pages and room for pages entries, none written, in the
	 * programmer's PD. 0; -EOPNOTSUPP (no Caps::odp); -EINVAL (count 0, pages odd, 0 or above
	 * odp_max_pages()); -ENOMEM; the command's (the device's translation limits). */
	int create_odp_mkeys(uint64_t pages, uint32_t count, uint32_t *indices) override;
	/* 2^log_max_klm_list_size entries, and no more than a 16-bit translation offset reaches
	 * without Caps::umr_extended_translation_offset (Linux umr.h, mlx5r_umr_can_load_pas:
	 * MLX5_MAX_UMR_PAGES); 0 without Caps::odp. */
	uint64_t odp_max_pages() const noexcept override;
	/* One UMR on the caller's lane, as bind, with no translations: start, len, access, PD,
	 * variant. bind's errors. */
	int bind_odp(uint32_t mkey, const mr::OdpParams &p) override;

	/* The shared lane's queue (lane 0). */
	UmrQueue &umr() noexcept { return *lanes_[0].umr; }
	size_t mkey_count() const;
	uint32_t lane_count() const noexcept { return uint32_t(lanes_.size()); }
	/* Exclusive lanes that threads hold now (diagnostics and tests). */
	uint32_t lanes_claimed() const noexcept;
	/* The calling thread's lane: 0 (shared) or the exclusive one it holds or claims now. */
	uint32_t lane_of_this_thread() noexcept;

private:
	static constexpr uint32_t kNoLane = ~uint32_t{0};
	/* Lines of its own (kThreadAlign): lanes are used by different threads at once. */
	struct alignas(kThreadAlign) Lane {
		std::unique_ptr<UmrQueue> umr;
		/* The bind in flight: its page IOVAs (mr::plan_bind_mtt) and their MTT entries;
		 * max_translations each, sized at creation. */
		std::vector<uint64_t> pages;
		std::vector<MttEntry> scratch;
	};

	Mlx5MkeyProgrammer(Device &dev, uint32_t pd, const MkeyProgrammerOptions &o);
	int bind_on(Lane &l, uint32_t mkey, const mr::BindParams &p, bool modify);
	/* The CREATE_MKEY of a free mkey (index 0: the device's choice). */
	MkeyCreate free_mkey() const;
	/* count CREATE_MKEYs of c into mkeys_ (mu_ taken), their indices to indices. */
	int create_many(const MkeyCreate &c, uint32_t count, uint32_t *indices);
	/* Runs f on the calling thread's lane (lane 0 under shared_mu_). */
	template <class F> int on_my_lane(F &&f);
	Device &dev_;
	uint32_t pd_;
	MkeyProgrammerOptions opts_;
	std::vector<Lane> lanes_;
	/* Claim flags of the exclusive lanes (index 0, the shared lane, unused). */
	std::vector<std::atomic<bool>> held_;
	/* The lane of each thread slot's thread (0: the shared one; kNoLane: not asked yet).
	 * Written by that thread alone: on its first bind or revoke, and at its exit
	 * (slot_exit, which hands the lane back). */
	uint32_t lane_by_slot_[kThreadSlots];
	void slot_exit(size_t slot) noexcept override;
	std::mutex shared_mu_;	/* lane 0 */
	mutable std::mutex mu_; /* mkeys_ */
	std::vector<MkeyHandle> mkeys_;
};

} // namespace nicmr::mlx5

#endif
