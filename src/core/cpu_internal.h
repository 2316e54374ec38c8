/* Internal: which vector instructions this CPU has, asked once.
 *
 * Every hand-written kernel that picks its code by CPU (the GEMM rule,
 * the attention pair kernels, the transposed copies, local_conv's token
 * sum) asks here, so that they all read the same bits and one CPUID
 * query serves the process. */
#ifndef VIT_SRC_CPU_INTERNAL_H
#define VIT_SRC_CPU_INTERNAL_H

enum {
    VIT_CPU_AVX2 = 1 << 0,
    VIT_CPU_FMA = 1 << 1,
    VIT_CPU_AVX512F = 1 << 2,
    VIT_CPU_AVX512BW_VL = 1 << 3, /* AVX-512BW and AVX-512VL, both */
};

/* The VIT_CPU_* bits this CPU has (0 off x86-64 or without gcc's CPU
 * builtins); decided on first call, threads that race decide the same. */
unsigned vit_cpu_features(void);

#endif
