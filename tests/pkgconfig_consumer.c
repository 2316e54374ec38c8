/*
 * pkgconfig_consumer - a program outside the project, built by test_install
 * with nothing but `cc consumer.c $(pkg-config --cflags --libs vit)`.  It
 * calls a linear layer and a causal multi-head attention layer forward and
 * backward and compares every output and gradient with a naive double
 * precision computation written out below, then prints PASS.
 *
 * The flags pkg-config gives for vit do not include -lm (libm is only a
 * private dependency of the shared library), so this file uses no function
 * from libm: the one exponential it needs is computed here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vit/vit.h>

static int failures;

/* e^x for |x| < 50 or so: exp(x) = exp(x / 2^s)^(2^s) with the small
 * argument's exponential from its Taylor series. */
static double my_exp(double x)
{
    int s = 0;
    while (x > 0.5 || x < -0.5) {
        x /= 2;
        s++;
    }
    double term = 1, sum = 1;
    for (int n = 1; n < 20; n++) {
        term *= x / n;
        sum += term;
    }
    while (s-- > 0)
        sum *= sum;
    return sum;
}

static double my_abs(double x) { return x < 0 ? -x : x; }

/* Compares n float results with the double reference: |got - want| must stay
 * within 1e-4 (1 + |want|), float32 rounding being ~1e-7 per operation. */
static void expect_close(const char *what, const vit_real *got, const double *want, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = my_abs((double)got[i] - want[i]) / (1 + my_abs(want[i]));
        if (e > worst)
            worst = e;
    }
    int ok = worst <= 1e-4;
    printf("%-4s %-30s max error %.2e\n", ok ? "ok" : "FAIL", what, worst);
    failures += !ok;
}

/* Uniform in [-1, 1) from a 32-bit linear congruential generator. */
static unsigned lcg_state = 12345;
static double rnd(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (double)(lcg_state >> 8) / (double)(1u << 24) * 2 - 1;
}

static void fill(vit_real *x, double *xd, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = (vit_real)rnd();
        xd[i] = (double)x[i];
    }
}

/* C[n, m] = A[n, k] B[k, m], or += when accumulate is set: with transpose
 * below, the whole naive toolkit of the reference. */
static void mm(double *C, const double *A, const double *B, int n, int k, int m, int accumulate)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double s = accumulate ? C[i * m + j] : 0;
            for (int p = 0; p < k; p++)
                s += A[i * k + p] * B[p * m + j];
            C[i * m + j] = s;
        }
}

static void transpose(double *T, const double *A, int n, int m)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            T[j * n + i] = A[i * m + j];
}

/* ---- linear layer --------------------------------------------------------- */

static void check_linear(void)
{
    enum { N = 3, IN = 4, OUT = 5 };
    vit_real x[N * IN], W[IN * OUT], b[OUT], y[N * OUT], dy[N * OUT];
    double xd[N * IN], Wd[IN * OUT], bd[OUT], yd[N * OUT], dyd[N * OUT];
    fill(x, xd, N * IN);
    fill(W, Wd, IN * OUT);
    fill(b, bd, OUT);
    fill(dy, dyd, N * OUT);
    if (vit_linear_forward(y, x, W, b, N, IN, OUT) != VIT_OK) {
        printf("FAIL vit_linear_forward: %s\n", vit_last_error());
        failures++;
        return;
    }
    mm(yd, xd, Wd, N, IN, OUT, 0);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < OUT; j++)
            yd[i * OUT + j] += bd[j];
    expect_close("linear forward y", y, yd, N * OUT);

    /* Gradients start at 1 to see that the backward adds to them. */
    vit_real dx[N * IN], dW[IN * OUT], db[OUT];
    double dxd[N * IN], dWd[IN * OUT], dbd[OUT], Wt[OUT * IN], xt[IN * N];
    for (int i = 0; i < N * IN; i++) { dx[i] = 1; dxd[i] = 1; }
    for (int i = 0; i < IN * OUT; i++) { dW[i] = 1; dWd[i] = 1; }
    for (int i = 0; i < OUT; i++) { db[i] = 1; dbd[i] = 1; }
    if (vit_linear_backward(dx, dW, db, dy, x, W, N, IN, OUT) != VIT_OK) {
        printf("FAIL vit_linear_backward: %s\n", vit_last_error());
        failures++;
        return;
    }
    transpose(Wt, Wd, IN, OUT);
    transpose(xt, xd, N, IN);
    mm(dxd, dyd, Wt, N, OUT, IN, 1);
    mm(dWd, xt, dyd, IN, N, OUT, 1);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < OUT; j++)
            dbd[j] += dyd[i * OUT + j];
    expect_close("linear backward dx (+= 1)", dx, dxd, N * IN);
    expect_close("linear backward dW (+= 1)", dW, dWd, IN * OUT);
    expect_close("linear backward db (+= 1)", db, dbd, OUT);
}

/* ---- causal multi-head self-attention -------------------------------------- */

enum { B = 2, T = 4, D = 8, H = 2, DK = D / H };

/* Reference forward and backward for one sequence X [T, D]; p holds the
 * parameters in double in vit_mha's flat layout, g their gradients (+=).
 * That layout starts with W_QKV [D, 3D] = [W_Q | W_K | W_V]: row i holds
 * row i of W_Q, of W_K and of W_V; they are copied out here. */
static void mha_reference(const double *p, double *g, const double *X, const double *dY,
                          double *Y, double *dX)
{
    double Wq[D * D], Wk[D * D], Wv[D * D];
    for (int i = 0; i < D; i++)
        for (int c = 0; c < D; c++) {
            Wq[i * D + c] = p[i * 3 * D + c];
            Wk[i * D + c] = p[i * 3 * D + D + c];
            Wv[i * D + c] = p[i * 3 * D + 2 * D + c];
        }
    const double *Wo = p + 3 * D * D;
    const double *bias = p + 4 * D * D; /* b_Q | b_K | b_V | b_O, D each */
    double Q[T * D], K[T * D], V[T * D], C[T * D], P[H][T][T];
    mm(Q, X, Wq, T, D, D, 0);
    mm(K, X, Wk, T, D, D, 0);
    mm(V, X, Wv, T, D, D, 0);
    for (int i = 0; i < T; i++)
        for (int c = 0; c < D; c++) {
            Q[i * D + c] += bias[c];
            K[i * D + c] += bias[D + c];
            V[i * D + c] += bias[2 * D + c];
        }
    const double scale = 0.5; /* 1 / sqrt(DK), DK = 4 */
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            double s[T], mx = -1e300, sum = 0;
            for (int j = 0; j <= i; j++) { /* causal: keys 0..i */
                s[j] = 0;
                for (int c = 0; c < DK; c++)
                    s[j] += Q[i * D + h * DK + c] * K[j * D + h * DK + c];
                s[j] *= scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j < T; j++) {
                P[h][i][j] = j <= i ? my_exp(s[j] - mx) : 0;
                sum += P[h][i][j];
            }
            for (int j = 0; j < T; j++)
                P[h][i][j] /= sum;
            for (int c = 0; c < DK; c++) {
                double acc = 0;
                for (int j = 0; j < T; j++)
                    acc += P[h][i][j] * V[j * D + h * DK + c];
                C[i * D + h * DK + c] = acc;
            }
        }
    mm(Y, C, Wo, T, D, D, 0);
    for (int i = 0; i < T; i++)
        for (int c = 0; c < D; c++)
            Y[i * D + c] += bias[3 * D + c];

    /* Backward, from the output down. */
    double gWq[D * D] = {0}, gWk[D * D] = {0}, gWv[D * D] = {0}, *gWo = g + 3 * D * D;
    double *gb = g + 4 * D * D;
    double t1[D * T], t2[D * D], dC[T * D], dQ[T * D] = {0}, dK[T * D] = {0}, dV[T * D] = {0};
    transpose(t1, C, T, D);
    mm(gWo, t1, dY, D, T, D, 1);
    for (int i = 0; i < T; i++)
        for (int c = 0; c < D; c++)
            gb[3 * D + c] += dY[i * D + c];
    transpose(t2, Wo, D, D);
    mm(dC, dY, t2, T, D, D, 0);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            double dP[T], dot = 0;
            for (int j = 0; j < T; j++) {
                dP[j] = 0;
                for (int c = 0; c < DK; c++) {
                    dP[j] += dC[i * D + h * DK + c] * V[j * D + h * DK + c];
                    dV[j * D + h * DK + c] += P[h][i][j] * dC[i * D + h * DK + c];
                }
                dot += P[h][i][j] * dP[j];
            }
            for (int j = 0; j < T; j++) {
                double dS = P[h][i][j] * (dP[j] - dot) * scale;
                for (int c = 0; c < DK; c++) {
                    dQ[i * D + h * DK + c] += dS * K[j * D + h * DK + c];
                    dK[j * D + h * DK + c] += dS * Q[i * D + h * DK + c];
                }
            }
        }
    const double *dQKV[3] = {dQ, dK, dV}, *Wqkv[3] = {Wq, Wk, Wv};
    double *gW[3] = {gWq, gWk, gWv};
    transpose(t1, X, T, D);
    for (int w = 0; w < 3; w++) {
        mm(gW[w], t1, dQKV[w], D, T, D, 1);
        for (int i = 0; i < T; i++)
            for (int c = 0; c < D; c++)
                gb[w * D + c] += dQKV[w][i * D + c];
        transpose(t2, Wqkv[w], D, D);
        mm(dX, dQKV[w], t2, T, D, D, 1);
        for (int i = 0; i < D; i++) /* back into the joint W_QKV's column block w */
            for (int c = 0; c < D; c++)
                g[i * 3 * D + w * D + c] += gW[w][i * D + c];
    }
}

static void check_attention(void)
{
    vit_mha m = {.batch = B, .n_q = T, .n_k = T, .d_model = D, .heads = H, .has_bias = 1};
    m.mask.causal = 1;
    size_t np = vit_mha_param_count(&m);
    if (np != 4 * D * D + 4 * D) {
        printf("FAIL vit_mha_param_count: %zu, expected %d\n", np, 4 * D * D + 4 * D);
        failures++;
        return;
    }
    vit_real *w = malloc(np * sizeof *w), *dw = calloc(np, sizeof *dw);
    vit_real *cache = malloc(vit_mha_cache_size(&m) * sizeof *cache);
    double *wd = malloc(np * sizeof *wd), *dwd = calloc(np, sizeof *dwd);
    vit_real x[B * T * D], y[B * T * D], dy[B * T * D], dx[B * T * D] = {0};
    double xd[B * T * D], yd[B * T * D], dyd[B * T * D], dxd[B * T * D] = {0};
    if (!w || !dw || !cache || !wd || !dwd) {
        printf("FAIL out of memory\n");
        failures++;
        goto out;
    }
    fill(w, wd, np);
    fill(x, xd, B * T * D);
    fill(dy, dyd, B * T * D);
    if (vit_mha_forward(&m, w, y, x, x, cache) != VIT_OK ||
        vit_mha_backward(&m, w, dw, dx, dx, NULL, dy, x, x, cache, NULL) != VIT_OK) {
        printf("FAIL attention: %s\n", vit_last_error());
        failures++;
        goto out;
    }
    for (int b = 0; b < B; b++) /* items are independent; parameter grads add up */
        mha_reference(wd, dwd, xd + b * T * D, dyd + b * T * D, yd + b * T * D,
                      dxd + b * T * D);
    expect_close("attention forward y", y, yd, B * T * D);
    expect_close("attention backward dx", dx, dxd, B * T * D);
    expect_close("attention backward dparams", dw, dwd, np);

    /* The maps: rows sum to 1 and nothing above the diagonal. */
    const vit_real *probs = vit_mha_probs(&m, cache);
    double worst = 0;
    for (int r = 0; r < B * H * T; r++) {
        int i = r % T;
        double sum = 0;
        for (int j = 0; j < T; j++) {
            sum += probs[r * T + j];
            if (j > i)
                worst += my_abs(probs[r * T + j]);
        }
        worst += my_abs(sum - 1);
    }
    printf("%-4s %-30s off %.2e\n", worst < 1e-5 ? "ok" : "FAIL", "causal maps", worst);
    failures += !(worst < 1e-5);

    /* The error convention: a bad shape is refused with a message. */
    vit_mha bad = m;
    bad.heads = 3;
    if (vit_mha_forward(&bad, w, y, x, x, cache) != VIT_EINVAL || !*vit_last_error()) {
        printf("FAIL heads = 3 was not refused with VIT_EINVAL\n");
        failures++;
    } else {
        printf("ok   refused heads = 3: %s\n", vit_last_error());
    }
out:
    free(w);
    free(dw);
    free(cache);
    free(wd);
    free(dwd);
}

int main(void)
{
    printf("libvit %s, vit_real %s (%zu bytes)\n", vit_version(), VIT_REAL_NAME,
           vit_real_size());
    if (vit_real_size() != sizeof(vit_real)) {
        printf("FAIL compiled with a different vit_real than the library\n");
        return 1;
    }
    check_linear();
    check_attention();
    if (failures) {
        printf("FAILED: %d checks\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
