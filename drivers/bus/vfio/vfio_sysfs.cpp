/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What sysfs says about a device before VFIO is asked: it lets an open fail with a message
 * that names the fix (bind the device, turn the IOMMU on, free the group) instead of the bare
 * errno the VFIO ioctls would give.
 *
 *   <sysfs>/bus/pci/devices/<addr>/driver       -> .../drivers/<name>   (absent: no driver)
 *   <sysfs>/bus/pci/devices/<addr>/iommu_group  -> .../iommu_groups/<N> (absent: IOMMU off)
 *   <sysfs>/kernel/iommu_groups/<N>/devices/<addr> every device of the group
 */
#include <dirent.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "nicmr_log.h"
#include "vfio_bus.h"

namespace nicmr::bus::vfio {
namespace {

/* Basename of a symlink's target; "" when there is no link. */
std::string link_name(const std::string &path)
{
	char buf[4096];
	ssize_t n = readlink(path.c_str(), buf, sizeof(buf) - 1);
	if (n <= 0)
		return {};
	buf[n] = '\0';
	std::string s(buf);
	auto slash = s.rfind('/');
	return slash == std::string::npos ? s : s.substr(slash + 1);
}

bool exists(const std::string &path)
{
	return access(path.c_str(), F_OK) == 0;
}

/* Drivers that may share a group with vfio-pci: they never DMA on their own behalf. */
bool driver_viable(const std::string &drv)
{
	return drv.empty() || drv == "vfio-pci" || drv == "pci-stub" || drv == "pcieport";
}

} // namespace

int normalize_pci_addr(const std::string &in, std::string *out)
{
	unsigned dom = 0, bus, dev, fn;
	char tail;
	/* scanf's %x would also take "0x" prefixes and signs: hex digits and separators only. */
	for (char ch : in)
		if (!std::isxdigit(static_cast<unsigned char>(ch)) && ch != ':' && ch != '.')
			return -EINVAL;
	if (std::sscanf(in.c_str(), "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
		dom = 0;
		if (std::sscanf(in.c_str(), "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3)
			return -EINVAL;
	}
	if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
		return -EINVAL;
	char buf[16];
	std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	*out = buf;
	return 0;
}

int check_device(const Paths &paths, const std::string &pci_addr, int *group)
{
	std::string addr;
	if (normalize_pci_addr(pci_addr, &addr) < 0) {
		NICMR_LOG(error, "vfio", "'%s' is not a PCI address (want 0000:03:00.0)",
			  pci_addr.c_str());
		return -EINVAL;
	}
	std::string dev = paths.sysfs + "/bus/pci/devices/" + addr;
	if (!exists(dev)) {
		NICMR_LOG(error, "vfio",
			  "no PCI device %s (devtools/nicmr-devbind --status lists them)",
			  addr.c_str());
		return -ENODEV;
	}
	std::string grp = link_name(dev + "/iommu_group");
	if (grp.empty()) {
		NICMR_LOG(
			error, "vfio",
			"%s has no IOMMU group: the IOMMU is off; boot with intel_iommu=on (Intel) "
			"or amd_iommu=on (AMD)",
			addr.c_str());
		return -ENXIO;
	}
	std::string drv = link_name(dev + "/driver");
	if (drv != "vfio-pci") {
		NICMR_LOG(error, "vfio",
			  "%s is bound to %s, not vfio-pci; bind it with: devtools/nicmr-devbind "
			  "--bind vfio-pci %s",
			  addr.c_str(), drv.empty() ? "no driver" : drv.c_str(), addr.c_str());
		return -EBUSY;
	}
	std::string members = paths.sysfs + "/kernel/iommu_groups/" + grp + "/devices";
	DIR *d = opendir(members.c_str());
	if (d == nullptr) {
		int err = errno;
		NICMR_LOG(error, "vfio", "cannot list IOMMU group %s (%s)", grp.c_str(),
			  members.c_str());
		return -err;
	}
	int rc = 0;
	while (struct dirent *e = readdir(d)) {
		if (e->d_name[0] == '.')
			continue;
		std::string other = e->d_name;
		std::string driver_link = members;
		driver_link.append("/").append(other).append("/driver");
		std::string odrv = link_name(driver_link);
		if (!driver_viable(odrv)) {
			NICMR_LOG(error, "vfio",
				  "IOMMU group %s is not viable: %s in it is bound to %s; bind it "
				  "too "
				  "(devtools/nicmr-devbind --bind vfio-pci %s) or unbind it",
				  grp.c_str(), other.c_str(), odrv.c_str(), other.c_str());
			rc = -EPERM;
			break;
		}
	}
	closedir(d);
	if (rc < 0)
		return rc;
	char *end;
	long n = std::strtol(grp.c_str(), &end, 10);
	if (*end != '\0' || n < 0) {
		NICMR_LOG(error, "vfio", "IOMMU group name '%s' of %s is not a number", grp.c_str(),
			  addr.c_str());
		return -EPROTO;
	}
	*group = static_cast<int>(n);
	return 0;
}

} // namespace nicmr::bus::vfio
