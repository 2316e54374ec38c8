/* Internal: the BLAS routines we use, mapped to the s- or d- variant of the
 * build's real type, so kernels are written once.  GEMMs go through
 * vit_gemm_rm (src/kernels/gemm.c), which picks OpenBLAS or libxsmm per shape;
 * vit_gemm keeps cblas_?gemm's argument list (the order must be
 * CblasRowMajor, the only one the library uses). */
#ifndef VIT_SRC_BLAS_H
#define VIT_SRC_BLAS_H

#include <cblas.h>
#include "vit/core.h"

void vit_gemm_rm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                 vit_real alpha, const vit_real *A, int lda, const vit_real *B, int ldb,
                 vit_real beta, vit_real *C, int ldc);

/* Internal (gemm.c): the statistics of vit/gemm.h for a bf16 product of
 * vit/bf16.h's XSMM path, one call of one thread's block of rows.
 * vit_gemm_clock() is the time to pass as t0 (read before the product), 0
 * while the timing is off. */
#include "vit/gemm.h"
unsigned long long vit_gemm_clock(void);
void vit_gemm_note_bf16(int trans_a, int M, int N, int K, int beta, vit_gemm_path path,
                        unsigned long long t0);

#define vit_gemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) \
    vit_gemm_rm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)

#ifdef VIT_DOUBLE
#define vit_gemv cblas_dgemv
#define vit_axpy cblas_daxpy
#define vit_dot cblas_ddot
#else
#define vit_gemv cblas_sgemv
#define vit_axpy cblas_saxpy
#define vit_dot cblas_sdot
#endif

#endif
