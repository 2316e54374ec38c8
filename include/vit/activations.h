/*
 * vit/activations.h - elementwise and row-wise pieces: GELU, residual add,
 * elementwise multiply, scaling by a constant, row softmax.  See core.h for
 * ownership, accumulation and error rules.
 *
 * Elementwise functions take a length n: any row-major tensor ([B, T, D]
 * gives n = B*T*D) is treated as a flat array, so the batch layout does not
 * matter to them.  Every buffer belongs to the caller and is not kept after
 * the call.  All functions here are reentrant (core.h).
 */
#ifndef VIT_ACTIVATIONS_H
#define VIT_ACTIVATIONS_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* GELU, exact erf form (PyTorch's default): y = x/2 (1 + erf(x/sqrt 2)).
 * x, y: [n]; y is overwritten and may alias x only when no backward is
 * needed (the backward reads x).
 * Returns VIT_OK, or VIT_EINVAL for a NULL x or y or n = 0. */
int vit_gelu_forward(vit_real *y, const vit_real *x, size_t n);

/* dx[n] += dy * GELU'(x), accumulated; x is the forward input.  dx is
 * required here (not optional) and must not alias x.
 * Returns VIT_OK, or VIT_EINVAL for a NULL dx, dy or x or n = 0. */
int vit_gelu_backward(vit_real *dx, const vit_real *dy, const vit_real *x, size_t n);

/* Residual: y[n] = a[n] + b[n], overwritten (y may alias a or b).
 * Returns VIT_OK, or VIT_EINVAL for a NULL y, a or b or n = 0. */
int vit_residual_forward(vit_real *y, const vit_real *a, const vit_real *b, size_t n);

/* da[n] += dy, db[n] += dy, accumulated (either may be NULL; they must be
 * distinct buffers, or the same buffer receives dy twice).
 * Returns VIT_OK, or VIT_EINVAL for a NULL dy or n = 0. */
int vit_residual_backward(vit_real *da, vit_real *db, const vit_real *dy, size_t n);

/* Elementwise product: y[n] = a[n] * b[n], overwritten; y may alias a or b
 * (or both).  Split across the library's threads when n is large.
 * Returns VIT_OK, or VIT_EINVAL for a NULL y, a or b or n = 0. */
int vit_mul_forward(vit_real *y, const vit_real *a, const vit_real *b, size_t n);

/* da[n] += dy * b, db[n] += dy * a, accumulated; a and b are the forward's
 * inputs (so the forward must not have overwritten them through y if a
 * backward follows).  Either gradient may be NULL.  da == db is allowed
 * (a tensor multiplied by itself, a == b): that buffer receives both terms,
 * 2 a dy.  Otherwise da and db must not overlap each other, and neither
 * may overlap dy, a or b.  Runs on the calling thread.
 * Returns VIT_OK, or VIT_EINVAL for a NULL dy, a or b or n = 0. */
int vit_mul_backward(vit_real *da, vit_real *db, const vit_real *dy, const vit_real *a,
                     const vit_real *b, size_t n);

/* Scaling by a constant: y[n] = s * x[n], overwritten; y may alias x.
 * Split across the library's threads when n is large.
 * Returns VIT_OK, or VIT_EINVAL for a NULL y or x, n = 0, or a non-finite s
 * (NaN or infinity; nothing is written). */
int vit_scale_forward(vit_real *y, const vit_real *x, vit_real s, size_t n);

/* dx[n] += s * dy, accumulated; s is the forward's constant (it gets no
 * gradient).  dx may be NULL (not wanted: nothing is written, the arguments
 * are still checked) and must not overlap dy.  Runs on the calling thread.
 * Returns VIT_OK, or VIT_EINVAL for a NULL dy, n = 0 or a non-finite s. */
int vit_scale_backward(vit_real *dx, const vit_real *dy, vit_real s, size_t n);

/* Row softmax, max-subtracted for range: y[r, c] = exp(x - max_r) / sum.
 * x, y: [rows, cols], row-major, each row normalised on its own (leading
 * dimensions such as batch and heads flattened into rows); y is overwritten
 * and may alias x.  Entries equal to -INFINITY get weight exactly 0; a row
 * whose entries are all -INFINITY becomes all zeros (not NaN).
 * Returns VIT_OK; VIT_EINVAL for a NULL x or y or rows or cols < 1;
 * VIT_ENUM, naming the entry, for any NaN or +INFINITY in x (rows before it
 * are already written). */
int vit_softmax_forward(vit_real *y, const vit_real *x, int rows, int cols);

/* Through the softmax Jacobian diag(p) - p p^T in O(cols) per row:
 * dx[rows, cols] += y * (dy - sum_c(dy * y)), accumulated.  y is the
 * forward output; an all-zero (fully masked) row passes zero gradient.
 * dx is required and must not alias dy or y.
 * Returns VIT_OK, or VIT_EINVAL for a NULL dx, dy or y or rows or cols < 1. */
int vit_softmax_backward(vit_real *dx, const vit_real *dy, const vit_real *y,
                         int rows, int cols);

VIT_END_DECLS

#endif
