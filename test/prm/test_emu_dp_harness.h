/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A bare-hands data-path driver for the device-model tests: it creates UARs, an EQ, CQs and
 * QPs through raw commands (test_emu_harness.h), builds WQEs with rdma-core's mlx5dv.h helpers,
 * rings UAR doorbells and polls CQEs and EQEs exactly as the contract in doc/device-model.md
 * says, with none of the driver's code.
 *
 * Queue memory (32 MiB at kDpIova, DMA-mapped):
 *   [0, 64K)         EQ ring           [64K, 1M)   CQ rings, 64 KiB each
 *   [0xf0000, 1M)    doorbell records (64 bytes apart, inside the last CQ slot's range)
 *   [1M, 4M)         SQ rings, 256 KiB each
 *   [4M, 32M)        data buffers the tests register
 */
#ifndef NICMR_TEST_EMU_DP_HARNESS_H
#define NICMR_TEST_EMU_DP_HARNESS_H

#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <optional>

#include "test_emu_harness.h"

namespace nicmr::emu::test {

inline constexpr uint64_t kDpIova = 0x200000000ull;
inline constexpr size_t kDpLen = size_t{32} << 20;
inline constexpr size_t kEqOff = 0;
inline constexpr size_t kCqOff = 0x10000;
inline constexpr size_t kDbrOff = 0xf0000;
inline constexpr size_t kSqOff = 0x100000;
inline constexpr size_t kCompEqOff = kDpLen - 0x10000; /* DpBed::cq_eqn's EQ */
inline constexpr size_t kDataOff = 0x400000;

struct Perm {
	bool lr = true, lw = true, rr = false, rw = false, a = false;
};

struct MkeyOpts {
	uint32_t pd = 0;
	Perm acc;
	uint64_t start = 0;
	uint64_t len = 0;
	uint32_t log_page = 12;
	std::vector<uint64_t> mtt;	/* page IOVAs (low bits: enables when pg_access) */
	std::vector<uint8_t> klm;	/* raw KLM entries (access mode KLM) */
	uint32_t capacity_octwords = 0; /* 0: what mtt / klm need */
	bool free = false;
	bool umr_en = false;
	bool pg_access = false;
	uint32_t variant = 0x11;
	uint32_t qpn = prm::mkc::qpn_any;
	bool length64 = false;
};

struct TestCq {
	uint32_t cqn = 0;
	uint32_t log_size = 0;
	size_t ring_off = 0;
	size_t dbr_off = 0;
	uint32_t ci = 0;
};

struct TestQp {
	uint32_t qpn = 0;
	uint32_t log_sq = 0;
	size_t sq_off = 0;
	size_t dbr_off = 0;
	uint16_t pi = 0;
	uint32_t uar = 0;
	TestCq *cq = nullptr;
};

class DpBed {
public:
	/* atomic_mode: as Harness::bring_up (-1: the power-on mode, big-endian). */
	explicit DpBed(EmuConfig cfg = {}, int atomic_mode = -1) : h_(cfg), mem_(kDpLen)
	{
		if (h_.rc() != 0 || mem_.data() == nullptr)
			return;
		if (h_.emu().iommu().dma_map(mem_.data(), kDpIova, kDpLen) < 0)
			return;
		h_.bring_up(atomic_mode);
		if (::testing::Test::HasFatalFailure())
			return;
		pd = h_.alloc_pd();
		ok_ = pd != 0;
	}
	~DpBed() { h_.emu().emu_function().stop(); }

	bool ok() const { return ok_; }
	Harness &h() { return h_; }
	EmuMlx5Device &dev() { return h_.dev(); }
	EmuDataPath &dp() { return h_.dev().data_path(); }
	uint8_t *at(size_t off) { return mem_.data() + off; }
	static uint64_t iova(size_t off) { return kDpIova + off; }

	uint32_t alloc_uar()
	{
		Reply r = h_.run(Cmd(prm::opcode::alloc_uar, prm::alloc_uar_in::size,
				     prm::alloc_uar_out::size));
		EXPECT_EQ(r.status(), prm::status::ok);
		return static_cast<uint32_t>(r.get(prm::alloc_uar_out::uar));
	}

	/* An EQ of 2^log_size entries at kEqOff, owner bits initialised to 1; eqc.uar_page and
	 * eqc.intr as given. */
	Reply create_eq(uint32_t log_size, uint64_t bitmask, uint32_t eq_uar = 0, uint32_t intr = 0)
	{
		for (size_t i = 0; i < (size_t{1} << log_size); i++)
			prm::set(at(kEqOff + i * 64), prm::eqe::owner, 1);
		Cmd c(prm::opcode::create_eq, prm::create_eq_in::size + 8,
		      prm::create_eq_out::size);
		c.set_at(prm::create_eq_in::eqc_offset, prm::eqc::log_eq_size, log_size);
		c.set(prm::create_eq_in::event_bitmask, bitmask);
		c.set_at(prm::create_eq_in::eqc_offset, prm::eqc::uar_page, eq_uar);
		c.set_at(prm::create_eq_in::eqc_offset, prm::eqc::intr, intr);
		c.set_at(prm::create_eq_in::pas_offset, prm::pas_entry, iova(kEqOff));
		eq_log_ = log_size;
		Reply r = h_.run(c);
		if (r.status() == prm::status::ok)
			eqn_ = static_cast<uint32_t>(r.get(prm::create_eq_out::eq_number));
		return r;
	}

	/* The EQ create_cq names: the last one create_eq made, else a completion EQ (no event
	 * subscribed) made now at kCompEqOff, as the driver's Device::comp_eqn does. */
	uint32_t cq_eqn()
	{
		if (eqn_ != 0)
			return eqn_;
		for (size_t i = 0; i < 64; i++)
			prm::set(at(kCompEqOff + i * 64), prm::eqe::owner, 1);
		Cmd c(prm::opcode::create_eq, prm::create_eq_in::size + 8,
		      prm::create_eq_out::size);
		c.set_at(prm::create_eq_in::eqc_offset, prm::eqc::log_eq_size, 6);
		c.set_at(prm::create_eq_in::pas_offset, prm::pas_entry, iova(kCompEqOff));
		Reply r = h_.run(c);
		EXPECT_EQ(r.status(), prm::status::ok);
		eqn_ = static_cast<uint32_t>(r.get(prm::create_eq_out::eq_number));
		return eqn_;
	}

	/* CQ number i (ring at kCqOff + i * 64K, record at kDbrOff + i * 64). */
	Reply create_cq(TestCq *cq, uint32_t i, uint32_t log_size)
	{
		cq->log_size = log_size;
		cq->ring_off = kCqOff + i * 0x10000;
		cq->dbr_off = kDbrOff + i * 64;
		cq->ci = 0;
		std::memset(at(cq->dbr_off), 0, 8);
		for (size_t k = 0; k < (size_t{1} << log_size); k++)
			at(cq->ring_off + k * 64)[63] = MLX5_CQE_INVALID << 4 | 1;
		const size_t pages = ((size_t{64} << log_size) + 4095) / 4096;
		Cmd c(prm::opcode::create_cq, prm::create_cq_in::size + 8 * pages,
		      prm::create_cq_out::size);
		c.set_at(prm::create_cq_in::cqc_offset, prm::cqc::log_cq_size, log_size);
		c.set_at(prm::create_cq_in::cqc_offset, prm::cqc::c_eqn, cq_eqn());
		c.set_at(prm::create_cq_in::cqc_offset, prm::cqc::dbr_addr, iova(cq->dbr_off));
		for (size_t k = 0; k < pages; k++)
			c.set_at(prm::create_cq_in::pas_offset + 8 * k, prm::pas_entry,
				 iova(cq->ring_off + k * 4096));
		Reply r = h_.run(c);
		cq->cqn = static_cast<uint32_t>(r.get(prm::create_cq_out::cqn));
		return r;
	}

	/* qpc.fre and qpc.rlky of the QPs create_qp makes from now on (on by default, as the
	 * kernel sets them on its QPs: the UMR tests post on them). */
	bool qp_fre = true;
	bool qp_rlky = true;
	/* qpc.st of the QPs create_qp makes from now on (prm::qp_st). */
	uint32_t qp_st = prm::qp_st::rc;

	/* QP number i (SQ at kSqOff + i * 256K, record at kDbrOff + 0x8000 + i * 64). */
	Reply create_qp(TestQp *qp, uint32_t i, TestCq *cq, uint32_t uar, uint32_t log_sq = 6,
			uint32_t qp_pd = 0)
	{
		qp->log_sq = log_sq;
		qp->sq_off = kSqOff + i * 0x40000;
		qp->dbr_off = kDbrOff + 0x8000 + i * 64;
		qp->pi = 0;
		qp->uar = uar;
		qp->cq = cq;
		std::memset(at(qp->dbr_off), 0, 8);
		const size_t pages = ((size_t{64} << log_sq) + 4095) / 4096;
		Cmd c(prm::opcode::create_qp, prm::create_qp_in::size + 8 * pages,
		      prm::create_qp_out::size);
		const size_t q = prm::create_qp_in::qpc_offset;
		c.set_at(q, prm::qpc::st, qp_st);
		c.set_at(q, prm::qpc::pd, qp_pd != 0 ? qp_pd : pd);
		c.set_at(q, prm::qpc::cqn_snd, cq->cqn);
		c.set_at(q, prm::qpc::uar_page, uar);
		c.set_at(q, prm::qpc::log_sq_size, log_sq);
		c.set_at(q, prm::qpc::rq_type, prm::qp_rq_type::zero_len);
		c.set_at(q, prm::qpc::dbr_addr, iova(qp->dbr_off));
		c.set_at(q, prm::qpc::fre, qp_fre);
		c.set_at(q, prm::qpc::rlky, qp_rlky);
		for (size_t k = 0; k < pages; k++)
			c.set_at(prm::create_qp_in::pas_offset + 8 * k, prm::pas_entry,
				 iova(qp->sq_off + k * 4096));
		Reply r = h_.run(c);
		qp->qpn = static_cast<uint32_t>(r.get(prm::create_qp_out::qpn));
		return r;
	}

	Reply modify(uint16_t op, uint32_t qpn, uint32_t port = 1, uint32_t remote = 0,
		     Perm acc = {true, true, true, true, true}, uint32_t opt = 0)
	{
		return h_.run(modify_cmd(op, qpn, port, remote, acc, opt));
	}
	/* The command modify() runs: INIT2RTR with the driver's loopback connection (MTU 1024,
	 * log_msg_max 30, force loopback), rae with the IB-compliant atomic mode. */
	Cmd modify_cmd(uint16_t op, uint32_t qpn, uint32_t port = 1, uint32_t remote = 0,
		       Perm acc = {true, true, true, true, true}, uint32_t opt = 0)
	{
		const bool qpc = op == prm::opcode::rst2init_qp || op == prm::opcode::init2rtr_qp ||
				 op == prm::opcode::rtr2rts_qp;
		Cmd c(op, qpc ? prm::modify_qp_in::size : prm::qp_2err_in::size,
		      prm::modify_qp_out::size);
		c.set(prm::modify_qp_in::qpn, qpn);
		if (qpc) {
			const size_t q = prm::modify_qp_in::qpc_offset;
			c.set(prm::modify_qp_in::opt_param_mask, opt);
			c.set_at(q, prm::qpc::primary_vhca_port_num, port);
			c.set_at(q, prm::qpc::remote_qpn, remote);
			c.set_at(q, prm::qpc::rre, acc.rr);
			c.set_at(q, prm::qpc::rwe, acc.rw);
			c.set_at(q, prm::qpc::rae, acc.a);
			if (acc.a)
				c.set_at(q, prm::qpc::atomic_mode, prm::qp_atomic_mode::ib_comp);
			if (op == prm::opcode::init2rtr_qp) {
				c.set_at(q, prm::qpc::mtu, prm::qp_mtu::mtu_1024);
				c.set_at(q, prm::qpc::log_msg_max, 30);
				c.set_at(q, prm::qpc::primary_fl, 1);
			}
		}
		return c;
	}

	/* RST -> INIT -> RTR -> RTS with the remote access enables of acc. */
	void connect(TestQp &qp, uint32_t port, uint32_t remote,
		     Perm acc = {true, true, true, true, true})
	{
		EXPECT_EQ(modify(prm::opcode::rst2init_qp, qp.qpn, port, 0, acc).status(),
			  prm::status::ok);
		EXPECT_EQ(modify(prm::opcode::init2rtr_qp, qp.qpn, 0, remote, acc).status(),
			  prm::status::ok);
		EXPECT_EQ(modify(prm::opcode::rtr2rts_qp, qp.qpn).status(), prm::status::ok);
	}

	/* Two QPs on one UAR, connected port 1 <-> port 2, each with its CQ; an EQ for the
	 * WQ error events. */
	void pair(Perm a_acc = {true, true, true, true, true},
		  Perm b_acc = {true, true, true, true, true})
	{
		uar = alloc_uar();
		ASSERT_EQ(create_eq(6, prm::event_bit(prm::event_type::wq_access_error) |
					       prm::event_bit(prm::event_type::wq_inval_req_error))
				  .status(),
			  prm::status::ok);
		ASSERT_EQ(create_cq(&cqa, 0, 6).status(), prm::status::ok);
		ASSERT_EQ(create_cq(&cqb, 1, 6).status(), prm::status::ok);
		ASSERT_EQ(create_qp(&qa, 0, &cqa, uar).status(), prm::status::ok);
		ASSERT_EQ(create_qp(&qb, 1, &cqb, uar).status(), prm::status::ok);
		connect(qa, 1, qb.qpn, a_acc);
		connect(qb, 2, qa.qpn, b_acc);
	}

	/* CREATE_MKEY (MTT or KLM); returns the mkey, or 0 on a failed command. */
	uint32_t mkey(const MkeyOpts &o)
	{
		const bool klm = !o.klm.empty();
		const size_t xlt = klm ? o.klm.size() : ((o.mtt.size() + 1) / 2) * 16;
		const size_t actual = xlt / 16;
		const size_t cap = o.capacity_octwords != 0 ? o.capacity_octwords : actual;
		Cmd c(prm::opcode::create_mkey, prm::create_mkey_in::size + xlt,
		      prm::create_mkey_out::size);
		const size_t m = prm::create_mkey_in::mkc_offset;
		prm::set_access_mode(c.in.data() + m,
				     klm ? prm::access_mode::klm : prm::access_mode::mtt);
		c.set_at(m, prm::mkc::free, o.free);
		c.set_at(m, prm::mkc::umr_en, o.umr_en);
		c.set_at(m, prm::mkc::lr, o.acc.lr);
		c.set_at(m, prm::mkc::lw, o.acc.lw);
		c.set_at(m, prm::mkc::rr, o.acc.rr);
		c.set_at(m, prm::mkc::rw, o.acc.rw);
		c.set_at(m, prm::mkc::a, o.acc.a);
		c.set_at(m, prm::mkc::qpn, o.qpn);
		c.set_at(m, prm::mkc::mkey_7_0, o.variant);
		c.set_at(m, prm::mkc::length64, o.length64);
		c.set_at(m, prm::mkc::pd, o.pd != 0 ? o.pd : pd);
		c.set_at(m, prm::mkc::start_addr, o.start);
		c.set_at(m, prm::mkc::len, o.len);
		c.set_at(m, prm::mkc::translations_octword_size, cap);
		c.set_at(m, prm::mkc::log_page_size, o.log_page);
		c.set(prm::create_mkey_in::pg_access, o.pg_access);
		c.set(prm::create_mkey_in::translations_octword_actual_size, actual);
		const size_t t = prm::create_mkey_in::translations_offset;
		if (klm)
			std::memcpy(c.in.data() + t, o.klm.data(), o.klm.size());
		for (size_t i = 0; i < o.mtt.size(); i++)
			c.set_at(t + 8 * i, prm::mtt::address, o.mtt[i]);
		Reply r = h_.run(c);
		if (r.status() != prm::status::ok)
			return 0;
		return static_cast<uint32_t>(r.get(prm::create_mkey_out::mkey_index)) << 8 |
		       o.variant;
	}

	/* An MTT mkey over [off, off + len) of the data area with 4 KiB pages, VA = IOVA. */
	uint32_t mr(size_t off, size_t len, Perm acc, uint32_t variant = 0x11)
	{
		MkeyOpts o;
		o.acc = acc;
		o.start = iova(off);
		o.len = len;
		const uint64_t first = iova(off) & ~uint64_t{4095};
		for (uint64_t p = first; p < iova(off) + len; p += 4096)
			o.mtt.push_back(p);
		o.variant = variant;
		return mkey(o);
	}

	/* Copies a WQE of n bytes (a multiple of 16) into the SQ at the producer, wrapping. */
	void write_wqe(TestQp &qp, const uint8_t *wqe, size_t n)
	{
		const uint32_t size = 1u << qp.log_sq;
		for (size_t b = 0; b < (n + 63) / 64; b++) {
			const size_t slot = (qp.pi + b) & (size - 1);
			std::memset(at(qp.sq_off + slot * 64), 0, 64);
			std::memcpy(at(qp.sq_off + slot * 64), wqe + b * 64,
				    std::min<size_t>(64, n - b * 64));
		}
	}
	/* Posts the WQE, updates dbr[1], rings the UAR doorbell with its first 8 bytes. */
	void post(TestQp &qp, std::vector<uint8_t> wqe, bool ring = true)
	{
		auto *ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg *>(wqe.data());
		/* The index the driver stamps is its producer counter. */
		const uint32_t v = be32toh(ctrl->opmod_idx_opcode);
		ctrl->opmod_idx_opcode = htobe32((v & 0xff0000ffu) | uint32_t{qp.pi} << 8);
		write_wqe(qp, wqe.data(), wqe.size());
		qp.pi = static_cast<uint16_t>(qp.pi + (wqe.size() + 63) / 64);
		store_dbr(qp.dbr_off + 4, prm::dbr::sq_counter, qp.pi);
		if (ring)
			doorbell(qp, wqe.data());
	}
	void doorbell(TestQp &qp, const uint8_t *ctrl8)
	{
		uint64_t v;
		std::memcpy(&v, ctrl8, 8);
		std::atomic_thread_fence(std::memory_order_release);
		h_.fn().bar0_write64(prm::uar::page_offset(qp.uar) + prm::uar::sq_doorbell_offset,
				     v);
	}

	/* A doorbell record counter (its 32-bit word at off) with one release store, as the
	 * device loads it with acquire while it runs. */
	void store_dbr(size_t off, prm::Field f, uint64_t v)
	{
		uint8_t rec[8] = {};
		prm::set(rec, f, v);
		uint32_t raw;
		std::memcpy(&raw, rec + (off % 8), 4);
		std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t *>(at(off)))
			.store(raw, std::memory_order_release);
	}
	/* The next CQE of cq if the device wrote one (owner bit of this pass), as 64 bytes. */
	std::optional<std::vector<uint8_t>> poll(TestCq &cq)
	{
		const uint32_t size = 1u << cq.log_size;
		uint8_t *c = at(cq.ring_off + (cq.ci & (size - 1)) * 64);
		const uint8_t op_own =
			std::atomic_ref<uint8_t>(c[63]).load(std::memory_order_acquire);
		if ((op_own >> 4) == MLX5_CQE_INVALID ||
		    (op_own & 1) != ((cq.ci >> cq.log_size) & 1))
			return std::nullopt;
		std::vector<uint8_t> out(c, c + 64);
		cq.ci++;
		store_dbr(cq.dbr_off, prm::dbr::cq_ci, cq.ci & 0xffffff);
		return out;
	}
	/* Waits (poll-thread mode) up to 5 s for a CQE. */
	std::optional<std::vector<uint8_t>> wait(TestCq &cq)
	{
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
		while (std::chrono::steady_clock::now() < end) {
			if (auto c = poll(cq))
				return c;
			std::this_thread::yield();
		}
		return std::nullopt;
	}
	/* The next EQE (type, qpn) if any. */
	std::optional<std::pair<uint8_t, uint32_t>> poll_eq()
	{
		const uint32_t size = 1u << eq_log_;
		uint8_t *e = at(kEqOff + (eq_ci_ & (size - 1)) * 64);
		std::atomic_ref<uint8_t>(e[63]).load(std::memory_order_acquire);
		if (prm::get(e, prm::eqe::owner) != ((eq_ci_ >> eq_log_) & 1))
			return std::nullopt;
		eq_ci_++;
		return std::make_pair(static_cast<uint8_t>(prm::get(e, prm::eqe::event_type)),
				      static_cast<uint32_t>(prm::get(e, prm::eqe::qpn)));
	}

	/* EQEs poll_eq took so far, and the EQ create_eq made last. */
	uint32_t eq_ci() const { return eq_ci_; }
	uint32_t eqn() const { return eqn_; }

	uint32_t pd = 0;
	uint32_t uar = 0;
	TestCq cqa, cqb;
	TestQp qa, qb;

private:
	Harness h_;
	HostMem mem_;
	bool ok_ = false;
	uint32_t eq_log_ = 0;
	uint32_t eq_ci_ = 0;
	uint32_t eqn_ = 0;
};

/* CQE fields. */
inline uint8_t cqe_opcode(const std::vector<uint8_t> &c)
{
	return c[63] >> 4;
}
inline uint8_t cqe_syndrome(const std::vector<uint8_t> &c)
{
	mlx5_err_cqe e;
	std::memcpy(&e, c.data(), 64);
	return e.syndrome;
}
inline uint16_t cqe_counter(const std::vector<uint8_t> &c)
{
	mlx5_cqe64 e;
	std::memcpy(&e, c.data(), 64);
	return be16toh(e.wqe_counter);
}
inline uint32_t cqe_qpn(const std::vector<uint8_t> &c)
{
	mlx5_cqe64 e;
	std::memcpy(&e, c.data(), 64);
	return be32toh(e.sop_drop_qpn) & 0xffffff;
}
inline uint32_t cqe_bytes(const std::vector<uint8_t> &c)
{
	mlx5_cqe64 e;
	std::memcpy(&e, c.data(), 64);
	return be32toh(e.byte_cnt);
}

/* WQE builders (rdma-core's inline helpers fill the segments). */
struct Wqe {
	std::vector<uint8_t> b;
	explicit Wqe(uint8_t opcode, uint32_t qpn, uint32_t imm = 0,
		     uint8_t fm_ce_se = MLX5_WQE_CTRL_CQ_UPDATE)
	    : b(16, 0), opcode_(opcode), qpn_(qpn), imm_(imm), fm_(fm_ce_se)
	{}
	Wqe &raddr(uint64_t addr, uint32_t rkey)
	{
		mlx5_wqe_raddr_seg r{};
		r.raddr = htobe64(addr);
		r.rkey = htobe32(rkey);
		append(&r, sizeof(r));
		return *this;
	}
	Wqe &data(uint32_t len, uint32_t lkey, uint64_t addr)
	{
		mlx5_wqe_data_seg d;
		mlx5dv_set_data_seg(&d, len, lkey, addr);
		append(&d, sizeof(d));
		return *this;
	}
	Wqe &atomic(uint64_t swap_add, uint64_t compare)
	{
		mlx5_wqe_atomic_seg a;
		a.swap_add = htobe64(swap_add);
		a.compare = htobe64(compare);
		append(&a, sizeof(a));
		return *this;
	}
	Wqe &inline_data(const void *p, uint32_t len)
	{
		const uint32_t bc = htobe32(len | MLX5_INLINE_SEG);
		append(&bc, 4);
		append(p, len);
		b.resize((b.size() + 15) / 16 * 16, 0);
		return *this;
	}
	Wqe &raw(const void *p, size_t len)
	{
		append(p, len);
		return *this;
	}
	Wqe &pad64()
	{
		b.resize((b.size() + 63) / 64 * 64, 0);
		return *this;
	}
	/* The finished WQE; ds_override replaces the computed ds. */
	std::vector<uint8_t> done(int ds_override = -1)
	{
		const auto ds =
			static_cast<uint8_t>(ds_override >= 0 ? ds_override : b.size() / 16);
		mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg *>(b.data()), 0, opcode_, 0,
				    qpn_, fm_, ds, 0, htobe32(imm_));
		return b;
	}

private:
	void append(const void *p, size_t n)
	{
		const auto *s = static_cast<const uint8_t *>(p);
		b.insert(b.end(), s, s + n);
	}
	uint8_t opcode_;
	uint32_t qpn_;
	uint32_t imm_;
	uint8_t fm_;
};

} // namespace nicmr::emu::test

#endif
