/*
 * The Vision Transformer, the built-in architecture "vit" (vit/arch.h), as
 * forward code on the tape.  The backward comes from the kernels through
 * vit_tape_backward().
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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_internal.h"
#include "error.h"
#include "model_tensors.h"
#include "stem.h"
#include "vit/activations.h"
#include "vit/attention.h"
#include "vit/block.h"
#include "vit/linear.h"
#include "vit/local_conv.h"

/* ---- config keys: fields of vit_config itself (vit/arch.h says why) ----- */

static const char *const pool_names[] = {"cls", "mean", NULL};

#define F(key, type, lo, hi, def, help, names) \
    {#key, type, offsetof(vit_config, key), lo, hi, def, help, names, NULL}
#define KI(key, lo, hi, def, help) F(key, VIT_KEY_INT, lo, hi, def, help, NULL)

static const vit_arch_key keys[] = {
    KI(patch, 1, 4096, "4", "patch side in pixels"),
    KI(dim, 1, 65536, "64", "token width"),
    KI(depth, 1, 1024, "4", "number of transformer blocks"),
    KI(heads, 1, 4096, "4", "attention heads (divides dim)"),
    KI(mlp, 1, 1 << 20, "128", "MLP hidden width"),
    F(pool, VIT_KEY_ENUM, 0, 1, "cls", "cls or mean: what the head reads", pool_names),
    KI(patch_stride, 0, 4096, "2", "patch stride in pixels (0: the patch side, no overlap)"),
    KI(patch_pad, 0, 4095, "1", "zero padding around the image for overlapping patches"),
    KI(lsa, 0, 1, "0",
      "1: locality self-attention (no token attends itself; learnable per-head scale)"),
    KI(stem, 0, 4096, "0", "channels of a 3x3 convolution + GELU before the patches "
      "(0: patches of the image itself)"),
    KI(stem2, 0, 4096, "0", "channels of a second stem convolution, 4x4 at stride 2 + GELU: the "
      "patches are cut from its half-size map (0: none; needs stem)"),
    KI(local_conv, 0, 1, "0", "1: each block starts by adding to the patch tokens a 3x3 "
      "depthwise convolution of them over their grid (0: none)"),
    F(ln_eps, VIT_KEY_REAL, 1e-12, 1, "1e-05",
      "the layer norms' epsilon (1e-5; 1e-6 for timm's ViTs)", NULL),
};
#undef KI
#undef F

/* The stem's keys (stem.h: the Swin's mean the same). */
static vit_stem stem_of(const vit_config *c)
{
    return (vit_stem){.height = c->image_height, .width = c->image_width,
                      .channels = c->channels, .stem = c->stem, .stem2 = c->stem2};
}

static int check(const vit_config *c)
{
    vit_stem st = stem_of(c);
    TRY(vit_stem_check(&st));
    vit_patch_shape ps = vit_config_patch_shape(c);
    if ((c->patch_stride == 0 || c->patch_stride == c->patch) && c->patch_pad == 0) {
        if (ps.height % c->patch || ps.width % c->patch)
            return vit_fail(VIT_EINVAL, "patch: %d does not divide the %dx%d %s", c->patch,
                            ps.height, ps.width, c->stem2 > 0 ? "feature map (stem2 halves the "
                            "image)" : "image");
    } else {
        if (vit_patch_count(&ps) == 0) {
            char msg[320];
            snprintf(msg, sizeof msg, "%s", vit_last_error());
            return vit_fail(VIT_EINVAL, "patch, patch_stride, patch_pad: %s", msg);
        }
    }
    if (c->dim % c->heads)
        return vit_fail(VIT_EINVAL, "heads: %d does not divide dim %d", c->heads, c->dim);
    return VIT_OK;
}

vit_patch_shape vit_config_patch_shape(const vit_config *cfg)
{
    vit_stem st = stem_of(cfg);
    vit_patch_shape ps = {.batch = 1, .patch = cfg->patch, .dim = cfg->dim,
                          .stride = cfg->patch_stride, .pad = cfg->patch_pad};
    vit_stem_map(&st, &ps.height, &ps.width, &ps.channels); /* the patches read the last map */
    return ps;
}

vit_patch_shape vit_config_stem_shape(const vit_config *cfg)
{
    vit_stem st = stem_of(cfg);
    return vit_stem_shape(&st);
}

vit_patch_shape vit_config_stem2_shape(const vit_config *cfg)
{
    vit_stem st = stem_of(cfg);
    return vit_stem2_shape(&st);
}

/* ---- the model's state ------------------------------------------------ */

/* A block's tensor indices, by row id (the embedding and end rows unused). */
typedef struct block_ix {
    int ix[VIT_MT_ROWS];
} block_ix;

typedef struct vit_state {
    vit_mha mha;             /* the self-attention shape; batch set per forward */
    unsigned char *no_self;  /* lsa: the [T, T] no-self mask mha.mask points at */
    vit_patch_shape patch;
    int tokens;              /* T = patches + 1 */
    int ix[VIT_MT_ROWS];     /* the embeddings' and end's tensor indices, by row id */
    block_ix *blocks;
} vit_state;

static void release(void *state)
{
    vit_state *s = state;
    if (!s)
        return;
    free(s->no_self);
    free(s->blocks);
    free(s);
}

/* Lays out every tensor of the table (model_tensors.c) in its order, with
 * its init and decay, and notes each one's index. */
static int build(const vit_config *cfg, vit_params *p, void **out)
{
    vit_state *s = calloc(1, sizeof *s);
    if (!s || !(s->blocks = calloc((size_t)cfg->depth, sizeof *s->blocks)))
        goto oom;
    s->patch = vit_config_patch_shape(cfg);
    s->tokens = vit_patch_count(&s->patch) + 1;
    s->patch.batch = 0; /* set per forward */
    s->mha = (vit_mha){.n_q = s->tokens, .n_k = s->tokens, .d_model = cfg->dim,
                       .heads = cfg->heads, .has_bias = 1, .learn_scale = cfg->lsa};
    if (cfg->lsa) {
        s->no_self = malloc((size_t)s->tokens * s->tokens);
        if (!s->no_self || vit_mask_no_self(s->no_self, s->tokens, s->tokens) != VIT_OK)
            goto oom;
        s->mha.mask.allowed = s->no_self;
    }
    vit_mt t = {.pos = 0};
    while (vit_mt_next(cfg, &t)) {
        int ix = vit_params_add(p, t.name, t.ndim, t.shape, t.row->init, t.scale, t.row->decay);
        if (ix < 0) {
            release(s);
            return ix;
        }
        if (t.layer >= 0)
            s->blocks[t.layer].ix[t.id] = ix;
        else
            s->ix[t.id] = ix;
    }
    *out = s;
    return VIT_OK;
oom:
    release(s);
    return vit_fail(VIT_ENOMEM, "vit: out of memory for the model's state");
}

/* The weight matrices of the bf16 step (vit_arch.bf16_weights): each W
 * [in, out] as itself (y = x W) and transposed (dx = dy W^T); the patch
 * weights only as themselves (the images get no gradient) unless a stem's
 * feature map wants one, and the stem's weights as themselves; the last
 * block's Q and K|V column blocks of W_QKV too, which its class-token-only
 * attention multiplies separately. */
static int bf16_weights(const vit_config *c, const void *state, const vit_params *P,
                        vit_arch_bf16 *set)
{
    (void)P;
    const vit_state *m = state;
#define ADD(ix, off, in, out, ld, use) TRY(vit_arch_bf16_add(set, ix, off, in, out, ld, use))
    const int D = c->dim, NP = c->patch * c->patch * m->patch.channels;
    const int AS_IS = VIT_ARCH_BF16_AS_IS, BOTH = VIT_ARCH_BF16_BOTH;
    if (c->stem > 0) { /* the patch embedding's input then wants its gradient */
        ADD(m->ix[VIT_MT_STEM_W], 0, 9 * c->channels, c->stem, c->stem, AS_IS);
        if (c->stem2 > 0) /* and so does stem2's */
            ADD(m->ix[VIT_MT_STEM2_W], 0, 16 * c->stem, c->stem2, c->stem2, BOTH);
        ADD(m->ix[VIT_MT_PATCH_W], 0, NP, D, D, BOTH);
    } else {
        ADD(m->ix[VIT_MT_PATCH_W], 0, NP, D, D, AS_IS);
    }
    for (int l = 0; l < c->depth; l++) {
        const int *ix = m->blocks[l].ix;
        ADD(ix[VIT_MT_W_QKV], 0, D, 3 * D, 3 * D, BOTH);
        if (l == c->depth - 1 && c->pool == VIT_POOL_CLS) { /* block_graph's cls_only */
            ADD(ix[VIT_MT_W_QKV], 0, D, D, 3 * D, BOTH);
            ADD(ix[VIT_MT_W_QKV], (size_t)D, D, 2 * D, 3 * D, BOTH);
        }
        ADD(ix[VIT_MT_W_O], 0, D, D, D, BOTH);
        ADD(ix[VIT_MT_W1], 0, D, c->mlp, c->mlp, BOTH);
        ADD(ix[VIT_MT_W2], 0, c->mlp, D, D, BOTH);
    }
    ADD(m->ix[VIT_MT_HEAD_W], 0, D, c->classes, c->classes, BOTH);
#undef ADD
    return VIT_OK;
}

/* ---- forward ---------------------------------------------------------- */

/* A leaf over parameter tensor i, or over `count` values of consecutive
 * tensors from i flattened to one dimension, its gradient going to grads
 * (laid out like the parameters; NULL: a constant). */
typedef struct leaves {
    vit_params *params;
    vit_real *grads;
} leaves;

static vit_tensor *param(const leaves *r, vit_tape *tape, int i)
{
    const vit_param_tensor *t = vit_params_tensor(r->params, i);
    return vit_tape_leaf(tape, vit_params_values(r->params) + t->offset,
                         r->grads ? r->grads + t->offset : NULL, t->ndim, t->shape);
}

static vit_tensor *param_range(const leaves *r, vit_tape *tape, int i, size_t count)
{
    size_t off = vit_params_tensor(r->params, i)->offset;
    int shape[1] = {(int)count};
    return vit_tape_leaf(tape, vit_params_values(r->params) + off,
                         r->grads ? r->grads + off : NULL, 1, shape);
}

/* What one block's graph reads: the model and layer, where the parameters'
 * gradients go (NULL: constants), the attention shape, and what becomes of
 * the block's attention maps: maps[layer] points at them (on the tape), or
 * they are copied to maps_to[layer] (which outlives a released run), or
 * both NULL: nothing; cls_only: the block computes the class token alone
 * (see block_graph; then no maps are asked for). */
typedef struct block_ctx {
    leaves r;                /* copied: vit_op_checkpoint keeps the context */
    const vit_config *cfg;   /* the model's */
    const vit_state *s;
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
    const leaves *r = &B->r;
    const block_ix *b = &B->s->blocks[B->layer];
    vit_real *probs = NULL;
    const vit_mha *mha = &B->mha;
#define W_(id) param(r, tape, b->ix[VIT_MT_##id])
    vit_block_weights w = {
        .ln1_g = W_(LN1_G), .ln1_b = W_(LN1_B),
        .attn = param_range(r, tape, b->ix[VIT_MT_W_QKV], vit_mha_param_count(mha)),
        .ln2_g = W_(LN2_G), .ln2_b = W_(LN2_B),
        .w1 = W_(W1), .b1 = W_(B1), .w2 = W_(W2), .b2 = W_(B2)};
#undef W_
    vit_tensor *x = in[0];
    if (B->cfg->local_conv) { /* the grid's neighbourhoods, before LN1 (vit/local_conv.h) */
        vit_patch_shape ps = B->s->patch;
        ps.batch = 1; /* the grid does not depend on it; the check wants one */
        int gh, gw;
        vit_patch_grid(&ps, &gh, &gw);
        x = vit_op_local_conv(tape, x, param(r, tape, b->ix[VIT_MT_LOCAL_W]),
                              param(r, tape, b->ix[VIT_MT_LOCAL_B]), gh, gw);
    }
    vit_block_opts opts = {.token0_only = B->cls_only, .eps = (vit_real)B->cfg->ln_eps,
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

/* The ViT's forward (vit_arch.forward): images [batch, H, W, C] -> logits
 * [batch, classes], recorded on the tape as its grad mode says.  Each block
 * is a checkpoint in no-grad mode (one block's activations on the tape at a
 * time) and with r->recompute in grad mode (only its input kept; then maps
 * are not kept).  With loss_only and a head on the class token the last
 * block computes token 0 alone (block_graph). */
static vit_tensor *forward(const vit_arch_run *r)
{
    const vit_config *c = r->cfg;
    const vit_state *s = r->state;
    vit_tape *tape = r->tape;
    int batch = r->batch;
    const vit_real eps = (vit_real)c->ln_eps;
    vit_patch_shape ps = s->patch;
    ps.batch = batch;
    const leaves L = {r->params, r->grads};
    block_ctx B = {.r = L, .cfg = c, .s = s, .mha = s->mha, .maps = r->maps, .maps_to = r->maps_to,
                   .drop = r->train ? r->drop_scale : NULL, .drop_stride = r->drop_stride};
    B.mha.batch = batch;
    int grad = vit_tape_grad_enabled(tape), checkpoint = !grad || r->recompute;
    int cls_only = r->loss_only && c->pool == VIT_POOL_CLS;
    if (checkpoint && B.maps) {
        for (int l = 0; l < c->depth; l++)
            B.maps[l] = NULL;
        B.maps = NULL;
    }
    if (grad && checkpoint)
        B.maps_to = NULL;

    vit_tensor *img = r->images;
#define W_(id) param(&L, tape, s->ix[VIT_MT_##id])
    if (c->stem > 0) { /* [B, H, W, stem], then [B, H/2, W/2, stem2]: what the patches read */
        img = vit_stem_layer(tape, vit_config_stem_shape(c), batch, img, W_(STEM_W), W_(STEM_B));
        if (c->stem2 > 0)
            img = vit_stem_layer(tape, vit_config_stem2_shape(c), batch, img, W_(STEM2_W),
                                 W_(STEM2_B));
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

/* ---- what the library asks of it ----------------------------------------- */

/* The T x T attention core of c's blocks (T = patches + 1), and its grid. */
static vit_sdpa attn_core(const vit_config *c, int *gh, int *gw)
{
    vit_patch_shape ps = vit_config_patch_shape(c);
    int T = vit_patch_count(&ps) + 1;
    ps.batch = 1;
    vit_patch_grid(&ps, gh, gw);
    return (vit_sdpa){.batch = 1, .heads = c->heads, .n_q = T, .n_k = T,
                      .d_k = c->dim / c->heads, .d_v = c->dim / c->heads};
}

static void describe(const vit_config *c, vit_arch_info *info)
{
    info->macs = vit_mt_macs(c);
    info->drop_layers = c->depth;
    int gh = 0, gw = 0;
    vit_sdpa core = attn_core(c, &gh, &gw);
    /* Long sequences run the tiled attention core, which keeps no maps. */
    if (vit_sdpa_use_tiled(&core))
        return;
    info->attn_layers = c->depth;
}

/* Every block alike: [batch, heads, T, T], the class token first. */
static void attn_layer(const vit_config *c, int layer, vit_arch_attn *a)
{
    (void)layer;
    int gh = 0, gw = 0;
    vit_sdpa core = attn_core(c, &gh, &gw);
    a->heads = c->heads;
    a->queries = core.n_q;
    a->keys = core.n_k;
    a->grid_h = gh;
    a->grid_w = gw;
    a->first = 1;
    a->cls = 1; /* (read by the head with pool = cls; there either way) */
}

static int section(const vit_mt *t)
{
    return t->id < VIT_MT_FIRST_BLOCK ? 0 : t->id < VIT_MT_FIRST_END ? 1 : 2;
}

/* timm's names and layout (vit/safetensors.h): by the table's rows. */
static int export_tensor(const vit_config *c, int i, const vit_param_tensor *pt,
                         vit_arch_export *e)
{
    (void)pt;
    vit_mt t = {.pos = 0};
    for (int k = 0; k <= i; k++)
        if (!vit_mt_next(c, &t))
            return vit_fail(VIT_EINVAL, "vit export: no tensor %d", i);
    snprintf(e->name, sizeof e->name, "%s", t.timm);
    e->op = t.row->timm_op == VIT_MT_TRANSPOSE ? VIT_EXPORT_TRANSPOSE
          : t.row->timm_op == VIT_MT_CONV      ? VIT_EXPORT_CONV
                                               : VIT_EXPORT_COPY;
    e->ndim = t.row->timm_ndim;
    const vit_stem st = stem_of(c); /* the stem's kernels are its layers' patches */
    e->kernel = t.id == VIT_MT_STEM_W    ? vit_stem_shape(&st).patch
              : t.id == VIT_MT_STEM2_W ? vit_stem2_shape(&st).patch
              : t.id == VIT_MT_LOCAL_W ? 3 /* local_conv: a 3x3 depthwise convolution */
                                       : c->patch;
    /* timm's state_dict: the embeddings, each block, the end; in each
     * part, the rows by their rank there. */
    int sec = section(&t);
    e->order = (sec == 0 ? 0 : sec == 1 ? 1 + t.layer : 1 + c->depth) * 100 + t.row->timm_rank;
    return VIT_OK;
}

const vit_arch vit_arch_vit_def = {
    .name = "vit",
    .summary = "Vision Transformer: patches (optionally after a convolutional stem), class "
               "token, pre-norm blocks, head",
    .keys = keys,
    .nkeys = (int)(sizeof keys / sizeof keys[0]),
    .config_size = sizeof(vit_config),
    .check = check,
    .build = build,
    .release = release,
    .forward = forward,
    .describe = describe,
    .attn_layer = attn_layer,
    .export_tensor = export_tensor,
    .export_layout = "timm.VisionTransformer",
    .bf16_weights = bf16_weights,
};
