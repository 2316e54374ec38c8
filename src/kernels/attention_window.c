/*
 * Windowed self-attention on a token grid (Swin): scores only inside each
 * window of Mh rows by Mw columns, so the cost is linear in the number of
 * tokens.  Each window's tokens are gathered into small dense blocks
 * (taking the cyclic shift into account), attended densely, and the
 * results scattered back;
 * a window whose tokens are consecutive rows (one window across the grid's
 * width, no shift on either axis) is read and written in place instead.
 * Same result as vit_sdpa with the vit_mask_window mask.  See
 * include/vit/attention.h.
 */
#include "vit/attention.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attention_internal.h"
#include "blas.h"
#include "error.h"
#include "fastmath.h"
#include "pair_gemm.h"
#include "threads.h"
#include "window_internal.h"

/* ---- Shapes ------------------------------------------------------------- */

/* Derived sizes: N tokens, T = Mh*Mw tokens per window, windows per axis,
 * leading dimensions, and the reals of one thread's scratch:
 * q, k [T, d_k], v, o [T, d_v], tmp [T, max(d_k, d_v)], s, p [T, T],
 * mx [T]. */
typedef struct {
    int N, T, nwy, nwx, nW, ldq, ldk, ldv, dmax;
    size_t slab;
} wgeo;

static wgeo wgeometry(const vit_window_attn *w)
{
    wgeo g;
    g.N = w->grid_h * w->grid_w;
    g.T = w->window_h * w->window_w;
    g.nwy = w->grid_h / w->window_h;
    g.nwx = w->grid_w / w->window_w;
    g.nW = g.nwy * g.nwx;
    g.ldq = w->ld_q ? w->ld_q : w->heads * w->d_k;
    g.ldk = w->ld_k ? w->ld_k : w->heads * w->d_k;
    g.ldv = w->ld_v ? w->ld_v : w->heads * w->d_v;
    g.dmax = w->d_k > w->d_v ? w->d_k : w->d_v;
    g.slab = (size_t)g.T * (2 * (size_t)w->d_k + 2 * (size_t)w->d_v + g.dmax + 2 * (size_t)g.T + 1);
    return g;
}

static int window_check(const char *fn, const vit_window_attn *w, vit_real *scale)
{
    int rc;
    if ((rc = vit_check_ptr(fn, "w", w)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "batch", w->batch)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "heads", w->heads)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "grid_h", w->grid_h)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "grid_w", w->grid_w)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "window_h", w->window_h)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "window_w", w->window_w)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "d_k", w->d_k)) != VIT_OK) return rc;
    if ((rc = vit_check_dim(fn, "d_v", w->d_v)) != VIT_OK) return rc;
    if (w->grid_h % w->window_h != 0)
        return vit_fail(VIT_EINVAL, "%s: grid_h %d (grid %d x %d) is not a multiple of "
                        "window_h %d (window %d x %d)", fn, w->grid_h, w->grid_h, w->grid_w,
                        w->window_h, w->window_h, w->window_w);
    if (w->grid_w % w->window_w != 0)
        return vit_fail(VIT_EINVAL, "%s: grid_w %d (grid %d x %d) is not a multiple of "
                        "window_w %d (window %d x %d)", fn, w->grid_w, w->grid_h, w->grid_w,
                        w->window_w, w->window_h, w->window_w);
    if (w->shift_h < 0 || w->shift_h >= w->window_h)
        return vit_fail(VIT_EINVAL, "%s: shift_h must be in [0, window_h = %d), got %d",
                        fn, w->window_h, w->shift_h);
    if (w->shift_w < 0 || w->shift_w >= w->window_w)
        return vit_fail(VIT_EINVAL, "%s: shift_w must be in [0, window_w = %d), got %d",
                        fn, w->window_w, w->shift_w);
    if ((long long)w->heads * w->d_k > INT_MAX || (long long)w->heads * w->d_v > INT_MAX ||
        (long long)w->grid_h * w->grid_w > INT_MAX ||
        (long long)w->window_h * w->window_w > 65536)
        return vit_fail(VIT_EINVAL, "%s: heads * d, grid_h * grid_w or window_h * window_w "
                        "too large", fn);
    size_t n, s;
    if (!vit_mul_size(&n, (size_t)w->batch * w->heads, (size_t)w->grid_h * w->grid_w) ||
        !vit_mul_size(&s, n, (size_t)w->window_h * w->window_w) ||
        !vit_mul_size(&s, n, (size_t)w->d_k > (size_t)w->d_v ? (size_t)w->d_k : (size_t)w->d_v))
        return vit_fail(VIT_ENOMEM, "%s: buffer sizes overflow size_t", fn);
    const int ld[3] = {w->ld_q, w->ld_k, w->ld_v};
    const int dense[3] = {w->heads * w->d_k, w->heads * w->d_k, w->heads * w->d_v};
    static const char *ld_name[3] = {"ld_q", "ld_k", "ld_v"};
    for (int i = 0; i < 3; i++) {
        if (ld[i] != 0 && ld[i] < dense[i])
            return vit_fail(VIT_EINVAL, "%s: %s (%d) is neither 0 nor at least the row width %d",
                            fn, ld_name[i], ld[i], dense[i]);
        if (!vit_mul3_size(&s, (size_t)w->batch, (size_t)w->grid_h * w->grid_w, (size_t)ld[i]))
            return vit_fail(VIT_ENOMEM, "%s: buffer sizes overflow size_t", fn);
    }
    if (!isfinite(w->scale))
        return vit_fail(VIT_EINVAL, "%s: scale is not finite", fn);
    if (w->bias != NULL && w->bias_heads != 1 && w->bias_heads != w->heads)
        return vit_fail(VIT_EINVAL, "%s: bias_heads must be 1 or heads (%d), got %d",
                        fn, w->heads, w->bias_heads);
    *scale = w->scale != 0 ? w->scale : (vit_real)(1.0 / sqrt((double)w->d_k));
    return VIT_OK;
}

size_t vit_window_attn_lse_size(const vit_window_attn *w)
{
    vit_real scale;
    if (window_check("vit_window_attn_lse_size", w, &scale) != VIT_OK) return 0;
    return (size_t)w->batch * w->heads * (size_t)w->grid_h * w->grid_w;
}

/* ---- Windows -------------------------------------------------------------- */

/* Along one axis of length len, with that axis's window side M and shift:
 * shifted coordinate s's region label (Swin's roll(x, -shift) puts
 * original position (s + shift) mod len at s): with a shift the last
 * window of the axis holds the positions [len-M, len-shift) and
 * [len-shift, len) of the shifted frame, which come from opposite ends of
 * the original axis and must not interact. */
static int axis_region(int s, int len, int M, int shift)
{
    return shift == 0 ? 0 : s < len - M ? 0 : s < len - shift ? 1 : 2;
}

void vit_window_tokens(const vit_window_attn *w, int wi, int *tok, int *label)
{
    const int Mh = w->window_h, Mw = w->window_w, nwx = w->grid_w / Mw;
    const int wy = wi / nwx, wx = wi % nwx;
    for (int py = 0; py < Mh; py++)
        for (int px = 0; px < Mw; px++) {
            int sy = wy * Mh + py, sx = wx * Mw + px;
            int r = (sy + w->shift_h) % w->grid_h, c = (sx + w->shift_w) % w->grid_w;
            tok[py * Mw + px] = r * w->grid_w + c;
            if (label)
                label[py * Mw + px] = 3 * axis_region(sy, w->grid_h, Mh, w->shift_h)
                                    + axis_region(sx, w->grid_w, Mw, w->shift_w);
        }
}

/* dst[0, n) = src[0, n).  A row is a head's few values: at the usual
 * widths (16, 32) a copy of constant size, which the compiler makes a few
 * vector moves.  A loop of element copies (or of fixed-size blocks) gcc
 * turns into a call to memcpy per row, which cost more in the call than
 * in the move. */
static inline void copy_row(vit_real *restrict dst, const vit_real *restrict src, int n)
{
    if (n == 16)
        memcpy(dst, src, 16 * sizeof *dst);
    else if (n == 32)
        memcpy(dst, src, 32 * sizeof *dst);
    else
        memcpy(dst, src, (size_t)n * sizeof *dst);
}

/* dst[T, d] = rows tok[] of the head's columns of src (leading dim ld). */
FM_CLONES
static void gather(vit_real *restrict dst, const vit_real *restrict src, const int *tok, int T,
                   int d, int ld)
{
    for (int p = 0; p < T; p++)
        copy_row(dst + (size_t)p * d, src + (size_t)tok[p] * ld, d);
}

/* The three gathers of a window at once: qd, kd [T, dk] and vd [T, dv]
 * from rows tok[] of q, k, v (leading dims lq, lk, lv).  One pass over
 * the tokens, each visited once for its three pieces, which in a fused
 * projection lie in one row (at Swin's first stage, one head: 96
 * consecutive floats), instead of three passes each fetching a third of
 * every row: the gathers read rows that the projection left in L3 or
 * memory, and the copies wait on those loads (gather was 14% of the
 * window kernels' time on Zen 3, perf). */
FM_CLONES
static void gather3(vit_real *restrict qd, vit_real *restrict kd, vit_real *restrict vd,
                    const vit_real *q, const vit_real *k, const vit_real *v, const int *tok,
                    int T, int dk, int dv, int lq, int lk, int lv)
{
    for (int p = 0; p < T; p++) {
        const size_t t = (size_t)tok[p];
        copy_row(qd + (size_t)p * dk, q + t * lq, dk);
        copy_row(kd + (size_t)p * dk, k + t * lk, dk);
        copy_row(vd + (size_t)p * dv, v + t * lv, dv);
    }
}

/* dst[0, n) += src[0, n), at the usual widths with n a constant (a few
 * vector adds, no loop). */
static inline void add_row(vit_real *restrict dst, const vit_real *restrict src, int n)
{
    if (n == 16)
        for (int c = 0; c < 16; c++) dst[c] += src[c];
    else if (n == 32)
        for (int c = 0; c < 32; c++) dst[c] += src[c];
    else
        for (int c = 0; c < n; c++) dst[c] += src[c];
}

/* rows tok[] of dst (+)= src[T, d]. */
FM_CLONES
static void scatter(vit_real *restrict dst, const vit_real *restrict src, const int *tok, int T,
                    int d, int ld, int add)
{
    for (int p = 0; p < T; p++) {
        vit_real *row = dst + (size_t)tok[p] * ld;
        const vit_real *sr = src + (size_t)p * d;
        if (add)
            add_row(row, sr, d);
        else
            copy_row(row, sr, d);
    }
}

/* y[n] += x[n]; y[n] *= s (the window's dS into dbias, and scaled). */
FM_CLONES
static void add_into(vit_real *restrict y, const vit_real *restrict x, size_t n)
{
    for (size_t e = 0; e < n; e++) y[e] += x[e];
}

FM_CLONES
static void scale_by(vit_real *y, vit_real s, size_t n)
{
    for (size_t e = 0; e < n; e++) y[e] *= s;
}

/* c ? x : y for c 0 or 1, in float32 through the bits: gcc 12 keeps
 * `c ? x : y` on floats a branch and does not vectorise it (it may not
 * make a possibly trapping arm unconditional without -ffast-math).  The
 * same values either way. */
static inline vit_real pick(int c, vit_real x, vit_real y)
{
#ifdef VIT_DOUBLE
    return c ? x : y;
#else
    return fm_select(c, x, y);
#endif
}

/* In place, p [T, T]: row i minus sub[i].  With label (a window of
 * several regions) an entry across regions (-inf) becomes 0 instead, for
 * window_exp. */
FM_CLONES
static void rows_minus(vit_real *p, int T, const vit_real *sub, const int *label)
{
    for (int i = 0; i < T; i++) {
        vit_real *restrict r = p + (size_t)i * T;
        const vit_real m = sub[i];
        if (!label) {
            for (int j = 0; j < T; j++) r[j] -= m;
            continue;
        }
        const int li = label[i];
        for (int j = 0; j < T; j++) r[j] = pick(label[j] == li, r[j] - m, 0);
    }
}

/* In place, p [T, T] as rows_minus left it -> exp(p), 0 across regions:
 * exp(S - m) row by row, the same values as exp of each row minus its m
 * (x - m, then exp(x - 0) of that).  One exp over the window's T*T
 * values instead of one call per row of T = 49 (six vectors of 8 and a
 * scalar tail on AVX2, with the constants set up again per row), and no
 * exp of -inf for the masked entries: there fastmath.h's exp underflows,
 * which Zen 3 takes twice as long over as a normal result (measured:
 * 2.2 against 1.0 ns a value); they get exp(0) and are zeroed after, the
 * +0 that the exp of -inf gives. */
FM_CLONES
static void window_exp(vit_real *p, int T, const int *label)
{
    vit_attn_exp_shifted(p, T * T, 0);
    if (!label) return;
    for (int i = 0; i < T; i++) {
        vit_real *restrict r = p + (size_t)i * T;
        const int li = label[i];
        for (int j = 0; j < T; j++) r[j] = pick(label[j] == li, r[j], 0);
    }
}

/* In place: the rows of s [T, T] (scores, -inf where masked, the masked
 * entries those whose labels differ when label is given, NULL for a
 * window of one region; the diagonal is never masked) -> their softmax,
 * with lse[i] = log sum_j exp(s_ij), the row's log-sum-exp, which is all
 * the backward needs to remake them (lse NULL: not wanted, the weights
 * themselves are kept).  mx: T reals of scratch (the rows' maxima).
 * Separate passes (max, exp, sum, scale), so that each vectorises. */
FM_CLONES
static void softmax_lse(vit_real *s, int T, vit_real *lse, vit_real *mx, const int *label)
{
    for (int i = 0; i < T; i++) {
        const vit_real *r = s + (size_t)i * T;
        vit_real m = r[0];
#pragma omp simd reduction(max : m)
        for (int j = 1; j < T; j++)
            m = r[j] > m ? r[j] : m;
        mx[i] = m;
    }
    rows_minus(s, T, mx, label);
    window_exp(s, T, label);
    for (int i = 0; i < T; i++) {
        vit_real *r = s + (size_t)i * T;
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < T; j++)
            sum += r[j];
        const vit_real inv = (vit_real)(1.0 / sum); /* sum >= 1: the max gives exp(0) */
        for (int j = 0; j < T; j++) r[j] *= inv;
        if (lse)
            lse[i] = mx[i] + (vit_real)log(sum);
    }
}

/* ---- Jobs ------------------------------------------------------------------ */

typedef struct {
    const vit_window_attn *w;
    wgeo g;
    vit_real scale;
    const vit_real *q, *k, *v, *dout, *lse_in;
    vit_real *out, *lse, *dq, *dk, *dv, *dbias;
    vit_real *work;
    int *iwork;              /* per window: tok[T], label[T] (vit_window_tokens); then per
                                window its regions flag: made once per call */
    atomic_int next_slab;
    atomic_ullong first_bad; /* task * T * T + p * T + p' of a non-finite score */
    vit_real *partial;       /* backward with dbias: [groups, dbias_heads, T, T] */
    size_t groups;           /* backward: tasks, groups of (item, head) pairs */
    int dbias_heads;
    int direct;              /* the products on src/kernels/pair_gemm.c's kernels */
    int contig;              /* each window's tokens are consecutive rows (window_rows) */
    int overwrite;           /* backward: dq, dk, dv written, not added to */
} wjob;

typedef struct {
    vit_real *q, *k, *v, *o, *tmp, *s, *p, *mx;
    const int *tok, *label; /* the current task's window's (begin_task) */
} wslab;

static wslab take_slab(wjob *J)
{
    int i = atomic_fetch_add(&J->next_slab, 1);
    const int T = J->g.T;
    wslab s;
    s.q = J->work + (size_t)i * J->g.slab;
    s.k = s.q + (size_t)T * J->w->d_k;
    s.v = s.k + (size_t)T * J->w->d_k;
    s.o = s.v + (size_t)T * J->w->d_v;
    s.tmp = s.o + (size_t)T * J->w->d_v;
    s.s = s.tmp + (size_t)T * J->g.dmax;
    s.p = s.s + (size_t)T * T;
    s.mx = s.p + (size_t)T * T;
    s.tok = s.label = NULL;
    return s;
}

/* Task t = (item b, head h, window wi) in that nesting. */
static void task_index(const wjob *J, size_t t, int *b, int *h, int *wi)
{
    *wi = (int)(t % (size_t)J->g.nW);
    size_t x = t / (size_t)J->g.nW;
    *h = (int)(x % (size_t)J->w->heads);
    *b = (int)(x / (size_t)J->w->heads);
}

/* Task t's head and the offsets of its (item, head) in q, k and v (rows
 * ld_q, ld_k, ld_v apart) and in out (dense [B, N, H*d_v]); also points
 * the slab at the window's tokens and region labels. */
typedef struct {
    int h;
    int regions; /* nonzero: the window holds more than one region */
    size_t oq, ok, ov, oo;
} wtask;

static wtask begin_task(const wjob *J, size_t t, wslab *sl)
{
    const wgeo *g = &J->g;
    int b, h, wi;
    task_index(J, t, &b, &h, &wi);
    sl->tok = J->iwork + (size_t)wi * 2 * g->T;
    sl->label = sl->tok + g->T;
    const int regions = J->iwork[(size_t)g->nW * 2 * g->T + wi];
    const size_t N = (size_t)g->N;
    wtask task = {h, regions, (size_t)b * N * g->ldq + (size_t)h * J->w->d_k,
                  (size_t)b * N * g->ldk + (size_t)h * J->w->d_k,
                  (size_t)b * N * g->ldv + (size_t)h * J->w->d_v,
                  (size_t)b * N * J->w->heads * J->w->d_v + (size_t)h * J->w->d_v};
    return task;
}

/* A window's rows of one operand: where the products read them and their
 * row stride.  Gathered into the slab (stride d), or where the window's
 * tokens are consecutive rows of the grid (one window across its width,
 * no shift: J->contig) the rows themselves in place, which the products
 * read at their stride: the same values, no copy. */
typedef struct {
    const vit_real *p;
    int ld;
} wrows;

/* The window's rows of the head's columns of src (row stride ld), d wide:
 * in place, or gathered into buf. */
static wrows window_rows(const wjob *J, const wslab *sl, vit_real *buf, const vit_real *src,
                         int d, int ld)
{
    if (J->contig)
        return (wrows){src + (size_t)sl->tok[0] * ld, ld};
    gather(buf, src, sl->tok, J->g.T, d, ld);
    return (wrows){buf, d};
}

/* window_rows of q, k and v together (gather3 when they are gathered). */
static void window_qkv(const wjob *J, const wslab *sl, const wtask *task, wrows *q, wrows *k,
                       wrows *v)
{
    const vit_window_attn *w = J->w;
    const wgeo *g = &J->g;
    if (J->contig) {
        *q = window_rows(J, sl, sl->q, J->q + task->oq, w->d_k, g->ldq);
        *k = window_rows(J, sl, sl->k, J->k + task->ok, w->d_k, g->ldk);
        *v = window_rows(J, sl, sl->v, J->v + task->ov, w->d_v, g->ldv);
        return;
    }
    gather3(sl->q, sl->k, sl->v, J->q + task->oq, J->k + task->ok, J->v + task->ov, sl->tok,
            g->T, w->d_k, w->d_v, g->ldq, g->ldk, g->ldv);
    *q = (wrows){sl->q, w->d_k};
    *k = (wrows){sl->k, w->d_k};
    *v = (wrows){sl->v, w->d_v};
}

/* ---- Forward --------------------------------------------------------------- */

/* The window's products on the direct kernels of src/kernels/pair_gemm.c when they
 * take its widths (float32, T <= 32, d 16 or 32), else on GEMMs:
 *   w_nt    C[T, T] = alpha A[T, d] B[T, d]^T          (overwritten)
 *   w_rows  C[T, d] = op(A) B[T, d], op(A) = A or A^T  (overwritten)
 * with A's, B's and C's rows lda, ldb, ldc apart (A [T, T] in w_rows: T). */
static void w_nt(int direct, int T, int d, vit_real alpha, wrows A, wrows B, vit_real *C)
{
    if (direct)
        vit_pair_nt(T, T, d, alpha, A.p, A.ld, B.p, B.ld, C, T);
    else
        vit_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, d, alpha, A.p, A.ld, B.p, B.ld,
                 0, C, T);
}

static void w_rows(int direct, int ta, int T, int d, const vit_real *A, wrows B, vit_real *C,
                   int ldc)
{
    if (direct)
        vit_pair_nn(ta, T, T, d, A, T, B.p, B.ld, 0, C, ldc);
    else
        vit_gemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, CblasNoTrans, T, d, T, 1, A, T,
                 B.p, B.ld, 0, C, ldc);
}

/* p [T, T]: -inf where the two positions' region labels differ, by pick
 * (as a branch it cost a shifted block of 14 x 14 tokens a quarter more
 * forward time than an unshifted one on Zen 3). */
FM_CLONES
static void mask_regions(vit_real *p, const int *label, int T)
{
    for (int i = 0; i < T; i++) {
        vit_real *restrict pi = p + (size_t)i * T;
        const int li = label[i];
        for (int j = 0; j < T; j++)
            pi[j] = pick(label[j] == li, pi[j], -INFINITY);
    }
}

/* The window's scores into p [T, T]: S = s Q_w K_w^T + bias (q and k the
 * window's rows), without the region mask (the forward applies it, the
 * backward's rows_minus zeroes those entries itself).  Returns the index
 * of the first non-finite score, or -1. */
static long window_scores(const wjob *J, const wtask *task, wrows q, wrows k, vit_real *p)
{
    const vit_window_attn *w = J->w;
    const int T = J->g.T;
    w_nt(J->direct, T, w->d_k, J->scale, q, k, p);
    const vit_real *bb = !w->bias ? NULL
                       : w->bias + (w->bias_heads == 1 ? 0 : (size_t)task->h * T * T);
    return vit_attn_add_bias_check(p, bb, (size_t)T * T);
}

/* One window of one (item, head): its scores, their softmax (the rows'
 * log-sum-exp kept in lse), O_w = P V_w scattered to out.  Returns 1
 * after recording a non-finite score. */
static int window_forward(wjob *J, size_t t, wslab *sl)
{
    const vit_window_attn *w = J->w;
    const wgeo *g = &J->g;
    const int T = g->T, dv = w->d_v;
    const wtask task = begin_task(J, t, sl);
    const int ldo = w->heads * dv;
    wrows q, k, v;
    window_qkv(J, sl, &task, &q, &k, &v);

    vit_real *p = w->probs ? w->probs + t * (size_t)T * T : sl->p;
    long bad = window_scores(J, &task, q, k, p);
    if (bad >= 0) {
        vit_atomic_min(&J->first_bad, (unsigned long long)t * T * T + (unsigned long long)bad);
        return 1;
    }
    /* The region mask, in windows that hold tokens from opposite borders
     * (the rows' maxima must not see the masked scores); the diagonal is
     * always allowed, so no row is empty. */
    if (task.regions)
        mask_regions(p, sl->label, T);
    softmax_lse(p, T, J->lse ? J->lse + t * T : NULL, sl->mx, task.regions ? sl->label : NULL);
    if (J->contig) { /* O_w straight into its rows */
        w_rows(J->direct, 0, T, dv, p, v, J->out + task.oo + (size_t)sl->tok[0] * ldo, ldo);
        return 0;
    }
    w_rows(J->direct, 0, T, dv, p, v, sl->o, dv);
    scatter(J->out + task.oo, sl->o, sl->tok, T, dv, ldo, 0);
    return 0;
}

static void forward_tasks(void *ctx, size_t lo, size_t hi)
{
    wjob *J = ctx;
    wslab sl = take_slab(J);
    for (size_t t = lo; t < hi; t++)
        if (window_forward(J, t, &sl)) return;
}

/* Scratch of nt threads, and every window's tokens, labels and regions
 * flag (the same for every item and head: listed once, not per task);
 * 0 or VIT_ENOMEM. */
static int alloc_work(const char *fn, wjob *J, int nt)
{
    const int T = J->g.T, nW = J->g.nW;
    J->work = malloc((size_t)nt * J->g.slab * sizeof *J->work);
    J->iwork = malloc(((size_t)nW * 2 * T + nW) * sizeof *J->iwork);
    if (!J->work || !J->iwork) {
        free(J->work);
        free(J->iwork);
        return vit_fail(VIT_ENOMEM, "%s: cannot allocate scratch for %d thread(s)", fn, nt);
    }
    for (int wi = 0; wi < nW; wi++) {
        int *tok = J->iwork + (size_t)wi * 2 * T, *label = tok + T, regions = 0;
        vit_window_tokens(J->w, wi, tok, label);
        for (int p = 1; p < T; p++) regions |= label[p] != label[0];
        J->iwork[(size_t)nW * 2 * T + wi] = regions;
    }
    return VIT_OK;
}

static void job_init(wjob *J, const vit_window_attn *w, vit_real scale)
{
    memset(J, 0, sizeof *J);
    J->w = w;
    J->g = wgeometry(w);
    J->scale = scale;
    J->direct = vit_pair_direct(w->d_k, w->d_v, J->g.T);
    J->contig = J->g.nwx == 1 && w->shift_h == 0 && w->shift_w == 0;
    atomic_init(&J->next_slab, 0);
    atomic_init(&J->first_bad, ULLONG_MAX);
}

/* q, k [B, N, H*d_k], v [B, N, H*d_v] (rows ld_q, ld_k, ld_v apart) ->
 * out [B, N, H*d_v] (dense), lse [B, H, nW, T]. */
int vit_window_attn_forward(const vit_window_attn *w, vit_real *out, vit_real *lse,
                            const vit_real *q, const vit_real *k, const vit_real *v)
{
    static const char fn[] = "vit_window_attn_forward";
    vit_real scale = 0;
    int rc;
    if ((rc = window_check(fn, w, &scale)) != VIT_OK) return rc;
    /* lse may be NULL when the weights are kept (w->probs) */
    if ((rc = vit_attn_check_forward(fn, out, lse || !w->probs ? lse : w->probs, "lse", q, k,
                                     v)) != VIT_OK) return rc;

    wjob J;
    job_init(&J, w, scale);
    J.q = q; J.k = k; J.v = v; J.out = out; J.lse = lse;
    size_t tasks = (size_t)w->batch * w->heads * J.g.nW;
    int nt = vit_threads_for(2.0 * (double)tasks * J.g.T * (double)J.g.T * (w->d_k + w->d_v));
    if ((size_t)nt > tasks) nt = (int)tasks;
    if ((rc = alloc_work(fn, &J, nt)) != VIT_OK) return rc;
    vit_parallel(nt, tasks, forward_tasks, &J);
    free(J.work);
    free(J.iwork);

    unsigned long long f = atomic_load(&J.first_bad);
    if (f != ULLONG_MAX) {
        unsigned long long TT = (unsigned long long)J.g.T * J.g.T;
        int b, h, wi, tok[2];
        task_index(&J, (size_t)(f / TT), &b, &h, &wi);
        int *ts = malloc(2 * (size_t)J.g.T * sizeof *ts);
        if (!ts)
            return vit_fail(VIT_ENUM, "%s: non-finite score at item %d, head %d, window %d "
                            "(check q, k, bias)", fn, b, h, wi);
        vit_window_tokens(w, wi, ts, ts + J.g.T);
        tok[0] = ts[(f % TT) / (unsigned)J.g.T];
        tok[1] = ts[(f % TT) % (unsigned)J.g.T];
        free(ts);
        return vit_fail(VIT_ENUM, "%s: non-finite score at item %d, head %d, query %d, key %d "
                        "(check q, k, bias)", fn, b, h, tok[0], tok[1]);
    }
    return VIT_OK;
}

/* ---- Backward -------------------------------------------------------------- */

/* A window's gradient rows C_w [T, d] = op(A) B into dst (the head's
 * columns, rows ld apart) at the window's tokens: added through the slab's
 * tmp; or, when the gradient is written whole (J->overwrite), copied from
 * tmp, or where the window's tokens are consecutive rows (J->contig)
 * written there by the product itself, as the forward writes O_w. */
static void grad_rows(const wjob *J, const wslab *sl, int ta, int d, const vit_real *A,
                      wrows B, vit_real *dst, int ld)
{
    const int T = J->g.T;
    if (J->overwrite && J->contig) {
        w_rows(J->direct, ta, T, d, A, B, dst + (size_t)sl->tok[0] * ld, ld);
        return;
    }
    w_rows(J->direct, ta, T, d, A, B, sl->tmp, d);
    scatter(dst, sl->tmp, sl->tok, T, d, ld, !J->overwrite);
}

/* One window: with P the forward's (w->probs) or remade from the scores
 * and the forward's lse,
 *   dV_w = P^T dO_w,  dP = dO_w V_w^T,  dS = P .* (dP - rowsum(dP .* P)),
 *   dbias += dS,  dQ_w = s dS K_w,  dK_w = s dS^T Q_w,
 * each scattered (added) to the window's tokens. */
/* dbias: where this window adds its dS ([T, T], its head's), or NULL. */
static void window_backward(wjob *J, size_t t, wslab *sl, vit_real *dbias)
{
    const vit_window_attn *w = J->w;
    const wgeo *g = &J->g;
    const int T = g->T, dk = w->d_k, dv = w->d_v;
    const wtask task = begin_task(J, t, sl);
    const int ldo = w->heads * dv;
    /* v too, though dV needs only P and dO: Swin asks for every gradient */
    wrows q, k, v;
    window_qkv(J, sl, &task, &q, &k, &v);
    const vit_real *p = sl->p;
    if (w->probs) {
        p = w->probs + t * (size_t)T * T;
    } else {
        window_scores(J, &task, q, k, sl->p); /* finite: the forward checked them */
        /* the weights remade: exp(S - lse) row by row (lse >= the row's
         * max); rows_minus writes the region mask's entries as 0 (window_exp
         * zeroes their exp), so the scores need no -inf pass first */
        const int *label = task.regions ? sl->label : NULL;
        rows_minus(sl->p, T, J->lse_in + t * T, label);
        window_exp(sl->p, T, label);
    }
    wrows dout = window_rows(J, sl, sl->o, J->dout + task.oo, dv, ldo);

    if (J->dv)
        grad_rows(J, sl, 1, dv, p, dout, J->dv + task.ov, g->ldv);
    if (!J->dq && !J->dk && !dbias) return;
    vit_real *ds = sl->s;
    w_nt(J->direct, T, dv, 1, dout, v, ds);
    vit_attn_softmax_grad_rows(p, ds, T, 0, T);
    if (dbias)
        add_into(dbias, ds, (size_t)T * T);
    if (!J->dq && !J->dk) return;
    /* dS scaled once, for both products (the direct kernels take no alpha). */
    scale_by(ds, J->scale, (size_t)T * T);
    if (J->dq)
        grad_rows(J, sl, 0, dk, ds, k, J->dq + task.oq, g->ldq);
    if (J->dk)
        grad_rows(J, sl, 1, dk, ds, q, J->dk + task.ok, g->ldk);
}

/* Groups of (item, head) pairs, a fixed number whatever the thread count
 * (WINDOW_GROUPS, fewer for fewer pairs): each group writes only its own
 * pairs' rows of dq, dk, dv, and with a dbias sums its windows, in order,
 * into its own partial dbias; the partials are then added to dbias in
 * group order.  So every sum is added in the same order for every thread
 * count, and a dbias shared by the heads (Swin's first stage has one head)
 * no longer holds the backward to one thread. */
enum { WINDOW_GROUPS = 16 };

static void backward_tasks(void *ctx, size_t lo, size_t hi)
{
    wjob *J = ctx;
    wslab sl = take_slab(J);
    const size_t nW = (size_t)J->g.nW, pairs = (size_t)J->w->batch * J->w->heads;
    const size_t TT = (size_t)J->g.T * J->g.T, nb = (size_t)J->dbias_heads * TT;
    for (size_t grp = lo; grp < hi; grp++) {
        vit_real *part = J->dbias ? J->partial + grp * nb : NULL;
        for (size_t pr = grp * pairs / J->groups; pr < (grp + 1) * pairs / J->groups; pr++) {
            vit_real *db = part ? part + (J->dbias_heads == 1 ? 0 : (pr % J->w->heads) * TT)
                                : NULL;
            for (size_t wi = 0; wi < nW; wi++)
                window_backward(J, pr * nW + wi, &sl, db);
        }
    }
}

int vit_window_attn_backward(const vit_window_attn *w, vit_real *dq, vit_real *dk,
                             vit_real *dv, vit_real *dbias, const vit_real *dout,
                             const vit_real *lse, const vit_real *q, const vit_real *k,
                             const vit_real *v)
{
    return vit_window_attn_backward_to(w, dq, dk, dv, dbias, dout, lse, q, k, v, 0);
}

int vit_window_attn_backward_to(const vit_window_attn *w, vit_real *dq, vit_real *dk,
                                vit_real *dv, vit_real *dbias, const vit_real *dout,
                                const vit_real *lse, const vit_real *q, const vit_real *k,
                                const vit_real *v, int overwrite)
{
    static const char fn[] = "vit_window_attn_backward";
    vit_real scale = 0;
    int rc;
    if ((rc = window_check(fn, w, &scale)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "dout", dout)) != VIT_OK) return rc;
    if (!w->probs && (rc = vit_check_ptr(fn, "lse", lse)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_qkv(fn, q, k, v)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_dbias(fn, dbias, w->bias_heads, w->heads)) != VIT_OK) return rc;
    if (!dq && !dk && !dv && !dbias) return VIT_OK;

    wjob J;
    job_init(&J, w, scale);
    J.q = q; J.k = k; J.v = v; J.dout = dout; J.lse_in = lse;
    J.dq = dq; J.dk = dk; J.dv = dv; J.dbias = dbias;
    J.overwrite = overwrite;
    size_t windows = (size_t)w->batch * w->heads * J.g.nW, pairs = (size_t)w->batch * w->heads;
    J.groups = pairs < WINDOW_GROUPS ? pairs : WINDOW_GROUPS;
    J.dbias_heads = w->bias_heads;
    const size_t nb = (size_t)w->bias_heads * J.g.T * J.g.T;
    if (dbias && !(J.partial = calloc(J.groups * nb, sizeof *J.partial)))
        return vit_fail(VIT_ENOMEM, "%s: cannot allocate %zu partial dbias sums", fn, J.groups);
    int nt = vit_threads_for(4.0 * (double)windows * J.g.T * (double)J.g.T * (w->d_k + w->d_v));
    if ((size_t)nt > J.groups) nt = (int)J.groups;
    if ((rc = alloc_work(fn, &J, nt)) != VIT_OK) {
        free(J.partial);
        return rc;
    }
    vit_parallel(nt, J.groups, backward_tasks, &J);
    free(J.work);
    free(J.iwork);
    for (size_t grp = 0; dbias && grp < J.groups; grp++)
        add_into(dbias, J.partial + grp * nb, nb);
    free(J.partial);
    return VIT_OK;
}
