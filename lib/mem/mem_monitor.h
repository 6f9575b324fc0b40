/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UnmapMonitor: tells caches of translations when memory they hold leaves the process, so that
 * a buffer freed and mapped again at the same address is never served an old registration.
 * One per process (a page range can belong to one userfaultfd only), shared by its subscribers.
 *
 *   watch(va, len)         UFFDIO_REGISTER, mode WP, of the 4 KiB-aligned range on the
 *                          process's userfaultfd (features EVENT_UNMAP, EVENT_REMOVE,
 *                          EVENT_REMAP); no page is write-protected, so no fault ever reaches
 *                          the monitor: the registration only asks for the events
 *   reader thread          poll(uffd, stop) -> reading++ -> read the queued events -> queue
 *                          their ranges, pending += n -> reading--
 *   worker thread          each queued range -> every subscriber's invalidate(start, end)
 *                          -> pending--
 *   wait_idle()            returns once reading == 0 and pending == 0
 *
 * The kernel queues UNMAP after the pages are gone and holds the unmapping call (munmap, brk,
 * mremap, madvise MADV_DONTNEED / MADV_REMOVE) until the event is read (fs/userfaultfd.c,
 * userfaultfd_event_wait_completion). reading is raised before the read and pending lowered
 * only after the subscribers invalidated, so a subscriber that calls wait_idle() before it
 * looks an address up, after the unmapping call returned, finds the invalidation done. A
 * lookup that races with an unmapping call of another thread that has not yet returned is not
 * covered (doc/mem.md).
 * Two threads, because a subscriber's invalidation may itself unmap watched memory (a heap
 * trim in free() while it deregisters): that call waits for the reader, which never waits for
 * a subscriber.
 *
 * fork: the child has none of the parent's threads, and its copies of the watched ranges are no
 * longer watched (no EVENT_FORK); subscribe() in the child makes a monitor of its own, and the
 * parent's copy is left alone (never joined, its descriptors closed).
 *
 * Slow path throughout: every call may make system calls and take the monitor's lock.
 */
#ifndef NICMR_MEM_MONITOR_H
#define NICMR_MEM_MONITOR_H

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace nicmr::mem {

class UnmapMonitor {
public:
	/* What a cache implements: called on the monitor's thread, for every range that left
	 * (or was emptied in) the process; [start, end) page-aligned. */
	struct Subscriber {
		virtual void invalidate(uintptr_t start, uintptr_t end) noexcept = 0;

	protected:
		~Subscriber() = default;
	};

	/*
	 * The process's monitor (made on the first call), with s subscribed. 0; -EPERM (the
	 * kernel refuses userfaultfd to this process: vm.unprivileged_userfaultfd=0 and no
	 * CAP_SYS_PTRACE, even in user-mode-only), -EOPNOTSUPP (no userfaultfd, or without the
	 * unmap, remove and remap events), -EMFILE, -ENOMEM, another errno of the setup negated.
	 */
	static int subscribe(Subscriber *s, std::shared_ptr<UnmapMonitor> *out);
	/* Unsubscribes s: once it returns, s gets no more calls. */
	void unsubscribe(Subscriber *s);

	/* Asks for the events of [va, va + len) (4 KiB-aligned outward). 0; -EINVAL (memory the
	 * kernel cannot watch: a file mapping other than shmem and hugetlbfs, a range with a hole),
	 * -EBUSY (another userfaultfd watches it), another ioctl errno negated. */
	int watch(uintptr_t va, size_t len);

	/* Returns once no event read is waiting for its invalidation (see the picture). */
	void wait_idle() const noexcept;

	/* Events handled so far, and whether the userfaultfd is user-mode-only (stats, tests). */
	uint64_t events() const noexcept { return events_.load(std::memory_order_relaxed); }
	bool user_mode_only() const noexcept { return user_mode_only_; }

	~UnmapMonitor();
	UnmapMonitor(const UnmapMonitor &) = delete;
	UnmapMonitor &operator=(const UnmapMonitor &) = delete;

private:
	UnmapMonitor() = default;
	void read_events();
	void work();
	void deliver(uintptr_t start, uintptr_t end);

	int uffd_ = -1;
	int stop_ = -1; /* eventfd: the destructor's wake-up of the reader */
	bool user_mode_only_ = false;
	/* Pointers: a forked child's copy leaks them instead of joining threads it lacks. */
	std::unique_ptr<std::thread> reader_, worker_;
	int pid_ = 0; /* the process that made it (a forked child makes its own) */
	std::mutex subs_mu_;
	std::vector<Subscriber *> subs_; /* subs_mu_ */
	std::mutex q_mu_;
	std::condition_variable q_cv_;
	std::deque<std::pair<uintptr_t, uintptr_t>> queue_; /* q_mu_ */
	bool stopping_ = false;				    /* q_mu_ */
	std::atomic<uint32_t> reading_{0};		    /* reads in progress (the reader's) */
	std::atomic<uint64_t> pending_{0}; /* ranges read and not yet invalidated */
	std::atomic<uint64_t> events_{0};
};

} // namespace nicmr::mem

#endif
