/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A completion queue: 2^log_size 64-byte CQEs in host DMA memory and a doorbell
 * record whose dword 0 carries the consumer index.
 *
 *   device: writes CQE n at slot n & mask, op_own last (release), owner = (n >> log_size) & 1
 *   driver: CQE at ci is new when opcode != MLX5_CQE_INVALID and owner == (ci >> log_size) & 1
 *           (acquire load of op_own), then ci++ and dbr[0] = ci (big-endian, low 24 bits)
 * (fields prm::cqe, prm::err_cqe and prm::dbr::cq_ci of the layout table, mlx5_prm.h)
 *
 * Every CQE starts with opcode MLX5_CQE_INVALID and owner 1, so that nothing of the first pass
 * looks valid. poll() is for one thread at a time.
 *
 * Arming (for a waiter; not a hot path): arm(solicited) writes the arm word sn << 28 | cmd | ci
 * to dbr[1] and then rings the UAR's CQ doorbell (+0x20) with that word and the CQN
 * (rdma-core providers/mlx5/cq.c mlx5_arm_cq); the device then writes one completion EQE for
 * this CQ to its EQ (c_eqn) at the next CQE (solicited: the next solicited or error CQE), or at
 * once when such a CQE is already beyond ci. event_taken() counts an event taken, which moves
 * the sn the next arm carries (rdma-core mlx5_cq_event: arm_sn++).
 */
#ifndef NICMR_MLX5_CQ_H
#define NICMR_MLX5_CQ_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include <infiniband/mlx5dv.h>

#include "mlx5_device.h"
#include "mlx5_qbuf.h"
#include "mlx5_uar.h"
#include "nicmr_align.h"

namespace nicmr::mlx5 {

/* One completion as nicmr uses it (decoded from struct mlx5_cqe64 / mlx5_err_cqe). */
/* Completion::l3_hdr_type values (mlx5dv.h MLX5_CQE_L3_HDR_TYPE_*), for layers that do not
 * include mlx5dv.h. */
inline constexpr uint8_t kL3HdrIpv6 = MLX5_CQE_L3_HDR_TYPE_IPV6;
inline constexpr uint8_t kL3HdrIpv4 = MLX5_CQE_L3_HDR_TYPE_IPV4;

struct Completion {
	uint64_t wr_id = 0; /* filled by Qp::poll from the posting; 0 from Cq::poll */
	uint32_t qpn = 0;
	uint32_t byte_len = 0; /* bytes moved (success only) */
	/* Send completions: the WQE's index in WQEBBs, as posted; receive completions: the
	 * receive WQE's index (the RQ counter when it was posted, mod 2^16). */
	uint16_t wqe_index = 0;
	uint8_t opcode = 0;   /* MLX5_CQE_REQ, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_SEND, ... */
	uint8_t syndrome = 0; /* MLX5_CQE_SYNDROME_*, 0 on success */
	uint8_t vendor_syndrome = 0;
	/* Receive completions: the immediate (RESP_SEND_IMM, RESP_WR_IMM) or the invalidated
	 * rkey (RESP_SEND_INV), host order (the CQE's imm_inval_pkey). */
	uint32_t imm = 0;
	/* Receive completions of a QP attached to an SRQ: the SRQ's number (the CQE's srqn;
	 * wqe_index is then the SRQ WQE's index); 0 otherwise. */
	uint32_t srqn = 0;
	/* UD receive completions: the sending QP, whether the buffer starts with the 40-byte
	 * GRH (always on RoCE) and the network header it holds (MLX5_CQE_L3_HDR_TYPE_IPV4:
	 * bytes 20..39 are the IPv4 header; _IPV6: the IPv6 header). */
	uint32_t src_qpn = 0;
	bool grh = false;
	uint8_t l3_hdr_type = 0;
	bool ok() const noexcept
	{
		return syndrome == 0 && opcode != MLX5_CQE_REQ_ERR && opcode != MLX5_CQE_RESP_ERR;
	}
	/* A completion of the receive queue (responder side). */
	bool recv() const noexcept
	{
		return opcode == MLX5_CQE_RESP_WR_IMM || opcode == MLX5_CQE_RESP_SEND ||
		       opcode == MLX5_CQE_RESP_SEND_IMM || opcode == MLX5_CQE_RESP_SEND_INV ||
		       opcode == MLX5_CQE_RESP_ERR;
	}
};

struct CqParams {
	uint32_t log_size = 8; /* 2^n CQEs, 1..16 */
	/* c_eqn: an EQ that exists on the device (the device refuses an unknown one with
	 * BAD_RESOURCE). Unset: the device's completion EQ (Device::comp_eqn). Poll mode: the CQ
	 * is never armed, so the EQ receives no completion event. */
	std::optional<uint32_t> eqn;
};

class alignas(kThreadAlign) Cq { /* one thread polls it: no line shared with a neighbour */
public:
	/*
	 * CREATE_CQ on dev, with its ring and doorbell record from dev.arena(); uar must outlive
	 * the CQ. Errors: -EINVAL (log_size outside 1..16), -ENOMEM (arena), those of
	 * Device::comp_eqn (p.eqn unset), the command's (an unknown p.eqn: -EINVAL).
	 * A failed create leaves nothing.
	 */
	static int create(Device &dev, Uar &uar, const CqParams &p, std::unique_ptr<Cq> *out);
	/* DESTROY_CQ, then frees the memory (errors are logged). Destroy its QPs first. */
	~Cq();
	Cq(const Cq &) = delete;
	Cq &operator=(const Cq &) = delete;

	uint32_t cqn() const noexcept { return cqn_; }
	uint32_t size() const noexcept { return mask_ + 1; }
	/* Completions consumed so far (the consumer index). */
	uint32_t consumer_index() const noexcept { return ci_; }

	/*
	 * Hot path: takes up to max new completions into out and returns how many (0: none yet).
	 * No lock, no allocation, no system call; one thread at a time.
	 */
	int poll(Completion *out, int max) noexcept;

	/*
	 * Arms the CQ for one completion event: the next CQE (solicited false) or the next
	 * solicited or error CQE (true), counted from the consumer index poll() reached. The
	 * same thread rules as poll() (it reads the consumer index). No lock, no allocation, no
	 * system call: a doorbell-record store and one 64-bit MMIO write.
	 */
	void arm(bool solicited) noexcept;
	/* One completion event of this CQ was taken (the next arm carries the next sn). */
	void event_taken() noexcept { arm_sn_.fetch_add(1, std::memory_order_relaxed); }
	uint32_t arm_sn() const noexcept { return arm_sn_.load(std::memory_order_relaxed); }

private:
	Cq(Device &dev) : dev_(dev) {}
	Device &dev_;
	QueueBuffer ring_;
	QueueBuffer dbr_;
	uint32_t cqn_ = 0;
	bool created_ = false;
	uint32_t log_size_ = 0;
	uint32_t mask_ = 0;
	uint32_t ci_ = 0;
	uint8_t *cqes_ = nullptr;
	uint32_t *dbr_ci_ = nullptr;
	uint32_t *dbr_arm_ = nullptr;
	size_t arm_doorbell_ = 0; /* BAR 0 offset of the UAR's CQ doorbell */
	/* The arm sequence number. rdma-core starts at 0; nicmr at 1, so that the first arm word
	 * (sn 1) always differs from the zeroed record the device saw at CREATE_CQ (the emulated
	 * device's poll thread finds arms by a changed record word; doc/device-model.md). */
	/* Relaxed atomic: the event taker may count on another thread than the one that arms;
	 * the sn orders nothing else. */
	std::atomic<uint32_t> arm_sn_{1};
};

} // namespace nicmr::mlx5

#endif
