/*
 * Tape ops of the linear layers: vit_op_linear, vit_op_linear_add (a
 * linear added onto the residual stream), vit_op_linear_gelu (the MLP's
 * first layer with its bias and GELU) and vit_tape_ln_linear (either after
 * a layer norm whose output is not kept), each forward beside its backward.
 * Shapes: x [n, in] (leading dimensions flattened into rows), W [in, out],
 * b [out], y [n, out].
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "activations_internal.h"
#include "blas.h"
#include "error.h"
#include "fastmath.h"
#include "mixed.h"
#include "tape_internal.h"
#include "threads.h"
#include "vit/bf16.h"
#include "vit/layernorm.h"
#include "vit/linear.h"

/* The check the three ops share, recorded under fn's name: W 2-D with x's
 * width as its rows, b (if any) 1-D with W's columns.  VIT_OK or the
 * error. */
static int linear_check(vit_tape *t, const char *fn, const vit_tensor *x, const vit_tensor *W,
                        const vit_tensor *b)
{
    int rc = vit_tape_check_shape(t, fn, "W", W, "[in, out], in = x's last dimension", 2,
                                  (int[]){vit_tape_last_dim(x), -1});
    if (rc == VIT_OK && b)
        rc = vit_tape_check_shape(t, fn, "b", b, "[out]", 1, (int[]){W->shape[1]});
    return rc;
}

/* ---- y = x W + b ------------------------------------------------------- */

#ifndef VIT_DOUBLE
/* dx (= or +=) dy W^T and dW += x^T dy from x kept in bf16 (xh), with dy
 * rounded to bf16 once for both products (in the tape's scratch), where
 * each product would round it again, and db += dy's column sums in the
 * same pass: the same bits, two passes over dy less.  The status. */
static int back_linear_dy16(vit_tape *t, const uint16_t *xh, const vit_real *W,
                            const vit_real *dy, vit_real *dx, int fresh, vit_real *dW,
                            vit_real *db, int n, int in, int out)
{
    size_t nv = (size_t)n * out;
    uint16_t *dy16 = (uint16_t *)vit_tape_scratch(t, (nv + 1) / 2);
    if (!dy16)
        return vit_tape_status(t);
    vit_mixed_round_colsums(dy16, db, dy, n, out); /* db's sums in the same pass */
    vit_mgemm_a16(CblasNoTrans, CblasTrans, n, in, out, dy16, out, W, out, fresh ? 0 : 1, dx, in);
    vit_mgemm_a16_b16(CblasTrans, in, out, n, xh, in, dy16, out, 1, dW, out);
    return VIT_OK;
}
#endif

/* in: x, W, b (or NULL).  dx [n, in] (= or +=) dy [n, out] W^T; dW [in, out]
 * += x^T dy; db [out] += the column sums of dy. */
static int back_linear(vit_tape *t, const vit_op_rec *r)
{
    const vit_tensor *x = r->in[0], *W = r->in[1];
    const vit_real *dy = r->out->grad;
    int n = vit_tape_rows(x), in = W->shape[0], out = W->shape[1], fresh;
    vit_real *dx = vit_tape_grad_out(t, r->in[0], &fresh);
    if (!dx && x->requires_grad)
        return vit_tape_status(t);
    const uint16_t *xh = vit_tape_half(x);
#ifndef VIT_DOUBLE
    if (dx && xh && r->in[1]->requires_grad) { /* mixed precision: x was kept in bf16 */
        vit_real *dW = vit_tape_grad_acc(t, r->in[1]);
        vit_real *db = r->in[2] ? vit_tape_grad_acc(t, r->in[2]) : NULL;
        if (vit_tape_status(t))
            return vit_tape_status(t);
        return back_linear_dy16(t, xh, W->data, dy, dx, fresh, dW, db, n, in, out);
    }
#endif
    if (dx)
        vit_mgemm(CblasNoTrans, CblasTrans, n, in, out, 1, dy, out, W->data, out, fresh ? 0 : 1,
                  dx, in);
    vit_real *dW = vit_tape_grad_acc(t, r->in[1]);
    vit_real *db = r->in[2] ? vit_tape_grad_acc(t, r->in[2]) : NULL;
    if (!dW && !db)
        return vit_tape_status(t);
    if (!xh)
        return vit_linear_backward(NULL, dW, db, dy, x->data, W->data, n, in, out);
    /* x kept in bf16: dW += x^T dy reads it as it is (the same bits) */
    if (dW)
        vit_mgemm_a16(CblasTrans, CblasNoTrans, in, out, n, xh, in, dy, out, 1, dW, out);
    if (db)
        vit_column_sums(db, dy, n, out);
    return VIT_OK;
}

static const vit_op_def linear_def = {"vit_op_linear", back_linear, NULL, 0};

vit_tensor *vit_op_linear(vit_tape *t, vit_tensor *x, vit_tensor *W, vit_tensor *b)
{
    vit_tensor *in[3] = {x, W, b};
    if (!vit_tape_begin(t, linear_def.name, 2, in))
        return NULL;
    if (linear_check(t, linear_def.name, x, W, b))
        return NULL;
    int shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = W->shape[1];
    vit_tensor *y = vit_tape_output(t, x->ndim, shape, vit_tape_wants_grad(t, 3, in));
    if (!y)
        return NULL;
    const uint16_t *xh = vit_tape_half(x);
    int rc = VIT_OK;
    if (xh) /* x kept in bf16 (mixed precision): the product's operand, not rounded again */
        vit_mgemm_bias_a16(vit_tape_rows(x), W->shape[1], W->shape[0], xh, W->shape[0], W->data,
                           W->shape[1], b ? b->data : NULL, y->data, W->shape[1]);
    else
        rc = vit_linear_forward(y->data, x->data, W->data, b ? b->data : NULL, vit_tape_rows(x),
                                W->shape[0], W->shape[1]);
    return vit_tape_record(t, &linear_def, rc, y, 3, in, NULL, 0);
}

/* ---- y = r + x W + b ---------------------------------------------------- */

/* in: x, W, b (or NULL), r [n, out].  The linear's gradients, then dr = dy
 * (handed over: every read of dy before r's may take it). */
static int back_linear_add(vit_tape *t, const vit_op_rec *r)
{
    int rc = back_linear(t, r);
    return rc ? rc : vit_tape_grad_pass(t, r->in[3], r->out, 1);
}

/* 16 lanes, not SSE2's 4 (an elementwise add: the same bits); static,
 * since a global target_clones function would be exported. */
FM_CLONES
static void rows_plus_bias(vit_real *y, const vit_real *r, const vit_real *b, int n, int m)
{
    for (size_t i = 0; i < (size_t)n; i++)
        for (int j = 0; j < m; j++)
            y[i * m + j] = r[i * m + j] + b[j];
}

/* y = r + b row by row, then one GEMM adds x W onto it.  A lazy forward
 * (VIT_OP_LAZY): the backward reads only the inputs, so when this op ends a
 * recomputed checkpoint nobody needs y's values. */
void vit_tape_rows_plus_bias(vit_real *y, const vit_real *r, const vit_real *b, int n, int m)
{
    if (!b) {
        memcpy(y, r, (size_t)n * m * sizeof *y);
        return;
    }
    rows_plus_bias(y, r, b, n, m);
}

static int fwd_linear_add(const vit_op_rec *r)
{
    vit_tensor *y = r->out;
    const vit_tensor *x = r->in[0], *W = r->in[1], *b = r->in[2], *res = r->in[3];
    int n = vit_tape_rows(x), k = W->shape[0], m = W->shape[1];
    vit_tape_rows_plus_bias(y->data, res->data, b ? b->data : NULL, n, m);
    const uint16_t *xh = vit_tape_half(x); /* x kept in bf16: read as it is (the same bits) */
    if (xh)
        vit_mgemm_a16(CblasNoTrans, CblasNoTrans, n, m, k, xh, k, W->data, m, 1, y->data, m);
    else
        vit_mgemm(CblasNoTrans, CblasNoTrans, n, m, k, 1, x->data, k, W->data, m, 1, y->data, m);
    return VIT_OK;
}

static const vit_op_def linear_add_def = {"vit_op_linear_add", back_linear_add, fwd_linear_add,
                                          VIT_OP_LAZY};

vit_tensor *vit_op_linear_add(vit_tape *t, vit_tensor *x, vit_tensor *W, vit_tensor *b,
                              vit_tensor *r)
{
    const char *fn = linear_add_def.name;
    vit_tensor *in[4] = {x, W, b, r};
    if (!vit_tape_begin(t, fn, 2, in) || !vit_tape_begin(t, fn, 1, in + 3))
        return NULL;
    if (linear_check(t, fn, x, W, b))
        return NULL;
    int rshape[VIT_TENSOR_MAX_DIMS];
    memcpy(rshape, x->shape, sizeof rshape);
    rshape[x->ndim - 1] = W->shape[1];
    if (vit_tape_check_shape(t, fn, "r", r, "x's shape with the last dimension out", x->ndim,
                             rshape))
        return NULL;
    vit_tensor *y = vit_tape_output(t, r->ndim, r->shape, vit_tape_wants_grad(t, 4, in));
    return y ? vit_tape_record(t, &linear_add_def, VIT_OK, y, 4, in, NULL, 0) : NULL;
}

/* ---- y = GELU(x W + b) ------------------------------------------------- */

/* What the backward keeps: GELU'(u) [n, out] of the pre-activation
 * u = x W + b, which the forward computed beside GELU(u): as float, or in
 * mixed precision rounded to bf16 (dgelu_bf16; dgelu NULL), since du =
 * dy GELU'(u) goes on into bf16 products anyway (one more rounding of
 * du's factors, 2^-8 each: tests/test_mixed.c). */
typedef struct linear_gelu_ctx {
    vit_real *dgelu;
    uint16_t *dgelu_bf16;
} linear_gelu_ctx;

/* in: x, W, b (or NULL).  du [n, out] = dy * GELU'(u) overwrites dy's
 * buffer in place when the pool lent it (else a borrowed one) and db [out]
 * += its column sums in the same pass; then dW [in, out] += x^T du and
 * dx [n, in] (= or +=) du W^T. */
static int back_linear_gelu(vit_tape *t, const vit_op_rec *r)
{
    const linear_gelu_ctx *c = r->ctx;
    const vit_tensor *x = r->in[0], *W = r->in[1];
    int n = vit_tape_rows(x), in = W->shape[0], out = W->shape[1], fresh;
    vit_real *db = r->in[2] ? vit_tape_grad_acc(t, r->in[2]) : NULL;
    vit_real *dW = vit_tape_grad_acc(t, r->in[1]);
    if (vit_tape_status(t))
        return vit_tape_status(t);
    void *lease;
    vit_real *du = vit_tape_dy_writable(t, r->out, &lease);
    if (!du)
        return vit_tape_status(t);
#ifndef VIT_DOUBLE
    if (!c->dgelu)
        vit_bias_gelu_backward_bf16(du, db, r->out->grad, c->dgelu_bf16, n, out);
    else
#endif
        vit_bias_gelu_backward(du, db, r->out->grad, c->dgelu, n, out);
    const uint16_t *xh = vit_tape_half(x);
    if (dW && xh) /* x kept in bf16: read as it is (the same bits) */
        vit_mgemm_a16(CblasTrans, CblasNoTrans, in, out, n, xh, in, du, out, 1, dW, out);
    else if (dW)
        vit_mgemm(CblasTrans, CblasNoTrans, in, out, n, 1, x->data, in, du, out, 1, dW, out);
    vit_real *dx = vit_tape_grad_out(t, r->in[0], &fresh);
    if (dx)
        vit_mgemm(CblasNoTrans, CblasTrans, n, in, out, 1, du, out, W->data, out, fresh ? 0 : 1,
                  dx, in);
    vit_tape_lease_end(lease);
    return vit_tape_status(t);
}

static const vit_op_def linear_gelu_def = {"vit_op_linear_gelu", back_linear_gelu, NULL, 0};

vit_tensor *vit_op_linear_gelu(vit_tape *t, vit_tensor *x, vit_tensor *W, vit_tensor *b)
{
    return vit_tape_linear_gelu_kept(t, x, W, b, VIT_KEEP_FLOAT);
}

vit_tensor *vit_tape_linear_gelu_kept(vit_tape *t, vit_tensor *x, vit_tensor *W, vit_tensor *b,
                                      int keep)
{
    const char *fn = linear_gelu_def.name;
    vit_tensor *in[3] = {x, W, b};
    if (!vit_tape_begin(t, fn, 2, in))
        return NULL;
    if (linear_check(t, fn, x, W, b))
        return NULL;
    int shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = W->shape[1];
    int grad = vit_tape_wants_grad(t, 3, in);
    int n = vit_tape_rows(x), k = W->shape[0], m = W->shape[1];
    vit_tensor *y = vit_tape_output_kept(t, x->ndim, shape, grad, keep);
    /* With a record, u ends up holding GELU'(x W + b)
     * (vit_bias_gelu_forward); in mixed precision GELU' is kept in bf16
     * and u is a block of rows of the pre-activation in the scratch. */
    int half = grad && vit_mixed_on();
    if (!y)
        return NULL;
    const uint16_t *xh = vit_tape_half(x); /* x kept in bf16: read as it is (the same bits) */
    linear_gelu_ctx c = {NULL, NULL};
#ifndef VIT_DOUBLE
    if (half) { /* GELU' and a bf16-kept y rounded in the GELU's pass */
        size_t bytes;
        if (!vit_mul_size(&bytes, y->size, sizeof *c.dgelu_bf16)
            || !(c.dgelu_bf16 = vit_tape_alloc(t, bytes)))
            return vit_tape_error(t, VIT_ENOMEM);
        uint16_t *y16 = vit_tape_half_new(t, y); /* NULL unless y is kept in bf16 */
        if (vit_tape_status(t))
            return NULL;
        /* u = x W a block of rows (VIT_TAPE_PIECE_BYTES) at a time in the
         * scratch, GELU'd while it is still in the core's cache */
        int rows = vit_tape_piece_rows(n, m);
        vit_real *u = vit_tape_scratch(t, (size_t)rows * m);
        if (!u)
            return NULL;
        for (int r0 = 0; r0 < n; r0 += rows) {
            int nr = n - r0 < rows ? n - r0 : rows;
            if (xh)
                vit_mgemm_a16(CblasNoTrans, CblasNoTrans, nr, m, k, xh + (size_t)r0 * k, k,
                              W->data, m, 0, u, m);
            else
                vit_mgemm(CblasNoTrans, CblasNoTrans, nr, m, k, 1, x->data + (size_t)r0 * k, k,
                          W->data, m, 0, u, m);
            vit_bias_gelu_forward_bf16(y->data + (size_t)r0 * m, u, b ? b->data : NULL, nr, m,
                                       c.dgelu_bf16 + (size_t)r0 * m,
                                       y16 ? y16 + (size_t)r0 * m : NULL);
        }
        return vit_tape_record(t, &linear_gelu_def, VIT_OK, y, 3, in, &c, sizeof c);
    }
#else
    (void)half;
#endif
    /* Without a record nothing is kept: GELU in place. */
    vit_real *u = grad ? vit_tape_saved(t, y->size) : y->data;
    if (!u)
        return NULL;
    if (xh)
        vit_mgemm_a16(CblasNoTrans, CblasNoTrans, n, m, k, xh, k, W->data, m, 0, u, m);
    else
        vit_mgemm(CblasNoTrans, CblasNoTrans, n, m, k, 1, x->data, k, W->data, m, 0, u, m);
    c.dgelu = u;
    vit_bias_gelu_forward(y->data, u, b ? b->data : NULL, n, m);
    return vit_tape_record(t, &linear_gelu_def, VIT_OK, y, 3, in, &c, sizeof c);
}

/* ---- y = act(LN(x) W + b), the layer norm's output not kept ------------- */

/* What the backward keeps: the layer norm's row statistics, its eps, and
 * with GELU the derivative of the pre-activation (as vit_op_linear_gelu's).
 * The normalised rows h [n, in] are remade from x in the backward: an
 * elementwise pass where keeping them costs in reals per row (Swin's two
 * layer norms a block feed only their linears). */
typedef struct ln_linear_ctx {
    vit_real *mean, *rstd, *dgelu;
    vit_real eps;
} ln_linear_ctx;

/* in: x, gamma, beta, W, b (or NULL).  du = dy (or dy GELU'(u)), db +=
 * its column sums; h remade; dW += h^T du; dh = du W^T; then the layer
 * norm's backward from dh into dx, dgamma, dbeta. */
static int back_ln_linear(vit_tape *t, const vit_op_rec *r)
{
    const ln_linear_ctx *c = r->ctx;
    const vit_tensor *x = r->in[0], *g = r->in[1], *be = r->in[2], *W = r->in[3];
    const int n = vit_tape_rows(x), in = W->shape[0], out = W->shape[1];
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]), *dg = vit_tape_grad_acc(t, r->in[1]);
    vit_real *dbe = vit_tape_grad_acc(t, r->in[2]), *dW = vit_tape_grad_acc(t, r->in[3]);
    vit_real *db = r->in[4] ? vit_tape_grad_acc(t, r->in[4]) : NULL;
    if (vit_tape_status(t))
        return vit_tape_status(t);
    void *lease = NULL;
    const vit_real *du = r->out->grad;
    if (c->dgelu) {
        vit_real *w = vit_tape_dy_writable(t, r->out, &lease);
        if (!w)
            return vit_tape_status(t);
        vit_bias_gelu_backward(w, db, r->out->grad, c->dgelu, n, out);
        du = w;
    } else if (db) {
        vit_column_sums(db, du, n, out);
    }
    int rc = VIT_OK;
    vit_real *h = vit_tape_scratch(t, 2 * (size_t)n * in + 2 * (size_t)n);
    if (!h) {
        vit_tape_lease_end(lease);
        return vit_tape_status(t);
    }
    vit_real *dh = h + (size_t)n * in, *stats = dh + (size_t)n * in;
    /* The same kernel on the same rows: the forward's h, bit for bit. */
    rc = vit_layernorm_forward(h, stats, stats + n, x->data, g->data, be->data, n, in, c->eps);
    if (rc == VIT_OK && dW)
        vit_mgemm(CblasTrans, CblasNoTrans, in, out, n, 1, h, in, du, out, 1, dW, out);
    if (rc == VIT_OK && (dx || dg || dbe)) {
        vit_mgemm(CblasNoTrans, CblasTrans, n, in, out, 1, du, out, W->data, out, 0, dh, in);
        rc = vit_layernorm_backward(dx, dg, dbe, dh, x->data, c->mean, c->rstd, g->data, n, in);
    }
    vit_tape_lease_end(lease);
    return rc;
}

static const vit_op_def ln_linear_def = {"vit_tape_ln_linear", back_ln_linear, NULL, 0};

vit_tensor *vit_tape_ln_linear(vit_tape *t, vit_tensor *x, vit_tensor *gamma, vit_tensor *beta,
                               vit_real eps, vit_tensor *W, vit_tensor *b, int gelu)
{
    static const char fn[] = "vit_tape_ln_linear";
    vit_tensor *in[5] = {x, gamma, beta, W, b};
    if (!vit_tape_begin(t, fn, 4, in))
        return NULL;
    /* Without a record, or in mixed precision (whose ops keep bf16 copies
     * of their own), the two ops: nothing would be saved. */
    if (!vit_tape_wants_grad(t, 5, in) || vit_mixed_on()) {
        vit_tensor *h = vit_op_layernorm(t, x, gamma, beta, eps);
        return gelu ? vit_op_linear_gelu(t, h, W, b) : vit_op_linear(t, h, W, b);
    }
    const int d = vit_tape_last_dim(x), n = vit_tape_rows(x);
    if (vit_tape_check_shape(t, fn, "gamma", gamma, "[d], d = x's last dimension", 1, &d) ||
        vit_tape_check_shape(t, fn, "beta", beta, "[d], d = x's last dimension", 1, &d) ||
        linear_check(t, fn, x, W, b))
        return NULL;
    if (!(eps > 0) || !isfinite(eps))
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: eps must be positive and finite", fn));
    const int m = W->shape[1];
    int shape[VIT_TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = m;
    vit_tensor *y = vit_tape_output(t, x->ndim, shape, 1);
    if (!y)
        return NULL;
    ln_linear_ctx c = {vit_tape_saved(t, 2 * (size_t)n), NULL, NULL, eps};
    if (!c.mean || (gelu && !(c.dgelu = vit_tape_saved(t, y->size))))
        return NULL;
    c.rstd = c.mean + n;
    vit_real *h = vit_tape_scratch(t, (size_t)n * d);
    if (!h)
        return NULL;
    int rc = vit_layernorm_forward(h, c.mean, c.rstd, x->data, gamma->data, beta->data, n, d, eps);
    if (rc == VIT_OK && gelu) {
        vit_mgemm(CblasNoTrans, CblasNoTrans, n, m, d, 1, h, d, W->data, m, 0, c.dgelu, m);
        vit_bias_gelu_forward(y->data, c.dgelu, b ? b->data : NULL, n, m);
    } else if (rc == VIT_OK) {
        rc = vit_linear_forward(y->data, h, W->data, b ? b->data : NULL, n, d, m);
    }
    return vit_tape_record(t, &ln_linear_def, rc, y, 5, in, &c, sizeof c);
}
