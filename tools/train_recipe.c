/*
 * vit_train's recipe for the data: the keys nobody set on the line or in
 * the --config file (vit_config_given; the stem among them) taken from
 * vit_recipe_pick (said in one line), an architecture's own keys from its
 * adapt hook, tta
 * shift9flip for a run with flips, the patch fitted to larger images, and
 * the overlap that goes with it.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"
#include "vit_train.h"

/* The shortest --budget (seconds) under which the recipe keeps its second
 * stem layer: see apply_recipe. */
#define BUDGET_STEM2_SECONDS (15 * 60)

void fit_patch(vit_config *cfg, const vit_recipe *picked, int speak)
{
    cfg->patch = picked->patch;
    if (speak && picked->patch_why[0])
        printf("patch %d (no --patch given): %s\n", cfg->patch, picked->patch_why);
}

void settle_overlap(vit_config *cfg, const vit_config *user, int patch_default,
                    int stride_default, int pad_default, const vit_dataset *train)
{
    vit_config d;
    vit_config_default(&d);
    int keep = cfg->patch == patch_default && train->height == d.image_height &&
               train->width == d.image_width;
    if (!vit_config_given(user, "patch_stride"))
        cfg->patch_stride = keep ? stride_default : 0;
    if (!vit_config_given(user, "patch_pad"))
        cfg->patch_pad = keep ? pad_default : 0;
}

/* cfg's architecture's adapt hook (which it must have) for images of
 * h x w x c in `classes` classes from `count` training images, the shape
 * set on cfg first. */
static int adapt_to(vit_config *cfg, int h, int w, int c, int classes, int count, char *why,
                    size_t cap)
{
    cfg->image_height = h;
    cfg->image_width = w;
    cfg->channels = c;
    cfg->classes = classes;
    return vit_config_arch(cfg)->adapt(cfg, count, why, cap);
}

int adapt_arch(vit_config *cfg, const vit_dataset *train, int val, int speak)
{
    const vit_arch *a = vit_config_arch(cfg);
    if (!a->adapt)
        return 0;
    char why[512] = "";
    if (adapt_to(cfg, train->height, train->width, train->channels, train->classes,
                 train->count - val, why, sizeof why) != VIT_OK)
        return cli_fail(prog, NULL);
    if (speak && why[0])
        printf("%s (keys not set by flag or --config): %s\n", a->name, why);
    return 0;
}

/* 1 if the user gave key (the file or a flag: vit_config_given,
 * vit_train_config_given). */
static int user_set(const vit_config *user, const vit_train_config *utc, const char *key)
{
    return vit_config_given(user, key) > 0 || vit_train_config_given(utc, key) > 0;
}

/* Key `key`'s value as the config text writes it, into buf[cap] ("" if
 * the config has no such key). */
static const char *key_text(const vit_config *cfg, const vit_train_config *tc, const char *key,
                            char *buf, size_t cap)
{
    char text[8192];
    buf[0] = 0;
    if (vit_config_format(cfg, tc, text, sizeof text) < 0)
        return buf;
    size_t n = strlen(key);
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
        if (strncmp(l, key, n) == 0 && strncmp(l + n, " = ", 3) == 0) {
            snprintf(buf, cap, "%.*s", (int)strcspn(l + n + 3, "\n"), l + n + 3);
            break;
        }
    return buf;
}

int apply_recipe(vit_config *cfg, vit_train_config *tc, const vit_config *user,
                 const vit_train_config *utc, const vit_dataset *train, int val,
                 double budget, int speak, vit_recipe *picked, double *warmup_fraction)
{
    vit_recipe_data d = {train->count - val, train->height, train->width, train->channels,
                         train->classes, train};
    vit_recipe r;
    /* stem, stem2 and local_conv nobody gave are the rule's to pick (and
     * to cost the epochs with: vit_config_given), but stem2 (and with it
     * local_conv) not under a time budget shorter than
     * BUDGET_STEM2_SECONDS: the second stem costs about a quarter more
     * per epoch, which a long run repays and a short one may not.  On
     * Fashion-MNIST with --budget 15m on a 2-core Zen 4 it scored 93.11%
     * in 27 epochs, against 92.84% in 31 without it (docs/benchmarks.md);
     * shorter budgets were not measured with it, so they keep the lighter
     * model.  A colour set under VIT_RECIPE_STEM2_COUNT images, which the
     * rule gives no second stem, gets it (and local_conv) under a budget
     * of any length: its epochs are cheap, and on the colour digits (1,437
     * images of 32x32, the digits 3x their size in random colours) the
     * two layers learnt far faster for a quarter more a step: 96.1% one
     * pass after 40 epochs of 112, against 63% after 50 of 140 without
     * (docs/benchmarks.md). */
    vit_config shape = *user;
    int stem2_free = !user_set(user, utc, "stem2");
    if (budget > 0 && budget < BUDGET_STEM2_SECONDS && stem2_free
        && vit_config_set(&shape, "stem2", "0"))
        return cli_fail(prog, NULL);
    if (vit_recipe_pick(&d, &shape, &r, NULL, 0))
        return cli_fail(prog, NULL);
    int small_colour = budget > 0 && stem2_free && d.channels == 3
                       && d.count < VIT_RECIPE_STEM2_COUNT && r.stem > 0
                       && d.height % 2 == 0 && d.width % 2 == 0;
    if (small_colour) {
        char s2[16];
        snprintf(s2, sizeof s2, "%d", VIT_RECIPE_STEM2);
        if (vit_config_set(&shape, "stem2", s2) || vit_recipe_pick(&d, &shape, &r, NULL, 0))
            return cli_fail(prog, NULL);
    }
    *picked = r;
    char v[15][32], said[512] = "", was[64], now[64];
    /* A budget plans as many epochs as it allows (at most the given
     * ones): the recipe's are what a run without one gets, and under a
     * long budget a small set's end far inside it (the colour digits,
     * 1,437 images: 140 epochs in 1:53 of 10 minutes, one pass 84%, where
     * the CNN reference trains 296 to 98%), so they are no ceiling. */
    snprintf(v[0], sizeof v[0], "%d", budget > 0 ? BUDGET_EPOCHS : r.epochs);
    snprintf(v[1], sizeof v[1], "%d", r.batch);
    /* The warm-up is the recipe's share of the run actually planned: of
     * the given epochs, and under a budget of its plan (the library lays
     * it out from warmup_fraction). */
    int user_epochs = user_set(user, utc, "epochs");
    snprintf(v[2], sizeof v[2], "%.17g", user_epochs ? tc->epochs / 28.0 : r.warmup);
    *warmup_fraction = budget > 0 && !user_set(user, utc, "warmup") ? 1 / 28.0 : 0;
    snprintf(v[3], sizeof v[3], "%d", r.shift);
    snprintf(v[4], sizeof v[4], "%d", r.flip);
    snprintf(v[5], sizeof v[5], "%d", r.stem);
    snprintf(v[6], sizeof v[6], "%d", r.stem2);
    snprintf(v[7], sizeof v[7], "%d", r.local_conv);
    const double colour[5] = {r.brightness, r.contrast, r.saturation, r.hue, r.grayscale};
    for (int k = 0; k < 5; k++)
        snprintf(v[8 + k], sizeof v[8 + k], "%g", colour[k]);
    snprintf(v[13], sizeof v[13], "%d", r.channel_perm);
    snprintf(v[14], sizeof v[14], "%d", r.invert);
    const char *keys[15] = {"epochs", "batch", "warmup", "shift", "flip", "stem", "stem2",
                            "local_conv", "brightness", "contrast", "saturation", "hue",
                            "grayscale", "channel_perm", "invert"};
    const int own_stem = vit_config_arch(cfg) != vit_arch_vit();
    for (int k = 0; k < 15; k++) {
        if (user_set(user, utc, keys[k]))
            continue;
        if (own_stem && k >= 5 && k <= 7) /* another arch's stem: its adapt hook's rule */
            continue;
        key_text(cfg, tc, keys[k], was, sizeof was);
        if (!*was || vit_config_set_any(cfg, tc, keys[k], v[k]) != VIT_OK)
            continue;
        if (k == 2 && *warmup_fraction > 0) { /* laid out by the library on each plan */
            size_t at = strlen(said);
            snprintf(said + at, sizeof said - at, "%swarmup a 28th of the epochs planned",
                     at ? ", " : "");
            continue;
        }
        if (strcmp(was, key_text(cfg, tc, keys[k], now, sizeof now)) == 0)
            continue;
        if (k == 2 && user_epochs) /* the given run's own 28th: not about the data */
            continue;
        size_t at = strlen(said);
        if (k == 0 && budget > 0)
            snprintf(said + at, sizeof said - at, "%sepochs as the budget allows (the recipe's "
                     "%d is no ceiling: a small set's end far inside a long budget)",
                     at ? ", " : "", r.epochs);
        else if (k == 6 && small_colour)
            snprintf(said + at, sizeof said - at, "%sstem2 %s (a colour set under %d images, "
                     "with a budget: two stem layers learn it far faster per minute)",
                     at ? ", " : "", now, VIT_RECIPE_STEM2_COUNT);
        else if (k == 2) /* the key holds all 17 digits; a person reads three */
            snprintf(said + at, sizeof said - at, "%swarmup %.3g", at ? ", " : "", tc->warmup);
        else
            snprintf(said + at, sizeof said - at, "%s%s %s", at ? ", " : "", keys[k], now);
    }
    /* image_norm: a key the config text leaves out when off, so not in
     * the loop above (never beside a data_norm the user asked for: the
     * recipe leaves it 0 then). */
    int norm_own = !user_set(user, utc, "image_norm");
    if (r.image_norm && norm_own) {
        if (vit_config_set(cfg, "image_norm", "1") != VIT_OK)
            return cli_fail(prog, NULL);
        size_t at = strlen(said);
        snprintf(said + at, sizeof said - at, "%simage_norm 1", at ? ", " : "");
    }
    /* data_norm likewise (its figures come from the training images when
     * the run begins), unless the user chose either normalisation. */
    if (r.data_norm && !user_set(user, utc, "data_norm") && !cfg->image_norm) {
        if (vit_config_set(cfg, "data_norm", "1") != VIT_OK)
            return cli_fail(prog, NULL);
        size_t at = strlen(said);
        snprintf(said + at, sizeof said - at, "%sdata_norm 1", at ? ", " : "");
    }
    /* A model trained on mirror images is scored on them too (Fashion at 62
     * epochs: shift9flip 92.69%, shift9 92.53%), unless tta was chosen. */
    if (tc->flip && tc->tta == VIT_TTA_SHIFT9 && !user_set(user, utc, "tta")) {
        tc->tta = VIT_TTA_SHIFT9_FLIP;
        size_t at = strlen(said);
        snprintf(said + at, sizeof said - at, "%stta shift9flip", at ? ", " : "");
    }
    if (speak && *said)
        printf("recipe (not set by flag or --config): %s, for %d images of %dx%dx%d (%s)\n", said,
               d.count, d.height, d.width, d.channels,
               strncmp(said, "epochs ", 7) == 0 && budget <= 0
                   ? "epochs: what " VIT_RECIPE_TRAIN_MACS_TEXT " multiply-adds of training pay for"
                   : "see docs/cli.md, Recipe");
    if (speak && r.colour_acc >= 0 && !user_set(user, utc, "channel_perm"))
        printf("colour test: the mean colour names the class of %.1f%% of held-out training "
               "images, chance %.1f%%: %s\n", 100 * r.colour_acc, 100 * r.colour_chance,
               r.channel_perm ? "colour carries no class, so channel_perm and invert"
                              : "colour carries class, so no channel_perm or invert");
    if (speak && r.image_norm && norm_own)
        printf("image_norm 1: each image standardised per channel before the network, its own "
               "colours (which carry no class) taken away\n");
    return 0;
}
