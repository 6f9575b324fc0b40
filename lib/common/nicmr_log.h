/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Logging for every nicmr library. nicmr lives inside other people's processes, so it never
 * exits or aborts on an error: it logs with context (device, key, address) and returns a
 * negative errno. The level comes from NICMR_LOG_LEVEL (error, warn, info, debug; default warn)
 * or from set_log_level(); lines go to stderr unless a handler was installed with the public
 * nicmr_log_set() (the libfabric provider sends them to libfabric's log that way). A backend
 * (set_log_backend: DPDK's rte_log, api/api_dpdk.cpp) replaces stderr as the default: while
 * one is set and no handler is, the backend decides which levels are written and writes them.
 * Logging is a slow-path facility: never call it on a hot path.
 */
#ifndef NICMR_LOG_H
#define NICMR_LOG_H

#include <cstdarg>

namespace nicmr {

/* The values of the public enum nicmr_log_level (nicmr.h). */
enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3 };

/* Current level (initialised from NICMR_LOG_LEVEL on first use); with a backend and no
 * handler, log_enabled asks the backend instead. */
LogLevel log_level() noexcept;
void set_log_level(LogLevel level) noexcept;
bool log_enabled(LogLevel level) noexcept;

/* The default sink when no nicmr_log_set() handler is installed, instead of stderr. Its
 * functions are called from any thread; set_level is what nicmr_log_set(level, NULL, NULL)
 * does to it. The object must live until the process exits (a static). */
struct LogBackend {
	bool (*enabled)(LogLevel level) noexcept;
	void (*write)(LogLevel level, const char *component, const char *msg) noexcept;
	void (*set_level)(LogLevel level) noexcept;
};
/* Installs (or, with null, removes) the backend. Lines on their way out when it changes go to
 * the old sink or the new one, never lost. */
void set_log_backend(const LogBackend *backend) noexcept;
const LogBackend *log_backend() noexcept;

/* Writes one line: to the handler nicmr_log_set() installed, or to stderr as
 * "nicmr <level> <component>: <message>". func and line name the place that logged. */
void log_write(LogLevel level, const char *component, const char *func, int line, const char *fmt,
	       ...) noexcept __attribute__((format(printf, 5, 6)));

} // namespace nicmr

#define NICMR_LOG(level, component, ...) NICMR_LOG_IN(__func__, level, component, __VA_ARGS__)

/* NICMR_LOG naming the function func: inside a lambda, where __func__ would say "operator()",
 * pass the enclosing function's name, kept in a variable outside the lambda (clang-tidy's
 * bugprone-lambda-function-name flags __func__ even in a capture's initialiser). */
#define NICMR_LOG_IN(func, level, component, ...)                                                  \
	do {                                                                                       \
		if (::nicmr::log_enabled(::nicmr::LogLevel::level))                                \
			::nicmr::log_write(::nicmr::LogLevel::level, component, func, __LINE__,    \
					   __VA_ARGS__);                                           \
	} while (0)

#endif
