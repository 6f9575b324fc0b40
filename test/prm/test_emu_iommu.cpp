/* SPDX-License-Identifier: BSD-3-Clause */
/* The emulated IOMMU: mapping rules, device accesses, faults. */
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "emu_iommu.h"
#include "test_emu_harness.h"

namespace nicmr::emu {
namespace {

using test::HostMem;

std::unique_ptr<EmuIommu> make(const EmuIommuConfig &cfg = {})
{
	std::unique_ptr<EmuIommu> m;
	EXPECT_EQ(EmuIommu::create(cfg, &m), 0);
	return m;
}

TEST(EmuIommu, DefaultRangesAreVtd48BitsWithoutTheMsiWindow)
{
	auto m = make();
	auto r = m->iova_ranges();
	ASSERT_EQ(r.size(), 2u);
	EXPECT_EQ(r[0].start, 0u);
	EXPECT_EQ(r[0].last, 0xfedfffffu);
	EXPECT_EQ(r[1].start, 0xfef00000u);
	EXPECT_EQ(r[1].last, (uint64_t{1} << 48) - 1);
	EXPECT_EQ(m->min_page_size(), 4096u);
}

TEST(EmuIommu, CreateRejectsBadConfig)
{
	std::unique_ptr<EmuIommu> m;
	EmuIommuConfig c;
	c.page_size = 6000;
	EXPECT_EQ(EmuIommu::create(c, &m), -EINVAL);
	c = {};
	c.page_size = 2048;
	EXPECT_EQ(EmuIommu::create(c, &m), -EINVAL);
	c = {};
	c.ranges = {{0x10000, 0x1ffff}, {0x18000, 0x2ffff}}; /* overlapping */
	EXPECT_EQ(EmuIommu::create(c, &m), -EINVAL);
	c.ranges = {{0x10000, 0x10fff + 1}}; /* last not at a page end */
	EXPECT_EQ(EmuIommu::create(c, &m), -EINVAL);
	c = {};
	c.max_mappings = 0;
	EXPECT_EQ(EmuIommu::create(c, &m), -EINVAL);
	EXPECT_EQ(EmuIommu::create({}, nullptr), -EINVAL);
	EXPECT_EQ(m, nullptr);
}

TEST(EmuIommu, MapRejectsMisalignedOrEmptyArguments)
{
	HostMem mem(1 << 20);
	auto m = make();
	EXPECT_EQ(m->dma_map(mem.data(), 0x100000, 0), -EINVAL);
	EXPECT_EQ(m->dma_map(mem.data() + 8, 0x100000, 4096), -EINVAL);
	EXPECT_EQ(m->dma_map(mem.data(), 0x100008, 4096), -EINVAL);
	EXPECT_EQ(m->dma_map(mem.data(), 0x100000, 4095), -EINVAL);
	EXPECT_EQ(m->dma_map(nullptr, 0x100000, 4096), -EINVAL);
	EXPECT_EQ(m->mapping_count(), 0u);
}

TEST(EmuIommu, MapRejectsIovasOutsideTheValidRanges)
{
	HostMem mem(1 << 20);
	auto m = make();
	EXPECT_EQ(m->dma_map(mem.data(), 0xfee00000, 4096), -ERANGE);
	/* Straddles the start of the MSI window. */
	EXPECT_EQ(m->dma_map(mem.data(), 0xfedff000, 8192), -ERANGE);
	EXPECT_EQ(m->dma_map(mem.data(), uint64_t{1} << 48, 4096), -ERANGE);
	EXPECT_EQ(m->dma_map(mem.data(), 0xfffffffffffff000ull, 8192), -ERANGE);
	EXPECT_EQ(m->dma_map(mem.data(), 0xfedff000, 4096), 0);
	EXPECT_EQ(m->dma_map(mem.data() + 4096, 0xfef00000, 4096), 0);

	EmuIommuConfig c;
	c.ranges = {{0x200000, 0x2fffff}};
	auto small = make(c);
	EXPECT_EQ(small->dma_map(mem.data(), 0x1ff000, 4096), -ERANGE);
	EXPECT_EQ(small->dma_map(mem.data(), 0x2ff000, 8192), -ERANGE);
	EXPECT_EQ(small->dma_map(mem.data(), 0x2ff000, 4096), 0);
}

TEST(EmuIommu, MapRejectsOverlapOnEitherSide)
{
	HostMem mem(1 << 20);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x110000, 0x10000), 0);
	EXPECT_EQ(m->dma_map(mem.data(), 0x10f000, 0x2000), -EEXIST);
	EXPECT_EQ(m->dma_map(mem.data(), 0x11f000, 0x2000), -EEXIST);
	EXPECT_EQ(m->dma_map(mem.data(), 0x100000, 0x40000), -EEXIST);
	EXPECT_EQ(m->dma_map(mem.data(), 0x114000, 0x1000), -EEXIST);
	EXPECT_EQ(m->dma_map(mem.data(), 0x120000, 0x1000), 0); /* adjacent is fine */
	EXPECT_EQ(m->dma_map(mem.data(), 0x10f000, 0x1000), 0);
	EXPECT_EQ(m->mapping_count(), 3u);
}

TEST(EmuIommu, MappingLimitGivesEnospc)
{
	HostMem mem(1 << 20);
	EmuIommuConfig c;
	c.max_mappings = 2;
	auto m = make(c);
	EXPECT_EQ(m->dma_map(mem.data(), 0x100000, 4096), 0);
	EXPECT_EQ(m->dma_map(mem.data(), 0x200000, 4096), 0);
	EXPECT_EQ(m->dma_map(mem.data(), 0x300000, 4096), -ENOSPC);
	EXPECT_EQ(m->dma_unmap(0x100000, 4096), 0);
	EXPECT_EQ(m->dma_map(mem.data(), 0x300000, 4096), 0);
}

TEST(EmuIommu, UnmapNeedsTheExactMapping)
{
	HostMem mem(1 << 20);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 0x4000), 0);
	EXPECT_EQ(m->dma_unmap(0x100000, 0), -EINVAL);
	EXPECT_EQ(m->dma_unmap(0x100000, 0x1000), -ENOENT);
	EXPECT_EQ(m->dma_unmap(0x101000, 0x3000), -ENOENT);
	EXPECT_EQ(m->dma_unmap(0x200000, 0x4000), -ENOENT);
	EXPECT_EQ(m->dma_unmap(0x100000, 0x4000), 0);
	EXPECT_EQ(m->dma_unmap(0x100000, 0x4000), -ENOENT);
}

TEST(EmuIommu, DeviceAccessSpansAdjacentMappings)
{
	HostMem a(8192), b(8192);
	auto m = make();
	ASSERT_EQ(m->dma_map(a.data(), 0x100000, 8192), 0);
	ASSERT_EQ(m->dma_map(b.data(), 0x102000, 8192), 0);
	std::vector<uint8_t> src(100);
	for (size_t i = 0; i < src.size(); i++)
		src[i] = static_cast<uint8_t>(i + 1);
	ASSERT_EQ(m->dma_write(0x102000 - 50, src.data(), src.size()), 0);
	EXPECT_EQ(std::memcmp(a.data() + 8192 - 50, src.data(), 50), 0);
	EXPECT_EQ(std::memcmp(b.data(), src.data() + 50, 50), 0);
	std::vector<uint8_t> back(100);
	ASSERT_EQ(m->dma_read(0x102000 - 50, back.data(), back.size()), 0);
	EXPECT_EQ(back, src);
	EXPECT_EQ(m->dma_faults(), 0u);
	/* A host pointer needs one contiguous host range: these two are not. */
	EXPECT_FALSE(m->pin(0x102000 - 50, 100));
	EXPECT_EQ(m->dma_faults(), 1u);
}

TEST(EmuIommu, UnmappedAccessFailsWholeAndCountsAFault)
{
	HostMem mem(8192);
	std::memset(mem.data(), 0xee, 8192);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 8192), 0);
	std::vector<uint8_t> src(64, 0x11);
	/* The last 32 bytes fall past the mapping: nothing at all may be written. */
	EXPECT_EQ(m->dma_write(0x102000 - 32, src.data(), src.size()), -EFAULT);
	for (size_t i = 0; i < 8192; i++)
		ASSERT_EQ(mem.data()[i], 0xee) << "stray write at " << i;
	EXPECT_EQ(m->dma_faults(), 1u);
	EXPECT_EQ(m->last_fault_iova(), 0x102000u - 32);
	uint8_t dst[16];
	EXPECT_EQ(m->dma_read(0x50000, dst, sizeof(dst)), -EFAULT);
	EXPECT_EQ(m->dma_store8_release(0x103000, 1), -EFAULT);
	EXPECT_EQ(m->dma_faults(), 3u);
	EXPECT_EQ(m->dma_read(0x50000, dst, 0), 0); /* nothing to move: no fault */
	EXPECT_EQ(m->dma_faults(), 3u);
	/* An access wrapping past 2^64 never reaches memory. */
	EXPECT_EQ(m->dma_read(0xfffffffffffffff0ull, dst, sizeof(dst) + 16), -EFAULT);
}

TEST(EmuIommu, PinGivesTheHostPointerOfAWhollyMappedRange)
{
	HostMem mem(8192);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 8192), 0);
	DmaPin p = m->pin(0x100010, 100);
	ASSERT_TRUE(p);
	EXPECT_EQ(p.ptr(), mem.data() + 0x10);
	p = DmaPin();
	EXPECT_FALSE(m->pin(0x101f00, 0x200));
	EXPECT_EQ(m->dma_faults(), 1u);
}

TEST(EmuIommu, UnmapAfterwardsRevokesDeviceAccess)
{
	HostMem mem(8192);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 8192), 0);
	uint8_t v = 7;
	EXPECT_EQ(m->dma_write(0x100000, &v, 1), 0);
	ASSERT_EQ(m->dma_unmap(0x100000, 8192), 0);
	v = 9;
	EXPECT_EQ(m->dma_write(0x100000, &v, 1), -EFAULT);
	EXPECT_EQ(mem.data()[0], 7);
}

TEST(EmuIommu, UnmapWaitsForAPinnedRangeToBeReleased)
{
	HostMem mem(8192);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 8192), 0);
	DmaPin p = m->pin(0x100000, 64);
	ASSERT_TRUE(p);
	std::atomic<bool> unmapped{false};
	std::thread t([&] {
		EXPECT_EQ(m->dma_unmap(0x100000, 8192), 0);
		unmapped = true;
	});
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
	/* The device may still use its pointer: the unmap must not have returned. */
	EXPECT_FALSE(unmapped.load());
	static_cast<uint8_t *>(p.ptr())[0] = 1;
	p = DmaPin();
	t.join();
	EXPECT_TRUE(unmapped.load());
	EXPECT_EQ(m->mapping_count(), 0u);
}

TEST(EmuIommu, DeviceAccessesAreSafeAgainstConcurrentMapAndUnmap)
{
	HostMem mem(1 << 20);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 4096), 0);
	std::atomic<bool> stop{false};
	std::thread mapper([&] {
		for (int i = 0; i < 2000; i++) {
			ASSERT_EQ(m->dma_map(mem.data() + 4096, 0x101000, 4096), 0);
			ASSERT_EQ(m->dma_unmap(0x101000, 4096), 0);
		}
		stop = true;
	});
	uint64_t ok = 0, faults = 0;
	uint8_t buf[64];
	while (!stop) {
		/* The second page comes and goes; the first stays. */
		(m->dma_read(0x101000, buf, sizeof(buf)) == 0 ? ok : faults)++;
		ASSERT_EQ(m->dma_read(0x100000, buf, sizeof(buf)), 0);
	}
	mapper.join();
	EXPECT_EQ(faults, m->dma_faults());
	EXPECT_EQ(m->mapping_count(), 1u);
}

TEST(EmuIommu, UnmapWaitsForAnOpenSectionWhichKeepsItsSnapshot)
{
	HostMem mem(8192);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 8192), 0);
	std::atomic<bool> unmapped{false};
	std::thread t;
	{
		DmaSection s(*m);
		t = std::thread([&] {
			EXPECT_EQ(m->dma_unmap(0x100000, 8192), 0);
			unmapped = true;
		});
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
		EXPECT_FALSE(unmapped.load());
		/* The section still sees the mapping it started with. */
		uint8_t v = 5;
		EXPECT_EQ(s.write(0x100100, &v, 1), 0);
		EXPECT_EQ(s.mappings(), 1u);
	}
	t.join();
	EXPECT_TRUE(unmapped.load());
	EXPECT_EQ(mem.data()[0x100], 5);
	/* A section opened after the unmap sees it gone. */
	DmaSection s(*m);
	EXPECT_FALSE(s.mapped(0x100000, 1));
	EXPECT_EQ(s.mappings(), 0u);
}

TEST(EmuIommu, MapAndUnmapFromInsideASectionAreEdeadlk)
{
	HostMem mem(8192);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 4096), 0);
	{
		DmaSection s(*m);
		EXPECT_EQ(m->dma_map(mem.data() + 4096, 0x101000, 4096), -EDEADLK);
		EXPECT_EQ(m->dma_unmap(0x100000, 4096), -EDEADLK);
	}
	EXPECT_EQ(m->mapping_count(), 1u);
	EXPECT_EQ(m->dma_unmap(0x100000, 4096), 0);
}

TEST(EmuIommu, SectionAccessorsCheckWholeRangesLikeTheOneShotOnes)
{
	HostMem mem(3 * 4096);
	auto m = make();
	/* Two adjacent mappings, then a hole. */
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 4096), 0);
	ASSERT_EQ(m->dma_map(mem.data() + 4096, 0x101000, 4096), 0);
	DmaSection s(*m);
	uint8_t buf[64];
	std::memset(buf, 0xab, sizeof(buf));
	EXPECT_EQ(s.write(0x100fe0, buf, sizeof(buf)), 0); /* spans both */
	EXPECT_EQ(mem.data()[0xfe0], 0xab);
	EXPECT_EQ(mem.data()[0x101f], 0xab);
	EXPECT_EQ(s.write(0x101fe0, buf, sizeof(buf)), -EFAULT); /* runs into the hole */
	EXPECT_EQ(mem.data()[0x1fe0], 0);
	EXPECT_EQ(s.read(0x101fe0, buf, sizeof(buf)), -EFAULT);
	EXPECT_EQ(s.copy(0x101fe0, 0x100000, sizeof(buf)), -EFAULT);
	EXPECT_EQ(mem.data()[0x1fe0], 0);
	uint32_t w = 0;
	EXPECT_EQ(s.load32_acquire(0x100002, &w), -EINVAL);
	EXPECT_EQ(s.load32_acquire(0x102000, &w), -EFAULT);
	EXPECT_EQ(s.store8_release(0x102000, 1), -EFAULT);
	/* Adjacent host memory behind adjacent mappings is one host range; a hole is none. */
	EXPECT_EQ(s.host(0x100ff0, 0x20), mem.data() + 0xff0);
	EXPECT_EQ(s.host(0x101ff0, 0x20), nullptr);
	EXPECT_EQ(m->dma_faults(), 6u);
}

/* Maps the second page of mem at 0x101000 and unmaps it, rounds times, while writer(i, m),
 * i = 0 .. nwriters - 1, each on a thread of its own until the rounds end, write into it
 * through sections of m. Once an unmap has returned the page is the driver's again: no write
 * may land in it. */
template <class Writer>
void expect_no_write_after_unmap(HostMem &mem, int nwriters, int rounds, Writer writer)
{
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 4096), 0);
	std::atomic<bool> stop{false};
	std::vector<std::thread> writers;
	writers.reserve(nwriters);
	for (int i = 0; i < nwriters; i++)
		writers.emplace_back([&, i] {
			while (!stop.load(std::memory_order_relaxed))
				writer(i, *m);
		});
	for (int round = 0; round < rounds; round++) {
		ASSERT_EQ(m->dma_map(mem.data() + 4096, 0x101000, 4096), 0);
		std::this_thread::yield();
		ASSERT_EQ(m->dma_unmap(0x101000, 4096), 0);
		std::memset(mem.data() + 4096, 0, 4096);
		std::this_thread::yield();
		for (size_t i = 0; i < 4096; i++)
			ASSERT_EQ(mem.data()[4096 + i], 0) << "round " << round << " byte " << i;
	}
	stop = true;
	for (auto &t : writers)
		t.join();
}

TEST(EmuIommu, NoDeviceWriteLandsAfterUnmapReturnsConcurrent)
{
	HostMem mem(2 * 4096);
	expect_no_write_after_unmap(mem, 3, 100, [](int i, EmuIommu &m) {
		uint8_t v[256];
		std::memset(v, 0x40 + i, sizeof(v));
		DmaSection s(m);
		/* Several accesses in one section, as the device model makes them; each thread
		 * its own bytes (only the driver's reuse of the page after the unmap is under
		 * test). */
		(void)s.write(0x101000 + i * 0x400, v, sizeof(v));
		(void)s.write(0x101200 + i * 0x400, v, sizeof(v));
	});
}

/* The same with writers that come and go: each write from a new thread, which claims a thread
 * slot (its own, or the shared one) while unmaps scan only the slots with an owner
 * (nicmr_thread.h, thread_slots_owned), and gives it back at its exit. */
TEST(EmuIommu, NoDeviceWriteLandsAfterUnmapConcurrentWithWritersThatComeAndGo)
{
	HostMem mem(2 * 4096);
	expect_no_write_after_unmap(mem, 2, 200, [](int i, EmuIommu &m) {
		std::thread([&m, i] {
			uint8_t v[256];
			std::memset(v, 0x40 + i, sizeof(v));
			for (int k = 0; k < 8; k++) {
				DmaSection s(m);
				(void)s.write(0x101000 + i * 0x400, v, sizeof(v));
			}
		}).join();
	});
}

TEST(EmuIommu, BusMasteringOffRefusesEveryAccessWithoutAFault)
{
	HostMem mem(8192);
	std::memset(mem.data(), 0xee, 8192);
	auto m = make();
	EXPECT_TRUE(m->bus_master()) << "an IOMMU alone has no function in front to gate it";
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 8192), 0);
	ASSERT_EQ(m->set_bus_master(false), 0);
	EXPECT_FALSE(m->bus_master());
	uint8_t buf[64] = {};
	uint32_t word = 0;
	EXPECT_EQ(m->dma_read(0x100000, buf, sizeof(buf)), -EFAULT);
	EXPECT_EQ(m->dma_write(0x100000, buf, sizeof(buf)), -EFAULT);
	EXPECT_EQ(m->dma_store8_release(0x100000, 1), -EFAULT);
	EXPECT_EQ(m->dma_load32_acquire(0x100000, &word), -EFAULT);
	EXPECT_EQ(m->dma_copy(0x101000, 0x100000, 64), -EFAULT);
	EXPECT_FALSE(m->pin(0x100000, 64));
	{
		DmaSection s(*m);
		EXPECT_EQ(s.read(0x100000, buf, sizeof(buf)), -EFAULT);
		EXPECT_EQ(s.host(0x100000, 64), nullptr);
	}
	EXPECT_EQ(m->dma_refused(), 8u);
	EXPECT_EQ(m->dma_faults(), 0u) << "a function that may not master issues no request";
	for (size_t i = 0; i < 8192; i++)
		ASSERT_EQ(mem.data()[i], 0xee) << "stray write at " << i;
	/* The translations are still there: only the function is gated. */
	EXPECT_TRUE(m->mapped(0x100000, 8192));
	EXPECT_EQ(m->dma_read(0x100000, buf, 0), 0); /* nothing to move: nothing refused */
	EXPECT_EQ(m->dma_refused(), 8u);

	ASSERT_EQ(m->set_bus_master(true), 0);
	EXPECT_EQ(m->dma_read(0x100000, buf, sizeof(buf)), 0);
	EXPECT_EQ(buf[0], 0xee);
	EXPECT_EQ(m->dma_refused(), 8u);
}

TEST(EmuIommu, ClearingBusMasteringWaitsForTheAccessInFlight)
{
	HostMem mem(8192);
	auto m = make();
	ASSERT_EQ(m->dma_map(mem.data(), 0x100000, 8192), 0);
	std::atomic<bool> in_section{false}, release{false}, cleared{false};
	std::thread device([&] {
		DmaSection s(*m);
		in_section.store(true);
		while (!release.load())
			std::this_thread::yield();
		/* Begun while mastering was on: the access still goes through. */
		EXPECT_EQ(s.write(0x100000, "x", 1), 0);
		EXPECT_FALSE(cleared.load()) << "BME cleared while a DMA that saw it set ran";
	});
	while (!in_section.load())
		std::this_thread::yield();
	std::thread driver([&] {
		EXPECT_EQ(m->set_bus_master(false), 0);
		cleared.store(true);
	});
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
	EXPECT_FALSE(cleared.load());
	release.store(true);
	device.join();
	driver.join();
	EXPECT_TRUE(cleared.load());
	EXPECT_EQ(mem.data()[0], 'x');
	uint8_t b = 0;
	EXPECT_EQ(m->dma_read(0x100000, &b, 1), -EFAULT);
}

TEST(EmuIommu, ClearingBusMasteringInsideASectionIsEdeadlk)
{
	auto m = make();
	{
		DmaSection s(*m);
		EXPECT_EQ(m->set_bus_master(false), -EDEADLK);
		EXPECT_EQ(m->set_bus_master(true), 0) << "setting it never waits";
	}
	EXPECT_TRUE(m->bus_master());
}

} // namespace
} // namespace nicmr::emu
