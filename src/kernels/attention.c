/*
 * Scaled dot-product attention, softmax(Q K^T * s + B) V, and the multi-head
 * layer around it, forward and backward.  See include/vit/attention.h.
 *
 * Every head is addressed in place inside the [B, n, H*d] layouts: head h of
 * item b starts at column h*d of row b*n, and BLAS walks it with a leading
 * dimension of H*d, so no head is ever copied out.
 */
#include "vit/attention.h"

#include <limits.h>
#include <stdatomic.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "attention_internal.h"
#include "error.h"
#include "fastmath.h"
#include "mixed.h"
#include "pair_gemm.h"
#include "threads.h"

#ifdef VIT_DOUBLE
#define vit_exp exp
#else
#define vit_exp expf
#endif

/* ---- Argument checks ------------------------------------------------- */

int vit_mul3_size(size_t *out, size_t a, size_t b, size_t c)
{
    size_t ab;
    return vit_mul_size(&ab, a, b) && vit_mul_size(out, ab, c);
}

int vit_sdpa_validate(const char *fn, const vit_sdpa *a, vit_real *scale)
{
    int rc;
    if ((rc = vit_check_ptr(fn, "a", a)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "batch", a->batch)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "heads", a->heads)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "n_q", a->n_q)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "n_k", a->n_k)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "d_k", a->d_k)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "d_v", a->d_v)) != VIT_OK) return rc;
    if ((long long)a->heads * a->d_k > INT_MAX || (long long)a->heads * a->d_v > INT_MAX)
        return vit_fail(VIT_EINVAL, "%s: heads * d_k or heads * d_v exceeds INT_MAX", fn);
    if ((long long)a->batch * a->heads > INT_MAX)
        return vit_fail(VIT_EINVAL, "%s: batch * heads exceeds INT_MAX", fn);
    size_t s;
    if (!vit_mul3_size(&s, (size_t)a->batch * a->heads, a->n_q, a->n_k) ||
        !vit_mul3_size(&s, (size_t)a->batch * a->n_q, a->heads, a->d_v) ||
        !vit_mul3_size(&s, (size_t)a->batch * a->n_k, a->heads, a->d_k) ||
        !vit_mul3_size(&s, (size_t)a->batch * a->n_k, a->heads, a->d_v) ||
        !vit_mul3_size(&s, (size_t)a->batch * a->n_q, a->heads, a->d_k))
        return vit_fail(VIT_ENOMEM, "%s: buffer sizes overflow size_t", fn);
    const int ld[3] = {a->ld_q, a->ld_k, a->ld_v}, dense[3] = {a->heads * a->d_k,
        a->heads * a->d_k, a->heads * a->d_v}, rows[3] = {a->n_q, a->n_k, a->n_k};
    static const char *ld_name[3] = {"ld_q", "ld_k", "ld_v"};
    for (int t = 0; t < 3; t++) {
        if (ld[t] != 0 && ld[t] < dense[t])
            return vit_fail(VIT_EINVAL, "%s: %s (%d) is neither 0 nor at least the row width %d",
                            fn, ld_name[t], ld[t], dense[t]);
        if (!vit_mul3_size(&s, (size_t)a->batch, (size_t)rows[t], (size_t)ld[t]))
            return vit_fail(VIT_ENOMEM, "%s: buffer sizes overflow size_t", fn);
    }
    if (!isfinite(a->scale))
        return vit_fail(VIT_EINVAL, "%s: scale is not finite", fn);
    if (a->bias != NULL && a->bias_heads != 1 && a->bias_heads != a->heads)
        return vit_fail(VIT_EINVAL, "%s: bias_heads must be 1 or heads (%d), got %d",
                        fn, a->heads, a->bias_heads);
    if (a->head_scale) {
        if (a->scale != 0)
            return vit_fail(VIT_EINVAL, "%s: give scale or head_scale, not both", fn);
        for (int h = 0; h < a->heads; h++)
            if (!isfinite(a->head_scale[h]))
                return vit_fail(VIT_EINVAL, "%s: head_scale[%d] is not finite", fn, h);
    }
    *scale = a->scale != 0 ? a->scale : (vit_real)(1.0 / sqrt((double)a->d_k));
    return VIT_OK;
}

int vit_attn_check_qkv(const char *fn, const vit_real *q, const vit_real *k, const vit_real *v)
{
    int rc;
    if ((rc = vit_check_ptr(fn, "q", q)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "k", k)) != VIT_OK) return rc;
    return vit_check_ptr(fn, "v", v);
}

int vit_attn_check_forward(const char *fn, const vit_real *out, const vit_real *second,
                           const char *second_name, const vit_real *q, const vit_real *k,
                           const vit_real *v)
{
    int rc;
    if ((rc = vit_check_ptr(fn, "out", out)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, second_name, second)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_qkv(fn, q, k, v)) != VIT_OK) return rc;
    if (out == q || out == k || out == v || out == second)
        return vit_fail(VIT_EINVAL, "%s: out must not alias q, k, v or %s", fn, second_name);
    return VIT_OK;
}

int vit_attn_check_dbias(const char *fn, const vit_real *dbias, int bias_heads, int heads)
{
    if (dbias && bias_heads != 1 && bias_heads != heads)
        return vit_fail(VIT_EINVAL, "%s: dbias needs bias_heads 1 or heads (%d), got %d",
                        fn, heads, bias_heads);
    return VIT_OK;
}

/* ---- Masks inside the softmax ------------------------------------------ */

vit_row_mask vit_mask_row(const vit_sdpa *a, int b, int i)
{
    const vit_attn_mask *m = &a->mask;
    vit_row_mask r;
    r.allowed = NULL;
    if (m->allowed) {
        size_t item = m->allowed_per_item ? (size_t)b * a->n_q * a->n_k : 0;
        r.allowed = m->allowed + item + (size_t)i * a->n_k;
    }
    r.valid = m->key_valid ? m->key_valid + (size_t)b * a->n_k : NULL;
    r.last = (m->causal && i < a->n_k - 1) ? i : a->n_k - 1;
    return r;
}

/* 1 when x is neither infinite nor NaN: its exponent bits are not all
 * ones.  As bits rather than isfinite() so that a loop of it vectorises. */
static inline int finite_bits(vit_real x)
{
#ifdef VIT_DOUBLE
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
#endif
}

/* Rows s[rows, nk] (contiguous; finite, or -infinity where a mask forbids)
 * in place -> their softmax.  A forbidden score's weight is exactly 0 (its
 * exp is selected as 0: fastmath's would be a subnormal, and a ?: kept the
 * loop scalar), and a row with nothing allowed becomes all zeros rather
 * than 0/0.  In float32 the exp is fastmath.h's, which vectorises; each row
 * sums in double (also vectorised), so that its rounding does not grow
 * with nk or depend on the compiler's order of summation.  Each pass runs
 * over the whole block rather than row by row: a ViT row is short (17 keys
 * for digits: one AVX-512 vector and one lane), and the exp, the costly
 * pass, then runs in full vectors. */
FM_CLONES
static void softmax_block(vit_real *s, int rows, int nk)
{
    const size_t n = (size_t)rows * (size_t)nk;
    for (int i = 0; i < rows; i++) {
        vit_real *r = s + (size_t)i * nk, mx = r[0];
        /* (a max is exact in any order: the pragma lets it vectorise) */
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < nk; j++)
            mx = r[j] > mx ? r[j] : mx;
        if (mx == -INFINITY) /* nothing allowed: every exp below is 0 */
            mx = 0;
        for (int j = 0; j < nk; j++) r[j] -= mx;
    }
    for (size_t t = 0; t < n; t++)
#ifdef VIT_DOUBLE
        s[t] = exp(s[t]);
#else
        s[t] = fm_select(s[t] == -INFINITY, 0.0f, fm_exp_nonpos(s[t]));
#endif
    for (int i = 0; i < rows; i++) {
        vit_real *r = s + (size_t)i * nk;
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < nk; j++)
            sum += r[j];
        if (sum == 0) /* a fully masked row, already all zeros */
            continue;
        const vit_real inv = (vit_real)(1.0 / sum); /* sum >= 1: the max gives exp(0) */
        for (int j = 0; j < nk; j++) r[j] *= inv;
    }
}

/* s[n] += bias[n] (NULL: none), then the flat index of the first score
 * that is not finite, or -1.  Whole blocks at a time, so that both loops
 * vectorise however short the rows. */
FM_CLONES
static long add_bias_check(vit_real *s, const vit_real *bias, size_t n)
{
    if (bias)
        for (size_t t = 0; t < n; t++) s[t] += bias[t];
    int ok = 1;
    for (size_t t = 0; t < n; t++) ok &= finite_bits(s[t]);
    if (!ok)
        for (size_t t = 0; t < n; t++)
            if (!finite_bits(s[t]))
                return (long)t;
    return -1;
}

/* The windowed core's entries to the two above (src/kernels/attention_window.c):
 * plain functions, since a target_clones function would export its
 * resolver. */
void vit_attn_softmax_block(vit_real *s, int rows, int nk) { softmax_block(s, rows, nk); }

long vit_attn_add_bias_check(vit_real *s, const vit_real *bias, size_t n)
{
    return add_bias_check(s, bias, n);
}

/* In place: rows i0..i1-1 of the score block p [nq, nk] of item b ->
 * their masked softmax: the forbidden scores set to -infinity (a select per
 * kind of mask, so the loops vectorise), then softmax_block. */
static void softmax_masked(const vit_sdpa *a, int b, vit_real *p, int i0, int i1)
{
    const int nk = a->n_k;
    for (int i = i0; i < i1; i++) {
        vit_real *s = p + (size_t)i * nk;
        const vit_row_mask r = vit_mask_row(a, b, i);
        for (int j = r.last + 1; j < nk; j++) s[j] = -INFINITY;
        if (r.allowed)
            for (int j = 0; j < nk; j++) s[j] = r.allowed[j] ? s[j] : -INFINITY;
        if (r.valid)
            for (int j = 0; j < nk; j++) s[j] = r.valid[j] ? s[j] : -INFINITY;
    }
    softmax_block(p + (size_t)i0 * nk, i1 - i0, nk);
}

/* Pairs whose score block has at most this many entries, when there are at
 * least as many pairs as threads, run one pair per task across the threads
 * with single-threaded GEMMs (the backward keeps its dS block on the stack).
 * Bigger pairs run one after another, each GEMM split across the threads.
 * ViT-sized heads (17..65 tokens) are too small to split well, and there are
 * batch * heads of them; BLAS on a pair beat hand-written loops at every
 * ViT size measured (17, 50 and 65 tokens). */
#define PAIR_SCORES_MAX (128 * 128)

static int pairs_in_parallel(const vit_sdpa *a)
{
    return (size_t)a->n_q * (size_t)a->n_k <= PAIR_SCORES_MAX
        && a->batch * a->heads >= vit_threads();
}

/* How a call's pair products run: the direct kernels of
 * src/kernels/pair_gemm.c when they take its widths and each pair is one
 * task (so no GEMM would have split it across threads); else GEMMs, in
 * float32, or with bf16 inputs and float32 sums (vit_gemm_bf16) when mixed
 * precision was on for the thread that called the core (vit_mixed_on: the
 * worker threads of its parallel loops do not see that thread's setting,
 * hence the mode is read once at the entry), where the pairs are wide
 * enough for that to pay: head widths of at least PAIR_BF16_MIN_WIDTH and
 * at least as many keys.  Below that a bf16 call's conversions (op(A)
 * rounded, op(B) packed, per call) cost what its products save or more:
 * per pair, forward and backward, on one Zen 4 core (thread CPU time, so
 * the machine's load aside), bf16 against float32 took +11% / +7% at 50
 * tokens and width 32, +4% / +14% at 128 and 32, +3% / -1% at 50 and 64,
 * -8% / -1% at 65 and 64, -7% / -14% at 128 and 64, -21% / -19% at 197
 * and 64 (ViT-Ti).  The direct kernels (widths 16 and 32) stay float32.
 * The same mode for every pair of a call. */
#define PAIR_BF16_MIN_WIDTH 64
enum { PAIR_GEMM, PAIR_DIRECT, PAIR_BF16 };

typedef struct {
    int mode;
    atomic_int *err; /* the first bf16 GEMM error (VIT_ENOMEM for scratch) */
} pair_how;

static int pair_mode(const vit_sdpa *a)
{
    if (pairs_in_parallel(a) && vit_pair_direct_wide(a->d_k, a->d_v, a->n_k))
        return PAIR_DIRECT;
    const int wide = a->d_k >= PAIR_BF16_MIN_WIDTH && a->d_v >= PAIR_BF16_MIN_WIDTH
                  && a->n_k >= PAIR_BF16_MIN_WIDTH;
    return wide && vit_mixed_on() ? PAIR_BF16 : PAIR_GEMM;
}

#ifndef VIT_DOUBLE
static void pair_error(const pair_how *how, int rc)
{
    int none = VIT_OK;
    if (rc != VIT_OK)
        atomic_compare_exchange_strong(how->err, &none, rc);
}
#endif

/* A pair's two kinds of product, in how's mode:
 *   pair_nt    C[M, N] = alpha A[M, d] B[N, d]^T            (overwritten)
 *   pair_rows  C[M, d] = beta C + op(A) B[K, d], op(A) = A[M, K] or, with
 *              ta, A[K, M]^T */
static void pair_nt(const pair_how *how, int M, int N, int d, vit_real alpha, const vit_real *A,
                    int lda, const vit_real *B, int ldb, vit_real *C, int ldc)
{
    if (how->mode == PAIR_DIRECT)
        vit_pair_nt(M, N, d, alpha, A, lda, B, ldb, C, ldc);
#ifndef VIT_DOUBLE
    else if (how->mode == PAIR_BF16)
        pair_error(how, vit_gemm_bf16(0, 1, M, N, d, alpha, A, lda, B, ldb, 0, C, ldc));
#endif
    else
        vit_pgemm(CblasNoTrans, CblasTrans, M, N, d, alpha, A, lda, B, ldb, 0, C, ldc);
}

static void pair_rows(const pair_how *how, int ta, int M, int K, int d, const vit_real *A,
                      int lda, const vit_real *B, int ldb, vit_real beta, vit_real *C, int ldc)
{
    if (how->mode == PAIR_DIRECT)
        vit_pair_nn(ta, M, K, d, A, lda, B, ldb, beta, C, ldc);
#ifndef VIT_DOUBLE
    else if (how->mode == PAIR_BF16)
        pair_error(how, vit_gemm_bf16(ta, 0, M, d, K, 1, A, lda, B, ldb, beta, C, ldc));
#endif
    else
        vit_pgemm(ta ? CblasTrans : CblasNoTrans, CblasNoTrans, M, d, K, 1, A, lda, B, ldb,
                  beta, C, ldc);
}

/* A non-finite score: its (item, head, query, key), or item < 0 for none. */
typedef struct {
    int b, h, i, j;
} bad_score;

/* Bias, finiteness check and masked softmax of rows i0..i1-1 of the score
 * block p [nq, nk] of pair (b, h).  Returns 0, or 1 with *bad set. */
static int softmax_rows(const vit_sdpa *a, int b, int h, vit_real *p, int i0, int i1,
                        bad_score *bad)
{
    const int nq = a->n_q, nk = a->n_k;
    const vit_real *bias = NULL;
    if (a->bias)
        bias = a->bias + (a->bias_heads == 1 ? 0 : (size_t)h * nq * nk);
    vit_real *s0 = p + (size_t)i0 * nk;
    long t = add_bias_check(s0, bias ? bias + (size_t)i0 * nk : NULL, (size_t)(i1 - i0) * nk);
    if (t >= 0) {
        *bad = (bad_score){b, h, i0 + (int)(t / nk), (int)(t % nk)};
        return 1;
    }
    if (!a->mask.allowed && !a->mask.key_valid && !a->mask.causal) {
        softmax_block(s0, i1 - i0, nk);
        return 0;
    }
    softmax_masked(a, b, p, i0, i1);
    return 0;
}

/* Softmax rows of one pair split across threads; first_bad is the flat
 * index i*nk + j of the earliest non-finite score, ULLONG_MAX for none. */
typedef struct {
    const vit_sdpa *a;
    int b, h;
    vit_real *p;
    atomic_ullong first_bad;
} sm_job;

static void softmax_piece(void *ctx, size_t lo, size_t hi)
{
    sm_job *J = ctx;
    bad_score bad;
    if (softmax_rows(J->a, J->b, J->h, J->p, (int)lo, (int)hi, &bad))
        vit_atomic_min(&J->first_bad, (unsigned long long)bad.i * (unsigned long long)J->a->n_k
                                  + (unsigned long long)bad.j);
}

/* One pair: S = s Q K^T and O = P V as GEMMs, split across the threads with
 * the softmax rows unless called from a pair-parallel task. */
static int head_forward(const vit_sdpa *a, const pair_how *how, vit_real scale, int b, int h,
                        vit_real *out, vit_real *probs, const vit_real *q, const vit_real *k,
                        const vit_real *v, bad_score *bad)
{
    const int H = a->heads, nq = a->n_q, nk = a->n_k, dk = a->d_k, dv = a->d_v;
    const int ldq = vit_sdpa_ld_q(a), ldk = vit_sdpa_ld_k(a), ldv = vit_sdpa_ld_v(a), ldo = H * dv;
    const vit_real *qbh = q + (size_t)b * nq * ldq + (size_t)h * dk;
    const vit_real *kbh = k + (size_t)b * nk * ldk + (size_t)h * dk;
    const vit_real *vbh = v + (size_t)b * nk * ldv + (size_t)h * dv;
    vit_real *obh = out + (size_t)b * nq * ldo + (size_t)h * dv;
    vit_real *p = probs + ((size_t)b * H + h) * nq * nk;

    /* S[nq, nk] = s * Q_bh[nq, dk] K_bh[nk, dk]^T, the scale (fixed or
     * learnable) folded into the product's alpha */
    pair_nt(how, nq, nk, dk, vit_sdpa_scale_of(a, scale, h), qbh, ldq, kbh, ldk, p, nk);
    sm_job J = {a, b, h, p, ULLONG_MAX};
    vit_parallel(vit_threads_for(20.0 * nq * (double)nk), (size_t)nq, softmax_piece, &J);
    unsigned long long f = atomic_load(&J.first_bad);
    if (f != ULLONG_MAX) {
        *bad = (bad_score){b, h, (int)(f / (unsigned long long)nk), (int)(f % (unsigned long long)nk)};
        return 1;
    }
    /* O_bh[nq, dv] = P[nq, nk] V_bh[nk, dv] */
    pair_rows(how, 0, nq, nk, dv, p, nk, vbh, ldv, 0, obh, ldo);
    return 0;
}

/* Asks the caches for the head slices of pair x (item x / H, head x % H)
 * of rows [n, width] of t, ld apart (NULL: none): a pair's rows of q, k, v
 * (and dout) are a 64- or 128-byte piece of each of n rows of matrices
 * larger than L2, so the pair-parallel loops ask for the next pair's
 * while this one runs (the first loads of each pair were a third of the
 * scores' copy of K on Zen 3's digits step). */
static void prefetch_head(const vit_real *t, int x, int H, int n, int width, int ld)
{
    if (!t)
        return;
    const char *p = (const char *)(t + (size_t)(x / H) * n * ld + (size_t)(x % H) * width);
    const size_t bytes = (size_t)width * sizeof *t, row = (size_t)ld * sizeof *t;
    for (int i = 0; i < n; i++, p += row)
        for (size_t c = 0; c < bytes; c += 64)
            __builtin_prefetch(p + c);
}

/* Pairs lo..hi-1 of the pair-parallel forward; first_bad is the earliest
 * pair with a non-finite score. */
typedef struct {
    const vit_sdpa *a;
    const pair_how *how;
    vit_real scale, *out, *probs;
    const vit_real *q, *k, *v;
    atomic_ullong first_bad;
} fwd_job;

static void forward_pairs(void *ctx, size_t lo, size_t hi)
{
    fwd_job *J = ctx;
    const int H = J->a->heads;
    bad_score bad;
    const vit_sdpa *a = J->a;
    for (size_t x = lo; x < hi; x++) {
        if (x + 1 < hi) {
            prefetch_head(J->q, (int)x + 1, H, a->n_q, a->d_k, vit_sdpa_ld_q(a));
            prefetch_head(J->k, (int)x + 1, H, a->n_k, a->d_k, vit_sdpa_ld_k(a));
            prefetch_head(J->v, (int)x + 1, H, a->n_k, a->d_v, vit_sdpa_ld_v(a));
        }
        if (head_forward(J->a, J->how, J->scale, (int)(x / H), (int)(x % H), J->out, J->probs,
                         J->q, J->k, J->v, &bad)) {
            vit_atomic_min(&J->first_bad, x);
            return;
        }
    }
}

/* q [B, n_q, H*d_k], k [B, n_k, H*d_k], v [B, n_k, H*d_v]
 *   -> probs [B, H, n_q, n_k], out [B, n_q, H*d_v]
 * Per (b, h): S = s * Q_bh K_bh^T + bias_h, P = softmax(mask(S)), O = P V_bh.
 * Every score, masked or not, must be finite: a NaN or infinity from the
 * inputs or the bias is reported as VIT_ENUM rather than silently hidden by
 * a mask. */
int vit_sdpa_forward(const vit_sdpa *a, vit_real *out, vit_real *probs,
                     const vit_real *q, const vit_real *k, const vit_real *v)
{
    static const char fn[] = "vit_sdpa_forward";
    vit_real scale = 0;
    int rc;
    if ((rc = vit_sdpa_validate(fn, a, &scale)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_forward(fn, out, probs, "probs", q, k, v)) != VIT_OK) return rc;

    const int B = a->batch, H = a->heads;
    const int pairs = B * H;
    bad_score bad = {-1, 0, 0, 0};
    atomic_int err = VIT_OK;
    const pair_how how = {pair_mode(a), &err};
    if (pairs_in_parallel(a)) {
        /* Pairs split statically; the earliest failing pair is found again
         * on this thread for its message. */
        fwd_job J = {a, &how, scale, out, probs, q, k, v, ULLONG_MAX};
        vit_parallel(vit_threads_for(4.0 * pairs * a->n_q * a->n_k * (a->d_k + a->d_v)),
                     (size_t)pairs, forward_pairs, &J);
        unsigned long long f = atomic_load(&J.first_bad);
        if (f != ULLONG_MAX)
            head_forward(a, &how, scale, (int)(f / (unsigned)H), (int)(f % (unsigned)H), out,
                         probs, q, k, v, &bad);
    } else {
        for (int x = 0; x < pairs && bad.b < 0; x++)
            head_forward(a, &how, scale, x / H, x % H, out, probs, q, k, v, &bad);
    }
    if (bad.b >= 0)
        return vit_fail(VIT_ENUM, "%s: non-finite score at item %d, head %d, query %d, key %d "
                        "(check q, k, bias)", fn, bad.b, bad.h, bad.i, bad.j);
    if ((rc = atomic_load(&err)) != VIT_OK)
        return vit_fail(rc, "%s: a bf16 product could not get its scratch memory", fn);
    return VIT_OK;
}

size_t vit_sdpa_work_size(const vit_sdpa *a)
{
    if (!a || a->n_q <= 0 || a->n_k <= 0) return 0;
    return (size_t)a->n_q * (size_t)a->n_k;
}

/* dS = P .* (dP - rowsum(dP .* P)) for rows i0..i1-1, in place over dP. */
FM_CLONES
static void softmax_grad_rows(const vit_real *p, vit_real *ds, int nk, int i0, int i1)
{
    for (int i = i0; i < i1; i++) {
        const vit_real *pi = p + (size_t)i * nk;
        vit_real *di = ds + (size_t)i * nk;
        double dot = 0.0;
        /* in double, vectorised (the order of a double sum of nk float
         * products moves the float result by at most its last bit) */
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < nk; j++) dot += (double)di[j] * pi[j];
        for (int j = 0; j < nk; j++) di[j] = pi[j] * (di[j] - (vit_real)dot);
    }
}

void vit_attn_softmax_grad_rows(const vit_real *p, vit_real *ds, int nk, int i0, int i1)
{
    softmax_grad_rows(p, ds, nk, i0, i1);
}

typedef struct {
    const vit_real *p;
    vit_real *ds;
    int nk;
} sg_job;

static void softmax_grad_piece(void *ctx, size_t lo, size_t hi)
{
    const sg_job *J = ctx;
    softmax_grad_rows(J->p, J->ds, J->nk, (int)lo, (int)hi);
}

/* The scores Q K^T are not kept (the forward stores P), so they are made
 * again a block of rows at a time in a buffer on the stack: a GEMM per
 * block rather than a dot product per score, which with lsa's learnt scale
 * was a third of a Fashion-MNIST training step.  Products in vit_real,
 * their weighted sum in double. */
#define SCALE_GRAD_BLOCK 2048

FM_CLONES
static double weighted_sum(const vit_real *ds, int ldd, const vit_real *s, int rows, int cols)
{
    double sum = 0.0;
    for (int i = 0; i < rows; i++) {
        const vit_real *di = ds + (size_t)i * ldd, *si = s + (size_t)i * cols;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < cols; j++) sum += (double)di[j] * si[j];
    }
    return sum;
}

double vit_attn_scale_grad(int direct, const vit_real *ds, const vit_real *q, const vit_real *k,
                           int ni, int nj, int d, int ldq, int ldk)
{
    vit_real s[SCALE_GRAD_BLOCK];
    double sum = 0.0;
    const int cols = nj < SCALE_GRAD_BLOCK ? nj : SCALE_GRAD_BLOCK;
    for (int j0 = 0; j0 < nj; j0 += cols) {
        const int nc = nj - j0 < cols ? nj - j0 : cols, rows = SCALE_GRAD_BLOCK / nc;
        for (int i0 = 0; i0 < ni; i0 += rows) {
            const int nr = ni - i0 < rows ? ni - i0 : rows;
            /* s[nr, nc] = Q_i0 K_j0^T, one thread (pairs may be tasks) */
            if (direct)
                vit_pair_nt(nr, nc, d, 1, q + (size_t)i0 * ldq, ldq, k + (size_t)j0 * ldk, ldk,
                            s, nc);
            else
                vit_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, d, 1,
                         q + (size_t)i0 * ldq, ldq, k + (size_t)j0 * ldk, ldk, 0, s, nc);
            sum += weighted_sum(ds + (size_t)i0 * nj + j0, nj, s, nr, nc);
        }
    }
    return sum;
}

/* Backward of one pair by GEMMs, split across the threads with the softmax
 * rows unless called from a pair-parallel task; work holds dP then dS
 * [nq, nk].  pair_ds (NULL: not wanted) receives the pair's share of the
 * scale's gradient, sum dS .* Q K^T. */
static void head_backward(const vit_sdpa *a, const pair_how *how, vit_real scale, vit_real beta,
                          int b, int h, vit_real *dq, double *pair_ds, vit_real *dk, vit_real *dv,
                          vit_real *dbias, const vit_real *dout, const vit_real *probs,
                          const vit_real *q, const vit_real *k, const vit_real *v, vit_real *work)
{
    const int H = a->heads, nq = a->n_q, nk = a->n_k, dkh = a->d_k, dvh = a->d_v;
    const int ldq = vit_sdpa_ld_q(a), ldk = vit_sdpa_ld_k(a), ldv = vit_sdpa_ld_v(a), ldo = H * dvh;
    size_t qo = (size_t)b * nq * ldq + (size_t)h * dkh;
    size_t ko = (size_t)b * nk * ldk + (size_t)h * dkh;
    size_t vo = (size_t)b * nk * ldv + (size_t)h * dvh;
    size_t oo = (size_t)b * nq * ldo + (size_t)h * dvh;
    const vit_real *p = probs + ((size_t)b * H + h) * nq * nk;

    /* dV_bh[nk, dv] += P[nq, nk]^T dO_bh[nq, dv] */
    if (dv)
        pair_rows(how, 1, nk, nq, dvh, p, nk, dout + oo, ldo, beta, dv + vo, ldv);
    if (!(dq || dk || dbias || pair_ds)) return;
    scale = vit_sdpa_scale_of(a, scale, h);
    /* dP[nq, nk] = dO_bh[nq, dv] V_bh[nk, dv]^T */
    vit_real *ds = work;
    pair_nt(how, nq, nk, dvh, 1, dout + oo, ldo, v + vo, ldv, ds, nk);
    sg_job J = {p, ds, nk};
    vit_parallel(vit_threads_for(4.0 * nq * (double)nk), (size_t)nq, softmax_grad_piece, &J);
    if (dbias) {
        vit_real *db = dbias + (a->bias_heads == 1 ? 0 : (size_t)h * nq * nk);
        vit_axpy(nq * nk, 1, ds, 1, db, 1);
    }
    if (pair_ds)
        *pair_ds = vit_attn_scale_grad(how->mode == PAIR_DIRECT, ds, q + qo, k + ko, nq, nk, dkh, ldq, ldk);
    if (!(dq || dk)) return;
    /* s dS in place, once: with alpha = s each GEMM below would make
     * libxsmm read a scaled copy of its first operand (src/kernels/gemm.c). */
    if (scale != 1)
        for (size_t i = 0; i < (size_t)nq * nk; i++) ds[i] *= scale;
    /* dQ_bh[nq, dk] += s dS[nq, nk] K_bh[nk, dk] */
    if (dq)
        pair_rows(how, 0, nq, nk, dkh, ds, nk, k + ko, ldk, beta, dq + qo, ldq);
    /* dK_bh[nk, dk] += s dS[nq, nk]^T Q_bh[nq, dk] */
    if (dk)
        pair_rows(how, 1, nk, nq, dkh, ds, nk, q + qo, ldq, beta, dk + ko, ldk);
}

typedef struct {
    const vit_sdpa *a;
    const pair_how *how;
    vit_real scale, beta, *dq, *dk, *dv, *dbias;
    const vit_real *dout, *probs, *q, *k, *v;
    double *pair_ds; /* [B*H] or NULL */
} bwd_job;

static void backward_pairs(void *ctx, size_t lo, size_t hi)
{
    const bwd_job *J = ctx;
    const int H = J->a->heads;
    const vit_sdpa *a = J->a;
    vit_real ds[PAIR_SCORES_MAX];
    for (size_t x = lo; x < hi; x++) {
        if (x + 1 < hi) {
            prefetch_head(J->dout, (int)x + 1, H, a->n_q, a->d_v, H * a->d_v);
            prefetch_head(J->q, (int)x + 1, H, a->n_q, a->d_k, vit_sdpa_ld_q(a));
            prefetch_head(J->k, (int)x + 1, H, a->n_k, a->d_k, vit_sdpa_ld_k(a));
            prefetch_head(J->v, (int)x + 1, H, a->n_k, a->d_v, vit_sdpa_ld_v(a));
        }
        head_backward(J->a, J->how, J->scale, J->beta, (int)(x / H), (int)(x % H), J->dq,
                      J->pair_ds ? J->pair_ds + x : NULL, J->dk, J->dv, J->dbias, J->dout,
                      J->probs, J->q, J->k, J->v, ds);
    }
}

/* dout [B, n_q, H*d_v] -> dq, dk, dv (layouts of q, k, v), dbias
 * [bias_heads, n_q, n_k], dbias accumulated; dq, dk, dv accumulated with
 * beta 1 (vit_sdpa_backward's contract) or overwritten with beta 0, which
 * spares the multi-head layer zeroing them first: every element is written
 * by exactly one GEMM.  Per (b, h):
 *   dV_bh += P^T dO_bh
 *   dP     = dO_bh V_bh^T
 *   dS     = P .* (dP - rowsum(dP .* P))        (O(n_k) per row)
 *   dbias += dS,  dQ_bh += s dS K_bh,  dK_bh += s dS^T Q_bh
 *   dscale += sum dS .* Q_bh K_bh^T   (per pair, then summed in pair order)
 * Forbidden weights are 0, so their dS is 0 and masks need no second look.
 * Pairs write disjoint columns of dq, dk, dv, so small pairs run one pair
 * per task; dbias is shared by the batch, so with it they run in order. */
static int sdpa_backward(const vit_sdpa *a, vit_real beta, vit_real *dq, vit_real *dk,
                         vit_real *dv, vit_real *dbias, vit_real *dscale, const vit_real *dout,
                         const vit_real *probs, const vit_real *q, const vit_real *k,
                         const vit_real *v, vit_real *work)
{
    static const char fn[] = "vit_sdpa_backward";
    vit_real scale = 0;
    int rc;
    if ((rc = vit_sdpa_validate(fn, a, &scale)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "dout", dout)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "probs", probs)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_qkv(fn, q, k, v)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_dbias(fn, dbias, a->bias_heads, a->heads)) != VIT_OK) return rc;

    const int H = a->heads, pairs = a->batch * H;
    atomic_int err = VIT_OK;
    const pair_how how = {pair_mode(a), &err};
    double *pair_ds = NULL;
    if (dscale && !(pair_ds = malloc((size_t)pairs * sizeof *pair_ds)))
        return vit_fail(VIT_ENOMEM, "%s: cannot allocate %d sums for dscale", fn, pairs);
    if (pairs_in_parallel(a)) {
        int nt = dbias ? 1 : vit_threads_for(8.0 * pairs * a->n_q * a->n_k * (a->d_k + a->d_v));
        bwd_job J = {a, &how, scale, beta, dq, dk, dv, dbias, dout, probs, q, k, v, pair_ds};
        vit_parallel(nt, (size_t)pairs, backward_pairs, &J);
    } else {
        vit_real *owned = NULL;
        if ((dq || dk || dbias || dscale) && !work) {
            owned = malloc(vit_sdpa_work_size(a) * sizeof *owned);
            if (!owned) {
                free(pair_ds);
                return vit_fail(VIT_ENOMEM, "%s: cannot allocate %zu reals of work", fn,
                                vit_sdpa_work_size(a));
            }
            work = owned;
        }
        for (int x = 0; x < pairs; x++)
            head_backward(a, &how, scale, beta, x / H, x % H, dq, pair_ds ? pair_ds + x : NULL, dk,
                          dv, dbias, dout, probs, q, k, v, work);
        free(owned);
    }
    vit_attn_add_scale_grads(a, dscale, pair_ds, 1);
    free(pair_ds);
    if ((rc = atomic_load(&err)) != VIT_OK)
        return vit_fail(rc, "%s: a bf16 product could not get its scratch memory", fn);
    return VIT_OK;
}

void vit_attn_add_scale_grads(const vit_sdpa *a, vit_real *dscale, const double *parts,
                              int per_pair)
{
    if (!dscale) return;
    const int H = a->heads;
    for (int h = 0; h < (a->head_scale ? H : 1); h++) {
        double sum = 0.0; /* items (and the heads sharing one scale) in order */
        for (int b = 0; b < a->batch; b++)
            for (int hh = a->head_scale ? h : 0; hh < (a->head_scale ? h + 1 : H); hh++)
                for (int t = 0; t < per_pair; t++)
                    sum += parts[((size_t)b * H + hh) * per_pair + t];
        dscale[h] += (vit_real)sum;
    }
}

int vit_sdpa_backward(const vit_sdpa *a, vit_real *dq, vit_real *dk, vit_real *dv,
                      vit_real *dbias, const vit_real *dout, const vit_real *probs,
                      const vit_real *q, const vit_real *k, const vit_real *v,
                      vit_real *work)
{
    return sdpa_backward(a, 1, dq, dk, dv, dbias, NULL, dout, probs, q, k, v, work);
}

int vit_sdpa_backward_scale(const vit_sdpa *a, vit_real *dq, vit_real *dk, vit_real *dv,
                            vit_real *dbias, vit_real *dscale, const vit_real *dout,
                            const vit_real *probs, const vit_real *q, const vit_real *k,
                            const vit_real *v, vit_real *work)
{
    return sdpa_backward(a, 1, dq, dk, dv, dbias, dscale, dout, probs, q, k, v, work);
}

/* ---- Multi-head layer ---------------------------------------------------- */

static int mha_dkv(const vit_mha *m) { return m->d_kv ? m->d_kv : m->d_model; }

static int mha_check_fn(const char *fn, const vit_mha *m)
{
    int rc;
    if ((rc = vit_check_ptr(fn, "m", m)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "batch", m->batch)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "n_q", m->n_q)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "n_k", m->n_k)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "d_model", m->d_model)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "heads", m->heads)) != VIT_OK) return rc;
    if (m->d_kv != 0 && (rc = vit_check_dim(fn, "d_kv", m->d_kv)) != VIT_OK) return rc;
    if (m->d_model % m->heads != 0)
        return vit_fail(VIT_EINVAL, "%s: heads (%d) does not divide d_model (%d)",
                        fn, m->heads, m->d_model);
    if (!isfinite(m->scale))
        return vit_fail(VIT_EINVAL, "%s: scale is not finite", fn);
    if (m->learn_scale && m->scale != 0)
        return vit_fail(VIT_EINVAL, "%s: scale must be 0 with learn_scale (tau in the "
                        "parameters is the scale)", fn);
    if (m->bias != NULL && m->bias_heads != 1 && m->bias_heads != m->heads)
        return vit_fail(VIT_EINVAL, "%s: bias_heads must be 1 or heads (%d), got %d",
                        fn, m->heads, m->bias_heads);
    /* The projections run as one GEMM over all B*n rows, whose count BLAS
     * takes as int; the cache must be addressable. */
    if ((long long)m->batch * m->n_q > INT_MAX || (long long)m->batch * m->n_k > INT_MAX)
        return vit_fail(VIT_EINVAL, "%s: batch * n_q or batch * n_k exceeds INT_MAX", fn);
    size_t s;
    if (!vit_mul3_size(&s, (size_t)m->batch * m->heads, m->n_q, m->n_k) ||
        !vit_mul3_size(&s, (size_t)m->batch, (size_t)m->n_q + m->n_k, m->d_model) ||
        !vit_mul3_size(&s, 2, (size_t)m->d_model, (size_t)m->d_model + mha_dkv(m)))
        return vit_fail(VIT_ENOMEM, "%s: buffer sizes overflow size_t", fn);
    return VIT_OK;
}

int vit_mha_check(const vit_mha *m) { return mha_check_fn("vit_mha", m); }

size_t vit_mha_param_count(const vit_mha *m)
{
    if (mha_check_fn("vit_mha_param_count", m) != VIT_OK) return 0;
    size_t d = (size_t)m->d_model, dkv = (size_t)mha_dkv(m);
    return 2 * d * d + 2 * dkv * d + (m->has_bias ? 4 * d : 0)
         + (m->learn_scale ? (size_t)m->heads : 0);
}

/* Whether both inputs have width d_model, so that the input projections are
 * one [d, 3d] matrix W_QKV = [W_Q | W_K | W_V]. */
static int mha_joint(const vit_mha *m) { return mha_dkv(m) == m->d_model; }

/* Layout: W_QKV [d, 3d] (d_kv = d) or W_Q [d, d] | W_KV [d_kv, 2d], then
 *         W_O [d, d] | b_Q [d] | b_K [d] | b_V [d] | b_O [d] | tau [H]. */
static void views_of(const vit_mha *m, vit_real *flat, vit_mha_views *w)
{
    size_t d = (size_t)m->d_model, dkv = (size_t)mha_dkv(m);
    w->w_q_cols = flat;
    if (mha_joint(m)) {
        w->row_stride_q = w->row_stride_kv = 3 * m->d_model;
        w->w_k_cols = flat + d;
    } else {
        w->row_stride_q = m->d_model;
        w->row_stride_kv = 2 * m->d_model;
        w->w_k_cols = flat + d * d;
    }
    w->w_v_cols = w->w_k_cols + d;
    w->w_o = flat + 2 * d * d + 2 * dkv * d - d * d;
    if (m->has_bias) {
        w->b_q = w->w_o + d * d;
        w->b_k = w->b_q + d;
        w->b_v = w->b_k + d;
        w->b_o = w->b_v + d;
    } else {
        w->b_q = w->b_k = w->b_v = w->b_o = NULL;
    }
    w->tau = m->learn_scale ? w->w_o + d * d + (m->has_bias ? 4 * d : 0) : NULL;
}

int vit_mha_views_of(const vit_mha *m, vit_real *flat, vit_mha_views *views)
{
    static const char fn[] = "vit_mha_views_of";
    int rc;
    if ((rc = mha_check_fn(fn, m)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "flat", flat)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "views", views)) != VIT_OK) return rc;
    views_of(m, flat, views);
    return VIT_OK;
}

/* Whether a call projects Q, K and V in one GEMM: self-attention (one input
 * buffer, so n_q = n_k) with the joint W_QKV.  The backward decides the same
 * from the same pointers, so it reads the cache as the forward wrote it. */
static int mha_fused(const vit_mha *m, const vit_real *x_q, const vit_real *x_kv)
{
    return x_q == x_kv && m->n_q == m->n_k && mha_joint(m);
}

/* Cache layout: the projections, then ctx [B,n_q,d] and probs
 * [B,H,n_q,n_k] (or, when the layer is long enough for the memory-efficient
 * path (vit_sdpa_use_tiled), only the rows' log-sum-exp [B,H,n_q] in place
 * of probs).  The projections are QKV [B*n, 3d] (Q, K, V side by side in
 * each row, as the fused GEMM writes them) for a fused call, else Q [B*n_q,
 * d] | KV [B*n_k, 2d]; either way the same size, and the work of the
 * backward holds their gradients laid out alike. */
typedef struct {
    vit_real *q, *k, *v, *ctx, *probs;
    int ld_q, ld_kv;
} mha_cache;

static mha_cache cache_of(const vit_mha *m, vit_real *cache, int fused)
{
    size_t d = (size_t)m->d_model;
    size_t nq = (size_t)m->batch * m->n_q, nk = (size_t)m->batch * m->n_k;
    mha_cache c;
    c.q = cache;
    if (fused) {
        c.ld_q = c.ld_kv = 3 * m->d_model;
        c.k = c.q + d;
    } else {
        c.ld_q = m->d_model;
        c.ld_kv = 2 * m->d_model;
        c.k = c.q + nq * d;
    }
    c.v = c.k + d;
    c.ctx = cache + nq * d + 2 * nk * d;
    c.probs = c.ctx + nq * d;
    return c;
}

static vit_sdpa mha_core(const vit_mha *m);

/* Whether this layer runs the tiled attention core (decided the same way in
 * the forward, the backward and the size queries). */
static int mha_tiled(const vit_mha *m)
{
    vit_sdpa a = mha_core(m);
    return vit_sdpa_use_tiled(&a);
}

size_t vit_mha_cache_size(const vit_mha *m)
{
    if (mha_check_fn("vit_mha_cache_size", m) != VIT_OK) return 0;
    size_t d = (size_t)m->d_model;
    size_t nq = (size_t)m->batch * m->n_q, nk = (size_t)m->batch * m->n_k;
    size_t maps = (size_t)m->batch * m->heads * m->n_q * (mha_tiled(m) ? 1 : (size_t)m->n_k);
    return 2 * nq * d + 2 * nk * d + maps;
}

vit_real *vit_mha_probs(const vit_mha *m, vit_real *cache)
{
    if (mha_check_fn("vit_mha_probs", m) != VIT_OK) return NULL;
    if (vit_check_ptr("vit_mha_probs", "cache", cache) != VIT_OK) return NULL;
    if (mha_tiled(m)) {
        vit_fail(VIT_EINVAL, "vit_mha_probs: a layer of %d x %d tokens runs the tiled path, "
                 "which keeps no attention maps", m->n_q, m->n_k);
        return NULL;
    }
    return cache_of(m, cache, 0).probs; /* the same place either way */
}

/* The attention core of a layer: H heads of width d_model / H, reading the
 * projections where cache c holds them. */
static vit_sdpa mha_core_of(const vit_mha *m, const mha_cache *c)
{
    vit_sdpa a;
    a.batch = m->batch;
    a.heads = m->heads;
    a.n_q = m->n_q;
    a.n_k = m->n_k;
    a.d_k = a.d_v = m->d_model / m->heads;
    a.scale = m->scale;
    a.mask = m->mask;
    a.bias = m->bias;
    a.bias_heads = m->bias_heads;
    a.head_scale = NULL; /* tau lives in the parameters: set by forward and backward */
    a.ld_q = c ? c->ld_q : 0;
    a.ld_k = a.ld_v = c ? c->ld_kv : 0;
    return a;
}

static vit_sdpa mha_core(const vit_mha *m) { return mha_core_of(m, NULL); }

/* y[rows, out] = x[rows, in] W[in, out] + b[out] (b may be NULL), W with row
 * stride ldw (a column block of a wider matrix).  The bias is written first
 * and the GEMM accumulates onto it. */
static void dense_forward(vit_real *y, const vit_real *x, const vit_real *w, int ldw,
                          const vit_real *b, int rows, int in, int out)
{
    vit_mgemm_bias(rows, out, in, x, in, w, ldw, b, y, out);
}

/* Given dy[rows, out]: dx += dy W^T, dW += x^T dy, db += column sums of dy;
 * each skipped when NULL; W and dW with row stride ldw. */
static void dense_backward(vit_real *dx, vit_real *dw, vit_real *db, const vit_real *dy,
                           const vit_real *x, const vit_real *w, int ldw, int rows, int in,
                           int out)
{
    if (dx)
        vit_mgemm(CblasNoTrans, CblasTrans, rows, in, out, 1, dy, out, w, ldw, 1, dx, in);
    if (dw)
        vit_mgemm(CblasTrans, CblasNoTrans, in, out, rows, 1, x, in, dy, out, 1, dw, ldw);
    if (db)
        vit_column_sums(db, dy, rows, out);
}

/* x_q [B, n_q, d], x_kv [B, n_k, d_kv] -> y [B, n_q, d], cache:
 *   self-attention: [Q | K | V] = x W_QKV + [b_Q | b_K | b_V]  (one GEMM)
 *   otherwise:      Q = x_q W_Q + b_Q, [K | V] = x_kv W_KV + [b_K | b_V]
 *   ctx = attention(Q, K, V) with H heads of width d / H, reading the
 *         projections in place (row strides 3d, or d and 2d)
 *   y = ctx W_O + b_O */
int vit_mha_forward(const vit_mha *m, const vit_real *params, vit_real *y,
                    const vit_real *x_q, const vit_real *x_kv, vit_real *cache)
{
    static const char fn[] = "vit_mha_forward";
    int rc;
    if ((rc = mha_check_fn(fn, m)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "params", params)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "y", y)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "x_q", x_q)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "x_kv", x_kv)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "cache", cache)) != VIT_OK) return rc;
    if (y == x_q || y == x_kv)
        return vit_fail(VIT_EINVAL, "%s: y must not alias x_q or x_kv", fn);

    const int d = m->d_model, dkv = mha_dkv(m);
    const int rq = m->batch * m->n_q, rk = m->batch * m->n_k;
    vit_mha_views w;
    views_of(m, (vit_real *)params, &w); /* read only here */
    const int fused = mha_fused(m, x_q, x_kv);
    mha_cache c = cache_of(m, cache, fused);

    if (fused) {
        dense_forward(c.q, x_q, w.w_q_cols, w.row_stride_q, w.b_q, rq, d, 3 * d);
    } else {
        dense_forward(c.q, x_q, w.w_q_cols, w.row_stride_q, w.b_q, rq, d, d);
        dense_forward(c.k, x_kv, w.w_k_cols, w.row_stride_kv, w.b_k, rk, dkv, 2 * d);
    }
    vit_sdpa a = mha_core_of(m, &c);
    a.head_scale = w.tau;
    rc = vit_sdpa_use_tiled(&a) ? vit_sdpa_tiled_forward(&a, c.ctx, c.probs, c.q, c.k, c.v, NULL)
                                : vit_sdpa_forward(&a, c.ctx, c.probs, c.q, c.k, c.v);
    if (rc != VIT_OK) return rc;
    dense_forward(y, c.ctx, w.w_o, d, w.b_o, rq, d, d);
    return VIT_OK;
}

/* dctx [B,n_q,d] | the projections' gradients, laid out as the cache holds
 * the projections | sdpa work. */
size_t vit_mha_work_size(const vit_mha *m)
{
    if (mha_check_fn("vit_mha_work_size", m) != VIT_OK) return 0;
    size_t d = (size_t)m->d_model;
    size_t nq = (size_t)m->batch * m->n_q, nk = (size_t)m->batch * m->n_k;
    return 2 * nq * d + 2 * nk * d + (mha_tiled(m) ? 0 : (size_t)m->n_q * m->n_k);
}

/* dy [B, n_q, d] -> grads (flat, like params), dx_q, dx_kv, dbias, all
 * accumulated, in reverse order of the forward:
 *   dW_O += ctx^T dy, db_O += sum dy, dctx = dy W_O^T
 *   dQ, dK, dV from the attention core, written in place beside each other
 *   self-attention: dW_QKV += x^T dQKV, db_QKV += sum dQKV and
 *                   dx += dQKV W_QKV^T (one GEMM each, one pass over x)
 *   otherwise Q from x_q and [K | V] from x_kv likewise, two GEMMs each */
int vit_mha_backward(const vit_mha *m, const vit_real *params, vit_real *grads,
                     vit_real *dx_q, vit_real *dx_kv, vit_real *dbias,
                     const vit_real *dy, const vit_real *x_q, const vit_real *x_kv,
                     const vit_real *cache, vit_real *work)
{
    static const char fn[] = "vit_mha_backward";
    int rc;
    if ((rc = mha_check_fn(fn, m)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "params", params)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "dy", dy)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "x_q", x_q)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "x_kv", x_kv)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "cache", cache)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_dbias(fn, dbias, m->bias_heads, m->heads)) != VIT_OK) return rc;

    const int d = m->d_model, dkv = mha_dkv(m);
    const int rq = m->batch * m->n_q, rk = m->batch * m->n_k;
    vit_mha_views w, g;
    views_of(m, (vit_real *)params, &w);
    if (grads) views_of(m, grads, &g);
    else memset(&g, 0, sizeof g);
    const int fused = mha_fused(m, x_q, x_kv);
    mha_cache c = cache_of(m, (vit_real *)cache, fused); /* read only here */

    /* Output projection. */
    dense_backward(NULL, g.w_o, g.b_o, dy, c.ctx, w.w_o, d, rq, d, d);
    const int need_q = grads || dx_q, need_kv = grads || dx_kv;
    if (!need_q && !need_kv && !dbias) return VIT_OK;

    vit_real *owned = NULL;
    if (!work) {
        size_t n = vit_mha_work_size(m);
        owned = malloc(n * sizeof *owned);
        if (!owned)
            return vit_fail(VIT_ENOMEM, "%s: cannot allocate %zu reals of work", fn, n);
        work = owned;
    }
    vit_real *dctx = work;
    mha_cache dc = cache_of(m, dctx + (size_t)rq * d, fused); /* dQ, dK, dV like Q, K, V */
    vit_real *wsdpa = dc.ctx;

    /* dctx = dy W_O^T (overwrite), then the core writes dQ, dK, dV (the
     * tiled core accumulates, so they are zeroed for it). */
    vit_mgemm(CblasNoTrans, CblasTrans, rq, d, d, 1, dy, d, w.w_o, d, 0, dctx, d);
    vit_sdpa a = mha_core_of(m, &c);
    a.head_scale = w.tau;
    if (vit_sdpa_use_tiled(&a)) { /* c.probs holds the log-sum-exp; O(tile) scratch of its own */
        memset(dc.q, 0, ((size_t)rq * d + 2 * (size_t)rk * d) * sizeof *dc.q);
        rc = vit_sdpa_tiled_backward_scale(&a, need_q ? dc.q : NULL, need_kv ? dc.k : NULL,
                                           need_kv ? dc.v : NULL, dbias, g.tau, dctx, c.ctx,
                                           c.probs, c.q, c.k, c.v, NULL);
    } else { /* the standard core overwrites dQ, dK, dV */
        rc = sdpa_backward(&a, 0, need_q ? dc.q : NULL, need_kv ? dc.k : NULL,
                           need_kv ? dc.v : NULL, dbias, g.tau, dctx, c.probs, c.q, c.k, c.v,
                           wsdpa);
    }
    if (rc == VIT_OK && fused) {
        /* Both halves are needed whenever the weights' gradient or one dx
         * for both is asked for: then every column of dQKV was written. */
        vit_real *dx = dx_q == dx_kv ? dx_q : NULL;
        dense_backward(dx, g.w_q_cols, g.b_q, dc.q, x_q, w.w_q_cols, w.row_stride_q, rq, d,
                       3 * d);
        if (!dx && dx_q) /* distinct buffers for the one input: each its share */
            vit_mgemm(CblasNoTrans, CblasTrans, rq, d, d, 1, dc.q, 3 * d, w.w_q_cols,
                      w.row_stride_q, 1, dx_q, d);
        if (!dx && dx_kv)
            vit_mgemm(CblasNoTrans, CblasTrans, rk, d, 2 * d, 1, dc.k, 3 * d, w.w_k_cols,
                      w.row_stride_kv, 1, dx_kv, d);
    } else if (rc == VIT_OK) {
        if (need_q)
            dense_backward(dx_q, g.w_q_cols, g.b_q, dc.q, x_q, w.w_q_cols, w.row_stride_q, rq, d,
                           d);
        if (need_kv)
            dense_backward(dx_kv, g.w_k_cols, g.b_k, dc.k, x_kv, w.w_k_cols, w.row_stride_kv, rk,
                           dkv, 2 * d);
    }
    free(owned);
    return rc;
}
