/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared receive queues: the SRQ commands (through the layout table) and the WQE free list
 * (mlx5_srq.h has the picture).
 */
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include <rte_io.h>

#include "mlx5_srq.h"
#include "mlx5_wqe.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

/* ---- Commands --------------------------------------------------------------------------- */

int encode_create_srq(const SrqCreate &c, std::vector<uint8_t> *in)
{
	namespace s = prm::srqc;
	if (!prm::fits(s::log_srq_size, c.log_size) || !prm::fits(s::log_rq_stride, c.log_stride) ||
	    !prm::fits(s::pd, c.pd) || !prm::fits(s::lwm, c.lwm) || c.mem.pas.empty() ||
	    !prm::fits(s::log_page_size, c.mem.log_page_size))
		return -EINVAL;
	const size_t fixed = prm::create_srq_in::pas_offset;
	try {
		in->assign(fixed + c.mem.pas.size() * prm::pas_entry_size, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	uint8_t *b = in->data();
	prm::set(b, prm::cmd_hdr_in::opcode, prm::opcode::create_srq);
	/* As Linux's set_srqc (drivers/infiniband/hw/mlx5/srq_cmd.c) for a basic SRQ: size,
	 * stride (wqe_shift - 4), page size, PD, limit and record; no signature, page offset 0. */
	uint8_t *q = b + prm::create_srq_in::srqc_offset;
	prm::set(q, s::log_srq_size, c.log_size);
	prm::set(q, s::log_rq_stride, c.log_stride);
	prm::set(q, s::log_page_size, c.mem.log_page_size);
	prm::set(q, s::page_offset, 0);
	prm::set(q, s::pd, c.pd);
	prm::set(q, s::lwm, c.lwm);
	prm::set(q, s::dbr_addr, c.dbr_iova);
	for (size_t i = 0; i < c.mem.pas.size(); i++)
		prm::set(b + fixed + i * prm::pas_entry_size, prm::pas_entry, c.mem.pas[i]);
	return 0;
}

int create_srq(CmdTransport &t, const SrqCreate &c, uint32_t *srqn)
{
	std::vector<uint8_t> in;
	int rc = encode_create_srq(c, &in);
	if (rc != 0)
		return rc;
	uint8_t out[prm::create_srq_out::size] = {};
	rc = t.exec(in.data(), in.size(), out, sizeof(out));
	if (rc == 0)
		*srqn = static_cast<uint32_t>(prm::get(out, prm::create_srq_out::srqn));
	return rc;
}

int destroy_srq(CmdTransport &t, uint32_t srqn)
{
	uint8_t in[prm::destroy_srq_in::size] = {};
	uint8_t out[prm::destroy_srq_out::size] = {};
	prm::set(in, prm::cmd_hdr_in::opcode, prm::opcode::destroy_srq);
	prm::set(in, prm::destroy_srq_in::srqn, srqn);
	return t.exec(in, sizeof(in), out, sizeof(out));
}

int query_srq(CmdTransport &t, uint32_t srqn, uint32_t *wqe_cnt, uint32_t *lwm)
{
	uint8_t in[prm::query_srq_in::size] = {};
	uint8_t out[prm::query_srq_out::size] = {};
	prm::set(in, prm::cmd_hdr_in::opcode, prm::opcode::query_srq);
	prm::set(in, prm::query_srq_in::srqn, srqn);
	const int rc = t.exec(in, sizeof(in), out, sizeof(out));
	if (rc != 0)
		return rc;
	const uint8_t *q = out + prm::query_srq_out::srqc_offset;
	*wqe_cnt = static_cast<uint32_t>(prm::get(q, prm::srqc::wqe_cnt));
	*lwm = static_cast<uint32_t>(prm::get(q, prm::srqc::lwm));
	return 0;
}

int arm_srq(CmdTransport &t, uint32_t srqn, uint32_t lwm)
{
	if (!prm::fits(prm::arm_rq_in::lwm, lwm))
		return -EINVAL;
	uint8_t in[prm::arm_rq_in::size] = {};
	uint8_t out[prm::arm_rq_out::size] = {};
	prm::set(in, prm::cmd_hdr_in::opcode, prm::opcode::arm_rq);
	prm::set(in, prm::cmd_hdr_in::op_mod, prm::arm_rq_in::op_mod_srq);
	prm::set(in, prm::arm_rq_in::srq_number, srqn);
	prm::set(in, prm::arm_rq_in::lwm, lwm);
	return t.exec(in, sizeof(in), out, sizeof(out));
}

/* ---- The SRQ ---------------------------------------------------------------------------- */

int Srq::create(Device &dev, const SrqParams &p, std::unique_ptr<Srq> *out)
{
	if (p.max_wr == 0 || p.max_sge < 1 || p.max_sge > kMaxSge)
		return -EINVAL;
	/* max_wr + 1 WQEs (the spare), a power of two (rdma-core mlx5_create_srq). */
	uint32_t log = 0;
	while ((uint64_t{1} << log) < uint64_t{p.max_wr} + 1)
		log++;
	if (log > dev.caps().log_max_srq_sz || log > 15)
		return -EINVAL;
	uint32_t shift = 5; /* 32 bytes at least (Linux mlx5_ib_create_srq) */
	while ((1u << shift) < prm::wqe_srq_next::size + p.max_sge * prm::wqe_data::size)
		shift++;
	std::unique_ptr<Srq> s(new (std::nothrow) Srq(dev));
	if (!s)
		return -ENOMEM;
	s->size_ = 1u << log;
	s->shift_ = shift;
	s->max_gs_ = ((1u << shift) - prm::wqe_srq_next::size) / prm::wqe_data::size;
	s->pd_ = p.pd;
	try {
		s->wr_ids_.assign(s->size_, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	int rc = QueueBuffer::alloc(dev.arena(), size_t{s->size_} << shift, true, &s->buf_);
	if (rc == 0)
		rc = QueueBuffer::alloc(dev.arena(), prm::dbr::size, false, &s->dbr_);
	if (rc != 0)
		return rc;
	s->wqes_ = s->buf_.va();
	s->db_ = reinterpret_cast<uint32_t *>(s->dbr_.va());
	/* The free list in index order, the last WQE its tail (rdma-core mlx5_alloc_srq_buf). */
	for (uint32_t i = 0; i < s->size_; i++)
		prm::set(s->wqes_ + (size_t{i} << shift), prm::wqe_srq_next::next_wqe_index,
			 (i + 1) & (s->size_ - 1));
	s->head_ = 0;
	s->tail_ = s->size_ - 1;
	SrqCreate c;
	c.pd = p.pd;
	c.log_size = log;
	c.log_stride = shift - 4;
	c.dbr_iova = s->dbr_.iova();
	c.mem.pas = s->buf_.pas();
	rc = create_srq(dev.cmdq(), c, &s->srqn_);
	if (rc != 0)
		return rc;
	s->created_ = true;
	*out = std::move(s);
	return 0;
}

Srq::~Srq()
{
	if (!created_)
		return;
	const int rc = destroy_srq(dev_.cmdq(), srqn_);
	if (rc != 0)
		NICMR_LOG(error, "mlx5", "%s: DESTROY_SRQ 0x%x failed: %d",
			  dev_.function().name().c_str(), srqn_, rc);
}

/* Hot path: no lock, no allocation, no system call. */
int Srq::post_recv(std::span<const Sge> sgl, uint64_t wr_id) noexcept
{
	if (sgl.size() > max_gs_)
		return -EINVAL;
	if (head_ == tail_)
		return -ENOSPC; /* the spare alone is left */
	uint8_t *wqe = wqes_ + (size_t{head_} << shift_);
	wr_ids_[head_] = wr_id;
	head_ = static_cast<uint32_t>(prm::get(wqe, prm::wqe_srq_next::next_wqe_index)) &
		(size_ - 1);
	auto *seg = reinterpret_cast<mlx5_wqe_data_seg *>(wqe + prm::wqe_srq_next::size);
	uint32_t j = 0;
	for (const Sge &s : sgl)
		if (s.length != 0) /* as rdma-core's mlx5_post_srq_recv */
			set_data(&seg[j++], s.addr, s.length, s.lkey);
	if (j < max_gs_)
		set_data(&seg[j], 0, 0, MLX5_INVALID_LKEY);
	counter_++;
	posted_++;
	/* I/O write barrier: the WQE before the record that hands it over (udma_to_device_barrier
	 * in rdma-core's mlx5_post_srq_recv). Release: pairs with the emulated device's acquire
	 * load of the record (emu_mlx5_srq.cpp, srq_take). */
	rte_io_wmb();
	std::atomic_ref<uint32_t>(*db_).store(prm::word_be<prm::dbr::rq_counter>(counter_ & 0xffff),
					      std::memory_order_release);
	return 0;
}

/* Hot path: no lock, no allocation, no system call. */
uint64_t Srq::retire(uint16_t index) noexcept
{
	const uint32_t i = index & (size_ - 1u);
	prm::set(wqes_ + (size_t{tail_} << shift_), prm::wqe_srq_next::next_wqe_index, i);
	tail_ = i;
	retired_++;
	return wr_ids_[i];
}

int Srq::wqe_sges(uint16_t index, Sge *out, int max) const noexcept
{
	if (index >= size_)
		return -EINVAL;
	const uint8_t *seg = wqes_ + (size_t{index} << shift_) + prm::wqe_srq_next::size;
	int n = 0;
	for (uint32_t i = 0; i < max_gs_ && n < max; i++, seg += prm::wqe_data::size) {
		const auto lkey = static_cast<uint32_t>(prm::get(seg, prm::wqe_data::lkey));
		if (lkey == MLX5_INVALID_LKEY)
			break;
		Sge &g = out[n++];
		g.addr = prm::get(seg, prm::wqe_data::addr);
		g.length = static_cast<uint32_t>(prm::get(seg, prm::wqe_data::byte_count));
		g.lkey = lkey;
	}
	return n;
}

int Srq::arm(uint32_t lwm)
{
	return arm_srq(dev_.cmdq(), srqn_, lwm);
}

int Srq::query(uint32_t *wqe_cnt, uint32_t *lwm)
{
	return query_srq(dev_.cmdq(), srqn_, wqe_cnt, lwm);
}

} // namespace nicmr::mlx5
