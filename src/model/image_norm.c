/*
 * Per-image standardisation (vit_config.image_norm, vit/model.h): each
 * channel of an image by its own mean and std over the image's pixels.
 * Where every image has its own colours and they carry no class (a shape
 * drawn in a random foreground colour on a random background), this maps
 * each channel to the same standardised shape up to its sign, which the
 * inversion and channel permutation augmentations then cover.
 */
#include "vit/model.h"

#include <math.h>

#include "error.h"
#include "norm_internal.h"

void vit_channel_moments(const vit_real *x, size_t n, size_t stride, double *mean, double *var)
{
    double s = 0, ss = 0;
    for (size_t p = 0; p < n; p++)
        s += (double)x[p * stride];
    double m = s / (double)n;
    for (size_t p = 0; p < n; p++) {
        double d = (double)x[p * stride] - m;
        ss += d * d;
    }
    *mean = m;
    *var = ss / (double)n;
}

int vit_image_norm(vit_real *y, const vit_real *x, int count, int pixels, int channels)
{
    if (!y || !x)
        return vit_fail(VIT_EINVAL, "vit_image_norm: %s is NULL", !y ? "y" : "x");
    if (count < 1 || pixels < 1 || channels < 1)
        return vit_fail(VIT_EINVAL, "vit_image_norm: %d images of %d pixels of %d channels: "
                        "each must be at least 1", count, pixels, channels);
    size_t img = (size_t)pixels * channels;
    for (int i = 0; i < count; i++) {
        const vit_real *a = x + i * img;
        vit_real *b = y + i * img;
        for (int c = 0; c < channels; c++) {
            double m, var;
            vit_channel_moments(a + c, (size_t)pixels, (size_t)channels, &m, &var);
            double inv = 1 / sqrt(var + VIT_IMAGE_NORM_EPS);
            for (int p = 0; p < pixels; p++) /* after the sums: y may be x */
                b[(size_t)p * channels + c] = (vit_real)(((double)a[(size_t)p * channels + c] - m)
                                                         * inv);
        }
    }
    return VIT_OK;
}
