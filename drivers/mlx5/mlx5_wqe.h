/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Send WQE building blocks over the segment layouts of <infiniband/mlx5dv.h>.
 *
 *   SQ ring: 2^log_sq_size WQEBBs of 64 bytes.  A WQE = ctrl seg (16 B) + segments, ds 16-byte
 *   units in all, ceil(ds / 4) WQEBBs; it starts on a WQEBB and may run past the end of the
 *   ring, continuing at its start:
 *
 *     | ... | ctrl raddr data data | data ... (end of ring) ->  (start of ring) | data | ...
 *
 * Segments of 16, 48 and 64 bytes never straddle the end (they sit inside one WQEBB); inline
 * data and UMR translations can, and are copied piecewise.
 * Hot path: everything here is inline, takes no lock, allocates nothing, makes no system call.
 */
#ifndef NICMR_MLX5_WQE_H
#define NICMR_MLX5_WQE_H

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <endian.h>
#include <infiniband/mlx5dv.h>

#include "mlx5_prm.h"

namespace nicmr::mlx5 {

/* Largest ds a ctrl segment can carry (6 bits). */
inline constexpr uint32_t kMaxWqeDs = 63;

/* Posting flags (Qp::post_*). */
enum PostFlags : unsigned {
	kSignaled = 1u << 0,   /* ask for a CQE (MLX5_WQE_CTRL_CQ_UPDATE) */
	kFence = 1u << 1,      /* wait for earlier READ/ATOMIC to finish (MLX5_WQE_CTRL_FENCE) */
	kSmallFence = 1u << 2, /* initiator small fence (MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE) */
	kSolicited = 1u << 3,  /* MLX5_WQE_CTRL_SOLICITED */
	kNoDoorbell = 1u << 4, /* queue the WQE only; Qp::ring() later rings for all queued */
};

constexpr uint8_t fm_ce_se(unsigned flags) noexcept
{
	uint8_t v = 0;
	if (flags & kSignaled)
		v |= MLX5_WQE_CTRL_CQ_UPDATE;
	if (flags & kFence)
		v |= MLX5_WQE_CTRL_FENCE;
	else if (flags & kSmallFence)
		v |= MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE;
	if (flags & kSolicited)
		v |= MLX5_WQE_CTRL_SOLICITED;
	return v;
}

/* A cursor over the SQ ring at 16-byte granularity, wrapping at its end. */
class SqCursor {
public:
	SqCursor() noexcept : ring_(nullptr), mask_(0), off_(0) {}
	SqCursor(uint8_t *ring, size_t ring_bytes, size_t off) noexcept
	    : ring_(ring), mask_(ring_bytes - 1), off_(off)
	{}
	/* The next n bytes (n <= 64, inside one WQEBB): a pointer, then the cursor moves on. */
	void *take(size_t n) noexcept
	{
		void *p = ring_ + off_;
		off_ = (off_ + n) & mask_;
		return p;
	}
	/* Copies len bytes, wrapping at the ring's end, and pads with zeros to 16 bytes. */
	void copy(const void *src, size_t len) noexcept
	{
		const auto *s = static_cast<const uint8_t *>(src);
		while (len != 0 && s != nullptr) {
			size_t room = mask_ + 1 - off_;
			size_t n = len < room ? len : room;
			std::memcpy(ring_ + off_, s, n);
			s += n;
			len -= n;
			off_ = (off_ + n) & mask_;
		}
		size_t pad = (16 - (off_ & 15)) & 15;
		if (pad != 0) {
			std::memset(ring_ + off_, 0, pad);
			off_ = (off_ + pad) & mask_;
		}
	}
	/* Zeroes up to the next WQEBB boundary (UMR translations are padded to 64 bytes). */
	void pad_to_wqebb() noexcept
	{
		while ((off_ & 63) != 0) {
			std::memset(ring_ + off_, 0, 16);
			off_ = (off_ + 16) & mask_;
		}
	}
	size_t offset() const noexcept { return off_; }

private:
	uint8_t *ring_;
	size_t mask_;
	size_t off_;
};

inline void set_ctrl(mlx5_wqe_ctrl_seg *c, uint16_t wqe_index, uint8_t opcode, uint32_t qpn,
		     uint32_t ds, uint8_t fm_ce_se_bits, uint32_t imm_be) noexcept
{
	c->opmod_idx_opcode = htobe32(uint32_t{wqe_index} << 8 | opcode);
	c->qpn_ds = htobe32(qpn << 8 | ds);
	c->signature = 0;
	c->dci_stream_channel_id = 0;
	c->fm_ce_se = fm_ce_se_bits;
	c->imm = imm_be;
}

inline void set_raddr(mlx5_wqe_raddr_seg *r, uint64_t raddr, uint32_t rkey) noexcept
{
	r->raddr = htobe64(raddr);
	r->rkey = htobe32(rkey);
	r->reserved = 0;
}

inline void set_data(mlx5_wqe_data_seg *d, uint64_t addr, uint32_t len, uint32_t lkey) noexcept
{
	d->byte_count = htobe32(len);
	d->lkey = htobe32(lkey);
	d->addr = htobe64(addr);
}

inline void set_atomic(mlx5_wqe_atomic_seg *a, uint64_t swap_add, uint64_t compare) noexcept
{
	a->swap_add = htobe64(swap_add);
	a->compare = htobe64(compare);
}

/*
 * prm::set() for the fields a WQE builder writes per WQE, in one or two instructions when the
 * field lies in one byte or starts and ends on byte boundaries (the layout table's fields are
 * constants, so the branch below folds away); any other field goes through prm::set(). The
 * value is masked to the width, the bits around the field are kept, as prm::set() does.
 */
inline void set_field(void *base, prm::Field f, uint64_t v) noexcept
{
	auto *p = static_cast<uint8_t *>(base);
	const uint32_t first = f.bit_off / 8;
	const uint32_t end_bit = f.bit_off + f.bits;
	if (f.bits < 8 && (end_bit - 1) / 8 == first) {
		const uint32_t shift = (8 - end_bit % 8) % 8;
		const auto m = static_cast<uint8_t>(((1u << f.bits) - 1) << shift);
		p[first] = static_cast<uint8_t>((p[first] & ~m) | ((v << shift) & m));
		return;
	}
	if (f.bit_off % 8 == 0 && f.bits % 8 == 0) {
		if (f.bits == 64) {
			const uint64_t be = htobe64(v);
			std::memcpy(p + first, &be, 8);
			return;
		}
		if (f.bits == 32) {
			const uint32_t be = htobe32(static_cast<uint32_t>(v));
			std::memcpy(p + first, &be, 4);
			return;
		}
		for (uint32_t i = 0; i < f.bits / 8; i++)
			p[first + i] = static_cast<uint8_t>(v >> (f.bits - 8 - 8 * i));
		return;
	}
	prm::set(base, f, v);
}

/* 16-byte units of an inline data segment carrying len bytes. */
constexpr uint32_t inline_ds(uint32_t len) noexcept
{
	return (4 + len + 15) / 16;
}

} // namespace nicmr::mlx5

#endif
