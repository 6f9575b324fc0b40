/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Whole reads and writes on a socket or pipe, for the tests whose two processes (fork) trade
 * addresses, keys and requests over a socketpair: false when the peer is gone or the call
 * fails. fork_peer starts such a peer and end_peer ends it.
 */
#ifndef NICMR_TEST_SUPPORT_FD_IO_H
#define NICMR_TEST_SUPPORT_FD_IO_H

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
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

/* Forks a peer process that runs body(fd) on its end of a new socketpair and exits with what
 * body returns. The parent gets the child's pid and its own end, whose reads time out after
 * timeout_s seconds so that a peer that hangs fails the test instead of hanging it (the caller
 * kills and reaps the child). 0, or -errno (no child then). */
template <typename Body> int fork_peer(Body &&body, pid_t *child, int *fd, int timeout_s = 20)
{
	int sv[2];
	if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return -errno;
	const pid_t pid = ::fork();
	if (pid < 0) {
		const int e = errno;
		::close(sv[0]);
		::close(sv[1]);
		return -e;
	}
	if (pid == 0) {
		::close(sv[0]);
		::_exit(body(sv[1]));
	}
	::close(sv[1]);
	*child = pid;
	*fd = sv[0];
	const timeval tv{timeout_s, 0};
	return ::setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 ? 0 : -errno;
}

/* Ends a peer fork_peer started (child > 0, fd >= 0 when there is one): a peer that is serving
 * requests gets bye (its exit request, bye_len bytes) and finishes by itself; any other is
 * killed. Closes fd and reaps the child. Its wait status, or -1 when there was no child or it
 * could not be reaped. */
inline int end_peer(pid_t child, int fd, bool serving, const void *bye, size_t bye_len)
{
	if (fd >= 0) {
		if (serving)
			(void)full_write(fd, bye, bye_len);
		::close(fd);
	}
	if (child <= 0)
		return -1;
	if (!serving)
		::kill(child, SIGKILL);
	int st = 0;
	return ::waitpid(child, &st, 0) == child ? st : -1;
}

} // namespace nicmr::test

#endif
