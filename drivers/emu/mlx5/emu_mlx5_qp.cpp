/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Data-path objects of the mlx5 device model: UARs, CQs, EQs and QPs, their state machine and
 * the UAR doorbells that start the WQE engine (emu_mlx5_wqe.cpp).
 *
 * QP state machine (PRM; any other transition fails with BAD_QP_STATE):
 *
 *   RST --RST2INIT--> INIT --INIT2RTR--> RTR --RTR2RTS--> RTS
 *    ^                                                     |
 *    +------------------ 2RST (from any) <--- ERR <--------+ 2ERR (from any), or a WQE error
 *
 * 2RST forgets the SQ's and the RQ's consumer counters (the driver resets its producers too);
 * ERR flushes every WQE posted from then on with WR_FLUSH_ERR: send WQEs as the SQ runs,
 * receive WQEs at 2ERR (or the responder's own error) and at every later doorbell.
 */
#include <infiniband/mlx5dv.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "emu_mlx5_dp_impl.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;

/* Queue memory: whole pages cover need bytes, every page reachable through the IOMMU. */
int check_queue(const EmuIommu &mmu, const QueueMem &m, uint64_t need)
{
	if (m.log_page_size > 18) /* 1 GiB pages at most */
		return -EINVAL;
	const uint64_t page = uint64_t{1} << (12 + m.log_page_size);
	if (m.pas.size() < (need + page - 1) / page)
		return -EINVAL;
	for (uint64_t i = 0; i < (need + page - 1) / page; i++) {
		if (m.pas[i] % 4096 != 0)
			return -EINVAL;
		if (!mmu.mapped(m.pas[i], std::min(page, need)))
			return -EFAULT;
	}
	return 0;
}

EmuDataPath::EmuDataPath(EmuIommu &mmu, MkeyTable &mkeys, const DpConfig &cfg)
    : mmu_(mmu), mkeys_(mkeys), cfg_(cfg), uar_qps_(cfg.uars + 1), uar_allocated_(cfg.uars + 1),
      qp_index_(size_t{1} << cfg.log_max_qp, nullptr)
{}

EmuDataPath::~EmuDataPath() = default;

int EmuDataPath::alloc_uar(uint32_t *index)
{
	std::unique_lock lk(table_lock_);
	for (uint32_t i = 1; i <= cfg_.uars; i++) {
		if (!uar_allocated_[i]) {
			uar_allocated_[i] = true;
			*index = i;
			return 0;
		}
	}
	return -ENOSPC;
}

int EmuDataPath::dealloc_uar(uint32_t index)
{
	std::unique_lock lk(table_lock_);
	if (index == 0 || index > cfg_.uars || !uar_allocated_[index])
		return -ENOENT;
	if (!uar_qps_[index].empty())
		return -EBUSY;
	uar_allocated_[index] = false;
	return 0;
}

int EmuDataPath::create_cq(const CqAttr &a, uint32_t *cqn)
{
	if (a.log_size > cfg_.log_max_cq_sz)
		return -EINVAL;
	int rc = check_queue(mmu_, a.mem, uint64_t{64} << a.log_size);
	if (rc < 0)
		return rc;
	if (!mmu_.mapped(a.dbr, prm::dbr::size) || a.dbr % 8 != 0)
		return a.dbr % 8 != 0 ? -EINVAL : -EFAULT;
	std::unique_lock lk(table_lock_);
	/* Completions go to the EQ the CQ names: it must exist (Linux mlx5_core creates its
	 * completion EQs before any CQ; rdma-core's VFIO provider names its one EQ). */
	if (eqs_.count(a.eqn) == 0)
		return kNoSuchEq;
	const uint32_t cap = uint32_t{1} << cfg_.log_max_cq;
	if (cqs_.size() >= cap - 1)
		return -ENOSPC;
	uint32_t n = next_cqn_;
	while (cqs_.count(n) != 0)
		n = n + 1 < cap ? n + 1 : 1;
	next_cqn_ = n + 1 < cap ? n + 1 : 1;
	auto cq = std::make_unique<Cq>();
	cq->cqn = n;
	cq->attr = a;
	/* The record's arm word as it is now: a poll thread's scan acts only on a change. */
	if (uint32_t w = 0;
	    DmaSection(mmu_).load32_acquire(a.dbr + prm::dbr::cq_arm_dword * 4, &w) == 0)
		cq->arm_seen.store(w, std::memory_order_relaxed);
	cqs_.emplace(n, std::move(cq));
	*cqn = n;
	return 0;
}

int EmuDataPath::destroy_cq(uint32_t cqn)
{
	std::unique_lock lk(table_lock_);
	auto it = cqs_.find(cqn);
	if (it == cqs_.end())
		return -ENOENT;
	if (it->second->users != 0)
		return -EBUSY;
	retire_cq(*it->second);
	cqs_.erase(it);
	return 0;
}

int EmuDataPath::create_eq(const EqAttr &a, uint32_t *eqn)
{
	if (a.log_size > cfg_.log_max_eq_sz)
		return -EINVAL;
	int rc = check_queue(mmu_, a.mem, uint64_t{64} << a.log_size);
	if (rc < 0)
		return rc;
	std::unique_lock lk(table_lock_);
	const uint32_t cap = std::min(uint32_t{1} << cfg_.log_max_eq, uint32_t{256});
	for (uint32_t n = 1; n < cap; n++) {
		if (eqs_.count(n) != 0)
			continue;
		auto eq = std::make_unique<Eq>();
		eq->eqn = n;
		eq->attr = a;
		eq->order = eq_created_++;
		eqs_.emplace(n, std::move(eq));
		*eqn = n;
		return 0;
	}
	return -ENOSPC;
}

int EmuDataPath::destroy_eq(uint32_t eqn)
{
	std::unique_lock lk(table_lock_);
	auto it = eqs_.find(eqn);
	if (it == eqs_.end())
		return -ENOENT;
	for (const auto &[n, cq] : cqs_)
		if (cq->attr.eqn == eqn)
			return -EBUSY;
	eqs_.erase(it);
	return 0;
}

int EmuDataPath::create_qp(const QpAttr &a, uint32_t *qpn)
{
	if ((!a.no_sq && a.log_sq_size > cfg_.log_max_qp_sz) || (a.no_sq && !a.receives()) ||
	    (a.rq && a.srqn != 0))
		return -EINVAL;
	if (a.rq &&
	    (a.log_rq_size > cfg_.log_max_qp_sz || a.log_rq_stride > cfg_.log_max_rq_stride))
		return -EINVAL;
	/* The SQ's WQEBBs after the RQ stay 64-byte aligned (a WQEBB never straddles a page). */
	if (a.rq && !a.no_sq && a.rq_bytes() % prm::wq::wqebb_size != 0)
		return -EINVAL;
	/* The RQ's slots, then the SQ's WQEBBs, in one buffer: whole pages cover both. */
	const uint64_t bytes = a.rq_bytes() + (a.no_sq ? 0 : uint64_t{64} << a.log_sq_size);
	int rc = check_queue(mmu_, a.mem, bytes);
	if (rc < 0)
		return rc;
	if (a.dbr % 8 != 0)
		return -EINVAL;
	if (!mmu_.mapped(a.dbr, prm::dbr::size))
		return -EFAULT;
	std::unique_lock lk(table_lock_);
	auto cq = cqs_.find(a.cqn);
	if (cq == cqs_.end())
		return -ENOENT;
	auto rcq = a.receives() ? cqs_.find(a.rcqn) : cqs_.end();
	if (a.receives() && rcq == cqs_.end())
		return -ENOENT;
	/* An SRQ of another PD serves no QP (IBTA 10.2.9.1: the QP's and the SRQ's PDs). */
	auto srq = a.srqn != 0 ? srqs_.find(a.srqn) : srqs_.end();
	if (a.srqn != 0 && srq == srqs_.end())
		return kNoSuchSrq;
	if (a.srqn != 0 && srq->second->attr.pd != a.pd)
		return kNoSuchSrq;
	if (a.uar == 0 || a.uar > cfg_.uars || !uar_allocated_[a.uar])
		return -ENXIO;
	const uint32_t cap = uint32_t{1} << cfg_.log_max_qp;
	if (qps_.size() >= cap - kFirstQpn)
		return -ENOSPC;
	uint32_t n = next_qpn_;
	while (qps_.count(n) != 0)
		n = n + 1 < cap ? n + 1 : kFirstQpn;
	next_qpn_ = n + 1 < cap ? n + 1 : kFirstQpn;
	auto qp = std::make_unique<Qp>();
	qp->qpn = n;
	qp->attr = a;
	qp->cq = cq->second.get();
	qp->held.reserve(MkeyTable::Hold::kInline);
	uar_qps_[a.uar].push_back(n);
	/* Each use counts: a CQ that is both queues' (or two QPs') takes its lock per CQE. */
	cq->second->users++;
	if (a.receives()) {
		qp->rcq = rcq->second.get();
		rcq->second->users++;
	}
	if (a.srqn != 0) {
		qp->srq = srq->second.get();
		srq->second->users++;
	}
	qp_index_[n] = qp.get();
	qps_.emplace(n, std::move(qp));
	*qpn = n;
	return 0;
}

int EmuDataPath::destroy_qp(uint32_t qpn)
{
	std::unique_lock lk(table_lock_);
	auto it = qps_.find(qpn);
	if (it == qps_.end())
		return -ENOENT;
	Qp &qp = *it->second;
	for (uint32_t &g : gsi_qpn_)
		if (g == qpn)
			g = 0;
	auto &users = uar_qps_[qp.attr.uar];
	users.erase(std::remove(users.begin(), users.end(), qpn), users.end());
	for (const bool recv : {false, true}) {
		if (recv && !qp.attr.receives())
			continue;
		auto cq = cqs_.find(recv ? qp.attr.rcqn : qp.attr.cqn);
		if (cq != cqs_.end() && cq->second->users > 0)
			cq->second->users--;
	}
	if (qp.srq != nullptr && qp.srq->users > 0)
		qp.srq->users--;
	{
		std::lock_guard ql(qp.lock);
		rc_owed_ack(qp, nullptr, true);
	}
	/* The exclusive table lock waits for every data-path thread that could hold the QP. */
	retire_qp(qp);
	qp_index_[qpn] = nullptr;
	qps_.erase(it);
	return 0;
}

int EmuDataPath::modify_qp(uint32_t qpn, QpTransition t, const QpPath &p)
{
	std::unique_lock lk(table_lock_);
	auto it = qps_.find(qpn);
	if (it == qps_.end())
		return -ENOENT;
	Qp &qp = *it->second;
	/* The engine runs a QP only under the shared table lock: with it held exclusive,
	 * nothing runs this QP now, so its consumer counter may be reset here. */
	const QpState s = qp.get_state();
	switch (t) {
	case QpTransition::rst2init:
		if (s != QpState::rst)
			return -EPERM;
		if (p.port < 1 || p.port > cfg_.ports)
			return -EINVAL;
		/* One GSI QP per port: a ConnectX has one QP1 per port, as the IBTA's Get
		 * Special QP verb makes one per port. It is the port's from here to 2RST. */
		if (qp.attr.gsi) {
			uint32_t &g = gsi_qpn_[p.port - 1];
			if (g != 0 && g != qpn)
				return -EBUSY;
			g = qpn;
		}
		qp.path.port = p.port;
		qp.path.rre = p.rre;
		qp.path.rwe = p.rwe;
		qp.path.rae = p.rae;
		qp.path.atomic_mode = p.atomic_mode;
		qp.path.q_key = p.q_key;
		qp.set_state(QpState::init);
		return 0;
	case QpTransition::init2rtr: {
		if (s != QpState::init)
			return -EPERM;
		/* A GSI QP stays the GSI QP of the port it took at RST2INIT. */
		if (qp.attr.gsi && p.port != qp.path.port)
			return -EINVAL;
		/* A QP of a wire port without force loopback talks RoCEv2 to the GID its address
		 * path names: that GID must be of the port's address family, and the port's GID
		 * table has one entry (index 0). */
		WirePort *w =
			p.port >= 1 && p.port <= wire_.size() ? wire_[p.port - 1].get() : nullptr;
		std::unique_ptr<RcWire> rc;
		if (w != nullptr && !p.fl && !qp.attr.ud) { /* UD: a destination per WQE */
			Gid remote;
			std::memcpy(remote.data(), p.remote_gid, remote.size());
			if (p.gid_index != 0)
				return -ENXIO;
			if (!w->reaches(remote))
				return -EADDRNOTAVAIL;
			rc = std::make_unique<RcWire>();
			rc->port = w;
			rc->remote = remote;
			rc->tx = w->tx_path(remote);
			rc->mtu = 128u << p.mtu; /* prm::qp_mtu: 1 is 256 ... 5 is 4096 */
			rc->pend.resize(size_t{1} << qp.attr.log_sq_size);
			rc->epsn = p.next_rcv_psn & kPsnMask;
			rc->atomics.resize(size_t{1} << p.log_rra_max);
		}
		/* The decoder built p from the QP's context and this command's fields. */
		qp.path = p;
		qp.rc = std::move(rc);
		qp.set_state(QpState::rtr);
		return 0;
	}
	case QpTransition::rtr2rts:
		if (s != QpState::rtr)
			return -EPERM;
		qp.path = p;
		if (qp.rc)
			qp.rc->next_psn = p.next_send_psn & kPsnMask;
		qp.ud_psn = p.next_send_psn & kPsnMask;
		qp.set_state(QpState::rts);
		return 0;
	case QpTransition::to_err: {
		qp.set_state(QpState::err);
		/* Posted receive WQEs complete flushed now; ones posted later at the QP's next
		 * doorbell or wire packet (run_qp). */
		const DmaSection dma(mmu_);
		std::lock_guard rl(qp.rq_lock);
		rq_flush(dma, qp);
		return 0;
	}
	case QpTransition::to_rst:
		qp.set_state(QpState::rst);
		for (uint32_t &g : gsi_qpn_) /* a GSI QP's port is free for another */
			if (g == qpn)
				g = 0;
		qp.ci = 0;
		qp.rnr_tries = 0;
		/* A fault still out names a WQE or request that is gone: its resume finds nothing
		 * waiting (emu_mlx5_odp.cpp). */
		qp.pf = Qp::Pf::none;
		qp.rpf = Qp::Pf::none;
		qp.pf_recv = false;
		qp.rpf_recv = false;
		qp.rq_ci = 0;
		if (qp.srq != nullptr) {
			/* An SRQ WQE this QP took and did not complete (held for a fault, or a wire
			 * SEND's in progress): flushed, so that the driver can link it back (the
			 * SRQ's indices outlive this QP's numbering). */
			const DmaSection dma(mmu_);
			std::lock_guard rl(qp.rq_lock);
			rq_flush(dma, qp);
		}
		{
			std::lock_guard ql(qp.lock);
			rc_owed_ack(qp, nullptr, true);
		}
		qp.path = QpPath{};
		qp.rc.reset();
		return 0;
	}
	return -EINVAL;
}

int EmuDataPath::qp_state(uint32_t qpn, QpState *state) const
{
	std::shared_lock lk(table_lock_);
	Qp *qp = find_qp(qpn);
	if (qp == nullptr)
		return -ENOENT;
	*state = qp->get_state();
	return 0;
}

int EmuDataPath::query_qp(uint32_t qpn, QpInfo *info) const
{
	std::shared_lock lk(table_lock_);
	Qp *qp = find_qp(qpn);
	if (qp == nullptr)
		return -ENOENT;
	info->attr = qp->attr;
	info->path = qp->path;
	info->state = qp->get_state();
	std::lock_guard ql(qp->lock);
	info->sq_ci = qp->ci;
	std::lock_guard rl(qp->rq_lock);
	info->rq_ci = qp->rq_ci;
	return 0;
}

bool EmuDataPath::pd_in_use(uint32_t pd) const
{
	std::shared_lock lk(table_lock_);
	for (const auto &[n, qp] : qps_)
		if (qp->attr.pd == pd)
			return true;
	for (const auto &[n, srq] : srqs_)
		if (srq->attr.pd == pd)
			return true;
	return false;
}

size_t EmuDataPath::qps() const
{
	std::shared_lock lk(table_lock_);
	return qps_.size();
}

size_t EmuDataPath::cqs() const
{
	std::shared_lock lk(table_lock_);
	return cqs_.size();
}

void EmuDataPath::clear()
{
	std::unique_lock lk(table_lock_);
	for (const auto &[n, qp] : qps_)
		retire_qp(*qp);
	for (const auto &[n, cq] : cqs_)
		retire_cq(*cq);
	std::fill(qp_index_.begin(), qp_index_.end(), nullptr);
	gsi_qpn_ = {};
	qps_.clear();
	srqs_.clear();
	cqs_.clear();
	eqs_.clear();
	for (auto &u : uar_qps_)
		u.clear();
	std::fill(uar_allocated_.begin(), uar_allocated_.end(), false);
	next_qpn_ = kFirstQpn;
	next_cqn_ = next_srqn_ = 1;
}

/* Table lock held (either way). A direct index: no search on the doorbell path. */
EmuDataPath::Qp *EmuDataPath::find_qp(uint32_t qpn) const
{
	return qpn < qp_index_.size() ? qp_index_[qpn] : nullptr;
}

/* Table lock held (either way): gsi_qpn_ changes only under it exclusive. Device hot path. */
EmuDataPath::Qp *EmuDataPath::find_ud_qp(uint32_t dqpn, uint32_t port) const
{
	if (dqpn != prm::gsi::qpn)
		return find_qp(dqpn);
	return port >= 1 && port <= gsi_qpn_.size() ? find_qp(gsi_qpn_[port - 1]) : nullptr;
}

/* Table lock held exclusive: a going QP's / CQ's statistics move to the device's totals. */
void EmuDataPath::retire_qp(const Qp &qp)
{
	ctr_.wqes.fetch_add(qp.n_wqes.load(std::memory_order_relaxed), std::memory_order_relaxed);
	ctr_.bytes.fetch_add(qp.n_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
	ctr_.doorbells.fetch_add(qp.n_doorbells.load(std::memory_order_relaxed),
				 std::memory_order_relaxed);
	ctr_.recvs.fetch_add(qp.n_recvs.load(std::memory_order_relaxed), std::memory_order_relaxed);
	ctr_.rnr.fetch_add(qp.n_rnr.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void EmuDataPath::retire_cq(const Cq &cq)
{
	ctr_.cqes.fetch_add(cq.n_cqes.load(std::memory_order_relaxed), std::memory_order_relaxed);
	ctr_.cqe_errors.fetch_add(cq.n_errors.load(std::memory_order_relaxed),
				  std::memory_order_relaxed);
	ctr_.cq_overruns.fetch_add(cq.n_overruns.load(std::memory_order_relaxed),
				   std::memory_order_relaxed);
}

/* Device hot path: the shared table lock and the QP's lock, no allocation. */
void EmuDataPath::uar_doorbell(uint32_t uar, uint64_t raw, bool by_value)
{
	std::shared_lock lk(table_lock_);
	if (uar == 0 || uar > cfg_.uars) {
		ctr_.doorbells.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	if (by_value) {
		/* The CPU stored the ctrl segment's first 8 bytes (opcode word, qpn/ds word) as
		 * they lie in memory: raw is those bytes. */
		static_assert(sizeof(raw) == prm::wqe_ctrl::doorbell_bytes);
		const auto qpn = static_cast<uint32_t>(prm::get(&raw, prm::wqe_ctrl::qpn));
		Qp *qp = find_qp(qpn);
		if (qp != nullptr && qp->attr.uar == uar) {
			run_qp(*qp, true); /* counts the doorbell under the QP's lock */
			return;
		}
	}
	/* The value may be another QP's (the latest ring wins): look at every QP here. */
	ctr_.doorbells.fetch_add(1, std::memory_order_relaxed);
	for (uint32_t qpn : uar_qps_[uar])
		run_qp(*find_qp(qpn), false);
}

int EmuDataPath::process_qp(uint32_t qpn)
{
	std::shared_lock lk(table_lock_);
	Qp *qp = find_qp(qpn);
	if (qp == nullptr)
		return -ENOENT;
	run_qp(*qp, false);
	return 0;
}

DpStats EmuDataPath::stats() const
{
	DpStats s;
	s.wqes = ctr_.wqes.load(std::memory_order_relaxed);
	s.cqes = ctr_.cqes.load(std::memory_order_relaxed);
	s.cqe_errors = ctr_.cqe_errors.load(std::memory_order_relaxed);
	s.cq_overruns = ctr_.cq_overruns.load(std::memory_order_relaxed);
	s.eqes = ctr_.eqes.load(std::memory_order_relaxed);
	s.events_dropped = ctr_.events_dropped.load(std::memory_order_relaxed);
	s.bytes = ctr_.bytes.load(std::memory_order_relaxed);
	s.doorbells = ctr_.doorbells.load(std::memory_order_relaxed);
	s.recvs = ctr_.recvs.load(std::memory_order_relaxed);
	s.rnr = ctr_.rnr.load(std::memory_order_relaxed);
	s.dbr_faults = ctr_.dbr_faults.load(std::memory_order_relaxed);
	s.eq_overruns = ctr_.eq_overruns.load(std::memory_order_relaxed);
	s.cq_arms = ctr_.cq_arms.load(std::memory_order_relaxed);
	s.comp_events = ctr_.comp_events.load(std::memory_order_relaxed);
	s.interrupts = ctr_.interrupts.load(std::memory_order_relaxed);
	s.arms_dropped = ctr_.arms_dropped.load(std::memory_order_relaxed);
	s.page_faults = ctr_.page_faults.load(std::memory_order_relaxed);
	s.pf_resumes = ctr_.pf_resumes.load(std::memory_order_relaxed);
	s.pf_errors = ctr_.pf_errors.load(std::memory_order_relaxed);
	s.ud_sent = ctr_.ud_sent.load(std::memory_order_relaxed);
	s.ud_received = ctr_.ud_received.load(std::memory_order_relaxed);
	s.ud_qkey_dropped = ctr_.ud_qkey_dropped.load(std::memory_order_relaxed);
	s.ud_no_recv = ctr_.ud_no_recv.load(std::memory_order_relaxed);
	s.ud_dropped = ctr_.ud_dropped.load(std::memory_order_relaxed);
	/* Live objects' counters on top of the retired ones. */
	std::shared_lock lk(table_lock_);
	for (const auto &[n, qp] : qps_) {
		s.wqes += qp->n_wqes.load(std::memory_order_relaxed);
		s.bytes += qp->n_bytes.load(std::memory_order_relaxed);
		s.doorbells += qp->n_doorbells.load(std::memory_order_relaxed);
		s.recvs += qp->n_recvs.load(std::memory_order_relaxed);
		s.rnr += qp->n_rnr.load(std::memory_order_relaxed);
	}
	for (const auto &[n, cq] : cqs_) {
		s.cqes += cq->n_cqes.load(std::memory_order_relaxed);
		s.cqe_errors += cq->n_errors.load(std::memory_order_relaxed);
		s.cq_overruns += cq->n_overruns.load(std::memory_order_relaxed);
	}
	return s;
}

void EmuDataPath::set_wire_port(uint32_t port, std::unique_ptr<WirePort> w)
{
	std::unique_lock lk(table_lock_);
	if (port < 1 || port > wire_.size())
		return;
	wire_[port - 1] = std::move(w);
}

WireStats EmuDataPath::wire_stats() const
{
	WireStats s;
	s.tx_packets = wctr_.tx_packets.load(std::memory_order_relaxed);
	s.tx_errors = wctr_.tx_errors.load(std::memory_order_relaxed);
	s.rx_packets = wctr_.rx_packets.load(std::memory_order_relaxed);
	s.rx_bad_icrc = wctr_.rx_bad_icrc.load(std::memory_order_relaxed);
	s.rx_malformed = wctr_.rx_malformed.load(std::memory_order_relaxed);
	s.rx_dropped = wctr_.rx_dropped.load(std::memory_order_relaxed);
	s.duplicates = wctr_.duplicates.load(std::memory_order_relaxed);
	s.acks_sent = wctr_.acks_sent.load(std::memory_order_relaxed);
	s.lazy_acks = wctr_.lazy_acks.load(std::memory_order_relaxed);
	s.ack_requests = wctr_.ack_requests.load(std::memory_order_relaxed);
	s.naks_sent = wctr_.naks_sent.load(std::memory_order_relaxed);
	s.naks_received = wctr_.naks_received.load(std::memory_order_relaxed);
	s.rra_exceeded = wctr_.rra_exceeded.load(std::memory_order_relaxed);
	s.retransmits = wctr_.retransmits.load(std::memory_order_relaxed);
	s.timeouts = wctr_.timeouts.load(std::memory_order_relaxed);
	s.seq_naks_received = wctr_.seq_naks_received.load(std::memory_order_relaxed);
	s.rnr_naks_received = wctr_.rnr_naks_received.load(std::memory_order_relaxed);
	s.retry_exceeded = wctr_.retry_exceeded.load(std::memory_order_relaxed);
	for (const auto &w : wire_) {
		if (!w)
			continue;
		const WireFaultCounts f = w->fault_counts();
		s.tx_lost += f.lost;
		s.tx_duplicated += f.duplicated;
		s.tx_reordered += f.reordered;
		s.tx_delayed += f.delayed;
		const WireTxCounts t = w->tx_counts();
		s.tx_syscalls += t.syscalls;
		s.tx_gso_sends += t.gso_sends;
		s.tx_gso_refused += t.gso_refused;
		const WireRxCounts r = w->rx_counts();
		s.rx_gro_batches += r.gro_batches;
		s.rx_gro_datagrams += r.gro_datagrams;
	}
	return s;
}

bool EmuDataPath::check_invariants() const
{
	std::shared_lock lk(table_lock_);
	std::map<uint32_t, uint32_t> users, srq_users;
	size_t bound = 0;
	for (const auto &[n, qp] : qps_) {
		if (cqs_.count(qp->attr.cqn) == 0 || qp->attr.uar == 0 ||
		    qp->attr.uar > cfg_.uars || !uar_allocated_[qp->attr.uar])
			return false;
		users[qp->attr.cqn]++;
		if (qp->attr.receives()) {
			if (cqs_.count(qp->attr.rcqn) == 0)
				return false;
			users[qp->attr.rcqn]++;
		}
		if (qp->attr.srqn != 0) {
			auto it = srqs_.find(qp->attr.srqn);
			if (it == srqs_.end() || it->second.get() != qp->srq)
				return false;
			srq_users[qp->attr.srqn]++;
		}
		const auto &u = uar_qps_[qp->attr.uar];
		if (std::count(u.begin(), u.end(), n) != 1)
			return false;
	}
	/* A port's GSI QP is a live GSI QP of that port. */
	for (uint32_t port = 1; port <= gsi_qpn_.size(); port++) {
		const uint32_t g = gsi_qpn_[port - 1];
		auto it = g != 0 ? qps_.find(g) : qps_.end();
		if (g != 0 &&
		    (it == qps_.end() || !it->second->attr.gsi || it->second->path.port != port))
			return false;
	}
	for (const auto &u : uar_qps_)
		bound += u.size();
	if (bound != qps_.size())
		return false;
	for (const auto &[n, cq] : cqs_) {
		auto it = users.find(n);
		if (cq->users != (it == users.end() ? 0 : it->second))
			return false;
	}
	for (const auto &[n, srq] : srqs_) {
		auto it = srq_users.find(n);
		if (srq->users != (it == srq_users.end() ? 0 : it->second))
			return false;
	}
	return true;
}

} // namespace nicmr::emu
