/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DEVX transport: routes each encoded command to the rdma-core call that fits it.
 */
#include <cerrno>
#include <cstring>
#include <new>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include "mlx5_devx.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {
namespace {

constexpr const char *kLog = "mlx5-devx";

/* The object a create/destroy/query command names: (creating opcode, id). */
bool object_of(const void *in, const void *out, uint16_t *create_op, uint32_t *id, bool *is_create,
	       bool *is_destroy, bool *is_query) noexcept
{
	*is_create = *is_destroy = *is_query = false;
	switch (prm::get(in, prm::cmd_hdr_in::opcode)) {
	case prm::opcode::alloc_pd:
		*create_op = prm::opcode::alloc_pd;
		*id = out != nullptr ? static_cast<uint32_t>(prm::get(out, prm::alloc_pd_out::pd))
				     : 0;
		*is_create = true;
		return true;
	case prm::opcode::dealloc_pd:
		*create_op = prm::opcode::alloc_pd;
		*id = static_cast<uint32_t>(prm::get(in, prm::dealloc_pd_in::pd));
		*is_destroy = true;
		return true;
	case prm::opcode::create_mkey:
		*create_op = prm::opcode::create_mkey;
		*id = out != nullptr ? static_cast<uint32_t>(
					       prm::get(out, prm::create_mkey_out::mkey_index))
				     : 0;
		*is_create = true;
		return true;
	case prm::opcode::destroy_mkey:
		*create_op = prm::opcode::create_mkey;
		*id = static_cast<uint32_t>(prm::get(in, prm::destroy_mkey_in::mkey_index));
		*is_destroy = true;
		return true;
	case prm::opcode::query_mkey:
		*create_op = prm::opcode::create_mkey;
		*id = static_cast<uint32_t>(prm::get(in, prm::query_mkey_in::mkey_index));
		*is_query = true;
		return true;
	default:
		return false;
	}
}

} // namespace

int DevxTransport::open(const char *ibdev, std::unique_ptr<DevxTransport> *out)
{
	if (ibdev == nullptr || out == nullptr)
		return -EINVAL;
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);
	if (list == nullptr)
		return -ENODEV;
	ibv_context *ctx = nullptr;
	int rc = -ENODEV;
	for (int i = 0; i < n; i++) {
		if (std::strcmp(ibv_get_device_name(list[i]), ibdev) != 0)
			continue;
		if (!mlx5dv_is_supported(list[i]))
			break;
		mlx5dv_context_attr attr{};
		attr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
		ctx = mlx5dv_open_device(list[i], &attr);
		rc = ctx != nullptr ? 0 : -EOPNOTSUPP;
		break;
	}
	ibv_free_device_list(list);
	if (rc != 0) {
		NICMR_LOG(error, kLog, "%s: cannot open with DEVX (%d)", ibdev, rc);
		return rc;
	}
	std::unique_ptr<DevxTransport> t(new (std::nothrow) DevxTransport(ctx));
	if (!t) {
		ibv_close_device(ctx);
		return -ENOMEM;
	}
	t->own_ctx_ = true;
	*out = std::move(t);
	return 0;
}

DevxTransport::~DevxTransport()
{
	std::lock_guard<std::mutex> lock(mu_);
	/* Mkeys before the PDs they live in: the table is ordered by creating opcode, and
	 * CREATE_MKEY (0x200) sorts before ALLOC_PD (0x800). */
	for (auto &o : objs_)
		mlx5dv_devx_obj_destroy(o.second);
	objs_.clear();
	if (own_ctx_ && ctx_ != nullptr)
		ibv_close_device(ctx_);
}

size_t DevxTransport::objects() const
{
	std::lock_guard<std::mutex> lock(mu_);
	return objs_.size();
}

int DevxTransport::failed(const char *call, int err, const void *in, const void *out,
			  size_t out_len, bool log_failure) noexcept
{
	/* A firmware refusal comes back in the output; anything else is the kernel's errno. */
	if (out_len >= prm::cmd_hdr_out::size && prm::get(out, prm::cmd_hdr_out::status) != 0)
		return finish(call, in, out, log_failure);
	if (log_failure)
		NICMR_LOG(error, kLog, "%s: %s (0x%x) failed: errno %d", call,
			  opcode_name(static_cast<uint16_t>(prm::get(in, prm::cmd_hdr_in::opcode))),
			  static_cast<unsigned>(prm::get(in, prm::cmd_hdr_in::opcode)), err);
	return err > 0 ? -err : -EIO;
}

int DevxTransport::run(const void *in, size_t in_len, void *out, size_t out_len,
		       bool log_failure) noexcept
{
	int rc = check_lengths(in_len, out_len);
	if (rc != 0)
		return rc;
	std::memset(out, 0, out_len);
	uint16_t create_op = 0;
	uint32_t id = 0;
	bool is_create, is_destroy, is_query;
	if (object_of(in, nullptr, &create_op, &id, &is_create, &is_destroy, &is_query)) {
		std::lock_guard<std::mutex> lock(mu_);
		if (is_create) {
			errno = 0;
			mlx5dv_devx_obj *obj =
				mlx5dv_devx_obj_create(ctx_, in, in_len, out, out_len);
			if (obj == nullptr)
				return failed("mlx5dv_devx_obj_create", errno, in, out, out_len,
					      log_failure);
			object_of(in, out, &create_op, &id, &is_create, &is_destroy, &is_query);
			try {
				objs_[Key{create_op, id}] = obj;
			} catch (const std::bad_alloc &) {
				mlx5dv_devx_obj_destroy(obj);
				return -ENOMEM;
			}
			return finish("devx", in, out, log_failure);
		}
		auto it = objs_.find(Key{create_op, id});
		if (it != objs_.end() && is_destroy) {
			int err = mlx5dv_devx_obj_destroy(it->second);
			if (err != 0)
				return failed("mlx5dv_devx_obj_destroy", err, in, out, out_len,
					      log_failure);
			objs_.erase(it);
			return finish("devx", in, out, log_failure); /* zeroed: status ok */
		}
		if (it != objs_.end() && is_query) {
			int err = mlx5dv_devx_obj_query(it->second, in, in_len, out, out_len);
			if (err != 0)
				return failed("mlx5dv_devx_obj_query", err, in, out, out_len,
					      log_failure);
			return finish("devx", in, out, log_failure);
		}
		/* Not ours: let the firmware judge it (it answers BAD_INDEX / BAD_PARAM). */
	}
	int err = mlx5dv_devx_general_cmd(ctx_, in, in_len, out, out_len);
	if (err != 0)
		return failed("mlx5dv_devx_general_cmd", err, in, out, out_len, log_failure);
	return finish("devx", in, out, log_failure);
}

} // namespace nicmr::mlx5
