/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rdma_mempool: RDMA between mbufs of a DPDK mempool with nicmr.
 *
 * The path of a storage target or a trading gateway that already lives in DPDK:
 *   1. EAL init; an application telemetry endpoint is registered first (as DPDK's libraries
 *      register theirs, before the telemetry threads start).
 *   2. An rte_mempool of mbufs (rte_pktmbuf_pool_create).
 *   3. A nicmr device, and DPDK's memory (its memsegs) attached as the device's pools: from
 *      here on nicmr follows DPDK's memory events by itself.
 *   4. The mempool's memory registered: one MR per range of the mempool, and a key for any
 *      mbuf's data by address (what mlx5's PMD does with its mempools).
 *   5. Two queue pairs, one per port of the device; the second port is the peer (on the
 *      emulated device the ports are joined by its loopback wire).
 *   6. RDMA WRITE of one mbuf into the peer's mbuf, RDMA READ back into a third; the data is
 *      checked byte for byte.
 *   7. Everything released in reverse order.
 *
 * Usage: dpdk-rdma-mempool [EAL options] -- [--device SPEC] [--wait]
 *   --device SPEC  the nicmr device (default "emu": the emulated ConnectX built into nicmr;
 *                  "vfio:0000:03:00.0" for a ConnectX bound to vfio-pci)
 *   --wait         before releasing, wait for Enter so that dpdk-telemetry.py can read
 *                  /rdma_mempool/stats
 * Without hugepages: dpdk-rdma-mempool --no-huge --no-pci -m 256 --no-shconf
 * Exit status 0 when the data checked out, 1 on any failure, 2 on a usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_telemetry.h>

#include <nicmr/nicmr.h>
#include <nicmr/nicmr_dpdk.h>

#define NB_MBUFS   1023
#define DATA_LEN   2048 /* bytes moved by each RDMA operation */
#define QP_DEPTH   16
#define POLL_LIMIT 10000000

/* What the example did, for the telemetry endpoint. DPDK runs the endpoint on a telemetry
 * thread of its own: g_lock keeps the device from closing under it and the counters whole. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nicmr_device *g_dev; /* published under g_lock */
static uint64_t g_writes, g_reads, g_bytes;

static void count(uint64_t *op)
{
	pthread_mutex_lock(&g_lock);
	(*op)++;
	g_bytes += DATA_LEN;
	pthread_mutex_unlock(&g_lock);
}

/* /rdma_mempool/stats: the example's counters and nicmr's device statistics
 * (nicmr_device_get_stats may be called from any thread). */
static int telemetry_stats(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct nicmr_device_stats s;

	(void)cmd;
	(void)params;
	pthread_mutex_lock(&g_lock);
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_u64(d, "rdma_writes", g_writes);
	rte_tel_data_add_dict_u64(d, "rdma_reads", g_reads);
	rte_tel_data_add_dict_u64(d, "bytes", g_bytes);
	if (g_dev != NULL && nicmr_device_get_stats(g_dev, &s) == 0) {
		rte_tel_data_add_dict_u64(d, "nicmr_mrs", s.mrs);
		rte_tel_data_add_dict_u64(d, "nicmr_pools", s.pools);
	}
	pthread_mutex_unlock(&g_lock);
	return 0;
}

/* Busy-polls a CQ for one completion (a poll-mode application's loop, cut short). */
static int wait_completion(struct nicmr_cq *cq, struct nicmr_wc *wc)
{
	long i;

	for (i = 0; i < POLL_LIMIT; i++) {
		int n = nicmr_cq_poll(cq, wc, 1);
		if (n != 0)
			return n < 0 ? n : 0;
	}
	return -ETIMEDOUT;
}

/* Posts one RDMA operation and waits for its completion; 0 or a negative errno. */
static int rdma(struct nicmr_qp *qp, struct nicmr_cq *cq, int write, void *local, uint32_t lkey,
		void *remote, uint32_t rkey, uint64_t wr_id)
{
	struct nicmr_wc wc;
	int rc;

	if (write)
		rc = nicmr_post_write(qp, (uintptr_t)local, DATA_LEN, lkey, (uintptr_t)remote, rkey,
				      wr_id, NICMR_SEND_SIGNALED);
	else
		rc = nicmr_post_read(qp, (uintptr_t)local, DATA_LEN, lkey, (uintptr_t)remote, rkey,
				     wr_id, NICMR_SEND_SIGNALED);
	if (rc != 0)
		return rc;
	rc = wait_completion(cq, &wc);
	if (rc != 0)
		return rc;
	if (wc.status != NICMR_WC_SUCCESS || wc.wr_id != wr_id) {
		printf("  completion %" PRIu64 ": status %u, syndrome %#x (%s)\n", wc.wr_id,
		       wc.status, wc.syndrome, nicmr_wc_syndrome_str(wc.syndrome));
		return -EIO;
	}
	return 0;
}

static int usage(const char *prog)
{
	fprintf(stderr, "usage: %s [EAL options] -- [--device SPEC] [--wait]\n", prog);
	return 2;
}

int main(int argc, char **argv)
{
	const char *spec = "emu";
	struct nicmr_device *dev = NULL;
	int wait_enter = 0, status = 1, rc, i;
	struct rte_mempool *mp = NULL;
	struct nicmr_dpdk_mem *mem = NULL;
	struct nicmr_pd *pd = NULL;
	struct nicmr_dpdk_mempool_mr *mmr = NULL;
	struct nicmr_cq *cq1 = NULL, *cq2 = NULL;
	struct nicmr_qp *qp1 = NULL, *qp2 = NULL;
	struct rte_mbuf *src = NULL, *dst = NULL, *back = NULL;
	struct nicmr_dpdk_mem_info info;

	/* Before rte_eal_init: the endpoint list is complete before telemetry serves it. */
	if (rte_telemetry_register_cmd(
		    "/rdma_mempool/stats", telemetry_stats,
		    "RDMA operations of the example and nicmr's MRs and pools") != 0)
		fprintf(stderr, "telemetry endpoint not registered\n");

	rc = rte_eal_init(argc, argv);
	if (rc < 0) {
		fprintf(stderr, "rte_eal_init: %s\n", rte_strerror(rte_errno));
		return rte_errno == EINVAL ? 2 : 1;
	}
	argc -= rc;
	argv += rc;
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
			spec = argv[++i];
		else if (strcmp(argv[i], "--wait") == 0)
			wait_enter = 1;
		else {
			rte_eal_cleanup();
			return usage(argv[0]);
		}
	}
	printf("EAL up: %u lcore(s), telemetry endpoint /rdma_mempool/stats (dpdk-telemetry.py)\n",
	       rte_lcore_count());

	/* 2. The mbufs: ordinary DPDK memory, nothing nicmr-specific yet. */
	mp = rte_pktmbuf_pool_create("rdma_mbufs", NB_MBUFS, 0, 0, RTE_PKTMBUF_HEADROOM + DATA_LEN,
				     (int)rte_socket_id());
	if (mp == NULL) {
		fprintf(stderr, "rte_pktmbuf_pool_create: %s\n", rte_strerror(rte_errno));
		goto out;
	}
	printf("mempool %s: %u mbufs of %u data bytes\n", mp->name, mp->size, DATA_LEN);

	/* 3. The device, and DPDK's memory as its pools (nicmr's log lines now go to rte_log,
	 * type lib.nicmr: --log-level=lib.nicmr:debug shows them all). */
	rc = nicmr_device_open(spec, &dev);
	if (rc != 0) {
		fprintf(stderr, "nicmr_device_open(%s): %s\n", spec, strerror(-rc));
		goto out;
	}
	pthread_mutex_lock(&g_lock);
	g_dev = dev;
	pthread_mutex_unlock(&g_lock);
	rc = nicmr_dpdk_mem_attach(dev, &mem);
	if (rc == 0)
		rc = nicmr_dpdk_mem_query(mem, &info);
	if (rc != 0) {
		fprintf(stderr, "nicmr_dpdk_mem_attach: %s\n", strerror(-rc));
		goto out;
	}
	printf("device %s: DPDK memory attached as %u pool(s), %s\n", spec, info.pools,
	       info.events ? "following DPDK's memory events" : "legacy memory (fixed, no events)");

	/* 4. Register the mempool's memory: every mbuf is now inside an MR. */
	rc = nicmr_pd_alloc(dev, &pd);
	if (rc == 0)
		rc = nicmr_dpdk_mempool_reg(
			pd, mp,
			NICMR_ACCESS_READ | NICMR_ACCESS_WRITE | NICMR_ACCESS_LOCAL_WRITE |
				NICMR_ACCESS_REMOTE_READ | NICMR_ACCESS_REMOTE_WRITE,
			&mmr);
	if (rc != 0) {
		fprintf(stderr, "registering mempool %s: %s\n", mp->name, strerror(-rc));
		goto out;
	}
	printf("mempool %s registered: %zu MR(s), first key %#x\n", mp->name,
	       nicmr_dpdk_mempool_mr_count(mmr), nicmr_mr_key(nicmr_dpdk_mempool_mr_at(mmr, 0)));

	/* 5. A queue pair on port 1 (us) and one on port 2 (the peer), connected. */
	rc = nicmr_cq_create(dev, QP_DEPTH, &cq1);
	if (rc == 0)
		rc = nicmr_cq_create(dev, QP_DEPTH, &cq2);
	if (rc == 0)
		rc = nicmr_qp_create(pd, 1, cq1, QP_DEPTH, &qp1);
	if (rc == 0)
		rc = nicmr_qp_create(pd, 2, cq2, QP_DEPTH, &qp2);
	if (rc == 0)
		rc = nicmr_qp_connect(qp1, 2, nicmr_qp_num(qp2));
	if (rc == 0)
		rc = nicmr_qp_connect(qp2, 1, nicmr_qp_num(qp1));
	if (rc != 0) {
		fprintf(stderr, "queue pairs: %s\n", strerror(-rc));
		goto out;
	}
	printf("QP %#x (port 1) connected to QP %#x (port 2, the peer)\n", nicmr_qp_num(qp1),
	       nicmr_qp_num(qp2));

	/* 6. Three mbufs: src (ours), dst (the peer's buffer), back (ours, for the READ). */
	src = rte_pktmbuf_alloc(mp);
	dst = rte_pktmbuf_alloc(mp);
	back = rte_pktmbuf_alloc(mp);
	if (src == NULL || dst == NULL || back == NULL) {
		fprintf(stderr, "rte_pktmbuf_alloc failed\n");
		goto out;
	}
	{
		char *s = rte_pktmbuf_mtod(src, char *);
		char *d = rte_pktmbuf_mtod(dst, char *);
		char *b = rte_pktmbuf_mtod(back, char *);
		/* The key of each mbuf's data: a lookup in the registration, no system call. */
		uint32_t ks = nicmr_dpdk_mempool_key(mmr, s, DATA_LEN);
		uint32_t kd = nicmr_dpdk_mempool_key(mmr, d, DATA_LEN);
		uint32_t kb = nicmr_dpdk_mempool_key(mmr, b, DATA_LEN);

		for (i = 0; i < DATA_LEN; i++)
			s[i] = (char)(i * 31 + 7);
		memset(d, 0, DATA_LEN);
		memset(b, 0, DATA_LEN);

		rc = rdma(qp1, cq1, 1, s, ks, d, kd, 1);
		if (rc != 0 || memcmp(s, d, DATA_LEN) != 0) {
			fprintf(stderr, "RDMA WRITE failed: %s\n",
				rc ? strerror(-rc) : "data differs");
			goto out;
		}
		count(&g_writes);
		printf("RDMA WRITE %u bytes: mbuf %p (lkey %#x) -> peer mbuf %p (rkey %#x): "
		       "data checked\n",
		       DATA_LEN, (void *)s, ks, (void *)d, kd);

		rc = rdma(qp1, cq1, 0, b, kb, d, kd, 2);
		if (rc != 0 || memcmp(s, b, DATA_LEN) != 0) {
			fprintf(stderr, "RDMA READ failed: %s\n",
				rc ? strerror(-rc) : "data differs");
			goto out;
		}
		count(&g_reads);
		printf("RDMA READ  %u bytes: peer mbuf %p (rkey %#x) -> mbuf %p (lkey %#x): "
		       "data checked\n",
		       DATA_LEN, (void *)d, kd, (void *)b, kb);
	}
	if (wait_enter) {
		printf("waiting: read /rdma_mempool/stats with dpdk-telemetry.py, then press "
		       "Enter\n");
		fflush(stdout);
		(void)getchar();
	}
	status = 0;

out:
	/* 7. Reverse order: mbufs, queues, the mempool's MRs, the PD, DPDK memory, device. */
	rte_pktmbuf_free(src);
	rte_pktmbuf_free(dst);
	rte_pktmbuf_free(back);
	if (qp1 != NULL)
		nicmr_qp_destroy(qp1);
	if (qp2 != NULL)
		nicmr_qp_destroy(qp2);
	if (cq1 != NULL)
		nicmr_cq_destroy(cq1);
	if (cq2 != NULL)
		nicmr_cq_destroy(cq2);
	if (mmr != NULL && nicmr_dpdk_mempool_dereg(mmr) != 0)
		status = 1;
	if (pd != NULL && nicmr_pd_free(pd) != 0)
		status = 1;
	if (mem != NULL && nicmr_dpdk_mem_detach(mem) != 0)
		status = 1;
	pthread_mutex_lock(&g_lock);
	g_dev = NULL;
	pthread_mutex_unlock(&g_lock);
	if (dev != NULL && nicmr_device_close(dev) != 0)
		status = 1;
	rte_mempool_free(mp);
	rte_eal_cleanup();
	printf("%s\n", status == 0 ? "done: every byte arrived" : "FAILED");
	return status;
}
