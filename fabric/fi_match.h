/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The matching engine of the provider's messages (fi_msg.cpp): posted receives, untagged and
 * tagged, and the messages that arrived before a receive matched them (unexpected), each in
 * arrival order. Pure: no device, no libfabric object; test/fabric/test_fabric_match.cpp tests
 * it alone.
 *
 * Rules (fi_tagged(3), fi_msg(3)):
 *  - a tagged message matches the oldest tagged receive with (tag | ignore) == (recv_tag |
 *    ignore); an untagged one the oldest untagged receive;
 *  - a receive posted matches the oldest unexpected message of its kind that fits it;
 *  - messages of one peer arrive in order (one RC QP), so sends to one peer match in order
 *    (FI_ORDER_SAS);
 *  - a receive with a source (FI_DIRECTED_RECV: src != kAnySrc) matches only messages of that
 *    source; kAnySrc (FI_ADDR_UNSPEC) matches any. A message's source is the sender's entry in
 *    the receiver's AV, kAnySrc when it has none (FI_ADDR_NOTAVAIL, which is the same value):
 *    only a receive of any source takes it.
 *
 * Storage is fixed at init (Queue::init): matching, posting and taking allocate nothing, take
 * no lock and make no system call (the endpoint's lock guards a Matcher). A full queue says so
 * (Queue::alloc gives nullptr) and the caller answers -FI_EAGAIN or holds the message.
 */
#ifndef NICMR_FI_MATCH_H
#define NICMR_FI_MATCH_H

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace nicmr::fabric::match {

/* fi_tagged(3): "a tagged message matches a receive when (tag | ignore) == (recv_tag |
 * ignore)". */
inline bool tag_match(uint64_t tag, uint64_t recv_tag, uint64_t ignore) noexcept
{
	return (tag | ignore) == (recv_tag | ignore);
}

/* Any source: fi_msg(3)'s FI_ADDR_UNSPEC (== FI_ADDR_NOTAVAIL, a source not in the AV). */
inline constexpr uint64_t kAnySrc = ~uint64_t{0};
/* fi_msg(3) FI_DIRECTED_RECV: "src_addr ... only match messages from the specified source";
 * FI_ADDR_UNSPEC takes any. */
inline bool src_match(uint64_t src, uint64_t recv_src) noexcept
{
	return recv_src == kAnySrc || src == recv_src;
}

/*
 * A FIFO of at most `cap` entries of T, in a slab made once (init): alloc takes a free entry,
 * push_back queues it, take/find walk from the oldest. Indices link the entries, so nothing is
 * allocated after init.
 */
template <typename T> class Queue {
public:
	/* Makes room for cap entries: 0, or -1 when memory is short. Slow path. */
	int init(uint32_t cap)
	{
		try {
			nodes_.resize(cap);
		} catch (const std::bad_alloc &) {
			return -1;
		}
		for (uint32_t i = 0; i < cap; i++)
			nodes_[i].next = i + 1 < cap ? i + 1 : kNone;
		free_ = cap ? 0 : kNone;
		head_ = tail_ = kNone;
		size_ = 0;
		return 0;
	}
	/* A free entry (value-initialised), or nullptr when all cap are taken. */
	T *alloc() noexcept
	{
		if (free_ == kNone)
			return nullptr;
		Node &n = nodes_[free_];
		free_ = n.next;
		n.v = T{};
		n.next = n.prev = kNone;
		return &n.v;
	}
	/* Gives back an entry of alloc that is not queued. */
	void release(T *v) noexcept
	{
		const uint32_t i = index_of(v);
		nodes_[i].next = free_;
		free_ = i;
	}
	/* Queues an entry of alloc as the newest. */
	void push_back(T *v) noexcept
	{
		const uint32_t i = index_of(v);
		nodes_[i].prev = tail_;
		nodes_[i].next = kNone;
		if (tail_ != kNone)
			nodes_[tail_].next = i;
		else
			head_ = i;
		tail_ = i;
		size_++;
	}
	/* The oldest queued entry pred accepts, left queued; nullptr when none. */
	template <typename P> T *find(P pred) noexcept
	{
		for (uint32_t i = head_; i != kNone; i = nodes_[i].next)
			if (pred(nodes_[i].v))
				return &nodes_[i].v;
		return nullptr;
	}
	/* Unlinks a queued entry (it stays allocated: release it, or push it again). */
	void unlink(T *v) noexcept
	{
		const uint32_t i = index_of(v);
		Node &n = nodes_[i];
		if (n.prev != kNone)
			nodes_[n.prev].next = n.next;
		else
			head_ = n.next;
		if (n.next != kNone)
			nodes_[n.next].prev = n.prev;
		else
			tail_ = n.prev;
		n.next = n.prev = kNone;
		size_--;
	}
	/* The oldest queued entry pred accepts, unlinked; nullptr when none. */
	template <typename P> T *take(P pred) noexcept
	{
		T *v = find(pred);
		if (v)
			unlink(v);
		return v;
	}
	T *front() noexcept { return head_ == kNone ? nullptr : &nodes_[head_].v; }
	/* An entry's number (below capacity), and the entry of a number: how a work request's
	 * wr_id names it. */
	uint32_t index(const T *v) const noexcept { return index_of(v); }
	T *at(uint32_t i) noexcept { return i < nodes_.size() ? &nodes_[i].v : nullptr; }
	size_t size() const noexcept { return size_; }
	size_t capacity() const noexcept { return nodes_.size(); }

private:
	static constexpr uint32_t kNone = UINT32_MAX;
	struct Node {
		T v{};
		uint32_t next = kNone, prev = kNone;
	};
	uint32_t index_of(const T *v) const noexcept
	{
		/* v is the first member of its Node. */
		return static_cast<uint32_t>(reinterpret_cast<const Node *>(v) - nodes_.data());
	}
	std::vector<Node> nodes_;
	uint32_t free_ = kNone, head_ = kNone, tail_ = kNone;
	size_t size_ = 0;
};

/* A posted receive. */
struct Posted {
	void *context = nullptr;
	uint8_t *buf = nullptr;
	size_t len = 0;
	size_t off = 0;	      /* FI_MULTI_RECV: bytes of buf already handed out */
	void *desc = nullptr; /* the application's descriptor (fid_mr), or null */
	uint64_t tag = 0;
	uint64_t ignore = 0;
	uint64_t src = kAnySrc; /* FI_DIRECTED_RECV: the sender it takes messages of */
	uint64_t flags = 0;	/* FI_MULTI_RECV, FI_COMPLETION */
	bool tagged = false;
	/* FI_SELECTIVE_COMPLETION without FI_COMPLETION: no CQ entry on success (errors and a
	 * multi-receive buffer's release still make one; counters count it). */
	bool quiet = false;
	uint32_t busy = 0;     /* FI_MULTI_RECV: rendezvous reads still landing in buf */
	bool released = false; /* FI_MULTI_RECV: no more matches (under min_multi_recv) */
	bool queued = false;   /* in its posted queue (else being matched as it is posted) */
};

/* A message that came before its receive. */
struct Unexpected {
	bool tagged = false;
	bool rndv = false; /* an RTS (the payload stays at the sender) */
	bool has_data = false;
	uint64_t tag = 0;
	uint64_t data = 0;
	uint64_t len = 0;	/* the message's length */
	uint64_t src = kAnySrc; /* its source (the sender's AV entry), kAnySrc: not known */
	/* Eager: the payload, in the unexpected pool (pool >= 0) or still in its receive
	 * buffer (bounce >= 0, reposted once matched). */
	int32_t pool = -1;
	int32_t bounce = -1;
	/* Rendezvous: where the sender's buffer is and who it is. */
	uint64_t raddr = 0;
	uint32_t rkey = 0;
	uint32_t id = 0;
	uint64_t src_device = 0;
	uint32_t src_port = 0;
	uint32_t src_qpn = 0;
	uint32_t src_via = 0; /* the local QP it arrived on (a remote sender's QP) */
	/* FI_PEEK | FI_CLAIM: the context it is claimed for (only a FI_CLAIM receive with that
	 * context takes it); null: unclaimed. */
	void *claim = nullptr;
};

class Matcher {
public:
	/* Room for posted receives of each kind and for unexpected messages: 0 or -1. */
	int init(uint32_t posted, uint32_t unexpected)
	{
		if (posted_[0].init(posted) || posted_[1].init(posted) || unexp_.init(unexpected))
			return -1;
		return 0;
	}
	Queue<Posted> &posted(bool tagged) noexcept { return posted_[tagged ? 1 : 0]; }
	Queue<Unexpected> &unexpected() noexcept { return unexp_; }

	/* The receive an arriving message matches, left queued (a multi-receive buffer may take
	 * more); nullptr when none. */
	Posted *match_message(bool tagged, uint64_t tag, uint64_t src = kAnySrc) noexcept
	{
		if (!tagged)
			return posted_[0].find([src](const Posted &p) {
				return !p.released && src_match(src, p.src);
			});
		return posted_[1].find([tag, src](const Posted &p) {
			return !p.released && src_match(src, p.src) &&
			       tag_match(tag, p.tag, p.ignore);
		});
	}
	/* The oldest unexpected message a receive being posted matches, unlinked; nullptr when
	 * none. */
	Unexpected *match_receive(bool tagged, uint64_t tag, uint64_t ignore,
				  uint64_t src = kAnySrc) noexcept
	{
		return unexp_.take([=](const Unexpected &u) {
			return !u.claim && u.tagged == tagged && src_match(u.src, src) &&
			       (!tagged || tag_match(u.tag, tag, ignore));
		});
	}

private:
	Queue<Posted> posted_[2];
	Queue<Unexpected> unexp_;
};

} // namespace nicmr::fabric::match

#endif
