/*
 * vit/augment.h - random affine augmentation of images: rotation, zoom and
 * translation about the image centre, sampled bilinearly.
 *
 * vit_train_run applies it to every training image when the config's
 * rotate or scale is positive (vit/model.h: rotate, scale, shift), and
 * vit_translate alone when only shift is; a
 * training loop of your own can draw and apply transforms the same way.
 * A transform is drawn from a vit_rng (vit/rng.h), so a run's augmentation
 * is reproducible from its seed.
 *
 * Conventions (core.h): images are [H, W, C] row-major, the caller owns
 * every buffer; functions return VIT_OK or VIT_EINVAL with a message in
 * vit_last_error().  Thread safety: the functions are reentrant; they
 * touch only their outputs and the generator passed in.
 */
#ifndef VIT_AUGMENT_H
#define VIT_AUGMENT_H

#include "vit/core.h"
#include "vit/rng.h"

VIT_BEGIN_DECLS

/* One random affine transform about the image centre.  {0, 1, 0, 0} is the
 * identity. */
typedef struct vit_affine {
    double angle;   /* radians */
    double zoom;    /* > 0 */
    double dy, dx;  /* pixels */
} vit_affine;

/* Draws a transform into *a (overwritten): angle uniform in +-rotate_deg
 * degrees, zoom uniform in [1 - scale, 1 + scale], dy and dx uniform in
 * [-shift, shift].  Always consumes exactly four draws of rng, so
 * generators stay in step whatever the settings.  Returns VIT_EINVAL for a
 * NULL a or rng, or rotate_deg, scale, shift negative, non-finite or scale
 * >= 1.  Reentrant: touches only *a and *rng. */
int vit_affine_draw(vit_affine *a, vit_rng *rng, double rotate_deg, double scale, double shift);

/* dst[H, W, C] (overwritten; caller-owned, must not alias src) = src[H, W, C]
 * warped by a about the image centre: each output pixel samples the input
 * at the inverse-transformed position, bilinearly, with zeros outside.
 * Returns VIT_EINVAL for NULL buffers, non-positive sizes or a zoom <= 0.
 * Reentrant. */
int vit_affine_apply(vit_real *dst, const vit_real *src, int H, int W, int C, const vit_affine *a);

/* dst[H, W, C] (overwritten; caller-owned, must not alias src) = src[H, W,
 * C] moved down by dy and right by dx whole pixels: dst(y, x) = src(y - dy,
 * x - dx), zero where that falls outside.  This is the training shift
 * augmentation (config shift without rotate or scale) and the test-time
 * augmentation's shift (VIT_TTA_SHIFT9 in vit/model.h); with an integer
 * shift and no rotation or zoom, vit_affine_apply gives the same values.
 * Returns VIT_EINVAL for NULL buffers or non-positive sizes.  Reentrant. */
int vit_translate(vit_real *dst, const vit_real *src, int H, int W, int C, int dy, int dx);

VIT_END_DECLS

#endif
