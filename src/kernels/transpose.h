/*
 * Scaled transposed copies, for the GEMM layer's packed operands.
 *
 * Private to the library.  libxsmm 1.17 takes neither a transposed first
 * operand nor alpha != 1, so gemm.c hands it a copy of alpha B^T instead:
 * on the large model that copy is made 2,300 times a step for the 65x64
 * keys of the attention scores and 12 times for each 192x768 weight.  Done
 * element by element, walking B by rows and writing the copy by columns,
 * it was 5% of that step.
 */
#ifndef VIT_TRANSPOSE_H
#define VIT_TRANSPOSE_H

#include <stdint.h>

/* P[c, r] = alpha * B[r, c] for 0 <= r < rows, and 0 for rows <= r <
 * pad_to (a pad_to below rows counts as rows), for 0 <= c < cols: P is
 * [cols, pad_to] with rows ldp apart (ldp >= pad_to), B is [rows, cols]
 * with rows ldb apart (ldb >= cols); P is overwritten there and not
 * touched elsewhere, B and P must not overlap.  Each element is one
 * multiplication by alpha, so the result is the same on every path.  The
 * zero padding is for the attention scores' kernel, which reads whole
 * vectors of keys.  Float32 only (the GEMM layer packs nothing in the
 * float64 build). */
void vit_transpose_scaled(int rows, int pad_to, int cols, float alpha, const float *B,
                          int ldb, float *P, int ldp);

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* p[0..n) = the first n lanes of v, 0 < n < 8, nothing after them
 * touched: for the ragged edges of the AVX2 tiles and kernels.  By one
 * 4-, 2- and 1-lane store each at most, not _mm256_maskstore_ps: AMD's
 * masked stores are microcoded (vmaskmovps to memory was most of the
 * attention pairs' transposed copies at 50 keys on Zen 3). */
__attribute__((target("avx"), always_inline)) static inline void
vit_store_first8(float *p, __m256 v, int n)
{
    __m128 x = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(p, x);
        x = _mm256_extractf128_ps(v, 1);
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi((__m64 *)(void *)p, x);
        x = _mm_movehl_ps(x, x);
        p += 2;
        n -= 2;
    }
    if (n)
        _mm_store_ss(p, x);
}
#endif

/* The same without the vector tiles, as a CPU without AVX-512 runs it
 * (tests/test_transpose.c checks both against a plain loop). */
void vit_transpose_scaled_plain(int rows, int pad_to, int cols, float alpha, const float *B,
                                int ldb, float *P, int ldp);

/* P[c, r] = B[r, c] for 0 <= r < rows, 0 <= c < cols, of 16-bit values
 * (bf16 bit patterns, moved, not interpreted): P is [cols, rows] with
 * rows ldp apart (ldp >= rows), B [rows, cols] with rows ldb apart (ldb >=
 * cols); P is overwritten there and not touched elsewhere, B and P must
 * not overlap.  For the bf16 GEMMs' transposed op(A) given in bf16
 * (src/kernels/bf16.c): tiles in AVX-512 registers where the CPU has
 * AVX-512BW and VL, else element by element in 32 x 32 tiles. */
void vit_transpose16(int rows, int cols, const uint16_t *B, int ldb, uint16_t *P, int ldp);

/* The same without the vector tiles (tests/test_transpose.c). */
void vit_transpose16_plain(int rows, int cols, const uint16_t *B, int ldb, uint16_t *P, int ldp);

#endif
