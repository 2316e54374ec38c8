/* Internal: tape allocation for code that calls the kernels directly (the
 * model's evaluation forward) but must hand back tape-owned results. */
#ifndef VIT_SRC_TAPE_INTERNAL_H
#define VIT_SRC_TAPE_INTERNAL_H

#include "vit/tape.h"

/* A tensor of the given shape on the tape, without a gradient and without
 * an op record (nothing flows back through it): data uninitialised, valid
 * until the next reset.  NULL (and the tape's error set) on failure. */
vit_tensor *vit_tape_tensor(vit_tape *tape, int ndim, const int *shape);

/* n uninitialised reals from the tape's arena, valid until the next reset;
 * NULL (and the tape's error set) on failure. */
vit_real *vit_tape_reals(vit_tape *tape, size_t n);

/* Records `code` as the tape's error (the first one stays) and returns it,
 * so that a failure in code outside the ops reaches vit_tape_status() like
 * an op's would. */
int vit_tape_fail(vit_tape *tape, int code);

/* vit_tape_backward with d(objective)/d(loss) = seed instead of 1: the
 * gradient of seed * loss, e.g. a slice's share of a batch mean. */
int vit_tape_backward_seed(vit_tape *tape, vit_tensor *loss, vit_real seed);

#endif
