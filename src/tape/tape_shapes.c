/*
 * Strict shape checks for the tape ops: a tensor's rank and every
 * dimension against what the op expects, refused with one message that
 * names the op, the argument, the expected layout and the given shape (a
 * tensor that only holds the right number of values is not accepted).
 */
#include <stdio.h>

#include "error.h"
#include "tape_internal.h"

/* "[2, 16, 18]" or, for an expectation, "[*, 16, *]" (-1 is any). */
static void format_dims(char *buf, size_t cap, int ndim, const int *dims)
{
    size_t at = 0;
    at += (size_t)snprintf(buf + at, cap - at, "[");
    for (int i = 0; i < ndim && at < cap; i++) {
        if (dims[i] < 0)
            at += (size_t)snprintf(buf + at, cap - at, "%s*", i ? ", " : "");
        else
            at += (size_t)snprintf(buf + at, cap - at, "%s%d", i ? ", " : "", dims[i]);
    }
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

int vit_tape_check_shape(vit_tape *t, const char *fn, const char *arg, const vit_tensor *x,
                         const char *layout, int ndim, const int *dims)
{
    int ok = x->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = dims[i] < 0 || x->shape[i] == dims[i];
    if (ok)
        return VIT_OK;
    char want[96], got[96];
    format_dims(want, sizeof want, ndim, dims);
    format_dims(got, sizeof got, x->ndim, x->shape);
    return vit_tape_fail(t, vit_fail(VIT_EINVAL, "%s: %s must be %s = %s, got %s", fn, arg,
                                     layout, want, got));
}
