/*
 * test_fastmath - the float32 GELU (vit_gelu_forward / vit_gelu_backward,
 * built on the branch-free helpers of src/kernels/fastmath.h) against references
 * computed here in double precision with libm erfc and exp:
 *     GELU(x)  = x Phi(x),          Phi(x) = erfc(-x/sqrt 2) / 2,
 *     GELU'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi).
 *
 * Error measures (one number per direction, so that one bar covers normal
 * and subnormal results):
 *   forward   |y - GELU(x)| / max(|GELU(x)|, FLT_MIN)
 *             relative where the result is a normal float, in units of
 *             FLT_MIN (2^23 subnormal steps) below that;
 *   backward  |d - GELU'(x)| / max(Phi(x) + |x| phi(x), FLT_MIN)
 *             relative to the size of the two terms, so equal to the
 *             relative error in both tails but meaningful at the zero of
 *             GELU' (x = -0.7518), where only absolute accuracy exists.
 * Measured over EVERY float in [-20, 20] (2.2e9 inputs, gcc 12 -O3; the
 * SSE2 and AVX2 versions and the clang build give bit-identical results):
 * forward 5.30e-7 (at x = -5.256), backward 2.75e-7 (at x = 0.0057).  The
 * grids below, a sample of those, reach 4.19e-7 and 2.58e-7.  The bars are
 * the exhaustive maxima plus ~5%.  For comparison, the erff/expf version
 * this replaced has forward error 1 (every digit lost) from x ~ -5.5 on,
 * where 1 + erf(x/sqrt 2) cancels, and returns NaN for GELU(-inf) and
 * GELU'(+-inf).
 *
 * Also: the float32 local convolution's vector path against its scalar
 * order, bitwise.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit/vit.h"

_Static_assert(sizeof(vit_real) == sizeof(float), "test_fastmath needs the float32 library");

#define FWD_BAR 5.6e-7
#define BWD_BAR 2.9e-7

#define INV_SQRT2 0.70710678118654752440
#define INV_SQRT2PI 0.39894228040143267794

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

typedef struct {
    double fwd, bwd;    /* worst errors (measures above) */
    float fwd_x, bwd_x; /* where */
    long n;
} worst;

/* Runs both kernels on x[0..n) (finite) and folds their errors into w. */
static void measure(const float *x, size_t n, worst *w)
{
    float *y = malloc(n * sizeof *y), *d = calloc(n, sizeof *d), *one = malloc(n * sizeof *one);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(one);
    for (size_t i = 0; i < n; i++)
        one[i] = 1.0f;
    ck_assert_int_eq(vit_gelu_forward(y, x, n), VIT_OK);
    ck_assert_int_eq(vit_gelu_backward(d, one, x, n), VIT_OK); /* d = 0 + 1 GELU' */
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        double Phi = 0.5 * erfc(-v * INV_SQRT2);
        double phi = INV_SQRT2PI * exp(-0.5 * v * v);
        double ef = fabs(y[i] - v * Phi) / fmax(fabs(v * Phi), FLT_MIN);
        double eb = fabs(d[i] - (Phi + v * phi)) / fmax(Phi + fabs(v) * phi, FLT_MIN);
        /* !(e <= worst) also catches a NaN result */
        if (!(ef <= w->fwd)) {
            w->fwd = ef;
            w->fwd_x = x[i];
        }
        if (!(eb <= w->bwd)) {
            w->bwd = eb;
            w->bwd_x = x[i];
        }
    }
    w->n += (long)n;
    free(y);
    free(d);
    free(one);
}

/* Every `step`-th float bit pattern from |lo| to |hi| (both >= 0), with
 * the sign given, in chunks. */
static void measure_bits(float lo, float hi, uint32_t step, int negative, worst *w)
{
    enum { CH = 1 << 16 };
    float *x = malloc(CH * sizeof *x);
    ck_assert_ptr_nonnull(x);
    uint32_t sign = negative ? 0x80000000u : 0u;
    uint64_t b = bits_of(lo), end = bits_of(hi);
    while (b <= end) {
        size_t m = 0;
        for (; m < CH && b <= end; m++, b += step)
            x[m] = from_bits((uint32_t)b | sign);
        measure(x, m, w);
    }
    free(x);
}

static void check_worst(const char *what, const worst *w)
{
    printf("%-28s %9ld inputs: forward %.3g (x = %.9g), backward %.3g (x = %.9g)\n", what, w->n,
           w->fwd, (double)w->fwd_x, w->bwd, (double)w->bwd_x);
    ck_assert_msg(w->fwd <= FWD_BAR, "%s: forward error %.3g at x = %.9g over the bar %.3g", what,
                  w->fwd, (double)w->fwd_x, FWD_BAR);
    ck_assert_msg(w->bwd <= BWD_BAR, "%s: backward error %.3g at x = %.9g over the bar %.3g", what,
                  w->bwd, (double)w->bwd_x, BWD_BAR);
}

/* All floats of [-20, 20] at a prime stride of bit patterns (so that every
 * binade and many mantissa patterns are hit), subnormal inputs included. */
START_TEST(gelu_dense_grid)
{
    worst w = {0};
    measure_bits(0.0f, 20.0f, 997, 0, &w);
    measure_bits(0.0f, 20.0f, 997, 1, &w);
    check_worst("[-20, 20], stride 997", &w);
}
END_TEST

/* Where the results go subnormal and then to zero (GELU(x) < FLT_MIN
 * from x ~ -13.2, GELU' from x ~ -13.4, both 0 below x ~ -14.2): every
 * 4th float.  A result flushed to zero early fails by a factor >> 1. */
START_TEST(gelu_underflow_region)
{
    worst w = {0};
    measure_bits(12.5f, 14.5f, 4, 1, &w);
    check_worst("[-14.5, -12.5], stride 4", &w);
}
END_TEST

/* Where the activations of a trained network live, and around the zero
 * of GELU' (x = -0.7518): every float of [-0.8, -0.7], and a uniform grid
 * of step 2^-12 over [-8, 8]. */
START_TEST(gelu_core_region)
{
    worst w = {0};
    measure_bits(0.7f, 0.8f, 1, 1, &w);
    enum { N = 16 * 4096 + 1 };
    float *x = malloc(N * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (int i = 0; i < N; i++)
        x[i] = -8.0f + (float)i / 4096.0f;
    measure(x, N, &w);
    free(x);
    check_worst("[-0.8, -0.7] all, [-8, 8] 2^-12", &w);
}
END_TEST

/* Special inputs, each between ordinary neighbours (so a vector lane
 * holding one must not disturb the others), and the backward's
 * accumulation dx += dy GELU'(x). */
START_TEST(gelu_special_values)
{
    const float inf = INFINITY;
    const float sp[] = {0.0f, -0.0f, inf, -inf, NAN, 1e30f, -1e30f, FLT_MAX, -FLT_MAX,
                        15.0f, -15.0f, 16.0f, -16.0f, 30.0f, -30.0f};
    enum { NS = sizeof sp / sizeof sp[0], STRIDE = 5, N = NS * STRIDE };
    float x[N], y[N], d[N], one[N], acc[N], two[N];
    for (int i = 0; i < N; i++) {
        x[i] = i % STRIDE == 2 ? sp[i / STRIDE] : -2.0f + 0.37f * (float)i / STRIDE;
        one[i] = 1.0f;
        two[i] = -2.0f;
        d[i] = 0.0f;
        acc[i] = 0.5f;
    }
    ck_assert_int_eq(vit_gelu_forward(y, x, N), VIT_OK);
    ck_assert_int_eq(vit_gelu_backward(d, one, x, N), VIT_OK);
    ck_assert_int_eq(vit_gelu_backward(acc, two, x, N), VIT_OK);

    worst w = {0};
    for (int i = 0; i < N; i++) {
        float v = x[i];
        if (i % STRIDE != 2 || (isfinite(v) && fabsf(v) <= 30.0f))
            measure(&x[i], 1, &w);
        /* accumulation: 0.5 + (-2) GELU'(x), -2 d being exact */
        if (!isnan(v))
            ck_assert_msg(acc[i] == 0.5f + -2.0f * d[i], "accumulate at x = %g: %.9g, want %.9g",
                          (double)v, (double)acc[i], (double)(0.5f + -2.0f * d[i]));
    }
    check_worst("specials' neighbours", &w);

    for (int k = 0; k < NS; k++) {
        int i = k * STRIDE + 2;
        float v = x[i];
        if (isnan(v)) {
            ck_assert_msg(isnan(y[i]) && isnan(d[i]) && isnan(acc[i]), "NaN in, not NaN out");
        } else if (v == 0.0f) {
            /* GELU(+-0) = +-0: x Phi(x) keeps the sign of x */
            ck_assert_msg(y[i] == 0.0f && signbit(y[i]) == signbit(v), "GELU(%g) = %g", (double)v,
                          (double)y[i]);
        } else if (v > 30.0f) {
            /* GELU(x) = x exactly, GELU'(x) = 1, no overflow */
            ck_assert_msg(y[i] == v, "GELU(%g) = %g", (double)v, (double)y[i]);
            ck_assert_msg(d[i] == 1.0f, "GELU'(%g) = %g", (double)v, (double)d[i]);
        } else if (v < -30.0f) {
            /* both underflow to (signed) zero, not NaN */
            ck_assert_msg(y[i] == 0.0f, "GELU(%g) = %g", (double)v, (double)y[i]);
            ck_assert_msg(d[i] == 0.0f, "GELU'(%g) = %g", (double)v, (double)d[i]);
        }
    }
}
END_TEST


/* The attention softmax in float32 uses fastmath.h's exp too.  One query
 * (q = 1, d_k = 1, scale 1) against keys k_j makes the scores exactly k_j,
 * so probs must equal softmax(k) computed here in double.  Scores run from
 * 0 down to -120, through float's underflow (exp(-103.3) < 2^-149); the
 * error is relative where the reference is a normal float, in units of
 * FLT_MIN below.  Measured 1.46e-7 (the sum is in double, so this holds
 * at any optimisation level); SOFTMAX_BAR is that plus ~10%. */
#define SOFTMAX_BAR 1.6e-7
#define SM_N 1200

START_TEST(softmax_exp_accuracy)
{
    static vit_real k[SM_N], v[SM_N], probs[SM_N], out[1];
    vit_real q[1] = {1};
    for (int j = 0; j < SM_N; j++) {
        k[j] = (vit_real)(-120.0 * j / (SM_N - 1) + 1e-3 * (j % 7)); /* scrambled low bits */
        v[j] = 0;
    }
    vit_sdpa a = {.batch = 1, .heads = 1, .n_q = 1, .n_k = SM_N, .d_k = 1, .d_v = 1, .scale = 1};
    ck_assert_int_eq(vit_sdpa_forward(&a, out, probs, q, k, v), VIT_OK);
    double mx = -INFINITY, sum = 0, worst = 0;
    for (int j = 0; j < SM_N; j++)
        mx = fmax(mx, (double)k[j]);
    for (int j = 0; j < SM_N; j++)
        sum += exp((double)k[j] - mx);
    for (int j = 0; j < SM_N; j++) {
        double ref = exp((double)k[j] - mx) / sum;
        double err = fabs((double)probs[j] - ref) / fmax(ref, FLT_MIN);
        worst = fmax(worst, err);
    }
    printf("softmax: worst error %.3g\n", worst);
    ck_assert_msg(worst <= SOFTMAX_BAR, "softmax error %.3g above %.3g", worst, SOFTMAX_BAR);
}
END_TEST

/* The float32 local convolution (src/tape/local_conv.c), whose AVX2 path
 * is written in intrinsics: bitwise the scalar sum in its documented
 * order (token + bias, then each in-grid tap's product, dy then dx), for
 * channel counts with and without a tail past its 16-lane blocks. */
START_TEST(local_conv_float32_bitwise)
{
    enum { B = 2, GH = 3, GW = 4, T = 1 + GH * GW };
    const int channels[] = {3, 16, 40, 64};
    for (size_t k = 0; k < sizeof channels / sizeof channels[0]; k++) {
        const int C = channels[k];
        float *x = malloc(sizeof(float) * B * T * C), *y = malloc(sizeof(float) * B * T * C);
        float *w = malloc(sizeof(float) * 9 * C), *bias = malloc(sizeof(float) * C);
        ck_assert(x && y && w && bias);
        for (int i = 0; i < B * T * C; i++)
            x[i] = (float)sin(0.7 * i + 0.3) * 1.3f;
        for (int i = 0; i < 9 * C; i++)
            w[i] = (float)cos(1.1 * i) * 0.4f;
        for (int i = 0; i < C; i++)
            bias[i] = (float)(i % 7) * 0.01f - 0.03f;
        ck_assert_int_eq(vit_local_conv_forward(y, x, w, bias, B, GH, GW, C), VIT_OK);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < GH; i++)
                for (int j = 0; j < GW; j++)
                    for (int c = 0; c < C; c++) {
                        const float *xb = x + (size_t)b * T * C;
                        float v = xb[(1 + i * GW + j) * C + c];
                        v += bias[c];
                        for (int dy = -1; dy <= 1; dy++)
                            for (int dx = -1; dx <= 1; dx++) {
                                int r = i + dy, q = j + dx;
                                if (r < 0 || r >= GH || q < 0 || q >= GW)
                                    continue;
                                float p = w[((dy + 1) * 3 + dx + 1) * C + c]
                                        * xb[(1 + r * GW + q) * C + c];
                                v += p;
                            }
                        float got = y[((size_t)b * T + 1 + i * GW + j) * C + c];
                        ck_assert_msg(memcmp(&got, &v, sizeof v) == 0,
                                      "C %d, item %d, token (%d, %d), channel %d: %.9g, want %.9g",
                                      C, b, i, j, c, (double)got, (double)v);
                    }
        free(x); free(y); free(w); free(bias);
    }
}
END_TEST

static Suite *fastmath_suite(void)
{
    Suite *s = suite_create("test_fastmath");
    TCase *tc = tcase_create("gelu_f32");
    tcase_set_timeout(tc, 100);
    tcase_add_test(tc, gelu_dense_grid);
    tcase_add_test(tc, gelu_underflow_region);
    tcase_add_test(tc, gelu_core_region);
    tcase_add_test(tc, gelu_special_values);
    tcase_add_test(tc, softmax_exp_accuracy);
    tcase_add_test(tc, local_conv_float32_bitwise);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fastmath_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
