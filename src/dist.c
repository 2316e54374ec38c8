/*
 * Data-parallel plumbing: MPI when built with it and launched by mpirun,
 * otherwise a job of one rank.
 */
#include "vit/dist.h"

#include <limits.h>
#include <stdlib.h>

#include "error.h"

#ifdef VIT_HAVE_MPI
#include <mpi.h>

static int joined, rank, size = 1;

/* mpirun (Open MPI, or any PMIx/PMI launcher) leaves these in the
 * environment; without them we are a plain process and stay out of MPI. */
static int launched_by_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

int vit_dist_init(int *argc, char ***argv)
{
    if (joined || !launched_by_mpirun())
        return VIT_OK;
    if (MPI_Init(argc, argv) != MPI_SUCCESS)
        return vit_fail(VIT_EIO, "MPI_Init failed");
    joined = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return VIT_OK;
}

void vit_dist_finalize(void)
{
    if (joined)
        MPI_Finalize();
    joined = 0;
    rank = 0;
    size = 1;
}

int vit_dist_rank(void) { return rank; }
int vit_dist_size(void) { return size; }
int vit_dist_available(void) { return 1; }

static int reduce(void *buf, size_t n, MPI_Datatype type, MPI_Op op)
{
    if (!buf && n > 0)
        return vit_fail(VIT_EINVAL, "vit_dist_sum: buffer is NULL");
    if (size == 1 || n == 0)
        return VIT_OK;
    /* MPI counts are int: reduce in chunks for very large buffers. */
    int elem;
    MPI_Type_size(type, &elem);
    for (size_t off = 0; off < n;) {
        int count = n - off > (size_t)INT_MAX ? INT_MAX : (int)(n - off);
        if (MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * (size_t)elem, count, type, op,
                          MPI_COMM_WORLD) != MPI_SUCCESS)
            return vit_fail(VIT_EIO, "MPI_Allreduce of %d values failed", count);
        off += (size_t)count;
    }
    return VIT_OK;
}

#ifdef VIT_DOUBLE
#define MPI_VIT_REAL MPI_DOUBLE
#else
#define MPI_VIT_REAL MPI_FLOAT
#endif

int vit_dist_sum(vit_real *x, size_t n) { return reduce(x, n, MPI_VIT_REAL, MPI_SUM); }
int vit_dist_sum_double(double *d, int n) { return reduce(d, (size_t)n, MPI_DOUBLE, MPI_SUM); }
int vit_dist_sum_int(int *k, int n) { return reduce(k, (size_t)n, MPI_INT, MPI_SUM); }

int vit_dist_agree(int code)
{
    if (size > 1)
        MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return code;
}

int vit_dist_same(unsigned long long value)
{
    if (size == 1)
        return 1;
    unsigned long long lo = value, hi = value;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

void vit_dist_abort(int status)
{
    if (joined && size > 1)
        MPI_Abort(MPI_COMM_WORLD, status);
    exit(status);
}

#else /* no MPI: a job of one rank */

int vit_dist_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return VIT_OK;
}
void vit_dist_finalize(void) {}
int vit_dist_rank(void) { return 0; }
int vit_dist_size(void) { return 1; }
int vit_dist_available(void) { return 0; }
static int check_buf(const void *p, long n)
{
    return !p && n > 0 ? vit_fail(VIT_EINVAL, "vit_dist_sum: buffer is NULL") : VIT_OK;
}
int vit_dist_sum(vit_real *x, size_t n) { return check_buf(x, (long)n); }
int vit_dist_sum_double(double *d, int n) { return check_buf(d, n); }
int vit_dist_sum_int(int *k, int n) { return check_buf(k, n); }
int vit_dist_agree(int code) { return code; }
int vit_dist_same(unsigned long long value) { (void)value; return 1; }
void vit_dist_abort(int status) { exit(status); }

#endif
