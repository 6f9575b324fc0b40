/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * On-demand paging in the device model: page faults and PAGE_FAULT_RESUME (doc/odp.md,
 * doc/device-model.md "On-demand paging").
 *
 *   WQE engine: a check-7 failure on an mkey made with pg_access (Translator::kNotPresent)
 *     local SGE of the requester's WQE -> fault WQE (subtype 0): QPN, WQE index, REQUESTOR
 *                                         (+ WRITE for a scatter)
 *     the responder's rkey range       -> fault RDMA (subtype 1): rkey, VA, length, RDMA
 *                                         (+ WRITE for a write or an atomic)
 *     the responder's receive WQE      -> fault WQE (subtype 0), type WRITE alone (Linux
 *       (a SEND's scatter list)           MLX5_WQE_PF_TYPE_RESP): the RQ's QPN, the receive
 *                                         WQE's index, the packet's length; the receive
 *                                         WQE stays posted (the retry takes it again)
 *   -> token (24 bits) in a slot of pf_slots_, EQE type 0x0c on the first EQ that takes it
 *   -> the requester's WQE stays at the head of its SQ (nothing behind it runs); the wire's
 *      responder answers RNR NAK to the request and to every retry while the fault is out
 *   PAGE_FAULT_RESUME(token, error)
 *     no error: the requester's QP runs again from the held WQE; the wire's responder
 *               executes the next retry
 *     error:    the held WQE completes with the syndrome the access would have had without
 *               on-demand paging (LOCAL_PROT_ERR / LOCAL_ACCESS_ERR for a local SGE,
 *               REMOTE_ACCESS_ERR and the responder to ERR for an RDMA fault); the wire's
 *               responder NAKs the retry with a remote access error. A receive WQE's fault:
 *               the receive completes with LOCAL_ACCESS_ERR, its QP to ERR (RQ flushed),
 *               the requester REMOTE_OP_ERR (wire: NAK remote operational error), as a
 *               receive key refused without on-demand paging. Nothing is written.
 *     unknown token: BAD_PARAM (the command handler)
 *
 * Linux (drivers/infiniband/hw/mlx5/odp.c, mlx5_ib_eq_pf_process and mlx5_ib_page_fault_resume)
 * is the driver these follow: it takes page faults on an EQ of their own whose mask is the
 * page-fault event only (mlx5r_odp_create_eq). Without such an EQ (or with on-demand paging
 * off, EmuConfig::odp) the model fails the access as before; so it does when
 * kMaxPageFaults are out.
 */
#include <algorithm>
#include <cstring>
#include <mutex>

#include "emu_mlx5_dp.h"
#include "emu_mlx5_dp_impl.h"
#include "mlx5_prm.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;
namespace pf = prm::eqe_page_fault;

bool EmuDataPath::can_fault() const
{
	return cfg_.odp && event_eq(prm::event_type::page_fault) != nullptr;
}

void EmuDataPath::Exec::arm_faults(Translator &t) const
{
	if (dp.cfg_.odp)
		t.report_not_present();
}

uint8_t EmuDataPath::Exec::local_fault(uint8_t s, Access a)
{
	if (s != kNotPresent)
		return s;
	const bool write = a == Access::local_write;
	const uint8_t syn = Translator::fail_syndrome(a, write);
	if (!dp.can_fault())
		return syn;
	fault = Fault{};
	fault.subtype = pf::subtype_wqe;
	fault.flags = static_cast<uint8_t>(pf::flag_requestor | (write ? pf::flag_write : 0));
	fault.syndrome = syn;
	return kFaultHeld;
}

uint8_t EmuDataPath::Exec::remote_fault(uint8_t s, uint32_t rkey, uint64_t va, uint64_t len,
					Access a)
{
	if (s == kNotPresent && dp.can_fault() && responder != nullptr) {
		fault = Fault{};
		fault.subtype = pf::subtype_rdma;
		fault.flags = static_cast<uint8_t>(pf::flag_rdma |
						   (a != Access::remote_read ? pf::flag_write : 0));
		fault.rkey = rkey;
		fault.va = va;
		fault.len = static_cast<uint32_t>(len);
		fault.syndrome = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
		fault.responder = responder->qpn;
		return kFaultHeld;
	}
	if (s == kNotPresent)
		s = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
	return responder_fail(s, prm::event_type::wq_access_error);
}

bool EmuDataPath::raise_fault(const DmaSection &dma, Qp &qp, uint16_t index, const Fault &f,
			      bool wire_responder, uint32_t *token)
{
	Eq *eq = event_eq(prm::event_type::page_fault);
	if (eq == nullptr || !cfg_.odp)
		return false;
	uint32_t tok = 0, slot = 0;
	{
		std::lock_guard lk(pf_lock_);
		/* The next free slot from the last token on; tokens are 24 bits, never 0, and a
		 * slot's token changes on every use (a stale resume finds no fault). */
		bool found = false;
		for (uint32_t i = 0; i < kMaxPageFaults && !found; i++) {
			const uint32_t t = (pf_next_ + 1 + i) & prm::value_mask(pf::rdma_token);
			if (t == 0 || pf_slots_[t % kMaxPageFaults].live)
				continue;
			tok = t;
			found = true;
		}
		if (!found)
			return false;
		pf_next_ = tok;
		slot = tok % kMaxPageFaults;
		pf_slots_[slot] = FaultSlot{true, tok, qp.qpn, wire_responder};
	}
	uint8_t buf[prm::eqe::size] = {};
	prm::set(buf, pf::bytes_committed, 0);
	prm::set(buf, pf::pftype, f.flags);
	if (f.subtype == pf::subtype_wqe) {
		/* A receive WQE's fault names the RQ's QP and the receive WQE's index, and the
		 * length of the packet that met it (Linux odp.c, mlx5_ib_eq_pf_process: the
		 * responder's packet_size). */
		prm::set(buf, pf::wqe_index, f.recv ? f.wqe_index : index);
		prm::set(buf, pf::wqe_token, tok);
		prm::set(buf, pf::wq_number, f.recv ? f.wq : qp.qpn);
		if (f.recv)
			prm::set(buf, pf::packet_length, f.packet_len);
	} else {
		prm::set(buf, pf::r_key, f.rkey);
		prm::set(buf, pf::rdma_op_len, f.len);
		prm::set(buf, pf::rdma_va, f.va);
		prm::set(buf, pf::rdma_token, tok);
	}
	if (write_eqe(dma, *eq, prm::event_type::page_fault, buf + prm::eqe::data_offset,
		      f.subtype) != 0) {
		std::lock_guard lk(pf_lock_);
		pf_slots_[slot].live = false;
		return false;
	}
	ctr_.page_faults.fetch_add(1, std::memory_order_relaxed);
	*token = tok;
	return true;
}

bool EmuDataPath::rc_fault(const DmaSection &dma, Qp &qp, uint32_t psn, uint32_t rkey, uint64_t va,
			   uint64_t len, bool write)
{
	if (!can_fault())
		return false;
	Fault f;
	f.subtype = pf::subtype_rdma;
	f.flags = static_cast<uint8_t>(pf::flag_rdma | (write ? pf::flag_write : 0));
	f.rkey = rkey;
	f.va = va;
	f.len = static_cast<uint32_t>(len);
	uint32_t tok = 0;
	if (!raise_fault(dma, qp, 0, f, true, &tok))
		return false;
	qp.rpf = Qp::Pf::pending;
	qp.rpf_token = tok;
	/* The request is not executed: the requester retries it after the RNR timer (IBTA
	 * 9.7.5.2.8), as a ConnectX's responder does while a page fault is served. */
	rc_rnr_nak(qp, psn);
	return true;
}

/*
 * The responder's receive WQE (Linux odp.c, mlx5_ib_mr_wqe_pfault_handler: a WQE fault whose
 * type lacks MLX5_PFAULT_REQUESTOR is a responder's; MLX5_WQE_PF_TYPE_RESP = 2, the WRITE bit
 * alone, names the QP's own RQ, whose WQE the driver reads back with mlx5_ib_read_wqe_rq and
 * parses with mlx5_ib_mr_responder_pfault_handler_rq). The receive WQE is not consumed: the
 * request that met it is retried (RNR) and takes it again.
 */
bool EmuDataPath::recv_fault(Qp &r, const RecvWqe &rw, uint64_t packet_len, Fault *f)
{
	if (!can_fault())
		return false;
	*f = Fault{};
	f->subtype = pf::subtype_wqe;
	f->flags = pf::flag_write; /* MLX5_WQE_PF_TYPE_RESP */
	f->recv = true;
	/* An SRQ's WQE: type 0 (MLX5_WQE_PF_TYPE_RMP) and the SRQ's number, which Linux odp.c
	 * (odp_get_rsc, mlx5_ib_read_wqe_srq) looks the SRQ up by. */
	if (r.srq != nullptr)
		f->flags = 0;
	f->wq = r.srq != nullptr ? r.srq->srqn : r.qpn;
	f->wqe_index = rw.index;
	f->packet_len = static_cast<uint16_t>(std::min<uint64_t>(packet_len, 0xffff));
	/* What the model answers without on-demand paging for a receive WQE whose page refuses
	 * the write (emu_mlx5_recv.cpp, deliver): the responder's local access error, a remote
	 * operational error to the requester. */
	f->recv_syndrome = Translator::fail_syndrome(Access::local_write, true);
	f->syndrome = MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
	f->responder = r.qpn;
	rq_untake(r);
	return true;
}

bool EmuDataPath::rc_recv_fault(const DmaSection &dma, Qp &qp, uint32_t psn, const RecvWqe &rw,
				uint64_t plen)
{
	Fault f;
	if (!can_fault())
		return false;
	/* The caller gives the receive WQE back when this packet took it (FIRST or ONLY). */
	f.subtype = pf::subtype_wqe;
	f.flags = pf::flag_write;
	f.recv = true;
	if (qp.srq != nullptr)
		f.flags = 0; /* MLX5_WQE_PF_TYPE_RMP, as recv_fault */
	f.wq = qp.srq != nullptr ? qp.srq->srqn : qp.qpn;
	f.wqe_index = rw.index;
	f.packet_len = static_cast<uint16_t>(std::min<uint64_t>(plen, 0xffff));
	f.recv_syndrome = Translator::fail_syndrome(Access::local_write, true);
	uint32_t tok = 0;
	if (!raise_fault(dma, qp, rw.index, f, true, &tok))
		return false;
	qp.rpf = Qp::Pf::pending;
	qp.rpf_token = tok;
	qp.rpf_recv = true;
	qp.rpf_recv_syndrome = f.recv_syndrome;
	/* Not executed: the requester sends this packet again after the RNR timer, as for an
	 * RDMA fault (rc_fault). */
	rc_rnr_nak(qp, psn);
	return true;
}

void EmuDataPath::recv_fault_failed(const DmaSection &dma, Qp &r, uint8_t syndrome)
{
	std::lock_guard rl(r.rq_lock);
	if (r.rc && r.rc->s_active) {
		/* The wire's SEND met the fault after its first packet: its WQE is taken. */
		r.rc->s_active = false;
		rq_fail(dma, r, r.rc->s_wqe.index, syndrome);
		return;
	}
	RecvWqe rw;
	if (rq_take(dma, r, &rw) == RqTake::ok) {
		rq_fail(dma, r, rw.index, syndrome);
		return;
	}
	/* Flushed or unreadable meanwhile: the QP goes to ERR all the same. */
	r.set_state(QpState::err);
	rq_flush(dma, r);
}

int EmuDataPath::page_fault_resume(uint32_t token, bool error)
{
	std::shared_lock lk(table_lock_);
	FaultSlot s;
	{
		std::lock_guard pl(pf_lock_);
		FaultSlot &f = pf_slots_[token % kMaxPageFaults];
		if (!f.live || f.token != token)
			return -ENOENT;
		s = f;
		f.live = false;
	}
	ctr_.pf_resumes.fetch_add(1, std::memory_order_relaxed);
	if (error)
		ctr_.pf_errors.fetch_add(1, std::memory_order_relaxed);
	Qp *qp = find_qp(s.qpn);
	if (qp == nullptr)
		return 0; /* destroyed meanwhile: nothing waits */
	const Qp::Pf to = error ? Qp::Pf::failed : Qp::Pf::resumed;
	{
		std::lock_guard ql(qp->lock);
		if (s.wire_responder) {
			/* The retry the requester sends next is executed (or refused). */
			if (qp->rpf == Qp::Pf::pending && qp->rpf_token == token)
				qp->rpf = to;
			return 0;
		}
		if (qp->pf != Qp::Pf::pending || qp->pf_token != token)
			return 0; /* flushed meanwhile (the QP went to ERR) */
		qp->pf = to;
	}
	/* The held WQE runs again (or completes in error), and what was posted behind it. */
	run_qp(*qp, false);
	return 0;
}

size_t EmuDataPath::page_faults_outstanding() const
{
	std::lock_guard lk(pf_lock_);
	size_t n = 0;
	for (const FaultSlot &f : pf_slots_)
		n += f.live ? 1 : 0;
	return n;
}

} // namespace nicmr::emu
