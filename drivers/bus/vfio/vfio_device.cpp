/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Device: a PCI function bound to vfio-pci. BAR 0 is mapped whole into the process so that
 * register access is one MMIO load or store (DPDK's rte_io.h accessors); a BAR that cannot be
 * mapped whole is refused at open, since a doorbell must never become a system call. Config
 * space goes through pread/pwrite on the device fd at the region's offset.
 */
#include <fcntl.h>
#include <linux/pci_regs.h>
#include <linux/vfio.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>

#include <rte_io.h>

#include "nicmr_log.h"
#include "vfio_bus.h"
#include "vfio_group.h"

namespace nicmr::bus::vfio {

int Device::open(const std::string &pci_addr, const std::shared_ptr<Container> &container,
		 std::unique_ptr<Device> *out)
{
	if (!container)
		return -EINVAL;
	std::unique_ptr<Device> d(new Device());
	int rc = d->init(pci_addr, container);
	if (rc < 0)
		return rc; /* ~Device releases whatever init took */
	*out = std::move(d);
	return 0;
}

int Device::open(const std::string &pci_addr, std::unique_ptr<Device> *out, const Paths &paths)
{
	std::shared_ptr<Container> c;
	int rc = Container::create(&c, paths);
	if (rc < 0)
		return rc;
	return open(pci_addr, c, out);
}

int Device::init(const std::string &pci_addr, const std::shared_ptr<Container> &container)
{
	int group = -1;
	int rc = check_device(container->paths(), pci_addr, &group);
	if (rc < 0)
		return rc;
	normalize_pci_addr(pci_addr, &addr_);
	name_ = "vfio:" + addr_;
	container_ = container;
	rc = container->attach_group(group, addr_, &group_);
	if (rc < 0)
		return rc;
	fd_ = ioctl(group_->fd(), VFIO_GROUP_GET_DEVICE_FD, addr_.c_str());
	if (fd_ < 0) {
		int err = errno;
		fd_ = -1;
		NICMR_LOG(error, "vfio", "%s: VFIO_GROUP_GET_DEVICE_FD: %s%s", name_.c_str(),
			  strerror(err), err == EBUSY ? " (the device is open elsewhere)" : "");
		return -err;
	}
	vfio_device_info info{};
	info.argsz = sizeof(info);
	if (ioctl(fd_, VFIO_DEVICE_GET_INFO, &info) < 0) {
		int err = errno;
		NICMR_LOG(error, "vfio", "%s: VFIO_DEVICE_GET_INFO: %s", name_.c_str(),
			  strerror(err));
		return -err;
	}
	if (!(info.flags & VFIO_DEVICE_FLAGS_PCI) ||
	    info.num_regions <= VFIO_PCI_CONFIG_REGION_INDEX) {
		NICMR_LOG(error, "vfio", "%s is not a vfio-pci device", name_.c_str());
		return -ENODEV;
	}
	can_reset_ = info.flags & VFIO_DEVICE_FLAGS_RESET;
	rc = read_regions();
	if (rc < 0)
		return rc;
	for (unsigned idx : {unsigned(VFIO_PCI_MSI_IRQ_INDEX), unsigned(VFIO_PCI_MSIX_IRQ_INDEX)}) {
		if (idx >= info.num_irqs)
			continue;
		vfio_irq_info ii{};
		ii.argsz = sizeof(ii);
		ii.index = idx;
		if (ioctl(fd_, VFIO_DEVICE_GET_IRQ_INFO, &ii) == 0)
			(idx == VFIO_PCI_MSI_IRQ_INDEX ? msi_count_ : msix_count_) = ii.count;
	}
	uint16_t ids[2];
	rc = config_read(PCI_VENDOR_ID, ids, sizeof(ids));
	if (rc < 0)
		return rc;
	id_ = {ids[0], ids[1]};
	rc = map_bar0();
	if (rc < 0)
		return rc;
	rc = start_function();
	if (rc < 0)
		return rc;
	NICMR_LOG(info, "vfio", "%s: %04x:%04x, group %d, BAR0 %zu bytes%s, %s, bus master on",
		  name_.c_str(), id_.vendor, id_.device, group, bar0_size_,
		  regions_[VFIO_PCI_BAR0_REGION_INDEX].has_sparse ? " (sparse areas)" : "",
		  reset_at_open_ ? "reset" : "not reset");
	return 0;
}

/*
 * Reset, then Bus Master Enable: DPDK's VFIO bus does both when it sets a device up
 * (drivers/bus/pci/linux/pci_vfio.c, pci_rte_vfio_setup_device), so the driver starts from
 * a function that holds nothing of a previous user (a crashed process leaves a ConnectX with
 * its command queue and pages pointing at IOVAs that mean nothing now). DPDK sets the bit
 * first and resets after; the kernel saves and restores config space around the reset
 * (pci_try_reset_function), so its order works, but a reset that clears the command register
 * must not undo ours: reset first here. The mlx5 driver sets the bit again itself
 * (mlx5::Device::open), as rdma-core's VFIO provider does, since a function may reach it
 * through a bus that did not.
 */
int Device::start_function()
{
	if (can_reset_) {
		if (ioctl(fd_, VFIO_DEVICE_RESET) < 0) {
			int err = errno;
			NICMR_LOG(error, "vfio", "%s: VFIO_DEVICE_RESET at open: %s", name_.c_str(),
				  strerror(err));
			return -err;
		}
		reset_at_open_ = true;
	} else {
		NICMR_LOG(warn, "vfio",
			  "%s offers no reset (no FLR, PM or bus reset: VFIO_DEVICE_FLAGS_RESET "
			  "clear): opened without one, whatever a previous user left in the "
			  "function stays",
			  name_.c_str());
	}
	int rc = set_bus_master(true);
	if (rc < 0) {
		NICMR_LOG(error, "vfio", "%s: cannot set Bus Master Enable: %s", name_.c_str(),
			  strerror(-rc));
		return rc;
	}
	bus_master_set_ = true;
	return 0;
}

int Device::read_regions()
{
	regions_.clear();
	for (unsigned idx = VFIO_PCI_BAR0_REGION_INDEX; idx <= VFIO_PCI_CONFIG_REGION_INDEX;
	     idx++) {
		std::vector<uint8_t> buf(sizeof(vfio_region_info));
		vfio_region_info ri{};
		for (int tries = 0; tries < 4; tries++) {
			ri = {};
			ri.argsz = static_cast<uint32_t>(buf.size());
			ri.index = idx;
			std::memcpy(buf.data(), &ri, sizeof(ri));
			if (ioctl(fd_, VFIO_DEVICE_GET_REGION_INFO, buf.data()) < 0) {
				int err = errno;
				NICMR_LOG(error, "vfio", "%s: region %u info: %s", name_.c_str(),
					  idx, strerror(err));
				return -err;
			}
			std::memcpy(&ri, buf.data(), sizeof(ri));
			if (ri.argsz <= buf.size())
				break;
			buf.assign(ri.argsz, 0);
		}
		Region r;
		r.index = idx;
		r.flags = ri.flags;
		r.size = ri.size;
		r.offset = ri.offset;
		int rc = parse_region_info(buf.data(), buf.size(), &r.sparse, &r.has_sparse);
		if (rc < 0)
			return rc;
		regions_.push_back(std::move(r));
	}
	return 0;
}

int check_bar0_mappable(const Region &r)
{
	if (r.size == 0 || !(r.flags & VFIO_REGION_INFO_FLAG_MMAP))
		return -ENOTSUP;
	if (!r.has_sparse)
		return 0;
	/* The areas, in offset order, must tile [0, size) with no hole. */
	uint64_t end = 0;
	for (const SparseArea &a : r.sparse) {
		if (a.offset != end)
			return -ENOTSUP;
		end = a.offset + a.size;
	}
	return end == r.size ? 0 : -ENOTSUP;
}

int Device::map_bar0()
{
	const Region &r = regions_[VFIO_PCI_BAR0_REGION_INDEX];
	int rc = check_bar0_mappable(r);
	if (rc < 0) {
		NICMR_LOG(
			error, "vfio",
			"%s: BAR 0 is %s: nicmr needs it mapped whole (doorbells are MMIO stores, "
			"never system calls)",
			name_.c_str(),
			r.size == 0 ? "absent"
			: !(r.flags & VFIO_REGION_INFO_FLAG_MMAP)
				? "not mmap-able"
				: "mmap-able only in part (a hole between its sparse areas)");
		return rc;
	}
	size_t size = r.size;
	int prot = PROT_READ | PROT_WRITE;
	if (!r.has_sparse) {
		void *p = mmap(nullptr, size, prot, MAP_SHARED, fd_, off_t(r.offset));
		if (p == MAP_FAILED) {
			int err = errno;
			NICMR_LOG(error, "vfio", "%s: mmap of BAR 0: %s", name_.c_str(),
				  strerror(err));
			return -err;
		}
		bar0_ = static_cast<uint8_t *>(p);
		bar0_size_ = size;
		return 0;
	}
	/* Reserve the whole BAR, then map each area at its offset inside the reservation. */
	void *base = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		return -errno;
	bar0_ = static_cast<uint8_t *>(base);
	bar0_size_ = size;
	for (auto &a : r.sparse) {
		void *p = mmap(bar0_ + a.offset, a.size, prot, MAP_SHARED | MAP_FIXED, fd_,
			       off_t(r.offset + a.offset));
		if (p == MAP_FAILED) {
			int err = errno;
			NICMR_LOG(error, "vfio", "%s: mmap of BAR 0 area +0x%" PRIx64 ": %s",
				  name_.c_str(), a.offset, strerror(err));
			return -err;
		}
	}
	return 0;
}

Device::~Device()
{
	disable_irqs();
	/* No DMA once the process lets the function go (DPDK's pci_vfio_unmap_resource_primary;
	 * the kernel's vfio_pci_core_disable clears it again when the fd closes). */
	if (bus_master_set_ && set_bus_master(false) < 0)
		NICMR_LOG(warn, "vfio", "%s: cannot clear Bus Master Enable at close",
			  name_.c_str());
	if (bar0_ != nullptr)
		munmap(bar0_, bar0_size_);
	if (fd_ >= 0)
		close(fd_);
	/* group_ and container_ go last: the group leaves the container when its last user does. */
	group_.reset();
}

int Device::iommu_group() const noexcept
{
	return group_ ? group_->number() : -1;
}

/* Hot path: one MMIO load; no lock, no allocation, no system call. */
uint32_t Device::bar0_read32(size_t offset) const
{
	return rte_read32(bar0_ + offset);
}

/* Hot path (doorbells): one MMIO store, after rte_write32's own I/O write barrier. */
void Device::bar0_write32(size_t offset, uint32_t value)
{
	rte_write32(value, bar0_ + offset);
}

/* Hot path (doorbells): one 64-bit MMIO store, so the device sees the word in one transaction. */
void Device::bar0_write64(size_t offset, uint64_t value)
{
	rte_write64(value, bar0_ + offset);
}

int Device::region(unsigned index, Region *out) const
{
	if (index >= regions_.size())
		return -EINVAL;
	*out = regions_[index];
	return 0;
}

int Device::config_read(uint32_t offset, void *buf, size_t len) const
{
	const Region &r = regions_[VFIO_PCI_CONFIG_REGION_INDEX];
	if (len == 0 || offset >= r.size || len > r.size - offset)
		return -EINVAL;
	ssize_t n = pread(fd_, buf, len, off_t(r.offset + offset));
	if (n < 0)
		return -errno;
	return size_t(n) == len ? 0 : -EIO;
}

int Device::config_write(uint32_t offset, const void *buf, size_t len)
{
	const Region &r = regions_[VFIO_PCI_CONFIG_REGION_INDEX];
	if (len == 0 || offset >= r.size || len > r.size - offset)
		return -EINVAL;
	ssize_t n = pwrite(fd_, buf, len, off_t(r.offset + offset));
	if (n < 0)
		return -errno;
	return size_t(n) == len ? 0 : -EIO;
}

int Device::reset()
{
	if (!can_reset_) {
		NICMR_LOG(warn, "vfio", "%s offers no reset (no FLR, PM or bus reset)",
			  name_.c_str());
		return -ENOTTY;
	}
	if (ioctl(fd_, VFIO_DEVICE_RESET) < 0) {
		int err = errno;
		NICMR_LOG(error, "vfio", "%s: VFIO_DEVICE_RESET: %s", name_.c_str(), strerror(err));
		return -err;
	}
	return 0;
}

int Device::enable_irqs(unsigned index, unsigned count, unsigned offered, const char *what)
{
	if (!irq_fds_.empty() ||
	    std::any_of(msix_attached_.begin(), msix_attached_.end(), [](int f) { return f >= 0; }))
		return -EBUSY; /* set_msix_eventfd owns the interrupts */
	if (offered == 0) {
		NICMR_LOG(error, "vfio", "%s has no %s", name_.c_str(), what);
		return -ENOTSUP;
	}
	if (count == 0 || count > offered)
		return -EINVAL;
	std::vector<int> fds;
	for (unsigned i = 0; i < count; i++) {
		int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (efd < 0) {
			int err = errno;
			for (int f : fds)
				close(f);
			return -err;
		}
		fds.push_back(efd);
	}
	size_t sz = sizeof(vfio_irq_set) + sizeof(int32_t) * count;
	std::vector<uint8_t> buf(sz);
	vfio_irq_set set{};
	set.argsz = static_cast<uint32_t>(sz);
	set.flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
	set.index = index;
	set.start = 0;
	set.count = count;
	std::memcpy(buf.data(), &set, sizeof(set));
	std::memcpy(buf.data() + sizeof(set), fds.data(), sizeof(int32_t) * count);
	if (ioctl(fd_, VFIO_DEVICE_SET_IRQS, buf.data()) < 0) {
		int err = errno;
		NICMR_LOG(error, "vfio", "%s: enabling %u %s vectors: %s", name_.c_str(), count,
			  what, strerror(err));
		for (int f : fds)
			close(f);
		return -err;
	}
	irq_fds_ = std::move(fds);
	irq_index_ = index;
	return 0;
}

int Device::enable_msix(unsigned count)
{
	return enable_irqs(VFIO_PCI_MSIX_IRQ_INDEX, count, msix_count_, "MSI-X");
}

int Device::enable_msi(unsigned count)
{
	return enable_irqs(VFIO_PCI_MSI_IRQ_INDEX, count, msi_count_, "MSI");
}

int Device::disable_irqs()
{
	if (irq_fds_.empty())
		return 0;
	vfio_irq_set set{};
	set.argsz = sizeof(set);
	set.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
	set.index = irq_index_;
	set.count = 0;
	int rc = 0;
	if (ioctl(fd_, VFIO_DEVICE_SET_IRQS, &set) < 0)
		rc = -errno;
	for (int f : irq_fds_)
		close(f);
	irq_fds_.clear();
	return rc;
}

int Device::irq_eventfd(unsigned i) const noexcept
{
	return i < irq_fds_.size() ? irq_fds_[i] : -1;
}

int Device::set_msix_eventfd(unsigned vector, int fd)
{
	if (msix_count_ == 0)
		return -ENOTSUP;
	if (vector >= msix_count_ || fd < -1)
		return -EINVAL;
	if (!irq_fds_.empty())
		return -EBUSY;
	if (msix_attached_.empty())
		msix_attached_.assign(msix_count_, -1);
	const bool last = fd < 0 && std::count_if(msix_attached_.begin(), msix_attached_.end(),
						  [](int f) { return f >= 0; }) ==
					    (msix_attached_[vector] >= 0 ? 1 : 0);
	if (last) {
		/* Nothing attached any more: MSI-X off (VFIO_IRQ_SET_DATA_NONE, count 0). */
		vfio_irq_set set{};
		set.argsz = sizeof(set);
		set.flags = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
		set.index = VFIO_PCI_MSIX_IRQ_INDEX;
		set.count = 0;
		if (ioctl(fd_, VFIO_DEVICE_SET_IRQS, &set) < 0) {
			int err = errno;
			NICMR_LOG(error, "vfio", "%s: disabling MSI-X: %s", name_.c_str(),
				  strerror(err));
			return -err;
		}
		msix_attached_[vector] = -1;
		return 0;
	}
	uint8_t buf[sizeof(vfio_irq_set) + sizeof(int32_t)] = {};
	vfio_irq_set set{};
	set.argsz = sizeof(buf);
	set.flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
	set.index = VFIO_PCI_MSIX_IRQ_INDEX;
	set.start = vector;
	set.count = 1;
	const int32_t efd = fd;
	std::memcpy(buf, &set, sizeof(set));
	std::memcpy(buf + sizeof(set), &efd, sizeof(efd));
	if (ioctl(fd_, VFIO_DEVICE_SET_IRQS, buf) < 0) {
		int err = errno;
		NICMR_LOG(error, "vfio", "%s: MSI-X vector %u %s eventfd %d: %s", name_.c_str(),
			  vector, fd < 0 ? "detach" : "attach", fd, strerror(err));
		return -err;
	}
	msix_attached_[vector] = fd;
	return 0;
}

} // namespace nicmr::bus::vfio
