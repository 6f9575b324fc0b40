/* SPDX-License-Identifier: BSD-3-Clause */
/* The process's unmap monitor over userfaultfd (mem_monitor.h has the picture). */
#include "mem_monitor.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "nicmr_log.h"

namespace nicmr::mem {

namespace {

constexpr const char *kLog = "mem";
constexpr uintptr_t kPage = 4096;

/* The events a cache needs: the pages leave (munmap, brk, mremap's old range) or are emptied
 * (MADV_DONTNEED, MADV_REMOVE). userfaultfd(2), ioctl_userfaultfd(2). */
constexpr uint64_t kNeeded =
	UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;

std::mutex &instance_mu()
{
	static std::mutex mu;
	return mu;
}
std::weak_ptr<UnmapMonitor> &instance()
{
	static std::weak_ptr<UnmapMonitor> w;
	return w;
}

/*
 * A userfaultfd. Unprivileged processes get one only in user-mode-only form while
 * vm.unprivileged_userfaultfd is 0 (Linux 5.11, fs/userfaultfd.c: userfaultfd_syscall_allowed);
 * the unmap events are delivered all the same (user_mode_only only limits which page faults
 * the fd handles, and the monitor handles none).
 */
int open_uffd(bool *user_mode_only)
{
	const int flags = O_CLOEXEC | O_NONBLOCK;
	int fd = int(syscall(SYS_userfaultfd, flags));
	*user_mode_only = false;
	if (fd < 0 && errno == EPERM) {
		fd = int(syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY));
		*user_mode_only = fd >= 0;
	}
	if (fd < 0)
		return errno == ENOSYS ? -EOPNOTSUPP : -errno;
	return fd;
}

} // namespace

int UnmapMonitor::subscribe(Subscriber *s, std::shared_ptr<UnmapMonitor> *out)
{
	if (s == nullptr || out == nullptr)
		return -EINVAL;
	std::lock_guard lk(instance_mu());
	std::shared_ptr<UnmapMonitor> m = instance().lock();
	if (m && m->pid_ != getpid())
		m.reset(); /* the parent's, copied by fork: its threads are not here */
	if (!m) {
		bool umo = false;
		/* UFFDIO_API may be called once per fd: a first fd asks what the kernel offers,
		 * the second asks for what is needed of it. */
		int probe = open_uffd(&umo);
		if (probe < 0)
			return probe;
		uffdio_api api{};
		api.api = UFFD_API;
		const int prc = ioctl(probe, UFFDIO_API, &api);
		const int perr = errno;
		close(probe);
		if (prc != 0)
			return -perr;
		if ((api.features & kNeeded) != kNeeded) {
			NICMR_LOG(warn, kLog,
				  "userfaultfd lacks the unmap, remove or remap events (features "
				  "%#llx)",
				  static_cast<unsigned long long>(api.features));
			return -EOPNOTSUPP;
		}
		const uint64_t want = kNeeded | (api.features & UFFD_FEATURE_WP_HUGETLBFS_SHMEM);
		try {
			m.reset(new UnmapMonitor());
		} catch (...) {
			return -ENOMEM;
		}
		m->uffd_ = open_uffd(&m->user_mode_only_);
		if (m->uffd_ < 0) {
			const int rc = m->uffd_;
			m->uffd_ = -1;
			return rc;
		}
		api = {};
		api.api = UFFD_API;
		api.features = want;
		if (ioctl(m->uffd_, UFFDIO_API, &api) != 0)
			return -errno;
		m->pid_ = getpid();
		m->stop_ = eventfd(0, EFD_CLOEXEC);
		if (m->stop_ < 0)
			return -errno;
		try {
			m->worker_ = std::make_unique<std::thread>([mp = m.get()] { mp->work(); });
			m->reader_ = std::make_unique<std::thread>(
				[mp = m.get()] { mp->read_events(); });
		} catch (...) {
			return -ENOMEM; /* the destructor stops the thread that started */
		}
		instance() = m;
	}
	try {
		std::lock_guard sl(m->subs_mu_);
		m->subs_.push_back(s);
	} catch (...) {
		return -ENOMEM;
	}
	*out = std::move(m);
	return 0;
}

void UnmapMonitor::unsubscribe(Subscriber *s)
{
	/* The monitor thread calls subscribers under subs_mu_: once we hold it, no call to s is
	 * running, and none starts after. */
	std::lock_guard sl(subs_mu_);
	subs_.erase(std::remove(subs_.begin(), subs_.end(), s), subs_.end());
}

UnmapMonitor::~UnmapMonitor()
{
	if (pid_ != getpid()) {
		/* A forked child's copy: the threads are the parent's, and a write to stop_
		 * would stop the parent's reader. */
		(void)reader_.release();
		(void)worker_.release();
		if (uffd_ >= 0)
			close(uffd_);
		if (stop_ >= 0)
			close(stop_);
		return;
	}
	if (reader_ && reader_->joinable()) {
		const uint64_t one = 1;
		if (write(stop_, &one, sizeof(one)) != sizeof(one))
			NICMR_LOG(error, kLog, "unmap monitor: cannot wake its reader: %s",
				  std::strerror(errno));
		reader_->join();
	}
	if (worker_ && worker_->joinable()) {
		{
			std::lock_guard lk(q_mu_);
			stopping_ = true;
		}
		q_cv_.notify_all();
		worker_->join();
	}
	/* Closing the userfaultfd drops every range it watches (fs/userfaultfd.c,
	 * userfaultfd_release). */
	if (uffd_ >= 0)
		close(uffd_);
	if (stop_ >= 0)
		close(stop_);
}

int UnmapMonitor::watch(uintptr_t va, size_t len)
{
	const uintptr_t start = va & ~(kPage - 1);
	const uintptr_t end = (va + len + kPage - 1) & ~(kPage - 1);
	if (len == 0 || end <= start)
		return -EINVAL;
	uffdio_register r{};
	r.range.start = start;
	r.range.len = end - start;
	/* WP mode with no page write-protected: the VMA carries our context (so its unmap and
	 * remove events come to us) and no page fault does (ioctl_userfaultfd(2)). */
	r.mode = UFFDIO_REGISTER_MODE_WP;
	if (ioctl(uffd_, UFFDIO_REGISTER, &r) != 0)
		return -errno;
	return 0;
}

void UnmapMonitor::wait_idle() const noexcept
{
	/* reading first: once it is seen 0 after a read, that read's ranges are counted in
	 * pending (the reader adds them before it lowers reading, release / acquire). Acquire
	 * on pending: pairs with the worker's release after the invalidation. */
	for (unsigned spins = 0; reading_.load(std::memory_order_seq_cst) != 0 ||
				 pending_.load(std::memory_order_acquire) != 0;
	     spins++)
		if (spins >= 64)
			std::this_thread::yield();
}

void UnmapMonitor::deliver(uintptr_t start, uintptr_t end)
{
	std::lock_guard sl(subs_mu_);
	for (Subscriber *s : subs_)
		s->invalidate(start, end);
}

void UnmapMonitor::work()
{
	std::unique_lock lk(q_mu_);
	for (;;) {
		q_cv_.wait(lk, [this] { return stopping_ || !queue_.empty(); });
		if (queue_.empty())
			return; /* stopping, nothing left */
		const auto [start, end] = queue_.front();
		queue_.pop_front();
		/* Not under q_mu_: the reader queues while subscribers invalidate. */
		lk.unlock();
		deliver(start, end);
		/* Release: the invalidation happens before a wait_idle() that sees the drop. */
		pending_.fetch_sub(1, std::memory_order_release);
		lk.lock();
	}
}

void UnmapMonitor::read_events()
{
	pollfd fds[2] = {{uffd_, POLLIN, 0}, {stop_, POLLIN, 0}};
	for (;;) {
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			NICMR_LOG(error, kLog, "unmap monitor: poll: %s", std::strerror(errno));
			return;
		}
		if (fds[1].revents != 0)
			return;
		if (fds[0].revents == 0)
			continue;
		if ((fds[0].revents & POLLIN) == 0) {
			/* An error bit alone (an initialised userfaultfd raises none): the reader
			 * may not stop, or every watched munmap would wait for ever; it reads
			 * below and polls again, slowly. */
			NICMR_LOG(error, kLog, "unmap monitor: userfaultfd poll says %#x",
				  unsigned(fds[0].revents));
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		}
		for (;;) {
			/* seq_cst, before the read that lets the unmapping call return: a
			 * wait_idle() after that return sees 1 here, or the ranges in pending. */
			reading_.fetch_add(1, std::memory_order_seq_cst);
			uffd_msg msgs[16];
			const ssize_t n = read(uffd_, msgs, sizeof(msgs));
			size_t queued = 0;
			if (n > 0) {
				std::lock_guard lk(q_mu_);
				for (size_t i = 0; i < size_t(n) / sizeof(uffd_msg); i++) {
					const uffd_msg &m = msgs[i];
					events_.fetch_add(1, std::memory_order_relaxed);
					uintptr_t s = 0, e = 0;
					switch (m.event) {
					case UFFD_EVENT_UNMAP:
					case UFFD_EVENT_REMOVE:
						s = m.arg.remove.start;
						e = m.arg.remove.end;
						break;
					case UFFD_EVENT_REMAP:
						/* The pages moved away from [from, from + len). */
						s = m.arg.remap.from;
						e = m.arg.remap.from + m.arg.remap.len;
						break;
					case UFFD_EVENT_PAGEFAULT: {
						/* No page is write-protected, so none should come;
						 * if one does, the page's users go and the fault is
						 * let through. */
						s = m.arg.pagefault.address & ~(kPage - 1);
						e = s + kPage;
						uffdio_range r{s, kPage};
						if (ioctl(uffd_, UFFDIO_UNREGISTER, &r) != 0)
							ioctl(uffd_, UFFDIO_WAKE, &r);
						break;
					}
					default:
						continue;
					}
					try {
						queue_.emplace_back(s, e);
						queued++;
					} catch (...) {
						NICMR_LOG(error, kLog,
							  "unmap monitor: no memory to queue "
							  "[%#lx, %#lx)",
							  (unsigned long)s, (unsigned long)e);
					}
				}
				pending_.fetch_add(queued, std::memory_order_relaxed);
			}
			/* Release: the ranges above are in pending before reading drops. */
			reading_.fetch_sub(1, std::memory_order_release);
			if (queued != 0)
				q_cv_.notify_one();
			if (n <= 0)
				break; /* EAGAIN: every queued event read */
		}
	}
}

} // namespace nicmr::mem
