/*
 * The convolutional stem of the ViT and the Swin (stem.h): shapes, check,
 * forward on the tape and cost, written once so that the two keys mean the
 * same in both architectures.
 */
#include "stem.h"

#include "error.h"

vit_patch_shape vit_stem_shape(const vit_stem *s)
{
    return (vit_patch_shape){.batch = 1, .height = s->height, .width = s->width,
                             .channels = s->channels, .patch = 3, .dim = s->stem, .stride = 1,
                             .pad = 1};
}

vit_patch_shape vit_stem2_shape(const vit_stem *s)
{
    return (vit_patch_shape){.batch = 1, .height = s->height, .width = s->width,
                             .channels = s->stem, .patch = 4, .dim = s->stem2, .stride = 2,
                             .pad = 1};
}

void vit_stem_map(const vit_stem *s, int *height, int *width, int *channels)
{
    int half = s->stem > 0 && s->stem2 > 0;
    *height = s->height >> half;
    *width = s->width >> half;
    *channels = half ? s->stem2 : s->stem > 0 ? s->stem : s->channels;
}

int vit_stem_check(const vit_stem *s)
{
    if (s->stem2 > 0 && s->stem == 0)
        return vit_fail(VIT_EINVAL, "stem2: %d channels of a second stem convolution need a "
                        "first (stem > 0)", s->stem2);
    if (s->stem2 > 0 && (s->height % 2 || s->width % 2))
        return vit_fail(VIT_EINVAL, "stem2: its stride 2 halves the %dx%d feature map, which "
                        "needs an even height and width", s->height, s->width);
    return VIT_OK;
}

/* The convolution's [batch, oh*ow, Cout] output is, row by row, the
 * [batch, oh, ow, Cout] image of Cout channels the next layer reads. */
vit_tensor *vit_stem_layer(vit_tape *tape, vit_patch_shape ps, int batch, vit_tensor *x,
                           vit_tensor *w, vit_tensor *b)
{
    int oh = 0, ow = 0;
    vit_patch_grid(&ps, &oh, &ow);
    ps.batch = batch;
    vit_tensor *y = vit_op_gelu(tape, vit_op_patch_embed(tape, &ps, x, w, b));
    int shape[4] = {batch, oh, ow, ps.dim};
    return vit_op_reshape(tape, y, 4, shape);
}

size_t vit_stem_macs(const vit_stem *s)
{
    if (s->stem <= 0)
        return 0;
    size_t hw = (size_t)s->height * s->width;
    size_t macs = hw * 9 * s->channels * s->stem;
    if (s->stem2 > 0)
        macs += (size_t)(s->height / 2) * (s->width / 2) * 16 * s->stem * s->stem2;
    return macs;
}
