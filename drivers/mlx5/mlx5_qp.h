/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An RC queue pair: a send queue for RDMA WRITE (with immediate), READ, atomics, SEND (with
 * immediate, with invalidate), LOCAL_INVAL and UMR, and optionally its own receive queue
 * (QpParams::max_recv_sge > 0; otherwise rq_type zero-length) whose completions go to the send
 * CQ or a CQ of their own.
 *
 *   QP buffer (one DMA block): | RQ: 2^log_rq_size slots of max_recv_sge data segs | SQ ... |
 *   post_recv: data segs (zero-length SGEs skipped), MLX5_INVALID_LKEY after the last when the
 *   slot has room (rdma-core providers/mlx5/qp.c, mlx5_post_recv) -> I/O write barrier ->
 *   dbr[0] = RQ producer counter (BE32, low 16 bits). No MMIO: the device reads the record
 *   when a message arrives.
 *
 * States, as the device keeps them: RST -RST2INIT-> INIT -INIT2RTR-> RTR -RTR2RTS-> RTS; any
 * state -2ERR-> ERR; any state -2RST-> RST. An illegal transition is refused by the device with
 * BAD_QP_STATE (-EINVAL). A WQE that fails moves the QP to ERR; every later WQE completes with
 * MLX5_CQE_SYNDROME_WR_FLUSH_ERR until 2RST.
 *
 * Posting (hot path, one thread per QP, no lock):
 *   write the WQE into the ring -> release fence -> dbr[1] = producer counter (WQEBBs, BE32)
 *   -> release fence (store-store before MMIO) -> 64-bit store of the ctrl segment's first
 *   8 bytes to the UAR's doorbell (0x800).
 * The device executes WQEs from its consumer index up to dbr[1] and writes a CQE for each
 * signalled WQE and for every error; Qp::poll maps CQEs back to the wr_id given at posting and
 * frees their WQEBBs (an unsignalled WQE's room comes back with the next signalled one).
 */
#ifndef NICMR_MLX5_QP_H
#define NICMR_MLX5_QP_H

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mlx5_cq.h"
#include "mlx5_dp_commands.h"
#include "mlx5_qbuf.h"
#include "mlx5_uar.h"
#include "mlx5_wqe.h"
#include "nicmr_align.h"

namespace nicmr::mlx5 {

/* One gather/scatter entry: an address in the lkey's address space. */
struct Sge {
	uint64_t addr = 0;
	uint32_t length = 0;
	uint32_t lkey = 0;
};

class Srq;

struct QpParams {
	uint32_t pd = 0;
	uint32_t log_sq_size = 8; /* 2^n WQEBBs, 1..15; the CQ must have at least as many CQEs */
	uint32_t port = 1;	  /* 1 or 2 */
	/* Responder enables: what a connected peer may do to this QP's memory. */
	bool rre = false, rwe = false, rae = false;
	uint32_t log_sra_max = 3; /* outstanding READ/ATOMIC as requester: 2^n */
	uint32_t log_rra_max = 3; /* as responder */
	/* The QP posts UMRs: created with fre and rlky (UmrQueue's QPs). A UMR on a QP without
	 * fre completes with LOCAL_QP_OP_ERR. */
	bool umr = false;
	/* The receive queue: max_recv_sge 0 (the default) makes none; 1..32 SGEs per receive
	 * WQE (slots of 16 B per SGE rounded up to a power of two, 512 B at most: ConnectX's
	 * max_desc_sz_rq). 2^log_rq_size receive WQEs, 0..15 (raised so that the RQ takes at
	 * least one 64-byte WQEBB: the SQ after it stays WQEBB-aligned). recv_cq: where receive
	 * completions go (null: the send CQ); it needs a CQE per receive WQE (plus the SQ's when
	 * it is the send CQ). */
	uint32_t log_rq_size = 0;
	uint32_t max_recv_sge = 0;
	Cq *recv_cq = nullptr;
	/* A shared receive queue (mlx5_srq.h) instead of an RQ of its own (max_recv_sge must be
	 * 0 then): receive completions go to recv_cq (or the send CQ) with the SRQ WQE's index
	 * and the SRQ's number; it must outlive the QP. */
	Srq *srq = nullptr;

	/*
	 * The RC connection (INIT2RTR, RTR2RTS). Defaults are the values of the loopback QPs of
	 * rdma-core (providers/mlx5/dr_send.c, dr_prepare_qp_to_rts: MTU 1024, ACK timeout 14,
	 * 7 retries, 7 RNR retries, minimum RNR timer 12) and DPDK
	 * (drivers/common/mlx5/mlx5_devx_cmds.c, mlx5_devx_cmd_modify_qp_state: log_msg_max 30,
	 * force loopback, PSNs 0). A wire between hosts sets the address path and the PSNs.
	 */
	uint32_t mtu = prm::qp_mtu::mtu_1024; /* path MTU, prm::qp_mtu: 1..5 (256..4096 bytes) */
	/* Largest message 2^n bytes, 0..31; above the device's Caps::log_max_msg the QP takes
	 * that (the device refuses more). */
	uint32_t log_msg_max = 30;
	/* Address path. force_loopback: the fl bit, used when the device allows it on an RC QP
	 * (Caps::roce_force_loopback); otherwise the path names the local GID table entry
	 * gid_index (below Caps::roce_address_table_size) and the peer's GID remote_gid, which
	 * then must not be all zeroes (connect() refuses it with -EINVAL, nothing sent). */
	bool force_loopback = true;
	uint32_t gid_index = 0;
	std::array<uint8_t, 16> remote_gid{};
	uint32_t sq_psn = 0;	  /* next_send_psn: first PSN this QP sends, 24 bits */
	uint32_t rq_psn = 0;	  /* next_rcv_psn: first PSN it expects (the peer's sq_psn) */
	uint32_t retry_count = 7; /* transport retries, 0..7 */
	uint32_t rnr_retry = 7;	  /* RNR NAK retries, 0..7 (7: without end) */
	uint32_t ack_timeout =
		14; /* local ACK timeout 4.096 us * 2^n, 0..31 (0: none); 14 = 67 ms */
	uint32_t min_rnr_timer = 12; /* min_rnr_nak, IB encoding 0..31; 12 = 0.64 ms */
	/* qpc.log_ack_req_freq (RTR2RTS), 0..15: the QP sets BTH AckReq on the last packet of a
	 * message when 2^n packets went out since the last one that did, and on every message
	 * whose WQE asks for a CQE; 0: on every message. Linux's mlx5 FPGA connection
	 * (drivers/net/ethernet/mellanox/mlx5/core/fpga/conn.c, mlx5_fpga_conn_rts_qp) sets 8. */
	uint32_t log_ack_req_freq = 0;
	/*
	 * UD (unreliable datagram, mlx5_qp_ud.cpp): ud makes qpc.st UD. q_key: the Q_Key its
	 * receives must carry (IBTA 10.2.5), set at RST2INIT. A UD QP has no connection: connect()
	 * takes the remote QPN 0, every send names its destination (post_ud_send), mtu is the
	 * largest datagram (mtu_bytes()), and the address path and PSN fields above except sq_psn
	 * are unused. The responder enables and umr must be false.
	 */
	bool ud = false;
	uint32_t q_key = 0;
	/*
	 * gsi (implies ud): the port's GSI QP, CREATE_QP with qpc.st QP1 (prm::gsi): the wire
	 * knows it as QP 1 on `port`, its datagrams carry source QP 1, and its Q_Key is
	 * prm::gsi::q_key whatever q_key says. The device has one per port: RST2INIT (connect)
	 * of a second on a port refuses it (the device model: RESOURCE_BUSY, -EBUSY).
	 */
	bool gsi = false;
};

/* Where a UD send goes (post_ud_send). */
struct UdDest {
	std::array<uint8_t, 16> gid{}; /* the peer port's GID (IPv4-mapped for IPv4) */
	uint32_t qpn = 0;	       /* the peer UD QP, 24 bits */
	/* The Q_Key the peer QP has; bit 31 set: this QP's own (IBTA 10.2.5). */
	uint32_t q_key = 0;
	uint16_t udp_sport = 0; /* RoCEv2 UDP source port hint (the emulated port ignores it) */
	bool force_loopback = false; /* the device's own loopback, whatever the port */
};

/* A WQE being built: its ctrl segment, the cursor after it, its index and size. */
struct WqeSlot {
	mlx5_wqe_ctrl_seg *ctrl = nullptr;
	SqCursor cur;
	uint16_t index = 0;
	uint32_t bbs = 0;
};

class alignas(kThreadAlign) Qp { /* one thread posts on it: no line shared with a neighbour */
public:
	/*
	 * CREATE_QP (state RST) on dev with SQ ring and doorbell record from dev.arena(); uar and
	 * cq must outlive the QP. ts_format: free running when the device's RoCE caps stamp only
	 * free-running time (or it has none), else the device's default (Linux
	 * include/linux/mlx5/qp.h, mlx5_get_qp_default_ts; DPDK takes the RoCE caps' qp_ts_format
	 * the same way). Errors: -EINVAL (log_sq_size outside 1..15, port outside 1..2, cq
	 * smaller than the SQ, mtu outside 1..5, log_msg_max above 31, gid_index above 255, a PSN
	 * above 24 bits, retry_count or rnr_retry above 7, ack_timeout or min_rnr_timer above
	 * 31), -ENOMEM, the command's. A failed create leaves nothing.
	 */
	static int create(Device &dev, Uar &uar, Cq &cq, const QpParams &p,
			  std::unique_ptr<Qp> *out);
	/* DESTROY_QP, then frees the memory (errors are logged). */
	~Qp();
	Qp(const Qp &) = delete;
	Qp &operator=(const Qp &) = delete;

	uint32_t qpn() const noexcept { return qpn_; }
	uint32_t pd() const noexcept { return attr_.pd; }
	uint32_t port() const noexcept { return attr_.port; }
	uint32_t remote_qpn() const noexcept { return attr_.remote_qpn; }
	Cq &cq() noexcept { return cq_; }
	/* Where receive completions go (the send CQ unless QpParams::recv_cq). */
	Cq &recv_cq() noexcept { return *rcq_; }
	bool has_rq() const noexcept { return rq_size_ != 0; }
	/* The SRQ its receives come from (QpParams::srq), or null. */
	Srq *srq() const noexcept { return srq_; }
	Device &device() noexcept { return dev_; }

	/* Transitions (slow path). Errors: the command's; BAD_QP_STATE gives -EINVAL. to_rtr
	 * also -EINVAL (nothing sent) when force loopback is not used and remote_gid is all
	 * zeroes. */
	int to_init();
	int to_rtr(uint32_t remote_qpn);
	int to_rts();
	int to_err();
	/* 2RST; also restarts the SQ at index 0 and forgets WQEs not completed. Poll the CQ
	 * empty first: CQEs of the old numbering would otherwise be taken for new WQEs. */
	int to_reset();
	/* Replaces the RC connection fields (mtu, force_loopback, gid_index, remote_gid, sq_psn,
	 * rq_psn, retry_count, rnr_retry, ack_timeout, min_rnr_timer) by p's, for the next
	 * connect() and every recover() after it; nothing sent, the other fields of p ignored.
	 * Only while the QP is in RST (the caller's business: the transitions read them). -EINVAL
	 * for a field out of range, as create. */
	int set_connection(const QpParams &p);
	/* RST -> INIT -> RTR (remote_qpn) -> RTS. */
	int connect(uint32_t remote_qpn);
	/* After an error: 2RST, then connect() again to the same remote QP. */
	int recover();
	/* The device's view of the state (QUERY_QP): prm::qp_state. */
	int query_state(uint32_t *state);

	/*
	 * Posting. Hot path: no lock, no allocation, no system call; one thread at a time.
	 * Errors: -ENOSPC (the SQ has no room: poll first), -EINVAL (too many segments for one
	 * WQE: ds above 63, or an inline payload above max_inline()).
	 */
	int post_nop(uint64_t wr_id, unsigned flags) noexcept;
	int post_write(std::span<const Sge> sgl, uint64_t raddr, uint32_t rkey, uint64_t wr_id,
		       unsigned flags) noexcept;
	int post_write_inline(const void *data, uint32_t len, uint64_t raddr, uint32_t rkey,
			      uint64_t wr_id, unsigned flags) noexcept;
	int post_read(std::span<const Sge> sgl, uint64_t raddr, uint32_t rkey, uint64_t wr_id,
		      unsigned flags) noexcept;
	/* 64-bit atomics: the original value lands big-endian at result (8 bytes). */
	int post_atomic_cs(const Sge &result, uint64_t raddr, uint32_t rkey, uint64_t compare,
			   uint64_t swap, uint64_t wr_id, unsigned flags) noexcept;
	int post_atomic_fa(const Sge &result, uint64_t raddr, uint32_t rkey, uint64_t add,
			   uint64_t wr_id, unsigned flags) noexcept;
	/*
	 * The SEND family (the peer's receive WQE takes the message; none there: RNR, see
	 * doc/data-path.md). imm in host order: it arrives as the peer's Completion::imm. A SEND
	 * with invalidate names the peer's rkey to invalidate (an MR of the peer QP's PD
	 * allowing remote invalidation). post_write_imm: an RDMA WRITE that also consumes a
	 * receive WQE at the peer and hands it imm.
	 */
	int post_send(std::span<const Sge> sgl, uint64_t wr_id, unsigned flags) noexcept;
	int post_send_inline(const void *data, uint32_t len, uint64_t wr_id,
			     unsigned flags) noexcept;
	int post_send_imm(std::span<const Sge> sgl, uint32_t imm, uint64_t wr_id,
			  unsigned flags) noexcept;
	int post_send_inval(std::span<const Sge> sgl, uint32_t rkey, uint64_t wr_id,
			    unsigned flags) noexcept;
	int post_write_imm(std::span<const Sge> sgl, uint64_t raddr, uint32_t rkey, uint32_t imm,
			   uint64_t wr_id, unsigned flags) noexcept;
	/*
	 * UD QPs (mlx5_qp_ud.cpp): one datagram of sgl's bytes to `to`, with the immediate imm
	 * (host order) when with_imm. The receiver gets a 40-byte GRH before the data. Hot path
	 * as the others. Errors: -ENOTSUP (not a UD QP), -EINVAL (more than max_ud_sge() SGEs,
	 * a QPN above 24 bits), -EMSGSIZE (more bytes than mtu_bytes(): IBTA C10-93.1.1 lets
	 * nothing be sent), -ENOSPC.
	 */
	int post_ud_send(std::span<const Sge> sgl, const UdDest &to, bool with_imm, uint32_t imm,
			 uint64_t wr_id, unsigned flags) noexcept;
	bool ud() const noexcept { return attr_.ud; }
	/* The port's GSI QP (QpParams::gsi): peers send to prm::gsi::qpn, not qpn(). */
	bool gsi() const noexcept { return attr_.gsi; }
	/* The path MTU in bytes (QpParams::mtu): a UD QP's largest datagram. */
	uint32_t mtu_bytes() const noexcept { return 128u << attr_.mtu; }
	/* UD: data segments after the ctrl and datagram segments. */
	static constexpr uint32_t max_ud_sge() noexcept { return kMaxWqeDs - 4; }
	/*
	 * A receive WQE of sgl (zero-length entries are skipped). Hot path: no lock, no
	 * allocation, no system call; one thread at a time (it may be another than the
	 * posting one). Errors: -ENOSPC (the RQ is full: poll its completions first), -EINVAL
	 * (more SGEs than max_recv_sge), -ENOTSUP (the QP has no RQ).
	 */
	int post_recv(std::span<const Sge> sgl, uint64_t wr_id) noexcept;
	/* Sets mkey free (MLX5_OPCODE_LOCAL_INVAL with the mkey in imm). */
	int post_local_inval(uint32_t mkey, uint64_t wr_id, unsigned flags) noexcept;
	/* Rings the doorbell for WQEs posted with kNoDoorbell (nothing when none is pending). */
	void ring() noexcept;

	/* Building blocks for other WQE kinds (mlx5_umr.h). begin(): -ENOSPC, -EINVAL as above. */
	int begin(uint32_t ds, WqeSlot *w) noexcept;
	/* imm in host order: the ctrl segment's immediate (the mkey of UMR, LOCAL_INVAL). */
	void finish(WqeSlot &w, uint8_t opcode, uint32_t ds, uint32_t imm, uint64_t wr_id,
		    unsigned flags) noexcept;

	/*
	 * Hot path: polls the QP's send CQ (one CQ per QP for this call: completions of other
	 * QPs on the same CQ are dropped — route them with Cq::poll and retire() instead). Fills
	 * wr_id; receive completions (Completion::recv()) found there, when the RQ shares the
	 * CQ, are retired from the RQ.
	 */
	int poll(Completion *out, int max) noexcept;
	/* As poll(), on the receive CQ (the same as poll() when the RQ shares the send CQ). */
	int poll_recv(Completion *out, int max) noexcept;
	/* Frees the WQEBBs up to and including the WQE at wqe_index; returns its wr_id. */
	uint64_t retire(uint16_t wqe_index) noexcept;
	/* Frees the receive WQEs up to and including index; returns its wr_id. With an SRQ
	 * (QpParams::srq): Srq::retire(index), the WQE back on the SRQ's list. */
	uint64_t retire_recv(uint16_t index) noexcept;
	/* Routes one completion of this QP (Completion::recv() or not) to retire or
	 * retire_recv and fills its wr_id. */
	void take(Completion &c) noexcept
	{
		c.wr_id = c.recv() ? retire_recv(c.wqe_index) : retire(c.wqe_index);
	}

	/*
	 * On-demand paging: the data segments of the send WQE at wqe_index, read back from the
	 * SQ (Linux odp.c reads the faulting WQE the same way: mlx5_ib_read_wqe_sq, then
	 * pagefault_data_segments), for a WQE page fault. Skips the remote-address and atomic
	 * segments and inline data. *scatter: the segments receive data (RDMA READ, atomics).
	 * Returns how many went into out (at most max); -EINVAL when the slot holds no WQE of
	 * that index (it completed). Slow path; call while the WQE is outstanding.
	 */
	int wqe_sges(uint16_t wqe_index, Sge *out, int max, bool *scatter) const noexcept;
	/*
	 * On-demand paging: the data segments of the receive WQE at wqe_index (the RQ's 16-bit
	 * counter), read back from the RQ up to the MLX5_INVALID_LKEY terminator or the slot's
	 * end (Linux odp.c: mlx5_ib_read_wqe_rq, then mlx5_ib_mr_responder_pfault_handler_rq
	 * bounds the WQE to the RQ's stride and pagefault_data_segments walks it), for a
	 * responder's receive WQE fault. How many went into out (at most max); -ENOTSUP without
	 * an RQ; -EINVAL when wqe_index is not a posted receive that has not completed. Slow
	 * path.
	 */
	int rq_wqe_sges(uint16_t wqe_index, Sge *out, int max) const noexcept;

	/* WQEBBs free now; WQEBBs in the ring. */
	uint32_t sq_room() const noexcept { return sq_size_ - (sq_pi_ - sq_ci_); }
	uint32_t sq_size() const noexcept { return sq_size_; }
	/* Receive WQEs free now; in the RQ; SGEs per receive WQE. */
	uint32_t rq_room() const noexcept { return rq_size_ - (rq_pi_ - rq_ci_); }
	uint32_t rq_size() const noexcept { return rq_size_; }
	uint32_t max_recv_sge() const noexcept { return rq_max_gs_; }
	/* Largest payload of post_write_inline. */
	static constexpr uint32_t max_inline() noexcept { return (kMaxWqeDs - 2) * 16 - 4; }
	/* Largest scatter/gather list of post_write/post_read. */
	static constexpr uint32_t max_sge() noexcept { return kMaxWqeDs - 2; }
	/* The SEND family's (no remote-address segment): one more of each. */
	static constexpr uint32_t max_send_sge() noexcept { return kMaxWqeDs - 1; }
	static constexpr uint32_t max_send_inline() noexcept { return (kMaxWqeDs - 1) * 16 - 4; }

private:
	Qp(Device &dev, Uar &uar, Cq &cq) : dev_(dev), uar_(uar), cq_(cq), rcq_(&cq) {}
	int post_rdma(uint8_t opcode, std::span<const Sge> sgl, uint64_t raddr, uint32_t rkey,
		      uint64_t wr_id, unsigned flags, uint32_t imm = 0) noexcept;
	int post_msg(uint8_t opcode, std::span<const Sge> sgl, uint32_t imm, uint64_t wr_id,
		     unsigned flags) noexcept;
	int poll_cq(Cq &cq, Completion *out, int max) noexcept;

	Device &dev_;
	Uar &uar_;
	Cq &cq_;
	Cq *rcq_;
	QueueBuffer ring_;
	QueueBuffer dbr_;
	std::vector<uint64_t> wr_ids_; /* by WQE start slot */
	std::vector<uint8_t> wqe_bbs_; /* by WQE start slot */
	QpAttr attr_;
	uint32_t qpn_ = 0;
	bool created_ = false;
	uint8_t *sq_ = nullptr;
	uint32_t *dbr_sq_ = nullptr;
	uint32_t sq_size_ = 0; /* WQEBBs */
	uint32_t sq_pi_ = 0;   /* WQEBBs posted, ever (low 16 bits are the WQE index) */
	uint32_t sq_ci_ = 0;   /* WQEBBs completed */
	uint32_t rung_pi_ = 0; /* sq_pi_ at the last doorbell */
	mlx5_wqe_ctrl_seg *last_ctrl_ = nullptr;
	/* The receive queue (rq_size_ 0: none). */
	uint8_t *rq_ = nullptr;
	uint32_t *dbr_rq_ = nullptr;
	uint32_t rq_size_ = 0;	 /* receive WQEs */
	uint32_t rq_shift_ = 0;	 /* log2 of a slot's bytes */
	uint32_t rq_max_gs_ = 0; /* data segments a slot holds */
	uint32_t rq_pi_ = 0;	 /* receive WQEs posted, ever */
	uint32_t rq_ci_ = 0;	 /* receive WQEs completed */
	std::vector<uint64_t> rq_wr_ids_;
	Srq *srq_ = nullptr;
};

} // namespace nicmr::mlx5

#endif
