/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An mlx5 device opened on a PCI function: bring-up, capabilities, PDs and mkeys.
 *
 * Bring-up, in the order of rdma-core's VFIO provider (mlx5_vfio.c: mlx5_vfio_init_cmd_interface,
 * mlx5_vfio_setup_function, create_async_eqs):
 *   check cmdif_rev == 5 -> command queue in DMA memory, its address written to the init
 *   segment -> wait for initializing == 0 (up to init_timeout, FW_PRE_INIT_TIMEOUT_MILI)
 *   -> ENABLE_HCA -> QUERY_ISSI / SET_ISSI(1) -> QUERY_PAGES(boot) + MANAGE_PAGES(give)
 *   -> ACCESS_REG(HOST_ENDIANNESS) -> QUERY_HCA_CAP(general, current and max)
 *   -> SET_HCA_CAP(general: cmdif_checksum 0, log_uar_page_sz, mkey_by_name) -> QUERY_HCA_CAP
 *   -> the atomic caps -> QUERY_PAGES(init) + MANAGE_PAGES(give) -> INIT_HCA
 *   -> ALLOC_UAR + CREATE_EQ (the async EQ, PAGE_REQUEST events) -> MANAGE_PAGES(give) for the
 *   page requests firmware posts there -> QUERY_SPECIAL_CONTEXTS (the reserved lkey)
 *   -> QUERY_HCA_CAP(extensions)
 * Every MANAGE_PAGES goes on the command queue's page slot (rdma-core's slot 31), so a command
 * firmware holds until it gets pages never blocks the answer (mlx5_cmdq.h).
 * Teardown (the destructor): DESTROY_EQ + DEALLOC_UAR -> TEARDOWN_HCA -> MANAGE_PAGES(take)
 * until every page is back (Linux pagealloc.c, mlx5_reclaim_startup_pages) -> DISABLE_HCA ->
 * free the pages, the mailboxes, the queue and the arenas.
 *
 * Events: the async EQ is polled (no interrupts) while a command waits on slot 0, right after
 * it is created, and by poll_events(), which an application calls from its slow-path loop as
 * rdma-core's mlx5dv_vfio_process_events is called. Page requests are answered with
 * MANAGE_PAGES give (or take, for a negative count) for the event's function_id.
 *
 * DMA memory: the command queue, mailboxes and queue rings come from one DmaArena in the
 * function's DmaSpace, the caller's (DeviceOptions::arena) or one the device creates from
 * DeviceOptions::arena_params. Pages given to firmware come from page arenas of
 * DeviceOptions::page_chunk bytes created on demand, up to DeviceOptions::max_page_memory
 * (beyond it a page request is answered "cannot give" and the command that waited for the
 * pages fails). Every call is a slow path and thread-safe.
 */
#ifndef NICMR_MLX5_DEVICE_H
#define NICMR_MLX5_DEVICE_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "bus_pci.h"
#include "mem_space.h"
#include "mlx5_cmdq.h"
#include "mlx5_commands.h"

namespace nicmr::mlx5 {

/* How long firmware may stay in initializing: rdma-core's FW_PRE_INIT_TIMEOUT_MILI (and Linux
 * main.c's), 120 s; polled every FW_INIT_WAIT_MS, 2 ms. */
inline constexpr std::chrono::milliseconds kFwPreInitTimeout{120000};
inline constexpr std::chrono::milliseconds kFwInitWait{2};

class Eq;
struct Event;
class Uar;

struct DeviceOptions {
	/* How long the device may stay in initializing after its queue address was written. */
	std::chrono::milliseconds init_timeout = kFwPreInitTimeout;
	/* How long one command may take before the queue is declared broken. */
	std::chrono::milliseconds cmd_timeout{60000};
	/* Use this arena for all DMA memory (it must belong to the space given to open); when
	 * null the device creates its own from arena_params. */
	mem::DmaArena *arena = nullptr;
	mem::PoolParams arena_params{.size = size_t{4} << 20,
				     .page_size = mem::kPage2M,
				     .numa_node = -1,
				     .allow_fallback = true,
				     .backend = mem::PoolBackend::memfd,
				     .name = "mlx5-ctrl"};
	/* Pages given to firmware: arenas of page_chunk bytes (rdma-core's MLX5_VFIO_BLOCK_SIZE,
	 * 2 MiB), created as firmware asks, at most max_page_memory bytes in all (a multiple of
	 * page_chunk; 0 or a value below one chunk is -EINVAL at open). */
	size_t page_chunk = size_t{2} << 20;
	size_t max_page_memory = size_t{256} << 20;
	/* The async EQ: 2^n entries, rdma-core's MLX5_NUM_CMD_EQE + MLX5_NUM_SPARE_EQE (32 + 128)
	 * rounded up to a power of two. */
	uint32_t async_eq_log_size = 8;
	/* Turn on mkey_by_name with SET_HCA_CAP when the device can (mkeys at chosen indexes). */
	bool want_mkey_by_index = true;
	/* Ask for host-endian 8-byte atomics with SET_HCA_CAP when the device can (Linux
	 * mlx5_core does the same); else atomics stay big-endian. */
	bool want_atomic_host_endianness = true;
};

/* What the device offers, as nicmr uses it. */
struct Caps {
	uint16_t fw_major = 0, fw_minor = 0, fw_subminor = 0;
	uint16_t issi = 0;
	uint32_t log_max_mkey = 0;
	uint32_t log_max_pd = 0;
	uint32_t log_max_klm_list_size = 0;
	uint32_t max_indirection = 0;
	uint32_t log_max_mrw_sz = 0;
	uint32_t log_pg_sz = 0;
	/* UMR */
	bool umr_extended_translation_offset = false;
	bool umr_modify_entity_size_disabled = false;
	bool umr_modify_atomic_disabled = false;
	bool umr_indirect_mkey_disabled = false;
	bool umr_ptr_rlkey = false;
	uint32_t umr_fence = 0;
	bool null_mkey = false;
	/* The reserved lkey (QUERY_SPECIAL_CONTEXTS' resd_lkey, asked once at bring-up): a UMR's
	 * translation pointer carries it. */
	uint32_t resd_lkey = 0;
	/* CREATE_MKEY at a chosen index (mkey_by_name, enabled at bring-up when offered). */
	bool mkey_by_index = false;
	/* Atomics (atomic_operations and atomic_size_qp are zero when atomic is false). */
	bool atomic = false;
	uint32_t atomic_operations = 0; /* prm::atomic_ops bits */
	uint32_t atomic_size_qp = 0;	/* bit n: 2^n-byte operands */
	uint32_t log_max_atomic_size_qp = 0;
	/* The atomic caps' supported_atomic_req_8B_endianness_mode_1, and the mode in force
	 * after bring-up: true when atomic_req_8B_endianness_mode is host endianness (the
	 * target word and the fetched value in host byte order), false when big-endian. */
	bool atomic_host_endianness_supported = false;
	bool atomic_host_endianness = false;
	bool odp = false;
	uint32_t log_max_msg = 0;    /* largest message: 2^n bytes (QpParams::log_msg_max) */
	uint32_t log_max_srq_sz = 0; /* WQEs per SRQ: 2^n (mlx5_srq.h) */
	/* RoCE (prm::cap_type::roce, queried when the general cap roce is set; all zero
	 * otherwise). rdma-core's VFIO provider turns RoCE on for an Ethernet port after
	 * INIT_HCA (mlx5_vfio.c, mlx5_vfio_setup_function); nicmr takes a port with the roce cap
	 * as RoCE-enabled, so force loopback is allowed when fl_rc_qp_when_roce_enabled is set
	 * (roce_force_loopback). */
	bool roce = false;
	bool roce_fl_when_enabled = false;    /* fl_rc_qp_when_roce_enabled */
	bool roce_fl_when_disabled = false;   /* fl_rc_qp_when_roce_disabled */
	bool roce_force_loopback = false;     /* an RC QP may set the address path's fl */
	bool roce_sw_src_udp_port = false;    /* sw_r_roce_src_udp_port, set at bring-up */
	uint32_t roce_qp_ts_format = 0;	      /* prm::ts_format_cap */
	uint32_t roce_address_table_size = 0; /* GID table entries per port */
	/* nicmr device-model extensions (prm::cap_type::nicmr_ext); 0 on ConnectX. */
	bool ext_present = false;
	uint64_t ext_flags = 0;
};

/* PCI vendor of every ConnectX. */
inline constexpr uint16_t kPciVendorMellanox = 0x15b3;

/*
 * True for a ConnectX function the driver knows (ConnectX-4 to ConnectX-8 and BlueField, PFs
 * and VFs, by device ID) — what Device::open checks before it touches the function.
 */
bool is_supported_device(bus::PciId id) noexcept;

class Eq;
class Uar;

class Device {
public:
	/*
	 * Opens and brings up the device on fn; space must be the DmaSpace over fn.dma().
	 * Errors: -ENODEV (fn is not a ConnectX: nothing was touched, the log line names its
	 * vendor:device), -ETIMEDOUT (still initializing after init_timeout, or a command timed
	 * out), -EPROTONOSUPPORT (cmdif revision is not 5, or ISSI 1 unsupported), -ENOMEM (no DMA
	 * memory, or firmware wants more pages than max_page_memory), -ENXIO (firmware reports a
	 * health syndrome), a command's errno (mlx5_cmd.h), arena creation errors, -EINVAL (null
	 * out, space is not over fn.dma(), or page_chunk / max_page_memory unusable), those of
	 * fn.set_bus_master (the command register).
	 * Open sets the function's Bus Master Enable before the first command; teardown (the
	 * destructor, or a failed open) clears it once the function is disabled (doc/vfio.md).
	 * A failed open gives back every page and frees everything it took.
	 */
	static int open(bus::PciFunction &fn, mem::DmaSpace &space, const DeviceOptions &opts,
			std::unique_ptr<Device> *out);
	/* Tears the device down (see above); logs, never fails. */
	~Device();
	Device(const Device &) = delete;
	Device &operator=(const Device &) = delete;

	bus::PciFunction &function() noexcept { return fn_; }
	const Caps &caps() const noexcept { return caps_; }
	CmdQueue &cmdq() noexcept { return *cmdq_; }
	mem::DmaArena &arena() noexcept { return *arena_; }
	/* Pages the device holds now (given minus returned). */
	size_t pages_given() const;
	/* Bytes of the page arenas created so far (each page_chunk; never above max_page_memory).
	 */
	size_t page_memory() const;
	/* The function_id firmware named for its pages (QUERY_PAGES, PAGE_REQUEST). */
	uint16_t page_function_id() const noexcept { return page_function_id_; }
	/* The async EQ's number (page requests). */
	uint32_t async_eqn() const noexcept;

	/*
	 * Polls the async EQ and answers what firmware asked (page requests); checks the health
	 * buffer first. Returns the number of events handled, -ENXIO when firmware reports a
	 * health syndrome (the device is broken: every later command fails), or the first error
	 * of an answer (it is logged; the others still run). Slow path; thread-safe.
	 */
	int poll_events();
	/* True once a command timed out or firmware reported a health syndrome. */
	bool broken() const noexcept { return cmdq_ == nullptr || cmdq_->broken(); }
	/* The health syndrome that broke the device (prm::health_synd; 0: none). */
	uint8_t health_syndrome() const noexcept { return cmdq_ ? cmdq_->health_syndrome() : 0; }

	/* Runs one raw command (see CmdTransport::exec). */
	int exec(const void *in, size_t in_len, void *out, size_t out_len) noexcept
	{
		return cmdq_->exec(in, in_len, out, out_len);
	}
	uint8_t last_status() const noexcept { return cmdq_->last_status(); }
	uint32_t last_syndrome() const noexcept { return cmdq_->last_syndrome(); }

	int alloc_pd(uint32_t *pd) { return mlx5::alloc_pd(*cmdq_, pd); }
	/* Entry index of port's GID table (QUERY_ROCE_ADDRESS). */
	int query_roce_address(uint32_t port, uint32_t index, RoceAddress *out)
	{
		return mlx5::query_roce_address(*cmdq_, port, index, out);
	}
	/* port's PMTU register (ACCESS_REG). */
	int query_pmtu(uint32_t port, PortMtu *out) { return mlx5::query_pmtu(*cmdq_, port, out); }
	int dealloc_pd(uint32_t pd) { return mlx5::dealloc_pd(*cmdq_, pd); }
	/* -EOPNOTSUPP (nothing sent) when c.index != 0 and the device lacks mkey_by_index. */
	int create_mkey(const MkeyCreate &c, uint32_t *index);
	int query_mkey(uint32_t index, size_t max_entries, MkeyQuery *out)
	{
		return mlx5::query_mkey(*cmdq_, index, max_entries, out);
	}
	int destroy_mkey(uint32_t index) { return mlx5::destroy_mkey(*cmdq_, index); }

	/*
	 * nicmr extensions of an mkey (mlx5_commands.h). -EOPNOTSUPP, nothing sent, when the
	 * device lacks what st asks for: single_use needs ext_cap::single_use, disabled and
	 * counter need ext_cap::rma_event (a query needs either). Otherwise the command's errors.
	 */
	int set_mkey_ext(uint32_t index, const MkeyExtState &st);
	int query_mkey_ext(uint32_t index, MkeyExtState *st);

	/* Asks the device for the pages of a stage (QUERY_PAGES op_mod) and gives (or takes)
	 * them for the function it names. */
	int satisfy_pages(uint16_t op_mod);

	/*
	 * The completion EQ that CQs name (c_eqn) when they are given none: one EQ for every CQ
	 * of the device, as rdma-core's VFIO provider has one EQ for all its completion vectors
	 * (mlx5_vfio.c, vfio_devx_query_eqn; num_comp_vectors = 1). open() creates it with its
	 * own UAR right after INIT_HCA, where rdma-core creates that EQ; it subscribes to no
	 * asynchronous event and goes at teardown before TEARDOWN_HCA. On a bus with MSI-X it
	 * interrupts on vector kCompVector through an eventfd (comp_event_fd) and is created
	 * armed; on a bus without (-ENOTSUP from set_msix_eventfd) it is made in poll mode and
	 * comp_events still reads it. The device writes EQEs there only for armed CQs.
	 * Errors (only should open's creation have failed): those of Uar::alloc and Eq::create.
	 * Thread-safe.
	 */
	int comp_eqn(uint32_t *eqn);
	/* The completion EQ's MSI-X vector: rdma-core's VFIO provider keeps vector 0 for its
	 * async EQ (mlx5_vfio.c, MLX5_VFIO_CMD_VEC_IDX) and gives completion EQs the next ones. */
	static constexpr uint32_t kCompVector = 1;
	/*
	 * The eventfd that becomes readable when the completion EQ interrupts (an armed CQ got
	 * its event): poll(2) it, then call comp_events. -ENOTSUP when the bus has no MSI-X;
	 * those of comp_eqn. Thread-safe.
	 */
	int comp_event_fd();
	/*
	 * Takes the completion events: the CQN of up to max completion EQEs (in order) into cqns,
	 * consumes the eventfd's count and re-arms the EQ (update and arm with the consumer
	 * index: an EQE left behind, max being too small, interrupts again at once). Returns how
	 * many; 0 when none. -EINVAL (cqns null with max > 0, max < 0); those of comp_eqn.
	 * Thread-safe (a mutex): not a hot path. Each CQ's events are then the caller's to hand
	 * out (Cq::event_taken, and a re-arm when it wants another).
	 */
	int comp_events(uint32_t *cqns, int max);

	/*
	 * On-demand paging's page faults (doc/odp.md), on an EQ of their own whose mask is the
	 * page-fault event only, as Linux's mlx5_ib takes them (odp.c mlx5r_odp_create_eq),
	 * made on the first call (Linux makes it with the first ODP MR), in poll mode.
	 * enable_page_faults: makes it; -EOPNOTSUPP without Caps::odp; those of Uar::alloc and
	 * Eq::create. Thread-safe.
	 */
	int enable_page_faults();
	/* Whether a page-fault EQE waits: no lock, no allocation, no system call (one relaxed
	 * and, once the EQ exists, one acquire load). Any thread; a stale true is harmless. */
	bool page_fault_pending() const noexcept
	{
		const Eq *eq = pf_eq_ptr_.load(std::memory_order_acquire);
		return eq != nullptr && eq_pending(*eq);
	}
	/* Takes up to max page-fault events (type page_fault) into out; how many. -EINVAL for
	 * out null or max < 1. Slow path (a mutex): one caller serves at a time. */
	int page_faults(Event *out, int max);
	/* PAGE_FAULT_RESUME for the fault ev (an event page_faults gave), error when its pages
	 * could not be made present. The command's errors. */
	int page_fault_resume(const Event &ev, bool error);

private:
	Device(bus::PciFunction &fn, mem::DmaSpace &space);
	static bool eq_pending(const Eq &eq) noexcept;
	int bring_up(const DeviceOptions &opts);
	int wait_ready(std::chrono::milliseconds timeout);
	int query_caps(const DeviceOptions &opts);
	int query_atomic_caps(const DeviceOptions &opts);
	int create_async_eq(const DeviceOptions &opts);
	/* Polls the async EQ and answers; caller holds eq_mu_. */
	int process_events();
	/* Gives count pages for function_id; from_event: answer "cannot give" when out of page
	 * memory (the firmware then fails the command that waited). */
	int give_pages(uint16_t function_id, uint32_t count, bool from_event);
	int take_pages(uint16_t function_id, uint32_t count);
	/* Gives back to their arenas the pages MANAGE_PAGES take returned; how many were ours. */
	size_t release_returned_pages(const std::vector<uint64_t> &back);
	/* One 4 KiB page from the page arenas, growing them up to the cap. */
	int alloc_page(mem::DmaBlock *b, mem::DmaArena **from);
	int query_roce_caps();
	void reclaim_pages();
	void teardown();

	struct GivenPage {
		mem::DmaBlock block;
		mem::DmaArena *arena = nullptr;
	};

	bus::PciFunction &fn_;
	mem::DmaSpace &space_;
	std::unique_ptr<mem::DmaArena> own_arena_;
	mem::DmaArena *arena_ = nullptr;
	std::unique_ptr<CmdQueue> cmdq_;
	Caps caps_;
	bool enabled_ = false;	   /* ENABLE_HCA succeeded */
	bool initialized_ = false; /* INIT_HCA succeeded */
	uint16_t page_function_id_ = 0;
	size_t page_chunk_ = 0, max_page_memory_ = 0;

	std::mutex eq_mu_; /* one poller of the async EQ */
	std::unique_ptr<Uar> eq_uar_;
	std::unique_ptr<Eq> async_eq_;

	mutable std::mutex pages_mu_; /* guards the page arenas and pages_ */
	std::vector<std::unique_ptr<mem::DmaArena>> page_arenas_;
	std::unordered_map<uint64_t, GivenPage> pages_; /* given to the device, by IOVA */

	std::mutex pf_mu_; /* guards the page-fault EQ's creation and its polling */
	std::unique_ptr<Uar> pf_uar_;
	std::unique_ptr<Eq> pf_eq_;
	/* pf_eq_ once made (release after creation, acquire in page_fault_pending). */
	std::atomic<const Eq *> pf_eq_ptr_{nullptr};

	std::mutex comp_mu_; /* guards the completion EQ's creation and comp_events */
	std::unique_ptr<Uar> comp_uar_;
	std::unique_ptr<Eq> comp_eq_;
};

/* A PD owned by a handle: DEALLOC_PD when the handle is reset or goes (errors are logged). */
class PdHandle {
public:
	PdHandle() = default;
	/* ALLOC_PD on dev; errors as Device::alloc_pd. dev must outlive the handle. */
	static int alloc(Device &dev, PdHandle *out);
	~PdHandle() { reset(); }
	PdHandle(PdHandle &&o) noexcept : dev_(o.dev_), pd_(o.pd_) { o.dev_ = nullptr; }
	PdHandle &operator=(PdHandle &&o) noexcept;
	PdHandle(const PdHandle &) = delete;
	PdHandle &operator=(const PdHandle &) = delete;

	uint32_t pd() const noexcept { return pd_; }
	explicit operator bool() const noexcept { return dev_ != nullptr; }
	/* Deallocates now; returns DEALLOC_PD's result (0 when empty). */
	int reset() noexcept;

private:
	Device *dev_ = nullptr;
	uint32_t pd_ = 0;
};

/* An mkey owned by a handle: DESTROY_MKEY when the handle is reset or goes. */
class MkeyHandle {
public:
	MkeyHandle() = default;
	/* CREATE_MKEY on dev; errors as Device::create_mkey. dev must outlive the handle. */
	static int create(Device &dev, const MkeyCreate &c, MkeyHandle *out);
	~MkeyHandle() { reset(); }
	MkeyHandle(MkeyHandle &&o) noexcept : dev_(o.dev_), index_(o.index_) { o.dev_ = nullptr; }
	MkeyHandle &operator=(MkeyHandle &&o) noexcept;
	MkeyHandle(const MkeyHandle &) = delete;
	MkeyHandle &operator=(const MkeyHandle &) = delete;

	uint32_t index() const noexcept { return index_; }
	explicit operator bool() const noexcept { return dev_ != nullptr; }
	/* Destroys now; returns DESTROY_MKEY's result (0 when empty). */
	int reset() noexcept;

private:
	Device *dev_ = nullptr;
	uint32_t index_ = 0;
};

} // namespace nicmr::mlx5

#endif
