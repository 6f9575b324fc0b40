/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fi_mr(3) on a nicmr domain: reg, regv, regattr, close, raw keys, bind/refresh/enable. Every
 * argument is checked here, before the native call, so that each bad input gets fi_mr(3)'s
 * code and nothing is made; the native API then registers (fast path inside a pool, slow path
 * for memory the application allocated itself).
 */
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>

#include "fi_internal.h"

namespace nicmr::fabric {

namespace {

constexpr uint64_t kFiAccess =
	FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

uint64_t native_access(uint64_t access)
{
	uint64_t a = 0;
	a |= (access & FI_SEND) ? NICMR_ACCESS_SEND : 0;
	a |= (access & FI_RECV) ? NICMR_ACCESS_RECV : 0;
	a |= (access & FI_READ) ? NICMR_ACCESS_READ : 0;
	a |= (access & FI_WRITE) ? NICMR_ACCESS_WRITE : 0;
	a |= (access & FI_REMOTE_READ) ? NICMR_ACCESS_REMOTE_READ : 0;
	a |= (access & FI_REMOTE_WRITE) ? NICMR_ACCESS_REMOTE_WRITE : 0;
	return a;
}

/* Gives a provider MR object (and its run table) back to its domain's stores. No lock, no
 * allocation, no system call. */
void recycle(Domain *dom, Mr *mr)
{
	if (mr->vec)
		dom->vec_slab.put(mr->vec);
	mr->vec = nullptr;
	mr->mr = nullptr;
	mr->sub = false;
	mr->vectored = false;
	/* A stale fid of a closed MR is no MR: mr_of refuses it. */
	mr->fid.fid.fclass = FI_CLASS_UNSPEC;
	mr->fid.fid.ops = nullptr;
	dom->mr_slab.put(mr);
}

int mr_close(struct fid *fid)
{
	/* Deregistration, provider side: no lock, no allocation, no system call (the object
	 * goes back to the domain's store); the native nicmr_mr_dereg is the registration
	 * engine's path. */
	Mr *mr = reinterpret_cast<Mr *>(fid);
	int ret = nicmr_mr_dereg(mr->mr);
	if (ret != 0)
		return fi_code(ret); /* still registered: the application may retry */
	Domain *dom = mr->domain;
	recycle(dom, mr);
	/* release: the MR is gone and its object back in the store before domain_close may see
	 * the count drop (and free the stores). */
	dom->mrs.fetch_sub(1, std::memory_order_release);
	return 0;
}

int mr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	(void)fid;
	(void)flags;
	if (!bfid)
		return -FI_EINVAL;
	/* Counters and endpoints exist, but there is nothing to bind: a counter bound to an MR
	 * counts remote accesses to it (FI_REMOTE_WRITE, RMA events), which nicmr does not
	 * report (FI_MR_RMA_EVENT is never returned), and an MR is usable by every endpoint of
	 * its domain from registration on (FI_MR_ENDPOINT is never returned). fi_mr(3)'s code
	 * for a provider without access events is -FI_ENOSYS. */
	return -FI_ENOSYS;
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
		/* An MR is enabled when fi_mr_reg returns: nicmr never asks for FI_MR_ENDPOINT
		 * or FI_MR_RMA_EVENT, so enabling is a no-op. */
		return 0;
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
	if (page_size > backing_page_size(dom->fabric, a, len))
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

/* An object from one of the domain's stores: the fast path dequeues one; an empty store grows
 * by a batch (slow path). 0; -FI_ENOSPC (the store holds its bound: every key, or segmented
 * MR, is taken), -FI_ENOMEM (the batch). */
template <typename T, uint32_t kFirst> int take_from(Slab<T, kFirst> &slab, T **out)
{
	*out = slab.take();
	return *out ? 0 : fi_code(slab.grow(out));
}

/* Hands out a registered MR's fid. */
struct fid_mr *publish(Domain *dom, Mr *mr, void *context)
{
	mr->domain = dom;
	mr->fid.fid.fclass = FI_CLASS_MR;
	mr->fid.fid.context = context;
	mr->fid.fid.ops = &mr_fi_ops;
	mr->fid.mem_desc = mr;
	/* Under FI_MR_RAW the key travels as the raw blob (fi_mr_raw_attr), never as 64 bits. */
	mr->fid.key = (dom->mr_mode & FI_MR_RAW) ? FI_KEY_NOTAVAIL : nicmr_mr_key(mr->mr);
	/* relaxed: the MR reaches other threads through the application, not this count. */
	dom->mrs.fetch_add(1, std::memory_order_relaxed);
	return &mr->fid;
}

int reg_one(Domain *dom, const void *buf, size_t len, uint64_t access, uint64_t offset,
	    uint64_t requested_key, uint64_t flags, size_t page_size, struct fid_mr **out,
	    void *context)
{
	/* Registration, provider side: no lock, no allocation, no system call (the Mr comes from
	 * the domain's store; only an empty store grows, by a batch, and only a page_size takes
	 * the pools' lock). The native nicmr_mr_reg is the registration engine's path. */
	if (!dom || !out || !buf || len == 0)
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS; /* FI_RMA_EVENT included: the domain has no RMA events */
	if (offset != 0 || (access & ~kFiAccess))
		return -FI_EINVAL;
	int ret = check_page_size(dom, buf, len, page_size);
	if (ret != 0)
		return ret;
	uint64_t nflags = 0;
	uint64_t key = 0;
	ret = key_flags(dom, requested_key, &nflags, &key);
	if (ret != 0)
		return ret;
	if (!(dom->mr_mode & FI_MR_VIRT_ADDR))
		nflags |= NICMR_MR_ZERO_BASED;
	Mr *mr = nullptr;
	ret = take_from(dom->mr_slab, &mr);
	if (ret != 0)
		return ret;
	/* page_size is only checked: the native registration translates with the largest page
	 * the placement allows, which the checks above make at least page_size. */
	ret = nicmr_mr_reg(dom->pd, const_cast<void *>(buf), len, native_access(access), nflags,
			   key, &mr->mr);
	if (ret != 0) {
		recycle(dom, mr);
		return fi_code(ret);
	}
	*out = publish(dom, mr, context);
	return 0;
}

/* Fills vec with the runs of iov (consecutive segments that are virtually contiguous merge).
 * Returns the number of runs. */
uint32_t vec_runs(const struct iovec *iov, size_t count, VecMap *vec)
{
	uint32_t n = 0;
	uint64_t off = 0;
	for (size_t i = 0; i < count; i++) {
		const auto a = reinterpret_cast<uintptr_t>(iov[i].iov_base);
		if (n > 0 && vec->runs[n - 1].va + vec->runs[n - 1].len == a) {
			vec->runs[n - 1].len += iov[i].iov_len;
		} else {
			vec->runs[n] = {a, off, iov[i].iov_len};
			n++;
		}
		off += iov[i].iov_len;
	}
	vec->count = n;
	return n;
}

/* fi_mr_regv / fi_mr_regattr with more than one segment: the native vectored registration (a
 * slow path: each segment mapped, one MTT mkey or a KLM mkey over inner keys). The provider
 * side allocates nothing here either: the Mr and the run table come from the domain's stores.
 */
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
	if (flags)
		return -FI_EBADFLAGS;
	/* A page size cannot be promised: the native call picks one for every run, or gives each
	 * segment its own inner key. */
	if (offset != 0 || (access & ~kFiAccess) || page_size != 0)
		return -FI_EINVAL;
	uint64_t nflags = 0;
	uint64_t key = 0;
	int ret = key_flags(dom, requested_key, &nflags, &key);
	if (ret != 0)
		return ret;
	if (!(dom->mr_mode & FI_MR_VIRT_ADDR))
		nflags |= NICMR_MR_ZERO_BASED; /* no alignment needed here (doc/native-api.md) */
	Mr *mr = nullptr;
	ret = take_from(dom->mr_slab, &mr);
	if (ret != 0)
		return ret;
	VecMap *vec = nullptr;
	ret = take_from(dom->vec_slab, &vec);
	if (ret != 0) {
		recycle(dom, mr);
		return ret;
	}
	mr->vec = vec;
	mr->vectored = true;
	ret = nicmr_mr_regv(dom->pd, iov, count, native_access(access), nflags, key, &mr->mr);
	if (ret != 0) {
		recycle(dom, mr);
		return fi_code(ret);
	}
	if (vec_runs(iov, count, vec) == 1) {
		/* One virtually contiguous range: local addresses need no table. */
		dom->vec_slab.put(vec);
		mr->vec = nullptr;
	}
	*out = publish(dom, mr, context);
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
		return -FI_EBADFLAGS;
	if (offset != 0 || (access & ~kFiAccess))
		return -FI_EINVAL;
	/* The sub-MR shares base's translations, so it has no page size of its own; a vectored
	 * base has no one IOVA range to share. */
	if (base->domain != dom || page_size != 0 || base->vectored)
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
	Mr *mr = nullptr;
	ret = take_from(dom->mr_slab, &mr);
	if (ret != 0)
		return ret;
	ret = nicmr_mr_reg_sub(base->mr, a - b, len, native_access(access), nflags, key, &mr->mr);
	if (ret != 0) {
		recycle(dom, mr);
		/* -ERANGE: not inside base (libfabric has no FI_ERANGE); -EACCES: access beyond
		 * base's is -FI_EACCES. */
		return ret == -ERANGE ? -FI_EINVAL : fi_code(ret);
	}
	mr->sub = true;
	*out = publish(dom, mr, context);
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
	return mr ? (mr->sub ? 1 : 0) : -FI_EINVAL;
}

int ext_regattr(struct fid_domain *domain, const struct fi_mr_attr *attr, struct fid_mr *base_mr,
		size_t page_size, uint64_t flags, struct fid_mr **mr)
{
	if (!domain)
		return -FI_EINVAL;
	return mr_regattr_ext(&domain->fid, attr, base_mr, page_size, flags, mr);
}

struct fi_nicmr_mr_ops mr_ext_ops = {
	.size = sizeof(struct fi_nicmr_mr_ops),
	.regattr = ext_regattr,
	.mr_is_sub = is_sub,
};

} // namespace

int mr_ops_open(Domain *, void **ops)
{
	*ops = &mr_ext_ops;
	return 0;
}

int mr_local_addr(const Mr *mr, const void *buf, size_t len, uint64_t *addr)
{
	/* POSTING PATH: no lock, no allocation, no system call (at most NICMR_MAX_IOV runs). */
	const auto a = reinterpret_cast<uintptr_t>(buf);
	const bool va = (mr->domain->mr_mode & FI_MR_VIRT_ADDR) != 0;
	const auto start = reinterpret_cast<uintptr_t>(nicmr_mr_addr(mr->mr));
	if (!mr->vec) {
		/* One range: the VA, or its offset (the key's checks refuse what is outside). */
		*addr = va ? a : a - start;
		return 0;
	}
	const VecMap *v = mr->vec;
	for (uint32_t i = 0; i < v->count; i++) {
		const VecRun &r = v->runs[i];
		if (a >= r.va && len <= r.len && a - r.va <= r.len - len) {
			*addr = (va ? start : 0) + r.off + (a - r.va);
			return 0;
		}
	}
	return -FI_EACCES;
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
	if (count == 1)
		return reg_one(domain_of(fid), iov[0].iov_base, iov[0].iov_len, access, offset,
			       requested_key, flags, 0, mr, context);
	return reg_vec(domain_of(fid), iov, count, access, offset, requested_key, flags, 0, mr,
		       context);
}

int mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr)
{
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
