/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private to the data path (emu_mlx5_qp.cpp, emu_mlx5_wqe.cpp): the device's per-object state.
 * Fields set by commands change only under EmuDataPath::table_lock_ held exclusive; the data
 * path reads them under the shared lock. What the data path changes has its own lock (a
 * SpinLock: the QP's for everything the engine keeps per QP, the CQ's for a shared CQ) or is
 * atomic, as marked.
 */
#ifndef NICMR_EMU_MLX5_DP_IMPL_H
#define NICMR_EMU_MLX5_DP_IMPL_H

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <infiniband/mlx5dv.h>

#include <memory>

#include "emu_mlx5_dp.h"
#include "emu_mlx5_translate.h"
#include "emu_mlx5_wire.h"
#include "mlx5_prm.h"
#include "nicmr_align.h"

namespace nicmr::emu {

/* The send WQE's segments as the engine reads them (prm::wqe_* through the layout table); shared
 * by the WQE engine (emu_mlx5_wqe.cpp) and the RC transport of the wire (emu_mlx5_rc.cpp). */
namespace wqe_fmt {
namespace prm = nicmr::mlx5::prm;
constexpr uint8_t kOk = 0;

constexpr size_t kCtrl = prm::wqe_ctrl::size;
constexpr size_t kRaddr = prm::wqe_raddr::size;
constexpr size_t kData = prm::wqe_data::size;
constexpr size_t kAtomic = prm::wqe_atomic::size;
constexpr size_t kUmrCtrl = prm::umr_ctrl::size;
constexpr size_t kMkeyCtx = prm::mkc::size;

/* The control segment's fields the model acts on (prm::wqe_ctrl). */
struct Ctrl {
	uint8_t opcode = 0;
	uint32_t ds = 0; /* 16-byte units of the whole WQE */
	uint8_t fm_ce_se = 0;
	uint32_t imm = 0; /* host order */
};

inline Ctrl parse_ctrl(const uint8_t *w)
{
	Ctrl r;
	r.opcode = static_cast<uint8_t>(prm::get(w, prm::wqe_ctrl::opcode));
	r.ds = static_cast<uint32_t>(prm::get(w, prm::wqe_ctrl::ds));
	r.fm_ce_se = static_cast<uint8_t>(prm::get(w, prm::wqe_ctrl::fm_ce_se));
	r.imm = static_cast<uint32_t>(prm::get(w, prm::wqe_ctrl::imm));
	return r;
}

struct DataSeg {
	uint32_t bc;
	uint32_t lkey;
	uint64_t addr;
};

inline DataSeg parse_data(const uint8_t *p)
{
	return {static_cast<uint32_t>(prm::get(p, prm::wqe_data::byte_count)),
		static_cast<uint32_t>(prm::get(p, prm::wqe_data::lkey)),
		prm::get(p, prm::wqe_data::addr)};
}

struct Raddr {
	uint64_t addr;
	uint32_t rkey;
};

inline Raddr parse_raddr(const uint8_t *p)
{
	return {prm::get(p, prm::wqe_raddr::raddr),
		static_cast<uint32_t>(prm::get(p, prm::wqe_raddr::rkey))};
}

} // namespace wqe_fmt

/* Every gather entry's local key checked for right a before a byte moves: kOk, or the first
 * refusal's syndrome. */
inline uint8_t validate_list(const Translator &t, const wqe_fmt::DataSeg *segs, size_t n,
			     Access a) noexcept
{
	for (size_t i = 0; i < n; i++)
		if (uint8_t s = t.validate(segs[i].lkey, segs[i].addr, segs[i].bc, a);
		    s != wqe_fmt::kOk)
			return s;
	return wqe_fmt::kOk;
}

/*
 * Copies bytes [off, off + n) of an SGE list's concatenation to (to_mem) or from buf through
 * the translator (access a). 0 or the syndrome; a DMA fault after the checks is LOCAL_PROT_ERR;
 * a list shorter than off + n LOCAL_LENGTH_ERR. emu_mlx5_rc.cpp.
 */
uint8_t sge_copy(const DmaSection &dma, const Translator &t, const wqe_fmt::DataSeg *segs,
		 size_t nseg, uint64_t off, uint8_t *buf, uint64_t n, Access a, bool to_mem);
/* The two directions of sge_copy: a gather list's bytes into buf (local read), buf's bytes
 * into a scatter list (local write). */
inline uint8_t sge_gather(const DmaSection &dma, const Translator &t, const wqe_fmt::DataSeg *segs,
			  size_t nseg, uint64_t off, uint8_t *buf, uint64_t n)
{
	return sge_copy(dma, t, segs, nseg, off, buf, n, Access::local_read, false);
}
inline uint8_t sge_scatter(const DmaSection &dma, const Translator &t, const wqe_fmt::DataSeg *segs,
			   size_t nseg, uint64_t off, const uint8_t *buf, uint64_t n)
{
	/* sge_copy only reads buf when it writes memory. */
	return sge_copy(dma, t, segs, nseg, off, const_cast<uint8_t *>(buf), n, Access::local_write,
			true);
}

/*
 * nicmr's extensions of a responder's key (doc/device-model.md, "Extensions"), after every PRM
 * check passed: false when the key refuses the access (disabled, or a single-use key already
 * claimed: of racing accesses exactly one wins the claim); *counter is where to count a write
 * or atomic once it completed (0: nowhere). The key's slot is held shared.
 */
inline bool ext_admits(const MkeyEntry *e, bool write, uint64_t *counter) noexcept
{
	*counter = 0;
	if (e == nullptr || e->ext.flags == 0)
		return true;
	if ((e->ext.flags & mlx5::prm::mkey_ext::disabled) != 0)
		return false;
	/* Relaxed: the exchange alone decides the one winner; resets happen only with the slot
	 * held exclusive, which the shared hold orders against. */
	if ((e->ext.flags & mlx5::prm::mkey_ext::single_use) != 0 &&
	    e->ext.spent.v.exchange(1, std::memory_order_relaxed) != 0)
		return false;
	if (write && (e->ext.flags & mlx5::prm::mkey_ext::counter) != 0)
		*counter = e->ext.counter_iova;
	return true;
}

/* One more completed remote write at counter (an 8-aligned IOVA checked when it was bound). */
inline void ext_count(const DmaSection &dma, uint64_t counter) noexcept
{
	if (counter == 0)
		return;
	void *p = dma.host(counter, 8);
	if (p == nullptr)
		return; /* unmapped since it was bound: a counted DMA fault, the write stands */
	/* Release: the data this operation wrote happens before the count a reader sees with an
	 * acquire load (nicmr_cntr_read). Host mappings are page aligned: p is 8-aligned. */
	std::atomic_ref<uint64_t>(*static_cast<uint64_t *>(p))
		.fetch_add(1, std::memory_order_release);
}

/*
 * The QP's and the CQ's lock: test-and-test-and-set, one exchange to take it, a release store
 * to give it back (a std::mutex costs an atomic read-modify-write both ways). Held for one
 * doorbell's WQEs or one CQE; a waiter spins, then yields (contention only: two threads ringing
 * one QP, or QPs sharing a CQ).
 * Not DPDK's rte_spinlock, on purpose: on x86 (DPDK 22.11 as Debian builds it, without
 * RTE_FORCE_INTRINSICS) its lock and unlock are inline assembly (xchg), which ThreadSanitizer
 * cannot see, so the TSan stress suite would report every access under the lock as a race;
 * its waiters never yield, which starves the holder on a machine with fewer cores than
 * spinning threads; and the device model builds without DPDK (the fuzz targets).
 */
class SpinLock {
public:
	void lock() noexcept
	{
		for (unsigned spins = 0;;) {
			/* Acquire: what the last holder wrote under the lock. */
			if (!held_.exchange(true, std::memory_order_acquire))
				return;
			while (held_.load(std::memory_order_relaxed))
				if (++spins >= 64)
					std::this_thread::yield();
		}
	}
	bool try_lock() noexcept
	{
		return !held_.load(std::memory_order_relaxed) &&
		       !held_.exchange(true, std::memory_order_acquire);
	}
	/* Release: our writes under the lock before the next holder's acquire. */
	void unlock() noexcept { held_.store(false, std::memory_order_release); }

private:
	std::atomic<bool> held_{false};
};

/* A statistics counter written only under its object's lock: a relaxed load and store, no
 * read-modify-write; readers (stats()) may see it a little late. */
inline void bump(std::atomic<uint64_t> &c, uint64_t n = 1) noexcept
{
	c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

struct alignas(kThreadAlign) EmuDataPath::Cq { /* no line shared with another object */
	uint32_t cqn = 0;
	CqAttr attr;
	uint32_t users = 0; /* QPs that complete here */
	SpinLock lock;	    /* guards produced: CQEs from several QPs */
	uint64_t produced = 0;
	/* Statistics, bumped under lock. */
	std::atomic<uint64_t> n_cqes{0}, n_errors{0}, n_overruns{0};
	/* Arming (emu_mlx5_cq_events.cpp): written by the CQE producer and by arm doorbells on
	 * other threads, hence atomic. armed: 0, or kArmedNext / kArmedSolicited; cleared by
	 * whoever fires the one event (a compare-exchange decides). published: CQEs written
	 * (produced, stored after the CQE); solicited_end: produced just after the last
	 * solicited or error CQE. arm_seen: the record's arm word last acted on. */
	static constexpr uint8_t kArmedNext = 1, kArmedSolicited = 2;
	std::atomic<uint8_t> armed{0};
	std::atomic<uint64_t> published{0}, solicited_end{0};
	std::atomic<uint32_t> arm_seen{0};
};

struct EmuDataPath::Eq {
	uint32_t eqn = 0;
	EqAttr attr;
	uint64_t order = 0; /* creation order: events go to the first EQ created that takes them */
	std::mutex lock;
	uint64_t produced = 0;
	uint64_t consumed = 0; /* the driver's consumer index as last read from its doorbell */
	bool overrun = false;  /* stays set: the EQ takes no more events */
	bool armed = false;    /* an update-and-arm doorbell came since the last interrupt */
};

/* A receive WQE taken off a QP's RQ: its slot's data segments up to the MLX5_INVALID_LKEY
 * terminator (or the slot's end), and their total length. */
struct EmuDataPath::RecvWqe {
	static constexpr size_t kMaxSegs = (16u << 5) / wqe_fmt::kData; /* log_max_rq_stride 5 */
	uint16_t index = 0;
	wqe_fmt::DataSeg segs[kMaxSegs];
	size_t nseg = 0;
	uint64_t capacity = 0;
};

/*
 * A shared receive queue: a linked list of WQEs in its buffer (each WQE's next segment names
 * the one after it). The driver posts at the list's head and counts in the doorbell record;
 * the device takes from its own head, follows next_wqe_index, and the driver links every
 * completed WQE back at the list's tail (rdma-core providers/mlx5/srq.c, mlx5_free_srq_wqe).
 * lock guards head, taken and armed: several QPs take from one SRQ; it nests inside a QP's
 * rq_lock. users changes under table_lock_ exclusive.
 */
struct EmuDataPath::Srq {
	uint32_t srqn = 0;
	SrqAttr attr;
	uint32_t users = 0;
	SpinLock lock;
	uint16_t head = 0;
	uint16_t taken = 0;
	bool armed = false;
};

/* Queue memory: whole pages cover need bytes, every page 4 KiB-aligned and reachable through
 * the IOMMU. 0, -EINVAL or -EFAULT (emu_mlx5_qp.cpp). */
int check_queue(const EmuIommu &mmu, const QueueMem &m, uint64_t need);

/* PSNs are 24 bits (IBTA 9.7.1). */
inline constexpr uint32_t kPsnMask = 0xffffff;
/* The packets of a message of len bytes at path MTU mtu (a zero-length message is one). */
inline uint32_t packets_of(uint64_t len, uint32_t mtu) noexcept
{
	return len == 0 ? 1 : static_cast<uint32_t>((len + mtu - 1) / mtu);
}

/*
 * A QP's RC transport on the wire (IBTA 9.7): the requester's PSN and its outstanding WQEs in
 * send order, the responder's expected PSN, MSN and the RDMA WRITE in progress. Guarded by the
 * QP's lock.
 */
struct EmuDataPath::RcWire {
	/* A WQE taken off the SQ and not completed yet (CQEs go out in this order). */
	struct Pending {
		uint16_t index = 0;	/* the WQE's index (SQ counter at its first WQEBB) */
		uint8_t opcode = 0;	/* MLX5_OPCODE_* */
		bool signaled = false;	/* a CQE on success */
		bool done = false;	/* executed: complete it when it reaches the head */
		uint8_t syndrome = 0;	/* when done: 0 or the CQE syndrome */
		uint32_t first_psn = 0; /* requests: the PSNs the request takes */
		uint32_t npsn = 0;
		uint32_t byte_cnt = 0;
		uint32_t got = 0; /* RDMA READ: response packets scattered so far */
		/* The PSN a resend of it starts at: its first, or a READ's first response
		 * missing. */
		uint32_t resend_psn() const noexcept
		{
			const bool read = opcode == MLX5_OPCODE_RDMA_READ;
			return (first_psn + (read ? got : 0)) & 0xffffff;
		}
	};
	WirePort *port = nullptr;
	Gid remote{};
	roce::IpPath tx;	     /* here -> the peer, for the ICRC */
	uint32_t mtu = 0;	     /* path MTU in bytes */
	uint32_t next_psn = 0;	     /* requester: the next PSN to send */
	std::vector<Pending> pend;   /* a ring of 2^log_sq_size entries */
	uint32_t head = 0, tail = 0; /* entries head .. tail - 1 are outstanding */
	bool halted = false;	     /* a WQE failed before it was sent: send no more */
	bool deferred = false;	     /* run_sq left WQEs posted: run it again on a response */
	/*
	 * Requester reliability (IBTA 9.7.6, emu_mlx5_rc.cpp: rc_timers, rc_resend). The timers
	 * run on the device thread's progress turn, against the turn's clock: arm asks the next
	 * turn to start the local ACK timer (the posting thread reads no clock).
	 */
	uint32_t retry_left = 0; /* transport retries left; reloaded from retry_count on progress */
	uint32_t rnr_left = 0;	 /* RNR retries left; reloaded from rnr_retry (7: no end) */
	bool arm = false;	 /* (re)start the ACK timer at the next turn */
	uint64_t deadline_ns = 0; /* the local ACK timeout of the oldest request; 0: not running */
	bool rnr_wait = false;	  /* an RNR NAK: resend from rnr_psn once rnr_until_ns passed */
	uint32_t rnr_psn = 0;
	uint32_t rnr_us = 0;	   /* the NAK's timer */
	uint64_t rnr_until_ns = 0; /* 0: the wait starts at the next turn */
	bool seq_retried = false;  /* a PSN sequence error NAK for seq_psn was answered already */
	uint32_t seq_psn = 0;
	bool gap_retried = false; /* a READ response beyond gap_psn re-requested from it already */
	uint32_t gap_psn = 0;
	uint32_t unasked = 0; /* packets sent since the last with AckReq (ack_wanted) */
	/* Responder. */
	uint32_t epsn = 0;     /* next PSN expected */
	uint32_t msn = 0;      /* messages completed (24 bits) */
	bool nak_sent = false; /* a PSN sequence error NAK went out for epsn */
	bool ack_due = false;  /* an ACK of epsn - 1 is owed at the end of the batch */
	/* A message completed without AckReq and no ACK sent since: one goes at the timer scan
	 * rc_lazy_ack's wait after the scan that first saw it, unless an ACK leaves before;
	 * lazy_since_ns 0: that scan has not run yet. */
	bool lazy_ack = false;
	uint64_t lazy_since_ns = 0;
	/* The RDMA WRITE in progress (FIRST seen, LAST not yet). */
	bool w_active = false;
	uint64_t w_va = 0;
	uint32_t w_rkey = 0;
	uint64_t w_left = 0;
	uint64_t w_counter = 0; /* nicmr's counter extension of its key (ext_admits), or 0 */
	uint64_t w_total = 0;	/* its DMA length (RETH): the byte count of a WRITE with imm */
	/* The SEND in progress (FIRST seen, LAST not yet): its receive WQE and the bytes placed
	 * so far (emu_mlx5_recv.cpp). */
	bool s_active = false;
	uint64_t s_off = 0;
	RecvWqe s_wqe;
	/* The last 2^log_rra_max atomics executed (IBTA 9.4.5: the responder's saved results),
	 * replayed for a duplicate of their PSN; a ring, made at INIT2RTR. */
	struct SavedAtomic {
		bool valid = false;
		uint32_t psn = 0;
		uint64_t orig = 0;
	};
	std::vector<SavedAtomic> atomics;
	uint32_t atomic_next = 0;
	/* The responder resources (2^log_rra_max) new READ and atomic requests of receive
	 * batch rra_batch took (emu_mlx5_rc.cpp, rc_request). */
	uint64_t rra_batch = 0;
	uint32_t rra_used = 0;

	uint32_t outstanding() const noexcept { return tail - head; }
	/* The first request still owed a response, or null. */
	Pending *oldest_owed() noexcept
	{
		for (uint32_t i = head; i != tail; i++)
			if (!at(i).done)
				return &at(i);
		return nullptr;
	}
	Pending &at(uint32_t i) noexcept { return pend[i & (pend.size() - 1)]; }
};

/*
 * Datagrams built in place into a send batch of a wire port (WireTx) and sent in few system
 * calls (WirePort::tx_flush): when the batch is full, at flush() and when it ends. With every
 * batch of the port leased it falls back to one datagram at a time (its own buffer, sent at
 * add). Counts tx_packets and tx_errors. Device side of the send path: no allocation, no lock.
 */
struct EmuDataPath::TxBatch {
	TxBatch(EmuDataPath &d, WirePort &p) noexcept : dp(d), port(p), b(p.tx_acquire()) {}
	~TxBatch()
	{
		flush();
		port.tx_release(b);
	}
	TxBatch(const TxBatch &) = delete;
	TxBatch &operator=(const TxBatch &) = delete;
	/* Where to build a datagram of up to max (<= roce::max_datagram) bytes. */
	uint8_t *room(size_t max) noexcept
	{
		if (b == nullptr)
			return one;
		uint8_t *p = b->room(max);
		if (p == nullptr) {
			flush();
			p = b->room(max);
		}
		return p;
	}
	/* The datagram built at room(): len bytes to remote. */
	void add(const Gid &remote, size_t len) noexcept
	{
		if (b != nullptr) {
			b->add(remote, len);
			return;
		}
		const bool ok = port.send(remote, one, len) == 0;
		count(ok ? 1 : 0, ok ? 0 : 1);
	}
	/* Drops what was built and not sent (a message that failed half way). */
	void discard() noexcept
	{
		if (b != nullptr)
			b->clear();
	}
	void flush() noexcept
	{
		if (b == nullptr || b->size() == 0)
			return;
		uint32_t sent = 0, errors = 0;
		port.tx_flush(*b, &sent, &errors);
		count(sent, errors);
	}
	void count(uint32_t sent, uint32_t errors) noexcept;

	EmuDataPath &dp;
	WirePort &port;
	WireTx *b;
	uint8_t one[roce::max_datagram];
};

/* What a page fault names (the PRM's page-fault EQE, emu_mlx5_odp.cpp): subtype WQE (a local
 * SGE of the requester's WQE, or the scatter list of the responder's receive WQE) or RDMA (the
 * responder's rkey, VA and length), the type flags (prm::eqe_page_fault::flag_*), and the
 * syndrome the access gets if the fault is resumed with an error (what a device without
 * on-demand paging would have answered). */
struct EmuDataPath::Fault {
	uint8_t subtype = 0;
	uint8_t flags = 0;
	uint32_t rkey = 0;
	uint64_t va = 0;
	uint32_t len = 0;
	uint8_t syndrome = 0;
	uint32_t responder = 0; /* loopback RDMA or receive fault: the responder QP's number */
	/* A receive WQE's fault (WQE subtype, type MLX5_WQE_PF_TYPE_RESP): the QP whose RQ holds
	 * it, its index, the packet's length (the EQE's packet_length), and the syndrome its
	 * receive completes with if the fault is resumed with an error (syndrome above is the
	 * requester's). */
	bool recv = false;
	uint32_t wq = 0;
	uint16_t wqe_index = 0;
	uint16_t packet_len = 0;
	uint8_t recv_syndrome = 0;
};

/* The requester's WQE is held for a page fault (not a syndrome: never in a CQE). */
inline constexpr uint8_t kFaultHeld = 0xfd;

/* One WQE's execution. */
struct EmuDataPath::Exec {
	EmuDataPath &dp;
	const DmaSection &dma; /* the doorbell's view of the IOMMU */
	Qp &qp;
	const uint8_t *w;
	size_t len; /* ds * 16 */
	wqe_fmt::Ctrl c;
	uint32_t byte_cnt = 0;
	/* A responder event to post after the mkey lock is dropped. */
	uint8_t event = 0;
	Qp *responder = nullptr;
	/* On the wire: the request went out and awaits its response (PSNs below). */
	bool awaiting = false;
	/* Loopback: the responder had no receive WQE (RNR); the WQE stays at the SQ's head. */
	bool rnr = false;
	uint32_t first_psn = 0, npsn = 0;
	/* On-demand paging: the fault a kFaultHeld result names (emu_mlx5_odp.cpp). */
	Fault fault;

	uint8_t run();
	/* A translator of the QP's keys that reports pages not present when faults can be
	 * raised (emu_mlx5_odp.cpp). */
	void arm_faults(Translator &t) const;
	/* s from a local (requester) validation: kFaultHeld with fault set when s is
	 * kNotPresent, else s (kNotPresent becomes the syndrome of access a). */
	uint8_t local_fault(uint8_t s, Access a);
	/* s from the responder's validation of [va, va + len) of rkey: kFaultHeld with fault
	 * set when s is kNotPresent, else responder_fail(s) (REMOTE_ACCESS_ERR for it). */
	uint8_t remote_fault(uint8_t s, uint32_t rkey, uint64_t va, uint64_t len, Access a);
	/* rights false: a SEND, which needs no responder enable. */
	uint8_t connect(Access need, bool rights = true);
	uint8_t responder_fail(uint8_t syndrome, uint8_t ev);
	uint8_t ext_admit(MkeyTable::Hold &keys, uint32_t rkey, bool write, uint64_t *counter);
	uint8_t gather_list(wqe_fmt::DataSeg *segs, size_t *n, uint64_t *total, size_t first);
	/* What an RDMA WRITE WQE sends: its inline data, or its gather list. */
	struct WriteSource {
		wqe_fmt::Raddr ra;
		bool inl = false;
		const uint8_t *inl_data = nullptr;
		wqe_fmt::DataSeg segs[kMaxWqeBytes / wqe_fmt::kData];
		size_t nseg = 0;
		uint64_t total = 0;
	};
	uint8_t write_source(WriteSource *src);
	/* The inline data or gather list from byte offset seg_at (SEND: after the ctrl). */
	uint8_t message_source(size_t seg_at, WriteSource *src);
	/* SEND, SEND with immediate / invalidate and RDMA WRITE with immediate on the loopback
	 * (emu_mlx5_recv.cpp): the responder's receive WQE takes the message. */
	uint8_t send();
	uint8_t deliver(Qp &r, MkeyTable::Hold &keys, const Translator &local,
			const WriteSource &src, uint8_t cqe_opcode, uint32_t imm);
	uint8_t remote_place(const Translator &remote, uint32_t rkey, uint64_t addr,
			     const uint8_t *data, uint64_t n);
	uint8_t rdma_write();
	uint8_t rdma_read();
	uint8_t atomic();
	uint8_t local_inval();
	uint8_t umr();
	uint8_t copy(const Translator &st, uint32_t skey, uint64_t saddr, Access sa,
		     const Translator &dt, uint32_t dkey, uint64_t daddr, Access da, uint64_t n);
	/* The wire's requester (emu_mlx5_rc.cpp): RDMA WRITE, READ and atomics go out as
	 * packets; other WQEs run as on the loopback. */
	uint8_t run_wire();
	uint8_t wire_write();
	uint8_t wire_read();
	uint8_t wire_atomic();
	/* Retransmission: this WQE's packets again, from packet k0 of its PSNs from first_psn
	 * (a READ re-requests the rest from there). 0 or the syndrome. */
	uint8_t wire_resend(uint32_t first_psn, uint32_t k0);
	uint8_t read_request(const wqe_fmt::Raddr &ra, uint64_t total, uint32_t first_psn,
			     uint32_t k0);
	uint8_t atomic_request(uint32_t psn);
	/* SEND (and with immediate / invalidate) and WRITE with immediate as packets. */
	uint8_t wire_send();
	/* The source of a SEND-family WQE or a WRITE with immediate (emu_mlx5_recv.cpp). */
	uint8_t send_source(WriteSource *src);
	/* Packets k0 .. n - 1, from first_psn, of the message of an RDMA WRITE (with immediate)
	 * or SEND-family WQE (n: the message's count); the first send and the resend (resend
	 * true: its last packet always asks for an ACK) share it. */
	uint8_t message_packets(const WriteSource &src, const Translator &local, uint32_t first_psn,
				uint32_t k0, uint32_t *n, bool resend);
	/* Whether the last packet of this message of n packets carries AckReq (qpc
	 * log_ack_req_freq; emu_mlx5_rc.cpp). */
	bool ack_wanted(uint32_t n) noexcept;
	/* A UD QP's SEND or SEND with immediate (emu_mlx5_ud.cpp): the datagram segment's
	 * destination, on the loopback or as one packet on the wire. */
	uint8_t ud_send();
};

struct alignas(kThreadAlign) EmuDataPath::Qp { /* no line shared with another object */
	uint32_t qpn = 0;
	QpAttr attr;
	QpPath path;
	/* Atomic: a connected requester moves this QP to ERR without its lock. */
	std::atomic<uint8_t> state{static_cast<uint8_t>(QpState::rst)};
	SpinLock lock;	  /* one thread runs the SQ at a time */
	Cq *cq = nullptr; /* attr.cqn's CQ: it cannot go while this QP uses it (users) */
	/* Statistics, bumped under lock. */
	std::atomic<uint64_t> n_wqes{0}, n_bytes{0}, n_doorbells{0};
	uint16_t ci = 0;	/* SQ consumer counter in WQEBBs; guarded by lock */
	uint32_t rnr_tries = 0; /* loopback RNR retries of the WQE at ci; guarded by lock */
	/* The receive queue (attr.rq): its consumer counter, taken by the requester of a
	 * loopback peer (without this QP's lock) or the wire's responder; rq_lock nests inside
	 * any QP's lock and outside the CQ's. rcq: attr.rcqn's CQ, held like cq. */
	SpinLock rq_lock;
	uint16_t rq_ci = 0;
	Cq *rcq = nullptr;
	std::atomic<uint64_t> n_recvs{0}, n_rnr{0}; /* bumped under rq_lock */
	/* attr.srqn's SRQ (null: none), held like cq. srq_wqe: the last WQE this QP took from
	 * it; srq_held: given back for a page fault (rq_untake), the retry takes it again (an
	 * SRQ's WQE cannot go back into the list: other QPs take behind it). rq_lock. */
	Srq *srq = nullptr;
	bool srq_held = false;
	RecvWqe srq_wqe;
	std::vector<uint8_t> scratch; /* UMR translation lists by pointer; guarded by lock */
	/* Keys a WQE holds beyond MkeyTable::Hold::kInline; grows once to the largest set;
	 * guarded by lock. */
	std::vector<const void *> held;
	/* The RC transport's state when INIT2RTR put the QP on a UDP wire (emu_mlx5_rc.cpp);
	 * null on the loopback. Made and dropped under table_lock_ exclusive; its contents are
	 * guarded by lock. */
	std::unique_ptr<RcWire> rc;
	/* UD: the PSN of the next datagram (from RTR2RTS's next_send_psn; IBTA 9.7.1: a UD
	 * receiver does not check it); guarded by lock. */
	uint32_t ud_psn = 0;
	/* On-demand paging (emu_mlx5_odp.cpp), guarded by lock. pf: the WQE at ci waits for
	 * the resume of fault pf_token (pending), may run again (resumed) or completes with
	 * pf_syndrome (failed; pf_responder: the loopback responder QP that goes to ERR with
	 * it). rpf: as the wire's responder, the request at epsn waits (pending: RNR NAKs) or is
	 * refused (failed). */
	enum class Pf : uint8_t { none, pending, resumed, failed };
	Pf pf = Pf::none;
	uint32_t pf_token = 0;
	uint8_t pf_syndrome = 0;
	uint32_t pf_responder = 0;
	Pf rpf = Pf::none;
	uint32_t rpf_token = 0;
	/* The fault is a receive WQE's (pf: of the loopback responder pf_responder's RQ; rpf:
	 * of this QP's RQ on the wire): failed, that receive completes with pf_recv_syndrome
	 * (rpf_recv_syndrome). Apart: a wire QP may wait as a requester and as a responder. */
	bool pf_recv = false;
	uint8_t pf_recv_syndrome = 0;
	bool rpf_recv = false;
	uint8_t rpf_recv_syndrome = 0;
	/* mkc byte masks of the last two UMR mkey_masks seen; guarded by lock. */
	struct UmrMask {
		uint64_t of = 0;
		bool valid = false;
		uint64_t bytes[8] = {};
	};
	UmrMask umr_masks[2];
	unsigned umr_mask_next = 0;
	/* The byte mask of mkey_mask's fields (eight words over the 64 mkc bytes). */
	const uint64_t *umr_byte_mask(uint64_t mkey_mask) noexcept;

	QpState get_state() const noexcept
	{
		/* Acquire pairs with the release store of ERR by a requester: the event it
		 * posted is ordered before. Only the state itself matters here. */
		return static_cast<QpState>(state.load(std::memory_order_acquire));
	}
	void set_state(QpState s) noexcept
	{
		state.store(static_cast<uint8_t>(s), std::memory_order_release);
	}
};

} // namespace nicmr::emu

#endif
