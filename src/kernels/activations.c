/* Elementwise GELU, residual add, multiply and scale, row softmax: forward
 * and backward. */
#include "vit/activations.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "activations_internal.h"
#include "error.h"
#include "fastmath.h"
#include "threads.h"
#include "vit/bf16.h"

#define INV_SQRT2 0.70710678118654752440     /* 1/sqrt(2) */
#define INV_SQRT2PI 0.39894228040143267794   /* 1/sqrt(2 pi) */

/* Elementwise lengths are size_t (they can exceed the 2^30 bound of
 * vit_check_dim for large activations), so only zero is rejected. */
static int check_len(const char *fn, size_t n)
{
    if (n == 0)
        return vit_fail(VIT_EINVAL, "%s: n must be positive, got 0", fn);
    return VIT_OK;
}

/* ---- GELU ------------------------------------------------------------ */

/* Elementwise loops split across threads: y[i] = f(a[i], b[i]). */
typedef struct {
    vit_real *y;
    const vit_real *a, *b;
    vit_real s; /* the constant of vit_scale_forward */
} ew_job;

#ifdef VIT_DOUBLE
/* float64: libm erf/exp (the gradient checks need full double accuracy). */
static void gelu_fwd_range(void *p, size_t lo, size_t hi)
{
    const ew_job *J = p;
    for (size_t i = lo; i < hi; i++) {
        vit_real v = J->a[i];
        J->y[i] = (vit_real)0.5 * v * ((vit_real)1 + erf(v * (vit_real)INV_SQRT2));
    }
}

/* GELU'(v) = Phi(v) + v phi(v). */
static vit_real gelu_grad(vit_real v)
{
    vit_real cdf = (vit_real)0.5 * ((vit_real)1 + erf(v * (vit_real)INV_SQRT2));
    vit_real pdf = (vit_real)INV_SQRT2PI * exp((vit_real)-0.5 * v * v);
    return cdf + v * pdf;
}

/* dx += dy GELU'(x) with y = dx, a = x, b = dy. */
static void gelu_bwd_range(void *p, size_t lo, size_t hi)
{
    const ew_job *J = p;
    for (size_t i = lo; i < hi; i++)
        J->y[i] += J->b[i] * gelu_grad(J->a[i]);
}

/* dx = dy GELU'(x), overwritten (dx may be dy). */
static void gelu_bwd_set_range(void *p, size_t lo, size_t hi)
{
    const ew_job *J = p;
    for (size_t i = lo; i < hi; i++)
        J->y[i] = J->b[i] * gelu_grad(J->a[i]);
}
#else
/* float32: the branch-free helpers of fastmath.h, which gcc vectorises
 * (calls to erff/expf kept these loops scalar, ~20% of a training step).
 * Within a few ulps of the double-precision GELU and GELU' (see
 * fastmath.h and tests/test_fastmath.c for the measured errors). */
FM_CLONES
static void gelu_fwd_range(void *p, size_t lo, size_t hi)
{
    const ew_job *J = p;
    float *y = J->y;
    const float *x = J->a;
    for (size_t i = lo; i < hi; i++)
        y[i] = fm_gelu(x[i]);
}

/* dx += dy GELU'(x) with y = dx, a = x, b = dy. */
FM_CLONES
static void gelu_bwd_range(void *p, size_t lo, size_t hi)
{
    const ew_job *J = p;
    float *dx = J->y;
    const float *x = J->a, *dy = J->b;
    for (size_t i = lo; i < hi; i++)
        dx[i] += dy[i] * fm_gelu_grad(x[i]);
}

/* dx = dy GELU'(x), overwritten (dx may be dy, so no restrict). */
FM_CLONES
static void gelu_bwd_set_range(void *p, size_t lo, size_t hi)
{
    const ew_job *J = p;
    float *dx = J->y;
    const float *x = J->a, *dy = J->b;
    for (size_t i = lo; i < hi; i++)
        dx[i] = dy[i] * fm_gelu_grad(x[i]);
}
#endif

/* ---- Bias + GELU, the MLP's first epilogue ----------------------------- */

typedef struct {
    vit_real *y, *u, *db;
    const vit_real *b, *dy, *g; /* g: the backward's GELU'(u + b) */
    int n, d;
} bias_gelu_job;

#ifdef VIT_DOUBLE
static vit_real gelu1(vit_real v)
{
    return (vit_real)0.5 * v * ((vit_real)1 + erf(v * (vit_real)INV_SQRT2));
}
#define gelu1_grad gelu_grad
#define BG_CLONES
#else
#define gelu1 fm_gelu
#define gelu1_grad fm_gelu_grad
#define BG_CLONES FM_CLONES
#endif

/* GELU(v), and GELU'(v) into *grad: both inlined side by side, so that the
 * compiler computes their common terms (in float32 the clamped |v|, the
 * exp and the tail ratio with its division) once. */
FM_INLINE vit_real gelu1_and_grad(vit_real v, vit_real *grad)
{
    *grad = gelu1_grad(v);
    return gelu1(v);
}

/* Rows [lo, hi): v = u + b; y = GELU(v), and u = GELU'(v) unless y is u. */
BG_CLONES
static void bias_gelu_fwd_rows(void *p, size_t lo, size_t hi)
{
    const bias_gelu_job *J = p;
    const int d = J->d;
    const vit_real *b = J->b;
    for (size_t i = lo; i < hi; i++) {
        vit_real *u = J->u + i * (size_t)d, *y = J->y + i * (size_t)d;
        /* No-grad: GELU in place.  The bias test stays out of the loops,
         * which gcc then vectorises (with it inside they ran scalar, a
         * third of an evaluation's time); the same operations per element,
         * so the same bits. */
        if (y == u && b)
            for (int j = 0; j < d; j++)
                y[j] = gelu1(y[j] + b[j]);
        else if (y == u)
            for (int j = 0; j < d; j++)
                y[j] = gelu1(y[j]);
        else if (b)
            for (int j = 0; j < d; j++)
                y[j] = gelu1_and_grad(u[j] + b[j], &u[j]);
        else
            for (int j = 0; j < d; j++)
                y[j] = gelu1_and_grad(u[j], &u[j]);
    }
}

void vit_bias_gelu_forward(vit_real *y, vit_real *u, const vit_real *b, int n, int d)
{
    bias_gelu_job J = {.y = y, .u = u, .b = b, .n = n, .d = d};
    vit_parallel(vit_threads_for(20.0 * n * (double)d), (size_t)n, bias_gelu_fwd_rows, &J);
}

/* Threads for a backward split by columns over n rows of d: at least 16
 * columns each. */
static int cols_threads(int n, int d)
{
    int nt = vit_threads_for(4.0 * n * (double)d);
    return nt <= d / 16 ? nt : d / 16 > 1 ? d / 16 : 1;
}

/* Columns [lo, hi) of every row: du = dy g, db += du.  du may be dy.
 * Split by columns so that each db[j] is one thread's sum in row order. */
BG_CLONES
static void bias_gelu_bwd_cols(void *p, size_t lo, size_t hi)
{
    const bias_gelu_job *J = p;
    const size_t d = (size_t)J->d;
    vit_real *db = J->db;
    for (int i = 0; i < J->n; i++) {
        vit_real *du = J->y + i * d;
        const vit_real *dy = J->dy + i * d, *g = J->g + i * d;
        for (size_t j = lo; j < hi; j++)
            du[j] = dy[j] * g[j];
        if (db)
            for (size_t j = lo; j < hi; j++)
                db[j] += du[j];
    }
}

void vit_bias_gelu_backward(vit_real *du, vit_real *db, const vit_real *dy, const vit_real *g,
                            int n, int d)
{
    bias_gelu_job J = {.y = du, .db = db, .dy = dy, .g = g, .n = n, .d = d};
    vit_parallel(cols_threads(n, d), (size_t)d, bias_gelu_bwd_cols, &J);
}

#ifndef VIT_DOUBLE
typedef struct {
    float *y;
    const float *u, *b;
    uint16_t *g16, *y16;
    int d;
} bias_gelu_bf16_fwd_job;

/* Rows [lo, hi): v = u + b, y = GELU(v), and GELU'(v) and (y16 not NULL)
 * y rounded to bf16, a piece of a row at a time while it is in cache. */
BG_CLONES
static void bias_gelu_bf16_fwd_rows(void *p, size_t lo, size_t hi)
{
    enum { PIECE = 256 };
    const bias_gelu_bf16_fwd_job *J = p;
    const size_t d = (size_t)J->d;
    float g[PIECE];
    for (size_t i = lo; i < hi; i++)
        for (size_t j0 = 0; j0 < d; j0 += PIECE) {
            size_t len = d - j0 < PIECE ? d - j0 : PIECE;
            const float *u = J->u + i * d + j0, *b = J->b ? J->b + j0 : NULL;
            float *y = J->y + i * d + j0;
            if (b)
                for (size_t j = 0; j < len; j++)
                    y[j] = gelu1_and_grad(u[j] + b[j], &g[j]);
            else
                for (size_t j = 0; j < len; j++)
                    y[j] = gelu1_and_grad(u[j], &g[j]);
            vit_bf16_from_floats(J->g16 + i * d + j0, g, len);
            if (J->y16)
                vit_bf16_from_floats(J->y16 + i * d + j0, y, len);
        }
}

void vit_bias_gelu_forward_bf16(float *y, const float *u, const float *b, int n, int d,
                                uint16_t *g16, uint16_t *y16)
{
    bias_gelu_bf16_fwd_job J = {y, u, b, g16, y16, d};
    vit_parallel(vit_threads_for(20.0 * n * (double)d), (size_t)n, bias_gelu_bf16_fwd_rows, &J);
}

typedef struct {
    float *du, *db;
    const float *dy;
    const uint16_t *g;
    int n, d;
} bias_gelu_bf16_job;

/* bias_gelu_bwd_cols with g in bf16: its bits are a float's upper half. */
static void bias_gelu_bf16_bwd_cols(void *p, size_t lo, size_t hi)
{
    const bias_gelu_bf16_job *J = p;
    const size_t d = (size_t)J->d;
    float *db = J->db;
    for (int i = 0; i < J->n; i++) {
        float *du = J->du + i * d;
        const float *dy = J->dy + i * d;
        const uint16_t *g = J->g + i * d;
        for (size_t j = lo; j < hi; j++) {
            uint32_t bits = (uint32_t)g[j] << 16;
            float gj;
            memcpy(&gj, &bits, sizeof gj);
            du[j] = dy[j] * gj;
        }
        if (db)
            for (size_t j = lo; j < hi; j++)
                db[j] += du[j];
    }
}

void vit_bias_gelu_backward_bf16(float *du, float *db, const float *dy, const uint16_t *g, int n,
                                 int d)
{
    bias_gelu_bf16_job J = {du, db, dy, g, n, d};
    vit_parallel(cols_threads(n, d), (size_t)d, bias_gelu_bf16_bwd_cols, &J);
}
#endif

#ifndef VIT_DOUBLE
/* ---- The mixed MLP's GELU from a bf16 pre-activation (src/tape/tape_ops_mlp.c)
 *
 * A bf16 v has 65,536 values, so GELU and GELU' of every one are a table,
 * made once: each entry holds bf16(GELU(v)) in its low half and
 * bf16(GELU'(v)) in its high half (a float's bits, exact as float), the
 * same bits as computing them with vit_bias_gelu_forward_bf16's GELU and
 * rounding.  A lookup costs a fraction of the erf-exact GELU's exp and
 * division, and activations take few values in practice (a few exponents
 * of 128 values each): the table's used part stays in the core's cache.
 * GELU' in bf16 is one more rounding of du = dh GELU'(v), whose products
 * round it again (tests/test_mixed.c bounds the whole block). */

static uint32_t gelu_table[1u << 16];
static pthread_once_t gelu_table_once = PTHREAD_ONCE_INIT;

BG_CLONES
static void gelu_table_fill(void)
{
    enum { PIECE = 256 };
    float v[PIECE], g[PIECE];
    uint16_t h16[PIECE], g16[PIECE];
    for (uint32_t i0 = 0; i0 < (1u << 16); i0 += PIECE) {
        for (uint32_t j = 0; j < PIECE; j++) {
            uint32_t bits = (i0 + j) << 16;
            memcpy(&v[j], &bits, sizeof v[j]);
        }
        for (int j = 0; j < PIECE; j++)
            v[j] = gelu1_and_grad(v[j], &g[j]);
        vit_bf16_from_floats(h16, v, PIECE);
        vit_bf16_from_floats(g16, g, PIECE);
        for (int j = 0; j < PIECE; j++)
            gelu_table[i0 + j] = (uint32_t)g16[j] << 16 | h16[j];
    }
}

static const uint32_t *gelu_table_get(void)
{
    pthread_once(&gelu_table_once, gelu_table_fill);
    return gelu_table;
}

typedef struct {
    const float *u, *b;
    const uint32_t *T;
    uint16_t *v16, *h16;
    int d;
} gelu_v16_fwd_job;

/* Rows [lo, hi): v16 = bf16(u + b), then h16 = its GELU from the table, a
 * piece of a row at a time while it is in cache. */
BG_CLONES
static void gelu_v16_fwd_rows(void *p, size_t lo, size_t hi)
{
    enum { PIECE = 256 };
    const gelu_v16_fwd_job *J = p;
    const uint32_t *T = J->T;
    const size_t d = (size_t)J->d;
    float v[PIECE];
    for (size_t i = lo; i < hi; i++)
        for (size_t j0 = 0; j0 < d; j0 += PIECE) {
            size_t len = d - j0 < PIECE ? d - j0 : PIECE;
            const float *u = J->u + i * d + j0, *b = J->b ? J->b + j0 : NULL;
            uint16_t *v16 = J->v16 + i * d + j0, *h16 = J->h16 + i * d + j0;
            if (b) {
                for (size_t j = 0; j < len; j++)
                    v[j] = u[j] + b[j];
                vit_bf16_from_floats(v16, v, len);
            } else {
                vit_bf16_from_floats(v16, u, len);
            }
            for (size_t j = 0; j < len; j++)
                h16[j] = (uint16_t)T[v16[j]];
        }
}

void vit_bias_gelu_forward_v16(const float *u, const float *b, int n, int d, uint16_t *v16,
                               uint16_t *h16)
{
    gelu_v16_fwd_job J = {u, b, gelu_table_get(), v16, h16, d};
    vit_parallel(vit_threads_for(4.0 * n * (double)d), (size_t)n, gelu_v16_fwd_rows, &J);
}

typedef struct {
    float *du, *db;
    const uint32_t *T;
    const uint16_t *v16;
    uint16_t *h16, *du16;
    int n, d;
} gelu_v16_bwd_job;

/* Columns [lo, hi) of every row: from the table h16 = bf16(GELU(v)) and
 * du = dh GELU'(v) over dh (and rounded into du16), db += du.  Split by
 * columns so that each db[j] is one thread's sum in row order (as
 * vit_bias_gelu_backward). */
BG_CLONES
static void gelu_v16_bwd_cols(void *p, size_t lo, size_t hi)
{
    const gelu_v16_bwd_job *J = p;
    const uint32_t *T = J->T;
    const size_t d = (size_t)J->d;
    for (int i = 0; i < J->n; i++) {
        const uint16_t *v16 = J->v16 + i * d;
        uint16_t *h16 = J->h16 + i * d;
        float *du = J->du + i * d;
        for (size_t j = lo; j < hi; j++) {
            uint32_t e = T[v16[j]], gbits = e & 0xffff0000u;
            float g;
            memcpy(&g, &gbits, sizeof g);
            h16[j] = (uint16_t)e;
            du[j] *= g;
        }
        if (J->du16)
            vit_bf16_from_floats(J->du16 + i * d + lo, du + lo, hi - lo);
        if (J->db)
            for (size_t j = lo; j < hi; j++)
                J->db[j] += du[j];
    }
}

void vit_gelu_backward_v16(float *dh, float *db, const uint16_t *v16, uint16_t *h16,
                           uint16_t *du16, int n, int d)
{
    gelu_v16_bwd_job J = {dh, db, gelu_table_get(), v16, h16, du16, n, d};
    vit_parallel(cols_threads(n, d), (size_t)d, gelu_v16_bwd_cols, &J);
}
#endif

static void add_range(void *p, size_t lo, size_t hi)
{
    const ew_job *J = p;
    for (size_t i = lo; i < hi; i++)
        J->y[i] = J->a[i] + J->b[i];
}

/* x [n] -> y [n] */
int vit_gelu_forward(vit_real *y, const vit_real *x, size_t n)
{
    static const char fn[] = "vit_gelu_forward";
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(check_len(fn, n));
    ew_job J = {.y = y, .a = x};
    vit_parallel(vit_threads_for(20.0 * (double)n), n, gelu_fwd_range, &J);
    return VIT_OK;
}

/* dy [n], x [n] -> dx [n] +=.  GELU(x) = x Phi(x), so
 * GELU'(x) = Phi(x) + x phi(x) with phi the standard normal density. */
int vit_gelu_backward(vit_real *dx, const vit_real *dy, const vit_real *x, size_t n)
{
    static const char fn[] = "vit_gelu_backward";
    TRY(vit_check_ptr(fn, "dx", dx));
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(check_len(fn, n));
    ew_job J = {.y = dx, .a = x, .b = dy};
    vit_parallel(vit_threads_for(30.0 * (double)n), n, gelu_bwd_range, &J);
    return VIT_OK;
}

/* The tape's first write of a gradient: overwrites, in place when dx = dy
 * (arguments checked by the tape). */
void vit_gelu_backward_set(vit_real *dx, const vit_real *dy, const vit_real *x, size_t n)
{
    ew_job J = {.y = dx, .a = x, .b = dy};
    vit_parallel(vit_threads_for(30.0 * (double)n), n, gelu_bwd_set_range, &J);
}

/* ---- Residual -------------------------------------------------------- */

/* a [n], b [n] -> y [n] = body(a, b) elementwise, split across threads:
 * the whole of vit_residual_forward and vit_mul_forward but for the body. */
static int binary_forward(const char *fn, vit_range_fn body, vit_real *y, const vit_real *a,
                          const vit_real *b, size_t n)
{
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "a", a));
    TRY(vit_check_ptr(fn, "b", b));
    TRY(check_len(fn, n));
    ew_job J = {.y = y, .a = a, .b = b};
    vit_parallel(vit_threads_for((double)n), n, body, &J);
    return VIT_OK;
}

/* a [n], b [n] -> y [n] */
int vit_residual_forward(vit_real *y, const vit_real *a, const vit_real *b, size_t n)
{
    return binary_forward("vit_residual_forward", add_range, y, a, b, n);
}

/* dy [n] -> da [n] +=, db [n] += */
int vit_residual_backward(vit_real *da, vit_real *db, const vit_real *dy, size_t n)
{
    static const char fn[] = "vit_residual_backward";
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(check_len(fn, n));
    if (da)
        for (size_t i = 0; i < n; i++)
            da[i] += dy[i];
    if (db)
        for (size_t i = 0; i < n; i++)
            db[i] += dy[i];
    return VIT_OK;
}

/* ---- Multiply and scale ---------------------------------------------- */

/* The fields are read into locals first: J->s has the type of y's
 * elements, so the compiler would otherwise reload it after every store. */
static void mul_range(void *p, size_t lo, size_t hi)
{
    const ew_job *J = p;
    vit_real *y = J->y;
    const vit_real *a = J->a, *b = J->b;
    for (size_t i = lo; i < hi; i++)
        y[i] = a[i] * b[i];
}

static void scale_range(void *p, size_t lo, size_t hi)
{
    const ew_job *J = p;
    vit_real *y = J->y;
    const vit_real *x = J->a, s = J->s;
    for (size_t i = lo; i < hi; i++)
        y[i] = s * x[i];
}

/* A scale that is NaN or infinite would silently poison every output. */
static int check_scale(const char *fn, vit_real s)
{
    if (!isfinite((double)s))
        return vit_fail(VIT_EINVAL, "%s: s must be finite, got %g", fn, (double)s);
    return VIT_OK;
}

/* a [n], b [n] -> y [n] */
int vit_mul_forward(vit_real *y, const vit_real *a, const vit_real *b, size_t n)
{
    return binary_forward("vit_mul_forward", mul_range, y, a, b, n);
}

/* dy [n], a [n], b [n] -> da [n] +=, db [n] +=.  Two separate passes, so
 * that da == db receives both terms. */
int vit_mul_backward(vit_real *da, vit_real *db, const vit_real *dy, const vit_real *a,
                     const vit_real *b, size_t n)
{
    static const char fn[] = "vit_mul_backward";
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(vit_check_ptr(fn, "a", a));
    TRY(vit_check_ptr(fn, "b", b));
    TRY(check_len(fn, n));
    if (da)
        for (size_t i = 0; i < n; i++)
            da[i] += dy[i] * b[i];
    if (db)
        for (size_t i = 0; i < n; i++)
            db[i] += dy[i] * a[i];
    return VIT_OK;
}

/* x [n] -> y [n] */
int vit_scale_forward(vit_real *y, const vit_real *x, vit_real s, size_t n)
{
    static const char fn[] = "vit_scale_forward";
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(check_len(fn, n));
    TRY(check_scale(fn, s));
    ew_job J = {.y = y, .a = x, .s = s};
    vit_parallel(vit_threads_for((double)n), n, scale_range, &J);
    return VIT_OK;
}

/* dy [n] -> dx [n] += */
int vit_scale_backward(vit_real *dx, const vit_real *dy, vit_real s, size_t n)
{
    static const char fn[] = "vit_scale_backward";
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(check_len(fn, n));
    TRY(check_scale(fn, s));
    if (dx)
        for (size_t i = 0; i < n; i++)
            dx[i] += s * dy[i];
    return VIT_OK;
}

/* ---- Softmax --------------------------------------------------------- */

/* x [rows, cols] -> y [rows, cols] */
int vit_softmax_forward(vit_real *y, const vit_real *x, int rows, int cols)
{
    static const char fn[] = "vit_softmax_forward";
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_ptr(fn, "x", x));
    TRY(vit_check_dim(fn, "rows", rows));
    TRY(vit_check_dim(fn, "cols", cols));

    for (int r = 0; r < rows; r++) {
        const vit_real *xr = x + (size_t)r * cols;
        vit_real *yr = y + (size_t)r * cols;
        /* -inf is a legitimate "masked out" score; NaN and +inf are not
         * (+inf would make the max infinite and every weight NaN). */
        double mx = -INFINITY;
        for (int c = 0; c < cols; c++) {
            double v = xr[c];
            if (isnan(v) || v == INFINITY)
                return vit_fail(VIT_ENUM, "%s: x[%d, %d] is %s", fn, r, c,
                                isnan(v) ? "NaN" : "+inf");
            if (v > mx)
                mx = v;
        }
        if (mx == -INFINITY) { /* fully masked row: no distribution */
            for (int c = 0; c < cols; c++)
                yr[c] = 0;
            continue;
        }
        /* exp(-inf - mx) is exactly 0, so masked entries need no branch.
         * Each xr[c] is read before yr[c] is written: y may alias x. */
        double sum = 0.0;
        for (int c = 0; c < cols; c++) {
            double e = exp((double)xr[c] - mx);
            yr[c] = (vit_real)e;
            sum += e;
        }
        double inv = 1.0 / sum; /* sum >= 1: the max term is exp(0) */
        for (int c = 0; c < cols; c++)
            yr[c] = (vit_real)(yr[c] * inv);
    }
    return VIT_OK;
}

/* dy [rows, cols], y [rows, cols] -> dx [rows, cols] += */
int vit_softmax_backward(vit_real *dx, const vit_real *dy, const vit_real *y,
                         int rows, int cols)
{
    static const char fn[] = "vit_softmax_backward";
    TRY(vit_check_ptr(fn, "dx", dx));
    TRY(vit_check_ptr(fn, "dy", dy));
    TRY(vit_check_ptr(fn, "y", y));
    TRY(vit_check_dim(fn, "rows", rows));
    TRY(vit_check_dim(fn, "cols", cols));

    for (int r = 0; r < rows; r++) {
        const vit_real *yr = y + (size_t)r * cols;
        const vit_real *dyr = dy + (size_t)r * cols;
        vit_real *dxr = dx + (size_t)r * cols;
        double s = 0.0;
        for (int c = 0; c < cols; c++)
            s += (double)dyr[c] * yr[c];
        /* A zero row (fully masked) gets exactly zero gradient. */
        for (int c = 0; c < cols; c++)
            dxr[c] += (vit_real)(yr[c] * (dyr[c] - s));
    }
    return VIT_OK;
}
