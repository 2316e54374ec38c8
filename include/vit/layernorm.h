/*
 * vit/layernorm.h - layer normalization over the last dimension.
 *
 * y = (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps), with the
 * biased variance (divide by d) as in PyTorch's nn.LayerNorm.
 * See core.h for ownership, accumulation and error rules.
 */
#ifndef VIT_LAYERNORM_H
#define VIT_LAYERNORM_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* PyTorch's default epsilon. */
#define VIT_LAYERNORM_EPS 1e-5

/* x, y: [n, d], row-major, each of the n rows (tokens of every item: pass
 * n = B*T for [B, T, d]) normalised on its own; gamma, beta: [d]; mean,
 * rstd: [n] (overwritten; keep them for the backward).  y is overwritten;
 * y may alias x (then no backward is possible, see below).  eps > 0.
 * The caller owns every buffer.
 * Returns VIT_OK, or VIT_EINVAL for a NULL buffer, n or d < 1, or eps not
 * positive and finite.  Reentrant (core.h). */
int vit_layernorm_forward(vit_real *y, vit_real *mean, vit_real *rstd,
                          const vit_real *x, const vit_real *gamma,
                          const vit_real *beta, int n, int d, vit_real eps);

/* Accumulates (+=) dx[n, d], dgamma[d], dbeta[d] (each may be NULL) from
 * dy[n, d], the forward input x and the saved mean and rstd.  x must be the
 * original input (so the forward must not have been run in place when a
 * backward is wanted).  dx must not alias dy or x.  The caller owns every
 * buffer.
 * Returns VIT_OK, or VIT_EINVAL for a NULL dy, x, mean, rstd or gamma, or n
 * or d < 1.  Reentrant (core.h). */
int vit_layernorm_backward(vit_real *dx, vit_real *dgamma, vit_real *dbeta,
                           const vit_real *dy, const vit_real *x,
                           const vit_real *mean, const vit_real *rstd,
                           const vit_real *gamma, int n, int d);

VIT_END_DECLS

#endif
