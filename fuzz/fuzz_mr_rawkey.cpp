/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target: raw keys arrive from other processes and other machines, so decode_raw_key
 * sees untrusted bytes. Nothing may crash it, and anything it accepts must encode back to the
 * same bytes (a decoder that accepts garbage would map it).
 */
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "mr_rawkey.h"

using namespace nicmr::mr;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	RawKey key;
	if (decode_raw_key(data, size, kAnyDevice, &key) != 0)
		return 0;
	uint8_t again[kRawKeySize];
	size_t len = sizeof(again);
	if (encode_raw_key(key, again, &len) != 0 || len > size ||
	    std::memcmp(again, data, len) != 0)
		std::abort();
	return 0;
}
