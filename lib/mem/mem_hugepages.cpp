/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The system's hugepages, as the kernel shows them in sysfs
 * (Documentation/admin-guide/mm/hugetlbpage.rst in Linux):
 *
 *   /sys/kernel/mm/hugepages/hugepages-<kB>kB/{nr,free}_hugepages          one per size offered
 *   /sys/devices/system/node/node<N>/hugepages/hugepages-<kB>kB/...       the same per node
 *
 * and the words Pool::create logs when pages are missing or cannot be locked: what failed, the
 * numbers, and the command that fixes it. Slow path only.
 */
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sys/resource.h>
#include <sys/stat.h>

#include "mem_describe.h"
#include "mem_pool.h"

namespace nicmr::mem {
namespace {

size_t read_count(const char *path)
{
	FILE *f = std::fopen(path, "re");
	if (f == nullptr)
		return 0;
	unsigned long long v = 0;
	if (std::fscanf(f, "%llu", &v) != 1)
		v = 0;
	std::fclose(f);
	return static_cast<size_t>(v);
}

bool huge_size(size_t page_size)
{
	return page_size == kPage2M || page_size == kPage1G;
}

std::string size_dir(size_t page_size, int node)
{
	char path[160];
	if (node >= 0)
		std::snprintf(path, sizeof(path),
			      "/sys/devices/system/node/node%d/hugepages/hugepages-%zukB", node,
			      page_size >> 10);
	else
		std::snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%zukB",
			      page_size >> 10);
	return path;
}

size_t read_size_file(size_t page_size, int node, const char *file)
{
	if (!huge_size(page_size) || node < -1)
		return 0;
	return read_count((size_dir(page_size, node) + "/" + file).c_str());
}

std::string limit_text(uint64_t v)
{
	return v == static_cast<uint64_t>(RLIM_INFINITY) ? std::string("unlimited")
							 : format_size(static_cast<size_t>(v));
}

} // namespace

size_t hugepages_free(size_t page_size)
{
	return read_size_file(page_size, -1, "free_hugepages");
}

size_t hugepages_free_on_node(size_t page_size, int node)
{
	return node < 0 ? 0 : read_size_file(page_size, node, "free_hugepages");
}

size_t hugepages_total(size_t page_size, int node)
{
	return read_size_file(page_size, node, "nr_hugepages");
}

bool hugepages_offered(size_t page_size)
{
	struct stat st;
	return huge_size(page_size) && stat(size_dir(page_size, -1).c_str(), &st) == 0 &&
	       S_ISDIR(st.st_mode);
}

std::string hugepages_nr_path(size_t page_size, int node)
{
	return size_dir(page_size, node < 0 ? -1 : node) + "/nr_hugepages";
}

size_t hugepages_reservation_target(size_t total, size_t free_pages, size_t wanted)
{
	return free_pages >= wanted ? total : total + (wanted - free_pages);
}

std::string describe_hugepage_shortage(const HugepageShortage &s)
{
	const std::string size = format_size(s.page_size);
	const std::string where = s.numa_node >= 0 ? " on node " + std::to_string(s.numa_node) : "";
	std::string out =
		"wanted " + std::to_string(s.wanted) + " free " + size + " hugepages" + where;
	if (!s.offered) {
		out += ", but this kernel offers no " + size + " hugepages (no " +
		       size_dir(s.page_size, -1) + ")";
		out += s.page_size == kPage1G ? ". Use 2 MiB pages" : ". Use 4 KiB pages";
		return out;
	}
	const size_t target = hugepages_reservation_target(s.total, s.free_pages, s.wanted);
	out += ", " + std::to_string(s.free_pages) + " free of " + std::to_string(s.total) +
	       " reserved. Reserve " + std::to_string(target - s.total) + " more, as root: echo " +
	       std::to_string(target) + " > " + hugepages_nr_path(s.page_size, s.numa_node);
	if (s.page_size == kPage1G)
		out += " (or use 2 MiB pages)";
	return out;
}

std::string describe_mlock_failure(size_t bytes, int err, uint64_t limit_cur, uint64_t limit_max,
				   long long locked_already)
{
	std::string out = "mlock of " + format_size(bytes) + " failed (" + std::strerror(err) +
			  "): RLIMIT_MEMLOCK is " + limit_text(limit_cur) + " (hard limit " +
			  limit_text(limit_max) + ")";
	if (locked_already >= 0)
		out += ", " + format_size(static_cast<size_t>(locked_already)) +
		       " locked already by this process";
	out += ". Raise it with `ulimit -l` (KiB, or unlimited) in the shell that starts the "
	       "process, or a memlock line in /etc/security/limits.conf, or give the process "
	       "CAP_IPC_LOCK";
	return out;
}

} // namespace nicmr::mem
