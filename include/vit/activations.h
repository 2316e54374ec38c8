/*
 * vit/activations.h - elementwise and row-wise pieces: GELU, residual add,
 * row softmax.  See core.h for ownership, accumulation and error rules.
 */
#ifndef VIT_ACTIVATIONS_H
#define VIT_ACTIVATIONS_H

#include "vit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GELU, exact erf form (PyTorch's default): y = x/2 (1 + erf(x/sqrt 2)).
 * x, y: [n]; y is overwritten and may alias x only when no backward is
 * needed (the backward reads x). */
int vit_gelu_forward(vit_real *y, const vit_real *x, size_t n);

/* dx[n] += dy * GELU'(x). */
int vit_gelu_backward(vit_real *dx, const vit_real *dy, const vit_real *x, size_t n);

/* Residual: y[n] = a[n] + b[n] (y may alias a or b). */
int vit_residual_forward(vit_real *y, const vit_real *a, const vit_real *b, size_t n);

/* da[n] += dy, db[n] += dy (either may be NULL). */
int vit_residual_backward(vit_real *da, vit_real *db, const vit_real *dy, size_t n);

/* Row softmax, max-subtracted for range: y[r, c] = exp(x - max_r) / sum.
 * x, y: [rows, cols]; y may alias x.  Entries equal to -INFINITY get weight
 * exactly 0; a row whose entries are all -INFINITY becomes all zeros (not
 * NaN).  Any NaN or +INFINITY in x gives VIT_ENUM. */
int vit_softmax_forward(vit_real *y, const vit_real *x, int rows, int cols);

/* Through the softmax Jacobian diag(p) - p p^T in O(cols) per row:
 * dx += y * (dy - sum_c(dy * y)).  y is the forward output. */
int vit_softmax_backward(vit_real *dx, const vit_real *dy, const vit_real *y,
                         int rows, int cols);

#ifdef __cplusplus
}
#endif

#endif
