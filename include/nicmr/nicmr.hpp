/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * A thin C++ layer over nicmr.h: owning handles (std::unique_ptr with the matching destroy
 * call) and factory functions that return the C API's negative errno. Nothing throws.
 *
 * Destroy order is the C API's: MRs, then PDs and pools, then the device. Declare the device
 * first so that C++ scope ends destroy it last. A handle whose destroy call fails (-EBUSY:
 * something still lives below it) is released anyway: the object stays alive and is leaked, so
 * keep the order.
 */
#ifndef NICMR_NICMR_HPP
#define NICMR_NICMR_HPP

#include <cstddef>
#include <cstdint>
#include <memory>

#include "nicmr.h"

namespace nicmr {

struct DeviceCloser {
	void operator()(nicmr_device *d) const noexcept { (void)nicmr_device_close(d); }
};
struct PoolDestroyer {
	void operator()(nicmr_pool *p) const noexcept { (void)nicmr_pool_destroy(p); }
};
struct PdFreer {
	void operator()(nicmr_pd *p) const noexcept { (void)nicmr_pd_free(p); }
};
struct MrDeregisterer {
	void operator()(nicmr_mr *m) const noexcept { (void)nicmr_mr_dereg(m); }
};

using DevicePtr = std::unique_ptr<nicmr_device, DeviceCloser>;
using PoolPtr = std::unique_ptr<nicmr_pool, PoolDestroyer>;
using PdPtr = std::unique_ptr<nicmr_pd, PdFreer>;
using MrPtr = std::unique_ptr<nicmr_mr, MrDeregisterer>;
/* Counters (a device-model extension): free them after the MRs they are bound to. */
struct CntrFreer {
	void operator()(nicmr_cntr *c) const noexcept { (void)nicmr_cntr_free(c); }
};
using CntrPtr = std::unique_ptr<nicmr_cntr, CntrFreer>;

/** nicmr_device_open into an owning handle. */
inline int open_device(const char *spec, DevicePtr *out) noexcept
{
	nicmr_device *d = nullptr;
	int rc = nicmr_device_open(spec, &d);
	if (rc == 0)
		out->reset(d);
	return rc;
}

/** nicmr_pool_create into an owning handle. */
inline int create_pool(nicmr_device *dev, const nicmr_pool_params &params, PoolPtr *out) noexcept
{
	nicmr_pool *p = nullptr;
	int rc = nicmr_pool_create(dev, &params, &p);
	if (rc == 0)
		out->reset(p);
	return rc;
}

/** nicmr_pool_import into an owning handle. */
inline int import_pool(nicmr_device *dev, void *addr, size_t len, size_t page_size,
		       PoolPtr *out) noexcept
{
	nicmr_pool *p = nullptr;
	int rc = nicmr_pool_import(dev, addr, len, page_size, &p);
	if (rc == 0)
		out->reset(p);
	return rc;
}

/** nicmr_pd_alloc into an owning handle. */
inline int alloc_pd(nicmr_device *dev, PdPtr *out) noexcept
{
	nicmr_pd *p = nullptr;
	int rc = nicmr_pd_alloc(dev, &p);
	if (rc == 0)
		out->reset(p);
	return rc;
}

/** nicmr_mr_reg into an owning handle. */
inline int reg_mr(nicmr_pd *pd, void *addr, size_t len, uint64_t access, MrPtr *out,
		  uint64_t flags = 0, uint64_t requested_key = 0) noexcept
{
	nicmr_mr *m = nullptr;
	int rc = nicmr_mr_reg(pd, addr, len, access, flags, requested_key, &m);
	if (rc == 0)
		out->reset(m);
	return rc;
}

/** nicmr_mr_reg_sub into an owning handle. */
inline int reg_sub_mr(nicmr_mr *base, size_t offset, size_t len, uint64_t access, MrPtr *out,
		      uint64_t flags = 0, uint64_t requested_key = 0) noexcept
{
	nicmr_mr *m = nullptr;
	int rc = nicmr_mr_reg_sub(base, offset, len, access, flags, requested_key, &m);
	if (rc == 0)
		out->reset(m);
	return rc;
}

/** nicmr_mr_regv into an owning handle. */
inline int reg_mr_vec(nicmr_pd *pd, const struct iovec *iov, size_t count, uint64_t access,
		      MrPtr *out, uint64_t flags = 0, uint64_t requested_key = 0) noexcept
{
	nicmr_mr *m = nullptr;
	int rc = nicmr_mr_regv(pd, iov, count, access, flags, requested_key, &m);
	if (rc == 0)
		out->reset(m);
	return rc;
}

/** nicmr_mr_reg_iova into an owning handle. */
inline int reg_mr_iova(nicmr_pd *pd, const nicmr_iova_seg *segs, size_t count, uint64_t access,
		       MrPtr *out, uint64_t flags = 0, uint64_t requested_key = 0) noexcept
{
	nicmr_mr *m = nullptr;
	int rc = nicmr_mr_reg_iova(pd, segs, count, access, flags, requested_key, &m);
	if (rc == 0)
		out->reset(m);
	return rc;
}

/** nicmr_mr_reg_pages into an owning handle. */
inline int reg_mr_pages(nicmr_pd *pd, const uint64_t *pages, size_t count, size_t page_size,
			size_t offset, size_t len, uint64_t access, MrPtr *out, uint64_t flags = 0,
			uint64_t requested_key = 0) noexcept
{
	nicmr_mr *m = nullptr;
	int rc = nicmr_mr_reg_pages(pd, pages, count, page_size, offset, len, access, flags,
				    requested_key, &m);
	if (rc == 0)
		out->reset(m);
	return rc;
}

/** nicmr_cntr_alloc into an owning handle (-EOPNOTSUPP without NICMR_EXT_RMA_EVENT). */
inline int alloc_cntr(nicmr_device *dev, CntrPtr *out) noexcept
{
	nicmr_cntr *c = nullptr;
	int rc = nicmr_cntr_alloc(dev, &c);
	if (rc == 0)
		out->reset(c);
	return rc;
}

/** A data-path reader registration for the current thread: unregisters when it goes. */
class ReaderScope {
public:
	ReaderScope(nicmr_device *dev, unsigned id) noexcept : dev_(dev), id_(id)
	{
		rc_ = nicmr_thread_register(dev, id);
	}
	~ReaderScope()
	{
		if (rc_ == 0)
			nicmr_thread_unregister(dev_, id_);
	}
	ReaderScope(const ReaderScope &) = delete;
	ReaderScope &operator=(const ReaderScope &) = delete;
	/** nicmr_thread_register's result. */
	int status() const noexcept { return rc_; }
	void quiescent() const noexcept { nicmr_thread_quiescent(dev_, id_); }

private:
	nicmr_device *dev_;
	unsigned id_;
	int rc_;
};

} // namespace nicmr

#endif
