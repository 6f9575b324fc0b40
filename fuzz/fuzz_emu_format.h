/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The input format of fuzz_emu_mlx5_cmd, shared with the seed writer.
 *
 *   u8 setup            kSetupBringUp: ENABLE_HCA, pages, INIT_HCA first;
 *                       kSetupMkey: also a PD and a free MTT mkey;
 *                       kSetupNoExt: a model without nicmr's extensions (ext_flags 0)
 *   records, up to kMaxRecords, each:
 *     u8 kind           kRecordQueued set: through the command queue, else the flat decoder
 *     flat:   u16 in_len, u16 out_len (both mod kMaxFlatLen + 1), in_len input bytes
 *     queued: u8 slot (mod 32), 64 raw entry bytes, u8 in_ptr, u8 out_ptr (pointer selectors:
 *             0 IOVA 0, 1 unmapped, 2 misaligned, else a block of the mailbox area),
 *             u8 fix (1: make the input chain well formed, 2: the output chain, 4: keep any
 *             lengths, 8: keep type and ownership as given), u16 n, n bytes copied over the
 *             start of the mailbox area
 * Multi-byte numbers are big-endian. Missing bytes read as zero.
 */
#ifndef NICMR_FUZZ_EMU_FORMAT_H
#define NICMR_FUZZ_EMU_FORMAT_H

#include <cstddef>
#include <cstdint>

namespace nicmr::emu::fuzz {

inline constexpr uint8_t kSetupBringUp = 1;
inline constexpr uint8_t kSetupMkey = 2;
inline constexpr uint8_t kSetupNoExt = 0x80;
inline constexpr uint8_t kRecordQueued = 1;
inline constexpr int kMaxRecords = 64;
inline constexpr size_t kMaxFlatLen = 8192;

inline constexpr uint64_t kCmdqIova = 0x10000000;
inline constexpr uint64_t kAreaIova = 0x20000000;
inline constexpr size_t kBlockStride = 1024; /* prm::mailbox::align */
inline constexpr size_t kAreaBlocks = 24;
inline constexpr size_t kAreaBytes = kAreaBlocks * kBlockStride;
inline constexpr uint64_t kPagesIova = 0x30000000;
inline constexpr uint64_t kUnmappedIova = 0x7000000000;
inline constexpr uint32_t kConfigBootPages = 2;
inline constexpr uint32_t kConfigInitPages = 2;

} // namespace nicmr::emu::fuzz

#endif
