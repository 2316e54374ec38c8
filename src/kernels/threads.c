/* The library's thread pool, thread count and GEMM split (see threads.h). */
#include "threads.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blas.h"
#include "error.h"
#include "fastmath.h"

#ifdef VIT_HAVE_OPENBLAS_THREADS
void openblas_set_num_threads(int num_threads);
#endif

#define MAX_THREADS 256

/* 0 until set or first used.  Written by vit_set_threads, which core.h asks
 * to be called before training, not while kernels run. */
static int nthreads;

static void pin_blas(void)
{
#ifdef VIT_HAVE_OPENBLAS_THREADS
    openblas_set_num_threads(1);
#endif
}

int vit_threads(void)
{
    if (nthreads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
        pin_blas();
    }
    return nthreads;
}

/* A fork/join costs a few microseconds; below ~100k flops it does not pay. */
int vit_threads_for(double total_flops)
{
    int n = vit_threads();
    return total_flops < 1e5 ? 1 : n;
}

/* Sets our loops' thread count; OpenBLAS stays single-threaded because the
 * library splits its GEMMs itself (threads.h). */
int vit_set_threads(int n)
{
    if (n < 1 || n > 1024)
        return vit_fail(VIT_EINVAL, "vit_set_threads: %d threads is out of range [1, 1024]", n);
    nthreads = n > MAX_THREADS ? MAX_THREADS : n;
    pin_blas();
    return VIT_OK;
}

/* ---- Waiting ------------------------------------------------------------ */

/* How long a waiting thread polls before it sleeps.  Waking a sleeping
 * thread costs the waker a futex call and the sleeper tens of microseconds
 * before it runs (more on a virtual machine, whose idle CPU has halted):
 * with a 5 us spin the workers slept 8 times a digits step, which then ran
 * at 0.84-0.89x of its speed with a 200 us spin.  But a thread that polls
 * while another program waits for its CPU takes that program's share, and
 * the scheduler takes it back in the middle of real work: with one busy
 * loop beside a digits run, the long spin ran at 0.67x of the short one.
 * So a thread spins long only while it has not been kept waiting for a
 * CPU: its run delay (the time it was runnable but not running, which
 * Linux counts in /proc/thread-self/schedstat) over the last CHECK_NS of
 * wall time under 1/20 of it.  On an idle machine the delay was 0.5%
 * (kernel threads). */
#define SPIN_LONG_NS 200000
#define SPIN_SHORT_NS 5000
#define CHECK_NS 10000000

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* This thread's run delay in ns so far, or -1 when the system does not
 * say (no /proc, no scheduler statistics, or no descriptor to spare).
 * errno is left as it was: the caller's error path may still read it. */
static int64_t run_delay_ns(void)
{
    char buf[96];
    int saved = errno;
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    errno = saved;
    if (got <= 0)
        return -1;
    buf[got] = 0;
    unsigned long long run, delay;
    if (sscanf(buf, "%llu %llu", &run, &delay) != 2 || run == 0)
        return -1; /* "0 0 ..." where the kernel keeps no statistics */
    return delay > INT64_MAX ? -1 : (int64_t)delay;
}

/* This thread's spin time for a wait starting at t. */
static int64_t spin_budget(int64_t t)
{
    static _Thread_local int64_t checked_at, delay_at_check = -1;
    static _Thread_local int crowded = 1; /* until a check says otherwise */
    if (t - checked_at >= CHECK_NS) {
        int64_t d = run_delay_ns();
        if (d < 0 || delay_at_check < 0)
            crowded = 1;
        else
            crowded = (d - delay_at_check) * 20 > t - checked_at;
        checked_at = t;
        delay_at_check = d;
    }
    return crowded ? SPIN_SHORT_NS : SPIN_LONG_NS;
}

/* Polls *p until it differs from seen or the spin time is up; returns the
 * last value read.  The clock is read every 256 polls (~0.1 us apart). */
static unsigned long spin_while_equal(atomic_ulong *p, unsigned long seen)
{
    int64_t t0 = now_ns(), budget = spin_budget(t0);
    for (unsigned n = 1;; n++) {
        unsigned long v = atomic_load_explicit(p, memory_order_acquire);
        if (v != seen || ((n & 255) == 0 && now_ns() - t0 > budget))
            return v;
    }
}

/* Polls *p until it is <= 0 or the spin time is up. */
static void spin_while_positive(atomic_int *p)
{
    int64_t t0 = now_ns(), budget = spin_budget(t0);
    for (unsigned n = 1;; n++)
        if (atomic_load_explicit(p, memory_order_acquire) <= 0
            || ((n & 255) == 0 && now_ns() - t0 > budget))
            return;
}

/* ---- Pool --------------------------------------------------------------- */

/* One job at a time: the caller publishes it by bumping `job`; worker t
 * runs piece t if t < nt, and every worker then counts down `pending`, so
 * the next job is published only when all have seen this one. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    atomic_ulong job;
    atomic_int pending;
    int workers;          /* started so far */
    pid_t owner;          /* process that started them (a fork loses them) */
    vit_range_fn body;
    void *ctx;
    size_t n;
    int nt;
} pool; /* lock and conditions set up by pool_grow() on first use */

static _Thread_local int in_body;
/* The job count when worker i was started: it waits for the next one (read
 * at its start, the current count could already include a job it owes). */
static unsigned long start_job[MAX_THREADS];

static void run_piece(int t)
{
    size_t lo = pool.n * (size_t)t / (size_t)pool.nt;
    size_t hi = pool.n * (size_t)(t + 1) / (size_t)pool.nt;
    in_body = 1;
    pool.body(pool.ctx, lo, hi);
    in_body = 0;
}

static void *worker(void *arg)
{
    int id = (int)(size_t)arg;
    unsigned long seen = start_job[id];
    for (;;) {
        unsigned long j = spin_while_equal(&pool.job, seen);
        if (j == seen) {
            pthread_mutex_lock(&pool.lock);
            while ((j = atomic_load(&pool.job)) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = j;
        if (id < pool.nt)
            run_piece(id);
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
    return NULL;
}

/* Starts workers up to want - 1; returns how many threads can take part. */
static int pool_grow(int want)
{
    if (pool.owner != getpid()) { /* first use, or a child after fork() */
        pthread_mutex_init(&pool.lock, NULL);
        pthread_cond_init(&pool.wake, NULL);
        pthread_cond_init(&pool.done, NULL);
        pool.workers = 0;
        pool.owner = getpid();
    }
    while (pool.workers < want - 1) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        start_job[pool.workers + 1] = atomic_load(&pool.job);
        int rc = pthread_create(&th, &at, worker, (void *)(size_t)(pool.workers + 1));
        pthread_attr_destroy(&at);
        if (rc != 0)
            break; /* fewer threads: still correct, pieces just run here */
        pool.workers++;
    }
    return pool.workers + 1;
}

int vit_parallel_width(int nt, size_t n)
{
    if (nt > (int)n)
        nt = (int)n;
    if (nt <= 1 || in_body)
        return 1;
    int have = pool_grow(nt);
    return nt < have ? nt : have;
}

void vit_parallel(int nt, size_t n, vit_range_fn body, void *ctx)
{
    if (nt > (int)n)
        nt = (int)n;
    if (nt <= 1 || in_body) {
        body(ctx, 0, n);
        return;
    }
    int have = pool_grow(nt);
    pool.body = body;
    pool.ctx = ctx;
    pool.n = n;
    pool.nt = nt;
    /* Pieces no worker could take run here, after the caller's own. */
    int spread = nt < have ? nt : have;
    atomic_store(&pool.pending, pool.workers);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add_explicit(&pool.job, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    run_piece(0);
    for (int t = spread; t < nt; t++)
        run_piece(t);
    spin_while_positive(&pool.pending);
    if (atomic_load(&pool.pending) > 0) {
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.pending) > 0)
            pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
}

/* ---- GEMM split and column sums ----------------------------------------- */

typedef struct {
    enum CBLAS_TRANSPOSE ta, tb;
    int N, K, lda, ldb, ldc;
    vit_real alpha, beta;
    const vit_real *A, *B;
    vit_real *C;
    const vit_real *bias; /* [N] broadcast into C's rows first, or NULL */
} gemm_job;

static void gemm_rows(void *p, size_t r0, size_t r1)
{
    const gemm_job *g = p;
    /* Each thread writes the bias into its own rows just before its GEMM
     * adds onto them (beta 1): the copy is split like the product, and the
     * rows are still in that core's cache when the product runs. */
    if (g->bias)
        for (size_t r = r0; r < r1; r++)
            memcpy(g->C + r * (size_t)g->ldc, g->bias, (size_t)g->N * sizeof *g->C);
    /* Row r of op(A) is row r of A, or column r of A when transposed. */
    const vit_real *a = g->ta == CblasNoTrans ? g->A + r0 * (size_t)g->lda : g->A + r0;
    vit_gemm(CblasRowMajor, g->ta, g->tb, (int)(r1 - r0), g->N, g->K, g->alpha, a, g->lda,
             g->B, g->ldb, g->beta, g->C + r0 * (size_t)g->ldc, g->ldc);
}

/* Runs g over M rows, split into blocks of at least 16 rows (each call's
 * micro-kernel stays busy) when the product is large enough. */
static void run_rows(gemm_job *g, int M)
{
    int nt = vit_threads_for(2.0 * M * (double)g->N * g->K);
    if (nt > M / 16)
        nt = M / 16 > 1 ? M / 16 : 1;
    if (nt <= 1)
        gemm_rows(g, 0, (size_t)M);
    else
        vit_parallel(nt, (size_t)M, gemm_rows, g);
}

void vit_pgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
               vit_real alpha, const vit_real *A, int lda, const vit_real *B, int ldb,
               vit_real beta, vit_real *C, int ldc)
{
    gemm_job g = {ta, tb, N, K, lda, ldb, ldc, alpha, beta, A, B, C, NULL};
    run_rows(&g, M);
}

void vit_pgemm_bias(int M, int N, int K, const vit_real *A, int lda, const vit_real *B, int ldb,
                    const vit_real *bias, vit_real *C, int ldc)
{
    gemm_job g = {CblasNoTrans, CblasNoTrans, N, K, lda, ldb, ldc, 1, bias ? 1 : 0,
                  A, B, C, bias};
    run_rows(&g, M);
}

typedef struct {
    vit_real *acc;
    const vit_real *x;
    int rows, cols;
} colsum_job;

/* Columns [o0, o0 + W) of c: the rows added in order onto register sums,
 * acc read and written once (not once a row).  Inlined with W a constant,
 * so that the sums stay in registers. */
FM_INLINE void colsum_block(const colsum_job *c, size_t o0, const int W)
{
    vit_real s[64];
    memcpy(s, c->acc + o0, (size_t)W * sizeof *s);
    for (int i = 0; i < c->rows; i++) {
        const vit_real *row = c->x + (size_t)i * (size_t)c->cols + o0;
        for (int j = 0; j < W; j++)
            s[j] += row[j];
    }
    memcpy(c->acc + o0, s, (size_t)W * sizeof *s);
}

/* Columns [lo, hi): each column adds its rows in order onto acc, in blocks
 * of 64 columns, then 16, then the last few row by row: the same
 * additions, and so the same bits, as one row-by-row loop (which read and
 * wrote all of acc[lo, hi) once a row: 3.5x slower at 544 x 64). */
FM_CLONES
static void colsum_range(void *p, size_t lo, size_t hi)
{
    const colsum_job *c = p;
    size_t o0 = lo;
    for (; o0 + 64 <= hi; o0 += 64)
        colsum_block(c, o0, 64);
    for (; o0 + 16 <= hi; o0 += 16)
        colsum_block(c, o0, 16);
    for (int i = 0; i < c->rows && o0 < hi; i++) {
        const vit_real *row = c->x + (size_t)i * (size_t)c->cols;
        for (size_t o = o0; o < hi; o++)
            c->acc[o] += row[o];
    }
}

void vit_column_sums(vit_real *acc, const vit_real *x, int rows, int cols)
{
    int nt = vit_threads_for((double)rows * cols * 4);
    if (nt > cols / 16)
        nt = cols / 16 > 1 ? cols / 16 : 1;
    colsum_job c = {acc, x, rows, cols};
    vit_parallel(nt, (size_t)cols, colsum_range, &c);
}
