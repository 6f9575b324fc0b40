/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The provider's entry (fi_prov_ini) and fi_getinfo: one fabric "nicmr" with one domain per
 * device, and the mr_mode negotiation. Endpoints are RDM with RMA and atomics (fi_ep.cpp). With
 * FI_MR_LOCAL every local buffer comes with its descriptor; without it the provider registers
 * local buffers itself through the domain's registration cache (fi_mr(3), FI_MR_LOCAL).
 *
 * This is libnicmr-fi-impl.so's entry, nicmr_fi_impl_ini: libfabric loads libnicmr-fi.so
 * (fi_loader.cpp), which loads this module and calls it. While the provider is loaded,
 * libnicmr.so's log lines go to libfabric's log as the provider's, at FI_LOG_LEVEL.
 */
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <utility>

#include <rdma/providers/fi_log.h>

#include "fi_internal.h"
#include "fi_msg.h"

namespace nicmr::fabric {

namespace {

/* The provider's own version: nicmr's major.minor. */
constexpr uint32_t kProvVersion = FI_VERSION(0, 1);
/* The mkeys an emu device has when its spec does not say (native API default). */
constexpr size_t kEmuDefaultMkeys = 65536;
/* The device-model extensions an emu device has when its spec does not say (ext=1). */
constexpr uint64_t kEmuDefaultExt = NICMR_EXT_SINGLE_USE | NICMR_EXT_RMA_EVENT;

int getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
	    const struct fi_info *hints, struct fi_info **info);
/* ---- nicmr's log lines through libfabric's log ---- */

/* The handler libnicmr.so had before the provider was loaded, given back at cleanup. */
struct SavedLog {
	nicmr_log_level level = NICMR_LOG_WARN;
	nicmr_log_fn fn = nullptr;
	void *ctx = nullptr;
} saved_log;

/* nicmr's components by libfabric subsystem: memory and registration are FI_LOG_MR's, the
 * device (driver, bus, device model, the API's device calls) the domain's. */
enum fi_log_subsys subsys_of(const char *component)
{
	return std::strcmp(component, "mr") == 0 || std::strcmp(component, "mem") == 0
		       ? FI_LOG_MR
		       : FI_LOG_DOMAIN;
}

/* libfabric has no error level: nicmr's errors are its warnings. */
enum fi_log_level fi_level_of(nicmr_log_level level)
{
	switch (level) {
	case NICMR_LOG_ERROR:
	case NICMR_LOG_WARN:
		return FI_LOG_WARN;
	case NICMR_LOG_INFO:
		return FI_LOG_INFO;
	case NICMR_LOG_DEBUG:
		break;
	}
	return FI_LOG_DEBUG;
}

/* One nicmr line as a libfabric line of this provider: "libfabric:<pid>:<time>::nicmr:
 * <subsystem>:<function>():<line><<level>> <component>: <message>". fi_log_enabled applies
 * FI_LOG_LEVEL, FI_LOG_PROV and FI_LOG_SUBSYS. */
void log_to_fabric(void *, nicmr_log_level level, const char *component, const char *func, int line,
		   const char *msg)
{
	const enum fi_log_level l = fi_level_of(level);
	const enum fi_log_subsys sub = subsys_of(component);
	if (fi_log_enabled(&provider, l, sub))
		fi_log(&provider, l, sub, func, line, "%s: %s\n", component, msg);
}

/* The most detailed nicmr level libfabric would print for the provider (FI_LOG_LEVEL,
 * FI_LOG_SUBSYS), so that nicmr does not format lines libfabric would drop. libfabric reads
 * them once, before it loads providers: asking once at load is enough. FI_LOG_PROV is
 * applied to each line (libfabric marks the provider once this entry has returned). */
nicmr_log_level nicmr_level_of_fabric()
{
	for (auto [fl, nl] :
	     {std::pair{FI_LOG_DEBUG, NICMR_LOG_DEBUG}, std::pair{FI_LOG_INFO, NICMR_LOG_INFO}})
		if (fi_log_enabled(&provider, fl, FI_LOG_MR) ||
		    fi_log_enabled(&provider, fl, FI_LOG_DOMAIN))
			return nl;
	return NICMR_LOG_WARN;
}

/* libfabric unloads the provider after this: libnicmr.so (which the application may use
 * too) must not call into it any more. nicmr_log_set returns once no line is on its way
 * to log_to_fabric. */
void cleanup()
{
	nicmr_log_set(saved_log.level, saved_log.fn, saved_log.ctx);
}

/* The capabilities an endpoint of a domain with mr_mode has: FI_RMA_EVENT (a secondary
 * capability: counters bound to MRs count remote writes) goes with FI_MR_RMA_EVENT, since only
 * MRs registered with FI_RMA_EVENT can have a counter; FI_ATOMIC with host-order atomics. */
uint64_t ep_caps_of(int mr_mode, bool atomics)
{
	return (kEpCaps & ~(atomics ? 0 : FI_ATOMIC)) | kMsgCaps |
	       ((mr_mode & FI_MR_RMA_EVENT) ? FI_RMA_EVENT : 0);
}

/* Whether the hints ask for anything this version does not have (0) or not (1). */
/* Bytes of remote CQ data a message carries (fi_senddata, FI_REMOTE_CQ_DATA). */
constexpr size_t kCqDataSize = 8;

/* The address family of the spec's wire port (addr=auto takes an IPv4 loopback address). */
int spec_family(const DeviceSpec &ds)
{
	return spec_option(ds.spec, "addr").find(':') != std::string::npos ? AF_INET6 : AF_INET;
}

/* Whether the hints ask for sockaddr names (FI_SOCKADDR, or the port's own family). */
bool hints_sock(const struct fi_info *hints, const DeviceSpec &ds)
{
	if (!hints)
		return false;
	const uint32_t f = hints->addr_format;
	return f == FI_SOCKADDR || (f == FI_SOCKADDR_IN && spec_family(ds) == AF_INET) ||
	       (f == FI_SOCKADDR_IN6 && spec_family(ds) == AF_INET6);
}

bool hints_fit(const struct fi_info *hints, const DeviceSpec &ds, int *mr_mode)
{
	*mr_mode = kMrRequired | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_LOCAL;
	if (!hints)
		return true;
	const uint64_t caps = hints->caps | (hints->tx_attr ? hints->tx_attr->caps : 0) |
			      (hints->rx_attr ? hints->rx_attr->caps : 0);
	/* fi_getinfo(3) secondary capabilities: FI_LOCAL_COMM (endpoints of one device reach
	 * each other), FI_REMOTE_COMM only on a device with a wire (another device, process or
	 * host). FI_RMA_EVENT is checked against the mr_mode below. */
	const uint64_t comm = FI_LOCAL_COMM | (ds.wire ? FI_REMOTE_COMM : 0);
	if (caps & ~(kEpCaps | kMsgCaps | kSrcCaps | FI_RMA_EVENT | comm))
		return false;
	if (hints->addr_format != FI_FORMAT_UNSPEC && hints->addr_format != FI_ADDR_STR &&
	    !(ds.wire && hints_sock(hints, ds)))
		return false;
	/* An order the QPs do not keep, or completions in order across peers. */
	auto order_fits = [](uint64_t msg_order, uint64_t comp_order) {
		return (msg_order & ~kMsgOrder) == 0 && comp_order == FI_ORDER_NONE;
	};
	if (hints->tx_attr && !order_fits(hints->tx_attr->msg_order, hints->tx_attr->comp_order))
		return false;
	if (hints->rx_attr && !order_fits(hints->rx_attr->msg_order, hints->rx_attr->comp_order))
		return false;
	if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC &&
	    hints->ep_attr->type != FI_EP_RDM)
		return false;
	if (hints->fabric_attr && hints->fabric_attr->name &&
	    std::strcmp(hints->fabric_attr->name, kFabricName) != 0)
		return false;
	const struct fi_domain_attr *d = hints->domain_attr;
	if (!d)
		return (caps & FI_RMA_EVENT) == 0;
	if (d->name && ds.domain_name != d->name)
		return false;
	if (d->caps ||
	    (d->av_type != FI_AV_UNSPEC && d->av_type != FI_AV_TABLE && d->av_type != FI_AV_MAP))
		return false;
	if (d->mr_iov_limit > NICMR_MAX_IOV || d->mr_cnt > ds.mr_cnt)
		return false;
	if (mr_mode_of(mr_offered_for(d->mr_mode, caps), ds.ext, ds.requested_keys, mr_mode) != 0)
		return false;
	/* RMA events need the device's extension and an application that allows
	 * FI_MR_RMA_EVENT. */
	if (caps & ~(ep_caps_of(*mr_mode, ds.atomics) | kSrcCaps | comm))
		return false;
	const size_t key_size = (*mr_mode & FI_MR_RAW) ? kRawKeySize : kKeySize;
	/* Remote CQ data travels in the messages' 64-bit header field (doc/libfabric.md,
	 * "Messages"): up to 8 bytes. */
	if (d->cq_data_size > kCqDataSize)
		return false;
	if (d->mr_key_size && d->mr_key_size < key_size)
		return false;
	return true;
}

/* What fi_getinfo's node and service say (doc/libfabric.md, "Addresses"). */
struct Where {
	bool sock = false; /* names are sockaddrs of the port's family */
	bool has_src = false, has_dest = false;
	sockaddr_in6 src{}, dest{}; /* a sockaddr_in in the first bytes for AF_INET */
};

/* Fills sa (the family's sockaddr) with ip (4 or 16 bytes, null: the wildcard) and port. */
void sock_fill(int family, const uint8_t *ip, uint16_t port, sockaddr_in6 *sa)
{
	*sa = sockaddr_in6{};
	if (family == AF_INET) {
		sockaddr_in in{};
		in.sin_family = AF_INET;
		in.sin_port = htons(port);
		if (ip)
			std::memcpy(&in.sin_addr, ip, 4);
		std::memcpy(sa, &in, sizeof(in));
		return;
	}
	sa->sin6_family = AF_INET6;
	sa->sin6_port = htons(port);
	if (ip)
		std::memcpy(&sa->sin6_addr, ip, 16);
}

/*
 * fi_getinfo's node and service. Without them (and without hints asking for sockaddrs) names
 * are nicmr's own. With them, on a device with a wire, names are sockaddrs of the port's
 * family (FI_SOCKADDR_IN for IPv4, _IN6 for IPv6), unless the hints ask for FI_ADDR_STR:
 * - FI_SOURCE, or a service without a node: node is the local address the application wants,
 *   which must be the wire port's (the spec's addr=; any address of 127.0.0.0/8 for
 *   addr=auto, which chooses one there when the fabric opens), and service a decimal port
 *   0..65535: src_addr is that address (the wildcard for addr=auto without a node) and port,
 *   which fi_endpoint takes as the endpoint's service (0: one of the device's own);
 * - otherwise node names a peer: a numeric address of the port's family (no name lookup),
 *   and dest_addr is it with service's port (none without a service).
 * Under FI_ADDR_STR only FI_SOURCE with the port's address is answered, and names stay
 * nicmr's. false: not answered (-FI_ENODATA).
 */
bool where_of(const DeviceSpec &ds, const char *node, const char *service, uint64_t flags,
	      const struct fi_info *hints, Where *w)
{
	const bool str = hints && hints->addr_format == FI_ADDR_STR;
	w->sock = ds.wire && !str && (node || service || hints_sock(hints, ds));
	if (!node && !service)
		return true;
	if (!ds.wire) {
		FI_INFO(&provider, FI_LOG_CORE, "node/service: the device has no wire\n");
		return false;
	}
	unsigned long port = 0;
	if (service) {
		char *end = nullptr;
		port = std::strtoul(service, &end, 10);
		if (!*service || !end || *end || port > 65535)
			return false;
	}
	const int family = spec_family(ds);
	uint8_t ip[16];
	const bool v6 = node && std::strchr(node, ':') != nullptr;
	if (node && inet_pton(v6 ? AF_INET6 : AF_INET, node, ip) != 1)
		return false;
	const bool source = (flags & FI_SOURCE) || !node;
	if (!source) {
		/* A peer: only in sockaddr names, of the port's family. */
		if (str || v6 != (family == AF_INET6))
			return false;
		if (port != 0) {
			sock_fill(family, ip, static_cast<uint16_t>(port), &w->dest);
			w->has_dest = true;
		}
		return true;
	}
	const std::string addr = spec_option(ds.spec, "addr");
	uint8_t want[16];
	const bool fixed = addr != "auto" && inet_pton(family, addr.c_str(), want) == 1;
	if (node) {
		if (addr == "auto" ? v6 || ip[0] != 127
				   : !fixed || v6 != (family == AF_INET6) ||
					     std::memcmp(want, ip, v6 ? 16 : 4) != 0)
			return false;
	} else if (str && !(flags & FI_SOURCE)) {
		return false;
	}
	if (w->sock) {
		sock_fill(family,
			  node	  ? ip
			  : fixed ? want
				  : nullptr,
			  static_cast<uint16_t>(port), &w->src);
		w->has_src = true;
	}
	return true;
}

int getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
	    const struct fi_info *hints, struct fi_info **info)
{
	if (!info)
		return -FI_EINVAL;
	*info = nullptr;
	/* mr_mode as a bit set is a 1.5 API. */
	if (FI_VERSION_LT(version, FI_VERSION(1, 5)))
		return -FI_ENODATA;
	DeviceSpec ds;
	if (device_spec(&ds) != 0)
		return -FI_ENODATA;
	Where where;
	if (!where_of(ds, node, service, flags, hints, &where))
		return -FI_ENODATA;
	int mr_mode = 0;
	if (!hints_fit(hints, ds, &mr_mode))
		return -FI_ENODATA;
	if (ds.wire && hints && hints->domain_attr &&
	    hints->domain_attr->data_progress == FI_PROGRESS_AUTO)
		return -FI_ENODATA;

	struct fi_info *fi = fi_allocinfo();
	if (!fi)
		return -FI_ENOMEM;
	/* FI_RMA_EVENT whenever the domain has FI_MR_RMA_EVENT: a secondary capability that costs
	 * nothing until an MR is registered with FI_RMA_EVENT. */
	/* The secondary FI_LOCAL_COMM / FI_REMOTE_COMM when the hints ask (hints_fit checked
	 * them). */
	fi->caps = ep_caps_of(mr_mode, ds.atomics) |
		   (hints ? hints->caps & (FI_LOCAL_COMM | FI_REMOTE_COMM) : 0);
	/* Hints that ask for messages only get an answer without RMA and atomics (its mr_mode
	 * then speaks of local descriptors alone: mr_offered_for). */
	if (hints && msg_only(hints->caps | (hints->tx_attr ? hints->tx_attr->caps : 0) |
			      (hints->rx_attr ? hints->rx_attr->caps : 0)))
		fi->caps &= ~kRmaCaps;
	/* FI_DIRECTED_RECV and FI_SOURCE only when asked for (fi_getinfo(3): secondary
	 * capabilities; each costs a source lookup per receive, doc/libfabric.md "Messages"). */
	if (hints)
		fi->caps |= (hints->caps | (hints->rx_attr ? hints->rx_attr->caps : 0)) & kSrcCaps;
	fi->mode = 0;
	/* struct fi_nicmr_name, 40 bytes, or its string form when asked (doc/libfabric.md). */
	fi->addr_format =
		hints && hints->addr_format == FI_ADDR_STR ? FI_ADDR_STR : FI_FORMAT_UNSPEC;
	if (where.sock) {
		const int family = spec_family(ds);
		const size_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
		fi->addr_format = family == AF_INET ? FI_SOCKADDR_IN : FI_SOCKADDR_IN6;
		auto copy = [len](const sockaddr_in6 &sa, void **to, size_t *to_len) {
			*to = std::malloc(len);
			if (*to) {
				std::memcpy(*to, &sa, len);
				*to_len = len;
			}
			return *to != nullptr;
		};
		if ((where.has_src && !copy(where.src, &fi->src_addr, &fi->src_addrlen)) ||
		    (where.has_dest && !copy(where.dest, &fi->dest_addr, &fi->dest_addrlen))) {
			fi_freeinfo(fi);
			return -FI_ENOMEM;
		}
	}
	fi->ep_attr->type = FI_EP_RDM;
	fi->ep_attr->protocol = FI_PROTO_UNSPEC;
	fi->ep_attr->max_msg_size = size_t{1} << 31;
	fi->ep_attr->tx_ctx_cnt = 1;
	fi->ep_attr->rx_ctx_cnt = 1;
	fi->tx_attr->caps =
		(FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_MSG | FI_TAGGED | FI_SEND) & fi->caps;
	/* One inject size for fi_inject_write (the device's inline WRITE) and fi_inject (which
	 * could take a whole bounce buffer, but the attribute is one number). */
	fi->tx_attr->inject_size = kInjectSize;
	fi->tx_attr->size = kEpDepth;
	fi->tx_attr->iov_limit = 1;
	fi->tx_attr->rma_iov_limit = 1;
	fi->tx_attr->msg_order = kMsgOrder;
	fi->tx_attr->comp_order = FI_ORDER_NONE;
	fi->rx_attr->caps = (FI_RMA | FI_ATOMIC | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RMA_EVENT |
			     FI_MSG | FI_TAGGED | FI_RECV | FI_MULTI_RECV | kSrcCaps) &
			    fi->caps;
	fi->rx_attr->iov_limit = 1;
	/* Posted receives of each kind, and what holds unexpected eager payloads: the copies'
	 * pool and, when it is full, the SRQ's buffers themselves (doc/libfabric.md). */
	fi->rx_attr->size = kMsgPosted;
	fi->rx_attr->total_buffered_recv = (size_t{kMsgUnexpPool} + kMsgSrqDepth) * kMsgBounce;
	/* All 64 tag bits are matched (fi_tagged(3)); ignore bits say which are not. */
	fi->ep_attr->mem_tag_format = ~uint64_t{0};
	fi->rx_attr->msg_order = kMsgOrder;
	fi->rx_attr->comp_order = FI_ORDER_NONE;
	/* The default operation flags the hints ask for (fi_endpoint(3) op_flags): FI_COMPLETION
	 * is the one nicmr acts on (calls without flags complete under FI_SELECTIVE_COMPLETION
	 * when it is set); other bits are not kept. */
	fi->tx_attr->op_flags =
		hints && hints->tx_attr ? hints->tx_attr->op_flags & FI_COMPLETION : 0;
	fi->rx_attr->op_flags =
		hints && hints->rx_attr ? hints->rx_attr->op_flags & FI_COMPLETION : 0;
	/* One UAR per endpoint's CQ: the device model has 32, the device's async EQ
	 * (firmware page requests) holds one, its completion EQ one
	 * (mlx5::Device::comp_eqn) and the key programmer one. */
	/* In a sockaddr domain the device's GSI QP has a CQ too (fi_sidr.cpp): one fewer. */
	const size_t eps = where.sock ? 28 : 29;
	fi->domain_attr->ep_cnt = eps;
	fi->domain_attr->tx_ctx_cnt = eps;
	fi->domain_attr->rx_ctx_cnt = eps;
	fi->domain_attr->max_ep_tx_ctx = 1;
	fi->domain_attr->max_ep_rx_ctx = 1;
	fi->fabric_attr->name = strdup(kFabricName);
	/* prov_name is the core's to set (it names the provider that answered). */
	fi->fabric_attr->prov_version = kProvVersion;
	fi->fabric_attr->api_version = version;
	fi->domain_attr->name = strdup(ds.domain_name.c_str());
	/* An application that serialises its calls per domain or per completion object says
	 * so and gets a domain whose data path takes no lock; any other gets FI_THREAD_SAFE
	 * (safe under every model). */
	fi->domain_attr->threading = FI_THREAD_SAFE;
	if (hints && hints->domain_attr &&
	    (hints->domain_attr->threading == FI_THREAD_DOMAIN ||
	     hints->domain_attr->threading == FI_THREAD_COMPLETION))
		fi->domain_attr->threading = hints->domain_attr->threading;
	/* Registration completes in the call and the device moves RMA data by itself (the device
	 * model as a ConnectX does): nothing waits for the application, so FI_PROGRESS_AUTO holds.
	 * The provider has no progress thread either, and moves completions into CQs and counters
	 * only inside the application's calls, so FI_PROGRESS_MANUAL holds as well: a hint that
	 * asks for it gets it (fi_domain(3): the answer is what the provider will do). */
	fi->domain_attr->control_progress = FI_PROGRESS_AUTO;
	fi->domain_attr->data_progress = FI_PROGRESS_AUTO;
	/* On the wire (the spec's addr=) the first request to a peer of another process waits
	 * for that peer's provider to answer the handshake, which it does only inside its
	 * application's calls (fi_ep.cpp, "Connections across processes"): data progress is
	 * FI_PROGRESS_MANUAL, and a hint that asks for AUTO is not answered. */
	if (ds.wire)
		fi->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	if (hints && hints->domain_attr) {
		if (hints->domain_attr->control_progress == FI_PROGRESS_MANUAL)
			fi->domain_attr->control_progress = FI_PROGRESS_MANUAL;
		if (hints->domain_attr->data_progress == FI_PROGRESS_MANUAL)
			fi->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	}
	fi->domain_attr->resource_mgmt = FI_RM_ENABLED;
	fi->domain_attr->av_type =
		hints && hints->domain_attr ? hints->domain_attr->av_type : FI_AV_UNSPEC;
	fi->domain_attr->mr_mode = mr_mode;
	fi->domain_attr->mr_key_size = (mr_mode & FI_MR_RAW) ? kRawKeySize : kKeySize;
	fi->domain_attr->cq_data_size = kCqDataSize;
	fi->domain_attr->mr_iov_limit = NICMR_MAX_IOV; /* fi_mr_regv's segments */
	fi->domain_attr->mr_cnt = ds.mr_cnt;
	if (!fi->fabric_attr->name || !fi->domain_attr->name) {
		fi_freeinfo(fi);
		return -FI_ENOMEM;
	}
	*info = fi;
	return 0;
}

} // namespace

/* The value of option key= in an emu spec ("emu:ports=2,mkeys=1024"), or "" . */
std::string spec_option(const std::string &spec, const std::string &key)
{
	size_t colon = spec.find(':');
	if (colon == std::string::npos)
		return "";
	std::string opts = spec.substr(colon + 1);
	size_t pos = 0;
	while (pos <= opts.size()) {
		size_t comma = opts.find(',', pos);
		std::string kv = opts.substr(pos, comma == std::string::npos ? std::string::npos
									     : comma - pos);
		if (kv.compare(0, key.size() + 1, key + "=") == 0)
			return kv.substr(key.size() + 1);
		if (comma == std::string::npos)
			break;
		pos = comma + 1;
	}
	return "";
}

struct fi_provider provider = {
	.version = kProvVersion,
	.fi_version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
	.context = {},
	.name = kProvName,
	.getinfo = getinfo,
	.fabric = fabric_open,
	.cleanup = cleanup,
};

namespace {

/* What fi_getinfo says of a device of the machine (vfio:, devx:), asked of the device itself
 * (device_query: a bring-up when no fabric of the process holds it) once per spec and process:
 * later calls take the answer kept here. A device that cannot be opened is asked again next
 * time. */
int device_spec_queried(const std::string &spec, DeviceSpec *out)
{
	static std::mutex mu;
	static std::map<std::string, DeviceSpec> known;
	std::lock_guard lk(mu);
	if (auto it = known.find(spec); it != known.end()) {
		*out = it->second;
		return 0;
	}
	nicmr_device_attr a{};
	bool wire = false;
	const int rc = device_query(spec, &a, &wire);
	if (rc != 0) {
		FI_WARN(&provider, FI_LOG_CORE,
			"FI_NICMR_DEVICE=%s: the device cannot be opened: %d\n", spec.c_str(), rc);
		return -FI_ENODATA;
	}
	DeviceSpec ds;
	ds.spec = spec;
	ds.domain_name = spec.substr(5); /* the PCI address or the RDMA device */
	ds.mr_cnt = a.mkey_pool_max;
	ds.ext = a.extensions ? a.ext_flags : 0;
	ds.atomics = a.atomic_mode == NICMR_ATOMIC_HOST;
	ds.requested_keys = a.requested_keys != 0;
	ds.wire = wire;
	try {
		known.emplace(spec, ds);
	} catch (const std::bad_alloc &) {
		/* asked again next time */
	}
	*out = ds;
	return 0;
}

} // namespace

int device_spec(DeviceSpec *out)
{
	char *value = nullptr;
	std::string spec = kDefaultSpec;
	if (fi_param_get_str(&provider, "device", &value) == FI_SUCCESS && value && *value)
		spec = value;
	/* The emulated device's attributes are known from its spec without opening it; a
	 * device of the machine is asked. */
	if (spec.compare(0, 5, "vfio:") == 0 || spec.compare(0, 5, "devx:") == 0)
		return device_spec_queried(spec, out);
	if (spec != "emu" && spec.compare(0, 4, "emu:") != 0) {
		FI_WARN(&provider, FI_LOG_CORE,
			"FI_NICMR_DEVICE=%s: not a device spec (emu[:options], vfio:<PCI address>, "
			"devx:<RDMA device>)\n",
			spec.c_str());
		return -FI_ENODATA;
	}
	size_t mkeys = kEmuDefaultMkeys;
	std::string m = spec_option(spec, "mkeys");
	if (!m.empty()) {
		char *end = nullptr;
		unsigned long long v = std::strtoull(m.c_str(), &end, 0);
		if (!end || *end || v < 2) {
			FI_WARN(&provider, FI_LOG_CORE, "FI_NICMR_DEVICE=%s: bad mkeys\n",
				spec.c_str());
			return -FI_ENODATA;
		}
		mkeys = v;
	}
	/* The emu option ext= (api_device.cpp's values): which device-model extensions the
	 * device offers, so that fi_getinfo can say FI_MR_RMA_EVENT without opening it.
	 * fi_domain asks the opened device again (nicmr_device_query). */
	uint64_t ext = kEmuDefaultExt;
	const std::string e = spec_option(spec, "ext");
	if (e == "0") {
		ext = 0;
	} else if (e == "single_use") {
		ext = NICMR_EXT_SINGLE_USE;
	} else if (e == "rma_event") {
		ext = NICMR_EXT_RMA_EVENT;
	} else if (!e.empty() && e != "1") {
		FI_WARN(&provider, FI_LOG_CORE, "FI_NICMR_DEVICE=%s: bad ext\n", spec.c_str());
		return -FI_ENODATA;
	}
	/* The emu option atomic_endian= (api_device.cpp's values): big-endian-only atomics
	 * cannot give fi_atomic(3)'s host-order semantics, so FI_ATOMIC is not offered. */
	const std::string a = spec_option(spec, "atomic_endian");
	if (!a.empty() && a != "host" && a != "big") {
		FI_WARN(&provider, FI_LOG_CORE, "FI_NICMR_DEVICE=%s: bad atomic_endian\n",
			spec.c_str());
		return -FI_ENODATA;
	}
	/* The emu options mkey_by_name= and mkey_max= (api_device.cpp's values): whether the
	 * device takes requested keys, and the most MRs it registers. */
	const std::string byname = spec_option(spec, "mkey_by_name");
	if (!byname.empty() && byname != "0" && byname != "1") {
		FI_WARN(&provider, FI_LOG_CORE, "FI_NICMR_DEVICE=%s: bad mkey_by_name\n",
			spec.c_str());
		return -FI_ENODATA;
	}
	size_t mr_cnt = mkeys - 1; /* index 0 is never a key */
	/* The default cap leaves the on-demand mkey cache its indices (mr::odp_default_reserve,
	 * doc/odp.md "Indices"): 16 mkeys (odp_prefill=) in each of the 7 buckets up to 2 MiB
	 * plus a headroom of 64, at most half of the keys; none without the cache (odp=0,
	 * odp_cache=0, programmer=cmd). FabricOdpDomain.MrCntIsThePoolCapOfTheOpenedDevice checks
	 * that this is the opened device's mkey_pool_max. */
	if (spec_option(spec, "odp") != "0" && spec_option(spec, "odp_cache") != "0" &&
	    spec_option(spec, "programmer") != "cmd") {
		size_t prefill = 16;
		const std::string pf = spec_option(spec, "odp_prefill");
		if (!pf.empty()) {
			char *end = nullptr;
			prefill = std::strtoull(pf.c_str(), &end, 0);
			if (!end || *end || prefill > 256) {
				FI_WARN(&provider, FI_LOG_CORE,
					"FI_NICMR_DEVICE=%s: bad odp_prefill\n", spec.c_str());
				return -FI_ENODATA;
			}
		}
		mr_cnt -= std::min(prefill * 7 + 64, (mkeys - 1) / 2);
	}
	const std::string mmax = spec_option(spec, "mkey_max");
	if (!mmax.empty()) {
		char *end = nullptr;
		unsigned long long v = std::strtoull(mmax.c_str(), &end, 0);
		if (!end || *end || v < 1 || v > mkeys - 1) {
			FI_WARN(&provider, FI_LOG_CORE, "FI_NICMR_DEVICE=%s: bad mkey_max\n",
				spec.c_str());
			return -FI_ENODATA;
		}
		mr_cnt = v;
	}
	out->wire = !spec_option(spec, "addr").empty();
	out->requested_keys = byname == "1";
	out->atomics = a != "big";
	out->spec = spec;
	out->domain_name = "emu0";
	out->mr_cnt = mr_cnt;
	out->ext = ext;
	return 0;
}

void spec_udp_ports(const std::string &spec, uint16_t *udp_port, uint16_t *peer_udp_port)
{
	*udp_port = *peer_udp_port = 4791;
	const std::string u = spec_option(spec, "udp_port"),
			  pu = spec_option(spec, "peer_udp_port");
	if (!u.empty())
		*udp_port = static_cast<uint16_t>(std::strtoul(u.c_str(), nullptr, 10));
	if (!pu.empty())
		*peer_udp_port = static_cast<uint16_t>(std::strtoul(pu.c_str(), nullptr, 10));
}

int fi_code(int err)
{
	switch (err) {
	case 0:
		return 0;
	case -EEXIST:
		return -FI_ENOKEY; /* requested key live */
	case -EKEYREJECTED:
		return -FI_EKEYREJECTED;
	case -EOPNOTSUPP:
		return -FI_EBADFLAGS;
	case -EXDEV:
		return -FI_EINVAL; /* a raw key of another device is not a key here */
	default:
		return err; /* FI_E* equal errno values for the rest */
	}
}

int no_bind(struct fid *, struct fid *, uint64_t)
{
	return -FI_ENOSYS;
}
int no_control(struct fid *, int, void *)
{
	return -FI_ENOSYS;
}
int no_ops_open(struct fid *, const char *, uint64_t, void **, void *)
{
	return -FI_ENOSYS;
}
int no_tostr(const struct fid *, char *, size_t)
{
	return -FI_ENOSYS;
}
int no_ops_set(struct fid *, const char *, uint64_t, void *, void *)
{
	return -FI_ENOSYS;
}

void route_log()
{
	nicmr_log_get(&saved_log.level, &saved_log.fn, &saved_log.ctx);
	nicmr_log_set(nicmr_level_of_fabric(), log_to_fabric, nullptr);
}

} // namespace nicmr::fabric

/* Called by libnicmr-fi.so's fi_prov_ini (fi_loader.cpp) once it has loaded this module. */
extern "C" __attribute__((visibility("default"))) struct fi_provider *nicmr_fi_impl_ini(void)
{
	using nicmr::fabric::provider;
	fi_param_define(&provider, "device", FI_PARAM_STRING,
			"nicmr device spec to open for the domain (default: emu; "
			"e.g. emu:mkeys=4096)");
	/* The tcp provider's FI_TCP_PORT_LOW_RANGE / FI_TCP_PORT_HIGH_RANGE, for the services of
	 * sockaddr endpoints (fi_sidr.cpp, svc_bind). */
	fi_param_define(&provider, "port_low_range", FI_PARAM_INT,
			"lowest service a sockaddr endpoint without one is given (default: 49152)");
	fi_param_define(
		&provider, "port_high_range", FI_PARAM_INT,
		"highest service a sockaddr endpoint without one is given (default: 65535)");
	nicmr::fabric::route_log();
	return &provider;
}
