/*
 * vit/local_conv.h - a 3x3 depthwise convolution of the patch tokens over
 * their grid, added to them: locality for a transformer's residual stream.
 *
 *     y[b, 0]     = x[b, 0]                          (the class token passes)
 *     y[b, 1 + p] = x[b, 1 + p] + bias
 *                   + sum over the 3x3 neighbours q of p on the grid of
 *                     w[k(q - p)] * x[b, 1 + q]          (per channel)
 *
 * x and y are [B, T, C] with T = 1 + GH * GW: token 0 (a class token) and
 * then the patch tokens of a GH x GW grid, row by row (as vit_op_patch_embed
 * numbers them).  w is [9, C]: tap k = (dy + 1) * 3 + (dx + 1) for the
 * neighbour dy rows down and dx columns right (dy, dx in -1, 0, 1); a
 * neighbour outside the grid reads 0 (zero padding).  bias is [C] or NULL.
 * It is the token mixer of CMT's "local perception unit" (Guo et al. 2022):
 * each block of the ViT with vit_config.local_conv = 1 starts with it, so
 * that every layer, not only the patch embedding, sees the grid's
 * neighbourhoods.  In PyTorch terms, on the patch tokens laid out as
 * [B, C, GH, GW]: x + Conv2d(C, C, 3, padding=1, groups=C)(x), whose weight
 * [C, 1, 3, 3] is ours transposed: weight[c, 0, ky, kx] = w[ky * 3 + kx, c].
 *
 * Costs 9 C multiply-adds a patch token.  See core.h for ownership,
 * accumulation and error rules: every buffer belongs to the caller and is
 * not kept; the forward overwrites, the backward accumulates (+=) and skips
 * NULL gradients; both are reentrant.
 */
#ifndef VIT_LOCAL_CONV_H
#define VIT_LOCAL_CONV_H

#include "vit/core.h"
#include "vit/tape.h"

VIT_BEGIN_DECLS

/* y [B, 1 + GH*GW, C] (overwritten; must not overlap x) = the sum above of
 * x [B, 1 + GH*GW, C], w [9, C] and bias [C] (or NULL: none).  VIT_OK, or
 * VIT_EINVAL for a NULL buffer or a size below 1. */
int vit_local_conv_forward(vit_real *y, const vit_real *x, const vit_real *w,
                           const vit_real *bias, int B, int GH, int GW, int C);

/* Given dy [B, 1 + GH*GW, C] and the forward's x and w: dx += dy + the
 * convolution's transpose applied to dy (its patch tokens), dw [9, C] +=
 * its products with x, dbias [C] += dy summed over the batch and the patch
 * tokens.  Any gradient may be NULL (skipped); none may overlap another
 * buffer.  VIT_OK or VIT_EINVAL. */
int vit_local_conv_backward(vit_real *dx, vit_real *dw, vit_real *dbias, const vit_real *dy,
                            const vit_real *x, const vit_real *w, int B, int GH, int GW, int C);

/* The same on the tape: x [B, 1 + GH*GW, C], w [9, C], bias [C] (or NULL)
 * -> [B, 1 + GH*GW, C], the gradients of all three (those that require one)
 * accumulated by the backward.  NULL with the tape's error set (VIT_EINVAL)
 * when x is not 3-D with 1 + GH*GW tokens, or w or bias do not have C*9 or
 * C values. */
vit_tensor *vit_op_local_conv(vit_tape *tape, vit_tensor *x, vit_tensor *w, vit_tensor *bias,
                              int GH, int GW);

VIT_END_DECLS

#endif
