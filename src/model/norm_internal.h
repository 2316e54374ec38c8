/* Internal: the per-channel moments that per-image standardisation
 * (image_norm.c, vit_image_norm) and the training set's statistics
 * (data_norm.c, vit_channel_stats) both take. */
#ifndef VIT_SRC_NORM_INTERNAL_H
#define VIT_SRC_NORM_INTERNAL_H

#include <stddef.h>

#include "vit/core.h"

/* The mean and the (biased) variance of the n values x[0], x[stride],
 * x[2 stride], ... (one channel of interleaved pixels): two passes, each
 * a sum in double in that order, then divided by n. */
void vit_channel_moments(const vit_real *x, size_t n, size_t stride, double *mean, double *var);

#endif
