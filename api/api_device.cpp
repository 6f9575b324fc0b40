/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Devices by spec string, their queries, raw keys, key lookups and data-path readers.
 *
 *   "emu[:opts]"        emu_mlx5_create -> DmaSpace(fn.dma()) -> mlx5::Device::open
 *   "vfio:<pci addr>"   vfio::Device::open (own container) -> DmaSpace -> mlx5::Device::open
 *   "devx:<ib dev>"     DevxTransport::open (registration over DEVX is not offered yet)
 * then, for both bus kinds: a private PD for free mkeys, the mkey programmer (the driver's UMR
 * one, or its command one with programmer=cmd), the Engine.
 */
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "api_wiring.h"
#include "mlx5_cmd_programmer.h"
#include "mlx5_mkey_programmer.h"
#include "nicmr_config.h"
#include "nicmr_log.h"
#include "nicmr_parse.h"
#if NICMR_HAVE_RDMA_CORE
#include "mlx5_devx.h"
#endif

using namespace nicmr;

namespace nicmr::api {

namespace {

struct EmuOptions {
	bool umr = true; /* programmer=umr (default) or programmer=cmd */
	uint32_t ports = kEmuDefaultPorts;
	uint32_t mkeys = kEmuDefaultMkeys;
	emu::DoorbellDelivery delivery = emu::DoorbellDelivery::inline_call;
	/* ext=1 (default): every device-model extension; 0: none (a plain ConnectX); or one by
	 * name: single_use, rma_event. */
	uint64_t ext = mlx5::prm::ext_cap::single_use | mlx5::prm::ext_cap::rma_event;
	/* atomic_endian=host (default): the device offers host-endian atomics; big: it does
	 * big-endian atomics only (no supported_atomic_req_8B_endianness_mode_1). */
	bool atomic_host_endianness = true;
	/* trace=N: the model records its first N commands (EmuConfig::trace_capacity); 0 off. */
	uint32_t trace = 0;
	/* fail_opcode=OP: the model fails every command of that opcode (fault injection for
	 * tools' tests, EmuConfig::fail_opcode); 0 none. */
	uint16_t fail_opcode = 0;
	/* fail_umr=N: the model refuses the Nth UMR work request since power-on
	 * (EmuConfig::fail_umr, fault injection for tests); 0 none. */
	uint64_t fail_umr = 0;
	/* iova_bits=N: the emulated IOMMU's IOVA width, 32..48 (48, a VT-d's, by default); the
	 * slow-path IOVA window is the top quarter of its highest range (mem::SlowMaps::window),
	 * 4 MiB at 32 bits. */
	uint32_t iova_bits = emu::kMaxIovaBits;
	/* mkey_by_name=1: the device creates mkeys at chosen indices (requested keys, the
	 * command programmer, indirect regions); 0 (default): it chooses, as a stock ConnectX. */
	bool mkey_by_name = false;
	/* odp=0: the device lacks on-demand paging (cmd_hca_cap.pg 0); 1 (default): it has it
	 * (doc/odp.md). */
	bool odp = true;
	/* msix_vectors=N: the function's MSI-X table, 0 to 256 (0: a bus without interrupts, so
	 * no completion events; doc/device-model.md). */
	unsigned msix_vectors = 64;
	/* log_max_qp=N: the device's QP table, 2^N entries (QP numbers 2 .. 2^N - 1, shared by
	 * the UMR lanes and the application's QPs), 2 to 24 (emu::EmuConfig::log_max_qp). */
	uint32_t log_max_qp = emu::EmuConfig{}.log_max_qp;
	/* odp_prefill=N: on-demand mkeys the engine makes per small bucket at open
	 * (mr::OdpCacheConfig::prefill, doc/odp.md); odp_cache=0: no on-demand mkey cache (ODP
	 * MRs then need mkey_by_name=1, as requested keys always do). */
	uint32_t odp_prefill = mr::OdpCacheConfig{}.prefill;
	bool odp_cache = true;
	/* The engine's mkey pool (doc/registration.md): mkey_pool= mkeys created at open
	 * (default mr::kDefaultPoolInitial, clamped to the cap), mkey_max= the cap (default
	 * mkeys - 1). */
	uint32_t pool_initial = mr::kDefaultPoolInitial;
	uint32_t pool_max = 0;
	/* key_seed=N (nonzero): keys repeat from run to run (mr::EngineConfig::key_seed) for
	 * transcripts and golden tests; 0 (default): unpredictable keys. */
	uint64_t key_seed = 0;
	/* The UDP wire (doc/device-model.md, "The UDP wire"): addr= / addr2= put port 1 / 2 on
	 * it at that numeric IPv4 or IPv6 address; udp_port= where they listen, peer_udp_port=
	 * where their peers do (both 4791 by default). */
	std::string addr[2];
	uint16_t udp_port = 4791, peer_udp_port = 4791;
	/* Fault injection on the wire ports' sends: loss=, dup=, reorder= (percent), delay_us=,
	 * fault_seed= (emu::WireFaults). */
	emu::WireFaults faults;
	/* gro=0: the wire ports receive one datagram per message, without UDP GRO
	 * (emu::WirePortConfig::gro). */
	bool gro = true;
	/* rx_batch=N: messages a wire port's receive call takes, 1..32; 0 (default) adapts
	 * (emu::WirePortConfig::rx_batch). */
	uint32_t rx_batch = 0;
	bool caller_progress = true; /* progress=caller|thread */
};

/* The pool sizes a device spec gives the engine (vfio and devx specs take the defaults), and
 * its key seed. */
struct PoolOptions {
	uint32_t initial = mr::kDefaultPoolInitial;
	uint32_t max = 0; /* 0: the device's mkey count - 1 */
	uint64_t key_seed = 0;
	/* The engine's on-demand mkey cache (made only where the device pages on demand). */
	bool odp_cache = true;
	uint32_t odp_prefill = mr::OdpCacheConfig{}.prefill;
};

bool parse_u32(std::string_view v, uint32_t *out)
{
	if (v.empty() || v.size() > 9)
		return false;
	uint32_t x = 0;
	for (char c : v) {
		if (c < '0' || c > '9')
			return false;
		x = x * 10 + uint32_t(c - '0');
	}
	*out = x;
	return true;
}

/*
 * Hand-made on purpose, not DPDK's rte_kvargs_parse: checked against DPDK 22.11, rte_kvargs
 * accepts what the native API refuses with -EINVAL (doc/native-api.md, test_api.cpp): a bare
 * key ("ports" gives a NULL value), a trailing or doubled comma ("ports=1," and
 * "ports=1,,mkeys=2" parse as if the empty option were not there), and "ports=1=2" (split at
 * the second '='). Refusing those again around it would parse the string twice.
 */
int parse_emu(std::string_view opts, EmuOptions *o)
{
	if (!opts.empty() && opts.back() == ',') {
		NICMR_LOG(error, "api", "emu options end with an empty option");
		return -EINVAL;
	}
	while (!opts.empty()) {
		size_t comma = opts.find(',');
		std::string_view kv = opts.substr(0, comma);
		opts = comma == std::string_view::npos ? std::string_view{}
						       : opts.substr(comma + 1);
		size_t eq = kv.find('=');
		if (eq == std::string_view::npos) {
			NICMR_LOG(error, "api", "emu option '%.*s' is not key=value",
				  int(kv.size()), kv.data());
			return -EINVAL;
		}
		std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
		if (k == "ports") {
			if (!parse_u32(v, &o->ports) || o->ports < 1 || o->ports > 2) {
				NICMR_LOG(error, "api", "emu ports=%.*s: 1 or 2", int(v.size()),
					  v.data());
				return -EINVAL;
			}
		} else if (k == "mkeys") {
			if (!parse_u32(v, &o->mkeys) || o->mkeys < 2 || o->mkeys > (1u << 24) ||
			    !std::has_single_bit(o->mkeys)) {
				NICMR_LOG(error, "api",
					  "emu mkeys=%.*s: a power of two from 2 to 16777216",
					  int(v.size()), v.data());
				return -EINVAL;
			}
		} else if (k == "programmer") {
			if (v == "umr")
				o->umr = true;
			else if (v == "cmd")
				o->umr = false;
			else {
				NICMR_LOG(error, "api", "emu programmer=%.*s: umr or cmd",
					  int(v.size()), v.data());
				return -EINVAL;
			}
		} else if (k == "delivery") {
			if (v == "inline")
				o->delivery = emu::DoorbellDelivery::inline_call;
			else if (v == "thread")
				o->delivery = emu::DoorbellDelivery::poll_thread;
			else {
				NICMR_LOG(error, "api", "emu delivery=%.*s: inline or thread",
					  int(v.size()), v.data());
				return -EINVAL;
			}
		} else if (k == "progress") {
			if (v == "caller")
				o->caller_progress = true;
			else if (v == "thread")
				o->caller_progress = false;
			else {
				NICMR_LOG(error, "api", "emu progress=%.*s: caller or thread",
					  int(v.size()), v.data());
				return -EINVAL;
			}
		} else if (k == "ext") {
			namespace ec = mlx5::prm::ext_cap;
			if (v == "0")
				o->ext = 0;
			else if (v == "1")
				o->ext = ec::single_use | ec::rma_event;
			else if (v == "single_use")
				o->ext = ec::single_use;
			else if (v == "rma_event")
				o->ext = ec::rma_event;
			else {
				NICMR_LOG(error, "api",
					  "emu ext=%.*s: 0, 1, single_use or rma_event",
					  int(v.size()), v.data());
				return -EINVAL;
			}
		} else if (k == "mkey_by_name") {
			if (v != "0" && v != "1") {
				NICMR_LOG(error, "api", "emu mkey_by_name=%.*s: 0 or 1",
					  int(v.size()), v.data());
				return -EINVAL;
			}
			o->mkey_by_name = v == "1";
		} else if (k == "odp") {
			if (v != "0" && v != "1") {
				NICMR_LOG(error, "api", "emu odp=%.*s: 0 or 1", int(v.size()),
					  v.data());
				return -EINVAL;
			}
			o->odp = v == "1";
		} else if (k == "msix_vectors") {
			uint32_t x = 0;
			if (!parse_u32(v, &x) || x > 256) {
				NICMR_LOG(error, "api", "emu msix_vectors=%.*s: 0 to 256",
					  int(v.size()), v.data());
				return -EINVAL;
			}
			o->msix_vectors = x;
		} else if (k == "log_max_qp") {
			uint32_t x = 0;
			if (!parse_u32(v, &x) || x < 2 || x > 24) {
				NICMR_LOG(error, "api", "emu log_max_qp=%.*s: 2 to 24",
					  int(v.size()), v.data());
				return -EINVAL;
			}
			o->log_max_qp = x;
		} else if (k == "odp_cache") {
			if (v != "0" && v != "1") {
				NICMR_LOG(error, "api", "emu odp_cache=%.*s: 0 or 1", int(v.size()),
					  v.data());
				return -EINVAL;
			}
			o->odp_cache = v == "1";
		} else if (k == "gro") {
			if (v != "0" && v != "1") {
				NICMR_LOG(error, "api", "emu gro=%.*s: 0 or 1", int(v.size()),
					  v.data());
				return -EINVAL;
			}
			o->gro = v == "1";
		} else if (k == "rx_batch") {
			uint32_t x = 0;
			if (!parse_u32(v, &x) || x > uint32_t(emu::WireRx::kMessages)) {
				NICMR_LOG(error, "api", "emu rx_batch=%.*s: 0 (adapt) to %d",
					  int(v.size()), v.data(), emu::WireRx::kMessages);
				return -EINVAL;
			}
			o->rx_batch = x;
		} else if (k == "odp_prefill") {
			uint32_t x = 0;
			if (!parse_u32(v, &x) || x > mr::OdpCacheConfig{}.bucket_max) {
				NICMR_LOG(error, "api", "emu odp_prefill=%.*s: 0 to %u",
					  int(v.size()), v.data(), mr::OdpCacheConfig{}.bucket_max);
				return -EINVAL;
			}
			o->odp_prefill = x;
		} else if (k == "mkey_pool" || k == "mkey_max") {
			uint32_t x = 0;
			if (!parse_u32(v, &x) || x < 1 || x >= (1u << 24)) {
				NICMR_LOG(error, "api", "emu %.*s=%.*s: 1 to 16777215",
					  int(k.size()), k.data(), int(v.size()), v.data());
				return -EINVAL;
			}
			(k == "mkey_pool" ? o->pool_initial : o->pool_max) = x;
		} else if (k == "key_seed") {
			if (!parse_number(v, &o->key_seed)) {
				NICMR_LOG(error, "api", "emu key_seed=%.*s: a number (0: none)",
					  int(v.size()), v.data());
				return -EINVAL;
			}
		} else if (k == "addr" || k == "addr2") {
			if (v.empty() || v.size() > 45) {
				NICMR_LOG(error, "api",
					  "emu %.*s=%.*s: a numeric IPv4 or IPv6 address",
					  int(k.size()), k.data(), int(v.size()), v.data());
				return -EINVAL;
			}
			o->addr[k == "addr" ? 0 : 1] = std::string(v);
		} else if (k == "udp_port" || k == "peer_udp_port") {
			uint32_t x = 0;
			if (!parse_u32(v, &x) || x < 1 || x > 65535) {
				NICMR_LOG(error, "api", "emu %.*s=%.*s: 1 to 65535", int(k.size()),
					  k.data(), int(v.size()), v.data());
				return -EINVAL;
			}
			(k == "udp_port" ? o->udp_port : o->peer_udp_port) = uint16_t(x);
		} else if (k == "loss" || k == "dup" || k == "reorder") {
			uint32_t x = 0;
			if (!parse_u32(v, &x) || x > 100) {
				NICMR_LOG(error, "api", "emu %.*s=%.*s: a percentage, 0 to 100",
					  int(k.size()), k.data(), int(v.size()), v.data());
				return -EINVAL;
			}
			(k == "loss"  ? o->faults.loss
			 : k == "dup" ? o->faults.dup
				      : o->faults.reorder) = x;
		} else if (k == "delay_us") {
			if (!parse_u32(v, &o->faults.delay_us) ||
			    o->faults.delay_us > emu::WireFaults::kMaxDelayUs) {
				NICMR_LOG(error, "api", "emu delay_us=%.*s: 0 to %u", int(v.size()),
					  v.data(), emu::WireFaults::kMaxDelayUs);
				return -EINVAL;
			}
		} else if (k == "fault_seed") {
			if (!parse_number(v, &o->faults.seed)) {
				NICMR_LOG(error, "api", "emu fault_seed=%.*s: a number",
					  int(v.size()), v.data());
				return -EINVAL;
			}
		} else if (k == "atomic_endian") {
			if (v == "host")
				o->atomic_host_endianness = true;
			else if (v == "big")
				o->atomic_host_endianness = false;
			else {
				NICMR_LOG(error, "api", "emu atomic_endian=%.*s: host or big",
					  int(v.size()), v.data());
				return -EINVAL;
			}
		} else if (k == "trace") {
			uint64_t n = 0;
			if (!parse_number(v, &n) || n > emu::EmuMlx5Device::kMaxTraceCapacity) {
				NICMR_LOG(error, "api", "emu trace=%.*s: 0 to %u commands",
					  int(v.size()), v.data(),
					  emu::EmuMlx5Device::kMaxTraceCapacity);
				return -EINVAL;
			}
			o->trace = uint32_t(n);
		} else if (k == "fail_opcode") {
			uint64_t op = 0;
			if (!parse_number(v, &op) || op > 0xffff) {
				NICMR_LOG(error, "api",
					  "emu fail_opcode=%.*s: an opcode, 0 to 0xffff",
					  int(v.size()), v.data());
				return -EINVAL;
			}
			o->fail_opcode = uint16_t(op);
		} else if (k == "fail_umr") {
			if (!parse_number(v, &o->fail_umr)) {
				NICMR_LOG(error, "api", "emu fail_umr=%.*s: a count (0: none)",
					  int(v.size()), v.data());
				return -EINVAL;
			}
		} else if (k == "iova_bits") {
			if (!parse_u32(v, &o->iova_bits) || o->iova_bits < emu::kMinIovaBits ||
			    o->iova_bits > emu::kMaxIovaBits) {
				NICMR_LOG(error, "api", "emu iova_bits=%.*s: %u to %u",
					  int(v.size()), v.data(), emu::kMinIovaBits,
					  emu::kMaxIovaBits);
				return -EINVAL;
			}
		} else {
			NICMR_LOG(error, "api",
				  "unknown emu option '%.*s' (ports, mkeys, delivery, progress, "
				  "programmer, "
				  "ext, atomic_endian, trace, fail_opcode, fail_umr, iova_bits, "
				  "mkey_by_name, odp, "
				  "msix_vectors, odp_cache, odp_prefill, mkey_pool, "
				  "mkey_max, key_seed, addr, addr2, udp_port, peer_udp_port, loss, "
				  "dup, reorder, delay_us, fault_seed, gro, rx_batch, log_max_qp)",
				  int(k.size()), k.data());
			return -EINVAL;
		}
	}
	return 0;
}

uint64_t new_device_id()
{
	/* Random, so that a raw key from another process's device is told apart too. */
	static std::atomic<uint64_t> counter{1};
	uint64_t id = 0;
	if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
		id = 0;
	id ^= counter.fetch_add(1, std::memory_order_relaxed) << 1;
	return id == 0 ? 1 : id;
}

/*
 * The device seam. UMR (the data path's programmer: free mkeys pre-created, bound and revoked
 * with UMR work requests) unless the spec asked for the command programmer, which needs a
 * device that creates mkeys at chosen indices (mkey_by_name). Each free mkey holds
 * max_translations MTT entries: as many as keep all of them within 32 MiB of device
 * translation memory when the pool is at its cap, at most 4096, and at least 64 up to 2^16
 * mkeys. Larger pools get fewer (2^21 mkeys: 2 each, enough for regions of one or two pool
 * pages), since the device's translation memory is finite (the emulated one has 64 MiB) and
 * every free mkey reserves its share at creation.
 */
int make_programmer(nicmr_device *dev, bool umr, uint32_t index_count, uint32_t pool_max)
{
	if (!umr) {
		if (!dev->drv->caps().mkey_by_index) {
			NICMR_LOG(error, "api",
				  "%s: programmer=cmd creates mkeys at chosen indices, which this "
				  "device does not offer (mkey_by_name)",
				  dev->spec.c_str());
			return -EOPNOTSUPP;
		}
		dev->prog = std::make_unique<mlx5::CmdProgrammer>(*dev->drv, dev->free_pd.pd(),
								  index_count);
		return 0;
	}
	mlx5::MkeyProgrammerOptions po;
	po.max_translations = std::clamp<uint32_t>(uint32_t((size_t{32} << 20) / 8 / pool_max),
						   pool_max < (1u << 16) ? 64 : 1, 4096);
	std::unique_ptr<mlx5::Mlx5MkeyProgrammer> p;
	int rc = mlx5::Mlx5MkeyProgrammer::create(*dev->drv, dev->free_pd.pd(), po, &p);
	if (rc) {
		NICMR_LOG(error, "api", "%s: UMR programmer failed: %d", dev->spec.c_str(), rc);
		return rc;
	}
	dev->max_translations = po.max_translations;
	dev->prog = std::move(p);
	return 0;
}

/* Driver, private PD, programmer and engine over dev->fn. */
int bring_up(nicmr_device *dev, bool umr, const PoolOptions &pool = {})
{
	dev->space = std::make_unique<mem::DmaSpace>(dev->fn->dma());
	mlx5::DeviceOptions opts;
	int rc = mlx5::Device::open(*dev->fn, *dev->space, opts, &dev->drv);
	if (rc) {
		NICMR_LOG(error, "api", "%s: mlx5 bring-up failed: %d", dev->spec.c_str(), rc);
		return rc;
	}
	rc = mlx5::PdHandle::alloc(*dev->drv, &dev->free_pd);
	if (rc) {
		NICMR_LOG(error, "api", "%s: ALLOC_PD for free mkeys failed: %d", dev->spec.c_str(),
			  rc);
		return rc;
	}
	const mlx5::Caps &caps = dev->drv->caps();
	const uint32_t log_n = std::min<uint32_t>(caps.log_max_mkey, 24);
	if (log_n < 1)
		return -ENODEV;
	mr::EngineConfig cfg;
	cfg.index_count = uint32_t{1} << log_n;
	cfg.max_readers = kMaxReaders;
	cfg.device_id = dev->id;
	if (pool.max > cfg.index_count - 1) {
		NICMR_LOG(error, "api", "%s: mkey_max=%u: the device has %u mkey indices",
			  dev->spec.c_str(), pool.max, cfg.index_count - 1);
		return -EINVAL;
	}
	cfg.pool_max = pool.max; /* 0: the engine's default, what the on-demand cache leaves */
	cfg.pool_initial = pool.initial;
	cfg.key_seed = pool.key_seed;
	cfg.odp.enabled = pool.odp_cache;
	cfg.odp.prefill = pool.odp_prefill;
	rc = make_programmer(dev, umr, cfg.index_count,
			     cfg.pool_max != 0 ? cfg.pool_max : cfg.index_count - 1);
	if (rc)
		return rc;
	rc = mr::Engine::create(cfg, *dev->prog, &dev->engine);
	if (rc) {
		NICMR_LOG(error, "api", "%s: registration engine (%u keys, pool of %u) failed: %d",
			  dev->spec.c_str(), cfg.index_count, cfg.pool_initial, rc);
		return rc;
	}
	dev->table = &dev->engine->table();
	/* The MR handles, one per key index: reserved now, pages populated as keys are used. */
	const size_t bytes = size_t{cfg.index_count} * sizeof(nicmr_mr);
	void *t = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (t == MAP_FAILED)
		return -ENOMEM;
	dev->mr_table = static_cast<nicmr_mr *>(t);
	dev->mr_slots = cfg.index_count;
	return mem::SlowMaps::create(*dev->space, dev->spec, &dev->slow_maps);
}

/* Candidates addr=auto tries before it gives up with -EADDRINUSE. */
constexpr uint32_t kAutoAddrTries = 32;

/* The loopback address addr=auto tries at attempt n for process pid: 127.0.0.0/8 outside
 * 127.0.0.0/24 (127.0.0.1 and .2 are the ones tests and users name by hand), never a last
 * byte of 0 or 255. */
std::string auto_addr(uint32_t pid, uint32_t n)
{
	const uint32_t span = (1u << 24) - 256;
	uint32_t h = 256 + (pid * 2654435761u + n * 40503u) % span;
	if ((h & 0xff) == 0 || (h & 0xff) == 255)
		h ^= 1u << 7;
	char buf[20];
	std::snprintf(buf, sizeof(buf), "127.%u.%u.%u", (h >> 16) & 0xff, (h >> 8) & 0xff,
		      h & 0xff);
	return buf;
}

int open_emu(nicmr_device *dev, std::string_view opts)
{
	EmuOptions o;
	int rc = parse_emu(opts, &o);
	if (rc)
		return rc;
	emu::EmuConfig cfg;
	static std::atomic<unsigned> n{0};
	cfg.name = "emu:" + std::to_string(n.fetch_add(1, std::memory_order_relaxed));
	cfg.ports = o.ports;
	cfg.log_max_mkey = uint32_t(std::countr_zero(o.mkeys));
	cfg.delivery = o.delivery;
	cfg.caller_progress = o.caller_progress;
	cfg.ext_flags = o.ext;
	cfg.atomic_host_endianness = o.atomic_host_endianness;
	cfg.trace_capacity = o.trace;
	cfg.fail_opcode = o.fail_opcode;
	cfg.fail_umr = o.fail_umr;
	if (o.iova_bits != emu::kMaxIovaBits)
		cfg.iommu.ranges = emu::emu_iommu_ranges(o.iova_bits);
	cfg.mkey_by_name = o.mkey_by_name;
	cfg.odp = o.odp;
	cfg.msix_vectors = o.msix_vectors;
	cfg.log_max_qp = o.log_max_qp;
	for (size_t p = 0; p < 2; p++)
		if (!o.addr[p].empty()) {
			cfg.wire[p] = {o.addr[p], o.udp_port, o.peer_udp_port, o.faults};
			cfg.wire[p].gro = o.gro;
			cfg.wire[p].rx_batch = o.rx_batch;
		}
	/* addr=auto (addr2=auto): a loopback address of this process's own, so that every
	 * process of a host has its port on UDP 4791 without choosing one (doc/native-api.md,
	 * "Remote QPs"): 127.h.m.l from the pid, the next candidate while the address is taken
	 * (-EADDRINUSE: another device of this or another process bound it). */
	const bool autos[2] = {o.addr[0] == "auto", o.addr[1] == "auto"};
	for (uint32_t attempt = 0;; attempt++) {
		for (size_t p = 0; p < 2; p++)
			if (autos[p])
				cfg.wire[p].addr =
					auto_addr(static_cast<uint32_t>(getpid()),
						  attempt * 2 + static_cast<uint32_t>(p));
		rc = emu::emu_mlx5_create(cfg, &dev->emu);
		if (rc != -EADDRINUSE || !(autos[0] || autos[1]) || attempt + 1 >= kAutoAddrTries)
			break;
	}
	if (rc) {
		NICMR_LOG(error, "api", "%s: emulated device failed: %d", dev->spec.c_str(), rc);
		return rc;
	}
	dev->fn = &dev->emu->function();
	return bring_up(
		dev, o.umr,
		PoolOptions{o.pool_initial, o.pool_max, o.key_seed, o.odp_cache, o.odp_prefill});
}

int open_vfio(nicmr_device *dev, std::string_view addr)
{
	if (addr.empty()) {
		NICMR_LOG(error, "api", "vfio spec needs a PCI address (vfio:0000:03:00.0)");
		return -EINVAL;
	}
	int rc = bus::vfio::Device::open(std::string(addr), &dev->vfio);
	if (rc) {
		NICMR_LOG(error, "api", "%s: VFIO open failed: %d (%s)", dev->spec.c_str(), rc,
			  std::strerror(-rc));
		return rc;
	}
	dev->fn = dev->vfio.get();
	return bring_up(dev, true);
}

int open_devx(nicmr_device *dev, std::string_view ibdev)
{
	if (ibdev.empty()) {
		NICMR_LOG(error, "api", "devx spec needs an RDMA device name (devx:mlx5_0)");
		return -EINVAL;
	}
#if NICMR_HAVE_RDMA_CORE
	std::unique_ptr<mlx5::DevxTransport> t;
	int rc = mlx5::DevxTransport::open(std::string(ibdev).c_str(), &t);
	if (rc) {
		NICMR_LOG(error, "api", "%s: no usable RDMA device '%.*s': %d (%s)",
			  dev->spec.c_str(), int(ibdev.size()), ibdev.data(), rc,
			  std::strerror(-rc));
		return rc;
	}
	NICMR_LOG(error, "api",
		  "%s: the device opened, but registration over DEVX is not offered yet (use "
		  "vfio:<pci address>)",
		  dev->spec.c_str());
	return -EOPNOTSUPP;
#else
	NICMR_LOG(error, "api", "%s: this build has no rdma-core (DEVX)", dev->spec.c_str());
	return -EOPNOTSUPP;
#endif
}

} // namespace
} // namespace nicmr::api

nicmr_device::~nicmr_device()
{
	/* Top-down: keys and the engine first, the bus last. The threads' key caches return
	 * their keys before the key space goes. */
	nicmr::api::close_caches(this);
	table = nullptr;
	engine.reset();
	if (mr_table != nullptr)
		munmap(mr_table, size_t{mr_slots} * sizeof(nicmr_mr));
	mr_table = nullptr;
	/* Unsubscribes from the unmap monitor before the pages' maps and the UMR queue go. */
	odp_watch.reset();
	slow_maps.reset();
	/* Its UMR queue (on-demand translations) lives in free_pd. */
	klm.reset();
	prog.reset();
	free_pd.reset();
	drv.reset();
	space.reset();
	fn = nullptr;
	vfio.reset();
	emu.reset();
}

extern "C" {

int nicmr_device_open(const char *spec, struct nicmr_device **out)
{
	if (spec == nullptr || out == nullptr)
		return -EINVAL;
	std::string_view s(spec);
	std::string_view kind = s.substr(0, s.find(':'));
	std::string_view rest = kind.size() < s.size() ? s.substr(kind.size() + 1) : "";
	std::unique_ptr<nicmr_device> dev;
	try {
		dev = std::make_unique<nicmr_device>();
		dev->spec = spec;
		dev->violations = std::make_unique<api::KeyViolations>();
	} catch (...) {
		return -ENOMEM;
	}
	dev->id = api::new_device_id();
	int rc;
	try {
		if (kind == "emu")
			rc = api::open_emu(dev.get(), rest);
		else if (kind == "vfio")
			rc = api::open_vfio(dev.get(), rest);
		else if (kind == "devx")
			rc = api::open_devx(dev.get(), rest);
		else {
			NICMR_LOG(error, "api",
				  "device spec '%s': expected emu[:options], vfio:<pci address> or "
				  "devx:<ib device>",
				  spec);
			rc = -EINVAL;
		}
	} catch (...) {
		rc = -ENOMEM;
	}
	if (rc)
		return rc; /* dev's destructor undoes whatever part was built */
	NICMR_LOG(info, "api", "%s: open, %u keys, device id %#llx", spec,
		  dev->engine->keys().index_count(), static_cast<unsigned long long>(dev->id));
	*out = dev.release();
	return 0;
}

int nicmr_device_close(struct nicmr_device *dev)
{
	if (dev == nullptr)
		return -EINVAL;
	{
		std::shared_lock lk(dev->objs_mu);
		const uint64_t mrs = nicmr_mr_count(dev, nullptr, nullptr);
		const uint64_t pds = dev->pds.load(std::memory_order_acquire);
		/* acquire: a CQ or QP destroy that gave its count back is done with the device. */
		const uint64_t dp = dev->dp_objs.load(std::memory_order_acquire);
		/* acquire: a counter free that gave its count back is done with the arena. */
		const uint64_t cntrs = dev->cntrs.load(std::memory_order_acquire);
		if (mrs || pds || !dev->pools.empty() || dp || cntrs) {
			NICMR_LOG(error, "api",
				  "%s: close refused: %llu MRs, %llu PDs, %zu pools, %llu CQs/QPs, "
				  "%llu counters live",
				  dev->spec.c_str(), static_cast<unsigned long long>(mrs),
				  static_cast<unsigned long long>(pds), dev->pools.size(),
				  static_cast<unsigned long long>(dp),
				  static_cast<unsigned long long>(cntrs));
			return -EBUSY;
		}
	}
	delete dev;
	return 0;
}

int nicmr_device_query(const struct nicmr_device *dev, struct nicmr_device_attr *attr)
{
	if (dev == nullptr || attr == nullptr)
		return -EINVAL;
	const mlx5::Caps &c = dev->drv->caps();
	*attr = {};
	attr->device_id = dev->id;
	attr->mkey_count = dev->engine->keys().index_count();
	attr->mkey_pool_max = dev->engine->pool_max();
	attr->requested_keys = dev->engine->requested_keys() ? 1 : 0;
	attr->odp = nicmr_odp_offered(dev) ? 1 : 0;
	attr->max_readers = api::kMaxReaders;
	attr->max_pd = c.log_max_pd >= 32 ? UINT32_MAX : uint32_t{1} << c.log_max_pd;
	attr->extensions = c.ext_present ? 1 : 0;
	attr->ext_flags = c.ext_flags;
	attr->fw_major = c.fw_major;
	attr->fw_minor = c.fw_minor;
	attr->fw_subminor = c.fw_subminor;
	std::snprintf(attr->name, sizeof(attr->name), "%s", dev->spec.c_str());
	attr->atomic_mode = api::atomic_mode(c);
	return 0;
}

uint64_t nicmr_device_id(const struct nicmr_device *dev)
{
	return dev ? dev->id : 0;
}

int nicmr_device_get_stats(struct nicmr_device *dev, struct nicmr_device_stats *st)
{
	if (dev == nullptr || st == nullptr)
		return -EINVAL;
	*st = {};
	st->mrs = api::live_mrs(dev);
	st->pds = dev->pds.load(std::memory_order_relaxed);
	st->mws = dev->mws.load(std::memory_order_relaxed);
	st->cntrs = dev->cntrs.load(std::memory_order_relaxed);
	{
		std::shared_lock lk(dev->objs_mu);
		st->pools = dev->pools.size();
	}
	st->slow_mappings = dev->slow_maps->mappings();
	st->pinned_pages = dev->slow_maps->pinned_pages();
	uint64_t cached = 0, batched = 0;
	api::cached_counts(dev, &cached, &batched);
	st->keys_free = dev->engine->keys().ring_free_count() + cached;
	st->keys_retiring = dev->engine->keys().retiring_count() + batched;
	st->mkey_pool = dev->engine->pool_size();
	st->dev_mkeys = dev->emu ? int64_t(dev->emu->device().mkeys().live()) : -1;
	st->iommu_mappings = dev->emu ? int64_t(dev->emu->iommu().mapping_count()) : -1;
	return 0;
}

/* The device model's wire responder record (emu_mlx5_refusals.cpp): only the wiring sees it. */
int nicmr_key_refusals(const struct nicmr_device *dev, struct nicmr_key_refusal *out, uint32_t n,
		       uint64_t *dropped)
{
	if (dev == nullptr || (out == nullptr && n > 0))
		return -EINVAL;
	if (!dev->emu)
		return -EOPNOTSUPP;
	std::array<emu::KeyRefusal, emu::EmuDataPath::kMaxKeyRefusals> all;
	const size_t found =
		dev->emu->device().data_path().key_refusals(all.data(), all.size(), dropped);
	for (size_t i = 0; i < std::min<size_t>(found, n); i++) {
		const emu::KeyRefusal &e = all[i];
		nicmr_key_refusal &r = out[i];
		r = {};
		r.key = e.rkey;
		r.local_qpn = e.local_qpn;
		std::memcpy(r.peer_gid, e.peer_gid, sizeof(r.peer_gid));
		r.peer_qpn = e.peer_qpn;
		r.access = ((e.rights & emu::KeyRefusal::read) ? NICMR_ACCESS_REMOTE_READ : 0) |
			   ((e.rights & emu::KeyRefusal::write) ? NICMR_ACCESS_REMOTE_WRITE : 0) |
			   ((e.rights & emu::KeyRefusal::atomic) ? NICMR_ACCESS_REMOTE_ATOMIC : 0);
		r.count = e.count;
	}
	return static_cast<int>(found);
}

int nicmr_mr_map_raw(struct nicmr_device *dev, const void *buf, size_t size, uint64_t *key)
{
	if (dev == nullptr || buf == nullptr || key == nullptr)
		return -EINVAL;
	return mr::Engine::map_raw(static_cast<const uint8_t *>(buf), size, dev->id, key);
}

int nicmr_mr_unmap_key(struct nicmr_device *dev, uint64_t key)
{
	if (dev == nullptr)
		return -EINVAL;
	return mr::Engine::unmap_raw(key);
}

int nicmr_key_lookup(const struct nicmr_device *dev, uint32_t key, uint64_t addr, size_t len,
		     uint64_t access, uint64_t *iova)
{
	/* HOT PATH: no lock, no allocation, no system call: a bit mapping and the table's
	 * lockless lookup. */
	uint8_t need = 0;
	if (dev == nullptr || iova == nullptr || mr::access_need(access, &need) != 0)
		return -EINVAL;
	mr::LookupRequest req{key, addr, len, need, mr::kAnyPd};
	mr::LookupResult res;
	int rc = dev->table->lookup(req, &res);
	if (rc == 0)
		*iova = res.iova;
	return rc;
}

int nicmr_thread_register(struct nicmr_device *dev, unsigned id)
{
	if (dev == nullptr)
		return -EINVAL;
	return dev->engine->reader_register(id);
}

void nicmr_thread_quiescent(struct nicmr_device *dev, unsigned id)
{
	/* HOT PATH: one store (the QSBR counter of id). */
	if (dev != nullptr && id < api::kMaxReaders)
		dev->engine->reader_quiescent(id);
}

void nicmr_thread_unregister(struct nicmr_device *dev, unsigned id)
{
	if (dev != nullptr && id < api::kMaxReaders)
		dev->engine->reader_unregister(id);
}

} /* extern "C" */
