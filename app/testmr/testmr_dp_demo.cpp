/* SPDX-License-Identifier: BSD-3-Clause */
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "testmr_dp_demo.h"

#include "mlx5_cq.h"
#include "mlx5_eq.h"
#include "mlx5_qp.h"
#include "mlx5_umr.h"
#include "mr_keys.h"

namespace nicmr::testmr {
using namespace nicmr::mlx5;
namespace {

constexpr size_t kLen = 64 << 10;

/* Arena blocks given back when the demo ends, however it ends. */
struct Blocks {
	mem::DmaArena &arena;
	std::vector<mem::DmaBlock> v;
	~Blocks()
	{
		for (auto &b : v)
			arena.release(b);
	}
	int get(size_t len, mem::DmaBlock *b)
	{
		int rc = arena.alloc(len, 4096, b);
		if (rc == 0)
			v.push_back(*b);
		return rc;
	}
};

int wait(Qp &qp, Completion *c)
{
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (std::chrono::steady_clock::now() < deadline)
		if (qp.poll(c, 1) == 1)
			return 0;
	return -ETIMEDOUT;
}

uint64_t va(const mem::DmaBlock &b)
{
	return reinterpret_cast<uintptr_t>(b.va);
}

int mtt_mkey(Device &dev, const mem::DmaBlock &b, uint32_t pd, uint8_t variant, MkeyHandle *h,
	     uint32_t *key)
{
	std::vector<MttEntry> mtt;
	for (size_t off = 0; off < b.len; off += 4096)
		mtt.push_back({b.iova + off, true, true});
	MkeyCreate c;
	c.ctx.pd = pd;
	c.ctx.lr = c.ctx.lw = c.ctx.rr = c.ctx.rw = c.ctx.a = true;
	c.ctx.variant = variant;
	c.ctx.start_addr = va(b);
	c.ctx.len = b.len;
	c.mtt = mtt;
	int rc = MkeyHandle::create(dev, c, h);
	if (rc == 0)
		*key = prm::mkey::make(h->index(), variant);
	return rc;
}

} // namespace

int dp_loopback_demo(Device &dev, FILE *out, Eq *events)
{
	PdHandle pd;
	std::unique_ptr<Uar> uar;
	std::unique_ptr<Eq> eq;
	std::unique_ptr<Cq> cq[2];
	std::unique_ptr<Qp> qp[2];
	int rc = PdHandle::alloc(dev, &pd);
	if (rc == 0)
		rc = Uar::alloc(dev, &uar);
	if (rc == 0 && events == nullptr)
		rc = Eq::create(dev, *uar, {}, &eq);
	Eq *ev_q = events != nullptr ? events : eq.get();
	for (int i = 0; i < 2 && rc == 0; i++) {
		CqParams cp;
		cp.eqn = ev_q->eqn();
		rc = Cq::create(dev, *uar, cp, &cq[i]);
		QpParams p;
		p.pd = pd.pd();
		p.port = static_cast<uint32_t>(i + 1);
		p.rre = p.rwe = p.rae = true;
		if (rc == 0)
			rc = Qp::create(dev, *uar, *cq[i], p, &qp[i]);
	}
	if (rc == 0)
		rc = qp[0]->connect(qp[1]->qpn());
	if (rc == 0)
		rc = qp[1]->connect(qp[0]->qpn());
	if (rc != 0) {
		std::fprintf(out, "data path setup failed: %s\n", std::strerror(-rc));
		return rc;
	}
	std::fprintf(
		out, "UAR %u, EQ %u, QP 0x%x (port 1, CQ 0x%x) <-> QP 0x%x (port 2, CQ 0x%x)\n",
		uar->index(), ev_q->eqn(), qp[0]->qpn(), cq[0]->cqn(), qp[1]->qpn(), cq[1]->cqn());

	Blocks blocks{dev.arena(), {}};
	mem::DmaBlock a, b;
	if ((rc = blocks.get(kLen, &a)) != 0 || (rc = blocks.get(kLen, &b)) != 0)
		return rc;
	MkeyHandle ha, hb;
	uint32_t ka, kb;
	if ((rc = mtt_mkey(dev, a, pd.pd(), 0x11, &ha, &ka)) != 0 ||
	    (rc = mtt_mkey(dev, b, pd.pd(), 0x22, &hb, &kb)) != 0)
		return rc;
	std::fprintf(out, "regions: A 64 KiB key 0x%08x, B 64 KiB key 0x%08x (MTT, 16 pages)\n", ka,
		     kb);
	bool good = true;
	auto step = [&](const char *what, int post_rc, uint8_t want_syndrome) {
		Completion c;
		int w = post_rc != 0 ? post_rc : wait(*qp[0], &c);
		bool ok = w == 0 && c.syndrome == want_syndrome;
		if (w == 0)
			std::fprintf(out, "%-44s -> CQE opcode %u syndrome 0x%02x, %u bytes: %s\n",
				     what, c.opcode, c.syndrome, c.byte_len, ok ? "ok" : "WRONG");
		else
			std::fprintf(out, "%-44s -> %s\n", what, std::strerror(-w));
		good = good && ok;
	};

	auto *pa = static_cast<uint8_t *>(a.va);
	auto *pb = static_cast<uint8_t *>(b.va);
	for (size_t i = 0; i < kLen; i++)
		pa[i] = static_cast<uint8_t>(i * 7 + 3);
	Sge s{va(a), static_cast<uint32_t>(kLen), ka};
	step("RDMA WRITE 64 KiB A -> B (port 1 -> 2)",
	     qp[0]->post_write({&s, 1}, va(b), kb, 1, kSignaled), 0);
	bool same = std::memcmp(pa, pb, kLen) == 0;
	std::fprintf(out, "  B equals A: %s\n", same ? "yes" : "NO");
	good = good && same;

	std::memset(pa, 0, 4096);
	Sge r{va(a), 4096, ka};
	step("RDMA READ 4 KiB B -> A", qp[0]->post_read({&r, 1}, va(b), kb, 2, kSignaled), 0);
	same = std::memcmp(pa, pb, 4096) == 0;
	std::fprintf(out, "  A equals B: %s\n", same ? "yes" : "NO");
	good = good && same;

	/* The word in the byte order of the device's atomic mode (bring-up asks for host). */
	const bool host = dev.caps().atomic_host_endianness;
	uint64_t v = host ? 41 : htobe64(41);
	std::memcpy(pb + 4096, &v, 8);
	Sge res{va(a) + 8192, 8, ka};
	step("ATOMIC fetch-and-add 1 on B+4096",
	     qp[0]->post_atomic_fa(res, va(b) + 4096, kb, 1, 3, kSignaled), 0);
	std::memcpy(&v, pb + 4096, 8);
	v = host ? v : be64toh(v);
	std::fprintf(out, "  B+4096 now %llu (was 41; %s atomics)\n",
		     static_cast<unsigned long long>(v), host ? "host-endian" : "big-endian");
	good = good && v == 42;

	std::unique_ptr<UmrQueue> umr;
	if ((rc = UmrQueue::create(dev, pd.pd(), {}, &umr)) != 0)
		return rc;
	MkeyCreate fc;
	fc.ctx.pd = pd.pd();
	fc.ctx.free = true;
	fc.ctx.umr_en = true;
	fc.ctx.translations_octword_size = 8;
	MkeyHandle hf;
	if ((rc = MkeyHandle::create(dev, fc, &hf)) != 0)
		return rc;
	const uint32_t kf = prm::mkey::make(hf.index(), 0x33);
	MttEntry m{b.iova, true, true};
	UmrBind ub;
	ub.mkey = kf;
	ub.lr = ub.rw = true;
	ub.pd = pd.pd();
	ub.start = va(b);
	ub.len = 4096;
	ub.mtt = {&m, 1};
	rc = umr->bind(ub);
	std::fprintf(out, "%-44s -> %s\n", "UMR bind free mkey (1 MTT entry, inline)",
		     rc == 0 ? "ok" : std::strerror(-rc));
	good = good && rc == 0;
	Sge w8{va(a), 64, ka};
	step("RDMA WRITE 64 B through the bound key",
	     qp[0]->post_write({&w8, 1}, va(b), kf, 4, kSignaled), 0);
	rc = umr->revoke(kf);
	std::fprintf(out, "%-44s -> %s\n", "UMR revoke", rc == 0 ? "ok" : std::strerror(-rc));
	good = good && rc == 0;
	step("RDMA WRITE through the revoked key",
	     qp[0]->post_write({&w8, 1}, va(b), kf, 5, kSignaled),
	     MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	Event ev;
	int n = 0;
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
	while (n == 0 && std::chrono::steady_clock::now() < deadline)
		n = ev_q->poll(&ev, 1);
	if (n == 1)
		std::fprintf(out, "  responder event: type 0x%02x on QP 0x%x\n", ev.type, ev.qpn);
	good = good && n == 1 && ev.type == prm::event_type::wq_access_error &&
	       ev.qpn == qp[1]->qpn();
	std::fprintf(out, "data path demo: %s\n", good ? "all steps as expected" : "FAILED");
	return good ? 0 : -EIO;
}

} // namespace nicmr::testmr
