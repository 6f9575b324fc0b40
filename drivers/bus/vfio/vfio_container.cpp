/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Container: one VFIO container, its type-1 IOMMU and the DMA mappings made through it.
 *
 * The IOMMU exists only once a group is in the container, so VFIO_SET_IOMMU and
 * VFIO_IOMMU_GET_INFO happen when the first group joins; the ranges and limit read then are
 * what dma_map checks before it asks the kernel, so that an out-of-range IOVA or an exhausted
 * limit fails with -ERANGE / -ENOSPC and a message rather than the kernel's bare -EINVAL.
 */
#include <fcntl.h>
#include <linux/vfio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "nicmr_log.h"
#include "vfio_bus.h"
#include "vfio_group.h"

namespace nicmr::bus::vfio {

Group::~Group()
{
	if (attached) {
		/* The kernel drops the IOMMU (and every mapping) with the last group. */
		ioctl(fd_, VFIO_GROUP_UNSET_CONTAINER);
		container_->group_detached(number_);
	}
	close(fd_);
}

Container::Container(int fd, const Paths &paths) : fd_(fd), paths_(paths)
{}

Container::~Container()
{
	/* Closing the fd releases the IOMMU and its mappings; nothing else holds them. */
	close(fd_);
}

int Container::create(std::shared_ptr<Container> *out, const Paths &paths)
{
	std::string path = paths.dev + "/vfio";
	int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		if (err == ENOENT)
			NICMR_LOG(error, "vfio",
				  "no %s: the VFIO driver is not loaded; load it with: modprobe "
				  "vfio-pci",
				  path.c_str());
		else if (err == EACCES || err == EPERM)
			NICMR_LOG(error, "vfio",
				  "permission denied opening %s: run as root or grant the user "
				  "access to /dev/vfio",
				  path.c_str());
		else
			NICMR_LOG(error, "vfio", "cannot open %s: %s", path.c_str(), strerror(err));
		return -err;
	}
	int ver = ioctl(fd, VFIO_GET_API_VERSION);
	if (ver != VFIO_API_VERSION) {
		NICMR_LOG(error, "vfio", "%s speaks VFIO API %d, nicmr needs %d", path.c_str(), ver,
			  VFIO_API_VERSION);
		close(fd);
		return -ENOTSUP;
	}
	if (ioctl(fd, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU) <= 0) {
		NICMR_LOG(error, "vfio",
			  "no type-1 v2 IOMMU in VFIO; load it with: modprobe vfio_iommu_type1");
		close(fd);
		return -ENOTSUP;
	}
	std::shared_ptr<Container> c(new Container(fd, paths));
	c->self_ = c;
	*out = std::move(c);
	return 0;
}

int Container::attach_group(int number, const std::string &pci_addr, std::shared_ptr<Group> *out)
{
	std::unique_lock lock(mu_);
	auto it = groups_.find(number);
	if (it != groups_.end()) {
		if (auto g = it->second.lock()) {
			*out = std::move(g);
			return 0;
		}
	}
	std::string path = paths_.dev + "/" + std::to_string(number);
	int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		if (err == EACCES || err == EPERM)
			NICMR_LOG(error, "vfio",
				  "permission denied opening %s (group of %s): run as root or give "
				  "the user that file",
				  path.c_str(), pci_addr.c_str());
		else if (err == EBUSY)
			NICMR_LOG(error, "vfio",
				  "%s (group of %s) is open in another process or container",
				  path.c_str(), pci_addr.c_str());
		else
			NICMR_LOG(error, "vfio", "cannot open %s (group of %s): %s", path.c_str(),
				  pci_addr.c_str(), strerror(err));
		return -err;
	}
	/* From here on the Group owns fd; dropping it (outside the lock) undoes everything. */
	auto g = std::make_shared<Group>(number, fd, self_.lock());
	vfio_group_status st{};
	st.argsz = sizeof(st);
	if (ioctl(fd, VFIO_GROUP_GET_STATUS, &st) < 0) {
		int err = errno;
		NICMR_LOG(error, "vfio", "VFIO_GROUP_GET_STATUS on %s: %s", path.c_str(),
			  strerror(err));
		lock.unlock();
		return -err;
	}
	if (!(st.flags & VFIO_GROUP_FLAGS_VIABLE)) {
		NICMR_LOG(error, "vfio",
			  "IOMMU group %d of %s is not viable: every device in it must be bound to "
			  "vfio-pci or to no driver (devtools/nicmr-devbind --status)",
			  number, pci_addr.c_str());
		lock.unlock();
		return -EPERM;
	}
	int cfd = fd_;
	if (ioctl(fd, VFIO_GROUP_SET_CONTAINER, &cfd) < 0) {
		int err = errno;
		NICMR_LOG(error, "vfio", "VFIO_GROUP_SET_CONTAINER for group %d: %s", number,
			  strerror(err));
		lock.unlock();
		return -err;
	}
	g->attached = true;
	if (!iommu_set_) {
		if (ioctl(fd_, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU) < 0) {
			int err = errno;
			NICMR_LOG(error, "vfio", "VFIO_SET_IOMMU(TYPE1v2): %s", strerror(err));
			lock.unlock();
			return -err;
		}
		/* The kernel says how big the info with its capabilities is in argsz. */
		std::vector<uint8_t> buf(sizeof(vfio_iommu_type1_info));
		for (int tries = 0; tries < 4; tries++) {
			vfio_iommu_type1_info hdr{};
			hdr.argsz = static_cast<uint32_t>(buf.size());
			std::memcpy(buf.data(), &hdr, sizeof(hdr));
			if (ioctl(fd_, VFIO_IOMMU_GET_INFO, buf.data()) < 0) {
				int err = errno;
				NICMR_LOG(error, "vfio", "VFIO_IOMMU_GET_INFO: %s", strerror(err));
				lock.unlock();
				return -err;
			}
			std::memcpy(&hdr, buf.data(), sizeof(hdr));
			if (hdr.argsz <= buf.size())
				break;
			buf.assign(hdr.argsz, 0);
		}
		IommuInfo info;
		int rc = parse_iommu_info(buf.data(), buf.size(), &info);
		if (rc < 0) {
			lock.unlock();
			return rc;
		}
		apply_iommu_defaults(&info);
		if (info.legacy_ranges)
			NICMR_LOG(
				warn, "vfio",
				"the kernel reports no IOVA ranges (no "
				"VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, a kernel before 5.4): using "
				"the legacy ranges [0x10000, 0xfedfffff] and [0xfef00000, 2^39 - "
				"1]");
		info_ = std::move(info);
		map_limit_ = info_.has_dma_avail ? info_.dma_avail : SIZE_MAX;
		iommu_set_ = true;
		for (auto &r : info_.ranges)
			NICMR_LOG(debug, "vfio", "IOVA range [0x%" PRIx64 ", 0x%" PRIx64 "]",
				  r.start, r.last);
	}
	groups_[number] = g;
	*out = std::move(g);
	return 0;
}

void Container::group_detached(int number)
{
	std::lock_guard lock(mu_);
	auto it = groups_.find(number);
	if (it != groups_.end() && it->second.expired())
		groups_.erase(it);
	bool any = false;
	for (auto &[n, w] : groups_)
		any = any || !w.expired();
	if (!any && iommu_set_) {
		if (!maps_.empty())
			NICMR_LOG(
				warn, "vfio",
				"last device left the container with %zu DMA mappings: the kernel "
				"dropped them",
				maps_.size());
		maps_.clear();
		iommu_set_ = false;
		info_ = IommuInfo();
		map_limit_ = SIZE_MAX;
	}
}

int Container::dma_map(void *va, uint64_t iova, size_t len)
{
	std::lock_guard lock(mu_);
	if (!iommu_set_) {
		NICMR_LOG(error, "vfio", "dma_map before any device was opened on the container");
		return -ENODEV;
	}
	uint64_t pg = info_.page_sizes & -info_.page_sizes;
	auto v = reinterpret_cast<uintptr_t>(va);
	if (len == 0 || v % pg || iova % pg || len % pg || iova + (len - 1) < iova) {
		NICMR_LOG(error, "vfio",
			  "dma_map(va %p, iova 0x%" PRIx64 ", len %zu): zero or not a multiple of "
			  "the IOMMU page (%" PRIu64 ")",
			  va, iova, len, pg);
		return -EINVAL;
	}
	uint64_t last = iova + (len - 1);
	bool in = false;
	for (auto &r : info_.ranges)
		in = in || (iova >= r.start && last <= r.last);
	if (!in) {
		NICMR_LOG(error, "vfio",
			  "dma_map: IOVA [0x%" PRIx64 ", 0x%" PRIx64 "] is outside the IOMMU's "
			  "valid ranges (%zu ranges, first [0x%" PRIx64 ", 0x%" PRIx64 "])",
			  iova, last, info_.ranges.size(), info_.ranges[0].start,
			  info_.ranges[0].last);
		return -ERANGE;
	}
	auto next = maps_.lower_bound(iova);
	if ((next != maps_.end() && next->first <= last) ||
	    (next != maps_.begin() && std::prev(next)->first + std::prev(next)->second > iova)) {
		NICMR_LOG(error, "vfio", "dma_map: IOVA 0x%" PRIx64 " +%zu overlaps a mapping",
			  iova, len);
		return -EEXIST;
	}
	if (maps_.size() >= map_limit_) {
		NICMR_LOG(error, "vfio",
			  "dma_map: the IOMMU's mapping limit (%zu) is reached; raise it with "
			  "vfio_iommu_type1 dma_entry_limit=N or map fewer, larger pools",
			  map_limit_);
		return -ENOSPC;
	}
	vfio_iommu_type1_dma_map m{};
	m.argsz = sizeof(m);
	m.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
	m.vaddr = v;
	m.iova = iova;
	m.size = len;
	if (ioctl(fd_, VFIO_IOMMU_MAP_DMA, &m) < 0) {
		int err = errno;
		if (err == ENOMEM)
			NICMR_LOG(error, "vfio",
				  "VFIO_IOMMU_MAP_DMA of %zu bytes: out of locked memory (raise "
				  "ulimit -l / RLIMIT_MEMLOCK)",
				  len);
		else
			NICMR_LOG(error, "vfio",
				  "VFIO_IOMMU_MAP_DMA iova 0x%" PRIx64 " len %zu: %s", iova, len,
				  strerror(err));
		return -err;
	}
	maps_.emplace(iova, len);
	return 0;
}

int Container::dma_unmap(uint64_t iova, size_t len)
{
	std::lock_guard lock(mu_);
	auto it = maps_.find(iova);
	if (len == 0 || it == maps_.end() || it->second != len) {
		NICMR_LOG(error, "vfio", "dma_unmap: no mapping at IOVA 0x%" PRIx64 " of %zu bytes",
			  iova, len);
		return -ENOENT;
	}
	vfio_iommu_type1_dma_unmap u{};
	u.argsz = sizeof(u);
	u.iova = iova;
	u.size = len;
	if (ioctl(fd_, VFIO_IOMMU_UNMAP_DMA, &u) < 0) {
		int err = errno;
		NICMR_LOG(error, "vfio", "VFIO_IOMMU_UNMAP_DMA iova 0x%" PRIx64 ": %s", iova,
			  strerror(err));
		return -err;
	}
	/* Whatever the kernel unmapped, nothing of the range is mapped now: forget it. */
	maps_.erase(it);
	return check_unmapped_size(iova, len, u.size);
}

std::vector<mem::IovaRange> legacy_iova_ranges()
{
	/* QEMU util/vfio-helpers.c: QEMU_VFIO_IOVA_MIN, QEMU_VFIO_IOVA_MAX (exclusive). */
	constexpr uint64_t kMin = 0x10000;
	constexpr uint64_t kLast = (uint64_t{1} << 39) - 1;
	/* The x86 MSI window (Linux intel/iommu.c IOAPIC_RANGE_*, amd/iommu.c MSI_RANGE_*). */
	constexpr uint64_t kMsiFirst = 0xfee00000;
	constexpr uint64_t kMsiLast = 0xfeefffff;
	return {{kMin, kMsiFirst - 1}, {kMsiLast + 1, kLast}};
}

void apply_iommu_defaults(IommuInfo *info)
{
	if (info->ranges.empty()) {
		info->ranges = legacy_iova_ranges();
		info->legacy_ranges = true;
	}
	if (info->page_sizes == 0)
		info->page_sizes = 4096;
}

int check_unmapped_size(uint64_t iova, uint64_t asked, uint64_t unmapped)
{
	if (unmapped == asked)
		return 0;
	NICMR_LOG(error, "vfio",
		  "VFIO_IOMMU_UNMAP_DMA at iova 0x%" PRIx64 " unmapped %" PRIu64
		  " bytes of the mapping's %" PRIu64 ": the kernel's mappings and the "
		  "container's disagree (another user of the container fd?)",
		  iova, unmapped, asked);
	return -EIO;
}

std::vector<mem::IovaRange> Container::iova_ranges() const
{
	std::lock_guard lock(mu_);
	return info_.ranges;
}

size_t Container::min_page_size() const
{
	std::lock_guard lock(mu_);
	return iommu_set_ ? size_t(info_.page_sizes & -info_.page_sizes) : 4096;
}

IommuInfo Container::iommu_info() const
{
	std::lock_guard lock(mu_);
	return info_;
}

size_t Container::mapping_count() const
{
	std::lock_guard lock(mu_);
	return maps_.size();
}

size_t Container::mappings_left() const
{
	std::lock_guard lock(mu_);
	return map_limit_ == SIZE_MAX ? SIZE_MAX : map_limit_ - maps_.size();
}

} // namespace nicmr::bus::vfio
