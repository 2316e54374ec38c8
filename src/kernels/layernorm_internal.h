/* Internal: the layer norm fused with the residual add before it, for the
 * tape (vit_op_add_layernorm). */
#ifndef VIT_SRC_LAYERNORM_INTERNAL_H
#define VIT_SRC_LAYERNORM_INTERNAL_H

#include <stdint.h>

#include "vit/core.h"

/* s [n, d] = a + b (overwritten), then y [n, d] = LN(s) with mean [n] and
 * rstd [n] as vit_layernorm_forward: one pass over the rows instead of two
 * over the whole tensors.  s must not alias a or b; y may not alias s.
 * y16 [n, d] (or NULL): y rounded to bf16 as vit_bf16_from_floats rounds
 * it (the same bits), each row while it is in cache (float32 only; NULL in
 * the float64 build).  No argument checks (eps > 0 is the caller's). */
void vit_add_layernorm_forward(vit_real *s, vit_real *y, uint16_t *y16, vit_real *mean,
                               vit_real *rstd, const vit_real *a, const vit_real *b,
                               const vit_real *gamma, const vit_real *beta, int n, int d,
                               vit_real eps);

/* vit_layernorm_forward (the same checks and errors) with y16 as above:
 * the layer norm whose output the tape keeps in bf16 rounds it in its own
 * pass over the rows instead of a second one over the whole output. */
int vit_layernorm_forward16(vit_real *y, uint16_t *y16, vit_real *mean, vit_real *rstd,
                            const vit_real *x, const vit_real *gamma, const vit_real *beta,
                            int n, int d, vit_real eps);

#endif
