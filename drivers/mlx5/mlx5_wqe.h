/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Send WQE building blocks: the segments of the layout table (mlx5_prm.h, prm::wqe_*), in the
 * ring as <infiniband/mlx5dv.h>'s structs lay them out.
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

/*
 * The segment writers: every field through the layout table (prm::wqe_*), every byte of the
 * segment written (a ring slot is reused: nothing of the WQE before may stay). One store per
 * 32-bit word or wider field, as mlx5dv_set_ctrl_seg / mlx5dv_set_data_seg write them.
 */
inline void set_ctrl(mlx5_wqe_ctrl_seg *c, uint16_t wqe_index, uint8_t opcode, uint32_t qpn,
		     uint32_t ds, uint8_t fm_ce_se_bits, uint32_t imm) noexcept
{
	namespace f = prm::wqe_ctrl;
	prm::set_word<f::opmod, f::wqe_index, f::opcode>(c, 0u, wqe_index, opcode);
	prm::set_word<f::qpn, f::ds>(c, qpn, ds);
	prm::set_word<f::signature, f::dci_stream_channel_id, f::fm_ce_se>(c, 0u, 0u,
									   fm_ce_se_bits);
	prm::set(c, f::imm, imm);
}

inline void set_raddr(mlx5_wqe_raddr_seg *r, uint64_t raddr, uint32_t rkey) noexcept
{
	prm::set(r, prm::wqe_raddr::raddr, raddr);
	prm::set(r, prm::wqe_raddr::rkey, rkey);
	prm::set(r, prm::wqe_raddr::reserved, 0);
}

inline void set_data(mlx5_wqe_data_seg *d, uint64_t addr, uint32_t len, uint32_t lkey) noexcept
{
	prm::set(d, prm::wqe_data::byte_count, len);
	prm::set(d, prm::wqe_data::lkey, lkey);
	prm::set(d, prm::wqe_data::addr, addr);
}

/* The datagram segment of a UD send WQE (prm::wqe_datagram, mlx5dv.h struct mlx5_wqe_av): every
 * byte written, as mlx5dv_set_dgram_seg writes a whole AV. q_key with bit 31 set: the QP's own
 * (IBTA 10.2.5). udp_sport goes where rdma-core's mlx5_create_ah puts RoCEv2's (rlid). */
inline void set_datagram(void *seg, const uint8_t *rgid, uint32_t dqpn, uint32_t q_key,
			 uint16_t udp_sport) noexcept
{
	namespace f = prm::wqe_datagram;
	std::memset(seg, 0, f::size);
	prm::set(seg, f::q_key, q_key);
	prm::set(seg, f::dqpn, dqpn);
	prm::set(seg, f::rlid_udp_sport, udp_sport);
	prm::set(seg, f::grh, 1);
	std::memcpy(static_cast<uint8_t *>(seg) + f::rgid_byte, rgid, f::rgid_size);
}

/* The 4-byte header of an inline data segment carrying len bytes. */
inline void set_inline_header(void *h, uint32_t len) noexcept
{
	prm::set_word<prm::wqe_inline::inline_flag, prm::wqe_inline::byte_count>(h, 1u, len);
}

inline void set_atomic(mlx5_wqe_atomic_seg *a, uint64_t swap_add, uint64_t compare) noexcept
{
	prm::set(a, prm::wqe_atomic::swap_add, swap_add);
	prm::set(a, prm::wqe_atomic::compare, compare);
}

/* 16-byte units of an inline data segment carrying len bytes. */
constexpr uint32_t inline_ds(uint32_t len) noexcept
{
	return static_cast<uint32_t>((prm::wqe_inline::header_size + len + prm::wq::ds_size - 1) /
				     prm::wq::ds_size);
}

} // namespace nicmr::mlx5

#endif
