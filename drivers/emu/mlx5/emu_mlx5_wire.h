/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UDP wire of an emulated port: one non-blocking UDP socket per port that is on the wire,
 * bound to the port's address (IPv4 or IPv6) and UDP port (4791 by default, RoCEv2's), and the
 * port's GID table (one entry: the address as a GID, IPv4-mapped for IPv4).
 *
 *   port 1 ── WirePort: fd, local address, GID 0 ── sendto / recvmmsg ── peers
 *   port 2 ── WirePort (or none: the port stays on the in-process loopback)
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
#include <cstddef>
#include <cstdint>
#include <string>

#include "roce_packet.h"

namespace nicmr::emu {

/* A port's place on the wire (EmuConfig::wire): an empty addr keeps it on the loopback. */
struct WirePortConfig {
	std::string addr;			 /* numeric IPv4 or IPv6 address to bind */
	uint16_t udp_port = roce::udp_port;	 /* where this port listens */
	uint16_t peer_udp_port = roce::udp_port; /* where its peers listen */
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

	/* Opens and binds the socket. -EINVAL (not a numeric address), the socket calls'
	 * -errno (-EADDRINUSE, -EADDRNOTAVAIL, ...). */
	int open(const WirePortConfig &cfg);
	bool ipv6() const noexcept { return v6_; }
	int fd() const noexcept { return fd_; }
	const Gid &gid() const noexcept { return gid_; }
	uint16_t udp_port() const noexcept { return port_; }
	uint16_t peer_udp_port() const noexcept { return peer_port_; }
	/* Whether a GID of a peer can be reached from this port (same address family). */
	bool reaches(const Gid &remote) const noexcept { return gid_is_ipv4(remote) != v6_; }

	/* The path of a datagram from here to remote (for the ICRC), and its address. */
	roce::IpPath tx_path(const Gid &remote) const noexcept;
	/* The path of a datagram that came from peer (as recvmmsg gave it) to here. */
	roce::IpPath rx_path(const sockaddr_storage &peer) const noexcept;
	/* The GID of a sender's address. */
	static Gid gid_of(const sockaddr_storage &peer) noexcept;

	/* Sends one datagram to remote (the peers' UDP port). 0 or -errno; -EAGAIN when the
	 * socket's buffer is full (the datagram is lost, as on a congested link). */
	int send(const Gid &remote, const uint8_t *data, size_t len) const noexcept;

	/* Receives up to n datagrams without blocking into bufs (each roce::max_datagram + 1
	 * bytes, so that a longer one shows); lens and peers get their lengths and senders.
	 * Returns the count (0: none). */
	int recv(uint8_t (*bufs)[roce::max_datagram + 1], size_t *lens, sockaddr_storage *peers,
		 int n) const noexcept;

private:
	int fd_ = -1;
	bool v6_ = false;
	Gid gid_{};
	uint16_t port_ = 0;
	uint16_t peer_port_ = 0;
	std::array<uint8_t, 16> local_{}; /* the bound address, IPv4 in the first 4 bytes */
};

} // namespace nicmr::emu

#endif
