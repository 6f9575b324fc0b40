/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration engine at testmr's prompt: a device of the native API (include/nicmr/nicmr.h,
 * spec "emu"), opened at the first command of the mr, key or window sections, with one PD, and
 * the engine pools, MRs and windows the user made. Every command goes through the native API
 * only, as an application's would.
 */
#ifndef NICMR_TESTMR_ENGINE_H
#define NICMR_TESTMR_ENGINE_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nicmr/nicmr.h"
#include "testmr_cmd.h"
#include "testmr_out.h"

namespace nicmr::testmr {

/*
 * What the engine holds, read by the telemetry endpoints (testmr_telemetry.cpp): the device's
 * query and counters (native API) and the pools and MRs of the session (testmr's records).
 */
struct EngineView {
	std::string spec;
	int query_rc = 0; /* nicmr_device_query's code; attr is valid when 0 */
	nicmr_device_attr attr{};
	int stats_rc = 0; /* nicmr_device_get_stats's code; stats is valid when 0 */
	nicmr_device_stats stats{};
	struct Pool {
		uint64_t id = 0;
		uintptr_t addr = 0;
		size_t len = 0;
		size_t page_size = 0; /* nicmr_pool_page_size: 4 KiB after a fallback */
		size_t mrs = 0;	      /* MRs of the session whose bytes are in it */
		uint64_t mr_bytes = 0;
	};
	std::vector<Pool> pools;
	struct Mr {
		uint32_t key = 0;
		const char *kind = "reg";
		uint64_t pool = 0;
		size_t len = 0;
		uint64_t access = 0;
	};
	std::vector<Mr> mrs;
	size_t windows = 0;
	int violations_rc = 0; /* nicmr_key_violations's code (negative), else 0 */
	std::vector<nicmr_key_violation> violations; /* by key */
	uint64_t violations_dropped = 0;
};

class Engine {
public:
	/* Opens the native API's device (spec) and its PD. Negative errno, printed, on failure. */
	/* eal: DPDK's EAL is up; the device then takes its memory as pools
	 * (nicmr_dpdk_mem_attach) and the mempool commands work. */
	static int open(const char *spec, Reporter &out, bool eal, std::unique_ptr<Engine> *engine);
	/* Releases what the user left: windows, sub-MRs, MRs, pools, the PD, the device. */
	~Engine();
	Engine(const Engine &) = delete;
	Engine &operator=(const Engine &) = delete;

	/* Runs one command of the mr, key or window sections; 0 or a printed negative errno. */
	int run(const Command &cmd);
	/* Fills v. Not concurrently with run(): the caller holds the engine lock
	 * (testmr_telemetry.h) when another thread may run commands. */
	void view(EngineView *v) const;

	struct State;

private:
	Engine(Reporter &out, const char *spec);
	std::unique_ptr<State> s_;
};

} // namespace nicmr::testmr

#endif
