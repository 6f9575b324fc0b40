/* SPDX-License-Identifier: BSD-3-Clause */
#include "mem_describe.h"

#include <cinttypes>
#include <cstdio>

namespace nicmr::mem {

const char *backend_name(PoolBackend backend)
{
	switch (backend) {
	case PoolBackend::memfd:
		return "memfd";
	case PoolBackend::hugetlbfs:
		return "hugetlbfs";
	case PoolBackend::external:
		return "external";
	}
	return "?";
}

std::string format_size(size_t bytes)
{
	static constexpr struct {
		size_t unit;
		const char *name;
	} units[] = {{size_t{1} << 40, "TiB"},
		     {size_t{1} << 30, "GiB"},
		     {size_t{1} << 20, "MiB"},
		     {size_t{1} << 10, "KiB"}};
	char buf[48];
	for (const auto &u : units) {
		if (bytes >= u.unit && bytes % u.unit == 0) {
			std::snprintf(buf, sizeof(buf), "%zu %s", bytes / u.unit, u.name);
			return buf;
		}
	}
	std::snprintf(buf, sizeof(buf), "%zu B", bytes);
	return buf;
}

std::string describe(const Pool &pool)
{
	char node[16];
	if (pool.numa_node() < 0)
		std::snprintf(node, sizeof(node), "any");
	else
		std::snprintf(node, sizeof(node), "%d", pool.numa_node());
	char buf[256];
	std::snprintf(buf, sizeof(buf),
		      "pool \"%s\": %s = %zu x %s pages, backend %s (fd %d), NUMA node %s",
		      pool.name().c_str(), format_size(pool.size()).c_str(), pool.page_count(),
		      format_size(pool.page_size()).c_str(), backend_name(pool.backend()),
		      pool.fd(), node);
	return buf;
}

std::string describe(const PoolEntry &entry)
{
	std::string out =
		entry.pool != nullptr ? describe(*entry.pool) : std::string("pool (gone)");
	char buf[256];
	std::snprintf(buf, sizeof(buf),
		      "\n  VA   [0x%" PRIxPTR ", 0x%" PRIxPTR ")\n  IOVA [0x%" PRIx64 ", 0x%" PRIx64
		      ") aligned %s (iova %% align == va %% align)",
		      entry.va, entry.va + entry.len, entry.iova, entry.iova + entry.len,
		      format_size(entry.iova_align).c_str());
	out += buf;
	return out;
}

} // namespace nicmr::mem
