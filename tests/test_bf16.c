/* bfloat16 (vit/bf16.h): conversions exact on every bf16 value and
 * correctly rounded at ties, NaN, infinities and subnormals as documented,
 * the vectorised conversion equal to the scalar one bit for bit; the CPU
 * detection against /proc/cpuinfo; GEMMs with bf16 inputs against a float64
 * reference within a bound derived from bf16's 8-bit significand, on both
 * paths, for the shapes of issue 24's table and odd ones, and the two paths
 * against each other.
 *
 * Built twice: in float32 (everything) and in float64 (test_bf16_f64:
 * conversions as in float32, every GEMM entry point VIT_EINVAL). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vit/vit.h"

static vit_rng rng;

/* Check records every passing assertion (a write to its pipe: 7 million
 * system calls for these loops); these call it only on a failure. */
#define REQUIRE_MSG(c, ...) do { if (!(c)) ck_assert_msg(c, __VA_ARGS__); } while (0)
#define REQUIRE_UINT_EQ(a, b) do { if ((a) != (b)) ck_assert_uint_eq(a, b); } while (0)
#define REQUIRE_FLOAT_EQ(a, b) do { if ((a) != (b)) ck_assert_float_eq(a, b); } while (0)

static float bits_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static int bf16_is_nan(vit_bf16 h)
{
    return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0;
}

/* ---- conversions ----------------------------------------------------------- */

/* Every bf16 value converts to float32 and back to itself, one at a time
 * and in bulk; NaNs come back quiet (bit 6 set) with sign and payload. */
START_TEST(every_bf16_round_trips)
{
    enum { N = 65536 };
    vit_bf16 *h = malloc(N * sizeof *h), *back = malloc(N * sizeof *back);
    float *f = malloc(N * sizeof *f);
    ck_assert(h && back && f);
    for (uint32_t i = 0; i < N; i++)
        h[i] = (vit_bf16)i;
    ck_assert_int_eq(vit_bf16_to_floats(f, h, N), VIT_OK);
    ck_assert_int_eq(vit_bf16_from_floats(back, f, N), VIT_OK);
    for (uint32_t i = 0; i < N; i++) {
        REQUIRE_UINT_EQ(float_bits(f[i]), i << 16);
        REQUIRE_UINT_EQ(float_bits(vit_bf16_to_float(h[i])), i << 16);
        vit_bf16 want = bf16_is_nan(h[i]) ? (vit_bf16)(h[i] | 0x40) : h[i];
        REQUIRE_UINT_EQ(back[i], want);
        REQUIRE_UINT_EQ(vit_bf16_from_float(f[i]), want);
    }
    free(h); free(back); free(f);
}
END_TEST

/* Values exactly halfway between two neighbours go to the even one, up or
 * down, for either sign; a hair above or below goes to the nearer one. */
START_TEST(ties_to_even)
{
    /* 1 + 2^-8: between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): down. */
    REQUIRE_UINT_EQ(vit_bf16_from_float(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3 2^-8: between 0x3f81 (odd) and 0x3f82: up. */
    REQUIRE_UINT_EQ(vit_bf16_from_float(1.0f + 0x3p-8f), 0x3f82);
    REQUIRE_UINT_EQ(vit_bf16_from_float(-1.0f - 0x1p-8f), 0xbf80);
    REQUIRE_UINT_EQ(vit_bf16_from_float(-1.0f - 0x3p-8f), 0xbf82);
    REQUIRE_UINT_EQ(vit_bf16_from_float(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
    REQUIRE_UINT_EQ(vit_bf16_from_float(1.0f + 0x3p-8f - 0x1p-23f), 0x3f81);
    /* Every finite positive and negative bf16 below the largest: its tie
     * with the next, and the floats on either side of the tie. */
    int up = 0, down = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7fff) >= 0x7f7f) /* the largest finite, infinities, NaNs */
            continue;
        uint32_t tie = (h << 16) | 0x8000;
        vit_bf16 even = (h & 1) ? (vit_bf16)(h + 1) : (vit_bf16)h;
        vit_bf16 got = vit_bf16_from_float(bits_float(tie));
        REQUIRE_MSG(got == even, "tie 0x%08x gave 0x%04x, want 0x%04x", tie, got, even);
        up += even != h;
        down += even == h;
        REQUIRE_UINT_EQ(vit_bf16_from_float(bits_float(tie - 1)), h);
        REQUIRE_UINT_EQ(vit_bf16_from_float(bits_float(tie + 1)), h + 1);
    }
    ck_assert_int_gt(up, 1000);
    ck_assert_int_gt(down, 1000);
}
END_TEST

/* Infinities, NaNs, overflow, signed zeros and subnormals, scalar and bulk. */
START_TEST(special_values)
{
    static const struct { uint32_t in; uint16_t out; } cases[] = {
        {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80},   /* +-inf */
        {0x7fc00000u, 0x7fc0}, {0xffc00000u, 0xffc0},   /* quiet NaNs */
        {0x7f800001u, 0x7fc0}, {0xff800001u, 0xffc0},   /* payload in the low half only */
        {0x7fa00000u, 0x7fe0},                          /* signalling: quieted, payload kept */
        {0x7f7fffffu, 0x7f80},                          /* FLT_MAX rounds to infinity */
        {0x7f7f8000u, 0x7f80},                          /* tie with odd 0x7f7f: up, to inf */
        {0x7f7f7fffu, 0x7f7f}, {0xff7f7fffu, 0xff7f},   /* the largest finite bf16 */
        {0x00000000u, 0x0000}, {0x80000000u, 0x8000},   /* signed zeros */
        {0x00000001u, 0x0000}, {0x80000001u, 0x8000},   /* tiny subnormals round to zero */
        {0x00008000u, 0x0000},                          /* tie with 0: even */
        {0x00018000u, 0x0002},                          /* tie between 1 and 2: even */
        {0x00010000u, 0x0001}, {0x80010000u, 0x8001},   /* subnormal bf16, exact */
        {0x00008001u, 0x0001},                          /* above the tie */
        {0x007fffffu, 0x0080},                          /* up into the smallest normal */
        {0x00800000u, 0x0080},                          /* the smallest normal */
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    float in[NC];
    vit_bf16 out[NC];
    for (int i = 0; i < NC; i++) {
        in[i] = bits_float(cases[i].in);
        REQUIRE_MSG(vit_bf16_from_float(in[i]) == cases[i].out, "0x%08x gave 0x%04x, want 0x%04x",
                      cases[i].in, vit_bf16_from_float(in[i]), cases[i].out);
    }
    /* In bulk at every position of a 32-wide block. */
    float block[64];
    vit_bf16 got[64];
    for (int i = 0; i < NC; i++)
        for (int pos = 0; pos < 64; pos++) {
            for (int j = 0; j < 64; j++)
                block[j] = 1.5f;
            block[pos] = in[i];
            ck_assert_int_eq(vit_bf16_from_floats(got, block, 64), VIT_OK);
            REQUIRE_UINT_EQ(got[pos], cases[i].out);
            REQUIRE_UINT_EQ(got[pos ^ 1], 0x3fc0);
        }
    ck_assert_int_eq(vit_bf16_from_floats(out, in, NC), VIT_OK);
    for (int i = 0; i < NC; i++)
        REQUIRE_UINT_EQ(out[i], cases[i].out);
    ck_assert(isinf(vit_bf16_to_float(0x7f80)) && vit_bf16_to_float(0x7f80) > 0);
    ck_assert(isnan(vit_bf16_to_float(0x7fc0)));
    REQUIRE_FLOAT_EQ(vit_bf16_to_float(0x0001), 0x1p-133f);
}
END_TEST

/* The bulk conversion (vectorised where the CPU has AVX-512 BF16) equals
 * the scalar one on random bit patterns (NaNs and subnormals included) and
 * on random normal values, at every length and offset around the vector
 * width. */
START_TEST(bulk_equals_scalar)
{
    enum { N = 1 << 20 };
    float *f = malloc((N + 64) * sizeof *f), *back = malloc((N + 64) * sizeof *back);
    vit_bf16 *h = malloc((N + 64) * sizeof *h);
    ck_assert(f && back && h);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < N + 64; i++) {
            uint32_t u = (uint32_t)vit_rng_next(&rng);
            if (round == 1) /* subnormals and tiny normals, both signs */
                u &= 0x80ffffffu;
            f[i] = round == 2 ? (float)vit_rng_normal(&rng) : bits_float(u);
        }
        ck_assert_int_eq(vit_bf16_from_floats(h, f, N), VIT_OK);
        for (size_t i = 0; i < N; i++)
            REQUIRE_MSG(h[i] == vit_bf16_from_float(f[i]), "0x%08x: bulk 0x%04x, scalar 0x%04x",
                          float_bits(f[i]), h[i], vit_bf16_from_float(f[i]));
        ck_assert_int_eq(vit_bf16_to_floats(back, h, N), VIT_OK);
        for (size_t i = 0; i < N; i++)
            REQUIRE_UINT_EQ(float_bits(back[i]), (uint32_t)h[i] << 16);
    }
    /* Lengths 0..80 at offsets 0..3: only dst[0, n) is written. */
    for (size_t off = 0; off < 4; off++)
        for (size_t n = 0; n <= 80; n++) {
            for (size_t i = 0; i < 90; i++)
                h[i] = 0xabcd;
            ck_assert_int_eq(vit_bf16_from_floats(h + off, f + 7, n), VIT_OK);
            for (size_t i = 0; i < 90; i++) {
                int inside = i >= off && i < off + n;
                REQUIRE_UINT_EQ(h[i], inside ? vit_bf16_from_float(f[7 + i - off]) : 0xabcd);
            }
            for (size_t i = 0; i < 90; i++)
                back[i] = -7.0f;
            ck_assert_int_eq(vit_bf16_to_floats(back + off, h + off, n), VIT_OK);
            for (size_t i = 0; i < 90; i++) {
                int inside = i >= off && i < off + n;
                REQUIRE_UINT_EQ(float_bits(back[i]),
                                  inside ? (uint32_t)h[i] << 16 : float_bits(-7.0f));
            }
        }
    ck_assert_int_eq(vit_bf16_from_floats(NULL, f, 0), VIT_OK);
    ck_assert_int_eq(vit_bf16_from_floats(NULL, f, 1), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_from_floats(h, NULL, 1), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_to_floats(back, NULL, 1), VIT_EINVAL);
    free(f); free(back); free(h);
}
END_TEST

/* The features agree with the kernel's flags for this CPU. */
START_TEST(cpu_features)
{
    unsigned feat = vit_bf16_cpu_features();
    REQUIRE_UINT_EQ(feat & ~3u, 0);
    ck_assert_int_eq(vit_bf16_available(), feat != 0);
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (!fp)
        return;
    char line[8192];
    int avx512_bf16 = -1, amx_bf16 = -1;
    while (fgets(line, sizeof line, fp))
        if (strncmp(line, "flags", 5) == 0) {
            avx512_bf16 = strstr(line, " avx512_bf16") != NULL;
            amx_bf16 = strstr(line, " amx_bf16") != NULL;
            break;
        }
    fclose(fp);
    if (avx512_bf16 < 0)
        return; /* not x86 */
    /* valgrind's CPUID hides AVX-512 from the program (and the library then
     * takes its portable path), so only the kernel's flags differ there. */
    if (getenv("VIT_UNDER_VALGRIND"))
        return;
    ck_assert_int_eq((feat & VIT_BF16_CPU_AVX512) != 0, avx512_bf16);
    ck_assert_int_eq((feat & VIT_BF16_CPU_AMX) != 0, amx_bf16);
}
END_TEST

#ifndef VIT_DOUBLE
/* ---- GEMMs ----------------------------------------------------------------- */

/* The error bound.  Let u = 2^-8, the unit roundoff of bf16 (8
 * significant bits, round to nearest: half a unit of the 8th bit, which is
 * 2^-7 of a value in [1, 2)), and e = 2^-24 that of float32 (24 bits).  A
 * bound with 2^-9 (half of u) fails: 2 x 1000 x 3 below exceeds it.
 * Each input becomes a(1 + da), b(1 + db) with |da|, |db| <= u, so each
 * product is off by at most (2u + u^2)|a b|.  The K products of bf16 values
 * are exact in float32 and summed with K roundings in some order, plus up
 * to 3 for alpha, beta and their sum: the sum is off by at most
 * g(K + 3) sum |a^ b^|, with g(n) = n e / (1 - n e) (Higham's gamma, any
 * order of summation, fused or not) and |a^ b^| <= (1 + u)^2 |a b|.  So
 * against the exact product of the float32 inputs,
 *   |C - ref| <= |alpha| (2u + u^2 + g(K + 3) (1 + u)^2) sum |a||b|
 *                + g(3) |beta c0|,
 * and against the exact product of the bf16-rounded inputs a^, b^ only the
 * float32 part is left:
 *   |C - ref^| <= g(K + 3) (|alpha| sum |a^||b^| + |beta c0|).
 * The second is the sharp one: a GEMM that did not round its inputs, or
 * rounded them another way, misses it by two orders of magnitude for
 * every shape here.  Inputs are normal values (no subnormal products, which
 * the bf16 instructions flush). */
static double gamma_n(double n)
{
    const double e = 0x1p-24;
    return n * e / (1 - n * e);
}

static float *randn(size_t n)
{
    float *p = malloc(n * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)vit_rng_normal(&rng);
    return p;
}

static float rounded(float x)
{
    return vit_bf16_to_float(vit_bf16_from_float(x));
}

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    float *A, *B, *C0; /* C0: C before the product */
} gemm_case;

/* op(A)(i, k) and op(B)(k, j) of the case. */
static float op_a(const gemm_case *g, int i, int k)
{
    return g->ta ? g->A[(size_t)k * g->lda + i] : g->A[(size_t)i * g->lda + k];
}

static float op_b(const gemm_case *g, int k, int j)
{
    return g->tb ? g->B[(size_t)j * g->ldb + k] : g->B[(size_t)k * g->ldb + j];
}

static void case_init(gemm_case *g, int ta, int tb, int M, int N, int K, float alpha, float beta)
{
    *g = (gemm_case){ta, tb, M, N, K, 0, 0, N + 3, alpha, beta, NULL, NULL, NULL};
    g->lda = (ta ? M : K) + 1;
    g->ldb = (tb ? K : N) + 2;
    g->A = randn((size_t)(ta ? K : M) * g->lda);
    g->B = randn((size_t)(tb ? N : K) * g->ldb);
    g->C0 = randn((size_t)M * g->ldc);
}

static void case_free(gemm_case *g)
{
    free(g->A); free(g->B); free(g->C0);
}

/* Runs the case on the path in force, through a packed operand (packed
 * 1) or vit_gemm_bf16; returns C (ldc g->ldc), whose padding columns must
 * be untouched. */
static float *run_case(const gemm_case *g, int packed)
{
    size_t nc = (size_t)g->M * g->ldc;
    float *C = malloc(nc * sizeof *C);
    ck_assert_ptr_nonnull(C);
    memcpy(C, g->C0, nc * sizeof *C);
    if (g->beta == 0) /* beta 0: C is not read */
        for (int i = 0; i < g->M; i++)
            for (int j = 0; j < g->N; j++)
                C[(size_t)i * g->ldc + j] = NAN;
    int rc;
    if (packed) {
        vit_bf16_packed *p;
        ck_assert_int_eq(vit_bf16_packed_new(&p), VIT_OK);
        ck_assert_int_eq(vit_bf16_pack_b(p, g->tb, g->K, g->N, g->B, g->ldb), VIT_OK);
        int K, N;
        ck_assert_int_eq(vit_bf16_packed_shape(p, &K, &N), vit_bf16_get_path());
        ck_assert_int_eq(K, g->K);
        ck_assert_int_eq(N, g->N);
        rc = vit_gemm_bf16_packed(g->ta, g->M, g->N, g->K, g->alpha, g->A, g->lda, p, g->beta, C,
                                  g->ldc);
        vit_bf16_packed_free(p);
    } else {
        rc = vit_gemm_bf16(g->ta, g->tb, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb,
                           g->beta, C, g->ldc);
    }
    REQUIRE_MSG(rc == VIT_OK, "%s", vit_last_error());
    for (int i = 0; i < g->M; i++)
        for (int j = g->N; j < g->ldc; j++)
            REQUIRE_UINT_EQ(float_bits(C[(size_t)i * g->ldc + j]),
                              float_bits(g->C0[(size_t)i * g->ldc + j]));
    return C;
}

/* op(A) [M, K] and op(B)^T [N, K] as doubles, as given (a, bt) and
 * rounded to bf16 (ar, btr): rows the reference loops read in order. */
typedef struct {
    double *a, *ar, *bt, *btr;
} op_copies;

static op_copies copies_of(const gemm_case *g)
{
    size_t na = (size_t)g->M * g->K, nb = (size_t)g->N * g->K;
    op_copies o = {malloc(na * sizeof(double)), malloc(na * sizeof(double)),
                   malloc(nb * sizeof(double)), malloc(nb * sizeof(double))};
    ck_assert(o.a && o.ar && o.bt && o.btr);
    for (int i = 0; i < g->M; i++)
        for (int k = 0; k < g->K; k++) {
            o.a[(size_t)i * g->K + k] = op_a(g, i, k);
            o.ar[(size_t)i * g->K + k] = rounded(op_a(g, i, k));
        }
    for (int j = 0; j < g->N; j++)
        for (int k = 0; k < g->K; k++) {
            o.bt[(size_t)j * g->K + k] = op_b(g, k, j);
            o.btr[(size_t)j * g->K + k] = rounded(op_b(g, k, j));
        }
    return o;
}

static void copies_free(op_copies *o)
{
    free(o->a); free(o->ar); free(o->bt); free(o->btr);
}

/* C within both bounds of the comment above; returns the worst ratio of
 * the error to the sharp bound. */
static double check_bounds(const gemm_case *g, const float *C)
{
    const double u = 0x1p-8, gk = gamma_n(g->K + 3.0);
    double worst = 0;
    op_copies o = copies_of(g);
    for (int i = 0; i < g->M; i++) {
        const double *a = o.a + (size_t)i * g->K, *ar = o.ar + (size_t)i * g->K;
        for (int j = 0; j < g->N; j++) {
            const double *b = o.bt + (size_t)j * g->K, *br = o.btr + (size_t)j * g->K;
            double ref = 0, ref_r = 0, s = 0, s_r = 0;
            for (int k = 0; k < g->K; k++) {
                ref += a[k] * b[k];
                s += fabs(a[k] * b[k]);
                ref_r += ar[k] * br[k];
                s_r += fabs(ar[k] * br[k]);
            }
            double c0 = g->beta == 0 ? 0 : g->beta * (double)g->C0[(size_t)i * g->ldc + j];
            double al = fabs((double)g->alpha);
            ref = g->alpha * ref + c0;
            ref_r = g->alpha * ref_r + c0;
            double bound = al * (2 * u + u * u + gk * (1 + u) * (1 + u)) * s
                           + gamma_n(3) * fabs(c0);
            double bound_r = gk * (al * s_r + fabs(c0));
            double c = C[(size_t)i * g->ldc + j];
            REQUIRE_MSG(fabs(c - ref) <= bound,
                          "%dx%dx%d ta %d tb %d: C[%d,%d] = %.9g, exact %.9g, bound %.3g",
                          g->M, g->N, g->K, g->ta, g->tb, i, j, c, ref, bound);
            REQUIRE_MSG(fabs(c - ref_r) <= bound_r,
                          "%dx%dx%d ta %d tb %d: C[%d,%d] = %.9g, exact on bf16 inputs %.9g,"
                          " bound %.3g", g->M, g->N, g->K, g->ta, g->tb, i, j, c, ref_r, bound_r);
            if (bound_r > 0 && fabs(c - ref_r) / bound_r > worst)
                worst = fabs(c - ref_r) / bound_r;
        }
    }
    copies_free(&o);
    return worst;
}

/* M, N, K: the table (m x n x k of libxsmm's column-major view is
 * N x M x K here), then odd sizes, and two that the XSMM path splits over
 * K (one with an odd K and a short last chunk). */
static const int shapes[][3] = {
    {544, 64, 64}, {544, 128, 64}, {520, 192, 192}, {520, 768, 192}, {520, 192, 768},
    {64, 64, 544},
    {1, 1, 1}, {3, 5, 7}, {17, 33, 15}, {31, 17, 65}, {100, 3, 129}, {2, 1000, 3},
    {33, 768, 1001}, {20, 600, 1200},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* The three products of a linear layer (forward, input gradient,
 * weight gradient), then general alpha and beta with both transposes. */
static const struct { int ta, tb; float alpha, beta; } variants[] = {
    {0, 0, 1, 0}, {0, 1, 1, 1}, {1, 0, 1, 1}, {1, 1, -0.75f, 0.5f}, {0, 0, 2, 0},
};
enum { NVARIANTS = sizeof variants / sizeof variants[0] };

static int big(const int *s)
{
    return (double)s[0] * s[1] * s[2] > 2e6;
}

/* How many calls of vit_gemm_shapes' bf16 products ran on path. */
static unsigned long long bf16_calls_on(vit_gemm_path path)
{
    vit_gemm_shape sh[64];
    size_t n = vit_gemm_shapes(sh, 64);
    unsigned long long calls = 0;
    for (size_t i = 0; i < n && i < 64; i++)
        if (sh[i].bf16 && sh[i].path == path)
            calls += sh[i].calls;
    return calls;
}

/* Every shape and variant within the bounds, on the path _i names (0:
 * libxsmm, 1: the fallback, 2: oneDNN, VIT_GEMM=dnnl; skipped where it
 * cannot run), through a packed operand and through vit_gemm_bf16, which
 * give the same bits. */
START_TEST(gemm_within_bound)
{
    vit_bf16_path path = _i == 1 ? VIT_BF16_FALLBACK : VIT_BF16_XSMM;
    if (_i == 2 && !vit_gemm_have_dnnl()) {
        printf("bf16 GEMM, dnnl path: not tested (vit_gemm_have_dnnl is 0 here)\n");
        return;
    }
    if (vit_bf16_set_path(path) != VIT_OK) {
        ck_assert_int_eq(path, VIT_BF16_XSMM);
        return;
    }
    ck_assert_int_eq(vit_gemm_set_path(_i == 2 ? VIT_GEMM_DNNL : VIT_GEMM_AUTO), VIT_OK);
    ck_assert_int_eq(vit_bf16_get_path(), path);
    double worst = 0;
    for (int s = 0; s < NSHAPES; s++)
        for (int v = 0; v < NVARIANTS; v++) {
            if (big(shapes[s]) && v >= 3) /* the general variants on small shapes */
                continue;
            gemm_case g;
            case_init(&g, variants[v].ta, variants[v].tb, shapes[s][0], shapes[s][1],
                      shapes[s][2], variants[v].alpha, variants[v].beta);
            float *C = run_case(&g, 1), *C2 = run_case(&g, 0);
            ck_assert_int_eq(memcmp(C, C2, (size_t)g.M * g.ldc * sizeof *C), 0);
            double w = check_bounds(&g, C);
            worst = w > worst ? w : worst;
            free(C); free(C2);
            case_free(&g);
        }
    printf("bf16 GEMM, %s path: largest error %.3f of the float32-summation bound\n",
           _i == 2 ? "dnnl" : vit_bf16_path_name(path), worst);
    /* every product ran where asked (none fell back to libxsmm) */
    if (_i == 2)
        ck_assert_uint_eq(bf16_calls_on(VIT_GEMM_XSMM), 0);
    if (path == VIT_BF16_XSMM)
        ck_assert_uint_gt(bf16_calls_on(_i == 2 ? VIT_GEMM_DNNL : VIT_GEMM_XSMM), 0);
    ck_assert_int_eq(vit_gemm_set_path(VIT_GEMM_AUTO), VIT_OK);
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_AUTO), VIT_OK);
}
END_TEST

/* The automatic policy sends a wide product with a large operand (N >=
 * 1024, 2 MB of op(B)) to oneDNN and the layer shapes of the benchmark
 * models to libxsmm, and oneDNN's result is within the bounds. */
START_TEST(auto_policy_per_shape)
{
    if (!vit_gemm_have_dnnl() || vit_bf16_set_path(VIT_BF16_XSMM) != VIT_OK) {
        printf("bf16 GEMM policy: not tested (no oneDNN or libxsmm bf16 path here)\n");
        return;
    }
    ck_assert_int_eq(vit_gemm_set_path(VIT_GEMM_AUTO), VIT_OK); /* also resets the counts */
    static const int cases[][3] = {{4, 1024, 1024}, {5, 192, 768}};
    for (int c = 0; c < 2; c++) {
        gemm_case g;
        case_init(&g, 0, 0, cases[c][0], cases[c][1], cases[c][2], 1, 0);
        float *C = run_case(&g, 1);
        check_bounds(&g, C);
        ck_assert_uint_eq(bf16_calls_on(VIT_GEMM_DNNL), 1);
        ck_assert_uint_eq(bf16_calls_on(VIT_GEMM_XSMM), (unsigned long long)c);
        free(C);
        case_free(&g);
    }
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_AUTO), VIT_OK);
}
END_TEST

/* The fallback path equals the XSMM path within the sum of their bounds
 * (each is within g(K + 3) (|alpha| sum |a^ b^| + |beta c0|) of the same
 * exact value). */
START_TEST(fallback_agrees_with_xsmm)
{
    if (vit_bf16_set_path(VIT_BF16_XSMM) != VIT_OK)
        return;
    for (int s = 0; s < NSHAPES; s++)
        for (int v = 0; v < 4; v++) {
            gemm_case g;
            case_init(&g, variants[v].ta, variants[v].tb, shapes[s][0], shapes[s][1],
                      shapes[s][2], variants[v].alpha, variants[v].beta);
            ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_XSMM), VIT_OK);
            float *fast = run_case(&g, 1);
            ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_FALLBACK), VIT_OK);
            float *slow = run_case(&g, 1);
            double gk = gamma_n(g.K + 3.0);
            op_copies o = copies_of(&g);
            for (int i = 0; i < g.M; i++)
                for (int j = 0; j < g.N; j++) {
                    double s_r = 0;
                    for (int k = 0; k < g.K; k++)
                        s_r += fabs(o.ar[(size_t)i * g.K + k] * o.btr[(size_t)j * g.K + k]);
                    double c0 = g.beta == 0 ? 0 : g.beta * (double)g.C0[(size_t)i * g.ldc + j];
                    double bound = 2 * gk * (fabs((double)g.alpha) * s_r + fabs(c0));
                    size_t at = (size_t)i * g.ldc + j;
                    REQUIRE_MSG(fabs((double)fast[at] - slow[at]) <= bound,
                                  "%dx%dx%d: xsmm %.9g, fallback %.9g, bound %.3g", g.M, g.N,
                                  g.K, fast[at], slow[at], bound);
                }
            copies_free(&o);
            free(fast); free(slow);
            case_free(&g);
        }
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_AUTO), VIT_OK);
}
END_TEST

/* A packed operand reused across products and repacked smaller and larger
 * gives what a fresh one gives; bf16 inputs exactly representable and a
 * short sum give the exact product. */
START_TEST(packed_reuse_and_exact)
{
    vit_bf16_packed *p;
    ck_assert_int_eq(vit_bf16_packed_new(&p), VIT_OK);
    int K0, N0;
    ck_assert_int_eq(vit_bf16_packed_shape(p, &K0, &N0), VIT_BF16_AUTO);
    ck_assert_int_eq(K0 + N0, 0);
    const int sizes[][3] = {{40, 70, 33}, {7, 9, 5}, {64, 300, 129}, {5, 3, 2}};
    for (int s = 0; s < 4; s++) {
        int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
        float *A = malloc((size_t)M * K * sizeof *A), *B = malloc((size_t)K * N * sizeof *B);
        float *C = malloc((size_t)M * N * sizeof *C);
        ck_assert(A && B && C);
        /* Small integers: exact in bf16, products and sums exact in float32. */
        for (size_t i = 0; i < (size_t)M * K; i++)
            A[i] = (float)((int)vit_rng_below(&rng, 17) - 8);
        for (size_t i = 0; i < (size_t)K * N; i++)
            B[i] = (float)((int)vit_rng_below(&rng, 9) - 4);
        ck_assert_int_eq(vit_bf16_pack_b(p, 0, K, N, B, N), VIT_OK);
        for (int rep = 0; rep < 2; rep++) {
            ck_assert_int_eq(vit_gemm_bf16_packed(0, M, N, K, 1, A, K, p, 0, C, N), VIT_OK);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float want = 0;
                    for (int k = 0; k < K; k++)
                        want += A[(size_t)i * K + k] * B[(size_t)k * N + j];
                    REQUIRE_FLOAT_EQ(C[(size_t)i * N + j], want);
                }
        }
        free(A); free(B); free(C);
    }
    vit_bf16_packed_free(p);
    vit_bf16_packed_free(NULL);
}
END_TEST

/* A finite normal float32 that tests the rounding: ties with the kept bit
 * even and odd, just above and below a tie, or any bits, at exponents
 * from 2^-20 to 2^20 (no subnormals: vdpbf16ps reads them as zero). */
static float rounding_case(void)
{
    uint32_t sign = (uint32_t)vit_rng_below(&rng, 2) << 31;
    uint32_t e = (uint32_t)(127 - 20 + vit_rng_below(&rng, 41)) << 23;
    uint32_t m = (uint32_t)vit_rng_below(&rng, 128) << 16;
    static const uint32_t low[] = {0x8000, 0x8001, 0x7fff, 0x0000};
    uint32_t r = (uint32_t)vit_rng_below(&rng, 5);
    uint32_t lo = r < 4 ? low[r] : (uint32_t)vit_rng_below(&rng, 0x10000);
    return bits_float(sign | e | m | lo);
}

/* Products with an identity factor return the other operand's values as
 * converted, so they show its conversion bit for bit: each value rounded
 * to nearest, ties to even, in its place, through every way an operand is
 * converted (op(A) as given and transposed, op(B) packed from rows and
 * from columns), on both paths; K odd and even, N off the vector width.
 * (op(A) in bf16 is the library's own: tests/test_transpose.c checks its
 * transposed copy bit for bit.) */
START_TEST(operands_round_exactly)
{
    vit_bf16_path path = _i == 0 ? VIT_BF16_XSMM : VIT_BF16_FALLBACK;
    if (vit_bf16_set_path(path) != VIT_OK)
        return;
    const int sizes[][2] = {{37, 50}, {64, 64}, {33, 17}, {130, 96}}; /* {rows, K} */
    for (int s = 0; s < 4; s++) {
        int R = sizes[s][0], K = sizes[s][1];
        size_t n = (size_t)R * K;
        float *X = malloc(n * sizeof *X), *Xt = malloc(n * sizeof *Xt);
        float *I = calloc((size_t)K * K, sizeof *I), *C = malloc(n * sizeof *C);
        float *Ct = malloc(n * sizeof *Ct);
        vit_bf16 *X16 = malloc(n * sizeof *X16);
        ck_assert(X && Xt && I && C && Ct && X16);
        for (int k = 0; k < K; k++)
            I[(size_t)k * K + k] = 1;
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) {
                float x = rounding_case();
                X[(size_t)r * K + k] = Xt[(size_t)k * R + r] = x;
                X16[(size_t)r * K + k] = vit_bf16_from_float(x);
            }
        for (int way = 0; way < 4; way++) {
            int rc;
            float *out = way < 2 ? C : Ct; /* Ct: [K, R], the rounded X^T */
            switch (way) {
            case 0: rc = vit_gemm_bf16(0, 0, R, K, K, 1, X, K, I, K, 0, C, K); break;
            case 1: rc = vit_gemm_bf16(1, 0, R, K, K, 1, Xt, R, I, K, 0, C, K); break;
            case 2: rc = vit_gemm_bf16(0, 0, K, R, K, 1, I, K, Xt, R, 0, Ct, R); break;
            default: rc = vit_gemm_bf16(0, 1, K, R, K, 1, I, K, X, K, 0, Ct, R); break;
            }
            REQUIRE_MSG(rc == VIT_OK, "%s", vit_last_error());
            for (int r = 0; r < R; r++)
                for (int k = 0; k < K; k++) {
                    vit_bf16 want = X16[(size_t)r * K + k];
                    float got = way < 2 ? out[(size_t)r * K + k] : out[(size_t)k * R + r];
                    REQUIRE_MSG(float_bits(got) == (uint32_t)want << 16,
                                "%s path, way %d, %d x %d: [%d, %d] of %.9g is %.9g, not %.9g",
                                vit_bf16_path_name(path), way, R, K, r, k,
                                (double)X[(size_t)r * K + k], (double)got,
                                (double)vit_bf16_to_float(want));
                }
        }
        free(X); free(Xt); free(I); free(C); free(Ct); free(X16);
    }
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_AUTO), VIT_OK);
}
END_TEST

/* Bad arguments are refused with a message and C untouched. */
START_TEST(gemm_errors)
{
    float A[12] = {1}, B[12] = {2}, C[12];
    for (int i = 0; i < 12; i++)
        C[i] = 5;
    vit_bf16_packed *p, *empty;
    ck_assert_int_eq(vit_bf16_packed_new(NULL), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_packed_new(&p), VIT_OK);
    ck_assert_int_eq(vit_bf16_packed_new(&empty), VIT_OK);
    ck_assert_int_eq(vit_bf16_pack_b(NULL, 0, 3, 4, B, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_pack_b(p, 0, 3, 4, NULL, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_pack_b(p, 0, 0, 4, B, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_pack_b(p, 0, 3, 4, B, 3), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "ldb"));
    ck_assert_int_eq(vit_bf16_pack_b(p, 1, 3, 4, B, 2), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_pack_b(p, 2, 3, 4, B, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16_packed(0, 3, 4, 3, 1, A, 3, p, 0, C, 4), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "empty"));
    ck_assert_int_eq(vit_bf16_pack_b(p, 0, 3, 4, B, 4), VIT_OK);
    ck_assert_int_eq(vit_gemm_bf16_packed(0, 3, 4, 2, 1, A, 3, p, 0, C, 4), VIT_EINVAL);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "3 x 4"));
    ck_assert_int_eq(vit_gemm_bf16_packed(0, 3, 4, 3, 1, A, 2, p, 0, C, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16_packed(1, 3, 4, 3, 1, A, 2, p, 0, C, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16_packed(0, 3, 4, 3, 1, A, 3, p, 0, C, 3), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16_packed(2, 3, 4, 3, 1, A, 3, p, 0, C, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16_packed(0, 0, 4, 3, 1, A, 3, p, 0, C, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16_packed(0, 3, 4, 3, 1, NULL, 3, p, 0, C, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16_packed(0, 3, 4, 3, 1, A, 3, NULL, 0, C, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16_packed(0, 3, 4, 3, 1, A, 3, p, 0, NULL, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16_packed(0, 3, 4, 3, 1, A, 3, empty, 0, C, 4), VIT_EINVAL);
    ck_assert_int_eq(vit_gemm_bf16(0, 0, 3, 4, 3, 1, A, 3, B, 3, 0, C, 4), VIT_EINVAL);
    for (int i = 0; i < 12; i++)
        REQUIRE_FLOAT_EQ(C[i], 5);
    /* A failed pack leaves p empty. */
    ck_assert_int_eq(vit_bf16_pack_b(p, 0, 3, 4, B, 1), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_packed_shape(p, NULL, NULL), VIT_BF16_AUTO);
    vit_bf16_packed_free(p);
    vit_bf16_packed_free(empty);
}
END_TEST

/* The path setting: XSMM exactly where this build and CPU have it. */
START_TEST(path_setting)
{
    int can = vit_gemm_have_xsmm() && (vit_bf16_cpu_features() & VIT_BF16_CPU_AVX512);
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_AUTO), VIT_OK);
    ck_assert_int_eq(vit_bf16_get_path(), can ? VIT_BF16_XSMM : VIT_BF16_FALLBACK);
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_XSMM), can ? VIT_OK : VIT_EINVAL);
    if (!can)
        ck_assert_ptr_nonnull(strstr(vit_last_error(), "xsmm path cannot run"));
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_FALLBACK), VIT_OK);
    ck_assert_int_eq(vit_bf16_get_path(), VIT_BF16_FALLBACK);
    ck_assert_int_eq(vit_bf16_set_path((vit_bf16_path)7), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_get_path(), VIT_BF16_FALLBACK);
    ck_assert_str_eq(vit_bf16_path_name(VIT_BF16_FALLBACK), "fallback");
    ck_assert_str_eq(vit_bf16_path_name(VIT_BF16_XSMM), "xsmm");
    ck_assert_str_eq(vit_bf16_path_name(VIT_BF16_AUTO), "auto");
    ck_assert_str_eq(vit_bf16_path_name((vit_bf16_path)7), "?");
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_AUTO), VIT_OK);
}
END_TEST
#else
/* The float64 library has the conversions but no bf16 GEMM. */
START_TEST(f64_has_no_gemm)
{
    float A[4] = {1, 2, 3, 4}, C[4];
    vit_bf16_packed *p = (vit_bf16_packed *)1;
    ck_assert_int_eq(vit_bf16_packed_new(&p), VIT_EINVAL);
    ck_assert_ptr_null(p);
    ck_assert_ptr_nonnull(strstr(vit_last_error(), "float32 library only"));
    ck_assert_int_eq(vit_gemm_bf16(0, 0, 2, 2, 2, 1, A, 2, A, 2, 0, C, 2), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_set_path(VIT_BF16_XSMM), VIT_EINVAL);
    ck_assert_int_eq(vit_bf16_get_path(), VIT_BF16_FALLBACK);
}
END_TEST
#endif

int main(void)
{
    vit_rng_seed(&rng, 24);
    vit_set_threads(2);
    Suite *s = suite_create("bf16");
    TCase *c = tcase_create("conversions");
    tcase_set_timeout(c, 60);
    tcase_add_test(c, every_bf16_round_trips);
    tcase_add_test(c, ties_to_even);
    tcase_add_test(c, special_values);
    tcase_add_test(c, bulk_equals_scalar);
    tcase_add_test(c, cpu_features);
    suite_add_tcase(s, c);
    TCase *g = tcase_create("gemm");
    tcase_set_timeout(g, 100);
#ifndef VIT_DOUBLE
    tcase_add_test(g, path_setting);
    tcase_add_test(g, gemm_errors);
    tcase_add_test(g, packed_reuse_and_exact);
    tcase_add_loop_test(g, gemm_within_bound, 0, 3);
    tcase_add_test(g, auto_policy_per_shape);
    tcase_add_test(g, fallback_agrees_with_xsmm);
    tcase_add_loop_test(g, operands_round_exactly, 0, 2);
#else
    tcase_add_test(g, f64_has_no_gemm);
#endif
    suite_add_tcase(s, g);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
