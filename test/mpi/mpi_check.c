/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What Open MPI must do right over a transport, checked value by value: a ring of point-to-point
 * messages (small and large), an allreduce of 1 MiB against the sum every rank can compute, and
 * one-sided MPI_Put, MPI_Get and MPI_Accumulate in a window. The program knows nothing of nicmr:
 * run-mpi.sh chooses the transport with Open MPI's MCA parameters. Prints one line per check on
 * rank 0 and exits 1 (after MPI_Abort) at the first wrong value, saying where it was.
 *
 * Usage: mpi_check [ring|allreduce|rma|all]...  (default: all)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void fail(const char *check, const char *what, long idx, long long got, long long want)
{
	fprintf(stderr, "mpi_check: %s: rank %d: %s[%ld] is %lld, expected %lld\n", check, rank,
		what, idx, got, want);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

static void passed(const char *check, const char *detail)
{
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: %s ok (%d ranks; %s)\n", check, size, detail);
	fflush(stdout);
}

/* A token goes round the ring `rounds` times, each rank adding its rank + 1; then a large
 * message (past any eager threshold) goes round once, each rank checking its neighbour's
 * pattern. */
static void check_ring(void)
{
	const int rounds = 100;
	const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	long long token = 0;
	for (int r = 0; r < rounds; r++) {
		if (rank == 0) {
			token += 1;
			MPI_Send(&token, 1, MPI_LONG_LONG, next, r, MPI_COMM_WORLD);
			MPI_Recv(&token, 1, MPI_LONG_LONG, prev, r, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
		} else {
			MPI_Recv(&token, 1, MPI_LONG_LONG, prev, r, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			token += rank + 1;
			MPI_Send(&token, 1, MPI_LONG_LONG, next, r, MPI_COMM_WORLD);
		}
	}
	const long long want = (long long)rounds * size * (size + 1) / 2;
	if (rank == 0 && token != want)
		fail("ring", "token", 0, token, want);

	const size_t n = (size_t)1 << 18; /* 2 MiB of int64 */
	int64_t *out = malloc(n * sizeof(*out)), *in = malloc(n * sizeof(*in));
	if (!out || !in)
		fail("ring", "malloc", 0, 0, 1);
	for (size_t i = 0; i < n; i++)
		out[i] = (int64_t)i * 131 + rank;
	MPI_Sendrecv(out, (int)n, MPI_INT64_T, next, 7, in, (int)n, MPI_INT64_T, prev, 7,
		     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	for (size_t i = 0; i < n; i++)
		if (in[i] != (int64_t)i * 131 + prev)
			fail("ring", "large", (long)i, in[i], (int64_t)i * 131 + prev);
	free(out);
	free(in);
	passed("ring", "100 rounds of 8 bytes, one round of 2 MiB");
}

/* 1 MiB of int64: element i of rank r is i * 7 + r, so the sum is size * i * 7 + the sum of
 * the ranks. */
static void check_allreduce(void)
{
	const size_t n = ((size_t)1 << 20) / sizeof(int64_t);
	int64_t *v = malloc(n * sizeof(*v)), *sum = malloc(n * sizeof(*sum));
	if (!v || !sum)
		fail("allreduce", "malloc", 0, 0, 1);
	for (size_t i = 0; i < n; i++)
		v[i] = (int64_t)i * 7 + rank;
	MPI_Allreduce(v, sum, (int)n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	const int64_t ranks = (int64_t)size * (size - 1) / 2;
	for (size_t i = 0; i < n; i++)
		if (sum[i] != (int64_t)size * (int64_t)i * 7 + ranks)
			fail("allreduce", "sum", (long)i, sum[i],
			     (int64_t)size * (int64_t)i * 7 + ranks);
	free(v);
	free(sum);
	passed("allreduce", "1 MiB of int64, MPI_SUM");
}

/* A window of `n` int64 per rank: each rank puts a pattern into its next neighbour's window,
 * gets its previous neighbour's, and every rank accumulates into rank 0's. */
static void check_rma(void)
{
	const int n = 4096;
	const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	int64_t *base;
	MPI_Win win;
	MPI_Win_allocate((MPI_Aint)(n * sizeof(int64_t)), sizeof(int64_t), MPI_INFO_NULL,
			 MPI_COMM_WORLD, &base, &win);
	for (int i = 0; i < n; i++)
		base[i] = -1;
	int64_t *src = malloc(n * sizeof(*src)), *got = malloc(n * sizeof(*got));
	if (!src || !got)
		fail("rma", "malloc", 0, 0, 1);
	for (int i = 0; i < n; i++)
		src[i] = (int64_t)rank * 1000000 + i;

	/* Put: my pattern into my next neighbour's window. */
	MPI_Win_fence(0, win);
	MPI_Put(src, n, MPI_INT64_T, next, 0, n, MPI_INT64_T, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < n; i++)
		if (base[i] != (int64_t)prev * 1000000 + i)
			fail("rma", "put", i, base[i], (int64_t)prev * 1000000 + i);

	/* Get: my previous neighbour's window holds its own previous neighbour's pattern. */
	const int pprev = (prev + size - 1) % size;
	MPI_Get(got, n, MPI_INT64_T, prev, 0, n, MPI_INT64_T, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < n; i++)
		if (got[i] != (int64_t)pprev * 1000000 + i)
			fail("rma", "get", i, got[i], (int64_t)pprev * 1000000 + i);

	/* Accumulate: every rank adds rank + 1 to each element of rank 0's window, after rank 0
	 * zeroed it. */
	if (rank == 0)
		for (int i = 0; i < n; i++)
			base[i] = 0;
	MPI_Win_fence(0, win);
	for (int i = 0; i < n; i++)
		src[i] = rank + 1;
	MPI_Accumulate(src, n, MPI_INT64_T, 0, 0, n, MPI_INT64_T, MPI_SUM, win);
	MPI_Win_fence(0, win);
	if (rank == 0)
		for (int i = 0; i < n; i++)
			if (base[i] != (int64_t)size * (size + 1) / 2)
				fail("rma", "accumulate", i, base[i],
				     (int64_t)size * (size + 1) / 2);
	MPI_Win_fence(0, win);
	MPI_Win_free(&win);
	free(src);
	free(got);
	passed("rma", "MPI_Put, MPI_Get, MPI_Accumulate of 32 KiB with fences");
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int all = argc < 2;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "all"))
			all = 1;
	const char *checks[] = {"ring", "allreduce", "rma"};
	void (*fns[])(void) = {check_ring, check_allreduce, check_rma};
	for (int c = 0; c < 3; c++) {
		int want = all;
		for (int i = 1; i < argc; i++)
			if (!strcmp(argv[i], checks[c]))
				want = 1;
		if (want)
			fns[c]();
	}
	MPI_Finalize();
	return 0;
}
