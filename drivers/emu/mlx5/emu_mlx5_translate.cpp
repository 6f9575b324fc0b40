/* SPDX-License-Identifier: BSD-3-Clause */
#include "emu_mlx5_translate.h"

#include <infiniband/mlx5dv.h>

#include <algorithm>
#include <cstring>

#include "mlx5_prm.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;

namespace {

bool is_remote(Access a)
{
	return a == Access::remote_read || a == Access::remote_write || a == Access::remote_atomic;
}

/* Check 5: the mkc's bit for the operation. */
bool access_bit(const uint8_t *mkc, Access a)
{
	switch (a) {
	case Access::local_read:
		return prm::get(mkc, prm::mkc::lr) != 0;
	case Access::local_write:
		return prm::get(mkc, prm::mkc::lw) != 0;
	case Access::remote_read:
		return prm::get(mkc, prm::mkc::rr) != 0;
	case Access::remote_write:
		return prm::get(mkc, prm::mkc::rw) != 0;
	case Access::remote_atomic:
		return prm::get(mkc, prm::mkc::a) != 0;
	}
	return false;
}

/* Check 7: a page entry's enables. */
bool page_ok(const uint8_t *entry, Access a)
{
	const bool rd = prm::get(entry, prm::mtt::rd_en) != 0;
	const bool wr = prm::get(entry, prm::mtt::wr_en) != 0;
	switch (a) {
	case Access::local_read:
	case Access::remote_read:
		return rd;
	case Access::local_write:
	case Access::remote_write:
		return wr;
	case Access::remote_atomic:
		return rd && wr;
	}
	return false;
}

} // namespace

uint8_t Translator::fail_syndrome(Access a, bool missing_write) noexcept
{
	if (is_remote(a))
		return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
	return missing_write ? MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR
			     : MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
}

/* Device hot path: no allocation, no system call; the key's slot is held through the Hold. */
uint8_t Translator::resolve_at(uint32_t key, uint64_t addr, uint64_t max, Access a, int depth,
			       IovaRun *run) const noexcept
{
	const uint8_t bad = fail_syndrome(a, false);
	const MkeyEntry *e = keys_->find(prm::mkey::index(key));
	/* 1: exists and live; 2: the variant. */
	if (e == nullptr)
		return bad;
	const uint8_t *mkc = e->mkc.data();
	if (prm::get(mkc, prm::mkc::free) != 0 ||
	    prm::get(mkc, prm::mkc::mkey_7_0) != prm::mkey::variant(key))
		return bad;
	/* 3: the PD; 4: the QP the key is bound to. */
	if (prm::get(mkc, prm::mkc::pd) != pd_)
		return bad;
	const uint64_t kq = prm::get(mkc, prm::mkc::qpn);
	if (kq != prm::mkc::qpn_any && kq != qpn_)
		return bad;
	/* 5: the operation's access bit. */
	if (!access_bit(mkc, a))
		return fail_syndrome(a, a == Access::local_write);
	/* 6: the bounds, without overflow: addr - start < len and max <= len - (addr - start). */
	const uint64_t start = prm::get(mkc, prm::mkc::start_addr);
	const uint64_t len = prm::get(mkc, prm::mkc::len);
	if (prm::get(mkc, prm::mkc::length64) == 0) {
		if (addr < start || addr - start >= len || max > len - (addr - start))
			return bad;
	}
	if (max == 0)
		return bad;

	switch (e->access_mode) {
	case prm::access_mode::pa:
		*run = IovaRun{addr, max};
		return 0;
	case prm::access_mode::mtt: {
		const uint64_t lps = prm::get(mkc, prm::mkc::log_page_size);
		if (lps < 12 || lps > 30)
			return bad;
		const uint64_t page = uint64_t{1} << lps;
		const uint64_t base = start & ~(page - 1);
		if (addr < base)
			return bad;
		uint64_t idx = (addr - base) >> lps;
		const uint64_t entries = e->translations.size() / prm::mtt::size;
		if (idx >= entries)
			return bad;
		const uint8_t *ent = e->translations.data() + idx * prm::mtt::size;
		if (e->pg_access && !page_ok(ent, a))
			return not_present_ ? kNotPresent
					    : fail_syndrome(a, a == Access::local_write);
		const uint64_t pa = prm::mtt_page_address(ent);
		const uint64_t off = addr & (page - 1);
		const uint64_t iova = pa + off;
		uint64_t n = std::min(max, page - off);
		/* Merge following pages while their IOVAs continue the run: a 64 KiB transfer
		 * over contiguous 4 KiB pages is one copy. */
		while (n < max && ++idx < entries) {
			ent = e->translations.data() + idx * prm::mtt::size;
			const uint64_t next = prm::mtt_page_address(ent);
			if (next != iova + n || (e->pg_access && !page_ok(ent, a)))
				break;
			n += std::min(max - n, page);
		}
		*run = IovaRun{iova, n};
		return 0;
	}
	case prm::access_mode::klm: {
		if (depth >= kMaxIndirection)
			return bad;
		/* Parts laid end to end from start_addr. */
		uint64_t off = addr - start;
		const size_t entries = e->translations.size() / prm::klm::size;
		for (size_t i = 0; i < entries; i++) {
			const uint8_t *ent = e->translations.data() + i * prm::klm::size;
			const uint64_t bc = prm::get(ent, prm::klm::byte_count);
			if (off >= bc) {
				off -= bc;
				continue;
			}
			const auto child = static_cast<uint32_t>(prm::get(ent, prm::klm::mkey));
			const uint64_t caddr = prm::get(ent, prm::klm::address);
			if (caddr + off < caddr)
				return bad;
			return resolve_at(child, caddr + off, std::min(max, bc - off), a, depth + 1,
					  run);
		}
		return bad;
	}
	default:
		return bad;
	}
}

uint8_t Translator::resolve(uint32_t key, uint64_t addr, uint64_t max, Access a,
			    IovaRun *run) const noexcept
{
	return resolve_at(key, addr, max, a, 0, run);
}

uint8_t Translator::validate(uint32_t key, uint64_t addr, uint64_t len, Access a) const noexcept
{
	if (len == 0)
		return 0;
	if (addr + (len - 1) < addr)
		return fail_syndrome(a, false);
	uint64_t done = 0;
	while (done < len) {
		IovaRun r;
		const uint8_t s = resolve_at(key, addr + done, len - done, a, 0, &r);
		if (s != 0)
			return s;
		/* A translation to an IOVA the IOMMU does not map: refused before any byte moves
		 * (the device would take a DMA fault in the middle of the message otherwise). */
		if (!dma_.mapped(r.iova, r.len))
			return fail_syndrome(a, false);
		done += r.len;
	}
	return 0;
}

} // namespace nicmr::emu
