/* Layer normalization over the last dimension, forward and backward. */
#include "vit/layernorm.h"

#include <math.h>

#include "error.h"
#include "fastmath.h"
#include "layernorm_internal.h"
#include "threads.h"
#include "vit/bf16.h"

typedef struct {
    vit_real *y, *mean, *rstd, *dx, *dgamma, *dbeta, *sum;
    uint16_t *y16; /* y rounded to bf16 row by row, or NULL */
    const vit_real *x, *gamma, *beta, *dy, *cmean, *crstd, *x2;
    int d, n_rows;
    vit_real eps;
} ln_job;

/* Rows lo..hi-1 of the forward.  Two passes (mean, then squared
 * deviations): the one-pass E[x^2] - E[x]^2 cancels badly when |mean| >>
 * std.  Sums are in the build's precision with SIMD partial sums (the
 * `omp simd` reductions, compiled with -fopenmp-simd, no OpenMP runtime);
 * widening every element to double cost most of the time in float32. */
FM_CLONES
static void ln_forward_rows(void *p, size_t lo, size_t hi)
{
    const ln_job *J = p;
    const int d = J->d;
    const vit_real *gamma = J->gamma, *beta = J->beta;
    for (size_t i = lo; i < hi; i++) {
        const vit_real *xr = J->x + i * d;
        vit_real *yr = J->y + i * d;
        vit_real m = 0;
        if (J->sum) {
            /* The residual add fused in: the row of the sum is written
             * once, then read back from L1 by the passes below. */
            const vit_real *br = J->x2 + i * d;
            vit_real *sr = J->sum + i * d;
#pragma omp simd reduction(+ : m)
            for (int j = 0; j < d; j++) {
                sr[j] = xr[j] + br[j];
                m += sr[j];
            }
            xr = sr;
        } else {
#pragma omp simd reduction(+ : m)
            for (int j = 0; j < d; j++)
                m += xr[j];
        }
        m /= (vit_real)d;
        vit_real v = 0;
#pragma omp simd reduction(+ : v)
        for (int j = 0; j < d; j++)
            v += (xr[j] - m) * (xr[j] - m);
        v /= (vit_real)d; /* biased, as PyTorch */
        vit_real rs = (vit_real)(1.0 / sqrt((double)v + (double)J->eps));
        J->mean[i] = m;
        J->rstd[i] = rs;
        /* Reads xr[j] before writing yr[j], so y may alias x. */
        for (int j = 0; j < d; j++)
            yr[j] = (xr[j] - m) * rs * gamma[j] + beta[j];
#ifndef VIT_DOUBLE
        if (J->y16) /* while the row is in L1: no second pass over y */
            vit_bf16_from_floats(J->y16 + i * d, yr, (size_t)d);
#endif
    }
}

/* x [n, d], gamma [d], beta [d]  ->  y [n, d], mean [n], rstd [n] */
int vit_layernorm_forward(vit_real *y, vit_real *mean, vit_real *rstd,
                          const vit_real *x, const vit_real *gamma,
                          const vit_real *beta, int n, int d, vit_real eps)
{
    return vit_layernorm_forward16(y, NULL, mean, rstd, x, gamma, beta, n, d, eps);
}

int vit_layernorm_forward16(vit_real *y, uint16_t *y16, vit_real *mean, vit_real *rstd,
                            const vit_real *x, const vit_real *gamma, const vit_real *beta,
                            int n, int d, vit_real eps)
{
    static const char fn[] = "vit_layernorm_forward";
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "mean", mean));
    TRY(vit_check_ptr(fn, "rstd", rstd));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(vit_check_ptr(fn, "gamma", gamma));
    TRY(vit_check_ptr(fn, "beta", beta));
    TRY(vit_check_dim(fn, "n", n));
    TRY(vit_check_dim(fn, "d", d));
    if (!(eps > 0) || !isfinite((double)eps))
        return vit_fail(VIT_EINVAL, "%s: eps must be positive and finite, got %g", fn, (double)eps);
    /* Rows are independent: split across threads. */
    ln_job J = {.y = y, .y16 = y16, .mean = mean, .rstd = rstd, .x = x, .gamma = gamma,
                .beta = beta, .d = d, .eps = eps};
    vit_parallel(vit_threads_for(8.0 * n * d), (size_t)n, ln_forward_rows, &J);
    return VIT_OK;
}

/* s = a + b, then y = LN(s): the residual add and the layer norm after
 * it in one pass over the rows (arguments checked by the tape). */
void vit_add_layernorm_forward(vit_real *s, vit_real *y, uint16_t *y16, vit_real *mean,
                               vit_real *rstd, const vit_real *a, const vit_real *b,
                               const vit_real *gamma, const vit_real *beta, int n, int d,
                               vit_real eps)
{
    ln_job J = {.y = y, .y16 = y16, .mean = mean, .rstd = rstd, .sum = s, .x = a, .x2 = b, .gamma = gamma,
                .beta = beta, .d = d, .eps = eps};
    vit_parallel(vit_threads_for(9.0 * n * d), (size_t)n, ln_forward_rows, &J);
}

/* Columns lo..hi-1 of dgamma and dbeta, each summing its rows in order. */
FM_CLONES
static void ln_dparam_cols(void *p, size_t lo, size_t hi)
{
    const ln_job *J = p;
    const int d = J->d;
    for (size_t i = 0; i < (size_t)J->n_rows; i++) {
        const vit_real *xr = J->x + i * d;
        const vit_real *dyr = J->dy + i * d;
        const vit_real m = J->cmean[i], rs = J->crstd[i];
        if (J->dgamma)
            for (size_t j = lo; j < hi; j++)
                J->dgamma[j] += dyr[j] * ((xr[j] - m) * rs);
        if (J->dbeta)
            for (size_t j = lo; j < hi; j++)
                J->dbeta[j] += dyr[j];
    }
}

/* Rows lo..hi-1 of dx, sums in the build's precision as in the forward;
 * with dgamma and dbeta (both non-NULL) those too, in the same pass: for a
 * call that runs on one thread (every layer norm inside a training step's
 * batch slice), where a separate ln_dparam_cols pass read x and dy a second
 * time and made xhat again.  It adds xhat dy and dy to dgamma and dbeta row
 * after row, as ln_dparam_cols does (the same expressions in the same
 * order, and no contraction of a * b + c under -std=c11), so the results
 * are bitwise those of the two passes.  dx must not alias dy. */
FM_CLONES
static void ln_back_rows(void *p, size_t lo, size_t hi)
{
    const ln_job *J = p;
    const int d = J->d;
    const vit_real *gamma = J->gamma;
    vit_real *restrict dgamma = J->dgamma, *restrict dbeta = J->dbeta;
    for (size_t i = lo; i < hi; i++) {
        const vit_real *restrict xr = J->x + i * d;
        const vit_real *restrict dyr = J->dy + i * d;
        vit_real *restrict dxr = J->dx + i * d;
        const vit_real m = J->cmean[i], rs = J->crstd[i];
        vit_real sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (int j = 0; j < d; j++) {
            vit_real g = dyr[j] * gamma[j];
            sum_g += g;
            sum_gx += g * ((xr[j] - m) * rs);
        }
        const vit_real mg = sum_g / (vit_real)d, mgx = sum_gx / (vit_real)d;
        if (!dgamma || !dbeta) {
            for (int j = 0; j < d; j++) {
                vit_real xhat = (xr[j] - m) * rs;
                dxr[j] += rs * (dyr[j] * gamma[j] - mg - xhat * mgx);
            }
            continue;
        }
        /* Elementwise (no reduction): simd changes no bit.  gcc left this
         * loop scalar without the pragma (four arrays it could not prove
         * apart). */
#pragma omp simd
        for (int j = 0; j < d; j++) {
            vit_real xhat = (xr[j] - m) * rs;
            dgamma[j] += dyr[j] * xhat;
            dbeta[j] += dyr[j];
            dxr[j] += rs * (dyr[j] * gamma[j] - mg - xhat * mgx);
        }
    }
}

/* dy [n, d]; x [n, d], mean [n], rstd [n], gamma [d]
 *   ->  dx [n, d], dgamma [d], dbeta [d] (all +=)
 *
 * With xhat = (x - mean) rstd and g = dy * gamma, differentiating through
 * mean and rstd gives, per row,
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
int vit_layernorm_backward(vit_real *dx, vit_real *dgamma, vit_real *dbeta,
                           const vit_real *dy, const vit_real *x,
                           const vit_real *mean, const vit_real *rstd,
                           const vit_real *gamma, int n, int d)
{
    static const char fn[] = "vit_layernorm_backward";
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(vit_check_ptr(fn, "mean", mean));
    TRY(vit_check_ptr(fn, "rstd", rstd));
    TRY(vit_check_ptr(fn, "gamma", gamma));
    TRY(vit_check_dim(fn, "n", n));
    TRY(vit_check_dim(fn, "d", d));

    /* dx: rows are independent.  dgamma, dbeta: sums over rows, so the
     * columns are split instead and every column adds its rows in order,
     * whatever the thread count. */
    int nt = vit_threads_for(12.0 * n * d);
    ln_job J = {.dx = dx, .dgamma = dgamma, .dbeta = dbeta, .x = x, .gamma = gamma, .dy = dy,
                .cmean = mean, .crstd = rstd, .d = d, .n_rows = n};
    if (dx && dgamma && dbeta && vit_parallel_width(nt, (size_t)n) <= 1) {
        ln_back_rows(&J, 0, (size_t)n); /* one thread: one pass (bitwise the same) */
        return VIT_OK;
    }
    if (dx) {
        ln_job rows = J; /* dx alone, by rows; the parameters' sums below */
        rows.dgamma = rows.dbeta = NULL;
        vit_parallel(nt, (size_t)n, ln_back_rows, &rows);
    }
    if (dgamma || dbeta)
        vit_parallel(d / 8 < nt ? d / 8 : nt, (size_t)d, ln_dparam_cols, &J);
    return VIT_OK;
}
