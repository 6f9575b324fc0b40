/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * vfio-guest-test: runs inside the QEMU guest that devtools/vfio-guest boots, against QEMU's
 * edu device bound to vfio-pci, and proves the VFIO bus on a real VFIO stack (the guest's
 * vfio-pci, type-1 IOMMU and emulated VT-d):
 *   - the device opens, BAR 0 is mapped, config space reads its ID; open reset the function
 *     (when it offers a reset) and set Bus Master Enable: the test never sets it itself, so
 *     every edu DMA below proves the open path did;
 *   - a hugepage pool is DMA-mapped through lib/mem's DmaSpace and edu copies data into and
 *     out of it at the pool's IOVAs, every byte checked;
 *   - an MSI raised by edu arrives on the vector's eventfd;
 *   - after dma_unmap the device's DMA no longer reaches the memory;
 *   - IOVAs outside the reported ranges give -ERANGE, the mapping limit gives -ENOSPC;
 *   - the mlx5 driver (mlx5::Device::open on the VFIO device) refuses edu with -ENODEV and
 *     leaks nothing.
 * Each check prints "RESULT <name> PASS|FAIL <detail>" for the host side to collect.
 *
 *   - a second edu, in another IOMMU group, opened on the same Container, reaches the same
 *     pool at the same IOVAs (one IOVA space, several groups);
 *
 * usage: vfio-guest-test <edu PCI address> [<second edu PCI address>]
 * edu's registers (QEMU hw/misc/edu.c): 0x04 liveness (reads back ~value), 0x24 interrupt
 * status, 0x64 interrupt acknowledge, 0x80 DMA source, 0x88 destination, 0x90 count, 0x98
 * command (bit 0 start, cleared when done; bit 1 direction: 0 RAM -> device, 1 device -> RAM;
 * bit 2 raise DMA_IRQ 0x100 when done). Its buffer is at device address 0x40000, 4096 bytes;
 * QEMU 7.2 rejects a transfer that ends at the buffer's end, so at most 4095 bytes move at once.
 */
#include <fcntl.h>
#include <linux/pci_regs.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "mem_pool.h"
#include "mem_space.h"
#include "mlx5_device.h"
#include "vfio_bus.h"

using namespace nicmr;
using bus::vfio::Container;
using bus::vfio::Device;

namespace {

constexpr size_t kEduLive = 0x04;
constexpr size_t kEduIrqStatus = 0x24;
constexpr size_t kEduIrqAck = 0x64;
constexpr size_t kEduDmaSrc = 0x80;
constexpr size_t kEduDmaDst = 0x88;
constexpr size_t kEduDmaCount = 0x90;
constexpr size_t kEduDmaCmd = 0x98;
constexpr uint64_t kEduBuf = 0x40000;
constexpr uint32_t kEduMaxXfer = 4095;
constexpr uint32_t kCmdStart = 1, kCmdToRam = 2, kCmdIrq = 4;
constexpr uint32_t kDmaIrq = 0x100;

int failures = 0;

void result(const char *name, bool pass, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void result(const char *name, bool pass, const char *fmt, ...)
{
	char detail[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	std::printf("RESULT %s %s %s\n", name, pass ? "PASS" : "FAIL", detail);
	std::fflush(stdout);
	if (!pass)
		failures++;
}

/* Starts one edu transfer and waits until the device clears the start bit. */
int edu_dma(Device &d, uint64_t src, uint64_t dst, uint32_t count, uint32_t flags)
{
	/* The buffer's contents must be in memory before the device is told to read them. */
	std::atomic_thread_fence(std::memory_order_seq_cst);
	d.bar0_write64(kEduDmaSrc, src);
	d.bar0_write64(kEduDmaDst, dst);
	d.bar0_write64(kEduDmaCount, count);
	d.bar0_write64(kEduDmaCmd, kCmdStart | flags);
	auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (d.bar0_read32(kEduDmaCmd) & kCmdStart) {
		if (std::chrono::steady_clock::now() > end)
			return -ETIMEDOUT;
		std::this_thread::sleep_for(std::chrono::milliseconds(2));
	}
	/* The device's writes are visible once it reports completion. */
	std::atomic_thread_fence(std::memory_order_seq_cst);
	return 0;
}

/* RAM(src_iova) -> edu buffer -> RAM(dst_iova), count bytes. */
int edu_copy(Device &d, uint64_t src_iova, uint64_t dst_iova, uint32_t count)
{
	int rc = edu_dma(d, src_iova, kEduBuf, count, 0);
	return rc < 0 ? rc : edu_dma(d, kEduBuf, dst_iova, count, kCmdToRam);
}

size_t count_entries(const char *dir)
{
	size_t n = 0;
	if (DIR *d = opendir(dir)) {
		while (readdir(d))
			n++;
		closedir(d);
	}
	return n;
}

/* Lines of a file that contain `needle` (all lines when it is empty). */
size_t count_lines(const char *path, const char *needle)
{
	std::ifstream f(path);
	std::string line;
	size_t n = 0;
	while (std::getline(f, line))
		n += line.find(needle) != std::string::npos;
	return n;
}

/* Runs fn with stderr captured (the library's log lines) and returns what was written. */
template <class F> std::string capture_stderr(F &&fn)
{
	std::fflush(stderr);
	int saved = dup(2);
	char path[] = "/tmp/nicmr-vfio-logXXXXXX";
	int tmp = mkstemp(path);
	unlink(path);
	dup2(tmp, 2);
	fn();
	std::fflush(stderr);
	dup2(saved, 2);
	close(saved);
	std::string out;
	char buf[1024];
	ssize_t n;
	lseek(tmp, 0, SEEK_SET);
	while ((n = read(tmp, buf, sizeof(buf))) > 0)
		out.append(buf, size_t(n));
	close(tmp);
	return out;
}

/* A second device on the same container reaches the same pool at the same IOVAs. */
void test_shared_container(Device &dev, const std::shared_ptr<Container> &c,
			   const std::string &addr2, const mem::PoolEntry *e)
{
	std::unique_ptr<Device> dev2;
	int rc = Device::open(addr2, c, &dev2);
	if (rc < 0) {
		result("shared-container-two-groups", false, "open %s on the container: %d",
		       addr2.c_str(), rc);
		return;
	}
	/* No set_bus_master here: Device::open set it, and the copy below needs it. */
	auto *base = reinterpret_cast<uint8_t *>(e->va);
	const size_t src = 256 * 1024 + 17, dst = 1536 * 1024 + 5;
	for (size_t i = 0; i < kEduMaxXfer; i++)
		base[src + i] = uint8_t(i * 7 + 3);
	std::memset(base + dst, 0, kEduMaxXfer);
	/* edu 2 copies into pool memory, edu 1 copies that back out: one IOVA space for both. */
	int r1 = edu_copy(*dev2, e->iova + src, e->iova + dst, kEduMaxXfer);
	int r2 = r1 < 0 ? r1
			: edu_copy(dev, e->iova + dst, e->iova + dst + kEduMaxXfer, kEduMaxXfer);
	size_t bad = 0;
	for (size_t i = 0; i < kEduMaxXfer; i++)
		bad += (base[dst + i] != uint8_t(i * 7 + 3)) +
		       (base[dst + kEduMaxXfer + i] != uint8_t(i * 7 + 3));
	result("shared-container-two-groups",
	       r2 == 0 && bad == 0 && dev2->iommu_group() != dev.iommu_group() &&
		       c->mapping_count() == 1,
	       "groups %d and %d on one container, one mapping, %zu bytes differ, rc %d",
	       dev.iommu_group(), dev2->iommu_group(), bad, r2);
}

void test_roundtrip(Device &dev, const std::shared_ptr<Container> &cp, const std::string &addr2)
{
	Container &c = *cp;
	std::unique_ptr<mem::Pool> pool;
	mem::PoolParams pp;
	pp.size = mem::kPage2M;
	pp.page_size = mem::kPage2M;
	pp.name = "vfio-guest";
	int rc = mem::Pool::create(pp, &pool);
	if (rc < 0) {
		result("pool-dma-mapped", false, "Pool::create(2 MiB on 2 MiB pages): %d", rc);
		return;
	}
	mem::DmaSpace space(c);
	const mem::PoolEntry *e = nullptr;
	rc = space.add_pool(std::move(pool), &e);
	result("pool-dma-mapped", rc == 0 && c.mapping_count() == 1,
	       "rc %d, iova 0x%" PRIx64 ", %zu bytes, va %% align == iova %% align: %d", rc,
	       rc == 0 ? e->iova : 0, rc == 0 ? e->len : 0,
	       rc == 0 ? int(e->va % e->iova_align == e->iova % e->iova_align) : 0);
	if (rc < 0)
		return;

	auto *base = reinterpret_cast<uint8_t *>(e->va);
	std::mt19937_64 rng(0x6e69636d72ull);
	for (size_t i = 0; i < e->len; i++)
		base[i] = uint8_t(rng());
	/* (source offset, destination offset, count): page-crossing, unaligned, pool's end. */
	struct Xfer {
		size_t src, dst;
		uint32_t count;
	} xfers[] = {
		{0, 1 << 20, kEduMaxXfer},
		{4096 - 100, (1 << 20) + 3 * 4096 + 7, kEduMaxXfer},
		{12345, e->len - kEduMaxXfer, kEduMaxXfer},
		{(1 << 20) - 1, 64 * 1024 + 1, 1},
	};
	size_t checked = 0, bad = 0;
	int xrc = 0;
	for (auto &x : xfers) {
		/* The destination is cleared and the bytes around it are kept, so a transfer that
		 * writes too much or too little shows up. */
		std::vector<uint8_t> before(base, base + e->len);
		std::memset(base + x.dst, 0, x.count);
		for (size_t i = 0; i < x.count; i++)
			before[x.dst + i] = before[x.src + i];
		xrc = edu_copy(dev, e->iova + x.src, e->iova + x.dst, x.count);
		if (xrc < 0)
			break;
		for (size_t i = 0; i < e->len; i++)
			bad += base[i] != before[i];
		checked += e->len;
	}
	result("edu-dma-roundtrip", xrc == 0 && bad == 0 && checked > 0,
	       "%zu transfers RAM->edu->RAM at pool IOVAs, %zu bytes compared, %zu differ, rc %d",
	       std::size(xfers), checked, bad, xrc);

	/* MSI: the completion interrupt arrives on the vector's eventfd. */
	rc = dev.enable_msi(1);
	if (rc == 0) {
		int efd = dev.irq_eventfd(0);
		uint64_t cnt;
		while (read(efd, &cnt, 8) == 8) {
		}
		int drc = edu_dma(dev, e->iova, kEduBuf, 64, kCmdIrq);
		pollfd p{efd, POLLIN, 0};
		int pr = poll(&p, 1, 5000);
		cnt = 0;
		bool got = pr == 1 && read(efd, &cnt, 8) == 8 && cnt >= 1;
		uint32_t st = dev.bar0_read32(kEduIrqStatus);
		dev.bar0_write32(kEduIrqAck, kDmaIrq);
		result("edu-msi-eventfd", drc == 0 && got && (st & kDmaIrq),
		       "DMA completion MSI on eventfd: count %" PRIu64 ", irq status 0x%x", cnt,
		       st);
		dev.disable_irqs();
	} else {
		result("edu-msi-eventfd", false, "enable_msi(1): %d (%u vectors offered)", rc,
		       dev.msi_count());
	}

	if (!addr2.empty())
		test_shared_container(dev, cp, addr2, e);

	rc = space.remove_pool(e->pool);
	result("pool-dma-unmapped", rc == 0 && c.mapping_count() == 0,
	       "remove_pool %d, %zu mappings left", rc, c.mapping_count());
}

void test_revocation(Device &dev, Container &c)
{
	/* Memory the test owns beyond the unmap, so it can look at it afterwards. */
	const size_t len = 2 * 4096;
	auto *buf = static_cast<uint8_t *>(
		mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	if (buf == MAP_FAILED) {
		result("dma-revoked-after-unmap", false, "mmap: %d", errno);
		return;
	}
	const uint64_t iova = 0x40000000; /* 1 GiB: inside VT-d's range, clear of other maps */
	std::memset(buf, 0x11, len);
	int rc = c.dma_map(buf, iova, len);
	/* Control: while mapped, edu writes its buffer (the pattern set below) into memory. */
	std::vector<uint8_t> pattern(kEduMaxXfer);
	for (size_t i = 0; i < pattern.size(); i++)
		pattern[i] = uint8_t(0xA0 ^ i);
	std::memcpy(buf + 4096, pattern.data(), pattern.size());
	int r1 = rc < 0 ? rc : edu_dma(dev, iova + 4096, kEduBuf, kEduMaxXfer, 0);
	int r2 = r1 < 0 ? r1 : edu_dma(dev, kEduBuf, iova, kEduMaxXfer, kCmdToRam);
	bool reached = r2 == 0 && std::memcmp(buf, pattern.data(), pattern.size()) == 0;
	int urc = c.dma_unmap(iova, len);
	std::memset(buf, 0x5A, len);
	int r3 = edu_dma(dev, kEduBuf, iova, kEduMaxXfer, kCmdToRam);
	size_t touched = 0;
	for (size_t i = 0; i < len; i++)
		touched += buf[i] != 0x5A;
	result("dma-revoked-after-unmap", rc == 0 && reached && urc == 0 && r3 == 0 && touched == 0,
	       "map %d, DMA reached memory while mapped: %d, unmap %d, after unmap %zu bytes "
	       "changed (DMA rc %d)",
	       rc, int(reached), urc, touched, r3);
	munmap(buf, len);
}

void test_errors(Container &c)
{
	auto *buf = static_cast<uint8_t *>(
		mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
	auto ranges = c.iova_ranges();
	/* The interrupt window at 0xfee00000 is never a valid IOVA on x86. */
	int r1 = c.dma_map(buf, 0xfee00000, 4096);
	uint64_t past = ranges.back().last == UINT64_MAX ? 0 : ranges.back().last + 1;
	int r2 = past ? c.dma_map(buf, past, 4096) : -ERANGE;
	result("iova-outside-ranges-erange", r1 == -ERANGE && r2 == -ERANGE,
	       "map at 0xfee00000: %d, at 0x%" PRIx64 " (past the last range): %d (want %d)", r1,
	       past, r2, -ERANGE);

	int r3 = c.dma_map(buf, 0x10000000, 4096);
	int r4 = c.dma_map(buf, 0x10000000, 4096);
	int r5 = c.dma_unmap(0x20000000, 4096);
	int r6 = c.dma_map(buf, 0x10000001, 4096);
	c.dma_unmap(0x10000000, 4096);
	result("map-errors", r3 == 0 && r4 == -EEXIST && r5 == -ENOENT && r6 == -EINVAL,
	       "overlap %d (want %d), unmap of nothing %d (want %d), misaligned %d (want %d)", r4,
	       -EEXIST, r5, -ENOENT, r6, -EINVAL);

	/* The limit the kernel reported (dma_entry_limit; the guest lowers it to keep this
	 * short): fill it with 4 KiB maps of one page, then one more. */
	size_t left = c.mappings_left();
	auto info = c.iommu_info();
	if (!info.has_dma_avail || left > 4096) {
		result("mapping-limit-enospc", false,
		       "DMA_AVAIL %s, %zu mappings left (the guest sets dma_entry_limit=256)",
		       info.has_dma_avail ? "present" : "absent", left);
		munmap(buf, 4096);
		return;
	}
	const uint64_t base = 0x80000000;
	size_t made = 0;
	int rc = 0;
	for (; made < left; made++) {
		rc = c.dma_map(buf, base + made * 4096, 4096);
		if (rc < 0)
			break;
	}
	int over = c.dma_map(buf, base + made * 4096, 4096);
	for (size_t i = 0; i < made; i++)
		c.dma_unmap(base + i * 4096, 4096);
	result("mapping-limit-enospc", rc == 0 && over == -ENOSPC && c.mapping_count() == 0,
	       "DMA_AVAIL %u: %zu maps made, the next %d (want %d)", info.dma_avail, made, over,
	       -ENOSPC);
	munmap(buf, 4096);
}

void test_mlx5_refuses(const std::string &addr)
{
	/* A refused device leaves no fd (container, group, device, eventfd) and no BAR mapping
	 * (the device's mappings show as anon_inode:[vfio-device] in /proc/self/maps). */
	size_t fds0 = count_entries("/proc/self/fd");
	size_t bars0 = count_lines("/proc/self/maps", "[vfio-device]");
	int rc = 0;
	bool empty = false;
	std::string log = capture_stderr([&] {
		std::shared_ptr<Container> c;
		rc = Container::create(&c);
		if (rc < 0)
			return;
		std::unique_ptr<Device> d;
		rc = Device::open(addr, c, &d);
		if (rc < 0)
			return;
		mem::DmaSpace space(d->dma());
		std::unique_ptr<mlx5::Device> dev;
		rc = mlx5::Device::open(*d, space, mlx5::DeviceOptions{}, &dev);
		empty = dev == nullptr && space.pool_count() == 0;
	});
	size_t fds1 = count_entries("/proc/self/fd");
	size_t bars1 = count_lines("/proc/self/maps", "[vfio-device]");
	bool named = log.find("1234:11e8") != std::string::npos &&
		     log.find("not a ConnectX") != std::string::npos;
	if (!log.empty() && log.back() == '\n')
		log.pop_back();
	std::printf("mlx5 check said: %s\n", log.c_str());
	/* The group went back to the kernel: a new container can take it at once. */
	std::shared_ptr<Container> c2;
	std::unique_ptr<Device> again;
	int reopen = Container::create(&c2);
	if (reopen == 0)
		reopen = Device::open(addr, c2, &again);
	result("mlx5-refuses-edu",
	       rc == -ENODEV && empty && named && fds0 == fds1 && bars0 == bars1 && reopen == 0,
	       "rc %d (want %d), message names the device: %d, fds %zu -> %zu, BAR mappings "
	       "%zu -> %zu, reopened in a new container: %d",
	       rc, -ENODEV, int(named), fds0, fds1, bars0, bars1, reopen);
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 3) {
		std::fprintf(stderr, "usage: %s <edu PCI address> [<second edu>]\n", argv[0]);
		return 2;
	}
	std::string addr = argv[1];
	std::string addr2 = argc == 3 ? argv[2] : "";
	{
		std::shared_ptr<Container> c;
		int rc = Container::create(&c);
		std::unique_ptr<Device> dev;
		if (rc == 0)
			rc = Device::open(addr, c, &dev);
		size_t bars = count_lines("/proc/self/maps", "[vfio-device]");
		result("vfio-open",
		       rc == 0 && dev && dev->id().vendor == 0x1234 && dev->id().device == 0x11e8 &&
			       bars >= 1,
		       "rc %d, id %04x:%04x, group %d, BAR0 %zu bytes (%zu mapping in "
		       "/proc/self/maps), MSI %u, MSI-X %u, reset %d",
		       rc, dev ? dev->id().vendor : 0, dev ? dev->id().device : 0,
		       dev ? dev->iommu_group() : -1, dev ? dev->bar0_size() : 0, bars,
		       dev ? dev->msi_count() : 0, dev ? dev->msix_count() : 0,
		       dev ? int(dev->can_reset()) : 0);
		if (rc < 0)
			return 1;
		auto info = c->iommu_info();
		std::string rs;
		for (auto &r : info.ranges) {
			char b[64];
			std::snprintf(b, sizeof(b), " [0x%" PRIx64 ",0x%" PRIx64 "]", r.start,
				      r.last);
			rs += b;
		}
		result("iommu-info", !info.ranges.empty() && c->min_page_size() == 4096,
		       "page sizes 0x%" PRIx64 ", DMA_AVAIL %s %u, ranges%s", info.page_sizes,
		       info.has_dma_avail ? "present" : "absent", info.dma_avail, rs.c_str());

		dev->bar0_write32(kEduLive, 0x12345678);
		uint32_t live = dev->bar0_read32(kEduLive);
		uint32_t ident = dev->bar0_read32(0);
		result("edu-bar0-mmio", live == ~0x12345678u && (ident & 0xff) == 0xed,
		       "liveness 0x%08x (want 0x%08x), ident 0x%08x", live, ~0x12345678u, ident);
		/* Device::open reset the function (when it can) and set Bus Master Enable; the
		 * test never sets it itself, so every DMA below proves the open path did. */
		uint16_t cmd = 0;
		rc = dev->config_read(PCI_COMMAND, &cmd, 2);
		result("bus-master-set-by-open",
		       rc == 0 && (cmd & PCI_COMMAND_MASTER) && dev->bus_master() &&
			       dev->was_reset_at_open() == dev->can_reset(),
		       "rc %d, command 0x%04x, can_reset %d, reset at open %d", rc, cmd,
		       int(dev->can_reset()), int(dev->was_reset_at_open()));
		/* The kernel saves and restores config space around VFIO_DEVICE_RESET
		 * (pci_try_reset_function), so a later reset keeps bus mastering on. */
		int rr = dev->reset();
		cmd = 0;
		dev->config_read(PCI_COMMAND, &cmd, 2);
		result("device-reset",
		       dev->can_reset() ? rr == 0 && (cmd & PCI_COMMAND_MASTER) : rr == -ENOTTY,
		       "can_reset %d, reset() %d, command after it 0x%04x", int(dev->can_reset()),
		       rr, cmd);

		test_roundtrip(*dev, c, addr2);
		test_revocation(*dev, *c);
		test_errors(*c);
	}
	/* Everything above is closed: the group is free for a new container. */
	test_mlx5_refuses(addr);
	std::printf("vfio-guest-test: %d failure(s)\n", failures);
	return failures == 0 ? 0 : 1;
}
