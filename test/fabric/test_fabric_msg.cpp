/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Conformance of nicmr's messages and tagged messages through the installed libfabric: two
 * endpoints of one process, eager and rendezvous sizes (data checked byte by byte), tags with
 * ignore bits, messages that come before their receive, truncation (FI_ETRUNC with olen),
 * FI_MULTI_RECV, remote CQ data, inject, sends and receives without descriptors, more
 * messages than the receive queue holds, receives by source (FI_DIRECTED_RECV) and the source
 * of receives (FI_SOURCE, fi_cq_readfrom), and the error codes of bad input.
 */
#include <rdma/fi_cm.h>
#include <rdma/fi_tagged.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <thread>
#include <vector>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

constexpr size_t kBounce = 8192; /* the eager limit (doc/libfabric.md, "Messages") */
constexpr size_t kInject = 972;	 /* tx_attr->inject_size */

/* An endpoint with a transmit and a receive CQ (FI_CQ_FORMAT_TAGGED) and send / receive
 * counters. */
struct MEp {
	Fid<fid_av> av;
	Fid<fid_cq> tx, rx;
	Fid<fid_cntr> sc, rc;
	Fid<fid_ep> ep;
	fi_addr_t peer = FI_ADDR_NOTAVAIL, self = FI_ADDR_NOTAVAIL;
	void close()
	{
		ep.reset();
		sc.reset();
		rc.reset();
		tx.reset();
		rx.reset();
		av.reset();
	}
};

class Msg : public FabricFixture {
protected:
	virtual int mode() const { return kAppMrMode; }
	virtual uint64_t caps() const { return 0; }
	void SetUp() override
	{
		open(mode(), FI_THREAD_UNSPEC, caps());
		if (HasFatalFailure())
			return;
		ASSERT_EQ(info_->caps & (FI_MSG | FI_TAGGED), FI_MSG | FI_TAGGED);
		open_ep(&a_);
		open_ep(&b_);
		join(&a_, &b_);
		join(&b_, &a_);
		ASSERT_NE(src_.get(), nullptr);
		ASSERT_NE(dst_.get(), nullptr);
		if (mode() & FI_MR_LOCAL) {
			ASSERT_EQ(fi_mr_reg(domain_.get(), src_.get(), src_.len(), FI_SEND, 0, 0, 0,
					    smr_.out(), nullptr),
				  0);
			ASSERT_EQ(fi_mr_reg(domain_.get(), dst_.get(), dst_.len(), FI_RECV, 0, 0, 0,
					    dmr_.out(), nullptr),
				  0);
		}
	}
	void TearDown() override
	{
		smr_.reset();
		dmr_.reset();
		a_.close();
		b_.close();
		FabricFixture::TearDown();
	}
	void open_ep(MEp *e, fid_domain *dom = nullptr, uint64_t cq_flags = 0,
		     fi_info *inf = nullptr)
	{
		if (!dom)
			dom = domain_.get();
		fi_av_attr av{};
		av.type = FI_AV_TABLE;
		ASSERT_EQ(fi_av_open(dom, &av, e->av.out(), nullptr), 0);
		fi_cq_attr cq{};
		cq.format = FI_CQ_FORMAT_TAGGED;
		ASSERT_EQ(fi_cq_open(dom, &cq, e->tx.out(), nullptr), 0);
		ASSERT_EQ(fi_cq_open(dom, &cq, e->rx.out(), nullptr), 0);
		fi_cntr_attr ca{};
		ca.events = FI_CNTR_EVENTS_COMP;
		ASSERT_EQ(fi_cntr_open(dom, &ca, e->sc.out(), nullptr), 0);
		ASSERT_EQ(fi_cntr_open(dom, &ca, e->rc.out(), nullptr), 0);
		ASSERT_EQ(fi_endpoint(dom, inf ? inf : info_.p(), e->ep.out(), nullptr), 0);
		ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->av->fid, 0), 0);
		ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->tx->fid, FI_TRANSMIT | cq_flags), 0);
		ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->rx->fid, FI_RECV | cq_flags), 0);
		ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->sc->fid, FI_SEND), 0);
		ASSERT_EQ(fi_ep_bind(e->ep.get(), &e->rc->fid, FI_RECV), 0);
		ASSERT_EQ(fi_enable(e->ep.get()), 0);
	}
	static void join(MEp *from, MEp *to)
	{
		char addr[64];
		size_t len = sizeof(addr);
		ASSERT_EQ(fi_getname(&to->ep->fid, addr, &len), 0);
		ASSERT_EQ(fi_av_insert(from->av.get(), addr, 1, &from->peer, 0, nullptr), 1);
		len = sizeof(addr);
		ASSERT_EQ(fi_getname(&from->ep->fid, addr, &len), 0);
		ASSERT_EQ(fi_av_insert(from->av.get(), addr, 1, &from->self, 0, nullptr), 1);
	}
	/* Moves both endpoints' completions along without taking any entry. */
	/* One progress turn of each endpoint of eps (their CQs read, no entry taken). */
	static void turn(std::initializer_list<MEp *> eps)
	{
		for (MEp *e : eps) {
			fi_cq_read(e->tx.get(), nullptr, 0);
			fi_cq_read(e->rx.get(), nullptr, 0);
		}
	}
	void progress() { turn({&a_, &b_}); }
	/* The next entry of cq (both endpoints progressed), or its error (-FI_EAVAIL): 5 s. */
	ssize_t next(fid_cq *cq, fi_cq_tagged_entry *e)
	{
		auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		ssize_t ret;
		do {
			progress();
			ret = fi_cq_read(cq, e, 1);
		} while (ret == -FI_EAGAIN && std::chrono::steady_clock::now() < end);
		return ret;
	}
	/* Nothing in cq after both endpoints progressed a while. */
	void expect_empty(fid_cq *cq)
	{
		for (int i = 0; i < 100; i++)
			progress();
		fi_cq_tagged_entry e{};
		EXPECT_EQ(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
	}
	void *sdesc() const { return smr_.get() ? fi_mr_desc(smr_.get()) : nullptr; }
	void *ddesc() const { return dmr_.get() ? fi_mr_desc(dmr_.get()) : nullptr; }
	void fill(size_t len, uint32_t seed)
	{
		for (size_t i = 0; i < len; i++)
			src_.get()[i] = static_cast<char>((i * 131 + seed) >> 3);
	}
	/* A message of len bytes from a to b (tagged or not), received at dst + off, every byte
	 * checked and the bytes around it untouched. */
	void round_trip(size_t len, bool tagged, size_t off = 0)
	{
		SCOPED_TRACE(testing::Message() << "len " << len << (tagged ? " tagged" : ""));
		fill(len, static_cast<uint32_t>(len));
		std::memset(dst_.get(), 0x5a, len + off + 1);
		int rctx = 0, sctx = 0;
		const uint64_t tag = 0x1234000000000000ull | len;
		if (tagged)
			ASSERT_EQ(fi_trecv(b_.ep.get(), dst_.get() + off, len, ddesc(),
					   FI_ADDR_UNSPEC, tag, 0, &rctx),
				  0);
		else
			ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get() + off, len, ddesc(),
					  FI_ADDR_UNSPEC, &rctx),
				  0);
		if (tagged)
			ASSERT_EQ(fi_tsend(a_.ep.get(), src_.get(), len, sdesc(), a_.peer, tag,
					   &sctx),
				  0);
		else
			ASSERT_EQ(fi_send(a_.ep.get(), src_.get(), len, sdesc(), a_.peer, &sctx),
				  0);
		fi_cq_tagged_entry e{};
		ASSERT_EQ(next(b_.rx.get(), &e), 1);
		EXPECT_EQ(e.op_context, &rctx);
		EXPECT_EQ(e.flags, FI_RECV | (tagged ? FI_TAGGED : FI_MSG));
		EXPECT_EQ(e.len, len);
		EXPECT_EQ(e.buf, dst_.get() + off);
		if (tagged) {
			EXPECT_EQ(e.tag, tag);
		}
		ASSERT_EQ(next(a_.tx.get(), &e), 1);
		EXPECT_EQ(e.op_context, &sctx);
		EXPECT_EQ(e.flags, FI_SEND | (tagged ? FI_TAGGED : FI_MSG));
		EXPECT_EQ(std::memcmp(src_.get(), dst_.get() + off, len), 0);
		EXPECT_EQ(static_cast<uint8_t>(dst_.get()[off + len]), 0x5a);
		if (off) {
			EXPECT_EQ(static_cast<uint8_t>(dst_.get()[off - 1]), 0x5a);
		}
	}
	MEp a_, b_;
	Buf src_{2 << 20}, dst_{2 << 20};
	Fid<fid_mr> smr_, dmr_;
};

TEST_F(Msg, EagerAndRendezvousSizesArriveExact)
{
	for (size_t len : {size_t{0}, size_t{1}, size_t{8}, kInject, kBounce, kBounce + 1,
			   size_t{64} << 10, size_t{1} << 20}) {
		round_trip(len, false);
		round_trip(len, true, 3);
	}
	EXPECT_EQ(fi_cntr_read(a_.sc.get()), 16u);
	EXPECT_EQ(fi_cntr_read(b_.rc.get()), 16u);
	EXPECT_EQ(fi_cntr_readerr(a_.sc.get()), 0u);
	expect_empty(a_.rx.get());
	expect_empty(b_.tx.get());
}

TEST_F(Msg, AnEndpointSendsToItself)
{
	fill(kBounce + 100, 7);
	int r1 = 0, r2 = 0;
	ASSERT_EQ(fi_recv(a_.ep.get(), dst_.get(), 100, ddesc(), FI_ADDR_UNSPEC, &r1), 0);
	ASSERT_EQ(
		fi_recv(a_.ep.get(), dst_.get() + 100, kBounce + 100, ddesc(), FI_ADDR_UNSPEC, &r2),
		0);
	ASSERT_EQ(fi_send(a_.ep.get(), src_.get(), 100, sdesc(), a_.self, nullptr), 0);
	ASSERT_EQ(fi_send(a_.ep.get(), src_.get(), kBounce + 100, sdesc(), a_.self, nullptr), 0);
	fi_cq_tagged_entry e{};
	ASSERT_EQ(next(a_.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &r1);
	ASSERT_EQ(next(a_.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &r2);
	EXPECT_EQ(e.len, kBounce + 100);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), 100), 0);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get() + 100, kBounce + 100), 0);
	ASSERT_EQ(next(a_.tx.get(), &e), 1);
	ASSERT_EQ(next(a_.tx.get(), &e), 1);
}

TEST_F(Msg, TagsMatchWithIgnoreBitsAndUntaggedStaysApart)
{
	int c1 = 0, c2 = 0, c3 = 0;
	ASSERT_EQ(fi_trecv(b_.ep.get(), dst_.get(), 8, ddesc(), FI_ADDR_UNSPEC, 0x1200, 0xff, &c1),
		  0);
	ASSERT_EQ(fi_trecv(b_.ep.get(), dst_.get() + 8, 8, ddesc(), FI_ADDR_UNSPEC, 0x5, 0, &c2),
		  0);
	ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get() + 16, 8, ddesc(), FI_ADDR_UNSPEC, &c3), 0);
	std::memcpy(src_.get(), "ABCDEFGHIJKLMNOPQRSTUVWX", 24);
	ASSERT_EQ(fi_tsend(a_.ep.get(), src_.get(), 8, sdesc(), a_.peer, 0x5, nullptr), 0);
	fi_cq_tagged_entry e{};
	ASSERT_EQ(next(b_.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &c2) << "tag 5 skips the receive of 0x12xx";
	EXPECT_EQ(e.tag, 0x5u);
	ASSERT_EQ(fi_send(a_.ep.get(), src_.get() + 8, 8, sdesc(), a_.peer, nullptr), 0);
	ASSERT_EQ(next(b_.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &c3) << "an untagged message takes the untagged receive";
	ASSERT_EQ(fi_tsend(a_.ep.get(), src_.get() + 16, 8, sdesc(), a_.peer, 0x13ab, nullptr), 0);
	expect_empty(b_.rx.get()); /* 0x13ab does not match 0x1200 / 0xff */
	ASSERT_EQ(fi_tsend(a_.ep.get(), src_.get() + 16, 8, sdesc(), a_.peer, 0x12ab, nullptr), 0);
	ASSERT_EQ(next(b_.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &c1);
	EXPECT_EQ(e.tag, 0x12abu) << "the entry carries the message's tag";
	EXPECT_EQ(std::memcmp(dst_.get(), "QRSTUVWXABCDEFGHIJKLMNOP", 24), 0);
	/* The unmatched 0x13ab waits as unexpected: a receive posted now takes it. */
	int c4 = 0;
	ASSERT_EQ(
		fi_trecv(b_.ep.get(), dst_.get() + 24, 8, ddesc(), FI_ADDR_UNSPEC, 0x13ab, 0, &c4),
		0);
	ASSERT_EQ(next(b_.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &c4);
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(next(a_.tx.get(), &e), 1);
}

TEST_F(Msg, UnexpectedEagerAndRendezvousMessagesMatchInOrder)
{
	const size_t big = size_t{256} << 10;
	fill(big + 300, 11);
	ASSERT_EQ(fi_send(a_.ep.get(), src_.get(), 100, sdesc(), a_.peer, nullptr), 0);
	ASSERT_EQ(fi_send(a_.ep.get(), src_.get() + 100, big, sdesc(), a_.peer, nullptr), 0);
	ASSERT_EQ(fi_send(a_.ep.get(), src_.get() + 100 + big, 200, sdesc(), a_.peer, nullptr), 0);
	ASSERT_EQ(fi_tsend(a_.ep.get(), src_.get(), big, sdesc(), a_.peer, 77, nullptr), 0);
	expect_empty(b_.rx.get());
	fi_cq_tagged_entry e{};
	/* The eager sends are done once delivered; the rendezvous ones wait for the receiver. */
	ASSERT_EQ(next(a_.tx.get(), &e), 1);
	ASSERT_EQ(next(a_.tx.get(), &e), 1);
	expect_empty(a_.tx.get());
	std::memset(dst_.get(), 0, big * 2 + 300);
	int c[4];
	ASSERT_EQ(fi_trecv(b_.ep.get(), dst_.get() + big + 300, big, ddesc(), FI_ADDR_UNSPEC, 77, 0,
			   &c[3]),
		  0);
	ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get(), 100, ddesc(), FI_ADDR_UNSPEC, &c[0]), 0);
	ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get() + 100, big, ddesc(), FI_ADDR_UNSPEC, &c[1]), 0);
	ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get() + 100 + big, 200, ddesc(), FI_ADDR_UNSPEC, &c[2]),
		  0);
	int seen = 0;
	for (int i = 0; i < 4; i++) {
		ASSERT_EQ(next(b_.rx.get(), &e), 1);
		for (int k = 0; k < 4; k++)
			if (e.op_context == &c[k])
				seen |= 1 << k;
	}
	EXPECT_EQ(seen, 15);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), big + 300), 0);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get() + big + 300, big), 0);
	ASSERT_EQ(next(a_.tx.get(), &e), 1);
	ASSERT_EQ(next(a_.tx.get(), &e), 1);
}

TEST_F(Msg, TruncationIsFiEtruncWithOlen)
{
	for (size_t len : {size_t{100}, size_t{20000}}) {
		SCOPED_TRACE(len);
		fill(len, 3);
		std::memset(dst_.get(), 0, len);
		int rc = 0;
		ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get(), len / 2, ddesc(), FI_ADDR_UNSPEC, &rc),
			  0);
		ASSERT_EQ(fi_send(a_.ep.get(), src_.get(), len, sdesc(), a_.peer, nullptr), 0);
		fi_cq_tagged_entry e{};
		ASSERT_EQ(next(b_.rx.get(), &e), -FI_EAVAIL);
		fi_cq_err_entry err{};
		ASSERT_EQ(fi_cq_readerr(b_.rx.get(), &err, 0), 1);
		EXPECT_EQ(err.err, FI_ETRUNC);
		EXPECT_EQ(err.op_context, &rc);
		EXPECT_EQ(err.len, len / 2);
		EXPECT_EQ(err.olen, len - len / 2);
		EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), len / 2), 0);
		EXPECT_EQ(dst_.get()[len / 2], 0);
		ASSERT_EQ(next(a_.tx.get(), &e), 1) << "the send itself succeeded";
	}
	/* A rendezvous into a receive of 0 bytes: nothing read, FI_ETRUNC, the sender done. */
	int rc = 0;
	ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get(), 0, ddesc(), FI_ADDR_UNSPEC, &rc), 0);
	ASSERT_EQ(fi_send(a_.ep.get(), src_.get(), 20000, sdesc(), a_.peer, nullptr), 0);
	fi_cq_tagged_entry e{};
	ASSERT_EQ(next(b_.rx.get(), &e), -FI_EAVAIL);
	fi_cq_err_entry err{};
	ASSERT_EQ(fi_cq_readerr(b_.rx.get(), &err, 0), 1);
	EXPECT_EQ(err.err, FI_ETRUNC);
	EXPECT_EQ(err.op_context, &rc);
	EXPECT_EQ(err.len, 0u);
	EXPECT_EQ(err.olen, 20000u);
	ASSERT_EQ(next(a_.tx.get(), &e), 1);
	EXPECT_EQ(fi_cntr_readerr(b_.rc.get()), 3u);
}

TEST_F(Msg, MultiRecvBufferTakesMessagesUntilUnderTheMinimum)
{
	const size_t min = 4096;
	ASSERT_EQ(fi_setopt(&b_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)),
		  0);
	size_t got = 0, glen = sizeof(got);
	ASSERT_EQ(fi_getopt(&b_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &glen), 0);
	EXPECT_EQ(got, min);
	iovec iov{dst_.get(), 32000};
	void *d = ddesc();
	int ctx = 0;
	fi_msg m{};
	m.msg_iov = &iov;
	m.desc = &d;
	m.iov_count = 1;
	m.addr = FI_ADDR_UNSPEC;
	m.context = &ctx;
	ASSERT_EQ(fi_recvmsg(b_.ep.get(), &m, FI_MULTI_RECV), 0);
	fill(8000 * 4, 9);
	/* One of them a rendezvous (10000 bytes) lands in the buffer too. */
	const size_t lens[] = {8000, 10000, 6000, 7000};
	size_t off = 0;
	for (int i = 0; i < 4; i++) {
		ASSERT_EQ(
			fi_send(a_.ep.get(), src_.get() + off, lens[i], sdesc(), a_.peer, nullptr),
			0);
		fi_cq_tagged_entry e{};
		ASSERT_EQ(next(b_.rx.get(), &e), 1) << i;
		EXPECT_EQ(e.op_context, &ctx);
		EXPECT_EQ(e.buf, dst_.get() + off);
		EXPECT_EQ(e.len, lens[i]);
		/* 32000 - 24000 >= 4096 before the last, 32000 - 31000 < 4096 after it: the
		 * buffer is released with it. */
		EXPECT_EQ(e.flags, FI_RECV | FI_MSG | (i == 3 ? FI_MULTI_RECV : 0)) << i;
		off += lens[i];
		ASSERT_EQ(next(a_.tx.get(), &e), 1);
	}
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), off), 0);
	/* Released: the next message waits for a new receive. */
	ASSERT_EQ(fi_send(a_.ep.get(), src_.get(), 10, sdesc(), a_.peer, nullptr), 0);
	expect_empty(b_.rx.get());
	ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get(), 10, ddesc(), FI_ADDR_UNSPEC, nullptr), 0);
	fi_cq_tagged_entry e{};
	ASSERT_EQ(next(b_.rx.get(), &e), 1);
	/* Bad multi-receive input. */
	iov.iov_len = min - 1;
	EXPECT_EQ(fi_recvmsg(b_.ep.get(), &m, FI_MULTI_RECV), -FI_EINVAL) << "under the minimum";
	fi_msg_tagged tm{};
	tm.msg_iov = &iov;
	tm.iov_count = 1;
	EXPECT_EQ(fi_trecvmsg(b_.ep.get(), &tm, FI_MULTI_RECV), -FI_EBADFLAGS);
	size_t zero = 0;
	EXPECT_EQ(
		fi_setopt(&b_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &zero, sizeof(zero)),
		-FI_EINVAL);
	EXPECT_EQ(fi_setopt(&b_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &zero, 4),
		  -FI_EINVAL);
	EXPECT_EQ(fi_setopt(&b_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &zero, sizeof(zero)),
		  -FI_ENOPROTOOPT);
	glen = 1;
	EXPECT_EQ(fi_getopt(&b_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &glen),
		  -FI_ETOOSMALL);
}

TEST_F(Msg, RemoteCqDataAndInject)
{
	fill(kBounce * 2, 1);
	int c1 = 0, c2 = 0, c3 = 0;
	ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get(), 64, ddesc(), FI_ADDR_UNSPEC, &c1), 0);
	ASSERT_EQ(fi_trecv(b_.ep.get(), dst_.get() + 64, kBounce * 2, ddesc(), FI_ADDR_UNSPEC, 9, 0,
			   &c2),
		  0);
	ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get() + 64 + 2 * kBounce, kInject, ddesc(),
			  FI_ADDR_UNSPEC, &c3),
		  0);
	ASSERT_EQ(fi_senddata(a_.ep.get(), src_.get(), 64, sdesc(), 0xdeadbeefcafeull, a_.peer,
			      nullptr),
		  0);
	ASSERT_EQ(fi_tsenddata(a_.ep.get(), src_.get(), kBounce * 2, sdesc(), 42, a_.peer, 9,
			       nullptr),
		  0);
	ASSERT_EQ(fi_inject(a_.ep.get(), src_.get(), kInject, a_.peer), 0);
	std::memset(src_.get(), 0, kInject); /* inject: the buffer is free at once */
	/* The rendezvous completes when its READ is in: after the eager ones, maybe. */
	fi_cq_tagged_entry e{};
	int seen = 0;
	for (int i = 0; i < 3; i++) {
		ASSERT_EQ(next(b_.rx.get(), &e), 1);
		if (e.op_context == &c1) {
			seen |= 1;
			EXPECT_EQ(e.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
			EXPECT_EQ(e.data, 0xdeadbeefcafeull);
		} else if (e.op_context == &c2) {
			seen |= 2;
			EXPECT_EQ(e.flags, FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA);
			EXPECT_EQ(e.data, 42u);
			EXPECT_EQ(e.tag, 9u);
			EXPECT_EQ(e.len, kBounce * 2);
		} else if (e.op_context == &c3) {
			seen |= 4;
			EXPECT_EQ(e.flags, FI_RECV | FI_MSG);
			EXPECT_EQ(e.len, kInject);
		}
	}
	EXPECT_EQ(seen, 7);
	fill(kInject, 1);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get() + 64 + 2 * kBounce, kInject), 0);
	/* Two completions for the two sends, none for the inject. */
	ASSERT_EQ(next(a_.tx.get(), &e), 1);
	ASSERT_EQ(next(a_.tx.get(), &e), 1);
	expect_empty(a_.tx.get());
	/* The tagged inject with data. */
	ASSERT_EQ(fi_trecv(b_.ep.get(), dst_.get(), 16, ddesc(), FI_ADDR_UNSPEC, 3, 0, &c1), 0);
	ASSERT_EQ(fi_tinjectdata(a_.ep.get(), src_.get(), 16, 5, a_.peer, 3), 0);
	ASSERT_EQ(next(b_.rx.get(), &e), 1);
	EXPECT_EQ(e.flags, FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA);
	EXPECT_EQ(e.data, 5u);
	expect_empty(a_.tx.get());
}

TEST_F(Msg, BadInputGetsItsCode)
{
	iovec two[2] = {{src_.get(), 8}, {src_.get() + 8, 8}};
	void *d[2] = {sdesc(), sdesc()};
	EXPECT_EQ(fi_sendv(a_.ep.get(), two, d, 2, a_.peer, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_recvv(b_.ep.get(), two, d, 2, FI_ADDR_UNSPEC, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_tsendv(a_.ep.get(), two, d, 2, a_.peer, 1, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_trecvv(b_.ep.get(), two, d, 2, FI_ADDR_UNSPEC, 1, 0, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_inject(a_.ep.get(), src_.get(), kInject + 1, a_.peer), -FI_EMSGSIZE);
	EXPECT_EQ(fi_tinject(a_.ep.get(), src_.get(), kInject + 1, a_.peer, 1), -FI_EMSGSIZE);
	EXPECT_EQ(fi_send(a_.ep.get(), nullptr, 8, nullptr, a_.peer, nullptr), -FI_EINVAL);
	EXPECT_EQ(fi_send(a_.ep.get(), src_.get(), 8, sdesc(), 99, nullptr), -FI_EINVAL)
		<< "no such AV entry";
	fi_msg m{};
	m.msg_iov = two;
	m.desc = d;
	m.iov_count = 1;
	m.addr = a_.peer;
	EXPECT_EQ(fi_sendmsg(a_.ep.get(), &m, FI_MORE << 1), -FI_EBADFLAGS);
	EXPECT_EQ(fi_recvmsg(b_.ep.get(), &m, FI_INJECT), -FI_EBADFLAGS);
	EXPECT_EQ(fi_sendmsg(a_.ep.get(), nullptr, 0), -FI_EINVAL);
	/* An endpoint not enabled. */
	Fid<fid_ep> idle;
	ASSERT_EQ(fi_endpoint(domain_.get(), info_.p(), idle.out(), nullptr), 0);
	EXPECT_EQ(fi_send(idle.get(), src_.get(), 8, sdesc(), 0, nullptr), -FI_EOPBADSTATE);
	EXPECT_EQ(fi_recv(idle.get(), dst_.get(), 8, ddesc(), 0, nullptr), -FI_EOPBADSTATE);
}

TEST_F(Msg, FullQueuesSayEagain)
{
	/* Rendezvous sends stay until their receiver reads them: tx_attr->size of them fill
	 * the transmit queue. */
	const size_t tx = info_->tx_attr->size;
	size_t n = 0;
	ssize_t ret = 0;
	for (; n < tx + 1; n++) {
		ret = fi_send(a_.ep.get(), src_.get(), kBounce + 1, sdesc(), a_.peer, nullptr);
		if (ret != 0)
			break;
	}
	EXPECT_EQ(ret, -FI_EAGAIN);
	EXPECT_EQ(n, tx);
	for (size_t i = 0; i < n; i++)
		ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get(), kBounce + 1, ddesc(), FI_ADDR_UNSPEC,
				  nullptr),
			  0);
	fi_cq_tagged_entry e{};
	for (size_t i = 0; i < n; i++) {
		ASSERT_EQ(next(b_.rx.get(), &e), 1) << i;
		ASSERT_EQ(next(a_.tx.get(), &e), 1) << i;
	}
	/* rx_attr->size receives of each kind, then -FI_EAGAIN. */
	const size_t rx = info_->rx_attr->size;
	for (size_t i = 0; i < rx; i++)
		ASSERT_EQ(fi_trecv(b_.ep.get(), dst_.get(), 8, ddesc(), FI_ADDR_UNSPEC, 1, 0,
				   nullptr),
			  0);
	EXPECT_EQ(fi_trecv(b_.ep.get(), dst_.get(), 8, ddesc(), FI_ADDR_UNSPEC, 1, 0, nullptr),
		  -FI_EAGAIN);
}

TEST_F(Msg, MoreMessagesThanTheReceiveQueueHoldsArriveInOrder)
{
	/* 2000 messages before most of their receives: the unexpected pool (256) and the SRQ's
	 * buffers (256) fill, the sender's SENDs wait on RNR (retried without end) until the
	 * receiver posts receives. */
	constexpr uint32_t kN = 2000;
	constexpr size_t kSz = 1000;
	uint32_t sent = 0, posted = 0, done = 0, sdone = 0;
	std::vector<char> msg(kSz);
	auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
	fi_cq_tagged_entry e{};
	while (done < kN && std::chrono::steady_clock::now() < end) {
		if (sent < kN) {
			std::memset(src_.get() + (sent % 64) * kSz, static_cast<int>(sent & 0xff),
				    kSz);
			std::memcpy(src_.get() + (sent % 64) * kSz, &sent, sizeof(sent));
			ssize_t r = fi_send(a_.ep.get(), src_.get() + (sent % 64) * kSz, kSz,
					    sdesc(), a_.peer, nullptr);
			if (r == 0)
				sent++;
			else
				ASSERT_EQ(r, -FI_EAGAIN);
		}
		/* Receives start once 560 messages were sent (more than the SRQ's and the
		 * pool's 512), then come one a turn. */
		if (posted < kN && sent >= 560) {
			if (posted == 0) {
				/* The receiver's 512 buffers are full: the rest wait on RNR
				 * (with the device on its thread the last may still be on
				 * its way). */
				while (fi_cq_read(a_.tx.get(), &e, 1) == 1)
					sdone++;
				EXPECT_LE(sdone, 512u);
			}
			char *at = dst_.get() + (posted % 1024) * kSz;
			if (fi_recv(b_.ep.get(), at, kSz, ddesc(), FI_ADDR_UNSPEC, at) == 0)
				posted++;
		}
		while (fi_cq_read(a_.tx.get(), &e, 1) == 1)
			sdone++;
		ssize_t r = fi_cq_read(b_.rx.get(), &e, 1);
		if (r == 1) {
			uint32_t id;
			std::memcpy(&id, e.buf, sizeof(id));
			ASSERT_EQ(id, done) << "messages of one sender match in order";
			ASSERT_EQ(e.len, kSz);
			ASSERT_EQ(static_cast<uint8_t>(static_cast<char *>(e.buf)[kSz - 1]),
				  done & 0xff);
			done++;
		} else {
			ASSERT_EQ(r, -FI_EAGAIN);
		}
	}
	EXPECT_EQ(done, kN);
	while (sdone < kN && std::chrono::steady_clock::now() < end)
		if (fi_cq_read(a_.tx.get(), &e, 1) == 1)
			sdone++;
	EXPECT_EQ(sdone, kN);
}

TEST_F(Msg, RendezvousReadsThroughTheDescriptorsKeyOrTheCaches)
{
	const size_t len = size_t{1} << 20;
	fill(len, 21);
	/* smr_ grants FI_SEND only: the sender's buffer is exposed through a registration of the
	 * domain's cache, which stays cached after the send. */
	nicmr_device_stats before = stats(domain_.get());
	round_trip(len, false);
	EXPECT_EQ(stats(domain_.get()).mrs, before.mrs + 1) << "the cache's registration";
	/* A descriptor that grants remote read is used as it is: no registration. */
	Fid<fid_mr> rr;
	ASSERT_EQ(fi_mr_reg(domain_.get(), src_.get(), src_.len(), FI_SEND | FI_REMOTE_READ, 0, 0,
			    0, rr.out(), nullptr),
		  0);
	smr_.reset();
	*smr_.out() = rr.get();
	*rr.out() = nullptr;
	before = stats(domain_.get());
	round_trip(len, true);
	EXPECT_EQ(stats(domain_.get()).mrs, before.mrs) << "the descriptor's key";
}

TEST_F(Msg, ARendezvousIntoABufferItsDescriptorDoesNotCoverFailsWithEacces)
{
	Buf other(kBounce * 4);
	fill(kBounce * 2, 4);
	int rc = 0;
	ASSERT_EQ(fi_recv(b_.ep.get(), other.get(), kBounce * 2, ddesc(), FI_ADDR_UNSPEC, &rc), 0);
	ASSERT_EQ(fi_send(a_.ep.get(), src_.get(), kBounce * 2, sdesc(), a_.peer, nullptr), 0);
	fi_cq_tagged_entry e{};
	ASSERT_EQ(next(b_.rx.get(), &e), -FI_EAVAIL);
	fi_cq_err_entry err{};
	ASSERT_EQ(fi_cq_readerr(b_.rx.get(), &err, 0), 1);
	EXPECT_EQ(err.err, FI_EACCES);
	EXPECT_EQ(err.op_context, &rc);
	EXPECT_EQ(err.len, 0u);
	EXPECT_EQ(static_cast<uint8_t>(other.get()[0]), 0x3c) << "nothing landed";
	EXPECT_EQ(fi_cntr_readerr(b_.rc.get()), 1u);
}

TEST_F(Msg, PeekClaimAndDiscard)
{
	fill(kBounce * 2, 8);
	fi_context peek_ctx{}, claim_ctx{};
	iovec iov{dst_.get(), kBounce * 2};
	void *d = ddesc();
	fi_msg_tagged tm{};
	tm.msg_iov = &iov;
	tm.desc = &d;
	tm.iov_count = 1;
	tm.addr = FI_ADDR_UNSPEC;
	tm.tag = 0x70;
	tm.ignore = 0xf;
	tm.context = &peek_ctx;
	/* A peek that finds a message, tried until the message has arrived (a miss is an
	 * FI_ENOMSG error entry). */
	auto peek = [&](uint64_t flags, fi_cq_tagged_entry *e) {
		auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		for (;;) {
			EXPECT_EQ(fi_trecvmsg(b_.ep.get(), &tm, flags), 0);
			ssize_t r = next(b_.rx.get(), e);
			if (r != -FI_EAVAIL || std::chrono::steady_clock::now() > end)
				return r;
			fi_cq_err_entry x{};
			EXPECT_EQ(fi_cq_readerr(b_.rx.get(), &x, 0), 1);
			EXPECT_EQ(x.err, FI_ENOMSG);
		}
	};
	/* Nothing there: FI_ENOMSG. */
	ASSERT_EQ(fi_trecvmsg(b_.ep.get(), &tm, FI_PEEK), 0);
	fi_cq_tagged_entry e{};
	ASSERT_EQ(next(b_.rx.get(), &e), -FI_EAVAIL);
	fi_cq_err_entry err{};
	ASSERT_EQ(fi_cq_readerr(b_.rx.get(), &err, 0), 1);
	EXPECT_EQ(err.err, FI_ENOMSG);
	EXPECT_EQ(err.op_context, &peek_ctx);
	/* An eager and a rendezvous message arrive; a peek sees the first, moves nothing. */
	ASSERT_EQ(fi_tsenddata(a_.ep.get(), src_.get(), 100, sdesc(), 6, a_.peer, 0x71, nullptr),
		  0);
	ASSERT_EQ(fi_tsend(a_.ep.get(), src_.get(), kBounce * 2, sdesc(), a_.peer, 0x72, nullptr),
		  0);
	expect_empty(b_.rx.get());
	std::memset(dst_.get(), 0, kBounce * 2);
	ASSERT_EQ(peek(FI_PEEK, &e), 1);
	EXPECT_EQ(e.op_context, &peek_ctx);
	EXPECT_EQ(e.flags, FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA);
	EXPECT_EQ(e.len, 100u);
	EXPECT_EQ(e.tag, 0x71u);
	EXPECT_EQ(e.data, 6u);
	EXPECT_EQ(dst_.get()[0], 0) << "a peek moves no data";
	/* Peek and claim it: a plain receive now passes it by and takes the rendezvous. */
	tm.context = &claim_ctx;
	ASSERT_EQ(peek(FI_PEEK | FI_CLAIM, &e), 1);
	EXPECT_EQ(e.tag, 0x71u);
	int plain = 0;
	ASSERT_EQ(fi_trecv(b_.ep.get(), dst_.get() + 200, kBounce * 2, ddesc(), FI_ADDR_UNSPEC,
			   0x70, 0xf, &plain),
		  0);
	ASSERT_EQ(next(b_.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &plain);
	EXPECT_EQ(e.tag, 0x72u);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get() + 200, kBounce * 2), 0);
	/* The claimed one comes with a FI_CLAIM receive of its context. */
	ASSERT_EQ(fi_trecvmsg(b_.ep.get(), &tm, FI_CLAIM), 0);
	ASSERT_EQ(next(b_.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &claim_ctx);
	EXPECT_EQ(e.len, 100u);
	EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), 100), 0);
	EXPECT_EQ(fi_trecvmsg(b_.ep.get(), &tm, FI_CLAIM), -FI_EINVAL) << "nothing claimed now";
	for (int i = 0; i < 2; i++)
		ASSERT_EQ(next(a_.tx.get(), &e), 1);
	/* FI_PEEK | FI_DISCARD drops a rendezvous message: its sender completes all the same. */
	ASSERT_EQ(fi_tsend(a_.ep.get(), src_.get(), kBounce * 2, sdesc(), a_.peer, 0x73, nullptr),
		  0);
	ASSERT_EQ(peek(FI_PEEK | FI_DISCARD, &e), 1);
	EXPECT_EQ(e.len, kBounce * 2);
	ASSERT_EQ(next(a_.tx.get(), &e), 1) << "the FIN came without a READ";
	/* FI_CLAIM | FI_DISCARD drops a claimed eager one. */
	ASSERT_EQ(fi_tsend(a_.ep.get(), src_.get(), 10, sdesc(), a_.peer, 0x74, nullptr), 0);
	ASSERT_EQ(peek(FI_PEEK | FI_CLAIM, &e), 1);
	EXPECT_EQ(e.tag, 0x74u);
	ASSERT_EQ(fi_trecvmsg(b_.ep.get(), &tm, FI_CLAIM | FI_DISCARD), 0);
	ASSERT_EQ(next(b_.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &claim_ctx);
	EXPECT_EQ(e.len, 0u);
	ASSERT_EQ(fi_trecvmsg(b_.ep.get(), &tm, FI_PEEK), 0);
	ASSERT_EQ(next(b_.rx.get(), &e), -FI_EAVAIL) << "both dropped";
	ASSERT_EQ(fi_cq_readerr(b_.rx.get(), &err, 0), 1);
	EXPECT_EQ(err.err, FI_ENOMSG);
	/* Bad combinations. */
	EXPECT_EQ(fi_trecvmsg(b_.ep.get(), &tm, FI_DISCARD), -FI_EBADFLAGS);
	fi_msg m{};
	m.msg_iov = &iov;
	m.iov_count = 1;
	EXPECT_EQ(fi_recvmsg(b_.ep.get(), &m, FI_PEEK), -FI_EBADFLAGS) << "untagged";
}

TEST_F(Msg, ASenderAndAReceiverThreadEachOnItsEndpoint)
{
	/* FI_THREAD_SAFE: one thread sends (eager and rendezvous) and reaps a's transmit CQ,
	 * another posts receives and reaps b's receive CQ; the pairs are made while the other
	 * thread polls. Every message is checked for its number and its bytes. */
	constexpr uint32_t kN = 400;
	constexpr size_t kSlot = 3 * kBounce;
	auto len_of = [](uint32_t i) { return i % 3 == 0 ? kBounce + 1 + i : 64 + i; };
	for (uint32_t i = 0; i < 64; i++)
		std::memset(src_.get() + i * kSlot, static_cast<int>(i), kSlot);
	std::atomic<bool> failed{false};
	std::thread sender([&] {
		/* A buffer is reused once its send completed (the context names it: rendezvous
		 * sends complete later than eager ones sent after them). */
		bool busy[64] = {};
		uint32_t sent = 0, done = 0;
		auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
		fi_cq_tagged_entry e{};
		while (done < kN && std::chrono::steady_clock::now() < end) {
			const uint32_t k = sent % 64;
			if (sent < kN && !busy[k]) {
				char *b = src_.get() + k * kSlot;
				std::memcpy(b, &sent, sizeof(sent));
				ssize_t r = fi_tsend(a_.ep.get(), b, len_of(sent), sdesc(), a_.peer,
						     sent, &busy[k]);
				if (r == 0) {
					busy[k] = true;
					sent++;
				} else if (r != -FI_EAGAIN) {
					failed = true;
				}
			}
			ssize_t r = fi_cq_read(a_.tx.get(), &e, 1);
			if (r == 1) {
				*static_cast<bool *>(e.op_context) = false;
				done++;
			} else if (r != -FI_EAGAIN) {
				failed = true;
			}
		}
		if (done != kN)
			failed = true;
	});
	bool busy[32] = {};
	uint32_t posted = 0, got = 0;
	auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
	fi_cq_tagged_entry e{};
	while (got < kN && std::chrono::steady_clock::now() < end && !failed) {
		const uint32_t k = posted % 32;
		if (posted < kN && !busy[k]) {
			if (fi_trecv(b_.ep.get(), dst_.get() + k * kSlot, kSlot, ddesc(),
				     FI_ADDR_UNSPEC, posted, 0, &busy[k]) == 0) {
				busy[k] = true;
				posted++;
			}
		}
		ssize_t r = fi_cq_read(b_.rx.get(), &e, 1);
		if (r != 1) {
			ASSERT_EQ(r, -FI_EAGAIN);
			continue;
		}
		uint32_t id;
		std::memcpy(&id, e.buf, sizeof(id));
		EXPECT_EQ(id, e.tag);
		EXPECT_EQ(e.len, len_of(static_cast<uint32_t>(e.tag)));
		EXPECT_EQ(static_cast<uint8_t>(static_cast<char *>(e.buf)[e.len - 1]), id % 64);
		*static_cast<bool *>(e.op_context) = false;
		got++;
	}
	sender.join();
	EXPECT_FALSE(failed.load());
	EXPECT_EQ(got, kN);
}

/* fi_cq(3), FI_SELECTIVE_COMPLETION: only operations with FI_COMPLETION (their own flags, or
 * the endpoint's op_flags for calls without flags) make a CQ entry on success; errors always
 * do, and counters count everything. */
TEST_F(Msg, SelectiveCompletionReportsOnlyWhatAsksForIt)
{
	MEp c, d;
	open_ep(&c, nullptr, FI_SELECTIVE_COMPLETION);
	open_ep(&d, nullptr, FI_SELECTIVE_COMPLETION);
	join(&c, &d);
	join(&d, &c);
	auto msg_of = [](void *buf, size_t len, void *desc, fi_addr_t addr, void *context,
			 iovec *iov, void **descs) {
		iov->iov_base = buf;
		iov->iov_len = len;
		*descs = desc;
		fi_msg m{};
		m.msg_iov = iov;
		m.desc = descs;
		m.iov_count = 1;
		m.addr = addr;
		m.context = context;
		return m;
	};
	auto quiet = [&](fid_cq *cq) {
		for (int i = 0; i < 200; i++) {
			fi_cq_read(c.tx.get(), nullptr, 0);
			fi_cq_read(d.rx.get(), nullptr, 0);
		}
		fi_cq_tagged_entry e{};
		return fi_cq_read(cq, &e, 1) == -FI_EAGAIN;
	};
	auto cntr_at = [](fid_cntr *k, uint64_t want) {
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		while (fi_cntr_read(k) < want && std::chrono::steady_clock::now() < end)
			;
		return fi_cntr_read(k);
	};
	iovec siov, riov;
	void *sd, *rd;
	/* 1. Neither side asks: nothing in either CQ, both counters count, the bytes land. */
	std::memcpy(src_.get(), "quiet", 6);
	fi_msg rm = msg_of(dst_.get(), 16, ddesc(), FI_ADDR_UNSPEC, nullptr, &riov, &rd);
	ASSERT_EQ(fi_recvmsg(d.ep.get(), &rm, 0), 0);
	fi_msg sm = msg_of(src_.get(), 6, sdesc(), c.peer, nullptr, &siov, &sd);
	ASSERT_EQ(fi_sendmsg(c.ep.get(), &sm, 0), 0);
	EXPECT_EQ(cntr_at(d.rc.get(), 1), 1u);
	EXPECT_EQ(cntr_at(c.sc.get(), 1), 1u);
	EXPECT_STREQ(dst_.get(), "quiet");
	EXPECT_TRUE(quiet(c.tx.get()));
	EXPECT_TRUE(quiet(d.rx.get()));
	/* 2. Both ask with FI_COMPLETION: one entry each. */
	int sctx = 0, rctx = 0;
	std::memcpy(src_.get(), "loud", 5);
	rm = msg_of(dst_.get(), 16, ddesc(), FI_ADDR_UNSPEC, &rctx, &riov, &rd);
	ASSERT_EQ(fi_recvmsg(d.ep.get(), &rm, FI_COMPLETION), 0);
	sm = msg_of(src_.get(), 5, sdesc(), c.peer, &sctx, &siov, &sd);
	ASSERT_EQ(fi_sendmsg(c.ep.get(), &sm, FI_COMPLETION), 0);
	fi_cq_tagged_entry e{};
	ASSERT_EQ(next(d.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &rctx);
	EXPECT_STREQ(dst_.get(), "loud");
	ASSERT_EQ(next(c.tx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &sctx);
	/* 3. Calls without flags follow op_flags, 0 in this info: quiet again. */
	ASSERT_EQ(fi_recv(d.ep.get(), dst_.get(), 16, ddesc(), FI_ADDR_UNSPEC, &rctx), 0);
	ASSERT_EQ(fi_send(c.ep.get(), src_.get(), 5, sdesc(), c.peer, &sctx), 0);
	EXPECT_EQ(cntr_at(d.rc.get(), 3), 3u);
	EXPECT_EQ(cntr_at(c.sc.get(), 3), 3u);
	EXPECT_TRUE(quiet(c.tx.get()));
	EXPECT_TRUE(quiet(d.rx.get()));
	/* 4. A quiet receive that truncates still reports its error. */
	rm = msg_of(dst_.get(), 2, ddesc(), FI_ADDR_UNSPEC, &rctx, &riov, &rd);
	ASSERT_EQ(fi_recvmsg(d.ep.get(), &rm, 0), 0);
	sm = msg_of(src_.get(), 5, sdesc(), c.peer, nullptr, &siov, &sd);
	ASSERT_EQ(fi_sendmsg(c.ep.get(), &sm, 0), 0);
	EXPECT_EQ(next(d.rx.get(), &e), -FI_EAVAIL);
	fi_cq_err_entry ee{};
	ASSERT_EQ(fi_cq_readerr(d.rx.get(), &ee, 0), 1);
	EXPECT_EQ(ee.err, FI_ETRUNC);
	EXPECT_EQ(ee.op_context, &rctx);
	/* 5. With op_flags FI_COMPLETION, calls without flags complete. */
	std::unique_ptr<fi_info, decltype(&fi_freeinfo)> loud(fi_dupinfo(info_.p()), fi_freeinfo);
	ASSERT_NE(loud, nullptr);
	loud->tx_attr->op_flags = FI_COMPLETION;
	loud->rx_attr->op_flags = FI_COMPLETION;
	MEp f, g;
	open_ep(&f, nullptr, FI_SELECTIVE_COMPLETION, loud.get());
	open_ep(&g, nullptr, FI_SELECTIVE_COMPLETION, loud.get());
	join(&f, &g);
	join(&g, &f);
	ASSERT_EQ(fi_recv(g.ep.get(), dst_.get(), 16, ddesc(), FI_ADDR_UNSPEC, &rctx), 0);
	ASSERT_EQ(fi_send(f.ep.get(), src_.get(), 5, sdesc(), f.peer, &sctx), 0);
	ASSERT_EQ(next(g.rx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &rctx);
	ASSERT_EQ(next(f.tx.get(), &e), 1);
	EXPECT_EQ(e.op_context, &sctx);
	/* 6. FI_SELECTIVE_COMPLETION alone names no direction. */
	MEp h;
	Fid<fid_cq> cq;
	fi_cq_attr ca{};
	ASSERT_EQ(fi_cq_open(domain_.get(), &ca, cq.out(), nullptr), 0);
	ASSERT_EQ(fi_endpoint(domain_.get(), info_.p(), h.ep.out(), nullptr), 0);
	EXPECT_EQ(fi_ep_bind(h.ep.get(), &cq->fid, FI_SELECTIVE_COMPLETION), -FI_EBADFLAGS);
	h.ep.reset();
	for (MEp *x : {&c, &d, &f, &g})
		x->close();
}

TEST_F(Msg, EndpointsCloseInEitherOrder)
{
	/* c (another domain) and b send to each other; c closes first: its responder on b's CQ
	 * goes to b, whose progress destroys it, and b's responder on c's CQ goes with c, so
	 * c's domain closes. b still talks to a after. */
	Fid<fid_domain> d2;
	ASSERT_EQ(fi_domain(fabric_.get(), info_.p(), d2.out(), nullptr), 0);
	{
		MEp c;
		open_ep(&c, d2.get());
		join(&c, &b_);
		join(&b_, &c);
		char buf[16] = "from c";
		ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get(), 16, ddesc(), FI_ADDR_UNSPEC, nullptr),
			  0);
		ASSERT_EQ(fi_inject(c.ep.get(), buf, 7, c.peer), 0);
		fi_cq_tagged_entry e{};
		ASSERT_EQ(next(b_.rx.get(), &e), 1);
		EXPECT_STREQ(dst_.get(), "from c");
		ASSERT_EQ(fi_recv(c.ep.get(), buf, 16, nullptr, FI_ADDR_UNSPEC, nullptr), 0);
		ASSERT_EQ(fi_inject(b_.ep.get(), "to c", 5, b_.peer), 0); /* b_.peer is c now */
		/* Until c's receive completes (10 s at most: the device thread may be slow to
		 * deliver on a loaded machine), b's progress turning too. */
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (fi_cq_read(c.rx.get(), &e, 1) != 1 && std::chrono::steady_clock::now() < end)
			fi_cq_read(b_.tx.get(), nullptr, 0);
		EXPECT_STREQ(buf, "to c");
		c.close();
	}
	EXPECT_EQ(fi_close(&d2->fid), 0) << "c's responders went with c";
	*d2.out() = nullptr;
	progress(); /* b destroys the responder c made to it */
	round_trip(100, true);
	round_trip(kBounce * 3, false);
}

/* Without FI_MR_LOCAL: sends and receives without descriptors, the provider registers the
 * buffers (the rendezvous's READ goes through the cache's keys). */
class MsgNoLocal : public Msg {
protected:
	int mode() const override { return kAppMrMode & ~FI_MR_LOCAL; }
};

TEST_F(MsgNoLocal, SendsWithoutDescriptors)
{
	ASSERT_EQ(info_->domain_attr->mr_mode & FI_MR_LOCAL, 0);
	for (size_t len : {size_t{0}, size_t{8}, kBounce, kBounce + 1, size_t{1} << 20}) {
		round_trip(len, false);
		round_trip(len, true, 5);
	}
}

/* Without FI_DIRECTED_RECV a receive's src_addr is ignored (fi_msg(3)), and without
 * FI_SOURCE fi_cq_readfrom says FI_ADDR_NOTAVAIL. */
TEST_F(Msg, WithoutDirectedRecvTheSourceIsIgnored)
{
	ASSERT_EQ(info_->caps & (FI_DIRECTED_RECV | FI_SOURCE), 0u);
	for (bool tagged : {false, true}) {
		for (size_t len : {size_t{64}, kBounce * 2}) {
			fill(len, 3);
			int rctx = 0;
			/* b.self is not the sender: the receive takes a's message all the same. */
			if (tagged)
				ASSERT_EQ(fi_trecv(b_.ep.get(), dst_.get(), len, ddesc(), b_.self,
						   9, 0, &rctx),
					  0);
			else
				ASSERT_EQ(fi_recv(b_.ep.get(), dst_.get(), len, ddesc(), b_.self,
						  &rctx),
					  0);
			if (tagged)
				ASSERT_EQ(fi_tsend(a_.ep.get(), src_.get(), len, sdesc(), a_.peer,
						   9, nullptr),
					  0);
			else
				ASSERT_EQ(fi_send(a_.ep.get(), src_.get(), len, sdesc(), a_.peer,
						  nullptr),
					  0);
			fi_cq_tagged_entry e{};
			fi_addr_t from = 0;
			auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
			ssize_t ret;
			do {
				progress();
				ret = fi_cq_readfrom(b_.rx.get(), &e, 1, &from);
			} while (ret == -FI_EAGAIN && std::chrono::steady_clock::now() < end);
			ASSERT_EQ(ret, 1);
			EXPECT_EQ(e.op_context, &rctx);
			EXPECT_EQ(from, FI_ADDR_NOTAVAIL) << "no FI_SOURCE";
			EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), len), 0);
			ASSERT_EQ(next(a_.tx.get(), &e), 1);
		}
	}
}

/* FI_DIRECTED_RECV and FI_SOURCE: b receives from a and from c (both in b's AV) and from d
 * (not in it). */
class MsgDirected : public Msg {
protected:
	uint64_t caps() const override { return FI_DIRECTED_RECV | FI_SOURCE; }
	void SetUp() override
	{
		Msg::SetUp();
		if (HasFatalFailure())
			return;
		ASSERT_EQ(info_->caps & (FI_DIRECTED_RECV | FI_SOURCE),
			  FI_DIRECTED_RECV | FI_SOURCE);
		open_ep(&c_);
		open_ep(&d_);
		join(&c_, &b_);
		join(&d_, &b_);
		c_at_b_ = insert(&b_, &c_);
	}
	void TearDown() override
	{
		c_.close();
		d_.close();
		Msg::TearDown();
	}
	/* e's name into to's AV: its fi_addr_t. */
	static fi_addr_t insert(MEp *to, MEp *e)
	{
		char addr[64];
		size_t len = sizeof(addr);
		fi_addr_t fa = FI_ADDR_NOTAVAIL;
		EXPECT_EQ(fi_getname(&e->ep->fid, addr, &len), 0);
		EXPECT_EQ(fi_av_insert(to->av.get(), addr, 1, &fa, 0, nullptr), 1);
		return fa;
	}
	void progress_all() { turn({&a_, &b_, &c_, &d_}); }
	/* The next entry of b's receive CQ with its source. */
	ssize_t next_from(fi_cq_tagged_entry *e, fi_addr_t *from)
	{
		auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		ssize_t ret;
		do {
			progress_all();
			ret = fi_cq_readfrom(b_.rx.get(), e, 1, from);
		} while (ret == -FI_EAGAIN && std::chrono::steady_clock::now() < end);
		return ret;
	}
	/* The next entry of a sender's transmit CQ, everyone progressing. */
	ssize_t next_sent(MEp *sender)
	{
		auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		fi_cq_tagged_entry e{};
		ssize_t ret;
		do {
			progress_all();
			ret = fi_cq_read(sender->tx.get(), &e, 1);
		} while (ret == -FI_EAGAIN && std::chrono::steady_clock::now() < end);
		return ret;
	}
	ssize_t send(MEp *from, bool tagged, const char *buf, size_t len, void *ctx)
	{
		if (tagged)
			return fi_tsend(from->ep.get(), buf, len, sdesc(), from->peer, 7, ctx);
		return fi_send(from->ep.get(), buf, len, sdesc(), from->peer, ctx);
	}
	ssize_t recv(bool tagged, char *buf, size_t len, fi_addr_t src, void *ctx)
	{
		if (tagged)
			return fi_trecv(b_.ep.get(), buf, len, ddesc(), src, 7, 0, ctx);
		return fi_recv(b_.ep.get(), buf, len, ddesc(), src, ctx);
	}
	void fill_at(size_t at, size_t len, uint32_t seed)
	{
		for (size_t i = 0; i < len; i++)
			src_.get()[at + i] = static_cast<char>((i * 131 + seed) >> 3);
	}
	/* The two receives of a's and c's messages (into dst_ at 0 and kHalf) completed with
	 * their sender, each with its sender's bytes (a's at src_ 0, c's at kHalf). */
	void expect_both(bool tagged, size_t len, int *ra, int *rc)
	{
		bool got_a = false, got_c = false;
		for (int i = 0; i < 2; i++) {
			fi_cq_tagged_entry e{};
			fi_addr_t from = 0;
			ASSERT_EQ(next_from(&e, &from), 1);
			EXPECT_EQ(e.flags, FI_RECV | (tagged ? FI_TAGGED : FI_MSG));
			EXPECT_EQ(e.len, len);
			if (e.op_context == ra) {
				got_a = true;
				EXPECT_EQ(from, b_.peer);
				EXPECT_EQ(e.buf, dst_.get());
			} else {
				ASSERT_EQ(e.op_context, rc);
				got_c = true;
				EXPECT_EQ(from, c_at_b_);
				EXPECT_EQ(e.buf, dst_.get() + kHalf);
			}
		}
		EXPECT_TRUE(got_a && got_c);
		EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), len), 0);
		EXPECT_EQ(std::memcmp(src_.get() + kHalf, dst_.get() + kHalf, len), 0);
	}
	static constexpr size_t kHalf = 1 << 20;
	MEp c_, d_;
	fi_addr_t c_at_b_ = FI_ADDR_NOTAVAIL;
};

TEST_F(MsgDirected, DirectedReceivesTakeOnlyTheirSendersMessages)
{
	for (bool tagged : {false, true}) {
		for (size_t len : {size_t{100}, kBounce * 3}) {
			for (bool expected : {true, false}) {
				SCOPED_TRACE(testing::Message()
					     << "len " << len << (tagged ? " tagged" : "")
					     << (expected ? " expected" : " unexpected"));
				fill_at(0, len, 1);
				fill_at(kHalf, len, 2);
				std::memset(dst_.get(), 0, len);
				std::memset(dst_.get() + kHalf, 0, len);
				int ra = 0, rc = 0, sa = 0, sc = 0;
				if (expected) {
					/* c's receive first: a's message passes over it. */
					ASSERT_EQ(
						recv(tagged, dst_.get() + kHalf, len, c_at_b_, &rc),
						0);
					ASSERT_EQ(recv(tagged, dst_.get(), len, b_.peer, &ra), 0);
				}
				ASSERT_EQ(send(&a_, tagged, src_.get(), len, &sa), 0);
				if (!expected) {
					/* a's message is in before c's is sent: the older one. */
					for (int i = 0; i < 300; i++)
						progress_all();
				}
				ASSERT_EQ(send(&c_, tagged, src_.get() + kHalf, len, &sc), 0);
				if (!expected) {
					for (int i = 0; i < 300; i++)
						progress_all();
					/* c's receive first: it takes c's message, not the older
					 * one of a. */
					ASSERT_EQ(
						recv(tagged, dst_.get() + kHalf, len, c_at_b_, &rc),
						0);
					ASSERT_EQ(recv(tagged, dst_.get(), len, b_.peer, &ra), 0);
				}
				expect_both(tagged, len, &ra, &rc);
				fi_cq_tagged_entry e{};
				ASSERT_EQ(next(a_.tx.get(), &e), 1);
				EXPECT_EQ(e.op_context, &sa);
				auto end =
					std::chrono::steady_clock::now() + std::chrono::seconds(5);
				ssize_t ret;
				do {
					progress_all();
					ret = fi_cq_read(c_.tx.get(), &e, 1);
				} while (ret == -FI_EAGAIN &&
					 std::chrono::steady_clock::now() < end);
				ASSERT_EQ(ret, 1);
				EXPECT_EQ(e.op_context, &sc);
			}
		}
	}
}

TEST_F(MsgDirected, AnyReceiveTakesAnySenderAndReadfromNamesIt)
{
	for (size_t len : {size_t{8}, kBounce * 2}) {
		fill_at(0, len, 4);
		int r1 = 0, r2 = 0, r3 = 0;
		ASSERT_EQ(recv(true, dst_.get(), len, FI_ADDR_UNSPEC, &r1), 0);
		ASSERT_EQ(send(&c_, true, src_.get(), len, nullptr), 0);
		fi_cq_tagged_entry e{};
		fi_addr_t from = 0;
		ASSERT_EQ(next_from(&e, &from), 1);
		EXPECT_EQ(e.op_context, &r1);
		EXPECT_EQ(from, c_at_b_);
		EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), len), 0);
		/* Unexpected first, then taken by a receive of any source. */
		ASSERT_EQ(send(&a_, false, src_.get(), len, nullptr), 0);
		for (int i = 0; i < 100; i++)
			progress_all();
		ASSERT_EQ(recv(false, dst_.get(), len, FI_ADDR_UNSPEC, &r2), 0);
		ASSERT_EQ(next_from(&e, &from), 1);
		EXPECT_EQ(e.op_context, &r2);
		EXPECT_EQ(from, b_.peer);
		/* An endpoint's message to itself names it. */
		ASSERT_EQ(recv(false, dst_.get(), len, b_.self, &r3), 0);
		ASSERT_EQ(fi_send(b_.ep.get(), src_.get(), len, sdesc(), b_.self, nullptr), 0);
		ASSERT_EQ(next_from(&e, &from), 1);
		EXPECT_EQ(e.op_context, &r3);
		EXPECT_EQ(from, b_.self);
		for (fid_cq *cq : {a_.tx.get(), b_.tx.get()})
			ASSERT_EQ(next(cq, &e), 1);
		ASSERT_EQ(next_sent(&c_), 1);
	}
}

/* A sender the receiver's AV does not hold: FI_ADDR_NOTAVAIL, taken only by a receive of any
 * source; once inserted, its entry (looked up again: the miss was not kept). */
TEST_F(MsgDirected, ASenderNotInTheAvIsNotAvailUntilInserted)
{
	for (size_t len : {size_t{16}, kBounce * 2}) {
		fill_at(0, len, 5);
		int ra = 0, rany = 0;
		/* A receive directed at a does not take d's message. */
		ASSERT_EQ(recv(true, dst_.get() + kHalf, len, b_.peer, &ra), 0);
		ASSERT_EQ(send(&d_, true, src_.get(), len, nullptr), 0);
		for (int i = 0; i < 200; i++)
			progress_all();
		fi_cq_tagged_entry e{};
		fi_addr_t from = 0;
		EXPECT_EQ(fi_cq_readfrom(b_.rx.get(), &e, 1, &from), -FI_EAGAIN);
		ASSERT_EQ(recv(true, dst_.get(), len, FI_ADDR_UNSPEC, &rany), 0);
		ASSERT_EQ(next_from(&e, &from), 1);
		EXPECT_EQ(e.op_context, &rany);
		EXPECT_EQ(from, FI_ADDR_NOTAVAIL);
		EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), len), 0);
		/* a's message still finds its receive. */
		ASSERT_EQ(send(&a_, true, src_.get(), len, nullptr), 0);
		ASSERT_EQ(next_from(&e, &from), 1);
		EXPECT_EQ(e.op_context, &ra);
		EXPECT_EQ(from, b_.peer);
		ASSERT_EQ(next(a_.tx.get(), &e), 1);
		ASSERT_EQ(next_sent(&d_), 1);
	}
	/* Inserted now: d's next message names its new entry, and a receive directed at it
	 * takes it. */
	const fi_addr_t d_at_b = insert(&b_, &d_);
	int rd = 0;
	ASSERT_EQ(recv(false, dst_.get(), 32, d_at_b, &rd), 0);
	ASSERT_EQ(send(&d_, false, src_.get(), 32, nullptr), 0);
	fi_cq_tagged_entry e{};
	fi_addr_t from = 0;
	ASSERT_EQ(next_from(&e, &from), 1);
	EXPECT_EQ(e.op_context, &rd);
	EXPECT_EQ(from, d_at_b);
	/* Removed again: FI_ADDR_NOTAVAIL, not the stale entry. */
	fi_addr_t gone = d_at_b;
	ASSERT_EQ(fi_av_remove(b_.av.get(), &gone, 1, 0), 0);
	ASSERT_EQ(recv(false, dst_.get(), 32, FI_ADDR_UNSPEC, &rd), 0);
	ASSERT_EQ(send(&d_, false, src_.get(), 32, nullptr), 0);
	ASSERT_EQ(next_from(&e, &from), 1);
	EXPECT_EQ(from, FI_ADDR_NOTAVAIL);
}

/* Messages of a sender that came before the receiver inserted it (an application inserts
 * its peers while they already send, as Open MPI's ranks do): once inserted, a receive
 * directed at it takes them, eager and rendezvous, and fi_cq_readfrom names its entry. */
TEST_F(MsgDirected, MessagesThatCameBeforeTheirSenderWasInsertedAreItsOnceInserted)
{
	for (size_t len : {size_t{16}, kBounce * 2}) {
		SCOPED_TRACE(len);
		fill_at(0, len, 9);
		ASSERT_EQ(send(&d_, true, src_.get(), len, nullptr), 0);
		for (int i = 0; i < 200; i++)
			progress_all();
		const fi_addr_t d_at_b = insert(&b_, &d_);
		int rd = 0;
		ASSERT_EQ(recv(true, dst_.get(), len, d_at_b, &rd), 0);
		fi_cq_tagged_entry e{};
		fi_addr_t from = 0;
		ASSERT_EQ(next_from(&e, &from), 1);
		EXPECT_EQ(e.op_context, &rd);
		EXPECT_EQ(from, d_at_b);
		EXPECT_EQ(std::memcmp(src_.get(), dst_.get(), len), 0);
		ASSERT_EQ(next_sent(&d_), 1);
		fi_addr_t gone = d_at_b;
		ASSERT_EQ(fi_av_remove(b_.av.get(), &gone, 1, 0), 0);
	}
}

/* FI_PEEK with a source looks only at that sender's messages. */
TEST_F(MsgDirected, PeekBySource)
{
	ASSERT_EQ(send(&c_, true, src_.get(), 40, nullptr), 0);
	fi_cq_tagged_entry e{};
	fi_addr_t from = 0;
	iovec iov{dst_.get(), 40};
	void *desc = ddesc();
	int ctx = 0;
	fi_msg_tagged m{&iov, &desc, 1, c_at_b_, 7, 0, &ctx, 0};
	/* Peeks by c until its message is in (the device may deliver it on its own thread). */
	auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	ssize_t ret;
	for (;;) {
		progress_all();
		ASSERT_EQ(fi_trecvmsg(b_.ep.get(), &m, FI_PEEK), 0);
		ASSERT_NE(ret = next_from(&e, &from), -FI_EAGAIN);
		if (ret == 1 || std::chrono::steady_clock::now() > end)
			break;
		fi_cq_err_entry err{};
		ASSERT_EQ(fi_cq_readerr(b_.rx.get(), &err, 0), 1);
		ASSERT_EQ(err.err, FI_ENOMSG);
	}
	ASSERT_EQ(ret, 1);
	EXPECT_EQ(e.len, 40u);
	EXPECT_EQ(from, c_at_b_);
	/* A peek by a does not see c's message. */
	m.addr = b_.peer;
	ASSERT_EQ(fi_trecvmsg(b_.ep.get(), &m, FI_PEEK), 0);
	EXPECT_EQ(next_from(&e, &from), -FI_EAVAIL) << "none of a";
	fi_cq_err_entry err{};
	ASSERT_EQ(fi_cq_readerr(b_.rx.get(), &err, 0), 1);
	EXPECT_EQ(err.err, FI_ENOMSG);
	ASSERT_EQ(recv(true, dst_.get(), 40, c_at_b_, &ctx), 0);
	ASSERT_EQ(next_from(&e, &from), 1);
	EXPECT_EQ(from, c_at_b_);
}

/* A device whose QP table is full (log_max_qp=3: QP numbers 2 to 7, five of them its UMR
 * lanes'): an endpoint beyond it is -FI_ENOMEM and takes nothing (a second try fails the same
 * way, not worse); the QP a closed endpoint gave back serves the next, and everything closes. */
TEST(FabricEndpointLimits, AFullQpTableIsEnomemAndLeavesNothing)
{
	const char *before = std::getenv("FI_NICMR_DEVICE");
	const std::string saved = before ? before : "";
	setenv("FI_NICMR_DEVICE", "emu:mkeys=1024,log_max_qp=3", 1);
	Hints h(kAppMrMode);
	h->caps = FI_MSG | FI_TAGGED;
	h->ep_attr->type = FI_EP_RDM;
	Info info;
	Fid<fid_fabric> fab;
	Fid<fid_domain> dom;
	const int got = info.get(h);
	if (got == 0 && fi_fabric(info->fabric_attr, fab.out(), nullptr) == 0) {
		EXPECT_EQ(fi_domain(fab.get(), info.p(), dom.out(), nullptr), 0);
	}
	if (before)
		setenv("FI_NICMR_DEVICE", saved.c_str(), 1);
	else
		unsetenv("FI_NICMR_DEVICE");
	ASSERT_EQ(got, 0);
	ASSERT_NE(dom.get(), nullptr);
	Fid<fid_ep> a, b;
	ASSERT_EQ(fi_endpoint(dom.get(), info.p(), a.out(), nullptr), 0);
	EXPECT_EQ(fi_endpoint(dom.get(), info.p(), b.out(), nullptr), -FI_ENOMEM);
	EXPECT_EQ(fi_endpoint(dom.get(), info.p(), b.out(), nullptr), -FI_ENOMEM);
	EXPECT_EQ(b.get(), nullptr);
	a.reset();
	ASSERT_EQ(fi_endpoint(dom.get(), info.p(), b.out(), nullptr), 0);
}

} // namespace
} // namespace nicmr::test
