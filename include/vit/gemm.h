/* vit/gemm.h - which library computes the GEMMs, per shape.
 *
 * Every matrix product in the library goes through one internal GEMM call.
 * In the float32 library built with libxsmm (meson option `xsmm`, on when
 * libxsmm is found), that call chooses, once per shape, between a libxsmm
 * JIT kernel (every product up to 1024 wide: the projections, MLPs, weight
 * gradients and attention's per-head products of ViT-sized models, where it
 * was ahead of or level with OpenBLAS on Zen 4) and OpenBLAS (wider
 * products, and a beta other than 0 or 1; on a CPU with AVX2 but not
 * AVX-512, where libxsmm's code is AVX2, also the weight gradients over
 * 256 rows or more and the products with N * K of 192 * 64 or more).  The choice is a fixed
 * rule of the shape (see src/kernels/gemm.c), not a timing, so a run's results do
 * not depend on how busy the machine was.  The float64 library and a build
 * without libxsmm always use BLAS.
 *
 * One family of products skips this layer: in the float32 library on a CPU
 * with AVX2 and FMA, the per-head products of small attention pairs (head
 * width 16 or 32, at most 32 keys, or at width 16 up to 64 on a CPU
 * without AVX-512; e.g. the digits model's 17 x 16 by
 * 16 x 17) run on direct kernels inside the attention core, with or
 * without libxsmm, unless the path is VIT_GEMM_BLAS.  They are not counted
 * in the statistics below.
 *
 * The environment variable VIT_GEMM (auto, blas or xsmm), read once at the
 * first GEMM, and vit_gemm_set_path override the rule, e.g. to compare the
 * two paths on the same inputs; VIT_GEMM_BLAS is the reference, every
 * product on OpenBLAS. */
#ifndef VIT_GEMM_H
#define VIT_GEMM_H

#include "vit/core.h"

VIT_BEGIN_DECLS

typedef enum vit_gemm_path {
    VIT_GEMM_AUTO = 0, /* the per-shape rule (the default) */
    VIT_GEMM_BLAS = 1, /* OpenBLAS (cblas_sgemm / cblas_dgemm) */
    VIT_GEMM_XSMM = 2, /* libxsmm wherever it has a kernel for the shape;
                          BLAS for the rest (a beta other than 0 or 1) */
    VIT_GEMM_DNNL = 3  /* the bf16 products (vit/bf16.h's XSMM path) through
                          oneDNN wherever it has a kernel for the shape, not
                          only where the rule sends them; the float32
                          products as VIT_GEMM_AUTO */
} vit_gemm_path;

/* 1 if this library can run GEMMs through libxsmm (float32, built with it),
 * else 0.  Cannot fail; thread-safe. */
int vit_gemm_have_xsmm(void);

/* 1 if this library can run its bf16 products through oneDNN (float32,
 * built with libxsmm and oneDNN, and oneDNN finds AVX-512 BF16 or AMX on
 * this CPU), else 0.  The first call starts oneDNN.  Thread-safe. */
int vit_gemm_have_dnnl(void);

/* Sets the policy for every later GEMM of the process: VIT_GEMM_AUTO,
 * VIT_GEMM_BLAS, VIT_GEMM_XSMM or VIT_GEMM_DNNL.  Asking for VIT_GEMM_XSMM
 * in a library without libxsmm, or VIT_GEMM_DNNL where vit_gemm_have_dnnl
 * is 0, is VIT_EINVAL (nothing changed), as is an unknown value.
 * Also resets the statistics below (the shapes seen so far were decided by
 * the old policy).  NOT thread-safe: call it while no kernel runs. */
int vit_gemm_set_path(vit_gemm_path path);

/* The policy in force: the last vit_gemm_set_path, else VIT_GEMM from the
 * environment, else VIT_GEMM_AUTO.  Thread-safe. */
vit_gemm_path vit_gemm_get_path(void);

/* Whether the environment's VIT_GEMM is one this library takes (unset,
 * empty, "auto", "blas", "xsmm" in a library with libxsmm, or "dnnl" where
 * vit_gemm_have_dnnl is 1): VIT_OK, or
 * VIT_EINVAL with a message naming the value and what is accepted, e.g.
 * "VIT_GEMM=fast: expected auto, blas or xsmm".  A value it does not take
 * leaves the policy at VIT_GEMM_AUTO; the library prints nothing, so a
 * program calls this before its work to refuse the setting rather than
 * run on another path than asked.  Reads the environment once (as the
 * first GEMM does); thread-safe. */
int vit_gemm_env_check(void);

/* "auto", "blas", "xsmm" or "dnnl"; "?" for another value.  A static
 * string. */
const char *vit_gemm_path_name(vit_gemm_path path);

/* One shape the GEMM layer has seen since the last reset: row-major
 * C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C.  The bf16 products of
 * vit/bf16.h's XSMM path are counted too (bf16 = 1), once for each block of
 * rows one thread computes (M is the block's rows). */
typedef struct vit_gemm_shape {
    int trans_a, trans_b; /* 1 where op() transposes */
    int M, N, K;
    int alpha_one;        /* 1 if alpha was 1 */
    int beta;             /* 0, 1, or -1 for another value */
    vit_gemm_path path;   /* VIT_GEMM_BLAS, _XSMM or _DNNL: where it ran */
    unsigned long long calls;
    double seconds;       /* time inside these calls, summed over threads,
                             while vit_gemm_set_timing was on; else 0 */
    int bf16;             /* 1: bf16 inputs, float32 sums (vit/bf16.h) */
} vit_gemm_shape;

/* Copies up to cap of the shapes seen since the last reset, in the order
 * they were first seen, into out (which may be NULL when cap is 0), and
 * returns how many there are in all (which may exceed cap).  Thread-safe;
 * the call counts of a GEMM running at the same time may be one behind. */
size_t vit_gemm_shapes(vit_gemm_shape *out, size_t cap);

/* Turns the timing of every GEMM call on (1) or off (0) for the shapes'
 * seconds above: two clock reads per call, so leave it off for figures.
 * Thread-safe. */
void vit_gemm_set_timing(int on);

/* Forgets the shapes and counts seen so far.  NOT thread-safe: call it
 * while no kernel runs. */
void vit_gemm_stats_reset(void);

VIT_END_DECLS

#endif
