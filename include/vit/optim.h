/*
 * vit/optim.h - AdamW with decoupled weight decay, the learning-rate
 * schedule and the gradient norm.
 *
 * All trainable values of a model live in one flat parameter buffer (and
 * one gradient buffer of the same length).  Parameter groups are ranges of
 * that buffer; each says whether weight decay applies, so that biases,
 * layer-norm gains/shifts, position embeddings and the class token can be
 * excluded while weight matrices are decayed.
 *
 * The update matches PyTorch's torch.optim.AdamW.  For every parameter p
 * with gradient g, at step t = 1, 2, ...:
 *
 *     p <- p - lr * wd * p                  (only if its group has decay)
 *     m <- beta1 * m + (1 - beta1) * g
 *     v <- beta2 * v + (1 - beta2) * g^2
 *     p <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
 *
 * The decay is "decoupled": it shrinks p directly instead of being added to
 * g, so it is not rescaled by Adam's per-parameter step size.
 *
 * Ownership and threads: a vit_adamw owns its m and v; the parameter and
 * gradient buffers stay the caller's.  One optimizer is used by one thread
 * at a time; vit_lr_at and vit_grad_norm are pure and thread-safe.
 */
#ifndef VIT_OPTIM_H
#define VIT_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include "vit/core.h"

VIT_BEGIN_DECLS

/* Parameters [offset, offset + count) of the flat buffer; decay is nonzero
 * when weight decay applies to them. */
typedef struct vit_param_group {
    size_t offset, count;
    int decay;
} vit_param_group;

/* Optimizer state.  m and v (n values each) are the first and second
 * moment estimates, t the number of steps taken so far.  All fields are
 * public so that a checkpoint can save and restore them (m and v as
 * tensors, t as an integer). */
typedef struct vit_adamw {
    double beta1, beta2, eps, weight_decay;
    size_t n;
    uint64_t t;
    vit_real *m, *v;
} vit_adamw;

/* Sets the hyper-parameters, t = 0, and allocates zeroed m[n] and v[n]
 * owned by opt (release with vit_adamw_free).
 * Returns VIT_EINVAL for a NULL opt, n = 0, beta1 or beta2 outside [0, 1),
 * a negative or non-finite eps or weight_decay; VIT_ENOMEM when the
 * allocation fails.  On failure opt is left zeroed (safe to free). */
int vit_adamw_init(vit_adamw *opt, size_t n, double beta1, double beta2, double eps,
                   double weight_decay);

/* Releases m and v and zeroes opt.  Accepts NULL and a zeroed opt. */
void vit_adamw_free(vit_adamw *opt);

/* One AdamW step with learning rate lr: updates params[n] in place from
 * grads[n] (read only, not cleared: zero them before the next backward),
 * advances t and the moments.  params and grads are flat arrays of
 * opt->n reals, the caller's.  groups[ngroups] must
 * cover [0, n) exactly, without overlap, in any order (empty groups are
 * allowed).
 * Returns VIT_EINVAL for NULL buffers, ngroups < 1, groups that overlap,
 * leave a gap or reach past n, or an lr that is negative or not finite;
 * VIT_ENUM when any gradient is NaN or infinite; VIT_ERANGE when one is
 * finite but its square overflows vit_real (the second moment would become
 * infinite and freeze that parameter).  In each case nothing is
 * changed: not params, nor m, v or t (all checks run before any update). */
int vit_adamw_step(vit_adamw *opt, vit_real *params, const vit_real *grads,
                   const vit_param_group *groups, int ngroups, double lr);

/* Learning rate at step (counted from 0) of a run of total_steps (cannot
 * fail: see the clamping below):
 *   step < warmup_steps:   base_lr * (step + 1) / warmup_steps  (linear warm-up)
 *   afterwards:            min_lr + (base_lr - min_lr) * (1 + cos(pi * q)) / 2
 *                          with q = (step - warmup_steps) / (total_steps - warmup_steps)
 * so the cosine starts at base_lr right after the warm-up and reaches
 * min_lr at step == total_steps.  Out-of-range input is clamped rather than
 * rejected: a negative step counts as 0, a step past total_steps gives
 * min_lr, warmup_steps is clamped to [0, total_steps], and a run with no
 * room for the cosine (total_steps <= warmup_steps) gives min_lr after
 * the warm-up.  total_steps <= 0 returns min_lr. */
double vit_lr_at(long step, long total_steps, long warmup_steps, double base_lr,
                 double min_lr);

/* Weight averaging: folds the parameters after optimizer step t (counted
 * from 1) into their running average avg[n] (both flat buffers of n reals,
 * the caller's; params only read), so that after steps 1 .. t
 *   avg = sum_{i=1..t} decay^(t-i) params_i / sum_{i=1..t} decay^(t-i),
 * the exponential moving average with decay `decay`, bias-corrected: the
 * weights are normalised, so the average is never pulled towards the
 * initialisation or towards zero, and early on it is simply the mean of
 * the few steps seen (step 1 copies params).  The update is
 *   avg += w_t (params - avg),  w_t = (1 - decay) / (1 - decay^t),
 * computed in double per element and rounded once.  decay 0 copies params.
 * Returns VIT_EINVAL (nothing changed) for NULL buffers, t = 0 or a decay
 * outside [0, 1).  Reentrant; touches only avg. */
int vit_ema_update(vit_real *avg, const vit_real *params, size_t n, double decay,
                   unsigned long long t);

/* Euclidean norm sqrt(sum g_i^2) of g[n] (any flat buffer, read only),
 * accumulated in double.  Returns 0 for a NULL g or n = 0 (no message), and
 * NaN/inf when g holds a non-finite value, so the result doubles as a
 * finiteness check. */
double vit_grad_norm(const vit_real *g, size_t n);

VIT_END_DECLS

#endif
