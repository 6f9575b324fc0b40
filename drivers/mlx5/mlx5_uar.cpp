/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <new>

#include "mlx5_dp_commands.h"
#include "mlx5_uar.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {

Uar::Uar(Device &dev, uint32_t index)
    : dev_(dev), fn_(dev.function()), index_(index),
      sq_db_(prm::uar::page_offset(index) + prm::uar::sq_doorbell_offset)
{}

int Uar::alloc(Device &dev, std::unique_ptr<Uar> *out)
{
	uint32_t index = 0;
	int rc = alloc_uar(dev.cmdq(), &index);
	if (rc != 0)
		return rc;
	if (prm::uar::page_offset(index) + prm::uar::page_size > dev.function().bar0_size()) {
		NICMR_LOG(error, "mlx5", "%s: UAR %u lies beyond BAR 0 (%zu bytes)",
			  dev.function().name().c_str(), index, dev.function().bar0_size());
		dealloc_uar(dev.cmdq(), index);
		return -ERANGE;
	}
	Uar *u = new (std::nothrow) Uar(dev, index);
	if (u == nullptr) {
		dealloc_uar(dev.cmdq(), index);
		return -ENOMEM;
	}
	out->reset(u);
	return 0;
}

Uar::~Uar()
{
	int rc = dealloc_uar(dev_.cmdq(), index_);
	if (rc != 0)
		NICMR_LOG(error, "mlx5", "%s: DEALLOC_UAR %u failed: %d", fn_.name().c_str(),
			  index_, rc);
}

} // namespace nicmr::mlx5
