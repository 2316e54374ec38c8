/*
 * Attention at numerical extremes (float64 build): scores near +1e4 and
 * -1e4, saturated scores spread over +-1e4, all-equal scores, fully masked
 * rows (one row, and a padding-only item), d_k = 1024 and a single token.
 *
 * For each case the forward must give finite outputs and attention maps
 * whose rows sum to 1 (0 for a row with nothing allowed), the backward
 * finite gradients, and every gradient (q, k, v and the score bias when
 * there is one) must pass the shared central-difference check at the usual
 * bar (gc_check, GC_TOL).  A softmax that forgot to subtract the row max
 * overflows to inf/inf = NaN at +1e4 and underflows to 0/0 at -1e4; one
 * that divided a fully masked row by its zero sum gives NaN as well.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "vit/attention.h"

/* One attention problem with its inputs, outputs and the loss weights. */
typedef struct xcase {
    vit_sdpa a;
    vit_real *q, *k, *v, *bias;
    vit_real *out, *probs, *w; /* w: dL/dout of L = sum w .* out */
    size_t nq, nk, nv, nout, nprobs, nbias;
} xcase;

static void xcase_alloc(xcase *c)
{
    const vit_sdpa *a = &c->a;
    c->nq = (size_t)a->batch * a->n_q * a->heads * a->d_k;
    c->nk = (size_t)a->batch * a->n_k * a->heads * a->d_k;
    c->nv = (size_t)a->batch * a->n_k * a->heads * a->d_v;
    c->nout = (size_t)a->batch * a->n_q * a->heads * a->d_v;
    c->nprobs = (size_t)a->batch * a->heads * a->n_q * a->n_k;
    c->nbias = (size_t)(a->bias_heads ? a->bias_heads : 1) * a->n_q * a->n_k;
    c->q = gc_zeros(c->nq);
    c->k = gc_zeros(c->nk);
    c->v = gc_zeros(c->nv);
    c->out = gc_zeros(c->nout);
    c->probs = gc_zeros(c->nprobs);
    c->w = gc_zeros(c->nout);
    c->bias = NULL;
}

static void xcase_free(xcase *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->bias);
    free(c->out);
    free(c->probs);
    free(c->w);
}

static double xcase_loss(void *ctx)
{
    xcase *c = ctx;
    c->a.bias = c->bias;
    ck_assert_int_eq(vit_sdpa_forward(&c->a, c->out, c->probs, c->q, c->k, c->v), VIT_OK);
    return gc_dot(c->w, c->out, c->nout);
}

static void assert_finite(const char *what, const vit_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite((double)x[i]))
            ck_abort_msg("%s[%zu] = %g is not finite", what, i, (double)x[i]);
}

/* Row sums of the maps: 1, or 0 for rows listed in empty_row (which may be
 * NULL when no row is fully masked).  Also every weight in [0, 1]. */
static void assert_rows(const xcase *c, const unsigned char *empty_row)
{
    size_t rows = c->nprobs / (size_t)c->a.n_k;
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (int j = 0; j < c->a.n_k; j++) {
            double p = (double)c->probs[r * (size_t)c->a.n_k + (size_t)j];
            ck_assert_msg(p >= 0 && p <= 1, "probs row %zu entry %d = %g", r, j, p);
            s += p;
        }
        double want = empty_row && empty_row[r] ? 0.0 : 1.0;
        ck_assert_msg(fabs(s - want) <= 1e-12, "probs row %zu sums to %.17g, expected %g", r, s,
                      want);
    }
}

/* Forward, backward and the gradient check of every input of c. */
static void check_case(const char *name, xcase *c, const unsigned char *empty_row)
{
    char label[96];
    xcase_loss(c);
    assert_finite("out", c->out, c->nout);
    assert_finite("probs", c->probs, c->nprobs);
    assert_rows(c, empty_row);

    vit_real *dq = gc_zeros(c->nq), *dk = gc_zeros(c->nk), *dv = gc_zeros(c->nv);
    vit_real *db = c->bias ? gc_zeros(c->nbias) : NULL;
    ck_assert_int_eq(vit_sdpa_backward(&c->a, dq, dk, dv, db, c->w, c->probs, c->q, c->k, c->v,
                                       NULL), VIT_OK);
    assert_finite("dq", dq, c->nq);
    assert_finite("dk", dk, c->nk);
    assert_finite("dv", dv, c->nv);

    struct { const char *n; vit_real *x, *g; size_t len; } t[4] = {
        {"q", c->q, dq, c->nq}, {"k", c->k, dk, c->nk}, {"v", c->v, dv, c->nv},
        {"bias", c->bias, db, c->bias ? c->nbias : 0}};
    for (int i = 0; i < 4; i++) {
        if (t[i].len == 0)
            continue;
        snprintf(label, sizeof label, "%s %s", name, t[i].n);
        double err = gc_check(label, t[i].x, t[i].g, t[i].len, xcase_loss, c);
        ck_assert_msg(err <= GC_TOL, "%s: max relative error %.3e > %.0e", label, err, GC_TOL);
    }
    free(dq);
    free(dk);
    free(dv);
    free(db);
}

/* A shape with random q, k, v, w in [-1, 1] scaled as given. */
static void make(xcase *c, int batch, int heads, int n_q, int n_k, int d_k, int d_v, double qs,
                 double ks, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->a.batch = batch;
    c->a.heads = heads;
    c->a.n_q = n_q;
    c->a.n_k = n_k;
    c->a.d_k = d_k;
    c->a.d_v = d_v;
    xcase_alloc(c);
    gc_fill(c->q, c->nq, &seed, qs);
    gc_fill(c->k, c->nk, &seed, ks);
    gc_fill(c->v, c->nv, &seed, 1.0);
    gc_fill(c->w, c->nout, &seed, 1.0);
}

/* The forward's outputs and the backward's gradients of c into fresh
 * buffers: outputs [nout], maps [nprobs], then dq, dk, dv, dbias. */
typedef struct results {
    vit_real *out, *probs, *g[4];
} results;

static results run_case(xcase *c)
{
    results r;
    xcase_loss(c);
    r.out = gc_zeros(c->nout);
    r.probs = gc_zeros(c->nprobs);
    memcpy(r.out, c->out, c->nout * sizeof *r.out);
    memcpy(r.probs, c->probs, c->nprobs * sizeof *r.probs);
    r.g[0] = gc_zeros(c->nq);
    r.g[1] = gc_zeros(c->nk);
    r.g[2] = gc_zeros(c->nv);
    r.g[3] = gc_zeros(c->nbias);
    ck_assert_int_eq(vit_sdpa_backward(&c->a, r.g[0], r.g[1], r.g[2], r.g[3], c->w, c->probs,
                                       c->q, c->k, c->v, NULL), VIT_OK);
    return r;
}

static void results_free(results *r)
{
    free(r->out);
    free(r->probs);
    for (int i = 0; i < 4; i++)
        free(r->g[i]);
}

/* Scores of order 1 riding on a shared bias of +-1e4: the softmax must
 * subtract the row max (exp(1e4) overflows, exp(-1e4) underflows).
 * Adding the same constant to every score of a row changes nothing, so the
 * outputs and every gradient must equal those without the offset, which
 * pass the float64 gradient check first (at the same bar, GC_TOL).
 * The central difference itself cannot be taken at the offset point: a
 * score near 1e4 is only known to ulp(1e4)/2 = 9e-13 whatever the kernel
 * does, so the difference quotient of step 1e-5 carries about 5e-8 of
 * rounding, which exceeds the bar for small gradient entries. */
static void offset_case(double offset)
{
    xcase c;
    uint64_t seed = 11;
    const char *names[4] = {"dq", "dk", "dv", "dbias"};
    make(&c, 2, 2, 3, 4, 4, 3, 3.0, 3.0, 5);
    c.a.scale = (vit_real)0.25;
    c.a.bias_heads = 1;
    c.nbias = (size_t)c.a.n_q * c.a.n_k;
    c.bias = gc_zeros(c.nbias);
    gc_fill(c.bias, c.nbias, &seed, 1.0);
    check_case("offset 0 (reference)", &c, NULL);
    results ref = run_case(&c);

    for (size_t i = 0; i < c.nbias; i++)
        c.bias[i] += (vit_real)offset;
    results got = run_case(&c);
    assert_finite("out", got.out, c.nout);
    assert_rows(&c, NULL);
    size_t n[4] = {c.nq, c.nk, c.nv, c.nbias};
    double err = gc_max_rel(got.out, ref.out, c.nout, GC_ABS_FLOOR);
    printf("offset %+g: out max_rel %.2e vs no offset\n", offset, err);
    ck_assert_msg(err <= GC_TOL, "offset %g: outputs differ by %.3e", offset, err);
    for (int t = 0; t < 4; t++) {
        assert_finite(names[t], got.g[t], n[t]);
        err = gc_max_rel(got.g[t], ref.g[t], n[t], GC_ABS_FLOOR);
        printf("offset %+g: %-5s max_rel %.2e vs the checked gradient without offset\n", offset,
               names[t], err);
        ck_assert_msg(err <= GC_TOL, "offset %g: %s differs from the checked one by %.3e", offset,
                      names[t], err);
    }
    results_free(&ref);
    results_free(&got);
    xcase_free(&c);
}

START_TEST(test_scores_near_plus_1e4)
{
    offset_case(1e4);
}
END_TEST

START_TEST(test_scores_near_minus_1e4)
{
    offset_case(-1e4);
}
END_TEST

/* Raw scores spread over about +-1e4 (|q|, |k| ~ 50, d_k = 16, scale 1):
 * every row saturates to a one-hot map, whose gradient is exactly 0. */
START_TEST(test_saturated_scores)
{
    xcase c;
    make(&c, 1, 2, 3, 5, 16, 2, 50.0, 50.0, 21);
    c.a.scale = 1;
    xcase_loss(&c);
    double big = 0;
    for (size_t i = 0; i < c.nprobs; i++)
        big = fmax(big, (double)c.probs[i]);
    ck_assert_msg(big == 1.0, "expected saturated (one-hot) rows, max weight %.17g", big);
    check_case("saturated +-1e4", &c, NULL);
    xcase_free(&c);
}
END_TEST

/* All-equal scores: q = 0 gives every key the same score, so every row is
 * uniform, 1/n_k exactly. */
START_TEST(test_all_equal_scores)
{
    xcase c;
    make(&c, 2, 1, 4, 5, 3, 2, 0.0, 1.0, 31);
    xcase_loss(&c);
    for (size_t i = 0; i < c.nprobs; i++)
        ck_assert_msg(fabs((double)c.probs[i] - 0.2) <= 1e-15, "probs[%zu] = %.17g", i,
                      (double)c.probs[i]);
    check_case("all-equal", &c, NULL);
    xcase_free(&c);
}
END_TEST

/* One query row with no allowed key, and one batch item whose keys are all
 * padding: those rows give zero weights and outputs and pass no gradient. */
START_TEST(test_fully_masked_rows)
{
    xcase c;
    enum { NQ = 3, NK = 4 };
    static const unsigned char allowed[NQ * NK] = {1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1, 1};
    static const unsigned char key_valid[2 * NK] = {1, 1, 1, 1, 0, 0, 0, 0};
    /* rows are (item, head, query): item 0 loses query 1, item 1 loses all */
    static const unsigned char empty[2 * 2 * NQ] = {0, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1};
    make(&c, 2, 2, NQ, NK, 3, 2, 1.0, 1.0, 41);
    c.a.mask.allowed = allowed;
    c.a.mask.key_valid = key_valid;
    check_case("fully masked rows", &c, empty);
    xcase_loss(&c); /* the outputs of the unperturbed inputs again */
    for (size_t i = 0; i < c.nout; i++) {
        size_t b = i / ((size_t)NQ * 2 * 2), qi = i / (2 * 2) % NQ;
        if (b == 1 || qi == 1)
            ck_assert_msg(c.out[i] == 0, "out[%zu] = %g, expected exactly 0", i, (double)c.out[i]);
    }
    xcase_free(&c);
}
END_TEST

/* d_k = 1024 with the default scale 1/32: long dot products stay accurate. */
START_TEST(test_wide_heads)
{
    xcase c;
    make(&c, 1, 1, 3, 3, 1024, 4, 1.0, 1.0, 51);
    check_case("d_k 1024", &c, NULL);
    xcase_free(&c);
}
END_TEST

/* A single token: the map is [1], the output is v and q, k get no gradient. */
START_TEST(test_single_token)
{
    xcase c;
    make(&c, 2, 3, 1, 1, 4, 2, 1.0, 1.0, 61);
    check_case("single token", &c, NULL);
    xcase_loss(&c); /* the outputs of the unperturbed inputs again */
    for (size_t i = 0; i < c.nprobs; i++)
        ck_assert(c.probs[i] == 1);
    for (size_t i = 0; i < c.nout; i++)
        ck_assert(c.out[i] == c.v[i]);
    xcase_free(&c);
}
END_TEST

static Suite *extremes_suite(void)
{
    Suite *s = suite_create("attention extremes");
    TCase *t = tcase_create("extremes");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_scores_near_plus_1e4);
    tcase_add_test(t, test_scores_near_minus_1e4);
    tcase_add_test(t, test_saturated_scores);
    tcase_add_test(t, test_all_equal_scores);
    tcase_add_test(t, test_fully_masked_rows);
    tcase_add_test(t, test_wide_heads);
    tcase_add_test(t, test_single_token);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    if (vit_real_size() != 8) {
        fprintf(stderr, "test_extremes needs the float64 library\n");
        return EXIT_FAILURE;
    }
    SRunner *r = srunner_create(extremes_suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
