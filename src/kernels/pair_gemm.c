/*
 * Direct products for one small attention pair.  See pair_gemm.h.
 *
 * Two kernels, each written once as a macro over a handful of vector
 * operations and instantiated per head width D (16, 32) and instruction
 * set (AVX-512, AVX2; both with FMA):
 *   rows  C[i, 0:D] = beta C[i, 0:D] + sum_k a(i, k) B[k, 0:D]
 *         with a(i, k) = A[i, k] or A[k, i]: the output rows of a block
 *         held in registers over the whole reduction, one load of B's row
 *         shared by the block, one broadcast and fused multiply-add per
 *         vector;
 *   nt    C[i, j] = alpha sum_c A[i, c] B[j, c]: B copied transposed to the
 *         stack (D rows of 32 keys, zero past N), then the rows kernel's
 *         scheme over that copy, all 32 keys of a block of rows at once.
 * Intrinsics rather than loops left to the vectoriser: gcc 12 turned the
 * loop form into scalar code or stack round trips in two of four tries.
 */
#include "pair_gemm.h"

#include "cpu_internal.h"
#include "transpose.h"
#include "vit/gemm.h"

/* The float64 build (gradient checks) keeps its GEMMs. */
#if !defined(VIT_DOUBLE) && defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

/* The vector operations a kernel is written in, for one instruction set:
 * V_T the type, V_W its floats, and load, store (STORE_N: the first n of
 * them only, 0 < n < V_W), broadcast, multiply and fused multiply-add. */
#define V512_T __m512
#define V512_W 16
#define V512_REGS 32
#define V512_LOAD(p) _mm512_loadu_ps(p)
#define V512_STORE(p, v) _mm512_storeu_ps((p), (v))
#define V512_STORE_N(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1), (v))
#define V512_SET1(x) _mm512_set1_ps(x)
#define V512_MUL(a, b) _mm512_mul_ps((a), (b))
#define V512_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V512_ATTR __attribute__((target("avx512f,fma")))
/* bt[t][j] = B[j, t] for j < N, 0 for N <= j < KB * 16: 16x16 tiles of the
 * transposed copy, zero-padded to whole vectors of keys. */
#define V512_TRANSPOSE(bt, B, ldb, N, D, KB)                                                  \
    vit_transpose_scaled((N), (KB) * V512_W, (D), 1.0f, (B), (ldb), &(bt)[0][0],              \
                         VIT_PAIR_MAX_KEYS)

#define V256_T __m256
#define V256_W 8
#define V256_REGS 16
#define V256_LOAD(p) _mm256_loadu_ps(p)
#define V256_STORE(p, v) _mm256_storeu_ps((p), (v))
#define V256_STORE_N(p, v, n) vit_store_first8((p), (v), (n))
#define V256_SET1(x) _mm256_set1_ps(x)
#define V256_MUL(a, b) _mm256_mul_ps((a), (b))
#define V256_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V256_ATTR __attribute__((target("avx2,fma")))

/* a(i, k): op(A) = A (TA 0) or A^T (TA 1). */
#define OP_A(TA, i, k) ((TA) ? A[(size_t)(k) * lda + (i)] : A[(size_t)(i) * lda + (k)])

/* Rows i..i+R-1 of C = beta C + op(A) B: R * NV accumulators held in
 * registers over the whole reduction, one load of each vector of B's row k
 * shared by the R rows (R independent chains of multiply-adds). */
#define ROWS_BLOCK(V, TA, R, NV)                                                              \
    do {                                                                                       \
        V##_T acc[R][NV];                                                                      \
        if (beta == 0) {                                                                       \
            for (int r = 0; r < R; r++)                                                        \
                for (int v = 0; v < NV; v++)                                                   \
                    acc[r][v] = V##_SET1(0.0f);                                                \
        } else {                                                                               \
            for (int r = 0; r < R; r++)                                                        \
                for (int v = 0; v < NV; v++)                                                   \
                    acc[r][v] = V##_MUL(V##_SET1(beta),                                        \
                                        V##_LOAD(C + (size_t)(i + r) * ldc + v * V##_W));      \
        }                                                                                      \
        for (int k = 0; k < K; k++) {                                                          \
            V##_T b[NV];                                                                       \
            for (int v = 0; v < NV; v++)                                                       \
                b[v] = V##_LOAD(B + (size_t)k * ldb + v * V##_W);                              \
            for (int r = 0; r < R; r++) {                                                      \
                V##_T a = V##_SET1(OP_A(TA, i + r, k));                                        \
                for (int v = 0; v < NV; v++)                                                   \
                    acc[r][v] = V##_FMA(a, b[v], acc[r][v]);                                   \
            }                                                                                  \
        }                                                                                      \
        for (int r = 0; r < R; r++)                                                            \
            for (int v = 0; v < NV; v++)                                                       \
                V##_STORE(C + (size_t)(i + r) * ldc + v * V##_W, acc[r][v]);                   \
    } while (0)

/* Rows per block: at least 8 chains of multiply-adds (two FMA units of
 * latency 4 kept busy); with AVX-512's 32 registers 8 rows at either width
 * (16 accumulators at width 32), with AVX2's 16 at most 12 accumulators.
 * At 50 keys and width 32 the 8-row blocks took a product from 0.77 to
 * 0.71 us, level with libxsmm (AMD EPYC, one core).  A block's
 * accumulators start from zero or beta C in two separate loops: as one
 * loop with a select, gcc kept them in a stack array it cleared with
 * `rep stos`, 12% of the kernel's time. */
#define ROWS_PER_BLOCK(V, NV) (V##_REGS == 32 ? 8 : (NV) <= 2 ? 4 : 3)

#define PAIR_ROWS(NAME, V, TA, D)                                                             \
    V##_ATTR static void NAME(int M, int K, const float *A, int lda, const float *B, int ldb,  \
                              float beta, float *C, int ldc)                                   \
    {                                                                                          \
        enum { NV = D / V##_W, R = ROWS_PER_BLOCK(V, D / V##_W) };                                \
        int i = 0;                                                                             \
        for (; i + R <= M; i += R)                                                             \
            ROWS_BLOCK(V, TA, R, NV);                                                          \
        for (; i < M; i++)                                                                     \
            ROWS_BLOCK(V, TA, 1, NV);                                                          \
    }

/* Rows i..i+R-1 of C = alpha A B^T from the transposed copy bt, all
 * VIT_PAIR_MAX_KEYS keys at once (KB vectors; keys past N are zero in bt
 * and not stored): R * KB independent chains of multiply-adds. */
#define NT_BLOCK(V, R, KB)                                                                    \
    do {                                                                                       \
        V##_T acc[R][KB];                                                                      \
        for (int r = 0; r < R; r++)                                                            \
            for (int u = 0; u < KB; u++)                                                       \
                acc[r][u] = V##_SET1(0.0f);                                                    \
        for (int t = 0; t < D; t++) {                                                          \
            V##_T b[KB];                                                                       \
            for (int u = 0; u < KB; u++)                                                       \
                b[u] = V##_LOAD(&bt[t][u * V##_W]);                                            \
            for (int r = 0; r < R; r++) {                                                      \
                V##_T a = V##_SET1(A[(size_t)(i + r) * lda + t]);                              \
                for (int u = 0; u < KB; u++)                                                   \
                    acc[r][u] = V##_FMA(a, b[u], acc[r][u]);                                   \
            }                                                                                  \
        }                                                                                      \
        for (int r = 0; r < R; r++) {                                                          \
            float *c = C + (size_t)(i + r) * ldc;                                              \
            for (int u = 0; u < KB && u * V##_W < N; u++) {                                    \
                V##_T y = V##_MUL(V##_SET1(alpha), acc[r][u]);                                 \
                if (N - u * V##_W >= V##_W)                                                    \
                    V##_STORE(c + u * V##_W, y);                                               \
                else                                                                           \
                    V##_STORE_N(c + u * V##_W, y, N - u * V##_W);                              \
            }                                                                                  \
        }                                                                                      \
    } while (0)

/* B [N, D] is copied transposed to bt [D, VIT_PAIR_MAX_KEYS], zero past N
 * (V_TRANSPOSE: 16x16 register tiles with AVX-512, where gathers were 1.6x
 * slower on an AMD EPYC; AVX2 has its own, NT256 below); rows in blocks of R (8
 * accumulators with KB). */
#define PAIR_NT(NAME, V, DD)                                                                  \
    V##_ATTR static void NAME(int M, int N, float alpha, const float *A, int lda,              \
                              const float *B, int ldb, float *C, int ldc)                      \
    {                                                                                          \
        enum { D = DD, KB = VIT_PAIR_MAX_KEYS / V##_W, R = 8 / KB > 0 ? 8 / KB : 1 };          \
        float bt[D][VIT_PAIR_MAX_KEYS] __attribute__((aligned(64)));                           \
        V##_TRANSPOSE(bt, B, ldb, N, D, KB);                                                   \
        int i = 0;                                                                             \
        for (; i + R <= M; i += R)                                                             \
            NT_BLOCK(V, R, KB);                                                                \
        for (; i < M; i++)                                                                     \
            NT_BLOCK(V, 1, KB);                                                                \
    }

/* AVX2 (Zen 3): only as many vectors of keys as N needs (KB = 1..4; 17
 * keys are 3 vectors, not 4), rows in blocks of R with R * KB at most 12
 * accumulators and the leftover rows one block of their own, and the
 * transposed copy by 8 x 8 register tiles (vit_transpose_scaled), not by
 * gathers: on a Zen 3 core the 17-key scores of width 16 took 0.66 us this
 * way against 0.58 us through libxsmm and 0.27 us now.  Over 32 keys (up
 * to VIT_PAIR_MAX_KEYS_AVX2) the keys go in two passes, the first 32 and
 * the rest: one pass of 5-8 vectors held one row at a time (R = 1), 7-8
 * loads of the copy for 7-8 multiply-adds, and was load-bound.  Every
 * score is the same chain of multiply-adds over t in order, then the one
 * multiplication by alpha, in either form. */
#define NT256_R(KB) ((KB) == 1 ? 8 : 12 / (KB))
#define NT256_PASS 4 /* vectors of keys in one pass */

#define NT256_TAIL(KB)                                                                        \
    switch (M - i) {                                                                           \
    case 7: if (NT256_R(KB) > 7) NT_BLOCK(V256, 7, KB); break;                                 \
    case 6: if (NT256_R(KB) > 6) NT_BLOCK(V256, 6, KB); break;                                 \
    case 5: if (NT256_R(KB) > 5) NT_BLOCK(V256, 5, KB); break;                                 \
    case 4: if (NT256_R(KB) > 4) NT_BLOCK(V256, 4, KB); break;                                 \
    case 3: if (NT256_R(KB) > 3) NT_BLOCK(V256, 3, KB); break;                                 \
    case 2: if (NT256_R(KB) > 2) NT_BLOCK(V256, 2, KB); break;                                 \
    case 1: NT_BLOCK(V256, 1, KB); break;                                                      \
    default: break;                                                                            \
    }

#define NT256_KEYS(NAME, DD, KBB)                                                             \
    V256_ATTR static void NAME(int M, int N, float alpha, const float *A, int lda,             \
                               const float (*bt)[VIT_PAIR_MAX_KEYS_AVX2], float *C, int ldc)       \
    {                                                                                          \
        enum { D = DD, KB = KBB, R = NT256_R(KBB) };                                           \
        int i = 0;                                                                             \
        for (; i + R <= M; i += R)                                                             \
            NT_BLOCK(V256, R, KB);                                                             \
        NT256_TAIL(KB)                                                                         \
    }

typedef void (*nt256_keys_fn)(int, int, float, const float *, int,
                              const float (*)[VIT_PAIR_MAX_KEYS_AVX2], float *, int);

#define NT256(NAME, DD)                                                                       \
    NT256_KEYS(NAME##_k1, DD, 1)                                                              \
    NT256_KEYS(NAME##_k2, DD, 2)                                                              \
    NT256_KEYS(NAME##_k3, DD, 3)                                                              \
    NT256_KEYS(NAME##_k4, DD, 4)                                                              \
    static void NAME(int M, int N, float alpha, const float *A, int lda, const float *B,       \
                     int ldb, float *C, int ldc)                                               \
    {                                                                                          \
        static const nt256_keys_fn by_kb[] = {NAME##_k1, NAME##_k2, NAME##_k3, NAME##_k4};     \
        enum { PASS = NT256_PASS * V256_W };                                                   \
        float bt[DD][VIT_PAIR_MAX_KEYS_AVX2] __attribute__((aligned(32)));                          \
        const int kb = (N + V256_W - 1) / V256_W;                                               \
        vit_transpose_scaled(N, kb * V256_W, DD, 1.0f, B, ldb, &bt[0][0], VIT_PAIR_MAX_KEYS_AVX2);   \
        if (kb <= NT256_PASS) {                                                                \
            by_kb[kb - 1](M, N, alpha, A, lda, (const float (*)[VIT_PAIR_MAX_KEYS_AVX2])bt, C, ldc); \
            return;                                                                            \
        }                                                                                      \
        by_kb[NT256_PASS - 1](M, PASS, alpha, A, lda,                                          \
                              (const float (*)[VIT_PAIR_MAX_KEYS_AVX2])bt, C, ldc);             \
        by_kb[kb - NT256_PASS - 1](M, N - PASS, alpha, A, lda,                                 \
                                   (const float (*)[VIT_PAIR_MAX_KEYS_AVX2])&bt[0][PASS],      \
                                   C + PASS, ldc);                                             \
    }

typedef void (*rows_fn)(int, int, const float *, int, const float *, int, float, float *, int);
typedef void (*nt_fn)(int, int, float, const float *, int, const float *, int, float *, int);

typedef struct {
    rows_fn rows[2][2]; /* [ta][width] */
    nt_fn nt[2];
} kernel_set;

/* One instruction set's kernels, for D = 16 and 32. */
#define PAIR_SET(V, SUFFIX, NT)                                                               \
    PAIR_ROWS(rows_n16_##SUFFIX, V, 0, 16)                                                    \
    PAIR_ROWS(rows_n32_##SUFFIX, V, 0, 32)                                                    \
    PAIR_ROWS(rows_t16_##SUFFIX, V, 1, 16)                                                    \
    PAIR_ROWS(rows_t32_##SUFFIX, V, 1, 32)                                                    \
    NT(nt16_##SUFFIX, V, 16)                                                                  \
    NT(nt32_##SUFFIX, V, 32)                                                                  \
    static const kernel_set SUFFIX##_set = {                                                   \
        {{rows_n16_##SUFFIX, rows_n32_##SUFFIX}, {rows_t16_##SUFFIX, rows_t32_##SUFFIX}},      \
        {nt16_##SUFFIX, nt32_##SUFFIX}};

#define NT256_SET(NAME, V, DD) NT256(NAME, DD)
PAIR_SET(V512, avx512, PAIR_NT)
PAIR_SET(V256, avx2, NT256_SET)

/* The set for this CPU (vit_cpu_features), or NULL for none (then the
 * GEMMs serve). */
static const kernel_set *kernels(void)
{
    const unsigned f = vit_cpu_features();
    if (!(f & VIT_CPU_FMA))
        return NULL;
    return f & VIT_CPU_AVX512F ? &avx512_set : f & VIT_CPU_AVX2 ? &avx2_set : NULL;
}

/* The most keys this CPU's kernels take for head widths dk, dv: AVX2's
 * hold up to 64 (VIT_PAIR_MAX_KEYS_AVX2), used at width 16 only (at 50
 * keys and width 32, the medium model's pairs, whole steps were 7% slower
 * than with libxsmm on Zen 3); AVX-512's stay at the 32 they were measured
 * for on Zen 4 (level with libxsmm at 50 keys there). */
static int max_keys(int dk, int dv)
{
    return kernels() == &avx2_set && dk == 16 && dv == 16 ? VIT_PAIR_MAX_KEYS_AVX2
                                                          : VIT_PAIR_MAX_KEYS;
}

/* 0, 1 for D = 16, 32; -1 for any other width. */
static int width_index(int d)
{
    return d == 16 ? 0 : d == 32 ? 1 : -1;
}

/* The kernels take the pair: widths they have, 1 .. most keys, a CPU
 * with kernels, and the GEMM path not forced to BLAS. */
static int direct_up_to(int dk, int dv, int nk, int most)
{
    return width_index(dk) >= 0 && width_index(dv) >= 0 && nk >= 1 && nk <= most && kernels()
        && vit_gemm_get_path() != VIT_GEMM_BLAS;
}

int vit_pair_direct(int dk, int dv, int nk)
{
    return direct_up_to(dk, dv, nk, VIT_PAIR_MAX_KEYS);
}

int vit_pair_direct_wide(int dk, int dv, int nk)
{
    return direct_up_to(dk, dv, nk, max_keys(dk, dv));
}

void vit_pair_nt(int M, int N, int d, vit_real alpha, const vit_real *A, int lda,
                 const vit_real *B, int ldb, vit_real *C, int ldc)
{
    kernels()->nt[width_index(d)](M, N, alpha, A, lda, B, ldb, C, ldc);
}

void vit_pair_nn(int ta, int M, int K, int d, const vit_real *A, int lda, const vit_real *B,
                 int ldb, vit_real beta, vit_real *C, int ldc)
{
    kernels()->rows[ta != 0][width_index(d)](M, K, A, lda, B, ldb, beta, C, ldc);
}

#else /* float64, or no x86-64 vector kernels: the GEMMs serve */

int vit_pair_direct(int dk, int dv, int nk)
{
    (void)dk, (void)dv, (void)nk;
    return 0;
}

int vit_pair_direct_wide(int dk, int dv, int nk)
{
    (void)dk, (void)dv, (void)nk;
    return 0;
}

void vit_pair_nt(int M, int N, int d, vit_real alpha, const vit_real *A, int lda,
                 const vit_real *B, int ldb, vit_real *C, int ldc)
{
    (void)M, (void)N, (void)d, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)C,
        (void)ldc;
}

void vit_pair_nn(int ta, int M, int K, int d, const vit_real *A, int lda, const vit_real *B,
                 int ldb, vit_real beta, vit_real *C, int ldc)
{
    (void)ta, (void)M, (void)K, (void)d, (void)A, (void)lda, (void)B, (void)ldb, (void)beta,
        (void)C, (void)ldc;
}

#endif
