/*
 * Elementwise tape ops, each forward beside its backward: vit_op_gelu,
 * vit_op_add (the residual connection), vit_op_mul, vit_op_scale,
 * vit_op_drop_path (per-sample scale) and vit_op_softmax (over the last
 * dimension).  Every output has its inputs'
 * shape.
 */
#include <math.h>
#include <string.h>

#include "activations_internal.h"
#include "error.h"
#include "tape_internal.h"
#include "vit/activations.h"

/* ---- y = GELU(x) -------------------------------------------------------- */

/* dx = dy * GELU'(x).  The first write of dx overwrites, in dy's own buffer
 * when it can be handed over (the MLP's widest gradient is then held once). */
static int back_gelu(vit_tape *t, const vit_op_rec *r)
{
    const vit_tensor *x = r->in[0];
    const vit_real *dy = r->out->grad;
    int fresh;
    if (vit_tape_grad_take(r->in[0], r->out)) {
        vit_gelu_backward_set(x->grad, dy, x->data, x->size);
        return VIT_OK;
    }
    vit_real *dx = vit_tape_grad_out(t, r->in[0], &fresh);
    if (!dx)
        return vit_tape_status(t);
    if (!fresh)
        return vit_gelu_backward(dx, dy, x->data, x->size);
    vit_gelu_backward_set(dx, dy, x->data, x->size);
    return VIT_OK;
}

static const vit_op_def gelu_def = {"vit_op_gelu", back_gelu, NULL, 0};

vit_tensor *vit_op_gelu(vit_tape *t, vit_tensor *x)
{
    if (!vit_tape_begin(t, gelu_def.name, 1, &x))
        return NULL;
    vit_tensor *y = vit_tape_output(t, x->ndim, x->shape, vit_tape_wants_grad(t, 1, &x));
    if (!y)
        return NULL;
    int rc = vit_gelu_forward(y->data, x->data, x->size);
    return vit_tape_record(t, &gelu_def, rc, y, 1, &x, NULL, 0);
}

/* ---- Two operands of one shape ----------------------------------------- */

static int same_shape(const vit_tensor *a, const vit_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

int vit_tape_binary_check(vit_tape *t, const char *name, vit_tensor *a, vit_tensor *b)
{
    vit_tensor *in[2] = {a, b};
    if (!vit_tape_begin(t, name, 2, in))
        return 0;
    if (!same_shape(a, b)) {
        vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: operand shapes differ (%zu vs %zu values)",
                                   name, a->size, b->size));
        return 0;
    }
    return 1;
}

/* An elementwise op of a and b: the kernel's forward, then the record. */
static vit_tensor *binary_op(vit_tape *t, const vit_op_def *def, vit_tensor *a, vit_tensor *b,
                             int (*fwd)(vit_real *, const vit_real *, const vit_real *, size_t))
{
    if (!vit_tape_binary_check(t, def->name, a, b))
        return NULL;
    vit_tensor *in[2] = {a, b};
    vit_tensor *y = vit_tape_output(t, a->ndim, a->shape, vit_tape_wants_grad(t, 2, in));
    if (!y)
        return NULL;
    int rc = fwd(y->data, a->data, b->data, a->size);
    return vit_tape_record(t, def, rc, y, 2, in, NULL, 0);
}

/* ---- y = a + b ------------------------------------------------------ */

/* da = db = dy, the second operand first: the first (the residual stream)
 * may then take dy's buffer without a copy. */
static int back_add(vit_tape *t, const vit_op_rec *r)
{
    int rc = vit_tape_grad_pass(t, r->in[1], r->out, 0);
    return rc ? rc : vit_tape_grad_pass(t, r->in[0], r->out, 1);
}

const vit_op_def vit_tape_add_def = {"vit_op_add", back_add, NULL, 0};

vit_tensor *vit_op_add(vit_tape *t, vit_tensor *a, vit_tensor *b)
{
    return binary_op(t, &vit_tape_add_def, a, b, vit_residual_forward);
}

/* ---- y = a * b ------------------------------------------------------ */

/* da += dy * b, db += dy * a (a and b may be one tensor). */
static int back_mul(vit_tape *t, const vit_op_rec *r)
{
    vit_real *da = vit_tape_grad_acc(t, r->in[0]);
    vit_real *db = vit_tape_grad_acc(t, r->in[1]);
    if (vit_tape_status(t))
        return vit_tape_status(t);
    return vit_mul_backward(da, db, r->out->grad, r->in[0]->data, r->in[1]->data,
                            r->in[0]->size);
}

static const vit_op_def mul_def = {"vit_op_mul", back_mul, NULL, 0};

vit_tensor *vit_op_mul(vit_tape *t, vit_tensor *a, vit_tensor *b)
{
    return binary_op(t, &mul_def, a, b, vit_mul_forward);
}

/* ---- y = s x -------------------------------------------------------- */

typedef struct scale_ctx {
    vit_real s;
} scale_ctx;

/* dx += s dy. */
static int back_scale(vit_tape *t, const vit_op_rec *r)
{
    const scale_ctx *c = r->ctx;
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]);
    return dx ? vit_scale_backward(dx, r->out->grad, c->s, r->in[0]->size) : vit_tape_status(t);
}

static const vit_op_def scale_def = {"vit_op_scale", back_scale, NULL, 0};

vit_tensor *vit_op_scale(vit_tape *t, vit_tensor *x, vit_real s)
{
    if (!vit_tape_begin(t, scale_def.name, 1, &x))
        return NULL;
    if (!isfinite(s))
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "vit_op_scale: s = %g is not finite",
                                          (double)s));
    vit_tensor *y = vit_tape_output(t, x->ndim, x->shape, vit_tape_wants_grad(t, 1, &x));
    if (!y)
        return NULL;
    int rc = vit_scale_forward(y->data, x->data, s, x->size);
    scale_ctx c = {s};
    return vit_tape_record(t, &scale_def, rc, y, 1, &x, &c, sizeof c);
}

/* ---- y[b, ...] = scale[b] x[b, ...]: drop path --------------------------- */

typedef struct drop_path_ctx {
    vit_real *scale; /* [B], the tape's copy */
} drop_path_ctx;

/* x [B, R] (R the rest of the shape), scale [B] -> y [B, R] (overwritten) */
static void drop_path_forward(vit_real *y, const vit_real *x, const vit_real *scale, int B,
                              size_t R)
{
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < R; i++)
            y[(size_t)b * R + i] = scale[b] * x[(size_t)b * R + i];
}

/* dy [B, R], scale [B] -> dx [B, R] += scale[b] dy */
static int back_drop_path(vit_tape *t, const vit_op_rec *r)
{
    const drop_path_ctx *c = r->ctx;
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]);
    if (!dx)
        return vit_tape_status(t);
    int B = r->in[0]->shape[0];
    size_t R = r->in[0]->size / (size_t)B;
    const vit_real *dy = r->out->grad;
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < R; i++)
            dx[(size_t)b * R + i] += c->scale[b] * dy[(size_t)b * R + i];
    return VIT_OK;
}

static const vit_op_def drop_path_def = {"vit_op_drop_path", back_drop_path, NULL, 0};

vit_tensor *vit_op_drop_path(vit_tape *t, vit_tensor *x, const vit_real *scale)
{
    if (!vit_tape_begin(t, drop_path_def.name, 1, &x))
        return NULL;
    if (!scale)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "vit_op_drop_path: scale is NULL"));
    int B = x->shape[0];
    for (int b = 0; b < B; b++)
        if (!isfinite((double)scale[b]))
            return vit_tape_error(t, vit_fail(VIT_EINVAL, "vit_op_drop_path: scale[%d] = %g is "
                                              "not finite", b, (double)scale[b]));
    vit_tensor *y = vit_tape_output(t, x->ndim, x->shape, vit_tape_wants_grad(t, 1, &x));
    vit_real *s = y ? vit_tape_reals(t, (size_t)B) : NULL;
    if (!s)
        return NULL;
    memcpy(s, scale, (size_t)B * sizeof *s);
    drop_path_forward(y->data, x->data, s, B, x->size / (size_t)B);
    drop_path_ctx c = {s};
    return vit_tape_record(t, &drop_path_def, VIT_OK, y, 1, &x, &c, sizeof c);
}

/* ---- y = softmax(x) over rows [n, d] ----------------------------------- */

/* dx += y * (dy - sum(dy * y)) per row, from the output y. */
static int back_softmax(vit_tape *t, const vit_op_rec *r)
{
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]);
    const vit_tensor *y = r->out;
    return dx ? vit_softmax_backward(dx, y->grad, y->data, vit_tape_rows(y), vit_tape_last_dim(y))
              : vit_tape_status(t);
}

static const vit_op_def softmax_def = {"vit_op_softmax", back_softmax, NULL, 0};

vit_tensor *vit_op_softmax(vit_tape *t, vit_tensor *x)
{
    if (!vit_tape_begin(t, softmax_def.name, 1, &x))
        return NULL;
    vit_tensor *y = vit_tape_output(t, x->ndim, x->shape, vit_tape_wants_grad(t, 1, &x));
    if (!y)
        return NULL;
    int rc = vit_softmax_forward(y->data, x->data, vit_tape_rows(x), vit_tape_last_dim(x));
    return vit_tape_record(t, &softmax_def, rc, y, 1, &x, NULL, 0);
}
