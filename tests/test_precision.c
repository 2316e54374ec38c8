/*
 * tests/test_precision.c - the float32 library agrees with the float64 one,
 * both in this one process.
 *
 * libvit-f64's functions are named vit_f64_* (see vit/core.h), so this
 * program links both libraries: it runs each case of precision_cases.c
 * through the float32 copy (pc_float32, calling libvit) and the float64
 * copy (pc_float64, built with VIT_DOUBLE into its own file, calling
 * libvit-f64), then compares tensor by tensor:
 *   max_i |a_i - b_i| / max(max_i |a_i|, max_i |b_i|, 1e-3) <= 1e-4
 * (see norm_rel for why the denominator is the tensor's scale).
 * One Check test per case, so a failing kernel is named.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "precision_cases.h"

#define PREC_TOL 1e-4
#define PREC_FLOOR 1e-3
#define MAX_TENSORS 32

typedef struct {
    char name[64];
    size_t n;
    double *v;
} tensor;

typedef struct {
    tensor t[MAX_TENSORS];
    int count;
    int overflow;         /* more tensors than MAX_TENSORS */
} tensor_set;

static void set_free(tensor_set *s)
{
    for (int i = 0; i < s->count; i++)
        free(s->t[i].v);
    s->count = 0;
}

static tensor *set_add(tensor_set *s, const char *name, size_t n)
{
    if (s->count == MAX_TENSORS) {
        s->overflow = 1;
        return NULL;
    }
    tensor *t = &s->t[s->count];
    t->v = malloc((n ? n : 1) * sizeof *t->v);
    ck_assert_msg(t->v != NULL, "out of memory");
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n = n;
    s->count++;
    return t;
}

static const tensor *set_find(const tensor_set *s, const char *name)
{
    for (int i = 0; i < s->count; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    return NULL;
}

/* pc_emit_fn for both runs: keep a copy. */
static void collect(void *ctx, const char *name, const double *v, size_t n)
{
    tensor *t = set_add(ctx, name, n);
    if (t)
        memcpy(t->v, v, n * sizeof *v);
}

/* Runs case i in one precision into s. */
static void run_in(const pc_build *b, int i, tensor_set *s)
{
    char err[1024] = "";
    int rc = b->run_case(i, collect, s, err, sizeof err);
    ck_assert_msg(rc == 0, "%s case %s failed: %s", b->precision, b->case_name(i), err);
    ck_assert_msg(!s->overflow, "case %s emits more than %d tensors", b->case_name(i),
                  MAX_TENSORS);
}

/* The figure the bar applies to, normwise over the tensor:
 *   max_i |a_i - b_i| / max(max_i |a_i|, max_i |b_i|, PREC_FLOOR).
 * It measures float32 rounding against the tensor's own scale.  An
 * elementwise ratio |a_i - b_i| / max(|a_i|, |b_i|, floor) is also reported
 * (informational): it blows up on entries that are small only because of
 * cancellation, where the absolute error is one float32 ulp of the terms
 * that cancelled, which no float32 kernel can avoid. */
static double norm_rel(const double *a, const double *b, size_t n, size_t *at)
{
    double diff = 0.0, scale = PREC_FLOOR;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= diff)) {
            diff = isnan(d) ? INFINITY : d;
            *at = i;
        }
        scale = fmax(scale, fmax(fabs(a[i]), fabs(b[i])));
    }
    return diff / scale;
}

/* Tensors that are zero in exact arithmetic, and the tensor whose scale
 * stands for theirs.  The key bias moves every score of a query row by the
 * same amount, and softmax ignores that, so db_K = sum_rows dK is zero: what
 * float32 leaves there is the rounding of a sum of terms as large as dQ's,
 * whose row sum is db_Q.  Measured against its own (zero) scale that
 * rounding would read as an error; measured against db_Q's it is what it
 * is, and a wrong db_K (one of dK's terms dropped, say) is still far over
 * the bar. */
static const struct {
    const char *name, *scale_of;
} zero_in_exact[] = {
    {"mha.db_K", "mha.db_Q"},
};

static double max_abs(const double *v, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

static double elem_rel(const double *a, const double *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double den = fmax(fmax(fabs(a[i]), fabs(b[i])), PREC_FLOOR);
        double rel = fabs(a[i] - b[i]) / den;
        if (!(rel <= worst))
            worst = isnan(rel) ? INFINITY : rel;
    }
    return worst;
}

START_TEST(test_case_agrees)
{
    const char *name = pc_float32.case_name(_i);
    ck_assert_msg(name && pc_float64.case_name(_i) && strcmp(name, pc_float64.case_name(_i)) == 0,
                  "case %d: the two builds' case tables differ", _i);
    tensor_set f32 = {0}, f64 = {0};

    run_in(&pc_float32, _i, &f32);
    run_in(&pc_float64, _i, &f64);
    ck_assert_msg(f32.count > 0, "case %s emitted nothing", name);
    ck_assert_msg(f32.count == f64.count, "case %s: %d float32 tensors, %d float64", name,
                  f32.count, f64.count);

    double worst = 0.0;
    const char *worst_name = "";
    for (int k = 0; k < f32.count; k++) {
        const tensor *a = &f32.t[k], *b = set_find(&f64, a->name);
        ck_assert_msg(b != NULL, "float64 run has no tensor %s", a->name);
        ck_assert_msg(a->n == b->n, "%s: %zu float32 values, %zu float64", a->name, a->n, b->n);
        size_t at;
        double r = norm_rel(a->v, b->v, a->n, &at);
        for (size_t z = 0; z < sizeof zero_in_exact / sizeof zero_in_exact[0]; z++) {
            if (strcmp(a->name, zero_in_exact[z].name) != 0)
                continue;
            const tensor *ref = set_find(&f64, zero_in_exact[z].scale_of);
            ck_assert_msg(ref != NULL, "float64 run has no tensor %s", zero_in_exact[z].scale_of);
            double scale = fmax(max_abs(ref->v, ref->n), PREC_FLOOR);
            /* The float64 value must be zero to its own rounding, or the
             * premise is wrong and the tensor belongs with the others. */
            ck_assert_msg(max_abs(b->v, b->n) <= 1e-12 * scale,
                          "%s is %.3e in float64, not zero", a->name, max_abs(b->v, b->n));
            double diff = 0.0;
            for (size_t i = 0; i < a->n; i++) {
                double d = fabs(a->v[i] - b->v[i]);
                diff = isnan(d) ? INFINITY : fmax(diff, d);
            }
            r = diff / scale;
        }
        printf("precision %-22s n=%-5zu max_rel=%.2e at [%zu] (f32 % .9e, f64 % .9e)"
               "  elementwise %.2e\n", a->name, a->n, r, at, a->v[at], b->v[at],
               elem_rel(a->v, b->v, a->n));
        if (!(r <= worst)) {
            worst = r;
            worst_name = a->name;
        }
    }
    fflush(stdout);
    set_free(&f32);
    set_free(&f64);
    ck_assert_msg(worst <= PREC_TOL, "case %s: %s differs by %.3e relative (> %.0e)", name,
                  worst_name, worst, PREC_TOL);
}
END_TEST

/* Each copy calls the library of its precision, and the two are the same
 * release: otherwise the comparison below proves nothing. */
static int builds_ok(void)
{
    const pc_build *b[2] = {&pc_float32, &pc_float64};
    const size_t want[2] = {4, 8};
    for (int k = 0; k < 2; k++) {
        if (b[k]->real_size != want[k] || b[k]->library_real_size() != want[k]) {
            fprintf(stderr, "test_precision: the %s copy has %zu-byte reals and its library "
                    "%zu-byte ones, want %zu\n", b[k]->precision, b[k]->real_size,
                    b[k]->library_real_size(), want[k]);
            return 0;
        }
    }
    if (strcmp(pc_float32.library_version(), pc_float64.library_version()) != 0) {
        fprintf(stderr, "test_precision: libvit %s but libvit-f64 %s\n",
                pc_float32.library_version(), pc_float64.library_version());
        return 0;
    }
    if (pc_float32.case_count() != pc_float64.case_count()) {
        fprintf(stderr, "test_precision: %d float32 cases, %d float64\n",
                pc_float32.case_count(), pc_float64.case_count());
        return 0;
    }
    return 1;
}

int main(void)
{
    if (!builds_ok())
        return EXIT_FAILURE;
    printf("libvit %s (%s) and libvit-f64 (%s) in one process\n", pc_float32.library_version(),
           pc_float32.precision, pc_float64.precision);

    Suite *s = suite_create("test_precision");
    TCase *tc = tcase_create("float32_vs_float64");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_case_agrees, 0, pc_float32.case_count());
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
