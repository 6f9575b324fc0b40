/* SPDX-License-Identifier: BSD-3-Clause */
/* A libnicmr.so.0 that is not nicmr's (no NICMR_0.1 symbols): test/fabric/provider-log.sh puts
 * it where the provider looks for libnicmr.so.0 to see that the provider says why it cannot be
 * loaded. */
int nicmr_stub(void);
int nicmr_stub(void)
{
	return 0;
}
