/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An emulated PCI function: the bus a device model plugs into.
 *
 *   driver                         EmuFunction                          device model
 *   bar0_write32(off, v) --+--> BAR 0 memory (1 MiB)  <-- reg_read32/reg_write32 (device side)
 *                          |    read-only masks (fw_rev, initializing, ...)
 *                          +--> doorbell table --inline--> handler(value) on the ringing thread
 *                          |                  \--thread--> pending bits -> poll thread -> handler
 *   dma() = EmuIommu  <----------------------------------- dma_read/dma_write/pin (device side)
 *
 * BAR 0 holds the raw bytes the CPU stores, like a real BAR: byte order is the business of the
 * driver and the device model. Each 32-bit word is accessed atomically (relaxed), so the driver
 * and the device never race on a register.
 *
 * Doorbells. A device model registers the BAR offsets that are doorbells (add_doorbell) before
 * the function is handed to a driver. A write to one is delivered:
 *  - inline (DoorbellDelivery::inline_call): the handler runs on the writing thread before the
 *    write returns; deterministic, for unit tests;
 *  - by a device poll thread (DoorbellDelivery::poll_thread): the write only records the value
 *    (OR-ed into a pending mask for DoorbellMerge::bitmask doorbells such as mlx5's cmd_dbell,
 *    the latest value for DoorbellMerge::latest) and the thread calls the handler later, like an
 *    asynchronous device. The thread spins briefly and then sleeps between polls: poll_idle_sleep
 *    first, doubling while the device stays idle, up to 32 times poll_idle_sleep.
 * stop() models a hung device: doorbells are still recorded but nothing is delivered until
 * start(), so a driver waiting for a command must time out. Both modes honour it.
 * A write-only doorbell (DoorbellStore::deliver_only, mlx5's UAR doorbells) is delivered but not
 * kept in BAR 0 memory, as a posted write to a register that reads back nothing: threads ringing
 * it then meet on no cache line of BAR 0.
 *
 * Config space and bus mastering. The function has a 256-byte config space (config_read,
 * config_write, the way vfio::Device offers the real one): vendor and device ID at 0x00/0x02,
 * the command register (PCI_COMMAND) at 0x04, everything else reads as zero and ignores
 * writes, as read-only registers do. In the command register only Bus Master Enable (bit 2)
 * is writable; Memory Space Enable (bit 1) reads as set and cannot be cleared (BAR 0 always
 * decodes, as on a function vfio-pci has enabled); other bits read as zero. The function is
 * created with Bus Master Enable clear, like a function after reset: until the driver sets it,
 * every DMA of the device model fails as an access to an unmapped IOVA does (-EFAULT from the
 * IOMMU, counted in iommu().dma_refused(); see emu_iommu.h), so for the mlx5 model a command
 * is never fetched and never completes and the driver times out, which is what a ConnectX
 * whose driver forgot the bit does. Clearing the bit returns once no DMA that saw it set is
 * still in flight.
 *
 * Progress. A device model may also have work that no doorbell starts (a network port's
 * received packets): set_progress() gives the function a poll callback and the file descriptors
 * that become readable when there is such work. The device thread then calls it on every turn
 * of its loop, after the doorbells, and while idle waits in ppoll(2) on those descriptors instead
 * of sleeping, so a packet wakes it at once. In inline delivery the function starts that thread
 * for the callback alone (doorbells stay inline); without a callback inline delivery has no
 * thread, as before.
 *
 * Run to completion. In inline delivery the driver's poll loops may run the progress work
 * themselves (progress(), the bus::PciFunction call), on the application's thread, as a DPDK
 * poll-mode driver's receive burst does: a packet is then received, executed and answered
 * by the thread that waits for it, with no hand-off to the device thread and no wake-up
 * (EmuFunctionConfig::caller_progress, on by default). The work is never run by two threads
 * at once: one token (progress_held_), taken with one exchange and never waited for, goes
 * to whoever asks first, the device thread or a caller; a caller that finds it taken
 * returns false at once. While callers run it, the device thread keeps out of their way:
 * each of its turns that finds a caller has polled since the last one sleeps (the idle nap,
 * doubling up to 32 times) instead of polling the sockets, so it neither takes a packet
 * from under the caller nor competes for its core. Once no caller has polled for a nap it
 * takes the work back (and waits in ppoll on the descriptors as before): a process that
 * stops polling has its packets handled after at most one nap (1.6 ms by default). stop()
 * takes the token and keeps it, so no caller runs the work of a stopped function.
 *
 * Interrupts. The function has an MSI-X table of EmuFunctionConfig::msix_vectors vectors. The
 * driver attaches an eventfd to a vector (set_msix_eventfd, the emulated VFIO_DEVICE_SET_IRQS)
 * and the device model raises the vector (raise_msix): the function adds 1 to that eventfd, as
 * the kernel's interrupt handler does for a vector vfio-pci triggers. A vector with no eventfd
 * raises nothing (the interrupt is lost, as a masked vector's would be when nobody listens);
 * msix_raised() counts raises either way.
 *
 * Hot path: bar0_read32/bar0_write32/bar0_write64 take no lock, allocate nothing and make no
 * system call (inline handlers are the device's own business).
 */
#ifndef NICMR_EMU_FUNCTION_H
#define NICMR_EMU_FUNCTION_H

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bus_pci.h"
#include "emu_iommu.h"
#include "emu_slots.h"

namespace nicmr::emu {

enum class DoorbellDelivery {
	inline_call, /* the handler runs on the thread that writes the doorbell */
	poll_thread, /* a device thread polls recorded doorbells and runs the handlers */
};

enum class DoorbellMerge {
	bitmask, /* pending writes are OR-ed (a slot bitmap, e.g. cmd_dbell) */
	latest,	 /* the last written value wins (a producer counter) */
};

/* Whether a doorbell write also lands in BAR 0 memory (bar0_read32 sees it). */
enum class DoorbellStore {
	keep,	      /* a register the driver may read back */
	deliver_only, /* write-only: delivered, BAR 0 keeps what it held */
};

/* Called with the raw value the driver wrote (as the CPU stored it: no byte swap). */
using DoorbellHandler = std::function<void(uint64_t value)>;

struct EmuFunctionConfig {
	std::string name = "emu:0";
	bus::PciId id{0x15b3, 0x101d};	    /* Mellanox, ConnectX-6 Dx */
	size_t bar0_size = size_t{1} << 20; /* bytes; a multiple of 4096, at least 4096 */
	EmuIommuConfig iommu;
	DoorbellDelivery delivery = DoorbellDelivery::inline_call;
	/* Poll thread: sleep between idle polls (after a short spin). */
	std::chrono::microseconds poll_idle_sleep{50};
	/* MSI-X table size (vectors 0 .. n - 1), at most EmuFunction::kMaxMsix. */
	unsigned msix_vectors = 64;
	/* Inline delivery: progress() runs the progress work on the caller's thread (see "Run to
	 * completion" above). false: only the device thread runs it. Poll-thread delivery never
	 * does (the device thread is the device there). */
	bool caller_progress = true;
};

class EmuFunction final : public bus::PciFunction {
public:
	/* Three pending words of 64 bits: the mlx5 model takes three per UAR page (SQ doorbell,
	 * CQ arm, EQ arm) for up to 62 UAR pages, plus two. */
	static constexpr size_t kMaxDoorbells = 192;
	static constexpr unsigned kMaxMsix = 256;
	static constexpr size_t kMaxReadOnly = 16;

	/*
	 * Creates a function in the stopped state (start() it once its device model has
	 * registered its doorbells). Errors: -EINVAL (bad BAR size, bad IOMMU config, null out),
	 * -ENOMEM.
	 */
	static int create(const EmuFunctionConfig &cfg, std::unique_ptr<EmuFunction> *out);
	/* Stops the poll thread. The device model must outlive its handlers' last call: destroy
	 * the function (or stop() it) before the model. */
	~EmuFunction() override;
	EmuFunction(const EmuFunction &) = delete;
	EmuFunction &operator=(const EmuFunction &) = delete;

	/* bus::PciFunction. Out-of-range or misaligned offsets read as all-ones (as a PCI master
	 * abort does) and writes to them are dropped. */
	const std::string &name() const override { return name_; }
	bus::PciId id() const override { return id_; }
	size_t bar0_size() const override { return bar_words_ * 4; }
	uint32_t bar0_read32(size_t offset) const override;
	void bar0_write32(size_t offset, uint32_t value) override;
	void bar0_write64(size_t offset, uint64_t value) override;
	mem::DmaMapper &dma() override { return *iommu_; }
	/*
	 * Config space (see the top of this file). -EINVAL when [offset, offset + len) is empty
	 * or beyond kConfigSize; config_write: -EDEADLK when clearing Bus Master Enable from a
	 * thread inside a DMA section of this function (it would wait for itself).
	 */
	int config_read(uint32_t offset, void *buf, size_t len) const override;
	int config_write(uint32_t offset, const void *buf, size_t len) override;
	static constexpr size_t kConfigSize = 256;
	/* See "Interrupts" above: -EINVAL (vector >= msix_vectors, fd < -1), -ENOTSUP (a table
	 * of 0 vectors: no MSI-X). */
	int set_msix_eventfd(unsigned vector, int fd) override;

	/*
	 * Run to completion (see the top of this file): runs the progress work on the calling
	 * thread when the function delivers inline, has progress work, runs and caller_progress
	 * is on, and no other thread runs it at that moment; whether it found work. Hot path: one
	 * exchange to take the work and a store to give it back, no allocation, no lock waited
	 * for; the system calls are the progress work's own (a wire port's recvmmsg, its ACKs).
	 */
	bool progress() override;

	/* Device side: raises MSI-X vector `vector` (see "Interrupts"); false when no eventfd is
	 * attached to it or the vector is out of range. Thread-safe; not for hot paths. */
	bool raise_msix(unsigned vector);
	/* Raises of vectors in range since creation (with or without an eventfd). */
	uint64_t msix_raised() const noexcept
	{
		return msix_raised_.load(std::memory_order_relaxed);
	}
	unsigned msix_vectors() const noexcept { return msix_vectors_; }

	/* Device side. */
	EmuIommu &iommu() noexcept { return *iommu_; }
	const EmuIommu &iommu() const noexcept { return *iommu_; }
	DoorbellDelivery delivery() const noexcept { return delivery_; }
	/* Register access that bypasses doorbells and read-only masks (the device's own view). */
	uint32_t reg_read32(size_t offset) const noexcept;
	void reg_write32(size_t offset, uint32_t value) noexcept;
	/*
	 * Makes the 32-bit register at offset a doorbell. Call before start() and before the
	 * function is shared. Errors: -EINVAL (offset misaligned or outside BAR 0, empty
	 * handler), -EEXIST (already a doorbell), -ENOSPC (kMaxDoorbells reached), -EBUSY
	 * (running).
	 */
	int add_doorbell(size_t offset, DoorbellMerge merge, DoorbellHandler handler,
			 DoorbellStore store = DoorbellStore::keep);
	/*
	 * Bits of the register at offset that the driver cannot change (raw mask, as stored).
	 * Same rules and errors as add_doorbell (-ENOSPC past kMaxReadOnly; a second call for
	 * the same offset replaces the mask).
	 */
	int set_read_only(size_t offset, uint32_t raw_mask);
	/*
	 * Device work outside doorbells (see the top of this file): poll() runs on the device
	 * thread and returns whether it found work; fds are descriptors to wait on while idle
	 * (they must stay open until the function is stopped). Call before start(). Errors:
	 * -EINVAL (empty poll), -EBUSY (running), -EEXIST (set already).
	 */
	int set_progress(std::function<bool()> poll, std::vector<int> fds);

	/*
	 * Starts delivering doorbells: recorded ones first (on the caller's thread in inline mode,
	 * on the new poll thread otherwise). -EALREADY if running; -EAGAIN if the thread cannot
	 * be started.
	 */
	int start();
	/* Stops delivering; returns after any handler in progress on the poll thread has
	 * returned. Doorbells written while stopped are recorded. Idempotent. */
	void stop();
	bool running() const noexcept { return running_.load(std::memory_order_acquire); }
	/* Doorbells registered so far (room left: kMaxDoorbells - doorbell_count()). */
	size_t doorbell_count() const noexcept
	{
		return n_doorbells_.load(std::memory_order_acquire);
	}
	/* Whether the register at offset is a doorbell. */
	bool has_doorbell(size_t offset) const noexcept
	{
		const size_t n = doorbell_count();
		for (size_t i = 0; i < n; i++)
			if (doorbells_[i].word * 4 == offset)
				return true;
		return false;
	}
	/* Doorbells delivered to handlers since creation. */
	uint64_t doorbells_delivered() const noexcept { return delivered_.sum(); }

private:
	struct Doorbell {
		size_t word = 0;
		DoorbellMerge merge = DoorbellMerge::bitmask;
		DoorbellStore store = DoorbellStore::keep;
		DoorbellHandler handler;
		std::atomic<uint64_t> value{0};
	};
	struct ReadOnly {
		size_t word = 0;
		uint32_t mask = 0;
	};

	EmuFunction() = default;
	/* The doorbell at word, or nullptr. */
	Doorbell *find_doorbell(size_t word) noexcept;
	void ring(Doorbell &db, uint64_t value);
	/* Delivers every recorded doorbell once; true if any was. */
	bool drain();
	void drain_word(size_t w, uint64_t mask);
	void poll_loop();
	/* The progress work once, if the token is free (see "Run to completion"). */
	bool run_progress();
	/* Takes the token back for good (stop, a failed start); control_ held. */
	void take_back_progress();

	std::string name_;
	bus::PciId id_{};
	size_t bar_words_ = 0;
	std::unique_ptr<uint32_t[]> bar_;
	std::unique_ptr<EmuIommu> iommu_;
	DoorbellDelivery delivery_ = DoorbellDelivery::inline_call;
	std::chrono::microseconds idle_sleep_{50};

	/* Written before start() only (add_doorbell/set_read_only refuse while running); the
	 * release store of the counts publishes them to writers on other threads. */
	std::array<Doorbell, kMaxDoorbells> doorbells_;
	std::atomic<size_t> n_doorbells_{0};
	std::array<ReadOnly, kMaxReadOnly> read_only_;
	std::atomic<size_t> n_read_only_{0};

	/* One bit per doorbell index with a recorded, undelivered value: doorbell i is bit i % 64
	 * of word i / 64. */
	std::array<std::atomic<uint64_t>, kMaxDoorbells / 64> pending_{};
	std::atomic<bool> running_{false};
	std::atomic<bool> thread_stop_{false};
	SlotCounter delivered_; /* per thread: two threads ringing meet on no line */
	std::mutex control_;	/* serialises start/stop and inline drains on start */
	std::mutex config_mu_;	/* serialises config_write's read-modify-write */
	/* set_progress(): written before start() only. */
	std::function<bool()> progress_;
	std::vector<int> progress_fds_;
	bool caller_progress_ = false; /* set at create (inline delivery and the config) */
	/* Run to completion: the token of the progress work (true: a thread runs it, or the
	 * function is stopped; taken with an acquire exchange, given back with a release
	 * store, so the work's state passes from one runner to the next), and whether a
	 * caller polled since the device thread last looked (a hint: relaxed). Each on a line
	 * of its own: the token moves between runners, the hint is written by callers. */
	alignas(64) std::atomic<bool> progress_held_{true};
	bool progress_open_ = false; /* start() gave the token out; control_ */
	alignas(64) std::atomic<bool> caller_polled_{false};
	std::thread thread_;
	/* MSI-X: the eventfd of each vector (-1: none). irq_mu_ serialises attach and raise, so a
	 * descriptor the driver detached (and may close) is never written after the detach. */
	unsigned msix_vectors_ = 0;
	std::mutex irq_mu_;
	std::vector<int> msix_fd_;
	std::atomic<uint64_t> msix_raised_{0};
};

} // namespace nicmr::emu

#endif
