/*
 * The Vision Transformer as forward code on the tape.  The backward comes
 * from the kernels through vit_tape_backward().
 *
 * Parameters are one flat buffer whose pieces, their shapes, init and decay
 * are the rows of the tensor table (model_tensors.c), laid out in its order:
 *   stem.w [9*C, S]  stem.b [S]  (stem = S > 0 only)
 *   stem2.w [16*S, S2]  stem2.b [S2]  (stem2 = S2 > 0 only)
 *   patch.w [P*P*C', D]  patch.b [D]  cls [D]  pos [T, D]   (C' = S2, S or C)
 *   blocks.L.{ln1.g, ln1.b, attn.{w_qkv, w_o, b_qkv, b_o, tau (lsa)}, ln2.g, ln2.b,
 *             mlp.{w1, b1, w2, b2}}
 *   ln.g, ln.b [D]  head.w [D, K]  head.b [K]
 * The attention weights are contiguous in the layout vit_mha expects, so one
 * leaf over that range feeds vit_op_mha.
 */
#include "vit/model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argmax.h"
#include "error.h"
#include "mixed.h"
#include "model_tensors.h"
#include "threads.h"
#include "vit/activations.h"
#include "vit/attention.h"
#include "vit/bf16.h"
#include "vit/block.h"
#include "vit/linear.h"
#include "vit/local_conv.h"

/* A block's tensor indices, by row id (the embedding and end rows unused). */
typedef struct block_ix {
    int ix[VIT_MT_ROWS];
} block_ix;

/* One slice of vit_model_train_grads: its tape, its gradient buffer (slice
 * 0 uses the model's own), and what its run left behind.  The message is
 * copied here because vit_last_error() is per thread. */
struct slice {
    vit_tape *tape;
    vit_real *grads;
    double loss_sum;
    int correct, rc;
    char msg[320];
};

struct vit_model {
    vit_config cfg;
    vit_mha mha;             /* the self-attention shape; batch set per forward */
    unsigned char *no_self;  /* lsa: the [T, T] no-self mask mha.mask points at */
    vit_patch_shape patch;
    int tokens;              /* T = patches + 1 */
    vit_params *P;           /* the named tensors, their init and decay, both buffers */
    size_t nparams;
    vit_real *params, *grads; /* P's buffers */
    int ix[VIT_MT_ROWS];     /* the embeddings' and end's tensor indices, by row id */
    block_ix *blocks;
    const vit_real **maps;   /* per layer, from the last forward */
    vit_real **maps_to;      /* per layer, where an evaluation piece copies them */
    struct slice *slices;    /* vit_model_train_grads, one per thread */
    int precision;           /* VIT_PRECISION_FP32 or _BF16 (resolved) */
    vit_mixed_weights *mixed; /* bf16: the weight matrices, packed once per step */
    int nslices;
};

/* ---- layout ----------------------------------------------------------- */

/* Lays out every tensor of the table (model_tensors.c) in its order, with
 * its init and decay, and notes each one's index.  VIT_OK or the first
 * error of vit_params_add. */
static int layout(vit_model *m)
{
    vit_mt t = {.pos = 0};
    while (vit_mt_next(&m->cfg, &t)) {
        int ix = vit_params_add(m->P, t.name, t.ndim, t.shape, t.row->init, t.scale,
                                t.row->decay);
        if (ix < 0)
            return ix;
        if (t.layer >= 0)
            m->blocks[t.layer].ix[t.id] = ix;
        else
            m->ix[t.id] = ix;
    }
    return VIT_OK;
}

vit_patch_shape vit_config_patch_shape(const vit_config *cfg)
{
    int half = cfg->stem > 0 && cfg->stem2 > 0; /* the patches read stem2's map */
    return (vit_patch_shape){.batch = 1, .height = cfg->image_height >> half,
                             .width = cfg->image_width >> half,
                             .channels = half ? cfg->stem2 : cfg->stem > 0 ? cfg->stem
                                                                           : cfg->channels,
                             .patch = cfg->patch, .dim = cfg->dim,
                             .stride = cfg->patch_stride, .pad = cfg->patch_pad};
}

/* A 3x3 convolution at stride 1 with padding 1 is a patch embedding
 * whose patches overlap all but one pixel: H*W outputs, laid out
 * [H, W, stem] like an image of stem channels. */
vit_patch_shape vit_config_stem_shape(const vit_config *cfg)
{
    return (vit_patch_shape){.batch = 1, .height = cfg->image_height, .width = cfg->image_width,
                             .channels = cfg->channels, .patch = 3, .dim = cfg->stem,
                             .stride = 1, .pad = 1};
}

/* stem2's 4x4 convolution at stride 2 with padding 1 over the [H, W, stem]
 * map: H/2 x W/2 outputs (H and W even), laid out [H/2, W/2, stem2]. */
vit_patch_shape vit_config_stem2_shape(const vit_config *cfg)
{
    return (vit_patch_shape){.batch = 1, .height = cfg->image_height, .width = cfg->image_width,
                             .channels = cfg->stem, .patch = 4, .dim = cfg->stem2, .stride = 2,
                             .pad = 1};
}

/* The operands op(B) of the weight matrices' products, for packing once
 * per step (mixed.h): W [in, out] as itself (y = x W) and transposed
 * (dx = dy W^T); the patch weights only as themselves (the images get no
 * gradient) unless a stem's feature map wants one, and the stem's weights
 * as themselves; the last block's Q and K|V column blocks of W_QKV too,
 * which its class-token-only attention multiplies separately. */
static int mixed_layout(vit_model *m)
{
    if (!(m->mixed = vit_mixed_weights_new()))
        return VIT_ENOMEM;
    vit_mixed_weights *w = m->mixed;
    const float *p = (const float *)m->params;
#define OFF(ix) (p + vit_params_tensor(m->P, ix)->offset)
#define BOTH(B, in, out, ld)                                                   \
    do {                                                                       \
        TRY(vit_mixed_weights_add(w, 0, in, out, B, ld));                      \
        TRY(vit_mixed_weights_add(w, 1, out, in, B, ld));                      \
    } while (0)
    const vit_config *c = &m->cfg;
    int D = c->dim, P = c->patch * c->patch * m->patch.channels;
    if (c->stem > 0) { /* the patch embedding's input then wants its gradient */
        TRY(vit_mixed_weights_add(w, 0, 9 * c->channels, c->stem, OFF(m->ix[VIT_MT_STEM_W]),
                                  c->stem));
        if (c->stem2 > 0) /* and so does stem2's */
            BOTH(OFF(m->ix[VIT_MT_STEM2_W]), 16 * c->stem, c->stem2, c->stem2);
        BOTH(OFF(m->ix[VIT_MT_PATCH_W]), P, D, D);
    } else {
        TRY(vit_mixed_weights_add(w, 0, P, D, OFF(m->ix[VIT_MT_PATCH_W]), D));
    }
    for (int l = 0; l < c->depth; l++) {
        const int *ix = m->blocks[l].ix;
        const float *qkv = OFF(ix[VIT_MT_W_QKV]);
        BOTH(qkv, D, 3 * D, 3 * D);
        if (l == c->depth - 1 && c->pool == VIT_POOL_CLS) { /* block_graph's cls_only */
            BOTH(qkv, D, D, 3 * D);
            BOTH(qkv + D, D, 2 * D, 3 * D);
        }
        BOTH(OFF(ix[VIT_MT_W_O]), D, D, D);
        BOTH(OFF(ix[VIT_MT_W1]), D, c->mlp, c->mlp);
        BOTH(OFF(ix[VIT_MT_W2]), c->mlp, D, D);
    }
    BOTH(OFF(m->ix[VIT_MT_HEAD_W]), D, c->classes, c->classes);
#undef BOTH
#undef OFF
    return VIT_OK;
}

vit_model *vit_model_new(const vit_config *cfg)
{
    if (!cfg) {
        vit_fail(VIT_EINVAL, "vit_model_new: cfg is NULL");
        return NULL;
    }
    if (vit_config_check(cfg) != VIT_OK)
        return NULL;
    size_t n = vit_config_param_count(cfg);
    vit_model *m = calloc(1, sizeof *m);
    if (!m)
        goto oom;
    m->cfg = *cfg;
    m->patch = vit_config_patch_shape(cfg);
    m->tokens = vit_patch_count(&m->patch) + 1;
    m->patch.batch = 0; /* set per forward */
    m->mha = (vit_mha){.n_q = m->tokens, .n_k = m->tokens, .d_model = cfg->dim,
                       .heads = cfg->heads, .has_bias = 1, .learn_scale = cfg->lsa};
    if (cfg->lsa) {
        m->no_self = malloc((size_t)m->tokens * m->tokens);
        if (!m->no_self || vit_mask_no_self(m->no_self, m->tokens, m->tokens) != VIT_OK)
            goto oom;
        m->mha.mask.allowed = m->no_self;
    }
    m->P = vit_params_new();
    m->blocks = calloc((size_t)cfg->depth, sizeof *m->blocks);
    m->maps = calloc((size_t)cfg->depth, sizeof *m->maps);
    m->maps_to = calloc((size_t)cfg->depth, sizeof *m->maps_to);
    if (!m->P || !m->blocks || !m->maps || !m->maps_to)
        goto oom;
    int rc = layout(m);
    if (rc == VIT_OK && (rc = vit_params_alloc(m->P)) == VIT_ENOMEM)
        goto oom;
    if (rc != VIT_OK) {
        vit_model_free(m);
        return NULL;
    }
    m->nparams = n;
    m->params = vit_params_values(m->P);
    m->grads = vit_params_grads(m->P);
    m->precision = vit_precision_resolve(cfg->precision, NULL, 0);
    if (m->precision == VIT_PRECISION_BF16 && mixed_layout(m) != VIT_OK) {
        vit_model_free(m);
        return NULL;
    }
    return m;
oom:
    vit_model_free(m);
    vit_fail(VIT_ENOMEM, "vit_model_new: out of memory for %zu parameters", n);
    return NULL;
}

void vit_model_free(vit_model *m)
{
    if (!m)
        return;
    vit_params_free(m->P);
    free(m->blocks);
    free(m->maps);
    free(m->maps_to);
    free(m->no_self);
    for (int i = 0; i < m->nslices; i++) {
        vit_tape_free(m->slices[i].tape);
        free(m->slices[i].grads);
    }
    free(m->slices);
    vit_mixed_weights_free(m->mixed);
    free(m);
}

int vit_model_precision(const vit_model *m) { return m ? m->precision : VIT_PRECISION_FP32; }

static int mixed_layout(vit_model *m);

int vit_model_set_precision(vit_model *m, int precision)
{
    if (!m)
        return vit_fail(VIT_EINVAL, "vit_model_set_precision: model is NULL");
    if (precision != VIT_PRECISION_FP32 && precision != VIT_PRECISION_BF16
        && precision != VIT_PRECISION_AUTO)
        return vit_fail(VIT_EINVAL, "vit_model_set_precision: precision %d is not fp32, bf16 "
                        "or auto", precision);
    int got = vit_precision_resolve(precision, NULL, 0);
    vit_mixed_weights *keep = m->mixed;
    m->mixed = NULL;
    if (got == VIT_PRECISION_BF16) {
        int rc = keep ? (m->mixed = keep, keep = NULL, VIT_OK) : mixed_layout(m);
        if (rc != VIT_OK) {
            vit_mixed_weights_free(m->mixed);
            m->mixed = keep;
            return rc;
        }
    }
    vit_mixed_weights_free(keep);
    m->precision = got;
    m->cfg.precision = precision;
    return got;
}

const vit_config *vit_model_config(const vit_model *m) { return m ? &m->cfg : NULL; }
vit_real *vit_model_params(vit_model *m) { return m ? m->params : NULL; }
vit_real *vit_model_grads(vit_model *m) { return m ? m->grads : NULL; }
size_t vit_model_param_count(const vit_model *m) { return m ? m->nparams : 0; }

void vit_model_zero_grads(vit_model *m)
{
    if (m)
        vit_params_zero_grads(m->P);
}

const vit_param_group *vit_model_groups(const vit_model *m, int *count)
{
    if (!m) {
        if (count)
            *count = 0;
        return NULL;
    }
    return vit_params_groups(m->P, count);
}

int vit_model_tensor_count(const vit_model *m) { return m ? vit_params_tensor_count(m->P) : 0; }

const vit_model_tensor *vit_model_tensor_at(const vit_model *m, int i)
{
    return m ? vit_params_tensor(m->P, i) : NULL;
}

void vit_model_init(vit_model *m, vit_rng *rng)
{
    if (m && rng)
        vit_params_init(m->P, rng);
}

/* A leaf over parameter tensor i, or over `count` values of consecutive
 * tensors from i flattened to one dimension, its gradient going to grads
 * (laid out like the parameters; NULL: a constant).  grads is the model's
 * own buffer or a slice's. */
static vit_tensor *param(vit_model *m, vit_tape *tape, int i, vit_real *grads)
{
    const vit_model_tensor *t = vit_params_tensor(m->P, i);
    return vit_tape_leaf(tape, m->params + t->offset, grads ? grads + t->offset : NULL,
                         t->ndim, t->shape);
}

static vit_tensor *param_range(vit_model *m, vit_tape *tape, int i, size_t count,
                               vit_real *grads)
{
    size_t off = vit_params_tensor(m->P, i)->offset;
    int shape[1] = {(int)count};
    return vit_tape_leaf(tape, m->params + off, grads ? grads + off : NULL, 1, shape);
}

/* ---- forward ---------------------------------------------------------- */

/* What one block's graph reads: the model and layer, where the parameters'
 * gradients go (NULL: constants), the attention shape, and what becomes of
 * the block's attention maps: maps[layer] points at them (on the tape), or
 * they are copied to maps_to[layer] (which outlives a released run), or
 * both NULL: nothing; cls_only: the block computes the class token alone
 * (see block_graph; then no maps are asked for). */
typedef struct block_ctx {
    vit_model *m;
    vit_real *grads;
    vit_mha mha;
    int layer;
    const vit_real **maps;
    vit_real *const *maps_to;
    int cls_only;
    const vit_real *drop; /* NULL, or [depth, 2, drop_stride] drop-path scales,
                             this batch's rows first */
    int drop_stride;
} block_ctx;

/* One pre-norm block (vit_op_block) on x [B, T, D], a vit_graph_fn, so
 * that vit_op_checkpoint can run it again.
 *
 * With cls_only (the last block, when nothing but the class token's output
 * is read) it computes token 0 alone (vit_block_opts.token0_only): x [B, T,
 * D] -> [B, 1, D].  An item's block then costs 2 T D^2 + 2 D^2 + 2 T D +
 * 2 D mlp multiply-adds instead of T (4 D^2 + 2 D mlp) + 2 T^2 D (the whole
 * model's drop by 14% on the large model, 18% on digits), with the same
 * gradients up to rounding, since the rows left out get none from the
 * head.  The lsa mask's row 0 is the class token's, so the [T, T] mask
 * serves as [1, T]. */
static vit_tensor *block_graph(vit_tape *tape, vit_tensor *const *in, void *ctx)
{
    const block_ctx *B = ctx;
    vit_model *m = B->m;
    const block_ix *b = &m->blocks[B->layer];
    vit_real *g = B->grads, *probs = NULL;
    const vit_mha *mha = &B->mha;
#define W_(id) param(m, tape, b->ix[VIT_MT_##id], g)
    vit_block_weights w = {
        .ln1_g = W_(LN1_G), .ln1_b = W_(LN1_B),
        .attn = param_range(m, tape, b->ix[VIT_MT_W_QKV], vit_mha_param_count(mha), g),
        .ln2_g = W_(LN2_G), .ln2_b = W_(LN2_B),
        .w1 = W_(W1), .b1 = W_(B1), .w2 = W_(W2), .b2 = W_(B2)};
#undef W_
    vit_tensor *x = in[0];
    if (m->cfg.local_conv) { /* the grid's neighbourhoods, before LN1 (vit/local_conv.h) */
        vit_patch_shape ps = m->patch;
        ps.batch = 1; /* the grid does not depend on it; the check wants one */
        int gh, gw;
        vit_patch_grid(&ps, &gh, &gw);
        x = vit_op_local_conv(tape, x, param(m, tape, b->ix[VIT_MT_LOCAL_W], g),
                              param(m, tape, b->ix[VIT_MT_LOCAL_B], g), gh, gw);
    }
    vit_block_opts opts = {.token0_only = B->cls_only, .eps = (vit_real)m->cfg.ln_eps,
                           .probs = B->maps || B->maps_to ? &probs : NULL};
    if (B->drop) {
        opts.drop_attn = B->drop + (size_t)2 * B->layer * B->drop_stride;
        opts.drop_mlp = opts.drop_attn + B->drop_stride;
    }
    vit_tensor *y = vit_op_block(tape, mha, &w, x, &opts);
    if (B->maps)
        B->maps[B->layer] = probs;
    if (B->maps_to && probs) /* maps are asked for only of whole blocks: n_q = T */
        memcpy(B->maps_to[B->layer], probs, (size_t)mha->batch * mha->heads * mha->n_q
                                                * mha->n_k * sizeof *probs);
    return y;
}

/* The model's one forward, recorded on the tape as its grad mode says:
 * images [batch, H, W, C] -> logits [batch, classes], the parameters'
 * gradients going to grads [nparams] (NULL: parameters are constants);
 * maps[l] (if maps is non-NULL) points at block l's attention
 * probabilities, or they are copied to maps_to[l] (if non-NULL).
 * Each block is a checkpoint in no-grad mode (one block's activations on
 * the tape at a time) and with cfg.recompute in grad mode (only its input
 * kept; then maps are not kept).  With cls_only (for a head on the class
 * token, and no maps) the last block computes token 0 alone (block_graph).
 * drop (NULL: none) holds drop-path scales [depth, 2, drop_stride], this
 * batch's rows first (block l: attention at 2l, MLP at 2l + 1). */
static vit_tensor *forward_graph(vit_model *m, vit_tape *tape, const vit_real *images, int batch,
                                 vit_real *grads, const vit_real **maps, vit_real *const *maps_to,
                                 int cls_only, const vit_real *drop, int drop_stride)
{
    const vit_config *c = &m->cfg;
    const vit_real eps = (vit_real)c->ln_eps;
    vit_patch_shape ps = m->patch;
    ps.batch = batch;
    block_ctx B = {.m = m, .grads = grads, .mha = m->mha, .maps = maps, .maps_to = maps_to,
                   .drop = drop, .drop_stride = drop_stride};
    B.mha.batch = batch;
    int grad = vit_tape_grad_enabled(tape), checkpoint = !grad || c->recompute;
    if (checkpoint && maps) {
        for (int l = 0; l < c->depth; l++)
            maps[l] = NULL;
        B.maps = NULL;
    }
    if (grad && checkpoint)
        B.maps_to = NULL;

    int ishape[4] = {batch, c->image_height, c->image_width, c->channels};
    vit_tensor *img = vit_tape_leaf(tape, (vit_real *)(uintptr_t)images, NULL, 4, ishape);
#define W_(id) param(m, tape, m->ix[VIT_MT_##id], grads)
    if (c->stem > 0) { /* [B, H*W, stem] is the [B, H, W, stem] the patches read */
        vit_patch_shape ss = vit_config_stem_shape(c);
        ss.batch = batch;
        img = vit_op_gelu(tape, vit_op_patch_embed(tape, &ss, img, W_(STEM_W), W_(STEM_B)));
        int fshape[4] = {batch, c->image_height, c->image_width, c->stem};
        img = vit_op_reshape(tape, img, 4, fshape);
        if (c->stem2 > 0) { /* [B, H/2*W/2, stem2] as [B, H/2, W/2, stem2] */
            vit_patch_shape s2 = vit_config_stem2_shape(c);
            s2.batch = batch;
            img = vit_op_gelu(tape, vit_op_patch_embed(tape, &s2, img, W_(STEM2_W), W_(STEM2_B)));
            int f2[4] = {batch, ps.height, ps.width, ps.channels}; /* what the patches read */
            img = vit_op_reshape(tape, img, 4, f2);
        }
    }
    vit_tensor *x = vit_op_patch_embed(tape, &ps, img, W_(PATCH_W), W_(PATCH_B));
    x = vit_op_cls_prepend(tape, x, W_(CLS));
    x = vit_op_pos_add(tape, x, W_(POS));
    for (int l = 0; l < c->depth; l++) {
        B.layer = l;
        B.cls_only = cls_only && l == c->depth - 1;
        if (checkpoint)
            x = vit_op_checkpoint(tape, block_graph, 1, &x, &B, sizeof B);
        else
            x = x ? block_graph(tape, &x, &B) : NULL;
    }
    x = vit_op_layernorm(tape, x, W_(LN_G), W_(LN_B), eps);
    x = c->pool == VIT_POOL_MEAN ? vit_op_mean_tokens(tape, x, 1) : vit_op_token(tape, x, 0);
    return vit_op_linear(tape, x, W_(HEAD_W), W_(HEAD_B));
#undef W_
}

/* Images per piece of the no-grad forward. */
#define EVAL_CHUNK 64

/* Evaluation: the same forward in no-grad mode, a piece of the batch at a
 * time through the same arena memory (a mark and a release per piece), so
 * that only the logits and the attention maps stay on the tape.  A
 * 256-image evaluation of the digits model needs a few MB instead of ~70. */
static vit_tensor *forward_eval(vit_model *m, vit_tape *tape, const vit_real *images, int batch)
{
    const vit_config *c = &m->cfg;
    int was = vit_tape_set_grad(tape, 0);
    int chunk = batch < EVAL_CHUNK ? batch : EVAL_CHUNK;
    int shape[2] = {batch, c->classes};
    vit_tensor *z = vit_tape_tensor(tape, 2, shape);
    size_t per_item = (size_t)c->heads * m->tokens * m->tokens, per_map = per_item * batch;
    /* Long sequences run the tiled attention core, which keeps no maps. */
    vit_sdpa core = {.batch = chunk, .heads = c->heads, .n_q = m->tokens, .n_k = m->tokens,
                     .d_k = c->dim / c->heads, .d_v = c->dim / c->heads};
    int keep_maps = !vit_sdpa_use_tiled(&core);
    vit_real *all = z && keep_maps ? vit_tape_alloc(tape, per_map * c->depth * sizeof *all) : NULL;
    for (int l = 0; l < c->depth; l++)
        m->maps[l] = NULL;
    size_t img = (size_t)c->image_height * c->image_width * c->channels;
    vit_real **to = keep_maps ? m->maps_to : NULL;
    for (int i = 0; z && (all || !keep_maps) && i < batch; i += chunk) {
        int nb = batch - i < chunk ? batch - i : chunk;
        for (int l = 0; to && l < c->depth; l++) /* the piece's items of map l */
            to[l] = all + per_map * l + per_item * i;
        size_t mark = vit_tape_mark(tape);
        vit_tensor *y = forward_graph(m, tape, images + (size_t)i * img, nb, NULL, NULL, to, 0,
                                      NULL, 0);
        if (!y) {
            z = NULL;
            break;
        }
        memcpy(z->data + (size_t)i * c->classes, y->data, y->size * sizeof *y->data);
        vit_tape_release(tape, mark);
    }
    for (int l = 0; l < c->depth; l++)
        m->maps[l] = z && keep_maps ? all + per_map * l : NULL;
    vit_tape_set_grad(tape, was);
    return z && (all || !keep_maps) ? z : NULL;
}

vit_tensor *vit_model_forward(vit_model *m, vit_tape *tape, const vit_real *images, int batch,
                              int grads)
{
    if (!m || !tape || !images) {
        vit_fail(VIT_EINVAL, "vit_model_forward: %s is NULL", !m ? "model" : !tape ? "tape" : "images");
        vit_tape_fail(tape, VIT_EINVAL);
        return NULL;
    }
    if (batch <= 0) {
        vit_fail(VIT_EINVAL, "vit_model_forward: batch %d must be positive", batch);
        vit_tape_fail(tape, VIT_EINVAL);
        return NULL;
    }
    if (!grads || !vit_tape_grad_enabled(tape))
        return forward_eval(m, tape, images, batch);
    return forward_graph(m, tape, images, batch, m->grads, m->maps, NULL, 0, NULL, 0);
}

const vit_real *vit_model_attention_maps(const vit_model *m, int layer)
{
    if (!m || layer < 0 || layer >= m->cfg.depth)
        return NULL;
    return m->maps[layer];
}

/* ---- a training batch split across threads ------------------------------ */

typedef struct {
    vit_model *m;
    const vit_real *images;
    const int *labels;
    int batch, n;
    vit_real smoothing;
    const vit_real *targets, *drop; /* vit_train_extras' (may be NULL) */
} slice_job;

/* Forward and backward of rows [lo, hi) of the batch into the slice's own
 * gradient buffer, seeded with its share (hi - lo) / batch of the mean. */
static void run_slice(const slice_job *J, int s)
{
    vit_model *m = J->m;
    struct slice *S = &m->slices[s];
    const vit_config *c = &m->cfg;
    int lo = (int)((long long)J->batch * s / J->n), hi = (int)((long long)J->batch * (s + 1) / J->n);
    int nb = hi - lo;
    size_t img = (size_t)c->image_height * c->image_width * c->channels;
    vit_real *g = s == 0 ? m->grads : S->grads;
    memset(g, 0, m->nparams * sizeof *g);
    vit_tape_reset(S->tape);
    if (m->mixed)
        vit_mixed_enter(m->mixed);
    /* No maps are kept here, so a head on the class token lets the last
     * block compute that token alone. */
    vit_tensor *z = forward_graph(m, S->tape, J->images + (size_t)lo * img, nb, g, NULL, NULL,
                                  c->pool == VIT_POOL_CLS, J->drop ? J->drop + lo : NULL, J->batch);
    vit_tensor *loss = J->targets ? vit_op_cross_entropy_soft(S->tape, z, J->targets
                                                              + (size_t)lo * c->classes, NULL)
                                  : vit_op_cross_entropy(S->tape, z, J->labels + lo, J->smoothing,
                                                         NULL);
    vit_real share = (vit_real)nb / (vit_real)J->batch;
    S->rc = loss ? vit_tape_backward_from(S->tape, loss, &share)
                 : vit_tape_status(S->tape) ? vit_tape_status(S->tape) : VIT_EINVAL;
    int mixed_rc = m->mixed ? vit_mixed_leave() : VIT_OK;
    if (S->rc == VIT_OK)
        S->rc = mixed_rc;
    if (S->rc != VIT_OK) {
        snprintf(S->msg, sizeof S->msg, "%s", vit_last_error());
        return;
    }
    S->loss_sum = (double)loss->data[0] * nb;
    S->correct = 0;
    for (int r = 0; r < nb; r++)
        S->correct += vit_argmax(z->data + (size_t)r * c->classes, c->classes) == J->labels[lo + r];
}

static void run_slices(void *ctx, size_t lo, size_t hi)
{
    for (size_t s = lo; s < hi; s++)
        run_slice(ctx, (int)s);
}

/* grads[i] += slice s's grads[i] for s = 1 .. n-1, in that order. */
typedef struct {
    vit_model *m;
    int n;
} sum_job;

static void sum_slices(void *ctx, size_t lo, size_t hi)
{
    const sum_job *J = ctx;
    for (int s = 1; s < J->n; s++) {
        const vit_real *gs = J->m->slices[s].grads;
        vit_real *g = J->m->grads;
        for (size_t i = lo; i < hi; i++)
            g[i] += gs[i];
    }
}

/* Tapes and buffers for n slices, kept across calls. */
static int ensure_slices(vit_model *m, int n)
{
    if (n <= m->nslices)
        return VIT_OK;
    struct slice *sl = realloc(m->slices, (size_t)n * sizeof *sl);
    if (!sl)
        return vit_fail(VIT_ENOMEM, "vit_model_train_grads: out of memory");
    m->slices = sl;
    for (; m->nslices < n; m->nslices++) {
        struct slice *S = &sl[m->nslices];
        memset(S, 0, sizeof *S);
        S->tape = vit_tape_new();
        S->grads = m->nslices ? malloc(m->nparams * sizeof *S->grads) : NULL;
        if (!S->tape || (m->nslices && !S->grads)) {
            vit_tape_free(S->tape);
            free(S->grads);
            return vit_fail(VIT_ENOMEM, "vit_model_train_grads: out of memory for slice %d",
                            m->nslices);
        }
    }
    return VIT_OK;
}

int vit_model_train_grads(vit_model *m, const vit_real *images, const int *labels, int batch,
                          vit_real smoothing, double *loss, int *correct)
{
    return vit_model_train_grads_ex(m, images, labels, batch, smoothing, NULL, loss, correct);
}

int vit_model_train_grads_ex(vit_model *m, const vit_real *images, const int *labels, int batch,
                             vit_real smoothing, const vit_train_extras *ex, double *loss,
                             int *correct)
{
    if (!m || !images || !labels || !loss)
        return vit_fail(VIT_EINVAL, "vit_model_train_grads: %s is NULL",
                        !m ? "model" : !images ? "images" : !labels ? "labels" : "loss");
    if (batch <= 0)
        return vit_fail(VIT_EINVAL, "vit_model_train_grads: batch %d must be positive", batch);
    int n = vit_threads() < batch ? vit_threads() : batch;
    int rc = ensure_slices(m, n);
    if (rc != VIT_OK)
        return rc;
    /* bf16: the weights as the optimizer left them, packed once for every
     * slice's products. */
    if (m->mixed && (rc = vit_mixed_weights_pack(m->mixed, vit_threads())) != VIT_OK)
        return rc;
    slice_job J = {m, images, labels, batch, n, smoothing, ex ? ex->targets : NULL,
                   ex ? ex->drop_scale : NULL};
    vit_parallel(n, (size_t)n, run_slices, &J);
    for (int l = 0; l < m->cfg.depth; l++)
        m->maps[l] = NULL; /* spread over the slices' tapes: none to show */
    double sum = 0;
    int right = 0;
    for (int s = 0; s < n; s++) {
        const struct slice *S = &m->slices[s];
        if (S->rc != VIT_OK) /* the first failing slice speaks for the batch */
            return vit_fail(S->rc, "%s", S->msg);
        sum += S->loss_sum;
        right += S->correct;
    }
    if (n > 1) {
        sum_job G = {m, n};
        vit_parallel(vit_threads_for(2.0 * (double)m->nparams * n), m->nparams, sum_slices, &G);
    }
    *loss = sum / batch;
    if (correct)
        *correct = right;
    return VIT_OK;
}
