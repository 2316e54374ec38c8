/*
 * Data-parallel plumbing: MPI when built with it and launched by mpirun,
 * otherwise a job of one rank.
 */
#include "vit/dist.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

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
    /* Only the main thread calls MPI (the thread pool's workers never do). */
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return vit_fail(VIT_EIO, "MPI_Init_thread failed");
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

int vit_dist_abort_job(int status)
{
    if (joined && size > 1)
        MPI_Abort(MPI_COMM_WORLD, status);
    return status;
}

/* Bucket k's all-reduce, in place. */
static int start_sum(vit_real *x, int count, MPI_Request *req)
{
    if (size == 1) {
        *req = MPI_REQUEST_NULL;
        return VIT_OK;
    }
    if (MPI_Iallreduce(MPI_IN_PLACE, x, count, MPI_VIT_REAL, MPI_SUM, MPI_COMM_WORLD, req)
        != MPI_SUCCESS)
        return vit_fail(VIT_EIO, "MPI_Iallreduce of %d values failed", count);
    return VIT_OK;
}

/* Moves the sums in flight on (Open MPI progresses them only inside MPI).
 * A job of one rank has none, and may not have joined MPI at all. */
static int test_sums(MPI_Request *req, int n)
{
    int done;
    if (size > 1 && n > 0 && MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        return vit_fail(VIT_EIO, "MPI_Testall of %d bucket sums failed", n);
    return VIT_OK;
}

static int wait_sums(MPI_Request *req, int n)
{
    if (size > 1 && n > 0 && MPI_Waitall(n, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        return vit_fail(VIT_EIO, "MPI_Waitall of %d bucket sums failed", n);
    return VIT_OK;
}

typedef MPI_Request vit_dist_request;

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
int vit_dist_abort_job(int status) { return status; }

typedef int vit_dist_request;
static int start_sum(vit_real *x, int count, vit_dist_request *req)
{
    (void)x;
    (void)count;
    *req = 0;
    return VIT_OK;
}
static int test_sums(vit_dist_request *req, int n)
{
    (void)req;
    (void)n;
    return VIT_OK;
}
static int wait_sums(vit_dist_request *req, int n) { return test_sums(req, n); }

#endif

/* ---- Sums overlapped with the backward ---------------------------------- */

struct vit_dist_buckets {
    vit_real *x;
    size_t n, per;        /* values, values a bucket */
    int count;            /* buckets; bucket k is x[lo(k), n - k per) */
    size_t *ready;        /* values reported final, per bucket */
    vit_dist_request *req;
    int started;          /* buckets 0 .. started-1 are summing */
    int active;           /* between start and finish */
    int rc;               /* the first error of a report */
    vit_real scale;
};

static size_t bucket_lo(const vit_dist_buckets *b, int k)
{
    size_t hi = b->n - (size_t)k * b->per;
    return hi > b->per ? hi - b->per : 0;
}

vit_dist_buckets *vit_dist_buckets_new(vit_real *x, size_t n, size_t bucket_bytes)
{
    size_t per = (bucket_bytes ? bucket_bytes : VIT_DIST_BUCKET_BYTES) / sizeof *x;
    if (!x && n > 0) {
        vit_fail(VIT_EINVAL, "vit_dist_buckets_new: x is NULL");
        return NULL;
    }
    if (per < 1 || per > (size_t)INT_MAX) {
        vit_fail(VIT_EINVAL, "vit_dist_buckets_new: a bucket of %zu bytes holds %zu values "
                 "(1 to %d)", bucket_bytes, per, INT_MAX);
        return NULL;
    }
    vit_dist_buckets *b = calloc(1, sizeof *b);
    if (!b) {
        vit_fail(VIT_ENOMEM, "vit_dist_buckets_new: out of memory");
        return NULL;
    }
    b->x = x;
    b->n = n;
    b->per = per;
    b->count = (int)((n + per - 1) / per);
    b->ready = calloc((size_t)b->count + 1, sizeof *b->ready);
    b->req = calloc((size_t)b->count + 1, sizeof *b->req);
    if (!b->ready || !b->req) {
        vit_dist_buckets_free(b);
        vit_fail(VIT_ENOMEM, "vit_dist_buckets_new: out of memory for %d buckets", b->count);
        return NULL;
    }
    return b;
}

int vit_dist_buckets_start(vit_dist_buckets *b, vit_real scale)
{
    if (!b)
        return vit_fail(VIT_EINVAL, "vit_dist_buckets_start: buckets are NULL");
    if (b->active)
        return vit_fail(VIT_EINVAL, "vit_dist_buckets_start: the previous sum is not finished");
    memset(b->ready, 0, (size_t)b->count * sizeof *b->ready);
    b->started = 0;
    b->rc = VIT_OK;
    b->scale = scale;
    b->active = 1;
    return VIT_OK;
}

/* Scales bucket `started` and starts its sum. */
static int start_next(vit_dist_buckets *b)
{
    int k = b->started++;
    size_t lo = bucket_lo(b, k), hi = b->n - (size_t)k * b->per;
    for (size_t i = lo; i < hi; i++)
        b->x[i] *= b->scale;
    return start_sum(b->x + lo, (int)(hi - lo), &b->req[k]);
}

void vit_dist_buckets_ready(void *ctx, size_t offset, size_t count)
{
    vit_dist_buckets *b = ctx;
    if (!b || !b->active || b->rc)
        return; /* count 0: only the test of the sums in flight below */
    if (offset > b->n || count > b->n - offset) {
        b->rc = vit_fail(VIT_EINVAL, "vit_dist_buckets_ready: values %zu..%zu are outside the "
                         "buffer of %zu", offset, offset + count - 1, b->n);
        return;
    }
    for (size_t i = offset, end = offset + count; i < end;) {
        int k = (int)((b->n - 1 - i) / b->per);
        size_t top = b->n - (size_t)k * b->per, take = (top < end ? top : end) - i;
        b->ready[k] += take;
        i += take;
    }
    while (b->rc == VIT_OK && b->started < b->count &&
           b->ready[b->started] >= b->n - (size_t)b->started * b->per - bucket_lo(b, b->started))
        b->rc = start_next(b);
    if (b->rc == VIT_OK)
        b->rc = test_sums(b->req, b->started);
}

int vit_dist_buckets_finish(vit_dist_buckets *b)
{
    if (!b)
        return vit_fail(VIT_EINVAL, "vit_dist_buckets_finish: buckets are NULL");
    if (!b->active)
        return vit_fail(VIT_EINVAL, "vit_dist_buckets_finish: no sum was started");
    /* The others' sums go on even after an error here: every bucket is
     * started and waited for, or they would wait for this rank for ever. */
    int rc = b->rc;
    while (b->started < b->count) {
        int r = start_next(b);
        rc = rc ? rc : r;
    }
    int r = wait_sums(b->req, b->started);
    b->active = 0;
    return rc ? rc : r;
}

void vit_dist_buckets_free(vit_dist_buckets *b)
{
    if (!b)
        return;
    if (b->active)
        (void)vit_dist_buckets_finish(b);
    free(b->ready);
    free(b->req);
    free(b);
}
