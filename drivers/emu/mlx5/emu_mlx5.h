/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The mlx5 device model: a software ConnectX subset behind an emulated PCI function.
 *
 *   driver --BAR 0--> EmuFunction --cmd_dbell--> EmuMlx5Device::ring(slots)
 *                                                  |  for each rung slot:
 *                                                  |   read entry, gather input mailboxes  (IOMMU)
 *                                                  |   execute(in, out)   <- the command decoder
 *                                                  |   scatter output, status, ownership=0 (IOMMU)
 *                                                  v
 *        device state: HCA state, ISSI, pages given, caps, PDs, MkeyTable (emu_mlx5_mkey.h)
 *        data path: UARs, EQs, CQs, QPs, the WQE engine (emu_mlx5_dp.h), rung through the UAR
 *        doorbells the model registers at creation
 *
 * Every PRM field is read and written through drivers/common/mlx5/mlx5_prm.h (WQE segments and
 * CQEs through rdma-core's <infiniband/mlx5dv.h> structures). The model reaches
 * host memory only through the function's IOMMU; an access to an unmapped IOVA is a DMA fault
 * (counted by the IOMMU, logged) and never a crash or a stray write. Every length, count and
 * index a command carries is bounded before use.
 *
 * Thread safety: commands may be rung from any number of threads (inline delivery) or run on the
 * device poll thread; one mutex serialises command execution (firmware-like: commands are slow
 * path). The mkey table has its own reader/writer lock so that a data path can look keys up
 * while commands run. doc/device-model.md lists defaults, limits, statuses and syndromes.
 */
#ifndef NICMR_EMU_MLX5_H
#define NICMR_EMU_MLX5_H

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "emu_function.h"
#include "emu_mlx5_dp.h"
#include "emu_mlx5_mkey.h"
#include "emu_mlx5_trace.h"
#include "mlx5_prm.h"

namespace nicmr::emu {

/*
 * Syndromes the model reports with a failing status (cmd_hdr_out::syndrome). Real firmware
 * syndromes are opaque 32-bit values; these are the model's own, one per cause, so that tests
 * can tell causes apart. A driver should log them, not interpret them.
 */
enum class Syndrome : uint32_t {
	none = 0,
	bad_opcode = 0x0e000001,	      /* BAD_OP: opcode outside the subset */
	bad_uid = 0x0e000002,		      /* BAD_PARAM: uid != 0 (no DEVX user contexts) */
	bad_op_mod = 0x0e000003,	      /* BAD_PARAM */
	bad_function_id = 0x0e000004,	      /* BAD_PARAM: only function 0, no embedded CPU */
	input_too_short = 0x0e000005,	      /* BAD_INPUT_LEN */
	output_too_short = 0x0e000006,	      /* BAD_OUTPUT_LEN */
	dma_fault = 0x0e000007,		      /* INTERNAL_ERR: a mailbox or page IOVA is unmapped */
	hca_disabled = 0x0e000010,	      /* BAD_SYS_STATE: before ENABLE_HCA */
	hca_already_enabled = 0x0e000011,     /* BAD_SYS_STATE */
	hca_not_initialized = 0x0e000012,     /* BAD_SYS_STATE: before INIT_HCA */
	hca_already_initialized = 0x0e000013, /* BAD_SYS_STATE */
	pages_missing = 0x0e000014,	      /* NO_RESOURCES: boot/init pages not given yet */
	issi_unsupported = 0x0e000020,	      /* BAD_PARAM */
	cap_type_unsupported = 0x0e000021,    /* BAD_PARAM: also nicmr_ext with extensions off */
	cap_exceeds_max = 0x0e000022,	      /* BAD_PARAM: SET_HCA_CAP above the maximum */
	page_unaligned = 0x0e000030,	      /* BAD_PARAM */
	page_duplicate = 0x0e000031,	      /* BAD_PARAM: given twice */
	page_limit = 0x0e000032,	      /* EXCEED_LIM: more than max_pages */
	pd_table_full = 0x0e000040,	      /* EXCEED_LIM */
	pd_out_of_range = 0x0e000041,	      /* BAD_INDEX */
	pd_not_allocated = 0x0e000042,	      /* BAD_RES_STATE */
	pd_in_use = 0x0e000043,		      /* RESOURCE_BUSY: mkeys still reference it */
	mkey_table_full = 0x0e000050,	      /* EXCEED_LIM */
	mkey_index_out_of_range = 0x0e000051, /* BAD_INDEX: 0 or >= 2^log_max_mkey */
	mkey_index_in_use = 0x0e000052,	      /* BAD_RES_STATE: CREATE_MKEY at a live index */
	mkey_not_found = 0x0e000053,	      /* BAD_RES_STATE: QUERY/DESTROY of a free index */
	mkey_by_name_disabled = 0x0e000054,   /* BAD_PARAM: index asked for, capability off */
	mkey_access_mode = 0x0e000055,	      /* BAD_PARAM: only MTT and KLM */
	mkey_page_size = 0x0e000056,	      /* BAD_PARAM: MTT log_page_size outside [12, 30] */
	mkey_translations = 0x0e000057,	      /* BAD_PARAM: actual size above the mkey's size */
	mkey_translations_limit = 0x0e000058, /* EXCEED_LIM: size above the per-mkey limit */
	mkey_range = 0x0e000059,	      /* BAD_PARAM: [start, start+len) not covered */
	mkey_umem = 0x0e00005a,		      /* BAD_PARAM: mkey_umem_valid (no UMEM support) */
	mkey_budget = 0x0e00005b,	      /* EXCEED_LIM: translation memory budget used up */
	teardown_profile = 0x0e000060,	      /* BAD_PARAM: neither graceful nor force close */
	uar_table_full = 0x0e000070,	      /* EXCEED_LIM: every UAR index allocated */
	uar_not_allocated = 0x0e000071,	      /* BAD_RES_STATE */
	uar_in_use = 0x0e000072,	      /* RESOURCE_BUSY: a QP rings it */
	queue_params = 0x0e000073,  /* BAD_PARAM: queue size, page size, page_offset, CQE size,
				       UMEM, too few pages, misaligned page or record */
	queue_memory = 0x0e000074,  /* BAD_PARAM: a queue page or record not mapped */
	eq_table_full = 0x0e000080, /* EXCEED_LIM */
	eq_not_found = 0x0e000081,  /* BAD_RES_STATE */
	eq_in_use = 0x0e000082,	    /* RESOURCE_BUSY: a CQ names it */
	cq_table_full = 0x0e000090, /* EXCEED_LIM */
	cq_not_found = 0x0e000091,  /* BAD_RES_STATE */
	cq_in_use = 0x0e000092,	    /* RESOURCE_BUSY: a QP completes there */
	qp_table_full = 0x0e0000a0, /* EXCEED_LIM */
	qp_not_found = 0x0e0000a1,  /* BAD_RES_STATE */
	qp_bad_state = 0x0e0000a2,  /* BAD_QP_STATE: transition not from this state */
	qp_type = 0x0e0000a3,	    /* BAD_PARAM: not RC, UD or QP1, or a UMEM */
	qp_port = 0x0e0000a4,	    /* BAD_PARAM: port not 1..ports; a GSI QP's moved */
	qp_gsi_busy = 0x0e0000a6,   /* RESOURCE_BUSY: RST2INIT of a GSI QP (st QP1) on a port
				       whose GSI QP is out of RST already */
	/* Shared receive queues (emu_mlx5_srq.cpp). */
	qp_srq_not_found = 0x0e0000a5, /* BAD_RESOURCE: CREATE_QP's srqn names no SRQ of its PD */
	srq_table_full = 0x0e0000a8,   /* EXCEED_LIM */
	srq_not_found = 0x0e0000a9,    /* BAD_RES_STATE */
	srq_in_use = 0x0e0000aa,       /* RESOURCE_BUSY: a QP takes from it */
	srq_params = 0x0e0000ab,       /* BAD_PARAM: ARM_RQ op_mod not SRQ, lwm above the size */
	/* The RC connection (INIT2RTR, RTR2RTS, CREATE_QP ts_format). */
	cq_eq_not_found = 0x0e0000d0,	/* BAD_RESOURCE: CREATE_CQ's c_eqn names no EQ */
	qp_opt_param = 0x0e0000d1,	/* BAD_PARAM: opt_param_mask bit the transition lacks */
	qp_mtu = 0x0e0000d2,		/* BAD_PARAM: INIT2RTR mtu 0 or above 4096 (5) */
	qp_msg_max = 0x0e0000d3,	/* BAD_PARAM: log_msg_max above log_max_msg */
	qp_force_loopback = 0x0e0000d4, /* BAD_PARAM: fl where the RoCE caps forbid it */
	qp_gid_index = 0x0e0000d5,	/* BAD_PARAM: src_addr_index beyond the GID table */
	qp_remote_gid = 0x0e0000d6,	/* BAD_PARAM: no fl and rgid_rip all zeroes */
	qp_atomic_mode = 0x0e0000d7,	/* BAD_PARAM: atomic_mode other than 0 or IB_COMP */
	qp_ts_format = 0x0e0000d8,	/* BAD_PARAM: ts_format the RoCE caps' qp_ts_format lacks */
	/* QUERY_ROCE_ADDRESS: a port or an index the device has not. */
	roce_address_port = 0x0e0000d9,	 /* BAD_PARAM: vhca_port_num not 1..ports */
	roce_address_index = 0x0e0000da, /* BAD_PARAM: index not below the table size */
	/* nicmr extension commands (prm::opcode::nicmr_*_mkey_ext), never on a ConnectX. */
	ext_flags = 0x0e0000b0,	    /* BAD_PARAM: a flag outside mkey_ext::settable */
	ext_counter = 0x0e0000b1,   /* BAD_PARAM: counter IOVA unaligned or not mapped */
	ext_mkey_free = 0x0e0000b2, /* BAD_RES_STATE: the mkey is free (nothing to extend) */
	/* On-demand paging (PAGE_FAULT_RESUME). */
	page_fault_token = 0x0e0000e0, /* BAD_PARAM: no outstanding page fault has the token */
	/* Fault injection (EmuConfig::fail_opcode), never on a ConnectX. */
	injected = 0x0e0000f0, /* INTERNAL_ERR: the command's opcode is EmuConfig::fail_opcode */
	/* Bring-up (doc/device-model.md, "Bring-up"). */
	reg_unsupported = 0x0e0000c0, /* BAD_PARAM: ACCESS_REG of a register the model lacks */
	reg_data_short = 0x0e0000c1,  /* BAD_INPUT_LEN / BAD_OUTPUT_LEN: no room for the data */
	pmtu_port = 0x0e0000c3,	      /* BAD_PARAM: PMTU of a port the device has not */
	pages_refused = 0x0e0000c2,   /* NO_RESOURCES: the driver answered MANAGE_PAGES with
					 alloc_fail while this command waited for pages */
};

/* HCA life cycle, firmware order: reset -ENABLE-> enabled -INIT-> initialized -TEARDOWN-> enabled
 * -DISABLE-> reset. */
enum class HcaState { reset, enabled, initialized };

/* The model's reserved lkey unless EmuConfig::resd_lkey says otherwise. */
inline constexpr uint32_t kDefaultResdLkey = 0x000000a7;

struct EmuConfig {
	std::string name = "emu:0";
	bus::PciId id{0x15b3, 0x101d}; /* ConnectX-6 Dx */
	size_t bar0_size = size_t{1} << 20;
	EmuIommuConfig iommu;
	DoorbellDelivery delivery = DoorbellDelivery::inline_call;
	std::chrono::microseconds poll_idle_sleep{50};
	/* Inline delivery: the driver's poll loops run the wire's receive work on their own
	 * thread (EmuFunctionConfig::caller_progress, "Run to completion" in emu_function.h);
	 * false: the device thread alone does. */
	bool caller_progress = true;
	/* The function's MSI-X table (EmuFunctionConfig::msix_vectors): 0 models a bus without
	 * interrupts (set_msix_eventfd answers -ENOTSUP). */
	unsigned msix_vectors = 64;
	/* Time from power-on until the initializing bit clears; 0 = cleared before create returns.
	 */
	std::chrono::microseconds boot_delay{0};
	/* Start doorbell delivery at creation (else call function().start()). */
	bool start = true;

	uint16_t fw_rev_major = 22, fw_rev_minor = 36, fw_rev_subminor = 1010;
	uint32_t log_max_mkey = 16; /* 1..24: mkey indices 1 .. 2^n - 1 (0 is never handed out) */
	uint32_t log_max_pd = 16;   /* 1..24: PD numbers 1 .. 2^n - 1 */
	uint32_t ports = 2;	    /* 1..2 */
	uint32_t boot_pages = 8;    /* pages QUERY_PAGES(boot) asks for */
	uint32_t init_pages = 16;   /* more pages QUERY_PAGES(init) asks for */
	/* More pages the device wants once INIT_HCA ran: asked for with a PAGE_REQUEST event on
	 * the first EQ that takes page requests (and answered by QUERY_PAGES(regular)); commands
	 * that create objects wait for them (doc/device-model.md, "Pages"). */
	uint32_t regular_pages = 16;
	/* The function_id the device puts in QUERY_PAGES and PAGE_REQUEST and requires in
	 * MANAGE_PAGES (0: a PF's own function; set another value to check that a driver echoes
	 * it, as rdma-core's mlx5_vfio_give_pages does). */
	uint16_t page_function_id = 0;
	/* Command interface checksums (cmd_hca_cap.cmdif_checksum) at power-on: while not 0 after
	 * INIT_HCA, an entry without a signature is refused with delivery status signature_err.
	 * rdma-core's and Linux's handle_hca_cap turn it off with SET_HCA_CAP; 0 models a device
	 * that powers on with it off. */
	uint32_t cmdif_checksum = 1;
	uint32_t max_pages = 1u << 18;	     /* pages the device accepts in all (1 GiB) */
	uint32_t log_max_klm_list_size = 18; /* translations per mkey (MTT or KLM), 1..30 */
	uint64_t translation_budget = uint64_t{64} << 20; /* bytes of MTT/KLM across all mkeys */
	/* CREATE_MKEY at a chosen index (the max and current cap mkey_by_name). Off, as on a
	 * stock ConnectX: the device chooses every index. The native API's emu spec option
	 * mkey_by_name=1 turns it on. */
	bool mkey_by_name = false;
	/* On-demand paging (cmd_hca_cap.pg, Linux mlx5_ifc.h; doc/odp.md): MTT mkeys created with
	 * pg_access whose entries lack rd_en/wr_en are not present. On by default, as on a
	 * ConnectX-4 and later; the native API's emu spec option odp=0 models a device without it.
	 */
	bool odp = true;
	/*
	 * UMR (doc/device-model.md, "UMR"). resd_lkey: the reserved lkey QUERY_SPECIAL_CONTEXTS
	 * reports and a UMR's translation pointer must carry; its index is 0, which the model
	 * never hands out, and it is not 0x100 (rdma-core's MLX5_INVALID_LKEY), so a driver that
	 * uses a constant instead of asking fails. The umr_modify_*_disabled caps: a UMR whose
	 * mkey_mask sets PAGE_SIZE (entity size) or A (atomic) completes in error when set; off
	 * by default, as on a ConnectX PF.
	 */
	uint32_t resd_lkey = kDefaultResdLkey;
	bool umr_modify_entity_size_disabled = false;
	bool umr_modify_atomic_disabled = false;
	/* Atomic caps: supported_atomic_req_8B_endianness_mode_1, i.e. SET_HCA_CAP may switch
	 * 8-byte atomics from big-endian (the mode after power-on) to host endianness (Linux
	 * mlx5_core sets it whenever reported); false models a device that does big-endian
	 * only. */
	bool atomic_host_endianness = true;
	/* nicmr's device-model extensions (prm::ext_cap bits; none exists on a ConnectX). 0: the
	 * model is a plain ConnectX (the cap type and the extension opcodes are refused). */
	uint64_t ext_flags = mlx5::prm::ext_cap::single_use | mlx5::prm::ext_cap::rma_event;
	/* Data path (emu_mlx5_dp.h). UAR indices 1..uars get an SQ doorbell at creation: at most
	 * EmuFunction::kMaxDoorbells - 2 (cmd_dbell and cmdq_addr_l take two), BAR 0 must hold uars
	 * + 1 pages. */
	uint32_t uars = 32;
	uint32_t log_max_qp = 10;    /* 2..24: QP numbers 2 .. 2^n - 1 (EmuDataPath::kFirstQpn) */
	uint32_t log_max_cq = 10;    /* 1..24 */
	uint32_t log_max_eq = 4;     /* 1..8 */
	uint32_t log_max_qp_sz = 15; /* WQEBBs per SQ, 1..16 */
	uint32_t log_max_cq_sz = 22; /* CQEs per CQ, 1..22 */
	uint32_t log_max_eq_sz = 16; /* EQEs per EQ, 1..22 */
	/* The command trace (emu_mlx5_trace.h): 0 = off (the default: no recorder, no cost);
	 * N = record the first N commands and UMR work requests from power-on, at most
	 * kMaxTraceCapacity. */
	uint32_t trace_capacity = 0;
	/* Fault injection for tools' tests: every command with this opcode fails with
	 * INTERNAL_ERR / Syndrome::injected before its handler runs. 0 = none (the default). A
	 * ConnectX has no such thing. */
	uint16_t fail_opcode = 0;
	/* Fault injection for tests: the fail_umr-th UMR work request since power-on (1-based,
	 * counting every QP's) completes in error with LOCAL_QP_OP_ERR before any of it is
	 * read, the mkey untouched; the ones before and after run. 0 = none (the default). A
	 * ConnectX has no such thing. */
	uint64_t fail_umr = 0;
	/* RoCE caps (cap_type::roce; the general cap roce says they exist). Defaults: a
	 * ConnectX-6 Dx's: force loopback allowed on RC QPs whether RoCE is enabled or not, free
	 * running and real-time timestamps, 256 GID entries. RoCE counts as enabled (the state
	 * rdma-core's VFIO provider leaves an Ethernet port in). */
	bool roce = true;
	bool roce_fl_when_enabled = true;
	bool roce_fl_when_disabled = true;
	uint32_t roce_qp_ts_format =
		mlx5::prm::ts_format_cap::free_running_and_real_time; /* 0..2 */
	uint32_t roce_address_table_size = 256;
	/* The UDP wire (doc/device-model.md, "The UDP wire"), by port - 1: a port with an
	 * address sends and receives RoCEv2 over a UDP socket bound to it; without one (the
	 * default) it stays on the in-process loopback. */
	std::array<WirePortConfig, 2> wire;
};

/* Counters for tests and logs. */
struct EmuStats {
	uint64_t commands = 0;	      /* commands completed (any status) */
	uint64_t commands_failed = 0; /* completed with a status other than OK */
	uint64_t delivery_errors = 0; /* completed with a delivery status other than OK */
	uint64_t dropped = 0;	    /* rung but not executable: entry unreadable, not device-owned,
				       slot beyond the queue, device booting or queue unset, or a fatal
				       health syndrome raised */
	uint64_t stalled = 0;	    /* commands that waited for pages (PAGE_REQUEST sent) */
	uint64_t page_requests = 0; /* PAGE_REQUEST events written (either sign) */
};

/* Result of one decoded command. */
struct CmdResult {
	uint8_t status = 0;
	uint32_t syndrome = 0;
};

class EmuMlx5Device {
public:
	/* Bounds on a command: input and output up to 16 inline bytes plus this many mailboxes. */
	static constexpr size_t kMaxMailboxBlocks = 1024;
	static constexpr size_t kMaxCmdLen = 16 + kMaxMailboxBlocks * 512;
	/* EmuConfig::trace_capacity at most (about 500 bytes an entry, reserved at creation). */
	static constexpr uint32_t kMaxTraceCapacity = uint32_t{1} << 18;

	/*
	 * Powers a device model on in fn (which must be stopped and outlive the model): publishes
	 * the init segment with initializing = 1, registers cmd_dbell, and boots (see
	 * EmuConfig::boot_delay; without a timer thread it boots at once). Errors: -EINVAL
	 * (config out of range, BAR 0 too small), -EBUSY (fn running), -EEXIST (fn already hosts
	 * a device), -ENOSPC (fn's doorbell table full); on error fn is left as it was. fn must be
	 * stopped before the model is destroyed and not started again afterwards.
	 */
	static int create(EmuFunction &fn, const EmuConfig &cfg,
			  std::unique_ptr<EmuMlx5Device> *out);
	~EmuMlx5Device();
	EmuMlx5Device(const EmuMlx5Device &) = delete;
	EmuMlx5Device &operator=(const EmuMlx5Device &) = delete;

	/*
	 * The command decoder: executes one command held in flat buffers (as gathered from the
	 * entry and its mailboxes). Writes the output, status and syndrome into out (out_len is
	 * the driver's output length; out must hold at least max(out_len, 16) bytes). Any bytes
	 * are accepted; nothing in them can crash the device. Thread-safe.
	 */
	CmdResult execute(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);

	/* What the cmd_dbell handler runs: executes every device-owned slot in raw_mask (the
	 * doorbell value as the CPU stored it). Thread-safe. */
	void ring(uint64_t raw_mask);

	bool booted() const noexcept { return booted_.load(std::memory_order_acquire); }
	HcaState hca_state() const;
	uint16_t issi() const;
	/* Pages given and not taken back. */
	size_t pages_given() const;
	uint32_t pds_allocated() const;
	EmuStats stats() const;
	/* Device-side DMA faults (the IOMMU's counter). */
	uint64_t dma_faults() const noexcept { return fn_.iommu().dma_faults(); }
	const EmuConfig &config() const noexcept { return cfg_; }
	MkeyTable &mkeys() noexcept { return mkeys_; }
	const MkeyTable &mkeys() const noexcept { return mkeys_; }
	/* The data path: QPs, CQs, EQs, UARs and the WQE engine. */
	EmuDataPath &data_path() noexcept { return *dp_; }
	const EmuDataPath &data_path() const noexcept { return *dp_; }
	/* Consistency of the device state (accounting, references); for tests and fuzzing. */
	bool check_invariants() const;
	/* The command trace, or nullptr when EmuConfig::trace_capacity is 0. */
	CmdTrace *trace() noexcept { return trace_.get(); }
	const CmdTrace *trace() const noexcept { return trace_.get(); }

	/*
	 * Test hooks of firmware behaviour (doc/device-model.md, "Bring-up").
	 * raise_health_syndrome: the firmware hits a fatal error: the health buffer gets synd
	 * (prm::health_synd), ext_synd and rfr, and from then on no command completes (rung slots
	 * stay device-owned, counted as dropped), as a ConnectX whose firmware stopped.
	 * request_pages: the firmware wants delta more pages (delta > 0) or returns -delta
	 * (delta < 0): a PAGE_REQUEST event with num_pages = delta on the first EQ that takes
	 * page requests. -ENOENT without such an EQ, -EOVERFLOW when it overran, -EINVAL for 0,
	 * or for a return while pages are missing or of more than regular_pages plus what earlier
	 * requests added.
	 */
	void raise_health_syndrome(uint8_t synd, uint16_t ext_synd);
	int request_pages(int32_t delta);
	/* The last ACCESS_REG HOST_ENDIANNESS he value written (-1: never written). */
	int host_endianness() const;

private:
	struct Pd {
		uint32_t mkeys = 0; /* live mkeys that name this PD */
	};

	EmuMlx5Device(EmuFunction &fn, const EmuConfig &cfg);
	void publish_init_segment();
	void finish_boot();
	void run_slot(uint64_t cmdq, uint32_t slot, uint32_t log_stride);
	void count(const CmdResult &r);

	/* The decoder proper, with lock_ held. */
	CmdResult execute_locked(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	/* Command handlers, run with lock_ held. */
	CmdResult cmd_enable_hca(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_disable_hca(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_query_issi(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_set_issi(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_query_pages(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_manage_pages(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_query_hca_cap(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_set_hca_cap(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_init_hca(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_teardown_hca(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_alloc_pd(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_dealloc_pd(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_create_mkey(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_query_mkey(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_destroy_mkey(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_query_special_contexts(const uint8_t *in, size_t in_len, uint8_t *out,
					     size_t out_len);
	CmdResult cmd_query_roce_address(const uint8_t *in, size_t in_len, uint8_t *out,
					 size_t out_len);
	/* nicmr extensions (offered while cfg_.ext_flags is not 0). */
	CmdResult cmd_set_mkey_ext(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_query_mkey_ext(const uint8_t *in, size_t in_len, uint8_t *out,
				     size_t out_len);
	/* Data-path commands (emu_mlx5_dp_cmd.cpp). */
	CmdResult cmd_alloc_uar(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_dealloc_uar(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_create_eq(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_destroy_eq(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_create_cq(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_destroy_cq(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_create_qp(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_destroy_qp(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_modify_qp(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_query_qp(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	/* Shared receive queues (emu_mlx5_srq.cpp). */
	CmdResult cmd_create_srq(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_destroy_srq(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_query_srq(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult cmd_arm_rq(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	/* On-demand paging (emu_mlx5_dp_cmd.cpp). */
	CmdResult cmd_page_fault_resume(const uint8_t *in, size_t in_len, uint8_t *out,
					size_t out_len);
	/* Checks common to the commands on one mkey (QUERY_MKEY, DESTROY_MKEY and the extension
	 * commands): lengths, the initialized HCA, then the index field in 1 .. capacity - 1. */
	bool mkey_arg(size_t in_len, size_t in_min, size_t out_len, size_t out_min,
		      const uint8_t *in, mlx5::prm::Field index_field, uint32_t *index,
		      CmdResult *r);
	/* Checks common to the data-path commands: lengths, then the initialized HCA with its
	 * regular pages. */
	bool dp_ready(size_t in_len, size_t in_min, size_t out_len, size_t out_min, CmdResult *r,
		      bool needs_pages = true);

	/* Pages the device needs in all at this point of its life (stage: query_pages_op_mod). */
	uint64_t pages_required(uint16_t stage) const;
	/* Whether the regular pages are all there; if not, *r is NO_RESOURCES and a command run
	 * from the queue stalls (stall_) after a PAGE_REQUEST for the missing ones. */
	bool pages_ready(CmdResult *r);
	/* Posts a PAGE_REQUEST for n pages (negative: take back); see request_pages. */
	int post_page_request(int64_t n);
	CmdResult cmd_access_reg(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);
	CmdResult access_pmtu(uint16_t mod, const uint8_t *in, size_t in_len, uint8_t *out,
			      size_t out_len);
	/* The most a port's PMTU register says it takes: jumbo frames of 9216 bytes plus
	 * reg_pmtu::l2_overhead (the model's choice; ConnectX generations differ). */
	static constexpr uint32_t kPortMaxMtu = 9216 + 22;

	/* One command fetched from its slot: what run_slot gathered, kept while it stalls. */
	struct Fetched {
		uint32_t slot = 0;
		uint64_t entry_iova = 0;
		std::array<uint8_t, 64> e{};
		uint32_t delivery = 0;
		bool dma_failed = false;
		uint64_t in_len = 0, out_len = 0;
		std::vector<uint8_t> in;
		std::vector<uint64_t> out_blocks;
	};
	/* Executes f and completes its slot, or parks it in stalled_ (pages missing). */
	void finish_slot(Fetched &f);
	/* Runs again the commands that waited for pages (after MANAGE_PAGES). */
	void resume_stalled();
	/* Clears initializing once the boot delay passed and the queue address was written. */
	void on_cmdq_address();
	void clear_initializing();
	void release_resources();

	EmuFunction &fn_;
	EmuConfig cfg_;
	std::atomic<bool> booted_{false};
	std::thread boot_thread_;
	std::mutex boot_lock_;
	std::condition_variable boot_cv_;
	bool boot_cancel_ = false;	 /* guarded by boot_lock_ */
	bool boot_elapsed_ = false;	 /* guarded by boot_lock_ */
	bool addr_written_ = false;	 /* guarded by boot_lock_ */
	std::atomic<bool> fatal_{false}; /* a health syndrome was raised */

	mutable std::mutex lock_; /* serialises commands; guards everything below */
	HcaState state_ = HcaState::reset;
	uint16_t issi_ = 0;
	std::unordered_set<uint64_t> pages_;
	std::array<uint8_t, 4096> caps_general_max_{}, caps_general_cur_{};
	std::array<uint8_t, 4096> caps_atomic_max_{}, caps_atomic_cur_{};
	std::array<uint8_t, 4096> caps_roce_max_{}, caps_roce_cur_{};
	std::unordered_map<uint32_t, Pd> pds_;
	uint32_t pd_next_ = 1;
	uint64_t translation_bytes_ = 0; /* stored translations of all mkeys */
	EmuStats stats_;
	/* Firmware pages after INIT_HCA (doc/device-model.md, "Pages"). */
	std::vector<Fetched> stalled_; /* commands waiting for pages, in arrival order */
	bool in_slot_ = false;	       /* the command running came from the queue: may stall */
	bool stall_ = false;	       /* ... and waits for pages */
	bool pages_changed_ = false;   /* MANAGE_PAGES ran: stalled commands may go on */
	bool pages_refused_ = false;   /* the driver answered alloc_fail: stalled ones fail */
	uint64_t requested_ = 0;       /* pages asked for by PAGE_REQUEST, not given yet */
	int64_t extra_pages_ = 0;      /* request_pages(): wanted beyond regular_pages */
	int host_endianness_ = -1;     /* ACCESS_REG HOST_ENDIANNESS he, -1 never written */

	/* Before dp_, which records its UMRs here. Its own mutex. */
	std::unique_ptr<CmdTrace> trace_;
	MkeyTable mkeys_;
	/* After mkeys_: it refers to the table. Its own locks (emu_mlx5_dp.h). */
	std::unique_ptr<EmuDataPath> dp_;
};

/* A whole emulated device: the PCI function and the model it hosts. */
class EmuMlx5 {
public:
	/* Stops delivery, then destroys the model, then the function. */
	~EmuMlx5();
	bus::PciFunction &function() noexcept { return *fn_; }
	EmuFunction &emu_function() noexcept { return *fn_; }
	EmuIommu &iommu() noexcept { return fn_->iommu(); }
	EmuMlx5Device &device() noexcept { return *dev_; }

private:
	friend int emu_mlx5_create(const EmuConfig &cfg, std::unique_ptr<EmuMlx5> *out);
	EmuMlx5() = default;
	std::unique_ptr<EmuFunction> fn_;
	std::unique_ptr<EmuMlx5Device> dev_;
};

/*
 * Creates an emulated ConnectX in one call: function, IOMMU, model; delivery started unless
 * cfg.start is false. Errors: those of EmuFunction::create and EmuMlx5Device::create.
 */
int emu_mlx5_create(const EmuConfig &cfg, std::unique_ptr<EmuMlx5> *out);

} // namespace nicmr::emu

#endif
