/* bfloat16 conversions and GEMMs with bf16 inputs (see vit/bf16.h).
 *
 * Rounding.  A float32 u (as bits) rounds to bf16 as
 *     (u + 0x7fff + ((u >> 16) & 1)) >> 16
 * for every non-NaN u: the integer add carries into bit 16 exactly when the
 * discarded low half is above one half, or equal to it with bit 16 odd
 * (ties to even), and because the float32 bit patterns of one sign are in
 * the order of their values the carry moves subnormals up into normals and
 * the largest finite values up to infinity as IEEE rounding does.  A NaN
 * keeps its sign and top payload bits, with the quiet bit set so that a
 * payload held only in the low half cannot turn it into an infinity; this
 * is also what vcvtne2ps2bf16 gives for NaNs.  That instruction flushes
 * subnormal inputs to zero, so the vector path redoes a block holding any.
 *
 * Layouts.  libxsmm 1.17's bf16 kernels are column-major and read their
 * first operand in "VNNI" order (pairs of consecutive k side by side, so
 * that one 32-bit lane holds the two values vdpbf16ps multiplies and adds);
 * the second operand is plain.  Row-major C[M, N] is column-major
 * C^T[N, M] = op(B)^T op(A)^T, so the kernel runs with m = N, n = M and
 * k = K rounded up to even, the packed op(B) as its first operand,
 * element (k, n) at (k / 2) * 2N + 2n + k % 2, and op(A) converted to
 * bf16 rows [M, Kp] as its second (a zero column pads an odd K, and a zero
 * row of the packed operand faces it).  The kernels take alpha 1 and beta
 * 0 or 1 only; other values go through a scratch product.  The fallback
 * layout is op(B) [K, N] as float32 values already rounded to bf16. */
#include "vit/bf16.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "dnnl.h"
#include "error.h"
#include "fastmath.h"
#include "mixed.h"
#include "threads.h"
#include "transpose.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define X86_BF16 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define X86_BF16 0
#endif

#if defined(VIT_HAVE_XSMM) && !defined(VIT_DOUBLE)
#define USE_XSMM 1
#include <libxsmm.h>
#else
#define USE_XSMM 0
#endif

#ifdef VIT_DOUBLE
#define HAVE_GEMM 0
#else
#define HAVE_GEMM 1
#endif

/* ---- the CPU --------------------------------------------------------------- */

#if X86_BF16
static unsigned detect_features(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    /* The OS saves the SSE, AVX and AVX-512 state (XCR0 bits 1, 2, 5-7)
     * and for AMX the tile configuration and data (bits 17, 18). */
    int os_avx512 = (lo & 0xe6u) == 0xe6u, os_amx = (lo & (3u << 17)) == (3u << 17);
    (void)hi;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned max_sub = a;
    int f = (b >> 16) & 1, bw = (b >> 30) & 1, amx_bf16 = (d >> 22) & 1;
    int avx512_bf16 = 0;
    if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        avx512_bf16 = (a >> 5) & 1;
    }
    unsigned out = 0;
    if (os_avx512 && f && bw && avx512_bf16)
        out |= VIT_BF16_CPU_AVX512;
    if (os_amx && amx_bf16)
        out |= VIT_BF16_CPU_AMX;
    return out;
}
#else
static unsigned detect_features(void) { return 0; }
#endif

/* -1 until read. */
static atomic_int cpu_features = -1;

unsigned vit_bf16_cpu_features(void)
{
    int f = atomic_load_explicit(&cpu_features, memory_order_relaxed);
    if (f < 0) {
        const char *hide = getenv("VIT_BF16_CPU");
        f = hide && strcmp(hide, "none") == 0 ? 0 : (int)detect_features();
        atomic_store_explicit(&cpu_features, f, memory_order_relaxed);
    }
    return (unsigned)f;
}

int vit_bf16_available(void)
{
    return vit_bf16_cpu_features() != 0;
}

static int have_avx512_bf16(void)
{
    return (vit_bf16_cpu_features() & VIT_BF16_CPU_AVX512) != 0;
}

/* ---- conversions ----------------------------------------------------------- */

static inline uint32_t float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float bits_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Branch-free (a select), so that loops over it vectorise. */
static inline uint16_t round_bits(uint32_t u)
{
    uint16_t nan = (uint16_t)((u >> 16) | 0x40u);
    uint16_t num = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return (u & 0x7fffffffu) > 0x7f800000u ? nan : num;
}

vit_bf16 vit_bf16_from_float(float x)
{
    return round_bits(float_bits(x));
}

float vit_bf16_to_float(vit_bf16 h)
{
    return bits_float((uint32_t)h << 16);
}

static void from_floats_scalar(vit_bf16 *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = round_bits(float_bits(src[i]));
}

static void to_floats_scalar(float *dst, const vit_bf16 *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bits_float((uint32_t)src[i] << 16);
}

#if X86_BF16
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* Lanes of x that are subnormal (exponent 0, mantissa not 0). */
BF16_TARGET static inline __mmask16 subnormal_lanes(__m512 x)
{
    __m512i mag = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
    __m512i m1 = _mm512_sub_epi32(mag, _mm512_set1_epi32(1));
    return _mm512_cmplt_epu32_mask(m1, _mm512_set1_epi32(0x007fffff));
}

BF16_TARGET static void from_floats_avx512(vit_bf16 *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
        /* The low half of the result is the second argument's. */
        __m512bh r = _mm512_cvtne2ps_pbh(hi, lo);
        _mm512_storeu_si512((void *)(dst + i), (__m512i)r);
        if (subnormal_lanes(lo) | subnormal_lanes(hi))
            from_floats_scalar(dst + i, src + i, 32);
    }
    if (i < n) {
        size_t rest = n - i;
        __mmask16 mlo = rest >= 16 ? 0xffff : (__mmask16)((1u << rest) - 1);
        __mmask16 mhi = rest <= 16 ? 0 : (__mmask16)((1u << (rest - 16)) - 1);
        __m512 lo = _mm512_maskz_loadu_ps(mlo, src + i);
        __m512 hi = _mm512_maskz_loadu_ps(mhi, src + i + 16);
        __m512bh r = _mm512_cvtne2ps_pbh(hi, lo);
        __mmask32 m = (__mmask32)mlo | ((__mmask32)mhi << 16);
        _mm512_mask_storeu_epi16((void *)(dst + i), m, (__m512i)r);
        if (subnormal_lanes(lo) | subnormal_lanes(hi))
            from_floats_scalar(dst + i, src + i, rest);
    }
}

BF16_TARGET static void to_floats_avx512(float *dst, const vit_bf16 *src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const void *)(src + i));
        __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
        _mm512_storeu_si512((void *)(dst + i), w);
    }
    to_floats_scalar(dst + i, src + i, n - i);
}
#endif

/* The conversions of both directions, on the best path of this CPU. */
static void from_floats(vit_bf16 *dst, const float *src, size_t n)
{
#if X86_BF16
    if (have_avx512_bf16()) {
        from_floats_avx512(dst, src, n);
        return;
    }
#endif
    from_floats_scalar(dst, src, n);
}

static void to_floats(float *dst, const vit_bf16 *src, size_t n)
{
#if X86_BF16
    if (have_avx512_bf16()) {
        to_floats_avx512(dst, src, n);
        return;
    }
#endif
    to_floats_scalar(dst, src, n);
}

int vit_bf16_from_floats(vit_bf16 *dst, const float *src, size_t n)
{
    static const char fn[] = "vit_bf16_from_floats";
    if (n == 0)
        return VIT_OK;
    TRY(vit_check_ptr(fn, "dst", dst));
    TRY(vit_check_ptr(fn, "src", src));
    from_floats(dst, src, n);
    return VIT_OK;
}

int vit_bf16_to_floats(float *dst, const vit_bf16 *src, size_t n)
{
    static const char fn[] = "vit_bf16_to_floats";
    if (n == 0)
        return VIT_OK;
    TRY(vit_check_ptr(fn, "dst", dst));
    TRY(vit_check_ptr(fn, "src", src));
    to_floats(dst, src, n);
    return VIT_OK;
}

/* dst[i] = src[i] rounded to bf16, as a float32. */
static void round_floats(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bits_float((uint32_t)round_bits(float_bits(src[i])) << 16);
}

/* ---- paths ----------------------------------------------------------------- */

static atomic_int path_setting = VIT_BF16_AUTO;

/* Why the XSMM path cannot run here, or NULL when it can. */
static const char *xsmm_missing(void)
{
    if (!HAVE_GEMM)
        return "the float64 library has no bf16 GEMM";
    if (!USE_XSMM)
        return "this library was built without libxsmm";
    if (!have_avx512_bf16())
        return "this CPU has no AVX-512 BF16";
    return NULL;
}

const char *vit_bf16_xsmm_missing(void)
{
    return xsmm_missing();
}

const char *vit_bf16_path_name(vit_bf16_path path)
{
    switch (path) {
    case VIT_BF16_AUTO: return "auto";
    case VIT_BF16_XSMM: return "xsmm";
    case VIT_BF16_FALLBACK: return "fallback";
    }
    return "?";
}

int vit_bf16_set_path(vit_bf16_path path)
{
    static const char fn[] = "vit_bf16_set_path";
    if (path != VIT_BF16_AUTO && path != VIT_BF16_XSMM && path != VIT_BF16_FALLBACK)
        return vit_fail(VIT_EINVAL, "%s: path must be VIT_BF16_AUTO, _XSMM or _FALLBACK, got %d",
                        fn, (int)path);
    const char *why = xsmm_missing();
    if (path == VIT_BF16_XSMM && why)
        return vit_fail(VIT_EINVAL, "%s: the xsmm path cannot run: %s", fn, why);
    atomic_store(&path_setting, path);
    return VIT_OK;
}

vit_bf16_path vit_bf16_get_path(void)
{
    vit_bf16_path p = (vit_bf16_path)atomic_load(&path_setting);
    if (p == VIT_BF16_AUTO)
        p = xsmm_missing() ? VIT_BF16_FALLBACK : VIT_BF16_XSMM;
    return p;
}

/* ---- packed operands ------------------------------------------------------- */

struct vit_bf16_packed {
    int K, N;            /* op(B)'s shape; 0 while empty */
    int Kp;              /* K rounded up to even (XSMM) or K (FALLBACK) */
    vit_bf16_path path;  /* VIT_BF16_AUTO while empty */
    void *data;          /* XSMM: vit_bf16 [Kp/2][N][2]; FALLBACK: float [K][N] */
    size_t cap;          /* bytes of data */
    vit_bf16 *plain;     /* XSMM with oneDNN: the same values as [Kp][N] (oneDNN's
                            layout), else NULL */
    size_t plain_cap;    /* bytes of plain */
};

vit_bf16_path vit_bf16_packed_shape(const vit_bf16_packed *p, int *K, int *N)
{
    if (K)
        *K = p->K;
    if (N)
        *N = p->N;
    return p->path;
}

void vit_bf16_packed_free(vit_bf16_packed *p)
{
    if (!p)
        return;
    free(p->data);
    free(p->plain);
    free(p);
}

static const char no_gemm_msg[] = "%s: bf16 GEMMs are in the float32 library only";

int vit_bf16_packed_new(vit_bf16_packed **out)
{
    static const char fn[] = "vit_bf16_packed_new";
    TRY(vit_check_ptr(fn, "out", out));
    *out = NULL;
    if (!HAVE_GEMM)
        return vit_fail(VIT_EINVAL, no_gemm_msg, fn);
    vit_bf16_packed *p = calloc(1, sizeof *p);
    if (!p)
        return vit_fail(VIT_ENOMEM, "%s: out of memory", fn);
    *out = p;
    return VIT_OK;
}

/* 64-byte aligned storage of at least bytes in p (old contents dropped). */
static int reserve(vit_bf16_packed *p, size_t bytes)
{
    if (p->cap >= bytes)
        return VIT_OK;
    free(p->data);
    p->data = NULL;
    p->cap = 0;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes)
        return VIT_ENOMEM;
    void *d = aligned_alloc(64, rounded);
    if (!d)
        return VIT_ENOMEM;
    p->data = d;
    p->cap = rounded;
    return VIT_OK;
}

/* VNNI from B[K, N]: rows k and k+1 interleaved, through one converted
 * pair of rows (tmp, 2N values). */
static void pack_vnni_rows(vit_bf16 *dst, vit_bf16 *tmp, int K, int N, const float *B, int ldb)
{
    for (int k = 0; k < K; k += 2) {
        from_floats(tmp, B + (size_t)k * ldb, (size_t)N);
        if (k + 1 < K)
            from_floats(tmp + N, B + (size_t)(k + 1) * ldb, (size_t)N);
        else
            memset(tmp + N, 0, (size_t)N * sizeof *tmp);
        vit_bf16 *d = dst + (size_t)k * N;
        for (int n = 0; n < N; n++) {
            d[2 * n] = tmp[n];
            d[2 * n + 1] = tmp[N + n];
        }
    }
}

/* VNNI from B[N, K] (op(B) its transpose): a row of B holds the pairs of
 * one column n side by side already; tmp holds Kp values. */
static void pack_vnni_cols(vit_bf16 *dst, vit_bf16 *tmp, int K, int Kp, int N, const float *B,
                           int ldb)
{
    tmp[Kp - 1] = 0;
    for (int n = 0; n < N; n++) {
        from_floats(tmp, B + (size_t)n * ldb, (size_t)K);
        for (int k = 0; k < Kp; k += 2) {
            vit_bf16 *d = dst + (size_t)k * N + 2 * (size_t)n;
            d[0] = tmp[k];
            d[1] = tmp[k + 1];
        }
    }
}

/* The same from B[K, N] given in bf16: only the interleave (the values a
 * conversion of B's float values would give, when they were rounded with
 * vit_bf16_from_floats). */
FM_CLONES
static void pack_vnni_rows16(vit_bf16 *restrict dst, int K, int N, const vit_bf16 *restrict B,
                             int ldb)
{
    for (int k = 0; k < K; k += 2) {
        const vit_bf16 *r0 = B + (size_t)k * ldb, *r1 = k + 1 < K ? r0 + ldb : NULL;
        vit_bf16 *restrict d = dst + (size_t)k * N;
        if (r1)
            for (int n = 0; n < N; n++) {
                d[2 * n] = r0[n];
                d[2 * n + 1] = r1[n];
            }
        else
            for (int n = 0; n < N; n++) {
                d[2 * n] = r0[n];
                d[2 * n + 1] = 0;
            }
    }
}

static void pack_fallback(float *dst, int trans_b, int K, int N, const float *B, int ldb)
{
    if (!trans_b) {
        for (int k = 0; k < K; k++)
            round_floats(dst + (size_t)k * N, B + (size_t)k * ldb, (size_t)N);
        return;
    }
    for (int n = 0; n < N; n++) {
        const float *row = B + (size_t)n * ldb;
        for (int k = 0; k < K; k++)
            dst[(size_t)k * N + n] = bits_float((uint32_t)round_bits(float_bits(row[k])) << 16);
    }
}

#if USE_XSMM
static vit_bf16 *pack_tmp(size_t n);
#endif

/* Whether the automatic policy sends a rows x N x Kp product to oneDNN.
 * libxsmm's kernels block over neither N nor (beyond bf16_k_chunk's
 * pieces) the rows, so an operand of N >= 1024 columns beyond the 1 MB L2
 * streams from memory; oneDNN's brgemm kernels block for the cache.
 * Measured one thread, one product at a time, op(A) converted from float
 * on both paths, best of 30 alternating bursts (AMD EPYC Zen 4, 2026-12-06,
 * the machine shared, load 8-10): oneDNN ahead at 2048^3 (1.41x), 2048 x
 * 1536 x 1536 (1.25x), 1024 x 3072 x 768 (1.08x), 1024^3 (1.07-1.31x),
 * 256 x 2048 x 2048 (1.43x); libxsmm ahead or level on every shape of the
 * three vit_bench models (2080 x 576 x 192: 0.92x, 2080 x 192 x 768: 0.99x,
 * 192 x 768 x 2080 transposed: 0.95x, 64 x 544 x 64: 0.87x, 32 x 68 x 64:
 * 0.50x, where oneDNN's fixed cost per call shows) and on narrow operands
 * however deep (1024 x 768 x 3072: 0.75x).  So oneDNN takes N >= 1024 with
 * at least 1 Mi values (2 MB) of op(B); the benchmark models' steps stay on
 * libxsmm. */
static int dnnl_wins(int rows, int N, int Kp)
{
    (void)rows;
    return N >= 1024 && (long)Kp * N >= 1L << 20;
}

/* p->plain [Kp][N] from p's VNNI data (just written): 1, or 0 without memory. */
static int plain_from_vnni(vit_bf16_packed *p, int Kp, int N)
{
    size_t bytes = (size_t)Kp * N * sizeof(vit_bf16);
    if (p->plain_cap < bytes) {
        free(p->plain);
        p->plain_cap = 0;
        if (!(p->plain = aligned_alloc(64, (bytes + 63) / 64 * 64)))
            return 0;
        p->plain_cap = bytes;
    }
    const vit_bf16 *v = p->data;
    for (int k = 0; k < Kp; k += 2) {
        const vit_bf16 *pair = v + (size_t)k * N;
        vit_bf16 *r0 = p->plain + (size_t)k * N, *r1 = r0 + N;
        for (int n = 0; n < N; n++) {
            r0[n] = pair[2 * n];
            r1[n] = pair[2 * n + 1];
        }
    }
    return 1;
}

/* vit_bf16_pack_b for B (float) or, when B16 is not NULL, B16 (bf16,
 * trans_b 0 only): named fn in its messages. */
static int pack_b(const char *fn, vit_bf16_packed *p, int trans_b, int K, int N, const float *B,
                  const vit_bf16 *B16, int ldb)
{
    TRY(vit_check_ptr(fn, "p", p));
    p->K = p->N = p->Kp = 0; /* empty until the pack succeeds */
    p->path = VIT_BF16_AUTO;
    if (!HAVE_GEMM)
        return vit_fail(VIT_EINVAL, no_gemm_msg, fn);
    TRY(vit_check_ptr(fn, "B", B16 ? (const void *)B16 : (const void *)B));
    TRY(vit_check_dim(fn, "K", K));
    TRY(vit_check_dim(fn, "N", N));
    if (trans_b != 0 && trans_b != 1)
        return vit_fail(VIT_EINVAL, "%s: trans_b must be 0 or 1, got %d", fn, trans_b);
    if (B16 && trans_b)
        return vit_fail(VIT_EINVAL, "%s: a bf16 B is taken untransposed only", fn);
    int need = trans_b ? K : N;
    if (ldb < need)
        return vit_fail(VIT_EINVAL, "%s: ldb = %d is below %s = %d", fn, ldb,
                        trans_b ? "K" : "N", need);
    vit_bf16_path path = vit_bf16_get_path();
    int Kp = path == VIT_BF16_XSMM ? K + (K & 1) : K;
    size_t elem = path == VIT_BF16_XSMM ? sizeof(vit_bf16) : sizeof(float);
    vit_bf16 *tmp = NULL;
#if USE_XSMM
    /* the converted row pair or column: this thread's scratch, kept */
    if (path == VIT_BF16_XSMM && !B16 && !(tmp = pack_tmp(trans_b ? (size_t)Kp : 2 * (size_t)N)))
        return vit_fail(VIT_ENOMEM, "%s: out of memory for a %d x %d operand", fn, K, N);
#endif
    if (reserve(p, (size_t)Kp * (size_t)N * elem) != VIT_OK)
        return vit_fail(VIT_ENOMEM, "%s: out of memory for a %d x %d operand", fn, K, N);
    if (path == VIT_BF16_XSMM) {
        if (B16)
            pack_vnni_rows16(p->data, K, N, B16, ldb);
        else if (trans_b)
            pack_vnni_cols(p->data, tmp, K, Kp, N, B, ldb);
        else
            pack_vnni_rows(p->data, tmp, K, N, B, ldb);
        /* oneDNN's copy, beside libxsmm's, where a product may take it:
         * every operand under VIT_GEMM_DNNL, under the automatic policy
         * those its rule sends to oneDNN (it reads the operand's shape
         * alone), so the shipped models' packs are as they were. */
        vit_gemm_path pol = vit_gemm_get_path();
        if (!vit_dnnl_missing()
            && (pol == VIT_GEMM_DNNL || (pol == VIT_GEMM_AUTO && dnnl_wins(0, N, Kp)))) {
            if (!plain_from_vnni(p, Kp, N))
                return vit_fail(VIT_ENOMEM, "%s: out of memory for a %d x %d operand", fn, K, N);
        } else {
            free(p->plain);
            p->plain = NULL;
            p->plain_cap = 0;
        }
    } else if (B16) { /* the rounded values as float32: exact */
        for (int k = 0; k < K; k++)
            to_floats((float *)p->data + (size_t)k * N, B16 + (size_t)k * ldb, (size_t)N);
    } else {
        pack_fallback(p->data, trans_b, K, N, B, ldb);
    }
    p->K = K;
    p->N = N;
    p->Kp = Kp;
    p->path = path;
    return VIT_OK;
}

int vit_bf16_pack_b(vit_bf16_packed *p, int trans_b, int K, int N, const float *B, int ldb)
{
    return pack_b("vit_bf16_pack_b", p, trans_b, K, N, B, NULL, ldb);
}

int vit_bf16_pack_b16(vit_bf16_packed *p, int K, int N, const uint16_t *B, int ldb)
{
    return pack_b("vit_bf16_pack_b16", p, 0, K, N, NULL, B, ldb);
}

/* ---- per-thread scratch ---------------------------------------------------- */

#if HAVE_GEMM
typedef struct {
    void *a;      /* op(A)'s rows: bf16 [rows, Kp] (XSMM) or float [rows, K] */
    size_t a_cap; /* bytes */
    float *t;     /* the product before alpha and beta: [rows, N] */
    size_t t_cap;
    float *g;      /* trans_a with a float A: the transpose of a block of A's rows,
                      before conversion */
    size_t g_cap;
    vit_bf16 *pk;  /* vit_bf16_pack_b's converted row pair or column */
    size_t pk_cap;
    vit_bf16_packed *own_b; /* vit_gemm_bf16's packed op(B) */
} scratch;

static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static pthread_key_t scratch_key;
static int scratch_key_ok;

static void scratch_free(void *v)
{
    scratch *s = v;
    free(s->a);
    free(s->t);
    free(s->pk);
    free(s->g);
    vit_bf16_packed_free(s->own_b);
    free(s);
}

static void scratch_setup(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

static scratch *my_scratch(void)
{
    pthread_once(&scratch_once, scratch_setup);
    if (!scratch_key_ok)
        return NULL;
    scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    return s;
}

/* *buf with at least bytes (64-byte aligned), or NULL. */
static void *grow(void **buf, size_t *cap, size_t bytes)
{
    if (*cap >= bytes)
        return *buf;
    size_t rounded = (bytes + 63) / 64 * 64;
    void *d = aligned_alloc(64, rounded);
    if (!d)
        return NULL;
    free(*buf);
    *buf = d;
    *cap = rounded;
    return d;
}
#endif

#if USE_XSMM
static vit_bf16 *pack_tmp(size_t n)
{
    scratch *s = my_scratch();
    return s ? grow((void **)&s->pk, &s->pk_cap, n * sizeof *s->pk) : NULL;
}
#endif

/* ---- libxsmm kernels ------------------------------------------------------- */

#if USE_XSMM
static pthread_once_t xsmm_once = PTHREAD_ONCE_INIT;

static void xsmm_setup(void)
{
    libxsmm_init();
}

/* A per-thread direct-mapped cache in front of libxsmm's registry, whose
 * lookups take a lock: a step calls a few dozen shapes many times. */
typedef struct {
    int m, n, k, ldb, ldc, beta; /* lda = m: the packed layout */
    libxsmm_bsmmfunction f;
} kernel_entry;

enum { KCACHE = 64 };
static _Thread_local kernel_entry kcache[KCACHE];

static libxsmm_bsmmfunction bf16_kernel(int m, int n, int k, int ldb, int ldc, int beta)
{
    unsigned h = ((unsigned)m * 31u + (unsigned)n) * 31u + (unsigned)k;
    h = ((h * 31u + (unsigned)ldb) * 31u + (unsigned)ldc) * 2u + (unsigned)beta;
    kernel_entry *e = &kcache[h % KCACHE];
    if (e->f && e->m == m && e->n == n && e->k == k && e->ldb == ldb && e->ldc == ldc
        && e->beta == beta)
        return e->f;
    pthread_once(&xsmm_once, xsmm_setup);
    libxsmm_blasint lda = m, ldbb = ldb, ldcc = ldc;
    int flags = LIBXSMM_GEMM_FLAG_VNNI_A | (beta ? 0 : LIBXSMM_GEMM_FLAG_BETA_0);
    int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    float one = 1, b = (float)beta;
    libxsmm_bsmmfunction f =
        libxsmm_bsmmdispatch(m, n, k, &lda, &ldbb, &ldcc, &one, &b, &flags, &prefetch);
    if (f)
        *e = (kernel_entry){m, n, k, ldb, ldc, beta, f};
    return f;
}

/* Reduction chunk, in the spirit of src/kernels/gemm.c's k_chunk: libxsmm's kernels
 * do not block over k, so a packed operand beyond the cache streams through
 * it once per block of C's rows.  In bf16 values: one piece up to 640 KB of
 * the operand, else chunks of about 256 KB, multiples of 32 (whole VNNI
 * pairs, whole cache lines of op(A)'s rows). */
static int bf16_k_chunk(int N, int Kp)
{
    const long whole = 327680, budget = 131072; /* bf16 values */
    if ((long)Kp * N <= whole)
        return Kp;
    long kmax = budget / N;
    if (kmax < 64)
        kmax = 64;
    if (Kp <= kmax)
        return Kp;
    long pieces = (Kp + kmax - 1) / kmax;
    long kc = (Kp + pieces - 1) / pieces;
    kc = (kc + 31) / 32 * 32;
    return kc < Kp ? (int)kc : Kp;
}

/* C[rows, N] (row stride ldc) = (beta 0) or += (beta 1) Ab[rows, Kp] B,
 * the reduction in chunks: chunk k0.. is pair row k0 / 2 of the packed
 * operand (offset k0 N) and column k0 of Ab.  0, with C untouched, when
 * libxsmm has no kernel for a piece. */
static int xsmm_product(const vit_bf16_packed *B, int rows, const vit_bf16 *Ab, float *C, int ldc,
                        int beta)
{
    int N = B->N, Kp = B->Kp, kc = bf16_k_chunk(N, Kp);
    const vit_bf16 *Bp = B->data;
    for (int k0 = 0; k0 < Kp; k0 += kc) {
        int len = Kp - k0 < kc ? Kp - k0 : kc;
        if (!bf16_kernel(N, rows, len, Kp, ldc, k0 == 0 ? beta : 1))
            return 0; /* before C is touched */
    }
    for (int k0 = 0; k0 < Kp; k0 += kc) {
        int len = Kp - k0 < kc ? Kp - k0 : kc;
        libxsmm_bsmmfunction f = bf16_kernel(N, rows, len, Kp, ldc, k0 == 0 ? beta : 1);
        f((const libxsmm_bfloat16 *)(Bp + (size_t)k0 * N), (const libxsmm_bfloat16 *)(Ab + k0),
          C);
    }
    return 1;
}
#endif

/* ---- GEMMs ----------------------------------------------------------------- */

#if HAVE_GEMM
typedef struct {
    int trans_a, K;
    float alpha, beta;
    const float *A;
    const vit_bf16 *A16; /* op(A) given in bf16 instead (vit_gemm_bf16_a16), or NULL */
    int lda;
    const vit_bf16_packed *B;
    float *C;
    int ldc;
    atomic_int failed;
} gemm_job;

#if USE_XSMM
/* Row r of op(A), for r0 <= r < r0 + rows, converted to bf16 into
 * dst[(r - r0) * ld ..] (K values, then zeros up to ld). */
static int convert_a(scratch *s, vit_bf16 *dst, int ld, const gemm_job *j, int r0, int rows)
{
    int K = j->K;
    if (!j->trans_a) {
        for (int r = 0; r < rows; r++) {
            vit_bf16 *d = dst + (size_t)r * ld;
            if (j->A16)
                memcpy(d, j->A16 + (size_t)(r0 + r) * j->lda, (size_t)K * sizeof *d);
            else
                from_floats(d, j->A + (size_t)(r0 + r) * j->lda, (size_t)K);
        }
    } else if (j->A16) {
        /* A is [K, M] in bf16: its columns r0.. moved into dst's rows by
         * 16-bit register tiles (src/kernels/transpose.c), no conversion */
        vit_transpose16(K, rows, j->A16 + r0, j->lda, dst, ld);
    } else {
        /* A is [K, M]: row k of A holds column k of op(A).  KC rows of A
         * at a time are transposed in float32 by register tiles
         * (src/kernels/transpose.c; times 1 is exact) into h [rows, KC],
         * then converted row by row: a scatter of 2-byte values down the
         * columns ran the large model's MLP weight gradient at a fifth of
         * the kernel's rate.  Two small buffers, not a float copy of the
         * whole op(A). */
        enum { KC = 64 };
        float *h = grow((void **)&s->g, &s->g_cap, (size_t)KC * rows * sizeof *h);
        if (!h)
            return 0;
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC;
            vit_transpose_scaled(kc, kc, rows, 1.0f, j->A + (size_t)k0 * j->lda + r0, j->lda, h,
                                 kc);
            for (int r = 0; r < rows; r++)
                from_floats(dst + (size_t)r * ld + k0, h + (size_t)r * kc, (size_t)kc);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int k = K; k < ld; k++)
            dst[(size_t)r * ld + k] = 0;
    return 1;
}
#endif

/* The same rows of op(A) rounded to bf16, as float32 [rows, K]. */
static void round_a(float *dst, const gemm_job *j, int r0, int rows)
{
    int K = j->K;
    if (j->A16) {
        for (int r = 0; r < rows && !j->trans_a; r++)
            to_floats(dst + (size_t)r * K, j->A16 + (size_t)(r0 + r) * j->lda, (size_t)K);
        for (int k = 0; k < K && j->trans_a; k++) {
            const vit_bf16 *a = j->A16 + (size_t)k * j->lda + r0;
            for (int r = 0; r < rows; r++)
                dst[(size_t)r * K + k] = vit_bf16_to_float(a[r]);
        }
        return;
    }
    if (!j->trans_a) {
        for (int r = 0; r < rows; r++)
            round_floats(dst + (size_t)r * K, j->A + (size_t)(r0 + r) * j->lda, (size_t)K);
        return;
    }
    for (int k = 0; k < K; k++) {
        const float *a = j->A + (size_t)k * j->lda + r0;
        for (int r = 0; r < rows; r++)
            dst[(size_t)r * K + k] = bits_float((uint32_t)round_bits(float_bits(a[r])) << 16);
    }
}

#if USE_XSMM
/* C[rows, N] = alpha T + beta C (C not read when beta is 0). */
static void combine(float *C, int ldc, const float *T, int rows, int N, float alpha, float beta)
{
    for (int r = 0; r < rows; r++) {
        float *c = C + (size_t)r * ldc;
        const float *t = T + (size_t)r * N;
        if (beta == 0)
            for (int n = 0; n < N; n++)
                c[n] = alpha * t[n];
        else
            for (int n = 0; n < N; n++)
                c[n] = alpha * t[n] + beta * c[n];
    }
}

/* The VNNI operand back as float32 [Kp, N] (exact). */
static void unpack_vnni(float *dst, const vit_bf16_packed *B)
{
    const vit_bf16 *p = B->data;
    int N = B->N;
    for (int k = 0; k < B->Kp; k++)
        for (int n = 0; n < N; n++)
            dst[(size_t)k * N + n] =
                vit_bf16_to_float(p[(size_t)(k / 2) * 2 * N + 2 * (size_t)n + (k & 1)]);
}

/* C[rows, N] = (beta 0) or += (beta 1) Ab B: on oneDNN when the policy
 * sends the product there and B has oneDNN's copy, else (or when oneDNN
 * has no kernel for it) on libxsmm; counted in vit/gemm.h's statistics.
 * 0 when neither can, C untouched. */
static int bf16_product(const gemm_job *j, int rows, const vit_bf16 *Ab, float *C, int ldc,
                        int beta)
{
    const vit_bf16_packed *B = j->B;
    vit_gemm_path pol = vit_gemm_get_path();
    unsigned long long t0 = vit_gemm_clock();
    vit_gemm_path path = VIT_GEMM_XSMM;
    int ok = 0;
    if (B->plain
        && (pol == VIT_GEMM_DNNL || (pol == VIT_GEMM_AUTO && dnnl_wins(rows, B->N, B->Kp)))
        && vit_dnnl_bf16(rows, B->N, B->Kp, Ab, B->plain, C, ldc, beta)) {
        path = VIT_GEMM_DNNL;
        ok = 1;
    }
    if (!ok)
        ok = xsmm_product(B, rows, Ab, C, ldc, beta);
    if (ok)
        vit_gemm_note_bf16(j->trans_a, rows, B->N, j->K, beta, path, t0);
    return ok;
}

/* Rows r0.. of C on the XSMM path.  Where libxsmm has no kernel the same
 * bf16 values go through the float32 GEMM instead. */
static int rows_xsmm(scratch *s, const gemm_job *j, int r0, int rows, float *C)
{
    const vit_bf16_packed *B = j->B;
    int N = B->N, Kp = B->Kp;
    const vit_bf16 *Ab;
    if (j->A16 && !j->trans_a && j->lda == Kp) {
        /* op(A)'s rows given in bf16 as the kernel reads them: no copy */
        Ab = j->A16 + (size_t)r0 * j->lda;
    } else {
        vit_bf16 *a = grow(&s->a, &s->a_cap, (size_t)rows * Kp * sizeof *a);
        if (!a || !convert_a(s, a, Kp, j, r0, rows))
            return 0;
        Ab = a;
    }
    if (j->alpha == 1 && (j->beta == 0 || j->beta == 1)
        && bf16_product(j, rows, Ab, C, j->ldc, j->beta == 1))
        return 1;
    float *T = grow((void **)&s->t, &s->t_cap, (size_t)rows * N * sizeof *T);
    if (!T)
        return 0;
    if (bf16_product(j, rows, Ab, T, N, 0)) {
        combine(C, j->ldc, T, rows, N, j->alpha, j->beta);
        return 1;
    }
    float *Bf = malloc((size_t)Kp * N * sizeof *Bf), *Af = malloc((size_t)rows * Kp * sizeof *Af);
    if (Bf && Af) {
        unpack_vnni(Bf, B);
        to_floats(Af, Ab, (size_t)rows * Kp);
        vit_gemm_rm(CblasNoTrans, CblasNoTrans, rows, N, Kp, j->alpha, Af, Kp, Bf, N, j->beta, C,
                    j->ldc);
    }
    free(Bf);
    free(Af);
    return Bf && Af;
}
#endif

/* Rows r0 .. r0 + rows of C. */
static int rows_product(const gemm_job *j, int r0, int rows)
{
    scratch *s = my_scratch();
    if (!s)
        return 0;
    float *C = j->C + (size_t)r0 * j->ldc;
#if USE_XSMM
    if (j->B->path == VIT_BF16_XSMM)
        return rows_xsmm(s, j, r0, rows, C);
#endif
    int N = j->B->N, K = j->K;
    float *Ar = grow(&s->a, &s->a_cap, (size_t)rows * K * sizeof *Ar);
    if (!Ar)
        return 0;
    round_a(Ar, j, r0, rows);
    vit_gemm_rm(CblasNoTrans, CblasNoTrans, rows, N, K, j->alpha, Ar, K, j->B->data, N, j->beta,
                C, j->ldc);
    return 1;
}

static void job_rows(void *v, size_t r0, size_t r1)
{
    gemm_job *j = v;
    if (!rows_product(j, (int)r0, (int)(r1 - r0)))
        atomic_store(&j->failed, 1);
}
#endif

#if HAVE_GEMM
/* Runs the rows of job j (an M x N x K product) split like the float32
 * GEMMs (src/kernels/threads.c): blocks of at least 16 rows, one per thread, when
 * the product is large enough.  VIT_OK, or VIT_ENOMEM (fn's message) when a
 * thread found no scratch. */
static int run_job(gemm_job *j, int M, int N, int K, const char *fn)
{
    int nt = vit_threads_for(2.0 * M * (double)N * K);
    if (nt > M / 16)
        nt = M / 16 > 1 ? M / 16 : 1;
    if (nt <= 1)
        job_rows(j, 0, (size_t)M);
    else
        vit_parallel(nt, (size_t)M, job_rows, j);
    if (atomic_load(&j->failed))
        return vit_fail(VIT_ENOMEM, "%s: out of memory for scratch (%d x %d x %d)", fn, M, N, K);
    return VIT_OK;
}
#endif

int vit_gemm_bf16_packed(int trans_a, int M, int N, int K, float alpha, const float *A, int lda,
                         const vit_bf16_packed *B, float beta, float *C, int ldc)
{
    static const char fn[] = "vit_gemm_bf16_packed";
#if !HAVE_GEMM
    (void)trans_a, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
    (void)beta, (void)C, (void)ldc;
    return vit_fail(VIT_EINVAL, no_gemm_msg, fn);
#else
    TRY(vit_check_ptr(fn, "A", A));
    TRY(vit_check_ptr(fn, "B", B));
    TRY(vit_check_ptr(fn, "C", C));
    TRY(vit_check_dim(fn, "M", M));
    TRY(vit_check_dim(fn, "N", N));
    TRY(vit_check_dim(fn, "K", K));
    if (trans_a != 0 && trans_a != 1)
        return vit_fail(VIT_EINVAL, "%s: trans_a must be 0 or 1, got %d", fn, trans_a);
    if (lda < (trans_a ? M : K))
        return vit_fail(VIT_EINVAL, "%s: lda = %d is below %s = %d", fn, lda,
                        trans_a ? "M" : "K", trans_a ? M : K);
    if (ldc < N)
        return vit_fail(VIT_EINVAL, "%s: ldc = %d is below N = %d", fn, ldc, N);
    if (B->path == VIT_BF16_AUTO)
        return vit_fail(VIT_EINVAL, "%s: B is empty (not packed, or its last pack failed)", fn);
    if (B->K != K || B->N != N)
        return vit_fail(VIT_EINVAL, "%s: B holds a %d x %d operand, the product needs %d x %d",
                        fn, B->K, B->N, K, N);
    gemm_job j = {trans_a, K, alpha, beta, A, NULL, lda, B, C, ldc, 0};
    return run_job(&j, M, N, K, fn);
#endif
}

int vit_gemm_bf16_a16(int trans_a, int trans_b, int M, int N, int K, const uint16_t *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
#if !HAVE_GEMM
    (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B;
    (void)ldb, (void)beta, (void)C, (void)ldc;
    return vit_fail(VIT_EINVAL, no_gemm_msg, "vit_gemm_bf16_a16");
#else
    scratch *s = my_scratch();
    if (!s || (!s->own_b && vit_bf16_packed_new(&s->own_b) != VIT_OK))
        return vit_fail(VIT_ENOMEM, "vit_gemm_bf16_a16: out of memory for scratch");
    TRY(vit_bf16_pack_b(s->own_b, trans_b, K, N, B, ldb));
    return vit_gemm_bf16_packed_a16(trans_a, M, N, K, A, lda, s->own_b, beta, C, ldc);
#endif
}

int vit_gemm_bf16_a16_b16(int trans_a, int M, int N, int K, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
#if !HAVE_GEMM
    (void)trans_a, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb;
    (void)beta, (void)C, (void)ldc;
    return vit_fail(VIT_EINVAL, no_gemm_msg, "vit_gemm_bf16_a16_b16");
#else
    scratch *s = my_scratch();
    if (!s || (!s->own_b && vit_bf16_packed_new(&s->own_b) != VIT_OK))
        return vit_fail(VIT_ENOMEM, "vit_gemm_bf16_a16_b16: out of memory for scratch");
    TRY(vit_bf16_pack_b16(s->own_b, K, N, B, ldb));
    return vit_gemm_bf16_packed_a16(trans_a, M, N, K, A, lda, s->own_b, beta, C, ldc);
#endif
}

int vit_gemm_bf16_packed_a16(int trans_a, int M, int N, int K, const uint16_t *A, int lda,
                             const vit_bf16_packed *B, float beta, float *C, int ldc)
{
    static const char fn[] = "vit_gemm_bf16_packed_a16";
#if !HAVE_GEMM
    (void)trans_a, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)beta, (void)C;
    (void)ldc;
    return vit_fail(VIT_EINVAL, no_gemm_msg, fn);
#else
    if (B->K != K || B->N != N || B->path == VIT_BF16_AUTO)
        return vit_fail(VIT_EINVAL, "%s: B holds a %d x %d operand, the product needs %d x %d",
                        fn, B->K, B->N, K, N);
    gemm_job j = {trans_a, K, 1, beta, NULL, A, lda, B, C, ldc, 0};
    return run_job(&j, M, N, K, fn);
#endif
}

int vit_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#if !HAVE_GEMM
    (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
    return vit_fail(VIT_EINVAL, no_gemm_msg, "vit_gemm_bf16");
#else
    scratch *s = my_scratch();
    if (!s || (!s->own_b && vit_bf16_packed_new(&s->own_b) != VIT_OK))
        return vit_fail(VIT_ENOMEM, "vit_gemm_bf16: out of memory for scratch");
    TRY(vit_bf16_pack_b(s->own_b, trans_b, K, N, B, ldb));
    return vit_gemm_bf16_packed(trans_a, M, N, K, alpha, A, lda, s->own_b, beta, C, ldc);
#endif
}
