/*
 * The model/training config: defaults, `key = value` text, and the checks
 * that keep a model buildable.  One table describes every field, so parsing,
 * formatting and flag overrides cannot drift apart.
 */
#include "vit/model.h"
#include "config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "vit/bf16.h"
#include "vit/embeddings.h"

enum kind { K_INT, K_DOUBLE, K_U64, K_POOL, K_TTA, K_PRECISION };

typedef struct field {
    const char *key;
    enum kind kind;
    size_t offset;
    double lo, hi;     /* allowed range (inclusive) */
    const char *help;
} field;

#define F(key, kind, lo, hi, help) {#key, kind, offsetof(vit_config, key), lo, hi, help}

static const field fields[] = {
    F(image_height, K_INT, 1, 4096, "image height in pixels (from the data)"),
    F(image_width, K_INT, 1, 4096, "image width in pixels (from the data)"),
    F(channels, K_INT, 1, 4, "image channels (from the data)"),
    F(classes, K_INT, 2, 100000, "number of classes (from the data)"),
    F(patch, K_INT, 1, 4096, "patch side in pixels"),
    F(dim, K_INT, 1, 65536, "token width"),
    F(depth, K_INT, 1, 1024, "number of transformer blocks"),
    F(heads, K_INT, 1, 4096, "attention heads (divides dim)"),
    F(mlp, K_INT, 1, 1 << 20, "MLP hidden width"),
    F(pool, K_POOL, 0, 1, "cls or mean: what the head reads"),
    F(patch_stride, K_INT, 0, 4096, "patch stride in pixels (0: the patch side, no overlap)"),
    F(patch_pad, K_INT, 0, 4095, "zero padding around the image for overlapping patches"),
    F(lsa, K_INT, 0, 1,
      "1: locality self-attention (no token attends itself; learnable per-head scale)"),
    F(stem, K_INT, 0, 4096, "channels of a 3x3 convolution + GELU before the patches "
      "(0: patches of the image itself)"),
    F(stem2, K_INT, 0, 4096, "channels of a second stem convolution, 4x4 at stride 2 + GELU: the "
      "patches are cut from its half-size map (0: none; needs stem)"),
    F(local_conv, K_INT, 0, 1, "1: each block starts by adding to the patch tokens a 3x3 "
      "depthwise convolution of them over their grid (0: none)"),
    F(ln_eps, K_DOUBLE, 1e-12, 1, "the layer norms' epsilon (1e-5; 1e-6 for timm's ViTs)"),
    F(epochs, K_INT, 1, 1000000, "training epochs"),
    F(batch, K_INT, 1, 1 << 20, "minibatch size"),
    F(lr, K_DOUBLE, 1e-12, 10, "peak learning rate"),
    F(min_lr, K_DOUBLE, 0, 10, "final learning rate of the cosine decay"),
    F(warmup, K_DOUBLE, 0, 1000000, "linear warm-up length in epochs"),
    F(weight_decay, K_DOUBLE, 0, 10, "AdamW decoupled weight decay"),
    F(beta1, K_DOUBLE, 0, 0.999999, "AdamW beta1"),
    F(beta2, K_DOUBLE, 0, 0.999999999, "AdamW beta2"),
    F(eps, K_DOUBLE, 1e-30, 1, "AdamW epsilon"),
    F(smoothing, K_DOUBLE, 0, 0.99, "label smoothing"),
    F(shift, K_INT, 0, 64, "random translation in pixels (augmentation)"),
    F(rotate, K_DOUBLE, 0, 180, "random rotation in degrees (augmentation)"),
    F(scale, K_DOUBLE, 0, 0.5, "random zoom: factor in [1-scale, 1+scale] (augmentation)"),
    F(init_std, K_DOUBLE, 1e-6, 10, "std of the weight initialisation"),
    F(ema, K_DOUBLE, 0, 0.999999, "weight averaging: decay of the weights' moving average, "
      "which is scored and saved (0: off)"),
    F(crop_pad, K_INT, 0, 64, "random crop with zero padding of this many pixels (the same "
      "translation as shift; the larger of the two is used)"),
    F(flip, K_INT, 0, 1, "1: random horizontal flip with probability 0.5 (not for digits or text)"),
    F(erase, K_DOUBLE, 0, 1, "random erasing: probability that an image gets a box of 2-33% "
      "of its area filled with noise (0: off)"),
    F(mixup, K_DOUBLE, 0, 100, "mixup: alpha of the Beta(alpha, alpha) mixing weight (0: off)"),
    F(cutmix, K_DOUBLE, 0, 100, "cutmix: alpha of the Beta(alpha, alpha) box area (0: off)"),
    F(mix_prob, K_DOUBLE, 0, 1, "probability that a batch is mixed when mixup or cutmix is on "
      "(both on: one of them per batch, each with probability 0.5)"),
    F(drop_path, K_DOUBLE, 0, 0.99, "stochastic depth: residual branches dropped per image, at "
      "this rate in the last block, linearly less in earlier ones (0: off)"),
    F(seed, K_U64, 0, 0, "random seed"),
    F(tta, K_TTA, 0, 3, "test-time augmentation: none, shift9 (image and 8 one-pixel "
      "shifts), shift9flip (those 9 and their 9 mirror images: for models trained with flip), "
      "or auto (shift9, or shift9flip with flip, only if it beats one pass on the validation "
      "set)"),
    F(recompute, K_INT, 0, 1,
      "1: keep only each block's input and recompute the block in the backward (less memory)"),
    F(ckpt_minutes, K_DOUBLE, 0, 1e6, "minutes between checkpoints inside an epoch (0: off)"),
    F(precision, K_PRECISION, 0, 2, "training's matrix products: fp32, bf16 (bfloat16 inputs, "
      "float32 sums; fp32 where the CPU lacks it) or auto"),
};
#define NFIELDS (int)(sizeof fields / sizeof fields[0])

void vit_config_default(vit_config *c)
{
    memset(c, 0, sizeof *c);
    c->image_height = 8;
    c->image_width = 8;
    c->channels = 1;
    c->classes = 10;
    /* 4x4 patches at stride 2 over the image padded by 1: on 8x8 digits
     * the same 4x4 grid as 2x2 patches, each token seeing 4x the pixels
     * (chosen on --val 287 with the rest of the recipe: README, Measured). */
    c->patch = 4;
    c->patch_stride = 2;
    c->patch_pad = 1;
    c->dim = 64;
    c->depth = 4;
    c->heads = 4;
    c->mlp = 128;
    c->pool = VIT_POOL_CLS;
    c->ln_eps = VIT_LAYERNORM_EPS;
    c->epochs = 140;
    c->batch = 32;
    c->lr = 2e-3;
    c->min_lr = 1e-5;
    c->warmup = 5;
    c->weight_decay = 0.05;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->smoothing = 0.1;
    c->shift = 1;
    c->init_std = 0.1;
    c->seed = 1;
    c->ckpt_minutes = 10;
    c->tta = VIT_TTA_SHIFT9;
    c->mix_prob = 1;
}

void vit_config_legacy_default(vit_config *c)
{
    vit_config_default(c);
    c->patch_stride = 0;
    c->patch_pad = 0;
    c->lsa = 0;
    c->tta = VIT_TTA_NONE;
    c->ema = 0;
}

/* The shortest of %.15g, %.16g and %.17g that reads back as the same
 * double: 0.05 stays "0.05" (not 0.050000000000000003), yet every value
 * survives text bitwise (%.17g always does). */
static const char *fmt_double(double v, char out[32])
{
    for (int prec = 15; prec < 17; prec++) {
        snprintf(out, 32, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return out;
    }
    snprintf(out, 32, "%.17g", v);
    return out;
}

static const field *find_field(const char *key)
{
    for (int i = 0; i < NFIELDS; i++)
        if (strcmp(fields[i].key, key) == 0)
            return &fields[i];
    return NULL;
}

int vit_config_set(vit_config *c, const char *key, const char *value)
{
    if (!c || !key || !value)
        return vit_fail(VIT_EINVAL, "vit_config_set: NULL argument");
    const field *f = find_field(key);
    if (!f)
        return vit_fail(VIT_EINVAL, "unknown config key '%s'", key);
    void *dst = (char *)c + f->offset;
    char *end = NULL;
    errno = 0;
    switch (f->kind) {
    case K_POOL:
        if (strcmp(value, "cls") == 0)
            *(int *)dst = VIT_POOL_CLS;
        else if (strcmp(value, "mean") == 0)
            *(int *)dst = VIT_POOL_MEAN;
        else
            return vit_fail(VIT_EINVAL, "%s: expected cls or mean, got '%s'", key, value);
        return VIT_OK;
    case K_TTA:
        if (strcmp(value, "none") == 0)
            *(int *)dst = VIT_TTA_NONE;
        else if (strcmp(value, "shift9") == 0)
            *(int *)dst = VIT_TTA_SHIFT9;
        else if (strcmp(value, "auto") == 0)
            *(int *)dst = VIT_TTA_AUTO;
        else if (strcmp(value, "shift9flip") == 0)
            *(int *)dst = VIT_TTA_SHIFT9_FLIP;
        else
            return vit_fail(VIT_EINVAL, "%s: expected none, shift9, shift9flip or auto, got '%s'",
                            key, value);
        return VIT_OK;
    case K_PRECISION:
        if (strcmp(value, "fp32") == 0)
            *(int *)dst = VIT_PRECISION_FP32;
        else if (strcmp(value, "bf16") == 0)
            *(int *)dst = VIT_PRECISION_BF16;
        else if (strcmp(value, "auto") == 0)
            *(int *)dst = VIT_PRECISION_AUTO;
        else
            return vit_fail(VIT_EINVAL, "%s: expected fp32, bf16 or auto, got '%s'", key, value);
        return VIT_OK;
    case K_U64: {
        if (*value == '-')
            return vit_fail(VIT_EINVAL, "%s: expected a non-negative integer, got '%s'", key, value);
        unsigned long long v = strtoull(value, &end, 10);
        if (end == value || *end || errno)
            return vit_fail(VIT_EINVAL, "%s: expected a non-negative integer, got '%s'", key, value);
        *(unsigned long long *)dst = v;
        return VIT_OK;
    }
    case K_INT: {
        long v = strtol(value, &end, 10);
        if (end == value || *end || errno)
            return vit_fail(VIT_EINVAL, "%s: expected an integer, got '%s'", key, value);
        if (v < f->lo || v > f->hi)
            return vit_fail(VIT_EINVAL, "%s: %ld is out of range [%.0f, %.0f]", key, v, f->lo, f->hi);
        *(int *)dst = (int)v;
        return VIT_OK;
    }
    case K_DOUBLE: {
        double v = strtod(value, &end);
        char t[3][32];
        if (end == value || *end || errno || !isfinite(v))
            return vit_fail(VIT_EINVAL, "%s: expected a number, got '%s'", key, value);
        if (v < f->lo || v > f->hi)
            return vit_fail(VIT_EINVAL, "%s: %s is out of range [%s, %s]", key, fmt_double(v, t[0]),
                            fmt_double(f->lo, t[1]), fmt_double(f->hi, t[2]));
        *(double *)dst = v;
        return VIT_OK;
    }
    }
    return VIT_EINVAL;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

int vit_config_parse(vit_config *c, const char *text, const char *origin)
{
    if (!c || !text)
        return vit_fail(VIT_EINVAL, "vit_config_parse: NULL argument");
    if (!origin)
        origin = "config";
    /* The line each key was set on (0: not yet), so that a key given twice
     * is refused: the later line would silently win, hiding the earlier one
     * from whoever reads the file top-down. */
    int first[NFIELDS] = {0};
    int line = 0;
    const char *p = text;
    while (*p) {
        line++;
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char buf[512];
        if (len >= sizeof buf)
            return vit_fail(VIT_EFORMAT, "%s:%d: line too long", origin, line);
        memcpy(buf, p, len);
        buf[len] = 0;
        p += len + (nl ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = 0;
        char *s = trim(buf);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq)
            return vit_fail(VIT_EFORMAT, "%s:%d: expected 'key = value'", origin, line);
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        const field *f = find_field(key);
        if (f && first[f - fields])
            return vit_fail(VIT_EFORMAT, "%s:%d: %s is set twice (first on line %d)", origin, line,
                            key, first[f - fields]);
        if (vit_config_set(c, key, val) != VIT_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", vit_last_error());
            return vit_fail(VIT_EFORMAT, "%s:%d: %s", origin, line, msg);
        }
        first[f - fields] = line; /* f is known: vit_config_set refuses unknown keys */
    }
    return VIT_OK;
}

int vit_config_load(vit_config *c, const char *path)
{
    if (!c || !path)
        return vit_fail(VIT_EINVAL, "vit_config_load: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f)
        return vit_fail(VIT_EIO, "%s: cannot open config: %s", path, strerror(errno));
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    int err = ferror(f), more = !feof(f) && fgetc(f) != EOF;
    fclose(f);
    if (err)
        return vit_fail(VIT_EIO, "%s: read error", path);
    if (more)
        return vit_fail(VIT_EFORMAT, "%s: config larger than %zu bytes", path, sizeof text - 1);
    if (memchr(text, 0, n))
        return vit_fail(VIT_EFORMAT, "%s: not a text file (NUL byte)", path);
    text[n] = 0;
    return vit_config_parse(c, text, path);
}

int vit_config_format(const vit_config *c, char *buf, size_t cap)
{
    if (!c || !buf)
        return vit_fail(VIT_EINVAL, "vit_config_format: NULL argument");
    size_t len = 0;
    for (int i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        const void *src = (const char *)c + f->offset;
        int n = 0;
        char t[32];
        size_t room = len < cap ? cap - len : 0;
        switch (f->kind) {
        case K_INT: n = snprintf(buf + len, room, "%s = %d\n", f->key, *(const int *)src); break;
        case K_U64: n = snprintf(buf + len, room, "%s = %llu\n", f->key, *(const unsigned long long *)src); break;
        case K_DOUBLE:
            n = snprintf(buf + len, room, "%s = %s\n", f->key, fmt_double(*(const double *)src, t));
            break;
        case K_POOL: n = snprintf(buf + len, room, "%s = %s\n", f->key,
                                  *(const int *)src == VIT_POOL_MEAN ? "mean" : "cls"); break;
        case K_TTA: n = snprintf(buf + len, room, "%s = %s\n", f->key,
                                 vit_tta_name(*(const int *)src)); break;
        case K_PRECISION: n = snprintf(buf + len, room, "%s = %s\n", f->key,
                                       vit_precision_name(*(const int *)src)); break;
        }
        if (n < 0 || (size_t)n >= room)
            return vit_fail(VIT_EINVAL, "vit_config_format: buffer of %zu bytes too small", cap);
        len += (size_t)n;
    }
    return (int)len;
}

int vit_config_check(const vit_config *c)
{
    if (!c)
        return vit_fail(VIT_EINVAL, "vit_config_check: NULL config");
    for (int i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (f->kind != K_INT && f->kind != K_TTA && f->kind != K_PRECISION)
            continue;
        int v = *(const int *)((const char *)c + f->offset);
        if (v < f->lo || v > f->hi)
            return vit_fail(VIT_EINVAL, "%s: %d is out of range [%.0f, %.0f]", f->key, v, f->lo, f->hi);
    }
    if (c->stem2 > 0 && c->stem == 0)
        return vit_fail(VIT_EINVAL, "stem2: %d channels of a second stem convolution need a "
                        "first (stem > 0)", c->stem2);
    if (c->stem2 > 0 && (c->image_height % 2 || c->image_width % 2))
        return vit_fail(VIT_EINVAL, "stem2: its stride 2 halves the %dx%d feature map, which "
                        "needs an even height and width", c->image_height, c->image_width);
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
    if (!(c->ema >= 0 && c->ema < 1)) {
        char t[32];
        return vit_fail(VIT_EINVAL, "ema: %s is out of range [0, 1)", fmt_double(c->ema, t));
    }
    /* The augmentation rates (a config filled in by code, not text). */
    const struct { const char *key; double v, hi; int open; } rate[] = {
        {"drop_path", c->drop_path, 1, 1}, {"erase", c->erase, 1, 0}, {"mixup", c->mixup, 100, 0},
        {"cutmix", c->cutmix, 100, 0},     {"mix_prob", c->mix_prob, 1, 0}};
    for (size_t i = 0; i < sizeof rate / sizeof rate[0]; i++)
        if (!(rate[i].v >= 0 && (rate[i].open ? rate[i].v < rate[i].hi : rate[i].v <= rate[i].hi))) {
            char t[2][32];
            return vit_fail(VIT_EINVAL, "%s: %s is out of range [0, %s%c", rate[i].key,
                            fmt_double(rate[i].v, t[0]), fmt_double(rate[i].hi, t[1]),
                            rate[i].open ? ')' : ']');
        }
    if (c->min_lr > c->lr) {
        char t[2][32];
        return vit_fail(VIT_EINVAL, "min_lr: %s exceeds lr %s", fmt_double(c->min_lr, t[0]),
                        fmt_double(c->lr, t[1]));
    }
    return VIT_OK;
}

/* The help text of each key, for tools that list them. */
const char *vit_config_key_help(int i, const char **key)
{
    if (i < 0 || i >= NFIELDS)
        return NULL;
    if (key)
        *key = fields[i].key;
    return fields[i].help;
}

/* ---- a patch for the data's images --------------------------------------- */

int vit_config_pick_patch(int height, int width, int max_grid, int *patch, int *fits, char *why,
                          size_t cap)
{
    if (!patch || height < 1 || width < 1 || height > 100000 || width > 100000 || max_grid < 1)
        return vit_fail(VIT_EINVAL, "vit_config_pick_patch: %s",
                        !patch ? "patch is NULL" : max_grid < 1 ? "max_grid < 1"
                                                                : "image side outside 1 .. 100000");
    int small = height < width ? height : width;
    int best_fit = 0, largest = 0;
    /* A common divisor leaving at least 2 patches along the shorter side. */
    for (int p = 1; p <= small / 2; p++) {
        if (height % p || width % p)
            continue;
        largest = p;
        if (!best_fit && height / p <= max_grid && width / p <= max_grid)
            best_fit = p;
    }
    int p = best_fit ? best_fit : largest ? largest : 1;
    int gh = height / p, gw = width / p;
    if (fits)
        *fits = gh <= max_grid && gw <= max_grid;
    if (why && cap > 0) {
        if (best_fit)
            snprintf(why, cap, "%dx%d patches of %dx%d, the finest grid within %dx%d", gh, gw,
                     height, width, max_grid, max_grid);
        else
            snprintf(why, cap, "%dx%d patches of %dx%d, the coarsest: no grid within %dx%d "
                     "divides it", gh, gw, height, width, max_grid, max_grid);
    }
    *patch = p;
    return VIT_OK;
}
