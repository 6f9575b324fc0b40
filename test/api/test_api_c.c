/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nicmr.h is valid C11: this file includes it with -std=c11 -pedantic-errors, and opens and
 * closes an emulated device through the C API as a C program would.
 */
#include <errno.h>
#include <stdio.h>

#include <nicmr/nicmr.h>

int main(void)
{
	struct nicmr_device *dev = NULL;
	struct nicmr_device_attr attr;
	int rc = nicmr_device_open("nosuch:thing", &dev);
	if (rc != -EINVAL) {
		fprintf(stderr, "bad spec gave %d, want %d\n", rc, -EINVAL);
		return 1;
	}
	rc = nicmr_device_open("emu:mkeys=1024", &dev);
	if (rc != 0) {
		fprintf(stderr, "open emu: %d\n", rc);
		return 1;
	}
	rc = nicmr_device_query(dev, &attr);
	if (rc != 0 || attr.mkey_count != 1024 || attr.device_id == 0 ||
	    attr.atomic_mode != NICMR_ATOMIC_HOST) {
		fprintf(stderr, "query: %d, %u keys, atomic mode %u\n", rc,
			(unsigned)attr.mkey_count, (unsigned)attr.atomic_mode);
		return 1;
	}
	rc = nicmr_device_close(dev);
	if (rc != 0) {
		fprintf(stderr, "close: %d\n", rc);
		return 1;
	}
	printf("nicmr %s: C API ok\n", nicmr_version());
	return 0;
}
