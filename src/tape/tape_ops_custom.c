/*
 * vit_op_custom: an op whose forward and backward are the caller's
 * (vit_op_fn), recorded like every built-in op (vit_tape_record) under one
 * vit_op_def whose backward calls the caller's.  Shapes are the caller's:
 * inputs in[0..n_in-1], an output of the given shape.
 */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "tape_internal.h"

/* What the backward keeps: the caller's name, backward and context (the
 * arena copy the forward was given). */
typedef struct custom_ctx {
    const char *name;
    vit_op_fn backward;
    void *ctx;
} custom_ctx;

/* Runs a caller's forward or backward.  A failure always leaves a message
 * naming the op: the callback's own (set through any vit_* call that
 * failed inside it), prefixed, or "returned VIT_E..." when it set none.
 * A positive return is not a status: VIT_EINVAL.  On success the previous
 * message is left as it was. */
static int call_user(vit_op_fn f, const vit_op_call *call, const char *name, const char *what)
{
    char before[512];
    snprintf(before, sizeof before, "%s", vit_last_error());
    vit_fail(VIT_OK, "%s", "");
    int rc = f(call);
    if (rc == VIT_OK) {
        vit_fail(VIT_OK, "%s", before);
        return VIT_OK;
    }
    int code = rc < 0 ? rc : VIT_EINVAL;
    if (*vit_last_error())
        return vit_fail(code, "%s %s: %s", name, what, vit_last_error());
    return vit_fail(code, "%s %s returned %d (%s)", name, what, rc, vit_status_name(rc));
}

/* din[k] (zeroed when fresh, then accumulated by the caller's backward)
 * for every input that requires a gradient, NULL for the others. */
static int back_custom(vit_tape *t, const vit_op_rec *r)
{
    const custom_ctx *c = r->ctx;
    vit_real *din[VIT_TAPE_MAX_INPUTS];
    for (int k = 0; k < r->n_in; k++)
        din[k] = vit_tape_grad_acc(t, r->in[k]);
    if (vit_tape_status(t))
        return vit_tape_status(t);
    vit_op_call call = {.ctx = c->ctx, .n_in = r->n_in, .in = r->in, .out = r->out, .tape = t,
                        .dout = r->out->grad, .din = din};
    return call_user(c->backward, &call, c->name, "backward");
}

static const vit_op_def custom_def = {"vit_op_custom", back_custom, NULL, 0};

vit_tensor *vit_op_custom(vit_tape *t, const char *name, int n_in, vit_tensor *const *in,
                          int ndim, const int *shape, vit_op_fn forward, vit_op_fn backward,
                          const void *ctx, size_t ctx_size)
{
    const char *fn = name ? name : custom_def.name;
    if (!vit_tape_begin_list(t, fn, n_in, in, ctx, ctx_size))
        return NULL;
    size_t size;
    if (vit_tape_shape_size(t, fn, ndim, shape, &size))
        return NULL;
    int grad = vit_tape_wants_grad(t, n_in, in);
    if (grad && !backward)
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "%s: an input requires a gradient but the backward is NULL", fn));
    vit_tensor *y = vit_tape_output(t, ndim, shape, grad);
    /* The forward may write its copy of ctx (pointers to saved buffers). */
    void *copy = y && ctx_size ? vit_tape_alloc(t, ctx_size) : NULL;
    if (!y || (ctx_size && !copy))
        return NULL;
    if (ctx_size)
        memcpy(copy, ctx, ctx_size);
    if (forward) {
        vit_op_call call = {.ctx = copy, .n_in = n_in, .in = in, .out = y, .tape = t};
        int rc = call_user(forward, &call, fn, "forward");
        if (rc != VIT_OK)
            return vit_tape_error(t, rc);
        if (vit_tape_status(t) != VIT_OK)
            return NULL;
    }
    custom_ctx c = {fn, backward, copy};
    return vit_tape_record(t, &custom_def, VIT_OK, y, n_in, in, &c, sizeof c);
}
