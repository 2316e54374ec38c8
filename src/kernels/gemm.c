/* The library's one GEMM: row-major C = alpha op(A) op(B) + beta C, through
 * OpenBLAS or, per shape, a libxsmm JIT kernel (see vit/gemm.h).
 *
 * libxsmm is column-major.  A row-major C[M, N] is the column-major
 * C^T[N, M] = op(B)^T op(A)^T, so the kernel is dispatched with m = N,
 * n = M, k = K, B as its first operand and A as its second.  libxsmm 1.17's
 * JIT has no transposed first operand and only alpha = 1, so where op(B)
 * is a transpose or alpha != 1 the product reads a packed copy of
 * alpha op(B) [K, N] instead (K*N loads and stores against 2*M*N*K flops).
 * beta must be 0 or 1 (a kernel flag); anything else goes to BLAS.
 *
 * Each thread keeps a small direct-mapped cache from shape to decision and
 * kernel, so the hot path takes no lock; libxsmm's own registry (locked
 * inside libxsmm) is asked only on a miss. */
#include "vit/gemm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "blas.h"
#include "cpu_internal.h"
#include "dnnl.h"
#include "error.h"
#include "transpose.h"

#if defined(VIT_HAVE_XSMM) && !defined(VIT_DOUBLE)
#define USE_XSMM 1
#include <libxsmm.h>
#else
#define USE_XSMM 0
#endif

/* ---- policy ------------------------------------------------------------ */

static atomic_int policy = VIT_GEMM_AUTO;
/* Bumped by every policy change or reset: thread caches older than it are
 * stale. */
static atomic_uint generation = 1;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static atomic_int policy_set_by_call;

/* A VIT_GEMM the library cannot take: the GEMM cannot report an error and
 * the library prints nothing, so the value is kept for vit_gemm_env_check,
 * which a program calls before its work (every tool does) to refuse it. */
static const char *env_bad;

static const char *dnnl_missing(void);

static void read_env(void)
{
    const char *v = getenv("VIT_GEMM");
    if (!v || !*v || atomic_load(&policy_set_by_call))
        return;
    if (strcmp(v, "auto") == 0)
        atomic_store(&policy, VIT_GEMM_AUTO);
    else if (strcmp(v, "blas") == 0)
        atomic_store(&policy, VIT_GEMM_BLAS);
    else if (strcmp(v, "xsmm") == 0 && USE_XSMM)
        atomic_store(&policy, VIT_GEMM_XSMM);
    else if (strcmp(v, "dnnl") == 0 && vit_gemm_have_dnnl())
        atomic_store(&policy, VIT_GEMM_DNNL);
    else
        env_bad = v;
}

int vit_gemm_env_check(void)
{
    pthread_once(&env_once, read_env);
    if (!env_bad)
        return VIT_OK;
    if (strcmp(env_bad, "dnnl") == 0)
        return vit_fail(VIT_EINVAL, "VIT_GEMM=dnnl: the oneDNN path cannot run: %s",
                        dnnl_missing());
    return vit_fail(VIT_EINVAL, "VIT_GEMM=%s: expected %s", env_bad,
                    USE_XSMM ? (vit_gemm_have_dnnl() ? "auto, blas, xsmm or dnnl"
                                                     : "auto, blas or xsmm")
                             : "auto or blas (built without libxsmm)");
}

int vit_gemm_have_xsmm(void)
{
    return USE_XSMM;
}

/* Why the bf16 products cannot go through oneDNN, or NULL. */
static const char *dnnl_missing(void)
{
    return USE_XSMM ? vit_dnnl_missing() : "this library was built without libxsmm";
}

int vit_gemm_have_dnnl(void)
{
    return dnnl_missing() == NULL;
}

const char *vit_gemm_path_name(vit_gemm_path path)
{
    switch (path) {
    case VIT_GEMM_AUTO: return "auto";
    case VIT_GEMM_BLAS: return "blas";
    case VIT_GEMM_XSMM: return "xsmm";
    case VIT_GEMM_DNNL: return "dnnl";
    }
    return "?";
}

vit_gemm_path vit_gemm_get_path(void)
{
    pthread_once(&env_once, read_env);
    return (vit_gemm_path)atomic_load(&policy);
}

int vit_gemm_set_path(vit_gemm_path path)
{
    static const char fn[] = "vit_gemm_set_path";
    if (path != VIT_GEMM_AUTO && path != VIT_GEMM_BLAS && path != VIT_GEMM_XSMM
        && path != VIT_GEMM_DNNL)
        return vit_fail(VIT_EINVAL,
                        "%s: path must be VIT_GEMM_AUTO, _BLAS, _XSMM or _DNNL, got %d", fn,
                        (int)path);
    if (path == VIT_GEMM_XSMM && !USE_XSMM)
        return vit_fail(VIT_EINVAL, "%s: this library was built without libxsmm (%s)", fn,
                        VIT_REAL_NAME);
    if (path == VIT_GEMM_DNNL && dnnl_missing())
        return vit_fail(VIT_EINVAL, "%s: the oneDNN path cannot run: %s", fn, dnnl_missing());
    atomic_store(&policy_set_by_call, 1);
    pthread_once(&env_once, read_env);
    atomic_store(&policy, path);
    vit_gemm_stats_reset();
    return VIT_OK;
}

/* ---- statistics ---------------------------------------------------------- */

enum { MAX_SHAPES = 1024 };

static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static vit_gemm_shape stats[MAX_SHAPES];
static _Atomic unsigned long long stat_calls[MAX_SHAPES], stat_ns[MAX_SHAPES];
static atomic_int timing;
static size_t n_stats;

static int same_shape(const vit_gemm_shape *a, const vit_gemm_shape *b)
{
    return a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->M == b->M &&
           a->N == b->N && a->K == b->K && a->alpha_one == b->alpha_one && a->beta == b->beta &&
           a->path == b->path && a->bf16 == b->bf16;
}

/* Index of shape s in the table, added if new; -1 when the table is full. */
static int stats_slot(const vit_gemm_shape *s)
{
    int slot = -1;
    pthread_mutex_lock(&stats_lock);
    for (size_t i = 0; i < n_stats && slot < 0; i++)
        if (same_shape(&stats[i], s))
            slot = (int)i;
    if (slot < 0 && n_stats < MAX_SHAPES) {
        stats[n_stats] = *s;
        atomic_store_explicit(&stat_calls[n_stats], 0, memory_order_relaxed);
        atomic_store_explicit(&stat_ns[n_stats], 0, memory_order_relaxed);
        slot = (int)n_stats++;
    }
    pthread_mutex_unlock(&stats_lock);
    return slot;
}

size_t vit_gemm_shapes(vit_gemm_shape *out, size_t cap)
{
    pthread_mutex_lock(&stats_lock);
    size_t n = n_stats;
    for (size_t i = 0; i < n && i < cap; i++) {
        out[i] = stats[i];
        out[i].calls = atomic_load_explicit(&stat_calls[i], memory_order_relaxed);
        out[i].seconds = 1e-9 * (double)atomic_load_explicit(&stat_ns[i], memory_order_relaxed);
    }
    pthread_mutex_unlock(&stats_lock);
    return n;
}

void vit_gemm_set_timing(int on)
{
    atomic_store(&timing, on != 0);
}

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

unsigned long long vit_gemm_clock(void)
{
    return atomic_load_explicit(&timing, memory_order_relaxed) ? now_ns() : 0;
}

/* bf16 products' statistics entries, per thread, in front of stats_slot's
 * lock (a direct-mapped table: a step has a few dozen such shapes). */
typedef struct {
    unsigned gen;
    int ta, M, N, K, beta, path, slot;
} note_entry;

enum { NOTES = 64 };
static _Thread_local note_entry notes[NOTES];

void vit_gemm_note_bf16(int trans_a, int M, int N, int K, int beta, vit_gemm_path path,
                        unsigned long long t0)
{
    unsigned gen = atomic_load_explicit(&generation, memory_order_relaxed);
    unsigned h = (((((unsigned)trans_a * 31u + (unsigned)M) * 31u + (unsigned)N) * 31u
                   + (unsigned)K) * 31u + (unsigned)beta) * 7u + (unsigned)path;
    note_entry *e = &notes[h % NOTES];
    if (e->gen != gen || e->ta != trans_a || e->M != M || e->N != N || e->K != K
        || e->beta != beta || e->path != (int)path) {
        vit_gemm_shape s = {trans_a, 0, M, N, K, 1, beta, path, 0, 0, 1};
        *e = (note_entry){gen, trans_a, M, N, K, beta, (int)path, stats_slot(&s)};
    }
    if (e->slot < 0)
        return;
    atomic_fetch_add_explicit(&stat_calls[e->slot], 1, memory_order_relaxed);
    if (t0)
        atomic_fetch_add_explicit(&stat_ns[e->slot], now_ns() - t0, memory_order_relaxed);
}

void vit_gemm_stats_reset(void)
{
    pthread_mutex_lock(&stats_lock);
    n_stats = 0;
    pthread_mutex_unlock(&stats_lock);
    atomic_fetch_add(&generation, 1);
}

/* ---- the rule ------------------------------------------------------------ */

#if USE_XSMM
#ifdef VIT_HAVE_OPENBLAS_CORENAME
char *openblas_get_corename(void);
#endif

/* 1 when the BLAS runs kernels with AVX2/FMA or better.  OpenBLAS names
 * the kernels it chose; on a CPU it does not know (0.3.21 on a Xeon of
 * model 207, for one) it falls back to its SSE3 "Prescott" kernels, which
 * run a GEMM 5-10x slower than libxsmm's JIT code for the same CPU (libxsmm
 * reads the CPU's features, not its model).  Another BLAS is taken to be
 * good. */
static int blas_is_strong(void)
{
#ifdef VIT_HAVE_OPENBLAS_CORENAME
    static const char *const strong[] = {"haswell", "skylakex", "cooperlake",
                                         "sapphirerapids", "zen", "excavator"};
    const char *core = openblas_get_corename();
    if (!core)
        return 1;
    for (size_t i = 0; i < sizeof strong / sizeof strong[0]; i++)
        if (strcasecmp(core, strong[i]) == 0)
            return 1;
    return 0;
#else
    return 1;
#endif
}

/* Where the automatic policy sends a product.  libxsmm's kernels do not
 * block over N (nor over K, which k_chunk makes up for), so very wide
 * products stay with a BLAS that does.  Up to N = 1024 libxsmm was ahead or
 * level on every shape of the three vit_bench models once long reductions
 * ran in chunks and the attention backward stopped passing alpha != 1
 * (whole steps, 2 threads, alternating, OpenBLAS 0.3.21's SkylakeX
 * kernels: digits 4360-5447 images/s against 4058-5011 with the earlier
 * rule that kept the per-head products and long weight gradients on BLAS,
 * medium 442-471 against 419-438, large 134 against 109-132; with the
 * Haswell kernels digits 4302-5054 against 3790-4234).  Against OpenBLAS's
 * SSE3 fallback libxsmm won every one of 36 shapes measured, by 1.1x to
 * 10x, so it takes every product then. */
/* On a CPU with AVX2 but not AVX-512 (Zen 3) libxsmm's code is AVX2 and
 * the BLAS's Haswell/Zen kernels beat it on the weight gradients and the
 * wide products: one Zen 3 core, thread CPU time, best of 5, OpenBLAS
 * 0.3.21 "Zen" against libxsmm 1.17: TN with K >= 544 (the weight
 * gradients) 67-86 GFLOP/s against 40-50; NN/NT with N*K >= 128*128 (the
 * medium and large models' MLP and QKV products) 70-89 against 42-61, and
 * at 192*64 (a QKV of width 64) 83 against 67 over 3,200 rows, level over
 * 544.  The narrow ones stay on libxsmm (N*K <= 64*128: 81-97 against
 * 58-84), and
 * so do a TN with M or N under 32 or a short K (a 9 x 16 stem gradient
 * over 50,176 rows: 70 against 32; attention pairs). */
static int avx2_prefers_blas(int ta, int M, int N, int K)
{
    if (ta)
        return M >= 32 && N >= 32 && K >= 256;
    return (long)N * K >= 12288;
}

/* 1 when this CPU has AVX2 and not AVX-512. */
static int avx2_only(void)
{
    return (vit_cpu_features() & (VIT_CPU_AVX2 | VIT_CPU_AVX512F)) == VIT_CPU_AVX2;
}

static int auto_wants_xsmm(int ta, int M, int N, int K)
{
    static atomic_int strong = -1;
    int st = atomic_load_explicit(&strong, memory_order_relaxed);
    if (st < 0) {
        st = blas_is_strong();
        atomic_store_explicit(&strong, st, memory_order_relaxed);
    }
    if (!st)
        return 1;
    if (avx2_only() && avx2_prefers_blas(ta, M, N, K))
        return 0;
    return N <= 1024;
}

/* ---- libxsmm ------------------------------------------------------------- */

static pthread_once_t xsmm_once = PTHREAD_ONCE_INIT;
static pthread_key_t pack_key;
static int pack_key_ok;

typedef struct {
    float *p;
    size_t cap;
} pack_buf;

static void pack_free(void *p)
{
    pack_buf *b = p;
    free(b->p);
    free(b);
}

static void xsmm_setup(void)
{
    libxsmm_init();
    pack_key_ok = pthread_key_create(&pack_key, pack_free) == 0;
}

/* This thread's buffer of at least n floats, or NULL. */
static float *pack_space(size_t n)
{
    if (!pack_key_ok)
        return NULL;
    pack_buf *b = pthread_getspecific(pack_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b || pthread_setspecific(pack_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (b->cap < n) {
        float *p = realloc(b->p, n * sizeof *p);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = n;
    }
    return b->p;
}

/* P[K, N] = alpha op(B), dense. */
static void pack_b(float *P, enum CBLAS_TRANSPOSE tb, int K, int N, float alpha,
                   const float *B, int ldb)
{
    if (tb == CblasNoTrans) {
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++)
                P[(size_t)k * N + n] = alpha * B[(size_t)k * ldb + n];
    } else { /* B is [N, K] */
        vit_transpose_scaled(N, N, K, alpha, B, ldb, P, N);
    }
}
#endif

/* ---- per-thread cache ---------------------------------------------------- */

typedef struct {
    unsigned gen; /* 0: empty */
    signed char ta, tb, alpha_one, beta;
    int M, N, K, lda, ldb, ldc;
    vit_gemm_path path;
    int packed; /* 1: the kernel reads a packed alpha op(B) */
    int slot;   /* statistics entry or -1 */
#if USE_XSMM
    /* The reduction runs in chunks of kc (see k_chunk): kernel for the
     * first chunk (with the call's beta), kernel_rest for the full chunks
     * after it and kernel_tail for the last one (beta 1 both, the same
     * kernel when the last chunk is full); both NULL when K fits one
     * chunk. */
    int kc;
    libxsmm_smmfunction kernel, kernel_rest, kernel_tail;
#endif
} cache_entry;

/* Open addressing, PROBE slots from the hash.  A step of each of the three
 * models has 21-23 shapes (a few more with distinct strides); with a
 * direct-mapped table of 64, two of digits' shared a slot and evicted each
 * other on every call, each miss a trip through libxsmm's locked registry
 * and the statistics lock (3.8% of the digits step). */
enum { CACHE = 256, PROBE = 8 };
static _Thread_local cache_entry cache[CACHE];

static unsigned shape_hash(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc,
                           int beta)
{
    uint32_t h = 2166136261u;
    int v[] = {ta, tb, M, N, K, lda, ldb, ldc, beta};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        h = (h ^ (uint32_t)v[i]) * 16777619u;
    return h % CACHE;
}

#if USE_XSMM
/* Reduction chunk for libxsmm: its JIT kernels have no blocking over k, so
 * the whole first operand op(B) [K, N] streams through the cache once per
 * block of rows of C.  Past ~256 KB (N = 768, K = 2080 is 6.4 MB) a
 * product ran at a third of its small-K rate (34-42 against 119 GFLOP/s,
 * one thread, weight gradients of the large model); chunks of K that keep
 * op(B)'s slice within 64 Ki floats, summed into C with beta 1, run at
 * the small-K rate.  Chunks are equal but for the last, multiples of 16
 * (whole cache lines), and depend on the shape alone.  But every chunk
 * after the first reads and writes all of C again: for the MLP's
 * 2080 x 768 outputs over K = 192 (op(B) 576 KB, three chunks) that was
 * 159-189 GFLOP/s against 204-215 in one piece (AMD EPYC, 1 MB of L2 a
 * core), so an op(B) of up to 640 KB stays whole. */
static int k_chunk(int N, int K)
{
    const int whole = 163840;  /* floats of op(B) kept in one piece */
    const int budget = 65536; /* floats of op(B) per chunk */
    if ((long)K * N <= whole)
        return K;
    int kmax = budget / (N > 0 ? N : 1);
    if (kmax < 64)
        kmax = 64;
    if (K <= kmax)
        return K;
    int n = (K + kmax - 1) / kmax;
    int kc = (K + n - 1) / n;
    kc = (kc + 15) / 16 * 16;
    return kc < K ? kc : K;
}

/* The kernel for e's shape with reduction length k and beta 0 or 1. */
static libxsmm_smmfunction xsmm_kernel(const cache_entry *e, int k, int beta_flag)
{
    libxsmm_blasint m = e->N, n = e->M, kk = k;
    libxsmm_blasint lda = e->packed ? e->N : e->ldb, ldb = e->lda, ldc = e->ldc;
    int flags = (e->ta != CblasNoTrans ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) |
                (beta_flag == 0 ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
    int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    float one = 1, beta = (float)beta_flag;
    return libxsmm_smmdispatch(m, n, kk, &lda, &ldb, &ldc, &one, &beta, &flags, &prefetch);
}
#endif

/* Fills e (whose key fields are set) for the policy in force. */
static void decide(cache_entry *e)
{
    vit_gemm_path pol = vit_gemm_get_path();
    e->path = VIT_GEMM_BLAS;
    e->packed = 0;
#if USE_XSMM
    e->kernel = e->kernel_rest = e->kernel_tail = NULL;
    int want = pol == VIT_GEMM_XSMM
               || ((pol == VIT_GEMM_AUTO || pol == VIT_GEMM_DNNL)
                   && auto_wants_xsmm(e->ta != CblasNoTrans, e->M, e->N, e->K));
    if (want && e->beta >= 0) {
        pthread_once(&xsmm_once, xsmm_setup);
        e->packed = e->tb != CblasNoTrans || !e->alpha_one;
        if (!e->packed || pack_key_ok) {
            e->kc = k_chunk(e->N, e->K); /* <= K */
            e->kernel = xsmm_kernel(e, e->kc, e->beta);
            if (e->kc < e->K) {
                int tail = e->K - (e->K - 1) / e->kc * e->kc; /* the last chunk, 1..kc */
                e->kernel_rest = xsmm_kernel(e, e->kc, 1);
                e->kernel_tail = tail == e->kc ? e->kernel_rest : xsmm_kernel(e, tail, 1);
                if (!e->kernel_rest || !e->kernel_tail)
                    e->kernel = NULL;
            }
        }
        if (e->kernel)
            e->path = VIT_GEMM_XSMM;
    }
#else
    (void)pol;
#endif
    vit_gemm_shape s = {e->ta != CblasNoTrans, e->tb != CblasNoTrans, e->M, e->N, e->K,
                        e->alpha_one, e->beta, e->path, 0, 0, 0};
    e->slot = stats_slot(&s);
}

static void run(const cache_entry *e, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,
                int N, int K, vit_real alpha, const vit_real *A, int lda, const vit_real *B,
                int ldb, vit_real beta, vit_real *C, int ldc);

void vit_gemm_rm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                 vit_real alpha, const vit_real *A, int lda, const vit_real *B, int ldb,
                 vit_real beta, vit_real *C, int ldc)
{
    int b = beta == 0 ? 0 : beta == 1 ? 1 : -1, a1 = alpha == 1;
    unsigned gen = atomic_load_explicit(&generation, memory_order_relaxed);
    unsigned h = shape_hash(ta, tb, M, N, K, lda, ldb, ldc, b * 2 + a1);
    cache_entry *e = NULL, *free_slot = NULL;
    for (unsigned p = 0; p < PROBE && !e; p++) {
        cache_entry *c = &cache[(h + p) % CACHE];
        if (c->gen != gen) { /* empty or stale: the shape is not further on */
            free_slot = c;
            break;
        }
        if (c->ta == (signed char)ta && c->tb == (signed char)tb && c->M == M && c->N == N &&
            c->K == K && c->lda == lda && c->ldb == ldb && c->ldc == ldc && c->beta == b &&
            c->alpha_one == a1)
            e = c;
    }
    if (!e) {
        /* A run of PROBE live entries: the first is replaced. */
        e = free_slot ? free_slot : &cache[h];
        *e = (cache_entry){gen, (signed char)ta, (signed char)tb, (signed char)a1,
                           (signed char)b, M, N, K, lda, ldb, ldc, VIT_GEMM_BLAS, 0, -1
#if USE_XSMM
                           , 0, NULL, NULL, NULL
#endif
        };
        decide(e);
    }
    if (e->slot < 0) {
        run(e, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    atomic_fetch_add_explicit(&stat_calls[e->slot], 1, memory_order_relaxed);
    if (!atomic_load_explicit(&timing, memory_order_relaxed)) {
        run(e, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    unsigned long long t0 = now_ns();
    run(e, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    atomic_fetch_add_explicit(&stat_ns[e->slot], now_ns() - t0, memory_order_relaxed);
}

static void run(const cache_entry *e, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,
                int N, int K, vit_real alpha, const vit_real *A, int lda, const vit_real *B,
                int ldb, vit_real beta, vit_real *C, int ldc)
{
#if USE_XSMM
    if (e->path == VIT_GEMM_XSMM) {
        const float *first = B;
        if (e->packed) {
            float *P = pack_space((size_t)K * N);
            if (!P)
                goto blas;
            pack_b(P, tb, K, N, alpha, B, ldb);
            first = P;
        }
        if (!e->kernel_tail) {
            e->kernel(first, A, C);
            return;
        }
        /* Chunk c of the reduction: rows c*kc.. of op(B) (or of the packed
         * copy) and the matching columns of op(A). */
        size_t step_b = (size_t)e->kc * (size_t)(e->packed ? N : ldb);
        size_t step_a = ta == CblasNoTrans ? (size_t)e->kc : (size_t)e->kc * (size_t)lda;
        e->kernel(first, A, C);
        for (int k0 = e->kc; k0 < K; k0 += e->kc) {
            first += step_b;
            A += step_a;
            (k0 + e->kc < K ? e->kernel_rest : e->kernel_tail)(first, A, C);
        }
        return;
    }
blas:
#else
    (void)e;
#endif
#ifdef VIT_DOUBLE
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}
