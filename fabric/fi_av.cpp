/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Address vectors. An address names an endpoint: the device's id, the port and the number of
 * the endpoint's address QP (EpAddr, 16 bytes, what fi_getname gives). FI_AV_TABLE and
 * FI_AV_MAP both hand out the entry's index as its fi_addr_t (FI_AV_MAP allows any value;
 * the index is one). Inserts check the address names this fabric's device and a port of it;
 * whether an endpoint answers at it is known only at the first request (-FI_EADDRNOTAVAIL).
 * The table is guarded by a mutex: lookups happen at a request's first use of a peer and at
 * every post, uncontended unless the application shares the AV between threads.
 */
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "fi_internal.h"

namespace nicmr::fabric {

namespace {

int av_close(struct fid *fid)
{
	Av *av = reinterpret_cast<Av *>(fid);
	/* acquire: an endpoint close that gave its count back no longer reads the table. */
	if (av->eps.load(std::memory_order_acquire) != 0)
		return -FI_EBUSY;
	Domain *dom = av->domain;
	delete av;
	/* release: the AV is gone before domain_close (acquire) may see the count drop. */
	dom->children.fetch_sub(1, std::memory_order_release);
	return 0;
}

struct fi_ops av_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = av_close,
	.bind = no_bind,
	.control = no_control,
	.ops_open = no_ops_open,
	.tostr = no_tostr,
	.ops_set = no_ops_set,
};

bool addr_ok(const Av *av, const EpAddr &a)
{
	return a.device_id == nicmr_device_id(av->domain->fabric->dev) && a.port >= 1 &&
	       a.port <= 2 && a.qpn != 0 && a.qpn <= 0xffffff;
}

int av_insert(struct fid_av *fav, const void *addr, size_t count, fi_addr_t *fi_addr,
	      uint64_t flags, void *)
{
	Av *av = av_of(&fav->fid);
	if (!av || (!addr && count))
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS;
	std::lock_guard lk(av->mu);
	int inserted = 0;
	for (size_t i = 0; i < count; i++) {
		EpAddr a;
		std::memcpy(&a, static_cast<const uint8_t *>(addr) + i * sizeof(EpAddr), sizeof(a));
		if (!addr_ok(av, a)) {
			if (fi_addr)
				fi_addr[i] = FI_ADDR_NOTAVAIL;
			continue;
		}
		try {
			av->table.push_back(a);
			av->live.push_back(1);
		} catch (const std::bad_alloc &) {
			if (av->table.size() > av->live.size())
				av->table.pop_back();
			if (fi_addr)
				fi_addr[i] = FI_ADDR_NOTAVAIL;
			continue;
		}
		if (fi_addr)
			fi_addr[i] = av->table.size() - 1;
		inserted++;
	}
	return inserted;
}

int av_remove(struct fid_av *fav, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	Av *av = av_of(&fav->fid);
	if (!av || (!fi_addr && count))
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS;
	std::lock_guard lk(av->mu);
	for (size_t i = 0; i < count; i++)
		if (fi_addr[i] >= av->table.size() || !av->live[fi_addr[i]])
			return -FI_EINVAL;
	for (size_t i = 0; i < count; i++)
		av->live[fi_addr[i]] = 0;
	return 0;
}

int av_lookup(struct fid_av *fav, fi_addr_t fi_addr, void *addr, size_t *addrlen)
{
	Av *av = av_of(&fav->fid);
	if (!av || !addrlen)
		return -FI_EINVAL;
	EpAddr a;
	int ret = av_lookup_addr(av, fi_addr, &a);
	if (ret != 0)
		return ret;
	/* fi_av(3): a short buffer gets the start of the address; addrlen says the whole. */
	const size_t n = *addrlen < sizeof(a) ? *addrlen : sizeof(a);
	if (n && !addr)
		return -FI_EINVAL;
	if (n)
		std::memcpy(addr, &a, n);
	*addrlen = sizeof(a);
	return 0;
}

const char *av_straddr(struct fid_av *, const void *addr, char *buf, size_t *len)
{
	if (!addr || !buf || !len)
		return nullptr;
	EpAddr a;
	std::memcpy(&a, addr, sizeof(a));
	char s[96];
	int n = std::snprintf(s, sizeof(s), "nicmr://%016" PRIx64 "/%u/0x%06x", a.device_id, a.port,
			      a.qpn);
	if (*len > 0) {
		std::snprintf(buf, *len, "%s", s);
	}
	*len = static_cast<size_t>(n) + 1;
	return buf;
}

struct fi_ops_av av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = av_insert,
	.insertsvc = [](struct fid_av *, const char *, const char *, fi_addr_t *, uint64_t,
			void *) { return -FI_ENOSYS; },
	.insertsym = [](struct fid_av *, const char *, size_t, const char *, size_t, fi_addr_t *,
			uint64_t, void *) { return -FI_ENOSYS; },
	.remove = av_remove,
	.lookup = av_lookup,
	.straddr = av_straddr,
	.av_set = [](struct fid_av *, struct fi_av_set_attr *, struct fid_av_set **,
		     void *) { return -FI_ENOSYS; },
};

} // namespace

Av *av_of(struct fid *fid)
{
	if (!fid || fid->fclass != FI_CLASS_AV || fid->ops != &av_fi_ops)
		return nullptr;
	return reinterpret_cast<Av *>(fid);
}

int av_lookup_addr(Av *av, fi_addr_t fi_addr, EpAddr *out)
{
	std::lock_guard lk(av->mu);
	if (fi_addr >= av->table.size() || !av->live[fi_addr])
		return -FI_EINVAL;
	*out = av->table[fi_addr];
	return 0;
}

int av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **out, void *context)
{
	if (!domain || !attr || !out)
		return -FI_EINVAL;
	if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_TABLE && attr->type != FI_AV_MAP)
		return -FI_EINVAL;
	/* No named (shared) AVs, no asynchronous inserts, no receive contexts. */
	if (attr->name || attr->rx_ctx_bits)
		return -FI_ENOSYS;
	if (attr->flags)
		return -FI_EBADFLAGS;
	Domain *dom = reinterpret_cast<Domain *>(domain);
	std::unique_ptr<Av> av(new (std::nothrow) Av);
	if (!av)
		return -FI_ENOMEM;
	av->domain = dom;
	av->mu.set_noop(dom->domain_serialized);
	av->type = attr->type == FI_AV_MAP ? FI_AV_MAP : FI_AV_TABLE;
	try {
		const size_t n = attr->count ? attr->count : kAvDefaultCount;
		av->table.reserve(n);
		av->live.reserve(n);
	} catch (const std::exception &) {
		return -FI_ENOMEM;
	}
	av->fid.fid.fclass = FI_CLASS_AV;
	av->fid.fid.context = context;
	av->fid.fid.ops = &av_fi_ops;
	av->fid.ops = &av_ops;
	attr->type = av->type;
	dom->children.fetch_add(1, std::memory_order_relaxed);
	*out = &av.release()->fid;
	return 0;
}

} // namespace nicmr::fabric
