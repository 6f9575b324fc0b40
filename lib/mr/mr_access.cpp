/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_access.h"

namespace nicmr::mr {

int access_grant(uint64_t access, uint8_t *bits) noexcept
{
	if (access & ~kNicmrAccessKnown)
		return -EINVAL;
	uint8_t b = access_rights(access);
	if (access & kNicmrAccessIbvRules) {
		/* ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set,
		 * then IBV_ACCESS_LOCAL_WRITE must be set too." RECV or READ, which also give lw,
		 * do not stand in for it: the rule is on the ibv bits. */
		if ((access & (NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_REMOTE_ATOMIC)) &&
		    !(access & NICMR_ACCESS_LOCAL_WRITE))
			return -EINVAL;
		/* ibv_reg_mr(3): "Local read access is always enabled for the MR." */
		b |= kAccessLocalRead;
	} else if (access & NICMR_ACCESS_REMOTE_WRITE) {
		/*
		 * fi_mr(3), FI_REMOTE_WRITE: "the target buffer of an RMA write or atomic
		 * operation", hence rw and a. ConnectX, like verbs, wants lw with rw/a; adding lw
		 * only lets this process's own NIC write into its own buffer, which fi_mr(3)'s
		 * relaxed enforcement permits "provided security is maintained".
		 */
		b |= kAccessRemoteAtomic | kAccessLocalWrite;
	}
	/*
	 * fi_mr(3): "Supported access permissions are the bitwise OR of the following flags". A
	 * zero access is the OR of no flag: it grants nothing (widening it to every right would
	 * not maintain security), so 0 maps to an mkey with no access bit: registration succeeds
	 * and every access through the key fails.
	 */
	*bits = b;
	return 0;
}

int access_window(uint64_t access, uint8_t *bits) noexcept
{
	/* A window grants remote rights alone (its key never serves local access); a window
	 * with none would be no use, so an empty set is refused too (nicmr.h, nicmr_mw_bind). */
	if (access == 0 || (access & ~kNicmrAccessWindow))
		return -EINVAL;
	*bits = access_rights(access);
	return 0;
}

} // namespace nicmr::mr
