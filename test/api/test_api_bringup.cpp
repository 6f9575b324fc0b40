/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bring-up transcript: the commands nicmr sends from reset to its first UMR, through the
 * path an application takes (nicmr_device_open, nicmr_pd_alloc, nicmr_pool_create,
 * nicmr_mr_reg), recorded by the device model's command trace and compared with
 * test/api/bringup-reference.txt, which is written from rdma-core's
 * providers/mlx5/mlx5_vfio.c (mlx5_vfio_alloc_context) and the Linux kernel's
 * drivers/infiniband/hw/mlx5/umr.c (mlx5r_umr_resource_init) and mr.c, with the reason for
 * every difference (bringup_reference.h says how the file reads).
 */
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "api_wiring.h"
#include "bringup_reference.h"
#include "emu_mlx5_trace.h"
#include "nicmr/nicmr.h"

namespace nicmr::test {
namespace {

/* The device of the transcript: 1024 keys (the CREATE_MKEY run's length follows the key
 * space), room in the trace for everything up to the first UMR. */
constexpr const char *kTraceSpec = "emu:mkeys=1024,trace=4096";

/* The transcript of everything dev's model executed up to and with its first UMR. */
std::vector<std::string> transcript_to_first_umr(nicmr_device *dev, bool *found)
{
	const emu::CmdTrace *t = dev->emu->device().trace();
	EXPECT_NE(t, nullptr);
	if (t == nullptr)
		return {};
	EXPECT_EQ(t->dropped(), 0u) << "the trace filled up: raise trace= in kTraceSpec";
	std::vector<emu::TraceEntry> e = t->entries();
	*found = false;
	for (size_t i = 0; i < e.size(); i++) {
		if (e[i].source == emu::TraceEntry::Source::wqe) {
			e.resize(i + 1);
			*found = true;
			break;
		}
	}
	return emu::transcript(e);
}

TEST(BringupTranscript, FromResetToTheFirstUmrMatchesTheReference)
{
	std::string text;
	ASSERT_TRUE(read_file(NICMR_BRINGUP_REFERENCE, &text)) << NICMR_BRINGUP_REFERENCE;
	const Reference ref = parse_reference(text);
	for (const std::string &e : ref.errors)
		ADD_FAILURE() << NICMR_BRINGUP_REFERENCE << ": " << e;

	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open(kTraceSpec, &dev), 0);
	nicmr_pd *pd = nullptr;
	ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	nicmr_pool_params p;
	nicmr_pool_params_init(&p);
	p.size = 64 * 1024;
	p.page_size = NICMR_PAGE_4K;
	nicmr_pool *pool = nullptr;
	ASSERT_EQ(nicmr_pool_create(dev, &p, &pool), 0);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, nicmr_pool_addr(pool), 8192,
			       NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_WRITE, 0, 0, &mr),
		  0);

	bool found = false;
	const std::vector<std::string> sent = transcript_to_first_umr(dev, &found);
	EXPECT_TRUE(found) << "the registration posted no UMR";
	const std::vector<std::string> diff = compare(ref, sent);
	if (!diff.empty()) {
		std::string msg = "nicmr's bring-up differs from " NICMR_BRINGUP_REFERENCE
				  " where the file does not say why:\n";
		for (const std::string &d : diff)
			msg += "  " + d + "\n";
		msg += "What nicmr sent, in the file's format (mark each line that differs from "
		       "rdma-core or the kernel with + or - and say why):\n";
		for (const std::string &s : sent)
			msg += "  " + s + "\n";
		ADD_FAILURE() << msg;
	}

	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	EXPECT_EQ(nicmr_pool_destroy(pool), 0);
	EXPECT_EQ(nicmr_pd_free(pd), 0);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

/* The spec options behind the transcript and hw-check's failure test (doc/native-api.md). */

TEST(EmuSpecOptions, TraceAndFailOpcodeValuesOutOfRangeAreEinval)
{
	nicmr_device *dev = nullptr;
	for (const char *s : {"emu:trace=", "emu:trace=x", "emu:trace=262145", "emu:trace=-1",
			      "emu:fail_opcode=", "emu:fail_opcode=0x10000", "emu:fail_opcode=abc"})
		EXPECT_EQ(nicmr_device_open(s, &dev), -EINVAL) << s;
	EXPECT_EQ(dev, nullptr);
}

TEST(EmuSpecOptions, TheTraceIsOffUnlessAskedFor)
{
	nicmr_device *dev = nullptr;
	ASSERT_EQ(nicmr_device_open("emu:mkeys=256", &dev), 0);
	EXPECT_EQ(dev->emu->device().trace(), nullptr);
	EXPECT_EQ(nicmr_device_close(dev), 0);
	ASSERT_EQ(nicmr_device_open("emu:mkeys=256,trace=0x10", &dev), 0);
	ASSERT_NE(dev->emu->device().trace(), nullptr);
	EXPECT_EQ(dev->emu->device().config().trace_capacity, 16u);
	/* Bring-up alone sends more than 16 commands: the first 16 stay, the rest are counted. */
	EXPECT_EQ(dev->emu->device().trace()->entries().size(), 16u);
	EXPECT_GT(dev->emu->device().trace()->dropped(), 0u);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

TEST(EmuSpecOptions, AFailedOpcodeFailsOpenWithTheCommandsErrno)
{
	nicmr_device *dev = nullptr;
	/* INIT_HCA answered INTERNAL_ERR: the driver's -EIO (mlx5_cmd.h). */
	EXPECT_EQ(nicmr_device_open("emu:mkeys=256,fail_opcode=0x102", &dev), -EIO);
	EXPECT_EQ(dev, nullptr);
	/* An opcode nicmr never sends changes nothing. */
	ASSERT_EQ(nicmr_device_open("emu:mkeys=256,fail_opcode=0x7fff", &dev), 0);
	EXPECT_EQ(dev->emu->device().config().fail_opcode, 0x7fff);
	EXPECT_EQ(nicmr_device_close(dev), 0);
}

/* The comparison itself: what makes the reference file keep up with the driver. */

TEST(BringupReference, AnEntryWithoutItsReasonIsRefused)
{
	const Reference r = parse_reference("# head\n"
					    "  ENABLE_HCA op_mod=0x0 function_id=0   # step\n"
					    "+ QUERY_HCA_CAP op_mod=0x6 cap=atomic mode=max\n"
					    "- ACCESS_REG op_mod=0x0 #\n"
					    "  INIT_HCA op_mod=0x0\n"
					    "x INIT_HCA op_mod=0x0 # bad mark\n");
	ASSERT_EQ(r.entries.size(), 1u);
	EXPECT_EQ(r.entries[0].line, 2);
	EXPECT_EQ(r.entries[0].text, "ENABLE_HCA op_mod=0x0 function_id=0");
	EXPECT_EQ(r.entries[0].comment, "step");
	const std::vector<std::string> want = {
		"line 3: a difference without its reason",
		"line 4: a difference without its reason",
		"line 5: no comment naming the rdma-core or kernel step",
		"line 6: an entry starts with two spaces, '+ ' or '- '",
	};
	EXPECT_EQ(r.errors, want);
}

TEST(BringupReference, KnownDifferencesPassAndFailOnceTheyDisappear)
{
	const Reference r = parse_reference("  A  # a step\n"
					    "- B  # not yet: the driver does not send B\n"
					    "+ C  # nicmr: sends C because\n"
					    "  D  # d step\n");
	EXPECT_TRUE(r.errors.empty());
	EXPECT_TRUE(compare(r, {"A", "C", "D"}).empty());
	/* B is sent now: the "-" line must become a "  " line. */
	EXPECT_EQ(compare(r, {"A", "B", "C", "D"}),
		  std::vector<std::string>{"sent, not in the reference (after line 1): B"});
	/* C is no longer sent: its "+" line must go. */
	EXPECT_EQ(compare(r, {"A", "D"}),
		  std::vector<std::string>{"line 3 expects it, not sent: C"});
	/* A changed field is a line missing and another one sent. */
	EXPECT_EQ(compare(r, {"A", "C", "D x=1"}),
		  (std::vector<std::string>{"sent, not in the reference (after line 3): D x=1",
					    "line 4 expects it, not sent: D"}));
}

} // namespace
} // namespace nicmr::test
