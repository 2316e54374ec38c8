/* The library's thread count and the GEMM split (see threads.h). */
#include "threads.h"

#include <unistd.h>

#include "blas.h"
#include "error.h"

#ifdef VIT_HAVE_OPENBLAS_THREADS
void openblas_set_num_threads(int num_threads);
#endif

/* 0 until set or first used.  Written by vit_set_threads, which core.h asks
 * to be called before training, not while kernels run. */
static int nthreads;

static void pin_blas(void)
{
#ifdef VIT_HAVE_OPENBLAS_THREADS
    openblas_set_num_threads(1);
#endif
}

int vit_threads(void)
{
    if (nthreads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = n < 1 ? 1 : n > 256 ? 256 : (int)n;
        pin_blas();
    }
    return nthreads;
}

/* A fork/join costs a few microseconds; below ~100k flops it does not pay. */
int vit_threads_for(double total_flops)
{
    int n = vit_threads();
    return total_flops < 1e5 ? 1 : n;
}

/* Sets our loops' thread count; OpenBLAS stays single-threaded because the
 * library splits its GEMMs itself (threads.h). */
int vit_set_threads(int n)
{
    if (n < 1 || n > 1024)
        return vit_fail(VIT_EINVAL, "vit_set_threads: %d threads is out of range [1, 1024]", n);
    nthreads = n;
    pin_blas();
    return VIT_OK;
}

void vit_pgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
               vit_real alpha, const vit_real *A, int lda, const vit_real *B, int ldb,
               vit_real beta, vit_real *C, int ldc)
{
    int nt = vit_threads_for(2.0 * M * (double)N * K);
    /* Row blocks of at least 16 rows keep each call's micro-kernel busy. */
    if (nt > M / 16)
        nt = M / 16 > 1 ? M / 16 : 1;
    if (nt <= 1) {
        vit_gemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    VIT_PARALLEL_FOR(nt)
    for (int t = 0; t < nt; t++) {
        int r0 = (int)((long long)M * t / nt), r1 = (int)((long long)M * (t + 1) / nt);
        /* Row r of op(A) is row r of A, or column r of A when transposed. */
        const vit_real *a = ta == CblasNoTrans ? A + (size_t)r0 * lda : A + r0;
        vit_gemm(CblasRowMajor, ta, tb, r1 - r0, N, K, alpha, a, lda, B, ldb, beta,
                 C + (size_t)r0 * ldc, ldc);
    }
}

/* Columns are split across threads and each column sums its rows in order,
 * so the result is the same for any thread count.  A plain loop keeps this
 * allocation-free (a gemv against ones would need the ones somewhere). */
void vit_column_sums(vit_real *acc, const vit_real *x, int rows, int cols)
{
    int nt = vit_threads_for((double)rows * cols * 4);
    if (nt > cols / 16)
        nt = cols / 16 > 1 ? cols / 16 : 1;
    VIT_PARALLEL_FOR(nt)
    for (int t = 0; t < nt; t++) {
        size_t lo, hi;
        vit_split((size_t)cols, t, nt, &lo, &hi);
        for (int i = 0; i < rows; i++) {
            const vit_real *row = x + (size_t)i * cols;
            for (size_t o = lo; o < hi; o++)
                acc[o] += row[o];
        }
    }
}
