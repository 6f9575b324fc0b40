/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * `testmr hw-check` (testmr_hwcheck.h). Only the native API: what runs here is what an
 * application runs, on whatever device the spec names. A failed step is reported with the call
 * and its code, and with the last error the library logged, which for a refused firmware
 * command names the command, its status and its syndrome (drivers/mlx5/mlx5_cmd.cpp logs
 * them).
 */
#include "testmr_hwcheck.h"

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "nicmr/nicmr.h"

namespace nicmr::testmr {
namespace {

constexpr size_t kPoolSize = 64 * 1024;
constexpr size_t kXfer = 4096;

/*
 * The library's log while the check runs: every line still goes to stderr as nicmr's own
 * handler writes it, and the last error or warning is kept for the failure report.
 */
struct LogTap {
	static constexpr size_t kKept = 8;
	std::mutex mu;
	std::vector<std::string> lines; /* "component: message", the first kKept of the step */
	nicmr_log_level level = NICMR_LOG_WARN;
	nicmr_log_fn prev_fn = nullptr;
	void *prev_ctx = nullptr;

	static void on_line(void *ctx, nicmr_log_level level, const char *component, const char *,
			    int, const char *msg)
	{
		auto *t = static_cast<LogTap *>(ctx);
		static const char *const names[] = {"error", "warn", "info", "debug"};
		std::fprintf(stderr, "nicmr %s %s: %s\n", names[level & 3], component, msg);
		if (level <= NICMR_LOG_WARN) {
			std::lock_guard lk(t->mu);
			if (t->lines.size() < kKept)
				t->lines.push_back(std::string(component) + ": " + msg);
		}
	}
	void install()
	{
		nicmr_log_get(&level, &prev_fn, &prev_ctx);
		/* Warnings at least: a refused command is logged at error, its context at warn. */
		nicmr_log_set(level < NICMR_LOG_WARN ? NICMR_LOG_WARN : level, on_line, this);
	}
	void remove() { nicmr_log_set(level, prev_fn, prev_ctx); }
	std::vector<std::string> take()
	{
		std::lock_guard lk(mu);
		std::vector<std::string> v;
		v.swap(lines);
		return v;
	}
};

class Check {
public:
	Check(FILE *out, LogTap &tap) : out_(out), tap_(tap) {}

	/* Starts step n: prints its name; the line ends with pass() or fail(). */
	void begin(const char *name)
	{
		n_++;
		name_ = name;
		std::fprintf(out_, "[%d/%d] %-9s ... ", n_, kHwCheckSteps, name);
		std::fflush(out_);
		tap_.take(); /* an older message says nothing about this step */
	}
	__attribute__((format(printf, 2, 3))) void pass(const char *fmt, ...)
	{
		va_list ap;
		va_start(ap, fmt);
		std::fputs("PASS (", out_);
		// NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
		std::vfprintf(out_, fmt, ap);
		va_end(ap);
		std::fputs(")\n", out_);
	}
	/* what returned rc: the failure line, then the device's last word. Returns false. */
	bool fail_rc(const char *what, int rc)
	{
		std::fprintf(out_, "FAIL: %s returned %d (%s)\n", what, rc, std::strerror(-rc));
		return report();
	}
	__attribute__((format(printf, 2, 3))) bool fail(const char *fmt, ...)
	{
		va_list ap;
		va_start(ap, fmt);
		std::fputs("FAIL: ", out_);
		// NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
		std::vfprintf(out_, fmt, ap);
		va_end(ap);
		std::fputs("\n", out_);
		return report();
	}
	int failed_step() const { return n_; }
	const char *step_name() const { return name_; }

private:
	/* What the library logged during the step: for a refused command, the command, its
	 * status and its syndrome come first. */
	bool report()
	{
		const std::vector<std::string> lines = tap_.take();
		if (lines.empty())
			std::fputs("      (nothing logged)\n", out_);
		for (const std::string &l : lines)
			std::fprintf(out_, "      logged: %s\n", l.c_str());
		return false;
	}

	FILE *out_;
	LogTap &tap_;
	int n_ = 0;
	const char *name_ = "";
};

/* Everything the check creates, released in reverse order whatever step it reached. */
struct Objects {
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	nicmr_cq *cq = nullptr;
	nicmr_qp *qp = nullptr;
	nicmr_mr *src = nullptr;
	nicmr_mr *dst = nullptr;

	/* Quietly: the check already failed, and the failure was reported. */
	~Objects()
	{
		if (src != nullptr)
			nicmr_mr_dereg(src);
		if (dst != nullptr)
			nicmr_mr_dereg(dst);
		if (qp != nullptr)
			nicmr_qp_destroy(qp);
		if (cq != nullptr)
			nicmr_cq_destroy(cq);
		if (pool != nullptr)
			nicmr_pool_destroy(pool);
		if (pd != nullptr)
			nicmr_pd_free(pd);
		if (dev != nullptr)
			nicmr_device_close(dev);
	}
};

bool steps(Check &c, Objects &o, const HwCheckOptions &opt)
{
	c.begin("open");
	if (int rc = nicmr_device_open(opt.spec, &o.dev); rc != 0)
		return c.fail_rc("nicmr_device_open", rc);
	nicmr_device_attr a;
	if (int rc = nicmr_device_query(o.dev, &a); rc != 0)
		return c.fail_rc("nicmr_device_query", rc);
	c.pass("%s, firmware %u.%u.%u", a.name, a.fw_major, a.fw_minor, a.fw_subminor);

	c.begin("pd");
	if (int rc = nicmr_pd_alloc(o.dev, &o.pd); rc != 0)
		return c.fail_rc("nicmr_pd_alloc", rc);
	c.pass("PD %u", nicmr_pd_num(o.pd));

	c.begin("mkeys");
	/* Two registrations below, and a key index is never 0. */
	if (a.mkey_count < 3)
		return c.fail("the device offers %" PRIu64 " key indices, registration needs 3",
			      uint64_t{a.mkey_count});
	c.pass("%" PRIu64 " keys", uint64_t{a.mkey_count - 1});

	c.begin("pool");
	nicmr_pool_params pp;
	nicmr_pool_params_init(&pp);
	pp.size = kPoolSize;
	pp.page_size = NICMR_PAGE_4K;
	if (int rc = nicmr_pool_create(o.dev, &pp, &o.pool); rc != 0)
		return c.fail_rc("nicmr_pool_create", rc);
	auto *base = static_cast<uint8_t *>(nicmr_pool_addr(o.pool));
	c.pass("%zu KiB of 4 KiB pages, DMA-mapped", nicmr_pool_len(o.pool) / 1024);

	c.begin("cq");
	if (int rc = nicmr_cq_create(o.dev, 16, &o.cq); rc != 0)
		return c.fail_rc("nicmr_cq_create", rc);
	c.pass("CQ 0x%x", nicmr_cq_num(o.cq));

	c.begin("qp");
	if (int rc = nicmr_qp_create(o.pd, 1, o.cq, 16, &o.qp); rc != 0)
		return c.fail_rc("nicmr_qp_create", rc);
	const uint32_t qpn = nicmr_qp_num(o.qp);
	/* Looped back to itself on port 1: RC allows it, and it needs no second port. */
	if (int rc = nicmr_qp_connect(o.qp, 1, qpn); rc != 0)
		return c.fail_rc("nicmr_qp_connect", rc);
	uint32_t state = 0;
	if (int rc = nicmr_qp_state(o.qp, &state); rc != 0)
		return c.fail_rc("nicmr_qp_state", rc);
	if (state != NICMR_QP_RTS)
		return c.fail("QP 0x%x is in state %u after connect, not RTS (%d)", qpn, state,
			      NICMR_QP_RTS);
	c.pass("QP 0x%x on port 1, looped back, RTS", qpn);

	c.begin("register");
	uint8_t *src = base, *dst = base + kPoolSize / 2;
	if (int rc = nicmr_mr_reg(o.pd, src, kXfer, NICMR_ACCESS_LOCAL_WRITE, 0, 0, &o.src);
	    rc != 0)
		return c.fail_rc("nicmr_mr_reg (source)", rc);
	if (int rc = nicmr_mr_reg(o.pd, dst, kXfer,
				  NICMR_ACCESS_LOCAL_WRITE | NICMR_ACCESS_REMOTE_WRITE, 0, 0,
				  &o.dst);
	    rc != 0)
		return c.fail_rc("nicmr_mr_reg (destination)", rc);
	c.pass("keys 0x%x and 0x%x", nicmr_mr_key(o.src), nicmr_mr_key(o.dst));

	c.begin("write");
	for (size_t i = 0; i < kXfer; i++) {
		src[i] = static_cast<uint8_t>(i * 7 + 1);
		dst[i] = 0;
	}
	if (int rc = nicmr_post_write(o.qp, reinterpret_cast<uintptr_t>(src), kXfer,
				      nicmr_mr_key(o.src), reinterpret_cast<uintptr_t>(dst),
				      nicmr_mr_key(o.dst), 0x5eed, NICMR_SEND_SIGNALED);
	    rc != 0)
		return c.fail_rc("nicmr_post_write", rc);
	nicmr_wc wc{};
	int got = 0;
	const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (got == 0 && std::chrono::steady_clock::now() < end)
		got = nicmr_cq_poll(o.cq, &wc, 1);
	if (got < 0)
		return c.fail_rc("nicmr_cq_poll", got);
	if (got == 0)
		return c.fail("no completion within 5 s");
	if (wc.status != NICMR_WC_SUCCESS)
		return c.fail("completion status %u, syndrome 0x%02x (%s), vendor syndrome 0x%02x",
			      wc.status, wc.syndrome, nicmr_wc_syndrome_str(wc.syndrome),
			      wc.vendor_syndrome);
	if (wc.wr_id != 0x5eed || wc.byte_len != kXfer)
		return c.fail("completion of wr_id 0x%" PRIx64 " with %u bytes, expected 0x5eed "
			      "with %zu",
			      wc.wr_id, wc.byte_len, kXfer);
	for (size_t i = 0; i < kXfer; i++)
		if (dst[i] != src[i])
			return c.fail("byte %zu is 0x%02x, written 0x%02x", i, dst[i], src[i]);
	c.pass("%zu bytes, checked byte for byte", kXfer);

	c.begin("teardown");
	int rc = nicmr_mr_dereg(o.src);
	o.src = nullptr;
	if (rc != 0)
		return c.fail_rc("nicmr_mr_dereg", rc);
	rc = nicmr_mr_dereg(o.dst);
	o.dst = nullptr;
	if (rc != 0)
		return c.fail_rc("nicmr_mr_dereg", rc);
	rc = nicmr_qp_destroy(o.qp);
	o.qp = nullptr;
	if (rc != 0)
		return c.fail_rc("nicmr_qp_destroy", rc);
	rc = nicmr_cq_destroy(o.cq);
	o.cq = nullptr;
	if (rc != 0)
		return c.fail_rc("nicmr_cq_destroy", rc);
	rc = nicmr_pool_destroy(o.pool);
	o.pool = nullptr;
	if (rc != 0)
		return c.fail_rc("nicmr_pool_destroy", rc);
	rc = nicmr_pd_free(o.pd);
	o.pd = nullptr;
	if (rc != 0)
		return c.fail_rc("nicmr_pd_free", rc);
	rc = nicmr_device_close(o.dev);
	o.dev = nullptr;
	if (rc != 0)
		return c.fail_rc("nicmr_device_close", rc);
	c.pass("everything released, the device closed");
	return true;
}

} // namespace

int hw_check(FILE *out, const HwCheckOptions &o)
{
	std::fprintf(out, "hw-check: device %s\n", o.spec);
	LogTap tap;
	tap.install();
	bool ok = false;
	int step = 0;
	const char *name = "";
	{
		Check c(out, tap);
		Objects objs;
		ok = steps(c, objs, o);
		step = c.failed_step();
		name = c.step_name();
	} /* objs released before the log handler goes */
	tap.remove();
	if (ok) {
		std::fprintf(out, "hw-check: PASS (%d steps)\n", kHwCheckSteps);
		return 0;
	}
	std::fprintf(out, "hw-check: FAIL at step %d (%s); the steps after it did not run\n", step,
		     name);
	return 1;
}

} // namespace nicmr::testmr
