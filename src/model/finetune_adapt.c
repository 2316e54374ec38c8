/*
 * Adapting trained weights to new data: position embeddings resampled to
 * another grid (bicubic, as timm's resample_abs_pos_embed), the first
 * layer to another channel count, a new head; and an input normalisation
 * folded into the first layer.  See vit/finetune.h.
 */
#include "vit/finetune.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model_tensors.h"

/* Keys' cubic convolution weights for offset t in [0, 1) with a = -0.75
 * (PyTorch's upsample_bicubic2d): taps at -1, 0, 1, 2. */
static void cubic_weights(double t, double w[4])
{
    const double a = -0.75;
    double x;
    x = t + 1; /* |x| in [1, 2) */
    w[0] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    x = t;     /* [0, 1) */
    w[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
    x = 1 - t;
    w[2] = ((a + 2) * x - (a + 3)) * x * x + 1;
    x = 2 - t;
    w[3] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

/* Output index i of n over an input of g: the first tap and its weights. */
static int taps(int i, int n, int g, double w[4])
{
    double real = ((double)g / n) * (i + 0.5) - 0.5;
    double f = floor(real);
    cubic_weights(real - f, w);
    return (int)f - 1;
}

static int clampi(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }

/* src [prefix + gh*gw, dim] -> dst [prefix + nh*nw, dim] */
int vit_pos_resample(const vit_real *src, int prefix, int gh, int gw, int dim, vit_real *dst,
                     int nh, int nw)
{
    if (!src || !dst)
        return vit_fail(VIT_EINVAL, "vit_pos_resample: %s is NULL", !src ? "src" : "dst");
    if (prefix < 0 || gh < 1 || gw < 1 || dim < 1 || nh < 1 || nw < 1)
        return vit_fail(VIT_EINVAL, "vit_pos_resample: prefix %d, grid %dx%d -> %dx%d, dim %d: "
                        "sizes must be >= 1 (prefix >= 0)", prefix, gh, gw, nh, nw, dim);
    memcpy(dst, src, (size_t)prefix * (size_t)dim * sizeof *dst);
    const vit_real *g = src + (size_t)prefix * dim;
    vit_real *o = dst + (size_t)prefix * dim;
    for (int y = 0; y < nh; y++) {
        double wy[4];
        int y0 = taps(y, nh, gh, wy);
        for (int x = 0; x < nw; x++) {
            double wx[4];
            int x0 = taps(x, nw, gw, wx);
            for (int d = 0; d < dim; d++) {
                double acc = 0;
                for (int a = 0; a < 4; a++) {
                    const vit_real *row = g + (size_t)clampi(y0 + a, gh - 1) * gw * dim;
                    double r = 0;
                    for (int b = 0; b < 4; b++)
                        r += wx[b] * (double)row[(size_t)clampi(x0 + b, gw - 1) * dim + d];
                    acc += wy[a] * r;
                }
                o[((size_t)y * nw + x) * dim + d] = (vit_real)acc;
            }
        }
    }
    return VIT_OK;
}

static const vit_model_tensor *find(const vit_model *m, const char *name)
{
    for (int i = 0; i < vit_model_tensor_count(m); i++)
        if (strcmp(vit_model_tensor_at(m, i)->name, name) == 0)
            return vit_model_tensor_at(m, i);
    return NULL;
}

/* The first layer's weight and bias: rows (tap * C + c) of [taps * C, out]. */
static const char *first_w(const vit_config *c) { return c->stem > 0 ? "stem.w" : "patch.w"; }
static const char *first_b(const vit_config *c) { return c->stem > 0 ? "stem.b" : "patch.b"; }

int vit_model_fold_input_norm(vit_model *m, const double *mean, const double *std)
{
    if (!m || !mean || !std)
        return vit_fail(VIT_EINVAL, "vit_model_fold_input_norm: %s is NULL",
                        !m ? "m" : !mean ? "mean" : "std");
    const vit_config *c = vit_model_config(m);
    if (c->stem > 0 || c->patch_pad > 0)
        return vit_fail(VIT_EINVAL, "vit_model_fold_input_norm: the first layer pads the image "
                        "(%s): a zero pad is not the normalised zero, so the normalisation "
                        "cannot be folded", c->stem > 0 ? "stem" : "patch_pad > 0");
    for (int ch = 0; ch < c->channels; ch++)
        if (!(std[ch] > 0) || !isfinite(std[ch]) || !isfinite(mean[ch]))
            return vit_fail(VIT_EINVAL, "vit_model_fold_input_norm: channel %d: mean %g, std %g "
                            "(std must be positive, both finite)", ch, mean[ch], std[ch]);
    const vit_model_tensor *tw = find(m, first_w(c)), *tb = find(m, first_b(c));
    vit_real *w = vit_model_params(m) + tw->offset, *b = vit_model_params(m) + tb->offset;
    const int C = c->channels, rows = tw->shape[0], out = tw->shape[1];
    for (int d = 0; d < out; d++) {
        double shift = 0;
        for (int r = 0; r < rows; r++)
            shift += (double)w[(size_t)r * out + d] * mean[r % C] / std[r % C];
        b[d] = (vit_real)((double)b[d] - shift);
    }
    for (int r = 0; r < rows; r++)
        for (int d = 0; d < out; d++)
            w[(size_t)r * out + d] = (vit_real)((double)w[(size_t)r * out + d] / std[r % C]);
    return VIT_OK;
}

void vit_config_take_arch(vit_config *dst, const vit_config *src)
{
#define TAKE(f) dst->f = src->f;
    TAKE(patch) TAKE(dim) TAKE(depth) TAKE(heads) TAKE(mlp) TAKE(pool) TAKE(patch_stride)
    TAKE(patch_pad) TAKE(lsa) TAKE(stem) TAKE(stem2) TAKE(local_conv) TAKE(ln_eps)
    TAKE(image_norm) TAKE(data_norm) TAKE(data_mean) TAKE(data_std)
    TAKE(arch) TAKE(arch_cfg) /* another architecture's keys live there */
#undef TAKE
    /* 1 -> C channels: each reads the gray statistics (repeated weights / C
     * then compute what the gray model did on equal channels) */
    if (dst->data_norm && dst->data_mean.n == 1 && dst->channels > 1
        && dst->channels <= VIT_CHANNELS_MAX) {
        for (int c = 1; c < dst->channels; c++) {
            dst->data_mean.v[c] = dst->data_mean.v[0];
            dst->data_std.v[c] = dst->data_std.v[0];
        }
        dst->data_mean.n = dst->data_std.n = dst->channels;
    }
    memcpy(dst->arch_given, src->arch_given, sizeof dst->arch_given);
}

static int same_arch(const vit_config *a, const vit_config *b)
{
    vit_config t = *a;
    vit_config_take_arch(&t, b);
    return memcmp(&t, a, sizeof t) == 0;
}

static void grid_of(const vit_config *c, int *gh, int *gw)
{
    vit_patch_shape ps = vit_config_patch_shape(c);
    ps.batch = 1;
    vit_patch_grid(&ps, gh, gw);
}

/* "[d0, d1, ...]" of t into buf. */
static const char *shape_text(const vit_model_tensor *t, char *buf, size_t cap)
{
    size_t l = (size_t)snprintf(buf, cap, "[");
    for (int k = 0; k < t->ndim && l < cap; k++)
        l += (size_t)snprintf(buf + l, cap - l, "%s%d", k ? ", " : "", t->shape[k]);
    if (l < cap)
        snprintf(buf + l, cap - l, "]");
    return buf;
}

/* 1 if target tensor t is source tensor s with Cd channels where s has
 * Cs: a first layer, [taps * C, out] rows tap * C + c (a patch embedding
 * or a stem's convolution, whatever the architecture calls it). */
static int channel_rows(const vit_model_tensor *s, const vit_model_tensor *t, int Cs, int Cd)
{
    return s->ndim == 2 && t->ndim == 2 && s->shape[1] == t->shape[1] && s->shape[0] % Cs == 0 &&
           t->shape[0] % Cd == 0 && s->shape[0] / Cs == t->shape[0] / Cd;
}

/* The first layer [taps * Cs, out] of src into dst [taps * Cd, out]. */
static void adapt_channels(const vit_real *s, int Cs, vit_real *d, int Cd, int taps, int out)
{
    for (int t = 0; t < taps; t++)
        for (int o = 0; o < out; o++) {
            if (Cs == Cd) {
                for (int c = 0; c < Cd; c++)
                    d[((size_t)t * Cd + c) * out + o] = s[((size_t)t * Cs + c) * out + o];
            } else if (Cd == 1) { /* summed: a gray image as Cs equal channels */
                double sum = 0;
                for (int c = 0; c < Cs; c++)
                    sum += (double)s[((size_t)t * Cs + c) * out + o];
                d[(size_t)t * out + o] = (vit_real)sum;
            } else { /* 1 -> Cd: repeated, scaled so equal channels compute the same */
                for (int c = 0; c < Cd; c++)
                    d[((size_t)t * Cd + c) * out + o] =
                        (vit_real)((double)s[(size_t)t * out + o] / Cd);
            }
        }
}

int vit_model_adapt(const vit_model *src, const vit_config *target, const vit_adapt_opts *o,
                    vit_rng *rng, vit_model **out, char *note, size_t cap)
{
    if (out)
        *out = NULL;
    if (!src || !target || !o || !rng || !out)
        return vit_fail(VIT_EINVAL, "vit_model_adapt: %s is NULL",
                        !src ? "src" : !target ? "target" : !o ? "o" : !rng ? "rng" : "out");
    const vit_config *sc = vit_model_config(src);
    if (!same_arch(target, sc))
        return vit_fail(VIT_EINVAL, "vit_model_adapt: the target's architecture (dim, depth, "
                        "heads, mlp, patch, ...) is not the source's (vit_config_take_arch)");
    const int Cs = sc->channels, Cd = target->channels;
    if (Cs != Cd && !(Cd == 1 || Cs == 1))
        return vit_fail(VIT_EINVAL, "vit_model_adapt: the source reads %d channels, the data has "
                        "%d: only 3 -> 1 (summed) and 1 -> 3 (repeated) are adapted", Cs, Cd);
    if (sc->data_norm && Cs > 1 && Cd != Cs)
        return vit_fail(VIT_EINVAL, "vit_model_adapt: the source normalises its %d channels by "
                        "its training set's statistics (data_norm), which %d channel%s cannot "
                        "keep: fine-tune it on %d-channel images (gray ones as equal channels)",
                        Cs, Cd, Cd == 1 ? "" : "s", Cs);
    if (o->keep_head && target->classes != sc->classes)
        return vit_fail(VIT_EINVAL, "vit_model_adapt: the head is to be kept, but the source has "
                        "%d classes and the data %d", sc->classes, target->classes);
    vit_model *m = vit_model_new(target);
    if (!m) {
        char why[300];
        snprintf(why, sizeof why, "%s", vit_last_error());
        return vit_fail(VIT_EINVAL, "vit_model_adapt: the %s model of the source does not fit "
                        "%dx%d images: %s", vit_model_arch(src)->name, target->image_height,
                        target->image_width, why);
    }
    vit_model_init(m, rng);
    const int is_vit = vit_model_arch(src) == vit_arch_vit();
    int sgh = 0, sgw = 0, tgh = 0, tgw = 0; /* the ViT's grids: its pos */
    if (is_vit) {
        grid_of(sc, &sgh, &sgw);
        grid_of(target, &tgh, &tgw);
    }
    char buf[256] = "";
    size_t l = 0;
    int rc = VIT_OK;
    const vit_real *sp = vit_model_params((vit_model *)(uintptr_t)src);
    for (int i = 0; i < vit_model_tensor_count(m) && rc == VIT_OK; i++) {
        const vit_model_tensor *t = vit_model_tensor_at(m, i), *s = find(src, t->name);
        vit_real *d = vit_model_params(m) + t->offset;
        if (!s) { /* cannot happen for one architecture and keys: said, not crashed */
            rc = vit_fail(VIT_EINVAL, "vit_model_adapt: the source has no tensor %s", t->name);
            break;
        }
        const vit_real *v = sp + s->offset;
        if (strncmp(t->name, "head.", 5) == 0 && !o->keep_head)
            continue; /* vit_model_init's */
        if (is_vit && strcmp(t->name, "pos") == 0 && (sgh != tgh || sgw != tgw)) {
            rc = vit_pos_resample(v, 1, sgh, sgw, sc->dim, d, tgh, tgw);
            l += (size_t)snprintf(buf + l, sizeof buf - l, "%sposition embeddings %dx%d -> %dx%d "
                                  "(bicubic)", l ? "; " : "", sgh, sgw, tgh, tgw);
        } else if (Cs != Cd && channel_rows(s, t, Cs, Cd)) {
            adapt_channels(v, Cs, d, Cd, s->shape[0] / Cs, s->shape[1]);
            l += (size_t)snprintf(buf + l, sizeof buf - l, "%s%d -> %d channels (%s)",
                                  l ? "; " : "", Cs, Cd, Cd == 1 ? "summed" : "repeated / 3");
        } else if (s->size == t->size && s->ndim == t->ndim &&
                   memcmp(s->shape, t->shape, (size_t)t->ndim * sizeof *t->shape) == 0) {
            memcpy(d, v, t->size * sizeof *d);
        } else {
            char a[64], b[64];
            rc = vit_fail(VIT_EINVAL, "vit_model_adapt: tensor %s is %s in the source and %s "
                          "for the data: not adapted", t->name, shape_text(s, a, sizeof a),
                          shape_text(t, b, sizeof b));
        }
    }
    if (l < sizeof buf)
        l += (size_t)snprintf(buf + l, sizeof buf - l, "%s%s", l ? "; " : "",
                              o->keep_head ? "head kept" : "new head");
    if (!o->keep_head && l < sizeof buf)
        snprintf(buf + l, sizeof buf - l, " (%d classes)", target->classes);
    if (rc != VIT_OK) {
        vit_model_free(m);
        return rc;
    }
    if (note && cap)
        snprintf(note, cap, "%s", buf);
    *out = m;
    return VIT_OK;
}
