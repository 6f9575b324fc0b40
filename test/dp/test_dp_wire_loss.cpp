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

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <memory>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <infiniband/mlx5dv.h>
#include <sys/wait.h>

#include "emu_mlx5_wire.h"
#include "roce_packet.h"
#include "wire_rig.h"

namespace {

using namespace wire_rig;

uint64_t now_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

/* Another one than other. */
uint16_t free_port(uint16_t other = 0)
{
	for (;;) {
		const uint16_t p = wire_rig::free_udp_port();
		if (p != 0 && p != other)
			return p;
	}
}

/* Two ports of this process on 127.0.0.1: tx (with faults) sends to rx. */
struct PortPair {
	emu::WirePort tx, rx;
	emu::Gid to{};
	int open(const emu::WireFaults &f)
	{
		const uint16_t pa = free_port(), pb = free_port(pa);
		emu::WirePortConfig a{"127.0.0.1", pa, pb, f};
		emu::WirePortConfig b{"127.0.0.1", pb, pa, {}};
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
		const auto end = std::chrono::steady_clock::now() + wait;
		while (std::chrono::steady_clock::now() < end) {
			tx.release_held(now_ns());
			const emu::WireRx &r = rx.recv();
			for (uint32_t i = 0; i < r.size(); i++) {
				const emu::GroSplit d = r.datagrams(i);
				for (uint32_t k = 0; k < d.count(); k++)
					if (d[k].size() == 1)
						got.push_back(d[k][0]);
			}
			if (r.size() == 0)
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

/* ---- The send path: batches, sendmmsg, UDP GSO ------------------------------------------ */

/* A free UDP port of addr (IPv4 or IPv6 loopback), 0 when the family has no loopback here. */
uint16_t free_port_of(bool v6, uint16_t other = 0)
{
	if (!v6)
		return free_port(other);
	for (;;) {
		const int fd = ::socket(AF_INET6, SOCK_DGRAM, 0);
		sockaddr_in6 a{};
		a.sin6_family = AF_INET6;
		a.sin6_addr = in6addr_loopback;
		socklen_t sl = sizeof(a);
		uint16_t port = 0;
		if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
		    ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &sl) == 0)
			port = ntohs(a.sin6_port);
		if (fd >= 0)
			::close(fd);
		if (port == 0 || port != other)
			return port;
	}
}

/* Two ports on the loopback of one family: tx sends batches to rx. */
struct BatchPair {
	emu::WirePort tx, rx;
	emu::Gid to{};
	bool v6 = false;
	/* 0, or the skip reason's code 1 (no ::1). */
	int open(bool ipv6, const emu::WireFaults &f = {}, int gso_errno = 0, bool rx_gro = true,
		 uint32_t rx_batch = 0)
	{
		v6 = ipv6;
		const uint16_t pa = free_port_of(v6), pb = free_port_of(v6, pa);
		if (pa == 0 || pb == 0)
			return 1;
		const char *addr = v6 ? "::1" : "127.0.0.1";
		emu::WirePortConfig a{addr, pa, pb, f};
		a.test_gso_errno = gso_errno;
		emu::WirePortConfig b{addr, pb, pa, {}};
		b.gro = rx_gro;
		b.rx_batch = rx_batch;
		int rc = tx.open(a);
		if (rc == 0)
			rc = rx.open(b);
		to = rx.gid();
		return rc;
	}
	/* One batch of datagrams of the given lengths (datagram i is its length's bytes of the
	 * value i), sent with tx_flush: what it counted. */
	void send(const std::vector<size_t> &lens, uint32_t *sent, uint32_t *errors)
	{
		emu::WireTx *b = tx.tx_acquire();
		ASSERT_NE(b, nullptr);
		for (size_t i = 0; i < lens.size(); i++) {
			uint8_t *p = b->room(lens[i]);
			ASSERT_NE(p, nullptr);
			std::memset(p, static_cast<int>(i & 0xff), lens[i]);
			b->add(to, lens[i]);
		}
		tx.tx_flush(*b, sent, errors);
		EXPECT_EQ(b->size(), 0u);
		tx.tx_release(b);
	}
	/* What rx received within wait: each datagram's length and first byte (and whether
	 * all its bytes are that byte). */
	std::vector<std::pair<size_t, int>> received(std::chrono::milliseconds wait)
	{
		std::vector<std::pair<size_t, int>> got;
		const auto end = std::chrono::steady_clock::now() + wait;
		while (std::chrono::steady_clock::now() < end) {
			tx.release_held(now_ns());
			const emu::WireRx &r = rx.recv();
			for (uint32_t i = 0; i < r.size(); i++) {
				const emu::GroSplit g = r.datagrams(i);
				for (uint32_t k = 0; k < g.count(); k++) {
					const std::span<const uint8_t> d = g[k];
					const bool same =
						std::all_of(d.begin(), d.end(),
							    [&](uint8_t c) { return c == d[0]; });
					got.emplace_back(d.size(), same && !d.empty() ? d[0] : -1);
				}
			}
			if (r.size() == 0)
				std::this_thread::sleep_for(100us);
		}
		return got;
	}
};

/* Datagram i of a batch as received: its length and value. */
std::vector<std::pair<size_t, int>> expected(const std::vector<size_t> &lens)
{
	std::vector<std::pair<size_t, int>> v;
	for (size_t i = 0; i < lens.size(); i++)
		v.emplace_back(lens[i], static_cast<int>(i & 0xff));
	return v;
}

#define SKIP_WITHOUT_IPV6(rc)                                                                      \
	if ((rc) == 1)                                                                             \
	GTEST_SKIP() << "no IPv6 loopback address (::1) on this host"

TEST(WireSend, BatchOfUnequalDatagramsGoesOutInOneSendmmsg)
{
	BatchPair bp;
	ASSERT_EQ(bp.open(false), 0);
	std::vector<size_t> lens;
	for (size_t i = 0; i < 100; i++)
		lens.push_back(20 + (i * 37) % 1000);
	uint32_t sent = 0, errors = 0;
	bp.send(lens, &sent, &errors);
	EXPECT_EQ(sent, 100u);
	EXPECT_EQ(errors, 0u);
	EXPECT_EQ(bp.received(100ms), expected(lens));
	const emu::WireTxCounts c = bp.tx.tx_counts();
	EXPECT_EQ(c.syscalls, 1u);
	EXPECT_EQ(c.gso_sends, 0u); /* IPv4: no GSO (the IP IDs of its segments) */
	EXPECT_FALSE(bp.tx.gso_active());
}

TEST(WireSend, EqualDatagramsGoAsGsoSendsOnIpv6)
{
	BatchPair bp;
	const int rc = bp.open(true);
	SKIP_WITHOUT_IPV6(rc);
	ASSERT_EQ(rc, 0);
	EXPECT_TRUE(bp.tx.gso_active());
	/* A WRITE's shape at MTU 1024: FIRST (RETH: 16 bytes more), 38 MIDDLEs, a short LAST. */
	std::vector<size_t> lens{1056};
	lens.insert(lens.end(), 38, 1040);
	lens.push_back(80);
	uint32_t sent = 0, errors = 0;
	bp.send(lens, &sent, &errors);
	EXPECT_EQ(sent, 40u);
	EXPECT_EQ(errors, 0u);
	EXPECT_EQ(bp.received(100ms), expected(lens));
	const emu::WireTxCounts c = bp.tx.tx_counts();
	EXPECT_EQ(c.syscalls, 1u);
	EXPECT_EQ(c.gso_sends, 1u); /* the MIDDLEs and the LAST */
	EXPECT_EQ(c.gso_refused, 0u);
}

/* The splitter of a coalesced message: datagrams of the segment size, the last shorter. */
TEST(WireReceive, GroSplitCutsAtTheSegmentSizeWithAShorterLast)
{
	/* Three datagrams of 100 bytes and one of 37, back to back, each filled with its
	 * number, as the kernel hands a GRO socket a coalesced message. */
	std::vector<uint8_t> buf;
	for (int k = 0; k < 3; k++)
		buf.insert(buf.end(), 100, static_cast<uint8_t>(k + 1));
	buf.insert(buf.end(), 37, 4);
	const emu::GroSplit g{buf.data(), buf.size(), 100};
	ASSERT_EQ(g.count(), 4u);
	for (uint32_t k = 0; k < 4; k++) {
		const std::span<const uint8_t> d = g[k];
		EXPECT_EQ(d.data(), buf.data() + k * 100) << k;
		ASSERT_EQ(d.size(), k < 3 ? 100u : 37u) << k;
		EXPECT_TRUE(std::all_of(d.begin(), d.end(), [&](uint8_t c) { return c == k + 1; }))
			<< k;
	}
	/* A whole multiple: no empty datagram at the end. */
	const emu::GroSplit even{buf.data(), 300, 100};
	ASSERT_EQ(even.count(), 3u);
	EXPECT_EQ(even[2].size(), 100u);
	/* No segment size (no UDP_GRO control message), or one not below the length: the
	 * message is one datagram, an empty one included. */
	for (const size_t seg : {size_t{0}, buf.size(), buf.size() + 1}) {
		const emu::GroSplit one{buf.data(), buf.size(), seg};
		ASSERT_EQ(one.count(), 1u) << seg;
		EXPECT_EQ(one[0].data(), buf.data());
		EXPECT_EQ(one[0].size(), buf.size());
	}
	const emu::GroSplit empty{buf.data(), 0, 100};
	ASSERT_EQ(empty.count(), 1u);
	EXPECT_EQ(empty[0].size(), 0u);
}

/* What this kernel does (checked on Linux 6.18, and the rule since UDP_GRO came in 5.0,
 * include/linux/udp.h udp_unexpected_gso): a UDP GSO send over the loopback reaches a socket with
 * UDP_GRO as one message with its segment size, and a socket without it as its datagrams.
 * Datagrams sent one by one are never coalesced on the loopback (no NAPI GRO there). Either
 * way the port gives the same datagrams; only the counters and the slots tell. */
TEST(WireReceive, GsoSendArrivesCoalescedWithGroAndAsDatagramsWithout)
{
	for (const bool gro : {true, false}) {
		SCOPED_TRACE(gro ? "GRO" : "no GRO");
		BatchPair bp;
		const int rc = bp.open(true, {}, 0, gro);
		SKIP_WITHOUT_IPV6(rc);
		ASSERT_EQ(rc, 0);
		EXPECT_EQ(bp.rx.gro_active(), gro);
		const emu::WireRx &empty = bp.rx.recv();
		EXPECT_EQ(empty.size(), 0u);
		EXPECT_EQ(empty.slot_bytes(), gro ? emu::WireRx::kGroSlot : emu::WireRx::kSlot);
		/* A WRITE's shape at MTU 4096: FIRST, 14 MIDDLEs (one GSO run), a short LAST. */
		std::vector<size_t> lens{4128};
		lens.insert(lens.end(), 14, 4112);
		lens.push_back(700);
		uint32_t sent = 0, errors = 0;
		bp.send(lens, &sent, &errors);
		EXPECT_EQ(sent, lens.size());
		EXPECT_EQ(errors, 0u);
		EXPECT_EQ(bp.received(100ms), expected(lens));
		ASSERT_EQ(bp.tx.tx_counts().gso_sends, 1u);
		const emu::WireRxCounts c = bp.rx.rx_counts();
		EXPECT_EQ(c.gro_batches, gro ? 1u : 0u);
		EXPECT_EQ(c.gro_datagrams, gro ? 15u : 0u);
		/* Datagrams sent alone stay alone (no GSO on the sender: faults off, IPv6, but
		 * one datagram per message). */
		for (int i = 0; i < 4; i++) {
			const uint8_t b[64] = {};
			ASSERT_EQ(bp.tx.send(bp.to, b, sizeof(b)), 0);
		}
		EXPECT_EQ(bp.received(100ms).size(), 4u);
		EXPECT_EQ(bp.rx.rx_counts().gro_batches, c.gro_batches);
	}
}

/* One message per receive call while they come one at a time; doubling while they come back
 * to back; sized to the last call that got fewer than it asked for. A fixed batch
 * (WirePortConfig::rx_batch) takes what is queued, up to its size. */
TEST(WireRecv, TheBatchFollowsWhatComesBackToBackUnlessFixed)
{
	for (const uint32_t fixed : {0u, 32u, 3u}) {
		SCOPED_TRACE(fixed);
		BatchPair bp;
		const int rc = bp.open(true, {}, 0, false, fixed);
		SKIP_WITHOUT_IPV6(rc);
		ASSERT_EQ(rc, 0);
		/* Queued in rx's socket before the first call that finds them. */
		const auto sizes = [&bp](size_t datagrams, size_t calls) {
			uint32_t sent = 0, errors = 0;
			bp.send(std::vector<size_t>(datagrams, 64), &sent, &errors);
			EXPECT_EQ(sent, datagrams);
			std::this_thread::sleep_for(20ms);
			std::vector<uint32_t> got;
			for (size_t i = 0; i < calls; i++)
				got.push_back(bp.rx.recv().size());
			return got;
		};
		EXPECT_EQ(bp.rx.recv().size(), 0u);
		using V = std::vector<uint32_t>;
		if (fixed == 0) {
			EXPECT_EQ(sizes(8, 5), (V{1, 1, 2, 4, 0}));
			EXPECT_EQ(sizes(3, 2), (V{3, 0})) << "8 asked for, 3 got";
			EXPECT_EQ(sizes(1, 2), (V{1, 0})) << "3 asked for, 1 got";
			EXPECT_EQ(sizes(2, 3), (V{1, 1, 0}));
		} else if (fixed == 32) {
			EXPECT_EQ(sizes(8, 2), (V{8, 0}));
			EXPECT_EQ(sizes(1, 2), (V{1, 0}));
			EXPECT_EQ(sizes(40, 3), (V{32, 8, 0}));
		} else {
			EXPECT_EQ(sizes(8, 4), (V{3, 3, 2, 0}));
		}
	}
	emu::WirePort p;
	emu::WirePortConfig c{"::1", 0, 0, {}};
	c.rx_batch = emu::WireRx::kMessages + 1;
	EXPECT_EQ(p.open(c), -EINVAL);
}

TEST(WireSend, GsoRunsStopAtTheSegmentAndByteLimitsAndALongerDatagram)
{
	BatchPair bp;
	const int rc = bp.open(true);
	SKIP_WITHOUT_IPV6(rc);
	ASSERT_EQ(rc, 0);
	/* 150 of 200 bytes: runs of kGsoSegments (64, 64, 22). */
	std::vector<size_t> small(150, 200);
	/* 31 of 4112 (a MIDDLE at MTU 4096): kGsoBytes holds 15 (15, 15, 1 alone). */
	std::vector<size_t> big(31, 4112);
	/* A longer one ends a run and starts its own: 100 100 300 300. */
	std::vector<size_t> grow{100, 100, 300, 300};
	uint32_t sent = 0, errors = 0;
	for (const auto *lens : {&small, &big, &grow}) {
		const emu::WireTxCounts before = bp.tx.tx_counts();
		const emu::WireRxCounts rx_before = bp.rx.rx_counts();
		bp.send(*lens, &sent, &errors);
		EXPECT_EQ(sent, lens->size());
		EXPECT_EQ(errors, 0u);
		EXPECT_EQ(bp.received(100ms), expected(*lens));
		const emu::WireTxCounts after = bp.tx.tx_counts();
		EXPECT_EQ(after.syscalls - before.syscalls, 1u);
		EXPECT_EQ(after.gso_sends - before.gso_sends, lens == &small ? 3u
							      : lens == &big ? 2u
									     : 2u);
		/* Over the loopback each GSO send reaches the GRO socket whole, split by the
		 * receiver into what was sent (above). */
		const emu::WireRxCounts rxc = bp.rx.rx_counts();
		EXPECT_EQ(rxc.gro_batches - rx_before.gro_batches,
			  after.gso_sends - before.gso_sends);
		EXPECT_EQ(rxc.gro_datagrams - rx_before.gro_datagrams, lens == &small ? 150u
								       : lens == &big ? 30u
										      : 4u);
	}
	static_assert(emu::WirePort::kGsoSegments == 64);
	static_assert(emu::WirePort::kGsoBytes / 4112 == 15);
}

TEST(WireSend, RefusedGsoFallsBackOnceAndStaysOff)
{
	for (const int err : {EIO, EINVAL}) {
		BatchPair bp;
		const int rc = bp.open(true, {}, err);
		SKIP_WITHOUT_IPV6(rc);
		ASSERT_EQ(rc, 0);
		const std::vector<size_t> lens{300, 200, 200, 200, 200, 50};
		for (int round = 0; round < 2; round++) {
			uint32_t sent = 0, errors = 0;
			bp.send(lens, &sent, &errors);
			EXPECT_EQ(sent, lens.size());
			EXPECT_EQ(errors, 0u);
			EXPECT_EQ(bp.received(100ms), expected(lens)) << "errno " << err;
		}
		const emu::WireTxCounts c = bp.tx.tx_counts();
		EXPECT_EQ(c.gso_refused, 1u);
		EXPECT_EQ(c.gso_sends, 0u);
		/* Round 1: the FIRST-like datagram, then the refusal, then the rest without
		 * GSO; round 2: one sendmmsg. */
		EXPECT_EQ(c.syscalls, 3u);
		EXPECT_FALSE(bp.tx.gso_active());
	}
}

TEST(WireSend, FaultsStillActPerDatagramInABatch)
{
	for (const bool v6 : {false, true}) {
		BatchPair dup;
		const int rc = dup.open(v6, {0, 100, 0, 0, 1});
		if (v6)
			SKIP_WITHOUT_IPV6(rc);
		ASSERT_EQ(rc, 0);
		EXPECT_FALSE(dup.tx.gso_active()); /* faults: no GSO */
		const std::vector<size_t> lens(10, 500);
		uint32_t sent = 0, errors = 0;
		dup.send(lens, &sent, &errors);
		EXPECT_EQ(sent, 10u);
		std::vector<std::pair<size_t, int>> want;
		for (const auto &d : expected(lens)) {
			want.push_back(d);
			want.push_back(d);
		}
		EXPECT_EQ(dup.received(100ms), want);
		EXPECT_EQ(dup.tx.fault_counts().duplicated, 10u);
		EXPECT_EQ(dup.tx.tx_counts().gso_sends, 0u);

		BatchPair lost;
		ASSERT_EQ(lost.open(v6, {100, 0, 0, 0, 1}), 0);
		lost.send(lens, &sent, &errors);
		EXPECT_EQ(sent, 10u); /* a lost datagram counts as sent */
		EXPECT_TRUE(lost.received(50ms).empty());
		EXPECT_EQ(lost.tx.fault_counts().lost, 10u);
		EXPECT_EQ(lost.tx.tx_counts().syscalls, 0u);
	}
}

TEST(WireSend, RefusedDatagramIsCountedAndTheRestGoes)
{
	/* 65600 bytes: longer than a UDP datagram over IPv4 may be (EMSGSIZE). */
	BatchPair bp;
	ASSERT_EQ(bp.open(false), 0);
	const std::vector<size_t> lens{100, 65600, 100};
	uint32_t sent = 0, errors = 0;
	bp.send(lens, &sent, &errors);
	EXPECT_EQ(sent, 2u);
	EXPECT_EQ(errors, 1u);
	const std::vector<std::pair<size_t, int>> want{{100, 0}, {100, 2}};
	EXPECT_EQ(bp.received(100ms), want);
	/* The first went, the second failed alone, the third in a call of its own. */
	EXPECT_EQ(bp.tx.tx_counts().syscalls, 3u);
	/* A batch of that one datagram alone goes through sendto: refused the same way. */
	bp.send({65600}, &sent, &errors);
	EXPECT_EQ(sent, 0u);
	EXPECT_EQ(errors, 1u);
	EXPECT_TRUE(bp.received(50ms).empty());
	EXPECT_EQ(bp.tx.tx_counts().syscalls, 4u);
}

TEST(WireSend, EveryBatchLeasedGivesNullUntilOneIsReleased)
{
	BatchPair bp;
	ASSERT_EQ(bp.open(false), 0);
	emu::WireTx *held[emu::WirePort::kTxBatches];
	for (auto &h : held) {
		h = bp.tx.tx_acquire();
		ASSERT_NE(h, nullptr);
	}
	EXPECT_EQ(bp.tx.tx_acquire(), nullptr);
	bp.tx.tx_release(held[1]);
	EXPECT_EQ(bp.tx.tx_acquire(), held[1]);
	for (auto &h : held)
		bp.tx.tx_release(h);
	/* A batch is full at kDatagrams or kBytes: room() says so. */
	emu::WireTx *b = bp.tx.tx_acquire();
	ASSERT_NE(b, nullptr);
	for (uint32_t i = 0; i < emu::WireTx::kDatagrams; i++) {
		ASSERT_NE(b->room(1), nullptr);
		b->add(bp.to, 1);
	}
	EXPECT_EQ(b->room(1), nullptr);
	b->clear();
	EXPECT_EQ(b->room(emu::WireTx::kBytes + 1), nullptr);
	EXPECT_NE(b->room(emu::WireTx::kBytes), nullptr);
	bp.tx.tx_release(b);
}

/* ---- RC reliability between two processes ------------------------------------------------ */

struct LossParam {
	const char *name;
	uint32_t loss, dup, reorder; /* percent, on both sides' sends */
	uint32_t mtu;
	uint32_t delay_us = 0; /* every datagram held that long too */
};

/*
 * The requester here, the responder in a child (wire_rig.h's responder), both on 127.0.0.1
 * with their own ports and each side's faults; 7 retries of a local ACK timeout of
 * 4.096 us * 2^14 = 67 ms: a loss the NAKs do not catch costs that much, and the retries
 * outlast a process descheduled for 400 ms on a loaded two-core machine (with 1 ms they did
 * not: three spinning threads on two cores; with 17 ms the 300 us delay case ran out of
 * retries at a load of 10).
 */
class Lossy : public ::testing::TestWithParam<LossParam> {
protected:
	static constexpr uint32_t kAckTimeout = 14;
	void start(const emu::WireFaults &mine_f, const emu::WireFaults &theirs_f,
		   uint32_t retry_count = 7, uint32_t ack_timeout = 8, uint32_t rnr_retry = 7,
		   uint32_t mtu = nicmr::mlx5::prm::qp_mtu::mtu_1024)
	{
		const uint16_t pa = free_port();
		WireOptions mine{"127.0.0.1", pa, free_port(pa), mtu,
				 emu::DoorbellDelivery::inline_call};
		mine.faults = mine_f;
		mine.retry_count = retry_count;
		mine.ack_timeout = ack_timeout;
		mine.rnr_retry = rnr_retry;
		WireOptions theirs = mine;
		theirs.port = mine.peer_port;
		theirs.peer_port = mine.port;
		theirs.faults = theirs_f;
		int sv[2];
		ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		child_ = ::fork();
		ASSERT_GE(child_, 0);
		if (child_ == 0) {
			::close(sv[0]);
			::_exit(responder(sv[1], theirs));
		}
		::close(sv[1]);
		fd_ = sv[0];
		ASSERT_EQ(me_->open(mine), 0);
		emu::Gid peer_gid{};
		ASSERT_TRUE(full_read(fd_, peer_gid.data(), 16));
		ASSERT_TRUE(full_write(fd_, me_->gid.gid.data(), 16));
		ASSERT_EQ(me_->make_qp(peer_gid.data()), 0);
		ASSERT_TRUE(full_read(fd_, &peer_, sizeof(peer_)));
		Info info{};
		info.qpn = me_->qp->qpn();
		ASSERT_TRUE(full_write(fd_, &info, sizeof(info)));
		ASSERT_EQ(me_->qp->connect(peer_.qpn), 0);
		uint32_t st = 0;
		Req r{op_state, 0, 0};
		ASSERT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &st, sizeof(st)));
		ASSERT_EQ(st, static_cast<uint32_t>(emu::QpState::rts));
		ASSERT_EQ(me_->mr(0, kRegion * 2, true, true, false, false, false, false, &lkey_),
			  0);
	}
	void SetUp() override
	{
		const LossParam &p = GetParam();
		/* Different seeds: the two directions lose different packets. */
		start({p.loss, p.dup, p.reorder, p.delay_us, 11},
		      {p.loss, p.dup, p.reorder, p.delay_us, 29}, 7, kAckTimeout, 7, p.mtu);
	}
	void TearDown() override
	{
		if (child_ > 0) {
			Req r{op_exit, 0, 0};
			full_write(fd_, &r, sizeof(r));
			int st = 0;
			::waitpid(child_, &st, 0);
			EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
				<< "responder exit status " << st;
		}
		if (fd_ >= 0)
			::close(fd_);
	}

	std::vector<uint8_t> dump(uint32_t off, uint32_t len)
	{
		std::vector<uint8_t> v(len);
		Req r{op_dump, off, len};
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, v.data(), len));
		return v;
	}
	emu::WireStats peer_stats()
	{
		emu::WireStats ws{};
		Req r{op_stats, 0, 0};
		EXPECT_TRUE(full_write(fd_, &r, sizeof(r)) && full_read(fd_, &ws, sizeof(ws)));
		return ws;
	}
	emu::WireStats my_stats() { return me_->hw->device().data_path().wire_stats(); }
	/* Both sides' counters, for a failure's message. */
	std::string stats_text()
	{
		std::string t;
		const emu::WireStats a = my_stats(), b = peer_stats();
		for (const emu::WireStats *w : {&a, &b})
			t += "tx " + std::to_string(w->tx_packets) + " lost " +
			     std::to_string(w->tx_lost) + " rx " + std::to_string(w->rx_packets) +
			     " drop " + std::to_string(w->rx_dropped) + " dup " +
			     std::to_string(w->duplicates) + " naks " +
			     std::to_string(w->naks_sent) + " seqnak " +
			     std::to_string(w->seq_naks_received) + " retx " +
			     std::to_string(w->retransmits) + " timeouts " +
			     std::to_string(w->timeouts) + "; ";
		return t;
	}
	uint32_t my_state()
	{
		uint32_t st = 0;
		EXPECT_EQ(me_->qp->query_state(&st), 0);
		return st;
	}

	uint8_t *local() { return me_->region(); }
	uint64_t laddr(size_t off) { return reinterpret_cast<uintptr_t>(local()) + off; }
	uint64_t raddr(size_t off) const { return peer_.region + off; }
	nicmr::mlx5::Sge sge(size_t off, uint32_t len) { return {laddr(off), len, lkey_}; }

	/*
	 * Posts n signalled requests (post(i) posts request i with wr_id i), at most kWindow
	 * outstanding, and checks that exactly n completions come, successful, with wr_ids
	 * 0 .. n - 1 in order, and nothing after them.
	 */
	template <typename Post> void stream(uint32_t n, Post post)
	{
		stream(n, post, [](uint32_t) {});
	}
	/* The same, with done(i) called at request i's completion. */
	template <typename Post, typename Done> void stream(uint32_t n, Post post, Done done_fn)
	{
		constexpr uint32_t kWindow = 32;
		uint32_t posted = 0, done = 0;
		const auto deadline = std::chrono::steady_clock::now() + 20s;
		while (done < n && std::chrono::steady_clock::now() < deadline) {
			while (posted < n && posted - done < kWindow) {
				ASSERT_EQ(post(posted), 0) << "request " << posted;
				posted++;
			}
			nicmr::mlx5::Completion c[8];
			const int k = me_->qp->poll(c, 8);
			for (int i = 0; i < k; i++, done++) {
				ASSERT_TRUE(c[i].ok())
					<< "request " << done << " syndrome " << int(c[i].syndrome)
					<< "; " << stats_text();
				ASSERT_EQ(c[i].wr_id, done) << "completions out of order";
				done_fn(done);
			}
		}
		ASSERT_EQ(done, n) << "completions missing";
		std::this_thread::sleep_for(20ms);
		nicmr::mlx5::Completion extra;
		EXPECT_EQ(me_->qp->poll(&extra, 1), 0) << "a completion came twice";
	}

	std::unique_ptr<Side> me_ = std::make_unique<Side>();
	Info peer_{};
	uint32_t lkey_ = 0;
	pid_t child_ = -1;
	int fd_ = -1;
};

TEST_P(Lossy, WriteStreamLandsExactly)
{
	const uint32_t mtu = 128u << GetParam().mtu;
	constexpr uint32_t kN = 300;
	/* Request i writes len(i) bytes of its own pattern at its own place. */
	const auto len = [&](uint32_t i) { return 1 + (i * 977) % (3 * mtu); };
	const auto at = [&](uint32_t i) { return (i * 211) % (kRegion - 3 * mtu); };
	std::vector<uint8_t> want(kRegion);
	for (size_t i = 0; i < kRegion; i++)
		want[i] = pattern(i);
	/* The local source of request i at i % 16 * 4 KiB: rewritten only after it completed,
	 * so in-flight (and retransmitted) data stays as posted. Fill all first. */
	for (uint32_t i = 0; i < kN; i++) {
		const uint32_t l = len(i);
		for (uint32_t b = 0; b < l; b++)
			want[at(i) + b] = static_cast<uint8_t>(i * 31 + b * 7 + 1);
	}
	stream(kN, [&](uint32_t i) {
		const uint32_t l = len(i);
		/* Later requests overwrite earlier ones where they overlap: the order counts. */
		uint8_t *p = local() + (i % 32) * (3 * mtu);
		for (uint32_t b = 0; b < l; b++)
			p[b] = static_cast<uint8_t>(i * 31 + b * 7 + 1);
		const nicmr::mlx5::Sge s = sge((i % 32) * (3 * mtu), l);
		return me_->qp->post_write({&s, 1}, raddr(at(i)), peer_.keys[k_rw], i,
					   nicmr::mlx5::kSignaled);
	});
	EXPECT_EQ(dump(0, kRegion), want);
	const emu::WireStats a = my_stats(), b = peer_stats();
	EXPECT_GT(a.tx_lost + b.tx_lost, 0u);
	EXPECT_GT(a.retransmits, 0u);
	EXPECT_GT(b.duplicates, 0u);
	EXPECT_EQ(a.retry_exceeded, 0u);
}

TEST_P(Lossy, ReadStreamIsExact)
{
	const uint32_t mtu = 128u << GetParam().mtu;
	constexpr uint32_t kN = 200;
	const auto len = [&](uint32_t i) { return 1 + (i * 1231) % (3 * mtu); };
	const auto from = [&](uint32_t i) { return (i * 379) % (kRegion - 3 * mtu); };
	/* Request i reads into slot i % 32 of 3 MTUs (cleared when posted, checked at its
	 * completion); a guard byte after the data stays 0. */
	const uint32_t slot = 3 * mtu + 64;
	const auto at = [&](uint32_t i) { return local() + size_t{i % 32} * slot; };
	stream(
		kN,
		[&](uint32_t i) {
			std::memset(at(i), 0, slot);
			const nicmr::mlx5::Sge s = sge(size_t{i % 32} * slot, len(i));
			return me_->qp->post_read({&s, 1}, raddr(from(i)), peer_.keys[k_rw], i,
						  nicmr::mlx5::kSignaled);
		},
		[&](uint32_t i) {
			const uint8_t *p = at(i);
			for (uint32_t b = 0; b < len(i); b++)
				ASSERT_EQ(p[b], pattern(from(i) + b))
					<< "read " << i << " byte " << b;
			ASSERT_EQ(p[len(i)], 0) << "read " << i << " wrote past its buffer";
		});
	const emu::WireStats a = my_stats(), b = peer_stats();
	EXPECT_GT(a.tx_lost + b.tx_lost, 0u);
	EXPECT_GT(a.retransmits, 0u);
	EXPECT_GT(b.duplicates, 0u);
}

TEST_P(Lossy, FetchAddsApplyOnceEach)
{
	const bool host = me_->hw->device().data_path().atomic_host_endianness();
	const auto word = [&](const uint8_t *p) {
		uint64_t v;
		std::memcpy(&v, p, 8);
		return host ? v : be64toh(v);
	};
	constexpr uint32_t kN = 300;
	const uint32_t at = 4096;
	const uint64_t v0 = word(dump(at, 8).data());
	stream(kN, [&](uint32_t i) {
		return me_->qp->post_atomic_fa(sge(size_t{i} * 8, 8), raddr(at), peer_.keys[k_rw],
					       i + 1, i, nicmr::mlx5::kSignaled);
	});
	/* In PSN order, each once: request i saw v0 + 1 + 2 + ... + i. */
	uint64_t sum = 0;
	for (uint32_t i = 0; i < kN; i++) {
		ASSERT_EQ(word(local() + size_t{i} * 8), v0 + sum) << "fetch-add " << i;
		sum += i + 1;
	}
	EXPECT_EQ(word(dump(at, 8).data()), v0 + sum);
	/* A compare-swap after them sees the sum. */
	const emu::WireStats a = my_stats(), b = peer_stats();
	EXPECT_GT(a.retransmits, 0u);
	EXPECT_GT(b.duplicates, 0u);
}

TEST_P(Lossy, MixedStreamCompletesInOrder)
{
	/* WRITEs, READs and fetch-adds interleaved: responses of one kind acknowledge requests
	 * of another, and resends go back over all of them. */
	constexpr uint32_t kN = 240;
	const bool host = me_->hw->device().data_path().atomic_host_endianness();
	const auto word = [&](const uint8_t *p) {
		uint64_t v;
		std::memcpy(&v, p, 8);
		return host ? v : be64toh(v);
	};
	const uint32_t counter = 60000; /* the fetch-adds' word; WRITEs stay below it */
	const uint64_t v0 = word(dump(counter, 8).data());
	/* WRITE i (i % 3 == 0) has a place of its own; READ i + 1 reads it back. No later
	 * WRITE touches it: a READ answered again after a loss reads memory as it is then. */
	const auto len = [&](uint32_t i) { return 1 + (i / 3 * 613) % 700; };
	const auto wat = [&](uint32_t i) { return i / 3 * 700; };
	const uint32_t slot = 704;
	const auto buf = [&](uint32_t i) { return size_t{i % 32} * slot; };
	std::vector<uint8_t> want(counter);
	for (size_t i = 0; i < counter; i++)
		want[i] = pattern(i);
	uint64_t sum = 0;
	std::vector<uint64_t> expect_old(kN);
	stream(
		kN,
		[&](uint32_t i) {
			const nicmr::mlx5::Sge s = sge(buf(i), i % 3 == 2 ? 8 : len(i));
			switch (i % 3) {
			case 0: /* WRITE: bytes of request i, recorded in want */
				for (uint32_t b = 0; b < len(i); b++) {
					local()[buf(i) + b] = static_cast<uint8_t>(i + b * 3);
					want[wat(i) + b] = local()[buf(i) + b];
				}
				return me_->qp->post_write({&s, 1}, raddr(wat(i)), peer_.keys[k_rw],
							   i, nicmr::mlx5::kSignaled);
			case 1: /* READ of what the WRITE before it left */
				std::memset(local() + buf(i), 0, slot);
				return me_->qp->post_read({&s, 1}, raddr(wat(i)), peer_.keys[k_rw],
							  i, nicmr::mlx5::kSignaled);
			default:
				expect_old[i] = v0 + sum;
				sum += i;
				return me_->qp->post_atomic_fa(s, raddr(counter), peer_.keys[k_rw],
							       i, i, nicmr::mlx5::kSignaled);
			}
		},
		[&](uint32_t i) {
			if (i % 3 == 1) {
				/* RC orders a READ after the WRITEs posted before it. */
				for (uint32_t b = 0; b < len(i); b++)
					ASSERT_EQ(local()[buf(i) + b], want[wat(i) + b])
						<< "read " << i << " byte " << b;
			} else if (i % 3 == 2) {
				ASSERT_EQ(word(local() + buf(i)), expect_old[i])
					<< "fetch-add " << i;
			}
		});
	EXPECT_EQ(dump(0, counter), want);
	EXPECT_EQ(word(dump(counter, 8).data()), v0 + sum);
	EXPECT_GT(my_stats().retransmits, 0u);
}

INSTANTIATE_TEST_SUITE_P(
	Faults, Lossy,
	::testing::Values(
		LossParam{"loss1_dup1_reorder1", 1, 1, 1, nicmr::mlx5::prm::qp_mtu::mtu_1024},
		LossParam{"loss5_dup5_reorder5", 5, 5, 5, nicmr::mlx5::prm::qp_mtu::mtu_1024},
		LossParam{"loss5_dup5_reorder5_mtu256", 5, 5, 5, nicmr::mlx5::prm::qp_mtu::mtu_256},
		LossParam{"loss5_dup5_reorder5_delay300", 5, 5, 5,
			  nicmr::mlx5::prm::qp_mtu::mtu_1024, 300}),
	[](const ::testing::TestParamInfo<LossParam> &i) { return std::string(i.param.name); });

/* A peer that never hears: the local ACK timer runs out its retries. */
class Deaf : public Lossy {
protected:
	void SetUp() override {}
};

TEST_F(Deaf, RetryExceededCompletesWithTheSyndromeAndFlushes)
{
	/* Everything the requester sends is lost; 2 retries of 1 ms. */
	start({100, 0, 0, 0, 1}, {}, 2, 8);
	const nicmr::mlx5::Sge s = sge(0, 100);
	ASSERT_EQ(
		me_->qp->post_write({&s, 1}, raddr(0), peer_.keys[k_rw], 1, nicmr::mlx5::kSignaled),
		0);
	ASSERT_EQ(
		me_->qp->post_write({&s, 1}, raddr(0), peer_.keys[k_rw], 2, nicmr::mlx5::kSignaled),
		0);
	nicmr::mlx5::Completion c[2];
	ASSERT_TRUE(me_->wait(&c[0]));
	ASSERT_TRUE(me_->wait(&c[1]));
	EXPECT_EQ(c[0].wr_id, 1u);
	EXPECT_EQ(c[0].opcode, MLX5_CQE_REQ_ERR);
	EXPECT_EQ(c[0].syndrome, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
	EXPECT_EQ(c[1].wr_id, 2u);
	EXPECT_EQ(c[1].syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	EXPECT_EQ(my_state(), static_cast<uint32_t>(emu::QpState::err));
	const emu::WireStats a = my_stats();
	/* Three expiries: two retries of both WRITEs (one packet each), then the end. */
	EXPECT_EQ(a.timeouts, 3u);
	EXPECT_EQ(a.retransmits, 4u);
	EXPECT_EQ(a.retry_exceeded, 1u);
	EXPECT_EQ(a.tx_lost, 6u);
	EXPECT_EQ(peer_stats().rx_packets, 0u);
	EXPECT_EQ(dump(0, 100)[0], pattern(0));
}

TEST_F(Deaf, RetryCountZeroFailsAtTheFirstTimeout)
{
	start({100, 0, 0, 0, 1}, {}, 0, 8);
	const nicmr::mlx5::Sge s = sge(0, 8);
	ASSERT_EQ(
		me_->qp->post_read({&s, 1}, raddr(0), peer_.keys[k_rw], 1, nicmr::mlx5::kSignaled),
		0);
	nicmr::mlx5::Completion c;
	ASSERT_TRUE(me_->wait(&c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
	EXPECT_EQ(my_stats().retransmits, 0u);
	EXPECT_EQ(my_stats().timeouts, 1u);
}

TEST_F(Deaf, AckTimeoutZeroWaitsForever)
{
	/* ack_timeout 0: the timer never expires (IBTA), nothing is sent again. */
	start({100, 0, 0, 0, 1}, {}, 0, 0);
	const nicmr::mlx5::Sge s = sge(0, 8);
	ASSERT_EQ(
		me_->qp->post_write({&s, 1}, raddr(0), peer_.keys[k_rw], 1, nicmr::mlx5::kSignaled),
		0);
	std::this_thread::sleep_for(200ms);
	nicmr::mlx5::Completion c;
	EXPECT_EQ(me_->qp->poll(&c, 1), 0);
	EXPECT_EQ(my_stats().timeouts, 0u);
	EXPECT_EQ(my_stats().retransmits, 0u);
	EXPECT_EQ(my_state(), static_cast<uint32_t>(emu::QpState::rts));
}

TEST_F(Deaf, ReadsAndAtomicsInFlightStopAtLogSraMax)
{
	/* The driver's log_sra_max 3: eight READs go out, the ninth and the WRITE behind it
	 * wait for a response that never comes (no timer: ack_timeout 0). */
	start({100, 0, 0, 0, 1}, {}, 0, 0);
	const nicmr::mlx5::Sge s = sge(0, 8);
	for (uint32_t i = 0; i < 9; i++)
		ASSERT_EQ(me_->qp->post_read({&s, 1}, raddr(0), peer_.keys[k_rw], i, 0), 0);
	ASSERT_EQ(me_->qp->post_write({&s, 1}, raddr(0), peer_.keys[k_rw], 9, 0), 0);
	std::this_thread::sleep_for(50ms);
	EXPECT_EQ(my_stats().tx_lost, 8u);
}

/* Every request packet twice: the responder executes each once and answers the second as a
 * duplicate (IBTA 9.9.2: WRITE packets ACKed again, the atomic from its saved result). */
class Doubled : public Lossy {
protected:
	void SetUp() override { start({0, 100, 0, 0, 1}, {}, 7, kAckTimeout); }
};

TEST_F(Doubled, DuplicateWritePacketsAndAtomicsAreNotExecutedTwice)
{
	const bool host = me_->hw->device().data_path().atomic_host_endianness();
	const auto word = [&](const uint8_t *p) {
		uint64_t v;
		std::memcpy(&v, p, 8);
		return host ? v : be64toh(v);
	};
	/* A WRITE of three packets, then one inside it: each packet's copy is counted as a
	 * duplicate and changes nothing. */
	for (uint32_t i = 0; i < 3000; i++)
		local()[i] = static_cast<uint8_t>(i * 5 + 1);
	const nicmr::mlx5::Sge three = sge(0, 3000);
	nicmr::mlx5::Completion c;
	ASSERT_EQ(me_->qp->post_write({&three, 1}, raddr(0), peer_.keys[k_rw], 1,
				      nicmr::mlx5::kSignaled),
		  0);
	ASSERT_TRUE(me_->wait(&c));
	ASSERT_TRUE(c.ok());
	std::memset(local() + 4096, 0x5a, 100);
	const nicmr::mlx5::Sge small = sge(4096, 100);
	ASSERT_EQ(me_->qp->post_write({&small, 1}, raddr(1000), peer_.keys[k_rw], 2,
				      nicmr::mlx5::kSignaled),
		  0);
	ASSERT_TRUE(me_->wait(&c));
	ASSERT_TRUE(c.ok());
	std::vector<uint8_t> want(local(), local() + 3000);
	std::memset(want.data() + 1000, 0x5a, 100);
	EXPECT_EQ(dump(0, 3000), want);
	const uint64_t v0 = word(dump(8192, 8).data());
	ASSERT_EQ(me_->qp->post_atomic_fa(sge(8192, 8), raddr(8192), peer_.keys[k_rw], 5, 3,
					  nicmr::mlx5::kSignaled),
		  0);
	ASSERT_TRUE(me_->wait(&c));
	ASSERT_TRUE(c.ok());
	EXPECT_EQ(word(local() + 8192), v0);
	EXPECT_EQ(word(dump(8192, 8).data()), v0 + 5);
	/* Four WRITE packets and one atomic came twice. Nothing was lost: no resend. */
	const emu::WireStats b = peer_stats();
	EXPECT_EQ(b.duplicates, 5u);
	EXPECT_EQ(b.naks_sent, 0u);
	EXPECT_EQ(my_stats().tx_duplicated, 5u);
	EXPECT_EQ(my_stats().retransmits, 0u);
	nicmr::mlx5::Completion extra;
	EXPECT_EQ(me_->qp->poll(&extra, 1), 0);
}

/* Forges RNR NAKs to the requester from a socket of this process at 127.0.0.1. */
class RnrForger {
public:
	RnrForger(const emu::WirePort &wp, uint32_t qpn) : qpn_(qpn), port_(wp.udp_port())
	{
		fd_ = ::socket(AF_INET, SOCK_DGRAM, 0);
		/* DF from an unconnected socket with IP_PMTUDISC_DO: Linux sends IPv4 ID 0 (as a
		 * wire port does), the ID the ICRC below is computed with; the port reads the real
		 * header (raw receive), so another ID would be a bad ICRC. */
		const int pmtu = IP_PMTUDISC_DO;
		if (fd_ >= 0)
			::setsockopt(fd_, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
		sockaddr_in me{};
		me.sin_family = AF_INET;
		me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		socklen_t sl = sizeof(me);
		ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr *>(&me), sizeof(me)) == 0 &&
		      ::getsockname(fd_, reinterpret_cast<sockaddr *>(&me), &sl) == 0;
		lo_.s_addr = htonl(INADDR_LOOPBACK);
		path_ = roce::ipv4_path(lo_, lo_, ntohs(me.sin_port), port_);
	}
	~RnrForger()
	{
		if (fd_ >= 0)
			::close(fd_);
	}
	bool ok() const { return ok_; }
	/* An RNR NAK for psn with timer code 1 (10 us). */
	bool send(uint32_t psn)
	{
		roce::Headers h;
		h.opcode = roce::opcode::acknowledge;
		h.dest_qp = qpn_;
		h.psn = psn;
		h.aeth = {roce::aeth::make_syndrome(roce::aeth::type::rnr_nak, 1), 0};
		uint8_t pkt[128];
		size_t len = 0;
		if (roce::build(path_, h, {}, pkt, &len) != roce::Error::ok)
			return false;
		sockaddr_in to{};
		to.sin_family = AF_INET;
		to.sin_addr = lo_;
		to.sin_port = htons(port_);
		return ::sendto(fd_, pkt, len, 0, reinterpret_cast<sockaddr *>(&to), sizeof(to)) ==
		       static_cast<ssize_t>(len);
	}

private:
	int fd_ = -1;
	bool ok_ = false;
	uint32_t qpn_;
	uint16_t port_;
	in_addr lo_{};
	roce::IpPath path_;
};

template <typename Pred> bool wait_for(Pred pred)
{
	const auto end = std::chrono::steady_clock::now() + 2s;
	while (!pred() && std::chrono::steady_clock::now() < end)
		std::this_thread::sleep_for(1ms);
	return pred();
}

/*
 * RNR NAKs forged from a socket of this process at the peer's address (the requester takes a
 * response from the peer's address, any UDP port): the requester waits the NAK's timer and
 * sends again, counting against rnr_retry; with none left, RNR_RETRY_EXC_ERR.
 */
TEST_F(Deaf, RnrNakWaitsThenRetriesUntilRnrRetryRunsOut)
{
	start({100, 0, 0, 0, 1}, {}, 7, 0, 1); /* no ACK timer: only the RNR path resends */
	const nicmr::mlx5::Sge s = sge(0, 8);
	ASSERT_EQ(
		me_->qp->post_write({&s, 1}, raddr(0), peer_.keys[k_rw], 1, nicmr::mlx5::kSignaled),
		0);
	RnrForger rnr(*me_->hw->device().data_path().wire_port(1), me_->qp->qpn());
	ASSERT_TRUE(rnr.ok());
	ASSERT_TRUE(rnr.send(0)); /* the WRITE's PSN */
	/* The first RNR NAK: one retry (rnr_retry 1), the WRITE sent again after 10 us. */
	ASSERT_TRUE(wait_for([&] { return my_stats().retransmits == 1; }));
	EXPECT_EQ(my_stats().rnr_naks_received, 1u);
	nicmr::mlx5::Completion c;
	EXPECT_EQ(me_->qp->poll(&c, 1), 0);
	ASSERT_TRUE(rnr.send(0));
	ASSERT_TRUE(me_->wait(&c));
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	EXPECT_EQ(my_stats().rnr_naks_received, 2u);
	EXPECT_EQ(my_stats().retransmits, 1u);
	EXPECT_EQ(my_state(), static_cast<uint32_t>(emu::QpState::err));
}

TEST_F(Deaf, RnrNakThatAcknowledgesStillSpendsItsRetry)
{
	/* An RNR NAK for the second WRITE acknowledges the first (progress: fresh counters),
	 * then takes the one RNR retry; the next RNR NAK, with no progress, ends it. */
	start({100, 0, 0, 0, 1}, {}, 7, 0, 1);
	const nicmr::mlx5::Sge s = sge(0, 8);
	ASSERT_EQ(
		me_->qp->post_write({&s, 1}, raddr(0), peer_.keys[k_rw], 1, nicmr::mlx5::kSignaled),
		0);
	ASSERT_EQ(
		me_->qp->post_write({&s, 1}, raddr(8), peer_.keys[k_rw], 2, nicmr::mlx5::kSignaled),
		0);
	RnrForger rnr(*me_->hw->device().data_path().wire_port(1), me_->qp->qpn());
	ASSERT_TRUE(rnr.ok());
	ASSERT_TRUE(rnr.send(1));
	nicmr::mlx5::Completion c;
	ASSERT_TRUE(me_->wait(&c));
	EXPECT_EQ(c.wr_id, 1u);
	EXPECT_TRUE(c.ok());
	ASSERT_TRUE(wait_for([&] { return my_stats().retransmits == 1; }));
	ASSERT_TRUE(rnr.send(1));
	ASSERT_TRUE(me_->wait(&c));
	EXPECT_EQ(c.wr_id, 2u);
	EXPECT_EQ(c.syndrome, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
	EXPECT_EQ(my_stats().retransmits, 1u);
}

} // namespace
