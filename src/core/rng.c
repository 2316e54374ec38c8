/* xoshiro256** seeded by splitmix64, plus the derived distributions. */
#include "vit/rng.h"

#include <math.h>

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* splitmix64: a Weyl sequence (add the golden-ratio constant) passed
 * through a bijective mixer.  Used only to spread a small seed over the
 * 256-bit state so that nearby seeds give unrelated streams. */
static uint64_t splitmix64_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void vit_rng_seed(vit_rng *r, uint64_t seed)
{
    if (r == NULL)
        return;
    /* splitmix64 is a bijection of its counter, so four successive outputs
     * are never all zero - the one state xoshiro must avoid. */
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64_next(&seed);
}

uint64_t vit_rng_next(vit_rng *r)
{
    if (r == NULL)
        return 0;
    uint64_t *s = r->s;
    uint64_t out = rotl64(s[1] * 5, 7) * 9; /* the "**" scrambler */
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return out;
}

double vit_rng_uniform(vit_rng *r)
{
    /* The high bits of xoshiro256** are its best; 53 of them fill a double's
     * mantissa exactly, so the conversion and scaling are exact. */
    return (double)(vit_rng_next(r) >> 11) * 0x1.0p-53;
}

uint32_t vit_rng_below(vit_rng *r, uint32_t n)
{
    if (r == NULL || n == 0)
        return 0;
    /* 2^32 mod n values would make the low residues more likely; drop the
     * draws below that threshold so that what is left is a whole number of
     * copies of [0, n).  Unsigned negation computes 2^32 - n. */
    uint32_t threshold = (uint32_t)(-n) % n;
    for (;;) {
        uint32_t x = (uint32_t)(vit_rng_next(r) >> 32);
        if (x >= threshold)
            return x % n;
    }
}

double vit_rng_normal(vit_rng *r)
{
    /* u1 in (0, 1] keeps log finite; u2 in [0, 1) sets the angle.  Only the
     * cosine branch is returned so that no sample is cached between calls. */
    double u1 = 1.0 - vit_rng_uniform(r);
    double u2 = vit_rng_uniform(r);
    const double two_pi = 6.283185307179586476925286766559;
    return sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
}

void vit_rng_shuffle(vit_rng *r, int *a, int n)
{
    if (r == NULL || a == NULL || n < 2)
        return;
    /* Walk down from the end, swapping each slot with a uniformly chosen
     * slot at or before it. */
    for (int i = n - 1; i > 0; i--) {
        int j = (int)vit_rng_below(r, (uint32_t)i + 1u);
        int tmp = a[i];
        a[i] = a[j];
        a[j] = tmp;
    }
}
