/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * testmr: the testpmd-style tool of nicmr. It opens an emulated ConnectX, then runs commands
 * from the command line (-c), a file (-f), an interactive prompt (-i), or, with none of these,
 * the demo that the README's main job shows.
 */
#include <getopt.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "nicmr/nicmr.h"
#include "testmr_cmd.h"
#include "testmr_reg.h"
#include "testmr_session.h"

using namespace nicmr::testmr;

namespace {

void usage(FILE *f)
{
	std::fprintf(f,
		     "usage: testmr [options]\n"
		     "  -i, --interactive       a prompt (testmr>) reading commands\n"
		     "  -c, --command CMD       run CMD (repeatable), then leave\n"
		     "  -f, --file FILE         run the commands in FILE, then leave\n"
		     "      --delivery MODE     doorbells: inline (default) or thread\n"
		     "      --pool-size SIZE    the demo's pool (default 64M)\n"
		     "      --page-size SIZE    the demo's page size: 4k, 2m (default) or 1g\n"
		     "      --node N            the demo's NUMA node (default: any)\n"
		     "      --no-fallback       the demo fails instead of using 4 KiB pages\n"
		     "      --provider          the demo's registration part through libfabric's\n"
		     "                          fi_mr calls on the nicmr provider\n"
		     "  -h, --help              this text\n"
		     "With no -i, -c or -f, testmr runs the demo.\n\n%s",
		     command_help());
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
		int r = s.run_line(line);
		if (r != 0 && !prompt)
			rc = r;
	}
	if (prompt)
		std::fputs("\n", stdout);
	return rc;
}

} // namespace

int main(int argc, char **argv)
{
	enum {
		opt_delivery = 256,
		opt_pool_size,
		opt_page_size,
		opt_node,
		opt_no_fallback,
		opt_provider
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
		{"help", no_argument, nullptr, 'h'},
		{nullptr, 0, nullptr, 0},
	};
	SessionConfig cfg;
	bool interactive = false;
	bool provider = false;
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
				std::fprintf(stderr, "testmr: --delivery takes inline or thread\n");
				return 2;
			}
			break;
		case opt_pool_size:
			if (!parse_size(optarg, &cfg.demo_pool_size) || cfg.demo_pool_size == 0) {
				std::fprintf(stderr, "testmr: bad --pool-size '%s'\n", optarg);
				return 2;
			}
			break;
		case opt_page_size:
			if (!parse_size(optarg, &cfg.demo_page_size)) {
				std::fprintf(stderr, "testmr: bad --page-size '%s'\n", optarg);
				return 2;
			}
			break;
		case opt_node: {
			char *end = nullptr;
			long node = std::strtol(optarg, &end, 10);
			if (end == optarg || *end != '\0' || node < 0 || node > 1023) {
				std::fprintf(stderr, "testmr: bad --node '%s'\n", optarg);
				return 2;
			}
			cfg.demo_node = static_cast<int>(node);
			break;
		}
		case opt_no_fallback:
			cfg.demo_fallback = false;
			break;
		case opt_provider:
			provider = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		std::fprintf(stderr, "testmr: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}

	/* Line by line, so that library messages on stderr land between the right lines. */
	std::setvbuf(stdout, nullptr, _IOLBF, 0);
	std::printf("testmr (nicmr %s)\n", nicmr_version());
	std::unique_ptr<Session> session;
	int rc = Session::open(cfg, stdout, &session);
	if (rc != 0) {
		std::fprintf(stderr, "testmr: cannot open the emulated NIC: %s\n",
			     std::strerror(-rc));
		return 1;
	}
	rc = 0;
	for (const auto &cmd : commands) {
		std::printf("testmr> %s\n", cmd.c_str());
		if (int r = session->run_line(cmd); r != 0)
			rc = r;
	}
	for (const auto &path : files) {
		std::ifstream in(path);
		if (!in) {
			std::fprintf(stderr, "testmr: cannot read '%s'\n", path.c_str());
			return 1;
		}
		if (int r = run_stream(*session, in, false); r != 0)
			rc = r;
	}
	if (interactive)
		run_stream(*session, std::cin, isatty(STDIN_FILENO) != 0);
	else if (commands.empty() && files.empty()) {
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
#if !NICMR_TESTMR_REG
	if (provider) {
		std::fprintf(stderr, "testmr: built without the native API: no --provider\n");
		return 2;
	}
#endif
	return rc == 0 ? 0 : 1;
}
