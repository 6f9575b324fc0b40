/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Command queue: posting an entry, mailbox chains, polling ownership with a deadline.
 */
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include <rte_atomic.h>
#include <rte_io.h>

#include "mlx5_cmdq.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {
namespace {

constexpr const char *kLog = "mlx5";
constexpr uint32_t kCmdSlot = 0;

/* Names of the health syndromes (rdma-core mlx5_vfio.c hsynd_str, Linux health.c). */
const char *health_synd_name(uint8_t synd) noexcept
{
	namespace h = prm::health_synd;
	switch (synd) {
	case h::fw_err:
		return "firmware internal error";
	case h::irisc_err:
		return "irisc not responding";
	case h::hw_unrecoverable_err:
		return "unrecoverable hardware error";
	case h::crc_err:
		return "firmware CRC error";
	case h::fetch_pci_err:
		return "ICM fetch PCI error";
	case h::hw_ftl_err:
		return "HW fatal error";
	case h::async_eq_overrun_err:
		return "async EQ buffer overrun";
	case h::eq_err:
		return "EQ error";
	case h::eq_inv:
		return "invalid EQ referenced";
	case h::ffser_err:
		return "FFSER error";
	case h::high_temp:
		return "high temperature";
	default:
		return "unrecognized error";
	}
}

uint32_t read_reg(const bus::PciFunction &fn, prm::Field f) noexcept
{
	uint32_t raw = fn.bar0_read32(prm::dword_byte_offset(f));
	return static_cast<uint32_t>(prm::get(&raw, prm::in_dword(f)));
}

/* Ownership as one byte, so it can be loaded atomically while the device stores it. */
constexpr size_t kOwnByte = prm::byte_offset(prm::cmdq_entry::ownership);
constexpr prm::Field kOwnInByte{prm::cmdq_entry::ownership.bit_off % 8,
				prm::cmdq_entry::ownership.bits};

size_t blocks_for(size_t len) noexcept
{
	if (len <= prm::cmdq_entry::inline_size)
		return 0;
	return (len - prm::cmdq_entry::inline_size + prm::mailbox::data_size - 1) /
	       prm::mailbox::data_size;
}

} // namespace

int CmdQueue::create(bus::PciFunction &fn, mem::DmaArena &arena, std::chrono::milliseconds timeout,
		     std::unique_ptr<CmdQueue> *out)
{
	if (out == nullptr)
		return -EINVAL;
	uint32_t log_sz = read_reg(fn, prm::init_seg::log_cmdq_size);
	uint32_t log_stride = read_reg(fn, prm::init_seg::log_cmdq_stride);
	/* Two slots at least (commands and page answers), at most rdma-core's 32, within one
	 * 4 KiB page (mlx5_vfio_init_cmd_interface's checks). */
	if (log_stride < 6 || log_sz < 1 || (1u << log_sz) > kMaxSlots ||
	    log_sz + log_stride > 12) {
		NICMR_LOG(error, kLog,
			  "%s: unusable command queue geometry log_sz %u log_stride %u",
			  fn.name().c_str(), log_sz, log_stride);
		return -EPROTO;
	}
	std::unique_ptr<CmdQueue> q(new (std::nothrow) CmdQueue(fn, arena));
	if (!q)
		return -ENOMEM;
	q->timeout_ = timeout;
	q->log_sz_ = log_sz;
	q->log_stride_ = log_stride;
	q->page_slot_ = (1u << log_sz) - 1;
	int rc = arena.alloc(prm::init_seg::cmdq_align, prm::init_seg::cmdq_align, &q->queue_);
	if (rc != 0) {
		NICMR_LOG(error, kLog, "%s: no DMA memory for the command queue (%d)",
			  fn.name().c_str(), rc);
		return rc;
	}
	/* High half first: the device takes the address when the low half is written. */
	uint32_t h = 0, l = 0;
	prm::set(&h, prm::in_dword(prm::init_seg::cmdq_addr_h),
		 prm::init_seg::cmdq_addr_high(q->queue_.iova));
	prm::set(&l, prm::in_dword(prm::init_seg::cmdq_addr_l),
		 prm::init_seg::cmdq_addr_low(q->queue_.iova));
	fn.bar0_write32(prm::dword_byte_offset(prm::init_seg::cmdq_addr_h), h);
	fn.bar0_write32(prm::dword_byte_offset(prm::init_seg::cmdq_addr_l), l);
	*out = std::move(q);
	return 0;
}

CmdQueue::~CmdQueue()
{
	for (Slot *sl : {&cmd_, &pages_}) {
		std::lock_guard<std::mutex> lock(sl->mu);
		for (auto &b : sl->mailboxes)
			arena_.release(b);
		sl->mailboxes.clear();
	}
	if (queue_.va != nullptr)
		arena_.release(queue_);
}

size_t CmdQueue::mailboxes_cached() const
{
	size_t n = 0;
	for (const Slot *sl : {&cmd_, &pages_}) {
		std::lock_guard<std::mutex> lock(sl->mu);
		n += sl->mailboxes.size();
	}
	return n;
}

int CmdQueue::reserve_mailboxes(Slot &sl, size_t n) noexcept
{
	if (sl.mailboxes.size() >= n)
		return 0;
	try {
		sl.mailboxes.reserve(n);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	while (sl.mailboxes.size() < n) {
		mem::DmaBlock b;
		int rc = arena_.alloc(prm::mailbox::size, prm::mailbox::align, &b);
		if (rc != 0) {
			NICMR_LOG(error, kLog, "%s: no DMA memory for %zu command mailboxes (%d)",
				  fn_.name().c_str(), n, rc);
			return rc;
		}
		sl.mailboxes.push_back(b);
	}
	return 0;
}

uint64_t CmdQueue::chain(Slot &sl, size_t first, size_t n, uint8_t token) noexcept
{
	for (size_t i = 0; i < n; i++) {
		void *mb = sl.mailboxes[first + i].va;
		uint64_t next = i + 1 < n ? sl.mailboxes[first + i + 1].iova : 0;
		prm::set(mb, prm::mailbox::next_ptr, next);
		prm::set(mb, prm::mailbox::block_num, i);
		prm::set(mb, prm::mailbox::token, token);
		prm::set(mb, prm::mailbox::ctrl_sig, 0);
		prm::set(mb, prm::mailbox::sig, 0);
	}
	return n != 0 ? sl.mailboxes[first].iova : 0;
}

int CmdQueue::check_health() noexcept
{
	namespace h = prm::health;
	const auto synd = static_cast<uint8_t>(read_reg(fn_, h::synd));
	if (synd == 0)
		return 0;
	uint8_t expected = 0;
	/* Log once, whoever sees it first. */
	if (health_synd_.compare_exchange_strong(expected, synd, std::memory_order_acq_rel))
		NICMR_LOG(error, kLog,
			  "%s: firmware health syndrome 0x%x (%s), ext_synd 0x%04x, fw_ver 0x%08x, "
			  "hw_id 0x%08x: device broken, commands fail with -ENXIO/-EIO",
			  fn_.name().c_str(), synd, health_synd_name(synd),
			  read_reg(fn_, h::ext_synd), read_reg(fn_, h::fw_ver),
			  read_reg(fn_, h::hw_id));
	broken_.store(true, std::memory_order_release);
	return -ENXIO;
}

int CmdQueue::run(const void *in, size_t in_len, void *out, size_t out_len,
		  bool log_failure) noexcept
{
	int rc = run_on(cmd_, kCmdSlot, in, in_len, out, out_len);
	if (rc != 1)
		return rc;
	return finish(fn_.name().c_str(), in, out, log_failure);
}

int CmdQueue::PageTransport::run(const void *in, size_t in_len, void *out, size_t out_len,
				 bool log_failure) noexcept
{
	int rc = q_.run_on(q_.pages_, q_.page_slot_, in, in_len, out, out_len);
	if (rc != 1)
		return rc;
	return finish(q_.fn_.name().c_str(), in, out, log_failure);
}

/* 1: the output is in out (the caller runs finish()); else a negative errno. */
int CmdQueue::run_on(Slot &sl, uint32_t idx, const void *in, size_t in_len, void *out,
		     size_t out_len) noexcept
{
	int rc = check_lengths(in_len, out_len);
	if (rc != 0)
		return rc;
	const auto *src = static_cast<const uint8_t *>(in);
	auto *dst = static_cast<uint8_t *>(out);
	const size_t n_in = blocks_for(in_len);
	const size_t n_out = blocks_for(out_len);

	std::lock_guard<std::mutex> lock(sl.mu);
	if (broken())
		return -EIO;
	rc = reserve_mailboxes(sl, n_in + n_out);
	if (rc != 0)
		return rc;

	auto *entry =
		static_cast<uint8_t *>(queue_.va) + prm::cmdq_entry::slot_offset(idx, log_stride_);
	if (prm::get(&entry[kOwnByte], kOwnInByte) != prm::cmdq_entry::owner_sw) {
		NICMR_LOG(error, kLog, "%s: command slot %u still owned by the device",
			  fn_.name().c_str(), idx);
		broken_.store(true, std::memory_order_release);
		return -EIO;
	}
	/* A token the device echoes into every mailbox; never 0 so a zeroed block never matches. */
	sl.token = static_cast<uint8_t>(sl.token == 0xff ? 1 : sl.token + 1);
	const uint8_t token = sl.token;

	std::memset(entry, 0, prm::cmdq_entry::size);
	prm::set(entry, prm::cmdq_entry::type, prm::cmdq_entry::type_pcie);
	prm::set(entry, prm::cmdq_entry::input_length, in_len);
	prm::set(entry, prm::cmdq_entry::output_length, out_len);
	prm::set(entry, prm::cmdq_entry::token, token);
	std::memcpy(entry + prm::cmdq_entry::inline_input, src,
		    std::min(in_len, prm::cmdq_entry::inline_size));

	for (size_t i = 0; i < n_in; i++) {
		size_t off = prm::cmdq_entry::inline_size + i * prm::mailbox::data_size;
		size_t n = std::min(prm::mailbox::data_size, in_len - off);
		auto *data = static_cast<uint8_t *>(sl.mailboxes[i].va);
		std::memcpy(data, src + off, n);
		std::memset(data + n, 0, prm::mailbox::data_size - n);
	}
	for (size_t i = 0; i < n_out; i++)
		std::memset(sl.mailboxes[n_in + i].va, 0, prm::mailbox::data_size);
	prm::set(entry, prm::cmdq_entry::input_mailbox_ptr, chain(sl, 0, n_in, token));
	prm::set(entry, prm::cmdq_entry::output_mailbox_ptr, chain(sl, n_in, n_out, token));
	prm::set(entry, prm::cmdq_entry::ownership, prm::cmdq_entry::owner_hw);

	/* Write barrier: no store to the entry or the mailboxes (DMA memory) may become visible
	 * to the device after the cmd_dbell MMIO store that makes it read them, as rdma-core's
	 * mlx5_vfio_post_cmd (providers/mlx5/mlx5_vfio.c) orders it with udma_to_device_barrier.
	 * A C++ fence orders memory for other CPUs only, not against an MMIO store. The emulated
	 * bus's doorbell hands the value over with a release of its own (emu_function.cpp). */
	rte_wmb();
	uint32_t bell = 0;
	prm::set(&bell, prm::in_dword(prm::init_seg::cmd_dbell),
		 prm::init_seg::cmd_dbell_slot(idx));
	fn_.bar0_write32(prm::dword_byte_offset(prm::init_seg::cmd_dbell), bell);

	const auto start = std::chrono::steady_clock::now();
	const auto deadline = start + timeout_;
	std::atomic_ref<uint8_t> own(entry[kOwnByte]);
	for (uint32_t spins = 0;; spins++) {
		/* Acquire: the device's output (entry and mailboxes) is read only after it handed
		 * the entry back; pairs with the device's release store of the ownership byte. */
		uint8_t b = own.load(std::memory_order_acquire);
		if (prm::get(&b, kOwnInByte) == prm::cmdq_entry::owner_sw) {
			/* I/O read barrier: the output read below may not be loaded before the
			 * ownership byte that says the device wrote it (rdma-core's
			 * udma_from_device_barrier after mlx5_vfio_poll_timeout). */
			rte_io_rmb();
			break;
		}
		/* Slot 0 only: the device answers page requests through the hook while this
		 * command waits for them (the page slot never waits on the hook: no recursion). */
		if (idx == kCmdSlot && wait_hook_ && (spins & 15) == 0)
			wait_hook_();
		if ((spins & 63) == 63) {
			/* Firmware in a fatal state completes nothing: the health buffer says so
			 * long before the timeout (Linux health.c, poll_health). */
			if (int hrc = check_health(); hrc != 0)
				return hrc;
		}
		if ((spins & 63) == 63 && std::chrono::steady_clock::now() >= deadline) {
			broken_.store(true, std::memory_order_release);
			NICMR_LOG(error, kLog,
				  "%s: %s (0x%x) timed out after %lld ms; command queue unusable",
				  fn_.name().c_str(),
				  opcode_name(static_cast<uint16_t>(
					  prm::get(src, prm::cmd_hdr_in::opcode))),
				  static_cast<unsigned>(prm::get(src, prm::cmd_hdr_in::opcode)),
				  static_cast<long long>(timeout_.count()));
			return -ETIMEDOUT;
		}
		if (spins >= 256)
			std::this_thread::yield();
	}

	auto delivery = static_cast<uint32_t>(prm::get(entry, prm::cmdq_entry::status));
	if (delivery != prm::delivery_status::ok) {
		NICMR_LOG(
			error, kLog, "%s: %s (0x%x) not delivered: entry status 0x%x",
			fn_.name().c_str(),
			opcode_name(static_cast<uint16_t>(prm::get(src, prm::cmd_hdr_in::opcode))),
			static_cast<unsigned>(prm::get(src, prm::cmd_hdr_in::opcode)), delivery);
		return -EIO;
	}
	std::memcpy(dst, entry + prm::cmdq_entry::inline_output,
		    std::min(out_len, prm::cmdq_entry::inline_size));
	for (size_t i = 0; i < n_out; i++) {
		size_t off = prm::cmdq_entry::inline_size + i * prm::mailbox::data_size;
		size_t n = std::min(prm::mailbox::data_size, out_len - off);
		std::memcpy(dst + off, sl.mailboxes[n_in + i].va, n);
	}
	return 1;
}

} // namespace nicmr::mlx5
