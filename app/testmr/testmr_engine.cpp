/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_engine.h"

#include <sys/uio.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "nicmr/nicmr.h"
#include "nicmr/nicmr_dpdk.h"
#include "testmr_exchange.h"

namespace nicmr::testmr {

/* testmr spells the native API's access bits by name (testmr_cmd.h): the same values. */
static_assert(mr_send == NICMR_ACCESS_SEND && mr_recv == NICMR_ACCESS_RECV &&
	      mr_read == NICMR_ACCESS_READ && mr_write == NICMR_ACCESS_WRITE &&
	      mr_remote_read == NICMR_ACCESS_REMOTE_READ &&
	      mr_remote_write == NICMR_ACCESS_REMOTE_WRITE &&
	      mr_local_write == NICMR_ACCESS_LOCAL_WRITE &&
	      mr_remote_atomic == NICMR_ACCESS_REMOTE_ATOMIC &&
	      mr_mw_bind == NICMR_ACCESS_MW_BIND && mr_odp == NICMR_ACCESS_ON_DEMAND);
static_assert(NICMR_ADVISE_MR_ADVICE_PREFETCH == 0 && NICMR_ADVISE_MR_ADVICE_PREFETCH_WRITE == 1 &&
	      NICMR_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT == 2);
static_assert(kMaxSegments == NICMR_MAX_IOV && kMaxRawKey == NICMR_RAW_KEY_SIZE);

namespace {

struct PoolRec {
	nicmr_pool *pool = nullptr;
	size_t page_size = 0;
};

struct MrRec {
	nicmr_mr *mr = nullptr;
	const char *kind = "reg"; /* reg, regv, sub */
	uint64_t pool = 0;	  /* the engine pool its bytes are in */
	uint64_t access = 0;	  /* as registered (the native API has no call that reads it) */
	uint32_t base = 0;	  /* sub: the base MR's key */
	size_t segments = 1;	  /* regv: how many */
	bool rma_event = false;	  /* registered with NICMR_MR_RMA_EVENT */
};

struct CntrRec {
	nicmr_cntr *cntr = nullptr;
};

struct MempoolRec {
	rte_mempool *mp = nullptr;
	nicmr_dpdk_mempool_mr *mmr = nullptr;
	uint64_t access = 0;
};

struct WindowRec {
	nicmr_mw *mw = nullptr;
	uint32_t mr_key = 0;
	uint32_t rkey = 0;
	uint64_t addr = 0;
	size_t len = 0;
	uint64_t access = 0;
};

struct CqRec {
	nicmr_cq *cq = nullptr;
	uint32_t depth = 0; /* as asked (the API rounds it up to a power of two) */
};

struct QpRec {
	nicmr_qp *qp = nullptr;
	uint64_t cq = 0; /* the session's CQ it reports to */
	uint32_t port = 0;
	uint32_t depth = 0;
	uint32_t recv_depth = 0; /* its receive queue (qp create ... recv N); 0: none */
	bool connected = false;
	uint64_t peer = 0; /* the session's QP it is connected to (when connected) */
	uint32_t peer_qpn = 0, peer_port = 0;
	/* Connected to a QP of another device (qp connect remote, qp exchange): its address;
	 * peer and peer_port then mean nothing, and a post's ROFFSET is the peer's address. */
	bool remote = false;
	std::array<uint8_t, 16> remote_gid{};
	uint32_t remote_psn = 0;
	uint32_t mtu = 0; /* bytes; 0: the default */
};

/* enum nicmr_wc_status and enum nicmr_wc_opcode, as the header spells them. */
constexpr const char *kWcStatus[] = {
	"SUCCESS",   "LOCAL_LEN", "LOCAL_QP_OP",   "LOCAL_PROT",       "WR_FLUSH",
	"MW_BIND",   "BAD_RESP",  "LOCAL_ACCESS",  "REMOTE_INVAL_REQ", "REMOTE_ACCESS",
	"REMOTE_OP", "RETRY_EXC", "RNR_RETRY_EXC", "REMOTE_ABORT",     "GENERAL",
};
static_assert(std::size(kWcStatus) == NICMR_WC_GENERAL + 1);
constexpr const char *kWcOpcode[] = {"RDMA_WRITE", "RDMA_READ",		"FETCH_ADD", "COMP_SWAP",
				     "SEND",	   "RDMA_WRITE_IMM",	"RECV",	     "RECV_IMM",
				     "RECV_INV",   "RECV_RDMA_WITH_IMM"};
static_assert(std::size(kWcOpcode) == NICMR_WC_RECV_RDMA_WITH_IMM + 1);

const char *wc_status_name(uint8_t s)
{
	return s < std::size(kWcStatus) ? kWcStatus[s] : "?";
}
const char *wc_opcode_name(uint8_t o)
{
	return o < std::size(kWcOpcode) ? kWcOpcode[o] : "?";
}

const char *qp_state_name(uint32_t s)
{
	switch (s) {
	case NICMR_QP_RESET:
		return "RESET";
	case NICMR_QP_INIT:
		return "INIT";
	case NICMR_QP_RTR:
		return "RTR";
	case NICMR_QP_RTS:
		return "RTS";
	case NICMR_QP_ERR:
		return "ERR";
	default:
		return "unknown";
	}
}

/* The median of samples (sorted in place); 0 for none. */
double median(std::vector<double> &v)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	const size_t n = v.size();
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double ns_since(std::chrono::steady_clock::time_point t0)
{
	return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
		.count();
}

const char *layout_name(int layout)
{
	switch (layout) {
	case 0:
		return "contiguous";
	case 1:
		return "mtt-runs";
	case 2:
		return "klm";
	default:
		return "unknown";
	}
}

/*
 * The registration path: nicmr_mr_in_pool's answer for regions of one range (reg, sub). A
 * vectored MR has no single pool, whatever nicmr_mr_in_pool says of its segments:
 * "segmented"; an on-demand MR is "on-demand".
 */
const char *path_name(const MrRec &m)
{
	if (m.segments > 1 || std::strcmp(m.kind, "regv") == 0)
		return "segmented";
	if (m.access & mr_odp)
		return "on-demand"; /* translations come and go with advice (doc/odp.md) */
	return nicmr_mr_in_pool(m.mr) == 1 ? "fast" : "slow";
}

} // namespace

struct Engine::State {
	State(Reporter &r, const char *device_spec) : out(r), spec(device_spec) {}
	Reporter &out;
	std::string spec;
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	std::map<uint64_t, PoolRec> pools;
	uint64_t next_pool = 0;
	std::map<uint32_t, MrRec> mrs; /* by key */
	std::map<uint64_t, WindowRec> windows;
	uint64_t next_window = 0;
	std::map<uint64_t, CqRec> cqs;
	uint64_t next_cq = 0;
	std::map<uint64_t, QpRec> qps;
	uint64_t next_qp = 0;
	std::map<uint64_t, CntrRec> cntrs;
	uint64_t next_cntr = 0;
	bool eal = false;
	nicmr_dpdk_mem *dpdk_mem = nullptr; /* EAL mode: DPDK's memory as the device's pools */
	std::map<uint64_t, MempoolRec> mempools;
	uint64_t next_mempool = 0;
	uint64_t next_wr_id = 1;
	/* Atomics in flight: where their old value lands, by QP number and wr_id (poll prints
	 * it). */
	std::map<std::pair<uint32_t, uint64_t>, uint64_t> atomic_results;

	FILE *f() const { return out.out(); }
	int api_error(const char *call, int rc)
	{
		return out.error(rc, "%s: %s (%s)", call, errno_name(rc), std::strerror(-rc));
	}
	int no_mr(uint32_t key) { return out.error(-ENOENT, "no MR with key 0x%08x", key); }

	int pool_create(const Command &c);
	int reg(const Command &c);
	int regv(const Command &c);
	int sub(const Command &c);
	int dereg(uint32_t key);
	std::string mr_json(uint32_t key, const MrRec &m) const;
	void mr_text(uint32_t key, const MrRec &m) const;
	int show_mr(const Command &c);
	int show_mrs(const Command &c);
	int lookup(const Command &c);
	int raw(uint32_t key);
	int map_raw(const Command &c);
	int window_bind(const Command &c);
	int window_unbind(uint64_t id);
	int show_violations(const Command &c);
	int cntr_alloc();
	int cntr_free(uint64_t id);
	int mr_bind(const Command &c);
	int mr_unbind(uint32_t key);
	int mr_enable(uint32_t key);
	int show_cntrs(const Command &c);
	int no_eal()
	{
		return out.error(-EOPNOTSUPP, "DPDK's EAL is not up (start testmr with EAL "
					      "options before --)");
	}
	int show_dpdk(const Command &c);
	int mempool_create(const Command &c);
	int mempool_destroy(uint64_t id);
	int show_mempools(const Command &c);
	std::string mempool_json(uint64_t id, const MempoolRec &r) const;
	/* The MR of a registered mempool whose key is key, or null. */
	const nicmr_mr *mempool_mr(uint32_t key) const
	{
		for (const auto &[id, r] : mempools)
			for (size_t i = 0; i < nicmr_dpdk_mempool_mr_count(r.mmr); i++)
				if (const nicmr_mr *m = nicmr_dpdk_mempool_mr_at(r.mmr, i);
				    nicmr_mr_key(m) == key)
					return m;
		return nullptr;
	}
	/* The session's number of the counter bound to mr, or -1. */
	int64_t cntr_of(const nicmr_mr *mr) const;
	int cq_create(const Command &c);
	int cq_destroy(uint64_t id);
	int qp_create(const Command &c);
	int qp_connect(const Command &c);
	/* nicmr_qp_connect_remote of QP id to r (gid, qpn, psn) with mtu (bytes, 0: default);
	 * records and prints it. 0 or a printed negative errno. */
	int connect_remote(uint64_t id, const PeerRecord &r, uint32_t mtu);
	int qp_connect_remote(const Command &c);
	int qp_exchange(const Command &c);
	int qp_pingpong(const Command &c);
	int mr_fill(const Command &c);
	int mr_dump(const Command &c);
	int mr_advise(const Command &c);
	/* The MR of key, its bytes [offset, offset + len) checked: the address, or null (printed
	 * error in *rc). */
	uint8_t *mr_bytes(uint32_t key, uint64_t offset, uint64_t len, int *rc);
	int qp_recover(uint64_t id);
	int qp_destroy(uint64_t id);
	int post(const Command &c);
	int poll(const Command &c);
	std::string cq_json(uint64_t id, const CqRec &r) const;
	void cq_text(uint64_t id, const CqRec &r) const;
	std::string qp_json(uint64_t id, const QpRec &r) const;
	void qp_text(uint64_t id, const QpRec &r) const;
	int show_queues(const Command &c);
	int bench_reg(const Command &c);
	int bench_lookup(const Command &c);
	int bench_rdma(const Command &c);
	int no_cq(uint64_t id)
	{
		return out.error(-ENOENT, "no CQ %" PRIu64 " (try 'cq create')", id);
	}
	int no_qp(uint64_t id)
	{
		return out.error(-ENOENT, "no QP %" PRIu64 " (try 'qp create CQ')", id);
	}
	/* The address OFFSET bytes into the region of a remote key: the session's MR or window
	 * of that key, else OFFSET itself (a key nobody registered is refused by the device
	 * before the address matters). */
	uint64_t remote_addr(uint32_t rkey, uint64_t offset) const;
	/* Progress of a bench command, on standard error when it is a terminal. */
	void progress(const char *what, int rep, int reps) const;
	/* The engine pool bytes [offset, offset + len) are in, or an error printed. */
	int pool_bytes(uint64_t id, uint64_t offset, uint64_t len, char **addr);
};

Engine::Engine(Reporter &out, const char *spec) : s_(std::make_unique<State>(out, spec))
{}

int Engine::open(const char *spec, Reporter &out, bool eal, std::unique_ptr<Engine> *engine)
{
	std::unique_ptr<Engine> e(new Engine(out, spec));
	State &s = *e->s_;
	if (int rc = nicmr_device_open(spec, &s.dev); rc != 0)
		return s.api_error("nicmr_device_open", rc);
	if (int rc = nicmr_pd_alloc(s.dev, &s.pd); rc != 0)
		return s.api_error("nicmr_pd_alloc", rc);
	std::fprintf(out.out(), "registration engine: device %s, PD %u (native API)\n", spec,
		     nicmr_pd_num(s.pd));
	s.eal = eal;
	if (eal) {
		/* As an EAL application would: DPDK's memory becomes the device's pools, kept in
		 * step with DPDK's memory events (doc/dpdk.md). */
		if (int rc = nicmr_dpdk_mem_attach(s.dev, &s.dpdk_mem); rc != 0)
			return s.api_error("nicmr_dpdk_mem_attach", rc);
		nicmr_dpdk_mem_info info{};
		nicmr_dpdk_mem_query(s.dpdk_mem, &info);
		std::fprintf(out.out(), "DPDK memory attached: %u pools (%s)\n", info.pools,
			     info.events ? "memory events followed" : "legacy memory, fixed");
	}
	*engine = std::move(e);
	return 0;
}

Engine::~Engine()
{
	State &s = *s_;
	/* QPs keep their CQs and PD; windows keep their MRs, sub-MRs their bases, MRs their
	 * pools: in that order. */
	for (auto &[id, q] : s.qps)
		nicmr_qp_destroy(q.qp);
	for (auto &[id, c] : s.cqs)
		nicmr_cq_destroy(c.cq);
	for (auto &[id, w] : s.windows) {
		nicmr_mw_invalidate(w.mw);
		nicmr_mw_free(w.mw);
	}
	for (auto &[key, m] : s.mrs)
		if (m.rma_event)
			nicmr_mr_unbind_cntr(m.mr); /* a bound MR's dereg is -EBUSY */
	for (auto &[key, m] : s.mrs)
		if (m.base != 0)
			nicmr_mr_dereg(m.mr);
	for (auto &[key, m] : s.mrs)
		if (m.base == 0)
			nicmr_mr_dereg(m.mr);
	for (auto &[id, c] : s.cntrs)
		nicmr_cntr_free(c.cntr);
	for (auto &[id, m] : s.mempools) {
		nicmr_dpdk_mempool_dereg(m.mmr);
		rte_mempool_free(m.mp);
	}
	if (s.dpdk_mem != nullptr)
		nicmr_dpdk_mem_detach(s.dpdk_mem);
	for (auto &[id, p] : s.pools)
		nicmr_pool_destroy(p.pool);
	if (s.pd != nullptr)
		nicmr_pd_free(s.pd);
	if (s.dev != nullptr)
		nicmr_device_close(s.dev);
}

int Engine::run(const Command &c)
{
	State &s = *s_;
	switch (c.verb) {
	case Verb::mr_pool:
		return s.pool_create(c);
	case Verb::mr_reg:
		return s.reg(c);
	case Verb::mr_regv:
		return s.regv(c);
	case Verb::mr_sub:
		return s.sub(c);
	case Verb::mr_dereg:
		return s.dereg(c.key);
	case Verb::show_mr:
		return s.show_mr(c);
	case Verb::show_mrs:
		return s.show_mrs(c);
	case Verb::key_lookup:
		return s.lookup(c);
	case Verb::key_raw:
		return s.raw(c.key);
	case Verb::key_map:
		return s.map_raw(c);
	case Verb::window_bind:
		return s.window_bind(c);
	case Verb::window_unbind:
		return s.window_unbind(c.id);
	case Verb::show_violations:
		return s.show_violations(c);
	case Verb::cntr_alloc:
		return s.cntr_alloc();
	case Verb::cntr_free:
		return s.cntr_free(c.id);
	case Verb::mr_bind:
		return s.mr_bind(c);
	case Verb::mr_unbind:
		return s.mr_unbind(c.key);
	case Verb::mr_enable:
		return s.mr_enable(c.key);
	case Verb::show_cntrs:
		return s.show_cntrs(c);
	case Verb::show_dpdk:
		return s.show_dpdk(c);
	case Verb::mempool_create:
		return s.mempool_create(c);
	case Verb::mempool_destroy:
		return s.mempool_destroy(c.id);
	case Verb::show_mempools:
		return s.show_mempools(c);
	case Verb::cq_create:
		return s.cq_create(c);
	case Verb::cq_destroy:
		return s.cq_destroy(c.id);
	case Verb::qp_create:
		return s.qp_create(c);
	case Verb::qp_connect:
		return s.qp_connect(c);
	case Verb::qp_connect_remote:
		return s.qp_connect_remote(c);
	case Verb::qp_exchange_listen:
	case Verb::qp_exchange_connect:
		return s.qp_exchange(c);
	case Verb::qp_pingpong:
		return s.qp_pingpong(c);
	case Verb::mr_fill:
		return s.mr_fill(c);
	case Verb::mr_dump:
		return s.mr_dump(c);
	case Verb::mr_advise:
		return s.mr_advise(c);
	case Verb::qp_recover:
		return s.qp_recover(c.id);
	case Verb::qp_destroy:
		return s.qp_destroy(c.id);
	case Verb::post_write:
	case Verb::post_read:
	case Verb::post_fadd:
	case Verb::post_cswap:
		return s.post(c);
	case Verb::poll:
		return s.poll(c);
	case Verb::show_cq:
	case Verb::show_cqs:
	case Verb::show_qp:
	case Verb::show_qps:
		return s.show_queues(c);
	case Verb::bench_reg:
		return s.bench_reg(c);
	case Verb::bench_lookup:
		return s.bench_lookup(c);
	case Verb::bench_rdma:
		return s.bench_rdma(c);
	default:
		return s.out.error(-EINVAL, "not a registration engine command");
	}
}

void Engine::view(EngineView *v) const
{
	const State &s = *s_;
	v->spec = s.spec;
	v->query_rc = nicmr_device_query(s.dev, &v->attr);
	v->stats_rc = nicmr_device_get_stats(s.dev, &v->stats);
	v->pools.clear();
	for (const auto &[id, p] : s.pools) {
		EngineView::Pool vp;
		vp.id = id;
		vp.addr = reinterpret_cast<uintptr_t>(nicmr_pool_addr(p.pool));
		vp.len = nicmr_pool_len(p.pool);
		vp.page_size = nicmr_pool_page_size(p.pool);
		v->pools.push_back(vp);
	}
	v->mrs.clear();
	for (const auto &[key, m] : s.mrs) {
		EngineView::Mr vm;
		vm.key = key;
		vm.kind = m.kind;
		vm.pool = m.pool;
		vm.len = nicmr_mr_len(m.mr);
		vm.access = m.access;
		v->mrs.push_back(vm);
		/* Pools are few: a scan of them for each MR is cheap. */
		for (auto &vp : v->pools) {
			if (vp.id == m.pool) {
				vp.mrs++;
				vp.mr_bytes += vm.len;
			}
		}
	}
	v->windows = s.windows.size();
	v->violations.assign(NICMR_MAX_KEY_VIOLATIONS, nicmr_key_violation{});
	const int n = nicmr_key_violations(s.dev, v->violations.data(), NICMR_MAX_KEY_VIOLATIONS,
					   &v->violations_dropped);
	v->violations_rc = n < 0 ? n : 0;
	v->violations.resize(n < 0 ? 0 : std::min<size_t>(size_t(n), NICMR_MAX_KEY_VIOLATIONS));
	std::sort(v->violations.begin(), v->violations.end(),
		  [](const auto &a, const auto &b) { return a.key < b.key; });
}

int Engine::State::pool_create(const Command &c)
{
	nicmr_pool_params p;
	nicmr_pool_params_init(&p);
	p.size = c.size;
	if (c.page_size != 0)
		p.page_size = c.page_size;
	p.allow_fallback = c.fallback ? 1 : 0;
	const std::string name = "testmr-engine-" + std::to_string(next_pool);
	p.name = name.c_str();
	PoolRec rec;
	if (int rc = nicmr_pool_create(dev, &p, &rec.pool); rc != 0)
		return api_error("nicmr_pool_create", rc);
	rec.page_size = p.page_size;
	const uint64_t id = next_pool++;
	pools[id] = rec;
	std::fprintf(f(), "engine pool %" PRIu64 ": %zu bytes at %p (pages of %zu bytes asked)\n",
		     id, nicmr_pool_len(rec.pool), nicmr_pool_addr(rec.pool), rec.page_size);
	return 0;
}

int Engine::State::pool_bytes(uint64_t id, uint64_t offset, uint64_t len, char **addr)
{
	auto it = pools.find(id);
	if (it == pools.end())
		return out.error(-ENOENT, "no engine pool %" PRIu64 " (try 'mr pool SIZE')", id);
	const size_t plen = nicmr_pool_len(it->second.pool);
	if (offset >= plen || len > plen - offset)
		return out.error(-ERANGE,
				 "[0x%" PRIx64 ", +0x%" PRIx64 ") is outside engine pool %" PRIu64
				 " (%zu bytes)",
				 offset, len, id, plen);
	*addr = static_cast<char *>(nicmr_pool_addr(it->second.pool)) + offset;
	return 0;
}

void Engine::State::mr_text(uint32_t key, const MrRec &m) const
{
	std::fprintf(f(),
		     "MR key 0x%08x (index %u, variant 0x%02x): %s, engine pool %" PRIu64
		     ", address %p, %zu bytes, access %s, %s path, layout %s",
		     key, NICMR_KEY_INDEX(key), key & 0xff, m.kind, m.pool, nicmr_mr_addr(m.mr),
		     nicmr_mr_len(m.mr), format_mr_access(m.access).c_str(), path_name(m),
		     layout_name(nicmr_mr_layout(m.mr)));
	if (m.base != 0)
		std::fprintf(f(), ", base 0x%08x", m.base);
	if (m.segments > 1)
		std::fprintf(f(), ", %zu segments", m.segments);
	if (m.rma_event) {
		nicmr_mr_info info{};
		nicmr_mr_query(m.mr, &info);
		std::fprintf(f(), ", rma_event %s", info.enabled ? "enabled" : "disabled");
		if (const int64_t c = cntr_of(m.mr); c >= 0)
			std::fprintf(f(), ", counter %" PRId64, c);
	}
	std::fputs("\n", f());
}

std::string Engine::State::mr_json(uint32_t key, const MrRec &m) const
{
	JsonObject o;
	o.hex("key", key)
		.num("index", NICMR_KEY_INDEX(key))
		.num("variant", key & 0xff)
		.str("kind", m.kind)
		.num("pool", m.pool)
		.hex("addr", reinterpret_cast<uintptr_t>(nicmr_mr_addr(m.mr)))
		.num("len", nicmr_mr_len(m.mr))
		.str("access", format_mr_access(m.access))
		.num("access_bits", m.access)
		.str("path", path_name(m))
		.str("layout", layout_name(nicmr_mr_layout(m.mr)))
		.num("segments", m.segments);
	if (m.base != 0)
		o.hex("base", m.base);
	if (m.rma_event) {
		nicmr_mr_info info{};
		nicmr_mr_query(m.mr, &info);
		o.num("rma_event", 1).num("enabled", info.enabled ? 1 : 0);
		if (const int64_t c = cntr_of(m.mr); c >= 0)
			o.num("counter", uint64_t(c));
	}
	return o.str();
}

int Engine::State::reg(const Command &c)
{
	char *addr = nullptr;
	if (int rc = pool_bytes(c.id, c.offset, c.len, &addr); rc != 0)
		return rc;
	MrRec m;
	const uint64_t flags = c.rma_event ? NICMR_MR_RMA_EVENT : 0;
	if (int rc = nicmr_mr_reg(pd, addr, c.len, c.mr_access, flags, 0, &m.mr); rc != 0)
		return api_error("nicmr_mr_reg", rc);
	m.rma_event = c.rma_event;
	m.pool = c.id;
	m.access = c.mr_access;
	const uint32_t key = nicmr_mr_key(m.mr);
	mrs[key] = m;
	mr_text(key, m);
	return 0;
}

int Engine::State::regv(const Command &c)
{
	std::vector<iovec> iov;
	for (const Segment &seg : c.segments) {
		char *addr = nullptr;
		if (int rc = pool_bytes(c.id, seg.offset, seg.len, &addr); rc != 0)
			return rc;
		iov.push_back({addr, seg.len});
	}
	MrRec m;
	if (int rc = nicmr_mr_regv(pd, iov.data(), iov.size(), c.mr_access, 0, 0, &m.mr); rc != 0)
		return api_error("nicmr_mr_regv", rc);
	m.kind = "regv";
	m.pool = c.id;
	m.access = c.mr_access;
	m.segments = iov.size();
	const uint32_t key = nicmr_mr_key(m.mr);
	mrs[key] = m;
	mr_text(key, m);
	return 0;
}

int Engine::State::sub(const Command &c)
{
	auto it = mrs.find(c.key);
	if (it == mrs.end())
		return no_mr(c.key);
	MrRec m;
	if (int rc = nicmr_mr_reg_sub(it->second.mr, c.offset, c.len, c.mr_access, 0, 0, &m.mr);
	    rc != 0)
		return api_error("nicmr_mr_reg_sub", rc);
	m.kind = "sub";
	m.pool = it->second.pool;
	m.access = c.mr_access;
	m.base = c.key;
	const uint32_t key = nicmr_mr_key(m.mr);
	mrs[key] = m;
	mr_text(key, m);
	return 0;
}

int Engine::State::dereg(uint32_t key)
{
	auto it = mrs.find(key);
	if (it == mrs.end())
		return no_mr(key);
	if (int rc = nicmr_mr_dereg(it->second.mr); rc != 0)
		return api_error("nicmr_mr_dereg", rc);
	mrs.erase(it);
	std::fprintf(f(), "MR key 0x%08x deregistered\n", key);
	return 0;
}

int Engine::State::show_mr(const Command &c)
{
	auto it = mrs.find(c.key);
	if (it == mrs.end())
		return no_mr(c.key);
	if (c.json)
		std::fprintf(f(), "%s\n", mr_json(it->first, it->second).c_str());
	else
		mr_text(it->first, it->second);
	return 0;
}

int Engine::State::show_mrs(const Command &c)
{
	std::string array = "[";
	size_t shown = 0;
	for (const auto &[key, m] : mrs) {
		if (c.filter_pool >= 0 && m.pool != static_cast<uint64_t>(c.filter_pool))
			continue;
		if ((m.access & c.filter_access) != c.filter_access)
			continue;
		const size_t len = nicmr_mr_len(m.mr);
		if (len < c.filter_min || len > c.filter_max)
			continue;
		if (c.json)
			array += (shown ? "," : "") + mr_json(key, m);
		else
			mr_text(key, m);
		shown++;
	}
	if (c.json) {
		JsonObject o;
		o.num("count", shown).raw("mrs", array + "]");
		std::fprintf(f(), "%s\n", o.str().c_str());
	} else if (shown == 0) {
		std::fprintf(f(), "no MRs\n");
	}
	return 0;
}

int Engine::State::lookup(const Command &c)
{
	/* The range looked up: in the key's MR (or window) when it is one of the session's,
	 * else [OFFSET, +LEN) as given (a key nobody registered is refused before its range
	 * matters). */
	uint64_t base = 0, len = 1;
	if (auto it = mrs.find(c.key); it != mrs.end()) {
		base = reinterpret_cast<uintptr_t>(nicmr_mr_addr(it->second.mr));
		len = nicmr_mr_len(it->second.mr);
	} else if (const nicmr_mr *m = mempool_mr(c.key); m != nullptr) {
		base = reinterpret_cast<uintptr_t>(nicmr_mr_addr(m));
		len = nicmr_mr_len(m);
	} else {
		for (const auto &[id, w] : windows) {
			if (w.rkey == c.key) {
				base = w.addr;
				len = w.len;
			}
		}
	}
	const uint64_t addr = base + c.offset;
	if (c.has_len)
		len = c.len;
	else if (c.offset < len)
		len -= c.offset;
	else
		len = 1;
	uint64_t iova = 0;
	int rc = nicmr_key_lookup(dev, c.key, addr, len, c.mr_access, &iova);
	if (rc == 0)
		std::fprintf(f(),
			     "key 0x%08x %s [0x%" PRIx64 ", +0x%" PRIx64
			     "): granted, IOVA 0x%" PRIx64 "\n",
			     c.key, format_mr_access(c.mr_access).c_str(), addr, len, iova);
	else
		std::fprintf(f(),
			     "key 0x%08x %s [0x%" PRIx64 ", +0x%" PRIx64 "): refused, %s (%s)\n",
			     c.key, format_mr_access(c.mr_access).c_str(), addr, len,
			     errno_name(rc), std::strerror(-rc));
	return 0;
}

int Engine::State::raw(uint32_t key)
{
	auto it = mrs.find(key);
	if (it == mrs.end())
		return no_mr(key);
	uint8_t buf[NICMR_RAW_KEY_SIZE];
	size_t size = sizeof(buf);
	if (int rc = nicmr_mr_raw_attr(it->second.mr, buf, &size); rc != 0)
		return api_error("nicmr_mr_raw_attr", rc);
	std::fprintf(f(), "MR key 0x%08x raw key (%zu bytes): ", key, size);
	for (size_t i = 0; i < size; i++)
		std::fprintf(f(), "%02x", buf[i]);
	std::fputs("\n", f());
	return 0;
}

int Engine::State::map_raw(const Command &c)
{
	uint64_t key = 0;
	if (int rc = nicmr_mr_map_raw(dev, c.raw.data(), c.raw.size(), &key); rc != 0)
		return api_error("nicmr_mr_map_raw", rc);
	std::fprintf(f(), "raw key (%zu bytes) -> key 0x%08" PRIx64 "%s\n", c.raw.size(), key,
		     mrs.count(static_cast<uint32_t>(key)) != 0 ? " (an MR of this session)" : "");
	nicmr_mr_unmap_key(dev, key);
	return 0;
}

int Engine::State::window_bind(const Command &c)
{
	auto it = mrs.find(c.key);
	if (it == mrs.end())
		return no_mr(c.key);
	WindowRec w;
	if (int rc = nicmr_mw_alloc(pd, &w.mw); rc != 0)
		return api_error("nicmr_mw_alloc", rc);
	w.addr = reinterpret_cast<uintptr_t>(nicmr_mr_addr(it->second.mr)) + c.offset;
	w.len = c.len;
	w.access = c.mr_access;
	w.mr_key = c.key;
	if (int rc = nicmr_mw_bind(w.mw, it->second.mr, w.addr, w.len, w.access, &w.rkey);
	    rc != 0) {
		nicmr_mw_free(w.mw);
		return api_error("nicmr_mw_bind", rc);
	}
	const uint64_t id = next_window++;
	windows[id] = w;
	std::fprintf(f(),
		     "window %" PRIu64 ": rkey 0x%08x over MR key 0x%08x [0x%" PRIx64
		     ", +0x%zx), access %s\n",
		     id, w.rkey, w.mr_key, w.addr, w.len, format_mr_access(w.access).c_str());
	return 0;
}

int Engine::State::window_unbind(uint64_t id)
{
	auto it = windows.find(id);
	if (it == windows.end())
		return out.error(-ENOENT, "no window %" PRIu64, id);
	if (int rc = nicmr_mw_invalidate(it->second.mw); rc != 0)
		return api_error("nicmr_mw_invalidate", rc);
	const uint32_t rkey = it->second.rkey;
	if (int rc = nicmr_mw_free(it->second.mw); rc != 0) {
		/* Unbound, so it cannot be busy: a failure here is the library's. */
		windows.erase(it);
		return api_error("nicmr_mw_free", rc);
	}
	windows.erase(it);
	std::fprintf(f(), "window %" PRIu64 " unbound: rkey 0x%08x is refused from now on\n", id,
		     rkey);
	return 0;
}

int Engine::State::show_violations(const Command &c)
{
	std::vector<nicmr_key_violation> v(NICMR_MAX_KEY_VIOLATIONS);
	uint64_t dropped = 0;
	const int n = nicmr_key_violations(dev, v.data(), NICMR_MAX_KEY_VIOLATIONS, &dropped);
	if (n < 0)
		return api_error("nicmr_key_violations", n);
	v.resize(std::min<size_t>(size_t(n), NICMR_MAX_KEY_VIOLATIONS));
	std::sort(v.begin(), v.end(), [](const auto &a, const auto &b) { return a.key < b.key; });
	if (c.json) {
		std::string array = "[";
		for (size_t i = 0; i < v.size(); i++) {
			JsonObject o;
			o.hex("key", v[i].key)
				.str("access", format_mr_access(v[i].access))
				.num("access_bits", v[i].access)
				.num("count", v[i].count)
				.hex("local_qpn", v[i].local_qpn)
				.num("peer_port", v[i].peer_port)
				.hex("peer_qpn", v[i].peer_qpn);
			array += (i ? "," : "") + o.str();
		}
		JsonObject o;
		o.num("count", v.size()).num("dropped", dropped).raw("violations", array + "]");
		std::fprintf(f(), "%s\n", o.str().c_str());
		return 0;
	}
	for (const auto &e : v)
		std::fprintf(f(),
			     "key 0x%08x: %" PRIu64
			     " refused (%s), last from QP 0x%x to port %u QP "
			     "0x%x%s\n",
			     e.key, e.count, format_mr_access(e.access).c_str(), e.local_qpn,
			     e.peer_port, e.peer_qpn,
			     mrs.count(e.key) != 0 ? " (an MR of this session)" : "");
	if (v.empty())
		std::fprintf(f(), "no key violations\n");
	if (dropped != 0)
		std::fprintf(f(),
			     "%" PRIu64
			     " refusals of further keys not recorded (the record holds %u "
			     "keys)\n",
			     dropped, NICMR_MAX_KEY_VIOLATIONS);
	return 0;
}

int Engine::State::cntr_alloc()
{
	CntrRec r;
	if (int rc = nicmr_cntr_alloc(dev, &r.cntr); rc != 0)
		return api_error("nicmr_cntr_alloc", rc);
	const uint64_t id = next_cntr++;
	cntrs[id] = r;
	std::fprintf(f(), "counter %" PRIu64 ": 0\n", id);
	return 0;
}

int Engine::State::cntr_free(uint64_t id)
{
	auto it = cntrs.find(id);
	if (it == cntrs.end())
		return out.error(-ENOENT, "no counter %" PRIu64 " (try 'cntr alloc')", id);
	if (int rc = nicmr_cntr_free(it->second.cntr); rc != 0)
		return api_error("nicmr_cntr_free", rc);
	cntrs.erase(it);
	std::fprintf(f(), "counter %" PRIu64 " freed\n", id);
	return 0;
}

int64_t Engine::State::cntr_of(const nicmr_mr *mr) const
{
	nicmr_mr_info info{};
	if (nicmr_mr_query(mr, &info) != 0 || info.cntr == nullptr)
		return -1;
	for (const auto &[id, r] : cntrs)
		if (r.cntr == info.cntr)
			return int64_t(id);
	return -1;
}

int Engine::State::mr_bind(const Command &c)
{
	auto it = mrs.find(c.key);
	if (it == mrs.end())
		return no_mr(c.key);
	auto ct = cntrs.find(c.id);
	if (ct == cntrs.end())
		return out.error(-ENOENT, "no counter %" PRIu64 " (try 'cntr alloc')", c.id);
	if (int rc = nicmr_mr_bind_cntr(it->second.mr, ct->second.cntr, NICMR_REMOTE_WRITE);
	    rc != 0)
		return api_error("nicmr_mr_bind_cntr", rc);
	mr_text(it->first, it->second);
	return 0;
}

int Engine::State::mr_unbind(uint32_t key)
{
	auto it = mrs.find(key);
	if (it == mrs.end())
		return no_mr(key);
	if (int rc = nicmr_mr_unbind_cntr(it->second.mr); rc != 0)
		return api_error("nicmr_mr_unbind_cntr", rc);
	mr_text(it->first, it->second);
	return 0;
}

int Engine::State::mr_enable(uint32_t key)
{
	auto it = mrs.find(key);
	if (it == mrs.end())
		return no_mr(key);
	if (int rc = nicmr_mr_enable(it->second.mr); rc != 0)
		return api_error("nicmr_mr_enable", rc);
	mr_text(it->first, it->second);
	return 0;
}

int Engine::State::show_cntrs(const Command &c)
{
	if (c.json) {
		std::string a = "[";
		for (const auto &[id, r] : cntrs) {
			JsonObject o;
			o.num("counter", id).num("value", nicmr_cntr_read(r.cntr));
			a += (a.size() > 1 ? "," : "") + o.str();
		}
		std::fprintf(f(), "{\"counters\":%s]}\n", a.c_str());
		return 0;
	}
	if (cntrs.empty())
		std::fprintf(f(), "no counters\n");
	for (const auto &[id, r] : cntrs)
		std::fprintf(f(), "counter %" PRIu64 ": %" PRIu64 "\n", id,
			     nicmr_cntr_read(r.cntr));
	return 0;
}

int Engine::State::show_dpdk(const Command &c)
{
	if (dpdk_mem == nullptr)
		return no_eal();
	nicmr_dpdk_mem_info info{};
	if (int rc = nicmr_dpdk_mem_query(dpdk_mem, &info); rc != 0)
		return api_error("nicmr_dpdk_mem_query", rc);
	if (c.json) {
		JsonObject o;
		o.num("pools", info.pools)
			.num("kept", info.kept)
			.num("events", info.events ? 1 : 0);
		std::fprintf(f(), "%s\n", o.str().c_str());
	} else {
		std::fprintf(f(), "DPDK memory: %u pools, %u kept after a free (%s)\n", info.pools,
			     info.kept,
			     info.events ? "memory events followed" : "legacy memory, fixed");
	}
	return 0;
}

int Engine::State::mempool_create(const Command &c)
{
	if (dpdk_mem == nullptr)
		return no_eal();
	const uint64_t id = next_mempool;
	const std::string name = "testmr_mp" + std::to_string(id);
	MempoolRec r;
	r.access = c.mr_access;
	r.mp = rte_pktmbuf_pool_create(name.c_str(), unsigned(c.count), 0, 0,
				       RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
	if (r.mp == nullptr)
		return api_error("rte_pktmbuf_pool_create", -rte_errno);
	if (int rc = nicmr_dpdk_mempool_reg(pd, r.mp, c.mr_access, &r.mmr); rc != 0) {
		rte_mempool_free(r.mp);
		return api_error("nicmr_dpdk_mempool_reg", rc);
	}
	next_mempool++;
	mempools[id] = r;
	/* The key an mbuf's SGE would carry, as a PMD looks it up per mbuf. */
	uint32_t key = 0;
	if (rte_mbuf *m = rte_pktmbuf_alloc(r.mp); m != nullptr) {
		key = nicmr_dpdk_mempool_key(r.mmr, rte_pktmbuf_mtod(m, void *), m->buf_len);
		rte_pktmbuf_free(m);
	}
	std::fprintf(f(),
		     "mempool %" PRIu64 ": %s, %" PRIu64 " mbufs, %zu MRs, access %s; an mbuf's "
		     "key 0x%08x\n",
		     id, name.c_str(), c.count, nicmr_dpdk_mempool_mr_count(r.mmr),
		     format_mr_access(c.mr_access).c_str(), key);
	return 0;
}

int Engine::State::mempool_destroy(uint64_t id)
{
	auto it = mempools.find(id);
	if (it == mempools.end())
		return out.error(-ENOENT, "no mempool %" PRIu64 " (try 'mempool create')", id);
	if (int rc = nicmr_dpdk_mempool_dereg(it->second.mmr); rc != 0)
		return api_error("nicmr_dpdk_mempool_dereg", rc);
	rte_mempool_free(it->second.mp);
	mempools.erase(it);
	std::fprintf(f(), "mempool %" PRIu64 " deregistered and freed\n", id);
	return 0;
}

std::string Engine::State::mempool_json(uint64_t id, const MempoolRec &r) const
{
	std::string keys = "[";
	for (size_t i = 0; i < nicmr_dpdk_mempool_mr_count(r.mmr); i++) {
		char k[16];
		std::snprintf(k, sizeof k, "\"0x%x\"",
			      nicmr_mr_key(nicmr_dpdk_mempool_mr_at(r.mmr, i)));
		keys += (i ? "," : "") + std::string(k);
	}
	keys += "]";
	JsonObject o;
	o.num("mempool", id)
		.str("name", r.mp->name)
		.num("mbufs", r.mp->size)
		.num("mrs", nicmr_dpdk_mempool_mr_count(r.mmr))
		.str("access", format_mr_access(r.access));
	std::string j = o.str();
	j.insert(j.size() - 1, ",\"keys\":" + keys);
	return j;
}

int Engine::State::show_mempools(const Command &c)
{
	if (dpdk_mem == nullptr)
		return no_eal();
	if (c.json) {
		std::string a = "[";
		for (const auto &[id, r] : mempools)
			a += (a.size() > 1 ? "," : "") + mempool_json(id, r);
		std::fprintf(f(), "{\"mempools\":%s]}\n", a.c_str());
		return 0;
	}
	if (mempools.empty())
		std::fprintf(f(), "no mempools\n");
	for (const auto &[id, r] : mempools) {
		std::fprintf(f(), "mempool %" PRIu64 ": %s, %u mbufs, access %s, MRs", id,
			     r.mp->name, r.mp->size, format_mr_access(r.access).c_str());
		for (size_t i = 0; i < nicmr_dpdk_mempool_mr_count(r.mmr); i++) {
			const nicmr_mr *m = nicmr_dpdk_mempool_mr_at(r.mmr, i);
			std::fprintf(f(), " 0x%08x (%zu bytes)", nicmr_mr_key(m), nicmr_mr_len(m));
		}
		std::fputs("\n", f());
	}
	return 0;
}

int Engine::State::cq_create(const Command &c)
{
	CqRec r;
	r.depth = c.depth;
	if (int rc = nicmr_cq_create(dev, c.depth, &r.cq); rc != 0)
		return api_error("nicmr_cq_create", rc);
	const uint64_t id = next_cq++;
	cqs[id] = r;
	std::fprintf(f(), "CQ %" PRIu64 ": number 0x%x, depth %u\n", id, nicmr_cq_num(r.cq),
		     r.depth);
	return 0;
}

int Engine::State::cq_destroy(uint64_t id)
{
	auto it = cqs.find(id);
	if (it == cqs.end())
		return no_cq(id);
	if (int rc = nicmr_cq_destroy(it->second.cq); rc != 0)
		return api_error("nicmr_cq_destroy", rc);
	cqs.erase(it);
	std::fprintf(f(), "CQ %" PRIu64 " destroyed\n", id);
	return 0;
}

int Engine::State::qp_create(const Command &c)
{
	auto cq = cqs.find(c.id);
	if (cq == cqs.end())
		return no_cq(c.id);
	QpRec r;
	r.cq = c.id;
	r.port = c.port;
	r.depth = c.depth;
	r.recv_depth = c.recv_depth;
	if (c.recv_depth == 0) {
		if (int rc = nicmr_qp_create(pd, c.port, cq->second.cq, c.depth, &r.qp); rc != 0)
			return api_error("nicmr_qp_create", rc);
	} else {
		/* Receives report to the same CQ, as ibv_rc_pingpong's do. */
		nicmr_qp_attr a{};
		a.port = c.port;
		a.send_cq = cq->second.cq;
		a.depth = c.depth;
		a.recv_depth = c.recv_depth;
		a.max_recv_sge = 1;
		if (int rc = nicmr_qp_create_attr(pd, &a, &r.qp); rc != 0)
			return api_error("nicmr_qp_create_attr", rc);
	}
	const uint64_t id = next_qp++;
	qps[id] = r;
	std::fprintf(f(), "QP %" PRIu64 ": number 0x%x, port %u, CQ %" PRIu64 ", depth %u", id,
		     nicmr_qp_num(r.qp), r.port, r.cq, r.depth);
	if (r.recv_depth != 0)
		std::fprintf(f(), ", receive depth %u", r.recv_depth);
	std::fputs(", RESET\n", f());
	return 0;
}

int Engine::State::qp_connect(const Command &c)
{
	auto q = qps.find(c.id);
	if (q == qps.end())
		return no_qp(c.id);
	auto p = qps.find(c.peer);
	if (p == qps.end())
		return no_qp(c.peer);
	const uint32_t pqpn = nicmr_qp_num(p->second.qp);
	if (int rc = nicmr_qp_connect(q->second.qp, p->second.port, pqpn); rc != 0)
		return api_error("nicmr_qp_connect", rc);
	QpRec &r = q->second;
	r.connected = true;
	r.peer = c.peer;
	r.peer_qpn = pqpn;
	r.peer_port = p->second.port;
	uint32_t st = 0;
	const int rc = nicmr_qp_state(r.qp, &st);
	std::fprintf(f(),
		     "QP %" PRIu64 " (0x%x, port %u) connected to QP %" PRIu64
		     " (0x%x, port %u): %s\n",
		     c.id, nicmr_qp_num(r.qp), r.port, c.peer, pqpn, r.peer_port,
		     rc == 0 ? qp_state_name(st) : errno_name(rc));
	return 0;
}

int Engine::State::connect_remote(uint64_t id, const PeerRecord &r, uint32_t mtu)
{
	auto q = qps.find(id);
	if (q == qps.end())
		return no_qp(id);
	nicmr_qp_remote rem{};
	rem.size = sizeof(rem);
	std::memcpy(rem.gid, r.gid.data(), sizeof(rem.gid));
	rem.qpn = r.qpn;
	rem.psn = r.psn;
	rem.mtu = mtu;
	QpRec &rec = q->second;
	if (int rc = nicmr_qp_connect_remote(rec.qp, &rem); rc != 0)
		return api_error("nicmr_qp_connect_remote", rc);
	rec.connected = true;
	rec.remote = true;
	rec.peer_qpn = r.qpn;
	rec.remote_gid = r.gid;
	rec.remote_psn = r.psn;
	rec.mtu = mtu;
	uint32_t st = 0;
	const int rc = nicmr_qp_state(rec.qp, &st);
	std::fprintf(f(),
		     "QP %" PRIu64 " (0x%x, port %u) connected to remote QP 0x%06x at %s, PSN "
		     "0x%06x, MTU %u: %s\n",
		     id, nicmr_qp_num(rec.qp), rec.port, r.qpn, gid_text(r.gid).c_str(), r.psn,
		     mtu ? mtu : 1024u, rc == 0 ? qp_state_name(st) : errno_name(rc));
	return 0;
}

int Engine::State::qp_connect_remote(const Command &c)
{
	PeerRecord r;
	r.gid = c.gid;
	r.qpn = c.remote_qpn;
	r.psn = c.remote_psn;
	return connect_remote(c.id, r, c.mtu);
}

int Engine::State::qp_exchange(const Command &c)
{
	auto q = qps.find(c.id);
	if (q == qps.end())
		return no_qp(c.id);
	nicmr_qp_addr a{};
	if (int rc = nicmr_qp_local(q->second.qp, 0, &a); rc != 0) {
		if (rc == -EADDRNOTAVAIL)
			return out.error(rc,
					 "QP %" PRIu64 ": its port %u is not on a wire, %s (start "
					 "testmr with --engine emu:addr=ADDRESS,...)",
					 c.id, q->second.port, errno_name(rc));
		return api_error("nicmr_qp_local", rc);
	}
	/* The MR record (mr KEY): the region the peer may RDMA, its rkey the MR's key. */
	MrRecord mine_mr, theirs_mr;
	if (c.has_exchange_mr) {
		auto m = mrs.find(c.exchange_mr);
		if (m == mrs.end())
			return no_mr(c.exchange_mr);
		mine_mr.addr = reinterpret_cast<uintptr_t>(nicmr_mr_addr(m->second.mr));
		mine_mr.rkey = c.exchange_mr;
		mine_mr.len = nicmr_mr_len(m->second.mr);
	}
	const MrRecord *mr_out = c.has_exchange_mr ? &mine_mr : nullptr;
	MrRecord *mr_in = c.has_exchange_mr ? &theirs_mr : nullptr;
	PeerRecord mine;
	mine.qpn = a.qpn;
	mine.psn = a.psn;
	std::memcpy(mine.gid.data(), a.gid, sizeof(a.gid));
	PeerRecord theirs;
	std::string err;
	const auto port = static_cast<uint16_t>(c.tcp_port);
	int rc = 0;
	/* The connect step prints its own line (and error): the exchange's error is only said
	 * when the exchange itself failed. */
	int connect_rc = 0;
	if (c.verb == Verb::qp_exchange_listen) {
		std::fprintf(f(), "QP %" PRIu64 ": waiting on TCP port %u for a peer (%u s)\n",
			     c.id, c.tcp_port, c.timeout_s);
		std::fflush(f());
		rc = exchange_listen(
			port, c.timeout_s, mine,
			[&](const PeerRecord &r) {
				connect_rc = connect_remote(c.id, r, c.mtu);
				return connect_rc;
			},
			&theirs, &err, mr_out, mr_in);
	} else {
		rc = exchange_connect(c.host, port, c.timeout_s, mine, &theirs, &err, mr_out,
				      mr_in);
	}
	const auto local = format_record(mine);
	if (rc != 0) {
		if (connect_rc != 0)
			return rc;
		return out.error(rc, "qp exchange (%s): %s", errno_name(rc), err.c_str());
	}
	const auto remote = format_record(theirs);
	std::fprintf(f(), "QP %" PRIu64 ": sent %s, received %s\n", c.id, local.data(),
		     remote.data());
	if (c.has_exchange_mr)
		std::fprintf(f(),
			     "QP %" PRIu64 ": peer MR at 0x%" PRIx64 ", rkey 0x%08x, %" PRIu64
			     " bytes\n",
			     c.id, theirs_mr.addr, theirs_mr.rkey, theirs_mr.len);
	if (c.verb == Verb::qp_exchange_connect)
		return connect_remote(c.id, theirs, c.mtu);
	return 0;
}

/*
 * ibv_rc_pingpong's exchange of SENDs (rdma-core libibverbs/examples/rc_pingpong.c, main and
 * parse_single_wc): each side SENDs SIZE bytes ITERS times and receives as many; the client
 * sends first, and each side sends its next message once its last SEND completed and a
 * message arrived. rc_pingpong receives into the buffer it sends from, so what it sends back
 * is what it received; testmr does the same with the first SIZE bytes of the MR. The client
 * fills them with a pattern first, and every message it receives must be that pattern; the
 * server's first message is the peer's own buffer, and every later one must equal it. Waits
 * poll with short sleeps (a peer in a TCG guest needs the CPU).
 */
int Engine::State::qp_pingpong(const Command &c)
{
	auto q = qps.find(c.id);
	if (q == qps.end())
		return no_qp(c.id);
	const QpRec &r = q->second;
	if (r.recv_depth == 0)
		return out.error(-ENOTSUP,
				 "QP %" PRIu64
				 " has no receive queue (qp create CQ recv N), -ENOTSUP",
				 c.id);
	if (!r.remote)
		return out.error(-ENOTCONN,
				 "QP %" PRIu64 " is not connected to a remote QP (qp exchange, qp "
				 "connect remote), -ENOTCONN",
				 c.id);
	auto m = mrs.find(c.key);
	if (m == mrs.end())
		return no_mr(c.key);
	const size_t mlen = nicmr_mr_len(m->second.mr);
	if (c.size > mlen || c.size > UINT32_MAX)
		return out.error(-ERANGE,
				 "pingpong: %" PRIu64 " bytes do not fit in MR 0x%08x (%zu bytes), "
				 "-ERANGE",
				 c.size, c.key, mlen);
	nicmr_cq *cq = cqs[r.cq].cq;
	auto *buf = static_cast<uint8_t *>(nicmr_mr_addr(m->second.mr));
	const auto len = static_cast<uint32_t>(c.size);
	/* rc_pingpong's work request ids: a bit each, so that pending is their OR. */
	constexpr uint64_t kRecv = 1, kSend = 2;
	const nicmr_sge sge{reinterpret_cast<uintptr_t>(buf), len, c.key};
	const uint32_t ahead = std::min(r.recv_depth, 2u);
	for (uint32_t i = 0; i < ahead; i++)
		if (int rc = nicmr_post_recv(r.qp, &sge, 1, kRecv); rc != 0)
			return api_error("nicmr_post_recv", rc);
	/* What every message must carry (the server learns it from the first). */
	std::vector<uint8_t> want;
	if (c.client) {
		want.resize(len);
		for (uint32_t j = 0; j < len; j++)
			want[j] = static_cast<uint8_t>(j * 7 + (j >> 8) + 1);
		std::memcpy(buf, want.data(), len);
	}
	const auto send = [&]() {
		return nicmr_post_send(r.qp, reinterpret_cast<uintptr_t>(buf), len, c.key, 0, kSend,
				       NICMR_SEND_SIGNALED);
	};
	uint64_t sent = 0, received = 0, checked = 0;
	uint64_t pending = kRecv;
	if (c.client) {
		if (int rc = send(); rc != 0)
			return api_error("nicmr_post_send", rc);
		pending |= kSend;
	}
	const auto t0 = std::chrono::steady_clock::now();
	while (received < c.iters || sent < c.iters) {
		nicmr_wc wc{};
		const auto deadline =
			std::chrono::steady_clock::now() + std::chrono::seconds(c.timeout_s);
		int got = 0;
		for (unsigned spin = 0; (got = nicmr_cq_poll(cq, &wc, 1)) == 0; spin++) {
			if (std::chrono::steady_clock::now() > deadline)
				return out.error(
					-ETIMEDOUT,
					"QP %" PRIu64 ": pingpong: no completion within %u s "
					"(%" PRIu64 " sent, %" PRIu64 " received), -ETIMEDOUT",
					c.id, c.timeout_s, sent, received);
			if (spin < 1000)
				std::this_thread::yield();
			else
				std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
		if (got < 0)
			return api_error("nicmr_cq_poll", got);
		if (wc.status != NICMR_WC_SUCCESS)
			return out.error(-EIO,
					 "QP %" PRIu64
					 ": pingpong: %s completion %s, syndrome 0x%02x "
					 "(%s) after %" PRIu64 " sent, %" PRIu64 " received, -EIO",
					 c.id, wc.wr_id == kRecv ? "receive" : "send",
					 wc_status_name(wc.status), wc.syndrome,
					 nicmr_wc_syndrome_str(wc.syndrome), sent, received);
		if (wc.wr_id == kSend) {
			sent++;
		} else {
			received++;
			if (wc.byte_len != len)
				return out.error(-EBADMSG,
						 "QP %" PRIu64 ": pingpong: message %" PRIu64
						 " has %u bytes, not %u, -EBADMSG",
						 c.id, received, wc.byte_len, len);
			if (want.empty()) {
				want.assign(buf, buf + len);
			} else {
				for (uint32_t j = 0; j < len; j++)
					if (buf[j] != want[j])
						return out.error(
							-EBADMSG,
							"QP %" PRIu64 ": pingpong: message %" PRIu64
							", byte %u is 0x%02x, not 0x%02x, -EBADMSG",
							c.id, received, j, buf[j], want[j]);
				checked++;
			}
			if (int rc = nicmr_post_recv(r.qp, &sge, 1, kRecv); rc != 0)
				return api_error("nicmr_post_recv", rc);
		}
		pending &= ~wc.wr_id;
		if (sent < c.iters && pending == 0) {
			if (int rc = send(); rc != 0)
				return api_error("nicmr_post_send", rc);
			pending = kRecv | kSend;
		}
	}
	const double us =
		std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
			.count();
	std::fprintf(f(),
		     "QP %" PRIu64 ": pingpong: %" PRIu64 " round trips of %u bytes as %s, %" PRIu64
		     " messages checked, %.1f us per round trip\n",
		     c.id, c.iters, len, c.client ? "client" : "server", checked,
		     us / static_cast<double>(c.iters));
	return 0;
}

uint8_t *Engine::State::mr_bytes(uint32_t key, uint64_t offset, uint64_t len, int *rc)
{
	auto m = mrs.find(key);
	if (m == mrs.end()) {
		*rc = no_mr(key);
		return nullptr;
	}
	const size_t mlen = nicmr_mr_len(m->second.mr);
	if (offset > mlen || len > mlen - offset) {
		*rc = out.error(-ERANGE,
				"bytes [0x%" PRIx64 ", +0x%" PRIx64 ") are outside MR 0x%08x "
				"(%zu bytes)",
				offset, len, key, mlen);
		return nullptr;
	}
	return static_cast<uint8_t *>(nicmr_mr_addr(m->second.mr)) + offset;
}

int Engine::State::mr_fill(const Command &c)
{
	int rc = 0;
	uint8_t *p = mr_bytes(c.key, c.offset, c.len, &rc);
	if (p == nullptr)
		return rc;
	std::memset(p, c.byte, c.len);
	std::fprintf(f(), "MR 0x%08x: %" PRIu64 " bytes at offset 0x%" PRIx64 " set to 0x%02x\n",
		     c.key, c.len, c.offset, c.byte);
	return 0;
}

/* The range is the API's to check: outside the MR, ibv_advise_mr(3)'s -EFAULT. */
int Engine::State::mr_advise(const Command &c)
{
	auto m = mrs.find(c.key);
	if (m == mrs.end())
		return no_mr(c.key);
	if (c.len > UINT32_MAX)
		return out.error(-EINVAL, "mr advise: LEN is at most 4 GiB - 1 (an SGE's length)");
	constexpr const char *kAdvice[] = {"prefetch", "prefetch_write", "no_fault"};
	const uint64_t addr = reinterpret_cast<uintptr_t>(nicmr_mr_addr(m->second.mr)) + c.offset;
	const nicmr_sge g{addr, static_cast<uint32_t>(c.len), c.key};
	if (int rc = nicmr_advise_mr(pd, c.advice, c.flush ? NICMR_ADVISE_MR_FLAG_FLUSH : 0, &g, 1);
	    rc != 0)
		return api_error("nicmr_advise_mr", rc);
	std::fprintf(f(), "MR 0x%08x: %" PRIu64 " bytes at offset 0x%" PRIx64 " advised %s%s\n",
		     c.key, c.len, c.offset, kAdvice[c.advice], c.flush ? " (flush)" : "");
	return 0;
}

int Engine::State::mr_dump(const Command &c)
{
	if (c.len > kMaxDump)
		return out.error(-EINVAL, "mr dump: at most %" PRIu64 " bytes", kMaxDump);
	int rc = 0;
	const uint8_t *p = mr_bytes(c.key, c.offset, c.len, &rc);
	if (p == nullptr)
		return rc;
	/* 16 bytes a line, the offset first; a peer may be writing: byte loads, no tearing
	 * that matters for a dump. */
	for (uint64_t i = 0; i < c.len; i += 16) {
		std::fprintf(f(), "%08" PRIx64 ":", c.offset + i);
		for (uint64_t j = i; j < c.len && j < i + 16; j++)
			std::fprintf(f(), " %02x", p[j]);
		std::fputs("\n", f());
	}
	return 0;
}

int Engine::State::qp_recover(uint64_t id)
{
	auto q = qps.find(id);
	if (q == qps.end())
		return no_qp(id);
	if (int rc = nicmr_qp_recover(q->second.qp); rc != 0)
		return api_error("nicmr_qp_recover", rc);
	uint32_t st = 0;
	const int rc = nicmr_qp_state(q->second.qp, &st);
	std::fprintf(f(), "QP %" PRIu64 " recovered: %s\n", id,
		     rc == 0 ? qp_state_name(st) : errno_name(rc));
	return 0;
}

int Engine::State::qp_destroy(uint64_t id)
{
	auto q = qps.find(id);
	if (q == qps.end())
		return no_qp(id);
	if (int rc = nicmr_qp_destroy(q->second.qp); rc != 0)
		return api_error("nicmr_qp_destroy", rc);
	qps.erase(q);
	std::fprintf(f(), "QP %" PRIu64 " destroyed\n", id);
	return 0;
}

uint64_t Engine::State::remote_addr(uint32_t rkey, uint64_t offset) const
{
	if (auto it = mrs.find(rkey); it != mrs.end())
		return reinterpret_cast<uintptr_t>(nicmr_mr_addr(it->second.mr)) + offset;
	if (const nicmr_mr *m = mempool_mr(rkey); m != nullptr)
		return reinterpret_cast<uintptr_t>(nicmr_mr_addr(m)) + offset;
	for (const auto &[id, w] : windows)
		if (w.rkey == rkey)
			return w.addr + offset;
	return offset;
}

int Engine::State::post(const Command &c)
{
	auto q = qps.find(c.id);
	if (q == qps.end())
		return no_qp(c.id);
	auto m = mrs.find(c.key);
	if (m == mrs.end())
		return no_mr(c.key);
	nicmr_qp *qp = q->second.qp;
	const uint64_t laddr = reinterpret_cast<uintptr_t>(nicmr_mr_addr(m->second.mr)) + c.offset;
	/* A remote peer's keys are in its address space: ROFFSET is its address there. */
	const uint64_t raddr = q->second.remote ? c.roffset : remote_addr(c.rkey, c.roffset);
	const uint64_t wr_id = c.has_wr_id ? c.wr_id : next_wr_id++;
	const unsigned flags = (c.unsignaled ? 0u : NICMR_SEND_SIGNALED) |
			       (c.inline_data ? NICMR_SEND_INLINE : 0u);
	const char *call = nullptr, *what = nullptr;
	uint64_t len = c.len;
	int rc = 0;
	switch (c.verb) {
	case Verb::post_write:
		call = "nicmr_post_write";
		what = c.inline_data ? "RDMA WRITE (inline)" : "RDMA WRITE";
		rc = nicmr_post_write(qp, laddr, c.len, c.key, raddr, c.rkey, wr_id, flags);
		break;
	case Verb::post_read:
		call = "nicmr_post_read";
		what = "RDMA READ";
		rc = nicmr_post_read(qp, laddr, c.len, c.key, raddr, c.rkey, wr_id, flags);
		break;
	case Verb::post_fadd:
		call = "nicmr_post_atomic_fadd";
		what = "FETCH_ADD";
		len = 8;
		rc = nicmr_post_atomic_fadd(qp, laddr, c.key, raddr, c.rkey, c.operand, wr_id,
					    flags);
		break;
	default:
		call = "nicmr_post_atomic_cswap";
		what = "COMP_SWAP";
		len = 8;
		rc = nicmr_post_atomic_cswap(qp, laddr, c.key, raddr, c.rkey, c.operand, c.operand2,
					     wr_id, flags);
		break;
	}
	if (rc != 0)
		return api_error(call, rc);
	if (len == 8 && (c.verb == Verb::post_fadd || c.verb == Verb::post_cswap))
		atomic_results[{nicmr_qp_num(qp), wr_id}] = laddr;
	std::fprintf(f(),
		     "posted %s, wr_id %" PRIu64 ", QP %" PRIu64 ": key 0x%08x [0x%" PRIx64
		     ", +0x%" PRIx64 ") %s rkey 0x%08x at 0x%" PRIx64 "%s\n",
		     what, wr_id, c.id, c.key, laddr, len, c.verb == Verb::post_write ? "->" : "<-",
		     c.rkey, raddr, c.unsignaled ? ", unsignaled" : "");
	return 0;
}

int Engine::State::poll(const Command &c)
{
	auto cq = cqs.find(c.id);
	if (cq == cqs.end())
		return no_cq(c.id);
	std::vector<nicmr_wc> wc(c.max);
	/* The device may still be working (thread delivery): up to a second for the first. */
	const auto t0 = std::chrono::steady_clock::now();
	int got = 0;
	while (true) {
		got = nicmr_cq_poll(cq->second.cq, wc.data(), int(c.max));
		if (got != 0 || std::chrono::steady_clock::now() - t0 > std::chrono::seconds(1))
			break;
		std::this_thread::yield();
	}
	if (got < 0)
		return api_error("nicmr_cq_poll", got);
	if (got == 0)
		std::fprintf(f(), "CQ %" PRIu64 ": no completion\n", c.id);
	for (int i = 0; i < got; i++) {
		const nicmr_wc &w = wc[size_t(i)];
		uint64_t qid = 0;
		for (const auto &[id, q] : qps)
			if (nicmr_qp_num(q.qp) == w.qp_num)
				qid = id;
		std::fprintf(f(), "CQ %" PRIu64 ": wr_id %" PRIu64 ", QP %" PRIu64 " (0x%x), %s, ",
			     c.id, w.wr_id, qid, w.qp_num, wc_opcode_name(w.opcode));
		auto res = atomic_results.find({w.qp_num, w.wr_id});
		if (w.status == NICMR_WC_SUCCESS) {
			std::fprintf(f(), "success, %u bytes", w.byte_len);
			if (res != atomic_results.end()) {
				uint64_t old = 0;
				std::memcpy(&old, reinterpret_cast<const void *>(res->second), 8);
				std::fprintf(f(), ", old value %" PRIu64, old);
			}
			std::fputs("\n", f());
		} else {
			std::fprintf(f(), "%s, syndrome 0x%02x (%s), vendor syndrome 0x%02x\n",
				     wc_status_name(w.status), w.syndrome,
				     nicmr_wc_syndrome_str(w.syndrome), w.vendor_syndrome);
		}
		if (res != atomic_results.end())
			atomic_results.erase(res);
	}
	return 0;
}

std::string Engine::State::cq_json(uint64_t id, const CqRec &r) const
{
	std::string list = "[";
	size_t n = 0;
	for (const auto &[qid, q] : qps)
		if (q.cq == id)
			list += (n++ ? "," : "") + std::to_string(qid);
	JsonObject o;
	o.num("id", id).hex("cqn", nicmr_cq_num(r.cq)).num("depth", r.depth).raw("qps", list + "]");
	return o.str();
}

void Engine::State::cq_text(uint64_t id, const CqRec &r) const
{
	std::string list;
	for (const auto &[qid, q] : qps)
		if (q.cq == id)
			list += (list.empty() ? "" : ",") + std::to_string(qid);
	std::fprintf(f(), "CQ %" PRIu64 ": number 0x%x, depth %u, QPs %s\n", id, nicmr_cq_num(r.cq),
		     r.depth, list.empty() ? "none" : list.c_str());
}

std::string Engine::State::qp_json(uint64_t id, const QpRec &r) const
{
	uint32_t st = 0;
	const int rc = nicmr_qp_state(r.qp, &st);
	JsonObject o;
	o.num("id", id)
		.hex("qpn", nicmr_qp_num(r.qp))
		.num("port", r.port)
		.num("cq", r.cq)
		.num("depth", r.depth)
		.str("state", rc == 0 ? qp_state_name(st) : errno_name(rc));
	/* The QP's own address, on a port on the wire only. */
	nicmr_qp_addr a{};
	if (nicmr_qp_local(r.qp, 0, &a) == 0) {
		std::array<uint8_t, 16> g;
		std::memcpy(g.data(), a.gid, g.size());
		o.str("gid", gid_text(g)).hex("psn", a.psn);
	}
	if (r.connected && r.remote)
		o.raw("peer", "null")
			.str("remote_gid", gid_text(r.remote_gid))
			.hex("remote_qpn", r.peer_qpn)
			.hex("remote_psn", r.remote_psn)
			.num("mtu", r.mtu ? r.mtu : 1024);
	else if (r.connected)
		o.num("peer", r.peer).hex("peer_qpn", r.peer_qpn).num("peer_port", r.peer_port);
	else
		o.raw("peer", "null");
	return o.str();
}

void Engine::State::qp_text(uint64_t id, const QpRec &r) const
{
	uint32_t st = 0;
	const int rc = nicmr_qp_state(r.qp, &st);
	std::fprintf(f(), "QP %" PRIu64 ": number 0x%x, port %u, CQ %" PRIu64 ", depth %u, ", id,
		     nicmr_qp_num(r.qp), r.port, r.cq, r.depth);
	nicmr_qp_addr a{};
	if (nicmr_qp_local(r.qp, 0, &a) == 0) {
		std::array<uint8_t, 16> g;
		std::memcpy(g.data(), a.gid, g.size());
		std::fprintf(f(), "GID %s QPN 0x%06x PSN 0x%06x, ", gid_text(g).c_str(), a.qpn,
			     a.psn);
	}
	if (r.connected && r.remote)
		std::fprintf(f(), "remote QP 0x%06x at %s PSN 0x%06x MTU %u, ", r.peer_qpn,
			     gid_text(r.remote_gid).c_str(), r.remote_psn, r.mtu ? r.mtu : 1024);
	else if (r.connected)
		std::fprintf(f(), "peer QP %" PRIu64 " (0x%x, port %u), ", r.peer, r.peer_qpn,
			     r.peer_port);
	else
		std::fprintf(f(), "not connected, ");
	std::fprintf(f(), "%s\n", rc == 0 ? qp_state_name(st) : errno_name(rc));
}

int Engine::State::show_queues(const Command &c)
{
	const bool qp = c.verb == Verb::show_qp || c.verb == Verb::show_qps;
	if (c.verb == Verb::show_cq) {
		auto it = cqs.find(c.id);
		if (it == cqs.end())
			return no_cq(c.id);
		if (c.json)
			std::fprintf(f(), "%s\n", cq_json(it->first, it->second).c_str());
		else
			cq_text(it->first, it->second);
		return 0;
	}
	if (c.verb == Verb::show_qp) {
		auto it = qps.find(c.id);
		if (it == qps.end())
			return no_qp(c.id);
		if (c.json)
			std::fprintf(f(), "%s\n", qp_json(it->first, it->second).c_str());
		else
			qp_text(it->first, it->second);
		return 0;
	}
	std::string array = "[";
	size_t n = 0;
	if (qp) {
		for (const auto &[id, r] : qps) {
			if (c.json)
				array += (n ? "," : "") + qp_json(id, r);
			else
				qp_text(id, r);
			n++;
		}
	} else {
		for (const auto &[id, r] : cqs) {
			if (c.json)
				array += (n ? "," : "") + cq_json(id, r);
			else
				cq_text(id, r);
			n++;
		}
	}
	if (c.json) {
		JsonObject o;
		o.num("count", n).raw(qp ? "qps" : "cqs", array + "]");
		std::fprintf(f(), "%s\n", o.str().c_str());
	} else if (n == 0) {
		std::fprintf(f(), "no %s\n", qp ? "QPs" : "CQs");
	}
	return 0;
}

/*
 * bench: the figures of bench/mr/bench-mr measured here, in this build, through the native
 * API on the engine's device: each repetition times every call (steady clock), the figures
 * are medians over the repetitions of each repetition's median. bench-mr's numbers come from a
 * release build; these say what this build does (a debug build is slower).
 */
constexpr int kBenchReps = 5;
constexpr uint64_t kBenchRegCount = 2000;
constexpr uint64_t kBenchLookupCount = 1000000;
constexpr uint64_t kBenchRdmaCount = 2000;
constexpr size_t kBenchBytes = 4096;

void Engine::State::progress(const char *what, int rep, int reps) const
{
	if (isatty(STDERR_FILENO) == 0)
		return;
	if (rep < reps)
		std::fprintf(stderr, "\r%s: repetition %d/%d ...", what, rep + 1, reps);
	else
		std::fprintf(stderr, "\r%*s\r", 40, "");
	std::fflush(stderr);
}

/* A 4 MiB engine pool of its own (2 MiB pages, 4 KiB ones when none is free), destroyed with
 * the object: the bench commands leave the session's pools alone. */
struct BenchPool {
	nicmr_pool *pool = nullptr;
	~BenchPool()
	{
		if (pool)
			nicmr_pool_destroy(pool);
	}
	int create(nicmr_device *dev)
	{
		nicmr_pool_params p;
		nicmr_pool_params_init(&p);
		p.size = size_t{4} << 20;
		p.allow_fallback = 1;
		p.name = "testmr-bench";
		return nicmr_pool_create(dev, &p, &pool);
	}
	char *at(size_t off) const { return static_cast<char *>(nicmr_pool_addr(pool)) + off; }
};

int Engine::State::bench_reg(const Command &c)
{
	const uint64_t n = c.count ? c.count : kBenchRegCount;
	BenchPool bp;
	if (int rc = bp.create(dev); rc != 0)
		return api_error("nicmr_pool_create", rc);
	/* What bench-mr's native pair registers with (bench/common/bench_native.cpp). */
	const uint64_t access = NICMR_ACCESS_READ | NICMR_ACCESS_WRITE | NICMR_ACCESS_REMOTE_READ |
				NICMR_ACCESS_REMOTE_WRITE;
	std::fprintf(f(),
		     "bench reg: %d repetitions of %" PRIu64
		     " nicmr_mr_reg + nicmr_mr_dereg of 4 KiB in a pool on %s (ns, medians)\n",
		     kBenchReps, n, spec.c_str());
	std::vector<double> reg_m, dereg_m, pair_m;
	std::vector<double> r(n), d(n);
	for (int rep = 0; rep < kBenchReps; rep++) {
		progress("bench reg", rep, kBenchReps);
		for (uint64_t i = 0; i < n; i++) {
			nicmr_mr *mr = nullptr;
			auto t0 = std::chrono::steady_clock::now();
			int rc = nicmr_mr_reg(pd, bp.at(0), kBenchBytes, access, 0, 0, &mr);
			r[i] = ns_since(t0);
			if (rc != 0) {
				progress("bench reg", kBenchReps, kBenchReps);
				return api_error("nicmr_mr_reg", rc);
			}
			t0 = std::chrono::steady_clock::now();
			rc = nicmr_mr_dereg(mr);
			d[i] = ns_since(t0);
			if (rc != 0) {
				progress("bench reg", kBenchReps, kBenchReps);
				return api_error("nicmr_mr_dereg", rc);
			}
		}
		std::vector<double> p(n);
		for (uint64_t i = 0; i < n; i++)
			p[i] = r[i] + d[i];
		reg_m.push_back(median(r));
		dereg_m.push_back(median(d));
		pair_m.push_back(median(p));
	}
	progress("bench reg", kBenchReps, kBenchReps);
	/* bench-mr's line for the native pair, with the same names. */
	std::fprintf(f(), "RESULT native 4KiB/alone reg=%.0f close=%.0f pair=%.0f\n", median(reg_m),
		     median(dereg_m), median(pair_m));
	return 0;
}

int Engine::State::bench_lookup(const Command &c)
{
	const uint64_t n = c.count ? c.count : kBenchLookupCount;
	BenchPool bp;
	if (int rc = bp.create(dev); rc != 0)
		return api_error("nicmr_pool_create", rc);
	nicmr_mr *mr = nullptr;
	if (int rc = nicmr_mr_reg(pd, bp.at(0), kBenchBytes, NICMR_ACCESS_REMOTE_READ, 0, 0, &mr);
	    rc != 0)
		return api_error("nicmr_mr_reg", rc);
	const uint32_t key = nicmr_mr_key(mr);
	const uint64_t a = reinterpret_cast<uintptr_t>(bp.at(0));
	std::fprintf(f(),
		     "bench lookup: %d repetitions of %" PRIu64
		     " nicmr_key_lookup of one live key, remote_read of 64 bytes (ns per lookup, "
		     "median)\n",
		     kBenchReps, n);
	std::vector<double> per;
	int rc = 0;
	for (int rep = 0; rep < kBenchReps && rc == 0; rep++) {
		progress("bench lookup", rep, kBenchReps);
		uint64_t iova = 0, sum = 0;
		const auto t0 = std::chrono::steady_clock::now();
		for (uint64_t i = 0; i < n && rc == 0; i++) {
			rc = nicmr_key_lookup(dev, key, a + (i & 63), 64, NICMR_ACCESS_REMOTE_READ,
					      &iova);
			sum += iova;
		}
		per.push_back(ns_since(t0) / double(n));
		if (sum == 0)
			rc = -EFAULT; /* every lookup gave an IOVA: keeps the loop's result used */
	}
	progress("bench lookup", kBenchReps, kBenchReps);
	nicmr_mr_dereg(mr);
	if (rc != 0)
		return api_error("nicmr_key_lookup", rc);
	std::fprintf(f(), "RESULT lookup one-key ns=%.2f\n", median(per));
	return 0;
}

int Engine::State::bench_rdma(const Command &c)
{
	const uint64_t n = c.count ? c.count : kBenchRdmaCount;
	BenchPool bp;
	if (int rc = bp.create(dev); rc != 0)
		return api_error("nicmr_pool_create", rc);
	/* Its own CQ, QP pair and MRs, released at the end whatever happens. */
	struct Q {
		nicmr_cq *cq = nullptr;
		nicmr_qp *a = nullptr, *b = nullptr;
		nicmr_mr *src = nullptr, *dst = nullptr;
		~Q()
		{
			if (a)
				nicmr_qp_destroy(a);
			if (b)
				nicmr_qp_destroy(b);
			if (cq)
				nicmr_cq_destroy(cq);
			if (src)
				nicmr_mr_dereg(src);
			if (dst)
				nicmr_mr_dereg(dst);
		}
	} q;
	int rc = nicmr_cq_create(dev, 64, &q.cq);
	if (rc != 0)
		return api_error("nicmr_cq_create", rc);
	if ((rc = nicmr_qp_create(pd, 1, q.cq, 64, &q.a)) != 0 ||
	    (rc = nicmr_qp_create(pd, 2, q.cq, 64, &q.b)) != 0)
		return api_error("nicmr_qp_create", rc);
	if ((rc = nicmr_qp_connect(q.a, 2, nicmr_qp_num(q.b))) != 0 ||
	    (rc = nicmr_qp_connect(q.b, 1, nicmr_qp_num(q.a))) != 0)
		return api_error("nicmr_qp_connect", rc);
	if ((rc = nicmr_mr_reg(pd, bp.at(0), kBenchBytes, NICMR_ACCESS_WRITE, 0, 0, &q.src)) != 0 ||
	    (rc = nicmr_mr_reg(pd, bp.at(1 << 20), kBenchBytes,
			       NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_WRITE, 0, 0,
			       &q.dst)) != 0)
		return api_error("nicmr_mr_reg", rc);
	std::fprintf(
		f(),
		"bench rdma: %d repetitions of %" PRIu64
		" signalled RDMA WRITEs of 4 KiB, port 1 to port 2, each polled (ns per write, "
		"median)\n",
		kBenchReps, n);
	const uint64_t src = reinterpret_cast<uintptr_t>(bp.at(0));
	const uint64_t dst = reinterpret_cast<uintptr_t>(bp.at(1 << 20));
	std::vector<double> per(n), med;
	for (int rep = 0; rep < kBenchReps; rep++) {
		progress("bench rdma", rep, kBenchReps);
		for (uint64_t i = 0; i < n; i++) {
			const auto t0 = std::chrono::steady_clock::now();
			rc = nicmr_post_write(q.a, src, kBenchBytes, nicmr_mr_key(q.src), dst,
					      nicmr_mr_key(q.dst), i, NICMR_SEND_SIGNALED);
			nicmr_wc wc{};
			int got = 0;
			while (rc == 0 && got == 0) {
				got = nicmr_cq_poll(q.cq, &wc, 1);
				if (got == 0 && ns_since(t0) > 5e9)
					got = -ETIMEDOUT;
			}
			per[i] = ns_since(t0);
			if (rc == 0 && got < 0)
				rc = got;
			if (rc == 0 && wc.status != NICMR_WC_SUCCESS)
				rc = -EIO;
			if (rc != 0) {
				progress("bench rdma", kBenchReps, kBenchReps);
				if (rc == -EIO)
					return out.error(rc, "bench rdma: completion %s (%s)",
							 wc_status_name(wc.status),
							 nicmr_wc_syndrome_str(wc.syndrome));
				return api_error(rc == -ETIMEDOUT ? "nicmr_cq_poll"
								  : "nicmr_post_write",
						 rc);
			}
		}
		med.push_back(median(per));
	}
	progress("bench rdma", kBenchReps, kBenchReps);
	const double ns = median(med);
	std::fprintf(f(), "RESULT rdma write/4KiB ns=%.0f gbit_s=%.2f\n", ns,
		     double(kBenchBytes) * 8 / ns);
	return 0;
}

} // namespace nicmr::testmr
