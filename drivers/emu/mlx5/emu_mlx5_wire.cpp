/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UDP wire of an emulated port (emu_mlx5_wire.h). Sockets are non-blocking and unconnected:
 * Linux then sends a DF datagram with IPv4 ID 0 (include/net/ip.h, ip_select_ident_segs), which
 * is what the ICRC of roce::IpPath assumes by default (roce_packet.h).
 */
#include "emu_mlx5_wire.h"

#include <arpa/inet.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>

namespace nicmr::emu {

namespace {

constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* CLOCK_MONOTONIC in ns: the vDSO's, no system call. */
uint64_t mono_ns() noexcept
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

} // namespace

bool gid_is_ipv4(const Gid &g) noexcept
{
	return std::memcmp(g.data(), kV4Mapped, sizeof(kV4Mapped)) == 0;
}

WirePort::~WirePort()
{
	if (fd_ >= 0)
		::close(fd_);
}

int WirePort::open(const WirePortConfig &cfg)
{
	const WireFaults &f = cfg.faults;
	if (f.loss > 100 || f.dup > 100 || f.reorder > 100 || f.delay_us > WireFaults::kMaxDelayUs)
		return -EINVAL;
	faults_ = f;
	faulty_ = f.any();
	rng_ = f.seed == 0 ? 1 : f.seed;
	if (faulty_ && (f.reorder != 0 || f.delay_us != 0)) {
		held_.reset(new (std::nothrow) Held[kHeldSlots]);
		if (!held_)
			return -ENOMEM;
	}
	in_addr a4{};
	in6_addr a6{};
	if (inet_pton(AF_INET, cfg.addr.c_str(), &a4) == 1) {
		v6_ = false;
		std::memcpy(gid_.data(), kV4Mapped, sizeof(kV4Mapped));
		std::memcpy(gid_.data() + 12, &a4.s_addr, 4);
		local_ = {};
		std::memcpy(local_.data(), &a4.s_addr, 4);
	} else if (inet_pton(AF_INET6, cfg.addr.c_str(), &a6) == 1) {
		v6_ = true;
		std::memcpy(gid_.data(), a6.s6_addr, 16);
		std::memcpy(local_.data(), a6.s6_addr, 16);
		/* An IPv4-mapped IPv6 address is an IPv4 port: give it as IPv4. */
		if (gid_is_ipv4(gid_))
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	port_ = cfg.udp_port;
	peer_port_ = cfg.peer_udp_port;
	const int fd =
		::socket(v6_ ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (v6_) {
		const int on = 1;
		/* Path MTU discovery on, fragmentation off: RoCE packets are never fragmented. */
		const int pmtu = IPV6_PMTUDISC_DO;
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
		setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof(pmtu));
		sockaddr_in6 sa{};
		sa.sin6_family = AF_INET6;
		sa.sin6_port = htons(port_);
		sa.sin6_addr = a6;
		rc = ::bind(fd, reinterpret_cast<const sockaddr *>(&sa), sizeof(sa));
	} else {
		/* DF set (IP_PMTUDISC_DO): the kernel sends ID 0 from an unconnected socket. */
		const int pmtu = IP_PMTUDISC_DO;
		setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
		sockaddr_in sa{};
		sa.sin_family = AF_INET;
		sa.sin_port = htons(port_);
		sa.sin_addr = a4;
		rc = ::bind(fd, reinterpret_cast<const sockaddr *>(&sa), sizeof(sa));
	}
	if (rc < 0) {
		rc = -errno;
		::close(fd);
		return rc;
	}
	fd_ = fd;
	return 0;
}

roce::IpPath WirePort::tx_path(const Gid &remote) const noexcept
{
	roce::IpPath p;
	p.ipv6 = v6_;
	p.src = local_;
	if (v6_)
		std::memcpy(p.dst.data(), remote.data(), 16);
	else
		std::memcpy(p.dst.data(), remote.data() + 12, 4);
	p.src_port = port_;
	p.dst_port = peer_port_;
	return p;
}

roce::IpPath WirePort::rx_path(const sockaddr_storage &peer) const noexcept
{
	roce::IpPath p;
	p.ipv6 = v6_;
	p.dst = local_;
	p.dst_port = port_;
	if (peer.ss_family == AF_INET6) {
		const auto &s = reinterpret_cast<const sockaddr_in6 &>(peer);
		std::memcpy(p.src.data(), s.sin6_addr.s6_addr, 16);
		p.src_port = ntohs(s.sin6_port);
	} else {
		const auto &s = reinterpret_cast<const sockaddr_in &>(peer);
		std::memcpy(p.src.data(), &s.sin_addr.s_addr, 4);
		p.src_port = ntohs(s.sin_port);
	}
	return p;
}

Gid WirePort::gid_of(const sockaddr_storage &peer) noexcept
{
	Gid g{};
	if (peer.ss_family == AF_INET6) {
		std::memcpy(g.data(),
			    reinterpret_cast<const sockaddr_in6 &>(peer).sin6_addr.s6_addr, 16);
	} else {
		std::memcpy(g.data(), kV4Mapped, sizeof(kV4Mapped));
		std::memcpy(g.data() + 12,
			    &reinterpret_cast<const sockaddr_in &>(peer).sin_addr.s_addr, 4);
	}
	return g;
}

uint64_t WirePort::draw() noexcept
{
	/* xorshift64* (Vigna, "An experiment with Marsaglia's xorshift generators"): a fixed
	 * sequence per seed, which is all fault injection needs. */
	rng_ ^= rng_ >> 12;
	rng_ ^= rng_ << 25;
	rng_ ^= rng_ >> 27;
	return (rng_ * 0x2545f4914f6cdd1dull) >> 32;
}

bool WirePort::hold(const Gid &remote, const uint8_t *data, size_t len, uint64_t due_ns,
		    bool reorder) noexcept
{
	if (!held_ || len > roce::max_datagram)
		return false;
	for (uint32_t i = 0; i < kHeldSlots; i++) {
		Held &h = held_[i];
		if (h.seq != 0)
			continue;
		h.to = remote;
		h.due_ns = due_ns;
		h.seq = ++seq_;
		h.reorder = reorder;
		h.len = static_cast<uint16_t>(len);
		std::memcpy(h.data, data, len);
		held_count_.fetch_add(1, std::memory_order_relaxed);
		return true;
	}
	return false;
}

uint32_t WirePort::release_locked(uint64_t now_ns, uint64_t passed_seq) noexcept
{
	uint32_t errors = 0;
	while (held_count_.load(std::memory_order_relaxed) != 0) {
		Held *next = nullptr;
		for (uint32_t i = 0; i < kHeldSlots; i++) {
			Held &h = held_[i];
			if (h.seq == 0 || (h.due_ns > now_ns && !(h.reorder && h.seq < passed_seq)))
				continue;
			if (next == nullptr || h.seq < next->seq)
				next = &h;
		}
		if (next == nullptr)
			break;
		if (raw_send(next->to, next->data, next->len) < 0)
			errors++;
		next->seq = 0;
		held_count_.fetch_sub(1, std::memory_order_relaxed);
	}
	return errors;
}

uint32_t WirePort::release_held(uint64_t now_ns) noexcept
{
	if (!holding())
		return 0;
	lock();
	const uint32_t errors = release_locked(now_ns, 0);
	unlock();
	return errors;
}

WireFaultCounts WirePort::fault_counts() const noexcept
{
	return {lost_.load(std::memory_order_relaxed), duplicated_.load(std::memory_order_relaxed),
		reordered_.load(std::memory_order_relaxed),
		delayed_.load(std::memory_order_relaxed)};
}

int WirePort::send(const Gid &remote, const uint8_t *data, size_t len) noexcept
{
	if (!faulty_)
		return raw_send(remote, data, len);
	const auto count = [](std::atomic<uint64_t> &c) {
		c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
	};
	lock();
	if (hit(faults_.loss)) {
		count(lost_);
		unlock();
		return 0;
	}
	const int copies = hit(faults_.dup) ? 2 : 1;
	if (copies == 2)
		count(duplicated_);
	const uint64_t now = held_ ? mono_ns() : 0;
	int rc = 0;
	for (int i = 0; i < copies; i++) {
		const bool reorder = hit(faults_.reorder);
		const uint64_t due = now + uint64_t{faults_.delay_us} * 1000 +
				     (reorder ? uint64_t{kReorderHoldUs} * 1000 : 0);
		if ((reorder || faults_.delay_us != 0) && hold(remote, data, len, due, reorder)) {
			count(reorder ? reordered_ : delayed_);
			continue;
		}
		/* Sent now: every reordered datagram held before it has been passed. */
		const uint64_t passed = seq_ + 1;
		if (const int r = raw_send(remote, data, len); r < 0)
			rc = r;
		if (held_)
			release_locked(now, passed);
	}
	unlock();
	return rc;
}

int WirePort::raw_send(const Gid &remote, const uint8_t *data, size_t len) const noexcept
{
	ssize_t n;
	if (v6_) {
		sockaddr_in6 sa{};
		sa.sin6_family = AF_INET6;
		sa.sin6_port = htons(peer_port_);
		std::memcpy(sa.sin6_addr.s6_addr, remote.data(), 16);
		n = ::sendto(fd_, data, len, 0, reinterpret_cast<const sockaddr *>(&sa),
			     sizeof(sa));
	} else {
		sockaddr_in sa{};
		sa.sin_family = AF_INET;
		sa.sin_port = htons(peer_port_);
		std::memcpy(&sa.sin_addr.s_addr, remote.data() + 12, 4);
		n = ::sendto(fd_, data, len, 0, reinterpret_cast<const sockaddr *>(&sa),
			     sizeof(sa));
	}
	return n < 0 ? -errno : 0;
}

int WirePort::recv(uint8_t (*bufs)[roce::max_datagram + 1], size_t *lens, sockaddr_storage *peers,
		   int n) const noexcept
{
	constexpr int kMax = 32;
	if (n > kMax)
		n = kMax;
	mmsghdr msgs[kMax];
	iovec iov[kMax];
	for (int i = 0; i < n; i++) {
		iov[i] = {bufs[i], roce::max_datagram + 1};
		msgs[i] = {};
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_name = &peers[i];
		msgs[i].msg_hdr.msg_namelen = sizeof(peers[i]);
	}
	const int got = ::recvmmsg(fd_, msgs, static_cast<unsigned>(n), MSG_DONTWAIT, nullptr);
	if (got <= 0)
		return 0;
	for (int i = 0; i < got; i++)
		lens[i] = msgs[i].msg_len;
	return got;
}

} // namespace nicmr::emu
