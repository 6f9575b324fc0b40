/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A testmr session: one emulated ConnectX (PCI function, IOMMU, device model), the DMA space of
 * its IOMMU, the mlx5 driver brought up on it, and the pools, PDs and mkeys the user made.
 * Commands (testmr_cmd.h) run against a session and print what they did to its output stream.
 */
#ifndef NICMR_TESTMR_SESSION_H
#define NICMR_TESTMR_SESSION_H

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "emu_mlx5.h"
#include "mem_space.h"
#include "mlx5_device.h"
#include "testmr_cmd.h"
#include "testmr_out.h"

namespace nicmr::testmr {

struct SessionConfig {
	emu::DoorbellDelivery delivery = emu::DoorbellDelivery::inline_call;
	/* The pool `demo` creates. */
	uint64_t demo_pool_size = uint64_t{64} << 20;
	uint64_t demo_page_size = uint64_t{2} << 20;
	int demo_node = -1;
	bool demo_fallback = true;
	/* The native API device the mr, key and window commands open at their first use. */
	const char *engine_spec = "emu";
	/* DPDK's EAL is up (EAL options before --): the engine's device attaches its memory. */
	bool eal = false;
};

class Engine;

class Session {
public:
	/* Opens the emulated NIC. Negative errno on failure (logged). */
	static int open(const SessionConfig &cfg, FILE *out, std::unique_ptr<Session> *session);
	~Session();
	Session(const Session &) = delete;
	Session &operator=(const Session &) = delete;

	/* Runs one command; 0, or a negative errno that was printed with its reason. */
	int run(const Command &cmd);
	/* Parses and runs one line; a parse error is printed and returns -EINVAL. */
	int run_line(const std::string &line);
	bool quit_requested() const noexcept { return quit_; }
	/* The message of the last command that failed. */
	const std::string &last_error() const noexcept { return rep_.last_error(); }

private:
	Session(const SessionConfig &cfg, FILE *out);
	int help(const std::string &section);
	int engine_run(const Command &cmd);
	int pool_create(uint64_t size, uint64_t page_size, int node, bool fallback, uint64_t *id);
	int pool_destroy(uint64_t id);
	int show_pool(uint64_t id, bool json = false);
	int show_pools(bool json = false);
	int show_device(bool json = false);
	std::string pool_json(uint64_t id) const;
	int translate(uint64_t id, uint64_t offset);
	int pd_alloc(uint32_t *pd);
	int pd_free(uint32_t pd);
	int mkey_create(const Command &cmd, uint32_t *index);
	int mkey_query(uint32_t index);
	int mkey_destroy(uint32_t index);
	int rdma();
	int demo();

	SessionConfig cfg_;
	FILE *out_;
	Reporter rep_;
	/* Destroyed in reverse: driver objects, driver, pools and space, then the device. */
	std::unique_ptr<emu::EmuMlx5> nic_;
	std::unique_ptr<mem::DmaSpace> space_;
	std::map<uint64_t, const mem::PoolEntry *> pools_; /* by the id the user sees */
	std::unique_ptr<mlx5::Device> dev_;
	std::map<uint32_t, mlx5::PdHandle> pds_; /* by PD number */
	struct Mkey {
		mlx5::MkeyHandle handle;
		uint32_t pd = 0;
	};
	std::map<uint32_t, Mkey> mkeys_; /* by mkey index */
	/* The registration engine (NICMR_TESTMR_REG builds), opened at its first command and
	 * closed before everything else. */
#if NICMR_TESTMR_REG
	std::unique_ptr<Engine> engine_;
#endif
	uint64_t next_pool_id_ = 0;
	bool quit_ = false;
};

} // namespace nicmr::testmr

#endif
