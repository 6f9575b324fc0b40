/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Data-path command encoders: UAR, EQ, CQ and QP commands (ALLOC_UAR ... 2RST_QP), built
 * through the layout table and run on any CmdTransport, like mlx5_commands.h.
 *
 * Every function returns 0 or a negative errno: the transport's (mlx5_cmd.h: BAD_QP_STATE and
 * BAD_PARAM give -EINVAL, BAD_INDEX -ENXIO, EXCEED_LIM -ENOMEM, NO_RESOURCES -ENOSPC), -EINVAL
 * for arguments refused before anything is sent (sizes out of range, an empty page list), or
 * -ENOMEM when the encoding buffer cannot be allocated. Slow path.
 */
#ifndef NICMR_MLX5_DP_COMMANDS_H
#define NICMR_MLX5_DP_COMMANDS_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mlx5_cmd.h"
#include "mlx5_prm.h"

namespace nicmr::mlx5 {

/* A ring in host DMA memory: its pages (4 KiB << log_page_size each) and doorbell record. */
struct QueueMemory {
	std::span<const uint64_t> pas; /* page IOVAs, in ring order */
	uint32_t log_page_size = 0;    /* over 4 KiB */
};

struct EqCreate {
	uint32_t log_size = 6; /* 2^n 64-byte EQEs */
	uint32_t uar = 0;
	uint32_t intr = 0;
	uint64_t event_bitmask = 0; /* prm::event_bit(type) | ... */
	QueueMemory mem;
};

struct CqCreate {
	uint32_t log_size = 8; /* 2^n 64-byte CQEs */
	uint32_t uar = 0;
	uint32_t eqn = 0;
	uint64_t dbr_iova = 0;
	QueueMemory mem;
};

struct QpCreate {
	uint32_t pd = 0;
	uint32_t uar = 0;
	uint32_t log_sq_size = 8; /* 2^n 64-byte WQEBBs, 1..15 */
	uint32_t cqn_snd = 0;
	uint32_t cqn_rcv = 0; /* the RQ's CQ; without an RQ the device may still want one */
	/* The QP's own RQ (rq_type regular), first in mem: 2^log_rq_size slots of
	 * 16 << log_rq_stride bytes. rq false: rq_type zero-length. */
	bool rq = false;
	uint32_t log_rq_size = 0;
	uint32_t log_rq_stride = 0;
	/* Not 0 (and rq false): rq_type SRQ, receive WQEs from this SRQ (mlx5_srq.h). */
	uint32_t srqn = 0;
	uint64_t dbr_iova = 0;
	QueueMemory mem;
	/* qpc.fre and qpc.rlky: the QP may post UMRs and use the reserved lkey (a UMR's
	 * translation pointer), as the kernel's own QPs (drivers/infiniband/hw/mlx5/qp.c,
	 * create_kernel_qp). */
	bool fre = false;
	bool rlky = false;
	/* qpc.ts_format (prm::qp_ts_format): what the device's RoCE caps accept (Qp::create
	 * derives it from Caps::roce_qp_ts_format). */
	uint32_t ts_format = prm::qp_ts_format::free_running;
	/* qpc.st UD (unreliable datagram) instead of RC. */
	bool ud = false;
	/* qpc.st QP1: a UD QP that is its port's GSI QP (prm::gsi); ud is then not looked at. */
	bool gsi = false;
};

/*
 * What a transition sets in the qpc. Each of RST2INIT, INIT2RTR and RTR2RTS sends all of it:
 * the PRM's home of each field is RST2INIT for port and access enables, INIT2RTR for remote_qpn
 * and log_rra_max, RTR2RTS for log_sra_max; carrying them all keeps the QP's state whole
 * whichever transition a device reads them at.
 */
struct QpAttr {
	uint32_t port = 1; /* primary_address_path.vhca_port_num: 1 or 2 */
	uint32_t remote_qpn = 0;
	bool rre = false, rwe = false, rae = false;
	uint32_t log_sra_max = 0; /* outstanding RDMA READ/ATOMIC as requester: 2^n */
	uint32_t log_rra_max = 0; /* as responder */
	uint32_t pd = 0;	  /* repeated from create */
	/* The connection (QpParams documents each value and its default). */
	uint32_t mtu = 0;	  /* prm::qp_mtu, 1..5 */
	uint32_t log_msg_max = 0; /* 0..31 */
	bool fl = false;	  /* primary_address_path.fl (force loopback) */
	uint32_t gid_index = 0;	  /* primary_address_path.src_addr_index, when !fl */
	std::array<uint8_t, prm::qpc::rgid_size> remote_gid{}; /* rgid_rip, when !fl */
	uint32_t next_send_psn = 0;			       /* 24 bits */
	uint32_t next_rcv_psn = 0;			       /* 24 bits */
	uint32_t retry_count = 0;			       /* 0..7 */
	uint32_t rnr_retry = 0;				       /* 0..7 */
	uint32_t ack_timeout = 0;      /* primary_address_path.ack_timeout, 0..31 */
	uint32_t min_rnr_nak = 0;      /* 0..31 */
	uint32_t log_ack_req_freq = 0; /* 0..15 */
	uint32_t atomic_mode = 0;      /* prm::qp_atomic_mode, with rae */
	uint32_t opt_param_mask = 0;   /* prm::qp_optpar bits the transition changes */
	bool ud = false;	       /* qpc.st UD, as the QP was created */
	bool gsi = false;	       /* qpc.st QP1, as the QP was created */
	uint32_t q_key = 0;	       /* UD: qpc.q_key */
};

int alloc_uar(CmdTransport &t, uint32_t *uar);
int dealloc_uar(CmdTransport &t, uint32_t uar);
/* -EINVAL: log_size above 24, empty pas. */
int create_eq(CmdTransport &t, const EqCreate &c, uint32_t *eqn);
int destroy_eq(CmdTransport &t, uint32_t eqn);
/* PAGE_FAULT_RESUME (on-demand paging, doc/odp.md): ends the page fault token names; error:
 * the pages could not be made present (the faulting access completes in error). type and
 * wq_number echo the fault's (Linux odp.c mlx5_ib_page_fault_resume: the WQ number of a WQE
 * fault, the token of an RDMA fault). The command's errors (an unknown token: BAD_PARAM,
 * -EINVAL). */
int page_fault_resume(CmdTransport &t, uint32_t token, bool error, uint8_t type,
		      uint32_t wq_number);
/* -EINVAL: log_size above 24, empty pas. */
int create_cq(CmdTransport &t, const CqCreate &c, uint32_t *cqn);
int destroy_cq(CmdTransport &t, uint32_t cqn);
/* RC QP with a send queue only (rq_type zero-length). -EINVAL: log_sq_size outside 1..15,
 * empty pas. */
int create_qp(CmdTransport &t, const QpCreate &c, uint32_t *qpn);
int destroy_qp(CmdTransport &t, uint32_t qpn);
/* -EINVAL also for a port outside 1..2, or a value wider than its qpc field (nothing sent). */
int rst2init_qp(CmdTransport &t, uint32_t qpn, const QpAttr &a);
int init2rtr_qp(CmdTransport &t, uint32_t qpn, const QpAttr &a);
int rtr2rts_qp(CmdTransport &t, uint32_t qpn, const QpAttr &a);
int qp_2err(CmdTransport &t, uint32_t qpn);
int qp_2rst(CmdTransport &t, uint32_t qpn);
/* The QP's state (prm::qp_state). */
int query_qp_state(CmdTransport &t, uint32_t qpn, uint32_t *state);

/* The input bytes the encoders send (for tests of the encodings). */
int encode_create_cq(const CqCreate &c, std::vector<uint8_t> *in);
int encode_create_eq(const EqCreate &c, std::vector<uint8_t> *in);
int encode_create_qp(const QpCreate &c, std::vector<uint8_t> *in);
int encode_modify_qp(uint16_t opcode, uint32_t qpn, const QpAttr &a, std::vector<uint8_t> *in);

} // namespace nicmr::mlx5

#endif
