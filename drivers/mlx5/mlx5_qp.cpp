/* SPDX-License-Identifier: BSD-3-Clause */
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include <rte_atomic.h>
#include <rte_io.h>

#include "mlx5_qp.h"
#include "mlx5_srq.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

namespace {

/* The connection fields of p fit their qpc fields. */
bool connection_ok(const QpParams &p)
{
	namespace q = prm::qpc;
	return p.mtu >= prm::qp_mtu::mtu_256 && p.mtu <= prm::qp_mtu::mtu_4096 &&
	       prm::fits(q::primary_src_addr_index, p.gid_index) &&
	       prm::fits(q::next_send_psn, p.sq_psn) && prm::fits(q::next_rcv_psn, p.rq_psn) &&
	       prm::fits(q::retry_count, p.retry_count) && prm::fits(q::rnr_retry, p.rnr_retry) &&
	       prm::fits(q::primary_ack_timeout, p.ack_timeout) &&
	       prm::fits(q::min_rnr_nak, p.min_rnr_timer) &&
	       prm::fits(q::log_ack_req_freq, p.log_ack_req_freq);
}

} // namespace

int Qp::create(Device &dev, Uar &uar, Cq &cq, const QpParams &p, std::unique_ptr<Qp> *out)
{
	namespace q = prm::qpc;
	if (p.log_sq_size < 1 || p.log_sq_size > 15 || p.port < 1 || p.port > 2 ||
	    cq.size() < (1u << p.log_sq_size) || p.log_sra_max > 7 || p.log_rra_max > 7 ||
	    !prm::fits(q::log_msg_max, p.log_msg_max) || !connection_ok(p) || p.max_recv_sge > 32 ||
	    p.log_rq_size > 15 || (p.srq != nullptr && p.max_recv_sge != 0) ||
	    ((p.ud || p.gsi) && (p.rre || p.rwe || p.rae || p.umr)))
		return -EINVAL;
	/* The RQ's geometry as rdma-core's mlx5 provider sizes it (providers/mlx5/verbs.c,
	 * mlx5_calc_rq_size): a slot of 16 bytes per SGE, rounded up to a power of two. */
	uint32_t rq_shift = 4, log_rq = p.log_rq_size;
	if (p.max_recv_sge != 0) {
		while ((1u << rq_shift) < p.max_recv_sge * prm::wqe_data::size)
			rq_shift++;
		while ((uint64_t{1} << (log_rq + rq_shift)) < prm::wq::wqebb_size)
			log_rq++;
	}
	const uint32_t rq_size = p.max_recv_sge != 0 ? 1u << log_rq : 0;
	Cq &rcq = p.recv_cq != nullptr ? *p.recv_cq : cq;
	if (rq_size != 0 && rcq.size() < rq_size + (&rcq == &cq ? 1u << p.log_sq_size : 0))
		return -EINVAL;
	const Caps &caps = dev.caps();
	std::unique_ptr<Qp> qp(new (std::nothrow) Qp(dev, uar, cq));
	if (!qp)
		return -ENOMEM;
	qp->rcq_ = &rcq;
	qp->srq_ = p.srq;
	qp->sq_size_ = 1u << p.log_sq_size;
	qp->rq_size_ = rq_size;
	qp->rq_shift_ = rq_shift;
	qp->rq_max_gs_ = rq_size != 0 ? (1u << rq_shift) / prm::wqe_data::size : 0;
	try {
		qp->wr_ids_.assign(qp->sq_size_, 0);
		qp->wqe_bbs_.assign(qp->sq_size_, 0);
		qp->rq_wr_ids_.assign(rq_size, 0);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	const size_t rq_bytes = size_t{rq_size} << rq_shift;
	int rc = QueueBuffer::alloc(dev.arena(),
				    rq_bytes + size_t{qp->sq_size_} * prm::wq::wqebb_size, true,
				    &qp->ring_);
	if (rc == 0)
		rc = QueueBuffer::alloc(dev.arena(), prm::dbr::size, false, &qp->dbr_);
	if (rc != 0)
		return rc;
	qp->rq_ = qp->ring_.va();
	qp->sq_ = qp->ring_.va() + rq_bytes;
	qp->dbr_sq_ = reinterpret_cast<uint32_t *>(qp->dbr_.va()) + prm::dbr::qp_sq_dword;
	qp->dbr_rq_ = reinterpret_cast<uint32_t *>(qp->dbr_.va()) + prm::dbr::qp_rq_dword;
	qp->attr_.pd = p.pd;
	qp->attr_.port = p.port;
	qp->attr_.rre = p.rre;
	qp->attr_.rwe = p.rwe;
	qp->attr_.rae = p.rae;
	qp->attr_.log_sra_max = p.log_sra_max;
	qp->attr_.log_rra_max = p.log_rra_max;
	qp->attr_.ud = p.ud || p.gsi;
	qp->attr_.gsi = p.gsi;
	qp->attr_.q_key = p.gsi ? prm::gsi::q_key : p.q_key;
	/* No more than the device carries: a larger log_msg_max is refused (BAD_PARAM). */
	qp->attr_.log_msg_max = std::min(p.log_msg_max, caps.log_max_msg);
	(void)qp->set_connection(p); /* checked above */
	/* Remote atomics need the QP's atomic mode: IB-compliant 8-byte CmpSwap and FetchAdd,
	 * what Linux's get_atomic_mode (drivers/infiniband/hw/mlx5/qp.c) picks when the atomic
	 * caps offer both; set with rae at RST2INIT, as its to_mlx5_access_flags does. */
	if (p.rae && caps.atomic &&
	    (caps.atomic_operations & (prm::atomic_ops::cmp_swap | prm::atomic_ops::fetch_add)) ==
		    (prm::atomic_ops::cmp_swap | prm::atomic_ops::fetch_add))
		qp->attr_.atomic_mode = prm::qp_atomic_mode::ib_comp;

	QpCreate c;
	c.pd = p.pd;
	c.uar = uar.index();
	c.log_sq_size = p.log_sq_size;
	c.cqn_snd = cq.cqn();
	c.cqn_rcv = rcq.cqn();
	c.rq = rq_size != 0;
	c.log_rq_size = log_rq;
	c.log_rq_stride = rq_shift - 4;
	c.srqn = p.srq != nullptr ? p.srq->srqn() : 0;
	c.dbr_iova = qp->dbr_.iova();
	c.mem.pas = qp->ring_.pas();
	c.fre = p.umr;
	c.rlky = p.umr;
	c.ud = p.ud || p.gsi;
	c.gsi = p.gsi;
	c.ts_format = caps.roce_qp_ts_format == prm::ts_format_cap::free_running
			      ? prm::qp_ts_format::free_running
			      : prm::qp_ts_format::device_default;
	rc = create_qp(dev.cmdq(), c, &qp->qpn_);
	if (rc != 0)
		return rc;
	qp->created_ = true;
	*out = std::move(qp);
	return 0;
}

Qp::~Qp()
{
	if (!created_)
		return;
	int rc = destroy_qp(dev_.cmdq(), qpn_);
	if (rc != 0)
		NICMR_LOG(error, "mlx5", "%s: DESTROY_QP 0x%x failed: %d",
			  dev_.function().name().c_str(), qpn_, rc);
}

int Qp::to_init()
{
	return rst2init_qp(dev_.cmdq(), qpn_, attr_);
}

int Qp::to_rtr(uint32_t remote_qpn)
{
	static constexpr std::array<uint8_t, prm::qpc::rgid_size> kNoGid{};
	if (!attr_.ud && !attr_.fl && attr_.remote_gid == kNoGid)
		return -EINVAL; /* a RoCE path needs the peer's GID (UD: none, per WQE) */
	QpAttr a = attr_;
	a.remote_qpn = remote_qpn;
	int rc = init2rtr_qp(dev_.cmdq(), qpn_, a);
	if (rc == 0)
		attr_.remote_qpn = remote_qpn;
	return rc;
}

int Qp::to_rts()
{
	return rtr2rts_qp(dev_.cmdq(), qpn_, attr_);
}

int Qp::to_err()
{
	return qp_2err(dev_.cmdq(), qpn_);
}

int Qp::to_reset()
{
	int rc = qp_2rst(dev_.cmdq(), qpn_);
	if (rc != 0)
		return rc;
	/* A reset SQ starts again at WQE index 0, on the device and here. */
	sq_pi_ = sq_ci_ = rung_pi_ = 0;
	rq_pi_ = rq_ci_ = 0;
	last_ctrl_ = nullptr;
	std::atomic_ref<uint32_t>(*dbr_sq_).store(0, std::memory_order_relaxed);
	std::atomic_ref<uint32_t>(*dbr_rq_).store(0, std::memory_order_relaxed);
	return 0;
}

int Qp::set_connection(const QpParams &p)
{
	if (!connection_ok(p))
		return -EINVAL;
	attr_.mtu = p.mtu;
	attr_.fl = p.force_loopback && dev_.caps().roce_force_loopback;
	attr_.gid_index = p.gid_index;
	attr_.remote_gid = p.remote_gid;
	attr_.next_send_psn = p.sq_psn;
	attr_.next_rcv_psn = p.rq_psn;
	attr_.retry_count = p.retry_count;
	attr_.rnr_retry = p.rnr_retry;
	attr_.ack_timeout = p.ack_timeout;
	attr_.min_rnr_nak = p.min_rnr_timer;
	attr_.log_ack_req_freq = p.log_ack_req_freq;
	return 0;
}

int Qp::connect(uint32_t remote_qpn)
{
	int rc = to_init();
	if (rc == 0)
		rc = to_rtr(remote_qpn);
	if (rc == 0)
		rc = to_rts();
	return rc;
}

int Qp::recover()
{
	int rc = to_reset();
	if (rc == 0)
		rc = connect(attr_.remote_qpn);
	if (rc != 0)
		NICMR_LOG(error, "mlx5", "%s: QP 0x%x recovery failed: %d",
			  dev_.function().name().c_str(), qpn_, rc);
	return rc;
}

int Qp::query_state(uint32_t *state)
{
	return query_qp_state(dev_.cmdq(), qpn_, state);
}

/* Hot path: no lock, no allocation, no system call. */
int Qp::wqe_sges(uint16_t wqe_index, Sge *out, int max, bool *scatter) const noexcept
{
	const uint32_t mask = sq_size_ - 1;
	const auto bb = [&](uint32_t i) {
		return sq_ + size_t{(wqe_index + i) & mask} * prm::wq::wqebb_size;
	};
	const uint8_t *ctrl = bb(0);
	if (static_cast<uint16_t>(prm::get(ctrl, prm::wqe_ctrl::wqe_index)) != wqe_index)
		return -EINVAL;
	const auto opcode = static_cast<uint8_t>(prm::get(ctrl, prm::wqe_ctrl::opcode));
	const auto ds = static_cast<uint32_t>(prm::get(ctrl, prm::wqe_ctrl::ds));
	size_t at = prm::wqe_ctrl::size;
	*scatter = false;
	switch (opcode) {
	case MLX5_OPCODE_RDMA_WRITE:
	case MLX5_OPCODE_RDMA_WRITE_IMM:
		at += prm::wqe_raddr::size;
		break;
	case MLX5_OPCODE_RDMA_READ:
		at += prm::wqe_raddr::size;
		*scatter = true;
		break;
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA:
		at += prm::wqe_raddr::size + prm::wqe_atomic::size;
		*scatter = true;
		break;
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_IMM:
	case MLX5_OPCODE_SEND_INVAL:
		break;
	default:
		return 0; /* no data segments */
	}
	int n = 0;
	for (; at + prm::wqe_data::size <= size_t{ds} * 16 && n < max; at += prm::wqe_data::size) {
		/* 16-byte segments never straddle a WQEBB; the WQE may wrap at the ring's end. */
		const uint8_t *seg = bb(static_cast<uint32_t>(at / prm::wq::wqebb_size)) +
				     at % prm::wq::wqebb_size;
		if (prm::get(seg, prm::wqe_inline::inline_flag) != 0)
			break; /* inline data: nothing to fault in */
		Sge &g = out[n++];
		g.addr = prm::get(seg, prm::wqe_data::addr);
		g.length = static_cast<uint32_t>(prm::get(seg, prm::wqe_data::byte_count));
		g.lkey = static_cast<uint32_t>(prm::get(seg, prm::wqe_data::lkey));
	}
	return n;
}

int Qp::rq_wqe_sges(uint16_t wqe_index, Sge *out, int max) const noexcept
{
	if (rq_size_ == 0)
		return -ENOTSUP;
	/* Outstanding: between the oldest receive not completed and the last posted. */
	if (static_cast<uint16_t>(wqe_index - rq_ci_) >= rq_pi_ - rq_ci_)
		return -EINVAL;
	const uint8_t *slot = rq_ + (size_t{wqe_index & (rq_size_ - 1u)} << rq_shift_);
	int n = 0;
	for (uint32_t i = 0; i < rq_max_gs_ && n < max; i++) {
		const uint8_t *seg = slot + size_t{i} * prm::wqe_data::size;
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

int Qp::begin(uint32_t ds, WqeSlot *w) noexcept
{
	if (ds == 0 || ds > kMaxWqeDs)
		return -EINVAL;
	uint32_t bbs = prm::wq::wqebbs(ds);
	if (sq_pi_ - sq_ci_ + bbs > sq_size_)
		return -ENOSPC;
	size_t off = size_t{sq_pi_ & (sq_size_ - 1)} * prm::wq::wqebb_size;
	w->cur = SqCursor(sq_, size_t{sq_size_} * prm::wq::wqebb_size, off);
	w->ctrl = static_cast<mlx5_wqe_ctrl_seg *>(w->cur.take(prm::wqe_ctrl::size));
	w->index = static_cast<uint16_t>(sq_pi_);
	w->bbs = bbs;
	return 0;
}

/* Hot path: no lock, no allocation, no system call. */
void Qp::finish(WqeSlot &w, uint8_t opcode, uint32_t ds, uint32_t imm, uint64_t wr_id,
		unsigned flags) noexcept
{
	set_ctrl(w.ctrl, w.index, opcode, qpn_, ds, fm_ce_se(flags), imm);
	uint32_t slot = sq_pi_ & (sq_size_ - 1);
	wr_ids_[slot] = wr_id;
	wqe_bbs_[slot] = static_cast<uint8_t>(w.bbs);
	sq_pi_ += w.bbs;
	last_ctrl_ = w.ctrl;
	if (!(flags & kNoDoorbell))
		ring();
}

/* Hot path: no lock, no allocation, no system call. */
void Qp::ring() noexcept
{
	if (rung_pi_ == sq_pi_)
		return;
	/* Ordered as DPDK's mlx5_doorbell_ring (drivers/common/mlx5/mlx5_common.h) and rdma-core's
	 * post_send_db (providers/mlx5/qp.c) do: WQEs, barrier, doorbell record, barrier, MMIO.
	 * I/O write barrier: no WQE store may become visible to the device after the doorbell
	 * record that tells it the WQE is there (udma_to_device_barrier in rdma-core). */
	rte_io_wmb();
	/* Release as well: the emulated device reads dbr[1] with an acquire load from another
	 * thread (emu_mlx5_wqe.cpp run_qp), which this pairs with in the C++ model. */
	std::atomic_ref<uint32_t>(*dbr_sq_).store(
		prm::word_be<prm::dbr::sq_counter>(static_cast<uint16_t>(sq_pi_)),
		std::memory_order_release);
	/* Write barrier between DMA memory and the UAR: the device that takes the doorbell
	 * must find dbr[1] already written, which no C++ fence promises for an MMIO store on a
	 * weakly ordered CPU (rte_wmb in mlx5_doorbell_ring, mmio_wc_start in rdma-core). */
	rte_wmb();
	uint64_t v;
	static_assert(sizeof(v) == prm::wqe_ctrl::doorbell_bytes);
	std::memcpy(&v, last_ctrl_, sizeof(v));
	uar_.ring_sq(v);
	rung_pi_ = sq_pi_;
}

int Qp::post_nop(uint64_t wr_id, unsigned flags) noexcept
{
	WqeSlot w;
	int rc = begin(1, &w);
	if (rc != 0)
		return rc;
	finish(w, MLX5_OPCODE_NOP, 1, 0, wr_id, flags);
	return 0;
}

int Qp::post_rdma(uint8_t opcode, std::span<const Sge> sgl, uint64_t raddr, uint32_t rkey,
		  uint64_t wr_id, unsigned flags, uint32_t imm) noexcept
{
	if (sgl.size() > max_sge())
		return -EINVAL;
	uint32_t ds = 2 + static_cast<uint32_t>(sgl.size());
	WqeSlot w;
	int rc = begin(ds, &w);
	if (rc != 0)
		return rc;
	set_raddr(static_cast<mlx5_wqe_raddr_seg *>(w.cur.take(prm::wqe_raddr::size)), raddr, rkey);
	for (const Sge &s : sgl)
		set_data(static_cast<mlx5_wqe_data_seg *>(w.cur.take(prm::wqe_data::size)), s.addr,
			 s.length, s.lkey);
	finish(w, opcode, ds, imm, wr_id, flags);
	return 0;
}

/* ctrl | data segs: the SEND family's WQE (rdma-core providers/mlx5/qp.c, _mlx5_post_send:
 * no remote-address segment; imm carries the immediate or the rkey to invalidate). */
int Qp::post_msg(uint8_t opcode, std::span<const Sge> sgl, uint32_t imm, uint64_t wr_id,
		 unsigned flags) noexcept
{
	if (sgl.size() > max_send_sge())
		return -EINVAL;
	const uint32_t ds = 1 + static_cast<uint32_t>(sgl.size());
	WqeSlot w;
	int rc = begin(ds, &w);
	if (rc != 0)
		return rc;
	for (const Sge &s : sgl)
		set_data(static_cast<mlx5_wqe_data_seg *>(w.cur.take(prm::wqe_data::size)), s.addr,
			 s.length, s.lkey);
	finish(w, opcode, ds, imm, wr_id, flags);
	return 0;
}

int Qp::post_send(std::span<const Sge> sgl, uint64_t wr_id, unsigned flags) noexcept
{
	return post_msg(MLX5_OPCODE_SEND, sgl, 0, wr_id, flags);
}

int Qp::post_send_imm(std::span<const Sge> sgl, uint32_t imm, uint64_t wr_id,
		      unsigned flags) noexcept
{
	return post_msg(MLX5_OPCODE_SEND_IMM, sgl, imm, wr_id, flags);
}

int Qp::post_send_inval(std::span<const Sge> sgl, uint32_t rkey, uint64_t wr_id,
			unsigned flags) noexcept
{
	return post_msg(MLX5_OPCODE_SEND_INVAL, sgl, rkey, wr_id, flags);
}

int Qp::post_send_inline(const void *data, uint32_t len, uint64_t wr_id, unsigned flags) noexcept
{
	if (len > max_send_inline())
		return -EINVAL;
	const uint32_t ds = 1 + inline_ds(len);
	WqeSlot w;
	int rc = begin(ds, &w);
	if (rc != 0)
		return rc;
	set_inline_header(w.cur.take(prm::wqe_inline::header_size), len);
	w.cur.copy(data, len);
	finish(w, MLX5_OPCODE_SEND, ds, 0, wr_id, flags);
	return 0;
}

int Qp::post_write_imm(std::span<const Sge> sgl, uint64_t raddr, uint32_t rkey, uint32_t imm,
		       uint64_t wr_id, unsigned flags) noexcept
{
	return post_rdma(MLX5_OPCODE_RDMA_WRITE_IMM, sgl, raddr, rkey, wr_id, flags, imm);
}

/* Hot path: no lock, no allocation, no system call. */
int Qp::post_recv(std::span<const Sge> sgl, uint64_t wr_id) noexcept
{
	if (rq_size_ == 0)
		return -ENOTSUP;
	if (sgl.size() > rq_max_gs_)
		return -EINVAL;
	if (rq_pi_ - rq_ci_ >= rq_size_)
		return -ENOSPC;
	const uint32_t slot = rq_pi_ & (rq_size_ - 1);
	auto *seg = reinterpret_cast<mlx5_wqe_data_seg *>(rq_ + (size_t{slot} << rq_shift_));
	uint32_t j = 0;
	for (const Sge &s : sgl)
		if (s.length != 0) /* as rdma-core's mlx5_post_recv: nothing to scatter into */
			set_data(&seg[j++], s.addr, s.length, s.lkey);
	if (j < rq_max_gs_)
		set_data(&seg[j], 0, 0, MLX5_INVALID_LKEY);
	rq_wr_ids_[slot] = wr_id;
	rq_pi_++;
	/* I/O write barrier: the WQE before the record that hands it over (udma_to_device_barrier
	 * in rdma-core's mlx5_post_recv). Release: pairs with the emulated device's acquire load
	 * of dbr[0] (emu_mlx5_recv.cpp, rq_take). */
	rte_io_wmb();
	std::atomic_ref<uint32_t>(*dbr_rq_).store(
		prm::word_be<prm::dbr::rq_counter>(rq_pi_ & 0xffff), std::memory_order_release);
	return 0;
}

int Qp::post_write(std::span<const Sge> sgl, uint64_t raddr, uint32_t rkey, uint64_t wr_id,
		   unsigned flags) noexcept
{
	return post_rdma(MLX5_OPCODE_RDMA_WRITE, sgl, raddr, rkey, wr_id, flags);
}

int Qp::post_read(std::span<const Sge> sgl, uint64_t raddr, uint32_t rkey, uint64_t wr_id,
		  unsigned flags) noexcept
{
	return post_rdma(MLX5_OPCODE_RDMA_READ, sgl, raddr, rkey, wr_id, flags);
}

int Qp::post_write_inline(const void *data, uint32_t len, uint64_t raddr, uint32_t rkey,
			  uint64_t wr_id, unsigned flags) noexcept
{
	if (len > max_inline())
		return -EINVAL;
	uint32_t ds = 2 + inline_ds(len);
	WqeSlot w;
	int rc = begin(ds, &w);
	if (rc != 0)
		return rc;
	set_raddr(static_cast<mlx5_wqe_raddr_seg *>(w.cur.take(prm::wqe_raddr::size)), raddr, rkey);
	/* A 4-byte header, then the payload; the segment starts 16-byte aligned, so the header
	 * never straddles the end of the ring, the payload may (copy() wraps and pads). */
	set_inline_header(w.cur.take(prm::wqe_inline::header_size), len);
	w.cur.copy(data, len);
	finish(w, MLX5_OPCODE_RDMA_WRITE, ds, 0, wr_id, flags);
	return 0;
}

int Qp::post_atomic_cs(const Sge &result, uint64_t raddr, uint32_t rkey, uint64_t compare,
		       uint64_t swap, uint64_t wr_id, unsigned flags) noexcept
{
	WqeSlot w;
	int rc = begin(4, &w);
	if (rc != 0)
		return rc;
	set_raddr(static_cast<mlx5_wqe_raddr_seg *>(w.cur.take(prm::wqe_raddr::size)), raddr, rkey);
	set_atomic(static_cast<mlx5_wqe_atomic_seg *>(w.cur.take(prm::wqe_atomic::size)), swap,
		   compare);
	set_data(static_cast<mlx5_wqe_data_seg *>(w.cur.take(prm::wqe_data::size)), result.addr, 8,
		 result.lkey);
	finish(w, MLX5_OPCODE_ATOMIC_CS, 4, 0, wr_id, flags);
	return 0;
}

int Qp::post_atomic_fa(const Sge &result, uint64_t raddr, uint32_t rkey, uint64_t add,
		       uint64_t wr_id, unsigned flags) noexcept
{
	WqeSlot w;
	int rc = begin(4, &w);
	if (rc != 0)
		return rc;
	set_raddr(static_cast<mlx5_wqe_raddr_seg *>(w.cur.take(prm::wqe_raddr::size)), raddr, rkey);
	set_atomic(static_cast<mlx5_wqe_atomic_seg *>(w.cur.take(prm::wqe_atomic::size)), add, 0);
	set_data(static_cast<mlx5_wqe_data_seg *>(w.cur.take(prm::wqe_data::size)), result.addr, 8,
		 result.lkey);
	finish(w, MLX5_OPCODE_ATOMIC_FA, 4, 0, wr_id, flags);
	return 0;
}

int Qp::post_local_inval(uint32_t mkey, uint64_t wr_id, unsigned flags) noexcept
{
	WqeSlot w;
	int rc = begin(1, &w);
	if (rc != 0)
		return rc;
	finish(w, MLX5_OPCODE_LOCAL_INVAL, 1, mkey, wr_id, flags);
	return 0;
}

/* Hot path: no lock, no allocation, no system call. */
uint64_t Qp::retire(uint16_t wqe_index) noexcept
{
	uint32_t slot = wqe_index & (sq_size_ - 1);
	auto ahead = static_cast<uint16_t>(wqe_index - static_cast<uint16_t>(sq_ci_));
	sq_ci_ += ahead + wqe_bbs_[slot];
	return wr_ids_[slot];
}

/* Hot path: no lock, no allocation, no system call. */
uint64_t Qp::retire_recv(uint16_t index) noexcept
{
	/* A receive of the SRQ: its WQE goes back on the SRQ's list (mlx5_srq.h). */
	if (srq_ != nullptr)
		return srq_->retire(index);
	const uint32_t slot = index & (rq_size_ - 1);
	auto ahead = static_cast<uint16_t>(index - static_cast<uint16_t>(rq_ci_));
	rq_ci_ += ahead + 1u;
	return rq_wr_ids_[slot];
}

int Qp::poll(Completion *out, int max) noexcept
{
	return poll_cq(cq_, out, max);
}

int Qp::poll_recv(Completion *out, int max) noexcept
{
	return poll_cq(*rcq_, out, max);
}

/* Hot path: no lock, no allocation, no system call. */
int Qp::poll_cq(Cq &cq, Completion *out, int max) noexcept
{
	int n = cq.poll(out, max);
	int kept = 0;
	for (int i = 0; i < n; i++) {
		if (out[i].qpn != qpn_)
			continue;
		take(out[i]);
		/* No self-copy: it only stalls on the stores Cq::poll just made. */
		if (kept != i)
			out[kept] = out[i];
		kept++;
	}
	return kept;
}

} // namespace nicmr::mlx5
