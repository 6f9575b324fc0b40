/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The objects behind the nicmr provider's fids. The provider sits on the native C API only.
 *
 *   Fabric ("nicmr") ── nicmr_device (opened by the first fi_domain, closed by fi_close(fabric))
 *     │                └─ mrs: one Mr per mkey index of the device, beside the native MR table
 *     └─ Domain ("emu0") ── nicmr_pd (one per domain) ── Mr (its nicmr_mr; in fabric->mrs)
 *                        └─ Pool (nicmr_pool, through the ops extension)
 *
 * Domains of one fabric share its device, so a raw key made in one maps in another (the
 * device is the NIC; the domains are its protection domains). Every count is an atomic so that
 * fi_close can say -FI_EBUSY while children live; the device pointer is set once under the
 * fabric's mutex.
 */
#ifndef NICMR_FI_INTERNAL_H
#define NICMR_FI_INTERNAL_H

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/providers/fi_prov.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fi_lock.h"
#include "nicmr/fi_nicmr.h"
#include "nicmr/nicmr.h"

namespace nicmr::fabric {

inline constexpr const char *kProvName = "nicmr";
inline constexpr const char *kFabricName = "nicmr";
inline constexpr const char *kDefaultSpec = "emu:addr=auto";

/* The mr_mode bits nicmr acts on: ALLOCATED is required; the others are kept when offered.
 * FI_MR_RMA_EVENT is kept when offered too, but only on a device with the RMA-event extension
 * (NICMR_EXT_RMA_EVENT): mr_mode_of() adds it. */
inline constexpr int kMrRequired = FI_MR_ALLOCATED;
inline constexpr int kMrOptional = FI_MR_PROV_KEY | FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_LOCAL;

/* The bits of an application's mr_mode (FI_MR_BASIC is the old spelling of ALLOCATED |
 * PROV_KEY | VIRT_ADDR) that a device with extensions ext (NICMR_EXT_*) acts on, into *out;
 * -1 when the application does not allow what nicmr needs: FI_MR_ALLOCATED, and FI_MR_PROV_KEY
 * on a device that cannot take requested keys (requested_keys false: it chooses every mkey
 * index, as a stock ConnectX does; fi_mr(3): FI_MR_PROV_KEY "indicates that the provider does
 * not support application requested MR keys", and fi_getinfo(3) leaves out a provider whose
 * required mr_mode bits the application did not set). */
inline int mr_mode_of(int offered, uint64_t ext, bool requested_keys, int *out)
{
	if (offered == FI_MR_BASIC)
		offered = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	else if (offered & (FI_MR_BASIC | FI_MR_SCALABLE))
		return -1; /* FI_MR_SCALABLE: nicmr needs FI_MR_ALLOCATED */
	if ((offered & kMrRequired) != kMrRequired)
		return -1;
	if (!requested_keys && !(offered & FI_MR_PROV_KEY))
		return -1;
	const int acts =
		kMrRequired | kMrOptional | ((ext & NICMR_EXT_RMA_EVENT) ? FI_MR_RMA_EVENT : 0);
	*out = offered & acts;
	return 0;
}

/* The capabilities that expose memory to peers or reach theirs, and the mr_mode bits that only
 * concern such memory (libfabric's util names them the RMA-target modes, ofi_check_mr_mode in
 * prov/util/src/util_attr.c). An application that asks for messages only need not offer those
 * bits nor FI_MR_ALLOCATED (Open MPI's OFI MTL offers mr_mode 0): nicmr then keeps its own
 * (ALLOCATED | PROV_KEY | VIRT_ADDR) for the keys of its local descriptors, which no peer
 * sees, and the answer has no RMA or atomic capability (doc/libfabric.md, "mr_mode"). */
inline constexpr uint64_t kRmaCaps =
	FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RMA_EVENT;
inline bool msg_only(uint64_t caps)
{
	return caps != 0 && !(caps & kRmaCaps);
}
inline int mr_offered_for(int offered, uint64_t caps)
{
	if (!msg_only(caps) || offered == FI_MR_BASIC || offered == FI_MR_SCALABLE)
		return offered;
	return offered | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
}

/* libfabric 2.x's single-use registration flag, which means what FI_NICMR_MR_SINGLE_USE means
 * (fi_mr.cpp); 0 under 1.x headers, which lack it. */
#ifdef FI_MR_SINGLE_USE
inline constexpr uint64_t kStdSingleUse = FI_MR_SINGLE_USE;
#else
inline constexpr uint64_t kStdSingleUse = 0;
#endif

/* Key sizes: the mkey (32 bits), or the raw key blob under FI_MR_RAW. */
inline constexpr size_t kKeySize = 4;
inline constexpr size_t kRawKeySize = NICMR_RAW_KEY_SIZE;

extern struct fi_provider provider;

/* The device spec (FI_NICMR_DEVICE) and what getinfo says of it; -FI_ENODATA when the spec is
 * not one this version offers through libfabric. */
struct DeviceSpec {
	std::string spec;
	std::string domain_name;
	size_t mr_cnt;
	uint64_t ext; /* NICMR_EXT_* the emu spec's ext= option gives the device */
	/* The emu spec's atomic_endian= option: host-endian atomics (FI_ATOMIC offered). */
	bool atomics;
	/* The emu spec's mkey_by_name=1: requested keys (FI_MR_PROV_KEY optional); else
	 * FI_MR_PROV_KEY is required. */
	bool requested_keys;
	/* The spec's addr= puts port 1 on the UDP wire: endpoints are named and reached across
	 * processes (fi_ep.cpp). */
	bool wire = false;
};
int device_spec(DeviceSpec *out);
/* Opens the device of spec (or takes the process's open one: fi_domain.cpp share_acquire),
 * queries its attributes and whether its port 1 is on a wire, and lets it go. 0 or the native
 * open's or query's error. Slow path (a bring-up when no fabric holds the device). */
int device_query(const std::string &spec, nicmr_device_attr *attr, bool *wire);
/* The value of option key= in a device spec ("emu:ports=2,mkeys=1024"), or "". */
std::string spec_option(const std::string &spec, const std::string &key);
/* The emu spec's udp_port= and peer_udp_port= (4791 each by default). */
void spec_udp_ports(const std::string &spec, uint16_t *udp_port, uint16_t *peer_udp_port);

/* Negative errno of the native API to a libfabric code. */
int fi_code(int native_err);

struct Endpoint;

/* 2.x's libfabric calls the translation page size fi_mr_attr.page_size; these are the sizes the
 * device's mkeys take (log_page_size 12 .. 30). */
inline constexpr size_t kMinPageSize = size_t{1} << 12;
inline constexpr size_t kMaxPageSize = size_t{1} << 30;

/*
 * An opened device and what belongs to it rather than to one fabric (fi_domain.cpp,
 * share_acquire). The fabrics of a process whose spec names one fixed wire address share one
 * (a port is one address and one UDP port: a second device there could not bind; Open MPI's
 * MTL and BTL each open a fabric), every other fabric has a device of its own.
 */
struct Gsi; /* fi_sidr.cpp */

struct DeviceShare {
	nicmr_device *dev = nullptr;
	std::string spec;
	unsigned refs = 0;   /* the registry's lock: fabrics using it */
	bool listed = false; /* in the registry (shared by spec) */
	std::mutex mu;	     /* guards eps, ep_count and the endpoints' inbound lists */
	/* Endpoints by the number of their address QP (fi_ep.cpp): how a peer on this device is
	 * found, whichever fabric opened it. */
	std::unordered_map<uint32_t, Endpoint *> eps; /* mu */
	uint64_t ep_count = 0;			      /* mu: endpoints ever opened (ports) */
	/* Completion events (fi_wait.cpp): the device has one event descriptor; ev_mu guards
	 * taking its events and ev_eps, the endpoints by their native CQ, so that an event wakes
	 * the CQ and counters of the endpoint it names. ev_mu is never held while an endpoint's
	 * mu is taken. */
	std::mutex ev_mu;
	std::unordered_map<const nicmr_cq *, Endpoint *> ev_eps; /* ev_mu */
	/* The wire port's GSI QP and the service registry (fi_sidr.cpp): made under mu by the
	 * first endpoint of a domain whose names are sockaddrs (published with a release store:
	 * other endpoints' progress reads it without mu), destroyed with the device. */
	std::atomic<Gsi *> gsi{nullptr};
};

struct Fabric {
	struct fid_fabric fid; /* first: &fid is the Fabric */
	std::mutex mu;	       /* guards the device's first use (sh, dev, mrs) */
	DeviceShare *sh = nullptr;
	nicmr_device *dev = nullptr; /* sh->dev */
	std::string spec;
	std::string domain_name;
	std::atomic<uint64_t> domains{0};
	std::atomic<uint64_t> eqs{0};
	/* The provider's MR objects, one per mkey index of the device (mr_slot), as the native
	 * API keeps its MR handles: mapped with the device (zero-filled, pages populated on
	 * first use), unmapped with the fabric. */
	struct Mr *mrs = nullptr;
	size_t mr_slots = 0;
};

struct Mr;
struct Cntr;

/*
 * The wait object of a CQ or counter opened with FI_WAIT_FD or FI_WAIT_UNSPEC on a device that
 * has completion events (fi_wait.cpp). fd is an epoll descriptor over two: the device's event
 * descriptor (readable when an armed native CQ of the device completed) and sig, this object's
 * own eventfd, which the taker of a device event writes for every CQ and counter of the
 * endpoint the event names (and fi_cq_signal writes). Level-triggered throughout, so a wake-up
 * another thread took is never lost: its sig stays readable. Slow path: waiting only.
 */
struct Waiter {
	int fd = -1;  /* FI_GETWAIT's descriptor; -1: none (poll by yielding) */
	int sig = -1; /* eventfd */
};

struct Domain {
	struct fid_domain fid; /* first */
	Fabric *fabric = nullptr;
	nicmr_pd *pd = nullptr;
	int mr_mode = 0;
	uint64_t ext = 0; /* the device's NICMR_EXT_* (nicmr_device_query) */
	/* The device's atomics work on host-order words (nicmr_device_attr.atomic_mode is
	 * NICMR_ATOMIC_HOST): FI_ATOMIC is offered; else every atomic is -FI_EOPNOTSUPP. */
	bool atomics = false;
	/* The domain's names are strings (FI_ADDR_STR: fi_getname, fi_av_insert, fi_av_lookup
	 * take and give "fi_nicmr://..."), else struct fi_nicmr_name. */
	bool addr_str = false;
	/* The domain's names are sockaddrs (FI_SOCKADDR_IN: AF_INET, FI_SOCKADDR_IN6: AF_INET6;
	 * 0 otherwise): an address and a port, the port naming the endpoint's service on the
	 * device that holds the address (fi_sidr.cpp). */
	int sock = 0;
	/* The device offers on-demand-paging MRs (nicmr_device_attr.odp): FI_NICMR_MR_ON_DEMAND
	 * and the ops extension's advise; else both are -FI_EOPNOTSUPP. */
	bool odp = false;
	/* Guards the binding state (Mr::cntr, Mr::enabled) of the domain's RMA-event MRs:
	 * fi_mr_bind, fi_mr_enable and the close of such an MR (slow paths only). */
	std::mutex ext_mu;
	/* The threading model the domain was opened with is FI_THREAD_DOMAIN or
	 * FI_THREAD_COMPLETION: its endpoints', CQs' and counters' FiLocks are no-ops; an AV's
	 * only under FI_THREAD_DOMAIN (endpoints of different CQs may share an AV). */
	bool serialized = false;
	bool domain_serialized = false;
	std::atomic<uint64_t> pools{0};
	/* Endpoints, AVs, CQs and counters of the domain (fi_close(domain) is -FI_EBUSY). */
	std::atomic<uint64_t> children{0};
	/* mr_mode without FI_MR_LOCAL: the provider registers the local buffers of RMA requests
	 * that come without a descriptor through this cache (local_cache_get), made by the
	 * domain's first endpoint and destroyed with the domain. cache_mu guards its creation. */
	std::mutex cache_mu;
	nicmr_mr_cache *local_cache = nullptr;
};

/* The domain's cache of local registrations, created on first use from the FI_MR_CACHE_*
 * environment (doc/libfabric.md, "Local buffers without FI_MR_LOCAL"). Slow path. */
int local_cache_get(Domain *dom, nicmr_mr_cache **out);

/*
 * An MR's provider object: the slot of its key's index in its fabric's table (mr_slot), filled
 * by the registration that got the key and handed out as the fid; a slot whose fid class is not
 * FI_CLASS_MR holds no MR. The registering thread writes it with plain stores; its fi_close
 * marks it closed before the native deregistration gives the index back (after that, another
 * registration may fill the slot). It holds the fid and the native MR only: what the MR is
 * (sub-MR, vectored, its extension flags, its counter binding) is the native MR's to say
 * (nicmr_mr_query), and so are its local addresses (nicmr_mr_addr_of).
 */
struct Mr {
	struct fid_mr fid; /* first */
	Domain *domain = nullptr;
	nicmr_mr *mr = nullptr;
};

/* The slot of a key the device gave out (NICMR_KEY_INDEX: no two live keys share a slot).
 * Registration path: no lock, no allocation, no system call. */
inline Mr *mr_slot(Fabric *fab, uint32_t key) noexcept
{
	return &fab->mrs[NICMR_KEY_INDEX(key)];
}
/* Maps fab->mrs for the device's mkey_count indices (fab->dev open; fab->mu held). 0 or
 * -FI_ENOMEM. */
int mr_table_map(Fabric *fab, uint32_t mkey_count);
/* Unmaps it (fabric close, no MR live). */
void mr_table_unmap(Fabric *fab);

/* The address of a local buffer [buf, buf + len) in the key space of its descriptor's MR
 * (nicmr_mr_addr_of: the VA, or the offset when the domain's MRs are offset-based, through the
 * virtual ranges of a vectored MR); -FI_EACCES when the buffer is not inside one range (the
 * descriptor does not cover it). POSTING PATH: no lock, no allocation, no system call. */
inline int mr_local_addr(const Mr *mr, const void *buf, size_t len, uint64_t *addr) noexcept
{
	return nicmr_mr_addr_of(mr->mr, buf, len, addr) == 0 ? 0 : -FI_EACCES;
}

/* ---- Endpoints and their companions (fi_ep.cpp, fi_av.cpp, fi_cq.cpp, fi_cntr.cpp, fi_eq.cpp) */

/* The capabilities an endpoint has: RMA and atomics as initiator and target (FI_ATOMIC only on
 * a device with host-order atomics: Domain::atomics). */
inline constexpr uint64_t kEpCaps =
	FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
/* Messages and tagged messages (fi_msg.cpp), both ways. */
inline constexpr uint64_t kMsgCaps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_MULTI_RECV;
/* Receives by source (fi_msg(3) FI_DIRECTED_RECV) and the source of each receive
 * (fi_cq_readfrom, FI_SOURCE): secondary capabilities, given only when asked for (finding a
 * receive's source costs a lookup per receive: doc/libfabric.md, "Messages"). */
inline constexpr uint64_t kSrcCaps = FI_DIRECTED_RECV | FI_SOURCE;
/* The order of an endpoint's RMA and atomics to one peer (fi_endpoint(3) msg_order): they go
 * out on that peer's one RC QP, whose responder executes requests in the order they were sent;
 * a WRITE after a READ is not promised (IBTA 10.8.3: a responder may run it before the READ's
 * data is read), nor is anything between different peers (different QPs). Completions of
 * different peers come in any order (comp_order FI_ORDER_NONE). Messages to one peer go out
 * on that QP too and are matched in arrival order (FI_ORDER_SAS, fi_msg.cpp); a rendezvous's
 * data moves later (the receiver's READ), so no order of sends against RMA is promised. */
inline constexpr uint64_t kMsgOrder = FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_WAW |
				      FI_ORDER_RMA_RAR | FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAW |
				      FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW |
				      FI_ORDER_ATOMIC_WAW | FI_ORDER_SAS;
/* Requests in flight per endpoint (tx_attr->size), the depth of every QP and CQ it makes. */
inline constexpr uint32_t kEpDepth = 64;
/* Largest fi_inject_write / inline write (the device's inline WRITE payload). */
inline constexpr size_t kInjectSize = NICMR_MAX_INLINE;
/* Default sizes of a CQ and an AV when the attributes say 0. */
inline constexpr size_t kCqDefaultSize = 256;
inline constexpr size_t kAvDefaultCount = 64;

/* An endpoint's address, decoded from its name (struct fi_nicmr_name, network order) into host
 * order: on a wire device the wire port's GID and UDP port and the endpoint's handshake UD QP;
 * the device, and the port of in-device pairs. */
struct EpAddr {
	uint8_t kind; /* FI_NICMR_NAME_WIRE or _LOCAL */
	uint16_t udp_port;
	uint8_t gid[16];
	uint32_t qpn;
	uint32_t port;
	uint64_t device_id;
	/* A sockaddr name's port (a wire name): the endpoint's service on the device at gid,
	 * by which it is known (name_same); its qpn is 0 until the service is resolved
	 * (svc_resolve). 0: the name has no service. */
	uint16_t service;
};
inline constexpr size_t kNameSize = sizeof(struct fi_nicmr_name);
/* The longest FI_ADDR_STR name with its NUL (an IPv6 address in brackets). */
inline constexpr size_t kStrMax = 112;
/* Encodes a into name (kNameSize bytes). */
void name_encode(const EpAddr &a, void *name);
/* Decodes a name: 0, or -FI_EINVAL (not a name of this version: magic, version, kind, port,
 * qpn, or a wire name without a GID). */
int name_decode(const void *name, EpAddr *a);
/* The FI_ADDR_STR form of a: "fi_nicmr://<IPv4>:<udp>/0x<qpn>/<port>/<device id>" (IPv6 in
 * brackets; "local:0" for a local name), into buf of len bytes (cut, NUL-terminated, when
 * short); returns the length of the whole string without its NUL. */
size_t name_to_str(const EpAddr &a, char *buf, size_t len);
/* Parses that form: 0, or -FI_EINVAL (not one, or a field name_decode refuses). */
int name_from_str(const char *s, EpAddr *a);

struct Av {
	struct fid_av fid; /* first */
	Domain *domain = nullptr;
	enum fi_av_type type = FI_AV_TABLE;
	FiLock mu; /* guards table (inserts may grow it) */
	std::vector<EpAddr> table;
	std::vector<uint8_t> live;
	std::atomic<uint64_t> eps{0}; /* endpoints bound */
};
/* The address behind fi_addr, or -FI_EINVAL (no such live entry). */
int av_lookup_addr(Av *av, fi_addr_t fi_addr, EpAddr *out);
/* Records (or, with qpn 0, forgets) the handshake QP a sockaddr entry's service resolved to,
 * so that later requests skip the resolution. */
void av_resolved(Av *av, fi_addr_t fi_addr, uint32_t qpn);
/* A sockaddr name of domain family sock (AF_INET or AF_INET6) decoded into a: its address as
 * a GID, its port as the service, udp_port the device's peer UDP port. 0, or -FI_EINVAL (another
 * family, port 0, the unspecified address). */
int sock_decode(int sock, const void *sa, uint16_t udp_port, EpAddr *a);
/* The sockaddr of a sockaddr name into out (room for a sockaddr_in6); returns its length. */
size_t sock_encode(int sock, const EpAddr &a, void *out);
/* Its string form, libfabric's own: "fi_sockaddr_in://<IPv4>:<port>" or
 * "fi_sockaddr_in6://[<IPv6>]:<port>", into buf of len bytes (cut, NUL-terminated, when
 * short); returns the length of the whole string without its NUL. */
size_t sock_to_str(int sock, const EpAddr &a, char *buf, size_t len);
/* Whether two names name one endpoint: a wire name by its GID, UDP port and address QP, a
 * local name by its device, port and address QP. */
bool name_same(const EpAddr &a, const EpAddr &b);
/* The oldest live entry of av holding a's name, or FI_ADDR_NOTAVAIL (none, or av null).
 * Receive path: the AV's lock, a walk of the table; no allocation, no system call. */
fi_addr_t av_reverse(Av *av, const EpAddr &a);
/* Whether entry fi_addr of av is live and holds a's name (a cached av_reverse still holds). */
bool av_holds(Av *av, fi_addr_t fi_addr, const EpAddr &a);

/* One completion as a CQ holds it until read. RMA and atomics fill the first four; a
 * received message (fi_msg.cpp) the rest too, for FI_CQ_FORMAT_MSG, _DATA and _TAGGED. */
struct CqEntry {
	void *context;
	uint64_t flags;
	int err;	/* 0 or a positive FI_E* */
	int prov_errno; /* the CQE syndrome */
	void *buf = nullptr;
	size_t len = 0;
	uint64_t data = 0;
	uint64_t tag = 0;
	size_t olen = 0;		  /* FI_ETRUNC: the bytes that did not fit */
	fi_addr_t src = FI_ADDR_NOTAVAIL; /* a receive's source (FI_SOURCE), for readfrom */
};

struct Cq {
	struct fid_cq fid; /* first */
	Domain *domain = nullptr;
	enum fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
	int wait_obj = FI_WAIT_NONE;
	Waiter wait;
	std::atomic<bool> signaled{false}; /* fi_cq_signal: the next sread returns */
	FiLock bind_mu;			   /* guards eps; taken before any endpoint's mu */
	std::vector<Endpoint *> eps;	   /* bind_mu */
	FiLock mu;			   /* guards the ring; taken after an endpoint's mu */
	std::vector<CqEntry> ring;
	uint64_t head = 0, tail = 0; /* mu */
};
/* Room left in the ring (mu held). */
inline size_t cq_room(const Cq *cq)
{
	return cq->ring.size() - static_cast<size_t>(cq->tail - cq->head);
}
/* Appends an entry (mu held; the caller checked the room). */
void cq_push(Cq *cq, const CqEntry &e);

struct Cntr {
	struct fid_cntr fid; /* first */
	Domain *domain = nullptr;
	/* The count is value + the native counter's: completions of bound endpoints count in
	 * value, remote writes into bound RMA-event MRs in the device's counter. */
	std::atomic<uint64_t> value{0};
	std::atomic<uint64_t> errs{0};
	FiLock bind_mu;		     /* as Cq::bind_mu; also guards the native counter's making */
	std::vector<Endpoint *> eps; /* bind_mu */
	/* The device's counter, made by the first fi_mr_bind of this counter; set once (under
	 * bind_mu, published with release), freed by the counter's close. */
	std::atomic<nicmr_cntr *> native{nullptr};
	int wait_obj = FI_WAIT_NONE;
	Waiter wait;
	/* The count and error count the application last read (fi_trywait says -FI_EAGAIN once
	 * either moved). relaxed: hints for trywait only. */
	std::atomic<uint64_t> seen{0}, seen_errs{0};
};
/* The counter's native counter, made on first use (in a domain with FI_MR_RMA_EVENT): 0;
 * -FI_ENOMEM (the device's DMA memory is full). Slow path. */
int cntr_native(Cntr *cntr, nicmr_cntr **out);

/* An EQ: the events the application writes (fi_eq_write, with FI_WRITE), in order, at most
 * `size` (fi_eq.cpp). Slow path throughout: mu guards the queue. */
struct Eq {
	struct fid_eq fid; /* first */
	Fabric *fabric = nullptr;
	std::atomic<uint64_t> eps{0};
	uint64_t flags = 0;	     /* fi_eq_attr.flags: FI_WRITE, FI_AFFINITY */
	int wait_obj = FI_WAIT_NONE; /* NONE, UNSPEC, FD or YIELD */
	size_t size = 0;
	int fd = -1; /* FI_WAIT_FD: an eventfd, readable while an event is queued */
	std::mutex mu;
	std::condition_variable cv; /* FI_WAIT_UNSPEC: a write wakes fi_eq_sread */
	struct Event {
		uint32_t event;
		std::vector<uint8_t> data;
	};
	std::deque<Event> events; /* mu */
};

/* Polls the endpoint's completions into its CQ and counters (fi_ep.cpp). */
void ep_progress(Endpoint *ep);
/* Arms the endpoint's native CQ for its next completion (under its mu): 0 or a FI_E* code. */
int ep_arm(Endpoint *ep);
/* Wakes the wait objects of the endpoint's CQ and counters (fabric ev_mu held). */
void ep_wake(Endpoint *ep);

/* The first 12 bytes of an IPv4-mapped GID (::ffff:a.b.c.d, RFC 4291 2.5.5.2): the RoCEv2
 * GID of an IPv4 address, whose last 4 bytes are the address. */
inline constexpr uint8_t kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
/* Whether a GID is an IPv4 address's (IPv4-mapped) rather than an IPv6 one. */
inline bool gid_is_v4(const uint8_t gid[16])
{
	return std::memcmp(gid, kV4MappedPrefix, sizeof(kV4MappedPrefix)) == 0;
}

/* The attributes of a UD QP on port whose sends and receives (send and recv of them, one
 * scatter entry each) complete to cq: the handshake's (fi_ep.cpp) and the GSI QP (fi_sidr.cpp). */
inline nicmr_ud_qp_attr ud_qp_attr(uint32_t port, nicmr_cq *cq, uint32_t send, uint32_t recv)
{
	nicmr_ud_qp_attr ua{};
	ua.size = sizeof(ua);
	ua.attr.port = port;
	ua.attr.send_cq = cq;
	ua.attr.depth = send;
	ua.attr.recv_depth = recv;
	ua.attr.max_recv_sge = 1;
	return ua;
}

/* Posts one receive of len bytes at slot, inside mr, on a UD QP, with wr_id. */
inline int ud_post_slot(nicmr_qp *qp, nicmr_mr *mr, const void *slot, size_t len, uint64_t wr_id)
{
	nicmr_sge sge{};
	sge.addr = reinterpret_cast<uintptr_t>(slot);
	sge.length = static_cast<uint32_t>(len);
	sge.lkey = nicmr_mr_key(mr);
	return nicmr_post_recv(qp, &sge, 1, wr_id);
}

/* ---- Service IDs (fi_sidr.cpp): sockaddr names to handshake QPs, through the device's GSI QP */

/* The Q_Key of the endpoints' handshake UD QPs (fi_ep.cpp), which a SIDR_REP names. */
inline constexpr uint32_t kHsQkey = 0x4e4d52; /* "NMR" */
/* Binds endpoint ep (its handshake QP qpn) to *service on its device, the device's GSI QP on
 * port made first if it has none; *service 0 takes the first free port of the ephemeral range
 * (FI_NICMR_PORT_LOW_RANGE..FI_NICMR_PORT_HIGH_RANGE, 49152..65535 by default) and says which.
 * 0; -FI_EADDRINUSE (taken, or no port of the range free); -FI_EINVAL (the range is not one of
 * 1..65535); -FI_ENOMEM; -FI_ENOSPC and the native errors of the GSI QP's making. Slow path. */
int svc_bind(Fabric *fab, Endpoint *ep, uint32_t port, uint32_t qpn, uint16_t *service);
/* Gives the service back (the endpoint's close, before its CQs and counters go). */
void svc_unbind(Fabric *fab, uint16_t service);
/* The handshake QP bound to service on this device: true, or false (none). */
bool svc_local(Fabric *fab, uint16_t service, uint32_t *qpn);
/* The handshake QP of service on the device at gid: 0 with *qpn once its SIDR_REP came;
 * -FI_EAGAIN while asked (SIDR_REQ sent, resent on a timer); -FI_ECONNREFUSED once when the
 * peer's device has no endpoint there; -FI_ETIMEDOUT once when nobody answered (about 13 s);
 * -FI_EADDRNOTAVAIL on a device without a GSI QP; -FI_ENOMEM. src_port: the asking endpoint's
 * service. Slow path. */
int svc_resolve(Fabric *fab, const uint8_t gid[16], uint16_t service, uint16_t src_port,
		uint32_t *qpn);
/* Forgets a resolution (its handshake failed: the endpoint may have gone). */
void svc_forget(Fabric *fab, const uint8_t gid[16], uint16_t service);
/* Answers the SIDR_REQs that came and takes the SIDR_REPs (an idle progress turn of a
 * sockaddr endpoint): returns at once when another thread polls the GSI QP. */
void gsi_poll(DeviceShare *sh);
/* Arms the GSI QP's CQ for its next completion (a sockaddr endpoint's wait): 0 or FI_E*. */
int gsi_arm(DeviceShare *sh);
/* A completion event of the GSI QP's CQ (ev_mu held): wakes every bound endpoint's waiters. */
void gsi_wake(DeviceShare *sh);
/* Destroys the GSI QP and its resources (the device's last fabric closes it). */
void gsi_destroy(DeviceShare *sh);

/* Opens w for a CQ or counter of dom: 0; -FI_ENOSYS when the device has no completion events
 * and a descriptor was asked for (fd_required); -errno of eventfd/epoll. Without events and
 * not required, w stays without a descriptor. */
int waiter_open(Domain *dom, Waiter *w, bool fd_required);
void waiter_close(Waiter *w);
/* A CQ's or counter's wait_obj at open: FI_WAIT_NONE and FI_WAIT_YIELD need nothing, FD and
 * UNSPEC open w (waiter_open); 0, waiter_open's codes, or -FI_ENOSYS for any other. */
int waiter_setup(Domain *dom, int wait_obj, Waiter *w);
/* fi_control on a CQ or counter: FI_GETWAIT gives w's descriptor under FI_WAIT_FD (0);
 * -FI_ENODATA for other wait objects, -FI_EINVAL (null arg), -FI_ENOSYS (other commands). */
int waiter_control(int wait_obj, const Waiter &w, int command, void *arg);
/* Makes w readable (sig). */
void waiter_wake(Waiter *w);
/* Empties sig. */
void waiter_drain(Waiter *w);
/* Takes every pending completion event of the fabric's device and wakes the endpoints they
 * name. */
void events_dispatch(Fabric *fab);
/* Blocks until w's descriptor is readable or timeout_ms passed (-1: no end): 0, or
 * -FI_ETIMEDOUT. Without a descriptor it yields once and returns 0. */
int waiter_block(Waiter *w, int timeout_ms);
/* Registers an endpoint's native CQ for events (ev_eps): 0 or -FI_ENOMEM. Its close erases it
 * under ev_mu together with the CQ's destruction. */
int events_add(Fabric *fab, const nicmr_cq *ncq, Endpoint *ep);
/* Arms every endpoint of a CQ's or counter's list (its bind_mu held): 0 or a FI_E* code. */
int eps_arm(const std::vector<Endpoint *> &eps);
/* fi_trywait for one CQ or counter: 0 when it is armed and nothing is pending, -FI_EAGAIN
 * when something is. */
int cq_trywait(Cq *cq);
int cntr_trywait(Cntr *cntr);
/* Detaches an endpoint from a CQ or counter (its close). */
void cq_unbind(Cq *cq, Endpoint *ep);
void cntr_unbind(Cntr *cntr, Endpoint *ep);
int cq_bind_ep(Cq *cq, Endpoint *ep);
int cntr_bind_ep(Cntr *cntr, Endpoint *ep);

Av *av_of(struct fid *fid);
Cq *cq_of(struct fid *fid);
Cntr *cntr_of(struct fid *fid);
Eq *eq_of(struct fid *fid);
/* fi_trywait on one EQ with FI_WAIT_FD: 0 when it has no event, -FI_EAGAIN when it has one;
 * -FI_EINVAL for an EQ without a descriptor. */
int eq_trywait(Eq *eq);

int av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context);
int cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context);
int cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr,
	      void *context);
int eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq, void *context);
int endpoint_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
		  void *context);
int query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op,
		 struct fi_atomic_attr *attr, uint64_t flags);
/* The datatype/op pairs the device does for each kind of atomic call (0 or -FI_EOPNOTSUPP). */
int atomic_valid(const Domain *dom, enum fi_datatype datatype, enum fi_op op, uint64_t kind_flags);

int fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
int domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom,
		void *context);
int mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
	   uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
int mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access,
	    uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
	    void *context);
int mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr);
int mr_map_raw(Domain *dom, struct fi_mr_map_raw *map);
int mr_unmap_key(Domain *dom, const uint64_t *key);
Mr *mr_of(struct fid_mr *mr);
/* fi_mr_regattr with 2.x's base_mr and page_size (the "nicmr_mr_ops" extension, and
 * fi_mr_regattr itself when built against 2.x headers). */
int mr_regattr_ext(struct fid *fid, const struct fi_mr_attr *attr, struct fid_mr *base_mr,
		   size_t page_size, uint64_t flags, struct fid_mr **mr);
int pool_ops_open(Domain *dom, void **ops);
int mr_ops_open(Domain *dom, void **ops);

/* Stubs for the calls a provider without endpoints does not offer. */
int no_bind(struct fid *, struct fid *, uint64_t);
int no_control(struct fid *, int, void *);
int no_ops_open(struct fid *, const char *, uint64_t, void **, void *);
int no_tostr(const struct fid *, char *, size_t);
int no_ops_set(struct fid *, const char *, uint64_t, void *, void *);

} // namespace nicmr::fabric

#endif
