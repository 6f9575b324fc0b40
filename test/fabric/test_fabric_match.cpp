/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The provider's matching engine (fabric/fi_match.h) on its own, without a device: tag
 * matching with ignore bits (fi_tagged(3)), the order of posted receives and unexpected
 * messages, and the fixed room of its queues.
 */
#include <gtest/gtest.h>

#include "fi_match.h"

namespace nicmr::fabric::match {
namespace {

TEST(Match, TagMatchHonoursIgnoreBits)
{
	EXPECT_TRUE(tag_match(0x1234, 0x1234, 0));
	EXPECT_FALSE(tag_match(0x1235, 0x1234, 0));
	EXPECT_TRUE(tag_match(0x12ff, 0x1200, 0xff));
	EXPECT_FALSE(tag_match(0x13ff, 0x1200, 0xff));
	EXPECT_TRUE(tag_match(~0ull, 0, ~0ull));
}

TEST(Match, QueueIsFifoAndFixed)
{
	Queue<Posted> q;
	ASSERT_EQ(q.init(3), 0);
	Posted *a = q.alloc(), *b = q.alloc(), *c = q.alloc();
	ASSERT_TRUE(a && b && c);
	EXPECT_EQ(q.alloc(), nullptr); /* all three taken */
	a->tag = 1;
	b->tag = 2;
	c->tag = 3;
	q.push_back(a);
	q.push_back(b);
	q.push_back(c);
	EXPECT_EQ(q.size(), 3u);
	Posted *t = q.take([](const Posted &p) { return p.tag >= 2; });
	ASSERT_EQ(t, b);
	q.release(t);
	EXPECT_EQ(q.front(), a);
	q.unlink(a);
	EXPECT_EQ(q.front(), c);
	q.unlink(c);
	EXPECT_EQ(q.front(), nullptr);
	EXPECT_EQ(q.size(), 0u);
	q.release(a);
	q.release(c);
	/* Everything back: three again, then none. */
	EXPECT_NE(q.alloc(), nullptr);
	EXPECT_NE(q.alloc(), nullptr);
	EXPECT_NE(q.alloc(), nullptr);
	EXPECT_EQ(q.alloc(), nullptr);
}

TEST(Match, MessagesMatchTheOldestFittingReceive)
{
	Matcher m;
	ASSERT_EQ(m.init(8, 8), 0);
	auto post = [&](bool tagged, uint64_t tag, uint64_t ignore, void *ctx) {
		Posted *p = m.posted(tagged).alloc();
		p->tagged = tagged;
		p->tag = tag;
		p->ignore = ignore;
		p->context = ctx;
		m.posted(tagged).push_back(p);
		return p;
	};
	int c1, c2, c3, c4;
	post(true, 0x100, 0, &c1);
	post(true, 0x200, 0xff, &c2);
	post(true, 0x200, 0xff, &c3);
	post(false, 0, 0, &c4);
	EXPECT_EQ(m.match_message(true, 0x300), nullptr);
	Posted *p = m.match_message(true, 0x2ab);
	ASSERT_NE(p, nullptr);
	EXPECT_EQ(p->context, &c2); /* the older of the two that fit */
	m.posted(true).unlink(p);
	m.posted(true).release(p);
	p = m.match_message(true, 0x2cd);
	ASSERT_NE(p, nullptr);
	EXPECT_EQ(p->context, &c3);
	/* An untagged message never takes a tagged receive, and the other way round. */
	p = m.match_message(false, 0x100);
	ASSERT_NE(p, nullptr);
	EXPECT_EQ(p->context, &c4);
	m.posted(false).unlink(p);
	m.posted(false).release(p);
	EXPECT_EQ(m.match_message(false, 0), nullptr);
	p = m.match_message(true, 0x100);
	ASSERT_NE(p, nullptr);
	EXPECT_EQ(p->context, &c1);
	/* A released multi-receive buffer takes nothing more. */
	p->released = true;
	EXPECT_EQ(m.match_message(true, 0x100), nullptr);
}

TEST(Match, ReceivesTakeTheOldestUnexpectedOfTheirKind)
{
	Matcher m;
	ASSERT_EQ(m.init(4, 3), 0);
	auto arrive = [&](bool tagged, uint64_t tag, uint64_t data) {
		Unexpected *u = m.unexpected().alloc();
		if (!u)
			return false;
		u->tagged = tagged;
		u->tag = tag;
		u->data = data;
		m.unexpected().push_back(u);
		return true;
	};
	ASSERT_TRUE(arrive(true, 7, 1));
	ASSERT_TRUE(arrive(false, 0, 2));
	ASSERT_TRUE(arrive(true, 7, 3));
	EXPECT_FALSE(arrive(true, 9, 4)); /* room for three */
	EXPECT_EQ(m.match_receive(true, 8, 0), nullptr);
	Unexpected *u = m.match_receive(true, 6, 1); /* 7 | 1 == 6 | 1 */
	ASSERT_NE(u, nullptr);
	EXPECT_EQ(u->data, 1u);
	m.unexpected().release(u);
	u = m.match_receive(false, 0, 0);
	ASSERT_NE(u, nullptr);
	EXPECT_EQ(u->data, 2u);
	m.unexpected().release(u);
	u = m.match_receive(true, 7, 0);
	ASSERT_NE(u, nullptr);
	EXPECT_EQ(u->data, 3u);
	m.unexpected().release(u);
	EXPECT_EQ(m.match_receive(true, 7, ~0ull), nullptr);
	EXPECT_EQ(m.unexpected().size(), 0u);
}

/* FI_DIRECTED_RECV: a receive with a source takes only that source's messages, kAnySrc takes
 * any, and a message without a known source (kAnySrc) only a receive of any source. */
TEST(Match, DirectedReceivesTakeOnlyTheirSource)
{
	Matcher m;
	ASSERT_EQ(m.init(8, 8), 0);
	auto post = [&](bool tagged, uint64_t src, void *ctx) {
		Posted *p = m.posted(tagged).alloc();
		p->tagged = tagged;
		p->tag = 5;
		p->src = src;
		p->context = ctx;
		m.posted(tagged).push_back(p);
		return p;
	};
	int from1, from2, any;
	for (bool tagged : {false, true}) {
		post(tagged, 1, &from1);
		post(tagged, 2, &from2);
		/* Source 2's message passes over the older receive of source 1. */
		Posted *p = m.match_message(tagged, 5, 2);
		ASSERT_NE(p, nullptr);
		EXPECT_EQ(p->context, &from2);
		m.posted(tagged).unlink(p);
		m.posted(tagged).release(p);
		EXPECT_EQ(m.match_message(tagged, 5, 3), nullptr) << "no receive of source 3";
		EXPECT_EQ(m.match_message(tagged, 5, kAnySrc), nullptr) << "an unknown source";
		post(tagged, kAnySrc, &any);
		p = m.match_message(tagged, 5, 3);
		ASSERT_NE(p, nullptr);
		EXPECT_EQ(p->context, &any);
		m.posted(tagged).unlink(p);
		m.posted(tagged).release(p);
		p = m.match_message(tagged, 5, kAnySrc);
		EXPECT_EQ(p, nullptr) << "source 1's receive takes no unknown source";
		p = m.match_message(tagged, 5, 1);
		ASSERT_NE(p, nullptr);
		EXPECT_EQ(p->context, &from1);
		m.posted(tagged).unlink(p);
		m.posted(tagged).release(p);
	}
	auto arrive = [&](uint64_t src, uint64_t data) {
		Unexpected *u = m.unexpected().alloc();
		u->tagged = true;
		u->tag = 5;
		u->src = src;
		u->data = data;
		m.unexpected().push_back(u);
	};
	arrive(1, 10);
	arrive(kAnySrc, 11);
	arrive(2, 12);
	EXPECT_EQ(m.match_receive(true, 5, 0, 3), nullptr);
	Unexpected *u = m.match_receive(true, 5, 0, 2);
	ASSERT_NE(u, nullptr);
	EXPECT_EQ(u->data, 12u) << "the older messages of others stay";
	m.unexpected().release(u);
	u = m.match_receive(true, 5, 0, kAnySrc);
	ASSERT_NE(u, nullptr);
	EXPECT_EQ(u->data, 10u);
	m.unexpected().release(u);
	EXPECT_EQ(m.match_receive(true, 5, 0, 1), nullptr);
	u = m.match_receive(true, 5, 0, kAnySrc);
	ASSERT_NE(u, nullptr);
	EXPECT_EQ(u->data, 11u);
	m.unexpected().release(u);
}

} // namespace
} // namespace nicmr::fabric::match
