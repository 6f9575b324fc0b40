/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Logging for every nicmr library. nicmr lives inside other people's processes, so it never
 * exits or aborts on an error: it logs with context (device, key, address) and returns a
 * negative errno. The level comes from NICMR_LOG_LEVEL (error, warn, info, debug; default warn)
 * or from nicmr_log_set_level(). Logging is a slow-path facility: never call it on a hot path.
 */
#ifndef NICMR_LOG_H
#define NICMR_LOG_H

#include <cstdarg>

namespace nicmr {

enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3 };

/* Current level (initialised from NICMR_LOG_LEVEL on first use). */
LogLevel log_level() noexcept;
void set_log_level(LogLevel level) noexcept;
bool log_enabled(LogLevel level) noexcept;

/* Writes one line "nicmr <level> <component>: <message>" to stderr. */
void log_write(LogLevel level, const char *component, const char *fmt, ...) noexcept
	__attribute__((format(printf, 3, 4)));

} // namespace nicmr

#define NICMR_LOG(level, component, ...)                                                           \
	do {                                                                                       \
		if (::nicmr::log_enabled(::nicmr::LogLevel::level))                                \
			::nicmr::log_write(::nicmr::LogLevel::level, component, __VA_ARGS__);      \
	} while (0)

#endif
