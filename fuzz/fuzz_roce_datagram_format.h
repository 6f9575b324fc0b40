/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The input of fuzz_roce_datagram, shared with the seed writer (fuzz_roce_datagram_seeds):
 * up to kMaxPackets datagrams handed one after the other to a wire port with live RC QPs.
 * Multi-byte fields are big-endian; bytes missing at the end read as zero.
 *
 *   byte 0: (packets - 1) in its low 2 bits; kInRead: QP 0 posts an RDMA READ of kReadLen
 *           bytes into the sink key's region first (it goes out to nobody), so that READ
 *           RESPONSEs from the input find a request waiting
 *   then per packet:
 *     u8 kind   kKindRaw: the datagram follows as is (u16 length, bytes); else a template:
 *               the packet is built by roce::build with the fields below, so that its ICRC
 *               is right and the mutations reach the transport's checks
 *               kKindReseal: write the datagram's true ICRC last (after the patches)
 *               kKindQp1: to the second QP (else the first)
 *               kKindBadQpn: to a QP number the device does not have
 *               kKindStranger: from another address than the QPs' peer
 *               kKindUd: a UD SEND ONLY (opcode byte even) or with immediate (odd) to the
 *               UD QP (kKindBadQpn: to a QP number next to it); the DETH's Q_Key is the
 *               QP's (kUdQkey) unless kHdrRawKey (then the u32 key word), its source QP the
 *               u32 key word's low 24 bits
 *   template:
 *     u8 opcode (modulo roce::opcode::rc_count; 0x15 is reserved: the packet is skipped)
 *     i8 psn    the PSN, as a distance from the QPs' first expected PSN (kFirstPsn), or
 *               for a response (READ RESPONSE, ACKNOWLEDGE, ATOMIC ACKNOWLEDGE) from the
 *               first PSN they send (kFirstSendPsn)
 *     u8 flags  kHdrAckReq, kHdrSe, kHdrBadPkey, kHdrRawKey (rkey: the u32 key below as
 *               is; else one of the live keys, chosen by the key byte)
 *     u8 key    low 3 bits: which live key (modulo kKeys: fuzz_roce_datagram.cpp, Key);
 *               the high 5 bits are XORed into the key's variant byte
 *     i32 va    added to the chosen key's start address
 *     u32 len   RETH DMA length
 *     u32 key   the raw rkey (kHdrRawKey), and the ImmDt / IETH word
 *     u64 swap_add, u64 compare (AtomicETH)
 *     u16 payload length (at most roce::max_payload), then that many payload bytes
 *     u8 patches (at most kMaxPatches), each u16 offset (modulo the datagram's length) and
 *        u8 value written over the built datagram
 */
#ifndef NICMR_FUZZ_ROCE_DATAGRAM_FORMAT_H
#define NICMR_FUZZ_ROCE_DATAGRAM_FORMAT_H

#include <cstddef>
#include <cstdint>

namespace nicmr::roce::fuzz_dgram {

inline constexpr uint32_t kMaxPackets = 4;
inline constexpr uint8_t kKindRaw = 1u << 0;
inline constexpr uint8_t kKindReseal = 1u << 1;
inline constexpr uint8_t kKindQp1 = 1u << 2;
inline constexpr uint8_t kKindBadQpn = 1u << 3;
inline constexpr uint8_t kKindStranger = 1u << 4;
inline constexpr uint8_t kKindUd = 1u << 5;
/* The UD QP's Q_Key. */
inline constexpr uint32_t kUdQkey = 0x5eed;

inline constexpr uint8_t kHdrAckReq = 1u << 0;
inline constexpr uint8_t kHdrSe = 1u << 1;
inline constexpr uint8_t kHdrBadPkey = 1u << 2;
inline constexpr uint8_t kHdrRawKey = 1u << 3;

inline constexpr uint8_t kInRead = 1u << 2;
inline constexpr uint32_t kReadLen = 3000; /* three responses at QP 0's MTU 1024 */

inline constexpr uint32_t kMaxPatches = 8;
/* The PSN both QPs expect first after every reset. */
inline constexpr uint32_t kFirstPsn = 0x100;
/* The PSN both QPs send first after every reset. */
inline constexpr uint32_t kFirstSendPsn = 0x200;

/* The live keys a template may name (the key byte's low 3 bits, modulo kKeys). */
enum Key : uint8_t {
	key_rw,	      /* remote read, write and atomic over the writable region */
	key_ro,	      /* remote read only */
	key_local,    /* local read and write only */
	key_other_pd, /* every right, in another PD than the QPs' */
	key_recv,     /* local write: the receive buffers */
	key_inv,      /* every remote right and en_rinval, inside the writable region */
	key_sink,     /* local write: where QP 0's READ (kInRead) lands */
	kKeys
};

} // namespace nicmr::roce::fuzz_dgram

#endif
