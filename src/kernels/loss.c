/* Softmax cross-entropy with optional label smoothing, fused, mean over rows. */
#include "vit/loss.h"

#include <math.h>

#include "error.h"

/* What every loss checks first: labels non-NULL, n and classes positive,
 * smoothing in [0, 1). */
static int check_sizes(const char *fn, const int *labels, int n, int classes,
                       vit_real smoothing)
{
    TRY(vit_check_ptr(fn, "labels", labels));
    TRY(vit_check_dim(fn, "n", n));
    TRY(vit_check_dim(fn, "classes", classes));
    if (!(smoothing >= 0 && smoothing < 1))
        return vit_fail(VIT_EINVAL, "%s: smoothing must be in [0, 1), got %g", fn,
                        (double)smoothing);
    return VIT_OK;
}

/* check_sizes, and every label in 0..classes-1. */
static int check_common(const char *fn, const int *labels, int n, int classes,
                        vit_real smoothing)
{
    TRY(check_sizes(fn, labels, n, classes, smoothing));
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return vit_fail(VIT_EINVAL, "%s: labels[%d] = %d is outside 0..%d", fn, i,
                            labels[i], classes - 1);
    return VIT_OK;
}

/* logits [n, C], labels [n] -> *loss (scalar), probs [n, C]
 *
 * Per row, with lse = max + log sum exp(x - max) and log p_c = x_c - lse:
 *   -sum_c target_c log p_c = -(1 - s) log p_y - (s / C) sum_c log p_c. */
int vit_cross_entropy_forward(vit_real *loss, vit_real *probs,
                              const vit_real *logits, const int *labels,
                              int n, int classes, vit_real smoothing)
{
    static const char fn[] = "vit_cross_entropy_forward";
    TRY(vit_check_ptr(fn, "loss", loss));
    TRY(vit_check_ptr(fn, "probs", probs));
    TRY(vit_check_ptr(fn, "logits", logits));
    TRY(check_common(fn, labels, n, classes, smoothing));

    double s = smoothing, total = 0.0;
    for (int i = 0; i < n; i++) {
        const vit_real *xr = logits + (size_t)i * classes;
        vit_real *pr = probs + (size_t)i * classes;
        double mx = -INFINITY, sum_x = 0.0;
        for (int c = 0; c < classes; c++) {
            double v = xr[c];
            if (!isfinite(v))
                return vit_fail(VIT_ENUM, "%s: logits[%d, %d] is not finite", fn, i, c);
            if (v > mx)
                mx = v;
            sum_x += v;
        }
        double z = 0.0;
        for (int c = 0; c < classes; c++)
            z += exp((double)xr[c] - mx);
        double lse = mx + log(z);
        for (int c = 0; c < classes; c++)
            pr[c] = (vit_real)exp((double)xr[c] - lse);
        double logp_y = (double)xr[labels[i]] - lse;
        double sum_logp = sum_x - classes * lse;
        total += -(1.0 - s) * logp_y - (s / classes) * sum_logp;
    }
    *loss = (vit_real)(total / n);
    return VIT_OK;
}

/* probs [n, C], labels [n], dloss (scalar) -> dlogits [n, C] += */
int vit_cross_entropy_backward(vit_real *dlogits, const vit_real *probs,
                               const int *labels, int n, int classes,
                               vit_real smoothing, vit_real dloss)
{
    static const char fn[] = "vit_cross_entropy_backward";
    TRY(vit_check_ptr(fn, "dlogits", dlogits));
    TRY(vit_check_ptr(fn, "probs", probs));
    TRY(check_common(fn, labels, n, classes, smoothing));
    if (!isfinite((double)dloss))
        return vit_fail(VIT_ENUM, "%s: dloss is not finite", fn);

    double scale = (double)dloss / n;
    double off = (double)smoothing / classes;   /* target off the label */
    double on = 1.0 - (double)smoothing + off;  /* target at the label */
    for (int i = 0; i < n; i++) {
        const vit_real *pr = probs + (size_t)i * classes;
        vit_real *dr = dlogits + (size_t)i * classes;
        for (int c = 0; c < classes; c++) {
            double t = c == labels[i] ? on : off;
            dr[c] += (vit_real)(scale * (pr[c] - t));
        }
    }
    return VIT_OK;
}

/* Row i's weight in the masked loss: 0 for an ignored row, else
 * weights[i] (1 without weights). */
static double row_weight(const int *labels, const vit_real *weights, int i, int ignore)
{
    return labels[i] == ignore ? 0.0 : weights ? (double)weights[i] : 1.0;
}

/* The masked loss's checks: labels in 0..C-1 or ignore, weights >= 0 and
 * finite; *total gets the sum of the weights. */
static int check_masked(const char *fn, const int *labels, const vit_real *weights, int n,
                        int classes, vit_real smoothing, int ignore, double *total)
{
    TRY(check_sizes(fn, labels, n, classes, smoothing));
    *total = 0;
    for (int i = 0; i < n; i++) {
        if (labels[i] != ignore && (labels[i] < 0 || labels[i] >= classes))
            return vit_fail(VIT_EINVAL, "%s: labels[%d] = %d is outside 0..%d (and is not the "
                            "ignore label %d)", fn, i, labels[i], classes - 1, ignore);
        if (weights && !(weights[i] >= 0 && isfinite((double)weights[i])))
            return vit_fail(VIT_EINVAL, "%s: weights[%d] = %g is not a finite weight >= 0", fn,
                            i, (double)weights[i]);
        *total += row_weight(labels, weights, i, ignore);
    }
    return VIT_OK;
}

/* logits [n, C], labels [n] (ignore: left out), weights [n] or NULL ->
 * *loss = sum_i w_i l_i / sum_i w_i (0 when nothing counts), probs [n, C]
 * (rows of ignored labels too) */
int vit_cross_entropy_masked_forward(vit_real *loss, vit_real *probs, const vit_real *logits,
                                     const int *labels, const vit_real *weights, int n,
                                     int classes, vit_real smoothing, int ignore)
{
    static const char fn[] = "vit_cross_entropy_masked_forward";
    double wsum;
    TRY(vit_check_ptr(fn, "loss", loss));
    TRY(vit_check_ptr(fn, "probs", probs));
    TRY(vit_check_ptr(fn, "logits", logits));
    TRY(check_masked(fn, labels, weights, n, classes, smoothing, ignore, &wsum));
    double s = smoothing, total = 0.0;
    for (int i = 0; i < n; i++) {
        const vit_real *xr = logits + (size_t)i * classes;
        vit_real *pr = probs + (size_t)i * classes;
        double mx = -INFINITY, sum_x = 0.0, z = 0.0;
        for (int c = 0; c < classes; c++) {
            double v = xr[c];
            if (!isfinite(v))
                return vit_fail(VIT_ENUM, "%s: logits[%d, %d] is not finite", fn, i, c);
            mx = v > mx ? v : mx;
            sum_x += v;
        }
        for (int c = 0; c < classes; c++)
            z += exp((double)xr[c] - mx);
        double lse = mx + log(z);
        for (int c = 0; c < classes; c++)
            pr[c] = (vit_real)exp((double)xr[c] - lse);
        double w = row_weight(labels, weights, i, ignore);
        if (w == 0)
            continue;
        double logp_y = (double)xr[labels[i]] - lse;
        total += w * (-(1.0 - s) * logp_y - (s / classes) * (sum_x - classes * lse));
    }
    *loss = wsum > 0 ? (vit_real)(total / wsum) : 0;
    return VIT_OK;
}

/* probs [n, C], labels [n], weights [n] or NULL, dloss ->
 * dlogits [n, C] += dloss w_i / sum w (p - target); ignored rows get 0 */
int vit_cross_entropy_masked_backward(vit_real *dlogits, const vit_real *probs, const int *labels,
                                      const vit_real *weights, int n, int classes,
                                      vit_real smoothing, int ignore, vit_real dloss)
{
    static const char fn[] = "vit_cross_entropy_masked_backward";
    double wsum;
    TRY(vit_check_ptr(fn, "dlogits", dlogits));
    TRY(vit_check_ptr(fn, "probs", probs));
    TRY(check_masked(fn, labels, weights, n, classes, smoothing, ignore, &wsum));
    if (!isfinite((double)dloss))
        return vit_fail(VIT_ENUM, "%s: dloss is not finite", fn);
    if (wsum == 0)
        return VIT_OK;
    double off = (double)smoothing / classes, on = 1.0 - (double)smoothing + off;
    for (int i = 0; i < n; i++) {
        double scale = (double)dloss * row_weight(labels, weights, i, ignore) / wsum;
        if (scale == 0)
            continue;
        const vit_real *pr = probs + (size_t)i * classes;
        vit_real *dr = dlogits + (size_t)i * classes;
        for (int c = 0; c < classes; c++)
            dr[c] += (vit_real)(scale * (pr[c] - (c == labels[i] ? on : off)));
    }
    return VIT_OK;
}

/* Soft targets [n, C]: finite and >= 0. */
static int check_soft(const char *fn, const vit_real *targets, int n, int classes)
{
    TRY(vit_check_ptr(fn, "targets", targets));
    TRY(vit_check_dim(fn, "n", n));
    TRY(vit_check_dim(fn, "classes", classes));
    for (int i = 0; i < n; i++)
        for (int c = 0; c < classes; c++) {
            double v = targets[(size_t)i * classes + c];
            if (!(v >= 0 && isfinite(v)))
                return vit_fail(VIT_EINVAL, "%s: targets[%d, %d] = %g is not a finite value >= 0",
                                fn, i, c, v);
        }
    return VIT_OK;
}

/* logits [n, C], targets [n, C] -> *loss (scalar), probs [n, C]
 *
 * Per row, with lse = max + log sum exp(x - max):
 *   -sum_c t_c log p_c = S lse - sum_c t_c x_c,  S = sum_c t_c. */
int vit_soft_cross_entropy_forward(vit_real *loss, vit_real *probs, const vit_real *logits,
                                   const vit_real *targets, int n, int classes)
{
    static const char fn[] = "vit_soft_cross_entropy_forward";
    TRY(vit_check_ptr(fn, "loss", loss));
    TRY(vit_check_ptr(fn, "probs", probs));
    TRY(vit_check_ptr(fn, "logits", logits));
    TRY(check_soft(fn, targets, n, classes));
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        const vit_real *xr = logits + (size_t)i * classes, *tr = targets + (size_t)i * classes;
        vit_real *pr = probs + (size_t)i * classes;
        double mx = -INFINITY, tx = 0.0, ts = 0.0, z = 0.0;
        for (int c = 0; c < classes; c++) {
            double v = xr[c];
            if (!isfinite(v))
                return vit_fail(VIT_ENUM, "%s: logits[%d, %d] is not finite", fn, i, c);
            mx = v > mx ? v : mx;
            tx += (double)tr[c] * v;
            ts += tr[c];
        }
        for (int c = 0; c < classes; c++)
            z += exp((double)xr[c] - mx);
        double lse = mx + log(z);
        for (int c = 0; c < classes; c++)
            pr[c] = (vit_real)exp((double)xr[c] - lse);
        total += ts * lse - tx;
    }
    *loss = (vit_real)(total / n);
    return VIT_OK;
}

/* probs [n, C], targets [n, C], dloss (scalar) -> dlogits [n, C] += */
int vit_soft_cross_entropy_backward(vit_real *dlogits, const vit_real *probs,
                                    const vit_real *targets, int n, int classes,
                                    vit_real dloss)
{
    static const char fn[] = "vit_soft_cross_entropy_backward";
    TRY(vit_check_ptr(fn, "dlogits", dlogits));
    TRY(vit_check_ptr(fn, "probs", probs));
    TRY(check_soft(fn, targets, n, classes));
    if (!isfinite((double)dloss))
        return vit_fail(VIT_ENUM, "%s: dloss is not finite", fn);
    double scale = (double)dloss / n;
    for (int i = 0; i < n; i++) {
        const vit_real *pr = probs + (size_t)i * classes, *tr = targets + (size_t)i * classes;
        vit_real *dr = dlogits + (size_t)i * classes;
        double ts = 0.0;
        for (int c = 0; c < classes; c++)
            ts += tr[c];
        for (int c = 0; c < classes; c++)
            dr[c] += (vit_real)(scale * (ts * pr[c] - tr[c]));
    }
    return VIT_OK;
}
