/* SPDX-License-Identifier: BSD-3-Clause */
#include "nicmr_log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nicmr {
namespace {

LogLevel parse_env_level() noexcept
{
	const char *env = std::getenv("NICMR_LOG_LEVEL");
	if (env == nullptr)
		return LogLevel::warn;
	static constexpr struct {
		const char *name;
		LogLevel level;
	} names[] = {{"error", LogLevel::error},
		     {"warn", LogLevel::warn},
		     {"info", LogLevel::info},
		     {"debug", LogLevel::debug}};
	for (const auto &n : names)
		if (std::strcmp(env, n.name) == 0)
			return n.level;
	return LogLevel::warn;
}

std::atomic<int> &level_cell() noexcept
{
	static std::atomic<int> level{static_cast<int>(parse_env_level())};
	return level;
}

const char *level_name(LogLevel level) noexcept
{
	switch (level) {
	case LogLevel::error:
		return "error";
	case LogLevel::warn:
		return "warn";
	case LogLevel::info:
		return "info";
	case LogLevel::debug:
		return "debug";
	}
	return "?";
}

} // namespace

LogLevel log_level() noexcept
{
	return static_cast<LogLevel>(level_cell().load(std::memory_order_relaxed));
}

void set_log_level(LogLevel level) noexcept
{
	level_cell().store(static_cast<int>(level), std::memory_order_relaxed);
}

bool log_enabled(LogLevel level) noexcept
{
	return static_cast<int>(level) <= level_cell().load(std::memory_order_relaxed);
}

void log_write(LogLevel level, const char *component, const char *fmt, ...) noexcept
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	/* clang-tidy 14's analyzer sometimes (depending on the files analysed with this one)
	 * loses the va_start above and calls ap uninitialised: a false report. */
	// NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
	std::vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	std::fprintf(stderr, "nicmr %s %s: %s\n", level_name(level), component, line);
}

} // namespace nicmr
