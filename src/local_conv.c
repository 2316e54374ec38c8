/*
 * The 3x3 depthwise convolution of the patch tokens over their grid, added
 * to them (vit/local_conv.h): kernels forward and backward, and the tape op.
 */
#include "vit/local_conv.h"

#include <string.h>

#include "error.h"
#include "tape_internal.h"

static int bad_args(const char *fn, const void *a, const void *b, const void *c, int B, int GH,
                    int GW, int C)
{
    if (!a || !b || !c)
        return vit_fail(VIT_EINVAL, "%s: a buffer is NULL", fn);
    if (B < 1 || GH < 1 || GW < 1 || C < 1)
        return vit_fail(VIT_EINVAL, "%s: B %d, GH %d, GW %d, C %d: each must be at least 1",
                        fn, B, GH, GW, C);
    return VIT_OK;
}

/* Shapes: x, y [B, T, C], T = 1 + GH*GW; w [9, C]; bias [C]. */
int vit_local_conv_forward(vit_real *y, const vit_real *x, const vit_real *w,
                           const vit_real *bias, int B, int GH, int GW, int C)
{
    int rc = bad_args("vit_local_conv_forward", y, x, w, B, GH, GW, C);
    if (rc)
        return rc;
    const size_t T = 1 + (size_t)GH * GW;
    memcpy(y, x, (size_t)B * T * C * sizeof *y); /* the residual, class token included */
    for (int b = 0; b < B; b++) {
        const vit_real *xb = x + (size_t)b * T * C + C; /* patch token 0 */
        vit_real *yb = y + (size_t)b * T * C + C;
        for (int i = 0; i < GH; i++)
            for (int j = 0; j < GW; j++) {
                vit_real *yo = yb + ((size_t)i * GW + j) * C;
                if (bias)
                    for (int c = 0; c < C; c++)
                        yo[c] += bias[c];
                for (int dy = -1; dy <= 1; dy++) {
                    if (i + dy < 0 || i + dy >= GH)
                        continue;
                    for (int dx = -1; dx <= 1; dx++) {
                        if (j + dx < 0 || j + dx >= GW)
                            continue;
                        const vit_real *wk = w + (size_t)((dy + 1) * 3 + dx + 1) * C;
                        const vit_real *xi = xb + ((size_t)(i + dy) * GW + j + dx) * C;
                        for (int c = 0; c < C; c++)
                            yo[c] += wk[c] * xi[c];
                    }
                }
            }
    }
    return VIT_OK;
}

int vit_local_conv_backward(vit_real *dx, vit_real *dw, vit_real *dbias, const vit_real *dy,
                            const vit_real *x, const vit_real *w, int B, int GH, int GW, int C)
{
    int rc = bad_args("vit_local_conv_backward", dy, x, w, B, GH, GW, C);
    if (rc)
        return rc;
    const size_t T = 1 + (size_t)GH * GW;
    if (dx) /* the residual */
        for (size_t n = 0; n < (size_t)B * T * C; n++)
            dx[n] += dy[n];
    for (int b = 0; b < B; b++) {
        const vit_real *xb = x + (size_t)b * T * C + C, *gb = dy + (size_t)b * T * C + C;
        vit_real *dxb = dx ? dx + (size_t)b * T * C + C : NULL;
        for (int i = 0; i < GH; i++)
            for (int j = 0; j < GW; j++) {
                const vit_real *go = gb + ((size_t)i * GW + j) * C;
                if (dbias)
                    for (int c = 0; c < C; c++)
                        dbias[c] += go[c];
                for (int dy_ = -1; dy_ <= 1; dy_++) {
                    if (i + dy_ < 0 || i + dy_ >= GH)
                        continue;
                    for (int dx_ = -1; dx_ <= 1; dx_++) {
                        if (j + dx_ < 0 || j + dx_ >= GW)
                            continue;
                        size_t k = (size_t)((dy_ + 1) * 3 + dx_ + 1) * C;
                        size_t q = ((size_t)(i + dy_) * GW + j + dx_) * C;
                        if (dw)
                            for (int c = 0; c < C; c++)
                                dw[k + c] += go[c] * xb[q + c];
                        if (dxb)
                            for (int c = 0; c < C; c++)
                                dxb[q + c] += w[k + c] * go[c];
                    }
                }
            }
    }
    return VIT_OK;
}

/* ---- the tape op ---------------------------------------------------------- */

typedef struct local_ctx {
    int gh, gw;
} local_ctx;

/* in: x, w, bias (or NULL); all accumulated.  x's values are read back
 * through vit_tape_values (a block's input may be kept in bf16). */
static int back_local(vit_tape *t, const vit_op_rec *r)
{
    const local_ctx *c = r->ctx;
    const vit_tensor *x = r->in[0];
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]), *dw = vit_tape_grad_acc(t, r->in[1]);
    vit_real *db = r->in[2] ? vit_tape_grad_acc(t, r->in[2]) : NULL;
    if (vit_tape_status(t))
        return vit_tape_status(t);
    void *lease = NULL;
    const vit_real *xv = vit_tape_values(t, x, &lease);
    if (!xv)
        return vit_tape_status(t);
    int rc = vit_local_conv_backward(dx, dw, db, r->out->grad, xv, r->in[1]->data, x->shape[0],
                                     c->gh, c->gw, x->shape[2]);
    vit_tape_lease_end(lease);
    return rc;
}

static const vit_op_def local_def = {"vit_op_local_conv", back_local, NULL, 0};

vit_tensor *vit_op_local_conv(vit_tape *t, vit_tensor *x, vit_tensor *w, vit_tensor *bias,
                              int GH, int GW)
{
    vit_tensor *in[3] = {x, w, bias};
    if (!vit_tape_begin(t, local_def.name, 2, in))
        return NULL;
    if (GH < 1 || GW < 1 || x->ndim != 3 || (size_t)x->shape[1] != 1 + (size_t)GH * GW
        || w->size != (size_t)9 * x->shape[2] || (bias && bias->size != (size_t)x->shape[2]))
        return vit_tape_error(t, vit_fail(VIT_EINVAL,
            "vit_op_local_conv: x must be [B, 1 + %d*%d, C], w [9, C] and bias [C]", GH, GW));
    vit_tensor *y = vit_tape_output(t, 3, x->shape, vit_tape_wants_grad(t, 3, in));
    if (!y)
        return NULL;
    int rc = vit_local_conv_forward(y->data, x->data, w->data, bias ? bias->data : NULL,
                                    x->shape[0], GH, GW, x->shape[2]);
    local_ctx c = {GH, GW};
    return vit_tape_record(t, &local_def, rc, y, 3, in, &c, sizeof c);
}
