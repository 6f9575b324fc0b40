/* SPDX-License-Identifier: BSD-3-Clause */
#include "testmr_session.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <vector>

#include "mem_describe.h"
#include "testmr_dp_demo.h"

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

Session::~Session()
{
	/* Driver objects before the driver, the driver (it gives its pages back) before the pools
	 * and the space, and everything mapped before the device that holds the IOMMU. */
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
	if (int rc = parse_command(line, &cmd, &error); rc != 0) {
		std::fprintf(out_, "error: %s\n", error.c_str());
		return rc;
	}
	return run(cmd);
}

int Session::run(const Command &cmd)
{
	switch (cmd.verb) {
	case Verb::none:
		return 0;
	case Verb::help:
		std::fputs(command_help(), out_);
		return 0;
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
		return show_pools();
	case Verb::show_pool:
		return show_pool(cmd.id);
	case Verb::show_device:
		return show_device();
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
	}
	return -EINVAL;
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
	if (int rc = mem::Pool::create(p, &pool); rc != 0) {
		std::fprintf(out_, "error: pool create %s on %s pages: %s\n",
			     mem::format_size(size).c_str(), mem::format_size(page_size).c_str(),
			     std::strerror(-rc));
		return rc;
	}
	const mem::PoolEntry *entry = nullptr;
	if (int rc = space_->add_pool(std::move(pool), &entry); rc != 0) {
		std::fprintf(out_, "error: DMA-mapping the pool: %s\n", std::strerror(-rc));
		return rc;
	}
	*id = next_pool_id_++;
	pools_[*id] = entry;
	return 0;
}

int Session::pool_destroy(uint64_t id)
{
	auto it = pools_.find(id);
	if (it == pools_.end()) {
		std::fprintf(out_, "error: no pool %" PRIu64 "\n", id);
		return -ENOENT;
	}
	int rc = space_->remove_pool(it->second->pool);
	pools_.erase(it);
	if (rc != 0) {
		std::fprintf(out_, "error: pool %" PRIu64 " unmapped with an error: %s\n", id,
			     std::strerror(-rc));
		return rc;
	}
	std::fprintf(out_, "pool %" PRIu64 " destroyed\n", id);
	return 0;
}

int Session::show_pool(uint64_t id)
{
	auto it = pools_.find(id);
	if (it == pools_.end()) {
		std::fprintf(out_, "error: no pool %" PRIu64 "\n", id);
		return -ENOENT;
	}
	std::fprintf(out_, "[%" PRIu64 "] %s\n", id, mem::describe(*it->second).c_str());
	return 0;
}

int Session::show_pools()
{
	if (pools_.empty())
		std::fprintf(out_, "no pools\n");
	for (const auto &[id, entry] : pools_)
		show_pool(id);
	return 0;
}

int Session::show_device()
{
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
	if (int rc = mlx5::PdHandle::alloc(*dev_, &h); rc != 0) {
		std::fprintf(out_, "error: ALLOC_PD: %s\n", std::strerror(-rc));
		return rc;
	}
	*pd = h.pd();
	pds_[*pd] = std::move(h);
	std::fprintf(out_, "PD %u allocated\n", *pd);
	return 0;
}

int Session::pd_free(uint32_t pd)
{
	auto it = pds_.find(pd);
	if (it == pds_.end()) {
		std::fprintf(out_, "error: no PD %u\n", pd);
		return -ENOENT;
	}
	for (const auto &[index, m] : mkeys_) {
		if (m.pd == pd) {
			std::fprintf(out_,
				     "error: PD %u is used by mkey index %u: destroy it first\n",
				     pd, index);
			return -EBUSY;
		}
	}
	int rc = it->second.reset();
	pds_.erase(it);
	if (rc != 0) {
		std::fprintf(out_, "error: DEALLOC_PD %u: %s\n", pd, std::strerror(-rc));
		return rc;
	}
	std::fprintf(out_, "PD %u freed\n", pd);
	return 0;
}

int Session::translate(uint64_t id, uint64_t offset)
{
	auto it = pools_.find(id);
	if (it == pools_.end()) {
		std::fprintf(out_, "error: no pool %" PRIu64 "\n", id);
		return -ENOENT;
	}
	const mem::PoolEntry &e = *it->second;
	if (offset >= e.len) {
		std::fprintf(out_,
			     "error: offset 0x%" PRIx64 " is outside pool %" PRIu64
			     " (%zu bytes)\n",
			     offset, id, e.len);
		return -ERANGE;
	}
	const void *addr = reinterpret_cast<const void *>(e.va + offset);
	uint64_t iova = 0;
	int rc = space_->translate(addr, 1, &iova);
	if (rc != 0) {
		std::fprintf(out_, "error: translate %p: %s\n", addr, std::strerror(-rc));
		return rc;
	}
	std::fprintf(out_, "pool %" PRIu64 " + 0x%" PRIx64 ": VA %p -> IOVA 0x%" PRIx64 "\n", id,
		     offset, addr, iova);
	return 0;
}

int Session::mkey_create(const Command &cmd, uint32_t *index)
{
	auto it = pools_.find(cmd.id);
	if (it == pools_.end()) {
		std::fprintf(out_, "error: no pool %" PRIu64 "\n", cmd.id);
		return -ENOENT;
	}
	const mem::PoolEntry &e = *it->second;
	if (cmd.offset >= e.len || cmd.len > e.len - cmd.offset) {
		std::fprintf(out_,
			     "error: [0x%" PRIx64 ", +0x%" PRIx64 ") is outside pool %" PRIu64
			     " (%zu bytes)\n",
			     cmd.offset, cmd.len, cmd.id, e.len);
		return -ERANGE;
	}
	uint32_t pd = cmd.pd;
	if (pd == 0) {
		if (pds_.empty()) {
			std::fprintf(out_, "error: no PD: run 'pd alloc' first\n");
			return -ENOENT;
		}
		pd = pds_.begin()->first;
	} else if (pds_.count(pd) == 0) {
		std::fprintf(out_, "error: no PD %u\n", pd);
		return -ENOENT;
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
	if (int rc = mlx5::MkeyHandle::create(*dev_, c, &m.handle); rc != 0) {
		std::fprintf(out_, "error: CREATE_MKEY: %s (status 0x%x, syndrome 0x%x)\n",
			     std::strerror(-rc), dev_->last_status(), dev_->last_syndrome());
		return rc;
	}
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
	if (int rc = dev_->query_mkey(index, 4, &q); rc != 0) {
		std::fprintf(out_, "error: QUERY_MKEY %u: %s (status 0x%x, syndrome 0x%x)\n", index,
			     std::strerror(-rc), dev_->last_status(), dev_->last_syndrome());
		return rc;
	}
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
	if (it == mkeys_.end()) {
		std::fprintf(out_, "error: no mkey index %u\n", index);
		return -ENOENT;
	}
	int rc = it->second.handle.reset();
	mkeys_.erase(it);
	if (rc != 0) {
		std::fprintf(out_, "error: DESTROY_MKEY %u: %s\n", index, std::strerror(-rc));
		return rc;
	}
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
		std::fprintf(out_, "error: the RDMA demo failed: %s\n", std::strerror(-rc));
	return rc;
}

} // namespace nicmr::testmr
