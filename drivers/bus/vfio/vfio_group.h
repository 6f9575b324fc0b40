/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Private: an IOMMU group joined to a Container. The devices of one group opened on one
 * container share it (the kernel lets a group be opened once); the last one to close it takes
 * the group out of the container.
 */
#ifndef NICMR_VFIO_GROUP_H
#define NICMR_VFIO_GROUP_H

#include <memory>

#include "vfio_bus.h"

namespace nicmr::bus::vfio {

class Group {
public:
	Group(int number, int fd, std::shared_ptr<Container> container)
	    : number_(number), fd_(fd), container_(std::move(container))
	{}
	~Group();
	Group(const Group &) = delete;
	Group &operator=(const Group &) = delete;

	int number() const noexcept { return number_; }
	int fd() const noexcept { return fd_; }
	/* Set once VFIO_GROUP_SET_CONTAINER succeeded: the destructor must undo it. */
	bool attached = false;

private:
	int number_;
	int fd_;
	std::shared_ptr<Container> container_;
};

} // namespace nicmr::bus::vfio

#endif
