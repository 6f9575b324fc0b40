/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr: the testpmd-style tool of nicmr. It opens an emulated ConnectX, then runs commands
 * from the command line (-c), a file (-f), an interactive prompt (-i), or, with none of these,
 * the demo that the README's main job shows.
 */
#include <getopt.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "mem_pool.h"
#include "nicmr/nicmr.h"
#include "testmr_cmd.h"
#if NICMR_TESTMR_REG
#include "testmr_cli.h"
#include "testmr_eal.h"
#endif
#include "testmr_hwcheck.h"
#include "testmr_reg.h"
#include "testmr_session.h"

using namespace nicmr::testmr;

namespace {

void usage(FILE *f)
{
	std::fprintf(
		f,
		"usage: testmr [options]\n"
		"       testmr hw-check [--device SPEC]\n"
		"       testmr EAL-OPTIONS -- [options | hw-check ...]\n"
		"                          DPDK's EAL first (rte_eal_init with the words\n"
		"                          before --), and its telemetry: /nicmr/device,\n"
		"                          /nicmr/pools, /nicmr/mrs, /nicmr/stats,\n"
		"                          /nicmr/keys/violations\n"
		"  -i, --interactive       a prompt (testmr>) reading commands\n"
		"  -c, --command CMD       run CMD (repeatable), then leave\n"
		"  -f, --file FILE         run the commands in FILE, then leave; the first\n"
		"                          that fails stops testmr (FILE:LINE: on stderr)\n"
		"      --delivery MODE     doorbells: inline (default) or thread\n"
		"      --pool-size SIZE    the demo's pool (default 64M)\n"
		"      --page-size SIZE    the demo's page size: 4k, 2m (default) or 1g\n"
		"      --node N            the demo's NUMA node (default: any)\n"
		"      --no-fallback       the demo fails instead of using 4 KiB pages\n"
		"      --provider          the demo's registration part through libfabric's\n"
		"                          fi_mr calls on the nicmr provider\n"
		"      --engine SPEC       the registration engine's device (mr, key and\n"
		"                          window commands): emu[:options] (default emu)\n"
		"      --device SPEC       hw-check's device: emu[:options] (default emu),\n"
		"                          vfio:<PCI address> or devx:<ib device>\n"
		"  -h, --help              this text\n"
		"With no -i, -c or -f, testmr runs the demo. hw-check runs a short smoke test\n"
		"of a device (bring-up, PD, mkeys, pool, CQ, QP, UMR registration, one\n"
		"loopback RDMA WRITE, teardown) and stops at the first step that fails.\n"
		"Exit status: 0 when every command succeeded, 1 when one failed, 2 for bad\n"
		"options (checked before the device opens); hw-check: 0 when every step\n"
		"passed, 1 when one failed.\n\n%s",
		command_help_all().c_str());
}

/* A bad option or value: says which, and exits 2 before anything else happens. */
__attribute__((format(printf, 1, 2))) int usage_error(const char *fmt, ...)
{
	std::fputs("testmr: ", stderr);
	va_list ap;
	va_start(ap, fmt);
	/* clang-tidy 14's analyzer sometimes loses the va_start above (as in nicmr_log.cpp's
	 * log_write): a false report. */
	// NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
	std::vfprintf(stderr, fmt, ap);
	va_end(ap);
	std::fputs("\ntry 'testmr --help'\n", stderr);
	return 2;
}

/* A command file: its lines in order; the first that fails stops it, and is repeated on
 * standard error with its line number and the error, as a compiler names a line. */
int run_file(Session &s, const std::string &path, std::istream &in)
{
	std::string line;
	for (unsigned lineno = 1; !s.quit_requested() && std::getline(in, line); lineno++) {
		if (int r = s.run_line(line); r != 0) {
			std::fflush(stdout);
			std::fprintf(stderr, "%s:%u: %s: %s\n", path.c_str(), lineno, line.c_str(),
				     s.last_error().c_str());
			return r;
		}
	}
	return 0;
}

int run_stream(Session &s, std::istream &in, bool prompt)
{
	std::string line;
	int rc = 0;
	while (!s.quit_requested()) {
		if (prompt) {
			std::fputs("testmr> ", stdout);
			std::fflush(stdout);
		}
		if (!std::getline(in, line))
			break;
		/* A failed command at the prompt does not end the session, but it is remembered
		 * for the exit status as from -c or -f. */
		if (int r = s.run_line(line); r != 0)
			rc = r;
		/* Each command's output as soon as it is done: a program driving testmr through
		 * a pipe waits for it before its next command (two testmrs exchanging addresses).
		 */
		std::fflush(stdout);
	}
	if (prompt)
		std::fputs("\n", stdout);
	return rc;
}

} // namespace

int main(int argc, char **argv)
{
	/*
	 * `testmr [EAL options] -- [testmr options]`, as dpdk-testpmd: the words before the
	 * first `--` are EAL's. testmr's own options are checked first, so that a bad one costs
	 * no EAL start; EAL starts before the device opens.
	 */
	int eal_argc = 0;
	[[maybe_unused]] char **eal_argv = argv; /* EAL's words: only in a build with DPDK */
	std::vector<char *> targv;
	for (int i = 1; i < argc; i++) {
		if (std::strcmp(argv[i], "--") == 0) {
			eal_argc = i;
			break;
		}
	}
	if (eal_argc != 0) {
		targv.push_back(argv[0]);
		targv.insert(targv.end(), argv + eal_argc + 1, argv + argc);
		targv.push_back(nullptr);
		argc = static_cast<int>(targv.size()) - 1;
		argv = targv.data();
	}
	enum {
		opt_delivery = 256,
		opt_pool_size,
		opt_page_size,
		opt_node,
		opt_no_fallback,
		opt_provider,
		opt_device,
		opt_engine
	};
	static const option longopts[] = {
		{"interactive", no_argument, nullptr, 'i'},
		{"command", required_argument, nullptr, 'c'},
		{"file", required_argument, nullptr, 'f'},
		{"delivery", required_argument, nullptr, opt_delivery},
		{"pool-size", required_argument, nullptr, opt_pool_size},
		{"page-size", required_argument, nullptr, opt_page_size},
		{"node", required_argument, nullptr, opt_node},
		{"no-fallback", no_argument, nullptr, opt_no_fallback},
		{"provider", no_argument, nullptr, opt_provider},
		{"device", required_argument, nullptr, opt_device},
		{"engine", required_argument, nullptr, opt_engine},
		{"help", no_argument, nullptr, 'h'},
		{nullptr, 0, nullptr, 0},
	};
	SessionConfig cfg;
	bool interactive = false;
	bool provider = false;
	const char *device = nullptr;
	std::vector<std::string> commands;
	std::vector<std::string> files;
	int c;
	while ((c = getopt_long(argc, argv, "ic:f:h", longopts, nullptr)) != -1) {
		switch (c) {
		case 'i':
			interactive = true;
			break;
		case 'c':
			commands.emplace_back(optarg);
			break;
		case 'f':
			files.emplace_back(optarg);
			break;
		case opt_delivery:
			if (std::strcmp(optarg, "inline") == 0) {
				cfg.delivery = nicmr::emu::DoorbellDelivery::inline_call;
			} else if (std::strcmp(optarg, "thread") == 0) {
				cfg.delivery = nicmr::emu::DoorbellDelivery::poll_thread;
			} else {
				return usage_error("--delivery takes inline or thread, not '%s'",
						   optarg);
			}
			break;
		case opt_pool_size:
			if (!parse_size(optarg, &cfg.demo_pool_size) || cfg.demo_pool_size == 0)
				return usage_error("--pool-size takes a size above 0 (64M, 1g, "
						   "0x400000), not '%s'",
						   optarg);
			break;
		case opt_page_size:
			if (!parse_page_size(optarg, &cfg.demo_page_size))
				return usage_error("--page-size takes 4k, 2m or 1g, not '%s'",
						   optarg);
			break;
		case opt_node:
			/* A node the machine does not have is as wrong as a word: mem::Pool::create
			 * would refuse it (-EINVAL) only after the device is up. */
			if (!parse_node(optarg, &cfg.demo_node) ||
			    cfg.demo_node > nicmr::mem::numa_max_node_id())
				return usage_error("--node takes a NUMA node of this machine "
						   "(0..%d), not '%s'",
						   nicmr::mem::numa_max_node_id(), optarg);
			break;
		case opt_no_fallback:
			cfg.demo_fallback = false;
			break;
		case opt_provider:
#if !NICMR_TESTMR_REG
			return usage_error("%s: built without the native API (DPDK)", "--provider");
#endif
			provider = true;
			break;
		case opt_device:
			device = optarg;
			break;
		case opt_engine:
#if !NICMR_TESTMR_REG
			return usage_error("%s: built without the native API (DPDK)", "--engine");
#endif
			/* Checked by nicmr_device_open at the first mr, key or window command. */
			if (*optarg == '\0')
				return usage_error("--engine takes a device spec (emu, "
						   "emu:mkeys=4096), not '%s'",
						   optarg);
			cfg.engine_spec = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			/* getopt_long said which option and why (unknown, or its value missing). */
			std::fputs("try 'testmr --help'\n", stderr);
			return 2;
		}
	}
	/* The one word testmr takes: the hw-check mode. */
	const bool hw_check = optind < argc && std::strcmp(argv[optind], "hw-check") == 0;
	if (hw_check)
		optind++;
	if (optind != argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (device != nullptr && !hw_check)
		return usage_error("%s is hw-check's option (testmr hw-check --device SPEC)",
				   "--device");
	if (device != nullptr && *device == '\0')
		return usage_error("--device takes a device spec (emu, vfio:0000:03:00.0), not "
				   "'%s'",
				   device);
	if (hw_check && (interactive || !commands.empty() || !files.empty() || provider))
		return usage_error("hw-check runs alone: no -i, -c, -f or --provider with it");
#if !NICMR_TESTMR_REG
	if (hw_check)
		return usage_error("%s: built without the native API (DPDK)", "hw-check");
	if (eal_argc != 0)
		return usage_error("EAL options (before --) need a build with DPDK");
#endif
	if (provider && (interactive || !commands.empty() || !files.empty()))
		return usage_error("%s only changes the demo, which -i, -c and -f replace",
				   "--provider");
	/* The pool is rounded up to whole pages: a size that cannot be is not a size. */
	if (cfg.demo_pool_size > SIZE_MAX - cfg.demo_page_size)
		return usage_error("--pool-size %" PRIu64 " is too large", cfg.demo_pool_size);
	/* Every file is opened before the device, so that a wrong name costs nothing. */
	std::vector<std::ifstream> streams;
	for (const auto &path : files) {
		streams.emplace_back(path);
		if (!streams.back())
			return usage_error("cannot read -f %s: %s", path.c_str(),
					   std::strerror(errno));
	}

	/* Line by line, so that library messages on stderr land between the right lines. */
	std::setvbuf(stdout, nullptr, _IOLBF, 0);
#if NICMR_TESTMR_REG
	/* EAL goes last at exit: after the session (whose engine the telemetry reads). */
	struct EalGuard {
		bool up = false;
		~EalGuard()
		{
			if (up)
				eal_stop();
		}
	} eal;
	if (eal_argc != 0) {
		if (int rc = eal_start(eal_argc, eal_argv, stdout); rc != 0)
			return rc;
		eal.up = true;
		cfg.eal = true;
	}
	if (hw_check) {
		std::printf("testmr (nicmr %s)\n", nicmr_version());
		HwCheckOptions ho;
		if (device != nullptr)
			ho.spec = device;
		return nicmr::testmr::hw_check(stdout, ho);
	}
#endif
	std::printf("testmr (nicmr %s)\n", nicmr_version());
	std::unique_ptr<Session> session;
	int rc = Session::open(cfg, stdout, &session);
	if (rc != 0) {
		std::fprintf(stderr, "testmr: cannot open the emulated NIC: %s\n",
			     std::strerror(-rc));
		return 1;
	}
	rc = 0;
	/* `quit` leaves: no command after it runs, wherever it comes from. */
	for (const auto &cmd : commands) {
		if (session->quit_requested())
			break;
		std::printf("testmr> %s\n", cmd.c_str());
		if (int r = session->run_line(cmd); r != 0)
			rc = r;
	}
	/* A failed line of a file stops testmr: nothing after it runs (no later file, no -i). */
	bool file_failed = false;
	for (size_t i = 0; i < streams.size() && !file_failed; i++) {
		if (int r = run_file(*session, files[i], streams[i]); r != 0) {
			rc = r;
			file_failed = true;
		}
	}
	if (interactive && !file_failed) {
		const bool tty = isatty(STDIN_FILENO) != 0;
		int r;
#if NICMR_TESTMR_REG
		/* A terminal gets the line editor; a pipe or a file the plain reader. */
		r = tty ? run_prompt(*session) : run_stream(*session, std::cin, false);
#else
		r = run_stream(*session, std::cin, tty);
#endif
		if (r != 0)
			rc = r;
	} else if (commands.empty() && files.empty()) {
		rc = session->run_line("demo");
#if NICMR_TESTMR_REG
		/* The demo's second half: registration as an application sees it. */
		nicmr::testmr::RegDemoOptions ro;
		ro.page_size = cfg.demo_page_size;
		ro.fallback = cfg.demo_fallback;
		ro.provider = provider;
		if (cfg.delivery == nicmr::emu::DoorbellDelivery::poll_thread)
			ro.spec = "emu:delivery=thread";
		if (nicmr::testmr::reg_demo(stdout, ro) != 0)
			rc = 1;
#endif
	}
	return rc == 0 ? 0 : 1;
}
