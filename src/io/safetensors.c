/*
 * A model as timm-style safetensors and back; see vit/safetensors.h.
 *
 * The "plan" lists the file's tensors in timm's order with the model tensor
 * each is made of and how (copied, transposed, or the patch embedding's
 * Conv2d layout), all read off the model's tensor table (model_tensors.c);
 * the writer applies it one way, the reader the other, so the two cannot
 * drift apart.
 */
#include "vit/safetensors.h"
#include "vit/checkpoint.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vit/atomic_file.h"
#include "config_internal.h"
#include "error.h"
#include "safetensors_internal.h"
#include "vit/layernorm.h"
#include "vit/optim.h"
#include "vit/rng.h"
#include "vit/train.h"

/* The largest header accepted (the safetensors format's own limit). */
#define HEADER_MAX ((uint64_t)100 * 1000 * 1000)
#define NAME_CAP 64
#define SHAPE_MAX 8

/* ---- the tensor mapping ------------------------------------------------ */

/* One file tensor: op (enum vit_mt_timm_op) applied to the model tensor
 * src, which has as many values (every file tensor has one model tensor:
 * the fused W_QKV [D, 3D] is timm's qkv.weight transposed). */
typedef struct plan_tensor {
    char name[NAME_CAP];
    int ndim, shape[4];
    int op;
    char src[NAME_CAP];
    size_t count; /* values */
} plan_tensor;

/* The file tensor of model tensor t (number i), as its architecture's
 * export_tensor says (none: its own name, copied). */
static int plan_one(const vit_config *c, const vit_arch *a, int i, const vit_param_tensor *t,
                    plan_tensor *o, int *order)
{
    vit_arch_export e = {.op = VIT_EXPORT_COPY, .ndim = t->ndim};
    snprintf(e.name, sizeof e.name, "%s", t->name);
    if (a->export_tensor)
        TRY(a->export_tensor(c, i, t, &e));
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", e.name);
    snprintf(o->src, sizeof o->src, "%s", t->name);
    o->op = e.op;
    o->ndim = e.ndim;
    o->count = t->size;
    *order = e.order;
    int k = e.kernel;
    if (o->op == VIT_EXPORT_CONV) { /* Conv2d's [out, in, k, k]: e.g. the stem's 3x3, stem2's
                                       4x4, the patches', or local_conv's depthwise [D, 1, 3, 3] */
        if (t->ndim != 2 || e.ndim != 4 || k < 1 || t->shape[0] % (k * k))
            return vit_fail(VIT_EINVAL, "%s export: tensor '%s' [%d rows] is no %dx%d Conv2d "
                            "weight", a->name, t->name, t->shape[0], k, k);
        int d[4] = {t->shape[1], t->shape[0] / (k * k), k, k};
        memcpy(o->shape, d, sizeof d);
    } else if (o->op == VIT_EXPORT_TRANSPOSE) {
        if (t->ndim != 2 || e.ndim != 2)
            return vit_fail(VIT_EINVAL, "%s export: tensor '%s' is not a matrix to transpose",
                            a->name, t->name);
        o->shape[0] = t->shape[1];
        o->shape[1] = t->shape[0];
    } else { /* leading 1s, e.g. cls [D] as cls_token [1, 1, D] */
        int lead = o->ndim - t->ndim;
        if (lead < 0 || o->ndim > 4)
            return vit_fail(VIT_EINVAL, "%s export: tensor '%s' of rank %d as rank %d", a->name,
                            t->name, t->ndim, o->ndim);
        for (int j = 0; j < o->ndim; j++)
            o->shape[j] = j < lead ? 1 : t->shape[j - lead];
    }
    return VIT_OK;
}

/* The whole plan in the file's order (by each tensor's order, then layout
 * order: for the ViT timm's state_dict) into *out (malloc'd), *n tensors:
 * the tensors the architecture's build makes of c (checked), without
 * allocating the model. */
static int make_plan(const vit_config *c, plan_tensor **out, int *n)
{
    const vit_arch *a = vit_config_arch(c);
    vit_params *p = vit_params_new();
    void *state = NULL;
    plan_tensor *o = NULL;
    int *order = NULL, rc = p ? a->build(c, p, &state) : vit_fail(VIT_ENOMEM, "out of memory");
    if (a->release)
        a->release(state);
    int nt = rc == VIT_OK ? vit_params_tensor_count(p) : 0;
    if (rc == VIT_OK && (!(o = calloc((size_t)nt + 1, sizeof *o))
                         || !(order = calloc((size_t)nt + 1, sizeof *order))))
        rc = vit_fail(VIT_ENOMEM, "out of memory");
    for (int i = 0; rc == VIT_OK && i < nt; i++)
        rc = plan_one(c, a, i, vit_params_tensor(p, i), &o[i], &order[i]);
    for (int i = 1; rc == VIT_OK && i < nt; i++) /* insertion sort: stable */
        for (int j = i; j > 0 && order[j - 1] > order[j]; j--) {
            plan_tensor tmp = o[j];
            int to = order[j];
            o[j] = o[j - 1];
            order[j] = order[j - 1];
            o[j - 1] = tmp;
            order[j - 1] = to;
        }
    vit_params_free(p);
    free(order);
    if (rc != VIT_OK) {
        free(o);
        return rc;
    }
    *out = o;
    *n = nt;
    return VIT_OK;
}

static const vit_model_tensor *find_ours(const vit_model *m, const char *name)
{
    for (int i = 0; i < vit_model_tensor_count(m); i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i);
        if (strcmp(t->name, name) == 0)
            return t;
    }
    return NULL;
}

/* Index of value s[idx] of o's source t in the data holding file tensor o
 * from value base on: the layout map of the plan, used both ways. */
static size_t file_index(const plan_tensor *o, const vit_model_tensor *t,
                         size_t base, size_t idx)
{
    if (o->op == VIT_EXPORT_COPY)
        return base + idx;
    if (o->op == VIT_EXPORT_TRANSPOSE) {
        /* ours [r, q] (x W convention) -> PyTorch's [q, r] (x W^T) */
        size_t r = (size_t)t->shape[0], q = t->ndim > 1 ? (size_t)t->shape[1] : 1;
        size_t i = idx / q, j = idx % q;
        return base + j * r + i;
    }
    /* patch.w [(py*P + px)*C + ch, D] -> Conv2d weight [D, C, P, P] (stem.w
     * and stem2.w likewise, P = 3 or 4 and D their channels): the sizes are
     * the plan's */
    size_t D = (size_t)o->shape[0], C = (size_t)o->shape[1], P = (size_t)o->shape[2];
    size_t dd = idx % D, row = idx / D, ch = row % C, pix = row / C, py = pix / P, px = pix % P;
    return base + ((dd * C + ch) * P + py) * P + px;
}

/* Checks that o's source exists and fills it exactly. */
static int check_source(const vit_model *m, const plan_tensor *o, const char *path)
{
    const vit_model_tensor *t = find_ours(m, o->src);
    if (!t)
        return vit_fail(VIT_EINVAL, "%s: the model has no tensor '%s' for '%s'", path, o->src,
                        o->name);
    if (t->size != o->count)
        return vit_fail(VIT_EINVAL, "%s: '%s' needs %zu values, the model has %zu", path, o->name,
                        o->count, t->size);
    return VIT_OK;
}

/* ---- little-endian floats ------------------------------------------------ */

static void put_f32(unsigned char *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(u >> (8 * k));
}

static float get_f32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* ---- a growing string for the JSON header ------------------------------ */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    for (;;) {
        if (b->oom)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t want = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *q = realloc(b->p, want);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = want;
    }
}

/* s as a JSON string literal. */
static void sb_json_string(sbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            sb_printf(b, "\\%c", ch);
        else if (ch < 0x20)
            sb_printf(b, "\\u%04x", ch);
        else
            sb_printf(b, "%c", ch);
    }
    sb_printf(b, "\"");
}

/* AdamW's hyper-parameters are config keys of their own names; in the
 * metadata they carry this prefix, so that "eps" is never AdamW's. */
static const char *const adamw_keys[] = {"beta1", "beta2", "eps", "weight_decay"};
#define ADAMW_PREFIX "adamw_"

static int is_adamw_key(const char *key)
{
    for (size_t i = 0; i < sizeof adamw_keys / sizeof adamw_keys[0]; i++)
        if (strcmp(key, adamw_keys[i]) == 0)
            return 1;
    return 0;
}

/* What a user of the weights does to an image's pixels first: the
 * metadata's "input", for each of the model's normalisations (image_norm,
 * data_norm with its figures, or none), as vit_image_norm and
 * vit_data_norm compute it. */
static void input_text(const vit_config *c, char *out, size_t cap)
{
    int at = snprintf(out, cap, "NCHW float32 in [0, 1], ");
    if (c->image_norm) {
        snprintf(out + at, cap - (size_t)at, "then each image standardised per channel: (x - m) "
                 "/ sqrt(v + %g), m and v the mean and (biased) variance of that channel over "
                 "the image's %dx%d pixels (image_norm = 1)", VIT_IMAGE_NORM_EPS,
                 c->image_height, c->image_width);
        return;
    }
    if (!c->data_norm) {
        snprintf(out + at, cap - (size_t)at, "no normalization");
        return;
    }
    const vit_channel_values *v[2] = {&c->data_mean, &c->data_std};
    at += snprintf(out + at, cap - (size_t)at, "then (x - mean[c]) / std[c] for each channel c");
    for (int k = 0; k < 2; k++) {
        char t[32];
        at += snprintf(out + at, cap - (size_t)at, ", %s = [", k ? "std" : "mean");
        for (int i = 0; i < v[k]->n; i++)
            at += snprintf(out + at, cap - (size_t)at, "%s%s", i ? ", " : "",
                           vit_fmt_double(v[k]->v[i], t));
        at += snprintf(out + at, cap - (size_t)at, "]");
    }
    snprintf(out + at, cap - (size_t)at, " (data_norm = 1: the training set's statistics, "
             "data_mean and data_std; torchvision's Normalize(mean, std))");
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static int header_json(sbuf *b, const vit_config *c, const vit_train_config *tc,
                       char *const *class_names, const vit_data_fit *fit, const plan_tensor *o,
                       int n)
{
    char cfg[4096], *save = NULL;
    int rc = vit_config_format(c, tc, cfg, sizeof cfg);
    if (rc < 0)
        return rc;
    sb_printf(b, "{\"__metadata__\":{");
    /* "key = value" lines -> "key":"value" */
    for (char *line = strtok_r(cfg, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strstr(line, " = ");
        if (!eq)
            continue;
        *eq = 0;
        if (is_adamw_key(line))
            sb_printf(b, "\"%s%s\":", ADAMW_PREFIX, line);
        else {
            sb_json_string(b, line);
            sb_printf(b, ":");
        }
        sb_json_string(b, eq + 3);
        sb_printf(b, ",");
    }
    const vit_arch *a = vit_config_arch(c);
    sb_printf(b, "\"format\":\"pt\",\"producer\":\"vit_export %s\",\"layout\":", vit_version());
    sb_json_string(b, a->export_layout ? a->export_layout : a->name);
    if (a == vit_arch_vit())
        sb_printf(b, ",\"global_pool\":\"%s\"", c->pool == VIT_POOL_MEAN ? "avg" : "token");
    /* ln_eps is the ViT's key; other architectures' layer norms use the default */
    sb_printf(b, ",\"layer_norm_eps\":\"%g\",\"activation\":\"gelu_exact\",\"input\":",
              a == vit_arch_vit() ? c->ln_eps : VIT_LAYERNORM_EPS);
    char input[1024];
    input_text(c, input, sizeof input);
    sb_json_string(b, input);
    /* The weights compute one pass; a model that uses test-time
     * augmentation was scored otherwise (vit_predict_tta, evaluate.c). */
    if (tc && tc->tta == VIT_TTA_SHIFT9)
        sb_printf(b, ",\"tta_note\":\"these weights give one pass per image; the model's own "
                     "scores (tta shift9) average the softmax over the image and its 8 one-pixel "
                     "shifts (dy, dx in -1..1, zeros shifted in)\"");
    else if (tc && tc->tta == VIT_TTA_SHIFT9_FLIP)
        sb_printf(b, ",\"tta_note\":\"these weights give one pass per image; the model's own "
                     "scores (tta shift9flip) average the softmax over 18 views: the image and its "
                     "8 one-pixel shifts (dy, dx in -1..1, zeros shifted in), and the same 9 of the "
                     "image mirrored left-right\"");
    /* How the run made its images the model's shape (vit_image_load with
     * the model's shape, as vit_predict does for such a run): without it a
     * user of the weights would have to guess the channel conversion and
     * the resize filter. */
    if (fit && (fit->height > 0 || fit->channels > 0))
        sb_printf(b, ",\"fit\":\"%dx%dx%d\",\"fit_note\":\"the run fitted its images on load; "
                     "prepare each the same way: PNG alpha composited over white, then "
                     "converted to %d channel%s (gray copied into R, G and B; RGB to gray by "
                     "the luma 0.299 R + 0.587 G + 0.114 B), then resized to %dx%d (height x "
                     "width) with a triangle filter on pixel centres that widens when "
                     "shrinking, as Pillow's Image.resize(..., BILINEAR)\"",
                  fit->height, fit->width, fit->channels, c->channels,
                  c->channels == 1 ? "" : "s", c->image_height, c->image_width);
    if (class_names) { /* a JSON array in a string: metadata values are strings */
        sbuf arr = {0};
        for (int k = 0; k < c->classes; k++) {
            sb_printf(&arr, k ? "," : "[");
            sb_json_string(&arr, class_names[k]);
        }
        sb_printf(&arr, "]");
        sb_printf(b, ",\"class_names\":");
        if (arr.oom)
            b->oom = 1;
        else
            sb_json_string(b, arr.p);
        free(arr.p);
    }
    sb_printf(b, "}"); /* end of __metadata__ */
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        sb_printf(b, ",");
        sb_json_string(b, o[i].name);
        sb_printf(b, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int k = 0; k < o[i].ndim; k++)
            sb_printf(b, "%s%d", k ? "," : "", o[i].shape[k]);
        sb_printf(b, "],\"data_offsets\":[%zu,%zu]}", offset * 4, (offset + o[i].count) * 4);
        offset += o[i].count;
    }
    sb_printf(b, "}");
    while (!b->oom && b->len % 8)
        sb_printf(b, " ");
    return VIT_OK;
}

/* ---- atomic files ------------------------------------------------------ */

/* head then body to path, whole or not at all. */
static int write_atomic(const char *path, const unsigned char *head, size_t head_len,
                        const unsigned char *body, size_t body_len)
{
    FILE *f;
    char *tmp;
    int rc = vit_atomic_open(path, &f, &tmp);
    if (rc != VIT_OK)
        return rc;
    if (fwrite(head, 1, head_len, f) != head_len || fwrite(body, 1, body_len, f) != body_len)
        rc = vit_fail(VIT_EIO, "%s: write failed: %s", path, strerror(errno));
    return vit_atomic_close(f, tmp, path, rc);
}

/* ---- export ------------------------------------------------------------- */

int vit_safetensors_save(const vit_model *m, const vit_train_config *tc, char *const *class_names,
                         const char *path,
                         size_t *bytes)
{
    return vit_safetensors_save_fit(m, tc, class_names, NULL, path, bytes);
}

int vit_safetensors_save_fit(const vit_model *m, const vit_train_config *tc,
                             char *const *class_names,
                             const vit_data_fit *fit, const char *path, size_t *bytes)
{
    if (!m || !path)
        return vit_fail(VIT_EINVAL, "vit_safetensors_save: %s is NULL", !m ? "model" : "path");
    if (fit && ((fit->height > 0) != (fit->width > 0) || fit->height < 0 || fit->width < 0
                || (fit->channels != 0 && fit->channels != 1 && fit->channels != 3)))
        return vit_fail(VIT_EINVAL, "vit_safetensors_save: %s: fit %dx%dx%d is not a fit (sides "
                        "both > 0 or both 0, channels 0, 1 or 3)", path, fit->height, fit->width,
                        fit->channels);
    const vit_config *c = vit_model_config(m);
    /* Overlapping patches are a Conv2d with stride and padding, in the
     * metadata as patch_stride and patch_pad.  Locality self-attention (lsa
     * in the metadata) adds blocks.L.attn.tau, which timm's
     * VisionTransformer does not have: a strict load into timm fails rather
     * than compute without the no-self mask and the learnt scale. */
    /* Only read: the accessor is not const-qualified. */
    const vit_real *params = vit_model_params((vit_model *)(uintptr_t)m);
    int n = 0, rc;
    plan_tensor *o = NULL;
    unsigned char *data = NULL;
    sbuf hdr = {0};
    if ((rc = make_plan(c, &o, &n)) != VIT_OK) {
        char why[300];
        snprintf(why, sizeof why, "%s", vit_last_error());
        rc = vit_fail(rc, "%s: %s", path, why);
        goto done;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if ((rc = check_source(m, &o[i], path)) != VIT_OK)
            goto done;
        total += o[i].count;
    }
    if (total != vit_model_param_count(m)) {
        rc = vit_fail(VIT_EINVAL, "%s: the file would hold %zu values, the model has %zu", path,
                      total, vit_model_param_count(m));
        goto done;
    }
    if (!(data = malloc(total * 4))) {
        rc = vit_fail(VIT_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    size_t base = 0;
    for (int i = 0; i < n; i++) {
        const vit_model_tensor *t = find_ours(m, o[i].src);
        const vit_real *s = params + t->offset;
        for (size_t j = 0; j < t->size; j++) {
            float v = (float)s[j];
            if (!isfinite(v)) {
                rc = vit_fail(VIT_ENUM, "%s: tensor '%s' holds %g, which float32 cannot "
                              "represent as a finite value", path, t->name, (double)s[j]);
                goto done;
            }
            put_f32(data + 4 * file_index(&o[i], t, base, j), v);
        }
        base += o[i].count;
    }
    if ((rc = header_json(&hdr, c, tc, class_names, fit, o, n)) != VIT_OK)
        goto done;
    if (hdr.oom) {
        rc = vit_fail(VIT_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    unsigned char *head = malloc(8 + hdr.len);
    if (!head) {
        rc = vit_fail(VIT_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    for (int k = 0; k < 8; k++)
        head[k] = (unsigned char)((uint64_t)hdr.len >> (8 * k));
    memcpy(head + 8, hdr.p, hdr.len);
    rc = write_atomic(path, head, 8 + hdr.len, data, total * 4);
    free(head);
    if (rc == VIT_OK && bytes)
        *bytes = 8 + hdr.len + 4 * total;
done:
    free(hdr.p);
    free(data);
    free(o);
    return rc;
}

/* ---- the header parser ----------------------------------------------------
 *
 * Only the JSON the format allows: an object whose values are either the
 * "__metadata__" object of strings or a tensor object {"dtype": string,
 * "shape": [non-negative integers], "data_offsets": [begin, end]}.  Anything
 * else is an error naming the byte where it went wrong. */

typedef struct kv {
    char *key, *value;
} kv;

typedef struct st_tensor {
    char *name;
    char *dtype;
    int ndim;
    uint64_t shape[SHAPE_MAX];
    uint64_t begin, end;
    int used;
} st_tensor;

typedef struct parsed {
    kv *meta;
    int nmeta, has_meta;
    st_tensor *t;
    int nt, cap_t;
} parsed;

typedef struct jp {
    const char *path;
    const unsigned char *s;
    size_t n, i;
} jp;

static void parsed_free(parsed *p)
{
    for (int i = 0; i < p->nmeta; i++) {
        free(p->meta[i].key);
        free(p->meta[i].value);
    }
    for (int i = 0; i < p->nt; i++) {
        free(p->t[i].name);
        free(p->t[i].dtype);
    }
    free(p->meta);
    free(p->t);
    memset(p, 0, sizeof *p);
}

static int jp_err(const jp *j, const char *what)
{
    if (j->i >= j->n)
        return vit_fail(VIT_EFORMAT, "%s: the JSON header ends early (%zu bytes): %s", j->path,
                        j->n, what);
    return vit_fail(VIT_EFORMAT, "%s: JSON header byte %zu: %s", j->path, j->i, what);
}

static void jp_ws(jp *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' ||
                           j->s[j->i] == '\r'))
        j->i++;
}

/* Consumes ch after optional white space. */
static int jp_expect(jp *j, char ch, const char *what)
{
    jp_ws(j);
    if (j->i >= j->n || j->s[j->i] != (unsigned char)ch)
        return jp_err(j, what);
    j->i++;
    return VIT_OK;
}

static int hex4(const unsigned char *s, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char ch = s[k];
        v <<= 4;
        if (ch >= '0' && ch <= '9')
            v |= (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            v |= (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            v |= (unsigned)(ch - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* A JSON string as a malloc'd NUL-terminated UTF-8 string (no NUL inside). */
static int jp_string(jp *j, char **out)
{
    *out = NULL;
    jp_ws(j);
    if (j->i >= j->n || j->s[j->i] != '"')
        return jp_err(j, "expected a string");
    j->i++;
    /* The decoded string is never longer than the raw one. */
    size_t end = j->i;
    while (end < j->n && j->s[end] != '"')
        end += j->s[end] == '\\' ? 2 : 1;
    if (end >= j->n) {
        j->i = j->n;
        return jp_err(j, "unterminated string");
    }
    char *o = malloc(end - j->i + 1);
    if (!o)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", j->path);
    size_t len = 0;
    while (j->s[j->i] != '"') {
        unsigned char ch = j->s[j->i];
        if (ch < 0x20) {
            free(o);
            return jp_err(j, "control character in a string");
        }
        if (ch != '\\') {
            o[len++] = (char)ch;
            j->i++;
            continue;
        }
        unsigned char e = j->s[j->i + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            o[len++] = to[simple - "\"\\/bfnrt"];
            j->i += 2;
            continue;
        }
        unsigned cp, lo;
        if (e != 'u' || j->i + 6 > end || hex4(j->s + j->i + 2, &cp)) {
            free(o);
            return jp_err(j, "bad escape in a string");
        }
        j->i += 6;
        if (cp >= 0xdc00 && cp <= 0xdfff) {
            free(o);
            return jp_err(j, "lone low surrogate in a string");
        }
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (j->i + 6 > end || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u' ||
                hex4(j->s + j->i + 2, &lo) || lo < 0xdc00 || lo > 0xdfff) {
                free(o);
                return jp_err(j, "high surrogate without its low half in a string");
            }
            j->i += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp == 0) {
            free(o);
            return jp_err(j, "\\u0000 in a string");
        }
        /* UTF-8: never longer than the 6 or 12 escape bytes it replaces */
        if (cp < 0x80) {
            o[len++] = (char)cp;
        } else if (cp < 0x800) {
            o[len++] = (char)(0xc0 | cp >> 6);
            o[len++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            o[len++] = (char)(0xe0 | cp >> 12);
            o[len++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            o[len++] = (char)(0x80 | (cp & 0x3f));
        } else {
            o[len++] = (char)(0xf0 | cp >> 18);
            o[len++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            o[len++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            o[len++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    j->i++; /* the closing quote */
    o[len] = 0;
    *out = o;
    return VIT_OK;
}

/* A non-negative integer below 2^53 (no sign, fraction or exponent). */
static int jp_uint(jp *j, uint64_t *out)
{
    jp_ws(j);
    size_t start = j->i;
    uint64_t v = 0;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        v = v * 10 + (uint64_t)(j->s[j->i] - '0');
        if (v >= (uint64_t)1 << 53)
            return jp_err(j, "integer too large");
        j->i++;
    }
    if (j->i == start)
        return jp_err(j, "expected a non-negative integer");
    if (j->i - start > 1 && j->s[start] == '0')
        return jp_err(j, "integer with a leading zero");
    if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E'))
        return jp_err(j, "expected an integer, not a fraction");
    *out = v;
    return VIT_OK;
}

/* After an element: 1 for ',', 0 for the closing ch, or an error. */
static int jp_next(jp *j, char close, const char *what)
{
    jp_ws(j);
    if (j->i < j->n && j->s[j->i] == ',') {
        j->i++;
        return 1;
    }
    if (j->i < j->n && j->s[j->i] == (unsigned char)close) {
        j->i++;
        return 0;
    }
    return jp_err(j, what);
}

/* Is the next non-space byte ch?  (Consumes it if so.) */
static int jp_peek(jp *j, char ch)
{
    jp_ws(j);
    if (j->i < j->n && j->s[j->i] == (unsigned char)ch) {
        j->i++;
        return 1;
    }
    return 0;
}

/* "[" integers "]" into v[0 .. *count-1], at most cap of them. */
static int jp_uint_array(jp *j, uint64_t *v, int cap, int *count, const char *what)
{
    *count = 0;
    int rc = jp_expect(j, '[', what);
    if (rc)
        return rc;
    if (jp_peek(j, ']'))
        return VIT_OK;
    for (;;) {
        if (*count == cap)
            return jp_err(j, "too many integers in an array");
        if ((rc = jp_uint(j, &v[(*count)++])))
            return rc;
        rc = jp_next(j, ']', "expected ',' or ']' in an array");
        if (rc <= 0)
            return rc;
    }
}

/* An object's key and the ':' after it; *k is malloc'd (NULL on failure). */
static int jp_key(jp *j, char **k)
{
    int rc = jp_string(j, k);
    if (rc == VIT_OK && (rc = jp_expect(j, ':', "expected ':' after a key")) != VIT_OK) {
        free(*k);
        *k = NULL;
    }
    return rc;
}

static int parse_metadata(jp *j, parsed *p)
{
    int rc = jp_expect(j, '{', "__metadata__ must be an object of strings");
    if (rc)
        return rc;
    if (jp_peek(j, '}'))
        return VIT_OK;
    for (;;) {
        char *k, *v;
        if ((rc = jp_key(j, &k)))
            return rc;
        if ((rc = jp_string(j, &v))) {
            free(k);
            return rc;
        }
        for (int i = 0; i < p->nmeta; i++)
            if (strcmp(p->meta[i].key, k) == 0) {
                rc = vit_fail(VIT_EFORMAT, "%s: __metadata__ has '%s' twice", j->path, k);
                free(k);
                free(v);
                return rc;
            }
        kv *grown = realloc(p->meta, (size_t)(p->nmeta + 1) * sizeof *grown);
        if (!grown) {
            free(k);
            free(v);
            return vit_fail(VIT_ENOMEM, "%s: out of memory", j->path);
        }
        p->meta = grown;
        p->meta[p->nmeta].key = k;
        p->meta[p->nmeta++].value = v;
        rc = jp_next(j, '}', "expected ',' or '}' in __metadata__");
        if (rc <= 0)
            return rc;
    }
}

static int parse_tensor(jp *j, st_tensor *t)
{
    int rc = jp_expect(j, '{', "a tensor's entry must be an object");
    int have_shape = 0, have_offsets = 0;
    if (rc)
        return rc;
    if (!jp_peek(j, '}')) {
        for (;;) {
            char *k;
            if ((rc = jp_key(j, &k)))
                return rc;
            if (strcmp(k, "dtype") == 0 && !t->dtype) {
                rc = jp_string(j, &t->dtype);
            } else if (strcmp(k, "shape") == 0 && !have_shape) {
                have_shape = 1;
                rc = jp_uint_array(j, t->shape, SHAPE_MAX, &t->ndim, "shape must be an array");
            } else if (strcmp(k, "data_offsets") == 0 && !have_offsets) {
                uint64_t v[2] = {0, 0};
                int count;
                have_offsets = 1;
                rc = jp_uint_array(j, v, 2, &count, "data_offsets must be an array");
                if (rc == VIT_OK && count != 2)
                    rc = jp_err(j, "data_offsets must hold two integers");
                t->begin = v[0];
                t->end = v[1];
            } else {
                rc = vit_fail(VIT_EFORMAT, "%s: tensor '%s': %s key '%s'", j->path, t->name,
                              strcmp(k, "dtype") && strcmp(k, "shape") &&
                                      strcmp(k, "data_offsets")
                                  ? "unknown"
                                  : "repeated",
                              k);
            }
            free(k);
            if (rc)
                return rc;
            rc = jp_next(j, '}', "expected ',' or '}' in a tensor's entry");
            if (rc < 0)
                return rc;
            if (rc == 0)
                break;
        }
    }
    if (!t->dtype || !have_shape || !have_offsets)
        return vit_fail(VIT_EFORMAT, "%s: tensor '%s' has no %s", j->path, t->name,
                        !t->dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return VIT_OK;
}

static int parse_header(jp *j, parsed *p)
{
    int rc = jp_expect(j, '{', "the header must be a JSON object");
    if (rc)
        return rc;
    if (!jp_peek(j, '}')) {
        for (;;) {
            char *name;
            if ((rc = jp_key(j, &name)))
                return rc;
            if (strcmp(name, "__metadata__") == 0) {
                free(name);
                if (p->has_meta)
                    return vit_fail(VIT_EFORMAT, "%s: __metadata__ appears twice", j->path);
                p->has_meta = 1;
                rc = parse_metadata(j, p);
            } else {
                for (int i = 0; i < p->nt; i++)
                    if (strcmp(p->t[i].name, name) == 0) {
                        rc = vit_fail(VIT_EFORMAT, "%s: tensor '%s' appears twice", j->path, name);
                        free(name);
                        return rc;
                    }
                if (p->nt == p->cap_t) {
                    int cap = p->cap_t ? 2 * p->cap_t : 64;
                    st_tensor *grown = realloc(p->t, (size_t)cap * sizeof *grown);
                    if (!grown) {
                        free(name);
                        return vit_fail(VIT_ENOMEM, "%s: out of memory", j->path);
                    }
                    p->t = grown;
                    p->cap_t = cap;
                }
                st_tensor *t = &p->t[p->nt++];
                memset(t, 0, sizeof *t);
                t->name = name;
                rc = parse_tensor(j, t);
            }
            if (rc)
                return rc;
            rc = jp_next(j, '}', "expected ',' or '}' after an entry");
            if (rc < 0)
                return rc;
            if (rc == 0)
                break;
        }
    }
    jp_ws(j);
    if (j->i != j->n)
        return jp_err(j, "bytes after the header's closing '}'");
    return VIT_OK;
}

/* ---- the config from the metadata ----------------------------------------- */

static const char *meta_get(const parsed *p, const char *key)
{
    for (int i = 0; i < p->nmeta; i++)
        if (strcmp(p->meta[i].key, key) == 0)
            return p->meta[i].value;
    return NULL;
}

/* A key of the config (shared, the selected architecture's, or the
 * recipe's). */
static int is_config_key(const vit_config *cfg, const char *key)
{
    vit_train_config tc;
    vit_train_config_default(&tc);
    return strcmp(key, "arch") != 0
           && (vit_config_given(cfg, key) >= 0 || vit_train_config_given(&tc, key) >= 0);
}

static int meta_config(const char *path, const parsed *p, vit_config *cfg, vit_train_config *tc)
{
    static const char *const required[] = {"image_height", "image_width", "channels", "classes",
                                           "dim", "depth", "heads", "mlp", "patch"};
    /* Another architecture than the ViT names itself; its keys then have
     * their defaults where the file lacks them. */
    const char *arch = meta_get(p, "arch");
    const vit_arch *a = arch ? vit_arch_find(arch) : vit_arch_vit();
    if (!a)
        return vit_fail(VIT_EFORMAT, "%s: __metadata__ arch = '%s': no such architecture "
                        "(registered ones: vit_arch_register)", path, arch);
    int vit = a == vit_arch_vit();
    char missing[256] = "";
    size_t len = 0;
    for (size_t i = 0; i < (vit ? sizeof required / sizeof required[0] : 4); i++)
        if (!meta_get(p, required[i]))
            len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%s", len ? ", " : "",
                                    required[i]);
    const char *pool = meta_get(p, "pool"), *gpool = meta_get(p, "global_pool");
    if (vit && !pool && !gpool)
        snprintf(missing + len, sizeof missing - len, "%spool (or global_pool)", len ? ", " : "");
    if (missing[0])
        return vit_fail(VIT_EFORMAT, "%s: %s lacks the model config key%s %s", path,
                        p->has_meta ? "__metadata__" : "the header has no __metadata__; it",
                        strchr(missing, ',') ? "s" : "", missing);

    /* The recipe the file names (provenance), into *tc. */
    vit_config_legacy_default(cfg);
    vit_train_config_legacy_default(tc);
    if (!vit && vit_config_set_arch(cfg, a) != VIT_OK)
        return VIT_EFORMAT;
    /* Config keys first (AdamW's under their old bare names too), then the
     * adamw_ ones, which win. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < p->nmeta; i++) {
            const char *k = p->meta[i].key, *v = p->meta[i].value;
            if (pass == 1) {
                if (strncmp(k, ADAMW_PREFIX, strlen(ADAMW_PREFIX)) != 0 ||
                    !is_adamw_key(k + strlen(ADAMW_PREFIX)))
                    continue;
                k += strlen(ADAMW_PREFIX);
            } else if (!is_config_key(cfg, k)) {
                continue;
            }
            if (vit_config_set_any(cfg, tc, k, v) != VIT_OK) {
                char why[300];
                snprintf(why, sizeof why, "%s", vit_last_error());
                return vit_fail(VIT_EFORMAT, "%s: __metadata__ %s = '%s': %s", path,
                                p->meta[i].key, v, why);
            }
        }
    if (gpool) {
        int gp = strcmp(gpool, "token") == 0 ? VIT_POOL_CLS
                 : strcmp(gpool, "avg") == 0 ? VIT_POOL_MEAN
                                             : -1;
        if (gp < 0)
            return vit_fail(VIT_EFORMAT, "%s: __metadata__ global_pool = '%s': only 'token' and "
                            "'avg' are supported", path, gpool);
        if (pool && gp != cfg->pool)
            return vit_fail(VIT_EFORMAT, "%s: __metadata__ global_pool = '%s' contradicts pool = "
                            "'%s'", path, gpool, pool);
        cfg->pool = gp;
    }
    const char *eps = meta_get(p, "layer_norm_eps");
    if (eps) {
        char *end;
        errno = 0;
        double e = strtod(eps, &end);
        if (end == eps || *end || errno || !(e >= 1e-12 && e <= 1))
            return vit_fail(VIT_EFORMAT, "%s: __metadata__ layer_norm_eps = '%s': expected a "
                            "number in [1e-12, 1]", path, eps);
        /* timm's name for ours (ln_eps); both given, they must agree */
        if (meta_get(p, "ln_eps") && e != cfg->ln_eps)
            return vit_fail(VIT_EFORMAT, "%s: __metadata__ layer_norm_eps = '%s' contradicts "
                            "ln_eps = '%s'", path, eps, meta_get(p, "ln_eps"));
        if (!vit && e != VIT_LAYERNORM_EPS)
            return vit_fail(VIT_EFORMAT, "%s: __metadata__ layer_norm_eps = '%s': the %s "
                            "architecture's layer norms use 1e-05 only", path, eps, a->name);
        cfg->ln_eps = e;
    }
    const char *act = meta_get(p, "activation");
    if (act && strcmp(act, "gelu_exact") != 0)
        return vit_fail(VIT_EFORMAT, "%s: __metadata__ activation = '%s': this library computes "
                        "gelu_exact (erf) only", path, act);
    if (vit_config_check(cfg) != VIT_OK) {
        char why[300];
        snprintf(why, sizeof why, "%s", vit_last_error());
        return vit_fail(VIT_EFORMAT, "%s: the config in __metadata__ does not describe a model: %s",
                        path, why);
    }
    return VIT_OK;
}

/* ---- import --------------------------------------------------------------- */

static int read_all(const char *path, unsigned char **buf, size_t *size)
{
    *buf = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return vit_fail(VIT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return vit_fail(VIT_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX / 2) {
        fclose(f);
        return vit_fail(VIT_ENOMEM, "%s: too large to read", path);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *b = malloc(n ? n : 1);
    if (!b) {
        fclose(f);
        return vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    }
    size_t got = fread(b, 1, n, f);
    int err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(b);
        return vit_fail(VIT_EIO, "%s: read failed after %zu of %zu bytes", path, got, n);
    }
    *buf = b;
    *size = n;
    return VIT_OK;
}

static st_tensor *find_file_tensor(parsed *p, const char *name)
{
    for (int i = 0; i < p->nt; i++)
        if (strcmp(p->t[i].name, name) == 0)
            return &p->t[i];
    return NULL;
}

static int by_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The tensors cover the data exactly: no overlap, no hole, nothing after. */
static int check_layout(const char *path, parsed *p, uint64_t data_size)
{
    if (p->nt == 0)
        return data_size ? vit_fail(VIT_EFORMAT, "%s: %llu data bytes but no tensors", path,
                                    (unsigned long long)data_size) : VIT_OK;
    st_tensor **order = malloc((size_t)p->nt * sizeof *order);
    if (!order)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < p->nt; i++)
        order[i] = &p->t[i];
    qsort(order, (size_t)p->nt, sizeof *order, by_begin);
    uint64_t at = 0;
    int rc = VIT_OK;
    for (int i = 0; i < p->nt && rc == VIT_OK; i++) {
        const st_tensor *t = order[i];
        if (t->end < t->begin || t->end > data_size)
            rc = vit_fail(VIT_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] lie outside "
                          "the %llu data bytes", path, t->name, (unsigned long long)t->begin,
                          (unsigned long long)t->end, (unsigned long long)data_size);
        else if (t->begin != at)
            rc = vit_fail(VIT_EFORMAT, "%s: tensor '%s' starts at data byte %llu, expected %llu "
                          "(the tensors must cover the data without gaps or overlaps)", path,
                          t->name, (unsigned long long)t->begin, (unsigned long long)at);
        at = t->end;
    }
    if (rc == VIT_OK && at != data_size)
        rc = vit_fail(VIT_EFORMAT, "%s: the tensors end at data byte %llu, the file has %llu "
                      "data bytes", path, (unsigned long long)at, (unsigned long long)data_size);
    free(order);
    return rc;
}

/* Copies file tensor o (raw little-endian float32 at src) into m. */
static int take(const char *path, vit_model *m, const plan_tensor *o, const unsigned char *src)
{
    const vit_model_tensor *t = find_ours(m, o->src);
    vit_real *d = vit_model_params(m) + t->offset;
    for (size_t j = 0; j < t->size; j++) {
        size_t at = file_index(o, t, 0, j);
        float v = get_f32(src + 4 * at);
        if (!isfinite(v))
            return vit_fail(VIT_ENUM, "%s: tensor '%s' value %zu is not finite", path, o->name,
                            at);
        d[j] = (vit_real)v;
    }
    return VIT_OK;
}

/* ---- the class names from the metadata ------------------------------------ */

void vit_safetensors_class_names_free(char **names, int n)
{
    if (!names)
        return;
    for (int k = 0; k < n; k++)
        free(names[k]);
    free(names);
}

/* One name of the array, checked as a checkpoint will want it (vit_ckpt_write:
 * not empty, shorter than VIT_CKPT_CLASS_NAME_MAX) and not a repeat. */
static int check_class_name(const char *path, char **names, int k)
{
    size_t len = strlen(names[k]);
    if (len == 0)
        return vit_fail(VIT_EFORMAT, "%s: __metadata__ class_names: name %d is empty", path, k);
    if (len >= VIT_CKPT_CLASS_NAME_MAX)
        return vit_fail(VIT_EFORMAT, "%s: __metadata__ class_names: name %d is %zu bytes long, "
                        "at most %d", path, k, len, VIT_CKPT_CLASS_NAME_MAX - 1);
    for (int i = 0; i < k; i++)
        if (strcmp(names[i], names[k]) == 0)
            return vit_fail(VIT_EFORMAT, "%s: __metadata__ class_names: '%s' names classes %d "
                            "and %d", path, names[k], i, k);
    return VIT_OK;
}

/* The metadata's "class_names" - as the export writes it, a JSON array of
 * strings inside the string value - as `classes` malloc'd strings in
 * *names; *names stays NULL when the key is absent. */
static int meta_class_names(const char *path, const parsed *p, int classes, char ***names)
{
    *names = NULL;
    const char *v = meta_get(p, "class_names");
    if (!v)
        return VIT_OK;
    char **out = calloc((size_t)classes, sizeof *out);
    if (!out)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    jp j = {path, (const unsigned char *)v, strlen(v), 0};
    int n = 0, rc = jp_expect(&j, '[', "");
    if (rc == VIT_OK && !jp_peek(&j, ']')) {
        for (;;) {
            char *name;
            if ((rc = jp_string(&j, &name)) != VIT_OK)
                break;
            if (n == classes) { /* one too many: the count is the error */
                free(name);
                n++;
                break;
            }
            out[n++] = name;
            if ((rc = check_class_name(path, out, n - 1)) != VIT_OK)
                goto fail;
            if ((rc = jp_next(&j, ']', "")) <= 0)
                break;
        }
    }
    if (rc == VIT_OK && n <= classes) {
        jp_ws(&j);
        rc = j.i == j.n ? VIT_OK : VIT_EFORMAT;
    }
    if (rc == VIT_ENOMEM)
        goto fail;
    if (rc != VIT_OK)
        rc = vit_fail(VIT_EFORMAT, "%s: __metadata__ class_names = '%.80s%s': not a JSON array "
                      "of strings", path, v, strlen(v) > 80 ? "..." : "");
    else if (n != classes)
        rc = vit_fail(VIT_EFORMAT, "%s: __metadata__ class_names holds %s%d names, the model has "
                      "%d classes", path, n > classes ? "more than " : "",
                      n > classes ? classes : n, classes);
    if (rc == VIT_OK) {
        *names = out;
        return VIT_OK;
    }
fail:
    vit_safetensors_class_names_free(out, classes);
    return rc;
}

/* A mismatch list: one line per tensor, after the file's name. */
typedef struct mismatch {
    char msg[512];
    size_t len;
    int n;
} mismatch;

static void mismatch_add(mismatch *mm, const char *fmt, ...)
{
    va_list ap;
    if (mm->len + 4 < sizeof mm->msg) {
        mm->len += (size_t)snprintf(mm->msg + mm->len, sizeof mm->msg - mm->len, "%s",
                                    mm->n ? "\n  " : "");
        va_start(ap, fmt);
        if (mm->len < sizeof mm->msg)
            mm->len += (size_t)vsnprintf(mm->msg + mm->len, sizeof mm->msg - mm->len, fmt, ap);
        va_end(ap);
    }
    mm->n++;
}

static void shape_text(char *dst, size_t cap, int ndim, const uint64_t *u, const int *s)
{
    size_t l = 0;
    dst[0] = 0;
    for (int k = 0; k < ndim && l < cap; k++)
        l += (size_t)snprintf(dst + l, cap - l, "%s%llu", k ? ", " : "",
                              u ? (unsigned long long)u[k] : (unsigned long long)s[k]);
}

/* The model cfg describes, its every tensor taken from p's (data at data):
 * each name, dtype, shape and span checked first, every mismatch a line of
 * one VIT_EFORMAT message; tensors named in skip[0 .. nskip-1] may be left
 * unused (the caller dealt with them). */
static int fill(const char *path, parsed *p, const unsigned char *data, uint64_t data_size,
                const vit_config *cfg, const char *const *skip, int nskip, vit_model **model)
{
    vit_model *m = NULL;
    plan_tensor *o = NULL;
    int rc = VIT_OK;
    mismatch mm = {.len = 0};
    *model = NULL;
    /* The file is untrusted: the model it describes must fit in its data
     * before anything that size is allocated. */
    size_t want = vit_config_param_count(cfg);
    if (want == 0 || want > data_size / 4)
        return vit_fail(VIT_EFORMAT, "%s: the config describes %zu parameters, the file holds "
                        "%llu values", path, want, (unsigned long long)(data_size / 4));
    int n = 0;
    if ((rc = make_plan(cfg, &o, &n)) != VIT_OK) {
        char why[300];
        snprintf(why, sizeof why, "%s", vit_last_error());
        return vit_fail(rc, "%s: %s", path, why);
    }
    for (int i = 0; i < p->nt; i++)
        for (int k = 0; k < nskip; k++)
            if (strcmp(p->t[i].name, skip[k]) == 0)
                p->t[i].used = 1;
    /* Every name, dtype and shape before the model is made. */
    for (int i = 0; i < n; i++) {
        st_tensor *t = find_file_tensor(p, o[i].name);
        if (!t) {
            mismatch_add(&mm, "tensor '%s' is missing", o[i].name);
            continue;
        }
        t->used = 1;
        if (strcmp(t->dtype, "F32") != 0) {
            rc = vit_fail(VIT_EFORMAT, "%s: tensor '%s' has dtype %s, only F32 is read", path,
                          o[i].name, t->dtype);
            goto done;
        }
        int same = t->ndim == o[i].ndim;
        for (int k = 0; same && k < t->ndim; k++)
            same = t->shape[k] == (uint64_t)o[i].shape[k];
        if (!same) {
            char got[160], need[80];
            shape_text(got, sizeof got, t->ndim, t->shape, NULL);
            shape_text(need, sizeof need, o[i].ndim, NULL, o[i].shape);
            mismatch_add(&mm, "tensor '%s' has shape [%s], the config needs [%s]", o[i].name,
                         got, need);
            continue;
        }
        if (t->end - t->begin != 4 * (uint64_t)o[i].count) {
            rc = vit_fail(VIT_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] span %llu "
                          "bytes, its shape needs %zu", path, o[i].name,
                          (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)(t->end - t->begin), 4 * o[i].count);
            goto done;
        }
    }
    for (int i = 0; i < p->nt; i++)
        if (!p->t[i].used)
            mismatch_add(&mm, "unexpected tensor '%s' (not a parameter of the model the config "
                         "describes)", p->t[i].name);
    if (mm.n) {
        rc = vit_fail(VIT_EFORMAT, "%s: %s", path, mm.msg);
        goto done;
    }
    if (!(m = vit_model_new(cfg))) {
        char why[300];
        snprintf(why, sizeof why, "%s", vit_last_error());
        rc = vit_fail(VIT_ENOMEM, "%s: cannot make the model: %s", path, why);
        goto done;
    }
    for (int i = 0; i < n && rc == VIT_OK; i++) {
        if ((rc = check_source(m, &o[i], path)) == VIT_OK)
            rc = take(path, m, &o[i], data + find_file_tensor(p, o[i].name)->begin);
    }
done:
    free(o);
    if (rc != VIT_OK)
        vit_model_free(m);
    else
        *model = m;
    return rc;
}

/* The header of the file in buf[size] parsed into *p, its layout checked;
 * *data and *data_size: where the tensors' bytes are. */
static int parse_file(const char *path, const unsigned char *buf, size_t size, parsed *p,
                      const unsigned char **data, uint64_t *data_size)
{
    memset(p, 0, sizeof *p);
    if (size < 8)
        return vit_fail(VIT_EFORMAT, "%s: %zu bytes, too short for a safetensors file (the "
                        "8-byte header length)", path, size);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--)
        hlen = hlen << 8 | buf[k];
    if (hlen > HEADER_MAX || hlen > size - 8)
        return vit_fail(VIT_EFORMAT, "%s: header length %llu runs past the end of the file (%zu "
                        "bytes)%s", path, (unsigned long long)hlen, size,
                        hlen > HEADER_MAX ? " or the format's 100 MB limit" : "");
    jp j = {path, buf + 8, (size_t)hlen, 0};
    *data_size = size - 8 - hlen;
    *data = buf + 8 + hlen;
    int rc = parse_header(&j, p);
    if (rc == VIT_OK)
        rc = check_layout(path, p, *data_size);
    return rc;
}

static int load(const char *path, const unsigned char *buf, size_t size, vit_model **model,
                char ***names, vit_train_config *tc)
{
    parsed p;
    const unsigned char *data;
    uint64_t data_size;
    vit_config cfg;
    int rc = parse_file(path, buf, size, &p, &data, &data_size);
    if (rc == VIT_OK)
        rc = meta_config(path, &p, &cfg, tc);
    if (rc == VIT_OK && names)
        rc = meta_class_names(path, &p, cfg.classes, names);
    if (rc == VIT_OK)
        rc = fill(path, &p, data, data_size, &cfg, NULL, 0, model);
    parsed_free(&p);
    if (rc != VIT_OK && names) {
        vit_safetensors_class_names_free(*names, cfg.classes);
        *names = NULL;
    }
    return rc;
}

/* vit_safetensors_load_named, and the recipe the metadata names into *tc
 * (its defaults for the keys it lacks). */
static int load_file(const char *path, vit_model **model, char ***class_names,
                     vit_train_config *tc)
{
    if (model)
        *model = NULL;
    if (class_names)
        *class_names = NULL;
    if (!path || !model)
        return vit_fail(VIT_EINVAL, "vit_safetensors_load: %s is NULL", !path ? "path" : "model");
    unsigned char *buf;
    size_t size;
    int rc = read_all(path, &buf, &size);
    if (rc == VIT_OK)
        rc = load(path, buf, size, model, class_names, tc);
    free(buf);
    return rc;
}

int vit_safetensors_load_named(const char *path, vit_model **model, char ***class_names)
{
    vit_train_config tc;
    return load_file(path, model, class_names, &tc);
}

int vit_safetensors_load(const char *path, vit_model **model)
{
    return vit_safetensors_load_named(path, model, NULL);
}

int vit_safetensors_import(const char *path, const char *ckpt_path, vit_model **model)
{
    if (model)
        *model = NULL;
    if (!path || !ckpt_path)
        return vit_fail(VIT_EINVAL, "vit_safetensors_import: %s is NULL",
                        !path ? "path" : "ckpt_path");
    vit_model *m;
    char **names;
    vit_train_config tc;
    int rc = load_file(path, &m, &names, &tc);
    if (rc != VIT_OK)
        return rc;
    const vit_config *c = vit_model_config(m);
    vit_adamw opt;
    memset(&opt, 0, sizeof opt);
    rc = vit_adamw_init(&opt, vit_model_param_count(m), tc.beta1, tc.beta2, tc.eps,
                        tc.weight_decay);
    if (rc == VIT_OK) {
        vit_run_state st;
        memset(&st, 0, sizeof st);
        vit_rng_seed(&st.rng, tc.seed);
        st.class_names = names; /* NULL (none in the file) writes none */
        st.nclass_names = names ? c->classes : 0;
        rc = vit_run_save(ckpt_path, m, &tc, &opt, &st);
    }
    vit_safetensors_class_names_free(names, c->classes);
    vit_adamw_free(&opt);
    if (rc != VIT_OK || !model)
        vit_model_free(m);
    else
        *model = m;
    return rc;
}

/* ---- the file for other readers (safetensors_internal.h) ------------------ */

struct vit_st_file {
    const char *path;
    unsigned char *buf;
    parsed p;
    const unsigned char *data;
    uint64_t data_size;
};

int vit_st_open(const char *path, vit_st_file **out)
{
    *out = NULL;
    vit_st_file *f = calloc(1, sizeof *f);
    if (!f)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", path);
    size_t size;
    f->path = path;
    int rc = read_all(path, &f->buf, &size);
    if (rc == VIT_OK)
        rc = parse_file(path, f->buf, size, &f->p, &f->data, &f->data_size);
    if (rc != VIT_OK) {
        vit_st_close(f);
        return rc;
    }
    *out = f;
    return VIT_OK;
}

void vit_st_close(vit_st_file *f)
{
    if (!f)
        return;
    parsed_free(&f->p);
    free(f->buf);
    free(f);
}

int vit_st_count(const vit_st_file *f) { return f->p.nt; }

const char *vit_st_name(const vit_st_file *f, int i) { return f->p.t[i].name; }

int vit_st_shape(const vit_st_file *f, const char *name, uint64_t shape[VIT_ST_SHAPE_MAX])
{
    for (int i = 0; i < f->p.nt; i++)
        if (strcmp(f->p.t[i].name, name) == 0) {
            memcpy(shape, f->p.t[i].shape, sizeof f->p.t[i].shape);
            return f->p.t[i].ndim;
        }
    return -1;
}

const char *vit_st_meta(const vit_st_file *f, const char *key) { return meta_get(&f->p, key); }

int vit_st_fill(vit_st_file *f, const vit_config *cfg, const char *const *skip, int nskip,
                vit_model **model)
{
    for (int i = 0; i < f->p.nt; i++)
        f->p.t[i].used = 0;
    return fill(f->path, &f->p, f->data, f->data_size, cfg, skip, nskip, model);
}
