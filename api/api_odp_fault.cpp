/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Page faults of on-demand MRs (doc/odp.md, "Page faults"): the device raises one when an RDMA
 * access or a local SGE touches a page that is not present, and holds the access; the driver
 * makes the pages present and resumes it.
 *
 *   nicmr_cq_poll (its CQ drained, Device::page_fault_pending)  \
 *   nicmr_device_progress                                         > nicmr_odp_serve
 *     one server at a time (pf_mu, try-lock: the others go on polling)
 *     Device::page_faults: the page-fault EQ's events
 *       RDMA fault: [va, va + len) of the rkey                   \
 *       WQE fault: the data segments of the QP's WQE at wqe_index  > fault_in, per range:
 *                  (Qp::wqe_sges, read back from the SQ; for a    /  nicmr_advise_mr's work
 *                  receive WQE, Qp::rq_wqe_sges from the RQ or      (PREFETCH, or _WRITE for
 *                  Srq::wqe_sges from the SRQ)
 *                                                                   a write): populate, pin,
 *                                                                   map, UMR, FLUSH
 *     Device::page_fault_resume(error = a range could not be made present)
 *
 * Linux's mlx5_ib (drivers/infiniband/hw/mlx5/odp.c: mlx5_ib_mr_rdma_pfault_handler,
 * mlx5_ib_mr_wqe_pfault_handler, mlx5_ib_page_fault_resume) is the model: an RDMA fault
 * prefetches the faulting range of the rkey, a WQE fault reads the WQE back and faults in each
 * of its data segments, and a failure resumes with the error flag. Keys of MRs that are not
 * on-demand need nothing (their pages are always present).
 * Slow path throughout: locks, allocations, system calls, commands.
 */
#include <algorithm>
#include <cerrno>
#include <mutex>

#include "api_internal.h"
#include "mlx5_eq.h"
#include "mlx5_qp.h"
#include "nicmr_log.h"

using namespace nicmr;

namespace {

/* Makes [va, va + len) of key present to the device, writable when write, as
 * nicmr_advise_mr(PREFETCH or PREFETCH_WRITE, FLUSH) does. 0 for a key that is not an
 * on-demand MR's; the advice's error otherwise (-EFAULT: memory the process does not map). */
int fault_in(nicmr_device *dev, uint32_t key, uint64_t va, uint64_t len, bool write)
{
	if (len == 0)
		return 0;
	/* Held while its PD is read and the advice runs: a deregistration says -EBUSY. */
	if (dev->engine->keys().hold(key) != 0)
		return -EFAULT;
	mr::EntryFields f;
	int rc = 0;
	if (dev->table->snapshot(key, &f) != 0 || f.state != mr::EntryState::live) {
		rc = -EFAULT;
	} else if (f.flags & mr::kEntryOdp) {
		nicmr_sge g{};
		g.addr = va;
		g.length = static_cast<uint32_t>(len);
		g.lkey = key;
		rc = nicmr_advise_mr(nicmr_mr_slot(dev, key)->pd,
				     write ? NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE
					   : NICMR_ADVISE_MR_ADVICE_PREFETCH,
				     NICMR_ADVISE_MR_FLAG_FLUSH, &g, 1);
	}
	dev->engine->keys().unhold(mr::mkey_index(key));
	return rc;
}

/*
 * The data segments of a WQE fault's WQE, each faulted in. The fault's type says which queue
 * holds it (Linux odp.c, mlx5_ib_mr_wqe_pfault_handler and odp_get_rsc): REQUESTOR set, the
 * QP's SQ (MLX5_WQE_PF_TYPE_REQ_SEND_OR_WRITE 1, _REQ_READ_OR_ATOMIC 3); WRITE alone, the QP's
 * RQ (MLX5_WQE_PF_TYPE_RESP 2: a SEND met the receive WQE's scatter list, every segment made
 * present for writing, as mlx5_ib_mr_responder_pfault_handler_rq leaves the whole WQE to
 * pagefault_data_segments); 0 an SRQ's (MLX5_WQE_PF_TYPE_RMP), read from the SRQ its
 * wq_number names and made present for writing as an RQ's.
 */
int serve_wqe(nicmr_device *dev, const mlx5::Event &ev)
{
	namespace pf = mlx5::prm::eqe_page_fault;
	constexpr int kMax = std::max<int>(mlx5::Qp::max_send_sge(), NICMR_MAX_RECV_SGE);
	mlx5::Sge sges[kMax];
	const bool requestor = (ev.pf.flags & pf::flag_requestor) != 0;
	const bool recv = !requestor && (ev.pf.flags & pf::flag_write) != 0;
	bool scatter = false;
	int n = 0;
	if (!requestor && !recv) {
		/* An SRQ's WQE (MLX5_WQE_PF_TYPE_RMP): wq_number is the SRQ's number, the WQE is
		 * read back from it past its next segment (Linux odp.c, mlx5_ib_read_wqe_srq and
		 * mlx5_ib_mr_responder_pfault_handler_srq) and made present for writing. The SRQ
		 * cannot go while dp_mu is held (nicmr_srq_destroy takes it). */
		std::lock_guard lk(dev->dp_mu);
		auto it = dev->dp_srqs.find(ev.pf.wq_number);
		if (it == dev->dp_srqs.end())
			return -ENOENT;
		n = it->second->srq->wqe_sges(ev.pf.wqe_index, sges, kMax);
	} else {
		/* The QP cannot go while dp_mu is held (nicmr_qp_destroy takes it). */
		std::lock_guard lk(dev->dp_mu);
		auto it = dev->dp_qps.find(ev.pf.wq_number);
		if (it == dev->dp_qps.end())
			return -ENOENT;
		n = recv ? it->second->qp->rq_wqe_sges(ev.pf.wqe_index, sges, kMax)
			 : it->second->qp->wqe_sges(ev.pf.wqe_index, sges, kMax, &scatter);
	}
	if (n < 0)
		return n;
	const bool write = !requestor || scatter || (ev.pf.flags & pf::flag_write);
	for (int i = 0; i < n; i++)
		if (int rc = fault_in(dev, sges[i].lkey, sges[i].addr, sges[i].length, write);
		    rc != 0)
			return rc;
	return 0;
}

int serve_one(nicmr_device *dev, const mlx5::Event &ev)
{
	if (ev.sub_type == mlx5::prm::eqe_page_fault::subtype_wqe)
		return serve_wqe(dev, ev);
	if (ev.sub_type == mlx5::prm::eqe_page_fault::subtype_rdma)
		return fault_in(dev, ev.pf.rkey, ev.pf.va, ev.pf.len,
				(ev.pf.flags & mlx5::prm::eqe_page_fault::flag_write) != 0);
	return -EOPNOTSUPP; /* a subtype nicmr does not know: resumed with an error (odp.c) */
}

} // namespace

int nicmr_odp_serve(nicmr_device *dev)
{
	std::unique_lock lk(dev->pf_mu, std::try_to_lock);
	if (!lk.owns_lock())
		return 0; /* another thread serves them */
	int served = 0, first_err = 0;
	mlx5::Event ev[16];
	for (;;) {
		const int n = dev->drv->page_faults(ev, static_cast<int>(std::size(ev)));
		if (n <= 0)
			break;
		for (int i = 0; i < n; i++) {
			const int rc = serve_one(dev, ev[i]);
			if (rc != 0)
				NICMR_LOG(info, "api",
					  "%s: page fault %#x (subtype %u, flags %#x) not served: "
					  "%d; "
					  "resumed with an error",
					  dev->spec.c_str(), ev[i].pf.token, ev[i].sub_type,
					  ev[i].pf.flags, rc);
			const int r = dev->drv->page_fault_resume(ev[i], rc != 0);
			if (r != 0) {
				NICMR_LOG(error, "api", "%s: PAGE_FAULT_RESUME of %#x failed: %d",
					  dev->spec.c_str(), ev[i].pf.token, r);
				if (first_err == 0)
					first_err = r;
				continue;
			}
			served++;
		}
	}
	return first_err != 0 ? first_err : served;
}

void nicmr_odp_serve_from_poll(nicmr_device *dev) noexcept
{
	/* Errors are logged by nicmr_odp_serve; the poll itself has nothing to report. */
	try {
		(void)nicmr_odp_serve(dev);
	} catch (...) {
		NICMR_LOG(error, "api", "%s: page faults not served (no memory)",
			  dev->spec.c_str());
	}
}

extern "C" int nicmr_device_progress(struct nicmr_device *dev)
{
	if (dev == nullptr)
		return -EINVAL;
	/* Run to completion (doc/native-api.md, "Progress"): the emulated wire's packets are
	 * received and executed on this thread (a passive target's poll loop); a page fault
	 * they raised is served just below. Nothing on hardware. */
	dev->fn->progress();
	if (!dev->drv->page_fault_pending())
		return 0;
	return nicmr_odp_serve(dev);
}
