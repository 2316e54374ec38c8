/* Internal: the library's own threads and GEMMs split across them.
 *
 * Policy: the library parallelises its loops itself, on a small pool of
 * worker threads with static partitioning (results are bitwise
 * reproducible for a fixed thread count), and splits each large GEMM into
 * row blocks, one per thread, each computed by a single-threaded OpenBLAS
 * call.  OpenBLAS's own pool is kept at one thread: two pools on the same
 * cores oversubscribe them, and every OpenBLAS thread holds its own packing
 * buffer, which counts against the resident memory.
 *
 * Training steps go one level up: vit_model_train_grads runs one slice of
 * the batch per thread, and every kernel inside a slice runs on that thread
 * alone (vit_parallel called from inside a body runs inline), so a step has
 * one fork/join instead of hundreds; a no-grad forward (evaluation) does
 * the same with its 64-image pieces.  Op-level splitting still serves
 * everything else (the kernels called directly, batches of one piece).
 *
 * Workers wait for work by polling and then sleeping on a condition
 * variable.  The poll is long (200 us) while the thread has had its CPU to
 * itself, which keeps a training step's few fork/joins from paying a
 * wake-up each, and short (5 us) while the scheduler has kept it waiting
 * for a CPU: on a shared machine a polling thread uses up its share of the
 * CPU and is then preempted in the middle of real work (threads.c,
 * "Waiting", has the measurements). */
#ifndef VIT_SRC_THREADS_H
#define VIT_SRC_THREADS_H

#include <stddef.h>
#include <cblas.h>
#include "vit/core.h"

/* Number of threads our loops use (>= 1): vit_set_threads()'s value, or the
 * number of online CPUs when it was never called.  The first call also pins
 * OpenBLAS to one thread. */
int vit_threads(void);

/* Threads worth using for a loop of about `total_flops` of work: 1 when a
 * fork/join would cost more than it saves, else vit_threads(). */
int vit_threads_for(double total_flops);

/* Runs body(ctx, lo, hi) over nt contiguous, even pieces [lo, hi) of [0, n),
 * piece t on thread t (t = 0 on the caller), and returns when all are done.
 * Piece boundaries depend only on n and nt.  nt <= 1 (or a call from inside
 * a body) runs body(ctx, 0, n) on the caller. */
typedef void (*vit_range_fn)(void *ctx, size_t lo, size_t hi);
void vit_parallel(int nt, size_t n, vit_range_fn body, void *ctx);

/* How many of vit_parallel(nt, n, ...)'s pieces run at the same time, each
 * on its own thread: pieces 1 .. w-1 run on workers, piece 0 and pieces w ..
 * nt-1 on the caller, one after another (w < nt only when the pool could not
 * start enough threads).  1 for nt <= 1 or a call from inside a body.  Starts
 * the pool's threads as vit_parallel would. */
int vit_parallel_width(int nt, size_t n);

/* C[M, N] = alpha op(A) op(B) + beta C, row-major, as cblas_?gemm, with the
 * rows of C split evenly across the threads when the product is large
 * enough.  Each element of C is computed by one thread from the same inputs,
 * so the result does not depend on timing. */
void vit_pgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
               vit_real alpha, const vit_real *A, int lda, const vit_real *B, int ldb,
               vit_real beta, vit_real *C, int ldc);

/* C[M, N] = A[M, K] B[K, N] + bias (each row; NULL: none), overwriting C,
 * split like vit_pgemm: each thread copies the bias into its own rows, then
 * its GEMM adds onto them with beta 1.  The same result as the copy and
 * vit_pgemm with beta 1, bitwise. */
void vit_pgemm_bias(int M, int N, int K, const vit_real *A, int lda, const vit_real *B, int ldb,
                    const vit_real *bias, vit_real *C, int ldc);

/* acc[cols] += column sums of x[rows, cols] (a bias gradient); columns are
 * split across threads and each sums its rows in order, so the result is
 * the same for any thread count. */
void vit_column_sums(vit_real *acc, const vit_real *x, int rows, int cols);

#endif
