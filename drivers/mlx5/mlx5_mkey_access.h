/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The one place where lib/mr's mkey access bits (mr::MkeyAccess) become the access fields of
 * an mkey context: lr, lw, rr, rw, a (PRM.md, "mkey context"). CREATE_MKEY (MkeyContext, the
 * command and KLM programmers) and UMR (UmrBind, the mkey programmer) both take them from
 * here, so the two device paths cannot grant different rights for the same bits.
 *
 *   kAccessLocalRead    -> lr      kAccessRemoteWrite  -> rw
 *   kAccessLocalWrite   -> lw      kAccessRemoteAtomic -> a
 *   kAccessRemoteRead   -> rr      kAccessMwBind       -> (none: host state of the engine)
 */
#ifndef NICMR_MLX5_MKEY_ACCESS_H
#define NICMR_MLX5_MKEY_ACCESS_H

#include <cstdint>

#include "mr_access.h"

namespace nicmr::mlx5 {

/* Writes access (MkeyAccess bits) into the lr/lw/rr/rw/a fields of f: an MkeyContext or a
 * UmrBind. Hot path (the UMR bind): no lock, no allocation. */
template <class Fields> inline void set_mkey_access(Fields &f, uint8_t access) noexcept
{
	f.lr = (access & mr::kAccessLocalRead) != 0;
	f.lw = (access & mr::kAccessLocalWrite) != 0;
	f.rr = (access & mr::kAccessRemoteRead) != 0;
	f.rw = (access & mr::kAccessRemoteWrite) != 0;
	f.a = (access & mr::kAccessRemoteAtomic) != 0;
}

} // namespace nicmr::mlx5

#endif
