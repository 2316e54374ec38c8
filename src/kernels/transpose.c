/*
 * Scaled transposed copies (see transpose.h).
 *
 * Square tiles of 16 x 16: the 16 rows read and the 16 written are each
 * one cache line, where a copy walking B by rows and P by columns touches
 * a new line of P for every element.  On a CPU with AVX-512 a tile is 16
 * vector loads, a transpose inside the registers and 16 vector stores
 * (masked at the edges); with AVX2 the same in 8 x 8 tiles; elsewhere the
 * same tiles element by element.
 */
#include "transpose.h"

#include "cpu_internal.h"
#include "fastmath.h"

enum { TILE = 16 };

/* Static: target clones of an external function would export their
 * resolver. */
FM_CLONES
static void plain_tiles(int rows, int pad_to, int cols, float alpha, const float *restrict B,
                        int ldb, float *restrict P, int ldp)
{
    for (int r0 = 0; r0 < rows; r0 += TILE) {
        int r1 = r0 + TILE < rows ? r0 + TILE : rows;
        for (int c0 = 0; c0 < cols; c0 += TILE) {
            int c1 = c0 + TILE < cols ? c0 + TILE : cols;
            for (int c = c0; c < c1; c++)
                for (int r = r0; r < r1; r++)
                    P[(size_t)c * ldp + r] = alpha * B[(size_t)r * ldb + c];
        }
    }
    for (int c = 0; c < cols; c++)
        for (int r = rows; r < pad_to; r++)
            P[(size_t)c * ldp + r] = 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX512_TILES 1

/* A 16 x 16 transpose as four rounds of block swaps: round s exchanges the
 * off-diagonal b x b blocks (b = 2^s) of every 2b x 2b block, pairing row i
 * with row i + b.  The new row i takes the first b of every 2b columns of
 * rows i and i + b, the new row i + b their second b (two-source permutes,
 * indices 16.. naming the second row).  After all four rounds x[j] holds
 * column j of the tile.  swap_index[s][0] and [1] are those two permutes'
 * indices for round s. */
static const int swap_index[4][2][TILE] __attribute__((aligned(64))) = {
    {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
     {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
     {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
     {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
     {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
};

/* The four rounds on a tile x[TILE] of 32-bit lanes (moved, not
 * interpreted: the float and the 16-bit tiles share them). */
__attribute__((target("avx512f"), always_inline))
static inline void swap_rounds(__m512i x[TILE], const __m512i lo[4], const __m512i hi[4])
{
#pragma GCC unroll 4
    for (int s = 0; s < 4; s++) {
        int b = 1 << s;
#pragma GCC unroll 16
        for (int i = 0; i < TILE; i++) {
            if (i & b)
                continue;
            __m512i a = x[i], c = x[i + b];
            x[i] = _mm512_permutex2var_epi32(a, lo[s], c);
            x[i + b] = _mm512_permutex2var_epi32(a, hi[s], c);
        }
    }
}

__attribute__((target("avx512f")))
static void transpose_avx512(int rows, int pad_to, int cols, float alpha, const float *B,
                             int ldb, float *P, int ldp)
{
    __m512i lo[4], hi[4];
    for (int s = 0; s < 4; s++) {
        lo[s] = _mm512_loadu_si512(swap_index[s][0]);
        hi[s] = _mm512_loadu_si512(swap_index[s][1]);
    }
    const __m512 va = _mm512_set1_ps(alpha);
    for (int r0 = 0; r0 < pad_to; r0 += TILE) {
        /* nr rows of B, then zeros up to np rows of P */
        int nr = rows - r0 < TILE ? (rows > r0 ? rows - r0 : 0) : TILE;
        int np = pad_to - r0 < TILE ? pad_to - r0 : TILE;
        __mmask16 row_mask = (__mmask16)(nr == TILE ? 0xffffu : (1u << nr) - 1);
        __mmask16 pad_mask = (__mmask16)(np == TILE ? 0xffffu : (1u << np) - 1);
        for (int c0 = 0; c0 < cols; c0 += TILE) {
            int nc = cols - c0 < TILE ? cols - c0 : TILE;
            if (nr == 0) { /* padding alone */
                for (int j = 0; j < nc; j++)
                    _mm512_mask_storeu_ps(P + (size_t)(c0 + j) * ldp + r0, pad_mask,
                                          _mm512_setzero_ps());
                continue;
            }
            __mmask16 col_mask = (__mmask16)(nc == TILE ? 0xffffu : (1u << nc) - 1);
            __m512i x[TILE];
#pragma GCC unroll 16
            for (int i = 0; i < TILE; i++)
                x[i] = i < nr ? _mm512_castps_si512(_mm512_maskz_loadu_ps(
                                    col_mask, B + (size_t)(r0 + i) * ldb + c0))
                              : _mm512_setzero_si512();
            swap_rounds(x, lo, hi);
#pragma GCC unroll 16
            for (int j = 0; j < TILE; j++)
                if (j < nc)
                    _mm512_mask_storeu_ps(P + (size_t)(c0 + j) * ldp + r0, pad_mask,
                                          _mm512_maskz_mul_ps(row_mask, va,
                                                              _mm512_castsi512_ps(x[j])));
        }
    }
}

/* Lanes 0..n-1 of an AVX2 vector set (n clamped by the comparison). */
#define FIRST_N8(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))

/* x[j] = column j of the 8 x 8 tile x[0..8) (row i in x[i]): unpacks,
 * shuffles and lane swaps, 24 operations in the registers. */
__attribute__((target("avx2"), always_inline))
static inline void transpose8_avx2(__m256 x[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(x[i], x[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int j = 0; j < 4; j++) {
        x[j] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
        x[j + 4] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
    }
}

/* transpose_avx512's scheme in 8 x 8 tiles for CPUs with AVX2 but not
 * AVX-512 (Zen 3), where the plain tiles ran element by element: 2.3% of
 * the Swin step on one Zen 3 core, most of it the GEMM layer's packed
 * alpha B^T of the window attention's 49-key scores.  Masked loads and
 * stores at the edges; the padding rows stored as zeros (not alpha * 0,
 * which a non-finite alpha would make NaN). */
__attribute__((target("avx2")))
static void transpose_avx2(int rows, int pad_to, int cols, float alpha, const float *B,
                           int ldb, float *P, int ldp)
{
    const __m256 va = _mm256_set1_ps(alpha);
    for (int r0 = 0; r0 < pad_to; r0 += 8) {
        int nr = rows - r0 < 8 ? (rows > r0 ? rows - r0 : 0) : 8;
        int np = pad_to - r0 < 8 ? pad_to - r0 : 8;
        const __m256 row_keep = _mm256_castsi256_ps(FIRST_N8(nr));
        for (int c0 = 0; c0 < cols; c0 += 8) {
            int nc = cols - c0 < 8 ? cols - c0 : 8;
            const __m256i col_mask = FIRST_N8(nc);
            __m256 x[8];
            for (int i = 0; i < 8; i++) {
                const float *b = B + (size_t)(r0 + i) * ldb + c0;
                x[i] = i >= nr ? _mm256_setzero_ps()
                     : nc == 8 ? _mm256_loadu_ps(b) : _mm256_maskload_ps(b, col_mask);
            }
            transpose8_avx2(x);
            for (int j = 0; j < nc; j++) {
                float *p = P + (size_t)(c0 + j) * ldp + r0;
                __m256 y = _mm256_and_ps(_mm256_mul_ps(va, x[j]), row_keep);
                if (np == 8)
                    _mm256_storeu_ps(p, y);
                else
                    vit_store_first8(p, y, np);
            }
        }
    }
}

/* The float tiles this CPU runs: 3 AVX-512, 2 AVX2 (without AVX-512F),
 * 1 the plain ones. */
static int float_tiles(void)
{
    const unsigned f = vit_cpu_features();
    return f & VIT_CPU_AVX512F ? 3 : f & VIT_CPU_AVX2 ? 2 : 1;
}

/* The 16-bit copy through 32-bit tiles: source rows 2i and 2i + 1 of a
 * block of 32, side by side in the 32-bit lanes (row 2i's value the low
 * half), make a 16 x 16 tile of pairs; its transpose (transpose_avx512's
 * rounds, without the scaling) has in row j the pairs of column j, which
 * are that column's 32 values in row order: the copy's row j, stored as
 * 16-bit values.  Four rounds of 16 two-source permutes per 512 values,
 * 16 + 8 registers.  (A 32 x 32 tile of 16-bit values needs 32 + 10
 * registers, and spilled.) */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static void transpose16_avx512(int rows, int cols, const uint16_t *B, int ldb, uint16_t *P,
                               int ldp)
{
    __m512i lo[4], hi[4];
    for (int s = 0; s < 4; s++) {
        lo[s] = _mm512_loadu_si512(swap_index[s][0]);
        hi[s] = _mm512_loadu_si512(swap_index[s][1]);
    }
    for (int k0 = 0; k0 < rows; k0 += 2 * TILE) {
        int nk = rows - k0 < 2 * TILE ? rows - k0 : 2 * TILE;
        __mmask32 row_mask = (__mmask32)(nk == 2 * TILE ? 0xffffffffu : (1u << nk) - 1);
        for (int c0 = 0; c0 < cols; c0 += TILE) {
            int nc = cols - c0 < TILE ? cols - c0 : TILE;
            __mmask16 col_mask = (__mmask16)(nc == TILE ? 0xffffu : (1u << nc) - 1);
            __m512i x[TILE];
#pragma GCC unroll 16
            for (int i = 0; i < TILE; i++) {
                int ka = k0 + 2 * i;
                __m256i a = ka < rows ? _mm256_maskz_loadu_epi16(col_mask, B + (size_t)ka * ldb + c0)
                                      : _mm256_setzero_si256();
                __m256i b = ka + 1 < rows
                                ? _mm256_maskz_loadu_epi16(col_mask, B + (size_t)(ka + 1) * ldb + c0)
                                : _mm256_setzero_si256();
                x[i] = _mm512_or_si512(_mm512_cvtepu16_epi32(a),
                                       _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
            }
            swap_rounds(x, lo, hi);
#pragma GCC unroll 16
            for (int j = 0; j < TILE; j++)
                if (j < nc)
                    _mm512_mask_storeu_epi16(P + (size_t)(c0 + j) * ldp + k0, row_mask, x[j]);
        }
    }
}

/* 1 when this CPU runs the 16-bit AVX-512 tiles (AVX-512F, BW and VL). */
static int use_avx512bw(void)
{
    const unsigned need = VIT_CPU_AVX512F | VIT_CPU_AVX512BW_VL;
    return (vit_cpu_features() & need) == need;
}
#endif

void vit_transpose_scaled(int rows, int pad_to, int cols, float alpha, const float *B,
                          int ldb, float *P, int ldp)
{
    if (pad_to < rows)
        pad_to = rows;
#ifdef HAVE_AVX512_TILES
    const int tiles = float_tiles();
    if (tiles == 3) {
        transpose_avx512(rows, pad_to, cols, alpha, B, ldb, P, ldp);
        return;
    }
    if (tiles == 2) {
        transpose_avx2(rows, pad_to, cols, alpha, B, ldb, P, ldp);
        return;
    }
#endif
    plain_tiles(rows, pad_to, cols, alpha, B, ldb, P, ldp);
}

void vit_transpose_scaled_plain(int rows, int pad_to, int cols, float alpha, const float *B,
                                int ldb, float *P, int ldp)
{
    plain_tiles(rows, pad_to < rows ? rows : pad_to, cols, alpha, B, ldb, P, ldp);
}

void vit_transpose16_plain(int rows, int cols, const uint16_t *B, int ldb, uint16_t *P, int ldp)
{
    enum { T = 32 };
    for (int r0 = 0; r0 < rows; r0 += T) {
        int r1 = r0 + T < rows ? r0 + T : rows;
        for (int c0 = 0; c0 < cols; c0 += T) {
            int c1 = c0 + T < cols ? c0 + T : cols;
            for (int c = c0; c < c1; c++)
                for (int r = r0; r < r1; r++)
                    P[(size_t)c * ldp + r] = B[(size_t)r * ldb + c];
        }
    }
}

void vit_transpose16(int rows, int cols, const uint16_t *B, int ldb, uint16_t *P, int ldp)
{
#ifdef HAVE_AVX512_TILES
    if (use_avx512bw()) {
        transpose16_avx512(rows, cols, B, ldb, P, ldp);
        return;
    }
#endif
    vit_transpose16_plain(rows, cols, B, ldb, P, ldp);
}
