/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Device bring-up and teardown, capabilities, page management.
 */
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "mlx5_device.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::mlx5 {
namespace {

constexpr const char *kLog = "mlx5";
/* Pages per MANAGE_PAGES command: 4 KiB of addresses, nine mailboxes. */
constexpr uint32_t kPagesPerCommand = 512;

uint32_t read_reg(const bus::PciFunction &fn, prm::Field f) noexcept
{
	uint32_t raw = fn.bar0_read32(prm::dword_byte_offset(f));
	return static_cast<uint32_t>(prm::get(&raw, prm::in_dword(f)));
}

} // namespace

bool is_supported_device(bus::PciId id) noexcept
{
	/* Device IDs of the mlx5 family (the kernel's mlx5_core PCI table): PFs and their VFs. */
	static constexpr uint16_t kDeviceIds[] = {
		0x1011, /* Connect-IB */
		0x1012, /* Connect-IB VF */
		0x1013, /* ConnectX-4 */
		0x1014, /* ConnectX-4 VF */
		0x1015, /* ConnectX-4 Lx */
		0x1016, /* ConnectX-4 Lx VF */
		0x1017, /* ConnectX-5 */
		0x1018, /* ConnectX-5 VF */
		0x1019, /* ConnectX-5 Ex */
		0x101a, /* ConnectX-5 Ex VF */
		0x101b, /* ConnectX-6 */
		0x101c, /* ConnectX-6 VF */
		0x101d, /* ConnectX-6 Dx */
		0x101e, /* ConnectX family VF */
		0x101f, /* ConnectX-6 Lx */
		0x1021, /* ConnectX-7 */
		0x1023, /* ConnectX-8 */
		0xa2d2, /* BlueField */
		0xa2d3, /* BlueField VF */
		0xa2d6, /* BlueField-2 */
		0xa2dc, /* BlueField-3 */
	};
	if (id.vendor != kPciVendorMellanox)
		return false;
	for (uint16_t d : kDeviceIds)
		if (d == id.device)
			return true;
	return false;
}

int Device::open(bus::PciFunction &fn, mem::DmaSpace &space, const DeviceOptions &opts,
		 std::unique_ptr<Device> *out)
{
	/* Memory mapped through another IOMMU would be unreachable by this function. */
	if (out == nullptr || &space.mapper() != &fn.dma())
		return -EINVAL;
	/* Before anything is written: registers of another device mean something else. */
	if (bus::PciId id = fn.id(); !is_supported_device(id)) {
		NICMR_LOG(error, kLog,
			  "%s is %04x:%04x, not a ConnectX (vendor %04x): the mlx5 driver does not "
			  "drive it",
			  fn.name().c_str(), id.vendor, id.device, kPciVendorMellanox);
		return -ENODEV;
	}
	std::unique_ptr<Device> dev(new (std::nothrow) Device(fn));
	if (!dev)
		return -ENOMEM;
	if (opts.arena != nullptr) {
		dev->arena_ = opts.arena;
	} else {
		int rc = mem::DmaArena::create(space, opts.arena_params, &dev->own_arena_);
		if (rc != 0) {
			NICMR_LOG(error, kLog, "%s: cannot create the driver's DMA arena (%d)",
				  fn.name().c_str(), rc);
			return rc;
		}
		dev->arena_ = dev->own_arena_.get();
	}
	/* The command queue is DMA: Bus Master Enable first, as rdma-core's VFIO provider does
	 * (mlx5_vfio.c, mlx5_vfio_enable_pci_cmd); teardown clears it. */
	if (int rc = fn.set_bus_master(true); rc != 0) {
		NICMR_LOG(error, kLog, "%s: cannot set Bus Master Enable (%d)", fn.name().c_str(),
			  rc);
		return rc;
	}
	/* On failure the destructor undoes whatever bring_up reached. */
	int rc = dev->bring_up(opts);
	if (rc != 0)
		return rc;
	*out = std::move(dev);
	return 0;
}

Device::~Device()
{
	teardown();
}

int Device::wait_ready(std::chrono::milliseconds timeout)
{
	const auto deadline = std::chrono::steady_clock::now() + timeout;
	while (read_reg(fn_, prm::init_seg::initializing) != 0) {
		if (std::chrono::steady_clock::now() >= deadline) {
			NICMR_LOG(error, kLog, "%s: still initializing after %lld ms",
				  fn_.name().c_str(), static_cast<long long>(timeout.count()));
			return -ETIMEDOUT;
		}
		/* Firmware boots in seconds: no point in spinning. */
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
	return 0;
}

int Device::bring_up(const DeviceOptions &opts)
{
	int rc = wait_ready(opts.init_timeout);
	if (rc != 0)
		return rc;
	auto cmdif = read_reg(fn_, prm::init_seg::cmdif_rev);
	if (cmdif != prm::init_seg::cmdif_rev_supported) {
		NICMR_LOG(error, kLog, "%s: command interface revision %u, nicmr speaks %u",
			  fn_.name().c_str(), cmdif, prm::init_seg::cmdif_rev_supported);
		return -EPROTONOSUPPORT;
	}
	caps_.fw_major = static_cast<uint16_t>(read_reg(fn_, prm::init_seg::fw_rev_major));
	caps_.fw_minor = static_cast<uint16_t>(read_reg(fn_, prm::init_seg::fw_rev_minor));
	caps_.fw_subminor = static_cast<uint16_t>(read_reg(fn_, prm::init_seg::fw_rev_subminor));

	rc = CmdQueue::create(fn_, *arena_, opts.cmd_timeout, &cmdq_);
	if (rc != 0)
		return rc;
	rc = enable_hca(*cmdq_);
	if (rc != 0)
		return rc;
	enabled_ = true;

	uint16_t issi = 0;
	uint32_t supported = 0;
	rc = query_issi(*cmdq_, &issi, &supported);
	if (rc != 0)
		return rc;
	if (!prm::query_issi_out::issi_supported(supported, 1)) {
		NICMR_LOG(error, kLog, "%s: ISSI 1 not supported (supported 0x%x)",
			  fn_.name().c_str(), supported);
		return -EPROTONOSUPPORT;
	}
	rc = set_issi(*cmdq_, 1);
	if (rc != 0)
		return rc;
	caps_.issi = 1;

	rc = satisfy_pages(prm::query_pages_op_mod::boot);
	if (rc != 0)
		return rc;
	rc = query_caps(opts);
	if (rc != 0)
		return rc;
	rc = satisfy_pages(prm::query_pages_op_mod::init);
	if (rc != 0)
		return rc;
	rc = init_hca(*cmdq_);
	if (rc != 0)
		return rc;
	initialized_ = true;

	/* Extensions: a ConnectX refuses the type; that only means there are none. */
	{
		std::vector<uint8_t> cap(prm::query_hca_cap_out::capability_size);
		if (query_hca_cap(*cmdq_, prm::cap_type::nicmr_ext, prm::cap_mode::current,
				  cap.data(), true) == 0) {
			caps_.ext_present = true;
			caps_.ext_flags = prm::get(cap.data(), prm::ext_cap::flags);
		} else if (cmdq_->broken()) {
			return -ETIMEDOUT;
		}
	}
	NICMR_LOG(info, kLog,
		  "%s: up, fw %u.%u.%u, log_max_mkey %u, mkey_by_index %d, atomic %d (%s), "
		  "%zu pages given",
		  fn_.name().c_str(), caps_.fw_major, caps_.fw_minor, caps_.fw_subminor,
		  caps_.log_max_mkey, caps_.mkey_by_index, caps_.atomic,
		  caps_.atomic_host_endianness ? "host endian" : "big-endian", pages_given());
	return 0;
}

int Device::query_caps(const DeviceOptions &opts)
{
	std::vector<uint8_t> max_cap(prm::query_hca_cap_out::capability_size);
	std::vector<uint8_t> cur(prm::query_hca_cap_out::capability_size);
	int rc = query_hca_cap(*cmdq_, prm::cap_type::general, prm::cap_mode::max, max_cap.data());
	if (rc != 0)
		return rc;
	rc = query_hca_cap(*cmdq_, prm::cap_type::general, prm::cap_mode::current, cur.data());
	if (rc != 0)
		return rc;
	if (opts.want_mkey_by_index && prm::get(max_cap.data(), prm::hca_cap::mkey_by_name) != 0 &&
	    prm::get(cur.data(), prm::hca_cap::mkey_by_name) == 0) {
		/* SET_HCA_CAP takes the whole structure: start from what is current. */
		prm::set(cur.data(), prm::hca_cap::mkey_by_name, 1);
		rc = set_hca_cap(*cmdq_, prm::cap_type::general, cur.data());
		if (rc != 0)
			return rc;
		rc = query_hca_cap(*cmdq_, prm::cap_type::general, prm::cap_mode::current,
				   cur.data());
		if (rc != 0)
			return rc;
	}
	const uint8_t *c = cur.data();
	auto u = [c](prm::Field f) { return static_cast<uint32_t>(prm::get(c, f)); };
	caps_.log_max_mkey = u(prm::hca_cap::log_max_mkey);
	caps_.log_max_pd = u(prm::hca_cap::log_max_pd);
	caps_.log_max_klm_list_size = u(prm::hca_cap::log_max_klm_list_size);
	caps_.max_indirection = u(prm::hca_cap::max_indirection);
	caps_.log_max_mrw_sz = u(prm::hca_cap::log_max_mrw_sz);
	caps_.log_pg_sz = u(prm::hca_cap::log_pg_sz);
	caps_.umr_extended_translation_offset = u(prm::hca_cap::umr_extended_translation_offset);
	caps_.umr_modify_entity_size_disabled = u(prm::hca_cap::umr_modify_entity_size_disabled);
	caps_.umr_modify_atomic_disabled = u(prm::hca_cap::umr_modify_atomic_disabled);
	caps_.umr_indirect_mkey_disabled = u(prm::hca_cap::umr_indirect_mkey_disabled);
	caps_.umr_ptr_rlkey = u(prm::hca_cap::umr_ptr_rlkey);
	caps_.umr_fence = u(prm::hca_cap::umr_fence);
	caps_.null_mkey = u(prm::hca_cap::null_mkey);
	caps_.mkey_by_index = u(prm::hca_cap::mkey_by_name);
	caps_.atomic = u(prm::hca_cap::atomic);
	caps_.log_max_atomic_size_qp = u(prm::hca_cap::log_max_atomic_size_qp);
	caps_.odp = u(prm::hca_cap::pg);
	/* Atomic capabilities exist only on devices that do atomics. */
	return caps_.atomic ? query_atomic_caps(opts) : 0;
}

/*
 * The atomic caps, and the byte order of 8-byte atomics: before INIT_HCA (SET_HCA_CAP is
 * refused after it), ask for host endianness when the device reports it can, as Linux
 * mlx5_core does (drivers/net/ethernet/mellanox/mlx5/core/main.c, handle_hca_cap_atomic).
 * Without it the device works on big-endian words, and Linux's mlx5_ib then offers no atomics
 * (drivers/infiniband/hw/mlx5/main.c, get_atomic_caps: IB_ATOMIC_NONE); nicmr's API refuses
 * them the same way (api_dp.cpp, post_atomic).
 */
int Device::query_atomic_caps(const DeviceOptions &opts)
{
	namespace ac = prm::atomic_cap;
	std::vector<uint8_t> cap(prm::query_hca_cap_out::capability_size);
	int rc = query_hca_cap(*cmdq_, prm::cap_type::atomic, prm::cap_mode::current, cap.data());
	if (rc != 0)
		return rc;
	const bool supported = prm::get(cap.data(), ac::supported_atomic_req_8B_endianness_mode_1);
	if (opts.want_atomic_host_endianness && supported &&
	    prm::get(cap.data(), ac::atomic_req_8B_endianness_mode) !=
		    prm::atomic_req_mode::host_endianness) {
		/* SET_HCA_CAP takes the whole structure: start from what is current. */
		prm::set(cap.data(), ac::atomic_req_8B_endianness_mode,
			 prm::atomic_req_mode::host_endianness);
		rc = set_hca_cap(*cmdq_, prm::cap_type::atomic, cap.data());
		if (rc != 0)
			return rc;
		rc = query_hca_cap(*cmdq_, prm::cap_type::atomic, prm::cap_mode::current,
				   cap.data());
		if (rc != 0)
			return rc;
	}
	caps_.atomic_operations =
		static_cast<uint32_t>(prm::get(cap.data(), ac::atomic_operations));
	caps_.atomic_size_qp = static_cast<uint32_t>(prm::get(cap.data(), ac::atomic_size_qp));
	caps_.atomic_host_endianness_supported = supported;
	caps_.atomic_host_endianness = prm::get(cap.data(), ac::atomic_req_8B_endianness_mode) ==
				       prm::atomic_req_mode::host_endianness;
	return 0;
}

size_t Device::pages_given() const
{
	std::lock_guard<std::mutex> lock(pages_mu_);
	return pages_.size();
}

int Device::satisfy_pages(uint16_t op_mod)
{
	int32_t n = 0;
	int rc = query_pages(*cmdq_, op_mod, &n);
	if (rc != 0)
		return rc;
	if (n < 0) {
		/* The device returns pages it no longer needs. */
		std::vector<uint64_t> back;
		rc = manage_pages_take(*cmdq_, static_cast<uint32_t>(-static_cast<int64_t>(n)),
				       &back);
		if (rc != 0)
			return rc;
		std::lock_guard<std::mutex> lock(pages_mu_);
		for (uint64_t iova : back) {
			auto it = pages_.find(iova);
			if (it != pages_.end()) {
				arena_->release(it->second);
				pages_.erase(it);
			}
		}
		return 0;
	}
	return n > 0 ? give_pages(static_cast<uint32_t>(n)) : 0;
}

int Device::give_pages(uint32_t count)
{
	std::vector<mem::DmaBlock> blocks;
	std::vector<uint64_t> iovas;
	while (count != 0) {
		uint32_t batch = std::min(count, kPagesPerCommand);
		blocks.clear();
		iovas.clear();
		for (uint32_t i = 0; i < batch; i++) {
			mem::DmaBlock b;
			int rc = arena_->alloc(prm::device_page_size, prm::device_page_size, &b);
			if (rc != 0) {
				NICMR_LOG(error, kLog, "%s: no DMA memory for %u device pages (%d)",
					  fn_.name().c_str(), count, rc);
				for (auto &x : blocks)
					arena_->release(x);
				return rc;
			}
			blocks.push_back(b);
			iovas.push_back(b.iova);
		}
		int rc = manage_pages_give(*cmdq_, iovas);
		if (rc != 0) {
			/* Refused, or the queue broke: a refused batch was not taken; a timed-out
			 * one is lost to a dead device anyway. */
			for (auto &x : blocks)
				arena_->release(x);
			return rc;
		}
		std::lock_guard<std::mutex> lock(pages_mu_);
		for (auto &b : blocks)
			pages_.emplace(b.iova, b);
		count -= batch;
	}
	return 0;
}

void Device::reclaim_pages()
{
	for (;;) {
		size_t held = pages_given();
		if (held == 0 || cmdq_->broken())
			return;
		std::vector<uint64_t> back;
		int rc = manage_pages_take(
			*cmdq_, static_cast<uint32_t>(std::min<size_t>(held, kPagesPerCommand)),
			&back);
		if (rc != 0 || back.empty()) {
			NICMR_LOG(warn, kLog, "%s: device kept %zu pages (%d)", fn_.name().c_str(),
				  held, rc);
			return;
		}
		size_t freed = 0;
		std::lock_guard<std::mutex> lock(pages_mu_);
		for (uint64_t iova : back) {
			auto it = pages_.find(iova);
			if (it == pages_.end()) {
				NICMR_LOG(error, kLog, "%s: device returned unknown page 0x%llx",
					  fn_.name().c_str(),
					  static_cast<unsigned long long>(iova));
				continue;
			}
			arena_->release(it->second);
			pages_.erase(it);
			freed++;
		}
		/* A device answering with pages it was never given would keep us here. */
		if (freed == 0)
			return;
	}
}

void Device::teardown()
{
	if (cmdq_ && !cmdq_->broken()) {
		if (initialized_ &&
		    teardown_hca(*cmdq_, prm::teardown_hca_in::profile_graceful_close) != 0 &&
		    !cmdq_->broken())
			teardown_hca(*cmdq_, prm::teardown_hca_in::profile_force_close);
		reclaim_pages();
		if (enabled_ && !cmdq_->broken())
			disable_hca(*cmdq_);
	}
	initialized_ = false;
	enabled_ = false;
	/* No DMA from here on, even from a function that did not answer (DPDK's
	 * pci_vfio_unmap_resource_primary clears it too): its pages go back below. */
	fn_.set_bus_master(false);
	{
		/* A disabled (or dead) function no longer owns its pages. */
		std::lock_guard<std::mutex> lock(pages_mu_);
		if (!pages_.empty())
			NICMR_LOG(warn, kLog, "%s: freeing %zu pages the device did not return",
				  fn_.name().c_str(), pages_.size());
		for (auto &p : pages_)
			arena_->release(p.second);
		pages_.clear();
	}
	cmdq_.reset();
	own_arena_.reset();
	arena_ = nullptr;
}

int Device::create_mkey(const MkeyCreate &c, uint32_t *index)
{
	if (c.index != 0 && !caps_.mkey_by_index)
		return -EOPNOTSUPP;
	return mlx5::create_mkey(*cmdq_, c, index);
}

int Device::set_mkey_ext(uint32_t index, const MkeyExtState &st)
{
	uint64_t need = 0;
	if (st.flags & prm::mkey_ext::single_use)
		need |= prm::ext_cap::single_use;
	if (st.flags & (prm::mkey_ext::disabled | prm::mkey_ext::counter))
		need |= prm::ext_cap::rma_event;
	/* flags 0 (clearing) needs the commands at all. */
	if (!caps_.ext_present || caps_.ext_flags == 0 || (caps_.ext_flags & need) != need)
		return -EOPNOTSUPP;
	return mlx5::set_mkey_ext(*cmdq_, index, st);
}

int Device::query_mkey_ext(uint32_t index, MkeyExtState *st)
{
	if (!caps_.ext_present || caps_.ext_flags == 0)
		return -EOPNOTSUPP;
	return mlx5::query_mkey_ext(*cmdq_, index, st);
}

int PdHandle::alloc(Device &dev, PdHandle *out)
{
	if (out == nullptr)
		return -EINVAL;
	uint32_t pd = 0;
	int rc = dev.alloc_pd(&pd);
	if (rc != 0)
		return rc;
	out->reset();
	out->dev_ = &dev;
	out->pd_ = pd;
	return 0;
}

PdHandle &PdHandle::operator=(PdHandle &&o) noexcept
{
	if (this != &o) {
		reset();
		dev_ = o.dev_;
		pd_ = o.pd_;
		o.dev_ = nullptr;
	}
	return *this;
}

int PdHandle::reset() noexcept
{
	if (dev_ == nullptr)
		return 0;
	int rc = dev_->dealloc_pd(pd_);
	dev_ = nullptr;
	return rc;
}

int MkeyHandle::create(Device &dev, const MkeyCreate &c, MkeyHandle *out)
{
	if (out == nullptr)
		return -EINVAL;
	uint32_t index = 0;
	int rc = dev.create_mkey(c, &index);
	if (rc != 0)
		return rc;
	out->reset();
	out->dev_ = &dev;
	out->index_ = index;
	return 0;
}

MkeyHandle &MkeyHandle::operator=(MkeyHandle &&o) noexcept
{
	if (this != &o) {
		reset();
		dev_ = o.dev_;
		index_ = o.index_;
		o.dev_ = nullptr;
	}
	return *this;
}

int MkeyHandle::reset() noexcept
{
	if (dev_ == nullptr)
		return 0;
	int rc = dev_->destroy_mkey(index_);
	dev_ = nullptr;
	return rc;
}

} // namespace nicmr::mlx5
