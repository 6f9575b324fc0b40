/* SPDX-License-Identifier: BSD-3-Clause */
/* The emulated PCI function: BAR 0, read-only bits, doorbell delivery in both modes. */
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

#include "emu_function.h"

namespace nicmr::emu {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<EmuFunction> make(DoorbellDelivery d = DoorbellDelivery::inline_call)
{
	EmuFunctionConfig c;
	c.delivery = d;
	c.poll_idle_sleep = 20us;
	std::unique_ptr<EmuFunction> f;
	EXPECT_EQ(EmuFunction::create(c, &f), 0);
	return f;
}

/* Waits until pred holds or 5 s pass (a bound for a hung test, not a timing). */
template <class P> bool eventually(P pred)
{
	const auto end = std::chrono::steady_clock::now() + 5s;
	while (!pred()) {
		if (std::chrono::steady_clock::now() > end)
			return false;
		std::this_thread::sleep_for(100us);
	}
	return true;
}

TEST(EmuFunction, HasAConnectXIdentityAndAOneMegabyteBar)
{
	auto f = make();
	EXPECT_EQ(f->id().vendor, 0x15b3);
	EXPECT_EQ(f->id().device, 0x101d);
	EXPECT_EQ(f->bar0_size(), size_t{1} << 20);
	EXPECT_EQ(f->name(), "emu:0");
	EXPECT_EQ(&f->dma(), static_cast<mem::DmaMapper *>(&f->iommu()));

	EmuFunctionConfig c;
	c.id = {0x15b3, 0x1017};
	c.name = "emu:7";
	std::unique_ptr<EmuFunction> g;
	ASSERT_EQ(EmuFunction::create(c, &g), 0);
	EXPECT_EQ(g->id().device, 0x1017);
	EXPECT_EQ(g->name(), "emu:7");
}

TEST(EmuFunction, CreateRejectsBadBarSizeAndIommuConfig)
{
	std::unique_ptr<EmuFunction> f;
	EmuFunctionConfig c;
	c.bar0_size = 1000;
	EXPECT_EQ(EmuFunction::create(c, &f), -EINVAL);
	c = {};
	c.iommu.page_size = 3;
	EXPECT_EQ(EmuFunction::create(c, &f), -EINVAL);
	EXPECT_EQ(f, nullptr);
}

TEST(EmuFunction, BarReadsBackWritesAndAbortsOutOfRange)
{
	auto f = make();
	f->bar0_write32(0x100, 0x12345678);
	EXPECT_EQ(f->bar0_read32(0x100), 0x12345678u);
	EXPECT_EQ(f->reg_read32(0x100), 0x12345678u);
	f->bar0_write64(0x200, 0x1122334455667788ull);
	/* Two words in memory order, like the CPU's 8-byte store. */
	uint64_t both = uint64_t{f->bar0_read32(0x204)} << 32 | f->bar0_read32(0x200);
	EXPECT_EQ(both, 0x1122334455667788ull);
	EXPECT_EQ(f->bar0_read32(1 << 20), 0xffffffffu);
	EXPECT_EQ(f->bar0_read32(0x102), 0xffffffffu);
	f->bar0_write32(1 << 20, 1); /* dropped, no crash */
	f->bar0_write64(0x204, 1);   /* misaligned: dropped */
	EXPECT_EQ(f->bar0_read32(0x204), 0x11223344u);
}

TEST(EmuFunction, DriverCannotChangeReadOnlyBits)
{
	auto f = make();
	f->reg_write32(0x14, 0x000000ab);
	ASSERT_EQ(f->set_read_only(0x14, 0x000000ff), 0);
	f->bar0_write32(0x14, 0x12345600);
	EXPECT_EQ(f->bar0_read32(0x14), 0x123456abu);
	/* The device itself still can. */
	f->reg_write32(0x14, 0x00000001);
	EXPECT_EQ(f->bar0_read32(0x14), 0x00000001u);
	EXPECT_EQ(f->set_read_only(0x15, 1), -EINVAL);
	EXPECT_EQ(f->set_read_only(1 << 20, 1), -EINVAL);
}

TEST(EmuFunction, InlineDoorbellRunsOnTheWritingThread)
{
	auto f = make();
	std::thread::id ran_on;
	uint64_t got = 0;
	ASSERT_EQ(f->add_doorbell(0x18, DoorbellMerge::bitmask,
				  [&](uint64_t v) {
					  ran_on = std::this_thread::get_id();
					  got = v;
				  }),
		  0);
	ASSERT_EQ(f->start(), 0);
	f->bar0_write32(0x18, 0x04000000);
	EXPECT_EQ(ran_on, std::this_thread::get_id());
	EXPECT_EQ(got, 0x04000000u);
	EXPECT_EQ(f->doorbells_delivered(), 1u);
	f->bar0_write32(0x1c, 1); /* not a doorbell */
	EXPECT_EQ(f->doorbells_delivered(), 1u);
}

TEST(EmuFunction, WriteOnlyDoorbellIsDeliveredButNotKept)
{
	auto f = make();
	uint64_t got = 0;
	ASSERT_EQ(f->add_doorbell(
			  0x800, DoorbellMerge::latest, [&](uint64_t v) { got = v; },
			  DoorbellStore::deliver_only),
		  0);
	ASSERT_EQ(f->add_doorbell(0x900, DoorbellMerge::latest, [](uint64_t) {}), 0);
	ASSERT_EQ(f->start(), 0);
	f->reg_write32(0x800, 0xabcd);
	f->bar0_write64(0x800, 0x1122334455667788ull);
	EXPECT_EQ(got, 0x1122334455667788ull);
	EXPECT_EQ(f->bar0_read32(0x800), 0xabcdu) << "a write-only register keeps what it held";
	EXPECT_EQ(f->bar0_read32(0x804), 0u);
	f->bar0_write32(0x800, 7);
	EXPECT_EQ(got, 7u);
	EXPECT_EQ(f->bar0_read32(0x800), 0xabcdu);
	/* A doorbell that keeps its writes (the default) reads back what was rung. */
	f->bar0_write64(0x900, 0x55ull);
	EXPECT_EQ(f->bar0_read32(0x900), 0x55u);
	EXPECT_EQ(f->doorbells_delivered(), 3u);
}

TEST(EmuFunction, PollThreadDeliversOnTheDeviceThread)
{
	auto f = make(DoorbellDelivery::poll_thread);
	std::atomic<uint64_t> got{0};
	std::atomic<bool> other_thread{false};
	const auto me = std::this_thread::get_id();
	ASSERT_EQ(f->add_doorbell(0x18, DoorbellMerge::bitmask,
				  [&](uint64_t v) {
					  other_thread = std::this_thread::get_id() != me;
					  got |= v;
				  }),
		  0);
	ASSERT_EQ(f->start(), 0);
	EXPECT_TRUE(f->running());
	f->bar0_write32(0x18, 0x1);
	ASSERT_TRUE(eventually([&] { return got.load() == 1; }));
	EXPECT_TRUE(other_thread);
}

TEST(EmuFunction, StoppedDeviceRecordsDoorbellsAndDeliversThemOnStart)
{
	for (auto mode : {DoorbellDelivery::inline_call, DoorbellDelivery::poll_thread}) {
		auto f = make(mode);
		std::atomic<uint64_t> bits{0};
		std::atomic<int> calls{0};
		ASSERT_EQ(f->add_doorbell(0x18, DoorbellMerge::bitmask,
					  [&](uint64_t v) {
						  bits |= v;
						  calls++;
					  }),
			  0);
		/* Never started: a hung device. Slot bits pile up, nothing runs. */
		f->bar0_write32(0x18, 0x1);
		f->bar0_write32(0x18, 0x4);
		std::this_thread::sleep_for(2ms);
		EXPECT_EQ(calls.load(), 0);
		ASSERT_EQ(f->start(), 0);
		ASSERT_TRUE(eventually([&] { return calls.load() == 1; }));
		EXPECT_EQ(bits.load(), 0x5u) << "merged into one delivery";
		f->stop();
		EXPECT_FALSE(f->running());
		f->bar0_write32(0x18, 0x8);
		std::this_thread::sleep_for(2ms);
		EXPECT_EQ(calls.load(), 1);
		ASSERT_EQ(f->start(), 0);
		ASSERT_TRUE(eventually([&] { return calls.load() == 2; }));
		EXPECT_EQ(bits.load(), 0xdu);
	}
}

TEST(EmuFunction, LatestDoorbellKeepsTheLastValue)
{
	auto f = make();
	uint64_t got = 0;
	ASSERT_EQ(f->add_doorbell(0x800, DoorbellMerge::latest, [&](uint64_t v) { got = v; }), 0);
	f->bar0_write32(0x800, 3);
	f->bar0_write32(0x800, 9);
	ASSERT_EQ(f->start(), 0);
	EXPECT_EQ(got, 9u);
	f->bar0_write64(0x800, 0x0000000a0000000bull);
	EXPECT_EQ(got, 0x0000000a0000000bull);
}

TEST(EmuFunction, AddDoorbellErrors)
{
	auto f = make();
	auto nop = [](uint64_t) {};
	EXPECT_EQ(f->add_doorbell(0x19, DoorbellMerge::bitmask, nop), -EINVAL);
	EXPECT_EQ(f->add_doorbell(1 << 20, DoorbellMerge::bitmask, nop), -EINVAL);
	EXPECT_EQ(f->add_doorbell(0x18, DoorbellMerge::bitmask, nullptr), -EINVAL);
	EXPECT_EQ(f->add_doorbell(0x18, DoorbellMerge::bitmask, nop), 0);
	EXPECT_EQ(f->add_doorbell(0x18, DoorbellMerge::latest, nop), -EEXIST);
	for (size_t i = 1; i < EmuFunction::kMaxDoorbells; i++)
		ASSERT_EQ(f->add_doorbell(0x1000 + 4 * i, DoorbellMerge::latest, nop), 0);
	EXPECT_EQ(f->add_doorbell(0x2000, DoorbellMerge::latest, nop), -ENOSPC);
	ASSERT_EQ(f->start(), 0);
	EXPECT_EQ(f->start(), -EALREADY);
	EXPECT_EQ(f->add_doorbell(0x3000, DoorbellMerge::latest, nop), -EBUSY);
	EXPECT_EQ(f->set_read_only(0x3000, 1), -EBUSY);
}

} // namespace
} // namespace nicmr::emu
