/*
 * vit_op_window_attn: Swin's windowed self-attention on the tape, over the
 * windowed kernel (src/kernels/attention_window.c), forward beside backward.
 * Shapes (vit/tape.h): qkv [B, N, 3*D] (Q, K, V side by side, as a fused
 * projection makes them; N = grid_h * grid_w, D = H * d), bias NULL or
 * [1 or H, T, T] (T = Mh*Mw), y [B, N, D].  The kernel reads Q, K and V out
 * of qkv in place (row stride 3*D) and its backward writes their gradients
 * there the same way: no copies.
 */
#include <stdio.h>

#include "error.h"
#include "tape_internal.h"
#include "vit/attention.h"
#include "window_internal.h"

/* What the backward keeps: the kernel's shape (its bias pointer is taken
 * from the tape again) and the forward's row log-sum-exps [B, H, nW, T]:
 * the weights are remade in the backward, so the op keeps one value per
 * token and head, not T; unless opts->keep_weights, when w.probs holds
 * the forward's weights [B, H, nW, T, T], the backward reads them and lse
 * is NULL (the backward would not read it). */
typedef struct window_ctx {
    vit_window_attn w;
    vit_real *lse;
} window_ctx;

/* in: qkv, bias (NULL when absent).  dQ, dK, dV go to qkv's gradient at
 * columns 0, D, 2D (stride 3D), written when it is fresh, else added;
 * dbias is added to the bias's. */
static int back_window(vit_tape *t, const vit_op_rec *r)
{
    const window_ctx *c = r->ctx;
    /* A fresh dqkv (nothing else reads qkv, as in Swin's blocks) is written
     * whole by the kernel (every token's Q, K and V columns, rows 3D
     * apart): not cleared first. */
    int fresh = 0;
    vit_real *dqkv = vit_tape_grad_out(t, r->in[0], &fresh);
    vit_real *dbias = r->in[1] ? vit_tape_grad_acc(t, r->in[1]) : NULL;
    if (vit_tape_status(t))
        return vit_tape_status(t);
    void *lease, *lease_bias = NULL;
    const vit_real *qkv = vit_tape_values(t, r->in[0], &lease);
    if (!qkv)
        return vit_tape_status(t);
    vit_window_attn w = c->w;
    if (r->in[1] && !(w.bias = vit_tape_values(t, r->in[1], &lease_bias))) {
        vit_tape_lease_end(lease);
        return vit_tape_status(t);
    }
    const size_t D = (size_t)c->w.heads * c->w.d_k;
    int rc = vit_window_attn_backward_to(&w, dqkv, dqkv ? dqkv + D : NULL,
                                         dqkv ? dqkv + 2 * D : NULL, dbias, r->out->grad,
                                         c->lse, qkv, qkv + D, qkv + 2 * D, fresh);
    vit_tape_lease_end(lease_bias);
    vit_tape_lease_end(lease);
    return rc;
}

static const vit_op_def window_def = {"vit_op_window_attn", back_window, NULL, 0};

vit_tensor *vit_op_window_attn(vit_tape *t, vit_tensor *qkv, vit_tensor *bias,
                               const vit_window_opts *opts)
{
    return vit_tape_window_attn_kept(t, qkv, bias, opts, VIT_KEEP_FLOAT);
}

/* The output is read by no backward of this op: kept as keep says. */
vit_tensor *vit_tape_window_attn_kept(vit_tape *t, vit_tensor *qkv, vit_tensor *bias,
                                      const vit_window_opts *opts, int keep)
{
    static const char fn[] = "vit_op_window_attn";
    vit_tensor *in[2] = {qkv, bias};
    if (!vit_tape_begin(t, fn, 1, in))
        return NULL;
    if (!opts)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: opts is NULL", fn));
    const int H = opts->heads, Mh = opts->window_h, Mw = opts->window_w;
    if (H < 1 || opts->grid_h < 1 || opts->grid_w < 1 || Mh < 1 || Mw < 1)
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "%s: heads (%d), grid_h (%d), grid_w (%d), window_h (%d) and window_w (%d) must be "
            "positive", fn, H, opts->grid_h, opts->grid_w, Mh, Mw));
    if ((long long)opts->grid_h * opts->grid_w > 1 << 30 || Mh > 256 || Mw > 256)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: grid %d x %d or window %d x %d too "
                                          "large", fn, opts->grid_h, opts->grid_w, Mh, Mw));
    const int N = opts->grid_h * opts->grid_w, T = Mh * Mw;
    if (vit_tape_check_shape(t, fn, "qkv", qkv, "[B, grid_h*grid_w, 3*D]", 3,
                             (int[]){-1, N, -1}))
        return NULL;
    const int D3 = qkv->shape[2];
    if (D3 % (3 * H) != 0)
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "%s: qkv's last dimension %d is not 3 * heads (%d) * d for a whole d", fn, D3, H));
    const int D = D3 / 3;
    if (bias) {
        int bh = bias->ndim == 3 && bias->shape[0] == 1 ? 1 : H;
        if (vit_tape_check_shape(t, fn, "bias", bias, "[1 or heads, window_h*window_w, window_h*window_w]", 3,
                                 (int[]){bh, T, T}))
            return NULL;
    }
    vit_window_attn w = {.batch = qkv->shape[0], .heads = H, .grid_h = opts->grid_h,
                         .grid_w = opts->grid_w, .window_h = Mh, .window_w = Mw,
                         .shift_h = opts->shift_h, .shift_w = opts->shift_w,
                         .d_k = D / H, .d_v = D / H, .scale = opts->scale,
                         .bias = bias ? bias->data : NULL, .bias_heads = bias ? bias->shape[0] : 0,
                         .ld_q = D3, .ld_k = D3, .ld_v = D3};
    size_t np = vit_window_attn_lse_size(&w); /* also checks the window's rules */
    if (np == 0)
        return vit_tape_error(t, VIT_EINVAL);
    const int grad = vit_tape_wants_grad(t, 2, in);
    vit_tensor *y = vit_tape_output_kept(t, 3, (int[]){w.batch, N, D}, grad, keep);
    if (!y)
        return NULL;
    window_ctx c = {w, NULL};
    if (opts->keep_weights && grad) {
        size_t nw;
        if (!vit_mul_size(&nw, np, (size_t)T))
            return vit_tape_error(t, vit_fail(VIT_ENOMEM, "%s: the weights' size overflows",
                                              fn));
        if (!(c.w.probs = w.probs = vit_tape_saved(t, nw)))
            return NULL;
    } else if (!(c.lse = vit_tape_saved(t, np))) {
        return NULL;
    }
    c.w.bias = NULL; /* the backward takes it from the tape */
    int rc = vit_window_attn_forward(&w, y->data, c.lse, qkv->data, qkv->data + D,
                                     qkv->data + 2 * D);
    return vit_tape_record(t, &window_def, rc, y, 2, in, &c, sizeof c);
}
