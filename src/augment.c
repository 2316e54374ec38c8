/*
 * Random affine augmentation: rotation, zoom and translation about the image
 * centre, sampled bilinearly.  Digits written by other people differ from
 * the training writers mostly by such small deformations.
 */
#include "vit/augment.h"

#include <math.h>
#include <string.h>

#include "error.h"

int vit_affine_draw(vit_affine *a, vit_rng *rng, double rotate_deg, double scale, double shift)
{
    if (!a || !rng)
        return vit_fail(VIT_EINVAL, "vit_affine_draw: %s is NULL", !a ? "a" : "rng");
    if (!(rotate_deg >= 0 && rotate_deg < 1e6) || !(scale >= 0 && scale < 1) || !(shift >= 0 && shift < 1e6))
        return vit_fail(VIT_EINVAL, "vit_affine_draw: rotate %g, scale %g or shift %g out of range",
                        rotate_deg, scale, shift);
    /* Four draws always, so every caller's generator advances alike. */
    double u0 = vit_rng_uniform(rng), u1 = vit_rng_uniform(rng);
    double u2 = vit_rng_uniform(rng), u3 = vit_rng_uniform(rng);
    a->angle = (2 * u0 - 1) * rotate_deg * (3.14159265358979323846 / 180);
    a->zoom = 1 + (2 * u1 - 1) * scale;
    a->dy = (2 * u2 - 1) * shift;
    a->dx = (2 * u3 - 1) * shift;
    return VIT_OK;
}

/* dst [H, W, C]; output pixel (y, x) reads src at the inverse transform of
 * its offset from the centre. */
int vit_affine_apply(vit_real *dst, const vit_real *src, int H, int W, int C, const vit_affine *a)
{
    if (!dst || !src || !a)
        return vit_fail(VIT_EINVAL, "vit_affine_apply: %s is NULL", !dst ? "dst" : !src ? "src" : "a");
    if (H <= 0 || W <= 0 || C <= 0 || !(a->zoom > 0))
        return vit_fail(VIT_EINVAL, "vit_affine_apply: size %dx%dx%d or zoom %g invalid", H, W, C, a->zoom);
    double cy = (H - 1) / 2.0, cx = (W - 1) / 2.0;
    double co = cos(a->angle) / a->zoom, si = sin(a->angle) / a->zoom;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            double v = y - cy - a->dy, u = x - cx - a->dx;
            double sx = co * u + si * v + cx, sy = -si * u + co * v + cy;
            int x0 = (int)floor(sx), y0 = (int)floor(sy);
            double fx = sx - x0, fy = sy - y0;
            vit_real *d = dst + ((size_t)y * W + x) * C;
            for (int ch = 0; ch < C; ch++) {
                double acc = 0;
                for (int j = 0; j < 2; j++)
                    for (int i = 0; i < 2; i++) {
                        int yy = y0 + j, xx = x0 + i;
                        if (yy < 0 || yy >= H || xx < 0 || xx >= W)
                            continue;
                        double w = (j ? fy : 1 - fy) * (i ? fx : 1 - fx);
                        acc += w * src[((size_t)yy * W + xx) * C + ch];
                    }
                d[ch] = (vit_real)acc;
            }
        }
    return VIT_OK;
}

/* dst [H, W, C]: whole-pixel moves are exact copies, zero fill. */
int vit_translate(vit_real *dst, const vit_real *src, int H, int W, int C, int dy, int dx)
{
    if (!dst || !src)
        return vit_fail(VIT_EINVAL, "vit_translate: %s is NULL", !dst ? "dst" : "src");
    if (H <= 0 || W <= 0 || C <= 0)
        return vit_fail(VIT_EINVAL, "vit_translate: size %dx%dx%d invalid", H, W, C);
    /* A move of the whole size or more leaves zeros; clamping keeps y - dy
     * from overflowing. */
    dy = dy > H ? H : dy < -H ? -H : dy;
    dx = dx > W ? W : dx < -W ? -W : dx;
    for (int y = 0; y < H; y++) {
        int sy = y - dy;
        for (int x = 0; x < W; x++) {
            int sx = x - dx;
            vit_real *d = dst + ((size_t)y * W + x) * C;
            if (sy < 0 || sy >= H || sx < 0 || sx >= W)
                memset(d, 0, (size_t)C * sizeof *d);
            else
                memcpy(d, src + ((size_t)sy * W + sx) * C, (size_t)C * sizeof *d);
        }
    }
    return VIT_OK;
}
