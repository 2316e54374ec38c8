/*
 * The training recipe (vit/train_config.h): its table of keys, defaults
 * and checks.  Text is read and written by the parser the network's config
 * shares with it (model_config.c).
 */
#include "vit/train_config.h"
#include "arch_internal.h"
#include "config_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "vit/bf16.h"
#include "vit/model.h"

#define F(key, kind, lo, hi, help) {#key, kind, offsetof(vit_train_config, key), lo, hi, help}

static const vit_cfg_field fields[] = {
    F(epochs, VIT_CFG_INT, 1, 1000000, "training epochs"),
    F(batch, VIT_CFG_INT, 1, 1 << 20, "minibatch size"),
    F(lr, VIT_CFG_DOUBLE, 1e-12, 10, "peak learning rate"),
    F(min_lr, VIT_CFG_DOUBLE, 0, 10, "final learning rate of the cosine decay"),
    F(warmup, VIT_CFG_DOUBLE, 0, 1000000, "linear warm-up length in epochs"),
    F(weight_decay, VIT_CFG_DOUBLE, 0, 10, "AdamW decoupled weight decay"),
    F(beta1, VIT_CFG_DOUBLE, 0, 0.999999, "AdamW beta1"),
    F(beta2, VIT_CFG_DOUBLE, 0, 0.999999999, "AdamW beta2"),
    F(eps, VIT_CFG_DOUBLE, 1e-30, 1, "AdamW epsilon"),
    F(smoothing, VIT_CFG_DOUBLE, 0, 0.99, "label smoothing"),
    F(shift, VIT_CFG_INT, 0, 64, "random translation in pixels (augmentation)"),
    F(rotate, VIT_CFG_DOUBLE, 0, 180, "random rotation in degrees (augmentation)"),
    F(scale, VIT_CFG_DOUBLE, 0, 0.5, "random zoom: factor in [1-scale, 1+scale] (augmentation)"),
    F(ema, VIT_CFG_DOUBLE, 0, 0.999999, "weight averaging: decay of the weights' moving average, "
      "which is scored and saved (0: off)"),
    F(crop_pad, VIT_CFG_INT, 0, 64, "random crop with zero padding of this many pixels (the "
      "same translation as shift; the larger of the two is used)"),
    F(flip, VIT_CFG_INT, 0, 1, "1: random horizontal flip with probability 0.5 (not for digits "
      "or text)"),
    F(erase, VIT_CFG_DOUBLE, 0, 1, "random erasing: probability that an image gets a box of "
      "2-33% of its area filled with noise (0: off)"),
    F(mixup, VIT_CFG_DOUBLE, 0, 100, "mixup: alpha of the Beta(alpha, alpha) mixing weight "
      "(0: off)"),
    F(cutmix, VIT_CFG_DOUBLE, 0, 100, "cutmix: alpha of the Beta(alpha, alpha) box area (0: off)"),
    F(mix_prob, VIT_CFG_DOUBLE, 0, 1, "probability that a batch is mixed when mixup or cutmix is "
      "on (both on: one of them per batch, each with probability 0.5)"),
    F(drop_path, VIT_CFG_DOUBLE, 0, 0.99, "stochastic depth: residual branches dropped per "
      "image, at this rate in the last block, linearly less in earlier ones (0: off)"),
    F(brightness, VIT_CFG_DOUBLE, 0, 1, "colour jitter: brightness factor uniform in [1-v, 1+v] "
      "multiplying the image (0: off)"),
    F(contrast, VIT_CFG_DOUBLE, 0, 1, "colour jitter: blend with the image's mean gray by a "
      "factor in [1-v, 1+v] (0: off)"),
    F(saturation, VIT_CFG_DOUBLE, 0, 1, "colour jitter: blend with each pixel's gray by a "
      "factor in [1-v, 1+v] (0: off; 3 channels)"),
    F(hue, VIT_CFG_DOUBLE, 0, 0.5, "colour jitter: the YIQ chroma turned by up to +-v of a full "
      "turn (0: off; 3 channels)"),
    F(grayscale, VIT_CFG_DOUBLE, 0, 1, "probability that an image is made gray (BT.601 luma in "
      "every channel; 0: off; 3 channels)"),
    F(channel_perm, VIT_CFG_INT, 0, 1, "1: the 3 channels in a random order of the six (for "
      "data whose colour carries no class)"),
    F(invert, VIT_CFG_INT, 0, 1, "1: x -> 1 - x with probability 0.5 (for data whose colour "
      "carries no class)"),
    F(seed, VIT_CFG_U64, 0, 0, "random seed"),
    F(tta, VIT_CFG_TTA, 0, 3, "test-time augmentation: none, shift9 (image and 8 one-pixel "
      "shifts), shift9flip (those 9 and their 9 mirror images: for models trained with flip), "
      "or auto (shift9, or shift9flip with flip, only if it beats one pass on the validation "
      "set)"),
    F(recompute, VIT_CFG_INT, 0, 1,
      "1: keep less and remake it in the backward (less memory; the ViT keeps each "
      "block's input, Swin remakes its layer norms and window weights)"),
    F(micro_batch, VIT_CFG_INT, 0, 1 << 20,
      "most images a thread runs through forward and backward at once; its share of a "
      "batch runs in such pieces, their gradients added (the same step up to rounding, "
      "the memory of one piece; 0: as many as fit in about 24 MiB)"),
    F(ckpt_minutes, VIT_CFG_DOUBLE, 0, 1e6, "minutes between checkpoints inside an epoch "
      "(0: off)"),
    F(precision, VIT_CFG_PRECISION, 0, 2, "training's matrix products: fp32, bf16 (bfloat16 "
      "inputs, float32 sums; fp32 where the CPU lacks it) or auto"),
};
#define NFIELDS (int)(sizeof fields / sizeof fields[0])
_Static_assert(NFIELDS <= VIT_TRAIN_CONFIG_KEYS_MAX, "VIT_TRAIN_CONFIG_KEYS_MAX too small");

const vit_cfg_field *vit_train_config_fields(int *n)
{
    *n = NFIELDS;
    return fields;
}

void vit_train_config_default(vit_train_config *tc)
{
    memset(tc, 0, sizeof *tc);
    tc->epochs = 140;
    tc->batch = 32;
    tc->lr = 2e-3;
    tc->min_lr = 1e-5;
    tc->warmup = 5;
    tc->weight_decay = 0.05;
    tc->beta1 = 0.9;
    tc->beta2 = 0.999;
    tc->eps = 1e-8;
    tc->smoothing = 0.1;
    tc->shift = 1;
    tc->seed = 1;
    tc->ckpt_minutes = 10;
    tc->tta = VIT_TTA_SHIFT9;
    tc->mix_prob = 1;
}

void vit_train_config_legacy_default(vit_train_config *tc)
{
    vit_train_config_default(tc);
    tc->tta = VIT_TTA_NONE;
    tc->ema = 0;
}

/* 1 if key is a key of the network (shared or any architecture's). */
static int network_key(const char *key)
{
    if (strcmp(key, "arch") == 0 || vit_config_shared_key(key) >= 0)
        return 1;
    for (int i = 0; i < vit_arch_count(); i++)
        if (vit_arch_key_find(vit_arch_at(i), key) >= 0)
            return 1;
    return 0;
}

int vit_train_config_set(vit_train_config *tc, const char *key, const char *value)
{
    if (!tc || !key || !value)
        return vit_fail(VIT_EINVAL, "vit_train_config_set: NULL argument");
    const vit_cfg_field *f = vit_cfg_field_find(fields, NFIELDS, key);
    if (!f) {
        if (network_key(key))
            return vit_fail(VIT_EINVAL, "%s: a key of the network (vit_config), not of the "
                            "training recipe", key);
        return vit_fail(VIT_EINVAL, "unknown config key '%s'", key);
    }
    TRY(vit_cfg_field_set(tc, f, key, value));
    tc->given[f - fields] = 1;
    return VIT_OK;
}

int vit_train_config_check(const vit_train_config *c, const vit_config *cfg)
{
    if (!c || !cfg)
        return vit_fail(VIT_EINVAL, "vit_train_config_check: %s is NULL", !c ? "tc" : "cfg");
    for (int i = 0; i < NFIELDS; i++) {
        const vit_cfg_field *f = &fields[i];
        if (f->kind != VIT_CFG_INT && f->kind != VIT_CFG_TTA && f->kind != VIT_CFG_PRECISION)
            continue;
        int v = *(const int *)((const char *)c + f->offset);
        if (v < f->lo || v > f->hi)
            return vit_fail(VIT_EINVAL, "%s: %d is out of range [%.0f, %.0f]", f->key, v, f->lo, f->hi);
    }
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
    if (colour && cfg->channels != 3)
        return vit_fail(VIT_EINVAL, "%s: needs colour images of 3 channels; these have %d",
                        colour, cfg->channels);
    if (c->min_lr > c->lr) {
        char t[2][32];
        return vit_fail(VIT_EINVAL, "min_lr: %s exceeds lr %s", vit_fmt_double(c->min_lr, t[0]),
                        vit_fmt_double(c->lr, t[1]));
    }
    return VIT_OK;
}

int vit_train_config_given(const vit_train_config *tc, const char *key)
{
    if (!tc || !key)
        return vit_fail(VIT_EINVAL, "vit_train_config_given: %s is NULL", !tc ? "tc" : "key");
    const vit_cfg_field *f = vit_cfg_field_find(fields, NFIELDS, key);
    if (!f)
        return vit_fail(VIT_EINVAL, "vit_train_config_given: '%s' is not a key of the training "
                        "recipe", key);
    return tc->given[f - fields];
}

const char *vit_train_config_key_help(int i, const char **key)
{
    if (i < 0 || i >= NFIELDS)
        return NULL;
    if (key)
        *key = fields[i].key;
    return fields[i].help;
}
