/* tests/test_export.c - the safetensors export and import (vit/safetensors.h)
 * and the logits CSV (vit/export.h), float32 build.
 *
 * The file is parsed here from scratch (8-byte little-endian header length,
 * a JSON header read by the small parser below, raw little-endian float32
 * data) and checked against the safetensors format and timm's names and
 * layouts, which this file spells out on its own: names, shapes, dtype,
 * contiguous offsets, the transposes (qkv.weight row i = column i of W_Q,
 * ...), the Conv2d layout of the patch embedding, and a round trip back into
 * a fresh model that must reproduce every parameter bit for bit. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_util.h"
#include "vit/vit.h"

/* The small model: non-square colour images, two blocks. */
enum { H = 4, W = 6, C = 3, P = 2, D = 8, DEPTH = 2, HEADS = 2, M = 12, K = 5,
       T = (H / P) * (W / P) + 1 };

/* A model of cfg whose parameters are distinct values, i+1 thousandths with
 * the sign flipping every `period` (so any misplaced element is noticed). */
static vit_model *model_with_values(const vit_config *cfg, int period)
{
    vit_model *m = vit_model_new(cfg);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    vit_real *p = vit_model_params(m);
    for (size_t i = 0; i < vit_model_param_count(m); i++)
        p[i] = (vit_real)((double)(i + 1) * (i % (size_t)period ? -1e-3 : 1e-3));
    return m;
}

static void small_config(vit_config *c, int pool)
{
    vit_config_default(c);
    c->image_height = H;
    c->image_width = W;
    c->channels = C;
    c->classes = K;
    c->patch = P;
    c->patch_stride = 0; /* non-overlapping: T above */
    c->patch_pad = 0;
    c->dim = D;
    c->depth = DEPTH;
    c->heads = HEADS;
    c->mlp = M;
    c->pool = pool;
}

static vit_model *small_model(int pool)
{
    vit_config cfg;
    small_config(&cfg, pool);
    return model_with_values(&cfg, 2);
}

static const vit_real *ours(vit_model *m, const char *name, int *rows, int *cols)
{
    for (int i = 0; i < vit_model_tensor_count(m); i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i);
        if (strcmp(t->name, name) == 0) {
            if (rows)
                *rows = t->shape[0];
            if (cols)
                *cols = t->ndim > 1 ? t->shape[1] : 1;
            return vit_model_params(m) + t->offset;
        }
    }
    ck_abort_msg("model has no tensor '%s'", name);
    return NULL;
}

/* ---------------------------------------------------------- the parser */

enum { MAX_T = 64, MAX_META = 64 };

typedef struct st_tensor {
    char name[64], dtype[8];
    int ndim;
    long long shape[4], begin, end;
} st_tensor;

typedef struct st_file {
    unsigned char *bytes;
    size_t size, header_len;
    const unsigned char *data; /* after the header */
    int ntensors, nmeta;
    st_tensor t[MAX_T];
    char meta_key[MAX_META][64], meta_val[MAX_META][512]; /* the notes are long */
} st_file;

typedef struct js {
    const char *s;
    size_t i, n;
} js;

static void js_ws(js *j)
{
    while (j->i < j->n && strchr(" \t\r\n", j->s[j->i]))
        j->i++;
}

static void js_expect(js *j, char c)
{
    js_ws(j);
    ck_assert_msg(j->i < j->n && j->s[j->i] == c, "JSON: expected '%c' at byte %zu", c, j->i);
    j->i++;
}

static int js_peek(js *j, char c)
{
    js_ws(j);
    return j->i < j->n && j->s[j->i] == c;
}

/* A string without escapes other than \" and \\ (all our names). */
static void js_string(js *j, char *out, size_t cap)
{
    js_expect(j, '"');
    size_t k = 0;
    while (j->i < j->n && j->s[j->i] != '"') {
        char c = j->s[j->i++];
        if (c == '\\') {
            ck_assert(j->i < j->n);
            c = j->s[j->i++];
            ck_assert_msg(c == '"' || c == '\\', "JSON: unexpected escape \\%c", c);
        }
        ck_assert_msg(k + 1 < cap, "JSON: string too long");
        out[k++] = c;
    }
    out[k] = 0;
    js_expect(j, '"');
}

static long long js_int(js *j)
{
    js_ws(j);
    long long v = 0;
    size_t start = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9')
        v = v * 10 + (j->s[j->i++] - '0');
    ck_assert_msg(j->i > start, "JSON: expected a number at byte %zu", start);
    return v;
}

static int js_int_array(js *j, long long *out, int max)
{
    int n = 0;
    js_expect(j, '[');
    if (js_peek(j, ']')) {
        j->i++;
        return 0;
    }
    for (;;) {
        ck_assert(n < max);
        out[n++] = js_int(j);
        if (js_peek(j, ']')) {
            j->i++;
            return n;
        }
        js_expect(j, ',');
    }
}

static void parse_tensor(js *j, st_tensor *t)
{
    int seen = 0;
    js_expect(j, '{');
    for (;;) {
        char key[32];
        js_string(j, key, sizeof key);
        js_expect(j, ':');
        if (strcmp(key, "dtype") == 0) {
            js_string(j, t->dtype, sizeof t->dtype);
            seen |= 1;
        } else if (strcmp(key, "shape") == 0) {
            t->ndim = js_int_array(j, t->shape, 4);
            seen |= 2;
        } else if (strcmp(key, "data_offsets") == 0) {
            long long o[2];
            ck_assert_int_eq(js_int_array(j, o, 2), 2);
            t->begin = o[0];
            t->end = o[1];
            seen |= 4;
        } else {
            ck_abort_msg("tensor %s: unexpected key '%s'", t->name, key);
        }
        if (!js_peek(j, ','))
            break;
        j->i++;
    }
    js_expect(j, '}');
    ck_assert_msg(seen == 7, "tensor %s lacks dtype, shape or data_offsets", t->name);
}

static void read_file(const char *path, st_file *f)
{
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    fseek(fp, 0, SEEK_END);
    f->size = (size_t)ftell(fp);
    rewind(fp);
    f->bytes = malloc(f->size);
    ck_assert_ptr_nonnull(f->bytes);
    ck_assert_uint_eq(fread(f->bytes, 1, f->size, fp), f->size);
    fclose(fp);

    ck_assert_uint_ge(f->size, 8);
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--)
        n = n << 8 | f->bytes[k];
    ck_assert_uint_le(n, f->size - 8);
    ck_assert_uint_eq(n % 8, 0); /* padded so the data start 8-aligned */
    f->header_len = (size_t)n;
    f->data = f->bytes + 8 + n;

    js j = {(const char *)f->bytes + 8, 0, (size_t)n};
    js_expect(&j, '{');
    for (;;) {
        char key[64];
        js_string(&j, key, sizeof key);
        js_expect(&j, ':');
        if (strcmp(key, "__metadata__") == 0) {
            js_expect(&j, '{');
            while (!js_peek(&j, '}')) {
                ck_assert(f->nmeta < MAX_META);
                js_string(&j, f->meta_key[f->nmeta], sizeof f->meta_key[0]);
                js_expect(&j, ':');
                js_string(&j, f->meta_val[f->nmeta], sizeof f->meta_val[0]); /* strings only */
                f->nmeta++;
                if (js_peek(&j, ','))
                    j.i++;
            }
            j.i++;
        } else {
            ck_assert(f->ntensors < MAX_T);
            st_tensor *t = &f->t[f->ntensors++];
            snprintf(t->name, sizeof t->name, "%s", key);
            parse_tensor(&j, t);
        }
        if (!js_peek(&j, ','))
            break;
        j.i++;
    }
    js_expect(&j, '}');
    /* Only space padding may follow the JSON object. */
    for (; j.i < j.n; j.i++)
        ck_assert_msg(j.s[j.i] == ' ', "header byte %zu after the JSON is 0x%02x", j.i,
                      (unsigned char)j.s[j.i]);
}

static const st_tensor *tensor(const st_file *f, const char *name)
{
    for (int i = 0; i < f->ntensors; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    ck_abort_msg("no tensor '%s' in the file", name);
    return NULL;
}

static const char *meta(const st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_key[i], key) == 0)
            return f->meta_val[i];
    return NULL;
}

/* Element i of a tensor, decoded as little-endian float32. */
static float value(const st_file *f, const st_tensor *t, size_t i)
{
    const unsigned char *b = f->data + t->begin + 4 * i;
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* File tensor t, a Conv2d weight [out, in, k, k], holds our `name`
 * [k*k*in, out] in PyTorch's order: element (o, ch, ky, kx) is ours at row
 * (ky k + kx) in + ch (the im2col order of a patch or stem window), column o. */
static void assert_conv_weight(const st_file *f, const st_tensor *t, vit_model *m,
                               const char *name, int out, int in, int k)
{
    const vit_real *w = ours(m, name, NULL, NULL);
    ck_assert_int_eq(t->ndim, 4); /* Conv2d's [out, in, k, k] */
    ck_assert(t->shape[0] == out && t->shape[1] == in && t->shape[2] == k && t->shape[3] == k);
    for (int o = 0; o < out; o++)
        for (int ch = 0; ch < in; ch++)
            for (int kk = 0; kk < k * k; kk++) /* kk = ky k + kx */
                ck_assert_msg(value(f, t, ((size_t)o * in + ch) * (size_t)(k * k) + (size_t)kk)
                                  == (float)w[((size_t)kk * in + ch) * (size_t)out + (size_t)o],
                              "%s [%d, %d, %d]", name, o, ch, kk);
}

static void free_file(st_file *f) { free(f->bytes); }

/* m saved to `file` in the test folder, then read back into *f. */
static void save_and_read(vit_model *m, const char *file, st_file *f)
{
    ck_assert_msg(vit_safetensors_save(m, NULL, NULL, fu_path(file), NULL) == VIT_OK, "%s: %s", file,
                  vit_last_error());
    read_file(fu_path(file), f);
}

/* ------------------------------------------------------- expected layout */

typedef struct want {
    char name[64];
    int ndim;
    long long shape[4];
} want;

static int expected(want *w)
{
    int n = 0;
#define W(nm, nd, a, b, c, d) \
    (snprintf(w[n].name, sizeof w[n].name, "%s", nm), w[n].ndim = nd, w[n].shape[0] = a, \
     w[n].shape[1] = b, w[n].shape[2] = c, w[n].shape[3] = d, n++)
    W("patch_embed.proj.weight", 4, D, C, P, P);
    W("patch_embed.proj.bias", 1, D, 0, 0, 0);
    W("cls_token", 3, 1, 1, D, 0);
    W("pos_embed", 3, 1, T, D, 0);
    for (int l = 0; l < DEPTH; l++) {
        static const struct { const char *suffix; int nd, a, b; } blk[] = {
            {"norm1.weight", 1, D, 0}, {"norm1.bias", 1, D, 0},
            {"attn.qkv.weight", 2, 3 * D, D}, {"attn.qkv.bias", 1, 3 * D, 0},
            {"attn.proj.weight", 2, D, D}, {"attn.proj.bias", 1, D, 0},
            {"norm2.weight", 1, D, 0}, {"norm2.bias", 1, D, 0},
            {"mlp.fc1.weight", 2, M, D}, {"mlp.fc1.bias", 1, M, 0},
            {"mlp.fc2.weight", 2, D, M}, {"mlp.fc2.bias", 1, D, 0},
        };
        for (size_t k = 0; k < sizeof blk / sizeof blk[0]; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "blocks.%d.%s", l, blk[k].suffix);
            W(nm, blk[k].nd, blk[k].a, blk[k].b, 0, 0);
        }
    }
    W("norm.weight", 1, D, 0, 0, 0);
    W("norm.bias", 1, D, 0, 0, 0);
    W("head.weight", 2, K, D, 0, 0);
    W("head.bias", 1, K, 0, 0, 0);
#undef W
    return n;
}

static st_file g_file; /* big: keep it off the stack */

static void export_small(vit_model *m, const char *rel)
{
    size_t bytes = 0;
    vit_train_config tc; /* the default recipe, into the metadata */
    vit_train_config_default(&tc);
    ck_assert_msg(vit_safetensors_save(m, &tc, NULL, fu_path(rel), &bytes) == VIT_OK, "%s",
                  vit_last_error());
    read_file(fu_path(rel), &g_file);
    ck_assert_uint_eq(bytes, g_file.size);
}

/* ----------------------------------------------------------------- tests */

START_TEST(names_shapes_offsets)
{
    vit_model *m = small_model(VIT_POOL_CLS);
    export_small(m, "m.safetensors");
    st_file *f = &g_file;
    want w[64];
    int n = expected(w);
    ck_assert_int_eq(f->ntensors, n);
    long long total = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = tensor(f, w[i].name);
        ck_assert_str_eq(t->dtype, "F32");
        ck_assert_msg(t->ndim == w[i].ndim, "%s: %d dims", t->name, t->ndim);
        long long count = 1;
        for (int k = 0; k < t->ndim; k++) {
            ck_assert_msg(t->shape[k] == w[i].shape[k], "%s dim %d: %lld, want %lld", t->name, k,
                          t->shape[k], w[i].shape[k]);
            count *= t->shape[k];
        }
        ck_assert_msg(t->end - t->begin == 4 * count, "%s: %lld bytes for %lld values", t->name,
                      t->end - t->begin, count);
        total += count;
    }
    ck_assert_int_eq(total, (long long)vit_model_param_count(m));
    /* Offsets tile the data exactly: sorted by begin, each starts where the
     * previous ended, from 0 to the end of the file. */
    long long at = 0;
    for (int used = 0; used < n; used++) {
        const st_tensor *next = NULL;
        for (int i = 0; i < n; i++)
            if (f->t[i].begin == at && f->t[i].end > at)
                next = &f->t[i];
        ck_assert_msg(next != NULL, "no tensor starts at byte %lld of the data", at);
        at = next->end;
    }
    ck_assert_int_eq(at, (long long)(f->size - 8 - f->header_len));
    free_file(f);
    vit_model_free(m);
}
END_TEST

START_TEST(metadata)
{
    vit_model *m = small_model(VIT_POOL_CLS);
    export_small(m, "meta.safetensors");
    static const char *kv[][2] = {
        {"dim", "8"}, {"depth", "2"}, {"heads", "2"}, {"mlp", "12"}, {"patch", "2"},
        {"image_height", "4"}, {"image_width", "6"}, {"channels", "3"}, {"classes", "5"},
        {"pool", "cls"}, {"global_pool", "token"}, {"layer_norm_eps", "1e-05"},
        {"layout", "timm.VisionTransformer"}, {"format", "pt"},
        /* AdamW's hyper-parameters, named so that no loader takes them for
         * the layer norm's (the defaults: vit_config_default) */
        {"adamw_eps", "1e-08"}, {"adamw_beta1", "0.9"},
        {"adamw_beta2", "0.999"}, {"adamw_weight_decay", "0.05"},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        const char *v = meta(&g_file, kv[i][0]);
        ck_assert_msg(v != NULL, "metadata has no '%s'", kv[i][0]);
        ck_assert_msg(strcmp(v, kv[i][1]) == 0, "metadata %s = '%s', want '%s'", kv[i][0], v,
                      kv[i][1]);
    }
    static const char *gone[] = {"eps", "beta1", "beta2", "weight_decay"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        ck_assert_msg(meta(&g_file, gone[i]) == NULL, "metadata still has the bare key '%s'",
                      gone[i]);
    free_file(&g_file);
    vit_model_free(m);
    m = small_model(VIT_POOL_MEAN);
    export_small(m, "mean.safetensors");
    ck_assert_str_eq(meta(&g_file, "global_pool"), "avg");
    ck_assert_str_eq(meta(&g_file, "pool"), "mean");
    free_file(&g_file);
    vit_model_free(m);
}
END_TEST

/* The metadata's "input" says what to do to an image's pixels before the
 * weights, for each of the model's input normalisations: none; image_norm
 * (each image's channels by their own mean and variance, the floor
 * VIT_IMAGE_NORM_EPS); data_norm with the model's own figures, which read
 * back from the text bitwise.  The tensors are the same in all three. */
START_TEST(input_metadata)
{
    static const double mean[C] = {0.1, -1.0 / 3, 0.7}, std[C] = {0.25, 1e-6, 3};
    static const char *const want[3] = {
        "NCHW float32 in [0, 1], no normalization",
        "NCHW float32 in [0, 1], then each image standardised per channel: (x - m) / sqrt(v + "
        "0.0001), m and v the mean and (biased) variance of that channel over the image's 4x6 "
        "pixels (image_norm = 1)",
        "NCHW float32 in [0, 1], then (x - mean[c]) / std[c] for each channel c, mean = [0.1, "
        "-0.3333333333333333, 0.7], std = [0.25, 1e-06, 3] (data_norm = 1: the training set's "
        "statistics, data_mean and data_std; torchvision's Normalize(mean, std))"};
    static st_file plain;
    for (int k = 0; k < 3; k++) {
        vit_config cfg;
        small_config(&cfg, VIT_POOL_CLS);
        cfg.image_norm = k == 1;
        cfg.data_norm = k == 2;
        if (k == 2) {
            cfg.data_mean.n = cfg.data_std.n = C;
            memcpy(cfg.data_mean.v, mean, sizeof mean);
            memcpy(cfg.data_std.v, std, sizeof std);
        }
        vit_model *m = model_with_values(&cfg, 2);
        export_small(m, "input.safetensors");
        const char *input = meta(&g_file, "input");
        ck_assert_msg(input && strcmp(input, want[k]) == 0, "case %d: input '%s'", k,
                      input ? input : "(none)");
        if (k == 2) { /* the figures in the text are the model's, to the bit */
            const char *at = strstr(input, "mean = [");
            for (int j = 0; j < 2 * C; j++) {
                char *end;
                at = j == C ? strstr(at, "std = [") + 7 : at + (j ? 2 : 8);
                double v = strtod(at, &end);
                ck_assert_msg(v == (j < C ? mean[j] : std[j - C]), "value %d: %.17g", j, v);
                at = end;
            }
        }
        if (k == 0) {
            plain = g_file;
        } else {
            ck_assert_uint_eq(g_file.size - 8 - g_file.header_len,
                              plain.size - 8 - plain.header_len);
            ck_assert_int_eq(memcmp(g_file.data, plain.data, plain.size - 8 - plain.header_len),
                             0);
            free_file(&g_file);
        }
        vit_model_free(m);
    }
    free_file(&plain);
}
END_TEST

START_TEST(transposes_and_patch_layout)
{
    vit_model *m = small_model(VIT_POOL_CLS);
    export_small(m, "t.safetensors");
    const st_file *f = &g_file;
    /* qkv.weight [3D, D]: row i of block s is column i of W_Q, W_K, W_V,
     * which are the column blocks s*D .. s*D + D-1 of our W_QKV [D, 3D]. */
    static const char *part[3] = {"W_Q", "W_K", "W_V"};
    for (int l = 0; l < DEPTH; l++) {
        char name[64];
        snprintf(name, sizeof name, "blocks.%d.attn.qkv.weight", l);
        const st_tensor *qkv = tensor(f, name);
        snprintf(name, sizeof name, "blocks.%d.attn.qkv.bias", l);
        const st_tensor *qkvb = tensor(f, name);
        int r, c;
        snprintf(name, sizeof name, "blocks.%d.attn.w_qkv", l);
        const vit_real *w = ours(m, name, &r, &c);
        ck_assert(r == D && c == 3 * D);
        snprintf(name, sizeof name, "blocks.%d.attn.b_qkv", l);
        const vit_real *b = ours(m, name, NULL, NULL);
        for (int s = 0; s < 3; s++)
            for (int i = 0; i < D; i++) {
                for (int j = 0; j < D; j++)
                    ck_assert_msg(value(f, qkv, (size_t)(s * D + i) * D + j)
                                      == (float)w[j * 3 * D + s * D + i],
                                  "L%d %s: qkv row %d col %d", l, part[s], s * D + i, j);
                ck_assert(value(f, qkvb, (size_t)(s * D + i)) == (float)b[s * D + i]);
            }
        /* proj.weight = W_O^T; fc1.weight = w1^T [M, D]; fc2.weight = w2^T [D, M]. */
        snprintf(name, sizeof name, "blocks.%d.attn.w_o", l);
        const vit_real *wo = ours(m, name, NULL, NULL);
        snprintf(name, sizeof name, "blocks.%d.attn.proj.weight", l);
        const st_tensor *proj = tensor(f, name);
        snprintf(name, sizeof name, "blocks.%d.mlp.w1", l);
        const vit_real *w1 = ours(m, name, NULL, NULL);
        snprintf(name, sizeof name, "blocks.%d.mlp.fc1.weight", l);
        const st_tensor *fc1 = tensor(f, name);
        snprintf(name, sizeof name, "blocks.%d.mlp.w2", l);
        const vit_real *w2 = ours(m, name, NULL, NULL);
        snprintf(name, sizeof name, "blocks.%d.mlp.fc2.weight", l);
        const st_tensor *fc2 = tensor(f, name);
        for (int i = 0; i < D; i++) {
            for (int j = 0; j < D; j++)
                ck_assert(value(f, proj, (size_t)i * D + j) == (float)wo[j * D + i]);
            for (int h = 0; h < M; h++) {
                ck_assert(value(f, fc1, (size_t)h * D + i) == (float)w1[i * M + h]);
                ck_assert(value(f, fc2, (size_t)i * M + h) == (float)w2[h * D + i]);
            }
        }
    }
    /* The patch embedding as a Conv2d weight [D, C, P, P]: element
     * (d, c, py, px) multiplies pixel (py, px) channel c of a patch, which
     * our im2col puts in row (py*P + px)*C + c of patch.w [P*P*C, D]. */
    assert_conv_weight(f, tensor(f, "patch_embed.proj.weight"), m, "patch.w", D, C, P);
    /* head.weight [K, D] = head.w^T. */
    const st_tensor *hw = tensor(f, "head.weight");
    const vit_real *oh = ours(m, "head.w", NULL, NULL);
    for (int k = 0; k < K; k++)
        for (int d = 0; d < D; d++)
            ck_assert(value(f, hw, (size_t)k * D + d) == (float)oh[d * K + k]);
    free_file(&g_file);
    vit_model_free(m);
}
END_TEST

/* Copies tensor `name` of the file into our tensor `dst`, transposing when
 * asked: the inverse of the export, written from the timm layout. */
static void load_back(vit_model *m, const char *name, const char *dst, int transpose,
                      size_t first_row)
{
    int r, c;
    vit_real *o = (vit_real *)ours(m, dst, &r, &c);
    const st_tensor *t = tensor(&g_file, name);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++)
            o[i * c + j] = transpose ? value(&g_file, t, (first_row + (size_t)j) * (size_t)r + i)
                                     : value(&g_file, t, first_row * (size_t)c + (size_t)i * c + j);
}

START_TEST(round_trip)
{
    vit_model *m = small_model(VIT_POOL_CLS);
    export_small(m, "rt.safetensors");
    vit_model *back = vit_model_new(vit_model_config(m));
    ck_assert_ptr_nonnull(back);
    vit_real *bp = vit_model_params(back);
    for (size_t i = 0; i < vit_model_param_count(back); i++)
        bp[i] = NAN; /* anything not loaded stays NaN and fails the compare */
    load_back(back, "cls_token", "cls", 0, 0);
    load_back(back, "pos_embed", "pos", 0, 0);
    load_back(back, "patch_embed.proj.bias", "patch.b", 0, 0);
    {
        vit_real *o = (vit_real *)ours(back, "patch.w", NULL, NULL);
        const st_tensor *t = tensor(&g_file, "patch_embed.proj.weight");
        for (int d = 0; d < D; d++)
            for (int c = 0; c < C; c++)
                for (int py = 0; py < P; py++)
                    for (int px = 0; px < P; px++)
                        o[((py * P + px) * C + c) * D + d] =
                            value(&g_file, t, (((size_t)d * C + c) * P + py) * P + px);
    }
    for (int l = 0; l < DEPTH; l++) {
        char a[64], b[64];
#define BACK(timm, mine, tr, row) \
        (snprintf(a, sizeof a, "blocks.%d.%s", l, timm), \
         snprintf(b, sizeof b, "blocks.%d.%s", l, mine), load_back(back, a, b, tr, row))
        BACK("norm1.weight", "ln1.g", 0, 0);
        BACK("norm1.bias", "ln1.b", 0, 0);
        BACK("attn.qkv.weight", "attn.w_qkv", 1, 0); /* [3D, D] -> [D, 3D] */
        BACK("attn.qkv.bias", "attn.b_qkv", 0, 0);
        BACK("attn.proj.weight", "attn.w_o", 1, 0);
        BACK("attn.proj.bias", "attn.b_o", 0, 0);
        BACK("norm2.weight", "ln2.g", 0, 0);
        BACK("norm2.bias", "ln2.b", 0, 0);
        BACK("mlp.fc1.weight", "mlp.w1", 1, 0);
        BACK("mlp.fc1.bias", "mlp.b1", 0, 0);
        BACK("mlp.fc2.weight", "mlp.w2", 1, 0);
        BACK("mlp.fc2.bias", "mlp.b2", 0, 0);
#undef BACK
    }
    load_back(back, "norm.weight", "ln.g", 0, 0);
    load_back(back, "norm.bias", "ln.b", 0, 0);
    load_back(back, "head.weight", "head.w", 1, 0);
    load_back(back, "head.bias", "head.b", 0, 0);
    const vit_real *mp = vit_model_params(m);
    for (size_t i = 0; i < vit_model_param_count(m); i++)
        ck_assert_msg(bp[i] == mp[i], "parameter %zu: %g after the round trip, %g before", i,
                      (double)bp[i], (double)mp[i]);
    free_file(&g_file);
    vit_model_free(back);
    vit_model_free(m);
}
END_TEST

START_TEST(atomic_write_and_errors)
{
    vit_model *m = small_model(VIT_POOL_CLS);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", fu_path("atomic"));
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    char path[700];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    FILE *fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    fputs("old contents", fp);
    fclose(fp);
    /* Replacing a file leaves exactly the new file, mode 0644. */
    ck_assert_msg(vit_safetensors_save(m, NULL, NULL, path, NULL) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(fu_count_entries(dir), 1);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0644);
    read_file(path, &g_file);
    ck_assert_int_eq(g_file.ntensors, 8 + 12 * DEPTH);
    free_file(&g_file);
    /* A folder that does not exist: an error naming the path, no file. */
    snprintf(path, sizeof path, "%s/none/m.safetensors", dir);
    ck_assert_int_eq(vit_safetensors_save(m, NULL, NULL, path, NULL), VIT_EIO);
    ck_assert_msg(strstr(vit_last_error(), path) != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_safetensors_save(NULL, NULL, NULL, path, NULL), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "model is NULL") != NULL, "%s", vit_last_error());
    vit_model_free(m);
}
END_TEST

START_TEST(logits_csv)
{
    vit_model *m = small_model(VIT_POOL_CLS);
    /* Small weights give nearly equal logits; make them differ by image. */
    vit_real *p = vit_model_params(m);
    for (size_t i = 0; i < vit_model_param_count(m); i++)
        p[i] = (vit_real)(0.3 * sin(0.7 * (double)i + 0.1));
    enum { N = 3 };
    vit_real images[N * H * W * C];
    int labels[N] = {0, 3, 4};
    for (int i = 0; i < N * H * W * C; i++)
        images[i] = (vit_real)(0.5 + 0.5 * cos(1.3 * i));
    vit_dataset ds = {N, H, W, C, K, images, labels, NULL};
    double acc = -1;
    ck_assert_msg(vit_export_logits_csv(m, &ds, fu_path("logits.csv"), &acc) == VIT_OK, "%s",
                  vit_last_error());
    vit_tape *tape = vit_tape_new();
    vit_tensor *y = vit_model_forward(m, tape, images, N, 0);
    ck_assert_ptr_nonnull(y);

    FILE *fp = fopen(fu_path("logits.csv"), "r");
    ck_assert_ptr_nonnull(fp);
    char line[1024];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, fp));
    ck_assert_str_eq(line, "index,label,pred,logit_0,logit_1,logit_2,logit_3,logit_4\n");
    int correct = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_ptr_nonnull(fgets(line, sizeof line, fp));
        char *s = line, *end;
        long idx = strtol(s, &end, 10), lab = strtol(end + 1, &end, 10),
             pred = strtol(end + 1, &end, 10);
        ck_assert(idx == i && lab == labels[i]);
        int best = 0;
        for (int k = 0; k < K; k++) {
            ck_assert_int_eq(*end, ',');
            /* 9 significant digits give back the float exactly. */
            float v = (float)strtod(end + 1, &end);
            ck_assert_msg(v == (float)y->data[i * K + k], "image %d logit %d: %.9g vs %.9g", i, k,
                          (double)v, (double)y->data[i * K + k]);
            if (y->data[i * K + k] > y->data[i * K + best])
                best = k;
        }
        ck_assert_int_eq(pred, best);
        correct += best == labels[i];
    }
    ck_assert_ptr_null(fgets(line, sizeof line, fp));
    fclose(fp);
    ck_assert_double_eq_tol(acc, (double)correct / N, 1e-15);

    ds.width = 4; /* no longer the model's image size */
    ck_assert_int_eq(vit_export_logits_csv(m, &ds, fu_path("bad.csv"), &acc), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "expects 4x6x3") != NULL, "%s", vit_last_error());
    ck_assert_int_ne(access(fu_path("bad.csv"), F_OK), 0);
    ds.width = W;
    /* A folder that does not exist: VIT_EIO naming the path, *accuracy kept. */
    acc = -1;
    const char *nowhere = fu_path("no/such/folder/logits.csv");
    ck_assert_int_eq(vit_export_logits_csv(m, &ds, nowhere, &acc), VIT_EIO);
    ck_assert_msg(strstr(vit_last_error(), nowhere) != NULL, "%s", vit_last_error());
    ck_assert(acc == -1);
    ck_assert_int_eq(vit_export_logits_csv(NULL, &ds, fu_path("x.csv"), NULL), VIT_EINVAL);
    ck_assert_int_eq(vit_export_logits_csv(m, NULL, fu_path("x.csv"), NULL), VIT_EINVAL);
    ck_assert_int_eq(vit_export_logits_csv(m, &ds, NULL, NULL), VIT_EINVAL);
    ck_assert_int_ne(access(fu_path("x.csv"), F_OK), 0);
    vit_tape_free(tape);
    vit_model_free(m);
}
END_TEST

/* More images than one forward batch: every row once, in order, its pred
 * the argmax of its own logits, over an older file that is replaced whole. */
START_TEST(logits_csv_many_batches)
{
    vit_model *m = small_model(VIT_POOL_MEAN);
    vit_real *p = vit_model_params(m);
    for (size_t i = 0; i < vit_model_param_count(m); i++)
        p[i] = (vit_real)(0.3 * sin(0.9 * (double)i + 0.2));
    enum { N = 300 };
    static vit_real images[N * H * W * C];
    static int labels[N];
    for (int i = 0; i < N * H * W * C; i++)
        images[i] = (vit_real)(0.5 + 0.5 * cos(0.37 * i));
    for (int i = 0; i < N; i++)
        labels[i] = i % K;
    vit_dataset ds = {N, H, W, C, K, images, labels, NULL};
    const char *old = "old contents, longer than nothing\n";
    ck_assert_int_eq(mkdir(fu_path("many"), 0755), 0);
    fu_write(fu_path("many/logits.csv"), old, strlen(old));
    double acc = -1;
    ck_assert_msg(vit_export_logits_csv(m, &ds, fu_path("many/logits.csv"), &acc) == VIT_OK, "%s",
                  vit_last_error());
    FILE *fp = fopen(fu_path("many/logits.csv"), "r");
    ck_assert_ptr_nonnull(fp);
    char line[1024];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, fp));
    ck_assert_str_eq(line, "index,label,pred,logit_0,logit_1,logit_2,logit_3,logit_4\n");
    int rows = 0, correct = 0;
    while (fgets(line, sizeof line, fp)) {
        char *end;
        long idx = strtol(line, &end, 10), lab = strtol(end + 1, &end, 10),
             pred = strtol(end + 1, &end, 10);
        ck_assert_int_eq(idx, rows);
        ck_assert_int_eq(lab, labels[rows]);
        double z[K];
        int best = 0;
        for (int k = 0; k < K; k++) {
            ck_assert_int_eq(*end, ',');
            z[k] = strtod(end + 1, &end);
            if (z[k] > z[best])
                best = k;
        }
        ck_assert_int_eq(*end, '\n');
        ck_assert_int_eq(pred, best);
        correct += best == labels[rows];
        rows++;
    }
    fclose(fp);
    ck_assert_int_eq(rows, N);
    ck_assert_double_eq_tol(acc, (double)correct / N, 1e-15);
    ck_assert_int_eq(fu_count_entries(fu_path("many")), 1); /* no temporary left beside it */
    vit_model_free(m);
}
END_TEST

/* ---------------------------------------------------------------- import */

static int same_file(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *x = fu_read(a, &na), *y = fu_read(b, &nb);
    int same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* A run that fitted its images on load (vit_run_data.fit) exports the fit
 * and how to prepare an image; the tensors are those of the plain export,
 * no fit writes the plain file, a malformed fit is refused with nothing
 * written, and the import reads the file as the plain one. */
START_TEST(export_fit)
{
    vit_model *m = small_model(VIT_POOL_CLS), *a = NULL, *b = NULL;
    char plain[600], fitted[600];
    snprintf(plain, sizeof plain, "%s", fu_path("plain_fit.safetensors"));
    snprintf(fitted, sizeof fitted, "%s", fu_path("fitted.safetensors"));
    ck_assert_int_eq(vit_safetensors_save(m, NULL, NULL, plain, NULL), VIT_OK);
    vit_data_fit fit = {H, W, C}, partial = {0, 0, C}, none = {0, 0, 0};
    ck_assert_msg(vit_safetensors_save_fit(m, NULL, NULL, &fit, fitted, NULL) == VIT_OK, "%s",
                  vit_last_error());
    read_file(fitted, &g_file);
    ck_assert_str_eq(meta(&g_file, "fit"), "4x6x3");
    const char *note = meta(&g_file, "fit_note");
    ck_assert_ptr_nonnull(note);
    ck_assert_msg(strstr(note, "alpha composited over white") && strstr(note, "converted to 3 channels")
                      && strstr(note, "0.299 R + 0.587 G + 0.114 B")
                      && strstr(note, "resized to 4x6 (height x width)"),
                  "fit_note: %s", note);
    static st_file g_plain;
    read_file(plain, &g_plain);
    ck_assert_ptr_null(meta(&g_plain, "fit"));
    ck_assert_ptr_null(meta(&g_plain, "fit_note"));
    size_t data_bytes = g_plain.size - 8 - g_plain.header_len;
    ck_assert_uint_eq(g_file.size - 8 - g_file.header_len, data_bytes);
    ck_assert_int_eq(memcmp(g_file.data, g_plain.data, data_bytes), 0);
    free_file(&g_file);
    free_file(&g_plain);
    /* Only the channels fitted: 0 for the sides the images kept. */
    ck_assert_int_eq(vit_safetensors_save_fit(m, NULL, NULL, &partial, fitted, NULL), VIT_OK);
    read_file(fitted, &g_file);
    ck_assert_str_eq(meta(&g_file, "fit"), "0x0x3");
    free_file(&g_file);
    ck_assert_int_eq(vit_safetensors_save_fit(m, NULL, NULL, &none, fitted, NULL), VIT_OK);
    ck_assert(same_file(fitted, plain));
    ck_assert_int_eq(vit_safetensors_save_fit(m, NULL, NULL, NULL, fitted, NULL), VIT_OK);
    ck_assert(same_file(fitted, plain));
    static const vit_data_fit bad[] = {{4, 0, 3}, {0, 6, 0}, {-4, -6, 3}, {4, 6, 2}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *gone = fu_path("bad_fit.safetensors");
        ck_assert_int_eq(vit_safetensors_save_fit(m, NULL, NULL, &bad[i], gone, NULL), VIT_EINVAL);
        ck_assert_msg(strstr(vit_last_error(), "is not a fit"), "%s", vit_last_error());
        ck_assert_int_ne(access(gone, F_OK), 0);
    }
    /* Read back: the same model as from the plain file. */
    ck_assert_int_eq(vit_safetensors_save_fit(m, NULL, NULL, &fit, fitted, NULL), VIT_OK);
    ck_assert_msg(vit_safetensors_load(fitted, &a) == VIT_OK, "%s", vit_last_error());
    ck_assert_int_eq(vit_safetensors_load(plain, &b), VIT_OK);
    ck_assert_uint_eq(vit_model_param_count(a), vit_model_param_count(b));
    ck_assert_int_eq(memcmp(vit_model_params(a), vit_model_params(b),
                            vit_model_param_count(a) * sizeof(vit_real)), 0);
    vit_model_free(a);
    vit_model_free(b);
    vit_model_free(m);
}
END_TEST

/* `file` (in the test folder) with its metadata's key = "1" turned to "0"
 * is refused as a file whose tensors the config does not describe, naming
 * one of them (tensor: a part of its name). */
static void assert_needs_key(const char *file, const char *key, const char *tensor)
{
    char from[64], to[64], off[96];
    snprintf(from, sizeof from, "\"%s\":\"1\"", key);
    snprintf(to, sizeof to, "\"%s\":\"0\"", key);
    snprintf(off, sizeof off, "off-%s", file);
    fu_edit_header(fu_path(file), fu_path(off), from, to);
    vit_model *back = NULL;
    ck_assert_int_eq(vit_safetensors_load(fu_path(off), &back), VIT_EFORMAT);
    ck_assert_msg(strstr(vit_last_error(), tensor) != NULL, "%s: '%s' does not name %s", off,
                  vit_last_error(), tensor);
    ck_assert_ptr_null(back);
}

static void assert_same_params(vit_model *a, vit_model *b)
{
    ck_assert_uint_eq(vit_model_param_count(a), vit_model_param_count(b));
    const vit_real *x = vit_model_params(a), *y = vit_model_params(b);
    for (size_t i = 0; i < vit_model_param_count(a); i++)
        ck_assert_msg(x[i] == y[i], "parameter %zu: %g vs %g", i, (double)x[i], (double)y[i]);
}

/* Loads path, which must succeed, into a new model with m's parameters
 * bit for bit; the caller frees it. */
static vit_model *load_same(const char *path, vit_model *m)
{
    vit_model *back = NULL;
    ck_assert_msg(vit_safetensors_load(path, &back) == VIT_OK, "%s", vit_last_error());
    assert_same_params(m, back);
    return back;
}

/* export -> import -> export gives the same bytes, and import gives the
 * same model, for both poolings. */
START_TEST(import_round_trip_bitwise)
{
    for (int pool = VIT_POOL_CLS; pool <= VIT_POOL_MEAN; pool++) {
        vit_model *m = small_model(pool), *back = NULL;
        ck_assert_int_eq(vit_safetensors_save(m, NULL, NULL, fu_path("a.safetensors"), NULL), VIT_OK);
        ck_assert_msg(vit_safetensors_load(fu_path("a.safetensors"), &back) == VIT_OK, "%s",
                      vit_last_error());
        char ca[4096], cb[4096];
        ck_assert_int_gt(vit_config_format(vit_model_config(m), NULL, ca, sizeof ca), 0);
        ck_assert_int_gt(vit_config_format(vit_model_config(back), NULL, cb, sizeof cb), 0);
        ck_assert_str_eq(ca, cb); /* the whole config, recipe included */
        assert_same_params(m, back);
        ck_assert_int_eq(vit_safetensors_save(back, NULL, NULL, fu_path("b.safetensors"), NULL), VIT_OK);
        ck_assert_msg(same_file(fu_path("a.safetensors"), fu_path("b.safetensors")),
                      "pool %d: export -> import -> export changed the file", pool);
        vit_model_free(back);
        vit_model_free(m);
    }
}
END_TEST

/* Overlapping patches export as a strided, padded Conv2d: the metadata
 * names the stride and padding, pos_embed has the grid's tokens, and the
 * import rebuilds the same model bitwise.  Locality self-attention adds
 * its per-block scale under a name of ours and round-trips too.  A
 * convolutional stem exports as timm's hybrid patch embedding. */
START_TEST(export_overlap_and_lsa)
{
    vit_config cfg;
    vit_config_default(&cfg);
    cfg.image_height = H;
    cfg.image_width = W;
    cfg.channels = C;
    cfg.classes = K;
    cfg.patch = 3;
    cfg.patch_stride = 1;
    cfg.patch_pad = 1; /* a 4 x 6 grid of 3 x 3 patches */
    cfg.dim = D;
    cfg.depth = DEPTH;
    cfg.heads = HEADS;
    cfg.mlp = M;
    vit_model *m = model_with_values(&cfg, 2), *back = NULL;
    st_file f;
    save_and_read(m, "ov.safetensors", &f);
    ck_assert_str_eq(meta(&f, "patch"), "3");
    ck_assert_str_eq(meta(&f, "patch_stride"), "1");
    ck_assert_str_eq(meta(&f, "patch_pad"), "1");
    const st_tensor *pos = tensor(&f, "pos_embed");
    ck_assert_int_eq((int)pos->shape[1], 4 * 6 + 1);
    const st_tensor *pw = tensor(&f, "patch_embed.proj.weight");
    ck_assert_int_eq((int)pw->shape[2], 3);
    ck_assert_int_eq((int)pw->shape[3], 3);
    free_file(&f);
    back = load_same(fu_path("ov.safetensors"), m);
    ck_assert_int_eq(vit_model_config(back)->patch_stride, 1);
    ck_assert_int_eq(vit_model_config(back)->patch_pad, 1);
    vit_model_free(back);
    vit_model_free(m);

    /* Locality self-attention: each block's tau [heads] is written as
     * blocks.L.attn.tau (timm has no such tensor, so a strict timm load
     * fails), lsa = 1 in the metadata, and the import rebuilds the same
     * model bitwise.  A file whose metadata says lsa = 0 but which carries
     * the tau tensors is refused (the tensors do not match the config). */
    cfg.lsa = 1;
    m = model_with_values(&cfg, 2);
    save_and_read(m, "lsa.safetensors", &f);
    ck_assert_str_eq(meta(&f, "lsa"), "1");
    for (int l = 0; l < DEPTH; l++) {
        char name[64];
        snprintf(name, sizeof name, "blocks.%d.attn.tau", l);
        const st_tensor *tau = tensor(&f, name);
        ck_assert_int_eq(tau->ndim, 1);
        ck_assert_int_eq((int)tau->shape[0], HEADS);
        int rows = 0;
        const vit_real *mine = ours(m, name, &rows, NULL);
        ck_assert_int_eq(rows, HEADS);
        for (int h = 0; h < HEADS; h++)
            ck_assert_float_eq(value(&f, tau, (size_t)h), (float)mine[h]);
    }
    free_file(&f);
    back = load_same(fu_path("lsa.safetensors"), m);
    ck_assert_int_eq(vit_model_config(back)->lsa, 1);
    vit_model_free(back);
    vit_model_free(m);
    assert_needs_key("lsa.safetensors", "lsa", "attn.tau");
    /* A convolutional stem exports by the names of timm's hybrid patch
     * embedding (backbone.0 the 3x3 Conv2d, proj the patches of its
     * feature map) and imports back bitwise. */
    cfg.lsa = 0;
    cfg.stem = 2;
    m = model_with_values(&cfg, 3);
    save_and_read(m, "stem.safetensors", &f);
    ck_assert_str_eq(meta(&f, "stem"), "2");
    const st_tensor *sw = tensor(&f, "patch_embed.backbone.0.weight");
    ck_assert_int_eq((int)tensor(&f, "patch_embed.backbone.0.bias")->shape[0], 2);
    pw = tensor(&f, "patch_embed.proj.weight");
    ck_assert_int_eq((int)pw->shape[0], D);
    ck_assert_int_eq((int)pw->shape[1], 2); /* the stem's channels, not the image's */
    ck_assert_int_eq((int)pw->shape[2], 3);
    /* Conv2d's [out, in, ky, kx] order: weight [o, ch, ky, kx] is ours
     * stem.w [(ky 3 + kx) C + ch, o]. */
    assert_conv_weight(&f, sw, m, "stem.w", 2, C, 3);
    free_file(&f);
    back = load_same(fu_path("stem.safetensors"), m);
    ck_assert_int_eq(vit_model_config(back)->stem, 2);
    vit_model_free(back);
    vit_model_free(m);
    /* stem2 after it: backbone.2, the 4x4 Conv2d at stride 2 (backbone.1
     * and .3 are the GELUs, without weights); proj reads its 3 channels on
     * the 2 x 3 map. */
    cfg.stem2 = 3;
    m = model_with_values(&cfg, 3);
    save_and_read(m, "stem2.safetensors", &f);
    ck_assert_str_eq(meta(&f, "stem2"), "3");
    const st_tensor *s2 = tensor(&f, "patch_embed.backbone.2.weight");
    ck_assert_int_eq((int)tensor(&f, "patch_embed.backbone.2.bias")->shape[0], 3);
    ck_assert_int_eq((int)tensor(&f, "patch_embed.proj.weight")->shape[1], 3);
    /* weight [o, ch, ky, kx] is stem2.w [(ky 4 + kx) 2 + ch, o] */
    assert_conv_weight(&f, s2, m, "stem2.w", 3, 2, 4);
    free_file(&f);
    back = load_same(fu_path("stem2.safetensors"), m);
    ck_assert_int_eq(vit_model_config(back)->stem2, 3);
    vit_model_free(back);
    vit_model_free(m);
    /* local_conv: each block's depthwise 3x3 as PyTorch's Conv2d(D, D, 3,
     * groups=D) weight [D, 1, 3, 3] (weight[o, 0, ky, kx] = local.w[ky 3 +
     * kx, o]) and bias [D], under blocks.L.local (names timm lacks); the
     * import rebuilds the model bitwise, and a file whose metadata says
     * local_conv = 0 is refused for the tensors it carries. */
    cfg.stem = cfg.stem2 = 0;
    cfg.local_conv = 1;
    m = model_with_values(&cfg, 4);
    save_and_read(m, "local.safetensors", &f);
    ck_assert_str_eq(meta(&f, "local_conv"), "1");
    for (int l = 0; l < DEPTH; l++) {
        char wn[64], bn[64], on[64];
        snprintf(wn, sizeof wn, "blocks.%d.local.weight", l);
        snprintf(bn, sizeof bn, "blocks.%d.local.bias", l);
        snprintf(on, sizeof on, "blocks.%d.local.w", l);
        const st_tensor *lw = tensor(&f, wn);
        ck_assert_int_eq((int)tensor(&f, bn)->shape[0], D);
        assert_conv_weight(&f, lw, m, on, D, 1, 3);
    }
    free_file(&f);
    back = load_same(fu_path("local.safetensors"), m);
    ck_assert_int_eq(vit_model_config(back)->local_conv, 1);
    vit_model_free(back);
    vit_model_free(m);
    assert_needs_key("local.safetensors", "local_conv", "local.");
}
END_TEST

/* The checkpoint an import writes resumes training: weights as in the file,
 * fresh AdamW moments, step 0; one step moves the weights. */
START_TEST(import_to_checkpoint_trains)
{
    vit_model *m = small_model(VIT_POOL_CLS), *got = NULL, *ck = NULL;
    ck_assert_int_eq(vit_safetensors_save(m, NULL, NULL, fu_path("c.safetensors"), NULL), VIT_OK);
    ck_assert_msg(vit_safetensors_import(fu_path("c.safetensors"), fu_path("c.ckpt"), &got) == VIT_OK, "%s",
                  vit_last_error());
    assert_same_params(m, got);
    vit_adamw opt;
    vit_run_state st;
    ck_assert_msg(vit_run_load(fu_path("c.ckpt"), &ck, NULL, &opt, &st) == VIT_OK, "%s", vit_last_error());
    assert_same_params(m, ck);
    ck_assert(st.step == 0 && st.epoch == 0 && opt.t == 0);
    for (size_t i = 0; i < opt.n; i++)
        ck_assert(opt.m[i] == 0 && opt.v[i] == 0);
    vit_real images[2 * H * W * C];
    int labels[2] = {1, 4};
    for (int i = 0; i < 2 * H * W * C; i++)
        images[i] = (vit_real)(0.5 + 0.5 * sin(0.9 * i));
    double loss;
    ck_assert_int_eq(vit_model_train_grads(ck, images, labels, 2, 0, &loss, NULL), VIT_OK);
    ck_assert(isfinite(loss));
    int ng;
    const vit_param_group *g = vit_model_groups(ck, &ng);
    ck_assert_int_eq(vit_adamw_step(&opt, vit_model_params(ck), vit_model_grads(ck), g, ng, 1e-3),
                     VIT_OK);
    size_t moved = 0;
    for (size_t i = 0; i < opt.n; i++)
        moved += vit_model_params(ck)[i] != vit_model_params(m)[i];
    ck_assert_uint_gt(moved, opt.n / 2);
    vit_run_state_free(&st);
    vit_model_free(got);
    /* A failing import leaves no checkpoint and no model. */
    got = (vit_model *)&got;
    ck_assert_int_eq(vit_safetensors_import(fu_path("none.safetensors"), fu_path("d.ckpt"), &got), VIT_EIO);
    ck_assert_ptr_null(got);
    ck_assert_int_ne(access(fu_path("d.ckpt"), F_OK), 0);
    vit_adamw_free(&opt);
    vit_model_free(ck);
    vit_model_free(m);
}
END_TEST

/* Class names travel export -> import -> checkpoint: a name with a quote, a
 * backslash and UTF-8 comes back byte for byte; a file without class_names
 * gives a checkpoint that reads back as "0".."K-1"; a bad value is one
 * VIT_EFORMAT naming the file and class_names, and writes no checkpoint. */
START_TEST(import_class_names)
{
    vit_model *m = small_model(VIT_POOL_CLS), *got = NULL;
    char *names[K] = {"bag", "co\"at", "back\\slash", "\xc3\xa9t\xc3\xa9", "sneaker"};
    char good[600];
    snprintf(good, sizeof good, "%s", fu_path("named.safetensors"));
    ck_assert_int_eq(vit_safetensors_save(m, NULL, names, good, NULL), VIT_OK);
    char **back = NULL;
    ck_assert_msg(vit_safetensors_load_named(good, &got, &back) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_ptr_nonnull(back);
    for (int k = 0; k < K; k++)
        ck_assert_str_eq(back[k], names[k]);
    vit_safetensors_class_names_free(back, K);
    vit_model_free(got);
    ck_assert_msg(vit_safetensors_import(good, fu_path("named.ckpt"), NULL) == VIT_OK, "%s",
                  vit_last_error());
    vit_model *ck = NULL;
    vit_run_state st;
    ck_assert_msg(vit_run_load(fu_path("named.ckpt"), &ck, NULL, NULL, &st) == VIT_OK, "%s",
                  vit_last_error());
    ck_assert_int_eq(st.nclass_names, K);
    for (int k = 0; k < K; k++)
        ck_assert_str_eq(st.class_names[k], names[k]);
    vit_run_state_free(&st);
    vit_model_free(ck);
    /* The round trip: the checkpoint's names exported again, same bytes. */
    ck_assert_int_eq(vit_safetensors_save(m, NULL, names, fu_path("named2.safetensors"), NULL), VIT_OK);
    ck_assert(same_file(good, fu_path("named2.safetensors")));
    /* No class_names: none, and the checkpoint reads back the numbers. */
    ck_assert_int_eq(vit_safetensors_save(m, NULL, NULL, fu_path("plain.safetensors"), NULL), VIT_OK);
    back = (char **)&back;
    ck_assert_int_eq(vit_safetensors_load_named(fu_path("plain.safetensors"), &got, &back), VIT_OK);
    ck_assert_ptr_null(back);
    vit_model_free(got);
    ck_assert_int_eq(vit_safetensors_import(fu_path("plain.safetensors"), fu_path("plain.ckpt"), NULL),
                     VIT_OK);
    ck_assert_int_eq(vit_run_load(fu_path("plain.ckpt"), &ck, NULL, NULL, &st), VIT_OK);
    ck_assert_int_eq(st.nclass_names, K);
    ck_assert_str_eq(st.class_names[0], "0");
    ck_assert_str_eq(st.class_names[K - 1], "4");
    vit_run_state_free(&st);
    vit_model_free(ck);
    char longname[400];
    memset(longname, 'x', 300);
    longname[300] = 0;
    char toolong[600];
    snprintf(toolong, sizeof toolong, "[\\\"a\\\",\\\"b\\\",\\\"c\\\",\\\"d\\\",\\\"%s\\\"]",
             longname);
    const char *from = "[\\\"bag\\\",\\\"co\\\\\\\"at\\\",\\\"back\\\\\\\\slash\\\",\\\""
                       "\xc3\xa9t\xc3\xa9\\\",\\\"sneaker\\\"]";
    const struct {
        const char *to, *want;
    } cases[] = {
        {"bag", "not a JSON array of strings"},
        {"[\\\"a\\\",\\\"b\\\"", "not a JSON array of strings"},
        {"[\\\"a\\\",\\\"b\\\",\\\"c\\\",\\\"d\\\",5]", "not a JSON array of strings"},
        {"[\\\"a\\\",\\\"b\\\",\\\"c\\\",\\\"d\\\",\\\"e\\\"]x", "not a JSON array of strings"},
        {"[\\\"a\\\",\\\"b\\\",\\\"c\\\"]", "holds 3 names, the model has 5 classes"},
        {"[]", "holds 0 names, the model has 5 classes"},
        {"[\\\"a\\\",\\\"b\\\",\\\"c\\\",\\\"d\\\",\\\"e\\\",\\\"f\\\"]",
         "holds more than 5 names, the model has 5 classes"},
        {"[\\\"a\\\",\\\"b\\\",\\\"\\\",\\\"d\\\",\\\"e\\\"]", "name 2 is empty"},
        {"[\\\"a\\\",\\\"b\\\",\\\"c\\\",\\\"b\\\",\\\"e\\\"]", "'b' names classes 1 and 3"},
        {toolong, "name 4 is 300 bytes long, at most 255"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[600], ckpt[600];
        snprintf(path, sizeof path, "%s", fu_path("badnames.safetensors"));
        snprintf(ckpt, sizeof ckpt, "%s", fu_path("badnames.ckpt"));
        fu_edit_header(good, path, from, cases[i].to);
        int rc = vit_safetensors_import(path, ckpt, NULL);
        ck_assert_msg(rc == VIT_EFORMAT, "case %zu: rc %d (%s)", i, rc, vit_last_error());
        ck_assert_msg(strstr(vit_last_error(), path) &&
                      strstr(vit_last_error(), "class_names") &&
                      strstr(vit_last_error(), cases[i].want),
                      "case %zu: '%s' should name the file, class_names and say '%s'", i,
                      vit_last_error(), cases[i].want);
        ck_assert_int_ne(access(ckpt, F_OK), 0);
    }
    vit_model_free(m);
}
END_TEST

/* Earlier exports named AdamW's keys eps, beta1, beta2, weight_decay. */
START_TEST(import_old_key_names)
{
    vit_model *m = small_model(VIT_POOL_CLS), *back = NULL;
    vit_train_config tc;
    vit_train_config_default(&tc);
    tc.eps = 3e-7;
    tc.beta2 = 0.98;
    ck_assert_int_eq(vit_safetensors_save(m, &tc, NULL, fu_path("new.safetensors"), NULL), VIT_OK);
    fu_edit_header(fu_path("new.safetensors"), fu_path("o1.safetensors"), "\"adamw_eps\"", "\"eps\"");
    fu_edit_header(fu_path("o1.safetensors"), fu_path("old.safetensors"), "\"adamw_beta2\"", "\"beta2\"");
    ck_assert_msg(vit_safetensors_load(fu_path("old.safetensors"), &back) == VIT_OK, "%s",
                  vit_last_error());
    /* The model loads; the recipe under the old names becomes the run's
     * when imported as a checkpoint. */
    ck_assert_msg(vit_safetensors_import(fu_path("old.safetensors"), fu_path("old.ckpt"), NULL)
                  == VIT_OK, "%s", vit_last_error());
    vit_config got;
    vit_train_config got_tc;
    ck_assert_int_eq(vit_run_config(fu_path("old.ckpt"), &got, &got_tc), VIT_OK);
    ck_assert_double_eq(got_tc.eps, 3e-7);
    ck_assert_double_eq(got_tc.beta2, 0.98);
    vit_model_free(back);
    vit_model_free(m);
}
END_TEST

/* Each bad file: one VIT_EFORMAT (or the given code) naming the file and
 * the problem, and no model. */
START_TEST(import_refuses_bad_files)
{
    vit_model *m = small_model(VIT_POOL_CLS);
    char good[600]; /* tp's buffers are reused */
    snprintf(good, sizeof good, "%s", fu_path("good.safetensors"));
    ck_assert_int_eq(vit_safetensors_save(m, NULL, NULL, good, NULL), VIT_OK);
    static const struct {
        const char *from, *to, *want;
    } cases[] = {
        {"\"dim\":\"8\",", "", "lacks the model config key dim"},
        {"\"dim\":\"8\",\"depth\":\"2\",", "", "keys dim, depth"},
        {"\"pool\":\"cls\",", "", "format"}, /* global_pool alone suffices: not an error */
        {"\"global_pool\":\"token\"", "\"global_pool\":\"avg\"", "contradicts pool"},
        {"\"global_pool\":\"token\"", "\"global_pool\":\"map\"", "global_pool = 'map'"},
        {"\"layer_norm_eps\":\"1e-05\"", "\"layer_norm_eps\":\"1e-06\"", "layer_norm_eps"},
        {"\"activation\":\"gelu_exact\"", "\"activation\":\"gelu_tanh\"", "gelu_tanh"},
        {"\"heads\":\"2\"", "\"heads\":\"3\"", "heads"},
        {"\"cls_token\":{\"dtype\":\"F32\"", "\"cls_token\":{\"dtype\":\"F16\"",
         "'cls_token' has dtype F16"},
        {"\"norm.bias\":{\"dtype\":\"F32\",\"shape\":[8]",
         "\"norm.bias\":{\"dtype\":\"F32\",\"shape\":[2,4]", "'norm.bias' has shape [2, 4]"},
        {"\"head.bias\"", "\"head.bias2\"", "'head.bias' is missing"},
        {"\"dtype\":\"F32\",", "\"dtype\":\"F32\",\"extra\":1,", "unknown key 'extra'"},
        {"\"data_offsets\":[0,", "\"data_offsets\":[4,", "gaps or overlaps"},
        {"{\"__metadata__\":{", "{\"__metadatum__\":{", "tensor '__metadatum__': unknown key"},
        {"{\"__metadata__\":", "{\"__metadata__\":[", "object of strings"},
        {"\"dim\":\"8\"", "\"dim\":8", "expected a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad%zu.safetensors", i);
        char path[600];
        snprintf(path, sizeof path, "%s", fu_path(name));
        fu_edit_header(good, path, cases[i].from, cases[i].to);
        vit_model *back = (vit_model *)&back;
        int rc = vit_safetensors_load(path, &back);
        if (i == 2) { /* the control: pool may go when global_pool stays */
            ck_assert_msg(rc == VIT_OK, "%s", vit_last_error());
            vit_model_free(back);
            continue;
        }
        ck_assert_msg(rc == VIT_EFORMAT, "case %zu: rc %d (%s)", i, rc, vit_last_error());
        ck_assert_ptr_null(back);
        ck_assert_msg(strstr(vit_last_error(), path) && strstr(vit_last_error(), cases[i].want),
                      "case %zu: '%s' should name the file and say '%s'", i, vit_last_error(),
                      cases[i].want);
    }
    /* Truncations: the length prefix, the header, the data. */
    size_t n;
    unsigned char *b = fu_read(good, &n);
    size_t cut[] = {0, 7, 8, 100, n - 1};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
        fu_write(fu_path("cut.safetensors"), b, cut[i]);
        vit_model *back = NULL;
        ck_assert_int_eq(vit_safetensors_load(fu_path("cut.safetensors"), &back), VIT_EFORMAT);
        ck_assert_ptr_null(back);
    }
    /* A NaN in the data. */
    memcpy(b + n - 4, "\x00\x00\xc0\x7f", 4);
    fu_write(fu_path("nan.safetensors"), b, n);
    vit_model *back = NULL;
    ck_assert_int_eq(vit_safetensors_load(fu_path("nan.safetensors"), &back), VIT_ENUM);
    ck_assert_msg(strstr(vit_last_error(), "'head.bias'"), "%s", vit_last_error());
    free(b);
    ck_assert_int_eq(vit_safetensors_load(NULL, &back), VIT_EINVAL);
    vit_model_free(m);
}
END_TEST

/* A file PyTorch wrote (tools/torch_make_fixture.py, tensors in name
 * order) imports, and the model gives PyTorch's logits on its input. */
START_TEST(import_pytorch_file)
{
    vit_model *m = NULL;
    ck_assert_msg(vit_safetensors_load("data/torch_vit.safetensors", &m) == VIT_OK, "%s",
                  vit_last_error());
    FILE *f = fopen("data/torch_vit_logits.txt", "r");
    ck_assert_ptr_nonnull(f);
    int b, h, w, c, k;
    ck_assert_int_eq(fscanf(f, "%d %d %d %d %d", &b, &h, &w, &c, &k), 5);
    const vit_config *cfg = vit_model_config(m);
    ck_assert(cfg->image_height == h && cfg->image_width == w && cfg->channels == c &&
              cfg->classes == k && cfg->pool == VIT_POOL_CLS);
    size_t ni = (size_t)b * h * w * c;
    vit_real *images = malloc(ni * sizeof *images);
    double *want = malloc((size_t)b * k * sizeof *want);
    ck_assert(images && want);
    for (size_t i = 0; i < ni; i++) {
        double v;
        ck_assert_int_eq(fscanf(f, "%lf", &v), 1);
        images[i] = (vit_real)v;
    }
    for (int i = 0; i < b * k; i++)
        ck_assert_int_eq(fscanf(f, "%lf", &want[i]), 1);
    fclose(f);
    vit_tape *tape = vit_tape_new();
    vit_tensor *y = vit_model_forward(m, tape, images, b, 0);
    ck_assert_ptr_nonnull(y);
    double scale = 0;
    for (int i = 0; i < b * k; i++)
        scale = fmax(scale, fabs(want[i]));
    for (int i = 0; i < b * k; i++)
        ck_assert_msg(fabs((double)y->data[i] - want[i]) <= 1e-5 * scale,
                      "logit %d: ours %.9g, PyTorch %.9g", i, (double)y->data[i], want[i]);
    vit_tape_free(tape);
    free(images);
    free(want);
    vit_model_free(m);
}
END_TEST

/* ------------------------------------------------------------------ main */

static Suite *export_suite(void)
{
    Suite *s = suite_create("export");
    TCase *tc = tcase_create("safetensors");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, names_shapes_offsets);
    tcase_add_test(tc, metadata);
    tcase_add_test(tc, input_metadata);
    tcase_add_test(tc, transposes_and_patch_layout);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, atomic_write_and_errors);
    tcase_add_test(tc, logits_csv);
    tcase_add_test(tc, logits_csv_many_batches);
    suite_add_tcase(s, tc);
    TCase *ti = tcase_create("import");
    tcase_set_timeout(ti, 60);
    tcase_add_test(ti, import_round_trip_bitwise);
    tcase_add_test(ti, export_fit);
    tcase_add_test(ti, export_overlap_and_lsa);
    tcase_add_test(ti, import_to_checkpoint_trains);
    tcase_add_test(ti, import_class_names);
    tcase_add_test(ti, import_old_key_names);
    tcase_add_test(ti, import_refuses_bad_files);
    tcase_add_test(ti, import_pytorch_file);
    suite_add_tcase(s, ti);
    return s;
}

int main(void) { return fu_run_suite(export_suite, "/tmp/vit-export-XXXXXX"); }
