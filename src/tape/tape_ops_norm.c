/*
 * Layer-norm tape ops, forward beside backward: vit_op_layernorm and
 * vit_op_add_layernorm (the residual add before it, in the same pass over
 * the rows).  Shapes: x [n, d] (leading dimensions flattened into rows),
 * gamma and beta [d], the output x's shape.
 */
#include <math.h>
#include <stdint.h>

#include "error.h"
#include "layernorm_internal.h"
#include "tape_internal.h"
#include "vit/layernorm.h"

/* What the backward keeps: the rows' mean and 1/std, [n] each. */
typedef struct layernorm_ctx {
    vit_real *mean, *rstd;
} layernorm_ctx;

/* in: x, gamma, beta.  dx, dgamma and dbeta, all accumulated, from x and
 * the saved mean and rstd. */
static int back_layernorm(vit_tape *t, const vit_op_rec *r)
{
    const layernorm_ctx *c = r->ctx;
    const vit_tensor *x = r->in[0], *g = r->in[1];
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]), *dg = vit_tape_grad_acc(t, r->in[1]);
    vit_real *db = vit_tape_grad_acc(t, r->in[2]);
    if (vit_tape_status(t))
        return vit_tape_status(t);
    return vit_layernorm_backward(dx, dg, db, r->out->grad, x->data, c->mean, c->rstd, g->data,
                                  vit_tape_rows(x), vit_tape_last_dim(x));
}

static const vit_op_def layernorm_def = {"vit_op_layernorm", back_layernorm, NULL, 0};

/* gamma and beta 1-D [d], d the normalised width. */
static int gain_shift_check(vit_tape *t, const char *fn, const vit_tensor *gamma,
                            const vit_tensor *beta, int d)
{
    int rc = vit_tape_check_shape(t, fn, "gamma", gamma, "[d], d = x's last dimension", 1, &d);
    return rc ? rc : vit_tape_check_shape(t, fn, "beta", beta, "[d], d = x's last dimension", 1, &d);
}

/* The layer norm's output, the shape of in[0] (kept as keep says), with
 * its saved mean and rstd [n each] at *mean and its bf16 copy at *y16 (NULL
 * unless kept in bf16: the kernel rounds it in the same pass).  y, or NULL
 * with the tape's error. */
static vit_tensor *ln_output(vit_tape *t, vit_tensor *const in[3], int n, int keep,
                             vit_real **mean, uint16_t **y16)
{
    vit_tensor *y = vit_tape_output_kept(t, in[0]->ndim, in[0]->shape,
                                         vit_tape_wants_grad(t, 3, in), keep);
    *mean = y ? vit_tape_saved(t, 2 * (size_t)n) : NULL;
    if (!*mean)
        return NULL;
    *y16 = vit_tape_half_new(t, y);
    return vit_tape_status(t) ? NULL : y;
}

vit_tensor *vit_op_layernorm(vit_tape *t, vit_tensor *x, vit_tensor *gamma, vit_tensor *beta,
                             vit_real eps)
{
    return vit_tape_layernorm_kept(t, x, gamma, beta, eps, VIT_KEEP_FLOAT);
}

vit_tensor *vit_tape_layernorm_kept(vit_tape *t, vit_tensor *x, vit_tensor *gamma,
                                    vit_tensor *beta, vit_real eps, int keep)
{
    vit_tensor *in[3] = {x, gamma, beta};
    if (!vit_tape_begin(t, layernorm_def.name, 3, in))
        return NULL;
    int d = vit_tape_last_dim(x), n = vit_tape_rows(x);
    if (gain_shift_check(t, layernorm_def.name, gamma, beta, d))
        return NULL;
    vit_real *mean;
    uint16_t *y16;
    vit_tensor *y = ln_output(t, in, n, keep, &mean, &y16);
    if (!y)
        return NULL;
    int rc = vit_layernorm_forward16(y->data, y16, mean, mean + n, x->data, gamma->data,
                                     beta->data, n, d, eps);
    layernorm_ctx c = {mean, mean + n};
    return vit_tape_record(t, &layernorm_def, rc, y, 3, in, &c, sizeof c);
}

/* s = a + b, y = LN(s).  Two records, the add's then the layer norm's, as
 * vit_op_add followed by vit_op_layernorm would make (their backwards are
 * those ops'); only the forward is one kernel. */
vit_tensor *vit_op_add_layernorm(vit_tape *t, vit_tensor *a, vit_tensor *b, vit_tensor *gamma,
                                 vit_tensor *beta, vit_real eps, vit_tensor **sum)
{
    return vit_tape_add_layernorm_kept(t, a, b, gamma, beta, eps, sum, VIT_KEEP_FLOAT);
}

vit_tensor *vit_tape_add_layernorm_kept(vit_tape *t, vit_tensor *a, vit_tensor *b,
                                        vit_tensor *gamma, vit_tensor *beta, vit_real eps,
                                        vit_tensor **sum, int keep)
{
    static const char fn[] = "vit_op_add_layernorm";
    if (sum)
        *sum = NULL;
    if (!vit_tape_binary_check(t, fn, a, b))
        return NULL;
    vit_tensor *lnin[2] = {gamma, beta};
    if (!vit_tape_begin(t, fn, 2, lnin))
        return NULL;
    int d = vit_tape_last_dim(a), n = vit_tape_rows(a);
    if (gain_shift_check(t, fn, gamma, beta, d))
        return NULL;
    if (!sum || !(eps > 0) || !isfinite(eps))
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "%s: eps (%g) must be positive and sum non-NULL", fn, (double)eps));
    vit_tensor *in[2] = {a, b};
    vit_tensor *s = vit_tape_output(t, a->ndim, a->shape, vit_tape_wants_grad(t, 2, in));
    if (!s || !vit_tape_record(t, &vit_tape_add_def, VIT_OK, s, 2, in, NULL, 0))
        return NULL;
    vit_tensor *lin[3] = {s, gamma, beta};
    vit_real *mean;
    uint16_t *y16;
    vit_tensor *y = ln_output(t, lin, n, keep, &mean, &y16);
    if (!y)
        return NULL;
    vit_add_layernorm_forward(s->data, y->data, y16, mean, mean + n, a->data, b->data,
                              gamma->data, beta->data, n, d, eps);
    layernorm_ctx c = {mean, mean + n};
    if (!vit_tape_record(t, &layernorm_def, VIT_OK, y, 3, lin, &c, sizeof c))
        return NULL;
    *sum = s;
    return y;
}
