/*
 * vit_train's fine-tuning flags (--init-from and its kin, vit_train_opts)
 * and the recipe of a run that starts from trained weights.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "vit/vit.h"
#include "vit_train.h"

int finetune_flag(const char *a, const char *v, vit_train_opts *o)
{
    static char from[PATH_MAX + 16];
    if (strcmp(a, "--init-from") == 0) {
        if (!(o->init_from = cli_run_checkpoint(prog, a, v, 0, from, sizeof from)))
            return 2;
    }
    else if (strcmp(a, "--init-arch") == 0)
        o->init_arch = v;
    else if (strcmp(a, "--init-heads") == 0) {
        if (!cli_int(prog, a, v, 1, 4096, &o->init_heads))
            return 2;
    } else if (strcmp(a, "--freeze") == 0) {
        if (!cli_int(prog, a, v, 0, 1024, &o->freeze))
            return 2;
    } else if (strcmp(a, "--layer-decay") == 0) {
        char *end;
        o->layer_decay = strtod(v, &end);
        if (*end || end == v || !(o->layer_decay > 0 && o->layer_decay <= 1)) {
            fprintf(stderr, "%s: --layer-decay: expected a number in (0, 1], got '%s'\n", prog, v);
            return 2;
        }
    } else if (strcmp(a, "--init-norm") == 0) {
        static const char *const names[] = {"auto", "none", "imagenet"};
        int k = 0;
        while (k < 3 && strcmp(v, names[k]) != 0)
            k++;
        if (k == 3) {
            fprintf(stderr, "%s: --init-norm: expected auto, none or imagenet, got '%s'\n", prog,
                    v);
            return 2;
        }
        o->init_norm = k; /* VIT_INIT_NORM_AUTO, _NONE, _IMAGENET */
    } else
        return -1;
    return 0;
}

int finetune_check(const vit_train_opts *o, int argc, char **argv)
{
    /* The architecture is the file's: a flag that sets it would be lost. */
    static const char *const arch[] = {"--arch", "--patch", "--dim", "--depth", "--heads", "--mlp",
                                       "--pool", "--patch-stride", "--patch-pad", "--lsa",
                                       "--stem", "--stem2", "--local-conv", "--ln-eps",
                                       "--image-norm", "--data-norm", "--data-mean",
                                       "--data-std"};
    for (int i = 1; o->init_from && i < argc; i++)
        for (size_t k = 0; k < sizeof arch / sizeof arch[0]; k++)
            if (strcmp(argv[i], arch[k]) == 0) {
                fprintf(stderr, "%s: %s: with --init-from the architecture is the file's "
                        "(fine-tune it as it is, or train from scratch)\n", prog, arch[k]);
                return 2;
            }
    const char *alone = o->init_arch ? "--init-arch" : o->init_heads ? "--init-heads"
                        : o->keep_head ? "--keep-head" : o->init_norm ? "--init-norm"
                        : o->layer_decay ? "--layer-decay" : o->freeze ? "--freeze"
                        : o->linear_probe ? "--linear-probe" : NULL;
    if (!o->init_from && alone) {
        fprintf(stderr, "%s: %s applies to a run started from trained weights: give --init-from "
                "FILE\n", prog, alone);
        return 2;
    }
    if (o->init_from && o->resume) {
        fprintf(stderr, "%s: --init-from starts a new run from the weights of a file; --resume "
                "continues a run: give one of them\n", prog);
        return 2;
    }
    return -1;
}

int finetune_weights_config(const char *path, vit_config *cfg)
{
    if (vit_run_config(path, cfg, NULL) == VIT_OK)
        return 1;
    vit_model *m = NULL;
    if (vit_safetensors_load(path, &m) != VIT_OK)
        return 0;
    *cfg = *vit_model_config(m);
    vit_model_free(m);
    return 1;
}

void finetune_fit(const vit_config *ws, split_flags *f)
{
    if (!ws || (f->given & (8 | 32 | 64)) || vit_config_arch(ws) == vit_arch_vit())
        return;
    f->fit.height = ws->image_height;
    f->fit.width = ws->image_width;
    f->fit_arch = vit_config_arch(ws)->name;
}

/* 1 if the user gave recipe key key (the file or a flag). */
static int given(const vit_train_config *utc, const char *key)
{
    return vit_train_config_given(utc, key) > 0;
}

int finetune_recipe(vit_config *cfg, vit_train_config *tc, const vit_train_config *utc,
                    vit_train_opts *o, const vit_config *ws,
                    const vit_dataset *train, int val, int speak)
{
    char said[600] = "";
    size_t at = 0;
    /* The data's rule for what does not depend on where the weights came
     * from: the batch, the augmentations, and (without a budget) the epochs,
     * costed on the model that trains: the file's architecture and widths
     * (ours: a Swin's, a wider ViT's) at these images' size; a file that
     * holds no config of ours (a timm ViT) on this config's model. */
    vit_recipe_data d = {train->count - val, train->height, train->width, train->channels,
                         train->classes, train};
    vit_recipe r;
    vit_config shape = *cfg, fc;
    if (ws) {
        fc = *ws;
        fc.image_height = train->height;
        fc.image_width = train->width;
        fc.channels = train->channels;
        fc.classes = train->classes;
        shape = fc;
    }
    if (vit_config_arch(&shape) == vit_arch_vit()) {
        /* The stems are this config's, as given or not: the rule picks
         * none of them for a model whose weights come from a file. */
        const struct {
            const char *key;
            int value;
        } keep[] = {{"stem", shape.stem}, {"stem2", shape.stem2}, {"local_conv", shape.local_conv}};
        for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
            char v[16];
            snprintf(v, sizeof v, "%d", keep[k].value);
            if (vit_config_set(&shape, keep[k].key, v) != VIT_OK)
                return cli_fail(prog, NULL);
        }
    }
    if (vit_recipe_pick(&d, &shape, &r, NULL, 0)) { /* the rule is a default, not a must */
        at += (size_t)snprintf(said + at, sizeof said - at, "no data rule (%s); ",
                               vit_last_error());
        r.epochs = tc->epochs;
        r.batch = tc->batch;
        r.shift = tc->shift;
        r.flip = tc->flip;
    }
    const struct {
        const char *key;
        int value;
    } rule[] = {{"epochs", o->budget_seconds > 0 ? BUDGET_EPOCHS : r.epochs}, {"batch", r.batch},
                {"shift", r.shift}, {"flip", r.flip}};
    for (size_t k = 0; k < sizeof rule / sizeof rule[0]; k++) {
        char v[32];
        if (given(utc, rule[k].key))
            continue;
        snprintf(v, sizeof v, "%d", rule[k].value);
        int was = k == 0 ? tc->epochs : k == 1 ? tc->batch : k == 2 ? tc->shift : tc->flip;
        if (was == rule[k].value || vit_train_config_set(tc, rule[k].key, v) != VIT_OK)
            continue;
        if (k == 0 && o->budget_seconds > 0)
            at += (size_t)snprintf(said + at, sizeof said - at, "epochs as the budget allows, ");
        else
            at += (size_t)snprintf(said + at, sizeof said - at, "%s %s, ", rule[k].key, v);
    }
    if (tc->flip && tc->tta == VIT_TTA_SHIFT9 && !given(utc, "tta")) {
        tc->tta = VIT_TTA_SHIFT9_FLIP;
        at += (size_t)snprintf(said + at, sizeof said - at, "tta shift9flip, ");
    }
    if (at && !strstr(said, "no data rule"))
        at += (size_t)snprintf(said + at, sizeof said - at, "as for training from scratch on "
                               "%d images (see docs/cli.md, Recipe); ", d.count);
    /* The peak lr stays, with no layer decay: fine-tuning a Fashion-MNIST
     * model (92.8%) on 200 digits for 25 epochs, 3 seeds, scored 84.4%
     * at this peak, 80.5% with layer decay 0.75 and 79.2% at a quarter of
     * it, against 63.9% from scratch; a linear probe 66.8%: the features
     * must move (docs/finetune.md, Does transfer pay?). */
    if (!given(utc, "lr"))
        at += (size_t)snprintf(said + at, sizeof said - at, "lr %g kept, no layer decay (the "
                               "features must move: a quarter of the lr, or layer decay 0.75, "
                               "fine-tuned 4-5 points worse: docs/finetune.md)", tc->lr);
    if (!given(utc, "warmup")) {
        tc->warmup = 2;
        at += (size_t)snprintf(said + at, sizeof said - at, "%swarmup 2 epochs (the new head "
                               "settles before the blocks move far)", at ? ", " : "");
    }
    if (speak && at)
        printf("recipe (fine-tuning, not set by flag or --config): %s\n", said);
    return 0;
}
