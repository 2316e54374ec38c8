/* Internal: the library's own threads and GEMMs split across them.
 *
 * Policy: the library parallelises its loops itself (OpenMP, static
 * partitioning, so results are bitwise reproducible for a fixed thread
 * count) and splits each large GEMM into row blocks, one per thread, each
 * computed by a single-threaded OpenBLAS call.  OpenBLAS's own thread pool is
 * therefore kept at one thread: two pools spinning on the same cores
 * oversubscribe them, and every OpenBLAS thread also holds its own packing
 * buffer, which counts against the resident memory. */
#ifndef VIT_SRC_THREADS_H
#define VIT_SRC_THREADS_H

#include <cblas.h>
#include "vit/core.h"

/* Number of threads our loops use (>= 1): vit_set_threads()'s value, or the
 * number of online CPUs when it was never called.  The first call also pins
 * OpenBLAS to one thread. */
int vit_threads(void);

/* Threads for a loop of `work` units of roughly `cost` flops each: 1 when
 * the loop is too small for a fork/join to pay, else vit_threads(). */
int vit_threads_for(double total_flops);

/* C[M, N] = alpha op(A) op(B) + beta C, row-major, as cblas_?gemm, with the
 * rows of C split evenly across the threads when the product is large
 * enough.  Each element of C is computed by one thread from the same inputs,
 * so the result does not depend on timing.  Not to be called from inside a
 * parallel region. */
void vit_pgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
               vit_real alpha, const vit_real *A, int lda, const vit_real *B, int ldb,
               vit_real beta, vit_real *C, int ldc);

/* acc[cols] += column sums of x[rows, cols] (a bias gradient). */
void vit_column_sums(vit_real *acc, const vit_real *x, int rows, int cols);

/* The t-th of nt even, contiguous pieces of [0, n): [*lo, *hi). */
static inline void vit_split(size_t n, int t, int nt, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)t / (size_t)nt;
    *hi = n * (size_t)(t + 1) / (size_t)nt;
}

/* OpenMP helpers that compile to nothing without OpenMP. */
#ifdef _OPENMP
#define VIT_PRAGMA(x) _Pragma(#x)
#define VIT_PARALLEL_FOR(nt) VIT_PRAGMA(omp parallel for schedule(static) num_threads(nt) if(nt > 1))
#else
#define VIT_PARALLEL_FOR(nt)
#endif

#endif
