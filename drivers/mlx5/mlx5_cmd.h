/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The command transport: how an encoded PRM command reaches a device and its output comes back.
 *
 *   encoders (mlx5_commands.h) --bytes--> CmdTransport::exec --+--> CmdQueue (BAR 0 command queue:
 *                                                              |    emulated function, VFIO)
 *                                                              +--> DevxTransport (rdma-core DEVX
 *                                                                   on a kernel-owned ConnectX)
 *
 * Every transport hands the device exactly the bytes the encoder produced, and interprets the
 * output header (status, syndrome) the same way: status_to_errno() below is the one mapping.
 * Commands are a slow path: transports may lock, sleep and log.
 */
#ifndef NICMR_MLX5_CMD_H
#define NICMR_MLX5_CMD_H

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace nicmr::mlx5 {

/* Negative errno for a PRM command status (0 for ok); doc/mlx5-driver.md has the table. */
int status_to_errno(uint8_t status) noexcept;
/* "BAD_PARAM", ...; "UNKNOWN" for values the PRM subset does not name. */
const char *status_name(uint8_t status) noexcept;
/* "CREATE_MKEY", ...; "UNKNOWN" for others. */
const char *opcode_name(uint16_t opcode) noexcept;

class CmdTransport {
public:
	virtual ~CmdTransport() = default;

	/*
	 * Executes one command: in_len bytes of input (a PRM command, header first), out_len bytes
	 * of output. Returns 0 when the command ran and its status is ok; the negative errno of
	 * status_to_errno() when the device refused it (the log line names the opcode, status and
	 * syndrome); -EINVAL for lengths below the 8-byte headers or above max_message; -ETIMEDOUT
	 * when the device did not answer in time; -EIO for a delivery error or a broken queue;
	 * -ENOMEM when no DMA memory is left for mailboxes. Thread-safe.
	 */
	int exec(const void *in, size_t in_len, void *out, size_t out_len) noexcept
	{
		return run(in, in_len, out, out_len, true);
	}
	/* The same, but a refused command is not logged (probing optional features). */
	int exec_quiet(const void *in, size_t in_len, void *out, size_t out_len) noexcept
	{
		return run(in, in_len, out, out_len, false);
	}

	/* Status and syndrome of the most recent command that produced output (for tests). */
	uint8_t last_status() const noexcept
	{
		return last_status_.load(std::memory_order_relaxed);
	}
	uint32_t last_syndrome() const noexcept
	{
		return last_syndrome_.load(std::memory_order_relaxed);
	}

	/* Largest input or output a transport accepts (8 MiB: 16384 mailboxes). */
	static constexpr size_t max_message = size_t{8} << 20;

protected:
	virtual int run(const void *in, size_t in_len, void *out, size_t out_len,
			bool log_failure) noexcept = 0;
	/*
	 * Shared by every transport once output has arrived: records status and syndrome, logs a
	 * refusal as "<who>: <OPCODE> (0x..) op_mod 0x..: status <NAME> (0x..) syndrome 0x..",
	 * returns status_to_errno().
	 */
	int finish(const char *who, const void *in, const void *out, bool log_failure) noexcept;
	static int check_lengths(size_t in_len, size_t out_len) noexcept;

private:
	std::atomic<uint8_t> last_status_{0};
	std::atomic<uint32_t> last_syndrome_{0};
};

} // namespace nicmr::mlx5

#endif
