/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Receive queues of the mlx5 device model, and the operations that consume their WQEs: SEND,
 * SEND with immediate, SEND with invalidate and RDMA WRITE with immediate, on the loopback
 * (Exec::send) and on the UDP wire (Exec::wire_send for the requester, rc_recv_send and the
 * WRITE-with-immediate branch of rc_request for the responder).
 *
 *   QP buffer: | RQ: 2^log_rq_size slots of 16 << log_rq_stride bytes | SQ: WQEBBs ... |
 *   receive WQE: data segments (byte_count, lkey, addr), ended by lkey MLX5_INVALID_LKEY or
 *                the slot's end (rdma-core providers/mlx5/qp.c, mlx5_post_recv)
 *   dbr[0]: the driver's RQ producer counter (low 16 bits); rq_ci: the device's consumer
 *   a QP of rq_type SRQ takes its WQE from the SRQ instead (emu_mlx5_srq.cpp, srq_take): the
 *   CQE's wqe_counter is the SRQ WQE's index, and the QP flushes only the WQE it holds
 *
 *   request --> responder QP: RQ empty? ---yes--> RNR (wire: RNR NAK, min_rnr_nak timer;
 *                  |                                loopback: the requester's WQE waits)
 *                  v take the WQE (rq_ci++)
 *              message > the WQE's bytes? --> responder CQE LOCAL_LENGTH_ERR, requester
 *                  |                          REMOTE_INVAL_REQ_ERR (NAK invalid request)
 *              an SGE's lkey refused?     --> responder CQE with the key's syndrome,
 *                  |                          requester REMOTE_OP_ERR (NAK remote op. error)
 *              SEND with invalidate: key not an mkey of the QP's PD with en_rinval?
 *                  |                      --> both REMOTE_INVAL_REQ_ERR (NAK invalid request)
 *                  v scatter, invalidate, responder CQE (RESP_SEND / _IMM / _INV / WR_IMM,
 *                    byte_cnt, imm_inval_pkey, wqe_counter = the receive WQE's index)
 *
 * A responder-side error completes the receive WQE in error (RESP_ERR), moves the responder QP
 * to ERR and flushes the rest of its RQ. Every check of the loopback happens before a byte
 * moves; the wire checks each packet as it comes (a SEND's length is known at its last packet
 * only, so the bytes of earlier packets are in the buffer when a length error is found, as on
 * any RC responder).
 *
 * Locks: a QP's rq_lock guards its RQ counter and serialises its receive CQEs; it is taken
 * inside the requester's (loopback) or the responder's (wire) QP lock and outside the mkey slots
 * of a WQE's MkeyTable::Hold (an invalidate takes one slot exclusive with rq_lock held).
 * Device hot path: no allocation, no system call.
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <algorithm>
#include <cstring>

#include "emu_mlx5_dp_impl.h"
#include "mlx5_prm.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;
namespace op = roce::opcode;
using namespace wqe_fmt;

namespace {

/* Every segment's used part, [0, total) of the list, checked for local write. */
uint8_t validate_used(const Translator &t, const DataSeg *segs, size_t n, uint64_t total) noexcept
{
	for (size_t i = 0; i < n && total != 0; i++) {
		const uint64_t use = std::min<uint64_t>(segs[i].bc, total);
		if (use != 0)
			if (uint8_t s = t.validate(segs[i].lkey, segs[i].addr, use,
						   Access::local_write);
			    s != kOk)
				return s;
		total -= use;
	}
	return kOk;
}

/* total bytes of a gather list (through st) into a scatter list (through dt), piece by piece
 * contiguous in both (validated before). */
uint8_t scatter_list(const DmaSection &dma, const Translator &st, const DataSeg *ss, size_t sn,
		     const Translator &dt, const DataSeg *ds, size_t dn, uint64_t total) noexcept
{
	size_t si = 0, di = 0;
	uint64_t so = 0, dof = 0;
	for (uint64_t done = 0; done < total;) {
		while (si < sn && so == ss[si].bc) {
			si++;
			so = 0;
		}
		while (di < dn && dof == ds[di].bc) {
			di++;
			dof = 0;
		}
		if (si == sn || di == dn)
			return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
		const uint64_t piece =
			std::min({total - done, ss[si].bc - so, uint64_t{ds[di].bc} - dof});
		IovaRun d, s;
		if (uint8_t r = dt.resolve(ds[di].lkey, ds[di].addr + dof, piece,
					   Access::local_write, &d);
		    r != kOk)
			return r;
		if (uint8_t r = st.resolve(ss[si].lkey, ss[si].addr + so, d.len, Access::local_read,
					   &s);
		    r != kOk)
			return r;
		if (dma.copy(d.iova, s.iova, s.len) < 0)
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		so += s.len;
		dof += s.len;
		done += s.len;
	}
	return kOk;
}

uint8_t resp_opcode(uint8_t wqe_opcode) noexcept
{
	switch (wqe_opcode) {
	case MLX5_OPCODE_SEND_IMM:
		return MLX5_CQE_RESP_SEND_IMM;
	case MLX5_OPCODE_SEND_INVAL:
		return MLX5_CQE_RESP_SEND_INV;
	case MLX5_OPCODE_RDMA_WRITE_IMM:
		return MLX5_CQE_RESP_WR_IMM;
	default:
		return MLX5_CQE_RESP_SEND;
	}
}

} // namespace

/* ---- The receive queue ------------------------------------------------------------------- */

EmuDataPath::RqTake EmuDataPath::rq_take(const DmaSection &dma, Qp &qp, RecvWqe *out)
{
	if (qp.srq != nullptr)
		return srq_take(dma, qp, out);
	uint8_t rec[prm::dbr::size] = {};
	uint32_t raw = 0;
	/* Acquire: the WQE the driver wrote before it raised the counter. */
	if (dma.load32_acquire(qp.attr.dbr + prm::dbr::qp_rq_dword * 4, &raw) < 0) {
		ctr_.dbr_faults.fetch_add(1, std::memory_order_relaxed);
		return RqTake::fault;
	}
	std::memcpy(rec + prm::dbr::qp_rq_dword * 4, &raw, sizeof(raw));
	const auto pi = static_cast<uint16_t>(prm::get(rec, prm::dbr::rq_counter));
	const auto avail = static_cast<uint16_t>(pi - qp.rq_ci);
	if (avail == 0)
		return RqTake::empty;
	if (avail > (1u << qp.attr.log_rq_size))
		return RqTake::fault; /* a producer more than a ring ahead: a corrupt record */
	const size_t stride = size_t{16} << qp.attr.log_rq_stride;
	uint8_t buf[16u << 5];
	/* A slot lies in one queue page: slots are at most 512 bytes and aligned to their size. */
	if (dma.read(qp.attr.rq_iova(qp.rq_ci), buf, stride) < 0) {
		ctr_.dbr_faults.fetch_add(1, std::memory_order_relaxed);
		return RqTake::fault;
	}
	out->index = qp.rq_ci;
	out->nseg = 0;
	out->capacity = 0;
	for (size_t at = 0; at + kData <= stride; at += kData) {
		const DataSeg d = parse_data(buf + at);
		if (d.lkey == MLX5_INVALID_LKEY)
			break;
		out->segs[out->nseg++] = d;
		out->capacity += d.bc;
	}
	qp.rq_ci++;
	bump(qp.n_recvs);
	return RqTake::ok;
}

void EmuDataPath::rq_untake(Qp &qp)
{
	if (qp.srq != nullptr)
		qp.srq_held = true; /* srq_wqe: the retry takes it again */
	else
		qp.rq_ci--;
	qp.n_recvs.store(qp.n_recvs.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

void EmuDataPath::rq_complete(const DmaSection &dma, Qp &qp, uint16_t index, uint8_t cqe_opcode,
			      uint32_t byte_cnt, uint32_t imm, uint8_t syndrome)
{
	if (qp.rcq == nullptr)
		return;
	CqeFields f;
	f.qpn = qp.qpn;
	f.srqn = qp.srq != nullptr ? qp.srq->srqn : 0;
	f.wqe_counter = index;
	f.opcode = syndrome == kOk ? cqe_opcode : uint8_t{MLX5_CQE_RESP_ERR};
	f.byte_cnt = byte_cnt;
	f.imm = imm;
	f.syndrome = syndrome;
	write_cqe(dma, *qp.rcq, f);
}

void EmuDataPath::rq_flush(const DmaSection &dma, Qp &qp)
{
	/* An SRQ's WQEs stay in the SRQ for its other QPs; only the one this QP holds for a
	 * page fault is its own to flush. */
	if (qp.srq_held) {
		qp.srq_held = false;
		rq_complete(dma, qp, qp.srq_wqe.index, 0, 0, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	}
	/* So is the one a wire SEND in progress took (its LAST never came). */
	if (qp.srq != nullptr && qp.rc && qp.rc->s_active) {
		qp.rc->s_active = false;
		rq_complete(dma, qp, qp.rc->s_wqe.index, 0, 0, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	}
	if (!qp.attr.rq)
		return;
	uint8_t rec[prm::dbr::size] = {};
	uint32_t raw = 0;
	if (dma.load32_acquire(qp.attr.dbr + prm::dbr::qp_rq_dword * 4, &raw) < 0) {
		ctr_.dbr_faults.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	std::memcpy(rec + prm::dbr::qp_rq_dword * 4, &raw, sizeof(raw));
	const auto pi = static_cast<uint16_t>(prm::get(rec, prm::dbr::rq_counter));
	/* At most one ring's worth: a corrupt counter flushes no more than the RQ holds. */
	for (uint32_t n = 0; qp.rq_ci != pi && n < (1u << qp.attr.log_rq_size); n++)
		rq_complete(dma, qp, qp.rq_ci++, 0, 0, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	qp.rq_ci = pi;
}

void EmuDataPath::rq_fail(const DmaSection &dma, Qp &qp, uint16_t index, uint8_t syndrome)
{
	rq_complete(dma, qp, index, 0, 0, 0, syndrome);
	qp.set_state(QpState::err);
	rq_flush(dma, qp);
}

/* IBTA vol. 1, 10.6.7.2 (remote invalidate): the R_Key names a memory region of the QP's PD
 * that allows remote invalidation (the mkey's en_rinval; Linux mlx5_ib sets it for every MR
 * that can be invalidated remotely, mr.c set_mkc_access_pd_addr_fields). The model has no
 * memory windows of its own (lib/mr's windows are mkeys). */
uint8_t EmuDataPath::rinval_check(MkeyTable::Hold &keys, const Qp &qp, uint32_t rkey)
{
	const MkeyEntry *e = keys.find(prm::mkey::index(rkey));
	if (e == nullptr)
		return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
	const uint8_t *mkc = e->mkc.data();
	if (prm::get(mkc, prm::mkc::free) != 0 ||
	    prm::get(mkc, prm::mkc::mkey_7_0) != prm::mkey::variant(rkey) ||
	    prm::get(mkc, prm::mkc::pd) != qp.attr.pd || prm::get(mkc, prm::mkc::en_rinval) == 0)
		return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
	return kOk;
}

uint8_t EmuDataPath::rinval_apply(const Qp &qp, uint32_t rkey)
{
	return mkeys_.update(prm::mkey::index(rkey), [&](MkeyEntry *e) -> uint8_t {
		if (e == nullptr)
			return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
		uint8_t *mkc = e->mkc.data();
		/* Checked again: a UMR may have changed the key since rinval_check. */
		if (prm::get(mkc, prm::mkc::free) != 0 ||
		    prm::get(mkc, prm::mkc::mkey_7_0) != prm::mkey::variant(rkey) ||
		    prm::get(mkc, prm::mkc::pd) != qp.attr.pd ||
		    prm::get(mkc, prm::mkc::en_rinval) == 0)
			return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
		prm::set(mkc, prm::mkc::free, 1);
		e->ext.clear(); /* as a local invalidate: the index hands no extension on */
		return kOk;
	});
}

/* ---- Loopback ---------------------------------------------------------------------------- */

/*
 * SEND, SEND with immediate, SEND with invalidate (imm = the rkey to invalidate, as rdma-core's
 * mlx5 provider puts it: providers/mlx5/qp.c, _mlx5_post_send) and RDMA WRITE with immediate.
 * The WQE: ctrl | data segs or one inline seg (WRITE with immediate: ctrl | raddr | ...).
 */
uint8_t EmuDataPath::Exec::send()
{
	const bool wimm = c.opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
	WriteSource src;
	uint8_t s = wimm ? write_source(&src) : message_source(kCtrl, &src);
	if (s != kOk)
		return s;
	/* The responder first (no key is held yet): its rq_lock comes before the keys. */
	s = connect(Access::remote_write, wimm);
	if (s != kOk) {
		/* A requester-side refusal of the local list would have come first. */
		MkeyTable::Hold keys(dp.mkeys_, qp.held);
		Translator local(keys, dma, qp.attr.pd, qp.qpn);
		const uint8_t l = validate_list(local, src.segs, src.nseg, Access::local_read);
		return l != kOk ? l : s;
	}
	Qp &r = *responder;
	if (!r.attr.receives()) /* a zero-length RQ takes no message (an invalid request) */
		return responder_fail(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
				      prm::event_type::wq_inval_req_error);
	std::lock_guard rl(r.rq_lock);
	uint16_t index = 0;
	bool inval = false;
	{
		MkeyTable::Hold keys(dp.mkeys_, qp.held);
		Translator local(keys, dma, qp.attr.pd, qp.qpn);
		arm_faults(local);
		s = validate_list(local, src.segs, src.nseg, Access::local_read);
		if (s != kOk)
			return local_fault(s, Access::local_read);
		s = deliver(r, keys, local, src, resp_opcode(c.opcode), c.imm);
		if (s != kOk || rnr)
			return s;
		inval = c.opcode == MLX5_OPCODE_SEND_INVAL;
		index = r.srq != nullptr ? r.srq_wqe.index : static_cast<uint16_t>(r.rq_ci - 1);
	}
	/* After the keys are released: the invalidated key may be one of them. */
	if (inval && dp.rinval_apply(r, c.imm) != kOk) {
		dp.rq_fail(dma, r, index, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
		return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
	}
	dp.rq_complete(dma, r, index, resp_opcode(c.opcode), static_cast<uint32_t>(src.total),
		       c.imm, kOk);
	byte_cnt = static_cast<uint32_t>(src.total);
	return kOk;
}

/* The responder's side of send(), its rq_lock and the WQE's keys held: every check, then the
 * bytes. kOk (the receive CQE is still to write), rnr set when the RQ was empty, or the
 * requester's syndrome (the responder's own CQE written). */
uint8_t EmuDataPath::Exec::deliver(Qp &r, MkeyTable::Hold &keys, const Translator &local,
				   const WriteSource &src, uint8_t cqe_opcode, uint32_t imm)
{
	Translator remote(keys, dma, r.attr.pd, r.qpn);
	const bool wimm = cqe_opcode == MLX5_CQE_RESP_WR_IMM;
	uint64_t counter = 0;
	if (wimm && src.total != 0) {
		/* The rkey before a receive WQE is taken: a refusal consumes none, and a page
		 * not present is the responder's RDMA fault, as for an RDMA WRITE
		 * (emu_mlx5_odp.cpp). */
		Translator wt(keys, dma, r.attr.pd, r.qpn);
		arm_faults(wt);
		uint8_t s = wt.validate(src.ra.rkey, src.ra.addr, src.total, Access::remote_write);
		if (s == kNotPresent)
			return remote_fault(s, src.ra.rkey, src.ra.addr, src.total,
					    Access::remote_write);
		if (s != kOk)
			return responder_fail(s, prm::event_type::wq_access_error);
		s = ext_admit(keys, src.ra.rkey, true, &counter);
		if (s != kOk)
			return s;
	}
	RecvWqe rw;
	switch (dp.rq_take(dma, r, &rw)) {
	case RqTake::empty:
		bump(r.n_rnr);
		rnr = true;
		return kOk;
	case RqTake::fault:
		/* An unreadable receive WQE: the responder's local QP operation error; the
		 * requester hears a remote operational error (IBTA 9.7.5.2.4). */
		r.set_state(QpState::err);
		dp.rq_flush(dma, r);
		return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
	case RqTake::ok:
		break;
	}
	if (wimm) {
		if (src.total != 0) {
			uint8_t s = kOk;
			if (src.inl) {
				s = remote_place(remote, src.ra.rkey, src.ra.addr, src.inl_data,
						 src.total);
			} else {
				uint64_t off = 0;
				for (size_t i = 0; i < src.nseg && s == kOk; i++) {
					s = copy(local, src.segs[i].lkey, src.segs[i].addr,
						 Access::local_read, remote, src.ra.rkey,
						 src.ra.addr + off, Access::remote_write,
						 src.segs[i].bc);
					off += src.segs[i].bc;
				}
			}
			if (s != kOk) {
				dp.rq_fail(dma, r, rw.index, s);
				return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
			}
			ext_count(dma, counter);
		}
		return kOk;
	}
	/* A message longer than the receive WQE: the responder's local length error, an invalid
	 * request to the requester (IBTA 9.7.5.2.4, o9-? "length errors"; rxe's responder,
	 * drivers/infiniband/sw/rxe/rxe_resp.c, answers RESPST_ERR_LENGTH so). */
	if (src.total > rw.capacity) {
		dp.rq_fail(dma, r, rw.index, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
		return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
	}
	{
		/* On-demand paging: a used page not present is a receive WQE's page fault
		 * (emu_mlx5_odp.cpp, recv_fault); the requester's WQE waits for its resume, as
		 * for a responder's RDMA fault, and the receive WQE stays posted. */
		Translator rt(keys, dma, r.attr.pd, r.qpn);
		arm_faults(rt);
		uint8_t s = validate_used(rt, rw.segs, rw.nseg, src.total);
		if (s == kNotPresent) {
			if (dp.recv_fault(r, rw, src.total, &fault))
				return kFaultHeld;
			s = Translator::fail_syndrome(Access::local_write, true);
		}
		if (s != kOk) {
			/* The receive WQE's key refused: its syndrome on the responder, a remote
			 * operational error to the requester (rxe: RESPST_ERR_MALFORMED_WQE). */
			dp.rq_fail(dma, r, rw.index, s);
			return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
		}
	}
	if (cqe_opcode == MLX5_CQE_RESP_SEND_INV)
		if (uint8_t s = dp.rinval_check(keys, r, imm); s != kOk) {
			dp.rq_fail(dma, r, rw.index, s);
			return s;
		}
	const uint8_t s =
		src.inl ? sge_scatter(dma, remote, rw.segs, rw.nseg, 0, src.inl_data, src.total)
			: scatter_list(dma, local, src.segs, src.nseg, remote, rw.segs, rw.nseg,
				       src.total);
	if (s != kOk) {
		dp.rq_fail(dma, r, rw.index, s);
		return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
	}
	return kOk;
}

/* Inline bytes to a remote key's range (validated before). */
uint8_t EmuDataPath::Exec::remote_place(const Translator &remote, uint32_t rkey, uint64_t addr,
					const uint8_t *data, uint64_t n)
{
	for (uint64_t done = 0; done < n;) {
		IovaRun d;
		if (uint8_t s =
			    remote.resolve(rkey, addr + done, n - done, Access::remote_write, &d);
		    s != kOk)
			return s;
		if (dma.write(d.iova, data + done, d.len) < 0)
			return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
		done += d.len;
	}
	return kOk;
}

/* ---- The wire ---------------------------------------------------------------------------- */

/* The requester: the message as SEND_* or RDMA_WRITE_* (with immediate) packets of the path
 * MTU; the immediate (ImmDt) or the rkey to invalidate (IETH) rides on the last packet. */
uint8_t EmuDataPath::Exec::send_source(WriteSource *src)
{
	return c.opcode == MLX5_OPCODE_RDMA_WRITE_IMM ? write_source(src)
						      : message_source(kCtrl, src);
}

uint8_t EmuDataPath::Exec::wire_send()
{
	WriteSource src;
	uint8_t s = send_source(&src);
	if (s != kOk)
		return s;
	RcWire &r = *qp.rc;
	MkeyTable::Hold keys(dp.mkeys_, qp.held);
	Translator local(keys, dma, qp.attr.pd, qp.qpn);
	arm_faults(local);
	if (s = validate_list(local, src.segs, src.nseg, Access::local_read); s != kOk)
		return local_fault(s, Access::local_read);
	uint32_t n = 0;
	if (s = message_packets(src, local, r.next_psn, 0, &n, false); s != kOk)
		return s;
	first_psn = r.next_psn;
	npsn = n;
	r.next_psn = (r.next_psn + n) & kPsnMask;
	byte_cnt = static_cast<uint32_t>(src.total);
	awaiting = true;
	return kOk;
}

uint8_t EmuDataPath::Exec::message_packets(const WriteSource &src, const Translator &local,
					   uint32_t first_psn, uint32_t k0, uint32_t *n_out,
					   bool resend)
{
	const bool write =
		c.opcode == MLX5_OPCODE_RDMA_WRITE || c.opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
	uint8_t first = op::send_first, middle = op::send_middle, last = op::send_last,
		only = op::send_only;
	switch (c.opcode) {
	case MLX5_OPCODE_RDMA_WRITE:
		first = op::write_first;
		middle = op::write_middle;
		last = op::write_last;
		only = op::write_only;
		break;
	case MLX5_OPCODE_SEND_IMM:
		last = op::send_last_imm;
		only = op::send_only_imm;
		break;
	case MLX5_OPCODE_SEND_INVAL:
		last = op::send_last_inv;
		only = op::send_only_inv;
		break;
	case MLX5_OPCODE_RDMA_WRITE_IMM:
		first = op::write_first;
		middle = op::write_middle;
		last = op::write_last_imm;
		only = op::write_only_imm;
		break;
	default:
		break;
	}
	RcWire &r = *qp.rc;
	const uint32_t n = packets_of(src.total, r.mtu);
	*n_out = n;
	const bool ask = resend || ack_wanted(n);
	if (ask)
		dp.wctr_.ack_requests.fetch_add(1, std::memory_order_relaxed);
	/* The message's packets in few system calls (emu_mlx5_rc.cpp's send batch: a sendmmsg,
	 * and GSO runs of the equal MIDDLE packets). */
	TxBatch tx(dp, *r.port);
	for (uint32_t k = k0; k < n; k++) {
		const uint64_t off = uint64_t{k} * r.mtu;
		const auto plen = static_cast<size_t>(std::min<uint64_t>(r.mtu, src.total - off));
		roce::Headers h;
		h.opcode = n == 1 ? only : k == 0 ? first : k + 1 == n ? last : middle;
		h.dest_qp = qp.path.remote_qpn;
		h.psn = (first_psn + k) & kPsnMask;
		h.ack_req = k + 1 == n && ask;
		/* Solicited events are for SENDs and WRITEs with immediate (IBTA 9.2.3). */
		h.se = k + 1 == n && c.opcode != MLX5_OPCODE_RDMA_WRITE &&
		       (c.fm_ce_se & MLX5_WQE_CTRL_SOLICITED) != 0;
		if (write)
			h.reth = {src.ra.addr, src.ra.rkey, static_cast<uint32_t>(src.total)};
		h.imm = c.imm;
		h.ieth_r_key = c.imm;
		const size_t room = roce::header_length(h.opcode) + plen + 3 + roce::icrc_size;
		uint8_t *pkt = tx.room(room);
		uint8_t *payload = pkt + roce::header_length(h.opcode);
		if (src.inl) {
			std::memcpy(payload, src.inl_data + off, plen);
		} else if (uint8_t s =
				   sge_gather(dma, local, src.segs, src.nseg, off, payload, plen);
			   s != kOk) {
			tx.discard(); /* nothing of a message that fails locally goes out */
			return s;
		}
		size_t out = 0;
		if (roce::build(r.tx, h, {payload, plen}, {pkt, room}, &out) != roce::Error::ok) {
			tx.discard();
			return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		}
		tx.add(r.remote, out);
	}
	return kOk;
}

/*
 * The responder: one SEND_* packet, in sequence (rc_request checked the PSN). FIRST/ONLY take
 * a receive WQE (none: an RNR NAK, nothing executed, ePSN unchanged); every packet is placed at
 * the message's offset; LAST/ONLY complete the receive WQE. *ack: an ACK is owed. QP lock held.
 */
void EmuDataPath::rc_recv_send(const DmaSection &dma, Qp &qp, const roce::Parsed &pk, uint32_t psn,
			       bool *ack)
{
	RcWire &r = *qp.rc;
	const uint8_t o = pk.opcode;
	const bool first = o == op::send_first || o == op::send_only || o == op::send_only_imm ||
			   o == op::send_only_inv;
	const bool last = o != op::send_first && o != op::send_middle;
	const size_t plen = pk.payload.size();
	const auto nak = [&](uint8_t code) {
		rc_ack(qp, roce::aeth::make_syndrome(roce::aeth::type::nak, code), psn);
		r.s_active = false;
	};
	if (!qp.attr.receives() || first == r.s_active || (!last && plen != r.mtu) ||
	    plen > r.mtu) {
		/* No RQ, a SEND inside another, a MIDDLE/LAST without FIRST, or a packet of the
		 * wrong size (FIRST and MIDDLE carry one MTU, 9.7.6.1.3). */
		nak(roce::aeth::nak::invalid_request);
		qp.set_state(QpState::err);
		post_event(dma, prm::event_type::wq_inval_req_error, qp.qpn);
		return;
	}
	std::lock_guard rl(qp.rq_lock);
	if (first) {
		switch (rq_take(dma, qp, &r.s_wqe)) {
		case RqTake::empty:
			/* RNR NAK with the QP's minimum RNR timer (IBTA 9.7.5.2.8); the
			 * requester sends the message again from this PSN. */
			rc_rnr_nak(qp, psn);
			return;
		case RqTake::fault:
			nak(roce::aeth::nak::remote_operational_error);
			qp.set_state(QpState::err);
			rq_flush(dma, qp);
			return;
		case RqTake::ok:
			break;
		}
		r.s_active = true;
		r.s_off = 0;
	}
	RecvWqe &rw = r.s_wqe;
	if (r.s_off + plen > rw.capacity) {
		nak(roce::aeth::nak::invalid_request);
		rq_fail(dma, qp, rw.index, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
		return;
	}
	uint32_t imm = 0;
	{
		MkeyTable::Hold keys(mkeys_, qp.held);
		Translator t(keys, dma, qp.attr.pd, qp.qpn);
		/* A page not present is a receive WQE's page fault (below). */
		if (cfg_.odp)
			t.report_not_present();
		/* This packet's part of the list. */
		uint8_t s = kOk;
		{
			uint64_t off = r.s_off, left = plen;
			for (size_t i = 0; i < rw.nseg && left != 0; i++) {
				if (off >= rw.segs[i].bc) {
					off -= rw.segs[i].bc;
					continue;
				}
				const uint64_t use = std::min<uint64_t>(rw.segs[i].bc - off, left);
				s = t.validate(rw.segs[i].lkey, rw.segs[i].addr + off, use,
					       Access::local_write);
				if (s != kOk)
					break;
				left -= use;
				off = 0;
			}
		}
		if (s == kNotPresent) {
			/* On-demand paging (emu_mlx5_odp.cpp): the fault and an RNR NAK; this
			 * packet is not executed (ePSN unchanged) and the requester sends it again.
			 * A FIRST or ONLY gives its receive WQE back: the retry takes it again. */
			if (rc_recv_fault(dma, qp, psn, rw, plen)) {
				if (first) {
					rq_untake(qp);
					r.s_active = false;
				}
				return;
			}
			s = Translator::fail_syndrome(Access::local_write, true);
		}
		if (s == kOk && last && (o == op::send_last_inv || o == op::send_only_inv)) {
			imm = static_cast<uint32_t>(prm::get(pk.ieth, roce::ieth::r_key));
			if (rinval_check(keys, qp, imm) != kOk) {
				nak(roce::aeth::nak::invalid_request);
				rq_fail(dma, qp, rw.index, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
				return;
			}
		}
		if (s == kOk)
			s = sge_scatter(dma, t, rw.segs, rw.nseg, r.s_off, pk.payload.data(), plen);
		if (s != kOk) {
			nak(roce::aeth::nak::remote_operational_error);
			rq_fail(dma, qp, rw.index, s);
			return;
		}
	}
	r.s_off += plen;
	r.epsn = (r.epsn + 1) & kPsnMask;
	if (!last) {
		*ack = prm::get(pk.bth, roce::bth::ack_req) != 0;
		return;
	}
	r.s_active = false;
	uint8_t cqe_op = MLX5_CQE_RESP_SEND;
	if (o == op::send_last_imm || o == op::send_only_imm) {
		cqe_op = MLX5_CQE_RESP_SEND_IMM;
		imm = static_cast<uint32_t>(prm::get(pk.immdt, roce::immdt::imm));
	} else if (o == op::send_last_inv || o == op::send_only_inv) {
		cqe_op = MLX5_CQE_RESP_SEND_INV;
		if (rinval_apply(qp, imm) != kOk) {
			nak(roce::aeth::nak::invalid_request);
			rq_fail(dma, qp, rw.index, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
			return;
		}
	}
	r.msn = (r.msn + 1) & kPsnMask;
	rq_complete(dma, qp, rw.index, cqe_op, static_cast<uint32_t>(r.s_off), imm, kOk);
	/* The requester asked (AckReq) or not (log_ack_req_freq): then a lazy ACK later. */
	*ack = prm::get(pk.bth, roce::bth::ack_req) != 0;
	r.lazy_ack = r.lazy_ack || !*ack;
}

} // namespace nicmr::emu
