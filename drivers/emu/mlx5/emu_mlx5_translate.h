/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Access checks and address translation of the mlx5 device model: from (mkey, address, length,
 * operation) to IOVA runs, or a CQE syndrome.
 *
 *   mkey --index--> MkeyEntry (mkc) --checks 1..6--> access mode
 *     PA  (0): address is the IOVA
 *     MTT (1): page i = (addr - (start_addr & ~(page - 1))) >> log_page_size
 *              IOVA   = (mtt[i] & ~3) + (addr & (page - 1))      page: 4 KiB .. 1 GiB
 *              + check 7: with pg_access, the entry's rd_en / wr_en
 *     KLM (2): entries {byte_count, mkey, address} laid end to end from start_addr; each
 *              part resolves through its own mkey (all checks again), at most kMaxIndirection
 *              indirect mkeys deep
 *
 * Checks, in PRM.md's order: 1 the index exists and the mkey is not free, 2 the variant,
 * 3 the PD equals the QP's PD, 4 qpn is 0xffffff or the QP, 5 the access bit (lr gather, lw
 * scatter, rr / rw / a remote), 6 the range within [start_addr, start_addr + len) (or
 * length64), overflow-safe, 7 the page enables. A failure gives LOCAL_PROT_ERR (local;
 * LOCAL_ACCESS_ERR for a scatter into an mkey without lw) or REMOTE_ACCESS_ERR (remote).
 * On-demand paging (doc/odp.md): a translator told to report_not_present() answers
 * kNotPresent instead when check 7 fails on an mkey made with pg_access (a page not present,
 * or present without the right the access needs), so that the WQE engine can raise a page
 * fault; by default it answers the syndrome above, as a device without on-demand paging does.
 *
 * A Translator looks keys up through one WQE's MkeyTable::Hold: every key it touches stays held
 * (shared) until the WQE is done, so validate() followed by the copy loop sees the same keys (a
 * UMR of one of them cannot slip in between), while UMRs of other keys go ahead. Mapped-ness is
 * checked against the WQE's DmaSection, the same snapshot the copy then uses.
 * Hot path of the device: no allocation, no system call, no lock beyond the keys' slots.
 */
#ifndef NICMR_EMU_MLX5_TRANSLATE_H
#define NICMR_EMU_MLX5_TRANSLATE_H

#include <cstdint>

#include "emu_iommu.h"
#include "emu_mlx5_mkey.h"

namespace nicmr::emu {

enum class Access : uint8_t {
	local_read,    /* gather: lr */
	local_write,   /* scatter: lw */
	remote_read,   /* rr */
	remote_write,  /* rw */
	remote_atomic, /* a; the pages need rd_en and wr_en */
};

/* Not a CQE syndrome (those end at 0x22): a page of an on-demand mkey is not present for the
 * access (Translator::report_not_present). Never written to a CQE. */
inline constexpr uint8_t kNotPresent = 0xfe;

/* IOVA-contiguous piece of a translated range. */
struct IovaRun {
	uint64_t iova = 0;
	uint64_t len = 0;
};

class Translator {
public:
	/* Indirect (KLM) mkeys on the way to a direct one, the top one included. */
	static constexpr int kMaxIndirection = 2;

	/* pd and qpn: the QP whose keys these are (the responder's for remote accesses). */
	Translator(MkeyTable::Hold &keys, const DmaSection &dma, uint32_t pd, uint32_t qpn) noexcept
	    : keys_(&keys), dma_(dma), pd_(pd), qpn_(qpn)
	{}

	/*
	 * Checks the whole of [addr, addr + len) of key for access a, every translation on the
	 * way and that the IOVAs are mapped, moving nothing. 0 or the CQE syndrome. len 0 is 0.
	 */
	uint8_t validate(uint32_t key, uint64_t addr, uint64_t len, Access a) const noexcept;
	/*
	 * The IOVA of addr and how many bytes from there (at most max, at least 1) are IOVA-
	 * contiguous. 0 or the syndrome. Call after validate() for the same range.
	 */
	uint8_t resolve(uint32_t key, uint64_t addr, uint64_t max, Access a,
			IovaRun *run) const noexcept;

	/* Check 7 failing on a pg_access mkey gives kNotPresent from now on (on-demand paging). */
	void report_not_present() noexcept { not_present_ = true; }

	/* The syndrome of a failed check for access a (exported for the engine's own checks). */
	static uint8_t fail_syndrome(Access a, bool missing_write) noexcept;

private:
	uint8_t resolve_at(uint32_t key, uint64_t addr, uint64_t max, Access a, int depth,
			   IovaRun *run) const noexcept;

	MkeyTable::Hold *keys_;
	const DmaSection &dma_;
	uint32_t pd_;
	uint32_t qpn_;
	bool not_present_ = false;
};

} // namespace nicmr::emu

#endif
