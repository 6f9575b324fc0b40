/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A shared receive queue (CREATE_SRQ): receive WQEs that every QP created with it takes from,
 * for SENDs and RDMA WRITEs with immediate, in the order the device finds them in its list.
 *
 *   buffer (one DMA block): 2^log_size WQEs of 1 << shift bytes
 *     WQE i: | next segment: next_wqe_index (be16) | data segs ... | MLX5_INVALID_LKEY |
 *   a free list threaded through next_wqe_index: head (the next WQE to post) ... tail (kept
 *   empty, so that the list never runs dry under the device: rdma-core's mlx5 provider keeps
 *   the same spare, providers/mlx5/verbs.c, mlx5_create_srq: max_wr + 1 WQEs)
 *
 *   post_recv: WQE[head] <- data segs; head = its next_wqe_index; counter++ -> I/O write
 *              barrier -> dbr[0] = counter (BE32, low 16 bits) (rdma-core mlx5_post_srq_recv)
 *   retire(index), for each receive CQE of an attached QP (its wqe_counter): WQE[tail].next =
 *              index; tail = index (rdma-core providers/mlx5/srq.c, mlx5_free_srq_wqe)
 *
 * WQEs therefore come back in completion order, not posting order: a WQE is free for a new
 * post once its completion has been retired, whichever QP took it.
 * Threads: post_recv and retire change the list: one thread at a time for both (the caller
 * serialises posting with the polls of the attached QPs' receive CQs). Hot path: no lock, no
 * allocation, no system call.
 */
#ifndef NICMR_MLX5_SRQ_H
#define NICMR_MLX5_SRQ_H

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mlx5_device.h"
#include "mlx5_qbuf.h"
#include "mlx5_qp.h"

namespace nicmr::mlx5 {

struct SrqParams {
	uint32_t pd = 0;
	/* Receive WQEs posted at once: 1 .. 2^Caps::log_max_srq_sz - 1 (the list's spare makes
	 * 2^n WQEs of max_wr + 1 rounded up). */
	uint32_t max_wr = 0;
	/* Data segments per WQE: 1 .. kMaxSge (a WQE of the 16-byte next segment and 16 bytes per
	 * SGE, a power of two of 32 .. 512 bytes: Linux mlx5_ib srq.c, mlx5_ib_create_srq). */
	uint32_t max_sge = 1;
};

/* One SRQ command's input, for tests of the encodings (srqc fields through the table). */
struct SrqCreate {
	uint32_t pd = 0;
	uint32_t log_size = 0;	 /* 2^n WQEs */
	uint32_t log_stride = 0; /* WQEs of 16 << n bytes */
	uint32_t lwm = 0;
	uint64_t dbr_iova = 0;
	QueueMemory mem;
};
/* -EINVAL (a value wider than its srqc field, empty pas), -ENOMEM. */
int encode_create_srq(const SrqCreate &c, std::vector<uint8_t> *in);
int create_srq(CmdTransport &t, const SrqCreate &c, uint32_t *srqn);
int destroy_srq(CmdTransport &t, uint32_t srqn);
/* QUERY_SRQ: the WQEs the device has taken (wqe_cnt, mod 2^16) and the armed limit (0: none). */
int query_srq(CmdTransport &t, uint32_t srqn, uint32_t *wqe_cnt, uint32_t *lwm);
/* ARM_RQ (op_mod SRQ): the SRQ limit event (prm::event_type::srq_limit) once fewer than lwm
 * WQEs remain posted. */
int arm_srq(CmdTransport &t, uint32_t srqn, uint32_t lwm);

class Srq {
public:
	static constexpr uint32_t kMaxSge = 31;
	/*
	 * CREATE_SRQ on dev, buffer and record from dev.arena(). Errors: -EINVAL (max_wr 0 or
	 * above the device's log_max_srq_sz allows, max_sge outside 1..kMaxSge), -ENOMEM, the
	 * command's. A failed create leaves nothing.
	 */
	static int create(Device &dev, const SrqParams &p, std::unique_ptr<Srq> *out);
	/* DESTROY_SRQ (errors are logged), then frees the memory. Destroy the attached QPs
	 * first: the device refuses an SRQ a QP uses (RESOURCE_BUSY). */
	~Srq();
	Srq(const Srq &) = delete;
	Srq &operator=(const Srq &) = delete;

	uint32_t srqn() const noexcept { return srqn_; }
	uint32_t pd() const noexcept { return pd_; }
	/* WQEs that can be posted at once, and SGEs per WQE. */
	uint32_t capacity() const noexcept { return size_ - 1; }
	uint32_t max_sge() const noexcept { return max_gs_; }
	/* Posted and not retired. */
	uint32_t outstanding() const noexcept { return posted_ - retired_; }

	/*
	 * A receive WQE of sgl (zero-length entries skipped) at the list's head. Hot path.
	 * Errors: -EINVAL (more SGEs than max_sge), -ENOSPC (every WQE is posted and not yet
	 * retired: poll the attached QPs' receive CQs first; rdma-core's mlx5_post_srq_recv says
	 * ENOMEM for the same full list).
	 */
	int post_recv(std::span<const Sge> sgl, uint64_t wr_id) noexcept;
	/* The WQE at index completed (a receive CQE's wqe_index): links it at the list's tail
	 * and returns its wr_id. Hot path. */
	uint64_t retire(uint16_t index) noexcept;
	/*
	 * On-demand paging: the data segments of the WQE at index, read back from the buffer
	 * (Linux odp.c, mlx5_ib_read_wqe_srq and mlx5_ib_mr_responder_pfault_handler_srq: the
	 * next segment skipped). How many went into out (at most max); -EINVAL for an index
	 * outside the SRQ. Slow path.
	 */
	int wqe_sges(uint16_t index, Sge *out, int max) const noexcept;
	/* ARM_RQ / QUERY_SRQ of this SRQ (slow path). */
	int arm(uint32_t lwm);
	int query(uint32_t *wqe_cnt, uint32_t *lwm);

private:
	explicit Srq(Device &dev) : dev_(dev) {}

	Device &dev_;
	QueueBuffer buf_;
	QueueBuffer dbr_;
	std::vector<uint64_t> wr_ids_; /* by WQE index */
	uint32_t srqn_ = 0;
	uint32_t pd_ = 0;
	bool created_ = false;
	uint8_t *wqes_ = nullptr;
	uint32_t *db_ = nullptr;
	uint32_t size_ = 0;   /* WQEs in the buffer */
	uint32_t shift_ = 0;  /* log2 of a WQE's bytes */
	uint32_t max_gs_ = 0; /* data segments a WQE holds */
	uint32_t head_ = 0;   /* the next WQE to post */
	uint32_t tail_ = 0;   /* the list's last WQE (never posted while it is last) */
	uint32_t counter_ = 0;
	uint32_t posted_ = 0, retired_ = 0;
};

} // namespace nicmr::mlx5

#endif
