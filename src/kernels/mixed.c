/* Mixed precision for the library's layer GEMMs (see mixed.h and
 * vit_bf16_thread_mixed in vit/bf16.h).
 *
 * The switch is per thread: the training step's slices each run on one
 * thread (src/model/model.c), and a GEMM decides on the thread that calls it
 * (before vit_gemm_bf16_packed splits its rows, if it does).  The packed
 * weights are shared read-only by every slice of a step: packed once per
 * step, after the optimizer's update and before the forward. */
#include "mixed.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fastmath.h"
#include "threads.h"
#include "vit/bf16.h"

static _Thread_local int tl_on;
static _Thread_local int tl_status;
static _Thread_local const vit_mixed_weights *tl_weights;

/* ---- precision ------------------------------------------------------------ */

const char *vit_precision_name(int precision)
{
    switch (precision) {
    case VIT_PRECISION_FP32: return "fp32";
    case VIT_PRECISION_BF16: return "bf16";
    case VIT_PRECISION_AUTO: return "auto";
    }
    return "?";
}

int vit_precision_resolve(int precision, char *why, size_t cap)
{
    const char *missing = NULL;
    int out = VIT_PRECISION_FP32;
    if (precision == VIT_PRECISION_BF16 || precision == VIT_PRECISION_AUTO) {
        missing = vit_bf16_xsmm_missing();
        out = missing ? VIT_PRECISION_FP32 : VIT_PRECISION_BF16;
    }
    if (why && cap > 0) {
        if (precision != VIT_PRECISION_FP32 && precision != VIT_PRECISION_BF16
            && precision != VIT_PRECISION_AUTO)
            snprintf(why, cap, "fp32 (precision %d is not fp32, bf16 or auto)", precision);
        else if (precision == VIT_PRECISION_FP32)
            snprintf(why, cap, "fp32");
        else if (!missing)
            snprintf(why, cap, "bf16 (%s; bf16 inputs, float32 sums and master weights)",
                     (vit_bf16_cpu_features() & VIT_BF16_CPU_AMX)
                         ? "this CPU has AMX-BF16 and AVX-512 BF16"
                         : "this CPU has AVX-512 BF16");
        else if (precision == VIT_PRECISION_BF16)
            snprintf(why, cap, "fp32 (bf16 was asked for, but %s)", missing);
        else
            snprintf(why, cap, "fp32 (auto: %s)", missing);
    }
    return out;
}

/* ---- packed weights ---------------------------------------------------------- */

typedef struct entry {
    const float *B;
    int trans_b, K, N, ldb;
    vit_bf16_packed *p;
} entry;

struct vit_mixed_weights {
    entry *e;
    int n, cap;
    atomic_int failed; /* a pack's error in vit_mixed_weights_pack, else VIT_OK */
};

vit_mixed_weights *vit_mixed_weights_new(void)
{
#ifdef VIT_DOUBLE
    vit_fail(VIT_EINVAL, "vit_mixed_weights_new: the float64 library has no bf16 GEMM");
    return NULL;
#else
    vit_mixed_weights *w = calloc(1, sizeof *w);
    if (!w)
        vit_fail(VIT_ENOMEM, "mixed precision: out of memory");
    return w;
#endif
}

void vit_mixed_weights_free(vit_mixed_weights *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++)
        vit_bf16_packed_free(w->e[i].p);
    free(w->e);
    free(w);
}

int vit_mixed_weights_count(const vit_mixed_weights *w)
{
    return w ? w->n : 0;
}

int vit_mixed_weights_add(vit_mixed_weights *w, int trans_b, int K, int N, const float *B, int ldb)
{
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        entry *e = realloc(w->e, (size_t)cap * sizeof *e);
        if (!e)
            return vit_fail(VIT_ENOMEM, "mixed precision: out of memory for %d weights", cap);
        w->e = e;
        w->cap = cap;
    }
    entry *e = &w->e[w->n];
    *e = (entry){B, trans_b, K, N, ldb, NULL};
    TRY(vit_bf16_packed_new(&e->p));
    w->n++;
    return VIT_OK;
}

static void pack_range(void *ctx, size_t lo, size_t hi)
{
    vit_mixed_weights *w = ctx;
    for (size_t i = lo; i < hi; i++) {
        const entry *e = &w->e[i];
        int rc = vit_bf16_pack_b(e->p, e->trans_b, e->K, e->N, e->B, e->ldb);
        if (rc != VIT_OK)
            atomic_store(&w->failed, rc); /* any failing pack's code will do */
    }
}

int vit_mixed_weights_pack(vit_mixed_weights *w, int nt)
{
    atomic_store(&w->failed, VIT_OK);
    if (w->n == 0)
        return VIT_OK;
    vit_parallel(nt < w->n ? nt : w->n, (size_t)w->n, pack_range, w);
    int rc = atomic_load(&w->failed);
    if (rc != VIT_OK)
        return vit_fail(rc, "mixed precision: cannot pack the step's bf16 weights");
    return VIT_OK;
}

#ifndef VIT_DOUBLE
static const vit_bf16_packed *lookup(const vit_mixed_weights *w, int trans_b, int K, int N,
                                     const float *B, int ldb)
{
    if (!w)
        return NULL;
    for (int i = 0; i < w->n; i++) {
        const entry *e = &w->e[i];
        if (e->B == B && e->trans_b == trans_b && e->K == K && e->N == N && e->ldb == ldb)
            return e->p;
    }
    return NULL;
}
#endif

/* ---- the switch ------------------------------------------------------------ */

void vit_mixed_enter(const vit_mixed_weights *w)
{
#ifndef VIT_DOUBLE
    tl_on = 1;
    tl_weights = w;
#else
    (void)w;
#endif
}

int vit_mixed_leave(void)
{
    int rc = tl_status;
    tl_on = 0;
    tl_weights = NULL;
    tl_status = VIT_OK;
    return rc;
}

int vit_mixed_on(void)
{
    return tl_on;
}

int vit_bf16_thread_mixed(int on)
{
    int was = tl_on, rc = tl_status;
    tl_status = VIT_OK;
#ifndef VIT_DOUBLE
    tl_on = on != 0;
#else
    (void)on;
#endif
    tl_weights = NULL;
    return rc != VIT_OK ? rc : was;
}

/* ---- the GEMMs ----------------------------------------------------------------- */

void vit_mgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
               vit_real alpha, const vit_real *A, int lda, const vit_real *B, int ldb,
               vit_real beta, vit_real *C, int ldc)
{
#ifndef VIT_DOUBLE
    if (tl_on) {
        int trans_a = ta == CblasTrans, trans_b = tb == CblasTrans;
        const vit_bf16_packed *p = lookup(tl_weights, trans_b, K, N, B, ldb);
        int rc = p ? vit_gemm_bf16_packed(trans_a, M, N, K, alpha, A, lda, p, beta, C, ldc)
                   : vit_gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                   ldc);
        if (rc != VIT_OK && tl_status == VIT_OK)
            tl_status = rc;
        return;
    }
#endif
    vit_pgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void vit_mgemm_a16(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                   const uint16_t *A, int lda, const vit_real *B, int ldb, vit_real beta,
                   vit_real *C, int ldc)
{
#ifndef VIT_DOUBLE
    int trans_a = ta == CblasTrans, trans_b = tb == CblasTrans;
    const vit_bf16_packed *p = lookup(tl_weights, trans_b, K, N, B, ldb);
    int rc = p ? vit_gemm_bf16_packed_a16(trans_a, M, N, K, A, lda, p, beta, C, ldc)
               : vit_gemm_bf16_a16(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
    if (rc != VIT_OK && tl_status == VIT_OK)
        tl_status = rc;
#else
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb;
    (void)beta, (void)C, (void)ldc;
#endif
}

void vit_mgemm_a16_b16(enum CBLAS_TRANSPOSE ta, int M, int N, int K, const uint16_t *A, int lda,
                       const uint16_t *B, int ldb, vit_real beta, vit_real *C, int ldc)
{
#ifndef VIT_DOUBLE
    int rc = vit_gemm_bf16_a16_b16(ta == CblasTrans, M, N, K, A, lda, B, ldb, beta, C, ldc);
    if (rc != VIT_OK && tl_status == VIT_OK)
        tl_status = rc;
#else
    (void)ta, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
    (void)C, (void)ldc;
#endif
}

/* C's rows = bias, one copy a row (beta 1 then adds the product onto it). */
static void bias_rows(int M, int N, const vit_real *bias, vit_real *C, int ldc)
{
    for (int r = 0; r < M; r++)
        memcpy(C + (size_t)r * ldc, bias, (size_t)N * sizeof *C);
}

void vit_mgemm_bias_a16(int M, int N, int K, const uint16_t *A, int lda, const vit_real *B,
                        int ldb, const vit_real *bias, vit_real *C, int ldc)
{
    if (bias)
        bias_rows(M, N, bias, C, ldc);
    vit_mgemm_a16(CblasNoTrans, CblasNoTrans, M, N, K, A, lda, B, ldb, bias ? 1 : 0, C, ldc);
}

void vit_mgemm_bias(int M, int N, int K, const vit_real *A, int lda, const vit_real *B, int ldb,
                    const vit_real *bias, vit_real *C, int ldc)
{
    if (!tl_on) {
        vit_pgemm_bias(M, N, K, A, lda, B, ldb, bias, C, ldc);
        return;
    }
    if (bias)
        bias_rows(M, N, bias, C, ldc);
    vit_mgemm(CblasNoTrans, CblasNoTrans, M, N, K, 1, A, lda, B, ldb, bias ? 1 : 0, C, ldc);
}

/* ---- a gradient's rounding and its column sums --------------------------- */

#ifndef VIT_DOUBLE
/* s[cols] += x's rows in order (cols adds per row, no sum reordered). */
FM_CLONES
static void add_rows(vit_real *restrict s, const vit_real *restrict x, int rows, int cols)
{
    for (int i = 0; i < rows; i++) {
        const vit_real *r = x + (size_t)i * cols;
        for (int j = 0; j < cols; j++)
            s[j] += r[j];
    }
}
#endif

void vit_mixed_round_colsums(uint16_t *dst, vit_real *acc, const vit_real *x, int rows, int cols)
{
#ifndef VIT_DOUBLE
    /* blocks of rows small enough to be read twice from L1 */
    enum { MAX_COLS = 512, BLOCK_FLOATS = 4096 };
    if (!acc || cols > MAX_COLS) {
        if (acc)
            vit_column_sums(acc, x, rows, cols);
        vit_bf16_from_floats(dst, x, (size_t)rows * cols);
        return;
    }
    vit_real s[MAX_COLS];
    memcpy(s, acc, (size_t)cols * sizeof *s);
    const int block = BLOCK_FLOATS / cols > 1 ? BLOCK_FLOATS / cols : 1;
    for (int r0 = 0; r0 < rows; r0 += block) {
        int nr = rows - r0 < block ? rows - r0 : block;
        const vit_real *xr = x + (size_t)r0 * cols;
        add_rows(s, xr, nr, cols);
        vit_bf16_from_floats(dst + (size_t)r0 * cols, xr, (size_t)nr * cols);
    }
    memcpy(acc, s, (size_t)cols * sizeof *s);
#else
    (void)dst, (void)acc, (void)x, (void)rows, (void)cols;
#endif
}
