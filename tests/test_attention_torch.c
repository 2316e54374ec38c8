/*
 * tests/test_attention_torch.c - parity of vit_mha_* and vit_sdpa_* with
 * PyTorch, against fixtures that tools/torch_fixtures.py computed once with
 * torch 1.13 in float64 (tests/data/<case>.txt; the file format is documented at
 * the top of that script).  Torch is never needed to run this test.
 *
 * Each case runs our forward and backward on the stored inputs and weights
 * (already in our [in, out] layout), feeds dL/dout = G of the stored loss
 * sum(out * G), and compares the output, the per-head attention maps and
 * every gradient with PyTorch's, to 1e-10 max absolute difference.
 *
 * Cases:  mha_nobias  nn.MultiheadAttention(8, 2, bias=False), self-attention
 *         mha_bias    same with biases
 *         mha_mask    same with a boolean attn_mask (stored as OUR allowed mask)
 *         mha_cross   cross-attention 4 queries x 6 keys, key_padding_mask
 *         sdpa        single head from torch ops, mask + additive score bias
 *
 * Run from tests/ (meson sets the working directory) so "data/..." resolves.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vit/attention.h"

#ifndef VIT_DOUBLE
#error "test_attention_torch needs the float64 build (-DVIT_DOUBLE)"
#endif
/* Fixture values are parsed as double and handed to the kernels as is. */
_Static_assert(sizeof(vit_real) == sizeof(double), "vit_real must be double");

#define TORCH_TOL 1e-10
#define FX_MAX_TENSORS 32
#define FX_MAX_NAME 32
#define FX_MAX_VALUES 1000000
#define FX_MAX_BYTES (8u << 20)

/* ---- Fixture loader --------------------------------------------------- */

typedef struct fx_tensor {
    char name[FX_MAX_NAME];
    int ndim;
    long dims[4];
    size_t n;
    double *v;
} fx_tensor;

typedef struct fixture {
    int count;
    fx_tensor t[FX_MAX_TENSORS];
} fixture;

static void fx_free(fixture *fx)
{
    for (int i = 0; i < fx->count; i++)
        free(fx->t[i].v);
    fx->count = 0;
}

/* Next whitespace-separated token of text at *pos, skipping comment lines
 * (a '#' as the first non-blank character of a line).  NUL-terminates the
 * token in place; returns NULL at the end of the text. */
static char *fx_token(char *text, size_t *pos)
{
    size_t i = *pos;
    for (;;) {
        while (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')
            i++;
        if (text[i] != '#')
            break;
        while (text[i] && text[i] != '\n')
            i++;
    }
    if (!text[i]) {
        *pos = i;
        return NULL;
    }
    char *tok = text + i;
    while (text[i] && text[i] != ' ' && text[i] != '\t' && text[i] != '\r' && text[i] != '\n')
        i++;
    if (text[i])
        text[i++] = '\0';
    *pos = i;
    return tok;
}

/* Parses a whole integer token into [lo, hi]; 0 on success. */
static int fx_long(const char *tok, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(tok, &end, 10);
    if (errno || end == tok || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Parses fixture text (modified in place) into fx.  Returns 0, or -1 with a
 * message in err; fx holds nothing on failure. */
static int fx_parse(fixture *fx, char *text, char *err, size_t errlen)
{
    size_t pos = 0, total = 0;
    char *tok;
    fx->count = 0;
    while ((tok = fx_token(text, &pos)) != NULL) {
        if (fx->count == FX_MAX_TENSORS) {
            snprintf(err, errlen, "more than %d tensors", FX_MAX_TENSORS);
            goto fail;
        }
        size_t len = strlen(tok);
        int ok = len > 0 && len < FX_MAX_NAME;
        for (size_t c = 0; ok && c < len; c++)
            ok = (tok[c] >= 'a' && tok[c] <= 'z') || (tok[c] >= 'A' && tok[c] <= 'Z') ||
                 (tok[c] >= '0' && tok[c] <= '9') || tok[c] == '_';
        if (!ok) {
            snprintf(err, errlen, "expected a tensor name, got '%.40s'", tok);
            goto fail;
        }
        for (int j = 0; j < fx->count; j++) {
            if (strcmp(fx->t[j].name, tok) == 0) {
                snprintf(err, errlen, "duplicate tensor '%s'", tok);
                goto fail;
            }
        }
        fx_tensor *t = &fx->t[fx->count];
        memset(t, 0, sizeof *t);
        memcpy(t->name, tok, len + 1);

        long nd;
        tok = fx_token(text, &pos);
        if (!tok || fx_long(tok, 1, 4, &nd)) {
            snprintf(err, errlen, "tensor '%s': bad or missing ndim (want 1..4)", t->name);
            goto fail;
        }
        t->ndim = (int)nd;
        t->n = 1;
        for (int d = 0; d < t->ndim; d++) {
            tok = fx_token(text, &pos);
            if (!tok || fx_long(tok, 1, FX_MAX_VALUES, &t->dims[d])) {
                snprintf(err, errlen, "tensor '%s': bad or missing dim %d", t->name, d);
                goto fail;
            }
            t->n *= (size_t)t->dims[d];
            if (t->n > FX_MAX_VALUES) {
                snprintf(err, errlen, "tensor '%s': too many values", t->name);
                goto fail;
            }
        }
        total += t->n;
        if (total > FX_MAX_VALUES) {
            snprintf(err, errlen, "more than %d values in the file", FX_MAX_VALUES);
            goto fail;
        }
        t->v = malloc(t->n * sizeof *t->v);
        if (!t->v) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        fx->count++; /* owns t->v from here on, so fx_free releases it */
        for (size_t i = 0; i < t->n; i++) {
            tok = fx_token(text, &pos);
            if (!tok) {
                snprintf(err, errlen, "tensor '%s': file ends after %zu of %zu values",
                         t->name, i, t->n);
                goto fail;
            }
            char *end;
            t->v[i] = strtod(tok, &end);
            if (end == tok || *end || !isfinite(t->v[i])) {
                snprintf(err, errlen, "tensor '%s': value %zu is not a finite number: '%.40s'",
                         t->name, i, tok);
                goto fail;
            }
        }
    }
    if (fx->count == 0) {
        snprintf(err, errlen, "no tensors");
        return -1;
    }
    return 0;
fail:
    fx_free(fx);
    return -1;
}

/* Reads and parses a fixture file.  Returns 0, or -1 with a message. */
static int fx_load(fixture *fx, const char *path, char *err, size_t errlen)
{
    fx->count = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
        return -1;
    }
    char *text = malloc(FX_MAX_BYTES + 1);
    if (!text) {
        fclose(f);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t got = fread(text, 1, FX_MAX_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got > FX_MAX_BYTES || memchr(text, '\0', got)) {
        free(text);
        snprintf(err, errlen, "%s", bad ? "read error" : got > FX_MAX_BYTES ?
                 "file too large" : "binary data in text fixture");
        return -1;
    }
    text[got] = '\0';
    int rc = fx_parse(fx, text, err, errlen);
    free(text);
    return rc;
}

static const fx_tensor *fx_find(const fixture *fx, const char *name)
{
    for (int i = 0; i < fx->count; i++)
        if (strcmp(fx->t[i].name, name) == 0)
            return &fx->t[i];
    return NULL;
}

/* The values of tensor `name`, after asserting it exists with exactly the
 * given shape (ndim entries of dims). */
static double *fx_get(const fixture *fx, const char *file, const char *name, int ndim,
                      const long *dims)
{
    const fx_tensor *t = fx_find(fx, name);
    ck_assert_msg(t != NULL, "fixture data/%s: missing tensor '%s'", file, name);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->dims[d] == dims[d];
    if (!same) {
        char have[64] = "", want[64] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s%ld", d ? "x" : "", t->dims[d]);
        for (int d = 0; d < ndim; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%ld", d ? "x" : "", dims[d]);
        ck_abort_msg("fixture data/%s: tensor '%s' has shape [%s], expected [%s]", file, name,
                     have, want);
    }
    return t->v;
}

#define GET(fx, file, name, ...) \
    fx_get(&(fx), (file), (name), (int)(sizeof((long[]){__VA_ARGS__}) / sizeof(long)), \
           (long[]){__VA_ARGS__})

static void fx_open(fixture *fx, const char *file)
{
    char path[256], err[256];
    snprintf(path, sizeof path, "data/%s", file);
    int rc = fx_load(fx, path, err, sizeof err);
    ck_assert_msg(rc == 0, "fixture %s: %s (regenerate with /usr/bin/python3 "
                  "tools/torch_fixtures.py; the test runs from tests/)", path, err);
}

/* A 0/1 mask tensor as unsigned char (caller frees). */
static unsigned char *fx_mask(const char *file, const char *name, const double *v, size_t n)
{
    unsigned char *m = malloc(n);
    ck_assert_msg(m != NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(v[i] == 0.0 || v[i] == 1.0,
                      "fixture data/%s: mask '%s' entry %zu is %g, not 0 or 1", file, name, i, v[i]);
        m[i] = (unsigned char)(v[i] != 0.0);
    }
    return m;
}

/* ---- Comparison ------------------------------------------------------- */

/* Tracks every tensor of a case so all differences are printed before the
 * case fails. */
typedef struct parity {
    const char *file;
    int failed;
    char first[160];
} parity;

static double max_abs_diff(const vit_real *a, const double *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d; /* NaN counts as a mismatch */
    }
    return worst;
}

static void compare(parity *p, const char *name, const vit_real *ours, const double *torch_,
                    size_t n)
{
    double d = max_abs_diff(ours, torch_, n);
    int ok = d <= TORCH_TOL;
    printf("torch parity %-14s %-6s n=%-4zu max_abs_diff=%.3e %s\n", p->file, name, n, d,
           ok ? "ok" : "MISMATCH");
    fflush(stdout);
    if (!ok && p->failed++ == 0)
        snprintf(p->first, sizeof p->first, "%s: max_abs_diff %.3e > %.0e", name, d, TORCH_TOL);
}

static void parity_end(const parity *p)
{
    ck_assert_msg(p->failed == 0, "data/%s: %d tensor(s) disagree with PyTorch, first %s",
                  p->file, p->failed, p->first);
}

/* ---- Multi-head attention cases (a-d) --------------------------------- */

/* The views' W_Q, W_K, W_V are column blocks of the joint input matrix:
 * an E x E matrix to or from rows ld apart. */
static void put_block(vit_real *dst, int ld, const double *src, int E)
{
    for (int i = 0; i < E; i++)
        memcpy(dst + (size_t)i * ld, src + (size_t)i * E, (size_t)E * sizeof *dst);
}

static vit_real *get_block(const vit_real *src, int ld, int E)
{
    vit_real *o = gc_zeros((size_t)E * E);
    for (int i = 0; i < E; i++)
        memcpy(o + (size_t)i * E, src + (size_t)i * ld, (size_t)E * sizeof *o);
    return o;
}

/* Compares the E x E block of rows ld apart with the fixture's matrix. */
static void compare_block(parity *p, const char *name, const vit_real *ours, int ld,
                          const double *torch_, int E)
{
    vit_real *dense = get_block(ours, ld, E);
    compare(p, name, dense, torch_, (size_t)E * E);
    free(dense);
}

static void run_mha_case(const char *file)
{
    fixture fx;
    fx_open(&fx, file);

    const double *cfg = GET(fx, file, "config", 6);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(cfg[i] == floor(cfg[i]) && cfg[i] >= 0 && cfg[i] <= 4096,
                      "fixture data/%s: config[%d] = %g is not a small integer", file, i, cfg[i]);
    const long B = (long)cfg[0], nq = (long)cfg[1], nk = (long)cfg[2], E = (long)cfg[3];
    const long H = (long)cfg[4], hb = (long)cfg[5];
    ck_assert_msg(B > 0 && nq > 0 && nk > 0 && E > 0 && H > 0 && E % H == 0 && hb <= 1,
                  "fixture data/%s: inconsistent config", file);
    const int cross = fx_find(&fx, "x_q") != NULL;
    if (!cross)
        ck_assert_msg(nq == nk, "fixture data/%s: self-attention with n_q != n_k", file);

    const double *x_q = cross ? GET(fx, file, "x_q", B, nq, E) : GET(fx, file, "x", B, nq, E);
    const double *x_kv = cross ? GET(fx, file, "x_kv", B, nk, E) : x_q;
    const double *G = GET(fx, file, "G", B, nq, E);

    vit_mha m;
    memset(&m, 0, sizeof m);
    m.batch = (int)B;
    m.n_q = (int)nq;
    m.n_k = (int)nk;
    m.d_model = (int)E;
    m.d_kv = 0; /* = d_model: PyTorch's packed in_proj_weight needs kdim == embed_dim */
    m.heads = (int)H;
    m.has_bias = (int)hb;
    m.scale = 0; /* 1/sqrt(d_model / heads), PyTorch's scaling */
    unsigned char *allowed = NULL, *key_valid = NULL;
    if (fx_find(&fx, "allowed")) {
        allowed = fx_mask(file, "allowed", GET(fx, file, "allowed", nq, nk), (size_t)(nq * nk));
        m.mask.allowed = allowed;
    }
    if (fx_find(&fx, "key_valid")) {
        key_valid = fx_mask(file, "key_valid", GET(fx, file, "key_valid", B, nk), (size_t)(B * nk));
        m.mask.key_valid = key_valid;
    }
    ck_assert_msg(vit_mha_check(&m) == VIT_OK, "vit_mha_check: %s", vit_last_error());

    /* Parameters in our flat layout, filled tensor by tensor through the views. */
    const size_t np = vit_mha_param_count(&m);
    ck_assert_uint_eq(np, (size_t)(4 * E * E + (hb ? 4 * E : 0)));
    vit_real *params = gc_zeros(np), *grads = gc_zeros(np);
    vit_mha_views pv, gv;
    ck_assert_int_eq(vit_mha_views_of(&m, params, &pv), VIT_OK);
    ck_assert_int_eq(vit_mha_views_of(&m, grads, &gv), VIT_OK);
    const size_t ee = (size_t)(E * E), e = (size_t)E;
    ck_assert_int_eq(pv.row_stride_q, 3 * (int)E); /* d_kv = d_model: one joint W_QKV */
    ck_assert_int_eq(pv.row_stride_kv, 3 * (int)E);
    put_block(pv.w_q_cols, pv.row_stride_q, GET(fx, file, "W_Q", E, E), (int)E);
    put_block(pv.w_k_cols, pv.row_stride_kv, GET(fx, file, "W_K", E, E), (int)E);
    put_block(pv.w_v_cols, pv.row_stride_kv, GET(fx, file, "W_V", E, E), (int)E);
    memcpy(pv.w_o, GET(fx, file, "W_O", E, E), ee * sizeof(vit_real));
    if (hb) {
        ck_assert_msg(pv.b_q && pv.b_k && pv.b_v && pv.b_o, "bias views are NULL with has_bias");
        memcpy(pv.b_q, GET(fx, file, "b_Q", E), e * sizeof(vit_real));
        memcpy(pv.b_k, GET(fx, file, "b_K", E), e * sizeof(vit_real));
        memcpy(pv.b_v, GET(fx, file, "b_V", E), e * sizeof(vit_real));
        memcpy(pv.b_o, GET(fx, file, "b_O", E), e * sizeof(vit_real));
    }

    /* Forward. */
    const size_t ny = (size_t)(B * nq * E), nkv = (size_t)(B * nk * E);
    vit_real *y = gc_zeros(ny);
    vit_real *cache = gc_zeros(vit_mha_cache_size(&m));
    int rc = vit_mha_forward(&m, params, y, x_q, x_kv, cache);
    ck_assert_msg(rc == VIT_OK, "vit_mha_forward: %s (%s)", vit_status_name(rc), vit_last_error());
    const vit_real *probs = vit_mha_probs(&m, cache);
    ck_assert_msg(probs != NULL, "vit_mha_probs returned NULL");

    parity p = {file, 0, ""};
    compare(&p, "out", y, GET(fx, file, "out", B, nq, E), ny);
    compare(&p, "probs", probs, GET(fx, file, "probs", B, H, nq, nk), (size_t)(B * H * nq * nk));

    /* Backward of sum(out * G): dL/dout = G.  Self-attention passes one dx
     * buffer for both inputs, which then receives both contributions. */
    vit_real *dx_q = gc_zeros(ny);
    vit_real *dx_kv = cross ? gc_zeros(nkv) : dx_q;
    vit_real *work = gc_zeros(vit_mha_work_size(&m));
    rc = vit_mha_backward(&m, params, grads, dx_q, dx_kv, NULL, G, x_q, x_kv, cache, work);
    ck_assert_msg(rc == VIT_OK, "vit_mha_backward: %s (%s)", vit_status_name(rc), vit_last_error());

    if (cross) {
        compare(&p, "dx_q", dx_q, GET(fx, file, "dx_q", B, nq, E), ny);
        compare(&p, "dx_kv", dx_kv, GET(fx, file, "dx_kv", B, nk, E), nkv);
    } else {
        compare(&p, "dx", dx_q, GET(fx, file, "dx", B, nq, E), ny);
    }
    compare_block(&p, "dW_Q", gv.w_q_cols, gv.row_stride_q, GET(fx, file, "dW_Q", E, E), (int)E);
    compare_block(&p, "dW_K", gv.w_k_cols, gv.row_stride_kv, GET(fx, file, "dW_K", E, E), (int)E);
    compare_block(&p, "dW_V", gv.w_v_cols, gv.row_stride_kv, GET(fx, file, "dW_V", E, E), (int)E);
    compare(&p, "dW_O", gv.w_o, GET(fx, file, "dW_O", E, E), ee);
    if (hb) {
        compare(&p, "db_Q", gv.b_q, GET(fx, file, "db_Q", E), e);
        compare(&p, "db_K", gv.b_k, GET(fx, file, "db_K", E), e);
        compare(&p, "db_V", gv.b_v, GET(fx, file, "db_V", E), e);
        compare(&p, "db_O", gv.b_o, GET(fx, file, "db_O", E), e);
    }
    parity_end(&p);

    free(work);
    if (cross)
        free(dx_kv);
    free(dx_q);
    free(cache);
    free(y);
    free(grads);
    free(params);
    free(allowed);
    free(key_valid);
    fx_free(&fx);
}

START_TEST(test_mha_nobias) { run_mha_case("mha_nobias.txt"); }
END_TEST

START_TEST(test_mha_bias) { run_mha_case("mha_bias.txt"); }
END_TEST

START_TEST(test_mha_mask) { run_mha_case("mha_mask.txt"); }
END_TEST

START_TEST(test_mha_cross) { run_mha_case("mha_cross.txt"); }
END_TEST

/* ---- Attention core, single head (case e) ------------------------------ */

START_TEST(test_sdpa)
{
    const char *file = "sdpa.txt";
    fixture fx;
    fx_open(&fx, file);

    const double *cfg = GET(fx, file, "config", 5);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(cfg[i] == floor(cfg[i]) && cfg[i] >= 1 && cfg[i] <= 4096,
                      "fixture data/%s: config[%d] = %g is not a small integer", file, i, cfg[i]);
    const long B = (long)cfg[0], nq = (long)cfg[1], nk = (long)cfg[2], d = (long)cfg[3];
    ck_assert_msg(cfg[4] == 1, "fixture data/%s: expected a single head", file);

    const double *Q = GET(fx, file, "Q", B, nq, d);
    const double *K = GET(fx, file, "K", B, nk, d);
    const double *V = GET(fx, file, "V", B, nk, d);
    const double *bias = GET(fx, file, "bias", nq, nk);
    const double *G = GET(fx, file, "G", B, nq, d);
    unsigned char *allowed = fx_mask(file, "allowed", GET(fx, file, "allowed", nq, nk),
                                     (size_t)(nq * nk));

    vit_sdpa a;
    memset(&a, 0, sizeof a);
    a.batch = (int)B;
    a.heads = 1;
    a.n_q = (int)nq;
    a.n_k = (int)nk;
    a.d_k = (int)d;
    a.d_v = (int)d;
    a.scale = 0; /* 1/sqrt(d), as the torch reference */
    a.mask.allowed = allowed;
    a.bias = bias;
    a.bias_heads = 1;

    const size_t nqd = (size_t)(B * nq * d), nkd = (size_t)(B * nk * d);
    const size_t npr = (size_t)(B * nq * nk), nb = (size_t)(nq * nk);
    vit_real *out = gc_zeros(nqd), *probs = gc_zeros(npr);
    int rc = vit_sdpa_forward(&a, out, probs, Q, K, V);
    ck_assert_msg(rc == VIT_OK, "vit_sdpa_forward: %s (%s)", vit_status_name(rc), vit_last_error());

    parity p = {file, 0, ""};
    compare(&p, "out", out, GET(fx, file, "out", B, nq, d), nqd);
    compare(&p, "probs", probs, GET(fx, file, "probs", B, 1, nq, nk), npr);

    vit_real *dq = gc_zeros(nqd), *dk = gc_zeros(nkd), *dv = gc_zeros(nkd);
    vit_real *db = gc_zeros(nb), *work = gc_zeros(vit_sdpa_work_size(&a));
    rc = vit_sdpa_backward(&a, dq, dk, dv, db, G, probs, Q, K, V, work);
    ck_assert_msg(rc == VIT_OK, "vit_sdpa_backward: %s (%s)", vit_status_name(rc), vit_last_error());

    compare(&p, "dQ", dq, GET(fx, file, "dQ", B, nq, d), nqd);
    compare(&p, "dK", dk, GET(fx, file, "dK", B, nk, d), nkd);
    compare(&p, "dV", dv, GET(fx, file, "dV", B, nk, d), nkd);
    compare(&p, "dbias", db, GET(fx, file, "dbias", nq, nk), nb);
    parity_end(&p);

    free(work);
    free(db);
    free(dv);
    free(dk);
    free(dq);
    free(probs);
    free(out);
    free(allowed);
    fx_free(&fx);
}
END_TEST

/* ---- The loader itself ------------------------------------------------- */

/* Malformed fixtures must be rejected with a message, never crash or be
 * half-accepted; a well-formed one must parse exactly. */
START_TEST(test_fixture_loader)
{
    static const char *const bad[] = {
        "",                               /* no tensors */
        "# only a comment\n",
        "x 2 2 2\n1 2 3\n",               /* too few values */
        "x 1 2\n1 abc\n",                 /* not a number */
        "x 1 2\n1 2.5e\n",                /* trailing junk in a number */
        "x 1 2\n1 nan\n",                 /* not finite */
        "x 0\n",                          /* ndim out of range */
        "x 5 1 1 1 1 1\n1\n",
        "x 2 3 0\n",                      /* zero dim */
        "x 1 -3\n1 2 3\n",
        "x 1\n",                          /* missing dim */
        "x 1 2\n1 2\nx 1 1\n3\n",         /* duplicate name */
        "x 1 2\n1 2 3\n",                 /* a stray value is not a name */
        "x-y 1 1\n1\n",                   /* bad name */
    };
    char err[256];
    fixture fx;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", bad[i]);
        err[0] = '\0';
        int rc = fx_parse(&fx, buf, err, sizeof err);
        ck_assert_msg(rc != 0, "malformed fixture %zu accepted: \"%s\"", i, bad[i]);
        ck_assert_msg(err[0] != '\0', "malformed fixture %zu rejected without a message", i);
        ck_assert_int_eq(fx.count, 0);
    }

    char good[] = "# c\n\n  a 2 2 3\n1 2 3\n4 5 6.5e-1\n# mid\nb 1 1\n-0.125\n";
    ck_assert_msg(fx_parse(&fx, good, err, sizeof err) == 0, "good fixture rejected: %s", err);
    ck_assert_int_eq(fx.count, 2);
    const fx_tensor *ta = fx_find(&fx, "a"), *tb = fx_find(&fx, "b");
    ck_assert(ta && tb && ta->ndim == 2 && ta->dims[0] == 2 && ta->dims[1] == 3 && ta->n == 6);
    ck_assert(ta->v[0] == 1.0 && ta->v[5] == 0.65 && tb->n == 1 && tb->v[0] == -0.125);
    fx_free(&fx);

    ck_assert_int_ne(fx_load(&fx, "data/no_such_fixture.txt", err, sizeof err), 0);
    ck_assert_msg(strstr(err, "cannot open") != NULL, "unexpected message: %s", err);
}
END_TEST

static Suite *torch_suite(void)
{
    Suite *s = suite_create("test_attention_torch");
    TCase *tc = tcase_create("parity");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fixture_loader);
    tcase_add_test(tc, test_mha_nobias);
    tcase_add_test(tc, test_mha_bias);
    tcase_add_test(tc, test_mha_mask);
    tcase_add_test(tc, test_mha_cross);
    tcase_add_test(tc, test_sdpa);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(torch_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
