/* Writing a model as timm-style safetensors, and logits as CSV; see export.h. */
#include "export.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(char *err, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *err, size_t cap, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- atomic files ------------------------------------------------------ */

/* Opens a temporary file beside path; *tmp (malloc'd) is its name. */
static FILE *atomic_open(const char *path, char **tmp, char *err, size_t cap)
{
    size_t len = strlen(path);
    *tmp = malloc(len + 8);
    if (!*tmp) {
        fail(err, cap, "%s: out of memory", path);
        return NULL;
    }
    memcpy(*tmp, path, len);
    memcpy(*tmp + len, ".XXXXXX", 8);
    int fd = mkstemp(*tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        fail(err, cap, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(*tmp);
        }
        free(*tmp);
        *tmp = NULL;
    }
    return f;
}

/* Finishes the file: everything on disk before the rename makes it visible
 * at path, so a reader never sees half a file.  On failure, removes it. */
static int atomic_commit(FILE *f, int write_failed, const char *path, char *tmp, char *err,
                         size_t cap)
{
    int rc = 0;
    if (write_failed || fflush(f) || fsync(fileno(f)) || fchmod(fileno(f), 0644))
        rc = fail(err, cap, "%s: write failed: %s", path, strerror(errno));
    if (fclose(f) && rc == 0)
        rc = fail(err, cap, "%s: write failed: %s", path, strerror(errno));
    if (rc == 0 && rename(tmp, path))
        rc = fail(err, cap, "%s: cannot rename the temporary file to it: %s", path, strerror(errno));
    if (rc)
        unlink(tmp);
    free(tmp);
    return rc;
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

/* ---- the tensor mapping ------------------------------------------------ */

enum { OP_COPY, OP_TRANSPOSE, OP_PATCH };

/* One output tensor: the concatenation of op applied to each source. */
typedef struct out_tensor {
    char name[64];
    int ndim, shape[4];
    int op, nsrc;
    char src[3][48];
    size_t count, offset; /* values, and offset in values into the data */
} out_tensor;

static const vit_model_tensor *find(vit_model *m, const char *name)
{
    for (int i = 0; i < vit_model_tensor_count(m); i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i);
        if (strcmp(t->name, name) == 0)
            return t;
    }
    return NULL;
}

/* Appends a tensor to the plan.  Sources are ours, NULL-terminated. */
static void plan(out_tensor *o, int *n, const char *name, int op, int ndim, int d0, int d1,
                 int d2, int d3, const char *s0, const char *s1, const char *s2)
{
    out_tensor *t = &o[(*n)++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->op = op;
    t->ndim = ndim;
    int d[4] = {d0, d1, d2, d3};
    t->count = 1;
    for (int k = 0; k < ndim; k++) {
        t->shape[k] = d[k];
        t->count *= (size_t)d[k];
    }
    const char *s[3] = {s0, s1, s2};
    for (int k = 0; k < 3 && s[k]; k++)
        snprintf(t->src[t->nsrc++], sizeof t->src[0], "%s", s[k]);
}

/* The whole plan in timm's order; returns the number of tensors. */
static int make_plan(const vit_config *c, out_tensor *o)
{
    int D = c->dim, M = c->mlp, K = c->classes, C = c->channels, P = c->patch;
    int T = (c->image_height / P) * (c->image_width / P) + 1, n = 0;
    char name[64], a[48], b[48], e[48];
    plan(o, &n, "cls_token", OP_COPY, 3, 1, 1, D, 0, "cls", NULL, NULL);
    plan(o, &n, "pos_embed", OP_COPY, 3, 1, T, D, 0, "pos", NULL, NULL);
    plan(o, &n, "patch_embed.proj.weight", OP_PATCH, 4, D, C, P, P, "patch.w", NULL, NULL);
    plan(o, &n, "patch_embed.proj.bias", OP_COPY, 1, D, 0, 0, 0, "patch.b", NULL, NULL);
    for (int l = 0; l < c->depth; l++) {
#define NM(dst, ...) snprintf(dst, sizeof dst, __VA_ARGS__)
        NM(name, "blocks.%d.norm1.weight", l), NM(a, "blocks.%d.ln1.g", l);
        plan(o, &n, name, OP_COPY, 1, D, 0, 0, 0, a, NULL, NULL);
        NM(name, "blocks.%d.norm1.bias", l), NM(a, "blocks.%d.ln1.b", l);
        plan(o, &n, name, OP_COPY, 1, D, 0, 0, 0, a, NULL, NULL);
        NM(name, "blocks.%d.attn.qkv.weight", l), NM(a, "blocks.%d.attn.w_q", l);
        NM(b, "blocks.%d.attn.w_k", l), NM(e, "blocks.%d.attn.w_v", l);
        plan(o, &n, name, OP_TRANSPOSE, 2, 3 * D, D, 0, 0, a, b, e);
        NM(name, "blocks.%d.attn.qkv.bias", l), NM(a, "blocks.%d.attn.b_q", l);
        NM(b, "blocks.%d.attn.b_k", l), NM(e, "blocks.%d.attn.b_v", l);
        plan(o, &n, name, OP_COPY, 1, 3 * D, 0, 0, 0, a, b, e);
        NM(name, "blocks.%d.attn.proj.weight", l), NM(a, "blocks.%d.attn.w_o", l);
        plan(o, &n, name, OP_TRANSPOSE, 2, D, D, 0, 0, a, NULL, NULL);
        NM(name, "blocks.%d.attn.proj.bias", l), NM(a, "blocks.%d.attn.b_o", l);
        plan(o, &n, name, OP_COPY, 1, D, 0, 0, 0, a, NULL, NULL);
        NM(name, "blocks.%d.norm2.weight", l), NM(a, "blocks.%d.ln2.g", l);
        plan(o, &n, name, OP_COPY, 1, D, 0, 0, 0, a, NULL, NULL);
        NM(name, "blocks.%d.norm2.bias", l), NM(a, "blocks.%d.ln2.b", l);
        plan(o, &n, name, OP_COPY, 1, D, 0, 0, 0, a, NULL, NULL);
        NM(name, "blocks.%d.mlp.fc1.weight", l), NM(a, "blocks.%d.mlp.w1", l);
        plan(o, &n, name, OP_TRANSPOSE, 2, M, D, 0, 0, a, NULL, NULL);
        NM(name, "blocks.%d.mlp.fc1.bias", l), NM(a, "blocks.%d.mlp.b1", l);
        plan(o, &n, name, OP_COPY, 1, M, 0, 0, 0, a, NULL, NULL);
        NM(name, "blocks.%d.mlp.fc2.weight", l), NM(a, "blocks.%d.mlp.w2", l);
        plan(o, &n, name, OP_TRANSPOSE, 2, D, M, 0, 0, a, NULL, NULL);
        NM(name, "blocks.%d.mlp.fc2.bias", l), NM(a, "blocks.%d.mlp.b2", l);
        plan(o, &n, name, OP_COPY, 1, D, 0, 0, 0, a, NULL, NULL);
#undef NM
    }
    plan(o, &n, "norm.weight", OP_COPY, 1, D, 0, 0, 0, "ln.g", NULL, NULL);
    plan(o, &n, "norm.bias", OP_COPY, 1, D, 0, 0, 0, "ln.b", NULL, NULL);
    plan(o, &n, "head.weight", OP_TRANSPOSE, 2, K, D, 0, 0, "head.w", NULL, NULL);
    plan(o, &n, "head.bias", OP_COPY, 1, K, 0, 0, 0, "head.b", NULL, NULL);
    return n;
}

/* Writes tensor o's values as float into dst, reading our parameters. */
static int fill(vit_model *m, const out_tensor *o, float *dst, char *err, size_t cap)
{
    const vit_config *c = vit_model_config(m);
    const vit_real *params = vit_model_params(m);
    size_t done = 0;
    for (int k = 0; k < o->nsrc; k++) {
        const vit_model_tensor *t = find(m, o->src[k]);
        if (!t || done + t->size > o->count)
            return fail(err, cap, "export: model tensor '%s' for '%s' is %s", o->src[k], o->name,
                        t ? "larger than expected" : "missing");
        const vit_real *s = params + t->offset;
        float *d = dst + done;
        if (o->op == OP_COPY) {
            for (size_t i = 0; i < t->size; i++)
                d[i] = (float)s[i];
        } else if (o->op == OP_TRANSPOSE) {
            /* ours [r, q] (x W convention) -> PyTorch's [q, r] (x W^T) */
            size_t r = (size_t)t->shape[0], q = t->ndim > 1 ? (size_t)t->shape[1] : 1;
            for (size_t i = 0; i < r; i++)
                for (size_t j = 0; j < q; j++)
                    d[j * r + i] = (float)s[i * q + j];
        } else {
            /* patch.w [(py*P + px)*C + ch, D] -> Conv2d weight [D, C, P, P] */
            size_t P = (size_t)c->patch, C = (size_t)c->channels, D = (size_t)c->dim;
            for (size_t dd = 0; dd < D; dd++)
                for (size_t ch = 0; ch < C; ch++)
                    for (size_t py = 0; py < P; py++)
                        for (size_t px = 0; px < P; px++)
                            d[((dd * C + ch) * P + py) * P + px] =
                                (float)s[((py * P + px) * C + ch) * D + dd];
        }
        done += t->size;
    }
    if (done != o->count)
        return fail(err, cap, "export: '%s' needs %zu values, the model has %zu", o->name,
                    o->count, done);
    return 0;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes. */
static void header_json(sbuf *b, const vit_config *c, char *const *class_names,
                        const out_tensor *o, int n)
{
    char cfg[4096], *save = NULL;
    sb_printf(b, "{\"__metadata__\":{");
    if (vit_config_format(c, cfg, sizeof cfg) >= 0) {
        /* "key = value" lines -> "key":"value" */
        for (char *line = strtok_r(cfg, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            char *eq = strstr(line, " = ");
            if (!eq)
                continue;
            *eq = 0;
            sb_json_string(b, line);
            sb_printf(b, ":");
            sb_json_string(b, eq + 3);
            sb_printf(b, ",");
        }
    }
    sb_printf(b, "\"format\":\"pt\",\"producer\":\"vit_export %s\","
                 "\"layout\":\"timm.VisionTransformer\",\"global_pool\":\"%s\","
                 "\"layer_norm_eps\":\"1e-05\",\"activation\":\"gelu_exact\","
                 "\"input\":\"NCHW float32 in [0, 1], no normalization\"",
              vit_version(), c->pool == VIT_POOL_MEAN ? "avg" : "token");
    if (class_names) { /* a JSON array in a string: metadata values are strings */
        sbuf arr = {NULL, 0, 0, 0};
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
    sb_printf(b, "}");
    for (int i = 0; i < n; i++) {
        sb_printf(b, ",");
        sb_json_string(b, o[i].name);
        sb_printf(b, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int k = 0; k < o[i].ndim; k++)
            sb_printf(b, "%s%d", k ? "," : "", o[i].shape[k]);
        sb_printf(b, "],\"data_offsets\":[%zu,%zu]}", o[i].offset * 4, (o[i].offset + o[i].count) * 4);
    }
    sb_printf(b, "}");
    while (!b->oom && b->len % 8)
        sb_printf(b, " ");
}

int export_safetensors(vit_model *m, char *const *class_names, const char *path, size_t *bytes,
                       char *err, size_t cap)
{
    if (!m || !path)
        return fail(err, cap, "export_safetensors: %s is NULL", !m ? "model" : "path");
    const vit_config *c = vit_model_config(m);
    int nmax = 8 + 12 * c->depth, n;
    out_tensor *o = calloc((size_t)nmax, sizeof *o);
    float *data = NULL;
    sbuf hdr = {0};
    int rc = -1;
    if (!o) {
        fail(err, cap, "%s: out of memory", path);
        goto done;
    }
    n = make_plan(c, o);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        o[i].offset = total;
        total += o[i].count;
    }
    if (total != vit_model_param_count(m)) {
        fail(err, cap, "export: the plan covers %zu values, the model has %zu", total,
             vit_model_param_count(m));
        goto done;
    }
    if (!(data = malloc(total * sizeof *data))) {
        fail(err, cap, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (fill(m, &o[i], data + o[i].offset, err, cap))
            goto done;
    header_json(&hdr, c, class_names, o, n);
    if (hdr.oom) {
        fail(err, cap, "%s: out of memory", path);
        goto done;
    }
    /* Byte order is spelled out so the file is the same on any host. */
    unsigned char prefix[8];
    for (int k = 0; k < 8; k++)
        prefix[k] = (unsigned char)((uint64_t)hdr.len >> (8 * k));
    unsigned char *raw = (unsigned char *)data;
    for (size_t i = 0; i < total; i++) {
        uint32_t u;
        memcpy(&u, &data[i], 4);
        for (int k = 0; k < 4; k++)
            raw[4 * i + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    char *tmp;
    FILE *f = atomic_open(path, &tmp, err, cap);
    if (!f)
        goto done;
    int bad = fwrite(prefix, 1, 8, f) != 8 || fwrite(hdr.p, 1, hdr.len, f) != hdr.len ||
              fwrite(raw, 4, total, f) != total;
    if (atomic_commit(f, bad, path, tmp, err, cap))
        goto done;
    if (bytes)
        *bytes = 8 + hdr.len + 4 * total;
    rc = 0;
done:
    free(hdr.p);
    free(data);
    free(o);
    return rc;
}

/* ---- logits ------------------------------------------------------------ */

int export_logits_csv(vit_model *m, const vit_dataset *ds, const char *path, double *accuracy,
                      char *err, size_t cap)
{
    if (!m || !ds || !path)
        return fail(err, cap, "export_logits_csv: %s is NULL", !m ? "model" : !ds ? "data" : "path");
    const vit_config *c = vit_model_config(m);
    if (ds->height != c->image_height || ds->width != c->image_width ||
        ds->channels != c->channels || ds->count <= 0)
        return fail(err, cap, "%s: data are %d images of %dx%dx%d, the model expects %dx%dx%d",
                    path, ds->count, ds->height, ds->width, ds->channels, c->image_height,
                    c->image_width, c->channels);
    vit_tape *tape = vit_tape_new();
    if (!tape)
        return fail(err, cap, "%s: out of memory", path);
    char *tmp;
    FILE *f = atomic_open(path, &tmp, err, cap);
    if (!f) {
        vit_tape_free(tape);
        return -1;
    }
    int K = c->classes, correct = 0, bad = 0, rc = 0;
    size_t img = (size_t)ds->height * ds->width * ds->channels;
    fprintf(f, "index,label,pred");
    for (int k = 0; k < K; k++)
        fprintf(f, ",logit_%d", k);
    fprintf(f, "\n");
    for (int lo = 0; lo < ds->count && rc == 0; lo += 128) {
        int b = ds->count - lo < 128 ? ds->count - lo : 128;
        vit_tape_reset(tape);
        vit_tensor *y = vit_model_forward(m, tape, ds->images + (size_t)lo * img, b, 0);
        if (!y || vit_tape_status(tape)) {
            rc = fail(err, cap, "%s: forward failed: %s", path, vit_last_error());
            break;
        }
        for (int i = 0; i < b; i++) {
            const vit_real *z = y->data + (size_t)i * K;
            int pred = 0;
            for (int k = 1; k < K; k++)
                if (z[k] > z[pred])
                    pred = k;
            correct += pred == ds->labels[lo + i];
            fprintf(f, "%d,%d,%d", lo + i, ds->labels[lo + i], pred);
            for (int k = 0; k < K; k++)
                fprintf(f, ",%.9g", (double)z[k]);
            bad |= fprintf(f, "\n") < 0;
        }
    }
    vit_tape_free(tape);
    if (rc) {
        fclose(f);
        unlink(tmp);
        free(tmp);
        return rc;
    }
    if (atomic_commit(f, bad, path, tmp, err, cap))
        return -1;
    if (accuracy)
        *accuracy = (double)correct / ds->count;
    return 0;
}
