/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration engine: KeySpace + ShadowTable + an MkeyProgrammer.
 *
 *   reg:     validate -> take a key (cache / requested) -> programmer.bind -> publish -> activate
 *   reg_sub: hold the base key -> check against the base -> as reg (the hold stays till dereg)
 *   dereg:   begin_retire -> invalidate entry -> programmer.revoke -> retire (grace period)
 *
 * Failure atomicity: a failed reg leaves the key space, the table and the device as they were
 * (the key goes back free, variant rotated); a failed dereg leaves the region registered and
 * its key working. Lookups are the table's, lockless.
 *
 * Threads: reg, reg_sub, dereg, raw_attr, map_raw and lookup may be called from any thread at once.
 * A KeyCache is used by one thread at a time. dereg(k) must come after reg returned k (the
 * caller's own hand-over of the key orders them); a second dereg of k returns -ENOKEY.
 */
#ifndef NICMR_MR_ENGINE_H
#define NICMR_MR_ENGINE_H

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mr_access.h"
#include "mr_keys.h"
#include "mr_programmer.h"
#include "mr_rawkey.h"
#include "mr_table.h"

namespace nicmr::mr {

struct EngineConfig {
	uint32_t index_count = 1u << 16; /* the device's mkey count (2..2^24) */
	uint32_t max_readers = 64;	 /* QSBR reader ids 0..max_readers-1 (1..1024) */
	uint64_t device_id = 1;		 /* carried in raw keys; nonzero */
};

enum RegFlag : uint32_t {
	kRegRequestedKey = 1u << 0, /* use RegRequest::requested_key (FI_MR_PROV_KEY off) */
	kRegZeroBased = 1u << 1,    /* addresses are offsets from 0 (FI_MR_VIRT_ADDR off) */
	kRegPoolLookup = 1u << 2,   /* iova is a translation handle: use the pool's lookup */
	kRegSingleUse = 1u << 3,    /* FI_MR_SINGLE_USE: recorded in the entry */
};
inline constexpr uint32_t kRegKnownFlags =
	kRegRequestedKey | kRegZeroBased | kRegPoolLookup | kRegSingleUse;

struct RegRequest {
	uint64_t addr = 0;	    /* VA of the region */
	uint64_t len = 0;	    /* > 0 */
	uint8_t access = 0;	    /* MkeyAccess bits (access_from_fi / access_from_ibv) */
	uint32_t pd = 0;	    /* 24 bits */
	uint64_t iova = 0;	    /* IOVA of addr, or a handle with kRegPoolLookup */
	uint8_t log_page_size = 12; /* 12..30: the largest page the IOVA mapping allows */
	uint64_t requested_key = 0; /* with kRegRequestedKey */
	uint32_t flags = 0;	    /* RegFlag bits */
};

class Engine {
public:
	/*
	 * Creates the key space and table and asks the programmer to pre-create mkeys 1..N-1.
	 * Returns 0, -EINVAL (config out of range), -ENOMEM, or the programmer's error; on
	 * failure nothing is left behind.
	 */
	static int create(const EngineConfig &cfg, MkeyProgrammer &programmer,
			  std::unique_ptr<Engine> *out) noexcept;

	/*
	 * Registers a region and returns its mkey (lkey = rkey). cache may be nullptr.
	 * Returns 0;
	 *   -EINVAL        len 0, addr + len or iova + len wraps, access bits invalid (unknown, or
	 *                  rw/a without lw), pd above 24 bits, log_page_size outside 12..30
	 *   -EOPNOTSUPP    an unknown flag (the libfabric surface says -FI_EBADFLAGS)
	 *   -ENOSPC        no free key reachable
	 *   -EKEYREJECTED  requested key outside the key space
	 *   -EEXIST        requested key's index in use (the libfabric surface: -FI_ENOKEY)
	 *   -EAGAIN        requested key's index waits for its grace period
	 *   the programmer's bind error
	 */
	int reg(const RegRequest &req, KeyCache *cache, uint32_t *mkey) noexcept;

	/*
	 * Registers a sub-MR (fi_mr_attr::base_mr): [req.addr, req.addr + req.len) inside the base
	 * region (addresses in the base's address space), its own key, access no more than the
	 * base's, the base's PD and translations (req.pd, req.iova and req.log_page_size are
	 * ignored). The base cannot be deregistered while the sub-MR lives. A sub-MR may be a base.
	 * Returns 0; -ENOKEY (base not registered); -EOPNOTSUPP (a flag other than requested key,
	 * zero-based, single-use, or a base registered with kRegPoolLookup); -EINVAL (len 0,
	 * wrap, access bits invalid); -EACCES (access beyond the base's); -ERANGE (not inside the
	 * base); -EOVERFLOW (2^21 - 1 sub-MRs on one base); then reg's key and bind errors.
	 */
	int reg_sub(uint32_t base_mkey, const RegRequest &req, KeyCache *cache,
		    uint32_t *mkey) noexcept;

	/*
	 * Deregisters: when it returns 0, no lookup accepts mkey any more and the device refuses
	 * it. Returns 0, -ENOKEY (not a registered key: stale, unknown, or being (de)registered),
	 * -EBUSY (sub-MRs of it are registered; fi_close says -FI_EBUSY), or the programmer's
	 * revoke error (the region stays registered).
	 */
	int dereg(uint32_t mkey, KeyCache *cache) noexcept;

	/* Hot path: see ShadowTable::lookup. */
	int lookup(const LookupRequest &req, LookupResult *out) const noexcept
	{
		return table_->lookup(req, out);
	}

	/* fi_mr_raw_attr: the raw key of a registered mkey. 0, -ENOKEY, -EAGAIN, -ENOSPC (*size
	 * then says how much is needed). */
	int raw_attr(uint32_t mkey, uint8_t *buf, size_t *size) const noexcept;
	/* fi_mr_map_raw: 0 with *key = the mkey, or decode_raw_key's -EINVAL / -EXDEV. */
	static int map_raw(const uint8_t *buf, size_t size, uint64_t expected_device,
			   uint64_t *key) noexcept;
	/* fi_mr_unmap_key: mapping allocates nothing, so there is nothing to release. */
	static int unmap_raw(uint64_t) noexcept { return 0; }

	/* QSBR readers: see KeySpace. */
	int reader_register(unsigned id) noexcept { return keys_->reader_register(id); }
	void reader_unregister(unsigned id) noexcept { keys_->reader_unregister(id); }
	void reader_quiescent(unsigned id) noexcept { keys_->reader_quiescent(id); }

	KeySpace &keys() noexcept { return *keys_; }
	const ShadowTable &table() const noexcept { return *table_; }
	uint64_t device_id() const noexcept { return device_id_; }
	/* Host memory per index that exists whether or not it is live, and per live region. */
	static constexpr size_t fixed_bytes_per_index() noexcept
	{
		return KeySpace::bytes_per_index();
	}
	static constexpr size_t bytes_per_live_region() noexcept { return sizeof(Entry); }

private:
	explicit Engine(MkeyProgrammer &p) : prog_(p) {}
	int install(const RegRequest &req, EntryFields f, KeyCache *cache, uint32_t *mkey) noexcept;
	MkeyProgrammer &prog_;
	std::unique_ptr<KeySpace> keys_;
	std::unique_ptr<ShadowTable> table_;
	uint64_t device_id_ = 0;
};

} // namespace nicmr::mr

#endif
