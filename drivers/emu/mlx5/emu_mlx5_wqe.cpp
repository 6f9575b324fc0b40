/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The WQE engine of the mlx5 device model: takes a QP's posted send WQEs off its SQ, executes
 * them against the looped-back responder and writes CQEs (and the responder's async events).
 *
 *   SQ slot ci & mask: ctrl (16 B) | segments ...        (ds 16-byte units, up to 16 WQEBBs,
 *                                                          wrapping to the SQ's start)
 *   NOP 0x00           ctrl
 *   RDMA_WRITE 0x08    ctrl | raddr | data segs, or one inline seg (byte_count | INLINE, data)
 *   RDMA_READ 0x10     ctrl | raddr | data segs
 *   ATOMIC_CS/FA 0x11/0x12  ctrl | raddr | atomic seg | one 8-byte data seg (the old value)
 *   LOCAL_INVAL 0x1b (and 0x01)  ctrl (imm = mkey)
 *   UMR 0x25           ctrl (imm = mkey) | umr ctrl seg | mkey context seg | translations
 *                      inline (INLINE, padded to 64 B) or one data seg (IOVA, the reserved
 *                      lkey of QUERY_SPECIAL_CONTEXTS); only on a QP created with fre
 *
 * Every check happens before the first byte moves: the whole gather list, the whole remote
 * range and every translation on the way are validated with the keys held through one
 * MkeyTable::Hold, and the copy runs before the Hold ends (a UMR cannot change one of those keys
 * in between; UMRs of other keys go ahead). All DMA of a doorbell goes through one DmaSection.
 * A failed WQE completes with REQ_ERR and its syndrome, the QP moves to ERR and every later WQE
 * completes with WR_FLUSH_ERR. Data moves IOVA run to IOVA run (EmuIommu::dma_copy), so a
 * transfer over contiguous pages is one memmove.
 *
 * Device hot path: no allocation (UMR by pointer reuses the QP's scratch buffer, many keys the
 * QP's held vector; both only grow), no system call (spin-lock waiters yield under contention);
 * locks as listed in emu_mlx5_dp.h.
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <iterator>

#include "emu_mlx5_dp_impl.h"
#include "emu_mlx5_translate.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;
using namespace wqe_fmt;

namespace {

/* The mkc fields a UMR's mkey_mask selects, in the context segment's (mkc) layout. */
struct MaskedField {
	uint64_t bit;
	prm::Field field;
};
constexpr MaskedField kUmrFields[] = {
	{prm::umr_mkey_mask::len, prm::mkc::len},
	{prm::umr_mkey_mask::len, prm::mkc::length64},
	{prm::umr_mkey_mask::page_size, prm::mkc::log_page_size},
	{prm::umr_mkey_mask::start_addr, prm::mkc::start_addr},
	{prm::umr_mkey_mask::pd, prm::mkc::pd},
	{prm::umr_mkey_mask::en_rinval, prm::mkc::en_rinval},
	{prm::umr_mkey_mask::key, prm::mkc::mkey_7_0},
	{prm::umr_mkey_mask::qpn, prm::mkc::qpn},
	{prm::umr_mkey_mask::lr, prm::mkc::lr},
	{prm::umr_mkey_mask::lw, prm::mkc::lw},
	{prm::umr_mkey_mask::rr, prm::mkc::rr},
	{prm::umr_mkey_mask::rw, prm::mkc::rw},
	{prm::umr_mkey_mask::a, prm::mkc::a},
	{prm::umr_mkey_mask::free, prm::mkc::free},
};

/* The bits of one mkc field, as a mask over the mkc's 64 raw (big-endian) bytes. */
struct MkcMask {
	uint8_t b[prm::mkc::size] = {};
};
constexpr MkcMask field_mask(prm::Field f)
{
	MkcMask m;
	for (uint32_t i = f.bit_off; i < f.bit_off + f.bits; i++)
		m.b[i / 8] = static_cast<uint8_t>(m.b[i / 8] | (0x80u >> (i % 8)));
	return m;
}
constexpr auto kUmrFieldMasks = [] {
	std::array<MkcMask, std::size(kUmrFields)> a{};
	for (size_t i = 0; i < std::size(kUmrFields); i++)
		a[i] = field_mask(kUmrFields[i].field);
	return a;
}();

} // namespace

/* The mkc bytes a UMR's mkey_mask selects, as eight 64-bit words over the raw bytes. */
static void mkc_byte_mask(uint64_t mkey_mask, uint64_t out[8]) noexcept
{
	uint8_t m[prm::mkc::size] = {};
	for (size_t i = 0; i < std::size(kUmrFields); i++)
		if ((mkey_mask & kUmrFields[i].bit) != 0)
			for (size_t j = 0; j < prm::mkc::size; j++)
				m[j] = static_cast<uint8_t>(m[j] | kUmrFieldMasks[i].b[j]);
	std::memcpy(out, m, sizeof(m));
}

/* Two cached masks: a UMR queue alternates bind and revoke. */
const uint64_t *EmuDataPath::Qp::umr_byte_mask(uint64_t mkey_mask) noexcept
{
	for (UmrMask &m : umr_masks)
		if (m.valid && m.of == mkey_mask)
			return m.bytes;
	UmrMask &m = umr_masks[umr_mask_next];
	umr_mask_next ^= 1;
	mkc_byte_mask(mkey_mask, m.bytes);
	m.of = mkey_mask;
	m.valid = true;
	return m.bytes;
}

/* The responder: the QP remote_qpn names, on the other port, naming this QP back; or the QP
 * itself when its remote_qpn is its own number (a QP looped back to itself, as RC allows). */
uint8_t EmuDataPath::Exec::connect(Access need, bool rights)
{
	Qp *r = dp.find_qp(qp.path.remote_qpn);
	if (r == nullptr || r->path.remote_qpn != qp.qpn ||
	    (r != &qp && r->path.port == qp.path.port))
		/* Nobody answers on the wire: the requester retries, then gives up. */
		return MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR;
	responder = r;
	const QpState s = r->get_state();
	if (s != QpState::rtr && s != QpState::rts)
		return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
	const bool ok = !rights || (need == Access::remote_read && r->path.rre) ||
			(need == Access::remote_write && r->path.rwe) ||
			(need == Access::remote_atomic && r->path.rae);
	if (!ok)
		return responder_fail(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
				      prm::event_type::wq_inval_req_error);
	return kOk;
}

/* A responder-side failure: the responder QP goes to ERR and raises its event. */
uint8_t EmuDataPath::Exec::responder_fail(uint8_t syndrome, uint8_t ev)
{
	if (responder != nullptr) {
		responder->set_state(QpState::err);
		event = ev;
	}
	return syndrome;
}

/* nicmr extensions of the responder's key (ext_admits): a refusal is a remote access error and
 * moves the responder to ERR, as a free key does. */
uint8_t EmuDataPath::Exec::ext_admit(MkeyTable::Hold &keys, uint32_t rkey, bool write,
				     uint64_t *counter)
{
	if (!ext_admits(keys.find(prm::mkey::index(rkey)), write, counter))
		return responder_fail(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
				      prm::event_type::wq_access_error);
	return kOk;
}

/* Data segments from byte offset first to the end of the WQE. */
uint8_t EmuDataPath::Exec::gather_list(DataSeg *segs, size_t *n, uint64_t *total, size_t first)
{
	*n = 0;
	*total = 0;
	for (size_t at = first; at + kData <= len; at += kData) {
		if (prm::get(w + at, prm::wqe_inline::inline_flag) != 0)
			return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		DataSeg d = parse_data(w + at);
		segs[(*n)++] = d;
		*total += d.bc;
	}
	/* The QP's largest message (qpc.log_msg_max, at most the device's log_max_msg). */
	if (*total > (uint64_t{1} << qp.path.log_msg_max))
		return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
	return kOk;
}

uint8_t EmuDataPath::Exec::copy(const Translator &st, uint32_t skey, uint64_t saddr, Access sa,
				const Translator &dt, uint32_t dkey, uint64_t daddr, Access da,
				uint64_t n)
{
	uint64_t done = 0;
	while (done < n) {
		IovaRun s, d;
		uint8_t syn = st.resolve(skey, saddr + done, n - done, sa, &s);
		if (syn == kOk)
			syn = dt.resolve(dkey, daddr + done, s.len, da, &d);
		if (syn != kOk)
			return syn;
		/* Validated before: a fault now means the driver unmapped memory under a
		 * running transfer. */
		if (dma.copy(d.iova, s.iova, d.len) < 0)
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		done += d.len;
	}
	return kOk;
}

/* The inline data or the gather list after the remote-address segment. */
uint8_t EmuDataPath::Exec::write_source(WriteSource *src)
{
	if (len < kCtrl + kRaddr + prm::wqe_inline::header_size)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	src->ra = parse_raddr(w + kCtrl);
	return message_source(kCtrl + kRaddr, src);
}

/* A message's bytes from seg_at on: one inline segment, or data segments to the WQE's end
 * (none: a zero-length message). */
uint8_t EmuDataPath::Exec::message_source(size_t seg_at, WriteSource *src)
{
	if (seg_at + prm::wqe_inline::header_size > len) {
		src->inl = false;
		src->nseg = 0;
		src->total = 0;
		return kOk;
	}
	src->inl = prm::get(w + seg_at, prm::wqe_inline::inline_flag) != 0;
	if (!src->inl)
		return gather_list(src->segs, &src->nseg, &src->total, seg_at);
	src->total = prm::get(w + seg_at, prm::wqe_inline::byte_count);
	if (seg_at + prm::wqe_inline::header_size + src->total > len ||
	    src->total > (uint64_t{1} << qp.path.log_msg_max))
		return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
	src->inl_data = w + seg_at + prm::wqe_inline::header_size;
	return kOk;
}

uint8_t EmuDataPath::Exec::rdma_write()
{
	WriteSource src;
	if (uint8_t s = write_source(&src); s != kOk)
		return s;
	const uint32_t pd = qp.attr.pd;
	MkeyTable::Hold keys(dp.mkeys_, qp.held);
	return [&]() -> uint8_t {
		Translator local(keys, dma, pd, qp.qpn);
		arm_faults(local);
		uint8_t s = validate_list(local, src.segs, src.nseg, Access::local_read);
		if (s != kOk)
			return local_fault(s, Access::local_read);
		s = connect(Access::remote_write);
		if (s != kOk)
			return s;
		Translator remote(keys, dma, responder->attr.pd, responder->qpn);
		arm_faults(remote);
		s = remote.validate(src.ra.rkey, src.ra.addr, src.total, Access::remote_write);
		if (s != kOk)
			return remote_fault(s, src.ra.rkey, src.ra.addr, src.total,
					    Access::remote_write);
		uint64_t counter = 0;
		s = ext_admit(keys, src.ra.rkey, true, &counter);
		if (s != kOk)
			return s;
		if (src.inl) {
			for (uint64_t done = 0; done < src.total;) {
				IovaRun d;
				s = remote.resolve(src.ra.rkey, src.ra.addr + done,
						   src.total - done, Access::remote_write, &d);
				if (s != kOk)
					return s;
				if (dma.write(d.iova, src.inl_data + done, d.len) < 0)
					return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
				done += d.len;
			}
		} else {
			uint64_t off = 0;
			for (size_t i = 0; i < src.nseg; i++) {
				s = copy(local, src.segs[i].lkey, src.segs[i].addr,
					 Access::local_read, remote, src.ra.rkey, src.ra.addr + off,
					 Access::remote_write, src.segs[i].bc);
				if (s != kOk)
					return s;
				off += src.segs[i].bc;
			}
		}
		ext_count(dma, counter);
		byte_cnt = static_cast<uint32_t>(src.total);
		return kOk;
	}();
}

uint8_t EmuDataPath::Exec::rdma_read()
{
	if (len < kCtrl + kRaddr)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	const Raddr ra = parse_raddr(w + kCtrl);
	DataSeg segs[kMaxWqeBytes / kData];
	size_t nseg = 0;
	uint64_t total = 0;
	uint8_t s = gather_list(segs, &nseg, &total, kCtrl + kRaddr);
	if (s != kOk)
		return s;
	const uint32_t pd = qp.attr.pd;
	MkeyTable::Hold keys(dp.mkeys_, qp.held);
	return [&]() -> uint8_t {
		Translator local(keys, dma, pd, qp.qpn);
		arm_faults(local);
		uint8_t r = validate_list(local, segs, nseg, Access::local_write);
		if (r != kOk)
			return local_fault(r, Access::local_write);
		r = connect(Access::remote_read);
		if (r != kOk)
			return r;
		Translator remote(keys, dma, responder->attr.pd, responder->qpn);
		arm_faults(remote);
		r = remote.validate(ra.rkey, ra.addr, total, Access::remote_read);
		if (r != kOk)
			return remote_fault(r, ra.rkey, ra.addr, total, Access::remote_read);
		uint64_t no_counter = 0; /* reads are not counted */
		r = ext_admit(keys, ra.rkey, false, &no_counter);
		if (r != kOk)
			return r;
		uint64_t off = 0;
		for (size_t i = 0; i < nseg; i++) {
			r = copy(remote, ra.rkey, ra.addr + off, Access::remote_read, local,
				 segs[i].lkey, segs[i].addr, Access::local_write, segs[i].bc);
			if (r != kOk)
				return r;
			off += segs[i].bc;
		}
		byte_cnt = static_cast<uint32_t>(total);
		return kOk;
	}();
}

uint8_t EmuDataPath::Exec::atomic()
{
	if (len < kCtrl + kRaddr + kAtomic + kData)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	const Raddr ra = parse_raddr(w + kCtrl);
	const uint64_t swap_add = prm::get(w + kCtrl + kRaddr, prm::wqe_atomic::swap_add);
	const uint64_t compare = prm::get(w + kCtrl + kRaddr, prm::wqe_atomic::compare);
	const DataSeg d = parse_data(w + kCtrl + kRaddr + kAtomic);
	if (d.bc != 8)
		return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
	const bool cs = c.opcode == MLX5_OPCODE_ATOMIC_CS;
	const uint32_t pd = qp.attr.pd;
	MkeyTable::Hold keys(dp.mkeys_, qp.held);
	return [&]() -> uint8_t {
		Translator local(keys, dma, pd, qp.qpn);
		arm_faults(local);
		uint8_t r = local.validate(d.lkey, d.addr, 8, Access::local_write);
		if (r != kOk)
			return local_fault(r, Access::local_write);
		r = connect(Access::remote_atomic);
		if (r != kOk)
			return r;
		/* ConnectX needs naturally aligned 8-byte atomics; the responder refuses the
		 * request as invalid, like an IB responder does. */
		if (ra.addr % 8 != 0)
			return responder_fail(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
					      prm::event_type::wq_inval_req_error);
		Translator remote(keys, dma, responder->attr.pd, responder->qpn);
		arm_faults(remote);
		r = remote.validate(ra.rkey, ra.addr, 8, Access::remote_atomic);
		if (r != kOk)
			return remote_fault(r, ra.rkey, ra.addr, 8, Access::remote_atomic);
		uint64_t counter = 0;
		r = ext_admit(keys, ra.rkey, true, &counter);
		if (r != kOk)
			return r;
		IovaRun t;
		r = remote.resolve(ra.rkey, ra.addr, 8, Access::remote_atomic, &t);
		if (r != kOk)
			return r;
		if (t.iova % 8 != 0)
			return responder_fail(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
					      prm::event_type::wq_inval_req_error);
		/* The word's byte order is the atomic caps' atomic_req_8B_endianness_mode: host
		 * endianness once the driver set it, else big-endian (power-on). The operands
		 * above are big-endian in the WQE either way. */
		const bool host = dp.atomic_host_endianness();
		uint64_t old_raw; /* the word as it lay in memory, in the mode's byte order */
		{
			void *cellp = dma.host(t.iova, 8);
			if (cellp == nullptr)
				return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
			/* Host mappings are page aligned, so the host address is 8-aligned too.
			 * Relaxed would do for the value; acq_rel orders this update against
			 * other QPs' atomics on the same word as a responder's would be. */
			std::atomic_ref<uint64_t> cell(*static_cast<uint64_t *>(cellp));
			old_raw = cell.load(std::memory_order_relaxed);
			for (;;) {
				const uint64_t old = host ? old_raw : be64toh(old_raw);
				uint64_t nv =
					cs ? (old == compare ? swap_add : old) : old + swap_add;
				if (nv == old && cs)
					break;
				if (cell.compare_exchange_weak(old_raw, host ? nv : htobe64(nv),
							       std::memory_order_acq_rel,
							       std::memory_order_relaxed))
					break;
			}
		}
		ext_count(dma, counter); /* the responder's side is done: the write completed */
		/* The old value into the local buffer, in the same byte order as the word. */
		IovaRun l;
		r = local.resolve(d.lkey, d.addr, 8, Access::local_write, &l);
		uint64_t done = 0;
		while (r == kOk && done < 8) {
			if (dma.write(l.iova, reinterpret_cast<uint8_t *>(&old_raw) + done, l.len) <
			    0)
				return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
			done += l.len;
			if (done < 8)
				r = local.resolve(d.lkey, d.addr + done, 8 - done,
						  Access::local_write, &l);
		}
		if (r != kOk)
			return r;
		byte_cnt = 8;
		return kOk;
	}();
}

uint8_t EmuDataPath::Exec::local_inval()
{
	const uint32_t key = c.imm;
	return dp.mkeys_.update(prm::mkey::index(key), [&](MkeyEntry *e) -> uint8_t {
		if (e == nullptr)
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		uint8_t *mkc = e->mkc.data();
		if (prm::get(mkc, prm::mkc::mkey_7_0) != prm::mkey::variant(key) ||
		    prm::get(mkc, prm::mkc::pd) != qp.attr.pd)
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		prm::set(mkc, prm::mkc::free, 1);
		e->ext.clear(); /* a revoke: the index never hands its extensions on */
		return kOk;
	});
}

/*
 * A UMR, checked as the Linux kernel's UMR path shows a ConnectX wants it (doc/device-model.md,
 * "UMR"): the QP was created with fre (qp.c, create_kernel_qp, sets it on every kernel QP);
 * mkey_mask sets no bit the umr_modify_*_disabled caps forbid (umr.c, umr_check_mkey_mask);
 * translations come in 64-byte units (umr.c, mlx5r_umr_get_xlt_octo); without INLINE a pointer
 * segment follows (umr.c, mlx5r_umr_set_umr_ctrl_seg sets INLINE exactly when none does), and
 * it carries the reserved lkey of QUERY_SPECIAL_CONTEXTS on a QP created with rlky; a free mkey
 * is enabled only from its own PD (the kernel keeps free mkeys in the UMR QP's PD: created there,
 * and mlx5r_umr_revoke_mr puts them back).
 */
uint8_t EmuDataPath::Exec::umr()
{
	/* Fault injection (EmuConfig::fail_umr): the Nth UMR since power-on is refused before
	 * anything of it is read, as a device that cannot execute it (LOCAL_QP_OP_ERR: the
	 * driver recovers its queue and says -EIO). Off, it costs one predictable branch.
	 * Relaxed: a count, ordering nothing. */
	if (dp.cfg_.fail_umr != 0) [[unlikely]] {
		if (dp.umrs_.fetch_add(1, std::memory_order_relaxed) + 1 == dp.cfg_.fail_umr)
			return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	}
	if (len < kCtrl + kUmrCtrl + kMkeyCtx)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	if (!qp.attr.fre)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	const uint8_t *u = w + kCtrl;
	const uint64_t mask = prm::get(u, prm::umr_ctrl::mkey_mask);
	if (((mask & prm::umr_mkey_mask::page_size) != 0 &&
	     dp.cfg_.umr_modify_entity_size_disabled) ||
	    ((mask & prm::umr_mkey_mask::a) != 0 && dp.cfg_.umr_modify_atomic_disabled))
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	const uint64_t oct = prm::get(u, prm::umr_ctrl::klm_octowords);
	if (oct % (prm::umr_xlt_align / 16) != 0)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	/* The model reports umr_extended_translation_offset: bits 47:16 count too. */
	const uint64_t xoff = prm::get(u, prm::umr_ctrl::translation_offset_en) != 0
				      ? (prm::get(u, prm::umr_ctrl::translation_offset) |
					 prm::get(u, prm::umr_ctrl::xlt_offset_47_16) << 16) *
						16
				      : 0;
	const auto check = static_cast<uint8_t>(prm::get(u, prm::umr_ctrl::check));
	if (check == 3)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	const uint8_t *ctx = w + kCtrl + kUmrCtrl;
	const size_t xlt_at = kCtrl + kUmrCtrl + kMkeyCtx;
	const uint64_t xlt_bytes = oct * 16;
	const uint8_t *xlt = nullptr;
	if (prm::get(u, prm::umr_ctrl::inline_xlt) != 0) {
		if (xlt_at + xlt_bytes > len)
			return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
		xlt = w + xlt_at;
	} else {
		/* No INLINE: the translations are behind a pointer segment, even when there are
		 * none (a revoke without INLINE lacks the segment the device reads). */
		if (xlt_at + kData > len)
			return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		const DataSeg d = parse_data(w + xlt_at);
		if (d.lkey != dp.cfg_.resd_lkey || !qp.attr.rlky)
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		if (d.bc < xlt_bytes)
			return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
		if (xlt_bytes != 0) {
			/* Read before the table's exclusive lock: DMA is never done under it.
			 * The buffer grows once to the largest list (amortised, no per-WQE
			 * allocation). */
			if (qp.scratch.size() < xlt_bytes)
				qp.scratch.resize(xlt_bytes);
			if (dma.read(d.addr, qp.scratch.data(), xlt_bytes) < 0)
				return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
			xlt = qp.scratch.data();
		}
	}
	const uint32_t key = c.imm;
	return dp.mkeys_.update(prm::mkey::index(key), [&](MkeyEntry *e) -> uint8_t {
		/* Every check before the first change: a failed UMR leaves the mkey as it was. */
		if (e == nullptr)
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		uint8_t *mkc = e->mkc.data();
		if (prm::get(mkc, prm::mkc::umr_en) == 0)
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		const bool is_free = prm::get(mkc, prm::mkc::free) != 0;
		if ((check == prm::umr_flags::check_fail_if_not_free && !is_free) ||
		    (check == prm::umr_flags::check_fail_if_free && is_free))
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		/* Enabling a free mkey: it must be in the posting QP's PD. */
		if (is_free && (mask & prm::umr_mkey_mask::free) != 0 &&
		    prm::get(ctx, prm::mkc::free) == 0 && prm::get(mkc, prm::mkc::pd) != qp.attr.pd)
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		/* The table is kept in 64-byte units too: the padding of the last unit may run
		 * past the mkey's octword size (the kernel's cache mkeys hold 2 octwords per 4
		 * MTTs and are written 4 at a time); only what fits the table is kept. */
		const uint64_t table = e->translations.size();
		if (xlt_bytes != 0 &&
		    (xoff > table || xlt_bytes > prm::umr_xlt_padded(table) - xoff))
			return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
		if ((mask & prm::umr_mkey_mask::page_size) != 0 &&
		    e->access_mode == prm::access_mode::mtt) {
			const uint64_t lps = prm::get(ctx, prm::mkc::log_page_size);
			if (lps < 12 || lps > 30)
				return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		}
		/* The selected fields' bits from the context segment, the others kept: a masked
		 * merge of the 64 raw bytes, word by word (byte order does not matter to it). */
		const uint64_t *bm = qp.umr_byte_mask(mask);
		const uint64_t variant = prm::get(mkc, prm::mkc::mkey_7_0);
		for (size_t i = 0; i < 8; i++) {
			uint64_t d, v;
			std::memcpy(&d, mkc + i * 8, 8);
			std::memcpy(&v, ctx + i * 8, 8);
			d = (d & ~bm[i]) | (v & bm[i]);
			std::memcpy(mkc + i * 8, &d, 8);
		}
		if (xlt_bytes != 0)
			std::memcpy(e->translations.data() + xoff, xlt,
				    std::min<uint64_t>(xlt_bytes, table - xoff));
		/* A bind (free -> not free), a revoke (-> free) or a new variant makes another
		 * key of the index: nicmr's extension state never passes to it. A modify in place
		 * (a refresh) keeps it. */
		if (is_free != (prm::get(mkc, prm::mkc::free) != 0) ||
		    variant != prm::get(mkc, prm::mkc::mkey_7_0))
			e->ext.clear();
		return kOk;
	});
}

uint8_t EmuDataPath::Exec::run()
{
	switch (c.opcode) {
	case MLX5_OPCODE_NOP:
		return kOk;
	case MLX5_OPCODE_RDMA_WRITE:
		return rdma_write();
	case MLX5_OPCODE_RDMA_READ:
		return rdma_read();
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA:
		return atomic();
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_IMM:
	case MLX5_OPCODE_SEND_INVAL:
	case MLX5_OPCODE_RDMA_WRITE_IMM:
		return send();
	case MLX5_OPCODE_LOCAL_INVAL:
		return local_inval();
	case MLX5_OPCODE_UMR: {
		const uint8_t s = umr();
		/* The trace is off unless a test asked for it: one predictable branch. */
		if (dp.trace_ != nullptr) [[unlikely]]
			dp.trace_->record(decode_umr(w, len, qp.qpn, c.imm, s));
		return s;
	}
	default:
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	}
}

/* Device hot path: the CQ's lock (shared CQs only), the doorbell's DmaSection, no allocation.
 * Table lock held shared. */
void EmuDataPath::complete(const DmaSection &dma, Qp &qp, uint16_t wqe_counter, uint8_t opcode,
			   uint32_t byte_cnt, uint8_t syndrome)
{
	if (qp.cq == nullptr)
		return;
	CqeFields f;
	f.qpn = qp.qpn;
	f.wqe_counter = wqe_counter;
	f.opcode = syndrome == kOk ? MLX5_CQE_REQ : MLX5_CQE_REQ_ERR;
	f.byte_cnt = byte_cnt;
	f.syndrome = syndrome;
	f.s_wqe_opcode = opcode;
	write_cqe(dma, *qp.cq, f);
}

/* Device hot path, as complete(). The caller serialises a one-user CQ's writers (the QP's lock
 * for a send CQ, its rq_lock for a receive CQ). */
void EmuDataPath::write_cqe(const DmaSection &dma, Cq &cq, const CqeFields &f)
{
	/* users changes only under the table lock held exclusive, and we hold it shared: a CQ
	 * with one user is written only by that user's queue, whose lock we hold, so it needs
	 * no lock of its own. Shared CQs serialise their producers on cq.lock. */
	std::unique_lock<SpinLock> lk(cq.lock, std::defer_lock);
	if (cq.users != 1)
		lk.lock();
	const uint64_t size = uint64_t{1} << cq.attr.log_size;
	uint8_t rec[prm::dbr::size] = {};
	uint32_t raw = 0;
	if (dma.load32_acquire(cq.attr.dbr + prm::dbr::cq_ci_dword * 4, &raw) == 0) {
		std::memcpy(rec + prm::dbr::cq_ci_dword * 4, &raw, sizeof(raw));
		/* The consumer index is 24 bits: compare modulo 2^24. */
		const auto ci = static_cast<uint32_t>(prm::get(rec, prm::dbr::cq_ci));
		if (((static_cast<uint32_t>(cq.produced) - ci) &
		     prm::value_mask(prm::dbr::cq_ci)) >= size) {
			bump(cq.n_overruns);
			return;
		}
	} else {
		ctr_.dbr_faults.fetch_add(1, std::memory_order_relaxed);
	}
	const uint64_t n = cq.produced;
	const uint64_t iova = cq.attr.mem.iova((n & (size - 1)) * prm::wq::cqe_size);
	const uint8_t owner = static_cast<uint8_t>((n >> cq.attr.log_size) & 1);
	/* The CQE is written in place: a CQE never straddles a page (64-byte slots). */
	auto *host = static_cast<uint8_t *>(dma.host(iova, prm::cqe::size));
	if (host == nullptr)
		return;
	/* Everything but op_own first; op_own last with release, so that a driver that sees
	 * the new owner bit with acquire sees the whole CQE. */
	std::memset(host, 0, prm::cqe::op_own_byte);
	prm::set(host, prm::cqe::qpn, f.qpn);
	prm::set(host, prm::cqe::srqn, f.srqn);
	prm::set(host, prm::cqe::wqe_counter, f.wqe_counter);
	const bool error = f.opcode == MLX5_CQE_REQ_ERR || f.opcode == MLX5_CQE_RESP_ERR;
	if (!error) {
		prm::set(host, prm::cqe::byte_cnt, f.byte_cnt);
		prm::set(host, prm::cqe::imm_inval_pkey, f.imm);
		if (f.grh != 0) { /* a UD receive (emu_mlx5_ud.cpp) */
			prm::set(host, prm::cqe::src_qpn, f.src_qpn);
			prm::set(host, prm::cqe::grh, f.grh);
			prm::set(host, prm::cqe::l3_hdr_type, f.l3_hdr_type);
		}
	} else {
		prm::set(host, prm::err_cqe::syndrome, f.syndrome);
		/* Vendor syndrome: the model repeats the syndrome (real values are opaque). */
		prm::set(host, prm::err_cqe::vendor_err_synd, f.syndrome);
		prm::set(host, prm::err_cqe::s_wqe_opcode, f.s_wqe_opcode);
	}
	uint8_t op_own = 0;
	prm::set(&op_own, prm::in_byte(prm::cqe::opcode), f.opcode);
	prm::set(&op_own, prm::in_byte(prm::cqe::owner), owner);
	/* Release: pairs with the driver's acquire load of op_own in its CQ poll. */
	std::atomic_ref<uint8_t>(host[prm::cqe::op_own_byte])
		.store(op_own, std::memory_order_release);
	cq.produced++;
	bump(cq.n_cqes);
	if (error)
		bump(cq.n_errors);
	/* An error CQE wakes a solicited arm too. Requester CQEs are never solicited; receive
	 * CQEs of SENDs with the solicited bit do not yet wake a solicited arm either
	 * (doc/device-model.md, "Completion events"). */
	cq_completed(dma, cq, error);
}

/* Table lock held shared. Events go to the first EQ created that is still there. */
void EmuDataPath::post_event(const DmaSection &dma, uint8_t type, uint32_t qpn)
{
	Eq *eq = event_eq(type);
	if (eq == nullptr) {
		ctr_.events_dropped.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	/* Queue events (struct mlx5_eqe_qp_srq): type 0 (QP) and the QP number. */
	uint8_t buf[prm::eqe::size] = {};
	prm::set(buf, prm::eqe::qp_srq_type, 0);
	prm::set(buf, prm::eqe::qpn, qpn);
	write_eqe(dma, *eq, type, buf + prm::eqe::data_offset);
}

/* Device hot path: the QP's lock (table lock held shared), one DmaSection, no allocation. */
void EmuDataPath::run_qp(Qp &qp, bool count_doorbell)
{
	std::lock_guard lk(qp.lock);
	if (count_doorbell)
		bump(qp.n_doorbells);
	const QpState st = qp.get_state();
	if (st != QpState::rts && st != QpState::err)
		return; /* WQEs wait until RTS (or are flushed in ERR) */
	/* One IOMMU section for the whole doorbell: the record, the WQEs, the data, the CQEs. */
	const DmaSection dma(mmu_);
	if (st == QpState::err && qp.attr.receives()) {
		/* Receive WQEs posted in ERR are flushed when the QP next runs. */
		std::lock_guard rl(qp.rq_lock);
		rq_flush(dma, qp);
	}
	run_sq(dma, qp);
}

/* The QP's lock held. On the wire (qp.rc) WQEs complete in order as their responses come
 * (rc_retire); on the loopback each completes as it runs. */
void EmuDataPath::run_sq(const DmaSection &dma, Qp &qp)
{
	QpState st = qp.get_state();
	if ((st != QpState::rts && st != QpState::err) || qp.attr.no_sq)
		return;
	if (qp.rc && st == QpState::err)
		rc_flush(dma, qp); /* outstanding requests first: CQEs stay in SQ order */
	/* The producer counter alone, in one acquire load: the driver writes it while the
	 * device runs, and its WQEs must be visible once the counter is. */
	uint8_t rec[prm::dbr::size] = {};
	uint32_t raw = 0;
	if (dma.load32_acquire(qp.attr.dbr + prm::dbr::qp_sq_dword * 4, &raw) < 0) {
		ctr_.dbr_faults.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	std::memcpy(rec + prm::dbr::qp_sq_dword * 4, &raw, sizeof(raw));
	const auto pi = static_cast<uint16_t>(prm::get(rec, prm::dbr::sq_counter));
	const uint32_t size = uint32_t{1} << qp.attr.log_sq_size;
	uint8_t wqe[kMaxWqeBytes + prm::wq::wqebb_size];
	while (qp.ci != pi) {
		const uint16_t ci = qp.ci;
		const auto avail = static_cast<uint16_t>(pi - ci);
		st = qp.get_state();
		/* On-demand paging: the WQE at the head waits for its page fault's resume
		 * (emu_mlx5_odp.cpp); in ERR it is flushed like the rest. */
		if (qp.pf == Qp::Pf::pending) {
			if (st != QpState::err)
				break;
			qp.pf = Qp::Pf::none;
		}
		/* The wire: a WQE failed before it went out, or every entry is outstanding; the
		 * rest waits for the responses (rc_retire runs this again in ERR). */
		if (qp.rc && st != QpState::err &&
		    (qp.rc->halted || qp.rc->outstanding() == qp.rc->pend.size())) {
			qp.rc->deferred = true;
			break;
		}
		if (avail > size) {
			bump(qp.n_wqes);
			/* A producer more than a ring ahead: the record is corrupt. Error once,
			 * then nothing is left to run. */
			if (st != QpState::err)
				complete(dma, qp, ci, 0, 0, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
			qp.set_state(QpState::err);
			qp.ci = pi;
			break;
		}
		const auto wqebb_iova = [&](uint32_t i) {
			return qp.attr.sq_iova(((ci + i) & (size - 1)) * prm::wq::wqebb_size);
		};
		if (dma.read(wqebb_iova(0), wqe, prm::wq::wqebb_size) < 0) {
			bump(qp.n_wqes);
			ctr_.dbr_faults.fetch_add(1, std::memory_order_relaxed);
			complete(dma, qp, ci, 0, 0,
				 st == QpState::err ? MLX5_CQE_SYNDROME_WR_FLUSH_ERR
						    : MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
			qp.set_state(QpState::err);
			qp.ci = static_cast<uint16_t>(ci + 1);
			continue;
		}
		const Ctrl c = parse_ctrl(wqe);
		/* The wire: no more READs and atomics in flight than the responder keeps
		 * (log_sra_max); this one waits for a response (emu_mlx5_rc.cpp). */
		if (qp.rc && st != QpState::err && rc_must_wait(qp, c.opcode)) {
			qp.rc->deferred = true;
			break;
		}
		bump(qp.n_wqes);
		uint32_t nbb = c.ds == 0 ? 1 : prm::wq::wqebbs(c.ds);
		bool malformed = c.ds == 0 || nbb > avail;
		if (malformed)
			nbb = 1;
		/* The rest of the WQE, one read per IOVA-contiguous run of WQEBBs (a WQE wraps
		 * at the ring's end and may cross a queue page). */
		for (uint32_t i = 1; i < nbb && !malformed;) {
			const uint64_t at = wqebb_iova(i);
			uint32_t run = 1;
			while (i + run < nbb &&
			       wqebb_iova(i + run) == at + run * prm::wq::wqebb_size)
				run++;
			if (dma.read(at, wqe + i * prm::wq::wqebb_size, run * prm::wq::wqebb_size) <
			    0)
				malformed = true;
			i += run;
		}
		qp.ci = static_cast<uint16_t>(ci + nbb);
		if (st == QpState::err) {
			qp.pf = Qp::Pf::none;
			complete(dma, qp, ci, c.opcode, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
			continue;
		}
		uint8_t syn = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		Exec ex{*this, dma, qp, wqe, size_t{c.ds} * 16, c};
		if (qp.pf == Qp::Pf::failed) {
			/* Its page fault was resumed with an error: it completes with the
			 * access's syndrome, nothing moved; a loopback responder goes to ERR
			 * with its event, as for any remote access error. */
			syn = qp.pf_syndrome;
			Qp *r = qp.pf_responder != 0 ? find_qp(qp.pf_responder) : nullptr;
			if (r != nullptr && qp.pf_recv) {
				/* A receive WQE's fault: that receive completes in error. */
				recv_fault_failed(dma, *r, qp.pf_recv_syndrome);
			} else if (r != nullptr) {
				ex.responder = r;
				r->set_state(QpState::err);
				ex.event = prm::event_type::wq_access_error;
			}
		} else if (!malformed) {
			syn = qp.attr.ud ? ex.ud_send() : qp.rc ? ex.run_wire() : ex.run();
		}
		qp.pf = Qp::Pf::none;
		if (syn == kFaultHeld) {
			uint32_t token = 0;
			if (raise_fault(dma, qp, ci, ex.fault, false, &token)) {
				/* Held: this WQE runs again once the fault is resumed. */
				qp.pf = Qp::Pf::pending;
				qp.pf_token = token;
				qp.pf_syndrome = ex.fault.syndrome;
				qp.pf_responder = ex.fault.responder;
				qp.pf_recv = ex.fault.recv;
				qp.pf_recv_syndrome = ex.fault.recv_syndrome;
				qp.ci = ci;
				break;
			}
			/* No fault could be raised: the access fails as without on-demand
			 * paging. */
			syn = ex.fault.syndrome;
			Qp *r = ex.fault.responder != 0 ? find_qp(ex.fault.responder) : nullptr;
			if (r != nullptr && ex.fault.recv) {
				recv_fault_failed(dma, *r, ex.fault.recv_syndrome);
			} else if (r != nullptr) {
				ex.responder = r;
				r->set_state(QpState::err);
				ex.event = prm::event_type::wq_access_error;
			}
		}
		if (ex.rnr) {
			/* No receive WQE at the responder (IBTA 9.7.5.2.8): the requester retries
			 * up to rnr_retry times (7: without end). The loopback has no RNR timer:
			 * each later run of this QP (a doorbell, process_qp) is one retry; the WQE
			 * stays at the head, nothing behind it runs. */
			if (qp.path.rnr_retry == 7 || qp.rnr_tries < qp.path.rnr_retry) {
				if (qp.path.rnr_retry != 7)
					qp.rnr_tries++;
				qp.ci = ci;
				break;
			}
			syn = MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR;
		}
		qp.rnr_tries = 0;
		if (ex.event != 0 && ex.responder != nullptr)
			post_event(dma, ex.event, ex.responder->qpn);
		if (qp.rc) {
			rc_note(dma, qp, ci, c.opcode, (c.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0,
				ex, syn);
			continue;
		}
		if (syn != kOk) {
			qp.set_state(QpState::err);
			complete(dma, qp, ci, c.opcode, 0, syn);
			continue;
		}
		if (c.opcode == MLX5_OPCODE_RDMA_WRITE || c.opcode == MLX5_OPCODE_RDMA_READ ||
		    c.opcode == MLX5_OPCODE_RDMA_WRITE_IMM || c.opcode == MLX5_OPCODE_SEND ||
		    c.opcode == MLX5_OPCODE_SEND_IMM || c.opcode == MLX5_OPCODE_SEND_INVAL)
			bump(qp.n_bytes, ex.byte_cnt);
		if ((c.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0)
			complete(dma, qp, ci, c.opcode, ex.byte_cnt, kOk);
	}
}

} // namespace nicmr::emu
