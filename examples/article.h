/*
 * examples/article.h - the worked examples of the self-attention article the
 * project started from, rebuilt on the public vit API.  Each experiment is a
 * function that fills a struct with its figures; vit_article prints them and
 * tests/test_article.c checks their pattern (not the article's exact digits,
 * which came from NumPy's random numbers, not ours).
 *
 * The file compiles against either build of the library (vit_real float in
 * the tool, double in the test); every figure is returned as a double.
 *
 * Errors: each *_run function returns VIT_OK or a negative VIT_E* code
 * (VIT_EINVAL for a NULL or inconsistent argument, VIT_ENOMEM, or the code
 * of the library call that failed); article_error() then gives a one-line
 * message naming the function.  Not thread-safe (one static message).
 */
#ifndef VIT_TOOLS_ARTICLE_H
#define VIT_TOOLS_ARTICLE_H

#include <stddef.h>
#include <stdint.h>

#include "vit/core.h"
#include "vit/data.h"
#include "vit/rng.h"

/* The two-squares image: 32 x 32 pixels, squares at rows/cols [2, 14) and
 * [18, 30), cut into an 8 x 8 grid of 4 x 4 patches. */
#define ARTICLE_IMAGE 32
#define ARTICLE_PATCH 4
#define ARTICLE_GRID 8
#define ARTICLE_TOKENS 64 /* ARTICLE_GRID^2 */
#define ARTICLE_DIM 16    /* ARTICLE_PATCH^2 pixels per token */

/* Message of the last failing article_* call ("" if none). */
const char *article_error(void);

/* r [n, n] (overwritten): a random orthogonal matrix, the Q factor of an
 * n x n matrix of standard normals by modified Gram-Schmidt on its columns.
 * Errors: VIT_EINVAL (NULL, n < 1, or a column that became degenerate). */
int article_orthogonal(vit_rng *rng, int n, vit_real *r);

/* img [32, 32] (overwritten): the two squares (1 inside, 0 outside) plus
 * noise * N(0, 1) per pixel, drawn row by row from rng. */
void article_squares_image(vit_rng *rng, double noise, vit_real *img);

/* x [64, 16] (overwritten) from img [32, 32]: token t = row * 8 + col of
 * the patch grid, its 16 pixels row-major within the patch, minus their
 * mean (so a flat patch becomes zero and only edges remain). */
void article_patches(const vit_real *img, vit_real *x);

/* ---- 1. Attention over the patches of two squares ---------------------- */

/* One head with W_Q = W_K = 2R (R random orthogonal 16 x 16) and
 * W_V = N(0,1)/4: the scaled scores 4 x R R^T x^T / sqrt(16) are the
 * patches' own dot products. */
typedef struct article_squares {
    int query;                            /* token of patch (0, 1): 1 */
    double tokens[ARTICLE_TOKENS * ARTICLE_DIM]; /* x [64, 16] the layer saw */
    double map[ARTICLE_TOKENS];           /* attention of the query over the grid */
    int top[6];                           /* tokens of the 6 largest weights, largest first */
    double far_edge;                      /* weight on (4,5) + (4,6): the far square's top edge */
    double near_edge;                     /* weight on (0,1) + (0,2): the query's own edge */
} article_squares;

/* Seeds a generator with seed, draws the image (noise as given; the article
 * uses 0.05), then R and W_V, and runs vit_mha_forward with one head. */
int article_squares_run(uint64_t seed, double noise, article_squares *out);

/* ---- 2. Four heads, a shuffle and a window mask ------------------------ */

typedef struct article_heads {
    int out_rows, out_cols;               /* y [64, 16] */
    int map_heads, map_rows, map_cols;    /* maps [4, 64, 64] */
    size_t params;                        /* vit_mha_param_count, no biases: 4 * 16^2 */
    double perm_max_diff;                 /* max |f(X[perm]) - f(X)[perm]| */
    double outside_global;                /* query (0,1), no mask: mass outside its window, all heads */
    double outside_window;                /* the same with the window mask */
    double outside_max;                   /* largest masked weight outside any query's window */
    double row_sum_err;                   /* max |row sum - 1| of the masked maps */
    size_t entries_global;                /* score entries per head: 64^2 */
    size_t entries_window;                /* allowed by the four-window mask */
} article_heads;

/* The same image and tokens as article_squares_run with the same seed, then
 * W_Q, W_K, W_V, W_O = N(0,1)/4 and a random permutation from the same
 * generator; four heads of width 4; windows of 4 x 4 patches. */
int article_heads_run(uint64_t seed, double noise, article_heads *out);

/* ---- 3. Why divide by sqrt(d_k) ---------------------------------------- */

#define ARTICLE_NDK 5 /* d_k = 4, 16, 64, 256, 1024 */

typedef struct article_scaling {
    int images;                           /* digit images used */
    int tokens;                           /* 2 x 2 patches per image: 16 */
    int d_k[ARTICLE_NDK];
    double logit_std[ARTICLE_NDK];        /* std of all raw scores q.k */
    double max_raw[ARTICLE_NDK];          /* mean largest weight, softmax(q.k) */
    double max_scaled[ARTICLE_NDK];       /* the same for softmax(q.k / sqrt(d_k)) */
    double jac_raw[ARTICLE_NDK];          /* mean ||diag(p) - p p^T||_F per row */
    double jac_scaled[ARTICLE_NDK];
} article_scaling;

/* digits: 8 x 8 x 1 images as vit_data_load_digits gives them; uses the
 * first n_images.  Pixels are put back on the file's 0..16 scale and
 * standardized per pixel position of the 2 x 2 patch (mean and population
 * std over all images and patches).  For each d_k and image, fresh
 * W_Q, W_K [4, d_k] = N(0,1)/2; the softmax is vit_sdpa_forward's with
 * scale 1 (raw) and 1/sqrt(d_k) (scaled).
 * Errors: VIT_EINVAL (NULL, not 8 x 8 x 1, n_images out of 1..count). */
int article_scaling_run(const vit_dataset *digits, int n_images, uint64_t seed,
                        article_scaling *out);

/* ---- 4. What the quadratic term costs ---------------------------------- */

typedef struct article_cost {
    int image;                            /* 224 */
    int vit_patch, vit_tokens;            /* 16, 196 */
    size_t vit_entries;                   /* per head, counted on a one-window mask */
    int64_t pixel_tokens;                 /* one token per pixel: 224^2 */
    uint64_t pixel_entries;               /* pixel_tokens^2 (the mask would not fit) */
    uint64_t pixel_bytes;                 /* pixel_entries * 4: one float32 score matrix */
    double pixel_vs_patch;                /* pixel_entries / vit_entries */
    int swin_patch, swin_tokens, swin_window; /* 4, 56^2, 7 */
    size_t swin_global;                   /* counted on a one-window mask */
    size_t swin_windowed;                 /* vit_mask_window(56, 56, 7, 7, 0, 0) */
    size_t swin_shifted;                  /* vit_mask_window(56, 56, 7, 7, 3, 3) */
    double swin_ratio;                    /* swin_global / swin_windowed */
} article_cost;

/* Fills out; the counts come from vit_mask_window + vit_mask_count (about
 * 10 MB of masks for the 56 x 56 grid). */
int article_cost_run(article_cost *out);

#endif
