/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Host DMA memory for the driver's rings (SQ, CQ, EQ) and doorbell records: a zeroed block of
 * whole 4 KiB pages from the device's DmaArena, contiguous in IOVA, described to the device by
 * one PAS entry per page (log_page_size 0, page_offset 0). Slow path.
 */
#ifndef NICMR_MLX5_QBUF_H
#define NICMR_MLX5_QBUF_H

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mem_space.h"

namespace nicmr::mlx5 {

class QueueBuffer {
public:
	QueueBuffer() = default;
	/*
	 * bytes rounded up to 4 KiB pages; page_list: build the PAS list (rings), else not
	 * (doorbell records). Errors: -EINVAL (bytes 0), -ENOMEM (arena full or no memory).
	 */
	static int alloc(mem::DmaArena &arena, size_t bytes, bool page_list, QueueBuffer *out);
	~QueueBuffer() { reset(); }
	QueueBuffer(QueueBuffer &&o) noexcept;
	QueueBuffer &operator=(QueueBuffer &&o) noexcept;
	QueueBuffer(const QueueBuffer &) = delete;
	QueueBuffer &operator=(const QueueBuffer &) = delete;

	uint8_t *va() const noexcept { return static_cast<uint8_t *>(block_.va); }
	uint64_t iova() const noexcept { return block_.iova; }
	size_t size() const noexcept { return block_.len; }
	std::span<const uint64_t> pas() const noexcept { return pas_; }
	void reset() noexcept;

	static constexpr size_t kPage = 4096;

private:
	mem::DmaArena *arena_ = nullptr;
	mem::DmaBlock block_;
	std::vector<uint64_t> pas_;
};

} // namespace nicmr::mlx5

#endif
