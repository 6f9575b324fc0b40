/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Device bring-up and teardown, capabilities, page management.
 */
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include <unistd.h>

#include "mlx5_device.h"
#include "mlx5_dp_commands.h"
#include "mlx5_eq.h"
#include "mlx5_prm.h"
#include "mlx5_uar.h"
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
	if (opts.page_chunk < prm::device_page_size ||
	    opts.page_chunk % prm::device_page_size != 0 ||
	    opts.max_page_memory < opts.page_chunk || opts.async_eq_log_size < 1 ||
	    opts.async_eq_log_size > 16)
		return -EINVAL;
	std::unique_ptr<Device> dev(new (std::nothrow) Device(fn, space));
	if (!dev)
		return -ENOMEM;
	dev->page_chunk_ = opts.page_chunk;
	dev->max_page_memory_ = opts.max_page_memory;
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

Device::Device(bus::PciFunction &fn, mem::DmaSpace &space) : fn_(fn), space_(space)
{}

Device::~Device()
{
	teardown();
}

/* rdma-core mlx5_vfio.c wait_fw_init: poll every FW_INIT_WAIT_MS up to the timeout. */
int Device::wait_ready(std::chrono::milliseconds timeout)
{
	const auto deadline = std::chrono::steady_clock::now() + timeout;
	while (read_reg(fn_, prm::init_seg::initializing) != 0) {
		if (std::chrono::steady_clock::now() >= deadline) {
			NICMR_LOG(error, kLog,
				  "%s: still initializing %lld ms after the command queue address "
				  "was written",
				  fn_.name().c_str(), static_cast<long long>(timeout.count()));
			return -ETIMEDOUT;
		}
		/* Firmware boots in seconds: no point in spinning. */
		std::this_thread::sleep_for(kFwInitWait);
	}
	return 0;
}

int Device::bring_up(const DeviceOptions &opts)
{
	/* rdma-core's mlx5_vfio_init_cmd_interface: the revision, then the queue and its address,
	 * all before waiting for initializing to clear (firmware leaves it set until it knows
	 * where the queue is; mlx5_vfio_setup_function waits only then). */
	auto cmdif = read_reg(fn_, prm::init_seg::cmdif_rev);
	if (cmdif != prm::init_seg::cmdif_rev_supported) {
		NICMR_LOG(error, kLog, "%s: command interface revision %u, nicmr speaks %u",
			  fn_.name().c_str(), cmdif, prm::init_seg::cmdif_rev_supported);
		return -EPROTONOSUPPORT;
	}
	int rc = CmdQueue::create(fn_, *arena_, opts.cmd_timeout, &cmdq_);
	if (rc != 0)
		return rc;
	/* While a command waits on slot 0: answer what firmware asks on the async EQ. A poller
	 * already at work (poll_events on another thread) answers for us. */
	cmdq_->set_wait_hook([this] {
		std::unique_lock<std::mutex> lk(eq_mu_, std::try_to_lock);
		if (lk.owns_lock())
			process_events();
	});
	rc = wait_ready(opts.init_timeout);
	if (rc != 0)
		return rc;
	caps_.fw_major = static_cast<uint16_t>(read_reg(fn_, prm::init_seg::fw_rev_major));
	caps_.fw_minor = static_cast<uint16_t>(read_reg(fn_, prm::init_seg::fw_rev_minor));
	caps_.fw_subminor = static_cast<uint16_t>(read_reg(fn_, prm::init_seg::fw_rev_subminor));
	rc = cmdq_->check_health();
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
	/* rdma-core mlx5_vfio_set_hca_ctrl, Linux main.c set_hca_ctrl: tell firmware the host's
	 * byte order before the capabilities. */
	rc = set_host_endianness(*cmdq_);
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
	rc = create_async_eq(opts);
	if (rc != 0)
		return rc;
	/* The reserved lkey UMR translation pointers carry: the device's, never a constant. */
	rc = query_special_contexts(*cmdq_, &caps_.resd_lkey);
	if (rc != 0)
		return rc;

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
	/* The completion EQ, right after INIT_HCA, where rdma-core's VFIO provider creates its
	 * one EQ (mlx5_vfio.c, mlx5_vfio_alloc_context: create_async_eqs after
	 * mlx5_vfio_setup_function). */
	{
		uint32_t eqn = 0;
		rc = comp_eqn(&eqn);
		if (rc != 0)
			return rc;
	}
	NICMR_LOG(info, kLog,
		  "%s: up, fw %u.%u.%u, log_max_mkey %u, mkey_by_index %d, atomic %d (%s), "
		  "%zu pages given, async EQ %u",
		  fn_.name().c_str(), caps_.fw_major, caps_.fw_minor, caps_.fw_subminor,
		  caps_.log_max_mkey, caps_.mkey_by_index, caps_.atomic,
		  caps_.atomic_host_endianness ? "host endian" : "big-endian", pages_given(),
		  async_eqn());
	return 0;
}

/*
 * rdma-core mlx5_vfio.c create_async_eqs: a UAR of its own and one EQ for what firmware tells
 * the driver, created right after INIT_HCA. nicmr polls command completion by ownership, so
 * the EQ takes PAGE_REQUEST only. Firmware posts its first page request as soon as the EQ
 * exists; it is answered here, before bring-up returns.
 */
int Device::create_async_eq(const DeviceOptions &opts)
{
	int rc = Uar::alloc(*this, &eq_uar_);
	if (rc != 0)
		return rc;
	EqParams p;
	p.log_size = opts.async_eq_log_size;
	p.event_bitmask = prm::event_bit(prm::event_type::page_request);
	std::unique_ptr<Eq> eq;
	rc = Eq::create(*this, *eq_uar_, p, &eq);
	if (rc != 0)
		return rc;
	{
		std::lock_guard<std::mutex> lk(eq_mu_);
		async_eq_ = std::move(eq);
	}
	rc = poll_events();
	return rc < 0 ? rc : 0;
}

uint32_t Device::async_eqn() const noexcept
{
	return async_eq_ ? async_eq_->eqn() : 0;
}

int Device::poll_events()
{
	if (!cmdq_)
		return -ENODEV;
	if (int rc = cmdq_->check_health(); rc != 0)
		return rc;
	std::lock_guard<std::mutex> lk(eq_mu_);
	return process_events();
}

int Device::process_events()
{
	if (!async_eq_)
		return 0;
	int handled = 0, first_error = 0;
	Event ev[16];
	for (;;) {
		const int n = async_eq_->poll(ev, 16);
		if (n == 0)
			break;
		for (int i = 0; i < n; i++) {
			if (ev[i].type != prm::event_type::page_request)
				continue; /* the EQ takes nothing else */
			/* Linux pagealloc.c req_pages_handler: give for a positive count, reclaim
			 * for a negative one; the function_id is the event's. */
			const int32_t np = ev[i].num_pages;
			int rc = np > 0	  ? give_pages(ev[i].function_id, static_cast<uint32_t>(np),
						       true)
				 : np < 0 ? take_pages(ev[i].function_id,
						       static_cast<uint32_t>(-int64_t{np}))
					  : 0;
			if (rc != 0 && first_error == 0)
				first_error = rc;
		}
		handled += n;
	}
	return first_error != 0 ? first_error : handled;
}

/*
 * The general caps, current then maximum (rdma-core mlx5_vfio_get_caps), and SET_HCA_CAP as
 * rdma-core's handle_hca_cap and Linux main.c handle_hca_cap send it, always: the current caps
 * with cmdif_checksum 0 (no signatures on command entries), log_uar_page_sz for the system page
 * and mkey_by_name when wanted and offered; then the caps in force are read back.
 */
int Device::query_caps(const DeviceOptions &opts)
{
	std::vector<uint8_t> max_cap(prm::query_hca_cap_out::capability_size);
	std::vector<uint8_t> cur(prm::query_hca_cap_out::capability_size);
	int rc = query_hca_cap(*cmdq_, prm::cap_type::general, prm::cap_mode::current, cur.data());
	if (rc != 0)
		return rc;
	rc = query_hca_cap(*cmdq_, prm::cap_type::general, prm::cap_mode::max, max_cap.data());
	if (rc != 0)
		return rc;
	/* SET_HCA_CAP takes the whole structure: start from what is current. */
	prm::set(cur.data(), prm::hca_cap::cmdif_checksum, 0);
	const long page = sysconf(_SC_PAGESIZE);
	const uint32_t sys_page_shift =
		page > 0 ? static_cast<uint32_t>(__builtin_ctzl(static_cast<unsigned long>(page)))
			 : 12;
	prm::set(cur.data(), prm::hca_cap_setup::log_uar_page_sz,
		 sys_page_shift > 12 ? sys_page_shift - 12 : 0);
	if (opts.want_mkey_by_index && prm::get(max_cap.data(), prm::hca_cap::mkey_by_name) != 0)
		prm::set(cur.data(), prm::hca_cap::mkey_by_name, 1);
	rc = set_hca_cap(*cmdq_, prm::cap_type::general, cur.data());
	if (rc != 0)
		return rc;
	rc = query_hca_cap(*cmdq_, prm::cap_type::general, prm::cap_mode::current, cur.data());
	if (rc != 0)
		return rc;
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
	caps_.log_max_msg = u(prm::hca_cap::log_max_msg);
	caps_.log_max_srq_sz = u(prm::hca_cap::log_max_srq_sz);
	caps_.roce = u(prm::hca_cap::roce);
	/* Atomic capabilities exist only on devices that do atomics, RoCE ones on RoCE ports. */
	rc = caps_.atomic ? query_atomic_caps(opts) : 0;
	if (rc == 0 && caps_.roce)
		rc = query_roce_caps();
	return rc;
}

/*
 * The RoCE caps, before INIT_HCA, as rdma-core's VFIO provider (mlx5_vfio.c,
 * handle_hca_cap_roce) and Linux mlx5_core (main.c, handle_hca_cap_roce) do: current and
 * maximum, then SET_HCA_CAP(roce) with sw_r_roce_src_udp_port when the maximum offers it and it
 * is off (the driver then chooses the UDP source port of its RoCEv2 packets, udp_sport).
 */
int Device::query_roce_caps()
{
	namespace rc_ = prm::roce_cap;
	std::vector<uint8_t> max_cap(prm::query_hca_cap_out::capability_size);
	std::vector<uint8_t> cur(prm::query_hca_cap_out::capability_size);
	int rc = query_hca_cap(*cmdq_, prm::cap_type::roce, prm::cap_mode::current, cur.data());
	if (rc == 0)
		rc = query_hca_cap(*cmdq_, prm::cap_type::roce, prm::cap_mode::max, max_cap.data());
	if (rc != 0)
		return rc;
	if (prm::get(cur.data(), rc_::sw_r_roce_src_udp_port) == 0 &&
	    prm::get(max_cap.data(), rc_::sw_r_roce_src_udp_port) != 0) {
		/* SET_HCA_CAP takes the whole structure: start from what is current. */
		prm::set(cur.data(), rc_::sw_r_roce_src_udp_port, 1);
		rc = set_hca_cap(*cmdq_, prm::cap_type::roce, cur.data());
		if (rc == 0)
			rc = query_hca_cap(*cmdq_, prm::cap_type::roce, prm::cap_mode::current,
					   cur.data());
		if (rc != 0)
			return rc;
	}
	const uint8_t *c = cur.data();
	caps_.roce_fl_when_enabled = prm::get(c, rc_::fl_rc_qp_when_roce_enabled) != 0;
	caps_.roce_fl_when_disabled = prm::get(c, rc_::fl_rc_qp_when_roce_disabled) != 0;
	/* RoCE counts as enabled on a port with the cap (Caps::roce): rdma-core's dr_send.c
	 * (dr_send_allow_fl) picks the enabled or disabled bit by the port's state. */
	caps_.roce_force_loopback = caps_.roce_fl_when_enabled;
	caps_.roce_sw_src_udp_port = prm::get(c, rc_::sw_r_roce_src_udp_port) != 0;
	caps_.roce_qp_ts_format = static_cast<uint32_t>(prm::get(c, rc_::qp_ts_format));
	caps_.roce_address_table_size =
		static_cast<uint32_t>(prm::get(c, rc_::roce_address_table_size));
	return 0;
}

int Device::comp_eqn(uint32_t *eqn)
{
	std::lock_guard<std::mutex> lock(comp_mu_);
	if (!comp_eq_) {
		std::unique_ptr<Uar> uar;
		std::unique_ptr<Eq> eq;
		EqParams p;
		p.event_bitmask = 0; /* completions only: no asynchronous event lands here */
		p.interrupts = true;
		p.vector = kCompVector;
		int rc = Uar::alloc(*this, &uar);
		if (rc == 0) {
			rc = Eq::create(*this, *uar, p, &eq);
			if (rc == -ENOTSUP) {
				/* A bus without MSI-X: events can still be read, never waited for.
				 */
				p.interrupts = false;
				p.vector = 0;
				rc = Eq::create(*this, *uar, p, &eq);
			}
		}
		if (rc != 0) {
			NICMR_LOG(error, kLog, "%s: cannot create the completion EQ (%d)",
				  fn_.name().c_str(), rc);
			return rc;
		}
		comp_uar_ = std::move(uar);
		comp_eq_ = std::move(eq);
	}
	*eqn = comp_eq_->eqn();
	return 0;
}

int Device::enable_page_faults()
{
	if (!caps_.odp)
		return -EOPNOTSUPP;
	std::lock_guard<std::mutex> lock(pf_mu_);
	if (pf_eq_)
		return 0;
	std::unique_ptr<Uar> uar;
	std::unique_ptr<Eq> eq;
	EqParams p;
	p.event_bitmask = prm::event_bit(prm::event_type::page_fault);
	int rc = Uar::alloc(*this, &uar);
	if (rc == 0)
		rc = Eq::create(*this, *uar, p, &eq);
	if (rc != 0) {
		NICMR_LOG(error, kLog, "%s: cannot create the page-fault EQ (%d)",
			  fn_.name().c_str(), rc);
		return rc;
	}
	pf_uar_ = std::move(uar);
	pf_eq_ = std::move(eq);
	/* Release: the EQ's ring and fields before a poller that sees the pointer. */
	pf_eq_ptr_.store(pf_eq_.get(), std::memory_order_release);
	return 0;
}

bool Device::eq_pending(const Eq &eq) noexcept
{
	return eq.pending();
}

int Device::page_faults(Event *out, int max)
{
	if (out == nullptr || max < 1)
		return -EINVAL;
	std::lock_guard<std::mutex> lock(pf_mu_);
	if (!pf_eq_)
		return 0;
	int got = 0;
	while (got < max) {
		const int n = pf_eq_->poll(out + got, max - got);
		if (n <= 0)
			break;
		/* The EQ takes nothing else; keep page faults only, in order. */
		const int room = max - got;
		int k = 0;
		for (int i = 0; i < n; i++)
			if (out[got + i].type == prm::event_type::page_fault)
				out[got + k++] = out[got + i];
		got += k;
		if (n < room)
			break;
	}
	return got;
}

int Device::page_fault_resume(const Event &ev, bool error)
{
	/* Linux odp.c mlx5_ib_page_fault_resume: the WQ number of a WQE fault, the token in
	 * its place for an RDMA fault. */
	const bool wqe = ev.sub_type == prm::eqe_page_fault::subtype_wqe;
	return mlx5::page_fault_resume(*cmdq_, ev.pf.token, error, ev.pf.flags,
				       wqe ? ev.pf.wq_number : ev.pf.token);
}

int Device::comp_event_fd()
{
	uint32_t eqn = 0;
	if (int rc = comp_eqn(&eqn); rc != 0)
		return rc;
	std::lock_guard<std::mutex> lock(comp_mu_);
	const int fd = comp_eq_->event_fd();
	return fd >= 0 ? fd : -ENOTSUP;
}

int Device::comp_events(uint32_t *cqns, int max)
{
	if (max < 0 || (max > 0 && cqns == nullptr))
		return -EINVAL;
	uint32_t eqn = 0;
	if (int rc = comp_eqn(&eqn); rc != 0)
		return rc;
	std::lock_guard<std::mutex> lock(comp_mu_);
	Eq &eq = *comp_eq_;
	/* The interrupt's count first: an interrupt after this read belongs to EQEs the poll
	 * below may or may not see, and the re-arm below interrupts again for any it left. */
	if (eq.event_fd() >= 0) {
		uint64_t n;
		while (read(eq.event_fd(), &n, sizeof(n)) == ssize_t{sizeof(n)}) {
		}
	}
	int got = 0;
	Event ev[16];
	while (got < max) {
		const int n = eq.poll(ev, std::min(16, max - got));
		if (n <= 0)
			break;
		for (int i = 0; i < n; i++)
			if (ev[i].type == prm::eqe_comp::event_type)
				cqns[got++] = ev[i].cqn;
	}
	if (eq.event_fd() >= 0)
		eq.arm();
	return got;
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

size_t Device::page_memory() const
{
	std::lock_guard<std::mutex> lock(pages_mu_);
	return page_arenas_.size() * page_chunk_;
}

int Device::satisfy_pages(uint16_t op_mod)
{
	int32_t n = 0;
	uint16_t fid = 0;
	int rc = query_pages(*cmdq_, op_mod, &n, &fid);
	if (rc != 0)
		return rc;
	page_function_id_ = fid;
	if (n < 0)
		return take_pages(fid, static_cast<uint32_t>(-static_cast<int64_t>(n)));
	return n > 0 ? give_pages(fid, static_cast<uint32_t>(n), false) : 0;
}

/* Caller holds pages_mu_. rdma-core mlx5_vfio_alloc_page: a free page of a block, else a new
 * block (MLX5_VFIO_BLOCK_SIZE); here with a cap. */
int Device::alloc_page(mem::DmaBlock *b, mem::DmaArena **from)
{
	for (auto &a : page_arenas_) {
		if (a->capacity() - a->bytes_in_use() < prm::device_page_size)
			continue;
		if (a->alloc(prm::device_page_size, prm::device_page_size, b) == 0) {
			*from = a.get();
			return 0;
		}
	}
	if ((page_arenas_.size() + 1) * page_chunk_ > max_page_memory_) {
		NICMR_LOG(error, kLog,
			  "%s: firmware wants more pages than max_page_memory (%zu MiB, %zu pages "
			  "given)",
			  fn_.name().c_str(), max_page_memory_ >> 20, pages_.size());
		return -ENOMEM;
	}
	mem::PoolParams p{.size = page_chunk_,
			  .page_size = mem::kPage2M,
			  .numa_node = -1,
			  .allow_fallback = true,
			  .backend = mem::PoolBackend::memfd,
			  .name = "mlx5-fw-pages"};
	std::unique_ptr<mem::DmaArena> a;
	int rc = mem::DmaArena::create(space_, p, &a);
	if (rc != 0) {
		NICMR_LOG(error, kLog, "%s: cannot add %zu KiB of firmware page memory (%d)",
			  fn_.name().c_str(), page_chunk_ >> 10, rc);
		return rc;
	}
	rc = a->alloc(prm::device_page_size, prm::device_page_size, b);
	if (rc != 0)
		return rc;
	*from = a.get();
	try {
		page_arenas_.push_back(std::move(a));
	} catch (const std::bad_alloc &) {
		(*from)->release(*b);
		return -ENOMEM;
	}
	return 0;
}

int Device::give_pages(uint16_t function_id, uint32_t count, bool from_event)
{
	std::vector<GivenPage> batch;
	std::vector<uint64_t> iovas;
	while (count != 0) {
		const uint32_t n = std::min(count, kPagesPerCommand);
		batch.clear();
		iovas.clear();
		int rc = 0;
		{
			std::lock_guard<std::mutex> lock(pages_mu_);
			for (uint32_t i = 0; i < n && rc == 0; i++) {
				GivenPage g;
				rc = alloc_page(&g.block, &g.arena);
				if (rc == 0) {
					batch.push_back(g);
					iovas.push_back(g.block.iova);
				}
			}
			if (rc != 0)
				for (auto &g : batch)
					g.arena->release(g.block);
		}
		if (rc != 0) {
			NICMR_LOG(error, kLog, "%s: no memory for %u firmware pages (%d)",
				  fn_.name().c_str(), count, rc);
			/* Linux pagealloc.c give_pages: on failure tell firmware it will not get
			 * them, so that what waits for them fails instead of waiting forever. */
			if (from_event)
				manage_pages_cant_give(cmdq_->page_slot(), function_id);
			return rc;
		}
		rc = manage_pages_give(cmdq_->page_slot(), iovas, function_id);
		if (rc != 0) {
			/* Refused, or the queue broke: a refused batch was not taken; a timed-out
			 * one is lost to a dead device anyway. */
			std::lock_guard<std::mutex> lock(pages_mu_);
			for (auto &g : batch)
				g.arena->release(g.block);
			return rc;
		}
		std::lock_guard<std::mutex> lock(pages_mu_);
		for (auto &g : batch)
			pages_.emplace(g.block.iova, g);
		count -= n;
	}
	return 0;
}

size_t Device::release_returned_pages(const std::vector<uint64_t> &back)
{
	size_t freed = 0;
	std::lock_guard<std::mutex> lock(pages_mu_);
	for (uint64_t iova : back) {
		auto it = pages_.find(iova);
		if (it == pages_.end()) {
			NICMR_LOG(error, kLog, "%s: device returned unknown page 0x%llx",
				  fn_.name().c_str(), static_cast<unsigned long long>(iova));
			continue;
		}
		it->second.arena->release(it->second.block);
		pages_.erase(it);
		freed++;
	}
	return freed;
}

int Device::take_pages(uint16_t function_id, uint32_t count)
{
	while (count != 0) {
		std::vector<uint64_t> back;
		const uint32_t n = std::min(count, kPagesPerCommand);
		int rc = manage_pages_take(cmdq_->page_slot(), n, &back, function_id);
		if (rc != 0)
			return rc;
		release_returned_pages(back);
		/* Firmware returns at most what it offered; fewer means it has no more. */
		if (back.size() < n)
			return 0;
		count -= n;
	}
	return 0;
}

/* Linux pagealloc.c mlx5_reclaim_startup_pages: MANAGE_PAGES take until every page is back,
 * giving up when firmware returns none. */
void Device::reclaim_pages()
{
	for (;;) {
		size_t held = pages_given();
		if (held == 0 || cmdq_->broken())
			return;
		std::vector<uint64_t> back;
		int rc = manage_pages_take(
			cmdq_->page_slot(),
			static_cast<uint32_t>(std::min<size_t>(held, kPagesPerCommand)), &back,
			page_function_id_);
		if (rc != 0 || back.empty()) {
			NICMR_LOG(warn, kLog, "%s: device kept %zu pages (%d)", fn_.name().c_str(),
				  held, rc);
			return;
		}
		/* A device answering with pages it was never given would keep us here. */
		if (release_returned_pages(back) == 0)
			return;
	}
}

void Device::teardown()
{
	/* The completion EQ and its UAR before TEARDOWN_HCA (every CQ on it is gone: CQs
	 * hold their device). */
	comp_eq_.reset();
	comp_uar_.reset();
	pf_eq_ptr_.store(nullptr, std::memory_order_relaxed);
	pf_eq_.reset();
	pf_uar_.reset();
	{
		/* rdma-core mlx5_vfio_free_context: the async EQ and its UAR go first. */
		std::lock_guard<std::mutex> lk(eq_mu_);
		async_eq_.reset();
	}
	eq_uar_.reset();
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
			p.second.arena->release(p.second.block);
		pages_.clear();
		page_arenas_.clear();
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
