/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Human-readable layout of a pool in a DMA space, for tools (testmr) and log lines. Slow path.
 */
#ifndef NICMR_MEM_DESCRIBE_H
#define NICMR_MEM_DESCRIBE_H

#include <string>

#include "mem_space.h"

namespace nicmr::mem {

/*
 * One line per fact, e.g.
 *   pool "cmdq": 4 MiB = 2 x 2 MiB pages, backend memfd (fd 7), NUMA node any
 *     VA   [0x7f2a40000000, 0x7f2a40400000)
 *     IOVA [0x40000000, 0x40400000) aligned 4 MiB (iova % align == va % align)
 */
std::string describe(const PoolEntry &entry);

/* The pool alone (no IOVA): first line of describe(). */
std::string describe(const Pool &pool);

/* "4 KiB", "2 MiB", "1 GiB", "3 MiB", "1536 B". */
std::string format_size(size_t bytes);

const char *backend_name(PoolBackend backend);

} // namespace nicmr::mem

#endif
