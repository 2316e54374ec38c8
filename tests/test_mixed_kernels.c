/* The mixed-precision MLP's GELU kernels (src/kernels/activations.c, internal:
 * this suite links the static library), which read GELU and GELU' of a
 * bf16 pre-activation from a table of all 65,536 values: against the
 * public float32 kernels (vit_gelu_forward, vit_gelu_backward) and the
 * rounding (vit_bf16_from_floats), bit for bit (but for the sign of a
 * zero gradient), for every finite bf16 value, on one thread and on two.
 * And the bf16 GEMMs' operands given in bf16 (src/kernels/bf16.c: a
 * gradient rounded once for its two products, op(A) read in place): the
 * same bits as the GEMM on the float values they were rounded from. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "activations_internal.h"
#include "mixed.h"
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

/* C = beta C + op(A) B over bf16 operands, three ways, on the path _i says
 * (0: the CPU's, 1: FALLBACK): vit_gemm_bf16 on float A and B; the same
 * with A and B given as their bf16 roundings (vit_gemm_bf16_a16_b16), A
 * at its dense stride (rows read in place when not transposed and K is
 * even) and at a padded one (copied); and B alone in bf16 through
 * vit_bf16_pack_b16 (vit_gemm_bf16_packed).  All bit for bit. */
START_TEST(bf16_operands_match_float_operands)
{
    vit_set_threads(1);
    if (_i == 1)
        ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_FALLBACK), VIT_OK);
    static const int shapes[][3] = {{37, 24, 64}, {16, 33, 20}, {50, 17, 31}, {8, 96, 49}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int ta = 0; ta < 2; ta++)
            for (int beta = 0; beta < 2; beta++) {
                const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                const int rows_a = ta ? K : M, dense = ta ? M : K, pad = dense + 3;
                float *A = malloc((size_t)rows_a * pad * sizeof *A);
                float *B = malloc((size_t)K * N * sizeof *B), *C[4];
                uint16_t *A16 = malloc((size_t)rows_a * pad * 2), *B16 = malloc((size_t)K * N * 2);
                uint16_t *A16p = malloc((size_t)rows_a * pad * 2);
                ck_assert(A && B && A16 && B16 && A16p);
                for (int i = 0; i < rows_a * pad; i++)
                    A[i] = (float)sin(0.731 * i + si) * 2;
                for (int i = 0; i < K * N; i++)
                    B[i] = (float)cos(0.377 * i + ta) * 3;
                ck_assert_int_eq(vit_bf16_from_floats(A16, A, (size_t)rows_a * dense), VIT_OK);
                for (int r = 0; r < rows_a; r++)
                    ck_assert_int_eq(vit_bf16_from_floats(A16p + (size_t)r * pad,
                                                          A + (size_t)r * dense, (size_t)dense),
                                     VIT_OK);
                ck_assert_int_eq(vit_bf16_from_floats(B16, B, (size_t)K * N), VIT_OK);
                for (int c = 0; c < 4; c++) {
                    C[c] = malloc((size_t)M * N * sizeof *C[c]);
                    ck_assert_ptr_nonnull(C[c]);
                    for (int i = 0; i < M * N; i++)
                        C[c][i] = (float)(i % 7) - 3;
                }
                ck_assert_int_eq(vit_gemm_bf16(ta, 0, M, N, K, 1, A, dense, B, N, (float)beta,
                                               C[0], N), VIT_OK);
                ck_assert_int_eq(vit_gemm_bf16_a16_b16(ta, M, N, K, A16, dense, B16, N,
                                                       (float)beta, C[1], N), VIT_OK);
                ck_assert_int_eq(vit_gemm_bf16_a16_b16(ta, M, N, K, A16p, pad, B16, N,
                                                       (float)beta, C[2], N), VIT_OK);
                vit_bf16_packed *P;
                ck_assert_int_eq(vit_bf16_packed_new(&P), VIT_OK);
                ck_assert_int_eq(vit_bf16_pack_b16(P, K, N, B16, N), VIT_OK);
                ck_assert_int_eq(vit_gemm_bf16_packed(ta, M, N, K, 1, A, dense, P, (float)beta,
                                                      C[3], N), VIT_OK);
                vit_bf16_packed_free(P);
                double top = 0;
                for (int i = 0; i < M * N; i++)
                    top = fmax(top, fabs(C[0][i]));
                ck_assert_msg(top > 1, "%dx%dx%d: a product of nothing", M, N, K);
                for (int c = 1; c < 4; c++)
                    ck_assert_msg(!memcmp(C[0], C[c], (size_t)M * N * sizeof *C[0]),
                                  "%dx%dx%d trans_a %d beta %d: way %d differs", M, N, K, ta,
                                  beta, c);
                for (int c = 0; c < 4; c++)
                    free(C[c]);
                free(A), free(B), free(A16), free(B16), free(A16p);
            }
    /* A bf16 B is taken untransposed and whole only. */
    vit_bf16_packed *P;
    uint16_t b16[4] = {0};
    ck_assert_int_eq(vit_bf16_packed_new(&P), VIT_OK);
    ck_assert_int_eq(vit_bf16_pack_b16(P, 2, 2, NULL, 2), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_pack_b16(P, 2, 2, b16, 1), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit_bf16_pack_b16"));
    vit_bf16_packed_free(P);
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_AUTO), VIT_OK);
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
    TCase *tg = tcase_create("bf16_operands");
    tcase_add_loop_test(tg, bf16_operands_match_float_operands, 0, 2);
    suite_add_tcase(s, tg);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
