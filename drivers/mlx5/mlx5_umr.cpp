/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <cstring>
#include <new>

#include "mlx5_umr.h"
#include "mr_keys.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {
namespace {

/* lib/mr's key layout (mkey_index, mkey_variant) is the PRM's: the variant is mkey_7_0. */
static_assert(mr::kVariantBits == prm::mkc::mkey_7_0.bits);
static_assert(mr::mkey_index(0x12345678u) == prm::mkey::index(0x12345678u) &&
	      mr::mkey_variant(0x12345678u) == prm::mkey::variant(0x12345678u));

namespace mm = prm::umr_mkey_mask;

/* Revoke: free again, and back in the UMR QP's PD (Linux umr.c, mlx5r_umr_revoke_mr). */
constexpr uint64_t kRevokeMask = mm::pd | mm::free;

/* Every byte of the 48: the reserved ones zero (a ring slot is reused). */
void set_umr_ctrl(void *u, bool inl, uint8_t check, uint16_t octwords, uint64_t offset,
		  uint64_t mask) noexcept
{
	std::memset(u, 0, prm::umr_ctrl::size);
	prm::set(u, prm::umr_ctrl::inline_xlt, inl);
	prm::set(u, prm::umr_ctrl::check, check);
	prm::set(u, prm::umr_ctrl::translation_offset_en, offset != 0);
	prm::set(u, prm::umr_ctrl::klm_octowords, octwords);
	/* Low 16 bits here, bits 47:16 in xlt_offset_47_16 (Linux umr.c,
	 * mlx5r_umr_set_update_xlt_ctrl_seg); the caller checked the cap. */
	prm::set(u, prm::umr_ctrl::translation_offset, offset & 0xffff);
	prm::set(u, prm::umr_ctrl::xlt_offset_47_16, offset >> 16);
	prm::set(u, prm::umr_ctrl::mkey_mask, mask);
}

void encode_mtt(const MttEntry &m, uint8_t *p) noexcept
{
	prm::set(p, prm::mtt::address, m.iova);
	prm::set(p, prm::mtt::wr_en, m.wr_en);
	prm::set(p, prm::mtt::rd_en, m.rd_en);
}

void encode_klm(const KlmEntry &k, uint8_t *p) noexcept
{
	prm::set(p, prm::klm::byte_count, k.byte_count);
	prm::set(p, prm::klm::mkey, k.mkey);
	prm::set(p, prm::klm::address, k.address);
}

} // namespace

/*
 * Linux umr.c builds the same masks from the same pieces: enable (KEY | FREE,
 * get_umr_enable_mr_mask), translation (LEN | PAGE_SIZE | START_ADDR,
 * get_umr_update_translation_mask), access (LR | LW | RR | RW, and A when the device does atomics:
 * get_umr_update_access_mask) and PD; nicmr adds QPN (the free mkeys' qpn is rewritten to "any").
 * What umr_check_mkey_mask refuses is left out: PAGE_SIZE under umr_modify_entity_size_disabled, A
 * under umr_modify_atomic_disabled.
 */
uint64_t umr_bind_mask(const Caps &c) noexcept
{
	uint64_t m = mm::len | mm::start_addr | mm::pd | mm::key | mm::qpn | mm::lr | mm::lw |
		     mm::rr | mm::rw | mm::free;
	if (!c.umr_modify_entity_size_disabled)
		m |= mm::page_size;
	if (c.atomic && !c.umr_modify_atomic_disabled)
		m |= mm::a;
	return m;
}

/* A modify rewrites the translations (not masked) and the page size where the device lets a
 * UMR change it, nothing else. */
uint64_t umr_modify_mask(const Caps &c) noexcept
{
	return c.umr_modify_entity_size_disabled ? 0 : mm::page_size;
}

size_t umr_xlt_bytes(const UmrBind &b) noexcept
{
	return b.mtt.size() * prm::mtt::size + b.klm.size() * prm::klm::size;
}

void umr_encode_xlt(const UmrBind &b, void *dst) noexcept
{
	auto *p = static_cast<uint8_t *>(dst);
	for (const MttEntry &m : b.mtt) {
		encode_mtt(m, p);
		p += prm::mtt::size;
	}
	for (const KlmEntry &k : b.klm) {
		encode_klm(k, p);
		p += prm::klm::size;
	}
	const size_t xlt = umr_xlt_bytes(b);
	std::memset(p, 0, prm::umr_xlt_padded(xlt) - xlt);
}

/* Hot path: no lock, no allocation, no system call. */
int post_umr_bind(Qp &qp, const UmrBind &b, uint64_t wr_id, unsigned flags) noexcept
{
	if ((!b.mtt.empty() && !b.klm.empty()) || b.log_page_size > 31)
		return -EINVAL;
	const Caps &caps = qp.device().caps();
	const uint64_t mask = b.modify ? umr_modify_mask(caps) : umr_bind_mask(caps);
	/* The mkey keeps the A bit it was created with (0): a UMR cannot grant atomics. */
	if (!b.modify && b.a && (mask & mm::a) == 0)
		return -EOPNOTSUPP;
	/* Translations go in 64-byte units, the padding zero (prm::umr_xlt_padded). */
	const size_t xlt_padded = prm::umr_xlt_padded(umr_xlt_bytes(b));
	const bool inl = b.xlt_iova == 0;
	if ((inl && xlt_padded > kMaxInlineXltBytes) ||
	    !prm::fits(prm::umr_ctrl::klm_octowords, xlt_padded / 16) ||
	    b.xlt_offset >> (caps.umr_extended_translation_offset ? 48 : 16) != 0)
		return -EINVAL;
	uint32_t ds = 1 + 3 + 4 + static_cast<uint32_t>(inl ? xlt_padded / 16 : 1);
	WqeSlot w;
	int rc = qp.begin(ds, &w);
	if (rc != 0)
		return rc;
	set_umr_ctrl(w.cur.take(prm::umr_ctrl::size), inl,
		     b.modify ? prm::umr_flags::check_fail_if_free
			      : prm::umr_flags::check_fail_if_not_free,
		     static_cast<uint16_t>(xlt_padded / 16), b.xlt_offset, mask);
	void *mkc = w.cur.take(prm::mkc::size);
	std::memset(mkc, 0, prm::mkc::size);
	prm::set(mkc, prm::mkc::free, 0);
	prm::set(mkc, prm::mkc::lr, b.lr);
	prm::set(mkc, prm::mkc::lw, b.lw);
	prm::set(mkc, prm::mkc::rr, b.rr);
	prm::set(mkc, prm::mkc::rw, b.rw);
	prm::set(mkc, prm::mkc::a, b.a);
	prm::set(mkc, prm::mkc::qpn, b.qpn);
	prm::set(mkc, prm::mkc::mkey_7_0, prm::mkey::variant(b.mkey));
	prm::set(mkc, prm::mkc::pd, b.pd);
	prm::set(mkc, prm::mkc::start_addr, b.start);
	prm::set(mkc, prm::mkc::len, b.len);
	prm::set(mkc, prm::mkc::log_page_size, b.log_page_size);
	if (inl) {
		/* Entries go out in 16-byte pieces through the cursor: the list may wrap. */
		uint8_t piece[16];
		size_t i = 0;
		for (const MttEntry &m : b.mtt) {
			encode_mtt(m, piece + (i & 1) * 8);
			if (i++ & 1)
				w.cur.copy(piece, 16);
		}
		if (i & 1)
			w.cur.copy(piece, 8);
		for (const KlmEntry &k : b.klm) {
			encode_klm(k, piece);
			w.cur.copy(piece, 16);
		}
		w.cur.pad_to_wqebb();
	} else {
		/* The list by IOVA with the device's reserved lkey (QUERY_SPECIAL_CONTEXTS at
		 * bring-up; the QP was created with rlky). */
		set_data(static_cast<mlx5_wqe_data_seg *>(w.cur.take(prm::wqe_data::size)),
			 b.xlt_iova, static_cast<uint32_t>(xlt_padded), caps.resd_lkey);
	}
	qp.finish(w, MLX5_OPCODE_UMR, ds, b.mkey, wr_id, flags);
	return 0;
}

/*
 * As Linux umr.c's mlx5r_umr_revoke_mr: INLINE (no pointer segment follows), mkey_mask PD |
 * FREE, the context free with the UMR QP's PD (where the free mkeys live), qpn "any" and the
 * key's variant. One difference: nicmr keeps the "fail if free" check, so that revoking a free
 * mkey is refused (-EALREADY) instead of passing unseen.
 * Hot path: no lock, no allocation, no system call.
 */
int post_umr_revoke(Qp &qp, uint32_t mkey, uint64_t wr_id, unsigned flags) noexcept
{
	const uint32_t ds = 1 + 3 + 4;
	WqeSlot w;
	int rc = qp.begin(ds, &w);
	if (rc != 0)
		return rc;
	set_umr_ctrl(w.cur.take(prm::umr_ctrl::size), true, prm::umr_flags::check_fail_if_free, 0,
		     0, kRevokeMask);
	void *mkc = w.cur.take(prm::mkc::size);
	std::memset(mkc, 0, prm::mkc::size);
	prm::set(mkc, prm::mkc::free, 1);
	prm::set(mkc, prm::mkc::pd, qp.pd());
	prm::set(mkc, prm::mkc::qpn, prm::mkc::qpn_any);
	prm::set(mkc, prm::mkc::mkey_7_0, prm::mkey::variant(mkey));
	qp.finish(w, MLX5_OPCODE_UMR, ds, mkey, wr_id, flags);
	return 0;
}

int UmrQueue::create(Device &dev, uint32_t pd, const UmrOptions &o, std::unique_ptr<UmrQueue> *out)
{
	std::unique_ptr<UmrQueue> q(new (std::nothrow) UmrQueue(dev, o));
	if (!q)
		return -ENOMEM;
	int rc = 0;
	if (o.uar != nullptr)
		q->ring_ = o.uar;
	else if ((rc = Uar::alloc(dev, &q->uar_)) == 0)
		q->ring_ = q->uar_.get();
	if (rc == 0) {
		CqParams cp;
		cp.log_size = o.log_sq_size;
		rc = Cq::create(dev, *q->ring_, cp, &q->cq_);
	}
	if (rc == 0) {
		QpParams qp;
		qp.pd = pd;
		qp.log_sq_size = o.log_sq_size;
		qp.port = o.port;
		qp.umr = true; /* fre and rlky */
		rc = Qp::create(dev, *q->ring_, *q->cq_, qp, &q->qp_);
	}
	if (rc == 0)
		rc = q->qp_->connect(q->qp_->qpn());
	if (rc == 0 && o.xlt_buffer != 0)
		rc = QueueBuffer::alloc(dev.arena(), o.xlt_buffer, false, &q->xlt_);
	if (rc != 0)
		return rc;
	*out = std::move(q);
	return 0;
}

UmrQueue::~UmrQueue()
{
	/* QP before CQ before UAR: members go in reverse order, reset them explicitly to say so. */
	qp_.reset();
	cq_.reset();
	uar_.reset();
}

int UmrQueue::wait(Completion *c)
{
	/* Inline delivery completes during the doorbell: look before reading the clock. */
	if (qp_->poll(c, 1) == 1)
		return 0;
	auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
	for (uint32_t spins = 0;; spins++) {
		if (qp_->poll(c, 1) == 1)
			return 0;
		if ((spins & 1023) == 1023 && std::chrono::steady_clock::now() > deadline)
			return -ETIMEDOUT;
	}
}

int UmrQueue::finish_one(int refused_errno)
{
	Completion c;
	int rc = wait(&c);
	if (rc != 0) {
		NICMR_LOG(error, "mlx5", "%s: UMR on QP 0x%x: no completion in %lld ms",
			  dev_.function().name().c_str(), qp_->qpn(),
			  static_cast<long long>(opts_.timeout.count()));
		return rc;
	}
	if (c.ok())
		return 0;
	last_syndrome_ = c.syndrome;
	recoveries_++;
	int rec = qp_->recover();
	if (rec != 0)
		return rec;
	return c.syndrome == MLX5_CQE_SYNDROME_LOCAL_PROT_ERR ? refused_errno : -EIO;
}

int UmrQueue::bind(const UmrBind &b)
{
	const size_t padded = prm::umr_xlt_padded(umr_xlt_bytes(b));
	UmrBind p = b;
	if (b.xlt_iova == 0 && padded > kMaxInlineXltBytes) {
		if (padded > xlt_.size())
			return -E2BIG;
		umr_encode_xlt(b, xlt_.va());
		p.xlt_iova = xlt_.iova();
	}
	int rc = post_umr_bind(*qp_, p, 0, kSignaled);
	if (rc != 0)
		return rc;
	return finish_one(b.modify ? -ENOENT : -EBUSY);
}

int UmrQueue::modify(const UmrBind &b)
{
	UmrBind m = b;
	m.modify = true;
	return bind(m);
}

int UmrQueue::revoke(uint32_t mkey)
{
	int rc = post_umr_revoke(*qp_, mkey, 0, kSignaled);
	if (rc != 0)
		return rc;
	return finish_one(-EALREADY);
}

} // namespace nicmr::mlx5
