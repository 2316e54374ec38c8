/* Mixed precision (vit_bf16_thread_mixed, the config key precision): each
 * layer's bf16 path against its float32 path within a bound derived from
 * bf16's 8-bit significand and the reduction length; a whole training
 * step's gradients against float32; the precision's resolution and its
 * fallback; float32 untouched by the switch being off.
 *
 * Run twice (tests/meson.build): as the CPU is, and with VIT_BF16_CPU=none,
 * where the library sees no bf16 instructions: precision bf16 then falls
 * back to float32 (said in why), and the layers' bf16 path is the
 * FALLBACK one (the float32 GEMM on bf16-rounded inputs).
 *
 * The bound of one product.  op(A) and op(B) are rounded to bf16: each
 * value a becomes a(1 + d) with |d| <= u = 2^-8 (vit/bf16.h), so a product
 * of two becomes ab(1 + e), |e| <= 2u + u^2, and is exact in float32 (8 + 8
 * significant bits fit in 24).  The K products are summed in float32 in
 * some order: with eps = 2^-24, the sum's error is at most K eps times the
 * sum of the terms' magnitudes (the usual gamma_K, first order).  The
 * float32 path's own result is within K eps of the exact one likewise.  So
 * element (i, j) of the two results differ by at most
 *     tol(K) * S_ij,  tol(K) = (2u + u^2)(1 + K eps) + 2 K eps,
 *     S_ij = sum_k |A_ik| |B_kj|
 * (S computed here in float32 on |A| and |B|, itself within K eps: one more
 * factor (1 + K eps)).  Bias adds (one more term) count as K + 1.  GELU
 * after the product is 1.13-Lipschitz (max |GELU'| is 1.129 at x = 2.42),
 * so the linear+GELU forward's bound is 1.13 tol(K) S.
 *
 * The whole step.  A gradient is a chain of such products with float32
 * operations between; to first order each product adds a relative error of
 * at most 2u to its output's norm where its operands' magnitudes do not
 * cancel.  Let G be the number of products on the longest path from the
 * input through the forward and back to a parameter's gradient: for the
 * digits shape (depth 4; per block QKV, output, MLP up and down forward,
 * and their dX backward, the patch embedding and the head's two) G = 2 +
 * 4 * 4 + 4 * 4 + 2 = 36.  In the worst case the errors add: G * 2u = 0.28.
 * They are the roundings of distinct products, uncorrelated, so their sum
 * grows like a random walk, sqrt(G) * 2u = 0.047 in the 2-norm: that is
 * the bound used here on each parameter tensor's relative gradient
 * difference (observed: below 0.01; a wrong or dropped product term gives
 * errors of order 1).  The test also requires the error to be above
 * u / 64 somewhere, so that a bf16 path that silently ran float32 fails.
 * Activations kept in bf16 (the blocks' layer-norm and GELU outputs, read
 * back as the bf16 operands their products round anyway; GELU' and the
 * attention cache, one more rounding each of values those products read)
 * leave G as it is: observed 0.0081 before them, 0.0082 with them. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit/vit.h"

#include "../examples/convmlp.h"

static vit_rng rng;
static const double U = 1.0 / 256, EPS32 = 1.0 / 16777216;

static double tol(int K)
{
    return ((2 * U + U * U) * (1 + K * EPS32) + 2 * K * EPS32) * (1 + K * EPS32);
}

static int cpu_hidden(void)
{
    const char *v = getenv("VIT_BF16_CPU");
    return v && strcmp(v, "none") == 0;
}

static float *randn(size_t n, double scale)
{
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(scale * vit_rng_normal(&rng));
    return p;
}

static float *zeros(size_t n)
{
    float *p = calloc(n, sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *absolute(const float *x, size_t n)
{
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = fabsf(x[i]);
    return p;
}

/* |got - want| <= k tol(K) S elementwise; returns the largest
 * |got - want| / S seen (0 where S is 0). */
static double check_bound(const char *what, const float *got, const float *want, const float *S,
                          size_t n, int K, double k)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]), lim = k * tol(K) * S[i];
        if (!(d <= lim))
            ck_abort_msg("%s[%zu]: bf16 %.9g, fp32 %.9g, difference %.3g above the bound %.3g",
                         what, i, got[i], want[i], d, lim);
        if (S[i] > 0 && d / S[i] > worst)
            worst = d / S[i];
    }
    return worst;
}

/* The bf16 path really rounded: some element's error is above u / 64 of
 * its scale (a float32 product would be ~K eps). */
static void check_rounded(const char *what, double worst)
{
    ck_assert_msg(worst > U / 64, "%s: largest relative difference %.3g: no bf16 rounding seen",
                  what, worst);
}

/* ---- the switch and the resolution ------------------------------------------ */

START_TEST(switch_is_per_thread_and_off_by_default)
{
    ck_assert_int_eq(vit_bf16_thread_mixed(1), 0);
    ck_assert_int_eq(vit_bf16_thread_mixed(1), 1);
    ck_assert_int_eq(vit_bf16_thread_mixed(0), 1);
    ck_assert_int_eq(vit_bf16_thread_mixed(0), 0);
}
END_TEST

START_TEST(precision_resolves_as_documented)
{
    char why[200];
    ck_assert_int_eq(vit_precision_resolve(VIT_PRECISION_FP32, why, sizeof why),
                     VIT_PRECISION_FP32);
    ck_assert_str_eq(why, "fp32");
    int have = vit_bf16_get_path() == VIT_BF16_XSMM;
    if (cpu_hidden()) {
        ck_assert_uint_eq(vit_bf16_cpu_features(), 0);
        ck_assert_int_eq(have, 0);
    }
    int got = vit_precision_resolve(VIT_PRECISION_BF16, why, sizeof why);
    ck_assert_int_eq(got, have ? VIT_PRECISION_BF16 : VIT_PRECISION_FP32);
    if (have)
        ck_assert_msg(strncmp(why, "bf16 (", 6) == 0, "%s", why);
    else
        ck_assert_msg(strncmp(why, "fp32 (bf16 was asked for, but ", 30) == 0, "%s", why);
    got = vit_precision_resolve(VIT_PRECISION_AUTO, why, sizeof why);
    ck_assert_int_eq(got, have ? VIT_PRECISION_BF16 : VIT_PRECISION_FP32);
    if (!have)
        ck_assert_msg(strncmp(why, "fp32 (auto: ", 12) == 0, "%s", why);
    ck_assert_int_eq(vit_precision_resolve(7, why, sizeof why), VIT_PRECISION_FP32);
    ck_assert_ptr_nonnull(strstr(why, "7"));
    /* A model made with bf16 says what it runs in. */
    vit_config c;
    vit_train_config tc;
    vit_config_default(&c);
    vit_train_config_default(&tc);
    ck_assert_int_eq(vit_train_config_set(&tc, "precision", "bf16"), VIT_OK);
    ck_assert_int_eq(tc.precision, VIT_PRECISION_BF16);
    ck_assert_int_eq(vit_train_config_set(&tc, "precision", "half"), VIT_EINVAL);
    ck_assert_int_eq(tc.precision, VIT_PRECISION_BF16);
    vit_model *m = vit_model_new(&c);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(vit_model_precision(m), VIT_PRECISION_FP32); /* a new model's */
    ck_assert_int_ge(vit_model_set_precision(m, tc.precision), 0);
    ck_assert_int_eq(vit_model_precision(m), have ? VIT_PRECISION_BF16 : VIT_PRECISION_FP32);
    vit_model_free(m);
}
END_TEST

/* ---- the layers ----------------------------------------------------------------- */

/* vit_linear_forward and _backward: y (K = in + 1 with the bias), dx
 * (K = out), dW (K = n) within the bound; db exactly float32's (a column
 * sum, no product). */
START_TEST(linear_within_bound)
{
    const int n = 67, in = 51, out = 45;
    float *x = randn((size_t)n * in, 1), *W = randn((size_t)in * out, 0.2);
    float *b = randn(out, 0.1), *dy = randn((size_t)n * out, 1);
    float *y[2], *dx[2], *dW[2], *db[2];
    for (int mixed = 0; mixed < 2; mixed++) {
        y[mixed] = zeros((size_t)n * out);
        dx[mixed] = zeros((size_t)n * in);
        dW[mixed] = zeros((size_t)in * out);
        db[mixed] = zeros(out);
        vit_bf16_thread_mixed(mixed);
        ck_assert_int_eq(vit_linear_forward(y[mixed], x, W, b, n, in, out), VIT_OK);
        ck_assert_int_eq(vit_linear_backward(dx[mixed], dW[mixed], db[mixed], dy, x, W, n, in,
                                             out), VIT_OK);
        ck_assert_int_eq(vit_bf16_thread_mixed(0), mixed);
    }
    /* The magnitudes S of each product, in float32. */
    float *ax = absolute(x, (size_t)n * in), *aW = absolute(W, (size_t)in * out);
    float *ab = absolute(b, out), *ady = absolute(dy, (size_t)n * out);
    float *Sy = zeros((size_t)n * out), *Sdx = zeros((size_t)n * in);
    float *SdW = zeros((size_t)in * out);
    ck_assert_int_eq(vit_linear_forward(Sy, ax, aW, ab, n, in, out), VIT_OK);
    ck_assert_int_eq(vit_linear_backward(Sdx, SdW, NULL, ady, ax, aW, n, in, out), VIT_OK);
    check_rounded("y", check_bound("y", y[1], y[0], Sy, (size_t)n * out, in + 1, 1));
    check_rounded("dx", check_bound("dx", dx[1], dx[0], Sdx, (size_t)n * in, out, 1));
    check_rounded("dW", check_bound("dW", dW[1], dW[0], SdW, (size_t)in * out, n, 1));
    ck_assert_mem_eq(db[1], db[0], out * sizeof *db[0]);
    float *all[] = {x, W, b, dy, y[0], y[1], dx[0], dx[1], dW[0], dW[1], db[0], db[1],
                    ax, aW, ab, ady, Sy, Sdx, SdW};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}
END_TEST

/* The patch embedding's forward (K = P*P*C + 1), dW (K = rows) and dimg
 * (dy W^T, K = D, then col2im: a pixel under several patches sums their
 * products, so its bound is the sum of theirs, col2im of |dy| |W|^T), on
 * overlapping, padded patches (the im2col path) of 3-channel images. */
START_TEST(patch_embed_within_bound)
{
    vit_patch_shape s = {.batch = 3, .height = 12, .width = 12, .channels = 3, .patch = 4,
                         .dim = 24, .stride = 2, .pad = 1};
    int N = vit_patch_count(&s), K = 4 * 4 * 3, rows = s.batch * N;
    const size_t npix = (size_t)s.batch * 12 * 12 * 3;
    ck_assert_int_gt(N, 0);
    float *img = randn(npix, 1), *W = randn((size_t)K * s.dim, 0.2);
    float *b = randn(s.dim, 0.1), *dy = randn((size_t)rows * s.dim, 1);
    float *cols = zeros((size_t)rows * K), *y[2], *dW[2], *dimg[2];
    for (int mixed = 0; mixed < 2; mixed++) {
        y[mixed] = zeros((size_t)rows * s.dim);
        dW[mixed] = zeros((size_t)K * s.dim);
        dimg[mixed] = zeros(npix);
        vit_bf16_thread_mixed(mixed);
        ck_assert_int_eq(vit_patch_embed_forward(&s, y[mixed], cols, img, W, b), VIT_OK);
        ck_assert_int_eq(vit_patch_embed_backward(&s, dimg[mixed], dW[mixed], NULL, dy, cols, W),
                         VIT_OK);
        vit_bf16_thread_mixed(0);
    }
    float *aimg = absolute(img, npix), *aW = absolute(W, (size_t)K * s.dim);
    float *ab = absolute(b, s.dim), *ady = absolute(dy, (size_t)rows * s.dim);
    float *Sy = zeros((size_t)rows * s.dim), *SdW = zeros((size_t)K * s.dim), *Sdimg = zeros(npix);
    ck_assert_int_eq(vit_patch_embed_forward(&s, Sy, cols, aimg, aW, ab), VIT_OK);
    ck_assert_int_eq(vit_patch_embed_backward(&s, Sdimg, SdW, NULL, ady, cols, aW), VIT_OK);
    check_rounded("y", check_bound("y", y[1], y[0], Sy, (size_t)rows * s.dim, K + 1, 1));
    check_rounded("dW", check_bound("dW", dW[1], dW[0], SdW, (size_t)K * s.dim, rows, 1));
    check_rounded("dimg", check_bound("dimg", dimg[1], dimg[0], Sdimg, npix, s.dim, 1));
    float *all[] = {img, W, b, dy, cols, y[0], y[1], dW[0], dW[1], dimg[0], dimg[1], aimg, aW,
                    ab, ady, Sy, SdW, Sdimg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}
END_TEST

/* The tape ops: vit_op_linear_gelu's forward (GELU 1.13-Lipschitz after a
 * K = in + 1 product), vit_op_linear_add's forward (the residual added
 * exactly) and the gradients of W1 and x through vit_op_linear's backward
 * (dW1 += x^T dy, K = rows; dx = dy W1^T, K = out, when y = x W1 + b). */
START_TEST(tape_linear_ops_within_bound)
{
    const int B = 5, T = 7, in = 32, out = 40, rows = B * T;
    float *x = randn((size_t)rows * in, 1), *W = randn((size_t)in * out, 0.2);
    float *b = randn(out, 0.1), *r = randn((size_t)rows * out, 1);
    float *dy = randn((size_t)rows * out, 1);
    float *g[2], *a[2], *dW[2], *dx[2];
    int xs[3] = {B, T, in}, ws[2] = {in, out}, bs[1] = {out}, rs[3] = {B, T, out};
    for (int mixed = 0; mixed < 2; mixed++) {
        vit_tape *t = vit_tape_new();
        ck_assert_ptr_nonnull(t);
        g[mixed] = zeros((size_t)rows * out);
        a[mixed] = zeros((size_t)rows * out);
        dW[mixed] = zeros((size_t)in * out);
        dx[mixed] = zeros((size_t)rows * in);
        vit_bf16_thread_mixed(mixed);
        vit_tensor *tx = vit_tape_leaf(t, x, dx[mixed], 3, xs);
        vit_tensor *tW = vit_tape_leaf(t, W, dW[mixed], 2, ws);
        vit_tensor *tb = vit_tape_leaf(t, b, NULL, 1, bs);
        vit_tensor *tr = vit_tape_leaf(t, r, NULL, 3, rs);
        vit_tensor *yg = vit_op_linear_gelu(t, tx, tW, tb);
        vit_tensor *ya = vit_op_linear_add(t, tx, tW, tb, tr);
        vit_tensor *yl = vit_op_linear(t, tx, tW, tb);
        ck_assert(yg && ya && yl);
        memcpy(g[mixed], yg->data, (size_t)rows * out * sizeof *g[mixed]);
        memcpy(a[mixed], ya->data, (size_t)rows * out * sizeof *a[mixed]);
        ck_assert_int_eq(vit_tape_backward_from(t, yl, dy), VIT_OK);
        ck_assert_int_eq(vit_bf16_thread_mixed(0), mixed);
        vit_tape_free(t);
    }
    float *ax = absolute(x, (size_t)rows * in), *aW = absolute(W, (size_t)in * out);
    float *ab = absolute(b, out), *ady = absolute(dy, (size_t)rows * out);
    float *S = zeros((size_t)rows * out), *SdW = zeros((size_t)in * out);
    float *Sdx = zeros((size_t)rows * in);
    ck_assert_int_eq(vit_linear_forward(S, ax, aW, ab, rows, in, out), VIT_OK);
    ck_assert_int_eq(vit_linear_backward(Sdx, SdW, NULL, ady, ax, aW, rows, in, out), VIT_OK);
    check_rounded("gelu", check_bound("gelu", g[1], g[0], S, (size_t)rows * out, in + 1, 1.13));
    /* r + (x W + b): the residual is added exactly, once more rounding. */
    for (size_t i = 0; i < (size_t)rows * out; i++)
        S[i] += fabsf(r[i]);
    check_rounded("add", check_bound("add", a[1], a[0], S, (size_t)rows * out, in + 2, 1));
    check_rounded("dW", check_bound("dW", dW[1], dW[0], SdW, (size_t)in * out, rows, 1));
    check_rounded("dx", check_bound("dx", dx[1], dx[0], Sdx, (size_t)rows * in, out, 1));
    float *all[] = {x, W, b, r, dy, g[0], g[1], a[0], a[1], dW[0], dW[1], dx[0], dx[1],
                    ax, aW, ab, ady, S, SdW, Sdx};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}
END_TEST

/* ---- activations kept in bf16 ------------------------------------------------------ */

/* vit_op_linear_gelu keeps GELU'(u) in bf16 in mixed precision.  With x,
 * W, b and dy exact in bf16 and small enough that x W + b is exact in
 * float32 whatever the order, both paths compute the same pre-activation,
 * so the forward is bitwise the same and the backward differs only by the
 * rounding of GELU' (relative 2^-8) and of du = dy GELU' (rounded again as
 * a GEMM operand): du(1 + d1)(1 + d2), |di| <= u, plus two float32 product
 * roundings.  So dW = x^T du and dx = du W^T are within tol(K + 1) S (the
 * + 1 takes the two eps), S the sums of |x| |du| and |du| |W|, and db =
 * the column sums of du within (u + 2 eps + 2 n eps (1 + u)) sum |du|.  A
 * float32 GELU' kept would make them differ by ~n eps only (check_rounded). */
START_TEST(linear_gelu_keeps_gelu_grad_in_bf16)
{
    /* _i 1: 2.2 MB of pre-activation, which the mixed forward computes in
     * blocks of 1008 rows and one of 92 (src/tape/tape_ops_linear.c) */
    const int n = _i ? 1100 : 24, in = 32, out = _i ? 520 : 40;
    float *x = malloc((size_t)n * in * sizeof *x), *W = malloc((size_t)in * out * sizeof *W);
    float *b = malloc(out * sizeof *b), *dy = malloc((size_t)n * out * sizeof *dy);
    ck_assert(x && W && b && dy);
    for (int i = 0; i < n * in; i++)
        x[i] = (float)((int)vit_rng_below(&rng, 17) - 8) / 8; /* k / 8, |k| <= 8 */
    for (int i = 0; i < in * out; i++)
        W[i] = (float)((int)vit_rng_below(&rng, 33) - 16) / 64; /* j / 64 */
    for (int i = 0; i < out; i++)
        b[i] = (float)((int)vit_rng_below(&rng, 33) - 16) / 64;
    for (int i = 0; i < n * out; i++)
        dy[i] = (float)((int)vit_rng_below(&rng, 255) - 127) / 64; /* 8 significant bits */
    float *y[2], *dW[2], *db[2], *dx[2];
    int xs[2] = {n, in}, ws[2] = {in, out}, bs[1] = {out};
    for (int mixed = 0; mixed < 2; mixed++) {
        vit_tape *t = vit_tape_new();
        ck_assert_ptr_nonnull(t);
        y[mixed] = zeros((size_t)n * out);
        dW[mixed] = zeros((size_t)in * out);
        db[mixed] = zeros(out);
        dx[mixed] = zeros((size_t)n * in);
        vit_bf16_thread_mixed(mixed);
        vit_tensor *ty = vit_op_linear_gelu(t, vit_tape_leaf(t, x, dx[mixed], 2, xs),
                                            vit_tape_leaf(t, W, dW[mixed], 2, ws),
                                            vit_tape_leaf(t, b, db[mixed], 1, bs));
        ck_assert_ptr_nonnull(ty);
        memcpy(y[mixed], ty->data, (size_t)n * out * sizeof *y[mixed]);
        ck_assert_int_eq(vit_tape_backward_from(t, ty, dy), VIT_OK);
        ck_assert_int_eq(vit_bf16_thread_mixed(0), mixed);
        vit_tape_free(t);
    }
    ck_assert_mem_eq(y[0], y[1], (size_t)n * out * sizeof *y[0]);
    /* |du| = |dy| GELU'(x W + b) from the exact pre-activation. */
    float *v = zeros((size_t)n * out), *du = zeros((size_t)n * out);
    float *ones = malloc((size_t)n * out * sizeof *ones);
    ck_assert_ptr_nonnull(ones);
    for (int i = 0; i < n * out; i++)
        ones[i] = 1;
    ck_assert_int_eq(vit_linear_forward(v, x, W, b, n, in, out), VIT_OK);
    ck_assert_int_eq(vit_gelu_backward(du, ones, v, (size_t)n * out), VIT_OK);
    for (int i = 0; i < n * out; i++)
        du[i] = fabsf(du[i] * dy[i]);
    float *ax = absolute(x, (size_t)n * in), *aW = absolute(W, (size_t)in * out);
    float *SdW = zeros((size_t)in * out), *Sdx = zeros((size_t)n * in), *Sdb = zeros(out);
    ck_assert_int_eq(vit_linear_backward(Sdx, SdW, Sdb, du, ax, aW, n, in, out), VIT_OK);
    double worst = check_bound("dW", dW[1], dW[0], SdW, (size_t)in * out, n + 1, 1);
    check_rounded("dW", worst);
    check_rounded("dx", check_bound("dx", dx[1], dx[0], Sdx, (size_t)n * in, out + 1, 1));
    double kdb = (U + 2 * EPS32 + 2 * n * EPS32 * (1 + U)) / tol(n + 1);
    check_rounded("db", check_bound("db", db[1], db[0], Sdb, out, n + 1, kdb));
    float *all[] = {x, W, b, dy, y[0], y[1], dW[0], dW[1], db[0], db[1], dx[0], dx[1], v, du,
                    ones, ax, aW, SdW, Sdx, Sdb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}
END_TEST

/* A block (vit_op_block) of b items of t tokens and a tape in grad mode.
 * The small shape (KB, KT) is chosen so that every kept buffer is a whole
 * number of the arena's 64-byte units; the long one (PB, PT: 422 KB of
 * attention cache an item) has its bf16-kept attention backward run in
 * pieces of 4 items and a short last piece of 1 (src/tape/tape_ops_attention.c),
 * with padding keys that differ by item, and its MLP (width PM: 2.2 MB of
 * pre-activation) run, forward and backward, in blocks of 963 rows and one
 * of 37 (src/tape/tape_ops_mlp.c). */
enum { KB = 2, KT = 8, KD = 32, KH = 2, KM = 64, PB = 5, PT = 200, PM = 544 };

typedef struct kept_block {
    vit_mha mha;
    int b, t, r, m; /* items, tokens, rows, MLP width */
    float *x, *w[9], *gx, *gw[9];
    unsigned char *valid; /* [b, t] key_valid for the long shape, else NULL */
    size_t nw[9];
    float *lb, *glb; /* with_bias: a learnable score bias [KH, t, t] (opts.bias) */
    int with_bias;
} kept_block;

static void kept_block_make(kept_block *k, int b, int t)
{
    memset(k, 0, sizeof *k);
    k->b = b;
    k->t = t;
    k->r = b * t;
    k->m = b == PB ? PM : KM;
    k->mha = (vit_mha){.batch = b, .n_q = t, .n_k = t, .d_model = KD, .heads = KH,
                       .has_bias = 1};
    if (b == PB) {
        k->valid = malloc((size_t)b * t);
        ck_assert_ptr_nonnull(k->valid);
        for (int i = 0; i < b; i++)
            for (int j = 0; j < t; j++)
                k->valid[(size_t)i * t + j] = j < t - 10 * i;
        k->mha.mask.key_valid = k->valid;
    }
    const size_t nw[9] = {KD, KD, vit_mha_param_count(&k->mha), KD, KD, (size_t)KD * k->m,
                          (size_t)k->m, (size_t)k->m * KD, KD};
    k->x = randn((size_t)k->r * KD, 1);
    k->gx = zeros((size_t)k->r * KD);
    for (int i = 0; i < 9; i++) {
        k->nw[i] = nw[i];
        k->w[i] = randn(nw[i], i == 2 || i >= 5 ? 0.2 : 0.1);
        if (i == 0 || i == 3) /* gains around 1 */
            for (size_t j = 0; j < nw[i]; j++)
                k->w[i][j] += 1;
        k->gw[i] = zeros(nw[i]);
    }
    k->lb = randn((size_t)KH * t * t, 0.5);
    k->glb = zeros((size_t)KH * t * t);
}

static void kept_block_free(kept_block *k)
{
    free(k->x);
    free(k->gx);
    free(k->valid);
    free(k->lb);
    free(k->glb);
    for (int i = 0; i < 9; i++) {
        free(k->w[i]);
        free(k->gw[i]);
    }
}

/* The block's forward on t (gradients into k's buffers, zeroed first),
 * the backward from dy when dy is not NULL; returns the arena bytes the
 * forward took (vit_tape_mark). */
static size_t kept_block_run(kept_block *k, vit_tape *t, const vit_block_opts *o, const float *dy)
{
    memset(k->gx, 0, (size_t)k->r * KD * sizeof *k->gx);
    memset(k->glb, 0, (size_t)KH * k->t * k->t * sizeof *k->glb);
    for (int i = 0; i < 9; i++)
        memset(k->gw[i], 0, k->nw[i] * sizeof *k->gw[i]);
    vit_block_opts with = o ? *o : (vit_block_opts){0};
    if (k->with_bias) {
        with.bias = vit_tape_leaf(t, k->lb, k->glb, 3, (int[]){KH, k->t, k->t});
        o = &with;
    }
    int xs[3] = {k->b, k->t, KD}, s1[1], s2[2];
    vit_tensor *w[9];
    for (int i = 0; i < 9; i++) {
        int two = i == 5 || i == 7;
        s2[0] = i == 5 ? KD : k->m;
        s2[1] = i == 5 ? k->m : KD;
        s1[0] = (int)k->nw[i];
        w[i] = vit_tape_leaf(t, k->w[i], k->gw[i], two ? 2 : 1, two ? s2 : s1);
    }
    size_t before = vit_tape_mark(t);
    vit_block_weights bw = {w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]};
    vit_tensor *y = vit_op_block(t, &k->mha, &bw, vit_tape_leaf(t, k->x, k->gx, 3, xs), o);
    ck_assert_ptr_nonnull(y);
    size_t bytes = vit_tape_mark(t) - before;
    if (dy)
        ck_assert_int_eq(vit_tape_backward_from(t, y, dy), VIT_OK);
    return bytes;
}

/* In mixed precision a block keeps, of its layer norms' outputs and its
 * attention cache, only their bf16 roundings, no values of the
 * attention's output, and of its MLP only the pre-activation in bf16
 * (where float32 keeps GELU's output and GELU'): its forward takes
 * 8 R D + 2 C + 6 R M bytes less of the tape's arena (R = B T rows, C the
 * attention cache's vit_mha_cache_size floats: 4 bytes each, 2 in bf16)
 * than in float32, plus the record and output header of the one op its
 * MLP saves (192 bytes here; allowed: under 512).  Any of them kept as
 * float instead takes at least 2 R D = 1024 bytes more and fails this;
 * GELU's output or GELU' kept beside the pre-activation 2 R M = 2048. */
START_TEST(block_keeps_activations_in_bf16)
{
    kept_block k;
    kept_block_make(&k, KB, KT);
    size_t cache = vit_mha_cache_size(&k.mha), bytes[2];
    for (int mixed = 0; mixed < 2; mixed++) {
        vit_tape *t = vit_tape_new();
        ck_assert_ptr_nonnull(t);
        vit_bf16_thread_mixed(mixed);
        bytes[mixed] = kept_block_run(&k, t, NULL, NULL);
        ck_assert_int_eq(vit_bf16_thread_mixed(0), mixed);
        vit_tape_free(t);
    }
    size_t saved = 8 * (size_t)k.r * KD + 2 * cache + 6 * (size_t)k.r * k.m;
    ck_assert_msg(bytes[0] - bytes[1] >= saved && bytes[0] - bytes[1] < saved + 512,
                  "float32 block %zu bytes, mixed %zu: %zu less, expected %zu and under 512 more",
                  bytes[0], bytes[1], bytes[0] - bytes[1], saved);
    kept_block_free(&k);
}
END_TEST

/* In mixed precision the block's MLP is one op only for shapes that agree;
 * a W2 of the wrong shape (here [D, M] for [M, D]) goes to the two ops,
 * whose linear-add refuses it naming the problem, as in float32: the
 * block returns NULL and the tape stops with VIT_EINVAL. */
START_TEST(block_mlp_bad_shape_refused)
{
    kept_block k;
    kept_block_make(&k, KB, KT);
    for (int mixed = 0; mixed < 2; mixed++) {
        vit_tape *t = vit_tape_new();
        ck_assert_ptr_nonnull(t);
        vit_bf16_thread_mixed(mixed);
        int xs[3] = {k.b, k.t, KD}, s1[1], s2[2];
        vit_tensor *w[9];
        for (int i = 0; i < 9; i++) {
            int two = i == 5 || i == 7;
            s2[0] = i == 5 || i == 7 ? KD : k.m; /* W2 transposed: [D, M] */
            s2[1] = i == 5 || i == 7 ? k.m : KD;
            s1[0] = (int)k.nw[i];
            w[i] = vit_tape_leaf(t, k.w[i], k.gw[i], two ? 2 : 1, two ? s2 : s1);
        }
        vit_block_weights bw = {w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]};
        vit_tensor *y = vit_op_block(t, &k.mha, &bw, vit_tape_leaf(t, k.x, k.gx, 3, xs), NULL);
        ck_assert_int_eq(vit_bf16_thread_mixed(0), mixed);
        ck_assert_ptr_null(y);
        ck_assert_int_eq(vit_tape_status(t), VIT_EINVAL);
        ck_assert_msg(strstr(vit_last_error(), "vit_op_linear_add") != NULL, "mixed %d: '%s'",
                      mixed, vit_last_error());
        vit_tape_free(t);
    }
    kept_block_free(&k);
}
END_TEST

/* The block's gradients in mixed precision (its kept activations read back
 * from bf16) against float32, for the plain block, token0_only and drop
 * path: each weight's and x's relative difference (2-norm) within
 * sqrt(G) 2u as in the whole step (see the top), G = 10 for one block: its
 * four layer products forward, their four dX products back, and the two
 * attention products back (dP, then dQ or dK) whose operands the bf16
 * cache rounds.  A kept buffer read after it was overwritten gives errors
 * of order 1.  And twice in a row on one tape, the same bits (its buffers
 * reused across steps).  _i 1: the long shape, whose attention backward
 * and MLP run in pieces of the batch; a piece given another's rows, maps or
 * padding gives errors of 0.17 and more. */
START_TEST(block_gradients_within_bound)
{
    kept_block k;
    kept_block_make(&k, _i ? PB : KB, _i ? PT : KT);
    float *dy = randn((size_t)k.r * KD, 1);
    vit_real drop[PB] = {0, 2, 2, 0, 2};
    vit_block_opts opts[4] = {{0}, {.token0_only = 1}, {.drop_attn = drop, .drop_mlp = drop},
                              {.eps = 0}};
    const double lim = sqrt(10.0) * 2 * U;
    for (int o = 0; o < 4; o++) {
        k.with_bias = o == 3; /* a learnable score bias: its gradient is input 10 */
        float *g[2][11];
        for (int mixed = 0; mixed < 2; mixed++) {
            vit_tape *t = vit_tape_new();
            ck_assert_ptr_nonnull(t);
            vit_bf16_thread_mixed(mixed);
            for (int rep = 0; rep < 2; rep++) {
                vit_tape_reset(t);
                kept_block_run(&k, t, &opts[o], dy);
                for (int i = 0; i < 11; i++) {
                    size_t n = i == 10 ? (size_t)KH * k.t * k.t : i ? k.nw[i - 1]
                             : (size_t)k.r * KD;
                    const float *src = i == 10 ? k.glb : i ? k.gw[i - 1] : k.gx;
                    if (rep == 1) {
                        ck_assert_mem_eq(g[mixed][i], src, n * sizeof *src);
                        free(g[mixed][i]);
                    }
                    g[mixed][i] = malloc(n * sizeof *src);
                    ck_assert_ptr_nonnull(g[mixed][i]);
                    memcpy(g[mixed][i], src, n * sizeof *src);
                }
            }
            ck_assert_int_eq(vit_bf16_thread_mixed(0), mixed);
            vit_tape_free(t);
        }
        double worst = 0;
        for (int i = 0; i < 11; i++) {
            if (i == 10 && !k.with_bias) { /* zeros both: nothing to compare */
                free(g[0][i]);
                free(g[1][i]);
                continue;
            }
            size_t n = i == 10 ? (size_t)KH * k.t * k.t : i ? k.nw[i - 1] : (size_t)k.r * KD;
            double d2 = 0, f2 = 0;
            for (size_t j = 0; j < n; j++) {
                double d = (double)g[1][i][j] - g[0][i][j];
                d2 += d * d;
                f2 += (double)g[0][i][j] * g[0][i][j];
            }
            double rel = f2 > 0 ? sqrt(d2 / f2) : sqrt(d2);
            ck_assert_msg(rel <= lim, "opts %d, input %d: relative gradient difference %.3g "
                          "above %.3g", o, i, rel, lim);
            if (rel > worst)
                worst = rel;
            free(g[0][i]);
            free(g[1][i]);
        }
        check_rounded("block", worst);
    }
    free(dy);
    kept_block_free(&k);
}
END_TEST

/* ---- the whole step ------------------------------------------------------------- */

/* Tensor t's gradient g1 against g0: the relative 2-norm difference
 * (absolute where g0 is zero there); *zero set when g0 is. */
static double tensor_rel(const vit_model_tensor *t, const float *g1, const float *g0, int *zero)
{
    double d2 = 0, f2 = 0;
    for (size_t j = t->offset; j < t->offset + t->size; j++) {
        double d = (double)g1[j] - g0[j];
        d2 += d * d;
        f2 += (double)g0[j] * g0[j];
    }
    if (zero)
        *zero = f2 == 0;
    return f2 > 0 ? sqrt(d2 / f2) : sqrt(d2);
}

/* On one thread, the bf16 model mb's own step (its weights packed once)
 * against the float32 model mf's with the switch turned on by hand (each
 * product packs its operand): the same bits.  g: scratch of the models'
 * parameter count. */
static void check_packed_is_per_product(vit_model *mb, vit_model *mf, const float *img,
                                        const int *labels, int batch, float *g, int bf16)
{
    size_t np = vit_model_param_count(mb);
    ck_assert_int_eq(vit_set_threads(1), VIT_OK);
    double loss;
    ck_assert_int_eq(vit_model_train_grads(mb, img, labels, batch, 0.1f, &loss, NULL), VIT_OK);
    memcpy(g, vit_model_grads(mb), np * sizeof *g);
    vit_bf16_thread_mixed(bf16);
    ck_assert_int_eq(vit_model_train_grads(mf, img, labels, batch, 0.1f, &loss, NULL), VIT_OK);
    ck_assert_int_eq(vit_bf16_thread_mixed(0), bf16);
    ck_assert_mem_eq(g, vit_model_grads(mf), np * sizeof *g);
}

/* One digits-shaped training step (depth 4, batch 32, two threads; _i = 1
 * with a 4-channel stem, whose feature map's gradient is a bf16 product
 * too; _i = 2 with stem2 of 4 channels after it, two more; _i = 3 a 16x16
 * image in 2x2 patches, 65 tokens, one head 64 wide, depth 2, whose
 * attention core runs bf16 too: per block two more products forward (S, O)
 * and two more back on the longest path (dP, then dQ)) in bf16 and in
 * float32 from the same parameters: each parameter tensor's
 * gradient within sqrt(G) * 2u (relative, 2-norm; see the top), above u / 64
 * for some weight matrix (bf16 really ran).  Where bf16 cannot run, the
 * model falls back and both steps are bitwise the same.  Then the thread
 * switch around a one-thread float32-config step gives bitwise the same
 * gradients as the bf16 config's one-thread step (packed weights once per
 * step, or the same operand packed per product: the same numbers). */
/* 16x16 images in 64 patches of 2, one head of width 64 over 65 tokens:
 * wide enough for the bf16 attention core. */
static void wide_config(vit_config *c)
{
    vit_config_default(c);
    c->image_height = c->image_width = 16;
    c->patch = 2;
    c->dim = 64;
    c->heads = 1;
    c->mlp = 64;
    c->depth = 2;
}

/* batch gray images of c's size, normal values, and labels below 10. */
static float *random_batch(const vit_config *c, int batch, int *labels)
{
    float *img = randn((size_t)batch * c->image_height * c->image_width, 1);
    for (int i = 0; i < batch; i++)
        labels[i] = (int)vit_rng_below(&rng, 10);
    return img;
}

START_TEST(training_step_within_bound)
{
    vit_config c;
    vit_config_default(&c);
    c.stem = _i ? 4 : 0; /* _i = 1: with a convolutional stem (two more products) */
    c.stem2 = _i == 2 ? 4 : 0; /* its 4x4 map in 2x2 patches (4 at stride 2, padded) */
    int core = 0; /* products of the attention core on the longest path, per block */
    if (_i == 3) {
        wide_config(&c);
        core = 2;
    }
    const int batch = 32;
    const int G = 2 + (4 + core) * c.depth + (4 + core) * c.depth + 2 + (c.stem ? 2 : 0)
                + (c.stem2 ? 2 : 0);
    vit_model *m[2];
    float *grads[2];
    size_t np = 0;
    int labels[32];
    float *img = random_batch(&c, batch, labels);
    ck_assert_int_eq(vit_set_threads(2), VIT_OK);
    for (int k = 0; k < 2; k++) {
        m[k] = vit_model_new(&c);
        ck_assert_ptr_nonnull(m[k]);
        ck_assert_int_ge(vit_model_set_precision(m[k], k ? VIT_PRECISION_BF16
                                                         : VIT_PRECISION_FP32), 0);
        vit_rng r;
        vit_rng_seed(&r, 5);
        vit_model_init(m[k], &r);
        np = vit_model_param_count(m[k]);
        double loss;
        ck_assert_int_eq(vit_model_train_grads(m[k], img, labels, batch, 0.1f, &loss, NULL),
                         VIT_OK);
        grads[k] = malloc(np * sizeof *grads[k]);
        ck_assert_ptr_nonnull(grads[k]);
        memcpy(grads[k], vit_model_grads(m[k]), np * sizeof *grads[k]);
    }
    int bf16 = vit_model_precision(m[1]) == VIT_PRECISION_BF16;
    if (!bf16) {
        ck_assert_mem_eq(grads[0], grads[1], np * sizeof *grads[0]);
    } else {
        double worst_matrix = 0;
        for (int i = 0; i < vit_model_tensor_count(m[0]); i++) {
            const vit_model_tensor *t = vit_model_tensor_at(m[0], i);
            double rel = tensor_rel(t, grads[1], grads[0], NULL);
            double lim = sqrt((double)G) * 2 * U;
            ck_assert_msg(rel <= lim, "%s: relative gradient difference %.3g above %.3g",
                          t->name, rel, lim);
            if (t->ndim == 2 && rel > worst_matrix)
                worst_matrix = rel;
        }
        check_rounded("step", worst_matrix);
    }
    check_packed_is_per_product(m[1], m[0], img, labels, batch, grads[1], bf16);
    for (int k = 0; k < 2; k++) {
        vit_model_free(m[k]);
        free(grads[k]);
    }
    free(img);
}
END_TEST

/* A model of config c at precision (ck_assert on failure), initialised
 * from seed 7. */
static vit_model *model_at(const vit_config *c, int precision)
{
    vit_model *m = vit_model_new(c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    ck_assert_int_ge(vit_model_set_precision(m, precision), 0);
    vit_rng r;
    vit_rng_seed(&r, 7);
    vit_model_init(m, &r);
    return m;
}

/* One training step of two models of config c, m[0] float32 and m[1] made
 * with precision bf16, from the same parameters, on a batch of B random
 * images and labels, on `threads` threads, and the checks the
 * architectures' bf16 steps share,
 * with Gf products on the longest chain from the images to the logits and
 * G on the longest to a parameter's gradient (as for the ViT, see the top).
 * Against float32:
 *  - each image's logits within sqrt(Gf) 2u of their 2-norm (so each
 *    logit too);
 *  - the loss within sqrt(2) sqrt(Gf) 2u times the mean logit row norm
 *    (cross-entropy's gradient in the logits, p - y, has 2-norm at most
 *    sqrt(2); first order);
 *  - each parameter tensor's gradient within sqrt(G) 2u (relative,
 *    2-norm), none of them zero;
 * and bf16 really ran: the loss differs, and every weight matrix's
 * gradient (the tensors whose names contain `matrix`) and the logits by
 * more than u / 64 somewhere (float32 sums alone would differ by ~1e-7).
 * Where bf16 cannot run, both steps are the same bits.  Then, on one
 * thread, the switch by hand around the float32 model's step gives the
 * bf16 model's bits (its weights packed once per step: the same numbers as
 * packed per product).  what: the architecture, for the printed line. */
static void step_within_bound(const vit_config *c, int B, int threads, int Gf, int G,
                              const char *matrix, const char *what)
{
    const int K = c->classes;
    float *img = randn((size_t)B * c->image_height * c->image_width * c->channels, 1);
    int *labels = malloc((size_t)B * sizeof *labels);
    ck_assert_ptr_nonnull(labels);
    for (int i = 0; i < B; i++)
        labels[i] = (int)vit_rng_below(&rng, K);
    vit_model *m[2] = {model_at(c, VIT_PRECISION_FP32), model_at(c, VIT_PRECISION_BF16)};
    ck_assert_int_eq(vit_set_threads(threads), VIT_OK);
    float *grads[2], *z[2];
    double loss[2];
    size_t np = vit_model_param_count(m[0]);
    ck_assert_uint_eq(vit_model_param_count(m[1]), np);
    vit_tape *tape = vit_tape_new();
    ck_assert_ptr_nonnull(tape);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(vit_model_train_grads(m[k], img, labels, B, 0.1f, &loss[k], NULL)
                      == VIT_OK, "%s", vit_last_error());
        grads[k] = malloc(np * sizeof *grads[k]);
        z[k] = malloc((size_t)B * K * sizeof *z[k]);
        ck_assert(grads[k] && z[k]);
        memcpy(grads[k], vit_model_grads(m[k]), np * sizeof *grads[k]);
        /* the logits: the same forward, mixed on this thread for bf16 */
        int bf = vit_model_precision(m[k]) == VIT_PRECISION_BF16;
        vit_bf16_thread_mixed(bf);
        vit_tape_reset(tape);
        vit_tensor *y = vit_model_forward(m[k], tape, img, B, 0);
        ck_assert_int_eq(vit_bf16_thread_mixed(0), bf);
        ck_assert_msg(y != NULL, "%s", vit_last_error());
        memcpy(z[k], y->data, (size_t)B * K * sizeof *z[k]);
    }
    int bf16 = vit_model_precision(m[1]) == VIT_PRECISION_BF16;
    ck_assert_int_eq(bf16, vit_precision_resolve(VIT_PRECISION_BF16, NULL, 0)
                               == VIT_PRECISION_BF16); /* bf16 wherever the CPU has it */
    if (!bf16) {
        ck_assert_mem_eq(grads[0], grads[1], np * sizeof *grads[0]);
        ck_assert(loss[0] == loss[1]);
    } else {
        double worst_z = 0, mean_norm = 0, lim_f = sqrt((double)Gf) * 2 * U;
        for (int i = 0; i < B; i++) {
            double d2 = 0, f2 = 0;
            for (int j = 0; j < K; j++) {
                double d = (double)z[1][i * K + j] - z[0][i * K + j];
                d2 += d * d;
                f2 += (double)z[0][i * K + j] * z[0][i * K + j];
            }
            ck_assert_msg(sqrt(d2) <= lim_f * sqrt(f2), "image %d: logits %.3g apart, bound "
                          "%.3g", i, sqrt(d2), lim_f * sqrt(f2));
            for (int j = 0; j < K; j++)
                worst_z = fmax(worst_z, fabs((double)z[1][i * K + j] - z[0][i * K + j])
                                            / sqrt(f2));
            mean_norm += sqrt(f2) / B;
        }
        check_rounded("logits", worst_z);
        double dl = fabs(loss[1] - loss[0]), lim_l = sqrt(2.0) * lim_f * mean_norm;
        ck_assert_msg(dl <= lim_l, "loss %.9g (bf16) against %.9g: %.3g above the bound %.3g",
                      loss[1], loss[0], dl, lim_l);
        ck_assert_msg(dl > 0, "loss %.9g in both: no bf16 rounding seen", loss[0]);
        double worst = 0, least_matrix = INFINITY;
        for (int i = 0; i < vit_model_tensor_count(m[0]); i++) {
            const vit_model_tensor *t = vit_model_tensor_at(m[0], i);
            int zero;
            double rel = tensor_rel(t, grads[1], grads[0], &zero), lim = sqrt((double)G) * 2 * U;
            ck_assert_msg(!zero, "%s: a zero gradient tells nothing", t->name);
            ck_assert_msg(rel <= lim, "%s: relative gradient difference %.3g above %.3g",
                          t->name, rel, lim);
            worst = fmax(worst, rel);
            if (strstr(t->name, matrix))
                least_matrix = fmin(least_matrix, rel);
        }
        ck_assert_msg(least_matrix > U / 64, "a weight matrix's gradient within %.3g of "
                      "float32's: no bf16 rounding seen there", least_matrix);
        printf("%s bf16 step (%d thread(s)): logits within %.2e, loss %.2e (bound %.2e), "
               "gradients within %.2e (bound %.2e), every weight matrix's above %.2e\n",
               what, threads, worst_z, dl, lim_l, worst, sqrt((double)G) * 2 * U, least_matrix);
    }
    check_packed_is_per_product(m[1], m[0], img, labels, B, grads[1], bf16);
    vit_tape_free(tape);
    for (int k = 0; k < 2; k++) {
        vit_model_free(m[k]);
        free(grads[k]);
        free(z[k]);
    }
    free(img);
    free(labels);
}

/* The Swin's step (vit_arch "swin"): 16x16 grey images in 2x2 patches, an
 * 8x8 grid in windows of 4 (the second block shifted), merged to 4x4;
 * widths 32 and 64, heads 32 wide, two blocks a stage; batch 8; _i + 1
 * threads.  Its bf16 products: the patch embedding, per block QKV, the
 * projection, fc1 and fc2, the merge's linear and the head (the window
 * attention stays float32).  So, as for the ViT (see the top), the longest
 * chain of products is, forward, Gf = 2 + 4 * 4 + 1 = 19 (patch, blocks,
 * merge, head), and to a parameter's gradient G = Gf + 1 + 4 * 4 + 1 + 1
 * = 38 (the head's dX, the blocks' and the merge's dX, the last dW); the
 * checks are step_within_bound's, every ".w" tensor a weight matrix
 * (patch, qkv, proj, fc1, fc2, merge, head). */
/* A step's slices in pieces (vit_model_set_micro_batch) in the model's
 * precision (bf16 where the CPU has it, else float32): against the whole
 * slices, per tensor within what the pieces' other order of the weight
 * gradients' sums over rows can make (the forward of an image is the same
 * in a piece as in its slice): in float32 sqrt(rows) EPS32 per sum,
 * rows = 16 images of 65 tokens a slice, and in bf16 the bound of
 * training_step_within_bound, as a rounded activation may then round the
 * other way. */
START_TEST(training_step_in_pieces)
{
    vit_config c;
    wide_config(&c);
    const int batch = 32, G = 2 + 6 * c.depth + 6 * c.depth + 2;
    int labels[32];
    float *img = random_batch(&c, batch, labels);
    ck_assert_int_eq(vit_set_threads(2), VIT_OK);
    vit_model *m = vit_model_new(&c);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_ge(vit_model_set_precision(m, VIT_PRECISION_BF16), 0);
    vit_rng r;
    vit_rng_seed(&r, 9);
    vit_model_init(m, &r);
    size_t np = vit_model_param_count(m);
    float *whole = malloc(np * sizeof *whole);
    ck_assert_ptr_nonnull(whole);
    double loss[2];
    ck_assert_int_eq(vit_model_set_micro_batch(m, batch), VIT_OK);
    ck_assert_int_eq(vit_model_train_grads(m, img, labels, batch, 0.1f, &loss[0], NULL), VIT_OK);
    memcpy(whole, vit_model_grads(m), np * sizeof *whole);
    ck_assert_int_eq(vit_model_set_micro_batch(m, 3), VIT_OK);
    ck_assert_int_eq(vit_model_train_grads(m, img, labels, batch, 0.1f, &loss[1], NULL), VIT_OK);
    int bf16 = vit_model_precision(m) == VIT_PRECISION_BF16;
    double lim = bf16 ? sqrt((double)G) * 2 * U : sqrt(16.0 * 65) * EPS32, worst = 0;
    for (int i = 0; i < vit_model_tensor_count(m); i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i);
        double rel = tensor_rel(t, vit_model_grads(m), whole, NULL);
        ck_assert_msg(rel <= lim, "%s: pieces differ from the whole slice by %.3g (bound %.3g)",
                      t->name, rel, lim);
        worst = fmax(worst, rel);
    }
    printf("pieces of 3 against slices of 16 (%s): worst tensor %.3g, bound %.3g\n",
           bf16 ? "bf16" : "float32", worst, lim);
    ck_assert(worst > 0); /* other sums: not the same run twice */
    ck_assert_double_le(fabs(loss[1] - loss[0]), 1e-5 * loss[0]);
    vit_model_free(m);
    free(whole);
    free(img);
}
END_TEST

START_TEST(swin_step_within_bound)
{
    const int Gf = 2 + 4 * 4 + 1, G = Gf + 1 + 4 * 4 + 1 + 1;
    vit_config c;
    vit_config_default(&c);
    static const char *const kv[][2] = {
        {"arch", "swin"}, {"image_height", "16"}, {"image_width", "16"}, {"channels", "1"},
        {"classes", "10"}, {"patch", "2"}, {"window", "4"}, {"embed_dim", "32"},
        {"stages", "2"}, {"depth_1", "2"}, {"depth_2", "2"}, {"heads_1", "1"},
        {"heads_2", "2"}, {"mlp_ratio", "2"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        ck_assert_msg(vit_config_set(&c, kv[i][0], kv[i][1]) == VIT_OK, "%s", vit_last_error());
    step_within_bound(&c, 8, _i + 1, Gf, G, ".w", "swin");
}
END_TEST

/* The same Swin after the convolutional stem (stem 4, stem2 4; patch 1 of
 * stem2's 8x8 map: the same grid): two more products forward (the stem's
 * convolutions) and two more back (the patch embedding's and stem2's dX,
 * whose maps want their gradients), Gf + 2 and G + 4. */
START_TEST(swin_stem_step_within_bound)
{
    const int Gf = 2 + 2 + 4 * 4 + 1, G = Gf + 1 + 4 * 4 + 1 + 2 + 1;
    vit_config c;
    vit_config_default(&c);
    static const char *const kv[][2] = {
        {"arch", "swin"}, {"image_height", "16"}, {"image_width", "16"}, {"channels", "1"},
        {"classes", "10"}, {"stem", "4"}, {"stem2", "4"}, {"patch", "1"}, {"window", "4"},
        {"embed_dim", "32"}, {"stages", "2"}, {"depth_1", "2"}, {"depth_2", "2"},
        {"heads_1", "1"}, {"heads_2", "2"}, {"mlp_ratio", "2"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        ck_assert_msg(vit_config_set(&c, kv[i][0], kv[i][1]) == VIT_OK, "%s", vit_last_error());
    step_within_bound(&c, 8, 1, Gf, G, ".w", "swin with a stem");
}
END_TEST

/* ---- a registered architecture's bf16 step (vit_arch.bf16_weights) ------- */

/* examples/convmlp.c registered (once: a test run without fork registers
 * it for every test), and a copy of it without its bf16_weights hook. */
static vit_arch convmlp_fp32;

static void register_convmlp(void)
{
    if (!vit_arch_find("convmlp"))
        ck_assert_msg(vit_arch_register(convmlp_arch()) == VIT_OK, "%s", vit_last_error());
    if (!vit_arch_find("convmlp_fp32")) {
        convmlp_fp32 = *convmlp_arch();
        convmlp_fp32.name = "convmlp_fp32";
        convmlp_fp32.bf16_weights = NULL;
        ck_assert_msg(vit_arch_register(&convmlp_fp32) == VIT_OK, "%s", vit_last_error());
    }
}

static void convmlp_config(vit_config *c, const char *arch)
{
    vit_config_default(c);
    static const char *const kv[][2] = {
        {"image_height", "12"}, {"image_width", "12"}, {"channels", "3"}, {"classes", "10"},
        {"width1", "16"}, {"width2", "32"}, {"hidden", "64"}, {"init_std", "0.3"}};
    ck_assert_msg(vit_config_set(c, "arch", arch) == VIT_OK, "%s", vit_last_error());
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        ck_assert_msg(vit_config_set(c, kv[i][0], kv[i][1]) == VIT_OK, "%s", vit_last_error());
}

/* The example's own architecture (examples/convmlp.c, registered as a user
 * would) in bf16 through its hook: 12x12 colour images, batch 8, _i + 1
 * threads.  Its bf16 products: conv1 (as a patch embedding, whose input,
 * the images, gets no gradient), conv2, fc and the head.  The longest
 * chain forward is Gf = 4; to a parameter's gradient G = Gf + 3 + 1 = 8
 * (the head's, fc's and conv2's dX, then conv1's dW).  The checks are
 * step_within_bound's, every ".w" tensor a weight matrix. */
START_TEST(registered_arch_step_within_bound)
{
    const int Gf = 4, G = Gf + 3 + 1;
    register_convmlp();
    vit_config c;
    convmlp_config(&c, "convmlp");
    step_within_bound(&c, 8, _i + 1, Gf, G, ".w", "convmlp");
}
END_TEST

/* The same architecture without the hook: bf16 refused whatever the CPU,
 * as before the hook existed (VIT_EINVAL naming bf16 and the
 * architecture), the model keeping fp32; auto is fp32 for it.  With the
 * hook, auto is what the CPU resolves. */
START_TEST(arch_without_hook_refuses_bf16)
{
    register_convmlp();
    vit_config c;
    convmlp_config(&c, "convmlp_fp32");
    vit_model *m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_model_set_precision(m, VIT_PRECISION_BF16), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "bf16") && strstr(vit_last_error(), "not convmlp_fp32"),
                  "%s", vit_last_error());
    ck_assert_int_eq(vit_model_precision(m), VIT_PRECISION_FP32);
    ck_assert_int_eq(vit_model_set_precision(m, VIT_PRECISION_AUTO), VIT_PRECISION_FP32);
    vit_model_free(m);
    convmlp_config(&c, "convmlp");
    m = vit_model_new(&c);
    ck_assert_msg(m != NULL, "%s", vit_last_error());
    ck_assert_int_eq(vit_model_set_precision(m, VIT_PRECISION_AUTO),
                     vit_precision_resolve(VIT_PRECISION_AUTO, NULL, 0));
    vit_model_free(m);
}
END_TEST

/* A hook's declarations are checked against the model's tensors: each bad
 * one is VIT_EINVAL naming the architecture, the tensor and the problem,
 * and the model keeps fp32; an error of the hook's own comes back as it
 * is.  Where bf16 cannot run (VIT_BF16_CPU=none) the hook is never asked:
 * bf16 falls back to fp32 as for the built-in architectures. */
static int bad_case;

static int bad_bf16_weights(const vit_config *cfg, const void *state, const vit_params *p,
                            vit_arch_bf16 *set)
{
    (void)cfg;
    (void)state;
    (void)p;
    const int AS_IS = VIT_ARCH_BF16_AS_IS; /* tensor 0 is conv1.w [27, 16] */
    switch (bad_case) {
    case 0: return vit_arch_bf16_add(set, 8, 0, 1, 1, 1, AS_IS);
    case 1: return vit_arch_bf16_add(set, 0, 0, 0, 16, 16, AS_IS);
    case 2: return vit_arch_bf16_add(set, 0, 0, 27, 16, 8, AS_IS);
    case 3: return vit_arch_bf16_add(set, 0, 0, 27, 16, 16, 4);
    case 4: return vit_arch_bf16_add(set, 0, 1, 27, 16, 16, AS_IS);
    default:
        if (vit_arch_bf16_add(set, 0, 0, 27, 16, 16, AS_IS) != VIT_OK)
            return VIT_EINVAL;
        return vit_set_error(VIT_EIO, "convmlp_bad: its own error");
    }
}

START_TEST(bad_bf16_weights_refused)
{
    static vit_arch bad;
    register_convmlp();
    if (!vit_arch_find("convmlp_bad")) {
        bad = *convmlp_arch();
        bad.name = "convmlp_bad";
        bad.bf16_weights = bad_bf16_weights;
        ck_assert_msg(vit_arch_register(&bad) == VIT_OK, "%s", vit_last_error());
    }
    static const struct { int rc; const char *says; } want[] = {
        {VIT_EINVAL, "convmlp_bad: tensor 8 is not one of the model's 0 .. 7"},
        {VIT_EINVAL, "conv1.w: a 0 x 16 matrix with row stride 16"},
        {VIT_EINVAL, "conv1.w: a 27 x 16 matrix with row stride 8"},
        {VIT_EINVAL, "conv1.w: use 4 is not"},
        {VIT_EINVAL, "conv1.w: a 27 x 16 matrix from value 1 with row stride 16 runs past its "
                     "432 values"},
        {VIT_EIO, "convmlp_bad: its own error"}};
    int can = vit_precision_resolve(VIT_PRECISION_BF16, NULL, 0) == VIT_PRECISION_BF16;
    vit_config c;
    convmlp_config(&c, "convmlp_bad");
    for (bad_case = 0; bad_case < 6; bad_case++) {
        vit_model *m = vit_model_new(&c);
        ck_assert_msg(m != NULL, "%s", vit_last_error());
        int rc = vit_model_set_precision(m, VIT_PRECISION_BF16);
        if (can) {
            ck_assert_msg(rc == want[bad_case].rc && strstr(vit_last_error(), want[bad_case].says),
                          "case %d: %d, '%s'", bad_case, rc, vit_last_error());
            ck_assert_int_eq(vit_model_precision(m), VIT_PRECISION_FP32);
        } else {
            ck_assert_int_eq(rc, VIT_PRECISION_FP32);
        }
        vit_model_free(m);
    }
    ck_assert_int_eq(vit_arch_bf16_add(NULL, 0, 0, 1, 1, 1, VIT_ARCH_BF16_AS_IS), VIT_EINVAL);
    ck_assert_msg(strstr(vit_last_error(), "set is NULL"), "%s", vit_last_error());
}
END_TEST

/* vit_model_set_precision (a resumed run's change): the model's precision
 * and config follow it, a step after switching to bf16 gives the bits of a
 * model made with bf16, and back to fp32 those of a float32 model; a bad
 * value is refused with nothing changed. */
START_TEST(set_precision_switches_the_step)
{
    vit_config c;
    vit_config_default(&c);
    const int batch = 8;
    float *img = randn((size_t)batch * 64, 1);
    int labels[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    ck_assert_int_eq(vit_set_threads(1), VIT_OK);
    vit_model *m[2];
    float *g[2][2];
    size_t np = 0;
    for (int k = 0; k < 2; k++) {
        m[k] = vit_model_new(&c);
        ck_assert_ptr_nonnull(m[k]);
        ck_assert_int_ge(vit_model_set_precision(m[k], k ? VIT_PRECISION_BF16
                                                         : VIT_PRECISION_FP32), 0);
        vit_rng r;
        vit_rng_seed(&r, 9);
        vit_model_init(m[k], &r);
        np = vit_model_param_count(m[k]);
    }
    int have = vit_model_precision(m[1]);
    /* g[k][j]: model k's step, before (j 0) and after (j 1) it switches
     * to the other's precision. */
    for (int j = 0; j < 2; j++)
        for (int k = 0; k < 2; k++) {
            if (j == 1)
                ck_assert_int_eq(vit_model_set_precision(m[k], k ? VIT_PRECISION_FP32
                                                                 : VIT_PRECISION_BF16),
                                 k ? VIT_PRECISION_FP32 : have);
            double loss;
            ck_assert_int_eq(vit_model_train_grads(m[k], img, labels, batch, 0, &loss, NULL),
                             VIT_OK);
            g[k][j] = malloc(np * sizeof *g[k][j]);
            ck_assert_ptr_nonnull(g[k][j]);
            memcpy(g[k][j], vit_model_grads(m[k]), np * sizeof *g[k][j]);
        }
    ck_assert_mem_eq(g[0][1], g[1][0], np * sizeof *g[0][0]); /* now bf16 = made bf16 */
    ck_assert_mem_eq(g[1][1], g[0][0], np * sizeof *g[0][0]); /* now fp32 = made fp32 */
    ck_assert_int_eq(vit_model_precision(m[0]), have);
    ck_assert_int_eq(vit_model_set_precision(m[0], 9), VIT_EINVAL);
    ck_assert_int_eq(vit_model_precision(m[0]), have);
    ck_assert_int_eq(vit_model_set_precision(NULL, VIT_PRECISION_FP32), VIT_EINVAL);
    for (int k = 0; k < 2; k++) {
        vit_model_free(m[k]);
        free(g[k][0]);
        free(g[k][1]);
    }
    free(img);
}
END_TEST

/* With the switch off (the default), float32 is the float32 GEMM's: the
 * same bits before and after a mixed-precision product on this thread. */
START_TEST(off_is_float32)
{
    const int n = 33, in = 20, out = 17;
    float *x = randn((size_t)n * in, 1), *W = randn((size_t)in * out, 0.2);
    float *y0 = zeros((size_t)n * out), *y1 = zeros((size_t)n * out);
    ck_assert_int_eq(vit_linear_forward(y0, x, W, NULL, n, in, out), VIT_OK);
    vit_bf16_thread_mixed(1);
    ck_assert_int_eq(vit_linear_forward(y1, x, W, NULL, n, in, out), VIT_OK);
    vit_bf16_thread_mixed(0);
    ck_assert_int_eq(vit_linear_forward(y1, x, W, NULL, n, in, out), VIT_OK);
    ck_assert_mem_eq(y0, y1, (size_t)n * out * sizeof *y0);
    free(x);
    free(W);
    free(y0);
    free(y1);
}
END_TEST

/* ---- the attention core ------------------------------------------------------------ */

/* vit_sdpa_forward and vit_sdpa_backward with mixed precision on: the score
 * product S = s Q K^T and the four products of the backward (P V forward;
 * P^T dO, dO V^T, dS K, dS^T Q backward) take bf16 inputs; the softmax, its
 * gradient and every sum stay float32.  The bounds, elementwise, for one
 * pair (query i, key j, column d; |.| taken before the products):
 *  - scores: S1 - S0 within D_ij = tol(d_k) s sum_d |q_id| |k_jd|; a
 *    softmax moved by at most Delta_i = max_j D_ij per score changes each
 *    weight by a factor within exp(+-2 Delta_i), and each path's softmax
 *    (fastmath's exp, a double sum, one product) is within 16 eps of its
 *    exact value, so |P1 - P0| <= P0 (exp(2 Delta_i) - 1) + 16 eps (P0 + P1);
 *  - out: O = P V from the two P's, |O1 - O0| <= sum_j (|P1 - P0| +
 *    tol(n_k) max(P0, P1)) |v_jd|;
 *  - the backward, from one probs (the float32 forward's) for both:
 *    dV within tol(n_q) sum_i P_ij |dO_id|; dP = dO V^T within tol(d_v)
 *    A_ij, A_ij = sum_d |dO_id| |v_jd|, so dS = P (dP - rowsum(P dP))
 *    within tol(d_v + 4) E_ij, E_ij = P_ij (A_ij + sum_k P_ik A_ik) (the + 4
 *    takes the float32 subtraction, product and row sum, both paths);
 *    dQ = s dS K within s sum_j (tol(d_v + 4) E_ij + tol(n_k + 1) |dS_ij|)
 *    |k_jd| (the + 1: dS scaled by s once), dK = s dS^T Q likewise.
 * _i 0: 72 tokens, pairs one per task, q, k and v read in place from one
 * fused [B*n, 3 H d] buffer as vit_mha does; _i 1: 130 tokens, a pair per
 * call split across the threads; heads 64 wide (narrower ones stay float32:
 * attention_core_narrow_stays_float32). */
typedef struct {
    vit_sdpa a;
    float *qkv, *q, *k, *v, *dout;
    size_t nqkv, nout, nprobs;
} attn_case;

/* i 0: B 2, 72 tokens, fused layout; 1: B 1, 130 tokens, dense; both 2 heads
 * 64 wide.  2: case 0's layout at 50 tokens and width 32 (medium's). */
static attn_case attn_case_of(int i)
{
    attn_case c;
    memset(&c, 0, sizeof c);
    const int fused = i != 1, B = i == 1 ? 1 : 2, H = 2;
    const int n = i == 0 ? 72 : i == 1 ? 130 : 50, d = i == 2 ? 32 : 64;
    c.a = (vit_sdpa){.batch = B, .heads = H, .n_q = n, .n_k = n, .d_k = d, .d_v = d};
    if (fused)
        c.a.ld_q = c.a.ld_k = c.a.ld_v = 3 * H * d;
    const int ld = fused ? 3 * H * d : H * d, per = fused ? 1 : 3;
    c.nqkv = (size_t)B * n * ld * per;
    c.qkv = randn(c.nqkv, 1);
    c.q = c.qkv;
    c.k = c.qkv + (fused ? (size_t)H * d : (size_t)B * n * ld);
    c.v = c.qkv + (fused ? (size_t)2 * H * d : (size_t)2 * B * n * ld);
    c.nout = (size_t)B * n * H * d;
    c.nprobs = (size_t)B * H * n * n;
    c.dout = randn(c.nout, 1);
    return c;
}

/* One forward and backward of c with mixed precision set to mixed (the
 * switch off again after): out, probs and the gradients (dq; dk and dv at
 * k's and v's offsets in the same buffer), the backward from bprobs, or
 * from this forward's probs when NULL. */
typedef struct {
    float *out, *probs, *dq, *dk, *dv;
} attn_result;

static attn_result attn_run(const attn_case *c, int mixed, const float *bprobs)
{
    attn_result r = {zeros(c->nout), zeros(c->nprobs), zeros(c->nqkv), NULL, NULL};
    r.dk = r.dq + (c->k - c->q);
    r.dv = r.dq + (c->v - c->q);
    vit_bf16_thread_mixed(mixed);
    ck_assert_int_eq(vit_sdpa_forward(&c->a, r.out, r.probs, c->q, c->k, c->v), VIT_OK);
    ck_assert_int_eq(vit_sdpa_backward(&c->a, r.dq, r.dk, r.dv, NULL, c->dout,
                                       bprobs ? bprobs : r.probs, c->q, c->k, c->v, NULL),
                     VIT_OK);
    ck_assert_int_eq(vit_bf16_thread_mixed(0), mixed);
    return r;
}

static void attn_free(attn_case *c, attn_result *r, int n)
{
    for (int i = 0; i < n; i++) {
        free(r[i].out);
        free(r[i].probs);
        free(r[i].dq);
    }
    free(c->qkv);
    free(c->dout);
}

/* Element (b, i, h, col) of a [B, n, *] layout with row stride ld. */
static double at(const float *x, int ld, int n, int b, int i, int h, int d, int col)
{
    return x[((size_t)b * n + i) * ld + (size_t)h * d + col];
}

/* |x[1] - x[0]| <= lim at element (b, row, h, t) of the pair of layouts x
 * (row stride ld), else the test fails naming it; *worst takes the largest
 * difference relative to S. */
static void attn_elem(const char *what, float *const x[2], int ld, int n, int b, int row, int h,
                      int d, int t, double lim, double S, double *worst)
{
    double x1 = at(x[1], ld, n, b, row, h, d, t), x0 = at(x[0], ld, n, b, row, h, d, t);
    if (!(fabs(x1 - x0) <= lim))
        ck_abort_msg("%s (%d, %d, %d, %d): bf16 %.9g, fp32 %.9g, difference above %.3g", what,
                     b, row, h, t, x1, x0, lim);
    *worst = fmax(*worst, fabs(x1 - x0) / S);
}

START_TEST(attention_core_within_bound)
{
    attn_case c = attn_case_of(_i);
    const vit_sdpa *a = &c.a;
    const int B = a->batch, H = a->heads, n = a->n_q, d = a->d_k;
    const int ld = a->ld_q ? a->ld_q : H * d;
    const double s = 1 / sqrt((double)d);
    /* both backwards from the float32 forward's maps */
    attn_result R[2];
    R[0] = attn_run(&c, 0, NULL);
    R[1] = attn_run(&c, 1, R[0].probs);
    float *out[2] = {R[0].out, R[1].out}, *probs[2] = {R[0].probs, R[1].probs};
    float *dq[2] = {R[0].dq, R[1].dq}, *dk[2] = {R[0].dk, R[1].dk}, *dv[2] = {R[0].dv, R[1].dv};
    double worst_p = 0, worst_o = 0, worst_dq = 0, worst_dk = 0, worst_dv = 0;
    double *E = malloc((size_t)n * n * sizeof *E), *dS = malloc((size_t)n * n * sizeof *dS);
    ck_assert(E && dS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const size_t pair = ((size_t)b * H + h) * n * n;
            const float *P0 = probs[0] + pair, *P1 = probs[1] + pair;
            for (int i = 0; i < n; i++) {
                double delta = 0, dProw[256], A[256], r = 0, rA = 0;
                for (int j = 0; j < n; j++) {
                    double D = 0, dp = 0, aa = 0;
                    for (int t = 0; t < d; t++) {
                        D += fabs(at(c.q, ld, n, b, i, h, d, t) * at(c.k, ld, n, b, j, h, d, t));
                        dp += at(c.dout, H * d, n, b, i, h, d, t)
                            * at(c.v, ld, n, b, j, h, d, t);
                        aa += fabs(at(c.dout, H * d, n, b, i, h, d, t)
                                   * at(c.v, ld, n, b, j, h, d, t));
                    }
                    D *= tol(d) * s;
                    delta = D > delta ? D : delta;
                    dProw[j] = dp;
                    A[j] = aa;
                    r += P0[(size_t)i * n + j] * dp;
                    rA += P0[(size_t)i * n + j] * aa;
                }
                for (int j = 0; j < n; j++) {
                    const size_t ij = (size_t)i * n + j;
                    double lim = P0[ij] * expm1(2 * delta) + 16 * EPS32 * (P0[ij] + P1[ij]);
                    double diff = fabs((double)P1[ij] - P0[ij]);
                    if (!(diff <= lim))
                        ck_abort_msg("probs (%d, %d, %d, %d): bf16 %.9g, fp32 %.9g, difference "
                                     "%.3g above the bound %.3g", b, h, i, j, P1[ij], P0[ij],
                                     diff, lim);
                    if (diff / (P0[ij] + 1e-30) > worst_p && P0[ij] > 1e-3)
                        worst_p = diff / P0[ij];
                    E[ij] = P0[ij] * (A[j] + rA);
                    dS[ij] = P0[ij] * (dProw[j] - r);
                }
                for (int t = 0; t < d; t++) {
                    double lim = 0, S = 0, dlim = 0, dSsum = 0;
                    for (int j = 0; j < n; j++) {
                        const size_t ij = (size_t)i * n + j;
                        double pm = P0[ij] > P1[ij] ? P0[ij] : P1[ij];
                        double av = fabs(at(c.v, ld, n, b, j, h, d, t));
                        lim += (fabs((double)P1[ij] - P0[ij]) + tol(n) * pm) * av;
                        S += pm * av;
                        double ak = fabs(at(c.k, ld, n, b, j, h, d, t));
                        dlim += s * (tol(d + 4) * E[ij] + tol(n + 1) * fabs(dS[ij])) * ak;
                        dSsum += s * fabs(dS[ij]) * ak;
                    }
                    attn_elem("out", out, H * d, n, b, i, h, d, t, lim, S, &worst_o);
                    attn_elem("dq", dq, ld, n, b, i, h, d, t, dlim, dSsum, &worst_dq);
                }
            }
            for (int j = 0; j < n; j++)
                for (int t = 0; t < d; t++) {
                    double klim = 0, kS = 0, vlim = 0, vS = 0;
                    for (int i = 0; i < n; i++) {
                        const size_t ij = (size_t)i * n + j;
                        double aq = fabs(at(c.q, ld, n, b, i, h, d, t));
                        klim += s * (tol(d + 4) * E[ij] + tol(n + 1) * fabs(dS[ij])) * aq;
                        kS += s * fabs(dS[ij]) * aq;
                        double ado = fabs(at(c.dout, H * d, n, b, i, h, d, t));
                        vlim += tol(n) * P0[ij] * ado;
                        vS += P0[ij] * ado;
                    }
                    attn_elem("dk", dk, ld, n, b, j, h, d, t, klim, kS, &worst_dk);
                    attn_elem("dv", dv, ld, n, b, j, h, d, t, vlim, vS, &worst_dv);
                }
        }
    check_rounded("probs", worst_p);
    check_rounded("out", worst_o);
    check_rounded("dq", worst_dq);
    check_rounded("dk", worst_dk);
    check_rounded("dv", worst_dv);
    free(E);
    free(dS);
    attn_free(&c, R, 2);
}
END_TEST

/* The bf16 core gives the same bits on every run (each element is summed
 * by one thread in a fixed order), and a NaN or infinite score is still
 * reported, naming where it is: bf16 keeps them. */
START_TEST(attention_core_deterministic_and_refuses_bad_scores)
{
    attn_case c = attn_case_of(_i);
    const vit_sdpa *a = &c.a;
    attn_result R[2] = {attn_run(&c, 1, NULL), attn_run(&c, 1, NULL)};
    ck_assert_mem_eq(R[0].out, R[1].out, c.nout * sizeof *R[0].out);
    ck_assert_mem_eq(R[0].probs, R[1].probs, c.nprobs * sizeof *R[0].probs);
    ck_assert_mem_eq(R[0].dq, R[1].dq, c.nqkv * sizeof *R[0].dq);
    float *out0 = R[0].out, *probs0 = R[0].probs;
    vit_bf16_thread_mixed(1);
    const int ld = a->ld_q ? a->ld_q : a->heads * a->d_k;
    /* item B-1, query 3, head H-1: a NaN in q, then an infinity in k's key 5 */
    const int b = a->batch - 1, h = a->heads - 1;
    float *qx = c.q + ((size_t)b * a->n_q + 3) * ld + (size_t)h * a->d_k + 1;
    float keep = *qx;
    *qx = NAN;
    ck_assert_int_eq(vit_sdpa_forward(a, out0, probs0, c.q, c.k, c.v), VIT_ENUM);
    char want[96];
    snprintf(want, sizeof want, "non-finite score at item %d, head %d, query 3,", b, h);
    ck_assert_msg(strstr(vit_last_error(), want), "message: %s", vit_last_error());
    *qx = keep;
    c.k[((size_t)b * a->n_k + 5) * ld + (size_t)h * a->d_k] = INFINITY;
    ck_assert_int_eq(vit_sdpa_forward(a, out0, probs0, c.q, c.k, c.v), VIT_ENUM);
    ck_assert_msg(strstr(vit_last_error(), "key 5"), "message: %s", vit_last_error());
    ck_assert_int_eq(vit_bf16_thread_mixed(0), 1);
    attn_free(&c, R, 2);
}
END_TEST

/* Heads narrower than 64 (medium's 32 wide, 50 tokens) keep float32 in
 * mixed precision: the same bits as with it off. */
START_TEST(attention_core_narrow_stays_float32)
{
    attn_case c = attn_case_of(2);
    attn_result R[2] = {attn_run(&c, 0, NULL), attn_run(&c, 1, NULL)};
    ck_assert_mem_eq(R[0].out, R[1].out, c.nout * sizeof *R[0].out);
    ck_assert_mem_eq(R[0].dq, R[1].dq, c.nqkv * sizeof *R[0].dq);
    attn_free(&c, R, 2);
}
END_TEST

static void setup(void)
{
    vit_rng_seed(&rng, 24);
}

int main(void)
{
    Suite *s = suite_create("mixed");
    TCase *tc = tcase_create("bf16");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, switch_is_per_thread_and_off_by_default);
    tcase_add_test(tc, precision_resolves_as_documented);
    tcase_add_test(tc, linear_within_bound);
    tcase_add_test(tc, patch_embed_within_bound);
    tcase_add_test(tc, tape_linear_ops_within_bound);
    tcase_add_loop_test(tc, linear_gelu_keeps_gelu_grad_in_bf16, 0, 2);
    tcase_add_test(tc, block_keeps_activations_in_bf16);
    tcase_add_loop_test(tc, block_gradients_within_bound, 0, 2);
    tcase_add_test(tc, block_mlp_bad_shape_refused);
    tcase_add_loop_test(tc, training_step_within_bound, 0, 4);
    tcase_add_test(tc, training_step_in_pieces);
    tcase_add_loop_test(tc, swin_step_within_bound, 0, 2);
    tcase_add_test(tc, swin_stem_step_within_bound);
    tcase_add_loop_test(tc, registered_arch_step_within_bound, 0, 2);
    tcase_add_test(tc, arch_without_hook_refuses_bf16);
    tcase_add_test(tc, bad_bf16_weights_refused);
    tcase_add_test(tc, set_precision_switches_the_step);
    tcase_add_test(tc, off_is_float32);
    tcase_add_loop_test(tc, attention_core_within_bound, 0, 2);
    tcase_add_loop_test(tc, attention_core_deterministic_and_refuses_bad_scores, 0, 2);
    tcase_add_test(tc, attention_core_narrow_stays_float32);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
