/* SPDX-License-Identifier: BSD-3-Clause */
#include "emu_function.h"

#include <endian.h>
#include <linux/pci_regs.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <new>
#include <system_error>

#include "nicmr_log.h"

namespace nicmr::emu {

int EmuFunction::create(const EmuFunctionConfig &cfg, std::unique_ptr<EmuFunction> *out)
{
	if (out == nullptr || cfg.bar0_size < 4096 || cfg.bar0_size % 4096 != 0 ||
	    cfg.msix_vectors > kMaxMsix)
		return -EINVAL;
	std::unique_ptr<EmuFunction> f(new (std::nothrow) EmuFunction());
	if (!f)
		return -ENOMEM;
	int rc = EmuIommu::create(cfg.iommu, &f->iommu_);
	if (rc < 0)
		return rc;
	f->bar_words_ = cfg.bar0_size / 4;
	f->bar_.reset(new (std::nothrow) uint32_t[f->bar_words_]());
	if (!f->bar_)
		return -ENOMEM;
	/* A function after reset: no DMA until its driver sets Bus Master Enable. */
	rc = f->iommu_->set_bus_master(false);
	if (rc < 0)
		return rc;
	f->name_ = cfg.name;
	f->id_ = cfg.id;
	f->delivery_ = cfg.delivery;
	f->idle_sleep_ = cfg.poll_idle_sleep;
	f->caller_progress_ = cfg.caller_progress && cfg.delivery == DoorbellDelivery::inline_call;
	f->msix_vectors_ = cfg.msix_vectors;
	f->msix_fd_.assign(cfg.msix_vectors, -1);
	*out = std::move(f);
	return 0;
}

EmuFunction::~EmuFunction()
{
	stop();
}

namespace {

/* Config space is little-endian. */
void put_le16(uint8_t *p, uint16_t v)
{
	const uint16_t le = htole16(v);
	std::memcpy(p, &le, sizeof(le));
}

bool config_range_ok(uint32_t offset, size_t len)
{
	return len != 0 && offset < EmuFunction::kConfigSize &&
	       len <= EmuFunction::kConfigSize - offset;
}

} // namespace

int EmuFunction::config_read(uint32_t offset, void *buf, size_t len) const
{
	if (!config_range_ok(offset, len))
		return -EINVAL;
	uint8_t cfg[kConfigSize] = {};
	put_le16(cfg + PCI_VENDOR_ID, id_.vendor);
	put_le16(cfg + PCI_DEVICE_ID, id_.device);
	const uint16_t cmd =
		PCI_COMMAND_MEMORY | (iommu_->bus_master() ? uint16_t{PCI_COMMAND_MASTER} : 0);
	put_le16(cfg + PCI_COMMAND, cmd);
	std::memcpy(buf, cfg + offset, len);
	return 0;
}

int EmuFunction::config_write(uint32_t offset, const void *buf, size_t len)
{
	if (!config_range_ok(offset, len))
		return -EINVAL;
	/* Only the command register's low byte holds a writable bit (BME, bit 2). */
	if (offset > PCI_COMMAND || offset + len <= PCI_COMMAND)
		return 0;
	const uint8_t low = static_cast<const uint8_t *>(buf)[PCI_COMMAND - offset];
	std::lock_guard lk(config_mu_);
	return iommu_->set_bus_master((low & PCI_COMMAND_MASTER) != 0);
}

uint32_t EmuFunction::reg_read32(size_t offset) const noexcept
{
	if (offset % 4 != 0 || offset / 4 >= bar_words_)
		return 0xffffffff;
	return std::atomic_ref<uint32_t>(bar_[offset / 4]).load(std::memory_order_relaxed);
}

void EmuFunction::reg_write32(size_t offset, uint32_t value) noexcept
{
	if (offset % 4 != 0 || offset / 4 >= bar_words_)
		return;
	std::atomic_ref<uint32_t>(bar_[offset / 4]).store(value, std::memory_order_relaxed);
}

/* Hot path: no lock, no allocation, no system call. */
uint32_t EmuFunction::bar0_read32(size_t offset) const
{
	if (offset % 4 != 0 || offset / 4 >= bar_words_)
		return 0xffffffff;
	/* Acquire pairs with the device's release stores of registers it publishes (boot done). */
	return std::atomic_ref<uint32_t>(bar_[offset / 4]).load(std::memory_order_acquire);
}

/* Hot path: no lock, no allocation, no system call (inline handlers aside). */
void EmuFunction::bar0_write32(size_t offset, uint32_t value)
{
	if (offset % 4 != 0 || offset / 4 >= bar_words_)
		return;
	const size_t word = offset / 4;
	std::atomic_ref<uint32_t> cell(bar_[word]);
	Doorbell *db = find_doorbell(word);
	/* Acquire pairs with the release store of the count in set_read_only/add_doorbell. */
	const size_t nro = n_read_only_.load(std::memory_order_acquire);
	for (size_t i = 0; i < nro; i++) {
		if (read_only_[i].word != word)
			continue;
		const uint32_t m = read_only_[i].mask;
		uint32_t old = cell.load(std::memory_order_relaxed);
		/* The device may update its bits concurrently: merge with a CAS, not a blind store.
		 */
		while (!cell.compare_exchange_weak(old, (old & m) | (value & ~m),
						   std::memory_order_release,
						   std::memory_order_relaxed))
			;
		if (db != nullptr)
			ring(*db, value);
		return;
	}
	/* Release: a device that reads this register after a doorbell sees what came before. */
	if (db == nullptr || db->store == DoorbellStore::keep)
		cell.store(value, std::memory_order_release);
	if (db != nullptr)
		ring(*db, value);
}

void EmuFunction::bar0_write64(size_t offset, uint64_t value)
{
	if (offset % 8 != 0 || offset / 4 + 1 >= bar_words_)
		return;
	Doorbell *db = find_doorbell(offset / 4);
	if (db == nullptr || db->store == DoorbellStore::keep) {
		/* The CPU stores the 8 bytes in memory order: the first word holds the
		 * low-address bytes. */
		uint32_t w[2];
		std::memcpy(w, &value, sizeof(w));
		std::atomic_ref<uint32_t>(bar_[offset / 4]).store(w[0], std::memory_order_release);
		std::atomic_ref<uint32_t>(bar_[offset / 4 + 1])
			.store(w[1], std::memory_order_release);
	}
	if (db != nullptr)
		ring(*db, value);
}

/* Hot path: linear scan of at most kMaxDoorbells entries, atomics only. */
EmuFunction::Doorbell *EmuFunction::find_doorbell(size_t word) noexcept
{
	const size_t n = n_doorbells_.load(std::memory_order_acquire);
	for (size_t i = 0; i < n; i++)
		if (doorbells_[i].word == word)
			return &doorbells_[i];
	return nullptr;
}

void EmuFunction::ring(Doorbell &db, uint64_t value)
{
	if (delivery_ == DoorbellDelivery::inline_call &&
	    running_.load(std::memory_order_acquire)) {
		delivered_.add();
		db.handler(value);
		return;
	}
	/* Release on both: the device thread that takes the pending bit with acquire sees the
	 * value and every store the driver made before ringing (command entries). */
	if (db.merge == DoorbellMerge::bitmask)
		db.value.fetch_or(value, std::memory_order_release);
	else
		db.value.store(value, std::memory_order_release);
	const auto i = static_cast<size_t>(&db - doorbells_.data());
	pending_[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_release);
}

bool EmuFunction::drain()
{
	bool any = false;
	for (size_t w = 0; w < pending_.size(); w++) {
		/* Acquire pairs with the release fetch_or in ring(). */
		uint64_t mask = pending_[w].exchange(0, std::memory_order_acquire);
		any |= mask != 0;
		drain_word(w, mask);
	}
	return any;
}

void EmuFunction::drain_word(size_t w, uint64_t mask)
{
	while (mask != 0) {
		const unsigned i = static_cast<unsigned>(w * 64 + __builtin_ctzll(mask));
		mask &= mask - 1;
		Doorbell &db = doorbells_[i];
		uint64_t v;
		if (db.merge == DoorbellMerge::bitmask) {
			v = db.value.exchange(0, std::memory_order_acquire);
			if (v == 0)
				continue;
		} else {
			v = db.value.load(std::memory_order_acquire);
		}
		delivered_.add();
		db.handler(v);
	}
}

int EmuFunction::set_msix_eventfd(unsigned vector, int fd)
{
	if (msix_vectors_ == 0)
		return -ENOTSUP;
	if (vector >= msix_vectors_ || fd < -1)
		return -EINVAL;
	std::lock_guard lk(irq_mu_);
	msix_fd_[vector] = fd;
	return 0;
}

bool EmuFunction::raise_msix(unsigned vector)
{
	if (vector >= msix_vectors_)
		return false;
	msix_raised_.fetch_add(1, std::memory_order_relaxed);
	std::lock_guard lk(irq_mu_);
	const int fd = msix_fd_[vector];
	if (fd < 0)
		return false;
	/* What the kernel does for a triggered vector: eventfd_signal, a count of 1. A full
	 * counter (2^64 - 2, never in practice) or a non-blocking EAGAIN loses nothing that
	 * matters: the reader wakes for the count already there. */
	const uint64_t one = 1;
	ssize_t rc;
	do
		rc = write(fd, &one, sizeof(one));
	while (rc < 0 && errno == EINTR);
	return rc == sizeof(one);
}

int EmuFunction::add_doorbell(size_t offset, DoorbellMerge merge, DoorbellHandler handler,
			      DoorbellStore store)
{
	if (offset % 4 != 0 || offset / 4 >= bar_words_ || !handler)
		return -EINVAL;
	std::lock_guard lk(control_);
	if (running())
		return -EBUSY;
	const size_t n = n_doorbells_.load(std::memory_order_relaxed);
	for (size_t i = 0; i < n; i++)
		if (doorbells_[i].word == offset / 4)
			return -EEXIST;
	if (n == kMaxDoorbells)
		return -ENOSPC;
	doorbells_[n].word = offset / 4;
	doorbells_[n].merge = merge;
	doorbells_[n].store = store;
	doorbells_[n].handler = std::move(handler);
	/* Release: a writer that sees the new count sees the entry filled in. */
	n_doorbells_.store(n + 1, std::memory_order_release);
	return 0;
}

int EmuFunction::set_read_only(size_t offset, uint32_t raw_mask)
{
	if (offset % 4 != 0 || offset / 4 >= bar_words_)
		return -EINVAL;
	std::lock_guard lk(control_);
	if (running())
		return -EBUSY;
	const size_t n = n_read_only_.load(std::memory_order_relaxed);
	for (size_t i = 0; i < n; i++) {
		if (read_only_[i].word == offset / 4) {
			read_only_[i].mask = raw_mask;
			return 0;
		}
	}
	if (n == kMaxReadOnly)
		return -ENOSPC;
	read_only_[n] = ReadOnly{offset / 4, raw_mask};
	/* Release: publishes the entry to bar0_write32 on other threads. */
	n_read_only_.store(n + 1, std::memory_order_release);
	return 0;
}

int EmuFunction::start()
{
	std::lock_guard lk(control_);
	if (running())
		return -EALREADY;
	if (delivery_ == DoorbellDelivery::inline_call) {
		/* Running first: a doorbell rung during the drain is delivered inline, not lost. */
		running_.store(true, std::memory_order_release);
		drain();
		if (!progress_)
			return 0;
		/* A device with progress work gets its thread; doorbells stay inline. */
		running_.store(false, std::memory_order_release);
	}
	thread_stop_.store(false, std::memory_order_relaxed);
	/* The progress work's token out (release: the work's state as set up before start). */
	if (progress_) {
		progress_held_.store(false, std::memory_order_release);
		progress_open_ = true;
	}
	try {
		thread_ = std::thread([this] { poll_loop(); });
	} catch (const std::system_error &e) {
		NICMR_LOG(error, "emu-bus", "%s: cannot start the device thread: %s", name_.c_str(),
			  e.what());
		take_back_progress();
		return -EAGAIN;
	}
	running_.store(true, std::memory_order_release);
	return 0;
}

void EmuFunction::take_back_progress()
{
	if (!progress_open_)
		return;
	/* A caller inside progress() gives the token back when its turn ends (a batch: short);
	 * acquire pairs with its release, so its work is done before the model may go. */
	while (progress_held_.exchange(true, std::memory_order_acquire))
		std::this_thread::yield();
	progress_open_ = false;
}

void EmuFunction::stop()
{
	std::lock_guard lk(control_);
	running_.store(false, std::memory_order_release);
	if (thread_.joinable()) {
		thread_stop_.store(true, std::memory_order_relaxed);
		thread_.join();
	}
	/* Kept until start(): no caller runs the work of a stopped function. */
	take_back_progress();
}

int EmuFunction::set_progress(std::function<bool()> poll, std::vector<int> fds)
{
	if (!poll)
		return -EINVAL;
	std::lock_guard lk(control_);
	if (running())
		return -EBUSY;
	if (progress_)
		return -EEXIST;
	progress_ = std::move(poll);
	progress_fds_ = std::move(fds);
	return 0;
}

/* Hot path (a caller's poll loop): one exchange, the work, one store; never waits. */
bool EmuFunction::run_progress()
{
	/* Acquire pairs with the release below of the last runner (the device thread or another
	 * caller): the receive batch, timers and sockets' state it left are seen here. */
	if (progress_held_.exchange(true, std::memory_order_acquire))
		return false; /* another thread runs it now */
	const bool busy = progress_();
	progress_held_.store(false, std::memory_order_release);
	return busy;
}

bool EmuFunction::progress()
{
	if (!caller_progress_ || !progress_)
		return false;
	/* Tell the device thread a caller drives the work (a hint, relaxed; stored only when it
	 * changes, so a polling caller does not keep taking the line from the device thread). */
	if (!caller_polled_.load(std::memory_order_relaxed))
		caller_polled_.store(true, std::memory_order_relaxed);
	return run_progress(); /* a stopped function holds the token: false */
}

void EmuFunction::poll_loop()
{
	/* A short spin keeps command latency low; then the thread sleeps so that an idle device
	 * does not eat one of the machine's cores: idle_sleep_ first, each further idle nap twice
	 * as long, up to kMaxNapFactor times idle_sleep_, so that a device left idle for long wakes
	 * up a few hundred times a second rather than tens of thousands (each wake-up takes a
	 * core from the application's threads for a moment). Any doorbell resets it. */
	constexpr unsigned kSpins = 2000;
	constexpr unsigned kMaxNapFactor = 32;
	unsigned idle = 0;
	auto nap = idle_sleep_;
	while (!thread_stop_.load(std::memory_order_relaxed)) {
		bool busy = drain();
		/* Run to completion: a caller polled since the last turn, so it runs the work;
		 * sleep instead of taking packets from under it or its core (a plain sleep, not
		 * ppoll on the sockets, whose packets would wake this thread for nothing). */
		if (caller_progress_ && caller_polled_.load(std::memory_order_relaxed) &&
		    caller_polled_.exchange(false, std::memory_order_relaxed)) {
			if (busy)
				continue;
			std::this_thread::sleep_for(nap);
			if (nap < idle_sleep_ * kMaxNapFactor)
				nap *= 2;
			idle = kSpins; /* when the caller stops: wait in ppoll at once */
			continue;
		}
		if (progress_ && run_progress())
			busy = true;
		if (busy) {
			idle = 0;
			nap = idle_sleep_;
			continue;
		}
		if (++idle < kSpins) {
			std::this_thread::yield();
			continue;
		}
		if (progress_fds_.empty()) {
			std::this_thread::sleep_for(nap);
		} else {
			/* Idle: wait for progress work (a packet) or the nap, whichever comes
			 * first; doorbells are seen after the nap, as when sleeping. */
			pollfd pfd[8];
			const size_t n = std::min(progress_fds_.size(), std::size(pfd));
			for (size_t i = 0; i < n; i++)
				pfd[i] = {progress_fds_[i], POLLIN, 0};
			const auto us = std::chrono::duration_cast<std::chrono::microseconds>(nap);
			const timespec ts{static_cast<time_t>(us.count() / 1000000),
					  static_cast<long>(us.count() % 1000000) * 1000};
			ppoll(pfd, n, &ts, nullptr);
		}
		if (nap < idle_sleep_ * kMaxNapFactor)
			nap *= 2;
	}
}

} // namespace nicmr::emu
