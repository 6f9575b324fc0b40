/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration engine at testmr's prompt: a device of the native API (include/nicmr/nicmr.h,
 * spec "emu"), opened at the first command of the mr, key or window sections, with one PD, and
 * the engine pools, MRs and windows the user made. Every command goes through the native API
 * only, as an application's would.
 */
#ifndef NICMR_TESTMR_ENGINE_H
#define NICMR_TESTMR_ENGINE_H

#include <memory>

#include "testmr_cmd.h"
#include "testmr_out.h"

namespace nicmr::testmr {

class Engine {
public:
	/* Opens the native API's device (spec) and its PD. Negative errno, printed, on failure. */
	static int open(const char *spec, Reporter &out, std::unique_ptr<Engine> *engine);
	/* Releases what the user left: windows, sub-MRs, MRs, pools, the PD, the device. */
	~Engine();
	Engine(const Engine &) = delete;
	Engine &operator=(const Engine &) = delete;

	/* Runs one command of the mr, key or window sections; 0 or a printed negative errno. */
	int run(const Command &cmd);

	struct State;

private:
	explicit Engine(Reporter &out);
	std::unique_ptr<State> s_;
};

} // namespace nicmr::testmr

#endif
