/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * drivers/bus/vfio against a fake VFIO kernel, for what only a kernel can answer and the guest
 * test cannot steer: the order of reset and Bus Master Enable at open, the bit cleared at
 * close, a reset that fails, an IOMMU that reports no IOVA ranges (a kernel before 5.4) and an
 * unmap whose written-back size is not the mapping's.
 *
 * How: this program defines ioctl(2) itself. The executable's definition interposes libc's, so
 * the bus's ioctls on the files it opens under a temporary /dev/vfio (the container, the group)
 * and on the device file handed out by VFIO_GROUP_GET_DEVICE_FD reach the model below; every
 * other descriptor goes to the real system call. The device file is a plain file: BAR 0 at
 * offset 0 (mmap'd by the bus as VFIO's would be) and config space at kConfigOff (pread/pwrite),
 * so what the bus writes to the command register can be read back from it.
 */
#include <endian.h>
#include <fcntl.h>
#include <linux/pci_regs.h>
#include <linux/vfio.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "vfio_bus.h"

namespace fs = std::filesystem;
using namespace nicmr;
using namespace nicmr::bus::vfio;

namespace {

constexpr uint64_t kBar0Size = 0x1000;
constexpr uint64_t kConfigOff = 0x10000;
constexpr uint64_t kConfigSize = 256;
constexpr int kGroup = 7;
constexpr const char *kAddr = "0000:03:00.0";

/* What the fake kernel does and what it saw. */
struct FakeKernel {
	std::string dev_dir; /* the fake /dev/vfio */
	std::string device_file;
	/* Knobs. */
	bool can_reset = true;
	int reset_errno = 0; /* VFIO_DEVICE_RESET fails with this */
	bool report_ranges = true;
	std::vector<vfio_iova_range> ranges{{0, 0xfedfffff}, {0xfef00000, 0xffffffffffff}};
	bool override_unmapped = false;
	uint64_t unmapped = 0; /* what UNMAP_DMA writes back when override_unmapped */
	/* Seen. */
	int resets = 0;
	uint16_t command_at_reset = 0xffff;
	std::map<uint64_t, uint64_t> maps;
};

FakeKernel *g_kernel = nullptr;

uint16_t read_command(const std::string &file)
{
	uint16_t le = 0;
	int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (pread(fd, &le, sizeof(le), off_t(kConfigOff + PCI_COMMAND)) != sizeof(le))
			le = 0xffff;
		close(fd);
	}
	return le16toh(le);
}

void write_command(const std::string &file, uint16_t cmd)
{
	uint16_t le = htole16(cmd);
	int fd = open(file.c_str(), O_WRONLY | O_CLOEXEC);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(pwrite(fd, &le, sizeof(le), off_t(kConfigOff + PCI_COMMAND)),
		  ssize_t(sizeof(le)));
	close(fd);
}

/* The file behind a descriptor ("" when it is none of the fake's). */
std::string path_of(int fd)
{
	char link[64], buf[4096];
	std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, buf, sizeof(buf) - 1);
	if (n <= 0)
		return "";
	buf[n] = '\0';
	return buf;
}

int fail(int err)
{
	errno = err;
	return -1;
}

int container_ioctl(FakeKernel &k, unsigned long req, uintptr_t arg)
{
	switch (req) {
	case VFIO_GET_API_VERSION:
		return VFIO_API_VERSION;
	case VFIO_CHECK_EXTENSION:
		return arg == VFIO_TYPE1v2_IOMMU ? 1 : 0;
	case VFIO_SET_IOMMU:
		return arg == VFIO_TYPE1v2_IOMMU ? 0 : fail(EINVAL);
	case VFIO_IOMMU_GET_INFO: {
		auto *p = reinterpret_cast<uint8_t *>(arg);
		vfio_iommu_type1_info in;
		std::memcpy(&in, p, sizeof(in));
		/* The fixed part, then (when reported) one IOVA-range capability. */
		std::vector<uint8_t> out(sizeof(vfio_iommu_type1_info));
		vfio_iommu_type1_info info{};
		info.flags = VFIO_IOMMU_INFO_PGSIZES;
		info.iova_pgsizes = 0x40201000;
		if (k.report_ranges) {
			info.flags |= VFIO_IOMMU_INFO_CAPS;
			info.cap_offset = uint32_t(out.size());
			vfio_iommu_type1_info_cap_iova_range cap{};
			cap.header.id = VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE;
			cap.header.version = 1;
			cap.nr_iovas = uint32_t(k.ranges.size());
			const size_t at = out.size();
			out.resize(at + sizeof(cap) + k.ranges.size() * sizeof(vfio_iova_range));
			std::memcpy(out.data() + at, &cap, sizeof(cap));
			std::memcpy(out.data() + at + sizeof(cap), k.ranges.data(),
				    k.ranges.size() * sizeof(vfio_iova_range));
		}
		info.argsz = uint32_t(out.size());
		std::memcpy(out.data(), &info, sizeof(info));
		/* As the kernel: a buffer too small gets the size it needs and no chain. */
		if (in.argsz < out.size()) {
			info.flags &= ~VFIO_IOMMU_INFO_CAPS;
			info.cap_offset = 0;
			std::memcpy(p, &info, sizeof(info));
			return 0;
		}
		std::memcpy(p, out.data(), out.size());
		return 0;
	}
	case VFIO_IOMMU_MAP_DMA: {
		auto *m = reinterpret_cast<vfio_iommu_type1_dma_map *>(arg);
		k.maps[m->iova] = m->size;
		return 0;
	}
	case VFIO_IOMMU_UNMAP_DMA: {
		auto *u = reinterpret_cast<vfio_iommu_type1_dma_unmap *>(arg);
		auto it = k.maps.find(u->iova);
		uint64_t done = it != k.maps.end() && it->second == u->size ? u->size : 0;
		if (it != k.maps.end())
			k.maps.erase(it);
		u->size = k.override_unmapped ? k.unmapped : done;
		return 0;
	}
	default:
		return fail(ENOTTY);
	}
}

int group_ioctl(FakeKernel &k, unsigned long req, uintptr_t arg)
{
	switch (req) {
	case VFIO_GROUP_GET_STATUS: {
		auto *st = reinterpret_cast<vfio_group_status *>(arg);
		st->flags = VFIO_GROUP_FLAGS_VIABLE;
		return 0;
	}
	case VFIO_GROUP_SET_CONTAINER:
	case VFIO_GROUP_UNSET_CONTAINER:
		return 0;
	case VFIO_GROUP_GET_DEVICE_FD:
		if (std::strcmp(reinterpret_cast<const char *>(arg), kAddr) != 0)
			return fail(ENODEV);
		return open(k.device_file.c_str(), O_RDWR | O_CLOEXEC);
	default:
		return fail(ENOTTY);
	}
}

int device_ioctl(FakeKernel &k, unsigned long req, uintptr_t arg)
{
	switch (req) {
	case VFIO_DEVICE_GET_INFO: {
		auto *di = reinterpret_cast<vfio_device_info *>(arg);
		di->flags = VFIO_DEVICE_FLAGS_PCI | (k.can_reset ? VFIO_DEVICE_FLAGS_RESET : 0);
		di->num_regions = VFIO_PCI_NUM_REGIONS;
		di->num_irqs = 0;
		return 0;
	}
	case VFIO_DEVICE_GET_REGION_INFO: {
		auto *ri = reinterpret_cast<vfio_region_info *>(arg);
		ri->argsz = sizeof(*ri);
		ri->cap_offset = 0;
		ri->flags = 0;
		ri->size = 0;
		ri->offset = 0;
		if (ri->index == VFIO_PCI_BAR0_REGION_INDEX) {
			ri->flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE |
				    VFIO_REGION_INFO_FLAG_MMAP;
			ri->size = kBar0Size;
		} else if (ri->index == VFIO_PCI_CONFIG_REGION_INDEX) {
			ri->flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
			ri->size = kConfigSize;
			ri->offset = kConfigOff;
		}
		return 0;
	}
	case VFIO_DEVICE_RESET:
		if (!k.can_reset)
			return fail(EINVAL);
		if (k.reset_errno != 0)
			return fail(k.reset_errno);
		k.resets++;
		k.command_at_reset = read_command(k.device_file);
		/* The worst case for the caller: a reset that leaves the command register
		 * cleared (a kernel that did not restore it). */
		write_command(k.device_file, 0);
		return 0;
	default:
		return fail(ENOTTY);
	}
}

} // namespace

/* The interposer: the fake's descriptors to the model, every other one to the kernel. */
extern "C" int ioctl(int fd, unsigned long req, ...) noexcept
{
	va_list ap;
	va_start(ap, req);
	const uintptr_t arg = va_arg(ap, uintptr_t);
	va_end(ap);
	if (g_kernel != nullptr) {
		FakeKernel &k = *g_kernel;
		const std::string p = path_of(fd);
		if (p == k.dev_dir + "/vfio")
			return container_ioctl(k, req, arg);
		if (p == k.dev_dir + "/" + std::to_string(kGroup))
			return group_ioctl(k, req, arg);
		if (p == k.device_file)
			return device_ioctl(k, req, arg);
	}
	return static_cast<int>(syscall(SYS_ioctl, fd, req, arg));
}

namespace {

class VfioFakeKernel : public ::testing::Test {
protected:
	void SetUp() override
	{
		char tmpl[] = "/tmp/nicmr-vfio-fake-XXXXXX";
		ASSERT_NE(mkdtemp(tmpl), nullptr);
		root_ = tmpl;
		paths_.sysfs = root_ + "/sys";
		paths_.dev = root_ + "/dev-vfio";
		/* sysfs: the device bound to vfio-pci, alone in IOMMU group kGroup. */
		const std::string dir = paths_.sysfs + "/devices/pci0000:00/" + kAddr;
		const std::string grp =
			paths_.sysfs + "/kernel/iommu_groups/" + std::to_string(kGroup);
		fs::create_directories(dir);
		fs::create_directories(paths_.sysfs + "/bus/pci/devices");
		fs::create_directories(paths_.sysfs + "/bus/pci/drivers/vfio-pci");
		fs::create_directories(grp + "/devices");
		fs::create_symlink(dir, paths_.sysfs + "/bus/pci/devices/" + kAddr);
		fs::create_symlink(paths_.sysfs + "/bus/pci/drivers/vfio-pci", dir + "/driver");
		fs::create_symlink(grp, dir + "/iommu_group");
		fs::create_symlink(dir, grp + "/devices/" + kAddr);
		/* /dev/vfio: the container and the group are plain files the fake answers for. */
		fs::create_directories(paths_.dev);
		std::FILE *f = std::fopen((paths_.dev + "/vfio").c_str(), "w");
		ASSERT_NE(f, nullptr);
		std::fclose(f);
		f = std::fopen((paths_.dev + "/" + std::to_string(kGroup)).c_str(), "w");
		ASSERT_NE(f, nullptr);
		std::fclose(f);
		/* The device: BAR 0, then config space with a ConnectX's ID and memory decoding on
		 * (as vfio-pci leaves a function it enabled). */
		kernel_.dev_dir = paths_.dev;
		kernel_.device_file = root_ + "/device";
		std::vector<uint8_t> img(kConfigOff + kConfigSize, 0);
		const uint16_t id[2] = {htole16(0x15b3), htole16(0x101d)};
		std::memcpy(img.data() + kConfigOff, id, sizeof(id));
		const uint16_t cmd = htole16(PCI_COMMAND_MEMORY);
		std::memcpy(img.data() + kConfigOff + PCI_COMMAND, &cmd, sizeof(cmd));
		f = std::fopen(kernel_.device_file.c_str(), "w");
		ASSERT_NE(f, nullptr);
		ASSERT_EQ(std::fwrite(img.data(), 1, img.size(), f), img.size());
		std::fclose(f);
		g_kernel = &kernel_;
	}
	void TearDown() override
	{
		g_kernel = nullptr;
		fs::remove_all(root_);
	}

	int open_device(std::unique_ptr<Device> *out, std::string *log)
	{
		::testing::internal::CaptureStderr();
		int rc = Device::open(kAddr, out, paths_);
		*log = ::testing::internal::GetCapturedStderr();
		return rc;
	}
	uint16_t command() const { return read_command(kernel_.device_file); }

	std::string root_;
	Paths paths_;
	FakeKernel kernel_;
};

TEST_F(VfioFakeKernel, OpenResetsTheFunctionAndThenSetsBusMaster)
{
	std::unique_ptr<Device> dev;
	std::string log;
	ASSERT_EQ(open_device(&dev, &log), 0) << log;
	EXPECT_EQ(kernel_.resets, 1);
	EXPECT_TRUE(dev->was_reset_at_open());
	/* Reset first (the bit was not set yet), then the bit: it survives a reset that
	 * clears the command register. */
	EXPECT_EQ(kernel_.command_at_reset & PCI_COMMAND_MASTER, 0);
	EXPECT_EQ(command(), PCI_COMMAND_MASTER) << "set after the reset cleared the register";
	EXPECT_TRUE(dev->bus_master());
	EXPECT_EQ(log.find("offers no reset"), std::string::npos) << log;
}

TEST_F(VfioFakeKernel, CloseClearsBusMasterAndKeepsTheOtherBits)
{
	std::unique_ptr<Device> dev;
	std::string log;
	ASSERT_EQ(open_device(&dev, &log), 0) << log;
	/* Memory decoding back on (the register is read-modify-written, not overwritten). */
	write_command(kernel_.device_file, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
	dev.reset();
	EXPECT_EQ(command(), PCI_COMMAND_MEMORY);
}

TEST_F(VfioFakeKernel, ADeviceWithoutResetOpensWithAWarningAndBusMasterOn)
{
	kernel_.can_reset = false;
	std::unique_ptr<Device> dev;
	std::string log;
	ASSERT_EQ(open_device(&dev, &log), 0) << log;
	EXPECT_EQ(kernel_.resets, 0);
	EXPECT_FALSE(dev->was_reset_at_open());
	EXPECT_NE(log.find("offers no reset"), std::string::npos) << log;
	EXPECT_EQ(command(), PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
	EXPECT_EQ(dev->reset(), -ENOTTY);
}

TEST_F(VfioFakeKernel, AResetThatFailsFailsTheOpenWithItsErrno)
{
	kernel_.reset_errno = EIO;
	std::unique_ptr<Device> dev;
	std::string log;
	EXPECT_EQ(open_device(&dev, &log), -EIO);
	EXPECT_EQ(dev, nullptr);
	EXPECT_NE(log.find("VFIO_DEVICE_RESET at open"), std::string::npos) << log;
	EXPECT_EQ(command() & PCI_COMMAND_MASTER, 0) << "never made a bus master";
}

TEST_F(VfioFakeKernel, WithoutReportedIovaRangesTheContainerUsesTheLegacyOnes)
{
	kernel_.report_ranges = false;
	std::unique_ptr<Device> dev;
	std::string log;
	ASSERT_EQ(open_device(&dev, &log), 0) << log;
	EXPECT_NE(log.find("reports no IOVA ranges"), std::string::npos) << log;
	Container &c = dev->container();
	EXPECT_TRUE(c.iommu_info().legacy_ranges);
	const auto got = c.iova_ranges();
	const auto want = legacy_iova_ranges();
	ASSERT_EQ(got.size(), want.size());
	for (size_t i = 0; i < want.size(); i++) {
		EXPECT_EQ(got[i].start, want[i].start);
		EXPECT_EQ(got[i].last, want[i].last);
	}
	static char buf[4096] __attribute__((aligned(4096)));
	::testing::internal::CaptureStderr();
	EXPECT_EQ(c.dma_map(buf, 0xfee00000, 4096), -ERANGE) << "the MSI window";
	EXPECT_EQ(c.dma_map(buf, 0, 4096), -ERANGE) << "below 0x10000";
	EXPECT_EQ(c.dma_map(buf, uint64_t{1} << 39, 4096), -ERANGE) << "past 39 bits";
	::testing::internal::GetCapturedStderr();
	EXPECT_TRUE(kernel_.maps.empty()) << "refused before the kernel is asked";
	EXPECT_EQ(c.dma_map(buf, 0x100000, 4096), 0);
	EXPECT_EQ(c.dma_map(buf, 0xfef00000, 4096), 0);
	EXPECT_EQ(kernel_.maps.size(), 2u);
}

TEST_F(VfioFakeKernel, ReportedIovaRangesAreUsedAsReported)
{
	std::unique_ptr<Device> dev;
	std::string log;
	ASSERT_EQ(open_device(&dev, &log), 0) << log;
	Container &c = dev->container();
	EXPECT_FALSE(c.iommu_info().legacy_ranges);
	const auto got = c.iova_ranges();
	ASSERT_EQ(got.size(), 2u);
	EXPECT_EQ(got[0].start, 0u);
	EXPECT_EQ(got[1].last, 0xffffffffffffu);
	EXPECT_EQ(log.find("reports no IOVA ranges"), std::string::npos) << log;
}

TEST_F(VfioFakeKernel, AnUnmapOfAnotherSizeIsEioAndTheMappingIsForgotten)
{
	std::unique_ptr<Device> dev;
	std::string log;
	ASSERT_EQ(open_device(&dev, &log), 0) << log;
	Container &c = dev->container();
	static char buf[8192] __attribute__((aligned(4096)));
	ASSERT_EQ(c.dma_map(buf, 0x200000, 8192), 0);
	EXPECT_EQ(c.dma_unmap(0x200000, 8192), 0) << "the kernel unmapped what was asked";
	ASSERT_EQ(c.dma_map(buf, 0x200000, 8192), 0);
	/* The kernel says it unmapped nothing: someone else already had. */
	kernel_.override_unmapped = true;
	kernel_.unmapped = 0;
	::testing::internal::CaptureStderr();
	EXPECT_EQ(c.dma_unmap(0x200000, 8192), -EIO);
	log = ::testing::internal::GetCapturedStderr();
	EXPECT_NE(log.find("unmapped 0 bytes of the mapping's 8192"), std::string::npos) << log;
	EXPECT_EQ(c.mapping_count(), 0u);
	/* Forgotten: the same IOVA maps again, and unmapping it twice is -ENOENT. */
	kernel_.override_unmapped = false;
	ASSERT_EQ(c.dma_map(buf, 0x200000, 8192), 0);
	EXPECT_EQ(c.dma_unmap(0x200000, 8192), 0);
	::testing::internal::CaptureStderr();
	EXPECT_EQ(c.dma_unmap(0x200000, 8192), -ENOENT);
	::testing::internal::GetCapturedStderr();
}

} // namespace
