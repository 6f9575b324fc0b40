/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_exchange.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>

namespace nicmr::testmr {
namespace {

using Clock = std::chrono::steady_clock;

/* A file descriptor closed when it goes. */
class Fd {
public:
	Fd() = default;
	explicit Fd(int fd) : fd_(fd) {}
	~Fd() { reset(); }
	Fd(const Fd &) = delete;
	Fd &operator=(const Fd &) = delete;
	int get() const { return fd_; }
	/* Gives the descriptor up without closing it. */
	int release()
	{
		const int fd = fd_;
		fd_ = -1;
		return fd;
	}
	void reset(int fd = -1)
	{
		if (fd_ >= 0)
			::close(fd_);
		fd_ = fd;
	}

private:
	int fd_ = -1;
};

int fail(std::string *error, int rc, const std::string &msg)
{
	if (error != nullptr)
		*error = msg;
	return rc;
}

std::string errno_text(int rc)
{
	return std::strerror(-rc);
}

/* Milliseconds left until deadline (0 once it passed). */
int left_ms(Clock::time_point deadline)
{
	const auto ms =
		std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
			.count();
	return ms > 0 ? static_cast<int>(ms) : 0;
}

/* Waits for events on fd until deadline: 0 ready, -ETIMEDOUT, -errno. */
int wait_fd(int fd, short events, Clock::time_point deadline)
{
	for (;;) {
		pollfd p{fd, events, 0};
		const int n = ::poll(&p, 1, left_ms(deadline));
		if (n > 0)
			return 0;
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

/* Reads exactly n bytes within timeout_s: 0; -ETIMEDOUT; -ECONNRESET (the peer closed). */
int read_exact(int fd, char *buf, size_t n, uint32_t timeout_s)
{
	const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
	size_t got = 0;
	while (got < n) {
		if (int rc = wait_fd(fd, POLLIN, deadline); rc != 0)
			return rc;
		const ssize_t k = ::recv(fd, buf + got, n - got, 0);
		if (k == 0)
			return -ECONNRESET;
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		got += static_cast<size_t>(k);
	}
	return 0;
}

/* Writes n bytes (one send when the socket takes them, as rc_pingpong's peers read them with
 * one read) within timeout_s: 0; -ETIMEDOUT; -errno (-EPIPE: the peer closed). */
int write_all(int fd, const char *buf, size_t n, uint32_t timeout_s)
{
	const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
	size_t sent = 0;
	while (sent < n) {
		if (int rc = wait_fd(fd, POLLOUT, deadline); rc != 0)
			return rc;
		const ssize_t k = ::send(fd, buf + sent, n - sent, MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		sent += static_cast<size_t>(k);
	}
	return 0;
}

int hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* n hex digits at s into *v. */
bool hex_field(std::string_view s, size_t n, uint32_t *v)
{
	uint32_t x = 0;
	for (size_t i = 0; i < n; i++) {
		const int d = hex(s[i]);
		if (d < 0)
			return false;
		x = x << 4 | static_cast<uint32_t>(d);
	}
	*v = x;
	return true;
}

/* A step's error: its code, and what it was doing. */
int step_error(std::string *error, int rc, const char *step, uint32_t timeout_s)
{
	if (rc == -ETIMEDOUT)
		return fail(error, rc,
			    std::string(step) + ": nothing within " + std::to_string(timeout_s) +
				    " s (timeout)");
	if (rc == -ECONNRESET)
		return fail(error, rc, std::string(step) + ": the peer closed the connection");
	return fail(error, rc, std::string(step) + ": " + errno_text(rc));
}

/* The peer's record within timeout_s. */
int read_record(int fd, uint32_t timeout_s, PeerRecord *theirs, std::string *error)
{
	char buf[kRecordSize];
	if (int rc = read_exact(fd, buf, sizeof(buf), timeout_s); rc != 0)
		return step_error(error, rc, "reading the peer's address record", timeout_s);
	if (!parse_record(std::string_view(buf, sizeof(buf)), theirs)) {
		std::string shown;
		for (char c : buf)
			shown += (c >= 0x20 && c < 0x7f) ? c : '.';
		return fail(error, -EPROTO,
			    "the peer's address record is not LID:QPN:PSN:GID (got '" + shown +
				    "')");
	}
	return 0;
}

int read_mr_record(int fd, uint32_t timeout_s, MrRecord *theirs, std::string *error)
{
	char buf[kMrRecordSize];
	if (int rc = read_exact(fd, buf, sizeof(buf), timeout_s); rc != 0)
		return step_error(error, rc, "reading the peer's MR record", timeout_s);
	if (!parse_mr_record(std::string_view(buf, sizeof(buf)), theirs)) {
		std::string shown;
		for (char c : buf)
			shown += (c >= 0x20 && c < 0x7f) ? c : '.';
		return fail(error, -EPROTO,
			    "the peer's MR record is not ADDR:RKEY:LEN (got '" + shown + "')");
	}
	return 0;
}

int send_mr_record(int fd, uint32_t timeout_s, const MrRecord &mine, std::string *error)
{
	const auto rec = format_mr_record(mine);
	if (int rc = write_all(fd, rec.data(), rec.size(), timeout_s); rc != 0)
		return step_error(error, rc, "sending the MR record", timeout_s);
	return 0;
}

int send_record(int fd, uint32_t timeout_s, const PeerRecord &mine, std::string *error)
{
	const auto rec = format_record(mine);
	if (int rc = write_all(fd, rec.data(), rec.size(), timeout_s); rc != 0)
		return step_error(error, rc, "sending the address record", timeout_s);
	return 0;
}

/* A listening socket on port of every address: IPv6 with IPv4-mapped peers, else IPv4. */
int listen_on(uint16_t port, Fd *out, std::string *error)
{
	Fd s(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
	const int one = 1, zero = 0;
	if (s.get() >= 0) {
		::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		sockaddr_in6 a{};
		a.sin6_family = AF_INET6;
		a.sin6_addr = in6addr_any;
		a.sin6_port = htons(port);
		if (::bind(s.get(), reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0) {
			const int e = errno;
			if (e != EADDRNOTAVAIL && e != EAFNOSUPPORT)
				return fail(error, -e,
					    "listening on TCP port " + std::to_string(port) + ": " +
						    std::strerror(e));
			s.reset(); /* no IPv6 here: IPv4 alone */
		}
	}
	if (s.get() < 0) {
		s.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
		if (s.get() < 0)
			return fail(error, -errno, std::string("socket: ") + std::strerror(errno));
		::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_ANY);
		a.sin_port = htons(port);
		if (::bind(s.get(), reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0)
			return fail(error, -errno,
				    "listening on TCP port " + std::to_string(port) + ": " +
					    std::strerror(errno));
	}
	if (::listen(s.get(), 1) != 0)
		return fail(error, -errno, std::string("listen: ") + std::strerror(errno));
	out->reset(s.release());
	return 0;
}

} // namespace

std::array<char, kRecordSize> format_record(const PeerRecord &r)
{
	std::array<char, kRecordSize> out{};
	const std::string g = gid_hex(r.gid);
	/* 4 + 1 + 6 + 1 + 6 + 1 + 32 characters and the NUL: the whole array. */
	std::snprintf(out.data(), out.size(), "%04x:%06x:%06x:%s", r.lid & 0xffff, r.qpn & 0xffffff,
		      r.psn & 0xffffff, g.c_str());
	return out;
}

std::array<char, kMrRecordSize> format_mr_record(const MrRecord &r)
{
	std::array<char, kMrRecordSize> out{};
	/* 16 + 1 + 8 + 1 + 16 characters and the NUL: the whole array. */
	std::snprintf(out.data(), out.size(), "%016" PRIx64 ":%08x:%016" PRIx64, r.addr, r.rkey,
		      r.len);
	return out;
}

bool parse_mr_record(std::string_view b, MrRecord *out)
{
	if (b.size() != kMrRecordSize || b[16] != ':' || b[25] != ':' ||
	    b[kMrRecordSize - 1] != '\0')
		return false;
	uint32_t a_hi = 0, a_lo = 0, l_hi = 0, l_lo = 0, k = 0;
	if (!hex_field(b.substr(0, 8), 8, &a_hi) || !hex_field(b.substr(8, 8), 8, &a_lo) ||
	    !hex_field(b.substr(17, 8), 8, &k) || !hex_field(b.substr(26, 8), 8, &l_hi) ||
	    !hex_field(b.substr(34, 8), 8, &l_lo))
		return false;
	out->addr = uint64_t{a_hi} << 32 | a_lo;
	out->rkey = k;
	out->len = uint64_t{l_hi} << 32 | l_lo;
	return true;
}

bool parse_record(std::string_view b, PeerRecord *out)
{
	if (b.size() != kRecordSize || b[4] != ':' || b[11] != ':' || b[18] != ':' ||
	    b[kRecordSize - 1] != '\0')
		return false;
	PeerRecord r;
	if (!hex_field(b.substr(0, 4), 4, &r.lid) || !hex_field(b.substr(5, 6), 6, &r.qpn) ||
	    !hex_field(b.substr(12, 6), 6, &r.psn))
		return false;
	for (size_t i = 0; i < 16; i++) {
		const int hi = hex(b[19 + 2 * i]), lo = hex(b[20 + 2 * i]);
		if (hi < 0 || lo < 0)
			return false;
		r.gid[i] = static_cast<uint8_t>(hi << 4 | lo);
	}
	*out = r;
	return true;
}

std::string gid_text(const std::array<uint8_t, 16> &gid)
{
	char buf[INET6_ADDRSTRLEN];
	if (::inet_ntop(AF_INET6, gid.data(), buf, sizeof(buf)) == nullptr)
		return gid_hex(gid);
	return buf;
}

std::string gid_hex(const std::array<uint8_t, 16> &gid)
{
	static constexpr char kDigits[] = "0123456789abcdef";
	std::string s;
	for (uint8_t b : gid) {
		s += kDigits[b >> 4];
		s += kDigits[b & 15];
	}
	return s;
}

int exchange_listen(uint16_t port, uint32_t timeout_s, const PeerRecord &mine,
		    const std::function<int(const PeerRecord &)> &connect, PeerRecord *theirs,
		    std::string *error, const MrRecord *mine_mr, MrRecord *theirs_mr)
{
	Fd l;
	if (int rc = listen_on(port, &l, error); rc != 0)
		return rc;
	const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
	if (int rc = wait_fd(l.get(), POLLIN, deadline); rc != 0)
		return step_error(
			error, rc,
			("waiting for a peer on TCP port " + std::to_string(port)).c_str(),
			timeout_s);
	Fd c(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
	if (c.get() < 0)
		return fail(error, -errno, std::string("accept: ") + std::strerror(errno));
	l.reset(); /* one peer, as rc_pingpong's server */
	PeerRecord r;
	if (int rc = read_record(c.get(), timeout_s, &r, error); rc != 0)
		return rc;
	if (theirs_mr != nullptr)
		if (int rc = read_mr_record(c.get(), timeout_s, theirs_mr, error); rc != 0)
			return rc;
	/* The QP goes to RTR and RTS before the answer, so that the peer may send as soon as
	 * it has it (rc_pingpong's server does the same). */
	if (int rc = connect(r); rc != 0)
		return fail(error, rc, "connecting the QP to the peer's address failed");
	if (int rc = send_record(c.get(), timeout_s, mine, error); rc != 0)
		return rc;
	if (mine_mr != nullptr)
		if (int rc = send_mr_record(c.get(), timeout_s, *mine_mr, error); rc != 0)
			return rc;
	char done[sizeof(kDone)];
	if (int rc = read_exact(c.get(), done, sizeof(done), timeout_s); rc != 0)
		return step_error(error, rc, "waiting for the peer's \"done\"", timeout_s);
	if (std::memcmp(done, kDone, sizeof(kDone)) != 0)
		return fail(error, -EPROTO, "the peer's last message is not \"done\"");
	*theirs = r;
	return 0;
}

int exchange_connect(const std::string &host, uint16_t port, uint32_t timeout_s,
		     const PeerRecord &mine, PeerRecord *theirs, std::string *error,
		     const MrRecord *mine_mr, MrRecord *theirs_mr)
{
	addrinfo hints{};
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	addrinfo *res = nullptr;
	const std::string service = std::to_string(port);
	if (int g = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); g != 0)
		return fail(error, -ENOENT, "no address for '" + host + "': " + gai_strerror(g));
	const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
	Fd c;
	int last = 0;
	/* A refused connection is tried again until the deadline: the server may be starting. */
	while (c.get() < 0) {
		for (addrinfo *a = res; a != nullptr && c.get() < 0; a = a->ai_next) {
			Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
				      a->ai_protocol));
			if (s.get() < 0) {
				last = -errno;
				continue;
			}
			int rc = 0;
			if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
				rc = errno == EINPROGRESS ? wait_fd(s.get(), POLLOUT, deadline)
							  : -errno;
				if (rc == 0) {
					int e = 0;
					socklen_t len = sizeof(e);
					::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &e, &len);
					rc = -e;
				}
			}
			if (rc == 0)
				c.reset(s.release());
			else
				last = rc;
		}
		if (c.get() >= 0 || left_ms(deadline) == 0 || last != -ECONNREFUSED)
			break;
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
	}
	::freeaddrinfo(res);
	const std::string where = host + ":" + service;
	if (c.get() < 0) {
		if (last == -ECONNREFUSED || last == -ETIMEDOUT || last == 0)
			return fail(error, -ETIMEDOUT,
				    "connecting to " + where + ": nobody accepted within " +
					    std::to_string(timeout_s) + " s (timeout; last: " +
					    (last ? errno_text(last) : std::string("none")) + ")");
		return fail(error, last, "connecting to " + where + ": " + errno_text(last));
	}
	if (int rc = send_record(c.get(), timeout_s, mine, error); rc != 0)
		return rc;
	if (mine_mr != nullptr)
		if (int rc = send_mr_record(c.get(), timeout_s, *mine_mr, error); rc != 0)
			return rc;
	PeerRecord r;
	if (int rc = read_record(c.get(), timeout_s, &r, error); rc != 0)
		return rc;
	if (theirs_mr != nullptr)
		if (int rc = read_mr_record(c.get(), timeout_s, theirs_mr, error); rc != 0)
			return rc;
	if (int rc = write_all(c.get(), kDone, sizeof(kDone), timeout_s); rc != 0)
		return step_error(error, rc, "sending \"done\"", timeout_s);
	*theirs = r;
	return 0;
}

} // namespace nicmr::testmr
