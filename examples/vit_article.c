/*
 * vit_article - reruns the worked examples of the self-attention article the
 * project started from and prints their figures (examples/article.c does the
 * work; tests/test_article.c checks the same figures' pattern).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "article.h"
#include "cli.h"
#include "vit/vit.h"

static const char *prog = "vit_article";

static int article_fail(void)
{
    fprintf(stderr, "%s: %s\n", prog, article_error());
    return 1;
}

static int show_squares(uint64_t seed)
{
    article_squares s;
    if (article_squares_run(seed, 0.05, &s)) return article_fail();
    printf("== 1. attention over the patches of two squares (seed %" PRIu64 ")\n", seed);
    printf("attention of patch (0,1) over the 8x8 patch grid:\n");
    for (int r = 0; r < ARTICLE_GRID; r++) {
        for (int c = 0; c < ARTICLE_GRID; c++) printf(" %5.2f", s.map[r * ARTICLE_GRID + c]);
        printf("\n");
    }
    printf("top patches:");
    for (int t = 0; t < 6; t++)
        printf(" (%d,%d) %.3f", s.top[t] / ARTICLE_GRID, s.top[t] % ARTICLE_GRID, s.map[s.top[t]]);
    printf("\nweight on the second square's top edge (row 4, cols 5-6): %.3f\n", s.far_edge);
    printf("weight on the query's own edge (row 0, cols 1-2):          %.3f\n\n", s.near_edge);
    return 0;
}

static int show_heads(uint64_t seed)
{
    article_heads h;
    if (article_heads_run(seed, 0.05, &h)) return article_fail();
    printf("== 2. four heads, a shuffle and a window mask (seed %" PRIu64 ")\n", seed);
    printf("output %dx%d, attention maps %dx%dx%d, parameters %zu\n", h.out_rows, h.out_cols,
           h.map_heads, h.map_rows, h.map_cols, h.params);
    printf("max |f(X[perm]) - f(X)[perm]|: %.1e (%s)\n", h.perm_max_diff, VIT_REAL_NAME);
    printf("patch (0,1): attention mass outside its window, summed over the 4 heads: %.4f global, %.1f windowed\n",
           h.outside_global, h.outside_window);
    printf("score entries per head: global %zu, windowed %zu\n\n", h.entries_global,
           h.entries_window);
    return 0;
}

static int show_scaling(uint64_t seed)
{
    vit_dataset train = {0}, test = {0};
    if (vit_data_load_digits(cli_digits_path(), 300, &train, &test))
        return cli_fail(prog, NULL);
    article_scaling s;
    int rc = article_scaling_run(&train, 300, seed, &s);
    vit_dataset_free(&train);
    vit_dataset_free(&test);
    if (rc) return article_fail();
    printf("== 3. why divide by sqrt(d_k): %d digit images, %d tokens each (seed %" PRIu64 ")\n",
           s.images, s.tokens, seed);
    printf("  d_k  logit std  max weight (raw / scaled)  Jacobian norm (raw / scaled)\n");
    for (int i = 0; i < ARTICLE_NDK; i++)
        printf("%5d  %9.1f      %.2f / %.2f                %.3f / %.3f\n", s.d_k[i],
               s.logit_std[i], s.max_raw[i], s.max_scaled[i], s.jac_raw[i], s.jac_scaled[i]);
    printf("\n");
    return 0;
}

static int show_cost(void)
{
    article_cost c;
    if (article_cost_run(&c)) return article_fail();
    printf("== 4. what the quadratic term costs\n");
    printf("%dx%d in %dx%d patches: %d tokens, %zu score entries per head\n", c.image, c.image,
           c.vit_patch, c.vit_patch, c.vit_tokens, c.vit_entries);
    printf("one token per pixel: %" PRId64 " tokens, %" PRIu64 " entries (%.2f billion), "
           "%" PRIu64 " bytes in float32 (%.1f GB), %.0f times the patch version\n",
           c.pixel_tokens, c.pixel_entries, (double)c.pixel_entries / 1e9, c.pixel_bytes,
           (double)c.pixel_bytes / 1e9, c.pixel_vs_patch);
    printf("Swin, %dx%d patches: %d tokens; entries global %zu, %dx%d windows %zu "
           "(%.0f-fold fewer), shifted windows %zu\n",
           c.swin_patch, c.swin_patch, c.swin_tokens, c.swin_global, c.swin_window,
           c.swin_window, c.swin_windowed, c.swin_ratio, c.swin_shifted);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: vit_article [--seed N] squares|heads|scaling|cost|all\n"
               "Reruns the self-attention article's examples and prints their figures:\n"
               "  squares  attention map of patch (0,1) on an image of two squares\n"
               "  heads    four heads, permutation equivariance, a four-window mask\n"
               "  scaling  raw vs 1/sqrt(d_k)-scaled scores on 300 digit images\n"
               "  cost     score-matrix sizes for ViT, pixels and Swin windows\n"
               "  all      all four\n"
               "--seed N   seed of the random numbers (default 0); the article's own\n"
               "           numbers came from NumPy, so expect the pattern, not the digits.\n"
               "The digits are read from $VIT_DIGITS or the shipped data/digits.csv.gz.\n");
}

int main(int argc, char **argv)
{
    cli_ignore_file_size_signal();
    int seed = 0;
    const char *what = NULL;
    static const cli_flag flags[] = {{"--seed", 1}, {"--help", 0}, {"--version", 0}, {NULL, 0}};
    if (!cli_normalize(prog, &argc, &argv, flags, 0))
        return 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("vit_article %s (%s)\n", vit_version(), VIT_REAL_NAME);
            return 0;
        } else if (strcmp(argv[i], "--seed") == 0) {
            if (!cli_int(prog, "--seed", i + 1 < argc ? argv[i + 1] : NULL, 0, 2147483647, &seed))
                return 2;
            i++;
        } else if (!what && argv[i][0] != '-') {
            what = argv[i];
        } else {
            fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", prog, argv[i]);
            return 2;
        }
    }
    if (!what) {
        usage(stderr);
        return 2;
    }
    int all = strcmp(what, "all") == 0, known = all, rc = 0;
    if (all || strcmp(what, "squares") == 0) known = 1, rc |= show_squares((uint64_t)seed);
    if (all || strcmp(what, "heads") == 0) known = 1, rc |= show_heads((uint64_t)seed);
    if (all || strcmp(what, "scaling") == 0) known = 1, rc |= show_scaling((uint64_t)seed);
    if (all || strcmp(what, "cost") == 0) known = 1, rc |= show_cost();
    if (!known) {
        fprintf(stderr, "%s: unknown experiment '%s' (squares, heads, scaling, cost or all)\n",
                prog, what);
        return 2;
    }
    return rc;
}
