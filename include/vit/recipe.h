/*
 * vit/recipe.h - a training recipe derived from the data: the defaults for
 * epochs, batch, warm-up, patch and augmentation that fit a data set's
 * size and image shape, for the keys a person did not set.
 *
 * The rule (docs/cli.md says it for people; the digits come out as the
 * built-in defaults, exactly):
 *   patch   the model's patch when the images are no larger than the
 *           model's and it divides them, else vit_config_pick_patch's
 *           finest grid within 8x8;
 *   batch   32 below 10,000 training images, 64 up to 200,000, 128 above;
 *   epochs  140 (the digits'), fewer when 140 epochs would cost more than
 *           VIT_RECIPE_TRAIN_MACS multiply-adds of training (3 forwards'
 *           worth per image and epoch, vit_config_macs): as many as fit,
 *           at least 1;
 *   warmup  epochs / 28 (5 of the digits' 140): the same fraction of
 *           every run;
 *   shift   1 pixel per 14 of the shorter side below 10,000 images, per
 *           28 from 10,000 on (fewer passes over more images: a lighter
 *           augmentation), at least 1;
 *   flip    1 when the images look mirror-symmetric (below), else 0;
 *   stem    the model's stem when it gives one (stem >= 0), else
 *           VIT_RECIPE_STEM channels for images other than the model's
 *           own size whose patch is at most VIT_RECIPE_STEM_PATCH (up to
 *           32x32 with the 8x8 grid), 0 for others;
 *   stem2   the model's when it gives one (stem2 >= 0), else
 *           VIT_RECIPE_STEM2 channels with a stem, for images other than
 *           the model's own size, of even height and width, from
 *           VIT_RECIPE_STEM2_COUNT training images on; 0 for others.
 *           With stem2 the patch is picked for the H/2 x W/2 map it makes
 *           (Fashion-MNIST: patch 2 of 14x14, the same 7x7 grid).
 *   local_conv  the model's when it gives one (local_conv >= 0), else 1
 *           where the rule gives stem2 (it was measured with it), 0
 *           elsewhere.
 *   brightness, contrast, saturation  VIT_RECIPE_JITTER, hue
 *           VIT_RECIPE_HUE and grayscale VIT_RECIPE_GRAYSCALE for colour
 *           images (3 channels: photos vary in light and white balance),
 *           0 for others;
 *   channel_perm, invert  1 for colour images whose colour carries no
 *           class (the colour test below), else 0;
 *   image_norm  1 where channel_perm is (vit_config.image_norm: each image
 *           standardised per channel, so its own colours are gone before
 *           the network) and the model has no data_norm (one input
 *           normalisation at a time), else 0; with it brightness and
 *           contrast are 0 (the standardisation undoes them);
 *   data_norm  1 for colour images where image_norm is 0 here and in the
 *           model (vit_config.data_norm: each channel normalised by the
 *           training set's mean and std; colour that names the class kept),
 *           else 0.
 * The class count changes nothing.  Pure functions, any thread.
 */
#ifndef VIT_RECIPE_H
#define VIT_RECIPE_H

#include "vit/core.h"
#include "vit/data.h"
#include "vit/model.h"

VIT_BEGIN_DECLS

/* The training compute the default recipe spends at most: 1.37e14
 * multiply-adds, about 27 minutes of a quiet 2-core machine training at
 * 85 G multiply-adds per second (Fashion-MNIST with its two stem layers:
 * 76 epochs, the length their gain was measured at; with local_conv, 75,
 * the length its own was measured at; docs/benchmarks.md). */
#define VIT_RECIPE_TRAIN_MACS 1.37e14

/* VIT_RECIPE_TRAIN_MACS as it is written above ("1.37e14"), for messages
 * that name it: made from the macro by the preprocessor, so a message can
 * never quote a value other than the one the rule uses. */
#define VIT_RECIPE_TEXT_(x) #x
#define VIT_RECIPE_TEXT(x) VIT_RECIPE_TEXT_(x)
#define VIT_RECIPE_TRAIN_MACS_TEXT VIT_RECIPE_TEXT(VIT_RECIPE_TRAIN_MACS)

/* The channels of the convolutional stem the rule gives images other than
 * the model's own size (vit_config.stem), and the largest patch it gives
 * one to: the stem's feature map is as large as the image, so beyond 4x4
 * patches (32x32 images) it costs more than the transformer after it. */
#define VIT_RECIPE_STEM 16
#define VIT_RECIPE_STEM_PATCH 4

/* The channels of the second, strided stem layer (vit_config.stem2) the
 * rule gives images with a stem, from VIT_RECIPE_STEM2_COUNT training
 * images on (measured on Fashion-MNIST's 60,000; a small set has not been
 * shown to gain from it). */
#define VIT_RECIPE_STEM2 32
#define VIT_RECIPE_STEM2_COUNT 10000

/* The colour jitter the rule gives colour images (brightness, contrast
 * and saturation factors in [1 - v, 1 + v]), the hue turn (+- of a full
 * turn) and the grayscale probability: common values for photos, not yet
 * tuned here (docs/cli.md says what they were measured at). */
#define VIT_RECIPE_JITTER 0.3
#define VIT_RECIPE_HUE 0.05
#define VIT_RECIPE_GRAYSCALE 0.1

/* The colour test's margin over chance (below). */
#define VIT_RECIPE_COLOUR_MARGIN 0.05

/* What the rule looks at. */
typedef struct vit_recipe_data {
    int count;                 /* training images (without a validation tail) */
    int height, width, channels, classes;
    const vit_dataset *images; /* optional (NULL: flip, channel_perm and
                                  invert 0): images whose class means are
                                  tested for mirror symmetry and whose mean
                                  colours are tested for class information;
                                  up to 8192 of them, evenly spread, are
                                  read */
} vit_recipe_data;

/* The recipe.  Keys by their vit_config names; flip is the key of the
 * augmentation work (set it by name with vit_config_set). */
typedef struct vit_recipe {
    int patch;          /* patch side (stride and padding as the caller's) */
    int patch_fits;     /* 1: the patch's grid is within 8x8 (or the
                           model's own patch is kept) */
    int batch;
    int epochs;
    double warmup;      /* epochs of linear warm-up: epochs / 28 */
    int shift;          /* random translation, pixels */
    int flip;           /* random horizontal flips: 1 valid, 0 not */
    int stem;           /* convolutional stem channels (vit_config.stem), 0: none */
    int stem2;          /* the second stem layer's channels (vit_config.stem2), 0: none */
    int local_conv;     /* 1: each block starts with vit_op_local_conv (vit_config.local_conv) */
    double asymmetry;   /* the mirror test's figure (below); -1 untested */
    double train_macs;  /* the run's training multiply-adds at these values */
    char patch_why[160]; /* why this patch, when the rule picked it ("" when the
                            model's own is kept), e.g. "7x7 patches of 14x14,
                            the finest grid within 8x8 (stem2's map, half the
                            image)" */
    double brightness, contrast, saturation, hue, grayscale; /* the colour
                           keys (vit_config): for 3 channels only */
    int channel_perm, invert; /* 1 when the colour test allows them */
    int image_norm;       /* 1 likewise: vit_config.image_norm */
    int data_norm;        /* 1 for colour images without image_norm (the
                             recipe's or the model's): vit_config.data_norm */
    double colour_acc;    /* the colour test's held-out accuracy; -1 untested */
    double colour_chance; /* its chance level; -1 untested */
} vit_recipe;

/* The recipe for data d and the model shape of model (its dim, depth,
 * heads, mlp, pool, its patch geometry for images of its own size, and its
 * stem, stem2 and local_conv: each the model's when given
 * (vit_config_given, 0 too), else left to the rule) into *r (overwritten), and into why[cap]
 * (NUL-terminated, cut to fit; may be NULL with cap 0) one line saying why,
 * e.g. "60000 images of 28x28x1: batch 64 (10k-200k images), 76 epochs
 * (what 1.37e14 multiply-adds of training pay for), shift 1 (a 28th of the
 * side: 10k images or more), flip (class means' mirror asymmetry 0.16),
 * stem 16 (images other than the model's 8x8), stem2 32 and patch 2 of its
 * 14x14 map (10000 images or more), local_conv 1 (with stem2)", for
 * colour images followed by e.g. ", colour jitter 0.3, hue 0.05, grayscale
 * 0.1 (colour images), channel_perm and invert (mean colour names the
 * class for 10.4% of held-out images, chance 10.2%), image_norm 1 (colour
 * carries no class)".
 *
 * The mirror test: for each class, the mean image m over the images read,
 * its left-right mirror m' and the other classes' means o; a class's
 * asymmetry is sum |m - m'| over the mean of sum |m - o| (so blank borders
 * count for nothing), and r->asymmetry is the median over the classes
 * (-1 with fewer than two classes).  flip is 1 when it is below 0.35 (the
 * digits: 0.84, in a 28x28 field 0.84, in colour at 32x32 0.62;
 * Fashion-MNIST: 0.16).
 *
 * The colour test (3 channels, at least two classes, images given): a
 * quarter of the images read are held out (picked by a fixed hash of their
 * number among the reads, so no period in the labels' order lines up with
 * the split) and the rest fit; each image is
 * reduced to its mean colour (the mean of each channel), each class to the
 * mean of its fitting images' mean colours, and each held-out image is
 * given the class whose mean is nearest (Euclidean; ties to the lower
 * class).  r->colour_acc is the share of the held-out images so given
 * their own class, r->colour_chance the share of the held-out images in
 * their most common class (what always naming one class scores).
 * channel_perm and invert are 1 when colour_acc < colour_chance +
 * max(VIT_RECIPE_COLOUR_MARGIN, 3 sqrt(chance (1 - chance) / n)), n the
 * held-out count (at least 20, else untested): the mean colour predicts
 * the class no better than chance within three standard errors, so
 * reordering or inverting the colours loses nothing the classes need
 * (images in random colours: yes; CIFAR-like photos, where sky is blue and
 * grass green: no).
 *
 * Returns VIT_OK; VIT_EINVAL for a NULL d, model or r, a count, side,
 * channel or class count below 1, images whose shape differs from d's, or
 * a model whose shape vit_config_check refuses for these images. */
int vit_recipe_pick(const vit_recipe_data *d, const vit_config *model, vit_recipe *r, char *why,
                    size_t cap);

VIT_END_DECLS

#endif
