/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Counting the calling thread's lock calls, for tests of "takes no lock". A test program that
 * links lock_count.cpp defines pthread_mutex_lock, pthread_mutex_trylock, pthread_rwlock_rdlock
 * and pthread_rwlock_wrlock itself: calls from the executable, from its static libraries and
 * from the shared libraries it loads (their calls go through the PLT and find the executable's
 * definitions first) are counted, then forwarded to glibc's exported __pthread_* entry points
 * (x86-64 glibc: version GLIBC_2.2.5). std::mutex, std::shared_mutex and std::unique_lock all
 * end there. Link it only without sanitizers, whose runtimes intercept the same functions.
 */
#ifndef NICMR_TEST_LOCK_COUNT_H
#define NICMR_TEST_LOCK_COUNT_H

#include <cstdint>

namespace nicmr::test {

/* Counts this thread's lock calls while it lives. */
class LockCounting {
public:
	LockCounting();
	~LockCounting();
	LockCounting(const LockCounting &) = delete;
	LockCounting &operator=(const LockCounting &) = delete;
	uint64_t locks() const;
};

} // namespace nicmr::test

#endif
