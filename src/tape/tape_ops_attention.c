/*
 * The multi-head attention tape ops, forward beside backward: vit_op_mha
 * and vit_op_mha_bias (the score bias an input with a gradient).  Shapes
 * (vit/attention.h): params [vit_mha_param_count], x_q [B, n_q, d_model],
 * x_kv [B, n_k, d_kv], bias [bias_heads, n_q, n_k], y [B, n_q, d_model].
 */
#include <stdint.h>

#include "error.h"
#include "mixed.h"
#include "tape_internal.h"
#include "vit/attention.h"
#include "vit/bf16.h"

/* What the backward keeps: the layer (cfg, copied) and the forward's cache
 * (vit_mha_cache_size reals: projections, context, maps), as float or, for
 * vit_op_block in mixed precision, rounded to bf16 (cache_bf16; cache
 * NULL): the backward reads the projections and the context only as
 * operands of products, and the maps P in dV = P^T dO and dS = P (dP -
 * rowsum(P dP)), each a relative change of at most 2^-8 per value. */
typedef struct mha_ctx {
    vit_mha cfg;
    vit_real *cache;
    uint16_t *cache_bf16;
} mha_ctx;

#ifndef VIT_DOUBLE
/* Items per piece of a layer whose cache is kept in bf16: about
 * VIT_TAPE_PIECE_BYTES of float cache (8 images of the large model, whose
 * slice's cache is 8 MB), in the forward and in the backward. */
static int piece_items(const vit_mha *m)
{
    size_t per = vit_mha_cache_size(m) / (size_t)m->batch * sizeof(vit_real);
    size_t items = VIT_TAPE_PIECE_BYTES / (per ? per : 1);
    return items < 1 ? 1 : items > (size_t)m->batch ? m->batch : (int)items;
}

/* The layer of items b0 .. b0 + per (fewer at the batch's end): the
 * per-item masks start at b0's. */
static vit_mha piece_of(const vit_mha *m, int b0, int per)
{
    vit_mha part = *m;
    part.batch = m->batch - b0 < per ? m->batch - b0 : per;
    if (m->mask.allowed && m->mask.allowed_per_item)
        part.mask.allowed += (size_t)b0 * m->n_q * m->n_k;
    if (m->mask.key_valid)
        part.mask.key_valid += (size_t)b0 * m->n_k;
    return part;
}

/* Between the float32 cache f of items b0 .. (their layer: part) and the
 * bf16 cache c16 of the whole batch (layer m): to_bf16 rounds f into its
 * place in c16, else f is expanded from there.  The cache's sections (the
 * projections, as one fused block or Q then [K | V], the context, the
 * maps) are each batch-major, so a piece's share of each is one run. */
static void copy_piece(const vit_mha *m, const vit_mha *part, uint16_t *c16, int fused, int b0,
                       vit_real *f, int to_bf16)
{
    size_t B = (size_t)m->batch, nb = (size_t)part->batch, d = (size_t)m->d_model;
    size_t nq = (size_t)m->n_q, nk = (size_t)m->n_k, maps = (size_t)m->heads * nq * nk;
    size_t run[4]; /* each section's reals per item */
    int n = 0;
    if (fused) {
        run[n++] = nq * 3 * d;
    } else {
        run[n++] = nq * d;
        run[n++] = nk * 2 * d;
    }
    run[n++] = nq * d;
    run[n++] = maps;
    for (int i = 0; i < n; i++) {
        if (to_bf16)
            vit_bf16_from_floats(c16 + (size_t)b0 * run[i], f, nb * run[i]);
        else
            vit_bf16_to_floats(f, c16 + (size_t)b0 * run[i], nb * run[i]);
        c16 += B * run[i];
        f += nb * run[i];
    }
}

/* The forward of a layer whose cache is kept in bf16 (c16), piece by
 * piece of the batch: each piece's float cache in the tape's scratch,
 * then rounded into its place. */
static int forward_pieces(vit_tape *t, const vit_mha *m, const vit_real *params, vit_real *y,
                          const vit_real *xq, const vit_real *xkv, uint16_t *c16)
{
    int fused = xq == xkv, per = piece_items(m);
    size_t d = (size_t)m->d_model, dk = (size_t)(m->d_kv ? m->d_kv : m->d_model);
    size_t nq = (size_t)m->n_q, nk = (size_t)m->n_k;
    vit_mha part = piece_of(m, 0, per);
    vit_real *f = vit_tape_scratch(t, vit_mha_cache_size(&part));
    if (!f)
        return vit_tape_status(t);
    for (int b0 = 0; b0 < m->batch; b0 += per) {
        part = piece_of(m, b0, per);
        const vit_real *pq = xq + (size_t)b0 * nq * d;
        int rc = vit_mha_forward(&part, params, y + (size_t)b0 * nq * d, pq,
                                 fused ? pq : xkv + (size_t)b0 * nk * dk, f);
        if (rc != VIT_OK)
            return rc;
        copy_piece(m, &part, c16, fused, b0, f, 1);
    }
    return VIT_OK;
}

/* back_mha for a cache kept in bf16: the layer's backward piece by piece
 * of the batch (every gradient it writes accumulates, and each item's
 * rows, maps and masks are its own). */
static int back_mha_pieces(vit_tape *t, const vit_op_rec *r, const vit_real *xq,
                           const vit_real *xkv, vit_real *dp, vit_real *dq, vit_real *dkv,
                           vit_real *dbias)
{
    const mha_ctx *c = r->ctx;
    const vit_mha *m = &c->cfg;
    int fused = xq == xkv, per = piece_items(m);
    size_t d = (size_t)m->d_model, dk = (size_t)(m->d_kv ? m->d_kv : m->d_model);
    size_t nq = (size_t)m->n_q, nk = (size_t)m->n_k;
    vit_mha part = piece_of(m, 0, per);
    void *lease;
    vit_real *f = vit_tape_lease(t, vit_mha_cache_size(&part), &lease);
    vit_real *work = f ? vit_tape_scratch(t, vit_mha_work_size(&part)) : NULL;
    int rc = work ? VIT_OK : vit_tape_status(t);
    for (int b0 = 0; b0 < m->batch && rc == VIT_OK; b0 += per) {
        part = piece_of(m, b0, per);
        copy_piece(m, &part, c->cache_bf16, fused, b0, f, 0);
        const vit_real *pq = xq + (size_t)b0 * nq * d;
        const vit_real *pkv = fused ? pq : xkv + (size_t)b0 * nk * dk;
        vit_real *gq = dq ? dq + (size_t)b0 * nq * d : NULL;
        vit_real *gkv = dkv == dq ? gq : dkv ? dkv + (size_t)b0 * nk * dk : NULL;
        rc = vit_mha_backward(&part, r->in[0]->data, dp, gq, gkv, dbias,
                              r->out->grad + (size_t)b0 * nq * d, pq, pkv, f, work);
    }
    vit_tape_lease_end(lease);
    return rc;
}
#endif

/* in: params, x_q, x_kv and, for vit_op_mha_bias, the bias; all four
 * gradients accumulated (x_kv's into x_q's for self-attention). */
static int back_mha(vit_tape *t, const vit_op_rec *r)
{
    const mha_ctx *c = r->ctx;
    vit_real *dp = vit_tape_grad_acc(t, r->in[0]);
    vit_real *dq = vit_tape_grad_acc(t, r->in[1]);
    vit_real *dkv = r->in[2] == r->in[1] ? dq : vit_tape_grad_acc(t, r->in[2]);
    vit_real *dbias = r->n_in > 3 ? vit_tape_grad_acc(t, r->in[3]) : NULL;
    if (vit_tape_status(t))
        return vit_tape_status(t);
    /* The inputs' values (a bf16-kept input as float; one tensor read
     * once, so that self-attention still finds one pointer). */
    void *lq, *lkv = NULL;
    const vit_real *xq = vit_tape_values(t, r->in[1], &lq);
    const vit_real *xkv = r->in[2] == r->in[1] ? xq : vit_tape_values(t, r->in[2], &lkv);
    int rc = vit_tape_status(t);
#ifndef VIT_DOUBLE
    if (!c->cache && xq && xkv)
        rc = back_mha_pieces(t, r, xq, xkv, dp, dq, dkv, dbias);
    else
#endif
    if (xq && xkv) {
        /* One scratch for every layer: the backwards run one at a time. */
        vit_real *work = vit_tape_scratch(t, vit_mha_work_size(&c->cfg));
        rc = work ? vit_mha_backward(&c->cfg, r->in[0]->data, dp, dq, dkv, dbias, r->out->grad,
                                     xq, xkv, c->cache, work)
                  : vit_tape_status(t);
    }
    vit_tape_lease_end(lq);
    vit_tape_lease_end(lkv);
    return rc;
}

static const vit_op_def mha_def = {"vit_op_mha", back_mha, NULL, 0};
static const vit_op_def mha_bias_def = {"vit_op_mha_bias", back_mha, NULL, 0};

/* Whether the layer keeps attention maps: not on the tiled core. */
static int has_maps(const vit_mha *cfg)
{
    vit_sdpa core = {.batch = cfg->batch, .heads = cfg->heads, .n_q = cfg->n_q, .n_k = cfg->n_k,
                     .d_k = cfg->d_model / cfg->heads, .d_v = cfg->d_model / cfg->heads};
    return !vit_sdpa_use_tiled(&core);
}

/* The attention maps inside the cache, or NULL for a layer on the tiled
 * core (which keeps none). */
static vit_real *maps_of(const vit_mha *cfg, vit_real *cache)
{
    return has_maps(cfg) ? vit_mha_probs(cfg, cache) : NULL;
}

static vit_tensor *mha_op(vit_tape *t, const vit_op_def *def, const vit_mha *cfg, int n,
                          vit_tensor *const *in, vit_real **probs, int keep)
{
    const char *fn = def->name;
    if (!vit_tape_begin(t, fn, n, in))
        return NULL;
    if (!cfg)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: cfg is NULL", fn));
    int rc = vit_mha_check(cfg);
    if (rc)
        return vit_tape_error(t, rc);
    const vit_tensor *params = in[0], *x_q = in[1], *x_kv = in[2];
    int d_kv = cfg->d_kv ? cfg->d_kv : cfg->d_model;
    const size_t np = vit_mha_param_count(cfg);
    if (np > INT32_MAX)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: %zu parameters exceed a tape "
                                          "dimension", fn, np));
    if (vit_tape_check_shape(t, fn, "params", params, "[vit_mha_param_count(cfg)]", 1,
                             (int[]){(int)np})
        || vit_tape_check_shape(t, fn, "x_q", x_q, "[batch, n_q, d_model]", 3,
                                (int[]){cfg->batch, cfg->n_q, cfg->d_model})
        || vit_tape_check_shape(t, fn, "x_kv", x_kv, "[batch, n_k, d_kv]", 3,
                                (int[]){cfg->batch, cfg->n_k, d_kv}))
        return NULL;
    int shape[3] = {cfg->batch, cfg->n_q, cfg->d_model};
    vit_tensor *y = vit_tape_output_kept(t, 3, shape, vit_tape_wants_grad(t, n, in), keep);
    if (!y)
        return NULL;
    /* The maps a caller asks for outlive the op even in no-grad mode.  A
     * cache kept in bf16 (not asked for maps, not on the tiled core, whose
     * log-sum-exp would not bear the rounding) is computed a piece of the
     * batch at a time in the scratch (forward_pieces). */
    size_t nc = vit_mha_cache_size(cfg);
    int half = keep != VIT_KEEP_FLOAT && !probs && y->requires_grad && vit_mixed_on()
            && has_maps(cfg);
    mha_ctx c = {*cfg, NULL, NULL};
#ifdef VIT_DOUBLE
    (void)half; /* no bf16 in the float64 library */
#else
    if (half) { /* the float cache a piece at a time (forward_pieces) */
        size_t bytes;
        if (!vit_mul_size(&bytes, nc, sizeof *c.cache_bf16)
            || !(c.cache_bf16 = vit_tape_alloc(t, bytes)))
            return vit_tape_error(t, VIT_ENOMEM);
        rc = forward_pieces(t, cfg, params->data, y->data, x_q->data, x_kv->data, c.cache_bf16);
    } else
#endif
    {
        c.cache = probs && !vit_tape_grad_enabled(t) ? vit_tape_reals(t, nc)
                : vit_tape_saved(t, nc);
        if (!c.cache)
            return NULL;
        rc = vit_mha_forward(cfg, params->data, y->data, x_q->data, x_kv->data, c.cache);
    }
    if (!vit_tape_record(t, def, rc, y, n, in, &c, sizeof c))
        return NULL;
    if (probs)
        *probs = maps_of(cfg, c.cache);
    return y;
}

vit_tensor *vit_op_mha(vit_tape *t, const vit_mha *cfg, vit_tensor *params, vit_tensor *x_q,
                       vit_tensor *x_kv, vit_real **probs)
{
    return vit_tape_mha_kept(t, cfg, params, x_q, x_kv, probs, VIT_KEEP_FLOAT);
}

vit_tensor *vit_tape_mha_kept(vit_tape *t, const vit_mha *cfg, vit_tensor *params,
                              vit_tensor *x_q, vit_tensor *x_kv, vit_real **probs, int keep)
{
    vit_tensor *in[3] = {params, x_q, x_kv};
    return mha_op(t, &mha_def, cfg, 3, in, probs, keep);
}

vit_tensor *vit_op_mha_bias(vit_tape *t, const vit_mha *cfg, vit_tensor *params,
                            vit_tensor *x_q, vit_tensor *x_kv, vit_tensor *bias, vit_real **probs)
{
    return vit_tape_mha_bias_kept(t, cfg, params, x_q, x_kv, bias, probs, VIT_KEEP_FLOAT);
}

vit_tensor *vit_tape_mha_bias_kept(vit_tape *t, const vit_mha *cfg, vit_tensor *params,
                                   vit_tensor *x_q, vit_tensor *x_kv, vit_tensor *bias,
                                   vit_real **probs, int keep)
{
    const char *fn = mha_bias_def.name;
    vit_tensor *in[4] = {params, x_q, x_kv, bias};
    if (!vit_tape_begin(t, fn, 4, in))
        return NULL;
    if (!cfg)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: cfg is NULL", fn));
    if (cfg->bias_heads != 1 && cfg->bias_heads != cfg->heads)
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "%s: cfg->bias_heads must be 1 or heads (%d), got %d", fn, cfg->heads,
            cfg->bias_heads));
    if (vit_tape_check_shape(t, fn, "bias", bias, "[bias_heads, n_q, n_k]", 3,
                             (int[]){cfg->bias_heads, cfg->n_q, cfg->n_k}))
        return NULL;
    vit_mha m = *cfg;
    m.bias = bias->data;
    return mha_op(t, &mha_bias_def, &m, 4, in, probs, keep);
}
