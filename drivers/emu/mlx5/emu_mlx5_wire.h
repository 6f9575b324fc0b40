/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UDP wire of an emulated port: one non-blocking UDP socket per port that is on the wire,
 * bound to the port's address (IPv4 or IPv6) and UDP port (4791 by default, RoCEv2's), and the
 * port's GID table (one entry: the address as a GID, IPv4-mapped for IPv4).
 *
 *   port 1 ── WirePort: fd, local address, GID 0 ── sendmmsg (+ UDP GSO) / recvmmsg ── peers
 *   port 2 ── WirePort (or none: the port stays on the in-process loopback)
 *
 * An IPv4 port receives through a raw IPPROTO_UDP socket filtered to its UDP port (the ICRC
 * covers the IPv4 ID, which a UDP socket does not show; rxe sends IDs other than 0); its UDP
 * socket stays bound, so the kernel answers no ICMP port unreachable, and takes nothing
 * (a drop-all filter). Without CAP_NET_RAW, or with WirePortConfig::raw_rx off, it receives
 * through the UDP socket and assumes ID 0. An IPv6 port always receives through its UDP socket
 * (IPv6 has no ID). A port that receives through its UDP socket asks for UDP GRO: the kernel
 * may hand it several datagrams of one flow as one message, which WireRx splits (GroSplit)
 * before each datagram is parsed and checked.
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
#include <span>
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
	/* UDP GSO (UDP_SEGMENT) for runs of equal datagrams; taken on IPv6 ports only (the
	 * segments of an IPv4 GSO send carry IP IDs 0, 1, 2 ..., which the ICRC covers and a
	 * UDP socket's reader cannot see: doc/device-model.md, "Send path"). */
	bool gso = true;
	/* UDP GRO (UDP_GRO) on the UDP receive socket: coalesced datagrams in one message,
	 * split before parsing. Not on the raw IPv4 receive path (WirePort::gro_active). Off:
	 * one datagram per message, in slots of roce::max_datagram + 1 bytes. */
	bool gro = true;
	/* Messages one receive call takes (WirePort::recv): 0 (the default) adapts, one while
	 * they come one at a time and doubling while they come back to back; 1..WireRx::kMessages
	 * takes that many whenever they are queued (what arrives together is seen together:
	 * the responder's resource check counts per receive batch). */
	uint32_t rx_batch = 0;
	/* Tests only: a GSO send answers this errno (EIO, EINVAL) as a kernel that refuses GSO
	 * does, instead of reaching the kernel; 0 (the default) reaches it. */
	int test_gso_errno = 0;
};

/* What a received datagram's IPv4 header said that the ICRC covers and a UDP socket does not
 * show (WirePort::recv with the raw socket). The defaults are what a UDP socket assumes. */
struct WireRxIp {
	uint16_t ipv4_id = 0;
	bool ipv4_df = true;
};

/*
 * The datagrams of one received message. A message the kernel coalesced (udp(7), UDP_GRO: the
 * control message gives the segment size) holds datagrams of seg bytes each but the last,
 * which may be shorter (Linux net/ipv4/udp_offload.c, udp_gro_receive_segment: a shorter
 * datagram ends the aggregate). seg 0 (no UDP_GRO control message) or seg >= len: the message
 * is one datagram. No datagram is dropped or merged here: each goes to the parser, which checks
 * it (ICRC included) as if it had come alone.
 */
struct GroSplit {
	const uint8_t *data = nullptr;
	size_t len = 0;
	size_t seg = 0;
	uint32_t count() const noexcept
	{
		return seg == 0 || len <= seg ? 1 : static_cast<uint32_t>((len + seg - 1) / seg);
	}
	/* Datagram k < count(). */
	std::span<const uint8_t> operator[](uint32_t k) const noexcept
	{
		if (seg == 0 || len <= seg)
			return {data, len};
		const size_t off = size_t{k} * seg;
		return {data + off, len - off < seg ? len - off : seg};
	}
};

/* What a port's receive path did (WireStats sums the ports). */
struct WireRxCounts {
	uint64_t gro_batches = 0;   /* messages that held several datagrams (UDP GRO) */
	uint64_t gro_datagrams = 0; /* the datagrams those messages held */
};

/* A GID as the PRM and the wire carry it: 16 bytes, network order. */
using Gid = std::array<uint8_t, 16>;

/* What a port's send path did (WireStats sums the ports). */
struct WireTxCounts {
	uint64_t syscalls = 0;	  /* send system calls (sendto, sendmmsg), failed ones too */
	uint64_t gso_sends = 0;	  /* buffers the kernel cut into datagrams (UDP_SEGMENT) */
	uint64_t gso_refused = 0; /* GSO sends the kernel refused (then GSO stays off) */
};

class WirePort;

/*
 * A batch of datagrams a sender lays out back to back and the port sends in few system calls
 * (WirePort::tx_flush): one sendmmsg for the batch, and within it one UDP GSO buffer for each
 * run of datagrams to one peer of one size (the last of a run may be shorter), each datagram
 * complete with its own ICRC. A port owns kTxBatches of them (WirePort::tx_acquire).
 */
class WireTx {
public:
	static constexpr size_t kBytes = 160 * 1024; /* a 64 KiB message at any path MTU */
	static constexpr uint32_t kDatagrams = 288;  /* 64 KiB at MTU 256, and its headers */
	/* Where to build the next datagram of up to max bytes, or null when it would not fit
	 * (send the batch first). */
	uint8_t *room(size_t max) noexcept
	{
		return n_ < kDatagrams && used_ + max <= kBytes ? buf_ + used_ : nullptr;
	}
	/* The datagram built at room(): len bytes, to remote. */
	void add(const Gid &remote, size_t len) noexcept
	{
		d_[n_++] = {remote, static_cast<uint32_t>(used_), static_cast<uint32_t>(len)};
		used_ += len;
	}
	uint32_t size() const noexcept { return n_; }
	void clear() noexcept { n_ = 0, used_ = 0; }

private:
	friend class WirePort;
	struct Dgram {
		Gid to;
		uint32_t off, len;
	};
	uint32_t n_ = 0;
	size_t used_ = 0;
	std::atomic_flag busy_ = ATOMIC_FLAG_INIT; /* leased (tx_acquire) */
	Dgram d_[kDatagrams];
	/* tx_flush's messages: one per datagram or GSO run. */
	mmsghdr msgs_[kDatagrams];
	iovec iov_[kDatagrams];
	sockaddr_in6 to_[kDatagrams]; /* a sockaddr_in fits */
	uint32_t first_[kDatagrams], count_[kDatagrams];
	alignas(cmsghdr) uint8_t cmsg_[kDatagrams][CMSG_SPACE(sizeof(uint16_t))];
	alignas(64) uint8_t buf_[kBytes];
};

/* What a port's fault injection did (WireStats sums the ports). */
struct WireFaultCounts {
	uint64_t lost = 0, duplicated = 0, reordered = 0, delayed = 0;
};

/* IPv4-mapped (::ffff:a.b.c.d): what RoCEv2 calls an IPv4 GID. */
bool gid_is_ipv4(const Gid &g) noexcept;

/*
 * A port's receive batch (WirePort::recv): up to kMessages messages from one recvmmsg, each in
 * a slot of its own, with its sender, its IPv4 ID and DF (raw socket) and its datagrams
 * (GroSplit). Slots are kSlot bytes without GRO and kGroSlot with it; made when the port opens.
 */
class WireRx {
public:
	static constexpr int kMessages = 32;
	/* One datagram, and a byte more so that a longer one shows (the parser refuses it). */
	static constexpr size_t kSlot = roce::max_datagram + 1;
	/* A coalesced message at most: Linux's GRO stops an aggregate below 64 KiB (the
	 * device's gro_max_size, 65536 by default: net/core/gro.c, skb_gro_receive). A longer
	 * one (a larger gro_max_size) is cut (MSG_TRUNC): its cut datagram fails the parser
	 * and the RC transport resends. */
	static constexpr size_t kGroSlot = 64 * 1024;
	/* Messages received. */
	uint32_t size() const noexcept { return n_; }
	GroSplit datagrams(uint32_t i) const noexcept
	{
		return {buf_.get() + size_t{i} * slot_, len_[i], seg_[i]};
	}
	const sockaddr_storage &peer(uint32_t i) const noexcept { return peers_[i]; }
	const WireRxIp &ip(uint32_t i) const noexcept { return ips_[i]; }
	size_t slot_bytes() const noexcept { return slot_; }

private:
	friend class WirePort;
	/* A raw socket's message: the IPv4 and UDP headers apart (recv_raw). */
	static constexpr size_t kRawHdr = 28;
	uint32_t n_ = 0;
	/* The next call's batch (WirePort::recv), what the last call received, and the batch
	 * WirePortConfig::rx_batch fixes (0: none, want_ adapts). */
	uint32_t want_ = 1;
	uint32_t last_ = 0;
	uint32_t fixed_ = 0;
	/* recv_udp's messages: the first armed_ are set up for a UDP socket; the first used_
	 * may have been changed by the last receive call and are set up again before the next. */
	uint32_t armed_ = 0;
	uint32_t used_ = 0;
	size_t slot_ = kSlot;
	std::unique_ptr<uint8_t[]> buf_; /* kMessages slots */
	size_t len_[kMessages] = {};
	size_t seg_[kMessages] = {};
	sockaddr_storage peers_[kMessages] = {};
	WireRxIp ips_[kMessages] = {};
	mmsghdr msgs_[kMessages] = {};
	iovec iov_[kMessages][2] = {};
	uint8_t hdr_[kMessages][kRawHdr] = {};
	alignas(cmsghdr) uint8_t cmsg_[kMessages][CMSG_SPACE(sizeof(int))] = {};
};

class WirePort {
public:
	WirePort() = default;
	~WirePort();
	WirePort(const WirePort &) = delete;
	WirePort &operator=(const WirePort &) = delete;

	/* Opens and binds the socket. -EINVAL (not a numeric address, a fault percentage above
	 * 100, a delay above WireFaults::kMaxDelayUs, rx_batch above WireRx::kMessages),
	 * -ENOMEM (the held-datagram ring), the socket calls' -errno (-EADDRINUSE,
	 * -EADDRNOTAVAIL, ...). */
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
	WireTxCounts tx_counts() const noexcept;

	/*
	 * The send path in few system calls (emu_mlx5_wire.cpp, "Send batches"). tx_acquire: a
	 * free batch of this port, or null when all kTxBatches are leased (send one datagram at
	 * a time then: a lease is never waited for, so no lock order can deadlock on it).
	 * tx_flush: sends the batch's datagrams and empties it; *sent counts those the socket
	 * took (or fault injection handled), *errors those it refused (lost). With faults on,
	 * each datagram goes through send() (faults act per datagram, no GSO). GSO runs are
	 * cut to kGsoSegments datagrams and kGsoBytes; a GSO send the kernel refuses with EIO
	 * or EINVAL turns GSO off for good on this port and its datagrams go again without it.
	 * No allocation, no lock; thread-safe (a batch has one holder).
	 */
	WireTx *tx_acquire() noexcept;
	void tx_flush(WireTx &b, uint32_t *sent, uint32_t *errors) noexcept;
	void tx_release(WireTx *b) noexcept
	{
		if (b != nullptr)
			b->busy_.clear(std::memory_order_release);
	}
	/* Whether this port sends runs with UDP GSO (IPv6, gso on, no faults, not refused). */
	bool gso_active() const noexcept
	{
		return gso_ && !gso_off_.load(std::memory_order_relaxed);
	}
	static constexpr uint32_t kTxBatches = 4;
	/* The socket's send and receive buffers asked for at open (capped by the kernel's
	 * net.core.wmem_max / rmem_max). */
	static constexpr int kSocketBuffer = 4 << 20;
	/* UDP_MAX_SEGMENTS of Linux before 6.9 (include/linux/udp.h; 128 since): the most
	 * datagrams one GSO send may carry. */
	static constexpr uint32_t kGsoSegments = 64;
	/* A GSO send's payload at most: one IPv4 packet's worth (65535 - 20 - 8; IPv6 allows
	 * 65527, net/ipv6/udp.c). */
	static constexpr size_t kGsoBytes = 65507;

	/* Datagrams a port holds at most (delay and reordering); with the ring full a datagram
	 * goes out at once. */
	static constexpr uint32_t kHeldSlots = 64;
	/* How long a reordered datagram waits at most for a later one to pass it. */
	static constexpr uint32_t kReorderHoldUs = 200;

	/* Receives up to n (at most WireRx::kMessages) messages without blocking, with one
	 * system call (recv_messages), into the port's receive batch, and returns it (size 0:
	 * none). The batch adapts (emu_mlx5_wire.cpp): one message while they come one at a time,
	 * doubling while they come back to back; so a call may return fewer than are queued. A
	 * coalesced message (UDP GRO) is counted in rx_counts(). No allocation; one caller at a
	 * time (the device thread). */
	const WireRx &recv(int n = WireRx::kMessages) noexcept;
	/* Whether the port asked the kernel for UDP GRO: it receives through its UDP socket
	 * (IPv6, or IPv4 without the raw socket), WirePortConfig::gro is on and setsockopt
	 * took UDP_GRO. Never with the raw socket: a raw socket sees an aggregate as one IPv4
	 * datagram, its segments' own headers (and IP IDs, which the ICRC covers) gone, and
	 * gets no control message with the segment size. */
	bool gro_active() const noexcept { return gro_; }
	/* The MTU of the interface that holds the port's address (SIOCGIFMTU, read at open), the
	 * netdev MTU a ConnectX port would have; 0 when no interface holds it (cannot happen
	 * for a bound address unless it was removed meanwhile). */
	uint32_t link_mtu() const noexcept { return link_mtu_; }
	WireRxCounts rx_counts() const noexcept;

private:
	/* The raw receive socket of an IPv4 port (open, after the UDP socket is bound): 0,
	 * -EPERM / -EACCES without CAP_NET_RAW, another socket call's -errno. */
	int open_raw_rx() noexcept;
	void recv_udp(WireRx &rx, int n) noexcept;
	void recv_raw(WireRx &rx, int n) noexcept;
	/* Receives up to n of rx's messages (as set up) from fd without waiting: recvmmsg's
	 * count and -1 (errno), filling msg_len and what the kernel writes back. plain: the
	 * messages ask for no control data and have one iovec. */
	static int recv_messages(int fd, WireRx &rx, uint32_t n, bool plain) noexcept;
	int raw_send(const Gid &remote, const uint8_t *data, size_t len) const noexcept;
	/* tx_flush's messages for datagrams from..: GSO runs when gso; their count. */
	uint32_t tx_messages(WireTx &b, uint32_t from, bool gso) const noexcept;
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
	uint32_t link_mtu_ = 0;
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
	/* The send path: batches made at open, GSO set at open and turned off once refused. */
	std::unique_ptr<WireTx[]> tx_;
	bool gso_ = false;
	int test_gso_errno_ = 0;
	std::atomic<bool> gso_off_{false};
	mutable std::atomic<uint64_t> syscalls_{0}, gso_sends_{0}, gso_refused_{0};
	/* The receive path: its batch, made at open, and GRO (set at open). */
	std::unique_ptr<WireRx> rx_;
	bool gro_ = false;
	std::atomic<uint64_t> gro_batches_{0}, gro_datagrams_{0};
};

} // namespace nicmr::emu

#endif
