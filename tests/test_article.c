/*
 * tests/test_article.c - the self-attention article's worked examples
 * (examples/article.c) reproduce the article's PATTERN, in the float64 build.
 *
 * Our random numbers are not NumPy's, so the article's printed digits are
 * not expected; what is checked is what the article says about them, over
 * several seeds, with bands derived below from the geometry of the image or
 * from the spread measured over many seeds (quoted where used).
 *
 *  1. squares: the map of patch (0,1) is softmax of the patches' own dot
 *     products; its largest weights are the top edges (rows 0 and 4); the far
 *     square's top edge takes about a third; everything else almost nothing.
 *  2. heads: shapes, 4 d^2 weights, permutation equivariance, exact zeros
 *     outside the windows, entry counts.
 *  3. scaling: raw logits' std doubles per quadrupling of d_k; unscaled the
 *     softmax saturates and its Jacobian shrinks; scaled both stay flat.
 *  4. cost: the token and entry counts, from the library's masks, against
 *     independent arithmetic and the article's figures.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/article.h"
#include "vit/attention.h"

#define DIGITS "../data/digits.csv.gz"

static const uint64_t seeds[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
#define NSEEDS ((int)(sizeof seeds / sizeof seeds[0]))

/* Whether pixel (y, x) lies in one of the two squares, from the article's
 * definition img[2:14, 2:14] = img[18:30, 18:30] = 1. */
static int in_square(int y, int x)
{
    return (y >= 2 && y < 14 && x >= 2 && x < 14) || (y >= 18 && y < 30 && x >= 18 && x < 30);
}

/* Number of the patch's 16 pixels inside a square: 0 or 16 means flat. */
static int bright_pixels(int token)
{
    int pr = token / ARTICLE_GRID, pc = token % ARTICLE_GRID, c = 0;
    for (int a = 0; a < ARTICLE_PATCH; a++)
        for (int b = 0; b < ARTICLE_PATCH; b++)
            c += in_square(pr * ARTICLE_PATCH + a, pc * ARTICLE_PATCH + b);
    return c;
}

/* ---- Building blocks ----------------------------------------------------- */

START_TEST(test_orthogonal)
{
    const int sizes[] = {1, 3, 16};
    for (int si = 0; si < 3; si++)
        for (int s = 0; s < 4; s++) {
            int n = sizes[si];
            vit_real r[16 * 16];
            vit_rng rng;
            vit_rng_seed(&rng, (uint64_t)s);
            ck_assert_int_eq(article_orthogonal(&rng, n, r), VIT_OK);
            double worst = 0.0;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) {
                    double dot = 0.0;
                    for (int k = 0; k < n; k++) dot += r[k * n + i] * r[k * n + j];
                    worst = fmax(worst, fabs(dot - (i == j)));
                }
            ck_assert_msg(worst < 1e-12, "n=%d seed %d: |R^T R - I| = %g", n, s, worst);
        }
    vit_rng rng;
    vit_rng_seed(&rng, 0);
    vit_real r[4];
    ck_assert_int_eq(article_orthogonal(&rng, 0, r), VIT_EINVAL);
    ck_assert_int_eq(article_orthogonal(NULL, 2, r), VIT_EINVAL);
    ck_assert_int_eq(article_orthogonal(&rng, 2, NULL), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(article_error(), "article_orthogonal"));
}
END_TEST

/* Token layout on the noise-free image: patch (0,1) is dark on its top two
 * pixel rows and bright on the bottom two (+-1/2 after the mean); patch
 * (4,7) is bright only at rows 2-3, columns 0-1 of the patch (4 of 16
 * pixels: 3/4 there, -1/4 elsewhere), which also fixes the order within
 * the patch (row-major). */
START_TEST(test_patches)
{
    vit_rng rng;
    vit_rng_seed(&rng, 0);
    vit_real img[ARTICLE_IMAGE * ARTICLE_IMAGE], x[ARTICLE_TOKENS * ARTICLE_DIM];
    article_squares_image(&rng, 0.0, img);
    for (int y = 0; y < ARTICLE_IMAGE; y++)
        for (int c = 0; c < ARTICLE_IMAGE; c++)
            ck_assert(img[y * ARTICLE_IMAGE + c] == in_square(y, c));
    article_patches(img, x);
    const vit_real *p01 = x + 1 * ARTICLE_DIM, *p47 = x + (4 * 8 + 7) * ARTICLE_DIM;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            ck_assert(p01[a * 4 + b] == (a >= 2 ? 0.5 : -0.5));
            ck_assert(p47[a * 4 + b] == (a >= 2 && b <= 1 ? 0.75 : -0.25));
        }
    for (int t = 0; t < ARTICLE_TOKENS; t++) {
        double sum = 0.0;
        for (int i = 0; i < ARTICLE_DIM; i++) sum += x[t * ARTICLE_DIM + i];
        ck_assert_msg(fabs(sum) < 1e-12, "token %d has mean %g", t, sum / 16);
    }
}
END_TEST

/* ---- 1. Squares ------------------------------------------------------------ */

/* Without noise the scores of query (0,1) against the 64 patches are x_q.x_j
 * in {4, 2, 0, -2, -4}: 4 for the four copies of its own edge ((0,1),
 * (0,2), (4,5), (4,6)), 2 for the four top corners, -2 for the four bottom
 * corners, -4 for the four bottom edges, 0 for the other 48 (flat, and side
 * edges, which are orthogonal to a horizontal edge).  So the far edge gets
 * exactly 2e^4 / (4e^4 + 4e^2 + 48 + 4e^-2 + 4e^-4) = 0.3682. */
START_TEST(test_squares_noise_free)
{
    article_squares s;
    ck_assert_int_eq(article_squares_run(0, 0.0, &s), VIT_OK);
    double z = 4 * exp(4.0) + 4 * exp(2.0) + 48 + 4 * exp(-2.0) + 4 * exp(-4.0);
    double want = 2 * exp(4.0) / z;
    printf("squares, no noise: far edge %.6f (analytic %.6f)\n", s.far_edge, want);
    ck_assert_msg(fabs(s.far_edge - want) < 1e-12, "far edge %.15f, want %.15f", s.far_edge, want);
    ck_assert(fabs(s.near_edge - want) < 1e-12);
}
END_TEST

/* The article's claim for W_Q = W_K = 2R, R orthogonal: the map is the
 * softmax of the patches' own dot products (R cancels, 4 / sqrt(16) = 1). */
static void check_map_is_softmax_of_dots(const article_squares *s)
{
    const int n = ARTICLE_TOKENS, d = ARTICLE_DIM, q = s->query;
    double score[ARTICLE_TOKENS], mx = -INFINITY, z = 0.0, sum = 0.0;
    for (int j = 0; j < n; j++) {
        score[j] = 0.0;
        for (int c = 0; c < d; c++) score[j] += s->tokens[q * d + c] * s->tokens[j * d + c];
        mx = fmax(mx, score[j]);
    }
    for (int j = 0; j < n; j++) z += exp(score[j] - mx);
    for (int j = 0; j < n; j++) {
        double want = exp(score[j] - mx) / z;
        ck_assert_msg(fabs(s->map[j] - want) < 1e-12, "map[%d] %.15f, softmax of dots %.15f", j,
                      s->map[j], want);
        sum += s->map[j];
    }
    ck_assert(fabs(sum - 1.0) < 1e-12);
}

/* Bands, measured over 500 seeds with noise 0.05: the far edge took
 * 0.314 .. 0.431 (noise-free 0.368, article 0.357), so [0.25, 0.50] is the
 * "about a third" with room for the noise; far / near took 0.73 .. 1.32
 * ("as much as its neighbours": [0.5, 2]); no patch outside rows 0 and 4
 * exceeded 0.006 (flat patches score ~0 against 4 for the edges, so
 * e^-4 of an edge's weight), hence < 0.01. */
START_TEST(test_squares_pattern)
{
    double far_lo = 1, far_hi = 0, rest_hi = 0;
    for (int si = 0; si < NSEEDS; si++) {
        article_squares s;
        ck_assert_int_eq(article_squares_run(seeds[si], 0.05, &s), VIT_OK);
        ck_assert_int_eq(s.query, 1);
        check_map_is_softmax_of_dots(&s);

        /* the six largest are top edges or top corners (rows 0 and 4), and
         * the four largest the four copies of the query's own edge */
        for (int t = 0; t < 6; t++) {
            int row = s.top[t] / ARTICLE_GRID;
            ck_assert_msg(row == 0 || row == 4, "seed %d: top %d is patch (%d,%d)", (int)seeds[si],
                          t, row, s.top[t] % ARTICLE_GRID);
            if (t > 0) ck_assert(s.map[s.top[t]] <= s.map[s.top[t - 1]]);
        }
        for (int t = 0; t < 4; t++) {
            int j = s.top[t];
            ck_assert_msg(j == 1 || j == 2 || j == 37 || j == 38, "seed %d: top %d is token %d",
                          (int)seeds[si], t, j);
        }
        ck_assert(fabs(s.far_edge - (s.map[37] + s.map[38])) < 1e-15);
        ck_assert_msg(s.far_edge > 0.25 && s.far_edge < 0.50, "seed %d: far edge %.3f",
                      (int)seeds[si], s.far_edge);
        double ratio = s.far_edge / s.near_edge;
        ck_assert_msg(ratio > 0.5 && ratio < 2.0, "seed %d: far/near %.3f", (int)seeds[si], ratio);

        /* bottom edges (rows 3 and 7: negative dot products) below every
         * flat patch, and everything off rows 0 and 4 below 0.01 */
        double flat_lo = 1, bottom_hi = 0;
        for (int j = 0; j < ARTICLE_TOKENS; j++) {
            int row = j / ARTICLE_GRID, bright = bright_pixels(j);
            if (bright == 0 || bright == 16) flat_lo = fmin(flat_lo, s.map[j]);
            else if (row == 3 || row == 7) bottom_hi = fmax(bottom_hi, s.map[j]);
            if (row != 0 && row != 4) {
                ck_assert_msg(s.map[j] < 0.01, "seed %d: patch (%d,%d) has %.4f", (int)seeds[si],
                              row, j % ARTICLE_GRID, s.map[j]);
                rest_hi = fmax(rest_hi, s.map[j]);
            }
        }
        ck_assert_msg(bottom_hi < flat_lo, "seed %d: bottom edge %.5f, flat %.5f", (int)seeds[si],
                      bottom_hi, flat_lo);
        far_lo = fmin(far_lo, s.far_edge);
        far_hi = fmax(far_hi, s.far_edge);
    }
    printf("squares, %d seeds: far edge %.3f .. %.3f, largest weight off rows 0/4 %.4f\n", NSEEDS,
           far_lo, far_hi, rest_hi);
}
END_TEST

/* ---- 2. Heads ---------------------------------------------------------------- */

START_TEST(test_heads)
{
    for (int si = 0; si < 5; si++) {
        article_heads h;
        ck_assert_int_eq(article_heads_run(seeds[si], 0.05, &h), VIT_OK);
        ck_assert_int_eq(h.out_rows, 64);
        ck_assert_int_eq(h.out_cols, 16);
        ck_assert_int_eq(h.map_heads, 4);
        ck_assert_int_eq(h.map_rows, 64);
        ck_assert_int_eq(h.map_cols, 64);
        ck_assert_uint_eq(h.params, 4 * 16 * 16);
        ck_assert_uint_eq(h.params, 1024);
        ck_assert_msg(h.perm_max_diff <= 1e-12, "perm diff %g", h.perm_max_diff);
        /* without the mask the query does look outside its window (so the
         * zero below is the mask's doing), with it not at all */
        ck_assert_msg(h.outside_global > 0.1, "outside mass without mask %g", h.outside_global);
        ck_assert(h.outside_window == 0.0);
        ck_assert(h.outside_max == 0.0);
        ck_assert_msg(h.row_sum_err <= 1e-12, "row sums off by %g", h.row_sum_err);
        /* each of the 64 tokens sees the 16 of its 4 x 4 window */
        ck_assert_uint_eq(h.entries_global, 64 * 64);
        ck_assert_uint_eq(h.entries_window, 64 * 4 * 4);
        ck_assert_uint_eq(h.entries_global, 4096);
        ck_assert_uint_eq(h.entries_window, 1024);
        if (si == 0)
            printf("heads: perm diff %.1e, outside mass %.3f global, %.1f windowed\n",
                   h.perm_max_diff, h.outside_global, h.outside_window);
    }
}
END_TEST

/* ---- 3. Scaling ------------------------------------------------------------ */

/* Bands, from the footnote's argument and 100 seeds of this experiment:
 *  - The expected raw std is c sqrt(d_k) with the same c for every d_k, so
 *    consecutive ratios are 2 up to sampling error.  That error is largest
 *    at d_k = 4, where each image's scores come from 4 random products:
 *    over 100 seeds the ratios spanned 1.77 .. 2.27 (4 seeds had one
 *    outside [1.8, 2.2]), so each ratio is checked in [1.7, 2.3] and the
 *    least-squares exponent of std ~ d_k^e, which uses all five points
 *    (0.484 .. 0.521 over the seeds), in [0.47, 0.53].
 *  - Scaled max weight: largest deviation from its mean 0.014 over the
 *    seeds (bar 0.03); scaled Jacobian: 2.2% (bar 10%).
 *  - Raw Jacobian at 1024 / at 4: at most 0.486 over the seeds (article:
 *    "less than half"); raw max weight at 1024: at least 0.79 (bar 0.7). */
START_TEST(test_scaling)
{
    vit_dataset train = {0}, test = {0};
    ck_assert_msg(vit_data_load_digits(DIGITS, 300, &train, &test) == VIT_OK, "%s",
                  vit_last_error());
    for (int si = 0; si < 3; si++) {
        article_scaling s;
        ck_assert_msg(article_scaling_run(&train, 300, seeds[si], &s) == VIT_OK, "%s",
                      article_error());
        ck_assert_int_eq(s.images, 300);
        ck_assert_int_eq(s.tokens, 16);
        double mx = 0, my = 0, sxy = 0, sxx = 0, mean_max = 0, mean_jac = 0;
        for (int i = 0; i < ARTICLE_NDK; i++) {
            ck_assert_int_eq(s.d_k[i], 4 << (2 * i));
            mx += log((double)s.d_k[i]) / ARTICLE_NDK;
            my += log(s.logit_std[i]) / ARTICLE_NDK;
            mean_max += s.max_scaled[i] / ARTICLE_NDK;
            mean_jac += s.jac_scaled[i] / ARTICLE_NDK;
        }
        for (int i = 0; i < ARTICLE_NDK; i++) {
            double lx = log((double)s.d_k[i]) - mx;
            sxy += lx * (log(s.logit_std[i]) - my);
            sxx += lx * lx;
            if (i > 0) {
                double r = s.logit_std[i] / s.logit_std[i - 1];
                ck_assert_msg(r > 1.7 && r < 2.3, "seed %d: std ratio %d/%d = %.3f",
                              (int)seeds[si], s.d_k[i], s.d_k[i - 1], r);
                ck_assert_msg(s.max_raw[i] > s.max_raw[i - 1], "seed %d: raw max weight fell",
                              (int)seeds[si]);
            }
            ck_assert_msg(fabs(s.max_scaled[i] - mean_max) < 0.03, "seed %d d_k %d: scaled max %.3f",
                          (int)seeds[si], s.d_k[i], s.max_scaled[i]);
            ck_assert_msg(fabs(s.jac_scaled[i] / mean_jac - 1) < 0.10,
                          "seed %d d_k %d: scaled Jacobian %.3f", (int)seeds[si], s.d_k[i],
                          s.jac_scaled[i]);
        }
        double e = sxy / sxx;
        ck_assert_msg(e > 0.47 && e < 0.53, "seed %d: std ~ d_k^%.3f", (int)seeds[si], e);
        ck_assert_msg(s.max_raw[ARTICLE_NDK - 1] > 0.7, "seed %d: raw max weight %.3f at 1024",
                      (int)seeds[si], s.max_raw[ARTICLE_NDK - 1]);
        ck_assert_msg(s.jac_raw[ARTICLE_NDK - 1] < 0.5 * s.jac_raw[0],
                      "seed %d: raw Jacobian %.3f at 1024 vs %.3f at 4", (int)seeds[si],
                      s.jac_raw[ARTICLE_NDK - 1], s.jac_raw[0]);
        printf("scaling seed %d: std %.2f %.2f %.2f %.2f %.2f (d_k^%.3f), max raw %.2f -> %.2f, "
               "scaled %.3f; Jacobian raw %.3f -> %.3f, scaled %.3f\n",
               (int)seeds[si], s.logit_std[0], s.logit_std[1], s.logit_std[2], s.logit_std[3],
               s.logit_std[4], e, s.max_raw[0], s.max_raw[4], mean_max, s.jac_raw[0], s.jac_raw[4],
               mean_jac);
    }

    /* arguments */
    article_scaling s;
    ck_assert_int_eq(article_scaling_run(NULL, 300, 0, &s), VIT_EINVAL);
    ck_assert_int_eq(article_scaling_run(&train, 0, 0, &s), VIT_EINVAL);
    ck_assert_int_eq(article_scaling_run(&train, 301, 0, &s), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(article_error(), "n_images"));
    vit_dataset wrong = train;
    wrong.width = 4;
    ck_assert_int_eq(article_scaling_run(&wrong, 10, 0, &s), VIT_EINVAL);
    ck_assert_int_eq(article_scaling_run(&train, 10, 0, NULL), VIT_EINVAL);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
}
END_TEST

/* ---- 4. Cost ------------------------------------------------------------------ */

/* Allowed pairs along one axis of length len under Swin's shifted windows:
 * the len/M - 1 unwrapped windows hold M^2 pairs each, and the wrapped last
 * window is split into its two regions of M - shift and shift tokens. */
static uint64_t shifted_axis_pairs(uint64_t len, uint64_t M, uint64_t shift)
{
    return (len / M - 1) * M * M + (M - shift) * (M - shift) + shift * shift;
}

START_TEST(test_cost)
{
    article_cost c;
    ck_assert_int_eq(article_cost_run(&c), VIT_OK);
    /* ViT/16 */
    ck_assert_int_eq(c.vit_tokens, (224 / 16) * (224 / 16));
    ck_assert_int_eq(c.vit_tokens, 196);
    ck_assert_uint_eq(c.vit_entries, (size_t)c.vit_tokens * c.vit_tokens);
    ck_assert_uint_eq(c.vit_entries, 38416);
    /* one token per pixel */
    ck_assert_int_eq(c.pixel_tokens, 224 * 224);
    ck_assert_int_eq(c.pixel_tokens, 50176);
    ck_assert(c.pixel_entries == (uint64_t)50176 * 50176);
    ck_assert_int_eq((int)llround((double)c.pixel_entries / 1e7), 252); /* "2.52 billion" */
    ck_assert(c.pixel_bytes == c.pixel_entries * sizeof(float));
    ck_assert_msg(c.pixel_bytes >= 10000000000ull && c.pixel_bytes < 10100000000ull,
                  "bytes %llu are not 'about 10 GB'", (unsigned long long)c.pixel_bytes);
    ck_assert(c.pixel_vs_patch == 256.0 * 256.0);
    /* Swin */
    ck_assert_int_eq(c.swin_tokens, 56 * 56);
    ck_assert_int_eq(c.swin_tokens, 3136);
    ck_assert_uint_eq(c.swin_global, (size_t)3136 * 3136);
    ck_assert_uint_eq(c.swin_windowed, (size_t)3136 * 7 * 7);
    ck_assert(c.swin_ratio == 64.0);
    uint64_t axis = shifted_axis_pairs(56, 7, 3);
    ck_assert_uint_eq(c.swin_shifted, axis * axis);
    printf("cost: %d tokens, %zu entries; pixels %lld tokens, %llu entries, %llu bytes; "
           "Swin %zu / %zu = %.0f (shifted %zu)\n",
           c.vit_tokens, c.vit_entries, (long long)c.pixel_tokens,
           (unsigned long long)c.pixel_entries, (unsigned long long)c.pixel_bytes, c.swin_global,
           c.swin_windowed, c.swin_ratio, c.swin_shifted);
    ck_assert_int_eq(article_cost_run(NULL), VIT_EINVAL);
}
END_TEST

START_TEST(test_null_outputs)
{
    ck_assert_int_eq(article_squares_run(0, 0.05, NULL), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(article_error(), "article_squares_run"));
    ck_assert_int_eq(article_heads_run(0, 0.05, NULL), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(article_error(), "article_heads_run"));
}
END_TEST

static Suite *article_suite(void)
{
    Suite *s = suite_create("article");
    TCase *b = tcase_create("pieces");
    tcase_add_test(b, test_orthogonal);
    tcase_add_test(b, test_patches);
    tcase_add_test(b, test_null_outputs);
    suite_add_tcase(s, b);
    TCase *e = tcase_create("experiments");
    tcase_set_timeout(e, 60);
    tcase_add_test(e, test_squares_noise_free);
    tcase_add_test(e, test_squares_pattern);
    tcase_add_test(e, test_heads);
    tcase_add_test(e, test_scaling);
    tcase_add_test(e, test_cost);
    suite_add_tcase(s, e);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(article_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
