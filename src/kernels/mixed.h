/* Internal: mixed precision for the library's layer GEMMs (src/kernels/mixed.c).
 *
 * The linear layers, the attention projections and the patch embedding
 * call vit_mgemm / vit_mgemm_bias where they would call vit_pgemm /
 * vit_pgemm_bias.  With mixed precision off on the calling thread (the
 * default) those are exactly vit_pgemm and vit_pgemm_bias (the float32
 * results bit for bit); on (vit_bf16_thread_mixed, or the training step
 * between vit_mixed_enter and vit_mixed_leave) the product takes bf16
 * inputs with float32 sums (vit/bf16.h), and an op(B) found among the
 * step's packed weights is read from its pack instead of being converted
 * again. */
#ifndef VIT_SRC_MIXED_H
#define VIT_SRC_MIXED_H

#include <cblas.h>
#include <stdint.h>

#include "vit/bf16.h"
#include "vit/core.h"

/* A set of weight matrices packed for the bf16 GEMMs, looked up by the
 * operand a GEMM is called with (pointer, transpose, shape, stride). */
typedef struct vit_mixed_weights vit_mixed_weights;

/* An empty set (NULL with the error on ENOMEM, or in the float64 library). */
vit_mixed_weights *vit_mixed_weights_new(void);
void vit_mixed_weights_free(vit_mixed_weights *w);

/* Adds the operand
 * op(B)[K, N] of B (trans_b, ldb as vit_bf16_pack_b); nothing is packed
 * yet.  VIT_ENOMEM. */
int vit_mixed_weights_add(vit_mixed_weights *w, int trans_b, int K, int N, const float *B,
                          int ldb);

/* Packs every operand added from the values B points at now, on up to nt
 * threads (vit_parallel).  VIT_OK or the first pack's error. */
int vit_mixed_weights_pack(vit_mixed_weights *w, int nt);

/* Number of operands added. */
int vit_mixed_weights_count(const vit_mixed_weights *w);

/* Turns mixed precision on for this thread, with w (may be NULL) as the
 * packed operands; vit_mixed_leave turns it off again and returns VIT_OK
 * or the first error a product met meanwhile (its message set). */
void vit_mixed_enter(const vit_mixed_weights *w);
int vit_mixed_leave(void);

/* Why the XSMM path of vit/bf16.h cannot run here (no libxsmm in this
 * build, no AVX-512 BF16 on this CPU, the float64 library), or NULL when it
 * can (src/kernels/bf16.c). */
const char *vit_bf16_xsmm_missing(void);

/* 1 when mixed precision is on for this thread. */
int vit_mixed_on(void);

/* vit_pgemm, or its bf16 version when mixed precision is on. */
void vit_mgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
               vit_real alpha, const vit_real *A, int lda, const vit_real *B, int ldb,
               vit_real beta, vit_real *C, int ldc);

/* vit_pgemm_bias, or its bf16 version (C's rows = bias, or 0 without one,
 * then += A B). */
void vit_mgemm_bias(int M, int N, int K, const vit_real *A, int lda, const vit_real *B, int ldb,
                    const vit_real *bias, vit_real *C, int ldc);

/* Internal (src/kernels/bf16.c): vit_gemm_bf16 with alpha 1 and op(A) given in
 * bf16 (A, row stride lda, as vit_gemm_bf16's float A): the same bits as
 * vit_gemm_bf16 on A's float values.  For activations kept in bf16. */
int vit_gemm_bf16_a16(int trans_a, int trans_b, int M, int N, int K, const uint16_t *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc);

/* The same with op(B) packed (vit_gemm_bf16_packed's B). */
int vit_gemm_bf16_packed_a16(int trans_a, int M, int N, int K, const uint16_t *A, int lda,
                             const vit_bf16_packed *B, float beta, float *C, int ldc);

/* vit_mgemm with alpha 1 and op(A) kept in bf16, mixed precision on (the
 * only way a bf16 A arises); records an error like vit_mgemm. */
void vit_mgemm_a16(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                   const uint16_t *A, int lda, const vit_real *B, int ldb, vit_real beta,
                   vit_real *C, int ldc);

/* Internal (src/kernels/bf16.c): vit_bf16_pack_b of op(B) = B [K, N]
 * (untransposed, row stride ldb) given in bf16: the same packed operand as
 * vit_bf16_pack_b of float values that vit_bf16_from_floats rounded to B,
 * without converting them again. */
int vit_bf16_pack_b16(vit_bf16_packed *p, int K, int N, const uint16_t *B, int ldb);

/* Internal (src/kernels/bf16.c): vit_gemm_bf16_a16 with op(B) = B [K, N]
 * given in bf16 too (vit_bf16_pack_b16's B): the same bits as
 * vit_gemm_bf16_a16 on the float values B was rounded from. */
int vit_gemm_bf16_a16_b16(int trans_a, int M, int N, int K, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, float beta, float *C, int ldc);

/* vit_mgemm_a16 with op(B) = B [K, N] untransposed and given in bf16, for
 * a gradient rounded once and read by two products (dx = dy W^T and
 * dW = x^T dy); records an error like vit_mgemm. */
void vit_mgemm_a16_b16(enum CBLAS_TRANSPOSE ta, int M, int N, int K, const uint16_t *A, int lda,
                       const uint16_t *B, int ldb, vit_real beta, vit_real *C, int ldc);

/* dst [rows, cols] = x [rows, cols] rounded to bf16 (vit_bf16_from_floats)
 * and, acc not NULL, acc [cols] += x's column sums, each column's rows
 * added in order (vit_column_sums' bits), in one pass over x: a gradient
 * that two products read in bf16 and a bias gradient sums.  One thread. */
void vit_mixed_round_colsums(uint16_t *dst, vit_real *acc, const vit_real *x, int rows,
                             int cols);

/* vit_mgemm_bias with A given in bf16, mixed precision on: C's rows =
 * bias (or 0 without one), then += A B; the same bits as vit_mgemm_bias on
 * the float values A was rounded from. */
void vit_mgemm_bias_a16(int M, int N, int K, const uint16_t *A, int lda, const vit_real *B,
                        int ldb, const vit_real *bias, vit_real *C, int ldc);

#endif
