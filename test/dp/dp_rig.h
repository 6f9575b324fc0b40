/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A data-path rig for tests and benchmarks: an emulated ConnectX, the driver opened on it, one
 * PD, a UAR, an EQ, and two RC QPs (port 1 and port 2, a CQ each) connected to each other over
 * the device model's loopback wire; a data arena whose blocks tests register as MTT or KLM
 * mkeys with CREATE_MKEY.
 */
#ifndef NICMR_TEST_DP_RIG_H
#define NICMR_TEST_DP_RIG_H

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "emu_mlx5.h"
#include "mem_space.h"
#include "mlx5_cq.h"
#include "mlx5_device.h"
#include "mlx5_eq.h"
#include "mlx5_qp.h"
#include "mlx5_uar.h"
#include "mr_keys.h"

namespace nicmr::testdp {

namespace emu = nicmr::emu;
namespace mem = nicmr::mem;
namespace mlx5 = nicmr::mlx5;
namespace prm = nicmr::mlx5::prm;
using namespace std::chrono_literals;

struct RigOptions {
	emu::DoorbellDelivery delivery = emu::DoorbellDelivery::inline_call;
	size_t data_bytes = size_t{8} << 20;
	bool rre = true, rwe = true, rae = true; /* responder enables of both QPs */
	uint32_t log_sq_size = 8;
	/* The device offers host-endian atomics (EmuConfig); the driver asks for them
	 * (DeviceOptions). */
	bool atomic_host_endianness = true, want_atomic_host_endianness = true;
	/* UMR (EmuConfig): the reserved lkey QUERY_SPECIAL_CONTEXTS reports, and the
	 * umr_modify_*_disabled caps. */
	uint32_t resd_lkey = emu::kDefaultResdLkey;
	bool umr_modify_entity_size_disabled = false, umr_modify_atomic_disabled = false;
	/* The device model's other settings (delivery and the atomic mode above win). */
	emu::EmuConfig emu_cfg;
	/* Both QPs' address path when force loopback is not allowed (QpParams). */
	uint32_t gid_index = 0;
	std::array<uint8_t, 16> remote_gid{};
	/* The device creates mkeys at chosen indices (EmuConfig; off as on a stock ConnectX). */
	bool mkey_by_name = false;
	/* The CQs name the device's completion EQ (Device::comp_eqn) instead of the rig's EQ,
	 * so that their completion events come through comp_event_fd. */
	bool cqs_on_comp_eq = false;
};

/* An mkey made for a test: the handle destroys it. */
struct TestMr {
	mlx5::MkeyHandle handle;
	uint32_t key = 0; /* index << 8 | variant */
};

/* A buffer of the rig's data arena, filled with a canary and registered by Rig::buf; off bytes
 * into its block (not page aligned: a scatter crosses page boundaries). */
struct RigBuf {
	mem::DmaArena *arena = nullptr;
	mem::DmaBlock block;
	size_t off = 0;
	size_t len = 0;
	TestMr mr;
	uint8_t *p() const { return static_cast<uint8_t *>(block.va) + off; }
	uint64_t addr() const { return reinterpret_cast<uintptr_t>(block.va) + off; }
	RigBuf() = default;
	explicit RigBuf(size_t offset) : off(offset) {}
	RigBuf(const RigBuf &) = delete;
	RigBuf &operator=(const RigBuf &) = delete;
	~RigBuf()
	{
		mr.handle.reset();
		if (arena != nullptr)
			arena->release(block);
	}
	mlx5::Sge sge(size_t from, size_t n) const
	{
		return {addr() + from, static_cast<uint32_t>(n), mr.key};
	}
};

struct Rig {
	std::unique_ptr<emu::EmuMlx5> hw;
	std::unique_ptr<mem::DmaSpace> space;
	std::unique_ptr<mem::DmaArena> ctrl;
	std::unique_ptr<mem::DmaArena> data;
	std::unique_ptr<mlx5::Device> dev;
	mlx5::PdHandle pd;
	std::unique_ptr<mlx5::Uar> uar;
	std::unique_ptr<mlx5::Eq> eq;
	std::unique_ptr<mlx5::Cq> cq[2];
	std::unique_ptr<mlx5::Qp> qp[2];

	int make(const RigOptions &o = {})
	{
		emu::EmuConfig cfg = o.emu_cfg;
		cfg.delivery = o.delivery;
		cfg.bar0_size = size_t{1} << 20;
		cfg.atomic_host_endianness = o.atomic_host_endianness;
		cfg.resd_lkey = o.resd_lkey;
		cfg.umr_modify_entity_size_disabled = o.umr_modify_entity_size_disabled;
		cfg.umr_modify_atomic_disabled = o.umr_modify_atomic_disabled;
		cfg.mkey_by_name = o.mkey_by_name;
		int rc = emu::emu_mlx5_create(cfg, &hw);
		if (rc != 0)
			return rc;
		space = std::make_unique<mem::DmaSpace>(hw->function().dma());
		mem::PoolParams p;
		p.size = size_t{8} << 20;
		p.page_size = mem::kPage4K;
		p.name = "dp-ctrl";
		if ((rc = mem::DmaArena::create(*space, p, &ctrl)) != 0)
			return rc;
		p.size = o.data_bytes;
		p.name = "dp-data";
		if ((rc = mem::DmaArena::create(*space, p, &data)) != 0)
			return rc;
		mlx5::DeviceOptions d;
		d.arena = ctrl.get();
		d.init_timeout = 2000ms;
		d.cmd_timeout = 5000ms;
		d.want_atomic_host_endianness = o.want_atomic_host_endianness;
		if ((rc = mlx5::Device::open(hw->function(), *space, d, &dev)) != 0)
			return rc;
		if ((rc = mlx5::PdHandle::alloc(*dev, &pd)) != 0)
			return rc;
		if ((rc = mlx5::Uar::alloc(*dev, &uar)) != 0)
			return rc;
		if ((rc = mlx5::Eq::create(*dev, *uar, {}, &eq)) != 0)
			return rc;
		for (int i = 0; i < 2; i++) {
			mlx5::CqParams cp;
			cp.log_size = o.log_sq_size;
			if (!o.cqs_on_comp_eq)
				cp.eqn = eq->eqn();
			if ((rc = mlx5::Cq::create(*dev, *uar, cp, &cq[i])) != 0)
				return rc;
			mlx5::QpParams qp_p;
			qp_p.pd = pd.pd();
			qp_p.port = static_cast<uint32_t>(i + 1);
			qp_p.log_sq_size = o.log_sq_size;
			qp_p.rre = o.rre;
			qp_p.rwe = o.rwe;
			qp_p.rae = o.rae;
			qp_p.gid_index = o.gid_index;
			qp_p.remote_gid = o.remote_gid;
			if ((rc = mlx5::Qp::create(*dev, *uar, *cq[i], qp_p, &qp[i])) != 0)
				return rc;
		}
		if ((rc = qp[0]->connect(qp[1]->qpn())) != 0)
			return rc;
		return qp[1]->connect(qp[0]->qpn());
	}

	~Rig()
	{
		for (auto &q : qp)
			q.reset();
		for (auto &c : cq)
			c.reset();
		eq.reset();
		uar.reset();
		pd.reset();
		dev.reset();
		data.reset();
		ctrl.reset();
		space.reset();
		hw.reset();
	}

	/*
	 * An MTT mkey over [va, va + len) of a data block: start_addr = va, one entry per page of
	 * 2^log_page bytes from the page holding va. ctx fields come from tmpl (access, pd, ...).
	 */
	int mtt_mr(const mem::DmaBlock &b, size_t off, size_t len, const mlx5::MkeyContext &tmpl,
		   TestMr *out, bool pg_access = false,
		   std::vector<mlx5::MttEntry> *mtt_out = nullptr)
	{
		const uint64_t page = uint64_t{1} << tmpl.log_page_size;
		uint64_t va = reinterpret_cast<uintptr_t>(b.va) + off;
		uint64_t iova = b.iova + off;
		uint64_t first = iova & ~(page - 1);
		uint64_t last = (iova + (len ? len : 1) - 1) & ~(page - 1);
		std::vector<mlx5::MttEntry> mtt;
		for (uint64_t p = first; p <= last; p += page)
			mtt.push_back({p, true, true});
		if (mtt_out != nullptr) {
			*mtt_out = mtt;
			return 0;
		}
		mlx5::MkeyCreate c;
		c.ctx = tmpl;
		c.ctx.access_mode = prm::access_mode::mtt;
		c.ctx.start_addr = va;
		c.ctx.len = len;
		c.pg_access = pg_access;
		c.mtt = mtt;
		int rc = mlx5::MkeyHandle::create(*dev, c, &out->handle);
		if (rc == 0)
			out->key = mr::make_mkey(out->handle.index(), tmpl.variant);
		return rc;
	}

	int create_raw(const mlx5::MkeyCreate &c, TestMr *out)
	{
		int rc = mlx5::MkeyHandle::create(*dev, c, &out->handle);
		if (rc == 0)
			out->key = mr::make_mkey(out->handle.index(), c.ctx.variant);
		return rc;
	}

	mlx5::MkeyContext ctx(bool lr, bool lw, bool rr, bool rw, bool a, uint8_t variant = 0x5a)
	{
		mlx5::MkeyContext c;
		c.pd = pd.pd();
		c.lr = lr;
		c.lw = lw;
		c.rr = rr;
		c.rw = rw;
		c.a = a;
		c.variant = variant;
		return c;
	}

	/* Polls QP i for one completion (up to 5 s). */
	bool wait(int i, mlx5::Completion *c)
	{
		auto deadline = std::chrono::steady_clock::now() + 5s;
		while (std::chrono::steady_clock::now() < deadline)
			if (qp[i]->poll(c, 1) == 1)
				return true;
		return false;
	}
	/* One receive completion of QP i (up to 5 s). */
	bool wait_recv(int i, mlx5::Completion *c)
	{
		auto deadline = std::chrono::steady_clock::now() + 5s;
		while (std::chrono::steady_clock::now() < deadline)
			if (qp[i]->poll_recv(c, 1) == 1)
				return true;
		return false;
	}
	/* len bytes of the data arena into b (b->off into its block), every byte of the block
	 * filled with canary, registered with ctx's rights (at least one byte: an empty region
	 * still needs its key). */
	int buf(size_t len, const mlx5::MkeyContext &ctx, uint8_t canary, RigBuf *b)
	{
		b->len = len;
		int rc = data->alloc(len + b->off + 4096, 4096, &b->block);
		if (rc != 0)
			return rc;
		b->arena = data.get();
		std::memset(b->block.va, canary, b->block.len);
		return mtt_mr(b->block, b->off, len ? len : 1, ctx, &b->mr);
	}
	/* Polls the EQ for one event (up to 2 s). */
	bool wait_event(mlx5::Event *e)
	{
		auto deadline = std::chrono::steady_clock::now() + 2s;
		while (std::chrono::steady_clock::now() < deadline)
			if (eq->poll(e, 1) == 1)
				return true;
		return false;
	}
};

} // namespace nicmr::testdp

#endif
