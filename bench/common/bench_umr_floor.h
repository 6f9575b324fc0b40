/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The floor of a registration on a device: a UMR bind of a free mkey (free = 1, umr_en = 1, one
 * MTT entry) over 4 KiB and its revoke, each one WQE and its completion on a UmrQueue of the
 * device (mlx5_umr.h). A native reg + dereg pair does the same two round trips plus the
 * engine's and the API's work, so it cannot cost less. bench-dataplane's BM_UmrBindRevoke and
 * the floor of bench-mr's and bench-fi-mr's last lines (bench_native.h) time this one path.
 */
#ifndef NICMR_BENCH_UMR_FLOOR_H
#define NICMR_BENCH_UMR_FLOOR_H

#include <cstdint>
#include <memory>

#include "mlx5_device.h"
#include "mlx5_umr.h"

namespace nicmr::bench {

class UmrFloor {
public:
	/* A UMR queue and a free mkey of its own on dev, both on pd (which must outlive this
	 * object, as dev must); bind() will translate [va, va + 4 KiB) to iova. 0, or the error of
	 * UmrQueue::create or CREATE_MKEY. */
	int create(mlx5::Device &dev, uint32_t pd, uint64_t va, uint64_t iova)
	{
		int rc = mlx5::UmrQueue::create(dev, pd, {}, &umr_);
		if (rc != 0)
			return rc;
		mlx5::MkeyCreate c;
		c.ctx.pd = pd;
		c.ctx.lr = true;
		c.ctx.variant = kVariant;
		c.ctx.free = true;
		c.ctx.umr_en = true;
		c.ctx.translations_octword_size = 1;
		if ((rc = mlx5::MkeyHandle::create(dev, c, &mkey_)) != 0)
			return rc;
		describe(mkey_.index() << 8 | kVariant, pd, va, iova);
		return 0;
	}
	/*
	 * The same on a device whose mkeys the registration engine created every one of (the
	 * native API's: CREATE_MKEY finds the table full): a UMR queue on queue_pd (the PD the
	 * engine's free mkeys were created on, as its programmer's queues are) and `mkey`, an mkey
	 * of umr_en = 1 the caller holds (a registration's key) and keeps live meanwhile; binds
	 * give it PD pd. The caller revokes it before the first bind() and binds it again after the
	 * last revoke(), so that its registration ends as it began. 0 or UmrQueue::create's error.
	 */
	int borrow(mlx5::Device &dev, uint32_t queue_pd, uint32_t mkey, uint32_t pd, uint64_t va,
		   uint64_t iova)
	{
		int rc = mlx5::UmrQueue::create(dev, queue_pd, {}, &umr_);
		if (rc == 0)
			describe(mkey, pd, va, iova);
		return rc;
	}
	/* One round trip each: 0 or UmrQueue::bind's / revoke's error. */
	int bind() { return umr_->bind(u_); }
	int revoke() { return umr_->revoke(u_.mkey); }
	/* Destroys the queue, then the mkey (before the device or the PD goes). */
	void reset()
	{
		umr_.reset();
		mkey_.reset();
	}

private:
	static constexpr uint8_t kVariant = 0x5a;
	void describe(uint32_t mkey, uint32_t pd, uint64_t va, uint64_t iova)
	{
		mtt_ = {iova, true, true};
		u_.mkey = mkey;
		u_.lr = u_.rw = true;
		u_.pd = pd;
		u_.start = va;
		u_.len = 4096;
		u_.mtt = {&mtt_, 1};
	}
	/* Destroyed in reverse order: the queue before the mkey it binds. */
	mlx5::MkeyHandle mkey_;
	std::unique_ptr<mlx5::UmrQueue> umr_;
	mlx5::MttEntry mtt_;
	mlx5::UmrBind u_;
};

} // namespace nicmr::bench

#endif
