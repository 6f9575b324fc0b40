/* SPDX-License-Identifier: BSD-3-Clause */
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include <rte_io.h>

#include <infiniband/mlx5dv.h>

#include "mlx5_cq.h"
#include "mlx5_dp_commands.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

int Cq::create(Device &dev, Uar &uar, const CqParams &p, std::unique_ptr<Cq> *out)
{
	if (p.log_size < 1 || p.log_size > 16)
		return -EINVAL;
	uint32_t eqn = 0;
	if (p.eqn) {
		eqn = *p.eqn;
	} else if (int rc = dev.comp_eqn(&eqn); rc != 0) {
		return rc;
	}
	std::unique_ptr<Cq> cq(new (std::nothrow) Cq(dev));
	if (!cq)
		return -ENOMEM;
	size_t bytes = (size_t{1} << p.log_size) * prm::cqe::size;
	int rc = QueueBuffer::alloc(dev.arena(), bytes, true, &cq->ring_);
	if (rc == 0)
		rc = QueueBuffer::alloc(dev.arena(), prm::dbr::size, false, &cq->dbr_);
	if (rc != 0)
		return rc;
	cq->log_size_ = p.log_size;
	cq->mask_ = (1u << p.log_size) - 1;
	cq->cqes_ = cq->ring_.va();
	cq->dbr_ci_ = reinterpret_cast<uint32_t *>(cq->dbr_.va()) + prm::dbr::cq_ci_dword;
	cq->dbr_arm_ = reinterpret_cast<uint32_t *>(cq->dbr_.va()) + prm::dbr::cq_arm_dword;
	/* The record starts zeroed (the arena's memory may hold anything). */
	*cq->dbr_ci_ = 0;
	*cq->dbr_arm_ = 0;
	cq->arm_doorbell_ = prm::uar::page_offset(uar.index()) + prm::cq_doorbell::offset;
	/* Invalid opcode and owner 1: no slot of the first pass (owner 0) looks written. */
	uint8_t op_own = 0; /* the whole byte: the ring's memory may hold anything */
	prm::set(&op_own, prm::in_byte(prm::cqe::opcode), MLX5_CQE_INVALID);
	prm::set(&op_own, prm::in_byte(prm::cqe::owner), 1);
	for (uint32_t i = 0; i <= cq->mask_; i++)
		cq->cqes_[size_t{i} * prm::cqe::size + prm::cqe::op_own_byte] = op_own;

	CqCreate c;
	c.log_size = p.log_size;
	c.uar = uar.index();
	c.eqn = eqn;
	c.dbr_iova = cq->dbr_.iova();
	c.mem.pas = cq->ring_.pas();
	/* The ring and its initial CQEs are plain stores; the command queue's doorbell (a
	 * release in CmdQueue) orders them before the device can look. */
	rc = create_cq(dev.cmdq(), c, &cq->cqn_);
	if (rc != 0)
		return rc;
	cq->created_ = true;
	*out = std::move(cq);
	return 0;
}

Cq::~Cq()
{
	if (!created_)
		return;
	int rc = destroy_cq(dev_.cmdq(), cqn_);
	if (rc != 0)
		NICMR_LOG(error, "mlx5", "%s: DESTROY_CQ 0x%x failed: %d",
			  dev_.function().name().c_str(), cqn_, rc);
}

/* Hot path: no lock, no allocation, no system call. */
int Cq::poll(Completion *out, int max) noexcept
{
	int n = 0;
	while (n < max) {
		uint8_t *cqe = cqes_ + size_t{ci_ & mask_} * prm::cqe::size;
		/* Acquire: pairs with the device's release store of op_own, so the other CQE bytes
		 * read below are the ones it wrote before handing the slot over. */
		const uint8_t op_own = std::atomic_ref<uint8_t>(cqe[prm::cqe::op_own_byte])
					       .load(std::memory_order_acquire);
		const auto opcode =
			static_cast<uint8_t>(prm::get(&op_own, prm::in_byte(prm::cqe::opcode)));
		if (opcode == MLX5_CQE_INVALID ||
		    prm::get(&op_own, prm::in_byte(prm::cqe::owner)) != ((ci_ >> log_size_) & 1))
			break;
		/* I/O read barrier: the CQE's other bytes may not be loaded before the owner
		 * byte that says the device wrote them (rdma-core's udma_from_device_barrier in
		 * providers/mlx5/cq.c, DPDK's rte_io_rmb in check_cqe,
		 * drivers/common/mlx5/mlx5_common.h). */
		rte_io_rmb();
		Completion &c = out[n];
		c.wr_id = 0;
		c.opcode = opcode;
		c.wqe_index = static_cast<uint16_t>(prm::get(cqe, prm::cqe::wqe_counter));
		c.qpn = static_cast<uint32_t>(prm::get(cqe, prm::cqe::qpn));
		c.srqn = static_cast<uint32_t>(prm::get(cqe, prm::cqe::srqn));
		if (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) {
			c.syndrome = static_cast<uint8_t>(prm::get(cqe, prm::err_cqe::syndrome));
			c.vendor_syndrome =
				static_cast<uint8_t>(prm::get(cqe, prm::err_cqe::vendor_err_synd));
			c.byte_len = 0;
			c.imm = 0;
		} else {
			c.syndrome = 0;
			c.vendor_syndrome = 0;
			c.byte_len = static_cast<uint32_t>(prm::get(cqe, prm::cqe::byte_cnt));
			c.imm = static_cast<uint32_t>(prm::get(cqe, prm::cqe::imm_inval_pkey));
		}
		/* UD receives: the sender's QP and the GRH in front of the data, read from a
		 * SEND's responder CQE only, as rdma-core's providers/mlx5/cq.c handle_responder
		 * reads them (0 in every other CQE). */
		const bool send = opcode == MLX5_CQE_RESP_SEND || opcode == MLX5_CQE_RESP_SEND_IMM;
		c.src_qpn = send ? static_cast<uint32_t>(prm::get(cqe, prm::cqe::src_qpn)) : 0;
		c.grh = send && prm::get(cqe, prm::cqe::grh) != 0;
		c.l3_hdr_type =
			send ? static_cast<uint8_t>(prm::get(cqe, prm::cqe::l3_hdr_type)) : 0;
		ci_++;
		n++;
	}
	if (n != 0) {
		/* Doorbell record of the consumer index (DMA memory, big-endian; no MMIO: nicmr
		 * polls and never arms the CQ). Release: our loads of the consumed CQEs may not
		 * be performed after the store that lets the device write those slots again, a
		 * load-store order that rte_io_wmb (store-store) does not give. DPDK's
		 * mlx5_tx_handle_completion (drivers/net/mlx5/mlx5_tx.c) puts only a compiler
		 * barrier here; the release also pairs with the emulated device's acquire load
		 * of the record (emu_mlx5_wqe.cpp). */
		std::atomic_ref<uint32_t>(*dbr_ci_).store(prm::word_be<prm::dbr::cq_ci>(ci_),
							  std::memory_order_release);
	}
	return n;
}

/* Not a hot path, but no lock, no allocation, no system call. */
void Cq::arm(bool solicited) noexcept
{
	/* rdma-core mlx5_arm_cq: sn = arm_sn & 3, ci = cons_index & 0xffffff, cmd
	 * MLX5_CQ_DB_REQ_NOT_SOL or MLX5_CQ_DB_REQ_NOT; the record's arm word, then the 64-bit
	 * doorbell: that word and the CQN. */
	const uint32_t word = prm::word_be<prm::cq_doorbell::arm_sn, prm::cq_doorbell::cmd,
					   prm::cq_doorbell::consumer_index>(
		arm_sn() & 3,
		solicited ? prm::cq_doorbell::cmd_solicited : prm::cq_doorbell::cmd_next,
		ci_ & prm::value_mask(prm::cq_doorbell::consumer_index));
	std::atomic_ref<uint32_t>(*dbr_arm_).store(word, std::memory_order_relaxed);
	uint8_t db[8] = {};
	std::memcpy(db, &word, sizeof(word));
	prm::set(db, prm::cq_doorbell::cqn, cqn_);
	uint64_t v;
	std::memcpy(&v, db, sizeof(v));
	/* Full I/O barrier: the record store and our loads of the CQEs polled so far are done
	 * before the device sees the arm (rdma-core mmio_wc_start, a write barrier, before the
	 * MMIO; the load-to-store half matters because the ci says those CQEs are consumed). */
	rte_io_mb();
	dev_.function().bar0_write64(arm_doorbell_, v);
}

} // namespace nicmr::mlx5
