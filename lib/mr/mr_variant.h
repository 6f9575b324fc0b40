/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Which variant an index carries on each of its uses: a keyed, per-index cycle through all 256
 * values, so that a peer that has seen earlier keys of an index cannot read the next one off
 * them, and a dead key's variant comes back only after 256 more uses of its index.
 *
 *   secret (128 bits, getrandom(2) once per key space)
 *        |
 *   u = SipHash-1-3(secret, index)          64 bits per index (a keyed PRF)
 *        |
 *   P_u: turn (8 bits) -> variant (8 bits)  an 8-round Feistel network on 4-bit halves whose
 *                                           round functions are 16-nibble tables read from u
 *                                           (rotated by 23 bits per round)
 *
 *   first variant of an index   P_u(0)
 *   next variant after v        P_u(P_u^-1(v) + 1 mod 256)
 *
 * P_u is a bijection (every Feistel network is), so "next" is P_u conjugating the cycle
 * t -> t + 1: one cycle through all 256 values, whatever variant it starts from (a requested
 * key may put an index at any variant). Cost: one SipHash of 8 bytes (5 SipRounds) and 16
 * Feistel rounds of a shift, a mask and an xor each; no memory beyond the 16-byte secret.
 *
 * What it does not do: 8 bits are 8 bits. A peer that knows a live key's index guesses its
 * variant with probability 1/256 per try, and the no-repeat rule itself tells it that the
 * variants of the last 255 uses it saw are not the live one (1/(256 - m) per try after seeing m
 * of them). The Feistel network over so small a domain is not a vetted cipher: it hides the
 * order from a peer that sees a few keys of an index, not from one that records most of an
 * index's 256 turns. The per-index tables are SipHash outputs, so what a peer learns about one
 * index says nothing about another's (doc/registration.md, "Key format").
 *
 * SipHash: Aumasson and Bernstein, "SipHash: a fast short-input PRF" (2012), with c = 1
 * compression round and d = 3 finalization rounds, the SipHash-1-3 that CPython's
 * Python/pyhash.c and Rust's core::hash::sip use for keyed hashing.
 */
#ifndef NICMR_MR_VARIANT_H
#define NICMR_MR_VARIANT_H

#include <bit>
#include <cstdint>
#include <initializer_list>

namespace nicmr::mr {

struct VariantSecret {
	uint64_t k0 = 0;
	uint64_t k1 = 0;
};

namespace variant_detail {

constexpr void sip_round(uint64_t &v0, uint64_t &v1, uint64_t &v2, uint64_t &v3) noexcept
{
	v0 += v1;
	v1 = std::rotl(v1, 13);
	v1 ^= v0;
	v0 = std::rotl(v0, 32);
	v2 += v3;
	v3 = std::rotl(v3, 16);
	v3 ^= v2;
	v0 += v3;
	v3 = std::rotl(v3, 21);
	v3 ^= v0;
	v2 += v1;
	v1 = std::rotl(v1, 17);
	v1 ^= v2;
	v2 = std::rotl(v2, 32);
}

inline constexpr int kRounds = 8;
inline constexpr int kRotate = 23; /* not a multiple of 4: each round reads other nibbles */

/* Round i's function: nibble x of u rotated by 23 * i bits. */
constexpr uint32_t round_fn(uint64_t u, int round, uint32_t x) noexcept
{
	return static_cast<uint32_t>(std::rotl(u, kRotate * round) >> (4 * x)) & 0xf;
}

} // namespace variant_detail

/* SipHash-c-d of the 8-byte message m (little-endian), key (k0, k1): the paper's algorithm with
 * one message block and the final block holding only the length (8). */
template <int C, int D> constexpr uint64_t siphash(const VariantSecret &k, uint64_t m) noexcept
{
	using variant_detail::sip_round;
	uint64_t v0 = k.k0 ^ 0x736f6d6570736575ull;
	uint64_t v1 = k.k1 ^ 0x646f72616e646f6dull;
	uint64_t v2 = k.k0 ^ 0x6c7967656e657261ull;
	uint64_t v3 = k.k1 ^ 0x7465646279746573ull;
	const uint64_t b = uint64_t{8} << 56;
	for (const uint64_t block : {m, b}) {
		v3 ^= block;
		for (int i = 0; i < C; i++)
			sip_round(v0, v1, v2, v3);
		v0 ^= block;
	}
	v2 ^= 0xff;
	for (int i = 0; i < D; i++)
		sip_round(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

/* The paper's test vector for an 8-byte message (bytes 0..7, key bytes 0..15) under
 * SipHash-2-4 checks the code that SipHash-1-3 shares with it. */
static_assert(siphash<2, 4>({0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull},
			    0x0706050403020100ull) == 0x93f5f5799a932462ull);

constexpr uint64_t siphash13(const VariantSecret &k, uint64_t m) noexcept
{
	return siphash<1, 3>(k, m);
}

/* The index's 64 bits of round tables (u above). Indices are below 2^24, so the message never
 * meets the ones other uses of the secret take (mr_keys.cpp draws with bit 63 set). */
constexpr uint64_t variant_tables(const VariantSecret &k, uint32_t index) noexcept
{
	return siphash13(k, index);
}

/* P_u(turn). */
constexpr uint8_t variant_at(uint64_t u, uint8_t turn) noexcept
{
	uint32_t l = turn >> 4, r = turn & 0xfu;
	for (int i = 0; i < variant_detail::kRounds; i++) {
		const uint32_t t = l ^ variant_detail::round_fn(u, i, r);
		l = r;
		r = t;
	}
	return static_cast<uint8_t>(l << 4 | r);
}

/* P_u^-1(variant): the rounds backwards. */
constexpr uint8_t variant_turn(uint64_t u, uint8_t variant) noexcept
{
	uint32_t l = variant >> 4, r = variant & 0xfu;
	for (int i = variant_detail::kRounds - 1; i >= 0; i--) {
		const uint32_t t = r ^ variant_detail::round_fn(u, i, l);
		r = l;
		l = t;
	}
	return static_cast<uint8_t>(l << 4 | r);
}

constexpr uint8_t first_variant(const VariantSecret &k, uint32_t index) noexcept
{
	return variant_at(variant_tables(k, index), 0);
}

/* The variant index takes on the use after the one that had v. Hot path (every reuse): no
 * memory but the secret, a few dozen instructions. */
constexpr uint8_t next_variant(const VariantSecret &k, uint32_t index, uint8_t v) noexcept
{
	const uint64_t u = variant_tables(k, index);
	return variant_at(u, static_cast<uint8_t>(variant_turn(u, v) + 1));
}

} // namespace nicmr::mr

#endif
