/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_session.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <vector>

#include "mem_describe.h"
#include "testmr_dp_demo.h"
#if NICMR_TESTMR_REG
#include "testmr_engine.h"
#include "testmr_telemetry.h"
#endif

namespace nicmr::testmr {

int Session::open(const SessionConfig &cfg, FILE *out, std::unique_ptr<Session> *session)
{
	std::unique_ptr<Session> s(new Session(cfg, out));
	emu::EmuConfig ecfg;
	ecfg.delivery = cfg.delivery;
	if (int rc = emu::emu_mlx5_create(ecfg, &s->nic_); rc != 0)
		return rc;
	s->space_ = std::make_unique<mem::DmaSpace>(s->nic_->function().dma());
	if (int rc = mlx5::Device::open(s->nic_->function(), *s->space_, mlx5::DeviceOptions{},
					&s->dev_);
	    rc != 0)
		return rc;
	*session = std::move(s);
	return 0;
}

Session::Session(const SessionConfig &cfg, FILE *out) : cfg_(cfg), out_(out), rep_(out)
{}

Session::~Session()
{
	/* Driver objects before the driver, the driver (it gives its pages back) before the pools
	 * and the space, and everything mapped before the device that holds the IOMMU. The
	 * registration engine is a device of its own, closed first. */
#if NICMR_TESTMR_REG
	{
		/* The telemetry endpoints stop reading the engine before it goes. */
		std::lock_guard<std::mutex> g(engine_lock());
		telemetry_publish(nullptr);
		engine_.reset();
	}
#endif
	mkeys_.clear();
	pds_.clear();
	dev_.reset();
	pools_.clear();
	space_.reset();
	nic_.reset();
}

int Session::run_line(const std::string &line)
{
	Command cmd;
	std::string error;
	if (int rc = parse_command(line, &cmd, &error); rc != 0)
		return rep_.error(rc, "%s", error.c_str());
	return run(cmd);
}

int Session::run(const Command &cmd)
{
	switch (cmd.verb) {
	case Verb::none:
		return 0;
	case Verb::help:
		return help(cmd.word);
	case Verb::quit:
		quit_ = true;
		return 0;
	case Verb::pool_create: {
		uint64_t id;
		int rc = pool_create(cmd.size, cmd.page_size != 0 ? cmd.page_size : mem::kPage2M,
				     cmd.node, cmd.fallback, &id);
		if (rc == 0)
			rc = show_pool(id);
		return rc;
	}
	case Verb::pool_destroy:
		return pool_destroy(cmd.id);
	case Verb::show_pools:
		return show_pools(cmd.json);
	case Verb::show_pool:
		return show_pool(cmd.id, cmd.json);
	case Verb::show_device:
		return show_device(cmd.json);
	case Verb::translate:
		return translate(cmd.id, cmd.offset);
	case Verb::pd_alloc: {
		uint32_t pd;
		return pd_alloc(&pd);
	}
	case Verb::pd_free:
		return pd_free(cmd.pd);
	case Verb::mkey_create: {
		uint32_t index;
		return mkey_create(cmd, &index);
	}
	case Verb::mkey_query:
		return mkey_query(cmd.index);
	case Verb::mkey_destroy:
		return mkey_destroy(cmd.index);
	case Verb::rdma:
		return rdma();
	case Verb::demo:
		return demo();
	case Verb::mr_pool:
	case Verb::mr_reg:
	case Verb::mr_regv:
	case Verb::mr_sub:
	case Verb::mr_dereg:
	case Verb::show_mr:
	case Verb::show_mrs:
	case Verb::key_lookup:
	case Verb::key_raw:
	case Verb::key_map:
	case Verb::window_bind:
	case Verb::window_unbind:
	case Verb::show_violations:
	case Verb::cntr_alloc:
	case Verb::cntr_free:
	case Verb::mr_bind:
	case Verb::mr_unbind:
	case Verb::mr_enable:
	case Verb::show_cntrs:
	case Verb::mr_fill:
	case Verb::mr_dump:
	case Verb::mr_advise:
	case Verb::show_dpdk:
	case Verb::mempool_create:
	case Verb::mempool_destroy:
	case Verb::show_mempools:
	case Verb::cq_create:
	case Verb::cq_destroy:
	case Verb::qp_create:
	case Verb::qp_connect:
	case Verb::qp_connect_remote:
	case Verb::qp_exchange_listen:
	case Verb::qp_exchange_connect:
	case Verb::qp_pingpong:
	case Verb::qp_recover:
	case Verb::qp_destroy:
	case Verb::post_write:
	case Verb::post_read:
	case Verb::post_fadd:
	case Verb::post_cswap:
	case Verb::poll:
	case Verb::show_cq:
	case Verb::show_cqs:
	case Verb::show_qp:
	case Verb::show_qps:
	case Verb::bench_reg:
	case Verb::bench_lookup:
	case Verb::bench_rdma:
		return engine_run(cmd);
	}
	return -EINVAL;
}

int Session::help(const std::string &section)
{
	std::string text;
	/* The parser accepts only sections of the table: a failure here is the table's. */
	if (int rc = command_help(section, &text); rc != 0)
		return rep_.error(rc, "help: no section '%s'", section.c_str());
	std::fputs(text.c_str(), out_);
	return 0;
}

int Session::engine_run(const Command &cmd)
{
#if NICMR_TESTMR_REG
	/* DPDK's telemetry thread reads the engine (testmr_telemetry.h): it changes under the
	 * lock only. Uncontended without EAL. */
	std::lock_guard<std::mutex> g(engine_lock());
	if (!engine_) {
		if (int rc = Engine::open(cfg_.engine_spec, rep_, cfg_.eal, &engine_); rc != 0)
			return rc;
		telemetry_publish(engine_.get());
	}
	return engine_->run(cmd);
#else
	(void)cmd;
	return rep_.error(-EOPNOTSUPP, "the registration engine needs the native API, which "
				       "this build has not (no DPDK)");
#endif
}

int Session::pool_create(uint64_t size, uint64_t page_size, int node, bool fallback, uint64_t *id)
{
	mem::PoolParams p;
	p.size = size;
	p.page_size = page_size;
	p.numa_node = node;
	p.allow_fallback = fallback;
	p.name = "testmr-" + std::to_string(next_pool_id_);
	std::unique_ptr<mem::Pool> pool;
	if (int rc = mem::Pool::create(p, &pool); rc != 0)
		return rep_.error(rc, "pool create %s on %s pages: %s",
				  mem::format_size(size).c_str(),
				  mem::format_size(page_size).c_str(), std::strerror(-rc));
	const mem::PoolEntry *entry = nullptr;
	if (int rc = space_->add_pool(std::move(pool), &entry); rc != 0)
		return rep_.error(rc, "DMA-mapping the pool: %s", std::strerror(-rc));
	*id = next_pool_id_++;
	pools_[*id] = entry;
	return 0;
}

int Session::pool_destroy(uint64_t id)
{
	auto it = pools_.find(id);
	if (it == pools_.end())
		return rep_.error(-ENOENT, "no pool %" PRIu64, id);
	int rc = space_->remove_pool(it->second->pool);
	pools_.erase(it);
	if (rc != 0)
		return rep_.error(rc, "pool %" PRIu64 " unmapped with an error: %s", id,
				  std::strerror(-rc));
	std::fprintf(out_, "pool %" PRIu64 " destroyed\n", id);
	return 0;
}

std::string Session::pool_json(uint64_t id) const
{
	const mem::PoolEntry &e = *pools_.at(id);
	const mem::Pool &p = *e.pool;
	JsonObject o;
	o.num("id", id)
		.str("name", p.name())
		.num("size", p.size())
		.num("page_size", p.page_size())
		.num("pages", p.page_count())
		.snum("numa_node", p.numa_node())
		.snum("fd", p.fd())
		.hex("va", e.va)
		.num("len", e.len)
		.hex("iova", e.iova)
		.num("iova_align", e.iova_align);
	return o.str();
}

int Session::show_pool(uint64_t id, bool json)
{
	auto it = pools_.find(id);
	if (it == pools_.end())
		return rep_.error(-ENOENT, "no pool %" PRIu64, id);
	if (json)
		std::fprintf(out_, "%s\n", pool_json(id).c_str());
	else
		std::fprintf(out_, "[%" PRIu64 "] %s\n", id, mem::describe(*it->second).c_str());
	return 0;
}

int Session::show_pools(bool json)
{
	if (json) {
		std::string array = "[";
		for (const auto &[id, entry] : pools_)
			array += (array.size() > 1 ? "," : "") + pool_json(id);
		JsonObject o;
		o.num("count", pools_.size()).raw("pools", array + "]");
		std::fprintf(out_, "%s\n", o.str().c_str());
		return 0;
	}
	if (pools_.empty())
		std::fprintf(out_, "no pools\n");
	for (const auto &[id, entry] : pools_)
		show_pool(id);
	return 0;
}

int Session::show_device(bool json)
{
	if (json) {
		auto &f = nic_->emu_function();
		const mlx5::Caps &c = dev_->caps();
		char fw[32];
		std::snprintf(fw, sizeof(fw), "%u.%u.%u", c.fw_major, c.fw_minor, c.fw_subminor);
		std::string ranges = "[";
		for (const auto &r : f.iommu().iova_ranges()) {
			JsonObject ro;
			ro.hex("start", r.start).hex("last", r.last);
			ranges += (ranges.size() > 1 ? "," : "") + ro.str();
		}
		JsonObject o;
		o.str("name", f.name())
			.num("vendor_id", f.id().vendor)
			.num("device_id", f.id().device)
			.num("bar0_size", f.bar0_size())
			.str("doorbells", f.delivery() == emu::DoorbellDelivery::inline_call
						  ? "inline"
						  : "device thread")
			.str("firmware", fw)
			.num("issi", c.issi)
			.num("log_max_mkey", c.log_max_mkey)
			.num("log_max_pd", c.log_max_pd)
			.num("translations_per_mkey", uint64_t{1} << c.log_max_klm_list_size)
			.boolean("mkey_by_index", c.mkey_by_index)
			.str("atomics", !c.atomic		   ? "none"
					: c.atomic_host_endianness ? "host"
								   : "big_endian")
			.boolean("extensions", c.ext_present)
			.num("pages_given", dev_->pages_given())
			.num("pds_in_use", pds_.size())
			.num("mkeys_in_use", mkeys_.size())
			.num("device_pds", nic_->device().pds_allocated())
			.num("device_mkeys", nic_->device().mkeys().live())
			.num("iommu_mappings", f.iommu().mapping_count())
			.num("dma_faults", f.iommu().dma_faults())
			.raw("iova_ranges", ranges + "]");
		std::fprintf(out_, "%s\n", o.str().c_str());
		return 0;
	}
	auto &f = nic_->emu_function();
	const mlx5::Caps &c = dev_->caps();
	std::fprintf(out_, "device %s: PCI %04x:%04x, BAR 0 %s, doorbells %s\n", f.name().c_str(),
		     f.id().vendor, f.id().device, mem::format_size(f.bar0_size()).c_str(),
		     f.delivery() == emu::DoorbellDelivery::inline_call ? "inline"
									: "device thread");
	std::fprintf(out_, "  firmware %u.%u.%u, ISSI %u\n", c.fw_major, c.fw_minor, c.fw_subminor,
		     c.issi);
	std::fprintf(out_,
		     "  capabilities: %u mkeys (log %u), %u PDs (log %u), %u translations per mkey"
		     "\n",
		     1u << c.log_max_mkey, c.log_max_mkey, 1u << c.log_max_pd, c.log_max_pd,
		     1u << c.log_max_klm_list_size);
	std::fprintf(out_,
		     "    mkey at a chosen index: %s; atomics: %s; device-model extensions: %s\n",
		     c.mkey_by_index ? "yes" : "no",
		     !c.atomic			? "no"
		     : c.atomic_host_endianness ? "yes (host byte order)"
						: "no (big-endian words only: refused)",
		     c.ext_present ? "yes" : "none");
	std::fprintf(out_, "  pages given to the device: %zu (%s)\n", dev_->pages_given(),
		     mem::format_size(dev_->pages_given() * mem::kPage4K).c_str());
	std::fprintf(out_, "  in use: %zu PDs, %zu mkeys (the device counts %u PDs, %zu mkeys)\n",
		     pds_.size(), mkeys_.size(), nic_->device().pds_allocated(),
		     nic_->device().mkeys().live());
	std::fprintf(out_, "  IOMMU: %zu mappings, %" PRIu64 " DMA faults; valid IOVA ranges:\n",
		     f.iommu().mapping_count(), f.iommu().dma_faults());
	for (const auto &r : f.iommu().iova_ranges())
		std::fprintf(out_, "    [0x%" PRIx64 ", 0x%" PRIx64 "]\n", r.start, r.last);
	return 0;
}

int Session::pd_alloc(uint32_t *pd)
{
	mlx5::PdHandle h;
	if (int rc = mlx5::PdHandle::alloc(*dev_, &h); rc != 0)
		return rep_.error(rc, "ALLOC_PD: %s", std::strerror(-rc));
	*pd = h.pd();
	pds_[*pd] = std::move(h);
	std::fprintf(out_, "PD %u allocated\n", *pd);
	return 0;
}

int Session::pd_free(uint32_t pd)
{
	auto it = pds_.find(pd);
	if (it == pds_.end())
		return rep_.error(-ENOENT, "no PD %u", pd);
	for (const auto &[index, m] : mkeys_) {
		if (m.pd == pd)
			return rep_.error(-EBUSY,
					  "PD %u is used by mkey index %u: destroy it first", pd,
					  index);
	}
	int rc = it->second.reset();
	pds_.erase(it);
	if (rc != 0)
		return rep_.error(rc, "DEALLOC_PD %u: %s", pd, std::strerror(-rc));
	std::fprintf(out_, "PD %u freed\n", pd);
	return 0;
}

int Session::translate(uint64_t id, uint64_t offset)
{
	auto it = pools_.find(id);
	if (it == pools_.end())
		return rep_.error(-ENOENT, "no pool %" PRIu64, id);
	const mem::PoolEntry &e = *it->second;
	if (offset >= e.len)
		return rep_.error(-ERANGE,
				  "offset 0x%" PRIx64 " is outside pool %" PRIu64 " (%zu bytes)",
				  offset, id, e.len);
	const void *addr = reinterpret_cast<const void *>(e.va + offset);
	uint64_t iova = 0;
	int rc = space_->translate(addr, 1, &iova);
	if (rc != 0)
		return rep_.error(rc, "translate %p: %s", addr, std::strerror(-rc));
	std::fprintf(out_, "pool %" PRIu64 " + 0x%" PRIx64 ": VA %p -> IOVA 0x%" PRIx64 "\n", id,
		     offset, addr, iova);
	return 0;
}

int Session::mkey_create(const Command &cmd, uint32_t *index)
{
	auto it = pools_.find(cmd.id);
	if (it == pools_.end())
		return rep_.error(-ENOENT, "no pool %" PRIu64, cmd.id);
	const mem::PoolEntry &e = *it->second;
	if (cmd.offset >= e.len || cmd.len > e.len - cmd.offset)
		return rep_.error(-ERANGE,
				  "[0x%" PRIx64 ", +0x%" PRIx64 ") is outside pool %" PRIu64
				  " (%zu bytes)",
				  cmd.offset, cmd.len, cmd.id, e.len);
	uint32_t pd = cmd.pd;
	if (pd == 0) {
		if (pds_.empty())
			return rep_.error(-ENOENT, "no PD: run 'pd alloc' first");
		pd = pds_.begin()->first;
	} else if (pds_.count(pd) == 0) {
		return rep_.error(-ENOENT, "no PD %u", pd);
	}
	/* Pages of the pool's own size: the pool's IOVA is congruent to its VA modulo that size,
	 * so one entry per pool page covers the region. */
	const uint64_t page = e.pool->page_size();
	const uint64_t va = e.va + cmd.offset;
	const uint64_t iova = e.iova + cmd.offset;
	const uint64_t first = iova & ~(page - 1);
	const uint64_t end = (iova + cmd.len + page - 1) & ~(page - 1);
	std::vector<mlx5::MttEntry> mtt;
	for (uint64_t p = first; p < end; p += page)
		mtt.push_back({.iova = p, .rd_en = true, .wr_en = true});

	const uint32_t access =
		cmd.access != 0 ? cmd.access : (access_lr | access_lw | access_rr | access_rw);
	mlx5::MkeyCreate c;
	c.ctx.access_mode = mlx5::prm::access_mode::mtt;
	c.ctx.lr = (access & access_lr) != 0;
	c.ctx.lw = (access & access_lw) != 0;
	c.ctx.rr = (access & access_rr) != 0;
	c.ctx.rw = (access & access_rw) != 0;
	c.ctx.a = (access & access_a) != 0;
	c.ctx.pd = pd;
	c.ctx.start_addr = va;
	c.ctx.len = cmd.len;
	c.ctx.log_page_size = static_cast<uint32_t>(__builtin_ctzll(page));
	c.mtt = mtt;
	Mkey m;
	if (int rc = mlx5::MkeyHandle::create(*dev_, c, &m.handle); rc != 0)
		return rep_.error(rc, "CREATE_MKEY: %s (status 0x%x, syndrome 0x%x)",
				  std::strerror(-rc), dev_->last_status(), dev_->last_syndrome());
	m.pd = pd;
	*index = m.handle.index();
	mkeys_[*index] = std::move(m);
	std::fprintf(out_,
		     "mkey index %u: pool %" PRIu64 " [0x%" PRIx64 ", +0x%" PRIx64 "), %zu MTT "
		     "entries of %s, PD %u\n",
		     *index, cmd.id, cmd.offset, cmd.len, mtt.size(),
		     mem::format_size(page).c_str(), pd);
	return 0;
}

int Session::mkey_query(uint32_t index)
{
	mlx5::MkeyQuery q;
	if (int rc = dev_->query_mkey(index, 4, &q); rc != 0)
		return rep_.error(rc, "QUERY_MKEY %u: %s (status 0x%x, syndrome 0x%x)", index,
				  std::strerror(-rc), dev_->last_status(), dev_->last_syndrome());
	const mlx5::MkeyContext &k = q.ctx;
	std::string access;
	for (auto [on, name] : {std::pair{k.lr, "lr"}, std::pair{k.lw, "lw"}, std::pair{k.rr, "rr"},
				std::pair{k.rw, "rw"}, std::pair{k.a, "a"}})
		if (on)
			access += access.empty() ? name : std::string(",") + name;
	std::fprintf(out_,
		     "mkey index %u: %s, access %s, PD %u, start 0x%" PRIx64 ", len 0x%" PRIx64
		     ", pages of %s%s\n",
		     index, k.access_mode == mlx5::prm::access_mode::mtt ? "MTT" : "KLM",
		     access.empty() ? "none" : access.c_str(), k.pd, k.start_addr, k.len,
		     mem::format_size(size_t{1} << k.log_page_size).c_str(),
		     k.free ? ", free" : "");
	/* Translations come in octwords (two MTT entries each): show the ones the range uses. */
	const uint64_t page = uint64_t{1} << k.log_page_size;
	const uint64_t used = (k.start_addr % page + k.len + page - 1) / page;
	for (size_t i = 0; i < q.mtt.size() && i < used; i++)
		std::fprintf(out_, "  MTT[%zu] IOVA 0x%" PRIx64 "%s%s\n", i, q.mtt[i].iova,
			     q.mtt[i].rd_en ? " rd" : "", q.mtt[i].wr_en ? " wr" : "");
	return 0;
}

int Session::mkey_destroy(uint32_t index)
{
	auto it = mkeys_.find(index);
	if (it == mkeys_.end())
		return rep_.error(-ENOENT, "no mkey index %u", index);
	int rc = it->second.handle.reset();
	mkeys_.erase(it);
	if (rc != 0)
		return rep_.error(rc, "DESTROY_MKEY %u: %s", index, std::strerror(-rc));
	std::fprintf(out_, "mkey index %u destroyed\n", index);
	return 0;
}

int Session::demo()
{
	std::fprintf(out_, "\n-- the emulated ConnectX, brought up by the mlx5 driver\n");
	show_device();

	std::fprintf(out_, "\n-- a pool of %s on %s pages, DMA-mapped once through the IOMMU\n",
		     mem::format_size(cfg_.demo_pool_size).c_str(),
		     mem::format_size(cfg_.demo_page_size).c_str());
	uint64_t id;
	int rc = pool_create(cfg_.demo_pool_size, cfg_.demo_page_size, cfg_.demo_node,
			     cfg_.demo_fallback, &id);
	if (rc != 0)
		return rc;
	show_pool(id);

	std::fprintf(out_, "\n-- address translation (lockless lookups of the pool's IOVA)\n");
	const mem::PoolEntry &e = *pools_[id];
	for (uint64_t off :
	     {uint64_t{0}, uint64_t{0x1234}, uint64_t{e.len / 2}, uint64_t{e.len - 1}})
		translate(id, off);

	std::fprintf(out_,
		     "\n-- a PD and an mkey over 1 MiB of the pool (CREATE_MKEY, QUERY_MKEY)\n");
	uint32_t pd, index;
	if ((rc = pd_alloc(&pd)) != 0)
		return rc;
	Command c;
	c.id = id;
	c.offset = 0x1000;
	c.len = std::min<uint64_t>(uint64_t{1} << 20, e.len - c.offset);
	c.pd = pd;
	if ((rc = mkey_create(c, &index)) != 0)
		return rc;
	if ((rc = mkey_query(index)) != 0)
		return rc;

	std::fprintf(out_,
		     "\n-- the data path: the two ports connected by the device's loopback wire\n");
	if ((rc = rdma()) != 0)
		return rc;

	std::fprintf(out_, "\n-- the device now\n");
	return show_device();
}

int Session::rdma()
{
	int rc = testmr::dp_loopback_demo(*dev_, out_);
	if (rc != 0)
		return rep_.error(rc, "the RDMA demo failed: %s", std::strerror(-rc));
	return 0;
}

} // namespace nicmr::testmr
