/* Internal: bf16 products through oneDNN's matmul (src/kernels/dnnl.c).
 *
 * Built when meson finds oneDNN (option `dnnl`); otherwise every function
 * here reports that it cannot run and the bf16 GEMMs stay on libxsmm. */
#ifndef VIT_SRC_DNNL_H
#define VIT_SRC_DNNL_H

#include <stdint.h>

/* Why oneDNN cannot run the bf16 products here (not built with it, the
 * float64 library, or oneDNN finds no AVX-512 BF16 / AMX on this CPU), or
 * NULL when it can.  Thread-safe; the first call starts oneDNN. */
const char *vit_dnnl_missing(void);

/* C[rows, N] (row stride ldc) = (beta 0) or += (beta 1) A B, with A
 * [rows, Kp] bf16 (row stride Kp) and B [Kp, N] bf16, row-major, float32
 * sums; on the calling thread alone.  The matmul primitive for the shape
 * is made at its first call and kept (shared by the threads) until the
 * process ends.  1 on success; 0 when oneDNN cannot run it (no memory, no
 * primitive), C untouched.  Thread-safe. */
int vit_dnnl_bf16(int rows, int N, int Kp, const uint16_t *A, const uint16_t *B, float *C,
                  int ldc, int beta);

#endif
