/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The wire responder's refusal record: every request from another process or host that a key
 * of this device refused (a remote access error NAK, IBTA 9.7.5.2.8) counts under the pair
 * (key, peer), the peer being the requesting QP's GID and number from the responder QP's address
 * path. A ConnectX reports such a refusal only as the responder QP's error and its event (PRM
 * "Local Access Violation WQ Error"); the device model keeps the count so that the owner of a
 * key sees who tried it. A fixed table of kMaxKeyRefusals pairs; once full, further pairs are
 * counted as dropped. Off the hot path: taken only on a refused request.
 */
#include <algorithm>
#include <cstring>

#include "emu_mlx5_dp.h"
#include "emu_mlx5_dp_impl.h"

namespace nicmr::emu {

void EmuDataPath::record_refusal(const Qp &qp, uint32_t rkey, uint32_t rights)
{
	std::lock_guard lk(refusal_mu_);
	auto same = [&](const KeyRefusal &e) {
		return e.rkey == rkey && e.peer_qpn == qp.path.remote_qpn &&
		       std::memcmp(e.peer_gid, qp.path.remote_gid, sizeof(e.peer_gid)) == 0;
	};
	KeyRefusal *e = std::find_if(refusals_.begin(), refusals_.begin() + nrefusals_, same);
	if (e == refusals_.begin() + nrefusals_) {
		if (nrefusals_ == refusals_.size()) {
			refusals_dropped_++;
			return;
		}
		e = &refusals_[nrefusals_++];
		e->rkey = rkey;
		e->peer_qpn = qp.path.remote_qpn;
		std::memcpy(e->peer_gid, qp.path.remote_gid, sizeof(e->peer_gid));
	}
	e->local_qpn = qp.qpn;
	e->rights |= rights;
	e->count++;
}

size_t EmuDataPath::key_refusals(KeyRefusal *out, size_t n, uint64_t *dropped) const
{
	std::lock_guard lk(refusal_mu_);
	std::copy_n(refusals_.begin(), std::min(n, nrefusals_), out);
	if (dropped != nullptr)
		*dropped = refusals_dropped_;
	return nrefusals_;
}

} // namespace nicmr::emu
