/* vit_image_fit: an image converted to the channel count and resized to the
 * size a model expects.  The resampling is separable: each output row and
 * column is a weighted sum of input pixels with a triangle (tent) kernel,
 * widened by the shrink factor when the image gets smaller, so that
 * shrinking averages every input pixel instead of skipping most of them. */
#include "vit/data.h"
#include "data_internal.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The taps of one axis: output o reads n[o] inputs from first[o] with
 * weights w[o * span ...]. */
typedef struct {
    int *first, *n, span;
    double *w;
} taps;

static void taps_free(taps *t)
{
    free(t->first);
    free(t->n);
    free(t->w);
    memset(t, 0, sizeof *t);
}

static int taps_make(taps *t, int in, int out)
{
    double scale = (double)in / (double)out, support = scale > 1 ? scale : 1;
    t->span = (int)ceil(2 * support) + 2;
    t->first = malloc((size_t)out * sizeof *t->first);
    t->n = malloc((size_t)out * sizeof *t->n);
    t->w = malloc((size_t)out * (size_t)t->span * sizeof *t->w);
    if (t->first == NULL || t->n == NULL || t->w == NULL) {
        taps_free(t);
        return 0;
    }
    for (int o = 0; o < out; o++) {
        double centre = (o + 0.5) * scale, sum = 0;
        int lo = (int)floor(centre - support), hi = (int)ceil(centre + support);
        lo = lo < 0 ? 0 : lo;
        hi = hi > in ? in : hi;
        hi = hi - lo > t->span ? lo + t->span : hi;
        double *w = t->w + (size_t)o * (size_t)t->span;
        for (int x = lo; x < hi; x++) {
            double d = fabs((x + 0.5 - centre) / support);
            w[x - lo] = d < 1 ? 1 - d : 0;
            sum += w[x - lo];
        }
        if (sum <= 0) { /* cannot happen for in, out >= 1; kept safe */
            w[0] = 1;
            sum = 1;
            hi = lo + 1;
        }
        for (int x = lo; x < hi; x++)
            w[x - lo] /= sum;
        t->first[o] = lo;
        t->n[o] = hi - lo;
    }
    return 1;
}

/* Channel conversion of one pixel. */
static void convert(const vit_real *s, int c, vit_real *d, int out_c)
{
    if (c == out_c) {
        memcpy(d, s, (size_t)c * sizeof *d);
    } else if (c == 1) {
        d[0] = d[1] = d[2] = s[0];
    } else {
        d[0] = (vit_real)(0.299 * (double)s[0] + 0.587 * (double)s[1] + 0.114 * (double)s[2]);
    }
}

int vit_image_fit(const vit_real *src, int h, int w, int c, vit_real *dst, int out_h,
                  int out_w, int out_c)
{
    static const char *fn = "vit_image_fit";
    int rc;
    if ((rc = vit_check_ptr(fn, "src", src)) || (rc = vit_check_ptr(fn, "dst", dst)) ||
        (rc = vit_check_dim(fn, "h", h)) || (rc = vit_check_dim(fn, "w", w)) ||
        (rc = vit_check_dim(fn, "out_h", out_h)) || (rc = vit_check_dim(fn, "out_w", out_w)))
        return rc;
    if ((c != 1 && c != 3) || (out_c != 1 && out_c != 3))
        return vit_fail(VIT_EINVAL, "%s: channels must be 1 or 3, got c = %d, out_c = %d", fn, c,
                        out_c);
    /* Channels first (on the smaller of the two images would be cheaper;
     * the images a model classifies are small), then columns, then rows. */
    size_t conv_n = (size_t)h * (size_t)w * (size_t)out_c;
    vit_real *conv = malloc(conv_n * sizeof *conv);
    double *mid = malloc((size_t)h * (size_t)out_w * (size_t)out_c * sizeof *mid);
    taps tx = {0}, ty = {0};
    if (conv == NULL || mid == NULL || !taps_make(&tx, w, out_w) || !taps_make(&ty, h, out_h)) {
        free(conv);
        free(mid);
        taps_free(&tx);
        return vit_fail(VIT_ENOMEM, "%s: out of memory for %dx%d -> %dx%d", fn, h, w, out_h,
                        out_w);
    }
    for (size_t p = 0; p < (size_t)h * (size_t)w; p++)
        convert(src + p * (size_t)c, c, conv + p * (size_t)out_c, out_c);
    for (int y = 0; y < h; y++)
        for (int o = 0; o < out_w; o++)
            for (int ch = 0; ch < out_c; ch++) {
                double s = 0;
                const double *wt = tx.w + (size_t)o * (size_t)tx.span;
                for (int k = 0; k < tx.n[o]; k++)
                    s += wt[k] * (double)conv[((size_t)y * (size_t)w + (size_t)(tx.first[o] + k)) *
                                                  (size_t)out_c + (size_t)ch];
                mid[((size_t)y * (size_t)out_w + (size_t)o) * (size_t)out_c + (size_t)ch] = s;
            }
    for (int o = 0; o < out_h; o++)
        for (int x = 0; x < out_w; x++)
            for (int ch = 0; ch < out_c; ch++) {
                double s = 0;
                const double *wt = ty.w + (size_t)o * (size_t)ty.span;
                for (int k = 0; k < ty.n[o]; k++)
                    s += wt[k] * mid[((size_t)(ty.first[o] + k) * (size_t)out_w + (size_t)x) *
                                         (size_t)out_c + (size_t)ch];
                dst[((size_t)o * (size_t)out_w + (size_t)x) * (size_t)out_c + (size_t)ch] =
                    (vit_real)s;
            }
    free(conv);
    free(mid);
    taps_free(&tx);
    taps_free(&ty);
    return VIT_OK;
}

int vit_data_internal_check_fit(const char *fn, const vit_data_fit *fit)
{
    if ((fit->height == 0) != (fit->width == 0) || fit->height < 0 || fit->width < 0 ||
        fit->height > 4096 || fit->width > 4096)
        return vit_fail(VIT_EINVAL, "%s: image size %dx%d: expected both sides in 1..4096, or "
                        "both 0", fn, fit->height, fit->width);
    if (fit->channels != 0 && fit->channels != 1 && fit->channels != 3)
        return vit_fail(VIT_EINVAL, "%s: channels %d: expected 1, 3 or 0", fn, fit->channels);
    return VIT_OK;
}

int vit_dataset_fit(vit_dataset *ds, const vit_data_fit *fit, vit_data_report *report)
{
    static const char *fn = "vit_dataset_fit";
    int rc;
    if ((rc = vit_check_ptr(fn, "ds", ds)) || (rc = vit_check_ptr(fn, "fit", fit)) ||
        (rc = vit_data_internal_check_fit(fn, fit)))
        return rc;
    int h = fit->height ? fit->height : ds->height, w = fit->width ? fit->width : ds->width;
    int c = fit->channels ? fit->channels : ds->channels;
    if (ds->count <= 0 || (h == ds->height && w == ds->width && c == ds->channels))
        return VIT_OK;
    size_t in = (size_t)ds->height * (size_t)ds->width * (size_t)ds->channels;
    size_t out = (size_t)h * (size_t)w * (size_t)c;
    vit_real *px = malloc((size_t)ds->count * out * sizeof *px);
    if (px == NULL)
        return vit_fail(VIT_ENOMEM, "%s: out of memory for %d images of %dx%dx%d", fn, ds->count,
                        h, w, c);
    for (int i = 0; i < ds->count; i++)
        if ((rc = vit_image_fit(ds->images + (size_t)i * in, ds->height, ds->width, ds->channels,
                                px + (size_t)i * out, h, w, c))) {
            free(px);
            return rc;
        }
    if (report != NULL) {
        report->resized += h != ds->height || w != ds->width ? ds->count : 0;
        report->converted += c != ds->channels ? ds->count : 0;
    }
    free(ds->images);
    ds->images = px;
    ds->height = h;
    ds->width = w;
    ds->channels = c;
    return VIT_OK;
}
