/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <new>
#include <utility>

#include "mlx5_qbuf.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

int QueueBuffer::alloc(mem::DmaArena &arena, size_t bytes, bool page_list, QueueBuffer *out)
{
	if (bytes == 0)
		return -EINVAL;
	size_t len = (bytes + kPage - 1) / kPage * kPage;
	QueueBuffer b;
	try {
		if (page_list)
			b.pas_.resize(len / kPage);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	int rc = arena.alloc(len, kPage, &b.block_);
	if (rc != 0)
		return rc;
	b.arena_ = &arena;
	for (size_t i = 0; i < b.pas_.size(); i++)
		b.pas_[i] = b.block_.iova + i * kPage;
	*out = std::move(b);
	return 0;
}

QueueBuffer::QueueBuffer(QueueBuffer &&o) noexcept
    : arena_(o.arena_), block_(o.block_), pas_(std::move(o.pas_))
{
	o.arena_ = nullptr;
}

QueueBuffer &QueueBuffer::operator=(QueueBuffer &&o) noexcept
{
	if (this != &o) {
		reset();
		arena_ = o.arena_;
		block_ = o.block_;
		pas_ = std::move(o.pas_);
		o.arena_ = nullptr;
	}
	return *this;
}

void QueueBuffer::reset() noexcept
{
	if (arena_ == nullptr)
		return;
	int rc = arena_->release(block_);
	if (rc != 0)
		NICMR_LOG(error, "mlx5", "queue buffer iova 0x%llx: free failed: %d",
			  static_cast<unsigned long long>(block_.iova), rc);
	arena_ = nullptr;
	block_ = {};
	pas_.clear();
}

} // namespace nicmr::mlx5
