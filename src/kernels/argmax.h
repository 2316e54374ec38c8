/* Internal: the predicted class of a row of scores. */
#ifndef VIT_SRC_ARGMAX_H
#define VIT_SRC_ARGMAX_H

#include "vit/core.h"

/* Index of the largest of x[0..n-1] (n >= 1), the first one on ties.  It
 * compares with >, so a NaN never wins over an earlier entry (and a NaN in
 * x[0] is never beaten). */
static inline int vit_argmax(const vit_real *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

#endif
