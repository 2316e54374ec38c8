/* Branch-free float32 exp and normal-distribution helpers for GELU.
 *
 * Private to the library.  Every helper is static inline, straight-line
 * code: no branches (selects only), no libm calls, 2^k built from its bits
 * through memcpy.  So gcc -O3 vectorises a loop calling them (4 lanes on
 * plain x86-64 SSE2), which it cannot do around calls to erff/expf.
 * Only the float32 build uses them; the float64 build keeps libm.
 *
 * The one approximation besides exp is the scaled normal tail
 *     R(t) = exp(t^2/2) Q(t) = exp(t^2/2) (1 - Phi(t)),   t >= 0,
 * so that Q(t) = exp(-t^2/2) R(t) keeps its relative accuracy far into the
 * left tail, where 1 - (1 + erf)/2 would lose every digit.  R is smooth,
 * R(0) = 1/2 and R(t) ~ 1/(t sqrt(2 pi)), which a rational P4/Q5 with
 * positive coefficients fits well.  exp(-t^2/2) is computed from a split
 * t = th + tl (th with 12 significant bits, so th^2 is exact): the rounding
 * error of t*t alone would cost 100 * 2^-24 relative at t = 14.
 *
 * Measured in float32 (every float t in [0, 14] against double libm):
 * R max relative error 4.2e-7 (mostly Horner rounding; 3.3e-8 is the fit),
 * exp(-t^2/2) 1.2e-7.  GELU and GELU' over every float in [-20, 20]:
 * see tests/test_fastmath.c (forward 5.3e-7 relative, backward 2.8e-7
 * relative to Phi + |x| phi). */
#ifndef VIT_FASTMATH_H
#define VIT_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* FM_CLONES: on x86-64 gcc/clang, compile the marked loop three times,
 * for AVX-512F, AVX2 and the baseline, and pick one at load time (ifunc):
 * AVX2 machines run 8 lanes (~2x faster GELU than SSE2), AVX-512 ones 16
 * (GELU another 1.4x, layer norm 1.5x on the digits step).  Feature clones
 * ("avx2") rather than arch= ones: gcc dispatches an arch= clone on the
 * CPU model (genuine Haswell only), a feature clone on the CPUID bit.  No
 * clone has FMA (not in these features, and -std=c11 turns contraction off
 * in gcc), so elementwise loops round identically in every clone.  Loops
 * with an `omp simd` reduction (layer norm's sums) add their lanes in an
 * order that depends on the width, so their last bits can differ between
 * machines (as BLAS results do), never between runs on one machine.
 * Empty where target_clones is missing. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define FM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef FM_CLONES
#define FM_CLONES
#endif

/* always_inline: a loop vectorises only with the helpers inlined, and gcc
 * may decline to inline into a target clone (it does for arch= clones:
 * the loop then calls fm_gelu per element, unvectorised). */
#if defined(__GNUC__)
#define FM_INLINE static inline __attribute__((always_inline))
#else
#define FM_INLINE static inline
#endif

FM_INLINE uint32_t fm_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

FM_INLINE float fm_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* exp results carry a factor 2^FM_EXP_SHIFT, removed by the caller with
 * its last multiply.  Two reasons: 2^k stays a normal float for the most
 * negative argument used (k = -162 at t = FM_TMAX), and a product that
 * ends up normal is never rounded as a subnormal on the way. */
#define FM_EXP_SHIFT 40
#define FM_EXP_UNSHIFT 0x1p-40f

/* |x| beyond which GELU(x < 0), GELU'(x < 0) underflow to 0 and GELU(x > 0)
 * = x, GELU'(x > 0) = 1 in float (15 phi(15) = 8e-49).  Clamping the
 * argument there keeps huge inputs finite. */
#define FM_TMAX 15.0f

/* exp(r) = 1 + r + r^2 (E0 + r E1 + ... + r^4 E4) on |r| <= ln2/2 (+0.2%).
 * Fitted by a script (not in the repository): weighted least squares on 4000
 * Chebyshev nodes with Lawson reweighting toward minimax relative error
 * against mpmath exp; max relative error 4.2e-9 with the coefficients
 * rounded to float. */
#define FM_E0 0x1.fffffcp-2f
#define FM_E1 0x1.55549p-3f
#define FM_E2 0x1.5558f8p-5f
#define FM_E3 0x1.123b02p-7f
#define FM_E4 0x1.6a2256p-10f

/* ln 2 = LN2_HI + LN2_LO; LN2_HI has 15 significant bits, so k LN2_HI is
 * exact for |k| < 512 and a - k LN2_HI is exact (Sterbenz). */
#define FM_LOG2E 0x1.715476p+0f
#define FM_LN2_HI 0x1.62e4p-1f
#define FM_LN2_LO 0x1.7f7d1cp-20f

/* exp(ahi + alo) 2^FM_EXP_SHIFT for ahi in [-113, 0] and |alo| << 1.
 * k = round(ahi / ln2) by the 1.5*2^23 trick (adding it leaves integers
 * in the mantissa; the low bits of the sum are k in two's complement). */
FM_INLINE float fm_exp_shifted(float ahi, float alo)
{
    const float magic = 0x1.8p23f;
    float big = ahi * FM_LOG2E + magic;
    uint32_t k = fm_bits(big) - fm_bits(magic);
    float kf = big - magic;
    float r = (ahi - kf * FM_LN2_HI) - kf * FM_LN2_LO + alo;
    float p = FM_E0 + r * (FM_E1 + r * (FM_E2 + r * (FM_E3 + r * FM_E4)));
    float e = 1.0f + (r + r * r * p);
    float scale = fm_from_bits((k + 127u + FM_EXP_SHIFT) << 23);
    return e * scale;
}

/* exp(-t^2/2) 2^FM_EXP_SHIFT for t in [0, FM_TMAX] (or NaN). */
FM_INLINE float fm_gauss_shifted(float t)
{
    float th = fm_from_bits(fm_bits(t) & 0xfffff000u); /* 12 bits: th^2 exact */
    float tl = t - th;
    float ahi = (-0.5f * th) * th;
    float alo = -tl * (th + 0.5f * tl); /* -(t^2 - th^2)/2 */
    return fm_exp_shifted(ahi, alo);
}

/* R(t) = exp(t^2/2) Q(t) ~ P4(t)/Q5(t) on [0, FM_TMAX].
 * Fitted by a script (not in the repository): linearised least squares for
 * P - R Q (Sanathanan-Koerner reweighting by 1/Q, then Lawson weights
 * toward minimax) in the Chebyshev basis on 3000 Chebyshev nodes of
 * [0, 15], reference R from mpmath erfc/exp at 40 digits.  Max relative
 * error 6.3e-9, 3.3e-8 with the coefficients rounded to float.  All
 * coefficients are positive, so Horner loses nothing to cancellation. */
#define FM_P0 0.5f
#define FM_P1 0x1.c1d3f8p-2f
#define FM_P2 0x1.78c58p-3f
#define FM_P3 0x1.4ee6e4p-5f
#define FM_P4 0x1.1030d2p-8f
#define FM_Q1 0x1.ad2c2cp+0f
#define FM_Q2 0x1.349f2ap+0f
#define FM_Q3 0x1.e2b9ep-2f
#define FM_Q4 0x1.a3c32ap-4f
#define FM_Q5 0x1.552304p-7f

FM_INLINE float fm_tail_ratio(float t)
{
    float p = FM_P0 + t * (FM_P1 + t * (FM_P2 + t * (FM_P3 + t * FM_P4)));
    float q = 1.0f + t * (FM_Q1 + t * (FM_Q2 + t * (FM_Q3 + t * (FM_Q4 + t * FM_Q5))));
    return p / q;
}

#define FM_INV_SQRT2PI 0x1.988454p-2f /* 1/sqrt(2 pi) */

/* c ? a : b through the bits.  With a plain ?: gcc 12 kept a branch in
 * the GELU loops and did not vectorise them ("control flow in loop"):
 * without -ffast-math it may not turn floating-point arms, which can trap,
 * into unconditional code. */
FM_INLINE float fm_select(int c, float a, float b)
{
    uint32_t m = 0u - (uint32_t)c;
    return fm_from_bits((fm_bits(a) & m) | (fm_bits(b) & ~m));
}

/* exp(a) for finite a <= 0 (a softmax's score minus its row max).  a is
 * clamped at -104, where exp already rounds to 0 in float, so that
 * fm_exp_shifted stays in its range; the 2^FM_EXP_SHIFT comes off last. */
FM_INLINE float fm_exp_nonpos(float a)
{
    float c = fm_select(a < -104.0f, -104.0f, a);
    return fm_exp_shifted(c, 0.0f) * FM_EXP_UNSHIFT;
}

/* |x| clamped to FM_TMAX; NaN stays NaN (the comparison is false).  A
 * plain ?: here, too, left a branch in the loop (presumably gcc threads
 * the clamped case, where everything after it folds to constants). */
FM_INLINE float fm_clamped_abs(float x)
{
    float t = fm_from_bits(fm_bits(x) & 0x7fffffffu);
    return fm_select(t > FM_TMAX, FM_TMAX, t);
}

/* GELU(x) = x Phi(x).  x < 0: -t Q(t) = ((-t R) E) 2^-shift with the tiny
 * factor E last, so the result is rounded once even as a subnormal.
 * x >= 0: x (1 - Q(x)).  Both are computed and one is selected. */
FM_INLINE float fm_gelu(float x)
{
    float t = fm_clamped_abs(x);
    float R = fm_tail_ratio(t);
    float E = fm_gauss_shifted(t);
    float neg = ((-t * R) * E) * FM_EXP_UNSHIFT;
    float pos = x * (1.0f - (R * E) * FM_EXP_UNSHIFT);
    return fm_select(x < 0.0f, neg, pos);
}

/* GELU'(x) = Phi(x) + x phi(x), phi(x) = E / sqrt(2 pi):
 *   x < 0:  Q(t) - t phi(t) = ((R - t/sqrt(2 pi)) E) 2^-shift,
 *   x >= 0: 1 - Q(t) + t phi(t) = 1 + ((t/sqrt(2 pi) - R) E) 2^-shift. */
FM_INLINE float fm_gelu_grad(float x)
{
    float t = fm_clamped_abs(x);
    float R = fm_tail_ratio(t);
    float E = fm_gauss_shifted(t);
    float tc = t * FM_INV_SQRT2PI;
    float neg = ((R - tc) * E) * FM_EXP_UNSHIFT;
    float pos = 1.0f + ((tc - R) * E) * FM_EXP_UNSHIFT;
    return fm_select(x < 0.0f, neg, pos);
}

#endif
