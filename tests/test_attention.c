/*
 * tests/test_attention.c - the attention core (vit_sdpa_*), its masks and
 * the multi-head layer (vit_mha_*), in the float64 build.
 *
 *  - forward against a plain-loop reference written here;
 *  - gradients of every input and parameter by central differences
 *    (gc_check) under each kind of mask, score bias and cross-attention;
 *  - properties: permutation equivariance, exact zeros outside a window,
 *    rows summing to 1, mask counts, the shifted window mask against a
 *    reconstruction that really rolls the grid, parameter counts;
 *  - argument errors.
 */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_util.h"
#include "gradcheck.h"
#include "vit/attention.h"

/* ---- Plain-loop references ------------------------------------------------ */

/* out and probs of softmax(s Q K^T + B) V, one score at a time. */
static void ref_sdpa(const vit_sdpa *a, vit_real *out, vit_real *probs,
                     const vit_real *q, const vit_real *k, const vit_real *v)
{
    int B = a->batch, H = a->heads, nq = a->n_q, nk = a->n_k, dk = a->d_k, dv = a->d_v;
    double scale = a->scale != 0 ? a->scale : 1.0 / sqrt((double)dk);
    double *s = malloc((size_t)nk * sizeof *s);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < nq; i++) {
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < nk; j++) {
                    double dot = 0.0;
                    for (int c = 0; c < dk; c++)
                        dot += q[((size_t)b * nq + i) * H * dk + h * dk + c] *
                               k[((size_t)b * nk + j) * H * dk + h * dk + c];
                    s[j] = (a->head_scale ? a->head_scale[h] : scale) * dot;
                    if (a->bias) {
                        int hb = a->bias_heads == 1 ? 0 : h;
                        s[j] += a->bias[((size_t)hb * nq + i) * nk + j];
                    }
                    if (ref_allowed(a, b, i, j) && s[j] > mx) mx = s[j];
                }
                vit_real *p = probs + (((size_t)b * H + h) * nq + i) * nk;
                for (int j = 0; j < nk; j++) {
                    p[j] = ref_allowed(a, b, i, j) ? exp(s[j] - mx) : 0.0;
                    sum += p[j];
                }
                for (int j = 0; j < nk; j++) p[j] = sum > 0 ? p[j] / sum : 0.0;
                for (int c = 0; c < dv; c++) {
                    double o = 0.0;
                    for (int j = 0; j < nk; j++)
                        o += p[j] * v[((size_t)b * nk + j) * H * dv + h * dv + c];
                    out[((size_t)b * nq + i) * H * dv + h * dv + c] = o;
                }
            }
    free(s);
}

/* y[rows, out] = x W + b, by loops. */
/* y[rows, out] = x[rows, in] W + b, W's rows ldw apart (a column block of
 * the joint projection matrices of vit_mha, or dense with ldw = out). */
static void ref_dense(vit_real *y, const vit_real *x, const vit_real *w, int ldw,
                      const vit_real *b, int rows, int in, int out)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < out; c++) {
            double acc = b ? b[c] : 0.0;
            for (int t = 0; t < in; t++) acc += x[(size_t)r * in + t] * w[(size_t)t * ldw + c];
            y[(size_t)r * out + c] = acc;
        }
}

/* Random 0/1 mask with P(1) = p, plus the diagonal so no row is empty. */
static unsigned char *random_mask(size_t items, int rows, int cols, double p, uint64_t *seed)
{
    unsigned char *m = malloc(items * rows * cols);
    for (size_t t = 0; t < items; t++)
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++)
                m[(t * rows + i) * cols + j] = i == j || gc_uniform(seed) < p;
    return m;
}

/* ---- Attention core: gradient harness ------------------------------------ */

typedef struct {
    vit_sdpa a;
    vit_real *q, *k, *v, *bias, *w, *out, *probs;
    size_t nq, nk, nv, nout, np, nb;
} sdpa_case;

static void sdpa_case_init(sdpa_case *c, vit_sdpa a, int with_bias, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->a = a;
    size_t B = a.batch, H = a.heads;
    c->nq = B * a.n_q * H * a.d_k;
    c->nk = B * a.n_k * H * a.d_k;
    c->nv = B * a.n_k * H * a.d_v;
    c->nout = B * a.n_q * H * a.d_v;
    c->np = B * H * a.n_q * a.n_k;
    c->q = gc_zeros(c->nq);
    c->k = gc_zeros(c->nk);
    c->v = gc_zeros(c->nv);
    c->w = gc_zeros(c->nout);
    c->out = gc_zeros(c->nout);
    c->probs = gc_zeros(c->np);
    gc_fill(c->q, c->nq, &seed, 1.0);
    gc_fill(c->k, c->nk, &seed, 1.0);
    gc_fill(c->v, c->nv, &seed, 1.0);
    gc_fill(c->w, c->nout, &seed, 1.0);
    if (with_bias) {
        c->nb = (size_t)a.bias_heads * a.n_q * a.n_k;
        c->bias = gc_zeros(c->nb);
        gc_fill(c->bias, c->nb, &seed, 1.0);
        c->a.bias = c->bias;
    } else {
        c->a.bias = NULL;
    }
}

static void sdpa_case_free(sdpa_case *c)
{
    free(c->q); free(c->k); free(c->v); free(c->bias);
    free(c->w); free(c->out); free(c->probs);
}

/* L = sum w .* out, so dL/dout = w. */
static double sdpa_loss(void *ctx)
{
    sdpa_case *c = ctx;
    if (vit_sdpa_forward(&c->a, c->out, c->probs, c->q, c->k, c->v) != VIT_OK) return NAN;
    return gc_dot(c->w, c->out, c->nout);
}

static void check_grad(const char *tag, const char *what, vit_real *x, const vit_real *g,
                       size_t n, gc_loss_fn f, void *ctx)
{
    char name[96];
    snprintf(name, sizeof name, "%s %s", tag, what);
    ck_assert_msg(gc_all_finite(g, n), "%s: non-finite analytic gradient", name);
    double err = gc_check(name, x, g, n, f, ctx);
    ck_assert_msg(err <= GC_TOL, "%s: max_rel %.3e > %.1e", name, err, GC_TOL);
}

/* Forward against the reference, row sums, then dq, dk, dv, dbias against
 * central differences. */
static void run_sdpa_case(const char *tag, vit_sdpa a, int with_bias, uint64_t seed)
{
    sdpa_case c;
    sdpa_case_init(&c, a, with_bias, seed);
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);

    vit_real *rout = gc_zeros(c.nout), *rprobs = gc_zeros(c.np);
    ref_sdpa(&c.a, rout, rprobs, c.q, c.k, c.v);
    ck_assert_msg(gc_max_abs_diff(c.out, rout, c.nout) <= 1e-12, "%s: out differs from reference",
                  tag);
    ck_assert_msg(gc_max_abs_diff(c.probs, rprobs, c.np) <= 1e-12,
                  "%s: probs differ from reference", tag);
    free(rout);
    free(rprobs);

    vit_real *dq = gc_zeros(c.nq), *dk = gc_zeros(c.nk), *dv = gc_zeros(c.nv);
    vit_real *db = with_bias ? gc_zeros(c.nb) : NULL;
    vit_real *work = gc_zeros(vit_sdpa_work_size(&c.a));
    ck_assert_int_eq(vit_sdpa_backward(&c.a, dq, dk, dv, db, c.w, c.probs, c.q, c.k, c.v, work),
                     VIT_OK);
    check_grad(tag, "dq", c.q, dq, c.nq, sdpa_loss, &c);
    check_grad(tag, "dk", c.k, dk, c.nk, sdpa_loss, &c);
    check_grad(tag, "dv", c.v, dv, c.nv, sdpa_loss, &c);
    if (with_bias) check_grad(tag, "dbias", c.bias, db, c.nb, sdpa_loss, &c);

    free(dq); free(dk); free(dv); free(db); free(work);
    sdpa_case_free(&c);
}

START_TEST(test_sdpa_grad_nomask)
{
    run_sdpa_case("sdpa/nomask", sdpa_shape(2, 2, 5, 5, 3, 3), 0, 11);
}
END_TEST

START_TEST(test_sdpa_grad_explicit_scale)
{
    vit_sdpa a = sdpa_shape(2, 2, 5, 5, 3, 3);
    a.scale = 0.8;
    run_sdpa_case("sdpa/scale0.8", a, 0, 12);
}
END_TEST

START_TEST(test_sdpa_grad_allowed_shared)
{
    uint64_t s = 21;
    unsigned char *m = random_mask(1, 6, 6, 0.5, &s);
    vit_sdpa a = sdpa_shape(2, 2, 6, 6, 3, 3);
    a.mask.allowed = m;
    run_sdpa_case("sdpa/allowed", a, 0, 22);
    free(m);
}
END_TEST

START_TEST(test_sdpa_grad_allowed_per_item)
{
    uint64_t s = 31;
    unsigned char *m = random_mask(2, 6, 6, 0.5, &s);
    vit_sdpa a = sdpa_shape(2, 2, 6, 6, 3, 3);
    a.mask.allowed = m;
    a.mask.allowed_per_item = 1;
    run_sdpa_case("sdpa/allowed_per_item", a, 0, 32);
    free(m);
}
END_TEST

START_TEST(test_sdpa_grad_key_valid)
{
    /* Item 0 has 6 real keys, item 1 only 4 (two padding). */
    unsigned char kv[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
    vit_sdpa a = sdpa_shape(2, 2, 6, 6, 3, 3);
    a.mask.key_valid = kv;
    run_sdpa_case("sdpa/key_valid", a, 0, 42);
}
END_TEST

START_TEST(test_sdpa_grad_causal)
{
    vit_sdpa a = sdpa_shape(2, 2, 6, 6, 3, 3);
    a.mask.causal = 1;
    run_sdpa_case("sdpa/causal", a, 0, 52);
}
END_TEST

START_TEST(test_sdpa_grad_window)
{
    /* 2 x 4 grid of tokens, 2 x 2 windows. */
    unsigned char m[64];
    vit_sdpa a = sdpa_shape(2, 2, 8, 8, 3, 3);
    a.mask.allowed = m;
    ck_assert_int_eq(vit_mask_window(m, 2, 4, 2, 2, 0, 0), VIT_OK);
    run_sdpa_case("sdpa/window", a, 0, 62);
    ck_assert_int_eq(vit_mask_window(m, 2, 4, 2, 2, 1, 1), VIT_OK);
    run_sdpa_case("sdpa/window_shift", a, 0, 63);
    /* columns shifted, rows not (as torchvision when one window covers
     * the rows), and the other way round */
    ck_assert_int_eq(vit_mask_window(m, 2, 4, 2, 2, 0, 1), VIT_OK);
    run_sdpa_case("sdpa/window_shift_w", a, 0, 64);
    ck_assert_int_eq(vit_mask_window(m, 2, 4, 2, 2, 1, 0), VIT_OK);
    run_sdpa_case("sdpa/window_shift_h", a, 0, 65);
    /* windows of 1 row by 2 columns, and 2 rows by 4 (one across the
     * width), shifted */
    ck_assert_int_eq(vit_mask_window(m, 2, 4, 1, 2, 0, 1), VIT_OK);
    run_sdpa_case("sdpa/window_1x2_shift_w", a, 0, 66);
    ck_assert_int_eq(vit_mask_window(m, 2, 4, 2, 4, 1, 0), VIT_OK);
    run_sdpa_case("sdpa/window_2x4_shift_h", a, 0, 67);
}
END_TEST

START_TEST(test_sdpa_grad_bias_shared)
{
    vit_sdpa a = sdpa_shape(2, 2, 5, 5, 3, 3);
    a.bias_heads = 1;
    run_sdpa_case("sdpa/bias_heads=1", a, 1, 72);
}
END_TEST

START_TEST(test_sdpa_grad_bias_per_head)
{
    unsigned char kv[10] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 1};
    vit_sdpa a = sdpa_shape(2, 3, 5, 5, 3, 3);
    a.bias_heads = 3;
    a.mask.key_valid = kv;
    run_sdpa_case("sdpa/bias_heads=H", a, 1, 82);
}
END_TEST

START_TEST(test_sdpa_grad_cross)
{
    /* n_q != n_k and d_k != d_v, with padding on the key side and a bias. */
    unsigned char kv[14] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
    vit_sdpa a = sdpa_shape(2, 2, 4, 7, 3, 5);
    a.mask.key_valid = kv;
    a.bias_heads = 2;
    run_sdpa_case("sdpa/cross", a, 1, 92);
}
END_TEST

START_TEST(test_sdpa_grad_combined)
{
    /* Every restriction at once: allowed per item AND key_valid AND causal. */
    uint64_t s = 101;
    unsigned char *m = random_mask(2, 6, 6, 0.7, &s);
    unsigned char kv[12] = {1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0};
    vit_sdpa a = sdpa_shape(2, 2, 6, 6, 3, 3);
    a.mask.allowed = m;
    a.mask.allowed_per_item = 1;
    a.mask.key_valid = kv;
    a.mask.causal = 1;
    a.bias_heads = 1;
    run_sdpa_case("sdpa/combined", a, 1, 102);
    free(m);
}
END_TEST

START_TEST(test_sdpa_fully_masked_row)
{
    unsigned char m[36];
    memset(m, 1, sizeof m);
    memset(m + 2 * 6, 0, 6); /* query 2 sees nothing */
    vit_sdpa a = sdpa_shape(2, 2, 6, 6, 3, 3);
    a.mask.allowed = m;
    a.bias_heads = 2;

    sdpa_case c;
    sdpa_case_init(&c, a, 1, 111);
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    ck_assert(gc_all_finite(c.out, c.nout) && gc_all_finite(c.probs, c.np));
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 6; j++)
                ck_assert(c.probs[((b * 2 + h) * 6 + 2) * 6 + j] == 0.0);
            for (int t = 0; t < 3; t++)
                ck_assert(c.out[(b * 6 + 2) * 6 + h * 3 + t] == 0.0);
        }
    sdpa_case_free(&c);
    /* Gradients are finite (checked inside) and match differences; the
     * masked row contributes nothing anywhere. */
    run_sdpa_case("sdpa/fully_masked_row", a, 1, 111);
}
END_TEST

/* ---- Attention core: other behaviour -------------------------------------- */

START_TEST(test_sdpa_backward_accumulates_and_work)
{
    vit_sdpa a = sdpa_shape(2, 2, 5, 4, 3, 2);
    a.bias_heads = 1;
    sdpa_case c;
    sdpa_case_init(&c, a, 1, 121);
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    size_t n[4] = {c.nq, c.nk, c.nv, c.nb};
    vit_real *g1[4], *g2[4];
    for (int t = 0; t < 4; t++) { g1[t] = gc_zeros(n[t]); g2[t] = gc_zeros(n[t]); }
    vit_real *work = gc_zeros(vit_sdpa_work_size(&c.a));
    ck_assert_uint_eq(vit_sdpa_work_size(&c.a), 5 * 4);
    /* Once with the caller's work, twice with work = NULL: 2 g1 == g2. */
    ck_assert_int_eq(vit_sdpa_backward(&c.a, g1[0], g1[1], g1[2], g1[3], c.w, c.probs,
                                       c.q, c.k, c.v, work), VIT_OK);
    for (int r = 0; r < 2; r++)
        ck_assert_int_eq(vit_sdpa_backward(&c.a, g2[0], g2[1], g2[2], g2[3], c.w, c.probs,
                                           c.q, c.k, c.v, NULL), VIT_OK);
    for (int t = 0; t < 4; t++) {
        double m = 0.0;
        for (size_t i = 0; i < n[t]; i++) {
            ck_assert(g1[t][i] != 0.0);
            m = fmax(m, fabs(2 * g1[t][i] - g2[t][i]));
        }
        ck_assert_msg(m <= 1e-14, "tensor %d: second backward did not accumulate", t);
    }
    /* NULL gradients are skipped. */
    ck_assert_int_eq(vit_sdpa_backward(&c.a, NULL, NULL, NULL, NULL, c.w, c.probs,
                                       c.q, c.k, c.v, NULL), VIT_OK);
    for (int t = 0; t < 4; t++) { free(g1[t]); free(g2[t]); }
    free(work);
    sdpa_case_free(&c);
}
END_TEST

START_TEST(test_sdpa_causal_flag_matches_mask)
{
    /* The causal flag and the explicit causal matrix are two routes to the
     * same result; cross-check both against the definition j <= i. */
    unsigned char m[5 * 7];
    ck_assert_int_eq(vit_mask_causal(m, 5, 7), VIT_OK);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 7; j++) ck_assert_int_eq(m[i * 7 + j], j <= i);
    vit_sdpa a = sdpa_shape(2, 2, 5, 7, 3, 4), b = a;
    a.mask.causal = 1;
    b.mask.allowed = m;
    sdpa_case c;
    sdpa_case_init(&c, a, 0, 131);
    vit_real *out2 = gc_zeros(c.nout), *probs2 = gc_zeros(c.np);
    ck_assert_int_eq(vit_sdpa_forward(&a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    ck_assert_int_eq(vit_sdpa_forward(&b, out2, probs2, c.q, c.k, c.v), VIT_OK);
    ck_assert(gc_max_abs_diff(c.out, out2, c.nout) == 0.0);
    ck_assert(gc_max_abs_diff(c.probs, probs2, c.np) == 0.0);
    free(out2); free(probs2);
    sdpa_case_free(&c);
}
END_TEST

START_TEST(test_sdpa_nonfinite)
{
    vit_sdpa a = sdpa_shape(1, 2, 3, 3, 2, 2);
    sdpa_case c;
    sdpa_case_init(&c, a, 0, 141);
    /* k, q [1, 3, 2 heads * 2]: k[5] is key 1 of head 0, q[10] query 2 of
     * head 1; the message names the first bad score in (item, head, query,
     * key) order */
    c.k[5] = NAN;
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_ENUM);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "non-finite"));
    ck_assert_msg(strstr(vit_last_error(), "item 0, head 0, query 0, key 1"), "%s",
                  vit_last_error());
    /* masked or not, every score must be finite: key 1 is hidden from
     * query 0 by a causal mask, and its score is still the first named */
    c.a.mask.causal = 1;
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_ENUM);
    ck_assert_msg(strstr(vit_last_error(), "item 0, head 0, query 0, key 1"), "%s",
                  vit_last_error());
    c.a.mask.causal = 0;
    c.k[5] = 0.5;
    c.q[0] = INFINITY;
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_ENUM);
    ck_assert_msg(strstr(vit_last_error(), "head 0, query 0, key 0"), "%s", vit_last_error());
    c.q[0] = 0.5;
    c.q[10] = NAN;
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_ENUM);
    ck_assert_msg(strstr(vit_last_error(), "head 1, query 2, key 0"), "%s", vit_last_error());
    c.q[10] = 0.5;
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    sdpa_case_free(&c);
}
END_TEST

/* ---- Learnable score scale ------------------------------------------------ */

/* The scale as a learnable input: with per_head, head_scale [H] (distinct
 * values, one negative); else the shared a.scale.  Forward against the
 * reference, then dscale and (with the scale learnable) dq, dk, dv, dbias
 * against central differences; dq, dk, dv, dbias must equal those of
 * vit_sdpa_backward bitwise (the scale's gradient adds, never perturbs). */
static void run_scale_case(const char *tag, vit_sdpa a, int with_bias, int per_head,
                           uint64_t seed)
{
    sdpa_case c;
    sdpa_case_init(&c, a, with_bias, seed);
    const int H = a.heads;
    vit_real hs[8];
    ck_assert_int_le(H, 8);
    for (int h = 0; h < H; h++) hs[h] = (vit_real)(0.9 - 0.45 * h);
    vit_real *x = per_head ? hs : &c.a.scale;
    if (per_head) c.a.head_scale = hs;
    else c.a.scale = (vit_real)0.7;
    size_t ns = per_head ? (size_t)H : 1;

    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    vit_real *rout = gc_zeros(c.nout), *rprobs = gc_zeros(c.np);
    ref_sdpa(&c.a, rout, rprobs, c.q, c.k, c.v);
    ck_assert_msg(gc_max_abs_diff(c.out, rout, c.nout) <= 1e-12, "%s: out differs from reference",
                  tag);
    ck_assert_msg(gc_max_abs_diff(c.probs, rprobs, c.np) <= 1e-12, "%s: probs differ", tag);

    vit_real *dq = gc_zeros(c.nq), *dk = gc_zeros(c.nk), *dv = gc_zeros(c.nv);
    vit_real *db = with_bias ? gc_zeros(c.nb) : NULL;
    vit_real *dq0 = gc_zeros(c.nq), *dk0 = gc_zeros(c.nk), *dv0 = gc_zeros(c.nv);
    vit_real *db0 = with_bias ? gc_zeros(c.nb) : NULL;
    vit_real ds[8] = {0};
    ck_assert_int_eq(vit_sdpa_backward_scale(&c.a, dq, dk, dv, db, ds, c.w, c.probs, c.q, c.k,
                                             c.v, NULL), VIT_OK);
    ck_assert_int_eq(vit_sdpa_backward(&c.a, dq0, dk0, dv0, db0, c.w, c.probs, c.q, c.k, c.v,
                                       NULL), VIT_OK);
    ck_assert(memcmp(dq, dq0, c.nq * sizeof *dq) == 0);
    ck_assert(memcmp(dk, dk0, c.nk * sizeof *dk) == 0);
    ck_assert(memcmp(dv, dv0, c.nv * sizeof *dv) == 0);
    if (with_bias) ck_assert(memcmp(db, db0, c.nb * sizeof *db) == 0);
    for (size_t h = 0; h < ns; h++)
        ck_assert_msg(fabs(ds[h]) > 1e-3, "%s: dscale[%zu] = %g is too small to test", tag, h,
                      (double)ds[h]);
    check_grad(tag, "dscale", x, ds, ns, sdpa_loss, &c);
    check_grad(tag, "dq", c.q, dq, c.nq, sdpa_loss, &c);
    check_grad(tag, "dk", c.k, dk, c.nk, sdpa_loss, &c);
    if (with_bias) check_grad(tag, "dbias", c.bias, db, c.nb, sdpa_loss, &c);

    /* Accumulates: a second call doubles dscale.  (The checks above left
     * the last perturbed forward in out and probs: run it again.) */
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    vit_real ds2[8];
    memcpy(ds2, ds, sizeof ds);
    ck_assert_int_eq(vit_sdpa_backward_scale(&c.a, NULL, NULL, NULL, NULL, ds2, c.w, c.probs,
                                             c.q, c.k, c.v, NULL), VIT_OK);
    for (size_t h = 0; h < ns; h++)
        ck_assert_double_eq_tol(ds2[h], 2 * ds[h], 1e-12 * fabs(ds[h]));

    /* The tiled core, in several tiles, agrees to rounding. */
    ck_assert_int_eq(vit_sdpa_tiled_set_tiles(2, 3), VIT_OK);
    vit_real *tout = gc_zeros(c.nout), *lse = gc_zeros((size_t)a.batch * H * a.n_q);
    ck_assert_int_eq(vit_sdpa_tiled_forward(&c.a, tout, lse, c.q, c.k, c.v, NULL), VIT_OK);
    ck_assert_msg(gc_max_abs_diff(tout, c.out, c.nout) <= 1e-12, "%s: tiled out differs", tag);
    vit_real *tdq = gc_zeros(c.nq), ts[8] = {0};
    ck_assert_int_eq(vit_sdpa_tiled_backward_scale(&c.a, tdq, NULL, NULL, NULL, ts, c.w, tout,
                                                   lse, c.q, c.k, c.v, NULL), VIT_OK);
    ck_assert_msg(gc_max_rel(ts, ds, ns, 1e-9) <= 1e-11, "%s: tiled dscale differs", tag);
    ck_assert_msg(gc_max_rel(tdq, dq, c.nq, 1e-9) <= 1e-11, "%s: tiled dq differs", tag);
    ck_assert_int_eq(vit_sdpa_tiled_set_tiles(0, 0), VIT_OK);

    free(tout); free(lse); free(tdq);
    free(rout); free(rprobs);
    free(dq); free(dk); free(dv); free(db); free(dq0); free(dk0); free(dv0); free(db0);
    sdpa_case_free(&c);
}

START_TEST(test_sdpa_grad_head_scale)
{
    run_scale_case("sdpa/head_scale", sdpa_shape(2, 3, 5, 4, 3, 2), 0, 1, 31);
}
END_TEST

START_TEST(test_sdpa_grad_shared_scale_bias)
{
    vit_sdpa a = sdpa_shape(2, 2, 4, 5, 3, 3);
    a.bias_heads = 2;
    run_scale_case("sdpa/scale+bias", a, 1, 0, 32);
}
END_TEST

/* Locality self-attention's mask: every query's own key gets weight exactly
 * 0, every row still sums to 1, and the gradients (scale included) hold. */
START_TEST(test_sdpa_no_self_mask)
{
    enum { N = 5 };
    unsigned char allowed[N * N];
    ck_assert_int_eq(vit_mask_no_self(allowed, N, N), VIT_OK);
    ck_assert_uint_eq(vit_mask_count(allowed, N, N), N * N - N);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            ck_assert_int_eq(allowed[i * N + j], i != j);
    vit_sdpa a = sdpa_shape(2, 2, N, N, 3, 3);
    a.mask.allowed = allowed;
    run_scale_case("sdpa/no_self", a, 0, 1, 33);

    sdpa_case c;
    sdpa_case_init(&c, a, 0, 34);
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    for (int bh = 0; bh < 4; bh++)
        for (int i = 0; i < N; i++) {
            const vit_real *row = c.probs + ((size_t)bh * N + i) * N;
            double sum = 0;
            for (int j = 0; j < N; j++) {
                sum += row[j];
                if (j == i) ck_assert(row[j] == 0);
                else ck_assert(row[j] > 0);
            }
            ck_assert_double_eq_tol(sum, 1.0, 1e-14);
        }
    sdpa_case_free(&c);
    /* More queries than keys: rows past the keys keep every key. */
    unsigned char wide[4 * 3];
    ck_assert_int_eq(vit_mask_no_self(wide, 4, 3), VIT_OK);
    ck_assert_uint_eq(vit_mask_count(wide, 4, 3), 12 - 3);
    for (int j = 0; j < 3; j++) ck_assert_int_eq(wide[3 * 3 + j], 1);
}
END_TEST

/* The scale is the score GEMM's alpha whichever way it is given: a per-head
 * scale equal to the fixed one gives bitwise the same maps and output. */
START_TEST(test_head_scale_matches_fixed_scale)
{
    vit_sdpa a = sdpa_shape(2, 2, 5, 5, 4, 4);
    sdpa_case c;
    sdpa_case_init(&c, a, 0, 35);
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    vit_real *out2 = gc_zeros(c.nout), *p2 = gc_zeros(c.np);
    vit_real hs[2] = {(vit_real)(1.0 / sqrt(4.0)), (vit_real)(1.0 / sqrt(4.0))};
    vit_sdpa b = c.a;
    b.head_scale = hs;
    ck_assert_int_eq(vit_sdpa_forward(&b, out2, p2, c.q, c.k, c.v), VIT_OK);
    ck_assert(memcmp(out2, c.out, c.nout * sizeof *out2) == 0);
    ck_assert(memcmp(p2, c.probs, c.np * sizeof *p2) == 0);
    free(out2); free(p2);
    sdpa_case_free(&c);
}
END_TEST

/* ---- Multi-head layer: gradient harness ----------------------------------- */

typedef struct {
    vit_mha m;
    int self;      /* x_kv is x_q */
    vit_real *params, *xq, *xkv, *bias, *w, *y, *cache;
    size_t np, nxq, nxkv, ny, nb;
} mha_case;

static void mha_case_init(mha_case *c, vit_mha m, int self, int score_bias, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->m = m;
    c->self = self;
    int dkv = m.d_kv ? m.d_kv : m.d_model;
    c->np = vit_mha_param_count(&m);
    ck_assert_uint_gt(c->np, 0);
    c->nxq = (size_t)m.batch * m.n_q * m.d_model;
    c->nxkv = (size_t)m.batch * m.n_k * dkv;
    c->ny = c->nxq;
    c->params = gc_zeros(c->np);
    c->xq = gc_zeros(c->nxq);
    c->xkv = self ? c->xq : gc_zeros(c->nxkv);
    c->w = gc_zeros(c->ny);
    c->y = gc_zeros(c->ny);
    c->cache = gc_zeros(vit_mha_cache_size(&m));
    gc_fill(c->params, c->np, &seed, 0.6);
    gc_fill(c->xq, c->nxq, &seed, 1.0);
    if (!self) gc_fill(c->xkv, c->nxkv, &seed, 1.0);
    gc_fill(c->w, c->ny, &seed, 0.5); /* keeps finite-difference noise well under the bar */
    if (score_bias) {
        c->nb = (size_t)m.bias_heads * m.n_q * m.n_k;
        c->bias = gc_zeros(c->nb);
        gc_fill(c->bias, c->nb, &seed, 1.0);
        c->m.bias = c->bias;
    } else {
        c->m.bias = NULL;
    }
}

static void mha_case_free(mha_case *c)
{
    free(c->params); free(c->xq);
    if (!c->self) free(c->xkv);
    free(c->bias); free(c->w); free(c->y); free(c->cache);
}

static double mha_loss(void *ctx)
{
    mha_case *c = ctx;
    if (vit_mha_forward(&c->m, c->params, c->y, c->xq, c->xkv, c->cache) != VIT_OK) return NAN;
    return gc_dot(c->w, c->y, c->ny);
}

/* y by loops: projections, reference attention, output projection. */
static void ref_mha(const mha_case *c, vit_real *y)
{
    const vit_mha *m = &c->m;
    int d = m->d_model, dkv = m->d_kv ? m->d_kv : d;
    int rq = m->batch * m->n_q, rk = m->batch * m->n_k;
    vit_mha_views w;
    ck_assert_int_eq(vit_mha_views_of(m, c->params, &w), VIT_OK);
    vit_real *Q = gc_zeros((size_t)rq * d), *K = gc_zeros((size_t)rk * d);
    vit_real *V = gc_zeros((size_t)rk * d), *ctx = gc_zeros((size_t)rq * d);
    vit_real *P = gc_zeros((size_t)m->batch * m->heads * m->n_q * m->n_k);
    ref_dense(Q, c->xq, w.w_q_cols, w.row_stride_q, w.b_q, rq, d, d);
    ref_dense(K, c->xkv, w.w_k_cols, w.row_stride_kv, w.b_k, rk, dkv, d);
    ref_dense(V, c->xkv, w.w_v_cols, w.row_stride_kv, w.b_v, rk, dkv, d);
    vit_sdpa a = sdpa_shape(m->batch, m->heads, m->n_q, m->n_k, d / m->heads, d / m->heads);
    a.scale = m->scale;
    a.mask = m->mask;
    a.bias = m->bias;
    a.bias_heads = m->bias_heads;
    a.head_scale = w.tau;
    ref_sdpa(&a, ctx, P, Q, K, V);
    ref_dense(y, ctx, w.w_o, d, w.b_o, rq, d, d);
    free(Q); free(K); free(V); free(ctx); free(P);
}

static void run_mha_case(const char *tag, vit_mha m, int self, int score_bias, uint64_t seed)
{
    mha_case c;
    mha_case_init(&c, m, self, score_bias, seed);
    ck_assert_int_eq(vit_mha_forward(&c.m, c.params, c.y, c.xq, c.xkv, c.cache), VIT_OK);
    vit_real *ry = gc_zeros(c.ny);
    ref_mha(&c, ry);
    ck_assert_msg(gc_max_abs_diff(c.y, ry, c.ny) <= 1e-12, "%s: y differs from reference", tag);
    free(ry);

    vit_real *grads = gc_zeros(c.np), *dxq = gc_zeros(c.nxq);
    vit_real *dxkv = self ? dxq : gc_zeros(c.nxkv);
    vit_real *db = score_bias ? gc_zeros(c.nb) : NULL;
    vit_real *work = gc_zeros(vit_mha_work_size(&c.m));
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, grads, dxq, dxkv, db, c.w,
                                      c.xq, c.xkv, c.cache, work), VIT_OK);

    /* One check per parameter tensor, through the views of both buffers. */
    vit_mha_views pv, gv;
    ck_assert_int_eq(vit_mha_views_of(&c.m, c.params, &pv), VIT_OK);
    ck_assert_int_eq(vit_mha_views_of(&c.m, grads, &gv), VIT_OK);
    size_t d = (size_t)m.d_model, dkv = (size_t)(m.d_kv ? m.d_kv : m.d_model);
    if (dkv == d) { /* one joint [d, 3d] matrix */
        check_grad(tag, "W_QKV", pv.w_q_cols, gv.w_q_cols, 3 * d * d, mha_loss, &c);
    } else {
        check_grad(tag, "W_Q", pv.w_q_cols, gv.w_q_cols, d * d, mha_loss, &c);
        check_grad(tag, "W_KV", pv.w_k_cols, gv.w_k_cols, 2 * dkv * d, mha_loss, &c);
    }
    check_grad(tag, "W_O", pv.w_o, gv.w_o, d * d, mha_loss, &c);
    if (m.has_bias) {
        check_grad(tag, "b_Q", pv.b_q, gv.b_q, d, mha_loss, &c);
        check_grad(tag, "b_K", pv.b_k, gv.b_k, d, mha_loss, &c);
        check_grad(tag, "b_V", pv.b_v, gv.b_v, d, mha_loss, &c);
        check_grad(tag, "b_O", pv.b_o, gv.b_o, d, mha_loss, &c);
    } else {
        ck_assert_ptr_null(pv.b_q);
        ck_assert_ptr_null(gv.b_o);
    }
    if (self) {
        /* dx_q and dx_kv are one buffer: both paths through x. */
        check_grad(tag, "dx (self)", c.xq, dxq, c.nxq, mha_loss, &c);
    } else {
        check_grad(tag, "dx_q", c.xq, dxq, c.nxq, mha_loss, &c);
        check_grad(tag, "dx_kv", c.xkv, dxkv, c.nxkv, mha_loss, &c);
    }
    if (score_bias) check_grad(tag, "dbias", c.bias, db, c.nb, mha_loss, &c);
    if (m.learn_scale)
        check_grad(tag, "tau", pv.tau, gv.tau, (size_t)m.heads, mha_loss, &c);
    else
        ck_assert_ptr_null(pv.tau);

    free(grads); free(dxq);
    if (!self) free(dxkv);
    free(db); free(work);
    mha_case_free(&c);
}

static vit_mha mha_shape(int B, int nq, int nk, int d, int dkv, int H, int has_bias)
{
    vit_mha m;
    memset(&m, 0, sizeof m);
    m.batch = B; m.n_q = nq; m.n_k = nk; m.d_model = d; m.d_kv = dkv; m.heads = H;
    m.has_bias = has_bias;
    return m;
}

START_TEST(test_mha_grad_self_nobias)
{
    run_mha_case("mha/self", mha_shape(2, 5, 5, 6, 0, 2, 0), 1, 0, 201);
}
END_TEST

/* Locality self-attention as the ViT uses it: no-self mask, learnable tau. */
START_TEST(test_mha_grad_lsa)
{
    unsigned char allowed[5 * 5];
    ck_assert_int_eq(vit_mask_no_self(allowed, 5, 5), VIT_OK);
    vit_mha m = mha_shape(2, 5, 5, 6, 0, 3, 1);
    m.learn_scale = 1;
    m.mask.allowed = allowed;
    ck_assert_uint_eq(vit_mha_param_count(&m), 4 * 36 + 4 * 6 + 3);
    run_mha_case("mha/lsa", m, 1, 0, 207);
}
END_TEST

START_TEST(test_mha_grad_self_bias)
{
    run_mha_case("mha/self+bias", mha_shape(2, 5, 5, 6, 0, 2, 1), 1, 0, 211);
}
END_TEST

START_TEST(test_mha_grad_cross)
{
    run_mha_case("mha/cross", mha_shape(2, 4, 6, 6, 5, 2, 1), 0, 0, 221);
    run_mha_case("mha/cross_nobias", mha_shape(2, 4, 6, 6, 5, 3, 0), 0, 0, 222);
    /* Inputs of one width in two buffers: the joint W_QKV, read as column
     * blocks by two GEMMs (no fused call), with n_q != n_k and n_q = n_k. */
    run_mha_case("mha/cross_same_width", mha_shape(2, 4, 6, 6, 0, 2, 1), 0, 0, 223);
    run_mha_case("mha/two_inputs", mha_shape(2, 5, 5, 6, 0, 3, 1), 0, 0, 224);
}
END_TEST

/* Where the views point: the layout of the header, from offsets alone. */
START_TEST(test_mha_layout)
{
    vit_real buf[1];
    vit_mha_views v;
    /* d_kv = d_model: W_QKV [6, 18] | W_O | b_Q b_K b_V | b_O | tau [2] */
    vit_mha m = mha_shape(1, 3, 3, 6, 0, 2, 1);
    m.learn_scale = 1;
    ck_assert_uint_eq(vit_mha_param_count(&m), 4 * 36 + 4 * 6 + 2);
    ck_assert_int_eq(vit_mha_views_of(&m, buf, &v), VIT_OK);
    ck_assert_ptr_eq(v.w_q_cols, buf);
    ck_assert_ptr_eq(v.w_k_cols, buf + 6);
    ck_assert_ptr_eq(v.w_v_cols, buf + 12);
    ck_assert_int_eq(v.row_stride_q, 18);
    ck_assert_int_eq(v.row_stride_kv, 18);
    ck_assert_ptr_eq(v.w_o, buf + 108);
    ck_assert_ptr_eq(v.b_q, buf + 144);
    ck_assert_ptr_eq(v.b_k, buf + 150);
    ck_assert_ptr_eq(v.b_v, buf + 156);
    ck_assert_ptr_eq(v.b_o, buf + 162);
    ck_assert_ptr_eq(v.tau, buf + 168);
    /* d_kv = 5: W_Q [6, 6] | W_KV [5, 12] | W_O | biases */
    m = mha_shape(1, 3, 4, 6, 5, 2, 1);
    ck_assert_uint_eq(vit_mha_param_count(&m), 2 * 36 + 2 * 30 + 4 * 6);
    ck_assert_int_eq(vit_mha_views_of(&m, buf, &v), VIT_OK);
    ck_assert_ptr_eq(v.w_q_cols, buf);
    ck_assert_int_eq(v.row_stride_q, 6);
    ck_assert_ptr_eq(v.w_k_cols, buf + 36);
    ck_assert_ptr_eq(v.w_v_cols, buf + 42);
    ck_assert_int_eq(v.row_stride_kv, 12);
    ck_assert_ptr_eq(v.w_o, buf + 96);
    ck_assert_ptr_eq(v.b_q, buf + 132);
    ck_assert_ptr_eq(v.b_o, buf + 150);
    ck_assert_ptr_null(v.tau);
}
END_TEST

/* The fused call (x_q == x_kv: one GEMM, Q, K, V side by side in the cache)
 * against the same layer given a copy of x as x_kv (two GEMMs, separate
 * cache layout): same y, gradients and dx; and the fused call's other ways
 * of asking for dx (two buffers, one of them, no weights' gradient). */
START_TEST(test_mha_fused_equals_separate)
{
    vit_mha m = mha_shape(2, 5, 5, 8, 0, 2, 1);
    m.learn_scale = 1;
    mha_case c;
    mha_case_init(&c, m, 1, 0, 251);
    vit_mha_views pv;
    ck_assert_int_eq(vit_mha_views_of(&c.m, c.params, &pv), VIT_OK);
    for (int h = 0; h < 2; h++) pv.tau[h] = (vit_real)(0.3 + 0.2 * h);
    vit_real *copy = gc_zeros(c.nxq), *y2 = gc_zeros(c.ny);
    vit_real *cache2 = gc_zeros(vit_mha_cache_size(&c.m));
    memcpy(copy, c.xq, c.nxq * sizeof *copy);
    ck_assert_int_eq(vit_mha_forward(&c.m, c.params, c.y, c.xq, c.xq, c.cache), VIT_OK);
    ck_assert_int_eq(vit_mha_forward(&c.m, c.params, y2, c.xq, copy, cache2), VIT_OK);
    ck_assert(gc_max_abs_diff(c.y, y2, c.ny) <= 1e-13);
    ck_assert_uint_gt((size_t)(gc_max_abs_diff(c.y, c.w, c.ny) > 0), 0); /* y is not trivial */

    vit_real *g1 = gc_zeros(c.np), *g2 = gc_zeros(c.np), *dx1 = gc_zeros(c.nxq);
    vit_real *dq2 = gc_zeros(c.nxq), *dkv2 = gc_zeros(c.nxq);
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, g1, dx1, dx1, NULL, c.w, c.xq, c.xq,
                                      c.cache, NULL), VIT_OK);
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, g2, dq2, dkv2, NULL, c.w, c.xq, copy,
                                      cache2, NULL), VIT_OK);
    ck_assert(gc_max_abs_diff(g1, g2, c.np) <= 1e-13);
    vit_real *sum = gc_zeros(c.nxq);
    for (size_t i = 0; i < c.nxq; i++) sum[i] = dq2[i] + dkv2[i];
    ck_assert(gc_max_abs_diff(dx1, sum, c.nxq) <= 1e-13);

    /* Fused, two dx buffers: each gets its share. */
    vit_real *dq3 = gc_zeros(c.nxq), *dkv3 = gc_zeros(c.nxq), *g3 = gc_zeros(c.np);
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, g3, dq3, dkv3, NULL, c.w, c.xq, c.xq,
                                      c.cache, NULL), VIT_OK);
    ck_assert(gc_max_abs_diff(dq3, dq2, c.nxq) <= 1e-13);
    ck_assert(gc_max_abs_diff(dkv3, dkv2, c.nxq) <= 1e-13);
    ck_assert(gc_max_abs_diff(g3, g1, c.np) <= 1e-13);
    /* Fused, only dx_q (then only dx_kv), no weights' gradient. */
    memset(dq3, 0, c.nxq * sizeof *dq3);
    memset(dkv3, 0, c.nxq * sizeof *dkv3);
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, NULL, dq3, NULL, NULL, c.w, c.xq, c.xq,
                                      c.cache, NULL), VIT_OK);
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, NULL, NULL, dkv3, NULL, c.w, c.xq, c.xq,
                                      c.cache, NULL), VIT_OK);
    ck_assert(gc_max_abs_diff(dq3, dq2, c.nxq) <= 1e-13);
    ck_assert(gc_max_abs_diff(dkv3, dkv2, c.nxq) <= 1e-13);
    ck_assert(gc_max_abs_diff(dq2, dkv2, c.nxq) > 1e-3); /* the two shares differ */

    free(copy); free(y2); free(cache2); free(g1); free(g2); free(dx1); free(dq2); free(dkv2);
    free(sum); free(dq3); free(dkv3); free(g3);
    mha_case_free(&c);
}
END_TEST

/* vit_sdpa's row strides: q, k, v (and dq, dk, dv) as column blocks of one
 * wider buffer, as vit_mha's fused projection lays them out, give the dense
 * results, in both cores, and leave the rest of the buffer alone. */
static void strided_case(int tiled)
{
    enum { B = 2, H = 2, N = 5, DK = 3, W = H * DK, LD = 3 * W + 1 };
    vit_sdpa a = sdpa_shape(B, H, N, N, DK, DK);
    vit_real hs[H] = {0.4, 0.7};
    a.head_scale = hs;
    uint64_t seed = 261;
    const size_t n = (size_t)B * N * W, nf = (size_t)B * N * LD;
    vit_real *q = gc_zeros(n), *k = gc_zeros(n), *v = gc_zeros(n), *dout = gc_zeros(n);
    gc_fill(q, n, &seed, 1.0); gc_fill(k, n, &seed, 1.0); gc_fill(v, n, &seed, 1.0);
    gc_fill(dout, n, &seed, 1.0);
    vit_real *f = gc_zeros(nf), *df = gc_zeros(nf); /* [B*N, LD]: q | k | v | 1 spare */
    for (size_t i = 0; i < nf; i++) { f[i] = 1e3 + (double)i; df[i] = -7; }
    for (size_t r = 0; r < (size_t)B * N; r++)
        for (int c = 0; c < W; c++) {
            f[r * LD + c] = q[r * W + c];
            f[r * LD + W + c] = k[r * W + c];
            f[r * LD + 2 * W + c] = v[r * W + c];
            df[r * LD + c] = df[r * LD + W + c] = df[r * LD + 2 * W + c] = 0;
        }
    vit_sdpa s = a;
    s.ld_q = s.ld_k = s.ld_v = LD;
    const size_t np = tiled ? (size_t)B * H * N : (size_t)B * H * N * N;
    vit_real *o1 = gc_zeros(n), *o2 = gc_zeros(n), *p1 = gc_zeros(np), *p2 = gc_zeros(np);
    vit_real *dq = gc_zeros(n), *dk = gc_zeros(n), *dv = gc_zeros(n);
    vit_real ds1[H] = {0}, ds2[H] = {0};
    if (tiled) {
        ck_assert_int_eq(vit_sdpa_tiled_forward(&a, o1, p1, q, k, v, NULL), VIT_OK);
        ck_assert_int_eq(vit_sdpa_tiled_forward(&s, o2, p2, f, f + W, f + 2 * W, NULL), VIT_OK);
        ck_assert_int_eq(vit_sdpa_tiled_backward_scale(&a, dq, dk, dv, NULL, ds1, dout, o1, p1,
                                                       q, k, v, NULL), VIT_OK);
        ck_assert_int_eq(vit_sdpa_tiled_backward_scale(&s, df, df + W, df + 2 * W, NULL, ds2,
                                                       dout, o2, p2, f, f + W, f + 2 * W, NULL),
                         VIT_OK);
    } else {
        ck_assert_int_eq(vit_sdpa_forward(&a, o1, p1, q, k, v), VIT_OK);
        ck_assert_int_eq(vit_sdpa_forward(&s, o2, p2, f, f + W, f + 2 * W), VIT_OK);
        ck_assert_int_eq(vit_sdpa_backward_scale(&a, dq, dk, dv, NULL, ds1, dout, p1, q, k, v,
                                                 NULL), VIT_OK);
        ck_assert_int_eq(vit_sdpa_backward_scale(&s, df, df + W, df + 2 * W, NULL, ds2, dout,
                                                 p2, f, f + W, f + 2 * W, NULL), VIT_OK);
    }
    ck_assert(gc_max_abs_diff(o1, o2, n) <= 1e-14);
    ck_assert(gc_max_abs_diff(p1, p2, np) <= 1e-14);
    ck_assert(gc_max_abs_diff(ds1, ds2, H) <= 1e-13);
    ck_assert(fabs(ds1[0]) > 1e-6);
    for (size_t r = 0; r < (size_t)B * N; r++) {
        for (int c = 0; c < W; c++) {
            ck_assert(fabs(df[r * LD + c] - dq[r * W + c]) <= 1e-14);
            ck_assert(fabs(df[r * LD + W + c] - dk[r * W + c]) <= 1e-14);
            ck_assert(fabs(df[r * LD + 2 * W + c] - dv[r * W + c]) <= 1e-14);
        }
        ck_assert(df[r * LD + LD - 1] == -7); /* the spare column is not touched */
    }
    free(q); free(k); free(v); free(dout); free(f); free(df); free(o1); free(o2); free(p1);
    free(p2); free(dq); free(dk); free(dv);
}

START_TEST(test_sdpa_row_strides)
{
    strided_case(0);
    strided_case(1);
    vit_sdpa a = sdpa_shape(1, 2, 3, 3, 2, 2);
    vit_real buf[64] = {0}, probs[64];
    a.ld_k = 3; /* narrower than H*d_k = 4 */
    EXPECT_EINVAL(vit_sdpa_forward(&a, buf + 40, probs, buf, buf, buf), "ld_k");
    a.ld_k = 0;
    a.ld_v = -1;
    EXPECT_EINVAL(vit_sdpa_tiled_forward(&a, buf + 40, probs, buf, buf, buf, NULL), "ld_v");
}
END_TEST

START_TEST(test_mha_grad_mask_and_score_bias)
{
    uint64_t s = 231;
    unsigned char *allowed = random_mask(1, 5, 5, 0.6, &s);
    vit_mha m = mha_shape(2, 5, 5, 6, 0, 2, 1);
    m.mask.allowed = allowed;
    m.mask.causal = 1;
    m.bias_heads = 2;
    m.scale = 0.45;
    run_mha_case("mha/self+mask+bias", m, 1, 1, 232);

    unsigned char kv[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
    vit_mha x = mha_shape(2, 4, 6, 6, 5, 2, 1);
    x.mask.key_valid = kv;
    x.bias_heads = 1;
    run_mha_case("mha/cross+pad+bias", x, 0, 1, 233);
    free(allowed);
}
END_TEST

START_TEST(test_mha_backward_null_and_work)
{
    /* work = NULL allocates, and gives the same result as a caller's work;
     * grads only, dx only, and nothing at all are all accepted. */
    vit_mha m = mha_shape(2, 4, 6, 6, 5, 2, 1);
    mha_case c;
    mha_case_init(&c, m, 0, 0, 241);
    ck_assert_int_eq(vit_mha_forward(&c.m, c.params, c.y, c.xq, c.xkv, c.cache), VIT_OK);
    vit_real *g1 = gc_zeros(c.np), *g2 = gc_zeros(c.np);
    vit_real *x1 = gc_zeros(c.nxkv), *x2 = gc_zeros(c.nxkv);
    vit_real *work = gc_zeros(vit_mha_work_size(&c.m));
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, g1, NULL, x1, NULL, c.w, c.xq, c.xkv,
                                      c.cache, work), VIT_OK);
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, g2, NULL, NULL, NULL, c.w, c.xq, c.xkv,
                                      c.cache, NULL), VIT_OK);
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, NULL, NULL, x2, NULL, c.w, c.xq, c.xkv,
                                      c.cache, NULL), VIT_OK);
    ck_assert_int_eq(vit_mha_backward(&c.m, c.params, NULL, NULL, NULL, NULL, c.w, c.xq, c.xkv,
                                      c.cache, NULL), VIT_OK);
    ck_assert(gc_max_abs_diff(g1, g2, c.np) <= 1e-14);
    ck_assert(gc_max_abs_diff(x1, x2, c.nxkv) <= 1e-14);
    free(g1); free(g2); free(x1); free(x2); free(work);
    mha_case_free(&c);
}
END_TEST

/* ---- Properties ---------------------------------------------------------------- */

START_TEST(test_mha_permutation_equivariance)
{
    /* Self-attention without a mask is permutation equivariant:
     * f(P X) = P f(X), per item, with each item permuted differently. */
    enum { B = 2, N = 7, D = 8 };
    vit_mha m = mha_shape(B, N, N, D, 0, 2, 1);
    mha_case c;
    mha_case_init(&c, m, 1, 0, 301);
    uint64_t s = 302;
    int perm[B][N];
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < N; i++) perm[b][i] = i;
        for (int i = N - 1; i > 0; i--) { /* Fisher-Yates */
            int j = (int)(gc_uniform(&s) * (i + 1));
            int t = perm[b][i]; perm[b][i] = perm[b][j]; perm[b][j] = t;
        }
        int moved = 0;
        for (int i = 0; i < N; i++) moved += perm[b][i] != i;
        ck_assert_int_gt(moved, 0);
    }
    vit_real *px = gc_zeros(c.nxq), *py = gc_zeros(c.ny), *cache2 = gc_zeros(vit_mha_cache_size(&m));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < N; i++)
            memcpy(px + ((size_t)b * N + i) * D, c.xq + ((size_t)b * N + perm[b][i]) * D,
                   D * sizeof *px);
    ck_assert_int_eq(vit_mha_forward(&c.m, c.params, c.y, c.xq, c.xq, c.cache), VIT_OK);
    ck_assert_int_eq(vit_mha_forward(&c.m, c.params, py, px, px, cache2), VIT_OK);
    double worst = 0.0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < N; i++)
            worst = fmax(worst, gc_max_abs_diff(py + ((size_t)b * N + i) * D,
                                             c.y + ((size_t)b * N + perm[b][i]) * D, D));
    printf("permutation equivariance: max |f(PX) - P f(X)| = %.3e\n", worst);
    ck_assert_msg(worst <= 1e-12, "f(PX) != P f(X): %.3e", worst);
    free(px); free(py); free(cache2);
    mha_case_free(&c);
}
END_TEST

/* Every row of probs sums to 1, or is all zeros if its mask row is empty. */
static void assert_rows_sum_to_one(const vit_sdpa *a, const vit_real *probs)
{
    for (int b = 0; b < a->batch; b++)
        for (int h = 0; h < a->heads; h++)
            for (int i = 0; i < a->n_q; i++) {
                const vit_real *p = probs + (((size_t)b * a->heads + h) * a->n_q + i) * a->n_k;
                double sum = 0.0;
                for (int j = 0; j < a->n_k; j++) sum += p[j];
                ck_assert_msg(fabs(sum - 1.0) <= 1e-12, "row (%d,%d,%d) sums to %.17g",
                              b, h, i, sum);
            }
}

START_TEST(test_window_mask_exact_zeros)
{
    /* 4 x 4 grid, 2 x 2 windows, plain and shifted: weight outside the
     * window is exactly 0, inside strictly positive, rows sum to 1. */
    enum { N = 16 };
    unsigned char m[N * N];
    for (int shift = 0; shift < 2; shift++) {
        ck_assert_int_eq(vit_mask_window(m, 4, 4, 2, 2, shift, shift), VIT_OK);
        vit_sdpa a = sdpa_shape(2, 2, N, N, 3, 3);
        a.mask.allowed = m;
        sdpa_case c;
        sdpa_case_init(&c, a, 0, 401 + shift);
        gc_fill(c.q, c.nq, &(uint64_t){403}, 3.0); /* larger scores */
        ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
        for (int bh = 0; bh < 4; bh++)
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) {
                    vit_real p = c.probs[((size_t)bh * N + i) * N + j];
                    if (m[i * N + j]) ck_assert(p > 0.0);
                    else ck_assert(p == 0.0);
                }
        assert_rows_sum_to_one(&c.a, c.probs);
        sdpa_case_free(&c);
    }
    /* Rows also sum to 1 without a mask and with padding. */
    unsigned char kv[14] = {1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1};
    vit_sdpa a = sdpa_shape(2, 3, 5, 7, 4, 2);
    a.mask.key_valid = kv;
    a.bias_heads = 3;
    sdpa_case c;
    sdpa_case_init(&c, a, 1, 404);
    ck_assert_int_eq(vit_sdpa_forward(&c.a, c.out, c.probs, c.q, c.k, c.v), VIT_OK);
    assert_rows_sum_to_one(&c.a, c.probs);
    sdpa_case_free(&c);
}
END_TEST

START_TEST(test_mask_counts)
{
    enum { N = 64 };
    unsigned char *m = malloc(N * N);
    memset(m, 1, N * N);
    ck_assert_uint_eq(vit_mask_count(m, N, N), 4096);
    /* 8 x 8 grid, 4 x 4 windows: 4 windows of 16 tokens, 16 * 16 each. */
    ck_assert_int_eq(vit_mask_window(m, 8, 8, 4, 4, 0, 0), VIT_OK);
    ck_assert_uint_eq(vit_mask_count(m, N, N), 1024);
    /* Shift 2: in the shifted frame the top-left window is one region
     * (16^2 = 256), the two border windows split into two groups of 8
     * (2 * 2 * 8^2 = 256) and the corner window into four groups of 4
     * (4 * 4^2 = 64): 576 in all. */
    ck_assert_int_eq(vit_mask_window(m, 8, 8, 4, 4, 2, 2), VIT_OK);
    ck_assert_uint_eq(vit_mask_count(m, N, N), 576);
    /* The axes count apart: rows unshifted give 2 * 4^2 = 32 pairs per
     * column pair, columns shifted by 2 give 4^2 + 2^2 + 2^2 = 24, and
     * 32 * 24 = 768 (the other way round the same). */
    ck_assert_int_eq(vit_mask_window(m, 8, 8, 4, 4, 0, 2), VIT_OK);
    ck_assert_uint_eq(vit_mask_count(m, N, N), 768);
    ck_assert_int_eq(vit_mask_window(m, 8, 8, 4, 4, 2, 0), VIT_OK);
    ck_assert_uint_eq(vit_mask_count(m, N, N), 768);
    /* Every token attends to itself; the plain window mask equals the
     * product of "same row block" and "same column block". */
    for (int t = 0; t < N; t++) ck_assert(m[t * N + t]);
    ck_assert_int_eq(vit_mask_window(m, 8, 8, 4, 4, 0, 0), VIT_OK);
    for (int t = 0; t < N; t++)
        for (int u = 0; u < N; u++)
            ck_assert_int_eq(m[t * N + u], (t / 8) / 4 == (u / 8) / 4 && (t % 8) / 4 == (u % 8) / 4);
    /* Windows of 4 rows by 2 columns: 8 windows of 8 tokens, 8 * 8^2 =
     * 512, the product of "same block of 4 rows" and "same block of 2
     * columns".  Shifted by 2 rows and 1 column, the axes count apart:
     * rows as above, 4^2 + 2^2 + 2^2 = 24 pairs; columns in windows of 2
     * shifted by 1, three whole windows (3 * 2^2 = 12) and the wrapped one
     * split into 1 + 1 (2): 14; 24 * 14 = 336. */
    ck_assert_int_eq(vit_mask_window(m, 8, 8, 4, 2, 0, 0), VIT_OK);
    ck_assert_uint_eq(vit_mask_count(m, N, N), 512);
    for (int t = 0; t < N; t++)
        for (int u = 0; u < N; u++)
            ck_assert_int_eq(m[t * N + u], (t / 8) / 4 == (u / 8) / 4 && (t % 8) / 2 == (u % 8) / 2);
    ck_assert_int_eq(vit_mask_window(m, 8, 8, 4, 2, 2, 1), VIT_OK);
    ck_assert_uint_eq(vit_mask_count(m, N, N), 336);
    free(m);
}
END_TEST

/* Python's slice x[start:stop] of a length-len axis, start and stop
 * possibly negative (from the end) and stop possibly None (INT_MAX here):
 * the half-open range [*lo, *hi), empty when hi <= lo. */
static void py_slice(int start, int stop, int len, int *lo, int *hi)
{
    *lo = start < 0 ? len + start : start;
    *hi = stop == INT_MAX ? len : stop < 0 ? len + stop : stop;
}

/* Independent reconstruction of Swin's shifted-window mask, written as
 * torchvision 0.14's shifted_window_attention builds it: roll the token
 * grid by (-sh, -sw) (torch.roll), and when sh + sw > 0 label the rolled
 * positions by its slices, h_slices = ((0, -Mh), (-Mh, -sh), (-sh, None))
 * and w_slices = ((0, -Mw), (-Mw, -sw), (-sw, None)) (its window_size
 * [Mh, Mw]), assigned in order (so an axis with shift 0, whose slice
 * (-0, None) is the whole axis, ends in one label), cut Mh x Mw windows,
 * and allow a pair when both fall in one window with one label.
 * Then map rolled positions back to the original token numbers. */
static void rolled_window_mask(unsigned char *allowed, int gh, int gw, int Mh, int Mw, int sh,
                               int sw)
{
    int N = gh * gw;
    int *tok = malloc(N * sizeof *tok), *label = malloc(N * sizeof *label);
    int *win = malloc(N * sizeof *win);
    for (int r = 0; r < gh; r++)
        for (int c = 0; c < gw; c++) {
            /* rolled[r][c] = original[(r + sh) % gh][(c + sw) % gw] */
            tok[r * gw + c] = ((r + sh) % gh) * gw + (c + sw) % gw;
            win[r * gw + c] = (r / Mh) * (gw / Mw) + c / Mw;
            label[r * gw + c] = 0;
        }
    if (sh + sw > 0) {
        const int hsl[3][2] = {{0, -Mh}, {-Mh, -sh}, {-sh, INT_MAX}};
        const int wsl[3][2] = {{0, -Mw}, {-Mw, -sw}, {-sw, INT_MAX}};
        int cnt = 0;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++, cnt++) {
                int r0, r1, c0, c1;
                py_slice(hsl[a][0], hsl[a][1], gh, &r0, &r1);
                py_slice(wsl[b][0], wsl[b][1], gw, &c0, &c1);
                for (int r = r0; r < r1; r++)
                    for (int c = c0; c < c1; c++) label[r * gw + c] = cnt;
            }
    }
    memset(allowed, 0, (size_t)N * N);
    for (int p = 0; p < N; p++)
        for (int q = 0; q < N; q++)
            if (win[p] == win[q] && label[p] == label[q])
                allowed[(size_t)tok[p] * N + tok[q]] = 1;
    free(tok); free(label); free(win);
}

START_TEST(test_shifted_mask_vs_rolled_grid)
{
    /* grid_h, grid_w, Mh, Mw, shift_h, shift_w; from {7, 14, 7, 7, 0, 3}
     * on one shift per axis: torchvision's for a 7 x 14 grid in windows
     * of 7 (28x56 images, patch 4) and others with one axis or neither at
     * 0; from {8, 6, 4, 3, ..} rectangular windows: 16 x 14 in 8 x 7
     * (64x56 photos, patch 4) shifted by 4 and 3, 8 x 7 in one window */
    const int cases[][6] = {
        {8, 8, 4, 4, 2, 2},   {8, 8, 4, 4, 1, 1},  {8, 8, 4, 4, 3, 3},  {4, 8, 4, 4, 2, 2},
        {6, 4, 2, 2, 1, 1},   {8, 8, 4, 4, 0, 0},  {7, 14, 7, 7, 0, 3}, {14, 7, 7, 7, 3, 0},
        {8, 8, 4, 4, 0, 2},   {8, 8, 4, 4, 1, 3},  {6, 9, 3, 3, 2, 1},  {4, 8, 4, 4, 2, 0},
        {8, 6, 4, 3, 2, 1},   {8, 6, 4, 3, 0, 1},  {8, 6, 4, 3, 2, 0},  {6, 9, 3, 3, 1, 1},
        {6, 9, 2, 3, 1, 1},   {6, 9, 3, 9, 1, 0},  {16, 14, 8, 7, 4, 3}, {8, 7, 8, 7, 0, 0},
        {4, 12, 2, 6, 1, 3}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int gh = cases[t][0], gw = cases[t][1], Mh = cases[t][2], Mw = cases[t][3];
        int sh = cases[t][4], sw = cases[t][5], N = gh * gw;
        unsigned char *m = malloc((size_t)N * N), *r = malloc((size_t)N * N);
        ck_assert_int_eq(vit_mask_window(m, gh, gw, Mh, Mw, sh, sw), VIT_OK);
        rolled_window_mask(r, gh, gw, Mh, Mw, sh, sw);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                ck_assert_msg(m[i * N + j] == r[i * N + j],
                              "grid %dx%d window %dx%d shifts %d, %d: token %d -> %d: got %d, "
                              "rolled grid %d", gh, gw, Mh, Mw, sh, sw, i, j, m[i * N + j],
                              r[i * N + j]);
                ck_assert_int_eq(m[i * N + j], m[j * N + i]); /* symmetric */
            }
        free(m); free(r);
    }
}
END_TEST

START_TEST(test_param_counts)
{
    vit_mha m = mha_shape(1, 1, 1, 512, 0, 8, 0);
    ck_assert_uint_eq(vit_mha_param_count(&m), 1048576);
    m.has_bias = 1;
    ck_assert_uint_eq(vit_mha_param_count(&m), 1050624);
    /* Cross-attention: W_K, W_V are [d_kv, d]. */
    vit_mha x = mha_shape(1, 1, 1, 8, 3, 2, 1);
    ck_assert_uint_eq(vit_mha_param_count(&x), 2 * 64 + 2 * 24 + 32);
    /* Cache: Q, ctx [B,n_q,d]; K, V [B,n_k,d]; probs [B,H,n_q,n_k]. */
    vit_mha c = mha_shape(2, 3, 5, 8, 3, 2, 1);
    ck_assert_uint_eq(vit_mha_cache_size(&c), 2 * 48 + 2 * 80 + 2 * 2 * 15);
    vit_real cache[2 * 48 + 2 * 80 + 2 * 2 * 15];
    ck_assert_ptr_eq(vit_mha_probs(&c, cache), cache + 2 * 48 + 2 * 80);
}
END_TEST

/* ---- Bad input ------------------------------------------------------------- */

START_TEST(test_bad_input)
{
    vit_real buf[4096] = {0};
    vit_real *q = buf, *k = buf + 512, *v = buf + 1024, *out = buf + 1536, *p = buf + 2048;
    vit_sdpa a = sdpa_shape(1, 2, 3, 3, 2, 2);

    EXPECT_EINVAL(vit_sdpa_forward(NULL, out, p, q, k, v), "a is NULL");
    EXPECT_EINVAL(vit_sdpa_forward(&a, out, p, NULL, k, v), "q is NULL");
    EXPECT_EINVAL(vit_sdpa_forward(&a, out, NULL, q, k, v), "probs");
    EXPECT_EINVAL(vit_sdpa_backward(&a, q, k, v, NULL, NULL, p, q, k, v, NULL), "dout");
    EXPECT_EINVAL(vit_sdpa_backward(&a, out, NULL, NULL, NULL, out, p, q, NULL, v, NULL), "k is NULL");
    vit_sdpa z = a;
    z.n_q = 0;
    EXPECT_EINVAL(vit_sdpa_forward(&z, out, p, q, k, v), "n_q");
    z = a;
    z.d_v = -1;
    EXPECT_EINVAL(vit_sdpa_forward(&z, out, p, q, k, v), "d_v");
    z = a;
    z.bias = buf + 3000;
    z.bias_heads = 3;
    EXPECT_EINVAL(vit_sdpa_forward(&z, out, p, q, k, v), "bias_heads");
    z.bias_heads = 0;
    EXPECT_EINVAL(vit_sdpa_forward(&z, out, p, q, k, v), "bias_heads");
    z = a;
    z.bias_heads = 0; /* dbias asked for without a valid bias_heads */
    EXPECT_EINVAL(vit_sdpa_backward(&z, NULL, NULL, NULL, buf + 3000, out, p, q, k, v, NULL),
                  "bias_heads");
    z = a;
    z.scale = NAN;
    EXPECT_EINVAL(vit_sdpa_forward(&z, out, p, q, k, v), "scale");
    EXPECT_EINVAL(vit_sdpa_forward(&a, q, p, q, k, v), "alias");
    vit_real hs[2] = {0.5, 0.5};
    z = a;
    z.head_scale = hs;
    z.scale = 0.5;
    EXPECT_EINVAL(vit_sdpa_forward(&z, out, p, q, k, v), "not both");
    EXPECT_EINVAL(vit_sdpa_backward_scale(&z, NULL, NULL, NULL, NULL, hs, out, p, q, k, v, NULL),
                  "not both");
    z.scale = 0;
    hs[1] = INFINITY;
    EXPECT_EINVAL(vit_sdpa_forward(&z, out, p, q, k, v), "head_scale[1]");
    EXPECT_EINVAL(vit_sdpa_tiled_forward(&z, out, p, q, k, v, NULL), "head_scale[1]");

    vit_mha m = mha_shape(1, 3, 3, 64, 0, 3, 1);
    EXPECT_EINVAL(vit_mha_check(&m), "heads (3) does not divide d_model (64)");
    ck_assert_uint_eq(vit_mha_param_count(&m), 0);
    ck_assert_uint_eq(vit_mha_cache_size(&m), 0);
    ck_assert_uint_eq(vit_mha_work_size(&m), 0);
    EXPECT_EINVAL(vit_mha_check(NULL), "m is NULL");
    m = mha_shape(1, 3, 3, 4, 0, 2, 1);
    ck_assert_int_eq(vit_mha_check(&m), VIT_OK);
    vit_mha e = m;
    e.heads = 0;
    EXPECT_EINVAL(vit_mha_check(&e), "heads");
    e = m;
    e.batch = 0;
    EXPECT_EINVAL(vit_mha_check(&e), "batch");
    e = m;
    e.n_k = -2;
    EXPECT_EINVAL(vit_mha_check(&e), "n_k");
    e = m;
    e.d_kv = -1;
    EXPECT_EINVAL(vit_mha_check(&e), "d_kv");
    e = m;
    e.bias = buf;
    e.bias_heads = 4;
    EXPECT_EINVAL(vit_mha_check(&e), "bias_heads");
    vit_mha ls = m;
    ls.learn_scale = 1;
    ls.scale = (vit_real)0.3;
    EXPECT_EINVAL(vit_mha_check(&ls), "learn_scale");
    vit_real *params = buf, *y = buf + 1000, *x = buf + 2000, *cache = buf + 2500;
    EXPECT_EINVAL(vit_mha_forward(&m, NULL, y, x, x, cache), "params");
    EXPECT_EINVAL(vit_mha_forward(&m, params, y, x, x, NULL), "cache");
    EXPECT_EINVAL(vit_mha_forward(&m, params, y, NULL, x, cache), "x_q");
    EXPECT_EINVAL(vit_mha_forward(&e, params, y, x, x, cache), "bias_heads");
    EXPECT_EINVAL(vit_mha_forward(&m, params, x, x, x, cache), "alias");
    EXPECT_EINVAL(vit_mha_backward(&m, params, NULL, NULL, NULL, NULL, NULL, x, x, cache, NULL),
                  "dy");
    EXPECT_EINVAL(vit_mha_backward(&m, params, NULL, NULL, NULL, NULL, y, x, NULL, cache, NULL),
                  "x_kv");
    e = m;
    e.bias_heads = 0; /* dbias asked for without a valid bias_heads */
    EXPECT_EINVAL(vit_mha_backward(&e, params, NULL, NULL, NULL, buf + 3000, y, x, x, cache, NULL),
                  "bias_heads");
    vit_mha_views vw;
    EXPECT_EINVAL(vit_mha_views_of(&m, NULL, &vw), "flat");
    EXPECT_EINVAL(vit_mha_views_of(&m, buf, NULL), "views");
    ck_assert_ptr_null(vit_mha_probs(&m, NULL));

    unsigned char mk[64];
    EXPECT_EINVAL(vit_mask_causal(NULL, 3, 3), "allowed");
    EXPECT_EINVAL(vit_mask_causal(mk, 3, 0), "n_k");
    EXPECT_EINVAL(vit_mask_window(mk, 6, 4, 4, 4, 0, 0), "multiple");
    EXPECT_EINVAL(vit_mask_window(mk, 4, 4, 4, 4, 4, 4), "shift");
    EXPECT_EINVAL(vit_mask_window(mk, 4, 4, 2, 2, -1, -1), "shift");
    /* each axis alone, the other shift valid */
    EXPECT_EINVAL(vit_mask_window(mk, 4, 4, 2, 2, 2, 0), "shift_h");
    EXPECT_EINVAL(vit_mask_window(mk, 4, 4, 2, 2, -1, 1), "shift_h");
    EXPECT_EINVAL(vit_mask_window(mk, 4, 4, 2, 2, 0, 2), "shift_w");
    EXPECT_EINVAL(vit_mask_window(mk, 4, 4, 2, 2, 1, -1), "shift_w");
    EXPECT_EINVAL(vit_mask_window(mk, 4, 4, 0, 2, 0, 0), "Mh");
    EXPECT_EINVAL(vit_mask_window(mk, 4, 4, 2, 0, 0, 0), "Mw");
    EXPECT_EINVAL(vit_mask_window(NULL, 4, 4, 2, 2, 0, 0), "allowed");
    /* rectangular windows: each axis against its own side; a shift valid
     * on the other axis's side is refused on its own */
    EXPECT_EINVAL(vit_mask_window(mk, 4, 6, 2, 4, 0, 0), "grid_w 6 (grid 4 x 6) is not a "
                  "multiple of the window's Mw = 4 (window 2 x 4)");
    EXPECT_EINVAL(vit_mask_window(mk, 6, 4, 4, 2, 0, 0), "grid_h 6 (grid 6 x 4) is not a "
                  "multiple of the window's Mh = 4 (window 4 x 2)");
    EXPECT_EINVAL(vit_mask_window(mk, 4, 8, 2, 4, 2, 0), "shift_h must be in [0, Mh = 2), got 2");
    EXPECT_EINVAL(vit_mask_window(mk, 8, 4, 4, 2, 0, 2), "shift_w must be in [0, Mw = 2), got 2");
    ck_assert_int_eq(vit_mask_window(mk, 2, 4, 2, 4, 1, 3), VIT_OK);
    EXPECT_EINVAL(vit_mask_no_self(NULL, 3, 3), "allowed");
    EXPECT_EINVAL(vit_mask_no_self(mk, 0, 3), "n_q");
    EXPECT_EINVAL(vit_mask_no_self(mk, 2, 1), "n_k = 1");
    ck_assert_uint_eq(vit_mask_count(NULL, 3, 3), 0);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "allowed"));
    ck_assert_uint_eq(vit_mask_count(mk, 0, 3), 0);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "n_q"));
}
END_TEST

/* ---- Runner ------------------------------------------------------------------- */

static Suite *attention_suite(void)
{
    Suite *s = suite_create("attention");
    TCase *g = tcase_create("sdpa_gradients");
    tcase_set_timeout(g, 60);
    tcase_add_test(g, test_sdpa_grad_nomask);
    tcase_add_test(g, test_sdpa_grad_explicit_scale);
    tcase_add_test(g, test_sdpa_grad_allowed_shared);
    tcase_add_test(g, test_sdpa_grad_allowed_per_item);
    tcase_add_test(g, test_sdpa_grad_key_valid);
    tcase_add_test(g, test_sdpa_grad_causal);
    tcase_add_test(g, test_sdpa_grad_window);
    tcase_add_test(g, test_sdpa_grad_bias_shared);
    tcase_add_test(g, test_sdpa_grad_bias_per_head);
    tcase_add_test(g, test_sdpa_grad_cross);
    tcase_add_test(g, test_sdpa_grad_combined);
    tcase_add_test(g, test_sdpa_fully_masked_row);
    tcase_add_test(g, test_sdpa_grad_head_scale);
    tcase_add_test(g, test_sdpa_grad_shared_scale_bias);
    tcase_add_test(g, test_sdpa_no_self_mask);
    tcase_add_test(g, test_head_scale_matches_fixed_scale);
    suite_add_tcase(s, g);

    TCase *c = tcase_create("sdpa_behaviour");
    tcase_set_timeout(c, 60);
    tcase_add_test(c, test_sdpa_backward_accumulates_and_work);
    tcase_add_test(c, test_sdpa_causal_flag_matches_mask);
    tcase_add_test(c, test_sdpa_nonfinite);
    suite_add_tcase(s, c);

    TCase *h = tcase_create("mha");
    tcase_set_timeout(h, 60);
    tcase_add_test(h, test_mha_grad_self_nobias);
    tcase_add_test(h, test_mha_grad_lsa);
    tcase_add_test(h, test_mha_grad_self_bias);
    tcase_add_test(h, test_mha_grad_cross);
    tcase_add_test(h, test_mha_grad_mask_and_score_bias);
    tcase_add_test(h, test_mha_backward_null_and_work);
    tcase_add_test(h, test_mha_layout);
    tcase_add_test(h, test_mha_fused_equals_separate);
    tcase_add_test(h, test_sdpa_row_strides);
    suite_add_tcase(s, h);

    TCase *p = tcase_create("properties");
    tcase_set_timeout(p, 60);
    tcase_add_test(p, test_mha_permutation_equivariance);
    tcase_add_test(p, test_window_mask_exact_zeros);
    tcase_add_test(p, test_mask_counts);
    tcase_add_test(p, test_shifted_mask_vs_rolled_grid);
    tcase_add_test(p, test_param_counts);
    suite_add_tcase(s, p);

    TCase *e = tcase_create("errors");
    tcase_set_timeout(e, 60);
    tcase_add_test(e, test_bad_input);
    suite_add_tcase(s, e);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(attention_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
