/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Access rights: nicmr's one vocabulary (NICMR_ACCESS_*, include/nicmr/nicmr.h) mapped onto the
 * access bits of an mkey context (lr, lw, rr, rw, a) plus the memory-window bind right, in one
 * place (doc/registration.md, "Access mapping"):
 *
 *   NICMR_ACCESS_*  --access_rights()-->  the mkey right each bit names
 *                      |-- access_need():   what a key lookup or a posted SGE needs (hot path)
 *                      |-- access_grant():  what a registration or a sub-MR grants (fi_mr(3)'s
 *                      |                    or ibv_reg_mr(3)'s rules on top)
 *                      '-- access_window(): what a memory window grants (remote rights only)
 *
 * Application vocabularies stop above: the provider maps fi_mr(3)'s FI_* onto NICMR_ACCESS_*
 * (fabric/fi_access.h), and the driver maps the mkey bits onto mkey context fields. Every mkey
 * the engine programs satisfies one invariant, checked by access_valid(): remote write or
 * remote atomic implies local write.
 */
#ifndef NICMR_MR_ACCESS_H
#define NICMR_MR_ACCESS_H

#include <cerrno>
#include <cstdint>

#include "nicmr/nicmr.h"

namespace nicmr::mr {

/* mkey access bits (names of the mkey context fields in PRM.md). */
enum MkeyAccess : uint8_t {
	kAccessLocalRead = 1u << 0,    /* lr */
	kAccessLocalWrite = 1u << 1,   /* lw */
	kAccessRemoteRead = 1u << 2,   /* rr */
	kAccessRemoteWrite = 1u << 3,  /* rw */
	kAccessRemoteAtomic = 1u << 4, /* a */
	kAccessMwBind = 1u << 5,       /* memory windows may be bound to the region */
};
inline constexpr uint8_t kAccessAll = 0x3f;
/* Remote rights a memory window may grant. */
inline constexpr uint8_t kWindowAccess =
	kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic;

/* Every NICMR_ACCESS_* bit; any other bit is -EINVAL wherever access is taken. */
inline constexpr uint64_t kNicmrAccessKnown =
	NICMR_ACCESS_SEND | NICMR_ACCESS_RECV | NICMR_ACCESS_READ | NICMR_ACCESS_WRITE |
	NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_LOCAL_WRITE |
	NICMR_ACCESS_REMOTE_ATOMIC | NICMR_ACCESS_MW_BIND;
/* A grant that holds one of these follows ibv_reg_mr(3)'s rules, else fi_mr(3)'s (nicmr.h). */
inline constexpr uint64_t kNicmrAccessIbvRules =
	NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_ATOMIC | NICMR_ACCESS_MW_BIND;
/* The bits a memory window may be bound with. */
inline constexpr uint64_t kNicmrAccessWindow =
	NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_REMOTE_ATOMIC;

/*
 * The one mapping: the mkey right each NICMR_ACCESS_* bit names, ORed over access (unknown bits
 * ignored: the callers below refuse them). SEND and WRITE put the buffer on the wire (the NIC
 * reads it: lr); RECV, READ and LOCAL_WRITE have the NIC write into it (receive, RMA read or
 * atomic result: lw); each REMOTE_* bit is its remote right; MW_BIND the bind right.
 */
constexpr uint8_t access_rights(uint64_t access) noexcept
{
	uint8_t b = 0;
	if (access & (NICMR_ACCESS_SEND | NICMR_ACCESS_WRITE))
		b |= kAccessLocalRead;
	if (access & (NICMR_ACCESS_RECV | NICMR_ACCESS_READ | NICMR_ACCESS_LOCAL_WRITE))
		b |= kAccessLocalWrite;
	if (access & NICMR_ACCESS_REMOTE_READ)
		b |= kAccessRemoteRead;
	if (access & NICMR_ACCESS_REMOTE_WRITE)
		b |= kAccessRemoteWrite;
	if (access & NICMR_ACCESS_REMOTE_ATOMIC)
		b |= kAccessRemoteAtomic;
	if (access & NICMR_ACCESS_MW_BIND)
		b |= kAccessMwBind;
	return b;
}

/*
 * Needs: the rights an operation asks of a key (nicmr_key_lookup, the data path's local SGE
 * checks), each bit exactly its right. HOT PATH: no lock, no allocation, no system call.
 * Returns 0, or -EINVAL for a bit that is not NICMR_ACCESS_*.
 */
constexpr int access_need(uint64_t access, uint8_t *bits) noexcept
{
	if (access & ~kNicmrAccessKnown)
		return -EINVAL;
	*bits = access_rights(access);
	return 0;
}

/*
 * Grants: the rights a registration (nicmr_mr_reg, nicmr_mr_regv and its kin) or a sub-MR
 * (nicmr_mr_reg_sub) gives its key. A set with LOCAL_WRITE, REMOTE_ATOMIC or MW_BIND follows
 * ibv_reg_mr(3) (local read always; REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is
 * -EINVAL); any other set follows fi_mr(3) (0 grants nothing; REMOTE_WRITE grants rw, a and lw).
 * Returns 0, or -EINVAL (a bit that is not NICMR_ACCESS_*, or ibv_reg_mr(3)'s rule broken).
 * The result always satisfies access_valid().
 */
inline int access_grant(uint64_t access, uint8_t *bits) noexcept
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

/*
 * Window grants: the rights a memory window is bound with (nicmr_mw_bind), each bit exactly its
 * right: a non-empty set of REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC (a window's key never
 * serves local access). Returns 0, or -EINVAL (empty, or any other bit).
 */
int access_window(uint64_t access, uint8_t *bits) noexcept;

/* True when bits holds only known mkey bits and rw/a come with lw. */
constexpr bool access_valid(uint8_t bits) noexcept
{
	if (bits & ~kAccessAll)
		return false;
	if ((bits & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(bits & kAccessLocalWrite))
		return false;
	return true;
}

/* True when every bit of need is granted by have (a sub-MR or a lookup asks this). */
constexpr bool access_covers(uint8_t have, uint8_t need) noexcept
{
	return (need & ~have) == 0;
}

/* The other way: every NICMR_ACCESS_* bit whose need the mkey bits cover, i.e. what a lookup
 * of the key may ask (nicmr_mr_query). access_granted(access_rights(a)) covers a. */
constexpr uint64_t access_granted(uint8_t bits) noexcept
{
	uint64_t a = 0;
	for (uint64_t bit = 1; bit <= NICMR_ACCESS_MW_BIND; bit <<= 1)
		if ((bit & kNicmrAccessKnown) && access_covers(bits, access_rights(bit)))
			a |= bit;
	return a;
}
static_assert(access_granted(kAccessLocalRead) == (NICMR_ACCESS_SEND | NICMR_ACCESS_WRITE));
static_assert(access_granted(0) == 0);
static_assert(access_granted(kAccessAll) == kNicmrAccessKnown);

} // namespace nicmr::mr

#endif
