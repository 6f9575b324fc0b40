/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Power-on, boot and the command queue of the mlx5 device model: how a command gets from the
 * driver's memory to the decoder (emu_mlx5_cmd.cpp) and back.
 *
 *   entry (64 B, slot << log_stride) --- input_mailbox_ptr --> [data 512 | next | block_num |
 * token] inline input 16 B + mailbox data ... = input (in_len bytes)  --> execute() output -->
 * inline output 16 B + output mailboxes' data; then status, ownership = 0
 *
 * Protocol faults (wrong type, token or block number, misaligned mailbox, a length beyond
 * kMaxCmdLen) complete the entry with a delivery status and run nothing. A mailbox that cannot
 * be reached through the IOMMU completes the command with INTERNAL_ERR / dma_fault.
 */
#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <new>
#include <system_error>

#include "emu_mlx5.h"
#include "emu_mlx5_translate.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace nicmr::emu {

namespace prm = nicmr::mlx5::prm;

namespace {

/* Doorbells of one UAR page: the SQ doorbell (+0x800), the CQ arm doorbell (+0x20) and the EQ
 * update-and-arm doorbell (+0x40). */
constexpr uint32_t kDoorbellsPerUar = 3;

/* Register helpers: a field of the init segment read or written in its BAR word. */
uint32_t reg_get(const EmuFunction &fn, prm::Field f)
{
	uint32_t raw = fn.reg_read32(prm::dword_byte_offset(f));
	return static_cast<uint32_t>(prm::get(&raw, prm::in_dword(f)));
}

void reg_set(EmuFunction &fn, prm::Field f, uint64_t v)
{
	const size_t off = prm::dword_byte_offset(f);
	uint32_t raw = fn.reg_read32(off);
	prm::set(&raw, prm::in_dword(f), v);
	fn.reg_write32(off, raw);
}

/* The raw (as stored) mask of the bits of f inside its BAR word. */
uint32_t raw_mask(prm::Field f)
{
	uint32_t raw = 0;
	prm::set(&raw, prm::in_dword(f), ~uint64_t{0});
	return raw;
}

size_t blocks_for(size_t len)
{
	const size_t in_entry = prm::cmdq_entry::inline_size;
	return len <= in_entry
		       ? 0
		       : (len - in_entry + prm::mailbox::data_size - 1) / prm::mailbox::data_size;
}

} // namespace

namespace {

DpConfig dp_config(const EmuConfig &cfg)
{
	DpConfig d;
	d.uars = cfg.uars;
	d.log_max_qp = cfg.log_max_qp;
	d.log_max_cq = cfg.log_max_cq;
	d.log_max_eq = cfg.log_max_eq;
	d.log_max_qp_sz = cfg.log_max_qp_sz;
	d.log_max_cq_sz = cfg.log_max_cq_sz;
	d.log_max_eq_sz = cfg.log_max_eq_sz;
	d.ports = cfg.ports;
	d.log_max_msg = 30;
	d.resd_lkey = cfg.resd_lkey;
	d.odp = cfg.odp;
	d.fail_umr = cfg.fail_umr;
	d.umr_modify_entity_size_disabled = cfg.umr_modify_entity_size_disabled;
	d.umr_modify_atomic_disabled = cfg.umr_modify_atomic_disabled;
	return d;
}

} // namespace

EmuMlx5Device::EmuMlx5Device(EmuFunction &fn, const EmuConfig &cfg)
    : fn_(fn), cfg_(cfg),
      trace_(cfg.trace_capacity != 0 ? std::make_unique<CmdTrace>(cfg.trace_capacity) : nullptr),
      mkeys_(cfg.log_max_mkey),
      dp_(std::make_unique<EmuDataPath>(fn.iommu(), mkeys_, dp_config(cfg)))
{
	dp_->set_trace(trace_.get());
}

int EmuMlx5Device::create(EmuFunction &fn, const EmuConfig &cfg,
			  std::unique_ptr<EmuMlx5Device> *out)
{
	if (out == nullptr || cfg.log_max_mkey < 1 || cfg.log_max_mkey > 24 || cfg.log_max_pd < 1 ||
	    cfg.log_max_pd > 24 || cfg.ports < 1 || cfg.ports > 2 ||
	    cfg.log_max_klm_list_size < 1 || cfg.log_max_klm_list_size > 30 ||
	    fn.bar0_size() < prm::init_seg::size ||
	    uint64_t{cfg.boot_pages} + cfg.init_pages + cfg.regular_pages > cfg.max_pages ||
	    2 + kDoorbellsPerUar * cfg.uars > EmuFunction::kMaxDoorbells ||
	    cfg.cmdif_checksum > 3 ||
	    (uint64_t{cfg.uars} + 1) * prm::uar::page_size > fn.bar0_size() || cfg.log_max_qp < 2 ||
	    cfg.log_max_qp > 24 || cfg.log_max_cq < 1 || cfg.log_max_cq > 24 ||
	    cfg.log_max_eq < 1 || cfg.log_max_eq > 8 || cfg.log_max_qp_sz < 1 ||
	    cfg.log_max_qp_sz > 16 || cfg.log_max_cq_sz < 1 || cfg.log_max_cq_sz > 22 ||
	    cfg.log_max_eq_sz < 1 || cfg.log_max_eq_sz > 22 ||
	    cfg.trace_capacity > kMaxTraceCapacity ||
	    (cfg.ext_flags & ~(prm::ext_cap::single_use | prm::ext_cap::rma_event)) != 0 ||
	    cfg.roce_qp_ts_format > prm::ts_format_cap::free_running_and_real_time ||
	    cfg.roce_address_table_size > 0xffff)
		return -EINVAL;
	if (fn.running())
		return -EBUSY;
	/* A second model, and room for cmd_dbell and every UAR doorbell: checked before the
	 * first doorbell is added, so that a refusal leaves fn as it was. */
	if (fn.has_doorbell(prm::dword_byte_offset(prm::init_seg::cmd_dbell)))
		return -EEXIST;
	if (fn.doorbell_count() + 2 + kDoorbellsPerUar * cfg.uars > EmuFunction::kMaxDoorbells)
		return -ENOSPC;
	for (uint32_t p = cfg.ports; p < cfg.wire.size(); p++)
		if (!cfg.wire[p].addr.empty())
			return -EINVAL; /* a wire for a port the device has not */
	std::unique_ptr<EmuMlx5Device> d(new EmuMlx5Device(fn, cfg));
	EmuMlx5Device *self = d.get();
	/* The UDP wire's sockets, before the function learns of the device: a port whose
	 * address cannot be bound refuses the device and leaves fn as it was. */
	std::vector<int> wire_fds;
	for (uint32_t p = 0; p < cfg.ports; p++) {
		if (cfg.wire[p].addr.empty())
			continue;
		auto w = std::make_unique<WirePort>();
		const int wrc = w->open(cfg.wire[p]);
		if (wrc < 0) {
			NICMR_LOG(error, "emu-mlx5", "%s: port %u: UDP wire on [%s]:%u: %d (%s)",
				  cfg.name.c_str(), p + 1, cfg.wire[p].addr.c_str(),
				  cfg.wire[p].udp_port, wrc, std::strerror(-wrc));
			return wrc;
		}
		wire_fds.push_back(w->rx_fd());
		d->dp_->set_wire_port(p + 1, std::move(w));
	}
	int rc = fn.add_doorbell(prm::dword_byte_offset(prm::init_seg::cmd_dbell),
				 DoorbellMerge::bitmask, [self](uint64_t v) { self->ring(v); });
	if (rc < 0)
		return rc;
	/* The low word of the queue address: firmware leaves initializing set until the driver
	 * wrote it (rdma-core's mlx5_vfio_init_cmd_interface writes it before wait_fw_init). */
	rc = fn.add_doorbell(prm::dword_byte_offset(prm::init_seg::cmdq_addr_l),
			     DoorbellMerge::latest, [self](uint64_t) { self->on_cmdq_address(); });
	if (rc < 0)
		return rc;
	/* The SQ doorbell of every UAR page. Inline delivery runs the QP the value names on
	 * the ringing thread; the poll thread sees only the latest value of each UAR, which may
	 * be another QP's, so it looks at every QP on the UAR. Write-only, as on the NIC: the
	 * write is delivered, BAR 0 does not keep it (QPs of different threads on one UAR then
	 * share no cache line there). */
	const bool by_value = fn.delivery() == DoorbellDelivery::inline_call;
	for (uint32_t i = 1; i <= cfg.uars && rc == 0; i++) {
		EmuDataPath *dp = d->dp_.get();
		rc = fn.add_doorbell(
			prm::uar::page_offset(i) + prm::uar::sq_doorbell_offset,
			DoorbellMerge::latest,
			[dp, i, by_value](uint64_t v) { dp->uar_doorbell(i, v, by_value); },
			DoorbellStore::deliver_only);
	}
	/* The CQ arm doorbell (+0x20, 64 bits: arm word and CQN) and the EQ's update-and-arm
	 * doorbell (+0x40) of every UAR page, after the SQ doorbells (the hot path's lookup
	 * meets those first). The EQ word is kept in BAR 0: write_eqe reads the consumer index
	 * back from it. The CQ doorbell is write-only, like the SQ's. */
	for (uint32_t i = 1; i <= cfg.uars && rc == 0; i++) {
		EmuDataPath *dp = d->dp_.get();
		rc = fn.add_doorbell(
			prm::uar::page_offset(i) + prm::cq_doorbell::offset, DoorbellMerge::latest,
			[dp, i, by_value](uint64_t v) { dp->cq_arm_doorbell(i, v, by_value); },
			DoorbellStore::deliver_only);
		if (rc == 0)
			rc = fn.add_doorbell(
				prm::uar::page_offset(i) + prm::eq_doorbell::arm_offset,
				DoorbellMerge::latest, [dp, i](uint64_t v) {
					dp->eq_arm_doorbell(i, static_cast<uint32_t>(v));
				});
	}
	if (rc < 0)
		return rc; /* only if the function already had a doorbell at a UAR offset */
	/* The wire's receive work runs on the device thread (emu_function.h, "Progress"). */
	if (!wire_fds.empty()) {
		EmuDataPath *dp = d->dp_.get();
		rc = fn.set_progress([dp] { return dp->poll_wire(); }, std::move(wire_fds));
		if (rc < 0)
			return rc;
	}
	d->publish_init_segment();
	EmuFunction *fnp = &fn;
	d->dp_->set_device_hooks([fnp](size_t off) { return fnp->reg_read32(off); },
				 [self](uint8_t synd) { self->raise_health_syndrome(synd, 0); });
	d->dp_->set_irq_hook([fnp](uint32_t vector) { fnp->raise_msix(vector); });
	/* Nothing below may fail: the doorbell now points at this device. */
	if (cfg.boot_delay.count() == 0) {
		d->finish_boot();
	} else {
		try {
			d->boot_thread_ = std::thread([self] {
				std::unique_lock lk(self->boot_lock_);
				if (self->boot_cv_.wait_for(lk, self->cfg_.boot_delay,
							    [self] { return self->boot_cancel_; }))
					return;
				lk.unlock();
				self->finish_boot();
			});
		} catch (const std::system_error &e) {
			NICMR_LOG(warn, "emu-mlx5", "%s: no boot timer thread (%s): booting now",
				  cfg.name.c_str(), e.what());
			d->finish_boot();
		}
	}
	*out = std::move(d);
	return 0;
}

EmuMlx5Device::~EmuMlx5Device()
{
	{
		std::lock_guard lk(boot_lock_);
		boot_cancel_ = true;
	}
	boot_cv_.notify_all();
	if (boot_thread_.joinable())
		boot_thread_.join();
}

void EmuMlx5Device::publish_init_segment()
{
	namespace is = prm::init_seg;
	reg_set(fn_, is::fw_rev_major, cfg_.fw_rev_major);
	reg_set(fn_, is::fw_rev_minor, cfg_.fw_rev_minor);
	reg_set(fn_, is::fw_rev_subminor, cfg_.fw_rev_subminor);
	reg_set(fn_, is::cmdif_rev, is::cmdif_rev_supported);
	/* Firmware's queue geometry: 32 entries of 64 bytes, as ConnectX reports it. */
	reg_set(fn_, is::log_cmdq_size, 5);
	reg_set(fn_, is::log_cmdq_stride, 6);
	reg_set(fn_, is::initializing, 1);

	/* What firmware owns, the driver cannot overwrite: the revision words, the queue
	 * geometry bits of cmdq_addr_l, the initializing word, the health counter. */
	fn_.set_read_only(prm::dword_byte_offset(is::fw_rev_minor), ~uint32_t{0});
	fn_.set_read_only(prm::dword_byte_offset(is::cmdif_rev), ~uint32_t{0});
	fn_.set_read_only(prm::dword_byte_offset(is::cmdq_addr_l),
			  raw_mask(is::log_cmdq_size) | raw_mask(is::log_cmdq_stride));
	fn_.set_read_only(prm::dword_byte_offset(is::initializing), ~uint32_t{0});
	fn_.set_read_only(prm::dword_byte_offset(is::health_syndrome), ~uint32_t{0});
	fn_.set_read_only(prm::dword_byte_offset(prm::health::rfr), ~uint32_t{0});
	fn_.set_read_only(prm::dword_byte_offset(is::health_counter), ~uint32_t{0});

	/* Capabilities: maxima from the config; "current" starts equal to them. */
	namespace hc = prm::hca_cap;
	uint8_t *g = caps_general_max_.data();
	prm::set(g, hc::log_max_mkey, cfg_.log_max_mkey);
	prm::set(g, hc::log_max_pd, cfg_.log_max_pd);
	prm::set(g, hc::num_ports, cfg_.ports);
	prm::set(g, hc::log_max_klm_list_size, cfg_.log_max_klm_list_size);
	prm::set(g, hc::mkey_by_name, cfg_.mkey_by_name ? 1 : 0);
	prm::set(g, hc::pg, cfg_.odp ? 1 : 0);
	prm::set(g, hc::log_max_mrw_sz, 64);
	prm::set(g, hc::max_indirection, Translator::kMaxIndirection);
	prm::set(g, hc::log_max_msg, 30);
	prm::set(g, hc::log_pg_sz, 12);
	prm::set(g, hc::umr_extended_translation_offset, 1);
	prm::set(g, hc::umr_ptr_rlkey, 0);
	prm::set(g, hc::umr_modify_entity_size_disabled, cfg_.umr_modify_entity_size_disabled);
	prm::set(g, hc::umr_modify_atomic_disabled, cfg_.umr_modify_atomic_disabled);
	prm::set(g, hc::umr_fence, 0);
	prm::set(g, hc::null_mkey, 0);
	prm::set(g, hc::atomic, 1);
	prm::set(g, hc::rc, 1);
	prm::set(g, hc::log_max_atomic_size_qp, 3);
	prm::set(g, hc::log_max_qp, cfg_.log_max_qp);
	prm::set(g, hc::log_max_qp_sz, cfg_.log_max_qp_sz);
	/* SRQs: as many and as deep as QPs (emu_mlx5_srq.cpp). */
	prm::set(g, hc::log_max_srq, cfg_.log_max_qp);
	prm::set(g, hc::log_max_srq_sz, cfg_.log_max_qp_sz);
	prm::set(g, hc::log_max_cq, cfg_.log_max_cq);
	prm::set(g, hc::log_max_cq_sz, cfg_.log_max_cq_sz);
	prm::set(g, hc::log_max_eq, cfg_.log_max_eq);
	prm::set(g, hc::log_max_eq_sz, cfg_.log_max_eq_sz);
	/* UAR pages of 4 KiB only (log_uar_page_sz 0, the maximum); checksums as configured. */
	prm::set(g, prm::hca_cap_setup::log_uar_page_sz, 0);
	prm::set(g, hc::cmdif_checksum, cfg_.cmdif_checksum);
	prm::set(g, hc::roce, cfg_.roce ? 1 : 0);
	caps_general_cur_ = caps_general_max_;

	/* RoCE caps: sw_r_roce_src_udp_port is off at power-on and settable (rdma-core's and
	 * Linux's handle_hca_cap_roce turn it on). RoCEv2 on UDP port 4791. */
	namespace rc = prm::roce_cap;
	uint8_t *r = caps_roce_max_.data();
	prm::set(r, rc::sw_r_roce_src_udp_port, 1);
	prm::set(r, rc::fl_rc_qp_when_roce_enabled, cfg_.roce_fl_when_enabled ? 1 : 0);
	prm::set(r, rc::fl_rc_qp_when_roce_disabled, cfg_.roce_fl_when_disabled ? 1 : 0);
	prm::set(r, rc::qp_ts_format, cfg_.roce_qp_ts_format);
	prm::set(r, rc::roce_version, 2);
	prm::set(r, rc::r_roce_dest_udp_port, 4791);
	prm::set(r, rc::r_roce_min_src_udp_port, 0xc000);
	prm::set(r, rc::r_roce_max_src_udp_port, 0xffff);
	prm::set(r, rc::roce_address_table_size, cfg_.roce_address_table_size);
	caps_roce_cur_ = caps_roce_max_;
	prm::set(caps_roce_cur_.data(), rc::sw_r_roce_src_udp_port, 0);

	namespace ac = prm::atomic_cap;
	uint8_t *a = caps_atomic_max_.data();
	prm::set(a, ac::atomic_operations, prm::atomic_ops::cmp_swap | prm::atomic_ops::fetch_add);
	prm::set(a, ac::atomic_size_qp, 1u << 3); /* 8-byte operands */
	prm::set(a, ac::supported_atomic_req_8B_endianness_mode_1,
		 cfg_.atomic_host_endianness ? 1 : 0);
	/* Power-on mode: big-endian, as on the wire; the driver asks for host endianness. */
	prm::set(a, ac::atomic_req_8B_endianness_mode, prm::atomic_req_mode::big_endian);
	caps_atomic_cur_ = caps_atomic_max_;
}

void EmuMlx5Device::finish_boot()
{
	std::lock_guard lk(boot_lock_);
	boot_elapsed_ = true;
	if (addr_written_)
		clear_initializing();
}

void EmuMlx5Device::on_cmdq_address()
{
	std::lock_guard lk(boot_lock_);
	addr_written_ = true;
	if (boot_elapsed_ && !booted())
		clear_initializing();
}

/* Caller holds boot_lock_. */
void EmuMlx5Device::clear_initializing()
{
	booted_.store(true, std::memory_order_release);
	/* Release, before the store that clears initializing (BAR words are relaxed atomics): a
	 * driver that reads initializing == 0 and then fences with acquire sees the init segment
	 * the device published before it. After the store it would order nothing. */
	std::atomic_thread_fence(std::memory_order_release);
	reg_set(fn_, prm::init_seg::initializing, 0);
	NICMR_LOG(info, "emu-mlx5", "%s: booted, fw %u.%u.%u", cfg_.name.c_str(), cfg_.fw_rev_major,
		  cfg_.fw_rev_minor, cfg_.fw_rev_subminor);
}

void EmuMlx5Device::raise_health_syndrome(uint8_t synd, uint16_t ext_synd)
{
	namespace h = prm::health;
	reg_set(fn_, h::ext_synd, ext_synd);
	reg_set(fn_, h::synd, synd);
	reg_set(fn_, h::rfr, 1);
	fatal_.store(true, std::memory_order_release);
	NICMR_LOG(error, "emu-mlx5", "%s: fatal health syndrome 0x%x (ext 0x%x): commands stop",
		  cfg_.name.c_str(), synd, ext_synd);
}

int EmuMlx5Device::host_endianness() const
{
	std::lock_guard lk(lock_);
	return host_endianness_;
}

HcaState EmuMlx5Device::hca_state() const
{
	std::lock_guard lk(lock_);
	return state_;
}

uint16_t EmuMlx5Device::issi() const
{
	std::lock_guard lk(lock_);
	return issi_;
}

size_t EmuMlx5Device::pages_given() const
{
	std::lock_guard lk(lock_);
	return pages_.size();
}

uint32_t EmuMlx5Device::pds_allocated() const
{
	std::lock_guard lk(lock_);
	return static_cast<uint32_t>(pds_.size());
}

EmuStats EmuMlx5Device::stats() const
{
	std::lock_guard lk(lock_);
	return stats_;
}

void EmuMlx5Device::count(const CmdResult &r)
{
	stats_.commands++;
	if (r.status != prm::status::ok)
		stats_.commands_failed++;
}

CmdResult EmuMlx5Device::execute(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len)
{
	std::lock_guard lk(lock_);
	CmdResult r = execute_locked(in, in_len, out, out_len);
	count(r);
	return r;
}

void EmuMlx5Device::ring(uint64_t raw)
{
	uint32_t raw32 = static_cast<uint32_t>(raw);
	uint32_t slots =
		static_cast<uint32_t>(prm::get(&raw32, prm::in_dword(prm::init_seg::cmd_dbell)));
	if (!booted()) {
		/* A ConnectX ignores the command interface while it boots: the driver must wait
		 * for initializing to clear, or time out. */
		std::lock_guard lk(lock_);
		stats_.dropped += static_cast<uint64_t>(__builtin_popcount(slots));
		NICMR_LOG(warn, "emu-mlx5", "%s: doorbell 0x%x while booting: ignored",
			  cfg_.name.c_str(), slots);
		return;
	}
	if (fatal_.load(std::memory_order_acquire)) {
		/* Firmware in a fatal state completes nothing: the driver finds out from the
		 * health buffer (or times out). */
		std::lock_guard lk(lock_);
		stats_.dropped += static_cast<uint64_t>(__builtin_popcount(slots));
		return;
	}
	const uint64_t h = reg_get(fn_, prm::init_seg::cmdq_addr_h);
	const uint64_t l = reg_get(fn_, prm::init_seg::cmdq_addr_l);
	const uint64_t cmdq = prm::init_seg::cmdq_addr(h, l);
	const uint32_t log_sz = reg_get(fn_, prm::init_seg::log_cmdq_size);
	const uint32_t log_stride = reg_get(fn_, prm::init_seg::log_cmdq_stride);
	const uint32_t nslots = log_sz >= 5 ? 32 : 1u << log_sz;
	while (slots != 0) {
		const uint32_t slot = static_cast<uint32_t>(__builtin_ctz(slots));
		slots &= slots - 1;
		std::lock_guard lk(lock_);
		if (slot >= nslots) {
			stats_.dropped++;
			NICMR_LOG(warn, "emu-mlx5", "%s: doorbell for slot %u beyond %u slots",
				  cfg_.name.c_str(), slot, nslots);
			continue;
		}
		run_slot(cmdq, slot, log_stride);
		if (pages_changed_)
			resume_stalled();
	}
}

void EmuMlx5Device::run_slot(uint64_t cmdq, uint32_t slot, uint32_t log_stride)
{
	namespace ce = prm::cmdq_entry;
	namespace mb = prm::mailbox;
	EmuIommu &mmu = fn_.iommu();
	Fetched f;
	f.slot = slot;
	f.entry_iova = cmdq + prm::cmdq_entry::slot_offset(slot, log_stride);
	uint8_t *e = f.e.data();
	if (mmu.dma_read(f.entry_iova, e, ce::size) < 0) {
		stats_.dropped++;
		return;
	}
	if (prm::get(e, ce::ownership) != ce::owner_hw) {
		/* Not handed to the device: a real device ignores it too. */
		stats_.dropped++;
		return;
	}
	const uint64_t token = prm::get(e, ce::token);
	f.in_len = prm::get(e, ce::input_length);
	f.out_len = prm::get(e, ce::output_length);
	const uint64_t in_len = f.in_len;
	const uint64_t out_len = f.out_len;
	uint32_t delivery = prm::delivery_status::ok;
	bool dma_failed = false;

	if (prm::get(e, ce::type) != ce::type_pcie)
		delivery = prm::delivery_status::bad_command_type;
	else if (in_len > kMaxCmdLen)
		delivery = prm::delivery_status::input_length_err;
	else if (out_len > kMaxCmdLen)
		delivery = prm::delivery_status::output_length_err;
	else if (state_ == HcaState::initialized &&
		 prm::get(caps_general_cur_.data(), prm::hca_cap::cmdif_checksum) != 0 &&
		 prm::get(e, ce::signature) == 0)
		/* Checksums in force (cmd_hca_cap.cmdif_checksum, taken at INIT_HCA): an entry
		 * without a signature is refused. The model checks presence, not the XOR. */
		delivery = prm::delivery_status::signature_err;

	/* Gather the input: inline bytes, then one mailbox per 512 bytes, the chain cut at the
	 * number of blocks the length needs (a cycle or an endless chain cannot hold the device).
	 */
	if (delivery == prm::delivery_status::ok) {
		f.in.assign(std::max<size_t>(in_len, ce::inline_size), 0);
		std::memcpy(f.in.data(), e + ce::inline_input, ce::inline_size);
		uint64_t ptr = prm::get(e, ce::input_mailbox_ptr);
		const size_t nblk = blocks_for(in_len);
		std::vector<uint8_t> blk(mb::size);
		for (size_t i = 0; i < nblk; i++) {
			if (ptr % mb::align != 0) {
				delivery = prm::delivery_status::input_ptr_align_err;
				break;
			}
			if (mmu.dma_read(ptr, blk.data(), mb::size) < 0) {
				dma_failed = true;
				break;
			}
			if (prm::get(blk.data(), mb::block_num) != i) {
				delivery = prm::delivery_status::bad_block_number;
				break;
			}
			if (prm::get(blk.data(), mb::token) != token) {
				delivery = prm::delivery_status::token_err;
				break;
			}
			const size_t at = ce::inline_size + i * mb::data_size;
			std::memcpy(f.in.data() + at, blk.data(),
				    std::min<size_t>(mb::data_size, in_len - at));
			ptr = prm::get(blk.data(), mb::next_ptr);
		}
	}
	/* Walk the output chain before running anything, so that a command whose output cannot
	 * be delivered never changes device state. Only the control words are read. */
	if (delivery == prm::delivery_status::ok && !dma_failed) {
		uint64_t ptr = prm::get(e, ce::output_mailbox_ptr);
		const size_t nblk = blocks_for(out_len);
		f.out_blocks.reserve(nblk);
		uint8_t ctl[mb::size - mb::data_size];
		for (size_t i = 0; i < nblk; i++) {
			if (ptr % mb::align != 0) {
				delivery = prm::delivery_status::output_ptr_align_err;
				break;
			}
			if (mmu.dma_read(ptr + mb::data_size, ctl, sizeof(ctl)) < 0) {
				dma_failed = true;
				break;
			}
			/* The control fields are read in place: offsets relative to the block. */
			uint8_t whole[mb::size] = {};
			std::memcpy(whole + mb::data_size, ctl, sizeof(ctl));
			if (prm::get(whole, mb::block_num) != i) {
				delivery = prm::delivery_status::bad_block_number;
				break;
			}
			if (prm::get(whole, mb::token) != token) {
				delivery = prm::delivery_status::token_err;
				break;
			}
			f.out_blocks.push_back(ptr);
			ptr = prm::get(whole, mb::next_ptr);
		}
	}
	f.delivery = delivery;
	f.dma_failed = dma_failed;
	finish_slot(f);
}

void EmuMlx5Device::finish_slot(Fetched &f)
{
	namespace ce = prm::cmdq_entry;
	namespace mb = prm::mailbox;
	EmuIommu &mmu = fn_.iommu();
	CmdResult r{};
	/* Sized only once the length is known to be within kMaxCmdLen. */
	std::vector<uint8_t> out(f.delivery == prm::delivery_status::ok
					 ? std::max<size_t>(f.out_len, ce::inline_size)
					 : ce::inline_size,
				 0);
	if (f.delivery != prm::delivery_status::ok) {
		stats_.delivery_errors++;
		NICMR_LOG(warn, "emu-mlx5", "%s: slot %u: delivery status 0x%x", cfg_.name.c_str(),
			  f.slot, f.delivery);
	} else if (f.dma_failed) {
		r = CmdResult{prm::status::internal_err,
			      static_cast<uint32_t>(Syndrome::dma_fault)};
		prm::set(out.data(), prm::cmd_hdr_out::status, r.status);
		prm::set(out.data(), prm::cmd_hdr_out::syndrome, r.syndrome);
		count(r);
	} else {
		/* A command from the queue may wait for pages: firmware keeps the slot (ownership
		 * stays with the device) until the driver gives them on another slot. */
		in_slot_ = true;
		stall_ = false;
		r = execute_locked(f.in.data(), f.in_len, out.data(), f.out_len);
		in_slot_ = false;
		if (stall_) {
			stats_.stalled++;
			stalled_.push_back(std::move(f));
			return;
		}
		count(r);
		for (size_t i = 0; i < f.out_blocks.size(); i++) {
			const size_t at = ce::inline_size + i * mb::data_size;
			const size_t n = std::min<size_t>(mb::data_size, f.out_len - at);
			if (mmu.dma_write(f.out_blocks[i], out.data() + at, n) < 0) {
				/* Unmapped under our feet: the output is lost, say so. */
				r = CmdResult{prm::status::internal_err,
					      static_cast<uint32_t>(Syndrome::dma_fault)};
				prm::set(out.data(), prm::cmd_hdr_out::status, r.status);
				prm::set(out.data(), prm::cmd_hdr_out::syndrome, r.syndrome);
				break;
			}
		}
	}
	if (f.delivery == prm::delivery_status::ok &&
	    mmu.dma_write(f.entry_iova + ce::inline_output, out.data(), ce::inline_size) < 0) {
		stats_.dropped++;
		return;
	}
	/* Status and ownership share the last byte: compose it, then hand the entry back. */
	uint8_t *e = f.e.data();
	prm::set(e, ce::status, f.delivery);
	prm::set(e, ce::ownership, ce::owner_sw);
	const size_t last = prm::byte_offset(ce::ownership);
	if (mmu.dma_store8_release(f.entry_iova + last, e[last]) < 0)
		stats_.dropped++;
}

void EmuMlx5Device::resume_stalled()
{
	pages_changed_ = false;
	std::vector<Fetched> waiting;
	waiting.swap(stalled_);
	/* In arrival order; one that still lacks pages parks again (a new request went out). */
	for (auto &f : waiting)
		finish_slot(f);
	pages_refused_ = false;
}

EmuMlx5::~EmuMlx5()
{
	/* No handler may run once the model is gone: stop delivery first. */
	if (fn_)
		fn_->stop();
	dev_.reset();
	fn_.reset();
}

int emu_mlx5_create(const EmuConfig &cfg, std::unique_ptr<EmuMlx5> *out)
{
	if (out == nullptr)
		return -EINVAL;
	EmuFunctionConfig fc;
	fc.name = cfg.name;
	fc.id = cfg.id;
	fc.bar0_size = cfg.bar0_size;
	fc.iommu = cfg.iommu;
	if (fc.iommu.name == EmuIommuConfig{}.name)
		fc.iommu.name = cfg.name + "-iommu";
	fc.delivery = cfg.delivery;
	fc.poll_idle_sleep = cfg.poll_idle_sleep;
	fc.caller_progress = cfg.caller_progress;
	fc.msix_vectors = cfg.msix_vectors;
	std::unique_ptr<EmuMlx5> e(new (std::nothrow) EmuMlx5());
	if (!e)
		return -ENOMEM;
	int rc = EmuFunction::create(fc, &e->fn_);
	if (rc < 0)
		return rc;
	rc = EmuMlx5Device::create(*e->fn_, cfg, &e->dev_);
	if (rc < 0)
		return rc;
	if (cfg.start) {
		rc = e->fn_->start();
		if (rc < 0)
			return rc;
	}
	*out = std::move(e);
	return 0;
}

} // namespace nicmr::emu
