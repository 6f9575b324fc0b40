/* SPDX-License-Identifier: BSD-3-Clause */
#include "nicmr_log.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>

#include "nicmr/nicmr.h"

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

/* The handler of nicmr_log_set(). Writers of a line hold the lock shared while they call it,
 * so that nicmr_log_set(), which takes it exclusively, returns only once no line is on its
 * way to the old handler: a provider that unloads itself after resetting the handler cannot
 * be called afterwards. The lock is taken only for a line that is written (a slow path),
 * never to decide whether to write one. */
struct Handler {
	std::shared_mutex lock;
	nicmr_log_fn fn = nullptr; /* null: stderr */
	void *ctx = nullptr;
};

Handler &handler() noexcept
{
	static Handler h;
	return h;
}

/* The backend, and whether a handler is set (so that log_enabled need not take the lock):
 * acquire/release so that a backend's functions are seen with the pointer. */
std::atomic<const LogBackend *> g_backend{nullptr};
std::atomic<bool> g_handler_set{false};

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
	const LogBackend *b = g_backend.load(std::memory_order_acquire);
	if (b != nullptr && !g_handler_set.load(std::memory_order_relaxed))
		return b->enabled(level);
	return static_cast<int>(level) <= level_cell().load(std::memory_order_relaxed);
}

void set_log_backend(const LogBackend *backend) noexcept
{
	g_backend.store(backend, std::memory_order_release);
}

const LogBackend *log_backend() noexcept
{
	return g_backend.load(std::memory_order_acquire);
}

void log_write(LogLevel level, const char *component, const char *func, int line, const char *fmt,
	       ...) noexcept
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	/* clang-tidy 14's analyzer sometimes (depending on the files analysed with this one)
	 * loses the va_start above and calls ap uninitialised: a false report. */
	// NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
	std::vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	Handler &h = handler();
	std::shared_lock lk(h.lock);
	if (h.fn != nullptr)
		h.fn(h.ctx, static_cast<nicmr_log_level>(level), component, func, line, msg);
	else if (const LogBackend *b = g_backend.load(std::memory_order_acquire); b != nullptr)
		b->write(level, component, msg);
	else
		std::fprintf(stderr, "nicmr %s %s: %s\n", level_name(level), component, msg);
}

} // namespace nicmr

extern "C" int nicmr_log_set(enum nicmr_log_level level, nicmr_log_fn fn, void *ctx)
{
	if (static_cast<int>(level) < NICMR_LOG_ERROR || static_cast<int>(level) > NICMR_LOG_DEBUG)
		return -EINVAL;
	nicmr::Handler &h = nicmr::handler();
	std::unique_lock lk(h.lock);
	h.fn = fn;
	h.ctx = fn != nullptr ? ctx : nullptr;
	nicmr::g_handler_set.store(fn != nullptr, std::memory_order_relaxed);
	nicmr::set_log_level(static_cast<nicmr::LogLevel>(level));
	/* With the backend as the sink, its own level is the one that filters. */
	if (const nicmr::LogBackend *b = nicmr::log_backend(); b != nullptr && fn == nullptr)
		b->set_level(static_cast<nicmr::LogLevel>(level));
	return 0;
}

extern "C" int nicmr_log_get(enum nicmr_log_level *level, nicmr_log_fn *fn, void **ctx)
{
	nicmr::Handler &h = nicmr::handler();
	std::shared_lock lk(h.lock);
	if (level != nullptr)
		*level = static_cast<nicmr_log_level>(nicmr::log_level());
	if (fn != nullptr)
		*fn = h.fn;
	if (ctx != nullptr)
		*ctx = h.ctx;
	return 0;
}
