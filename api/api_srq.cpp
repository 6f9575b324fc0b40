/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared receive queues of the native API over drivers/mlx5 (mlx5_srq.h):
 *
 *   nicmr_srq ── mlx5::Srq (the PD's; WQE free list, wr_ids by WQE index)
 *      ^ users: nicmr_qp (nicmr_qp_attr::srq) ── its recv_cq: nicmr_cq_poll retires each
 *                                                 receive CQE's WQE index to the SRQ
 *
 * Slow path (create, destroy) takes dp_mu for the by-number map the page-fault service reads;
 * nicmr_srq_post_recv is the hot path.
 */
#include <cerrno>
#include <mutex>

#include "api_internal.h"
#include "nicmr_log.h"

using namespace nicmr;

int nicmr_srq_create(struct nicmr_pd *pd, const struct nicmr_srq_attr *attr, struct nicmr_srq **out)
{
	if (pd == nullptr || attr == nullptr || out == nullptr || attr->depth < 1 ||
	    attr->depth > NICMR_MAX_SRQ_DEPTH || attr->max_sge < 1 ||
	    attr->max_sge > NICMR_MAX_SRQ_SGE)
		return -EINVAL;
	static_assert(NICMR_MAX_SRQ_SGE == mlx5::Srq::kMaxSge);
	nicmr_device *dev = pd->dev;
	std::unique_ptr<nicmr_srq> s(new (std::nothrow) nicmr_srq);
	if (!s)
		return -ENOMEM;
	s->pd = pd;
	s->depth = attr->depth;
	s->max_sge = attr->max_sge;
	mlx5::SrqParams p;
	p.pd = pd->handle.pd();
	p.max_wr = attr->depth;
	p.max_sge = attr->max_sge;
	int rc = mlx5::Srq::create(*dev->drv, p, &s->srq);
	if (rc != 0) {
		NICMR_LOG(warn, "api", "%s: SRQ of %u x %u: %d", dev->spec.c_str(), attr->depth,
			  attr->max_sge, rc);
		return rc;
	}
	try {
		std::lock_guard lk(dev->dp_mu);
		dev->dp_srqs.emplace(s->srq->srqn(), s.get());
	} catch (const std::bad_alloc &) {
		return -ENOMEM; /* the Srq's destructor destroys it */
	}
	/* As a QP: the PD and the device stay while the SRQ lives (relaxed counts). */
	pd->users.fetch_add(1, std::memory_order_relaxed);
	dev->dp_objs.fetch_add(1, std::memory_order_relaxed);
	*out = s.release();
	return 0;
}

int nicmr_srq_destroy(struct nicmr_srq *srq)
{
	if (srq == nullptr)
		return -EINVAL;
	/* acquire: a QP destroy that dropped its count is done with the SRQ. */
	if (srq->users.load(std::memory_order_acquire) != 0)
		return -EBUSY;
	nicmr_device *dev = srq->pd->dev;
	{
		std::lock_guard lk(dev->dp_mu);
		dev->dp_srqs.erase(srq->srq->srqn());
	}
	srq->srq.reset();
	/* release: the SRQ is gone before pd_free or device close may see the counts drop. */
	srq->pd->users.fetch_sub(1, std::memory_order_release);
	delete srq;
	dev->dp_objs.fetch_sub(1, std::memory_order_release);
	return 0;
}

uint32_t nicmr_srq_num(const struct nicmr_srq *srq)
{
	return srq != nullptr ? srq->srq->srqn() : 0;
}

int nicmr_srq_post_recv(struct nicmr_srq *srq, const struct nicmr_sge *sgl, uint32_t n,
			uint64_t wr_id)
{
	/* HOT PATH: no lock, no allocation, no system call. */
	if (srq == nullptr || (sgl == nullptr && n > 0) || n > srq->max_sge)
		return -EINVAL;
	if (srq->srq->outstanding() >= srq->depth)
		return -ENOSPC;
	mlx5::Sge s[NICMR_MAX_SRQ_SGE];
	for (uint32_t i = 0; i < n; i++) {
		if (sgl[i].length != 0) {
			uint64_t iova = 0;
			const int rc = nicmr_key_lookup(srq->pd->dev, sgl[i].lkey, sgl[i].addr,
							sgl[i].length, NICMR_ACCESS_RECV, &iova);
			if (rc != 0)
				return rc;
		}
		s[i] = {sgl[i].addr, sgl[i].length, sgl[i].lkey};
	}
	return srq->srq->post_recv({s, n}, wr_id);
}
