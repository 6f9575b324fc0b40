/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UD sends: the WQE of rdma-core's _mlx5_post_send for an IBV_QPT_UD QP (providers/mlx5/qp.c):
 *
 *   | ctrl (SEND / SEND_IMM, 16 B) | datagram segment (mlx5_wqe_av, 48 B) | data segments |
 *
 * doc/data-path.md ("UD QPs") and doc/device-model.md say what the device does with it.
 */
#include <cerrno>

#include "mlx5_qp.h"

namespace nicmr::mlx5 {

/* Hot path: no lock, no allocation, no system call. */
int Qp::post_ud_send(std::span<const Sge> sgl, const UdDest &to, bool with_imm, uint32_t imm,
		     uint64_t wr_id, unsigned flags) noexcept
{
	if (!attr_.ud)
		return -ENOTSUP;
	if (sgl.size() > max_ud_sge() || !prm::fits(prm::wqe_datagram::dqpn, to.qpn))
		return -EINVAL;
	uint64_t total = 0;
	for (const Sge &s : sgl)
		total += s.length;
	/* IBTA C10-93.1.1: a UD message above the path MTU is never sent; refused here, so that
	 * the caller learns it (the device completes such a WQE with LOCAL_LENGTH_ERR). */
	if (total > mtu_bytes())
		return -EMSGSIZE;
	constexpr uint32_t av_ds = prm::wqe_datagram::size / prm::wq::ds_size;
	const uint32_t ds = 1 + av_ds + static_cast<uint32_t>(sgl.size());
	WqeSlot w;
	int rc = begin(ds, &w);
	if (rc != 0)
		return rc;
	/* The segment fills the ctrl's WQEBB: it never wraps at the ring's end. */
	void *av = w.cur.take(prm::wqe_datagram::size);
	set_datagram(av, to.gid.data(), to.qpn, to.q_key, to.udp_sport);
	if (to.force_loopback)
		prm::set(av, prm::wqe_datagram::fl, 1);
	for (const Sge &s : sgl)
		set_data(static_cast<mlx5_wqe_data_seg *>(w.cur.take(prm::wqe_data::size)), s.addr,
			 s.length, s.lkey);
	finish(w, with_imm ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND, ds, imm, wr_id, flags);
	return 0;
}

} // namespace nicmr::mlx5
