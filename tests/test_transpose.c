/* The GEMM layer's scaled transposed copies (src/kernels/transpose.c), both paths
 * (vector tiles where the CPU has AVX-512, plain tiles elsewhere), against
 * a plain loop: bitwise, over every shape up to 40 x 40 (full tiles, edge
 * tiles of every width, one row, one column), padded strides, zero padding
 * of the copy's rows and alphas, and nothing written outside the copy.
 * And the 16-bit copies (bf16 bit patterns) the same way, up to 70 x 70
 * (their tiles are 32 x 32). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transpose.h"

typedef void (*transpose_fn)(int, int, int, float, const float *, int, float *, int);

/* A value with a distinct bit pattern per position, never 0. */
static float value_at(int r, int c)
{
    return (float)(r * 1000 + c + 1) * 0.37f;
}

#define CANARY (-12345.5f)

/* Runs fn on a rows x cols matrix, zero-padded to pad_to rows of the copy,
 * with strides ldb = cols + pad_b and ldp = max(rows, pad_to) + pad_p;
 * returns the number of wrong elements (inside the copy, in its padding,
 * or a changed canary outside both). */
static int wrong(transpose_fn fn, int rows, int pad_to, int cols, int pad_b, int pad_p,
                 float alpha)
{
    int filled = pad_to > rows ? pad_to : rows;
    int ldb = cols + pad_b, ldp = filled + pad_p;
    size_t nb = (size_t)rows * ldb, np = (size_t)cols * ldp + 64;
    float *B = malloc(nb * sizeof *B), *P = malloc(np * sizeof *P);
    ck_assert_ptr_nonnull(B);
    ck_assert_ptr_nonnull(P);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < ldb; c++)
            B[(size_t)r * ldb + c] = c < cols ? value_at(r, c) : 1e30f; /* padding: unread */
    for (size_t i = 0; i < np; i++)
        P[i] = CANARY;
    fn(rows, pad_to, cols, alpha, B, ldb, P, ldp);
    int bad = 0;
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < ldp; r++) {
            float got = P[(size_t)c * ldp + r];
            float want = r < rows ? alpha * value_at(r, c) : r < filled ? 0.0f : CANARY;
            if (memcmp(&got, &want, sizeof got) != 0)
                bad++;
        }
    for (size_t i = (size_t)cols * ldp; i < np; i++)
        bad += P[i] != CANARY;
    free(B);
    free(P);
    return bad;
}

static void all_shapes(transpose_fn fn, const char *name)
{
    const float alphas[] = {1.0f, 0.125f, -0.3f};
    for (int rows = 1; rows <= 40; rows++)
        for (int cols = 1; cols <= 40; cols++) {
            int pad = (rows + cols) % 3 * 5;
            float a = alphas[(rows * 7 + cols) % 3];
            /* no padding, to the next 16, to 48 (a tile of padding alone), or less than rows */
            int pad_to = (rows + cols) % 4 == 0 ? 0 : (rows + cols) % 4 == 1 ? (rows + 15) / 16 * 16
                         : (rows + cols) % 4 == 2 ? 48 : rows;
            int bad = wrong(fn, rows, pad_to, cols, pad, (pad + 2) % 7, a);
            ck_assert_msg(bad == 0,
                          "%s: %d x %d padded to %d (strides +%d, +%d, alpha %g): %d elements wrong",
                          name, rows, cols, pad_to, pad, (pad + 2) % 7, (double)a, bad);
        }
    /* The shapes the models pack {rows, pad_to, cols}: keys of the attention
     * scores (padded to whole vectors for the direct kernels), weights. */
    const int shapes[][3] = {{17, 32, 16}, {5, 32, 32}, {50, 50, 32}, {65, 65, 64},
                             {768, 768, 192}, {192, 192, 768}, {576, 576, 192}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int bad = wrong(fn, shapes[i][0], shapes[i][1], shapes[i][2], 3, 1, 0.125f);
        ck_assert_msg(bad == 0, "%s: %d x %d padded to %d: %d elements wrong", name,
                      shapes[i][0], shapes[i][2], shapes[i][1], bad);
    }
}

START_TEST(dispatched)
{
    all_shapes(vit_transpose_scaled, "vit_transpose_scaled");
}
END_TEST

START_TEST(plain)
{
    all_shapes(vit_transpose_scaled_plain, "vit_transpose_scaled_plain");
}
END_TEST

typedef void (*transpose16_fn)(int, int, const uint16_t *, int, uint16_t *, int);

/* The 16-bit copy of a rows x cols matrix (strides cols + pad_b and rows +
 * pad_p): the number of wrong elements, inside the copy or a changed
 * canary outside it. */
static int wrong16(transpose16_fn fn, int rows, int cols, int pad_b, int pad_p)
{
    int ldb = cols + pad_b, ldp = rows + pad_p;
    size_t nb = (size_t)rows * ldb, np = (size_t)cols * ldp + 64;
    uint16_t *B = malloc(nb * sizeof *B), *P = malloc(np * sizeof *P);
    ck_assert_ptr_nonnull(B);
    ck_assert_ptr_nonnull(P);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < ldb; c++) /* every bit pattern's region; padding unread */
            B[(size_t)r * ldb + c] = c < cols ? (uint16_t)(r * 977 + c * 131 + 1) : 0xdead;
    for (size_t i = 0; i < np; i++)
        P[i] = 0xbeef;
    fn(rows, cols, B, ldb, P, ldp);
    int bad = 0;
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < ldp; r++)
            bad += P[(size_t)c * ldp + r]
                   != (r < rows ? (uint16_t)(r * 977 + c * 131 + 1) : (uint16_t)0xbeef);
    for (size_t i = (size_t)cols * ldp; i < np; i++)
        bad += P[i] != 0xbeef;
    free(B);
    free(P);
    return bad;
}

static void all_shapes16(transpose16_fn fn, const char *name)
{
    for (int rows = 1; rows <= 70; rows++)
        for (int cols = 1; cols <= 70; cols++) {
            int pad_b = (rows + cols) % 3 * 5, pad_p = (rows * 3 + cols) % 4;
            int bad = wrong16(fn, rows, cols, pad_b, pad_p);
            ck_assert_msg(bad == 0, "%s: %d x %d (strides +%d, +%d): %d elements wrong", name,
                          rows, cols, pad_b, pad_p, bad);
        }
    /* a weight gradient's op(A): a batch slice's rows by a layer's width */
    int bad = wrong16(fn, 6272, 32, 64, 0);
    ck_assert_msg(bad == 0, "%s: 6272 x 32 of stride 96: %d elements wrong", name, bad);
}

START_TEST(dispatched16)
{
    all_shapes16(vit_transpose16, "vit_transpose16");
}
END_TEST

START_TEST(plain16)
{
    all_shapes16(vit_transpose16_plain, "vit_transpose16_plain");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("transpose");
    TCase *t = tcase_create("copies");
    tcase_add_test(t, dispatched);
    tcase_add_test(t, plain);
    tcase_add_test(t, dispatched16);
    tcase_add_test(t, plain16);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
