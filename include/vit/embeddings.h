/*
 * vit/embeddings.h - from images to tokens: patch embedding, class-token
 * prepend, learned position embeddings.
 *
 * Images are [B, H, W, C] (channels last, row-major, top row first).  A P x P
 * patch is flattened in (row, column, channel) order, so patch vectors have
 * length P*P*C and patches are numbered row by row over the (H/P) x (W/P)
 * grid.  The patch embedding is then a linear map, the same as a stride-P
 * convolution: PyTorch's Conv2d weight w[D, C, P, P] corresponds to our
 * W[(py*P + px)*C + c, D] = w[D, c, py, px].
 * See core.h for ownership, accumulation and error rules.
 */
#ifndef VIT_EMBEDDINGS_H
#define VIT_EMBEDDINGS_H

#include "vit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Shape of a patch embedding. H and W must be multiples of P. */
typedef struct vit_patch_shape {
    int batch;       /* B */
    int height;      /* H */
    int width;       /* W */
    int channels;    /* C */
    int patch;       /* P */
    int dim;         /* D, the embedding width */
} vit_patch_shape;

/* Number of patches per image, (H/P)*(W/P), or 0 for an invalid shape. */
int vit_patch_count(const vit_patch_shape *s);

/* cols: [B*N, P*P*C] (written: the im2col matrix, saved for the backward);
 * y: [B, N, D] (overwritten); img: [B, H, W, C]; W: [P*P*C, D]; b: [D] or
 * NULL.  N = vit_patch_count(s). */
int vit_patch_embed_forward(const vit_patch_shape *s, vit_real *y, vit_real *cols,
                            const vit_real *img, const vit_real *W, const vit_real *b);

/* Accumulates dW, db and (when dimg is not NULL) dimg[B, H, W, C] from
 * dy[B, N, D], using the saved cols. */
int vit_patch_embed_backward(const vit_patch_shape *s, vit_real *dimg, vit_real *dW,
                             vit_real *db, const vit_real *dy, const vit_real *cols,
                             const vit_real *W);

/* y[B, N+1, D]: row 0 of each item is cls[D], rows 1..N are x[B, N, D].
 * y is overwritten and must not alias x. */
int vit_cls_prepend_forward(vit_real *y, const vit_real *x, const vit_real *cls,
                            int batch, int n, int d);

/* dx[B, N, D] += dy rows 1..N;  dcls[D] += sum over the batch of dy row 0. */
int vit_cls_prepend_backward(vit_real *dx, vit_real *dcls, const vit_real *dy,
                             int batch, int n, int d);

/* y[B, T, D] = x[B, T, D] + pos[T, D] (y may alias x). */
int vit_pos_add_forward(vit_real *y, const vit_real *x, const vit_real *pos,
                        int batch, int t, int d);

/* dx += dy; dpos[T, D] += sum over the batch of dy. */
int vit_pos_add_backward(vit_real *dx, vit_real *dpos, const vit_real *dy,
                         int batch, int t, int d);

#ifdef __cplusplus
}
#endif

#endif
