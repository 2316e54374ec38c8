/* Layer normalization over the last dimension, forward and backward. */
#include "vit/layernorm.h"

#include <math.h>

#include "error.h"
#include "threads.h"

#define TRY(e) do { int rc_ = (e); if (rc_ != VIT_OK) return rc_; } while (0)

/* x [n, d], gamma [d], beta [d]  ->  y [n, d], mean [n], rstd [n] */
int vit_layernorm_forward(vit_real *y, vit_real *mean, vit_real *rstd,
                          const vit_real *x, const vit_real *gamma,
                          const vit_real *beta, int n, int d, vit_real eps)
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
    int nt = vit_threads_for(8.0 * n * d);
    VIT_PARALLEL_FOR(nt)
    for (int i = 0; i < n; i++) {
        const vit_real *xr = x + (size_t)i * d;
        vit_real *yr = y + (size_t)i * d;
        /* Two passes (mean, then squared deviations) in double: the one-pass
         * E[x^2] - E[x]^2 cancels badly when |mean| >> std. */
        double m = 0.0;
        for (int j = 0; j < d; j++)
            m += xr[j];
        m /= d;
        double v = 0.0;
        for (int j = 0; j < d; j++) {
            double c = xr[j] - m;
            v += c * c;
        }
        v /= d; /* biased, as PyTorch */
        double rs = 1.0 / sqrt(v + (double)eps);
        mean[i] = (vit_real)m;
        rstd[i] = (vit_real)rs;
        /* Reads xr[j] before writing yr[j], so y may alias x. */
        for (int j = 0; j < d; j++)
            yr[j] = (vit_real)((xr[j] - m) * rs * gamma[j] + beta[j]);
    }
    return VIT_OK;
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

    int nt = vit_threads_for(12.0 * n * d);
    /* dx: rows are independent. */
    if (dx) {
        VIT_PARALLEL_FOR(nt)
        for (int i = 0; i < n; i++) {
            const vit_real *xr = x + (size_t)i * d;
            const vit_real *dyr = dy + (size_t)i * d;
            vit_real *dxr = dx + (size_t)i * d;
            double m = mean[i], rs = rstd[i];
            double sum_g = 0.0, sum_gx = 0.0;
            for (int j = 0; j < d; j++) {
                double xhat = (xr[j] - m) * rs;
                double g = (double)dyr[j] * gamma[j];
                sum_g += g;
                sum_gx += g * xhat;
            }
            double mg = sum_g / d, mgx = sum_gx / d;
            for (int j = 0; j < d; j++) {
                double xhat = (xr[j] - m) * rs;
                double g = (double)dyr[j] * gamma[j];
                dxr[j] += (vit_real)(rs * (g - mg - xhat * mgx));
            }
        }
    }
    /* dgamma, dbeta: sums over rows, so the columns are split instead and
     * every column adds its rows in order, whatever the thread count. */
    if (dgamma || dbeta) {
        int ntc = d / 8 < nt ? (d / 8 > 1 ? d / 8 : 1) : nt;
        VIT_PARALLEL_FOR(ntc)
        for (int t = 0; t < ntc; t++) {
            size_t lo, hi;
            vit_split((size_t)d, t, ntc, &lo, &hi);
            for (int i = 0; i < n; i++) {
                const vit_real *xr = x + (size_t)i * d;
                const vit_real *dyr = dy + (size_t)i * d;
                double m = mean[i], rs = rstd[i];
                if (dgamma)
                    for (size_t j = lo; j < hi; j++)
                        dgamma[j] += (vit_real)(dyr[j] * ((xr[j] - m) * rs));
                if (dbeta)
                    for (size_t j = lo; j < hi; j++)
                        dbeta[j] += dyr[j];
            }
        }
    }
    return VIT_OK;
}
