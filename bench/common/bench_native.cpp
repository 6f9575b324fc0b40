/* SPDX-License-Identifier: BSD-3-Clause */
#include "bench_native.h"

#include <cstdio>
#include <cstring>

#include "api_internal.h"
#include "bench_umr_floor.h"
#include "nicmr/nicmr.h"

namespace nicmr::bench {

namespace {

/* What bench-fi-mr registers with (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE), so that
 * the native pair and the provider's differ by the provider alone. */
constexpr uint64_t kAccess = NICMR_ACCESS_READ | NICMR_ACCESS_WRITE | NICMR_ACCESS_REMOTE_READ |
			     NICMR_ACCESS_REMOTE_WRITE;
constexpr int kRounds = 10;

/* What the measurement opens, closed in reverse order. */
struct Native {
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
	nicmr_pool *pool = nullptr;
	nicmr_mr *borrowed = nullptr; /* the floor's key */
	bool revoked = false;	      /* the floor's key is free on the device */
	UmrFloor floor;
	~Native()
	{
		/* The borrowed key bound again, so that its deregistration revokes it as usual. */
		if (revoked && floor.bind() != 0)
			std::fprintf(stderr, "bench: UMR bind of the floor's key failed\n");
		floor.reset();
		if (borrowed)
			nicmr_mr_dereg(borrowed);
		if (pool)
			nicmr_pool_destroy(pool);
		if (pd)
			nicmr_pd_free(pd);
		if (dev)
			nicmr_device_close(dev);
	}
};

std::string why(const char *what, int rc)
{
	return std::string(what) + ": " + std::strerror(-rc) + " (" + std::to_string(rc) + ")";
}

} // namespace

int measure_floor_native(const std::string &spec, int reps, FloorNative *out, std::string *err)
{
	Native n;
	int rc = nicmr_device_open(spec.c_str(), &n.dev);
	if (rc != 0) {
		*err = why(("nicmr_device_open(" + spec + ")").c_str(), rc);
		return rc;
	}
	if ((rc = nicmr_pd_alloc(n.dev, &n.pd)) != 0) {
		*err = why("nicmr_pd_alloc", rc);
		return rc;
	}
	nicmr_pool_params p;
	nicmr_pool_params_init(&p);
	p.size = size_t{4} << 20;
	p.name = "bench-ratios";
	p.page_size = NICMR_PAGE_2M;
	if ((rc = nicmr_pool_create(n.dev, &p, &n.pool)) != 0) {
		p.page_size = NICMR_PAGE_4K;
		rc = nicmr_pool_create(n.dev, &p, &n.pool);
	}
	if (rc != 0) {
		*err = why("nicmr_pool_create (2 MiB pages, then 4 KiB ones)", rc);
		return rc;
	}
	void *a = nicmr_pool_addr(n.pool);
	/* The engine created every mkey of the device: the floor borrows the key of a registration
	 * of its own (bench_umr_floor.h), free on the device from the first revoke below to the
	 * bind after the last, and deregistered as usual after that. */
	if ((rc = nicmr_mr_reg(n.pd, a, 4096, kAccess, 0, 0, &n.borrowed)) != 0) {
		*err = why("nicmr_mr_reg (the floor's key)", rc);
		return rc;
	}
	if ((rc = n.floor.borrow(*n.dev->drv, n.dev->free_pd.pd(), nicmr_mr_key(n.borrowed),
				 n.pd->handle.pd(), reinterpret_cast<uintptr_t>(a),
				 n.pool->entry->iova)) != 0) {
		*err = why("UMR queue for the floor", rc);
		return rc;
	}
	if ((rc = n.floor.revoke()) != 0) {
		*err = why("UMR revoke of the floor's key", rc);
		return rc;
	}
	n.revoked = true;
	nicmr_mr *mr = nullptr;
	auto reg = [&] { return nicmr_mr_reg(n.pd, a, 4096, kAccess, 0, 0, &mr); };
	auto dereg = [&] { return nicmr_mr_dereg(mr); };
	auto bind = [&] { return n.floor.bind(); };
	auto revoke = [&] { return n.floor.revoke(); };
	PairSampler floor, native;
	int failed = 0;
	/* One round: k pairs of each (kept or not), the failing call named in *err. */
	auto round = [&](int k, bool keep) {
		int r = floor.run(k, bind, revoke, &failed, keep);
		if (r != 0) {
			n.revoked = failed == 1; /* a failed revoke left the key bound */
			*err = why(failed == 1 ? "UMR bind (floor)" : "UMR revoke (floor)", r);
			return r;
		}
		r = native.run(k, reg, dereg, &failed, keep);
		if (r != 0)
			*err = why(failed == 1 ? "nicmr_mr_reg" : "nicmr_mr_dereg", r);
		return r;
	};
	if ((rc = round(warmup_pairs(reps), false)) != 0)
		return rc;
	const int per_round = std::max(1, reps / kRounds);
	for (int done = 0; done < reps; done += per_round)
		if ((rc = round(std::min(per_round, reps - done), true)) != 0)
			return rc;
	out->floor = floor.medians();
	out->native = native.medians();
	return 0;
}

} // namespace nicmr::bench
