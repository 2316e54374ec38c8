/*
 * A timm VisionTransformer's safetensors file as published: the config read
 * off the tensors' shapes (and the arch table for the heads), then the
 * tensors taken as our export's (safetensors.c: the names are timm's).
 */
#include "vit/finetune.h"

#include <stdio.h>
#include <string.h>

#include "error.h"
#include "safetensors_internal.h"

/* timm's published ViTs with the layout we read (pre-norm blocks, class
 * token, absolute position embeddings with the class token's row, qkv
 * bias, no layer scale, the token head).  Head width 64 throughout. */
static const vit_timm_arch archs[] = {
    {"vit_tiny_patch16_224", 192, 12, 3, 768, 16, 224},
    {"vit_tiny_patch16_384", 192, 12, 3, 768, 16, 384},
    {"deit_tiny_patch16_224", 192, 12, 3, 768, 16, 224},
    {"vit_small_patch16_224", 384, 12, 6, 1536, 16, 224},
    {"vit_small_patch16_384", 384, 12, 6, 1536, 16, 384},
    {"vit_small_patch8_224", 384, 12, 6, 1536, 8, 224},
    {"vit_small_patch32_224", 384, 12, 6, 1536, 32, 224},
    {"vit_small_patch32_384", 384, 12, 6, 1536, 32, 384},
    {"deit_small_patch16_224", 384, 12, 6, 1536, 16, 224},
    {"vit_base_patch16_224", 768, 12, 12, 3072, 16, 224},
    {"vit_base_patch16_384", 768, 12, 12, 3072, 16, 384},
    {"vit_base_patch8_224", 768, 12, 12, 3072, 8, 224},
    {"vit_base_patch32_224", 768, 12, 12, 3072, 32, 224},
    {"vit_base_patch32_384", 768, 12, 12, 3072, 32, 384},
    {"deit_base_patch16_224", 768, 12, 12, 3072, 16, 224},
    {"deit_base_patch16_384", 768, 12, 12, 3072, 16, 384},
};
#define NARCH (int)(sizeof archs / sizeof archs[0])

const vit_timm_arch *vit_timm_arch_at(int i)
{
    return i >= 0 && i < NARCH ? &archs[i] : NULL;
}

const vit_timm_arch *vit_timm_arch_find(const char *name)
{
    for (int i = 0; name && i < NARCH; i++)
        if (strcmp(archs[i].name, name) == 0)
            return &archs[i];
    return NULL;
}

/* Tensors of timm options we do not compute: a name (or, for a block's, the
 * part after "blocks.L.") and what made it. */
static const struct {
    const char *name, *why;
    int in_block;
} foreign[] = {
    {"dist_token", "a distillation token (deit_*_distilled)", 0},
    {"head_dist.weight", "a distillation head (deit_*_distilled)", 0},
    {"reg_token", "register tokens (reg_tokens > 0)", 0},
    {"norm_pre.weight", "a norm before the blocks (pre_norm=True)", 0},
    {"fc_norm.weight", "a norm after the average (global_pool='avg' with fc_norm; ours "
                       "normalises before pooling)", 0},
    {"attn_pool.latent", "attention pooling (global_pool='map')", 0},
    {"ls1.gamma", "layer scale (init_values)", 1},
    {"ls2.gamma", "layer scale (init_values)", 1},
    {"attn.q_norm.weight", "query/key norms (qk_norm=True)", 1},
    {"attn.norm.weight", "a norm inside the attention (scale_attn_norm)", 1},
    {"mlp.norm.weight", "a norm inside the MLP (scale_mlp_norm)", 1},
};

static int refuse_foreign(const vit_st_file *f, const char *path)
{
    uint64_t s[VIT_ST_SHAPE_MAX];
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s%s", foreign[i].in_block ? "blocks.0." : "",
                 foreign[i].name);
        if (vit_st_shape(f, name, s) >= 0)
            return vit_fail(VIT_EFORMAT, "%s: tensor '%s' is %s, which this library does not "
                            "compute", path, name, foreign[i].why);
    }
    if (vit_st_shape(f, "cls_token", s) < 0)
        return vit_fail(VIT_EFORMAT, "%s: no tensor 'cls_token' (timm's class_token=False): this "
                        "library's ViT has a class token", path);
    return VIT_OK;
}

/* The shape of tensor name, which must have rank ndim: its dims, or a
 * message naming it. */
static int need(const vit_st_file *f, const char *path, const char *name, int ndim,
                uint64_t *s)
{
    int r = vit_st_shape(f, name, s);
    if (r < 0)
        return vit_fail(VIT_EFORMAT, "%s: tensor '%s' is missing (not a timm "
                        "VisionTransformer?)", path, name);
    if (r != ndim)
        return vit_fail(VIT_EFORMAT, "%s: tensor '%s' has rank %d, timm's has %d", path, name, r,
                        ndim);
    for (int k = 0; k < r; k++)
        if (s[k] < 1 || s[k] > (1u << 20))
            return vit_fail(VIT_EFORMAT, "%s: tensor '%s' has dimension %d of %llu", path, name, k,
                            (unsigned long long)s[k]);
    return VIT_OK;
}

static int isqrt_exact(uint64_t n)
{
    for (uint64_t g = 1; g * g <= n; g++)
        if (g * g == n)
            return (int)g;
    return 0;
}

/* The config the shapes say, arch (or heads) for the rest. */
static int infer(const vit_st_file *f, const char *path, const vit_timm_arch *a, int heads,
                 vit_config *c)
{
    uint64_t pe[VIT_ST_SHAPE_MAX], pos[VIT_ST_SHAPE_MAX], fc1[VIT_ST_SHAPE_MAX],
        hw[VIT_ST_SHAPE_MAX];
    TRY(refuse_foreign(f, path));
    TRY(need(f, path, "patch_embed.proj.weight", 4, pe));
    TRY(need(f, path, "pos_embed", 3, pos));
    TRY(need(f, path, "blocks.0.mlp.fc1.weight", 2, fc1));
    if (pe[2] != pe[3])
        return vit_fail(VIT_EFORMAT, "%s: patch_embed.proj.weight has %llux%llu patches, only "
                        "square ones are read", path, (unsigned long long)pe[2],
                        (unsigned long long)pe[3]);
    vit_config_default(c);
    c->dim = (int)pe[0];
    c->channels = (int)pe[1];
    c->patch = (int)pe[2];
    c->patch_stride = 0;
    c->patch_pad = 0;
    c->mlp = (int)fc1[0];
    c->pool = VIT_POOL_CLS;
    c->ln_eps = 1e-6;
    int depth = 0;
    for (;; depth++) {
        char name[64];
        uint64_t s[VIT_ST_SHAPE_MAX];
        snprintf(name, sizeof name, "blocks.%d.norm1.weight", depth);
        if (vit_st_shape(f, name, s) < 0)
            break;
    }
    c->depth = depth;
    if (vit_st_shape(f, "head.weight", hw) < 0)
        return vit_fail(VIT_EFORMAT, "%s: no tensor 'head.weight' (timm's num_classes=0, a "
                        "backbone without its head): not supported", path);
    TRY(need(f, path, "head.weight", 2, hw));
    c->classes = (int)hw[0];
    uint64_t n = pos[1] - 1;
    if (pos[0] != 1 || pos[1] < 2 || pos[2] != (uint64_t)c->dim)
        return vit_fail(VIT_EFORMAT, "%s: pos_embed has shape [%llu, %llu, %llu], timm's is [1, "
                        "1 + patches, %d]", path, (unsigned long long)pos[0],
                        (unsigned long long)pos[1], (unsigned long long)pos[2], c->dim);
    if (a) {
        int side = a->image / a->patch;
        if ((uint64_t)side * side == n + 1)
            return vit_fail(VIT_EFORMAT, "%s: pos_embed has %llu rows, the %dx%d grid's alone: "
                            "no class token row (timm's no_embed_class=True) is not supported",
                            path, (unsigned long long)pos[1], side, side);
        char bad[200] = "";
        size_t l = 0;
#define CHECK(what, have, want)                                                          \
        if ((have) != (want))                                                            \
            l += (size_t)snprintf(bad + l, l < sizeof bad ? sizeof bad - l : 0,        \
                                  "%s%s %d (the file) vs %d", l ? ", " : "", what, (int)(have), \
                                  (int)(want))
        CHECK("dim", c->dim, a->dim);
        CHECK("depth", c->depth, a->depth);
        CHECK("mlp", c->mlp, a->mlp);
        CHECK("patch", c->patch, a->patch);
        CHECK("patches", (int)n, side * side);
#undef CHECK
        if (bad[0])
            return vit_fail(VIT_EFORMAT, "%s: not a %s: %s", path, a->name, bad);
        c->heads = a->heads;
        c->image_height = c->image_width = a->image;
    } else {
        int g = isqrt_exact(n);
        if (!g && isqrt_exact(pos[1]))
            return vit_fail(VIT_EFORMAT, "%s: pos_embed has %llu rows, a square grid's alone: no "
                            "class token row (timm's no_embed_class=True) is not supported", path,
                            (unsigned long long)pos[1]);
        if (!g)
            return vit_fail(VIT_EFORMAT, "%s: pos_embed has %llu rows: 1 + %llu patches, not a "
                            "square grid (give the arch)", path, (unsigned long long)pos[1],
                            (unsigned long long)n);
        if (heads < 1)
            return vit_fail(VIT_EINVAL, "%s: the shapes do not tell the number of heads: give an "
                            "arch (e.g. vit_tiny_patch16_224) or the heads", path);
        c->heads = heads;
        c->image_height = c->image_width = g * c->patch;
    }
    if (c->depth < 1)
        return vit_fail(VIT_EFORMAT, "%s: no blocks (blocks.0.norm1.weight)", path);
    if (vit_config_check(c) != VIT_OK) {
        char why[300];
        snprintf(why, sizeof why, "%s", vit_last_error());
        return vit_fail(VIT_EFORMAT, "%s: the shapes do not describe a model: %s", path, why);
    }
    return VIT_OK;
}

int vit_timm_load(const char *path, const char *arch, int heads, vit_model **model)
{
    if (model)
        *model = NULL;
    if (!path || !model)
        return vit_fail(VIT_EINVAL, "vit_timm_load: %s is NULL", !path ? "path" : "model");
    const vit_timm_arch *a = NULL;
    if (arch && !(a = vit_timm_arch_find(arch))) {
        char list[700];
        size_t l = 0;
        for (int i = 0; i < NARCH && l < sizeof list; i++)
            l += (size_t)snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "",
                                  archs[i].name);
        return vit_fail(VIT_EINVAL, "vit_timm_load: unknown arch '%s' (known: %s)", arch, list);
    }
    vit_st_file *f;
    TRY(vit_st_open(path, &f));
    vit_config c;
    int rc = infer(f, path, a, heads, &c);
    if (rc == VIT_OK)
        rc = vit_st_fill(f, &c, NULL, 0, model);
    vit_st_close(f);
    return rc;
}
