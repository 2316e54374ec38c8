/* The mixed-precision MLP's GELU kernels (src/kernels/activations.c, internal:
 * this suite links the static library), which read GELU and GELU' of a
 * bf16 pre-activation from a table of all 65,536 values: against the
 * public float32 kernels (vit_gelu_forward, vit_gelu_backward) and the
 * rounding (vit_bf16_from_floats), bit for bit (but for the sign of a
 * zero gradient), for every finite bf16 value, on one thread and on two. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "activations_internal.h"
#include "vit/vit.h"

enum { ROWS = 256, COLS = 256, ALL = ROWS * COLS };

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Every bf16 bit pattern as float, NaNs replaced by i-dependent finite
 * values (a NaN's GELU is a NaN: nothing to compare bitwise). */
static float *every_bf16(void)
{
    float *u = malloc(ALL * sizeof *u);
    ck_assert_ptr_nonnull(u);
    for (uint32_t i = 0; i < ALL; i++) {
        u[i] = bits_float(i << 16);
        if (isnan(u[i]) || isinf(u[i]))
            u[i] = (float)(i % 97) - 48;
    }
    return u;
}

/* The forward with no bias: v16 is u's bits, h16 = bf16(GELU(v)). */
START_TEST(forward_matches_computed_gelu)
{
    vit_set_threads(_i ? 2 : 1);
    float *u = every_bf16(), *y = malloc(ALL * sizeof *y);
    uint16_t *v16 = malloc(ALL * 2), *h16 = malloc(ALL * 2), *want = malloc(ALL * 2);
    ck_assert(y && v16 && h16 && want);
    vit_bias_gelu_forward_v16(u, NULL, ROWS, COLS, v16, h16);
    ck_assert_int_eq(vit_gelu_forward(y, u, ALL), VIT_OK);
    ck_assert_int_eq(vit_bf16_from_floats(want, y, ALL), VIT_OK);
    for (uint32_t i = 0; i < ALL; i++) {
        uint32_t ub;
        memcpy(&ub, &u[i], sizeof ub);
        ck_assert_msg(v16[i] == ub >> 16, "v16[%u] = %04x, u's upper half %04x", i, v16[i],
                      ub >> 16);
        ck_assert_msg(h16[i] == want[i], "GELU(%.9g): table %04x, computed %04x", u[i], h16[i],
                      want[i]);
    }
    free(u), free(y), free(v16), free(h16), free(want);
}
END_TEST

/* With a bias: v16 = bf16(u + b), and h16 that of v16's value. */
START_TEST(forward_adds_the_bias_then_rounds)
{
    vit_set_threads(1);
    enum { N = 37, D = 300 };
    float *u = malloc(N * D * sizeof *u), b[D], v[N * D], y[N * D];
    uint16_t v16[N * D], h16[N * D], want[N * D];
    ck_assert_ptr_nonnull(u);
    for (int i = 0; i < N * D; i++)
        u[i] = (float)sin(0.37 * i) * 4;
    for (int j = 0; j < D; j++)
        b[j] = (float)cos(1.3 * j) * 0.5f;
    vit_bias_gelu_forward_v16(u, b, N, D, v16, h16);
    for (int i = 0; i < N * D; i++)
        v[i] = u[i] + b[i % D];
    ck_assert_int_eq(vit_bf16_from_floats(want, v, N * D), VIT_OK);
    ck_assert_mem_eq(v16, want, sizeof want);
    ck_assert_int_eq(vit_bf16_to_floats(v, v16, N * D), VIT_OK);
    ck_assert_int_eq(vit_gelu_forward(y, v, N * D), VIT_OK);
    ck_assert_int_eq(vit_bf16_from_floats(want, y, N * D), VIT_OK);
    ck_assert_mem_eq(h16, want, sizeof want);
    free(u);
}
END_TEST

/* The backward: the forward's h16 again; du = dh bf16(GELU'(v)) (one
 * float product), du16 its rounding, db += du's columns in row order. */
START_TEST(backward_matches_computed_gelu_grad)
{
    vit_set_threads(_i ? 2 : 1);
    float *u = every_bf16(), *g = calloc(ALL, sizeof *g), *ones = malloc(ALL * sizeof *ones);
    float *dh = malloc(ALL * sizeof *dh), *du = malloc(ALL * sizeof *du);
    float *db = calloc(COLS, sizeof *db), *want_db = calloc(COLS, sizeof *want_db);
    uint16_t *v16 = malloc(ALL * 2), *h16 = malloc(ALL * 2), *h16b = malloc(ALL * 2);
    uint16_t *g16 = malloc(ALL * 2), *du16 = malloc(ALL * 2), *want = malloc(ALL * 2);
    ck_assert(g && ones && dh && du && db && want_db && v16 && h16 && h16b && g16 && du16 && want);
    for (int i = 0; i < ALL; i++) {
        ones[i] = 1;
        dh[i] = (float)sin(0.011 * i + 0.3) * 3;
    }
    for (int j = 0; j < COLS; j++)
        db[j] = want_db[j] = (float)j / 7; /* accumulated onto */
    vit_bias_gelu_forward_v16(u, NULL, ROWS, COLS, v16, h16);
    memcpy(du, dh, ALL * sizeof *du);
    vit_gelu_backward_v16(du, db, v16, h16b, du16, ROWS, COLS);
    ck_assert_mem_eq(h16b, h16, ALL * 2);
    ck_assert_int_eq(vit_gelu_backward(g, ones, u, ALL), VIT_OK); /* g = 0 + 1 GELU'(u) */
    ck_assert_int_eq(vit_bf16_from_floats(g16, g, ALL), VIT_OK);
    for (int i = 0; i < ALL; i++) {
        float want_du = dh[i] * vit_bf16_to_float(g16[i]);
        /* ==: bitwise but for the sign of a zero (0 + -0 = 0 in the reference) */
        ck_assert_msg(du[i] == want_du, "GELU'(%.9g): du %.9g, expected %.9g", u[i], du[i],
                      want_du);
        want_db[i % COLS] += want_du;
    }
    ck_assert_int_eq(vit_bf16_from_floats(want, du, ALL), VIT_OK);
    ck_assert_mem_eq(du16, want, ALL * 2);
    for (int j = 0; j < COLS; j++)
        ck_assert_msg(db[j] == want_db[j], "db[%d] %.9g, expected %.9g", j, db[j], want_db[j]);
    free(u), free(g), free(ones), free(dh), free(du), free(db), free(want_db);
    free(v16), free(h16), free(h16b), free(g16), free(du16), free(want);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mixed_kernels");
    TCase *tc = tcase_create("gelu_table");
    tcase_add_loop_test(tc, forward_matches_computed_gelu, 0, 2);
    tcase_add_test(tc, forward_adds_the_bias_then_rounds);
    tcase_add_loop_test(tc, backward_matches_computed_gelu_grad, 0, 2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
