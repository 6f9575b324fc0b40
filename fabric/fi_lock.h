/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef NICMR_FI_LOCK_H
#define NICMR_FI_LOCK_H

#include <mutex>

namespace nicmr::fabric {

/*
 * The lock of an endpoint, CQ, counter or AV. Under FI_THREAD_DOMAIN and FI_THREAD_COMPLETION
 * the application serialises its calls on the objects such a lock guards (fi_domain(3)), so the
 * domain opens them with the lock made a no-op: posting and completion paths then take no lock.
 * Under FI_THREAD_SAFE (the default) it is a mutex. set_noop only before the object is shared.
 */
class FiLock {
public:
	void set_noop(bool noop) noexcept { noop_ = noop; }
	bool noop() const noexcept { return noop_; }
	void lock()
	{
		if (!noop_)
			mu_.lock();
	}
	void unlock()
	{
		if (!noop_)
			mu_.unlock();
	}

private:
	std::mutex mu_;
	bool noop_ = false;
};

} // namespace nicmr::fabric

#endif
