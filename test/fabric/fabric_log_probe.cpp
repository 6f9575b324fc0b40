/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A libfabric application that opens a domain of the nicmr provider (the device FI_NICMR_DEVICE
 * names) and closes it, for test/fabric/provider-log.sh, which reads what it logs. It prints
 * what each call returned; exit status 0 when the domain opened, 2 when fi_domain failed, 1
 * when there was no provider.
 */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <cstdio>
#include <cstring>

int main()
{
	fi_info *hints = fi_allocinfo();
	if (hints == nullptr)
		return 1;
	hints->fabric_attr->prov_name = strdup("nicmr");
	hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	fi_info *info = nullptr;
	int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
	fi_freeinfo(hints);
	std::printf("fi_getinfo: %d\n", rc);
	if (rc != 0)
		return 1;
	fid_fabric *fabric = nullptr;
	rc = fi_fabric(info->fabric_attr, &fabric, nullptr);
	std::printf("fi_fabric: %d\n", rc);
	int status = 1;
	if (rc == 0) {
		fid_domain *domain = nullptr;
		rc = fi_domain(fabric, info, &domain, nullptr);
		std::printf("fi_domain: %d\n", rc);
		status = rc == 0 ? 0 : 2;
		if (rc == 0)
			fi_close(&domain->fid);
		fi_close(&fabric->fid);
	}
	fi_freeinfo(info);
	return status;
}
