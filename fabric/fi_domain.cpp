/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fabric and domain fids, and the "nicmr_pool_ops" extension. A fabric opens its device when
 * the first domain opens (so fi_fabric alone costs nothing) and closes it in fi_close; each
 * domain is one PD of that device. Every call that makes an object checks its arguments
 * first and undoes what it made when a later step fails.
 */
#include <netinet/in.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <rdma/providers/fi_log.h>

#include "fi_internal.h"

namespace nicmr::fabric {

namespace {

/* The devices fabrics share (DeviceShare), by spec. Slow path: fi_domain and fi_close. */
std::mutex g_shares_mu;
std::vector<DeviceShare *> g_shares; /* g_shares_mu */

/* Whether spec names one fixed address for its wire port (addr= other than auto): the one
 * case where a second device of the spec in the process could not bind its port. */
bool fixed_wire_address(const std::string &spec)
{
	const std::string v = spec_option(spec, "addr");
	return !v.empty() && v != "auto";
}

/* Whether the fabrics of spec share one device: a fixed wire address, or a device of the
 * machine (vfio:, devx:), which one process opens once (a VFIO group has one container). */
bool shared_by_spec(const std::string &spec)
{
	return fixed_wire_address(spec) || (spec != "emu" && spec.compare(0, 4, "emu:") != 0);
}

/* The device for spec: the process's open one when spec names a fixed wire address and a
 * fabric opened it already, else one opened now; null with the native open's error in *rc. */
DeviceShare *share_acquire(const std::string &spec, int *rc)
{
	const bool by_spec = shared_by_spec(spec);
	std::lock_guard lk(g_shares_mu);
	if (by_spec)
		for (DeviceShare *s : g_shares)
			if (s->spec == spec) {
				s->refs++;
				return s;
			}
	*rc = -ENOMEM;
	std::unique_ptr<DeviceShare> s(new (std::nothrow) DeviceShare);
	if (!s)
		return nullptr;
	s->spec = spec;
	if (by_spec) {
		try {
			g_shares.reserve(g_shares.size() + 1);
		} catch (const std::bad_alloc &) {
			return nullptr;
		}
	}
	*rc = nicmr_device_open(spec.c_str(), &s->dev);
	if (*rc != 0)
		return nullptr;
	s->refs = 1;
	s->listed = by_spec;
	if (by_spec)
		g_shares.push_back(s.get()); /* reserved above: cannot throw */
	return s.release();
}

/* A fabric is done with s: the last one closes the device. 0, or the native close's error
 * (the fabric keeps its share then, as it kept its device before). */
int share_release(DeviceShare *s)
{
	std::lock_guard lk(g_shares_mu);
	if (s->refs > 1) {
		s->refs--;
		return 0;
	}
	/* No endpoint is left (every domain closed): the GSI QP goes before the device. */
	gsi_destroy(s);
	const int rc = nicmr_device_close(s->dev);
	if (rc != 0)
		return rc;
	if (s->listed)
		std::erase(g_shares, s);
	delete s;
	return 0;
}

int fabric_close(struct fid *fid)
{
	Fabric *fab = reinterpret_cast<Fabric *>(fid);
	/* acquire: a domain's fi_close that gave the count back is done with the device. */
	if (fab->domains.load(std::memory_order_acquire) != 0 ||
	    fab->eqs.load(std::memory_order_acquire) != 0)
		return -FI_EBUSY;
	if (fab->sh) {
		int ret = share_release(fab->sh);
		if (ret != 0)
			return fi_code(ret);
	}
	mr_table_unmap(fab);
	delete fab;
	return 0;
}

int no_passive_ep(struct fid_fabric *, struct fi_info *, struct fid_pep **, void *)
{
	return -FI_ENOSYS;
}
int no_wait_open(struct fid_fabric *, struct fi_wait_attr *, struct fid_wait **)
{
	return -FI_ENOSYS;
}
/* fi_trywait(3) over EQs, CQs and counters with a descriptor: 0 when each is empty (and the CQs'
 * and counters' endpoints are armed), -FI_EAGAIN at the first that is not; -FI_EINVAL for any
 * other fid or one without a descriptor. */
int fabric_trywait(struct fid_fabric *, struct fid **fids, int count)
{
	if (!fids || count < 0)
		return -FI_EINVAL;
	for (int i = 0; i < count; i++) {
		int ret;
		if (Eq *eq = eq_of(fids[i]))
			ret = eq_trywait(eq);
		else if (Cq *cq = cq_of(fids[i]))
			ret = cq_trywait(cq);
		else if (Cntr *c = cntr_of(fids[i]))
			ret = cntr_trywait(c);
		else
			ret = -FI_EINVAL;
		if (ret != 0)
			return ret;
	}
	return 0;
}
int no_domain2(struct fid_fabric *, struct fi_info *, struct fid_domain **, uint64_t, void *)
{
	return -FI_ENOSYS;
}

struct fi_ops fabric_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = fabric_close,
	.bind = no_bind,
	.control = no_control,
	.ops_open = no_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

struct fi_ops_fabric fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = domain_open,
	.passive_ep = no_passive_ep,
	.eq_open = eq_open,
	.wait_open = no_wait_open,
	.trywait = fabric_trywait,
	.domain2 = no_domain2,
};

/* FI_MR_CACHE_MAX_SIZE / FI_MR_CACHE_MAX_COUNT (fi_mr(3), "Environment variables"): a
 * decimal number; anything else leaves the value of nicmr_mr_cache_params_init (logged). */
void cache_size_env(const char *name, size_t *out)
{
	const char *v = std::getenv(name);
	if (v == nullptr || *v == '\0')
		return;
	char *e = nullptr;
	errno = 0;
	const unsigned long long n = std::strtoull(v, &e, 10);
	if (errno != 0 || *e != '\0' || v[0] == '-') {
		FI_WARN(&provider, FI_LOG_MR, "%s=%s is not a number: ignored\n", name, v);
		return;
	}
	*out = static_cast<size_t>(n);
}

int domain_close(struct fid *fid)
{
	Domain *dom = reinterpret_cast<Domain *>(fid);
	/* acquire: pairs with the release of pool_destroy's and the children's closes, so the
	 * PD is freed only after their native calls are done with it. */
	if (dom->pools.load(std::memory_order_acquire) != 0 ||
	    dom->children.load(std::memory_order_acquire) != 0)
		return -FI_EBUSY;
	/* The endpoints are closed, so no cached registration is in use: the cache goes first,
	 * its MRs would keep the PD busy. */
	if (dom->local_cache) {
		int ret = nicmr_mr_cache_destroy(dom->local_cache);
		if (ret != 0)
			return fi_code(ret);
		dom->local_cache = nullptr;
	}
	/* Live MRs: the native PD counts them (its MR table's scan, a slow path) and says -EBUSY,
	 * -FI_EBUSY here, as fi_domain(3) wants while MRs are open. */
	int ret = nicmr_pd_free(dom->pd);
	if (ret != 0)
		return fi_code(ret);
	/* release: the PD is gone before fabric_close may see the count drop. */
	dom->fabric->domains.fetch_sub(1, std::memory_order_release);
	delete dom;
	return 0;
}

int domain_control(struct fid *fid, int command, void *arg)
{
	Domain *dom = reinterpret_cast<Domain *>(fid);
	switch (command) {
	case FI_MAP_RAW_MR:
		return mr_map_raw(dom, static_cast<struct fi_mr_map_raw *>(arg));
	case FI_UNMAP_KEY:
		return mr_unmap_key(dom, static_cast<const uint64_t *>(arg));
	default:
		return -FI_ENOSYS;
	}
}

int domain_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *)
{
	if (!name || !ops)
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS;
	if (std::strcmp(name, FI_NICMR_POOL_OPS) == 0)
		return pool_ops_open(reinterpret_cast<Domain *>(fid), ops);
	if (std::strcmp(name, FI_NICMR_MR_OPS) == 0)
		return mr_ops_open(reinterpret_cast<Domain *>(fid), ops);
	return -FI_ENOSYS;
}

struct fi_ops domain_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = domain_close,
	.bind = no_bind,
	.control = domain_control,
	.ops_open = domain_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

int no_endpoint(struct fid_domain *, struct fi_info *, struct fid_ep **, void *)
{
	return -FI_ENOSYS;
}
int no_poll_open(struct fid_domain *, struct fi_poll_attr *, struct fid_poll **)
{
	return -FI_ENOSYS;
}
int no_stx_ctx(struct fid_domain *, struct fi_tx_attr *, struct fid_stx **, void *)
{
	return -FI_ENOSYS;
}
int no_srx_ctx(struct fid_domain *, struct fi_rx_attr *, struct fid_ep **, void *)
{
	return -FI_ENOSYS;
}
int no_query_collective(struct fid_domain *, enum fi_collective_op, struct fi_collective_attr *,
			uint64_t)
{
	return -FI_ENOSYS;
}
int no_endpoint2(struct fid_domain *, struct fi_info *, struct fid_ep **, uint64_t, void *)
{
	return -FI_ENOSYS;
}

struct fi_ops_domain domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = av_open,
	.cq_open = cq_open,
	.endpoint = endpoint_open,
	.scalable_ep = no_endpoint,
	.cntr_open = cntr_open,
	.poll_open = no_poll_open,
	.stx_ctx = no_stx_ctx,
	.srx_ctx = no_srx_ctx,
	.query_atomic = query_atomic,
	.query_collective = no_query_collective,
	.endpoint2 = no_endpoint2,
};

struct fi_ops_mr domain_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = mr_reg,
	.regv = mr_regv,
	.regattr = mr_regattr,
};

/* The pool ops: the pool remembers its domain so that the domain cannot close under it (the
 * page size that 2.x's page_size checks need is the native pool's: nicmr_pool_page_size). */
struct PoolHandle {
	Domain *domain;
	nicmr_pool *pool;
};

} // namespace

int local_cache_get(Domain *dom, nicmr_mr_cache **out)
{
	std::lock_guard lk(dom->cache_mu);
	if (!dom->local_cache) {
		/* The native defaults and NICMR_MR_CACHE_*, then libfabric's own variables:
		 * FI_MR_CACHE_MONITOR is "userfaultfd" or "disabled" here (memhooks and kdreg2
		 * are other providers' monitors: the default stays, logged). */
		nicmr_mr_cache_params p;
		nicmr_mr_cache_params_init(&p);
		cache_size_env("FI_MR_CACHE_MAX_SIZE", &p.max_size);
		cache_size_env("FI_MR_CACHE_MAX_COUNT", &p.max_count);
		if (const char *m = std::getenv("FI_MR_CACHE_MONITOR"); m && *m) {
			if (std::strcmp(m, "userfaultfd") == 0)
				p.monitor = NICMR_MR_CACHE_MONITOR_UFFD;
			else if (std::strcmp(m, "disabled") == 0)
				p.monitor = NICMR_MR_CACHE_MONITOR_NONE;
			else
				FI_WARN(&provider, FI_LOG_MR,
					"FI_MR_CACHE_MONITOR=%s: nicmr has userfaultfd or "
					"disabled; the default stays\n",
					m);
		}
		int ret = nicmr_mr_cache_create(dom->pd, &p, &dom->local_cache);
		if (ret != 0) {
			FI_WARN(&provider, FI_LOG_MR, "registration cache: %d\n", ret);
			dom->local_cache = nullptr;
			return fi_code(ret);
		}
	}
	*out = dom->local_cache;
	return 0;
}

} // namespace nicmr::fabric

struct fi_nicmr_pool : nicmr::fabric::PoolHandle {};

namespace nicmr::fabric {

namespace {

Domain *domain_of(struct fid_domain *d)
{
	if (!d || d->fid.fclass != FI_CLASS_DOMAIN || d->fid.ops != &domain_fi_ops)
		return nullptr;
	return reinterpret_cast<Domain *>(d);
}

int pool_adopt(Domain *dom, nicmr_pool *p, struct fi_nicmr_pool **out)
{
	std::unique_ptr<fi_nicmr_pool> h(new (std::nothrow) fi_nicmr_pool);
	if (!h) {
		nicmr_pool_destroy(p);
		return -FI_ENOMEM;
	}
	h->domain = dom;
	h->pool = p;
	/* relaxed: the pool reaches other threads through the application, not this count. */
	dom->pools.fetch_add(1, std::memory_order_relaxed);
	*out = h.release();
	return 0;
}

int pool_create(struct fid_domain *domain, size_t size, size_t page_size, int numa_node,
		uint64_t flags, struct fi_nicmr_pool **out)
{
	Domain *dom = domain_of(domain);
	if (!dom || !out)
		return -FI_EINVAL;
	if (flags & ~FI_NICMR_POOL_FALLBACK)
		return -FI_EBADFLAGS;
	nicmr_pool_params params;
	nicmr_pool_params_init(&params);
	params.size = size;
	params.page_size = page_size;
	params.numa_node = numa_node;
	params.allow_fallback = (flags & FI_NICMR_POOL_FALLBACK) ? 1 : 0;
	params.name = "fi_nicmr";
	nicmr_pool *p = nullptr;
	int ret = nicmr_pool_create(dom->fabric->dev, &params, &p);
	if (ret != 0)
		return fi_code(ret);
	return pool_adopt(dom, p, out);
}

int pool_import(struct fid_domain *domain, void *addr, size_t len, size_t page_size,
		struct fi_nicmr_pool **out)
{
	Domain *dom = domain_of(domain);
	if (!dom || !out)
		return -FI_EINVAL;
	nicmr_pool *p = nullptr;
	int ret = nicmr_pool_import(dom->fabric->dev, addr, len, page_size, &p);
	if (ret != 0)
		return fi_code(ret);
	return pool_adopt(dom, p, out);
}

int pool_destroy(struct fi_nicmr_pool *h)
{
	if (!h)
		return -FI_EINVAL;
	int ret = nicmr_pool_destroy(h->pool);
	if (ret != 0)
		return fi_code(ret);
	/* release: the pool is gone before domain_close may see the count drop. */
	h->domain->pools.fetch_sub(1, std::memory_order_release);
	delete h;
	return 0;
}

void *pool_addr(const struct fi_nicmr_pool *h)
{
	return h ? nicmr_pool_addr(h->pool) : nullptr;
}

size_t pool_len(const struct fi_nicmr_pool *h)
{
	return h ? nicmr_pool_len(h->pool) : 0;
}

int mr_in_pool(struct fid_mr *fmr)
{
	Mr *mr = mr_of(fmr);
	if (!mr)
		return -FI_EINVAL;
	return nicmr_mr_in_pool(mr->mr);
}

int device_stats(struct fid_domain *domain, struct nicmr_device_stats *stats)
{
	Domain *dom = domain_of(domain);
	if (!dom || !stats)
		return -FI_EINVAL;
	return fi_code(nicmr_device_get_stats(dom->fabric->dev, stats));
}

int device_query(struct fid_domain *domain, struct nicmr_device_attr *attr)
{
	Domain *dom = domain_of(domain);
	if (!dom || !attr)
		return -FI_EINVAL;
	return fi_code(nicmr_device_query(dom->fabric->dev, attr));
}

struct fi_nicmr_pool_ops pool_ops = {
	.size = sizeof(struct fi_nicmr_pool_ops),
	.pool_create = pool_create,
	.pool_import = pool_import,
	.pool_destroy = pool_destroy,
	.pool_addr = pool_addr,
	.pool_len = pool_len,
	.mr_in_pool = mr_in_pool,
	.device_stats = device_stats,
	.device_query = device_query,
};

} // namespace

int pool_ops_open(Domain *, void **ops)
{
	*ops = &pool_ops;
	return 0;
}

int fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	if (!attr || !fabric)
		return -FI_EINVAL;
	if (attr->name && std::strcmp(attr->name, kFabricName) != 0)
		return -FI_ENODATA;
	DeviceSpec ds;
	if (device_spec(&ds) != 0)
		return -FI_ENODATA;
	Fabric *fab = new (std::nothrow) Fabric;
	if (!fab)
		return -FI_ENOMEM;
	fab->spec = ds.spec;
	fab->domain_name = ds.domain_name;
	fab->fid.fid.fclass = FI_CLASS_FABRIC;
	fab->fid.fid.context = context;
	fab->fid.fid.ops = &fabric_fi_ops;
	fab->fid.ops = &fabric_ops;
	fab->fid.api_version = attr->api_version;
	*fabric = &fab->fid;
	return 0;
}

namespace {
/* The address family of the device's wire port (AF_INET for an IPv4-mapped GID), or 0
 * without a wire. */
int wire_family(nicmr_device *dev)
{
	uint8_t gid[16];
	if (nicmr_port_gid(dev, 1, 0, gid) != 0)
		return 0;
	return gid_is_v4(gid) ? AF_INET : AF_INET6;
}
} // namespace

int domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **out,
		void *context)
{
	if (!fabric || !info || !out || !info->domain_attr)
		return -FI_EINVAL;
	Fabric *fab = reinterpret_cast<Fabric *>(fabric);
	const char *name = info->domain_attr->name;
	if (name && fab->domain_name != name)
		return -FI_EINVAL;
	int mr_mode = 0;
	/* The info is the application's own copy, possibly edited: FI_MR_ALLOCATED must stay;
	 * the mode is checked again against the opened device below. */
	/* FI_MR_PROV_KEY is checked below, once the device says whether it needs it. */
	if (mr_mode_of(mr_offered_for(info->domain_attr->mr_mode, info->caps), 0, true, &mr_mode) !=
	    0)
		return -FI_EINVAL;
	int ret = 0;
	{
		std::lock_guard<std::mutex> lock(fab->mu);
		if (!fab->sh) {
			DeviceShare *sh = share_acquire(fab->spec, &ret);
			if (sh == nullptr) {
				FI_WARN(&provider, FI_LOG_DOMAIN, "opening %s: %d\n",
					fab->spec.c_str(), ret);
				return fi_code(ret);
			}
			fab->sh = sh;
			fab->dev = sh->dev;
		}
		if (!fab->mrs) {
			/* The MR objects' table, one per mkey index (mr_slot). */
			nicmr_device_attr a{};
			ret = nicmr_device_query(fab->dev, &a);
			if (ret == 0)
				ret = mr_table_map(fab, a.mkey_count);
			if (ret != 0)
				return fi_code(ret);
		}
	}
	/* Owned here until the fid is handed out: a failed PD allocation frees it. */
	std::unique_ptr<Domain> dom(new (std::nothrow) Domain);
	if (!dom)
		return -FI_ENOMEM;
	nicmr_device_attr attr{};
	ret = nicmr_device_query(fab->dev, &attr);
	if (ret != 0)
		return fi_code(ret);
	/* The device says which extensions it has: FI_MR_RMA_EVENT stays only on one with
	 * RMA events (an info edited to ask for it elsewhere gets a domain without it, which
	 * refuses FI_RMA_EVENT as any domain without the bit does). */
	dom->ext = attr.extensions ? attr.ext_flags : 0;
	/* Atomics only with host-order semantics (fi_atomic(3)): nicmr.h, nicmr_atomic_mode. */
	dom->atomics = attr.atomic_mode == NICMR_ATOMIC_HOST;
	dom->odp = attr.odp != 0;
	/* A device that chooses every mkey index takes no requested key: an info edited to
	 * leave FI_MR_PROV_KEY out is refused, as fi_getinfo would not have offered it. */
	if (mr_mode_of(mr_offered_for(info->domain_attr->mr_mode, info->caps), dom->ext,
		       attr.requested_keys != 0, &mr_mode) != 0) {
		FI_WARN(&provider, FI_LOG_DOMAIN,
			"%s: mr_mode without FI_MR_PROV_KEY, but the device chooses every key\n",
			fab->spec.c_str());
		return -FI_EINVAL;
	}
	if (info->addr_format == FI_SOCKADDR || info->addr_format == FI_SOCKADDR_IN ||
	    info->addr_format == FI_SOCKADDR_IN6) {
		/* Sockaddr names need the wire port's address, of the family asked for. */
		dom->sock = wire_family(fab->dev);
		if (dom->sock == 0 ||
		    (info->addr_format == FI_SOCKADDR_IN && dom->sock != AF_INET) ||
		    (info->addr_format == FI_SOCKADDR_IN6 && dom->sock != AF_INET6))
			return -FI_EINVAL;
	}
	ret = nicmr_pd_alloc(fab->dev, &dom->pd);
	if (ret != 0)
		return fi_code(ret);
	dom->fabric = fab;
	dom->mr_mode = mr_mode;
	dom->addr_str = info->addr_format == FI_ADDR_STR;
	/* fi_domain(3): under FI_THREAD_DOMAIN the application serialises every call on the
	 * domain's objects, under FI_THREAD_COMPLETION every call on objects that share a CQ or
	 * counter; either way the provider's own locks have nothing to guard. */
	dom->domain_serialized = info->domain_attr->threading == FI_THREAD_DOMAIN;
	dom->serialized =
		dom->domain_serialized || info->domain_attr->threading == FI_THREAD_COMPLETION;
	dom->fid.fid.fclass = FI_CLASS_DOMAIN;
	dom->fid.fid.context = context;
	dom->fid.fid.ops = &domain_fi_ops;
	dom->fid.ops = &domain_ops;
	dom->fid.mr = &domain_mr_ops;
	/* relaxed: the domain reaches other threads through the application, not this count. */
	fab->domains.fetch_add(1, std::memory_order_relaxed);
	*out = &dom.release()->fid;
	return 0;
}

int device_query(const std::string &spec, nicmr_device_attr *attr, bool *wire)
{
	int rc = 0;
	DeviceShare *sh = share_acquire(spec, &rc);
	if (!sh)
		return rc;
	rc = nicmr_device_query(sh->dev, attr);
	uint8_t gid[16];
	*wire = nicmr_port_gid(sh->dev, 1, 0, gid) == 0;
	const int closed = share_release(sh);
	return rc != 0 ? rc : closed;
}

} // namespace nicmr::fabric
