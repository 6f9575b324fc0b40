/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target: datagrams from an untrusted peer reach a wire port of the mlx5 device model
 * whose RC QPs are connected and ready, and nothing outside registered memory that permits the
 * access may change.
 *
 * Set up once per process (fresh per input would open a socket and some forty commands each
 * time): a device whose port 1 is on the UDP wire (127.0.0.1, a port of the kernel's choice,
 * no doorbell thread: the fuzzer is the only caller), a PD and a second PD, two RC QPs on port 1
 * connected to a peer that does not exist (GID ::ffff:127.0.0.2), each with a receive queue of
 * kRqSlots WQEs over the receive buffers, QP 0 with remote read, write and atomic enabled and
 * path MTU 1024, QP 1 with remote write only and path MTU 256, and a UD QP (Q_Key kUdQkey,
 * MTU 1024) whose receive WQEs name the same buffers as QP 1's. The data area, all of it
 * DMA-mapped, holds the regions of the keys (fuzz_roce_datagram_format.h, Key) with unregistered
 * guard bytes around each (regions start and end inside pages, so that the guards share pages with
 * them):
 *
 *   data: | guard | rw (inv inside) | guard | ro | guard | local | guard | other PD | guard |
 *         | recv | guard | sink | guard page |
 *
 * Each input is a few datagrams (fuzz_roce_datagram_format.h): built from a template by
 * roce::build (a right ICRC, live rkeys and addresses moved by the input, any opcode and PSN,
 * then byte patches and an optional reseal) or raw bytes. They go in through
 * EmuDataPath::wire_inject, the receive path of poll_wire without the socket.
 *
 * When the input asks, QP 0 first posts an RDMA READ into the sink (to the peer that does not
 * exist), so that READ RESPONSEs, ACKs and NAKs from the input meet a request waiting: the
 * requester's side of untrusted bytes.
 *
 * Properties checked after every input: every byte of the data area outside the rw and recv
 * regions and the READ's SGE is what it was (guards, the read-only, local-only and other-PD
 * regions: a refused request writes nothing, a READ or an atomic on the read-only key writes
 * nothing); the device's invariants hold; the QPs are in RTS or ERR; every CQE written names one of
 * the QPs with a responder opcode (or is QP 0's READ's), and a SEND's byte count fits its receive
 * WQE. ASan finds reads and writes outside the mapping, crashes and leaks.
 *
 * Inputs are independent: after each one the rw and recv regions are restored, each QP goes
 * 2RST -> INIT -> RTR -> RTS (its PSNs, its RQ, the state of a half-received message and its
 * saved atomics start again), its RQ is filled again, the CQ's consumer index catches up, and
 * the en_rinval key, which a SEND with invalidate may have invalidated, is made again. (2RST
 * also forgets QP 0's READ.)
 */
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <netinet/in.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "emu_mlx5.h"
#include "fuzz_roce_datagram_format.h"
#include "fuzz_util.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"
#include "roce_packet.h"

namespace {

using namespace nicmr;
using namespace nicmr::emu;
using namespace nicmr::roce::fuzz_dgram;
namespace prm = nicmr::mlx5::prm;
namespace roce = nicmr::roce;

/* Memory, mapped at kIova (and one more page after it, mapped to nothing):
 *   [0, 8K) pages given to the device  [8K, 12K) EQ  [12K, 28K) CQ  [28K, 32K) records
 *   [32K, 40K) the QPs' buffers (RQ, then SQ)  [64K, 64K + kDataLen) the data area */
constexpr uint64_t kIova = 0x40000000;
constexpr size_t kEq = 8 * 1024;
constexpr size_t kCq = 12 * 1024;
constexpr uint32_t kLogCq = 8; /* 256 CQEs: 16 KiB */
constexpr size_t kRecords = 28 * 1024;
constexpr size_t kQpBuf = 32 * 1024;
constexpr size_t kData = 64 * 1024;
constexpr size_t kDataLen = 0x13000;
constexpr size_t kLen = kData + kDataLen;
constexpr uint32_t kLogRq = 3; /* 8 receive WQEs per QP */
constexpr uint32_t kRqSlots = 1u << kLogRq;
constexpr uint32_t kLogRqStride = 1; /* 32-byte slots: two data segments */
constexpr uint32_t kSgeLen = 256;
constexpr uint32_t kLogSq = 2;
constexpr uint32_t kQps = 2;
constexpr uint32_t kRemoteQpn[kQps] = {0x4242, 0x4243};
constexpr uint32_t kUd = kQps; /* qp[kUd]: the UD QP, its buffer and record after the others' */

/* The regions of the keys in the data area: offset and length (Key order). */
struct Region {
	size_t off, len;
};
constexpr Region kRegion[kKeys] = {
	{0x1010, 0x3fe0},  /* rw: not page-aligned at either end */
	{0x6008, 0x1ff0},  /* ro */
	{0x9000, 0x2000},  /* local */
	{0xc004, 0x1000},  /* other PD */
	{0xe000, 0x2000},  /* recv: kQps * kRqSlots * 2 SGEs of kSgeLen */
	{0x2000, 0x1000},  /* inv: inside rw */
	{0x10010, 0x1fe0}, /* sink */
};
/* Where QP 0's READ lands: kReadLen bytes from this offset of the sink region. */
constexpr size_t kReadAt = 16;
static_assert(kQps * kRqSlots * 2 * kSgeLen == 0x2000);

uint64_t va_of(Key k)
{
	return kIova + kData + kRegion[k].off;
}

/* Whether data-area byte i may change: it lies in the rw or the recv region, or (read: a READ
 * was posted) under the READ's SGE. */
bool writable(size_t i, bool read)
{
	for (Key k : {key_rw, key_recv})
		if (i >= kRegion[k].off && i < kRegion[k].off + kRegion[k].len)
			return true;
	const size_t at = kRegion[key_sink].off + kReadAt;
	return read && i >= at && i < at + kReadLen;
}

using nicmr::fuzz::Reader;

std::vector<uint8_t> cmd(uint16_t op, size_t len, uint16_t op_mod = 0)
{
	std::vector<uint8_t> in(len, 0);
	prm::set(in.data(), prm::cmd_hdr_in::opcode, op);
	prm::set(in.data(), prm::cmd_hdr_in::op_mod, op_mod);
	return in;
}

struct Rig {
	std::unique_ptr<EmuMlx5> emu;
	uint8_t *base = nullptr; /* kLen + 4096 bytes, the last page PROT_NONE */
	uint32_t pd = 0, pd2 = 0, uar = 0, cq = 0;
	uint32_t qp[kQps + 1] = {};
	uint32_t keys[kKeys] = {};
	uint64_t cq_produced = 0; /* CQEs the device wrote so far */
	sockaddr_storage peer{}, stranger{};
	std::vector<uint8_t> pristine; /* the data area as set up */

	EmuMlx5Device &dev() { return emu->device(); }

	/* One command through the flat decoder; the status (out gets the output). */
	uint8_t exec(std::vector<uint8_t> &in, size_t out_len, std::vector<uint8_t> *out = nullptr)
	{
		std::vector<uint8_t> o(std::max<size_t>(out_len, 16));
		const CmdResult r = dev().execute(in.data(), in.size(), o.data(), out_len);
		if (out != nullptr)
			*out = std::move(o);
		return r.status;
	}

	uint32_t create_mkey(Key k, uint32_t in_pd, bool lw, bool rr, bool rw, bool a, bool rinval,
			     uint8_t variant)
	{
		const uint64_t start = va_of(k);
		const uint64_t first = start & ~uint64_t{4095};
		const size_t pages = (start + kRegion[k].len - first + 4095) / 4096;
		std::vector<uint8_t> mtt((pages + 1) / 2 * 16); /* whole octwords */
		for (size_t p = 0; p < pages; p++)
			prm::set(mtt.data() + 8 * p, prm::mtt::address, first + p * 4096);
		auto in = cmd(prm::opcode::create_mkey, prm::create_mkey_in::size + mtt.size());
		uint8_t *m = in.data() + prm::create_mkey_in::mkc_offset;
		prm::set_access_mode(m, prm::access_mode::mtt);
		prm::set(m, prm::mkc::lr, 1);
		prm::set(m, prm::mkc::lw, lw);
		prm::set(m, prm::mkc::rr, rr);
		prm::set(m, prm::mkc::rw, rw);
		prm::set(m, prm::mkc::a, a);
		prm::set(m, prm::mkc::en_rinval, rinval);
		prm::set(m, prm::mkc::qpn, prm::mkc::qpn_any);
		prm::set(m, prm::mkc::mkey_7_0, variant);
		prm::set(m, prm::mkc::pd, in_pd);
		prm::set(m, prm::mkc::start_addr, start);
		prm::set(m, prm::mkc::len, kRegion[k].len);
		prm::set(m, prm::mkc::log_page_size, 12);
		prm::set(m, prm::mkc::translations_octword_size, mtt.size() / 16);
		prm::set(in.data(), prm::create_mkey_in::translations_octword_actual_size,
			 mtt.size() / 16);
		std::memcpy(in.data() + prm::create_mkey_in::translations_offset, mtt.data(),
			    mtt.size());
		std::vector<uint8_t> out;
		FUZZ_CHECK(exec(in, prm::create_mkey_out::size, &out) == prm::status::ok);
		return static_cast<uint32_t>(prm::get(out.data(), prm::create_mkey_out::mkey_index))
			       << 8 |
		       variant;
	}

	void make_inv_key()
	{
		keys[key_inv] = create_mkey(key_inv, pd, true, true, true, true, true, 0x5a);
	}

	/* 2RST (when not in RST), INIT, RTR, RTS; then the RQ full again. */
	void connect(uint32_t i, bool from_rst)
	{
		if (!from_rst) {
			auto t = cmd(prm::opcode::qp_2rst, prm::qp_2rst_in::size);
			prm::set(t.data(), prm::qp_2rst_in::qpn, qp[i]);
			FUZZ_CHECK(exec(t, 16) == prm::status::ok);
		}
		for (uint16_t op : {prm::opcode::rst2init_qp, prm::opcode::init2rtr_qp,
				    prm::opcode::rtr2rts_qp}) {
			auto t = cmd(op, prm::modify_qp_in::size);
			prm::set(t.data(), prm::modify_qp_in::qpn, qp[i]);
			uint8_t *qpc = t.data() + prm::modify_qp_in::qpc_offset;
			if (i == kUd) {
				/* UD: the port and Q_Key, a path MTU; no address path. */
				prm::set(qpc, prm::qpc::primary_vhca_port_num, 1);
				prm::set(qpc, prm::qpc::q_key, kUdQkey);
				prm::set(qpc, prm::qpc::mtu, prm::qp_mtu::mtu_1024);
				FUZZ_CHECK(exec(t, 16) == prm::status::ok);
				continue;
			}
			if (op == prm::opcode::rst2init_qp) {
				prm::set(qpc, prm::qpc::primary_vhca_port_num, 1);
				/* QP 0 takes every remote operation, QP 1 writes only. */
				prm::set(qpc, prm::qpc::rre, i == 0);
				prm::set(qpc, prm::qpc::rwe, 1);
				prm::set(qpc, prm::qpc::rae, i == 0);
			}
			if (op == prm::opcode::init2rtr_qp) {
				prm::set(qpc, prm::qpc::remote_qpn, kRemoteQpn[i]);
				/* Two path MTUs: a SEND of several packets fits QP 1's
				 * receive WQEs. */
				prm::set(qpc, prm::qpc::mtu,
					 i == 0 ? prm::qp_mtu::mtu_1024 : prm::qp_mtu::mtu_256);
				prm::set(qpc, prm::qpc::log_msg_max, 30);
				prm::set(qpc, prm::qpc::primary_src_addr_index, 0);
				uint8_t *rgid = qpc + prm::qpc::primary_rgid_rip_offset;
				std::memset(rgid, 0, prm::qpc::rgid_size);
				rgid[10] = rgid[11] = 0xff;
				std::memcpy(rgid + 12,
					    &reinterpret_cast<const sockaddr_in &>(peer).sin_addr,
					    4);
				prm::set(qpc, prm::qpc::next_rcv_psn, kFirstPsn);
				prm::set(qpc, prm::qpc::min_rnr_nak, 1);
				prm::set(qpc, prm::qpc::log_rra_max, i);
			}
			if (op == prm::opcode::rtr2rts_qp) {
				prm::set(qpc, prm::qpc::next_send_psn, kFirstSendPsn);
				prm::set(qpc, prm::qpc::log_sra_max, 2);
				prm::set(qpc, prm::qpc::retry_count, 7);
				prm::set(qpc, prm::qpc::rnr_retry, 7);
				prm::set(qpc, prm::qpc::primary_ack_timeout, 14);
			}
			FUZZ_CHECK(exec(t, 16) == prm::status::ok);
		}
		/* RST set the device's counters to 0: kRqSlots receive WQEs are posted again,
		 * no send WQE. */
		const uint32_t be[2] = {htobe32(kRqSlots), 0};
		std::memcpy(base + kRecords + 0x100 * (i + 1), be, sizeof(be));
	}

	/* QP 0 posts an RDMA READ of kReadLen bytes into the sink (remote address and key made
	 * up: the request goes to a peer that does not exist) and runs its SQ. */
	void post_read()
	{
		uint8_t *w = base + kQpBuf + (kRqSlots << (4 + kLogRqStride));
		std::memset(w, 0, 64);
		prm::set(w, prm::wqe_ctrl::opcode, MLX5_OPCODE_RDMA_READ);
		prm::set(w, prm::wqe_ctrl::wqe_index, 0);
		prm::set(w, prm::wqe_ctrl::qpn, qp[0]);
		prm::set(w, prm::wqe_ctrl::ds, 3);
		prm::set(w, prm::wqe_ctrl::fm_ce_se, MLX5_WQE_CTRL_CQ_UPDATE);
		prm::set(w + 16, prm::wqe_raddr::raddr, 0x10000);
		prm::set(w + 16, prm::wqe_raddr::rkey, 0x1234);
		prm::set(w + 32, prm::wqe_data::byte_count, kReadLen);
		prm::set(w + 32, prm::wqe_data::lkey, keys[key_sink]);
		prm::set(w + 32, prm::wqe_data::addr, va_of(key_sink) + kReadAt);
		const uint32_t pi = htobe32(1);
		std::memcpy(base + kRecords + 0x100 + 4, &pi, 4);
		FUZZ_CHECK(dev().data_path().process_qp(qp[0]) == 0);
	}

	bool set_up()
	{
		EmuConfig cfg;
		cfg.name = "fuzz-dgram";
		cfg.bar0_size = 4 * 4096;
		cfg.uars = 2;
		cfg.log_max_mkey = 6;
		cfg.log_max_pd = 3;
		cfg.boot_pages = 1;
		cfg.init_pages = 1;
		cfg.regular_pages = 0;
		cfg.max_pages = 8;
		cfg.log_max_qp = 3;
		cfg.log_max_cq = 3;
		cfg.start = false; /* no doorbell or progress thread: inputs run alone */
		cfg.wire[0].addr = "127.0.0.1";
		cfg.wire[0].udp_port = 0;      /* the kernel's choice: runs in parallel */
		cfg.wire[0].peer_udp_port = 9; /* what it answers goes nowhere */
		cfg.wire[0].raw_rx = false;
		cfg.wire[0].gso = false;
		FUZZ_CHECK(emu_mlx5_create(cfg, &emu) == 0);
		void *p = mmap(nullptr, kLen + 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		FUZZ_CHECK(p != MAP_FAILED);
		base = static_cast<uint8_t *>(p);
		FUZZ_CHECK(mprotect(base + kLen, 4096, PROT_NONE) == 0);
		FUZZ_CHECK(emu->iommu().dma_map(base, kIova, kLen) == 0);
		FUZZ_CHECK(emu->function().set_bus_master(true) == 0);

		auto en = cmd(prm::opcode::enable_hca, prm::enable_hca_in::size);
		FUZZ_CHECK(exec(en, 16) == prm::status::ok);
		auto give = cmd(prm::opcode::manage_pages, prm::manage_pages_in::pas_offset + 16,
				prm::manage_pages_op_mod::give);
		prm::set(give.data(), prm::manage_pages_in::input_num_entries, 2);
		for (int i = 0; i < 2; i++)
			prm::set(give.data() + prm::manage_pages_in::pas_offset + 8 * i,
				 prm::pas_entry, kIova + 4096 * i);
		FUZZ_CHECK(exec(give, 16) == prm::status::ok);
		auto init = cmd(prm::opcode::init_hca, prm::init_hca_in::size);
		FUZZ_CHECK(exec(init, 16) == prm::status::ok);
		std::vector<uint8_t> out;
		for (uint32_t *which : {&pd, &pd2}) {
			auto c = cmd(prm::opcode::alloc_pd, prm::alloc_pd_in::size);
			FUZZ_CHECK(exec(c, 16, &out) == prm::status::ok);
			*which = static_cast<uint32_t>(prm::get(out.data(), prm::alloc_pd_out::pd));
		}
		auto u = cmd(prm::opcode::alloc_uar, prm::alloc_uar_in::size);
		FUZZ_CHECK(exec(u, 16, &out) == prm::status::ok);
		uar = static_cast<uint32_t>(prm::get(out.data(), prm::alloc_uar_out::uar));

		/* An EQ that takes no event: the QPs' error events are dropped, so that no
		 * unconsumed EQ overruns into the fatal health syndrome. */
		auto eq = cmd(prm::opcode::create_eq, prm::create_eq_in::size + 8);
		prm::set(eq.data() + prm::create_eq_in::eqc_offset, prm::eqc::log_eq_size, 2);
		prm::set(eq.data(), prm::create_eq_in::event_bitmask, 0);
		prm::set(eq.data() + prm::create_eq_in::pas_offset, prm::pas_entry, kIova + kEq);
		FUZZ_CHECK(exec(eq, prm::create_eq_out::size, &out) == prm::status::ok);
		const auto eqn =
			static_cast<uint32_t>(prm::get(out.data(), prm::create_eq_out::eq_number));

		/* One CQ for both QPs' send and receive completions. */
		invalidate_cqes();
		constexpr size_t cq_pages = (size_t{64} << kLogCq) / 4096;
		auto c = cmd(prm::opcode::create_cq, prm::create_cq_in::size + 8 * cq_pages);
		uint8_t *cqc = c.data() + prm::create_cq_in::cqc_offset;
		prm::set(cqc, prm::cqc::log_cq_size, kLogCq);
		prm::set(cqc, prm::cqc::dbr_addr, kIova + kRecords);
		prm::set(cqc, prm::cqc::c_eqn, eqn);
		for (size_t i = 0; i < cq_pages; i++)
			prm::set(c.data() + prm::create_cq_in::pas_offset + 8 * i, prm::pas_entry,
				 kIova + kCq + 4096 * i);
		FUZZ_CHECK(exec(c, 16, &out) == prm::status::ok);
		cq = static_cast<uint32_t>(prm::get(out.data(), prm::create_cq_out::cqn));

		/* The data area: a pattern, so that a write of zeros shows too. */
		for (size_t i = 0; i < kDataLen; i++)
			base[kData + i] = static_cast<uint8_t>(i * 13 + (i >> 9) + 1);
		keys[key_rw] = create_mkey(key_rw, pd, true, true, true, true, false, 0x11);
		keys[key_ro] = create_mkey(key_ro, pd, false, true, false, false, false, 0x22);
		keys[key_local] =
			create_mkey(key_local, pd, true, false, false, false, false, 0x33);
		keys[key_other_pd] =
			create_mkey(key_other_pd, pd2, true, true, true, true, true, 0x44);
		keys[key_recv] = create_mkey(key_recv, pd, true, false, false, false, false, 0x55);
		keys[key_sink] = create_mkey(key_sink, pd, true, false, false, false, false, 0x66);
		make_inv_key();
		pristine.assign(base + kData, base + kData + kDataLen);

		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_port = htons(49152);
		FUZZ_CHECK(inet_pton(AF_INET, "127.0.0.2", &a.sin_addr) == 1);
		std::memcpy(&peer, &a, sizeof(a));
		FUZZ_CHECK(inet_pton(AF_INET, "127.0.0.3", &a.sin_addr) == 1);
		std::memcpy(&stranger, &a, sizeof(a));

		for (uint32_t i = 0; i <= kUd; i++) {
			/* The receive WQEs: two SGEs of kSgeLen each in the recv region (the UD
			 * QP's over QP 1's buffers). */
			uint8_t *buf = base + kQpBuf + 4096 * i;
			const uint32_t owner = i == kUd ? 1 : i;
			for (uint32_t s = 0; s < kRqSlots; s++) {
				for (uint32_t g = 0; g < 2; g++) {
					uint8_t *d = buf + (s << (4 + kLogRqStride)) + 16 * g;
					const uint64_t at =
						va_of(key_recv) +
						((owner * kRqSlots + s) * 2 + g) * kSgeLen;
					prm::set(d, prm::wqe_data::byte_count, kSgeLen);
					prm::set(d, prm::wqe_data::lkey, keys[key_recv]);
					prm::set(d, prm::wqe_data::addr, at);
				}
			}
			auto q = cmd(prm::opcode::create_qp, prm::create_qp_in::size + 8);
			uint8_t *qpc = q.data() + prm::create_qp_in::qpc_offset;
			prm::set(qpc, prm::qpc::st, i == kUd ? prm::qp_st::ud : prm::qp_st::rc);
			prm::set(qpc, prm::qpc::pd, pd);
			prm::set(qpc, prm::qpc::cqn_snd, cq);
			prm::set(qpc, prm::qpc::cqn_rcv, cq);
			prm::set(qpc, prm::qpc::uar_page, uar);
			prm::set(qpc, prm::qpc::log_sq_size, kLogSq);
			prm::set(qpc, prm::qpc::rq_type, prm::qp_rq_type::regular);
			prm::set(qpc, prm::qpc::log_rq_size, kLogRq);
			prm::set(qpc, prm::qpc::log_rq_stride, kLogRqStride);
			prm::set(qpc, prm::qpc::dbr_addr, kIova + kRecords + 0x100 * (i + 1));
			prm::set(q.data() + prm::create_qp_in::pas_offset, prm::pas_entry,
				 kIova + kQpBuf + 4096 * i);
			FUZZ_CHECK(exec(q, 16, &out) == prm::status::ok);
			qp[i] = static_cast<uint32_t>(
				prm::get(out.data(), prm::create_qp_out::qpn));
			connect(i, true);
		}
		return true;
	}

	void invalidate_cqes()
	{
		for (uint32_t k = 0; k < (1u << kLogCq); k++)
			base[kCq + 64 * k + 63] = MLX5_CQE_INVALID << 4;
	}

	/* The CQEs of this input: each names a QP and is a responder's (a SEND's fits its
	 * receive WQE); then the consumer index catches up. */
	void check_cqes()
	{
		uint32_t n = 0;
		for (uint32_t k = 0; k < (1u << kLogCq); k++) {
			const uint8_t *c = base + kCq + 64 * k;
			const uint8_t op = c[63] >> 4;
			if (op == MLX5_CQE_INVALID)
				continue;
			n++;
			const auto qpn = static_cast<uint32_t>(prm::get(c, prm::cqe::qpn));
			FUZZ_CHECK(qpn == qp[0] || qpn == qp[1] || qpn == qp[kUd]);
			/* A UD receive: the GRH and the payload fit the WQE, and only the UD QP's
			 * CQEs say GRH. */
			FUZZ_CHECK((prm::get(c, prm::cqe::grh) != 0) ==
				   (qpn == qp[kUd] && op != MLX5_CQE_RESP_ERR));
			/* A requester's CQE: QP 0's READ, the one send WQE there is. */
			if (op == MLX5_CQE_REQ || op == MLX5_CQE_REQ_ERR) {
				FUZZ_CHECK(qpn == qp[0] && prm::get(c, prm::cqe::wqe_counter) == 0);
				continue;
			}
			FUZZ_CHECK(op == MLX5_CQE_RESP_SEND || op == MLX5_CQE_RESP_SEND_IMM ||
				   op == MLX5_CQE_RESP_SEND_INV || op == MLX5_CQE_RESP_WR_IMM ||
				   op == MLX5_CQE_RESP_ERR);
			if (op == MLX5_CQE_RESP_SEND || op == MLX5_CQE_RESP_SEND_IMM ||
			    op == MLX5_CQE_RESP_SEND_INV)
				FUZZ_CHECK(prm::get(c, prm::cqe::byte_cnt) <= 2 * kSgeLen);
		}
		FUZZ_CHECK(n < (1u << kLogCq));
		cq_produced += n;
		const uint32_t ci = htobe32(static_cast<uint32_t>(cq_produced & 0xffffff));
		std::memcpy(base + kRecords, &ci, 4);
		invalidate_cqes();
	}

	void reset()
	{
		std::memcpy(base + kData + kRegion[key_rw].off,
			    pristine.data() + kRegion[key_rw].off, kRegion[key_rw].len);
		std::memcpy(base + kData + kRegion[key_recv].off,
			    pristine.data() + kRegion[key_recv].off, kRegion[key_recv].len);
		std::memcpy(base + kData + kRegion[key_sink].off,
			    pristine.data() + kRegion[key_sink].off, kRegion[key_sink].len);
		for (uint32_t i = 0; i <= kUd; i++)
			connect(i, false);
		auto d = cmd(prm::opcode::destroy_mkey, prm::destroy_mkey_in::size);
		prm::set(d.data(), prm::destroy_mkey_in::mkey_index,
			 prm::mkey::index(keys[key_inv]));
		FUZZ_CHECK(exec(d, 16) == prm::status::ok);
		make_inv_key();
	}
};

Rig *rig;
bool verbose; /* NICMR_FUZZ_VERBOSE set: the wire counters after each input, on stderr */

/* One template packet: built, patched, maybe resealed, injected. */
void template_packet(Reader &rd, uint8_t kind, const roce::IpPath &path,
		     const sockaddr_storage &from)
{
	roce::Headers h;
	h.opcode = static_cast<uint8_t>(rd.u8() % roce::opcode::rc_count);
	const bool response = h.opcode >= roce::opcode::read_response_first &&
			      h.opcode <= roce::opcode::atomic_acknowledge;
	h.psn = ((response ? kFirstSendPsn : kFirstPsn) +
		 static_cast<uint32_t>(static_cast<int8_t>(rd.u8()))) &
		0xffffff;
	const uint8_t flags = rd.u8();
	const uint8_t key = rd.u8();
	const auto va_off = static_cast<int32_t>(rd.u32());
	const uint32_t len = rd.u32();
	const uint32_t word = rd.u32();
	const uint64_t swap_add = rd.u64();
	const uint64_t compare = rd.u64();
	const auto k = static_cast<Key>((key & 7) % kKeys);
	const uint32_t rkey = (flags & kHdrRawKey) != 0 ? word : rig->keys[k] ^ (key >> 3);
	const uint64_t va = va_of(k) + static_cast<uint64_t>(static_cast<int64_t>(va_off));
	h.dest_qp = (kind & kKindBadQpn) != 0 ? (rig->qp[(kind & kKindQp1) ? 1 : 0] ^ 0x7)
					      : rig->qp[(kind & kKindQp1) ? 1 : 0];
	h.ack_req = (flags & kHdrAckReq) != 0;
	h.se = (flags & kHdrSe) != 0;
	if ((flags & kHdrBadPkey) != 0)
		h.p_key = 0x7fff;
	h.reth = {va, rkey, len};
	h.atomic = {va, rkey, swap_add, compare};
	h.aeth = {static_cast<uint8_t>(word >> 24), word & 0xffffff};
	h.atomic_orig = swap_add;
	h.imm = word;
	h.ieth_r_key = (flags & kHdrRawKey) != 0 ? word : rkey;
	if ((kind & kKindUd) != 0) {
		/* A datagram to the UD QP (or next to it). */
		h.opcode = (h.opcode & 1) != 0 ? roce::opcode::ud_send_only_imm
					       : roce::opcode::ud_send_only;
		h.dest_qp = (kind & kKindBadQpn) != 0 ? rig->qp[kUd] + 1 : rig->qp[kUd];
		h.deth = {(flags & kHdrRawKey) != 0 ? word : kUdQkey, word & 0xffffff};
	}
	const size_t plen = std::min<size_t>(rd.u16(), roce::max_payload);
	static uint8_t payload[roce::max_payload];
	rd.bytes(payload, plen);
	const uint8_t npatch = static_cast<uint8_t>(std::min<uint32_t>(rd.u8(), kMaxPatches));
	uint16_t poff[kMaxPatches];
	uint8_t pval[kMaxPatches];
	for (uint32_t i = 0; i < npatch; i++) {
		poff[i] = rd.u16();
		pval[i] = rd.u8();
	}
	const bool carries =
		roce::opcode_info(h.opcode) != nullptr && roce::opcode_info(h.opcode)->payload;
	static uint8_t d[roce::max_datagram];
	size_t n = 0;
	if (roce::build(path, h, {payload, carries ? plen : 0}, d, &n) != roce::Error::ok)
		return;
	for (uint32_t i = 0; i < npatch; i++)
		d[poff[i] % n] = pval[i];
	if ((kind & kKindReseal) != 0)
		roce::store_icrc(d + n - roce::icrc_size, roce::icrc(path, d, n));
	/* An exact-size copy: a read past the datagram is an ASan report. */
	std::vector<uint8_t> exact(d, d + n);
	FUZZ_CHECK(rig->emu->device().data_path().wire_inject(1, exact.data(), exact.size(),
							      from) == 0);
}

void raw_packet(Reader &rd, uint8_t kind, const roce::IpPath &path, const sockaddr_storage &from)
{
	const size_t n = std::min<size_t>(rd.u16(), roce::max_datagram + 1);
	std::vector<uint8_t> d(n);
	rd.bytes(d.data(), n);
	if ((kind & kKindReseal) != 0 && n >= roce::bth::size + roce::icrc_size &&
	    n <= roce::max_datagram)
		roce::store_icrc(d.data() + n - roce::icrc_size, roce::icrc(path, d.data(), n));
	FUZZ_CHECK(rig->emu->device().data_path().wire_inject(1, d.data(), d.size(), from) == 0);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	nicmr::set_log_level(nicmr::LogLevel::error);
	verbose = std::getenv("NICMR_FUZZ_VERBOSE") != nullptr;
	rig = new Rig; /* for the process's life: libFuzzer exits without tearing down */
	FUZZ_CHECK(rig->set_up());
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Reader rd(data, size);
	const uint8_t first = rd.u8();
	const uint32_t packets = (first & 3) + 1;
	const bool read = (first & kInRead) != 0;
	if (read)
		rig->post_read();
	const WirePort *w = rig->dev().data_path().wire_port(1);
	FUZZ_CHECK(w != nullptr);
	for (uint32_t p = 0; p < packets && rd.left() != 0; p++) {
		const uint8_t kind = rd.u8();
		const sockaddr_storage &from = (kind & kKindStranger) ? rig->stranger : rig->peer;
		const roce::IpPath path = w->rx_path(from);
		if ((kind & kKindRaw) != 0)
			raw_packet(rd, kind, path, from);
		else
			template_packet(rd, kind, path, from);
	}

	/* Nothing outside the rw and recv regions moved: guards, read-only, local-only and
	 * other-PD memory. */
	const uint8_t *now = rig->base + kData;
	for (size_t i = 0; i < kDataLen; i++)
		FUZZ_CHECK(writable(i, read) || now[i] == rig->pristine[i]);
	FUZZ_CHECK(rig->dev().check_invariants());
	for (uint32_t i = 0; i <= kUd; i++) {
		QpState s;
		FUZZ_CHECK(rig->dev().data_path().qp_state(rig->qp[i], &s) == 0);
		FUZZ_CHECK(s == QpState::rts || s == QpState::err);
	}
	rig->check_cqes();
	if (verbose) {
		const WireStats ws = rig->dev().data_path().wire_stats();
		const DpStats ds = rig->dev().data_path().stats();
		std::fprintf(stderr,
			     "rx %llu bad_icrc %llu malformed %llu dropped %llu dup %llu acks %llu "
			     "naks %llu tx %llu recvs %llu bytes %llu cqes %llu\n",
			     (unsigned long long)ws.rx_packets, (unsigned long long)ws.rx_bad_icrc,
			     (unsigned long long)ws.rx_malformed, (unsigned long long)ws.rx_dropped,
			     (unsigned long long)ws.duplicates, (unsigned long long)ws.acks_sent,
			     (unsigned long long)ws.naks_sent, (unsigned long long)ws.tx_packets,
			     (unsigned long long)ds.recvs, (unsigned long long)ds.bytes,
			     (unsigned long long)ds.cqes);
	}
	rig->reset();
	return 0;
}
