/* SPDX-License-Identifier: BSD-3-Clause */
#include "mlx5_mkey_ext.h"

#include "mr_keys.h"

namespace nicmr::mlx5 {

uint64_t mkey_ext_caps(const Device &dev) noexcept
{
	const Caps &c = dev.caps();
	return c.ext_present ? c.ext_flags : 0;
}

int set_mkey_ext(Device &dev, uint32_t mkey, const MkeyExt &e)
{
	MkeyExtState st;
	if (e.single_use)
		st.flags |= prm::mkey_ext::single_use;
	if (e.disabled)
		st.flags |= prm::mkey_ext::disabled;
	if (e.counted) {
		st.flags |= prm::mkey_ext::counter;
		st.counter_iova = e.counter_iova;
	}
	return dev.set_mkey_ext(mr::mkey_index(mkey), st);
}

} // namespace nicmr::mlx5
