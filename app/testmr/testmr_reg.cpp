/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registration demo (testmr_reg.h). Each step says what it does, what nicmr answered and
 * whether that is what a user should expect; an unexpected answer makes the demo fail. The
 * headline figures are medians of 5 repetitions of `reps` timed pairs, measured here and now:
 * they say what this machine does in this run, not what a benchmark would claim.
 */
#include "testmr_reg.h"

#include <limits.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mr_keys.h"
#include "nicmr/nicmr.h"
#include "nicmr_config.h"
#include "nicmr_log.h"

#if NICMR_HAVE_LIBFABRIC
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include "nicmr/fi_nicmr.h"
#endif

namespace nicmr::testmr {
namespace {

constexpr int kRepetitions = 5;
constexpr size_t kPoolSize = size_t{16} << 20;

const char *code_name(int rc)
{
	switch (-rc) {
	case 0:
		return "0";
	case EINVAL:
		return "-EINVAL";
	case ERANGE:
		return "-ERANGE";
	case EACCES:
		return "-EACCES";
	case ENOKEY:
		return "-ENOKEY";
	case EBUSY:
		return "-EBUSY";
	case ENOSPC:
		return "-ENOSPC";
	case EBADMSG:
		return "-EBADMSG";
	case EXDEV:
		return "-EXDEV";
	case EFAULT:
		return "-EFAULT";
	case EOPNOTSUPP:
		return "-EOPNOTSUPP";
	case EKEYREJECTED:
		return "-EKEYREJECTED";
	case EEXIST:
		return "-EEXIST";
#if NICMR_HAVE_LIBFABRIC
	case FI_ETOOSMALL:
		return "-FI_ETOOSMALL";
	case FI_EBADFLAGS:
		return "-FI_EBADFLAGS";
#endif
	default:
		return "another code";
	}
}

/* Says what a step gave and whether that was expected; remembers a surprise. */
class Steps {
public:
	explicit Steps(FILE *out) : out_(out) {}
	bool expect(const char *what, int got, int want)
	{
		const bool ok = got == want;
		std::fprintf(out_, "  %-58s -> %s (%d)%s\n", what, code_name(got), got,
			     ok ? "" : "   UNEXPECTED");
		if (!ok)
			failed_ = true;
		return ok;
	}
	void fail() { failed_ = true; }
	bool failed() const noexcept { return failed_; }

private:
	FILE *out_;
	bool failed_ = false;
};

/* Median, over kRepetitions, of the time one call of f takes (f runs reps times each). */
template <class F> double median_ns(unsigned reps, F &&f)
{
	std::vector<double> v;
	for (int r = 0; r < kRepetitions; r++) {
		const auto t0 = std::chrono::steady_clock::now();
		for (unsigned i = 0; i < reps; i++)
			if (!f())
				return -1;
		const auto t1 = std::chrono::steady_clock::now();
		v.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / reps);
	}
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

/* Plain mmap'd memory outside every pool, unmapped when it goes. */
struct Plain {
	explicit Plain(size_t n) : len(n)
	{
		void *m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			       0);
		p = m == MAP_FAILED ? nullptr : static_cast<char *>(m);
	}
	~Plain()
	{
		if (p)
			munmap(p, len);
	}
	Plain(const Plain &) = delete;
	Plain &operator=(const Plain &) = delete;
	char *p = nullptr;
	size_t len;
};

struct Figures {
	double reg_4k = -1, reg_2m = -1, reg_mmap = -1, lookup = -1;
};

void print_figures(FILE *out, const char *how, const Figures &f)
{
	std::fprintf(out, "  %-44s %10.0f ns\n", "register + deregister 4 KiB in the pool",
		     f.reg_4k);
	std::fprintf(out, "  %-44s %10.0f ns\n", "register + deregister 2 MiB in the pool",
		     f.reg_2m);
	std::fprintf(out, "  %-44s %10.0f ns\n", "register + deregister 4 KiB of mmap'd memory",
		     f.reg_mmap);
	if (f.lookup >= 0)
		std::fprintf(out, "  %-44s %10.1f ns\n", "key lookup (lockless)", f.lookup);
	std::fprintf(out, "  (%s; medians of %d repetitions, this run, %s build; the benchmarks",
		     how, kRepetitions, NICMR_BUILDTYPE);
	std::fprintf(out, " measure the release build: devtools/bench.sh)\n");
}

/* ---- native API ------------------------------------------------------------------------- */

Figures native_figures(nicmr_device *dev, nicmr_pd *pd, char *pool, unsigned reps)
{
	Figures f;
	const uint64_t acc = NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_WRITE;
	auto pair = [&](void *addr, size_t len) {
		return median_ns(reps, [&] {
			nicmr_mr *m = nullptr;
			return nicmr_mr_reg(pd, addr, len, acc, 0, 0, &m) == 0 &&
			       nicmr_mr_dereg(m) == 0;
		});
	};
	f.reg_4k = pair(pool, 4096);
	f.reg_2m = pair(pool + (size_t{2} << 20), size_t{2} << 20);
	Plain plain(4096);
	if (plain.p != nullptr)
		f.reg_mmap = pair(plain.p, 4096);
	nicmr_mr *m = nullptr;
	if (nicmr_mr_reg(pd, pool, 4096, acc, 0, 0, &m) == 0) {
		const uint32_t key = nicmr_mr_key(m);
		volatile uint64_t sink = 0;
		f.lookup = median_ns(reps * 50, [&] {
			uint64_t iova = 0;
			const int rc = nicmr_key_lookup(dev, key, uintptr_t(pool) + 64, 64,
							NICMR_ACCESS_REMOTE_WRITE, &iova);
			sink = sink + iova;
			return rc == 0;
		});
		nicmr_mr_dereg(m);
	}
	return f;
}

void hex_dump(FILE *out, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i += 32) {
		std::fprintf(out, "    ");
		for (size_t j = i; j < i + 32 && j < n; j++)
			std::fprintf(out, "%02x", b[j]);
		std::fprintf(out, "\n");
	}
}

int native_demo(FILE *out, const RegDemoOptions &o, Figures *figures)
{
	Steps st(out);
	nicmr_device *dev = nullptr;
	if (!st.expect("open the device (nicmr_device_open)", nicmr_device_open(o.spec, &dev), 0))
		return 1;
	nicmr_device_attr attr{};
	nicmr_device_query(dev, &attr);
	std::fprintf(out, "  device %s: %u mkey indices, %u data-path reader ids, extensions %s\n",
		     attr.name, attr.mkey_count, attr.max_readers,
		     attr.extensions ? "yes" : "none");
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	st.expect("allocate a PD", nicmr_pd_alloc(dev, &pd), 0);
	nicmr_pool_params pp;
	nicmr_pool_params_init(&pp);
	pp.size = kPoolSize;
	pp.page_size = o.page_size;
	pp.allow_fallback = o.fallback ? 1 : 0;
	pp.name = "testmr-reg";
	if (!st.expect("create a 16 MiB pool, DMA-mapped once", nicmr_pool_create(dev, &pp, &pool),
		       0)) {
		nicmr_pd_free(pd);
		nicmr_device_close(dev);
		return 1;
	}
	char *base = static_cast<char *>(nicmr_pool_addr(pool));
	std::fprintf(out, "  pool at VA %p, %zu bytes\n", static_cast<void *>(base),
		     nicmr_pool_len(pool));

	/* Regions: A in the pool (windows allowed), B 2 MiB read-only, C plain memory. */
	const uint64_t rw =
		NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_REMOTE_WRITE;
	nicmr_mr *a = nullptr, *b = nullptr, *c = nullptr;
	Plain plain(16 << 10);
	st.expect("register A: pool + 4 KiB, 64 KiB, read/write, MW_BIND",
		  nicmr_mr_reg(pd, base + 4096, 64 << 10, rw | NICMR_ACCESS_MW_BIND, 0, 0, &a), 0);
	st.expect("register B: pool + 2 MiB, 2 MiB, remote read",
		  nicmr_mr_reg(pd, base + (2 << 20), 2 << 20, NICMR_ACCESS_REMOTE_READ, 0, 0, &b),
		  0);
	st.expect("register C: 16 KiB of mmap'd memory (slow path)",
		  nicmr_mr_reg(pd, plain.p, 16 << 10, rw, 0, 0, &c), 0);
	if (a == nullptr || b == nullptr || c == nullptr) {
		st.fail();
	} else {
		for (auto [name, m] : {std::pair{"A", a}, std::pair{"B", b}, std::pair{"C", c}}) {
			const uint32_t k = nicmr_mr_key(m);
			std::fprintf(
				out,
				"  key of %s: 0x%08x (mkey index %u, variant 0x%02x), %s path\n",
				name, k, nicmr::mr::mkey_index(k), nicmr::mr::mkey_variant(k),
				nicmr_mr_in_pool(m) == 1 ? "fast (pool)" : "slow (pinned)");
		}
		const uint32_t ka = nicmr_mr_key(a), kb = nicmr_mr_key(b);
		const uint64_t va = uintptr_t(base) + 4096;
		uint64_t iova = 0;
		st.expect("lookup A [+0, 64 KiB) for remote write",
			  nicmr_key_lookup(dev, ka, va, 64 << 10, NICMR_ACCESS_REMOTE_WRITE, &iova),
			  0);
		std::fprintf(out, "    A's first byte is at IOVA 0x%" PRIx64 "\n", iova);
		st.expect("lookup A one byte past its end",
			  nicmr_key_lookup(dev, ka, va + (64 << 10), 1, NICMR_ACCESS_REMOTE_READ,
					   &iova),
			  -ERANGE);
		st.expect("lookup B for remote write (it allows reads only)",
			  nicmr_key_lookup(dev, kb, uintptr_t(base) + (2 << 20), 8,
					   NICMR_ACCESS_REMOTE_WRITE, &iova),
			  -EACCES);

		/* Raw keys: the size first, then the blob, then back to a key. */
		uint8_t raw[NICMR_RAW_KEY_SIZE];
		size_t size = 0;
		st.expect("raw key of A with no buffer (asks the size)",
			  nicmr_mr_raw_attr(a, nullptr, &size), -ENOSPC);
		size = sizeof(raw);
		st.expect("raw key of A", nicmr_mr_raw_attr(a, raw, &size), 0);
		hex_dump(out, raw, size);
		uint64_t mapped = 0;
		st.expect("map the raw key back to a key",
			  nicmr_mr_map_raw(dev, raw, size, &mapped), 0);
		std::fprintf(out, "    mapped key 0x%08" PRIx64 " (%s A's)\n", mapped,
			     mapped == ka ? "the same as" : "NOT");
		if (mapped != ka)
			st.fail();
		raw[20] ^= 0x40;
		const int tampered = nicmr_mr_map_raw(dev, raw, size, &mapped);
		std::fprintf(out, "  %-58s -> %s (%d)%s\n", "map a raw key with one bit flipped",
			     code_name(tampered), tampered, tampered < 0 ? "" : "   UNEXPECTED");
		if (tampered >= 0)
			st.fail();

		/* A sub-MR and a memory window keep A alive. */
		nicmr_mr *sub = nullptr;
		st.expect("sub-MR of A: [+4 KiB, 4 KiB), remote read",
			  nicmr_mr_reg_sub(a, 4096, 4096, NICMR_ACCESS_REMOTE_READ, 0, 0, &sub), 0);
		st.expect("deregister A while the sub-MR lives", nicmr_mr_dereg(a), -EBUSY);
		if (sub)
			st.expect("deregister the sub-MR", nicmr_mr_dereg(sub), 0);
		nicmr_mw *mw = nullptr;
		uint32_t rkey = 0;
		st.expect("allocate a memory window", nicmr_mw_alloc(pd, &mw), 0);
		if (mw) {
			st.expect("bind it to A [+8 KiB, 4 KiB), remote write",
				  nicmr_mw_bind(mw, a, va + 8192, 4096, NICMR_ACCESS_REMOTE_WRITE,
						&rkey),
				  0);
			std::fprintf(out, "    window rkey 0x%08x\n", rkey);
			st.expect("lookup the window's rkey just past the window",
				  nicmr_key_lookup(dev, rkey, va + 8192 + 4096, 1,
						   NICMR_ACCESS_REMOTE_WRITE, &iova),
				  -ERANGE);
			st.expect("invalidate the window", nicmr_mw_invalidate(mw), 0);
			st.expect("lookup the invalidated rkey",
				  nicmr_key_lookup(dev, rkey, va + 8192, 1,
						   NICMR_ACCESS_REMOTE_WRITE, &iova),
				  -ENOKEY);
			st.expect("free the window", nicmr_mw_free(mw), 0);
		}
		/* Refresh re-maps C's pages under the same key. */
		uint64_t before = 0, after = 0;
		nicmr_key_lookup(dev, nicmr_mr_key(c), uintptr_t(plain.p), 1,
				 NICMR_ACCESS_REMOTE_WRITE, &before);
		st.expect("refresh C (its pages mapped anew, key kept)",
			  nicmr_mr_refresh(c, nullptr, 0), 0);
		nicmr_key_lookup(dev, nicmr_mr_key(c), uintptr_t(plain.p), 1,
				 NICMR_ACCESS_REMOTE_WRITE, &after);
		std::fprintf(out, "    C's IOVA 0x%" PRIx64 " -> 0x%" PRIx64 "\n", before, after);

		/* Bad input gets its code and leaves nothing. */
		nicmr_mr *bad = nullptr;
		st.expect("register 0 bytes", nicmr_mr_reg(pd, base, 0, rw, 0, 0, &bad), -EINVAL);
		st.expect("register remote write without local write (ibv rule)",
			  nicmr_mr_reg(pd, base, 4096,
				       NICMR_ACCESS_REMOTE_WRITE | NICMR_ACCESS_REMOTE_ATOMIC, 0, 0,
				       &bad),
			  -EINVAL);
		/* A requested key needs a device that creates mkeys at chosen indices (emu
		 * option mkey_by_name=1); a stock one chooses every key itself. */
		nicmr_device_attr da{};
		nicmr_device_query(dev, &da);
		if (da.requested_keys)
			st.expect(
				"register with A's key requested (live)",
				nicmr_mr_reg(pd, base, 4096, rw, NICMR_MR_REQUESTED_KEY, ka, &bad),
				-EEXIST);
		else
			st.expect(
				"register with a requested key (the device chooses every key)",
				nicmr_mr_reg(pd, base, 4096, rw, NICMR_MR_REQUESTED_KEY, ka, &bad),
				-EOPNOTSUPP);

		st.expect("deregister A", nicmr_mr_dereg(a), 0);
		st.expect("lookup A's key after its deregistration returned",
			  nicmr_key_lookup(dev, ka, va, 1, NICMR_ACCESS_REMOTE_READ, &iova),
			  -ENOKEY);
		a = nullptr;
	}
	for (nicmr_mr *m : {a, b, c})
		if (m)
			nicmr_mr_dereg(m);
	*figures = native_figures(dev, pd, base, o.reps);
	st.expect("destroy the pool", nicmr_pool_destroy(pool), 0);
	st.expect("free the PD", nicmr_pd_free(pd), 0);
	st.expect("close the device", nicmr_device_close(dev), 0);
	return st.failed() ? 1 : 0;
}

/* ---- libfabric ------------------------------------------------------------------------- */

#if NICMR_HAVE_LIBFABRIC
/* Where the provider is (app/testmr/meson.build): the installed one relative to the installed
 * testmr's directory (absolute when -Dprovider_dir is outside the prefix), and, for the
 * testmr of the build tree (NICMR_TESTMR_BUILD_DIR), the build's fabric/. */
#ifndef NICMR_FI_PROVIDER_INSTALLED
#define NICMR_FI_PROVIDER_INSTALLED ""
#endif
#ifndef NICMR_FI_PROVIDER_BUILD
#define NICMR_FI_PROVIDER_BUILD ""
#endif
#ifndef NICMR_TESTMR_BUILD_DIR
#define NICMR_TESTMR_BUILD_DIR ""
#endif

/* The directory of the running testmr, resolved ("" when /proc/self/exe cannot be read). */
std::string own_dir()
{
	char exe[PATH_MAX];
	if (realpath("/proc/self/exe", exe) == nullptr)
		return "";
	char *slash = std::strrchr(exe, '/');
	return slash ? std::string(exe, slash) : std::string();
}

/* The FI_PROVIDER_PATH testmr's --provider mode uses unless the environment names one: the
 * build's provider for the build tree's testmr, the installed provider for an installed one
 * (found from testmr's own directory, so that an installed tree can move). *origin says
 * which. */
std::string provider_dir(const char **origin)
{
	const std::string dir = own_dir();
	char build[PATH_MAX];
	if (!dir.empty() && NICMR_TESTMR_BUILD_DIR[0] != '\0' &&
	    realpath(NICMR_TESTMR_BUILD_DIR, build) != nullptr && dir == build) {
		*origin = "this build tree's provider";
		return NICMR_FI_PROVIDER_BUILD;
	}
	*origin = "the installed provider, beside testmr's install";
	const char *installed = NICMR_FI_PROVIDER_INSTALLED;
	if (installed[0] == '/' || dir.empty())
		return installed;
	const std::string path = dir + "/" + installed;
	char resolved[PATH_MAX];
	return realpath(path.c_str(), resolved) != nullptr ? resolved : path;
}

struct Fabric {
	fi_info *info = nullptr;
	fid_fabric *fabric = nullptr;
	fid_domain *domain = nullptr;
	~Fabric()
	{
		if (domain)
			fi_close(&domain->fid);
		if (fabric)
			fi_close(&fabric->fid);
		if (info)
			fi_freeinfo(info);
	}
};

int provider_demo(FILE *out, const RegDemoOptions &o, Figures *figures)
{
	/* The provider that goes with this testmr, unless the environment names one; only
	 * nicmr, so that no other provider's library (and its signal handlers) is loaded. */
	const char *origin = "set in the environment";
	if (std::getenv("FI_PROVIDER_PATH") == nullptr) {
		const std::string dir = provider_dir(&origin);
		if (!dir.empty())
			setenv("FI_PROVIDER_PATH", dir.c_str(), 1);
	}
	setenv("FI_PROVIDER", "nicmr", 0);
	const char *path = std::getenv("FI_PROVIDER_PATH");
	std::fprintf(out, "  provider path %s (%s)\n", path ? path : "(libfabric's default)",
		     origin);
	Steps st(out);
	Fabric f;
	fi_info *hints = fi_allocinfo();
	if (hints == nullptr)
		return 1;
	hints->fabric_attr->prov_name = strdup("nicmr");
	hints->domain_attr->mr_mode =
		FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_RAW;
	const int gi = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &f.info);
	fi_freeinfo(hints);
	if (!st.expect("fi_getinfo(prov_name nicmr)", gi, 0))
		return 1;
	std::fprintf(out, "  provider %s %u.%u, fabric %s, domain %s, mr_mode 0x%x, key size %zu\n",
		     f.info->fabric_attr->prov_name, FI_MAJOR(f.info->fabric_attr->prov_version),
		     FI_MINOR(f.info->fabric_attr->prov_version), f.info->fabric_attr->name,
		     f.info->domain_attr->name, unsigned(f.info->domain_attr->mr_mode),
		     f.info->domain_attr->mr_key_size);
	st.expect("fi_fabric", fi_fabric(f.info->fabric_attr, &f.fabric, nullptr), 0);
	if (f.fabric == nullptr ||
	    !st.expect("fi_domain", fi_domain(f.fabric, f.info, &f.domain, nullptr), 0))
		return 1;
	fi_nicmr_pool_ops *ops = nullptr;
	st.expect("fi_open_ops(\"" FI_NICMR_POOL_OPS "\")",
		  fi_open_ops(&f.domain->fid, FI_NICMR_POOL_OPS, 0, reinterpret_cast<void **>(&ops),
			      nullptr),
		  0);
	if (ops == nullptr)
		return 1;
	fi_nicmr_pool *pool = nullptr;
	if (!st.expect("a 16 MiB nicmr pool through the ops extension",
		       ops->pool_create(f.domain, kPoolSize, o.page_size, NICMR_NUMA_ANY,
					o.fallback ? FI_NICMR_POOL_FALLBACK : 0, &pool),
		       0))
		return 1;
	char *base = static_cast<char *>(ops->pool_addr(pool));
	const uint64_t rw = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	fid_mr *a = nullptr, *c = nullptr;
	Plain plain(16 << 10);
	st.expect("fi_mr_reg A: pool + 4 KiB, 64 KiB",
		  fi_mr_reg(f.domain, base + 4096, 64 << 10, rw, 0, 0, 0, &a, nullptr), 0);
	st.expect("fi_mr_reg C: 16 KiB of mmap'd memory",
		  fi_mr_reg(f.domain, plain.p, 16 << 10, rw, 0, 0, 0, &c, nullptr), 0);
	if (a != nullptr && c != nullptr) {
		std::fprintf(out, "  A: %s path; C: %s path\n",
			     ops->mr_in_pool(a) == 1 ? "fast (pool)" : "slow",
			     ops->mr_in_pool(c) == 1 ? "fast (pool)" : "slow (pinned)");
		const uint64_t k = fi_mr_key(a);
		std::fprintf(out, "  fi_mr_key(A) = %s (FI_MR_RAW: keys travel as raw keys)\n",
			     k == FI_KEY_NOTAVAIL ? "FI_KEY_NOTAVAIL" : "a key");
		uint8_t raw[64];
		size_t size = 0;
		uint64_t base_addr = 0;
		st.expect("fi_mr_raw_attr with no room (asks the size)",
			  fi_mr_raw_attr(a, &base_addr, raw, &size, 0), -FI_ETOOSMALL);
		std::fprintf(out, "    raw key size %zu\n", size);
		size = sizeof(raw);
		st.expect("fi_mr_raw_attr", fi_mr_raw_attr(a, &base_addr, raw, &size, 0), 0);
		hex_dump(out, raw, size);
		uint64_t key = 0;
		st.expect("fi_mr_map_raw", fi_mr_map_raw(f.domain, base_addr, raw, size, &key, 0),
			  0);
		std::fprintf(out, "    mapped key 0x%08" PRIx64 ", base address 0x%" PRIx64 "\n",
			     key, base_addr);
		st.expect("fi_mr_unmap_key", fi_mr_unmap_key(f.domain, key), 0);
		fid_mr *bad = nullptr;
		st.expect("fi_mr_reg of 0 bytes",
			  fi_mr_reg(f.domain, base, 0, rw, 0, 0, 0, &bad, nullptr), -FI_EINVAL);
		st.expect("fi_mr_reg with an unknown flag",
			  fi_mr_reg(f.domain, base, 4096, rw, 0, 0, 1ull << 62, &bad, nullptr),
			  -FI_EBADFLAGS);
	} else {
		st.fail();
	}
	if (a)
		st.expect("fi_close(A)", fi_close(&a->fid), 0);
	if (c)
		st.expect("fi_close(C)", fi_close(&c->fid), 0);

	auto pair = [&](void *addr, size_t len) {
		return median_ns(o.reps, [&] {
			fid_mr *m = nullptr;
			return fi_mr_reg(f.domain, addr, len, rw, 0, 0, 0, &m, nullptr) == 0 &&
			       fi_close(&m->fid) == 0;
		});
	};
	figures->reg_4k = pair(base, 4096);
	figures->reg_2m = pair(base + (size_t{2} << 20), size_t{2} << 20);
	figures->reg_mmap = plain.p ? pair(plain.p, 4096) : -1;
	st.expect("destroy the pool", ops->pool_destroy(pool), 0);
	return st.failed() ? 1 : 0;
}
#endif

} // namespace

int reg_demo(FILE *out, const RegDemoOptions &o)
{
	/* Every refusal below is expected and printed with its code: the library's own warning
	 * lines would only repeat them, so they are off unless NICMR_LOG_LEVEL asks for them. */
	struct QuietLog {
		LogLevel saved = log_level();
		QuietLog()
		{
			if (std::getenv("NICMR_LOG_LEVEL") == nullptr)
				set_log_level(LogLevel::error);
		}
		~QuietLog() { set_log_level(saved); }
		QuietLog(const QuietLog &) = delete;
		QuietLog &operator=(const QuietLog &) = delete;
	} quiet_log;
	Figures native;
	if (!o.provider) {
		std::fprintf(
			out,
			"\n-- memory registration through nicmr's native API (the registration "
			"engine: UMR fast path, lockless lookups)\n");
		const int rc = native_demo(out, o, &native);
		std::fprintf(out, "\n-- headline figures\n");
		print_figures(out, "native API", native);
		return rc;
	}
#if NICMR_HAVE_LIBFABRIC
	Figures fi;
	std::fprintf(out,
		     "\n-- memory registration through libfabric: fi_mr_* on the nicmr provider "
		     "(libnicmr-fi.so, loaded by the system libfabric)\n");
	int rc = provider_demo(out, o, &fi);
	std::fprintf(out, "\n-- the same steps' figures through the native API, for comparison\n");
	Steps quiet(out);
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	nicmr_pool_params pp;
	nicmr_pool_params_init(&pp);
	pp.size = kPoolSize;
	pp.page_size = o.page_size;
	pp.allow_fallback = o.fallback ? 1 : 0;
	if (nicmr_device_open(o.spec, &dev) == 0 && nicmr_pd_alloc(dev, &pd) == 0 &&
	    nicmr_pool_create(dev, &pp, &pool) == 0)
		native =
			native_figures(dev, pd, static_cast<char *>(nicmr_pool_addr(pool)), o.reps);
	else
		rc = 1;
	if (pool)
		nicmr_pool_destroy(pool);
	if (pd)
		nicmr_pd_free(pd);
	if (dev)
		nicmr_device_close(dev);
	std::fprintf(out, "\n-- headline figures\n");
	print_figures(out, "through libfabric's fi_mr_reg + fi_close", fi);
	print_figures(out, "native API", native);
	if (native.reg_4k > 0)
		std::fprintf(out,
			     "  libfabric / native, 4 KiB in the pool: %.2fx (the provider's own "
			     "objects on top of the same engine)\n",
			     fi.reg_4k / native.reg_4k);
	return rc;
#else
	std::fprintf(out, "testmr: built without libfabric: --provider is not available\n");
	return 1;
#endif
}

} // namespace nicmr::testmr
