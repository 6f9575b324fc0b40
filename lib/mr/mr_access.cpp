/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_access.h"

namespace nicmr::mr {

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
