/*
 * vit/loss.h - softmax cross-entropy, fused, averaged over the batch.
 * See core.h for ownership, accumulation and error rules.  Every buffer
 * belongs to the caller and is not kept; both functions are reentrant.
 */
#ifndef VIT_LOSS_H
#define VIT_LOSS_H

#include "vit/core.h"

VIT_BEGIN_DECLS

/* logits: [n, classes], row-major, one row per example (the batch; for
 * tokens [B, T, classes] pass n = B*T); labels: [n] in 0..classes-1;
 * probs: [n, classes] (overwritten: the softmax, saved for the backward).
 * smoothing in [0, 1): the target is (1 - smoothing) one-hot +
 * smoothing / classes, as in PyTorch's cross_entropy(label_smoothing=...).
 * *loss (overwritten) = mean over the n rows of -sum_c target_c log p_c.
 * Returns VIT_OK; VIT_EINVAL for a NULL pointer, n or classes < 1,
 * smoothing outside [0, 1) or a label out of range (naming its row);
 * VIT_ENUM if a logit is not finite. */
int vit_cross_entropy_forward(vit_real *loss, vit_real *probs,
                              const vit_real *logits, const int *labels,
                              int n, int classes, vit_real smoothing);

/* dlogits[n, classes] += dloss * (probs - target) / n, accumulated, where
 * probs is the forward's output and dloss the gradient arriving at the
 * scalar loss (1 when it is the final loss).  Labels and smoothing must be
 * the forward's.  dlogits must not alias probs.
 * Returns VIT_OK; VIT_EINVAL as for the forward (NULL dlogits or probs
 * included); VIT_ENUM for a non-finite dloss. */
int vit_cross_entropy_backward(vit_real *dlogits, const vit_real *probs,
                               const int *labels, int n, int classes,
                               vit_real smoothing, vit_real dloss);

/* The cross-entropy with rows left out and rows weighted, as PyTorch's
 * cross_entropy(ignore_index=ignore) with per-row weights: a row whose
 * label is `ignore` (e.g. -100, or a padding class) counts for nothing;
 * weights [n] (>= 0, finite; NULL: all 1) weigh the others, and
 * *loss = sum_i w_i l_i / sum_i w_i over the counted rows, l_i the row's
 * smoothed cross-entropy as above; 0 when no row counts (where PyTorch
 * gives NaN), with a zero gradient.  probs [n, classes] is overwritten for
 * every row, ignored ones too.  Labels other than `ignore` must be in
 * 0..classes-1.  Errors as vit_cross_entropy_forward, and VIT_EINVAL for a
 * negative or non-finite weight. */
int vit_cross_entropy_masked_forward(vit_real *loss, vit_real *probs, const vit_real *logits,
                                     const int *labels, const vit_real *weights, int n,
                                     int classes, vit_real smoothing, int ignore);

/* dlogits[n, classes] += dloss * w_i / sum_j w_j * (probs - target) for
 * each counted row (ignored rows: nothing), accumulated; labels, weights,
 * smoothing and ignore as in the forward.  Errors as
 * vit_cross_entropy_backward. */
int vit_cross_entropy_masked_backward(vit_real *dlogits, const vit_real *probs, const int *labels,
                                      const vit_real *weights, int n, int classes,
                                      vit_real smoothing, int ignore, vit_real dloss);

/* Cross-entropy against soft targets, e.g. the mixed labels of mixup and
 * cutmix (vit_augment_batch, vit/augment.h): logits [n, classes], targets
 * [n, classes] (each row >= 0, finite; rows normally sum to 1), probs
 * [n, classes] (overwritten: the softmax, for the backward).
 * *loss (overwritten) = mean over the n rows of -sum_c t_c log p_c.
 * Label smoothing is not applied here: it belongs in the targets, as timm
 * folds it into each one-hot before mixing, so targets (1 - s) one-hot(y)
 * + s / classes give exactly vit_cross_entropy_forward's loss with
 * smoothing s.  Returns VIT_OK; VIT_EINVAL for a NULL pointer, n or classes
 * < 1, or a negative or non-finite target (naming its row and class);
 * VIT_ENUM if a logit is not finite.  Reentrant. */
int vit_soft_cross_entropy_forward(vit_real *loss, vit_real *probs, const vit_real *logits,
                                   const vit_real *targets, int n, int classes);

/* dlogits[n, classes] += dloss * (S_i probs - targets) / n, accumulated,
 * S_i the sum of row i's targets; for rows summing to 1 that is dloss (probs - targets) / n.
 * probs is the forward's output, targets the forward's.  dlogits must not
 * alias probs or targets.  Errors as the forward (NULL dlogits or probs
 * included); VIT_ENUM for a non-finite dloss. */
int vit_soft_cross_entropy_backward(vit_real *dlogits, const vit_real *probs,
                                    const vit_real *targets, int n, int classes,
                                    vit_real dloss);

VIT_END_DECLS

#endif
