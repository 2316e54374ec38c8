/* The GEMM layer's scaled transposed copies (src/transpose.c), both paths
 * (vector tiles where the CPU has AVX-512, plain tiles elsewhere), against
 * a plain loop: bitwise, over every shape up to 40 x 40 (full tiles, edge
 * tiles of every width, one row, one column), padded strides, zero padding
 * of the copy's rows and alphas, and nothing written outside the copy;
 * and the bf16 tiles against a reference rounding, bit for bit. */
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

/* ---- the bf16 tiles (vit_transpose_bf16) --------------------------------- */

/* float32 bits rounded to bf16 to nearest, ties to even; a NaN keeps its
 * sign and top payload with the quiet bit set (src/bf16.c's rule, written
 * out again here as the reference). */
static uint16_t ref_bf16(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Float bit patterns that test the rounding: every exponent, ties with
 * the kept bit even and odd, just above and below a tie, subnormals of
 * both signs (the instruction would flush them), zeros, infinities,
 * NaNs, and the largest finite values (which round up to infinity). */
static uint32_t pattern_at(int r, int c)
{
    uint32_t h = (uint32_t)(r * 7919 + c * 104729 + 12345) * 2654435761u;
    uint32_t sign = (h >> 3 & 1u) << 31, mant = (h >> 4) & 0x007fffffu;
    switch (h >> 28) {
    case 0: return sign | (mant & 0x007f0000u) | 0x8000u | 0x3f800000u; /* a tie */
    case 1: return sign | (mant & 0x007fffffu);                         /* subnormal or 0 */
    case 2: return sign | 0x3f808000u;                                 /* tie, odd bit */
    case 3: return sign | 0x7f7fffffu;                                  /* rounds to inf */
    case 4: return sign | 0x7f800000u | (h & 1u ? mant | 1u : 0);        /* inf or NaN */
    case 5: return sign | 0x3f808001u;                                  /* above a tie */
    case 6: return sign | 0x3f807fffu;                                  /* below a tie */
    default: return sign | ((h >> 5) % 255u) << 23 | mant;              /* any exponent */
    }
}

#define CANARY16 0xdeadu

/* One rows x cols case from float32 (from16 0) or bf16 B; the number of
 * wrong elements of P [cols, rows + pad_p] and changed canaries. */
static int wrong_bf16(int rows, int cols, int pad_b, int pad_p, int from16)
{
    int ldb = cols + pad_b, ldp = rows + pad_p;
    size_t nb = (size_t)rows * ldb, np = (size_t)cols * ldp + 32;
    float *B = malloc(nb * sizeof *B);
    uint16_t *B16 = malloc(nb * sizeof *B16), *P = malloc(np * sizeof *P);
    ck_assert(B && B16 && P);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < ldb; c++) {
            uint32_t u = pattern_at(r, c);
            memcpy(&B[(size_t)r * ldb + c], &u, sizeof u);
            B16[(size_t)r * ldb + c] = (uint16_t)(u ^ u >> 16); /* any 16 bits */
        }
    for (size_t i = 0; i < np; i++)
        P[i] = CANARY16;
    vit_transpose_bf16(rows, cols, from16 ? NULL : B, from16 ? B16 : NULL, ldb, P, ldp);
    int bad = 0;
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < ldp; r++) {
            uint16_t want = r >= rows ? CANARY16
                          : from16 ? B16[(size_t)r * ldb + c] : ref_bf16(pattern_at(r, c));
            bad += P[(size_t)c * ldp + r] != want;
        }
    for (size_t i = (size_t)cols * ldp; i < np; i++)
        bad += P[i] != CANARY16;
    free(B);
    free(B16);
    free(P);
    return bad;
}

/* Bitwise against the reference rounding (float32 in) or the same bits
 * (bf16 in), every shape up to 40 x 40 and the models' shapes, on a CPU
 * with AVX-512 BF16 (the only one that calls it). */
START_TEST(bf16_tiles)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16"))
        return;
    for (int from16 = 0; from16 < 2; from16++) {
        for (int rows = 1; rows <= 40; rows++)
            for (int cols = 1; cols <= 40; cols++) {
                int pad = (rows + cols) % 3 * 5;
                int bad = wrong_bf16(rows, cols, pad, (pad + 2) % 7, from16);
                ck_assert_msg(bad == 0, "bf16 tiles from %s: %d x %d: %d elements wrong",
                              from16 ? "bf16" : "float", rows, cols, bad);
            }
        const int shapes[][2] = {{2080, 192}, {2080, 64}, {192, 2080}, {1040, 768}};
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            int bad = wrong_bf16(shapes[i][0], shapes[i][1], 0, 2, from16);
            ck_assert_msg(bad == 0, "bf16 tiles from %s: %d x %d: %d elements wrong",
                          from16 ? "bf16" : "float", shapes[i][0], shapes[i][1], bad);
        }
    }
#endif
}
END_TEST

int main(void)
{
    Suite *s = suite_create("transpose");
    TCase *t = tcase_create("copies");
    tcase_add_test(t, dispatched);
    tcase_add_test(t, plain);
    tcase_add_test(t, bf16_tiles);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
