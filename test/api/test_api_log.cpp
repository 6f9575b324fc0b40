/* SPDX-License-Identifier: BSD-3-Clause */
/* nicmr_log_set / nicmr_log_get: where nicmr's log lines go and from which level. */
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <string>
#include <vector>

#include "nicmr/nicmr.h"

namespace {

struct Line {
	nicmr_log_level level;
	std::string component, func, msg;
	int line;
};

void collect(void *ctx, nicmr_log_level level, const char *component, const char *func, int line,
	     const char *msg)
{
	static_cast<std::vector<Line> *>(ctx)->push_back({level, component, func, msg, line});
}

/* Each test leaves the handler and level as it found them (NICMR_LOG_LEVEL's). */
class ApiLog : public testing::Test {
protected:
	void SetUp() override { ASSERT_EQ(nicmr_log_get(&level_, &fn_, &ctx_), 0); }
	void TearDown() override { EXPECT_EQ(nicmr_log_set(level_, fn_, ctx_), 0); }
	/* A spec the device refuses with an error line ("emu ports=3: 1 or 2"). */
	static void open_refused()
	{
		nicmr_device *dev = nullptr;
		EXPECT_EQ(nicmr_device_open("emu:ports=3", &dev), -EINVAL);
		EXPECT_EQ(dev, nullptr);
	}
	/* A refused PD free (an MR lives): a warn line ("PD n free refused: ..."). */
	static void pd_free_refused()
	{
		nicmr_device *dev = nullptr;
		ASSERT_EQ(nicmr_device_open("emu:mkeys=1024", &dev), 0);
		nicmr_pd *pd = nullptr;
		ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
		void *buf = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);
		ASSERT_NE(buf, MAP_FAILED);
		nicmr_mr *mr = nullptr;
		ASSERT_EQ(nicmr_mr_reg(pd, buf, 4096, NICMR_ACCESS_LOCAL_WRITE, 0, 0, &mr), 0);
		EXPECT_EQ(nicmr_pd_free(pd), -EBUSY);
		EXPECT_EQ(nicmr_mr_dereg(mr), 0);
		EXPECT_EQ(nicmr_pd_free(pd), 0);
		EXPECT_EQ(nicmr_device_close(dev), 0);
		munmap(buf, 4096);
	}
	static bool has(const std::vector<Line> &lines, nicmr_log_level level, const char *part)
	{
		for (const Line &l : lines)
			if (l.level == level && l.msg.find(part) != std::string::npos)
				return true;
		return false;
	}
	/* A device that opens, with an info line ("emu:mkeys=1024: open, ..."). */
	static void open_and_close()
	{
		nicmr_device *dev = nullptr;
		ASSERT_EQ(nicmr_device_open("emu:mkeys=1024", &dev), 0);
		EXPECT_EQ(nicmr_device_close(dev), 0);
	}
	nicmr_log_level level_{};
	nicmr_log_fn fn_ = nullptr;
	void *ctx_ = nullptr;
};

TEST_F(ApiLog, HandlerGetsTheLinesOfItsLevelWithComponentFunctionAndLine)
{
	std::vector<Line> lines;
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_WARN, collect, &lines), 0);
	open_refused();
	ASSERT_EQ(lines.size(), 1u);
	EXPECT_EQ(lines[0].level, NICMR_LOG_ERROR);
	EXPECT_EQ(lines[0].component, "api");
	EXPECT_EQ(lines[0].msg, "emu ports=3: 1 or 2");
	EXPECT_FALSE(lines[0].func.empty());
	EXPECT_GT(lines[0].line, 0);
	/* The open's info line is below warn: not written. */
	lines.clear();
	open_and_close();
	for (const Line &l : lines)
		EXPECT_LE(l.level, NICMR_LOG_WARN) << l.component << ": " << l.msg;
	bool open_line = false;
	for (const Line &l : lines)
		open_line |= l.msg.find("emu:mkeys=1024: open") == 0;
	EXPECT_FALSE(open_line);
}

TEST_F(ApiLog, InfoLevelAddsTheInfoLines)
{
	std::vector<Line> lines;
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_INFO, collect, &lines), 0);
	open_and_close();
	bool open_line = false;
	for (const Line &l : lines) {
		EXPECT_LE(l.level, NICMR_LOG_INFO);
		if (l.msg.find("emu:mkeys=1024: open, 1024 keys") == 0) {
			open_line = true;
			EXPECT_EQ(l.level, NICMR_LOG_INFO);
			EXPECT_EQ(l.component, "api");
		}
	}
	EXPECT_TRUE(open_line);
}

TEST_F(ApiLog, WarnLevelKeepsWarningsAndErrorLevelDropsThem)
{
	std::vector<Line> lines;
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_WARN, collect, &lines), 0);
	pd_free_refused();
	EXPECT_TRUE(has(lines, NICMR_LOG_WARN, "free refused: 1 MRs")) << lines.size() << " lines";
	lines.clear();
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_ERROR, collect, &lines), 0);
	pd_free_refused();
	EXPECT_FALSE(has(lines, NICMR_LOG_WARN, "free refused"));
	for (const Line &l : lines)
		EXPECT_EQ(l.level, NICMR_LOG_ERROR) << l.component << ": " << l.msg;
}

TEST_F(ApiLog, GetReturnsWhatWasSet)
{
	std::vector<Line> lines;
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_ERROR, collect, &lines), 0);
	nicmr_log_level level = NICMR_LOG_DEBUG;
	nicmr_log_fn fn = nullptr;
	void *ctx = nullptr;
	ASSERT_EQ(nicmr_log_get(&level, &fn, &ctx), 0);
	EXPECT_EQ(level, NICMR_LOG_ERROR);
	EXPECT_EQ(fn, collect);
	EXPECT_EQ(ctx, &lines);
	EXPECT_EQ(nicmr_log_get(nullptr, nullptr, nullptr), 0);
	open_refused(); /* an error line: kept */
	EXPECT_EQ(lines.size(), 1u);
}

TEST_F(ApiLog, NullHandlerWritesToStderrAndTheOldOneGetsNothingMore)
{
	std::vector<Line> lines;
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_WARN, collect, &lines), 0);
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_WARN, nullptr, &lines), 0);
	void *ctx = &lines;
	ASSERT_EQ(nicmr_log_get(nullptr, nullptr, &ctx), 0);
	EXPECT_EQ(ctx, nullptr); /* no handler, no context */
	testing::internal::CaptureStderr();
	open_refused();
	const std::string err = testing::internal::GetCapturedStderr();
	EXPECT_TRUE(lines.empty());
	EXPECT_EQ(err, "nicmr error api: emu ports=3: 1 or 2\n");
}

TEST_F(ApiLog, LevelOutsideTheEnumIsEinvalAndChangesNothing)
{
	std::vector<Line> lines;
	ASSERT_EQ(nicmr_log_set(NICMR_LOG_WARN, collect, &lines), 0);
	EXPECT_EQ(nicmr_log_set(static_cast<nicmr_log_level>(4), nullptr, nullptr), -EINVAL);
	EXPECT_EQ(nicmr_log_set(static_cast<nicmr_log_level>(-1), nullptr, nullptr), -EINVAL);
	nicmr_log_level level = NICMR_LOG_DEBUG;
	nicmr_log_fn fn = nullptr;
	ASSERT_EQ(nicmr_log_get(&level, &fn, nullptr), 0);
	EXPECT_EQ(level, NICMR_LOG_WARN);
	EXPECT_EQ(fn, collect);
	open_refused();
	EXPECT_EQ(lines.size(), 1u);
}

} // namespace
