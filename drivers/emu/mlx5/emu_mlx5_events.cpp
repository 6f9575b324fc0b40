/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Event queues of the device model's data path: which EQ an event goes to, the consumer index
 * the driver writes back, and the overrun a ConnectX reports when it is not written back.
 *
 *   event of type t --> the first EQ created whose event_bitmask has bit t
 *       EQE n at slot n & mask, owner bit (n >> log_size) & 1, owner byte last (release)
 *       full when produced - consumed == 2^log_size: overrun (health syndrome, EQ dead)
 *   consumed <- the driver's doorbell: BAR 0 at the EQ's UAR page + 0x40 (update and arm) or
 *               + 0x48 (update only), value eqn << 24 | consumer index (24 bits)
 *
 * The firmware behaviour this follows: rdma-core's mlx5_vfio.c writes the consumer index back
 * at least every MLX5_NUM_SPARE_EQE events "else the HCA will think the queue has overflowed"
 * (mlx5_eq_update_cc), and an async EQ overrun is the fatal health syndrome 0xc ("async EQ
 * buffer overrun", hsynd_str; Linux health.c). The doorbell words are read back from BAR
 * memory when an event is written (they are not doorbells of the emulated function): each of
 * the two words keeps the last value written, so EQs that share a UAR page can hide each
 * other's updates; nicmr's driver gives its async EQ a UAR page of its own, as rdma-core does.
 */
#include <algorithm>
#include <cstring>

#include "emu_mlx5_dp.h"
#include "emu_mlx5_dp_impl.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;

EmuDataPath::Eq *EmuDataPath::event_eq(uint8_t type) const
{
	Eq *eq = nullptr;
	for (const auto &[n, e] : eqs_)
		if ((e->attr.event_bitmask & prm::event_bit(type)) != 0 &&
		    (eq == nullptr || e->order < eq->order))
			eq = e.get();
	return eq;
}

bool EmuDataPath::has_event_eq(uint8_t type) const
{
	std::shared_lock lk(table_lock_);
	return event_eq(type) != nullptr;
}

int EmuDataPath::write_eqe(const DmaSection &dma, Eq &eq, uint8_t type, const uint8_t *data28,
			   uint8_t sub_type)
{
	std::lock_guard lk(eq.lock);
	const uint64_t size = uint64_t{1} << eq.attr.log_size;
	/* The consumer index the driver last wrote for this EQ: the further of the two words
	 * that name it and lie between what was consumed and what was produced. */
	if (bar_read_) {
		const uint64_t base = prm::uar::page_offset(eq.attr.uar);
		for (size_t off : {prm::eq_doorbell::update_offset, prm::eq_doorbell::arm_offset}) {
			uint32_t raw = bar_read_(base + off);
			if (prm::get(&raw, prm::eq_doorbell::eqn) != eq.eqn)
				continue;
			const uint64_t mask = prm::value_mask(prm::eq_doorbell::consumer_index);
			const uint64_t ci = prm::get(&raw, prm::eq_doorbell::consumer_index);
			const uint64_t ahead = (ci - eq.consumed) & mask;
			if (ahead <= eq.produced - eq.consumed)
				eq.consumed += ahead;
		}
	}
	if (eq.overrun || eq.produced - eq.consumed >= size) {
		ctr_.eq_overruns.fetch_add(1, std::memory_order_relaxed);
		if (!eq.overrun) {
			eq.overrun = true;
			const bool async = (eq.attr.event_bitmask &
					    (prm::event_bit(prm::event_type::page_request) |
					     prm::event_bit(prm::event_type::cmd))) != 0;
			NICMR_LOG(error, "emu-mlx5",
				  "EQ %u overrun: %llu events not consumed (consumer index never "
				  "written back)",
				  eq.eqn,
				  static_cast<unsigned long long>(eq.produced - eq.consumed));
			if (fatal_)
				fatal_(async ? prm::health_synd::async_eq_overrun_err
					     : prm::health_synd::eq_err);
		}
		return -EOVERFLOW;
	}
	const uint64_t n = eq.produced;
	const uint64_t iova = eq.attr.mem.iova((n & (size - 1)) * prm::eqe::size);
	uint8_t buf[prm::eqe::size] = {};
	prm::set(buf, prm::eqe::event_type, type);
	prm::set(buf, prm::eqe::event_sub_type, sub_type);
	std::memcpy(buf + prm::eqe::data_offset, data28, 28);
	prm::set(buf, prm::eqe::owner, (n >> eq.attr.log_size) & 1);
	/* Owner byte last, with release (as for CQEs). */
	if (dma.write(iova, buf, prm::eqe::owner_byte) < 0 ||
	    dma.store8_release(iova + prm::eqe::owner_byte, buf[prm::eqe::owner_byte]) < 0)
		return -EFAULT;
	eq.produced++;
	ctr_.eqes.fetch_add(1, std::memory_order_relaxed);
	return 0;
}

int EmuDataPath::post_async(uint8_t type, const uint8_t *data28)
{
	std::shared_lock lk(table_lock_);
	Eq *eq = event_eq(type);
	if (eq == nullptr) {
		ctr_.events_dropped.fetch_add(1, std::memory_order_relaxed);
		return -ENOENT;
	}
	const DmaSection dma(mmu_);
	return write_eqe(dma, *eq, type, data28);
}

} // namespace nicmr::emu
