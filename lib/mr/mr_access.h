/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Access rules: the two application vocabularies (libfabric fi_mr access flags and verbs
 * ibv_access_flags) mapped onto the access bits of an mkey context (lr, lw, rr, rw, a) plus
 * the memory-window bind right. Every mkey the engine programs satisfies one invariant,
 * checked by access_valid(): remote write or remote atomic implies local write.
 */
#ifndef NICMR_MR_ACCESS_H
#define NICMR_MR_ACCESS_H

#include <cstdint>

#include "nicmr_config.h"

#if NICMR_HAVE_LIBFABRIC
#include <rdma/fabric.h>
#endif
#if NICMR_HAVE_RDMA_CORE
#include <infiniband/verbs.h>
#endif

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

/*
 * fi_mr(3) access flags. With libfabric's headers these are the header's values; without them
 * nicmr defines the same numbers (libfabric 1.17 <rdma/fabric.h>) so that the native API and the
 * provider agree bit for bit.
 */
#if NICMR_HAVE_LIBFABRIC
inline constexpr uint64_t kFiCollective = FI_COLLECTIVE;
inline constexpr uint64_t kFiRead = FI_READ;
inline constexpr uint64_t kFiWrite = FI_WRITE;
inline constexpr uint64_t kFiRecv = FI_RECV;
inline constexpr uint64_t kFiSend = FI_SEND;
inline constexpr uint64_t kFiRemoteRead = FI_REMOTE_READ;
inline constexpr uint64_t kFiRemoteWrite = FI_REMOTE_WRITE;
#else
inline constexpr uint64_t kFiCollective = 1ull << 6;
inline constexpr uint64_t kFiRead = 1ull << 8;
inline constexpr uint64_t kFiWrite = 1ull << 9;
inline constexpr uint64_t kFiRecv = 1ull << 10;
inline constexpr uint64_t kFiSend = 1ull << 11;
inline constexpr uint64_t kFiRemoteRead = 1ull << 12;
inline constexpr uint64_t kFiRemoteWrite = 1ull << 13;
#endif

/* ibv_reg_mr(3) access flags: the installed verbs header's values, or the same numbers. */
#if NICMR_HAVE_RDMA_CORE
inline constexpr unsigned kIbvLocalWrite = IBV_ACCESS_LOCAL_WRITE;
inline constexpr unsigned kIbvRemoteWrite = IBV_ACCESS_REMOTE_WRITE;
inline constexpr unsigned kIbvRemoteRead = IBV_ACCESS_REMOTE_READ;
inline constexpr unsigned kIbvRemoteAtomic = IBV_ACCESS_REMOTE_ATOMIC;
inline constexpr unsigned kIbvMwBind = IBV_ACCESS_MW_BIND;
#else
inline constexpr unsigned kIbvLocalWrite = 1u << 0;
inline constexpr unsigned kIbvRemoteWrite = 1u << 1;
inline constexpr unsigned kIbvRemoteRead = 1u << 2;
inline constexpr unsigned kIbvRemoteAtomic = 1u << 3;
inline constexpr unsigned kIbvMwBind = 1u << 4;
#endif

/*
 * Maps fi_mr access flags to mkey bits.
 * Returns 0, or -EINVAL for a bit that is not one of fi_mr(3)'s access flags.
 */
int access_from_fi(uint64_t fi_access, uint8_t *bits) noexcept;

/*
 * Maps ibv_reg_mr access flags to mkey bits.
 * Returns 0, or -EINVAL for an unknown bit or for remote write/atomic without local write.
 */
int access_from_ibv(unsigned ibv_access, uint8_t *bits) noexcept;

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

} // namespace nicmr::mr

#endif
