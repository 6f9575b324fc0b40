/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What bench-fi-mr's two parts share: anonymous buffers that are mapped before any
 * registration, libfabric error codes in words, and an RDM endpoint with its CQ and AV.
 */
#ifndef NICMR_BENCH_FI_BENCH_UTIL_H
#define NICMR_BENCH_FI_BENCH_UTIL_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace nicmr::bench {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;

/* Anonymous memory, 2 MiB-aligned and touched (mapped before any registration). p is null when
 * the mapping failed. */
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

/* "Resource temporarily unavailable (-11)". */
inline std::string fi_err(int ret)
{
	return std::string(fi_strerror(-ret)) + " (" + std::to_string(ret) + ")";
}

/* fi_getinfo for FI_EP_RDM from the provider `name` with caps, mode FI_CONTEXT | FI_CONTEXT2
 * and the mr_mode a typical application offers (each provider keeps what it needs), at API
 * 1.17. *info is null on failure. */
inline int rdm_getinfo(const std::string &name, uint64_t caps, fi_info **info)
{
	*info = nullptr;
	fi_info *hints = fi_allocinfo();
	if (!hints)
		return -FI_ENOMEM;
	hints->fabric_attr->prov_name = strdup(name.c_str());
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = caps;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode =
		FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	const int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, info);
	fi_freeinfo(hints);
	if (ret != 0)
		*info = nullptr;
	return ret;
}

/* One RDM endpoint with its CQ (of the format asked) and AV, bound and enabled; close() (or
 * the destructor) closes them, before their domain must go. */
struct Ep {
	fid_ep *ep = nullptr;
	fid_cq *cq = nullptr;
	fid_av *av = nullptr;
	Ep() = default;
	Ep(const Ep &) = delete;
	Ep &operator=(const Ep &) = delete;
	~Ep() { close(); }
	void close()
	{
		if (ep)
			fi_close(&ep->fid);
		if (av)
			fi_close(&av->fid);
		if (cq)
			fi_close(&cq->fid);
		ep = nullptr;
		av = nullptr;
		cq = nullptr;
	}
	int open(fid_domain *domain, fi_info *info, fi_cq_format format, std::string *err)
	{
		fi_cq_attr cqa{};
		cqa.format = format;
		cqa.size = 256;
		fi_av_attr ava{};
		ava.type = FI_AV_TABLE;
		int ret = fi_endpoint(domain, info, &ep, nullptr);
		if (ret != 0) {
			*err = "fi_endpoint: " + fi_err(ret);
			return ret;
		}
		if ((ret = fi_cq_open(domain, &cqa, &cq, nullptr)) != 0) {
			*err = "fi_cq_open: " + fi_err(ret);
			return ret;
		}
		if ((ret = fi_av_open(domain, &ava, &av, nullptr)) != 0) {
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

} // namespace nicmr::bench

#endif
