/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr's out-of-band exchange (app/testmr/testmr_exchange.h): the 52-byte record of
 * ibv_rc_pingpong byte for byte, its strict parsing, GID words (testmr_cmd.h), and the TCP exchange
 * itself between a server thread and a client on 127.0.0.1 with the order of the steps, its
 * refusals and its timeouts; the optional MR record (43 bytes) and the exchange with it.
 */
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "testmr_cmd.h"
#include "testmr_exchange.h"

namespace nicmr::testmr {
namespace {

using namespace std::chrono_literals;

const std::array<uint8_t, 16> kLoopGid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};

/* A TCP port of this process's own for each test (parallel runs do not meet). */
uint16_t test_port(int n)
{
	return static_cast<uint16_t>(30000 + (getpid() % 4000) * 4 + n);
}

TEST(ExchangeRecord, IsRcPingpongsFiftyTwoBytes)
{
	PeerRecord r;
	r.lid = 0;
	r.qpn = 0x11;
	r.psn = 0xabcdef;
	r.gid = kLoopGid;
	const auto rec = format_record(r);
	const char want[] = "0000:000011:abcdef:00000000000000000000ffff7f000001";
	static_assert(sizeof(want) == kRecordSize);
	EXPECT_EQ(std::memcmp(rec.data(), want, kRecordSize), 0)
		<< std::string(rec.data(), kRecordSize - 1);
	PeerRecord back;
	ASSERT_TRUE(parse_record(std::string_view(rec.data(), rec.size()), &back));
	EXPECT_EQ(back.lid, 0u);
	EXPECT_EQ(back.qpn, 0x11u);
	EXPECT_EQ(back.psn, 0xabcdefu);
	EXPECT_EQ(back.gid, kLoopGid);
}

TEST(ExchangeRecord, WidthsAreMasked)
{
	PeerRecord r;
	r.lid = 0x12345;
	r.qpn = 0x1234567;
	r.psn = 0xfedcba98;
	const auto rec = format_record(r);
	EXPECT_EQ(std::string(rec.data(), 18), "2345:234567:dcba98");
	EXPECT_EQ(rec[kRecordSize - 1], '\0');
}

TEST(ExchangeRecord, AnythingElseIsRefused)
{
	const std::string good("0000:000011:abcdef:00000000000000000000FFFF7f000001\0", 52);
	PeerRecord r;
	ASSERT_TRUE(parse_record(good, &r)); /* upper-case digits too */
	EXPECT_EQ(r.gid, kLoopGid);
	EXPECT_FALSE(parse_record(good.substr(0, 51), &r));
	EXPECT_FALSE(parse_record(good + '\0', &r));
	for (size_t i : {size_t{4}, size_t{11}, size_t{18}}) {
		std::string b = good;
		b[i] = '-';
		EXPECT_FALSE(parse_record(b, &r)) << "separator " << i;
	}
	for (size_t i : {size_t{0}, size_t{6}, size_t{13}, size_t{19}, size_t{50}}) {
		std::string b = good;
		b[i] = 'g';
		EXPECT_FALSE(parse_record(b, &r)) << "digit " << i;
	}
	std::string b = good;
	b[51] = '1';
	EXPECT_FALSE(parse_record(b, &r)) << "no NUL";
}

TEST(ExchangeMrRecord, IsFortyThreeBytesOfAddrRkeyLen)
{
	const MrRecord r{0x7f6113800000ull, 0x17f2, 0x10000};
	const auto rec = format_mr_record(r);
	const char want[] = "00007f6113800000:000017f2:0000000000010000";
	static_assert(sizeof(want) == kMrRecordSize);
	EXPECT_EQ(std::memcmp(rec.data(), want, kMrRecordSize), 0)
		<< std::string(rec.data(), kMrRecordSize - 1);
	MrRecord back;
	ASSERT_TRUE(parse_mr_record(std::string_view(rec.data(), rec.size()), &back));
	EXPECT_EQ(back.addr, r.addr);
	EXPECT_EQ(back.rkey, r.rkey);
	EXPECT_EQ(back.len, r.len);
	/* Upper-case digits are taken; every other deviation is refused. */
	EXPECT_TRUE(parse_mr_record(
		std::string_view("00007F6113800000:000017F2:0000000000010000", 43), &back));
	for (const std::string_view bad :
	     {std::string_view("00007f6113800000:000017f2:0000000000010000", 42),
	      std::string_view("00007f6113800000-000017f2:0000000000010000", 43),
	      std::string_view("00007f6113800000:000017f2-0000000000010000", 43),
	      std::string_view("00007f611380000g:000017f2:0000000000010000", 43),
	      std::string_view("00007f6113800000:000017f2:000000000001000x", 43),
	      std::string_view("00007f6113800000:000017f2:00000000000100000", 43)})
		EXPECT_FALSE(parse_mr_record(bad, &back)) << bad;
}

TEST(ExchangeGid, ThreeForms)
{
	std::array<uint8_t, 16> g{};
	ASSERT_TRUE(parse_gid("127.0.0.1", &g));
	EXPECT_EQ(g, kLoopGid);
	g = {};
	ASSERT_TRUE(parse_gid("::ffff:127.0.0.1", &g));
	EXPECT_EQ(g, kLoopGid);
	g = {};
	ASSERT_TRUE(parse_gid("00000000000000000000ffff7f000001", &g));
	EXPECT_EQ(g, kLoopGid);
	ASSERT_TRUE(parse_gid("fe80::1", &g));
	EXPECT_EQ(g[0], 0xfe);
	EXPECT_EQ(g[15], 1);
	EXPECT_EQ(gid_text(kLoopGid), "::ffff:127.0.0.1");
	EXPECT_EQ(gid_hex(kLoopGid), "00000000000000000000ffff7f000001");
	for (const char *bad : {"", "1.2.3", "0000000000000000000000000000000g",
				"00000000000000000000ffff7f0000011", "fe80:::1", "host"})
		EXPECT_FALSE(parse_gid(bad, &g)) << bad;
}

TEST(ExchangeTcp, ServerConnectsBeforeAnsweringAndClientEndsWithDone)
{
	const uint16_t port = test_port(0);
	PeerRecord server_me, client_me;
	server_me.qpn = 0x100;
	server_me.psn = 0x200;
	server_me.gid = kLoopGid;
	client_me.qpn = 0x300;
	client_me.psn = 0x400;
	client_me.gid = kLoopGid;
	client_me.gid[15] = 2;
	std::atomic<bool> connected{false};
	PeerRecord server_got, client_got;
	int server_rc = 1;
	std::string server_err;
	std::thread server([&] {
		server_rc = exchange_listen(
			port, 5, server_me,
			[&](const PeerRecord &r) {
				/* The client's record arrived before the server answers. */
				EXPECT_EQ(r.qpn, 0x300u);
				connected = true;
				return 0;
			},
			&server_got, &server_err);
	});
	std::string err;
	/* The client may come first: it tries again while the port refuses. */
	const int rc = exchange_connect("127.0.0.1", port, 5, client_me, &client_got, &err);
	server.join();
	ASSERT_EQ(rc, 0) << err;
	ASSERT_EQ(server_rc, 0) << server_err;
	EXPECT_TRUE(connected);
	EXPECT_EQ(client_got.qpn, 0x100u);
	EXPECT_EQ(client_got.psn, 0x200u);
	EXPECT_EQ(client_got.gid, kLoopGid);
	EXPECT_EQ(server_got.qpn, 0x300u);
	EXPECT_EQ(server_got.psn, 0x400u);
	EXPECT_EQ(server_got.gid, client_me.gid);
}

/* With mr records on both sides: each gets the other's after its address record. */
TEST(ExchangeTcp, MrRecordsFollowTheAddressRecords)
{
	const uint16_t port = test_port(1);
	PeerRecord server_me, client_me, server_got, client_got;
	server_me.qpn = 0x100;
	server_me.gid = kLoopGid;
	client_me.qpn = 0x300;
	client_me.gid = kLoopGid;
	const MrRecord server_mr{0x1000, 0x1234, 0x2000}, client_mr{0xabc000, 0x5678, 0x40};
	MrRecord server_mr_got, client_mr_got;
	int server_rc = 1;
	std::string server_err, err;
	std::thread server([&] {
		server_rc = exchange_listen(
			port, 5, server_me,
			[&](const PeerRecord &) {
				/* The client's MR record came before the server connects. */
				EXPECT_EQ(server_mr_got.rkey, 0x5678u);
				return 0;
			},
			&server_got, &server_err, &server_mr, &server_mr_got);
	});
	const int rc = exchange_connect("127.0.0.1", port, 5, client_me, &client_got, &err,
					&client_mr, &client_mr_got);
	server.join();
	ASSERT_EQ(rc, 0) << err;
	ASSERT_EQ(server_rc, 0) << server_err;
	EXPECT_EQ(client_got.qpn, 0x100u);
	EXPECT_EQ(server_got.qpn, 0x300u);
	EXPECT_EQ(client_mr_got.addr, 0x1000u);
	EXPECT_EQ(client_mr_got.rkey, 0x1234u);
	EXPECT_EQ(client_mr_got.len, 0x2000u);
	EXPECT_EQ(server_mr_got.addr, 0xabc000u);
	EXPECT_EQ(server_mr_got.rkey, 0x5678u);
	EXPECT_EQ(server_mr_got.len, 0x40u);
}

TEST(ExchangeTcp, ServerWithoutPeerTimesOut)
{
	std::string err;
	PeerRecord got;
	const auto t0 = std::chrono::steady_clock::now();
	const int rc = exchange_listen(
		test_port(1), 1, PeerRecord{}, [](const PeerRecord &) { return 0; }, &got, &err);
	EXPECT_EQ(rc, -ETIMEDOUT);
	EXPECT_NE(err.find("waiting for a peer"), std::string::npos) << err;
	EXPECT_GE(std::chrono::steady_clock::now() - t0, 900ms);
}

TEST(ExchangeTcp, ClientWithoutServerTimesOut)
{
	std::string err;
	PeerRecord got;
	const int rc = exchange_connect("127.0.0.1", test_port(2), 1, PeerRecord{}, &got, &err);
	EXPECT_EQ(rc, -ETIMEDOUT);
	EXPECT_NE(err.find("nobody accepted"), std::string::npos) << err;
	EXPECT_EQ(
		exchange_connect("no-such-host.invalid", test_port(2), 1, PeerRecord{}, &got, &err),
		-ENOENT);
}

/* A raw peer for the server: connects, sends bytes, maybe reads, closes. */
int raw_client(uint16_t port, const std::string &send, bool read_answer)
{
	for (int tries = 0; tries < 50; tries++) {
		const int s = ::socket(AF_INET, SOCK_STREAM, 0);
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_port = htons(port);
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (::connect(s, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0) {
			if (!send.empty() && ::write(s, send.data(), send.size()) < 0) {
				::close(s);
				return -errno;
			}
			if (read_answer) {
				char buf[kRecordSize];
				size_t got = 0;
				while (got < sizeof(buf)) {
					const ssize_t k = ::read(s, buf + got, sizeof(buf) - got);
					if (k <= 0)
						break;
					got += static_cast<size_t>(k);
				}
			}
			::close(s);
			return 0;
		}
		::close(s);
		std::this_thread::sleep_for(20ms);
	}
	return -ECONNREFUSED;
}

TEST(ExchangeTcp, ServerRefusesAMalformedRecordAndAMissingDone)
{
	const uint16_t port = test_port(3);
	std::string err;
	PeerRecord got;
	bool called = false;
	std::thread peer([&] { raw_client(port, std::string(52, 'x'), false); });
	int rc = exchange_listen(
		port, 5, PeerRecord{},
		[&](const PeerRecord &) {
			called = true;
			return 0;
		},
		&got, &err);
	peer.join();
	EXPECT_EQ(rc, -EPROTO);
	EXPECT_FALSE(called);
	EXPECT_NE(err.find("not LID:QPN:PSN:GID"), std::string::npos) << err;

	/* A good record, the answer read, then closed without "done". */
	PeerRecord c;
	c.qpn = 5;
	c.gid = kLoopGid;
	const auto rec = format_record(c);
	std::thread peer2([&] { raw_client(port, std::string(rec.data(), rec.size()), true); });
	rc = exchange_listen(
		port, 5, PeerRecord{}, [](const PeerRecord &) { return 0; }, &got, &err);
	peer2.join();
	EXPECT_EQ(rc, -ECONNRESET);
	EXPECT_NE(err.find("done"), std::string::npos) << err;

	/* An MR record expected, garbage after the address record: -EPROTO, no connect. */
	MrRecord mr_got;
	const MrRecord mine_mr{};
	called = false;
	std::thread peer4([&] {
		raw_client(port, std::string(rec.data(), rec.size()) + std::string(43, 'y'), false);
	});
	rc = exchange_listen(
		port, 5, PeerRecord{},
		[&](const PeerRecord &) {
			called = true;
			return 0;
		},
		&got, &err, &mine_mr, &mr_got);
	peer4.join();
	EXPECT_EQ(rc, -EPROTO);
	EXPECT_FALSE(called);
	EXPECT_NE(err.find("not ADDR:RKEY:LEN"), std::string::npos) << err;

	/* An MR record expected and none sent (an ibv_rc_pingpong): the timeout. */
	/* (It waits for an answer that never comes, so the server sees no close.) */
	std::thread peer5([&] { raw_client(port, std::string(rec.data(), rec.size()), true); });
	rc = exchange_listen(
		port, 1, PeerRecord{}, [](const PeerRecord &) { return 0; }, &got, &err, &mine_mr,
		&mr_got);
	peer5.join();
	EXPECT_EQ(rc, -ETIMEDOUT);
	EXPECT_NE(err.find("reading the peer's MR record"), std::string::npos) << err;

	/* The local connect fails: its code, and the peer gets no record. */
	std::thread peer3([&] { raw_client(port, std::string(rec.data(), rec.size()), true); });
	rc = exchange_listen(
		port, 5, PeerRecord{}, [](const PeerRecord &) { return -EINVAL; }, &got, &err);
	peer3.join();
	EXPECT_EQ(rc, -EINVAL);
}

} // namespace
} // namespace nicmr::testmr
