/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fi_mr(3) on a nicmr domain: reg, regv, regattr, close, raw keys, bind/refresh/enable. Every
 * argument is checked here, before the native call, so that each bad input gets fi_mr(3)'s
 * code and nothing is made; the native API then registers (fast path inside a pool, slow path
 * for memory the application allocated itself).
 *
 * RMA events and single-use keys are device-model extensions (no ConnectX has them), offered
 * only when the device says so (Domain::ext):
 *
 *   fi_mr_reg(FI_RMA_EVENT)                 nicmr_mr_reg(NICMR_MR_RMA_EVENT): created disabled
 *   fi_mr_bind(mr, cntr, FI_REMOTE_WRITE)   nicmr_mr_bind_cntr(mr, cntr's native counter)
 *   fi_mr_enable(mr)                        nicmr_mr_enable
 *   fi_close(mr) with a counter bound       nicmr_mr_unbind_cntr, then nicmr_mr_dereg
 *   regattr(FI_NICMR_MR_SINGLE_USE)         nicmr_mr_reg(NICMR_MR_SINGLE_USE)
 *
 * On-demand paging is a device feature (nicmr_device_attr.odp, Domain::odp):
 *
 *   fi_mr_reg / regattr(FI_NICMR_MR_ON_DEMAND)  nicmr_mr_reg(access | NICMR_ACCESS_ON_DEMAND)
 *   fi_nicmr_mr_ops.advise                      nicmr_advise_mr
 */
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>

#include <rdma/providers/fi_log.h>

#include "fi_access.h"
#include "fi_internal.h"

namespace nicmr::fabric {

namespace {

/* Single-use through the ops extension, or 2.x's flag (0 under 1.x headers). */
constexpr uint64_t kSingleUse = FI_NICMR_MR_SINGLE_USE | kStdSingleUse;

extern struct fi_ops mr_fi_ops;

/* Marks an MR's slot closed: a stale fid of it is no MR (mr_of refuses it). Before the native
 * deregistration gives the key's index back, while the slot is still this MR's. */
void mark_closed(Mr *mr)
{
	mr->fid.fid.fclass = FI_CLASS_UNSPEC;
	mr->fid.fid.ops = nullptr;
}
/* Undoes mark_closed when the deregistration failed (the MR stays registered). */
void mark_open(Mr *mr)
{
	mr->fid.fid.fclass = FI_CLASS_MR;
	mr->fid.fid.ops = &mr_fi_ops;
}

/* fi_close of an MR with a counter bound. fi_mr(3) and fi_cntr(3) each say the close is busy
 * while the other is associated, which read together leave no order; nicmr takes the model
 * libfabric uses for endpoints: the bound object holds the binding and its close drops it.
 * So the MR's close unbinds (and disables) it first, and a failed deregistration binds and
 * enables it again, leaving it as it was. Slow path (device commands), domain->ext_mu held. */
int dereg_bound(Mr *mr, const nicmr_mr_info &was)
{
	int ret = nicmr_mr_unbind_cntr(mr->mr);
	if (ret != 0)
		return fi_code(ret);
	ret = nicmr_mr_dereg(mr->mr);
	if (ret == 0)
		return 0;
	int again = nicmr_mr_bind_cntr(mr->mr, was.cntr, NICMR_REMOTE_WRITE);
	if (again == 0 && was.enabled)
		again = nicmr_mr_enable(mr->mr);
	if (again != 0)
		FI_WARN(&provider, FI_LOG_MR, "MR %#x: binding not restored: %d\n",
			nicmr_mr_key(mr->mr), again);
	return fi_code(ret);
}

int mr_close(struct fid *fid)
{
	/* Deregistration, provider side: no lock, no allocation, no system call (the slot is
	 * marked closed); the native nicmr_mr_dereg is the registration engine's path. Only an
	 * MR with a counter bound, which the native call refuses (-EBUSY), takes the domain's
	 * ext_mu (its binding). Once the native call returns 0, the index may be another
	 * registration's: the slot is not read after it. */
	Mr *mr = reinterpret_cast<Mr *>(fid);
	mark_closed(mr);
	int ret = nicmr_mr_dereg(mr->mr);
	if (ret == -EBUSY) {
		std::lock_guard lk(mr->domain->ext_mu);
		nicmr_mr_info info;
		if (nicmr_mr_query(mr->mr, &info) == 0 && info.cntr != nullptr)
			ret = dereg_bound(mr, info);
	}
	if (ret != 0) {
		mark_open(mr);
		return fi_code(ret); /* still registered (and bound): the application may retry */
	}
	return 0;
}

/* fi_mr_bind. An endpoint: nicmr never asks for FI_MR_ENDPOINT (an MR serves every endpoint of
 * its domain from registration on), so there is nothing to bind: -FI_ENOSYS. A counter: only
 * in a domain with FI_MR_RMA_EVENT (else fi_mr(3)'s -FI_ENOSYS for a provider without access
 * events), to an MR registered with FI_RMA_EVENT and not enabled yet, with FI_REMOTE_WRITE. */
int mr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	Mr *mr = reinterpret_cast<Mr *>(fid);
	if (!bfid)
		return -FI_EINVAL;
	if (bfid->fclass == FI_CLASS_EP)
		return -FI_ENOSYS;
	if (bfid->fclass != FI_CLASS_CNTR)
		return -FI_EINVAL; /* nothing else binds to an MR */
	Domain *dom = mr->domain;
	if (!(dom->mr_mode & FI_MR_RMA_EVENT))
		return -FI_ENOSYS;
	Cntr *c = cntr_of(bfid);
	if (!c || c->domain != dom)
		return -FI_EINVAL; /* not a counter of this domain */
	/* The device counts remote writes and atomics (fi_mr(3)'s one event kind). */
	if (flags != FI_REMOTE_WRITE)
		return -FI_EBADFLAGS;
	std::lock_guard lk(dom->ext_mu);
	nicmr_mr_info info;
	int ret = fi_code(nicmr_mr_query(mr->mr, &info));
	if (ret != 0)
		return ret;
	if (!(info.flags & NICMR_MR_RMA_EVENT))
		return -FI_EINVAL; /* fi_mr(3): say FI_RMA_EVENT at registration */
	/* fi_mr(3): no bindings after fi_mr_enable; the device holds one counter per MR. */
	if (info.enabled || info.cntr)
		return -FI_EBUSY;
	nicmr_cntr *n = nullptr;
	ret = cntr_native(c, &n);
	if (ret != 0)
		return ret;
	return fi_code(nicmr_mr_bind_cntr(mr->mr, n, NICMR_REMOTE_WRITE));
}

/* fi_mr_enable: an RMA-event MR starts taking remote access (and counting into its counter);
 * any other MR was enabled by its registration. Enabling twice is 0. */
int mr_enable(Mr *mr)
{
	std::lock_guard lk(mr->domain->ext_mu);
	nicmr_mr_info info;
	const int ret = fi_code(nicmr_mr_query(mr->mr, &info));
	if (ret != 0 || info.enabled)
		return ret;
	return fi_code(nicmr_mr_enable(mr->mr)); /* on failure still disabled */
}

int mr_raw_attr(Mr *mr, struct fi_mr_raw_attr *attr)
{
	if (!attr || !attr->key_size)
		return -FI_EINVAL;
	if (attr->flags)
		return -FI_EBADFLAGS;
	if (*attr->key_size < kRawKeySize) {
		*attr->key_size = kRawKeySize;
		return -FI_ETOOSMALL;
	}
	if (!attr->raw_key)
		return -FI_EINVAL;
	size_t size = *attr->key_size;
	int ret = nicmr_mr_raw_attr(mr->mr, attr->raw_key, &size);
	if (ret == -ENOSPC) {
		*attr->key_size = size;
		return -FI_ETOOSMALL;
	}
	if (ret != 0)
		return fi_code(ret);
	*attr->key_size = size;
	if (attr->base_addr) {
		/* The address a peer targets: the VA, or 0 for an offset-based region. */
		*attr->base_addr = (mr->domain->mr_mode & FI_MR_VIRT_ADDR)
					   ? reinterpret_cast<uintptr_t>(nicmr_mr_addr(mr->mr))
					   : 0;
	}
	return 0;
}

/* fi_mr_refresh: the pages behind the region may have changed. nicmr_mr_refresh maps them anew
 * under the same key and the MR stays enabled throughout (fi_mr(3) without FI_MR_MMU_NOTIFY). */
int mr_refresh(Mr *mr, const struct fi_mr_modify *m)
{
	if (m == nullptr || (m->attr.mr_iov == nullptr && m->attr.iov_count != 0))
		return -FI_EINVAL;
	if (m->flags != 0)
		return -FI_EBADFLAGS;
	const int rc = nicmr_mr_refresh(mr->mr, m->attr.mr_iov, m->attr.iov_count);
	/* Sub-MRs and vectored MRs cannot be refreshed: fi_mr(3)'s word for that is ENOSYS. A
	 * range outside the region is bad input (libfabric has no ERANGE). */
	if (rc == -EOPNOTSUPP)
		return -FI_ENOSYS;
	return rc == -ERANGE ? -FI_EINVAL : fi_code(rc);
}

int mr_control(struct fid *fid, int command, void *arg)
{
	Mr *mr = reinterpret_cast<Mr *>(fid);
	switch (command) {
	case FI_GET_RAW_MR:
		return mr_raw_attr(mr, static_cast<struct fi_mr_raw_attr *>(arg));
	case FI_REFRESH:
		return mr_refresh(mr, static_cast<const struct fi_mr_modify *>(arg));
	case FI_ENABLE:
		return mr_enable(mr);
	default:
		return -FI_ENOSYS;
	}
}

struct fi_ops mr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mr_close,
	.bind = mr_bind,
	.control = mr_control,
	.ops_open = no_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

Domain *domain_of(struct fid *fid)
{
	if (!fid || fid->fclass != FI_CLASS_DOMAIN)
		return nullptr;
	return reinterpret_cast<Domain *>(fid);
}

/* 2.x's page_size: 0 (nicmr's choice), or a size the translations of [buf, buf + len) can use:
 * one the device's mkeys take, no larger than the pages backing the memory, and for an
 * offset-based MR a divisor of the start (offset 0 begins a translation page). */
int check_page_size(Domain *dom, const void *buf, size_t len, size_t page_size)
{
	if (page_size == 0)
		return 0;
	if (page_size < kMinPageSize || page_size > kMaxPageSize ||
	    (page_size & (page_size - 1)) != 0)
		return -FI_EINVAL;
	const auto a = reinterpret_cast<uintptr_t>(buf);
	/* The pages backing the memory: its pool's (nicmr_pool_page_size), else 4 KiB. */
	const nicmr_pool *pool = nicmr_pool_find(dom->fabric->dev, buf, len);
	if (page_size > (pool != nullptr ? nicmr_pool_page_size(pool) : NICMR_PAGE_4K))
		return -FI_EINVAL;
	if (!(dom->mr_mode & FI_MR_VIRT_ADDR) && a % page_size != 0)
		return -FI_EINVAL;
	return 0;
}

/* The key the domain's mr_mode asks for: the device's (PROV_KEY) or the application's. */
int key_flags(Domain *dom, uint64_t requested_key, uint64_t *nflags, uint64_t *key)
{
	*nflags = 0;
	*key = 0;
	if (!(dom->mr_mode & FI_MR_PROV_KEY)) {
		/* The application picks the key; it must be an mkey of this device. */
		if (requested_key > UINT32_MAX)
			return -FI_EKEYREJECTED;
		*nflags |= NICMR_MR_REQUESTED_KEY;
		*key = requested_key;
	}
	return 0;
}

/* The native flags of a one-range registration's extension flags: FI_RMA_EVENT (a domain
 * with FI_MR_RMA_EVENT, else -FI_EBADFLAGS as any flag the domain does not take) and
 * single-use (-FI_EOPNOTSUPP on a device without the extension); -FI_EBADFLAGS for any
 * other flag. */
int ext_flags(const Domain *dom, uint64_t flags, uint64_t *nflags)
{
	uint64_t known = kSingleUse | FI_NICMR_MR_ON_DEMAND;
	if (dom->mr_mode & FI_MR_RMA_EVENT)
		known |= FI_RMA_EVENT;
	if (flags & ~known)
		return -FI_EBADFLAGS;
	/* On-demand MRs take no other flag, and their addresses are virtual (doc/odp.md). */
	if ((flags & FI_NICMR_MR_ON_DEMAND) &&
	    ((flags & (kSingleUse | FI_RMA_EVENT)) || !(dom->mr_mode & FI_MR_VIRT_ADDR)))
		return -FI_EBADFLAGS;
	if ((flags & FI_NICMR_MR_ON_DEMAND) && !dom->odp)
		return -FI_EOPNOTSUPP;
	if ((flags & kSingleUse) && !(dom->ext & NICMR_EXT_SINGLE_USE))
		return -FI_EOPNOTSUPP;
	*nflags |= (flags & FI_RMA_EVENT) ? NICMR_MR_RMA_EVENT : 0;
	*nflags |= (flags & kSingleUse) ? NICMR_MR_SINGLE_USE : 0;
	return 0;
}

/* Fills the slot of the native MR n, registered by the calling thread (plain stores: the
 * slot is this registration's until its fi_close), and hands out its fid. */
struct fid_mr *publish(Domain *dom, nicmr_mr *n, void *context)
{
	const uint32_t key = nicmr_mr_key(n);
	Mr *mr = mr_slot(dom->fabric, key);
	mr->domain = dom;
	mr->mr = n;
	mr->fid.fid.fclass = FI_CLASS_MR;
	mr->fid.fid.context = context;
	mr->fid.fid.ops = &mr_fi_ops;
	mr->fid.mem_desc = mr;
	/* Under FI_MR_RAW the key travels as the raw blob (fi_mr_raw_attr), never as 64 bits. */
	mr->fid.key = (dom->mr_mode & FI_MR_RAW) ? FI_KEY_NOTAVAIL : key;
	return &mr->fid;
}

int reg_one(Domain *dom, const void *buf, size_t len, uint64_t access, uint64_t offset,
	    uint64_t requested_key, uint64_t flags, size_t page_size, struct fid_mr **out,
	    void *context)
{
	/* Registration, provider side: no lock, no allocation, no system call (the Mr is the
	 * slot of the key's index in the fabric's table; only a page_size takes the pools'
	 * lock). The native nicmr_mr_reg is the registration engine's path. */
	if (!dom || !out || !buf || len == 0)
		return -FI_EINVAL;
	uint64_t xflags = 0;
	int ret = ext_flags(dom, flags, &xflags);
	if (ret != 0)
		return ret;
	uint64_t naccess = 0;
	if (offset != 0 || native_access(access, &naccess) != 0)
		return -FI_EINVAL;
	ret = check_page_size(dom, buf, len, page_size);
	if (ret != 0)
		return ret;
	uint64_t nflags = 0;
	uint64_t key = 0;
	ret = key_flags(dom, requested_key, &nflags, &key);
	if (ret != 0)
		return ret;
	nflags |= xflags;
	if (!(dom->mr_mode & FI_MR_VIRT_ADDR))
		nflags |= NICMR_MR_ZERO_BASED;
	/* page_size is only checked: the native registration translates with the largest page
	 * the placement allows, which the checks above make at least page_size. */
	nicmr_mr *n = nullptr;
	/* The on-demand flag is an access bit of the native API. */
	if (flags & FI_NICMR_MR_ON_DEMAND)
		naccess |= NICMR_ACCESS_ON_DEMAND;
	ret = nicmr_mr_reg(dom->pd, const_cast<void *>(buf), len, naccess, nflags, key, &n);
	if (ret != 0)
		return fi_code(ret);
	*out = publish(dom, n, context);
	return 0;
}

/* fi_mr_regv / fi_mr_regattr with more than one segment: the native vectored registration (a
 * slow path: each segment mapped, one MTT mkey or a KLM mkey over inner keys). The provider
 * side allocates nothing here either: the Mr is the key's slot, and the native MR keeps the
 * segments' virtual ranges (nicmr_mr_addr_of). */
int reg_vec(Domain *dom, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset,
	    uint64_t requested_key, uint64_t flags, size_t page_size, struct fid_mr **out,
	    void *context)
{
	if (!dom || !out || !iov || count == 0 || count > NICMR_MAX_IOV)
		return -FI_EINVAL; /* count above mr_iov_limit */
	for (size_t i = 0; i < count; i++) {
		if (!iov[i].iov_base || iov[i].iov_len == 0)
			return -FI_EINVAL; /* fi_mr_regv has no empty segment */
	}
	/* FI_RMA_EVENT and single-use included: the device has them for one-range keys only. */
	if (flags)
		return -FI_EBADFLAGS;
	/* A page size cannot be promised: the native call picks one for every run, or gives each
	 * segment its own inner key. */
	uint64_t naccess = 0;
	if (offset != 0 || native_access(access, &naccess) != 0 || page_size != 0)
		return -FI_EINVAL;
	uint64_t nflags = 0;
	uint64_t key = 0;
	int ret = key_flags(dom, requested_key, &nflags, &key);
	if (ret != 0)
		return ret;
	if (!(dom->mr_mode & FI_MR_VIRT_ADDR))
		nflags |= NICMR_MR_ZERO_BASED; /* no alignment needed here (doc/native-api.md) */
	nicmr_mr *n = nullptr;
	ret = nicmr_mr_regv(dom->pd, iov, count, naccess, nflags, key, &n);
	if (ret != 0) {
		/* The flags were checked above: -EOPNOTSUPP is the device's, a region that needs
		 * an indirect (KLM) key on a device without mkey_by_name. */
		return ret == -EOPNOTSUPP ? -FI_EOPNOTSUPP : fi_code(ret);
	}
	*out = publish(dom, n, context);
	return 0;
}

/* A sub-MR of base: [buf, buf + len) inside base's range, its own key and access. */
int reg_sub(Domain *dom, Mr *base, const void *buf, size_t len, uint64_t access, uint64_t offset,
	    uint64_t requested_key, uint64_t flags, size_t page_size, struct fid_mr **out,
	    void *context)
{
	if (!dom || !out || !buf || len == 0)
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS; /* the extensions' flags included: a sub-MR has neither */
	uint64_t naccess = 0;
	if (offset != 0 || native_access(access, &naccess) != 0)
		return -FI_EINVAL;
	/* The sub-MR shares base's translations, so it has no page size of its own; a vectored
	 * base has no one IOVA range to share; a single-use or RMA-event base is no base (a
	 * sub-MR's key would bypass its one use and its counting). */
	nicmr_mr_info b_info;
	if (base->domain != dom || page_size != 0 || nicmr_mr_query(base->mr, &b_info) != 0 ||
	    b_info.segments > 1 || (b_info.flags & (NICMR_MR_RMA_EVENT | NICMR_MR_SINGLE_USE)))
		return -FI_EINVAL;
	const auto a = reinterpret_cast<uintptr_t>(buf);
	const auto b = reinterpret_cast<uintptr_t>(nicmr_mr_addr(base->mr));
	if (a < b)
		return -FI_EINVAL; /* not inside base */
	uint64_t nflags = 0;
	uint64_t key = 0;
	int ret = key_flags(dom, requested_key, &nflags, &key);
	if (ret != 0)
		return ret;
	nicmr_mr *n = nullptr;
	ret = nicmr_mr_reg_sub(base->mr, a - b, len, naccess, nflags, key, &n);
	if (ret != 0) {
		/* -ERANGE: not inside base (libfabric has no FI_ERANGE); -EACCES: access beyond
		 * base's is -FI_EACCES. */
		return ret == -ERANGE ? -FI_EINVAL : fi_code(ret);
	}
	*out = publish(dom, n, context);
	return 0;
}

int check_attr(const struct fi_mr_attr *attr)
{
	/* iov_count 1 .. mr_iov_limit; the segments are checked by reg_one / reg_vec. */
	if (!attr || !attr->mr_iov || attr->iov_count == 0 || attr->iov_count > NICMR_MAX_IOV ||
	    attr->auth_key_size)
		return -FI_EINVAL;
	if (attr->iface != FI_HMEM_SYSTEM)
		return -FI_ENOSYS; /* device memory is not offered */
	return 0;
}

int is_sub(struct fid_mr *fmr)
{
	Mr *mr = mr_of(fmr);
	nicmr_mr_info info;
	if (!mr || nicmr_mr_query(mr->mr, &info) != 0)
		return -FI_EINVAL;
	return info.base != nullptr ? 1 : 0;
}

int ext_regattr(struct fid_domain *domain, const struct fi_mr_attr *attr, struct fid_mr *base_mr,
		size_t page_size, uint64_t flags, struct fid_mr **mr)
{
	if (!domain)
		return -FI_EINVAL;
	/* The one entry that takes FI_NICMR_MR_SINGLE_USE. */
	return mr_regattr_ext(&domain->fid, attr, base_mr, page_size, flags, mr);
}

/* fi_nicmr_mr_ops.advise: one element of the native nicmr_advise_mr, under the MR's key. */
int advise(struct fid_mr *fmr, uint32_t advice, uint32_t flags, uint64_t addr, size_t len)
{
	Mr *mr = mr_of(fmr);
	if (!mr || len > UINT32_MAX)
		return -FI_EINVAL;
	if (!mr->domain->odp)
		return -FI_EOPNOTSUPP;
	const nicmr_sge g{addr, static_cast<uint32_t>(len), nicmr_mr_key(mr->mr)};
	const int ret = nicmr_advise_mr(mr->domain->pd, advice, flags, &g, 1);
	/* ibv_advise_mr(3)'s EOPNOTSUPP is an unknown advice here, not a flag. */
	return ret == -EOPNOTSUPP ? -FI_EOPNOTSUPP : fi_code(ret);
}

struct fi_nicmr_mr_ops mr_ext_ops = {
	.size = sizeof(struct fi_nicmr_mr_ops),
	.regattr = ext_regattr,
	.mr_is_sub = is_sub,
	.advise = advise,
};

} // namespace

int mr_ops_open(Domain *, void **ops)
{
	*ops = &mr_ext_ops;
	return 0;
}

int mr_table_map(Fabric *fab, uint32_t mkey_count)
{
	/* Zero-filled, populated page by page as keys are first used, as the native API's MR
	 * table (api_device.cpp): 56 bytes of address space per mkey index, reserved nowhere
	 * else (MAP_NORESERVE). */
	static_assert(std::is_trivially_destructible_v<Mr>, "slots are never destroyed");
	const size_t bytes = size_t{mkey_count} * sizeof(Mr);
	void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		FI_WARN(&provider, FI_LOG_DOMAIN, "MR table of %u keys (%zu bytes): %s\n",
			mkey_count, bytes, std::strerror(errno));
		return -FI_ENOMEM;
	}
	fab->mrs = static_cast<Mr *>(m);
	fab->mr_slots = mkey_count;
	return 0;
}

void mr_table_unmap(Fabric *fab)
{
	if (fab->mrs)
		munmap(fab->mrs, fab->mr_slots * sizeof(Mr));
	fab->mrs = nullptr;
	fab->mr_slots = 0;
}

Mr *mr_of(struct fid_mr *fmr)
{
	if (!fmr || fmr->fid.fclass != FI_CLASS_MR || fmr->fid.ops != &mr_fi_ops)
		return nullptr;
	return reinterpret_cast<Mr *>(fmr);
}

int mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
	   uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
	/* nicmr's single-use flag belongs to the ops extension's regattr alone. */
	if (flags & FI_NICMR_MR_SINGLE_USE)
		return -FI_EBADFLAGS;
	return reg_one(domain_of(fid), buf, len, access, offset, requested_key, flags, 0, mr,
		       context);
}

int mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access,
	    uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
	    void *context)
{
	/* One segment is fi_mr_reg (the fast path inside a pool); more are the native vectored
	 * registration, up to mr_iov_limit (NICMR_MAX_IOV). */
	if (!iov || count == 0 || count > NICMR_MAX_IOV)
		return -FI_EINVAL;
	if (flags & FI_NICMR_MR_SINGLE_USE)
		return -FI_EBADFLAGS;
	if (count == 1)
		return reg_one(domain_of(fid), iov[0].iov_base, iov[0].iov_len, access, offset,
			       requested_key, flags, 0, mr, context);
	return reg_vec(domain_of(fid), iov, count, access, offset, requested_key, flags, 0, mr,
		       context);
}

int mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr)
{
	if (flags & FI_NICMR_MR_SINGLE_USE)
		return -FI_EBADFLAGS;
#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(2, 0))
	/* 2.x headers: base_mr and page_size are fields of the attributes. */
	if (!attr)
		return -FI_EINVAL;
	return mr_regattr_ext(fid, attr, attr->base_mr, attr->page_size, flags, mr);
#else
	return mr_regattr_ext(fid, attr, nullptr, 0, flags, mr);
#endif
}

int mr_regattr_ext(struct fid *fid, const struct fi_mr_attr *attr, struct fid_mr *base_mr,
		   size_t page_size, uint64_t flags, struct fid_mr **mr)
{
	int ret = check_attr(attr);
	if (ret != 0)
		return ret;
	const struct iovec &iov = attr->mr_iov[0];
	if (base_mr) {
		Mr *base = mr_of(base_mr);
		if (!base || attr->iov_count != 1)
			return -FI_EINVAL; /* a sub-MR is one range of its base */
		return reg_sub(domain_of(fid), base, iov.iov_base, iov.iov_len, attr->access,
			       attr->offset, attr->requested_key, flags, page_size, mr,
			       attr->context);
	}
	if (attr->iov_count > 1)
		return reg_vec(domain_of(fid), attr->mr_iov, attr->iov_count, attr->access,
			       attr->offset, attr->requested_key, flags, page_size, mr,
			       attr->context);
	return reg_one(domain_of(fid), iov.iov_base, iov.iov_len, attr->access, attr->offset,
		       attr->requested_key, flags, page_size, mr, attr->context);
}

int mr_map_raw(Domain *dom, struct fi_mr_map_raw *map)
{
	if (!map || !map->raw_key || !map->key)
		return -FI_EINVAL;
	if (map->flags)
		return -FI_EBADFLAGS;
	/* The blob carries its own base address and length, checked by the native decoder;
	 * map->base_addr is not needed to name the key. */
	uint64_t key = 0;
	int ret = nicmr_mr_map_raw(dom->fabric->dev, map->raw_key, map->key_size, &key);
	if (ret != 0)
		return fi_code(ret);
	*map->key = key;
	return 0;
}

int mr_unmap_key(Domain *dom, const uint64_t *key)
{
	if (!key)
		return -FI_EINVAL;
	return fi_code(nicmr_mr_unmap_key(dom->fabric->dev, *key));
}

} // namespace nicmr::fabric
