/* AdamW (decoupled weight decay), warm-up + cosine schedule, gradient norm. */
#include "vit/optim.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fastmath.h"
#include "threads.h"

int vit_adamw_init(vit_adamw *opt, size_t n, double beta1, double beta2, double eps,
                   double weight_decay)
{
    const char *fn = "vit_adamw_init";
    int rc = vit_check_ptr(fn, "opt", opt);
    if (rc)
        return rc;
    memset(opt, 0, sizeof *opt);
    if (n == 0)
        return vit_fail(VIT_EINVAL, "%s: n must be positive", fn);
    /* Written as !(in range) so that NaN fails the test too. */
    if (!(beta1 >= 0.0 && beta1 < 1.0))
        return vit_fail(VIT_EINVAL, "%s: beta1 = %g must be in [0, 1)", fn, beta1);
    if (!(beta2 >= 0.0 && beta2 < 1.0))
        return vit_fail(VIT_EINVAL, "%s: beta2 = %g must be in [0, 1)", fn, beta2);
    if (!(eps >= 0.0 && isfinite(eps)))
        return vit_fail(VIT_EINVAL, "%s: eps = %g must be finite and >= 0", fn, eps);
    if (!(weight_decay >= 0.0 && isfinite(weight_decay)))
        return vit_fail(VIT_EINVAL, "%s: weight_decay = %g must be finite and >= 0", fn,
                        weight_decay);
    if (n > SIZE_MAX / sizeof(vit_real))
        return vit_fail(VIT_ENOMEM, "%s: n = %zu parameters is too large", fn, n);
    vit_real *m = calloc(n, sizeof(vit_real));
    vit_real *v = calloc(n, sizeof(vit_real));
    if (m == NULL || v == NULL) {
        free(m);
        free(v);
        return vit_fail(VIT_ENOMEM, "%s: cannot allocate moments for %zu parameters", fn, n);
    }
    opt->beta1 = beta1;
    opt->beta2 = beta2;
    opt->eps = eps;
    opt->weight_decay = weight_decay;
    opt->n = n;
    opt->t = 0;
    opt->m = m;
    opt->v = v;
    return VIT_OK;
}

void vit_adamw_free(vit_adamw *opt)
{
    if (opt == NULL)
        return;
    free(opt->m);
    free(opt->v);
    memset(opt, 0, sizeof *opt);
}

/* Checks that groups[ngroups] tile [0, n) exactly.  The usual layout lists
 * the groups in buffer order, which a single pass confirms; any other
 * order falls back to comparing every pair (ngroups is a few hundred at
 * most, and this only runs when the caller did not sort). */
static int check_groups(const vit_param_group *g, int ngroups, size_t n)
{
    const char *fn = "vit_adamw_step";
    size_t total = 0;
    int in_order = 1;
    for (int i = 0; i < ngroups; i++) {
        if (g[i].offset > n || g[i].count > n - g[i].offset)
            return vit_fail(VIT_EINVAL,
                            "%s: groups[%d] = [%zu, +%zu) reaches past the %zu parameters",
                            fn, i, g[i].offset, g[i].count, n);
        if (g[i].offset != total)
            in_order = 0;
        /* total stays <= 2n, so the sum cannot wrap around. */
        if (total <= n)
            total += g[i].count;
    }
    if (in_order && total == n)
        return VIT_OK;
    for (int i = 0; i < ngroups; i++) {
        for (int j = i + 1; j < ngroups; j++) {
            const vit_param_group *a = &g[i], *b = &g[j];
            if (a->count && b->count && a->offset < b->offset + b->count &&
                b->offset < a->offset + a->count)
                return vit_fail(VIT_EINVAL, "%s: groups[%d] and groups[%d] overlap", fn, i, j);
        }
    }
    /* Disjoint ranges inside [0, n) add up to at most n, and cover it
     * exactly when they add up to n. */
    if (total != n)
        return vit_fail(VIT_EINVAL, "%s: groups cover only %zu of the %zu parameters (gap)",
                        fn, total, n);
    return VIT_OK;
}

/* Largest |g| whose square still fits in vit_real (with room for the
 * moment's weighted sum). */
#ifdef VIT_DOUBLE
#define GRAD_SQUARE_MAX 1e150
#else
#define GRAD_SQUARE_MAX 1e18
#endif

/* 1 when every |grads[i]| <= GRAD_SQUARE_MAX (so none is NaN or inf). */
FM_CLONES
static int grads_ok(const vit_real *grads, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
#ifdef VIT_DOUBLE
        bad |= !(fabs(grads[i]) <= GRAD_SQUARE_MAX);
#else
        bad |= !(fabsf(grads[i]) <= (float)GRAD_SQUARE_MAX);
#endif
    return !bad;
}

/* One step over every group at once: the groups laid end to end, in the
 * caller's order, make one index space [0, n) that vit_parallel splits, and
 * a piece walks the groups it overlaps.  One fork/join a step instead of one
 * per large group (a digits step had 14, each a chance for the worker to
 * fall asleep between them).  Each parameter's update depends on its own
 * values alone, so the split does not change a bit of the result. */
typedef struct {
    vit_adamw *opt;
    vit_real *params;
    const vit_real *grads;
    const vit_param_group *groups;
    int ngroups;
    double b1, b2, bc1, bc2, lr, decay; /* decay: the factor of decaying groups */
} adamw_job;

/* Parameters base .. base + count - 1, all with one decay factor, in
 * double whatever the build (m / bc1 and sqrt(v / bc2) + eps lose digits
 * in float). */
FM_CLONES
static void adamw_span(const adamw_job *J, size_t base, size_t count, double decay)
{
    vit_real *restrict p = J->params + base, *restrict mv = J->opt->m + base;
    vit_real *restrict vv = J->opt->v + base;
    const vit_real *restrict gr = J->grads + base;
    const double b1 = J->b1, b2 = J->b2, bc1 = J->bc1, bc2 = J->bc2, lr = J->lr;
    const double eps = J->opt->eps;
    for (size_t i = 0; i < count; i++) {
        double g = gr[i];
        double m = b1 * mv[i] + (1.0 - b1) * g;
        double v = b2 * vv[i] + (1.0 - b2) * g * g;
        mv[i] = (vit_real)m;
        vv[i] = (vit_real)v;
        p[i] = (vit_real)(p[i] * decay - lr * (m / bc1) / (sqrt(v / bc2) + eps));
    }
}

/* Indices lo .. hi-1 of the groups' index space: each group's start in it
 * is the sum of the counts before it (a few hundred groups at most). */
static void adamw_range(void *ctx, size_t lo, size_t hi)
{
    const adamw_job *J = ctx;
    size_t g0 = 0; /* group k's first index in the space */
    for (int k = 0; k < J->ngroups && g0 < hi; g0 += J->groups[k++].count) {
        size_t g1 = g0 + J->groups[k].count;
        size_t from = lo > g0 ? lo : g0, to = hi < g1 ? hi : g1;
        if (from < to)
            adamw_span(J, J->groups[k].offset + (from - g0), to - from,
                       J->groups[k].decay ? J->decay : 1.0);
    }
}

int vit_adamw_step(vit_adamw *opt, vit_real *params, const vit_real *grads,
                   const vit_param_group *groups, int ngroups, double lr)
{
    const char *fn = "vit_adamw_step";
    int rc;
    if ((rc = vit_check_ptr(fn, "opt", opt)) || (rc = vit_check_ptr(fn, "params", params)) ||
        (rc = vit_check_ptr(fn, "grads", grads)) || (rc = vit_check_ptr(fn, "groups", groups)))
        return rc;
    if (opt->m == NULL || opt->v == NULL || opt->n == 0)
        return vit_fail(VIT_EINVAL, "%s: opt is not initialised (vit_adamw_init)", fn);
    if (ngroups < 1)
        return vit_fail(VIT_EINVAL, "%s: ngroups must be positive, got %d", fn, ngroups);
    if (!(lr >= 0.0 && isfinite(lr)))
        return vit_fail(VIT_EINVAL, "%s: lr = %g must be finite and >= 0", fn, lr);
    if ((rc = check_groups(groups, ngroups, opt->n)))
        return rc;
    /* Scan every gradient before touching anything: one NaN from an
     * overflowing loss must not leave half the model updated.  A finite
     * gradient whose square overflows vit_real would turn the second moment
     * into infinity and freeze that parameter for good.  The scan is one
     * branch-free pass (NaN fails the comparison too); only a bad batch
     * looks for the culprit. */
    if (!grads_ok(grads, opt->n)) {
        for (size_t i = 0; i < opt->n; i++) {
            if (!isfinite(grads[i]))
                return vit_fail(VIT_ENUM, "%s: grads[%zu] = %g is not finite", fn, i,
                                (double)grads[i]);
            if (fabs((double)grads[i]) > GRAD_SQUARE_MAX)
                return vit_fail(VIT_ERANGE, "%s: grads[%zu] = %g is too large (its square overflows)",
                                fn, i, (double)grads[i]);
        }
    }

    opt->t++;
    double b1 = opt->beta1, b2 = opt->beta2;
    /* Bias corrections undo the zero initialisation of m and v, which
     * otherwise makes the first steps far too small. */
    adamw_job J = {opt, params, grads, groups, ngroups, b1, b2,
                   1.0 - pow(b1, (double)opt->t), 1.0 - pow(b2, (double)opt->t), lr,
                   1.0 - lr * opt->weight_decay};
    /* check_groups found that the counts add up to n */
    vit_parallel(vit_threads_for(20.0 * (double)opt->n), opt->n, adamw_range, &J);
    return VIT_OK;
}

double vit_lr_at(long step, long total_steps, long warmup_steps, double base_lr,
                 double min_lr)
{
    if (total_steps <= 0)
        return min_lr;
    if (step < 0)
        step = 0;
    if (warmup_steps < 0)
        warmup_steps = 0;
    if (warmup_steps > total_steps)
        warmup_steps = total_steps;
    if (step < warmup_steps)
        return base_lr * (double)(step + 1) / (double)warmup_steps;
    if (step >= total_steps)
        return min_lr;
    /* Here warmup_steps <= step < total_steps, so the denominator is >= 1. */
    double q = (double)(step - warmup_steps) / (double)(total_steps - warmup_steps);
    const double pi = 3.14159265358979323846264338327950288;
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + cos(pi * q));
}

double vit_grad_norm(const vit_real *g, size_t n)
{
    if (g == NULL)
        return 0.0;
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * (double)g[i];
    return sqrt(s);
}

int vit_ema_update(vit_real *avg, const vit_real *params, size_t n, double decay,
                   unsigned long long t)
{
    if (!avg || !params)
        return vit_fail(VIT_EINVAL, "vit_ema_update: %s is NULL", !avg ? "avg" : "params");
    if (t == 0 || !(decay >= 0 && decay < 1))
        return vit_fail(VIT_EINVAL, "vit_ema_update: step %llu or decay %g out of range (step "
                        ">= 1, decay in [0, 1))", t, decay);
    /* The normalised weight of the newest step: 1 at t = 1, then falling
     * to 1 - decay.  It depends on t alone, so a resumed run computes the
     * same w as an uninterrupted one. */
    double w = (1 - decay) / (1 - pow(decay, (double)t));
    if (w >= 1 || t == 1) {
        memmove(avg, params, n * sizeof *avg);
        return VIT_OK;
    }
    for (size_t i = 0; i < n; i++)
        avg[i] = (vit_real)((double)avg[i] + w * ((double)params[i] - (double)avg[i]));
    return VIT_OK;
}
