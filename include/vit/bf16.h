/* vit/bf16.h - bfloat16 numbers and GEMMs with bfloat16 inputs.
 *
 * bfloat16 (bf16) is the upper half of a float32: the same sign bit and
 * 8-bit exponent (so the same range, infinities and NaNs), and 7 stored
 * mantissa bits (8 significant bits with the implicit one) where float32
 * has 23.  A float32 rounded to bf16 has a relative error of at most 2^-8
 * (half a unit in the 8th significant bit, whose unit is up to 2^-7 of the
 * value, as float32's unit roundoff is 2^-24); a bf16 converted to float32 is
 * exact.  A product of two bf16 values fits a float32 exactly, which is why
 * CPUs with bf16 instructions multiply bf16 inputs and accumulate in
 * float32 at about twice the float32 rate.
 *
 * Conversions here round to nearest, ties to even, on every input: normal
 * and subnormal values alike (a float32 subnormal becomes the nearest bf16
 * subnormal, not zero), infinities stay infinities, a finite value within
 * half a bf16 unit of the largest float32 range rounds to infinity as
 * round-to-nearest-even gives, and a NaN stays a NaN of the same sign (quiet,
 * its top 6 payload bits kept).  On a CPU with AVX-512 BF16 the bulk
 * conversion runs on its instructions (vcvtne2ps2bf16, whose subnormal
 * inputs the library rounds itself, since the instruction flushes them to
 * zero); elsewhere a portable loop gives the same bits.
 *
 * The GEMMs compute row-major C[M, N] = alpha op(A)[M, K] op(B)[K, N] +
 * beta C with every element of op(A) and op(B) rounded to bf16 and the sums
 * in float32, the conventions of the library's float32 GEMM (vit/gemm.h):
 * op(X) is X or its transpose, beta 0 means C is only written (never read,
 * so it may hold NaNs), ld* are row strides.  Two paths compute them:
 *  - VIT_BF16_XSMM, in a build with libxsmm on a CPU with AVX-512 BF16:
 *    libxsmm's bf16 JIT kernels (bf16 pairs multiplied and added into
 *    float32 accumulators; the instruction treats bf16 subnormals as zero);
 *  - VIT_BF16_FALLBACK everywhere else: the float32 GEMM of vit/gemm.h on
 *    the bf16-rounded inputs, which differs from the bf16 kernels only in
 *    the order of the float32 additions (and in subnormals, kept here).
 * Both results are within the bound of tests/test_bf16.c of the exact
 * product of the rounded inputs.  A CPU with AMX-BF16 (Intel Sapphire
 * Rapids and later) also has AVX-512 BF16 and runs the XSMM path; libxsmm
 * 1.17 has no AMX kernels.
 *
 * The operand op(B) (a weight, usually) is converted and laid out for the
 * kernel once by vit_bf16_pack_b and then multiplied any number of times
 * (vit_gemm_bf16_packed), e.g. packed once per training step and used by
 * every slice of the batch.  op(A) (activations) is converted by each call.
 *
 * Precision: these functions work on float32 buffers whatever the library's
 * vit_real.  In the float64 library (libvit-f64, for gradient checks) the
 * conversions and vit_bf16_cpu_features work as here, but there is no bf16
 * GEMM: vit_bf16_packed_new, vit_bf16_pack_b, vit_gemm_bf16 and
 * vit_gemm_bf16_packed return VIT_EINVAL ("float32 library only") and
 * vit_bf16_get_path returns VIT_BF16_FALLBACK.
 *
 * Threads: the GEMMs split the rows of C across the library's threads like
 * its float32 GEMMs (vit_set_threads; inline when called from inside one of
 * the library's parallel loops); every element of C is computed by one
 * thread, so a result does not depend on timing.  A packed operand may be
 * read by several GEMMs on different threads at once, and must not be
 * repacked or freed while they run. */
#ifndef VIT_BF16_H
#define VIT_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "vit/core.h"

VIT_BEGIN_DECLS

/* A bfloat16 value: the upper 16 bits of the float32 it rounds. */
typedef uint16_t vit_bf16;

/* ---- the CPU --------------------------------------------------------------- */

/* Bits of vit_bf16_cpu_features. */
enum vit_bf16_feature {
    VIT_BF16_CPU_AVX512 = 1, /* AVX-512 BF16 (vcvtne2ps2bf16, vdpbf16ps), usable by the OS */
    VIT_BF16_CPU_AMX = 2     /* AMX-BF16 tiles (the OS's permission is not asked here) */
};

/* The bf16 instructions of this CPU that the OS lets programs use: a bit
 * set of vit_bf16_feature, 0 when there are none (or on a CPU that is not
 * x86-64).  Read once (cpuid, xgetbv).  Cannot fail; thread-safe. */
unsigned vit_bf16_cpu_features(void);

/* 1 if this CPU has AVX-512 BF16 or AMX-BF16 (vit_bf16_cpu_features() != 0),
 * else 0: where bf16 GEMMs can run faster than float32 ones.  Cannot fail;
 * thread-safe. */
int vit_bf16_available(void);

/* ---- conversions ----------------------------------------------------------- */

/* x rounded to bf16, to nearest with ties to even (see the top of this
 * file for NaN, infinities and subnormals).  Cannot fail; thread-safe. */
vit_bf16 vit_bf16_from_float(float x);

/* The float32 value of h (exact).  Cannot fail; thread-safe. */
float vit_bf16_to_float(vit_bf16 h);

/* dst[i] = vit_bf16_from_float(src[i]) for i < n, bitwise, vectorised where
 * the CPU has AVX-512 BF16.  dst and src must not overlap.  VIT_EINVAL when
 * n > 0 and a pointer is NULL.  Reentrant (one thread). */
int vit_bf16_from_floats(vit_bf16 *dst, const float *src, size_t n);

/* dst[i] = vit_bf16_to_float(src[i]) for i < n (exact).  Same rules as
 * vit_bf16_from_floats. */
int vit_bf16_to_floats(float *dst, const vit_bf16 *src, size_t n);

/* ---- GEMM paths ------------------------------------------------------------ */

typedef enum vit_bf16_path {
    VIT_BF16_AUTO = 0,    /* XSMM where this build and CPU can, else FALLBACK (the default) */
    VIT_BF16_XSMM = 1,    /* libxsmm's bf16 kernels (float32 library with libxsmm, AVX-512 BF16) */
    VIT_BF16_FALLBACK = 2 /* the float32 GEMM on bf16-rounded inputs */
} vit_bf16_path;

/* Sets the path of every later vit_bf16_pack_b (a packed operand keeps the
 * path it was packed for; vit_gemm_bf16 packs on each call).  VIT_BF16_XSMM
 * where it cannot run (no libxsmm in this build, no AVX-512 BF16 on this
 * CPU, or the float64 library) is VIT_EINVAL with a message saying which,
 * and nothing changes; so is an unknown value.  NOT thread-safe: call it
 * while no bf16 GEMM or pack runs. */
int vit_bf16_set_path(vit_bf16_path path);

/* The path a vit_bf16_pack_b would take now: VIT_BF16_XSMM or
 * VIT_BF16_FALLBACK (never AUTO).  Thread-safe. */
vit_bf16_path vit_bf16_get_path(void);

/* "auto", "xsmm" or "fallback"; "?" for another value.  A static string. */
const char *vit_bf16_path_name(vit_bf16_path path);

/* ---- GEMMs ----------------------------------------------------------------- */

/* An operand op(B)[K, N] rounded to bf16 and laid out for the path it was
 * packed for.  Opaque; owns its storage, which a later pack of the same or
 * a smaller size reuses (no allocation per step). */
typedef struct vit_bf16_packed vit_bf16_packed;

/* *out = a new, empty packed operand (to be filled by vit_bf16_pack_b).
 * VIT_EINVAL for a NULL out or in the float64 library, VIT_ENOMEM. */
int vit_bf16_packed_new(vit_bf16_packed **out);

/* Frees p and its storage.  NULL is a no-op. */
void vit_bf16_packed_free(vit_bf16_packed *p);

/* Fills p with op(B)[K, N] rounded to bf16, for the path vit_bf16_get_path
 * names: op(B) is B[K, N] (trans_b 0) or the transpose of B[N, K] (trans_b
 * 1), with row stride ldb (>= N, resp. >= K).  Replaces what p held.
 * Errors: VIT_EINVAL for a NULL pointer, K or N not positive (or above
 * 2^30), ldb too small, trans_b not 0 or 1, or in the float64 library;
 * VIT_ENOMEM.  After an error p holds nothing (a GEMM with it is
 * VIT_EINVAL) but keeps its storage.  The conversion runs on the calling
 * thread. */
int vit_bf16_pack_b(vit_bf16_packed *p, int trans_b, int K, int N, const float *B, int ldb);

/* The shape op(B) of the last successful pack of p: *K and *N (either may
 * be NULL); both 0 for an empty one.  Returns the path it was packed for
 * (VIT_BF16_AUTO for an empty p).  p must not be NULL. */
vit_bf16_path vit_bf16_packed_shape(const vit_bf16_packed *p, int *K, int *N);

/* C[M, N] = alpha op(A)[M, K] B + beta C, B a packed op(B)[K, N] (its K and
 * N must be these): op(A) is A[M, K] (trans_a 0) or the transpose of
 * A[K, M] (trans_a 1), row stride lda (>= K, resp. >= M); C has row stride
 * ldc >= N and must not overlap A.  op(A) is rounded to bf16 as it is read
 * (into the calling threads' scratch buffers); the sums are float32.  beta
 * 0 overwrites C without reading it.  Errors: VIT_EINVAL (NULL pointer,
 * sizes, strides, an empty B or one of another shape, the float64 library),
 * VIT_ENOMEM (scratch; C is then unspecified).  See the top of this file
 * for threads. */
int vit_gemm_bf16_packed(int trans_a, int M, int N, int K, float alpha, const float *A, int lda,
                         const vit_bf16_packed *B, float beta, float *C, int ldc);

/* The same with op(B) as float32: packs it into this thread's scratch
 * operand and calls vit_gemm_bf16_packed.  The arguments and errors are
 * those of vit_bf16_pack_b and vit_gemm_bf16_packed.  For an op(B) used in
 * more than one product, pack it once instead. */
int vit_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* ---- mixed precision training ---------------------------------------------- */

/* The precision of a training step's matrix products (the config key
 * precision, vit/model.h): VIT_PRECISION_FP32 (the default) runs them in
 * float32; VIT_PRECISION_BF16 rounds their inputs (weights, activations and
 * the gradients of activations) to bf16 and sums in float32, while master
 * weights, optimizer state, layer norm, softmax, the loss and every
 * reduction stay float32; VIT_PRECISION_AUTO is BF16 where this CPU and
 * library run bf16 kernels (the XSMM path above), else FP32. */
enum { VIT_PRECISION_FP32 = 0, VIT_PRECISION_BF16 = 1, VIT_PRECISION_AUTO = 2 };

/* "fp32", "bf16" or "auto"; "?" for another value.  A static string. */
const char *vit_precision_name(int precision);

/* What precision comes to on this CPU and build: VIT_PRECISION_BF16 when
 * it is BF16 or AUTO and the XSMM path can run (a float32 library with
 * libxsmm, a CPU with AVX-512 BF16 or AMX-BF16), else VIT_PRECISION_FP32:
 * BF16 asked for where it cannot run falls back to float32 (the emulation
 * of the FALLBACK path would be slower than float32 itself).  why (when not
 * NULL and cap > 0) gets one line saying what was chosen and why, e.g.
 * "bf16 (this CPU has AVX-512 BF16)" or "fp32 (bf16 was asked for, but this
 * CPU has no AVX-512 BF16)"; truncated to cap bytes, NUL-terminated.  An
 * unknown precision is FP32 with why saying so.  Setting the environment
 * variable VIT_BF16_CPU=none before the first call makes the library see
 * no bf16 instructions (vit_bf16_cpu_features() 0), to try the fallback on
 * a CPU that has them.  Thread-safe. */
int vit_precision_resolve(int precision, char *why, size_t cap);

/* Turns mixed precision on (on != 0) or off for the library's layer GEMMs
 * called from this thread: the linear layers (vit_linear_*, vit_op_linear,
 * vit_op_linear_add, vit_op_linear_gelu), the attention projections
 * (vit_mha_*, vit_op_mha) and the patch embedding (vit_patch_embed_*,
 * vit_op_patch_embed), forward and both products of the backward (dX and
 * dW), then compute as vit_gemm_bf16 does, on the path vit_bf16_get_path
 * names.  So do the products of the standard attention core
 * (vit_sdpa_forward's s Q K^T and P V, vit_sdpa_backward's P^T dO, dO V^T,
 * dS K and dS^T Q; the core of vit_mha and of the tape's attention ops
 * below the tiled core's threshold) where its heads are at least 64 wide
 * (d_k and d_v) with at least 64 keys; narrower or shorter pairs (the
 * digits and medium shapes) stay float32, where a bf16 call's conversions
 * cost what its products save or more.  The softmax and its gradient stay
 * float32, and so do the tiled and windowed cores.  Tape ops in grad mode also keep some saved
 * activations in bf16: vit_op_linear_gelu its GELU', vit_op_block its inner
 * activations (see vit/block.h); every tensor an op returns is still float.
 * Everything else is unchanged.  A layer product that cannot get its
 * scratch memory is skipped (its output unspecified, the message in
 * vit_last_error) and the thread remembers VIT_ENOMEM, which the next call
 * returns instead of the previous setting (and forgets); the attention core
 * returns VIT_ENOMEM itself.  Returns the previous setting (0 or 1), or
 * VIT_ENOMEM as said.  Off is the default.  The training step
 * (vit_model_train_grads) turns it on by itself on its slices' threads for
 * a model whose config asks for bf16; this call is for the layers on their
 * own (tests, one's own training loop).  In the float64 library it changes
 * nothing and returns 0. */
int vit_bf16_thread_mixed(int on);

VIT_END_DECLS

#endif
