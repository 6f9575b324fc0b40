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
 * Thread safety: any thread; a mutex guards the saved contexts (the command queue serialises
 * the commands anyway). Slow path: it allocates and takes a lock.
 */
#ifndef NICMR_MLX5_KLM_PROGRAMMER_H
#define NICMR_MLX5_KLM_PROGRAMMER_H

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "mlx5_device.h"
#include "mr_programmer.h"

namespace nicmr::mlx5 {

class KlmProgrammer final : public mr::IndirectProgrammer {
public:
	explicit KlmProgrammer(Device &dev) : dev_(dev) {}
	/* 0; -EOPNOTSUPP (no mkey_by_index); -EINVAL (index 0, count 0); -EBUSY (the index holds an
	 * mkey that is not free); -ENOMEM; the commands' errors. */
	int bind_indirect(uint32_t mkey, const mr::IndirectParams &p) override;
	/* 0; -ENOENT (not an indirect mkey of this programmer); DESTROY_MKEY's error. */
	int revoke_indirect(uint32_t mkey) override;
	/* Indirect mkeys live now (tests). */
	size_t live() const;

private:
	int restore(uint32_t index, const std::optional<MkeyContext> &saved);
	Device &dev_;
	mutable std::mutex mu_;
	/* index -> the free mkey it replaced (nullopt: the index held none); mu_ */
	std::unordered_map<uint32_t, std::optional<MkeyContext>> saved_;
};

} // namespace nicmr::mlx5

#endif
