/*
 * Checkpoints of a training run: the model's named tensors, the AdamW
 * moments and the run's progress, mapped onto the generic vit_ckpt format.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "data_internal.h"
#include "error.h"
#include "model_tensors.h"
#include "run_internal.h"
#include "vit/checkpoint.h"
#include "vit/train.h"

#define CONFIG_CAP 4096

int vit_run_save(const char *path, const vit_model *m, const vit_train_config *tc,
                 const vit_adamw *opt, const vit_run_state *st)
{
    return vit_run_internal_save(path, m, m ? vit_model_config(m) : NULL, tc, opt, st);
}

int vit_run_internal_save(const char *path, const vit_model *m, const vit_config *cfg,
                          const vit_train_config *tc, const vit_adamw *opt,
                          const vit_run_state *st)
{
    if (!path || !m || !cfg || !st)
        return vit_fail(VIT_EINVAL, "vit_run_save: %s is NULL",
                        !path ? "path" : !m ? "model" : !cfg ? "config" : "state");
    if (vit_config_param_count(cfg) != vit_model_param_count(m))
        return vit_fail(VIT_EINVAL, "vit_run_save: %s: the config to store describes %zu "
                        "parameters, the model has %zu", path, vit_config_param_count(cfg),
                        vit_model_param_count(m));
    if (st->class_names && st->nclass_names != cfg->classes)
        return vit_fail(VIT_EINVAL, "vit_run_save: %s: %d class names for a model of %d classes",
                        path, st->nclass_names, cfg->classes);
    char config[CONFIG_CAP];
    int rc = vit_config_format(cfg, tc, config, sizeof config);
    if (rc < 0)
        return rc;
    int nt = vit_model_tensor_count(m);
    vit_ckpt_tensor *t = calloc((size_t)nt + 4, sizeof *t);
    if (!t)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    vit_real *params = vit_model_params((vit_model *)(uintptr_t)m);
    for (int i = 0; i < nt; i++) {
        const vit_model_tensor *mt = vit_model_tensor_at(m, i);
        snprintf(t[i].name, sizeof t[i].name, "%s", mt->name);
        t[i].ndim = mt->ndim;
        for (int d = 0; d < mt->ndim; d++)
            t[i].dims[d] = mt->shape[d];
        t[i].data = params + mt->offset;
    }
    int n = nt;
    if (opt) {
        const char *names[2] = {"adam.m", "adam.v"};
        vit_real *bufs[2] = {opt->m, opt->v};
        for (int k = 0; k < 2; k++, n++) {
            snprintf(t[n].name, sizeof t[n].name, "%s", names[k]);
            t[n].ndim = 1;
            t[n].dims[0] = (long long)opt->n;
            t[n].data = bufs[k];
        }
    }
    if (st->train_params) {
        snprintf(t[n].name, sizeof t[n].name, "%s", VIT_RUN_TRAIN_PARAMS);
        t[n].ndim = 1;
        t[n].dims[0] = (long long)vit_model_param_count(m);
        t[n].data = st->train_params;
        n++;
    }
    vit_real best[2] = {(vit_real)st->best_epoch, (vit_real)st->best_score};
    if (st->best_epoch > 0) {
        snprintf(t[n].name, sizeof t[n].name, "%s", VIT_RUN_BEST);
        t[n].ndim = 1;
        t[n].dims[0] = 2;
        t[n].data = best;
        n++;
    }
    char data[2 * VIT_RUN_DATA_SPEC_MAX + 512]; /* spec, init_from, the rest */
    if (st->has_data && (rc = vit_run_data_format(&st->data, data, sizeof data))) {
        free(t);
        return rc;
    }
    vit_ckpt c = {.step = st->step, .epoch = st->epoch, .config = config, .ntensors = n, .tensors = t,
                  .epoch_step = st->epoch_step, .norder = st->norder, .order = st->order,
                  .nclass_names = st->class_names ? st->nclass_names : 0,
                  .class_names = st->class_names, .data = st->has_data ? data : NULL};
    memcpy(c.rng, st->rng.s, sizeof c.rng);
    memcpy(c.epoch_sums, st->epoch_sums, sizeof c.epoch_sums);
    rc = vit_ckpt_write(path, &c);
    free(t);
    return rc;
}

/* Copies tensor `name` of shape (ndim, shape) from the checkpoint into dst. */
static int take(const char *path, const vit_ckpt *c, const char *name, int ndim,
                const long long *shape, vit_real *dst)
{
    const vit_ckpt_tensor *t = vit_ckpt_find(c, name);
    if (!t)
        return vit_fail(VIT_EFORMAT, "%s: tensor '%s' is missing", path, name);
    if (t->ndim != ndim)
        return vit_fail(VIT_EFORMAT, "%s: tensor '%s' has %d dimensions, expected %d", path, name,
                        t->ndim, ndim);
    size_t size = 1;
    for (int d = 0; d < ndim; d++) {
        if (t->dims[d] != shape[d])
            return vit_fail(VIT_EFORMAT, "%s: tensor '%s' dimension %d is %lld, the config needs %lld",
                            path, name, d, t->dims[d], shape[d]);
        size *= (size_t)shape[d];
    }
    memcpy(dst, t->data, size * sizeof *dst);
    return VIT_OK;
}

/* ---- formats 1 to 3: the attention's input projections one by one ------ */

/* The format that introduced the fused W_QKV [D, 3D] of each block. */
#define FUSED_QKV_VERSION 4

/* Model tensor mt (W_QKV [D, 3D] or b_QKV [3D], table tensor t) from a
 * format-1..3 file's w_q, w_k, w_v [D, D] (b_q, b_k, b_v [D]), the parts
 * the table's row names: row i of W_QKV is row i of each in turn; the
 * biases are simply consecutive. */
static int take_legacy_qkv(const char *path, const vit_ckpt *c, const vit_model_tensor *mt,
                           const vit_mt *t, vit_real *dst)
{
    const int bias = t->row->legacy == VIT_MT_LEGACY_QKV_B;
    const long long D = mt->shape[0] / (bias ? 3 : 1);
    const long long shape[2] = {D, D};
    vit_real *tmp = bias ? NULL : malloc((size_t)(D * D) * sizeof *tmp);
    if (!bias && !tmp)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    int rc = VIT_OK;
    for (int p = 0; p < 3 && rc == VIT_OK; p++) {
        char name[VIT_CKPT_NAME_MAX];
        snprintf(name, sizeof name, "blocks.%d.%s", t->layer, t->row->legacy_parts[p]);
        if (bias) {
            rc = take(path, c, name, 1, shape, dst + p * D);
            continue;
        }
        if ((rc = take(path, c, name, 2, shape, tmp)) == VIT_OK)
            for (long long i = 0; i < D; i++)
                memcpy(dst + i * 3 * D + p * D, tmp + i * D, (size_t)D * sizeof *dst);
    }
    free(tmp);
    return rc;
}

/* The same change of layout on a flat vector over all parameters (AdamW's
 * moments, the trained weights beside an average), in place: each block's
 * 3 D^2 values at W_QKV's offset go from [3][D][D] to [D][3][D].  The
 * biases b_q, b_k, b_v were consecutive and stay where they are.  The
 * model's tensors are the table's, in its order. */
static int legacy_qkv_flat(const char *path, const vit_model *m, vit_real *flat)
{
    vit_real *tmp = NULL;
    vit_mt t = {.pos = 0};
    for (int i = 0; vit_mt_next(vit_model_config(m), &t); i++) {
        if (t.row->legacy != VIT_MT_LEGACY_QKV_W)
            continue;
        const vit_model_tensor *mt = vit_model_tensor_at(m, i);
        size_t D = (size_t)mt->shape[0];
        if (!tmp && !(tmp = malloc(3 * D * D * sizeof *tmp)))
            return vit_fail(VIT_ENOMEM, "%s: out of memory", path);
        vit_real *w = flat + mt->offset;
        memcpy(tmp, w, 3 * D * D * sizeof *tmp);
        for (size_t p = 0; p < 3; p++)
            for (size_t r = 0; r < D; r++)
                memcpy(w + r * 3 * D + p * D, tmp + (p * D + r) * D, D * sizeof *w);
    }
    free(tmp);
    return VIT_OK;
}

/* A flat tensor over all n parameters, converted from a format-1..3 file. */
static int take_flat(const char *path, const vit_ckpt *c, const vit_model *m, const char *name,
                     long long n, vit_real *dst)
{
    int rc = take(path, c, name, 1, &n, dst);
    if (rc == VIT_OK && c->version < FUSED_QKV_VERSION)
        rc = legacy_qkv_flat(path, m, dst);
    return rc;
}

int vit_run_load(const char *path, vit_model **model, vit_train_config *tc, vit_adamw *opt,
                 vit_run_state *st)
{
    if (!path || !model)
        return vit_fail(VIT_EINVAL, "vit_run_load: %s is NULL", !path ? "path" : "model");
    *model = NULL;
    vit_ckpt c;
    int rc = vit_ckpt_read(path, &c);
    if (rc)
        return rc;
    vit_config cfg;
    vit_train_config tcfg;
    vit_config_legacy_default(&cfg);
    vit_train_config_legacy_default(&tcfg);
    vit_model *m = NULL;
    rc = vit_config_parse(&cfg, &tcfg, c.config ? c.config : "", path);
    /* The stored config is untrusted: before the model is allocated, its
     * size must match what the file actually holds, so a corrupt config
     * cannot ask for a huge model. */
    size_t want = rc == VIT_OK ? vit_config_param_count(&cfg) : 0, held = 0;
    for (int i = 0; i < c.ntensors; i++) {
        size_t n = 1;
        for (int d = 0; d < c.tensors[i].ndim; d++)
            n *= (size_t)c.tensors[i].dims[d]; /* cannot overflow: bounded by the file size */
        held += n;
    }
    if (rc == VIT_OK && c.nclass_names > 0 && c.nclass_names != cfg.classes)
        rc = vit_fail(VIT_EFORMAT, "%s: %d class names, but the stored config has %d classes", path,
                      c.nclass_names, cfg.classes);
    if (rc == VIT_OK && want > held)
        rc = vit_fail(VIT_EFORMAT, "%s: the stored config describes %zu parameters, but the file "
                      "holds only %zu values", path, want, held);
    if (rc == VIT_OK && !(m = vit_model_new(&cfg))) {
        /* Copy the cause first: vit_fail writes the buffer it lives in. */
        char why[400];
        snprintf(why, sizeof why, "%s", vit_last_error());
        rc = vit_fail(VIT_EFORMAT, "%s: the stored config does not describe a model: %s", path, why);
    }
    /* Formats 1..3 knew the ViT alone, whose tensors are the table's, in
     * its order. */
    int legacy = c.version < FUSED_QKV_VERSION;
    if (rc == VIT_OK && legacy && vit_model_arch(m) != vit_arch_vit())
        rc = vit_fail(VIT_EFORMAT, "%s: a format-%d checkpoint of architecture %s: that format "
                      "held ViTs only", path, (int)c.version, vit_model_arch(m)->name);
    vit_mt t = {.pos = 0};
    for (int i = 0; rc == VIT_OK && m && i < vit_model_tensor_count(m); i++) {
        const vit_model_tensor *mt = vit_model_tensor_at(m, i);
        if (legacy)
            vit_mt_next(&cfg, &t);
        long long shape[VIT_TENSOR_MAX_DIMS];
        for (int d = 0; d < mt->ndim; d++)
            shape[d] = mt->shape[d];
        vit_real *dst = vit_model_params(m) + mt->offset;
        rc = legacy && t.row->legacy != VIT_MT_LEGACY_NONE
                 ? take_legacy_qkv(path, &c, mt, &t, dst)
                 : take(path, &c, mt->name, mt->ndim, shape, dst);
    }
    if (rc == VIT_OK && opt) {
        const vit_train_config *k = &tcfg;
        long long n = (long long)vit_model_param_count(m);
        rc = vit_adamw_init(opt, (size_t)n, k->beta1, k->beta2, k->eps, k->weight_decay);
        if (rc == VIT_OK)
            rc = take_flat(path, &c, m, "adam.m", n, opt->m);
        if (rc == VIT_OK)
            rc = take_flat(path, &c, m, "adam.v", n, opt->v);
        if (rc == VIT_OK)
            opt->t = c.step;
        else
            vit_adamw_free(opt);
    }
    vit_real *train_params = NULL;
    const vit_ckpt_tensor *tp = rc == VIT_OK && st ? vit_ckpt_find(&c, VIT_RUN_TRAIN_PARAMS) : NULL;
    if (tp) {
        long long n = (long long)vit_model_param_count(m);
        if (!(train_params = malloc((size_t)n * sizeof *train_params)))
            rc = vit_fail(VIT_ENOMEM, "%s: out of memory", path);
        else if ((rc = take_flat(path, &c, m, VIT_RUN_TRAIN_PARAMS, n, train_params))) {
            free(train_params);
            train_params = NULL;
        }
        if (rc && opt)
            vit_adamw_free(opt);
    }
    vit_run_data data;
    memset(&data, 0, sizeof data);
    int has_data = rc == VIT_OK && c.data && *c.data;
    if (has_data && (rc = vit_run_data_parse(c.data, path, &data))) {
        free(train_params);
        if (opt)
            vit_adamw_free(opt);
    }
    const vit_ckpt_tensor *bt = rc == VIT_OK && st ? vit_ckpt_find(&c, VIT_RUN_BEST) : NULL;
    double best[2] = {0, 0};
    if (bt && (bt->ndim != 1 || bt->dims[0] != 2 || !(bt->data[0] >= 1 && bt->data[0] < 1e9)
               || !isfinite(bt->data[1]))) {
        free(train_params);
        if (opt)
            vit_adamw_free(opt);
        rc = vit_fail(VIT_EFORMAT, "%s: tensor '%s' is not an epoch and a finite score", path,
                      VIT_RUN_BEST);
    } else if (bt) {
        best[0] = bt->data[0];
        best[1] = bt->data[1];
    }
    if (rc == VIT_OK && st) {
        st->best_epoch = (unsigned long long)best[0];
        st->best_score = best[1];
        st->has_data = has_data;
        st->data = data;
        st->train_params = train_params; /* handed over */
        st->step = c.step;
        st->epoch = c.epoch;
        memcpy(st->rng.s, c.rng, sizeof st->rng.s);
        st->epoch_step = c.epoch_step;
        memcpy(st->epoch_sums, c.epoch_sums, sizeof st->epoch_sums);
        st->norder = c.norder;
        st->order = c.order; /* handed over */
        c.order = NULL;
        c.norder = 0;
        st->nclass_names = cfg.classes;
        st->class_names = c.class_names; /* handed over, or "0" .. "K-1" */
        c.class_names = NULL;
        c.nclass_names = 0;
        if (!st->class_names && !(st->class_names = vit_data_internal_numbers(cfg.classes))) {
            st->nclass_names = 0;
            vit_run_state_free(st);
            if (opt)
                vit_adamw_free(opt);
            rc = vit_fail(VIT_ENOMEM, "%s: out of memory for %d class names", path, cfg.classes);
        }
    }
    vit_ckpt_free(&c);
    if (rc) {
        vit_model_free(m);
        return rc;
    }
    *model = m;
    if (tc)
        *tc = tcfg;
    return VIT_OK;
}

void vit_run_state_free(vit_run_state *st)
{
    if (!st)
        return;
    free(st->order);
    st->order = NULL;
    st->norder = 0;
    free(st->train_params);
    st->train_params = NULL;
    if (st->class_names)
        for (int k = 0; k < st->nclass_names; k++)
            free(st->class_names[k]);
    free(st->class_names);
    st->class_names = NULL;
    st->nclass_names = 0;
}

int vit_run_config(const char *path, vit_config *cfg, vit_train_config *tc)
{
    if (!path || !cfg)
        return vit_fail(VIT_EINVAL, "vit_run_config: %s is NULL", !path ? "path" : "cfg");
    vit_ckpt c;
    int rc = vit_ckpt_read_header(path, &c);
    if (rc)
        return rc;
    vit_train_config scratch;
    if (!tc)
        tc = &scratch;
    vit_config_legacy_default(cfg);
    vit_train_config_legacy_default(tc);
    rc = vit_config_parse(cfg, tc, c.config ? c.config : "", path);
    vit_ckpt_free(&c);
    return rc;
}
