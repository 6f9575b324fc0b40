/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An event queue, for asynchronous events (a responder's WQ access errors, firmware page
 * requests) or completion events of armed CQs: 2^log_size 64-byte EQEs in host DMA memory.
 * EQE n sits at slot n & mask with owner bit (n >> log_size) & 1; every EQE starts with owner 1,
 * so nothing of the first pass looks new. In poll mode (the default) it is never armed. With
 * EqParams::interrupts it owns an eventfd attached to MSI-X vector EqParams::vector
 * (bus::PciFunction::set_msix_eventfd) and is created armed; arm() re-arms it (+0x40, update
 * and arm, rdma-core mlx5_vfio.c eq_update_ci(eq, cc, 1)) and the device raises the vector once
 * per arm. poll() writes the consumer index
 * back through the EQ doorbell of its UAR page (+0x48, eqn << 24 | index, rdma-core's
 * eq_update_ci): a ConnectX that does not see it for 2^log_size events declares the EQ overrun
 * (for the async EQ a fatal health syndrome, 0xc). Events go to the first EQ created whose
 * bitmask takes their type (doc/data-path.md).
 */
#ifndef NICMR_MLX5_EQ_H
#define NICMR_MLX5_EQ_H

#include <atomic>
#include <cstdint>
#include <memory>

#include "mlx5_device.h"
#include "mlx5_qbuf.h"
#include "mlx5_uar.h"

namespace nicmr::mlx5 {

struct Event {
	uint8_t type = 0; /* prm::event_type */
	uint8_t sub_type = 0;
	uint32_t qpn = 0; /* queue events: the QP (or SRQ) number */
	uint32_t cqn = 0; /* completion events (type 0x00): the CQ (struct mlx5_eqe_comp) */
	/* PAGE_REQUEST: the function the pages are for and how many (negative: take back). */
	uint16_t function_id = 0;
	int32_t num_pages = 0;
	/* PAGE_FAULT (prm::eqe_page_fault): sub_type WQE (wqe_index of QP wq_number) or RDMA
	 * (rkey, va, len); the type flags, and the token PAGE_FAULT_RESUME names. */
	struct PageFault {
		uint8_t flags = 0;
		uint32_t token = 0;
		uint32_t wq_number = 0;
		uint16_t wqe_index = 0;
		uint32_t rkey = 0;
		uint64_t va = 0;
		uint32_t len = 0;
	} pf;
};

struct EqParams {
	uint32_t log_size = 6; /* 2^n EQEs, 1..16 */
	/* Default: the QP error events nicmr's data path reports. */
	uint64_t event_bitmask = prm::event_bit(prm::event_type::wq_inval_req_error) |
				 prm::event_bit(prm::event_type::wq_access_error) |
				 prm::event_bit(prm::event_type::wq_catas_error);
	/* Interrupts: an eventfd on MSI-X vector `vector` (eqc.intr, below 256). */
	bool interrupts = false;
	uint32_t vector = 0;
};

class Eq {
public:
	/* CREATE_EQ on dev; errors: -EINVAL (log_size outside 1..16, vector above 255), -ENOMEM,
	 * the command's; with interrupts, eventfd(2)'s and set_msix_eventfd's (-ENOTSUP: the bus
	 * has no MSI-X). */
	static int create(Device &dev, Uar &uar, const EqParams &p, std::unique_ptr<Eq> *out);
	~Eq(); /* detaches the vector, DESTROY_EQ, closes the eventfd, frees the ring */
	Eq(const Eq &) = delete;
	Eq &operator=(const Eq &) = delete;

	uint32_t eqn() const noexcept { return eqn_; }
	/* Hot path: takes up to max new events, then writes the consumer index back (one MMIO
	 * store when there were events); no lock, no allocation, no system call. One poller at a
	 * time. */
	int poll(Event *out, int max) noexcept;
	uint32_t consumer_index() const noexcept { return ci_; }
	/* Whether an EQE waits at the consumer index: one acquire load, no lock, no system call;
	 * any thread (a stale answer is only ever true: the next poll() finds nothing). */
	bool pending() const noexcept;
	/* The eventfd the EQ's vector signals (nonblocking; read 8 bytes to consume), or -1 in
	 * poll mode. */
	int event_fd() const noexcept { return efd_; }
	/* Update and arm (+0x40) with the consumer index: the next EQE, or one already there
	 * unconsumed, raises the vector once. Same thread rules as poll(). Not a hot path. */
	void arm() noexcept;

private:
	Eq(Device &dev) : dev_(dev) {}
	Device &dev_;
	size_t doorbell_ = 0;	  /* BAR 0 offset of the EQ's update-only doorbell */
	size_t arm_doorbell_ = 0; /* ... and of its update-and-arm doorbell */
	int efd_ = -1;
	uint32_t vector_ = 0;
	bool attached_ = false;
	QueueBuffer ring_;
	uint32_t eqn_ = 0;
	bool created_ = false;
	uint32_t log_size_ = 0;
	uint32_t mask_ = 0;
	uint32_t ci_ = 0;
	/* ci_ as last written by poll(), for pending() on other threads (relaxed: a stale value
	 * only makes pending() say true for an EQE already taken). */
	std::atomic<uint32_t> ci_seen_{0};
};

} // namespace nicmr::mlx5

#endif
