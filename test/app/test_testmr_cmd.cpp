/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "testmr_cmd.h"

using nicmr::testmr::Command;
using nicmr::testmr::format_mr_access;
using nicmr::testmr::mr_local_write;
using nicmr::testmr::mr_odp;
using nicmr::testmr::mr_read;
using nicmr::testmr::parse_command;
using nicmr::testmr::parse_node;
using nicmr::testmr::parse_page_size;
using nicmr::testmr::parse_size;
using nicmr::testmr::Verb;

TEST(TestmrCmd, SizesTakeBinarySuffixesAndHex)
{
	uint64_t v = 0;
	EXPECT_TRUE(parse_size("64", &v));
	EXPECT_EQ(v, 64u);
	EXPECT_TRUE(parse_size("4k", &v));
	EXPECT_EQ(v, 4096u);
	EXPECT_TRUE(parse_size("2M", &v));
	EXPECT_EQ(v, 2u << 20);
	EXPECT_TRUE(parse_size("1g", &v));
	EXPECT_EQ(v, 1u << 30);
	EXPECT_TRUE(parse_size("0x40", &v));
	EXPECT_EQ(v, 0x40u);
}

TEST(TestmrCmd, SizesRejectGarbageAndOverflow)
{
	uint64_t v = 7;
	EXPECT_FALSE(parse_size("", &v));
	EXPECT_FALSE(parse_size("k", &v));
	EXPECT_FALSE(parse_size("12q", &v));
	EXPECT_FALSE(parse_size("0x", &v));
	EXPECT_FALSE(parse_size("18446744073709551616", &v));
	EXPECT_FALSE(parse_size("17179869184G", &v));
	EXPECT_EQ(v, 7u) << "a failed parse leaves the output alone";
}

TEST(TestmrCmd, PageSizesAreTheThreeTheMachineHas)
{
	uint64_t v = 0;
	EXPECT_TRUE(parse_page_size("4k", &v));
	EXPECT_EQ(v, 4096u);
	EXPECT_TRUE(parse_page_size("2M", &v));
	EXPECT_EQ(v, 2u << 20);
	EXPECT_TRUE(parse_page_size("1g", &v));
	EXPECT_EQ(v, 1u << 30);
	EXPECT_TRUE(parse_page_size("0x200000", &v));
	EXPECT_EQ(v, 2u << 20);
	v = 7;
	for (const char *bad : {"3m", "8k", "2g", "0", "", "2m ", "2mb", "-2m", "x"})
		EXPECT_FALSE(parse_page_size(bad, &v)) << bad;
	EXPECT_EQ(v, 7u) << "a failed parse leaves the output alone";
}

TEST(TestmrCmd, NodesAreSmallNumbers)
{
	int node = -1;
	EXPECT_TRUE(parse_node("0", &node));
	EXPECT_EQ(node, 0);
	EXPECT_TRUE(parse_node("0x10", &node));
	EXPECT_EQ(node, 16);
	EXPECT_TRUE(parse_node("1023", &node));
	EXPECT_EQ(node, nicmr::testmr::kMaxNode);
	node = 5;
	for (const char *bad : {"1024", "-1", "+1", " 1", "1 ", "1x", "0x", "", "node"})
		EXPECT_FALSE(parse_node(bad, &node)) << bad;
	EXPECT_EQ(node, 5);
}

TEST(TestmrCmd, PoolCreateWithEveryOption)
{
	Command c;
	std::string err;
	ASSERT_EQ(parse_command("pool create 64M page 1g node 0 fallback", &c, &err), 0) << err;
	EXPECT_EQ(c.verb, Verb::pool_create);
	EXPECT_EQ(c.size, 64u << 20);
	EXPECT_EQ(c.page_size, 1u << 30);
	EXPECT_EQ(c.node, 0);
	EXPECT_TRUE(c.fallback);
}

TEST(TestmrCmd, PoolCreateDefaults)
{
	Command c;
	ASSERT_EQ(parse_command("  pool   create 4m  ", &c, nullptr), 0);
	EXPECT_EQ(c.page_size, 0u);
	EXPECT_EQ(c.node, -1);
	EXPECT_FALSE(c.fallback);
}

TEST(TestmrCmd, BadCommandsGiveEinvalAndAMessage)
{
	const char *bad[] = {"pool create",
			     "pool create 0",
			     "pool create 4m page",
			     "pool create 4m page 3m",
			     "pool create 4m page 4096k0",
			     "pool create 4m node 1024",
			     "pool create 4m node -1",
			     "pool create 4m node x",
			     "pool create 4m colour red",
			     "pool destroy",
			     "show pool x",
			     "translate 1",
			     "frobnicate",
			     "help me",
			     "a b c d e f g h i j k l m"};
	for (const char *line : bad) {
		Command c;
		std::string err;
		EXPECT_EQ(parse_command(line, &c, &err), -EINVAL) << line;
		EXPECT_FALSE(err.empty()) << line;
	}
}

TEST(TestmrCmd, EmptyLinesAndCommentsAreNothing)
{
	Command c;
	c.verb = Verb::quit;
	ASSERT_EQ(parse_command("", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::none);
	ASSERT_EQ(parse_command("   # a comment", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::none);
}

TEST(TestmrCmd, ShowTranslateAndQuit)
{
	Command c;
	ASSERT_EQ(parse_command("show pools", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::show_pools);
	ASSERT_EQ(parse_command("show pool 3", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::show_pool);
	EXPECT_EQ(c.id, 3u);
	ASSERT_EQ(parse_command("translate 1 0x1000", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::translate);
	EXPECT_EQ(c.offset, 0x1000u);
	ASSERT_EQ(parse_command("quit", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::quit);
}

TEST(TestmrCmd, PdAndMkeyCommands)
{
	Command c;
	ASSERT_EQ(parse_command("pd alloc", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::pd_alloc);
	ASSERT_EQ(parse_command("pd free 3", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::pd_free);
	EXPECT_EQ(c.pd, 3u);
	ASSERT_EQ(parse_command("mkey create 0 0x1000 1m access rr,lr pd 2", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::mkey_create);
	EXPECT_EQ(c.id, 0u);
	EXPECT_EQ(c.offset, 0x1000u);
	EXPECT_EQ(c.len, 1u << 20);
	EXPECT_EQ(c.access, nicmr::testmr::access_rr | nicmr::testmr::access_lr);
	EXPECT_EQ(c.pd, 2u);
	ASSERT_EQ(parse_command("mkey query 7", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::mkey_query);
	EXPECT_EQ(c.index, 7u);
	ASSERT_EQ(parse_command("mkey destroy 7", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::mkey_destroy);
}

TEST(TestmrCmd, BadPdAndMkeyCommandsGiveEinval)
{
	const char *bad[] = {"pd free",
			     "pd free 4294967296",
			     "mkey create 0 0 0",
			     "mkey create 0 0",
			     "mkey create 0 0 4k access",
			     "mkey create 0 0 4k access rx",
			     "mkey create 0 0 4k access lr,",
			     "mkey create 0 0 4k pd",
			     "mkey create 0 0 4k zap",
			     "mkey query",
			     "mkey destroy x"};
	for (const char *line : bad) {
		Command c;
		std::string err;
		EXPECT_EQ(parse_command(line, &c, &err), -EINVAL) << line;
		EXPECT_FALSE(err.empty()) << line;
	}
}

TEST(TestmrCmd, RdmaTakesNoArguments)
{
	Command c;
	ASSERT_EQ(parse_command("rdma", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::rdma);
	EXPECT_EQ(parse_command("rdma now", &c, nullptr), -EINVAL);
}

/* The parse error of a line: what testmr prints after "error: ". */
static std::string parse_error(const char *line)
{
	Command c;
	std::string err;
	EXPECT_EQ(parse_command(line, &c, &err), -EINVAL) << line;
	return err;
}

TEST(TestmrCmd, UsageMessagesComeFromTheTable)
{
	EXPECT_EQ(parse_error("pool destroy"), "usage: pool destroy ID");
	EXPECT_EQ(parse_error("mkey query"), "usage: mkey query INDEX");
	EXPECT_EQ(parse_error("mr reg 0 0"), "usage: mr reg POOL OFFSET LEN ACCESS [rma_event]");
	EXPECT_EQ(parse_error("mr reg 0 0 0 read"),
		  "usage: mr reg POOL OFFSET LEN ACCESS [rma_event]");
	EXPECT_EQ(parse_error("show pools now"), "show pools: unknown word 'now'");
	EXPECT_EQ(parse_error("mr bind 0x1581"), "usage: mr bind KEY CNTR");
	EXPECT_EQ(parse_error("cntr free"), "usage: cntr free CNTR");
	EXPECT_EQ(parse_error("mr enable"), "usage: mr enable KEY");
	EXPECT_EQ(parse_error("quit now"), "usage: quit|exit");
	EXPECT_EQ(parse_error("pool create 4m colour red"), "pool create: unknown word 'colour'");
	EXPECT_EQ(parse_error("show mrs pool"), "pool: expected an engine pool number");
	EXPECT_EQ(parse_error("frobnicate"), "unknown command 'frobnicate' (try 'help')");
	EXPECT_EQ(parse_error("a b c d e f g h i j k l m"), "too many words (at most 12)");
}

TEST(TestmrCmd, HelpTakesASectionOfTheTable)
{
	Command c;
	ASSERT_EQ(parse_command("help", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::help);
	EXPECT_EQ(c.word, "");
	for (const auto &s : nicmr::testmr::section_table()) {
		ASSERT_EQ(parse_command(std::string("help ") + s.name, &c, nullptr), 0) << s.name;
		EXPECT_EQ(c.word, s.name);
		std::string text;
		ASSERT_EQ(nicmr::testmr::command_help(s.name, &text), 0);
		EXPECT_EQ(text.rfind(std::string(s.name) + ": ", 0), 0u) << text;
	}
	ASSERT_EQ(parse_command("help all", &c, nullptr), 0);
	EXPECT_EQ(parse_error("help me"),
		  "help: no section 'me' (sections: general, device, pool, pd, mkey, dp, mr, key, "
		  "window, qp, dpdk, bench, all)");
	EXPECT_EQ(parse_error("help mr key"), "usage: help [SECTION]");
	std::string text;
	EXPECT_EQ(nicmr::testmr::command_help("me", &text), -EINVAL);
	EXPECT_TRUE(text.empty());
}

TEST(TestmrCmd, EveryCommandOfTheTableIsInItsSectionsHelp)
{
	for (const auto &spec : nicmr::testmr::command_table()) {
		std::string text;
		ASSERT_EQ(nicmr::testmr::command_help(spec.section, &text), 0) << spec.section;
		EXPECT_NE(text.find(spec.pattern), std::string::npos) << spec.pattern;
		EXPECT_NE(nicmr::testmr::command_help_all().find(spec.pattern), std::string::npos);
	}
}

TEST(TestmrCmd, RegistrationCommands)
{
	using namespace nicmr::testmr;
	Command c;
	ASSERT_EQ(parse_command("mr pool 8m page 4k fallback", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::mr_pool);
	EXPECT_EQ(c.size, 8u << 20);
	EXPECT_EQ(c.page_size, 4096u);
	EXPECT_TRUE(c.fallback);
	ASSERT_EQ(parse_command("mr reg 1 4k 64k read,remote_write,local_write", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::mr_reg);
	EXPECT_EQ(c.id, 1u);
	EXPECT_EQ(c.offset, 4096u);
	EXPECT_EQ(c.len, 65536u);
	EXPECT_EQ(c.mr_access, mr_read | mr_remote_write | mr_local_write);
	ASSERT_EQ(parse_command("mr reg 0 0 4k none", &c, nullptr), 0);
	EXPECT_EQ(c.mr_access, 0u);
	ASSERT_EQ(parse_command("mr regv 0 0:4k,0x10000:8k remote_read", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::mr_regv);
	ASSERT_EQ(c.segments.size(), 2u);
	EXPECT_EQ(c.segments[1].offset, 0x10000u);
	EXPECT_EQ(c.segments[1].len, 8192u);
	ASSERT_EQ(parse_command("mr sub 0x2000 4k 4k read", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::mr_sub);
	EXPECT_EQ(c.key, 0x2000u);
	ASSERT_EQ(parse_command("mr dereg 8192", &c, nullptr), 0);
	EXPECT_EQ(c.key, 0x2000u);
	ASSERT_EQ(parse_command("show mr 0x2000 --json", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::show_mr);
	EXPECT_TRUE(c.json);
	ASSERT_EQ(parse_command("show mrs --json access remote_read pool 2", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::show_mrs);
	EXPECT_EQ(c.filter_pool, 2);
	EXPECT_EQ(c.filter_access, mr_remote_read);
	EXPECT_TRUE(c.json);
	ASSERT_EQ(parse_command("show mrs", &c, nullptr), 0);
	EXPECT_EQ(c.filter_pool, -1);
	EXPECT_FALSE(c.json);
	ASSERT_EQ(parse_command("key lookup 0x2000 remote_read offset 4k len 16", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::key_lookup);
	EXPECT_TRUE(c.has_offset && c.has_len);
	EXPECT_EQ(c.offset, 4096u);
	EXPECT_EQ(c.len, 16u);
	ASSERT_EQ(parse_command("key map 4e4d524b", &c, nullptr), 0);
	EXPECT_EQ(c.raw, (std::vector<uint8_t>{0x4e, 0x4d, 0x52, 0x4b}));
	ASSERT_EQ(parse_command("window bind 0x2000 0 4k remote_read", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::window_bind);
	ASSERT_EQ(parse_command("window unbind 3", &c, nullptr), 0);
	EXPECT_EQ(c.verb, Verb::window_unbind);
	EXPECT_EQ(c.id, 3u);
	ASSERT_EQ(parse_command("show device --json", &c, nullptr), 0);
	EXPECT_TRUE(c.json);
}

TEST(TestmrCmd, BadRegistrationCommandsSayWhatIsWrong)
{
	const std::string access = "ACCESS: expected none or a comma list of send, recv, read, "
				   "write, remote_read, remote_write, local_write, remote_atomic, "
				   "mw_bind, odp";
	EXPECT_EQ(parse_error("mr reg 0 0 4k rwx"), access);
	EXPECT_EQ(parse_error("mr reg 0 0 4k read,"), access);
	EXPECT_EQ(parse_error("mr reg 0 0 4k read extra"), "mr reg: unknown word 'extra'");
	EXPECT_EQ(parse_error("mr regv 0 0:0 read"),
		  "SEGMENTS: expected OFFSET:LEN[,OFFSET:LEN...], lengths above 0, at most 64");
	EXPECT_EQ(parse_error("mr regv 0 4k read"),
		  "SEGMENTS: expected OFFSET:LEN[,OFFSET:LEN...], lengths above 0, at most 64");
	std::string many = "mr regv 0 0:1";
	for (int i = 0; i < 64; i++)
		many += ",0:1";
	EXPECT_EQ(parse_error(many.c_str()),
		  "SEGMENTS: expected OFFSET:LEN[,OFFSET:LEN...], lengths above 0, at most 64");
	EXPECT_EQ(parse_error("mr dereg 0x100000000"),
		  "KEY: expected a 32-bit key, not '0x100000000'");
	EXPECT_EQ(parse_error("key map abc"),
		  "RAW: expected an even number of hex digits, at most 128");
	EXPECT_EQ(parse_error("key map zz"),
		  "RAW: expected an even number of hex digits, at most 128");
	EXPECT_EQ(parse_error(("key map " + std::string(130, '0')).c_str()),
		  "RAW: expected an even number of hex digits, at most 128");
	EXPECT_EQ(parse_error("key lookup 1 read len 0"), "len: expected a length above 0");
	EXPECT_EQ(parse_error("key lookup 1 read offset"),
		  "offset: expected a byte offset (0, 0x1000, 4k)");
	EXPECT_EQ(parse_error("show mrs access rwx"),
		  "access: expected none or a comma list of send, recv, read, write, "
		  "remote_read, remote_write, local_write, remote_atomic, mw_bind, odp");
	EXPECT_EQ(parse_error("show mr 1 --yaml"), "show mr: unknown word '--yaml'");
}

TEST(TestmrCmd, AccessNamesRoundTrip)
{
	using namespace nicmr::testmr;
	uint64_t bits = 0;
	for (size_t i = 0; i < mr_access_names().size(); i++) {
		ASSERT_TRUE(parse_mr_access(mr_access_names()[i], &bits));
		EXPECT_EQ(bits, uint64_t{1} << i);
		EXPECT_EQ(format_mr_access(bits), mr_access_names()[i]);
	}
	EXPECT_EQ(format_mr_access(0), "none");
	EXPECT_EQ(format_mr_access(mr_read | mr_mw_bind), "read,mw_bind");
}

TEST(TestmrCmd, RemoteConnectAndExchangeCommands)
{
	Command c;
	std::string err;
	ASSERT_EQ(parse_command("qp connect remote 3 ::ffff:127.0.0.1 0x12 0xabcdef mtu 4096", &c,
				&err),
		  0)
		<< err;
	EXPECT_EQ(c.verb, Verb::qp_connect_remote);
	EXPECT_EQ(c.id, 3u);
	const std::array<uint8_t, 16> loop = {0, 0, 0,	  0,	0,   0, 0, 0,
					      0, 0, 0xff, 0xff, 127, 0, 0, 1};
	EXPECT_EQ(c.gid, loop);
	EXPECT_EQ(c.remote_qpn, 0x12u);
	EXPECT_EQ(c.remote_psn, 0xabcdefu);
	EXPECT_EQ(c.mtu, 4096u);
	/* The other GID forms, and the default MTU. */
	ASSERT_EQ(parse_command("qp connect remote 0 127.0.0.1 1 2", &c, &err), 0) << err;
	EXPECT_EQ(c.gid, loop);
	EXPECT_EQ(c.mtu, 0u);
	ASSERT_EQ(
		parse_command("qp connect remote 0 00000000000000000000ffff7f000001 1 2", &c, &err),
		0)
		<< err;
	EXPECT_EQ(c.gid, loop);
	/* The loopback connect is still the two-keyword command. */
	ASSERT_EQ(parse_command("qp connect 0 1", &c, &err), 0) << err;
	EXPECT_EQ(c.verb, Verb::qp_connect);
	EXPECT_EQ(c.peer, 1u);

	ASSERT_EQ(parse_command("qp exchange listen 1 18515", &c, &err), 0) << err;
	EXPECT_EQ(c.verb, Verb::qp_exchange_listen);
	EXPECT_EQ(c.id, 1u);
	EXPECT_EQ(c.tcp_port, 18515u);
	EXPECT_EQ(c.timeout_s, nicmr::testmr::kExchangeTimeoutS);
	EXPECT_EQ(c.timeout_s, 10u);
	ASSERT_EQ(parse_command("qp exchange connect 2 peer.example 7 timeout 3 mtu 256", &c, &err),
		  0)
		<< err;
	EXPECT_EQ(c.verb, Verb::qp_exchange_connect);
	EXPECT_EQ(c.host, "peer.example");
	EXPECT_EQ(c.tcp_port, 7u);
	EXPECT_EQ(c.timeout_s, 3u);
	EXPECT_EQ(c.mtu, 256u);

	ASSERT_EQ(parse_command("qp exchange listen 1 18515 mr 0x1581", &c, &err), 0) << err;
	EXPECT_TRUE(c.has_exchange_mr);
	EXPECT_EQ(c.exchange_mr, 0x1581u);
	ASSERT_EQ(parse_command("qp exchange connect 1 h 7 mr 12 timeout 3", &c, &err), 0) << err;
	EXPECT_TRUE(c.has_exchange_mr);
	EXPECT_EQ(c.exchange_mr, 12u);
	ASSERT_EQ(parse_command("qp create 1 depth 16 recv 32", &c, &err), 0) << err;
	EXPECT_EQ(c.verb, Verb::qp_create);
	EXPECT_EQ(c.depth, 16u);
	EXPECT_EQ(c.recv_depth, 32u);
	ASSERT_EQ(parse_command("qp pingpong 2 0x1581 4093 20 client timeout 30", &c, &err), 0)
		<< err;
	EXPECT_EQ(c.verb, Verb::qp_pingpong);
	EXPECT_EQ(c.id, 2u);
	EXPECT_EQ(c.key, 0x1581u);
	EXPECT_EQ(c.size, 4093u);
	EXPECT_EQ(c.iters, 20u);
	EXPECT_TRUE(c.client);
	EXPECT_EQ(c.timeout_s, 30u);
	Command server;
	ASSERT_EQ(parse_command("qp pingpong 2 0x1581 4k 1000000", &server, &err), 0) << err;
	EXPECT_FALSE(server.client);
	EXPECT_EQ(server.iters, 1000000u);
	EXPECT_EQ(server.timeout_s, nicmr::testmr::kExchangeTimeoutS);

	ASSERT_EQ(parse_command("mr fill 0x1581 4k 300 0xff", &c, &err), 0) << err;
	EXPECT_EQ(c.verb, Verb::mr_fill);
	EXPECT_EQ(c.key, 0x1581u);
	EXPECT_EQ(c.offset, 4096u);
	EXPECT_EQ(c.len, 300u);
	EXPECT_EQ(c.byte, 0xff);
	ASSERT_EQ(parse_command("mr dump 0x1581 0 64", &c, &err), 0) << err;
	EXPECT_EQ(c.verb, Verb::mr_dump);
}

TEST(TestmrCmd, BadRemoteConnectAndExchangeCommandsSayWhatIsWrong)
{
	const std::pair<const char *, const char *> cases[] = {
		{"qp connect remote 0 1.2.3 1 2", "GID: expected 32 hex digits"},
		{"qp connect remote 0 0000000000000000000000000000000g 1 2", "GID: expected"},
		{"qp connect remote 0 ::1 0x1000000 2", "QPN: expected a 24-bit number"},
		{"qp connect remote 0 ::1 1 0x1000000", "PSN: expected a 24-bit number"},
		{"qp connect remote 0 ::1 1 2 mtu 1500",
		 "mtu: expected 256, 512, 1024, 2048 or 4096"},
		{"qp connect remote 0 ::1 1", "usage: qp connect remote QP GID QPN PSN [mtu N]"},
		{"qp exchange listen 0 0", "PORT: expected a TCP port, 1 to 65535"},
		{"qp exchange listen 0 65536", "PORT: expected a TCP port"},
		{"qp exchange listen 0 1 timeout 0", "timeout: expected 1 to 3600 seconds"},
		{"qp exchange listen 0 1 timeout 3601", "timeout: expected 1 to 3600 seconds"},
		{"qp exchange connect 0 host", "usage: qp exchange connect QP HOST PORT"},
		{"mr fill 0x1581 0 16 256", "BYTE: expected 0 to 255"},
		{"qp create 0 recv 1", "recv: expected a receive queue depth of at least 2"},
		{"qp exchange listen 0 1 mr x", "mr: expected a key, as 'mr reg' printed it"},
		{"qp pingpong 0 0x1581 64 0", "ITERS: expected 1 to 1000000 round trips"},
		{"qp pingpong 0 0x1581 64 1000001", "ITERS: expected 1 to 1000000 round trips"},
		{"qp pingpong 0 0x1581 0 1", "usage: qp pingpong QP KEY SIZE ITERS"},
		{"qp pingpong 0 0x1581 64", "usage: qp pingpong QP KEY SIZE ITERS"},
		{"qp pingpong 0 0x1581 64 1 server", "qp pingpong: unknown word 'server'"},
	};
	for (const auto &[line, want] : cases) {
		Command c;
		std::string err;
		EXPECT_EQ(parse_command(line, &c, &err), -EINVAL) << line;
		EXPECT_NE(err.find(want), std::string::npos) << line << ": " << err;
	}
}

TEST(TestmrCmd, OnDemandRegistrationAndAdvice)
{
	Command c;
	std::string err;
	ASSERT_EQ(parse_command("mr reg 0 0 64k read,local_write,odp", &c, &err), 0) << err;
	EXPECT_EQ(c.verb, Verb::mr_reg);
	EXPECT_EQ(c.mr_access, uint64_t(mr_read | mr_local_write | mr_odp));
	EXPECT_EQ(format_mr_access(c.mr_access), "read,local_write,odp");
	const std::pair<const char *, uint32_t> advices[] = {
		{"prefetch", 0}, {"prefetch_write", 1}, {"no_fault", 2}};
	for (const auto &[word, value] : advices) {
		Command a;
		ASSERT_EQ(parse_command(std::string("mr advise 0x1581 4k 8k ") + word, &a, &err), 0)
			<< err;
		EXPECT_EQ(a.verb, Verb::mr_advise);
		EXPECT_EQ(a.key, 0x1581u);
		EXPECT_EQ(a.offset, 4096u);
		EXPECT_EQ(a.len, 8192u);
		EXPECT_EQ(a.advice, value);
		EXPECT_FALSE(a.flush);
	}
	ASSERT_EQ(parse_command("mr advise 0x1581 0 4k prefetch_write flush", &c, &err), 0) << err;
	EXPECT_TRUE(c.flush);
	const std::pair<const char *, const char *> bad[] = {
		{"mr advise 0x1581 0 4k prefetch_read",
		 "ADVICE: expected prefetch, prefetch_write or no_fault"},
		{"mr advise 0x1581 0 4k", "usage: mr advise KEY OFFSET LEN ADVICE [flush]"},
		{"mr advise 0x1581 0 0 prefetch", "usage: mr advise KEY OFFSET LEN ADVICE [flush]"},
		{"mr advise 0x1581 0 4k prefetch sync", "mr advise: unknown word 'sync'"},
		{"mr reg 0 0 4k read,ondemand", "ACCESS: expected none or a comma list"},
	};
	for (const auto &[line, want] : bad) {
		Command b;
		EXPECT_EQ(parse_command(line, &b, &err), -EINVAL) << line;
		EXPECT_NE(err.find(want), std::string::npos) << line << ": " << err;
	}
}
