/*
 * The loss on the tape, forward beside backward: vit_op_cross_entropy,
 * logits [B, C] and labels [B] -> the mean loss [1]; and
 * vit_op_cross_entropy_masked, the same with ignored and weighted rows.
 */
#include <string.h>

#include "error.h"
#include "tape_internal.h"
#include "vit/loss.h"

/* What the backward keeps: the softmax [B, C] (also the op's *probs), the
 * labels [B] (copied) and the label smoothing. */
typedef struct xent_ctx {
    vit_real *probs;
    int *labels;
    vit_real smoothing;
} xent_ctx;

/* dlogits += dy[0] (p - the smoothed one-hot labels) / B. */
static int back_xent(vit_tape *t, const vit_op_rec *r)
{
    const xent_ctx *c = r->ctx;
    const vit_tensor *z = r->in[0];
    vit_real *dz = vit_tape_grad_acc(t, r->in[0]);
    return dz ? vit_cross_entropy_backward(dz, c->probs, c->labels, z->shape[0], z->shape[1],
                                           c->smoothing, r->out->grad[0])
              : vit_tape_status(t);
}

static const vit_op_def xent_def = {"vit_op_cross_entropy", back_xent, NULL, 0};

/* The losses' entry check: logits 2-D [B, C], what (labels or targets)
 * non-NULL.  VIT_OK or the error, recorded. */
static int logits_check(vit_tape *t, const char *fn, const vit_tensor *logits, const void *p,
                        const char *what)
{
    int rc = vit_tape_check_shape(t, fn, "logits", logits, "[B, C]", 2, (int[]){-1, -1});
    if (rc == VIT_OK && !p)
        rc = vit_tape_fail(t, vit_fail(VIT_EINVAL, "%s: %s is NULL", fn, what));
    return rc;
}

vit_tensor *vit_op_cross_entropy(vit_tape *t, vit_tensor *logits, const int *labels,
                                 vit_real smoothing, vit_real **probs)
{
    if (!vit_tape_begin(t, xent_def.name, 1, &logits))
        return NULL;
    if (logits_check(t, xent_def.name, logits, labels, "labels"))
        return NULL;
    int B = logits->shape[0], C = logits->shape[1];
    int one = 1;
    vit_tensor *y = vit_tape_output(t, 1, &one, vit_tape_wants_grad(t, 1, &logits));
    /* The probabilities are the op's output too (probs), so they stay. */
    vit_real *p = y ? vit_tape_reals(t, (size_t)B * C) : NULL;
    int *lab = p ? vit_tape_alloc(t, (size_t)B * sizeof *lab) : NULL;
    if (!lab)
        return NULL;
    memcpy(lab, labels, (size_t)B * sizeof *lab);
    int rc = vit_cross_entropy_forward(y->data, p, logits->data, lab, B, C, smoothing);
    xent_ctx c = {p, lab, smoothing};
    if (!vit_tape_record(t, &xent_def, rc, y, 1, &logits, &c, sizeof c))
        return NULL;
    if (probs)
        *probs = p;
    return y;
}

/* What the masked loss's backward keeps: as xent_ctx, plus the weights
 * [B] (copied, or NULL) and the ignore label. */
typedef struct xent_masked_ctx {
    vit_real *probs, *weights;
    int *labels;
    vit_real smoothing;
    int ignore;
} xent_masked_ctx;

/* dlogits += dy[0] w_i / sum w (p - the smoothed one-hot labels), counted rows only. */
static int back_xent_masked(vit_tape *t, const vit_op_rec *r)
{
    const xent_masked_ctx *c = r->ctx;
    const vit_tensor *z = r->in[0];
    vit_real *dz = vit_tape_grad_acc(t, r->in[0]);
    return dz ? vit_cross_entropy_masked_backward(dz, c->probs, c->labels, c->weights,
                                                  z->shape[0], z->shape[1], c->smoothing,
                                                  c->ignore, r->out->grad[0])
              : vit_tape_status(t);
}

static const vit_op_def xent_masked_def = {"vit_op_cross_entropy_masked", back_xent_masked, NULL,
                                           0};

vit_tensor *vit_op_cross_entropy_masked(vit_tape *t, vit_tensor *logits, const int *labels,
                                        const vit_real *weights, int ignore, vit_real smoothing,
                                        vit_real **probs)
{
    if (!vit_tape_begin(t, xent_masked_def.name, 1, &logits))
        return NULL;
    if (logits_check(t, xent_masked_def.name, logits, labels, "labels"))
        return NULL;
    int B = logits->shape[0], C = logits->shape[1];
    int one = 1;
    vit_tensor *y = vit_tape_output(t, 1, &one, vit_tape_wants_grad(t, 1, &logits));
    vit_real *p = y ? vit_tape_reals(t, (size_t)B * C) : NULL;
    int *lab = p ? vit_tape_alloc(t, (size_t)B * sizeof *lab) : NULL;
    vit_real *w = lab && weights ? vit_tape_reals(t, (size_t)B) : NULL;
    if (!lab || (weights && !w))
        return NULL;
    memcpy(lab, labels, (size_t)B * sizeof *lab);
    if (w)
        memcpy(w, weights, (size_t)B * sizeof *w);
    int rc = vit_cross_entropy_masked_forward(y->data, p, logits->data, lab, w, B, C, smoothing,
                                              ignore);
    xent_masked_ctx c = {p, w, lab, smoothing, ignore};
    if (!vit_tape_record(t, &xent_masked_def, rc, y, 1, &logits, &c, sizeof c))
        return NULL;
    if (probs)
        *probs = p;
    return y;
}

/* What the soft loss's backward keeps: the softmax [B, C] and the targets
 * [B, C] (copied). */
typedef struct xent_soft_ctx {
    vit_real *probs, *targets;
} xent_soft_ctx;

/* dlogits += dy[0] (S p - t) / B. */
static int back_xent_soft(vit_tape *t, const vit_op_rec *r)
{
    const xent_soft_ctx *c = r->ctx;
    const vit_tensor *z = r->in[0];
    vit_real *dz = vit_tape_grad_acc(t, r->in[0]);
    return dz ? vit_soft_cross_entropy_backward(dz, c->probs, c->targets, z->shape[0],
                                                z->shape[1], r->out->grad[0])
              : vit_tape_status(t);
}

static const vit_op_def xent_soft_def = {"vit_op_cross_entropy_soft", back_xent_soft, NULL, 0};

vit_tensor *vit_op_cross_entropy_soft(vit_tape *t, vit_tensor *logits, const vit_real *targets,
                                      vit_real **probs)
{
    if (!vit_tape_begin(t, xent_soft_def.name, 1, &logits))
        return NULL;
    if (logits_check(t, xent_soft_def.name, logits, targets, "targets"))
        return NULL;
    int B = logits->shape[0], C = logits->shape[1];
    int one = 1;
    vit_tensor *y = vit_tape_output(t, 1, &one, vit_tape_wants_grad(t, 1, &logits));
    vit_real *p = y ? vit_tape_reals(t, (size_t)B * C) : NULL;
    vit_real *tg = p ? vit_tape_reals(t, (size_t)B * C) : NULL;
    if (!tg)
        return NULL;
    memcpy(tg, targets, (size_t)B * C * sizeof *tg);
    int rc = vit_soft_cross_entropy_forward(y->data, p, logits->data, tg, B, C);
    xent_soft_ctx c = {p, tg};
    if (!vit_tape_record(t, &xent_soft_def, rc, y, 1, &logits, &c, sizeof c))
        return NULL;
    if (probs)
        *probs = p;
    return y;
}
