/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CQ arming and completion events of the device model.
 *
 *   driver: dbr[1] = sn << 28 | cmd | ci, then the 64-bit UAR doorbell at +0x20:
 *           word 0 = the same, word 1 = cqn   (rdma-core providers/mlx5/cq.c mlx5_arm_cq)
 *       v
 *   CQ armed (next: any CQE; solicited: a solicited or error CQE)
 *       |  a CQE it asks for is written (complete() -> cq_completed), or is already there
 *       |  beyond the arm's ci
 *       v
 *   completion EQE (type 0x00, the CQN) on the CQ's c_eqn EQ, once; the CQ disarms
 *       |  the EQ is armed (eqn << 24 | ci written at its UAR page + 0x40)
 *       v
 *   MSI-X vector eqc.intr raised once; the EQ disarms until the next +0x40 write
 *
 * One event per arm, as verbs promises (ibv_req_notify_cq(3): "the next completion"); the
 * driver re-arms after it took the event. An arm whose consumer index is behind CQEs already
 * written fires at once: the model reads the ci of the arm doorbell as the point from which
 * "next" counts, so that arming after the last poll never loses a completion that came in
 * between. The same for the EQ: an update-and-arm that leaves EQEs unconsumed interrupts at
 * once (Linux eq.c's interrupt handler polls, then arms with eq_update_ci(eq, 1), and counts
 * on that).
 * Concurrency: the CQE producer (QP or CQ lock) and the arm doorbell (any thread) meet on the
 * CQ's atomics only: the producer stores published then loads armed, the arm stores armed then
 * loads published, both sequentially consistent, so at least one of them sees the other and a
 * compare-exchange of armed to 0 lets exactly one fire. The EQ's armed flag is guarded by its
 * lock, as its counters are.
 */
#include <cstring>

#include "emu_mlx5_dp.h"
#include "emu_mlx5_dp_impl.h"
#include "mlx5_prm.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;

namespace {

constexpr uint32_t kCiMask = prm::value_mask(prm::cq_doorbell::consumer_index);

/* Whether CQEs the arm asks for lie in (ci, published]: any for next, a solicited or error
 * one for solicited. */
bool cq_has_pending(bool next, uint32_t ci, uint64_t published, uint64_t sol_end, uint32_t size)
{
	const uint32_t pending = (static_cast<uint32_t>(published) - ci) & kCiMask;
	if (pending == 0 || pending > size)
		return false; /* nothing new, or a ci ahead of what was written: nothing to see */
	if (next)
		return true;
	/* sol_end counts CQEs up to and including the last solicited one: it lies in
	 * (ci, published] when that CQE is unconsumed. */
	const uint32_t sol = (static_cast<uint32_t>(sol_end) - ci) & kCiMask;
	return sol != 0 && sol <= pending;
}

} // namespace

/* Device hot path: one relaxed store or two and one load when the CQ is not armed. */
void EmuDataPath::cq_completed(const DmaSection &dma, Cq &cq, bool solicited)
{
	const uint64_t n = cq.produced;
	if (solicited)
		cq.solicited_end.store(n, std::memory_order_relaxed);
	/* seq_cst store then load: the arm doorbell does the opposite (see the top). */
	cq.published.store(n, std::memory_order_seq_cst);
	uint8_t a = cq.armed.load(std::memory_order_seq_cst);
	if (a == 0) [[likely]]
		return;
	if (a == Cq::kArmedSolicited && !solicited)
		return;
	if (!cq.armed.compare_exchange_strong(a, 0, std::memory_order_seq_cst))
		return; /* the arm doorbell fired it */
	comp_event(dma, cq);
}

void EmuDataPath::cq_arm(const DmaSection &dma, Cq &cq, uint32_t arm_word)
{
	uint8_t w[4];
	std::memcpy(w, &arm_word, sizeof(w));
	const auto cmd = static_cast<uint32_t>(prm::get(w, prm::cq_doorbell::cmd));
	const auto ci = static_cast<uint32_t>(prm::get(w, prm::cq_doorbell::consumer_index));
	uint8_t kind =
		cmd == prm::cq_doorbell::cmd_solicited ? Cq::kArmedSolicited : Cq::kArmedNext;
	ctr_.cq_arms.fetch_add(1, std::memory_order_relaxed);
	cq.arm_seen.store(arm_word, std::memory_order_relaxed);
	cq.armed.store(kind, std::memory_order_seq_cst);
	const uint64_t pub = cq.published.load(std::memory_order_seq_cst);
	/* Relaxed: solicited_end is stored before published (seq_cst) by the producer. */
	const uint64_t sol = cq.solicited_end.load(std::memory_order_relaxed);
	if (!cq_has_pending(kind == Cq::kArmedNext, ci, pub, sol, uint32_t{1} << cq.attr.log_size))
		return;
	if (cq.armed.compare_exchange_strong(kind, 0, std::memory_order_seq_cst))
		comp_event(dma, cq);
}

void EmuDataPath::comp_event(const DmaSection &dma, Cq &cq)
{
	auto it = eqs_.find(cq.attr.eqn);
	if (it == eqs_.end()) {
		ctr_.events_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	Eq &eq = *it->second;
	/* struct mlx5_eqe_comp: the CQN in data bytes 24..27. */
	uint8_t buf[prm::eqe::size] = {};
	prm::set(buf, prm::eqe_comp::cqn, cq.cqn);
	if (write_eqe(dma, eq, prm::eqe_comp::event_type, buf + prm::eqe::data_offset) < 0)
		return;
	ctr_.comp_events.fetch_add(1, std::memory_order_relaxed);
	bool raise = false;
	{
		std::lock_guard lk(eq.lock);
		raise = eq.armed;
		eq.armed = false;
	}
	if (raise) {
		ctr_.interrupts.fetch_add(1, std::memory_order_relaxed);
		if (irq_)
			irq_(eq.attr.intr);
	}
}

void EmuDataPath::cq_arm_doorbell(uint32_t uar, uint64_t raw, bool by_value)
{
	(void)uar; /* any UAR page arms any CQ: the CQN says which (rdma-core rings uar[0]) */
	uint8_t b[8];
	std::memcpy(b, &raw, sizeof(b));
	const auto cqn = static_cast<uint32_t>(prm::get(b, prm::cq_doorbell::cqn));
	uint32_t word = 0;
	std::memcpy(&word, b, sizeof(word));
	std::shared_lock lk(table_lock_);
	const DmaSection dma(mmu_);
	auto it = cqs_.find(cqn);
	if (it != cqs_.end())
		cq_arm(dma, *it->second, word);
	else
		ctr_.arms_dropped.fetch_add(1, std::memory_order_relaxed);
	if (by_value)
		return;
	/* A poll thread sees the UAR's latest value only: an earlier arm of another CQ shows
	 * as a changed arm word in that CQ's doorbell record (written before the doorbell). */
	for (auto &[n, cq] : cqs_) {
		if (n == cqn)
			continue;
		uint32_t rec = 0;
		if (dma.load32_acquire(cq->attr.dbr + prm::dbr::cq_arm_dword * 4, &rec) != 0)
			continue;
		if (rec != cq->arm_seen.load(std::memory_order_relaxed))
			cq_arm(dma, *cq, rec);
	}
}

void EmuDataPath::eq_arm_doorbell(uint32_t uar, uint32_t raw)
{
	const auto eqn = static_cast<uint32_t>(prm::get(&raw, prm::eq_doorbell::eqn));
	const auto ci = static_cast<uint32_t>(prm::get(&raw, prm::eq_doorbell::consumer_index));
	std::shared_lock lk(table_lock_);
	auto it = eqs_.find(eqn);
	if (it == eqs_.end() || it->second->attr.uar != uar) {
		ctr_.arms_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	Eq &eq = *it->second;
	bool raise = false;
	{
		std::lock_guard elk(eq.lock);
		/* The consumer index this write carries, as write_eqe reads it back: only forward,
		 * and never past what was produced. */
		const uint64_t mask = prm::value_mask(prm::eq_doorbell::consumer_index);
		const uint64_t ahead = (ci - eq.consumed) & mask;
		if (ahead <= eq.produced - eq.consumed)
			eq.consumed += ahead;
		if (eq.produced != eq.consumed && !eq.overrun) {
			raise = true; /* unconsumed EQEs: interrupt at once, stay disarmed */
			eq.armed = false;
		} else {
			eq.armed = true;
		}
	}
	if (raise) {
		ctr_.interrupts.fetch_add(1, std::memory_order_relaxed);
		if (irq_)
			irq_(eq.attr.intr);
	}
}

} // namespace nicmr::emu
