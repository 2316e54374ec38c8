/*
 * vit/linear.h - fully connected layer, y = x W + b.
 *
 * W is stored [in, out] (row-major), the orientation of the maths; PyTorch's
 * nn.Linear stores weight as [out, in] and computes x W^T, so our W equals
 * its weight.T.  See core.h for ownership, accumulation and error rules.
 */
#ifndef VIT_LINEAR_H
#define VIT_LINEAR_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* y[n, out] = x[n, in] W[in, out] + b[out].  b may be NULL (no bias).
 * Row-major; the n rows are the batch (for tokens [B, T, in] pass n = B*T).
 * All buffers belong to the caller and are not kept after the call.
 * y is overwritten and must not alias x.
 * Returns VIT_OK, or VIT_EINVAL (message naming the argument) for a NULL
 * x, W or y, y == x, or n, in or out < 1.  Reentrant (core.h). */
int vit_linear_forward(vit_real *y, const vit_real *x, const vit_real *W,
                       const vit_real *b, int n, int in, int out);

/* Given dy[n, out], ACCUMULATES (adds to what the buffers hold)
 *   dx[n, in]   += dy W^T      (skipped when dx is NULL)
 *   dW[in, out] += x^T dy      (skipped when dW is NULL)
 *   db[out]     += sum_n dy    (skipped when db is NULL)
 * using BLAS transposes, without copies.  x and W are the forward inputs;
 * x may be NULL when dW is, and W when dx is.  The caller owns every buffer;
 * the gradient buffers must not overlap dy, x or W.
 * Returns VIT_OK, or VIT_EINVAL for a NULL dy, a NULL W with dx or x with
 * dW, or a size < 1.  Reentrant (core.h). */
int vit_linear_backward(vit_real *dx, vit_real *dW, vit_real *db,
                        const vit_real *dy, const vit_real *x, const vit_real *W,
                        int n, int in, int out);

VIT_END_DECLS

#endif
