/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Address vectors. An address names an endpoint (struct fi_nicmr_name, 40 bytes in network
 * order, what fi_getname gives; doc/libfabric.md, "Addresses"): on a device whose port is on
 * the UDP wire, the port's GID and UDP port and the endpoint's handshake UD QP, valid in any
 * process that reaches that address; on a device without a wire, the device and the
 * endpoint's own QP; in a domain opened with FI_ADDR_STR, its string form (name_to_str).
 * FI_AV_TABLE and FI_AV_MAP both hand out the entry's index as its
 * fi_addr_t (FI_AV_MAP allows any value; the index is one). Inserts refuse a name that is not
 * one (-FI_EINVAL, nothing inserted) and mark a local name of another device FI_ADDR_NOTAVAIL;
 * whether an endpoint answers at an address is known only at the first request. The table is
 * guarded by a mutex: lookups happen at every post, uncontended unless the application shares
 * the AV between threads.
 */
#include <arpa/inet.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
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

/* A decoded name this AV can use: a wire name, or a local name of this fabric's device. */
bool addr_ok(const Av *av, const EpAddr &a)
{
	return a.kind == FI_NICMR_NAME_WIRE ||
	       a.device_id == nicmr_device_id(av->domain->fabric->dev);
}

int av_insert(struct fid_av *fav, const void *addr, size_t count, fi_addr_t *fi_addr,
	      uint64_t flags, void *)
{
	Av *av = av_of(&fav->fid);
	if (!av || (!addr && count))
		return -FI_EINVAL;
	if (flags)
		return -FI_EBADFLAGS;
	/* Every name is checked before any is inserted: garbage inserts nothing. Under
	 * FI_ADDR_STR addr is an array of count string pointers (as psmx2 takes them); in a
	 * sockaddr domain an array of count sockaddr_in or sockaddr_in6. */
	const bool str = av->domain->addr_str;
	const int sock = av->domain->sock;
	uint16_t udp_port = 0, peer_udp_port = 0;
	if (sock)
		spec_udp_ports(av->domain->fabric->spec, &udp_port, &peer_udp_port);
	auto decode = [&](size_t i, EpAddr *a) {
		if (sock) {
			const size_t each =
				sock == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
			return sock_decode(sock, static_cast<const uint8_t *>(addr) + i * each,
					   peer_udp_port, a);
		}
		if (str) {
			const char *const *names = static_cast<const char *const *>(addr);
			return names[i] ? name_from_str(names[i], a) : -FI_EINVAL;
		}
		return name_decode(static_cast<const uint8_t *>(addr) + i * kNameSize, a);
	};
	for (size_t i = 0; i < count; i++) {
		EpAddr a{};
		if (decode(i, &a) != 0)
			return -FI_EINVAL;
	}
	std::lock_guard lk(av->mu);
	int inserted = 0;
	for (size_t i = 0; i < count; i++) {
		EpAddr a{};
		(void)decode(i, &a);
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
	EpAddr a{};
	int ret = av_lookup_addr(av, fi_addr, &a);
	if (ret != 0)
		return ret;
	char name[kStrMax];
	size_t whole = kNameSize;
	if (av->domain->sock)
		whole = sock_encode(av->domain->sock, a, name);
	else if (av->domain->addr_str)
		whole = name_to_str(a, name, sizeof(name)) + 1;
	else
		name_encode(a, name);
	/* fi_av(3): a short buffer gets the start of the address; addrlen says the whole. */
	const size_t n = *addrlen < whole ? *addrlen : whole;
	if (n && !addr)
		return -FI_EINVAL;
	if (n)
		std::memcpy(addr, name, n);
	*addrlen = whole;
	return 0;
}

/* The string form of a name (name_to_str, or sock_to_str in a sockaddr domain); null for a
 * name that is none. */
const char *av_straddr(struct fid_av *fav, const void *addr, char *buf, size_t *len)
{
	Av *av = av_of(&fav->fid);
	if (!av || !addr || !buf || !len)
		return nullptr;
	EpAddr a{};
	if (const int sock = av->domain->sock) {
		if (sock_decode(sock, addr, 0, &a) != 0)
			return nullptr;
		*len = sock_to_str(sock, a, buf, *len) + 1;
		return buf;
	}
	if (name_decode(addr, &a) != 0)
		return nullptr;
	*len = name_to_str(a, buf, *len) + 1;
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

size_t name_to_str(const EpAddr &a, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN + 2] = "local";
	if (a.kind == FI_NICMR_NAME_WIRE) {
		char ip[INET6_ADDRSTRLEN] = "?";
		const bool v4 = gid_is_v4(a.gid);
		inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? a.gid + 12 : a.gid, ip, sizeof(ip));
		std::snprintf(host, sizeof(host), v4 ? "%s" : "[%s]", ip);
	}
	char s[kStrMax];
	const int n = std::snprintf(s, sizeof(s), "fi_nicmr://%s:%u/0x%06x/%u/%016" PRIx64, host,
				    a.udp_port, a.qpn, a.port, a.device_id);
	if (len > 0)
		std::snprintf(buf, len, "%s", s);
	return static_cast<size_t>(n);
}

int name_from_str(const char *str, EpAddr *out)
{
	static const char prefix[] = "fi_nicmr://";
	if (std::strncmp(str, prefix, sizeof(prefix) - 1) != 0 || std::strlen(str) >= kStrMax)
		return -FI_EINVAL;
	const char *p = str + sizeof(prefix) - 1;
	EpAddr a{};
	char host[INET6_ADDRSTRLEN + 1] = {};
	const char *rest = nullptr;
	if (*p == '[') {
		const char *close = std::strchr(p, ']');
		if (!close || close - p - 1 > INET6_ADDRSTRLEN || close[1] != ':')
			return -FI_EINVAL;
		std::memcpy(host, p + 1, static_cast<size_t>(close - p - 1));
		if (inet_pton(AF_INET6, host, a.gid) != 1)
			return -FI_EINVAL;
		a.kind = FI_NICMR_NAME_WIRE;
		rest = close + 2;
	} else {
		const char *colon = std::strchr(p, ':');
		if (!colon || colon - p > INET6_ADDRSTRLEN)
			return -FI_EINVAL;
		std::memcpy(host, p, static_cast<size_t>(colon - p));
		rest = colon + 1;
		if (std::strcmp(host, "local") == 0) {
			a.kind = FI_NICMR_NAME_LOCAL;
		} else {
			a.kind = FI_NICMR_NAME_WIRE;
			a.gid[10] = a.gid[11] = 0xff;
			if (inet_pton(AF_INET, host, a.gid + 12) != 1)
				return -FI_EINVAL;
		}
	}
	/* "<udp>/0x<qpn>/<port>/<device id>": each field digits only (no sign, no space, no
	 * second prefix), so that one string has one reading. */
	static const char dec[] = "0123456789", hex[] = "0123456789abcdefABCDEF";
	auto field = [&](const char *&q, const char *digits, size_t max, char end, int base,
			 unsigned long long *v) {
		const size_t n = std::strspn(q, digits);
		if (n == 0 || n > max || q[n] != end)
			return false;
		*v = std::strtoull(q, nullptr, base);
		q += n + (end ? 1 : 0);
		return true;
	};
	const char *q = rest;
	unsigned long long udp = 0, qpn = 0, port = 0, dev = 0;
	if (!field(q, dec, 5, '/', 10, &udp) || std::strncmp(q, "0x", 2) != 0)
		return -FI_EINVAL;
	q += 2;
	if (!field(q, hex, 6, '/', 16, &qpn) || !field(q, dec, 1, '/', 10, &port) ||
	    !field(q, hex, 16, '\0', 16, &dev) || udp > 65535)
		return -FI_EINVAL;
	a.udp_port = static_cast<uint16_t>(udp);
	a.qpn = static_cast<uint32_t>(qpn);
	a.port = static_cast<uint32_t>(port);
	a.device_id = dev;
	/* The binary form's checks, once. */
	uint8_t name[kNameSize];
	name_encode(a, name);
	return name_decode(name, out);
}

void name_encode(const EpAddr &a, void *name)
{
	fi_nicmr_name n{};
	n.magic = htonl(FI_NICMR_NAME_MAGIC);
	n.version = FI_NICMR_NAME_VERSION;
	n.kind = a.kind;
	n.udp_port = htons(a.udp_port);
	std::memcpy(n.gid, a.gid, 16);
	n.qpn = htonl(a.qpn);
	n.port = htonl(a.port);
	n.device_id = htobe64(a.device_id);
	std::memcpy(name, &n, sizeof(n));
}

int name_decode(const void *name, EpAddr *a)
{
	fi_nicmr_name n;
	std::memcpy(&n, name, sizeof(n));
	static const uint8_t zero[16] = {};
	if (ntohl(n.magic) != FI_NICMR_NAME_MAGIC || n.version != FI_NICMR_NAME_VERSION)
		return -FI_EINVAL;
	if (n.kind != FI_NICMR_NAME_WIRE && n.kind != FI_NICMR_NAME_LOCAL)
		return -FI_EINVAL;
	a->kind = n.kind;
	a->udp_port = ntohs(n.udp_port);
	std::memcpy(a->gid, n.gid, 16);
	a->qpn = ntohl(n.qpn);
	a->port = ntohl(n.port);
	a->device_id = be64toh(n.device_id);
	if (a->qpn == 0 || a->qpn > 0xffffff || a->port < 1 || a->port > 2)
		return -FI_EINVAL;
	if (a->kind == FI_NICMR_NAME_WIRE &&
	    (a->udp_port == 0 || std::memcmp(a->gid, zero, 16) == 0))
		return -FI_EINVAL;
	return 0;
}

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

void av_resolved(Av *av, fi_addr_t fi_addr, uint32_t qpn)
{
	std::lock_guard lk(av->mu);
	if (fi_addr < av->table.size() && av->live[fi_addr] && av->table[fi_addr].service)
		av->table[fi_addr].qpn = qpn;
}

bool name_same(const EpAddr &a, const EpAddr &b)
{
	/* Sockaddr names: the address and the service (their QP may not be resolved yet). */
	if (a.service || b.service)
		return a.service == b.service && a.kind == b.kind &&
		       std::memcmp(a.gid, b.gid, 16) == 0;
	if (a.kind != b.kind || a.qpn != b.qpn)
		return false;
	if (a.kind == FI_NICMR_NAME_LOCAL)
		return a.device_id == b.device_id && a.port == b.port;
	return a.udp_port == b.udp_port && std::memcmp(a.gid, b.gid, 16) == 0;
}

fi_addr_t av_reverse(Av *av, const EpAddr &a)
{
	/* Receive path: the AV's lock and a walk of its table; no allocation, no system call.
	 * The caller caches the answer (av_holds checks it still holds). */
	if (!av)
		return FI_ADDR_NOTAVAIL;
	std::lock_guard lk(av->mu);
	for (size_t i = 0; i < av->table.size(); i++)
		if (av->live[i] && name_same(av->table[i], a))
			return static_cast<fi_addr_t>(i);
	return FI_ADDR_NOTAVAIL;
}

bool av_holds(Av *av, fi_addr_t fi_addr, const EpAddr &a)
{
	if (!av)
		return false;
	std::lock_guard lk(av->mu);
	return fi_addr < av->table.size() && av->live[fi_addr] && name_same(av->table[fi_addr], a);
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

int sock_decode(int sock, const void *sa, uint16_t udp_port, EpAddr *a)
{
	*a = EpAddr{};
	a->kind = FI_NICMR_NAME_WIRE;
	a->udp_port = udp_port;
	a->port = 1;
	if (sock == AF_INET) {
		sockaddr_in in;
		std::memcpy(&in, sa, sizeof(in));
		if (in.sin_family != AF_INET || in.sin_port == 0 ||
		    in.sin_addr.s_addr == INADDR_ANY)
			return -FI_EINVAL;
		std::memcpy(a->gid, kV4MappedPrefix, sizeof(kV4MappedPrefix));
		std::memcpy(a->gid + 12, &in.sin_addr, 4);
		a->service = ntohs(in.sin_port);
		return 0;
	}
	sockaddr_in6 in6;
	std::memcpy(&in6, sa, sizeof(in6));
	if (sock != AF_INET6 || in6.sin6_family != AF_INET6 || in6.sin6_port == 0 ||
	    IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr))
		return -FI_EINVAL;
	std::memcpy(a->gid, &in6.sin6_addr, 16);
	a->service = ntohs(in6.sin6_port);
	return 0;
}

size_t sock_encode(int sock, const EpAddr &a, void *out)
{
	if (sock == AF_INET) {
		sockaddr_in in{};
		in.sin_family = AF_INET;
		in.sin_port = htons(a.service);
		std::memcpy(&in.sin_addr, a.gid + 12, 4);
		std::memcpy(out, &in, sizeof(in));
		return sizeof(in);
	}
	sockaddr_in6 in6{};
	in6.sin6_family = AF_INET6;
	in6.sin6_port = htons(a.service);
	std::memcpy(&in6.sin6_addr, a.gid, 16);
	std::memcpy(out, &in6, sizeof(in6));
	return sizeof(in6);
}

size_t sock_to_str(int sock, const EpAddr &a, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	const bool v4 = sock == AF_INET;
	inet_ntop(v4 ? AF_INET : AF_INET6, v4 ? a.gid + 12 : a.gid, ip, sizeof(ip));
	char s[kStrMax];
	const int n = std::snprintf(s, sizeof(s),
				    v4 ? "fi_sockaddr_in://%s:%u" : "fi_sockaddr_in6://[%s]:%u", ip,
				    a.service);
	if (len > 0)
		std::snprintf(buf, len, "%s", s);
	return static_cast<size_t>(n);
}

} // namespace nicmr::fabric
