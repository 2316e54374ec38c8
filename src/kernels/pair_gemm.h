/*
 * Direct products for one small attention pair (one item, one head).
 *
 * Private to the library.  An attention pair of the digits model is a
 * 17x16 by 16x17 product and three more of that size, 6,144 calls a step:
 * small enough that a GEMM call's fixed costs (dispatch, a packed copy of a
 * transposed operand, a kernel shaped for larger blocks) are most of its
 * time.  These kernels fix the head width at compile time (16 or 32), so
 * one output row is one or two vector registers held across the whole
 * reduction, and take the transposed operand of a score product through a
 * transposed copy on the stack.  Measured per call on one AVX-512 core
 * against libxsmm's kernels: the 17-row products of width 16 over 17 terms
 * 0.10-0.12 us against 0.27-0.29, the 17x17 scores over 16 terms
 * 0.22-0.25 us against 0.46-0.58; at 50 keys and width 32 both were only
 * level with libxsmm, and at width 64 the row products 1.8x slower, hence
 * the limits below.  On an AMD EPYC core (AVX-512), where libxsmm's calls
 * cost less, they are level: the 17-row products 0.053-0.057 us against
 * 0.052-0.073, the scores 0.145 against 0.12-0.17 (whole digits steps with
 * and without them: medians 17,170 and 17,070 images/s).
 *
 * Float32 only: the float64 build (the gradient checks) keeps its GEMMs,
 * and so does the BLAS path (vit_gemm_set_path(VIT_GEMM_BLAS) or
 * VIT_GEMM=blas), which is therefore the reference these kernels are
 * tested against (tests/test_gemm.c).  On x86-64 each kernel has AVX-512
 * and AVX2 builds with FMA (intrinsics), picked by CPUID once; elsewhere,
 * or on a CPU without FMA, there are none and the GEMMs serve.
 */
#ifndef VIT_PAIR_GEMM_H
#define VIT_PAIR_GEMM_H

#include "vit/core.h"

/* Largest key count vit_pair_nt takes (its transposed copy is on the
 * stack). */
#define VIT_PAIR_MAX_KEYS 32

/* 1 if the kernels take a pair of head widths dk (queries, keys) and dv
 * (values) with nk keys: float32, widths 16 or 32, nk <= 32, a CPU with
 * AVX2 and FMA, and the GEMM path not BLAS.  0 otherwise (then use GEMMs). */
int vit_pair_direct(int dk, int dv, int nk);

/* Largest key count of the AVX2 kernels (a CPU without AVX-512: Zen 3),
 * for vit_pair_direct_wide. */
#define VIT_PAIR_MAX_KEYS_AVX2 64

/* vit_pair_direct, but at head widths dk = dv = 16 up to
 * VIT_PAIR_MAX_KEYS_AVX2 keys where the CPU runs the AVX2 kernels (with
 * AVX-512, or at width 32: VIT_PAIR_MAX_KEYS).  For the plain attention
 * core: the Fashion-MNIST default's 50-key pairs of width 16 (scores
 * through libxsmm paid a transposed copy each) ran its whole step in ~0.9
 * of the CPU time on Zen 3, bitwise the same.  The windowed core keeps
 * vit_pair_direct (not measured with more keys). */
int vit_pair_direct_wide(int dk, int dv, int nk);

/* C[M, N] = alpha * A[M, d] B[N, d]^T (overwritten); N at most the limit
 * of the vit_pair_direct* that took the pair, d a width it took; rows of
 * A, B, C lda, ldb, ldc apart. */
void vit_pair_nt(int M, int N, int d, vit_real alpha, const vit_real *A, int lda,
                 const vit_real *B, int ldb, vit_real *C, int ldc);

/* C[M, d] = beta * C + op(A) B[K, d], op(A) = A[M, K] (ta = 0) or
 * A[K, M]^T (ta = 1); beta 0 overwrites (C is not read). */
void vit_pair_nn(int ta, int M, int K, int d, const vit_real *A, int lda, const vit_real *B,
                 int ldb, vit_real beta, vit_real *C, int ldc);

#endif
