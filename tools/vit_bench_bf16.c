/*
 * vit_bench_bf16 - the bf16 GEMMs of vit/bf16.h against the float32 ones,
 * on the shapes of issue 24's table (one layer's products of the digits,
 * medium and large models) or on given ones.
 *
 * For each row-major product C[M, N] = op(A)[M, K] op(B)[K, N] it times
 *   fp32 lib   the library's float32 GEMM (vit_linear_forward without bias:
 *              libxsmm or OpenBLAS by the rule of vit/gemm.h; plain
 *              products only),
 *   fp32 blas  cblas_sgemm,
 *   bf16 pack  vit_gemm_bf16_packed with op(B) packed beforehand (a weight
 *              packed once per step),
 *   bf16 call  vit_gemm_bf16 (op(B) converted and packed by every call, as
 *              for a product of two activations),
 * in GFLOP/s (2 M N K per product), as the median of --reps repetitions;
 * each repetition times every variant in turn for about 20 ms, so a busy
 * spell of a shared machine slows them all.  "ratio" is bf16 pack over the
 * faster float32 one.
 *
 *   vit_bench_bf16 [--threads N] [--reps N] [--fallback] [--shape MxNxK[tT]]...
 *
 * A shape's suffix t transposes op(A), T op(B) (e.g. 64x64x544t: a weight
 * gradient X^T dY).  --fallback times the fallback path (float32 GEMM on
 * rounded inputs) instead of libxsmm's bf16 kernels.  Issue 24's table gives
 * libxsmm's column-major m x n x k, which is N x M x K here.
 */
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "vit/vit.h"

enum { MAX_SHAPES = 32, MAX_REPS = 101, VARIANTS = 4 };

typedef struct {
    int M, N, K, ta, tb;
} shape;

/* The issue's m x n x k, as M x N x K. */
static const shape issue_shapes[] = {
    {544, 64, 64, 0, 0},  {544, 128, 64, 0, 0}, {520, 192, 192, 0, 0},
    {520, 768, 192, 0, 0}, {520, 192, 768, 0, 0}, {64, 64, 544, 0, 0},
    /* The same layers' input and weight gradients. */
    {520, 192, 768, 0, 1}, {192, 768, 520, 1, 0}, {64, 64, 544, 1, 0},
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    shape s;
    float *A, *B, *C;
    int lda, ldb;
    vit_bf16_packed *packed;
} bench;

/* One call of variant v; 0 when the variant does not apply, -1 on error. */
static int run_variant(bench *b, int v)
{
    const shape *s = &b->s;
    switch (v) {
    case 0:
        if (s->ta || s->tb)
            return 0;
        return vit_linear_forward(b->C, b->A, b->B, NULL, s->M, s->K, s->N) ? -1 : 1;
    case 1:
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                    s->tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1, b->A, b->lda, b->B,
                    b->ldb, 0, b->C, s->N);
        return 1;
    case 2:
        return vit_gemm_bf16_packed(s->ta, s->M, s->N, s->K, 1, b->A, b->lda, b->packed, 0, b->C,
                                    s->N) ? -1 : 1;
    default:
        return vit_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, 1, b->A, b->lda, b->B, b->ldb, 0,
                             b->C, s->N) ? -1 : 1;
    }
}

/* Seconds per call of variant v over about 20 ms; 0 when it does not apply. */
static double time_variant(bench *b, int v, int calls)
{
    double t0 = now();
    for (int i = 0; i < calls; i++)
        if (run_variant(b, v) <= 0)
            return 0;
    return (now() - t0) / calls;
}

static int bench_shape(const shape *s, int reps)
{
    bench b = {*s, NULL, NULL, NULL, s->ta ? s->M : s->K, s->tb ? s->K : s->N, NULL};
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    b.A = malloc(na * sizeof *b.A);
    b.B = malloc(nb * sizeof *b.B);
    b.C = malloc(nc * sizeof *b.C);
    if (!b.A || !b.B || !b.C || vit_bf16_packed_new(&b.packed) != VIT_OK) {
        fprintf(stderr, "vit_bench_bf16: out of memory\n");
        return 1;
    }
    vit_rng rng;
    vit_rng_seed(&rng, 24);
    for (size_t i = 0; i < na; i++)
        b.A[i] = (float)vit_rng_normal(&rng);
    for (size_t i = 0; i < nb; i++)
        b.B[i] = (float)vit_rng_normal(&rng);
    if (vit_bf16_pack_b(b.packed, s->tb, s->K, s->N, b.B, b.ldb) != VIT_OK) {
        fprintf(stderr, "vit_bench_bf16: %s\n", vit_last_error());
        return 1;
    }
    double flops = 2.0 * s->M * (double)s->N * s->K;
    /* Calls per repetition: ~20 ms at 100 GFLOP/s, and a warm-up. */
    int calls = (int)(2e9 / flops) + 1;
    double t[VARIANTS][MAX_REPS];
    for (int v = 0; v < VARIANTS; v++)
        if (run_variant(&b, v) < 0) {
            fprintf(stderr, "vit_bench_bf16: %s\n", vit_last_error());
            return 1;
        }
    for (int r = 0; r < reps; r++)
        for (int v = 0; v < VARIANTS; v++)
            t[v][r] = time_variant(&b, v, calls);
    double gf[VARIANTS];
    for (int v = 0; v < VARIANTS; v++) {
        qsort(t[v], (size_t)reps, sizeof t[v][0], cmp_double);
        double med = t[v][reps / 2];
        gf[v] = med > 0 ? flops / med * 1e-9 : 0;
    }
    char name[64];
    snprintf(name, sizeof name, "%dx%dx%d%s%s", s->M, s->N, s->K, s->ta ? "t" : "",
             s->tb ? "T" : "");
    double best32 = gf[0] > gf[1] ? gf[0] : gf[1];
    printf("%-16s", name);
    for (int v = 0; v < VARIANTS; v++)
        if (gf[v] > 0)
            printf(" %10.1f", gf[v]);
        else
            printf(" %10s", "-");
    printf(" %7.2f %7.2f\n", gf[2] / best32, gf[3] / best32);
    vit_bf16_packed_free(b.packed);
    free(b.A); free(b.B); free(b.C);
    return 0;
}

static int parse_shape(const char *arg, shape *s)
{
    int used = 0;
    if (sscanf(arg, "%dx%dx%d%n", &s->M, &s->N, &s->K, &used) != 3 || s->M < 1 || s->N < 1
        || s->K < 1)
        return -1;
    s->ta = s->tb = 0;
    for (const char *p = arg + used; *p; p++) {
        if (*p == 't')
            s->ta = 1;
        else if (*p == 'T')
            s->tb = 1;
        else
            return -1;
    }
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: vit_bench_bf16 [--threads N] [--reps N] [--fallback] "
                    "[--shape MxNxK[tT]]...\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (!cli_gemm_env_ok("vit_bench_bf16")) /* a VIT_GEMM it would not take: refused */
        return 2;
    int threads = 1, reps = 9, fallback = 0, n_shapes = 0;
    shape shapes[MAX_SHAPES];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--fallback") == 0)
            fallback = 1;
        else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc && n_shapes < MAX_SHAPES) {
            if (parse_shape(argv[++i], &shapes[n_shapes++]) != 0)
                return usage();
        } else
            return usage();
    }
    if (reps < 1 || reps > MAX_REPS || vit_set_threads(threads) != VIT_OK)
        return usage();
    if (n_shapes == 0) {
        n_shapes = (int)(sizeof issue_shapes / sizeof issue_shapes[0]);
        memcpy(shapes, issue_shapes, sizeof issue_shapes);
    }
    if (vit_bf16_set_path(fallback ? VIT_BF16_FALLBACK : VIT_BF16_AUTO) != VIT_OK) {
        fprintf(stderr, "vit_bench_bf16: %s\n", vit_last_error());
        return 1;
    }
    printf("bf16 path %s, CPU bf16 features %u, %d thread(s), median of %d; GFLOP/s\n",
           vit_bf16_path_name(vit_bf16_get_path()), vit_bf16_cpu_features(), threads, reps);
    printf("%-16s %10s %10s %10s %10s %7s %7s\n", "MxNxK", "fp32 lib", "fp32 blas", "bf16 pack",
           "bf16 call", "ratio", "r.call");
    for (int i = 0; i < n_shapes; i++)
        if (bench_shape(&shapes[i], reps) != 0)
            return 1;
    return 0;
}
