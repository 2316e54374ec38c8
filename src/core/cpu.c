/* Which vector instructions this CPU has (cpu_internal.h). */
#include "cpu_internal.h"

#include <stdatomic.h>

static unsigned ask_cpu(void)
{
    unsigned f = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        f |= VIT_CPU_AVX2;
    if (__builtin_cpu_supports("fma"))
        f |= VIT_CPU_FMA;
    if (__builtin_cpu_supports("avx512f"))
        f |= VIT_CPU_AVX512F;
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        f |= VIT_CPU_AVX512BW_VL;
#endif
    return f;
}

unsigned vit_cpu_features(void)
{
    const unsigned ASKED = 1u << 31;
    static atomic_uint known; /* 0 not yet asked, else the bits | ASKED */
    unsigned f = atomic_load_explicit(&known, memory_order_relaxed);
    if (!f) {
        f = ask_cpu() | ASKED;
        atomic_store_explicit(&known, f, memory_order_relaxed);
    }
    return f & ~ASKED;
}
