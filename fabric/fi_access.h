/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fi_mr(3) access flags onto nicmr's one access vocabulary (NICMR_ACCESS_*): the provider's
 * only access mapping, used by fi_mr_reg, fi_mr_regv, fi_mr_regattr and the ops extension's
 * regattr (fi_mr.cpp). The rights each NICMR_ACCESS_* bit grants are lib/mr's to decide
 * (lib/mr/mr_access.h, doc/registration.md "Access mapping"); a set of the six fi_mr bits
 * follows fi_mr(3)'s rules there (REMOTE_WRITE grants remote write and atomics, 0 grants
 * nothing).
 */
#ifndef NICMR_FI_ACCESS_H
#define NICMR_FI_ACCESS_H

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstdint>

#include "nicmr/nicmr.h"

namespace nicmr::fabric {

/*
 * The fi_mr(3) access flags the provider takes. FI_COLLECTIVE is not among them: fi_mr(3) ties
 * it to the FI_COLLECTIVE capability and the FI_MR_COLLECTIVE mr_mode bit, which nicmr never
 * offers (doc/libfabric.md), so it is refused like any other bit.
 */
inline constexpr uint64_t kFiAccess =
	FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

/*
 * Maps fi_access (fi_mr(3) access flags) onto NICMR_ACCESS_* bits, one to one, into *access.
 * Returns 0, or -FI_EINVAL for a bit outside kFiAccess (*access untouched). No lock, no
 * allocation, no system call (registration's fast path).
 */
constexpr int native_access(uint64_t fi_access, uint64_t *access) noexcept
{
	if (fi_access & ~kFiAccess)
		return -FI_EINVAL;
	uint64_t a = 0;
	a |= (fi_access & FI_SEND) ? NICMR_ACCESS_SEND : 0;
	a |= (fi_access & FI_RECV) ? NICMR_ACCESS_RECV : 0;
	a |= (fi_access & FI_READ) ? NICMR_ACCESS_READ : 0;
	a |= (fi_access & FI_WRITE) ? NICMR_ACCESS_WRITE : 0;
	a |= (fi_access & FI_REMOTE_READ) ? NICMR_ACCESS_REMOTE_READ : 0;
	a |= (fi_access & FI_REMOTE_WRITE) ? NICMR_ACCESS_REMOTE_WRITE : 0;
	*access = a;
	return 0;
}

} // namespace nicmr::fabric

#endif
