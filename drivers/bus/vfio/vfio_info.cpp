/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Decoders of VFIO's capability chains. The kernel appends capabilities after the fixed part
 * of an info structure; each starts with { u16 id; u16 version; u32 next } and `next` is the
 * offset of the following one from the start of the structure (0 ends the chain). The decoders
 * trust nothing: every offset and count is checked against the buffer, and `next` must move
 * forward so that a corrupt chain cannot loop.
 */
#include <linux/vfio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "nicmr_log.h"
#include "vfio_bus.h"

namespace nicmr::bus::vfio {
namespace {

template <class T> T load(const uint8_t *p)
{
	T v;
	std::memcpy(&v, p, sizeof(v));
	return v;
}

/* Calls f(id, version, cap, cap_len) for every capability; cap_len bytes are readable. */
template <class F>
int walk_caps(const uint8_t *buf, size_t len, size_t fixed, uint32_t first, F &&f)
{
	size_t off = first;
	while (off != 0) {
		if (off < fixed || off > len || len - off < sizeof(vfio_info_cap_header)) {
			NICMR_LOG(error, "vfio",
				  "capability at offset %zu outside the %zu-byte info", off, len);
			return -EPROTO;
		}
		auto hdr = load<vfio_info_cap_header>(buf + off);
		int rc = f(hdr.id, hdr.version, buf + off, len - off);
		if (rc < 0)
			return rc;
		if (hdr.next != 0 && hdr.next <= off) {
			NICMR_LOG(error, "vfio", "capability chain goes backwards (%u after %zu)",
				  hdr.next, off);
			return -EPROTO;
		}
		off = hdr.next;
	}
	return 0;
}

} // namespace

int parse_iommu_info(const void *buf, size_t len, IommuInfo *out)
{
	auto *b = static_cast<const uint8_t *>(buf);
	if (len < sizeof(vfio_iommu_type1_info)) {
		NICMR_LOG(error, "vfio", "IOMMU info of %zu bytes is shorter than its header", len);
		return -EPROTO;
	}
	auto info = load<vfio_iommu_type1_info>(b);
	if (info.argsz < len)
		len = info.argsz; /* bytes past argsz were not written by the kernel */
	IommuInfo res;
	res.page_sizes = info.iova_pgsizes;
	if (info.flags & VFIO_IOMMU_INFO_CAPS) {
		int rc = walk_caps(
			b, len, sizeof(vfio_iommu_type1_info), info.cap_offset,
			[&](uint16_t id, uint16_t, const uint8_t *cap, size_t cap_len) {
				if (id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE) {
					using Cap = vfio_iommu_type1_info_cap_iova_range;
					if (cap_len < sizeof(Cap))
						return -EPROTO;
					auto n = load<uint32_t>(cap + offsetof(Cap, nr_iovas));
					if (n > (cap_len - sizeof(Cap)) / sizeof(vfio_iova_range))
						return -EPROTO;
					for (uint32_t i = 0; i < n; i++) {
						auto r = load<vfio_iova_range>(
							cap + sizeof(Cap) +
							i * sizeof(vfio_iova_range));
						if (r.start > r.end)
							return -EPROTO;
						res.ranges.push_back({r.start, r.end});
					}
				} else if (id == VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL) {
					using Cap = vfio_iommu_type1_info_dma_avail;
					if (cap_len < sizeof(Cap))
						return -EPROTO;
					res.has_dma_avail = true;
					res.dma_avail = load<uint32_t>(cap + offsetof(Cap, avail));
				}
				return 0;
			});
		if (rc < 0) {
			NICMR_LOG(error, "vfio", "malformed VFIO_IOMMU_GET_INFO capability chain");
			return rc;
		}
	}
	std::sort(
		res.ranges.begin(), res.ranges.end(),
		[](const mem::IovaRange &a, const mem::IovaRange &b) { return a.start < b.start; });
	for (size_t i = 1; i < res.ranges.size(); i++) {
		if (res.ranges[i].start <= res.ranges[i - 1].last) {
			NICMR_LOG(error, "vfio", "overlapping IOVA ranges in VFIO_IOMMU_GET_INFO");
			return -EPROTO;
		}
	}
	*out = std::move(res);
	return 0;
}

int parse_region_info(const void *buf, size_t len, std::vector<SparseArea> *sparse,
		      bool *has_sparse)
{
	auto *b = static_cast<const uint8_t *>(buf);
	if (len < sizeof(vfio_region_info))
		return -EPROTO;
	auto info = load<vfio_region_info>(b);
	if (info.argsz < len)
		len = info.argsz;
	std::vector<SparseArea> areas;
	bool found = false;
	if (info.flags & VFIO_REGION_INFO_FLAG_CAPS) {
		int rc = walk_caps(
			b, len, sizeof(vfio_region_info), info.cap_offset,
			[&](uint16_t id, uint16_t, const uint8_t *cap, size_t cap_len) {
				if (id != VFIO_REGION_INFO_CAP_SPARSE_MMAP)
					return 0;
				using Cap = vfio_region_info_cap_sparse_mmap;
				if (cap_len < sizeof(Cap))
					return -EPROTO;
				auto n = load<uint32_t>(cap + offsetof(Cap, nr_areas));
				if (n >
				    (cap_len - sizeof(Cap)) / sizeof(vfio_region_sparse_mmap_area))
					return -EPROTO;
				found = true;
				for (uint32_t i = 0; i < n; i++) {
					auto a = load<vfio_region_sparse_mmap_area>(
						cap + sizeof(Cap) +
						i * sizeof(vfio_region_sparse_mmap_area));
					if (a.offset > info.size || a.size > info.size - a.offset)
						return -EPROTO;
					if (a.size != 0)
						areas.push_back({a.offset, a.size});
				}
				return 0;
			});
		if (rc < 0) {
			NICMR_LOG(error, "vfio", "malformed region %u capability chain",
				  info.index);
			return rc;
		}
	}
	std::sort(areas.begin(), areas.end(),
		  [](const SparseArea &a, const SparseArea &b) { return a.offset < b.offset; });
	*sparse = std::move(areas);
	*has_sparse = found;
	return 0;
}

} // namespace nicmr::bus::vfio
