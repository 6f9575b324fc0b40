/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * KlmProgrammer: lib/mr's IndirectProgrammer, how nicmr gets indirect (KLM) mkeys. Every
 * engine index holds a free MTT mkey made by the key programmer (pre-created for UMR, or lazily
 * by the command programmer), and a UMR cannot change an mkey's access mode. So an indirect mkey is
 * made on the command path, in place of the free mkey at the engine's index:
 *
 *   bind_indirect(mkey)   QUERY_MKEY(index): a free mkey (its context saved) or none
 *                         -> DESTROY_MKEY(index) -> CREATE_MKEY(index, access mode KLM, variant,
 *                         access, PD, start, len, the KLM entries; umr_en 0)
 *   revoke_indirect(mkey) DESTROY_MKEY(index) -> CREATE_MKEY(the saved free mkey), if one was
 *
 * The key programmer never notices: the index holds a free mkey made as it made it whenever the
 * engine does not own the index for an indirect region, and the engine owns it otherwise.
 * Three commands per registration and two per deregistration: the vectored path is not the
 * fast one (doc/registration.md).
 *
 * Making an mkey at a given index needs the device's mkey_by_name (Caps::mkey_by_index), which
 * a stock ConnectX does not offer: without it bind_indirect is -EOPNOTSUPP. (A device-chosen
 * index would change the engine's key; free KLM mkeys pre-created for UMR, as the kernel's
 * mlx5_ib makes for IB_MR_TYPE_SG_GAPS, would lift this and are not done yet.)
 *
 * On-demand-paging mkeys (doc/odp.md) are made the same way, in place of the free mkey at the
 * engine's index: an MTT mkey of 4 KiB pages, created with pg_access and umr_en and no
 * translation written, so that every entry lacks rd_en and wr_en, which is how an ODP mkey's
 * page is not present (Linux mlx5_ib odp.c: MLX5_IB_MTT_PRESENT is the read and write bits;
 * a zapped entry has neither). write_odp later writes groups of entries with a UMR modify
 * (mask PAGE_SIZE only, TRANSLATION_OFFSET_EN) on a UMR queue of the programmer's own, as
 * the kernel's mlx5r_umr_update_xlt does; revoke_indirect takes the mkey back.
 *
 * Thread safety: any thread; a mutex guards the saved contexts (the command queue serialises
 * the commands anyway). Slow path: it allocates and takes a lock.
 */
#ifndef NICMR_MLX5_KLM_PROGRAMMER_H
#define NICMR_MLX5_KLM_PROGRAMMER_H

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

#include "mlx5_device.h"
#include "mlx5_umr.h"
#include "mr_programmer.h"

namespace nicmr::mlx5 {

class KlmProgrammer final : public mr::IndirectProgrammer {
public:
	/* umr_pd: the PD of the programmer's UMR queue (made on the first write_odp). */
	explicit KlmProgrammer(Device &dev, uint32_t umr_pd = 0) : dev_(dev), umr_pd_(umr_pd) {}
	~KlmProgrammer() override;
	/* 0; -EOPNOTSUPP (no mkey_by_index); -EINVAL (index 0, count 0); -EBUSY (the index holds an
	 * mkey that is not free); -ENOMEM; the commands' errors. */
	int bind_indirect(uint32_t mkey, const mr::IndirectParams &p) override;
	/* 0; -ENOENT (not an indirect mkey of this programmer); DESTROY_MKEY's error. */
	int revoke_indirect(uint32_t mkey) override;
	/* An on-demand-paging mkey in place of the free one (header). 0; -EOPNOTSUPP (no
	 * mkey_by_index, or no on-demand paging: Caps::odp); -EINVAL (index 0, no pages, more
	 * than 2^16 - 1 octwords of them); -EBUSY; -ENOMEM; the commands' errors. */
	int bind_odp(uint32_t mkey, const mr::OdpParams &p) override;
	/* Writes entries[0..n) of mkey's translation table from entry first on (first a multiple
	 * of 8, n a multiple of 8 or reaching the table's end: a UMR writes 64-byte units). 0;
	 * -EINVAL (alignment); UmrQueue::create's and modify's errors. Slow path: a lock. */
	int write_odp(uint32_t mkey, uint64_t first, std::span<const MttEntry> entries);
	/* Indirect mkeys live now (tests). */
	size_t live() const;

private:
	/* Frees the index for a new mkey (mu_ held): a free mkey there is destroyed and its
	 * context kept in *saved (restore puts it back); room for its record in saved_ is made
	 * first. 0, -EBUSY (a live mkey there), -ENOMEM, the commands' errors. */
	int take_index(uint32_t index, std::optional<MkeyContext> *saved);
	int restore(uint32_t index, const std::optional<MkeyContext> &saved);
	Device &dev_;
	const uint32_t umr_pd_;
	std::mutex umr_mu_;		/* guards umr_ */
	std::unique_ptr<UmrQueue> umr_; /* write_odp's queue; umr_mu_ */
	mutable std::mutex mu_;
	/* index -> the free mkey it replaced (nullopt: the index held none); mu_ */
	std::unordered_map<uint32_t, std::optional<MkeyContext>> saved_;
};

} // namespace nicmr::mlx5

#endif
