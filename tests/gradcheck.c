/* The shared central-difference gradient checker; see gradcheck.h. */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

double gc_check_ex(const char *name, vit_real *x, const vit_real *analytic, size_t n,
                   gc_loss_fn f, void *ctx, double h, double floor)
{
    double worst = 0.0, wa = 0.0, wn = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        vit_real saved = x[i];
        x[i] = (vit_real)(saved + h);
        double lp = f(ctx);
        x[i] = (vit_real)(saved - h);
        double lm = f(ctx);
        x[i] = saved;
        double num = (lp - lm) / (2.0 * h);
        double a = (double)analytic[i];
        double den = fmax(fmax(fabs(a), fabs(num)), floor);
        double rel = fabs(a - num) / den;
        if (!(rel <= worst)) { /* also catches NaN */
            worst = isnan(rel) ? INFINITY : rel;
            wi = i; wa = a; wn = num;
        }
    }
    printf("gradcheck %-28s n=%-6zu max_rel=%.2e at [%zu] (analytic % .10e, numeric % .10e)\n",
           name, n, worst, wi, wa, wn);
    fflush(stdout);
    return worst;
}

double gc_check(const char *name, vit_real *x, const vit_real *analytic, size_t n,
                gc_loss_fn f, void *ctx)
{
    return gc_check_ex(name, x, analytic, n, f, ctx, GC_STEP, GC_ABS_FLOOR);
}

double gc_uniform(uint64_t *seed)
{
    /* splitmix64: good enough for test data and trivially reproducible. */
    uint64_t z = (*seed += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

void gc_fill(vit_real *x, size_t n, uint64_t *seed, double scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (vit_real)((2.0 * gc_uniform(seed) - 1.0) * scale);
}

double gc_dot(const vit_real *a, const vit_real *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

vit_real *gc_zeros(size_t n)
{
    vit_real *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        fprintf(stderr, "gc_zeros: out of memory (%zu reals)\n", n);
        abort();
    }
    return p;
}

double gc_max_rel(const vit_real *a, const vit_real *b, size_t n, double floor)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double den = fmax(fmax(fabs((double)a[i]), fabs((double)b[i])), floor);
        double rel = fabs((double)a[i] - (double)b[i]) / den;
        if (!(rel <= worst))
            worst = isnan(rel) ? INFINITY : rel;
    }
    return worst;
}

double gc_max_abs_diff(const vit_real *a, const vit_real *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

int gc_all_finite(const vit_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite((double)x[i]))
            return 0;
    return 1;
}
