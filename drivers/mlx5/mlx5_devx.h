/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The DEVX transport: the same encoded PRM commands, handed to a ConnectX that the kernel's
 * mlx5_core owns, through rdma-core's mlx5dv_devx_* calls. Built only with rdma-core; it needs
 * a real NIC to run (nothing on this path is emulated).
 *
 *   command               DEVX call                      why
 *   ALLOC_PD, CREATE_MKEY mlx5dv_devx_obj_create         the kernel tracks the object and
 *                                                        destroys it if the process dies
 *   QUERY_MKEY            mlx5dv_devx_obj_query          (objects this transport created)
 *   DEALLOC_PD,           mlx5dv_devx_obj_destroy        the kernel builds the destroy command
 *   DESTROY_MKEY                                         from the create; our bytes are not sent
 *   anything else         mlx5dv_devx_general_cmd
 *
 * Bring-up commands (ENABLE_HCA, pages, INIT_HCA) belong to the kernel under DEVX: the firmware
 * refuses them from user space. Slow path; thread-safe (a mutex around the object table).
 */
#ifndef NICMR_MLX5_DEVX_H
#define NICMR_MLX5_DEVX_H

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "mlx5_cmd.h"

struct ibv_context;
struct mlx5dv_devx_obj;

namespace nicmr::mlx5 {

class DevxTransport final : public CmdTransport {
public:
	/*
	 * Opens the RDMA device named ibdev ("mlx5_0") with DEVX. Errors: -ENODEV (no such
	 * device, or not an mlx5 device), -EOPNOTSUPP (DEVX refused: kernel or firmware without
	 * it, or missing CAP_NET_RAW for some objects), -ENOMEM, -EINVAL (null arguments).
	 */
	static int open(const char *ibdev, std::unique_ptr<DevxTransport> *out);
	/* Uses an already opened DEVX context; the caller keeps owning it. */
	explicit DevxTransport(ibv_context *ctx) noexcept : ctx_(ctx) {}
	/* Destroys the objects still alive, then closes the context if open() made it. */
	~DevxTransport() override;
	DevxTransport(const DevxTransport &) = delete;
	DevxTransport &operator=(const DevxTransport &) = delete;

	ibv_context *context() const noexcept { return ctx_; }
	size_t objects() const;

protected:
	int run(const void *in, size_t in_len, void *out, size_t out_len,
		bool log_failure) noexcept override;

private:
	/* (creating opcode, PD number or mkey index) */
	using Key = std::pair<uint16_t, uint32_t>;
	int failed(const char *call, int err, const void *in, const void *out, size_t out_len,
		   bool log_failure) noexcept;

	ibv_context *ctx_ = nullptr;
	bool own_ctx_ = false;
	mutable std::mutex mu_;
	std::map<Key, mlx5dv_devx_obj *> objs_;
};

} // namespace nicmr::mlx5

#endif
