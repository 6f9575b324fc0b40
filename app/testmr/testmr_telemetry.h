/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr's DPDK telemetry endpoints (/nicmr/device, /nicmr/pools, /nicmr/mrs, /nicmr/stats,
 * /nicmr/keys/violations) and the lock that makes the registration engine safe to read from DPDK's
 * telemetry thread.
 *
 * Two kinds of threads touch the engine once EAL is up: testmr's command thread (every mr, key
 * and window command, the engine's opening and its closing) and DPDK's telemetry threads (the
 * endpoints' callbacks: DPDK 22.11 runs one thread per connected client, lib/telemetry/
 * telemetry.c client_handler, so two clients call them at once). The command thread holds the
 * engine lock while it opens, runs or closes the engine, and publishes the engine under it; a
 * callback takes the lock, reads the published engine (Engine::view) and lets go before it formats
 * the answer. None of this is a hot path: a command at the prompt, a telemetry request.
 */
#ifndef NICMR_TESTMR_TELEMETRY_H
#define NICMR_TESTMR_TELEMETRY_H

#include <mutex>

namespace nicmr::testmr {

class Engine;

/* The engine lock. It is never destroyed: a telemetry request may still come while the
 * process exits. */
std::mutex &engine_lock();

/* The engine the endpoints read (nullptr: none, and they answer null). The caller holds
 * engine_lock(). */
void telemetry_publish(const Engine *engine);

/*
 * Registers the endpoints with rte_telemetry_register_cmd: call once, before rte_eal_init
 * (testmr_eal.cpp says why).
 * 0, or the first negative errno of rte_telemetry_register_cmd (-EINVAL, -ENOMEM).
 */
int telemetry_register();

} // namespace nicmr::testmr

#endif
