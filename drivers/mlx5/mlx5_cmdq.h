/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The command queue in DMA memory, driven through BAR 0 (emulated function or VFIO).
 *
 *   BAR 0 init segment                     DMA memory (a DmaArena of the function's DmaSpace)
 *   cmdq_addr_h/l ------------------------> queue page (4 KiB): slot 0 = 64-byte entry
 *   cmd_dbell <- 1 << slot                    entry.input_mailbox_ptr  -> block -> block -> 0
 *                                             entry.output_mailbox_ptr -> block -> 0
 *
 * Two slots, as rdma-core's mlx5_vfio.c uses them: slot 0 for commands (one at a time, a
 * mutex; commands are a slow path) and the last slot (31 on a ConnectX) for the answers to
 * firmware page requests, MANAGE_PAGES, through page_slot(). A command firmware holds until it
 * gets pages keeps slot 0 busy; the pages then arrive on the other slot, so the two never wait
 * for each other. While slot 0 waits, the queue calls the wait hook (the device polls its
 * async EQ there and answers page requests on the page slot) and reads the health buffer.
 * Each slot has its own mailboxes: the first 16 bytes of input and output travel inline in the
 * entry, the rest in chains of 576-byte mailboxes (1 KiB aligned) kept in a per-slot cache
 * that grows to the largest command seen and is freed with the queue. Completion is polled:
 * ownership returns to software.
 *
 * A command that times out leaves the device owning the slot and the mailboxes, so the queue is
 * marked broken: every later command fails with -EIO and nothing on it is reused until the
 * queue is destroyed (a real function then needs a reset before its memory is reused). A
 * health syndrome (the init segment's health buffer, Linux health.c) breaks it too: the
 * command waiting fails with -ENXIO, later ones with -EIO, and the log line names the
 * syndrome.
 */
#ifndef NICMR_MLX5_CMDQ_H
#define NICMR_MLX5_CMDQ_H

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "bus_pci.h"
#include "mem_space.h"
#include "mlx5_cmd.h"

namespace nicmr::mlx5 {

class CmdQueue final : public CmdTransport {
public:
	/*
	 * Puts a command queue in arena memory and tells the device where it is (cmdq_addr_h,
	 * then cmdq_addr_l). The entry count and stride come from the init segment. Errors:
	 * -EPROTO (the device reports an unusable log_sz / log_stride), -ENOMEM (arena full),
	 * -EINVAL (null out). The arena must outlive the queue.
	 */
	static int create(bus::PciFunction &fn, mem::DmaArena &arena,
			  std::chrono::milliseconds timeout, std::unique_ptr<CmdQueue> *out);
	/* rdma-core's MLX5_MAX_COMMANDS: the page slot is the last of these. */
	static constexpr uint32_t kMaxSlots = 32;
	/* Frees the queue page and every cached mailbox (also when broken: see above). */
	~CmdQueue() override;
	CmdQueue(const CmdQueue &) = delete;
	CmdQueue &operator=(const CmdQueue &) = delete;

	bool broken() const noexcept { return broken_.load(std::memory_order_acquire); }
	std::chrono::milliseconds timeout() const noexcept { return timeout_; }
	void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }
	/* Mailboxes held in the caches of both slots (each one arena block). */
	size_t mailboxes_cached() const;
	uint32_t log_size() const noexcept { return log_sz_; }
	uint32_t log_stride() const noexcept { return log_stride_; }
	/* The slot page answers go on (the queue's last entry: 31 on a ConnectX). */
	uint32_t page_slot_index() const noexcept { return page_slot_; }
	/* A transport whose commands run on the page slot; never calls the wait hook. */
	CmdTransport &page_slot() noexcept { return page_transport_; }

	/*
	 * Called (with slot 0 held) while a command waits on slot 0, at most every few polls of
	 * its ownership byte: the device polls its async EQ there. Set before commands run.
	 */
	void set_wait_hook(std::function<void()> hook) { wait_hook_ = std::move(hook); }

	/*
	 * Reads the health buffer. 0 when the syndrome is 0; otherwise logs (once) the syndrome,
	 * its name, ext_synd, fw_ver and hw_id, marks the queue broken and returns -ENXIO.
	 */
	int check_health() noexcept;
	/* The health syndrome that broke the queue (0: none). */
	uint8_t health_syndrome() const noexcept
	{
		return health_synd_.load(std::memory_order_acquire);
	}

protected:
	int run(const void *in, size_t in_len, void *out, size_t out_len,
		bool log_failure) noexcept override;

private:
	struct Slot {
		mutable std::mutex
			mu; /* one command at a time on this slot; guards the fields below */
		std::vector<mem::DmaBlock> mailboxes;
		uint8_t token = 0;
	};
	class PageTransport final : public CmdTransport {
	public:
		explicit PageTransport(CmdQueue &q) : q_(q) {}

	protected:
		int run(const void *in, size_t in_len, void *out, size_t out_len,
			bool log_failure) noexcept override;

	private:
		CmdQueue &q_;
	};

	CmdQueue(bus::PciFunction &fn, mem::DmaArena &arena)
	    : fn_(fn), arena_(arena), page_transport_(*this)
	{}
	/* Posts on slot index idx and polls it (the wait hook only for slot 0). 1: the output
	 * is in out and the transport runs finish(); else a negative errno. */
	int run_on(Slot &s, uint32_t idx, const void *in, size_t in_len, void *out,
		   size_t out_len) noexcept;
	/* Makes sure s's cache holds at least n mailboxes. Caller holds s.mu. */
	int reserve_mailboxes(Slot &s, size_t n) noexcept;
	/* Links s's blocks [first, first + n) into a chain; the head IOVA (0 when n is 0). */
	static uint64_t chain(Slot &s, size_t first, size_t n, uint8_t token) noexcept;

	bus::PciFunction &fn_;
	mem::DmaArena &arena_;
	std::chrono::milliseconds timeout_;
	uint32_t log_sz_ = 0;
	uint32_t log_stride_ = 0;
	uint32_t page_slot_ = 0;
	mem::DmaBlock queue_{};
	Slot cmd_, pages_;
	PageTransport page_transport_;
	std::function<void()> wait_hook_;
	std::atomic<bool> broken_{false};
	std::atomic<uint8_t> health_synd_{0};
};

} // namespace nicmr::mlx5

#endif
