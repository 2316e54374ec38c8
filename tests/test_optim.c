/*
 * tests/test_optim.c - the random number generator, AdamW, the learning
 * rate schedule and the gradient norm (float64 build).
 *
 * Statistical bounds are 5 standard errors of the estimated quantity, so a
 * correct generator fails with probability below 1e-6 per check, while the
 * bugs they target (wrong scaling, a lost factor in Box-Muller, modulo
 * bias) move the estimate by dozens of standard errors.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit/optim.h"
#include "vit/rng.h"

/* ---- an independent xoshiro256** / splitmix64, written from the
 * published description in a different shape: the four state words are
 * separate variables, rotations and multiplications by 5 and 9 are spelled
 * out with shifts and adds. ---- */

typedef struct ref_rng {
    uint64_t a, b, c, d;
} ref_rng;

static uint64_t ref_rotl(uint64_t x, unsigned k) { return (x << k) | (x >> (64u - k)); }

static uint64_t ref_splitmix(uint64_t *counter)
{
    *counter = *counter + UINT64_C(0x9E3779B97F4A7C15);
    uint64_t z = *counter;
    z ^= z >> 30;
    z *= UINT64_C(0xBF58476D1CE4E5B9);
    z ^= z >> 27;
    z *= UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    return z;
}

static ref_rng ref_seed(uint64_t seed)
{
    ref_rng r;
    uint64_t x = seed;
    r.a = ref_splitmix(&x);
    r.b = ref_splitmix(&x);
    r.c = ref_splitmix(&x);
    r.d = ref_splitmix(&x);
    return r;
}

static uint64_t ref_next(ref_rng *r)
{
    uint64_t times5 = (r->b << 2) + r->b;
    uint64_t rot = ref_rotl(times5, 7);
    uint64_t result = (rot << 3) + rot; /* times 9 */
    uint64_t shifted = r->b << 17;
    uint64_t a = r->a, b = r->b, c = r->c, d = r->d;
    c = c ^ a;
    d = d ^ b;
    b = b ^ c;
    a = a ^ d;
    c = c ^ shifted;
    d = ref_rotl(d, 45);
    r->a = a;
    r->b = b;
    r->c = c;
    r->d = d;
    return result;
}

START_TEST(test_splitmix_published_value)
{
    /* The first splitmix64 output for seed 0 is the widely published
     * 0xE220A8397B1DCDAF; it must be the generator's first state word. */
    uint64_t x = 0;
    ck_assert_uint_eq(ref_splitmix(&x), UINT64_C(0xE220A8397B1DCDAF));
    vit_rng r;
    vit_rng_seed(&r, 0);
    ck_assert_uint_eq(r.s[0], UINT64_C(0xE220A8397B1DCDAF));
}
END_TEST

START_TEST(test_rng_matches_reference)
{
    const uint64_t seeds[] = {0, 1, 42, UINT64_C(0xFFFFFFFFFFFFFFFF), UINT64_C(0x0123456789ABCDEF)};
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        vit_rng r;
        vit_rng_seed(&r, seeds[s]);
        ref_rng q = ref_seed(seeds[s]);
        ck_assert_uint_eq(r.s[0], q.a);
        ck_assert_uint_eq(r.s[3], q.d);
        for (int i = 0; i < 1000; i++) {
            uint64_t got = vit_rng_next(&r), want = ref_next(&q);
            ck_assert_msg(got == want, "seed %llu output %d: %016llx vs reference %016llx",
                          (unsigned long long)seeds[s], i, (unsigned long long)got,
                          (unsigned long long)want);
        }
    }
    /* And uniform() is exactly the top 53 bits of the same stream. */
    vit_rng r;
    vit_rng_seed(&r, 7);
    ref_rng q = ref_seed(7);
    for (int i = 0; i < 100; i++) {
        double want = (double)(ref_next(&q) >> 11) / 9007199254740992.0; /* 2^53 */
        ck_assert(vit_rng_uniform(&r) == want);
    }
}
END_TEST

START_TEST(test_rng_reproducible)
{
    vit_rng a, b, c;
    vit_rng_seed(&a, 12345);
    vit_rng_seed(&b, 12345);
    vit_rng_seed(&c, 12346);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = vit_rng_next(&a);
        ck_assert_uint_eq(x, vit_rng_next(&b));
        differ += x != vit_rng_next(&c);
    }
    ck_assert_int_ge(differ, 999);
    /* The struct is the whole state: a copy taken mid-stream continues
     * identically through every distribution, including normal(). */
    vit_rng copy = a;
    int pa[10], pb[10];
    for (int i = 0; i < 10; i++)
        pa[i] = pb[i] = i;
    for (int i = 0; i < 100; i++) {
        ck_assert(vit_rng_normal(&a) == vit_rng_normal(&copy));
        ck_assert(vit_rng_uniform(&a) == vit_rng_uniform(&copy));
        ck_assert_uint_eq(vit_rng_below(&a, 1000), vit_rng_below(&copy, 1000));
    }
    vit_rng_shuffle(&a, pa, 10);
    vit_rng_shuffle(&copy, pb, 10);
    ck_assert_mem_eq(pa, pb, sizeof pa);
    ck_assert_mem_eq(&a, &copy, sizeof a);
}
END_TEST

START_TEST(test_uniform_moments)
{
    vit_rng r;
    vit_rng_seed(&r, 2024);
    const int n = 1000000;
    double sum = 0, sq = 0;
    long out_of_range = 0, off_grid = 0; /* counted, not asserted per draw: ck_assert is slow */
    for (int i = 0; i < n; i++) {
        double u = vit_rng_uniform(&r);
        out_of_range += !(u >= 0.0 && u < 1.0);
        /* 53-bit resolution: u * 2^53 is an integer. */
        double scaled = u * 9007199254740992.0;
        off_grid += scaled != floor(scaled);
        sum += u;
        sq += (u - 0.5) * (u - 0.5);
    }
    ck_assert_int_eq(out_of_range, 0);
    ck_assert_int_eq(off_grid, 0);
    double mean = sum / n, var = sq / n;
    /* Mean: sd sqrt(1/12 / n) = 2.9e-4.  Var (about the true mean):
     * sd sqrt((1/80 - 1/144) / n) = 7.5e-5. */
    ck_assert_msg(fabs(mean - 0.5) < 5 * sqrt(1.0 / 12.0 / n), "uniform mean %g", mean);
    ck_assert_msg(fabs(var - 1.0 / 12.0) < 5 * sqrt((1.0 / 80.0 - 1.0 / 144.0) / n),
                  "uniform variance %g", var);
}
END_TEST

START_TEST(test_normal_moments)
{
    vit_rng r;
    vit_rng_seed(&r, 99);
    const int n = 1000000;
    double s1 = 0, s2 = 0, s4 = 0;
    for (int i = 0; i < n; i++) {
        double z = vit_rng_normal(&r);
        s1 += z; /* a non-finite z would poison the sums and fail below */
        s2 += z * z;
        s4 += z * z * z * z;
    }
    double mean = s1 / n, m2 = s2 / n, m4 = s4 / n;
    /* E z = 0 (sd 1/sqrt n), E z^2 = 1 (Var z^2 = 2), E z^4 = 3
     * (Var z^4 = 105 - 9 = 96).  The fourth moment tells a normal from
     * other unit-variance shapes. */
    ck_assert_msg(fabs(mean) < 5 * sqrt(1.0 / n), "normal mean %g", mean);
    ck_assert_msg(fabs(m2 - 1.0) < 5 * sqrt(2.0 / n), "normal E z^2 %g", m2);
    ck_assert_msg(fabs(m4 - 3.0) < 5 * sqrt(96.0 / n), "normal E z^4 %g", m4);
    /* Two uniforms per call: after one normal() the stream has advanced by
     * exactly two steps. */
    vit_rng a, b;
    vit_rng_seed(&a, 5);
    vit_rng_seed(&b, 5);
    (void)vit_rng_normal(&a);
    (void)vit_rng_next(&b);
    (void)vit_rng_next(&b);
    ck_assert_mem_eq(&a, &b, sizeof a);
}
END_TEST

START_TEST(test_below)
{
    vit_rng r;
    vit_rng_seed(&r, 3);
    uint32_t any = 0;
    for (int i = 0; i < 1000; i++)
        any |= vit_rng_below(&r, 1);
    ck_assert_uint_eq(any, 0);
    ck_assert_uint_eq(vit_rng_below(&r, 0), 0);
    /* Seven buckets, chi-square with 6 degrees of freedom: 40 is far past
     * the 1e-6 tail (about 35.9). */
    const int n = 70000, k = 7;
    long counts[7] = {0};
    for (int i = 0; i < n; i++) {
        uint32_t x = vit_rng_below(&r, (uint32_t)k);
        if (x >= (uint32_t)k)
            ck_abort_msg("below(7) returned %u", (unsigned)x);
        counts[x]++;
    }
    double chi2 = 0, e = (double)n / k;
    for (int i = 0; i < k; i++)
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ck_assert_msg(chi2 < 40.0, "chi-square %g over 7 buckets", chi2);
    /* n = 3 * 2^30: plain "x % n" on 32-bit draws would return values
     * below 2^30 half of the time instead of a third. */
    const uint32_t big = UINT32_C(3) << 30;
    const int m = 100000;
    long low = 0;
    for (int i = 0; i < m; i++) {
        uint32_t x = vit_rng_below(&r, big);
        if (x >= big)
            ck_abort_msg("below(3 * 2^30) returned %u", (unsigned)x);
        low += x < (UINT32_C(1) << 30);
    }
    double frac = (double)low / m;
    ck_assert_msg(fabs(frac - 1.0 / 3.0) < 5 * sqrt(2.0 / 9.0 / m), "fraction below 2^30: %g", frac);
}
END_TEST

START_TEST(test_shuffle)
{
    vit_rng r;
    vit_rng_seed(&r, 11);
    int a[100];
    for (int i = 0; i < 100; i++)
        a[i] = i;
    vit_rng_shuffle(&r, a, 100);
    int seen[100] = {0}, moved = 0;
    for (int i = 0; i < 100; i++) {
        ck_assert(a[i] >= 0 && a[i] < 100);
        seen[a[i]]++;
        moved += a[i] != i;
    }
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(seen[i], 1);
    ck_assert_int_gt(moved, 80);
    /* n < 2 and NULL are no-ops. */
    int one = 5;
    vit_rng before = r;
    vit_rng_shuffle(&r, &one, 1);
    vit_rng_shuffle(&r, NULL, 10);
    ck_assert_int_eq(one, 5);
    ck_assert_mem_eq(&before, &r, sizeof r);
    /* All 6 orders of 3 items equally likely: chi-square, 5 dof, 1e-6
     * tail is about 33. */
    const int n = 60000;
    long counts[6] = {0};
    for (int t = 0; t < n; t++) {
        int p[3] = {0, 1, 2};
        vit_rng_shuffle(&r, p, 3);
        counts[p[0] * 2 + (p[1] > p[2])]++;
    }
    double chi2 = 0, e = n / 6.0;
    for (int i = 0; i < 6; i++)
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ck_assert_msg(chi2 < 33.0, "chi-square %g over the 6 permutations", chi2);
}
END_TEST

/* ---- AdamW ---- */

/* Reference AdamW written straight from the formulas in
 * Loshchilov & Hutter / torch.optim.AdamW, one parameter at a time, with
 * the bias-corrected moments spelled out. */
static void ref_adamw(double *p, double *m, double *v, const double *g, const int *decay, int n,
                      int t, double lr, double b1, double b2, double eps, double wd)
{
    for (int i = 0; i < n; i++) {
        if (decay[i])
            p[i] = p[i] - lr * wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        double mhat = m[i] / (1 - pow(b1, t));
        double vhat = v[i] / (1 - pow(b2, t));
        p[i] = p[i] - lr * mhat / (sqrt(vhat) + eps);
    }
}

START_TEST(test_adamw_hand_value)
{
    /* One decayed and one excluded parameter, both p = 1 and g = 0.5,
     * lr = 0.1, wd = 0.01, betas (0.9, 0.999), eps = 1e-8.
     * Step 1: m = 0.05, v = 0.00025, so mhat = 0.5 and vhat = 0.25; the
     *   Adam step is 0.1 * 0.5 / (0.5 + 1e-8) = 0.1 / (1 + 2e-8)
     *   = 0.099999998 (to 1e-16).
     *   decayed:  1 * (1 - 0.1 * 0.01) - 0.099999998 = 0.899000002
     *   excluded: 1 - 0.099999998                    = 0.900000002
     * Step 2 with the same gradient: m = 0.095, v = 0.00049975, and the
     *   corrections 1 - 0.81 = 0.19, 1 - 0.998001 = 0.001999 bring them
     *   back to mhat = 0.5, vhat = 0.25, so the same Adam step again:
     *   decayed:  0.899000002 * 0.999 - 0.099999998 = 0.798101003998
     *   excluded: 0.900000002 - 0.099999998         = 0.800000004 */
    vit_adamw opt;
    ck_assert_int_eq(vit_adamw_init(&opt, 2, 0.9, 0.999, 1e-8, 0.01), VIT_OK);
    vit_real p[2] = {1.0, 1.0}, g[2] = {0.5, 0.5};
    vit_param_group groups[2] = {{0, 1, 1}, {1, 1, 0}};
    ck_assert_int_eq(vit_adamw_step(&opt, p, g, groups, 2, 0.1), VIT_OK);
    ck_assert_double_eq_tol(p[0], 0.899000002, 1e-14);
    ck_assert_double_eq_tol(p[1], 0.900000002, 1e-14);
    ck_assert_uint_eq(opt.t, 1);
    ck_assert_double_eq_tol(opt.m[0], 0.05, 1e-15);
    ck_assert_double_eq_tol(opt.v[0], 0.00025, 1e-15);
    ck_assert_int_eq(vit_adamw_step(&opt, p, g, groups, 2, 0.1), VIT_OK);
    ck_assert_double_eq_tol(p[0], 0.798101003998, 1e-14);
    ck_assert_double_eq_tol(p[1], 0.800000004, 1e-14);
    ck_assert_double_eq_tol(opt.v[0], 0.00049975, 1e-15);
    vit_adamw_free(&opt);
    ck_assert_ptr_null(opt.m);
    vit_adamw_free(&opt); /* a freed (zeroed) optimizer can be freed again */
}
END_TEST

START_TEST(test_adamw_matches_reference)
{
    enum { N = 23, STEPS = 7 };
    const double b1 = 0.85, b2 = 0.995, eps = 1e-6, wd = 0.05;
    vit_real p[N], g[N];
    double rp[N], rm[N] = {0}, rv[N] = {0}, rg[N];
    int decay[N];
    /* Three groups listed out of buffer order: [10, 23) decayed,
     * [0, 4) excluded, [4, 10) decayed. */
    vit_param_group groups[3] = {{10, 13, 1}, {0, 4, 0}, {4, 6, 1}};
    for (int i = 0; i < N; i++)
        decay[i] = i >= 4;
    uint64_t seed = 77;
    vit_rng r;
    vit_rng_seed(&r, seed);
    for (int i = 0; i < N; i++)
        rp[i] = p[i] = (vit_real)(2 * vit_rng_uniform(&r) - 1);
    vit_adamw opt;
    ck_assert_int_eq(vit_adamw_init(&opt, N, b1, b2, eps, wd), VIT_OK);
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++)
            rg[i] = g[i] = (vit_real)vit_rng_normal(&r);
        /* p[3] is excluded from decay and gets no gradient: it may move
         * only through the momentum of earlier steps. */
        g[3] = rg[3] = 0.0;
        double lr = vit_lr_at(t - 1, STEPS, 2, 0.01, 0.001);
        ref_adamw(rp, rm, rv, rg, decay, N, t, lr, b1, b2, eps, wd);
        ck_assert_int_eq(vit_adamw_step(&opt, p, g, groups, 3, lr), VIT_OK);
        for (int i = 0; i < N; i++) {
            ck_assert_msg(fabs(p[i] - rp[i]) <= 1e-13 * fmax(1.0, fabs(rp[i])),
                          "step %d p[%d] = %.17g, reference %.17g", t, i, (double)p[i], rp[i]);
            ck_assert(fabs(opt.m[i] - rm[i]) <= 1e-15 * fmax(1.0, fabs(rm[i])));
            ck_assert(fabs(opt.v[i] - rv[i]) <= 1e-15 * fmax(1.0, fabs(rv[i])));
        }
    }
    vit_adamw_free(&opt);
}
END_TEST

/* Many groups out of buffer order, two of them empty, over enough
 * parameters that the step is split across threads: the pieces cross group
 * boundaries, and every parameter must still get its own group's decay and
 * the reference's value, on 1 and on 3 threads alike (bitwise). */
START_TEST(test_adamw_split_across_groups)
{
    enum { NG = 40, STEPS = 3 };
    const double b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1, lr = 0.003;
    vit_param_group groups[NG];
    size_t at = 0;
    for (int k = 0; k < NG; k++) { /* sizes 0 .. 4,000 */
        size_t count = k == 7 || k == NG - 1 ? 0 : (size_t)(k * 997 % 4001);
        groups[k] = (vit_param_group){at, count, k % 3 != 0};
        at += count;
    }
    const size_t n = at;
    for (int k = 0; k < NG; k++) { /* a fixed shuffle of the listing order */
        int j = (k * 17 + 5) % NG;
        vit_param_group tmp = groups[k];
        groups[k] = groups[j];
        groups[j] = tmp;
    }
    int *decay = malloc(n * sizeof *decay);
    double *rp = malloc(n * sizeof *rp), *rm = calloc(n, sizeof *rm), *rv = calloc(n, sizeof *rv);
    double *rg = malloc(n * sizeof *rg);
    vit_real *p[2], *g = malloc(n * sizeof *g);
    ck_assert(decay && rp && rm && rv && rg && g);
    for (int k = 0; k < NG; k++)
        for (size_t i = 0; i < groups[k].count; i++)
            decay[groups[k].offset + i] = groups[k].decay;
    vit_rng r;
    vit_rng_seed(&r, 5);
    vit_adamw opt[2];
    for (int c = 0; c < 2; c++) {
        p[c] = malloc(n * sizeof *p[c]);
        ck_assert_ptr_nonnull(p[c]);
        ck_assert_int_eq(vit_adamw_init(&opt[c], n, b1, b2, eps, wd), VIT_OK);
    }
    for (size_t i = 0; i < n; i++)
        rp[i] = p[0][i] = p[1][i] = (vit_real)(2 * vit_rng_uniform(&r) - 1);
    for (int t = 1; t <= STEPS; t++) {
        for (size_t i = 0; i < n; i++)
            rg[i] = g[i] = (vit_real)vit_rng_normal(&r);
        ref_adamw(rp, rm, rv, rg, decay, (int)n, t, lr, b1, b2, eps, wd);
        for (int c = 0; c < 2; c++) {
            ck_assert_int_eq(vit_set_threads(c ? 3 : 1), VIT_OK);
            ck_assert_int_eq(vit_adamw_step(&opt[c], p[c], g, groups, NG, lr), VIT_OK);
        }
        ck_assert_msg(memcmp(p[0], p[1], n * sizeof *p[0]) == 0,
                      "step %d: 1 and 3 threads differ", t);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(fabs(p[1][i] - rp[i]) <= 1e-13 * fmax(1.0, fabs(rp[i])),
                          "step %d p[%zu] = %.17g, reference %.17g", t, i, (double)p[1][i],
                          rp[i]);
    }
    vit_set_threads(1);
    for (int c = 0; c < 2; c++) {
        vit_adamw_free(&opt[c]);
        free(p[c]);
    }
    free(decay), free(rp), free(rm), free(rv), free(rg), free(g);
}
END_TEST

START_TEST(test_adamw_excluded_group_no_decay)
{
    /* With a zero gradient Adam's step is exactly 0 (m = 0), so only
     * weight decay can move a parameter: decayed ones shrink by the factor
     * (1 - lr * wd) each step, excluded ones stay bit-identical. */
    vit_adamw opt;
    ck_assert_int_eq(vit_adamw_init(&opt, 6, 0.9, 0.999, 1e-8, 0.1), VIT_OK);
    vit_real p[6] = {1, -2, 3, 4, -5, 6}, g[6] = {0};
    vit_param_group groups[2] = {{0, 3, 0}, {3, 3, 1}};
    for (int s = 0; s < 3; s++)
        ck_assert_int_eq(vit_adamw_step(&opt, p, g, groups, 2, 0.5), VIT_OK);
    ck_assert(p[0] == 1 && p[1] == -2 && p[2] == 3);
    double f = pow(1 - 0.5 * 0.1, 3);
    ck_assert_double_eq_tol(p[3], 4 * f, 1e-14);
    ck_assert_double_eq_tol(p[4], -5 * f, 1e-14);
    ck_assert_double_eq_tol(p[5], 6 * f, 1e-14);
    vit_adamw_free(&opt);
}
END_TEST

START_TEST(test_adamw_bad_groups)
{
    vit_adamw opt;
    ck_assert_int_eq(vit_adamw_init(&opt, 10, 0.9, 0.999, 1e-8, 0.01), VIT_OK);
    vit_real p[10], g[10];
    for (int i = 0; i < 10; i++) {
        p[i] = i;
        g[i] = 1;
    }
    vit_real p0[10];
    memcpy(p0, p, sizeof p);
    const vit_param_group gap[2] = {{0, 4, 1}, {5, 5, 1}};
    const vit_param_group overlap[2] = {{0, 6, 1}, {5, 5, 1}};
    const vit_param_group past[2] = {{0, 5, 1}, {5, 6, 1}};
    const vit_param_group huge[2] = {{0, 5, 1}, {5, SIZE_MAX, 1}};
    const vit_param_group short_[1] = {{0, 9, 1}};
    const vit_param_group dup[3] = {{0, 5, 1}, {5, 5, 0}, {0, 5, 1}};
    /* Same total count as n, but one range duplicated and one missing. */
    const vit_param_group swapped_dup[3] = {{5, 5, 1}, {0, 3, 1}, {1, 2, 0}};
    struct {
        const vit_param_group *g;
        int n;
        const char *what;
    } cases[] = {{gap, 2, "gap"},         {overlap, 2, "overlap"}, {past, 2, "past n"},
                 {huge, 2, "huge count"}, {short_, 1, "short"},    {dup, 3, "duplicate"},
                 {swapped_dup, 3, "overlap out of order"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = vit_adamw_step(&opt, p, g, cases[i].g, cases[i].n, 0.1);
        ck_assert_msg(rc == VIT_EINVAL, "%s: got %d", cases[i].what, rc);
        ck_assert_ptr_nonnull(strstr(vit_last_error(), "vit_adamw_step"));
    }
    ck_assert_mem_eq(p, p0, sizeof p);
    ck_assert_uint_eq(opt.t, 0);
    /* Other argument errors. */
    const vit_param_group ok[2] = {{5, 5, 1}, {0, 5, 0}}; /* out of order is fine */
    ck_assert_int_eq(vit_adamw_step(&opt, NULL, g, ok, 2, 0.1), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_step(&opt, p, NULL, ok, 2, 0.1), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_step(&opt, p, g, NULL, 2, 0.1), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_step(&opt, p, g, ok, 0, 0.1), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_step(&opt, p, g, ok, 2, -0.1), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_step(&opt, p, g, ok, 2, NAN), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_step(NULL, p, g, ok, 2, 0.1), VIT_EINVAL);
    ck_assert_mem_eq(p, p0, sizeof p);
    ck_assert_int_eq(vit_adamw_step(&opt, p, g, ok, 2, 0.1), VIT_OK);
    ck_assert_uint_eq(opt.t, 1);
    vit_adamw_free(&opt);
    /* An optimizer that was never initialised (zeroed) is rejected. */
    ck_assert_int_eq(vit_adamw_step(&opt, p, g, ok, 2, 0.1), VIT_EINVAL);
}
END_TEST

START_TEST(test_adamw_nonfinite_grad)
{
    vit_adamw opt;
    ck_assert_int_eq(vit_adamw_init(&opt, 8, 0.9, 0.999, 1e-8, 0.01), VIT_OK);
    vit_real p[8], g[8];
    vit_param_group all = {0, 8, 1};
    for (int i = 0; i < 8; i++) {
        p[i] = 0.1 * i;
        g[i] = 0.3 - 0.05 * i;
    }
    ck_assert_int_eq(vit_adamw_step(&opt, p, g, &all, 1, 0.01), VIT_OK);
    vit_real p0[8], m0[8], v0[8];
    memcpy(p0, p, sizeof p);
    memcpy(m0, opt.m, sizeof m0);
    memcpy(v0, opt.v, sizeof v0);
    /* NaN, infinities, and a finite gradient whose square overflows the
     * real type (it would make the second moment infinite). */
    const double bad[5] = {NAN, INFINITY, -INFINITY, sizeof(vit_real) == 4 ? 1e30 : 1e200,
                           sizeof(vit_real) == 4 ? -1e30 : -1e200};
    for (int k = 0; k < 5; k++) {
        g[7] = bad[k]; /* the last entry, so an update-then-check loop would be caught */
        /* Non-finite is VIT_ENUM; finite but overflowing when squared is
         * VIT_ERANGE, so callers tell them apart without reading text. */
        ck_assert_int_eq(vit_adamw_step(&opt, p, g, &all, 1, 0.01), k < 3 ? VIT_ENUM : VIT_ERANGE);
        ck_assert_ptr_nonnull(strstr(vit_last_error(), "grads[7]"));
        ck_assert_mem_eq(p, p0, sizeof p);
        ck_assert_mem_eq(opt.m, m0, sizeof m0);
        ck_assert_mem_eq(opt.v, v0, sizeof v0);
        ck_assert_uint_eq(opt.t, 1);
    }
    vit_adamw_free(&opt);
}
END_TEST

START_TEST(test_adamw_init_args)
{
    vit_adamw opt;
    ck_assert_int_eq(vit_adamw_init(NULL, 4, 0.9, 0.999, 1e-8, 0), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_init(&opt, 0, 0.9, 0.999, 1e-8, 0), VIT_EINVAL);
    ck_assert_ptr_null(opt.m);
    ck_assert_int_eq(vit_adamw_init(&opt, 4, 1.0, 0.999, 1e-8, 0), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_init(&opt, 4, -0.1, 0.999, 1e-8, 0), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_init(&opt, 4, 0.9, NAN, 1e-8, 0), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_init(&opt, 4, 0.9, 0.999, -1, 0), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_init(&opt, 4, 0.9, 0.999, 1e-8, -0.1), VIT_EINVAL);
    ck_assert_int_eq(vit_adamw_init(&opt, 4, 0.9, 0.999, 1e-8, INFINITY), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "weight_decay"));
    ck_assert_int_eq(vit_adamw_init(&opt, 4, 0.9, 0.999, 1e-8, 0.05), VIT_OK);
    for (int i = 0; i < 4; i++)
        ck_assert(opt.m[i] == 0 && opt.v[i] == 0);
    ck_assert_uint_eq(opt.t, 0);
    vit_adamw_free(&opt);
    vit_adamw_free(NULL);
}
END_TEST

/* ---- schedule and gradient norm ---- */

START_TEST(test_lr_schedule)
{
    const long total = 1000, warm = 100;
    const double base = 1e-3, lo = 1e-5;
    ck_assert_double_eq_tol(vit_lr_at(0, total, warm, base, lo), base / warm, 1e-18);
    ck_assert_double_eq_tol(vit_lr_at(49, total, warm, base, lo), base * 0.5, 1e-18);
    ck_assert_double_eq_tol(vit_lr_at(warm - 1, total, warm, base, lo), base, 1e-18);
    ck_assert_double_eq_tol(vit_lr_at(warm, total, warm, base, lo), base, 1e-18);
    /* Half way through the cosine, cos(pi/2) = 0: the mean of the ends. */
    ck_assert_double_eq_tol(vit_lr_at(warm + (total - warm) / 2, total, warm, base, lo),
                            (base + lo) / 2, 1e-15);
    /* A quarter of the way: min + (base - min) * (1 + cos(pi/4)) / 2. */
    ck_assert_double_eq_tol(vit_lr_at(warm + (total - warm) / 4, total, warm, base, lo),
                            lo + (base - lo) * (1 + sqrt(0.5)) / 2, 1e-15);
    ck_assert_double_eq_tol(vit_lr_at(total, total, warm, base, lo), lo, 1e-18);
    ck_assert_double_eq_tol(vit_lr_at(total + 50, total, warm, base, lo), lo, 1e-18);
    ck_assert_double_eq_tol(vit_lr_at(-5, total, warm, base, lo), base / warm, 1e-18);
    /* Strictly increasing through the warm-up, non-increasing afterwards,
     * and always within [min, base]. */
    double prev = vit_lr_at(0, total, warm, base, lo);
    for (long s = 1; s <= total; s++) {
        double lr = vit_lr_at(s, total, warm, base, lo);
        if (s < warm)
            ck_assert_msg(lr > prev, "warm-up not increasing at %ld", s);
        else
            ck_assert_msg(lr <= prev, "decay not monotone at %ld", s);
        ck_assert(lr >= lo && lr <= base);
        prev = lr;
    }
    /* Without warm-up the first step already uses base_lr. */
    ck_assert_double_eq_tol(vit_lr_at(0, total, 0, base, lo), base, 1e-18);
    /* Degenerate runs. */
    ck_assert_double_eq_tol(vit_lr_at(0, 0, 0, base, lo), lo, 1e-18);
    ck_assert_double_eq_tol(vit_lr_at(9, 10, 10, base, lo), base, 1e-18);
    ck_assert_double_eq_tol(vit_lr_at(10, 10, 10, base, lo), lo, 1e-18);
}
END_TEST

START_TEST(test_grad_norm)
{
    vit_real g[4] = {3, 4, 0, -12};
    ck_assert_double_eq_tol(vit_grad_norm(g, 4), 13.0, 1e-15);
    ck_assert_double_eq_tol(vit_grad_norm(g, 2), 5.0, 1e-15);
    ck_assert(vit_grad_norm(g, 0) == 0.0);
    ck_assert(vit_grad_norm(NULL, 4) == 0.0);
    g[2] = NAN;
    ck_assert(isnan(vit_grad_norm(g, 4)));
    /* Many small entries: sqrt(n) * 1e-3. */
    enum { N = 10000 };
    static vit_real h[N];
    for (int i = 0; i < N; i++)
        h[i] = 1e-3;
    ck_assert_double_eq_tol(vit_grad_norm(h, N), 0.1, 1e-14);
}
END_TEST

static Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *rng = tcase_create("rng");
    tcase_set_timeout(rng, 60);
    tcase_add_test(rng, test_splitmix_published_value);
    tcase_add_test(rng, test_rng_matches_reference);
    tcase_add_test(rng, test_rng_reproducible);
    tcase_add_test(rng, test_uniform_moments);
    tcase_add_test(rng, test_normal_moments);
    tcase_add_test(rng, test_below);
    tcase_add_test(rng, test_shuffle);
    suite_add_tcase(s, rng);
    TCase *adam = tcase_create("adamw");
    tcase_set_timeout(adam, 60);
    tcase_add_test(adam, test_adamw_hand_value);
    tcase_add_test(adam, test_adamw_matches_reference);
    tcase_add_test(adam, test_adamw_split_across_groups);
    tcase_add_test(adam, test_adamw_excluded_group_no_decay);
    tcase_add_test(adam, test_adamw_bad_groups);
    tcase_add_test(adam, test_adamw_nonfinite_grad);
    tcase_add_test(adam, test_adamw_init_args);
    tcase_add_test(adam, test_lr_schedule);
    tcase_add_test(adam, test_grad_norm);
    suite_add_tcase(s, adam);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(optim_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
