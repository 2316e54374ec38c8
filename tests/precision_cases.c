/* The computations test_precision runs in both precisions: this file is
 * compiled once with VIT_DOUBLE and once without; see precision_cases.h. */
#include "precision_cases.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit/activations.h"
#include "vit/attention.h"
#include "vit/embeddings.h"
#include "vit/layernorm.h"
#include "vit/linear.h"
#include "vit/loss.h"
#include "vit/model.h"
#include "vit/tape.h"

/* What the cases emit to: this copy's vit_real, widened by emit_wide. */
typedef void (*real_emit_fn)(void *ctx, const char *name, const vit_real *v, size_t n);

#define TRY(e) do { rc = (e); if (rc != VIT_OK) goto done; } while (0)

/* ---- Inputs ------------------------------------------------------------ */

static double pc_uniform(uint64_t *seed)
{
    /* splitmix64, the same stream in both builds */
    uint64_t z = (*seed += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* v[i] = scale * k / 2^16 with integer k in [-2^16, 2^16].  17 significant
 * bits fit float32's 24, and scale is a power of two, so every value is
 * exact in both builds.  The grid is deliberately finer than k/256: with
 * 8-bit inputs every product and short sum is itself exact in float32, and
 * a GEMM would agree bit for bit without exercising any rounding. */
static void pc_fill(vit_real *v, size_t n, uint64_t seed, double scale)
{
    for (size_t i = 0; i < n; i++) {
        long k = (long)(pc_uniform(&seed) * 131073.0) - 65536;
        v[i] = (vit_real)(scale * (double)k / 65536.0);
    }
}

/* All buffers of a case, freed together. */
typedef struct {
    void *p[24];
    int count;
} pool;

static vit_real *pool_zeros(pool *pl, size_t n)
{
    if (pl->count == (int)(sizeof pl->p / sizeof pl->p[0]))
        return NULL;
    vit_real *v = calloc(n, sizeof *v);
    if (v)
        pl->p[pl->count++] = v;
    return v;
}

static void pool_free(pool *pl)
{
    for (int i = 0; i < pl->count; i++)
        free(pl->p[i]);
    pl->count = 0;
}

/* Allocates zeroed buffers or jumps to done with VIT_ENOMEM. */
#define ALLOC(var, n) do { if (!((var) = pool_zeros(&pl, (n)))) { rc = VIT_ENOMEM; goto done; } } while (0)

/* ---- Cases -------------------------------------------------------------- */

static int case_linear(real_emit_fn emit, void *ctx)
{
    enum { N = 8, IN = 48, OUT = 24 };
    pool pl = {0};
    int rc = VIT_OK;
    vit_real *x, *W, *b, *y, *dy, *dx, *dW, *db;
    ALLOC(x, N * IN); ALLOC(W, IN * OUT); ALLOC(b, OUT); ALLOC(y, N * OUT);
    ALLOC(dy, N * OUT); ALLOC(dx, N * IN); ALLOC(dW, IN * OUT); ALLOC(db, OUT);
    pc_fill(x, N * IN, 101, 1.0);
    pc_fill(W, IN * OUT, 102, 0.25);
    pc_fill(b, OUT, 103, 1.0);
    pc_fill(dy, N * OUT, 104, 1.0);
    TRY(vit_linear_forward(y, x, W, b, N, IN, OUT));
    TRY(vit_linear_backward(dx, dW, db, dy, x, W, N, IN, OUT));
    emit(ctx, "linear.y", y, N * OUT);
    emit(ctx, "linear.dx", dx, N * IN);
    emit(ctx, "linear.dW", dW, IN * OUT);
    emit(ctx, "linear.db", db, OUT);
done:
    pool_free(&pl);
    return rc;
}

static int case_layernorm(real_emit_fn emit, void *ctx)
{
    enum { N = 8, D = 48 };
    /* 2^-16 instead of VIT_LAYERNORM_EPS: exact in both builds. */
    const vit_real eps = (vit_real)(1.0 / 65536.0);
    pool pl = {0};
    int rc = VIT_OK;
    vit_real *x, *g, *bt, *y, *mean, *rstd, *dy, *dx, *dg, *db;
    ALLOC(x, N * D); ALLOC(g, D); ALLOC(bt, D); ALLOC(y, N * D); ALLOC(mean, N);
    ALLOC(rstd, N); ALLOC(dy, N * D); ALLOC(dx, N * D); ALLOC(dg, D); ALLOC(db, D);
    pc_fill(x, N * D, 201, 2.0);
    for (int i = 0; i < N; i++) /* row offsets up to 28: mean far from 0 */
        for (int j = 0; j < D; j++)
            x[i * D + j] += (vit_real)(4 * i);
    pc_fill(g, D, 202, 0.5);
    for (int j = 0; j < D; j++)
        g[j] += 1;
    pc_fill(bt, D, 203, 0.5);
    pc_fill(dy, N * D, 204, 1.0);
    TRY(vit_layernorm_forward(y, mean, rstd, x, g, bt, N, D, eps));
    TRY(vit_layernorm_backward(dx, dg, db, dy, x, mean, rstd, g, N, D));
    emit(ctx, "layernorm.y", y, N * D);
    emit(ctx, "layernorm.mean", mean, N);
    emit(ctx, "layernorm.rstd", rstd, N);
    emit(ctx, "layernorm.dx", dx, N * D);
    emit(ctx, "layernorm.dgamma", dg, D);
    emit(ctx, "layernorm.dbeta", db, D);
done:
    pool_free(&pl);
    return rc;
}

static int case_gelu(real_emit_fn emit, void *ctx)
{
    enum { N = 128 };
    pool pl = {0};
    int rc = VIT_OK;
    vit_real *x, *y, *dy, *dx;
    ALLOC(x, N); ALLOC(y, N); ALLOC(dy, N); ALLOC(dx, N);
    pc_fill(x, N, 301, 4.0);
    pc_fill(dy, N, 302, 1.0);
    TRY(vit_gelu_forward(y, x, N));
    TRY(vit_gelu_backward(dx, dy, x, N));
    emit(ctx, "gelu.y", y, N);
    emit(ctx, "gelu.dx", dx, N);
done:
    pool_free(&pl);
    return rc;
}

static int case_softmax(real_emit_fn emit, void *ctx)
{
    enum { R = 8, C = 16 };
    pool pl = {0};
    int rc = VIT_OK;
    vit_real *x, *y, *dy, *dx;
    ALLOC(x, R * C); ALLOC(y, R * C); ALLOC(dy, R * C); ALLOC(dx, R * C);
    pc_fill(x, R * C, 401, 8.0);
    /* A few masked entries, and a fully masked last row. */
    x[1 * C + 3] = -INFINITY;
    for (int j = 0; j < C; j += 2)
        x[5 * C + j] = -INFINITY;
    for (int j = 0; j < C; j++)
        x[(R - 1) * C + j] = -INFINITY;
    pc_fill(dy, R * C, 402, 1.0);
    TRY(vit_softmax_forward(y, x, R, C));
    TRY(vit_softmax_backward(dx, dy, y, R, C));
    emit(ctx, "softmax.y", y, R * C);
    emit(ctx, "softmax.dx", dx, R * C);
done:
    pool_free(&pl);
    return rc;
}

static int case_cross_entropy(real_emit_fn emit, void *ctx)
{
    enum { N = 8, C = 10 };
    pool pl = {0};
    int rc = VIT_OK;
    int labels[N];
    vit_real *logits, *probs, *dl, loss = 0;
    ALLOC(logits, N * C); ALLOC(probs, N * C); ALLOC(dl, N * C);
    pc_fill(logits, N * C, 501, 4.0);
    for (int i = 0; i < N; i++)
        labels[i] = (i * 7 + 2) % C;
    const vit_real smoothing = (vit_real)0.125; /* exact */
    TRY(vit_cross_entropy_forward(&loss, probs, logits, labels, N, C, smoothing));
    TRY(vit_cross_entropy_backward(dl, probs, labels, N, C, smoothing, 1));
    emit(ctx, "cross_entropy.loss", &loss, 1);
    emit(ctx, "cross_entropy.probs", probs, N * C);
    emit(ctx, "cross_entropy.dlogits", dl, N * C);
done:
    pool_free(&pl);
    return rc;
}

static int case_patch_embed(real_emit_fn emit, void *ctx)
{
    const vit_patch_shape s = {.batch = 2, .height = 8, .width = 8, .channels = 3,
                               .patch = 4, .dim = 16};
    const size_t npix = 2 * 8 * 8 * 3, K = 4 * 4 * 3, rows = 2 * 4, D = 16;
    pool pl = {0};
    int rc = VIT_OK;
    vit_real *img, *W, *b, *cols, *y, *dy, *dimg, *dW, *db;
    ALLOC(img, npix); ALLOC(W, K * D); ALLOC(b, D); ALLOC(cols, rows * K);
    ALLOC(y, rows * D); ALLOC(dy, rows * D); ALLOC(dimg, npix); ALLOC(dW, K * D);
    ALLOC(db, D);
    pc_fill(img, npix, 601, 1.0);
    pc_fill(W, K * D, 602, 0.25);
    pc_fill(b, D, 603, 1.0);
    pc_fill(dy, rows * D, 604, 1.0);
    TRY(vit_patch_embed_forward(&s, y, cols, img, W, b));
    TRY(vit_patch_embed_backward(&s, dimg, dW, db, dy, cols, W));
    emit(ctx, "patch_embed.y", y, rows * D);
    emit(ctx, "patch_embed.dimg", dimg, npix);
    emit(ctx, "patch_embed.dW", dW, K * D);
    emit(ctx, "patch_embed.db", db, D);
done:
    pool_free(&pl);
    return rc;
}

/* Self-attention with biases, a causal mask and padding keys in item 1. */
static int case_mha(real_emit_fn emit, void *ctx)
{
    enum { B = 2, T = 6, D = 16, H = 4 };
    static const unsigned char key_valid[B * T] = {1, 1, 1, 1, 1, 1,
                                                   1, 1, 1, 1, 0, 0};
    vit_mha m;
    memset(&m, 0, sizeof m);
    m.batch = B; m.n_q = T; m.n_k = T; m.d_model = D; m.d_kv = D;
    m.heads = H; m.has_bias = 1; m.scale = 0; /* 1/sqrt(4) = 0.5, exact */
    m.mask.key_valid = key_valid;
    m.mask.causal = 1;

    pool pl = {0};
    int rc = VIT_OK;
    vit_real *params, *grads, *x, *y, *cache, *dy, *dx;
    TRY(vit_mha_check(&m));
    const size_t np = vit_mha_param_count(&m), nc = vit_mha_cache_size(&m);
    ALLOC(params, np); ALLOC(grads, np); ALLOC(cache, nc);
    ALLOC(x, B * T * D); ALLOC(y, B * T * D); ALLOC(dy, B * T * D); ALLOC(dx, B * T * D);
    pc_fill(params, np, 701, 0.5);
    pc_fill(x, B * T * D, 702, 1.0);
    pc_fill(dy, B * T * D, 703, 1.0);
    TRY(vit_mha_forward(&m, params, y, x, x, cache));
    /* Self-attention: one dx receives both the query and key/value paths. */
    TRY(vit_mha_backward(&m, params, grads, dx, dx, NULL, dy, x, x, cache, NULL));

    vit_mha_views g;
    TRY(vit_mha_views_of(&m, grads, &g));
    emit(ctx, "mha.y", y, B * T * D);
    emit(ctx, "mha.probs", vit_mha_probs(&m, cache), (size_t)B * H * T * T);
    emit(ctx, "mha.dx", dx, B * T * D);
    emit(ctx, "mha.dW_QKV", g.w_q_cols, 3 * D * D); /* [D, 3D]: W_Q | W_K | W_V by rows */
    emit(ctx, "mha.dW_O", g.w_o, D * D);
    emit(ctx, "mha.db_Q", g.b_q, D);
    emit(ctx, "mha.db_K", g.b_k, D);
    emit(ctx, "mha.db_V", g.b_v, D);
    emit(ctx, "mha.db_O", g.b_o, D);
done:
    pool_free(&pl);
    return rc;
}

/* The tiled attention core over several tiles (8 queries x 16 keys) with a
 * causal mask and padding keys in item 1: its exp (fastmath's in float32)
 * and its online softmax against the float64 build's. */
static int case_sdpa_tiled(real_emit_fn emit, void *ctx)
{
    enum { B = 2, H = 2, N = 40, DK = 8, DV = 8 };
    static unsigned char key_valid[B * N];
    for (int i = 0; i < B * N; i++)
        key_valid[i] = i < N || i % N < N - 7;
    vit_sdpa a = {.batch = B, .heads = H, .n_q = N, .n_k = N, .d_k = DK, .d_v = DV};
    a.mask.causal = 1;
    a.mask.key_valid = key_valid;
    const size_t nq = (size_t)B * N * H * DK, nv = (size_t)B * N * H * DV;
    pool pl = {0};
    int rc = VIT_OK;
    vit_real *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
    ALLOC(q, nq); ALLOC(k, nq); ALLOC(v, nv); ALLOC(out, nv); ALLOC(lse, B * H * N);
    ALLOC(dout, nv); ALLOC(dq, nq); ALLOC(dk, nq); ALLOC(dv, nv);
    pc_fill(q, nq, 801, 2.0);
    pc_fill(k, nq, 802, 2.0);
    pc_fill(v, nv, 803, 1.0);
    pc_fill(dout, nv, 804, 1.0);
    TRY(vit_sdpa_tiled_set_tiles(8, 16));
    TRY(vit_sdpa_tiled_forward(&a, out, lse, q, k, v, NULL));
    TRY(vit_sdpa_tiled_backward(&a, dq, dk, dv, NULL, dout, out, lse, q, k, v, NULL));
    emit(ctx, "sdpa_tiled.out", out, nv);
    emit(ctx, "sdpa_tiled.lse", lse, B * H * N);
    emit(ctx, "sdpa_tiled.dq", dq, nq);
    emit(ctx, "sdpa_tiled.dk", dk, nq);
    emit(ctx, "sdpa_tiled.dv", dv, nv);
done:
    vit_sdpa_tiled_set_tiles(0, 0);
    pool_free(&pl);
    return rc;
}

/* Windowed attention on an 8 x 8 grid, windows of 4 x 4 shifted by 2 (the
 * region mask), a bias per head, heads of width 16 read out of a fused
 * [B, N, 3D] buffer: in float32 the products of a 16-token window run on
 * the direct kernels (src/kernels/pair_gemm.c), against the float64 build's GEMMs. */
static int case_window_attn(real_emit_fn emit, void *ctx)
{
    enum { B = 2, H = 2, G = 8, M = 4, N = G * G, T = M * M, DH = 16, D = H * DH };
    vit_window_attn w = {.batch = B, .heads = H, .grid_h = G, .grid_w = G, .window_h = M,
                         .window_w = M,
                         .shift_h = 2, .shift_w = 2, .d_k = DH, .d_v = DH, .bias_heads = H,
                         .ld_q = 3 * D, .ld_k = 3 * D, .ld_v = 3 * D};
    const size_t nx = (size_t)B * N * 3 * D, no = (size_t)B * N * D, nb = (size_t)H * T * T;
    pool pl = {0};
    int rc = VIT_OK;
    vit_real *qkv, *bias, *out, *probs, *dout, *dqkv, *dbias;
    ALLOC(qkv, nx); ALLOC(bias, nb); ALLOC(out, no); ALLOC(dout, no); ALLOC(dqkv, nx);
    ALLOC(dbias, nb);
    ALLOC(probs, vit_window_attn_lse_size(&w));
    pc_fill(qkv, nx, 901, 1.0);
    pc_fill(bias, nb, 902, 1.0);
    pc_fill(dout, no, 903, 1.0);
    w.bias = bias;
    TRY(vit_window_attn_forward(&w, out, probs, qkv, qkv + D, qkv + 2 * D));
    TRY(vit_window_attn_backward(&w, dqkv, dqkv + D, dqkv + 2 * D, dbias, dout, probs, qkv,
                                 qkv + D, qkv + 2 * D));
    emit(ctx, "window_attn.out", out, no);
    emit(ctx, "window_attn.dqkv", dqkv, nx);
    emit(ctx, "window_attn.dbias", dbias, nb);
done:
    pool_free(&pl);
    return rc;
}

/* The whole ViT step through the tape (patch embedding, blocks whose MLP
 * ends in vit_op_linear_add, GELU's gradient computed in place, lent
 * gradients, the mean pool) plus a head over token ids built from the
 * other tape ops: softmax(0.5 * mean_valid(E[ids]) * gate) W added to the
 * logits.  One tape on one thread. */
static int case_model(real_emit_fn emit, void *ctx)
{
    enum { B = 3, IMG = 4, K = 3, V = 7, T = 5, D = 8 };
    static const unsigned char valid[B * T] = {1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
    pool pl = {0};
    int rc = VIT_OK;
    vit_model *m = NULL;
    vit_tape *t = vit_tape_new();
    vit_config c;
    vit_config_default(&c);
    c.image_height = c.image_width = IMG;
    c.channels = 1;
    c.classes = K;
    c.patch = 2;
    c.dim = D;
    c.depth = 2;
    c.heads = 2;
    c.mlp = 12;
    c.pool = VIT_POOL_MEAN;
    vit_real *img, *table, *gtable, *gate, *ggate, *W, *gW;
    int labels[B] = {0, 2, 1}, ids[B * T];
    if (!t || !(m = vit_model_new(&c))) {
        rc = VIT_ENOMEM;
        goto done;
    }
    const size_t np = vit_model_param_count(m);
    ALLOC(img, B * IMG * IMG); ALLOC(table, V * D); ALLOC(gtable, V * D);
    ALLOC(gate, B * D); ALLOC(ggate, B * D); ALLOC(W, D * K); ALLOC(gW, D * K);
    pc_fill(vit_model_params(m), np, 801, 0.5);
    pc_fill(img, B * IMG * IMG, 802, 1.0);
    pc_fill(table, V * D, 803, 1.0);
    pc_fill(gate, B * D, 804, 1.0);
    pc_fill(W, D * K, 805, 1.0);
    for (int i = 0; i < B * T; i++)
        ids[i] = (i * 5 + 3) % V;
    vit_model_zero_grads(m);
    vit_tensor *z = vit_model_forward(m, t, img, B, 1);
    vit_tensor *e = vit_op_embedding(t, vit_tape_leaf(t, table, gtable, 2, (int[]){V, D}), ids, 2,
                                     (int[]){B, T});
    vit_tensor *h = vit_op_mul(t, vit_op_masked_mean(t, e, valid),
                               vit_tape_leaf(t, gate, ggate, 2, (int[]){B, D}));
    h = vit_op_softmax(t, vit_op_scale(t, h, (vit_real)0.5));
    vit_tensor *z2 = vit_op_linear(t, h, vit_tape_leaf(t, W, gW, 2, (int[]){D, K}), NULL);
    vit_tensor *loss = vit_op_cross_entropy(t, vit_op_add(t, z, z2), labels, (vit_real)0.1, NULL);
    if (!loss) {
        rc = vit_tape_status(t);
        goto done;
    }
    TRY(vit_tape_backward(t, loss));
    emit(ctx, "model.logits", z->data, B * K);
    emit(ctx, "model.loss", loss->data, 1);
    emit(ctx, "model.dparams", vit_model_grads(m), np);
    emit(ctx, "model.dtable", gtable, V * D);
    emit(ctx, "model.dgate", ggate, B * D);
    emit(ctx, "model.dW", gW, D * K);
done:
    vit_model_free(m);
    vit_tape_free(t);
    pool_free(&pl);
    return rc;
}

/* ---- Table -------------------------------------------------------------- */

static const struct {
    const char *name;
    int (*run)(real_emit_fn, void *);
} cases[] = {
    {"linear", case_linear},
    {"layernorm", case_layernorm},
    {"gelu", case_gelu},
    {"softmax", case_softmax},
    {"cross_entropy", case_cross_entropy},
    {"patch_embed", case_patch_embed},
    {"mha", case_mha},
    {"sdpa_tiled", case_sdpa_tiled},
    {"window_attn", case_window_attn},
    {"model", case_model},
};

static int case_count(void) { return (int)(sizeof cases / sizeof cases[0]); }

static const char *case_name(int i)
{
    return i >= 0 && i < case_count() ? cases[i].name : NULL;
}

/* The caller's double-typed emit, and the first allocation failure. */
typedef struct {
    pc_emit_fn emit;
    void *ctx;
    int nomem;
} wide_sink;

static void emit_wide(void *ctx, const char *name, const vit_real *v, size_t n)
{
    wide_sink *w = ctx;
    double *d = malloc((n ? n : 1) * sizeof *d);
    if (!d) {
        w->nomem = 1;
        return;
    }
    for (size_t i = 0; i < n; i++)
        d[i] = (double)v[i];
    w->emit(w->ctx, name, d, n);
    free(d);
}

static int run_case(int i, pc_emit_fn emit, void *ctx, char *err, size_t errlen)
{
    wide_sink w = {emit, ctx, 0};
    if (i < 0 || i >= case_count()) {
        snprintf(err, errlen, "VIT_EINVAL: no case %d", i);
        return VIT_EINVAL;
    }
    int rc = cases[i].run(emit_wide, &w);
    if (rc != VIT_OK)
        snprintf(err, errlen, "%s: %s", vit_status_name(rc), vit_last_error());
    else if (w.nomem)
        snprintf(err, errlen, "VIT_ENOMEM: out of memory widening a tensor");
    return rc != VIT_OK ? rc : w.nomem ? VIT_ENOMEM : VIT_OK;
}

#ifdef VIT_DOUBLE
const pc_build pc_float64 =
#else
const pc_build pc_float32 =
#endif
    {VIT_REAL_NAME, sizeof(vit_real), vit_real_size, vit_version,
     case_count, case_name, run_case};
