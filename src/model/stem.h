/* Internal: the convolutional stem the ViT and the Swin share (their keys
 * stem and stem2; stem.c): a 3x3 convolution (stride 1, padding 1) of
 * `stem` channels and GELU over the image, then optionally a 4x4
 * convolution at stride 2 (padding 1) of `stem2` channels and GELU over
 * its map.  The architecture's patch embedding then cuts its patches from
 * the last map (vit_stem_map).  Each convolution is a patch embedding with
 * overlapping patches (vit/embeddings.h): its weights are [K*K*Cin, Cout]
 * (Conv2d's [Cout, Cin, K, K] as vit_patch_embed lays patches out). */
#ifndef VIT_SRC_MODEL_STEM_H
#define VIT_SRC_MODEL_STEM_H

#include <stddef.h>

#include "vit/embeddings.h"
#include "vit/tape.h"

typedef struct vit_stem {
    int height, width, channels; /* the image's */
    int stem;                    /* the 3x3 layer's channels, 0: no stem */
    int stem2;                   /* the 4x4 stride-2 layer's, 0: none (needs stem) */
} vit_stem;

/* The 3x3 layer as a patch shape for one image (batch 1): dim = stem, its
 * H*W outputs the [H, W, stem] map.  Meaningful for stem > 0. */
vit_patch_shape vit_stem_shape(const vit_stem *s);

/* The 4x4 stride-2 layer over stem's map, batch 1: dim = stem2, its
 * H/2 * W/2 outputs the [H/2, W/2, stem2] map.  Meaningful for stem2 > 0. */
vit_patch_shape vit_stem2_shape(const vit_stem *s);

/* What the patches are cut from: the image, stem's H x W x stem map, or
 * stem2's H/2 x W/2 x stem2 map (each pointer overwritten). */
void vit_stem_map(const vit_stem *s, int *height, int *width, int *channels);

/* VIT_OK, or VIT_EINVAL "stem2: ..." for a stem2 without a stem or an
 * image of odd height or width under stem2 (its stride 2 halves it). */
int vit_stem_check(const vit_stem *s);

/* One stem layer on the tape: GELU of the convolution of shape ps (batch
 * 1, as vit_stem_shape gives it) over x [batch, H, W, Cin] with weights w
 * [K*K*Cin, Cout] and bias b [Cout] -> [batch, oh, ow, Cout], the map the
 * next layer or the patches read.  NULL on error (the tape says). */
vit_tensor *vit_stem_layer(vit_tape *tape, vit_patch_shape ps, int batch, vit_tensor *x,
                           vit_tensor *w, vit_tensor *b);

/* The stem's multiply-adds per image: H*W * 9*C * stem, plus H/2*W/2 *
 * 16*stem * stem2 with stem2 (0 without a stem). */
size_t vit_stem_macs(const vit_stem *s);

#endif
