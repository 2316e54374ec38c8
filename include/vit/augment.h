/*
 * vit/augment.h - random augmentation of training images: rotation, zoom
 * and translation about the image centre (sampled bilinearly), whole-pixel
 * translation (= random crop with zero padding), horizontal flip, random
 * erasing, colour jitter (brightness, contrast, saturation, hue), random
 * grayscale, channel permutation and inversion, and the batch mixing of
 * mixup and cutmix with their mixed (soft) label targets.
 *
 * vit_train_run applies it to every training image when the config's
 * rotate or scale is positive (vit/model.h: rotate, scale, shift), and
 * vit_translate alone when only shift is (vit_augment_batch does
 * the whole batch, flip, colour, mixup and cutmix included); a
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
#include "vit/data.h"
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
 * It is also the random crop with zero padding (config crop_pad): padding
 * by p pixels and taking the H x W window at offset (oy, ox) in 0 .. 2p
 * gives exactly vit_translate(dy = p - oy, dx = p - ox), and the uniform
 * window offsets are the uniform shifts in [-p, p].
 * Returns VIT_EINVAL for NULL buffers or non-positive sizes.  Reentrant. */
int vit_translate(vit_real *dst, const vit_real *src, int H, int W, int C, int dy, int dx);

/* dst[H, W, C] (overwritten; must not alias src) = src mirrored left-right:
 * dst(y, x) = src(y, W - 1 - x), channels kept together.  Returns
 * VIT_EINVAL for NULL buffers or non-positive sizes.  Reentrant. */
int vit_flip_horizontal(vit_real *dst, const vit_real *src, int H, int W, int C);

/* The cutmix box for mixing weight lam in [0, 1] (the share the image keeps)
 * on an H x W image, from two uniforms uy, ux in [0, 1): a box of sides
 * floor(H sqrt(1 - lam)) by floor(W sqrt(1 - lam)) centred on
 * (floor(uy H), floor(ux W)), half-sides rounded down, clipped to the
 * image, written as box = {y0, x0, y1, x1} (rows y0 .. y1-1, columns
 * x0 .. x1-1; may be empty).  Returns the share of the image outside the
 * box, 1 - (y1-y0)(x1-x0)/(HW): the corrected lam the labels are mixed
 * with.  Returns -1 with VIT_EINVAL for a NULL box, sizes < 1 or lam, uy,
 * ux out of range.  Pure. */
double vit_cutmix_box(int box[4], int H, int W, double lam, double uy, double ux);

/* Random erasing's box on an H x W image (Zhong et al., "Random Erasing
 * Data Augmentation", 2017, with timm's log-uniform aspect): up to
 * VIT_ERASE_TRIES times, an area of a uniform share in [VIT_ERASE_MIN_AREA,
 * VIT_ERASE_MAX_AREA] of the image and an aspect ratio (height / width)
 * log-uniform in [VIT_ERASE_MIN_ASPECT, 1 / VIT_ERASE_MIN_ASPECT] give the
 * sides h = round(sqrt(area aspect)), w = round(sqrt(area / aspect)); the
 * first that fit inside the image (1 <= h < H, 1 <= w < W) are placed at a
 * uniform position, written as box = {y0, x0, y1, x1} (rows y0 .. y1-1,
 * columns x0 .. x1-1).  Returns 1 with the box, or 0 (box all zero) when no
 * try fitted (an image of 1 pixel on a side, or sizes no try fits).  Two
 * draws of rng a try, then vit_rng_below's for the position.  Returns -1 with VIT_EINVAL for a
 * NULL box or rng or a size below 1.  Reentrant: touches *box and *rng. */
#define VIT_ERASE_MIN_AREA 0.02
#define VIT_ERASE_MAX_AREA (1.0 / 3)
#define VIT_ERASE_MIN_ASPECT 0.3
#define VIT_ERASE_TRIES 10
int vit_erase_box(int box[4], int H, int W, vit_rng *rng);

/* ---- colour ------------------------------------------------------------
 *
 * The luma weights of gray (ITU-R BT.601): gray(r, g, b) = 0.299 r + 0.587 g
 * + 0.114 b, the Y of YIQ.  For images of other than 3 channels the gray
 * of a pixel is the mean of its channels. */
#define VIT_LUMA_R 0.299
#define VIT_LUMA_G 0.587
#define VIT_LUMA_B 0.114

/* One image's colour change (vit_colour_draw).  The identity is
 * {1, 1, 1, 0, 0, 0, 0}. */
typedef struct vit_colour {
    double brightness; /* factor b >= 0 */
    double contrast;   /* factor c >= 0 */
    double saturation; /* factor s >= 0 */
    double hue;        /* turn t in [-0.5, 0.5] of the YIQ chroma plane */
    int gray;          /* 1: every channel set to the pixel's gray */
    int perm;          /* 0 .. 5: the channel permutation, 0 the identity;
                          output channel k reads input channel
                          perm's entry k of the six orders of three
                          channels, lexicographic: {0,1,2}, {0,2,1},
                          {1,0,2}, {1,2,0}, {2,0,1}, {2,1,0} */
    int invert;        /* 1: x -> 1 - x */
} vit_colour;

/* x [H, W, C] changed in place by c, in this fixed order, each step that
 * is not at its identity value applied to the whole image and its result
 * clamped to [0, 1] (a step at its identity value is skipped):
 *   1. brightness  x = b x;
 *   2. contrast    x = c x + (1 - c) m, m the mean over the image's pixels
 *                  of their gray (after step 1);
 *   3. saturation  x = s x + (1 - s) gray(pixel), per pixel;
 *   4. hue         the pixel's (Y, I, Q) = T (r, g, b), T the NTSC (FCC)
 *                  matrix with rows (0.299, 0.587, 0.114), (0.595716,
 *                  -0.274453, -0.321263), (0.211456, -0.522591, 0.311135);
 *                  (I, Q) rotated by the angle 2 pi t; back by T's exact
 *                  inverse.  Luma is kept and gray pixels stay gray;
 *   5. gray        every channel = gray(pixel);
 *   6. perm        channels reordered (vit_colour's perm);
 *   7. invert      x = 1 - x.
 * Steps 3 to 6 need C = 3; brightness, contrast and invert work for any C.
 * Returns VIT_EINVAL for a NULL x or c, non-positive sizes, a factor
 * negative or not finite, hue outside [-0.5, 0.5], perm outside 0 .. 5,
 * gray or invert not 0 or 1, or a step of 3 to 6 away from its identity
 * with C != 3.  Reentrant: touches only x. */
int vit_colour_apply(vit_real *x, int H, int W, int C, const vit_colour *c);

/* A training batch's random augmentation (vit_augment_batch), from the
 * config keys of the same names (vit/model.h).  All 0: plain copies. */
typedef struct vit_augment {
    int shift;        /* whole-pixel translation in [-shift, shift] (the
                         trainer: max(shift, crop_pad)); with rotate or
                         scale the affine warp's continuous shift instead */
    double rotate, scale; /* vit_affine_draw's */
    int flip;         /* 1: mirror left-right with probability 0.5 */
    double erase;     /* probability in [0, 1] that an item gets a box of
                         noise (vit_erase_box), 0 off */
    double mixup, cutmix; /* Beta(alpha, alpha) alphas, 0 off */
    double mix_prob;  /* probability a batch is mixed (when either is on) */
    double smoothing; /* label smoothing, folded into the mixed targets */
    int classes;      /* width of a target row, > every label */
    /* colour (vit_colour_draw), 0 off; all but brightness, contrast and
       invert need 3 channels */
    double brightness, contrast, saturation; /* factor uniform in
                         [1 - v, 1 + v], v in [0, 1] */
    double hue;       /* turn uniform in [-hue, hue], hue in [0, 0.5] */
    double grayscale; /* probability in [0, 1] of gray */
    int channel_perm; /* 1: one of the six channel orders, uniformly */
    int invert;       /* 1: inverted with probability 0.5 */
} vit_augment;

/* Draws one image's colour change into *c (overwritten) from the colour
 * settings of g, taking one draw of rng for each setting that is on, in
 * this order: brightness, contrast, saturation, hue (each one uniform),
 * grayscale (one uniform: gray when below it), channel_perm
 * (vit_rng_below(rng, 6)), invert (one uniform: inverted when below 0.5);
 * none for settings that are off, which stay at the identity.  Returns
 * VIT_EINVAL for NULL arguments or settings out of range.  Reentrant:
 * touches *c and *rng. */
int vit_colour_draw(vit_colour *c, vit_rng *rng, const vit_augment *g);

/* Scratch memory of vit_augment_batch (opaque): the per-item draws of a
 * minibatch and two image buffers, sized once for batches of up to
 * `batch` items of [H, W, C] images so that training allocates nothing
 * per batch.  One scratch per thread that augments at a time. */
typedef struct vit_augment_scratch vit_augment_scratch;

/* *out = a new scratch for minibatches of 1 .. batch items of [H, W, C]
 * images, to free with vit_augment_scratch_free (on failure *out = NULL).
 * Returns VIT_OK; VIT_EINVAL (out NULL, batch, H, W or C < 1);
 * VIT_ENOMEM.  Thread-safe. */
int vit_augment_scratch_new(vit_augment_scratch **out, int batch, int H, int W, int C);

/* Frees s (NULL is a no-op). */
void vit_augment_scratch_free(vit_augment_scratch *s);

/* Fills images/labels with items [lo, hi) of the minibatch idx[0 .. b)
 * (indices into ds), augmented: each item is flipped (flip), then
 * translated (shift) or warped (rotate, scale), then changed in colour
 * (vit_colour_apply with vit_colour_draw's change, when a colour setting
 * is on; the zeros a shift brings in are changed with the image), then,
 * with probability
 * erase, the box vit_erase_box draws is filled with uniform noise in
 * [0, 1) (every channel; the noise comes from a generator seeded by one
 * draw, so it costs the batch's generator one draw); the draws for all b items
 * are taken whatever the slice, in item order, so every rank of a
 * data-parallel job, each filling its own slice, advances its generator
 * alike.  Then, with mixup or cutmix on, one draw decides whether the
 * batch is mixed (probability mix_prob), one more (both on) which of the
 * two (probability 0.5 each), then lam ~ Beta(alpha, alpha) and, for
 * cutmix, the box (vit_cutmix_box).  Item k is mixed with its partner
 * b-1-k of the same minibatch (augmented by the partner's own draws):
 * mixup: lam x_k + (1 - lam) x_partner; cutmix: the partner's pixels
 * pasted into the box, lam corrected to the share outside it.
 *
 * images [hi-lo, H, W, C] and labels [hi-lo] are overwritten (labels: each
 * item's own label).  For a mixed batch, *mixed = 1 and targets
 * [hi-lo, classes] (if not NULL) get lam t(y_k) + (1 - lam) t(y_partner),
 * t(y) = (1 - smoothing) one-hot(y) + smoothing / classes (smoothing on
 * each one-hot before mixing, as timm does); otherwise *mixed = 0 and
 * targets are not written (train on the labels with smoothing).  *lam (if
 * not NULL) gets lam (1 when not mixed).  Draws nothing for settings that
 * are off, so with only shift, rotate and scale the generator advances as
 * it did before flip, erasing and mixing existed.  An item's draws, in
 * order: the shift (two) or the affine (four), the flip (one), erasing
 * (one to decide; if erased, vit_erase_box's and the noise seed's), then
 * the colour (vit_colour_draw's).
 * scratch (vit_augment_scratch_new) is working memory, made for at least
 * b items of ds's image shape; nothing is allocated.
 * Returns VIT_OK; VIT_EINVAL for NULL arguments (targets and lam may be
 * NULL), 0 <= lo <= hi <= b not holding, settings out of range (saturation,
 * hue, grayscale or channel_perm on for images of other than 3 channels
 * among them), or a
 * scratch made for fewer than b items or another image shape.
 * Reentrant: touches its outputs, *scratch and *rng. */
int vit_augment_batch(const vit_augment *aug, const vit_dataset *ds, const int *idx, int b,
                      int lo, int hi, vit_augment_scratch *scratch, vit_rng *rng,
                      vit_real *images, int *labels, vit_real *targets, int *mixed, double *lam);

VIT_END_DECLS

#endif
