/* Internal: variants of the elementwise kernels for the tape, which writes
 * a gradient buffer it has just lent without zeroing it first. */
#ifndef VIT_SRC_ACTIVATIONS_INTERNAL_H
#define VIT_SRC_ACTIVATIONS_INTERNAL_H

#include <stdint.h>

#include "vit/core.h"

/* dx[n] = dy * GELU'(x), OVERWRITTEN (vit_gelu_backward accumulates);
 * dx may be dy, for a gradient computed in place.  No argument checks. */
void vit_gelu_backward_set(vit_real *dx, const vit_real *dy, const vit_real *x, size_t n);

/* The MLP's first layer's epilogue, after u = x W (beta 0): one pass over
 * u [n, d] that adds the bias b [d] (NULL: none) and writes y = GELU(u + b)
 * [n, d] and, when y is not u, GELU'(u + b) over u: the derivative is all
 * the backward needs of the pre-activation, and computing it here shares
 * the exp and the tail ratio with GELU itself, where the backward would
 * compute them again.  y may be u (no-grad: nothing is kept).  No argument
 * checks. */
void vit_bias_gelu_forward(vit_real *y, vit_real *u, const vit_real *b, int n, int d);

/* Its backward, one pass: du = dy * g [n, d] with g the derivative the
 * forward left in u, OVERWRITTEN (du may be dy, computed in place), and
 * db [d] += the column sums of du (db NULL: none), each column summed in
 * row order whatever the thread count.  No argument checks. */
void vit_bias_gelu_backward(vit_real *du, vit_real *db, const vit_real *dy, const vit_real *g,
                            int n, int d);

#ifndef VIT_DOUBLE
/* vit_bias_gelu_forward keeping GELU'(u + b) in bf16 (g16 [n, d]) instead
 * of over u, which is only read, and with y16 not NULL also y rounded to
 * bf16 there: the same bits as rounding them afterwards
 * (vit_bf16_from_floats), in the same pass over the rows. */
void vit_bias_gelu_forward_bf16(float *y, const float *u, const float *b, int n, int d,
                                uint16_t *g16, uint16_t *y16);

/* The backward with g kept in bf16 (mixed precision, src/tape/tape_ops_linear.c):
 * each g converted to float (exact) as it is read. */
void vit_bias_gelu_backward_bf16(float *du, float *db, const float *dy, const uint16_t *g, int n,
                                 int d);

/* The MLP's first epilogue when only the pre-activation is kept (mixed
 * precision, src/tape/tape_ops_mlp.c): over u [n, d] = x W, v16 = bf16(u + b)
 * (b [d] or NULL) and h16 = bf16(GELU(v)) of v16's value, so that the
 * backward, which has only v16, makes the same h16 bits again.  u is only
 * read.  No argument checks. */
void vit_bias_gelu_forward_v16(const float *u, const float *b, int n, int d, uint16_t *v16,
                               uint16_t *h16);

/* Its backward over dh [n, d] (the gradient of h): h16 = the forward's
 * bf16(GELU(v)) again, dh = dh bf16(GELU'(v)) OVERWRITTEN in place (the
 * gradient of v), also rounded to bf16 into du16 (NULL: not), and db [d]
 * += its column sums (db NULL: none), each column summed in row order
 * whatever the thread count.  No argument checks. */
void vit_gelu_backward_v16(float *dh, float *db, const uint16_t *v16, uint16_t *h16,
                           uint16_t *du16, int n, int d);
#endif

#endif
