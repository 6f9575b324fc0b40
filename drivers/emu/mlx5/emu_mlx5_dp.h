/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data path of the mlx5 device model: UARs, CQs, EQs, RC QPs on two looped-back ports, and
 * the engine that executes send WQEs (emu_mlx5_wqe.cpp) with the access checks and translations
 * of emu_mlx5_translate.h.
 *
 *   driver: WQE -> SQ (PAS pages), dbr[1] = producer, 8 ctrl bytes -> UAR page i + 0x800
 *       |
 *       v   doorbell (inline: ringing thread; poll thread: scan every QP on UAR i)
 *   QP (spin lock) --- WQEs from its consumer counter up to dbr[1] ---+
 *       |  local gather/scatter: Translator (QP's PD)             | remote access: the QP its
 *       |  UMR / LOCAL_INVAL: MkeyTable::update                   | remote_qpn names (other port,
 *       v                                                         v  naming it back): its PD
 *   CQ: CQE n at slot n & mask, owner bit, op_own last            EQ: WQ access / invalid
 *       (spin lock only when several QPs complete there)              request events
 *
 * Locks, in the order they nest: EmuMlx5Device::lock_ (commands) -> table_lock_ (objects:
 * exclusive to create, change or destroy, shared on the data path) -> Qp::lock -> the mkey
 * slots of one WQE (MkeyTable::Hold, shared; UMR and LOCAL_INVAL take one slot exclusive) ->
 * Cq::lock (taken only when the CQ has more than one user: users changes only under
 * table_lock_ exclusive, so a one-user CQ is written only under its QP's lock) / Eq::lock.
 * The IOMMU takes no lock: run_qp opens one DmaSection per doorbell and every access of it (the
 * record, WQEs, data, CQEs, EQEs) goes through that snapshot; a concurrent dma_unmap waits for
 * the doorbell to end. A QP's state is atomic: a requester moves its responder to ERR without
 * taking the responder's lock (two QPs connected to each other never wait for each other).
 * Why no cycle: every lock above is taken in that order; the key slots are only ever waited
 * for by readers while a writer holds one, and a writer holds one slot and waits for nothing.
 * Statistics of QPs and CQs are relaxed stores under their object's lock (no read-modify-write
 * on the hot path); stats() sums them with the totals of objects gone.
 *
 * Every index, count and size that the driver's memory gives (dbr counters, ds, byte counts,
 * translation sizes) is bounded before use: a malformed WQE completes with an error CQE, it
 * never crashes the model. doc/device-model.md names the defaults, limits and syndromes.
 */
#ifndef NICMR_EMU_MLX5_DP_H
#define NICMR_EMU_MLX5_DP_H

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "emu_slots.h"
#include <vector>

#include "emu_iommu.h"
#include "emu_mlx5_mkey.h"
#include "emu_mlx5_trace.h"
#include "emu_mlx5_wire.h"

namespace nicmr::emu {

/* Limits of the data path (EmuConfig carries the settable ones). */
struct DpConfig {
	uint32_t uars = 32;		/* UAR indices 1..uars with a pre-registered SQ doorbell */
	uint32_t log_max_qp = 10;	/* QP numbers EmuDataPath::kFirstQpn .. 2^n - 1 */
	uint32_t log_max_cq = 10;	/* CQ numbers 1 .. 2^n - 1 */
	uint32_t log_max_eq = 4;	/* EQ numbers 1 .. 2^n - 1 (at most 255) */
	uint32_t log_max_qp_sz = 15;	/* WQEBBs per SQ */
	uint32_t log_max_cq_sz = 22;	/* CQEs per CQ */
	uint32_t log_max_eq_sz = 16;	/* EQEs per EQ */
	uint32_t log_max_msg = 30;	/* bytes per message */
	uint32_t log_max_rq_stride = 5; /* receive WQE slots of 16 << n bytes: 512 at most */
	uint32_t ports = 2;
	/* UMR: the reserved lkey a translation pointer must carry (QUERY_SPECIAL_CONTEXTS), and
	 * the mkey_mask bits the general caps forbid (umr_modify_*_disabled). */
	uint32_t resd_lkey = 0;
	bool umr_modify_entity_size_disabled = false;
	bool umr_modify_atomic_disabled = false;
	/* On-demand paging (EmuConfig::odp): a page of an on-demand mkey that is not present
	 * raises a page fault (emu_mlx5_odp.cpp) when an EQ takes page-fault events. */
	bool odp = false;
	/* Fault injection (EmuConfig::fail_umr): the Nth UMR work request completes in error. */
	uint64_t fail_umr = 0;
};
/* create_cq: the CQ names an EQ that does not exist. */
inline constexpr int kNoSuchEq = -ENODEV;
/* create_qp: the SRQ it names does not exist or belongs to another PD. */
inline constexpr int kNoSuchSrq = -ESRCH;

/* A queue's memory: pages of 4 KiB << log_page_size at the IOVAs in pas. */
struct QueueMem {
	std::vector<uint64_t> pas;
	uint32_t log_page_size = 0; /* above 4 KiB */
	/* IOVA of byte off of the queue (off below the queue's size). */
	uint64_t iova(uint64_t off) const noexcept
	{
		const uint32_t shift = 12 + log_page_size;
		return pas[off >> shift] + (off & ((uint64_t{1} << shift) - 1));
	}
	uint64_t bytes() const noexcept { return uint64_t{pas.size()} << (12 + log_page_size); }
};

struct CqAttr {
	uint32_t log_size = 0; /* CQEs = 2^log_size */
	QueueMem mem;
	uint64_t dbr = 0; /* IOVA of the doorbell record (dbr[0]: consumer index) */
	uint32_t eqn = 0; /* completion EQ: where an armed CQ's completion event goes */
};

struct EqAttr {
	uint32_t log_size = 0;
	QueueMem mem;
	uint64_t event_bitmask = 0; /* bit n: event type n is delivered */
	uint32_t uar = 0;	    /* eqc.uar_page: where the driver writes the consumer index */
	uint32_t intr = 0;	    /* eqc.intr: the MSI-X vector an armed EQ raises */
};

struct QpAttr {
	uint32_t pd = 0;
	uint32_t cqn = 0; /* send CQ */
	uint32_t uar = 0; /* UAR index the QP rings */
	uint32_t log_sq_size = 0;
	bool no_sq = false; /* qpc.no_sq: a receive-only QP (log_sq_size ignored, no SQ memory) */
	/* The QP's own receive queue (qpc.rq_type regular): 2^log_rq_size slots of
	 * 16 << log_rq_stride bytes at the start of mem, the SQ after them (Linux
	 * drivers/infiniband/hw/mlx5/qp.c, _create_user_qp: rq.offset 0, sq.offset
	 * rq.wqe_cnt << rq.wqe_shift). rq false: rq_type zero_len, no receive queue. */
	bool rq = false;
	uint32_t log_rq_size = 0;
	uint32_t log_rq_stride = 0;
	uint32_t rcqn = 0; /* qpc.cqn_rcv: receive CQ (with rq or srqn) */
	/* qpc.rq_type srq: receive WQEs come from SRQ srqn (qpc.srqn_rmpn_xrqn; 0: none, SRQ
	 * numbers start at 1). rq is false then: the QP's buffer holds the SQ alone. */
	uint32_t srqn = 0;
	/* Whether a SEND or a WRITE with immediate finds a receive queue (own or shared). */
	bool receives() const noexcept { return rq || srqn != 0; }
	QueueMem mem;
	uint64_t dbr = 0;  /* IOVA of the doorbell record (dbr[0]: RQ producer, dbr[1]: SQ producer
			      in WQEBBs) */
	bool fre = false;  /* qpc.fre: UMR WQEs allowed */
	bool rlky = false; /* qpc.rlky: the reserved lkey allowed */
	uint32_t ts_format = 0; /* prm::qp_ts_format */
	/* qpc.st UD (prm::qp_st::ud): an unreliable datagram QP (emu_mlx5_ud.cpp); else RC. */
	bool ud = false;
	/* qpc.st QP1 (prm::qp_st::qp1): a UD QP (ud is true too) that is its port's GSI QP,
	 * QP 1 on the wire (prm::gsi), once RST2INIT gave it its port. */
	bool gsi = false;

	uint64_t rq_bytes() const noexcept
	{
		return rq ? uint64_t{1} << (log_rq_size + 4 + log_rq_stride) : 0;
	}
	/* IOVA of byte off of the SQ. */
	uint64_t sq_iova(uint64_t off) const noexcept { return mem.iova(rq_bytes() + off); }
	/* IOVA of receive WQE slot i (modulo the RQ's size). */
	uint64_t rq_iova(uint32_t i) const noexcept
	{
		return mem.iova(uint64_t{i & ((1u << log_rq_size) - 1)} << (4 + log_rq_stride));
	}
};

/* A shared receive queue (CREATE_SRQ, emu_mlx5_srq.cpp): 2^log_size WQEs of 16 << log_stride
 * bytes, each a next segment (prm::wqe_srq_next) and data segments. */
struct SrqAttr {
	uint32_t pd = 0;
	uint32_t log_size = 0;
	uint32_t log_stride = 0;
	uint32_t lwm = 0; /* srqc.lwm: the limit an ARM_RQ arms (0: not armed) */
	QueueMem mem;
	uint64_t dbr = 0; /* dword 0: the driver's WQE counter (low 16 bits) */
	/* IOVA of WQE i (modulo the SRQ's size). */
	uint64_t wqe_iova(uint32_t i) const noexcept
	{
		return mem.iova(uint64_t{i & ((1u << log_size) - 1)} << (4 + log_stride));
	}
};

/* What QUERY_SRQ reports. */
struct SrqInfo {
	SrqAttr attr;
	uint16_t taken = 0; /* WQEs the device has taken (wqe_cnt) */
	uint16_t head = 0;  /* the index of the next WQE it takes */
	bool armed = false; /* the limit event is armed (lwm above 0) */
	uint32_t users = 0; /* QPs attached */
};

/* The parameters a transition may set (the rest keep their value): the QP context. */
struct QpPath {
	uint32_t port = 1;			    /* INIT: primary_address_path.vhca_port_num */
	uint32_t remote_qpn = 0;		    /* INIT2RTR */
	bool rre = false, rwe = false, rae = false; /* RST2INIT / INIT2RTR / RTR2RTS */
	uint32_t atomic_mode = 0;		    /* with rae */
	/* INIT2RTR */
	uint32_t mtu = 0;	  /* prm::qp_mtu */
	uint32_t log_msg_max = 0; /* requests above 2^n bytes: LOCAL_LENGTH_ERR */
	bool fl = false;	  /* force loopback */
	uint32_t gid_index = 0;
	uint8_t remote_gid[16] = {};
	uint32_t next_rcv_psn = 0;
	uint32_t min_rnr_nak = 0;
	uint32_t log_rra_max = 0; /* atomics the responder keeps results of: 2^n */
	uint32_t log_sra_max = 0; /* RTR2RTS: READs and atomics in flight at most: 2^n */
	/* RTR2RTS */
	uint32_t next_send_psn = 0;
	uint32_t retry_count = 0;
	uint32_t rnr_retry = 0;
	uint32_t ack_timeout = 0;
	uint32_t log_ack_req_freq = 0; /* AckReq every 2^n packets (emu_mlx5_rc.cpp, ack_wanted) */
	/* UD: qpc.q_key (RST2INIT, and INIT2RTR / RTR2RTS with opt_param_mask Q_KEY). */
	uint32_t q_key = 0;
};

/* QP states (the PRM's qpc.state values). */
enum class QpState : uint8_t { rst = 0, init = 1, rtr = 2, rts = 3, err = 6 };
enum class QpTransition { rst2init, init2rtr, rtr2rts, to_err, to_rst };

/* What QUERY_QP reports. */
struct QpInfo {
	QpAttr attr;
	QpPath path;
	QpState state = QpState::rst;
	uint16_t sq_ci = 0; /* WQEBBs the device has taken */
	uint16_t rq_ci = 0; /* receive WQEs the device has taken */
};

struct DpStats {
	uint64_t wqes = 0;	     /* WQEs taken off send queues */
	uint64_t cqes = 0;	     /* CQEs written */
	uint64_t cqe_errors = 0;     /* of them with REQ_ERR */
	uint64_t cq_overruns = 0;    /* CQEs dropped: the CQ was full */
	uint64_t eqes = 0;	     /* events written */
	uint64_t events_dropped = 0; /* no EQ, or the type not in its bitmask */
	uint64_t eq_overruns = 0;    /* events that found their EQ full (consumer index not
					written back for 2^log_size events): a health syndrome */
	uint64_t bytes = 0;	     /* payload moved by RDMA WRITE/READ */
	uint64_t doorbells = 0;	     /* UAR doorbells handled */
	uint64_t recvs = 0;	     /* receive WQEs consumed by a SEND or WRITE with immediate */
	uint64_t rnr = 0;	     /* requests that found no receive WQE (RNR) */
	uint64_t dbr_faults = 0;     /* a doorbell record or WQE unreadable (DMA fault) */
	uint64_t cq_arms = 0;	     /* CQ arm doorbells taken (a known CQ) */
	uint64_t comp_events = 0;    /* completion EQEs written for armed CQs */
	uint64_t interrupts = 0;     /* MSI-X vectors raised by armed EQs */
	uint64_t arms_dropped = 0;   /* CQ or EQ arm doorbells naming no such queue */
	uint64_t page_faults = 0;    /* page-fault events raised (emu_mlx5_odp.cpp) */
	uint64_t pf_resumes = 0;     /* PAGE_FAULT_RESUMEs taken (with or without error) */
	uint64_t pf_errors = 0;	     /* of them with the error flag */
	/* UD QPs (emu_mlx5_ud.cpp), loopback and wire together. */
	uint64_t ud_sent = 0;	      /* datagrams sent (one per UD SEND WQE) */
	uint64_t ud_received = 0;     /* datagrams placed in a receive WQE */
	uint64_t ud_qkey_dropped = 0; /* dropped: the DETH's Q_Key is not the QP's */
	uint64_t ud_no_recv = 0;      /* dropped: no receive WQE posted */
	uint64_t ud_dropped = 0;      /* dropped: no such UD QP (QP 1: no GSI QP on the port),
					 not in RTR or RTS, no RQ */
};

/*
 * One entry of the wire responder's refusal record (EmuDataPath::key_refusals): requests from
 * another process or host that this device refused with a remote access error NAK, counted per
 * key of this device and per peer (the remote QP's GID and number).
 */
struct KeyRefusal {
	uint32_t rkey = 0;	   /* the key the requests carried */
	uint32_t local_qpn = 0;	   /* the responder QP that refused the last one */
	uint8_t peer_gid[16] = {}; /* the requester: its GID ... */
	uint32_t peer_qpn = 0;	   /* ... and its QP */
	uint32_t rights = 0;	   /* KeyRefusal::read / write / atomic: every kind refused */
	uint64_t count = 0;	   /* refusals of rkey to this peer */
	static constexpr uint32_t read = 1, write = 2, atomic = 4;
};

/* The UDP wire's counters (doc/device-model.md, "The UDP wire"). */
struct WireStats {
	uint64_t tx_packets = 0;    /* datagrams sent */
	uint64_t tx_errors = 0;	    /* sends the socket refused (the packet is lost) */
	uint64_t rx_packets = 0;    /* datagrams received */
	uint64_t rx_bad_icrc = 0;   /* dropped: the ICRC did not match */
	uint64_t rx_malformed = 0;  /* dropped: roce::parse refused another field */
	uint64_t rx_dropped = 0;    /* dropped: no such QP on the port, another sender than its
				       peer, a P_Key other than the default, a QP not ready, or a
				       response nothing waits for */
	uint64_t duplicates = 0;    /* requests with a PSN already executed (answered again) */
	uint64_t acks_sent = 0;	    /* ACKNOWLEDGE packets with an ACK */
	uint64_t lazy_acks = 0;	    /* ... of them for messages that did not ask (rc_lazy_ack) */
	uint64_t ack_requests = 0;  /* WRITE and SEND-family messages sent with AckReq */
	uint64_t naks_sent = 0;	    /* ACKNOWLEDGE packets with a NAK */
	uint64_t naks_received = 0; /* NAKs that completed a request in error */
	uint64_t rra_exceeded = 0;  /* READ/atomic requests beyond the responder's resources
				       (2^log_rra_max), NAKed as invalid requests */
	/* Fault injection on send (WireFaults), summed over the ports. */
	uint64_t tx_lost = 0;	    /* datagrams not sent */
	uint64_t tx_duplicated = 0; /* datagrams sent twice */
	uint64_t tx_reordered = 0;  /* datagrams held for a later one to pass */
	uint64_t tx_delayed = 0;    /* datagrams held delay_us */
	/* The send path (WireTxCounts), summed over the ports. */
	uint64_t tx_syscalls = 0;    /* send system calls: tx_packets / tx_syscalls per call */
	uint64_t tx_gso_sends = 0;   /* buffers the kernel cut into datagrams (UDP_SEGMENT) */
	uint64_t tx_gso_refused = 0; /* ports whose kernel refused GSO (then off there) */
	/* The receive path (WireRxCounts), summed over the ports. */
	uint64_t rx_gro_batches = 0;   /* messages that held several datagrams (UDP GRO) */
	uint64_t rx_gro_datagrams = 0; /* the datagrams they held (each counts in rx_packets) */
	/* Requester reliability. */
	uint64_t retransmits = 0;	/* request packets sent again */
	uint64_t timeouts = 0;		/* local ACK timeouts */
	uint64_t seq_naks_received = 0; /* PSN sequence error NAKs answered by a resend */
	uint64_t rnr_naks_received = 0; /* RNR NAKs */
	uint64_t retry_exceeded = 0;	/* requests failed with a retry counter exceeded */
};

class EmuDataPath {
public:
	static constexpr uint32_t kMaxWqeBytes = 63 * 16; /* ds is 6 bits */
	/* The first QP number CREATE_QP hands out: 0 and 1 are the special QPs' numbers on the
	 * wire (IBTA vol.1 ch.13: QP0 the SMI's, QP1 the GSI's), never a QP's own, so that a
	 * datagram to QP 1 can only mean the port's GSI QP. */
	static constexpr uint32_t kFirstQpn = 2;

	EmuDataPath(EmuIommu &mmu, MkeyTable &mkeys, const DpConfig &cfg);
	~EmuDataPath();
	EmuDataPath(const EmuDataPath &) = delete;
	EmuDataPath &operator=(const EmuDataPath &) = delete;

	const DpConfig &config() const noexcept { return cfg_; }

	/* UARs: ALLOC returns the lowest free index in 1..uars. -ENOSPC; DEALLOC: -ENOENT
	 * (not allocated), -EBUSY (a QP still rings it). */
	int alloc_uar(uint32_t *index);
	int dealloc_uar(uint32_t index);

	/*
	 * Object commands. 0 or: -EINVAL (a size or page size out of range, too few pages),
	 * -ENOSPC (table full), -ENOENT (a named object does not exist), -EBUSY (still used),
	 * -EFAULT (queue memory or record not reachable through the IOMMU), -EPERM (illegal QP
	 * transition); create_qp: -ENOENT (no such CQ), -ENXIO (UAR not allocated); create_cq:
	 * kNoSuchEq (c_eqn names no EQ); modify_qp of a GSI QP (QpAttr::gsi): RST2INIT -EBUSY
	 * (its port has a GSI QP out of RST already: one per port), INIT2RTR -EINVAL (another
	 * port than RST2INIT's). The caller has checked that PDs exist.
	 */
	int create_cq(const CqAttr &a, uint32_t *cqn);
	int destroy_cq(uint32_t cqn);
	int create_eq(const EqAttr &a, uint32_t *eqn);
	int destroy_eq(uint32_t eqn);
	int create_qp(const QpAttr &a, uint32_t *qpn);
	int destroy_qp(uint32_t qpn);
	int modify_qp(uint32_t qpn, QpTransition t, const QpPath &p);
	/* -ENOENT or 0 with *state / *info. */
	int qp_state(uint32_t qpn, QpState *state) const;
	int query_qp(uint32_t qpn, QpInfo *info) const;
	/*
	 * Shared receive queues (emu_mlx5_srq.cpp). create_srq: -EINVAL (size or stride out of
	 * range, too few or misaligned pages, record misaligned), -EFAULT (memory not mapped),
	 * -ENOSPC (table full). destroy_srq: -ENOENT, -EBUSY (a QP takes from it). query_srq:
	 * -ENOENT. arm_srq: the limit event (prm::event_type::srq_limit) once fewer than lwm
	 * WQEs are posted; -ENOENT, -EINVAL (lwm above the SRQ's size).
	 */
	int create_srq(const SrqAttr &a, uint32_t *srqn);
	int destroy_srq(uint32_t srqn);
	int query_srq(uint32_t srqn, SrqInfo *info) const;
	int arm_srq(uint32_t srqn, uint32_t lwm);
	/* QPs and CQs naming a PD / EQs named by CQs: for DEALLOC_PD and DESTROY_EQ checks. */
	bool pd_in_use(uint32_t pd) const;
	size_t qps() const;
	size_t cqs() const;
	/* Drops every object (TEARDOWN_HCA). */
	void clear();

	/*
	 * The SQ doorbell of UAR index uar, raw as the CPU stored the 8 ctrl bytes. by_value:
	 * process the QP the value names (inline delivery); otherwise, or when that QP is not
	 * on this UAR, every QP bound to the UAR (a poll thread's latest value may be another
	 * QP's). Thread-safe.
	 */
	void uar_doorbell(uint32_t uar, uint64_t raw, bool by_value);
	/* Executes qpn's posted WQEs (consumer counter up to dbr[1]). -ENOENT. Thread-safe. */
	int process_qp(uint32_t qpn);

	DpStats stats() const;
	bool check_invariants() const;

	/*
	 * The UDP wire (emu_mlx5_wire.h, emu_mlx5_rc.cpp). set_wire_port: port (1..ports) sends
	 * and receives RoCEv2 over w; call before any QP exists. A QP on such a port whose
	 * INIT2RTR has no force loopback (fl) talks to the peer its address path names; every
	 * other QP stays on the in-process loopback.
	 */
	void set_wire_port(uint32_t port, std::unique_ptr<WirePort> w);
	const WirePort *wire_port(uint32_t port) const noexcept
	{
		return port >= 1 && port <= wire_.size() ? wire_[port - 1].get() : nullptr;
	}
	/* The function's progress work: receives what the wire ports hold, executes it and
	 * answers. true when a datagram came. One caller at a time: the device thread or a
	 * polling application thread holding the function's progress token (emu_function.h,
	 * "Run to completion"). */
	bool poll_wire();
	/*
	 * Tests and fuzzing only (fuzz/fuzz_roce_datagram.cpp), never the device's own path:
	 * hands len bytes to wire port `port` as if its socket had received them from peer
	 * (with the IPv4 ID and DF of ip, which the ICRC covers), and runs them through what
	 * poll_wire runs for a received batch of one (parse, checks, execution, the coalesced
	 * ACK). Counted in rx_packets like a received datagram. 0, or -ENODEV when the port is
	 * not on the wire. Thread-safe (it shares no buffer with poll_wire).
	 */
	int wire_inject(uint32_t port, const uint8_t *buf, size_t len, const sockaddr_storage &peer,
			const WireRxIp &ip = {});
	WireStats wire_stats() const;
	/* The most (key, peer) pairs the refusal record holds; one more is counted as dropped. */
	static constexpr size_t kMaxKeyRefusals = 256;
	/* Copies up to n entries of the refusal record (emu_mlx5_refusals.cpp); the number of
	 * entries it holds; *dropped (when not null): refusals not recorded (the record full). */
	size_t key_refusals(KeyRefusal *out, size_t n, uint64_t *dropped) const;

	/* Where UMR work requests are recorded (emu_mlx5_trace.h); nullptr, the default, records
	 * nothing. Set once, before any QP exists. */
	void set_trace(CmdTrace *t) noexcept { trace_ = t; }
	/*
	 * Asynchronous events of the device itself (firmware page requests): writes one EQE of
	 * type with the 28 data bytes to the first EQ created whose event_bitmask has type.
	 * -ENOENT: no EQ takes the type (nothing written); -EOVERFLOW: that EQ is full (an
	 * overrun: the fatal handler ran). Thread-safe.
	 */
	int post_async(uint8_t type, const uint8_t *data28);
	/* Whether an EQ that takes type exists. */
	bool has_event_eq(uint8_t type) const;
	/*
	 * PAGE_FAULT_RESUME (emu_mlx5_odp.cpp, doc/device-model.md "On-demand paging"): ends the
	 * outstanding page fault token names. Without error the held WQE runs again (a wire
	 * responder executes the request when the requester retries it); with error it completes
	 * in error and nothing is written. -ENOENT: no outstanding fault has that token.
	 * Thread-safe.
	 */
	int page_fault_resume(uint32_t token, bool error);
	/* Page faults raised and not resumed. */
	size_t page_faults_outstanding() const;
	/* At most this many page faults are outstanding at once; a fault beyond them fails its
	 * access as a device without on-demand paging does. */
	static constexpr uint32_t kMaxPageFaults = 256;
	/*
	 * CQ arming and completion events (emu_mlx5_cq_events.cpp, doc/device-model.md "CQ
	 * arming"). cq_arm_doorbell: the 64-bit CQ doorbell of UAR page uar (+0x20), raw as the
	 * CPU stored it; by_value: act on the CQ it names only (inline delivery), otherwise also
	 * on every CQ whose doorbell record's arm word changed (a poll thread sees only the
	 * latest value of the UAR's doorbell). eq_arm_doorbell: a write of eqn << 24 | ci to the
	 * EQ doorbell at +0x40 of UAR page uar (update and arm). Thread-safe.
	 */
	void cq_arm_doorbell(uint32_t uar, uint64_t raw, bool by_value);
	void eq_arm_doorbell(uint32_t uar, uint32_t raw);
	/* Whom an armed EQ's event interrupts: raises MSI-X vector `vector`. Set once, before
	 * the function starts. */
	void set_irq_hook(std::function<void(uint32_t vector)> irq) { irq_ = std::move(irq); }
	/*
	 * Where the data path reads the EQ doorbells (BAR 0 words at the EQ's UAR page + 0x40 and
	 * + 0x48, prm::eq_doorbell) and whom it tells about an EQ overrun (a health syndrome:
	 * async_eq_overrun_err for an EQ that takes page requests or command events, eq_err for
	 * others). Set once, before the function starts.
	 */
	void set_device_hooks(std::function<uint32_t(size_t)> bar_read,
			      std::function<void(uint8_t synd)> fatal)
	{
		bar_read_ = std::move(bar_read);
		fatal_ = std::move(fatal);
	}

	/* The atomic caps' atomic_req_8B_endianness_mode (SET_HCA_CAP): true, host endianness
	 * (the target word and the returned old value in the host's byte order); false,
	 * big-endian (the power-on mode). Thread-safe. */
	void set_atomic_host_endianness(bool host) noexcept
	{
		/* relaxed: SET_HCA_CAP is refused once INIT_HCA ran, so no QP exists yet; QP
		 * creation and the doorbells after it order this store before every atomic. */
		atomic_host_endianness_.store(host, std::memory_order_relaxed);
	}
	bool atomic_host_endianness() const noexcept
	{
		return atomic_host_endianness_.load(std::memory_order_relaxed);
	}

private:
	struct Cq;
	struct Eq;
	struct Qp;
	struct Srq;
	struct Exec;
	struct UdDatagram;
	struct RcWire;
	struct TxBatch;
	friend struct Exec;

	/* count_doorbell: this run answers a doorbell that named the QP (statistics). */
	void run_qp(Qp &qp, bool count_doorbell);
	/* run_qp's work with the QP's lock held. */
	void run_sq(const DmaSection &dma, Qp &qp);
	/* The wire's RC transport (emu_mlx5_rc.cpp), QP lock held. */
	void rc_note(const DmaSection &dma, Qp &qp, uint16_t index, uint8_t opcode, bool signaled,
		     const Exec &ex, uint8_t syndrome);
	void rc_retire(const DmaSection &dma, Qp &qp);
	void rc_flush(const DmaSection &dma, Qp &qp);
	/* poll_wire's and wire_inject's work on one batch: each datagram parsed, checked and
	 * executed, then the batch's ACKs. for_each(deliver) calls deliver(datagram, peer, ip)
	 * for every datagram of the batch and returns how many there were. */
	template <typename ForEach>
	void rc_batch(WirePort &w, uint32_t port, ForEach &&for_each, bool defer_acks);
	/* The ACKs poll_wire's last batch of port owes (rc_batch with defer_acks), sent at the
	 * start of its next turn. Progress token held. */
	void rc_owed_acks(WirePort &w, uint32_t port);
	/* The coalesced ACK the QP still owes (ack_due), into tx when given, else at once. QP
	 * lock held. Callers:
	 * - rc_batch and rc_owed_acks, for the batch's QPs;
	 * - 2RST and destroy, before the QP's wire state goes (table lock held exclusive): a
	 *   NIC acknowledges what it executed whether or not its software polls again (IBTA
	 *   9.7.5.1.1), so a peer must not time out on a request this side completed and then
	 *   closed; lazy_too: the ACK of messages that did not ask for one too.
	 * Not the requester: an owed ACK sent with the QP's own next request (same sendmmsg,
	 * or one GSO message) made bench-wire's ping-pong 0.4 to 0.7 us slower, since the
	 * peer then receives and executes the ACK before it sees the request. */
	void rc_owed_ack(Qp &qp, TxBatch *tx = nullptr, bool lazy_too = false);
	void rc_packet(const DmaSection &dma, const WirePort &w, uint32_t port,
		       std::span<const uint8_t> datagram, const sockaddr_storage &peer,
		       const WireRxIp &ip, Qp **acks, int *nacks);
	void rc_request(const DmaSection &dma, Qp &qp, const roce::Parsed &pk, Qp **acks,
			int *nacks);
	void rc_response(const DmaSection &dma, Qp &qp, const roce::Parsed &pk);
	void rc_read_respond(const DmaSection &dma, Qp &qp, uint32_t psn, uint64_t va,
			     uint32_t rkey, uint32_t len);
	/* Sends an ACKNOWLEDGE (syndrome: roce::aeth::make_syndrome) for psn; into tx when
	 * given (sent with the batch), else at once. */
	void rc_ack(Qp &qp, uint8_t syndrome, uint32_t psn, TxBatch *tx = nullptr);
	void rc_rnr_nak(Qp &qp, uint32_t psn);
	/* A refused request: NAK (code), the responder QP to ERR and its event. */
	void rc_nak(const DmaSection &dma, Qp &qp, uint8_t code, uint32_t psn, uint8_t event);
	void rc_send(const RcWire &r, const uint8_t *pkt, size_t len);
	uint8_t rc_send_headers(const RcWire &r, const roce::Headers &h);
	/* Requester reliability (emu_mlx5_rc.cpp), QP lock held: the ACK and RNR timers at the
	 * turn's clock; every outstanding request again from PSN from; the oldest outstanding
	 * request fails with syndrome (a retry counter exceeded). */
	void rc_timers(const DmaSection &dma, Qp &qp, uint64_t now_ns);
	/* Responder, QP lock held: the ACK of messages that did not ask for one (lazy_ack),
	 * an eighth of the QP's ACK timeout (1 ms at most) after the scan that first saw it. */
	void rc_lazy_ack(Qp &qp, uint64_t now_ns);
	void rc_resend(const DmaSection &dma, Qp &qp, uint32_t from);
	void rc_give_up(const DmaSection &dma, Qp &qp, uint8_t syndrome);
	/* Whether a WQE of opcode must wait before it is sent: 2^log_sra_max READs and atomics
	 * are owed responses already. */
	bool rc_must_wait(Qp &qp, uint8_t opcode) const noexcept;
	/* Writes one CQE (REQ when syndrome is 0, else REQ_ERR). */
	void complete(const DmaSection &dma, Qp &qp, uint16_t wqe_counter, uint8_t opcode,
		      uint32_t byte_cnt, uint8_t syndrome);
	void post_event(const DmaSection &dma, uint8_t type, uint32_t qpn);
	/* An SRQ's event (mlx5_eqe_qp_srq type 1): emu_mlx5_srq.cpp. */
	void post_srq_event(const DmaSection &dma, uint8_t type, uint32_t srqn);
	/* A CQE of any kind on cq (emu_mlx5_wqe.cpp): cqe_opcode MLX5_CQE_*; syndrome and
	 * s_wqe_opcode for the error kinds. Table lock held (either way); cq's writers
	 * serialised by the caller when cq.users is 1. */
	struct CqeFields {
		uint32_t qpn = 0;
		uint32_t srqn = 0; /* a receive WQE of an SRQ: its number */
		uint16_t wqe_counter = 0;
		uint8_t opcode = 0; /* MLX5_CQE_* */
		uint32_t byte_cnt = 0;
		uint32_t imm = 0; /* imm_inval_pkey, host order of the big-endian field */
		uint8_t syndrome = 0;
		uint8_t s_wqe_opcode = 0;
		/* UD responder CQEs (prm::cqe::src_qpn, grh, l3_hdr_type); 0 otherwise. */
		uint32_t src_qpn = 0;
		uint8_t grh = 0;
		uint8_t l3_hdr_type = 0;
	};
	void write_cqe(const DmaSection &dma, Cq &cq, const CqeFields &f);
	/* UD (emu_mlx5_ud.cpp). ud_receive: a datagram for UD QP r, r's lock or the sending
	 * loopback QP's lock held (held: that QP's key list); Q_Key checked, a receive WQE
	 * taken, GRH and payload placed, the CQE written. ud_packet: a UD opcode from the wire
	 * (rc_packet hands it over after roce::parse). */
	void ud_receive(const DmaSection &dma, Qp &r, std::vector<const void *> &held,
			const UdDatagram &d);
	void ud_packet(const DmaSection &dma, const WirePort &w, uint32_t port,
		       const roce::Parsed &pk, const roce::IpPath &from, size_t datagram_len);
	/* The receive queue (emu_mlx5_recv.cpp), the QP's rq_lock held. */
	struct RecvWqe;
	enum class RqTake { ok, empty, fault };
	RqTake rq_take(const DmaSection &dma, Qp &qp, RecvWqe *out);
	/* rq_take of a QP attached to an SRQ (emu_mlx5_srq.cpp): the WQE it holds for a page
	 * fault, else the SRQ's head WQE (the SRQ's lock taken inside the QP's rq_lock). */
	RqTake srq_take(const DmaSection &dma, Qp &qp, RecvWqe *out);
	void rq_complete(const DmaSection &dma, Qp &qp, uint16_t index, uint8_t cqe_opcode,
			 uint32_t byte_cnt, uint32_t imm, uint8_t syndrome);
	/* Every receive WQE posted and not consumed completes with WR_FLUSH_ERR (QP in ERR). */
	void rq_flush(const DmaSection &dma, Qp &qp);
	/* The responder's side of a failed receive: its CQE with syndrome, the QP to ERR, the
	 * rest of its RQ flushed. */
	void rq_fail(const DmaSection &dma, Qp &qp, uint16_t index, uint8_t syndrome);
	/* SEND with invalidate on the responder (IBTA 10.6.6.1 / o10-39): the key must be an
	 * mkey of the QP's PD with en_rinval, live, variant matching. Checked under keys'
	 * hold (check), applied after it (invalidate). kOk or REMOTE_INVAL_REQ_ERR. */
	uint8_t rinval_check(MkeyTable::Hold &keys, const Qp &qp, uint32_t rkey);
	uint8_t rinval_apply(const Qp &qp, uint32_t rkey);
	/* The wire's responder for SEND, SEND with immediate / invalidate (emu_mlx5_recv.cpp).
	 * QP lock held. */
	void rc_recv_send(const DmaSection &dma, Qp &qp, const roce::Parsed &pk, uint32_t psn,
			  bool *owe_ack);
	/* After CQE cq.produced - 1 was written (the one call complete() makes;
	 * emu_mlx5_cq_events.cpp): an armed CQ's completion event. solicited: the CQE is solicited
	 * or an error. Table lock held shared; the CQ's producer lock held. Device hot path: one
	 * atomic load when the CQ is not armed. */
	void cq_completed(const DmaSection &dma, Cq &cq, bool solicited);
	/* Arms cq (cmd prm::cq_doorbell::cmd_*, the consumer index of the arm); fires at once
	 * when CQEs the arm asks for lie beyond ci. Table lock held shared. */
	void cq_arm(const DmaSection &dma, Cq &cq, uint32_t arm_word);
	/* The completion EQE for cq on its c_eqn EQ, and the EQ's interrupt when it is armed. */
	void comp_event(const DmaSection &dma, Cq &cq);
	/* The first EQ created that takes type, or null. Caller holds table_lock_. */
	Eq *event_eq(uint8_t type) const;
	/* Writes one EQE (type, the 28 data bytes) unless the EQ is full: then -EOVERFLOW and the
	 * fatal hook. Takes eq.lock. */
	int write_eqe(const DmaSection &dma, Eq &eq, uint8_t type, const uint8_t *data28,
		      uint8_t sub_type = 0);
	/* On-demand paging (emu_mlx5_odp.cpp). A fault the WQE engine found (Exec::Fault). */
	struct Fault;
	/* Whether a page fault can be raised now: on-demand paging on and an EQ takes page
	 * faults. Table lock held. */
	bool can_fault() const;
	/* Raises f for the WQE at index of qp (requester) or for qp as the wire's responder:
	 * the event, and a token. false when it cannot (no EQ, every token in use, the EQ
	 * full). QP lock held (table lock shared). */
	bool raise_fault(const DmaSection &dma, Qp &qp, uint16_t index, const Fault &f,
			 bool wire_responder, uint32_t *token);
	/* A wire responder's request touched a page not present (rc_request): the fault, and an
	 * RNR NAK for psn; false when no fault could be raised (the caller refuses it). */
	bool rc_fault(const DmaSection &dma, Qp &qp, uint32_t psn, uint32_t rkey, uint64_t va,
		      uint64_t len, bool write);
	/* A receive WQE's scatter list touched a page not present (emu_mlx5_odp.cpp). The
	 * loopback (Exec::deliver): recv_fault fills f for the responder r's WQE rw and gives
	 * the WQE back to r's RQ; false when no fault can be raised. The wire (rc_recv_send):
	 * rc_recv_fault raises it for the packet psn of plen bytes and answers RNR NAK; false
	 * when it cannot. rq_lock of the QP held. */
	bool recv_fault(Qp &r, const RecvWqe &rw, uint64_t packet_len, Fault *f);
	bool rc_recv_fault(const DmaSection &dma, Qp &qp, uint32_t psn, const RecvWqe &rw,
			   uint64_t plen);
	/* A receive fault resumed with an error: the receive WQE at the head of r's RQ (or the
	 * wire's SEND in progress) completes with syndrome, r goes to ERR and the rest of its RQ
	 * is flushed; nothing was written. Takes r.rq_lock. */
	void recv_fault_failed(const DmaSection &dma, Qp &r, uint8_t syndrome);
	/* Gives back the receive WQE rq_take took last (a receive held for a page fault: the
	 * retry takes it again). rq_lock held. */
	void rq_untake(Qp &qp);
	Qp *find_qp(uint32_t qpn) const;
	/* The QP a UD datagram to dqpn reaches on port: dqpn's own, or for QP 1 (prm::gsi::qpn)
	 * the port's GSI QP; null when none. Table lock held (either way). */
	Qp *find_ud_qp(uint32_t dqpn, uint32_t port) const;
	void retire_qp(const Qp &qp);
	void retire_cq(const Cq &cq);

	EmuIommu &mmu_;
	MkeyTable &mkeys_;
	const DpConfig cfg_;

	/* Readers (the doorbell path) touch only their thread's cache line. */
	mutable SlotRwLock table_lock_;
	std::map<uint32_t, std::unique_ptr<Cq>> cqs_;
	std::map<uint32_t, std::unique_ptr<Eq>> eqs_;
	std::map<uint32_t, std::unique_ptr<Qp>> qps_;
	std::map<uint32_t, std::unique_ptr<Srq>> srqs_;
	uint32_t next_srqn_ = 1;
	std::vector<std::vector<uint32_t>> uar_qps_; /* QPs bound to each UAR index */
	std::vector<bool> uar_allocated_;
	std::vector<Qp *> qp_index_; /* by QP number, for the doorbell path; as qps_ */
	/* Each port's GSI QP by its device number (0: none), by port - 1: set at its RST2INIT,
	 * cleared at its 2RST and destroy. Written with table_lock_ exclusive and read with it
	 * shared (the datagram paths), so a plain word: the lock orders them. */
	std::array<uint32_t, 2> gsi_qpn_{};
	uint32_t next_qpn_ = kFirstQpn, next_cqn_ = 1;
	uint64_t eq_created_ = 0; /* creation order, to find the first EQ */
	std::atomic<bool> atomic_host_endianness_{false};
	CmdTrace *trace_ = nullptr; /* set before any QP: read without ordering by the WQE engine */
	std::array<std::unique_ptr<WirePort>, 2> wire_; /* by port - 1; null: loopback */
	/* QPs one receive batch (a port's WireRx, received by poll_wire) owes a coalesced ACK;
	 * beyond them an ACK goes at once. */
	static constexpr int kRxAcks = 64;
	uint64_t rx_batch_ = 0; /* receive batches taken (poll_wire; one caller at a time) */
	/* The QPs (numbers) poll_wire's last batch of each port owes an ACK: sent at the next
	 * turn, so that a polling caller sees what the batch wrote before the ACK's sendmmsg
	 * (doc/device-model.md, "ACK coalescing"). The progress token's holder's alone. */
	std::array<std::array<uint32_t, kRxAcks>, 2> owed_acks_{};
	std::array<int, 2> nowed_acks_{};
	uint64_t next_timer_scan_ns_ = 0; /* poll_wire's timer scan (one caller at a time) */
	static constexpr uint64_t kTimerScanNs = 20000; /* the timers' granularity: 20 us */
	struct WireCounters {
		std::atomic<uint64_t> tx_packets{0}, tx_errors{0}, rx_packets{0}, rx_bad_icrc{0},
			rx_malformed{0}, rx_dropped{0}, duplicates{0}, acks_sent{0}, lazy_acks{0},
			ack_requests{0}, naks_sent{0}, naks_received{0}, retransmits{0},
			timeouts{0}, seq_naks_received{0}, rnr_naks_received{0}, retry_exceeded{0},
			rra_exceeded{0};
	};
	mutable WireCounters wctr_;
	/* The wire responder's refusals (emu_mlx5_refusals.cpp): refusal_mu_ guards them; taken
	 * only on a refused request, never with it held is another lock taken. */
	void record_refusal(const Qp &qp, uint32_t rkey, uint32_t rights);
	mutable std::mutex refusal_mu_;
	std::array<KeyRefusal, kMaxKeyRefusals> refusals_{};
	size_t nrefusals_ = 0;
	uint64_t refusals_dropped_ = 0;
	std::function<uint32_t(size_t)> bar_read_;
	std::function<void(uint8_t)> fatal_;
	std::function<void(uint32_t)> irq_;

	struct Counters {
		std::atomic<uint64_t> wqes{0}, cqes{0}, cqe_errors{0}, cq_overruns{0}, eqes{0},
			events_dropped{0}, bytes{0}, doorbells{0}, dbr_faults{0}, eq_overruns{0},
			recvs{0}, rnr{0}, cq_arms{0}, comp_events{0}, interrupts{0},
			arms_dropped{0}, page_faults{0}, pf_resumes{0}, pf_errors{0}, ud_sent{0},
			ud_received{0}, ud_qkey_dropped{0}, ud_no_recv{0}, ud_dropped{0};
	};
	/* Outstanding page faults by token & (kMaxPageFaults - 1): the QP that waits (its
	 * number), whether it waits as the wire's responder. Guarded by pf_lock_, which nests
	 * inside a QP's lock and is never held while another lock is taken. */
	struct FaultSlot {
		bool live = false;
		uint32_t token = 0;
		uint32_t qpn = 0;
		bool wire_responder = false;
	};
	/* UMR work requests executed, counted only with cfg_.fail_umr (fault injection). */
	std::atomic<uint64_t> umrs_{0};
	mutable std::mutex pf_lock_;
	std::array<FaultSlot, kMaxPageFaults> pf_slots_{};
	uint32_t pf_next_ = 0; /* tokens handed out; pf_lock_ */
	/* Relaxed: statistics only. The per-WQE ones live in the QPs and CQs (bumped under their
	 * locks, no read-modify-write) and move here when those go. */
	mutable Counters ctr_;
};

} // namespace nicmr::emu

#endif
