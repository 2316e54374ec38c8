/* Fully connected layer y = x W + b, forward and backward, on BLAS. */
#include "vit/linear.h"

#include "blas.h"
#include "error.h"
#include "mixed.h"
#include "threads.h"

static int check_sizes(const char *fn, int n, int in, int out)
{
    TRY(vit_check_dim(fn, "n", n));
    TRY(vit_check_dim(fn, "in", in));
    TRY(vit_check_dim(fn, "out", out));
    return VIT_OK;
}

/* x [n, in], W [in, out], b [out] or NULL  ->  y [n, out] */
int vit_linear_forward(vit_real *y, const vit_real *x, const vit_real *W,
                       const vit_real *b, int n, int in, int out)
{
    static const char fn[] = "vit_linear_forward";
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(vit_check_ptr(fn, "W", W));
    TRY(check_sizes(fn, n, in, out));
    if (y == x)
        return vit_fail(VIT_EINVAL, "%s: y must not alias x", fn);

    /* The bias is broadcast into y first, so that one GEMM with beta = 1
     * adds x W on top of it. */
    vit_mgemm_bias(n, out, in, x, in, W, out, b, y, out);
    return VIT_OK;
}

/* dy [n, out]; x [n, in], W [in, out]  ->  dx [n, in], dW [in, out], db [out] (all +=) */
int vit_linear_backward(vit_real *dx, vit_real *dW, vit_real *db,
                        const vit_real *dy, const vit_real *x, const vit_real *W,
                        int n, int in, int out)
{
    static const char fn[] = "vit_linear_backward";
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(check_sizes(fn, n, in, out));
    /* x is only read for dW and W only for dx, so each is required only
     * when the gradient that needs it is wanted. */
    if (dx)
        TRY(vit_check_ptr(fn, "W", W));
    if (dW)
        TRY(vit_check_ptr(fn, "x", x));

    if (dx) /* dx[n, in] += dy[n, out] W[in, out]^T */
        vit_mgemm(CblasNoTrans, CblasTrans, n, in, out, 1, dy, out, W, out, 1, dx, in);
    if (dW) /* dW[in, out] += x[n, in]^T dy[n, out] */
        vit_mgemm(CblasTrans, CblasNoTrans, in, out, n, 1, x, in, dy, out, 1, dW, out);
    if (db)
        vit_column_sums(db, dy, n, out);
    return VIT_OK;
}
