/*
 * tests/test_precision.c - the float32 library agrees with the float64 one.
 *
 * Both libraries export the same symbols, so they cannot share a process:
 * this program (float32) runs the cases of precision_cases.c itself and
 * reads the float64 results from the precision_dump program (its path is
 * argv[1]), then compares tensor by tensor:
 *   max_i |a_i - b_i| / max(max_i |a_i|, max_i |b_i|, 1e-3) <= 1e-4
 * (see norm_rel for why the denominator is the tensor's scale).
 * One Check test per case, so a failing kernel is named.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "precision_cases.h"

#define PREC_TOL 1e-4
#define PREC_FLOOR 1e-3
#define MAX_TENSORS 32

static const char *dump_path;

typedef struct {
    char name[64];
    size_t n;
    double *v;
} tensor;

typedef struct {
    tensor t[MAX_TENSORS];
    int count;
    int overflow;         /* more tensors than MAX_TENSORS */
    char error[1024];     /* the dumper's "error" line, if any */
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

/* pc_emit_fn for the float32 run: widen to double and keep. */
static void collect(void *ctx, const char *name, const vit_real *v, size_t n)
{
    tensor *t = set_add(ctx, name, n);
    if (t)
        for (size_t i = 0; i < n; i++)
            t->v[i] = (double)v[i];
}

/* Runs the float64 dumper on one case and parses its blocks. */
static void read_f64(const char *case_name, tensor_set *s)
{
    ck_assert_msg(dump_path != NULL, "no precision_dump path given (argv[1])");
    ck_assert_msg(strchr(dump_path, '\'') == NULL, "dumper path contains a quote");
    char cmd[4096];
    int len = snprintf(cmd, sizeof cmd, "'%s' %s", dump_path, case_name);
    ck_assert_msg(len > 0 && (size_t)len < sizeof cmd, "dumper path too long");
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "popen(%s) failed", cmd);

    char line[1024];
    int ended = 0;
    while (!ended && fgets(line, sizeof line, p)) {
        char name[64];
        size_t n;
        if (sscanf(line, "tensor %63s %zu", name, &n) == 2) {
            tensor *t = set_add(s, name, n);
            ck_assert_msg(t != NULL, "too many tensors from the dumper");
            for (size_t i = 0; i < n; i++) {
                char *end;
                ck_assert_msg(fgets(line, sizeof line, p) != NULL,
                              "dump of %s truncated at %zu of %zu", name, i, n);
                t->v[i] = strtod(line, &end);
                ck_assert_msg(end != line, "bad value '%s' in %s", line, name);
            }
        } else if (strncmp(line, "error ", 6) == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(s->error, sizeof s->error, "%s", line + 6);
        } else if (strcmp(line, "end\n") == 0) {
            ended = 1;
        } else {
            ck_abort_msg("unexpected dumper line '%s'", line);
        }
    }
    int status = pclose(p);
    ck_assert_msg(ended, "dumper output has no 'end' line (command: %s)", cmd);
    ck_assert_msg(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "dumper exited with status %d", status);
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
    const char *name = pc_case_name(_i);
    tensor_set f32 = {0}, f64 = {0};

    int rc = pc_run_case(_i, collect, &f32);
    ck_assert_msg(rc == VIT_OK, "float32 case %s failed: %s %s", name, vit_status_name(rc),
                  vit_last_error());
    ck_assert_msg(!f32.overflow, "case %s emits more than %d tensors", name, MAX_TENSORS);
    read_f64(name, &f64);
    ck_assert_msg(f64.error[0] == '\0', "float64 case failed: %s", f64.error);
    ck_assert_msg(f32.count > 0, "case %s emitted nothing", name);
    ck_assert_msg(f32.count == f64.count, "case %s: %d float32 tensors, %d float64", name,
                  f32.count, f64.count);

    double worst = 0.0;
    const char *worst_name = "";
    for (int k = 0; k < f32.count; k++) {
        const tensor *a = &f32.t[k], *b = set_find(&f64, a->name);
        ck_assert_msg(b != NULL, "float64 dump has no tensor %s", a->name);
        ck_assert_msg(a->n == b->n, "%s: %zu float32 values, %zu float64", a->name, a->n, b->n);
        size_t at;
        double r = norm_rel(a->v, b->v, a->n, &at);
        for (size_t z = 0; z < sizeof zero_in_exact / sizeof zero_in_exact[0]; z++) {
            if (strcmp(a->name, zero_in_exact[z].name) != 0)
                continue;
            const tensor *ref = set_find(&f64, zero_in_exact[z].scale_of);
            ck_assert_msg(ref != NULL, "float64 dump has no tensor %s", zero_in_exact[z].scale_of);
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

int main(int argc, char **argv)
{
    if (vit_real_size() != 4 || sizeof(vit_real) != 4) {
        fprintf(stderr, "test_precision: must be built against the float32 library\n");
        return EXIT_FAILURE;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: test_precision PATH_TO_PRECISION_DUMP\n");
        return EXIT_FAILURE;
    }
    dump_path = argv[1];

    Suite *s = suite_create("test_precision");
    TCase *tc = tcase_create("float32_vs_float64");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_case_agrees, 0, pc_case_count());
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
