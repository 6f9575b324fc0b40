/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A bare-hands driver for the device-model tests: it writes command-queue entries and mailbox
 * chains into DMA-mapped memory through the PRM layout table, rings cmd_dbell and reads the
 * completion, exactly as a driver would, with none of the driver's code.
 *
 * Host memory (4 MiB, mapped at kIova):
 *   [0, 4K)       command queue (32 slots of 64 bytes)
 *   [1M, 2M)      input mailboxes (1 KiB apart)
 *   [2M, 3M)      output mailboxes
 *   [3M, 4M)      pages to give the device, scratch
 */
#ifndef NICMR_TEST_EMU_HARNESS_H
#define NICMR_TEST_EMU_HARNESS_H

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "emu_mlx5.h"
#include "mlx5_prm.h"

namespace nicmr::emu::test {

namespace prm = nicmr::mlx5::prm;

inline constexpr uint64_t kIova = 0x100000000ull;
inline constexpr size_t kMemLen = size_t{4} << 20;
inline constexpr size_t kInMbOff = size_t{1} << 20;
inline constexpr size_t kOutMbOff = size_t{2} << 20;
inline constexpr size_t kPagesOff = size_t{3} << 20;

/* Host memory from mmap, unmapped on destruction. */
class HostMem {
public:
	explicit HostMem(size_t len) : len_(len)
	{
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		p_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
	}
	~HostMem()
	{
		if (p_ != nullptr)
			munmap(p_, len_);
	}
	HostMem(const HostMem &) = delete;
	HostMem &operator=(const HostMem &) = delete;
	uint8_t *data() const { return p_; }
	size_t size() const { return len_; }

private:
	uint8_t *p_;
	size_t len_;
};

/* A command's input, built through the layout table. */
struct Cmd {
	std::vector<uint8_t> in;
	size_t out_len = 16;

	Cmd(uint16_t opcode, size_t in_len, size_t out_len_, uint16_t op_mod = 0)
	    : in(in_len, 0), out_len(out_len_)
	{
		if (in_len >= prm::cmd_hdr_in::size) {
			prm::set(in.data(), prm::cmd_hdr_in::opcode, opcode);
			prm::set(in.data(), prm::cmd_hdr_in::op_mod, op_mod);
		}
	}
	Cmd &set(prm::Field f, uint64_t v)
	{
		prm::set(in.data(), f, v);
		return *this;
	}
	Cmd &set_at(size_t byte, prm::Field f, uint64_t v)
	{
		prm::set(in.data() + byte, f, v);
		return *this;
	}
};

/* What came back. */
struct Reply {
	bool completed = false;
	uint8_t delivery = 0xff;
	std::vector<uint8_t> out;
	uint8_t status() const
	{
		return static_cast<uint8_t>(prm::get(out.data(), prm::cmd_hdr_out::status));
	}
	uint32_t syndrome() const
	{
		return static_cast<uint32_t>(prm::get(out.data(), prm::cmd_hdr_out::syndrome));
	}
	uint64_t get(prm::Field f) const { return prm::get(out.data(), f); }
	uint64_t get_at(size_t byte, prm::Field f) const { return prm::get(out.data() + byte, f); }
};

/* Knobs of one posting, to break the protocol on purpose. */
struct PostOpts {
	uint32_t slot = 0;
	uint8_t type = prm::cmdq_entry::type_pcie;
	uint8_t token = 0x5a;
	uint8_t mailbox_token = 0x5a;
	bool wrong_block_num = false;
	/* The entry's signature byte: the model, with checksums on (cmdif_checksum, after
	 * INIT_HCA), refuses an entry without one; it does not check the XOR. */
	uint8_t signature = 0xa5;
	uint64_t in_mb_iova = kIova + kInMbOff;	  /* where the input chain starts */
	uint64_t out_mb_iova = kIova + kOutMbOff; /* where the output chain starts */
	uint64_t in_len_override = 0;		  /* 0: the command's own length */
	bool ring = true;
	bool wait = true;
	std::chrono::milliseconds timeout{5000};
};

class Harness {
public:
	explicit Harness(EmuConfig cfg = {}) : mem_(kMemLen)
	{
		if (mem_.data() == nullptr) {
			rc_ = -ENOMEM;
			return;
		}
		rc_ = emu_mlx5_create(cfg, &emu_);
		if (rc_ < 0)
			return;
		rc_ = emu_->iommu().dma_map(mem_.data(), kIova, kMemLen);
		if (rc_ < 0)
			return;
		/* The harness is the driver: the function comes out of reset with Bus Master
		 * Enable clear and the model cannot fetch a command before it is set. */
		rc_ = fn().set_bus_master(true);
		if (rc_ < 0)
			return;
		set_cmdq(kIova);
		/* As a driver does: the queue address first, then wait for initializing to
		 * clear (the poll thread takes the address write asynchronously). */
		if (cfg.start && cfg.boot_delay.count() == 0)
			wait_booted(std::chrono::milliseconds(5000));
	}
	/* Waits for initializing == 0; false on timeout. */
	bool wait_booted(std::chrono::milliseconds timeout)
	{
		const auto end = std::chrono::steady_clock::now() + timeout;
		while (bar_get(prm::init_seg::initializing) != 0) {
			if (std::chrono::steady_clock::now() > end)
				return false;
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
		return true;
	}
	~Harness()
	{
		/* Stop the device before the memory it may DMA into goes away. */
		emu_.reset();
	}

	int rc() const { return rc_; }
	EmuMlx5 &emu() { return *emu_; }
	EmuMlx5Device &dev() { return emu_->device(); }
	bus::PciFunction &fn() { return emu_->function(); }
	uint8_t *host(size_t off) { return mem_.data() + off; }

	/* Init-segment field access as a driver does it: whole BAR words, swapped by the table. */
	uint64_t bar_get(prm::Field f)
	{
		uint32_t raw = fn().bar0_read32(prm::dword_byte_offset(f));
		return prm::get(&raw, prm::in_dword(f));
	}
	void bar_set(prm::Field f, uint64_t v)
	{
		const size_t off = prm::dword_byte_offset(f);
		uint32_t raw = fn().bar0_read32(off);
		prm::set(&raw, prm::in_dword(f), v);
		fn().bar0_write32(off, raw);
	}
	void set_cmdq(uint64_t iova)
	{
		bar_set(prm::init_seg::cmdq_addr_h, prm::init_seg::cmdq_addr_high(iova));
		/* The device keeps its geometry bits of the low word (read-only to the driver). */
		bar_set(prm::init_seg::cmdq_addr_l, prm::init_seg::cmdq_addr_low(iova));
	}
	void ring(uint32_t slot)
	{
		uint32_t raw = 0;
		prm::set(&raw, prm::in_dword(prm::init_seg::cmd_dbell),
			 prm::init_seg::cmd_dbell_slot(slot));
		fn().bar0_write32(prm::dword_byte_offset(prm::init_seg::cmd_dbell), raw);
	}
	uint8_t *entry(uint32_t slot) { return host(size_t{slot} * prm::cmdq_entry::size); }
	bool owned_by_device(uint32_t slot)
	{
		uint8_t b = std::atomic_ref<uint8_t>(
				    entry(slot)[prm::byte_offset(prm::cmdq_entry::ownership)])
				    .load(std::memory_order_acquire);
		uint8_t tmp[prm::cmdq_entry::size] = {};
		tmp[prm::byte_offset(prm::cmdq_entry::ownership)] = b;
		return prm::get(tmp, prm::cmdq_entry::ownership) == prm::cmdq_entry::owner_hw;
	}

	/* Posts cmd in opts.slot and (optionally) waits for the device to hand the entry back. */
	Reply post(const Cmd &cmd, PostOpts o = {})
	{
		namespace ce = prm::cmdq_entry;
		namespace mb = prm::mailbox;
		const size_t in_len = cmd.in.size();
		const size_t out_len = cmd.out_len;
		uint8_t e[ce::size] = {};
		prm::set(e, ce::type, o.type);
		prm::set(e, ce::input_length, o.in_len_override ? o.in_len_override : in_len);
		prm::set(e, ce::output_length, out_len);
		prm::set(e, ce::token, o.token);
		prm::set(e, ce::signature, o.signature);
		prm::set(e, ce::input_mailbox_ptr, o.in_mb_iova);
		prm::set(e, ce::output_mailbox_ptr, o.out_mb_iova);
		std::memcpy(e + ce::inline_input, cmd.in.data(), std::min(in_len, ce::inline_size));
		chain(kInMbOff, o.in_mb_iova, in_len, cmd.in.data(), o);
		chain(kOutMbOff, o.out_mb_iova, out_len, nullptr, o);
		prm::set(e, ce::ownership, ce::owner_hw);
		std::memcpy(entry(o.slot), e, sizeof(e));
		Reply r;
		if (o.ring)
			ring(o.slot);
		if (!o.wait)
			return r;
		return collect(o.slot, out_len, o.timeout);
	}

	Reply collect(uint32_t slot, size_t out_len, std::chrono::milliseconds timeout)
	{
		namespace ce = prm::cmdq_entry;
		namespace mb = prm::mailbox;
		Reply r;
		const auto end = std::chrono::steady_clock::now() + timeout;
		while (owned_by_device(slot)) {
			if (std::chrono::steady_clock::now() > end)
				return r;
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
		r.completed = true;
		r.delivery = static_cast<uint8_t>(prm::get(entry(slot), ce::status));
		r.out.assign(std::max<size_t>(out_len, ce::inline_size), 0);
		std::memcpy(r.out.data(), entry(slot) + ce::inline_output, ce::inline_size);
		for (size_t at = ce::inline_size, i = 0; at < out_len; at += mb::data_size, i++)
			std::memcpy(r.out.data() + at, host(kOutMbOff + i * mb::align),
				    std::min(mb::data_size, out_len - at));
		return r;
	}

	/* Runs one command and expects it to be delivered. */
	Reply run(const Cmd &cmd, PostOpts o = {})
	{
		Reply r = post(cmd, o);
		EXPECT_TRUE(r.completed);
		EXPECT_EQ(r.delivery, prm::delivery_status::ok);
		if (r.out.size() < prm::cmdq_entry::inline_size)
			r.out.assign(prm::cmdq_entry::inline_size, 0);
		return r;
	}

	/* Commands of the bring-up, as a driver would send them. */
	uint8_t enable_hca()
	{
		return run(Cmd(prm::opcode::enable_hca, prm::enable_hca_in::size, 16)).status();
	}
	int32_t query_pages(uint16_t stage)
	{
		Reply r = run(Cmd(prm::opcode::query_pages, prm::query_pages_in::size,
				  prm::query_pages_out::size, stage));
		EXPECT_EQ(r.status(), prm::status::ok);
		return static_cast<int32_t>(r.get(prm::query_pages_out::num_pages));
	}
	/* Gives n pages starting at page index first of the pages area. */
	Reply give_pages(uint32_t n, uint32_t first = 0)
	{
		Cmd c(prm::opcode::manage_pages, prm::manage_pages_in::pas_offset + 8 * size_t{n},
		      prm::manage_pages_out::size, prm::manage_pages_op_mod::give);
		c.set(prm::manage_pages_in::input_num_entries, n);
		c.set(prm::manage_pages_in::function_id, dev().config().page_function_id);
		for (uint32_t i = 0; i < n; i++)
			c.set_at(prm::manage_pages_in::pas_offset + 8 * size_t{i}, prm::pas_entry,
				 kIova + kPagesOff + (first + i) * uint64_t{4096});
		return run(c);
	}
	uint8_t init_hca()
	{
		return run(Cmd(prm::opcode::init_hca, prm::init_hca_in::size, 16)).status();
	}
	/* enable, ISSI 1, boot and init pages, INIT_HCA. */
	/* SET_HCA_CAP of the atomic caps with only atomic_req_8B_endianness_mode set: what
	 * Linux mlx5_core sends (main.c, handle_hca_cap_atomic). */
	static Cmd set_atomic_mode(uint64_t mode)
	{
		Cmd c(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size, 16,
		      prm::cap_op_mod(prm::cap_type::atomic, 0));
		c.set_at(prm::set_hca_cap_in::capability_offset,
			 prm::atomic_cap::atomic_req_8B_endianness_mode, mode);
		return c;
	}
	/* SET_HCA_CAP of the general caps with cmdif_checksum 0 (and the rest as at power-on):
	 * what rdma-core's and Linux's handle_hca_cap send, so that unsigned entries are taken
	 * after INIT_HCA. */
	/* SET_HCA_CAP general as a driver sends it: checksums off (0 in the zeroed structure),
	 * mkey_by_name when the device's maximum offers it (a stock device refuses it). */
	Cmd set_general_caps()
	{
		Cmd c(prm::opcode::set_hca_cap, prm::set_hca_cap_in::size, 16,
		      prm::cap_op_mod(prm::cap_type::general, 0));
		c.set_at(prm::set_hca_cap_in::capability_offset, prm::hca_cap::mkey_by_name,
			 dev().config().mkey_by_name ? 1 : 0);
		return c;
	}
	/* Firmware bring-up; atomic_mode >= 0: SET_HCA_CAP it before INIT_HCA (else the
	 * power-on mode, big-endian, stays). Then the regular pages, through QUERY_PAGES
	 * (no EQ takes page requests here). */
	void bring_up(int atomic_mode = -1, bool regular_pages = true)
	{
		ASSERT_EQ(enable_hca(), prm::status::ok);
		Cmd issi(prm::opcode::set_issi, prm::set_issi_in::size, 16);
		issi.set(prm::set_issi_in::current_issi, 1);
		ASSERT_EQ(run(issi).status(), prm::status::ok);
		int32_t boot = query_pages(prm::query_pages_op_mod::boot);
		ASSERT_EQ(give_pages(boot, 0).status(), prm::status::ok);
		if (atomic_mode >= 0) {
			ASSERT_EQ(run(set_atomic_mode(uint64_t(atomic_mode))).status(),
				  prm::status::ok);
		}
		{
			ASSERT_EQ(run(set_general_caps()).status(), prm::status::ok);
		}
		int32_t init = query_pages(prm::query_pages_op_mod::init);
		ASSERT_EQ(give_pages(init, boot).status(), prm::status::ok);
		ASSERT_EQ(init_hca(), prm::status::ok);
		int32_t regular = regular_pages ? query_pages(prm::query_pages_op_mod::regular) : 0;
		if (regular > 0) {
			ASSERT_EQ(give_pages(regular, boot + init).status(), prm::status::ok);
		}
	}
	uint32_t alloc_pd()
	{
		Reply r = run(Cmd(prm::opcode::alloc_pd, prm::alloc_pd_in::size,
				  prm::alloc_pd_out::size));
		EXPECT_EQ(r.status(), prm::status::ok);
		return static_cast<uint32_t>(r.get(prm::alloc_pd_out::pd));
	}

private:
	/* Lays out a mailbox chain of len - 16 bytes (blocks 1 KiB apart from area_off). */
	void chain(size_t area_off, uint64_t first_iova, size_t len, const uint8_t *data,
		   const PostOpts &o)
	{
		namespace ce = prm::cmdq_entry;
		namespace mb = prm::mailbox;
		if (first_iova != kIova + area_off)
			return; /* a test-chosen (bad) pointer: leave memory as it is */
		for (size_t at = ce::inline_size, i = 0; at < len; at += mb::data_size, i++) {
			uint8_t *b = host(area_off + i * mb::align);
			std::memset(b, 0, mb::size);
			if (data != nullptr)
				std::memcpy(b, data + at, std::min(mb::data_size, len - at));
			prm::set(b, mb::next_ptr, first_iova + (i + 1) * mb::align);
			prm::set(b, mb::block_num, o.wrong_block_num ? i + 1 : i);
			prm::set(b, mb::token, o.mailbox_token);
		}
	}

	HostMem mem_;
	int rc_ = 0;
	std::unique_ptr<EmuMlx5> emu_;
};

} // namespace nicmr::emu::test

#endif
