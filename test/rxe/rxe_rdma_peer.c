/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The guest side of the rxe test's one-sided step (run_rxe_test.py, devtools/rxe-guest/init.sh):
 * a small verbs program that runs on rdma_rxe in the QEMU guest against testmr on the host side
 * of the tap, whose device model registered the memory it targets.
 *
 *   1. connects an RC QP to testmr's `qp exchange listen ... mr KEY` as ibv_rc_pingpong's client
 *      does (rdma-core libibverbs/examples/rc_pingpong.c, pp_client_exch_dest: its 52-byte
 *      record "LLLL:QQQQQQ:PPPPPP:GID" and a NUL, the server's record, then "done" and a NUL),
 *      each record followed by testmr's MR record (doc/testmr.md: "ADDR:RKEY:LEN" in 16, 8 and
 *      16 hex digits and a NUL, 43 bytes): this program offers its buffer, testmr its MR;
 *   2. RDMA WRITEs SIZE bytes of its pattern (pattern() below) to ADDR + 8k of testmr's MR with
 *      RKEY, and RDMA READs SIZE bytes at ADDR + 16k, which must be four quarters of 0x11, 0x22,
 *      0x33 and 0x44 (testmr filled them);
 *   3. says "RDMA-GUEST-READY" and waits for testmr to READ its pattern from offset 0 and WRITE
 *      four quarters of 0xa1, 0xb2, 0xc3 and 0xd4 at offset 8k of its buffer, which it checks;
 *   4. RDMA WRITEs 0x5e bytes to ADDR + 8k with the rkey's variant changed (what a stale key
 *      looks like), which must complete with IBV_WC_REM_ACCESS_ERR (testmr then checks that
 *      nothing was written).
 * Each step prints "RESULT <name> PASS|FAIL [detail]" as the guest's init does. Completions are
 * polled with short sleeps: on one emulated CPU a busy loop starves rxe's own work.
 *
 * usage: rxe-rdma-peer DEVICE GID_INDEX HOST PORT SIZE TIMEOUT_S
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define OFF_WRITE 8192u	 /* testmr's MR: what this program WRITEs; its own: what testmr WRITEs */
#define OFF_READ  16384u /* testmr's MR: what this program READs */
#define LOCAL_LEN 65536u /* this program's buffer */

static int timeout_s = 60;

static uint8_t pattern(size_t j)
{
	return (uint8_t)(j * 13 + 5 + (j >> 8));
}

static int quarters_ok(const uint8_t *p, size_t size, const uint8_t q[4], size_t *bad)
{
	for (size_t j = 0; j < size; j++)
		if (p[j] != q[j * 4 / size]) {
			*bad = j;
			return 0;
		}
	return 1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int read_exact(int fd, char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = read(fd, buf + got, n - got);
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

/* The client side of rc_pingpong's exchange with MR records: 0 and the server's QPN, PSN, GID
 * and MR. */
static int exchange(const char *host, const char *port, const char *mine, const char *mine_mr,
		    uint32_t *qpn, uint32_t *psn, union ibv_gid *gid, uint64_t *raddr,
		    uint32_t *rkey)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
	if (getaddrinfo(host, port, &hints, &res) != 0)
		return -1;
	int fd = -1;
	double end = now_s() + timeout_s;
	while (fd < 0 && now_s() < end) {
		fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
		if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
			close(fd);
			fd = -1;
			usleep(100000);
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return -1;
	char rec[52], mr[43];
	unsigned lid, q, p, k;
	unsigned long long a, len;
	char hex[33];
	int rc = -1;
	if (write(fd, mine, 52) != 52 || write(fd, mine_mr, 43) != 43 ||
	    read_exact(fd, rec, 52) != 0 || rec[51] != 0 ||
	    sscanf(rec, "%x:%x:%x:%32s", &lid, &q, &p, hex) != 4 || strlen(hex) != 32 ||
	    read_exact(fd, mr, 43) != 0 || mr[42] != 0 ||
	    sscanf(mr, "%16llx:%8x:%16llx", &a, &k, &len) != 3)
		goto out;
	*raddr = a;
	*rkey = k;
	for (int i = 0; i < 16; i++) {
		unsigned b;
		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			goto out;
		gid->raw[i] = (uint8_t)b;
	}
	*qpn = q;
	*psn = p;
	if (write(fd, "done", 5) != 5)
		goto out;
	rc = 0;
out:
	close(fd);
	return rc;
}

/* One completion within the timeout: its status, or -1. */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	double end = now_s() + timeout_s;
	while (now_s() < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			return -1;
		if (n == 1)
			return wc->status;
		usleep(200);
	}
	return -1;
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, void *laddr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)laddr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = op,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, &wr, &bad);
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s DEVICE GID_INDEX HOST PORT SIZE TIMEOUT_S\n", argv[0]);
		return 2;
	}
	const char *devname = argv[1];
	const int gidx = atoi(argv[2]);
	const uint32_t size = (uint32_t)strtoul(argv[5], NULL, 0);
	timeout_s = atoi(argv[6]);
	if (size == 0 || size > OFF_READ - OFF_WRITE || timeout_s <= 0) {
		fprintf(stderr, "rxe-rdma-peer: SIZE 1..8192 and TIMEOUT_S > 0\n");
		return 2;
	}

	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device *dev = NULL;
	for (int i = 0; list && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), devname) == 0)
			dev = list[i];
	struct ibv_context *ctx = dev ? ibv_open_device(dev) : NULL;
	if (!ctx) {
		printf("RESULT rdma-connect FAIL no device %s\n", devname);
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	uint8_t *buf = aligned_alloc(4096, LOCAL_LEN);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !buf || !cq) {
		printf("RESULT rdma-connect FAIL PD, buffer or CQ\n");
		return 1;
	}
	memset(buf, 0, LOCAL_LEN);
	for (uint32_t j = 0; j < size; j++)
		buf[j] = pattern(j);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LOCAL_LEN,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ);
	struct ibv_qp_init_attr qia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC};
	struct ibv_qp *qp = mr ? ibv_create_qp(pd, &qia) : NULL;
	union ibv_gid mygid;
	if (!qp || ibv_query_gid(ctx, 1, gidx, &mygid) != 0) {
		printf("RESULT rdma-connect FAIL MR, QP or GID %d\n", gidx);
		return 1;
	}
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = 1,
				.qp_access_flags =
					IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		printf("RESULT rdma-connect FAIL INIT\n");
		return 1;
	}
	srand48(getpid() * time(NULL));
	const uint32_t mypsn = (uint32_t)lrand48() & 0xffffff;
	char mine[52];
	char hex[33];
	for (int i = 0; i < 16; i++)
		sprintf(hex + 2 * i, "%02x", mygid.raw[i]);
	snprintf(mine, sizeof(mine), "%04x:%06x:%06x:%s", 0, qp->qp_num, mypsn, hex);
	char mine_mr[43];
	snprintf(mine_mr, sizeof(mine_mr), "%016llx:%08x:%016llx",
		 (unsigned long long)(uintptr_t)buf, mr->rkey, (unsigned long long)LOCAL_LEN);
	uint32_t rqpn = 0, rpsn = 0, rkey = 0;
	uint64_t raddr = 0;
	union ibv_gid rgid;
	if (exchange(argv[3], argv[4], mine, mine_mr, &rqpn, &rpsn, &rgid, &raddr, &rkey) != 0) {
		printf("RESULT rdma-connect FAIL exchange with %s:%s\n", argv[3], argv[4]);
		return 1;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = rqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = rgid;
	a.ah_attr.grh.sgid_index = (uint8_t)gidx;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	int rc = ibv_modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = mypsn;
	a.max_rd_atomic = 1;
	if (rc == 0)
		rc = ibv_modify_qp(qp, &a,
				   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					   IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc != 0) {
		printf("RESULT rdma-connect FAIL RTR/RTS %d\n", rc);
		return 1;
	}
	printf("RESULT rdma-connect PASS QPN 0x%06x to 0x%06x, its MR at 0x%llx rkey 0x%08x\n",
	       qp->qp_num, rqpn, (unsigned long long)raddr, rkey);
	fflush(stdout);

	/* 2. WRITE the pattern into testmr's MR, READ its quarters back. */
	struct ibv_wc wc;
	int st = post(qp, IBV_WR_RDMA_WRITE, buf, size, mr->lkey, raddr + OFF_WRITE, rkey);
	st = st ? -1 : wait_wc(cq, &wc);
	if (st == IBV_WC_SUCCESS)
		printf("RESULT rdma-guest-write PASS %u bytes\n", size);
	else
		printf("RESULT rdma-guest-write FAIL status %d (%s)\n", st,
		       st >= 0 ? ibv_wc_status_str(st) : "no completion");
	uint8_t *rd = buf + 3 * OFF_WRITE;
	st = post(qp, IBV_WR_RDMA_READ, rd, size, mr->lkey, raddr + OFF_READ, rkey);
	st = st ? -1 : wait_wc(cq, &wc);
	const uint8_t hq[4] = {0x11, 0x22, 0x33, 0x44};
	size_t bad = 0;
	if (st != IBV_WC_SUCCESS)
		printf("RESULT rdma-guest-read FAIL status %d (%s)\n", st,
		       st >= 0 ? ibv_wc_status_str(st) : "no completion");
	else if (!quarters_ok(rd, size, hq, &bad))
		printf("RESULT rdma-guest-read FAIL byte %zu is 0x%02x\n", bad, rd[bad]);
	else
		printf("RESULT rdma-guest-read PASS %u bytes\n", size);

	/* 3. testmr READs offset 0 and WRITEs at 8k of this buffer. */
	printf("RDMA-GUEST-READY\n");
	fflush(stdout);
	const uint8_t nq[4] = {0xa1, 0xb2, 0xc3, 0xd4};
	volatile uint8_t *land = buf + OFF_WRITE;
	double end = now_s() + timeout_s;
	while (now_s() < end && !(land[0] == nq[0] && land[size - 1] == nq[3]))
		usleep(10000);
	usleep(100000); /* the last packets of the WRITE, should its ends land first */
	if (quarters_ok(buf + OFF_WRITE, size, nq, &bad))
		printf("RESULT rdma-host-write PASS %u bytes\n", size);
	else
		printf("RESULT rdma-host-write FAIL byte %zu is 0x%02x\n", bad,
		       buf[OFF_WRITE + bad]);
	fflush(stdout);

	/* 4. A stale-looking rkey: the same index, another variant. */
	const uint32_t stale = (rkey & ~0xffu) | ((rkey + 1) & 0xffu);
	memset(buf + 4 * OFF_WRITE, 0x5e, size);
	st = post(qp, IBV_WR_RDMA_WRITE, buf + 4 * OFF_WRITE, size, mr->lkey, raddr + OFF_WRITE,
		  stale);
	st = st ? -1 : wait_wc(cq, &wc);
	if (st == IBV_WC_REM_ACCESS_ERR)
		printf("RESULT rdma-bad-rkey PASS rkey 0x%08x: %s\n", stale, ibv_wc_status_str(st));
	else
		printf("RESULT rdma-bad-rkey FAIL rkey 0x%08x: status %d (%s)\n", stale, st,
		       st >= 0 ? ibv_wc_status_str(st) : "no completion");
	fflush(stdout);
	/* Everything back, in reverse (a sanitized build checks for leaks at exit). */
	int freed = ibv_destroy_qp(qp) | ibv_dereg_mr(mr) | ibv_destroy_cq(cq) |
		    ibv_dealloc_pd(pd) | ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	if (freed != 0)
		printf("RESULT rdma-teardown FAIL a verbs object would not go\n");
	return freed != 0;
}
