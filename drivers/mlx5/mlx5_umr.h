/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UMR: re-pointing a pre-created mkey with a send-queue work request instead of a command.
 *
 *   ctrl (opcode MLX5_OPCODE_UMR, imm = mkey)          16 B
 *   mlx5_wqe_umr_ctrl_seg (flags, octwords, mkey_mask) 48 B
 *   mlx5_wqe_mkey_context_seg (the mkc layout)         64 B
 *   translations: inline (flags INLINE)  or  one mlx5_wqe_data_seg pointing at the list's IOVA
 *   with the device's reserved lkey (Caps::resd_lkey, from QUERY_SPECIAL_CONTEXTS)
 *
 * As the Linux kernel posts UMRs (drivers/infiniband/hw/mlx5/umr.c, qp.c):
 *   - the QP is created with fre and rlky (QpParams::umr); a ConnectX refuses a UMR on any
 *     other QP;
 *   - klm_octowords counts the list rounded up to 64 bytes (4 octwords), the padding zero, and
 *     a pointer segment's byte count is that padded length (mlx5r_umr_get_xlt_octo);
 *   - mkey_mask leaves out what the device forbids (umr_bind_mask: PAGE_SIZE under
 *     umr_modify_entity_size_disabled, A under umr_modify_atomic_disabled, as
 *     umr_check_mkey_mask refuses them);
 *   - revoke is INLINE with mkey_mask PD | FREE and gives the mkey back to the UMR QP's PD
 *     (mlx5r_umr_revoke_mr), where the device takes free mkeys from.
 *
 * Bind: check field "fail if not free", mkey_mask umr_bind_mask(), mkc free = 0. Revoke: check
 * "fail if free", mkc free = 1, pd = the QP's. A refused check completes with
 * MLX5_CQE_SYNDROME_LOCAL_PROT_ERR and puts the QP in ERR; UmrQueue recovers it (2RST, INIT,
 * RTR, RTS) before it returns.
 */
#ifndef NICMR_MLX5_UMR_H
#define NICMR_MLX5_UMR_H

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "mlx5_commands.h"
#include "mlx5_device.h"
#include "mlx5_qp.h"
#include "nicmr_align.h"

namespace nicmr::mlx5 {

struct UmrBind {
	uint32_t mkey = 0; /* index << 8 | variant; the variant becomes mkey_7_0 */
	bool lr = true, lw = false, rr = false, rw = false, a = false;
	uint32_t pd = 0;
	uint32_t qpn = prm::mkc::qpn_any;
	uint64_t start = 0;
	uint64_t len = 0;
	uint32_t log_page_size = 12;
	/* Translations: MTT entries (MTT mkey) or KLM entries (KLM mkey), not both. */
	std::span<const MttEntry> mtt;
	std::span<const KlmEntry> klm;
	/*
	 * 0: translations inline in the WQE (they must fit: kMaxInlineXltBytes). Else the IOVA
	 * where umr_encode_xlt() put them, padding included; the WQE points there with the
	 * reserved lkey.
	 */
	uint64_t xlt_iova = 0;
	/* Octwords into the mkey's translation table to start writing at (TRANSLATION_OFFSET_EN
	 * when non-zero): 16 bits, 48 with Caps::umr_extended_translation_offset. */
	uint64_t xlt_offset = 0;
	/*
	 * Modify a live mkey instead of binding a free one: check field "fail if free", mkey_mask
	 * PAGE_SIZE only, so the device rewrites the translations and the page size and keeps
	 * every other field (access, PD, start, length, variant). The mkey never stops being
	 * valid: an access sees the old translations or the new ones.
	 */
	bool modify = false;
};

/* Translation bytes inline in one WQE at most (ds 63 minus ctrl, umr ctrl and mkc). */
inline constexpr size_t kMaxInlineXltBytes = (kMaxWqeDs * 16 - 128) / 64 * 64;

/* Bytes of b's translation list (MTT entries 8 B each, KLM 16 B), before padding. */
size_t umr_xlt_bytes(const UmrBind &b) noexcept;
/* Writes b's translation list, big-endian, at dst, and zeros up to the next 64 bytes:
 * prm::umr_xlt_padded(umr_xlt_bytes(b)) bytes in all. */
void umr_encode_xlt(const UmrBind &b, void *dst) noexcept;

/* The mkey_mask of a bind and of a modify on a device with caps c (see above). */
uint64_t umr_bind_mask(const Caps &c) noexcept;
uint64_t umr_modify_mask(const Caps &c) noexcept;

/*
 * Posting (hot path: no lock, no allocation, no system call; the QP's thread). Errors: those
 * of Qp::begin, -EINVAL (both mtt and klm given, inline translations above
 * kMaxInlineXltBytes, log_page_size above 31, a list above 2^16 - 1 octwords, an offset
 * above 16 bits without Caps::umr_extended_translation_offset, above 48 with it), -EOPNOTSUPP
 * (a bind with a set where umr_bind_mask has no A: the mkey keeps the A it was created with).
 * post_umr_revoke gives the mkey to qp's PD: the UMR QP's, where free mkeys are created.
 * With umr_modify_entity_size_disabled the mkey keeps the page size it was created with:
 * b's translations must be planned for that size.
 */
int post_umr_bind(Qp &qp, const UmrBind &b, uint64_t wr_id, unsigned flags) noexcept;
int post_umr_revoke(Qp &qp, uint32_t mkey, uint64_t wr_id, unsigned flags) noexcept;

struct UmrOptions {
	uint32_t log_sq_size = 6;
	uint32_t port = 1;
	std::chrono::milliseconds timeout{2000}; /* per UMR completion */
	size_t xlt_buffer = size_t{64} << 10;	 /* pointer-mode translation list, bytes */
	/* Ring through this UAR (it must outlive the queue) instead of allocating one: several
	 * queues may share a UAR page, as QPs of one process do on ConnectX. */
	Uar *uar = nullptr;
};

/*
 * A QP of its own for synchronous UMRs: post, ring, poll the completion, recover the QP after
 * a refused UMR. The QP is connected to itself on options.port.
 * One thread at a time, as for any queue of a poll-mode driver: the caller serializes (the
 * mkey programmer gives each registering thread a queue of its own and guards the shared one
 * with its mutex). bind, modify and revoke are the registration hot path: no lock, no
 * allocation, no system call (the clock is read only once a completion is late).
 */
class alignas(kThreadAlign) UmrQueue { /* a lane's: no line shared with another lane's */
public:
	/* Errors: those of Uar::alloc, Cq::create, Qp::create, Qp::connect, QueueBuffer::alloc. */
	static int create(Device &dev, uint32_t pd, const UmrOptions &o,
			  std::unique_ptr<UmrQueue> *out);
	~UmrQueue();

	/*
	 * Binds and waits. 0; -EBUSY (the device refused: the mkey is not free, or not UMR-capable,
	 * or does not exist, or is free in another PD than the queue's); -E2BIG (translations,
	 * padded to 64 bytes, above xlt_buffer); -EOPNOTSUPP (atomic access the device does not let
	 * a UMR set); -ETIMEDOUT; -EIO (another error completion; last_syndrome() says which). The
	 * QP is recovered after a refusal.
	 */
	int bind(const UmrBind &b);
	/* Revokes and waits: 0; -EALREADY (the device refused: the mkey is free already, or
	 * unknown); -ETIMEDOUT; -EIO. */
	int revoke(uint32_t mkey);
	/* bind with UmrBind::modify set: 0; -ENOENT (the device refused: the mkey is free, or not
	 * UMR-capable, or does not exist); bind's other errors. The QP is recovered after a
	 * refusal. */
	int modify(const UmrBind &b);
	/* Syndrome of the last failed UMR (MLX5_CQE_SYNDROME_*), 0 when none failed. */
	uint8_t last_syndrome() const noexcept { return last_syndrome_; }
	uint64_t recoveries() const noexcept { return recoveries_; }
	Qp &qp() noexcept { return *qp_; }
	/* The UAR the queue rings (its own, or UmrOptions::uar). */
	Uar &uar() noexcept { return *ring_; }

private:
	UmrQueue(Device &dev, const UmrOptions &o) : dev_(dev), opts_(o) {}
	int wait(Completion *c);
	int finish_one(int refused_errno);
	Device &dev_;
	UmrOptions opts_;
	std::unique_ptr<Uar> uar_; /* the queue's own UAR, unless UmrOptions::uar named one */
	Uar *ring_ = nullptr;	   /* the UAR its CQ and QP ring through */
	std::unique_ptr<Cq> cq_;
	std::unique_ptr<Qp> qp_;
	QueueBuffer xlt_;
	uint8_t last_syndrome_ = 0;
	uint64_t recoveries_ = 0;
};

} // namespace nicmr::mlx5

#endif
