/* Internal: variants of the elementwise kernels for the tape, which writes
 * a gradient buffer it has just lent without zeroing it first. */
#ifndef VIT_SRC_ACTIVATIONS_INTERNAL_H
#define VIT_SRC_ACTIVATIONS_INTERNAL_H

#include "vit/core.h"

/* dx[n] = dy * GELU'(x), OVERWRITTEN (vit_gelu_backward accumulates);
 * dx may be dy, for a gradient computed in place.  No argument checks. */
void vit_gelu_backward_set(vit_real *dx, const vit_real *dy, const vit_real *x, size_t n);

#endif
