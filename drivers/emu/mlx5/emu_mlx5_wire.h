/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UDP wire of an emulated port: one non-blocking UDP socket per port that is on the wire,
 * bound to the port's address (IPv4 or IPv6) and UDP port (4791 by default, RoCEv2's), and the
 * port's GID table (one entry: the address as a GID, IPv4-mapped for IPv4).
 *
 *   port 1 ── WirePort: fd, local address, GID 0 ── sendto / recvmmsg ── peers
 *   port 2 ── WirePort (or none: the port stays on the in-process loopback)
 *
 * An IPv4 port receives through a raw IPPROTO_UDP socket filtered to its UDP port (the ICRC
 * covers the IPv4 ID, which a UDP socket does not show; rxe sends IDs other than 0); its UDP
 * socket stays bound, so the kernel answers no ICMP port unreachable, and takes nothing
 * (a drop-all filter). Without CAP_NET_RAW, or with WirePortConfig::raw_rx off, it receives
 * through the UDP socket and assumes ID 0. An IPv6 port always receives through its UDP socket
 * (IPv6 has no ID).
 *
 * The RC transport over it (emu_mlx5_rc.cpp) builds and parses packets with
 * drivers/common/roce only; this file moves datagrams and addresses. doc/device-model.md
 * ("The UDP wire") lists the options, defaults, limits and counters.
 */
#ifndef NICMR_EMU_MLX5_WIRE_H
#define NICMR_EMU_MLX5_WIRE_H

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "roce_packet.h"

namespace nicmr::emu {

/*
 * Faults the port injects into what it sends (tc netem is not on every machine), each drawn
 * per datagram from the port's own generator, so that a seed repeats a run's pattern:
 * loss (the datagram is not sent), dup (sent twice), reorder (held until the next datagram
 * went out, or kReorderHoldUs), delay (held delay_us). Percentages 0..100.
 */
struct WireFaults {
	uint32_t loss = 0, dup = 0, reorder = 0;
	uint32_t delay_us = 0; /* 0 .. kMaxDelayUs */
	uint64_t seed = 1;     /* 0 is taken as 1 */
	static constexpr uint32_t kMaxDelayUs = 1000000;
	bool any() const noexcept { return loss != 0 || dup != 0 || reorder != 0 || delay_us != 0; }
};

/* A port's place on the wire (EmuConfig::wire): an empty addr keeps it on the loopback. */
struct WirePortConfig {
	std::string addr;			 /* numeric IPv4 or IPv6 address to bind */
	uint16_t udp_port = roce::udp_port;	 /* where this port listens */
	uint16_t peer_udp_port = roce::udp_port; /* where its peers listen */
	WireFaults faults;			 /* none by default */
	/* IPv4: receive through a raw socket to see the IP ID (needs CAP_NET_RAW; without it
	 * the port falls back to its UDP socket with a warning). Off: the UDP socket, ID 0. */
	bool raw_rx = true;
};

/* What a received datagram's IPv4 header said that the ICRC covers and a UDP socket does not
 * show (WirePort::recv with the raw socket). The defaults are what a UDP socket assumes. */
struct WireRxIp {
	uint16_t ipv4_id = 0;
	bool ipv4_df = true;
};

/* What a port's fault injection did (WireStats sums the ports). */
struct WireFaultCounts {
	uint64_t lost = 0, duplicated = 0, reordered = 0, delayed = 0;
};

/* A GID as the PRM and the wire carry it: 16 bytes, network order. */
using Gid = std::array<uint8_t, 16>;

/* IPv4-mapped (::ffff:a.b.c.d): what RoCEv2 calls an IPv4 GID. */
bool gid_is_ipv4(const Gid &g) noexcept;

class WirePort {
public:
	WirePort() = default;
	~WirePort();
	WirePort(const WirePort &) = delete;
	WirePort &operator=(const WirePort &) = delete;

	/* Opens and binds the socket. -EINVAL (not a numeric address, a fault percentage above
	 * 100, a delay above WireFaults::kMaxDelayUs), -ENOMEM (the held-datagram ring), the
	 * socket calls' -errno (-EADDRINUSE, -EADDRNOTAVAIL, ...). */
	int open(const WirePortConfig &cfg);
	bool ipv6() const noexcept { return v6_; }
	/* The UDP socket: what the port sends from. */
	int fd() const noexcept { return fd_; }
	/* What the port receives from (readable when a datagram waits): the raw socket, or the
	 * UDP socket when the port has none. */
	int rx_fd() const noexcept { return raw_fd_ >= 0 ? raw_fd_ : fd_; }
	/* Whether the port receives through its raw socket (IPv4, CAP_NET_RAW, raw_rx). */
	bool raw_rx() const noexcept { return raw_fd_ >= 0; }
	const Gid &gid() const noexcept { return gid_; }
	uint16_t udp_port() const noexcept { return port_; }
	uint16_t peer_udp_port() const noexcept { return peer_port_; }
	/* Whether a GID of a peer can be reached from this port (same address family). */
	bool reaches(const Gid &remote) const noexcept { return gid_is_ipv4(remote) != v6_; }

	/* The path of a datagram from here to remote (for the ICRC), and its address. */
	roce::IpPath tx_path(const Gid &remote) const noexcept;
	/* The path of a datagram that came from peer (as recv gave it, with its IPv4 header's
	 * ID and DF) to here. */
	roce::IpPath rx_path(const sockaddr_storage &peer, const WireRxIp &ip = {}) const noexcept;
	/* The GID of a sender's address. */
	static Gid gid_of(const sockaddr_storage &peer) noexcept;

	/* Sends one datagram to remote (the peers' UDP port). 0 or -errno; -EAGAIN when the
	 * socket's buffer is full (the datagram is lost, as on a congested link). With faults,
	 * the datagram may be dropped, doubled or held (0: it counts as sent); no allocation,
	 * no system call beyond the sends. Thread-safe. */
	int send(const Gid &remote, const uint8_t *data, size_t len) noexcept;
	/* The device thread, once per progress turn: sends the held datagrams due at now_ns
	 * (CLOCK_MONOTONIC). The count of sends the socket refused. */
	uint32_t release_held(uint64_t now_ns) noexcept;
	/* Whether datagrams are held (a progress turn should come back soon). */
	bool holding() const noexcept { return held_count_.load(std::memory_order_relaxed) != 0; }
	WireFaultCounts fault_counts() const noexcept;
	/* Datagrams a port holds at most (delay and reordering); with the ring full a datagram
	 * goes out at once. */
	static constexpr uint32_t kHeldSlots = 64;
	/* How long a reordered datagram waits at most for a later one to pass it. */
	static constexpr uint32_t kReorderHoldUs = 200;

	/* Receives up to n (at most kRecvBatch) datagrams without blocking, with one recvmmsg,
	 * into bufs (each roce::max_datagram + 1 bytes, so that a longer one shows); lens and
	 * peers get their lengths and senders, ips (when not null) their IPv4 ID and DF (the
	 * defaults without the raw socket). Returns the count (0: none). */
	int recv(uint8_t (*bufs)[roce::max_datagram + 1], size_t *lens, sockaddr_storage *peers,
		 int n, WireRxIp *ips = nullptr) const noexcept;
	static constexpr int kRecvBatch = 32;

private:
	/* The raw receive socket of an IPv4 port (open, after the UDP socket is bound): 0,
	 * -EPERM / -EACCES without CAP_NET_RAW, another socket call's -errno. */
	int open_raw_rx() noexcept;
	int recv_udp(uint8_t (*bufs)[roce::max_datagram + 1], size_t *lens, sockaddr_storage *peers,
		     int n, WireRxIp *ips) const noexcept;
	int recv_raw(uint8_t (*bufs)[roce::max_datagram + 1], size_t *lens, sockaddr_storage *peers,
		     int n, WireRxIp *ips) const noexcept;
	int raw_send(const Gid &remote, const uint8_t *data, size_t len) const noexcept;
	uint64_t draw() noexcept; /* the fault generator (xorshift64*), lock held */
	bool hit(uint32_t pct) noexcept { return pct != 0 && draw() % 100 < pct; }
	/* Holds one datagram until due_ns; false when the ring is full. Lock held. */
	bool hold(const Gid &remote, const uint8_t *data, size_t len, uint64_t due_ns,
		  bool reorder) noexcept;
	/* Sends the held datagrams with due_ns <= now, or every reordered one that was held
	 * before seq (a later datagram went out), oldest first. Lock held. */
	uint32_t release_locked(uint64_t now_ns, uint64_t passed_seq) noexcept;
	void lock() noexcept
	{
		while (lock_.test_and_set(std::memory_order_acquire))
			;
	}
	void unlock() noexcept { lock_.clear(std::memory_order_release); }

	struct Held {
		Gid to{};
		uint64_t due_ns = 0;
		uint64_t seq = 0; /* 0: free */
		bool reorder = false;
		uint16_t len = 0;
		uint8_t data[roce::max_datagram];
	};

	int fd_ = -1;
	int raw_fd_ = -1; /* the raw receive socket, or -1 */
	bool v6_ = false;
	Gid gid_{};
	uint16_t port_ = 0;
	uint16_t peer_port_ = 0;
	std::array<uint8_t, 16> local_{}; /* the bound address, IPv4 in the first 4 bytes */
	/* Fault injection: set at open, then guarded by lock_ (taken only when faults are on:
	 * the ringing threads and the device thread send through one port). */
	WireFaults faults_;
	bool faulty_ = false;
	std::atomic_flag lock_ = ATOMIC_FLAG_INIT;
	uint64_t rng_ = 1;
	uint64_t seq_ = 0;
	std::unique_ptr<Held[]> held_; /* kHeldSlots, made at open when faults are on */
	std::atomic<uint32_t> held_count_{0};
	/* Relaxed counters, written under lock_. */
	std::atomic<uint64_t> lost_{0}, duplicated_{0}, reordered_{0}, delayed_{0};
};

} // namespace nicmr::emu

#endif
