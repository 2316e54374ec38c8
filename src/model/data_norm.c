/*
 * Normalisation by the training set's statistics (vit_config.data_norm,
 * vit/model.h): each channel's mean and std over every pixel of the
 * training images, computed once (vit_channel_stats), stored with the
 * model and applied before its first layer (vit_data_norm), as torchvision's
 * Normalize(mean, std) does for a data set's figures.
 */
#include "vit/model.h"

#include <math.h>

#include "error.h"
#include "norm_internal.h"

int vit_data_norm(vit_real *y, const vit_real *x, int count, int pixels, int channels,
                  const double *mean, const double *std)
{
    if (!y || !x || !mean || !std)
        return vit_fail(VIT_EINVAL, "vit_data_norm: %s is NULL",
                        !y ? "y" : !x ? "x" : !mean ? "mean" : "std");
    if (count < 1 || pixels < 1 || channels < 1)
        return vit_fail(VIT_EINVAL, "vit_data_norm: %d images of %d pixels of %d channels: "
                        "each must be at least 1", count, pixels, channels);
    size_t n = (size_t)count * pixels;
    for (size_t p = 0; p < n; p++)
        for (int c = 0; c < channels; c++) {
            size_t i = p * channels + c;
            y[i] = (vit_real)(((double)x[i] - mean[c]) / std[c]);
        }
    return VIT_OK;
}

int vit_channel_stats(const vit_real *images, int count, int pixels, int channels, double *mean,
                      double *std)
{
    if (!images || !mean || !std)
        return vit_fail(VIT_EINVAL, "vit_channel_stats: %s is NULL",
                        !images ? "images" : !mean ? "mean" : "std");
    if (count < 1 || pixels < 1 || channels < 1 || channels > VIT_CHANNELS_MAX)
        return vit_fail(VIT_EINVAL, "vit_channel_stats: %d images of %d pixels of %d channels: "
                        "each must be at least 1, channels at most %d", count, pixels, channels,
                        VIT_CHANNELS_MAX);
    size_t n = (size_t)count * pixels;
    for (int c = 0; c < channels; c++) {
        double var;
        vit_channel_moments(images + c, n, (size_t)channels, &mean[c], &var);
        if (!isfinite(mean[c])) /* a non-finite pixel makes the sum, so the mean, one */
            return vit_fail(VIT_ENUM, "vit_channel_stats: channel %d holds a non-finite pixel", c);
        std[c] = sqrt(var + VIT_IMAGE_NORM_EPS);
    }
    return VIT_OK;
}
