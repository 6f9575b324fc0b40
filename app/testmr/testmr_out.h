/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What testmr's commands print: their output, their errors (the last one is kept, so that a
 * command file can repeat it next to the line that failed), and JSON objects for `show ...
 * --json` (one object a command, on one line).
 */
#ifndef NICMR_TESTMR_OUT_H
#define NICMR_TESTMR_OUT_H

#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace nicmr::testmr {

class Reporter {
public:
	explicit Reporter(FILE *out) : out_(out) {}
	FILE *out() const noexcept { return out_; }

	/* Prints "error: <message>" and keeps the message; returns rc (a negative errno). */
	__attribute__((format(printf, 3, 4))) int error(int rc, const char *fmt, ...)
	{
		char buf[512];
		va_list ap;
		va_start(ap, fmt);
		// NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
		std::vsnprintf(buf, sizeof(buf), fmt, ap);
		va_end(ap);
		last_error_ = buf;
		std::fprintf(out_, "error: %s\n", buf);
		return rc;
	}
	/* Records an error printed elsewhere (a parse error). */
	void set_error(std::string msg) { last_error_ = std::move(msg); }
	const std::string &last_error() const noexcept { return last_error_; }

private:
	FILE *out_;
	std::string last_error_;
};

/* "-ENOKEY" for -ENOKEY: the names the native API documents its codes by. */
const char *errno_name(int rc);

/* One JSON object, built field by field; str() gives it. */
class JsonObject {
public:
	JsonObject &num(std::string_view k, uint64_t v) { return raw(k, std::to_string(v)); }
	JsonObject &snum(std::string_view k, int64_t v) { return raw(k, std::to_string(v)); }
	JsonObject &hex(std::string_view k, uint64_t v)
	{
		char b[24];
		std::snprintf(b, sizeof(b), "\"0x%" PRIx64 "\"", v);
		return raw(k, b);
	}
	JsonObject &boolean(std::string_view k, bool v) { return raw(k, v ? "true" : "false"); }
	JsonObject &str(std::string_view k, std::string_view v) { return raw(k, quote(v)); }
	/* v is JSON already (an object or an array). */
	JsonObject &raw(std::string_view k, std::string_view v)
	{
		s_ += s_.size() == 1 ? "" : ",";
		s_ += quote(k) + ":" + std::string(v);
		return *this;
	}
	std::string str() const { return s_ + "}"; }

	static std::string quote(std::string_view v)
	{
		std::string q = "\"";
		for (char c : v) {
			if (c == '"' || c == '\\') {
				q += '\\';
				q += c;
			} else if (static_cast<unsigned char>(c) < 0x20) {
				char b[8];
				std::snprintf(b, sizeof(b), "\\u%04x", c);
				q += b;
			} else {
				q += c;
			}
		}
		return q + "\"";
	}

private:
	std::string s_ = "{";
};

} // namespace nicmr::testmr

#endif
