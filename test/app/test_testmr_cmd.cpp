/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "testmr_cmd.h"

using nicmr::testmr::Command;
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
