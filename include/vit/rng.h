/*
 * vit/rng.h - the library's own seeded random number generator.
 *
 * xoshiro256** (Blackman and Vigna) with its 256-bit state filled from the
 * 64-bit seed by splitmix64.  Everything random in a training run (weight
 * init, shuffling, augmentation, dropout) draws from a vit_rng, so the same
 * seed gives the same integer stream on every machine and compiler, and
 * the struct below is the complete state: copy it, store it in a checkpoint
 * (4 x u64) and restore it to resume exactly.
 *
 * vit_rng_uniform and vit_rng_below use integer arithmetic only and are
 * therefore bit-identical everywhere.  vit_rng_normal goes through log, sqrt
 * and cos from the C math library; sqrt is exact by IEEE 754, but log and
 * cos are only as reproducible as the platform's libm (glibc's are
 * correctly rounded in practice, other libms may differ in the last bit).
 *
 * The functions here cannot fail: they take a valid generator and return
 * a value.  Passing NULL is a programming error that they tolerate by doing
 * nothing (seed, shuffle) or returning 0.  No error codes, no messages.
 *
 * Ownership and threads: a vit_rng is a plain value the caller owns (no
 * allocation, nothing to free).  Every call advances the generator passed
 * to it and touches nothing else, so separate generators may be used on
 * separate threads; one generator must not be shared between threads
 * without a lock.
 */
#ifndef VIT_RNG_H
#define VIT_RNG_H

#include <stdint.h>
#include "vit/core.h"

VIT_BEGIN_DECLS

/* The whole generator state.  Never all zero after vit_rng_seed. */
typedef struct vit_rng {
    uint64_t s[4];
} vit_rng;

/* Fills the state with four successive splitmix64 outputs starting from
 * seed.  Any seed, including 0, gives a valid state. */
void vit_rng_seed(vit_rng *r, uint64_t seed);

/* Next 64 random bits (one xoshiro256** step). */
uint64_t vit_rng_next(vit_rng *r);

/* Uniform double in [0, 1): the top 53 bits of one vit_rng_next, times
 * 2^-53, so every value is a multiple of 2^-53. */
double vit_rng_uniform(vit_rng *r);

/* Uniform integer in [0, n) without modulo bias: draws 32-bit values and
 * rejects those below 2^32 mod n.  n must be positive; returns 0 for n = 0. */
uint32_t vit_rng_below(vit_rng *r, uint32_t n);

/* Standard normal sample (mean 0, variance 1) by Box-Muller.  Consumes
 * exactly two uniforms per call and keeps the second normal of the pair
 * nowhere, so the vit_rng struct remains the entire state. */
double vit_rng_normal(vit_rng *r);

/* Shuffles the caller's a[n] in place (Fisher-Yates, every permutation
 * equally likely).  Does nothing when a is NULL or n < 2. */
void vit_rng_shuffle(vit_rng *r, int *a, int n);

VIT_END_DECLS

#endif
