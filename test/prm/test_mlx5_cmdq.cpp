/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The driver's command queue, encoders and bring-up against a tiny fake function
 * (FakeFunction below): what the driver puts in DMA memory and BAR 0, and how it reads the
 * answers. The same behaviours against the real device model are in test_mlx5_emu.cpp.
 */
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bus_pci.h"
#include "mem_space.h"
#include "mlx5_cmdq.h"
#include "mlx5_commands.h"
#include "mlx5_device.h"
#include "mlx5_prm.h"

/*
 * A tiny fake PCI function for the driver's unit tests: BAR 0 as plain memory, an identity-free
 * IOMMU (a map from IOVA to host address), and a command handler that runs inline when the
 * driver rings cmd_dbell. It checks what a device checks of the queue (token, block numbers,
 * chain length) and answers the bring-up commands, PDs and mkeys with the least state that
 * lets the driver's logic be tested. The real device model lives in drivers/emu/mlx5.
 */
namespace nicmr::test {

namespace prm = nicmr::mlx5::prm;

class FakeMapper final : public mem::DmaMapper {
public:
	int dma_map(void *va, uint64_t iova, size_t len) override
	{
		std::lock_guard<std::mutex> l(mu_);
		maps_[iova] = {static_cast<uint8_t *>(va), len};
		return 0;
	}
	int dma_unmap(uint64_t iova, size_t len) override
	{
		std::lock_guard<std::mutex> l(mu_);
		auto it = maps_.find(iova);
		if (it == maps_.end() || it->second.len != len)
			return -ENOENT;
		maps_.erase(it);
		return 0;
	}
	std::vector<mem::IovaRange> iova_ranges() const override
	{
		return {{0x100000, (uint64_t{1} << 40) - 1}};
	}
	/* Host address of [iova, iova + len), or nullptr when not mapped in one piece. */
	uint8_t *host(uint64_t iova, size_t len)
	{
		std::lock_guard<std::mutex> l(mu_);
		auto it = maps_.upper_bound(iova);
		if (it == maps_.begin())
			return nullptr;
		--it;
		if (iova - it->first + len > it->second.len)
			return nullptr;
		return it->second.va + (iova - it->first);
	}
	size_t mappings() const
	{
		std::lock_guard<std::mutex> l(mu_);
		return maps_.size();
	}

private:
	struct M {
		uint8_t *va;
		size_t len;
	};
	mutable std::mutex mu_;
	std::map<uint64_t, M> maps_;
};

class FakeFunction final : public bus::PciFunction {
public:
	/* in: the command input; out: sized to the output length, zeroed. Returns the output. */
	using Handler =
		std::function<void(const std::vector<uint8_t> &in, std::vector<uint8_t> &out)>;

	FakeFunction()
	{
		bar_.assign(0x2000 / 4, 0);
		set_reg(prm::init_seg::fw_rev_major, 22);
		set_reg(prm::init_seg::fw_rev_minor, 31);
		set_reg(prm::init_seg::fw_rev_subminor, 1000);
		set_reg(prm::init_seg::cmdif_rev, 5);
		set_reg(prm::init_seg::log_cmdq_size, 5);
		set_reg(prm::init_seg::log_cmdq_stride, 6);
	}

	const std::string &name() const override { return name_; }
	bus::PciId id() const override { return {0x15b3, 0x101d}; }
	size_t bar0_size() const override { return bar_.size() * 4; }
	uint32_t bar0_read32(size_t off) const override { return bar_[off / 4]; }
	void bar0_write32(size_t off, uint32_t v) override
	{
		if (off == prm::dword_byte_offset(prm::init_seg::cmd_dbell)) {
			doorbells++;
			auto slots = static_cast<uint32_t>(
				prm::get(&v, prm::in_dword(prm::init_seg::cmd_dbell)));
			for (uint32_t s = 0; s < 32; s++)
				if ((slots >> s & 1) != 0) {
					rung_slots.push_back(s);
					if (!hung)
						process(s);
				}
			return;
		}
		/* The device owns log_sz / log_stride: writes keep them. */
		if (off == prm::dword_byte_offset(prm::init_seg::cmdq_addr_l)) {
			uint32_t m = 0;
			prm::set(&m, prm::in_dword(prm::init_seg::log_cmdq_size), 0xf);
			prm::set(&m, prm::in_dword(prm::init_seg::log_cmdq_stride), 0xf);
			v = (v & ~m) | (bar_[off / 4] & m);
		}
		bar_[off / 4] = v;
	}
	void bar0_write64(size_t off, uint64_t v) override { std::memcpy(&bar_[off / 4], &v, 8); }
	mem::DmaMapper &dma() override { return mapper; }
	/* A bare config space: what the driver writes reads back (the command register). */
	int config_read(uint32_t off, void *buf, size_t len) const override
	{
		if (len == 0 || off >= config_.size() || len > config_.size() - off)
			return -EINVAL;
		std::memcpy(buf, config_.data() + off, len);
		return 0;
	}
	int config_write(uint32_t off, const void *buf, size_t len) override
	{
		if (len == 0 || off >= config_.size() || len > config_.size() - off)
			return -EINVAL;
		if (config_error != 0)
			return config_error;
		std::memcpy(config_.data() + off, buf, len);
		return 0;
	}
	int config_error = 0; /* what config_write fails with (0: it works) */

	void set_reg(prm::Field f, uint64_t v)
	{
		prm::set(reinterpret_cast<uint8_t *>(bar_.data()), f, v);
	}
	uint64_t reg(prm::Field f) const
	{
		return prm::get(reinterpret_cast<const uint8_t *>(bar_.data()), f);
	}

	/* Runs the command in a slot as a device would; public so a test can "restart". */
	void process(uint32_t slot = 0)
	{
		uint64_t q =
			prm::init_seg::cmdq_addr(reg(prm::init_seg::cmdq_addr_h),
						 reg(prm::init_seg::cmdq_addr_l)) +
			prm::cmdq_entry::slot_offset(
				slot, static_cast<uint32_t>(reg(prm::init_seg::log_cmdq_stride)));
		uint8_t *e = mapper.host(q, prm::cmdq_entry::size);
		if (e == nullptr) {
			faults++;
			return;
		}
		size_t in_len = prm::get(e, prm::cmdq_entry::input_length);
		size_t out_len = prm::get(e, prm::cmdq_entry::output_length);
		auto token = static_cast<uint8_t>(prm::get(e, prm::cmdq_entry::token));
		std::vector<uint8_t> in(in_len), out(out_len, 0);
		bool ok = true;
		std::memcpy(in.data(), e + prm::cmdq_entry::inline_input,
			    std::min<size_t>(in_len, 16));
		std::vector<uint8_t *> out_blocks;
		ok &= walk(prm::get(e, prm::cmdq_entry::input_mailbox_ptr), token, in_len,
			   [&](size_t off, uint8_t *data, size_t n) {
				   std::memcpy(in.data() + off, data, n);
			   });
		ok &= walk(prm::get(e, prm::cmdq_entry::output_mailbox_ptr), token, out_len,
			   [&](size_t, uint8_t *data, size_t) { out_blocks.push_back(data); });
		if (!ok || force_delivery_status != 0) {
			prm::set(e, prm::cmdq_entry::status,
				 ok ? force_delivery_status
				    : prm::delivery_status::bad_block_number);
		} else {
			auto op =
				static_cast<uint16_t>(prm::get(in.data(), prm::cmd_hdr_in::opcode));
			opcodes.push_back(op);
			op_mods.push_back(static_cast<uint16_t>(
				prm::get(in.data(), prm::cmd_hdr_in::op_mod)));
			auto f = forced.find(op);
			if (f != forced.end()) {
				prm::set(out.data(), prm::cmd_hdr_out::status, f->second.first);
				prm::set(out.data(), prm::cmd_hdr_out::syndrome, f->second.second);
			} else {
				handle(in, out);
			}
			std::memcpy(e + prm::cmdq_entry::inline_output, out.data(),
				    std::min<size_t>(out_len, 16));
			for (size_t i = 0; i < out_blocks.size(); i++) {
				size_t off = 16 + i * prm::mailbox::data_size;
				std::memcpy(out_blocks[i], out.data() + off,
					    std::min(prm::mailbox::data_size, out_len - off));
			}
		}
		/* Hand the entry back last, with release order, as the device model does. */
		constexpr size_t byte = prm::byte_offset(prm::cmdq_entry::ownership);
		uint8_t own = e[byte];
		prm::set(&own, prm::Field{prm::cmdq_entry::ownership.bit_off % 8, 1},
			 prm::cmdq_entry::owner_sw);
		std::atomic_ref<uint8_t>(e[byte]).store(own, std::memory_order_release);
	}

	/* Default behaviour: bring-up, PD, mkeys and an echo opcode (0x7777). */
	void handle(const std::vector<uint8_t> &in, std::vector<uint8_t> &out)
	{
		namespace o = prm::opcode;
		const uint8_t *i = in.data();
		uint8_t *p = out.data();
		switch (prm::get(i, prm::cmd_hdr_in::opcode)) {
		case 0x7777:
			std::memcpy(p + 8, i + 8, std::min(in.size(), out.size()) - 8);
			break;
		case o::query_issi:
			prm::set(p, prm::query_issi_out::supported_issi_dw0, supported_issi);
			break;
		case o::query_pages: {
			auto mod = prm::get(i, prm::cmd_hdr_in::op_mod);
			prm::set(p, prm::query_pages_out::num_pages,
				 mod == prm::query_pages_op_mod::boot ? boot_pages : init_pages);
			break;
		}
		case o::manage_pages: {
			if (prm::get(i, prm::cmd_hdr_in::op_mod) ==
			    prm::manage_pages_op_mod::give) {
				auto n = prm::get(i, prm::manage_pages_in::input_num_entries);
				for (uint64_t k = 0; k < n; k++)
					pages.insert(prm::get(i + 16 + 8 * k, prm::pas_entry));
			} else {
				auto n = prm::get(i, prm::manage_pages_in::input_num_entries);
				uint64_t k = 0;
				if (bogus_take != 0) {
					prm::set(p + 16, prm::pas_entry, bogus_take);
					prm::set(p, prm::manage_pages_out::output_num_entries, 1);
					break;
				}
				while (k < n && !pages.empty() && 16 + 8 * (k + 1) <= out.size()) {
					prm::set(p + 16 + 8 * k, prm::pas_entry, *pages.begin());
					pages.erase(pages.begin());
					k++;
				}
				prm::set(p, prm::manage_pages_out::output_num_entries, k);
			}
			break;
		}
		case o::query_hca_cap: {
			auto mod = prm::get(i, prm::cmd_hdr_in::op_mod);
			auto is = [mod](uint16_t type) {
				return mod == prm::cap_op_mod(type, prm::cap_mode::max) ||
				       mod == prm::cap_op_mod(type, prm::cap_mode::current);
			};
			const bool cur = mod == prm::cap_op_mod(prm::cap_type::general,
								prm::cap_mode::current);
			uint8_t *c = p + prm::query_hca_cap_out::capability_offset;
			if (is(prm::cap_type::general)) {
				prm::set(c, prm::hca_cap::log_max_mkey, 20);
				prm::set(c, prm::hca_cap::log_max_pd, 16);
				prm::set(c, prm::hca_cap::atomic, 1);
				prm::set(c, prm::hca_cap::umr_ptr_rlkey, 1);
				prm::set(c, prm::hca_cap::mkey_by_name,
					 cur ? mkey_by_name_cur : mkey_by_name_max);
			} else if (is(prm::cap_type::atomic) && atomic_query_status != 0) {
				prm::set(p, prm::cmd_hdr_out::status, atomic_query_status);
			} else if (is(prm::cap_type::atomic)) {
				prm::set(c, prm::atomic_cap::atomic_operations, 0x3);
				prm::set(c, prm::atomic_cap::atomic_size_qp, 0x8);
				prm::set(c,
					 prm::atomic_cap::supported_atomic_req_8B_endianness_mode_1,
					 atomic_host_supported);
				prm::set(c, prm::atomic_cap::atomic_req_8B_endianness_mode,
					 atomic_mode_cur);
			} else {
				prm::set(p, prm::cmd_hdr_out::status, prm::status::bad_param);
			}
			break;
		}
		case o::set_hca_cap:
			if (prm::get(i, prm::cmd_hdr_in::op_mod) ==
			    prm::cap_op_mod(prm::cap_type::atomic, 0))
				atomic_mode_cur = static_cast<uint32_t>(prm::get(
					i + 16, prm::atomic_cap::atomic_req_8B_endianness_mode));
			else {
				mkey_by_name_cur = prm::get(i + 16, prm::hca_cap::mkey_by_name);
				general_set.assign(i + 16, i + in.size());
			}
			break;
		case o::query_special_contexts:
			prm::set(p, prm::query_special_contexts_out::resd_lkey, resd_lkey);
			break;
		case o::alloc_pd:
			prm::set(p, prm::alloc_pd_out::pd, ++pd_next);
			break;
		case o::create_mkey: {
			uint32_t idx = static_cast<uint32_t>(
				prm::get(i, prm::create_mkey_in::input_mkey_index));
			if (idx == 0)
				idx = ++mkey_next;
			if (mkeys.count(idx) != 0) {
				prm::set(p, prm::cmd_hdr_out::status, prm::status::resource_busy);
				break;
			}
			mkeys[idx] = std::vector<uint8_t>(in.begin() + 16, in.end());
			prm::set(p, prm::create_mkey_out::mkey_index, idx);
			break;
		}
		case o::query_mkey: {
			auto it = mkeys.find(
				static_cast<uint32_t>(prm::get(i, prm::query_mkey_in::mkey_index)));
			if (it == mkeys.end()) {
				prm::set(p, prm::cmd_hdr_out::status, prm::status::bad_index);
				break;
			}
			/* Stored from byte 16 of the input: mkc, then translations at 272. */
			std::memcpy(p + 16, it->second.data(),
				    std::min(it->second.size(), out.size() - 16));
			break;
		}
		case o::destroy_mkey:
			if (mkeys.erase(static_cast<uint32_t>(
				    prm::get(i, prm::destroy_mkey_in::mkey_index))) == 0)
				prm::set(p, prm::cmd_hdr_out::status, prm::status::bad_index);
			break;
		default:
			break;
		}
	}

	uint32_t resd_lkey = 0x5e5d; /* QUERY_SPECIAL_CONTEXTS */
	FakeMapper mapper;
	std::string name_ = "fake:0";
	bool hung = false;
	uint32_t force_delivery_status = 0;
	std::map<uint16_t, std::pair<uint8_t, uint32_t>> forced; /* opcode -> status, syndrome */
	std::vector<uint16_t> opcodes;
	std::vector<uint16_t> op_mods;	  /* of each command in opcodes */
	std::vector<uint32_t> rung_slots; /* every slot rung, in order */
	std::vector<uint8_t> general_set; /* the last SET_HCA_CAP(general) capability area */
	std::set<uint64_t> pages;
	uint64_t bogus_take = 0; /* MANAGE_PAGES(take) answers with this never-given page */
	int32_t boot_pages = 3;
	int32_t init_pages = 5;
	uint32_t supported_issi = 0x3;
	uint32_t mkey_by_name_max = 1, mkey_by_name_cur = 0;
	uint32_t atomic_host_supported = 1, atomic_mode_cur = 0; /* atomic caps */
	uint8_t atomic_query_status = 0; /* QUERY_HCA_CAP of the atomic caps answers this */
	uint32_t pd_next = 0, mkey_next = 0;
	std::map<uint32_t, std::vector<uint8_t>> mkeys;
	int doorbells = 0;
	int faults = 0;

private:
	template <class F> bool walk(uint64_t ptr, uint8_t token, size_t len, F &&f)
	{
		size_t off = 16;
		for (uint32_t n = 0; off < len; n++) {
			uint8_t *mb = mapper.host(ptr, prm::mailbox::size);
			if (mb == nullptr || prm::get(mb, prm::mailbox::token) != token ||
			    prm::get(mb, prm::mailbox::block_num) != n)
				return false;
			size_t take = std::min(prm::mailbox::data_size, len - off);
			f(off, mb, take);
			off += take;
			ptr = prm::get(mb, prm::mailbox::next_ptr);
		}
		return true;
	}

	std::vector<uint32_t> bar_;
	std::array<uint8_t, 64> config_{};
};

} // namespace nicmr::test

using namespace std::chrono_literals;
namespace mlx5 = nicmr::mlx5;
namespace mem = nicmr::mem;
namespace prm = nicmr::mlx5::prm;
using nicmr::test::FakeFunction;

namespace {

mem::PoolParams small_pool()
{
	mem::PoolParams p;
	p.size = size_t{2} << 20;
	p.page_size = mem::kPage4K;
	p.name = "test-mlx5";
	return p;
}

struct Fixture : ::testing::Test {
	void SetUp() override
	{
		space = std::make_unique<mem::DmaSpace>(fn.dma());
		ASSERT_EQ(mem::DmaArena::create(*space, small_pool(), &arena), 0);
	}
	void TearDown() override
	{
		arena.reset();
		space.reset();
	}
	mlx5::DeviceOptions opts()
	{
		mlx5::DeviceOptions o;
		o.arena = arena.get();
		o.init_timeout = 200ms;
		o.cmd_timeout = 200ms;
		return o;
	}
	std::vector<uint8_t> cmd(uint16_t opcode, size_t len)
	{
		std::vector<uint8_t> in(len, 0);
		prm::set(in.data(), prm::cmd_hdr_in::opcode, opcode);
		return in;
	}

	FakeFunction fn;
	std::unique_ptr<mem::DmaSpace> space;
	std::unique_ptr<mem::DmaArena> arena;
};

using CmdQueue = Fixture;
using Mlx5Device = Fixture;
using Mlx5Encoder = Fixture;

constexpr uint16_t kEcho = 0x7777;

} // namespace

TEST_F(CmdQueue, PlacesTheQueueWhereTheInitSegmentSays)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), 0);
	uint64_t addr = fn.reg(prm::init_seg::cmdq_addr_h) << 32 |
			(fn.reg(prm::init_seg::cmdq_addr_l) & ~uint64_t{0xfff});
	EXPECT_NE(fn.mapper.host(addr, 4096), nullptr);
	EXPECT_EQ(addr % 4096, 0u);
	EXPECT_EQ(q->log_size(), 5u);
	EXPECT_EQ(q->log_stride(), 6u);
}

TEST_F(CmdQueue, InlineCommandNeedsNoMailbox)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), 0);
	auto in = cmd(kEcho, 16);
	for (size_t i = 8; i < 16; i++)
		in[i] = static_cast<uint8_t>(i * 3);
	uint8_t out[16] = {};
	ASSERT_EQ(q->exec(in.data(), in.size(), out, sizeof(out)), 0);
	EXPECT_EQ(std::memcmp(out + 8, in.data() + 8, 8), 0);
	EXPECT_EQ(q->mailboxes_cached(), 0u);
	EXPECT_EQ(fn.doorbells, 1);
}

TEST_F(CmdQueue, MailboxChainsCarryLongInputAndOutput)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), 0);
	/* 16 inline + three full blocks + 5 bytes: four input and four output mailboxes. */
	const size_t len = 16 + 3 * 512 + 5;
	auto in = cmd(kEcho, len);
	for (size_t i = 8; i < len; i++)
		in[i] = static_cast<uint8_t>(i * 7 + 1);
	std::vector<uint8_t> out(len, 0);
	ASSERT_EQ(q->exec(in.data(), in.size(), out.data(), out.size()), 0);
	EXPECT_EQ(std::memcmp(out.data() + 8, in.data() + 8, len - 8), 0);
	EXPECT_EQ(q->mailboxes_cached(), 8u);

	/* The cache is reused: a second, shorter command allocates nothing. */
	size_t before = arena->bytes_in_use();
	auto in2 = cmd(kEcho, 600);
	std::vector<uint8_t> out2(600, 0);
	in2[599] = 0x5a;
	ASSERT_EQ(q->exec(in2.data(), in2.size(), out2.data(), out2.size()), 0);
	EXPECT_EQ(out2[599], 0x5a);
	EXPECT_EQ(arena->bytes_in_use(), before);
}

TEST_F(CmdQueue, OutputLongerThanInputComesBackThroughMailboxes)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), 0);
	/* QUERY_HCA_CAP: 16 bytes in, 4112 out. */
	std::vector<uint8_t> cap(prm::query_hca_cap_out::capability_size);
	ASSERT_EQ(mlx5::query_hca_cap(*q, prm::cap_type::general, prm::cap_mode::max, cap.data()),
		  0);
	EXPECT_EQ(prm::get(cap.data(), prm::hca_cap::log_max_mkey), 20u);
	EXPECT_EQ(prm::get(cap.data(), prm::hca_cap::mkey_by_name), 1u);
}

TEST_F(CmdQueue, QuerySpecialContextsReadsTheReservedLkey)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), 0);
	uint32_t lkey = 0;
	ASSERT_EQ(mlx5::query_special_contexts(*q, &lkey), 0);
	EXPECT_EQ(lkey, fn.resd_lkey);
	const size_t sent = fn.opcodes.size();
	EXPECT_EQ(mlx5::query_special_contexts(*q, nullptr), -EINVAL);
	EXPECT_EQ(fn.opcodes.size(), sent) << "nothing sent";
}

TEST_F(CmdQueue, EveryStatusMapsToItsErrno)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), 0);
	const std::pair<uint8_t, int> table[] = {
		{prm::status::internal_err, -EIO},
		{prm::status::bad_op, -EOPNOTSUPP},
		{prm::status::bad_param, -EINVAL},
		{prm::status::bad_sys_state, -EIO},
		{prm::status::bad_resource, -EINVAL},
		{prm::status::resource_busy, -EBUSY},
		{prm::status::not_ready, -EAGAIN},
		{prm::status::exceed_lim, -ENOMEM},
		{prm::status::bad_res_state, -EINVAL},
		{prm::status::bad_index, -ENXIO},
		{prm::status::no_resources, -ENOSPC},
		{prm::status::bad_qp_state, -EINVAL},
		{prm::status::bad_input_len, -EMSGSIZE},
		{prm::status::bad_output_len, -EOVERFLOW},
		{0x7e, -EPROTO},
	};
	uint32_t syndrome = 0x1000;
	for (auto [st, err] : table) {
		fn.forced[kEcho] = {st, ++syndrome};
		auto in = cmd(kEcho, 16);
		uint8_t out[16];
		EXPECT_EQ(q->exec(in.data(), in.size(), out, sizeof(out)), err)
			<< mlx5::status_name(st);
		EXPECT_EQ(q->last_status(), st);
		EXPECT_EQ(q->last_syndrome(), syndrome);
		EXPECT_EQ(mlx5::status_to_errno(st), err);
	}
	fn.forced.clear();
	auto in = cmd(kEcho, 16);
	uint8_t out[16];
	EXPECT_EQ(q->exec(in.data(), in.size(), out, sizeof(out)), 0);
	EXPECT_EQ(q->last_status(), prm::status::ok);
}

TEST_F(CmdQueue, DeliveryErrorIsEio)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), 0);
	fn.force_delivery_status = prm::delivery_status::signature_err;
	auto in = cmd(kEcho, 16);
	uint8_t out[16];
	EXPECT_EQ(q->exec(in.data(), in.size(), out, sizeof(out)), -EIO);
	fn.force_delivery_status = 0;
	EXPECT_EQ(q->exec(in.data(), in.size(), out, sizeof(out)), 0);
}

TEST_F(CmdQueue, RejectsLengthsOutsideTheHeadersAndTheLimit)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), 0);
	auto in = cmd(kEcho, 16);
	uint8_t out[16];
	EXPECT_EQ(q->exec(in.data(), 7, out, sizeof(out)), -EINVAL);
	EXPECT_EQ(q->exec(in.data(), in.size(), out, 7), -EINVAL);
	EXPECT_EQ(q->exec(in.data(), mlx5::CmdTransport::max_message + 1, out, sizeof(out)),
		  -EINVAL);
	EXPECT_EQ(fn.doorbells, 0);
}

TEST_F(CmdQueue, MailboxesBeyondTheArenaAreEnomem)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), 0);
	/* 2 MiB arena, 1 KiB per mailbox: 4 MiB of input cannot be chained. */
	std::vector<uint8_t> in = cmd(kEcho, size_t{4} << 20);
	uint8_t out[16];
	EXPECT_EQ(q->exec(in.data(), in.size(), out, sizeof(out)), -ENOMEM);
	EXPECT_EQ(fn.doorbells, 0);
	EXPECT_FALSE(q->broken());
}

TEST_F(CmdQueue, HungDeviceTimesOutAndTheQueueStaysBroken)
{
	std::unique_ptr<mlx5::CmdQueue> q;
	ASSERT_EQ(mlx5::CmdQueue::create(fn, *arena, 50ms, &q), 0);
	fn.hung = true;
	auto in = cmd(kEcho, 16);
	uint8_t out[16];
	auto t0 = std::chrono::steady_clock::now();
	EXPECT_EQ(q->exec(in.data(), in.size(), out, sizeof(out)), -ETIMEDOUT);
	EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
	EXPECT_TRUE(q->broken());
	/* The device still owns the slot: nothing more is posted. */
	fn.hung = false;
	EXPECT_EQ(q->exec(in.data(), in.size(), out, sizeof(out)), -EIO);
	EXPECT_EQ(fn.doorbells, 1);
}

TEST_F(CmdQueue, RefusesAGeometryItCannotUse)
{
	fn.set_reg(prm::init_seg::log_cmdq_stride, 5);
	std::unique_ptr<mlx5::CmdQueue> q;
	EXPECT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), -EPROTO);
	fn.set_reg(prm::init_seg::log_cmdq_stride, 8);
	EXPECT_EQ(mlx5::CmdQueue::create(fn, *arena, 100ms, &q), -EPROTO); /* 32 x 256 > 4 KiB */
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, BringUpFollowsTheVfioProviderOrder)
{
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), 0);
	namespace o = prm::opcode;
	/* rdma-core mlx5_vfio_setup_function then create_async_eqs: boot pages, ACCESS_REG
	 * host endianness, the general caps (current, max), SET_HCA_CAP, read back; the atomic
	 * caps before INIT_HCA, as Linux's handle_hca_cap_atomic: query, set host endianness,
	 * query again; init pages, INIT_HCA; the async EQ on a UAR of its own; the special contexts
	 * (the reserved lkey); the extension query; then the
	 * completion EQ and its UAR, where rdma-core's VFIO provider creates its EQ (this device
	 * has no RoCE cap: no RoCE caps query). Every MANAGE_PAGES on the last slot, everything
	 * else on slot 0. */
	const std::vector<std::pair<uint16_t, uint16_t>> want = {
		{o::enable_hca, 0},
		{o::query_issi, 0},
		{o::set_issi, 0},
		{o::query_pages, prm::query_pages_op_mod::boot},
		{o::manage_pages, prm::manage_pages_op_mod::give},
		{o::access_reg, prm::access_register_op_mod::write},
		{o::query_hca_cap, prm::cap_op_mod(prm::cap_type::general, prm::cap_mode::current)},
		{o::query_hca_cap, prm::cap_op_mod(prm::cap_type::general, prm::cap_mode::max)},
		{o::set_hca_cap, prm::cap_op_mod(prm::cap_type::general, 0)},
		{o::query_hca_cap, prm::cap_op_mod(prm::cap_type::general, prm::cap_mode::current)},
		{o::query_hca_cap, prm::cap_op_mod(prm::cap_type::atomic, prm::cap_mode::current)},
		{o::set_hca_cap, prm::cap_op_mod(prm::cap_type::atomic, 0)},
		{o::query_hca_cap, prm::cap_op_mod(prm::cap_type::atomic, prm::cap_mode::current)},
		{o::query_pages, prm::query_pages_op_mod::init},
		{o::manage_pages, prm::manage_pages_op_mod::give},
		{o::init_hca, 0},
		{o::alloc_uar, 0},
		{o::create_eq, 0},
		{o::query_special_contexts, 0},
		{o::query_hca_cap,
		 prm::cap_op_mod(prm::cap_type::nicmr_ext, prm::cap_mode::current)},
		{o::alloc_uar, 0},
		{o::create_eq, 0},
	};
	ASSERT_EQ(fn.opcodes.size(), want.size());
	for (size_t i = 0; i < want.size(); i++) {
		EXPECT_EQ(fn.opcodes[i], want[i].first) << "command " << i;
		EXPECT_EQ(fn.op_mods[i], want[i].second) << "command " << i;
		EXPECT_EQ(fn.rung_slots[i], want[i].first == o::manage_pages ? 31u : 0u)
			<< "command " << i;
	}
	/* SET_HCA_CAP(general) as rdma-core's handle_hca_cap: no checksums, 4 KiB UAR pages
	 * (the system page here), mkey_by_name since the maximum offers it. */
	ASSERT_EQ(fn.general_set.size(), prm::set_hca_cap_in::capability_size);
	EXPECT_EQ(prm::get(fn.general_set.data(), prm::hca_cap::cmdif_checksum), 0u);
	EXPECT_EQ(prm::get(fn.general_set.data(), prm::hca_cap_setup::log_uar_page_sz), 0u);
	EXPECT_EQ(prm::get(fn.general_set.data(), prm::hca_cap::mkey_by_name), 1u);
	EXPECT_EQ(dev->caps().resd_lkey, 0x5e5du) << "the device's reserved lkey, asked";
	EXPECT_EQ(dev->pages_given(), 8u);
	EXPECT_EQ(fn.pages.size(), 8u);
	EXPECT_EQ(dev->caps().log_max_mkey, 20u);
	EXPECT_EQ(dev->caps().log_max_pd, 16u);
	EXPECT_TRUE(dev->caps().mkey_by_index);
	EXPECT_TRUE(dev->caps().atomic);
	EXPECT_EQ(dev->caps().atomic_operations, 3u);
	EXPECT_EQ(dev->caps().atomic_size_qp, 8u);
	EXPECT_TRUE(dev->caps().atomic_host_endianness_supported);
	EXPECT_TRUE(dev->caps().atomic_host_endianness);
	EXPECT_EQ(fn.atomic_mode_cur, prm::atomic_req_mode::host_endianness);
	EXPECT_TRUE(dev->caps().umr_ptr_rlkey);
	EXPECT_FALSE(dev->caps().ext_present);
	EXPECT_EQ(dev->caps().fw_major, 22);
	EXPECT_EQ(dev->caps().issi, 1);

	EXPECT_TRUE(fn.bus_master()) << "set before the first command";

	fn.opcodes.clear();
	dev.reset();
	/* The completion EQ and its UAR, then (rdma-core mlx5_vfio_free_context) the async EQ
	 * and its UAR, then the HCA. */
	EXPECT_EQ(fn.opcodes, (std::vector<uint16_t>{o::destroy_eq, o::dealloc_uar, o::destroy_eq,
						     o::dealloc_uar, o::teardown_hca,
						     o::manage_pages, o::disable_hca}));
	EXPECT_TRUE(fn.pages.empty());
	EXPECT_FALSE(fn.bus_master()) << "cleared at teardown";
}

TEST_F(Mlx5Device, ACommandRegisterThatCannotBeWrittenFailsOpenBeforeAnyCommand)
{
	fn.config_error = -EIO; /* what a short pwrite of VFIO's config region gives */
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), -EIO);
	EXPECT_EQ(dev, nullptr);
	EXPECT_EQ(fn.doorbells, 0);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, SetsGeneralCapsAlwaysAndAtomicModeOnlyWhenOffered)
{
	fn.mkey_by_name_max = 0;
	fn.atomic_host_supported = 0; /* big-endian atomics only: nothing to ask for */
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), 0);
	/* One SET_HCA_CAP, the general one: checksums off and the UAR page size are always
	 * set (rdma-core handle_hca_cap); mkey_by_name stays off. */
	size_t sets = 0;
	for (size_t i = 0; i < fn.opcodes.size(); i++)
		if (fn.opcodes[i] == prm::opcode::set_hca_cap) {
			sets++;
			EXPECT_EQ(fn.op_mods[i], prm::cap_op_mod(prm::cap_type::general, 0));
		}
	EXPECT_EQ(sets, 1u);
	EXPECT_EQ(prm::get(fn.general_set.data(), prm::hca_cap::mkey_by_name), 0u);
	EXPECT_EQ(prm::get(fn.general_set.data(), prm::hca_cap::cmdif_checksum), 0u);
	EXPECT_FALSE(dev->caps().mkey_by_index);
	EXPECT_FALSE(dev->caps().atomic_host_endianness_supported);
	EXPECT_FALSE(dev->caps().atomic_host_endianness);
	EXPECT_TRUE(dev->caps().atomic);
	mlx5::MkeyCreate c;
	c.index = 42;
	uint32_t idx = 0;
	EXPECT_EQ(dev->create_mkey(c, &idx), -EOPNOTSUPP);
}

TEST_F(Mlx5Device, HundredCyclesLeaveNothingBehind)
{
	const size_t mappings = fn.mapper.mappings();
	for (int i = 0; i < 100; i++) {
		std::unique_ptr<mlx5::Device> dev;
		ASSERT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), 0) << "cycle " << i;
		ASSERT_GT(arena->bytes_in_use(), 0u);
		dev.reset();
		ASSERT_EQ(arena->bytes_in_use(), 0u) << "cycle " << i;
		ASSERT_TRUE(fn.pages.empty()) << "cycle " << i;
	}
	EXPECT_EQ(fn.mapper.mappings(), mappings);
}

TEST_F(Mlx5Device, OwnArenaIsReturnedToTheSpace)
{
	mlx5::DeviceOptions o = opts();
	o.arena = nullptr;
	o.arena_params = small_pool();
	const size_t pools = space->pool_count();
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(fn, *space, o, &dev), 0);
	/* The control arena and the firmware page arenas (one chunk holds these 8 pages). */
	EXPECT_EQ(dev->page_memory(), o.page_chunk);
	EXPECT_EQ(space->pool_count(), pools + 2);
	dev.reset();
	EXPECT_EQ(space->pool_count(), pools);
}

TEST_F(Mlx5Device, SpaceOfAnotherIommuIsRefused)
{
	nicmr::test::FakeMapper other;
	mem::DmaSpace wrong(other);
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(fn, wrong, opts(), &dev), -EINVAL);
	EXPECT_EQ(mlx5::Device::open(fn, *space, opts(), nullptr), -EINVAL);
	EXPECT_EQ(fn.doorbells, 0);
}

TEST_F(Mlx5Device, StillInitializingTimesOut)
{
	fn.set_reg(prm::init_seg::initializing, 1);
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), -ETIMEDOUT);
	EXPECT_EQ(dev, nullptr);
	EXPECT_EQ(fn.doorbells, 0);
	/* The queue's address was written before the wait (rdma-core's order): firmware that
	 * waits for it before clearing initializing is not kept waiting by the driver. */
	EXPECT_NE(prm::init_seg::cmdq_addr(fn.reg(prm::init_seg::cmdq_addr_h),
					   fn.reg(prm::init_seg::cmdq_addr_l)),
		  0u);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, OtherCommandInterfaceRevisionIsRefused)
{
	fn.set_reg(prm::init_seg::cmdif_rev, 4);
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), -EPROTONOSUPPORT);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, MissingIssi1IsRefused)
{
	fn.supported_issi = 0x1;
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), -EPROTONOSUPPORT);
	EXPECT_EQ(fn.opcodes.back(), prm::opcode::disable_hca);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, FailedInitHcaGivesEveryPageBack)
{
	fn.forced[prm::opcode::init_hca] = {prm::status::bad_sys_state, 0xbad};
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), -EIO);
	EXPECT_TRUE(fn.pages.empty());
	EXPECT_EQ(arena->bytes_in_use(), 0u);
	/* Not initialised, so no TEARDOWN_HCA; pages back, then DISABLE_HCA. */
	ASSERT_GE(fn.opcodes.size(), 2u);
	EXPECT_EQ(fn.opcodes[fn.opcodes.size() - 2], prm::opcode::manage_pages);
	EXPECT_EQ(fn.opcodes.back(), prm::opcode::disable_hca);
}

/* The reserved lkey is needed for every UMR by pointer: no answer, no device. */
TEST_F(Mlx5Device, RefusedQuerySpecialContextsFailsBringUpAndTearsDown)
{
	fn.forced[prm::opcode::query_special_contexts] = {prm::status::bad_op, 0x5c};
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), -EOPNOTSUPP);
	EXPECT_TRUE(fn.pages.empty());
	EXPECT_EQ(std::count(fn.opcodes.begin(), fn.opcodes.end(), prm::opcode::teardown_hca), 1);
	EXPECT_EQ(fn.opcodes.back(), prm::opcode::disable_hca);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, RefusedAtomicModeFailsBringUpAndGivesEveryPageBack)
{
	/* Only the atomic caps are set (mkey_by_name has nothing to turn on): a device that
	 * reports host endianness and then refuses it fails the open with the command's code. */
	fn.mkey_by_name_max = 0;
	fn.forced[prm::opcode::set_hca_cap] = {prm::status::bad_param, 0x0e000022};
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), -EINVAL);
	EXPECT_EQ(std::count(fn.opcodes.begin(), fn.opcodes.end(), prm::opcode::set_hca_cap), 1);
	EXPECT_EQ(std::count(fn.opcodes.begin(), fn.opcodes.end(), prm::opcode::init_hca), 0);
	EXPECT_TRUE(fn.pages.empty());
	EXPECT_EQ(fn.opcodes.back(), prm::opcode::disable_hca);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, FailedAtomicCapsQueryFailsBringUpAndGivesEveryPageBack)
{
	fn.atomic_query_status = prm::status::internal_err;
	std::unique_ptr<mlx5::Device> dev;
	EXPECT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), -EIO);
	EXPECT_EQ(std::count(fn.opcodes.begin(), fn.opcodes.end(), prm::opcode::init_hca), 0);
	EXPECT_TRUE(fn.pages.empty());
	EXPECT_EQ(fn.opcodes.back(), prm::opcode::disable_hca);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, DriverThatDoesNotAskKeepsBigEndianAtomics)
{
	mlx5::DeviceOptions o = opts();
	o.want_atomic_host_endianness = false;
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(fn, *space, o, &dev), 0);
	EXPECT_TRUE(dev->caps().atomic_host_endianness_supported);
	EXPECT_FALSE(dev->caps().atomic_host_endianness);
	EXPECT_EQ(fn.atomic_mode_cur, prm::atomic_req_mode::big_endian);
}

TEST_F(Mlx5Device, TeardownEndsWhenTheDeviceReturnsPagesItWasNeverGiven)
{
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), 0);
	fn.bogus_take = 0xdead000;
	dev.reset();
	EXPECT_EQ(fn.opcodes.back(), prm::opcode::disable_hca);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, HungDeviceTearsDownWithoutCommands)
{
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), 0);
	fn.hung = true;
	uint32_t pd = 0;
	EXPECT_EQ(dev->alloc_pd(&pd), -ETIMEDOUT);
	EXPECT_EQ(dev->alloc_pd(&pd), -EIO);
	int bells = fn.doorbells;
	dev.reset();
	EXPECT_EQ(fn.doorbells, bells);
	EXPECT_EQ(arena->bytes_in_use(), 0u);
}

TEST_F(Mlx5Device, PdAndMkeyCommandsRoundTrip)
{
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), 0);
	uint32_t pd = 0;
	ASSERT_EQ(dev->alloc_pd(&pd), 0);
	EXPECT_NE(pd, 0u);

	std::vector<mlx5::MttEntry> mtt(3);
	for (size_t i = 0; i < mtt.size(); i++)
		mtt[i] = {0x200000 + i * 4096, true, i != 1};
	mlx5::MkeyCreate c;
	c.ctx.pd = pd;
	c.ctx.rr = c.ctx.rw = c.ctx.lw = true;
	c.ctx.variant = 0x42;
	c.ctx.start_addr = 0x7f0000001000;
	c.ctx.len = 3 * 4096;
	c.pg_access = true;
	c.mtt = mtt;
	uint32_t idx = 0;
	ASSERT_EQ(dev->create_mkey(c, &idx), 0);

	mlx5::MkeyQuery q;
	ASSERT_EQ(dev->query_mkey(idx, 8, &q), 0);
	EXPECT_EQ(q.ctx.pd, pd);
	EXPECT_TRUE(q.ctx.rr && q.ctx.rw && q.ctx.lw && q.ctx.lr);
	EXPECT_FALSE(q.ctx.a);
	EXPECT_EQ(q.ctx.variant, 0x42);
	EXPECT_EQ(q.ctx.start_addr, c.ctx.start_addr);
	EXPECT_EQ(q.ctx.len, c.ctx.len);
	EXPECT_EQ(q.ctx.translations_octword_size, 2u);
	ASSERT_EQ(q.mtt.size(), 4u); /* two octwords: the fourth entry is the zero padding */
	for (size_t i = 0; i < 3; i++) {
		EXPECT_EQ(q.mtt[i].iova, mtt[i].iova);
		EXPECT_EQ(q.mtt[i].wr_en, mtt[i].wr_en);
	}
	EXPECT_EQ(q.mtt[3].iova, 0u);

	EXPECT_EQ(dev->destroy_mkey(idx), 0);
	EXPECT_EQ(dev->destroy_mkey(idx), -ENXIO);
	EXPECT_EQ(dev->last_status(), prm::status::bad_index);
	EXPECT_EQ(dev->query_mkey(idx, 0, &q), -ENXIO);
	EXPECT_EQ(dev->dealloc_pd(pd), 0);
}

TEST_F(Mlx5Device, MkeyAtAChosenIndex)
{
	std::unique_ptr<mlx5::Device> dev;
	ASSERT_EQ(mlx5::Device::open(fn, *space, opts(), &dev), 0);
	ASSERT_TRUE(dev->caps().mkey_by_index);
	mlx5::MkeyCreate c;
	c.ctx.free = c.ctx.umr_en = true;
	c.index = 0x1234;
	uint32_t idx = 0;
	ASSERT_EQ(dev->create_mkey(c, &idx), 0);
	EXPECT_EQ(idx, 0x1234u);
	EXPECT_EQ(dev->create_mkey(c, &idx), -EBUSY);
	ASSERT_EQ(dev->destroy_mkey(0x1234), 0);
	EXPECT_EQ(dev->create_mkey(c, &idx), 0);
}

TEST_F(Mlx5Encoder, CreateMkeyBytesFollowTheLayout)
{
	std::vector<mlx5::MttEntry> mtt = {
		{0x1000, true, false}, {0x2000, false, true}, {0x3000, true, true}};
	mlx5::MkeyCreate c;
	c.ctx.pd = 0xabcdef;
	c.ctx.qpn = 0x123;
	c.ctx.variant = 7;
	c.ctx.start_addr = 0x1122334455667788ull;
	c.ctx.len = 0x3000;
	c.ctx.log_page_size = 12;
	c.ctx.a = true;
	c.pg_access = true;
	c.index = 0x99;
	c.mtt = mtt;
	std::vector<uint8_t> in;
	ASSERT_EQ(mlx5::encode_create_mkey(c, &in), 0);
	ASSERT_EQ(in.size(), 272u + 32u); /* three entries pad to two octwords */
	EXPECT_EQ(in[0], 0x02);
	EXPECT_EQ(in[1], 0x00);
	EXPECT_EQ(in[0x0c] >> 7, 1); /* pg_access, dw3[31] */
	EXPECT_EQ(in[0x09] << 16 | in[0x0a] << 8 | in[0x0b], 0x99);
	const uint8_t *m = in.data() + 0x10;
	EXPECT_EQ(m[2] & 0x40, 0x40); /* a */
	EXPECT_EQ(m[2] & 0x03, 0x01); /* access_mode_1_0 = MTT */
	EXPECT_EQ(m[4] << 16 | m[5] << 8 | m[6], 0x123);
	EXPECT_EQ(m[7], 7);
	EXPECT_EQ(m[13] << 16 | m[14] << 8 | m[15], 0xabcdef);
	EXPECT_EQ(m[16], 0x11);
	EXPECT_EQ(m[23], 0x88);
	EXPECT_EQ(m[0x37], 2); /* translations_octword_size */
	EXPECT_EQ(m[0x3b], 12);
	EXPECT_EQ(in[0x63], 2); /* translations_octword_actual_size */
	const uint8_t want_mtt[24] = {0, 0, 0,	  0,	0, 0, 0x10, 0x01, 0, 0, 0,    0,
				      0, 0, 0x20, 0x02, 0, 0, 0,    0,	  0, 0, 0x30, 0x03};
	EXPECT_EQ(std::memcmp(in.data() + 272, want_mtt, sizeof(want_mtt)), 0);
	EXPECT_TRUE(std::all_of(in.begin() + 296, in.end(), [](uint8_t b) { return b == 0; }));
}

TEST_F(Mlx5Encoder, KlmEntriesAreSixteenBytes)
{
	std::vector<mlx5::KlmEntry> klm = {{0x1000, 0x1200, 0x5000}, {0x20, 0x3400, 0x6000}};
	mlx5::MkeyCreate c;
	c.ctx.access_mode = prm::access_mode::klm;
	c.klm = klm;
	std::vector<uint8_t> in;
	ASSERT_EQ(mlx5::encode_create_mkey(c, &in), 0);
	ASSERT_EQ(in.size(), 272u + 32u);
	EXPECT_EQ(prm::get(in.data() + 0x10, prm::mkc::access_mode_1_0), 2u);
	const uint8_t *e = in.data() + 272 + 16;
	EXPECT_EQ(prm::get(e, prm::klm::byte_count), 0x20u);
	EXPECT_EQ(prm::get(e, prm::klm::mkey), 0x3400u);
	EXPECT_EQ(prm::get(e, prm::klm::address), 0x6000u);
}

TEST_F(Mlx5Encoder, RefusesInconsistentTranslations)
{
	std::vector<mlx5::MttEntry> mtt(1);
	std::vector<mlx5::KlmEntry> klm(1);
	std::vector<uint8_t> in;
	mlx5::MkeyCreate c;
	c.mtt = mtt;
	c.klm = klm;
	EXPECT_EQ(mlx5::encode_create_mkey(c, &in), -EINVAL);
	c.klm = {};
	c.ctx.access_mode = prm::access_mode::klm;
	EXPECT_EQ(mlx5::encode_create_mkey(c, &in), -EINVAL);
	c.ctx.access_mode = prm::access_mode::mtt;
	c.ctx.log_page_size = 32;
	EXPECT_EQ(mlx5::encode_create_mkey(c, &in), -EINVAL);
	c.ctx.log_page_size = 12;
	c.index = 1u << 24;
	EXPECT_EQ(mlx5::encode_create_mkey(c, &in), -EINVAL);
}
