/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The RC transport of the emulated NIC's UDP wire (IBTA vol. 1, 9.7; the packets of
 * drivers/common/roce, nothing else). A QP that INIT2RTR put on a wire port (no force loopback)
 * runs here instead of against an in-process responder:
 *
 *   requester (run_sq, the ringing or device thread)          responder (poll_wire, device thread)
 *   WRITE: local SGEs checked, MTU-sized packets  -- PSN n.. -->  PSN == ePSN? rkey checked
 *          FIRST/MIDDLE/LAST or ONLY, AckReq last                 (index+variant, PD, bounds,
 *   READ:  local SGEs checked, one READ REQUEST   -- PSN n  -->   rights) before a byte moves;
 *          takes ceil(len / MTU) PSNs                             WRITE lands, ACK at batch end;
 *   ATOMIC: CmpSwap / FetchAdd, one PSN           -- PSN n  -->   READ answered by responses;
 *                                                                 atomic done, ATOMIC ACK
 *   <-- ACK / NAK / READ RESPONSE* / ATOMIC ACK --   refused: NAK (remote access error or
 *   pending ring (SQ order): entries done by the      invalid request), responder to ERR and
 *   responses, CQEs written from the head in order    its WQ event; nothing written
 *
 * A NAK completes its WQE with the syndrome the NAK code names (remote access error 0x13,
 * invalid request 0x12, remote operational error 0x14), the QP goes to ERR and every later WQE
 * is flushed. Reliability (IBTA 9.7.6): a PSN sequence error NAK, the local ACK timer
 * (rc_timers, on the device thread's progress turn) and an RNR NAK's timer resend go-back-N
 * from the WQEs still in the SQ (rc_resend), counting retry_count / rnr_retry; the responder
 * answers duplicates without executing them again (ACK, READ responses from memory, atomics
 * from the ring of saved results). SEND and WRITE with immediate take the responder's receive
 * WQEs (emu_mlx5_recv.cpp); an empty RQ answers an RNR NAK. A batch's ACKs go at the next
 * progress turn (rc_owed_ack), after any request the application answered with.
 * doc/device-model.md ("The UDP wire").
 *
 * Locks: poll_wire holds the object table shared for a receive batch and each packet's QP lock
 * while it runs; the requester runs under its QP's lock as every WQE does. Device side: the
 * socket calls are this device's transmit and receive; no allocation.
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <algorithm>
#include <cstring>
#include <ctime>

#include "emu_mlx5_dp_impl.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;
namespace op = roce::opcode;
using namespace wqe_fmt;

namespace {

/* a - b on the 24-bit PSN circle, as a signed distance (IBTA 9.7.1: half the space ahead). */
int32_t psn_diff(uint32_t a, uint32_t b) noexcept
{
	const uint32_t d = (a - b) & kPsnMask;
	return d & 0x800000 ? static_cast<int32_t>(d) - 0x1000000 : static_cast<int32_t>(d);
}

/* CLOCK_MONOTONIC in ns (the vDSO's: no system call). */
uint64_t mono_now_ns() noexcept
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

/* The packet opcode of packet k of n of a message (first, middle, last, only). */
uint8_t seq_opcode(uint32_t k, uint32_t n, uint8_t first, uint8_t middle, uint8_t last,
		   uint8_t only) noexcept
{
	return n == 1 ? only : k == 0 ? first : k + 1 == n ? last : middle;
}

bool is_write(uint8_t o) noexcept
{
	return o >= op::write_first && o <= op::write_only_imm;
}

bool is_send(uint8_t o) noexcept
{
	return o <= op::send_only_imm || o == op::send_last_inv || o == op::send_only_inv;
}

/* WQEs an ACK completes (no response data): RDMA WRITE and the SEND family. */
bool acked_kind(uint8_t wqe_opcode) noexcept
{
	return wqe_opcode == MLX5_OPCODE_RDMA_WRITE || wqe_opcode == MLX5_OPCODE_RDMA_WRITE_IMM ||
	       wqe_opcode == MLX5_OPCODE_SEND || wqe_opcode == MLX5_OPCODE_SEND_IMM ||
	       wqe_opcode == MLX5_OPCODE_SEND_INVAL;
}

/* Bytes [va, va + n) of a remote key to or from buf (the responder's side); the range was
 * validated. 0 or REMOTE_ACCESS_ERR. */
uint8_t key_copy(const DmaSection &dma, const Translator &t, uint32_t rkey, uint64_t va,
		 uint8_t *buf, uint64_t n, Access a, bool to_mem)
{
	for (uint64_t k = 0; k < n;) {
		IovaRun run;
		if (t.resolve(rkey, va + k, n - k, a, &run) != 0)
			return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
		const int rc = to_mem ? dma.write(run.iova, buf + k, run.len)
				      : dma.read(run.iova, buf + k, run.len);
		if (rc < 0)
			return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
		k += run.len;
	}
	return 0;
}

/* The requester's CQE syndrome for a NAK code (IBTA 9.7.5.2.4; the mlx5 syndromes of the
 * same names). */
uint8_t nak_syndrome(uint8_t code) noexcept
{
	switch (code) {
	case roce::aeth::nak::invalid_request:
		return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
	case roce::aeth::nak::remote_access_error:
		return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
	case roce::aeth::nak::remote_operational_error:
		return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
	default: /* PSN sequence error: no retransmission yet, the request is lost */
		return MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR;
	}
}

} // namespace

/* emu_mlx5_dp_impl.h */
uint8_t sge_copy(const DmaSection &dma, const Translator &t, const DataSeg *segs, size_t nseg,
		 uint64_t off, uint8_t *buf, uint64_t n, Access a, bool to_mem)
{
	size_t i = 0;
	while (i < nseg && off >= segs[i].bc)
		off -= segs[i++].bc;
	uint64_t done = 0;
	while (done < n && i < nseg) {
		const uint64_t take = std::min<uint64_t>(segs[i].bc - off, n - done);
		for (uint64_t k = 0; k < take;) {
			IovaRun run;
			uint8_t s =
				t.resolve(segs[i].lkey, segs[i].addr + off + k, take - k, a, &run);
			if (s != 0)
				return s;
			const int rc = to_mem ? dma.write(run.iova, buf + done + k, run.len)
					      : dma.read(run.iova, buf + done + k, run.len);
			if (rc < 0)
				return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
			k += run.len;
		}
		done += take;
		off = 0;
		i++;
	}
	return done == n ? 0 : MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
}

/* Reads the WQE at index back from the SQ (it stays there until its CQE: the driver reuses
 * its WQEBBs only after that). Its length in *wlen; false when unreadable. */
static bool read_wqe(const DmaSection &dma, const QpAttr &qa, uint16_t index, uint8_t *buf,
		     size_t *wlen)
{
	const uint32_t size = uint32_t{1} << qa.log_sq_size;
	const auto at = [&](uint32_t i) {
		return qa.sq_iova(((index + i) & (size - 1)) * prm::wq::wqebb_size);
	};
	if (dma.read(at(0), buf, prm::wq::wqebb_size) < 0)
		return false;
	const Ctrl c = parse_ctrl(buf);
	if (c.ds == 0)
		return false;
	const uint32_t nbb = prm::wq::wqebbs(c.ds);
	for (uint32_t i = 1; i < nbb; i++)
		if (dma.read(at(i), buf + i * prm::wq::wqebb_size, prm::wq::wqebb_size) < 0)
			return false;
	*wlen = size_t{c.ds} * 16;
	return true;
}

/* One packet without payload (a READ REQUEST, an atomic request, an ATOMIC ACK), sent at
 * once; MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR when the headers do not build. QP lock held. */
uint8_t EmuDataPath::rc_send_headers(const RcWire &r, const roce::Headers &h)
{
	uint8_t pkt[roce::max_header_length + roce::icrc_size];
	size_t out = 0;
	if (roce::build(r.tx, h, {}, {pkt, sizeof(pkt)}, &out) != roce::Error::ok)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	rc_send(r, pkt, out);
	return kOk;
}

void EmuDataPath::rc_send(const RcWire &r, const uint8_t *pkt, size_t len)
{
	if (r.port->send(r.remote, pkt, len) < 0)
		wctr_.tx_errors.fetch_add(1, std::memory_order_relaxed);
	else
		wctr_.tx_packets.fetch_add(1, std::memory_order_relaxed);
}

/* emu_mlx5_dp_impl.h */
void EmuDataPath::TxBatch::count(uint32_t sent, uint32_t errors) noexcept
{
	if (sent != 0)
		dp.wctr_.tx_packets.fetch_add(sent, std::memory_order_relaxed);
	if (errors != 0)
		dp.wctr_.tx_errors.fetch_add(errors, std::memory_order_relaxed);
}

/* ---- Requester: WQEs out as packets ------------------------------------------------------ */

uint8_t EmuDataPath::Exec::run_wire()
{
	switch (c.opcode) {
	case MLX5_OPCODE_RDMA_WRITE:
		return wire_write();
	case MLX5_OPCODE_RDMA_READ:
		return wire_read();
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA:
		return wire_atomic();
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_IMM:
	case MLX5_OPCODE_SEND_INVAL:
	case MLX5_OPCODE_RDMA_WRITE_IMM:
		return wire_send(); /* emu_mlx5_recv.cpp */
	default:
		return run(); /* local work: NOP, UMR, LOCAL_INVAL */
	}
}

uint8_t EmuDataPath::Exec::wire_write()
{
	WriteSource src;
	if (uint8_t s = write_source(&src); s != kOk)
		return s;
	RcWire &r = *qp.rc;
	MkeyTable::Hold keys(dp.mkeys_, qp.held);
	Translator local(keys, dma, qp.attr.pd, qp.qpn);
	arm_faults(local);
	if (uint8_t s = validate_list(local, src.segs, src.nseg, Access::local_read); s != kOk)
		return local_fault(s, Access::local_read);
	uint32_t n = 0;
	if (uint8_t s = message_packets(src, local, r.next_psn, 0, &n, false); s != kOk)
		return s;
	first_psn = r.next_psn;
	npsn = n;
	r.next_psn = (r.next_psn + n) & kPsnMask;
	byte_cnt = static_cast<uint32_t>(src.total);
	awaiting = true;
	return kOk;
}

uint8_t EmuDataPath::Exec::wire_read()
{
	if (len < kCtrl + kRaddr)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	const Raddr ra = parse_raddr(w + kCtrl);
	DataSeg segs[EmuDataPath::kMaxWqeBytes / kData];
	size_t nseg = 0;
	uint64_t total = 0;
	uint8_t s = gather_list(segs, &nseg, &total, kCtrl + kRaddr);
	if (s != kOk)
		return s;
	RcWire &r = *qp.rc;
	{
		MkeyTable::Hold keys(dp.mkeys_, qp.held);
		Translator local(keys, dma, qp.attr.pd, qp.qpn);
		arm_faults(local);
		s = validate_list(local, segs, nseg, Access::local_write);
		if (s != kOk)
			return local_fault(s, Access::local_write);
	}
	if (s = read_request(ra, total, r.next_psn, 0); s != kOk)
		return s;
	first_psn = r.next_psn;
	npsn = packets_of(total, r.mtu); /* the responses take the request's PSNs */
	r.next_psn = (r.next_psn + npsn) & kPsnMask;
	byte_cnt = static_cast<uint32_t>(total);
	awaiting = true;
	return kOk;
}

/* The READ REQUEST for the responses k0 .. of a READ of total bytes at ra whose first PSN is
 * first_psn. A re-request asks for the rest, from the PSN and the
 * offset of the first response missing. */
uint8_t EmuDataPath::Exec::read_request(const Raddr &ra, uint64_t total, uint32_t first_psn,
					uint32_t k0)
{
	RcWire &r = *qp.rc;
	const uint64_t off = uint64_t{k0} * r.mtu;
	roce::Headers h;
	h.opcode = op::read_request;
	h.dest_qp = qp.path.remote_qpn;
	h.psn = (first_psn + k0) & kPsnMask;
	h.ack_req = true;
	h.reth = {ra.addr + off, ra.rkey, static_cast<uint32_t>(total - off)};
	return dp.rc_send_headers(r, h);
}

uint8_t EmuDataPath::Exec::wire_atomic()
{
	if (len < kCtrl + kRaddr + kAtomic + kData)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	const DataSeg d = parse_data(w + kCtrl + kRaddr + kAtomic);
	if (d.bc != 8)
		return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
	RcWire &r = *qp.rc;
	{
		MkeyTable::Hold keys(dp.mkeys_, qp.held);
		Translator local(keys, dma, qp.attr.pd, qp.qpn);
		arm_faults(local);
		uint8_t s = local.validate(d.lkey, d.addr, 8, Access::local_write);
		if (s != kOk)
			return local_fault(s, Access::local_write);
	}
	if (uint8_t s = atomic_request(r.next_psn); s != kOk)
		return s;
	first_psn = r.next_psn;
	npsn = 1;
	r.next_psn = (r.next_psn + 1) & kPsnMask;
	byte_cnt = 8;
	awaiting = true;
	return kOk;
}

uint8_t EmuDataPath::Exec::atomic_request(uint32_t psn)
{
	RcWire &r = *qp.rc;
	const Raddr ra = parse_raddr(w + kCtrl);
	roce::Headers h;
	h.opcode = c.opcode == MLX5_OPCODE_ATOMIC_CS ? op::compare_swap : op::fetch_add;
	h.dest_qp = qp.path.remote_qpn;
	h.psn = psn;
	h.ack_req = true;
	h.atomic = {ra.addr, ra.rkey, prm::get(w + kCtrl + kRaddr, prm::wqe_atomic::swap_add),
		    prm::get(w + kCtrl + kRaddr, prm::wqe_atomic::compare)};
	return dp.rc_send_headers(r, h);
}

/* The WQE read back from the SQ (it stays there until its CQE), its packets again from k0.
 * Its local checks passed when it was first sent; the gather list is read again. */
uint8_t EmuDataPath::Exec::wire_resend(uint32_t first, uint32_t k0)
{
	switch (c.opcode) {
	case MLX5_OPCODE_RDMA_WRITE: {
		WriteSource src;
		if (uint8_t s = write_source(&src); s != kOk)
			return s;
		MkeyTable::Hold keys(dp.mkeys_, qp.held);
		Translator local(keys, dma, qp.attr.pd, qp.qpn);
		uint32_t n = 0;
		return message_packets(src, local, first, k0, &n, true);
	}
	case MLX5_OPCODE_RDMA_READ: {
		DataSeg segs[EmuDataPath::kMaxWqeBytes / kData];
		size_t nseg = 0;
		uint64_t total = 0;
		if (len < kCtrl + kRaddr)
			return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		if (uint8_t s = gather_list(segs, &nseg, &total, kCtrl + kRaddr); s != kOk)
			return s;
		return read_request(parse_raddr(w + kCtrl), total, first, k0);
	}
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA:
		if (len < kCtrl + kRaddr + kAtomic + kData)
			return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		return atomic_request(first);
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_IMM:
	case MLX5_OPCODE_SEND_INVAL:
	case MLX5_OPCODE_RDMA_WRITE_IMM: { /* emu_mlx5_recv.cpp */
		WriteSource src;
		if (uint8_t s = send_source(&src); s != kOk)
			return s;
		MkeyTable::Hold keys(dp.mkeys_, qp.held);
		Translator local(keys, dma, qp.attr.pd, qp.qpn);
		uint32_t n = 0;
		return message_packets(src, local, first, k0, &n, true);
	}
	default:
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	}
}

/* A WQE run_sq took: outstanding until its response, or done now (local work, a failure). */
void EmuDataPath::rc_note(const DmaSection &dma, Qp &qp, uint16_t index, uint8_t opcode,
			  bool signaled, const Exec &ex, uint8_t syndrome)
{
	RcWire &r = *qp.rc;
	const bool idle = r.oldest_owed() == nullptr;
	RcWire::Pending &e = r.at(r.tail++);
	e = {};
	e.index = index;
	e.opcode = opcode;
	e.signaled = signaled;
	e.done = syndrome != kOk || !ex.awaiting;
	e.syndrome = syndrome;
	e.first_psn = ex.first_psn;
	e.npsn = ex.npsn;
	e.byte_cnt = ex.byte_cnt;
	if (syndrome != kOk)
		r.halted = true; /* send nothing after it: it fails in its turn */
	else if (ex.awaiting && idle) {
		/* The first request owed: fresh retry counters, and the timer starts at the
		 * next progress turn. */
		r.retry_left = qp.path.retry_count;
		r.rnr_left = qp.path.rnr_retry;
		r.arm = true;
	}
	rc_retire(dma, qp);
}

bool EmuDataPath::rc_must_wait(Qp &qp, uint8_t opcode) const noexcept
{
	if (opcode != MLX5_OPCODE_RDMA_READ && opcode != MLX5_OPCODE_ATOMIC_CS &&
	    opcode != MLX5_OPCODE_ATOMIC_FA)
		return false;
	RcWire &r = *qp.rc;
	uint32_t owed = 0;
	for (uint32_t i = r.head; i != r.tail; i++) {
		const RcWire::Pending &e = r.at(i);
		owed += !e.done &&
			(e.opcode == MLX5_OPCODE_RDMA_READ || e.opcode == MLX5_OPCODE_ATOMIC_CS ||
			 e.opcode == MLX5_OPCODE_ATOMIC_FA);
	}
	return owed >= (uint32_t{1} << qp.path.log_sra_max);
}

/*
 * Go-back-N (IBTA vol. 1, 9.7.6; Linux rxe_req.c, req_retry: a requester resends from the PSN a
 * NAK names or, on its local ACK
 * timeout, from the oldest unacknowledged one): every request still owed a response, from
 * the one holding PSN from onwards, in SQ order. A WRITE resends from the packet of from on
 * (the responder ACKs what it has seen again), a READ re-requests from its first missing
 * response, an atomic goes again whole (the responder answers a duplicate from its saved
 * result). A WQE that can no longer be read or gathered fails with its syndrome.
 */
void EmuDataPath::rc_resend(const DmaSection &dma, Qp &qp, uint32_t from)
{
	RcWire &r = *qp.rc;
	uint8_t wqe[kMaxWqeBytes + prm::wq::wqebb_size];
	for (uint32_t i = r.head; i != r.tail; i++) {
		RcWire::Pending &e = r.at(i);
		if (e.done || e.npsn == 0)
			continue;
		const int32_t into = psn_diff(from, e.first_psn);
		if (into >= static_cast<int32_t>(e.npsn))
			continue; /* wholly before from: acknowledged already */
		uint32_t k0 = into > 0 ? static_cast<uint32_t>(into) : 0;
		if (e.opcode == MLX5_OPCODE_RDMA_READ)
			k0 = std::max(k0, e.got);
		else if (e.opcode != MLX5_OPCODE_RDMA_WRITE)
			k0 = 0;
		size_t wlen = 0;
		uint8_t s = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		if (read_wqe(dma, qp.attr, e.index, wqe, &wlen)) {
			Exec ex{*this, dma, qp, wqe, wlen, parse_ctrl(wqe)};
			s = ex.wire_resend(e.first_psn, k0);
		}
		if (s != kOk) {
			e.done = true;
			e.syndrome = s;
			r.halted = true;
			break;
		}
		const uint32_t sent = e.opcode == MLX5_OPCODE_RDMA_WRITE ? e.npsn - k0 : 1;
		wctr_.retransmits.fetch_add(sent, std::memory_order_relaxed);
	}
}

/* The oldest owed request completes with syndrome (a retry counter exceeded): the QP to ERR,
 * the rest flushed (as Linux rxe_comp.c, rxe_completer, ends COMPST_ERROR_RETRY and
 * COMPST_RNR_RETRY with no retry left). */
void EmuDataPath::rc_give_up(const DmaSection &dma, Qp &qp, uint8_t syndrome)
{
	RcWire &r = *qp.rc;
	if (RcWire::Pending *e = r.oldest_owed()) {
		e->done = true;
		e->syndrome = syndrome;
		wctr_.retry_exceeded.fetch_add(1, std::memory_order_relaxed);
	}
	r.deadline_ns = 0;
	r.arm = false;
	r.rnr_wait = false;
	rc_retire(dma, qp);
	if (qp.get_state() == QpState::err)
		run_sq(dma, qp); /* flush what is posted behind it */
}

/*
 * The requester's timers at the progress turn's clock (the turn reads it once). The local
 * ACK timer runs while a request is owed a response: 4.096 us * 2^ack_timeout from the
 * request that started it or the last progress (IBTA vol. 1, 9.7.6; ack_timeout 0: it never
 * expires). On expiry the requester resends from the oldest unacknowledged PSN and counts a
 * retry; with no retry left the request completes with TRANSPORT_RETRY_EXC_ERR (0x15). An RNR
 * NAK's wait runs instead of it.
 */
void EmuDataPath::rc_timers(const DmaSection &dma, Qp &qp, uint64_t now)
{
	RcWire &r = *qp.rc;
	if (qp.get_state() != QpState::rts || r.oldest_owed() == nullptr) {
		r.deadline_ns = 0;
		r.arm = false;
		r.rnr_wait = false;
		return;
	}
	const uint32_t to = qp.path.ack_timeout;
	const uint64_t timeout = to == 0 ? 0 : uint64_t{4096} << to;
	if (r.rnr_wait) {
		if (r.rnr_until_ns == 0)
			r.rnr_until_ns = now + uint64_t{r.rnr_us} * 1000;
		if (now < r.rnr_until_ns)
			return;
		r.rnr_wait = false;
		rc_resend(dma, qp, r.rnr_psn);
		r.deadline_ns = timeout == 0 ? 0 : now + timeout;
		rc_retire(dma, qp);
		if (qp.get_state() == QpState::err)
			run_sq(dma, qp);
		return;
	}
	if (r.arm) {
		r.arm = false;
		r.deadline_ns = timeout == 0 ? 0 : now + timeout;
		return;
	}
	if (r.deadline_ns == 0 || now < r.deadline_ns)
		return;
	wctr_.timeouts.fetch_add(1, std::memory_order_relaxed);
	if (r.retry_left == 0) {
		rc_give_up(dma, qp, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
		return;
	}
	r.retry_left--;
	r.seq_retried = false;
	r.gap_retried = false;
	rc_resend(dma, qp, r.oldest_owed()->resend_psn());
	r.deadline_ns = now + timeout;
	rc_retire(dma, qp);
	if (qp.get_state() == QpState::err)
		run_sq(dma, qp);
}

/* CQEs for the done entries at the head, in SQ order; a failed one moves the QP to ERR and
 * flushes the rest (then run_sq flushes what is still posted). */
void EmuDataPath::rc_retire(const DmaSection &dma, Qp &qp)
{
	RcWire &r = *qp.rc;
	while (r.head != r.tail) {
		RcWire::Pending &e = r.at(r.head);
		if (!e.done)
			return;
		r.head++;
		if (e.syndrome != kOk) {
			qp.set_state(QpState::err);
			complete(dma, qp, e.index, e.opcode, 0, e.syndrome);
			rc_flush(dma, qp);
			return;
		}
		if (e.opcode == MLX5_OPCODE_RDMA_WRITE || e.opcode == MLX5_OPCODE_RDMA_READ)
			bump(qp.n_bytes, e.byte_cnt);
		if (e.signaled)
			complete(dma, qp, e.index, e.opcode, e.byte_cnt, kOk);
	}
}

/* Every outstanding entry completes with WR_FLUSH_ERR (the QP is in ERR). */
void EmuDataPath::rc_flush(const DmaSection &dma, Qp &qp)
{
	RcWire &r = *qp.rc;
	while (r.head != r.tail) {
		const RcWire::Pending &e = r.at(r.head++);
		complete(dma, qp, e.index, e.opcode, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	}
	r.halted = false;
	r.w_active = false;
	r.s_active = false;
}

/* ---- Receive ----------------------------------------------------------------------------- */

template <typename ForEach>
void EmuDataPath::rc_batch(WirePort &w, uint32_t port, ForEach &&for_each, bool defer_acks)
{
	rx_batch_++; /* a new batch: the responders' READ/atomic resources are free */
	std::shared_lock lk(table_lock_);
	const DmaSection dma(mmu_);
	Qp *acks[kRxAcks];
	int nacks = 0;
	const uint64_t datagrams = for_each([&](std::span<const uint8_t> datagram,
						const sockaddr_storage &peer, const WireRxIp &ip) {
		rc_packet(dma, w, port, datagram, peer, ip, acks, &nacks);
	});
	wctr_.rx_packets.fetch_add(datagrams, std::memory_order_relaxed);
	/* ACK coalescing: one ACK per QP and batch, for the last PSN it executed; the batch's
	 * ACKs (QPs of one port) go out in one sendmmsg. poll_wire sends them at its next turn
	 * (rc_owed_acks): a caller that runs it sees what the batch wrote one sendmmsg sooner. */
	int from = 0;
	if (defer_acks) {
		int &n = nowed_acks_[port - 1];
		while (from < nacks && n < kRxAcks)
			owed_acks_[port - 1][n++] = acks[from++]->qpn;
		if (from == nacks)
			return; /* the batch returns true: the next turn comes at once */
	}
	TxBatch tx(*this, w);
	for (int i = from; i < nacks; i++) {
		std::lock_guard ql(acks[i]->lock);
		rc_owed_ack(*acks[i], &tx);
	}
}

void EmuDataPath::rc_owed_ack(Qp &qp, TxBatch *tx, bool lazy_too)
{
	RcWire *r = qp.rc.get();
	if (r == nullptr || !(r->ack_due || (lazy_too && r->lazy_ack)))
		return; /* reset since, or its ACK went (a NAK, a response) */
	r->ack_due = false;
	rc_ack(qp, roce::aeth::make_syndrome(roce::aeth::type::ack, roce::aeth::credit_invalid),
	       (r->epsn - 1) & kPsnMask, tx);
}

void EmuDataPath::rc_owed_acks(WirePort &w, uint32_t port)
{
	int &n = nowed_acks_[port - 1];
	if (n == 0)
		return;
	std::shared_lock lk(table_lock_);
	TxBatch tx(*this, w);
	for (int i = 0; i < n; i++) {
		Qp *qp = find_qp(owed_acks_[port - 1][i]);
		if (qp == nullptr)
			continue; /* destroyed since */
		std::lock_guard ql(qp->lock);
		rc_owed_ack(*qp, &tx);
	}
	n = 0;
}

/*
 * The requester's AckReq (IBTA vol. 1, 9.2: the BTH's AckReq bit asks the responder to
 * acknowledge the packet; without it the responder may coalesce). A ConnectX requester sets it
 * every 2^qpc.log_ack_req_freq packets (Linux's mlx5 FPGA connection sets 8,
 * drivers/net/ethernet/mellanox/mlx5/core/fpga/conn.c, mlx5_fpga_conn_rts_qp); here the last
 * packet of a message asks when 2^log_ack_req_freq packets went out since the last that
 * asked (0, the default: every message), when the WQE asks for a CQE (its completion waits for
 * the ACK), and when the send queue is half full of WQEs owed a response (their WQEBBs come
 * back with the ACK). READ and atomic requests always ask; resent messages too.
 */
bool EmuDataPath::Exec::ack_wanted(uint32_t n) noexcept
{
	RcWire &r = *qp.rc;
	r.unasked += n;
	const bool ask = (c.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0 ||
			 r.unasked >= (uint32_t{1} << qp.path.log_ack_req_freq) ||
			 2 * (r.outstanding() + 1) >= r.pend.size();
	if (ask)
		r.unasked = 0;
	return ask;
}

/*
 * A message that did not ask for an ACK still gets one: a responder acknowledges the requests
 * it executed (IBTA vol. 1, 9.7.5.1.1, as rc_owed_ack), so the requester's ACK timer must not
 * run out on them. The ACK goes a wait after the timer scan that first saw it owed, unless one
 * left before (any ACK covers every earlier PSN): an eighth of this QP's own local ACK timeout
 * (the peer's is not known here; both sides of a connection are usually set alike), at most
 * 1 ms, and 1 ms when it has none. A steady stream of messages that ask now and then never
 * waits for it.
 */
void EmuDataPath::rc_lazy_ack(Qp &qp, uint64_t now)
{
	RcWire &r = *qp.rc;
	if (!r.lazy_ack || r.ack_due)
		return; /* nothing owed, or an ACK leaves at the next turn anyway */
	if (r.lazy_since_ns == 0) {
		r.lazy_since_ns = now;
		return;
	}
	constexpr uint64_t kMaxNs = 1000000;
	const uint32_t to = qp.path.ack_timeout;
	const uint64_t wait = to == 0 ? kMaxNs : std::min(kMaxNs, (uint64_t{4096} << to) / 8);
	if (now - r.lazy_since_ns < wait)
		return;
	wctr_.lazy_acks.fetch_add(1, std::memory_order_relaxed);
	rc_ack(qp, roce::aeth::make_syndrome(roce::aeth::type::ack, roce::aeth::credit_invalid),
	       (r.epsn - 1) & kPsnMask);
}

/* The progress token's holder (the device thread or a polling caller): one batch per wire
 * port and call, after the ACKs the last one owes. */
bool EmuDataPath::poll_wire()
{
	bool any = false;
	/* The turn's one clock read: held datagrams and the QPs' timers. */
	const uint64_t now = mono_now_ns();
	for (uint32_t p = 0; p < wire_.size(); p++) {
		WirePort *w = wire_[p].get();
		if (w == nullptr)
			continue;
		rc_owed_acks(*w, p + 1);
		if (w->holding()) {
			if (const uint32_t errs = w->release_held(now); errs != 0)
				wctr_.tx_errors.fetch_add(errs, std::memory_order_relaxed);
			any = any || w->holding(); /* come back soon: they are due shortly */
		}
		const WireRx &rx = w->recv();
		if (rx.size() == 0)
			continue;
		any = true;
		rc_batch(
			*w, p + 1,
			[&rx](auto &&deliver) {
				uint64_t datagrams = 0;
				for (uint32_t m = 0; m < rx.size(); m++) {
					/* A message the kernel coalesced (UDP GRO) is its
					 * datagrams, each parsed and checked (ICRC included) as if
					 * it had come alone. */
					const GroSplit d = rx.datagrams(m);
					const uint32_t k = d.count();
					datagrams += k;
					for (uint32_t j = 0; j < k; j++)
						deliver(d[j], rx.peer(m), rx.ip(m));
				}
				return datagrams;
			},
			true);
	}
	/* The requesters' timers, every kTimerScanNs at most: the scan walks every QP. */
	if (now >= next_timer_scan_ns_) {
		next_timer_scan_ns_ = now + kTimerScanNs;
		std::shared_lock lk(table_lock_);
		const DmaSection dma(mmu_);
		for (const auto &[n, qp] : qps_) {
			if (!qp->rc)
				continue;
			std::lock_guard ql(qp->lock);
			if (qp->rc) {
				rc_lazy_ack(*qp, now);
				rc_timers(dma, *qp, now);
			}
		}
	}
	return any;
}

int EmuDataPath::wire_inject(uint32_t port, const uint8_t *buf, size_t len,
			     const sockaddr_storage &peer, const WireRxIp &ip)
{
	WirePort *w = port >= 1 && port <= wire_.size() ? wire_[port - 1].get() : nullptr;
	if (w == nullptr)
		return -ENODEV;
	rc_batch(
		*w, port,
		[&](auto &&deliver) {
			deliver(std::span<const uint8_t>(buf, len), peer, ip);
			return uint64_t{1};
		},
		false);
	return 0;
}

/* Table lock held shared. */
void EmuDataPath::rc_packet(const DmaSection &dma, const WirePort &w, uint32_t port,
			    std::span<const uint8_t> datagram, const sockaddr_storage &peer,
			    const WireRxIp &ip, Qp **acks, int *nacks)
{
	roce::Parsed pk;
	const roce::Error e = roce::parse(w.rx_path(peer, ip), datagram, &pk);
	if (e != roce::Error::ok) {
		(e == roce::Error::bad_icrc ? wctr_.rx_bad_icrc : wctr_.rx_malformed)
			.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	if (roce::is_ud(pk.opcode)) { /* a datagram: emu_mlx5_ud.cpp */
		ud_packet(dma, w, port, pk, w.rx_path(peer, ip), datagram.size());
		return;
	}
	const auto dqp = static_cast<uint32_t>(prm::get(pk.bth, roce::bth::dest_qp));
	Qp *qp = find_qp(dqp);
	/* Only the QP's own peer, on the QP's port, in the default partition (rxe checks the
	 * source address against the QP's path too). */
	if (qp == nullptr || !qp->rc || qp->path.port != port ||
	    qp->rc->remote != WirePort::gid_of(peer) ||
	    prm::get(pk.bth, roce::bth::p_key) != roce::default_p_key) {
		wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	std::lock_guard ql(qp->lock);
	if (!qp->rc) {
		wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	const bool response =
		pk.opcode >= op::read_response_first && pk.opcode <= op::atomic_acknowledge;
	if (response)
		rc_response(dma, *qp, pk);
	else
		rc_request(dma, *qp, pk, acks, nacks);
}

/* An RNR NAK for psn with the QP's minimum RNR timer (IBTA 9.7.5.2.8): nothing of the request
 * was executed, and the requester sends it again from psn once the timer has run. */
void EmuDataPath::rc_rnr_nak(Qp &qp, uint32_t psn)
{
	bump(qp.n_rnr);
	rc_ack(qp,
	       roce::aeth::make_syndrome(roce::aeth::type::rnr_nak,
					 static_cast<uint8_t>(qp.path.min_rnr_nak & 0x1f)),
	       psn);
}

void EmuDataPath::rc_ack(Qp &qp, uint8_t syndrome, uint32_t psn, TxBatch *tx)
{
	RcWire &r = *qp.rc;
	roce::Headers h;
	h.opcode = op::acknowledge;
	h.dest_qp = qp.path.remote_qpn;
	h.psn = psn & kPsnMask;
	h.aeth = {syndrome, r.msn & kPsnMask};
	uint8_t own[roce::max_header_length + roce::icrc_size];
	constexpr size_t room = sizeof(own);
	uint8_t *pkt = tx != nullptr ? tx->room(room) : own;
	size_t out = 0;
	if (roce::build(r.tx, h, {}, {pkt, room}, &out) != roce::Error::ok)
		return;
	if (tx != nullptr)
		tx->add(r.remote, out);
	else
		rc_send(r, pkt, out);
	const bool nak = roce::aeth::syndrome_type_of(syndrome) != roce::aeth::type::ack;
	(nak ? wctr_.naks_sent : wctr_.acks_sent).fetch_add(1, std::memory_order_relaxed);
	if (!nak) {
		/* An ACK acknowledges every PSN up to its own: nothing is owed lazily now. */
		r.lazy_ack = false;
		r.lazy_since_ns = 0;
	}
}

void EmuDataPath::rc_nak(const DmaSection &dma, Qp &qp, uint8_t code, uint32_t psn, uint8_t event)
{
	qp.rc->w_active = false;
	if (event != 0) {
		/* The responder side of the loopback does the same (emu_mlx5_wqe.cpp,
		 * responder_fail): the QP to ERR and its event. Both before the NAK leaves, so
		 * that a requester that has seen the NAK finds the responder in ERR already. */
		qp.set_state(QpState::err);
		post_event(dma, event, qp.qpn);
	}
	rc_ack(qp, roce::aeth::make_syndrome(roce::aeth::type::nak, code), psn);
}

/* READ responses for [va, va + len) of rkey, PSNs from psn; nothing when the key refuses the
 * range (a duplicate READ is checked again: the key may have changed since). A zero-length
 * READ checks no key and gets one READ RESPONSE ONLY without payload (C9-88). */
void EmuDataPath::rc_read_respond(const DmaSection &dma, Qp &qp, uint32_t psn, uint64_t va,
				  uint32_t rkey, uint32_t len)
{
	RcWire &r = *qp.rc;
	MkeyTable::Hold keys(mkeys_, qp.held);
	Translator t(keys, dma, qp.attr.pd, qp.qpn);
	if (len != 0 && t.validate(rkey, va, len, Access::remote_read) != kOk)
		return;
	const uint32_t n = packets_of(len, r.mtu);
	/* The responses in few system calls (a batch; GSO runs of MIDDLEs). */
	TxBatch tx(*this, *r.port);
	for (uint32_t k = 0; k < n; k++) {
		const uint64_t off = uint64_t{k} * r.mtu;
		const auto plen = static_cast<size_t>(std::min<uint64_t>(r.mtu, len - off));
		roce::Headers h;
		h.opcode = seq_opcode(k, n, op::read_response_first, op::read_response_middle,
				      op::read_response_last, op::read_response_only);
		h.dest_qp = qp.path.remote_qpn;
		h.psn = (psn + k) & kPsnMask;
		h.aeth = {roce::aeth::make_syndrome(roce::aeth::type::ack,
						    roce::aeth::credit_invalid),
			  r.msn & kPsnMask};
		const size_t room = roce::header_length(h.opcode) + plen + 3 + roce::icrc_size;
		uint8_t *pkt = tx.room(room);
		uint8_t *payload = pkt + roce::header_length(h.opcode);
		if (key_copy(dma, t, rkey, va + off, payload, plen, Access::remote_read, false) !=
		    kOk) {
			tx.discard();
			return; /* the memory went away under the request: the requester times out
				 */
		}
		size_t out = 0;
		if (roce::build(r.tx, h, {payload, plen}, {pkt, room}, &out) == roce::Error::ok)
			tx.add(r.remote, out);
	}
}

/* The responder: one request packet. QP lock held. */
void EmuDataPath::rc_request(const DmaSection &dma, Qp &qp, const roce::Parsed &pk, Qp **acks,
			     int *nacks)
{
	RcWire &r = *qp.rc;
	const QpState st = qp.get_state();
	if (st != QpState::rtr && st != QpState::rts) {
		wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	const auto psn = static_cast<uint32_t>(prm::get(pk.bth, roce::bth::psn));
	const int32_t d = psn_diff(psn, r.epsn);
	const auto owe_ack = [&] {
		for (int i = 0; i < *nacks; i++)
			if (acks[i] == &qp) {
				r.ack_due = true;
				return;
			}
		if (*nacks == kRxAcks) {
			/* More QPs in this batch than the list holds (a batch of coalesced
			 * messages): this one's ACK goes now, for the PSN just executed. */
			rc_ack(qp,
			       roce::aeth::make_syndrome(roce::aeth::type::ack,
							 roce::aeth::credit_invalid),
			       (r.epsn - 1) & kPsnMask);
			return;
		}
		r.ack_due = true;
		acks[(*nacks)++] = &qp;
	};
	if (d > 0) {
		/* A PSN beyond the expected one: something was lost. One NAK per gap (IBTA
		 * 9.7.5.1.2); the rest of the gap is dropped. */
		if (!r.nak_sent) {
			r.nak_sent = true;
			rc_ack(qp,
			       roce::aeth::make_syndrome(roce::aeth::type::nak,
							 roce::aeth::nak::psn_seq_error),
			       r.epsn);
		}
		wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	if (d < 0) {
		/* A duplicate (IBTA 9.7.5.1.1): answered, never executed again. A READ is
		 * answered from memory again, an atomic from its saved result, the rest with an
		 * ACK. */
		wctr_.duplicates.fetch_add(1, std::memory_order_relaxed);
		if (pk.opcode == op::read_request) {
			rc_read_respond(
				dma, qp, psn, prm::get(pk.reth, roce::reth::va),
				static_cast<uint32_t>(prm::get(pk.reth, roce::reth::r_key)),
				static_cast<uint32_t>(prm::get(pk.reth, roce::reth::dma_len)));
		} else if (pk.opcode == op::compare_swap || pk.opcode == op::fetch_add) {
			/* From the saved results (the last 2^log_rra_max atomics); one older
			 * than those is not answered (the requester retries, then gives up). */
			const RcWire::SavedAtomic *saved = nullptr;
			for (const RcWire::SavedAtomic &a : r.atomics)
				if (a.valid && a.psn == psn)
					saved = &a;
			if (saved == nullptr) {
				wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
				return;
			}
			roce::Headers h;
			h.opcode = op::atomic_acknowledge;
			h.dest_qp = qp.path.remote_qpn;
			h.psn = psn;
			h.aeth = {roce::aeth::make_syndrome(roce::aeth::type::ack,
							    roce::aeth::credit_invalid),
				  r.msn & kPsnMask};
			h.atomic_orig = saved->orig;
			(void)rc_send_headers(r, h);
		} else {
			owe_ack();
		}
		return;
	}
	r.nak_sent = false;
	/* The RETH's DMA length above the device's message size (2^log_max_msg, what
	 * HCA_CAP.log_max_msg advertises) is an invalid request before any key is looked at
	 * (IBTA C9-94; Linux rxe_resp.c, rxe_resp_check_length, refuses above its 2^31). */
	const auto max_msg = [&] { return uint64_t{1} << cfg_.log_max_msg; };
	const auto invalid = [&] {
		rc_nak(dma, qp, roce::aeth::nak::invalid_request, psn,
		       prm::event_type::wq_inval_req_error);
	};
	/*
	 * The responder's resources for READ and atomic requests (IBTA vol. 1: the responder
	 * resources a QP offers, max_dest_rd_atomic in verbs; the qpc's log_rra_max, set at
	 * INIT2RTR: Linux mlx5 qp.c maps IB_QP_MAX_DEST_RD_ATOMIC to MLX5_QP_OPTPAR_RRA_MAX). A
	 * request takes one from its arrival until its response has left; here a response leaves
	 * while the receive batch that brought the request is processed, so the requests that wait
	 * together are the new ones of one batch. A requester that keeps its own limit (log_sra_max
	 * <= the responder's log_rra_max) can never put more than 2^log_rra_max of them in one
	 * batch: request N + 1 goes only once the response to request 1 arrived, which leaves after
	 * the whole batch was received. (A port whose batch adapts, WirePortConfig::rx_batch 0,
	 * may take a burst one request at a time and answer each before it sees the next: that
	 * responder never runs short, and only a fixed batch sees a burst together.) One more
	 * is the error IBTA's responder error behaviour (vol. 1, chapter 9, responder class B
	 * errors) calls "too many RDMA READ or ATOMIC requests": an Invalid Request NAK (NAK
	 * code 1, 9.7.5.2.4's table of NAK codes), nothing executed, the QP to ERR (as a
	 * ConnectX does: spdk/spdk issue 2261 shows the NAK on the ninth READ against eight
	 * resources; Linux rxe, rxe_resp.c check_resource, NAKs only with no resource at all and
	 * otherwise recycles its queue). Duplicates replay a resource and take none.
	 */
	const auto no_resource = [&] {
		if (r.rra_batch != rx_batch_) {
			r.rra_batch = rx_batch_;
			r.rra_used = 0;
		}
		if (r.rra_used >= (uint32_t{1} << qp.path.log_rra_max)) {
			wctr_.rra_exceeded.fetch_add(1, std::memory_order_relaxed);
			invalid();
			return true;
		}
		r.rra_used++;
		return false;
	};
	/* A key of this device refused the request: NAKed, counted under (key, peer). */
	const auto refused = [&](uint32_t rkey, uint32_t rights) {
		record_refusal(qp, rkey, rights);
		rc_nak(dma, qp, roce::aeth::nak::remote_access_error, psn,
		       prm::event_type::wq_access_error);
	};
	/* On-demand paging (emu_mlx5_odp.cpp): while the page fault of the request at epsn is
	 * out, every retry gets an RNR NAK again; once it was resumed with an error, the retry
	 * is refused (a remote access error NAK, the QP to ERR) and nothing is written. */
	if (qp.rpf == Qp::Pf::pending) {
		rc_rnr_nak(qp, psn);
		return;
	}
	const bool fault_failed = qp.rpf == Qp::Pf::failed;
	qp.rpf = Qp::Pf::none;
	if (fault_failed && qp.rpf_recv) {
		/* A receive WQE's fault (emu_mlx5_odp.cpp): the receive completes in error, the
		 * retry is NAKed as a receive key refused without on-demand paging. */
		qp.rpf_recv = false;
		rc_ack(qp,
		       roce::aeth::make_syndrome(roce::aeth::type::nak,
						 roce::aeth::nak::remote_operational_error),
		       psn);
		recv_fault_failed(dma, qp, qp.rpf_recv_syndrome);
		return;
	}
	qp.rpf_recv = false;
	if (fault_failed) {
		/* The key admitted it; its memory is gone: not a refusal of the key. */
		rc_nak(dma, qp, roce::aeth::nak::remote_access_error, psn,
		       prm::event_type::wq_access_error);
		return;
	}
	const uint8_t o = pk.opcode;
	if (is_write(o)) {
		const size_t plen = pk.payload.size();
		const bool first =
			o == op::write_first || o == op::write_only || o == op::write_only_imm;
		const bool last = o != op::write_first && o != op::write_middle;
		const bool imm = o == op::write_last_imm || o == op::write_only_imm;
		if (!qp.path.rwe || (imm && !qp.attr.receives()) || r.s_active) {
			invalid(); /* writes not enabled; an immediate needs a receive queue; or
				      inside a SEND */
			return;
		}
		if (first) {
			if (r.w_active) {
				invalid(); /* the previous message did not end */
				return;
			}
			if (prm::get(pk.reth, roce::reth::dma_len) > max_msg()) {
				invalid(); /* longer than a message may be (C9-94) */
				return;
			}
			r.w_va = prm::get(pk.reth, roce::reth::va);
			r.w_rkey = static_cast<uint32_t>(prm::get(pk.reth, roce::reth::r_key));
			r.w_left = prm::get(pk.reth, roce::reth::dma_len);
			r.w_total = r.w_left;
		} else if (!r.w_active) {
			invalid();
			return;
		}
		/* FIRST and MIDDLE carry exactly one MTU, LAST and ONLY the rest (9.7.6.1.3). */
		if ((!last && (plen != r.mtu || r.w_left <= r.mtu)) || (last && plen != r.w_left) ||
		    plen > r.mtu) {
			invalid();
			return;
		}
		/* The RQ's lock before the keys (emu_mlx5_recv.cpp: rq_lock nests outside a WQE's
		 * mkey slots). */
		std::unique_lock<SpinLock> rl(qp.rq_lock, std::defer_lock);
		if (imm)
			rl.lock();
		MkeyTable::Hold keys(mkeys_, qp.held);
		Translator t(keys, dma, qp.attr.pd, qp.qpn);
		uint64_t counter = 0;
		if (first && r.w_left == 0) {
			/* A zero-length WRITE, with or without immediate: no key or address is
			 * checked (IBTA 9.7.4.1.4: a zero-length RDMA WRITE touches no memory;
			 * C9-88: it need not carry a valid R_Key or VA; Linux rxe_resp.c,
			 * check_rkey, executes it without a lookup). */
		} else if (first) {
			/* The whole message's range, before one byte moves; a page not present
			 * raises a page fault and this packet waits (RNR NAK). */
			if (cfg_.odp)
				t.report_not_present();
			const uint8_t v =
				t.validate(r.w_rkey, r.w_va, r.w_left, Access::remote_write);
			if (v == kNotPresent &&
			    rc_fault(dma, qp, psn, r.w_rkey, r.w_va, r.w_left, true))
				return;
			if (v != kOk ||
			    !ext_admits(keys.find(prm::mkey::index(r.w_rkey)), true, &counter)) {
				refused(r.w_rkey, KeyRefusal::write);
				return;
			}
		} else if (t.validate(r.w_rkey, r.w_va, plen, Access::remote_write) != kOk) {
			/* the key changed between the packets of the message */
			refused(r.w_rkey, KeyRefusal::write);
			return;
		}
		/* With an immediate, the last packet takes a receive WQE before its bytes land
		 * (emu_mlx5_recv.cpp; none: an RNR NAK, this packet not executed). */
		RecvWqe rw;
		if (imm) {
			const RqTake got = rq_take(dma, qp, &rw);
			if (got == RqTake::empty) {
				rc_rnr_nak(qp, psn);
				r.w_active = !first; /* FIRST ... still waits for its LAST */
				return;
			}
			if (got == RqTake::fault) {
				rc_ack(qp,
				       roce::aeth::make_syndrome(
					       roce::aeth::type::nak,
					       roce::aeth::nak::remote_operational_error),
				       psn);
				r.w_active = false;
				qp.set_state(QpState::err);
				rq_flush(dma, qp);
				return;
			}
		}
		if (plen != 0 &&
		    key_copy(dma, t, r.w_rkey, r.w_va, const_cast<uint8_t *>(pk.payload.data()),
			     plen, Access::remote_write, true) != kOk) {
			refused(r.w_rkey, KeyRefusal::write);
			if (imm)
				rq_fail(dma, qp, rw.index, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
			return;
		}
		r.w_va += plen;
		r.w_left -= plen;
		r.w_active = !last;
		r.epsn = (r.epsn + 1) & kPsnMask;
		if (first)
			r.w_counter = counter;
		if (last) {
			r.msn = (r.msn + 1) & kPsnMask;
			ext_count(dma, r.w_counter); /* the message is complete: count it */
		}
		if (imm)
			rq_complete(dma, qp, rw.index, MLX5_CQE_RESP_WR_IMM,
				    static_cast<uint32_t>(r.w_total),
				    static_cast<uint32_t>(prm::get(pk.immdt, roce::immdt::imm)),
				    kOk);
		/* An ACK for AckReq; a last packet without it (the requester's log_ack_req_freq)
		 * gets a lazy one from the timer scan (rc_lazy_ack). */
		if (prm::get(pk.bth, roce::bth::ack_req) != 0)
			owe_ack();
		else if (last)
			r.lazy_ack = true;
		return;
	}
	if (r.w_active) {
		invalid(); /* a new request inside an unfinished WRITE */
		return;
	}
	if (is_send(o)) {
		bool ack = false;
		rc_recv_send(dma, qp, pk, psn, &ack); /* emu_mlx5_recv.cpp */
		if (ack)
			owe_ack();
		return;
	}
	if (r.s_active) {
		invalid(); /* a new request inside an unfinished SEND */
		return;
	}
	if (o == op::read_request) {
		if (!qp.path.rre) {
			invalid();
			return;
		}
		if (no_resource())
			return;
		const uint64_t va = prm::get(pk.reth, roce::reth::va);
		const auto rkey = static_cast<uint32_t>(prm::get(pk.reth, roce::reth::r_key));
		const auto dlen = static_cast<uint32_t>(prm::get(pk.reth, roce::reth::dma_len));
		if (dlen > max_msg()) {
			invalid(); /* longer than a message may be (C9-94) */
			return;
		}
		{
			MkeyTable::Hold keys(mkeys_, qp.held);
			Translator t(keys, dma, qp.attr.pd, qp.qpn);
			uint64_t no_counter = 0; /* reads are not counted */
			if (cfg_.odp)
				t.report_not_present();
			/* A zero-length READ touches no memory: no key or address is checked
			 * (C9-88, as for a zero-length WRITE; Linux rxe_resp.c, check_rkey), and
			 * one READ RESPONSE ONLY without payload answers it. */
			const uint8_t v =
				dlen == 0 ? kOk : t.validate(rkey, va, dlen, Access::remote_read);
			if (v == kNotPresent && rc_fault(dma, qp, psn, rkey, va, dlen, false))
				return;
			if (v != kOk || (dlen != 0 && !ext_admits(keys.find(prm::mkey::index(rkey)),
								  false, &no_counter))) {
				refused(rkey, KeyRefusal::read);
				return;
			}
		}
		r.msn = (r.msn + 1) & kPsnMask;
		rc_read_respond(dma, qp, psn, va, rkey, dlen);
		r.epsn = (r.epsn + packets_of(dlen, r.mtu)) & kPsnMask;
		return;
	}
	if (o == op::compare_swap || o == op::fetch_add) {
		const uint64_t va = prm::get(pk.atomic_eth, roce::atomic_eth::va);
		const auto rkey =
			static_cast<uint32_t>(prm::get(pk.atomic_eth, roce::atomic_eth::r_key));
		const uint64_t swap_add = prm::get(pk.atomic_eth, roce::atomic_eth::swap_add);
		const uint64_t compare = prm::get(pk.atomic_eth, roce::atomic_eth::compare);
		/* Naturally aligned 8-byte targets only: an invalid request otherwise, as the
		 * loopback's responder answers it. */
		if (!qp.path.rae || va % 8 != 0) {
			invalid();
			return;
		}
		if (no_resource())
			return;
		MkeyTable::Hold keys(mkeys_, qp.held);
		Translator t(keys, dma, qp.attr.pd, qp.qpn);
		uint64_t counter = 0;
		IovaRun run;
		if (cfg_.odp)
			t.report_not_present();
		const uint8_t v = t.validate(rkey, va, 8, Access::remote_atomic);
		if (v == kNotPresent && rc_fault(dma, qp, psn, rkey, va, 8, true))
			return;
		if (v != kOk || !ext_admits(keys.find(prm::mkey::index(rkey)), true, &counter) ||
		    t.resolve(rkey, va, 8, Access::remote_atomic, &run) != kOk) {
			refused(rkey, KeyRefusal::atomic);
			return;
		}
		void *cellp = run.iova % 8 == 0 ? dma.host(run.iova, 8) : nullptr;
		if (cellp == nullptr) {
			invalid();
			return;
		}
		/* The word in the byte order of atomic_req_8B_endianness_mode, as on the loopback
		 * (emu_mlx5_wqe.cpp, atomic); the AtomicETH operands and the value returned are
		 * numbers, big-endian on the wire. */
		const bool host = atomic_host_endianness();
		std::atomic_ref<uint64_t> cell(*static_cast<uint64_t *>(cellp));
		uint64_t old_raw = cell.load(std::memory_order_relaxed);
		uint64_t old = 0;
		for (;;) {
			old = host ? old_raw : be64toh(old_raw);
			const bool cs = o == op::compare_swap;
			const uint64_t nv = cs ? (old == compare ? swap_add : old) : old + swap_add;
			if (cs && nv == old)
				break;
			if (cell.compare_exchange_weak(old_raw, host ? nv : htobe64(nv),
						       std::memory_order_acq_rel,
						       std::memory_order_relaxed))
				break;
		}
		ext_count(dma, counter);
		r.msn = (r.msn + 1) & kPsnMask;
		r.epsn = (r.epsn + 1) & kPsnMask;
		r.atomics[r.atomic_next++ & (r.atomics.size() - 1)] = {true, psn, old};
		roce::Headers h;
		h.opcode = op::atomic_acknowledge;
		h.dest_qp = qp.path.remote_qpn;
		h.psn = psn;
		h.aeth = {roce::aeth::make_syndrome(roce::aeth::type::ack,
						    roce::aeth::credit_invalid),
			  r.msn};
		h.atomic_orig = old;
		(void)rc_send_headers(r, h);
		return;
	}
	invalid(); /* an opcode RC does not carry here */
}

/* The requester: one response packet. QP lock held. */
void EmuDataPath::rc_response(const DmaSection &dma, Qp &qp, const roce::Parsed &pk)
{
	RcWire &r = *qp.rc;
	if (qp.get_state() != QpState::rts) {
		wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	const auto psn = static_cast<uint32_t>(prm::get(pk.bth, roce::bth::psn));
	/* A response for a PSN not sent yet (a stale one of an earlier connection): ignored. */
	if (psn_diff(psn, r.next_psn) >= 0) {
		wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	/* Progress (IBTA 9.7.6.1.1): the oldest owed request, or a READ's responses, moved on. */
	const RcWire::Pending *owed_before = r.oldest_owed();
	const uint32_t got_before = owed_before != nullptr ? owed_before->got : 0;
	bool rnr_counted = false; /* an RNR NAK took its retry after the progress it made */
	/* Outstanding WRITEs whose last PSN is before (or, with an ACK, at) psn are done: an
	 * ACK and every response acknowledge what came before them (IBTA 9.7.5.1.3). The
	 * entry psn falls in is returned (or null). */
	const auto settle = [&]() -> RcWire::Pending * {
		for (uint32_t i = r.head; i != r.tail; i++) {
			RcWire::Pending &e = r.at(i);
			if (e.done)
				continue;
			const int32_t from = psn_diff(psn, e.first_psn);
			if (from >= 0 && from < static_cast<int32_t>(e.npsn))
				return &e;
			if (from < 0)
				return nullptr;
			if (!acked_kind(e.opcode))
				return nullptr; /* a READ or atomic still owes its response */
			e.done = true;
		}
		return nullptr;
	};
	uint8_t wqe[kMaxWqeBytes + prm::wq::wqebb_size];
	size_t wlen = 0;
	if (pk.opcode == op::acknowledge) {
		const auto syn = static_cast<uint8_t>(prm::get(pk.aeth, roce::aeth::syndrome));
		const uint8_t type = roce::aeth::syndrome_type_of(syn);
		RcWire::Pending *e = settle();
		if (type == roce::aeth::type::ack) {
			/* The ACK's own PSN: a WRITE ending there is done too. */
			if (e != nullptr && acked_kind(e->opcode) &&
			    psn_diff(psn, e->first_psn) == static_cast<int32_t>(e->npsn) - 1)
				e->done = true;
		} else if (e != nullptr && type == roce::aeth::type::rnr_nak) {
			/* RNR NAK (IBTA 9.7.5.2.8): wait the NAK's timer, then resend from its
			 * PSN; rnr_retry 7 retries without end (IBTA; rxe_comp.c does the same). */
			wctr_.rnr_naks_received.fetch_add(1, std::memory_order_relaxed);
			if (r.oldest_owed() != owed_before) {
				r.retry_left = qp.path.retry_count; /* progress first */
				r.rnr_left = qp.path.rnr_retry;
			}
			rnr_counted = true;
			if (r.rnr_left == 0) {
				rc_give_up(dma, qp, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
				return;
			}
			if (r.rnr_left != 7)
				r.rnr_left--;
			r.rnr_wait = true;
			r.rnr_psn = psn;
			r.rnr_us = roce::aeth::rnr_timer_us(roce::aeth::syndrome_value_of(syn));
			r.rnr_until_ns = 0;
			r.deadline_ns = 0;
			r.arm = false;
		} else if (e != nullptr &&
			   roce::aeth::syndrome_value_of(syn) == roce::aeth::nak::psn_seq_error) {
			/* The responder lost something before psn: it acknowledged
			 * everything before psn; resend from psn, once per NAK (a duplicated NAK
			 * is not a second error), counting a retry. */
			if (!r.seq_retried || r.seq_psn != psn) {
				wctr_.seq_naks_received.fetch_add(1, std::memory_order_relaxed);
				if (r.oldest_owed() != owed_before) {
					r.retry_left = qp.path.retry_count; /* progress first */
					r.rnr_left = qp.path.rnr_retry;
				}
				if (r.retry_left == 0) {
					rc_give_up(dma, qp,
						   MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
					return;
				}
				r.retry_left--;
				r.seq_retried = true;
				r.seq_psn = psn;
				rc_resend(dma, qp, psn);
				r.arm = true;
				r.deadline_ns = 0;
				rc_retire(dma, qp);
				if (qp.get_state() == QpState::err)
					run_sq(dma, qp);
				return;
			}
		} else if (e != nullptr) {
			wctr_.naks_received.fetch_add(1, std::memory_order_relaxed);
			e->done = true;
			e->syndrome = nak_syndrome(roce::aeth::syndrome_value_of(syn));
		}
	} else if (pk.opcode == op::atomic_acknowledge) {
		RcWire::Pending *e = settle();
		if (e == nullptr ||
		    (e->opcode != MLX5_OPCODE_ATOMIC_CS && e->opcode != MLX5_OPCODE_ATOMIC_FA)) {
			wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
			return;
		}
		e->done = true;
		if (!read_wqe(dma, qp.attr, e->index, wqe, &wlen) ||
		    wlen < kCtrl + kRaddr + kAtomic + kData) {
			e->syndrome = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		} else {
			const DataSeg d = parse_data(wqe + kCtrl + kRaddr + kAtomic);
			const uint64_t orig =
				prm::get(pk.atomic_ack_eth, roce::atomic_ack_eth::orig_data);
			/* The old value lands in the byte order of the requester's atomic mode. */
			uint64_t raw = atomic_host_endianness() ? orig : htobe64(orig);
			MkeyTable::Hold keys(mkeys_, qp.held);
			Translator local(keys, dma, qp.attr.pd, qp.qpn);
			e->syndrome =
				sge_copy(dma, local, &d, 1, 0, reinterpret_cast<uint8_t *>(&raw), 8,
					 Access::local_write, true);
		}
	} else {
		/* READ RESPONSE FIRST / MIDDLE / LAST / ONLY. */
		RcWire::Pending *e = settle();
		if (e == nullptr || e->opcode != MLX5_OPCODE_RDMA_READ ||
		    psn_diff(psn, e->first_psn) != static_cast<int32_t>(e->got)) {
			wctr_.rx_dropped.fetch_add(1, std::memory_order_relaxed);
			/* A response beyond the next one expected: one was lost. Re-request
			 * from it at once, once per gap (Linux rxe_comp.c, check_psn, retries
			 * a READ whose response PSN jumps ahead too); a duplicate is dropped. */
			if (e != nullptr && e->opcode == MLX5_OPCODE_RDMA_READ &&
			    psn_diff(psn, e->first_psn) > static_cast<int32_t>(e->got) &&
			    (!r.gap_retried || r.gap_psn != e->resend_psn())) {
				r.gap_retried = true;
				r.gap_psn = e->resend_psn();
				rc_resend(dma, qp, r.gap_psn);
				r.arm = true;
				r.deadline_ns = 0;
			}
			rc_retire(dma, qp);
			if (qp.get_state() == QpState::err)
				run_sq(dma, qp);
			return;
		}
		/* A re-requested READ's responses start again with FIRST (or ONLY): IBTA
		 * vol. 1, 9.7.6: the responder answers the re-request as a READ of its own). */
		const uint8_t want = seq_opcode(e->got, e->npsn, op::read_response_first,
						op::read_response_middle, op::read_response_last,
						op::read_response_only);
		const uint8_t restart =
			e->got + 1 == e->npsn ? op::read_response_only : op::read_response_first;
		const uint64_t off = uint64_t{e->got} * r.mtu;
		const uint64_t expect = std::min<uint64_t>(r.mtu, e->byte_cnt - off);
		if ((pk.opcode != want && (e->got == 0 || pk.opcode != restart)) ||
		    pk.payload.size() != expect) {
			e->done = true;
			e->syndrome = MLX5_CQE_SYNDROME_BAD_RESP_ERR;
		} else if (!read_wqe(dma, qp.attr, e->index, wqe, &wlen)) {
			e->done = true;
			e->syndrome = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		} else {
			DataSeg segs[kMaxWqeBytes / kData];
			size_t nseg = 0;
			for (size_t at = kCtrl + kRaddr; at + kData <= wlen; at += kData)
				segs[nseg++] = parse_data(wqe + at);
			MkeyTable::Hold keys(mkeys_, qp.held);
			Translator local(keys, dma, qp.attr.pd, qp.qpn);
			const uint8_t s = sge_copy(dma, local, segs, nseg, off,
						   const_cast<uint8_t *>(pk.payload.data()),
						   pk.payload.size(), Access::local_write, true);
			e->got++;
			if (s != kOk || e->got == e->npsn) {
				e->done = true;
				e->syndrome = s;
			}
		}
	}
	const RcWire::Pending *owed_after = r.oldest_owed();
	if (owed_after != owed_before || (owed_after != nullptr && owed_after->got != got_before)) {
		/* Progress: fresh retry counters, and the timer restarts (at the next turn). */
		if (!rnr_counted) {
			r.retry_left = qp.path.retry_count;
			r.rnr_left = qp.path.rnr_retry;
		}
		r.seq_retried = false;
		r.gap_retried = false;
		r.deadline_ns = 0;
		r.arm = owed_after != nullptr && !r.rnr_wait;
	}
	rc_retire(dma, qp);
	if (qp.get_state() == QpState::err || r.deferred) {
		/* Flush what is posted behind a failed request, or send what waited. */
		r.deferred = false;
		run_sq(dma, qp);
	}
}

} // namespace nicmr::emu
