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

/* The losses' opening: the entry checks (logits 2-D [B, C], what_p, the
 * labels or targets, non-NULL), the output [1] into *y and the softmax
 * [B, C], which is the op's *probs too and so stays on the tape.  The
 * softmax, or NULL with the error recorded. */
static vit_real *loss_open(vit_tape *t, const vit_op_def *def, vit_tensor *logits,
                           const void *what_p, const char *what, vit_tensor **y)
{
    if (!vit_tape_begin(t, def->name, 1, &logits))
        return NULL;
    int rc = vit_tape_check_shape(t, def->name, "logits", logits, "[B, C]", 2, (int[]){-1, -1});
    if (rc == VIT_OK && !what_p)
        rc = vit_tape_fail(t, vit_fail(VIT_EINVAL, "%s: %s is NULL", def->name, what));
    if (rc != VIT_OK)
        return NULL;
    int one = 1;
    *y = vit_tape_output(t, 1, &one, vit_tape_wants_grad(t, 1, &logits));
    return *y ? vit_tape_reals(t, (size_t)logits->shape[0] * logits->shape[1]) : NULL;
}

/* The losses' close: the op recorded with its backward's ctx, the softmax
 * p handed out in *probs (may be NULL).  y, or NULL on error. */
static vit_tensor *loss_close(vit_tape *t, const vit_op_def *def, int rc, vit_tensor *y,
                              vit_tensor *logits, const void *ctx, size_t ctx_size, vit_real *p,
                              vit_real **probs)
{
    if (!vit_tape_record(t, def, rc, y, 1, &logits, ctx, ctx_size))
        return NULL;
    if (probs)
        *probs = p;
    return y;
}

vit_tensor *vit_op_cross_entropy(vit_tape *t, vit_tensor *logits, const int *labels,
                                 vit_real smoothing, vit_real **probs)
{
    vit_tensor *y = NULL;
    vit_real *p = loss_open(t, &xent_def, logits, labels, "labels", &y);
    if (!p)
        return NULL;
    int B = logits->shape[0], C = logits->shape[1];
    int *lab = vit_tape_alloc(t, (size_t)B * sizeof *lab);
    if (!lab)
        return NULL;
    memcpy(lab, labels, (size_t)B * sizeof *lab);
    int rc = vit_cross_entropy_forward(y->data, p, logits->data, lab, B, C, smoothing);
    xent_ctx c = {p, lab, smoothing};
    return loss_close(t, &xent_def, rc, y, logits, &c, sizeof c, p, probs);
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
    vit_tensor *y = NULL;
    vit_real *p = loss_open(t, &xent_masked_def, logits, labels, "labels", &y);
    if (!p)
        return NULL;
    int B = logits->shape[0], C = logits->shape[1];
    int *lab = vit_tape_alloc(t, (size_t)B * sizeof *lab);
    vit_real *w = lab && weights ? vit_tape_reals(t, (size_t)B) : NULL;
    if (!lab || (weights && !w))
        return NULL;
    memcpy(lab, labels, (size_t)B * sizeof *lab);
    if (w)
        memcpy(w, weights, (size_t)B * sizeof *w);
    int rc = vit_cross_entropy_masked_forward(y->data, p, logits->data, lab, w, B, C, smoothing,
                                              ignore);
    xent_masked_ctx c = {p, w, lab, smoothing, ignore};
    return loss_close(t, &xent_masked_def, rc, y, logits, &c, sizeof c, p, probs);
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
    vit_tensor *y = NULL;
    vit_real *p = loss_open(t, &xent_soft_def, logits, targets, "targets", &y);
    if (!p)
        return NULL;
    int B = logits->shape[0], C = logits->shape[1];
    vit_real *tg = vit_tape_reals(t, (size_t)B * C);
    if (!tg)
        return NULL;
    memcpy(tg, targets, (size_t)B * C * sizeof *tg);
    int rc = vit_soft_cross_entropy_forward(y->data, p, logits->data, tg, B, C);
    xent_soft_ctx c = {p, tg};
    return loss_close(t, &xent_soft_def, rc, y, logits, &c, sizeof c, p, probs);
}
