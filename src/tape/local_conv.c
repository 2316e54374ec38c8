/*
 * The 3x3 depthwise convolution of the patch tokens over their grid, added
 * to them (vit/local_conv.h): kernels forward and backward, and the tape op.
 */
#include "vit/local_conv.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cpu_internal.h"
#include "error.h"
#include "fastmath.h"
#include "tape_internal.h"

static int bad_args(const char *fn, const void *a, const void *b, const void *c, int B, int GH,
                    int GW, int C)
{
    if (!a || !b || !c)
        return vit_fail(VIT_EINVAL, "%s: a buffer is NULL", fn);
    if (B < 1 || GH < 1 || GW < 1 || C < 1)
        return vit_fail(VIT_EINVAL, "%s: B %d, GH %d, GW %d, C %d: each must be at least 1",
                        fn, B, GH, GW, C);
    return VIT_OK;
}

/* The in-grid taps of patch (i, j): their weight rows and the tokens they
 * read, in tap order (dy, then dx, each -1 .. 1); their number (4 .. 9). */
static int taps(const vit_real *w, const vit_real *xb, int i, int j, int GH, int GW, int C,
                const vit_real **wp, const vit_real **xp)
{
    int n = 0;
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++)
            if (i + dy >= 0 && i + dy < GH && j + dx >= 0 && j + dx < GW) {
                wp[n] = w + (size_t)((dy + 1) * 3 + dx + 1) * C;
                xp[n++] = xb + ((size_t)(i + dy) * GW + j + dx) * C;
            }
    return n;
}

/* Channels c .. C - 1 of one output token, one at a time: the channels
 * past the vector blocks of token_forward and token_forward_avx2. */
static inline void token_tail(vit_real *restrict yo, const vit_real *restrict xo,
                              const vit_real *restrict bias, const vit_real *const *wp,
                              const vit_real *const *xp, int n, int c, int C)
{
    for (; c < C; c++) {
        vit_real v = xo[c];
        if (bias)
            v += bias[c];
        for (int t = 0; t < n; t++)
            v += wp[t][c] * xp[t][c];
        yo[c] = v;
    }
}

/* One output token: yo = xo + bias + sum of wp[t] * xp[t], 16 channels at
 * a time in registers (adding into yo in memory once per tap stalls on
 * its own stores).  Every channel adds its terms in the order above, the
 * same in each clone (no FMA: fastmath.h), so any build gives the same
 * bits. */
#define LC_LANES 16
FM_CLONES
static void token_forward(vit_real *restrict yo, const vit_real *restrict xo,
                          const vit_real *restrict bias, const vit_real *const *wp,
                          const vit_real *const *xp, int n, int C)
{
    int c = 0;
    for (; c + LC_LANES <= C; c += LC_LANES) {
        vit_real acc[LC_LANES];
        for (int u = 0; u < LC_LANES; u++)
            acc[u] = xo[c + u];
        if (bias)
            for (int u = 0; u < LC_LANES; u++)
                acc[u] += bias[c + u];
        for (int t = 0; t < n; t++)
            for (int u = 0; u < LC_LANES; u++)
                acc[u] += wp[t][c + u] * xp[t][c + u];
        for (int u = 0; u < LC_LANES; u++)
            yo[c + u] = acc[u];
    }
    token_tail(yo, xo, bias, wp, xp, n, c, C);
}

#if !defined(VIT_DOUBLE) && defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LC_AVX2 1

/* token_forward in AVX registers, two vectors of 8 channels a block: gcc
 * made the AVX2 clone's acc[16] scalar adds and multiplies (on Zen 3 it
 * was 2.8% of the Fashion-MNIST default's step).  Per channel the same
 * operations in the same order (a multiply, then an add, tap by tap; no
 * FMA), so the same bits as token_forward. */
__attribute__((target("avx2")))
static void token_forward_avx2(float *restrict yo, const float *restrict xo,
                               const float *restrict bias, const float *const *wp,
                               const float *const *xp, int n, int C)
{
    int c = 0;
    for (; c + 16 <= C; c += 16) {
        __m256 a0 = _mm256_loadu_ps(xo + c), a1 = _mm256_loadu_ps(xo + c + 8);
        if (bias) {
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(bias + c));
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(bias + c + 8));
        }
        for (int t = 0; t < n; t++) {
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(wp[t] + c),
                                                 _mm256_loadu_ps(xp[t] + c)));
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(wp[t] + c + 8),
                                                 _mm256_loadu_ps(xp[t] + c + 8)));
        }
        _mm256_storeu_ps(yo + c, a0);
        _mm256_storeu_ps(yo + c + 8, a1);
    }
    token_tail(yo, xo, bias, wp, xp, n, c, C);
}
#endif

/* Shapes: x, y [B, T, C], T = 1 + GH*GW; w [9, C]; bias [C]. */
int vit_local_conv_forward(vit_real *y, const vit_real *x, const vit_real *w,
                           const vit_real *bias, int B, int GH, int GW, int C)
{
    int rc = bad_args("vit_local_conv_forward", y, x, w, B, GH, GW, C);
    if (rc)
        return rc;
    const size_t T = 1 + (size_t)GH * GW;
#ifdef LC_AVX2
    const int avx2 = (vit_cpu_features() & VIT_CPU_AVX2) != 0;
#endif
    for (int b = 0; b < B; b++) {
        const vit_real *xb = x + (size_t)b * T * C;
        vit_real *yb = y + (size_t)b * T * C;
        memcpy(yb, xb, (size_t)C * sizeof *yb); /* the class token passes */
        for (int i = 0; i < GH; i++)
            for (int j = 0; j < GW; j++) {
                const vit_real *wp[9], *xp[9];
                int n = taps(w, xb + C, i, j, GH, GW, C, wp, xp);
                size_t o = (1 + (size_t)i * GW + j) * C;
#ifdef LC_AVX2
                if (avx2) {
                    token_forward_avx2(yb + o, xb + o, bias, wp, xp, n, C);
                    continue;
                }
#endif
                token_forward(yb + o, xb + o, bias, wp, xp, n, C);
            }
    }
    return VIT_OK;
}

/* dw[c] += g[c] * xq[c] and dxq[c] += w[c] * g[c] for one tap (either
 * gradient may be NULL). */
FM_CLONES
static void tap_backward(vit_real *restrict dw, vit_real *restrict dxq, const vit_real *restrict g,
                         const vit_real *restrict xq, const vit_real *restrict w, int C)
{
    if (dw)
        for (int c = 0; c < C; c++)
            dw[c] += g[c] * xq[c];
    if (dxq)
        for (int c = 0; c < C; c++)
            dxq[c] += w[c] * g[c];
}

int vit_local_conv_backward(vit_real *dx, vit_real *dw, vit_real *dbias, const vit_real *dy,
                            const vit_real *x, const vit_real *w, int B, int GH, int GW, int C)
{
    int rc = bad_args("vit_local_conv_backward", dy, x, w, B, GH, GW, C);
    if (rc)
        return rc;
    const size_t T = 1 + (size_t)GH * GW;
    if (dx) /* the residual */
        for (size_t n = 0; n < (size_t)B * T * C; n++)
            dx[n] += dy[n];
    for (int b = 0; b < B; b++) {
        const vit_real *xb = x + (size_t)b * T * C + C, *gb = dy + (size_t)b * T * C + C;
        vit_real *dxb = dx ? dx + (size_t)b * T * C + C : NULL;
        for (int i = 0; i < GH; i++)
            for (int j = 0; j < GW; j++) {
                const vit_real *go = gb + ((size_t)i * GW + j) * C;
                if (dbias)
                    for (int c = 0; c < C; c++)
                        dbias[c] += go[c];
                const vit_real *wp[9], *xp[9];
                int n = taps(w, xb, i, j, GH, GW, C, wp, xp);
                for (int t = 0; t < n; t++) { /* the forward's taps, in its order */
                    size_t k = (size_t)(wp[t] - w), q = (size_t)(xp[t] - xb);
                    tap_backward(dw ? dw + k : NULL, dxb ? dxb + q : NULL, go, xp[t], wp[t], C);
                }
            }
    }
    return VIT_OK;
}

/* ---- the tape op ---------------------------------------------------------- */

typedef struct local_ctx {
    int gh, gw;
} local_ctx;

/* in: x, w, bias (or NULL); all accumulated.  x's values are read back
 * through vit_tape_values (a block's input may be kept in bf16). */
static int back_local(vit_tape *t, const vit_op_rec *r)
{
    const local_ctx *c = r->ctx;
    const vit_tensor *x = r->in[0];
    vit_real *dx = vit_tape_grad_acc(t, r->in[0]), *dw = vit_tape_grad_acc(t, r->in[1]);
    vit_real *db = r->in[2] ? vit_tape_grad_acc(t, r->in[2]) : NULL;
    if (vit_tape_status(t))
        return vit_tape_status(t);
    void *lease = NULL;
    const vit_real *xv = vit_tape_values(t, x, &lease);
    if (!xv)
        return vit_tape_status(t);
    int rc = vit_local_conv_backward(dx, dw, db, r->out->grad, xv, r->in[1]->data, x->shape[0],
                                     c->gh, c->gw, x->shape[2]);
    vit_tape_lease_end(lease);
    return rc;
}

static const vit_op_def local_def = {"vit_op_local_conv", back_local, NULL, 0};

vit_tensor *vit_op_local_conv(vit_tape *t, vit_tensor *x, vit_tensor *w, vit_tensor *bias,
                              int GH, int GW)
{
    vit_tensor *in[3] = {x, w, bias};
    if (!vit_tape_begin(t, local_def.name, 2, in))
        return NULL;
    const char *fn = local_def.name;
    if (GH < 1 || GW < 1 || (long long)GH * GW >= INT_MAX)
        return vit_tape_error(t, vit_fail(VIT_EINVAL, "%s: grid %d x %d is not a grid", fn, GH,
                                          GW));
    char layout[64];
    snprintf(layout, sizeof layout, "[B, 1 + %d*%d, C]", GH, GW);
    if (vit_tape_check_shape(t, fn, "x", x, layout, 3, (int[]){-1, 1 + GH * GW, -1})
        || vit_tape_check_shape(t, fn, "w", w, "[9, C]", 2, (int[]){9, x->shape[2]})
        || (bias && vit_tape_check_shape(t, fn, "bias", bias, "[C]", 1, &x->shape[2])))
        return NULL;
    vit_tensor *y = vit_tape_output(t, 3, x->shape, vit_tape_wants_grad(t, 3, in));
    if (!y)
        return NULL;
    int rc = vit_local_conv_forward(y->data, x->data, w->data, bias ? bias->data : NULL,
                                    x->shape[0], GH, GW, x->shape[2]);
    local_ctx c = {GH, GW};
    return vit_tape_record(t, &local_def, rc, y, 3, in, &c, sizeof c);
}
