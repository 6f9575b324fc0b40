/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench-fi-mr's cross-process part (fi_xp_bench.h): a server process and a client process per
 * provider, through libfabric's public API only (plus nicmr's pool ops for nicmr's buffers).
 *
 * The exchange, all of it over the provider being measured (tagged messages):
 *   client -> server  HELLO  the client's fi_getname, so the server can answer it;
 *   server -> client  INFO   the server's target area: address (0 without FI_MR_VIRT_ADDR),
 *                            key, length;
 *   both ways         PING   8 bytes (fi_tinject), the latency phase;
 *   client -> server  DONE   after the client's last write completed.
 * The server drives its completion queue all along (manual progress providers, nicmr on a wire
 * device among them, move the target's side of RMA only there), and once DONE arrived checks
 * that every byte of its target area holds the client's pattern.
 */
#include "fi_xp_bench.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_ratios.h"
#include "fi_bench_util.h"
#include "nicmr/fi_nicmr.h"

namespace nicmr::bench::xp {

namespace {

constexpr uint64_t kTagHello = 1, kTagInfo = 2, kTagPing = 3, kTagDone = 4;

/* Each process's area (a nicmr pool for nicmr, mmap'd memory otherwise). */
constexpr size_t kAreaLen = 8 * kMiB;
constexpr size_t kCtlLen = 512;		   /* a control message */
constexpr size_t kCtlSendOff = 0;	   /* control send buffer */
constexpr size_t kCtlRecvOff = 4 * kKiB;   /* control receive buffer */
constexpr size_t kPingSendOff = 8 * kKiB;  /* 8-byte ping, sent */
constexpr size_t kPingRecvOff = 12 * kKiB; /* 8-byte ping, received */
constexpr size_t kDoneRecvOff = 16 * kKiB; /* the server's DONE receive */
constexpr size_t kCtlRegion = 64 * kKiB;   /* all of the above: one MR */
constexpr size_t kWriteLen = 64 * kKiB;
constexpr size_t kSmallLen = 4 * kKiB;
constexpr size_t kWindow = 16;
constexpr size_t kTargetOff = 1 * kMiB; /* server: kWindow slots of kWriteLen */
constexpr size_t kTargetLen = kWindow * kWriteLen;
constexpr size_t kSrcOff = 1 * kMiB;   /* client: the 64 KiB source */
constexpr size_t kFreshOff = 4 * kMiB; /* client: kFresh buffers of kSmallLen, each registered
					  for its one write (the reg+write case) */
constexpr size_t kFresh = 256;
static_assert(kFreshOff + kFresh * kSmallLen <= kAreaLen);
static_assert(kTargetOff + kTargetLen <= kAreaLen);

constexpr double kConnectSeconds = 60; /* nicmr's handshake gives up after about 13 s */
constexpr double kIdleSeconds = 60;    /* a phase with no completion for this long failed */

/* The byte the client writes at offset i of a 64 KiB source (and of each fresh buffer). */
char pattern(size_t i)
{
	return static_cast<char>(i * 7 + 1);
}

struct Info {
	uint64_t addr;
	uint64_t key;
	uint64_t len;
};

/* One side: the provider opened for FI_EP_RDM with tagged messages and RMA writes, its
 * endpoint, CQ, AV and area, and the MR over the control buffers. */
struct Side {
	std::string row;
	fi_info *info = nullptr;
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
	Ep e; /* its ep, cq and av */
	fid_ep *&ep = e.ep;
	fid_cq *&cq = e.cq;
	fid_av *&av = e.av;
	fid_mr *ctl_mr = nullptr;
	fi_nicmr_pool_ops *ops = nullptr;
	fi_nicmr_pool *pool = nullptr;
	MmapBuf mbuf{kAreaLen};
	char *base = nullptr;
	uint64_t next_key = 1;
	std::string err;

	explicit Side(std::string r) : row(std::move(r)) {}
	~Side()
	{
		if (ctl_mr)
			fi_close(&ctl_mr->fid);
		e.close();
		if (pool)
			ops->pool_destroy(pool);
		if (domain)
			fi_close(&domain->fid);
		if (fabric)
			fi_close(&fabric->fid);
		fi_freeinfo(info);
	}
	Side(const Side &) = delete;
	Side &operator=(const Side &) = delete;

	int fail(const std::string &what, int ret)
	{
		err = what + ": " + fi_err(ret);
		return ret;
	}

	int open(const std::string &provider)
	{
		if (!mbuf.p)
			return fail("mmap", -FI_ENOMEM);
		int ret = rdm_getinfo(provider, FI_TAGGED | FI_RMA | FI_WRITE | FI_REMOTE_WRITE,
				      &info);
		if (ret != 0)
			return fail("fi_getinfo(FI_EP_RDM, FI_TAGGED | FI_RMA)", ret);
		if ((ret = fi_fabric(info->fabric_attr, &fabric, nullptr)) != 0)
			return fail("fi_fabric", ret);
		if ((ret = fi_domain(fabric, info, &domain, nullptr)) != 0)
			return fail("fi_domain", ret);
		base = mbuf.p;
		if (row == "nicmr") {
			void *v = nullptr;
			ret = fi_open_ops(&domain->fid, FI_NICMR_POOL_OPS, 0, &v, nullptr);
			if (ret != 0)
				return fail("fi_open_ops(FI_NICMR_POOL_OPS)", ret);
			ops = static_cast<fi_nicmr_pool_ops *>(v);
			ret = ops->pool_create(domain, kAreaLen, NICMR_PAGE_2M, NICMR_NUMA_ANY,
					       FI_NICMR_POOL_FALLBACK, &pool);
			if (ret != 0)
				return fail("nicmr pool_create", ret);
			base = static_cast<char *>(ops->pool_addr(pool));
		}
		if ((ret = e.open(domain, info, FI_CQ_FORMAT_TAGGED, &err)) != 0)
			return ret;
		if ((ret = reg(base, kCtlRegion, FI_SEND | FI_RECV, &ctl_mr)) != 0)
			return fail("fi_mr_reg(control buffers)", ret);
		return 0;
	}
	int reg(void *buf, size_t len, uint64_t access, fid_mr **mr)
	{
		return fi_mr_reg(domain, buf, len, access, 0, next_key++, 0, mr, nullptr);
	}
	void *ctl_desc() const { return fi_mr_desc(ctl_mr); }
	bool virt_addr() const { return (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0; }

	/* Reads the CQ once, handing each completion's context to on(ctx). Returns the number of
	 * completions, 0 for none, or a negative code (err says which operation failed). */
	template <typename On> int drive(On on)
	{
		fi_cq_tagged_entry e[kWindow];
		const ssize_t n = fi_cq_read(cq, e, kWindow);
		if (n == -FI_EAGAIN)
			return 0;
		if (n == -FI_EAVAIL) {
			fi_cq_err_entry ee{};
			fi_cq_readerr(cq, &ee, 0);
			err = "completion error: " + std::string(fi_strerror(ee.err)) +
			      " prov_errno=" + std::to_string(ee.prov_errno);
			return -static_cast<int>(ee.err ? ee.err : FI_EIO);
		}
		if (n < 0)
			return fail("fi_cq_read", static_cast<int>(n));
		for (ssize_t i = 0; i < n; i++)
			on(e[i].op_context);
		return static_cast<int>(n);
	}

	/* Drives the CQ until done() holds; -FI_ETIMEDOUT after `seconds` without a completion. */
	template <typename On, typename Done>
	int wait(On on, Done done, double seconds, const char *what)
	{
		double idle_since = now_ns();
		while (!done()) {
			const int n = drive(on);
			if (n < 0)
				return n;
			if (n > 0) {
				idle_since = now_ns();
			} else if (now_ns() - idle_since > seconds * 1e9) {
				err = std::string("timed out waiting for ") + what;
				return -FI_ETIMEDOUT;
			}
		}
		return 0;
	}

	/* Posts with post() until it is not -FI_EAGAIN, driving the CQ meanwhile (a provider
	 * that connects on demand answers -FI_EAGAIN until the connection is up). */
	template <typename Post, typename On>
	int post(Post p, On on, double seconds, const char *what)
	{
		double since = now_ns();
		for (;;) {
			const ssize_t r = p();
			if (r == 0)
				return 0;
			if (r != -FI_EAGAIN)
				return fail(what, static_cast<int>(r));
			const int n = drive(on);
			if (n < 0)
				return n;
			if (now_ns() - since > seconds * 1e9) {
				err = std::string("timed out posting ") + what;
				return -FI_ETIMEDOUT;
			}
		}
	}
};

/* Closes an MR when the scope ends (the pool under it cannot be destroyed while it is open). */
struct MrGuard {
	fid_mr *mr = nullptr;
	MrGuard() = default;
	MrGuard(const MrGuard &) = delete;
	MrGuard &operator=(const MrGuard &) = delete;
	~MrGuard()
	{
		if (mr)
			fi_close(&mr->fid);
	}
};

std::string to_hex(const char *p, size_t len)
{
	static const char digits[] = "0123456789abcdef";
	std::string s;
	for (size_t i = 0; i < len; i++) {
		s += digits[(static_cast<unsigned char>(p[i]) >> 4) & 0xf];
		s += digits[static_cast<unsigned char>(p[i]) & 0xf];
	}
	return s;
}

bool from_hex(const std::string &s, std::vector<char> *out)
{
	auto nib = [](char c) {
		if (c >= '0' && c <= '9')
			return c - '0';
		if (c >= 'a' && c <= 'f')
			return c - 'a' + 10;
		return -1;
	};
	if (s.empty() || s.size() % 2 != 0)
		return false;
	out->clear();
	for (size_t i = 0; i < s.size(); i += 2) {
		const int hi = nib(s[i]), lo = nib(s[i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out->push_back(static_cast<char>(hi << 4 | lo));
	}
	return true;
}

void print_proc(const Side &s, const char *role)
{
	std::printf("XPROC %s %s %s pid=%d FI_PROVIDER=%s\n", s.row.c_str(), role,
		    s.info ? s.info->fabric_attr->prov_name : "-", int(getpid()),
		    std::getenv("FI_PROVIDER") ? std::getenv("FI_PROVIDER") : "");
	std::fflush(stdout);
}

/* A side that cannot go on says why ("UNSUPPORTED <row> xp <role>: ..."; the parent counts
 * nicmr's missing figures as failures, as it does the one-process rows') and exits 0. */
int error_exit(const Side &s, const char *role)
{
	std::printf("UNSUPPORTED %s xp %s: %s\n", s.row.c_str(), role, s.err.c_str());
	std::fflush(stdout);
	return 0;
}

} // namespace

int run_server(const std::string &row, const std::string &provider)
{
	Side s(row);
	int ret = s.open(provider);
	print_proc(s, "server");
	if (ret != 0)
		return error_exit(s, "server");
	MrGuard tg;
	fid_mr *&target = tg.mr;
	char *area = s.base + kTargetOff;
	std::memset(area, 0, kTargetLen);
	if ((ret = s.reg(area, kTargetLen, FI_REMOTE_WRITE, &target)) != 0) {
		s.fail("fi_mr_reg(target area)", ret);
		return error_exit(s, "server");
	}
	char name[256];
	size_t len = sizeof(name);
	if ((ret = fi_getname(&s.ep->fid, name, &len)) != 0) {
		s.fail("fi_getname", ret);
		return error_exit(s, "server");
	}
	std::printf("XPADDR %s %s\n", row.c_str(), to_hex(name, len).c_str());
	std::fflush(stdout);

	fi_context2 rctx{}, sctx{}, pctx{}, dctx{};
	int recvs = 0, sends = 0, pings = 0;
	bool done = false;
	auto on = [&](void *ctx) {
		if (ctx == &rctx)
			recvs++;
		else if (ctx == &sctx)
			sends++;
		else if (ctx == &pctx)
			pings++;
		else if (ctx == &dctx)
			done = true;
	};
	char *cbuf = s.base + kCtlRecvOff;
	char *sbuf = s.base + kCtlSendOff;
	void *desc = s.ctl_desc();
	fi_addr_t client = FI_ADDR_UNSPEC;
	ret = s.post(
		[&] {
			return fi_trecv(s.ep, cbuf, kCtlLen, desc, FI_ADDR_UNSPEC, kTagHello, 0,
					&rctx);
		},
		on, kConnectSeconds, "fi_trecv(HELLO)");
	if (ret == 0)
		ret = s.wait(
			on, [&] { return recvs == 1; }, kConnectSeconds * 2, "the client's HELLO");
	if (ret == 0) {
		uint32_t nlen = 0;
		std::memcpy(&nlen, cbuf, sizeof(nlen));
		if (nlen == 0 || nlen > kCtlLen - sizeof(nlen)) {
			s.err = "HELLO names an address of " + std::to_string(nlen) + " bytes";
			ret = -FI_EINVAL;
		} else if ((ret = fi_av_insert(s.av, cbuf + sizeof(nlen), 1, &client, 0,
					       nullptr)) != 1) {
			s.err = "fi_av_insert(the client's address): " + std::to_string(ret);
			ret = ret < 0 ? ret : -FI_EINVAL;
		} else {
			ret = 0;
		}
	}
	if (ret == 0) {
		const Info info{s.virt_addr() ? reinterpret_cast<uintptr_t>(area) : 0,
				fi_mr_key(target), kTargetLen};
		std::memcpy(sbuf, &info, sizeof(info));
		ret = s.post(
			[&] {
				return fi_tsend(s.ep, sbuf, sizeof(info), desc, client, kTagInfo,
						&sctx);
			},
			on, kConnectSeconds, "fi_tsend(INFO)");
	}
	if (ret == 0)
		ret = s.wait(
			on, [&] { return sends == 1; }, kConnectSeconds, "INFO's completion");
	/* Serve: answer each PING, until DONE. */
	char *pbuf = s.base + kPingRecvOff;
	char *pout = s.base + kPingSendOff;
	if (ret == 0)
		ret = s.post(
			[&] {
				return fi_trecv(s.ep, s.base + kDoneRecvOff, kCtlLen, desc,
						FI_ADDR_UNSPEC, kTagDone, 0, &dctx);
			},
			on, kIdleSeconds, "fi_trecv(DONE)");
	if (ret == 0)
		ret = s.post(
			[&] {
				return fi_trecv(s.ep, pbuf, 8, desc, FI_ADDR_UNSPEC, kTagPing, 0,
						&pctx);
			},
			on, kIdleSeconds, "fi_trecv(PING)");
	int answered = 0;
	double idle_since = now_ns();
	while (ret == 0 && !done) {
		const int n = s.drive(on);
		if (n < 0) {
			ret = n;
			break;
		}
		if (n > 0)
			idle_since = now_ns();
		else if (now_ns() - idle_since > kIdleSeconds * 1e9) {
			s.err = "timed out serving the client";
			ret = -FI_ETIMEDOUT;
			break;
		}
		while (ret == 0 && answered < pings) {
			answered++;
			std::memcpy(pout, pbuf, 8);
			ret = s.post(
				[&] {
					return fi_trecv(s.ep, pbuf, 8, desc, FI_ADDR_UNSPEC,
							kTagPing, 0, &pctx);
				},
				on, kIdleSeconds, "fi_trecv(PING)");
			if (ret == 0)
				ret = s.post(
					[&] { return fi_tinject(s.ep, pout, 8, client, kTagPing); },
					on, kIdleSeconds, "fi_tinject(PING)");
		}
	}
	/* The bytes: every slot holds the client's pattern (written before DONE was sent; a
	 * provider may still be moving the last ones, so drive the CQ a while). */
	if (ret == 0) {
		auto intact = [&] {
			for (size_t i = 0; i < kTargetLen; i++)
				if (area[i] != pattern(i % kWriteLen))
					return false;
			return true;
		};
		const double since = now_ns();
		bool ok = intact();
		while (!ok && now_ns() - since < 5e9) {
			if ((ret = s.drive(on)) < 0)
				break;
			ret = 0;
			ok = intact();
		}
		if (ret == 0 && !ok) {
			s.err = "the target area's bytes differ from the client's pattern";
			ret = -FI_EIO;
		}
	}
	if (ret != 0)
		return error_exit(s, "server");
	std::printf("XPCHECK %s ok answered=%d\n", row.c_str(), answered);
	std::fflush(stdout);
	return 0;
}

int run_client(const std::string &row, const std::string &provider, const std::string &peer_hex,
	       const Counts &n)
{
	Side s(row);
	int ret = s.open(provider);
	print_proc(s, "client");
	if (ret != 0)
		return error_exit(s, "client");
	std::vector<char> peer;
	fi_addr_t server = FI_ADDR_UNSPEC;
	if (!from_hex(peer_hex, &peer)) {
		s.err = "the server's address is not hex: '" + peer_hex + "'";
		return error_exit(s, "client");
	}
	if ((ret = fi_av_insert(s.av, peer.data(), 1, &server, 0, nullptr)) != 1) {
		s.err = "fi_av_insert(the server's address): " + std::to_string(ret);
		return error_exit(s, "client");
	}
	fi_context2 rctx{}, sctx{};
	std::vector<fi_context2> wctx(kWindow);
	int recvs = 0, sends = 0, writes = 0;
	auto on = [&](void *ctx) {
		if (ctx == &rctx)
			recvs++;
		else if (ctx == &sctx)
			sends++;
		else
			writes++;
	};
	char *sbuf = s.base + kCtlSendOff, *cbuf = s.base + kCtlRecvOff;
	void *desc = s.ctl_desc();

	/* HELLO with our address; INFO back. */
	char name[256];
	size_t len = sizeof(name);
	if ((ret = fi_getname(&s.ep->fid, name, &len)) != 0) {
		s.fail("fi_getname", ret);
		return error_exit(s, "client");
	}
	const auto nlen = static_cast<uint32_t>(len);
	std::memcpy(sbuf, &nlen, sizeof(nlen));
	std::memcpy(sbuf + sizeof(nlen), name, len);
	ret = s.post(
		[&] {
			return fi_trecv(s.ep, cbuf, kCtlLen, desc, FI_ADDR_UNSPEC, kTagInfo, 0,
					&rctx);
		},
		on, kConnectSeconds, "fi_trecv(INFO)");
	if (ret == 0)
		ret = s.post(
			[&] {
				return fi_tsend(s.ep, sbuf, sizeof(nlen) + len, desc, server,
						kTagHello, &sctx);
			},
			on, kConnectSeconds, "fi_tsend(HELLO)");
	if (ret == 0)
		ret = s.wait(
			on, [&] { return recvs == 1 && sends == 1; }, kConnectSeconds,
			"the server's INFO");
	if (ret != 0)
		return error_exit(s, "client");
	Info info{};
	std::memcpy(&info, cbuf, sizeof(info));
	if (info.len != kTargetLen) {
		s.err = "INFO names a target of " + std::to_string(info.len) + " bytes";
		return error_exit(s, "client");
	}

	/* xp-lat8: 8-byte tagged ping-pong; the figure is half the median round trip. */
	char *pout = s.base + kPingSendOff, *pin = s.base + kPingRecvOff;
	std::vector<double> rtt;
	rtt.reserve(size_t(n.lat_iters));
	for (int i = 0; i < n.lat_warmup + n.lat_iters && ret == 0; i++) {
		std::memcpy(pout, &i, sizeof(i));
		const int want = recvs + 1;
		ret = s.post(
			[&] {
				return fi_trecv(s.ep, pin, 8, desc, FI_ADDR_UNSPEC, kTagPing, 0,
						&rctx);
			},
			on, kIdleSeconds, "fi_trecv(PING)");
		const double t0 = now_ns();
		if (ret == 0)
			ret = s.post([&] { return fi_tinject(s.ep, pout, 8, server, kTagPing); },
				     on, kIdleSeconds, "fi_tinject(PING)");
		if (ret == 0)
			ret = s.wait(
				on, [&] { return recvs == want; }, kIdleSeconds,
				"the PING's answer");
		const double t1 = now_ns();
		if (ret == 0 && std::memcmp(pin, pout, 8) != 0) {
			s.err = "the PING's answer carries other bytes";
			ret = -FI_EIO;
		}
		if (i >= n.lat_warmup)
			rtt.push_back(t1 - t0);
	}
	if (ret != 0)
		return error_exit(s, "client");
	std::printf("RESULT %s xp-lat8 ns=%.0f\n", row.c_str(), median(rtt) / 2);
	std::fflush(stdout);

	/* xp-write64k: kWindow writes in flight into the server's slots. */
	char *src = s.base + kSrcOff;
	for (size_t i = 0; i < kWriteLen; i++)
		src[i] = pattern(i);
	MrGuard sg;
	fid_mr *&smr = sg.mr;
	if ((ret = s.reg(src, kWriteLen, FI_WRITE, &smr)) != 0) {
		s.fail("fi_mr_reg(source)", ret);
		return error_exit(s, "client");
	}
	void *sdesc = fi_mr_desc(smr);
	std::vector<double> rates;
	for (int r = 0; r < n.bw_reps + 1 && ret == 0; r++) {
		/* The first round is untimed and writes every slot once (the server checks them).
		 */
		const int total = r == 0 ? int(kWindow) : n.bw_writes;
		const int base_done = writes;
		int posted = 0;
		const double t0 = now_ns();
		double idle_since = t0;
		while (writes - base_done < total && ret == 0) {
			while (posted < total && posted - (writes - base_done) < int(kWindow)) {
				const size_t slot = size_t(posted) % kWindow;
				const ssize_t w = fi_write(s.ep, src, kWriteLen, sdesc, server,
							   info.addr + slot * kWriteLen, info.key,
							   &wctx[slot]);
				if (w == -FI_EAGAIN)
					break;
				if (w != 0) {
					ret = s.fail("fi_write(64 KiB)", static_cast<int>(w));
					break;
				}
				posted++;
			}
			const int k = s.drive(on);
			if (k < 0)
				ret = k;
			else if (k > 0)
				idle_since = now_ns();
			else if (now_ns() - idle_since > kIdleSeconds * 1e9) {
				s.err = "timed out waiting for fi_write completions";
				ret = -FI_ETIMEDOUT;
			}
		}
		const double t1 = now_ns();
		if (ret == 0 && r > 0)
			rates.push_back(double(total) * kWriteLen /
					(t1 - t0)); /* bytes/ns = GB/s */
	}
	if (ret == 0) {
		std::printf("RESULT %s xp-write64k gbps=%.3f\n", row.c_str(), median(rates));
		std::fflush(stdout);
	}

	/* One 4 KiB write of buf (desc d) to the server's first slot, to its completion. */
	auto write_small = [&](char *buf, void *d, const char *what) {
		const int want = writes + 1;
		int r = s.post(
			[&] {
				return fi_write(s.ep, buf, kSmallLen, d, server, info.addr,
						info.key, &wctx[0]);
			},
			on, kIdleSeconds, what);
		if (r == 0)
			r = s.wait(
				on, [&] { return writes == want; }, kIdleSeconds,
				"fi_write's completion");
		return r;
	};

	/* xp-write4k: one 4 KiB write from the registered source, to its completion. */
	std::vector<double> wt;
	for (int i = 0; i < n.small_warmup + n.small_iters && ret == 0; i++) {
		const double t0 = now_ns();
		ret = write_small(src, sdesc, "fi_write(4 KiB)");
		if (i >= n.small_warmup)
			wt.push_back(now_ns() - t0);
	}
	if (ret == 0) {
		std::printf("RESULT %s xp-write4k ns=%.0f\n", row.c_str(), median(wt));
		std::fflush(stdout);
	}

	/* xp-regwrite4k: register a buffer not registered before in this round, write it,
	 * wait for the completion; then close its MR (timed apart). */
	char *fresh = s.base + kFreshOff;
	for (size_t b = 0; b < kFresh; b++)
		std::memcpy(fresh + b * kSmallLen, src, kSmallLen);
	std::vector<double> rw, rc;
	for (int i = 0; i < n.small_warmup + n.small_iters && ret == 0; i++) {
		char *buf = fresh + size_t(i) % kFresh * kSmallLen;
		fid_mr *mr = nullptr;
		const double t0 = now_ns();
		if ((ret = s.reg(buf, kSmallLen, FI_WRITE, &mr)) != 0) {
			s.fail("fi_mr_reg(fresh 4 KiB)", ret);
			break;
		}
		ret = write_small(buf, fi_mr_desc(mr), "fi_write(fresh 4 KiB)");
		const double t1 = now_ns();
		const int c = fi_close(&mr->fid);
		const double t2 = now_ns();
		if (ret == 0 && c != 0)
			ret = s.fail("fi_close(fresh MR)", c);
		if (i >= n.small_warmup) {
			rw.push_back(t1 - t0);
			rc.push_back(t2 - t1);
		}
	}
	if (ret == 0) {
		std::printf("RESULT %s xp-regwrite4k ns=%.0f close=%.0f\n", row.c_str(), median(rw),
			    median(rc));
		std::fflush(stdout);
	}

	/* DONE: every write above has completed; the server checks its bytes. */
	if (ret == 0)
		ret = s.post([&] { return fi_tsend(s.ep, sbuf, 8, desc, server, kTagDone, &sctx); },
			     on, kIdleSeconds, "fi_tsend(DONE)");
	if (ret == 0)
		ret = s.wait(
			on, [&] { return sends == 2; }, kIdleSeconds, "DONE's completion");
	if (ret != 0)
		return error_exit(s, "client");
	return 0;
}

} // namespace nicmr::bench::xp
