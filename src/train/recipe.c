/*
 * The recipe derived from the data (vit/recipe.h): patch, batch, epochs,
 * warm-up and augmentation from the training set's size and image shape.
 */
#include "vit/recipe.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* The mirror test's limit on the median class asymmetry. */
#define FLIP_BELOW 0.35
#define FLIP_READ 8192

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over the classes of sum |m - mirror(m)| / sum |m - mean(m)|
 * for the class mean images m of up to FLIP_READ images of ds, evenly
 * spread; -1 when no class has a non-constant mean (or out of memory). */
static double mirror_asymmetry(const vit_dataset *ds)
{
    int H = ds->height, W = ds->width, C = ds->channels, K = ds->classes;
    size_t img = (size_t)H * W * C;
    double *mean = calloc((size_t)K * img, sizeof *mean), *a = malloc((size_t)K * sizeof *a);
    int *n = calloc((size_t)K, sizeof *n);
    double med = -1;
    if (!mean || !a || !n)
        goto out;
    int reads = ds->count < FLIP_READ ? ds->count : FLIP_READ;
    for (int r = 0; r < reads; r++) {
        int i = (int)((long long)r * ds->count / reads), k = ds->labels[i];
        const vit_real *x = ds->images + (size_t)i * img;
        double *m = mean + (size_t)k * img;
        for (size_t j = 0; j < img; j++)
            m[j] += (double)x[j];
        n[k]++;
    }
    /* Each class's mean against its mirror, over its distance to the
     * other classes' means: background pixels add nothing to either. */
    int used = 0;
    for (int k = 0; k < K; k++) {
        if (!n[k])
            continue;
        double *m = mean + (size_t)k * img;
        for (size_t j = 0; j < img; j++)
            m[j] /= n[k];
    }
    for (int k = 0; k < K; k++) {
        if (!n[k])
            continue;
        const double *m = mean + (size_t)k * img;
        double diff = 0, others = 0;
        int no = 0;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < C; c++)
                    diff += fabs(m[((size_t)y * W + x) * C + c]
                                 - m[((size_t)y * W + (W - 1 - x)) * C + c]);
        for (int o = 0; o < K; o++) {
            if (o == k || !n[o])
                continue;
            const double *q = mean + (size_t)o * img;
            for (size_t j = 0; j < img; j++)
                others += fabs(m[j] - q[j]);
            no++;
        }
        if (no && others > 0)
            a[used++] = diff / (others / no);
    }
    if (used) {
        qsort(a, (size_t)used, sizeof *a, cmp_double);
        med = used % 2 ? a[used / 2] : 0.5 * (a[used / 2 - 1] + a[used / 2]);
    }
out:
    free(mean);
    free(a);
    free(n);
    return med;
}

/* Read r of the colour test is held out: a quarter of the reads, picked
 * by the top two bits of Knuth's multiplicative hash of r, so that no
 * period in the order of the labels lines up with the split. */
static int held_out(int r) { return ((uint32_t)r * 2654435761u) >> 30 == 0; }

/* The colour test (vit/recipe.h): nearest class mean of the per-image mean
 * colour, a quarter of the images read held out.  *acc and *chance stay -1 when
 * untested (fewer than 20 held out, or out of memory); returns 1 when the
 * mean colour predicts the class no better than chance. */
static int colour_free(const vit_dataset *ds, double *acc, double *chance)
{
    int H = ds->height, W = ds->width, K = ds->classes;
    size_t n = (size_t)H * W;
    *acc = *chance = -1;
    int reads = ds->count < FLIP_READ ? ds->count : FLIP_READ, held = 0;
    for (int r = 0; r < reads; r++)
        held += held_out(r);
    if (held < 20 || K < 2)
        return 0;
    double *mean = calloc((size_t)K * 3, sizeof *mean), *colour = malloc((size_t)reads * 3 * sizeof *colour);
    int *fit = calloc((size_t)K, sizeof *fit), *seen = calloc((size_t)K, sizeof *seen);
    int ok = 0;
    if (!mean || !colour || !fit || !seen)
        goto out;
    for (int r = 0; r < reads; r++) {
        int i = (int)((long long)r * ds->count / reads);
        const vit_real *x = ds->images + (size_t)i * n * 3;
        double s[3] = {0, 0, 0};
        for (size_t p = 0; p < n; p++)
            for (int c = 0; c < 3; c++)
                s[c] += x[p * 3 + c];
        for (int c = 0; c < 3; c++)
            colour[r * 3 + c] = s[c] / (double)n;
        if (held_out(r))
            continue;
        int k = ds->labels[i];
        fit[k]++;
        for (int c = 0; c < 3; c++)
            mean[k * 3 + c] += colour[r * 3 + c];
    }
    for (int k = 0; k < K; k++)
        for (int c = 0; c < 3 && fit[k]; c++)
            mean[k * 3 + c] /= fit[k];
    int right = 0, n_held = 0, most = 0;
    for (int r = 0; r < reads; r++) {
        if (!held_out(r))
            continue;
        int i = (int)((long long)r * ds->count / reads), best = -1;
        double best_d = 0;
        for (int k = 0; k < K; k++) {
            if (!fit[k])
                continue;
            double d = 0;
            for (int c = 0; c < 3; c++)
                d += (colour[r * 3 + c] - mean[k * 3 + c]) * (colour[r * 3 + c] - mean[k * 3 + c]);
            if (best < 0 || d < best_d) {
                best = k;
                best_d = d;
            }
        }
        right += best == ds->labels[i];
        n_held++;
        if (++seen[ds->labels[i]] > most)
            most = seen[ds->labels[i]];
    }
    *acc = (double)right / n_held;
    *chance = (double)most / n_held;
    double se3 = 3 * sqrt(*chance * (1 - *chance) / n_held);
    ok = *acc < *chance + (se3 > VIT_RECIPE_COLOUR_MARGIN ? se3 : VIT_RECIPE_COLOUR_MARGIN);
out:
    free(mean);
    free(colour);
    free(fit);
    free(seen);
    return ok;
}

int vit_recipe_pick(const vit_recipe_data *d, const vit_config *model, vit_recipe *r, char *why,
                    size_t cap)
{
    if (!d || !model || !r)
        return vit_fail(VIT_EINVAL, "vit_recipe_pick: NULL argument");
    if (d->count < 1 || d->height < 1 || d->width < 1 || d->channels < 1 || d->classes < 1)
        return vit_fail(VIT_EINVAL, "vit_recipe_pick: %d images of %dx%dx%d in %d classes: "
                        "every figure must be at least 1", d->count, d->height, d->width,
                        d->channels, d->classes);
    const vit_dataset *ds = d->images;
    if (ds && (ds->count < 1 || ds->height != d->height || ds->width != d->width
               || ds->channels != d->channels || !ds->images || !ds->labels))
        return vit_fail(VIT_EINVAL, "vit_recipe_pick: the images are not %dx%dx%d",
                        d->height, d->width, d->channels);
    memset(r, 0, sizeof *r);
    /* Patch: the model's own for images no larger than its own that it
     * divides (its stride and padding then go with it), else picked. */
    vit_config c = *model;
    int larger = d->height > model->image_height || d->width > model->image_width;
    r->patch = model->patch;
    r->patch_fits = 1;
    if (larger || d->height % model->patch || d->width % model->patch) {
        int rc = vit_config_pick_patch(d->height, d->width, 8, &r->patch, &r->patch_fits,
                                       r->patch_why, sizeof r->patch_why);
        if (rc)
            return rc;
    }
    int own = r->patch == model->patch && d->height == model->image_height
              && d->width == model->image_width;
    if (!own)
        c.patch_stride = c.patch_pad = 0;
    /* Stem: the model's when given (vit_config_given: 0 too), else a 3x3
     * convolution of VIT_RECIPE_STEM channels for images the model was
     * not shaped for, up to patches of VIT_RECIPE_STEM_PATCH: their 16 raw
     * pixels each become a token in one linear map, and local features
     * first are worth more than their cost (Fashion-MNIST, 24 epochs:
     * 92.36% against 91.53%).  Its feature map is full size, so for larger
     * images (a 224x224 photo: 50,176 pixels of 16 channels) it would cost
     * several times the transformer. */
    const int gave_stem = vit_config_given(model, "stem") == 1,
              gave_stem2 = vit_config_given(model, "stem2") == 1,
              gave_local = vit_config_given(model, "local_conv") == 1;
    r->stem = gave_stem ? model->stem
            : !own && r->patch <= VIT_RECIPE_STEM_PATCH ? VIT_RECIPE_STEM : 0;
    /* A second, strided stem layer for the large sets: a token then starts
     * from two layers of local features, not one (Fashion-MNIST, 76 epochs:
     * see docs/benchmarks.md), and the half-size map it makes keeps the
     * patch embedding as cheap.  The patches are then cut from that map. */
    int even = d->height % 2 == 0 && d->width % 2 == 0;
    r->stem2 = gave_stem2 ? model->stem2
             : r->stem > 0 && !own && even && d->count >= VIT_RECIPE_STEM2_COUNT
               ? VIT_RECIPE_STEM2 : 0;
    if (r->stem > 0 && r->stem2 > 0 && !own && even) {
        char half[128];
        int rc = vit_config_pick_patch(d->height / 2, d->width / 2, 8, &r->patch, &r->patch_fits,
                                       half, sizeof half);
        if (rc)
            return rc;
        snprintf(r->patch_why, sizeof r->patch_why, "%s (stem2's map, half the image)", half);
    }
    /* The grid's neighbourhoods in every block (vit_op_local_conv), where
     * the second stem layer goes: on Fashion-MNIST they were measured
     * together (docs/benchmarks.md); a small set has not been shown to gain. */
    r->local_conv = gave_local ? model->local_conv : r->stem2 > 0;
    const vit_arch *arch = vit_config_arch(model);
    if (arch != vit_arch_vit()) { /* the rules above are the ViT's: its keys */
        r->patch = model->patch;
        r->patch_fits = 1;
        r->patch_why[0] = 0;
        r->stem = r->stem2 = r->local_conv = 0;
    }
    c.stem = r->stem;
    c.stem2 = r->stem2;
    c.local_conv = r->local_conv;
    c.patch = r->patch;
    c.image_height = d->height;
    c.image_width = d->width;
    c.channels = d->channels;
    c.classes = d->classes;
    /* Another architecture's keys as its adapt hook fits them to the data:
     * the model the epochs are costed with. */
    if (arch != vit_arch_vit() && arch->adapt) {
        int rc = arch->adapt(&c, d->count, NULL, 0);
        if (rc != VIT_OK)
            return rc;
    }
    double macs = (double)vit_config_macs(&c);
    if (macs <= 0)
        return VIT_EINVAL; /* the message is vit_config_check's */
    r->batch = d->count < 10000 ? 32 : d->count <= 200000 ? 64 : 128;
    /* 140 epochs, or as many as VIT_RECIPE_TRAIN_MACS pays for. */
    double per_epoch = 3.0 * macs * d->count;
    double fit = floor(VIT_RECIPE_TRAIN_MACS / per_epoch);
    r->epochs = fit >= 140 ? 140 : fit < 1 ? 1 : (int)fit;
    r->warmup = r->epochs / 28.0;
    /* A set seen 140 times needs the shift that keeps it from being
     * learnt by heart (the 32x32 RGB set: 94.0% with 2 pixels, 92.2% with
     * 1); one of 10k images or more, seen far fewer times, is underfit,
     * and half the shift is worth a point (Fashion-MNIST). */
    int side = d->height < d->width ? d->height : d->width;
    int per = d->count < 10000 ? 14 : 28;
    r->shift = side / per > 1 ? side / per : 1;
    r->asymmetry = ds ? mirror_asymmetry(ds) : -1;
    r->flip = r->asymmetry >= 0 && r->asymmetry < FLIP_BELOW;
    r->train_macs = per_epoch * r->epochs;
    /* Colour: photos vary in light and white balance, so colour images get
     * the jitter; reordered or inverted colours only where the test finds
     * no class in the mean colour. */
    r->colour_acc = r->colour_chance = -1;
    if (d->channels == 3) {
        r->brightness = r->contrast = r->saturation = VIT_RECIPE_JITTER;
        r->hue = VIT_RECIPE_HUE;
        r->grayscale = VIT_RECIPE_GRAYSCALE;
        r->channel_perm = r->invert = ds && colour_free(ds, &r->colour_acc, &r->colour_chance);
        /* Each image in its own colours: standardised per image, every
         * channel becomes the same shape up to its sign (which invert
         * covers), and the network learns shapes from the first epoch. */
        r->image_norm = r->channel_perm && !model->data_norm; /* one normalisation at a time */
        /* Brightness and contrast scale each image by one factor and shift
         * its channels: the standardisation undoes both (but for the clamp
         * to [0, 1]), so they would cost draws and change nothing. */
        if (r->image_norm)
            r->brightness = r->contrast = 0;
        /* Colour kept: the set's mean and std put each channel near mean 0
         * and std 1 (on a proxy whose colour names the class, 12 epochs:
         * 97.17% against 94.73% over 3 seeds, docs/benchmarks-log.md). */
        r->data_norm = !r->image_norm && !model->image_norm;
    }
    if (why && cap > 0) {
        char sym[64] = "";
        if (r->asymmetry >= 0)
            snprintf(sym, sizeof sym, ", %s (class means' mirror asymmetry %.2f)",
                     r->flip ? "flip" : "no flip", r->asymmetry);
        snprintf(why, cap, "%d images of %dx%dx%d: batch %d (%s images), %d epochs (%s), "
                 "shift %d%s%s", d->count, d->height, d->width, d->channels, r->batch,
                 r->batch == 32 ? "under 10k" : r->batch == 64 ? "10k-200k" : "over 200k",
                 r->epochs, r->epochs == 140 ? "at most 140" : "what " VIT_RECIPE_TRAIN_MACS_TEXT
                 " multiply-adds of training pay for", r->shift, per == 14 ? " (a 14th of the side)"
                 : " (a 28th of the side: 10k images or more)", sym);
        if (r->stem > 0 && !gave_stem) {
            size_t at = strlen(why);
            snprintf(why + at, cap - at, ", stem %d (images other than the model's %dx%d)",
                     r->stem, model->image_height, model->image_width);
        }
        if (r->stem2 > 0 && !gave_stem2) {
            size_t at = strlen(why);
            snprintf(why + at, cap - at, ", stem2 %d and patch %d of its %dx%d map (%d images "
                     "or more)", r->stem2, r->patch, d->height / 2, d->width / 2,
                     VIT_RECIPE_STEM2_COUNT);
        }
        if (r->local_conv > 0 && !gave_local) {
            size_t at = strlen(why);
            snprintf(why + at, cap - at, ", local_conv 1 (with stem2)");
        }
        if (d->channels == 3) {
            size_t at = strlen(why);
            if (r->image_norm)
                snprintf(why + at, cap - at, ", saturation %g, hue %g, grayscale %g (colour "
                         "images; no brightness or contrast: image_norm undoes them)",
                         VIT_RECIPE_JITTER, VIT_RECIPE_HUE, VIT_RECIPE_GRAYSCALE);
            else
                snprintf(why + at, cap - at, ", colour jitter %g, hue %g, grayscale %g (colour "
                         "images)", VIT_RECIPE_JITTER, VIT_RECIPE_HUE, VIT_RECIPE_GRAYSCALE);
        }
        if (r->colour_acc >= 0) {
            size_t at = strlen(why);
            snprintf(why + at, cap - at, ", %s (mean colour names the class for %.1f%% of "
                     "held-out images, chance %.1f%%)", r->channel_perm ? "channel_perm and "
                     "invert" : "no channel_perm or invert", 100 * r->colour_acc,
                     100 * r->colour_chance);
            if (r->image_norm) {
                at = strlen(why);
                snprintf(why + at, cap - at, ", image_norm 1 (colour carries no class)");
            }
        }
        if (r->data_norm) {
            size_t at = strlen(why);
            snprintf(why + at, cap - at, ", data_norm 1 (colour kept: each channel by the set's "
                     "mean and std)");
        }
    }
    return VIT_OK;
}
