/*
 * tests/test_kernels.c - the basic kernels (linear, layernorm, GELU,
 * residual, multiply, scale, softmax, cross-entropy, embeddings, embedding
 * lookup, masked mean pooling), float64 build.
 *
 *  - gradient checks: every input and parameter gradient against central
 *    differences (gc_check) of a scalar L = sum w * y with fixed random w;
 *  - forward checks against naive references written here from the maths,
 *    not from the library's code;
 *  - bad input: the documented error codes and a message naming the
 *    function and the argument.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gradcheck.h"
#include "vit/activations.h"
#include "vit/embeddings.h"
#include "vit/layernorm.h"
#include "vit/linear.h"
#include "vit/local_conv.h"
#include "vit/loss.h"
#include "vit/pool.h"

/* Forward results against references computed in double by other formulas:
 * only rounding differences are expected. */
#define FWD_TOL 1e-12

#define ASSERT_GRAD(name, x, g, n, f, ctx)                                         \
    do {                                                                           \
        double e_ = gc_check(name, x, g, n, f, ctx);                               \
        ck_assert_msg(e_ <= GC_TOL, "%s: max_rel %.3e > %.0e", name, e_, GC_TOL);  \
    } while (0)

#define ASSERT_OK(call) \
    do { int rc_ = (call); ck_assert_msg(rc_ == VIT_OK, "%s -> %s: %s", #call, vit_status_name(rc_), vit_last_error()); } while (0)

/* rc must be `code` and the message must name the function and the argument. */
static void expect_err(int rc, int code, const char *fn, const char *what)
{
    const char *msg = vit_last_error();
    ck_assert_msg(rc == code, "%s: expected %s, got %s", fn, vit_status_name(code),
                  vit_status_name(rc));
    ck_assert_msg(msg[0] != '\0', "%s: empty error message", fn);
    ck_assert_msg(strstr(msg, fn) != NULL, "message '%s' does not name %s", msg, fn);
    ck_assert_msg(strstr(msg, what) != NULL, "message '%s' does not name '%s'", msg, what);
}

/* Backward kernels accumulate: starting from g + 1 (g the gradient a first
 * call produced from zeros), a second call must leave 2 g + 1.  Returns a
 * buffer holding g + 1 for the caller to pass to that second call. */
static vit_real *accum_start(const vit_real *g, size_t n)
{
    vit_real *b = gc_zeros(n);
    for (size_t i = 0; i < n; i++)
        b[i] = g[i] + 1;
    return b;
}

static void accum_check(const char *name, vit_real *b, const vit_real *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(b[i] - (2 * g[i] + 1)) <= 1e-12,
                      "%s does not accumulate: [%zu] = %g, want %g", name, i,
                      (double)b[i], 2 * (double)g[i] + 1);
    free(b);
}

/* ==== Linear =========================================================== */

enum { LN_N = 3, LN_IN = 4, LN_OUT = 5 };

typedef struct {
    vit_real x[LN_N * LN_IN], W[LN_IN * LN_OUT], b[LN_OUT];
    vit_real y[LN_N * LN_OUT], w[LN_N * LN_OUT];
} linear_ctx;

static double linear_loss(void *p)
{
    linear_ctx *c = p;
    if (vit_linear_forward(c->y, c->x, c->W, c->b, LN_N, LN_IN, LN_OUT) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, LN_N * LN_OUT);
}

static void linear_init(linear_ctx *c, uint64_t seed)
{
    gc_fill(c->x, LN_N * LN_IN, &seed, 1.0);
    gc_fill(c->W, LN_IN * LN_OUT, &seed, 1.0);
    gc_fill(c->b, LN_OUT, &seed, 1.0);
    gc_fill(c->w, LN_N * LN_OUT, &seed, 1.0);
}

START_TEST(test_linear_forward)
{
    linear_ctx c;
    linear_init(&c, 11);
    vit_real ref[LN_N * LN_OUT];
    for (int i = 0; i < LN_N; i++)
        for (int o = 0; o < LN_OUT; o++) {
            double s = c.b[o];
            for (int k = 0; k < LN_IN; k++)
                s += (double)c.x[i * LN_IN + k] * c.W[k * LN_OUT + o];
            ref[i * LN_OUT + o] = s;
        }
    ASSERT_OK(vit_linear_forward(c.y, c.x, c.W, c.b, LN_N, LN_IN, LN_OUT));
    ck_assert_double_le(gc_max_abs_diff(c.y, ref, LN_N * LN_OUT), FWD_TOL);

    /* Without bias: the same minus b.  y is pre-filled with garbage to check
     * it is overwritten, not accumulated. */
    for (int i = 0; i < LN_N * LN_OUT; i++) {
        ref[i] -= c.b[i % LN_OUT];
        c.y[i] = 1e6;
    }
    ASSERT_OK(vit_linear_forward(c.y, c.x, c.W, NULL, LN_N, LN_IN, LN_OUT));
    ck_assert_double_le(gc_max_abs_diff(c.y, ref, LN_N * LN_OUT), FWD_TOL);
}
END_TEST

START_TEST(test_linear_grad)
{
    linear_ctx c;
    linear_init(&c, 12);
    vit_real *dx = gc_zeros(LN_N * LN_IN), *dW = gc_zeros(LN_IN * LN_OUT), *db = gc_zeros(LN_OUT);
    ASSERT_OK(vit_linear_backward(dx, dW, db, c.w, c.x, c.W, LN_N, LN_IN, LN_OUT));
    ASSERT_GRAD("linear dx", c.x, dx, LN_N * LN_IN, linear_loss, &c);
    ASSERT_GRAD("linear dW", c.W, dW, LN_IN * LN_OUT, linear_loss, &c);
    ASSERT_GRAD("linear db", c.b, db, LN_OUT, linear_loss, &c);

    vit_real *ax = accum_start(dx, LN_N * LN_IN), *aw = accum_start(dW, LN_IN * LN_OUT),
             *ab = accum_start(db, LN_OUT);
    ASSERT_OK(vit_linear_backward(ax, aw, ab, c.w, c.x, c.W, LN_N, LN_IN, LN_OUT));
    accum_check("linear dx", ax, dx, LN_N * LN_IN);
    accum_check("linear dW", aw, dW, LN_IN * LN_OUT);
    accum_check("linear db", ab, db, LN_OUT);

    /* NULL gradients are skipped, and x / W are then not needed. */
    vit_real *dW2 = accum_start(dW, LN_IN * LN_OUT);
    ASSERT_OK(vit_linear_backward(NULL, dW2, NULL, c.w, c.x, NULL, LN_N, LN_IN, LN_OUT));
    accum_check("linear dW (dx, db NULL)", dW2, dW, LN_IN * LN_OUT);
    free(dx); free(dW); free(db);
}
END_TEST

/* ==== Layernorm ======================================================== */

enum { LNR_N = 3, LNR_D = 6 };

typedef struct {
    vit_real x[LNR_N * LNR_D], gamma[LNR_D], beta[LNR_D];
    vit_real y[LNR_N * LNR_D], mean[LNR_N], rstd[LNR_N], w[LNR_N * LNR_D];
} ln_ctx;

static double ln_loss(void *p)
{
    ln_ctx *c = p;
    if (vit_layernorm_forward(c->y, c->mean, c->rstd, c->x, c->gamma, c->beta, LNR_N, LNR_D,
                              VIT_LAYERNORM_EPS) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, LNR_N * LNR_D);
}

static void ln_init(ln_ctx *c, uint64_t seed)
{
    gc_fill(c->x, LNR_N * LNR_D, &seed, 2.0);
    gc_fill(c->gamma, LNR_D, &seed, 0.5);
    for (int j = 0; j < LNR_D; j++)
        c->gamma[j] += 1.0;
    gc_fill(c->beta, LNR_D, &seed, 0.5);
    gc_fill(c->w, LNR_N * LNR_D, &seed, 1.0);
}

START_TEST(test_layernorm_forward)
{
    ln_ctx c;
    ln_init(&c, 21);
    /* Offset one row far from 0 to exercise the cancellation-prone case. */
    for (int j = 0; j < LNR_D; j++)
        c.x[LNR_D + j] += 1000.0;
    vit_real one[LNR_D], zero[LNR_D];
    for (int j = 0; j < LNR_D; j++) { one[j] = 1; zero[j] = 0; }
    ASSERT_OK(vit_layernorm_forward(c.y, c.mean, c.rstd, c.x, one, zero, LNR_N, LNR_D,
                                    VIT_LAYERNORM_EPS));
    for (int i = 0; i < LNR_N; i++) {
        const vit_real *xr = c.x + i * LNR_D, *yr = c.y + i * LNR_D;
        double m = 0, v = 0, ym = 0, yv = 0;
        for (int j = 0; j < LNR_D; j++) m += xr[j];
        m /= LNR_D;
        for (int j = 0; j < LNR_D; j++) v += (xr[j] - m) * (xr[j] - m);
        v /= LNR_D;
        for (int j = 0; j < LNR_D; j++) ym += yr[j];
        ym /= LNR_D;
        for (int j = 0; j < LNR_D; j++) yv += (yr[j] - ym) * (yr[j] - ym);
        yv /= LNR_D;
        /* Normalized rows: mean 0 and variance v / (v + eps) (1 up to eps). */
        ck_assert_double_le(fabs(ym), 1e-12);
        ck_assert_double_le(fabs(yv - v / (v + VIT_LAYERNORM_EPS)), 1e-10);
        ck_assert_double_le(fabs(c.mean[i] - m), 1e-9);
        ck_assert_double_le(fabs(c.rstd[i] - 1 / sqrt(v + VIT_LAYERNORM_EPS)) * sqrt(v), 1e-10);
    }
    /* Affine part, and in-place operation (y aliasing x). */
    vit_real ref[LNR_N * LNR_D], xin[LNR_N * LNR_D];
    for (int i = 0; i < LNR_N * LNR_D; i++)
        ref[i] = c.y[i] * c.gamma[i % LNR_D] + c.beta[i % LNR_D];
    memcpy(xin, c.x, sizeof xin);
    ASSERT_OK(vit_layernorm_forward(xin, c.mean, c.rstd, xin, c.gamma, c.beta, LNR_N, LNR_D,
                                    VIT_LAYERNORM_EPS));
    ck_assert_double_le(gc_max_abs_diff(xin, ref, LNR_N * LNR_D), 1e-10);
}
END_TEST

START_TEST(test_layernorm_grad)
{
    ln_ctx c;
    ln_init(&c, 22);
    ck_assert_double_eq(ln_loss(&c), ln_loss(&c)); /* fills mean and rstd */
    vit_real *dx = gc_zeros(LNR_N * LNR_D), *dg = gc_zeros(LNR_D), *dbt = gc_zeros(LNR_D);
    ASSERT_OK(vit_layernorm_backward(dx, dg, dbt, c.w, c.x, c.mean, c.rstd, c.gamma, LNR_N, LNR_D));
    ASSERT_GRAD("layernorm dx", c.x, dx, LNR_N * LNR_D, ln_loss, &c);
    ASSERT_GRAD("layernorm dgamma", c.gamma, dg, LNR_D, ln_loss, &c);
    ASSERT_GRAD("layernorm dbeta", c.beta, dbt, LNR_D, ln_loss, &c);
    ck_assert(isfinite(ln_loss(&c))); /* mean, rstd of the unperturbed x again */
    vit_real *ax = accum_start(dx, LNR_N * LNR_D), *ag = accum_start(dg, LNR_D),
             *ab = accum_start(dbt, LNR_D);
    ASSERT_OK(vit_layernorm_backward(ax, ag, ab, c.w, c.x, c.mean, c.rstd, c.gamma, LNR_N, LNR_D));
    accum_check("layernorm dx", ax, dx, LNR_N * LNR_D);
    accum_check("layernorm dgamma", ag, dg, LNR_D);
    accum_check("layernorm dbeta", ab, dbt, LNR_D);
    free(dx); free(dg); free(dbt);
}
END_TEST

/* On one thread the backward makes dx, dgamma and dbeta in one pass over
 * the rows; on two, dx by rows and the parameters' sums by columns.  Both
 * must give the same bits (the float32 training's result depends on it),
 * accumulating onto nonzero gradients.  64 x 160 is large enough for two
 * threads to split it. */
START_TEST(test_layernorm_backward_passes)
{
    enum { N = 64, D = 160 };
    uint64_t seed = 23;
    vit_real *x = gc_zeros(N * D), *dy = gc_zeros(N * D), *y = gc_zeros(N * D);
    vit_real gamma[D], beta[D], mean[N], rstd[N];
    gc_fill(x, N * D, &seed, 2.0);
    gc_fill(dy, N * D, &seed, 1.0);
    gc_fill(gamma, D, &seed, 0.5);
    gc_fill(beta, D, &seed, 0.5);
    ASSERT_OK(vit_layernorm_forward(y, mean, rstd, x, gamma, beta, N, D, VIT_LAYERNORM_EPS));
    vit_real *out[2][3];
    for (int k = 0; k < 2; k++) {
        uint64_t s0 = 24; /* the same starting values for both */
        out[k][0] = gc_zeros(N * D);
        out[k][1] = gc_zeros(D);
        out[k][2] = gc_zeros(D);
        gc_fill(out[k][0], N * D, &s0, 1.0);
        gc_fill(out[k][1], D, &s0, 1.0);
        gc_fill(out[k][2], D, &s0, 1.0);
        ck_assert_int_eq(vit_set_threads(k ? 2 : 1), VIT_OK);
        ASSERT_OK(vit_layernorm_backward(out[k][0], out[k][1], out[k][2], dy, x, mean, rstd,
                                         gamma, N, D));
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    vit_set_threads(ncpu > 0 ? (int)ncpu : 1);
    ck_assert_msg(!memcmp(out[0][0], out[1][0], N * D * sizeof(vit_real)), "dx differs");
    ck_assert_msg(!memcmp(out[0][1], out[1][1], D * sizeof(vit_real)), "dgamma differs");
    ck_assert_msg(!memcmp(out[0][2], out[1][2], D * sizeof(vit_real)), "dbeta differs");
    /* and they moved: the backward did add something */
    uint64_t s0 = 24;
    vit_real *start = gc_zeros(N * D);
    gc_fill(start, N * D, &s0, 1.0);
    ck_assert_double_gt(gc_max_abs_diff(start, out[0][0], N * D), 1e-3);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++)
            free(out[k][i]);
    free(start); free(x); free(dy); free(y);
}
END_TEST

/* The bias gradient's column sums run in register blocks of 64 and 16
 * columns and the last few row by row: each column must still be its rows
 * added in order onto what db held, bit for bit, at every width (blocks
 * only, blocks and a remainder, a remainder only), on one thread and two. */
START_TEST(test_column_sums_in_order)
{
    enum { N = 140 }; /* 140 x 192 is split across two threads */
    static const int widths[] = {3, 16, 64, 100, 147, 192};
    uint64_t seed = 31;
    for (int th = 1; th <= 2; th++) {
        ck_assert_int_eq(vit_set_threads(th), VIT_OK);
        for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
            const int out = widths[w];
            vit_real *dy = gc_zeros((size_t)N * out), *db = gc_zeros(out), *ref = gc_zeros(out);
            gc_fill(dy, (size_t)N * out, &seed, 1.0);
            gc_fill(db, out, &seed, 1.0);
            memcpy(ref, db, (size_t)out * sizeof *ref);
            for (int i = 0; i < N; i++)
                for (int j = 0; j < out; j++)
                    ref[j] += dy[i * out + j];
            ASSERT_OK(vit_linear_backward(NULL, NULL, db, dy, NULL, NULL, N, 1, out));
            ck_assert_msg(!memcmp(db, ref, (size_t)out * sizeof *db),
                          "column sums of width %d on %d thread(s) differ from row order", out, th);
            free(dy); free(db); free(ref);
        }
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    vit_set_threads(ncpu > 0 ? (int)ncpu : 1);
}
END_TEST

/* ==== GELU ============================================================ */

enum { G_N = 21 };

typedef struct {
    vit_real x[G_N], y[G_N], w[G_N];
} gelu_ctx;

static double gelu_loss(void *p)
{
    gelu_ctx *c = p;
    if (vit_gelu_forward(c->y, c->x, G_N) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, G_N);
}

START_TEST(test_gelu_forward)
{
    /* x Phi(x) with Phi(1) = 0.8413447460685429 (normal CDF tables). */
    vit_real x[5] = {1, -1, 0, 10, -10}, y[5];
    ASSERT_OK(vit_gelu_forward(y, x, 5));
    ck_assert_double_eq_tol(y[0], 0.8413447460685429, 1e-15);
    ck_assert_double_eq_tol(y[1], -(1 - 0.8413447460685429), 1e-15);
    ck_assert_double_eq(y[2], 0.0);
    ck_assert_double_eq_tol(y[3], 10.0, 1e-15);
    ck_assert_double_le(fabs(y[4]), 1e-20);
    /* Against Phi written with erfc, a different route to the same value. */
    vit_real xs[G_N], ys[G_N];
    for (int i = 0; i < G_N; i++)
        xs[i] = -5.0 + 0.5 * i;
    ASSERT_OK(vit_gelu_forward(ys, xs, G_N));
    for (int i = 0; i < G_N; i++) {
        double ref = xs[i] * 0.5 * erfc(-xs[i] / sqrt(2.0));
        ck_assert_double_le(fabs(ys[i] - ref), 1e-15 * fmax(1, fabs(ref)));
    }
    /* GELU'(0) = Phi(0) = 1/2. */
    vit_real dx = 0, dy = 1, x0 = 0;
    ASSERT_OK(vit_gelu_backward(&dx, &dy, &x0, 1));
    ck_assert_double_eq_tol(dx, 0.5, 1e-15);
}
END_TEST

START_TEST(test_gelu_grad)
{
    gelu_ctx c;
    uint64_t seed = 31;
    gc_fill(c.x, G_N, &seed, 3.0);
    c.x[0] = 0.0;
    gc_fill(c.w, G_N, &seed, 1.0);
    vit_real *dx = gc_zeros(G_N);
    ASSERT_OK(vit_gelu_backward(dx, c.w, c.x, G_N));
    ASSERT_GRAD("gelu dx", c.x, dx, G_N, gelu_loss, &c);
    vit_real *acc = accum_start(dx, G_N);
    ASSERT_OK(vit_gelu_backward(acc, c.w, c.x, G_N));
    accum_check("gelu dx", acc, dx, G_N);
    free(dx);
}
END_TEST

/* ==== Residual, multiply, scale ======================================== */

/* The elementwise ops with one or two inputs share a context and one
 * check.  EW_SQUARE is a * a through vit_mul_forward(y, a, a): a tensor
 * used twice, whose gradient buffer is passed as both da and db. */
enum ew_op { EW_ADD, EW_MUL, EW_SQUARE, EW_SCALE, EW_OPS };
static const char *const ew_names[EW_OPS] = {"residual", "mul", "mul a*a", "scale"};

typedef struct {
    enum ew_op op;
    vit_real a[G_N], b[G_N], y[G_N], w[G_N], s;
} ew_ctx;

static int ew_forward(const ew_ctx *c, vit_real *y)
{
    switch (c->op) {
    case EW_ADD: return vit_residual_forward(y, c->a, c->b, G_N);
    case EW_MUL: return vit_mul_forward(y, c->a, c->b, G_N);
    case EW_SQUARE: return vit_mul_forward(y, c->a, c->a, G_N);
    default: return vit_scale_forward(y, c->a, c->s, G_N);
    }
}

/* dy = w; db is not passed for the one-input ops. */
static int ew_backward(const ew_ctx *c, vit_real *da, vit_real *db)
{
    switch (c->op) {
    case EW_ADD: return vit_residual_backward(da, db, c->w, G_N);
    case EW_MUL: return vit_mul_backward(da, db, c->w, c->a, c->b, G_N);
    case EW_SQUARE: return vit_mul_backward(da, da, c->w, c->a, c->a, G_N);
    default: return vit_scale_backward(da, c->w, c->s, G_N);
    }
}

/* Naive reference, entry i. */
static double ew_ref(const ew_ctx *c, int i)
{
    switch (c->op) {
    case EW_ADD: return (double)c->a[i] + c->b[i];
    case EW_MUL: return (double)c->a[i] * c->b[i];
    case EW_SQUARE: return (double)c->a[i] * c->a[i];
    default: return (double)c->s * c->a[i];
    }
}

static double ew_loss(void *p)
{
    ew_ctx *c = p;
    if (ew_forward(c, c->y) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, G_N);
}

START_TEST(test_elementwise)
{
    ew_ctx c;
    c.op = (enum ew_op)_i;
    c.s = -1.75;
    uint64_t seed = 41 + _i;
    gc_fill(c.a, G_N, &seed, 1.0);
    gc_fill(c.b, G_N, &seed, 1.0);
    gc_fill(c.w, G_N, &seed, 1.0);
    const int two = c.op == EW_ADD || c.op == EW_MUL; /* b is an input */
    char name[64];

    /* Forward: overwritten (y pre-filled), then in place (y aliasing a; for
     * a * a, both inputs). */
    for (int i = 0; i < G_N; i++)
        c.y[i] = 1e6;
    ASSERT_OK(ew_forward(&c, c.y));
    for (int i = 0; i < G_N; i++)
        ck_assert_double_eq(c.y[i], ew_ref(&c, i));
    vit_real a0[G_N];
    memcpy(a0, c.a, sizeof a0);
    ASSERT_OK(ew_forward(&c, c.a));
    ck_assert_double_le(gc_max_abs_diff(c.a, c.y, G_N), 0.0);
    memcpy(c.a, a0, sizeof a0);

    vit_real *da = gc_zeros(G_N), *db = gc_zeros(G_N);
    ASSERT_OK(ew_backward(&c, da, two ? db : NULL));
    snprintf(name, sizeof name, "%s da", ew_names[_i]);
    ASSERT_GRAD(name, c.a, da, G_N, ew_loss, &c);
    if (two) {
        snprintf(name, sizeof name, "%s db", ew_names[_i]);
        ASSERT_GRAD(name, c.b, db, G_N, ew_loss, &c);
    }
    /* Accumulation with each gradient alone (the other NULL), then none. */
    vit_real *acc = accum_start(da, G_N);
    ASSERT_OK(ew_backward(&c, acc, NULL));
    accum_check(ew_names[_i], acc, da, G_N);
    if (two) {
        acc = accum_start(db, G_N);
        ASSERT_OK(ew_backward(&c, NULL, acc));
        accum_check(ew_names[_i], acc, db, G_N);
    }
    ASSERT_OK(ew_backward(&c, NULL, NULL));
    free(da); free(db);
}
END_TEST

START_TEST(test_mul_scale_bad_input)
{
    vit_real a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};
    expect_err(vit_mul_forward(NULL, a, b, 4), VIT_EINVAL, "vit_mul_forward", "y is NULL");
    expect_err(vit_mul_forward(c, a, NULL, 4), VIT_EINVAL, "vit_mul_forward", "b is NULL");
    expect_err(vit_mul_forward(c, a, b, 0), VIT_EINVAL, "vit_mul_forward", "n must be positive");
    expect_err(vit_mul_backward(c, c, NULL, a, b, 4), VIT_EINVAL, "vit_mul_backward", "dy is NULL");
    expect_err(vit_mul_backward(c, NULL, b, NULL, b, 4), VIT_EINVAL, "vit_mul_backward", "a is NULL");
    expect_err(vit_mul_backward(c, c, b, a, b, 0), VIT_EINVAL, "vit_mul_backward", "n must be positive");
    expect_err(vit_scale_forward(c, NULL, 2, 4), VIT_EINVAL, "vit_scale_forward", "x is NULL");
    expect_err(vit_scale_forward(c, a, 2, 0), VIT_EINVAL, "vit_scale_forward", "n must be positive");
    expect_err(vit_scale_backward(c, NULL, 2, 4), VIT_EINVAL, "vit_scale_backward", "dy is NULL");
    const vit_real bad_s[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        expect_err(vit_scale_forward(c, a, bad_s[k], 4), VIT_EINVAL, "vit_scale_forward", "s must be finite");
        expect_err(vit_scale_backward(c, b, bad_s[k], 4), VIT_EINVAL, "vit_scale_backward", "s must be finite");
    }
    /* Nothing written on those failures. */
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq(c[i], 0.0);
}
END_TEST

/* ==== Softmax ========================================================== */

enum { SM_R = 4, SM_C = 5 };

typedef struct {
    vit_real x[SM_R * SM_C], y[SM_R * SM_C], w[SM_R * SM_C];
} sm_ctx;

static double sm_loss(void *p)
{
    sm_ctx *c = p;
    if (vit_softmax_forward(c->y, c->x, SM_R, SM_C) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, SM_R * SM_C);
}

/* Row 2 has two masked (-inf) entries, row 3 is fully masked. */
static void sm_init(sm_ctx *c, uint64_t seed)
{
    gc_fill(c->x, SM_R * SM_C, &seed, 2.0);
    gc_fill(c->w, SM_R * SM_C, &seed, 1.0);
    c->x[2 * SM_C + 1] = -INFINITY;
    c->x[2 * SM_C + 3] = -INFINITY;
    for (int j = 0; j < SM_C; j++)
        c->x[3 * SM_C + j] = -INFINITY;
}

START_TEST(test_softmax_forward)
{
    sm_ctx c;
    sm_init(&c, 51);
    ASSERT_OK(vit_softmax_forward(c.y, c.x, SM_R, SM_C));
    for (int r = 0; r < 3; r++) {
        /* Naive: exp / sum without the max shift (safe for |x| <= 2). */
        double z = 0;
        for (int j = 0; j < SM_C; j++)
            z += exp(c.x[r * SM_C + j]);
        for (int j = 0; j < SM_C; j++)
            ck_assert_double_le(fabs(c.y[r * SM_C + j] - exp(c.x[r * SM_C + j]) / z), FWD_TOL);
    }
    ck_assert_double_eq(c.y[2 * SM_C + 1], 0.0);
    ck_assert_double_eq(c.y[2 * SM_C + 3], 0.0);
    for (int j = 0; j < SM_C; j++)
        ck_assert_double_eq(c.y[3 * SM_C + j], 0.0);

    /* Large logits: shift invariance, no overflow; in place. */
    vit_real big[SM_C], ref[SM_C];
    for (int j = 0; j < SM_C; j++)
        big[j] = 1000.0 + c.x[j];
    ASSERT_OK(vit_softmax_forward(big, big, 1, SM_C));
    memcpy(ref, c.y, sizeof ref);
    ck_assert_double_le(gc_max_abs_diff(big, ref, SM_C), 1e-12);
}
END_TEST

START_TEST(test_softmax_grad)
{
    sm_ctx c;
    sm_init(&c, 52);
    ASSERT_OK(vit_softmax_forward(c.y, c.x, SM_R, SM_C));
    vit_real *dx = gc_zeros(SM_R * SM_C);
    ASSERT_OK(vit_softmax_backward(dx, c.w, c.y, SM_R, SM_C));
    ASSERT_GRAD("softmax dx", c.x, dx, SM_R * SM_C, sm_loss, &c);
    ck_assert(isfinite(sm_loss(&c))); /* y of the unperturbed x again */
    vit_real *acc = accum_start(dx, SM_R * SM_C);
    ASSERT_OK(vit_softmax_backward(acc, c.w, c.y, SM_R, SM_C));
    accum_check("softmax dx", acc, dx, SM_R * SM_C);
    /* Masked entries and the fully masked row pass exactly no gradient. */
    ck_assert_double_eq(dx[2 * SM_C + 1], 0.0);
    for (int j = 0; j < SM_C; j++)
        ck_assert_double_eq(dx[3 * SM_C + j], 0.0);
    free(dx);
}
END_TEST

/* ==== Cross-entropy ==================================================== */

enum { CE_N = 4, CE_C = 5 };

typedef struct {
    vit_real logits[CE_N * CE_C], probs[CE_N * CE_C];
    int labels[CE_N];
    vit_real smoothing, dloss;
} ce_ctx;

static double ce_loss(void *p)
{
    ce_ctx *c = p;
    vit_real loss;
    if (vit_cross_entropy_forward(&loss, c->probs, c->logits, c->labels, CE_N, CE_C,
                                  c->smoothing) != VIT_OK)
        return NAN;
    return c->dloss * loss;
}

static void ce_init(ce_ctx *c, uint64_t seed, vit_real smoothing)
{
    gc_fill(c->logits, CE_N * CE_C, &seed, 3.0);
    for (int i = 0; i < CE_N; i++)
        c->labels[i] = (i * 3 + 1) % CE_C;
    c->smoothing = smoothing;
    c->dloss = 0.7;
}

/* The loss from its definition: explicit target vector, log of the
 * normalized probabilities. */
static double ce_naive(const ce_ctx *c)
{
    double total = 0;
    for (int i = 0; i < CE_N; i++) {
        const vit_real *x = c->logits + i * CE_C;
        double z = 0;
        for (int j = 0; j < CE_C; j++)
            z += exp(x[j]);
        for (int j = 0; j < CE_C; j++) {
            double t = (1 - c->smoothing) * (j == c->labels[i]) + c->smoothing / CE_C;
            total -= t * log(exp(x[j]) / z);
        }
    }
    return total / CE_N;
}

START_TEST(test_cross_entropy_forward)
{
    vit_real sm[2] = {0.0, 0.1};
    for (int k = 0; k < 2; k++) {
        ce_ctx c;
        ce_init(&c, 61, sm[k]);
        vit_real loss;
        ASSERT_OK(vit_cross_entropy_forward(&loss, c.probs, c.logits, c.labels, CE_N, CE_C, sm[k]));
        ck_assert_double_le(fabs(loss - ce_naive(&c)), FWD_TOL);
        for (int i = 0; i < CE_N; i++) {
            double s = 0;
            for (int j = 0; j < CE_C; j++)
                s += c.probs[i * CE_C + j];
            ck_assert_double_le(fabs(s - 1), FWD_TOL);
        }
        /* Uniform logits: every log p is -log C, whatever the target. */
        for (int i = 0; i < CE_N * CE_C; i++)
            c.logits[i] = 0.25;
        ASSERT_OK(vit_cross_entropy_forward(&loss, c.probs, c.logits, c.labels, CE_N, CE_C, sm[k]));
        ck_assert_double_le(fabs(loss - log((double)CE_C)), FWD_TOL);
    }
    /* Huge logits stay finite: the label has the largest logit by 1, so the
     * loss is log(1 + (C-1) e^-1) without smoothing. */
    vit_real big[CE_C], probs[CE_C], loss;
    int label = 2;
    for (int j = 0; j < CE_C; j++)
        big[j] = j == label ? 1001.0 : 1000.0;
    ASSERT_OK(vit_cross_entropy_forward(&loss, probs, big, &label, 1, CE_C, 0.0));
    ck_assert_double_le(fabs(loss - log(1 + (CE_C - 1) * exp(-1.0))), FWD_TOL);
}
END_TEST

START_TEST(test_cross_entropy_grad)
{
    vit_real sm[2] = {0.0, 0.1};
    const char *names[2] = {"cross_entropy dlogits", "cross_entropy dlogits ls=0.1"};
    for (int k = 0; k < 2; k++) {
        ce_ctx c;
        ce_init(&c, 62 + k, sm[k]);
        ck_assert(isfinite(ce_loss(&c)));
        vit_real *dl = gc_zeros(CE_N * CE_C);
        ASSERT_OK(vit_cross_entropy_backward(dl, c.probs, c.labels, CE_N, CE_C, sm[k], c.dloss));
        ASSERT_GRAD(names[k], c.logits, dl, CE_N * CE_C, ce_loss, &c);
        ck_assert(isfinite(ce_loss(&c))); /* probs of the unperturbed logits again */
        vit_real *acc = accum_start(dl, CE_N * CE_C);
        ASSERT_OK(vit_cross_entropy_backward(acc, c.probs, c.labels, CE_N, CE_C, sm[k], c.dloss));
        accum_check(names[k], acc, dl, CE_N * CE_C);
        free(dl);
    }
}
END_TEST

/* ==== Soft-target cross-entropy ======================================== */

typedef struct {
    vit_real logits[CE_N * CE_C], probs[CE_N * CE_C], targets[CE_N * CE_C];
    vit_real dloss;
} soft_ctx;

static double soft_loss(void *p)
{
    soft_ctx *c = p;
    vit_real loss;
    if (vit_soft_cross_entropy_forward(&loss, c->probs, c->logits, c->targets, CE_N, CE_C)
        != VIT_OK)
        return NAN;
    return c->dloss * loss;
}

/* Rows of mixed smoothed one-hots, lam t(a) + (1 - lam) t(b), as mixup
 * makes them; the last row does not sum to 1 (the kernel allows it). */
static void soft_init(soft_ctx *c, uint64_t seed, double lam, double s)
{
    gc_fill(c->logits, CE_N * CE_C, &seed, 3.0);
    for (int i = 0; i < CE_N; i++) {
        int a = (i * 3 + 1) % CE_C, b = (i + 4) % CE_C;
        for (int j = 0; j < CE_C; j++)
            c->targets[i * CE_C + j] = (vit_real)(lam * ((1 - s) * (j == a) + s / CE_C)
                                                  + (1 - lam) * ((1 - s) * (j == b) + s / CE_C));
    }
    c->targets[(CE_N - 1) * CE_C] += 0.3;
    c->dloss = 0.7;
}

START_TEST(test_soft_cross_entropy_grad)
{
    const char *names[2] = {"soft_cross_entropy dlogits", "soft_cross_entropy dlogits ls=0.1"};
    for (int k = 0; k < 2; k++) {
        soft_ctx c;
        soft_init(&c, 71 + k, 0.3, k ? 0.1 : 0.0);
        /* the loss from its definition */
        vit_real loss;
        ASSERT_OK(vit_soft_cross_entropy_forward(&loss, c.probs, c.logits, c.targets, CE_N, CE_C));
        double want = 0;
        for (int i = 0; i < CE_N; i++) {
            double z = 0;
            for (int j = 0; j < CE_C; j++)
                z += exp(c.logits[i * CE_C + j]);
            for (int j = 0; j < CE_C; j++)
                want -= c.targets[i * CE_C + j] * log(exp(c.logits[i * CE_C + j]) / z);
        }
        ck_assert_double_le(fabs(loss - want / CE_N), FWD_TOL);
        vit_real *dl = gc_zeros(CE_N * CE_C);
        ASSERT_OK(vit_soft_cross_entropy_backward(dl, c.probs, c.targets, CE_N, CE_C, c.dloss));
        ASSERT_GRAD(names[k], c.logits, dl, CE_N * CE_C, soft_loss, &c);
        ck_assert(isfinite(soft_loss(&c)));
        vit_real *acc = accum_start(dl, CE_N * CE_C);
        ASSERT_OK(vit_soft_cross_entropy_backward(acc, c.probs, c.targets, CE_N, CE_C, c.dloss));
        accum_check(names[k], acc, dl, CE_N * CE_C);
        free(dl);
    }
}
END_TEST

/* One-hot targets smoothed as timm does give the hard-label loss and
 * gradient with that smoothing; bad targets are refused. */
START_TEST(test_soft_cross_entropy_onehot)
{
    vit_real sm[2] = {0.0, 0.1};
    for (int k = 0; k < 2; k++) {
        ce_ctx c;
        ce_init(&c, 81 + k, sm[k]);
        vit_real t[CE_N * CE_C], p2[CE_N * CE_C], hard, soft;
        for (int i = 0; i < CE_N; i++)
            for (int j = 0; j < CE_C; j++)
                t[i * CE_C + j] = (1 - sm[k]) * (j == c.labels[i]) + sm[k] / CE_C;
        ASSERT_OK(vit_cross_entropy_forward(&hard, c.probs, c.logits, c.labels, CE_N, CE_C, sm[k]));
        ASSERT_OK(vit_soft_cross_entropy_forward(&soft, p2, c.logits, t, CE_N, CE_C));
        ck_assert_double_le(fabs(hard - soft), 1e-14);
        ck_assert(memcmp(c.probs, p2, sizeof p2) == 0);
        vit_real dh[CE_N * CE_C] = {0}, ds[CE_N * CE_C] = {0};
        ASSERT_OK(vit_cross_entropy_backward(dh, c.probs, c.labels, CE_N, CE_C, sm[k], 0.7));
        ASSERT_OK(vit_soft_cross_entropy_backward(ds, p2, t, CE_N, CE_C, 0.7));
        ck_assert_double_le(gc_max_abs_diff(dh, ds, CE_N * CE_C), 1e-15);
    }
    vit_real x[2] = {0, 1}, p[2], t[2] = {0.5, -0.1}, loss;
    ck_assert_int_eq(vit_soft_cross_entropy_forward(&loss, p, x, t, 1, 2), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "targets[0, 1]"));
    ck_assert_int_eq(vit_soft_cross_entropy_forward(&loss, p, x, NULL, 1, 2), VIT_EINVAL);
    t[1] = 0.5;
    x[1] = INFINITY;
    ck_assert_int_eq(vit_soft_cross_entropy_forward(&loss, p, x, t, 1, 2), VIT_ENUM);
}
END_TEST

/* ==== Patch embedding ================================================== */

enum { PE_B = 2, PE_H = 4, PE_W = 6, PE_P = 2, PE_D = 3, PE_CMAX = 3 };
enum { PE_N = (PE_H / PE_P) * (PE_W / PE_P) };

/* One patch embedding problem, plain (pe_init) or overlapping (ov_init,
 * below): the shape, its patch count n, the inputs and the loss weights w
 * of L = sum w .* y.  Buffers fit the largest problem of either kind. */
enum { PC_IMG = 420, PC_W = 300, PC_COLS = 3780, PC_Y = 210 };

typedef struct {
    vit_patch_shape s;
    int n;
    vit_real img[PC_IMG], W[PC_W], b[PE_D];
    vit_real cols[PC_COLS], y[PC_Y], w[PC_Y];
} pe_ctx;

static size_t pe_img_len(const pe_ctx *c)
{
    return (size_t)c->s.batch * c->s.height * c->s.width * c->s.channels;
}

static size_t pe_w_len(const pe_ctx *c)
{
    return (size_t)c->s.patch * c->s.patch * c->s.channels * c->s.dim;
}

static size_t pe_y_len(const pe_ctx *c) { return (size_t)c->s.batch * c->n * c->s.dim; }

static double pe_loss(void *p)
{
    pe_ctx *c = p;
    if (vit_patch_embed_forward(&c->s, c->y, c->cols, c->img, c->W, c->b) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, pe_y_len(c));
}

/* c for shape s, filled from seed: image, W, b, then w. */
static void pe_fill(pe_ctx *c, vit_patch_shape s, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->s = s;
    c->n = vit_patch_count(&c->s);
    ck_assert_msg(c->n > 0, "%s", vit_last_error());
    ck_assert(pe_img_len(c) <= PC_IMG && pe_w_len(c) <= PC_W && pe_y_len(c) <= PC_Y);
    ck_assert((size_t)s.batch * c->n * s.patch * s.patch * s.channels <= PC_COLS);
    gc_fill(c->img, pe_img_len(c), &seed, 1.0);
    gc_fill(c->W, pe_w_len(c), &seed, 1.0);
    gc_fill(c->b, (size_t)s.dim, &seed, 1.0);
    gc_fill(c->w, pe_y_len(c), &seed, 1.0);
}

static void pe_init(pe_ctx *c, int C, uint64_t seed)
{
    pe_fill(c, (vit_patch_shape){.batch = PE_B, .height = PE_H, .width = PE_W, .channels = C,
                                 .patch = PE_P, .dim = PE_D},
            seed);
}

/* dimg, dW, db of c's loss against central differences, named "TAG dimg"
 * and so on; then the backward again onto g + 1 must add the same
 * gradients (named "ACCUM dimg" ...). */
static void pe_grad_check(pe_ctx *c, const char *tag, const char *accum)
{
    ck_assert(isfinite(pe_loss(c)));
    const size_t ni = pe_img_len(c), nw = pe_w_len(c), nb = (size_t)c->s.dim;
    vit_real *dimg = gc_zeros(ni), *dW = gc_zeros(nw), *db = gc_zeros(nb);
    ASSERT_OK(vit_patch_embed_backward(&c->s, dimg, dW, db, c->w, c->cols, c->W));
    const char *what[3] = {"dimg", "dW", "db"};
    vit_real *x[3] = {c->img, c->W, c->b}, *g[3] = {dimg, dW, db}, *acc[3];
    const size_t len[3] = {ni, nw, nb};
    char name[64];
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%s %s", tag, what[k]);
        ASSERT_GRAD(name, x[k], g[k], len[k], pe_loss, c);
        acc[k] = accum_start(g[k], len[k]);
    }
    ASSERT_OK(vit_patch_embed_backward(&c->s, acc[0], acc[1], acc[2], c->w, c->cols, c->W));
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%s %s", accum, what[k]);
        accum_check(name, acc[k], g[k], len[k]);
        free(g[k]);
    }
}

/* Channel counts for the loop tests: C = 1 and C = 3. */
static const int pe_channels[2] = {1, 3};

START_TEST(test_patch_embed_forward)
{
    const int C = pe_channels[_i];
    pe_ctx c;
    pe_init(&c, C, 71 + _i);
    ck_assert_int_eq(vit_patch_count(&c.s), PE_N);
    ck_assert_int_eq(c.n, PE_N);

    /* A PyTorch-layout conv weight wc[D, C, P, P], mapped to W as the
     * header documents, and a direct stride-P convolution loop. */
    vit_real wc[PE_D][PE_CMAX][PE_P][PE_P];
    uint64_t seed = 700 + _i;
    for (int d = 0; d < PE_D; d++)
        for (int ch = 0; ch < C; ch++)
            for (int py = 0; py < PE_P; py++)
                for (int px = 0; px < PE_P; px++) {
                    wc[d][ch][py][px] = 2 * gc_uniform(&seed) - 1;
                    c.W[((py * PE_P + px) * C + ch) * PE_D + d] = wc[d][ch][py][px];
                }
    ASSERT_OK(vit_patch_embed_forward(&c.s, c.y, c.cols, c.img, c.W, c.b));
    const int gw = PE_W / PE_P;
    for (int b = 0; b < PE_B; b++)
        for (int oy = 0; oy < PE_H / PE_P; oy++)
            for (int ox = 0; ox < gw; ox++)
                for (int d = 0; d < PE_D; d++) {
                    double s = c.b[d];
                    for (int ch = 0; ch < C; ch++)
                        for (int ky = 0; ky < PE_P; ky++)
                            for (int kx = 0; kx < PE_P; kx++) {
                                int iy = oy * PE_P + ky, ix = ox * PE_P + kx;
                                s += wc[d][ch][ky][kx] *
                                     c.img[((b * PE_H + iy) * PE_W + ix) * C + ch];
                            }
                    double got = c.y[((b * PE_N) + oy * gw + ox) * PE_D + d];
                    ck_assert_double_le(fabs(got - s), FWD_TOL);
                }
}
END_TEST

START_TEST(test_patch_embed_grad)
{
    const int C = pe_channels[_i];
    pe_ctx c;
    pe_init(&c, C, 81 + _i);
    char tag[32];
    snprintf(tag, sizeof tag, "patch_embed C=%d", C);
    pe_grad_check(&c, tag, "patch_embed");
}
END_TEST

/* ---- Overlapping, padded patches ---------------------------------------- */

/* Geometries on a 5 x 7 image: kernel, stride, padding, channels.  3/1/1
 * overlaps everywhere (a 5 x 7 grid), 3/2/1 overlaps by one pixel with
 * padding on every border (3 x 4), 5/2/2 overlaps by three with a wider
 * padding (3 x 4), 3/2/0 overlaps without padding (2 x 3); the first
 * and third again with 6 and 4 channels, whose clipped patch rows (a
 * pixel is C values) are 18 and 20 values wide.  (The ViT recipe's 4/2/1
 * on 8 x 8 is in test_model.) */
enum { OV_B = 2, OV_H = 5, OV_W = 7, OV_D = 3, OV_PMAX = 5, OV_NMAX = 35, OV_GEOS = 6 };
static const int ov_geo[OV_GEOS][4] = {{3, 1, 1, 2}, {3, 2, 1, 2}, {5, 2, 2, 2},
                                       {3, 2, 0, 2}, {3, 1, 1, 6}, {5, 2, 2, 4}};

static void ov_init(pe_ctx *c, int g, uint64_t seed)
{
    pe_fill(c, (vit_patch_shape){.batch = OV_B, .height = OV_H, .width = OV_W,
                                 .channels = ov_geo[g][3], .patch = ov_geo[g][0], .dim = OV_D,
                                 .stride = ov_geo[g][1], .pad = ov_geo[g][2]},
            seed);
    ck_assert_int_le(c->n, OV_NMAX);
}

/* Against a direct strided, zero-padded convolution loop (PyTorch's
 * Conv2d(C, D, P, stride, padding) with the documented weight mapping). */
START_TEST(test_patch_embed_overlap_forward)
{
    pe_ctx c;
    ov_init(&c, _i, 171 + (uint64_t)_i);
    const int P = ov_geo[_i][0], S = ov_geo[_i][1], Z = ov_geo[_i][2], C = ov_geo[_i][3];
    int gh = 0, gw = 0;
    ASSERT_OK(vit_patch_grid(&c.s, &gh, &gw));
    ck_assert_int_eq(gh, (OV_H + 2 * Z - P) / S + 1);
    ck_assert_int_eq(gw, (OV_W + 2 * Z - P) / S + 1);
    ck_assert_int_eq(gh * gw, c.n);
    ASSERT_OK(vit_patch_embed_forward(&c.s, c.y, c.cols, c.img, c.W, c.b));
    int padded = 0;
    for (int b = 0; b < OV_B; b++)
        for (int oy = 0; oy < gh; oy++)
            for (int ox = 0; ox < gw; ox++)
                for (int d = 0; d < OV_D; d++) {
                    double s = c.b[d];
                    for (int ky = 0; ky < P; ky++)
                        for (int kx = 0; kx < P; kx++)
                            for (int ch = 0; ch < C; ch++) {
                                int iy = oy * S - Z + ky, ix = ox * S - Z + kx;
                                if (iy < 0 || iy >= OV_H || ix < 0 || ix >= OV_W) {
                                    padded++;
                                    continue;
                                }
                                s += c.W[((ky * P + kx) * C + ch) * OV_D + d] *
                                     c.img[((b * OV_H + iy) * OV_W + ix) * C + ch];
                            }
                    double got = c.y[((size_t)b * c.n + oy * gw + ox) * OV_D + d];
                    ck_assert_double_le(fabs(got - s), FWD_TOL);
                }
    ck_assert_int_eq(padded > 0, Z > 0); /* the padding is read exactly when there is one */
}
END_TEST

START_TEST(test_patch_embed_overlap_grad)
{
    pe_ctx c;
    ov_init(&c, _i, 181 + (uint64_t)_i);
    char tag[48];
    snprintf(tag, sizeof tag, "patch_embed %d/%d/%d C%d", ov_geo[_i][0], ov_geo[_i][1],
             ov_geo[_i][2], ov_geo[_i][3]);
    pe_grad_check(&c, tag, "patch_embed overlap");
}
END_TEST

/* stride = patch and pad 0 spelled out is the plain path, bitwise. */
START_TEST(test_patch_embed_explicit_default)
{
    pe_ctx c, e;
    pe_init(&c, 3, 91);
    e = c;
    e.s.stride = PE_P;
    ASSERT_OK(vit_patch_embed_forward(&c.s, c.y, c.cols, c.img, c.W, c.b));
    ASSERT_OK(vit_patch_embed_forward(&e.s, e.y, e.cols, e.img, e.W, e.b));
    ck_assert(memcmp(c.y, e.y, pe_y_len(&c) * sizeof *c.y) == 0);
}
END_TEST

/* ==== Class token and position embedding =============================== */

enum { T_B = 2, T_N = 3, T_D = 4 };

typedef struct {
    vit_real x[T_B * T_N * T_D], cls[T_D], pos[T_N * T_D];
    vit_real y[T_B * (T_N + 1) * T_D], w[T_B * (T_N + 1) * T_D];
} tok_ctx;

static double cls_loss(void *p)
{
    tok_ctx *c = p;
    if (vit_cls_prepend_forward(c->y, c->x, c->cls, T_B, T_N, T_D) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, T_B * (T_N + 1) * T_D);
}

static double pos_loss(void *p)
{
    tok_ctx *c = p;
    if (vit_pos_add_forward(c->y, c->x, c->pos, T_B, T_N, T_D) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, T_B * T_N * T_D);
}

static void tok_init(tok_ctx *c, uint64_t seed)
{
    gc_fill(c->x, T_B * T_N * T_D, &seed, 1.0);
    gc_fill(c->cls, T_D, &seed, 1.0);
    gc_fill(c->pos, T_N * T_D, &seed, 1.0);
    gc_fill(c->w, T_B * (T_N + 1) * T_D, &seed, 1.0);
}

START_TEST(test_cls_prepend)
{
    tok_ctx c;
    tok_init(&c, 91);
    ASSERT_OK(vit_cls_prepend_forward(c.y, c.x, c.cls, T_B, T_N, T_D));
    for (int b = 0; b < T_B; b++)
        for (int t = 0; t <= T_N; t++)
            for (int j = 0; j < T_D; j++) {
                double want = t == 0 ? c.cls[j] : c.x[(b * T_N + t - 1) * T_D + j];
                ck_assert_double_eq(c.y[(b * (T_N + 1) + t) * T_D + j], want);
            }
    vit_real *dx = gc_zeros(T_B * T_N * T_D), *dcls = gc_zeros(T_D);
    ASSERT_OK(vit_cls_prepend_backward(dx, dcls, c.w, T_B, T_N, T_D));
    ASSERT_GRAD("cls_prepend dx", c.x, dx, T_B * T_N * T_D, cls_loss, &c);
    ASSERT_GRAD("cls_prepend dcls", c.cls, dcls, T_D, cls_loss, &c);
    vit_real *ax = accum_start(dx, T_B * T_N * T_D), *ac = accum_start(dcls, T_D);
    ASSERT_OK(vit_cls_prepend_backward(ax, ac, c.w, T_B, T_N, T_D));
    accum_check("cls_prepend dx", ax, dx, T_B * T_N * T_D);
    accum_check("cls_prepend dcls", ac, dcls, T_D);
    free(dx); free(dcls);
}
END_TEST

START_TEST(test_pos_add)
{
    tok_ctx c;
    tok_init(&c, 92);
    ASSERT_OK(vit_pos_add_forward(c.y, c.x, c.pos, T_B, T_N, T_D));
    for (int i = 0; i < T_B * T_N * T_D; i++)
        ck_assert_double_eq(c.y[i], c.x[i] + c.pos[i % (T_N * T_D)]);
    vit_real *dx = gc_zeros(T_B * T_N * T_D), *dpos = gc_zeros(T_N * T_D);
    ASSERT_OK(vit_pos_add_backward(dx, dpos, c.w, T_B, T_N, T_D));
    ASSERT_GRAD("pos_add dx", c.x, dx, T_B * T_N * T_D, pos_loss, &c);
    ASSERT_GRAD("pos_add dpos", c.pos, dpos, T_N * T_D, pos_loss, &c);
    vit_real *ax = accum_start(dx, T_B * T_N * T_D), *ap = accum_start(dpos, T_N * T_D);
    ASSERT_OK(vit_pos_add_backward(ax, ap, c.w, T_B, T_N, T_D));
    accum_check("pos_add dx", ax, dx, T_B * T_N * T_D);
    accum_check("pos_add dpos", ap, dpos, T_N * T_D);
    free(dx); free(dpos);
}
END_TEST

/* ==== Embedding lookup ================================================= */

enum { EM_N = 7, EM_V = 5, EM_D = 3 };

/* Id 3 three times, 0 twice, 2 never. */
static const int em_ids[EM_N] = {3, 0, 3, 4, 3, 0, 1};

typedef struct {
    vit_real table[EM_V * EM_D], y[EM_N * EM_D], w[EM_N * EM_D];
} em_ctx;

static double em_loss(void *p)
{
    em_ctx *c = p;
    if (vit_embedding_forward(c->y, c->table, em_ids, EM_N, EM_V, EM_D) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, EM_N * EM_D);
}

static void em_init(em_ctx *c, uint64_t seed)
{
    gc_fill(c->table, EM_V * EM_D, &seed, 1.0);
    gc_fill(c->w, EM_N * EM_D, &seed, 1.0);
}

START_TEST(test_embedding_forward)
{
    em_ctx c;
    em_init(&c, 93);
    for (int i = 0; i < EM_N * EM_D; i++)
        c.y[i] = 1e6;
    ASSERT_OK(vit_embedding_forward(c.y, c.table, em_ids, EM_N, EM_V, EM_D));
    for (int i = 0; i < EM_N; i++)
        for (int j = 0; j < EM_D; j++)
            ck_assert_double_eq(c.y[i * EM_D + j], c.table[em_ids[i] * EM_D + j]);
    /* The last row of the table, alone. */
    const int last = EM_V - 1;
    ASSERT_OK(vit_embedding_forward(c.y, c.table, &last, 1, EM_V, EM_D));
    ck_assert_double_le(gc_max_abs_diff(c.y, c.table + last * EM_D, EM_D), 0.0);
}
END_TEST

START_TEST(test_embedding_grad)
{
    em_ctx c;
    em_init(&c, 94);
    vit_real *dt = gc_zeros(EM_V * EM_D);
    ASSERT_OK(vit_embedding_backward(dt, c.w, em_ids, EM_N, EM_V, EM_D));
    ASSERT_GRAD("embedding dtable", c.table, dt, EM_V * EM_D, em_loss, &c);
    /* Repeated ids sum their rows of dy; an id never looked up gets none. */
    for (int j = 0; j < EM_D; j++) {
        ck_assert_double_eq_tol(dt[3 * EM_D + j], c.w[j] + c.w[2 * EM_D + j] + c.w[4 * EM_D + j],
                                1e-15);
        ck_assert_double_eq_tol(dt[0 * EM_D + j], c.w[1 * EM_D + j] + c.w[5 * EM_D + j], 1e-15);
        ck_assert_double_eq(dt[2 * EM_D + j], 0.0);
    }
    vit_real *acc = accum_start(dt, EM_V * EM_D);
    ASSERT_OK(vit_embedding_backward(acc, c.w, em_ids, EM_N, EM_V, EM_D));
    accum_check("embedding dtable", acc, dt, EM_V * EM_D);
    ASSERT_OK(vit_embedding_backward(NULL, c.w, em_ids, EM_N, EM_V, EM_D));
    free(dt);
}
END_TEST

START_TEST(test_embedding_bad_input)
{
    vit_real table[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0}, dt[6] = {0};
    int ids[3] = {0, 2, 1};
    expect_err(vit_embedding_forward(NULL, table, ids, 3, 3, 2), VIT_EINVAL, "vit_embedding_forward", "y is NULL");
    expect_err(vit_embedding_forward(y, NULL, ids, 3, 3, 2), VIT_EINVAL, "vit_embedding_forward", "table is NULL");
    expect_err(vit_embedding_forward(y, table, NULL, 3, 3, 2), VIT_EINVAL, "vit_embedding_forward", "ids is NULL");
    expect_err(vit_embedding_forward(y, table, ids, 0, 3, 2), VIT_EINVAL, "vit_embedding_forward", "n must be positive");
    expect_err(vit_embedding_forward(y, table, ids, 3, 0, 2), VIT_EINVAL, "vit_embedding_forward", "vocab must be positive");
    expect_err(vit_embedding_forward(y, table, ids, 3, 3, -1), VIT_EINVAL, "vit_embedding_forward", "dim must be positive");
    expect_err(vit_embedding_backward(dt, NULL, ids, 3, 3, 2), VIT_EINVAL, "vit_embedding_backward", "dy is NULL");
    expect_err(vit_embedding_backward(dt, y, ids, 3, 3, 0), VIT_EINVAL, "vit_embedding_backward", "dim must be positive");
    /* An id out of range, named by position and value; the backward checks
     * every id before touching dtable, so the valid ids[0] adds nothing. */
    ids[1] = 3;
    expect_err(vit_embedding_forward(y, table, ids, 3, 3, 2), VIT_EINVAL, "vit_embedding_forward", "ids[1] = 3");
    expect_err(vit_embedding_backward(dt, table, ids, 3, 3, 2), VIT_EINVAL, "vit_embedding_backward", "ids[1] = 3");
    ids[1] = 1;
    ids[2] = -1;
    expect_err(vit_embedding_forward(y, table, ids, 3, 3, 2), VIT_EINVAL, "vit_embedding_forward", "ids[2] = -1");
    expect_err(vit_embedding_backward(NULL, table, ids, 3, 3, 2), VIT_EINVAL, "vit_embedding_backward", "ids[2] = -1");
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(dt[i], 0.0);
}
END_TEST

/* ==== Masked mean over tokens ========================================== */

enum { MM_B = 3, MM_T = 4, MM_D = 3 };

/* Item 0: all real; item 1: tokens 1 and 3 padding (and 7, any nonzero
 * value, marks a real token); item 2: all padding. */
static const unsigned char mm_valid[MM_B * MM_T] = {1, 1, 1, 1, 1, 0, 7, 0, 0, 0, 0, 0};
static const vit_real mm_count[MM_B] = {4, 2, 0};

typedef struct {
    const unsigned char *valid;
    vit_real x[MM_B * MM_T * MM_D], y[MM_B * MM_D], count[MM_B], w[MM_B * MM_D];
} mm_ctx;

static double mm_loss(void *p)
{
    mm_ctx *c = p;
    if (vit_masked_mean_forward(c->y, c->count, c->x, c->valid, MM_B, MM_T, MM_D) != VIT_OK)
        return NAN;
    return gc_dot(c->w, c->y, MM_B * MM_D);
}

static void mm_init(mm_ctx *c, uint64_t seed, const unsigned char *valid)
{
    c->valid = valid;
    gc_fill(c->x, MM_B * MM_T * MM_D, &seed, 1.0);
    gc_fill(c->w, MM_B * MM_D, &seed, 1.0);
}

/* The masks of the loop tests: with padding, and NULL (every token real). */
static const unsigned char *const mm_masks[2] = {mm_valid, NULL};

START_TEST(test_masked_mean_forward)
{
    mm_ctx c;
    mm_init(&c, 95 + _i, mm_masks[_i]);
    for (int i = 0; i < MM_B * MM_D; i++)
        c.y[i] = NAN; /* overwritten, including the all-padding item */
    ASSERT_OK(vit_masked_mean_forward(c.y, c.count, c.x, c.valid, MM_B, MM_T, MM_D));
    for (int b = 0; b < MM_B; b++) {
        const vit_real *row = c.y + b * MM_D;
        int n = 0;
        for (int t = 0; t < MM_T; t++)
            n += !c.valid || c.valid[b * MM_T + t];
        ck_assert_double_eq(c.count[b], (c.valid ? mm_count[b] : MM_T));
        for (int j = 0; j < MM_D; j++) {
            double s = 0;
            for (int t = 0; t < MM_T; t++)
                if (!c.valid || c.valid[b * MM_T + t])
                    s += c.x[(b * MM_T + t) * MM_D + j];
            if (n == 0)
                ck_assert_double_eq(row[j], 0.0); /* not NaN */
            else
                ck_assert_double_le(fabs(row[j] - s / n), FWD_TOL);
        }
    }
    /* count is optional. */
    ASSERT_OK(vit_masked_mean_forward(c.y, NULL, c.x, c.valid, MM_B, MM_T, MM_D));
    ck_assert(isfinite(c.y[MM_D]));
}
END_TEST

START_TEST(test_masked_mean_grad)
{
    mm_ctx c;
    mm_init(&c, 97 + _i, mm_masks[_i]);
    const size_t nx = MM_B * MM_T * MM_D;
    vit_real *dx = gc_zeros(nx);
    ASSERT_OK(vit_masked_mean_backward(dx, c.w, c.valid, MM_B, MM_T, MM_D));
    ASSERT_GRAD(c.valid ? "masked_mean dx (padding)" : "masked_mean dx (no mask)", c.x, dx, nx,
                mm_loss, &c);
    /* Against the formula: dy / n on real tokens, exactly 0 on padding and
     * on the all-padding item. */
    for (int b = 0; b < MM_B; b++)
        for (int t = 0; t < MM_T; t++)
            for (int j = 0; j < MM_D; j++) {
                double n = c.valid ? mm_count[b] : MM_T;
                int real = !c.valid || c.valid[b * MM_T + t];
                double want = real ? c.w[b * MM_D + j] / n : 0.0;
                ck_assert_double_eq_tol(dx[(b * MM_T + t) * MM_D + j], want, 1e-15);
            }
    vit_real *acc = accum_start(dx, nx);
    ASSERT_OK(vit_masked_mean_backward(acc, c.w, c.valid, MM_B, MM_T, MM_D));
    accum_check("masked_mean dx", acc, dx, nx);
    ASSERT_OK(vit_masked_mean_backward(NULL, c.w, c.valid, MM_B, MM_T, MM_D));
    free(dx);
}
END_TEST

START_TEST(test_masked_mean_bad_input)
{
    vit_real x[8] = {0}, y[4] = {0};
    const unsigned char kv[4] = {1, 0, 1, 1};
    expect_err(vit_masked_mean_forward(NULL, NULL, x, kv, 2, 2, 2), VIT_EINVAL, "vit_masked_mean_forward", "y is NULL");
    expect_err(vit_masked_mean_forward(y, NULL, NULL, kv, 2, 2, 2), VIT_EINVAL, "vit_masked_mean_forward", "x is NULL");
    expect_err(vit_masked_mean_forward(y, NULL, x, kv, 0, 2, 2), VIT_EINVAL, "vit_masked_mean_forward", "B must be positive");
    expect_err(vit_masked_mean_forward(y, NULL, x, kv, 2, -3, 2), VIT_EINVAL, "vit_masked_mean_forward", "T must be positive");
    expect_err(vit_masked_mean_forward(y, NULL, x, kv, 2, 2, 0), VIT_EINVAL, "vit_masked_mean_forward", "D must be positive");
    expect_err(vit_masked_mean_backward(x, NULL, kv, 2, 2, 2), VIT_EINVAL, "vit_masked_mean_backward", "dy is NULL");
    expect_err(vit_masked_mean_backward(x, y, kv, 2, 0, 2), VIT_EINVAL, "vit_masked_mean_backward", "T must be positive");
}
END_TEST

/* ==== Bad input ======================================================== */

/* ==== Local convolution: tokens over their grid ========================= */

/* Two images of a 2 x 3 grid (T = 7 with the class token) of 3 channels:
 * every token has a different set of neighbours inside the grid. */
enum { LC_B = 2, LC_GH = 2, LC_GW = 3, LC_C = 3, LC_T = 1 + LC_GH * LC_GW,
       LC_N = LC_B * LC_T * LC_C };

typedef struct {
    vit_real x[LC_N], w[9 * LC_C], b[LC_C], y[LC_N], g[LC_N];
} lc_ctx;

static double lc_loss(void *p)
{
    lc_ctx *c = p;
    if (vit_local_conv_forward(c->y, c->x, c->w, c->b, LC_B, LC_GH, LC_GW, LC_C) != VIT_OK)
        return NAN;
    return gc_dot(c->g, c->y, LC_N);
}

static void lc_init(lc_ctx *c, uint64_t seed)
{
    gc_fill(c->x, LC_N, &seed, 1.0);
    gc_fill(c->w, 9 * LC_C, &seed, 1.0);
    gc_fill(c->b, LC_C, &seed, 1.0);
    gc_fill(c->g, LC_N, &seed, 1.0);
}

/* Token (b, 1 + i*GW + j), channel ch, written out from the definition in
 * vit/local_conv.h: the token, the bias and the in-grid neighbours. */
static double lc_reference(const lc_ctx *c, int b, int i, int j, int ch)
{
    const vit_real *xb = c->x + b * LC_T * LC_C;
    double v = xb[(1 + i * LC_GW + j) * LC_C + ch] + c->b[ch];
    for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++) {
            int r = i + ky - 1, q = j + kx - 1;
            if (r >= 0 && r < LC_GH && q >= 0 && q < LC_GW)
                v += c->w[(ky * 3 + kx) * LC_C + ch] * xb[(1 + r * LC_GW + q) * LC_C + ch];
        }
    return v;
}

START_TEST(test_local_conv_forward)
{
    lc_ctx c;
    lc_init(&c, 301);
    ASSERT_OK(vit_local_conv_forward(c.y, c.x, c.w, c.b, LC_B, LC_GH, LC_GW, LC_C));
    for (int b = 0; b < LC_B; b++)
        for (int ch = 0; ch < LC_C; ch++) {
            /* the class token passes unchanged */
            ck_assert_double_eq(c.y[b * LC_T * LC_C + ch], c.x[b * LC_T * LC_C + ch]);
            for (int i = 0; i < LC_GH; i++)
                for (int j = 0; j < LC_GW; j++) {
                    double want = lc_reference(&c, b, i, j, ch);
                    double got = c.y[(b * LC_T + 1 + i * LC_GW + j) * LC_C + ch];
                    ck_assert_msg(fabs(got - want) <= 1e-14, "b %d (%d, %d) ch %d: %.17g, want %.17g",
                                  b, i, j, ch, got, want);
                }
        }
    /* The corner (0, 0) has 4 neighbours in the grid (itself included), the
     * middle of the top row 6: with w = 1, b = 0 and x = 1 the patch tokens
     * read 1 + 4, 1 + 6 and 1 + 4 on the top row. */
    for (int k = 0; k < LC_N; k++)
        c.x[k] = 1;
    for (int k = 0; k < 9 * LC_C; k++)
        c.w[k] = 1;
    ASSERT_OK(vit_local_conv_forward(c.y, c.x, c.w, NULL, LC_B, LC_GH, LC_GW, LC_C));
    ck_assert_double_eq(c.y[0], 1);
    ck_assert_double_eq(c.y[1 * LC_C], 5);
    ck_assert_double_eq(c.y[2 * LC_C], 7);
    ck_assert_double_eq(c.y[3 * LC_C], 5);
}
END_TEST

START_TEST(test_local_conv_grad)
{
    lc_ctx c;
    lc_init(&c, 302);
    vit_real *dx = gc_zeros(LC_N), *dw = gc_zeros(9 * LC_C), *db = gc_zeros(LC_C);
    ASSERT_OK(vit_local_conv_backward(dx, dw, db, c.g, c.x, c.w, LC_B, LC_GH, LC_GW, LC_C));
    ASSERT_GRAD("local_conv dx", c.x, dx, LC_N, lc_loss, &c);
    ASSERT_GRAD("local_conv dw", c.w, dw, 9 * LC_C, lc_loss, &c);
    ASSERT_GRAD("local_conv db", c.b, db, LC_C, lc_loss, &c);
    /* the class token's gradient is dy's own */
    for (int b = 0; b < LC_B; b++)
        for (int ch = 0; ch < LC_C; ch++)
            ck_assert_double_eq(dx[b * LC_T * LC_C + ch], c.g[b * LC_T * LC_C + ch]);
    vit_real *ax = accum_start(dx, LC_N), *aw = accum_start(dw, 9 * LC_C),
             *ab = accum_start(db, LC_C);
    ASSERT_OK(vit_local_conv_backward(ax, aw, ab, c.g, c.x, c.w, LC_B, LC_GH, LC_GW, LC_C));
    accum_check("local_conv dx", ax, dx, LC_N);
    accum_check("local_conv dw", aw, dw, 9 * LC_C);
    accum_check("local_conv db", ab, db, LC_C);
    ASSERT_OK(vit_local_conv_backward(NULL, NULL, NULL, c.g, c.x, c.w, LC_B, LC_GH, LC_GW, LC_C));
    expect_err(vit_local_conv_forward(c.y, NULL, c.w, c.b, LC_B, LC_GH, LC_GW, LC_C), VIT_EINVAL,
               "vit_local_conv_forward", "NULL");
    expect_err(vit_local_conv_backward(dx, dw, db, c.g, c.x, c.w, LC_B, 0, LC_GW, LC_C),
               VIT_EINVAL, "vit_local_conv_backward", "GH 0");
    free(dx);
    free(dw);
    free(db);
}
END_TEST

START_TEST(test_bad_input)
{
    vit_real a[64] = {0}, b[64] = {0}, c[64] = {0}, d[64] = {0}, e[64] = {0};
    int labels[4] = {0, 1, 2, 0};

    expect_err(vit_linear_forward(a, NULL, b, NULL, 2, 2, 2), VIT_EINVAL, "vit_linear_forward", "x");
    expect_err(vit_linear_forward(a, b, c, NULL, 0, 2, 2), VIT_EINVAL, "vit_linear_forward", "n");
    expect_err(vit_linear_forward(a, b, c, NULL, 2, -1, 2), VIT_EINVAL, "vit_linear_forward", "in");
    expect_err(vit_linear_backward(a, b, c, NULL, d, e, 2, 2, 2), VIT_EINVAL, "vit_linear_backward", "dy");
    expect_err(vit_linear_backward(a, NULL, NULL, d, e, NULL, 2, 2, 2), VIT_EINVAL, "vit_linear_backward", "W");
    expect_err(vit_linear_backward(NULL, NULL, NULL, d, e, c, 2, 0, 2), VIT_EINVAL, "vit_linear_backward", "in");

    expect_err(vit_layernorm_forward(a, b, c, d, NULL, e, 2, 4, 1e-5), VIT_EINVAL, "vit_layernorm_forward", "gamma");
    expect_err(vit_layernorm_forward(a, b, c, d, e, e, 2, 0, 1e-5), VIT_EINVAL, "vit_layernorm_forward", "d");
    expect_err(vit_layernorm_forward(a, b, c, d, e, e, 2, 4, 0.0), VIT_EINVAL, "vit_layernorm_forward", "eps");
    expect_err(vit_layernorm_backward(a, b, c, d, e, NULL, e, e, 2, 4), VIT_EINVAL, "vit_layernorm_backward", "mean");
    expect_err(vit_layernorm_backward(a, b, c, d, e, e, e, e, 0, 4), VIT_EINVAL, "vit_layernorm_backward", "n");

    expect_err(vit_gelu_forward(NULL, b, 4), VIT_EINVAL, "vit_gelu_forward", "y");
    expect_err(vit_gelu_forward(a, b, 0), VIT_EINVAL, "vit_gelu_forward", "n");
    expect_err(vit_gelu_backward(a, b, NULL, 4), VIT_EINVAL, "vit_gelu_backward", "x");
    expect_err(vit_residual_forward(a, b, NULL, 4), VIT_EINVAL, "vit_residual_forward", "b");
    expect_err(vit_residual_backward(a, b, c, 0), VIT_EINVAL, "vit_residual_backward", "n");

    expect_err(vit_softmax_forward(a, NULL, 2, 2), VIT_EINVAL, "vit_softmax_forward", "x");
    expect_err(vit_softmax_forward(a, b, 2, 0), VIT_EINVAL, "vit_softmax_forward", "cols");
    b[3] = NAN;
    expect_err(vit_softmax_forward(a, b, 2, 2), VIT_ENUM, "vit_softmax_forward", "x[1, 1]");
    b[3] = INFINITY;
    expect_err(vit_softmax_forward(a, b, 2, 2), VIT_ENUM, "vit_softmax_forward", "+inf");
    b[3] = 0;
    expect_err(vit_softmax_backward(a, b, NULL, 2, 2), VIT_EINVAL, "vit_softmax_backward", "y");

    vit_real loss;
    expect_err(vit_cross_entropy_forward(&loss, a, b, NULL, 4, 3, 0), VIT_EINVAL, "vit_cross_entropy_forward", "labels");
    expect_err(vit_cross_entropy_forward(NULL, a, b, labels, 4, 3, 0), VIT_EINVAL, "vit_cross_entropy_forward", "loss");
    expect_err(vit_cross_entropy_forward(&loss, a, b, labels, 0, 3, 0), VIT_EINVAL, "vit_cross_entropy_forward", "n");
    expect_err(vit_cross_entropy_forward(&loss, a, b, labels, 4, 3, 1.0), VIT_EINVAL, "vit_cross_entropy_forward", "smoothing");
    labels[2] = 3;
    expect_err(vit_cross_entropy_forward(&loss, a, b, labels, 4, 3, 0), VIT_EINVAL, "vit_cross_entropy_forward", "labels[2]");
    expect_err(vit_cross_entropy_backward(c, a, labels, 4, 3, 0, 1), VIT_EINVAL, "vit_cross_entropy_backward", "labels[2]");
    labels[2] = -1;
    expect_err(vit_cross_entropy_forward(&loss, a, b, labels, 4, 3, 0), VIT_EINVAL, "vit_cross_entropy_forward", "labels[2]");
    labels[2] = 2;
    b[7] = NAN;
    expect_err(vit_cross_entropy_forward(&loss, a, b, labels, 4, 3, 0), VIT_ENUM, "vit_cross_entropy_forward", "logits[2, 1]");
    b[7] = -INFINITY;
    expect_err(vit_cross_entropy_forward(&loss, a, b, labels, 4, 3, 0), VIT_ENUM, "vit_cross_entropy_forward", "logits[2, 1]");
    b[7] = 0;

    vit_patch_shape s = {.batch = 1, .height = 4, .width = 5, .channels = 1, .patch = 2, .dim = 2};
    ck_assert_int_eq(vit_patch_count(&s), 0);
    ck_assert_int_eq(vit_patch_count(NULL), 0);
    expect_err(vit_patch_embed_forward(&s, a, b, c, d, NULL), VIT_EINVAL, "vit_patch_embed_forward", "multiple of patch");
    s.width = 4;
    ck_assert_int_eq(vit_patch_count(&s), 4);
    s.dim = 0;
    ck_assert_int_eq(vit_patch_count(&s), 0);
    expect_err(vit_patch_embed_forward(&s, a, b, c, d, NULL), VIT_EINVAL, "vit_patch_embed_forward", "dim");
    s.dim = 2;
    expect_err(vit_patch_embed_forward(&s, a, NULL, c, d, NULL), VIT_EINVAL, "vit_patch_embed_forward", "cols");
    expect_err(vit_patch_embed_forward(NULL, a, b, c, d, NULL), VIT_EINVAL, "vit_patch_embed_forward", "shape");
    {
        vit_patch_shape o = {.batch = 1, .height = 8, .width = 8, .channels = 1, .patch = 4,
                             .dim = 2, .stride = 3, .pad = 0};
        int gh = 7, gw = 7;
        ck_assert_int_eq(vit_patch_count(&o), 0);
        expect_err(vit_patch_grid(&o, &gh, &gw), VIT_EINVAL, "vit_patch_grid", "tile");
        ck_assert_int_eq(gh, 0);
        o.stride = 5;
        expect_err(vit_patch_embed_forward(&o, a, b, c, d, NULL), VIT_EINVAL, "vit_patch_embed_forward", "skip pixels");
        o.stride = -1;
        expect_err(vit_patch_embed_forward(&o, a, b, c, d, NULL), VIT_EINVAL, "vit_patch_embed_forward", "stride -1");
        o.stride = 2;
        o.pad = 4;
        expect_err(vit_patch_embed_backward(&o, a, NULL, NULL, b, NULL, d), VIT_EINVAL, "vit_patch_embed_backward", "padding 4");
        o.pad = -1;
        expect_err(vit_patch_embed_forward(&o, a, b, c, d, NULL), VIT_EINVAL, "vit_patch_embed_forward", "padding -1");
        o = (vit_patch_shape){.batch = 1, .height = 2, .width = 8, .channels = 1, .patch = 5,
                              .dim = 2, .stride = 1, .pad = 1};
        expect_err(vit_patch_embed_forward(&o, a, b, c, d, NULL), VIT_EINVAL, "vit_patch_embed_forward", "larger than the padded 4x10");
        expect_err(vit_patch_grid(&o, NULL, &gw), VIT_EINVAL, "vit_patch_grid", "grid_h");
    }
    expect_err(vit_patch_embed_backward(&s, a, NULL, NULL, d, e, NULL), VIT_EINVAL, "vit_patch_embed_backward", "W");
    expect_err(vit_patch_embed_backward(&s, NULL, a, NULL, d, NULL, e), VIT_EINVAL, "vit_patch_embed_backward", "cols");

    expect_err(vit_cls_prepend_forward(a, b, NULL, 1, 2, 2), VIT_EINVAL, "vit_cls_prepend_forward", "cls");
    expect_err(vit_cls_prepend_forward(a, a, c, 1, 2, 2), VIT_EINVAL, "vit_cls_prepend_forward", "alias");
    expect_err(vit_cls_prepend_backward(a, b, c, 1, 0, 2), VIT_EINVAL, "vit_cls_prepend_backward", "n");
    expect_err(vit_pos_add_forward(a, b, NULL, 1, 2, 2), VIT_EINVAL, "vit_pos_add_forward", "pos");
    expect_err(vit_pos_add_backward(a, b, NULL, 1, 2, 2), VIT_EINVAL, "vit_pos_add_backward", "dy");
    expect_err(vit_pos_add_backward(a, b, c, 0, 2, 2), VIT_EINVAL, "vit_pos_add_backward", "batch");
}
END_TEST

/* ======================================================================= */

static Suite *kernels_suite(void)
{
    Suite *s = suite_create("test_kernels");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_linear_forward);
    tcase_add_test(tc, test_linear_grad);
    tcase_add_test(tc, test_layernorm_forward);
    tcase_add_test(tc, test_layernorm_grad);
    tcase_add_test(tc, test_layernorm_backward_passes);
    tcase_add_test(tc, test_column_sums_in_order);
    tcase_add_test(tc, test_gelu_forward);
    tcase_add_test(tc, test_gelu_grad);
    tcase_add_loop_test(tc, test_elementwise, 0, EW_OPS);
    tcase_add_test(tc, test_mul_scale_bad_input);
    tcase_add_test(tc, test_softmax_forward);
    tcase_add_test(tc, test_softmax_grad);
    tcase_add_test(tc, test_cross_entropy_forward);
    tcase_add_test(tc, test_cross_entropy_grad);
    tcase_add_test(tc, test_soft_cross_entropy_grad);
    tcase_add_test(tc, test_soft_cross_entropy_onehot);
    tcase_add_loop_test(tc, test_patch_embed_forward, 0, 2);
    tcase_add_loop_test(tc, test_patch_embed_grad, 0, 2);
    tcase_add_loop_test(tc, test_patch_embed_overlap_forward, 0, OV_GEOS);
    tcase_add_loop_test(tc, test_patch_embed_overlap_grad, 0, OV_GEOS);
    tcase_add_test(tc, test_patch_embed_explicit_default);
    tcase_add_test(tc, test_cls_prepend);
    tcase_add_test(tc, test_pos_add);
    tcase_add_test(tc, test_embedding_forward);
    tcase_add_test(tc, test_embedding_grad);
    tcase_add_test(tc, test_embedding_bad_input);
    tcase_add_loop_test(tc, test_masked_mean_forward, 0, 2);
    tcase_add_loop_test(tc, test_masked_mean_grad, 0, 2);
    tcase_add_test(tc, test_masked_mean_bad_input);
    tcase_add_test(tc, test_local_conv_forward);
    tcase_add_test(tc, test_local_conv_grad);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (vit_real_size() != sizeof(vit_real)) {
        fprintf(stderr, "test_kernels: compiled for %zu-byte reals, library has %zu\n",
                sizeof(vit_real), vit_real_size());
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(kernels_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
