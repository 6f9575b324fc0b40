/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UDP wire of an emulated port (emu_mlx5_wire.h). Sockets are non-blocking and unconnected:
 * Linux then sends a DF datagram with IPv4 ID 0 (include/net/ip.h, ip_select_ident_segs), which
 * is what the ICRC of roce::IpPath assumes by default (roce_packet.h). Other senders (Linux rxe,
 * rxe_net.c prepare_ipv4_hdr, takes __ip_select_ident's ID) send IDs other than 0, so an IPv4
 * port receives through a raw socket that shows the IP header (open_raw_rx, recv_raw).
 */
#include "emu_mlx5_wire.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/filter.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>

#include "nicmr_log.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;

namespace {

constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* CLOCK_MONOTONIC in ns: the vDSO's, no system call. */
uint64_t mono_ns() noexcept
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

/* A receive buffer of WirePort::kSocketBuffer bytes: SO_RCVBUFFORCE where the process may
 * (CAP_NET_ADMIN, socket(7)), so that net.core.rmem_max (208 KiB on a stock kernel) does not
 * cap it, else SO_RCVBUF (capped there; a smaller buffer is no error: the RC transport resends
 * what overflowed). */
void ask_rcvbuf(int fd) noexcept
{
	const int sb = WirePort::kSocketBuffer;
	if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sb, sizeof(sb)) != 0)
		::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sb, sizeof(sb));
}

/* The MTU of the interface that holds the address local (4 bytes for IPv4, 16 for IPv6), or
 * 0: getifaddrs(3) finds the interface (its own address, else the subnet it serves: lo
 * serves all of 127.0.0.0/8 with 127.0.0.1/8), SIOCGIFMTU (netdevice(7)) on fd reads its MTU. */
uint32_t interface_mtu(const uint8_t *local, bool v6, int fd) noexcept
{
	ifaddrs *list = nullptr;
	if (::getifaddrs(&list) != 0)
		return 0;
	const size_t len = v6 ? 16 : 4;
	auto bytes = [v6](const sockaddr *sa) {
		return v6 ? reinterpret_cast<const uint8_t *>(
				    &reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_addr)
			  : reinterpret_cast<const uint8_t *>(
				    &reinterpret_cast<const sockaddr_in *>(sa)->sin_addr);
	};
	const ifaddrs *exact = nullptr, *subnet = nullptr;
	for (const ifaddrs *i = list; i != nullptr; i = i->ifa_next) {
		if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != (v6 ? AF_INET6 : AF_INET))
			continue;
		const uint8_t *a = bytes(i->ifa_addr);
		if (std::memcmp(a, local, len) == 0) {
			exact = i;
			break;
		}
		if (subnet == nullptr && i->ifa_netmask != nullptr) {
			const uint8_t *m = bytes(i->ifa_netmask);
			bool in = true;
			for (size_t b = 0; b < len && in; b++)
				in = (a[b] & m[b]) == (local[b] & m[b]);
			if (in)
				subnet = i;
		}
	}
	uint32_t mtu = 0;
	if (const ifaddrs *i = exact != nullptr ? exact : subnet) {
		ifreq r{};
		std::strncpy(r.ifr_name, i->ifa_name, IFNAMSIZ - 1);
		if (::ioctl(fd, SIOCGIFMTU, &r) == 0 && r.ifr_mtu > 0)
			mtu = static_cast<uint32_t>(r.ifr_mtu);
	}
	::freeifaddrs(list);
	return mtu;
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
	if (raw_fd_ >= 0)
		::close(raw_fd_);
}

int WirePort::open(const WirePortConfig &cfg)
{
	const WireFaults &f = cfg.faults;
	if (f.loss > 100 || f.dup > 100 || f.reorder > 100 ||
	    f.delay_us > WireFaults::kMaxDelayUs || cfg.rx_batch > uint32_t(WireRx::kMessages))
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
	tx_.reset(new (std::nothrow) WireTx[kTxBatches]);
	if (!tx_)
		return -ENOMEM;
	/* GSO on IPv6 only: an IPv4 GSO send's segments get IP IDs 0, 1, 2 ... (net/ipv4/
	 * af_inet.c, inet_gso_segment, counts the ID up per segment), which the ICRC covers
	 * (roce.md) and a reader through a UDP socket cannot see: it assumes 0. Faults act per
	 * datagram: no GSO with them. */
	gso_ = cfg.gso && v6_ && !faulty_;
	test_gso_errno_ = cfg.test_gso_errno;
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
	/* The bound port: with udp_port 0 the kernel chose it, and it is what the ICRC of every
	 * datagram this port sends (source port) and receives (destination port) covers, on
	 * every receive path (the raw socket's filter, the UDP socket, IPv6). */
	sockaddr_storage bound{};
	socklen_t bl = sizeof(bound);
	if (::getsockname(fd, reinterpret_cast<sockaddr *>(&bound), &bl) < 0) {
		rc = -errno;
		::close(fd);
		return rc;
	}
	port_ = ntohs(v6_ ? reinterpret_cast<const sockaddr_in6 &>(bound).sin6_port
			  : reinterpret_cast<const sockaddr_in &>(bound).sin_port);
	/* A send batch puts a 64 KiB message, and a window of them, on the link at once: room
	 * for kSocketBuffer bytes in both buffers (socket(7): the kernel caps it at rmem_max /
	 * wmem_max, and a smaller buffer is no error: the RC transport resends what it lost). */
	const int sb = kSocketBuffer;
	ask_rcvbuf(fd);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	fd_ = fd;
	link_mtu_ = interface_mtu(local_.data(), v6_, fd);
	if (!v6_ && cfg.raw_rx) {
		if (const int r = open_raw_rx(); r < 0)
			NICMR_LOG(
				warn, "emu-mlx5",
				"wire %s:%u: no raw receive socket (%s%s): receiving through the "
				"UDP socket, which assumes IPv4 ID 0 in the ICRC (peers that send "
				"other IDs, such as Linux rxe, are dropped as bad ICRC)",
				cfg.addr.c_str(), port_, std::strerror(-r),
				r == -EPERM || r == -EACCES ? ": CAP_NET_RAW needed" : "");
	}
	/* UDP GRO where the UDP socket receives (udp(7), UDP_GRO; Linux 5.0 on: ENOPROTOOPT
	 * before, and the port then receives one datagram a message). On this path the
	 * kernel hands a GRO socket a UDP GSO send over loopback or veth whole, with its
	 * segment size, instead of cutting it up first (include/linux/udp.h, udp_unexpected_gso,
	 * and include/net/udp.h, udp_rcv_segment); a NIC's GRO coalesces datagrams of one flow the
	 * same way. */
	if (raw_fd_ < 0 && cfg.gro) {
		const int on = 1;
		gro_ = ::setsockopt(fd_, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0;
		if (!gro_)
			NICMR_LOG(info, "emu-mlx5",
				  "wire %s:%u: no UDP GRO (%s): one datagram per received message",
				  cfg.addr.c_str(), port_, std::strerror(errno));
	}
	/* The receive batch: slots of 64 KiB with GRO (a coalesced message), of one datagram
	 * without (2 MiB against 134 KiB: the common case touches no more than it fills). The
	 * sockets close with the port (the destructor) when this fails. */
	rx_.reset(new (std::nothrow) WireRx);
	if (!rx_)
		return -ENOMEM;
	rx_->slot_ = gro_ ? WireRx::kGroSlot : WireRx::kSlot;
	rx_->fixed_ = cfg.rx_batch;
	rx_->want_ = cfg.rx_batch != 0 ? cfg.rx_batch : 1;
	rx_->buf_.reset(new (std::nothrow) uint8_t[WireRx::kMessages * rx_->slot_]);
	if (!rx_->buf_)
		return -ENOMEM;
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

roce::IpPath WirePort::rx_path(const sockaddr_storage &peer, const WireRxIp &ip) const noexcept
{
	roce::IpPath p;
	p.ipv6 = v6_;
	p.ipv4_id = ip.ipv4_id;
	p.ipv4_df = ip.ipv4_df;
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
	const int err = n < 0 ? errno : 0;
	syscalls_.fetch_add(1, std::memory_order_relaxed);
	return -err;
}

/* ---- Send batches ----------------------------------------------------------------------- */

WireTxCounts WirePort::tx_counts() const noexcept
{
	return {syscalls_.load(std::memory_order_relaxed),
		gso_sends_.load(std::memory_order_relaxed),
		gso_refused_.load(std::memory_order_relaxed)};
}

WireTx *WirePort::tx_acquire() noexcept
{
	if (!tx_)
		return nullptr;
	for (uint32_t i = 0; i < kTxBatches; i++) {
		WireTx &b = tx_[i];
		/* Acquire: the previous holder's writes to the batch (its release in
		 * tx_release) before ours. */
		if (!b.busy_.test_and_set(std::memory_order_acquire)) {
			b.clear();
			return &b;
		}
	}
	return nullptr;
}

uint32_t WirePort::tx_messages(WireTx &b, uint32_t from, bool gso) const noexcept
{
	uint32_t m = 0;
	for (uint32_t i = from; i < b.n_;) {
		const WireTx::Dgram &d = b.d_[i];
		/* A GSO run: datagrams to one peer, back to back, all of the first one's size but
		 * the last, which may be shorter (udp_sendmsg's UDP_SEGMENT: every segment
		 * gso_size bytes but the last). A shorter one that starts a run of its own (a
		 * WRITE's MIDDLEs after its longer FIRST) is left to that run. */
		uint32_t j = i + 1;
		size_t bytes = d.len;
		if (gso)
			while (j < b.n_ && j - i < kGsoSegments && b.d_[j].to == d.to &&
			       b.d_[j].len <= d.len && bytes + b.d_[j].len <= kGsoBytes) {
				const WireTx::Dgram &e = b.d_[j];
				if (e.len < d.len && j + 1 < b.n_ && b.d_[j + 1].to == e.to &&
				    b.d_[j + 1].len == e.len)
					break;
				bytes += e.len;
				j++;
				if (e.len < d.len)
					break;
			}
		sockaddr_in6 &to = b.to_[m];
		to = {};
		socklen_t tolen = sizeof(sockaddr_in6);
		if (v6_) {
			to.sin6_family = AF_INET6;
			to.sin6_port = htons(peer_port_);
			std::memcpy(to.sin6_addr.s6_addr, d.to.data(), 16);
		} else {
			auto &t4 = reinterpret_cast<sockaddr_in &>(to);
			t4.sin_family = AF_INET;
			t4.sin_port = htons(peer_port_);
			std::memcpy(&t4.sin_addr.s_addr, d.to.data() + 12, 4);
			tolen = sizeof(sockaddr_in);
		}
		b.iov_[m] = {b.buf_ + d.off, bytes};
		msghdr &h = b.msgs_[m].msg_hdr;
		h = {};
		h.msg_name = &to;
		h.msg_namelen = tolen;
		h.msg_iov = &b.iov_[m];
		h.msg_iovlen = 1;
		if (j - i > 1) {
			/* udp(7): UDP_SEGMENT as a control message, the segment size a uint16_t. */
			h.msg_control = b.cmsg_[m];
			h.msg_controllen = sizeof(b.cmsg_[m]);
			cmsghdr *c = CMSG_FIRSTHDR(&h);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
			const auto seg = static_cast<uint16_t>(d.len);
			std::memcpy(CMSG_DATA(c), &seg, sizeof(seg));
		}
		b.first_[m] = i;
		b.count_[m] = j - i;
		m++;
		i = j;
	}
	return m;
}

void WirePort::tx_flush(WireTx &b, uint32_t *sent, uint32_t *errors) noexcept
{
	*sent = 0;
	*errors = 0;
	if (faulty_) {
		/* Faults draw per datagram (send): loss, duplication, reordering, delay. */
		for (uint32_t i = 0; i < b.n_; i++)
			(send(b.d_[i].to, b.buf_ + b.d_[i].off, b.d_[i].len) < 0 ? *errors
										 : *sent)++;
		b.clear();
		return;
	}
	uint32_t from = 0;
	while (from < b.n_) {
		const bool gso = gso_active();
		const uint32_t m = tx_messages(b, from, gso);
		uint32_t done = 0;
		bool rebuild = false;
		while (done < m) {
			const bool run = b.count_[done] > 1;
			uint32_t upto = m;
			if (test_gso_errno_ != 0) /* the messages before the first GSO run */
				for (upto = done; upto < m && b.count_[upto] == 1; upto++)
					;
			int r;
			if (upto == done) {
				r = -1; /* the test hook: the kernel's refusal of a GSO send */
				errno = test_gso_errno_;
			} else if (upto - done == 1 && !run) {
				/* One datagram alone (a ping-pong's): sendto, which copies no
				 * message header or iovec from the caller; about 65 ns less than
				 * sendmmsg of one over ::1 here (a 60-byte datagram and its recv:
				 * 1114-1178 against 1209-1226 ns). */
				const msghdr &h = b.msgs_[done].msg_hdr;
				r = ::sendto(fd_, h.msg_iov->iov_base, h.msg_iov->iov_len, 0,
					     static_cast<const sockaddr *>(h.msg_name),
					     h.msg_namelen) < 0
					    ? -1
					    : 1;
				syscalls_.fetch_add(1, std::memory_order_relaxed);
			} else {
				r = ::sendmmsg(fd_, b.msgs_ + done, upto - done, 0);
				syscalls_.fetch_add(1, std::memory_order_relaxed);
			}
			if (r > 0) {
				for (uint32_t k = done; k < done + static_cast<uint32_t>(r); k++) {
					*sent += b.count_[k];
					if (b.count_[k] > 1)
						gso_sends_.fetch_add(1, std::memory_order_relaxed);
				}
				done += static_cast<uint32_t>(r);
				continue;
			}
			/* sendmmsg(2): the first message not sent failed with errno (the ones
			 * before it went). A kernel without GSO for this route answers EIO (no
			 * checksum offload: net/ipv4/udp.c, udp_send_skb) or EINVAL: send these
			 * datagrams again one by one, and never try GSO again on this port. */
			const int err = errno;
			if (run && (err == EIO || err == EINVAL)) {
				if (!gso_off_.exchange(true, std::memory_order_relaxed))
					gso_refused_.fetch_add(1, std::memory_order_relaxed);
				from = b.first_[done];
				rebuild = true;
				break;
			}
			*errors += b.count_[done]; /* EAGAIN (buffer full), EMSGSIZE ...: lost */
			done++;
		}
		if (!rebuild)
			from = b.n_;
	}
	b.clear();
}

/* ---- Receive ----------------------------------------------------------------------------- */

namespace {

/* Sets a classic BPF program on a socket (socket(7), SO_ATTACH_FILTER). */
int attach_filter(int fd, sock_filter *code, unsigned short len) noexcept
{
	sock_fprog prog{len, code};
	return ::setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0 ? -errno : 0;
}

/* Reads and discards what a socket queued before its filter was attached. */
void drain(int fd) noexcept
{
	uint8_t b[1];
	while (::recv(fd, b, sizeof(b), MSG_DONTWAIT | MSG_TRUNC) >= 0)
		;
}

/* A raw IPPROTO_UDP socket's datagrams start at the IPv4 header; the filter takes IHL 5 (no
 * options: the ICRC's masked header is 20 bytes, as rxe_icrc.c rxe_icrc_hdr computes it),
 * unfragmented, to dst_port. */
constexpr size_t kRawHdr = roce::ipv4::size + roce::udp::size;

} // namespace

int WirePort::open_raw_rx() noexcept
{
	/* The filter takes the bound port (open read it back: a port of 0 asked the kernel). */
	const int fd = ::socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
	if (fd < 0)
		return -errno;
	/* Offsets are the IPv4 header's (20 bytes, IHL 5) and then the UDP header's. */
	sock_filter take[] = {
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0), /* version, IHL */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x45, 0, 5),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 6),		    /* flags, fragment offset */
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x3fff, 3, 0), /* MF or an offset */
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, roce::ipv4::size + 2), /* UDP destination port */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port_, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, 0xffff),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	int rc = attach_filter(fd, take, sizeof(take) / sizeof(take[0]));
	/* Bound to the port's address: raw_v4_input delivers only datagrams to it. */
	sockaddr_in sa{};
	sa.sin_family = AF_INET;
	std::memcpy(&sa.sin_addr.s_addr, local_.data(), 4); /* the UDP socket's address */
	if (rc == 0 && ::bind(fd, reinterpret_cast<const sockaddr *>(&sa), sizeof(sa)) < 0)
		rc = -errno;
	/* The UDP socket keeps the port (no ICMP port unreachable for what arrives) and takes
	 * nothing: its copies would only fill its buffer. */
	sock_filter none[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
	if (rc == 0)
		rc = attach_filter(fd_, none, 1);
	/* The raw socket is where the port's datagrams queue now: it needs the receive buffer
	 * the UDP socket was given (open). With the default (net.core.rmem_default, 208 KiB) a
	 * window of 64 KiB writes overflowed it and the RC transport resent after timeouts. */
	if (rc == 0)
		ask_rcvbuf(fd);
	if (rc < 0) {
		::close(fd);
		return rc;
	}
	drain(fd);
	drain(fd_);
	raw_fd_ = fd;
	return 0;
}

int WirePort::recv_messages(int fd, WireRx &rx, uint32_t n, bool plain) noexcept
{
	/* A batch of one (a ping-pong's, and every empty poll's) in the call that copies least
	 * from the caller. A poll that finds nothing cost, with a second thread in the process
	 * (glibc's cancellation wrappers then run), 193-200 ns for recvmmsg of one message
	 * with name and control buffer, 182-184 ns for recvmsg, 147 ns for recvfrom (::1,
	 * Linux 6.18). recvfrom has no control buffer: only where none is asked for (no
	 * UDP_GRO) and the datagram fills one iovec (the UDP socket's path). */
	if (n != 1)
		return ::recvmmsg(fd, rx.msgs_, n, MSG_DONTWAIT, nullptr);
	msghdr &h = rx.msgs_[0].msg_hdr;
	ssize_t k;
	if (plain) {
		socklen_t len = h.msg_namelen;
		k = ::recvfrom(fd, h.msg_iov[0].iov_base, h.msg_iov[0].iov_len, MSG_DONTWAIT,
			       static_cast<sockaddr *>(h.msg_name), &len);
		if (k >= 0)
			h.msg_namelen = len;
	} else {
		k = ::recvmsg(fd, &h, MSG_DONTWAIT);
	}
	if (k < 0)
		return -1;
	rx.msgs_[0].msg_len = static_cast<unsigned>(k);
	return 1;
}

const WireRx &WirePort::recv(int n) noexcept
{
	WireRx &rx = *rx_;
	rx.n_ = 0;
	if (n > WireRx::kMessages)
		n = WireRx::kMessages;
	if (n <= 0)
		return rx;
	/* A batch as large as what comes back to back (unless WirePortConfig::rx_batch fixes
	 * it): recvmmsg tries for one more message after the last it fills (net/socket.c,
	 * do_recvmmsg: each message after the first with MSG_DONTWAIT, until one fails), and
	 * that failed try cost about 100 ns a receive here (a 48-byte datagram over ::1: 412 ns
	 * for vlen 32 against 312 ns for vlen 1). Messages that come one at a time (a ping-pong:
	 * an empty poll between them) are taken one per call; a call that fills its batch right
	 * after one that received doubles it, up to n; one that receives fewer than it asked for
	 * sizes the next to what it got. */
	const auto want = static_cast<uint32_t>(std::min<int>(n, int(rx.want_)));
	if (raw_fd_ >= 0)
		recv_raw(rx, int(want));
	else
		recv_udp(rx, int(want));
	if (rx.fixed_ != 0)
		return rx;
	if (rx.n_ == want && rx.last_ != 0)
		rx.want_ = std::min(2 * want, uint32_t(WireRx::kMessages));
	else if (rx.n_ != 0 && rx.n_ < want)
		rx.want_ = rx.n_;
	rx.last_ = rx.n_;
	return rx;
}

WireRxCounts WirePort::rx_counts() const noexcept
{
	return {gro_batches_.load(std::memory_order_relaxed),
		gro_datagrams_.load(std::memory_order_relaxed)};
}

void WirePort::recv_raw(WireRx &rx, int n) noexcept
{
	static_assert(WireRx::kRawHdr == kRawHdr);
	/* The headers land apart, the datagram in its slot: one recvmmsg, two iovecs a
	 * datagram. No GRO here (gro_active): one datagram per message. */
	rx.armed_ = rx.used_ = 0; /* recv_udp's set-up is overwritten */
	for (int i = 0; i < n; i++) {
		/* Zeroed: a datagram shorter than the headers leaves the rest as it was. */
		std::memset(rx.hdr_[i], 0, kRawHdr);
		rx.iov_[i][0] = {rx.hdr_[i], kRawHdr};
		rx.iov_[i][1] = {rx.buf_.get() + size_t(i) * rx.slot_, rx.slot_};
		rx.msgs_[i] = {};
		rx.msgs_[i].msg_hdr.msg_iov = rx.iov_[i];
		rx.msgs_[i].msg_hdr.msg_iovlen = 2;
	}
	const int got = recv_messages(raw_fd_, rx, static_cast<uint32_t>(n), false);
	if (got <= 0)
		return;
	for (int i = 0; i < got; i++) {
		const uint8_t *ip = rx.hdr_[i];
		const uint8_t *u = ip + roce::ipv4::size;
		size_t len = 0; /* too short for the headers: too short for parse */
		if (rx.msgs_[i].msg_len >= kRawHdr) {
			/* The UDP length bounds the datagram (IP may carry padding); a UDP length
			 * longer than what came leaves the datagram short, and its ICRC (which
			 * covers that length) then refuses it. */
			len = rx.msgs_[i].msg_len - kRawHdr;
			const auto ulen = static_cast<size_t>(prm::get(u, roce::udp::length));
			if (ulen >= roce::udp::size && ulen - roce::udp::size < len)
				len = ulen - roce::udp::size;
		}
		rx.len_[i] = len;
		rx.seg_[i] = 0;
		auto &sa = reinterpret_cast<sockaddr_in &>(rx.peers_[i]);
		sa = {};
		sa.sin_family = AF_INET;
		std::memcpy(&sa.sin_addr.s_addr, ip + prm::byte_offset(roce::ipv4::src), 4);
		sa.sin_port = htons(static_cast<uint16_t>(prm::get(u, roce::udp::src_port)));
		rx.ips_[i].ipv4_id = static_cast<uint16_t>(prm::get(ip, roce::ipv4::id));
		rx.ips_[i].ipv4_df =
			(prm::get(ip, roce::ipv4::flags_frag) & roce::ipv4::flag_df) != 0;
	}
	rx.n_ = static_cast<uint32_t>(got);
}

void WirePort::recv_udp(WireRx &rx, int n) noexcept
{
	/* A message is set up once; the kernel writes back only the name and control lengths,
	 * the flags and msg_len of the messages it filled (net/socket.c, ___sys_recvmsg: nothing
	 * when that message's receive fails), so only those of the last call are set up again:
	 * a poll that finds nothing, the common case, costs the system call alone. */
	const auto un = static_cast<uint32_t>(n);
	for (uint32_t i = 0; i < std::max(un, rx.used_); i++) {
		if (i >= rx.used_ && i < rx.armed_)
			continue; /* as set up, and untouched since */
		rx.iov_[i][0] = {rx.buf_.get() + size_t(i) * rx.slot_, rx.slot_};
		msghdr &h = rx.msgs_[i].msg_hdr;
		h = {};
		h.msg_iov = rx.iov_[i];
		h.msg_iovlen = 1;
		h.msg_name = &rx.peers_[i];
		h.msg_namelen = sizeof(rx.peers_[i]);
		if (gro_) {
			/* The kernel sets msg_controllen to what it wrote. */
			h.msg_control = rx.cmsg_[i];
			h.msg_controllen = sizeof(rx.cmsg_[i]);
		}
	}
	rx.armed_ = std::max(un, rx.armed_);
	const int got = recv_messages(fd_, rx, un, !gro_);
	/* The messages filled, and the one after them in case its failed receive wrote. */
	rx.used_ = std::min(static_cast<uint32_t>(std::max(got, 0)) + 1, un);
	if (got <= 0)
		return;
	uint64_t batches = 0, datagrams = 0;
	for (int i = 0; i < got; i++) {
		rx.len_[i] = rx.msgs_[i].msg_len;
		rx.ips_[i] = {}; /* what the UDP socket cannot show: ID 0 and DF, as sent */
		size_t seg = 0;
		if (gro_) {
			/* udp(7): a coalesced message carries SOL_UDP / UDP_GRO with the segment
			 * size as an int (include/linux/udp.h, udp_cmsg_recv); a lone datagram
			 * none. */
			msghdr &h = rx.msgs_[i].msg_hdr;
			for (cmsghdr *c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c))
				if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
				    c->cmsg_len >= CMSG_LEN(sizeof(int))) {
					int v = 0;
					std::memcpy(&v, CMSG_DATA(c), sizeof(v));
					seg = v > 0 ? static_cast<size_t>(v) : 0;
				}
		}
		rx.seg_[i] = seg;
		if (const uint32_t k = rx.datagrams(static_cast<uint32_t>(i)).count(); k > 1) {
			batches++;
			datagrams += k;
		}
	}
	if (batches != 0) {
		gro_batches_.fetch_add(batches, std::memory_order_relaxed);
		gro_datagrams_.fetch_add(datagrams, std::memory_order_relaxed);
	}
	rx.n_ = static_cast<uint32_t>(got);
}

} // namespace nicmr::emu
