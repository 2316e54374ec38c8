/*
 * A run started from trained weights (vit_train_opts.init_from): the file
 * read whatever it is (our checkpoint, our export, a timm file), its
 * architecture taken, its weights adapted to the data (vit/finetune.h),
 * and the fine-tuning recipe's per-layer learning-rate factors.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "trainer_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "vit/finetune.h"
#include "vit/safetensors.h"

/* FNV-1a (64-bit) of the file's bytes. */
static int file_hash(const char *path, unsigned long long *h)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return vit_fail(VIT_EIO, "%s: cannot open the weights to start from", path);
    unsigned long long x = 1469598103934665603ULL;
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < n; i++)
            x = (x ^ buf[i]) * 1099511628211ULL;
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return vit_fail(VIT_EIO, "%s: read failed", path);
    *h = x;
    return VIT_OK;
}

/* 0: a checkpoint (or not ours at all: vit_run_load says so), 1: a
 * safetensors file with our config in its metadata, 2: one without. */
static int file_kind(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    unsigned char head[4096];
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    if (n < 10 || head[8] != '{')
        return 0;
    head[n] = 0;
    /* our exports write the model keys first in the metadata */
    return strstr((const char *)head + 8, "\"__metadata__\":{\"image_height\"") ? 1 : 2;
}

static int check_opts(const vit_train_opts *o, int depth)
{
    if (!o->init_from) {
        if (o->init_arch || o->init_heads || o->keep_head || o->init_norm || o->layer_decay
            || o->freeze || o->linear_probe)
            return vit_fail(VIT_EINVAL, "vit_train_run: %s applies only to a run started from "
                            "trained weights (init_from)",
                            o->init_arch ? "init_arch" : o->init_heads ? "init_heads"
                            : o->keep_head ? "keep_head" : o->init_norm ? "init_norm"
                            : o->layer_decay ? "layer_decay" : o->freeze ? "freeze"
                                                                  : "linear_probe");
        return VIT_OK;
    }
    if (o->resume)
        return vit_fail(VIT_EINVAL, "vit_train_run: init_from starts a new run; it cannot be "
                        "combined with resume (%s)", o->resume);
    if (!(o->layer_decay == 0 || (o->layer_decay > 0 && o->layer_decay <= 1)))
        return vit_fail(VIT_EINVAL, "vit_train_run: layer_decay %g is not in (0, 1]",
                        o->layer_decay);
    if (o->init_norm < VIT_INIT_NORM_AUTO || o->init_norm > VIT_INIT_NORM_IMAGENET)
        return vit_fail(VIT_EINVAL, "vit_train_run: init_norm %d is not a VIT_INIT_NORM_*",
                        o->init_norm);
    if (depth >= 0 && (o->freeze < 0 || o->freeze > depth))
        return vit_fail(VIT_EINVAL, "vit_train_run: freeze %d is not in 0 .. %d (the blocks of "
                        "%s)", o->freeze, depth, o->init_from);
    return VIT_OK;
}

int vit_train_init_source(vit_trainer *t)
{
    const vit_train_opts *o = &t->o;
    TRY(check_opts(o, -1));
    if (!o->init_from)
        return VIT_OK;
    FILE *f = fopen(o->init_from, "rb");
    if (!f)
        return vit_fail(VIT_EIO, "%s: cannot open the weights to start from: %s", o->init_from,
                        strerror(errno));
    fclose(f);
    int kind = file_kind(o->init_from), rc;
    if (kind == 2) {
        rc = vit_timm_load(o->init_from, o->init_arch, o->init_heads, &t->init_src);
        t->init_timm = 1;
    } else if (o->init_arch || o->init_heads) {
        return vit_fail(VIT_EINVAL, "%s: init_arch and init_heads are for a timm file; this one "
                        "is ours and says its own config", o->init_from);
    } else if (kind == 1) {
        rc = vit_safetensors_load(o->init_from, &t->init_src);
    } else {
        rc = vit_run_load(o->init_from, &t->init_src, NULL, NULL, NULL);
    }
    if (rc)
        return rc;
    const vit_config *sc = vit_model_config(t->init_src);
    /* The blocks layer decay and freezing count are the ViT's
     * ("blocks.L."); another architecture's tensors name no such layers. */
    if (vit_model_arch(t->init_src) != vit_arch_vit() && (o->freeze || o->layer_decay))
        return vit_fail(VIT_EINVAL, "%s: a %s model: %s counts a ViT's blocks, which this "
                        "model does not have (linear_probe and plain fine-tuning work)",
                        o->init_from, vit_model_arch(t->init_src)->name,
                        o->freeze ? "freeze" : "layer_decay");
    TRY(check_opts(o, sc->depth));
    if (o->init_norm == VIT_INIT_NORM_IMAGENET && sc->channels != 3)
        return vit_fail(VIT_EINVAL, "%s: ImageNet's normalisation is for 3 channels, the "
                        "weights read %d", o->init_from, sc->channels);
    vit_config_take_arch(&t->cfg, sc);
    /* An architecture without position embeddings to resample keeps its
     * keys, which may not suit other images (Swin's windows must tile the
     * grid): said here, naming the weights, not later as a bare config
     * error. */
    if (vit_config_check(&t->cfg) != VIT_OK) {
        char why[300];
        snprintf(why, sizeof why, "%s", vit_last_error());
        return vit_fail(VIT_EINVAL, "%s: the %s model of these weights, trained on %dx%d "
                        "images, does not fit the data's %dx%d: %s", o->init_from,
                        vit_model_arch(t->init_src)->name, sc->image_height, sc->image_width,
                        t->cfg.image_height, t->cfg.image_width, why);
    }
    return VIT_OK;
}

/* Each model tensor's lr factor: layer decay by depth, 0 when frozen. */
static int make_scales(vit_trainer *t)
{
    const vit_train_opts *o = &t->o;
    const vit_config *c = &t->cfg;
    if ((o->layer_decay == 0 || o->layer_decay == 1) && o->freeze == 0 && !o->linear_probe)
        return VIT_OK;
    int n = vit_model_tensor_count(t->m);
    t->ft_scale = malloc((size_t)n * sizeof *t->ft_scale);
    t->ft_before = malloc(vit_model_param_count(t->m) * sizeof *t->ft_before);
    if (!t->ft_scale || !t->ft_before)
        return vit_fail(VIT_ENOMEM, "vit_train_run: out of memory");
    const double ld = o->layer_decay > 0 ? o->layer_decay : 1;
    for (int i = 0; i < n; i++) {
        const char *name = vit_model_tensor_at(t->m, i)->name;
        int layer; /* 0 the embeddings, 1 + l block l, depth + 1 the end */
        if (sscanf(name, "blocks.%d.", &layer) == 1)
            layer += 1;
        else if (strncmp(name, "ln.", 3) == 0 || strncmp(name, "head.", 5) == 0)
            layer = c->depth + 1;
        else
            layer = 0;
        double s = pow(ld, (double)(c->depth + 1 - layer));
        if ((o->freeze > 0 && layer <= o->freeze) || (o->linear_probe && strncmp(name, "head.", 5) != 0))
            s = 0;
        t->ft_scale[i] = s;
    }
    return VIT_OK;
}

int vit_train_init_model(vit_trainer *t)
{
    const vit_train_opts *o = &t->o;
    vit_model *src = t->init_src;
    int rc;
    int fold = o->init_norm == VIT_INIT_NORM_IMAGENET
               || (o->init_norm == VIT_INIT_NORM_AUTO && t->init_timm);
    if (fold) {
        const double mean[3] = VIT_IMAGENET_MEAN, std[3] = VIT_IMAGENET_STD;
        if ((rc = vit_model_fold_input_norm(src, mean, std)))
            return rc;
    }
    vit_adapt_opts ao = {.keep_head = o->keep_head};
    char note[300];
    vit_rng_seed(&t->st.rng, t->tc.seed);
    if ((rc = vit_model_adapt(src, &t->cfg, &ao, &t->st.rng, &t->m, note, sizeof note))) {
        char why[400];
        snprintf(why, sizeof why, "%s", vit_last_error());
        return vit_fail(rc, "%s: %s", o->init_from, why);
    }
    char abs[PATH_MAX];
    const char *name = realpath(o->init_from, abs) ? abs : o->init_from;
    if (strlen(name) < sizeof t->st.data.init_from && !strchr(name, '\n'))
        snprintf(t->st.data.init_from, sizeof t->st.data.init_from, "%s", name);
    if ((rc = file_hash(o->init_from, &t->st.data.init_hash)))
        return rc;
    if ((rc = make_scales(t)))
        return rc;
    char lr[120] = "";
    if (o->linear_probe)
        snprintf(lr, sizeof lr, "; linear probe (only the head trains)");
    size_t l = strlen(lr);
    if (!o->linear_probe && o->freeze)
        l += (size_t)snprintf(lr + l, sizeof lr - l, "; the embeddings and %d block%s frozen",
                              o->freeze, o->freeze == 1 ? "" : "s");
    if (!o->linear_probe && o->layer_decay > 0 && o->layer_decay < 1)
        snprintf(lr + l, sizeof lr - l, "; layer decay %g", o->layer_decay);
    char arch[64];
    if (vit_model_arch(src) == vit_arch_vit())
        snprintf(arch, sizeof arch, "dim %d, depth %d, heads %d", t->cfg.dim, t->cfg.depth,
                 t->cfg.heads);
    else
        snprintf(arch, sizeof arch, "%s, %.1fk parameters", vit_model_arch(src)->name,
                 (double)vit_model_param_count(src) / 1e3);
    snprintf(t->init_note, sizeof t->init_note, "%s %s (%016llx), %dx%d, %s%s: %s%s",
             t->init_timm ? "timm" : "our", t->init_timm ? "file" : "model",
             t->st.data.init_hash, vit_model_config(src)->image_height,
             vit_model_config(src)->image_width, arch,
             fold ? "; ImageNet mean/std folded into the patch embedding" : "", note, lr);
    vit_model_free(src);
    t->init_src = NULL;
    return VIT_OK;
}

void vit_train_ft_before(vit_trainer *t)
{
    if (t->ft_scale)
        memcpy(t->ft_before, vit_model_params(t->m),
               vit_model_param_count(t->m) * sizeof *t->ft_before);
}

void vit_train_ft_after(vit_trainer *t)
{
    if (!t->ft_scale)
        return;
    vit_real *p = vit_model_params(t->m);
    for (int i = 0; i < vit_model_tensor_count(t->m); i++) {
        const vit_model_tensor *tt = vit_model_tensor_at(t->m, i);
        const vit_real s = (vit_real)t->ft_scale[i];
        if (s == 1)
            continue;
        for (size_t j = tt->offset; j < tt->offset + tt->size; j++)
            p[j] = t->ft_before[j] + s * (p[j] - t->ft_before[j]);
    }
}

void vit_train_init_free(vit_trainer *t)
{
    vit_model_free(t->init_src);
    free(t->ft_scale);
    free(t->ft_before);
}
