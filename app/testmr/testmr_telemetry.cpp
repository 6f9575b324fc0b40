/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_telemetry.h"

#include <rte_telemetry.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <iterator>
#include <span>
#include <string>

#include "testmr_cmd.h"
#include "testmr_engine.h"

namespace nicmr::testmr {

namespace {

/* Leaked on purpose (engine_lock()): DPDK's telemetry thread outlives main's objects. */
struct Published {
	std::mutex mu;
	const Engine *engine = nullptr; /* under mu */
};

Published &published()
{
	static auto *p = new Published;
	return *p;
}

/*
 * The engine's view, read under the lock; -ENODEV when no engine is open, -EINVAL when the
 * request carries a parameter (none of the endpoints takes one). A negative return makes DPDK
 * answer {"<endpoint>": null} (lib/telemetry/telemetry.c, perform_command).
 */
int read_view(const char *params, EngineView *v)
{
	if (params != nullptr && *params != '\0')
		return -EINVAL;
	Published &p = published();
	std::lock_guard<std::mutex> g(p.mu);
	if (p.engine == nullptr)
		return -ENODEV;
	p.engine->view(v);
	return 0;
}

void add_hex(rte_tel_data *d, const char *name, uint64_t v)
{
	char b[24];
	std::snprintf(b, sizeof(b), "0x%" PRIx64, v);
	rte_tel_data_add_dict_string(d, name, b);
}

/* A signed counter of nicmr_device_stats: -1 means "not known on this device". */
void add_signed(rte_tel_data *d, const char *name, int64_t v)
{
	if (v < 0)
		rte_tel_data_add_dict_int(d, name, -1);
	else
		rte_tel_data_add_dict_u64(d, name, static_cast<uint64_t>(v));
}

const char *atomic_mode_name(uint32_t mode)
{
	switch (mode) {
	case NICMR_ATOMIC_HOST:
		return "host";
	case NICMR_ATOMIC_BIG_ENDIAN:
		return "big_endian";
	case NICMR_ATOMIC_NONE:
		return "none";
	default:
		return "unknown";
	}
}

/* Every field of nicmr_device_stats, under its own name. */
void add_stats(rte_tel_data *d, const nicmr_device_stats &s)
{
	rte_tel_data_add_dict_u64(d, "mrs", s.mrs);
	rte_tel_data_add_dict_u64(d, "pools", s.pools);
	rte_tel_data_add_dict_u64(d, "pds", s.pds);
	rte_tel_data_add_dict_u64(d, "slow_mappings", s.slow_mappings);
	rte_tel_data_add_dict_u64(d, "pinned_pages", s.pinned_pages);
	rte_tel_data_add_dict_u64(d, "keys_free", s.keys_free);
	rte_tel_data_add_dict_u64(d, "keys_retiring", s.keys_retiring);
	add_signed(d, "dev_mkeys", s.dev_mkeys);
	add_signed(d, "iommu_mappings", s.iommu_mappings);
	rte_tel_data_add_dict_u64(d, "mws", s.mws);
	rte_tel_data_add_dict_u64(d, "cntrs", s.cntrs);
	rte_tel_data_add_dict_u64(d, "mkey_pool", s.mkey_pool);
}

int device_cb(const char *, const char *params, rte_tel_data *d)
{
	EngineView v;
	if (int rc = read_view(params, &v); rc != 0)
		return rc;
	if (v.query_rc != 0)
		return v.query_rc;
	const nicmr_device_attr &a = v.attr;
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_string(d, "spec", v.spec.c_str());
	rte_tel_data_add_dict_string(d, "name", a.name);
	add_hex(d, "device_id", a.device_id);
	char fw[32];
	std::snprintf(fw, sizeof(fw), "%u.%u.%u", a.fw_major, a.fw_minor, a.fw_subminor);
	rte_tel_data_add_dict_string(d, "firmware", fw);
	rte_tel_data_add_dict_u64(d, "mkey_count", a.mkey_count);
	rte_tel_data_add_dict_u64(d, "mkey_pool_max", a.mkey_pool_max);
	rte_tel_data_add_dict_u64(d, "max_pd", a.max_pd);
	rte_tel_data_add_dict_u64(d, "max_readers", a.max_readers);
	rte_tel_data_add_dict_u64(d, "requested_keys", a.requested_keys);
	rte_tel_data_add_dict_string(d, "atomic_mode", atomic_mode_name(a.atomic_mode));
	rte_tel_data_add_dict_u64(d, "extensions", a.extensions);
	add_hex(d, "ext_flags", a.ext_flags);
	/* The counters as /nicmr/stats gives them, when the device gave them. */
	if (v.stats_rc == 0) {
		rte_tel_data *s = rte_tel_data_alloc();
		if (s == nullptr)
			return -ENOMEM;
		rte_tel_data_start_dict(s);
		add_stats(s, v.stats);
		rte_tel_data_add_dict_container(d, "stats", s, 0);
	}
	return 0;
}

int stats_cb(const char *, const char *params, rte_tel_data *d)
{
	EngineView v;
	if (int rc = read_view(params, &v); rc != 0)
		return rc;
	if (v.stats_rc != 0)
		return v.stats_rc;
	rte_tel_data_start_dict(d);
	add_stats(d, v.stats);
	return 0;
}

/*
 * One dict per engine pool, under its number ("0", "1": DPDK 22.11 takes dict names of
 * letters, digits, '_' and '/' only, rte_telemetry.h), next to "count".
 */
int pools_cb(const char *, const char *params, rte_tel_data *d)
{
	EngineView v;
	if (int rc = read_view(params, &v); rc != 0)
		return rc;
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_u64(d, "count", v.pools.size());
	for (const auto &p : v.pools) {
		rte_tel_data *o = rte_tel_data_alloc();
		if (o == nullptr)
			return -ENOMEM;
		rte_tel_data_start_dict(o);
		add_hex(o, "addr", p.addr);
		rte_tel_data_add_dict_u64(o, "len", p.len);
		rte_tel_data_add_dict_u64(o, "page_size", p.page_size);
		rte_tel_data_add_dict_u64(o, "mrs", p.mrs);
		rte_tel_data_add_dict_u64(o, "mr_bytes", p.mr_bytes);
		const std::string name = std::to_string(p.id);
		rte_tel_data_add_dict_container(d, name.c_str(), o, 0);
	}
	return 0;
}

/* The size classes of /nicmr/mrs: an MR counts in the first class its length fits. */
struct SizeClass {
	const char *name;
	uint64_t max; /* bytes, inclusive */
};
constexpr SizeClass kSizeClasses[] = {
	{"up_to_4k", uint64_t{4} << 10}, {"up_to_64k", uint64_t{64} << 10},
	{"up_to_2m", uint64_t{2} << 20}, {"up_to_1g", uint64_t{1} << 30},
	{"over_1g", UINT64_MAX},
};

int mrs_cb(const char *, const char *params, rte_tel_data *d)
{
	EngineView v;
	if (int rc = read_view(params, &v); rc != 0)
		return rc;
	uint64_t by_size[std::size(kSizeClasses)] = {};
	const auto names = mr_access_names();
	uint64_t by_access[16] = {};
	uint64_t no_access = 0, reg = 0, regv = 0, sub = 0, bytes = 0;
	for (const auto &m : v.mrs) {
		size_t c = 0;
		while (m.len > kSizeClasses[c].max)
			c++;
		by_size[c]++;
		for (size_t i = 0; i < names.size() && i < std::size(by_access); i++)
			if (m.access & (uint64_t{1} << i))
				by_access[i]++;
		if (m.access == 0)
			no_access++;
		const std::string_view kind = m.kind;
		reg += kind == "reg";
		regv += kind == "regv";
		sub += kind == "sub";
		bytes += m.len;
	}
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_u64(d, "count", v.mrs.size());
	/* The device's own count (nicmr_device_get_stats): MRs of this device that testmr did
	 * not make would show here only. */
	if (v.stats_rc == 0)
		rte_tel_data_add_dict_u64(d, "device_mrs", v.stats.mrs);
	rte_tel_data_add_dict_u64(d, "bytes", bytes);
	rte_tel_data_add_dict_u64(d, "windows", v.windows);
	rte_tel_data *k = rte_tel_data_alloc();
	rte_tel_data *s = rte_tel_data_alloc();
	rte_tel_data *a = rte_tel_data_alloc();
	if (k == nullptr || s == nullptr || a == nullptr) {
		rte_tel_data_free(k);
		rte_tel_data_free(s);
		rte_tel_data_free(a);
		return -ENOMEM;
	}
	rte_tel_data_start_dict(k);
	rte_tel_data_add_dict_u64(k, "reg", reg);
	rte_tel_data_add_dict_u64(k, "regv", regv);
	rte_tel_data_add_dict_u64(k, "sub", sub);
	rte_tel_data_add_dict_container(d, "by_kind", k, 0);
	rte_tel_data_start_dict(s);
	for (size_t c = 0; c < std::size(kSizeClasses); c++)
		rte_tel_data_add_dict_u64(s, kSizeClasses[c].name, by_size[c]);
	rte_tel_data_add_dict_container(d, "by_size", s, 0);
	/* An MR counts under every right it grants; "none" counts those granting none. */
	rte_tel_data_start_dict(a);
	for (size_t i = 0; i < names.size() && i < std::size(by_access); i++)
		rte_tel_data_add_dict_u64(a, names[i], by_access[i]);
	rte_tel_data_add_dict_u64(a, "none", no_access);
	rte_tel_data_add_dict_container(d, "by_access", a, 0);
	return 0;
}

/*
 * Per refused key, under its key in hex ("0x00000d66": letters and digits, as DPDK wants dict
 * names): the rights the refused requests needed, how many, the last peer (the remote QP's
 * port and number until the wire carries addresses) and the posting QP; with "count" (keys
 * recorded) and "dropped" (refusals of keys beyond the record's NICMR_MAX_KEY_VIOLATIONS).
 */
int violations_cb(const char *, const char *params, rte_tel_data *d)
{
	EngineView v;
	if (int rc = read_view(params, &v); rc != 0)
		return rc;
	if (v.violations_rc != 0)
		return v.violations_rc;
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_u64(d, "count", v.violations.size());
	rte_tel_data_add_dict_u64(d, "dropped", v.violations_dropped);
	for (const auto &e : v.violations) {
		rte_tel_data *o = rte_tel_data_alloc();
		if (o == nullptr)
			return -ENOMEM;
		rte_tel_data_start_dict(o);
		rte_tel_data_add_dict_string(o, "access", format_mr_access(e.access).c_str());
		rte_tel_data_add_dict_u64(o, "count", e.count);
		rte_tel_data_add_dict_u64(o, "last_peer_port", e.peer_port);
		add_hex(o, "last_peer_qpn", e.peer_qpn);
		add_hex(o, "local_qpn", e.local_qpn);
		char name[16];
		std::snprintf(name, sizeof(name), "0x%08x", e.key);
		rte_tel_data_add_dict_container(d, name, o, 0);
	}
	return 0;
}

struct Endpoint {
	const char *cmd;
	telemetry_cb fn;
	const char *help;
};

/* Help texts stay under 64 characters: DPDK refuses a longer one (-EINVAL) in versions whose
 * MAX_HELP_LEN is 64 (lib/telemetry/telemetry.c, rte_telemetry_register_cmd). */
constexpr Endpoint kEndpoints[] = {
	{"/nicmr/device", device_cb, "testmr engine device: query and counters. No parameters"},
	{"/nicmr/pools", pools_cb, "testmr engine pools: address, length, page size, MRs"},
	{"/nicmr/mrs", mrs_cb, "testmr MRs: count, by kind, size class, access right"},
	{"/nicmr/stats", stats_cb, "nicmr_device_get_stats of testmr's engine device"},
	{"/nicmr/keys/violations", violations_cb, "remote keys refused: rights, count, last peer"},
};
static_assert([] {
	for (const auto &e : kEndpoints)
		if (std::char_traits<char>::length(e.help) >= 64)
			return false;
	return true;
}());

} // namespace

std::mutex &engine_lock()
{
	return published().mu;
}

void telemetry_publish(const Engine *engine)
{
	published().engine = engine;
}

int telemetry_register()
{
	for (const auto &e : kEndpoints)
		if (int rc = rte_telemetry_register_cmd(e.cmd, e.fn, e.help); rc != 0)
			return rc;
	return 0;
}

} // namespace nicmr::testmr
