/*
 * The ViT's tensors, one row each (see model_tensors.h), and what is
 * computed from them alone: the parameter count and the multiply-adds.
 */
#include "model_tensors.h"

#include <math.h>
#include <stdio.h>

enum { Z = VIT_INIT_ZERO, ONE = VIT_INIT_ONE, N = VIT_INIT_NORMAL, K = VIT_INIT_CONST };
enum { D = VIT_MT_D, D3 = VIT_MT_3D, MLP = VIT_MT_MLP, CL = VIT_MT_CLASSES, TOK = VIT_MT_TOKENS,
       PIX = VIT_MT_PIXELS, H = VIT_MT_HEADS, ST = VIT_MT_STEM, SPIX = VIT_MT_STEM_PIXELS,
       ST2 = VIT_MT_STEM2, S2PIX = VIT_MT_STEM2_PIXELS, K9 = VIT_MT_TAPS };
enum { NO = VIT_MT_NO_SCALE, STD = VIT_MT_INIT_STD, DK = VIT_MT_INV_SQRT_DK };
enum { ALL = VIT_MT_ALWAYS, LSA = VIT_MT_IF_LSA, STEM = VIT_MT_IF_STEM, STEM2 = VIT_MT_IF_STEM2,
       LOC = VIT_MT_IF_LOCAL };
enum { U0 = VIT_MT_NO_MACS, UP = VIT_MT_PER_PATCH, UT = VIT_MT_PER_TOKEN, UI = VIT_MT_PER_IMAGE,
       UX = VIT_MT_PER_PIXEL, UX2 = VIT_MT_PER_HALF_PIXEL };
enum { CP = VIT_MT_COPY, TR = VIT_MT_TRANSPOSE, CONV = VIT_MT_CONV };

/* Weights decay and start truncated normal (std init_std); biases, the
 * class token and layer-norm shifts start at zero, layer-norm gains at one;
 * position embeddings start truncated normal but do not decay.  The
 * attention rows are laid out as vit_mha expects for self-attention
 * (W_QKV = [W_Q | W_K | W_V], W_O, b_QKV, b_O, then tau with learn_scale),
 * so that one leaf over them feeds vit_op_mha.  tau is LSA's learnable
 * per-head multiplier of Q K^T, starting at the fixed 1/sqrt(d_k) as in the
 * LSA reference code; a scale, so not decayed.  timm has no form for it:
 * the export writes it as blocks.L.attn.tau, a name timm's
 * VisionTransformer lacks, so that a strict load into timm fails instead of
 * computing something else.
 * The convolutional stem (stem > 0) goes by the names of timm's hybrid
 * patch embedding: a backbone (here Conv2d(C, stem, 3, padding 1) and a
 * GELU, then with stem2 > 0 Conv2d(stem, stem2, 4, stride 2, padding 1)
 * and a GELU, modules 0 to 3 of an nn.Sequential) whose feature map the
 * patch projection reads.
 *
 *   name            shape        init scale decay when uses  timm name   rank op dims legacy */
static const vit_mt_row rows[VIT_MT_ROWS] = {
    [VIT_MT_STEM_W] = {"stem.w", 2, {SPIX, ST}, N, STD, 1, STEM, UX,
                       "patch_embed.backbone.0.weight", 2, CONV, 4, 0, {0}},
    [VIT_MT_STEM_B] = {"stem.b", 1, {ST}, Z, NO, 0, STEM, U0, "patch_embed.backbone.0.bias", 3,
                       CP, 1, 0, {0}},
    [VIT_MT_STEM2_W] = {"stem2.w", 2, {S2PIX, ST2}, N, STD, 1, STEM2, UX2,
                        "patch_embed.backbone.2.weight", 2, CONV, 4, 0, {0}},
    [VIT_MT_STEM2_B] = {"stem2.b", 1, {ST2}, Z, NO, 0, STEM2, U0, "patch_embed.backbone.2.bias",
                        3, CP, 1, 0, {0}},
    [VIT_MT_PATCH_W] = {"patch.w", 2, {PIX, D}, N, STD, 1, ALL, UP,
                        "patch_embed.proj.weight", 4, CONV, 4, 0, {0}},
    [VIT_MT_PATCH_B] = {"patch.b", 1, {D}, Z, NO, 0, ALL, U0, "patch_embed.proj.bias", 5, CP, 1, 0, {0}},
    [VIT_MT_CLS] = {"cls", 1, {D}, Z, NO, 0, ALL, U0, "cls_token", 0, CP, 3, 0, {0}},
    [VIT_MT_POS] = {"pos", 2, {TOK, D}, N, STD, 0, ALL, U0, "pos_embed", 1, CP, 3, 0, {0}},

    [VIT_MT_LOCAL_W] = {"local.w", 2, {K9, D}, N, STD, 1, LOC, UP, "local.weight", 13, CONV, 4,
                        0, {0}},
    [VIT_MT_LOCAL_B] = {"local.b", 1, {D}, Z, NO, 0, LOC, U0, "local.bias", 14, CP, 1, 0, {0}},
    [VIT_MT_LN1_G] = {"ln1.g", 1, {D}, ONE, NO, 0, ALL, U0, "norm1.weight", 0, CP, 1, 0, {0}},
    [VIT_MT_LN1_B] = {"ln1.b", 1, {D}, Z, NO, 0, ALL, U0, "norm1.bias", 1, CP, 1, 0, {0}},
    [VIT_MT_W_QKV] = {"attn.w_qkv", 2, {D, D3}, N, STD, 1, ALL, UT, "attn.qkv.weight", 2, TR, 2,
                      VIT_MT_LEGACY_QKV_W, {"attn.w_q", "attn.w_k", "attn.w_v"}},
    [VIT_MT_W_O] = {"attn.w_o", 2, {D, D}, N, STD, 1, ALL, UT, "attn.proj.weight", 4, TR, 2, 0, {0}},
    [VIT_MT_B_QKV] = {"attn.b_qkv", 1, {D3}, Z, NO, 0, ALL, U0, "attn.qkv.bias", 3, CP, 1,
                      VIT_MT_LEGACY_QKV_B, {"attn.b_q", "attn.b_k", "attn.b_v"}},
    [VIT_MT_B_O] = {"attn.b_o", 1, {D}, Z, NO, 0, ALL, U0, "attn.proj.bias", 5, CP, 1, 0, {0}},
    [VIT_MT_TAU] = {"attn.tau", 1, {H}, K, DK, 0, LSA, U0, "attn.tau", 12, CP, 1, 0, {0}},
    [VIT_MT_LN2_G] = {"ln2.g", 1, {D}, ONE, NO, 0, ALL, U0, "norm2.weight", 6, CP, 1, 0, {0}},
    [VIT_MT_LN2_B] = {"ln2.b", 1, {D}, Z, NO, 0, ALL, U0, "norm2.bias", 7, CP, 1, 0, {0}},
    [VIT_MT_W1] = {"mlp.w1", 2, {D, MLP}, N, STD, 1, ALL, UT, "mlp.fc1.weight", 8, TR, 2, 0, {0}},
    [VIT_MT_B1] = {"mlp.b1", 1, {MLP}, Z, NO, 0, ALL, U0, "mlp.fc1.bias", 9, CP, 1, 0, {0}},
    [VIT_MT_W2] = {"mlp.w2", 2, {MLP, D}, N, STD, 1, ALL, UT, "mlp.fc2.weight", 10, TR, 2, 0, {0}},
    [VIT_MT_B2] = {"mlp.b2", 1, {D}, Z, NO, 0, ALL, U0, "mlp.fc2.bias", 11, CP, 1, 0, {0}},

    [VIT_MT_LN_G] = {"ln.g", 1, {D}, ONE, NO, 0, ALL, U0, "norm.weight", 0, CP, 1, 0, {0}},
    [VIT_MT_LN_B] = {"ln.b", 1, {D}, Z, NO, 0, ALL, U0, "norm.bias", 1, CP, 1, 0, {0}},
    [VIT_MT_HEAD_W] = {"head.w", 2, {D, CL}, N, STD, 1, ALL, UI, "head.weight", 2, TR, 2, 0, {0}},
    [VIT_MT_HEAD_B] = {"head.b", 1, {CL}, Z, NO, 0, ALL, U0, "head.bias", 3, CP, 1, 0, {0}},
};

const vit_mt_row *vit_mt_row_at(int id)
{
    return id >= 0 && id < VIT_MT_ROWS ? &rows[id] : NULL;
}

int vit_mt_applies(const vit_config *cfg, int id)
{
    switch (rows[id].when) {
    case VIT_MT_IF_LSA: return cfg->lsa != 0;
    case VIT_MT_IF_STEM: return cfg->stem > 0;
    case VIT_MT_IF_STEM2: return cfg->stem > 0 && cfg->stem2 > 0;
    case VIT_MT_IF_LOCAL: return cfg->local_conv != 0;
    default: return 1;
    }
}

int vit_mt_dim(const vit_config *cfg, int dim)
{
    switch (dim) {
    case VIT_MT_D: return cfg->dim;
    case VIT_MT_3D: return 3 * cfg->dim;
    case VIT_MT_MLP: return cfg->mlp;
    case VIT_MT_CLASSES: return cfg->classes;
    case VIT_MT_TOKENS: {
        vit_patch_shape ps = vit_config_patch_shape(cfg); /* overlapping patches: more tokens */
        return vit_patch_count(&ps) + 1;
    }
    case VIT_MT_PIXELS: return cfg->patch * cfg->patch * vit_config_patch_shape(cfg).channels;
    case VIT_MT_STEM: return cfg->stem;
    case VIT_MT_STEM_PIXELS: return 9 * cfg->channels;
    case VIT_MT_STEM2: return cfg->stem2;
    case VIT_MT_STEM2_PIXELS: return 16 * cfg->stem;
    case VIT_MT_TAPS: return 9;
    default: return cfg->heads;
    }
}

static double init_scale(const vit_config *cfg, int scale)
{
    if (scale == VIT_MT_INIT_STD)
        return cfg->init_std;
    if (scale == VIT_MT_INV_SQRT_DK)
        return 1.0 / sqrt((double)(cfg->dim / cfg->heads));
    return 0;
}

/* The walk's position pos as a row and a block: the embedding rows, then the
 * block rows depth times, then the end rows; 0 past the end. */
static int locate(const vit_config *cfg, int pos, int *id, int *layer)
{
    const int front = VIT_MT_FIRST_BLOCK, block = VIT_MT_FIRST_END - VIT_MT_FIRST_BLOCK;
    *layer = -1;
    if (pos < front) {
        *id = pos;
        return 1;
    }
    pos -= front;
    if (pos < block * cfg->depth) {
        *layer = pos / block;
        *id = VIT_MT_FIRST_BLOCK + pos % block;
        return 1;
    }
    *id = VIT_MT_FIRST_END + pos - block * cfg->depth;
    return *id < VIT_MT_ROWS;
}

/* "blocks.L." + s in a block, else s. */
static void block_name(char *dst, size_t cap, int layer, const char *s)
{
    if (layer >= 0)
        snprintf(dst, cap, "blocks.%d.%s", layer, s);
    else
        snprintf(dst, cap, "%s", s);
}

int vit_mt_next(const vit_config *cfg, vit_mt *t)
{
    int id, layer;
    do {
        if (!locate(cfg, t->pos++, &id, &layer))
            return 0;
    } while (!vit_mt_applies(cfg, id));
    const vit_mt_row *r = &rows[id];
    t->id = id;
    t->layer = layer;
    t->row = r;
    block_name(t->name, sizeof t->name, layer, r->name);
    block_name(t->timm, sizeof t->timm, layer, r->timm);
    t->ndim = r->ndim;
    t->size = 1;
    for (int k = 0; k < 2; k++) {
        t->shape[k] = k < r->ndim ? vit_mt_dim(cfg, r->dim[k]) : 0;
        if (k < r->ndim)
            t->size *= (size_t)t->shape[k];
    }
    t->scale = init_scale(cfg, r->scale);
    return 1;
}

size_t vit_config_param_count(const vit_config *cfg)
{
    if (vit_config_check(cfg) != VIT_OK)
        return 0;
    const vit_arch *a = vit_config_arch(cfg);
    if (a != vit_arch_vit()) { /* what its build adds, without buffers */
        vit_params *p = vit_params_new();
        void *state = NULL;
        size_t n = p && a->build(cfg, p, &state) == VIT_OK ? vit_params_count(p) : 0;
        if (a->release)
            a->release(state);
        vit_params_free(p);
        return n;
    }
    size_t n = 0;
    vit_mt t = {.pos = 0};
    while (vit_mt_next(cfg, &t))
        n += t.size;
    return n;
}

/* Multiply-adds of the matrix products: each weight matrix times the
 * vectors it is applied to (row `uses`), and per block the two attention
 * products Q K^T and P V, T x T x d_k per head each. */
size_t vit_config_macs(const vit_config *cfg)
{
    if (vit_config_check(cfg) != VIT_OK)
        return 0;
    const vit_arch *a = vit_config_arch(cfg);
    if (a != vit_arch_vit()) {
        vit_arch_info info = {0};
        a->describe(cfg, &info);
        return info.macs;
    }
    return vit_mt_macs(cfg);
}

size_t vit_mt_macs(const vit_config *cfg)
{
    const size_t T = (size_t)vit_mt_dim(cfg, VIT_MT_TOKENS);
    const size_t uses[] = {[VIT_MT_NO_MACS] = 0, [VIT_MT_PER_PATCH] = T - 1,
                           [VIT_MT_PER_TOKEN] = T, [VIT_MT_PER_IMAGE] = 1,
                           [VIT_MT_PER_PIXEL] = (size_t)cfg->image_height * cfg->image_width,
                           [VIT_MT_PER_HALF_PIXEL] = (size_t)(cfg->image_height / 2)
                                                     * (size_t)(cfg->image_width / 2)};
    size_t n = (size_t)cfg->depth * 2 * T * T * (size_t)cfg->dim;
    vit_mt t = {.pos = 0};
    while (vit_mt_next(cfg, &t))
        n += uses[t.row->uses] * t.size;
    return n;
}
