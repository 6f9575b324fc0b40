/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fi_mr_bench (bench-fi-mr): one libfabric program run against several providers in the same
 * run, through libfabric's public API only (plus nicmr's ops extension, <nicmr/fi_nicmr.h>, to
 * take buffers from a nicmr pool). Each provider runs in a process of its own: the program runs
 * itself again as `--child <provider>` with FI_PROVIDER naming that provider alone and reads the
 * child's lines, so that no provider's progress thread (tcp starts one) shares the two cores
 * with another's rows. The floor and the native pair of the last lines run in a process of
 * their own too (`--child native`), with no provider loaded.
 *
 *   bench-fi-mr [--smoke] [--reps N] [--live N] [--ratios | --xp] [provider ...]
 *   (default: nicmr tcp shm; --xp: the cross-process part alone)
 *
 * What it measures, per provider:
 *   - fi_mr_reg and fi_close of one MR (4 KiB and 2 MiB), timed apart and as the pair, median of
 *     --reps repetitions, with no other MR live ("1 live MR": the timed one) and with --live
 *     other 4 KiB MRs registered first (default 100,000);
 *   - fi_mr_regv of four 4 KiB pages out of address order as one MR, and its fi_close, alone
 *     ("regv4x4KiB/alone"; a provider whose mr_iov_limit is below 4 says "unsupported");
 *   - fi_write of 64 KiB between two RDM endpoints of the process (16 in flight), median GB/s;
 *   - the cross-process part (fi_xp_bench.h): a server and a client process per provider,
 *     8-byte tagged ping-pong latency, fi_write 64 KiB bandwidth and 4 KiB latency, and
 *     fi_mr_reg of a fresh buffer then fi_write (registration on the critical path), with
 *     nicmr's ratios to tcp against the targets (latency <= tcp's, bandwidth >= 2x tcp's).
 * nicmr is measured twice: buffers from a nicmr pool (the fast path an application gets through
 * the ops extension) and plain mmap'd memory (the slow path: pin and DMA-map per MR). tcp (as
 * libfabric layers it for FI_EP_RDM, tcp;ofi_rxm, on the loopback interface) and shm register
 * plain mmap'd memory. A provider that cannot do something here says "unsupported" and why.
 * When nicmr is measured, also the floor (a UMR bind + revoke pair of 4 KiB, bench_umr_floor.h)
 * and the native pair (nicmr_mr_reg + nicmr_mr_dereg of 4 KiB in a pool) on a native device
 * opened with FI_NICMR_DEVICE, and the last lines compare them (bench_ratios.h). --ratios
 * measures only those and nicmr's 4 KiB cases (bench-mr runs it for its own last lines).
 *
 * Environment it sets when unset: FI_PROVIDER_PATH (the build's fabric/), FI_PROVIDER (in
 * each provider's process, that provider alone: the installed psm2 provider would otherwise
 * install a SIGSEGV handler that exits with status 1), FI_TCP_IFACE=lo (no NIC here),
 * FI_NICMR_DEVICE=emu:mkeys=262144 (the default 65536 keys cannot hold 100,000 MRs).
 *
 * Machine-readable lines (the children's, echoed by the parent, which builds the table from
 * them; the smoke test reads them too): "PROV <row> <libfabric's name> pid=<the process>
 * FI_PROVIDER=<its filter>", "RESULT <row> <case>
 * reg=<ns> close=<ns> pair=<ns>" (row "floor", case "umr/4KiB": reg is the bind, close the
 * revoke; row "native", case "4KiB/alone"), "RESULT <row> write64k gbps=<x>", "UNSUPPORTED <row>
 * <case> <reason>", "ERROR <what>"; the four "RATIOS" lines last.
 * --reps and --live take a count (bench_cli.h: digits only, 1 or more; --reps at most 1,000,000,
 * --live at most 10,000,000); providers are nicmr, tcp and shm, each at most once, and none with
 * --ratios; --child takes native, nicmr, tcp or shm. Anything else is a usage error (exit
 * status 2) found before a provider is opened; --help prints the usage and exits 0. Exit status
 * 1 when a measurement of nicmr failed or a child process did not end cleanly.
 */
#include <fcntl.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "bench_native.h"
#include "bench_ratios.h"
#include "fi_bench_util.h"
#include "fi_xp_bench.h"
#include "nicmr/fi_nicmr.h"

#ifndef NICMR_FI_PROVIDER_DIR
#define NICMR_FI_PROVIDER_DIR ""
#endif

namespace {

using nicmr::bench::Ep;
using nicmr::bench::fi_err;
using nicmr::bench::kKiB;
using nicmr::bench::kMiB;
using nicmr::bench::MmapBuf;
constexpr size_t kSizes[] = {4 * kKiB, 2 * kMiB};
constexpr size_t kBgSlot = 4 * kKiB;	/* each background MR */
constexpr size_t kBgArea = 16 * kMiB;	/* background MRs cycle over 4096 distinct pages */
constexpr size_t kTimedOff = 18 * kMiB; /* the timed MR: 2 MiB-aligned, after the background */
constexpr size_t kBufLen = 32 * kMiB;
constexpr size_t kWriteLen = 64 * kKiB;
constexpr size_t kWindow = 16;
constexpr uint64_t kAccess = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

struct Options {
	bool smoke = false;
	bool ratios = false;  /* only what the last lines need */
	bool xp_only = false; /* only the cross-process part */
	int reps = 301;
	size_t live = 100000;
	int write_reps = 9;
	int writes_per_rep = 256;
	std::vector<std::string> providers;
};

using nicmr::bench::median;
using nicmr::bench::now_ns;

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
		int ret =
			nicmr::bench::rdm_getinfo(name, FI_RMA | FI_WRITE | FI_REMOTE_WRITE, &info);
		if (ret != 0) {
			*err = "fi_getinfo(FI_EP_RDM, FI_RMA): " + fi_err(ret);
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

/* Times reps registrations by reg_one(&mr), each followed by the MR's fi_close, after
 * warmup_pairs(reps) untimed ones: the medians of the registration, the close and the pair into
 * *out, timed as bench_ratios.h says (the floor and the native pair of the last lines are timed
 * the same way). what names the registering call in *err. */
template <typename RegOne>
int time_pairs(int reps, const char *what, RegOne reg_one, RegFigures *out, std::string *err)
{
	fid_mr *mr = nullptr;
	auto reg = [&] { return reg_one(&mr); };
	auto close = [&] { return fi_close(&mr->fid); };
	nicmr::bench::PairSampler sampler;
	int failed = 0;
	int ret = sampler.run(nicmr::bench::warmup_pairs(reps), reg, close, &failed, false);
	if (ret == 0)
		ret = sampler.run(reps, reg, close, &failed);
	if (ret != 0) {
		*err = (failed == 1 ? std::string(what) : std::string("fi_close(mr)")) + ": " +
		       fi_err(ret);
		return ret;
	}
	const nicmr::bench::PairTimes t = sampler.medians();
	*out = {t.first, t.second, t.pair};
	return 0;
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
	if ((ret = a.open(c.domain, c.info, FI_CQ_FORMAT_CONTEXT, err)) != 0 ||
	    (ret = b.open(c.domain, c.info, FI_CQ_FORMAT_CONTEXT, err)) != 0)
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

/* The processes of a run, one per role: "native" (the floor and the native pair of the last
 * lines, no libfabric provider loaded), then one per provider named. */
const char *const kRoles[] = {"native", "nicmr", "tcp", "shm"};

void usage()
{
	std::printf(
		"usage: bench-fi-mr [--smoke] [--reps N] [--live N] [--ratios | --xp] "
		"[provider ...]\n"
		"fi_mr_reg / fi_close medians (4 KiB, 2 MiB; alone and with --live other MRs), "
		"fi_mr_regv and\nfi_write 64 KiB through libfabric, per provider, each "
		"provider in a process of its own; the cross-process part (a server and a client "
		"process per\nprovider: 8-byte tagged ping-pong, fi_write 64 KiB and 4 KiB, "
		"fi_mr_reg then fi_write);\nthen the floor (UMR bind + revoke), the "
		"native pair and the provider's against them.\n"
		"  --smoke     tiny counts (5 repetitions, 1,000 live MRs, few writes)\n"
		"  --reps N    repetitions of each timing, 1..%llu (default 301)\n"
		"  --live N    MRs live during the /live cases, 1..%llu (default 100,000)\n"
		"  --ratios    only what the last lines need: the floor, the native pair and "
		"nicmr's 4 KiB\n              cases (no provider may be named)\n"
		"  --xp        only the cross-process part\n"
		"  --child R   one process of a run (native, nicmr, tcp, shm, xp-server:P, "
		"xp-client:P:ADDRESS);\n              the parent runs these\n"
		"  providers:  nicmr tcp shm (default: all three)\n"
		"Exit status: 0, 1 when a measurement failed, 2 for bad arguments.\n",
		static_cast<unsigned long long>(kMaxReps),
		static_cast<unsigned long long>(kMaxLive));
}

/* The FI_PROVIDER filter of one provider's process: tcp needs ofi_rxm for FI_EP_RDM. */
std::string provider_filter(const std::string &p)
{
	return p == "tcp" ? "tcp,ofi_rxm" : p;
}

/* The rows a provider's process measures. */
std::vector<Row> rows_of(const std::string &provider, const Options &o)
{
	if (provider != "nicmr")
		return {{provider, provider, false}};
	if (o.ratios)
		return {{"nicmr", provider, true}};
	return {{"nicmr", provider, true}, {"nicmr-mmap", provider, false}};
}

/* The cases a row has: every size alone and with live MRs, the vectored one; --ratios: nicmr's
 * 4 KiB ones. */
std::vector<std::string> cases_of(const Options &o)
{
	std::vector<std::string> v;
	for (size_t size : kSizes) {
		if (o.ratios && size != 4 * kKiB)
			continue;
		for (size_t live : {size_t{0}, o.live})
			v.push_back(case_name(size, live));
	}
	if (!o.ratios)
		v.push_back(kRegvCase);
	return v;
}

/* One row in a provider's process: prints "PROV", then "RESULT", "UNSUPPORTED" and "ERROR" lines
 * (the parent reads them). */
void measure_row(const Row &row, const Options &o)
{
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
			ret = ops->pool_create(c.domain, kBufLen, NICMR_PAGE_2M, NICMR_NUMA_ANY,
					       FI_NICMR_POOL_FALLBACK, &pool);
		if (ret != 0)
			err = "nicmr pool: " + fi_err(ret);
		else
			base = static_cast<char *>(ops->pool_addr(pool));
	}
	std::printf("PROV %s %s pid=%d FI_PROVIDER=%s\n", row.label.c_str(),
		    (ret == 0 ? c.prov : row.request).c_str(), int(getpid()),
		    std::getenv("FI_PROVIDER") ? std::getenv("FI_PROVIDER") : "");
	if (ret != 0) {
		std::printf("UNSUPPORTED %s all %s\n", row.label.c_str(), err.c_str());
		std::fflush(stdout);
		return;
	}
	for (size_t size : kSizes) {
		if (o.ratios && size != 4 * kKiB)
			continue;
		for (size_t live : {size_t{0}, o.live}) {
			RegFigures f;
			err.clear();
			ret = time_reg_close(c, base, size, live, o.reps, &f, &err);
			if (ret == 0)
				std::printf("RESULT %s %s reg=%.0f close=%.0f pair=%.0f\n",
					    row.label.c_str(), case_name(size, live).c_str(), f.reg,
					    f.close, f.pair);
			else
				std::printf("UNSUPPORTED %s %s %s\n", row.label.c_str(),
					    case_name(size, live).c_str(), err.c_str());
			std::fflush(stdout);
		}
	}
	if (!o.ratios) {
		RegFigures f;
		err.clear();
		ret = time_regv(c, base, o.reps, &f, &err);
		if (ret == 0)
			std::printf("RESULT %s %s reg=%.0f close=%.0f pair=%.0f\n",
				    row.label.c_str(), kRegvCase, f.reg, f.close, f.pair);
		else
			std::printf("UNSUPPORTED %s %s %s\n", row.label.c_str(), kRegvCase,
				    err.c_str());
		std::fflush(stdout);
	}
	if (!o.ratios && row.label != "nicmr-mmap") {
		double gbps = 0;
		err.clear();
		ret = time_write(c, base + kTimedOff, base + kTimedOff + 4 * kMiB, o, &gbps, &err);
		if (ret == 0)
			std::printf("RESULT %s write64k gbps=%.3f\n", row.label.c_str(), gbps);
		else
			std::printf("UNSUPPORTED %s write64k %s\n", row.label.c_str(), err.c_str());
	}
	if (pool) {
		ret = ops->pool_destroy(pool);
		if (ret != 0)
			std::printf("ERROR nicmr pool_destroy: %s\n", fi_err(ret).c_str());
	}
	std::fflush(stdout);
}

/* The floor and the native pair (bench_native.h) on a native device opened as the provider
 * opens its own (FI_NICMR_DEVICE), in a process where no provider is loaded: "RESULT floor
 * umr/4KiB" (reg = the bind, close = the revoke) and "RESULT native 4KiB/alone", or an ERROR
 * line. */
void measure_native(const Options &o)
{
	nicmr::bench::FloorNative f;
	std::string err;
	for (const char *row : {"floor", "native"})
		std::printf("PROV %s native-api pid=%d FI_PROVIDER=%s\n", row, int(getpid()),
			    std::getenv("FI_PROVIDER") ? std::getenv("FI_PROVIDER") : "");
	if (nicmr::bench::measure_floor_native(std::getenv("FI_NICMR_DEVICE"), o.reps, &f, &err) !=
	    0) {
		std::printf("ERROR floor and native pair: %s\n", err.c_str());
	} else {
		std::printf("RESULT floor umr/4KiB reg=%.0f close=%.0f pair=%.0f\n", f.floor.first,
			    f.floor.second, f.floor.pair);
		std::printf("RESULT native 4KiB/alone reg=%.0f close=%.0f pair=%.0f\n",
			    f.native.first, f.native.second, f.native.pair);
	}
	std::fflush(stdout);
}

/* What the parent gathers from its children's lines. */
struct Gathered {
	std::map<std::string, std::map<std::string, Cell>> cells; /* row -> case -> figures */
	std::map<std::string, std::string> prov_of;
	std::map<std::string, double> write_gbps; /* -1: unsupported */
	/* The cross-process part: row -> case -> figure (xp-lat8, xp-write4k, xp-regwrite4k and
	 * xp-regclose4k in ns; xp-write64k in GB/s), why a row has none, and its processes. */
	std::map<std::string, std::map<std::string, double>> xp;
	std::map<std::string, std::string> xp_why;
	std::map<std::string, std::string> xp_prov;
	std::map<std::string, bool> xp_checked;
	int errors = 0;

	bool parse_xp(const std::string &line)
	{
		char row[64], cs[64], pv[64];
		double a, b;
		int off = 0;
		if (std::sscanf(line.c_str(), "RESULT %63s xp-regwrite4k ns=%lf close=%lf", row, &a,
				&b) == 3) {
			xp[row]["xp-regwrite4k"] = a;
			xp[row]["xp-regclose4k"] = b;
		} else if (std::sscanf(line.c_str(), "RESULT %63s %63s %n", row, cs, &off) == 2 &&
			   std::strncmp(cs, "xp-", 3) == 0) {
			const char *v = std::strchr(line.c_str() + off, '=');
			if (v)
				xp[row][cs] = std::strtod(v + 1, nullptr);
		} else if (std::sscanf(line.c_str(), "UNSUPPORTED %63s xp %n", row, &off) == 1 &&
			   off > 0) {
			std::string why = line.substr(size_t(off));
			while (!why.empty() && why.back() == '\n')
				why.pop_back();
			if (xp_why[row].empty())
				xp_why[row] = why;
		} else if (std::sscanf(line.c_str(), "XPROC %63s %63s %63s", row, cs, pv) == 3) {
			xp_prov[row] = pv;
		} else if (std::sscanf(line.c_str(), "XPCHECK %63s ok", row) == 1) {
			xp_checked[row] = true;
		} else {
			return false;
		}
		return true;
	}

	void parse(const std::string &line)
	{
		char row[64], cs[64];
		double reg, close, pair, gbps;
		int off = 0;
		if (parse_xp(line))
			return;
		if (std::sscanf(line.c_str(), "RESULT %63s %63s reg=%lf close=%lf pair=%lf", row,
				cs, &reg, &close, &pair) == 5) {
			Cell &c = cells[row][cs];
			c.ok = true;
			c.f = {reg, close, pair};
		} else if (std::sscanf(line.c_str(), "RESULT %63s write64k gbps=%lf", row, &gbps) ==
			   2) {
			write_gbps[row] = gbps;
		} else if (std::sscanf(line.c_str(), "UNSUPPORTED %63s %63s %n", row, cs, &off) ==
				   2 &&
			   off > 0) {
			std::string why = line.substr(size_t(off));
			while (!why.empty() && why.back() == '\n')
				why.pop_back();
			if (std::string(cs) == "write64k")
				write_gbps[row] = -1;
			else if (std::string(cs) == "all")
				cells[row]["all"].why = why;
			else
				cells[row][cs].why = why;
		} else if (std::sscanf(line.c_str(), "PROV %63s %63s", row, cs) == 2) {
			prov_of[row] = cs;
		} else if (line.rfind("ERROR ", 0) == 0) {
			errors++;
		}
	}
	/* A cell, or the reason its whole row was unsupported. */
	Cell cell(const std::string &row, const std::string &cs)
	{
		auto &r = cells[row];
		auto it = r.find(cs);
		if (it != r.end())
			return it->second;
		Cell c;
		auto all = r.find("all");
		c.why = all != r.end() ? all->second.why : "not measured";
		return c;
	}
};

/* A process of the run: this program again, its output on a pipe. */
struct Child {
	pid_t pid = -1;
	FILE *out = nullptr;
};

/* Starts this program again with args (argv[1] on) and the environment variables env set
 * (name, value); its stdout is c.out. pid is -1 when it could not be started. */
Child spawn(const char *self, const std::vector<std::string> &args,
	    const std::vector<std::pair<std::string, std::string>> &env)
{
	Child c;
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return c;
	std::fflush(stdout);
	const pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return c;
	}
	if (pid == 0) {
		if (dup2(fds[1], STDOUT_FILENO) < 0)
			_exit(127);
		for (const auto &[name, value] : env)
			setenv(name.c_str(), value.c_str(), 1);
		std::vector<std::string> all = {self};
		all.insert(all.end(), args.begin(), args.end());
		std::vector<char *> av;
		for (auto &a : all)
			av.push_back(a.data());
		av.push_back(nullptr);
		execv("/proc/self/exe", av.data());
		std::fprintf(stderr, "bench-fi-mr: exec of its own program failed: %s\n",
			     std::strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	c.out = fdopen(fds[0], "r");
	if (c.out == nullptr)
		close(fds[0]);
	c.pid = pid;
	return c;
}

/* Echoes the child's lines and hands each to g, until one starts with `until` (then in *hit,
 * and true) or the output ends (false). until null: to the end. */
bool read_lines(Child &c, Gathered *g, const char *until = nullptr, std::string *hit = nullptr)
{
	if (c.out == nullptr)
		return false;
	char *line = nullptr;
	size_t cap = 0;
	bool found = false;
	while (!found && getline(&line, &cap, c.out) > 0) {
		std::fputs(line, stdout);
		g->parse(line);
		if (until && std::strncmp(line, until, std::strlen(until)) == 0) {
			*hit = line;
			found = true;
		}
	}
	std::free(line);
	std::fflush(stdout);
	return found;
}

/* Reads the rest of the child's output and waits for it: its wait status, or -1 when it was
 * never started. */
int finish(Child &c, Gathered *g)
{
	if (c.pid < 0)
		return -1;
	read_lines(c, g);
	if (c.out)
		std::fclose(c.out);
	c.out = nullptr;
	int status = 0;
	while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
	}
	return status;
}

/* The --smoke, --reps and --live a child gets. */
std::vector<std::string> count_args(const Options &o)
{
	std::vector<std::string> a = {"--reps", std::to_string(o.reps), "--live",
				      std::to_string(o.live)};
	if (o.smoke)
		a.insert(a.begin(), "--smoke");
	return a;
}

/* Runs this program again as `--child role` with its output on a pipe; echoes each line and
 * hands it to g. Returns the child's wait status, or -1 when it could not be started. */
int run_child(const char *self, const std::string &role, const Options &o, bool user_provider,
	      Gathered *g)
{
	std::vector<std::string> args = {"--child", role};
	for (const auto &a : count_args(o))
		args.push_back(a);
	if (o.ratios)
		args.push_back("--ratios");
	std::vector<std::pair<std::string, std::string>> env;
	/* One provider per process: libfabric loads only the providers FI_PROVIDER names, so no
	 * other provider's progress thread runs beside this one's rows. */
	if (!user_provider && role != "native")
		env.emplace_back("FI_PROVIDER", provider_filter(role));
	Child c = spawn(self, args, env);
	return finish(c, g);
}

std::string ended(int status)
{
	if (status == -1)
		return "its process could not be started";
	if (WIFSIGNALED(status))
		return "its process was killed by signal " + std::to_string(WTERMSIG(status));
	return "its process exited with status " + std::to_string(WEXITSTATUS(status));
}

/* The cross-process table: per provider its figures, then nicmr's against each other one, with
 * the targets (latency at or below tcp's, bandwidth at least twice tcp's). */
void print_xp_table(const Options &o, Gathered *g)
{
	const nicmr::bench::xp::Counts n =
		o.smoke ? nicmr::bench::xp::Counts::smoke() : nicmr::bench::xp::Counts{};
	std::printf(
		"\ncross-process: a server and a client process per provider, FI_EP_RDM with "
		"tagged messages and RMA\n  lat8: 8-byte tagged ping-pong, half the median "
		"round trip of %d; write64k: fi_write 64 KiB, 16 in flight, median of %d x %d;\n"
		"  write4k: fi_write 4 KiB to its completion; reg+write4k: fi_mr_reg of a fresh "
		"4 KiB buffer, fi_write of it, to its completion; close: that MR's fi_close "
		"(medians of %d)\n",
		n.lat_iters, n.bw_reps, n.bw_writes, n.small_iters);
	std::printf("%-6s %-15s %9s %14s %11s %15s %9s\n", "row", "provider", "lat8 ns",
		    "write64k GB/s", "write4k ns", "reg+write4k ns", "close ns");
	for (const auto &p : o.providers) {
		auto &x = g->xp[p];
		if (!x.count("xp-regwrite4k")) {
			std::printf("%-6s %-15s unsupported: %s\n", p.c_str(),
				    g->xp_prov[p].c_str(), g->xp_why[p].c_str());
			continue;
		}
		std::printf("%-6s %-15s %9.0f %14.3f %11.0f %15.0f %9.0f%s\n", p.c_str(),
			    g->xp_prov[p].c_str(), x["xp-lat8"], x["xp-write64k"], x["xp-write4k"],
			    x["xp-regwrite4k"], x["xp-regclose4k"],
			    g->xp_checked[p] ? "" : "  (bytes not confirmed)");
	}
	auto &nx = g->xp["nicmr"];
	if (!nx.count("xp-regwrite4k"))
		return;
	for (const auto &p : o.providers) {
		auto &x = g->xp[p];
		if (p == "nicmr" || !x.count("xp-regwrite4k"))
			continue;
		const double lat = nx["xp-lat8"] / x["xp-lat8"];
		const double bw = nx["xp-write64k"] / x["xp-write64k"];
		const double rw = nx["xp-regwrite4k"] / x["xp-regwrite4k"];
		if (p == "tcp")
			std::printf(
				"ratios nicmr/tcp: latency %.2f (target <= 1.00: %s), bandwidth "
				"%.2f (target >= 2.00: %s), reg+write4k %.2f\n",
				lat, lat <= 1.0 ? "met" : "MISSED", bw,
				bw >= 2.0 ? "met" : "MISSED", rw);
		else
			std::printf("ratios nicmr/%s: latency %.2f, bandwidth %.2f, reg+write4k "
				    "%.2f\n",
				    p.c_str(), lat, bw, rw);
	}
}

/* The device each nicmr process of the cross-process part opens unless FI_NICMR_DEVICE names
 * one: a wire port of its own at a loopback address (the provider's default). */
constexpr const char *kXpDevice = "emu:addr=auto";

/* The cross-process part for provider p: its server process, then its client process, given
 * the address the server printed; each process with p alone (FI_PROVIDER) and, for nicmr, a
 * wire device of its own. A server left waiting by a client that stopped early is ended
 * (SIGTERM). Returns the number of processes that did not end cleanly, each said in an ERROR
 * line. */
int run_xp(const char *self, const std::string &p, const Options &o, bool user_provider,
	   bool user_device, Gathered *g)
{
	std::vector<std::pair<std::string, std::string>> env;
	if (!user_provider)
		env.emplace_back("FI_PROVIDER", provider_filter(p));
	if (!user_device)
		env.emplace_back("FI_NICMR_DEVICE", kXpDevice);
	std::vector<std::string> args = {"--child", "xp-server:" + p};
	if (o.smoke)
		args.emplace_back("--smoke");
	Child server = spawn(self, args, env);
	Child client;
	std::string line;
	if (read_lines(server, g, "XPADDR ", &line)) {
		char row[64], hex[1024];
		if (std::sscanf(line.c_str(), "XPADDR %63s %1023s", row, hex) == 2) {
			args[1] = "xp-client:" + p + ":" + hex;
			client = spawn(self, args, env);
		}
	}
	int bad = 0;
	if (client.pid >= 0 || server.pid < 0) {
		const int cs = finish(client, g);
		if (cs != 0) {
			std::printf("ERROR xp-client:%s: %s\n", p.c_str(), ended(cs).c_str());
			bad++;
		}
	}
	const bool complete = g->xp[p].count("xp-regwrite4k") != 0;
	if (!complete && server.pid > 0)
		kill(server.pid, SIGTERM);
	const int ss = finish(server, g);
	if (ss != 0 && complete) {
		std::printf("ERROR xp-server:%s: %s\n", p.c_str(), ended(ss).c_str());
		bad++;
	}
	if (g->xp_why[p].empty() && (!complete || !g->xp_checked[p]))
		g->xp_why[p] = complete ? "the server did not confirm the bytes written"
					: "the client stopped early";
	std::fflush(stdout);
	return bad;
}

/* What the run measures and where, before the first child's lines. */
void print_header(const Options &o, bool user_provider)
{
	std::printf("fi_mr_bench: fi_mr_reg / fi_close through libfabric %u.%u, medians of %d "
		    "repetitions (ns)\n",
		    FI_MAJOR(fi_version()), FI_MINOR(fi_version()), o.reps);
	std::printf("  alone: the timed MR is the only one live; live: %zu other 4 KiB MRs are "
		    "registered first\n",
		    o.live);
	if (!o.ratios)
		std::printf("  regv4x4KiB: fi_mr_regv of four 4 KiB pages out of address order "
			    "(one MR), alone\n");
	std::printf("  nicmr: buffers from a nicmr pool (ops extension, fast path); nicmr-mmap: "
		    "plain mmap'd memory (slow path); others: plain mmap'd memory\n");
	std::printf("  floor: UMR bind (reg) + revoke (close) of 4 KiB on a native device opened "
		    "as FI_NICMR_DEVICE; native: nicmr_mr_reg + nicmr_mr_dereg of 4 KiB in a "
		    "pool there\n");
	std::printf("  each in a process of its own: the floor and native pair, then each "
		    "provider (parent pid=%d); FI_PROVIDER=%s FI_NICMR_DEVICE=%s "
		    "FI_TCP_IFACE=%s\n",
		    int(getpid()),
		    user_provider ? std::getenv("FI_PROVIDER") : "(the process's provider)",
		    std::getenv("FI_NICMR_DEVICE"), std::getenv("FI_TCP_IFACE"));
	if (!o.ratios)
		std::printf(
			"  then the cross-process part: per provider a server and a client "
			"process (nicmr's each with a wire device of its own, FI_NICMR_DEVICE=%s "
			"unless set)\n\n",
			kXpDevice);
}

/* "xp-server:P" or "xp-client:P:HEX" with P a provider: its parts, or false. */
bool xp_role(const std::string &role, bool *server, std::string *provider, std::string *hex)
{
	const bool is_server = role.rfind("xp-server:", 0) == 0;
	if (!is_server && role.rfind("xp-client:", 0) != 0)
		return false;
	const std::string rest = role.substr(10);
	const size_t colon = rest.find(':');
	*server = is_server;
	*provider = is_server ? rest : rest.substr(0, colon);
	*hex = is_server || colon == std::string::npos ? "" : rest.substr(colon + 1);
	if (std::find(std::begin(kProviders), std::end(kProviders), *provider) ==
	    std::end(kProviders))
		return false;
	return is_server ? rest.find(':') == std::string::npos : !hex->empty();
}

} // namespace

int main(int argc, char **argv)
{
	using nicmr::bench::parse_count;
	using nicmr::bench::usage_error;
	const char *prog = "bench-fi-mr";
	Options o;
	std::string child;
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		uint64_t n;
		if (a == "--smoke") {
			o.smoke = true;
			o.reps = 5;
			o.live = 1000;
			o.write_reps = 2;
			o.writes_per_rep = 4;
		} else if (a == "--ratios") {
			o.ratios = true;
		} else if (a == "--xp") {
			o.xp_only = true;
		} else if (a == "--child") {
			if (i + 1 == argc)
				usage_error(prog, "--child needs a role");
			child = argv[++i];
			bool srv;
			std::string pv, hex;
			if (std::find(std::begin(kRoles), std::end(kRoles), child) ==
				    std::end(kRoles) &&
			    !xp_role(child, &srv, &pv, &hex))
				usage_error(prog,
					    "--child: unknown role '%s' (native, nicmr, tcp, shm, "
					    "xp-server:PROVIDER or xp-client:PROVIDER:ADDRESS)",
					    child.c_str());
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
	if (o.ratios && !o.providers.empty())
		usage_error(prog, "--ratios measures nicmr alone: name no provider with it");
	if (o.ratios && o.xp_only)
		usage_error(prog, "--ratios and --xp measure different things: name one");
	if (o.providers.empty())
		o.providers = o.ratios ? std::vector<std::string>{"nicmr"}
				       : std::vector<std::string>{"nicmr", "tcp", "shm"};

	const bool user_provider = std::getenv("FI_PROVIDER") != nullptr;
	const bool user_device = std::getenv("FI_NICMR_DEVICE") != nullptr;
	set_default_env("FI_PROVIDER_PATH", NICMR_FI_PROVIDER_DIR);
	set_default_env("FI_TCP_IFACE", "lo");
	set_default_env("FI_NICMR_DEVICE", "emu:mkeys=262144");

	if (!child.empty()) {
		bool server;
		std::string pv, hex;
		if (xp_role(child, &server, &pv, &hex))
			return server ? nicmr::bench::xp::run_server(pv, pv)
				      : nicmr::bench::xp::run_client(
						pv, pv, hex,
						o.smoke ? nicmr::bench::xp::Counts::smoke()
							: nicmr::bench::xp::Counts{});
		if (child == "native")
			measure_native(o);
		else
			for (const Row &row : rows_of(child, o))
				measure_row(row, o);
		return 0;
	}

	std::vector<Row> rows;
	for (const auto &p : o.providers)
		for (const Row &r : rows_of(p, o))
			rows.push_back(r);
	const std::vector<std::string> cases = cases_of(o);
	const bool nicmr =
		std::find(o.providers.begin(), o.providers.end(), "nicmr") != o.providers.end();

	if (o.xp_only)
		std::printf("fi_mr_bench --xp: the cross-process part alone, through libfabric "
			    "%u.%u (parent pid=%d); FI_PROVIDER=%s FI_NICMR_DEVICE=%s "
			    "FI_TCP_IFACE=%s\n\n",
			    FI_MAJOR(fi_version()), FI_MINOR(fi_version()), int(getpid()),
			    user_provider ? std::getenv("FI_PROVIDER") : "(the process's provider)",
			    user_device ? std::getenv("FI_NICMR_DEVICE") : kXpDevice,
			    std::getenv("FI_TCP_IFACE"));
	else
		print_header(o, user_provider);

	Gathered g;
	int failures = 0;
	std::vector<std::string> roles;
	if (nicmr && !o.xp_only)
		roles.push_back("native");
	for (const auto &p : o.providers)
		if (!o.xp_only)
			roles.push_back(p);
	for (const std::string &role : roles) {
		const int status = run_child(argv[0], role, o, user_provider, &g);
		const bool clean = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
		if (clean)
			continue;
		std::printf("ERROR %s: %s\n", role.c_str(), ended(status).c_str());
		failures++;
		if (role == "native")
			continue;
		/* Say what the process did not get to, so that every case has its line. */
		for (const Row &row : rows_of(role, o)) {
			for (const std::string &cn : cases)
				if (!g.cells[row.label].count(cn) &&
				    !g.cells[row.label].count("all"))
					g.parse("UNSUPPORTED " + row.label + " " + cn + " " +
						ended(status));
			if (!o.ratios && row.label != "nicmr-mmap" &&
			    !g.write_gbps.count(row.label))
				g.parse("UNSUPPORTED " + row.label + " write64k " + ended(status));
		}
	}
	if (!o.ratios)
		for (const auto &p : o.providers)
			failures += run_xp(argv[0], p, o, user_provider, user_device, &g);
	failures += g.errors;

	if (!o.ratios && !o.xp_only) {
		/* The table: medians, then nicmr's (pool) ratio against each other provider. */
		std::printf("\n%-11s %-15s %-16s %10s %10s %10s\n", "row", "provider", "case",
			    "reg ns", "close ns", "pair ns");
		for (const Row &row : rows) {
			for (const std::string &cn : cases) {
				const Cell cell = g.cell(row.label, cn);
				const std::string &pv = g.prov_of[row.label];
				if (cell.ok)
					std::printf("%-11s %-15s %-16s %10.0f %10.0f %10.0f\n",
						    row.label.c_str(), pv.c_str(), cn.c_str(),
						    cell.f.reg, cell.f.close, cell.f.pair);
				else
					std::printf("%-11s %-15s %-16s unsupported: %s\n",
						    row.label.c_str(), pv.c_str(), cn.c_str(),
						    cell.why.c_str());
			}
		}
	}

	if (!o.ratios && !o.xp_only && nicmr) {
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
					const Cell n = g.cell("nicmr", cn);
					const Cell b = g.cell(row.label, cn);
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

	if (!o.ratios && !o.xp_only) {
		std::printf("\nfi_write 64 KiB between two RDM endpoints of one domain, %zu in "
			    "flight, median of %d x %d writes\n",
			    kWindow, o.write_reps, o.writes_per_rep);
		for (const Row &row : rows) {
			if (row.label == "nicmr-mmap")
				continue;
			auto it = g.write_gbps.find(row.label);
			if (it == g.write_gbps.end() || it->second < 0)
				std::printf("  %-6s unsupported (see the UNSUPPORTED line above)\n",
					    row.label.c_str());
			else
				std::printf("  %-6s %8.3f GB/s\n", row.label.c_str(), it->second);
		}
		auto &w = g.write_gbps;
		if (w.count("nicmr") && w["nicmr"] > 0)
			for (const Row &row : rows)
				if (row.label != "nicmr" && w.count(row.label) && w[row.label] > 0)
					std::printf("  ratio nicmr/%s bandwidth: %.2f\n",
						    row.label.c_str(), w["nicmr"] / w[row.label]);
	}
	if (!o.ratios)
		print_xp_table(o, &g);
	/* nicmr's fast path must work: its failure is the program's failure. Other rows may be
	 * unsupported here (said above), which is a figure, not an error: nicmr-mmap maps each MR
	 * for DMA on its own and meets the IOMMU's mapping limit (65535) before 100,000 MRs. */
	for (const Row &row : rows) {
		if (!row.pool || o.xp_only)
			continue;
		for (const std::string &cn : cases)
			failures += g.cell(row.label, cn).ok ? 0 : 1;
		if (!o.ratios && !(g.write_gbps.count(row.label) && g.write_gbps[row.label] > 0))
			failures++;
	}
	if (nicmr && !o.xp_only &&
	    !(g.cell("floor", "umr/4KiB").ok && g.cell("native", "4KiB/alone").ok))
		failures++;
	/* And its cross-process part: every figure, and the bytes confirmed by its server. */
	if (nicmr && !o.ratios) {
		for (const char *cn : nicmr::bench::xp::kCases)
			failures += g.xp["nicmr"].count(cn) ? 0 : 1;
		failures += g.xp_checked["nicmr"] ? 0 : 1;
	}
	if (o.xp_only)
		return failures ? 1 : 0;

	/* The last lines (bench_ratios.h): the floor, the native pair's overhead over it, the
	 * provider's over the native pair, and the provider's flatness in the live MRs. */
	nicmr::bench::RatioFigures r;
	const Cell fl = g.cell("floor", "umr/4KiB"), nat = g.cell("native", "4KiB/alone");
	const Cell p1 = g.cell("nicmr", "4KiB/alone"), pl = g.cell("nicmr", case_name(4 * kKiB, 1));
	r.floor = fl.ok ? fl.f.pair : 0;
	r.native = nat.ok ? nat.f.pair : 0;
	if (p1.ok) {
		r.provider = p1.f.pair;
		r.reg1 = p1.f.reg;
		r.close1 = p1.f.close;
	}
	if (pl.ok) {
		r.reg_live = pl.f.reg;
		r.close_live = pl.f.close;
	}
	r.live = o.live;
	std::printf("\n");
	nicmr::bench::print_ratio_lines(r);
	return failures ? 1 : 0;
}
