/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target: testmr's command parser reads whatever an operator (or a script) types.
 * Any line must give a command or -EINVAL with a message, and nothing else; a `help SECTION`
 * it accepts names a section the help text has (both come from the one command table).
 */
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "testmr_cmd.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	using namespace nicmr::testmr;
	Command cmd;
	std::string error;
	std::string_view line(reinterpret_cast<const char *>(data), size);
	int rc = parse_command(line, &cmd, &error);
	if (rc != 0 && (rc != -EINVAL || error.empty()))
		std::abort();
	std::string help;
	if (rc == 0 && cmd.verb == Verb::help && command_help(cmd.word, &help) != 0)
		std::abort();
	return 0;
}
