/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_engine.h"

#include <sys/uio.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "nicmr/nicmr.h"

namespace nicmr::testmr {

/* testmr spells the native API's access bits by name (testmr_cmd.h): the same values. */
static_assert(mr_send == NICMR_ACCESS_SEND && mr_recv == NICMR_ACCESS_RECV &&
	      mr_read == NICMR_ACCESS_READ && mr_write == NICMR_ACCESS_WRITE &&
	      mr_remote_read == NICMR_ACCESS_REMOTE_READ &&
	      mr_remote_write == NICMR_ACCESS_REMOTE_WRITE &&
	      mr_local_write == NICMR_ACCESS_LOCAL_WRITE &&
	      mr_remote_atomic == NICMR_ACCESS_REMOTE_ATOMIC && mr_mw_bind == NICMR_ACCESS_MW_BIND);
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
};

struct WindowRec {
	nicmr_mw *mw = nullptr;
	uint32_t mr_key = 0;
	uint32_t rkey = 0;
	uint64_t addr = 0;
	size_t len = 0;
	uint64_t access = 0;
};

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
 * vectored MR has no single pool (nicmr_mr_in_pool gives 0 for it even when every segment is
 * in a pool): "segmented".
 */
const char *path_name(const MrRec &m)
{
	if (m.segments > 1 || std::strcmp(m.kind, "regv") == 0)
		return "segmented";
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
	/* The engine pool bytes [offset, offset + len) are in, or an error printed. */
	int pool_bytes(uint64_t id, uint64_t offset, uint64_t len, char **addr);
};

Engine::Engine(Reporter &out, const char *spec) : s_(std::make_unique<State>(out, spec))
{}

int Engine::open(const char *spec, Reporter &out, std::unique_ptr<Engine> *engine)
{
	std::unique_ptr<Engine> e(new Engine(out, spec));
	if (int rc = nicmr_device_open(spec, &e->s_->dev); rc != 0)
		return e->s_->api_error("nicmr_device_open", rc);
	if (int rc = nicmr_pd_alloc(e->s_->dev, &e->s_->pd); rc != 0)
		return e->s_->api_error("nicmr_pd_alloc", rc);
	std::fprintf(out.out(), "registration engine: device %s, PD %u (native API)\n", spec,
		     nicmr_pd_num(e->s_->pd));
	*engine = std::move(e);
	return 0;
}

Engine::~Engine()
{
	State &s = *s_;
	/* Windows keep their MRs, sub-MRs their bases, MRs their pools: in that order. */
	for (auto &[id, w] : s.windows) {
		nicmr_mw_invalidate(w.mw);
		nicmr_mw_free(w.mw);
	}
	for (auto &[key, m] : s.mrs)
		if (m.base != 0)
			nicmr_mr_dereg(m.mr);
	for (auto &[key, m] : s.mrs)
		if (m.base == 0)
			nicmr_mr_dereg(m.mr);
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
	return o.str();
}

int Engine::State::reg(const Command &c)
{
	char *addr = nullptr;
	if (int rc = pool_bytes(c.id, c.offset, c.len, &addr); rc != 0)
		return rc;
	MrRec m;
	if (int rc = nicmr_mr_reg(pd, addr, c.len, c.mr_access, 0, 0, &m.mr); rc != 0)
		return api_error("nicmr_mr_reg", rc);
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

} // namespace nicmr::testmr
