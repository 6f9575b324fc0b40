/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target: random send queue contents for the mlx5 device model's WQE engine. A fresh
 * device per input, brought up through the command decoder with a PD, a UAR, an EQ, one CQ per
 * QP, two connected RC QPs (ports 1 and 2) and three keys: a live MTT key over the data area, a
 * free UMR-enabled key and a KLM key over both halves of the data area.
 *
 * Input:
 *   u8 flags   1: stamp opcodes from the subset over each WQE's opcode byte
 *              2: replace key words whose top byte is 0xff with one of the live keys
 *              4: run QP B too; 8: move QP B to ERR first (flush path)
 *              16: the producer counter is exactly the WQEBBs given
 *   u16 producer counter (big-endian)
 *   up to 16 WQEBBs of 64 bytes for QP A's SQ (then as many for QP B's when 4 is set)
 *   the rest: copied over the translation-list page (UMR by pointer)
 * Missing bytes read as zero.
 *
 * Properties checked after every input: the device's invariants hold; every CQE written has
 * opcode REQ or REQ_ERR and names the QP; the guard page after the data area (host memory,
 * mapped to nothing) is untouched; the QP states are ones the model defines. Crashes, hangs and
 * leaks are libFuzzer's and ASan's to find.
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "emu_mlx5.h"
#include "fuzz_util.h"
#include "mlx5_prm.h"
#include "nicmr_log.h"

namespace {

using namespace nicmr;
using namespace nicmr::emu;
namespace prm = nicmr::mlx5::prm;

/* Memory (mapped at kIova, one guard page after it unmapped):
 *   [0, 64K) pages given to the device   [64K, 128K) queues and records
 *   [128K, 132K) translation list         [256K, 512K) data area */
constexpr uint64_t kIova = 0x40000000;
constexpr size_t kLen = 512 * 1024;
constexpr size_t kQueues = 64 * 1024;
constexpr size_t kXlt = 128 * 1024;
constexpr size_t kData = 256 * 1024;
constexpr size_t kDataLen = 256 * 1024;
constexpr uint32_t kLogSq = 4; /* 16 WQEBBs: one page */
constexpr uint32_t kLogCq = 4;

struct Mem {
	Mem()
	{
		void *p = mmap(nullptr, kLen + 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		base = p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
		if (base != nullptr)
			std::memset(base + kLen, 0xa5, 4096);
	}
	~Mem()
	{
		if (base != nullptr)
			munmap(base, kLen + 4096);
	}
	uint8_t *base;
};

using nicmr::fuzz::Reader;

/* One command through the flat decoder; the status. */
uint8_t exec(EmuMlx5Device &d, std::vector<uint8_t> &in, size_t out_len,
	     std::vector<uint8_t> *out = nullptr)
{
	std::vector<uint8_t> o(std::max<size_t>(out_len, 16));
	CmdResult r = d.execute(in.data(), in.size(), o.data(), out_len);
	if (out != nullptr)
		*out = std::move(o);
	return r.status;
}

std::vector<uint8_t> cmd(uint16_t op, size_t len, uint16_t op_mod = 0)
{
	std::vector<uint8_t> in(len, 0);
	prm::set(in.data(), prm::cmd_hdr_in::opcode, op);
	prm::set(in.data(), prm::cmd_hdr_in::op_mod, op_mod);
	return in;
}

struct Bed {
	uint32_t pd = 0, uar = 0, cq[2] = {}, qp[2] = {};
	uint32_t keys[3] = {};
};

uint32_t create_mkey(EmuMlx5Device &d, uint32_t pd, uint32_t mode, bool free, uint64_t start,
		     uint64_t len, const std::vector<uint8_t> &xlt, uint32_t cap_oct,
		     uint32_t variant)
{
	auto in = cmd(prm::opcode::create_mkey, prm::create_mkey_in::size + xlt.size());
	uint8_t *m = in.data() + prm::create_mkey_in::mkc_offset;
	prm::set_access_mode(m, mode);
	prm::set(m, prm::mkc::free, free);
	prm::set(m, prm::mkc::umr_en, 1);
	for (prm::Field f : {prm::mkc::lr, prm::mkc::lw, prm::mkc::rr, prm::mkc::rw, prm::mkc::a})
		prm::set(m, f, 1);
	prm::set(m, prm::mkc::qpn, prm::mkc::qpn_any);
	prm::set(m, prm::mkc::mkey_7_0, variant);
	prm::set(m, prm::mkc::pd, pd);
	prm::set(m, prm::mkc::start_addr, start);
	prm::set(m, prm::mkc::len, len);
	prm::set(m, prm::mkc::log_page_size, 12);
	prm::set(m, prm::mkc::translations_octword_size, cap_oct);
	prm::set(in.data(), prm::create_mkey_in::translations_octword_actual_size, xlt.size() / 16);
	std::memcpy(in.data() + prm::create_mkey_in::translations_offset, xlt.data(), xlt.size());
	std::vector<uint8_t> out;
	FUZZ_CHECK(exec(d, in, prm::create_mkey_out::size, &out) == prm::status::ok);
	return static_cast<uint32_t>(prm::get(out.data(), prm::create_mkey_out::mkey_index)) << 8 |
	       variant;
}

bool bring_up(EmuMlx5Device &d, Mem &m, Bed *b)
{
	auto en = cmd(prm::opcode::enable_hca, prm::enable_hca_in::size);
	FUZZ_CHECK(exec(d, en, 16) == prm::status::ok);
	auto give = cmd(prm::opcode::manage_pages, prm::manage_pages_in::pas_offset + 16,
			prm::manage_pages_op_mod::give);
	prm::set(give.data(), prm::manage_pages_in::input_num_entries, 2);
	for (int i = 0; i < 2; i++)
		prm::set(give.data() + prm::manage_pages_in::pas_offset + 8 * i, prm::pas_entry,
			 kIova + 4096 * i);
	FUZZ_CHECK(exec(d, give, 16) == prm::status::ok);
	auto init = cmd(prm::opcode::init_hca, prm::init_hca_in::size);
	FUZZ_CHECK(exec(d, init, 16) == prm::status::ok);
	std::vector<uint8_t> out;
	auto pd = cmd(prm::opcode::alloc_pd, prm::alloc_pd_in::size);
	FUZZ_CHECK(exec(d, pd, 16, &out) == prm::status::ok);
	b->pd = static_cast<uint32_t>(prm::get(out.data(), prm::alloc_pd_out::pd));
	auto uar = cmd(prm::opcode::alloc_uar, prm::alloc_uar_in::size);
	FUZZ_CHECK(exec(d, uar, 16, &out) == prm::status::ok);
	b->uar = static_cast<uint32_t>(prm::get(out.data(), prm::alloc_uar_out::uar));

	auto eq = cmd(prm::opcode::create_eq, prm::create_eq_in::size + 8);
	prm::set(eq.data() + prm::create_eq_in::eqc_offset, prm::eqc::log_eq_size, 2);
	prm::set(eq.data(), prm::create_eq_in::event_bitmask, ~uint64_t{0});
	prm::set(eq.data() + prm::create_eq_in::pas_offset, prm::pas_entry, kIova + kQueues);
	FUZZ_CHECK(exec(d, eq, prm::create_eq_out::size, &out) == prm::status::ok);
	const auto eqn = static_cast<uint32_t>(prm::get(out.data(), prm::create_eq_out::eq_number));
	for (int i = 0; i < 2; i++) {
		const uint64_t ring = kIova + kQueues + 4096 * (1 + i);
		const uint64_t dbr = kIova + kQueues + 4096 * 5 + 64 * i;
		for (int k = 0; k < (1 << kLogCq); k++)
			m.base[kQueues + 4096 * (1 + i) + 64 * k + 63] = MLX5_CQE_INVALID << 4 | 1;
		auto c = cmd(prm::opcode::create_cq, prm::create_cq_in::size + 8);
		uint8_t *cqc = c.data() + prm::create_cq_in::cqc_offset;
		prm::set(cqc, prm::cqc::log_cq_size, kLogCq);
		prm::set(cqc, prm::cqc::dbr_addr, dbr);
		prm::set(cqc, prm::cqc::c_eqn, eqn); /* a CQ names an EQ that exists */
		prm::set(c.data() + prm::create_cq_in::pas_offset, prm::pas_entry, ring);
		FUZZ_CHECK(exec(d, c, 16, &out) == prm::status::ok);
		b->cq[i] = static_cast<uint32_t>(prm::get(out.data(), prm::create_cq_out::cqn));

		auto q = cmd(prm::opcode::create_qp, prm::create_qp_in::size + 8);
		uint8_t *qpc = q.data() + prm::create_qp_in::qpc_offset;
		prm::set(qpc, prm::qpc::pd, b->pd);
		prm::set(qpc, prm::qpc::cqn_snd, b->cq[i]);
		prm::set(qpc, prm::qpc::uar_page, b->uar);
		prm::set(qpc, prm::qpc::log_sq_size, kLogSq);
		/* rq_type 0 is a regular RQ, which would need cqn_rcv and room before the SQ. */
		prm::set(qpc, prm::qpc::rq_type, prm::qp_rq_type::zero_len);
		prm::set(qpc, prm::qpc::dbr_addr, dbr + 0x800);
		/* UMR-capable, as the kernel makes its QPs: the UMR paths stay reachable. */
		prm::set(qpc, prm::qpc::fre, 1);
		prm::set(qpc, prm::qpc::rlky, 1);
		prm::set(q.data() + prm::create_qp_in::pas_offset, prm::pas_entry,
			 kIova + kQueues + 4096 * (3 + i));
		FUZZ_CHECK(exec(d, q, 16, &out) == prm::status::ok);
		b->qp[i] = static_cast<uint32_t>(prm::get(out.data(), prm::create_qp_out::qpn));
	}
	for (int i = 0; i < 2; i++) {
		for (uint16_t op : {prm::opcode::rst2init_qp, prm::opcode::init2rtr_qp,
				    prm::opcode::rtr2rts_qp}) {
			auto t = cmd(op, prm::modify_qp_in::size);
			prm::set(t.data(), prm::modify_qp_in::qpn, b->qp[i]);
			uint8_t *qpc = t.data() + prm::modify_qp_in::qpc_offset;
			prm::set(qpc, prm::qpc::primary_vhca_port_num, i + 1);
			prm::set(qpc, prm::qpc::remote_qpn, b->qp[1 - i]);
			prm::set(qpc, prm::qpc::rre, 1);
			prm::set(qpc, prm::qpc::rwe, 1);
			prm::set(qpc, prm::qpc::rae, 1);
			if (op == prm::opcode::init2rtr_qp) {
				/* An RC connection as the driver makes it: force loopback, MTU
				 * 1024, messages up to 2^30 bytes. */
				prm::set(qpc, prm::qpc::primary_fl, 1);
				prm::set(qpc, prm::qpc::mtu, prm::qp_mtu::mtu_1024);
				prm::set(qpc, prm::qpc::log_msg_max, 30);
			}
			FUZZ_CHECK(exec(d, t, 16) == prm::status::ok);
		}
	}
	std::vector<uint8_t> mtt(kDataLen / 4096 * 8);
	for (size_t p = 0; p < kDataLen / 4096; p++)
		prm::set(mtt.data() + 8 * p, prm::mtt::address, kIova + kData + p * 4096);
	b->keys[0] = create_mkey(d, b->pd, prm::access_mode::mtt, false, 0x7000000, kDataLen, mtt,
				 static_cast<uint32_t>(mtt.size() / 16), 0x31);
	b->keys[1] = create_mkey(d, b->pd, prm::access_mode::mtt, true, 0, 0, {}, 8, 0x32);
	std::vector<uint8_t> klm(32);
	prm::set(klm.data(), prm::klm::byte_count, kDataLen / 2);
	prm::set(klm.data(), prm::klm::mkey, b->keys[0]);
	prm::set(klm.data(), prm::klm::address, 0x7000000 + kDataLen / 2);
	prm::set(klm.data() + 16, prm::klm::byte_count, kDataLen / 2);
	prm::set(klm.data() + 16, prm::klm::mkey, b->keys[0]);
	prm::set(klm.data() + 16, prm::klm::address, 0x7000000);
	b->keys[2] = create_mkey(d, b->pd, prm::access_mode::klm, false, 0x9000000, kDataLen, klm,
				 2, 0x33);
	return true;
}

constexpr uint8_t kOps[] = {MLX5_OPCODE_NOP,	   MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_READ,
			    MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA,  MLX5_OPCODE_LOCAL_INVAL,
			    MLX5_OPCODE_UMR};

/* Fills QP i's SQ from the input; returns the WQEBBs given. */
uint32_t fill_sq(Reader &rd, Mem &m, int i, uint8_t flags, const Bed &b)
{
	uint8_t *sq = m.base + kQueues + 4096 * (3 + i);
	const uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(rd.left() / 64), 1u << kLogSq);
	rd.bytes(sq, size_t{n} * 64);
	for (uint32_t w = 0; w < n; w++) {
		uint8_t *bb = sq + 64 * w;
		if (flags & 1)
			bb[3] = kOps[bb[3] % sizeof(kOps)];
		if (flags & 2) {
			for (size_t off = 0; off + 4 <= 64; off += 4) {
				if (bb[off] == 0xff)
					prm::set(bb + off, prm::Field{0, 32},
						 b.keys[bb[off + 3] % 3]);
			}
		}
	}
	return n;
}

void ring(EmuFunction &fn, Mem &m, int i, uint16_t pi, uint32_t uar)
{
	const uint64_t dbr_off = kQueues + 4096 * 5 + 64 * i + 0x800;
	uint32_t be = htobe32(pi);
	std::memcpy(m.base + dbr_off + 4, &be, 4);
	uint64_t v;
	std::memcpy(&v, m.base + kQueues + 4096 * (3 + i), 8);
	fn.bar0_write64(prm::uar::page_offset(uar) + prm::uar::sq_doorbell_offset, v);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	nicmr::set_log_level(nicmr::LogLevel::error);
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Reader rd(data, size);
	EmuConfig cfg;
	cfg.bar0_size = 4 * 4096;
	cfg.uars = 2;
	cfg.log_max_mkey = 6;
	cfg.log_max_pd = 3;
	cfg.boot_pages = 1;
	cfg.init_pages = 1;
	cfg.regular_pages = 0; /* no page request to answer: the bring-up below has no EQ yet */
	cfg.max_pages = 8;
	cfg.log_max_qp = 3;
	cfg.log_max_cq = 3;
	/* UMR work requests are traced: the trace's UMR decoder reads the same random WQEs. */
	cfg.trace_capacity = 64;
	std::unique_ptr<EmuMlx5> emu;
	FUZZ_CHECK(emu_mlx5_create(cfg, &emu) == 0);
	Mem m;
	FUZZ_CHECK(m.base != nullptr);
	FUZZ_CHECK(emu->iommu().dma_map(m.base, kIova, kLen) == 0);
	/* The fuzzer is the driver: no DMA reaches the model before Bus Master Enable. */
	FUZZ_CHECK(emu->function().set_bus_master(true) == 0);
	EmuMlx5Device &d = emu->device();
	Bed b;
	bring_up(d, m, &b);

	const uint8_t flags = rd.u8();
	const auto pi_hi = rd.u8();
	const auto pi = static_cast<uint16_t>(pi_hi << 8 | rd.u8());
	if (flags & 8) {
		auto t = cmd(prm::opcode::qp_2err, prm::qp_2err_in::size);
		prm::set(t.data(), prm::qp_2err_in::qpn, b.qp[1]);
		FUZZ_CHECK(exec(d, t, 16) == prm::status::ok);
	}
	const uint32_t na = fill_sq(rd, m, 0, flags, b);
	const uint32_t nb = (flags & 4) ? fill_sq(rd, m, 1, flags, b) : 0;
	rd.bytes(m.base + kXlt, std::min<size_t>(rd.left(), 4096));

	ring(emu->emu_function(), m, 0, (flags & 16) ? static_cast<uint16_t>(na) : pi, b.uar);
	if (flags & 4)
		ring(emu->emu_function(), m, 1, (flags & 16) ? static_cast<uint16_t>(nb) : pi,
		     b.uar);

	FUZZ_CHECK(d.check_invariants());
	for (int i = 0; i < 2; i++) {
		QpState s;
		FUZZ_CHECK(d.data_path().qp_state(b.qp[i], &s) == 0);
		FUZZ_CHECK(s == QpState::rts || s == QpState::err);
		for (int k = 0; k < (1 << kLogCq); k++) {
			const uint8_t *c = m.base + kQueues + 4096 * (1 + i) + 64 * k;
			const uint8_t op = c[63] >> 4;
			FUZZ_CHECK(op == MLX5_CQE_INVALID || op == MLX5_CQE_REQ ||
				   op == MLX5_CQE_REQ_ERR);
			if (op != MLX5_CQE_INVALID) {
				mlx5_cqe64 cqe;
				std::memcpy(&cqe, c, sizeof(cqe));
				FUZZ_CHECK((be32toh(cqe.sop_drop_qpn) & 0xffffff) == b.qp[i]);
			}
		}
	}
	for (size_t i = 0; i < 4096; i++)
		FUZZ_CHECK(m.base[kLen + i] == 0xa5);
	for (const TraceEntry &e : d.trace()->entries())
		FUZZ_CHECK(!render(e).empty());
	emu.reset();
	return 0;
}
