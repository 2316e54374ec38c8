/*
 * vit/embeddings.h - from images to tokens: patch embedding, class-token
 * prepend, learned position embeddings; and from integer ids to tokens: an
 * embedding table lookup.
 *
 * Images are [B, H, W, C] (channels last, row-major, top row first).  A P x P
 * patch is flattened in (row, column, channel) order, so patch vectors have
 * length P*P*C and patches are numbered row by row over the (H/P) x (W/P)
 * grid.  The patch embedding is then a linear map, the same as a stride-P
 * convolution: PyTorch's Conv2d weight w[D, C, P, P] corresponds to our
 * W[(py*P + px)*C + c, D] = w[D, c, py, px].
 *
 * OVERLAPPING PATCHES.  With a stride S < P and a zero padding Z, patch
 * (gy, gx) covers image rows gy*S - Z .. gy*S - Z + P - 1 and columns
 * likewise, pixels outside the image reading 0: PyTorch's
 * Conv2d(C, D, kernel_size=P, stride=S, padding=Z), with the same weight
 * correspondence.  The grid is (H + 2Z - P)/S + 1 by (W + 2Z - P)/S + 1;
 * e.g. P 4, S 2, Z 1 on 8 x 8 gives the 4 x 4 grid of P 2 with 4x the
 * pixels per token.  S = P, Z = 0 (the default) is the plain case above.
 * See core.h for ownership, accumulation and error rules: every buffer here
 * belongs to the caller and is not kept; forwards overwrite, backwards
 * accumulate (+=) and skip NULL gradients; all functions are reentrant.
 */
#ifndef VIT_EMBEDDINGS_H
#define VIT_EMBEDDINGS_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* Shape of a patch embedding.  The patches must tile the padded image
 * exactly: (H + 2Z - P) and (W + 2Z - P) are multiples of S (for S = P,
 * Z = 0: H and W are multiples of P). */
typedef struct vit_patch_shape {
    int batch;       /* B */
    int height;      /* H */
    int width;       /* W */
    int channels;    /* C */
    int patch;       /* P, the kernel side */
    int dim;         /* D, the embedding width */
    int stride;      /* S, 1 .. P; 0 means P (no overlap) */
    int pad;         /* Z, zero padding on every side, 0 .. P - 1 */
} vit_patch_shape;

/* Number of patches per image, grid_h * grid_w, or 0 for an invalid shape
 * (NULL, a size < 1, a stride outside 1..P (larger would skip pixels), a
 * padding outside 0..P-1, a padded image smaller than a patch or one the
 * stride does not tile exactly; vit_last_error says which). */
int vit_patch_count(const vit_patch_shape *s);

/* The grid: *grid_h = (H + 2Z - P)/S + 1 patch rows, *grid_w likewise
 * (both overwritten; neither may be NULL).  Returns VIT_OK, or VIT_EINVAL
 * as vit_patch_count explains (then both are 0). */
int vit_patch_grid(const vit_patch_shape *s, int *grid_h, int *grid_w);

/* cols: [B*N, P*P*C] (overwritten: the im2col matrix, saved for the
 * backward; row b*N + n is patch n of image b); y: [B, N, D] (overwritten);
 * img: [B, H, W, C]; W: [P*P*C, D]; b: [D] or NULL.  N = vit_patch_count(s).
 * y and cols must not overlap img.
 * Pixels of the padding read 0 in cols.
 * Returns VIT_OK, or VIT_EINVAL for a NULL s, y, cols, img or W, a shape
 * vit_patch_count refuses, or sizes that overflow. */
int vit_patch_embed_forward(const vit_patch_shape *s, vit_real *y, vit_real *cols,
                            const vit_real *img, const vit_real *W, const vit_real *b);

/* Accumulates (+=) dW[P*P*C, D], db[D] and dimg[B, H, W, C] from
 * dy[B, N, D]; any of the three may be NULL.  cols (the forward's) is read
 * only for dW, W only for dimg, so either may be NULL when that gradient is
 * not wanted.  With overlapping patches a pixel receives the sum over every
 * patch that covers it (col2im).  When dimg is wanted it allocates and
 * frees a [B*N, P*P*C] scratch.
 * Returns VIT_OK, VIT_EINVAL for a bad shape (as the forward), a NULL
 * dy, or a NULL cols or W that is needed; VIT_ENOMEM if that scratch
 * cannot be allocated. */
int vit_patch_embed_backward(const vit_patch_shape *s, vit_real *dimg, vit_real *dW,
                             vit_real *db, const vit_real *dy, const vit_real *cols,
                             const vit_real *W);

/* y[B, N+1, D]: row 0 of each item is cls[D], rows 1..N are x[B, N, D].
 * y is overwritten and must not alias x.
 * Returns VIT_OK, or VIT_EINVAL for a NULL y, x or cls, y == x, or a size
 * < 1. */
int vit_cls_prepend_forward(vit_real *y, const vit_real *x, const vit_real *cls,
                            int batch, int n, int d);

/* From dy[B, N+1, D]: dx[B, N, D] += dy rows 1..N; dcls[D] += sum over the
 * batch of dy row 0.  Accumulated; either may be NULL.
 * Returns VIT_OK, or VIT_EINVAL for a NULL dy or a size < 1. */
int vit_cls_prepend_backward(vit_real *dx, vit_real *dcls, const vit_real *dy,
                             int batch, int n, int d);

/* y[B, T, D] = x[B, T, D] + pos[T, D], the same pos for every item of the
 * batch.  y is overwritten and may alias x.
 * Returns VIT_OK, or VIT_EINVAL for a NULL y, x or pos or a size < 1. */
int vit_pos_add_forward(vit_real *y, const vit_real *x, const vit_real *pos,
                        int batch, int t, int d);

/* From dy[B, T, D]: dx[B, T, D] += dy; dpos[T, D] += sum over the batch of
 * dy.  Accumulated; either may be NULL.
 * Returns VIT_OK, or VIT_EINVAL for a NULL dy or a size < 1. */
int vit_pos_add_backward(vit_real *dx, vit_real *dpos, const vit_real *dy,
                         int batch, int t, int d);

/* Embedding lookup: y[n, dim], row i = table[ids[i]], a copy of row
 * ids[i] of table[vocab, dim] (overwritten).  ids[n] must each be in
 * 0 .. vocab-1; they may repeat.  y must not overlap table.  Runs on the
 * calling thread.
 * Returns VIT_OK; VIT_EINVAL for a NULL y, table or ids, n = 0, vocab or dim
 * < 1, or an id out of range (the message names its position and value,
 * e.g. "ids[3] = 7"; every id is checked before y is written);
 * VIT_ENOMEM when n*dim overflows size_t. */
int vit_embedding_forward(vit_real *y, const vit_real *table, const int *ids, size_t n,
                          int vocab, int dim);

/* Scatter-add: dtable[ids[i]] += dy[i] for every i of dy[n, dim] into
 * dtable[vocab, dim], accumulated, so a row whose id appears k times
 * receives the sum of its k gradient rows and rows of ids that do not
 * appear are left alone.  dtable may be NULL (not wanted: nothing is
 * written, the arguments are still checked) and must not overlap dy.
 * Runs on the calling thread (repeated ids would race across threads).
 * Returns VIT_OK; VIT_EINVAL for a NULL dy or ids, n = 0, vocab or dim < 1,
 * or an id out of range, named as in the forward (every id is checked
 * before dtable is touched); VIT_ENOMEM when n*dim overflows size_t. */
int vit_embedding_backward(vit_real *dtable, const vit_real *dy, const int *ids, size_t n,
                           int vocab, int dim);

VIT_END_DECLS

#endif
