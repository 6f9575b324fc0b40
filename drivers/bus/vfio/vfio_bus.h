/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The VFIO bus: a PCI function bound to vfio-pci, driven from user space.
 *
 *   Container (/dev/vfio/vfio) ── one IOVA space, one type-1 IOMMU; a mem::DmaMapper
 *      ├── Group /dev/vfio/7  ── shared by the Devices of that IOMMU group in this container
 *      │     └── Device 0000:03:00.0 ── BARs mmap'd, config space, MSI/MSI-X eventfds
 *      └── Group /dev/vfio/9
 *            └── Device 0000:04:00.0
 *
 * A Container is an object, not a process-wide global: devices that must reach each other's
 * memory (or share pools) are opened on one Container; a device opened alone gets its own.
 * The IOMMU type (TYPE1v2) is set when the first group joins, and the IOVA ranges and mapping
 * limit are read then (VFIO_IOMMU_GET_INFO); a kernel that reports no IOVA ranges (before
 * Linux 5.4) gets legacy_iova_ranges(). When the last group leaves, the kernel drops every
 * mapping: keep the devices open for as long as pools are mapped.
 *
 * Every call returns 0 or a negative errno and logs, at error level, what to do about it:
 *   -ENOENT   /dev/vfio/vfio is missing: the VFIO driver is not loaded (modprobe vfio-pci)
 *   -EACCES   permission denied on /dev/vfio/vfio or /dev/vfio/<group> (run as root, or give
 *             the user the group file and a memlock limit for the pools)
 *   -ENOTSUP  the kernel's VFIO API version is not ours, or no TYPE1v2 IOMMU
 *             (modprobe vfio_iommu_type1)
 *   -ENODEV   no PCI device at that address
 *   -ENXIO    the device has no IOMMU group: the IOMMU is off (boot with intel_iommu=on or
 *             amd_iommu=on)
 *   -EBUSY    the device is not bound to vfio-pci (devtools/nicmr-devbind --bind vfio-pci
 *             <addr>), or its group is held by another process or container
 *   -EPERM    the group is not viable: another device in it is bound to a kernel driver (the
 *             message names it)
 *   -ERANGE   a DMA mapping outside the IOVA ranges the IOMMU reports
 *   -ENOSPC   the IOMMU's mapping limit is reached (vfio_iommu_type1 dma_entry_limit)
 *   -EEXIST   a DMA mapping that overlaps an existing one
 *   -EINVAL   misaligned or zero-length mapping, offset out of range
 *   -EPROTO   the kernel returned a malformed capability chain
 *   -EIO      VFIO_IOMMU_UNMAP_DMA unmapped another size than the mapping's (the kernel's
 *             mappings and the container's disagree; the mapping is gone either way)
 *
 * Threads: Container's calls are thread-safe (a mutex). A Device's BAR accessors may be called
 * from any thread with no lock; its other calls are for one thread at a time.
 */
#ifndef NICMR_VFIO_BUS_H
#define NICMR_VFIO_BUS_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bus_pci.h"
#include "mem_dma.h"

namespace nicmr::bus::vfio {

/* Where VFIO's files are; tests point them at a temporary tree. */
struct Paths {
	std::string dev = "/dev/vfio";
	std::string sysfs = "/sys";
};

/* What VFIO_IOMMU_GET_INFO reports. */
struct IommuInfo {
	uint64_t page_sizes = 0;	    /* bitmap of the IOMMU's page sizes */
	std::vector<mem::IovaRange> ranges; /* valid IOVA ranges; empty: the cap was absent */
	bool has_dma_avail = false;	    /* VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL was present */
	uint32_t dma_avail = 0;		    /* mappings still allowed when the info was read */
	bool legacy_ranges = false; /* Container: ranges are legacy_iova_ranges(), not reported */
};

/*
 * The IOVA ranges a container uses when the kernel reports none (no
 * VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, kernels before 5.4):
 *   [0x10000, 0xfedfffff] and [0xfef00000, 2^39 - 1].
 * The bounds are QEMU's for the same case (util/vfio-helpers.c, QEMU_VFIO_IOVA_MIN 0x10000
 * and QEMU_VFIO_IOVA_MAX 1 << 39, a safe bet for the IOMMU's address width); the hole is the x86
 * interrupt window, which the IOMMU drivers reserve for MSIs (Linux
 * drivers/iommu/intel/iommu.c IOAPIC_RANGE_START/END and drivers/iommu/amd/iommu.c
 * MSI_RANGE_START/END, 0xfee00000-0xfeefffff): a device write there is an interrupt, not
 * memory. Sorted, page aligned.
 */
std::vector<mem::IovaRange> legacy_iova_ranges();

/*
 * Fills in what a container needs from `info` as parse_iommu_info decoded it: the legacy
 * ranges (and legacy_ranges) when the kernel reported none, a 4 KiB page when it reported no
 * page size.
 */
void apply_iommu_defaults(IommuInfo *info);

/*
 * The check of VFIO_IOMMU_UNMAP_DMA's answer: the kernel writes back in `size` how many bytes
 * it unmapped, which must be the mapping's length (a type-1 IOMMU unmaps every mapping inside
 * the range and refuses to split one, so anything else means its mappings and ours
 * disagree). 0, or -EIO, logged with both sizes.
 */
int check_unmapped_size(uint64_t iova, uint64_t asked, uint64_t unmapped);

/*
 * Decodes a struct vfio_iommu_type1_info and its capability chain (IOVA ranges, DMA_AVAIL;
 * other capabilities are skipped) from buf[0, len). Ranges come back sorted.
 * Errors: -EPROTO when an offset, a size or the chain itself points outside the buffer, loops,
 * or ranges overlap or are inverted.
 */
int parse_iommu_info(const void *buf, size_t len, IommuInfo *out);

/* An mmap-able area of a region (VFIO_REGION_INFO_CAP_SPARSE_MMAP), offsets into the region. */
struct SparseArea {
	uint64_t offset;
	uint64_t size;
};

/*
 * Decodes a struct vfio_region_info and its capability chain. *sparse gets the sparse-mmap
 * areas and *has_sparse whether the capability was there at all. -EPROTO on a malformed chain.
 */
int parse_region_info(const void *buf, size_t len, std::vector<SparseArea> *sparse,
		      bool *has_sparse);

/*
 * The sysfs side of opening a device: checks, in this order, that the PCI device exists
 * (-ENODEV), has an IOMMU group (-ENXIO), is bound to vfio-pci (-EBUSY) and that its group is
 * viable (-EPERM: a device of the group is bound to a driver other than vfio-pci, pci-stub or
 * pcieport). On success *group is the IOMMU group number. Each error is logged with its fix.
 */
int check_device(const Paths &paths, const std::string &pci_addr, int *group);

/* "03:00.0" -> "0000:03:00.0"; -EINVAL when it is no PCI address. */
int normalize_pci_addr(const std::string &in, std::string *out);

class Group;

class Container final : public mem::DmaMapper {
public:
	/*
	 * Opens <paths.dev>/vfio and checks the API version and the TYPE1v2 extension.
	 * Errors: -ENOENT, -EACCES, -ENOTSUP (see the top of this file), other open(2) errors.
	 */
	static int create(std::shared_ptr<Container> *out, const Paths &paths = Paths());
	~Container() override;
	Container(const Container &) = delete;
	Container &operator=(const Container &) = delete;

	/*
	 * VFIO_IOMMU_MAP_DMA, readable and writable by the device.
	 * Errors: -ENODEV (no device opened on this container yet: there is no IOMMU), -EINVAL
	 * (len 0, va/iova/len not multiples of min_page_size()), -ERANGE, -EEXIST, -ENOSPC, what
	 * the kernel reports (-ENOMEM: memlock limit, -EFAULT: va not mapped).
	 */
	int dma_map(void *va, uint64_t iova, size_t len) override;
	/* VFIO_IOMMU_UNMAP_DMA of a mapping made with the same iova and len; else -ENOENT.
	 * -EIO when the kernel unmapped another size (check_unmapped_size); the container
	 * forgets the mapping then too. */
	int dma_unmap(uint64_t iova, size_t len) override;
	/* The valid IOVA ranges (empty before the first device is opened). */
	std::vector<mem::IovaRange> iova_ranges() const override;
	/* Smallest IOMMU page size (4096 before the first device is opened). */
	size_t min_page_size() const override;

	IommuInfo iommu_info() const;
	/* Mappings this container holds now. */
	size_t mapping_count() const;
	/* Mappings still allowed (the limit minus mapping_count()); SIZE_MAX when not reported. */
	size_t mappings_left() const;
	const Paths &paths() const noexcept { return paths_; }

private:
	friend class Device;
	friend class Group;
	Container(int fd, const Paths &paths);
	/* Joins IOMMU group `number` (shared with the container's other devices of that group). */
	int attach_group(int number, const std::string &pci_addr, std::shared_ptr<Group> *out);
	void group_detached(int number);

	mutable std::mutex mu_; /* guards everything below; never held across a Group's release */
	int fd_ = -1;
	Paths paths_;
	bool iommu_set_ = false;
	IommuInfo info_;
	size_t map_limit_ = SIZE_MAX;
	std::map<uint64_t, size_t> maps_; /* iova -> len */
	std::map<int, std::weak_ptr<Group>> groups_;
	std::weak_ptr<Container> self_;
};

/* A region of the device (BAR 0-5, config space) as VFIO_DEVICE_GET_REGION_INFO reports it. */
struct Region {
	uint32_t index = 0;
	uint32_t flags = 0;  /* VFIO_REGION_INFO_FLAG_{READ,WRITE,MMAP,CAPS} */
	uint64_t size = 0;   /* 0: the BAR is not implemented */
	uint64_t offset = 0; /* offset of the region in the device fd */
	bool has_sparse = false;
	std::vector<SparseArea> sparse; /* the only mmap-able parts when has_sparse */
};

/*
 * Whether BAR 0, as r describes it, can be mapped whole into the process, so that every
 * register access (doorbells on hot paths) is one load or store through the mapping and never
 * a system call: 0, or -ENOTSUP when the BAR is absent (size 0), not mmap-able (no
 * VFIO_REGION_INFO_FLAG_MMAP) or its sparse-mmap areas (offset order, as parse_region_info
 * gives them) leave a hole. Device::open refuses such a device with that code.
 */
int check_bar0_mappable(const Region &r);

class Device final : public PciFunction {
public:
	/*
	 * Opens a device bound to vfio-pci on `container` (shared IOVA space). Checks sysfs first
	 * (check_device), joins the group, gets the device fd, reads its regions and ID, mmaps BAR
	 * 0 (every sparse area of it when the region has them), resets the function when it
	 * offers a reset (VFIO_DEVICE_FLAGS_RESET; a warning says so when it does not) and sets
	 * Bus Master Enable, as DPDK's VFIO bus does (pci_rte_vfio_setup_device). Errors: those
	 * of check_device and Container, -EBUSY (group or device already open elsewhere),
	 * -ENOTSUP (BAR 0 absent, not mmap-able or with a hole between its sparse areas:
	 * check_bar0_mappable), what the VFIO ioctls report (VFIO_DEVICE_RESET included), those
	 * of config_write for the command register. Nothing is left behind on failure.
	 * The destructor clears Bus Master Enable before it closes the device, as DPDK's
	 * pci_vfio_unmap_resource_primary does.
	 */
	static int open(const std::string &pci_addr, const std::shared_ptr<Container> &container,
			std::unique_ptr<Device> *out);
	/* The same on a container of its own. */
	static int open(const std::string &pci_addr, std::unique_ptr<Device> *out,
			const Paths &paths = Paths());
	~Device() override;
	Device(const Device &) = delete;
	Device &operator=(const Device &) = delete;

	/* "vfio:0000:03:00.0" */
	const std::string &name() const override { return name_; }
	PciId id() const override { return id_; }
	size_t bar0_size() const override { return bar0_size_; }
	/*
	 * Hot path: DPDK's rte_read32/rte_write32/rte_write64 (rte_io.h) on the BAR 0 mapping,
	 * which covers the whole BAR (open refuses any other); no lock, no allocation, no system
	 * call. The caller orders its DMA-memory stores before a doorbell (rte_wmb).
	 */
	uint32_t bar0_read32(size_t offset) const override;
	void bar0_write32(size_t offset, uint32_t value) override;
	void bar0_write64(size_t offset, uint64_t value) override;
	/* The container's IOMMU. */
	mem::DmaMapper &dma() override { return *container_; }

	const std::string &address() const noexcept { return addr_; }
	int iommu_group() const noexcept;
	Container &container() noexcept { return *container_; }
	const std::shared_ptr<Container> &shared_container() const noexcept { return container_; }

	/* Region `index` (VFIO_PCI_BAR0_REGION_INDEX .. VFIO_PCI_CONFIG_REGION_INDEX); -EINVAL. */
	int region(unsigned index, Region *out) const;
	/* Config space access (pread/pwrite on the config region); -EINVAL out of range, -EIO on
	 * a short transfer. set_bus_master and bus_master come from bus::PciFunction. */
	int config_read(uint32_t offset, void *buf, size_t len) const override;
	int config_write(uint32_t offset, const void *buf, size_t len) override;
	/* VFIO_DEVICE_RESET; -ENOTTY when the device offers no reset (can_reset() false). */
	bool can_reset() const noexcept { return can_reset_; }
	int reset();
	/* Whether open reset the function (VFIO_DEVICE_RESET succeeded). */
	bool was_reset_at_open() const noexcept { return reset_at_open_; }

	/* Vectors the device offers for VFIO_PCI_MSI_IRQ_INDEX / VFIO_PCI_MSIX_IRQ_INDEX. */
	unsigned msi_count() const noexcept { return msi_count_; }
	unsigned msix_count() const noexcept { return msix_count_; }
	/*
	 * Enables `count` MSI-X (or MSI) vectors, each signalling its own eventfd (nonblocking,
	 * owned by the Device, closed by disable_irqs or the destructor). -EINVAL (count 0 or more
	 * than offered), -ENOTSUP (the device has none), -EBUSY (already enabled), ioctl errors.
	 */
	int enable_msix(unsigned count);
	int enable_msi(unsigned count);
	int disable_irqs();
	/* Vector i's eventfd (read 8 bytes to consume), or -1. */
	int irq_eventfd(unsigned i) const noexcept;
	/*
	 * bus::PciFunction's interrupt interface: VFIO_DEVICE_SET_IRQS on VFIO_PCI_MSIX_IRQ_INDEX
	 * for the one vector (start = vector, count = 1) with VFIO_IRQ_SET_DATA_EVENTFD |
	 * VFIO_IRQ_SET_ACTION_TRIGGER and the caller's fd (-1 detaches it, as the kernel's
	 * vfio_msi_set_vector_signal reads a negative fd). The first attach enables MSI-X with
	 * vectors 0 .. vector; when the last attached vector is detached MSI-X is disabled
	 * (VFIO_IRQ_SET_DATA_NONE, count 0). A kernel without dynamic MSI-X allocation (before
	 * Linux 6.5, VFIO_IRQ_INFO_NORESIZE set) refuses a vector beyond those enabled first with
	 * -EINVAL: attach the highest vector first. Errors: -EINVAL (vector >= msix_count(), fd
	 * below -1), -ENOTSUP (no MSI-X), -EBUSY (enable_msix/enable_msi own the interrupts),
	 * the ioctl's. The caller owns fd.
	 */
	int set_msix_eventfd(unsigned vector, int fd) override;

private:
	Device() = default;
	int init(const std::string &pci_addr, const std::shared_ptr<Container> &container);
	int read_regions();
	int map_bar0();
	int start_function();
	int enable_irqs(unsigned index, unsigned count, unsigned offered, const char *what);

	std::string addr_;
	std::string name_;
	std::shared_ptr<Container> container_;
	std::shared_ptr<Group> group_;
	int fd_ = -1;
	PciId id_{};
	bool can_reset_ = false;
	bool reset_at_open_ = false;
	bool bus_master_set_ = false; /* open set BME: the destructor clears it */
	unsigned msi_count_ = 0;
	unsigned msix_count_ = 0;
	std::vector<Region> regions_;
	uint8_t *bar0_ = nullptr; /* bar0_size_ bytes, mapped whole (sparse areas side by side) */
	size_t bar0_size_ = 0;
	std::vector<int> irq_fds_;
	unsigned irq_index_ = 0;
	std::vector<int> msix_attached_; /* set_msix_eventfd: the caller's fd per vector, or -1 */
};

} // namespace nicmr::bus::vfio

#endif
