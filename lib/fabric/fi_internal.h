/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The objects behind the nicmr provider's fids. The provider sits on the native C API only.
 *
 *   Fabric ("nicmr") ── nicmr_device (opened by the first fi_domain, closed by fi_close(fabric))
 *     └─ Domain ("emu0") ── nicmr_pd (one per domain) ── Mr (nicmr_mr)
 *                        └─ Pool (nicmr_pool, through the ops extension)
 *
 * Domains of one fabric share its device, so a raw key made in one maps in another (the
 * device is the NIC; the domains are its protection domains). Every count is an atomic so that
 * fi_close can say -FI_EBUSY while children live; the device pointer is set once under the
 * fabric's mutex.
 */
#ifndef NICMR_FI_INTERNAL_H
#define NICMR_FI_INTERNAL_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "nicmr/fi_nicmr.h"
#include "nicmr/nicmr.h"

namespace nicmr::fabric {

inline constexpr const char *kProvName = "nicmr";
inline constexpr const char *kFabricName = "nicmr";
inline constexpr const char *kDefaultSpec = "emu";

/* The mr_mode bits nicmr acts on: ALLOCATED is required; the others are kept when offered. */
inline constexpr int kMrRequired = FI_MR_ALLOCATED;
inline constexpr int kMrOptional = FI_MR_PROV_KEY | FI_MR_RAW | FI_MR_VIRT_ADDR;

/* Key sizes: the mkey (32 bits), or the raw key blob under FI_MR_RAW. */
inline constexpr size_t kKeySize = 4;
inline constexpr size_t kRawKeySize = NICMR_RAW_KEY_SIZE;

extern struct fi_provider provider;

/* The device spec (FI_NICMR_DEVICE) and what getinfo says of it; -FI_ENODATA when the spec is
 * not one this version offers through libfabric. */
struct DeviceSpec {
	std::string spec;
	std::string domain_name;
	size_t mr_cnt;
};
int device_spec(DeviceSpec *out);

/* Negative errno of the native API to a libfabric code. */
int fi_code(int native_err);

struct Fabric {
	struct fid_fabric fid; /* first: &fid is the Fabric */
	std::mutex mu;	       /* guards dev's first open */
	nicmr_device *dev = nullptr;
	std::string spec;
	std::string domain_name;
	std::atomic<uint64_t> domains{0};
};

struct Domain {
	struct fid_domain fid; /* first */
	Fabric *fabric = nullptr;
	nicmr_pd *pd = nullptr;
	int mr_mode = 0;
	std::atomic<uint64_t> mrs{0};
	std::atomic<uint64_t> pools{0};
};

struct Mr {
	struct fid_mr fid; /* first */
	Domain *domain = nullptr;
	nicmr_mr *mr = nullptr;
};

int fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
int domain_open(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom,
		void *context);
int mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
	   uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
int mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access,
	    uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
	    void *context);
int mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr);
int mr_map_raw(Domain *dom, struct fi_mr_map_raw *map);
int mr_unmap_key(Domain *dom, const uint64_t *key);
Mr *mr_of(struct fid_mr *mr);
int pool_ops_open(Domain *dom, void **ops);

/* Stubs for the calls a provider without endpoints does not offer. */
int no_bind(struct fid *, struct fid *, uint64_t);
int no_control(struct fid *, int, void *);
int no_ops_open(struct fid *, const char *, uint64_t, void **, void *);
int no_tostr(const struct fid *, char *, size_t);
int no_ops_set(struct fid *, const char *, uint64_t, void *, void *);

} // namespace nicmr::fabric

#endif
