/*
 * vit/pool.h - pooling over the tokens of a sequence: the mean of each
 * item's real tokens, skipping padding, forward and backward.
 *
 * Layouts (row-major, batch first): x [B, T, D] (T tokens of width D per
 * item), y [B, D].  The padding mask follows the key_valid convention of
 * vit_attn_mask in vit/attention.h, so one mask serves both:
 * `key_valid[b*T + t] != 0` means token t of item b is a real token, 0 marks
 * padding; a NULL key_valid means every token is real.  An item with no
 * real token has no mean: its output is all zeros (not NaN) and it passes no
 * gradient, as a fully masked attention row does.
 *
 * See core.h for ownership, accumulation and error rules: every buffer
 * belongs to the caller and is not kept after the call; forwards overwrite,
 * backwards accumulate (+=) and skip NULL gradients.  All functions are
 * reentrant and run on the calling thread.
 */
#ifndef VIT_POOL_H
#define VIT_POOL_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* y[B, D] = mean over the real tokens t of item b of x[b, t, :]
 * (overwritten); 0 for an item with none.  count[B], if not NULL, receives
 * (overwritten) the number of real tokens of each item as a vit_real, 0 for
 * an all-padding item.  key_valid [B, T] or NULL (all real).  y and count
 * must not overlap x or each other.
 * Returns VIT_OK; VIT_EINVAL for a NULL y or x or B, T or D < 1;
 * VIT_ENOMEM when B*T*D overflows size_t. */
int vit_masked_mean_forward(vit_real *y, vit_real *count, const vit_real *x,
                            const unsigned char *key_valid, int B, int T, int D);

/* dx[b, t, :] += dy[b, :] / n_b for every real token t of item b, n_b the
 * item's number of real tokens; padding tokens, and every token of an
 * all-padding item, get nothing.  Accumulated.  dy [B, D]; dx [B, T, D] may
 * be NULL (not wanted: nothing is written, the arguments are still checked)
 * and must not overlap dy.  key_valid must be the forward's.
 * Returns VIT_OK; VIT_EINVAL for a NULL dy or B, T or D < 1; VIT_ENOMEM
 * when B*T*D overflows size_t. */
int vit_masked_mean_backward(vit_real *dx, const vit_real *dy, const unsigned char *key_valid,
                             int B, int T, int D);

VIT_END_DECLS

#endif
