/*
 * The network's config: defaults, its table of keys, the one `key = value`
 * parser and formatter of both tables (the recipe's is train_config.c), and
 * the checks that keep a model buildable.  One table per struct describes
 * every field, so parsing, formatting and flag overrides cannot drift
 * apart.
 */
#include "vit/model.h"
#include "vit/train_config.h"
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

#define F(key, kind, lo, hi, help) {#key, kind, offsetof(vit_config, key), lo, hi, help}

/* The network's shared keys (an architecture's are its vit_arch.keys). */
static const vit_cfg_field fields[] = {
    F(image_height, VIT_CFG_INT, 1, 4096, "image height in pixels (from the data)"),
    F(image_width, VIT_CFG_INT, 1, 4096, "image width in pixels (from the data)"),
    F(channels, VIT_CFG_INT, 1, 4, "image channels (from the data)"),
    F(classes, VIT_CFG_INT, 2, 100000, "number of classes (from the data)"),
    F(init_std, VIT_CFG_DOUBLE, 1e-6, 10, "std of the weight initialisation"),
    F(image_norm, VIT_CFG_INT, 0, 1, "1: each image standardised per channel by its own mean "
      "and std before the network (for data whose colours carry no class; 0: none)"),
    F(data_norm, VIT_CFG_INT, 0, 1, "1: each channel normalised by the training set's mean and "
      "std, (x - data_mean) / data_std, computed once from the training images (without "
      "--val's) and stored with the model; not with image_norm (0: none)"),
    F(data_mean, VIT_CFG_CHANNELS, -1000, 1000, "data_norm's per-channel mean, comma-separated "
      "(e.g. 0.485,0.456,0.406); given: used instead of the training set's"),
    F(data_std, VIT_CFG_CHANNELS, 1e-6, 1000, "data_norm's per-channel std, comma-separated; "
      "given with data_mean"),
};
#define NFIELDS (int)(sizeof fields / sizeof fields[0])
/* The shared keys written before the architecture's (the data's shape). */
#define NDATA 4
/* init_std, written among the recipe's keys after SCALE_KEY (where it stood
 * before the split: the text checkpoints store is unchanged). */
#define INIT_STD NDATA
/* image_norm, then data_norm with its statistics: written last, and only
 * when on, so that the text of every model without them stays as it was. */
#define IMAGE_NORM (NDATA + 1)
#define DATA_NORM (NDATA + 2)
#define DATA_MEAN (NDATA + 3)
#define DATA_STD (NDATA + 4)
_Static_assert(DATA_STD == NFIELDS - 1, "the trailing keys' indices");
#define SCALE_KEY "scale"
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
    c->init_std = 0.1;
}

void vit_config_legacy_default(vit_config *c)
{
    vit_config_default(c);
    c->patch_stride = 0;
    c->patch_pad = 0;
    c->lsa = 0;
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

/* ---- the machinery both tables share ------------------------------------ */

const vit_cfg_field *vit_cfg_field_find(const vit_cfg_field *table, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strcmp(table[i].key, key) == 0)
            return &table[i];
    return NULL;
}

int vit_cfg_field_set(void *base, const vit_cfg_field *f, const char *key, const char *value)
{
    void *dst = (char *)base + f->offset;
    char *end = NULL;
    errno = 0;
    switch (f->kind) {
    case VIT_CFG_TTA:
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
    case VIT_CFG_PRECISION:
        if (strcmp(value, "fp32") == 0)
            *(int *)dst = VIT_PRECISION_FP32;
        else if (strcmp(value, "bf16") == 0)
            *(int *)dst = VIT_PRECISION_BF16;
        else if (strcmp(value, "auto") == 0)
            *(int *)dst = VIT_PRECISION_AUTO;
        else
            return vit_fail(VIT_EINVAL, "%s: expected fp32, bf16 or auto, got '%s'", key, value);
        return VIT_OK;
    case VIT_CFG_U64: {
        if (*value == '-')
            return vit_fail(VIT_EINVAL, "%s: expected a non-negative integer, got '%s'", key, value);
        unsigned long long v = strtoull(value, &end, 10);
        if (end == value || *end || errno)
            return vit_fail(VIT_EINVAL, "%s: expected a non-negative integer, got '%s'", key, value);
        *(unsigned long long *)dst = v;
        return VIT_OK;
    }
    case VIT_CFG_CHANNELS: {
        vit_channel_values got = {0};
        const char *p = value;
        for (;;) {
            if (got.n == VIT_CHANNELS_MAX)
                return vit_fail(VIT_EINVAL, "%s: more than %d values in '%s' (one per channel)",
                                key, VIT_CHANNELS_MAX, value);
            errno = 0;
            double v = strtod(p, &end);
            if (end == p || errno || !isfinite(v))
                return vit_fail(VIT_EINVAL, "%s: expected comma-separated numbers, one per "
                                "channel, got '%s'", key, value);
            if (v < f->lo || v > f->hi)
                return vit_fail(VIT_EINVAL, "%s: %g (value %d of '%s') is out of range [%g, %g]",
                                key, v, got.n + 1, value, f->lo, f->hi);
            got.v[got.n++] = v;
            while (isspace((unsigned char)*end))
                end++;
            if (!*end)
                break;
            if (*end != ',')
                return vit_fail(VIT_EINVAL, "%s: expected comma-separated numbers, one per "
                                "channel, got '%s'", key, value);
            p = end + 1;
        }
        *(vit_channel_values *)dst = got;
        return VIT_OK;
    }
    case VIT_CFG_INT:
    case VIT_CFG_DOUBLE: { /* as an architecture's key of the same type (arch.c) */
        const vit_arch_key k = {key, f->kind == VIT_CFG_INT ? VIT_KEY_INT : VIT_KEY_REAL,
                                f->offset, f->lo, f->hi, NULL, NULL, NULL, NULL};
        return vit_arch_key_set(&k, base, value);
    }
    }
    return VIT_EINVAL;
}

int vit_cfg_field_format(const void *base, const vit_cfg_field *f, char *out, size_t room)
{
    const void *src = (const char *)base + f->offset;
    char t[32];
    switch (f->kind) {
    case VIT_CFG_INT: return snprintf(out, room, "%s = %d\n", f->key, *(const int *)src);
    case VIT_CFG_U64:
        return snprintf(out, room, "%s = %llu\n", f->key, *(const unsigned long long *)src);
    case VIT_CFG_DOUBLE:
        return snprintf(out, room, "%s = %s\n", f->key, vit_fmt_double(*(const double *)src, t));
    case VIT_CFG_TTA:
        return snprintf(out, room, "%s = %s\n", f->key, vit_tta_name(*(const int *)src));
    case VIT_CFG_PRECISION:
        return snprintf(out, room, "%s = %s\n", f->key, vit_precision_name(*(const int *)src));
    case VIT_CFG_CHANNELS: {
        const vit_channel_values *cv = src;
        int len = snprintf(out, room, "%s = ", f->key);
        for (int i = 0; i < cv->n && len >= 0; i++) {
            int k = snprintf(out + ((size_t)len < room ? (size_t)len : room),
                             (size_t)len < room ? room - (size_t)len : 0, "%s%s", i ? "," : "",
                             vit_fmt_double(cv->v[i], t));
            len = k < 0 ? k : len + k;
        }
        if (len < 0)
            return len;
        int k = snprintf(out + ((size_t)len < room ? (size_t)len : room),
                         (size_t)len < room ? room - (size_t)len : 0, "\n");
        return k < 0 ? k : len + k;
    }
    }
    return -1;
}

/* ---- the network's keys --------------------------------------------------- */

static const vit_cfg_field *find_field(const char *key)
{
    return vit_cfg_field_find(fields, NFIELDS, key);
}

static const vit_cfg_field *find_train_field(const char *key)
{
    int n;
    const vit_cfg_field *t = vit_train_config_fields(&n);
    return vit_cfg_field_find(t, n, key);
}

int vit_config_shared_key(const char *key)
{
    const vit_cfg_field *f = key ? find_field(key) : NULL;
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
    char *base = vit_config_arch_data_mut(c);
    TRY(vit_arch_key_set(&a->keys[k], base, value));
    c->arch_given[k] = 1;
    /* the keys that follow this one while they are not given */
    for (int j = 0; j < a->nkeys; j++)
        if (a->keys[j].follows && strcmp(a->keys[j].follows, key) == 0 && !c->arch_given[j])
            memcpy(base + a->keys[j].offset, base + a->keys[k].offset, sizeof(int));
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

int vit_config_set_any(vit_config *c, vit_train_config *tc, const char *key, const char *value)
{
    if (!c || !key || !value)
        return vit_fail(VIT_EINVAL, "vit_config_set: NULL argument");
    if (strcmp(key, "arch") == 0)
        return set_arch_name(c, value);
    const vit_cfg_field *f = find_field(key);
    if (f) {
        TRY(vit_cfg_field_set(c, f, key, value));
        c->given[f - fields] = 1;
        return VIT_OK;
    }
    if (find_train_field(key)) {
        if (tc)
            return vit_train_config_set(tc, key, value);
        return vit_fail(VIT_EINVAL, "%s: a key of the training recipe (vit_train_config), not of "
                        "the network", key);
    }
    return set_arch_key(c, key, value);
}

int vit_config_set(vit_config *c, const char *key, const char *value)
{
    return vit_config_set_any(c, NULL, key, value);
}

/* ---- text: one parser for both tables -------------------------------------- */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

/* The slot of key in a parse's first[] (which line set it): the network's
 * shared keys, the architecture's, "arch", then the recipe's; -1 for an
 * unknown key. */
static int key_slot(const vit_config *c, const char *key)
{
    if (strcmp(key, "arch") == 0)
        return NFIELDS + VIT_ARCH_KEYS_MAX;
    const vit_cfg_field *f = find_field(key);
    if (f)
        return (int)(f - fields);
    int n;
    const vit_cfg_field *t = vit_train_config_fields(&n);
    f = vit_cfg_field_find(t, n, key);
    if (f)
        return NFIELDS + VIT_ARCH_KEYS_MAX + 1 + (int)(f - t);
    int k = vit_arch_key_find(vit_config_arch(c), key);
    return k < 0 ? -1 : NFIELDS + k;
}

int vit_config_parse(vit_config *c, vit_train_config *tc, const char *text, const char *origin)
{
    if (!c || !text)
        return vit_fail(VIT_EINVAL, "vit_config_parse: NULL argument");
    if (!origin)
        origin = "config";
    /* The line each key was set on (0: not yet), so that a key given twice
     * is refused: the later line would silently win, hiding the earlier one
     * from whoever reads the file top-down.  Two passes: `arch` first,
     * wherever it stands, since it decides which keys the others are. */
    int first[NFIELDS + VIT_ARCH_KEYS_MAX + 1 + VIT_TRAIN_CONFIG_KEYS_MAX] = {0};
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
            if (vit_config_set_any(c, tc, key, val) != VIT_OK) {
                char msg[400];
                snprintf(msg, sizeof msg, "%s", vit_last_error());
                return vit_fail(VIT_EFORMAT, "%s:%d: %s", origin, line, msg);
            }
            first[slot] = line; /* known: vit_config_set_any refuses unknown keys */
        }
    }
    return VIT_OK;
}

int vit_config_load(vit_config *c, vit_train_config *tc, const char *path)
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
    return vit_config_parse(c, tc, text, path);
}

/* The keys written after the recipe: each only when its switch (an int
 * field of vit_config) is on, and a list only when it holds values, so
 * that the text of every model without them stays as it was. */
static const struct trailing_key {
    int field;     /* in fields[] */
    size_t on;     /* offset of its switch */
} trailing[] = {
    {IMAGE_NORM, offsetof(vit_config, image_norm)},
    {DATA_NORM, offsetof(vit_config, data_norm)},
    {DATA_MEAN, offsetof(vit_config, data_norm)}, /* once known */
    {DATA_STD, offsetof(vit_config, data_norm)},
};

static int trailing_written(const vit_config *c, const struct trailing_key *k)
{
    const vit_cfg_field *f = &fields[k->field];
    if (!*(const int *)((const char *)c + k->on))
        return 0;
    return f->kind != VIT_CFG_CHANNELS
           || ((const vit_channel_values *)((const char *)c + f->offset))->n > 0;
}

/* 1 when arch key k follows another (vit_arch_key.follows) and has its
 * value: the text leaves it out, and reading the text back gives it. */
static int follows_equal(const vit_arch *a, const void *base, int k)
{
    const vit_arch_key *key = &a->keys[k];
    int j = key->follows ? vit_arch_key_find(a, key->follows) : -1;
    if (j < 0)
        return 0;
    int v, w;
    memcpy(&v, (const char *)base + key->offset, sizeof v);
    memcpy(&w, (const char *)base + a->keys[j].offset, sizeof w);
    return v == w;
}

/* The data's shape, then `arch` (not for the ViT, whose text is as it was
 * before the seam) and the architecture's keys, then the recipe with
 * init_std after scale (without a recipe: init_std after the arch's keys),
 * the order of the text before the network and the recipe were split;
 * then the trailing keys. */
int vit_config_format(const vit_config *c, const vit_train_config *tc, char *buf, size_t cap)
{
    if (!c || !buf)
        return vit_fail(VIT_EINVAL, "vit_config_format: NULL argument");
    const vit_arch *a = vit_config_arch(c);
    const void *base = vit_config_arch_data(c);
    int nt = 0;
    const vit_cfg_field *t = vit_train_config_fields(&nt);
    if (!tc)
        nt = 0;
    size_t len = 0;
    /* One line by `call`, which writes at `out` into `room` bytes and
     * returns snprintf's count. */
#define PUT(call)                                                                          \
    do {                                                                                   \
        char *out = buf + len;                                                             \
        size_t room = cap - len;                                                           \
        int n_ = (call);                                                                   \
        if (n_ < 0 || (size_t)n_ >= room)                                                  \
            return vit_fail(VIT_EINVAL, "vit_config_format: buffer of %zu bytes too small", \
                            cap);                                                          \
        len += (size_t)n_;                                                                 \
    } while (0)
    for (int i = 0; i < NDATA; i++)
        PUT(vit_cfg_field_format(c, &fields[i], out, room));
    if (a != vit_arch_vit())
        PUT(snprintf(out, room, "arch = %s\n", a->name));
    for (int k = 0; k < a->nkeys; k++)
        if (!follows_equal(a, base, k))
            PUT(vit_arch_key_format(&a->keys[k], base, out, room));
    int init_done = 0;
    for (int k = 0; k < nt; k++) {
        PUT(vit_cfg_field_format(tc, &t[k], out, room));
        if (strcmp(t[k].key, SCALE_KEY) == 0) {
            PUT(vit_cfg_field_format(c, &fields[INIT_STD], out, room));
            init_done = 1;
        }
    }
    if (!init_done)
        PUT(vit_cfg_field_format(c, &fields[INIT_STD], out, room));
    for (size_t k = 0; k < sizeof trailing / sizeof trailing[0]; k++)
        if (trailing_written(c, &trailing[k]))
            PUT(vit_cfg_field_format(c, &fields[trailing[k].field], out, room));
#undef PUT
    return (int)len;
}

/* data_norm's statistics: none yet (the trainer computes them) or one
 * finite value per channel, each std > 0; never beside image_norm. */
static int check_data_norm(const vit_config *c)
{
    const vit_channel_values *m = &c->data_mean, *s = &c->data_std;
    if (c->data_norm && c->image_norm)
        return vit_fail(VIT_EINVAL, "data_norm: not with image_norm (one input normalisation at "
                        "a time: image_norm standardises each image by its own mean and std, "
                        "which leaves the training set's at 0 and 1)");
    if (!c->data_norm && (m->n || s->n))
        return vit_fail(VIT_EINVAL, "%s: given, but data_norm is 0 (set data_norm = 1 to "
                        "normalise by them)", m->n ? "data_mean" : "data_std");
    int bad_mean = m->n < 0 || m->n > VIT_CHANNELS_MAX;
    if (bad_mean || s->n < 0 || s->n > VIT_CHANNELS_MAX)
        return vit_fail(VIT_EINVAL, "%s: %d values (0 .. %d)", bad_mean ? "data_mean" : "data_std",
                        bad_mean ? m->n : s->n, VIT_CHANNELS_MAX);
    if (m->n == 0 && s->n == 0)
        return VIT_OK;
    if (m->n != c->channels || s->n != c->channels) {
        const char *k = m->n != c->channels ? "data_mean" : "data_std";
        int n = m->n != c->channels ? m->n : s->n;
        if (n == 0)
            return vit_fail(VIT_EINVAL, "%s: missing (give data_mean and data_std together, one "
                            "value per channel)", k);
        return vit_fail(VIT_EINVAL, "%s: %d value%s for images of %d channel%s (one per "
                        "channel)", k, n, n == 1 ? "" : "s", c->channels,
                        c->channels == 1 ? "" : "s");
    }
    for (int i = 0; i < c->channels; i++)
        if (!isfinite(m->v[i]) || !isfinite(s->v[i]) || !(s->v[i] > 0))
            return vit_fail(VIT_EINVAL, "%s: channel %d: mean %g, std %g (both finite, the std "
                            "positive)", !isfinite(m->v[i]) ? "data_mean" : "data_std", i,
                            m->v[i], s->v[i]);
    return VIT_OK;
}

int vit_config_check(const vit_config *c)
{
    if (!c)
        return vit_fail(VIT_EINVAL, "vit_config_check: NULL config");
    for (int i = 0; i < NFIELDS; i++) {
        const vit_cfg_field *f = &fields[i];
        if (f->kind != VIT_CFG_INT)
            continue;
        int v = *(const int *)((const char *)c + f->offset);
        if (v < f->lo || v > f->hi)
            return vit_fail(VIT_EINVAL, "%s: %d is out of range [%.0f, %.0f]", f->key, v, f->lo, f->hi);
    }
    TRY(check_data_norm(c));
    const vit_arch *a = vit_config_arch(c);
    TRY(vit_arch_keys_check(a, vit_config_arch_data(c)));
    if (a->check)
        TRY(a->check(c));
    return VIT_OK;
}

/* The help text of each key, for tools that list them: the network's
 * shared keys and the ViT's, in the order of the ViT's config text. */
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
    const vit_cfg_field *f = &fields[i < NDATA ? i : i - v->nkeys];
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
    const vit_cfg_field *f = find_field(key);
    if (f)
        return c->given[f - fields];
    int k = vit_arch_key_find(vit_config_arch(c), key);
    if (k < 0)
        return vit_fail(VIT_EINVAL, "vit_config_given: '%s' is not a key of architecture %s%s", key,
                        vit_config_arch(c)->name, find_train_field(key) ? " (a key of the "
                        "training recipe: vit_train_config_given)" : "");
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
