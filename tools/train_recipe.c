/*
 * vit_train's recipe for the data: the keys nobody set on the line or in
 * the --config file (the stem among them) taken from vit_recipe_pick (said
 * in one line), tta
 * shift9flip for a run with flips, the patch fitted to larger images, and
 * the overlap that goes with it.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"
#include "vit_train.h"

void fit_patch(vit_config *cfg, const vit_recipe *picked, int speak)
{
    cfg->patch = picked->patch;
    if (speak && picked->patch_why[0])
        printf("patch %d (no --patch given): %s\n", cfg->patch, picked->patch_why);
}

void settle_overlap(vit_config *cfg, int patch_default, int stride_default,
                    int pad_default, const vit_dataset *train)
{
    vit_config d;
    vit_config_default(&d);
    int keep = cfg->patch == patch_default && train->height == d.image_height &&
               train->width == d.image_width;
    if (cfg->patch_stride < 0)
        cfg->patch_stride = keep ? stride_default : 0;
    if (cfg->patch_pad < 0)
        cfg->patch_pad = keep ? pad_default : 0;
}

/* 1 if config key `key` is set on the line (--key; cli_normalize wrote
 * '-' for '_') or in the --config file (already read by vit_config_load,
 * so its lines are `key = value`, comments and blanks). */
int recipe_user_set(const char *key, const char *config, int argc, char **argv)
{
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", key);
    for (char *p = flag + 2; *p; p++)
        *p = *p == '_' ? '-' : *p;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0)
            return 1;
    FILE *f = config ? fopen(config, "r") : NULL;
    char line[4096];
    int found = 0;
    size_t n = strlen(key);
    while (f && !found && fgets(line, sizeof line, f)) {
        const char *p = line + strspn(line, " \t");
        found = strncmp(p, key, n) == 0 && strchr(" \t=", p[n]) != NULL;
    }
    if (f)
        fclose(f);
    return found;
}

/* Key `key`'s value as the config text writes it, into buf[cap] ("" if
 * the config has no such key). */
static const char *key_text(const vit_config *cfg, const char *key, char *buf, size_t cap)
{
    char text[8192];
    buf[0] = 0;
    if (vit_config_format(cfg, text, sizeof text) < 0)
        return buf;
    size_t n = strlen(key);
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
        if (strncmp(l, key, n) == 0 && strncmp(l + n, " = ", 3) == 0) {
            snprintf(buf, cap, "%.*s", (int)strcspn(l + n + 3, "\n"), l + n + 3);
            break;
        }
    return buf;
}

int apply_recipe(vit_config *cfg, const vit_config *model, const vit_dataset *train,
                 int val, double budget, const char *config, int argc, char **argv,
                 int speak, vit_recipe *picked)
{
    vit_recipe_data d = {train->count - val, train->height, train->width, train->channels,
                         train->classes, train};
    vit_recipe r;
    vit_config shape = *model;
    if (!recipe_user_set("stem", config, argc, argv))
        shape.stem = -1; /* the rule's to pick (and to cost the epochs with) */
    /* stem2 likewise, but not under a time budget: its gain was measured
     * over 76 epochs, and a 15-minute budget pays for 40 of them (the one
     * layer stem's 49 scored 93.2% on Fashion-MNIST: docs/benchmarks.md). */
    if (!recipe_user_set("stem2", config, argc, argv))
        shape.stem2 = budget > 0 ? 0 : -1;
    if (!recipe_user_set("local_conv", config, argc, argv))
        shape.local_conv = -1; /* where stem2 goes (vit/recipe.h) */
    if (vit_recipe_pick(&d, &shape, &r, NULL, 0))
        return cli_fail(prog, NULL);
    *picked = r;
    char v[8][32], said[256] = "", was[64], now[64];
    snprintf(v[0], sizeof v[0], "%d", budget > 0 ? 1000000 : r.epochs);
    snprintf(v[1], sizeof v[1], "%d", r.batch);
    snprintf(v[2], sizeof v[2], "%.17g", r.warmup);
    snprintf(v[3], sizeof v[3], "%d", r.shift);
    snprintf(v[4], sizeof v[4], "%d", r.flip);
    snprintf(v[5], sizeof v[5], "%d", r.stem);
    snprintf(v[6], sizeof v[6], "%d", r.stem2);
    snprintf(v[7], sizeof v[7], "%d", r.local_conv);
    const char *keys[8] = {"epochs", "batch", "warmup", "shift", "flip", "stem", "stem2",
                           "local_conv"};
    for (int k = 0; k < 8; k++) {
        if (recipe_user_set(keys[k], config, argc, argv))
            continue;
        key_text(cfg, keys[k], was, sizeof was);
        if (!*was || vit_config_set(cfg, keys[k], v[k]) != VIT_OK)
            continue;
        if (strcmp(was, key_text(cfg, keys[k], now, sizeof now)) == 0)
            continue;
        size_t at = strlen(said);
        if (k == 0 && budget > 0)
            snprintf(said + at, sizeof said - at, "%sepochs as the budget allows", at ? ", " : "");
        else if (k == 2) /* the key holds all 17 digits; a person reads three */
            snprintf(said + at, sizeof said - at, "%swarmup %.3g", at ? ", " : "", cfg->warmup);
        else
            snprintf(said + at, sizeof said - at, "%s%s %s", at ? ", " : "", keys[k], now);
    }
    /* A model trained on mirror images is scored on them too (Fashion at 62
     * epochs: shift9flip 92.69%, shift9 92.53%), unless tta was chosen. */
    if (cfg->flip && cfg->tta == VIT_TTA_SHIFT9 && !recipe_user_set("tta", config, argc, argv)) {
        cfg->tta = VIT_TTA_SHIFT9_FLIP;
        size_t at = strlen(said);
        snprintf(said + at, sizeof said - at, "%stta shift9flip", at ? ", " : "");
    }
    if (speak && *said)
        printf("recipe (not set by flag or --config): %s, for %d images of %dx%dx%d (%s)\n", said,
               d.count, d.height, d.width, d.channels,
               strncmp(said, "epochs ", 7) == 0 && budget <= 0
                   ? "epochs: what " VIT_RECIPE_TRAIN_MACS_TEXT " multiply-adds of training pay for"
                   : "see docs/cli.md, Recipe");
    return 0;
}
