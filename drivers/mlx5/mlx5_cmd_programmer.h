/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CmdProgrammer: lib/mr's MkeyProgrammer over firmware commands instead of UMR work requests
 * (Mlx5MkeyProgrammer, mlx5_mkey_programmer.h, is the fast one). It needs no send queue, so it
 * works where UMR is not wanted or not there (the native API's spec option programmer=cmd):
 *
 *   bind(mkey, p)  = DESTROY_MKEY(index) [when it exists] + CREATE_MKEY(index, variant,
 *                    lr/lw/rr/rw/a, pd, start, len, the MTT list of mr::plan_bind_mtt)
 *   revoke(mkey)   = DESTROY_MKEY(index) + CREATE_MKEY(index, free=1, umr_en=1, the private PD)
 *
 * It is a real device path (the device enforces every bound and right it programs) but slower
 * than UMR: two commands per call. It creates mkeys at the engine's indices, so it needs a
 * device with mkey_by_name (Caps::mkey_by_index; off on a stock ConnectX): without it
 * create_free_mkeys is -EOPNOTSUPP and the native API refuses programmer=cmd. Free mkeys are
 * created lazily: an index the engine never used does not exist on the device, which refuses it
 * just as it refuses a free one; so opening a device does not cost one command per key.
 *
 * Thread safety: calls may come from any thread; a mutex serialises them (commands serialise on
 * the command queue anyway).
 */
#ifndef NICMR_MLX5_CMD_PROGRAMMER_H
#define NICMR_MLX5_CMD_PROGRAMMER_H

#include <cstdint>
#include <mutex>
#include <vector>

#include "mlx5_device.h"
#include "mlx5_mkey_access.h"
#include "mr_keys.h"
#include "mr_programmer.h"

namespace nicmr::mlx5 {

/* The mkey context of a bound region made by a command: mkey's variant, the access bits (the
 * one mapping, set_mkey_access), PD, start and length of p (mr::BindParams or
 * mr::IndirectParams), free = 0. The access mode, umr_en, page size and translations are the
 * caller's. */
template <class P> MkeyContext bound_context(uint32_t mkey, const P &p) noexcept
{
	MkeyContext ctx;
	ctx.free = false;
	set_mkey_access(ctx, p.access);
	ctx.pd = p.pd;
	ctx.variant = mr::mkey_variant(mkey);
	ctx.start_addr = p.start;
	ctx.len = p.len;
	return ctx;
}

class CmdProgrammer final : public mr::MkeyProgrammer {
public:
	/* free_pd: a PD of the device that free mkeys name (never one the application frees). */
	CmdProgrammer(Device &dev, uint32_t free_pd, uint32_t index_count);
	/* Destroys every mkey it created (errors are logged). */
	~CmdProgrammer() override;
	CmdProgrammer(const CmdProgrammer &) = delete;
	CmdProgrammer &operator=(const CmdProgrammer &) = delete;

	/* Gives count indices it has not given (lowest first from where it last stopped).
	 * 0; -EOPNOTSUPP (no mkey_by_index); -ENOSPC (none left below index_count). */
	int create_free_mkeys(uint32_t count, uint32_t *indices) override;
	bool chosen_indices() const noexcept override;
	/* 0; -EOPNOTSUPP (no mkey_by_index); -EINVAL (0 or beyond index_count); -EEXIST. */
	int create_free_mkey_at(uint32_t index) override;
	int bind(uint32_t mkey, const mr::BindParams &params) override;
	int revoke(uint32_t mkey) override;

	/* mkeys that exist on the device because of this programmer. */
	size_t created() const;

private:
	int create_free(uint32_t index, uint8_t variant);
	Device &dev_;
	const uint32_t free_pd_;
	mutable std::mutex mu_;
	std::vector<bool> exists_; /* by index; under mu_ */
	std::vector<bool> given_;  /* indices handed to the engine; under mu_ */
	uint32_t next_ = 1;	   /* where the search for indices to give starts; under mu_ */
	size_t created_ = 0;	   /* under mu_ */
};

} // namespace nicmr::mlx5

#endif
