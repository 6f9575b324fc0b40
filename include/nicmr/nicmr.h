/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * nicmr's native C API.
 *
 * Conventions of every call: it returns 0 (or a non-negative count) on success and a negative
 * errno on failure; it never aborts or exits the process. Which threads may call a function is
 * said in its documentation.
 */
#ifndef NICMR_NICMR_H
#define NICMR_NICMR_H

#ifdef __cplusplus
extern "C" {
#endif

/** The library's version, "major.minor.patch". Any thread. */
const char *nicmr_version(void);

#ifdef __cplusplus
}
#endif

#endif
