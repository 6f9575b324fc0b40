/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Host-side tests of drivers/bus/vfio: everything that needs no VFIO device. The capability
 * chain decoders get crafted buffers, the sysfs checks a fake sysfs tree in a temporary
 * directory, the container a /dev/vfio that is missing or is not VFIO. The real VFIO stack is
 * exercised by the guest test (vfio-guest).
 */
#include <gtest/gtest.h>
#include <linux/vfio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "vfio_bus.h"

namespace fs = std::filesystem;
using namespace nicmr;
using namespace nicmr::bus::vfio;

namespace {

/* Builds a vfio_iommu_type1_info followed by a capability chain. */
class InfoBuilder {
public:
	explicit InfoBuilder(uint64_t pgsizes)
	{
		vfio_iommu_type1_info info{};
		info.flags = VFIO_IOMMU_INFO_PGSIZES;
		info.iova_pgsizes = pgsizes;
		append(&info, sizeof(info));
	}
	/* Appends a capability and links it after the previous one; returns its offset. */
	size_t cap(uint16_t id, const void *body, size_t body_len)
	{
		size_t off = buf_.size();
		vfio_info_cap_header h{};
		h.id = id;
		h.version = 1;
		append(&h, sizeof(h));
		append(body, body_len);
		link(off);
		return off;
	}
	size_t ranges(std::vector<std::pair<uint64_t, uint64_t>> rs)
	{
		std::vector<uint8_t> body(8);
		uint32_t n = static_cast<uint32_t>(rs.size());
		std::memcpy(body.data(), &n, 4);
		for (auto [s, e] : rs) {
			vfio_iova_range r{s, e};
			auto *p = reinterpret_cast<uint8_t *>(&r);
			body.insert(body.end(), p, p + sizeof(r));
		}
		return cap(VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, body.data(), body.size());
	}
	size_t dma_avail(uint32_t n) { return cap(VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL, &n, 4); }
	std::vector<uint8_t> &bytes()
	{
		vfio_iommu_type1_info info;
		std::memcpy(&info, buf_.data(), sizeof(info));
		info.argsz = static_cast<uint32_t>(buf_.size());
		std::memcpy(buf_.data(), &info, sizeof(info));
		return buf_;
	}
	void set_next(size_t cap_off, uint32_t next)
	{
		std::memcpy(buf_.data() + cap_off + offsetof(vfio_info_cap_header, next), &next, 4);
	}
	void set_first(uint32_t off)
	{
		std::memcpy(buf_.data() + offsetof(vfio_iommu_type1_info, cap_offset), &off, 4);
	}

private:
	void append(const void *p, size_t n)
	{
		size_t at = buf_.size();
		buf_.resize(at + n);
		std::memcpy(buf_.data() + at, p, n);
	}
	void link(size_t off)
	{
		if (last_ == 0) {
			vfio_iommu_type1_info info;
			std::memcpy(&info, buf_.data(), sizeof(info));
			info.flags |= VFIO_IOMMU_INFO_CAPS;
			info.cap_offset = static_cast<uint32_t>(off);
			std::memcpy(buf_.data(), &info, sizeof(info));
		} else {
			set_next(last_, static_cast<uint32_t>(off));
		}
		last_ = off;
	}
	std::vector<uint8_t> buf_;
	size_t last_ = 0;
};

TEST(VfioIommuInfo, DecodesRangesAndDmaAvailFromTheChain)
{
	InfoBuilder b(0x40201000);
	b.ranges({{0xfef00000, 0x7fffffffff}, {0, 0xfedfffff}});
	b.dma_avail(65535);
	IommuInfo info;
	ASSERT_EQ(parse_iommu_info(b.bytes().data(), b.bytes().size(), &info), 0);
	EXPECT_EQ(info.page_sizes, 0x40201000u);
	ASSERT_EQ(info.ranges.size(), 2u);
	/* sorted by start, whatever order the kernel wrote */
	EXPECT_EQ(info.ranges[0].start, 0u);
	EXPECT_EQ(info.ranges[0].last, 0xfedfffffu);
	EXPECT_EQ(info.ranges[1].start, 0xfef00000u);
	EXPECT_EQ(info.ranges[1].last, 0x7fffffffffu);
	EXPECT_TRUE(info.has_dma_avail);
	EXPECT_EQ(info.dma_avail, 65535u);
}

TEST(VfioIommuInfo, SkipsCapabilitiesItDoesNotKnow)
{
	InfoBuilder b(4096);
	uint32_t junk[4] = {1, 2, 3, 4};
	b.cap(2 /* migration */, junk, sizeof(junk));
	b.dma_avail(7);
	IommuInfo info;
	ASSERT_EQ(parse_iommu_info(b.bytes().data(), b.bytes().size(), &info), 0);
	EXPECT_TRUE(info.ranges.empty());
	EXPECT_EQ(info.dma_avail, 7u);
}

TEST(VfioIommuInfo, NoCapabilityFlagMeansNoRangesAndNoLimit)
{
	InfoBuilder b(4096);
	IommuInfo info;
	ASSERT_EQ(parse_iommu_info(b.bytes().data(), b.bytes().size(), &info), 0);
	EXPECT_TRUE(info.ranges.empty());
	EXPECT_FALSE(info.has_dma_avail);
}

/* Whether any byte of [first, last] is a valid IOVA in ranges. */
bool touches(const std::vector<mem::IovaRange> &ranges, uint64_t first, uint64_t last)
{
	for (const auto &r : ranges)
		if (r.start <= last && first <= r.last)
			return true;
	return false;
}

TEST(VfioIommuInfo, NoIovaRangeCapabilityFallsBackToTheLegacyRanges)
{
	/* A kernel before 5.4: the DMA_AVAIL cap, no IOVA ranges. */
	InfoBuilder b(0x40201000);
	b.dma_avail(1000);
	IommuInfo info;
	ASSERT_EQ(parse_iommu_info(b.bytes().data(), b.bytes().size(), &info), 0);
	ASSERT_TRUE(info.ranges.empty());
	apply_iommu_defaults(&info);
	EXPECT_TRUE(info.legacy_ranges);
	const auto legacy = legacy_iova_ranges();
	ASSERT_EQ(info.ranges.size(), legacy.size());
	for (size_t i = 0; i < legacy.size(); i++) {
		EXPECT_EQ(info.ranges[i].start, legacy[i].start);
		EXPECT_EQ(info.ranges[i].last, legacy[i].last);
	}
	ASSERT_EQ(info.ranges.size(), 2u);
	/* QEMU's bounds for this case (util/vfio-helpers.c) ... */
	EXPECT_EQ(info.ranges.front().start, 0x10000u);
	EXPECT_EQ(info.ranges.back().last, (uint64_t{1} << 39) - 1);
	/* ... without the x86 interrupt window, whose edges stay usable. */
	EXPECT_FALSE(touches(info.ranges, 0xfee00000, 0xfeefffff));
	EXPECT_TRUE(touches(info.ranges, 0xfedff000, 0xfedfffff));
	EXPECT_TRUE(touches(info.ranges, 0xfef00000, 0xfef00fff));
	EXPECT_FALSE(touches(info.ranges, 0, 0xffff));
	EXPECT_FALSE(touches(info.ranges, uint64_t{1} << 39, UINT64_MAX));
	/* What was reported stays. */
	EXPECT_EQ(info.page_sizes, 0x40201000u);
	EXPECT_TRUE(info.has_dma_avail);
	EXPECT_EQ(info.dma_avail, 1000u);
}

TEST(VfioIommuInfo, LegacyRangesAreSortedDisjointAndPageAligned)
{
	auto r = legacy_iova_ranges();
	for (size_t i = 0; i < r.size(); i++) {
		EXPECT_LE(r[i].start, r[i].last);
		EXPECT_EQ(r[i].start % 4096, 0u);
		EXPECT_EQ((r[i].last + 1) % 4096, 0u);
		if (i > 0) {
			EXPECT_GT(r[i].start, r[i - 1].last + 1) << "a hole between ranges " << i;
		}
	}
}

TEST(VfioIommuInfo, ReportedRangesAreKeptAndAMissingPageSizeIs4K)
{
	InfoBuilder b(0);
	b.ranges({{0, 0xfedfffff}, {0xfef00000, 0xffffffffffff}});
	IommuInfo info;
	ASSERT_EQ(parse_iommu_info(b.bytes().data(), b.bytes().size(), &info), 0);
	apply_iommu_defaults(&info);
	EXPECT_FALSE(info.legacy_ranges);
	ASSERT_EQ(info.ranges.size(), 2u);
	EXPECT_EQ(info.ranges[0].start, 0u);
	EXPECT_EQ(info.ranges[1].last, 0xffffffffffffu);
	EXPECT_EQ(info.page_sizes, 4096u);
}

TEST(VfioUnmap, TheSizeTheKernelUnmappedMustBeTheMappingsOrItIsEio)
{
	EXPECT_EQ(check_unmapped_size(0x100000, 0x200000, 0x200000), 0);
	::testing::internal::CaptureStderr();
	/* The kernel had nothing there (another user of the container unmapped it), or
	 * unmapped more than the one mapping: the container and the kernel disagree. */
	EXPECT_EQ(check_unmapped_size(0x100000, 0x200000, 0), -EIO);
	EXPECT_EQ(check_unmapped_size(0x100000, 0x200000, 0x400000), -EIO);
	EXPECT_EQ(check_unmapped_size(0x100000, 0x200000, 0x1000), -EIO);
	std::string log = ::testing::internal::GetCapturedStderr();
	EXPECT_NE(log.find("iova 0x100000 unmapped 0 bytes of the mapping's 2097152"),
		  std::string::npos)
		<< log;
}

TEST(VfioIommuInfo, RejectsCapabilityOutsideTheBuffer)
{
	InfoBuilder b(4096);
	b.dma_avail(1);
	b.set_first(static_cast<uint32_t>(b.bytes().size() + 64));
	IommuInfo info;
	EXPECT_EQ(parse_iommu_info(b.bytes().data(), b.bytes().size(), &info), -EPROTO);
}

TEST(VfioIommuInfo, RejectsCapabilityInsideTheFixedHeader)
{
	InfoBuilder b(4096);
	b.dma_avail(1);
	b.set_first(4);
	IommuInfo info;
	EXPECT_EQ(parse_iommu_info(b.bytes().data(), b.bytes().size(), &info), -EPROTO);
}

TEST(VfioIommuInfo, RejectsAChainThatLoops)
{
	InfoBuilder b(4096);
	size_t first = b.dma_avail(1);
	size_t second = b.ranges({{0, 0xffff}});
	b.set_next(second, static_cast<uint32_t>(first));
	IommuInfo info;
	EXPECT_EQ(parse_iommu_info(b.bytes().data(), b.bytes().size(), &info), -EPROTO);
}

TEST(VfioIommuInfo, RejectsMoreRangesThanTheCapabilityHolds)
{
	InfoBuilder b(4096);
	size_t off = b.ranges({{0, 0xffff}});
	uint32_t n = 1000;
	std::memcpy(b.bytes().data() + off + sizeof(vfio_info_cap_header), &n, 4);
	IommuInfo info;
	EXPECT_EQ(parse_iommu_info(b.bytes().data(), b.bytes().size(), &info), -EPROTO);
}

TEST(VfioIommuInfo, RejectsOverlappingOrInvertedRanges)
{
	IommuInfo info;
	InfoBuilder overlap(4096);
	overlap.ranges({{0, 0x2000}, {0x1000, 0x3000}});
	EXPECT_EQ(parse_iommu_info(overlap.bytes().data(), overlap.bytes().size(), &info), -EPROTO);
	InfoBuilder inverted(4096);
	inverted.ranges({{0x2000, 0x1000}});
	EXPECT_EQ(parse_iommu_info(inverted.bytes().data(), inverted.bytes().size(), &info),
		  -EPROTO);
}

TEST(VfioIommuInfo, IgnoresBytesPastArgsz)
{
	InfoBuilder b(4096);
	b.dma_avail(3);
	auto bytes = b.bytes();
	size_t real = bytes.size();
	bytes.resize(real + 256, 0xff); /* a larger buffer than the kernel filled */
	IommuInfo info;
	ASSERT_EQ(parse_iommu_info(bytes.data(), bytes.size(), &info), 0);
	EXPECT_EQ(info.dma_avail, 3u);
}

TEST(VfioIommuInfo, RejectsABufferShorterThanTheHeader)
{
	uint8_t small[8] = {};
	IommuInfo info;
	EXPECT_EQ(parse_iommu_info(small, sizeof(small), &info), -EPROTO);
}

std::vector<uint8_t> region_with_sparse(uint64_t size, std::vector<SparseArea> areas)
{
	vfio_region_info ri{};
	ri.flags = VFIO_REGION_INFO_FLAG_MMAP | VFIO_REGION_INFO_FLAG_CAPS;
	ri.size = size;
	ri.cap_offset = sizeof(ri);
	std::vector<uint8_t> buf(sizeof(ri) + sizeof(vfio_region_info_cap_sparse_mmap) +
				 areas.size() * sizeof(vfio_region_sparse_mmap_area));
	ri.argsz = static_cast<uint32_t>(buf.size());
	std::memcpy(buf.data(), &ri, sizeof(ri));
	vfio_region_info_cap_sparse_mmap cap{};
	cap.header.id = VFIO_REGION_INFO_CAP_SPARSE_MMAP;
	cap.header.version = 1;
	cap.nr_areas = static_cast<uint32_t>(areas.size());
	std::memcpy(buf.data() + sizeof(ri), &cap, sizeof(cap));
	for (size_t i = 0; i < areas.size(); i++) {
		vfio_region_sparse_mmap_area a{areas[i].offset, areas[i].size};
		std::memcpy(buf.data() + sizeof(ri) + sizeof(cap) + i * sizeof(a), &a, sizeof(a));
	}
	return buf;
}

TEST(VfioRegionInfo, DecodesSparseMmapAreasInOffsetOrder)
{
	/* A BAR whose MSI-X table page (0x2000) cannot be mapped. */
	auto buf = region_with_sparse(0x10000, {{0x3000, 0xd000}, {0, 0x2000}});
	std::vector<SparseArea> areas;
	bool has = false;
	ASSERT_EQ(parse_region_info(buf.data(), buf.size(), &areas, &has), 0);
	EXPECT_TRUE(has);
	ASSERT_EQ(areas.size(), 2u);
	EXPECT_EQ(areas[0].offset, 0u);
	EXPECT_EQ(areas[0].size, 0x2000u);
	EXPECT_EQ(areas[1].offset, 0x3000u);
	EXPECT_EQ(areas[1].size, 0xd000u);
}

TEST(VfioRegionInfo, RejectsAnAreaBeyondTheRegion)
{
	auto buf = region_with_sparse(0x10000, {{0x8000, 0x9000}});
	std::vector<SparseArea> areas;
	bool has = false;
	EXPECT_EQ(parse_region_info(buf.data(), buf.size(), &areas, &has), -EPROTO);
}

TEST(VfioRegionInfo, WithoutCapabilitiesTheWholeRegionIsOneMapping)
{
	vfio_region_info ri{};
	ri.argsz = sizeof(ri);
	ri.flags = VFIO_REGION_INFO_FLAG_MMAP;
	ri.size = 0x100000;
	std::vector<SparseArea> areas{{1, 1}};
	bool has = true;
	ASSERT_EQ(parse_region_info(&ri, sizeof(ri), &areas, &has), 0);
	EXPECT_FALSE(has);
	EXPECT_TRUE(areas.empty());
}

/* Region r as read_regions fills it from a VFIO_DEVICE_GET_REGION_INFO answer in buf. */
Region region_from(const void *buf, size_t len)
{
	vfio_region_info ri{};
	std::memcpy(&ri, buf, sizeof(ri));
	Region r;
	r.index = VFIO_PCI_BAR0_REGION_INDEX;
	r.flags = ri.flags;
	r.size = ri.size;
	EXPECT_EQ(parse_region_info(buf, len, &r.sparse, &r.has_sparse), 0);
	return r;
}

TEST(VfioBar0, ARegionWithoutMmapCapabilityIsRefusedWithEnotsup)
{
	/* Readable and writable through the fd only: a doorbell would be a pwrite. */
	vfio_region_info ri{};
	ri.argsz = sizeof(ri);
	ri.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
	ri.size = 0x100000;
	EXPECT_EQ(check_bar0_mappable(region_from(&ri, sizeof(ri))), -ENOTSUP);
}

TEST(VfioBar0, AnAbsentBarIsRefusedWithEnotsup)
{
	vfio_region_info ri{};
	ri.argsz = sizeof(ri);
	ri.flags = VFIO_REGION_INFO_FLAG_MMAP;
	ri.size = 0;
	EXPECT_EQ(check_bar0_mappable(region_from(&ri, sizeof(ri))), -ENOTSUP);
}

TEST(VfioBar0, SparseAreasWithAHoleAreRefusedWithEnotsup)
{
	/* The MSI-X table page at 0x2000 cannot be mapped: a register there would need pwrite. */
	auto buf = region_with_sparse(0x10000, {{0x3000, 0xd000}, {0, 0x2000}});
	EXPECT_EQ(check_bar0_mappable(region_from(buf.data(), buf.size())), -ENOTSUP);
	/* A hole at the end counts as much as one in the middle. */
	buf = region_with_sparse(0x10000, {{0, 0xf000}});
	EXPECT_EQ(check_bar0_mappable(region_from(buf.data(), buf.size())), -ENOTSUP);
}

TEST(VfioBar0, AWholeMappingOrSparseAreasThatTileTheBarAreAccepted)
{
	vfio_region_info ri{};
	ri.argsz = sizeof(ri);
	ri.flags = VFIO_REGION_INFO_FLAG_MMAP | VFIO_REGION_INFO_FLAG_READ;
	ri.size = 0x100000;
	EXPECT_EQ(check_bar0_mappable(region_from(&ri, sizeof(ri))), 0);
	auto buf = region_with_sparse(0x10000, {{0x2000, 0xe000}, {0, 0x2000}});
	EXPECT_EQ(check_bar0_mappable(region_from(buf.data(), buf.size())), 0);
}

/* A fake sysfs: devices, their drivers and IOMMU groups as the kernel links them. */
class FakeSysfs : public ::testing::Test {
protected:
	void SetUp() override
	{
		char tmpl[] = "/tmp/nicmr-vfio-sysfs-XXXXXX";
		ASSERT_NE(mkdtemp(tmpl), nullptr);
		root_ = tmpl;
		paths_.sysfs = root_;
		paths_.dev = root_ + "/dev-vfio";
	}
	void TearDown() override { fs::remove_all(root_); }

	/* A device; group < 0: no IOMMU group link; driver "": unbound. */
	void device(const std::string &addr, int group, const std::string &driver)
	{
		std::string dir = root_ + "/devices/pci0000:00/" + addr;
		fs::create_directories(dir);
		fs::create_directories(root_ + "/bus/pci/devices");
		fs::create_symlink("../../../devices/pci0000:00/" + addr,
				   root_ + "/bus/pci/devices/" + addr);
		if (!driver.empty()) {
			fs::create_directories(root_ + "/bus/pci/drivers/" + driver);
			fs::create_symlink("../../../bus/pci/drivers/" + driver, dir + "/driver");
		}
		if (group >= 0) {
			std::string g = root_ + "/kernel/iommu_groups/" + std::to_string(group);
			fs::create_directories(g + "/devices");
			fs::create_symlink("../../../../kernel/iommu_groups/" +
						   std::to_string(group),
					   dir + "/iommu_group");
			fs::create_symlink("../../../../devices/pci0000:00/" + addr,
					   g + "/devices/" + addr);
		}
	}

	int check(const std::string &addr, int *group, std::string *log)
	{
		::testing::internal::CaptureStderr();
		int rc = check_device(paths_, addr, group);
		*log = ::testing::internal::GetCapturedStderr();
		return rc;
	}

	std::string root_;
	Paths paths_;
};

TEST_F(FakeSysfs, DeviceBoundToVfioPciAloneInItsGroupIsViable)
{
	device("0000:03:00.0", 12, "vfio-pci");
	int group = -1;
	std::string log;
	EXPECT_EQ(check("0000:03:00.0", &group, &log), 0);
	EXPECT_EQ(group, 12);
	EXPECT_EQ(log, "");
}

TEST_F(FakeSysfs, ShortAddressIsTheSameDevice)
{
	device("0000:03:00.0", 12, "vfio-pci");
	int group = -1;
	std::string log;
	EXPECT_EQ(check("03:00.0", &group, &log), 0);
	EXPECT_EQ(group, 12);
}

TEST_F(FakeSysfs, MissingDeviceIsEnodev)
{
	device("0000:03:00.0", 12, "vfio-pci");
	int group = -1;
	std::string log;
	EXPECT_EQ(check("0000:04:00.0", &group, &log), -ENODEV);
	EXPECT_NE(log.find("no PCI device 0000:04:00.0"), std::string::npos) << log;
}

TEST_F(FakeSysfs, NoIommuGroupIsEnxioAndNamesTheKernelParameter)
{
	device("0000:03:00.0", -1, "vfio-pci");
	int group = -1;
	std::string log;
	EXPECT_EQ(check("0000:03:00.0", &group, &log), -ENXIO);
	EXPECT_NE(log.find("intel_iommu=on"), std::string::npos) << log;
	EXPECT_NE(log.find("amd_iommu=on"), std::string::npos) << log;
}

TEST_F(FakeSysfs, DeviceOnAKernelDriverIsEbusyAndNamesTheBindCommand)
{
	device("0000:03:00.0", 12, "mlx5_core");
	int group = -1;
	std::string log;
	EXPECT_EQ(check("0000:03:00.0", &group, &log), -EBUSY);
	EXPECT_NE(log.find("bound to mlx5_core"), std::string::npos) << log;
	EXPECT_NE(log.find("devtools/nicmr-devbind --bind vfio-pci 0000:03:00.0"),
		  std::string::npos)
		<< log;
}

TEST_F(FakeSysfs, UnboundDeviceIsEbusyToo)
{
	device("0000:03:00.0", 12, "");
	int group = -1;
	std::string log;
	EXPECT_EQ(check("0000:03:00.0", &group, &log), -EBUSY);
	EXPECT_NE(log.find("bound to no driver"), std::string::npos) << log;
}

TEST_F(FakeSysfs, GroupWithADeviceOnAKernelDriverIsNotViableAndNamesIt)
{
	device("0000:03:00.0", 12, "vfio-pci");
	device("0000:03:00.1", 12, "mlx5_core");
	int group = -1;
	std::string log;
	EXPECT_EQ(check("0000:03:00.0", &group, &log), -EPERM);
	EXPECT_NE(log.find("0000:03:00.1 in it is bound to mlx5_core"), std::string::npos) << log;
	EXPECT_EQ(group, -1);
}

TEST_F(FakeSysfs, GroupMembersUnboundOrOnVfioPciStubOrBridgeAreViable)
{
	device("0000:03:00.0", 12, "vfio-pci");
	device("0000:03:00.1", 12, "");
	device("0000:03:00.2", 12, "vfio-pci");
	device("0000:03:00.3", 12, "pci-stub");
	device("0000:00:1c.0", 12, "pcieport");
	int group = -1;
	std::string log;
	EXPECT_EQ(check("0000:03:00.0", &group, &log), 0) << log;
	EXPECT_EQ(group, 12);
}

TEST_F(FakeSysfs, NotAPciAddressIsEinval)
{
	int group = -1;
	std::string log;
	EXPECT_EQ(check("eth0", &group, &log), -EINVAL);
	EXPECT_EQ(check("0000:03:20.0", &group, &log), -EINVAL); /* device number > 31 */
}

TEST_F(FakeSysfs, OpenFailsAtTheMissingVfioDeviceBeforeAnythingElse)
{
	device("0000:03:00.0", 12, "vfio-pci");
	std::unique_ptr<Device> d;
	::testing::internal::CaptureStderr();
	int rc = Device::open("0000:03:00.0", &d, paths_);
	std::string log = ::testing::internal::GetCapturedStderr();
	EXPECT_EQ(rc, -ENOENT);
	EXPECT_EQ(d, nullptr);
	EXPECT_NE(log.find("modprobe vfio-pci"), std::string::npos) << log;
}

TEST(VfioAddress, NormalizesShortAndFullForms)
{
	std::string out;
	ASSERT_EQ(normalize_pci_addr("3:0.1", &out), 0);
	EXPECT_EQ(out, "0000:03:00.1");
	ASSERT_EQ(normalize_pci_addr("0001:AF:1f.7", &out), 0);
	EXPECT_EQ(out, "0001:af:1f.7");
	EXPECT_EQ(normalize_pci_addr("03:00.8", &out), -EINVAL);
	EXPECT_EQ(normalize_pci_addr("03:00.0x", &out), -EINVAL);
	EXPECT_EQ(normalize_pci_addr("", &out), -EINVAL);
}

class TempDir : public ::testing::Test {
protected:
	void SetUp() override
	{
		char tmpl[] = "/tmp/nicmr-vfio-dev-XXXXXX";
		ASSERT_NE(mkdtemp(tmpl), nullptr);
		dir_ = tmpl;
	}
	void TearDown() override { fs::remove_all(dir_); }
	std::string dir_;
};

TEST_F(TempDir, MissingDevVfioIsEnoentAndSaysToLoadVfioPci)
{
	Paths p;
	p.dev = dir_ + "/no-such-dir";
	std::shared_ptr<Container> c;
	::testing::internal::CaptureStderr();
	int rc = Container::create(&c, p);
	std::string log = ::testing::internal::GetCapturedStderr();
	EXPECT_EQ(rc, -ENOENT);
	EXPECT_EQ(c, nullptr);
	EXPECT_NE(log.find("modprobe vfio-pci"), std::string::npos) << log;
}

TEST(VfioContainer, ThisHostsMissingDevVfioIsEnoent)
{
	if (access("/dev/vfio/vfio", F_OK) == 0)
		GTEST_SKIP()
			<< "/dev/vfio/vfio exists here: the missing-driver case cannot be seen";
	std::shared_ptr<Container> c;
	::testing::internal::CaptureStderr();
	int rc = Container::create(&c);
	std::string log = ::testing::internal::GetCapturedStderr();
	EXPECT_EQ(rc, -ENOENT);
	EXPECT_NE(log.find("no /dev/vfio/vfio"), std::string::npos) << log;
}

TEST_F(TempDir, AFileThatIsNotVfioIsEnotsup)
{
	std::ofstream(dir_ + "/vfio") << "not a device";
	Paths p;
	p.dev = dir_;
	std::shared_ptr<Container> c;
	::testing::internal::CaptureStderr();
	int rc = Container::create(&c, p);
	std::string log = ::testing::internal::GetCapturedStderr();
	EXPECT_EQ(rc, -ENOTSUP);
	EXPECT_EQ(c, nullptr);
	EXPECT_NE(log.find("VFIO API"), std::string::npos) << log;
}

TEST_F(TempDir, PermissionDeniedIsEacces)
{
	std::string f = dir_ + "/vfio";
	std::ofstream(f) << "x";
	ASSERT_EQ(chmod(f.c_str(), 0600), 0);
	ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
	if (geteuid() != 0)
		GTEST_SKIP() << "needs root to switch to an unprivileged user in a child";
	/* The check runs in a child that drops to nobody: root would be let in. */
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		if (setgid(65534) != 0 || setuid(65534) != 0)
			_exit(100);
		Paths p;
		p.dev = dir_;
		std::shared_ptr<Container> c;
		int rc = Container::create(&c, p);
		_exit(rc == -EACCES ? 0 : 1);
	}
	int status = 0;
	ASSERT_EQ(waitpid(pid, &status, 0), pid);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), 0) << "child did not see -EACCES (100: setuid failed)";
}

} // namespace
