/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr's interactive prompt on a terminal: DPDK's librte_cmdline line editor (rdline) with
 * completion, history and per-token help, as dpdk-testpmd's. The completion instances are made
 * at start-up from testmr's command table (testmr_cmd.h); the lines themselves run through
 * Session::run_line, the parser every other input uses.
 */
#ifndef NICMR_TESTMR_CLI_H
#define NICMR_TESTMR_CLI_H

#include "testmr_session.h"

namespace nicmr::testmr {

/* Reads commands from the terminal on standard input until quit, Ctrl-D on an empty line, or
 * the end of input. 0 when every command succeeded, else the last failure's negative errno;
 * -ENOTTY when standard input is not a terminal, -ENOMEM (said on stderr) when the line editor
 * cannot start. */
int run_prompt(Session &session);

} // namespace nicmr::testmr

#endif
