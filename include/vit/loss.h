/*
 * vit/loss.h - softmax cross-entropy, fused, averaged over the batch.
 * See core.h for ownership, accumulation and error rules.
 */
#ifndef VIT_LOSS_H
#define VIT_LOSS_H

#include "vit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* logits: [n, classes]; labels: [n] in 0..classes-1; probs: [n, classes]
 * (written: the softmax, saved for the backward).  smoothing in [0, 1):
 * the target is (1 - smoothing) one-hot + smoothing / classes, as in
 * PyTorch's cross_entropy(label_smoothing=...).
 * *loss = mean over the n rows of -sum_c target_c log p_c.
 * Returns VIT_EINVAL for a label out of range (naming its row), VIT_ENUM
 * if a logit is not finite. */
int vit_cross_entropy_forward(vit_real *loss, vit_real *probs,
                              const vit_real *logits, const int *labels,
                              int n, int classes, vit_real smoothing);

/* dlogits[n, classes] += dloss * (probs - target) / n. */
int vit_cross_entropy_backward(vit_real *dlogits, const vit_real *probs,
                               const int *labels, int n, int classes,
                               vit_real smoothing, vit_real dloss);

#ifdef __cplusplus
}
#endif

#endif
