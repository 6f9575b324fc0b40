/* SPDX-License-Identifier: BSD-3-Clause */
#include "mr_access.h"

#include <cerrno>

namespace nicmr::mr {

int access_from_fi(uint64_t fi_access, uint8_t *bits) noexcept
{
	constexpr uint64_t known = kFiCollective | kFiRead | kFiWrite | kFiRecv | kFiSend |
				   kFiRemoteRead | kFiRemoteWrite;
	if (fi_access & ~known)
		return -EINVAL;
	/*
	 * fi_mr(3): "Supported access permissions are the bitwise OR of the following flags", and
	 * relaxed enforcement is allowed only "provided security is maintained". A zero access is
	 * the OR of no flag: it grants nothing, and widening it to every right would not maintain
	 * security, so 0 maps to an mkey with no access bit (registration succeeds; every access
	 * through the key fails).
	 */
	uint8_t b = 0;
	/* FI_SEND, FI_WRITE: the NIC reads the buffer to put it on the wire. */
	if (fi_access & (kFiSend | kFiWrite))
		b |= kAccessLocalRead;
	/* FI_RECV, FI_READ: the NIC writes into the buffer (receive, RMA read or atomic result). */
	if (fi_access & (kFiRecv | kFiRead))
		b |= kAccessLocalWrite;
	if (fi_access & kFiRemoteRead)
		b |= kAccessRemoteRead;
	/*
	 * FI_REMOTE_WRITE: "the target buffer of an RMA write or atomic operation", hence rw and a.
	 * ConnectX, like verbs, wants lw with rw/a; adding lw only lets this process's own NIC
	 * write into its own buffer, which the relaxed-enforcement rule permits.
	 */
	if (fi_access & kFiRemoteWrite)
		b |= kAccessRemoteWrite | kAccessRemoteAtomic | kAccessLocalWrite;
	/* FI_COLLECTIVE adds no right of its own: it is paired with FI_SEND and/or FI_RECV. */
	*bits = b;
	return 0;
}

int access_from_ibv(unsigned ibv_access, uint8_t *bits) noexcept
{
	constexpr unsigned known =
		kIbvLocalWrite | kIbvRemoteWrite | kIbvRemoteRead | kIbvRemoteAtomic | kIbvMwBind;
	if (ibv_access & ~known)
		return -EINVAL;
	/* ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
	 * IBV_ACCESS_LOCAL_WRITE must be set too." */
	if ((ibv_access & (kIbvRemoteWrite | kIbvRemoteAtomic)) && !(ibv_access & kIbvLocalWrite))
		return -EINVAL;
	/* ibv_reg_mr(3): "Local read access is always enabled for the MR." */
	uint8_t b = kAccessLocalRead;
	if (ibv_access & kIbvLocalWrite)
		b |= kAccessLocalWrite;
	if (ibv_access & kIbvRemoteWrite)
		b |= kAccessRemoteWrite;
	if (ibv_access & kIbvRemoteRead)
		b |= kAccessRemoteRead;
	if (ibv_access & kIbvRemoteAtomic)
		b |= kAccessRemoteAtomic;
	if (ibv_access & kIbvMwBind)
		b |= kAccessMwBind;
	*bits = b;
	return 0;
}

} // namespace nicmr::mr
