/* SPDX-License-Identifier: BSD-3-Clause */
#include "lock_count.h"

#include <pthread.h>

/* glibc's own entry points, exported under the GLIBC_2.2.5 version only (not the default one,
 * so they are bound by version). */
__asm__(".symver libc_mutex_lock, __pthread_mutex_lock@GLIBC_2.2.5");
__asm__(".symver libc_mutex_trylock, __pthread_mutex_trylock@GLIBC_2.2.5");
__asm__(".symver libc_rwlock_rdlock, __pthread_rwlock_rdlock@GLIBC_2.2.5");
__asm__(".symver libc_rwlock_wrlock, __pthread_rwlock_wrlock@GLIBC_2.2.5");
extern "C" {
int libc_mutex_lock(pthread_mutex_t *m);
int libc_mutex_trylock(pthread_mutex_t *m);
int libc_rwlock_rdlock(pthread_rwlock_t *l);
int libc_rwlock_wrlock(pthread_rwlock_t *l);
}

namespace {
thread_local bool t_counting = false;
thread_local uint64_t t_locks = 0;

/* Counts the call (while this thread counts), then locks through glibc. */
template <typename Lock, int (*Libc)(Lock *)> int counted(Lock *l) noexcept
{
	if (t_counting)
		t_locks++;
	return Libc(l);
}
} // namespace

extern "C" {
int pthread_mutex_lock(pthread_mutex_t *m)
{
	return counted<pthread_mutex_t, libc_mutex_lock>(m);
}
int pthread_mutex_trylock(pthread_mutex_t *m)
{
	return counted<pthread_mutex_t, libc_mutex_trylock>(m);
}
int pthread_rwlock_rdlock(pthread_rwlock_t *l)
{
	return counted<pthread_rwlock_t, libc_rwlock_rdlock>(l);
}
int pthread_rwlock_wrlock(pthread_rwlock_t *l)
{
	return counted<pthread_rwlock_t, libc_rwlock_wrlock>(l);
}
}

namespace nicmr::test {

LockCounting::LockCounting()
{
	t_locks = 0;
	t_counting = true;
}

LockCounting::~LockCounting()
{
	t_counting = false;
}

uint64_t LockCounting::locks() const
{
	return t_locks;
}

} // namespace nicmr::test
