/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target: random bytes as mlx5 commands for the device model, through the decoder
 * (flat buffers) and through the command queue (raw 64-byte entries, mailbox chains in mapped
 * memory). A fresh device per input. Properties checked after every command:
 *  - the device's invariants hold (EmuMlx5Device::check_invariants);
 *  - a command that fails, and any QUERY command, leaves the device state as it was (the
 *    nicmr extension state of every mkey included: NICMR_SET/QUERY_MKEY_EXT);
 *  - the device writes nothing outside what the IOMMU maps: a guard page right after the
 *    mailbox area (host memory, not mapped) and the bytes past each flat output buffer stay
 *    untouched;
 *  - the firmware words of the init segment never change.
 * Crashes, hangs and leaks are libFuzzer's and ASan's to find. Input format: fuzz_emu_format.h.
 */
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "emu_mlx5.h"
#include "fuzz_emu_format.h"
#include "fuzz_util.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace {

using namespace nicmr;
using namespace nicmr::emu;
using namespace nicmr::emu::fuzz;
namespace prm = nicmr::mlx5::prm;

struct Snapshot {
	HcaState state;
	uint16_t issi;
	size_t pages;
	uint32_t pds;
	size_t mkeys;
	uint64_t ext; /* a digest of every mkey's extension state */
	bool operator==(const Snapshot &) const = default;
};

Snapshot snap(const EmuMlx5Device &d)
{
	uint64_t ext = 0;
	d.mkeys().for_each([&](uint32_t idx, const MkeyEntry &e) {
		ext = ext * 1099511628211ull ^ (uint64_t{idx} << 32 | e.ext.flags);
		ext = ext * 1099511628211ull ^ e.ext.counter_iova;
	});
	return {d.hca_state(), d.issi(), d.pages_given(), d.pds_allocated(), d.mkeys().live(), ext};
}

bool is_query(uint16_t op)
{
	return op == prm::opcode::query_hca_cap || op == prm::opcode::query_issi ||
	       op == prm::opcode::query_pages || op == prm::opcode::query_mkey ||
	       op == prm::opcode::nicmr_query_mkey_ext;
}

/* Reads fuzz bytes; past the end it yields zeros, so every input is a valid program. */
using nicmr::fuzz::Reader;

class Mapped {
public:
	explicit Mapped(size_t len) : len_(len)
	{
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		p_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
	}
	~Mapped()
	{
		if (p_ != nullptr)
			munmap(p_, len_);
	}
	uint8_t *p_;
	size_t len_;
};

uint64_t pick_ptr(uint8_t sel)
{
	switch (sel) {
	case 0:
		return 0; /* unmapped */
	case 1:
		return kUnmappedIova; /* aligned, unmapped */
	case 2:
		return kAreaIova + 16; /* misaligned */
	default:
		return kAreaIova + uint64_t{(sel - 3u) % kAreaBlocks} * kBlockStride;
	}
}

/* Makes the blocks from ptr on a well-formed chain of n blocks (within the area). */
void fix_chain(uint8_t *area, uint64_t ptr, size_t n, uint8_t token)
{
	namespace mb = prm::mailbox;
	if (ptr < kAreaIova || ptr >= kAreaIova + kAreaBytes ||
	    (ptr - kAreaIova) % kBlockStride != 0)
		return;
	size_t b = (ptr - kAreaIova) / kBlockStride;
	for (size_t i = 0; i < n && i < kAreaBlocks; i++) {
		uint8_t *blk = area + b * kBlockStride;
		const size_t next = (b + 1) % kAreaBlocks;
		prm::set(blk, mb::block_num, i);
		prm::set(blk, mb::token, token);
		prm::set(blk, mb::next_ptr, kAreaIova + next * kBlockStride);
		b = next;
	}
}

/* One command through the decoder, with a guard after the output. */
void run_flat(EmuMlx5Device &dev, Reader &rd)
{
	const size_t in_len = rd.u16() % (kMaxFlatLen + 1);
	const size_t out_len = rd.u16() % (kMaxFlatLen + 1);
	std::vector<uint8_t> in(in_len);
	rd.bytes(in.data(), in_len);
	const size_t room = std::max<size_t>(out_len, 16);
	std::vector<uint8_t> out(room + 64, 0xcd);
	const Snapshot before = snap(dev);
	const CmdResult r = dev.execute(in.data(), in_len, out.data(), out_len);
	for (size_t i = room; i < out.size(); i++)
		FUZZ_CHECK(out[i] == 0xcd);
	FUZZ_CHECK(prm::get(out.data(), prm::cmd_hdr_out::status) == r.status);
	const uint16_t op =
		in_len >= 2 ? static_cast<uint16_t>(prm::get(in.data(), prm::cmd_hdr_in::opcode))
			    : 0;
	if (r.status != prm::status::ok || is_query(op))
		FUZZ_CHECK(snap(dev) == before);
}

/* One command through the queue: a raw entry, pointers into the mailbox area. */
void run_queued(EmuMlx5 &emu, uint8_t *cmdq, uint8_t *area, Reader &rd)
{
	namespace ce = prm::cmdq_entry;
	const uint32_t slot = rd.u8() % 32;
	uint8_t e[ce::size];
	rd.bytes(e, sizeof(e));
	const uint64_t in_ptr = pick_ptr(rd.u8());
	const uint64_t out_ptr = pick_ptr(rd.u8());
	const uint8_t fix = rd.u8();
	prm::set(e, ce::input_mailbox_ptr, in_ptr);
	prm::set(e, ce::output_mailbox_ptr, out_ptr);
	/* Lengths within what the area can hold most of the time, sometimes anything. */
	if ((fix & 4) == 0) {
		prm::set(e, ce::input_length, prm::get(e, ce::input_length) % kAreaBytes);
		prm::set(e, ce::output_length, prm::get(e, ce::output_length) % kAreaBytes);
	}
	if ((fix & 8) == 0) {
		prm::set(e, ce::type, ce::type_pcie);
		prm::set(e, ce::ownership, ce::owner_hw);
	}
	const size_t fill = rd.u16() % (kAreaBytes + 1);
	rd.bytes(area, fill);
	const uint8_t token = static_cast<uint8_t>(prm::get(e, ce::token));
	const size_t data = prm::mailbox::data_size;
	if (fix & 1)
		fix_chain(area, in_ptr, (prm::get(e, ce::input_length) + data - 1) / data, token);
	if (fix & 2)
		fix_chain(area, out_ptr, (prm::get(e, ce::output_length) + data - 1) / data, token);
	std::memcpy(cmdq + slot * ce::size, e, sizeof(e));

	EmuMlx5Device &dev = emu.device();
	const Snapshot before = snap(dev);
	const uint64_t cmds = dev.stats().commands;
	uint32_t raw = 0;
	prm::set(&raw, prm::in_dword(prm::init_seg::cmd_dbell),
		 prm::init_seg::cmd_dbell_slot(slot));
	emu.function().bar0_write32(prm::dword_byte_offset(prm::init_seg::cmd_dbell), raw);
	/* Inline delivery: the command has run (or been refused) when the write returns. */
	uint8_t back[ce::size];
	std::memcpy(back, cmdq + slot * ce::size, sizeof(back));
	const bool executed = dev.stats().commands != cmds;
	uint8_t in_hdr[16];
	std::memcpy(in_hdr, e + ce::inline_input, sizeof(in_hdr));
	const auto op = static_cast<uint16_t>(prm::get(in_hdr, prm::cmd_hdr_in::opcode));
	const auto status = prm::get(back + ce::inline_output, prm::cmd_hdr_out::status);
	if (!executed || prm::get(back, ce::status) != prm::delivery_status::ok ||
	    status != prm::status::ok || is_query(op))
		FUZZ_CHECK(snap(dev) == before);
}

/* Executes a command built here (bring-up); true when it succeeded. */
bool exec(EmuMlx5Device &dev, std::vector<uint8_t> in, size_t out_len)
{
	std::vector<uint8_t> out(std::max<size_t>(out_len, 16));
	return dev.execute(in.data(), in.size(), out.data(), out_len).status == prm::status::ok;
}

std::vector<uint8_t> cmd(uint16_t op, size_t len, uint16_t op_mod = 0)
{
	std::vector<uint8_t> in(len);
	prm::set(in.data(), prm::cmd_hdr_in::opcode, op);
	prm::set(in.data(), prm::cmd_hdr_in::op_mod, op_mod);
	return in;
}

void bring_up(EmuMlx5Device &dev, bool with_mkey)
{
	exec(dev, cmd(prm::opcode::enable_hca, 16), 16);
	const uint32_t n = kConfigBootPages + kConfigInitPages;
	auto give = cmd(prm::opcode::manage_pages, 16 + 8 * n, prm::manage_pages_op_mod::give);
	prm::set(give.data(), prm::manage_pages_in::input_num_entries, n);
	for (uint32_t i = 0; i < n; i++)
		prm::set(give.data() + 16 + 8 * i, prm::pas_entry, kPagesIova + 4096 * uint64_t{i});
	exec(dev, give, 16);
	exec(dev, cmd(prm::opcode::init_hca, 16), 16);
	if (!with_mkey)
		return;
	exec(dev, cmd(prm::opcode::alloc_pd, 16), 16);
	auto mk = cmd(prm::opcode::create_mkey, prm::create_mkey_in::size);
	uint8_t *mkc = mk.data() + prm::create_mkey_in::mkc_offset;
	prm::set_access_mode(mkc, prm::access_mode::mtt);
	prm::set(mkc, prm::mkc::pd, 1);
	prm::set(mkc, prm::mkc::free, 1);
	prm::set(mkc, prm::mkc::umr_en, 1);
	prm::set(mkc, prm::mkc::log_page_size, 12);
	prm::set(mkc, prm::mkc::translations_octword_size, 4);
	exec(dev, mk, 16);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	nicmr::set_log_level(nicmr::LogLevel::error);
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Reader rd(data, size);
	EmuConfig cfg;
	cfg.bar0_size = 8192;
	cfg.uars = 1; /* BAR 0 holds the init segment and one UAR page */
	cfg.log_max_mkey = 6;
	cfg.log_max_pd = 3;
	cfg.boot_pages = kConfigBootPages;
	cfg.init_pages = kConfigInitPages;
	cfg.max_pages = 64;
	cfg.log_max_klm_list_size = 10;
	cfg.translation_budget = 16384;
	/* The nicmr extensions (on by default); an input's first byte bit 7 turns them off, so
	 * the model answering their opcodes as a ConnectX does is fuzzed too. */
	if (size > 0 && (data[0] & kSetupNoExt) != 0)
		cfg.ext_flags = 0;
	/* The command trace decodes every command too: its decoder reads the same untrusted
	 * bytes (emu_mlx5_trace.h). */
	cfg.trace_capacity = 256;
	std::unique_ptr<EmuMlx5> emu;
	if (emu_mlx5_create(cfg, &emu) != 0)
		__builtin_trap();
	/* Command memory, the mailbox area with a guard page after it that the IOMMU does not
	 * map (the device must never reach it), and pages to give. */
	Mapped cmdq(4096), area(kAreaBytes + 4096), pages(64 * 4096);
	FUZZ_CHECK(cmdq.p_ && area.p_ && pages.p_);
	uint8_t *guard = area.p_ + kAreaBytes;
	std::memset(guard, 0x5a, 4096);
	FUZZ_CHECK(emu->iommu().dma_map(cmdq.p_, kCmdqIova, 4096) == 0);
	FUZZ_CHECK(emu->iommu().dma_map(area.p_, kAreaIova, kAreaBytes) == 0);
	FUZZ_CHECK(emu->iommu().dma_map(pages.p_, kPagesIova, 64 * 4096) == 0);
	auto &fn = emu->function();
	/* The fuzzer is the driver: no DMA reaches the model before Bus Master Enable. */
	FUZZ_CHECK(fn.set_bus_master(true) == 0);
	uint32_t raw = fn.bar0_read32(prm::dword_byte_offset(prm::init_seg::cmdq_addr_h));
	prm::set(&raw, prm::in_dword(prm::init_seg::cmdq_addr_h),
		 prm::init_seg::cmdq_addr_high(kCmdqIova));
	fn.bar0_write32(prm::dword_byte_offset(prm::init_seg::cmdq_addr_h), raw);
	raw = fn.bar0_read32(prm::dword_byte_offset(prm::init_seg::cmdq_addr_l));
	prm::set(&raw, prm::in_dword(prm::init_seg::cmdq_addr_l),
		 prm::init_seg::cmdq_addr_low(kCmdqIova));
	fn.bar0_write32(prm::dword_byte_offset(prm::init_seg::cmdq_addr_l), raw);
	const size_t fw0_off = prm::dword_byte_offset(prm::init_seg::fw_rev_minor);
	const size_t fw1_off = prm::dword_byte_offset(prm::init_seg::cmdif_rev);
	const uint32_t fw0 = fn.bar0_read32(fw0_off), fw1 = fn.bar0_read32(fw1_off);

	const uint8_t setup = rd.u8();
	if (setup & kSetupBringUp)
		bring_up(emu->device(), (setup & kSetupMkey) != 0);
	for (int i = 0; i < kMaxRecords && !rd.done(); i++) {
		if (rd.u8() & kRecordQueued)
			run_queued(*emu, cmdq.p_, area.p_, rd);
		else
			run_flat(emu->device(), rd);
		FUZZ_CHECK(emu->device().check_invariants());
	}
	for (size_t i = 0; i < 4096; i++)
		FUZZ_CHECK(guard[i] == 0x5a);
	FUZZ_CHECK(fn.bar0_read32(fw0_off) == fw0 && fn.bar0_read32(fw1_off) == fw1);
	/* Every recorded command renders, and the transcript has a line per entry or run. */
	const std::vector<TraceEntry> trace = emu->device().trace()->entries();
	for (const TraceEntry &e : trace)
		FUZZ_CHECK(!render(e).empty());
	FUZZ_CHECK(transcript(trace).size() <= trace.size());
	/* Stop the device before its memory goes. */
	emu.reset();
	return 0;
}
