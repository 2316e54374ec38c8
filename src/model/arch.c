/*
 * The architecture seam (vit/arch.h): the registry, an arch's config keys
 * parsed and formatted by the one config parser, and the leaves an arch's
 * forward reads its parameters through.
 */
#include "vit/arch.h"
#include "vit/model.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch_internal.h"
#include "config_internal.h"
#include "error.h"

#define ARCH_MAX 64

/* The built-in architectures, the ViT first (the default).  A built-in
 * architecture is its file (src/model_NAME.c, its vit_arch defined there
 * and declared in arch_internal.h) and its line here. */
static const vit_arch *const builtin[] = {&vit_arch_vit_def, &vit_arch_swin_def};
#define NBUILTIN (int)(sizeof builtin / sizeof builtin[0])

/* The registered architectures, after the built-in ones. */
static const vit_arch *registered[ARCH_MAX];
static int nregistered;

const vit_arch *vit_arch_vit(void) { return &vit_arch_vit_def; }

int vit_arch_count(void) { return NBUILTIN + nregistered; }

const vit_arch *vit_arch_at(int i)
{
    if (i >= 0 && i < NBUILTIN)
        return builtin[i];
    return i >= NBUILTIN && i < NBUILTIN + nregistered ? registered[i - NBUILTIN] : NULL;
}

const vit_arch *vit_arch_find(const char *name)
{
    for (int i = 0; name && i < vit_arch_count(); i++)
        if (strcmp(vit_arch_at(i)->name, name) == 0)
            return vit_arch_at(i);
    return NULL;
}

static int good_name(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_'))
            return 0;
    return 1;
}

/* 1 if key is one of the training recipe's (vit/train_config.h). */
static int recipe_key(const char *key)
{
    int n;
    const vit_cfg_field *t = vit_train_config_fields(&n);
    return key && vit_cfg_field_find(t, n, key) != NULL;
}

int vit_arch_register(const vit_arch *a)
{
    if (!a)
        return vit_fail(VIT_EINVAL, "vit_arch_register: arch is NULL");
    const char *n = good_name(a->name) ? a->name : "?";
    if (!good_name(a->name))
        return vit_fail(VIT_EINVAL, "vit_arch_register: name '%s' is not [a-z0-9_]+",
                        a->name ? a->name : "(null)");
    if (!a->build || !a->forward || !a->describe)
        return vit_fail(VIT_EINVAL, "vit_arch_register: %s: hook %s is NULL", n,
                        !a->build ? "build" : !a->forward ? "forward" : "describe");
    if (vit_arch_find(n))
        return vit_fail(VIT_EINVAL, "vit_arch_register: the name '%s' is taken", n);
    if (a->nkeys < 0 || a->nkeys > VIT_ARCH_KEYS_MAX || (a->nkeys > 0 && !a->keys))
        return vit_fail(VIT_EINVAL, "vit_arch_register: %s: %d keys (0 .. %d, with a table)", n,
                        a->nkeys, VIT_ARCH_KEYS_MAX);
    if (a->config_size > VIT_ARCH_CONFIG_MAX)
        return vit_fail(VIT_EINVAL, "vit_arch_register: %s: config_size %zu exceeds %d bytes", n,
                        a->config_size, VIT_ARCH_CONFIG_MAX);
    unsigned char scratch[VIT_ARCH_CONFIG_MAX];
    for (int i = 0; i < a->nkeys; i++) {
        const vit_arch_key *k = &a->keys[i];
        size_t w = k->type == VIT_KEY_REAL ? sizeof(double) : sizeof(int);
        if (!good_name(k->key) || strcmp(k->key, "arch") == 0 || vit_config_shared_key(k->key) >= 0
            || recipe_key(k->key))
            return vit_fail(VIT_EINVAL, "vit_arch_register: %s: key '%s' is not [a-z0-9_]+ or "
                            "is a shared or recipe key", n, k->key ? k->key : "(null)");
        for (int j = 0; j < i; j++)
            if (strcmp(a->keys[j].key, k->key) == 0)
                return vit_fail(VIT_EINVAL, "vit_arch_register: %s: key '%s' twice", n, k->key);
        if (k->type < VIT_KEY_INT || k->type > VIT_KEY_ENUM || (k->type == VIT_KEY_ENUM && !k->names))
            return vit_fail(VIT_EINVAL, "vit_arch_register: %s: key '%s' has an unknown type", n,
                            k->key);
        if (k->offset % w || k->offset + w > a->config_size)
            return vit_fail(VIT_EINVAL, "vit_arch_register: %s: key '%s' at offset %zu does not "
                            "fit config_size %zu", n, k->key, k->offset, a->config_size);
        if (k->follows) {
            int j = 0;
            while (j < i && strcmp(a->keys[j].key, k->follows) != 0)
                j++;
            if (j == i || k->type != VIT_KEY_INT || a->keys[j].type != VIT_KEY_INT ||
                a->keys[j].lo != k->lo || a->keys[j].hi != k->hi)
                return vit_fail(VIT_EINVAL, "vit_arch_register: %s: key '%s' follows '%s', "
                                "which is not an earlier INT key of its range (both INT)", n,
                                k->key, k->follows);
        }
        if (!k->def || vit_arch_key_set(k, scratch, k->def) != VIT_OK) {
            char why[300];
            snprintf(why, sizeof why, "%s", k->def ? vit_last_error() : "no default");
            return vit_fail(VIT_EINVAL, "vit_arch_register: %s: key '%s': its default: %s", n,
                            k->key, why);
        }
    }
    if (nregistered == ARCH_MAX)
        return vit_fail(VIT_ENOMEM, "vit_arch_register: %s: %d architectures are registered "
                        "already", n, ARCH_MAX);
    registered[nregistered++] = a;
    return VIT_OK;
}

/* ---- keys -------------------------------------------------------------- */

int vit_arch_key_find(const vit_arch *a, const char *key)
{
    for (int i = 0; a && i < a->nkeys; i++)
        if (strcmp(a->keys[i].key, key) == 0)
            return i;
    return -1;
}

int vit_arch_key_set(const vit_arch_key *k, void *base, const char *value)
{
    void *dst = (char *)base + k->offset;
    char *end = NULL;
    errno = 0;
    if (k->type == VIT_KEY_ENUM) {
        char list[256] = "";
        size_t len = 0;
        int n = 0;
        while (k->names[n])
            n++;
        for (int i = 0; i < n; i++) {
            if (strcmp(value, k->names[i]) == 0) {
                *(int *)dst = i;
                return VIT_OK;
            }
            len += (size_t)snprintf(list + len, len < sizeof list ? sizeof list - len : 0, "%s%s",
                                    i == 0 ? "" : i == n - 1 ? " or " : ", ", k->names[i]);
            if (len >= sizeof list)
                len = sizeof list - 1;
        }
        return vit_fail(VIT_EINVAL, "%s: expected %s, got '%s'", k->key, list, value);
    }
    if (k->type == VIT_KEY_INT) {
        long v = strtol(value, &end, 10);
        if (end == value || *end || errno)
            return vit_fail(VIT_EINVAL, "%s: expected an integer, got '%s'", k->key, value);
        if (v < k->lo || v > k->hi)
            return vit_fail(VIT_EINVAL, "%s: %ld is out of range [%.0f, %.0f]", k->key, v, k->lo,
                            k->hi);
        *(int *)dst = (int)v;
        return VIT_OK;
    }
    double v = strtod(value, &end);
    char t[3][32];
    if (end == value || *end || errno || !isfinite(v))
        return vit_fail(VIT_EINVAL, "%s: expected a number, got '%s'", k->key, value);
    if (v < k->lo || v > k->hi)
        return vit_fail(VIT_EINVAL, "%s: %s is out of range [%s, %s]", k->key,
                        vit_fmt_double(v, t[0]), vit_fmt_double(k->lo, t[1]),
                        vit_fmt_double(k->hi, t[2]));
    *(double *)dst = v;
    return VIT_OK;
}

int vit_arch_key_format(const vit_arch_key *k, const void *base, char *out, size_t cap)
{
    const void *src = (const char *)base + k->offset;
    char t[32];
    if (k->type == VIT_KEY_REAL)
        return snprintf(out, cap, "%s = %s\n", k->key, vit_fmt_double(*(const double *)src, t));
    int v = *(const int *)src;
    if (k->type == VIT_KEY_ENUM) {
        int n = 0;
        while (k->names[n])
            n++;
        return snprintf(out, cap, "%s = %s\n", k->key, v >= 0 && v < n ? k->names[v] : "?");
    }
    return snprintf(out, cap, "%s = %d\n", k->key, v);
}

int vit_arch_keys_check(const vit_arch *a, const void *base)
{
    for (int i = 0; i < a->nkeys; i++) {
        const vit_arch_key *k = &a->keys[i];
        const void *src = (const char *)base + k->offset;
        char t[3][32];
        if (k->type == VIT_KEY_REAL) {
            double v = *(const double *)src;
            if (!(v >= k->lo && v <= k->hi))
                return vit_fail(VIT_EINVAL, "%s: %s is out of range [%s, %s]", k->key,
                                vit_fmt_double(v, t[0]), vit_fmt_double(k->lo, t[1]),
                                vit_fmt_double(k->hi, t[2]));
            continue;
        }
        int v = *(const int *)src, hi = (int)k->hi, lo = (int)k->lo;
        if (k->type == VIT_KEY_ENUM) {
            lo = 0;
            for (hi = -1; k->names[hi + 1];)
                hi++;
        }
        if (v < lo || v > hi)
            return vit_fail(VIT_EINVAL, "%s: %d is out of range [%d, %d]", k->key, v, lo, hi);
    }
    return VIT_OK;
}

/* ---- an arch inside a config --------------------------------------------- */

const vit_arch *vit_config_arch(const vit_config *cfg)
{
    if (!cfg)
        return NULL;
    return cfg->arch ? cfg->arch : &vit_arch_vit_def;
}

const void *vit_config_arch_data(const vit_config *cfg)
{
    if (!cfg)
        return NULL;
    return vit_config_arch(cfg) == &vit_arch_vit_def ? (const void *)cfg
                                                     : (const void *)cfg->arch_cfg.bytes;
}

void *vit_config_arch_data_mut(vit_config *cfg)
{
    if (!cfg)
        return NULL;
    return vit_config_arch(cfg) == &vit_arch_vit_def ? (void *)cfg : (void *)cfg->arch_cfg.bytes;
}

int vit_config_set_arch(vit_config *cfg, const vit_arch *arch)
{
    if (!cfg)
        return vit_fail(VIT_EINVAL, "vit_config_set_arch: cfg is NULL");
    if (!arch)
        arch = &vit_arch_vit_def;
    /* Its config text must read back (a checkpoint's, an export's). */
    if (vit_arch_find(arch->name) != arch)
        return vit_fail(VIT_EINVAL, "vit_config_set_arch: architecture '%s' is not registered "
                        "(vit_arch_register)", arch->name ? arch->name : "(null)");
    /* Defaults into a copy first: a default that does not parse leaves cfg
     * as it was. */
    vit_config c = *cfg;
    c.arch = arch == &vit_arch_vit_def ? NULL : arch;
    memset(c.arch_cfg.bytes, 0, sizeof c.arch_cfg.bytes);
    memset(c.arch_given, 0, sizeof c.arch_given);
    void *base = vit_config_arch_data_mut(&c);
    for (int i = 0; i < arch->nkeys; i++)
        if (vit_arch_key_set(&arch->keys[i], base, arch->keys[i].def) != VIT_OK) {
            char why[300];
            snprintf(why, sizeof why, "%s", vit_last_error());
            return vit_fail(VIT_EINVAL, "vit_config_set_arch: %s: default of %s", arch->name, why);
        }
    *cfg = c;
    return VIT_OK;
}

/* ---- parameter leaves ------------------------------------------------------ */

vit_tensor *vit_arch_param(const vit_arch_run *run, int i)
{
    const vit_param_tensor *t = run ? vit_params_tensor(run->params, i) : NULL;
    if (!t || !vit_params_values(run->params)) {
        vit_fail(VIT_EINVAL, "vit_arch_param: %s", !run ? "run is NULL" : "no such tensor");
        if (run)
            vit_tape_fail(run->tape, VIT_EINVAL);
        return NULL;
    }
    return vit_tape_leaf(run->tape, vit_params_values(run->params) + t->offset,
                         run->grads ? run->grads + t->offset : NULL, t->ndim, t->shape);
}

vit_tensor *vit_arch_param_range(const vit_arch_run *run, int i, int count)
{
    const vit_param_tensor *t = run ? vit_params_tensor(run->params, i) : NULL;
    const vit_param_tensor *e = run && count > 0 ? vit_params_tensor(run->params, i + count - 1)
                                                 : NULL;
    size_t n = t && e ? e->offset + e->size - t->offset : 0;
    if (!t || !e || n > 2147483647u || !vit_params_values(run->params)) {
        vit_fail(VIT_EINVAL, "vit_arch_param_range: %s",
                 !run ? "run is NULL" : "no such range of tensors");
        if (run)
            vit_tape_fail(run->tape, VIT_EINVAL);
        return NULL;
    }
    int shape[1] = {(int)n};
    return vit_tape_leaf(run->tape, vit_params_values(run->params) + t->offset,
                         run->grads ? run->grads + t->offset : NULL, 1, shape);
}
