/*
 * vit/train_config.h - how a network is trained: the training recipe
 * (schedule, optimizer, augmentation, weight averaging, evaluation's
 * test-time augmentation, memory and arithmetic of the training step),
 * apart from what the network is (vit_config, vit/model.h).
 *
 * The two share one text format and one parser: a config file may hold
 * keys of both, and vit_config_parse / vit_config_load (vit/model.h) read
 * each key into the struct whose table has it (an unknown key is an error
 * naming it).  vit_model_new and every model, evaluation and export
 * function take the network alone; the trainer (vit/train.h) takes both;
 * a checkpoint stores both.
 *
 * Every key knows whether it was given (vit_train_config_given), so that
 * nothing needs a sentinel value.  The functions are reentrant; a struct is
 * used by one thread at a time.
 */
#ifndef VIT_TRAIN_CONFIG_H
#define VIT_TRAIN_CONFIG_H

#include <stddef.h>

#include "vit/core.h"

VIT_BEGIN_DECLS

typedef struct vit_config vit_config; /* vit/model.h */

/* The size of vit_train_config's `given` flags (most keys it may have). */
#define VIT_TRAIN_CONFIG_KEYS_MAX 64

/* The training recipe.  Keys are the field names ('given' aside); set them
 * from text with vit_train_config_set or a config file. */
typedef struct vit_train_config {
    /* schedule and optimizer */
    int epochs;          /* training epochs, 1 .. 1000000 */
    int batch;           /* minibatch size, 1 .. 2^20 */
    double lr;           /* peak learning rate */
    double min_lr;       /* learning rate at the end of the cosine, <= lr */
    double warmup;       /* linear warm-up length in epochs */
    double weight_decay; /* AdamW decoupled decay on weight matrices */
    double beta1, beta2, eps; /* AdamW's */
    double smoothing;    /* label smoothing, [0, 0.99] */
    /* augmentation (vit_augment_batch in vit/augment.h); training only,
       never at evaluation or TTA */
    int shift;           /* random translation of up to this many pixels */
    double rotate;       /* random rotation of up to this many degrees */
    double scale;        /* random zoom by a factor in [1 - scale, 1 + scale] */
    double ema;          /* weight averaging: the decay d of the parameters'
                            exponential moving average, 0 off, else in
                            (0, 1); evaluation, checkpoints and export use
                            the average (vit_ema_update in vit/optim.h) */
    int crop_pad;        /* random crop with zero padding: pad by crop_pad and
                            take a random H x W window.  The same operation as
                            shift = crop_pad (a uniform whole-pixel translation
                            in [-crop_pad, crop_pad], zeros shifted in): the
                            trainer translates by up to max(shift, crop_pad) */
    int flip;            /* 1: mirror left-right with probability 0.5 (for
                            Fashion or natural images, never digits or text) */
    double erase;        /* random erasing: the probability, in [0, 1], that
                            an image gets a box of 2-33% of its area filled
                            with uniform noise (vit_erase_box in
                            vit/augment.h), 0 off */
    double mixup;        /* mixup's Beta(alpha, alpha) alpha, 0 off */
    double cutmix;       /* cutmix's Beta(alpha, alpha) alpha, 0 off */
    double mix_prob;     /* probability that a batch is mixed (with mixup or
                            cutmix on; both on: one of them per batch, each
                            with probability 0.5) */
    double drop_path;    /* stochastic depth, in [0, 1), 0 off: block l of
                            depth drops each residual branch per image with
                            rate drop_path * (l + 1) / depth, survivors
                            scaled by 1 / (1 - rate) */
    /* colour (vit_colour_draw and vit_colour_apply in vit/augment.h), 0
       off; saturation, hue, grayscale and channel_perm need channels = 3 */
    double brightness;   /* factor uniform in [1 - v, 1 + v], v in [0, 1] */
    double contrast;     /* blend with the image's mean gray, factor as above */
    double saturation;   /* blend with each pixel's gray, factor as above */
    double hue;          /* YIQ chroma turned by up to +-hue turns, [0, 0.5] */
    double grayscale;    /* probability, in [0, 1], of gray (BT.601 luma) */
    int channel_perm;    /* 1: a uniformly random order of the 3 channels */
    int invert;          /* 1: x -> 1 - x with probability 0.5 */
    unsigned long long seed; /* initialisation, shuffling and augmentation */
    /* evaluation */
    int tta;             /* VIT_TTA_NONE, VIT_TTA_SHIFT9, VIT_TTA_AUTO or
                            VIT_TTA_SHIFT9_FLIP (vit/model.h; "none" /
                            "shift9" / "auto" / "shift9flip" in text): the
                            test-time augmentation of the run's final
                            scores (vit_train_result in vit/train.h) and
                            of the tools that score its checkpoints */
    /* memory */
    int recompute;       /* 1: activation checkpointing of every block (0 or
                            1; vit_model_set_recompute) */
    int micro_batch;     /* each thread's share of a batch runs in pieces of
                            at most this many images (0: automatic, pieces
                            of about 24 MiB of tape; vit_model_set_micro_batch) */
    double ckpt_minutes; /* a checkpoint inside a long epoch every this many
                            minutes (0: only at epoch ends) */
    /* arithmetic */
    int precision;       /* the training step's matrix products:
                            VIT_PRECISION_FP32 (the default), _BF16 or _AUTO
                            ("fp32" / "bf16" / "auto" in text; vit/bf16.h,
                            vit_model_set_precision); evaluation is float32
                            whatever it says */
    unsigned char given[VIT_TRAIN_CONFIG_KEYS_MAX]; /* 1: key i was given */
} vit_train_config;

/* Fills (overwrites) *tc with the built-in recipe (the digits default) and
 * no key given.  tc must not be NULL.  Cannot fail. */
void vit_train_config_default(vit_train_config *tc);

/* Sets one key from text, e.g. ("epochs", "10"), and marks it given; the
 * strings are only read.  VIT_OK, or VIT_EINVAL (then *tc is unchanged)
 * for a NULL argument, a key that is not the recipe's (a key of the
 * network says so) or a value that does not parse or is out of range; for
 * a known key the message is "KEY: PROBLEM", as vit_config_set's. */
int vit_train_config_set(vit_train_config *tc, const char *key, const char *value);

/* The recipe's consistency (every range, min_lr <= lr) and with the
 * network cfg it trains (the colour keys saturation, hue, grayscale and
 * channel_perm need cfg->channels = 3).  VIT_OK, or VIT_EINVAL naming the
 * key (also for a NULL argument).  Reads only. */
int vit_train_config_check(const vit_train_config *tc, const vit_config *cfg);

/* 1 if key was given (vit_train_config_set, a config line or a flag) since
 * vit_train_config_default, 0 if it holds its default, VIT_EINVAL
 * (negative) for a NULL argument or a key that is not the recipe's. */
int vit_train_config_given(const vit_train_config *tc, const char *key);

/* Key and help text of recipe key i (0-based, in the order of config
 * text), for tools that list the keys: returns the help and sets *key
 * (when key is not NULL); both static strings.  NULL outside 0 .. count-1. */
const char *vit_train_config_key_help(int i, const char **key);

VIT_END_DECLS

#endif
