/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fi_mr_bench (bench-fi-mr): one libfabric program run against several providers in the same
 * process and the same run, through libfabric's public API only (plus nicmr's ops extension,
 * <nicmr/fi_nicmr.h>, to take buffers from a nicmr pool).
 *
 *   bench-fi-mr [--smoke] [--reps N] [--live N] [provider ...]     (default: nicmr tcp shm)
 *
 * What it measures, per provider:
 *   - fi_mr_reg and fi_close of one MR (4 KiB and 2 MiB), timed apart and as the pair, median of
 *     --reps repetitions, with no other MR live ("1 live MR": the timed one) and with --live
 *     other 4 KiB MRs registered first (default 100,000);
 *   - fi_mr_regv of four 4 KiB pages out of address order as one MR, and its fi_close, alone
 *     ("regv4x4KiB/alone"; a provider whose mr_iov_limit is below 4 says "unsupported");
 *   - fi_write of 64 KiB between two RDM endpoints of the process (16 in flight), median GB/s.
 * nicmr is measured twice: buffers from a nicmr pool (the fast path an application gets through
 * the ops extension) and plain mmap'd memory (the slow path: pin and DMA-map per MR). tcp (as
 * libfabric layers it for FI_EP_RDM, tcp;ofi_rxm, on the loopback interface) and shm register
 * plain mmap'd memory. A provider that cannot do something here says "unsupported" and why.
 *
 * Environment it sets when unset: FI_PROVIDER_PATH (the build's fabric/), FI_PROVIDER (only
 * the providers measured: the installed psm2 provider would otherwise install a SIGSEGV handler
 * that exits with status 1), FI_TCP_IFACE=lo (no NIC here), FI_NICMR_DEVICE=emu:mkeys=262144
 * (the default 65536 keys cannot hold 100,000 MRs).
 *
 * Machine-readable lines for the smoke test: "RESULT <row> <case> reg=<ns> close=<ns>
 * pair=<ns>", "RESULT <row> write64k gbps=<x>", "UNSUPPORTED <row> <case> <reason>".
 * --reps and --live take a count (bench_cli.h: digits only, 1 or more; --reps at most 1,000,000,
 * --live at most 10,000,000); providers are nicmr, tcp and shm, each at most once. Anything else
 * is a usage error (exit status 2) found before a provider is opened; --help prints the usage
 * and exits 0. Exit status 1 when a measurement failed.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "nicmr/fi_nicmr.h"

#ifndef NICMR_FI_PROVIDER_DIR
#define NICMR_FI_PROVIDER_DIR ""
#endif

namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;
constexpr size_t kSizes[] = {4 * kKiB, 2 * kMiB};
constexpr size_t kBgSlot = 4 * kKiB;	/* each background MR */
constexpr size_t kBgArea = 16 * kMiB;	/* background MRs cycle over 4096 distinct pages */
constexpr size_t kTimedOff = 18 * kMiB; /* the timed MR: 2 MiB-aligned, after the background */
constexpr size_t kBufLen = 32 * kMiB;
constexpr size_t kWriteLen = 64 * kKiB;
constexpr size_t kWindow = 16;
constexpr uint64_t kAccess = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr uint32_t kApi = FI_VERSION(1, 17);

struct Options {
	int reps = 301;
	size_t live = 100000;
	int write_reps = 9;
	int writes_per_rep = 256;
	std::vector<std::string> providers;
};

double now_ns()
{
	return std::chrono::duration<double, std::nano>(
		       std::chrono::steady_clock::now().time_since_epoch())
		.count();
}

double median(std::vector<double> v)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	size_t n = v.size();
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Anonymous memory, 2 MiB-aligned and touched (mapped before any registration). */
struct MmapBuf {
	char *raw = nullptr;
	char *p = nullptr;
	size_t raw_len = 0;
	explicit MmapBuf(size_t len)
	{
		raw_len = len + 2 * kMiB;
		void *m = mmap(nullptr, raw_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return;
		raw = static_cast<char *>(m);
		uintptr_t a = (reinterpret_cast<uintptr_t>(raw) + 2 * kMiB - 1) & ~(2 * kMiB - 1);
		p = reinterpret_cast<char *>(a);
		std::memset(p, 0x5a, len);
	}
	~MmapBuf()
	{
		if (raw)
			munmap(raw, raw_len);
	}
	MmapBuf(const MmapBuf &) = delete;
	MmapBuf &operator=(const MmapBuf &) = delete;
};

std::string fi_err(int ret)
{
	return std::string(fi_strerror(-ret)) + " (" + std::to_string(ret) + ")";
}

/* One provider opened for FI_EP_RDM with RMA: its fabric and domain. */
struct Ctx {
	fi_info *info = nullptr;
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
	std::string prov; /* as libfabric names it, e.g. "tcp;ofi_rxm" */
	int mr_mode = 0;
	uint64_t next_key = 1; /* requested keys, unique per domain (ignored under PROV_KEY) */

	int open(const std::string &name, std::string *err)
	{
		fi_info *hints = fi_allocinfo();
		if (!hints) {
			*err = "fi_allocinfo failed";
			return -FI_ENOMEM;
		}
		hints->fabric_attr->prov_name = strdup(name.c_str());
		hints->ep_attr->type = FI_EP_RDM;
		hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
		hints->mode = FI_CONTEXT | FI_CONTEXT2;
		/* What a typical application accepts; each provider keeps what it needs. */
		hints->domain_attr->mr_mode =
			FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
		int ret = fi_getinfo(kApi, nullptr, nullptr, 0, hints, &info);
		fi_freeinfo(hints);
		if (ret != 0) {
			*err = "fi_getinfo(FI_EP_RDM, FI_RMA): " + fi_err(ret);
			info = nullptr;
			return ret;
		}
		prov = info->fabric_attr->prov_name;
		mr_mode = info->domain_attr->mr_mode;
		ret = fi_fabric(info->fabric_attr, &fabric, nullptr);
		if (ret != 0) {
			*err = "fi_fabric: " + fi_err(ret);
			return ret;
		}
		ret = fi_domain(fabric, info, &domain, nullptr);
		if (ret != 0) {
			*err = "fi_domain: " + fi_err(ret);
			return ret;
		}
		return 0;
	}
	~Ctx()
	{
		if (domain)
			fi_close(&domain->fid);
		if (fabric)
			fi_close(&fabric->fid);
		fi_freeinfo(info);
	}
	int reg(void *buf, size_t len, uint64_t access, fid_mr **mr)
	{
		return fi_mr_reg(domain, buf, len, access, 0, next_key++, 0, mr, nullptr);
	}
};

struct RegFigures {
	double reg = 0, close = 0, pair = 0;
};

/* Times reps registrations by reg_one(&mr) (after a tenth as many warm-up ones, at least 2),
 * each followed by the MR's fi_close: the medians of the registration, the close and the pair
 * into *out. what names the registering call in *err. */
template <typename RegOne>
int time_pairs(int reps, const char *what, RegOne reg_one, RegFigures *out, std::string *err)
{
	std::vector<double> reg, close, pair;
	int ret = 0;
	const int warmup = std::max(2, reps / 10);
	for (int r = 0; r < warmup + reps && ret == 0; r++) {
		fid_mr *mr = nullptr;
		double t0 = now_ns();
		ret = reg_one(&mr);
		double t1 = now_ns();
		if (ret != 0) {
			*err = std::string(what) + ": " + fi_err(ret);
			break;
		}
		ret = fi_close(&mr->fid);
		double t2 = now_ns();
		if (ret != 0) {
			*err = "fi_close(mr): " + fi_err(ret);
			break;
		}
		if (r >= warmup) {
			reg.push_back(t1 - t0);
			close.push_back(t2 - t1);
			pair.push_back(t2 - t0);
		}
	}
	out->reg = median(reg);
	out->close = median(close);
	out->pair = median(pair);
	return ret;
}

/* Times reg and close of one MR of `size` at base + kTimedOff, with `live` 4 KiB MRs of base's
 * first kBgArea registered first (and closed after, untimed). */
int time_reg_close(Ctx &c, char *base, size_t size, size_t live, int reps, RegFigures *out,
		   std::string *err)
{
	std::vector<fid_mr *> bg;
	bg.reserve(live);
	int ret = 0;
	for (size_t i = 0; i < live; i++) {
		fid_mr *mr = nullptr;
		ret = c.reg(base + (i % (kBgArea / kBgSlot)) * kBgSlot, kBgSlot, kAccess, &mr);
		if (ret != 0) {
			*err = "fi_mr_reg of background MR #" + std::to_string(i + 1) + ": " +
			       fi_err(ret);
			break;
		}
		bg.push_back(mr);
	}
	if (ret == 0) {
		char *buf = base + kTimedOff;
		ret = time_pairs(
			reps, "fi_mr_reg",
			[&](fid_mr **mr) { return c.reg(buf, size, kAccess, mr); }, out, err);
	}
	for (fid_mr *mr : bg) {
		int r = fi_close(&mr->fid);
		if (r != 0 && ret == 0) {
			*err = "fi_close(background mr): " + fi_err(r);
			ret = r;
		}
	}
	return ret;
}

/* Segments of the vectored case: kVecSegs 4 KiB pages at base + kTimedOff, out of order
 * (page-aligned joints: one MTT key on nicmr, no inner keys). */
constexpr size_t kVecSegs = 4;
constexpr size_t kVecOrder[kVecSegs] = {3, 0, 2, 1};

/* Times fi_mr_regv of the kVecSegs segments and its fi_close, alone. */
int time_regv(Ctx &c, char *base, int reps, RegFigures *out, std::string *err)
{
	if (c.info->domain_attr->mr_iov_limit < kVecSegs) {
		*err = "mr_iov_limit " + std::to_string(c.info->domain_attr->mr_iov_limit) + " < " +
		       std::to_string(kVecSegs);
		return -FI_EOPNOTSUPP;
	}
	iovec iov[kVecSegs];
	for (size_t i = 0; i < kVecSegs; i++)
		iov[i] = {base + kTimedOff + kVecOrder[i] * 4 * kKiB, 4 * kKiB};
	return time_pairs(
		reps, "fi_mr_regv",
		[&](fid_mr **mr) {
			return fi_mr_regv(c.domain, iov, kVecSegs, kAccess, 0, c.next_key++, 0, mr,
					  nullptr);
		},
		out, err);
}

/* One RDM endpoint with its CQ and AV. */
struct Ep {
	fid_ep *ep = nullptr;
	fid_cq *cq = nullptr;
	fid_av *av = nullptr;
	~Ep()
	{
		if (ep)
			fi_close(&ep->fid);
		if (av)
			fi_close(&av->fid);
		if (cq)
			fi_close(&cq->fid);
	}
	int open(Ctx &c, std::string *err)
	{
		fi_cq_attr cqa{};
		cqa.format = FI_CQ_FORMAT_CONTEXT;
		cqa.size = 256;
		fi_av_attr ava{};
		ava.type = FI_AV_TABLE;
		int ret = fi_endpoint(c.domain, c.info, &ep, nullptr);
		if (ret != 0) {
			*err = "fi_endpoint: " + fi_err(ret);
			return ret;
		}
		if ((ret = fi_cq_open(c.domain, &cqa, &cq, nullptr)) != 0) {
			*err = "fi_cq_open: " + fi_err(ret);
			return ret;
		}
		if ((ret = fi_av_open(c.domain, &ava, &av, nullptr)) != 0) {
			*err = "fi_av_open: " + fi_err(ret);
			return ret;
		}
		if ((ret = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
		    (ret = fi_ep_bind(ep, &av->fid, 0)) != 0 || (ret = fi_enable(ep)) != 0) {
			*err = "fi_ep_bind/fi_enable: " + fi_err(ret);
			return ret;
		}
		return 0;
	}
	int insert(Ep &peer, fi_addr_t *out, std::string *err)
	{
		char name[256];
		size_t len = sizeof(name);
		int ret = fi_getname(&peer.ep->fid, name, &len);
		if (ret != 0) {
			*err = "fi_getname: " + fi_err(ret);
			return ret;
		}
		ret = fi_av_insert(av, name, 1, out, 0, nullptr);
		if (ret != 1) {
			*err = "fi_av_insert: " + std::to_string(ret);
			return ret < 0 ? ret : -FI_EINVAL;
		}
		return 0;
	}
};

/* Reads a's CQ (b's too: some providers progress the target only when it is read). Returns the
 * number of completions of a, or a negative code. */
int reap(Ep &a, Ep &b, std::string *err)
{
	fi_cq_entry e[kWindow];
	fi_cq_entry tmp[kWindow];
	ssize_t n = fi_cq_read(a.cq, e, kWindow);
	ssize_t m = fi_cq_read(b.cq, tmp, kWindow);
	(void)m;
	if (n == -FI_EAGAIN)
		return 0;
	if (n < 0) {
		fi_cq_err_entry ee{};
		fi_cq_readerr(a.cq, &ee, 0);
		*err = "completion error: " + std::string(fi_strerror(ee.err)) +
		       " prov_errno=" + std::to_string(ee.prov_errno);
		return static_cast<int>(n);
	}
	return static_cast<int>(n);
}

/* fi_write of 64 KiB from src (in a) to dst (in b), kWindow in flight; median GB/s of the reps.
 * The first transfer's bytes are checked at the target. */
int time_write(Ctx &c, char *src, char *dst, const Options &o, double *gbps, std::string *err)
{
	Ep a, b;
	int ret;
	if ((ret = a.open(c, err)) != 0 || (ret = b.open(c, err)) != 0)
		return ret;
	fi_addr_t to_b = FI_ADDR_UNSPEC, to_a = FI_ADDR_UNSPEC;
	if ((ret = a.insert(b, &to_b, err)) != 0 || (ret = b.insert(a, &to_a, err)) != 0)
		return ret;
	fid_mr *smr = nullptr, *dmr = nullptr;
	if ((ret = c.reg(src, kWriteLen, FI_WRITE, &smr)) != 0) {
		*err = "fi_mr_reg(source): " + fi_err(ret);
		return ret;
	}
	if ((ret = c.reg(dst, kWriteLen, FI_REMOTE_WRITE, &dmr)) != 0) {
		fi_close(&smr->fid);
		*err = "fi_mr_reg(target): " + fi_err(ret);
		return ret;
	}
	for (size_t i = 0; i < kWriteLen; i++)
		src[i] = static_cast<char>(i * 7 + 1);
	std::memset(dst, 0, kWriteLen);
	void *desc = fi_mr_desc(smr);
	uint64_t key = fi_mr_key(dmr);
	uint64_t raddr = (c.mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uintptr_t>(dst) : 0;
	std::vector<fi_context2> ctx(kWindow);
	std::vector<double> rates;
	bool checked = false;
	for (int r = 0; r < o.write_reps + 1 && ret == 0; r++) {
		const int total = checked ? o.writes_per_rep : 1;
		int posted = 0, done = 0;
		double t0 = now_ns();
		while (done < total && ret == 0) {
			while (posted < total && posted - done < static_cast<int>(kWindow)) {
				ssize_t w = fi_write(a.ep, src, kWriteLen, desc, to_b, raddr, key,
						     &ctx[posted % kWindow]);
				if (w == -FI_EAGAIN)
					break;
				if (w != 0) {
					*err = "fi_write: " + fi_err(static_cast<int>(w));
					ret = static_cast<int>(w);
					break;
				}
				posted++;
			}
			int n = reap(a, b, err);
			if (n < 0)
				ret = n;
			else
				done += n;
		}
		double t1 = now_ns();
		if (ret != 0)
			break;
		if (!checked) {
			/* The first write is not timed: it connects, and its bytes are checked. */
			if (std::memcmp(src, dst, kWriteLen) != 0) {
				*err = "fi_write completed but the target's bytes differ";
				ret = -FI_EIO;
			}
			checked = true;
			continue;
		}
		rates.push_back(double(total) * kWriteLen / (t1 - t0)); /* bytes/ns = GB/s */
	}
	fi_close(&dmr->fid);
	fi_close(&smr->fid);
	*gbps = median(rates);
	return ret;
}

/* A row of the table: a provider and where its buffers come from. */
struct Row {
	std::string label;   /* nicmr, nicmr-mmap, tcp, shm */
	std::string request; /* the name given to fi_getinfo */
	bool pool;
};

struct Cell {
	bool ok = false;
	std::string why;
	RegFigures f;
};

/* The vectored case's name: fi_mr_regv of 4 x 4 KiB, alone. */
constexpr const char *kRegvCase = "regv4x4KiB/alone";

std::string case_name(size_t size, size_t live)
{
	return std::string(size == 4 * kKiB ? "4KiB" : "2MiB") + (live ? "/live" : "/alone");
}

void set_default_env(const char *name, const char *value)
{
	if (!std::getenv(name) && value && *value)
		setenv(name, value, 0);
}

constexpr uint64_t kMaxReps = 1000000;
constexpr uint64_t kMaxLive = 10000000;
const char *const kProviders[] = {"nicmr", "tcp", "shm"};

void usage()
{
	std::printf("usage: bench-fi-mr [--smoke] [--reps N] [--live N] [provider ...]\n"
		    "fi_mr_reg / fi_close medians (4 KiB, 2 MiB; alone and with --live other MRs), "
		    "fi_mr_regv and\nfi_write 64 KiB through libfabric, per provider.\n"
		    "  --smoke     tiny counts (5 repetitions, 1,000 live MRs, few writes)\n"
		    "  --reps N    repetitions of each timing, 1..%llu (default 301)\n"
		    "  --live N    MRs live during the /live cases, 1..%llu (default 100,000)\n"
		    "  providers:  nicmr tcp shm (default: all three)\n"
		    "Exit status: 0, 1 when a measurement failed, 2 for bad arguments.\n",
		    static_cast<unsigned long long>(kMaxReps),
		    static_cast<unsigned long long>(kMaxLive));
}

} // namespace

int main(int argc, char **argv)
{
	using nicmr::bench::parse_count;
	using nicmr::bench::usage_error;
	const char *prog = "bench-fi-mr";
	Options o;
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		uint64_t n;
		if (a == "--smoke") {
			o.reps = 5;
			o.live = 1000;
			o.write_reps = 2;
			o.writes_per_rep = 4;
		} else if (a == "--reps" || a == "--live") {
			if (i + 1 == argc)
				usage_error(prog, "%s needs a count", a.c_str());
			const char *v = argv[++i];
			if (!parse_count(v, a == "--reps" ? kMaxReps : kMaxLive, &n))
				usage_error(prog, "%s takes a count from 1 to %llu, not '%s'",
					    a.c_str(),
					    static_cast<unsigned long long>(
						    a == "--reps" ? kMaxReps : kMaxLive),
					    v);
			if (a == "--reps")
				o.reps = static_cast<int>(n);
			else
				o.live = static_cast<size_t>(n);
		} else if (a == "-h" || a == "--help") {
			usage();
			return 0;
		} else if (a.rfind('-', 0) == 0) {
			usage_error(prog, "unknown option '%s'", a.c_str());
		} else if (std::find(std::begin(kProviders), std::end(kProviders), a) ==
			   std::end(kProviders)) {
			usage_error(prog, "unknown provider '%s' (nicmr, tcp or shm)", a.c_str());
		} else if (std::find(o.providers.begin(), o.providers.end(), a) !=
			   o.providers.end()) {
			usage_error(prog, "provider '%s' named twice", a.c_str());
		} else {
			o.providers.push_back(a);
		}
	}
	if (o.providers.empty())
		o.providers = {"nicmr", "tcp", "shm"};

	std::string filter;
	for (const auto &p : o.providers)
		filter += (filter.empty() ? "" : ",") + p + (p == "tcp" ? ",ofi_rxm" : "");
	set_default_env("FI_PROVIDER_PATH", NICMR_FI_PROVIDER_DIR);
	set_default_env("FI_PROVIDER", filter.c_str());
	set_default_env("FI_TCP_IFACE", "lo");
	set_default_env("FI_NICMR_DEVICE", "emu:mkeys=262144");

	std::vector<Row> rows;
	for (const auto &p : o.providers) {
		if (p == "nicmr") {
			rows.push_back({"nicmr", p, true});
			rows.push_back({"nicmr-mmap", p, false});
		} else {
			rows.push_back({p, p, false});
		}
	}

	std::printf("fi_mr_bench: fi_mr_reg / fi_close through libfabric %u.%u, medians of %d "
		    "repetitions (ns)\n",
		    FI_MAJOR(fi_version()), FI_MINOR(fi_version()), o.reps);
	std::printf("  alone: the timed MR is the only one live; live: %zu other 4 KiB MRs are "
		    "registered first\n",
		    o.live);
	std::printf("  regv4x4KiB: fi_mr_regv of four 4 KiB pages out of address order (one MR), "
		    "alone\n");
	std::printf("  nicmr: buffers from a nicmr pool (ops extension, fast path); nicmr-mmap: "
		    "plain mmap'd memory (slow path); others: plain mmap'd memory\n");
	std::printf("  FI_PROVIDER=%s FI_NICMR_DEVICE=%s FI_TCP_IFACE=%s\n\n",
		    std::getenv("FI_PROVIDER"), std::getenv("FI_NICMR_DEVICE"),
		    std::getenv("FI_TCP_IFACE"));

	std::map<std::string, std::map<std::string, Cell>> cells; /* row -> case -> figures */
	std::map<std::string, std::string> prov_of;
	std::map<std::string, double> write_gbps;
	int failures = 0;

	for (const Row &row : rows) {
		Ctx c;
		std::string err;
		MmapBuf mbuf(kBufLen);
		fi_nicmr_pool_ops *ops = nullptr;
		fi_nicmr_pool *pool = nullptr;
		char *base = mbuf.p;
		int ret = mbuf.p ? c.open(row.request, &err) : -FI_ENOMEM;
		if (!mbuf.p)
			err = "mmap failed";
		if (ret == 0 && row.pool) {
			void *v = nullptr;
			ret = fi_open_ops(&c.domain->fid, FI_NICMR_POOL_OPS, 0, &v, nullptr);
			ops = static_cast<fi_nicmr_pool_ops *>(v);
			if (ret == 0)
				ret = ops->pool_create(c.domain, kBufLen, NICMR_PAGE_2M,
						       NICMR_NUMA_ANY, FI_NICMR_POOL_FALLBACK,
						       &pool);
			if (ret != 0)
				err = "nicmr pool: " + fi_err(ret);
			else
				base = static_cast<char *>(ops->pool_addr(pool));
		}
		prov_of[row.label] = ret == 0 ? c.prov : row.request;
		if (ret != 0) {
			std::printf("UNSUPPORTED %s all %s\n", row.label.c_str(), err.c_str());
			for (size_t size : kSizes)
				for (size_t live : {size_t{0}, o.live})
					cells[row.label][case_name(size, live)].why = err;
			cells[row.label][kRegvCase].why = err;
			continue;
		}
		for (size_t size : kSizes) {
			for (size_t live : {size_t{0}, o.live}) {
				Cell &cell = cells[row.label][case_name(size, live)];
				err.clear();
				ret = time_reg_close(c, base, size, live, o.reps, &cell.f, &err);
				cell.ok = ret == 0;
				cell.why = err;
				if (cell.ok)
					std::printf("RESULT %s %s reg=%.0f close=%.0f pair=%.0f\n",
						    row.label.c_str(),
						    case_name(size, live).c_str(), cell.f.reg,
						    cell.f.close, cell.f.pair);
				else
					std::printf("UNSUPPORTED %s %s %s\n", row.label.c_str(),
						    case_name(size, live).c_str(), err.c_str());
				std::fflush(stdout);
			}
		}
		{
			Cell &cell = cells[row.label][kRegvCase];
			err.clear();
			ret = time_regv(c, base, o.reps, &cell.f, &err);
			cell.ok = ret == 0;
			cell.why = err;
			if (cell.ok)
				std::printf("RESULT %s %s reg=%.0f close=%.0f pair=%.0f\n",
					    row.label.c_str(), kRegvCase, cell.f.reg, cell.f.close,
					    cell.f.pair);
			else
				std::printf("UNSUPPORTED %s %s %s\n", row.label.c_str(), kRegvCase,
					    err.c_str());
			std::fflush(stdout);
		}
		if (row.label != "nicmr-mmap") {
			double gbps = 0;
			err.clear();
			ret = time_write(c, base + kTimedOff, base + kTimedOff + 4 * kMiB, o, &gbps,
					 &err);
			if (ret == 0) {
				write_gbps[row.label] = gbps;
				std::printf("RESULT %s write64k gbps=%.3f\n", row.label.c_str(),
					    gbps);
			} else {
				write_gbps[row.label] = -1;
				std::printf("UNSUPPORTED %s write64k %s\n", row.label.c_str(),
					    err.c_str());
			}
		}
		if (pool) {
			ret = ops->pool_destroy(pool);
			if (ret != 0) {
				std::printf("ERROR nicmr pool_destroy: %s\n", fi_err(ret).c_str());
				failures++;
			}
		}
	}

	/* The table: medians, then nicmr's (pool) ratio against each other provider. */
	std::printf("\n%-11s %-15s %-16s %10s %10s %10s\n", "row", "provider", "case", "reg ns",
		    "close ns", "pair ns");
	for (const Row &row : rows) {
		for (size_t size : kSizes) {
			for (size_t live : {size_t{0}, o.live}) {
				const Cell &cell = cells[row.label][case_name(size, live)];
				if (cell.ok)
					std::printf("%-11s %-15s %-16s %10.0f %10.0f %10.0f\n",
						    row.label.c_str(), prov_of[row.label].c_str(),
						    case_name(size, live).c_str(), cell.f.reg,
						    cell.f.close, cell.f.pair);
				else
					std::printf("%-11s %-15s %-16s unsupported: %s\n",
						    row.label.c_str(), prov_of[row.label].c_str(),
						    case_name(size, live).c_str(),
						    cell.why.c_str());
			}
		}
		const Cell &v = cells[row.label][kRegvCase];
		if (v.ok)
			std::printf("%-11s %-15s %-16s %10.0f %10.0f %10.0f\n", row.label.c_str(),
				    prov_of[row.label].c_str(), kRegvCase, v.f.reg, v.f.close,
				    v.f.pair);
		else
			std::printf("%-11s %-15s %-16s unsupported: %s\n", row.label.c_str(),
				    prov_of[row.label].c_str(), kRegvCase, v.why.c_str());
	}

	if (cells.count("nicmr")) {
		std::printf("\nratios nicmr (pool) / baseline, time per call (< 1: nicmr faster). "
			    "Targets: live: <= 0.50 for reg and close; alone: <= 1.50\n");
		std::printf("%-18s %-11s %7s %7s %7s  %s\n", "baseline", "case", "reg", "close",
			    "pair", "target");
		for (const Row &row : rows) {
			if (row.label == "nicmr")
				continue;
			for (size_t size : kSizes) {
				for (size_t live : {size_t{0}, o.live}) {
					std::string cn = case_name(size, live);
					const Cell &n = cells["nicmr"][cn];
					const Cell &b = cells[row.label][cn];
					if (!n.ok || !b.ok) {
						std::printf("nicmr/%-12s %-11s (no figures)\n",
							    row.label.c_str(), cn.c_str());
						continue;
					}
					double rr = n.f.reg / b.f.reg, rc = n.f.close / b.f.close;
					double rp = n.f.pair / b.f.pair;
					const char *target = "";
					if (row.label != "nicmr-mmap") {
						double lim = live ? 0.5 : 1.5;
						target =
							(rr <= lim && rc <= lim) ? "met" : "MISSED";
					}
					std::printf("nicmr/%-12s %-11s %7.2f %7.2f %7.2f  %s\n",
						    row.label.c_str(), cn.c_str(), rr, rc, rp,
						    target);
				}
			}
		}
	}

	std::printf("\nfi_write 64 KiB between two RDM endpoints of one domain, %zu in flight, "
		    "median of %d x %d writes\n",
		    kWindow, o.write_reps, o.writes_per_rep);
	for (const Row &row : rows) {
		if (row.label == "nicmr-mmap")
			continue;
		auto it = write_gbps.find(row.label);
		if (it == write_gbps.end() || it->second < 0)
			std::printf("  %-6s unsupported (see the UNSUPPORTED line above)\n",
				    row.label.c_str());
		else
			std::printf("  %-6s %8.3f GB/s\n", row.label.c_str(), it->second);
	}
	if (write_gbps.count("nicmr") && write_gbps["nicmr"] > 0)
		for (const Row &row : rows)
			if (row.label != "nicmr" && write_gbps.count(row.label) &&
			    write_gbps[row.label] > 0)
				std::printf("  ratio nicmr/%s bandwidth: %.2f\n", row.label.c_str(),
					    write_gbps["nicmr"] / write_gbps[row.label]);
	/* nicmr's fast path must work: its failure is the program's failure. Other rows may be
	 * unsupported here (said above), which is a figure, not an error: nicmr-mmap maps each MR
	 * for DMA on its own and meets the IOMMU's mapping limit (65535) before 100,000 MRs. */
	for (const Row &row : rows) {
		if (!row.pool)
			continue; /* nicmr-mmap may meet the IOMMU's mapping limit: a figure */
		for (const auto &[cn, cell] : cells[row.label])
			failures += cell.ok ? 0 : 1;
		if (row.pool && !(write_gbps.count(row.label) && write_gbps[row.label] > 0))
			failures++;
	}
	return failures ? 1 : 0;
}
