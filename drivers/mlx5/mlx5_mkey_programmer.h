/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration engine's device seam (lib/mr/mr_programmer.h) over UMR: free mkeys created
 * with CREATE_MKEY (free = 1, umr_en = 1, MTT, room for max_translations entries), bound and
 * revoked with synchronous UMRs on a UmrQueue of its own.
 *
 * Engine indices are device mkey indices: with Caps::mkey_by_index the mkeys are created at
 * the engine's indices; without it the device picks, and create_free_mkeys fails with
 * -EOPNOTSUPP unless it picked exactly the indices asked for.
 */
#ifndef NICMR_MLX5_MKEY_PROGRAMMER_H
#define NICMR_MLX5_MKEY_PROGRAMMER_H

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mlx5_device.h"
#include "mlx5_umr.h"
#include "mr_programmer.h"

namespace nicmr::mlx5 {

struct MkeyProgrammerOptions {
	uint32_t max_translations = 64; /* MTT entries each free mkey can hold (its size) */
	UmrOptions umr;
};

class Mlx5MkeyProgrammer final : public mr::MkeyProgrammer {
public:
	/* dev and its PD must outlive the programmer. Errors: those of UmrQueue::create,
	 * -EINVAL (max_translations 0). */
	static int create(Device &dev, uint32_t pd, const MkeyProgrammerOptions &o,
			  std::unique_ptr<Mlx5MkeyProgrammer> *out);
	~Mlx5MkeyProgrammer() override; /* destroys every mkey it created */

	/* 0; -EINVAL (first 0, or the range above 24 bits); -EOPNOTSUPP (see above); the
	 * command's. On failure the mkeys of this call are destroyed again. */
	int create_free_mkeys(uint32_t first_index, uint32_t count) override;
	/* 0; -EINVAL (len 0, log_page_size outside 12..30, iova_base not congruent with start
	 * modulo the page); -E2BIG (more than max_translations pages); UmrQueue::bind's errors. */
	int bind(uint32_t mkey, const mr::BindParams &p) override;
	/* 0 or UmrQueue::revoke's errors (-EALREADY: free already). */
	int revoke(uint32_t mkey) override;

	UmrQueue &umr() noexcept { return *umr_; }
	size_t mkey_count() const;

private:
	Mlx5MkeyProgrammer(Device &dev, uint32_t pd, const MkeyProgrammerOptions &o)
	    : dev_(dev), pd_(pd), opts_(o)
	{}
	Device &dev_;
	uint32_t pd_;
	MkeyProgrammerOptions opts_;
	std::unique_ptr<UmrQueue> umr_;
	mutable std::mutex mu_; /* guards mkeys_ and the MTT scratch list */
	std::vector<MkeyHandle> mkeys_;
	std::vector<MttEntry> scratch_;
};

} // namespace nicmr::mlx5

#endif
