/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DPDK's EAL for a test program: brought up once per process (EAL initialises once), as
 * --in-memory --no-pci on lcore 0 with -m 64 (32 x 2 MiB hugepages) and the IOVA mode the
 * program names. A test that needs it starts with NICMR_NEED_EAL(): it runs when the EAL is
 * up, fails when 2 MiB hugepages were required (hugepage_need.h) and skips otherwise, with the
 * reason the EAL gave.
 */
#ifndef NICMR_TEST_EAL_ENV_H
#define NICMR_TEST_EAL_ENV_H

#include <unistd.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <rte_eal.h>
#include <rte_errno.h>

#include "hugepage_need.h"
#include "mem_describe.h"

namespace nicmr::test {

inline constexpr size_t kEalPages = 32; /* -m 64 in 2 MiB pages */

class EalEnv : public testing::Environment {
public:
	/* iova_mode: "va" or "pa" (EAL's --iova-mode; PA needs root to read pagemap). */
	explicit EalEnv(std::string iova_mode) : iova_mode_(std::move(iova_mode)) {}

	void SetUp() override
	{
		if (iova_mode_ == "pa" && geteuid() != 0) {
			why_ = "IOVA as PA needs root";
			return;
		}
		const size_t free_pages = mem::hugepages_free(mem::kPage2M);
		if (free_pages < kEalPages) {
			why_ = "EAL needs " + std::to_string(kEalPages) +
			       " free 2 MiB hugepages, " + std::to_string(free_pages) + " free";
			return;
		}
		std::vector<std::string> args = {
			"nicmr-test", "--in-memory", "--no-pci",
			"-l",	      "0",	     "--log-level=3",
			"-m",	      "64",	     "--iova-mode=" + iova_mode_};
		std::vector<char *> argv;
		for (std::string &a : args)
			argv.push_back(a.data());
		if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0) {
			why_ = std::string("rte_eal_init failed: ") + rte_strerror(rte_errno);
			return;
		}
		up_ = true;
	}
	void TearDown() override
	{
		if (up_)
			rte_eal_cleanup();
	}
	static bool up() { return up_; }
	static const std::string &why() { return why_; }

private:
	std::string iova_mode_;
	static inline bool up_ = false;
	static inline std::string why_;
};

} // namespace nicmr::test

#define NICMR_NEED_EAL()                                                                           \
	do {                                                                                       \
		if (!nicmr::test::EalEnv::up()) {                                                  \
			if (nicmr::test::hugepages_required(nicmr::mem::kPage2M))                  \
				FAIL() << nicmr::test::EalEnv::why()                               \
				       << " (2 MiB hugepages are required here)";                  \
			GTEST_SKIP() << nicmr::test::EalEnv::why();                                \
		}                                                                                  \
	} while (0)

#endif
