/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CmdProgrammer: the MkeyProgrammer of the native API until the UMR programmer of the data path
 * is there. It programs mkeys with firmware commands instead of UMR work requests:
 *
 *   bind(mkey, p)  = DESTROY_MKEY(index) [when it exists] + CREATE_MKEY(index, variant,
 *                    lr/lw/rr/rw/a, pd, start, len, MTT over p's IOVA range)
 *   revoke(mkey)   = DESTROY_MKEY(index) + CREATE_MKEY(index, free=1, umr_en=1, the private PD)
 *
 * It is a real device path (the device enforces every bound and right it programs) but slower
 * than UMR: two commands per call. Free mkeys are created lazily: an index the engine never used
 * does not exist on the device, which refuses it just as it refuses a free one; so opening a
 * device does not cost one command per key.
 *
 * Thread safety: calls may come from any thread; a mutex serialises them (commands serialise on
 * the command queue anyway).
 */
#ifndef NICMR_API_PROGRAMMER_H
#define NICMR_API_PROGRAMMER_H

#include <cstdint>
#include <mutex>
#include <vector>

#include "mlx5_device.h"
#include "mr_access.h"
#include "mr_keys.h"
#include "mr_programmer.h"

namespace nicmr::api {

/* The mkey context of a bound region made by a command: mkey's variant, the access bits, PD,
 * start and length of p (mr::BindParams or mr::IndirectParams), free = 0. The access mode,
 * umr_en, page size and translations are the caller's. */
template <class P> mlx5::MkeyContext bound_context(uint32_t mkey, const P &p)
{
	mlx5::MkeyContext ctx;
	ctx.free = false;
	ctx.lr = p.access & mr::kAccessLocalRead;
	ctx.lw = p.access & mr::kAccessLocalWrite;
	ctx.rr = p.access & mr::kAccessRemoteRead;
	ctx.rw = p.access & mr::kAccessRemoteWrite;
	ctx.a = p.access & mr::kAccessRemoteAtomic;
	ctx.pd = p.pd;
	ctx.variant = mr::mkey_variant(mkey);
	ctx.start_addr = p.start;
	ctx.len = p.len;
	return ctx;
}

class CmdProgrammer final : public mr::MkeyProgrammer {
public:
	/* free_pd: a PD of the device that free mkeys name (never one the application frees). */
	CmdProgrammer(mlx5::Device &dev, uint32_t free_pd, uint32_t index_count);
	/* Destroys every mkey it created (errors are logged). */
	~CmdProgrammer() override;
	CmdProgrammer(const CmdProgrammer &) = delete;
	CmdProgrammer &operator=(const CmdProgrammer &) = delete;

	int create_free_mkeys(uint32_t first_index, uint32_t count) override;
	int bind(uint32_t mkey, const mr::BindParams &params) override;
	int revoke(uint32_t mkey) override;

	/* mkeys that exist on the device because of this programmer. */
	size_t created() const;

private:
	int create_free(uint32_t index, uint8_t variant);
	mlx5::Device &dev_;
	const uint32_t free_pd_;
	mutable std::mutex mu_;
	std::vector<bool> exists_; /* by index; under mu_ */
	size_t created_ = 0;	   /* under mu_ */
};

} // namespace nicmr::api

#endif
