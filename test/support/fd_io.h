/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Whole reads and writes on a socket or pipe, for the tests whose two processes (fork) trade
 * addresses, keys and requests over a socketpair: false when the peer is gone or the call
 * fails.
 */
#ifndef NICMR_TEST_SUPPORT_FD_IO_H
#define NICMR_TEST_SUPPORT_FD_IO_H

#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace nicmr::test {

inline bool full_write(int fd, const void *p, size_t n)
{
	auto *b = static_cast<const uint8_t *>(p);
	while (n > 0) {
		const ssize_t k = ::write(fd, b, n);
		if (k <= 0)
			return false;
		b += k;
		n -= static_cast<size_t>(k);
	}
	return true;
}

inline bool full_read(int fd, void *p, size_t n)
{
	auto *b = static_cast<uint8_t *>(p);
	while (n > 0) {
		const ssize_t k = ::read(fd, b, n);
		if (k <= 0)
			return false;
		b += k;
		n -= static_cast<size_t>(k);
	}
	return true;
}

} // namespace nicmr::test

#endif
