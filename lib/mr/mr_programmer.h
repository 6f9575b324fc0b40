/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The seam between the registration engine and the device. The engine decides which mkey
 * (index and variant) a region gets and what it may do; an MkeyProgrammer makes the device
 * agree: the mlx5 driver implements it with UMR work requests on pre-created free mkeys
 * (free=1, umr_en=1), tests implement it with fakes. Every call is synchronous: when it
 * returns 0 the device enforces the new state (the UMR's completion was polled).
 */
#ifndef NICMR_MR_PROGRAMMER_H
#define NICMR_MR_PROGRAMMER_H

#include <cerrno>
#include <cstdint>
#include <vector>

namespace nicmr::mr {

struct BindParams {
	uint64_t start; /* mkc start_addr: VA, or 0 when zero-based */
	uint64_t len;	/* mkc len, > 0 */
	uint8_t access; /* MkeyAccess bits -> mkc lr/lw/rr/rw/a */
	uint32_t pd;	/* mkc pd (24 bits) */
	/* Translations: either one contiguous IOVA range (pools are mapped at congruent IOVAs,
	 * so a region in a pool is iova_base + (addr - start)) with the largest page size that
	 * the mapping allows, or an explicit MTT list. */
	uint64_t iova_base;
	uint8_t log_page_size; /* 12..30 */
	const uint64_t *mtt;   /* page IOVAs, or nullptr for the iova_base form */
	uint32_t mtt_count;
};

/* An on-demand-paging region's mkey (Engine::reg_odp, doc/odp.md): an MTT mkey of 4 KiB pages
 * with pg_access whose entries all start not present (no rd_en, no wr_en). */
struct OdpParams {
	uint64_t start; /* mkc start_addr: the region's VA */
	uint64_t len;	/* > 0 */
	uint8_t access; /* MkeyAccess bits */
	uint32_t pd;
	uint64_t pages; /* 4 KiB pages from start & ~4095 that cover [start, start + len) */
};

class MkeyProgrammer {
public:
	virtual ~MkeyProgrammer() = default;
	/*
	 * Makes count new free mkeys (free=1, umr_en=1, variant 0) that UMR may program, at
	 * indices the device chooses (CREATE_MKEY with input_mkey_index 0, as on any ConnectX),
	 * and writes their indices to indices[0..count). The PRM's CREATE_MKEY makes one mkey per
	 * command (its output has one mkey_index), so this is count commands back to back: the
	 * engine's slow path (it grows its pool in batches, doc/registration.md). Indices are
	 * never 0 and never one that exists already.
	 * Returns 0 or a negative errno; on failure nothing of this call stays created.
	 */
	virtual int create_free_mkeys(uint32_t count, uint32_t *indices) = 0;
	/*
	 * Whether create_free_mkey_at works: the device creates mkeys at a chosen index (the
	 * hca_cap mkey_by_name, off on a stock ConnectX). The engine offers requested keys only
	 * then.
	 */
	virtual bool chosen_indices() const noexcept { return false; }
	/*
	 * Makes one free mkey, as create_free_mkeys, at index (1 .. 2^24 - 1, not existing).
	 * 0; -EOPNOTSUPP (chosen_indices() is false); the device's error.
	 */
	virtual int create_free_mkey_at(uint32_t /*index*/) { return -EOPNOTSUPP; }
	/* Programs mkey (index and variant) with params and clears free. 0 or negative errno;
	 * on failure the mkey is left free. */
	virtual int bind(uint32_t mkey, const BindParams &params) = 0;
	/* Sets the mkey free again; the device refuses it from then on. 0 or negative errno;
	 * on failure the mkey is left as it was. */
	virtual int revoke(uint32_t mkey) = 0;
	/* Re-points a bound mkey at params' translations (iova_base, log_page_size or mtt)
	 * without it ever being invalid; start, len, access and PD stay. 0 or negative errno;
	 * on failure the mkey is left as it was. -EOPNOTSUPP where the device cannot do that
	 * in place. */
	virtual int modify(uint32_t /*mkey*/, const BindParams & /*params*/) { return -EOPNOTSUPP; }

	/*
	 * On-demand-paging mkeys made ahead for UMR (the engine's cache, doc/odp.md, as Linux's
	 * mlx5 mkey cache keeps them): count free MTT mkeys (free=1, umr_en=1) of 4 KiB pages with
	 * pg_access and room for pages entries (even, 2..odp_max_pages()), none written, so every
	 * entry is not present; at indices the device chooses, written to indices[0..count).
	 * Slow path. 0; -EOPNOTSUPP (the device does not page on demand); -EINVAL (pages odd, 0
	 * or above odp_max_pages()); the device's error. On failure nothing of this call stays.
	 */
	virtual int create_odp_mkeys(uint64_t /*pages*/, uint32_t /*count*/, uint32_t * /*indices*/)
	{
		return -EOPNOTSUPP;
	}
	/* The most pages one such mkey may hold (0: no on-demand paging). */
	virtual uint64_t odp_max_pages() const noexcept { return 0; }
	/* Binds one of them with one UMR: start, len, access, PD and the variant, free cleared;
	 * its translations are left as they are (all not present: the engine zaps what was
	 * present before it revokes). 0 or negative errno; on failure the mkey is left free. */
	virtual int bind_odp(uint32_t /*mkey*/, const OdpParams & /*params*/)
	{
		return -EOPNOTSUPP;
	}
};

/* One entry of an indirect (KLM) mkey: byte_count bytes of mkey's address space from address,
 * laid end to end after the entries before it. */
struct KlmPart {
	uint64_t address;
	uint32_t mkey;
	uint32_t byte_count; /* > 0 */
};

struct IndirectParams {
	uint64_t start; /* mkc start_addr: the region's first address, or 0 when zero-based */
	uint64_t len;	/* the sum of the parts' byte counts */
	uint8_t access; /* MkeyAccess bits */
	uint32_t pd;
	const KlmPart *parts;
	uint32_t count; /* 1..kMaxRuns */
};

/*
 * Makes an engine index an indirect (KLM) mkey and back. Separate from MkeyProgrammer because a
 * UMR cannot change an mkey's access mode: the pre-created free mkeys are MTT mkeys, and an
 * indirect one is made with a command in place of the free mkey at its index (the driver's
 * KlmProgrammer, drivers/mlx5/mlx5_klm_programmer.h). Synchronous, like MkeyProgrammer.
 */
class IndirectProgrammer {
public:
	virtual ~IndirectProgrammer() = default;
	/* Turns the free mkey at mkey's index into an indirect mkey with this variant, access,
	 * PD and parts. 0 or negative errno; on failure the index holds its free mkey again. */
	virtual int bind_indirect(uint32_t mkey, const IndirectParams &params) = 0;
	/* Puts the free mkey back at mkey's index; the device refuses mkey from then on. 0 or
	 * negative errno; on failure the indirect mkey is left as it was. */
	virtual int revoke_indirect(uint32_t mkey) = 0;
	/* Turns the free mkey at mkey's index into an on-demand-paging mkey (OdpParams), taken
	 * back by revoke_indirect. 0 or negative errno; -EOPNOTSUPP where the programmer or the
	 * device cannot; on failure the index holds its free mkey again. */
	virtual int bind_odp(uint32_t /*mkey*/, const OdpParams & /*params*/)
	{
		return -EOPNOTSUPP;
	}
};

/* Accepts everything and touches nothing: the host-only engine, and benchmarks of it. Its
 * "device" hands out indices from 1 upwards, skipping those made at a chosen index. */
class NullProgrammer final : public MkeyProgrammer {
public:
	int create_free_mkeys(uint32_t count, uint32_t *indices) override
	{
		try {
			for (uint32_t i = 0; i < count; i++) {
				while (next_ < taken_.size() && taken_[next_])
					next_++;
				if (next_ >= (uint32_t{1} << 24))
					return -ENOSPC;
				mark(next_);
				indices[i] = next_++;
			}
		} catch (...) {
			return -ENOMEM;
		}
		return 0;
	}
	bool chosen_indices() const noexcept override { return true; }
	int create_free_mkey_at(uint32_t index) override
	{
		try {
			if (index < taken_.size() && taken_[index])
				return -EEXIST;
			mark(index);
		} catch (...) {
			return -ENOMEM;
		}
		return 0;
	}
	int bind(uint32_t, const BindParams &) override { return 0; }
	int revoke(uint32_t) override { return 0; }
	int modify(uint32_t, const BindParams &) override { return 0; }
	int create_odp_mkeys(uint64_t pages, uint32_t count, uint32_t *indices) override
	{
		if (pages == 0 || pages % 2 != 0 || pages > odp_max_pages())
			return -EINVAL;
		return create_free_mkeys(count, indices);
	}
	uint64_t odp_max_pages() const noexcept override { return uint64_t{1} << 18; }
	int bind_odp(uint32_t, const OdpParams &) override { return 0; }

private:
	void mark(uint32_t index)
	{
		if (index >= taken_.size())
			taken_.resize(index + 1024);
		taken_[index] = true;
	}
	std::vector<bool> taken_;
	uint32_t next_ = 1;
};

class NullIndirectProgrammer final : public IndirectProgrammer {
public:
	int bind_indirect(uint32_t, const IndirectParams &) override { return 0; }
	int revoke_indirect(uint32_t) override { return 0; }
	int bind_odp(uint32_t, const OdpParams &) override { return 0; }
};

} // namespace nicmr::mr

#endif
