/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The command queue in DMA memory, driven through BAR 0 (emulated function or VFIO).
 *
 *   BAR 0 init segment                     DMA memory (a DmaArena of the function's DmaSpace)
 *   cmdq_addr_h/l ------------------------> queue page (4 KiB): slot 0 = 64-byte entry
 *   cmd_dbell <- 1 << slot                    entry.input_mailbox_ptr  -> block -> block -> 0
 *                                             entry.output_mailbox_ptr -> block -> 0
 *
 * One command at a time (a mutex; commands are a slow path) in slot 0; rdma-core keeps slot 31
 * for page requests, which a poll-mode driver without an event queue never receives. The first
 * 16 bytes of input and output travel inline in the entry, the rest in chains of 576-byte
 * mailboxes (1 KiB aligned) kept in a cache that grows to the largest command seen and is freed
 * with the queue. Completion is polled: ownership returns to software.
 *
 * A command that times out leaves the device owning the slot and the mailboxes, so the queue is
 * marked broken: every later command fails with -EIO and nothing on it is reused until the
 * queue is destroyed (a real function then needs a reset before its memory is reused).
 */
#ifndef NICMR_MLX5_CMDQ_H
#define NICMR_MLX5_CMDQ_H

#include <chrono>
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
	/* Frees the queue page and every cached mailbox (also when broken: see above). */
	~CmdQueue() override;
	CmdQueue(const CmdQueue &) = delete;
	CmdQueue &operator=(const CmdQueue &) = delete;

	bool broken() const noexcept;
	std::chrono::milliseconds timeout() const noexcept { return timeout_; }
	void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }
	/* Mailboxes held in the cache (each one arena block). */
	size_t mailboxes_cached() const;
	uint32_t log_size() const noexcept { return log_sz_; }
	uint32_t log_stride() const noexcept { return log_stride_; }

protected:
	int run(const void *in, size_t in_len, void *out, size_t out_len,
		bool log_failure) noexcept override;

private:
	CmdQueue(bus::PciFunction &fn, mem::DmaArena &arena) : fn_(fn), arena_(arena) {}
	/* Makes sure the cache holds at least n mailboxes. Caller holds mu_. */
	int reserve_mailboxes(size_t n) noexcept;
	/* Links blocks [first, first + n) into a chain; returns the head IOVA (0 when n is 0). */
	uint64_t chain(size_t first, size_t n, uint8_t token) noexcept;

	bus::PciFunction &fn_;
	mem::DmaArena &arena_;
	std::chrono::milliseconds timeout_;
	uint32_t log_sz_ = 0;
	uint32_t log_stride_ = 0;

	mutable std::mutex mu_; /* one command at a time; guards everything below */
	mem::DmaBlock queue_{};
	std::vector<mem::DmaBlock> mailboxes_;
	uint8_t token_ = 0;
	bool broken_ = false;
};

} // namespace nicmr::mlx5

#endif
