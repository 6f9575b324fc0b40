/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_eal.h"

#include <getopt.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "testmr_telemetry.h"

namespace nicmr::testmr {

int eal_start(int argc, char **argv, FILE *out)
{
	/* Before rte_eal_init, as DPDK's own libraries register theirs (from constructors): the
	 * list is then complete before the telemetry threads that read it exist, and those
	 * threads' creation orders them after it. Registered later, the list would be written
	 * while a client's thread may read it, ordered only by DPDK's spinlock (callback_sl in
	 * lib/telemetry/telemetry.c), which ThreadSanitizer cannot see in an uninstrumented
	 * librte_telemetry. */
	if (int rc = telemetry_register(); rc != 0) {
		std::fprintf(stderr, "testmr: rte_telemetry_register_cmd: %s\n",
			     std::strerror(-rc));
		return 1;
	}
	/* testmr's own options were parsed with getopt_long already: EAL parses with it too,
	 * from the start (glibc's getopt re-initialises at optind 0). */
	optind = 0;
	const int used = rte_eal_init(argc, argv);
	if (used < 0) {
		const int err = rte_errno;
		std::fprintf(stderr, "testmr: rte_eal_init: %s\n", rte_strerror(err));
		return err == EINVAL ? 2 : 1;
	}
	/* rte_eal_init returns how many words it took after argv[0]: any left over is no EAL
	 * option (testmr's options go after `--`). */
	if (used != argc - 1) {
		std::fprintf(stderr,
			     "testmr: '%s' is not an EAL option (testmr's options go after --)\n"
			     "try 'testmr --help'\n",
			     argv[used + 1]);
		rte_eal_cleanup();
		return 2;
	}
	/* DPDK creates the socket in rte_eal_init, unless --no-telemetry said not to (22.11 has
	 * no call that says whether telemetry runs: the socket tells). */
	const std::string sock = std::string(rte_eal_get_runtime_dir()) + "/dpdk_telemetry.v2";
	struct stat st;
	if (stat(sock.c_str(), &st) == 0)
		std::fprintf(out,
			     "EAL up: telemetry /nicmr/device /nicmr/pools /nicmr/mrs "
			     "/nicmr/stats /nicmr/keys/violations on %s\n",
			     sock.c_str());
	else
		std::fprintf(out, "EAL up: no telemetry socket (%s: %s)\n", sock.c_str(),
			     std::strerror(errno));
	return 0;
}

void eal_stop()
{
	rte_eal_cleanup();
}

} // namespace nicmr::testmr
