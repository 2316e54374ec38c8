/*
 * The model/training config: defaults, `key = value` text, and the checks
 * that keep a model buildable.  One table describes every field, so parsing,
 * formatting and flag overrides cannot drift apart.
 */
#include "vit/model.h"
#include "arch_internal.h"
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

enum kind { K_INT, K_DOUBLE, K_U64, K_TTA, K_PRECISION };

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
    F(brightness, K_DOUBLE, 0, 1, "colour jitter: brightness factor uniform in [1-v, 1+v] "
      "multiplying the image (0: off)"),
    F(contrast, K_DOUBLE, 0, 1, "colour jitter: blend with the image's mean gray by a factor "
      "in [1-v, 1+v] (0: off)"),
    F(saturation, K_DOUBLE, 0, 1, "colour jitter: blend with each pixel's gray by a factor "
      "in [1-v, 1+v] (0: off; 3 channels)"),
    F(hue, K_DOUBLE, 0, 0.5, "colour jitter: the YIQ chroma turned by up to +-v of a full "
      "turn (0: off; 3 channels)"),
    F(grayscale, K_DOUBLE, 0, 1, "probability that an image is made gray (BT.601 luma in "
      "every channel; 0: off; 3 channels)"),
    F(channel_perm, K_INT, 0, 1, "1: the 3 channels in a random order of the six (for data "
      "whose colour carries no class)"),
    F(invert, K_INT, 0, 1, "1: x -> 1 - x with probability 0.5 (for data whose colour carries "
      "no class)"),
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
/* The shared keys written before the architecture's (the data's shape). */
#define NDATA 4
/* given[] of "arch" itself. */
#define GIVEN_ARCH (VIT_CONFIG_KEYS_MAX - 1)
_Static_assert(NFIELDS < GIVEN_ARCH, "VIT_CONFIG_KEYS_MAX too small for the shared keys");

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
const char *vit_fmt_double(double v, char out[32])
{
    for (int prec = 15; prec < 17; prec++) {
        snprintf(out, 32, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return out;
    }
    snprintf(out, 32, "%.17g", v);
    return out;
}

static int set_field(vit_config *c, const field *f, const char *key, const char *value);

static const field *find_field(const char *key)
{
    for (int i = 0; i < NFIELDS; i++)
        if (strcmp(fields[i].key, key) == 0)
            return &fields[i];
    return NULL;
}

int vit_config_shared_key(const char *key)
{
    const field *f = key ? find_field(key) : NULL;
    return f ? (int)(f - fields) : -1;
}

/* The architecture whose key key is, other than cfg's, for a message. */
static const vit_arch *other_arch_with(const vit_config *c, const char *key)
{
    for (int i = 0; i < vit_arch_count(); i++) {
        const vit_arch *a = vit_arch_at(i);
        if (a != vit_config_arch(c) && vit_arch_key_find(a, key) >= 0)
            return a;
    }
    return NULL;
}

static int set_arch_key(vit_config *c, const char *key, const char *value)
{
    const vit_arch *a = vit_config_arch(c);
    int k = vit_arch_key_find(a, key);
    if (k < 0) {
        const vit_arch *o = other_arch_with(c, key);
        if (o)
            return vit_fail(VIT_EINVAL, "%s: a key of architecture %s, not of %s (set arch = %s "
                            "first)", key, o->name, a->name, o->name);
        return vit_fail(VIT_EINVAL, "unknown config key '%s'", key);
    }
    TRY(vit_arch_key_set(&a->keys[k], vit_config_arch_data_mut(c), value));
    c->arch_given[k] = 1;
    return VIT_OK;
}

static int set_arch_name(vit_config *c, const char *value)
{
    const vit_arch *a = vit_arch_find(value);
    if (!a) {
        char list[256] = "";
        size_t len = 0;
        for (int i = 0; i < vit_arch_count() && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                                    vit_arch_at(i)->name);
        return vit_fail(VIT_EINVAL, "arch: unknown architecture '%s' (known: %s)", value, list);
    }
    /* The same architecture again keeps its keys (a flag repeating the
     * file's choice must not reset what the file set). */
    if (a != vit_config_arch(c))
        TRY(vit_config_set_arch(c, a));
    c->given[GIVEN_ARCH] = 1;
    return VIT_OK;
}

int vit_config_set(vit_config *c, const char *key, const char *value)
{
    if (!c || !key || !value)
        return vit_fail(VIT_EINVAL, "vit_config_set: NULL argument");
    if (strcmp(key, "arch") == 0)
        return set_arch_name(c, value);
    const field *f = find_field(key);
    if (!f)
        return set_arch_key(c, key, value);
    int rc = set_field(c, f, key, value);
    if (rc == VIT_OK)
        c->given[f - fields] = 1;
    return rc;
}

static int set_field(vit_config *c, const field *f, const char *key, const char *value)
{
    void *dst = (char *)c + f->offset;
    char *end = NULL;
    errno = 0;
    switch (f->kind) {
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
    case K_INT:
    case K_DOUBLE: { /* as an architecture's key of the same type (arch.c) */
        const vit_arch_key k = {key, f->kind == K_INT ? VIT_KEY_INT : VIT_KEY_REAL, f->offset,
                                f->lo, f->hi, NULL, NULL, NULL};
        return vit_arch_key_set(&k, c, value);
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

/* The slot of key in a parse's first[] (which line set it): the shared
 * keys, then the architecture's, then "arch"; -1 for an unknown key. */
static int key_slot(const vit_config *c, const char *key)
{
    if (strcmp(key, "arch") == 0)
        return NFIELDS + VIT_ARCH_KEYS_MAX;
    const field *f = find_field(key);
    if (f)
        return (int)(f - fields);
    int k = vit_arch_key_find(vit_config_arch(c), key);
    return k < 0 ? -1 : NFIELDS + k;
}

int vit_config_parse(vit_config *c, const char *text, const char *origin)
{
    if (!c || !text)
        return vit_fail(VIT_EINVAL, "vit_config_parse: NULL argument");
    if (!origin)
        origin = "config";
    /* The line each key was set on (0: not yet), so that a key given twice
     * is refused: the later line would silently win, hiding the earlier one
     * from whoever reads the file top-down.  Two passes: `arch` first,
     * wherever it stands, since it decides which keys the others are. */
    int first[NFIELDS + VIT_ARCH_KEYS_MAX + 1] = {0};
    for (int pass = 0; pass < 2; pass++) {
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
            if ((strcmp(key, "arch") == 0) != (pass == 0))
                continue;
            int slot = key_slot(c, key);
            if (slot >= 0 && first[slot])
                return vit_fail(VIT_EFORMAT, "%s:%d: %s is set twice (first on line %d)", origin,
                                line, key, first[slot]);
            if (vit_config_set(c, key, val) != VIT_OK) {
                char msg[400];
                snprintf(msg, sizeof msg, "%s", vit_last_error());
                return vit_fail(VIT_EFORMAT, "%s:%d: %s", origin, line, msg);
            }
            first[slot] = line; /* known: vit_config_set refuses unknown keys */
        }
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

/* Shared field i as "key = value\n" into out[room]: snprintf's count. */
static int format_field(const vit_config *c, const field *f, char *out, size_t room)
{
    const void *src = (const char *)c + f->offset;
    char t[32];
    switch (f->kind) {
    case K_INT: return snprintf(out, room, "%s = %d\n", f->key, *(const int *)src);
    case K_U64: return snprintf(out, room, "%s = %llu\n", f->key, *(const unsigned long long *)src);
    case K_DOUBLE:
        return snprintf(out, room, "%s = %s\n", f->key, vit_fmt_double(*(const double *)src, t));
    case K_TTA: return snprintf(out, room, "%s = %s\n", f->key, vit_tta_name(*(const int *)src));
    case K_PRECISION:
        return snprintf(out, room, "%s = %s\n", f->key, vit_precision_name(*(const int *)src));
    }
    return -1;
}

/* The data's shape, then `arch` (not for the ViT, whose text is as it was
 * before the seam) and the architecture's keys, then the recipe. */
int vit_config_format(const vit_config *c, char *buf, size_t cap)
{
    if (!c || !buf)
        return vit_fail(VIT_EINVAL, "vit_config_format: NULL argument");
    const vit_arch *a = vit_config_arch(c);
    const void *base = vit_config_arch_data(c);
    size_t len = 0;
    int nlines = NFIELDS + a->nkeys + 1;
    for (int i = 0; i < nlines; i++) {
        size_t room = len < cap ? cap - len : 0;
        int n, j = i - NDATA; /* 0: arch, 1 .. nkeys: its keys, then the recipe */
        if (i < NDATA)
            n = format_field(c, &fields[i], buf + len, room);
        else if (j == 0 && a == vit_arch_vit())
            continue;
        else if (j == 0)
            n = snprintf(buf + len, room, "arch = %s\n", a->name);
        else if (j <= a->nkeys)
            n = vit_arch_key_format(&a->keys[j - 1], base, buf + len, room);
        else
            n = format_field(c, &fields[i - a->nkeys - 1], buf + len, room);
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
    const vit_arch *a = vit_config_arch(c);
    TRY(vit_arch_keys_check(a, vit_config_arch_data(c)));
    if (a->check)
        TRY(a->check(c));
    if (!(c->ema >= 0 && c->ema < 1)) {
        char t[32];
        return vit_fail(VIT_EINVAL, "ema: %s is out of range [0, 1)", vit_fmt_double(c->ema, t));
    }
    /* The augmentation rates (a config filled in by code, not text). */
    const struct { const char *key; double v, hi; int open; } rate[] = {
        {"drop_path", c->drop_path, 1, 1}, {"erase", c->erase, 1, 0}, {"mixup", c->mixup, 100, 0},
        {"cutmix", c->cutmix, 100, 0},     {"mix_prob", c->mix_prob, 1, 0},
        {"brightness", c->brightness, 1, 0}, {"contrast", c->contrast, 1, 0},
        {"saturation", c->saturation, 1, 0}, {"hue", c->hue, 0.5, 0},
        {"grayscale", c->grayscale, 1, 0}};
    for (size_t i = 0; i < sizeof rate / sizeof rate[0]; i++)
        if (!(rate[i].v >= 0 && (rate[i].open ? rate[i].v < rate[i].hi : rate[i].v <= rate[i].hi))) {
            char t[2][32];
            return vit_fail(VIT_EINVAL, "%s: %s is out of range [0, %s%c", rate[i].key,
                            vit_fmt_double(rate[i].v, t[0]), vit_fmt_double(rate[i].hi, t[1]),
                            rate[i].open ? ')' : ']');
        }
    const char *colour = c->saturation > 0 ? "saturation" : c->hue > 0 ? "hue"
                       : c->grayscale > 0 ? "grayscale" : c->channel_perm ? "channel_perm" : NULL;
    if (colour && c->channels != 3)
        return vit_fail(VIT_EINVAL, "%s: needs colour images of 3 channels; these have %d",
                        colour, c->channels);
    if (c->min_lr > c->lr) {
        char t[2][32];
        return vit_fail(VIT_EINVAL, "min_lr: %s exceeds lr %s", vit_fmt_double(c->min_lr, t[0]),
                        vit_fmt_double(c->lr, t[1]));
    }
    return VIT_OK;
}

/* The help text of each key, for tools that list them: the shared keys
 * and the ViT's, in the order of the ViT's config text. */
const char *vit_config_key_help(int i, const char **key)
{
    const vit_arch *v = vit_arch_vit();
    if (i < 0 || i >= NFIELDS + v->nkeys)
        return NULL;
    if (i >= NDATA && i < NDATA + v->nkeys) {
        if (key)
            *key = v->keys[i - NDATA].key;
        return v->keys[i - NDATA].help;
    }
    const field *f = &fields[i < NDATA ? i : i - v->nkeys];
    if (key)
        *key = f->key;
    return f->help;
}

int vit_config_given(const vit_config *c, const char *key)
{
    if (!c || !key)
        return vit_fail(VIT_EINVAL, "vit_config_given: %s is NULL", !c ? "cfg" : "key");
    if (strcmp(key, "arch") == 0)
        return c->given[GIVEN_ARCH];
    const field *f = find_field(key);
    if (f)
        return c->given[f - fields];
    int k = vit_arch_key_find(vit_config_arch(c), key);
    if (k < 0)
        return vit_fail(VIT_EINVAL, "vit_config_given: '%s' is not a key of architecture %s", key,
                        vit_config_arch(c)->name);
    return c->arch_given[k];
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

/* The config text of tta and what each costs: here with the other config
 * names, so that the model layer does not call up into evaluation. */
const char *vit_tta_name(int tta)
{
    switch (tta) {
    case VIT_TTA_NONE: return "none";
    case VIT_TTA_SHIFT9: return "shift9";
    case VIT_TTA_AUTO: return "auto";
    case VIT_TTA_SHIFT9_FLIP: return "shift9flip";
    }
    return "?";
}

int vit_tta_passes(int tta)
{
    switch (tta) {
    case VIT_TTA_NONE:
    case VIT_TTA_AUTO: return 1;
    case VIT_TTA_SHIFT9: return 9;
    case VIT_TTA_SHIFT9_FLIP: return 18;
    }
    return 0;
}
