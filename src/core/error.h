/* Internal: recording errors for vit_last_error(). */
#ifndef VIT_SRC_ERROR_H
#define VIT_SRC_ERROR_H

#include "vit/core.h"

/* The library's own name for vit_set_error (vit/core.h), so that error
 * paths read `return vit_fail(VIT_EINVAL, "...", ...);`. */
#define vit_fail vit_set_error

/* Evaluates e, a call returning VIT_OK or a VIT_E* code, and returns that
 * code from the enclosing function when it is not VIT_OK (the message is
 * already recorded): `TRY(vit_check_ptr(fn, "x", x));`. */
#define TRY(e) do { int rc_ = (e); if (rc_ != VIT_OK) return rc_; } while (0)

/* Argument checks used at the top of every public kernel.  Each returns
 * VIT_OK or the error code after recording a message that names the
 * function and the argument. */
int vit_check_ptr(const char *fn, const char *name, const void *p);
int vit_check_dim(const char *fn, const char *name, long v);

/* Product of sizes with overflow detection: returns 0 and records VIT_ENOMEM
 * when the product does not fit in size_t. */
int vit_mul_size(size_t *out, size_t a, size_t b);

#endif
