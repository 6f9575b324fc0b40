/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared receive queues of the mlx5 device model: CREATE_SRQ, DESTROY_SRQ, QUERY_SRQ, ARM_RQ
 * (op_mod SRQ), and the take of a receive WQE for a QP whose qpc.rq_type is SRQ.
 *
 *   SRQ buffer: 2^log_srq_size WQEs of 16 << log_rq_stride bytes
 *     WQE: | next segment: next_wqe_index (be16 at byte 2) | data segs ... (MLX5_INVALID_LKEY
 *            ends a short list) |
 *   dbr[0]: the driver's WQE counter (low 16 bits); taken: the device's
 *
 *   SEND / WRITE with imm --> QP (rq_type SRQ) --rq_lock--> srq_take --SRQ lock-->
 *       counter == taken?  yes: RNR (as an empty RQ)
 *       read WQE[head]: index = head, head = next_wqe_index, taken++
 *       armed and fewer than lwm left? event 0x14 (SRQ limit), disarmed
 *   --> scatter --> the QP's receive CQE: wqe_counter = the WQE's index, srqn = the SRQ
 *   driver: links the completed WQE at its list's tail (rdma-core providers/mlx5/srq.c,
 *   mlx5_free_srq_wqe) and posts at its head (mlx5_post_srq_recv)
 *
 * A QP that goes to ERR leaves the SRQ's WQEs to the others (IBTA 10.2.9.5: only WQEs a QP has
 * taken complete on it); DESTROY_SRQ while a QP is attached is refused with RESOURCE_BUSY, as
 * for a CQ a QP still completes to (the verbs layer refuses it first: Linux
 * drivers/infiniband/core/verbs.c, ib_destroy_srq_user, -EBUSY while usecnt is not 0).
 * Device hot path (srq_take): the SRQ's spin lock, no allocation, no system call.
 */
#include <infiniband/mlx5dv.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "emu_mlx5.h"
#include "emu_mlx5_cmd_util.h"
#include "emu_mlx5_dp_impl.h"
#include "mlx5_prm.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;
using namespace wqe_fmt;

/* ---- Objects ------------------------------------------------------------------------------ */

int EmuDataPath::create_srq(const SrqAttr &a, uint32_t *srqn)
{
	/* WQEs of at most 512 bytes (log_max_rq_stride) holding the next segment and one data
	 * segment at least (Linux mlx5_ib srq.c: 32 bytes at the least). */
	if (a.log_size > cfg_.log_max_qp_sz || a.log_stride < 1 ||
	    a.log_stride > cfg_.log_max_rq_stride || a.lwm > (1u << a.log_size))
		return -EINVAL;
	int rc = check_queue(mmu_, a.mem, uint64_t{1} << (a.log_size + 4 + a.log_stride));
	if (rc < 0)
		return rc;
	if (a.dbr % 4 != 0)
		return -EINVAL;
	if (!mmu_.mapped(a.dbr, 4))
		return -EFAULT;
	std::unique_lock lk(table_lock_);
	const uint32_t cap = uint32_t{1} << cfg_.log_max_qp;
	if (srqs_.size() >= cap - 1)
		return -ENOSPC;
	uint32_t n = next_srqn_;
	while (srqs_.count(n) != 0)
		n = n + 1 < cap ? n + 1 : 1;
	next_srqn_ = n + 1 < cap ? n + 1 : 1;
	auto srq = std::make_unique<Srq>();
	srq->srqn = n;
	srq->attr = a;
	srq->armed = a.lwm != 0;
	srqs_.emplace(n, std::move(srq));
	*srqn = n;
	return 0;
}

int EmuDataPath::destroy_srq(uint32_t srqn)
{
	std::unique_lock lk(table_lock_);
	auto it = srqs_.find(srqn);
	if (it == srqs_.end())
		return -ENOENT;
	if (it->second->users != 0)
		return -EBUSY;
	srqs_.erase(it);
	return 0;
}

int EmuDataPath::query_srq(uint32_t srqn, SrqInfo *info) const
{
	std::shared_lock lk(table_lock_);
	auto it = srqs_.find(srqn);
	if (it == srqs_.end())
		return -ENOENT;
	Srq &s = *it->second;
	std::lock_guard sl(s.lock);
	info->attr = s.attr;
	info->taken = s.taken;
	info->head = s.head;
	info->armed = s.armed;
	info->users = s.users;
	return 0;
}

int EmuDataPath::arm_srq(uint32_t srqn, uint32_t lwm)
{
	std::shared_lock lk(table_lock_);
	auto it = srqs_.find(srqn);
	if (it == srqs_.end())
		return -ENOENT;
	Srq &s = *it->second;
	if (lwm > (1u << s.attr.log_size))
		return -EINVAL;
	std::lock_guard sl(s.lock);
	s.attr.lwm = lwm;
	s.armed = lwm != 0;
	return 0;
}

/* ---- Taking a WQE --------------------------------------------------------------------------- */

EmuDataPath::RqTake EmuDataPath::srq_take(const DmaSection &dma, Qp &qp, RecvWqe *out)
{
	if (qp.srq_held) {
		/* The WQE a page fault gave back (rq_untake): this QP's still. */
		qp.srq_held = false;
		*out = qp.srq_wqe;
		bump(qp.n_recvs);
		return RqTake::ok;
	}
	Srq &s = *qp.srq;
	bool limit = false;
	{
		std::lock_guard sl(s.lock);
		uint32_t raw = 0;
		/* Acquire: the WQE the driver wrote before it raised the counter. */
		if (dma.load32_acquire(s.attr.dbr, &raw) < 0) {
			ctr_.dbr_faults.fetch_add(1, std::memory_order_relaxed);
			return RqTake::fault;
		}
		uint8_t rec[prm::dbr::size] = {};
		std::memcpy(rec, &raw, sizeof(raw));
		const auto pi = static_cast<uint16_t>(prm::get(rec, prm::dbr::rq_counter));
		const auto avail = static_cast<uint16_t>(pi - s.taken);
		if (avail == 0)
			return RqTake::empty;
		const uint32_t size = 1u << s.attr.log_size;
		if (avail > size)
			return RqTake::fault; /* more than the SRQ holds: a corrupt record */
		const size_t stride = size_t{16} << s.attr.log_stride;
		uint8_t buf[16u << 5];
		/* A WQE lies in one page: WQEs are at most 512 bytes and aligned to their size. */
		if (dma.read(s.attr.wqe_iova(s.head), buf, stride) < 0) {
			ctr_.dbr_faults.fetch_add(1, std::memory_order_relaxed);
			return RqTake::fault;
		}
		out->index = s.head;
		out->nseg = 0;
		out->capacity = 0;
		for (size_t at = prm::wqe_srq_next::size; at + kData <= stride; at += kData) {
			const DataSeg d = parse_data(buf + at);
			if (d.lkey == MLX5_INVALID_LKEY)
				break;
			out->segs[out->nseg++] = d;
			out->capacity += d.bc;
		}
		/* The list's next WQE, bounded to the SRQ (a corrupt index stays inside it). */
		s.head = static_cast<uint16_t>(prm::get(buf, prm::wqe_srq_next::next_wqe_index) &
					       (size - 1));
		s.taken++;
		/* The limit (IBTA 10.2.9.3 "SRQ limit"): once, when the WQEs left fall below it;
		 * ARM_RQ arms it again (Linux srq_cmd.c, arm_srq_cmd). */
		if (s.armed && static_cast<uint32_t>(avail - 1) < s.attr.lwm) {
			s.armed = false;
			limit = true;
		}
	}
	qp.srq_wqe = *out;
	bump(qp.n_recvs);
	if (limit)
		post_srq_event(dma, prm::event_type::srq_limit, s.srqn);
	return RqTake::ok;
}

void EmuDataPath::post_srq_event(const DmaSection &dma, uint8_t type, uint32_t srqn)
{
	Eq *eq = event_eq(type);
	if (eq == nullptr) {
		ctr_.events_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	/* struct mlx5_eqe_qp_srq: type 1 (SRQ) and the SRQ's number. */
	uint8_t buf[prm::eqe::size] = {};
	prm::set(buf, prm::eqe::qp_srq_type, 1);
	prm::set(buf, prm::eqe::qpn, srqn);
	write_eqe(dma, *eq, type, buf + prm::eqe::data_offset);
}

/* ---- Commands ------------------------------------------------------------------------------- */

using cmd::fail;

/* CREATE_SRQ (Linux srq_cmd.c, create_srq_cmd and set_srqc): a basic SRQ (no XRC domain, no
 * signature, no reserved lkey, no page offset). */
CmdResult EmuMlx5Device::cmd_create_srq(const uint8_t *in, size_t in_len, uint8_t *out,
					size_t out_len)
{
	namespace m = prm::create_srq_in;
	CmdResult r;
	if (!dp_ready(in_len, m::size, out_len, prm::create_srq_out::size, &r))
		return r;
	const uint8_t *c = in + m::srqc_offset;
	if (prm::get(c, prm::srqc::page_offset) != 0 || prm::get(c, prm::srqc::wq_signature) != 0 ||
	    prm::get(c, prm::srqc::rlky) != 0 || prm::get(c, prm::srqc::cont_srq) != 0)
		return fail(prm::status::bad_param, Syndrome::queue_params);
	const auto pd = static_cast<uint32_t>(prm::get(c, prm::srqc::pd));
	if (pds_.count(pd) == 0)
		return fail(prm::status::bad_res_state, Syndrome::pd_not_allocated);
	SrqAttr a;
	a.pd = pd;
	a.log_size = static_cast<uint32_t>(prm::get(c, prm::srqc::log_srq_size));
	a.log_stride = static_cast<uint32_t>(prm::get(c, prm::srqc::log_rq_stride));
	a.lwm = static_cast<uint32_t>(prm::get(c, prm::srqc::lwm));
	a.dbr = prm::get(c, prm::srqc::dbr_addr);
	a.mem = cmd::queue_mem(in, in_len, m::pas_offset,
			       static_cast<uint32_t>(prm::get(c, prm::srqc::log_page_size)));
	uint32_t srqn = 0;
	const int rc = dp_->create_srq(a, &srqn);
	if (rc < 0)
		return cmd::queue_error(rc, Syndrome::srq_table_full);
	prm::set(out, prm::create_srq_out::srqn, srqn);
	return cmd::kOk;
}

CmdResult EmuMlx5Device::cmd_destroy_srq(const uint8_t *in, size_t in_len, uint8_t *,
					 size_t out_len)
{
	CmdResult r;
	if (!dp_ready(in_len, prm::destroy_srq_in::size, out_len, prm::destroy_srq_out::size, &r))
		return r;
	const int rc =
		dp_->destroy_srq(static_cast<uint32_t>(prm::get(in, prm::destroy_srq_in::srqn)));
	if (rc == -EBUSY)
		return fail(prm::status::resource_busy, Syndrome::srq_in_use);
	if (rc < 0)
		return fail(prm::status::bad_res_state, Syndrome::srq_not_found);
	return cmd::kOk;
}

CmdResult EmuMlx5Device::cmd_query_srq(const uint8_t *in, size_t in_len, uint8_t *out,
				       size_t out_len)
{
	CmdResult r;
	if (!dp_ready(in_len, prm::query_srq_in::size, out_len, prm::query_srq_out::size, &r))
		return r;
	SrqInfo q;
	if (dp_->query_srq(static_cast<uint32_t>(prm::get(in, prm::query_srq_in::srqn)), &q) < 0)
		return fail(prm::status::bad_res_state, Syndrome::srq_not_found);
	uint8_t *c = out + prm::query_srq_out::srqc_offset;
	prm::set(c, prm::srqc::state, 0);
	prm::set(c, prm::srqc::log_srq_size, q.attr.log_size);
	prm::set(c, prm::srqc::log_rq_stride, q.attr.log_stride);
	prm::set(c, prm::srqc::log_page_size, q.attr.mem.log_page_size);
	prm::set(c, prm::srqc::pd, q.attr.pd);
	prm::set(c, prm::srqc::lwm, q.armed ? q.attr.lwm : 0);
	prm::set(c, prm::srqc::wqe_cnt, q.taken);
	prm::set(c, prm::srqc::dbr_addr, q.attr.dbr);
	return cmd::kOk;
}

/* ARM_RQ with op_mod SRQ (Linux srq_cmd.c, arm_srq_cmd): the limit event once. */
CmdResult EmuMlx5Device::cmd_arm_rq(const uint8_t *in, size_t in_len, uint8_t *, size_t out_len)
{
	namespace m = prm::arm_rq_in;
	CmdResult r;
	if (!dp_ready(in_len, m::size, out_len, prm::arm_rq_out::size, &r))
		return r;
	if (prm::get(in, prm::cmd_hdr_in::op_mod) != m::op_mod_srq)
		return fail(prm::status::bad_param, Syndrome::srq_params);
	const int rc = dp_->arm_srq(static_cast<uint32_t>(prm::get(in, m::srq_number)),
				    static_cast<uint32_t>(prm::get(in, m::lwm)));
	if (rc == -EINVAL)
		return fail(prm::status::bad_param, Syndrome::srq_params);
	if (rc < 0)
		return fail(prm::status::bad_res_state, Syndrome::srq_not_found);
	return cmd::kOk;
}

} // namespace nicmr::emu
