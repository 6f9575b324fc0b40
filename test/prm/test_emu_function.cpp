/* SPDX-License-Identifier: BSD-3-Clause */
/* The emulated PCI function: BAR 0, read-only bits, doorbell delivery in both modes, config
 * space and bus mastering. */
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <linux/pci_regs.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

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

/* Doorbells beyond the first 64 live in the second pending word: the poll thread delivers the
 * last one and the first one of a batch recorded while stopped. */
TEST(EmuFunction, PollThreadDeliversDoorbellsOfBothPendingWords)
{
	auto f = make(DoorbellDelivery::poll_thread);
	std::atomic<uint64_t> first{0}, last{0};
	ASSERT_EQ(f->add_doorbell(0x1000, DoorbellMerge::latest, [&](uint64_t v) { first = v; }),
		  0);
	for (size_t i = 1; i + 1 < EmuFunction::kMaxDoorbells; i++)
		ASSERT_EQ(f->add_doorbell(0x1000 + 4 * i, DoorbellMerge::latest, [](uint64_t) {}),
			  0);
	const size_t last_off = 0x1000 + 4 * (EmuFunction::kMaxDoorbells - 1);
	ASSERT_EQ(f->add_doorbell(last_off, DoorbellMerge::latest, [&](uint64_t v) { last = v; }),
		  0);
	f->bar0_write32(0x1000, 7);
	f->bar0_write32(last_off, 9);
	ASSERT_EQ(f->start(), 0);
	EXPECT_TRUE(eventually([&] { return first == 7 && last == 9; }));
	f->stop();
}

/* MSI-X: an attached eventfd counts each raise of its vector; a detached vector signals
 * nothing; out-of-range vectors and bad descriptors are refused with -EINVAL. */
TEST(EmuFunction, MsixVectorSignalsItsEventfd)
{
	auto f = make();
	EXPECT_EQ(f->msix_vectors(), 64u);
	const int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ASSERT_GE(efd, 0);
	EXPECT_EQ(f->set_msix_eventfd(64, efd), -EINVAL);
	EXPECT_EQ(f->set_msix_eventfd(3, -2), -EINVAL);
	EXPECT_FALSE(f->raise_msix(3)); /* nothing attached */
	EXPECT_FALSE(f->raise_msix(64));
	ASSERT_EQ(f->set_msix_eventfd(3, efd), 0);
	EXPECT_TRUE(f->raise_msix(3));
	EXPECT_TRUE(f->raise_msix(3));
	EXPECT_FALSE(f->raise_msix(4)); /* another vector */
	uint64_t n = 0;
	ASSERT_EQ(read(efd, &n, sizeof(n)), ssize_t{sizeof(n)});
	EXPECT_EQ(n, 2u);
	ASSERT_EQ(f->set_msix_eventfd(3, -1), 0);
	EXPECT_FALSE(f->raise_msix(3));
	EXPECT_EQ(read(efd, &n, sizeof(n)), -1);
	EXPECT_EQ(errno, EAGAIN);
	EXPECT_EQ(f->msix_raised(), 5u); /* in-range raises, attached or not */
	close(efd);

	EmuFunctionConfig c;
	c.msix_vectors = EmuFunction::kMaxMsix + 1;
	std::unique_ptr<EmuFunction> g;
	EXPECT_EQ(EmuFunction::create(c, &g), -EINVAL);
	c.msix_vectors = 0; /* no MSI-X at all */
	ASSERT_EQ(EmuFunction::create(c, &g), 0);
	EXPECT_EQ(g->set_msix_eventfd(0, -1), -ENOTSUP);
	EXPECT_FALSE(g->raise_msix(0));
	/* A bus without interrupts answers -ENOTSUP through the base class. */
	struct NoIrq : bus::PciFunction {
		std::string n = "none";
		const std::string &name() const override { return n; }
		bus::PciId id() const override { return {}; }
		size_t bar0_size() const override { return 0; }
		uint32_t bar0_read32(size_t) const override { return 0; }
		void bar0_write32(size_t, uint32_t) override {}
		void bar0_write64(size_t, uint64_t) override {}
		mem::DmaMapper &dma() override { std::abort(); }
		int config_read(uint32_t, void *, size_t) const override { return -EIO; }
		int config_write(uint32_t, const void *, size_t) override { return -EIO; }
	} none;
	EXPECT_EQ(none.set_msix_eventfd(0, 0), -ENOTSUP);
}

/* Progress work runs on the device thread, also in inline delivery (doorbells stay inline),
 * and a readable descriptor wakes an idle thread. */
TEST(EmuFunction, ProgressWorkRunsOnTheDeviceThread)
{
	for (DoorbellDelivery d : {DoorbellDelivery::inline_call, DoorbellDelivery::poll_thread}) {
		auto f = make(d);
		int p[2];
		ASSERT_EQ(::pipe(p), 0);
		std::atomic<uint64_t> calls{0}, drained{0};
		std::atomic<std::thread::id> where{};
		ASSERT_EQ(f->set_progress(
				  [&] {
					  where.store(std::this_thread::get_id());
					  calls.fetch_add(1);
					  char c;
					  const bool got = ::read(p[0], &c, 1) == 1;
					  if (got)
						  drained.fetch_add(1);
					  return got;
				  },
				  {p[0]}),
			  0);
		ASSERT_EQ(::fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
		std::atomic<std::thread::id> rang{};
		ASSERT_EQ(
			f->add_doorbell(0x800, DoorbellMerge::latest,
					[&](uint64_t) { rang.store(std::this_thread::get_id()); }),
			0);
		ASSERT_EQ(f->start(), 0);
		ASSERT_TRUE(eventually([&] { return calls.load() > 0; }));
		EXPECT_NE(where.load(), std::this_thread::get_id());
		/* Idle long enough to nap, then a byte: it is taken. */
		std::this_thread::sleep_for(50ms);
		ASSERT_EQ(::write(p[1], "x", 1), 1);
		EXPECT_TRUE(eventually([&] { return drained.load() == 1; }));
		f->bar0_write32(0x800, 1);
		ASSERT_TRUE(eventually([&] { return rang.load() != std::thread::id{}; }));
		if (d == DoorbellDelivery::inline_call) {
			EXPECT_EQ(rang.load(), std::this_thread::get_id());
		}
		f->stop();
		::close(p[0]);
		::close(p[1]);
	}
}

/* Run to completion: in inline delivery a caller's progress() runs the progress work on the
 * caller's thread, and while the caller keeps polling the device thread stands down (it
 * sleeps its nap, 100 ms here), so every byte is taken by the caller. Before start() and after
 * stop() the caller runs nothing. */
TEST(EmuFunction, CallerRunsTheProgressWorkInInlineDelivery)
{
	EmuFunctionConfig c;
	c.poll_idle_sleep = 100ms;
	std::unique_ptr<EmuFunction> f;
	ASSERT_EQ(EmuFunction::create(c, &f), 0);
	int p[2];
	ASSERT_EQ(::pipe(p), 0);
	ASSERT_EQ(::fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
	const std::thread::id me = std::this_thread::get_id();
	std::atomic<uint64_t> mine{0}, by_caller{0}, by_device{0};
	ASSERT_EQ(f->set_progress(
			  [&] {
				  const bool here = std::this_thread::get_id() == me;
				  if (here)
					  mine.fetch_add(1);
				  char b;
				  if (::read(p[0], &b, 1) != 1)
					  return false;
				  (here ? by_caller : by_device).fetch_add(1);
				  return true;
			  },
			  {p[0]}),
		  0);
	EXPECT_FALSE(f->progress()); /* not started: nothing runs */
	EXPECT_EQ(mine.load(), 0u);
	ASSERT_EQ(f->start(), 0);
	/* The caller polls for 50 ms: the device thread sees it and goes to sleep. */
	const auto until = std::chrono::steady_clock::now() + 50ms;
	while (std::chrono::steady_clock::now() < until)
		f->progress();
	EXPECT_GT(mine.load(), 0u);
	for (int i = 0; i < 20; i++) {
		ASSERT_EQ(::write(p[1], "x", 1), 1);
		const uint64_t want = by_caller.load() + by_device.load() + 1;
		const auto end = std::chrono::steady_clock::now() + 5s;
		while (by_caller.load() + by_device.load() < want &&
		       std::chrono::steady_clock::now() < end)
			f->progress();
	}
	EXPECT_EQ(by_caller.load(), 20u);
	EXPECT_EQ(by_device.load(), 0u);
	f->stop();
	const uint64_t before = mine.load();
	ASSERT_EQ(::write(p[1], "x", 1), 1);
	EXPECT_FALSE(f->progress()); /* stopped: the token stays with stop() */
	EXPECT_EQ(mine.load(), before);
	::close(p[0]);
	::close(p[1]);
}

/* A caller that stops polling hands the work back: the device thread takes the next byte
 * after at most a nap. */
TEST(EmuFunction, DeviceThreadTakesTheWorkBackWhenTheCallerStops)
{
	auto f = make(); /* 20 us naps: 640 us at most */
	int p[2];
	ASSERT_EQ(::pipe(p), 0);
	ASSERT_EQ(::fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
	const std::thread::id me = std::this_thread::get_id();
	std::atomic<uint64_t> by_device{0};
	ASSERT_EQ(f->set_progress(
			  [&] {
				  char b;
				  if (::read(p[0], &b, 1) != 1)
					  return false;
				  if (std::this_thread::get_id() != me)
					  by_device.fetch_add(1);
				  return true;
			  },
			  {p[0]}),
		  0);
	ASSERT_EQ(f->start(), 0);
	for (int i = 0; i < 1000; i++)
		f->progress();
	ASSERT_EQ(::write(p[1], "x", 1), 1);
	EXPECT_TRUE(eventually([&] { return by_device.load() == 1; }));
	f->stop();
	::close(p[0]);
	::close(p[1]);
}

/* progress() runs nothing on the caller's thread in poll-thread delivery (the device thread is
 * the device) or with caller_progress off, and never without progress work. */
TEST(EmuFunction, CallerProgressOnlyInInlineDeliveryAndWhenAsked)
{
	for (int k = 0; k < 3; k++) {
		EmuFunctionConfig c;
		c.delivery = k == 0 ? DoorbellDelivery::poll_thread : DoorbellDelivery::inline_call;
		c.caller_progress = k != 1;
		c.poll_idle_sleep = 20us;
		std::unique_ptr<EmuFunction> f;
		ASSERT_EQ(EmuFunction::create(c, &f), 0);
		const std::thread::id me = std::this_thread::get_id();
		std::atomic<uint64_t> mine{0}, runs{0};
		if (k != 2) {
			ASSERT_EQ(f->set_progress(
					  [&] {
						  runs.fetch_add(1);
						  if (std::this_thread::get_id() == me)
							  mine.fetch_add(1);
						  return true;
					  },
					  {}),
				  0);
		}
		ASSERT_EQ(f->start(), 0);
		for (int i = 0; i < 100; i++)
			EXPECT_FALSE(f->progress()) << k;
		EXPECT_EQ(mine.load(), 0u) << k;
		if (k != 2) {
			EXPECT_TRUE(eventually([&] { return runs.load() > 0; })) << k;
		}
		f->stop();
	}
}

/* The progress work is never run by two threads at once: two callers and the device thread
 * race for it; the work's own state (a plain counter) is handed from one runner to the next
 * by the token (ThreadSanitizer checks the hand-off in the tsan build). */
TEST(EmuFunction, ProgressWorkRunsOnOneThreadAtATime)
{
	auto f = make();
	std::atomic<int> inside{0};
	std::atomic<bool> overlap{false};
	uint64_t plain = 0; /* the work's state: no atomics, ordered by the token only */
	ASSERT_EQ(f->set_progress(
			  [&] {
				  if (inside.fetch_add(1) != 0)
					  overlap.store(true);
				  plain++;
				  inside.fetch_sub(1);
				  return (plain & 1) != 0;
			  },
			  {}),
		  0);
	ASSERT_EQ(f->start(), 0);
	std::atomic<uint64_t> ran{0};
	const auto caller = [&] {
		for (int i = 0; i < 20000; i++)
			if (f->progress())
				ran.fetch_add(1);
	};
	std::thread a(caller), b(caller);
	a.join();
	b.join();
	f->stop();
	EXPECT_FALSE(overlap.load());
	EXPECT_GT(plain, 0u);
}

TEST(EmuFunction, SetProgressErrors)
{
	auto f = make();
	EXPECT_EQ(f->set_progress({}, {}), -EINVAL);
	ASSERT_EQ(f->set_progress([] { return false; }, {}), 0);
	EXPECT_EQ(f->set_progress([] { return false; }, {}), -EEXIST);
	auto g = make();
	ASSERT_EQ(g->start(), 0);
	EXPECT_EQ(g->set_progress([] { return false; }, {}), -EBUSY);
}

uint16_t command(const EmuFunction &f)
{
	uint8_t b[2] = {};
	EXPECT_EQ(f.config_read(PCI_COMMAND, b, sizeof(b)), 0);
	return static_cast<uint16_t>(b[0] | b[1] << 8); /* little-endian, as PCI */
}

TEST(EmuFunction, ConfigSpaceHoldsTheIdsAndACommandRegisterLikeVfio)
{
	auto f = make();
	uint8_t id[4] = {};
	ASSERT_EQ(f->config_read(PCI_VENDOR_ID, id, sizeof(id)), 0);
	EXPECT_EQ(id[0] | id[1] << 8, 0x15b3);
	EXPECT_EQ(id[2] | id[3] << 8, 0x101d);
	/* Out of reset: memory decoding on (as vfio-pci leaves it), bus mastering off. */
	EXPECT_EQ(command(*f), PCI_COMMAND_MEMORY);
	EXPECT_FALSE(f->bus_master());

	const uint8_t all[2] = {0xff, 0xff};
	ASSERT_EQ(f->config_write(PCI_COMMAND, all, sizeof(all)), 0);
	EXPECT_EQ(command(*f), PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER) << "only BME is writable";
	const uint8_t none[2] = {0, 0};
	ASSERT_EQ(f->config_write(PCI_COMMAND, none, sizeof(none)), 0);
	EXPECT_EQ(command(*f), PCI_COMMAND_MEMORY) << "memory decoding cannot be turned off";
	/* A dword write that covers the command register works as well. */
	const uint8_t dw[4] = {0x04, 0x00, 0xff, 0xff};
	ASSERT_EQ(f->config_write(PCI_VENDOR_ID + 2, dw, sizeof(dw)), 0);
	EXPECT_TRUE(f->bus_master());
	/* Read-only registers ignore writes. */
	const uint8_t junk[2] = {0x12, 0x34};
	ASSERT_EQ(f->config_write(PCI_VENDOR_ID, junk, sizeof(junk)), 0);
	ASSERT_EQ(f->config_read(PCI_VENDOR_ID, id, 2), 0);
	EXPECT_EQ(id[0] | id[1] << 8, 0x15b3);
	uint8_t tail_byte = 0xaa;
	ASSERT_EQ(f->config_read(EmuFunction::kConfigSize - 1, &tail_byte, 1), 0);
	EXPECT_EQ(tail_byte, 0);
}

TEST(EmuFunction, ConfigAccessOutsideConfigSpaceIsEinval)
{
	auto f = make();
	uint8_t b[4] = {};
	EXPECT_EQ(f->config_read(0, b, 0), -EINVAL);
	EXPECT_EQ(f->config_read(EmuFunction::kConfigSize, b, 1), -EINVAL);
	EXPECT_EQ(f->config_read(EmuFunction::kConfigSize - 1, b, 2), -EINVAL);
	EXPECT_EQ(f->config_write(0, b, 0), -EINVAL);
	EXPECT_EQ(f->config_write(EmuFunction::kConfigSize, b, 1), -EINVAL);
	EXPECT_EQ(f->config_write(EmuFunction::kConfigSize - 2, b, 4), -EINVAL);
}

TEST(EmuFunction, DmaIsRefusedUntilTheDriverSetsBusMaster)
{
	auto f = make();
	const size_t len = 8192;
	void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(p, MAP_FAILED);
	auto *mem = static_cast<uint8_t *>(p);
	std::memset(mem, 0x5a, len);
	ASSERT_EQ(f->dma().dma_map(mem, 0x200000, len), 0);
	const std::vector<uint8_t> data(256, 0xc3);
	std::vector<uint8_t> back(256);

	/* Mapped, but the function may not master the bus: the device's DMA fails as an access
	 * to an unmapped IOVA does, and nothing moves. */
	EXPECT_EQ(f->iommu().dma_write(0x200000, data.data(), data.size()), -EFAULT);
	EXPECT_EQ(f->iommu().dma_read(0x200000, back.data(), back.size()), -EFAULT);
	EXPECT_EQ(f->iommu().dma_refused(), 2u);
	EXPECT_EQ(f->iommu().dma_faults(), 0u);
	EXPECT_EQ(mem[0], 0x5a);

	ASSERT_EQ(f->set_bus_master(true), 0);
	EXPECT_TRUE(f->bus_master());
	EXPECT_EQ(command(*f), PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
	ASSERT_EQ(f->iommu().dma_write(0x200000, data.data(), data.size()), 0);
	ASSERT_EQ(f->iommu().dma_read(0x200000, back.data(), back.size()), 0);
	EXPECT_EQ(back, data);
	EXPECT_EQ(mem[0], 0xc3);

	/* Cleared again (the driver let the function go): refused again. */
	ASSERT_EQ(f->set_bus_master(false), 0);
	EXPECT_EQ(f->iommu().dma_read(0x200000, back.data(), back.size()), -EFAULT);
	EXPECT_EQ(f->iommu().dma_refused(), 3u);
	EXPECT_EQ(f->iommu().dma_faults(), 0u);
	EXPECT_EQ(f->dma().dma_unmap(0x200000, len), 0);
	munmap(p, len);
}

TEST(EmuFunction, ClearingBusMasterFromInsideADmaSectionIsEdeadlk)
{
	auto f = make();
	ASSERT_EQ(f->set_bus_master(true), 0);
	{
		DmaSection s(f->iommu());
		EXPECT_EQ(f->set_bus_master(false), -EDEADLK);
	}
	EXPECT_TRUE(f->bus_master());
	EXPECT_EQ(f->set_bus_master(false), 0);
	EXPECT_FALSE(f->bus_master());
}

} // namespace
} // namespace nicmr::emu
