/*
 * Memory-efficient ("tiled") scaled dot-product attention: the same maths
 * as vit_sdpa_forward/backward (src/kernels/attention.c) without ever holding the
 * [n_q, n_k] score matrix of a head.  See include/vit/attention.h.
 *
 * Forward, per (item, head, query tile of tq rows), over key tiles of tk:
 *   S = s Q_i K_j^T + bias, masked;
 *   per row: m' = max(m, rowmax S), c = exp(m - m'),
 *            l  = c l + rowsum exp(S - m'),  O = c O + exp(S - m') V_j;
 *   at the end O /= l and lse = m + log l, the only per-row state kept.
 * Backward, per tile, recomputes P = exp(S - lse) from q, k and lse and
 * uses D_i = dO_i . O_i (= rowsum(dP .* P)) for the softmax Jacobian:
 *   dV_j += P^T dO_i,  dP = dO_i V_j^T,  dS = P .* (dP - D),
 *   dbias += dS,  dQ_i += s dS K_j,  dK_j += s dS^T Q_i.
 *
 * Parallelism.  Every output element is computed by exactly one task, from
 * the same tiles in the same order whatever the thread count, so results do
 * not depend on it (bitwise).  The forward's tasks are (pair, query tile).
 * The backward has two schedules with identical arithmetic:
 *  - fused: one task per (item, head) pair, key tiles outer, query tiles
 *    inner, writing dq, dk, dv, dbias; used single-threaded, or when there
 *    are enough pairs and no two pairs share a dbias block;
 *  - split: pass 1, tasks (pair group, key tile), writes dk, dv, dbias
 *    (a group is the pairs that share a dbias slice, so no two tasks write
 *    the same element); pass 2, tasks (pair, query tile), writes dq.  It
 *    recomputes S and dP once more (7 tile products instead of 5) in
 *    exchange for parallelism over long sequences.
 */
#include "vit/attention.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "attention_internal.h"
#include "error.h"
#include "fastmath.h"
#include "threads.h"

#ifdef VIT_DOUBLE
#define vit_exp exp
#define vit_log log
#else
#define vit_exp expf
#define vit_log logf
#endif

/* s[n] -> exp(s[n] - shift) in place, where every s[j] - shift is <= 0 or
 * -inf (a forbidden key: weight 0).  In float32 the exp is fastmath.h's,
 * which vectorises: libm's expf, one call per score, was 39% of a tiled
 * forward + backward (perf, AMD EPYC). */
FM_CLONES
static void exp_shifted(vit_real *s, int n, vit_real shift)
{
    for (int j = 0; j < n; j++)
#ifdef VIT_DOUBLE
        s[j] = exp(s[j] - shift);
#else
        s[j] = fm_exp_nonpos(s[j] - shift);
#endif
}

void vit_attn_exp_shifted(vit_real *s, int n, vit_real shift) { exp_shifted(s, n, shift); }

/* The sum of s[n] in double (vectorised: the order of the additions is
 * the vector width's, fixed for a build and a machine). */
FM_CLONES
static double row_sum(const vit_real *s, int n)
{
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++)
        sum += s[j];
    return sum;
}

/* Default tiles: 128 queries x 256 keys.  Measured at n = 1024 and 2048
 * (4 heads of 64, float32): the backward gets about 10% faster from 64 x 128
 * to 128 x 256 (fewer, larger products, less packing per flop) and no
 * faster beyond; the two tiles of scratch are 256 KB per thread.  Changed
 * only by vit_sdpa_tiled_set_tiles. */
#define DEFAULT_TQ 128
#define DEFAULT_TK 256
#define MAX_TILE 4096
static int tile_q = DEFAULT_TQ, tile_k = DEFAULT_TK;

int vit_sdpa_tiled_set_tiles(int tq, int tk)
{
    static const char fn[] = "vit_sdpa_tiled_set_tiles";
    if (tq < 0 || tq > MAX_TILE)
        return vit_fail(VIT_EINVAL, "%s: tile_q must be in [0, %d], got %d", fn, MAX_TILE, tq);
    if (tk < 0 || tk > MAX_TILE)
        return vit_fail(VIT_EINVAL, "%s: tile_k must be in [0, %d], got %d", fn, MAX_TILE, tk);
    tile_q = tq ? tq : DEFAULT_TQ;
    tile_k = tk ? tk : DEFAULT_TK;
    return VIT_OK;
}

/* ---- Choosing the path --------------------------------------------------- */

int vit_sdpa_use_tiled(const vit_sdpa *a)
{
    if (!a || a->n_q < 1 || a->n_k < 1) return 0;
    const char *e = getenv("VIT_SDPA_TILED");
    if (e && !strcmp(e, "0")) return 0;
    if (e && !strcmp(e, "1")) return 1;
    return (double)a->n_q * (double)a->n_k > (double)VIT_SDPA_TILED_THRESHOLD;
}

/* ---- Shapes ------------------------------------------------------------- */

/* Tile geometry of one call: tile sizes clipped to the sequence, tile
 * counts, leading dimensions, and the reals of scratch one thread needs:
 * two [tq, tk] tiles (S or P, and dP or dS) and two rows of tq (running
 * max and sum, or D). */
typedef struct {
    int tq, tk, nqt, nkt, ldq, ldk, ldv, ldo; /* ldo: out and dout */
    size_t slab;
} geo;

static geo geometry(const vit_sdpa *a)
{
    geo g;
    g.tq = tile_q < a->n_q ? tile_q : a->n_q;
    g.tk = tile_k < a->n_k ? tile_k : a->n_k;
    g.nqt = (a->n_q + g.tq - 1) / g.tq;
    g.nkt = (a->n_k + g.tk - 1) / g.tk;
    g.ldq = vit_sdpa_ld_q(a);
    g.ldk = vit_sdpa_ld_k(a);
    g.ldv = vit_sdpa_ld_v(a);
    g.ldo = a->heads * a->d_v;
    g.slab = 2 * (size_t)g.tq * g.tk + 2 * (size_t)g.tq;
    return g;
}

size_t vit_sdpa_tiled_work_size(const vit_sdpa *a)
{
    if (!a || a->n_q < 1 || a->n_k < 1) return 0;
    geo g = geometry(a);
    size_t n;
    if (!vit_mul_size(&n, g.slab, (size_t)vit_threads())) return 0;
    return n;
}

/* ---- Masks -------------------------------------------------------------- */

/* Sets the scores sr[nj] of query i (item b) against keys j0.. that the
 * mask forbids to -infinity, so that exp() gives them weight exactly 0;
 * returns whether any is allowed.  Rows without a mask matrix (no mask, or
 * only causal) take the fast path: a contiguous tail; others go through
 * vit_mask_row / vit_row_allows (attention_internal.h), as in attention.c. */
static int mask_scores(const vit_sdpa *a, int b, int i, int j0, int nj, vit_real *sr)
{
    vit_row_mask rm = vit_mask_row(a, b, i);
    if (!rm.allowed && !rm.valid) {
        int keep = rm.last - j0 + 1; /* keys j0 .. last are allowed */
        for (int c = keep < 0 ? 0 : keep; c < nj; c++) sr[c] = -INFINITY;
        return keep > 0;
    }
    int any = 0;
    for (int c = 0; c < nj; c++) {
        if (vit_row_allows(&rm, j0 + c)) any = 1;
        else sr[c] = -INFINITY;
    }
    return any;
}

/* Index of the first non-finite entry of x[n], or n.  The scan ORs the
 * exponent test over blocks without branching so that it vectorises. */
static size_t first_nonfinite(const vit_real *x, size_t n)
{
#ifdef VIT_DOUBLE
    typedef unsigned long long bits;
    const bits expo = 0x7ff0000000000000ull;
#else
    typedef unsigned int bits;
    const bits expo = 0x7f800000u;
#endif
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        size_t i1 = i0 + 256 < n ? i0 + 256 : n;
        int bad = 0;
        for (size_t i = i0; i < i1; i++) {
            bits u;
            memcpy(&u, x + i, sizeof u);
            bad |= (u & expo) == expo;
        }
        if (bad)
            for (size_t i = i0; i < i1; i++)
                if (!isfinite(x[i])) return i;
    }
    return n;
}

/* ---- Shared tile step ----------------------------------------------------- */

/* Everything a task needs; the fields a pass does not use are NULL. */
typedef struct {
    const vit_sdpa *a;
    geo g;
    vit_real scale;
    const vit_real *q, *k, *v, *dout, *out_in, *lse_in;
    vit_real *out, *lse, *dq, *dk, *dv, *dbias;
    vit_real *work;
    double *scale_parts;     /* backward: [B*H, key tiles] shares of dscale, or NULL */
    atomic_int next_slab;
    atomic_ullong first_bad; /* forward: flat index of a non-finite score */
    int group_mode;          /* backward pass 1: GROUP_* */
} job;

/* Each piece of a vit_parallel call takes its own slab of the work; there
 * are at most as many pieces as threads, and as many slabs. */
static vit_real *take_slab(job *J)
{
    return J->work + (size_t)atomic_fetch_add(&J->next_slab, 1) * J->g.slab;
}

/* s[ni, nj] = scale Q[i0.., :] K[j0.., :]^T + bias block, for pair (b, h). */
static void tile_scores(const job *J, int b, int h, int i0, int ni, int j0, int nj, vit_real *s)
{
    const vit_sdpa *a = J->a;
    const vit_real *qi = J->q + ((size_t)b * a->n_q + i0) * J->g.ldq + (size_t)h * a->d_k;
    const vit_real *kj = J->k + ((size_t)b * a->n_k + j0) * J->g.ldk + (size_t)h * a->d_k;
    vit_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, nj, a->d_k,
             vit_sdpa_scale_of(a, J->scale, h), qi, J->g.ldq,
             kj, J->g.ldk, 0, s, nj);
    if (a->bias) {
        const vit_real *bb = a->bias + (a->bias_heads == 1 ? 0 : (size_t)h * a->n_q * a->n_k);
        for (int r = 0; r < ni; r++) {
            const vit_real *br = bb + (size_t)(i0 + r) * a->n_k + j0;
            vit_real *sr = s + (size_t)r * nj;
            for (int c = 0; c < nj; c++) sr[c] += br[c];
        }
    }
}

/* ---- Forward -------------------------------------------------------------- */

/* One query tile of one pair against every key tile (the online softmax).
 * out rows of the tile hold the running, unnormalised sum.  Returns 0, or
 * 1 after recording a non-finite score. */
static int forward_tile(job *J, int x, int it, vit_real *slab)
{
    const vit_sdpa *a = J->a;
    const geo *g = &J->g;
    const int b = x / a->heads, h = x % a->heads, nq = a->n_q, nk = a->n_k, dv = a->d_v;
    const int i0 = it * g->tq, ni = i0 + g->tq <= nq ? g->tq : nq - i0;
    vit_real *s = slab, *mx = slab + 2 * (size_t)g->tq * g->tk, *l = mx + g->tq;
    vit_real *o = J->out + ((size_t)b * nq + i0) * g->ldo + (size_t)h * dv;
    const vit_real *vb = J->v + (size_t)b * nk * g->ldv + (size_t)h * dv;

    for (int r = 0; r < ni; r++) {
        mx[r] = -INFINITY;
        l[r] = 0;
        memset(o + (size_t)r * g->ldo, 0, (size_t)dv * sizeof *o);
    }
    for (int j0 = 0; j0 < nk; j0 += g->tk) {
        const int nj = j0 + g->tk <= nk ? g->tk : nk - j0;
        tile_scores(J, b, h, i0, ni, j0, nj, s);
        size_t e = first_nonfinite(s, (size_t)ni * nj);
        if (e < (size_t)ni * nj) {
            int r = (int)(e / (size_t)nj), c = (int)(e % (size_t)nj);
            vit_atomic_min(&J->first_bad, (((unsigned long long)x * nq + (unsigned)(i0 + r))
                                       * (unsigned long long)nk) + (unsigned)(j0 + c));
            return 1;
        }
        int any = 0;
        for (int r = 0; r < ni; r++) {
            vit_real *sr = s + (size_t)r * nj;
            if (!mask_scores(a, b, i0 + r, j0, nj, sr)) { /* adds nothing */
                memset(sr, 0, (size_t)nj * sizeof *sr);
                continue;
            }
            any = 1;
            vit_real tmax = -INFINITY;
            for (int c = 0; c < nj; c++) tmax = sr[c] > tmax ? sr[c] : tmax;
            vit_real m_new = tmax > mx[r] ? tmax : mx[r];
            vit_real corr = mx[r] == -INFINITY ? 0 : vit_exp(mx[r] - m_new);
            exp_shifted(sr, nj, m_new); /* m_new is finite: the row allows a key */
            l[r] = l[r] * corr + (vit_real)row_sum(sr, nj);
            if (corr != 1) {
                vit_real *or = o + (size_t)r * g->ldo;
                for (int c = 0; c < dv; c++) or[c] *= corr;
            }
            mx[r] = m_new;
        }
        /* O[ni, dv] += P[ni, nj] V[j0.., dv] */
        if (any)
            vit_gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, dv, nj, 1, s, nj,
                     vb + (size_t)j0 * g->ldv, g->ldv, 1, o, g->ldo);
    }
    vit_real *lse = J->lse + (size_t)x * nq + i0;
    for (int r = 0; r < ni; r++) {
        vit_real *or = o + (size_t)r * g->ldo;
        if (l[r] == 0) { /* fully masked row: zeros, and P = 0 in the backward */
            memset(or, 0, (size_t)dv * sizeof *or);
            lse[r] = -INFINITY;
            continue;
        }
        vit_real inv = (vit_real)1 / l[r];
        for (int c = 0; c < dv; c++) or[c] *= inv;
        lse[r] = mx[r] + vit_log(l[r]);
    }
    return 0;
}

static void forward_tasks(void *ctx, size_t lo, size_t hi)
{
    job *J = ctx;
    vit_real *slab = take_slab(J);
    for (size_t t = lo; t < hi; t++)
        if (forward_tile(J, (int)(t / (size_t)J->g.nqt), (int)(t % (size_t)J->g.nqt), slab))
            return;
}

/* A job on the validated a with the inputs and work every pass uses; the
 * pass sets its own fields, the others stay NULL. */
static void job_init(job *J, const vit_sdpa *a, vit_real scale, const vit_real *q,
                     const vit_real *k, const vit_real *v, vit_real *work)
{
    memset(J, 0, sizeof *J);
    J->a = a;
    J->g = geometry(a);
    J->scale = scale;
    J->q = q; J->k = k; J->v = v;
    J->work = work;
    atomic_init(&J->next_slab, 0);
    atomic_init(&J->first_bad, ULLONG_MAX);
}

/* Allocates the work when the caller passed none. */
static int get_work(const char *fn, const vit_sdpa *a, vit_real **work, vit_real **owned)
{
    *owned = NULL;
    if (*work) return VIT_OK;
    size_t n = vit_sdpa_tiled_work_size(a);
    *owned = malloc(n * sizeof **owned);
    if (!*owned)
        return vit_fail(VIT_ENOMEM, "%s: cannot allocate %zu reals of work", fn, n);
    *work = *owned;
    return VIT_OK;
}

/* q [B, n_q, H*d_k], k [B, n_k, H*d_k], v [B, n_k, H*d_v]
 *   -> out [B, n_q, H*d_v], lse [B, H, n_q]. */
int vit_sdpa_tiled_forward(const vit_sdpa *a, vit_real *out, vit_real *lse,
                           const vit_real *q, const vit_real *k, const vit_real *v,
                           vit_real *work)
{
    static const char fn[] = "vit_sdpa_tiled_forward";
    vit_real scale = 0;
    int rc;
    if ((rc = vit_sdpa_validate(fn, a, &scale)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_forward(fn, out, lse, "lse", q, k, v)) != VIT_OK) return rc;
    vit_real *owned;
    if ((rc = get_work(fn, a, &work, &owned)) != VIT_OK) return rc;

    job J;
    job_init(&J, a, scale, q, k, v, work);
    J.out = out; J.lse = lse;
    const size_t pairs = (size_t)a->batch * a->heads;
    double flops = 2.0 * (double)pairs * a->n_q * (double)a->n_k * (a->d_k + a->d_v);
    vit_parallel(vit_threads_for(flops), pairs * J.g.nqt, forward_tasks, &J);
    free(owned);

    unsigned long long f = atomic_load(&J.first_bad);
    if (f != ULLONG_MAX) {
        unsigned long long nk = (unsigned long long)a->n_k, nq = (unsigned long long)a->n_q;
        unsigned long long row = f / nk, x = row / nq;
        return vit_fail(VIT_ENUM, "%s: non-finite score at item %d, head %d, query %d, key %d "
                        "(check q, k, bias)", fn, (int)(x / (unsigned)a->heads),
                        (int)(x % (unsigned)a->heads), (int)(row % nq), (int)(f % nk));
    }
    return VIT_OK;
}

/* ---- Backward ------------------------------------------------------------- */

enum { DO_KV = 1, DO_Q = 2 };

/* One (query tile, key tile) block of pair x: recompute P, then the
 * gradients asked for by `what` (DO_KV: dv, dk, dbias; DO_Q: dq). */
static void backward_tile(const job *J, int x, int it, int jt, int what, vit_real *slab)
{
    const vit_sdpa *a = J->a;
    const geo *g = &J->g;
    const int b = x / a->heads, h = x % a->heads, nq = a->n_q, nk = a->n_k;
    const int dkh = a->d_k, dvh = a->d_v;
    const int i0 = it * g->tq, ni = i0 + g->tq <= nq ? g->tq : nq - i0;
    const int j0 = jt * g->tk, nj = j0 + g->tk <= nk ? g->tk : nk - j0;
    const vit_real *lse = J->lse_in + (size_t)x * nq + i0;

    /* Skip a block no query may attend (causal blocks above the diagonal,
     * padding): its P and dS are zero. */
    int any = 0;
    for (int r = 0; r < ni && !any; r++) {
        if (lse[r] == -INFINITY) continue;
        vit_row_mask rm = vit_mask_row(a, b, i0 + r);
        for (int c = 0; c < nj && !any; c++) any = vit_row_allows(&rm, j0 + c);
    }
    if (!any) return;

    vit_real *p = slab, *ds = slab + (size_t)g->tq * g->tk, *dd = ds + (size_t)g->tq * g->tk;
    tile_scores(J, b, h, i0, ni, j0, nj, p);
    for (int r = 0; r < ni; r++) {
        vit_real *pr = p + (size_t)r * nj;
        if (lse[r] == -INFINITY || !mask_scores(a, b, i0 + r, j0, nj, pr)) {
            memset(pr, 0, (size_t)nj * sizeof *pr);
            continue;
        }
        exp_shifted(pr, nj, lse[r]); /* lse >= the row's max score */
    }
    const size_t qo = ((size_t)b * nq + i0) * g->ldq + (size_t)h * dkh;
    const size_t ko = ((size_t)b * nk + j0) * g->ldk + (size_t)h * dkh;
    const size_t vo = ((size_t)b * nk + j0) * g->ldv + (size_t)h * dvh;
    const size_t oo = ((size_t)b * nq + i0) * g->ldo + (size_t)h * dvh;
    const int kv = what & DO_KV, wq = (what & DO_Q) && J->dq;
    const vit_real scale = vit_sdpa_scale_of(a, J->scale, h);

    /* dV_j[nj, dv] += P^T dO_i */
    if (kv && J->dv)
        vit_gemm(CblasRowMajor, CblasTrans, CblasNoTrans, nj, dvh, ni, 1, p, nj,
                 J->dout + oo, g->ldo, 1, J->dv + vo, g->ldv);
    if (!(wq || (kv && (J->dk || J->dbias || J->scale_parts)))) return;

    /* D_r = dO_r . O_r, then dS = P .* (dO V_j^T - D). */
    for (int r = 0; r < ni; r++) {
        const vit_real *dor = J->dout + oo + (size_t)r * g->ldo;
        const vit_real *or = J->out_in + oo + (size_t)r * g->ldo;
        double d = 0.0;
        for (int c = 0; c < dvh; c++) d += (double)dor[c] * or[c];
        dd[r] = (vit_real)d;
    }
    vit_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, nj, dvh, 1, J->dout + oo, g->ldo,
             J->v + vo, g->ldv, 0, ds, nj);
    for (int r = 0; r < ni; r++) {
        const vit_real *pr = p + (size_t)r * nj;
        vit_real *dr = ds + (size_t)r * nj;
        for (int c = 0; c < nj; c++) dr[c] = pr[c] * (dr[c] - dd[r]);
    }
    if (kv && J->dbias) {
        vit_real *db = J->dbias + (a->bias_heads == 1 ? 0 : (size_t)h * nq * nk);
        for (int r = 0; r < ni; r++) {
            vit_real *dbr = db + (size_t)(i0 + r) * nk + j0;
            const vit_real *dr = ds + (size_t)r * nj;
            for (int c = 0; c < nj; c++) dbr[c] += dr[c];
        }
    }
    /* This block's share of dscale, summed over the query tiles in order
     * into the (pair, key tile) slot that only this task touches. */
    if (kv && J->scale_parts)
        J->scale_parts[(size_t)x * g->nkt + jt] +=
            vit_attn_scale_grad(0, ds, J->q + qo, J->k + ko, ni, nj, dkh, g->ldq,
                                g->ldk);
    /* dK_j[nj, dk] += s dS^T Q_i */
    if (kv && J->dk)
        vit_gemm(CblasRowMajor, CblasTrans, CblasNoTrans, nj, dkh, ni, scale, ds, nj,
                 J->q + qo, g->ldq, 1, J->dk + ko, g->ldk);
    /* dQ_i[ni, dk] += s dS K_j */
    if (wq)
        vit_gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, dkh, nj, scale, ds, nj,
                 J->k + ko, g->ldk, 1, J->dq + qo, g->ldq);
}

/* Fused schedule: tasks are pairs; key tiles outer so that each dK_j, dV_j
 * sums its query tiles in order and each dQ_i its key tiles in order, as
 * the split schedule does. */
static void backward_pairs(void *ctx, size_t lo, size_t hi)
{
    job *J = ctx;
    vit_real *slab = take_slab(J);
    for (size_t x = lo; x < hi; x++)
        for (int jt = 0; jt < J->g.nkt; jt++)
            for (int it = 0; it < J->g.nqt; it++)
                backward_tile(J, (int)x, it, jt, DO_KV | DO_Q, slab);
}

/* Pass 1 groups: the pairs that share a dbias slice run in one task, in
 * pair order.  GROUP_PAIR: no dbias, one pair; GROUP_HEAD: dbias per head,
 * the B pairs of head h; GROUP_ALL: one dbias, every pair. */
enum { GROUP_PAIR, GROUP_HEAD, GROUP_ALL };

static void group_shape(const job *J, int *groups, int *size)
{
    const int B = J->a->batch, H = J->a->heads;
    switch (J->group_mode) {
    case GROUP_HEAD: *groups = H; *size = B; break;
    case GROUP_ALL: *groups = 1; *size = B * H; break;
    default: *groups = B * H; *size = 1; break;
    }
}

static int group_pair(const job *J, int grp, int idx)
{
    switch (J->group_mode) {
    case GROUP_HEAD: return idx * J->a->heads + grp;
    case GROUP_ALL: return idx;
    default: return grp;
    }
}

static void backward_keys(void *ctx, size_t lo, size_t hi)
{
    job *J = ctx;
    vit_real *slab = take_slab(J);
    int groups, size;
    group_shape(J, &groups, &size);
    for (size_t t = lo; t < hi; t++) {
        int grp = (int)(t / (size_t)J->g.nkt), jt = (int)(t % (size_t)J->g.nkt);
        for (int idx = 0; idx < size; idx++)
            for (int it = 0; it < J->g.nqt; it++)
                backward_tile(J, group_pair(J, grp, idx), it, jt, DO_KV, slab);
    }
}

static void backward_queries(void *ctx, size_t lo, size_t hi)
{
    job *J = ctx;
    vit_real *slab = take_slab(J);
    for (size_t t = lo; t < hi; t++)
        for (int jt = 0; jt < J->g.nkt; jt++)
            backward_tile(J, (int)(t / (size_t)J->g.nqt), (int)(t % (size_t)J->g.nqt), jt,
                          DO_Q, slab);
}

int vit_sdpa_tiled_backward(const vit_sdpa *a, vit_real *dq, vit_real *dk, vit_real *dv,
                            vit_real *dbias, const vit_real *dout, const vit_real *out,
                            const vit_real *lse, const vit_real *q, const vit_real *k,
                            const vit_real *v, vit_real *work)
{
    return vit_sdpa_tiled_backward_scale(a, dq, dk, dv, dbias, NULL, dout, out, lse, q, k, v,
                                         work);
}

int vit_sdpa_tiled_backward_scale(const vit_sdpa *a, vit_real *dq, vit_real *dk, vit_real *dv,
                                  vit_real *dbias, vit_real *dscale, const vit_real *dout,
                                  const vit_real *out, const vit_real *lse, const vit_real *q,
                                  const vit_real *k, const vit_real *v, vit_real *work)
{
    static const char fn[] = "vit_sdpa_tiled_backward";
    vit_real scale = 0;
    int rc;
    if ((rc = vit_sdpa_validate(fn, a, &scale)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "dout", dout)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "out", out)) != VIT_OK) return rc;
    if ((rc = vit_check_ptr(fn, "lse", lse)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_qkv(fn, q, k, v)) != VIT_OK) return rc;
    if ((rc = vit_attn_check_dbias(fn, dbias, a->bias_heads, a->heads)) != VIT_OK) return rc;
    if (!dq && !dk && !dv && !dbias && !dscale) return VIT_OK;
    vit_real *owned;
    if ((rc = get_work(fn, a, &work, &owned)) != VIT_OK) return rc;

    job J;
    job_init(&J, a, scale, q, k, v, work);
    J.dout = dout; J.out_in = out; J.lse_in = lse;
    J.dq = dq; J.dk = dk; J.dv = dv; J.dbias = dbias;

    const int B = a->batch, H = a->heads, pairs = B * H;
    if (dscale && !(J.scale_parts = calloc((size_t)pairs * J.g.nkt, sizeof *J.scale_parts))) {
        free(owned);
        return vit_fail(VIT_ENOMEM, "%s: cannot allocate the sums for dscale", fn);
    }
    double flops = 2.0 * pairs * a->n_q * (double)a->n_k * (2.0 * a->d_k + 3.0 * a->d_v);
    int nt = vit_threads_for(flops);
    /* Fused pairs in parallel only when they share no dbias element. */
    int fused_ok = !dbias || (B == 1 && (a->bias_heads == H));
    if (dq && (nt == 1 || (fused_ok && (pairs % nt == 0 || pairs >= 4 * nt)))) {
        vit_parallel(nt, (size_t)pairs, backward_pairs, &J);
    } else {
        J.group_mode = !dbias ? GROUP_PAIR : a->bias_heads == 1 ? GROUP_ALL : GROUP_HEAD;
        if (dk || dv || dbias || dscale) { /* dscale is summed with the key-side pass */
            int groups, size;
            group_shape(&J, &groups, &size);
            vit_parallel(nt, (size_t)groups * J.g.nkt, backward_keys, &J);
        }
        if (dq) {
            atomic_store(&J.next_slab, 0);
            vit_parallel(nt, (size_t)pairs * J.g.nqt, backward_queries, &J);
        }
    }
    vit_attn_add_scale_grads(a, dscale, J.scale_parts, J.g.nkt);
    free(J.scale_parts);
    free(owned);
    return VIT_OK;
}
