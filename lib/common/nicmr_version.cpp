/* SPDX-License-Identifier: BSD-3-Clause */
#include "nicmr/nicmr.h"
#include "nicmr_config.h"

extern "C" const char *nicmr_version(void)
{
	return NICMR_VERSION;
}
