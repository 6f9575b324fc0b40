/* SPDX-License-Identifier: BSD-3-Clause */
#include <atomic>
#include <cerrno>
#include <new>

#include <sys/eventfd.h>
#include <unistd.h>

#include <rte_io.h>

#include "mlx5_dp_commands.h"
#include "mlx5_eq.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

int Eq::create(Device &dev, Uar &uar, const EqParams &p, std::unique_ptr<Eq> *out)
{
	if (p.log_size < 1 || p.log_size > 16 || p.vector > 0xff)
		return -EINVAL;
	std::unique_ptr<Eq> eq(new (std::nothrow) Eq(dev));
	if (!eq)
		return -ENOMEM;
	if (p.interrupts) {
		/* The eventfd first and attached before CREATE_EQ, as the kernel requests the
		 * vector's IRQ before it creates the EQ (Linux eq.c create_map_eq). */
		eq->efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (eq->efd_ < 0)
			return -errno;
		int rc = dev.function().set_msix_eventfd(p.vector, eq->efd_);
		if (rc != 0)
			return rc;
		eq->attached_ = true;
		eq->vector_ = p.vector;
	}
	int rc = QueueBuffer::alloc(dev.arena(), size_t{prm::eqe::size} << p.log_size, true,
				    &eq->ring_);
	if (rc != 0)
		return rc;
	eq->log_size_ = p.log_size;
	eq->mask_ = (1u << p.log_size) - 1;
	for (uint32_t i = 0; i <= eq->mask_; i++)
		prm::set(eq->ring_.va() + size_t{i} * prm::eqe::size, prm::eqe::owner, 1);
	EqCreate c;
	c.log_size = p.log_size;
	c.uar = uar.index();
	c.event_bitmask = p.event_bitmask;
	c.intr = p.vector;
	c.mem.pas = eq->ring_.pas();
	rc = create_eq(dev.cmdq(), c, &eq->eqn_);
	if (rc != 0)
		return rc;
	eq->created_ = true;
	eq->doorbell_ = prm::uar::page_offset(uar.index()) + prm::eq_doorbell::update_offset;
	eq->arm_doorbell_ = prm::uar::page_offset(uar.index()) + prm::eq_doorbell::arm_offset;
	/* Armed from the start, as Linux's mlx5_eq_enable does (eq_update_ci(eq, 1)). */
	if (p.interrupts)
		eq->arm();
	*out = std::move(eq);
	return 0;
}

Eq::~Eq()
{
	if (created_) {
		int rc = destroy_eq(dev_.cmdq(), eqn_);
		if (rc != 0)
			NICMR_LOG(error, "mlx5", "%s: DESTROY_EQ %u failed: %d",
				  dev_.function().name().c_str(), eqn_, rc);
	}
	if (attached_)
		dev_.function().set_msix_eventfd(vector_, -1);
	if (efd_ >= 0)
		close(efd_);
}

void Eq::arm() noexcept
{
	uint32_t db = 0;
	prm::set(&db, prm::eq_doorbell::eqn, eqn_);
	prm::set(&db, prm::eq_doorbell::consumer_index,
		 ci_ & prm::value_mask(prm::eq_doorbell::consumer_index));
	/* As in poll(): the EQE loads before the store that frees their slots. */
	rte_io_mb();
	dev_.function().bar0_write32(arm_doorbell_, db);
}

/* Hot path of nicmr_cq_poll's empty branch: one relaxed and one acquire load. */
bool Eq::pending() const noexcept
{
	const uint32_t ci = ci_seen_.load(std::memory_order_relaxed);
	uint8_t *e = const_cast<uint8_t *>(ring_.va()) + size_t{ci & mask_} * prm::eqe::size;
	/* Acquire: pairs with the device's release store of the owner byte, as in poll(). */
	const uint8_t own =
		std::atomic_ref<uint8_t>(e[prm::eqe::owner_byte]).load(std::memory_order_acquire);
	return (own & 1) == ((ci >> log_size_) & 1);
}

/* Hot path: no lock, no allocation, no system call. */
int Eq::poll(Event *out, int max) noexcept
{
	int n = 0;
	while (n < max) {
		uint8_t *e = ring_.va() + size_t{ci_ & mask_} * prm::eqe::size;
		/* Acquire: pairs with the device's release store of the owner byte, written last.
		 */
		uint8_t own = std::atomic_ref<uint8_t>(e[prm::eqe::owner_byte])
				      .load(std::memory_order_acquire);
		if ((own & 1) != ((ci_ >> log_size_) & 1))
			break;
		out[n].type = static_cast<uint8_t>(prm::get(e, prm::eqe::event_type));
		out[n].sub_type = static_cast<uint8_t>(prm::get(e, prm::eqe::event_sub_type));
		out[n].qpn = static_cast<uint32_t>(prm::get(e, prm::eqe::qpn));
		out[n].cqn = static_cast<uint32_t>(prm::get(e, prm::eqe_comp::cqn));
		out[n].function_id =
			static_cast<uint16_t>(prm::get(e, prm::eqe_page_req::function_id));
		out[n].num_pages = static_cast<int32_t>(
			static_cast<uint32_t>(prm::get(e, prm::eqe_page_req::num_pages)));
		if (out[n].type == prm::event_type::page_fault) {
			namespace pf = prm::eqe_page_fault;
			Event::PageFault &f = out[n].pf;
			f.flags = static_cast<uint8_t>(prm::get(e, pf::pftype));
			if (out[n].sub_type == pf::subtype_wqe) {
				f.token = static_cast<uint32_t>(prm::get(e, pf::wqe_token));
				f.wq_number = static_cast<uint32_t>(prm::get(e, pf::wq_number));
				f.wqe_index = static_cast<uint16_t>(prm::get(e, pf::wqe_index));
			} else {
				f.token = static_cast<uint32_t>(prm::get(e, pf::rdma_token));
				f.rkey = static_cast<uint32_t>(prm::get(e, pf::r_key));
				f.va = prm::get(e, pf::rdma_va);
				f.len = static_cast<uint32_t>(prm::get(e, pf::rdma_op_len));
			}
		}
		ci_++;
		n++;
	}
	if (n != 0) {
		ci_seen_.store(ci_, std::memory_order_relaxed);
		/* The consumer index back to the device (rdma-core mlx5_vfio.c eq_update_ci,
		 * without arming: nothing here waits for an interrupt). Full I/O barrier: the
		 * EQE loads above must be done before the device sees their slots freed by this
		 * MMIO store, a load-to-store order a write barrier does not give. Events are
		 * rare, so the fence costs nothing that matters. */
		uint32_t db = 0;
		prm::set(&db, prm::eq_doorbell::eqn, eqn_);
		prm::set(&db, prm::eq_doorbell::consumer_index,
			 ci_ & prm::value_mask(prm::eq_doorbell::consumer_index));
		rte_io_mb();
		dev_.function().bar0_write32(doorbell_, db);
	}
	return n;
}

} // namespace nicmr::mlx5
